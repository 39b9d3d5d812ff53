//! Decodes ESR_EL2 (and HPFAR_EL2/FAR_EL2 for aborts) into an [`Exit`]:
//! the plain value the rest of kestrel acts on. Arm ARM D17.2.37 (ESR_EL2),
//! D17.2.61 (HPFAR_EL2). Any syndrome decodes; what kestrel does not handle
//! is [`Exit::Unknown`], which the backend answers with an undefined-
//! instruction exception to the guest.

/// Exception classes kestrel takes from a lower EL (ESR_EL2.EC).
pub mod ec {
    pub const UNKNOWN: u32 = 0x00;
    pub const WFX: u32 = 0x01;
    pub const FP_ASIMD: u32 = 0x07;
    pub const ILLEGAL_STATE: u32 = 0x0e;
    pub const HVC64: u32 = 0x16;
    pub const SMC64: u32 = 0x17;
    pub const SYS64: u32 = 0x18;
    pub const SVE: u32 = 0x19;
    pub const SME: u32 = 0x1d;
    pub const IABT_LOWER: u32 = 0x20;
    pub const PC_ALIGN: u32 = 0x22;
    pub const DABT_LOWER: u32 = 0x24;
    pub const SP_ALIGN: u32 = 0x26;
    pub const SERROR: u32 = 0x2f;
    pub const BRK64: u32 = 0x3c;
}

/// A system register named by its encoding (op0, op1, CRn, CRm, op2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SysReg {
    pub op0: u8,
    pub op1: u8,
    pub crn: u8,
    pub crm: u8,
    pub op2: u8,
}

impl SysReg {
    pub const fn new(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Self {
        SysReg {
            op0,
            op1,
            crn,
            crm,
            op2,
        }
    }

    /// Whether this is one of the feature ID registers HCR_EL2.TID3 traps
    /// (op0 3, op1 0, CRn 0, CRm 1-7).
    pub const fn is_feature_id(&self) -> bool {
        self.op0 == 3 && self.op1 == 0 && self.crn == 0 && self.crm >= 1 && self.crm <= 7
    }
}

/// System registers kestrel handles by name.
pub mod sysreg {
    use super::SysReg;
    pub const ICC_SGI1R_EL1: SysReg = SysReg::new(3, 0, 12, 11, 5);
    pub const ICC_ASGI1R_EL1: SysReg = SysReg::new(3, 1, 12, 11, 6);
    pub const ICC_SGI0R_EL1: SysReg = SysReg::new(3, 2, 12, 11, 7);
    pub const ID_AA64PFR0_EL1: SysReg = SysReg::new(3, 0, 0, 4, 0);
    pub const ID_AA64PFR1_EL1: SysReg = SysReg::new(3, 0, 0, 4, 1);
    pub const ID_AA64ZFR0_EL1: SysReg = SysReg::new(3, 0, 0, 4, 4);
    pub const ID_AA64SMFR0_EL1: SysReg = SysReg::new(3, 0, 0, 4, 5);
    pub const ID_AA64DFR0_EL1: SysReg = SysReg::new(3, 0, 0, 5, 0);
    pub const ID_AA64DFR1_EL1: SysReg = SysReg::new(3, 0, 0, 5, 1);
    pub const ID_AA64AFR0_EL1: SysReg = SysReg::new(3, 0, 0, 5, 4);
    pub const ID_AA64ISAR0_EL1: SysReg = SysReg::new(3, 0, 0, 6, 0);
    pub const ID_AA64ISAR1_EL1: SysReg = SysReg::new(3, 0, 0, 6, 1);
    pub const ID_AA64ISAR2_EL1: SysReg = SysReg::new(3, 0, 0, 6, 2);
    pub const ID_AA64MMFR0_EL1: SysReg = SysReg::new(3, 0, 0, 7, 0);
    pub const ID_AA64MMFR1_EL1: SysReg = SysReg::new(3, 0, 0, 7, 1);
    pub const ID_AA64MMFR2_EL1: SysReg = SysReg::new(3, 0, 0, 7, 2);
    pub const ID_AA64MMFR3_EL1: SysReg = SysReg::new(3, 0, 0, 7, 3);
}

/// A trapped MSR/MRS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysRegAccess {
    pub reg: SysReg,
    /// General register number (31 = XZR).
    pub rt: u8,
    /// MRS (read) rather than MSR (write).
    pub read: bool,
}

/// The access a data abort describes, when the syndrome is valid (ISV = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioAccess {
    /// 1, 2, 4 or 8 bytes.
    pub width: u8,
    /// Source/destination register (31 = XZR on stores, discarded on loads).
    pub rt: u8,
    /// Sign-extend a load.
    pub sign_extend: bool,
    /// 64-bit destination register (else 32-bit, upper half zeroed).
    pub sf: bool,
    /// Acquire/release semantics.
    pub acq_rel: bool,
}

