//! VMs, vCPUs and the per-pCPU run loop, shared by every backend.
//!
//! A backend (arm64 EL2, LoongArch trap-and-emulate, later LoongArch LVZ)
//! implements [`Backend`]: how to load a vCPU onto this pCPU, run it until
//! something needs a scheduling decision, and put it away. Everything else
//! (which vCPU runs where, time slices, blocking on WFI/`idle`, PSCI-style
//! power-on and -off, the end of a VM and of the last VM) is decided here, the
//! same way for every architecture, and tested on the host with a fake backend.
//!
//! Concurrency: the [`Scheduler`] guarantees a vCPU runs on one pCPU at a
//! time; its register file sits in a `Mutex` that only the running pCPU takes,
//! so the lock is never contended on the hot path. State other pCPUs touch
//! (pending virtual interrupts) belongs to the backend's own per-VM state.

pub mod exitctx;
pub mod rebuild;

use crate::base::lock::{Mutex, Once};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

pub use crate::base::deadline::{DeadlineBound, Deadlines, DEADLINES};
use crate::base::platform::ExitStatus;
use crate::dev::vdev::bus::Bus;
use crate::mem::vmid::VmVmid;
use crate::vcpu::sched::{CpuMask, Kick, PutReason, RunState, SchedError, Scheduler, VcpuKey};
use crate::vcpu::stats::{Counter, ExitReason, Snapshot, Stats};
use crate::vcpu::steal::{PvTimeRegion, VcpuSteal};
use crate::vm::exitctx::ExitCtx;
use crate::vm::rebuild::{PendingRebuild, PostError, Rebuild};

/// An operation on a VM the operator asks for (the console's commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Stop it as a power-off would.
    Stop,
    /// Restart it as a reset would.
    Restart,
    /// Start a stopped VM again.
    Start,
}

impl Op {
    pub fn verb(self) -> &'static str {
        match self {
            Op::Stop => "stop (power off)",
            Op::Restart => "restart",
            Op::Start => "start",
        }
    }
}

/// What a VM's reset request (PSCI SYSTEM_RESET, the LoongArch GED reset)
/// does (config `on_reboot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnReboot {
    /// The VM starts again from its packed images with fresh RAM and
    /// devices.
    #[default]
    Restart,
    /// The VM ends.
    Stop,
}

/// Why a VM ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmEnd {
    /// The guest powered itself off (PSCI SYSTEM_OFF, or the power-off register).
    PowerOff,
    /// The guest asked for a reset and its config says `on_reboot =
    /// "stop"`, or the backend cannot restart VMs (otherwise the VM
    /// restarts instead of ending).
    Reset,
    /// kestrel stopped it: a guest error it cannot answer architecturally.
    Fatal(String),
    /// The operator stopped it from the console (as a power-off). kestrel
    /// stays up while such a VM may be started again.
    Stopped,
}

impl core::fmt::Display for VmEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VmEnd::PowerOff => f.write_str("powered off"),
            VmEnd::Reset => f.write_str("asked for a reset (stopped: no restart)"),
            VmEnd::Fatal(why) => write!(f, "stopped by kestrel: {why}"),
            VmEnd::Stopped => f.write_str("stopped from the console"),
        }
    }
}

/// What one [`Backend::run`] call ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunExit {
    /// Handled; run again (at the end of the time slice the loop asks the
    /// scheduler whether to preempt).
    Continue,
    /// The vCPU waits for an interrupt (the backend has checked none is pending).
    Block,
    /// Give the pCPU to someone else now.
    Yield,
    /// The vCPU turned itself off (PSCI CPU_OFF).
    CpuOff,
    /// The whole VM ends.
    VmEnd(VmEnd),
}

/// Continues device work a VM's devices left pending (a virtio
/// notification whose work exceeded one exit's budget), within one exit's
/// budget: the run loop calls it before a guest entry of a vCPU of `vm`
/// while [`crate::dev::virtio::set::VmVirtio::pending`] says so.
/// `crate::vmm::virtio` implements it once for every backend with devices
/// (`crate::vmm::devices::DeviceHost`: `crate::vmm::virtio::resume`); a
/// backend without such devices (a test's) takes the default: nothing.
pub trait DeviceWork: Sized {
    fn device_work(hv: &Hypervisor<Self>, vm: &Vm<Self>, cpu: usize)
    where
        Self: Backend,
    {
        let _ = (hv, vm, cpu);
    }
}

/// One architecture's way of running vCPUs.
pub trait Backend: DeviceWork + Sync + Sized {
    /// Per-VM architectural state (stage-2 tables, virtual interrupt controller, ...).
    type VmState: Send + Sync;
    /// Per-vCPU register file and architectural state.
    type VcpuState: Send;

