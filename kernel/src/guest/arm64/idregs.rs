//! The feature ID registers an arm64 guest sees (HCR_EL2.TID3 traps them).
//!
//! Rule: a guest is told only of features whose state kestrel switches or
//! emulates. SVE (and SVE2, with its `ID_AA64ZFR0_EL1` features) is told
//! as the hardware has it to a VM configured with it (`sve = true`; its
//! state is switched lazily with FP), and hidden from the others.
//! Everything else reads as "not implemented": SME, MTE, PMU,
//! SPE, trace, AMU, MPAM, RAS, pointer authentication (keys are not
//! switched), SCXTNUM_ELx (CSV2 capped at 1), nested virtualization, VHE,
//! AArch32, and every MMFR3 feature
//! (new EL1 registers such as PIR_EL1 or TCR2_EL1 that would leak between
//! VMs). Field layouts: Arm ARM D17.2 (ID_AA64*_EL1).

use super::esr::{sysreg, SysReg};

/// What the VM is built with, which some fields must reflect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdConfig {
    /// The VM has a GICv3 (system-register CPU interface).
    pub gic_v3: bool,
    /// Guest physical address bits stage 2 provides (32, 36, 40, 42, 44, 48).
    pub ipa_bits: u8,
    /// The VM has SVE (config `sve`; only on a CPU with SVE).
    pub sve: bool,
}

/// Replaces field `[shift+3:shift]` with `value`.
const fn set_field(reg: u64, shift: u32, value: u64) -> u64 {
    (reg & !(0xf << shift)) | ((value & 0xf) << shift)
}

/// Keeps only the 4-bit fields whose shifts are listed.
fn keep_fields(reg: u64, shifts: &[u32]) -> u64 {
    shifts.iter().fold(0, |acc, &s| acc | (reg & (0xf << s)))
}

/// The PARange encoding for `bits` physical address bits.
const fn parange(bits: u8) -> u64 {
    match bits {
        0..=32 => 0,
        33..=36 => 1,
        37..=40 => 2,
        41..=42 => 3,
        43..=44 => 4,
        45..=48 => 5,
        _ => 6,
    }
}

