//! The UEFI entry (`kestrel_efi_entry` in `entry.S` calls
//! [`kestrel_efi_main`]): with boot services still running, take what
//! kestrel needs from the firmware, exit boot services, and hand over to
//! the Linux-protocol entry as if a loader had passed the DTB in x0.
//! See docs/arm64-boot.md, "UEFI".
//!
//! Runs relocated, with the firmware's MMU (identity map), caches and
//! stack; no heap, no `klog`. The UEFI services themselves are in the
//! shared `efi.rs`.

use core::ptr::{addr_of, addr_of_mut};

use core::fmt::Write;

use kernel::arch::aarch64::boot::{AcpiRam, ACPI_PPIS};
use kernel::host::efiboot::{EfiBoot, EfiText};
use kernel::host::reserve;

use crate::efi::{Uefi, ACPI_20_GUID, DEVICE_TREE_GUID};

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

/// Largest DTB accepted (the Linux boot protocol's limit).
const MAX_DTB: usize = 2 << 20;

/// Prints formatted text on the firmware console (up to 256 bytes).
fn print_fmt(efi: &Uefi, args: core::fmt::Arguments) {
    let mut s: EfiText<256> = EfiText::new();
    let _ = s.write_fmt(args);
    efi.print(&s);
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

/// What `kestrel_efi_main` returns to the assembly (in x0 and x1: a
/// 16-byte composite under AAPCS64). Only the assembly reads it.
#[repr(C)]
#[allow(dead_code)]
pub struct EfiResult {
    /// Non-zero: boot services have ended, enter kestrel. Zero: kestrel
    /// cannot run here (the reason was printed on the firmware console).
    go: usize,
    /// The DTB's address, or 0 when the board comes from ACPI tables.
    dtb: usize,
}

const FAIL: EfiResult = EfiResult { go: 0, dtb: 0 };

/// Called by `kestrel_efi_entry`. Ends boot services and returns the DTB's
/// address (0 with ACPI tables instead), or stops with the reason printed
/// on the firmware console if kestrel cannot run here.
#[no_mangle]
extern "C" fn kestrel_efi_main(image: usize, st: usize, bad_relocs: u64, load: usize) -> EfiResult {
    if !Uefi::is_system_table(st) {
        return FAIL;
    }
    let efi = Uefi { st, image };
    efi.print("kestrel: started by UEFI firmware\n");
    if bad_relocs != 0 {
        efi.print("kestrel: FATAL: the image has relocations of unsupported type\n");
        return FAIL;
    }
    let el = current_el();
    if el != 2 {
        efi.print(
            "kestrel: FATAL: kestrel is a hypervisor and must be started at EL2, but the \
             firmware runs at another EL (QEMU: -M virt,virtualization=on)\n",
        );
        return FAIL;
    }
    // A device tree if the firmware gives one, else ACPI tables.
    let (dtb, dtb_size, rsdp) = match efi.config_table(&DEVICE_TREE_GUID) {
        Some(dtb) => {
            // SAFETY: the first 8 bytes of the table the firmware
            // registered as the device tree.
            let header: [u8; 8] = unsafe { core::ptr::read_volatile(dtb as *const [u8; 8]) };
            let Some(size) = kernel::host::dtb::total_size(&header).filter(|&s| s <= MAX_DTB)
            else {
                efi.print("kestrel: FATAL: the device tree in the configuration table is not one (bad magic or larger than 2 MiB)\n");
                return FAIL;
            };
            if !dtb.is_multiple_of(8) {
                efi.print("kestrel: FATAL: the device tree is not 8-byte aligned\n");
                return FAIL;
            }
            (dtb, size, 0)
        }
        None => match efi.config_table(&ACPI_20_GUID) {
            Some(rsdp) if rsdp != 0 => (0, 0, rsdp as u64),
            _ => {
                efi.print(
                    "kestrel: FATAL: neither a device tree nor ACPI 2.0 tables in the UEFI \
                     configuration table\n",
                );
                return FAIL;
            }
        },
    };

    // SAFETY: no other code runs: the firmware called us and waits.
    let h = unsafe { &mut *addr_of_mut!(HANDOFF) };
    *h = EfiBoot::new();
    h.has_cmdline = efi.load_options(&mut h.cmdline);
    efi.vendor(&mut h.vendor);

    // The memory map, then ExitBootServices with its key; a map that
    // changed in between (the key is stale) is taken again.
    let mut acpi_checked = false;
    // What the ACPI reader read: the RSDP, the XSDT and the tables.
    let mut acpi_ranges = [(0u64, 0u64); kernel::host::acpi::MAX_TABLES + 2];
    let mut acpi_n = 0;
    let exited = efi.exit_boot_services(h, |map, desc_size| {
        if rsdp == 0 || acpi_checked {
            return Ok(());
        }
        // Read the board from the ACPI tables now, while a problem can
        // still be told on the firmware console; the boot path reads them
        // again with the MMU off, so they are cleaned to the point of
        // coherency once boot services are gone.
        let ram = match reserve::ram_from_uefi_map(map, desc_size) {
            Ok(r) => r,
            Err(e) => {
                print_fmt(&efi, format_args!("kestrel: FATAL: {e}\n"));
                return Err(());
            }
        };
        match kernel::host::acpi::arm64::parse(&AcpiRam(&ram.regions), rsdp, ACPI_PPIS) {
            Ok(a) => {
                for (slot, r) in acpi_ranges.iter_mut().zip(a.ranges()) {
                    *slot = r;
                    acpi_n += 1;
                }
            }
            Err(e) => {
                print_fmt(&efi, format_args!("kestrel: FATAL: {e}\n"));
                return Err(());
            }
        }
        // Nothing was printed or allocated: the map key still holds.
        acpi_checked = true;
        Ok(())
    });
    if exited.is_err() {
        return FAIL;
    }
    // Boot services are gone: no more firmware calls, no console.
    h.rsdp = rsdp;
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
    for &(pa, len) in &acpi_ranges[..acpi_n] {
        let pa = pa as usize;
        kernel::arch::aarch64::mmu::clean_dcache_range(pa, pa + len as usize);
    }
    EfiResult { go: 1, dtb }
}
