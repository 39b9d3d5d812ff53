//! The cp15 system registers of an AArch32 EL1 guest, as a trapped MCR/MRC
//! (`Opc1, CRn, CRm, Opc2`) or MCRR/MRRC (`Opc1, CRm`) names them: each
//! mapped to the AArch64 register that holds the same state
//! ("architecturally mapped", so a backend answers the access with the
//! AArch64 register it already switches or emulates), or to a defined
//! answer: a cache, TLB, barrier or address-translation operation, a
//! read-as-zero register, or UNDEF for every other encoding.
//!
//! The set is what Linux uses on a 32-bit ARMv7/ARMv8 guest: the
//! VMSA control registers, fault registers, thread ID registers, the ID
//! registers, cache and TLB maintenance, the generic timer, the GICv3 CPU
//! interface and the PMU (read as zero, as kestrel's AArch64 PMU). Sources:
//! Arm ARM (DDI 0487) G7/G8 (the AArch32 System register encodings and
//! their AArch64 mappings), arm64 KVM's `cp15_regs`/`cp15_64_regs` tables
//! (arch/arm64/kvm/sys_regs.c), QEMU's cp15 register definitions.
//!
//! [`Trap`] says what makes each access reach EL2 (with kestrel's current
//! AArch64 settings, most of these never trap): a backend needs to answer
//! only what its trap controls let through.
//!
//! Two encodings of the same AArch64 register split it: a 32-bit access
//! reaches [`Part::Low`] or [`Part::High`] of a 64-bit register (TTBCR and
//! TTBCR2 are TCR_EL1[31:0] and [63:32], DFAR and IFAR are FAR_EL1[31:0]
//! and [63:32], PRRR/MAIR0 and NMRR/MAIR1 are MAIR_EL1's halves), or the
//! whole of a register whose upper half is RES0 ([`Part::Word`]). MCRR/MRRC
//! move all 64 bits ([`Part::Double`]: Rt = [31:0], Rt2 = [63:32]).

use super::trap::{CpReg, Mcr, Mcrr, VmrsReg};
use crate::guest::arm64::esr::{sysreg, SysReg};
use crate::guest::arm64::ptimer::{CNTP_CTL_EL0, CNTP_CVAL_EL0, CNTP_TVAL_EL0};

/// The AArch64 registers cp15 registers are mapped to (beyond those of
/// `esr::sysreg` and `ptimer`).
pub mod a64 {
    use crate::guest::arm64::esr::SysReg;
    pub const MIDR_EL1: SysReg = SysReg::new(3, 0, 0, 0, 0);
    pub const MPIDR_EL1: SysReg = SysReg::new(3, 0, 0, 0, 5);
    pub const REVIDR_EL1: SysReg = SysReg::new(3, 0, 0, 0, 6);
    pub const CTR_EL0: SysReg = SysReg::new(3, 3, 0, 0, 1);
    pub const CCSIDR_EL1: SysReg = SysReg::new(3, 1, 0, 0, 0);
    pub const CLIDR_EL1: SysReg = SysReg::new(3, 1, 0, 0, 1);
    pub const CCSIDR2_EL1: SysReg = SysReg::new(3, 1, 0, 0, 2);
    pub const AIDR_EL1: SysReg = SysReg::new(3, 1, 0, 0, 7);
    pub const CSSELR_EL1: SysReg = SysReg::new(3, 2, 0, 0, 0);
    pub const MVFR0_EL1: SysReg = SysReg::new(3, 0, 0, 3, 0);
    pub const MVFR1_EL1: SysReg = SysReg::new(3, 0, 0, 3, 1);
    pub const MVFR2_EL1: SysReg = SysReg::new(3, 0, 0, 3, 2);
    pub const SCTLR_EL1: SysReg = SysReg::new(3, 0, 1, 0, 0);
    pub const ACTLR_EL1: SysReg = SysReg::new(3, 0, 1, 0, 1);
    pub const CPACR_EL1: SysReg = SysReg::new(3, 0, 1, 0, 2);
    pub const TTBR0_EL1: SysReg = SysReg::new(3, 0, 2, 0, 0);
    pub const TTBR1_EL1: SysReg = SysReg::new(3, 0, 2, 0, 1);
    pub const TCR_EL1: SysReg = SysReg::new(3, 0, 2, 0, 2);
    pub const DACR32_EL2: SysReg = SysReg::new(3, 4, 3, 0, 0);
    pub const ICC_PMR_EL1: SysReg = SysReg::new(3, 0, 4, 6, 0);
    pub const IFSR32_EL2: SysReg = SysReg::new(3, 4, 5, 0, 1);
    pub const AFSR0_EL1: SysReg = SysReg::new(3, 0, 5, 1, 0);
    pub const AFSR1_EL1: SysReg = SysReg::new(3, 0, 5, 1, 1);
    pub const ESR_EL1: SysReg = SysReg::new(3, 0, 5, 2, 0);
    pub const FAR_EL1: SysReg = SysReg::new(3, 0, 6, 0, 0);
    pub const PAR_EL1: SysReg = SysReg::new(3, 0, 7, 4, 0);
    pub const MAIR_EL1: SysReg = SysReg::new(3, 0, 10, 2, 0);
    pub const AMAIR_EL1: SysReg = SysReg::new(3, 0, 10, 3, 0);
    pub const VBAR_EL1: SysReg = SysReg::new(3, 0, 12, 0, 0);
    pub const ISR_EL1: SysReg = SysReg::new(3, 0, 12, 1, 0);
    pub const ICC_IAR0_EL1: SysReg = SysReg::new(3, 0, 12, 8, 0);
    pub const ICC_EOIR0_EL1: SysReg = SysReg::new(3, 0, 12, 8, 1);
    pub const ICC_HPPIR0_EL1: SysReg = SysReg::new(3, 0, 12, 8, 2);
    pub const ICC_BPR0_EL1: SysReg = SysReg::new(3, 0, 12, 8, 3);
    pub const ICC_DIR_EL1: SysReg = SysReg::new(3, 0, 12, 11, 1);
    pub const ICC_RPR_EL1: SysReg = SysReg::new(3, 0, 12, 11, 3);
    pub const ICC_IAR1_EL1: SysReg = SysReg::new(3, 0, 12, 12, 0);
    pub const ICC_EOIR1_EL1: SysReg = SysReg::new(3, 0, 12, 12, 1);
    pub const ICC_HPPIR1_EL1: SysReg = SysReg::new(3, 0, 12, 12, 2);
    pub const ICC_BPR1_EL1: SysReg = SysReg::new(3, 0, 12, 12, 3);
    pub const ICC_CTLR_EL1: SysReg = SysReg::new(3, 0, 12, 12, 4);
    pub const ICC_SRE_EL1: SysReg = SysReg::new(3, 0, 12, 12, 5);
    pub const ICC_IGRPEN0_EL1: SysReg = SysReg::new(3, 0, 12, 12, 6);
    pub const ICC_IGRPEN1_EL1: SysReg = SysReg::new(3, 0, 12, 12, 7);
    pub const CONTEXTIDR_EL1: SysReg = SysReg::new(3, 0, 13, 0, 1);
    pub const TPIDR_EL1: SysReg = SysReg::new(3, 0, 13, 0, 4);
    pub const TPIDR_EL0: SysReg = SysReg::new(3, 3, 13, 0, 2);
    pub const TPIDRRO_EL0: SysReg = SysReg::new(3, 3, 13, 0, 3);
    pub const CNTKCTL_EL1: SysReg = SysReg::new(3, 0, 14, 1, 0);
    pub const CNTFRQ_EL0: SysReg = SysReg::new(3, 3, 14, 0, 0);
    pub const CNTPCT_EL0: SysReg = SysReg::new(3, 3, 14, 0, 1);
    pub const CNTVCT_EL0: SysReg = SysReg::new(3, 3, 14, 0, 2);
    pub const CNTPCTSS_EL0: SysReg = SysReg::new(3, 3, 14, 0, 5);
    pub const CNTVCTSS_EL0: SysReg = SysReg::new(3, 3, 14, 0, 6);
    pub const CNTV_TVAL_EL0: SysReg = SysReg::new(3, 3, 14, 3, 0);
    pub const CNTV_CTL_EL0: SysReg = SysReg::new(3, 3, 14, 3, 1);
    pub const CNTV_CVAL_EL0: SysReg = SysReg::new(3, 3, 14, 3, 2);
}

