//! The self-hosted debug registers of a vCPU (op0 = 2 system registers),
//! emulated from a shadow copy: kestrel traps every guest access
//! (MDCR_EL2.TDA, TDOSA, TDRA) and answers it here; the backend loads the
//! shadow's breakpoints, watchpoints, MDSCR_EL1 and OS lock into the
//! hardware only for a vCPU that has written one of them ([`DebugRegs::dirty`]),
//! and clears MDSCR_EL1 when it leaves the pCPU, so one vCPU's breakpoints,
//! watchpoints and single-step never fire in another.
//!
//! What the guest sees (Arm ARM D2, D19 "AArch64 debug registers"): the
//! Armv8.0 debug architecture with the hardware's number of breakpoints and
//! watchpoints ([`DebugRegs::new`] caps them at 16), no double lock, an OS
//! lock that is locked at reset (software unlocks it with OSLAR_EL1 = 0),
//! eight claim tags, and a debug communication channel with nothing behind
//! it (RAZ/WI). Breakpoint and watchpoint controls can only match at EL1 and
//! EL0: HMC and SSC read as zero, and a control whose match conditions are
//! reserved (or select EL2 state: VMID and CONTEXTIDR_EL2 breakpoint types)
//! is loaded disabled. Trace, BRBE, EL2 registers (op1 4-7) and every other
//! op0 = 2 encoding are UNDEFINED.

use super::esr::SysReg;

/// Most breakpoints or watchpoints the architecture has (4-bit ID fields).
pub const MAX_POINTS: usize = 16;

/// MDSCR_EL1 bits a guest can set: SS, TDCC, KDE, MDE.
pub const MDSCR_WRITABLE: u64 = (1 << 0) | (1 << 12) | (1 << 13) | (1 << 15);
/// DBGBCR<n>_EL1 fields of the Armv8.0 layout a guest keeps: E, PMC, BAS,
/// LBN, BT (HMC, SSC and everything else read as zero).
pub const BCR_KEPT: u64 = 1 | (0b11 << 1) | (0xF << 5) | (0xF << 16) | (0xF << 20);
/// DBGWCR<n>_EL1 fields kept: E, PAC, LSC, BAS, LBN, WT, MASK.
pub const WCR_KEPT: u64 =
    1 | (0b11 << 1) | (0b11 << 3) | (0xFF << 5) | (0xF << 16) | (1 << 20) | (0x1F << 24);

/// One debug register access answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A read: this value.
    Read(u64),
    /// A write was taken (`hw`: the hardware copy changed and must be
    /// reloaded if the vCPU is loaded).
    Written { hw: bool },
    /// The encoding is UNDEFINED here: inject an undefined-instruction
    /// exception.
    Undef,
}

/// The shadow of one vCPU's debug registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugRegs {
    pub brps: usize,
    pub wrps: usize,
    pub bvr: [u64; MAX_POINTS],
    pub bcr: [u64; MAX_POINTS],
    pub wvr: [u64; MAX_POINTS],
    pub wcr: [u64; MAX_POINTS],
    pub mdscr: u64,
    /// OSLSR_EL1.OSLK.
    pub oslk: bool,
    /// DBGCLAIM tags.
    pub claim: u8,
    /// The guest has written a register the hardware must hold while it
    /// runs (breakpoints, watchpoints, MDSCR_EL1, the OS lock).
    pub dirty: bool,
}

impl DebugRegs {
    /// Reset state with `brps` breakpoints and `wrps` watchpoints (each
    /// clamped to 1..=16: the ID register field cannot say 0).
    pub fn new(brps: usize, wrps: usize) -> DebugRegs {
        DebugRegs {
            brps: brps.clamp(1, MAX_POINTS),
            wrps: wrps.clamp(1, MAX_POINTS),
            bvr: [0; MAX_POINTS],
            bcr: [0; MAX_POINTS],
            wvr: [0; MAX_POINTS],
            wcr: [0; MAX_POINTS],
            mdscr: 0,
            oslk: true,
            claim: 0,
            dirty: false,
        }
    }

    /// The hardware value for breakpoint control `n`: the shadow, disabled
    /// if its PMC is reserved (0) or its type needs EL2 (BT bit 3: VMID or
    /// CONTEXTIDR_EL2 matching).
    pub fn hw_bcr(&self, n: usize) -> u64 {
        let v = self.bcr[n];
        if (v >> 1) & 3 == 0 || (v >> 20) & 0b1000 != 0 {
            v & !1
        } else {
            v
        }
    }

