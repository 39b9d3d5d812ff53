//! Decodes ESR_EL2 for a trap taken from an AArch32 guest (EL1 or EL0) into
//! a [`Trap32`]: the plain value a backend acts on, in the style of
//! [`esr::decode`](crate::guest::arm64::esr::decode) for AArch64 guests.
//!
//! Arm ARM (DDI 0487) D17 "ESR_EL2": the exception classes only AArch32
//! state raises (coprocessor traps 0x03-0x06, 0x08, 0x0C; SVC32, HVC32,
//! SMC32), the shared ones as AArch32 reports them (WFI/WFE with a
//! condition, the FP/ASIMD trap, aborts), and the fields:
//!
//! | EC | ISS |
//! |---|---|
//! | 0x01 WFI/WFE | CV [24], COND [23:20], TI [0] (1: WFE) |
//! | 0x03 MCR/MRC cp15, 0x05 cp14, 0x08 VMRS | CV, COND, Opc2 [19:17], Opc1 [16:14], CRn [13:10], Rt [9:5], CRm [4:1], Direction [0] (1: read) |
//! | 0x04 MCRR/MRRC cp15, 0x0C cp14 | CV, COND, Opc1 [19:16], Rt2 [14:10], Rt [9:5], CRm [4:1], Direction |
//! | 0x06 LDC/STC cp14 | CV, COND, imm8 [19:12], Rn [9:5], Offset [4] (U), AM [3:1], Direction (1: LDC) |
//! | 0x07 FP/ASIMD | CV, COND |
//! | 0x11 SVC32, 0x12 HVC32 | imm16 [15:0] |
//! | 0x13 SMC32 | CV, COND, CCKNOWNPASS [19] |
//! | 0x20/0x24 aborts | as from AArch64 ([`Abort`]) |
//!
//! IL (bit 25) is clear only for a 16-bit T32 instruction; it is set (RES1)
//! for aborts without a valid syndrome, which the hypervisor never steps.
//!
//! Register numbers: the Rt, Rt2 and Rn fields, and a data abort's SRT,
//! are the AArch64 view of the register ("The reported value gives the
//! AArch64 view of the register": X19 for SP in svc mode, X24 for R8 in
//! fiq mode, see [`super::regs`]), so they index the saved X registers
//! directly. R15 has no X register: QEMU reports it as 31 ([`RT_PC`]), and
//! an MRC naming R15 is the `APSR_nzcv` form (its result goes to the flags).
//!
//! Any ESR decodes: an exception class that is not one of these (or an
//! AArch64-only class) is [`Exit32::Unknown`], which a backend answers with
//! an undefined-instruction exception.

use super::cond::{self, COND_AL};
use crate::guest::arm64::esr::{self, Abort};

/// Exception classes of traps from AArch32 (ESR_EL2.EC).
pub mod ec {
    pub const UNKNOWN: u32 = 0x00;
    pub const WFX: u32 = 0x01;
    pub const CP15_32: u32 = 0x03;
    pub const CP15_64: u32 = 0x04;
    pub const CP14_32: u32 = 0x05;
    pub const CP14_LS: u32 = 0x06;
    pub const FP_ASIMD: u32 = 0x07;
    pub const CP10_ID: u32 = 0x08;
    pub const CP14_64: u32 = 0x0c;
    pub const ILLEGAL_STATE: u32 = 0x0e;
    pub const SVC32: u32 = 0x11;
    pub const HVC32: u32 = 0x12;
    pub const SMC32: u32 = 0x13;
    pub const IABT_LOWER: u32 = 0x20;
    pub const PC_ALIGN: u32 = 0x22;
    pub const DABT_LOWER: u32 = 0x24;
    pub const BKPT32: u32 = 0x38;
}

/// The register number the syndrome uses for R15 (`APSR_nzcv` in an MRC).
pub const RT_PC: u8 = 31;

/// Whether the trapped instruction is to be executed, as its syndrome says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// It passed, or had no condition: classes without a condition field
    /// (aborts, SVC, HVC, the unknown class) and an SMC whose CCKNOWNPASS
    /// is 0 (unconditional, or known to have passed).
    Passed,
    /// CV = 1: the instruction's condition (COND; 0b1110 for an
    /// unconditional or known-to-pass instruction).
    Code(u8),
    /// CV = 0 (T32 only): the condition comes from the SPSR's IT state.
    FromIt,
}