/// Which bits of the AArch64 register an access moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The register as 32 bits: a read gives [31:0], a write sets [31:0]
    /// and clears [63:32] (RES0 for the AArch32 view).
    Word,
    /// Bits [31:0]; a write keeps [63:32].
    Low,
    /// Bits [63:32]; a write keeps [31:0].
    High,
    /// All 64 bits (MCRR/MRRC).
    Double,
}

impl Part {
    /// The 32 bits an MRC reads from the register value `reg` (for
    /// [`Part::Double`], the low word: use [`split`]).
    pub const fn read(self, reg: u64) -> u32 {
        match self {
            Part::High => (reg >> 32) as u32,
            _ => reg as u32,
        }
    }

    /// The register value after an MCR writes `v` over `old`.
    pub const fn write(self, old: u64, v: u32) -> u64 {
        let v = v as u64;
        match self {
            Part::Word => v,
            Part::Low => (old & 0xffff_ffff_0000_0000) | v,
            Part::High => (old & 0xffff_ffff) | (v << 32),
            Part::Double => (old & 0xffff_ffff_0000_0000) | v,
        }
    }
}

/// The two registers of an MRRC: (Rt = [31:0], Rt2 = [63:32]).
pub const fn split(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

/// The 64-bit value an MCRR writes from Rt and Rt2.
pub const fn join(rt: u32, rt2: u32) -> u64 {
    (rt as u64) | ((rt2 as u64) << 32)
}

/// Which directions the register allows at EL1 (the other is UNDEF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    ReadWrite,
    ReadOnly,
    WriteOnly,
}

/// What traps an access to EL2 (with EL2 in AArch64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trap {
    /// No EL2 control aimed at it (HSTR_EL2.T<n> traps any cp15 CRn).
    Never,
    /// HCR_EL2.TVM (writes), TRVM (reads): the VMSA control registers.
    Tvm,
    /// HCR_EL2.TACR: ACTLR, ACTLR2.
    Tacr,
    /// CPTR_EL2.TCPAC: CPACR.
    Tcpac,
    /// HCR_EL2.TID1: TCMTR, TLBTR, REVIDR, AIDR.
    Tid1,
    /// HCR_EL2.TID2: CTR, CCSIDR, CCSIDR2, CLIDR, CSSELR.
    Tid2,
    /// HCR_EL2.TID3: the feature ID registers (Opc1 0, CRn 0, CRm 1-7).
    Tid3,
    /// HCR_EL2.TSW: data cache maintenance by set/way.
    Tsw,
    /// HCR_EL2.TPCP: cache maintenance to the Point of Coherency/Persistence.
    Tpcp,
    /// HCR_EL2.TPU: cache maintenance to the Point of Unification.
    Tpu,
    /// HCR_EL2.TTLB: TLB maintenance.
    Ttlb,
    /// MDCR_EL2.TPM/TPMCR: the PMU.
    Tpm,
    /// CNTHCTL_EL2.EL1PCEN (physical timer) / EL1PCTEN (physical counter).
    Timer,
    /// The GIC: SGI generation with HCR_EL2.IMO/FMO, the rest with
    /// ICH_HCR_EL2 (TC, TALL0, TALL1, TDIR) or ICC_SRE_EL2.Enable = 0.
    Gic,
    /// HCR_EL2.TIDCP: the IMPLEMENTATION DEFINED encodings of CRn 9-11.
    Tidcp,
}

/// Data cache maintenance by set/way (HCR_EL2.TSW): a hypervisor that
/// moves vCPUs between pCPUs answers it itself (by cleaning what the guest
/// may have dirtied, or by ignoring it when guest memory is kept coherent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetWay {
    /// DCISW.
    Invalidate,
    /// DCCSW.
    Clean,
    /// DCCISW.
    CleanInvalidate,
}

/// Cache and branch predictor maintenance by virtual address (traps only
/// with TPCP/TPU; then the hypervisor would perform it for the guest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByVa {
    /// DCIMVAC: invalidate to PoC.
    Dcimvac,
    /// DCCMVAC: clean to PoC.
    Dccmvac,
    /// DCCMVAU: clean to PoU.
    Dccmvau,
    /// DCCIMVAC: clean and invalidate to PoC.
    Dccimvac,
    /// DCCMVAP: clean to the Point of Persistence (FEAT_DPB).
    Dccmvap,
    /// ICIMVAU: invalidate the instruction cache line to PoU.
    Icimvau,
    /// BPIMVA: invalidate the branch predictor entry.
    Bpimva,
}

/// Instruction cache and branch predictor invalidate-all operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidateAll {
    /// ICIALLUIS: all instruction caches to PoU, Inner Shareable.
    Icialluis,
    /// ICIALLU.
    Iciallu,
    /// BPIALLIS.
    Bpiallis,
    /// BPIALL.
    Bpiall,
}

/// What a TLB maintenance operation invalidates (stage 1 of the guest's
/// own VMID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlbScope {
    /// TLBIALL (and the ITLB/DTLB forms): every entry.
    All,
    /// TLBIMVA: one VA for one ASID (Rt = VA[31:12], ASID[7:0]).
    Va,
    /// TLBIASID: one ASID (Rt[7:0]).
    Asid,
    /// TLBIMVAA: one VA for every ASID.
    VaAllAsids,
}

/// A TLB maintenance operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tlbi {
    pub scope: TlbScope,
    /// The Inner Shareable (IS) form: broadcast to every PE.
    pub shareable: bool,
    /// The last-level (L) form: only the leaf entries.
    pub last_level: bool,
}

/// The legacy cp15 barrier operations (SCTLR.CP15BEN enables them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Barrier {
    /// CP15ISB.
    Isb,
    /// CP15DSB.
    Dsb,
    /// CP15DMB.
    Dmb,
}

/// Stage 1 address translation operations (result in PAR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum At {
    /// ATS1CPR: privileged read.
    Ats1cpr,
    /// ATS1CPW: privileged write.
    Ats1cpw,
    /// ATS1CUR: unprivileged read.
    Ats1cur,
    /// ATS1CUW: unprivileged write.
    Ats1cuw,
    /// ATS1CPRP: privileged read, honouring PAN (FEAT_PAN2).
    Ats1cprp,
    /// ATS1CPWP: privileged write, honouring PAN (FEAT_PAN2).
    Ats1cpwp,
}

/// The answer to an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The AArch64 system register holding the same state.
    Sys {
        reg: SysReg,
        part: Part,
    },
    /// Reads this value, writes are ignored.
    Const(u32),
    /// Reads as zero, writes are ignored (kestrel's PMU; FCSEIDR).
    RazWi,
    SetWay(SetWay),
    ByVa(ByVa),
    InvalidateAll(InvalidateAll),
    Tlbi(Tlbi),
    Barrier(Barrier),
    At(At),
    /// UNDEFINED at EL1 (or not given to guests): inject an
    /// undefined-instruction exception.
    Undef,
}

/// One cp15 encoding: its name, answer, allowed directions and trap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cp15Reg {
    pub name: &'static str,
    pub kind: Kind,
    pub access: Access,
    pub trap: Trap,
}

impl Cp15Reg {
    /// Whether a read (MRC/MRRC) or write (MCR/MCRR) is allowed.
    pub const fn allows(&self, read: bool) -> bool {
        match self.access {
            Access::ReadWrite => true,
            Access::ReadOnly => read,
            Access::WriteOnly => !read,
        }
    }

    /// The answer to an access in direction `read`: UNDEF for the
    /// direction the register does not have.
    pub const fn answer(&self, read: bool) -> Kind {
        if self.allows(read) {
            self.kind
        } else {
            Kind::Undef
        }
    }
}

