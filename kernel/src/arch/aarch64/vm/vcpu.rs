//! An arm64 vCPU's state: its register file (general, EL1, GIC CPU
//! interface, FP, debug), what the exit fast path and halt polling keep
//! between exits, and what other pCPUs hand it (a PSCI CPU_ON).

use crate::base::lock::Mutex;
use alloc::sync::Arc;

use crate::base::haltpoll::HaltPoll;
use crate::dev::vgic::{LrEntry, MAX_LRS};
use crate::guest::arm64::debug::DebugRegs;
use crate::guest::arm64::ptimer::PhysTimer;
use crate::vcpu::fpu::{Arm64FpState, VcpuFp};
use crate::vcpu::stats::Stats;

use super::super::timer;
use super::aarch32::{self, A32Regs};
use super::regs::{El1Regs, PSTATE_EL1H_MASKED};
use super::switch::GuestRegs;
use super::vgic_hw::VgicCpu;
use super::HALT_POLL_US;

/// Per-vCPU state other pCPUs touch.
pub struct VcpuShared {
    /// A PSCI CPU_ON waiting to be applied at the next load: (entry, context).
    pub boot: Mutex<Option<(u64, u64)>>,
}

/// Per-vCPU register file.
pub struct VcpuState {
    pub regs: GuestRegs,
    pub el1: El1Regs,
    pub gic: VgicCpu,
    pub fp: Arc<VcpuFp<Arm64FpState>>,
    pub vmpidr: u64,
    /// List registers filled at the last entry.
    pub lrs_used: usize,
    /// What the last fill put in them, while `lrs_live`.
    pub filled: heapless::Vec<LrEntry, MAX_LRS>,
    /// The list registers still hold `filled`, unsynced: the guest changed
    /// none of them since (the exit fast path, `sync_after_exit`).
    pub lrs_live: bool,
    /// The last exit blocked the vCPU (WFI, WFIT, PSCI CPU_SUSPEND): its
    /// put arms the pCPU's timer for its deadlines.
    pub blocking: bool,
    /// Adaptive halt polling of its WFIs (with its block under way, whose
    /// length, known at the next load, adapts the window).
    pub halt: HaltPoll,
    /// The virtual and physical timer levels last given to the vGIC model.
    pub vtimer_level: Option<bool>,
    pub ptimer_level: Option<bool>,
    /// The vCPU has run at least once (so its EL1 state is its own).
    pub started: bool,
    /// Length of the instruction that caused the last synchronous exit.
    pub ilen: u64,
    /// The emulated EL1 physical timer.
    pub ptimer: PhysTimer,
    /// The physical counter value at which a WFIT the vCPU blocked in
    /// times out (`u64::MAX`: none).
    pub wfxt_at: u64,
    /// The debug registers' shadow (loaded into the hardware when dirty).
    pub debug: DebugRegs,
    /// The vCPU's EL1 runs in AArch32 state (an AArch32 VM's).
    pub aarch32: bool,
    /// Its AArch32-only EL1 state (switched only when `aarch32`).
    pub a32: A32Regs,
}

impl VcpuState {
    pub fn new(
        index: usize,
        stats: &Arc<Stats>,
        dbg_points: (usize, usize),
        sve_vq: Option<u8>,
        aarch32: bool,
    ) -> VcpuState {
        VcpuState {
            regs: GuestRegs::default(),
            el1: El1Regs::reset(),
            gic: VgicCpu::default(),
            fp: Arc::new(VcpuFp::counted(
                Arm64FpState::new(sve_vq),
                Arc::clone(stats),
            )),
            vmpidr: (1 << 31) | crate::vcpu::psci::vcpu_mpidr(index),
            lrs_used: 0,
            filled: heapless::Vec::new(),
            lrs_live: false,
            vtimer_level: None,
            ptimer_level: None,
            blocking: false,
            halt: HaltPoll::new(timer::frequency() / 1_000_000 * HALT_POLL_US),
            started: false,
            ilen: 4,
            ptimer: PhysTimer::default(),
            wfxt_at: u64::MAX,
            debug: DebugRegs::new(dbg_points.0, dbg_points.1),
            aarch32,
            a32: A32Regs::default(),
        }
    }

    /// Architectural reset for an entry at `entry` with x0 = `x0` (boot and
    /// PSCI CPU_ON): EL1h, MMU off, DAIF masked. For a 32-bit vCPU, r0 =
    /// `x0`, SVC mode with A/I/F masked, A32 (T32 for an odd `entry`).
    pub fn reset(&mut self, entry: u64, x0: u64) {
        self.regs = GuestRegs::default();
        self.regs.x[0] = x0;
        self.regs.pc = entry;
        self.regs.pstate = PSTATE_EL1H_MASKED;
        self.el1 = El1Regs::reset();
        self.gic = VgicCpu::default();
        self.ptimer = PhysTimer::default();
        self.debug = DebugRegs::new(self.debug.brps, self.debug.wrps);
        if self.aarch32 {
            aarch32::reset_state(self, entry);
        }
    }

    /// The boot vCPU's reset: Linux's boot protocol of the VM's EL1 state
    /// (AArch64: x0 = DTB; AArch32: r0 = 0, r1 = `0xFFFF_FFFF` for a
    /// device-tree machine, r2 = DTB).
    pub fn reset_boot(&mut self, entry: u64, dtb: u64) {
        if self.aarch32 {
            self.reset(entry, 0);
            self.regs.x[1] = u64::from(kestrel_abi::image::ARM32_MACH_DT);
            self.regs.x[2] = dtb;
        } else {
            self.reset(entry, dtb);
        }
    }
}
