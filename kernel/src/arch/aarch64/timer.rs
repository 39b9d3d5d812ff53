//! The EL2 physical timer (CNTHP_*_EL2, PPI 26): kestrel's own tick. The
//! counter is CNTPCT_EL0, its frequency CNTFRQ_EL0 (set by firmware).

use aarch64_cpu::registers::*;
use core::sync::atomic::{AtomicU64, Ordering};

/// The EL2 physical timer's interrupt (a PPI, same on every CPU).
pub const PPI: u32 = 26;

/// Counter ticks between timer interrupts (same on every CPU).
static INTERVAL: AtomicU64 = AtomicU64::new(0);

/// CNTFRQ_EL0: the counter frequency the firmware programmed.
pub fn frequency() -> u64 {
    CNTFRQ_EL0.get()
}

/// The system counter, ordered after earlier instructions.
pub fn counter() -> u64 {
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
    CNTPCT_EL0.get()
}

fn set_tval(ticks: u64) {
    let ticks = ticks.clamp(1, i32::MAX as u64);
    // SAFETY: CNTHP_TVAL_EL2 only sets the calling CPU's EL2 timer deadline.
    unsafe { core::arch::asm!("msr cnthp_tval_el2, {}", in(reg) ticks, options(nomem, nostack)) };
}

/// Starts a periodic `hz` timer on the calling CPU (interrupt not unmasked here).
pub fn start(hz: u32) {
    let interval = (frequency().max(1) / u64::from(hz.max(1))).max(1);
    INTERVAL.store(interval, Ordering::Relaxed);
    set_tval(interval);
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::SET + CNTHP_CTL_EL2::IMASK::CLEAR);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// Re-arms the calling CPU's timer one interval from now (from the IRQ).
pub fn rearm() {
    set_tval(INTERVAL.load(Ordering::Relaxed));
}

/// Counter ticks between two ticks of the calling CPU's timer.
pub fn interval() -> u64 {
    INTERVAL.load(Ordering::Relaxed)
}

/// Makes the calling CPU's timer fire at counter value `deadline` if that is
/// before its next tick (the next tick's re-arm restores the period).
pub fn arm_before(deadline: u64) {
    let now = counter();
    let ticks = deadline.saturating_sub(now).max(1);
    let tval: u64;
    // SAFETY: reading the calling CPU's EL2 timer value has no side effect.
    unsafe { core::arch::asm!("mrs {}, cnthp_tval_el2", out(reg) tval, options(nomem, nostack)) };
    let left = tval as u32 as i32;
    if left > 0 && ticks < left as u64 {
        set_tval(ticks);
    }
}
