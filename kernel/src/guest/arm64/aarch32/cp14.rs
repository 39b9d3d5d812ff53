//! The cp14 debug registers of an AArch32 guest (MCR/MRC p14, opc1 0, and
//! MRRC p14 of DBGDRAR/DBGDSAR), answered from the same per-vCPU shadow as
//! an AArch64 guest's op0 = 2 registers ([`DebugRegs`]): each AArch32
//! register is the view the Arm ARM (DDI 0487, G8 "AArch32 debug
//! registers") gives of its AArch64 counterpart, so a breakpoint an AArch32
//! EL1 programs is loaded into the hardware exactly as an AArch64 one.
//!
//! | AArch32 (p14, opc1, CRn, CRm, opc2) | answer |
//! |---|---|
//! | DBGDIDR (0, c0, c0, 0) | RO: WRPs, BRPs, CTX_CMPs and Version from the VM's ID_AA64DFR0_EL1, bit 15 RES1, no Secure state (SE_imp = nSUHD_imp = 0) |
//! | DBGDSCRint (0, c0, c1, 0) | RO: MDBGEN and UDCCdis of MDSCR_EL1 (RXfull/TXfull 0: no DCC) |
//! | DBGDSCRext (0, c0, c2, 2) | MDSCR_EL1's MDE (MDBGEN) and TDCC (UDCCdis); the AArch64-only SS and KDE stay 0 |
//! | DBGBVR/BCR/WVR/WCR<n> (0, c0, c<n>, 4-7) | DBGB/W{V,C}R<n>_EL1 [31:0] (n below the counts) |
//! | DBGOSLAR (0, c1, c0, 4) | WO: locks with the key 0xC5ACCE55, unlocks with any other value |
//! | DBGOSLSR (0, c1, c1, 4), DBGOSDLR (0, c1, c3, 4), DBGPRCR (0, c1, c4, 4) | OSLSR_EL1, OSDLR_EL1, DBGPRCR_EL1 |
//! | DBGCLAIMSET/CLR (0, c7, c8/c9, 6), DBGAUTHSTATUS (0, c7, c14, 6) | their `_EL1` registers |
//! | DBGDTRRXint/TXint (0, c0, c5, 0), DBGDTRRXext/TXext (c0, c0/c3, 2), DBGDCCINT (c0, c2, 0), DBGOSECCR (c0, c6, 2) | the DCC and OS save channel: RAZ/WI |
//! | DBGDRAR (0, c1, c0, 0; MRRC c1), DBGDSAR (0, c2, c0, 0; MRRC c2) | RO: 0 (no memory-mapped ROM table or debug) |
//! | DBGDEVID (0, c7, c2, 7), DBGDEVID1/2 (c7, c1/c0, 7) | RO: [`DBGDEVID`] (watchpoint address masks only), 0, 0 |
//! | DBGVCR (0, c0, c7, 0), DBGWFAR (0, c0, c6, 0) | RAZ/WI: no vector catch (DBGVCR32_EL2 stays 0), no fault address |
//!
//! Everything else (trace at opc1 1, DBGBXVR<n> (VMID matching needs
//! EL2, which the guest does not have), missing breakpoints and
//! watchpoints, writes to read-only and reads of write-only registers,
//! MCRR, any other encoding) is UNDEFINED.

use super::trap::CpReg;
use crate::guest::arm64::debug::{Answer, DebugRegs};
use crate::guest::arm64::esr::SysReg;

/// The DBGOSLAR value that locks the OS lock.
pub const OSLAR_KEY: u32 = 0xC5AC_CE55;
/// The DBGDSCR bits the shadow's MDSCR_EL1 holds for an AArch32 guest:
/// UDCCdis (12, TDCC) and MDBGEN (15, MDE).
pub const DSCR_BITS: u64 = (1 << 12) | (1 << 15);
/// DBGDEVID: WPAddrMask = 1 (watchpoint address masking, as DBGWCR.MASK),
/// BPAddrMask = 0xF (no breakpoint address masking), PCSample,
/// VectorCatch, VirtExtns, DoubleLock, AuxRegs and CIDMask 0.
pub const DBGDEVID: u32 = 0x0000_0F10;
/// DBGDIDR bit 15 (RES1 from Armv8).
const DIDR_RES1: u32 = 1 << 15;

