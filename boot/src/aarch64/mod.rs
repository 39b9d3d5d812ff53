//! arm64 entry: the Image header and the assembly that runs before Rust
//! (`entry.S`), then the hand-over to `kernel::arch::aarch64`, which owns the
//! CPU, MMU and driver code. See docs/arm64-boot.md.

use kernel::arch::aarch64::boot::{self, BootArgs};

mod efi;

core::arch::global_asm!(include_str!("entry.S"));

extern "C" {
    static __image_start: u8;
    static __image_end: u8;
    fn kestrel_secondary_entry();
}

/// The boot CPU, from `entry.S`: relocated, .bss zeroed, on the boot stack,
/// MMU off, interrupts masked. `el` is CurrentEL.EL at entry, `bad_relocs`
/// the number of relocations the entry code could not apply.
#[no_mangle]
extern "C" fn kestrel_boot_primary(dtb: usize, el: u64, bad_relocs: u64, load_addr: usize) -> ! {
    let args = BootArgs {
        dtb,
        current_el: el,
        bad_relocs,
        load_addr,
        // Only addresses are taken, nothing is read or called here.
        image_start: core::ptr::addr_of!(__image_start) as usize,
        image_end: core::ptr::addr_of!(__image_end) as usize,
        secondary_entry: kestrel_secondary_entry as *const () as usize,
        heap_usage: crate::heap::usage,
        efi: efi::handoff(),
    };
    // Checks the EL and the DTB, maps memory and turns the MMU on; halts
    // with a message on the console when it cannot.
    let board = boot::primary_early(&args);
    crate::heap::init();
    let (board, platform) = boot::primary_setup(board, &args);
    kernel::runtime::primary_main(board, platform)
}

/// A secondary CPU, from `entry.S`: MMU, vectors and TPIDR_EL2 set up, on
/// its own stack.
#[no_mangle]
extern "C" fn kestrel_boot_secondary(index: usize) -> ! {
    boot::secondary_setup(index);
    kernel::runtime::secondary_main(index)
}
