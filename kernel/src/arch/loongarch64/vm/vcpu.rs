//! A LoongArch vCPU's state: its registers, its software CSRs and TLB,
//! FP, and the real ASIDs its shadow TLB entries are tagged with.

use alloc::sync::Arc;

use crate::base::haltpoll::HaltPoll;
use crate::guest::loongarch::csr::CsrFile;
use crate::guest::loongarch::tlb::SoftTlb;
use crate::vcpu::fpu::{LoongArchFpState, VcpuFp};
use crate::vcpu::sched::VcpuKey;
use crate::vcpu::stats::Stats;

use super::super::backend::switch::GuestFrame;
use super::super::backend::{LaVcpu, HALT_POLL_US, PCPU};
use super::super::csr;
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
    /// Adaptive halt polling of its `idle`s, and when its last unpolled
    /// wait began (its length, known at the next load, adapts the window).
    pub halt: HaltPoll,
    pub blocked_at: Option<u64>,
    /// The bus region of its last MMIO access ([`crate::dev::vdev::bus::Bus::find_from`]).
    pub mmio_region: usize,
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
            halt: HaltPoll::new(csr::counter_hz() / 1_000_000 * HALT_POLL_US),
            blocked_at: None,
            mmio_region: 0,
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

    fn frame(&mut self) -> &mut GuestFrame {
        &mut self.frame
    }

    fn fp(&self) -> &Arc<VcpuFp<LoongArchFpState>> {
        &self.fp
    }

    fn epoch(&mut self) -> &mut u64 {
        &mut self.epoch
    }

    fn halt(&mut self) -> &mut HaltPoll {
        &mut self.halt
    }

    fn blocked_at(&mut self) -> &mut Option<u64> {
        &mut self.blocked_at
    }

    fn mmio_region(&mut self) -> &mut usize {
        &mut self.mmio_region
    }
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
