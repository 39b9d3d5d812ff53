//! The EL1 physical timer (CNTP_CTL/CVAL/TVAL_EL0) of a vCPU, emulated:
//! kestrel traps the guest's accesses (CNTHCTL_EL2.EL1PCEN = 0) and answers
//! them from this model. Guests read the physical counter (CNTPCT_EL0)
//! directly, without an offset, so `now` here is the physical counter and
//! CVAL is compared with it unchanged. The timer's output is a level
//! (PPI 30): ENABLE, not IMASK, and CNTPCT >= CVAL. Arm ARM D12.8 (the
//! generic timer, TimerConditionMet and TVAL arithmetic).

use super::esr::SysReg;

/// CNTP_TVAL_EL0.
pub const CNTP_TVAL_EL0: SysReg = SysReg::new(3, 3, 14, 2, 0);
/// CNTP_CTL_EL0.
pub const CNTP_CTL_EL0: SysReg = SysReg::new(3, 3, 14, 2, 1);
/// CNTP_CVAL_EL0.
pub const CNTP_CVAL_EL0: SysReg = SysReg::new(3, 3, 14, 2, 2);

const ENABLE: u64 = 1 << 0;
const IMASK: u64 = 1 << 1;
const ISTATUS: u64 = 1 << 2;

/// One vCPU's EL1 physical timer (reset: disabled, CVAL 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhysTimer {
    /// ENABLE and IMASK (ISTATUS is computed).
    pub ctl: u64,
    pub cval: u64,
}

impl PhysTimer {
    /// Whether `reg` is one of the registers this model answers.
    pub fn handles(reg: SysReg) -> bool {
        reg == CNTP_TVAL_EL0 || reg == CNTP_CTL_EL0 || reg == CNTP_CVAL_EL0
    }

    fn enabled(&self) -> bool {
        self.ctl & ENABLE != 0
    }

    /// TimerConditionMet: enabled and the counter has reached CVAL.
    pub fn istatus(&self, now: u64) -> bool {
        self.enabled() && now >= self.cval
    }

    /// The interrupt output (PPI 30): condition met and not masked.
    pub fn level(&self, now: u64) -> bool {
        self.istatus(now) && self.ctl & IMASK == 0
    }

    /// The counter value at which the output rises, if it can: enabled,
    /// unmasked (else `None`; a value <= now means it is high already).
    pub fn deadline(&self) -> Option<u64> {
        (self.enabled() && self.ctl & IMASK == 0).then_some(self.cval)
    }

    /// When the host must force an exit for this timer (its output rising),
    /// at counter value `now`: never while it is high already or cannot
    /// rise (masked, disabled). A level stays high until the guest moves
    /// CVAL or masks it (trapped writes), so however close the guest
    /// programs CVAL this arms at most one exit per write, never a loop.
    pub fn backing_deadline(&self, now: u64) -> Option<u64> {
        self.deadline().filter(|&at| at > now)
    }

    /// A read of `reg` at counter value `now` (`None`: not a timer register).
    pub fn read(&self, reg: SysReg, now: u64) -> Option<u64> {
        match reg {
            CNTP_CTL_EL0 => Some(self.ctl | if self.istatus(now) { ISTATUS } else { 0 }),
            CNTP_CVAL_EL0 => Some(self.cval),
            // TimerValue = (CVAL - counter)[31:0]; bits [63:32] RES0.
            CNTP_TVAL_EL0 => Some(u64::from(self.cval.wrapping_sub(now) as u32)),
            _ => None,
        }
    }

    /// A write of `value` to `reg` at `now`; false if `reg` is not ours.
    pub fn write(&mut self, reg: SysReg, value: u64, now: u64) -> bool {
        match reg {
            // ISTATUS is read-only; bits [63:3] RES0.
            CNTP_CTL_EL0 => self.ctl = value & (ENABLE | IMASK),
            CNTP_CVAL_EL0 => self.cval = value,
            // CVAL = counter + SignExtend(value[31:0]).
            CNTP_TVAL_EL0 => self.cval = now.wrapping_add(value as u32 as i32 as i64 as u64),
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tval_arms_relative_to_the_counter_and_counts_down() {
        let mut t = PhysTimer::default();
        assert!(t.write(CNTP_TVAL_EL0, 1000, 5_000));
        assert_eq!(t.cval, 6_000);
        assert!(t.write(CNTP_CTL_EL0, 1, 5_000));
        assert_eq!(t.read(CNTP_TVAL_EL0, 5_400), Some(600));
        assert_eq!(t.read(CNTP_CTL_EL0, 5_999), Some(1), "not yet");
        assert!(!t.level(5_999));
        assert_eq!(t.read(CNTP_CTL_EL0, 6_000), Some(0b101), "ISTATUS");
        assert!(t.level(6_000));
        // Past the deadline TVAL is negative (two's complement, 32 bits).
        assert_eq!(t.read(CNTP_TVAL_EL0, 6_010), Some(0xFFFF_FFF6));
        // A negative TVAL puts CVAL in the past.
        t.write(CNTP_TVAL_EL0, 0xFFFF_FF00, 10_000);
        assert_eq!(t.cval, 10_000 - 0x100);
        assert!(t.level(10_000));
    }

    #[test]
    fn imask_and_enable_gate_the_output_not_istatus() {
        let mut t = PhysTimer {
            ctl: 0b011,
            cval: 100,
        };
        assert_eq!(t.read(CNTP_CTL_EL0, 200), Some(0b111));
        assert!(!t.level(200), "masked");
        assert_eq!(t.deadline(), None);
        t.write(CNTP_CTL_EL0, 0b101 | 0xFF00, 200); // ISTATUS and RES0 ignored
        assert_eq!(t.ctl, 1);
        assert!(t.level(200));
        assert_eq!(t.deadline(), Some(100));
        t.write(CNTP_CTL_EL0, 0, 200);
        assert_eq!(t.read(CNTP_CTL_EL0, 200), Some(0), "disabled: no ISTATUS");
        assert!(!t.level(u64::MAX));
    }

    /// Issue 22 item 7's class on arm64: a timer due at once, or masked
    /// while pending, arms no host deadline (the output is high or cannot
    /// rise); one due later arms exactly its CVAL.
    #[test]
    fn a_high_or_masked_timer_arms_no_host_deadline() {
        let mut t = PhysTimer::default();
        t.write(CNTP_CVAL_EL0, 1001, 1000);
        t.write(CNTP_CTL_EL0, 1, 1000);
        assert_eq!(t.backing_deadline(1000), Some(1001));
        for now in 1001..1100 {
            assert!(t.level(now));
            assert_eq!(t.backing_deadline(now), None, "high at {now}");
        }
        // TVAL 0: due now.
        t.write(CNTP_TVAL_EL0, 0, 2000);
        assert_eq!(t.backing_deadline(2000), None);
        // Masked while pending: ISTATUS set, nothing armed.
        t.write(CNTP_CTL_EL0, 0b011, 2000);
        assert_eq!(t.read(CNTP_CTL_EL0, 2000), Some(0b111));
        assert_eq!(t.backing_deadline(0), None);
    }

    #[test]
    fn other_registers_are_not_ours() {
        let mut t = PhysTimer::default();
        let cntv_ctl = SysReg::new(3, 3, 14, 3, 1);
        assert!(!PhysTimer::handles(cntv_ctl));
        assert_eq!(t.read(cntv_ctl, 0), None);
        assert!(!t.write(cntv_ctl, 1, 0));
        assert_eq!(t, PhysTimer::default());
    }
}