    /// Makes `vcpu` current on this pCPU (VMID, FP ownership, timers, ...).
    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut Self::VcpuState);
    /// Runs the guest until an exit needs the scheduler (or the slice may be over).
    /// `env` is the loaded vCPU's exit context (this backend's hypervisor,
    /// for power-on, wakes, VM end; the VM; the pCPU), `ctx` its registers.
    fn run(&self, env: &mut ExitCtx<'_, Self>, ctx: &mut Self::VcpuState) -> RunExit;
    /// Takes `vcpu` off this pCPU.
    fn put(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut Self::VcpuState);
    /// Sends a physical IPI so `cpu` leaves its guest or its idle wait.
    fn kick(&self, cpu: usize);
    /// Waits on this pCPU until an interrupt (tick or kick) arrives.
    fn idle(&self, hv: &Hypervisor<Self>, cpu: usize);
    /// Whether this pCPU's current time slice is over (set by the tick).
    fn slice_expired(&self, cpu: usize) -> bool;
    /// Starts a new time slice on this pCPU.
    fn slice_start(&self, cpu: usize);
    /// The platform counter now (arm64 CNTPCT_EL0, LoongArch stable
    /// counter): the scheduler charges vCPUs' run time in its ticks. It must
    /// not go backwards and must be the same counter on every pCPU.
    fn now(&self) -> u64;
    /// Deadline `which` of vCPU `vcpu` (not loaded) has passed
    /// ([`Hypervisor::check_timers`]): raise what it stands for (a timer
    /// interrupt line) and say whether the vCPU must wake. The default: it
    /// wakes.
    fn deadline_passed(&self, vm: &Vm<Self>, vcpu: usize, which: usize) -> bool {
        let _ = (vm, vcpu, which);
        true
    }
    /// Whether [`Backend::restart_vm`] is implemented: without it a reset
    /// request ends the VM whatever its `on_reboot` says.
    fn can_restart(&self) -> bool {
        false
    }
    /// Rebuilds `vm`'s architectural state for a restart
    /// ([`Hypervisor::run_cpu`] sequences it): fresh RAM with its images,
    /// fresh devices, `vcpus` as at creation (vCPU 0 at the entry), stale
    /// translations of its VMID dropped. None of its vCPUs is loaded on any
    /// pCPU and none runs until this returns. It runs on the pCPU that put
    /// the VM's last vCPU, between two vCPUs of its run loop (or on the
    /// one that asked, if no pCPU held one): keep it short, or leave the
    /// long part to the VM's own vCPU 0 (as LoongArch zeroes RAM). An error
    /// ends the VM. The default: restarts are not supported.
    fn restart_vm(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [crate::base::lock::MutexGuard<'_, Self::VcpuState>],
    ) -> Result<(), String> {
        let _ = (vm, vcpus);
        Err(String::from("this backend cannot restart a VM"))
    }
}

/// One virtual CPU.
pub struct Vcpu<B: Backend> {
    pub index: usize,
    pub key: VcpuKey,
    pub ctx: Mutex<B::VcpuState>,
    pub stats: Stats,
    /// When to look at it while it is not loaded.
    pub deadlines: Deadlines,
    /// Its stolen time, as its guest's record shows it.
    pub steal: VcpuSteal,
}

/// One VM.
pub struct Vm<B: Backend> {
    pub slot: u16,
    pub name: String,
    pub vmid: VmVmid,
    /// The VM's counters (shared with its vCPUs' FP state, which counts
    /// its own register moves here: [`crate::vcpu::fpu::VcpuFp::counted`]).
    pub stats: Arc<Stats>,
    pub arch: B::VmState,
    /// The VM's emulated MMIO regions (fixed at creation, read without a lock).
    pub bus: Bus,
    /// Its virtio devices (also on the bus), for the host side: console
    /// input, network ports.
    pub virtio: crate::dev::virtio::set::VmVirtio,
    pub vcpus: Vec<Vcpu<B>>,
    /// What its reset request does.
    pub on_reboot: OnReboot,
    /// The PV IPI feature is offered to the guest (config `pv_ipi`).
    pub pv_ipi: bool,
    /// arm64 stolen time is offered (config `pv_time`): where the vCPUs'
    /// records are.
    pub pv_time: Option<PvTimeRegion>,
    /// vCPUs that start at once, at creation and at each restart.
    started: usize,
    ended: AtomicBool,
    /// Its end has been reported to the observer (the machine's work is
    /// over only when every VM's end is: its last lines are printed).
    reported: AtomicBool,
    end: Mutex<Option<VmEnd>>,
    /// A restart is under way: its vCPUs are stopped until it is done.
    resetting: AtomicBool,
    /// The rebuild (restart or start) waiting for its vCPUs to leave their
    /// pCPUs, completed by the pCPU that puts the last one.
    rebuild: PendingRebuild,
    /// Restarts done so far.
    restarts: AtomicU64,
    /// An operation the console asked for ([`Hypervisor::request`]), 0: none.
    request: AtomicU8,
    /// The platform counter when it was created or last (re)started.
    started_at: AtomicU64,
    /// The earliest counter value at which its pending device work may
    /// run again before an entry: a round of `t` ticks ending at `e` sets
    /// `e + t`, so its vCPUs get at least as much of their own time as the
    /// work takes, and a guest operation that meets several exits (its own,
    /// then interrupts) pays for one round, not one per exit.
    device_work_after: AtomicU64,
}

/// What a VM is doing, for the console's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmState {
    /// A vCPU runs or waits for a pCPU.
    Running,
    /// Every vCPU that is on waits for an interrupt.
    Blocked,
    /// It has ended.
    Stopped,
    /// A restart is under way.
    Restarting,
}

