//! The UEFI entry (`kestrel_efi_entry` in `entry.S` calls
//! [`kestrel_efi_main`]): with boot services still running, take what
//! kestrel needs from the firmware, exit boot services, and hand over to
//! the Linux-protocol entry as if a loader had passed the DTB in x0.
//! See docs/arm64-boot.md, "UEFI".
//!
//! Runs relocated, with the firmware's MMU (identity map), caches and
//! stack; no heap, no `klog`. The UEFI calls are the shared ones of
//! `crate::efi`.

use core::ptr::{addr_of, addr_of_mut};

use kernel::arch::aarch64::boot::EfiBoot;

use crate::efi::{Uefi, ACPI_20_GUID, DEVICE_TREE_GUID};

/// Largest DTB accepted (the Linux boot protocol's limit).
const MAX_DTB: usize = 2 << 20;

/// What the UEFI stage found, read by `kestrel_boot_primary`. In `.data`
/// (not `.bss`, which the entry code zeroes) so it survives the hand-over;
/// `valid` is false in the file, so a boot without UEFI ignores it.
#[link_section = ".data.kestrel_efi"]
static mut HANDOFF: EfiBoot = EfiBoot::new();

/// The UEFI stage's result, if the image was started by UEFI firmware.
pub fn handoff() -> Option<&'static EfiBoot> {
    // SAFETY: HANDOFF is written only by `kestrel_efi_main`, which has
    // returned for good before the boot CPU's Rust code runs; from then on
    // it is only read, and no other CPU is running yet.
    let h = unsafe { &*addr_of!(HANDOFF) };
    h.valid.then_some(h)
}

extern "C" {
    static __image_start: u8;
    static __image_end: u8;
}

/// CurrentEL.EL.
fn current_el() -> u64 {
    let el: u64;
    // SAFETY: reading CurrentEL is allowed at EL1 and above.
    unsafe { core::arch::asm!("mrs {}, CurrentEL", out(reg) el, options(nomem, nostack)) };
    (el >> 2) & 3
}

/// Called by `kestrel_efi_entry`. Returns the DTB's address once boot
/// services have ended, or 0 (with the reason printed on the firmware
/// console) if kestrel cannot run here.
#[no_mangle]
extern "C" fn kestrel_efi_main(image: usize, st: usize, bad_relocs: u64, load: usize) -> usize {
    let efi = Uefi { st, image };
    if !Uefi::is_system_table(st) {
        return 0;
    }
    efi.print("kestrel: started by UEFI firmware\n");
    if bad_relocs != 0 {
        efi.print("kestrel: FATAL: the image has relocations of unsupported type\n");
        return 0;
    }
    let el = current_el();
    if el != 2 {
        efi.print(
            "kestrel: FATAL: kestrel is a hypervisor and must be started at EL2, but the \
             firmware runs at another EL (QEMU: -M virt,virtualization=on)\n",
        );
        return 0;
    }
    let Some(dtb) = efi.config_table(&DEVICE_TREE_GUID) else {
        if efi.config_table(&ACPI_20_GUID).is_some() {
            efi.print(
                "kestrel: FATAL: the firmware gives ACPI tables and no device tree; kestrel \
                 needs a device tree on arm64 (QEMU: -M virt,acpi=off makes edk2 pass \
                 QEMU's device tree)\n",
            );
        } else {
            efi.print("kestrel: FATAL: no device tree in the UEFI configuration table\n");
        }
        return 0;
    };
    // SAFETY: the first 8 bytes of the table the firmware registered as
    // the device tree.
    let header: [u8; 8] = unsafe { core::ptr::read_volatile(dtb as *const [u8; 8]) };
    let Some(dtb_size) = kernel::dtb::total_size(&header).filter(|&s| s <= MAX_DTB) else {
        efi.print("kestrel: FATAL: the device tree in the configuration table is not one (bad magic or larger than 2 MiB)\n");
        return 0;
    };
    if !dtb.is_multiple_of(8) {
        efi.print("kestrel: FATAL: the device tree is not 8-byte aligned\n");
        return 0;
    }

    // SAFETY: no other code runs: the firmware called us and waits.
    let h = unsafe { &mut *addr_of_mut!(HANDOFF) };
    *h = EfiBoot::new();
    h.has_cmdline = efi.load_options(&mut h.cmdline);
    efi.vendor(&mut h.vendor);

    // The memory map, then ExitBootServices with its key; a map that
    // changed in between (the key is stale) is taken again.
    if efi.exit_boot_services(h).is_err() {
        return 0;
    }
    h.dtb = dtb as u64;
    h.load_addr = load;
    h.valid = true;
    // What the Linux-protocol entry reads with the MMU off must be in
    // memory: the whole image (code, relocated data, this hand-over) and
    // the DTB.
    // Only the addresses of the linker's image bounds are taken.
    let (start, end) = (
        addr_of!(__image_start) as usize,
        addr_of!(__image_end) as usize,
    );
    kernel::arch::aarch64::mmu::clean_dcache_range(start, end);
    kernel::arch::aarch64::mmu::clean_dcache_range(dtb, dtb + dtb_size);
    dtb
}