impl Cond {
    fn from_iss(iss: u32) -> Cond {
        if iss & (1 << 24) != 0 {
            Cond::Code(((iss >> 20) & 0xf) as u8)
        } else {
            Cond::FromIt
        }
    }

    /// Whether the instruction passes its condition, for a guest whose
    /// saved PSTATE is `spsr`. An instruction that fails is stepped over
    /// ([`cond::skip_instruction`]) without its effect: conditional
    /// instructions that fail their check may trap (IMPLEMENTATION DEFINED).
    pub const fn passed(self, spsr: u64) -> bool {
        match self {
            Cond::Passed => true,
            Cond::Code(c) => cond::trapped_condition_passed(true, c, spsr),
            Cond::FromIt => cond::trapped_condition_passed(false, COND_AL, spsr),
        }
    }
}

/// A coprocessor register named by an MCR/MRC: `p<cp>, Opc1, <Rt>, CRn, CRm, Opc2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CpReg {
    pub opc1: u8,
    pub crn: u8,
    pub crm: u8,
    pub opc2: u8,
}

impl CpReg {
    pub const fn new(opc1: u8, crn: u8, crm: u8, opc2: u8) -> CpReg {
        CpReg {
            opc1,
            crn,
            crm,
            opc2,
        }
    }
}

/// A trapped MCR (write) or MRC (read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mcr {
    pub reg: CpReg,
    /// Rt, AArch64 view (X0-X30, or [`RT_PC`]).
    pub rt: u8,
    /// MRC: a read of the register.
    pub read: bool,
}

/// A trapped MCRR (write) or MRRC (read): a 64-bit transfer, Rt holding
/// bits [31:0] and Rt2 bits [63:32].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mcrr {
    pub opc1: u8,
    pub crm: u8,
    /// Rt, AArch64 view.
    pub rt: u8,
    /// Rt2, AArch64 view.
    pub rt2: u8,
    /// MRRC: a read.
    pub read: bool,
}

/// The addressing mode of a trapped LDC/STC (ISS AM: bit 2 literal, bits
/// [1:0] the instruction's P and W).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// `[Rn], {option}`.
    Unindexed,
    /// `[Rn], #+/-imm`.
    PostIndexed,
    /// `[Rn, #+/-imm]`.
    Offset,
    /// `[Rn, #+/-imm]!`.
    PreIndexed,
    /// A32 LDC only: `label`, unindexed.
    LiteralUnindexed,
    /// LDC only: `[PC, #+/-imm]`.
    LiteralOffset,
    /// 0b101, 0b111: reserved encodings.
    Reserved(u8),
}

/// A trapped LDC/STC to cp14 (the debug communication channel: `STC p14,
/// c5` stores DBGDTRRXint, `LDC p14, c5` loads DBGDTRTXint).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdcStc {
    /// The offset in words.
    pub imm8: u8,
    /// Rn, AArch64 view; `None` for the literal forms (the base is the PC).
    pub rn: Option<u8>,
    /// The U bit: the offset is added (else subtracted).
    pub add: bool,
    pub mode: Addressing,
    /// LDC: a read from memory into the coprocessor (else STC).
    pub load: bool,
}

/// The register a trapped VMRS names (ISS CRn, the instruction's `reg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmrsReg {
    /// 0b0000 (HCR_EL2.TID0).
    Fpsid,
    /// 0b0101, 0b0110, 0b0111 (HCR_EL2.TID3): MVFR2, MVFR1, MVFR0.
    Mvfr2,
    Mvfr1,
    Mvfr0,
    /// Anything else (FPSCR, FPEXC and the reserved ones do not trap here).
    Other(u8),
}

impl VmrsReg {
    pub const fn from_reg(reg: u8) -> VmrsReg {
        match reg & 0xf {
            0b0000 => VmrsReg::Fpsid,
            0b0101 => VmrsReg::Mvfr2,
            0b0110 => VmrsReg::Mvfr1,
            0b0111 => VmrsReg::Mvfr0,
            r => VmrsReg::Other(r),
        }
    }
}