const UNDEF: Cp15Reg = Cp15Reg {
    name: "unallocated",
    kind: Kind::Undef,
    access: Access::ReadWrite,
    trap: Trap::Never,
};

const fn reg(name: &'static str, kind: Kind, access: Access, trap: Trap) -> Cp15Reg {
    Cp15Reg {
        name,
        kind,
        access,
        trap,
    }
}

const fn sys(name: &'static str, r: SysReg, part: Part, access: Access, trap: Trap) -> Cp15Reg {
    reg(name, Kind::Sys { reg: r, part }, access, trap)
}

const fn op(name: &'static str, kind: Kind, trap: Trap) -> Cp15Reg {
    reg(name, kind, Access::WriteOnly, trap)
}

const fn tlbi(name: &'static str, scope: TlbScope, shareable: bool, last_level: bool) -> Cp15Reg {
    op(
        name,
        Kind::Tlbi(Tlbi {
            scope,
            shareable,
            last_level,
        }),
        Trap::Ttlb,
    )
}

const fn c(opc1: u8, crn: u8, crm: u8, opc2: u8) -> CpReg {
    CpReg::new(opc1, crn, crm, opc2)
}

use Access::{ReadOnly as RO, ReadWrite as RW, WriteOnly as WO};
use Part::{High, Low, Word};

