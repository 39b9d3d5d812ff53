//! The exit context: the calling vCPU, its VM and the hypervisor, as the
//! portable services of an exit see them.
//!
//! [`ExitCtx`] implements [`PsciVm`], [`IpiTarget`] and [`HypercallEnv`]
//! once, for every backend, over the running [`Hypervisor`], [`Vm`] and
//! vCPU. What really differs per architecture is the small [`ExitArch`]
//! hook a backend implements beside [`Backend`]: how the PV IPI is marked
//! pending on a target (arm64: SGI 15 in the vGIC; LoongArch: SWI0 in the
//! target's shared state), where a started vCPU enters, and where the
//! guest's RAM lies.
//!
//! # One meaning of the PV IPI steps
//!
//! The router ([`crate::vcpu::ipi::send`]) calls, per target:
//!
//! - [`IpiTarget::deliver`]: the arch marks the interrupt pending
//!   ([`ExitArch::raise_pv_ipi`]); a newly pending target other than the
//!   sender is then woken through the scheduler
//!   ([`crate::vcpu::sched::Scheduler::wake_quiet`]), which in the same
//!   look under its lock says where the target stands: a blocked one
//!   becomes runnable (its idle pCPU is sent a physical IPI here: that is
//!   the wake, not a kick); a running one has the wake remembered so it
//!   cannot block past it, and its pCPU (never the caller's own) is
//!   returned to be kicked.
//! - [`IpiTarget::kick`]: a physical IPI to that pCPU
//!   ([`Backend::kick`]), counted in [`crate::vcpu::ipi::IpiOutcome::kicked`].
//!
//! That is the ordering contract of [`crate::vcpu::ipi`]: the scheduler marks a
//! vCPU running on `p` (under its lock) before the backend samples pending
//! interrupts for its entry, and `deliver` publishes the bit before it
//! takes that lock, so the target either sees the bit at its entry or is
//! kicked. The sender is never woken or kicked: it is in the hypervisor
//! and samples its interrupts before it re-enters.

use crate::vcpu::cpuset::VcpuSet;
use crate::vcpu::hypercall::{self, Abi, HypercallArgs, HypercallEnv, HypercallRet};
use crate::vcpu::ipi::{self, Delivery, IpiError, IpiOutcome, IpiTarget, IpiWindow};
use crate::vcpu::psci::{self, Effect, PsciVm};
use crate::vcpu::sched::{QuietWake, Scheduler, VcpuKey};
use crate::vcpu::stats::Counter;
use crate::vm::{Backend, Hypervisor, RunExit, Vcpu, Vm, VmEnd};

/// What an exit context needs from the architecture, beside [`Backend`].
pub trait ExitArch: Backend {
    /// Marks kestrel's PV IPI pending on vCPU `target` of `vm`, sent by
    /// vCPU `sender` (arm64: SGI 15 from `sender` in the vGIC; LoongArch:
    /// SWI0 in `target`'s shared state, merged at its next entry). Returns
    /// whether it was already pending (nothing new). It must publish the
    /// bit before returning (a release or stronger) and must not wake or
    /// kick anyone: [`ExitCtx`] does that.
    fn raise_pv_ipi(&self, vm: &Vm<Self>, sender: usize, target: usize) -> bool;
    /// Records where vCPU `index` of `vm` starts at its next load: `entry`
    /// with `context` as its first argument register (x0 / a0), in the
    /// architecture's reset state; `None` forgets a recorded start.
    /// Returns false if there is no such vCPU.
    fn set_entry(&self, vm: &Vm<Self>, index: usize, entry: Option<(u64, u64)>) -> bool;
    /// Whether guest physical `addr` lies in `vm`'s RAM.
    fn is_guest_ram(&self, vm: &Vm<Self>, addr: u64) -> bool;
}

/// The vCPU that took an exit, on pCPU `cpu`: what every exit path of a
/// backend takes, beside the vCPU's register state (`B::VcpuState`, which
/// the run loop holds locked for the exit).
pub struct ExitCtx<'a, B: Backend> {
    pub hv: &'a Hypervisor<B>,
    pub vm: &'a Vm<B>,
    /// The pCPU running the caller.
    pub cpu: usize,
    /// The calling vCPU (one of `vm.vcpus`).
    pub vcpu: &'a Vcpu<B>,
}

impl<'a, B: Backend> ExitCtx<'a, B> {
    /// The exit `vcpu` of `vm` took on pCPU `cpu`.
    #[inline]
    pub fn new(hv: &'a Hypervisor<B>, vm: &'a Vm<B>, cpu: usize, vcpu: &'a Vcpu<B>) -> Self {
        ExitCtx { hv, vm, cpu, vcpu }
    }

