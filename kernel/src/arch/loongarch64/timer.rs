//! The per-core constant timer: TCFG (EN bit 0, PERIODIC bit 1, initial
//! value [47:2]) counts TVAL down at the stable-counter frequency and raises
//! ESTAT.IS[11]; writing TICLR bit 0 clears it.

use core::sync::atomic::{AtomicU64, Ordering};

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

const TCFG_EN: u64 = 1 << 0;
const TCFG_PERIODIC: u64 = 1 << 1;
const TCFG_INIT_MASK: u64 = ((1 << 48) - 1) & !3;

/// Arms a periodic interrupt every `counter_hz / hz` counter ticks and
/// unmasks the timer line (ECFG.LIE[11]). CRMD.IE is left to the caller.
pub fn start_periodic(counter_hz: u64, hz: u32) {
    let period = (counter_hz / u64::from(hz.max(1))).max(4) & TCFG_INIT_MASK;
    PERIOD.store(period, Ordering::Relaxed);
    // SAFETY: programs this core's timer and unmasks its line; the
    // exception entry handles TI (exceptions::init_cpu ran on this CPU).
    unsafe {
        csr::write_ticlr(1);
        csr::write_tcfg(period | TCFG_PERIODIC | TCFG_EN);
        csr::xchg_ecfg(csr::Irqs::TI.bits(), csr::Irqs::TI.bits());
    }
}

/// Acknowledges the timer interrupt (TICLR.CLR).
pub fn ack() {
    // SAFETY: TICLR bit 0 only clears the pending timer interrupt.
    unsafe { csr::write_ticlr(1) };
}
