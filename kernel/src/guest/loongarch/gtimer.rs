//! The LVZ guest timer as the root reads it back (TCFG, TVAL), portable and
//! host-tested ([`state`]); the LVZ backend uses it when it puts a vCPU
//! away and when it polls an `idle`.
//!
//! The guest timer counts TVAL down from TCFG's initial value. A periodic
//! timer reloads at 0, so its TVAL is never above the initial value. A
//! one-shot timer that fired goes on counting below 0 with EN still set
//! (TVAL reads -1 and down: the manual, Volume 1, 7.6.2; Linux's KVM reads
//! it so too), and the hardware raised TI when it fired. The guest may have
//! taken and cleared that TI since: raising it again would give the guest a
//! spurious timer interrupt, and writing its TCFG back with EN set at the
//! next load would start the timer again. So a fired one-shot timer is put
//! away stopped (EN clear), its TI as the guest left it.

/// TCFG fields.
pub const TCFG_EN: u64 = 1;
pub const TCFG_PERIODIC: u64 = 2;
pub const TCFG_INIT: u64 = !3 & ((1 << 48) - 1);

/// What a guest timer read back as TCFG and TVAL is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestTimer {
    /// EN clear.
    Off,
    /// Counting: this many counter ticks until it fires.
    Counting(u64),
    /// A one-shot timer that fired (TVAL above the initial value): its TI
    /// was raised then; nothing is due any more.
    Fired,
}

/// The state of the guest timer with TCFG `tcfg` and TVAL `tval`.
pub fn state(tcfg: u64, tval: u64) -> GuestTimer {
    let init = tcfg & TCFG_INIT;
    if tcfg & TCFG_EN == 0 {
        GuestTimer::Off
    } else if tval <= init {
        GuestTimer::Counting(tval)
    } else if tcfg & TCFG_PERIODIC != 0 {
        // Never on the hardware (a periodic timer reloads at 0): at most
        // a period away.
        GuestTimer::Counting(init)
    } else {
        GuestTimer::Fired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_whatever_tval_reads() {
        assert_eq!(state(0x400, u64::MAX), GuestTimer::Off);
        assert_eq!(state(0x400 | TCFG_PERIODIC, 3), GuestTimer::Off);
    }

    #[test]
    fn counting_down_to_zero() {
        assert_eq!(state(0x400 | TCFG_EN, 0x400), GuestTimer::Counting(0x400));
        assert_eq!(state(0x400 | TCFG_EN, 1), GuestTimer::Counting(1));
        assert_eq!(state(0x400 | TCFG_EN, 0), GuestTimer::Counting(0));
        assert_eq!(state(3, 0), GuestTimer::Counting(0));
        assert_eq!(
            state(0x800 | TCFG_EN | TCFG_PERIODIC, 0x7ff),
            GuestTimer::Counting(0x7ff)
        );
    }

    #[test]
    fn a_fired_one_shot_timer_is_done() {
        // TVAL -1 and below: fired; TI is not raised again.
        assert_eq!(state(4 | TCFG_EN, u64::MAX), GuestTimer::Fired);
        assert_eq!(state(0x1000 | TCFG_EN, u64::MAX - 5000), GuestTimer::Fired);
        assert_eq!(state(0x1000 | TCFG_EN, 0x1004), GuestTimer::Fired);
        // InitVal 0: fired at once.
        assert_eq!(state(TCFG_EN, u64::MAX), GuestTimer::Fired);
    }

    #[test]
    fn a_periodic_timer_never_reads_fired() {
        let t = 0x800 | TCFG_EN | TCFG_PERIODIC;
        assert_eq!(state(t, u64::MAX), GuestTimer::Counting(0x800));
        assert_eq!(state(3, 1), GuestTimer::Counting(0));
    }
}
