//! Fatal stops: an error kestrel cannot go on from, after the console is
//! up. It says so, then powers off with a failure status when the command
//! line asked for power-off (so tests end at once), or halts the CPU.

use core::sync::atomic::{AtomicBool, Ordering};

use super::clock;
use super::platform::ExitStatus;

/// Set by the boot flow when the command line asks for power-off at the end
/// (`kestrel.exit=poweroff`).
static POWER_OFF: AtomicBool = AtomicBool::new(false);
/// Set by the boot flow once the console is up and the board is known.
static READY: AtomicBool = AtomicBool::new(false);

/// The boot flow's word that fatal errors may now be reported, and how.
pub fn set_ready(power_off: bool) {
    POWER_OFF.store(power_off, Ordering::Relaxed);
    READY.store(true, Ordering::Release);
}

/// Whether the boot flow has set up the console and board ([`set_ready`]):
/// before that, a fault has nowhere to be reported but the arch's own dump.
pub fn is_ready() -> bool {
    READY.load(Ordering::Acquire)
}

/// Reports `args` as fatal and stops (see the module doc).
pub fn fatal(args: core::fmt::Arguments) -> ! {
    super::klog::print_unlocked(format_args!("\nkestrel: FATAL: {args}\n"));
    match clock::platform() {
        Some(p) if POWER_OFF.load(Ordering::Relaxed) => {
            super::klog::print_unlocked(format_args!(
                "kestrel: powering off (status {})\n",
                ExitStatus::Failure.code()
            ));
            p.power_off(ExitStatus::Failure)
        }
        Some(p) => p.halt(),
        None => loop {
            core::hint::spin_loop();
        },
    }
}
