//! The backend's set-up: probing the hardware once (virtual GIC interface,
//! VMID width, the features guests see) and each pCPU's EL2 state before
//! its run loop.

use alloc::format;
use alloc::string::String;
use core::sync::atomic::Ordering;

use crate::dev::vgic::GicVersion;
use crate::host::board::{BoardInfo, IrqChip};
use crate::mem::vmid::VmidAllocator;
use crate::vcpu::fpu::FpPolicy;
use crate::MAX_CPUS;

use super::super::el2;
use super::super::gic::Priority;
use super::super::platform;
use super::fp::Arm64FpHw;
use super::regs::{self, mrs, msr};
use super::vgic_hw::VgicHw;
use super::{stage2, Arm64Backend, KICK_SGI, MAINTENANCE_PPI, PCPU, PTIMER_PPI, VTIMER_PPI};

/// The arm64 backend for `board`, or why no VM can run on it.
pub fn probe(board: &BoardInfo, policy: FpPolicy) -> Result<Arm64Backend, String> {
    let gic = platform::gic()
        .copied()
        .ok_or_else(|| String::from("no GIC"))?;
    let (hw, version) = match board.irqchip {
        IrqChip::GicV3 { .. } => (VgicHw::probe_v3(), GicVersion::V3),
        IrqChip::GicV2 { gich: Some(h), .. } => (VgicHw::probe_v2(h as usize), GicVersion::V2),
        _ => {
            return Err(String::from(
                "no virtual GIC interface (GICv2 without GICH in the DTB)",
            ))
        }
    };
    let vmid_bits = stage2::host_vmid_bits();
    // `vmid4` / `vmid8` force a narrower width than the hardware's (tests
    // and `cargo xtask bench-seeds`); the smaller wins.
    let usable_bits = if cfg!(feature = "vmid4") {
        vmid_bits.min(4)
    } else if cfg!(feature = "vmid8") {
        vmid_bits.min(8)
    } else {
        vmid_bits
    };
    let cpus = board.cpus.len().clamp(1, MAX_CPUS);
    if cpus + 2 > 1 << usable_bits {
        return Err(format!(
            "{cpus} CPUs cannot share {usable_bits}-bit VMIDs (each CPU may hold one across a \
             rollover)"
        ));
    }
    let backend = Arm64Backend {
        gic,
        hw,
        version,
        vmids: VmidAllocator::new(usable_bits, cpus),
        policy,
        midr: mrs!("midr_el1"),
        ras: (mrs!("id_aa64pfr0_el1") >> 28) & 0xf != 0,
        mdcr: el2::mdcr_guest().bits(),
        wfxt: mrs!("s3_0_c0_c6_2") & 0xf >= 2,
        dbg_points: {
            let dfr0 = mrs!("id_aa64dfr0_el1");
            (
                ((dfr0 >> 12) & 0xf) as usize + 1,
                ((dfr0 >> 20) & 0xf) as usize + 1,
            )
        },
        hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
        sve_lengths: super::fp::probe_sve_lengths(),
    };
    log::info!(
        "arm64 VMs: GICv{} virtual interface with {} list registers, {}-bit VMIDs{}, \
         {}-bit IPA, FP policy {:?}",
        if version == GicVersion::V3 { 3 } else { 2 },
        hw.nr_lrs(),
        backend.vmids.bits(),
        if cfg!(feature = "vmid-flush-switch") {
            " (naive policy: TLB invalidated on every VM switch)"
        } else {
            ""
        },
        stage2::host_pa_bits().min(40),
        policy
    );
    Ok(backend)
}

impl Arm64Backend {
    /// Per-pCPU set-up before its run loop: FP engine, the PPIs and SGI the
    /// backend uses, guest-independent EL2 controls. IRQs stay masked at EL2
    /// except while idle.
    pub(super) fn init_cpu_regs(&self, cpu: usize) {
        PCPU[cpu].fp.init(cpu, self.policy, Arm64FpHw::default());
        self.gic.enable_split_eoi();
        self.gic.enable_ppi(KICK_SGI, Priority::Normal);
        self.gic.enable_ppi(MAINTENANCE_PPI, Priority::Normal);
        self.gic.enable_ppi(VTIMER_PPI, Priority::Normal);
        self.gic.enable_ppi(PTIMER_PPI, Priority::Normal);
        msr!("cntp_ctl_el0", 0);
        regs::put_debug();
        PCPU[cpu].vtimer_enabled.store(true, Ordering::Relaxed);
        if let VgicHw::V3 { .. } = self.hw {
            msr!("ich_hcr_el2", 0);
        }
        msr!("cnthctl_el2", el2::CnthctlEl2::GUEST.bits());
        msr!("cntv_ctl_el0", 0);
        if self.ras {
            // kestrel never sets HCR_EL2.VSE: no virtual SError syndrome.
            msr!("s3_4_c5_c2_3", 0); // VSESR_EL2
        }
        el2::el2_trap_defaults();
        if super::aarch32::el1_supported() {
            // No cp15 CRn traps (reset value UNKNOWN): AArch32 guests'
            // cp15 accesses trap only through the controls kestrel sets.
            msr!("hstr_el2", 0);
            // No vector catch for an AArch32 EL1 (its cp14 DBGVCR traps
            // and reads as zero; the reset value is UNKNOWN).
            msr!("dbgvcr32_el2", 0);
        }
        // SAFETY: masks IRQs at EL2 on this CPU: the run loop takes them as
        // guest exits or in `idle`.
        unsafe { core::arch::asm!("msr daifset, #2", options(nomem, nostack)) };
    }
}
