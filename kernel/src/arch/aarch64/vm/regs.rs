//! EL1 system register context of a vCPU, switched on load/put, and the
//! access helpers the backend uses for EL1/EL2 registers.

/// Reads a system register by name.
macro_rules! mrs {
    ($reg:literal) => {{
        let v: u64;
        // SAFETY: reading a system register that exists at EL2 on every
        // ARMv8.0 CPU kestrel runs on; no memory is touched.
        unsafe {
            core::arch::asm!(concat!("mrs {}, ", $reg), out(reg) v,
                options(nomem, nostack, preserves_flags))
        };
        v
    }};
}

/// Writes a system register by name.
macro_rules! msr {
    ($reg:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: the registers written with this macro are EL1/EL0 guest
        // context, EL2 guest controls (HCR/VTTBR/VTCR/VPIDR/VMPIDR/CNTVOFF/
        // CNTHCTL/MDCR/ICH_*) or the timer: none of them changes kestrel's
        // own EL2 translation, stack or vectors.
        unsafe {
            core::arch::asm!(concat!("msr ", $reg, ", {}"), in(reg) v,
                options(nostack, preserves_flags))
        };
    }};
}

pub(crate) use {mrs, msr};

/// SCTLR_EL1 RES1 bits with the MMU and caches off (the guest's reset value).
pub const SCTLR_EL1_RESET: u64 = 0x30D0_0800;
/// Guest PSTATE at entry: EL1h, DAIF masked.
pub const PSTATE_EL1H_MASKED: u64 = 0x3c5;

/// The EL1 (and EL0) system registers kestrel switches per vCPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct El1Regs {
    pub sctlr: u64,
    pub cpacr: u64,
    pub ttbr0: u64,
    pub ttbr1: u64,
    pub tcr: u64,
    pub mair: u64,
    pub amair: u64,
    pub vbar: u64,
    pub contextidr: u64,
    pub tpidr_el1: u64,
    pub tpidr_el0: u64,
    pub tpidrro_el0: u64,
    pub sp_el0: u64,
    pub sp_el1: u64,
    pub elr: u64,
    pub spsr: u64,
    pub esr: u64,
    pub far: u64,
    pub afsr0: u64,
    pub afsr1: u64,
    pub par: u64,
    pub cntkctl: u64,
    pub csselr: u64,
    pub cntv_ctl: u64,
    pub cntv_cval: u64,
    /// DISR_EL1 as the guest sees it: with HCR_EL2.AMO set its accesses
    /// reach VDISR_EL2 (only on CPUs with FEAT_RAS).
    pub disr: u64,
}

impl El1Regs {
    /// Architectural reset: MMU off, everything else zero.
    pub fn reset() -> El1Regs {
        El1Regs {
            sctlr: SCTLR_EL1_RESET,
            ..El1Regs::default()
        }
    }

    /// Loads these registers into the CPU (`ras`: the CPU has FEAT_RAS,
    /// so VDISR_EL2 exists).
    pub fn restore(&self, ras: bool) {
        msr!("sctlr_el1", self.sctlr);
        msr!("cpacr_el1", self.cpacr);
        msr!("ttbr0_el1", self.ttbr0);
        msr!("ttbr1_el1", self.ttbr1);
        msr!("tcr_el1", self.tcr);
        msr!("mair_el1", self.mair);
        msr!("amair_el1", self.amair);
        msr!("vbar_el1", self.vbar);
        msr!("contextidr_el1", self.contextidr);
        msr!("tpidr_el1", self.tpidr_el1);
        msr!("tpidr_el0", self.tpidr_el0);
        msr!("tpidrro_el0", self.tpidrro_el0);
        msr!("sp_el0", self.sp_el0);
        msr!("sp_el1", self.sp_el1);
        msr!("elr_el1", self.elr);
        msr!("spsr_el1", self.spsr);
        msr!("esr_el1", self.esr);
        msr!("far_el1", self.far);
        msr!("afsr0_el1", self.afsr0);
        msr!("afsr1_el1", self.afsr1);
        msr!("par_el1", self.par);
        msr!("cntkctl_el1", self.cntkctl);
        msr!("csselr_el1", self.csselr);
        msr!("cntv_cval_el0", self.cntv_cval);
        msr!("cntv_ctl_el0", self.cntv_ctl);
        if ras {
            msr!("s3_4_c12_c1_1", self.disr); // VDISR_EL2
        }
    }

    /// Reads them back from the CPU (`ras` as for [`El1Regs::restore`]).
    pub fn save(&mut self, ras: bool) {
        self.sctlr = mrs!("sctlr_el1");
        self.cpacr = mrs!("cpacr_el1");
        self.ttbr0 = mrs!("ttbr0_el1");
        self.ttbr1 = mrs!("ttbr1_el1");
        self.tcr = mrs!("tcr_el1");
        self.mair = mrs!("mair_el1");
        self.amair = mrs!("amair_el1");
        self.vbar = mrs!("vbar_el1");
        self.contextidr = mrs!("contextidr_el1");
        self.tpidr_el1 = mrs!("tpidr_el1");
        self.tpidr_el0 = mrs!("tpidr_el0");
        self.tpidrro_el0 = mrs!("tpidrro_el0");
        self.sp_el0 = mrs!("sp_el0");
        self.sp_el1 = mrs!("sp_el1");
        self.elr = mrs!("elr_el1");
        self.spsr = mrs!("spsr_el1");
        self.esr = mrs!("esr_el1");
        self.far = mrs!("far_el1");
        self.afsr0 = mrs!("afsr0_el1");
        self.afsr1 = mrs!("afsr1_el1");
        self.par = mrs!("par_el1");
        self.cntkctl = mrs!("cntkctl_el1");
        self.csselr = mrs!("csselr_el1");
        self.cntv_ctl = mrs!("cntv_ctl_el0");
        self.cntv_cval = mrs!("cntv_cval_el0");
        if ras {
            self.disr = mrs!("s3_4_c12_c1_1"); // VDISR_EL2
        }
        // The timer must not fire for the next vCPU on this pCPU.
        msr!("cntv_ctl_el0", 0);
    }
}