impl VmState {
    pub const fn name(self) -> &'static str {
        match self {
            VmState::Running => "running",
            VmState::Blocked => "blocked",
            VmState::Stopped => "stopped",
            VmState::Restarting => "restarting",
        }
    }
}

fn op_code(op: Op) -> u8 {
    match op {
        Op::Stop => 1,
        Op::Restart => 2,
        Op::Start => 3,
    }
}

impl<B: Backend> Vm<B> {
    /// Whether the VM has ended.
    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Its counters: the VM's block and its vCPUs' (which hold their
    /// exits) added up.
    pub fn counters(&self) -> Snapshot {
        self.stats.snapshot() + self.vcpus.iter().map(|v| v.stats.snapshot()).sum()
    }

    /// One counter of [`Self::counters`].
    pub fn counter(&self, c: Counter) -> u64 {
        self.vcpus
            .iter()
            .fold(self.stats.get(c), |n, v| n.wrapping_add(v.stats.get(c)))
    }

    /// Whether a synchronous exit its backend handled in place (a
    /// hypercall, an emulated instruction or register, or an MMIO access:
    /// `mmio`) leaves the run loop nothing to do before the next entry of
    /// this VM's vCPU: the VM is not stopping and, after an MMIO access
    /// (which may have notified a virtio queue), no device work waits for
    /// its budget. The backend adds its own look (no host interrupt
    /// pending); an interrupt exit's rule is
    /// [`Hypervisor::nothing_between_entries`].
    #[inline(always)]
    pub fn quiet_after_sync_exit(&self, mmio: bool) -> bool {
        !(self.is_stopping() || (mmio && self.virtio.pending()))
    }

    /// Whether its vCPUs must leave their pCPUs: it has ended or restarts.
    pub fn is_stopping(&self) -> bool {
        self.has_ended() || self.resetting.load(Ordering::Acquire)
    }

    /// How many times it has restarted.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Acquire)
    }

    /// Why it ended, once it has.
    pub fn end_reason(&self) -> Option<VmEnd> {
        self.end.lock().clone()
    }

    /// The platform counter when it was created or last (re)started.
    pub fn started_at(&self) -> u64 {
        self.started_at.load(Ordering::Acquire)
    }
}

/// What a VM is made of, for [`Hypervisor::add_vm`].
pub struct VmParts<B: Backend> {
    pub name: String,
    pub arch: B::VmState,
    /// Its emulated devices on their MMIO regions.
    pub bus: Bus,
    /// Its virtio devices (their transports are on `bus` too).
    pub virtio: crate::dev::virtio::set::VmVirtio,
    /// The VM's statistics block (the arch may hand clones to per-vCPU
    /// state that counts into it, e.g. the FP engine's accounting).
    pub stats: Arc<Stats>,
    /// Register files of the vCPUs, index order.
    pub vcpus: Vec<B::VcpuState>,
    /// pCPUs each vCPU may run on (same for all), cut to the online ones.
    pub affinity: CpuMask,
    /// Pin vCPU i to the i-th CPU of `affinity` instead of sharing all of it.
    pub pinned: bool,
    /// vCPUs that start running at once (the boot vCPU); the others wait for power-on.
    pub started: usize,
    /// What a reset request does.
    pub on_reboot: OnReboot,
    /// The PV IPI feature is offered to the guest (config `pv_ipi`).
    pub pv_ipi: bool,
    /// arm64 stolen time is offered, its records there (config `pv_time`).
    pub pv_time: Option<PvTimeRegion>,
}

/// Events the run loop reports, for the log and for tests.
pub trait Observer: Sync {
    fn vm_ended(&self, vm: &str, why: &VmEnd);
    /// `vm` restarted after a reset request, for the `n`-th time.
    fn vm_restarted(&self, vm: &str, n: u64) {
        let _ = (vm, n);
    }
    /// `vm` was started again from the console after it had ended.
    fn vm_started(&self, vm: &str) {
        let _ = vm;
    }
    fn all_ended(&self);
}