/// A stage-2 data or instruction abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// The faulting intermediate physical address (HPFAR_EL2.FIPA with FAR's page offset).
    pub ipa: u64,
    /// FAR_EL2: the guest virtual address.
    pub far: u64,
    /// A write (data aborts only).
    pub write: bool,
    /// The access, when the syndrome describes it.
    pub access: Option<MmioAccess>,
    /// The fault happened on a stage-1 table walk.
    pub s1ptw: bool,
    /// The fault status code (DFSC/IFSC).
    pub fsc: u8,
    /// An external abort rather than a translation fault.
    pub external: bool,
}

/// Why a guest exited, as kestrel acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Wfi,
    Wfe,
    /// WFIT (FEAT_WFxT): wait for an interrupt or until CNTVCT_EL0 reaches
    /// the value of register `rt`.
    Wfit {
        rt: u8,
    },
    /// WFET: wait for an event or until CNTVCT_EL0 reaches register `rt`.
    Wfet {
        rt: u8,
    },
    /// FP/ASIMD use with CPTR_EL2.TFP set: the lazy-FP trap.
    FpAccess,
    /// SVE use (or ZCR_EL1) with CPTR_EL2.TZ set: the lazy trap of a VM
    /// with SVE, UNDEF for the others.
    SveAccess,
    /// SME use (hidden from guests).
    SmeAccess,
    Hvc {
        imm: u16,
    },
    /// SMC trapped by HCR_EL2.TSC (ELR points at the SMC itself).
    Smc {
        imm: u16,
    },
    SysReg(SysRegAccess),
    DataAbort(Abort),
    InstAbort(Abort),
    /// Anything else: the backend injects an undefined-instruction exception.
    Unknown {
        ec: u32,
        iss: u32,
    },
}

/// Decodes a trap from a lower EL. `hpfar` and `far` matter for aborts only.
pub fn decode(esr: u64, far: u64, hpfar: u64) -> Exit {
    let ec = ((esr >> 26) & 0x3f) as u32;
    let iss = (esr & 0x1ff_ffff) as u32;
    match ec {
        ec::WFX => {
            // TI[1:0]: 0 WFI, 1 WFE, 2 WFIT, 3 WFET; RV [2]: Rv [9:5] holds
            // the timeout (always set for WFIT/WFET; without it they are
            // treated as plain WFI/WFE, which may return early).
            let rt = ((iss >> 5) & 0x1f) as u8;
            let rv = iss & (1 << 2) != 0;
            match (iss & 3, rv) {
                (2, true) => Exit::Wfit { rt },
                (3, true) => Exit::Wfet { rt },
                (0 | 2, _) => Exit::Wfi,
                _ => Exit::Wfe,
            }
        }
        ec::FP_ASIMD => Exit::FpAccess,
        ec::SVE => Exit::SveAccess,
        ec::SME => Exit::SmeAccess,
        ec::HVC64 => Exit::Hvc { imm: iss as u16 },
        ec::SMC64 => Exit::Smc { imm: iss as u16 },
        ec::SYS64 => Exit::SysReg(SysRegAccess {
            reg: SysReg {
                op0: ((iss >> 20) & 3) as u8,
                op2: ((iss >> 17) & 7) as u8,
                op1: ((iss >> 14) & 7) as u8,
                crn: ((iss >> 10) & 0xf) as u8,
                crm: ((iss >> 1) & 0xf) as u8,
            },
            rt: ((iss >> 5) & 0x1f) as u8,
            read: iss & 1 == 1,
        }),
        ec::DABT_LOWER => Exit::DataAbort(abort(iss, far, hpfar, true)),
        ec::IABT_LOWER => Exit::InstAbort(abort(iss, far, hpfar, false)),
        _ => Exit::Unknown { ec, iss },
    }
}

fn abort(iss: u32, far: u64, hpfar: u64, data: bool) -> Abort {
    // HPFAR_EL2.FIPA [47:4] holds IPA[55:12].
    let ipa = ((hpfar >> 4) & 0xfff_ffff_ffff) << 12 | (far & 0xfff);
    let isv = data && iss & (1 << 24) != 0;
    let access = isv.then(|| MmioAccess {
        width: 1 << ((iss >> 22) & 3),
        sign_extend: iss & (1 << 21) != 0,
        rt: ((iss >> 16) & 0x1f) as u8,
        sf: iss & (1 << 15) != 0,
        acq_rel: iss & (1 << 14) != 0,
    });
    let fsc = (iss & 0x3f) as u8;
    Abort {
        ipa,
        far,
        write: data && iss & (1 << 6) != 0,
        access,
        s1ptw: iss & (1 << 7) != 0,
        fsc,
        // FSC 0b010000: synchronous external abort, not on a table walk.
        external: fsc == 0x10 || iss & (1 << 9) != 0,
    }
}

