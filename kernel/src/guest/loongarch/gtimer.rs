//! The LVZ guest timer as the root finds it after an exit, portable and
//! host-tested ([`overdue`]); the LVZ backend applies it after each exit.
//!
//! The guest timer's TVAL counts down from TCFG's initial value, so it is
//! never above it. The LVZ emulator (tools/qemu-lvz) stops the guest
//! timer at each exit and re-arms it from TVAL at the next entry; a timer
//! that expired just before the exit but whose expiry it had not processed
//! yet reads back as the negative remainder, a huge TVAL. Left as it is,
//! the next entry arms the timer at the end of time: a one-shot timer never
//! fires and a periodic one stops (the attacker's `timer0` and `storm`
//! phases lost timer interrupts that way, about one in fifty, whenever a
//! busy VM shared its pCPU). Such a timer has expired: its TI is raised
//! and it is moved on as the hardware would have.

/// TCFG fields.
pub const TCFG_EN: u64 = 1;
pub const TCFG_PERIODIC: u64 = 2;
pub const TCFG_INIT: u64 = !3 & ((1 << 48) - 1);

/// For guest TCFG `tcfg` and TVAL `tval` read back after an exit: `None`
/// if the timer is off or still counting; else it expired, and the TCFG
/// and TVAL to write back with TI raised: a one-shot timer stops (EN
/// clear), a periodic one starts its next period (at least `min_period`
/// counter ticks, for a zero initial value).
pub fn overdue(tcfg: u64, tval: u64, min_period: u64) -> Option<(u64, u64)> {
    if tcfg & TCFG_EN == 0 || tval <= tcfg & TCFG_INIT {
        return None;
    }
    Some(if tcfg & TCFG_PERIODIC != 0 {
        (tcfg, (tcfg & TCFG_INIT).max(min_period))
    } else {
        (tcfg & !TCFG_EN, 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_or_off_is_left_alone() {
        // Off, whatever TVAL reads.
        assert_eq!(overdue(0x400, u64::MAX, 4), None);
        // Counting: TVAL at most the initial value.
        assert_eq!(overdue(0x400 | TCFG_EN, 0x400, 4), None);
        assert_eq!(overdue(0x400 | TCFG_EN, 1, 4), None);
        assert_eq!(overdue(0x400 | TCFG_EN | TCFG_PERIODIC, 0, 4), None);
    }

    #[test]
    fn an_overdue_one_shot_stops_with_ti() {
        // The emulator's negative remainder, as a tick count.
        let tval = (-3i64) as u64 / 10;
        assert_eq!(overdue(4 | TCFG_EN, tval, 4), Some((4, 0)));
        assert_eq!(overdue(0x1000 | TCFG_EN, 0x1004, 4), Some((0x1000, 0)));
    }

    #[test]
    fn an_overdue_periodic_timer_starts_its_next_period() {
        let t = 0x800 | TCFG_EN | TCFG_PERIODIC;
        assert_eq!(overdue(t, u64::MAX, 4), Some((t, 0x800)));
        // A zero period (TCFG = 3): any TVAL but 0 is overdue; the next
        // period is the minimum, not 0 (which the emulator would read as
        // "the initial value" again, and the hardware never gives).
        assert_eq!(overdue(3, 1, 4), Some((3, 4)));
        assert_eq!(overdue(3, 0, 4), None);
    }
}