    /// The backend.
    #[inline]
    pub fn backend(&self) -> &'a B {
        &self.hv.backend
    }

    /// The calling vCPU's index in `vm`.
    #[inline]
    pub fn index(&self) -> usize {
        self.vcpu.index
    }

    /// Whether another vCPU waits for this pCPU (a yielding or polling
    /// caller gives it up).
    #[inline]
    pub fn should_preempt(&self) -> bool {
        self.hv.sched.should_preempt(self.cpu)
    }

    /// The scheduler's key of vCPU `index` of this VM.
    pub fn key(&self, index: usize) -> VcpuKey {
        VcpuKey {
            vm: self.vm.slot,
            vcpu: index as u16,
        }
    }

    /// An interrupt other than the PV IPI became pending for vCPU `index`
    /// (a vGIC SGI or line, an IOCSR IPI): wake it if it is blocked and
    /// kick its pCPU if it is running a guest ([`Hypervisor::wake`]).
    pub fn wake(&self, index: usize) {
        self.hv.wake(self.key(index), self.cpu);
    }

    /// [`ExitCtx::wake`] for each vCPU of `set` that exists, except the
    /// caller (which samples its interrupts before it re-enters anyway).
    pub fn wake_set(&self, set: VcpuSet) {
        let me = self.index();
        for v in set.iter().filter(|&v| v != me && v < self.vm.vcpus.len()) {
            self.wake(v);
        }
    }
}

impl<B: ExitArch> ExitCtx<'_, B> {
    /// Starts vCPU `index` at `entry` with `context` in its first argument
    /// register: records the entry, then powers it on. Returns false (and
    /// forgets the entry) if it is not off.
    pub fn start_vcpu(&self, index: usize, entry: u64, context: u64) -> bool {
        let be = &self.hv.backend;
        if !be.set_entry(self.vm, index, Some((entry, context))) {
            return false;
        }
        if self.hv.power_on(self.vm, index, self.cpu).is_ok() {
            true
        } else {
            be.set_entry(self.vm, index, None);
            false
        }
    }

    /// One PSCI/SMCCC call (`args` = x0..x3): the value for x0 and what the
    /// run loop does next. `has_work` says whether an interrupt is pending
    /// for the caller (CPU_SUSPEND returns at once then).
    pub fn psci(&mut self, args: [u64; 4], has_work: impl FnOnce() -> bool) -> (u64, RunExit) {
        self.psci_from(psci::Caller::Aarch64, args, has_work)
    }

    /// [`Self::psci`] for a caller in execution state `caller` (an AArch32
    /// EL1's r0-r3).
    pub fn psci_from(
        &mut self,
        caller: psci::Caller,
        args: [u64; 4],
        has_work: impl FnOnce() -> bool,
    ) -> (u64, RunExit) {
        let out = psci::handle_from(self, caller, args);
        let next = match out.effect {
            Effect::None => RunExit::Continue,
            Effect::Block if has_work() => RunExit::Continue,
            Effect::Block => RunExit::Block,
            Effect::CpuOff => RunExit::CpuOff,
            Effect::SystemOff => RunExit::VmEnd(VmEnd::PowerOff),
            Effect::SystemReset => RunExit::VmEnd(VmEnd::Reset),
        };
        (out.x0 as u64, next)
    }

    /// One kestrel hypercall from the calling vCPU.
    #[inline]
    pub fn hypercall(&mut self, abi: Abi, args: &HypercallArgs) -> HypercallRet {
        hypercall::dispatch(abi, args, self)
    }
}

impl<B: ExitArch> PsciVm for ExitCtx<'_, B> {
    fn vcpu_by_mpidr(&self, mpidr: u64) -> Option<usize> {
        psci::vcpu_index_of_mpidr(mpidr, self.vm.vcpus.len())
    }

    fn vcpu_is_on(&self, index: usize) -> bool {
        self.hv.vcpu_is_on(self.vm, index)
    }

    fn is_guest_ram(&self, addr: u64) -> bool {
        self.hv.backend.is_guest_ram(self.vm, addr)
    }

    fn start_vcpu(&mut self, index: usize, entry: u64, context: u64) -> bool {
        ExitCtx::start_vcpu(self, index, entry, context)
    }

    fn pv_time_offered(&self) -> bool {
        self.vm.pv_time.is_some()
    }
}