    /// The hardware value for watchpoint control `n`: the shadow, disabled
    /// if its PAC or LSC is reserved (0).
    pub fn hw_wcr(&self, n: usize) -> u64 {
        let v = self.wcr[n];
        if (v >> 1) & 3 == 0 || (v >> 3) & 3 == 0 {
            v & !1
        } else {
            v
        }
    }

    /// Answers an access to op0 = 2 register `r` (`value`: what a write
    /// writes).
    pub fn access(&mut self, r: SysReg, read: bool, value: u64) -> Answer {
        if r.op0 != 2 {
            return Answer::Undef;
        }
        let n = r.crm as usize;
        let raz_wi = if read {
            Answer::Read(0)
        } else {
            Answer::Written { hw: false }
        };
        match (r.op1, r.crn, r.crm, r.op2) {
            // DBGBVR/BCR/WVR/WCR<n>_EL1 that exist.
            (0, 0, _, 4) if n < self.brps => self.point(read, value, |d| &mut d.bvr[n], !0),
            (0, 0, _, 5) if n < self.brps => self.point(read, value, |d| &mut d.bcr[n], BCR_KEPT),
            (0, 0, _, 6) if n < self.wrps => self.point(read, value, |d| &mut d.wvr[n], !0b11),
            (0, 0, _, 7) if n < self.wrps => self.point(read, value, |d| &mut d.wcr[n], WCR_KEPT),
            // MDSCR_EL1.
            (0, 0, 2, 2) => self.point(read, value, |d| &mut d.mdscr, MDSCR_WRITABLE),
            // OSDTRRX_EL1, MDCCINT_EL1, OSDTRTX_EL1, OSECCR_EL1: the DCC
            // and OS save/restore channel, with nothing behind them.
            (0, 0, 0, 2) | (0, 0, 2, 0) | (0, 0, 3, 2) | (0, 0, 6, 2) => raz_wi,
            // MDRAR_EL1 (read-only): no memory-mapped ROM table.
            (0, 1, 0, 0) if read => Answer::Read(0),
            // OSLAR_EL1 (write-only): OSLK = bit 0.
            (0, 1, 0, 4) if !read => {
                self.oslk = value & 1 != 0;
                self.dirty = true;
                Answer::Written { hw: true }
            }
            // OSLSR_EL1 (read-only): OSLM = 0b10 (OS lock implemented), OSLK.
            (0, 1, 1, 4) if read => Answer::Read(0b1000 | u64::from(self.oslk) << 1),
            // OSDLR_EL1 (no double lock), DBGPRCR_EL1: RAZ/WI.
            (0, 1, 3, 4) | (0, 1, 4, 4) => raz_wi,
            // DBGCLAIMSET_EL1: reads the implemented tags (8), sets tags.
            (0, 7, 8, 6) => {
                if read {
                    Answer::Read(0xFF)
                } else {
                    self.claim |= value as u8;
                    Answer::Written { hw: false }
                }
            }
            // DBGCLAIMCLR_EL1: reads the set tags, clears tags.
            (0, 7, 9, 6) => {
                if read {
                    Answer::Read(u64::from(self.claim))
                } else {
                    self.claim &= !(value as u8);
                    Answer::Written { hw: false }
                }
            }
            // DBGAUTHSTATUS_EL1 (read-only): non-secure invasive and
            // non-invasive debug implemented and enabled, no Secure state.
            (0, 7, 14, 6) if read => Answer::Read(0b1111),
            // MDCCSR_EL0 (read-only), DBGDTR_EL0, DBGDTRRX/TX_EL0: the DCC.
            (3, 0, 1, 0) if read => Answer::Read(0),
            (3, 0, 4, 0) | (3, 0, 5, 0) => raz_wi,
            _ => Answer::Undef,
        }
    }