/// Why an AArch32 guest exited, as kestrel acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit32 {
    /// WFI (HCR_EL2.TWI). A conditional WFI that fails its condition does
    /// not trap.
    Wfi,
    /// WFE (HCR_EL2.TWE).
    Wfe,
    /// MCR/MRC to cp15 (EC 0x03): [`super::cp15::lookup`].
    Cp15(Mcr),
    /// MCRR/MRRC to cp15 (EC 0x04): [`super::cp15::lookup64`].
    Cp15Pair(Mcrr),
    /// MCR/MRC to cp14 (EC 0x05): debug, trace, Jazelle ID (TID0).
    Cp14(Mcr),
    /// MRRC to cp14 (EC 0x0C): DBGDRAR, DBGDSAR (64-bit).
    Cp14Pair(Mcrr),
    /// LDC/STC to cp14 (EC 0x06, MDCR_EL2.TDA).
    Cp14Mem(LdcStc),
    /// FP/Advanced SIMD use trapped by CPTR_EL2.TFP: the lazy-FP trap (the
    /// instruction is retried once the registers are loaded, whatever its
    /// condition).
    FpAccess,
    /// VMRS of an ID register (EC 0x08: HCR_EL2.TID0 for FPSID, TID3 for
    /// MVFR0-2); `rt` is the AArch64 view of the destination.
    Vmrs {
        reg: VmrsReg,
        rt: u8,
    },
    /// SVC routed to EL2 (only with HCR_EL2.TGE: not a guest trap).
    Svc {
        imm: u16,
    },
    /// HVC from AArch32 EL1 (the PC already points past it).
    Hvc {
        imm: u16,
    },
    /// SMC trapped by HCR_EL2.TSC (the PC points at the SMC itself).
    Smc,
    DataAbort(Abort),
    InstAbort(Abort),
    /// Any other class (or a class that only AArch64 state raises): the
    /// backend injects an undefined-instruction exception.
    Unknown {
        ec: u32,
        iss: u32,
    },
}

/// A decoded trap: what happened, whether it is to take effect, and how
/// long the trapped instruction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trap32 {
    pub exit: Exit32,
    pub cond: Cond,
    /// The trapped instruction's size in bytes: 2 for a 16-bit T32
    /// instruction (IL = 0), else 4.
    pub len: u8,
}

impl Trap32 {
    /// ESR_EL2.IL: a 32-bit instruction (or a class for which IL is RES1).
    pub const fn il(&self) -> bool {
        self.len == 4
    }
}

fn mcr(iss: u32) -> Mcr {
    Mcr {
        reg: CpReg {
            opc2: ((iss >> 17) & 7) as u8,
            opc1: ((iss >> 14) & 7) as u8,
            crn: ((iss >> 10) & 0xf) as u8,
            crm: ((iss >> 1) & 0xf) as u8,
        },
        rt: ((iss >> 5) & 0x1f) as u8,
        read: iss & 1 != 0,
    }
}

fn mcrr(iss: u32) -> Mcrr {
    Mcrr {
        opc1: ((iss >> 16) & 0xf) as u8,
        rt2: ((iss >> 10) & 0x1f) as u8,
        rt: ((iss >> 5) & 0x1f) as u8,
        crm: ((iss >> 1) & 0xf) as u8,
        read: iss & 1 != 0,
    }
}

fn ldc_stc(iss: u32) -> LdcStc {
    let am = ((iss >> 1) & 7) as u8;
    let mode = match am {
        0b000 => Addressing::Unindexed,
        0b001 => Addressing::PostIndexed,
        0b010 => Addressing::Offset,
        0b011 => Addressing::PreIndexed,
        0b100 => Addressing::LiteralUnindexed,
        0b110 => Addressing::LiteralOffset,
        r => Addressing::Reserved(r),
    };
    LdcStc {
        imm8: ((iss >> 12) & 0xff) as u8,
        // Rn is UNKNOWN for the literal forms (AM[2] = 1).
        rn: (am & 0b100 == 0).then_some(((iss >> 5) & 0x1f) as u8),
        add: iss & (1 << 4) != 0,
        mode,
        load: iss & 1 != 0,
    }
}