impl<'a, B: ExitArch> ExitCtx<'a, B> {
    /// The PV IPI steps for this caller: [`PvIpiRoute`] over the
    /// hypervisor's scheduler and this backend's hooks.
    pub fn pv_ipi(&self) -> PvIpiRoute<'a, CtxPvIpi<'a, B>> {
        PvIpiRoute {
            sched: &self.hv.sched,
            vm: self.vm.slot,
            vcpus: self.vm.vcpus.len(),
            sender: self.index(),
            cpu: self.cpu,
            now: self.hv.backend.now(),
            arch: CtxPvIpi {
                hv: self.hv,
                vm: self.vm,
            },
        }
    }
}

impl<B: ExitArch> IpiTarget for ExitCtx<'_, B> {
    fn vcpu_count(&self) -> usize {
        self.vm.vcpus.len()
    }

    fn deliver(&self, vcpu: usize) -> Delivery {
        self.pv_ipi().deliver(vcpu)
    }

    fn kick(&self, pcpu: usize) {
        self.hv.backend.kick(pcpu);
    }
}

/// What the PV IPI steps need from the architecture: marking the IPI
/// pending on a target ([`ExitArch::raise_pv_ipi`]) and a physical IPI
/// ([`Backend::kick`]).
pub trait PvIpiArch {
    /// Marks the PV IPI from vCPU `sender` pending on vCPU `target`,
    /// published before it returns; whether it was pending already.
    fn raise(&self, sender: usize, target: usize) -> bool;
    /// A physical IPI to `pcpu`.
    fn kick(&self, pcpu: usize);
}

/// The backend's hooks for one VM, as [`ExitCtx::pv_ipi`] uses them.
pub struct CtxPvIpi<'a, B: Backend> {
    hv: &'a Hypervisor<B>,
    vm: &'a Vm<B>,
}

impl<B: ExitArch> PvIpiArch for CtxPvIpi<'_, B> {
    fn raise(&self, sender: usize, target: usize) -> bool {
        self.hv.backend.raise_pv_ipi(self.vm, sender, target)
    }

    fn kick(&self, pcpu: usize) {
        self.hv.backend.kick(pcpu);
    }
}

/// The PV IPI steps of the module documentation, over the scheduler, for
/// vCPU `sender` of VM `vm` running on pCPU `cpu`: the [`IpiTarget`]
/// that [`crate::vcpu::ipi::send`] routes through. [`ExitCtx`] uses it with the
/// backend's hooks; the loom model of the pending-then-kick ordering
/// (`kernel/tests/loom_exitctx.rs`) with its own.
pub struct PvIpiRoute<'a, A: PvIpiArch> {
    pub sched: &'a Scheduler,
    /// The VM's scheduler slot.
    pub vm: u16,
    /// Its number of vCPUs.
    pub vcpus: usize,
    /// The calling vCPU.
    pub sender: usize,
    /// The pCPU running it.
    pub cpu: usize,
    /// The counter value of the send: a target it wakes waits from then
    /// (stolen time, [`crate::vcpu::steal`]).
    pub now: u64,
    pub arch: A,
}

impl<A: PvIpiArch> PvIpiRoute<'_, A> {
    fn key(&self, index: usize) -> VcpuKey {
        VcpuKey {
            vm: self.vm,
            vcpu: index as u16,
        }
    }
}

impl<A: PvIpiArch> IpiTarget for PvIpiRoute<'_, A> {
    fn vcpu_count(&self) -> usize {
        self.vcpus
    }

    fn deliver(&self, vcpu: usize) -> Delivery {
        if self.arch.raise(self.sender, vcpu) {
            return Delivery::Coalesced;
        }
        if vcpu == self.sender {
            return Delivery::Pending;
        }
        // One look under the scheduler's lock, after the bit is published:
        // the wake (remembered for a running target), and where it runs.
        match self.sched.wake_quiet(self.key(vcpu), self.cpu, self.now) {
            Ok(QuietWake::Idle(c)) => {
                self.arch.kick(c);
                Delivery::Pending
            }
            Ok(QuietWake::Running(c)) => Delivery::Running(c),
            Ok(QuietWake::None) | Err(_) => Delivery::Pending,
        }
    }

    fn kick(&self, pcpu: usize) {
        self.arch.kick(pcpu);
    }
}

impl<B: ExitArch> HypercallEnv for ExitCtx<'_, B> {
    fn send_ipi(&mut self, window: &IpiWindow) -> Result<IpiOutcome, IpiError> {
        let out = ipi::send(&self.pv_ipi(), self.index(), window)?;
        self.vm.stats.record_ipi(&out);
        Ok(out)
    }

    fn read_stat(&self, index: u64) -> Option<u64> {
        Counter::from_index(index).map(|c| self.vm.counter(c))
    }

    fn pv_ipi_offered(&self) -> bool {
        self.vm.pv_ipi
    }
}

#[cfg(test)]
mod tests;