/// One answered cp14 access: the shadow's answer and the AArch64 register
/// it stands for (for a write the hardware must hold: the register the
/// backend reloads, as after an AArch64 write of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub answer: Answer,
    pub reg: SysReg,
}

/// The op0 = 2 register of the shadow (op1 0 unless said).
const fn dbg(op1: u8, crn: u8, crm: u8, op2: u8) -> SysReg {
    SysReg::new(2, op1, crn, crm, op2)
}

/// DBGDIDR as the VM sees it, from the ID_AA64DFR0_EL1 it reads
/// (`dfr0`, kestrel's sanitized view): WRPs [31:28], BRPs [27:24] and
/// CTX_CMPs [23:20] (each the count minus 1, as in `dfr0`), Version
/// [19:16] = DebugVer (6: Armv8 debug), bit 15 set, and SE_imp (12) and
/// nSUHD_imp (14) clear: the guest has no Secure state.
pub fn dbgdidr(dfr0: u64) -> u32 {
    let f = |shift: u32| ((dfr0 >> shift) & 0xf) as u32;
    (f(20) << 28) | (f(12) << 24) | (f(28) << 20) | (f(0) << 16) | DIDR_RES1
}

/// Answers MCR (`read` false, writing `value`) or MRC of cp14 register `r`
/// for a vCPU whose shadow is `d` and whose ID_AA64DFR0_EL1 reads `dfr0`.
pub fn access(d: &mut DebugRegs, dfr0: u64, r: CpReg, read: bool, value: u32) -> Access {
    let v = u64::from(value);
    let ro = |x: u32| {
        if read {
            Answer::Read(u64::from(x))
        } else {
            Answer::Undef
        }
    };
    let raz_wi = if read {
        Answer::Read(0)
    } else {
        Answer::Written { hw: false }
    };
    let undef = Access {
        answer: Answer::Undef,
        reg: dbg(0, 0, 0, 0),
    };
    if r.opc1 != 0 {
        // Trace (opc1 1) and everything else.
        return undef;
    }
    let n = r.crm;
    let (answer, reg) = match (r.crn, r.crm, r.opc2) {
        (0, 0, 0) => (ro(dbgdidr(dfr0)), dbg(0, 0, 0, 0)),
        (0, 1, 0) => (ro((d.mdscr & DSCR_BITS) as u32), dbg(3, 0, 1, 0)),
        (0, 2, 2) => {
            let reg = dbg(0, 0, 2, 2);
            if read {
                (Answer::Read(d.mdscr & DSCR_BITS), reg)
            } else {
                (d.access(reg, false, v & DSCR_BITS), reg)
            }
        }
        // DBGB/W{V,C}R<n>: the shadow's own (it knows the counts).
        (0, _, 4..=7) => {
            let reg = dbg(0, 0, n, r.opc2);
            (d.access(reg, read, v), reg)
        }
        // DBGDTRRXint/TXint, DBGDTRRXext, DBGDCCINT, DBGDTRTXext,
        // DBGOSECCR, DBGWFAR, DBGVCR.
        (0, 5, 0) | (0, 0, 2) | (0, 2, 0) | (0, 3, 2) | (0, 6, 2) | (0, 6, 0) | (0, 7, 0) => {
            (raz_wi, dbg(0, 0, n, r.opc2))
        }
        // DBGDRAR and DBGDSAR (32-bit forms), DBGDEVID2/1/0.
        (1, 0, 0) | (2, 0, 0) | (7, 0, 7) | (7, 1, 7) => (ro(0), dbg(0, 1, 0, 0)),
        (7, 2, 7) => (ro(DBGDEVID), dbg(0, 7, 2, 7)),
        // DBGOSLAR: the AArch32 key.
        (1, 0, 4) => {
            let reg = dbg(0, 1, 0, 4);
            let lock = u64::from(value == OSLAR_KEY);
            (d.access(reg, read, lock), reg)
        }
        // DBGOSLSR, DBGOSDLR, DBGPRCR, DBGCLAIMSET/CLR, DBGAUTHSTATUS: the
        // AArch64 register at the same opc1/CRn/CRm/opc2.
        (1, 1, 4) | (1, 3, 4) | (1, 4, 4) | (7, 8, 6) | (7, 9, 6) | (7, 14, 6) => {
            let reg = dbg(0, r.crn, r.crm, r.opc2);
            (d.access(reg, read, v), reg)
        }
        _ => return undef,
    };
    Access { answer, reg }
}

