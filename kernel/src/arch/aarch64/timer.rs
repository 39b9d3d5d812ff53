//! The EL2 physical timer (CNTHP_*_EL2, PPI 26): kestrel's own tick. The
//! counter is CNTPCT_EL0, its frequency CNTFRQ_EL0 (set by firmware).

use aarch64_cpu::registers::*;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::MAX_CPUS;

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

/// Per CPU, the counter values its timer serves besides the tick: when
/// the tick is due, the earliest "loud" deadline ([`arm_before`]: a vCPU's
/// timer, which ends the time slice like a tick) and the "quiet" one
/// ([`arm_quiet`]: the console's drain, which does not).
struct Due {
    tick: AtomicU64,
    loud: AtomicU64,
    quiet: AtomicU64,
}

static DUE: [Due; MAX_CPUS] = [const {
    Due {
        tick: AtomicU64::new(0),
        loud: AtomicU64::new(u64::MAX),
        quiet: AtomicU64::new(u64::MAX),
    }
}; MAX_CPUS];

fn due() -> Option<&'static Due> {
    DUE.get(super::percpu::index())
}

/// Starts a periodic `hz` timer on the calling CPU (interrupt not unmasked here).
pub fn start(hz: u32) {
    let interval = (frequency().max(1) / u64::from(hz.max(1))).max(1);
    INTERVAL.store(interval, Ordering::Relaxed);
    if let Some(d) = due() {
        d.tick.store(counter() + interval, Ordering::Relaxed);
    }
    set_tval(interval);
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::SET + CNTHP_CTL_EL2::IMASK::CLEAR);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// The calling CPU's timer fired (from the IRQ): whether it is kestrel's
/// tick, or a loud deadline ([`arm_before`]), which counts as one. Then
/// the timer is re-armed one interval from now. A quiet deadline's fire
/// ([`arm_quiet`]) is not a tick: the timer is re-armed for the tick (or
/// the loud deadline) it came before, and the period keeps its phase.
pub fn fired() -> bool {
    let interval = INTERVAL.load(Ordering::Relaxed);
    let Some(d) = due() else {
        set_tval(interval);
        return true;
    };
    d.quiet.store(u64::MAX, Ordering::Relaxed);
    let now = counter();
    let next = d
        .tick
        .load(Ordering::Relaxed)
        .min(d.loud.load(Ordering::Relaxed));
    if now < next {
        set_tval(next - now);
        return false;
    }
    d.tick.store(now + interval, Ordering::Relaxed);
    d.loud.store(u64::MAX, Ordering::Relaxed);
    set_tval(interval);
    true
}

/// Counter ticks between two ticks of the calling CPU's timer.
pub fn interval() -> u64 {
    INTERVAL.load(Ordering::Relaxed)
}

/// The counter ticks until the calling CPU's timer fires, if it is armed
/// for a time still ahead.
fn left() -> Option<u64> {
    let tval: u64;
    // SAFETY: reading the calling CPU's EL2 timer value has no side effect.
    unsafe { core::arch::asm!("mrs {}, cnthp_tval_el2", out(reg) tval, options(nomem, nostack)) };
    let left = tval as u32 as i32;
    (left > 0).then_some(left as u64)
}

/// Makes the calling CPU's timer fire at counter value `deadline` if that is
/// before its next tick; that fire counts as a tick ([`fired`]: it ends the
/// time slice, and the next tick's re-arm restores the period).
pub fn arm_before(deadline: u64) {
    if let Some(d) = due() {
        d.loud.fetch_min(deadline, Ordering::Relaxed);
    }
    let ticks = deadline.saturating_sub(counter()).max(1);
    if left().is_some_and(|left| ticks < left) {
        set_tval(ticks);
    }
}

/// Makes the calling CPU's timer fire at counter value `deadline` (at once
/// if it has passed; `u64::MAX`: none) if that is before it fires anyway,
/// without ending the time slice ([`fired`]). The console's timed drain,
/// asked for before each guest entry: a deadline already armed costs one
/// load.
#[inline]
pub fn arm_quiet(deadline: u64) {
    if deadline == u64::MAX {
        return;
    }
    let Some(d) = due() else { return };
    if d.quiet.load(Ordering::Relaxed) <= deadline {
        return;
    }
    let ticks = deadline.saturating_sub(counter()).max(1);
    if left().is_some_and(|left| ticks < left) {
        d.quiet.store(deadline, Ordering::Relaxed);
        set_tval(ticks);
    }
}