    fn point(
        &mut self,
        read: bool,
        value: u64,
        slot: impl Fn(&mut DebugRegs) -> &mut u64,
        kept: u64,
    ) -> Answer {
        if read {
            return Answer::Read(*slot(self));
        }
        *slot(self) = value & kept;
        self.dirty = true;
        Answer::Written { hw: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn dbg(op1: u8, crn: u8, crm: u8, op2: u8) -> SysReg {
        SysReg::new(2, op1, crn, crm, op2)
    }

    #[test]
    fn points_exist_up_to_the_counts_and_stay_at_el1_el0() {
        let mut d = DebugRegs::new(6, 4);
        assert!(!d.dirty);
        assert_eq!(
            d.access(dbg(0, 0, 5, 4), false, 0x1234),
            Answer::Written { hw: true }
        );
        assert!(d.dirty);
        assert_eq!(d.access(dbg(0, 0, 5, 4), true, 0), Answer::Read(0x1234));
        assert_eq!(
            d.access(dbg(0, 0, 6, 4), true, 0),
            Answer::Undef,
            "BVR6 of 6"
        );
        assert_eq!(
            d.access(dbg(0, 0, 3, 7), false, 0),
            Answer::Written { hw: true }
        );
        assert_eq!(
            d.access(dbg(0, 0, 4, 7), false, 0),
            Answer::Undef,
            "WCR4 of 4"
        );
        // HMC (13) and SSC (15:14) can never be set: no EL2 matching.
        let evil = (1 << 13) | (0b11 << 14) | 0x1E3;
        d.access(dbg(0, 0, 0, 5), false, evil);
        assert_eq!(d.access(dbg(0, 0, 0, 5), true, 0), Answer::Read(0x1E3));
        assert_eq!(d.hw_bcr(0), 0x1E3);
        d.access(dbg(0, 0, 1, 7), false, evil | (0b11 << 3));
        assert_eq!(d.wcr[1] & ((1 << 13) | (0b11 << 14)), 0);
        // Reserved PMC, or a VMID-match type: loaded disabled.
        d.access(dbg(0, 0, 2, 5), false, 0x1E1);
        assert_eq!(d.hw_bcr(2) & 1, 0);
        d.access(dbg(0, 0, 3, 5), false, 0x1E3 | (0b1000 << 20));
        assert_eq!(d.hw_bcr(3) & 1, 0);
        d.access(dbg(0, 0, 0, 7), false, 0x1FE1); // PAC 0
        assert_eq!(d.hw_wcr(0) & 1, 0);
        assert_eq!(DebugRegs::new(0, 99).brps, 1);
        assert_eq!(DebugRegs::new(0, 99).wrps, 16);
    }

    #[test]
    fn os_lock_claims_mdscr_and_the_dcc() {
        let mut d = DebugRegs::new(2, 2);
        assert_eq!(
            d.access(dbg(0, 1, 1, 4), true, 0),
            Answer::Read(0b1010),
            "locked at reset"
        );
        assert_eq!(
            d.access(dbg(0, 1, 0, 4), false, 0),
            Answer::Written { hw: true }
        );
        assert_eq!(d.access(dbg(0, 1, 1, 4), true, 0), Answer::Read(0b1000));
        assert_eq!(
            d.access(dbg(0, 1, 1, 4), false, 0),
            Answer::Undef,
            "OSLSR is RO"
        );
        assert_eq!(
            d.access(dbg(0, 1, 0, 4), true, 0),
            Answer::Undef,
            "OSLAR is WO"
        );
        d.access(dbg(0, 0, 2, 2), false, u64::MAX);
        assert_eq!(d.mdscr, MDSCR_WRITABLE);
        assert_eq!(d.access(dbg(0, 7, 8, 6), true, 0), Answer::Read(0xFF));
        d.access(dbg(0, 7, 8, 6), false, 0x81);
        d.access(dbg(0, 7, 9, 6), false, 0x01);
        assert_eq!(d.access(dbg(0, 7, 9, 6), true, 0), Answer::Read(0x80));
        for r in [
            dbg(3, 0, 4, 0),
            dbg(3, 0, 5, 0),
            dbg(0, 0, 2, 0),
            dbg(0, 1, 3, 4),
        ] {
            assert_eq!(d.access(r, true, 0), Answer::Read(0), "{r:?}");
            assert_eq!(
                d.access(r, false, 5),
                Answer::Written { hw: false },
                "{r:?}"
            );
        }
    }

    #[test]
    fn el2_trace_and_unknown_encodings_are_undefined() {
        let mut d = DebugRegs::new(16, 16);
        let before = d;
        for op1 in 4..8 {
            assert_eq!(d.access(dbg(op1, 0, 7, 0), true, 0), Answer::Undef);
            assert_eq!(d.access(dbg(op1, 0, 0, 4), false, 1), Answer::Undef);
        }
        assert_eq!(d.access(dbg(1, 0, 1, 0), true, 0), Answer::Undef, "trace");
        assert_eq!(d.access(dbg(1, 8, 0, 0), true, 0), Answer::Undef, "BRBE");
        assert_eq!(d.access(dbg(0, 0, 4, 2), true, 0), Answer::Undef, "MDSELR");
        assert_eq!(d.access(SysReg::new(3, 0, 0, 0, 0), true, 0), Answer::Undef);
        assert_eq!(d, before);
    }
}