/// All VMs, the scheduler, and the run loop.
pub struct Hypervisor<B: Backend> {
    pub backend: B,
    pub sched: Scheduler,
    online: CpuMask,
    vms: Mutex<Vec<Arc<Vm<B>>>>,
    /// The VMs once creation is over ([`Hypervisor::publish`]).
    published: Once<Vec<Arc<Vm<B>>>>,
    /// Done once the last VM has ended and the observer was told. A
    /// `Once`, so a pCPU that finds the work over while another one is
    /// still telling the observer waits for it: the boot pCPU powers off
    /// as soon as its run loop returns, and the report must be out by then.
    finished: Once<()>,
    /// vCPU entries (loads), for statistics.
    pub loads: AtomicU64,
    /// Some VM has an operation the console asked for.
    requests: AtomicBool,
    /// A lower bound of every vCPU's deadlines ([`DeadlineBound`]).
    deadline_bound: Arc<DeadlineBound>,
}

impl<B: Backend> Hypervisor<B> {
    pub fn new(backend: B, online: CpuMask) -> Self {
        Hypervisor {
            backend,
            sched: Scheduler::new(online),
            online,
            vms: Mutex::new(Vec::new()),
            published: Once::new(),
            finished: Once::new(),
            loads: AtomicU64::new(0),
            requests: AtomicBool::new(false),
            deadline_bound: Arc::new(DeadlineBound::new()),
        }
    }

    /// Registers a VM and its vCPUs with the scheduler.
    pub fn add_vm(&self, parts: VmParts<B>) -> Result<Arc<Vm<B>>, SchedError> {
        let mut vms = self.vms.lock();
        let slot = vms.len() as u16;
        let cpus: Vec<usize> = parts.affinity.iter().collect();
        if cpus.is_empty() {
            return Err(SchedError::EmptyAffinity);
        }
        let vcpus: Vec<Vcpu<B>> = parts
            .vcpus
            .into_iter()
            .enumerate()
            .map(|(index, ctx)| Vcpu {
                index,
                key: VcpuKey {
                    vm: slot,
                    vcpu: index as u16,
                },
                ctx: Mutex::new(ctx),
                stats: Stats::new(),
                deadlines: Deadlines::new(Arc::clone(&self.deadline_bound)),
                steal: VcpuSteal::new(),
            })
            .collect();
        for v in &vcpus {
            let mask = if parts.pinned {
                CpuMask::single(cpus[v.index % cpus.len()])
            } else {
                parts.affinity
            };
            self.sched.add(v.key, mask, v.index < parts.started)?;
        }
        let vm = Arc::new(Vm {
            slot,
            name: parts.name,
            vmid: VmVmid::new(),
            stats: parts.stats,
            arch: parts.arch,
            bus: parts.bus,
            virtio: parts.virtio,
            vcpus,
            on_reboot: parts.on_reboot,
            pv_ipi: parts.pv_ipi,
            pv_time: parts.pv_time,
            started: parts.started,
            ended: AtomicBool::new(false),
            reported: AtomicBool::new(false),
            end: Mutex::new(None),
            resetting: AtomicBool::new(false),
            rebuild: PendingRebuild::new(),
            restarts: AtomicU64::new(0),
            request: AtomicU8::new(0),
            started_at: AtomicU64::new(self.backend.now()),
            device_work_after: AtomicU64::new(0),
        });
        vms.push(Arc::clone(&vm));
        Ok(vm)
    }

    /// The VM in `slot`.
    pub fn vm(&self, slot: u16) -> Option<Arc<Vm<B>>> {
        self.vms.lock().get(slot as usize).cloned()
    }

    /// Every VM, in slot order.
    pub fn vms(&self) -> Vec<Arc<Vm<B>>> {
        self.vms.lock().clone()
    }

    /// Ends VM creation: the VMs added so far become [`Hypervisor::created`].
    pub fn publish(&self) {
        self.published.call_once(|| self.vms());
    }

    /// The VMs, once published (no lock, no allocation: usable anywhere;
    /// empty before).
    pub fn created(&self) -> &[Arc<Vm<B>>] {
        self.published.get().map_or(&[], |v| v.as_slice())
    }

    /// Looks at the deadlines of the vCPUs that are not loaded: each one
    /// passed at `now` goes to [`Backend::deadline_passed`], and a vCPU it
    /// says must wake is woken (counted as a timer exit of its VM).
    #[inline]
    pub fn check_timers(&self, cpu: usize, now: u64) {
        // The test is inline: in the common case (no deadline has passed)
        // an exit that looks pays no call and no register saves.
        if now >= self.deadline_bound.get() {
            self.wake_passed(cpu, now);
        }
    }

