//! An LVZ vCPU's state while it is not on a pCPU: its GPRs and PC (the
//! world switch's frame), its guest CSRs, the guest timer as a deadline on
//! the stable counter, its FP registers, and what the backend keeps about
//! it (the GID of its load, a pending `idle`, halt polling, steal time).

use alloc::sync::Arc;

use crate::guest::loongarch::steal::StealTime;
use crate::mem::vmid::VmVmid;
use crate::vcpu::fpu::{LoongArchFpState, VcpuFp};
use crate::vcpu::sched::VcpuKey;
use crate::vcpu::stats::Stats;

use super::super::backend::switch::GuestFrame;
use super::super::backend::{la_vcpu_fields, LaVcpu, VcpuRun};
use super::gcsr::{g, GuestCsrs};

/// TCFG fields.
pub use crate::guest::loongarch::gtimer::{TCFG_EN, TCFG_INIT, TCFG_PERIODIC};
/// ESTAT.IS bits.
pub const IS_SWI: u64 = 3;
/// HWI0-7: the lines of the interrupt controllers.
pub const IS_HWI: u64 = 0xff << 2;
pub const IS_TI: u64 = 1 << 11;
pub const IS_IPI: u64 = 1 << 12;

/// A guest CSR LVZ does not give the guest (GSPR on access): kestrel keeps
/// it in software. Reads return what was last written.
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftCsrs {
    /// IMPCTL1/2 (0x80, 0x81), MERRCTL..MERRSAVE (0x90-0x95), CTAG (0x98),
    /// DBG/DERA/DSAVE (0x500-0x502).
    vals: [u64; 12],
}

impl SoftCsrs {
    fn slot(n: u32) -> Option<usize> {
        Some(match n {
            0x80 | 0x81 => (n - 0x80) as usize,
            0x90..=0x95 => 2 + (n - 0x90) as usize,
            0x98 => 8,
            0x500..=0x502 => 9 + (n - 0x500) as usize,
            _ => return None,
        })
    }

    /// CSR `n`: the value kept (0 for a number the architecture does not
    /// define for a guest: reads 0, writes ignored).
    pub fn get(&self, n: u32) -> u64 {
        Self::slot(n).map_or(0, |i| self.vals[i])
    }

    pub fn set(&mut self, n: u32, v: u64) {
        if let Some(i) = Self::slot(n) {
            self.vals[i] = v;
        }
    }
}

pub struct VcpuState {
    pub frame: GuestFrame,
    /// Guest CSRs, valid while the vCPU is not loaded.
    pub gcsr: GuestCsrs,
    pub soft: SoftCsrs,
    /// When the guest timer fires, on the stable counter (TCFG.EN set),
    /// valid while the vCPU is not loaded.
    pub timer_at: Option<u64>,
    pub fp: Arc<VcpuFp<LoongArchFpState>>,
    /// Bumped whenever its guest TLB entries on other pCPUs are stale.
    pub epoch: u64,
    /// Its own VMID (the GID): per vCPU under LVZ ([`super::LvzBackend`]'s `load`).
    pub vmid: VmVmid,
    pub gid: u16,
    /// The pCPU, epoch and GID its guest TLB entries were last made under:
    /// anything else at a load and they are flushed there.
    pub tlb_on: Option<(usize, u64, u16)>,
    pub key: VcpuKey,
    /// Waiting in `idle` for an interrupt it enables.
    pub idle: bool,
    pub run: VcpuRun,
    /// KVM steal time: its record (`guest::loongarch::steal`), and when
    /// the vCPU was last preempted (put while runnable, not in `idle`), on
    /// the stable counter.
    pub steal: StealTime,
    pub preempted_at: Option<u64>,
    /// GCNTC: what the guest's stable counter adds to the CPU's, so that it
    /// counts from 0 at the VM's creation (or restart), the same for all
    /// of its vCPUs wherever they run.
    pub counter_offset: u64,
}

impl LaVcpu for VcpuState {
    /// Its guest counter counts from 0 at `created` (GCNTC).
    fn new(index: usize, stats: &Arc<Stats>, created: u64) -> VcpuState {
        let mut s = VcpuState {
            frame: GuestFrame::default(),
            gcsr: GuestCsrs::zeroed(),
            soft: SoftCsrs::default(),
            timer_at: None,
            fp: Arc::new(VcpuFp::counted(
                LoongArchFpState::default(),
                Arc::clone(stats),
            )),
            epoch: 0,
            vmid: VmVmid::new(),
            gid: 0,
            tlb_on: None,
            key: VcpuKey {
                vm: 0,
                vcpu: index as u16,
            },
            idle: false,
            run: VcpuRun::default(),
            steal: StealTime::new(),
            preempted_at: None,
            counter_offset: created.wrapping_neg(),
        };
        s.reset(index, 0, [0; 3]);
        s
    }

    /// Architectural reset for an entry at `pc` with a0-a2 = `args`: DA
    /// mode, PLV0, interrupts off, every other guest CSR 0 but the
    /// identification ones (CPUID = the vCPU index, PRCFG1-3 as the CPU's).
    fn reset(&mut self, index: usize, pc: u64, args: [u64; 3]) {
        self.frame = GuestFrame::default();
        self.frame.pc = pc;
        self.frame.regs[4..7].copy_from_slice(&args);
        self.gcsr = GuestCsrs::zeroed();
        // CRMD: DA = 1, DATF = DATM = 1 (coherent cached), PLV0, IE = 0.
        self.gcsr.set(g::CRMD, 1 << 3 | 1 << 5 | 1 << 7);
        self.gcsr.set(g::CPUID, index as u64);
        for (n, v) in super::host_prcfg() {
            self.gcsr.set(n, v);
        }
        // The STLB page size a fresh CPU has (Linux sets its own).
        self.gcsr.set(0x1e, 12);
        self.soft = SoftCsrs::default();
        self.timer_at = None;
        self.idle = false;
        self.steal.reset();
        self.epoch += 1;
    }

    la_vcpu_fields!();
}
