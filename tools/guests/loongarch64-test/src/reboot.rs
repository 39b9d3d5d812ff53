//! `mode=reboot`: each boot checks that its RAM is fresh (a word the
//! previous boot wrote reads zero again), prints one `REBOOT` line and
//! resets the machine through the GED reset register (QEMU virt's, which
//! kestrel emulates). It never ends by itself: the test stops the machine
//! after enough restarts (`docs/test-guest-loongarch.md`).

use core::sync::atomic::{AtomicBool, Ordering};

use crate::console::println;
use crate::{cpu, POWEROFF_REG, RAM_TOP};

static ON: AtomicBool = AtomicBool::new(false);

/// The GED reset register (after sleep control and sleep status) and the
/// value that resets.
const RESET_REG: usize = POWEROFF_REG + 2;
const RESET_VALUE: u8 = 0x42;
/// What each boot leaves in RAM for the next one to find gone.
const MARK: u64 = 0x5245_424f_4f54_4d4b;

/// `mode=reboot` from the command line; returns whether `m` was it.
pub fn set_mode(m: &str) -> bool {
    let on = m == "reboot";
    if on {
        ON.store(true, Ordering::Relaxed);
    }
    on
}

/// Runs the mode if the command line asked for it (in direct-address mode,
/// right after the command line is read).
pub fn run_mode() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    // Halfway up RAM: above the image (loaded at 2 MiB) and below the DTB
    // and command line at the top.
    let at = (RAM_TOP.load(Ordering::Relaxed) / 2) & !0xfff;
    let word = at as *mut u64;
    // SAFETY: in direct-address mode `at` is a physical address inside
    // this machine's RAM (from its device tree) that nothing else uses.
    let fresh = unsafe { word.read_volatile() } == 0;
    // SAFETY: as above.
    unsafe { word.write_volatile(MARK) };
    if !fresh {
        println!("REBOOT FAIL: RAM at {at:#x} kept the word the previous boot wrote");
        crate::poweroff();
    }
    println!("REBOOT: RAM at {at:#x} fresh; resetting");
    // SAFETY: the GED register page is device memory reached in
    // direct-address mode; writing the reset value resets the machine.
    unsafe { core::ptr::write_volatile(RESET_REG as *mut u8, RESET_VALUE) };
    loop {
        cpu::idle();
    }
}

/// Writes the reset value to the GED reset register again and again (a
/// reset storm from a vCPU other than the boot one: `mode=resetstorm`).
pub fn reset_for_ever() -> ! {
    loop {
        // SAFETY: as in `run_mode`: the GED register page is device memory
        // (direct-address mode, or mapped uncached by the page tables).
        unsafe { core::ptr::write_volatile(RESET_REG as *mut u8, RESET_VALUE) };
        cpu::relax();
    }
}