    /// [`Self::check_timers`] once some deadline may have passed.
    #[inline(never)]
    fn wake_passed(&self, cpu: usize, now: u64) {
        for vm in self.created() {
            if vm.has_ended() {
                continue;
            }
            for vcpu in &vm.vcpus {
                let mut wake = false;
                for which in 0..DEADLINES {
                    if vcpu.deadlines.take_passed(which, now) {
                        wake |= self.backend.deadline_passed(vm, vcpu.index, which);
                    }
                }
                if wake {
                    vm.stats.exit(ExitReason::Timer);
                    self.wake(vcpu.key, cpu);
                }
            }
        }
    }

    /// The earliest deadline of a vCPU that is not loaded, of the VMs that
    /// have not ended (`u64::MAX`: none).
    pub fn next_deadline(&self) -> u64 {
        self.created()
            .iter()
            .filter(|vm| !vm.has_ended())
            .flat_map(|vm| vm.vcpus.iter())
            .map(|v| v.deadlines.earliest())
            .min()
            .unwrap_or(u64::MAX)
    }

    /// A counter value no later than [`Hypervisor::next_deadline`] (a
    /// pCPU's timer armed for it misses no vCPU's deadline), at `now`: the
    /// [`DeadlineBound`], recomputed from the deadlines only when it has
    /// passed. An exit's path: one load, unless a deadline was due.
    pub fn deadline_bound(&self, now: u64) -> u64 {
        self.deadline_bound.at(now, || self.next_deadline())
    }

    /// An interrupt is pending for `key`: wake it and kick whoever must notice.
    pub fn wake(&self, key: VcpuKey, from: usize) {
        if let Ok(Kick::Cpu(c)) = self.sched.wake(key, from, self.backend.now()) {
            self.backend.kick(c);
        }
    }

    /// Powers on vCPU `index` of `vm` (after the backend set its entry state).
    pub fn power_on(&self, vm: &Vm<B>, index: usize, from: usize) -> Result<(), SchedError> {
        let key = VcpuKey {
            vm: vm.slot,
            vcpu: index as u16,
        };
        if let Kick::Cpu(c) = self.sched.power_on(key, from)? {
            self.backend.kick(c);
        }
        Ok(())
    }

    /// Whether vCPU `index` of `vm` is on (not offline or stopped).
    pub fn vcpu_is_on(&self, vm: &Vm<B>, index: usize) -> bool {
        let key = VcpuKey {
            vm: vm.slot,
            vcpu: index as u16,
        };
        matches!(
            self.sched.state(key),
            Some(RunState::Runnable | RunState::Running(_) | RunState::Blocked)
        )
    }

    /// Ends `vm` for `why`: its vCPUs stop, pCPUs running them are kicked.
    pub fn end_vm(&self, vm: &Vm<B>, why: VmEnd, from: usize, observer: &dyn Observer) {
        if vm.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        // Under the lock a restart finishes under: a restart that has not
        // seen `ended` is complete before its vCPUs are stopped here.
        let mut end = vm.end.lock();
        *end = Some(why.clone());
        let running = self.sched.stop_vm(vm.slot);
        drop(end);
        for c in running.iter().filter(|&c| c != from) {
            self.backend.kick(c);
        }
        observer.vm_ended(&vm.name, &why);
        vm.reported.store(true, Ordering::Release);
        if self.all_ended() {
            // Idle pCPUs must notice that the work is over.
            for c in self.online.iter().filter(|&c| c != from) {
                self.backend.kick(c);
            }
        }
    }

    /// A reset request from a vCPU of `vm` on `cpu`: with `on_reboot =
    /// "restart"` the VM's vCPUs are stopped on every pCPU (those running
    /// one are kicked) and the restart is posted: the pCPU that puts the
    /// VM's last vCPU completes it ([`Hypervisor::complete_rebuild`]), and
    /// nobody waits for that. `true` says no pCPU held one, so the caller
    /// completes it once it holds no vCPU of the VM (it never does while
    /// it runs one of them: its own put is then the one). A VM that ended
    /// meanwhile, or that restarts already, is left alone (`false`). With
    /// "stop", or a backend that cannot restart, the VM ends (`false`).
    pub fn begin_restart(&self, vm: &Vm<B>, cpu: usize, observer: &dyn Observer) -> bool {
        if vm.on_reboot == OnReboot::Stop || !self.backend.can_restart() {
            self.end_vm(vm, VmEnd::Reset, cpu, observer);
            return false;
        }
        self.stop_for_restart(vm, cpu, observer)
    }