/// Decodes a trap from an AArch32 guest. `far` and `hpfar` matter for
/// aborts only (as for [`esr::decode`]).
pub fn decode(esr: u64, far: u64, hpfar: u64) -> Trap32 {
    let ec = ((esr >> 26) & 0x3f) as u32;
    let iss = (esr & 0x1ff_ffff) as u32;
    let len = if esr & (1 << 25) != 0 { 4 } else { 2 };
    let conditional = Cond::from_iss(iss);
    let (exit, cond) = match ec {
        ec::WFX => {
            // TI[1:0]: from AArch32 only 0 (WFI) and 1 (WFE); WFIT/WFET
            // are AArch64 instructions.
            let exit = if iss & 1 != 0 {
                Exit32::Wfe
            } else {
                Exit32::Wfi
            };
            (exit, conditional)
        }
        ec::CP15_32 => (Exit32::Cp15(mcr(iss)), conditional),
        ec::CP15_64 => (Exit32::Cp15Pair(mcrr(iss)), conditional),
        ec::CP14_32 => (Exit32::Cp14(mcr(iss)), conditional),
        ec::CP14_64 => (Exit32::Cp14Pair(mcrr(iss)), conditional),
        ec::CP14_LS => (Exit32::Cp14Mem(ldc_stc(iss)), conditional),
        ec::FP_ASIMD => (Exit32::FpAccess, conditional),
        ec::CP10_ID => {
            // Opc1 0b111, Opc2 0, CRm 0; CRn holds the VMRS `reg` field.
            let m = mcr(iss);
            let exit = Exit32::Vmrs {
                reg: VmrsReg::from_reg(m.reg.crn),
                rt: m.rt,
            };
            (exit, conditional)
        }
        ec::SVC32 => (Exit32::Svc { imm: iss as u16 }, Cond::Passed),
        ec::HVC32 => (Exit32::Hvc { imm: iss as u16 }, Cond::Passed),
        ec::SMC32 => {
            // CCKNOWNPASS = 0: unconditional or passed; CV/COND are RES0.
            let cond = if iss & (1 << 19) == 0 {
                Cond::Passed
            } else {
                conditional
            };
            (Exit32::Smc, cond)
        }
        ec::DABT_LOWER | ec::IABT_LOWER => {
            let exit = match esr::decode(esr, far, hpfar) {
                esr::Exit::DataAbort(a) => Exit32::DataAbort(a),
                esr::Exit::InstAbort(a) => Exit32::InstAbort(a),
                // esr::decode maps these two classes to aborts only.
                _ => Exit32::Unknown { ec, iss },
            };
            (exit, Cond::Passed)
        }
        _ => (Exit32::Unknown { ec, iss }, Cond::Passed),
    };
    Trap32 { exit, cond, len }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::arm64::esr::MmioAccess;

    const IL: u64 = 1 << 25;
    /// CV = 1, COND = AL: what a trapped unconditional A32 instruction reports.
    const AL: u32 = (1 << 24) | (0xe << 20);

    fn esr(ec: u32, iss: u32) -> u64 {
        (u64::from(ec) << 26) | IL | u64::from(iss)
    }

    /// The ISS of MCR/MRC (EC 0x03/0x05/0x08).
    fn mcr_iss(opc1: u32, crn: u32, crm: u32, opc2: u32, rt: u32, read: bool) -> u32 {
        (opc2 << 17) | (opc1 << 14) | (crn << 10) | (rt << 5) | (crm << 1) | u32::from(read)
    }

    #[test]
    fn mrc_mpidr_from_arm_state() {
        // mrc p15, 0, r0, c0, c0, 5 (MPIDR): EC 0x03, IL, CV, AL, Opc2 5, read.
        let t = decode(0x0FEA_0001, 0, 0);
        assert_eq!(
            t.exit,
            Exit32::Cp15(Mcr {
                reg: CpReg::new(0, 0, 0, 5),
                rt: 0,
                read: true
            })
        );
        assert_eq!(t.cond, Cond::Code(COND_AL));
        assert_eq!(t.len, 4);
        assert!(t.il());
    }

    /// Linux's ESR_ELx_CP15_32_ISS_SYS_CNTFRQ (0x3801: CRn 14, read) and
    /// ESR_ELx_CP15_64_ISS_SYS_CNTVCT (0x1001D: Opc1 1, CRm 14, read), the
    /// values arm64 Linux matches to emulate a compat task's CNTFRQ/CNTVCT.
    #[test]
    fn linux_compat_counter_syndromes() {
        let t = decode(esr(ec::CP15_32, AL | 0x3801 | (3 << 5)), 0, 0);
        assert_eq!(
            t.exit,
            Exit32::Cp15(Mcr {
                reg: CpReg::new(0, 14, 0, 0),
                rt: 3,
                read: true
            })
        );
        // mrrc p15, 1, r0, r1, c14 (CNTVCT) in svc mode would name R0, R1.
        let t = decode(esr(ec::CP15_64, AL | 0x1_001D | (1 << 10)), 0, 0);
        assert_eq!(
            t.exit,
            Exit32::Cp15Pair(Mcrr {
                opc1: 1,
                crm: 14,
                rt: 0,
                rt2: 1,
                read: true
            })
        );
        // CNTVCTSS: Opc1 9.
        let Exit32::Cp15Pair(m) = decode(esr(ec::CP15_64, 0x9_001D), 0, 0).exit else {
            panic!()
        };
        assert_eq!((m.opc1, m.crm), (9, 14));
    }

    #[test]
    fn banked_rt_is_reported_in_the_aarch64_view() {
        // mcr p15, 0, sp, c13, c0, 4 in svc mode: Rt = X19 (SP_svc).
        let t = decode(esr(ec::CP15_32, AL | mcr_iss(0, 13, 0, 4, 19, false)), 0, 0);
        let Exit32::Cp15(m) = t.exit else { panic!() };
        assert_eq!((m.rt, m.read), (19, false));
        // mcrr p15, 0, r8, lr, c2 in fiq mode: Rt = X24, Rt2 = X30.
        let iss = AL | (24 << 5) | (30 << 10) | (2 << 1);
        let Exit32::Cp15Pair(m) = decode(esr(ec::CP15_64, iss), 0, 0).exit else {
            panic!()
        };
        assert_eq!((m.opc1, m.crm, m.rt, m.rt2, m.read), (0, 2, 24, 30, false));
    }

    #[test]
    fn thumb_condition_and_length() {
        // A 16-bit T32 WFI (IL = 0) with CV = 0: the IT state decides.
        let t = decode(u64::from(ec::WFX) << 26, 0, 0);
        assert_eq!((t.exit, t.cond, t.len), (Exit32::Wfi, Cond::FromIt, 2));
        assert!(!t.il());
        // WFE with CV = 1, COND = NE (Z clear passes).
        let t = decode(esr(ec::WFX, (1 << 24) | (1 << 20) | 1), 0, 0);
        assert_eq!((t.exit, t.cond), (Exit32::Wfe, Cond::Code(1)));
        assert!(t.cond.passed(0x1d3));
        assert!(!t.cond.passed(0x4000_01d3), "Z set");
        // In `IT EQ` with Z clear, a CV = 0 trap fails its condition.
        let spsr = cond::PSR_T | cond::with_it_state(0x10, 0x08);
        assert!(!Cond::FromIt.passed(spsr));
        assert!(Cond::FromIt.passed(spsr | 1 << 30));
    }

    #[test]
    fn cp14_traps() {
        // mrc p14, 0, r1, c0, c1, 0 (DBGDSCRint).
        let t = decode(esr(ec::CP14_32, AL | mcr_iss(0, 0, 1, 0, 1, true)), 0, 0);
        assert_eq!(
            t.exit,
            Exit32::Cp14(Mcr {
                reg: CpReg::new(0, 0, 1, 0),
                rt: 1,
                read: true
            })
        );
        // mrrc p14, 0, r2, r3, c1 (DBGDRAR, 64-bit).
        let iss = AL | (3 << 10) | (2 << 5) | (1 << 1) | 1;
        let Exit32::Cp14Pair(m) = decode(esr(ec::CP14_64, iss), 0, 0).exit else {
            panic!()
        };
        assert_eq!((m.opc1, m.crm, m.rt, m.rt2, m.read), (0, 1, 2, 3, true));
        // stc p14, c5, [r0], #4: imm8 1, post-indexed, U, write to memory.
        let iss = AL | (1 << 12) | (1 << 4) | (0b001 << 1);
        let Exit32::Cp14Mem(l) = decode(esr(ec::CP14_LS, iss), 0, 0).exit else {
            panic!()
        };
        assert_eq!(
            l,
            LdcStc {
                imm8: 1,
                rn: Some(0),
                add: true,
                mode: Addressing::PostIndexed,
                load: false
            }
        );
        // ldc p14, c5, [pc, #-8]: literal offset, Rn unknown.
        let iss = AL | (2 << 12) | (7 << 5) | (0b110 << 1) | 1;
        let Exit32::Cp14Mem(l) = decode(esr(ec::CP14_LS, iss), 0, 0).exit else {
            panic!()
        };
        assert_eq!(
            (l.rn, l.add, l.mode, l.load),
            (None, false, Addressing::LiteralOffset, true)
        );
        let Exit32::Cp14Mem(l) = decode(esr(ec::CP14_LS, 0b111 << 1), 0, 0).exit else {
            panic!()
        };
        assert_eq!((l.mode, l.rn), (Addressing::Reserved(0b111), None));
    }

    #[test]
    fn vmrs_fp_and_calls() {
        // vmrs r2, mvfr0: Opc1 7, CRn 7 (reg), Rt 2, read.
        let t = decode(esr(ec::CP10_ID, AL | mcr_iss(7, 7, 0, 0, 2, true)), 0, 0);
        assert_eq!(
            t.exit,
            Exit32::Vmrs {
                reg: VmrsReg::Mvfr0,
                rt: 2
            }
        );
        let regs = [0, 5, 6, 1, 8].map(VmrsReg::from_reg);
        assert_eq!(
            regs,
            [
                VmrsReg::Fpsid,
                VmrsReg::Mvfr2,
                VmrsReg::Mvfr1,
                VmrsReg::Other(1),
                VmrsReg::Other(8)
            ]
        );
        let t = decode(esr(ec::FP_ASIMD, AL), 0, 0);
        assert_eq!((t.exit, t.cond), (Exit32::FpAccess, Cond::Code(COND_AL)));
        let t = decode(esr(ec::HVC32, 0x1234), 0, 0);
        assert_eq!(
            (t.exit, t.cond),
            (Exit32::Hvc { imm: 0x1234 }, Cond::Passed)
        );
        assert_eq!(
            decode(esr(ec::SVC32, 0xab), 0, 0).exit,
            Exit32::Svc { imm: 0xab }
        );
    }

    #[test]
    fn smc_condition_needs_ccknownpass() {
        // CCKNOWNPASS = 0: passed, whatever the (RES0) CV/COND bits say.
        let t = decode(esr(ec::SMC32, 0), 0, 0);
        assert_eq!((t.exit, t.cond), (Exit32::Smc, Cond::Passed));
        // CCKNOWNPASS = 1, CV = 1, COND = EQ: the flags decide.
        let t = decode(esr(ec::SMC32, (1 << 19) | (1 << 24)), 0, 0);
        assert_eq!(t.cond, Cond::Code(0));
        assert!(!t.cond.passed(0x1d3));
        assert!(t.cond.passed(0x4000_01d3));
    }

    #[test]
    fn data_abort_srt_is_an_x_register() {
        // str lr, [r0] in abt mode to IPA 0x0900_0000: SRT = X20 (LR_abt).
        let iss = (1 << 24) | (2 << 22) | (20 << 16) | (1 << 6) | 0x07;
        let hpfar = (0x0900_0000u64 >> 12) << 4;
        let t = decode(esr(ec::DABT_LOWER, iss), 0x0900_0000, hpfar);
        let Exit32::DataAbort(a) = t.exit else {
            panic!("{t:?}")
        };
        assert_eq!(
            a.access,
            Some(MmioAccess {
                width: 4,
                rt: 20,
                sign_extend: false,
                sf: false,
                acq_rel: false
            })
        );
        assert!(a.write);
        assert_eq!(a.ipa, 0x0900_0000);
        assert_eq!(t.cond, Cond::Passed, "ISV's bit 24 is not CV");
        // A 16-bit T32 store (strh r1, [r0]) has IL = 0.
        let t = decode(esr(ec::DABT_LOWER, iss) & !IL, 0, 0);
        assert_eq!(t.len, 2);
        assert!(
            matches!(decode(esr(ec::IABT_LOWER, 0x10), 0, 0).exit, Exit32::InstAbort(a) if a.external)
        );
    }

    #[test]
    fn other_classes_are_unknown_and_every_syndrome_decodes() {
        for ec in [
            ec::UNKNOWN,
            ec::ILLEGAL_STATE,
            ec::PC_ALIGN,
            ec::BKPT32,
            0x15,
            0x16,
            0x18,
            0x3f,
        ] {
            let t = decode(esr(ec, 0x12345), 0, 0);
            assert_eq!(t.exit, Exit32::Unknown { ec, iss: 0x12345 });
            assert_eq!(t.cond, Cond::Passed);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = decode(x, x.rotate_left(11), x.rotate_left(29));
            assert!(t.len == 2 || t.len == 4);
            let _ = t.cond.passed(x.rotate_left(5));
        }
    }
}
