//! The UEFI entry on LoongArch64 (`kestrel_efi_entry` in `entry.S` calls
//! [`kestrel_la_efi_main`] at kestrel's link address, DMW windows set, the
//! firmware's paging still on): with boot services running, find the ACPI
//! tables (and a device tree, if the firmware also gives one) in the
//! configuration table, take the command line from the load options, exit
//! boot services keeping the memory map, and enter `_start` in
//! direct-address mode as QEMU's direct boot would (`kestrel_la_efi_enter`).
//! See docs/loongarch-boot.md, "UEFI".

use core::ptr::{addr_of, addr_of_mut};

use kernel::host::efiboot::EfiBoot;

use crate::efi::{Status, Uefi, ACPI_20_GUID, DEVICE_TREE_GUID, ERROR_BIT};

/// EFI_LOAD_ERROR: what the entry returns when kestrel cannot run.
const LOAD_ERROR: Status = ERROR_BIT | 1;

/// What the UEFI stage found, read by `primary_entry`. In `.data` (not
/// `.bss`, which `_start` zeroes) so it survives the hand-over; `valid` is
/// false in the file, so a boot without UEFI ignores it.
#[link_section = ".data.kestrel_efi"]
static mut HANDOFF: EfiBoot = EfiBoot::new();

/// The UEFI stage's result, if the image was started by UEFI firmware.
pub fn handoff() -> Option<&'static EfiBoot> {
    // SAFETY: HANDOFF is written only by `kestrel_la_efi_main`, which has
    // left for good before the boot CPU's Rust code runs; from then on it
    // is only read, and no other CPU is running yet.
    let h = unsafe { &*addr_of!(HANDOFF) };
    h.valid.then_some(h)
}

unsafe extern "C" {
    /// `entry.S`: DA mode, TLB and timer cleared, then `_start`.
    fn kestrel_la_efi_enter() -> !;
}

/// Where the image lies: its link address (checked by the entry code).
fn load_address() -> usize {
    unsafe extern "C" {
        static __image_start: u8;
    }
    kernel::arch::loongarch64::dmw::to_phys(addr_of!(__image_start) as u64) as usize
}

/// CRMD.PLV: kestrel must own the machine (PLV0).
fn current_plv() -> u64 {
    kernel::arch::loongarch64::csr::crmd() & 3
}

/// Called by `kestrel_efi_entry`. Returns (an EFI error status, the reason
/// printed on the firmware console) only if kestrel cannot run here.
pub extern "C" fn kestrel_la_efi_main(image: usize, st: usize) -> Status {
    if !Uefi::is_system_table(st) {
        return LOAD_ERROR;
    }
    let efi = Uefi { st, image };
    efi.print("kestrel: started by UEFI firmware\n");
    if current_plv() != 0 {
        efi.print("kestrel: FATAL: the firmware does not run kestrel at PLV0\n");
        return LOAD_ERROR;
    }
    let rsdp = efi.config_table(&ACPI_20_GUID).unwrap_or(0);
    let dtb = efi.config_table(&DEVICE_TREE_GUID).unwrap_or(0);
    if rsdp == 0 && dtb == 0 {
        efi.print(
            "kestrel: FATAL: neither ACPI 2.0 tables nor a device tree in the UEFI \
             configuration table\n",
        );
        return LOAD_ERROR;
    }
    // SAFETY: no other code runs: the firmware called us and waits.
    let h = unsafe { &mut *addr_of_mut!(HANDOFF) };
    *h = EfiBoot::new();
    h.has_cmdline = efi.load_options(&mut h.cmdline);
    efi.vendor(&mut h.vendor);
    if efi.exit_boot_services(h, |_, _| Ok(())).is_err() {
        return LOAD_ERROR;
    }
    // Boot services are gone: no firmware call from here on.
    h.rsdp = rsdp as u64;
    h.dtb = dtb as u64;
    h.load_addr = load_address();
    h.valid = true;
    // SAFETY: boot services have ended; kestrel owns the CPU. The routine
    // leaves paging and the firmware's TLB entries behind and enters
    // `_start`, which only runs in the DMW windows.
    unsafe { kestrel_la_efi_enter() }
}