/// The named 32-bit encodings (the ID space of Opc1 0, CRn 0, CRm 1-7,
/// the PMU and the IMPLEMENTATION DEFINED space are rules: [`lookup`]).
const CP15_32: &[(CpReg, Cp15Reg)] = &[
    // c0: identification.
    (
        c(0, 0, 0, 0),
        sys("MIDR", a64::MIDR_EL1, Word, RO, Trap::Never),
    ),
    (
        c(0, 0, 0, 1),
        sys("CTR", a64::CTR_EL0, Word, RO, Trap::Tid2),
    ),
    (c(0, 0, 0, 2), reg("TCMTR", Kind::Const(0), RO, Trap::Tid1)),
    (c(0, 0, 0, 3), reg("TLBTR", Kind::Const(0), RO, Trap::Tid1)),
    (
        c(0, 0, 0, 4),
        sys("MIDR (alias)", a64::MIDR_EL1, Word, RO, Trap::Never),
    ),
    (
        c(0, 0, 0, 5),
        sys("MPIDR", a64::MPIDR_EL1, Word, RO, Trap::Never),
    ),
    (
        c(0, 0, 0, 6),
        sys("REVIDR", a64::REVIDR_EL1, Word, RO, Trap::Tid1),
    ),
    (
        c(0, 0, 0, 7),
        sys("MIDR (alias)", a64::MIDR_EL1, Word, RO, Trap::Never),
    ),
    (
        c(1, 0, 0, 0),
        sys("CCSIDR", a64::CCSIDR_EL1, Low, RO, Trap::Tid2),
    ),
    (
        c(1, 0, 0, 1),
        sys("CLIDR", a64::CLIDR_EL1, Word, RO, Trap::Tid2),
    ),
    (
        c(1, 0, 0, 2),
        sys("CCSIDR2", a64::CCSIDR2_EL1, Word, RO, Trap::Tid2),
    ),
    (
        c(1, 0, 0, 7),
        sys("AIDR", a64::AIDR_EL1, Word, RO, Trap::Tid1),
    ),
    (
        c(2, 0, 0, 0),
        sys("CSSELR", a64::CSSELR_EL1, Word, RW, Trap::Tid2),
    ),
    // c1: system control.
    (
        c(0, 1, 0, 0),
        sys("SCTLR", a64::SCTLR_EL1, Word, RW, Trap::Tvm),
    ),
    (
        c(0, 1, 0, 1),
        sys("ACTLR", a64::ACTLR_EL1, Low, RW, Trap::Tacr),
    ),
    (
        c(0, 1, 0, 2),
        sys("CPACR", a64::CPACR_EL1, Word, RW, Trap::Tcpac),
    ),
    (
        c(0, 1, 0, 3),
        sys("ACTLR2", a64::ACTLR_EL1, High, RW, Trap::Tacr),
    ),
    // c2, c3: translation tables, domains.
    (
        c(0, 2, 0, 0),
        sys("TTBR0", a64::TTBR0_EL1, Low, RW, Trap::Tvm),
    ),
    (
        c(0, 2, 0, 1),
        sys("TTBR1", a64::TTBR1_EL1, Low, RW, Trap::Tvm),
    ),
    (
        c(0, 2, 0, 2),
        sys("TTBCR", a64::TCR_EL1, Low, RW, Trap::Tvm),
    ),
    (
        c(0, 2, 0, 3),
        sys("TTBCR2", a64::TCR_EL1, High, RW, Trap::Tvm),
    ),
    (
        c(0, 3, 0, 0),
        sys("DACR", a64::DACR32_EL2, Word, RW, Trap::Tvm),
    ),
    // c4: GIC priority mask.
    (
        c(0, 4, 6, 0),
        sys("ICC_PMR", a64::ICC_PMR_EL1, Word, RW, Trap::Gic),
    ),
    // c5, c6: faults.
    (
        c(0, 5, 0, 0),
        sys("DFSR", a64::ESR_EL1, Word, RW, Trap::Tvm),
    ),
    (
        c(0, 5, 0, 1),
        sys("IFSR", a64::IFSR32_EL2, Word, RW, Trap::Tvm),
    ),
    (
        c(0, 5, 1, 0),
        sys("ADFSR", a64::AFSR0_EL1, Word, RW, Trap::Tvm),
    ),
    (
        c(0, 5, 1, 1),
        sys("AIFSR", a64::AFSR1_EL1, Word, RW, Trap::Tvm),
    ),
    (c(0, 6, 0, 0), sys("DFAR", a64::FAR_EL1, Low, RW, Trap::Tvm)),
    (
        c(0, 6, 0, 2),
        sys("IFAR", a64::FAR_EL1, High, RW, Trap::Tvm),
    ),
    // c7: cache maintenance, address translation, barriers.
    (
        c(0, 7, 1, 0),
        op(
            "ICIALLUIS",
            Kind::InvalidateAll(InvalidateAll::Icialluis),
            Trap::Tpu,
        ),
    ),
    (
        c(0, 7, 1, 6),
        op(
            "BPIALLIS",
            Kind::InvalidateAll(InvalidateAll::Bpiallis),
            Trap::Never,
        ),
    ),
    (
        c(0, 7, 4, 0),
        sys("PAR", a64::PAR_EL1, Low, RW, Trap::Never),
    ),
    (
        c(0, 7, 5, 0),
        op(
            "ICIALLU",
            Kind::InvalidateAll(InvalidateAll::Iciallu),
            Trap::Tpu,
        ),
    ),
    (
        c(0, 7, 5, 1),
        op("ICIMVAU", Kind::ByVa(ByVa::Icimvau), Trap::Tpu),
    ),
    (
        c(0, 7, 5, 4),
        op("CP15ISB", Kind::Barrier(Barrier::Isb), Trap::Never),
    ),
    (
        c(0, 7, 5, 6),
        op(
            "BPIALL",
            Kind::InvalidateAll(InvalidateAll::Bpiall),
            Trap::Never,
        ),
    ),
    (
        c(0, 7, 5, 7),
        op("BPIMVA", Kind::ByVa(ByVa::Bpimva), Trap::Never),
    ),
    (
        c(0, 7, 6, 1),
        op("DCIMVAC", Kind::ByVa(ByVa::Dcimvac), Trap::Tpcp),
    ),
    (
        c(0, 7, 6, 2),
        op("DCISW", Kind::SetWay(SetWay::Invalidate), Trap::Tsw),
    ),
    (
        c(0, 7, 8, 0),
        op("ATS1CPR", Kind::At(At::Ats1cpr), Trap::Never),
    ),
    (
        c(0, 7, 8, 1),
        op("ATS1CPW", Kind::At(At::Ats1cpw), Trap::Never),
    ),
    (
        c(0, 7, 8, 2),
        op("ATS1CUR", Kind::At(At::Ats1cur), Trap::Never),
    ),
    (
        c(0, 7, 8, 3),
        op("ATS1CUW", Kind::At(At::Ats1cuw), Trap::Never),
    ),
    (
        c(0, 7, 9, 0),
        op("ATS1CPRP", Kind::At(At::Ats1cprp), Trap::Never),
    ),
    (
        c(0, 7, 9, 1),
        op("ATS1CPWP", Kind::At(At::Ats1cpwp), Trap::Never),
    ),
    (
        c(0, 7, 10, 1),
        op("DCCMVAC", Kind::ByVa(ByVa::Dccmvac), Trap::Tpcp),
    ),
    (
        c(0, 7, 10, 2),
        op("DCCSW", Kind::SetWay(SetWay::Clean), Trap::Tsw),
    ),
    (
        c(0, 7, 10, 4),
        op("CP15DSB", Kind::Barrier(Barrier::Dsb), Trap::Never),
    ),
    (
        c(0, 7, 10, 5),
        op("CP15DMB", Kind::Barrier(Barrier::Dmb), Trap::Never),
    ),
    (
        c(0, 7, 11, 1),
        op("DCCMVAU", Kind::ByVa(ByVa::Dccmvau), Trap::Tpu),
    ),
    (
        c(0, 7, 12, 1),
        op("DCCMVAP", Kind::ByVa(ByVa::Dccmvap), Trap::Tpcp),
    ),
    (
        c(0, 7, 14, 1),
        op("DCCIMVAC", Kind::ByVa(ByVa::Dccimvac), Trap::Tpcp),
    ),
    (
        c(0, 7, 14, 2),
        op("DCCISW", Kind::SetWay(SetWay::CleanInvalidate), Trap::Tsw),
    ),
    // c8: TLB maintenance.
    (c(0, 8, 3, 0), tlbi("TLBIALLIS", TlbScope::All, true, false)),
    (c(0, 8, 3, 1), tlbi("TLBIMVAIS", TlbScope::Va, true, false)),
    (
        c(0, 8, 3, 2),
        tlbi("TLBIASIDIS", TlbScope::Asid, true, false),
    ),
    (
        c(0, 8, 3, 3),
        tlbi("TLBIMVAAIS", TlbScope::VaAllAsids, true, false),
    ),
    (c(0, 8, 3, 5), tlbi("TLBIMVALIS", TlbScope::Va, true, true)),
    (
        c(0, 8, 3, 7),
        tlbi("TLBIMVAALIS", TlbScope::VaAllAsids, true, true),
    ),
    (c(0, 8, 5, 0), tlbi("ITLBIALL", TlbScope::All, false, false)),
    (c(0, 8, 5, 1), tlbi("ITLBIMVA", TlbScope::Va, false, false)),
    (
        c(0, 8, 5, 2),
        tlbi("ITLBIASID", TlbScope::Asid, false, false),
    ),
    (c(0, 8, 6, 0), tlbi("DTLBIALL", TlbScope::All, false, false)),
    (c(0, 8, 6, 1), tlbi("DTLBIMVA", TlbScope::Va, false, false)),
    (
        c(0, 8, 6, 2),
        tlbi("DTLBIASID", TlbScope::Asid, false, false),
    ),
    (c(0, 8, 7, 0), tlbi("TLBIALL", TlbScope::All, false, false)),
    (c(0, 8, 7, 1), tlbi("TLBIMVA", TlbScope::Va, false, false)),
    (
        c(0, 8, 7, 2),
        tlbi("TLBIASID", TlbScope::Asid, false, false),
    ),
    (
        c(0, 8, 7, 3),
        tlbi("TLBIMVAA", TlbScope::VaAllAsids, false, false),
    ),
    (c(0, 8, 7, 5), tlbi("TLBIMVAL", TlbScope::Va, false, true)),
    (
        c(0, 8, 7, 7),
        tlbi("TLBIMVAAL", TlbScope::VaAllAsids, false, true),
    ),
    // c10: memory attributes.
    (
        c(0, 10, 2, 0),
        sys("PRRR/MAIR0", a64::MAIR_EL1, Low, RW, Trap::Tvm),
    ),
    (
        c(0, 10, 2, 1),
        sys("NMRR/MAIR1", a64::MAIR_EL1, High, RW, Trap::Tvm),
    ),
    (
        c(0, 10, 3, 0),
        sys("AMAIR0", a64::AMAIR_EL1, Low, RW, Trap::Tvm),
    ),
    (
        c(0, 10, 3, 1),
        sys("AMAIR1", a64::AMAIR_EL1, High, RW, Trap::Tvm),
    ),
    // c12: vectors, interrupt status, the GICv3 CPU interface.
    (
        c(0, 12, 0, 0),
        sys("VBAR", a64::VBAR_EL1, Word, RW, Trap::Never),
    ),
    (
        c(0, 12, 1, 0),
        sys("ISR", a64::ISR_EL1, Word, RO, Trap::Never),
    ),
    (
        c(0, 12, 8, 0),
        sys("ICC_IAR0", a64::ICC_IAR0_EL1, Word, RO, Trap::Gic),
    ),
    (
        c(0, 12, 8, 1),
        sys("ICC_EOIR0", a64::ICC_EOIR0_EL1, Word, WO, Trap::Gic),
    ),
    (
        c(0, 12, 8, 2),
        sys("ICC_HPPIR0", a64::ICC_HPPIR0_EL1, Word, RO, Trap::Gic),
    ),
    (
        c(0, 12, 8, 3),
        sys("ICC_BPR0", a64::ICC_BPR0_EL1, Word, RW, Trap::Gic),
    ),
    (
        c(0, 12, 8, 4),
        sys(
            "ICC_AP0R0",
            SysReg::new(3, 0, 12, 8, 4),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 8, 5),
        sys(
            "ICC_AP0R1",
            SysReg::new(3, 0, 12, 8, 5),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 8, 6),
        sys(
            "ICC_AP0R2",
            SysReg::new(3, 0, 12, 8, 6),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 8, 7),
        sys(
            "ICC_AP0R3",
            SysReg::new(3, 0, 12, 8, 7),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 9, 0),
        sys(
            "ICC_AP1R0",
            SysReg::new(3, 0, 12, 9, 0),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 9, 1),
        sys(
            "ICC_AP1R1",
            SysReg::new(3, 0, 12, 9, 1),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 9, 2),
        sys(
            "ICC_AP1R2",
            SysReg::new(3, 0, 12, 9, 2),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 9, 3),
        sys(
            "ICC_AP1R3",
            SysReg::new(3, 0, 12, 9, 3),
            Word,
            RW,
            Trap::Gic,
        ),
    ),
    (
        c(0, 12, 11, 1),
        sys("ICC_DIR", a64::ICC_DIR_EL1, Word, WO, Trap::Gic),
    ),
    (
        c(0, 12, 11, 3),
        sys("ICC_RPR", a64::ICC_RPR_EL1, Word, RO, Trap::Gic),
    ),
    (
        c(0, 12, 12, 0),
        sys("ICC_IAR1", a64::ICC_IAR1_EL1, Word, RO, Trap::Gic),
    ),
    (
        c(0, 12, 12, 1),
        sys("ICC_EOIR1", a64::ICC_EOIR1_EL1, Word, WO, Trap::Gic),
    ),
    (
        c(0, 12, 12, 2),
        sys("ICC_HPPIR1", a64::ICC_HPPIR1_EL1, Word, RO, Trap::Gic),
    ),
    (
        c(0, 12, 12, 3),
        sys("ICC_BPR1", a64::ICC_BPR1_EL1, Word, RW, Trap::Gic),
    ),
    (
        c(0, 12, 12, 4),
        sys("ICC_CTLR", a64::ICC_CTLR_EL1, Word, RW, Trap::Gic),
    ),
    (
        c(0, 12, 12, 5),
        sys("ICC_SRE", a64::ICC_SRE_EL1, Word, RW, Trap::Gic),
    ),
    (
        c(0, 12, 12, 6),
        sys("ICC_IGRPEN0", a64::ICC_IGRPEN0_EL1, Word, RW, Trap::Gic),
    ),
    (
        c(0, 12, 12, 7),
        sys("ICC_IGRPEN1", a64::ICC_IGRPEN1_EL1, Word, RW, Trap::Gic),
    ),
    // c13: process and thread IDs.
    (c(0, 13, 0, 0), reg("FCSEIDR", Kind::RazWi, RW, Trap::Never)),
    (
        c(0, 13, 0, 1),
        sys("CONTEXTIDR", a64::CONTEXTIDR_EL1, Word, RW, Trap::Tvm),
    ),
    (
        c(0, 13, 0, 2),
        sys("TPIDRURW", a64::TPIDR_EL0, Low, RW, Trap::Never),
    ),
    (
        c(0, 13, 0, 3),
        sys("TPIDRURO", a64::TPIDRRO_EL0, Low, RW, Trap::Never),
    ),
    (
        c(0, 13, 0, 4),
        sys("TPIDRPRW", a64::TPIDR_EL1, Low, RW, Trap::Never),
    ),
    // c14: the generic timer.
    (
        c(0, 14, 0, 0),
        sys("CNTFRQ", a64::CNTFRQ_EL0, Word, RO, Trap::Never),
    ),
    (
        c(0, 14, 1, 0),
        sys("CNTKCTL", a64::CNTKCTL_EL1, Word, RW, Trap::Never),
    ),
    (
        c(0, 14, 2, 0),
        sys("CNTP_TVAL", CNTP_TVAL_EL0, Word, RW, Trap::Timer),
    ),
    (
        c(0, 14, 2, 1),
        sys("CNTP_CTL", CNTP_CTL_EL0, Word, RW, Trap::Timer),
    ),
    (
        c(0, 14, 3, 0),
        sys("CNTV_TVAL", a64::CNTV_TVAL_EL0, Word, RW, Trap::Never),
    ),
    (
        c(0, 14, 3, 1),
        sys("CNTV_CTL", a64::CNTV_CTL_EL0, Word, RW, Trap::Never),
    ),
];