/// The value a guest reads from feature ID register `reg`, given what the
/// hardware (`host`) says.
pub fn guest_view(reg: SysReg, host: u64, cfg: IdConfig) -> u64 {
    match reg {
        sysreg::ID_AA64PFR0_EL1 => {
            // EL0/EL1: AArch64 only; FP, AdvSIMD, DIT, CSV3 as the hardware;
            // CSV2 at most 1 (FEAT_CSV2_2's SCXTNUM_ELx are not switched:
            // HCR_EL2.EnSCXT = 0 traps them); SVE as the hardware if the
            // VM has it.
            let mut v = keep_fields(host, &[16, 20, 48, 60]);
            if cfg.sve {
                v |= keep_fields(host, &[32]);
            }
            v = set_field(v, 56, ((host >> 56) & 0xf).min(1));
            v = set_field(v, 0, 1);
            v = set_field(v, 4, 1);
            set_field(v, 24, u64::from(cfg.gic_v3))
        }
        // BT and SSBS; CSV2_frac at most 1 (CSV2_1p2 has SCXTNUM_ELx).
        sysreg::ID_AA64PFR1_EL1 => {
            set_field(keep_fields(host, &[0, 4]), 32, ((host >> 32) & 0xf).min(1))
        }
        // DebugVer v8.0 with the hardware's breakpoints (BRPs), watchpoints
        // (WRPs) and context-aware breakpoints (CTX_CMPs), all emulated per
        // vCPU (guest::arm64::debug); DoubleLock not implemented; no PMU,
        // SPE, trace, BRBE.
        sysreg::ID_AA64DFR0_EL1 => 0x6 | keep_fields(host, &[12, 20, 28]) | (0xf << 36),
        sysreg::ID_AA64ISAR1_EL1 => {
            // No pointer authentication (APA, API, GPA, GPI), no LS64.
            host & !((0xf << 4) | (0xf << 8) | (0xf << 24) | (0xf << 28) | (0xf << 60))
        }
        sysreg::ID_AA64ISAR2_EL1 => {
            // No QARMA3 PAuth (GPA3, APA3), no MOPS (needs HCRX_EL2).
            host & !((0xf << 8) | (0xf << 12) | (0xf << 16))
        }
        sysreg::ID_AA64ISAR0_EL1 => host,
        // SVE2 and its optional instructions, as the hardware (they add
        // instructions, no state beyond Z/P/FFR).
        sysreg::ID_AA64ZFR0_EL1 if cfg.sve => host,
        sysreg::ID_AA64MMFR0_EL1 => {
            let pa = parange(cfg.ipa_bits).min(host & 0xf);
            set_field(host, 0, pa)
        }
        sysreg::ID_AA64MMFR1_EL1 => {
            // No VHE [11:8]; no XNX-style EL2 features matter at EL1.
            set_field(host, 8, 0)
        }
        sysreg::ID_AA64MMFR2_EL1 => {
            // No nested virtualization [27:24].
            set_field(host, 24, 0)
        }
        // Feature registers of hidden extensions, AArch32 (CRm 1-3),
        // MMFR3 and every reserved encoding: not implemented.
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: IdConfig = IdConfig {
        gic_v3: true,
        ipa_bits: 40,
        sve: false,
    };

    #[test]
    fn pfr0_hides_sve_el2_el3_amu_and_reports_gic() {
        // QEMU -cpu max: EL0-3 AArch64+32, FP/SIMD 1, GIC 1, RAS 2, SVE 1, SEL2 1, AMU 1, DIT 1, CSV2 3, CSV3 1.
        let host: u64 = 0x1301_1011_2111_1122;
        let v = guest_view(sysreg::ID_AA64PFR0_EL1, host, CFG);
        let field = |s: u32| (v >> s) & 0xf;
        assert_eq!(field(0), 1, "EL0 AArch64 only");
        assert_eq!(field(4), 1, "EL1 AArch64 only");
        assert_eq!(field(8), 0, "no EL2");
        assert_eq!(field(12), 0, "no EL3");
        assert_eq!(field(16), (host >> 16) & 0xf, "FP as hardware");
        assert_eq!(field(24), 1, "GICv3 sysregs");
        assert_eq!(field(28), 0, "no RAS");
        assert_eq!(field(32), 0, "no SVE");
        assert_eq!(field(36), 0, "no SEL2");
        assert_eq!(field(44), 0, "no AMU");
        assert_eq!(field(56), 1, "CSV2 at most 1 (no SCXTNUM)");
        let v2 = guest_view(
            sysreg::ID_AA64PFR0_EL1,
            host,
            IdConfig {
                gic_v3: false,
                ..CFG
            },
        );
        assert_eq!((v2 >> 24) & 0xf, 0, "GICv2 VM: no sysreg CPU interface");
    }

    #[test]
    fn sve_is_told_as_the_hardware_only_to_a_vm_with_it() {
        let host: u64 = 0x1301_1011_2111_1122; // SVE 1 at [35:32]
        let sve = IdConfig { sve: true, ..CFG };
        let with = guest_view(sysreg::ID_AA64PFR0_EL1, host, sve);
        let without = guest_view(sysreg::ID_AA64PFR0_EL1, host, CFG);
        assert_eq!((with >> 32) & 0xf, 1);
        assert_eq!((without >> 32) & 0xf, 0);
        assert_eq!(with & !(0xf << 32), without, "nothing else changes");
        // ZFR0: QEMU -cpu max's SVE2, AES/PMULL128, BitPerm, BF16, SHA3, SM4, I8MM, F32MM, F64MM.
        let zfr0: u64 = 0x0110_1101_0011_0021;
        assert_eq!(guest_view(sysreg::ID_AA64ZFR0_EL1, zfr0, sve), zfr0);
        assert_eq!(guest_view(sysreg::ID_AA64ZFR0_EL1, zfr0, CFG), 0);
        // SME stays hidden either way: PFR1.SME [27:24], SMFR0.
        assert_eq!(
            guest_view(sysreg::ID_AA64PFR1_EL1, u64::MAX, sve) >> 24 & 0xf,
            0
        );
        assert_eq!(guest_view(sysreg::ID_AA64SMFR0_EL1, u64::MAX, sve), 0);
        // A CPU without SVE: nothing to tell (the VM is refused earlier).
        assert_eq!(
            guest_view(sysreg::ID_AA64PFR0_EL1, host & !(0xf << 32), sve) >> 32 & 0xf,
            0
        );
    }

    #[test]
    fn hidden_units_read_zero() {
        for reg in [
            sysreg::ID_AA64ZFR0_EL1,
            sysreg::ID_AA64SMFR0_EL1,
            sysreg::ID_AA64DFR1_EL1,
            sysreg::ID_AA64AFR0_EL1,
            sysreg::ID_AA64MMFR3_EL1,
            SysReg::new(3, 0, 0, 1, 0), // ID_PFR0_EL1 (AArch32)
        ] {
            assert_eq!(guest_view(reg, u64::MAX, CFG), 0, "{reg:?}");
        }
        // PFR1 keeps BT, SSBS, CSV2_frac (at most 1) only: SME, MTE, GCS gone.
        assert_eq!(
            guest_view(sysreg::ID_AA64PFR1_EL1, u64::MAX, CFG),
            0x1_0000_00ff
        );
    }

    #[test]
    fn debug_points_are_the_hardwares_and_pauth_is_hidden() {
        assert_eq!(
            guest_view(sysreg::ID_AA64DFR0_EL1, u64::MAX, CFG),
            0xf0_f0f0_f006
        );
        // QEMU -cpu max: DebugVer 9 (v8.4), BRPs 5, WRPs 3, CTX_CMPs 1, PMUVer 6.
        let qemu = 0x0000_0000_1030_5609u64 | 0x6 << 8;
        let v = guest_view(sysreg::ID_AA64DFR0_EL1, qemu, CFG);
        assert_eq!(v & 0xf, 6, "Armv8.0 debug");
        assert_eq!((v >> 12) & 0xf, 5, "6 breakpoints");
        assert_eq!((v >> 20) & 0xf, 3, "4 watchpoints");
        assert_eq!((v >> 28) & 0xf, 1, "2 context-aware");
        assert_eq!((v >> 8) & 0xf, 0, "no PMU");
        let isar1 = guest_view(sysreg::ID_AA64ISAR1_EL1, u64::MAX, CFG);
        for s in [4, 8, 24, 28] {
            assert_eq!((isar1 >> s) & 0xf, 0, "PAuth field at {s}");
        }
        assert_eq!(isar1 & 0xf, 0xf, "DPB kept");
    }

    #[test]
    fn parange_is_clamped_to_stage2() {
        let host = 0x0000_0000_0000_1125; // PARange 5 (48 bits)
        assert_eq!(guest_view(sysreg::ID_AA64MMFR0_EL1, host, CFG) & 0xf, 2);
        let small_host = 0x1121; // 36 bits
        assert_eq!(
            guest_view(sysreg::ID_AA64MMFR0_EL1, small_host, CFG) & 0xf,
            1
        );
        assert_eq!(
            guest_view(sysreg::ID_AA64MMFR1_EL1, u64::MAX, CFG) >> 8 & 0xf,
            0,
            "no VHE"
        );
        assert_eq!(
            guest_view(sysreg::ID_AA64MMFR2_EL1, u64::MAX, CFG) >> 24 & 0xf,
            0,
            "no NV"
        );
    }
}
