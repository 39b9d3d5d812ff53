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
        // context (including the debug registers, which cannot make
        // kestrel's EL2 take a debug exception: MDCR_EL2.TDE = 0 makes EL1
        // the debug target), EL2 guest controls (HCR/VTTBR/VTCR/VPIDR/VMPIDR/CNTVOFF/
        // CNTHCTL/MDCR/ICH_*) or the timer: none of them changes kestrel's
        // own EL2 translation, stack or vectors.
        unsafe {
            core::arch::asm!(concat!("msr ", $reg, ", {}"), in(reg) v,
                options(nostack, preserves_flags))
        };
    }};
}

pub(crate) use {mrs, msr};

use crate::guest::arm64::debug::DebugRegs;

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

/// Writes breakpoint/watchpoint register `n` (< 16) of kind `op2` (4 BVR,
/// 5 BCR, 6 WVR, 7 WCR: the op2 of DBG{B,W}{V,C}R<n>_EL1).
fn write_point(op2: u8, n: usize, v: u64) {
    match (op2, n) {
        (4, 0) => msr!("s2_0_c0_c0_4", v),
        (4, 1) => msr!("s2_0_c0_c1_4", v),
        (4, 2) => msr!("s2_0_c0_c2_4", v),
        (4, 3) => msr!("s2_0_c0_c3_4", v),
        (4, 4) => msr!("s2_0_c0_c4_4", v),
        (4, 5) => msr!("s2_0_c0_c5_4", v),
        (4, 6) => msr!("s2_0_c0_c6_4", v),
        (4, 7) => msr!("s2_0_c0_c7_4", v),
        (4, 8) => msr!("s2_0_c0_c8_4", v),
        (4, 9) => msr!("s2_0_c0_c9_4", v),
        (4, 10) => msr!("s2_0_c0_c10_4", v),
        (4, 11) => msr!("s2_0_c0_c11_4", v),
        (4, 12) => msr!("s2_0_c0_c12_4", v),
        (4, 13) => msr!("s2_0_c0_c13_4", v),
        (4, 14) => msr!("s2_0_c0_c14_4", v),
        (4, 15) => msr!("s2_0_c0_c15_4", v),
        (5, 0) => msr!("s2_0_c0_c0_5", v),
        (5, 1) => msr!("s2_0_c0_c1_5", v),
        (5, 2) => msr!("s2_0_c0_c2_5", v),
        (5, 3) => msr!("s2_0_c0_c3_5", v),
        (5, 4) => msr!("s2_0_c0_c4_5", v),
        (5, 5) => msr!("s2_0_c0_c5_5", v),
        (5, 6) => msr!("s2_0_c0_c6_5", v),
        (5, 7) => msr!("s2_0_c0_c7_5", v),
        (5, 8) => msr!("s2_0_c0_c8_5", v),
        (5, 9) => msr!("s2_0_c0_c9_5", v),
        (5, 10) => msr!("s2_0_c0_c10_5", v),
        (5, 11) => msr!("s2_0_c0_c11_5", v),
        (5, 12) => msr!("s2_0_c0_c12_5", v),
        (5, 13) => msr!("s2_0_c0_c13_5", v),
        (5, 14) => msr!("s2_0_c0_c14_5", v),
        (5, 15) => msr!("s2_0_c0_c15_5", v),
        (6, 0) => msr!("s2_0_c0_c0_6", v),
        (6, 1) => msr!("s2_0_c0_c1_6", v),
        (6, 2) => msr!("s2_0_c0_c2_6", v),
        (6, 3) => msr!("s2_0_c0_c3_6", v),
        (6, 4) => msr!("s2_0_c0_c4_6", v),
        (6, 5) => msr!("s2_0_c0_c5_6", v),
        (6, 6) => msr!("s2_0_c0_c6_6", v),
        (6, 7) => msr!("s2_0_c0_c7_6", v),
        (6, 8) => msr!("s2_0_c0_c8_6", v),
        (6, 9) => msr!("s2_0_c0_c9_6", v),
        (6, 10) => msr!("s2_0_c0_c10_6", v),
        (6, 11) => msr!("s2_0_c0_c11_6", v),
        (6, 12) => msr!("s2_0_c0_c12_6", v),
        (6, 13) => msr!("s2_0_c0_c13_6", v),
        (6, 14) => msr!("s2_0_c0_c14_6", v),
        (6, 15) => msr!("s2_0_c0_c15_6", v),
        (7, 0) => msr!("s2_0_c0_c0_7", v),
        (7, 1) => msr!("s2_0_c0_c1_7", v),
        (7, 2) => msr!("s2_0_c0_c2_7", v),
        (7, 3) => msr!("s2_0_c0_c3_7", v),
        (7, 4) => msr!("s2_0_c0_c4_7", v),
        (7, 5) => msr!("s2_0_c0_c5_7", v),
        (7, 6) => msr!("s2_0_c0_c6_7", v),
        (7, 7) => msr!("s2_0_c0_c7_7", v),
        (7, 8) => msr!("s2_0_c0_c8_7", v),
        (7, 9) => msr!("s2_0_c0_c9_7", v),
        (7, 10) => msr!("s2_0_c0_c10_7", v),
        (7, 11) => msr!("s2_0_c0_c11_7", v),
        (7, 12) => msr!("s2_0_c0_c12_7", v),
        (7, 13) => msr!("s2_0_c0_c13_7", v),
        (7, 14) => msr!("s2_0_c0_c14_7", v),
        (7, 15) => msr!("s2_0_c0_c15_7", v),
        _ => {}
    }
}

/// Loads a vCPU's debug shadow into the hardware: its breakpoints and
/// watchpoints (controls through [`DebugRegs::hw_bcr`]/[`DebugRegs::hw_wcr`]:
/// never matching at EL2), the OS lock and MDSCR_EL1. Only for a vCPU whose
/// shadow is dirty; the others run with MDSCR_EL1 = 0 (no breakpoint,
/// watchpoint or software step can fire) and trap every debug access.
pub fn load_debug(d: &DebugRegs) {
    for n in 0..d.brps {
        write_point(4, n, d.bvr[n]);
        write_point(5, n, d.hw_bcr(n));
    }
    for n in 0..d.wrps {
        write_point(6, n, d.wvr[n]);
        write_point(7, n, d.hw_wcr(n));
    }
    msr!("oslar_el1", u64::from(d.oslk));
    msr!("mdscr_el1", d.mdscr);
}

/// After a guest write: the one hardware register it changed (the vCPU is
/// loaded and its shadow dirty).
pub fn write_debug(d: &DebugRegs, op1: u8, crn: u8, crm: u8, op2: u8) {
    let n = crm as usize;
    match (op1, crn, op2) {
        (0, 0, 4) | (0, 0, 6) => write_point(op2, n, if op2 == 4 { d.bvr[n] } else { d.wvr[n] }),
        (0, 0, 5) if n < d.brps => write_point(5, n, d.hw_bcr(n)),
        (0, 0, 7) if n < d.wrps => write_point(7, n, d.hw_wcr(n)),
        (0, 0, 2) if crm == 2 => msr!("mdscr_el1", d.mdscr),
        (0, 1, 4) if crm == 0 => msr!("oslar_el1", u64::from(d.oslk)),
        _ => {}
    }
}

/// When a vCPU with a dirty debug shadow leaves the pCPU: debug exceptions
/// off for whoever runs next (MDSCR_EL1.MDE, KDE, SS = 0).
pub fn put_debug() {
    msr!("mdscr_el1", 0);
}
