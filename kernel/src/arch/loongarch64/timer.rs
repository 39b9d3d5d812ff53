//! The per-core constant timer: TCFG (EN bit 0, PERIODIC bit 1, initial
//! value [47:2]) counts TVAL down at the stable-counter frequency and raises
//! ESTAT.IS[11]; writing TICLR bit 0 clears it.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::MAX_CPUS;

use super::csr;

/// The host tick's period in counter ticks (set by `start_periodic`).
static PERIOD: AtomicU64 = AtomicU64::new(0);

/// The host tick's period in counter ticks.
pub fn period() -> u64 {
    PERIOD.load(Ordering::Relaxed)
}

/// Arms a one-shot interrupt in `ticks` counter ticks (at least 4): how the
/// VM backend multiplexes kestrel's tick and guest timers on this timer.
pub fn oneshot(ticks: u64) {
    let t = ticks.clamp(4, TCFG_INIT_MASK) & TCFG_INIT_MASK;
    // SAFETY: reprograms this core's timer; its interrupt is handled by the
    // exception entry (timer line already unmasked by `start_periodic`).
    unsafe { csr::write_tcfg(t | TCFG_EN) };
}

/// The counter value each CPU's one-shot timer was last armed for by
/// [`oneshot_at`], 0 once it fired (or was reprogrammed otherwise).
static ARMED: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Arms `cpu`'s one-shot interrupt for counter value `at` (`now`: the
/// counter now; a time already passed fires at once). The calling CPU must
/// be `cpu`. A timer already armed for `at` that has not fired yet is left
/// alone: the VM backends ask for the same instant on most exits, and a
/// TCFG write each time would cost every exit a CSR write.
pub fn oneshot_at(cpu: usize, at: u64, now: u64) {
    let Some(armed) = ARMED.get(cpu) else {
        return oneshot(at.saturating_sub(now));
    };
    if at != 0 && armed.load(Ordering::Relaxed) == at {
        return;
    }
    armed.store(at, Ordering::Relaxed);
    oneshot(at.saturating_sub(now));
}

/// Forgets what `cpu`'s timer was armed for (it fired, or TCFG was
/// written another way): the next [`oneshot_at`] programs it.
fn disarmed(cpu: usize) {
    if let Some(a) = ARMED.get(cpu) {
        a.store(0, Ordering::Relaxed);
    }
}

const TCFG_EN: u64 = 1 << 0;
const TCFG_PERIODIC: u64 = 1 << 1;
const TCFG_INIT_MASK: u64 = ((1 << 48) - 1) & !3;

/// Arms a periodic interrupt every `counter_hz / hz` counter ticks and
/// unmasks the timer line (ECFG.LIE[11]). CRMD.IE is left to the caller.
pub fn start_periodic(counter_hz: u64, hz: u32) {
    let period = (counter_hz / u64::from(hz.max(1))).max(4) & TCFG_INIT_MASK;
    PERIOD.store(period, Ordering::Relaxed);
    disarmed(super::platform::current_cpu());
    // SAFETY: programs this core's timer and unmasks its line; the
    // exception entry handles TI (exceptions::init_cpu ran on this CPU).
    unsafe {
        csr::write_ticlr(1);
        csr::write_tcfg(period | TCFG_PERIODIC | TCFG_EN);
        csr::xchg_ecfg(csr::Irqs::TI.bits(), csr::Irqs::TI.bits());
    }
}

/// Acknowledges the timer interrupt (TICLR.CLR) on the calling CPU,
/// `cpu`: a one-shot timer that fired is no longer armed.
pub fn ack(cpu: usize) {
    disarmed(cpu);
    // SAFETY: TICLR bit 0 only clears the pending timer interrupt.
    unsafe { csr::write_ticlr(1) };
}