    /// [`Hypervisor::begin_restart`] whatever the VM's `on_reboot` says.
    fn stop_for_restart(&self, vm: &Vm<B>, cpu: usize, observer: &dyn Observer) -> bool {
        let end = vm.end.lock();
        if vm.has_ended() || vm.resetting.swap(true, Ordering::AcqRel) {
            return false;
        }
        let running = self.sched.stop_vm(vm.slot);
        drop(end);
        for c in running.iter().filter(|&c| c != cpu) {
            self.backend.kick(c);
        }
        match vm.rebuild.post(&self.sched, vm.slot, Rebuild::Restart) {
            Ok(now) => now,
            // Not reached: `resetting` keeps a second restart out, a start
            // needs the VM ended, and its vCPUs were just stopped.
            Err(e) => {
                vm.resetting.store(false, Ordering::Release);
                self.end_vm(
                    vm,
                    VmEnd::Fatal(format!("restart refused: {e:?}")),
                    cpu,
                    observer,
                );
                false
            }
        }
    }

    /// Completes the rebuild `vm` waits for, on `cpu`, which the scheduler
    /// named for it (its put let go of the VM's last vCPU, or it posted the
    /// rebuild when no pCPU held one) and which holds no vCPU of the VM.
    /// Its time counts as a step of the VM's restart
    /// ([`Stats::note_step`]).
    fn complete_rebuild(&self, vm: &Vm<B>, cpu: usize, observer: &dyn Observer) {
        let t = self.backend.now();
        match vm.rebuild.pending() {
            Some(Rebuild::Restart) => self.finish_restart(vm, cpu, observer),
            Some(Rebuild::Start) => self.finish_start(vm, cpu, observer),
            None => return,
        }
        vm.stats.note_step(self.backend.now().saturating_sub(t));
    }

    /// Finishes the restart [`Hypervisor::begin_restart`] began, on `cpu`
    /// (no pCPU holds a vCPU of the VM any more): has the backend rebuild
    /// the VM, clears its deadlines and VMID, and starts its vCPUs as at
    /// creation, unless it ended meanwhile. A failed rebuild ends it.
    fn finish_restart(&self, vm: &Vm<B>, cpu: usize, observer: &dyn Observer) {
        let mut ctxs: Vec<_> = vm.vcpus.iter().map(|v| v.ctx.lock()).collect();
        let rebuilt = self.backend.restart_vm(vm, &mut ctxs);
        drop(ctxs);
        for v in &vm.vcpus {
            v.deadlines.clear();
            v.steal.reset();
        }
        vm.vmid.invalidate();
        if let Err(e) = rebuilt {
            vm.rebuild.done();
            vm.resetting.store(false, Ordering::Release);
            self.end_vm(
                vm,
                VmEnd::Fatal(format!("restart failed: {e}")),
                cpu,
                observer,
            );
            return;
        }
        let end = vm.end.lock();
        if vm.has_ended() {
            vm.rebuild.done();
            vm.resetting.store(false, Ordering::Release);
            return;
        }
        let n = vm.restarts.fetch_add(1, Ordering::AcqRel) + 1;
        vm.started_at.store(self.backend.now(), Ordering::Release);
        drop(end);
        // Reported before any vCPU may run (and while a new restart is
        // still refused): restart n+1 cannot be reported before this one,
        // however long this pCPU takes (a pCPU thread of the host tests
        // descheduled here once let seven more restarts overtake it).
        observer.vm_restarted(&vm.name, n);
        let end = vm.end.lock();
        // Done before `resetting` is cleared and any vCPU may run: the
        // next reset can post its restart at once.
        vm.rebuild.done();
        vm.resetting.store(false, Ordering::Release);
        if vm.has_ended() {
            return;
        }
        let kick = self.sched.restart_vm(vm.slot, vm.started, cpu);
        drop(end);
        if let Ok(Kick::Cpu(c)) = kick {
            self.backend.kick(c);
        }
    }

    /// Whether every VM has ended and its end has been reported.
    pub fn all_ended(&self) -> bool {
        let vms = self.vms.lock();
        !vms.is_empty() && vms.iter().all(|vm| vm.reported.load(Ordering::Acquire))
    }

    /// Whether the work is over: every VM has ended, and none was stopped
    /// from the console (such a VM may be started again: kestrel stays up).
    fn work_done(&self) -> bool {
        self.all_ended()
            && !self
                .vms
                .lock()
                .iter()
                .any(|vm| vm.end_reason() == Some(VmEnd::Stopped))
    }

