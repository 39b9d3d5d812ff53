//! arm64 trap decoding: any ESR/FAR/HPFAR decodes to an exit whose fields
//! are in range and re-encode to the syndrome they came from; the ID
//! registers a guest reads are a projection of the hardware's (filtering
//! twice changes nothing) that never shows a hidden feature or more than
//! the hardware has (SVE only to a VM configured with it).
#![no_main]

use kernel::guest::arm64::esr::{self, sysreg, Exit, SysReg};
use kernel::guest::arm64::idregs::{guest_view, IdConfig};
use libfuzzer_sys::fuzz_target;

fn field(v: u64, s: u32) -> u64 {
    (v >> s) & 0xf
}

fuzz_target!(|x: (u64, u64, u64, u8, bool, u8)| {
    let (esr_v, far, hpfar, crm_op2, gic_v3, ipa) = x;
    let iss = (esr_v & 0x1ff_ffff) as u32;
    match esr::decode(esr_v, far, hpfar) {
        Exit::SysReg(a) => {
            let r = a.reg;
            assert!(r.op0 < 4 && r.op1 < 8 && r.op2 < 8 && r.crn < 16 && r.crm < 16 && a.rt < 32);
            let back = u32::from(r.op0) << 20
                | u32::from(r.op2) << 17
                | u32::from(r.op1) << 14
                | u32::from(r.crn) << 10
                | u32::from(a.rt) << 5
                | u32::from(r.crm) << 1
                | u32::from(a.read);
            assert_eq!(back, iss & 0x3f_fffe | iss & 1);
        }
        Exit::DataAbort(a) | Exit::InstAbort(a) => {
            assert_eq!(a.ipa & 0xfff, far & 0xfff);
            assert!(a.ipa < 1 << 56);
            assert_eq!(a.far, far);
            assert_eq!(a.fsc, (iss & 0x3f) as u8);
            if let Some(m) = a.access {
                assert!(matches!(m.width, 1 | 2 | 4 | 8) && m.rt < 32);
            }
            assert_eq!(esr::is_translation_fault(a.fsc), (4..=7).contains(&a.fsc));
        }
        Exit::Hvc { imm } | Exit::Smc { imm } => assert_eq!(imm, iss as u16),
        Exit::Unknown { ec, iss: i } => {
            assert_eq!(ec, ((esr_v >> 26) & 0x3f) as u32);
            assert_eq!(i, iss);
        }
        Exit::Wfit { rt } | Exit::Wfet { rt } => {
            // WFIT/WFET only with RV set; Rt is ISS[9:5].
            assert!(iss & (1 << 2) != 0 && matches!(iss & 3, 2 | 3));
            assert_eq!(u32::from(rt), (iss >> 5) & 0x1f);
        }
        Exit::Wfi | Exit::Wfe | Exit::FpAccess | Exit::SveAccess | Exit::SmeAccess => {}
    }

    // The ID register space (op0 3, op1 0, CRn 0) and the hardware value.
    // Bit 6 of the register selector: the VM has SVE (config `sve`).
    let sve = crm_op2 & 0x40 != 0;
    let cfg = IdConfig {
        gic_v3,
        ipa_bits: [32, 36, 40, 42, 44, 48][ipa as usize % 6],
        sve,
    };
    let reg = SysReg::new(3, 0, 0, crm_op2 >> 3 & 7, crm_op2 & 7);
    let host = far;
    let v = guest_view(reg, host, cfg);
    assert_eq!(
        guest_view(reg, v, cfg),
        v,
        "{reg:?}: filtering twice changes it"
    );
    if (1..=3).contains(&reg.crm) {
        assert_eq!(v, 0, "AArch32 ID registers read 0");
    }
    match reg {
        sysreg::ID_AA64PFR0_EL1 => {
            assert_eq!(
                (field(v, 0), field(v, 4), field(v, 8), field(v, 12)),
                (1, 1, 0, 0)
            );
            let want_sve = if sve { field(host, 32) } else { 0 };
            assert_eq!(field(v, 32), want_sve, "SVE as the hardware, or hidden");
            assert_eq!(field(v, 44), 0, "AMU hidden");
            assert_eq!(field(v, 24), u64::from(gic_v3));
            assert_eq!(
                (field(v, 16), field(v, 20)),
                (field(host, 16), field(host, 20))
            );
        }
        sysreg::ID_AA64ZFR0_EL1 => assert_eq!(v, if sve { host } else { 0 }),
        sysreg::ID_AA64SMFR0_EL1 => assert_eq!(v, 0),
        sysreg::ID_AA64PFR1_EL1 => assert_eq!(field(v, 24), 0, "SME hidden"),
        sysreg::ID_AA64MMFR0_EL1 => assert!(field(v, 0) <= field(host, 0)),
        sysreg::ID_AA64MMFR1_EL1 => assert_eq!(field(v, 8), 0, "no VHE"),
        sysreg::ID_AA64MMFR2_EL1 => assert_eq!(field(v, 24), 0, "no NV"),
        sysreg::ID_AA64ISAR1_EL1 => {
            for s in [4, 8, 24, 28] {
                assert_eq!(field(v, s), 0, "PAuth hidden");
            }
        }
        sysreg::ID_AA64DFR0_EL1 => assert_eq!(field(v, 8), 0, "no PMU"),
        _ => {}
    }
});