/// Answers MRRC (`read`) or MCRR of cp14 with `opc1` and `crm`: only the
/// 64-bit reads of DBGDRAR (CRm 1) and DBGDSAR (CRm 2) exist, reading 0.
pub const fn access64(opc1: u8, crm: u8, read: bool) -> Answer {
    match (opc1, crm, read) {
        (0, 1 | 2, true) => Answer::Read(0),
        _ => Answer::Undef,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU's `-cpu max` ID_AA64DFR0_EL1 through kestrel's view: 6
    /// breakpoints, 4 watchpoints, 2 context-aware, DebugVer 6.
    const DFR0: u64 = 0x1030_5006 | (0xf << 36);

    fn mrc(d: &mut DebugRegs, crn: u8, crm: u8, opc2: u8) -> Answer {
        access(d, DFR0, CpReg::new(0, crn, crm, opc2), true, 0).answer
    }

    fn mcr(d: &mut DebugRegs, crn: u8, crm: u8, opc2: u8, v: u32) -> Access {
        access(d, DFR0, CpReg::new(0, crn, crm, opc2), false, v)
    }

    #[test]
    fn dbgdidr_is_built_from_the_vms_dfr0() {
        let mut d = DebugRegs::new(6, 4);
        // WRPs 3, BRPs 5, CTX_CMPs 1, Version 6, bit 15; SE_imp clear.
        assert_eq!(dbgdidr(DFR0), 0x3516_8000);
        assert_eq!(mrc(&mut d, 0, 0, 0), Answer::Read(0x3516_8000));
        assert_eq!(mcr(&mut d, 0, 0, 0, 1).answer, Answer::Undef, "RO");
        // Only the four fields: nothing else of the host's leaks in.
        assert_eq!(dbgdidr(u64::MAX), 0xffff_8000);
    }

    #[test]
    fn breakpoints_and_watchpoints_are_the_aarch64_shadow() {
        let mut d = DebugRegs::new(6, 4);
        let a = mcr(&mut d, 0, 2, 4, 0x8000_1234);
        assert_eq!(a.answer, Answer::Written { hw: true });
        assert_eq!(a.reg, SysReg::new(2, 0, 0, 2, 4), "DBGBVR2_EL1");
        assert_eq!(d.bvr[2], 0x8000_1234);
        assert!(d.dirty);
        assert_eq!(mrc(&mut d, 0, 2, 4), Answer::Read(0x8000_1234));
        // DBGBCR keeps E, PMC, BAS, LBN, BT; never HMC or SSC.
        mcr(&mut d, 0, 0, 5, 0xffff_ffff);
        assert_eq!(d.bcr[0], crate::guest::arm64::debug::BCR_KEPT);
        // DBGWVR's low bits are RES0; WCR<3> of 4 exists, WCR<4> not.
        mcr(&mut d, 0, 1, 6, 0x1003);
        assert_eq!(d.wvr[1], 0x1000);
        assert_eq!(mcr(&mut d, 0, 3, 7, 0).answer, Answer::Written { hw: true });
        assert_eq!(mcr(&mut d, 0, 4, 7, 0).answer, Answer::Undef);
        assert_eq!(mrc(&mut d, 0, 6, 4), Answer::Undef, "BVR6 of 6");
    }

    #[test]
    fn dscr_views_of_mdscr() {
        let mut d = DebugRegs::new(2, 2);
        // DBGDSCRext: MDBGEN and UDCCdis only, never SS or KDE.
        let a = mcr(&mut d, 0, 2, 2, 0xffff_ffff);
        assert_eq!(a.reg, SysReg::new(2, 0, 0, 2, 2), "MDSCR_EL1");
        assert_eq!(a.answer, Answer::Written { hw: true });
        assert_eq!(d.mdscr, DSCR_BITS);
        assert_eq!(mrc(&mut d, 0, 2, 2), Answer::Read(0x9000));
        // DBGDSCRint: the same bits, read-only; RXfull/TXfull clear.
        assert_eq!(mrc(&mut d, 0, 1, 0), Answer::Read(0x9000));
        assert_eq!(mcr(&mut d, 0, 1, 0, 0).answer, Answer::Undef);
        mcr(&mut d, 0, 2, 2, 0);
        assert_eq!(mrc(&mut d, 0, 1, 0), Answer::Read(0));
    }

    #[test]
    fn os_lock_takes_the_aarch32_key() {
        let mut d = DebugRegs::new(2, 2);
        assert_eq!(
            mrc(&mut d, 1, 1, 4),
            Answer::Read(0b1010),
            "locked at reset"
        );
        // Any value but the key unlocks (bit 0 set included).
        let a = mcr(&mut d, 1, 0, 4, 1);
        assert_eq!(a.answer, Answer::Written { hw: true });
        assert_eq!(a.reg, SysReg::new(2, 0, 1, 0, 4), "OSLAR_EL1");
        assert!(!d.oslk);
        assert_eq!(mrc(&mut d, 1, 1, 4), Answer::Read(0b1000));
        mcr(&mut d, 1, 0, 4, OSLAR_KEY);
        assert!(d.oslk);
        assert_eq!(mrc(&mut d, 1, 0, 4), Answer::Undef, "DBGOSLAR is WO");
        assert_eq!(
            mcr(&mut d, 1, 1, 4, 0).answer,
            Answer::Undef,
            "DBGOSLSR is RO"
        );
    }

    #[test]
    fn claims_auth_dcc_and_read_only_ids() {
        let mut d = DebugRegs::new(2, 2);
        assert_eq!(mrc(&mut d, 7, 8, 6), Answer::Read(0xff));
        mcr(&mut d, 7, 8, 6, 0x81);
        mcr(&mut d, 7, 9, 6, 0x01);
        assert_eq!(mrc(&mut d, 7, 9, 6), Answer::Read(0x80));
        assert_eq!(mrc(&mut d, 7, 14, 6), Answer::Read(0b1111));
        assert_eq!(mrc(&mut d, 7, 2, 7), Answer::Read(u64::from(DBGDEVID)));
        for (crn, crm, opc2) in [(1, 0, 0), (2, 0, 0), (7, 0, 7), (7, 1, 7), (7, 2, 7)] {
            assert!(matches!(mrc(&mut d, crn, crm, opc2), Answer::Read(_)));
            assert_eq!(mcr(&mut d, crn, crm, opc2, 5).answer, Answer::Undef);
        }
        for (crn, crm, opc2) in [
            (0, 5, 0),
            (0, 0, 2),
            (0, 2, 0),
            (0, 3, 2),
            (0, 6, 2),
            (0, 6, 0),
            (0, 7, 0),
            (1, 3, 4),
            (1, 4, 4),
        ] {
            assert_eq!(mrc(&mut d, crn, crm, opc2), Answer::Read(0));
            assert_eq!(
                mcr(&mut d, crn, crm, opc2, 7).answer,
                Answer::Written { hw: false }
            );
        }
        assert_eq!(access64(0, 1, true), Answer::Read(0));
        assert_eq!(access64(0, 2, true), Answer::Read(0));
        assert_eq!(access64(0, 1, false), Answer::Undef);
        assert_eq!(access64(1, 1, true), Answer::Undef);
        assert_eq!(access64(0, 3, true), Answer::Undef);
    }

    #[test]
    fn unknown_trace_and_bxvr_are_undefined_and_change_nothing() {
        let mut d = DebugRegs::new(16, 16);
        let before = d;
        for r in [
            CpReg::new(1, 0, 0, 0), // trace
            CpReg::new(0, 1, 0, 1), // DBGBXVR0
            CpReg::new(0, 0, 0, 1),
            CpReg::new(0, 3, 0, 0),
            CpReg::new(7, 0, 0, 0),
            CpReg::new(0, 15, 15, 7),
        ] {
            assert_eq!(
                access(&mut d, DFR0, r, true, 0).answer,
                Answer::Undef,
                "{r:?}"
            );
            assert_eq!(
                access(&mut d, DFR0, r, false, 1).answer,
                Answer::Undef,
                "{r:?}"
            );
        }
        assert_eq!(d, before);
        // Every encoding has an answer.
        for opc1 in 0..8 {
            for crn in 0..16 {
                for crm in 0..16 {
                    for opc2 in 0..8 {
                        let r = CpReg::new(opc1, crn, crm, opc2);
                        let _ = access(&mut d, u64::MAX, r, true, 0);
                        let _ = access(&mut d, 0, r, false, u32::MAX);
                    }
                }
            }
        }
    }
}
