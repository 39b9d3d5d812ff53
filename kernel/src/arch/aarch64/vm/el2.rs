//! The EL2 controls kestrel runs guests under: HCR_EL2 (what traps),
//! MDCR_EL2 (debug and PMU traps), CNTHCTL_EL2 (timer access), and the
//! trap controls of later architecture versions in a known state.

use super::regs::{mrs, msr};

// HCR_EL2 for guests, as KVM sets it.
const HCR_VM: u64 = 1 << 0;
const HCR_SWIO: u64 = 1 << 1;
const HCR_PTW: u64 = 1 << 2;
const HCR_FMO: u64 = 1 << 3;
const HCR_IMO: u64 = 1 << 4;
const HCR_AMO: u64 = 1 << 5;
const HCR_FB: u64 = 1 << 9;
const HCR_BSU_IS: u64 = 1 << 10;
const HCR_TWI: u64 = 1 << 13;
const HCR_TWE: u64 = 1 << 14;
const HCR_TID3: u64 = 1 << 18;
const HCR_TSC: u64 = 1 << 19;
const HCR_TIDCP: u64 = 1 << 20;
const HCR_TACR: u64 = 1 << 21;
const HCR_TSW: u64 = 1 << 22;
const HCR_RW: u64 = 1 << 31;
const HCR_TLOR: u64 = 1 << 35;
const HCR_TERR: u64 = 1 << 36;
/// API (41) and APK (40) stay clear: pointer authentication is hidden from
/// the guest (idregs), so its instructions and key registers trap to EL2
/// and are answered with UNDEF.
pub const HCR_GUEST: u64 = HCR_VM
    | HCR_SWIO
    | HCR_PTW
    | HCR_FMO
    | HCR_IMO
    | HCR_AMO
    | HCR_FB
    | HCR_BSU_IS
    | HCR_TWI
    | HCR_TWE
    | HCR_TID3
    | HCR_TSC
    | HCR_TIDCP
    | HCR_TACR
    | HCR_TSW
    | HCR_RW
    | HCR_TLOR
    | HCR_TERR;

/// MDCR_EL2: trap debug (TDA, TDOSA, TDRA: emulated from each vCPU's
/// shadow, `guest::arm64::debug`) and PMU (TPM, TPMCR: RAZ/WI, the ID
/// registers show no PMU) accesses. TDE = 0: debug exceptions from EL1/EL0
/// go to the guest's EL1. E2PB = E2TB = 0: profiling and trace buffer
/// controls trap. [`mdcr_guest`] adds TPMS and TTRF where implemented.
pub const MDCR_GUEST: u64 = (1 << 5) | (1 << 6) | (1 << 9) | (1 << 10) | (1 << 11);

/// MDCR_EL2 for guests on this CPU: [`MDCR_GUEST`], plus TPMS (SPE
/// sampling controls trap) with FEAT_SPE and TTRF (TRFCR_EL1 traps) with
/// FEAT_TRF; those bits are RES0 elsewhere.
pub fn mdcr_guest() -> u64 {
    let dfr0 = mrs!("id_aa64dfr0_el1");
    let mut v = MDCR_GUEST;
    if (dfr0 >> 32) & 0xf != 0 {
        v |= 1 << 14;
    }
    if (dfr0 >> 40) & 0xf != 0 {
        v |= 1 << 19;
    }
    v
}
/// CNTHCTL_EL2 (E2H = 0): EL1PCTEN (physical counter readable, no offset),
/// EL1PCEN clear (CNTP_CTL/CVAL/TVAL_EL0 trap and are emulated per vCPU).
pub const CNTHCTL_GUEST: u64 = 1;

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