/// The 64-bit (MCRR/MRRC) encodings, by (Opc1, CRm).
const CP15_64: &[((u8, u8), Cp15Reg)] = &[
    (
        (0, 2),
        sys("TTBR0", a64::TTBR0_EL1, Part::Double, RW, Trap::Tvm),
    ),
    (
        (1, 2),
        sys("TTBR1", a64::TTBR1_EL1, Part::Double, RW, Trap::Tvm),
    ),
    (
        (0, 7),
        sys("PAR", a64::PAR_EL1, Part::Double, RW, Trap::Never),
    ),
    ((0, 9), reg("PMCCNTR", Kind::RazWi, RW, Trap::Tpm)),
    (
        (0, 12),
        sys(
            "ICC_SGI1R",
            sysreg::ICC_SGI1R_EL1,
            Part::Double,
            WO,
            Trap::Gic,
        ),
    ),
    (
        (1, 12),
        sys(
            "ICC_ASGI1R",
            sysreg::ICC_ASGI1R_EL1,
            Part::Double,
            WO,
            Trap::Gic,
        ),
    ),
    (
        (2, 12),
        sys(
            "ICC_SGI0R",
            sysreg::ICC_SGI0R_EL1,
            Part::Double,
            WO,
            Trap::Gic,
        ),
    ),
    (
        (0, 14),
        sys("CNTPCT", a64::CNTPCT_EL0, Part::Double, RO, Trap::Timer),
    ),
    (
        (1, 14),
        sys("CNTVCT", a64::CNTVCT_EL0, Part::Double, RO, Trap::Never),
    ),
    (
        (2, 14),
        sys("CNTP_CVAL", CNTP_CVAL_EL0, Part::Double, RW, Trap::Timer),
    ),
    (
        (3, 14),
        sys(
            "CNTV_CVAL",
            a64::CNTV_CVAL_EL0,
            Part::Double,
            RW,
            Trap::Never,
        ),
    ),
    (
        (8, 14),
        sys("CNTPCTSS", a64::CNTPCTSS_EL0, Part::Double, RO, Trap::Timer),
    ),
    (
        (9, 14),
        sys("CNTVCTSS", a64::CNTVCTSS_EL0, Part::Double, RO, Trap::Never),
    ),
];

/// The names of the feature ID registers (Opc1 0, CRn 0, CRm 1-3).
const fn id_name(crm: u8, opc2: u8) -> &'static str {
    match (crm, opc2) {
        (1, 0) => "ID_PFR0",
        (1, 1) => "ID_PFR1",
        (1, 2) => "ID_DFR0",
        (1, 3) => "ID_AFR0",
        (1, 4) => "ID_MMFR0",
        (1, 5) => "ID_MMFR1",
        (1, 6) => "ID_MMFR2",
        (1, 7) => "ID_MMFR3",
        (2, 0) => "ID_ISAR0",
        (2, 1) => "ID_ISAR1",
        (2, 2) => "ID_ISAR2",
        (2, 3) => "ID_ISAR3",
        (2, 4) => "ID_ISAR4",
        (2, 5) => "ID_ISAR5",
        (2, 6) => "ID_MMFR4",
        (2, 7) => "ID_ISAR6",
        (3, 0) => "MVFR0",
        (3, 1) => "MVFR1",
        (3, 2) => "MVFR2",
        (3, 4) => "ID_PFR2",
        (3, 5) => "ID_DFR1",
        (3, 6) => "ID_MMFR5",
        _ => "ID space (reserved, RAZ)",
    }
}

/// HCR_EL2.TIDCP's AArch32 space: CRn 9 CRm {0-2, 5-8}, CRn 10 CRm {0, 1,
/// 4, 8}, CRn 11 CRm {0-8, 15}, any Opc1 and Opc2.
pub const fn is_impdef(crn: u8, crm: u8) -> bool {
    let mask: u16 = match crn {
        9 => 0b0000_0001_1110_0111,
        10 => 0b0000_0001_0001_0011,
        11 => 0b1000_0001_1111_1111,
        _ => return false,
    };
    crm < 16 && (mask >> crm) & 1 == 1
}

/// The 32-bit cp15 encoding `r` (an MCR/MRC). Every encoding has an
/// answer; those not listed are UNDEF.
pub fn lookup(r: CpReg) -> Cp15Reg {
    if let Some((_, e)) = CP15_32.iter().find(|(k, _)| *k == r) {
        return *e;
    }
    let CpReg {
        opc1,
        crn,
        crm,
        opc2,
    } = r;
    match (opc1, crn, crm) {
        // The feature ID registers and the reserved encodings among them
        // (RAZ): the AArch64 ID_*_EL1 register with the same CRm/Opc2
        // (AArch64 keeps CRm 1-3 for the AArch32 ID registers).
        (0, 0, 1..=3) if opc2 < 8 => sys(
            id_name(crm, opc2),
            SysReg::new(3, 0, 0, crm, opc2),
            Word,
            RO,
            Trap::Tid3,
        ),
        // CRm 4-7: reserved in AArch32 (RAZ), not the AArch64 ID_AA64*
        // registers those CRm values name in AArch64.
        (0, 0, 4..=7) => reg("ID space (reserved, RAZ)", Kind::Const(0), RO, Trap::Tid3),
        // PMU: PMCR .. PMMIR (c9, c12-c14), the event counters and types
        // (c14, c8-c15): read as zero, as kestrel's AArch64 PMU.
        (0, 9, 12..=14) | (0, 14, 8..=15) => reg("PMU", Kind::RazWi, RW, Trap::Tpm),
        _ if is_impdef(crn, crm) => reg("IMPLEMENTATION DEFINED", Kind::Undef, RW, Trap::Tidcp),
        _ => UNDEF,
    }
}

/// The 64-bit cp15 encoding (Opc1, CRm) of an MCRR/MRRC; UNDEF if unlisted.
pub fn lookup64(opc1: u8, crm: u8) -> Cp15Reg {
    CP15_64
        .iter()
        .find(|(k, _)| *k == (opc1, crm))
        .map_or(UNDEF, |(_, e)| *e)
}