    /// What `vm` is doing now.
    pub fn vm_state(&self, vm: &Vm<B>) -> VmState {
        if vm.resetting.load(Ordering::Acquire) {
            return VmState::Restarting;
        }
        if vm.has_ended() {
            return VmState::Stopped;
        }
        let busy = vm.vcpus.iter().any(|v| {
            matches!(
                self.sched.state(v.key),
                Some(RunState::Runnable | RunState::Running(_))
            )
        });
        if busy {
            VmState::Running
        } else {
            VmState::Blocked
        }
    }

    /// Asks for `op` on the VM in `slot` (the console's stop, restart and
    /// start). The next pCPU between two vCPUs carries it out
    /// ([`Hypervisor::run_cpu`]). An error says why it cannot be done.
    pub fn request(&self, slot: usize, op: Op) -> Result<(), &'static str> {
        let vm = self.created().get(slot).ok_or("no such VM")?;
        match op {
            Op::Stop if vm.has_ended() => return Err("it is stopped already"),
            Op::Restart if vm.has_ended() => return Err("it is stopped (start it instead)"),
            Op::Start if !vm.has_ended() => return Err("it runs already"),
            Op::Restart | Op::Start if !self.backend.can_restart() => {
                return Err("this backend cannot rebuild a VM")
            }
            Op::Start if vm.resetting.load(Ordering::Acquire) => {
                return Err("its restart is under way")
            }
            Op::Restart | Op::Start if vm.rebuild.pending().is_some() => {
                return Err("an operation on it is under way")
            }
            _ => {}
        }
        if vm
            .request
            .compare_exchange(0, op_code(op), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err("an operation on it is under way");
        }
        self.requests.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the run loop has nothing to do before `vm`'s loaded vCPU
    /// enters again: the VM is not stopping, no console operation waits,
    /// no device work waits (the looks of the loop below between two
    /// entries; a tick's end of the slice aside, which the backend knows).
    /// A backend may then re-enter after an interrupt exit without
    /// returning here.
    #[inline]
    pub fn nothing_between_entries(&self, vm: &Vm<B>) -> bool {
        !vm.is_stopping() && !self.requests.load(Ordering::Relaxed) && !vm.virtio.pending()
    }

    /// Carries out the operations the console asked for (on `cpu`, which
    /// holds no vCPU).
    fn serve_requests(&self, cpu: usize, observer: &dyn Observer) {
        if !self.requests.swap(false, Ordering::AcqRel) {
            return;
        }
        for vm in self.created() {
            match vm.request.swap(0, Ordering::AcqRel) {
                1 => self.end_vm(vm, VmEnd::Stopped, cpu, observer),
                2 if self.stop_for_restart(vm, cpu, observer) => {
                    self.complete_rebuild(vm, cpu, observer)
                }
                3 => self.start_again(vm, cpu, observer),
                _ => {}
            }
        }
    }