/// The fault-status codes of a translation fault at levels 0-3.
pub fn is_translation_fault(fsc: u8) -> bool {
    (0x04..=0x07).contains(&fsc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ISS of a trapped MSR/MRS (Arm ARM D17.2.37, EC 0x18).
    fn sys_iss(reg: SysReg, rt: u32, read: bool) -> u32 {
        let SysReg {
            op0,
            op1,
            crn,
            crm,
            op2,
        } = reg;
        (u32::from(op0) << 20)
            | (u32::from(op2) << 17)
            | (u32::from(op1) << 14)
            | (u32::from(crn) << 10)
            | (rt << 5)
            | (u32::from(crm) << 1)
            | u32::from(read)
    }

    fn esr(ec: u32, iss: u32) -> u64 {
        (u64::from(ec) << 26) | (1 << 25) | u64::from(iss)
    }

    #[test]
    fn wfi_wfe_hvc_smc_fp() {
        assert_eq!(decode(esr(ec::WFX, 0), 0, 0), Exit::Wfi);
        assert_eq!(decode(esr(ec::WFX, 1), 0, 0), Exit::Wfe);
        // WFIT x3 / WFET x30: TI, RV, Rv.
        assert_eq!(
            decode(esr(ec::WFX, 2 | 1 << 2 | 3 << 5), 0, 0),
            Exit::Wfit { rt: 3 }
        );
        assert_eq!(
            decode(esr(ec::WFX, 3 | 1 << 2 | 30 << 5), 0, 0),
            Exit::Wfet { rt: 30 }
        );
        // Without RV: no deadline to honour.
        assert_eq!(decode(esr(ec::WFX, 2), 0, 0), Exit::Wfi);
        assert_eq!(decode(esr(ec::WFX, 3), 0, 0), Exit::Wfe);
        assert_eq!(
            decode(esr(ec::HVC64, 0x1234), 0, 0),
            Exit::Hvc { imm: 0x1234 }
        );
        assert_eq!(decode(esr(ec::SMC64, 0), 0, 0), Exit::Smc { imm: 0 });
        assert_eq!(decode(esr(ec::FP_ASIMD, 0x1e0_0000), 0, 0), Exit::FpAccess);
        assert_eq!(decode(esr(ec::SVE, 0), 0, 0), Exit::SveAccess);
        assert_eq!(decode(esr(ec::SME, 0), 0, 0), Exit::SmeAccess);
    }

    #[test]
    fn msr_icc_sgi1r() {
        // msr ICC_SGI1R_EL1, x3: op0 3, op2 5, op1 0, CRn 12, Rt 3, CRm 11, write.
        let iss = sys_iss(SysReg::new(3, 0, 12, 11, 5), 3, false);
        let exit = decode(esr(ec::SYS64, iss), 0, 0);
        assert_eq!(
            exit,
            Exit::SysReg(SysRegAccess {
                reg: sysreg::ICC_SGI1R_EL1,
                rt: 3,
                read: false
            })
        );
    }

    #[test]
    fn mrs_id_register_is_feature_id() {
        let iss = sys_iss(SysReg::new(3, 0, 0, 4, 0), 7, true);
        let Exit::SysReg(a) = decode(esr(ec::SYS64, iss), 0, 0) else {
            panic!()
        };
        assert_eq!(a.reg, sysreg::ID_AA64PFR0_EL1);
        assert!(a.read);
        assert_eq!(a.rt, 7);
        assert!(a.reg.is_feature_id());
        assert!(!sysreg::ICC_SGI1R_EL1.is_feature_id());
    }

    #[test]
    fn data_abort_with_valid_syndrome() {
        // str w5, [x0] to IPA 0x0900_0018: ISV, SAS=2 (word), SRT=5, WnR, DFSC level-3 translation.
        let iss = (1 << 24) | (2 << 22) | (5 << 16) | (1 << 6) | 0x07;
        let far = 0xffff_0000_1234_5018;
        let hpfar = (0x0900_0018u64 >> 12) << 4;
        let Exit::DataAbort(a) = decode(esr(ec::DABT_LOWER, iss), far, hpfar) else {
            panic!()
        };
        assert_eq!(a.ipa, 0x0900_0018);
        assert!(a.write);
        assert_eq!(
            a.access,
            Some(MmioAccess {
                width: 4,
                rt: 5,
                sign_extend: false,
                sf: false,
                acq_rel: false
            })
        );
        assert!(is_translation_fault(a.fsc));
        assert!(!a.external);
    }

    #[test]
    fn data_abort_without_syndrome_has_no_access() {
        // ldp/post-index forms give ISV = 0: kestrel cannot emulate them.
        let Exit::DataAbort(a) = decode(esr(ec::DABT_LOWER, 0x07), 0x10, 0x100) else {
            panic!()
        };
        assert_eq!(a.access, None);
        assert!(!a.write);
        assert_eq!(a.ipa, 0x1_0010, "HPFAR.FIPA 0x10 is page 0x10");
    }

    #[test]
    fn every_syndrome_decodes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let _ = decode(x, x.rotate_left(17), x.rotate_left(31));
        }
        assert!(matches!(
            decode(esr(0x3f, 0), 0, 0),
            Exit::Unknown { ec: 0x3f, .. }
        ));
    }
}