/// The answer to a trapped MCR/MRC.
pub fn answer(m: &Mcr) -> Kind {
    lookup(m.reg).answer(m.read)
}

/// The answer to a trapped MCRR/MRRC.
pub fn answer64(m: &Mcrr) -> Kind {
    lookup64(m.opc1, m.crm).answer(m.read)
}

/// The AArch64 register behind a VMRS of an ID register (EC 0x08): MVFR0-2
/// are MVFR0_EL1-MVFR2_EL1; FPSID (HCR_EL2.TID0) has no AArch64
/// counterpart and the other encodings are not ID registers.
pub const fn vmrs_id(reg: VmrsReg) -> Option<SysReg> {
    match reg {
        VmrsReg::Mvfr0 => Some(a64::MVFR0_EL1),
        VmrsReg::Mvfr1 => Some(a64::MVFR1_EL1),
        VmrsReg::Mvfr2 => Some(a64::MVFR2_EL1),
        VmrsReg::Fpsid | VmrsReg::Other(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::arm64::aarch32::trap::{decode, Exit32};
    use crate::guest::arm64::ptimer::PhysTimer;

    fn kind(opc1: u8, crn: u8, crm: u8, opc2: u8) -> Kind {
        lookup(c(opc1, crn, crm, opc2)).kind
    }

    fn mapped(opc1: u8, crn: u8, crm: u8, opc2: u8) -> (SysReg, Part) {
        match kind(opc1, crn, crm, opc2) {
            Kind::Sys { reg, part } => (reg, part),
            k => panic!("({opc1}, c{crn}, c{crm}, {opc2}): {k:?}"),
        }
    }

    fn mapped64(opc1: u8, crm: u8) -> (SysReg, Part) {
        match lookup64(opc1, crm).kind {
            Kind::Sys { reg, part } => (reg, part),
            k => panic!("({opc1}, c{crm}): {k:?}"),
        }
    }

    /// arm64 KVM's `cp15_regs` (the VM registers and their AA32 LO/HI
    /// halves) and Linux's own encodings (arch/arm/include/asm/cp15.h,
    /// proc-v7*.S).
    #[test]
    fn vmsa_registers_match_kvm() {
        use a64::*;
        assert_eq!(mapped(0, 1, 0, 0), (SCTLR_EL1, Word));
        assert_eq!(mapped(0, 1, 0, 1), (ACTLR_EL1, Low));
        assert_eq!(mapped(0, 1, 0, 3), (ACTLR_EL1, High));
        assert_eq!(mapped(0, 1, 0, 2), (CPACR_EL1, Word));
        assert_eq!(mapped(0, 2, 0, 0), (TTBR0_EL1, Low));
        assert_eq!(mapped(0, 2, 0, 1), (TTBR1_EL1, Low));
        assert_eq!(mapped(0, 2, 0, 2), (TCR_EL1, Low));
        assert_eq!(mapped(0, 2, 0, 3), (TCR_EL1, High));
        assert_eq!(mapped(0, 3, 0, 0), (DACR32_EL2, Word));
        assert_eq!(mapped(0, 5, 0, 0), (ESR_EL1, Word));
        assert_eq!(mapped(0, 5, 0, 1), (IFSR32_EL2, Word));
        assert_eq!(mapped(0, 5, 1, 0), (AFSR0_EL1, Word));
        assert_eq!(mapped(0, 5, 1, 1), (AFSR1_EL1, Word));
        assert_eq!(mapped(0, 6, 0, 0), (FAR_EL1, Low));
        assert_eq!(mapped(0, 6, 0, 2), (FAR_EL1, High));
        assert_eq!(mapped(0, 10, 2, 0), (MAIR_EL1, Low));
        assert_eq!(mapped(0, 10, 2, 1), (MAIR_EL1, High));
        assert_eq!(mapped(0, 10, 3, 0), (AMAIR_EL1, Low));
        assert_eq!(mapped(0, 10, 3, 1), (AMAIR_EL1, High));
        assert_eq!(mapped(0, 13, 0, 1), (CONTEXTIDR_EL1, Word));
        assert_eq!(mapped(0, 12, 0, 0), (VBAR_EL1, Word));
        assert_eq!(mapped(0, 13, 0, 2), (TPIDR_EL0, Low));
        assert_eq!(mapped(0, 13, 0, 3), (TPIDRRO_EL0, Low));
        assert_eq!(mapped(0, 13, 0, 4), (TPIDR_EL1, Low));
        assert_eq!(mapped(0, 7, 4, 0), (PAR_EL1, Low));
        // Every register HCR_EL2.TVM traps is one of these.
        for (k, e) in CP15_32 {
            if e.trap == Trap::Tvm {
                assert!(matches!(e.kind, Kind::Sys { .. }), "{k:?}");
                assert_eq!(e.access, RW);
            }
        }
        assert_eq!(lookup(c(0, 2, 0, 2)).name, "TTBCR");
    }

    /// arm64 KVM's `cp15_64_regs`: TTBR0 (0, c2), ICC_SGI1R (0, c12),
    /// CNTPCT (0, c14), TTBR1 (1, c2), ICC_ASGI1R (1, c12), ICC_SGI0R
    /// (2, c12), CNTP_CVAL (2, c14), CNTPCTSS (8, c14); Linux's compat
    /// CNTVCT (1, c14) and CNTVCTSS (9, c14).
    #[test]
    fn mcrr_registers_match_kvm() {
        use a64::*;
        let d = Part::Double;
        assert_eq!(mapped64(0, 2), (TTBR0_EL1, d));
        assert_eq!(mapped64(1, 2), (TTBR1_EL1, d));
        assert_eq!(mapped64(0, 7), (PAR_EL1, d));
        assert_eq!(mapped64(0, 12), (sysreg::ICC_SGI1R_EL1, d));
        assert_eq!(mapped64(1, 12), (sysreg::ICC_ASGI1R_EL1, d));
        assert_eq!(mapped64(2, 12), (sysreg::ICC_SGI0R_EL1, d));
        assert_eq!(mapped64(0, 14), (CNTPCT_EL0, d));
        assert_eq!(mapped64(1, 14), (CNTVCT_EL0, d));
        assert_eq!(mapped64(2, 14), (CNTP_CVAL_EL0, d));
        assert_eq!(mapped64(3, 14), (CNTV_CVAL_EL0, d));
        assert_eq!(mapped64(8, 14), (CNTPCTSS_EL0, d));
        assert_eq!(mapped64(9, 14), (CNTVCTSS_EL0, d));
        assert_eq!(lookup64(0, 9).kind, Kind::RazWi, "PMCCNTR");
        // EL2 registers (HTTBR 4/c2, VTTBR 6/c2, CNTVOFF 4/c14,
        // CNTHP_CVAL 6/c14) and everything else: UNDEF.
        for (opc1, crm) in [(4, 2), (6, 2), (4, 14), (6, 14), (0, 0), (15, 15)] {
            assert_eq!(lookup64(opc1, crm).kind, Kind::Undef, "({opc1}, c{crm})");
        }
        // Counters are read-only; SGI registers write-only.
        let mrrc = |opc1, crm| Mcrr {
            opc1,
            crm,
            rt: 0,
            rt2: 1,
            read: true,
        };
        assert_eq!(
            answer64(&Mcrr {
                read: false,
                ..mrrc(1, 14)
            }),
            Kind::Undef
        );
        assert_eq!(answer64(&mrrc(0, 12)), Kind::Undef);
        assert!(matches!(
            answer64(&Mcrr {
                read: false,
                ..mrrc(0, 12)
            }),
            Kind::Sys { .. }
        ));
    }

    /// The syndromes Linux matches for a compat task's counter reads decode
    /// to registers this table maps to the AArch64 counters.
    #[test]
    fn linux_compat_counter_traps_resolve() {
        let Exit32::Cp15(m) = decode((0x03 << 26) | (1 << 25) | 0x3801, 0, 0).exit else {
            panic!()
        };
        assert_eq!(
            answer(&m),
            Kind::Sys {
                reg: a64::CNTFRQ_EL0,
                part: Word
            }
        );
        let Exit32::Cp15Pair(m) = decode((0x04 << 26) | (1 << 25) | 0x1_001D, 0, 0).exit else {
            panic!()
        };
        assert_eq!(
            answer64(&m),
            Kind::Sys {
                reg: a64::CNTVCT_EL0,
                part: Part::Double
            }
        );
    }

    /// The AArch32 timer registers land on the AArch64 ones kestrel's
    /// physical-timer model already answers.
    #[test]
    fn timer_registers_reach_the_ptimer_model() {
        for (r, want) in [
            (c(0, 14, 2, 0), CNTP_TVAL_EL0),
            (c(0, 14, 2, 1), CNTP_CTL_EL0),
        ] {
            let Kind::Sys { reg, part } = lookup(r).kind else {
                panic!()
            };
            assert_eq!((reg, part), (want, Word));
            assert!(PhysTimer::handles(reg));
            assert_eq!(lookup(r).trap, Trap::Timer);
        }
        assert!(PhysTimer::handles(mapped64(2, 14).0));
        assert_eq!(mapped(0, 14, 3, 1), (a64::CNTV_CTL_EL0, Word));
        assert_eq!(mapped(0, 14, 3, 0), (a64::CNTV_TVAL_EL0, Word));
        assert_eq!(mapped(0, 14, 1, 0), (a64::CNTKCTL_EL1, Word));
        assert_eq!(
            lookup(c(0, 14, 0, 0)).answer(false),
            Kind::Undef,
            "CNTFRQ is RO"
        );
    }

    /// The ID registers use the AArch64 encoding with the same CRm/Opc2
    /// (QEMU's ARM_CP_STATE_BOTH definitions: ID_PFR0 .. ID_MMFR5 at
    /// opc0 3, opc1 0, crn 0), which `SysReg::is_feature_id` (TID3) knows.
    /// CRm 4-7 are reserved (RAZ) in AArch32: never the ID_AA64* registers.
    #[test]
    fn id_registers_and_their_trap_groups() {
        for crm in 4..=7 {
            for opc2 in 0..8 {
                let e = lookup(c(0, 0, crm, opc2));
                assert_eq!((e.kind, e.access, e.trap), (Kind::Const(0), RO, Trap::Tid3));
            }
        }
        for crm in 1..=3 {
            for opc2 in 0..8 {
                let e = lookup(c(0, 0, crm, opc2));
                let Kind::Sys { reg, part } = e.kind else {
                    panic!()
                };
                assert_eq!(reg, SysReg::new(3, 0, 0, crm, opc2));
                assert!(reg.is_feature_id());
                assert_eq!((part, e.access, e.trap), (Word, RO, Trap::Tid3));
            }
        }
        assert_eq!(lookup(c(0, 0, 1, 0)).name, "ID_PFR0");
        assert_eq!(lookup(c(0, 0, 2, 6)).name, "ID_MMFR4");
        assert_eq!(lookup(c(0, 0, 2, 7)).name, "ID_ISAR6");
        assert_eq!(lookup(c(0, 0, 3, 6)).name, "ID_MMFR5");
        assert_eq!(mapped(0, 0, 0, 0), (a64::MIDR_EL1, Word));
        assert_eq!(mapped(0, 0, 0, 5), (a64::MPIDR_EL1, Word));
        assert_eq!(lookup(c(0, 0, 0, 5)).trap, Trap::Never, "VMPIDR_EL2");
        assert_eq!(lookup(c(0, 0, 0, 1)).trap, Trap::Tid2, "CTR");
        assert_eq!(lookup(c(1, 0, 0, 0)).trap, Trap::Tid2, "CCSIDR");
        assert_eq!(lookup(c(1, 0, 0, 1)).trap, Trap::Tid2, "CLIDR");
        assert_eq!(lookup(c(2, 0, 0, 0)).trap, Trap::Tid2, "CSSELR");
        assert_eq!(lookup(c(0, 0, 0, 6)).trap, Trap::Tid1, "REVIDR");
        assert_eq!(lookup(c(1, 0, 0, 7)).trap, Trap::Tid1, "AIDR");
        assert_eq!(lookup(c(0, 0, 0, 2)).kind, Kind::Const(0), "TCMTR");
        assert_eq!(mapped(1, 0, 0, 0), (a64::CCSIDR_EL1, Low));
        assert_eq!(mapped(2, 0, 0, 0), (a64::CSSELR_EL1, Word));
        // ID registers are read-only.
        assert_eq!(lookup(c(0, 0, 1, 0)).answer(false), Kind::Undef);
        // VMRS MVFR0-2 (EC 0x08) are the same registers as c0, c3, 0-2.
        assert_eq!(vmrs_id(VmrsReg::Mvfr0), Some(mapped(0, 0, 3, 0).0));
        assert_eq!(vmrs_id(VmrsReg::Mvfr1), Some(mapped(0, 0, 3, 1).0));
        assert_eq!(vmrs_id(VmrsReg::Mvfr2), Some(mapped(0, 0, 3, 2).0));
        assert_eq!(vmrs_id(VmrsReg::Fpsid), None);
    }

    /// KVM's DC{C,I,CI}SW entries (access_dcsw): (0, c7, c6, 2), (0, c7,
    /// c10, 2), (0, c7, c14, 2).
    #[test]
    fn maintenance_operations() {
        assert_eq!(kind(0, 7, 6, 2), Kind::SetWay(SetWay::Invalidate));
        assert_eq!(kind(0, 7, 10, 2), Kind::SetWay(SetWay::Clean));
        assert_eq!(kind(0, 7, 14, 2), Kind::SetWay(SetWay::CleanInvalidate));
        assert_eq!(lookup(c(0, 7, 6, 2)).trap, Trap::Tsw);
        assert_eq!(kind(0, 7, 10, 1), Kind::ByVa(ByVa::Dccmvac));
        assert_eq!(kind(0, 7, 11, 1), Kind::ByVa(ByVa::Dccmvau));
        assert_eq!(kind(0, 7, 14, 1), Kind::ByVa(ByVa::Dccimvac));
        assert_eq!(kind(0, 7, 5, 1), Kind::ByVa(ByVa::Icimvau));
        assert_eq!(
            kind(0, 7, 5, 0),
            Kind::InvalidateAll(InvalidateAll::Iciallu)
        );
        assert_eq!(
            kind(0, 7, 1, 0),
            Kind::InvalidateAll(InvalidateAll::Icialluis)
        );
        assert_eq!(kind(0, 7, 5, 4), Kind::Barrier(Barrier::Isb));
        assert_eq!(kind(0, 7, 10, 4), Kind::Barrier(Barrier::Dsb));
        assert_eq!(kind(0, 7, 10, 5), Kind::Barrier(Barrier::Dmb));
        assert_eq!(kind(0, 7, 8, 0), Kind::At(At::Ats1cpr));
        let is = |scope, last_level| {
            Kind::Tlbi(Tlbi {
                scope,
                shareable: true,
                last_level,
            })
        };
        assert_eq!(kind(0, 8, 3, 0), is(TlbScope::All, false));
        assert_eq!(kind(0, 8, 3, 1), is(TlbScope::Va, false));
        assert_eq!(kind(0, 8, 3, 2), is(TlbScope::Asid, false));
        assert_eq!(kind(0, 8, 3, 3), is(TlbScope::VaAllAsids, false));
        assert_eq!(kind(0, 8, 3, 5), is(TlbScope::Va, true));
        assert_eq!(kind(0, 8, 3, 7), is(TlbScope::VaAllAsids, true));
        assert_eq!(
            kind(0, 8, 7, 0),
            Kind::Tlbi(Tlbi {
                scope: TlbScope::All,
                shareable: false,
                last_level: false
            })
        );
        // Operations are write-only: an MRC of one is UNDEF.
        for (k, e) in CP15_32 {
            let op = matches!(
                e.kind,
                Kind::SetWay(_)
                    | Kind::ByVa(_)
                    | Kind::InvalidateAll(_)
                    | Kind::Tlbi(_)
                    | Kind::Barrier(_)
                    | Kind::At(_)
            );
            if op {
                assert_eq!(e.access, WO, "{k:?}");
                assert_eq!(e.answer(true), Kind::Undef);
                assert_eq!(e.answer(false), e.kind);
            }
            if let Kind::Tlbi(_) = e.kind {
                assert_eq!(e.trap, Trap::Ttlb);
            }
        }
        // TLBI and cache operations of EL2 (Opc1 4) are UNDEF.
        assert_eq!(kind(4, 8, 7, 0), Kind::Undef, "TLBIALLH");
        assert_eq!(kind(4, 8, 3, 4), Kind::Undef, "TLBIALLNSNHIS");
        assert_eq!(kind(0, 7, 8, 4), Kind::Undef, "ATS12NSOPR");
    }

    /// The GICv3 CPU interface in cp15 uses the AArch64 Opc1/CRn/CRm/Opc2
    /// (QEMU's gicv3_cpuif ARM_CP_STATE_BOTH registers).
    #[test]
    fn gic_cpu_interface() {
        for (name, r) in [
            ("ICC_PMR", c(0, 4, 6, 0)),
            ("ICC_IAR1", c(0, 12, 12, 0)),
            ("ICC_EOIR1", c(0, 12, 12, 1)),
            ("ICC_HPPIR1", c(0, 12, 12, 2)),
            ("ICC_BPR1", c(0, 12, 12, 3)),
            ("ICC_CTLR", c(0, 12, 12, 4)),
            ("ICC_SRE", c(0, 12, 12, 5)),
            ("ICC_IGRPEN1", c(0, 12, 12, 7)),
            ("ICC_DIR", c(0, 12, 11, 1)),
            ("ICC_RPR", c(0, 12, 11, 3)),
            ("ICC_AP1R0", c(0, 12, 9, 0)),
            ("ICC_AP0R3", c(0, 12, 8, 7)),
        ] {
            let e = lookup(r);
            assert_eq!((e.name, e.trap), (name, Trap::Gic));
            let Kind::Sys { reg, part } = e.kind else {
                panic!()
            };
            assert_eq!(reg, SysReg::new(3, r.opc1, r.crn, r.crm, r.opc2), "{name}");
            assert_eq!(part, Word);
        }
        assert_eq!(lookup(c(0, 12, 12, 0)).access, RO, "IAR1");
        assert_eq!(lookup(c(0, 12, 12, 1)).access, WO, "EOIR1");
        assert_eq!(lookup(c(0, 12, 11, 1)).access, WO, "DIR");
        // ICC_MSRE, ICC_MCTLR (EL3), ICC_HSRE (EL2): UNDEF.
        assert_eq!(kind(6, 12, 12, 5), Kind::Undef);
        assert_eq!(kind(6, 12, 12, 4), Kind::Undef);
        assert_eq!(kind(4, 12, 9, 5), Kind::Undef);
    }

    #[test]
    fn pmu_reads_zero_and_impdef_is_undef() {
        for r in [
            c(0, 9, 12, 0),
            c(0, 9, 13, 0),
            c(0, 9, 14, 0),
            c(0, 14, 8, 0),
            c(0, 14, 15, 7),
        ] {
            let e = lookup(r);
            assert_eq!((e.kind, e.trap), (Kind::RazWi, Trap::Tpm), "{r:?}");
        }
        // QEMU's aa32_cpreg_encoding_in_impdef_space masks.
        for crn in 9..=11u8 {
            let mask: u16 = [
                0b0000_0001_1110_0111,
                0b0000_0001_0001_0011,
                0b1000_0001_1111_1111,
            ][crn as usize - 9];
            for crm in 0..16u8 {
                assert_eq!(is_impdef(crn, crm), (mask >> crm) & 1 == 1);
                if is_impdef(crn, crm) {
                    let e = lookup(c(3, crn, crm, 5));
                    assert_eq!((e.kind, e.trap), (Kind::Undef, Trap::Tidcp));
                }
            }
        }
        assert!(!is_impdef(15, 0) && !is_impdef(9, 12));
        // c15 is IMPLEMENTATION DEFINED too, outside TIDCP: UNDEF.
        assert_eq!(lookup(c(4, 15, 0, 0)), UNDEF, "CBAR-style c15");
    }

    #[test]
    fn secure_hyp_and_unknown_encodings_are_undef() {
        for r in [
            c(0, 1, 1, 0),  // SCR
            c(0, 1, 1, 2),  // NSACR
            c(4, 1, 1, 0),  // HCR
            c(4, 2, 0, 2),  // HTCR
            c(4, 14, 1, 0), // CNTHCTL
            c(0, 12, 0, 1), // MVBAR
            c(0, 12, 1, 1), // DISR (RAS hidden)
            c(0, 5, 3, 0),  // ERRIDR (RAS hidden)
            c(7, 15, 15, 7),
            c(1, 0, 0, 3),
            c(3, 0, 1, 0), // not Opc1 0: not an ID register
        ] {
            assert_eq!(lookup(r).kind, Kind::Undef, "{r:?}");
        }
        // An encoding beyond 4 bits answers too (the decoder never makes one).
        assert_eq!(lookup(c(0, 0, 200, 9)).kind, Kind::Undef);
    }

    /// Every encoding has an answer; the named ones are unique; halves of
    /// one AArch64 register never overlap.
    #[test]
    fn table_is_consistent_and_total() {
        for (i, (a, _)) in CP15_32.iter().enumerate() {
            for (b, _) in &CP15_32[i + 1..] {
                assert_ne!(a, b, "listed twice");
            }
        }
        for (i, (a, _)) in CP15_64.iter().enumerate() {
            for (b, _) in &CP15_64[i + 1..] {
                assert_ne!(a, b, "listed twice");
            }
        }
        let mut undef = 0;
        for opc1 in 0..8 {
            for crn in 0..16 {
                for crm in 0..16 {
                    for opc2 in 0..8 {
                        let e = lookup(c(opc1, crn, crm, opc2));
                        if e.kind == Kind::Undef {
                            undef += 1;
                        }
                        if let Kind::Sys { reg, part } = e.kind {
                            assert_ne!(part, Part::Double);
                            assert!(reg.op0 == 3 && reg.crn < 16 && reg.crm < 16);
                        }
                    }
                }
            }
        }
        assert!(undef > 15_000, "most of the space is unallocated");
        for (a, ea) in CP15_32 {
            for (b, eb) in CP15_32 {
                if let (Kind::Sys { reg: ra, part: pa }, Kind::Sys { reg: rb, part: pb }) =
                    (ea.kind, eb.kind)
                {
                    if ra == rb
                        && a != b
                        && !ea.name.contains("alias")
                        && !eb.name.contains("alias")
                    {
                        assert!(
                            matches!((pa, pb), (Low, High) | (High, Low)),
                            "{} and {} share {ra:?}",
                            ea.name,
                            eb.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn parts_read_and_write_their_halves() {
        let old = 0x1111_2222_3333_4444;
        assert_eq!(Part::Low.read(old), 0x3333_4444);
        assert_eq!(Part::High.read(old), 0x1111_2222);
        assert_eq!(Part::Word.read(old), 0x3333_4444);
        assert_eq!(Part::Low.write(old, 0xaaaa_bbbb), 0x1111_2222_aaaa_bbbb);
        assert_eq!(Part::High.write(old, 0xaaaa_bbbb), 0xaaaa_bbbb_3333_4444);
        assert_eq!(Part::Word.write(old, 0xaaaa_bbbb), 0xaaaa_bbbb);
        assert_eq!(split(0x0123_4567_89ab_cdef), (0x89ab_cdef, 0x0123_4567));
        assert_eq!(join(0x89ab_cdef, 0x0123_4567), 0x0123_4567_89ab_cdef);
        // mcr TTBCR then TTBCR2: both halves of TCR_EL1.
        let tcr = High.write(Low.write(0, 0x8000_3500), 0x0000_0040);
        assert_eq!(tcr, 0x0000_0040_8000_3500);
    }
}
