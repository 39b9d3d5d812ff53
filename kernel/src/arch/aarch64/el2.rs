//! The flag words kestrel writes to its EL2 control registers (non-VHE,
//! E2H = 0): HCR_EL2 (booting and guests), MDCR_EL2, CPTR_EL2 and
//! CNTHCTL_EL2, as `bitflags` types. The values are built here once; the
//! callers write `.bits()` with `msr`. Also [`el2_trap_defaults`], the
//! later-architecture trap controls put in a known state.

use aarch64_cpu::registers::{Readable, ID_AA64DFR0_EL1};
use bitflags::bitflags;

use super::vm::regs::{mrs, msr};

bitflags! {
    /// HCR_EL2: how EL1/EL0 run under EL2 (only the bits kestrel sets).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct HcrEl2: u64 {
        /// Stage-2 translation on.
        const VM = 1 << 0;
        /// Set/way invalidation upgraded to clean and invalidate.
        const SWIO = 1 << 1;
        /// Stage-1 table walks to Device memory fault at stage 2.
        const PTW = 1 << 2;
        /// Physical FIQs, IRQs and SErrors are taken to EL2.
        const FMO = 1 << 3;
        const IMO = 1 << 4;
        const AMO = 1 << 5;
        /// TLB and cache maintenance broadcast in the inner shareable domain.
        const FB = 1 << 9;
        const BSU_IS = 1 << 10;
        /// WFI and WFE trap.
        const TWI = 1 << 13;
        const TWE = 1 << 14;
        /// ID group 3 registers (ID_AA64*) trap.
        const TID3 = 1 << 18;
        /// SMC traps.
        const TSC = 1 << 19;
        /// IMPLEMENTATION DEFINED registers trap.
        const TIDCP = 1 << 20;
        /// ACTLR_EL1 traps.
        const TACR = 1 << 21;
        /// Cache maintenance by set/way traps.
        const TSW = 1 << 22;
        /// EL1 is AArch64.
        const RW = 1 << 31;
        /// LORegion registers trap.
        const TLOR = 1 << 35;
        /// RAS error record registers trap.
        const TERR = 1 << 36;
    }
}

impl HcrEl2 {
    /// HCR_EL2 while no guest runs: RW (lower ELs are AArch64), E2H = 0 (so
    /// TCR/SCTLR_EL2 use the non-VHE layout of `mmu`), and IMO/FMO/AMO so
    /// that physical IRQs, FIQs and SErrors are taken to EL2 (with them
    /// clear they target EL1 and are never taken while kestrel runs at EL2).
    pub const BOOT: Self = Self::from_bits_retain(
        Self::RW.bits() | Self::AMO.bits() | Self::IMO.bits() | Self::FMO.bits(),
    );

    /// HCR_EL2 for guests, as KVM sets it. API (41) and APK (40) stay
    /// clear: pointer authentication is hidden from the guest (idregs), so
    /// its instructions and key registers trap to EL2 and are answered with
    /// UNDEF.
    pub const GUEST: Self = Self::from_bits_retain(
        Self::VM.bits()
            | Self::SWIO.bits()
            | Self::PTW.bits()
            | Self::FMO.bits()
            | Self::IMO.bits()
            | Self::AMO.bits()
            | Self::FB.bits()
            | Self::BSU_IS.bits()
            | Self::TWI.bits()
            | Self::TWE.bits()
            | Self::TID3.bits()
            | Self::TSC.bits()
            | Self::TIDCP.bits()
            | Self::TACR.bits()
            | Self::TSW.bits()
            | Self::RW.bits()
            | Self::TLOR.bits()
            | Self::TERR.bits(),
    );
}

impl HcrEl2 {
    /// HCR_EL2 for the guests of an AArch32 VM: [`HcrEl2::GUEST`] with RW
    /// clear, so EL1 (and EL0) run in AArch32 state; TID3 also traps the
    /// AArch32 ID registers (MRC p15 c0 and VMRS of MVFR0-2). TSW is clear
    /// too: 32-bit Linux cleans its whole data cache by set/way at boot
    /// (its decompressor, `v7_flush_dcache_all`: tens of thousands of
    /// operations, which kestrel would only ignore one exit each); done by
    /// the hardware they are harmless to everyone else, SWIO making an
    /// invalidate a clean and invalidate.
    pub const GUEST32: Self = Self::GUEST.difference(Self::RW.union(Self::TSW));
}

// The values the bare constants had.
const _: () = assert!(HcrEl2::BOOT.bits() == 0x8000_0038);
const _: () = assert!(HcrEl2::GUEST.bits() == 0x18_807c_663f);

bitflags! {
    /// MDCR_EL2 trap controls (HPMN, bits 4:0, is a field the backend keeps
    /// as the firmware set it).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct MdcrEl2: u64 {
        /// PMCR_EL0 traps.
        const TPMCR = 1 << 5;
        /// Other PMU registers trap.
        const TPM = 1 << 6;
        /// Debug ROM address registers trap.
        const TDRA = 1 << 9;
        /// OS lock / power-down debug registers trap.
        const TDOSA = 1 << 10;
        /// The other debug registers trap.
        const TDA = 1 << 11;
        /// SPE sampling controls trap (FEAT_SPE; RES0 without).
        const TPMS = 1 << 14;
        /// TRFCR_EL1 traps (FEAT_TRF; RES0 without).
        const TTRF = 1 << 19;
    }
}

