//! A LoongArch vCPU's state: its registers, its software CSRs and TLB,
//! FP, and the real ASIDs its shadow TLB entries are tagged with.

use alloc::sync::Arc;

use crate::guest::loongarch::csr::CsrFile;
use crate::guest::loongarch::tlb::SoftTlb;
use crate::vcpu::fpu::{LoongArchFpState, VcpuFp};
use crate::vcpu::sched::VcpuKey;
use crate::vcpu::stats::Stats;

use super::super::backend::switch::GuestFrame;
use super::super::backend::{la_vcpu_fields, LaVcpu, VcpuRun, PCPU};
use super::{hwtlb, CONTEXTS, CTX_DA, CTX_KERNEL, CTX_USER};

/// Per-vCPU register file and privileged state.
pub struct VcpuState {
    pub frame: GuestFrame,
    pub csr: CsrFile,
    pub tlb: SoftTlb,
    pub fp: Arc<VcpuFp<LoongArchFpState>>,
    /// Bumped whenever this vCPU's shadow entries become stale.
    pub epoch: u64,
    /// VMID of the current load (real ASIDs VMID * 4 + context).
    pub vmid: u16,
    /// Guest PLV the user context's shadows were made at (1..=3).
    pub user_plv: u64,
    /// This vCPU (set at each load).
    pub key: VcpuKey,
    pub run: VcpuRun,
}

impl LaVcpu for VcpuState {
    fn new(index: usize, stats: &Arc<Stats>, _created: u64) -> VcpuState {
        VcpuState {
            frame: GuestFrame::default(),
            csr: CsrFile::new(index as u64),
            tlb: SoftTlb::new(),
            fp: Arc::new(VcpuFp::counted(
                LoongArchFpState::default(),
                Arc::clone(stats),
            )),
            epoch: 0,
            vmid: 0,
            user_plv: 3,
            run: VcpuRun::default(),
            key: VcpuKey {
                vm: 0,
                vcpu: index as u16,
            },
        }
    }

    /// Architectural reset for an entry at `pc`: DA mode, PLV0, IE off.
    fn reset(&mut self, index: usize, pc: u64, args: [u64; 3]) {
        self.frame = GuestFrame::default();
        self.frame.pc = pc;
        self.frame.regs[4..7].copy_from_slice(&args);
        self.csr = CsrFile::new(index as u64);
        self.tlb = SoftTlb::new();
        self.epoch += 1;
    }

    la_vcpu_fields!();
}

impl VcpuState {
    /// The real ASID for the guest's current mode.
    pub fn asid(&self, ctx: u16) -> u16 {
        self.vmid * CONTEXTS + ctx
    }

    /// The context the guest runs in now.
    pub fn context(&self) -> u16 {
        if self.csr.da() {
            CTX_DA
        } else if self.csr.plv() == 0 {
            CTX_KERNEL
        } else {
            CTX_USER
        }
    }

    /// Drops every shadow entry of this vCPU on this pCPU and marks them
    /// stale everywhere else.
    pub fn invalidate_shadows(&mut self, cpu: usize) {
        for c in 0..CONTEXTS {
            hwtlb::flush_asid(self.asid(c));
        }
        self.shadows_changed(cpu);
    }

    /// The caller dropped what became stale on this pCPU: other pCPUs'
    /// shadows of this vCPU are stale now (they flush at its next load
    /// there), this pCPU's are current.
    pub fn shadows_changed(&mut self, cpu: usize) {
        self.epoch += 1;
        if let Some(p) = PCPU.get(cpu) {
            *p.last.lock() = Some((self.key, self.epoch, self.vmid));
        }
    }
}
