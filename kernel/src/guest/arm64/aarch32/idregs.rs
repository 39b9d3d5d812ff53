//! The AArch32 feature ID registers an AArch32 EL1 guest reads (MRC p15,
//! 0, <Rt>, c0, c1-c7, <opc2> and VMRS of MVFR0-2: HCR_EL2.TID3 traps
//! them), given what the hardware's AArch64 views (`ID_PFR0_EL1` ..) say.
//!
//! The same rule as the AArch64 view (`super::super::idregs`): a guest is
//! told only of what kestrel switches or emulates. The instruction sets
//! (ID_ISAR*), the memory model (ID_MMFR0-4) and the FP/Advanced SIMD unit
//! (MVFR0-2) are the hardware's; debug is the Armv8 architecture through
//! cp14 (emulated per vCPU, `super::cp14`); the Security and
//! Virtualization Extensions, the PMU, trace, memory-mapped debug, the
//! activity monitors, RAS and everything in ID_PFR2, ID_DFR1 and ID_MMFR5
//! read as not implemented; the GIC system register interface is reported
//! exactly when the VM has a GICv3. Field
//! layouts: Arm ARM (DDI 0487) G8 (ID_PFR0 .. MVFR2).

use crate::guest::arm64::esr::SysReg;

/// Replaces field `[shift+3:shift]` with `value`.
const fn set_field(reg: u64, shift: u32, value: u64) -> u64 {
    (reg & !(0xf << shift)) | ((value & 0xf) << shift)
}

/// The 4-bit field at `shift`.
const fn field(reg: u64, shift: u32) -> u64 {
    (reg >> shift) & 0xf
}

/// The value an AArch32 EL1 guest reads from the ID register the AArch64
/// encoding `reg` (op0 3, op1 0, CRn 0, CRm 1-3) names, `host` being the
/// hardware's value; `gic_v3`: the VM has a GICv3 (system registers).
/// Encodings outside CRm 1-3 and the reserved ones read 0.
pub fn guest_view32(reg: SysReg, host: u64, gic_v3: bool) -> u32 {
    if !(reg.op0 == 3 && reg.op1 == 0 && reg.crn == 0) {
        return 0;
    }
    let host = host & 0xffff_ffff;
    let v = match (reg.crm, reg.op2) {
        // ID_PFR0: State0-3 (A32, T32, Jazelle, T32EE) and DIT as the
        // hardware; CSV2 at most 1 (no SCXTNUM); no AMU, no RAS.
        (1, 0) => {
            let v = host & 0x0f00_ffff;
            set_field(v, 16, field(host, 16).min(1))
        }
        // ID_PFR1: the programmers' model and the generic timer as the
        // hardware; no Security or Virtualization Extensions (EL3 and EL2
        // are kestrel's), no M-profile model; GIC = 1 with a GICv3.
        (1, 1) => {
            let v = host & 0x000f_000f;
            set_field(v, 28, u64::from(gic_v3))
        }
        // ID_DFR0: CopDbg = 6, the Armv8 debug architecture through cp14
        // (emulated from the vCPU's debug shadow: super::cp14); no
        // Secure debug, no memory-mapped debug or trace, no cp14 trace,
        // no PMU (answered RAZ/WI).
        (1, 2) => 0x6,
        // ID_AFR0: IMPLEMENTATION DEFINED: nothing.
        (1, 3) => 0,
        // ID_MMFR0-3: the memory model as the hardware.
        (1, 4..=7) => host,
        // ID_ISAR0-5: the instruction sets as the hardware.
        (2, 0..=5) => host,
        // ID_MMFR4: as the hardware, but no EVT (the TID* trap controls
        // are kestrel's) and no CCIDX-only views it does not switch.
        (2, 6) => set_field(host, 28, 0),
        // ID_ISAR6.
        (2, 7) => host,
        // MVFR0-2: the FP/Advanced SIMD unit kestrel switches.
        (3, 0..=2) => host,
        // ID_PFR2 (CSV3, SSBS, RAS_frac), ID_DFR1 (MTPMU), ID_MMFR5
        // (ETS), and the reserved encodings: not implemented.
        _ => 0,
    };
    v as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(crm: u8, op2: u8) -> SysReg {
        SysReg::new(3, 0, 0, crm, op2)
    }

    #[test]
    fn pfr1_hides_security_and_virtualization_and_reports_gic() {
        // Cortex-A57: ProgMod 1, Security 1, Virtualization 1, GenTimer 1,
        // GIC 1 (QEMU -cpu cortex-a57 ID_PFR1 = 0x10011011 with a GICv3).
        let host = 0x1001_1011;
        assert_eq!(guest_view32(id(1, 1), host, true), 0x1001_0001);
        assert_eq!(guest_view32(id(1, 1), host, false), 0x0001_0001);
    }

    #[test]
    fn pfr0_keeps_states_and_caps_csv2() {
        // States 1,3,0,1 (0x0131 in the low half), CSV2 2, AMU 1, DIT 1, RAS 1.
        let host = 0x1112_0131;
        let v = guest_view32(id(1, 0), host, true);
        assert_eq!(v & 0xffff, 0x0131);
        assert_eq!((v >> 16) & 0xf, 1, "CSV2 capped");
        assert_eq!((v >> 20) & 0xf, 0, "no AMU");
        assert_eq!((v >> 24) & 0xf, 1, "DIT kept");
        assert_eq!(v >> 28, 0, "no RAS");
    }

    #[test]
    fn debug_is_v8_cp14_only_and_pmu_and_reserved_read_zero() {
        assert_eq!(guest_view32(id(1, 2), 0x0301_0066, true), 0x6);
        assert_eq!(guest_view32(id(1, 2), 0, false), 0x6);
        assert_eq!(guest_view32(id(3, 4), 0x11, true), 0);
        assert_eq!(guest_view32(id(3, 5), 0x11, true), 0);
        assert_eq!(guest_view32(id(3, 7), 0x11, true), 0);
        // Not an ID register at all.
        assert_eq!(guest_view32(SysReg::new(3, 0, 1, 0, 0), 5, true), 0);
    }

    #[test]
    fn instruction_sets_memory_model_and_fp_are_the_hardwares() {
        for (crm, op2) in [
            (1, 4),
            (1, 5),
            (2, 0),
            (2, 5),
            (2, 7),
            (3, 0),
            (3, 1),
            (3, 2),
        ] {
            assert_eq!(guest_view32(id(crm, op2), 0x1234_5678, true), 0x1234_5678);
        }
        // Only the low 32 bits of the AArch64 view exist in AArch32.
        assert_eq!(guest_view32(id(2, 0), 0xffff_0000_0000_0001, true), 1);
    }
}