impl MdcrEl2 {
    /// Trap debug (TDA, TDOSA, TDRA: emulated from each vCPU's shadow,
    /// `guest::arm64::debug`) and PMU (TPM, TPMCR: RAZ/WI, the ID registers
    /// show no PMU) accesses. TDE = 0: debug exceptions from EL1/EL0 go to
    /// the guest's EL1. E2PB = E2TB = 0: profiling and trace buffer
    /// controls trap. [`mdcr_guest`] adds TPMS and TTRF where implemented.
    pub const GUEST: Self = Self::from_bits_retain(
        Self::TPMCR.bits()
            | Self::TPM.bits()
            | Self::TDRA.bits()
            | Self::TDOSA.bits()
            | Self::TDA.bits(),
    );
}

const _: () = assert!(MdcrEl2::GUEST.bits() == 0xe60);

/// MDCR_EL2 for guests on this CPU: [`MdcrEl2::GUEST`], plus TPMS (SPE
/// sampling controls trap) with FEAT_SPE and TTRF (TRFCR_EL1 traps) with
/// FEAT_TRF; those bits are RES0 elsewhere.
pub fn mdcr_guest() -> MdcrEl2 {
    let dfr0 = ID_AA64DFR0_EL1.get();
    let mut v = MdcrEl2::GUEST;
    // ID_AA64DFR0_EL1.PMSVer (35:32) and TraceFilt (43:40).
    v.set(MdcrEl2::TPMS, (dfr0 >> 32) & 0xf != 0);
    v.set(MdcrEl2::TTRF, (dfr0 >> 40) & 0xf != 0);
    v
}

bitflags! {
    /// CPTR_EL2 (E2H = 0): traps of FP/SIMD, SVE, SME, trace and the
    /// activity monitors.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CptrEl2: u64 {
        /// RES1 bits 13, 9 and 7:0.
        const RES1 = (1 << 13) | (1 << 9) | 0xff;
        /// SVE traps.
        const TZ = 1 << 8;
        /// FP/SIMD traps: the lazy-FP switch.
        const TFP = 1 << 10;
        /// SME traps.
        const TSM = 1 << 12;
        /// Trace registers trap.
        const TTA = 1 << 20;
        /// Activity monitor registers trap.
        const TAM = 1 << 30;
    }
}

impl CptrEl2 {
    /// Guest-time CPTR_EL2 without the FP trap: TZ set (the lazy FP engine
    /// clears it while the unit holds its owner's SVE state), TSM always
    /// set (SME is hidden), TAM traps the activity monitors, TTA trace.
    pub const GUEST: Self = Self::from_bits_retain(
        Self::RES1.bits()
            | Self::TZ.bits()
            | Self::TSM.bits()
            | Self::TTA.bits()
            | Self::TAM.bits(),
    );
}

const _: () = assert!(CptrEl2::GUEST.bits() == 0x4010_33ff);

bitflags! {
    /// CNTHCTL_EL2 (E2H = 0).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CnthctlEl2: u64 {
        /// EL1/EL0 read the physical counter.
        const EL1PCTEN = 1 << 0;
        /// EL1/EL0 reach the physical timer registers.
        const EL1PCEN = 1 << 1;
    }
}

impl CnthctlEl2 {
    /// For guests: EL1PCTEN (physical counter readable, no offset), EL1PCEN
    /// clear (CNTP_CTL/CVAL/TVAL_EL0 trap and are emulated per vCPU).
    pub const GUEST: Self = Self::EL1PCTEN;
}

/// Puts the EL2 trap controls of later architecture versions in a known
/// state (their reset values are UNKNOWN): fine-grained traps (FEAT_FGT,
/// FEAT_FGT2) all zero, so no extra positive trap but every negative
/// ("n"-prefixed) trap on: EL1 state kestrel does not switch (TPIDR2_EL0,
/// PIR/POR_EL1, ACCDATA_EL1, GCS, BRBE, ...) traps and is answered with
/// UNDEF; HCRX_EL2 (FEAT_HCX) zero, so TCR2/SCTLR2/FPMR/MOPS-era state
/// traps or stays off. Registers a CPU does not implement are not touched.
pub fn el2_trap_defaults() {
    let mmfr0 = mrs!("id_aa64mmfr0_el1");
    let fgt = (mmfr0 >> 56) & 0xf;
    if fgt >= 1 {
        msr!("s3_4_c1_c1_4", 0); // HFGRTR_EL2
        msr!("s3_4_c1_c1_5", 0); // HFGWTR_EL2
        msr!("s3_4_c1_c1_6", 0); // HFGITR_EL2
        msr!("s3_4_c3_c1_4", 0); // HDFGRTR_EL2
        msr!("s3_4_c3_c1_5", 0); // HDFGWTR_EL2
    }
    if fgt >= 2 {
        msr!("s3_4_c3_c1_2", 0); // HFGRTR2_EL2
        msr!("s3_4_c3_c1_3", 0); // HFGWTR2_EL2
        msr!("s3_4_c3_c1_7", 0); // HFGITR2_EL2
        msr!("s3_4_c3_c1_0", 0); // HDFGRTR2_EL2
        msr!("s3_4_c3_c1_1", 0); // HDFGWTR2_EL2
    }
    if (mrs!("id_aa64mmfr1_el1") >> 40) & 0xf != 0 {
        msr!("s3_4_c1_c2_2", 0); // HCRX_EL2
    }
}