    /// Starts `vm`, which has ended, again as at creation: the backend
    /// rebuilds it from its packed images ([`Backend::restart_vm`]) once no
    /// pCPU holds one of its vCPUs (stopped at its end): now, or at the put
    /// of the last one, on that pCPU ([`Hypervisor::complete_rebuild`]).
    fn start_again(&self, vm: &Vm<B>, cpu: usize, observer: &dyn Observer) {
        let end = vm.end.lock();
        if !vm.has_ended() {
            return;
        }
        if end.is_none() {
            // Its end is under way (its vCPUs are being stopped): ask again.
            drop(end);
            let _ = vm.request.compare_exchange(
                0,
                op_code(Op::Start),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            self.requests.store(true, Ordering::Release);
            return;
        }
        let posted = vm.rebuild.post(&self.sched, vm.slot, Rebuild::Start);
        drop(end);
        match posted {
            Ok(true) => self.finish_start(vm, cpu, observer),
            // The pCPU that puts its last vCPU starts it; or a rebuild is
            // under way already.
            Ok(false) | Err(PostError::Busy) => {}
            Err(e) => log::error!("VM \"{}\" cannot start again: {e:?}", vm.name),
        }
    }

    /// Finishes [`Hypervisor::start_again`] on `cpu` (no pCPU holds a vCPU
    /// of the VM).
    fn finish_start(&self, vm: &Vm<B>, cpu: usize, observer: &dyn Observer) {
        let mut ctxs: Vec<_> = vm.vcpus.iter().map(|v| v.ctx.lock()).collect();
        let rebuilt = self.backend.restart_vm(vm, &mut ctxs);
        drop(ctxs);
        for v in &vm.vcpus {
            v.deadlines.clear();
            v.steal.reset();
        }
        vm.vmid.invalidate();
        if let Err(e) = rebuilt {
            vm.rebuild.done();
            log::error!("VM \"{}\" cannot start again: {e}", vm.name);
            return;
        }
        let mut end = vm.end.lock();
        *end = None;
        vm.reported.store(false, Ordering::Release);
        vm.ended.store(false, Ordering::Release);
        vm.rebuild.done();
        let kick = self.sched.restart_vm(vm.slot, vm.started, cpu);
        vm.started_at.store(self.backend.now(), Ordering::Release);
        drop(end);
        observer.vm_started(&vm.name);
        if let Ok(Kick::Cpu(c)) = kick {
            self.backend.kick(c);
        }
    }

    /// How the run ended: `Success` when every VM powered itself off.
    pub fn exit_status(&self) -> ExitStatus {
        let vms = self.vms.lock();
        if vms
            .iter()
            .all(|vm| matches!(vm.end_reason(), Some(VmEnd::PowerOff | VmEnd::Stopped)))
        {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        }
    }

    /// The run loop of pCPU `cpu`. Returns once every VM has ended.
    pub fn run_cpu(&self, cpu: usize, observer: &dyn Observer) {
        loop {
            self.serve_requests(cpu, observer);
            if self.work_done() {
                self.finished.call_once(|| observer.all_ended());
                return;
            }
            let Some(picked) = self.sched.pick_run(cpu, self.backend.now()) else {
                self.backend.idle(self, cpu);
                continue;
            };
            let key = picked.key;
            let Some(vm) = self.vm(key.vm) else { continue };
            let vcpu = &vm.vcpus[key.vcpu as usize];
            let mut ctx = vcpu.ctx.lock();
            // Its stolen time up to now, for the backend's load to report.
            vcpu.steal.set_delay(picked.run_delay);
            self.loads.fetch_add(1, Ordering::Relaxed);
            self.backend.load(cpu, &vm, vcpu, &mut ctx);
            self.backend.slice_start(cpu);
            let mut rebuild_now = false;
            let why = loop {
                if vm.is_stopping() || self.requests.load(Ordering::Relaxed) {
                    break PutReason::Preempted;
                }
                // Device work a notification left: one budget before an
                // entry, in this VM's own time, and no more than half of it
                // (`device_work_after`).
                if vm.virtio.pending() {
                    let t = self.backend.now();
                    if t >= vm.device_work_after.load(Ordering::Relaxed) {
                        B::device_work(self, &vm, cpu);
                        let end = self.backend.now();
                        let spent = end.saturating_sub(t);
                        vm.stats.note_exit(spent, crate::vcpu::stats::what::DEVICES);
                        vm.device_work_after
                            .store(end.saturating_add(spent), Ordering::Relaxed);
                    }
                }
                match self
                    .backend
                    .run(&mut ExitCtx::new(self, &vm, cpu, vcpu), &mut ctx)
                {
                    // A vCPU waiting for its devices' work keeps running
                    // (its wait ends early, as a WFI may): the work goes on
                    // at its entries, within its slice.
                    RunExit::Block if vm.virtio.pending() => {
                        if self.backend.slice_expired(cpu) {
                            if self.sched.slice_end(cpu, self.backend.now()) {
                                break PutReason::Preempted;
                            }
                            self.backend.slice_start(cpu);
                        }
                    }
                    RunExit::Continue => {
                        if self.backend.slice_expired(cpu) {
                            if self.sched.slice_end(cpu, self.backend.now()) {
                                break PutReason::Preempted;
                            }
                            self.backend.slice_start(cpu);
                        }
                    }
                    RunExit::Block => break PutReason::Blocked,
                    RunExit::Yield => break PutReason::Yield,
                    RunExit::CpuOff => break PutReason::Offline,
                    RunExit::VmEnd(VmEnd::Reset) => {
                        let t = self.backend.now();
                        rebuild_now = self.begin_restart(&vm, cpu, observer);
                        vm.stats.note_step(self.backend.now().saturating_sub(t));
                        break PutReason::Preempted;
                    }
                    RunExit::VmEnd(end) => {
                        self.end_vm(&vm, end, cpu, observer);
                        break PutReason::Preempted;
                    }
                }
            };
            self.backend.put(cpu, &vm, vcpu, &mut ctx);
            drop(ctx);
            // Errors here mean the VM was stopped meanwhile: nothing to do.
            let put = self.sched.put_vcpu(cpu, key, why, self.backend.now());
            // This put let go of the last vCPU of a VM whose restart (or
            // start) waits for that: this pCPU completes it, now.
            if rebuild_now || put.is_ok_and(|p| p.released) {
                self.complete_rebuild(&vm, cpu, observer);
            }
            // A VM whose every vCPU turned itself off has ended too (not
            // one that a stop or restart took them from).
            if put.map(|p| p.state) == Ok(RunState::Offline) && !self.sched.vm_alive(vm.slot) {
                self.end_vm(&vm, VmEnd::PowerOff, cpu, observer);
            }
        }
    }
}

#[cfg(test)]
mod tests;
