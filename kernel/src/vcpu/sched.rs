//! The vCPU scheduler: which vCPU each physical CPU runs next.
//!
//! One decision-making structure for both architectures, free of registers so
//! it runs under `cargo test`. The arch's per-pCPU run loop asks it what to
//! run ([`Scheduler::pick`]), tells it when a time slice ends
//! ([`Scheduler::slice_end`]) and why a vCPU stopped running
//! ([`Scheduler::put`]), and asks it whom to kick when an interrupt is made
//! pending for a vCPU ([`Scheduler::wake`]).
//!
//! Policy: fair sharing by virtual runtime, as CFS, EEVDF or Xen's credit2
//! do it. Every vCPU has a `vruntime`: the platform counter ticks it has
//! spent on a pCPU, charged at every slice end and every `put` from the
//! `now` the run loop passes in. A pCPU runs the runnable vCPU with the
//! lowest vruntime among its own queue and every other queue's vCPUs whose
//! affinity mask allows it (ties: its own queue first, then queue order), so
//! time is shared across pCPUs, not only within one queue. At the end of a
//! slice the running vCPU is preempted if such a vCPU has a lower vruntime
//! than it. A pinned vCPU has a one-CPU mask and so never moves.
//!
//! A vCPU that was blocked, offline or queued elsewhere must not bank the
//! time it did not run: when it is queued on pCPU `c` (wake, power-on) or
//! taken from another pCPU's queue to run on `c`, its vruntime is raised
//! to at least `c`'s floor minus two slices. The floor of `c` is the lowest
//! vruntime among the vCPUs running or queued there; when there are none,
//! the lowest among all running and runnable vCPUs (kept monotonic, for
//! when nothing runs at all). So a sleeper gets a short head start, not the
//! whole time it slept, and a vCPU moving from a crowded pCPU to one where
//! a pinned vCPU ran alone does not monopolise it. A restarted VM's vCPUs
//! are queued at the floor itself, with no head start, and a vCPU whose VM
//! is stopped while it runs is still charged for that stretch when its
//! pCPU puts it: resetting a VM again and again gains it no time. The
//! slice length is learnt from the charges at slice ends, so the scheduler
//! needs no clock rate; the firmware bounds it by the tick period
//! ([`Scheduler::set_slice`]), so slices that long exits stretched do not
//! stretch every sleeper's head start with them.
//!
//! A vCPU that yields (`put(Yield)`, e.g. arm64 WFE while others wait) is
//! passed over once by the next pick on that pCPU if anyone else may run.
//!
//! Each vCPU's waits in run queues are its stolen time
//! ([`crate::vcpu::steal::RunDelay`]): from a put that leaves it runnable
//! (preempted, yielding, blocked with a wake pending) or a wake (both
//! given the counter value) to the pick that follows, which reports the
//! total ([`Scheduler::pick_run`]). Creation, power-on and restarts queue
//! a vCPU without a time: that wait is not stolen from a running guest.
//!
//! One lock guards the whole structure: with at most [`crate::MAX_CPUS`]
//! pCPUs and a few dozen vCPUs the critical sections are short scans, and
//! one lock makes the state machine easy to reason about.
//!
//! Each vCPU is in exactly one state:
//!
//! ```text
//!            power_on            pick               put(Blocked)
//!  Offline ───────────▶ Runnable ─────▶ Running(c) ───────────▶ Blocked
//!     ▲                    ▲  ▲            │  │                   │
//!     │  put(Offline)      │  └────────────┘  │ put(Preempted/Yield)
//!     └────────────────────┼──────────────────┘                   │ wake
//!                          └──────────────────────────────────────┘
//!  any state ── stop_vm ──▶ Stopped (the vCPU is taken off its pCPU at the next exit)
//! ```
//!
//! A wake that arrives while the vCPU runs is remembered (`wake_pending`), so
//! a `put(Blocked)` racing with it leaves the vCPU runnable: no lost wake-ups.
//!
//! A stopped VM stays on the pCPUs that picked its vCPUs until they put
//! them. Whoever must wait for that (a restart) asks once
//! ([`Scheduler::await_release`]) and the put of the last one says so
//! ([`Put::released`]): nobody polls this lock for it (`vm::rebuild`).

use super::steal::RunDelay;
use crate::base::sync::Mutex;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::MAX_CPUS;

/// How many slices of virtual runtime a vCPU may lag behind a pCPU's floor
/// when it is queued there (a sleeper's head start).
const MAX_LAG_SLICES: u64 = 2;

pub use super::cpuset::CpuMask;

/// Names one vCPU: its VM's slot and its index in that VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VcpuKey {
    pub vm: u16,
    pub vcpu: u16,
}

/// Where a vCPU stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Not started (PSCI CPU_OFF, or a secondary not yet turned on).
    Offline,
    /// Waiting in a run queue.
    Runnable,
    /// On physical CPU `.0`.
    Running(usize),
    /// Waiting for an interrupt (WFI / `idle`).
    Blocked,
    /// Its VM ended; it will never run again.
    Stopped,
}

/// Why a vCPU left its pCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutReason {
    /// Its time slice ended (or its VM is going away): back in the queue.
    Preempted,
    /// It gave the pCPU up (spinning on a lock, WFE): back in the queue,
    /// and the next pick there prefers anyone else.
    Yield,
    /// It waits for an interrupt.
    Blocked,
    /// It turned itself off (PSCI CPU_OFF).
    Offline,
}

/// Errors the scheduler reports to its caller (never guest-triggerable panics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// The key names no registered vCPU.
    NoSuchVcpu,
    /// The affinity mask names no CPU kestrel runs.
    EmptyAffinity,
    /// The vCPU is not in the state the operation needs (e.g. CPU_ON of a running vCPU).
    WrongState(RunState),
    /// A vCPU was put back by a CPU that was not running it.
    NotRunningHere,
}

#[derive(Debug)]
struct Entry {
    key: VcpuKey,
    affinity: CpuMask,
    state: RunState,
    /// The pCPU it last ran on (or was queued on): preferred for cache warmth.
    home: usize,
    /// A wake arrived while it was running.
    wake_pending: bool,
    /// Counter ticks it has run (see the module documentation).
    vruntime: u64,
    /// While it runs: the counter value its runtime was last charged up to.
    charged_to: u64,
    /// The pCPU that picked it and has not put it yet (kept when
    /// [`Scheduler::stop_vm`] marks it stopped, so a restart can wait for
    /// every pCPU to let go of it).
    on_cpu: Option<usize>,
    /// Someone waits for its VM to be off every pCPU
    /// ([`Scheduler::await_release`]); set on every vCPU of the VM.
    awaited: bool,
    /// Its waits in run queues: stolen time ([`crate::vcpu::steal`]).
    delay: RunDelay,
}

struct Inner {
    entries: Vec<Entry>,
    /// Per VM slot, per vCPU: its index in `entries` (entries are only
    /// ever added), so that a wake finds its vCPU without a walk over every
    /// vCPU under the lock.
    by_key: Vec<Vec<Option<usize>>>,
    queues: Vec<VecDeque<usize>>,
    /// pCPUs kestrel runs vCPUs on.
    online: CpuMask,
    /// pCPUs sitting idle (nothing to run): a wake that queues work there kicks them.
    idle: CpuMask,
    /// Picks that took a vCPU from another pCPU's queue.
    steals: u64,
    /// vCPU switches: picks of a vCPU other than the pCPU's previous one.
    switches: u64,
    last_run: [Option<usize>; MAX_CPUS],
    /// The lowest vruntime of the running and runnable vCPUs, last seen
    /// (monotonic): the floor of a pCPU nobody runs or waits on.
    global_floor: u64,
    /// Per pCPU: the vCPU that yielded it, passed over by its next pick.
    yielder: [Option<usize>; MAX_CPUS],
    /// Average slice length in counter ticks, learnt at slice ends.
    slice: u64,
    /// The configured slice length ([`Scheduler::set_slice`]; 0: not
    /// known): no charge counts for more than this in `slice`.
    slice_max: u64,
}

/// The scheduler. See the module documentation.
pub struct Scheduler {
    inner: Mutex<Inner>,
}

/// What [`Scheduler::put_vcpu`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Put {
    /// The vCPU's state now.
    pub state: RunState,
    /// This put let go of the last vCPU of a stopped VM that someone waits
    /// for ([`Scheduler::await_release`]): the caller carries on that wait's
    /// work (said once per wait).
    pub released: bool,
}

/// What [`Scheduler::pick_run`] picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Picked {
    pub key: VcpuKey,
    /// Counter ticks the vCPU has waited in run queues so far: from each
    /// put that left it runnable (preempted, yielding) or wake, to the
    /// pick that followed ([`crate::vcpu::steal::RunDelay`]).
    pub run_delay: u64,
}

/// What [`Scheduler::wake`] asks the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kick {
    /// Nothing: the vCPU was already runnable, or will see the interrupt at its next entry.
    None,
    /// Send a physical IPI to this pCPU (it is idle with new work, or runs the vCPU).
    Cpu(usize),
}

/// What [`Scheduler::wake_quiet`] found, for the caller to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuietWake {
    /// Nothing to do: runnable already, offline, stopped, or running on
    /// the caller's own pCPU.
    None,
    /// It was blocked and is queued on this idle pCPU now: send it a
    /// physical IPI (that is the wake).
    Idle(usize),
    /// It runs on this pCPU (not the caller's); the wake is remembered,
    /// so it cannot block past it. A kick makes it see its interrupt.
    Running(usize),
}

/// A runnable vCPU a pCPU may take: which queue, where in it, which entry.
#[derive(Clone, Copy)]
struct Candidate {
    queue: usize,
    pos: usize,
    entry: usize,
}

impl Scheduler {
    /// A scheduler for the pCPUs in `online`.
    pub fn new(online: CpuMask) -> Self {
        Scheduler {
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                by_key: Vec::new(),
                queues: (0..MAX_CPUS).map(|_| VecDeque::new()).collect(),
                online: online.and(CpuMask::first(MAX_CPUS)),
                idle: CpuMask::default(),
                steals: 0,
                switches: 0,
                last_run: [None; MAX_CPUS],
                global_floor: 0,
                yielder: [None; MAX_CPUS],
                slice: 0,
                slice_max: 0,
            }),
        }
    }

    /// The configured slice length in counter ticks (kestrel's tick
    /// period; 0: not known): the learnt slice length, and with it the
    /// head start a sleeper gets ([`MAX_LAG_SLICES`] slices), is never
    /// longer, however long the slices that a long exit ended were.
    pub fn set_slice(&self, ticks: u64) {
        let mut s = self.inner.lock();
        s.slice_max = ticks;
        if ticks > 0 {
            s.slice = s.slice.min(ticks);
        }
    }

    /// Registers a vCPU, runnable at once (`start`) or offline until
    /// [`Scheduler::power_on`]. Its affinity is cut to the online pCPUs.
    pub fn add(&self, key: VcpuKey, affinity: CpuMask, start: bool) -> Result<(), SchedError> {
        let mut s = self.inner.lock();
        let affinity = affinity.and(s.online);
        if affinity.is_empty() {
            return Err(SchedError::EmptyAffinity);
        }
        if s.find(key).is_some() {
            return Err(SchedError::WrongState(RunState::Runnable));
        }
        let home = s.least_loaded(affinity);
        let idx = s.entries.len();
        let (vm, vcpu) = (usize::from(key.vm), usize::from(key.vcpu));
        if s.by_key.len() <= vm {
            s.by_key.resize_with(vm + 1, Vec::new);
        }
        if s.by_key[vm].len() <= vcpu {
            s.by_key[vm].resize(vcpu + 1, None);
        }
        s.by_key[vm][vcpu] = Some(idx);
        s.entries.push(Entry {
            key,
            affinity,
            state: RunState::Offline,
            home,
            wake_pending: false,
            vruntime: 0,
            charged_to: 0,
            on_cpu: None,
            awaited: false,
            delay: RunDelay::new(),
        });
        // Each queue this vCPU may wait on can hold every vCPU from now on:
        // a queue allocated at its first use (32 bytes at 4 entries) would
        // raise the heap's floor whenever a vCPU first waits on a new pCPU,
        // which the reboot cases would take for a leak (issue 22, item 6:
        // a 32-byte rise after 146 restarts).
        let n = s.entries.len();
        for c in affinity.iter() {
            let q = &mut s.queues[c];
            if q.capacity() < n {
                q.reserve_exact(n - q.len());
            }
        }
        if start {
            s.make_runnable(idx, None);
        }
        Ok(())
    }

    /// The state of `key`.
    pub fn state(&self, key: VcpuKey) -> Option<RunState> {
        let s = self.inner.lock();
        s.find(key).map(|i| s.entries[i].state)
    }

    /// The pCPUs `key` may run on.
    pub fn affinity(&self, key: VcpuKey) -> Option<CpuMask> {
        let s = self.inner.lock();
        s.find(key).map(|i| s.entries[i].affinity)
    }

    /// The virtual runtime of `key` (counter ticks, charged up to its last
    /// slice end or put).
    pub fn vruntime(&self, key: VcpuKey) -> Option<u64> {
        let s = self.inner.lock();
        s.find(key).map(|i| s.entries[i].vruntime)
    }

    /// Takes the next vCPU for `cpu` at counter value `now`: the lowest
    /// vruntime among its own queue and the vCPUs of other queues that may
    /// run here. `None` marks `cpu` idle, so a later wake of work it could
    /// run kicks it.
    pub fn pick(&self, cpu: usize, now: u64) -> Option<VcpuKey> {
        self.pick_run(cpu, now).map(|p| p.key)
    }

    /// [`Scheduler::pick`], also saying how long the vCPU has waited in
    /// run queues so far ([`Picked::run_delay`]: its stolen time).
    pub fn pick_run(&self, cpu: usize, now: u64) -> Option<Picked> {
        let mut s = self.inner.lock();
        if cpu >= MAX_CPUS {
            return None;
        }
        let skip = s.yielder[cpu].take();
        let best = s.best(cpu, skip).or_else(|| s.best(cpu, None));
        let Some(c) = best else {
            s.idle.0 |= 1 << cpu;
            return None;
        };
        s.queues[c.queue].remove(c.pos);
        let i = c.entry;
        if c.queue != cpu {
            s.steals += 1;
            // Moving here: no more than the allowed lag behind this pCPU.
            s.clamp(i, cpu);
        }
        s.idle.0 &= !(1 << cpu);
        let e = &mut s.entries[i];
        e.state = RunState::Running(cpu);
        e.on_cpu = Some(cpu);
        e.home = cpu;
        e.wake_pending = false;
        e.charged_to = now;
        let run_delay = e.delay.picked(now);
        let key = e.key;
        if s.last_run[cpu] != Some(i) {
            s.switches += 1;
        }
        s.last_run[cpu] = Some(i);
        Some(Picked { key, run_delay })
    }

    /// The time slice of the vCPU running on `cpu` ended at counter value
    /// `now`: charges its runtime and says whether to preempt it, that is
    /// whether a vCPU that may run here has a lower vruntime.
    pub fn slice_end(&self, cpu: usize, now: u64) -> bool {
        let mut s = self.inner.lock();
        let Some(i) = s.running_on(cpu) else {
            return false;
        };
        let ran = s.charge(i, now);
        // A slice that ended after a long exit (a restart's rebuild, a
        // long MMIO emulation) ran longer than a slice: it is charged in
        // full, but counts as one slice in the estimate, which sets every
        // sleeper's head start.
        let ran = match s.slice_max {
            0 => ran,
            max => ran.min(max),
        };
        s.slice = if s.slice == 0 {
            ran
        } else {
            s.slice - s.slice / 8 + ran / 8
        };
        s.update_global_floor();
        let mine = s.entries[i].vruntime;
        let lowest = s.best(cpu, None).map(|c| s.entries[c.entry].vruntime);
        lowest.is_some_and(|l| l < mine)
    }

    /// `cpu` stops running `key` at counter value `now`, for `why`.
    pub fn put(
        &self,
        cpu: usize,
        key: VcpuKey,
        why: PutReason,
        now: u64,
    ) -> Result<RunState, SchedError> {
        self.put_vcpu(cpu, key, why, now).map(|p| p.state)
    }

    /// [`Scheduler::put`], also saying whether this put released a VM
    /// someone waits for ([`Put::released`], [`Scheduler::await_release`]).
    pub fn put_vcpu(
        &self,
        cpu: usize,
        key: VcpuKey,
        why: PutReason,
        now: u64,
    ) -> Result<Put, SchedError> {
        let mut s = self.inner.lock();
        let i = s.find(key).ok_or(SchedError::NoSuchVcpu)?;
        let held_here = s.entries[i].on_cpu == Some(cpu);
        if held_here {
            s.entries[i].on_cpu = None;
        }
        match s.entries[i].state {
            RunState::Running(c) if c == cpu => {}
            // stop_vm got there first: it stays stopped, charged for the
            // time it ran here like any vCPU (a vCPU that stops its own VM,
            // by a reset, is not let off its last stretch).
            RunState::Stopped => {
                if held_here {
                    s.charge(i, now);
                }
                let released = held_here && s.release(key.vm);
                return Ok(Put {
                    state: RunState::Stopped,
                    released,
                });
            }
            _ => return Err(SchedError::NotRunningHere),
        }
        s.charge(i, now);
        let wake = core::mem::take(&mut s.entries[i].wake_pending);
        match why {
            PutReason::Preempted => {
                s.make_runnable(i, Some(now));
            }
            PutReason::Yield => {
                s.make_runnable(i, Some(now));
                s.yielder[cpu] = Some(i);
            }
            PutReason::Blocked if wake => {
                s.make_runnable(i, Some(now));
            }
            PutReason::Blocked => s.entries[i].state = RunState::Blocked,
            PutReason::Offline => s.entries[i].state = RunState::Offline,
        }
        Ok(Put {
            state: s.entries[i].state,
            released: false,
        })
    }
    /// An interrupt became pending for `key`: make it runnable if it waits,
    /// and say which pCPU to kick so the interrupt is taken promptly.
    /// `from` is the calling pCPU (never kicked: it will notice by itself);
    /// `now` the counter value, from which a woken vCPU waits (its stolen
    /// time until a pCPU picks it).
    pub fn wake(&self, key: VcpuKey, from: usize, now: u64) -> Result<Kick, SchedError> {
        Ok(match self.wake_quiet(key, from, now)? {
            QuietWake::None => Kick::None,
            QuietWake::Idle(c) | QuietWake::Running(c) => Kick::Cpu(c),
        })
    }

    /// As [`wake`](Self::wake), but telling a running vCPU's pCPU apart
    /// from a blocked vCPU's idle one: the wake is remembered either way (a
    /// vCPU about to block stays runnable), the idle pCPU is to be sent the
    /// wake, and the running one is the caller's to kick if it must (the PV
    /// IPI router does, to count its kicks). One look under the lock.
    pub fn wake_quiet(&self, key: VcpuKey, from: usize, now: u64) -> Result<QuietWake, SchedError> {
        let mut s = self.inner.lock();
        let i = s.find(key).ok_or(SchedError::NoSuchVcpu)?;
        Ok(match s.entries[i].state {
            RunState::Blocked => {
                let cpu = s.make_runnable(i, Some(now));
                if s.idle.contains(cpu) && cpu != from {
                    QuietWake::Idle(cpu)
                } else {
                    QuietWake::None
                }
            }
            RunState::Running(c) => {
                s.entries[i].wake_pending = true;
                if c != from {
                    QuietWake::Running(c)
                } else {
                    QuietWake::None
                }
            }
            RunState::Runnable | RunState::Offline | RunState::Stopped => QuietWake::None,
        })
    }

    /// PSCI CPU_ON: an offline vCPU becomes runnable. Returns the pCPU to
    /// kick if it is idle.
    pub fn power_on(&self, key: VcpuKey, from: usize) -> Result<Kick, SchedError> {
        let mut s = self.inner.lock();
        let i = s.find(key).ok_or(SchedError::NoSuchVcpu)?;
        match s.entries[i].state {
            RunState::Offline => {
                let cpu = s.make_runnable(i, None);
                Ok(if s.idle.contains(cpu) && cpu != from {
                    Kick::Cpu(cpu)
                } else {
                    Kick::None
                })
            }
            other => Err(SchedError::WrongState(other)),
        }
    }

    /// Whether another vCPU waits that may run on `cpu`: whether giving it
    /// up ([`PutReason::Yield`]) would let someone else run.
    pub fn should_preempt(&self, cpu: usize) -> bool {
        let s = self.inner.lock();
        s.best(cpu, None).is_some()
    }

    /// Stops every vCPU of VM `vm`. Returns the pCPUs running one of them:
    /// the caller kicks them so they drop it at once.
    pub fn stop_vm(&self, vm: u16) -> CpuMask {
        let mut s = self.inner.lock();
        let mut running = CpuMask::default();
        let victims: Vec<usize> = (0..s.entries.len())
            .filter(|&i| s.entries[i].key.vm == vm)
            .collect();
        for &i in &victims {
            if let RunState::Running(c) = s.entries[i].state {
                running.0 |= 1 << c;
            }
            s.entries[i].state = RunState::Stopped;
        }
        for q in s.queues.iter_mut() {
            q.retain(|i| !victims.contains(i));
        }
        running
    }

    /// Waits, without waiting, for no pCPU to hold a vCPU of `vm`, whose
    /// vCPUs [`Scheduler::stop_vm`] stopped: `Ok(true)` if none holds one
    /// now (the caller goes on at once); `Ok(false)` if some pCPU does:
    /// then the put that lets go of the last one says so
    /// ([`Put::released`]), exactly once, and the caller must leave what
    /// follows to that pCPU. The decision and the release are made under
    /// the scheduler's lock, so exactly one of the two goes on. Refused if
    /// a vCPU of `vm` is not stopped (it could be picked meanwhile) or a
    /// wait for `vm` is already under way.
    pub fn await_release(&self, vm: u16) -> Result<bool, SchedError> {
        let mut s = self.inner.lock();
        let mut any = false;
        let mut held = false;
        for e in s.entries.iter().filter(|e| e.key.vm == vm) {
            if e.state != RunState::Stopped || e.awaited {
                return Err(SchedError::WrongState(e.state));
            }
            any = true;
            held |= e.on_cpu.is_some();
        }
        if !any {
            return Err(SchedError::NoSuchVcpu);
        }
        if held {
            for e in s.entries.iter_mut().filter(|e| e.key.vm == vm) {
                e.awaited = true;
            }
        }
        Ok(!held)
    }

    /// The pCPUs still holding a vCPU of `vm` (picked, not yet put), even
    /// if [`Scheduler::stop_vm`] stopped it (diagnostics: a restart asks
    /// [`Scheduler::await_release`] instead of looking again and again).
    pub fn vm_on_cpus(&self, vm: u16) -> CpuMask {
        let s = self.inner.lock();
        let mut m = CpuMask::default();
        for c in s.entries.iter().filter(|e| e.key.vm == vm) {
            if let Some(cpu) = c.on_cpu {
                m.0 |= 1 << cpu;
            }
        }
        m
    }

    /// Starts the stopped VM `vm` again, as [`Scheduler::add`] did: its
    /// first `started` vCPUs runnable, the others offline until powered
    /// on. A restarted vCPU keeps its vruntime, raised to the floor of the
    /// pCPU it is queued on: it gets no sleeper's head start (a VM that
    /// resets itself again and again gains no time by it). Refused unless
    /// every vCPU of `vm` is stopped and on no pCPU. Returns the pCPU to
    /// kick if one was queued on an idle pCPU.
    pub fn restart_vm(&self, vm: u16, started: usize, from: usize) -> Result<Kick, SchedError> {
        let mut s = self.inner.lock();
        let mine: Vec<usize> = (0..s.entries.len())
            .filter(|&i| s.entries[i].key.vm == vm)
            .collect();
        if mine.is_empty() {
            return Err(SchedError::NoSuchVcpu);
        }
        for &i in &mine {
            let e = &s.entries[i];
            if e.state != RunState::Stopped || e.on_cpu.is_some() {
                return Err(SchedError::WrongState(e.state));
            }
        }
        let mut kick = Kick::None;
        for &i in &mine {
            let e = &mut s.entries[i];
            e.state = RunState::Offline;
            e.wake_pending = false;
            if usize::from(e.key.vcpu) < started {
                let cpu = s.queue(i, 0, None);
                if s.idle.contains(cpu) && cpu != from {
                    kick = Kick::Cpu(cpu);
                }
            }
        }
        for y in s.yielder.iter_mut() {
            if y.is_some_and(|y| mine.contains(&y)) {
                *y = None;
            }
        }
        Ok(kick)
    }

    /// Whether any vCPU of `vm` can still run (not all stopped or offline).
    pub fn vm_alive(&self, vm: u16) -> bool {
        let s = self.inner.lock();
        s.entries
            .iter()
            .any(|e| e.key.vm == vm && !matches!(e.state, RunState::Stopped | RunState::Offline))
    }

    /// Whether every registered vCPU has stopped.
    pub fn all_stopped(&self) -> bool {
        let s = self.inner.lock();
        s.entries.iter().all(|e| e.state == RunState::Stopped)
    }

    /// (vCPU switches, picks that stole from another pCPU's queue).
    pub fn counters(&self) -> (u64, u64) {
        let s = self.inner.lock();
        (s.switches, s.steals)
    }
}

impl Inner {
    fn find(&self, key: VcpuKey) -> Option<usize> {
        let i = (*self
            .by_key
            .get(usize::from(key.vm))?
            .get(usize::from(key.vcpu))?)?;
        debug_assert!(self.entries[i].key == key);
        Some(i)
    }

    /// After a put of a stopped vCPU of `vm`: whether that put let go of
    /// the last vCPU of `vm` a pCPU held while someone waits for that
    /// ([`Scheduler::await_release`]). Ends the wait.
    fn release(&mut self, vm: u16) -> bool {
        let mine = || self.entries.iter().filter(|e| e.key.vm == vm);
        if mine().any(|e| e.on_cpu.is_some()) || !mine().any(|e| e.awaited) {
            return false;
        }
        for e in self.entries.iter_mut().filter(|e| e.key.vm == vm) {
            e.awaited = false;
        }
        true
    }

    /// The online pCPU in `mask` with the shortest queue (lowest id on ties).
    fn least_loaded(&self, mask: CpuMask) -> usize {
        mask.and(self.online)
            .iter()
            .filter(|&c| c < MAX_CPUS)
            .min_by_key(|&c| self.queues[c].len())
            .unwrap_or(0)
    }

    /// Queues entry `i` on its home pCPU if allowed, else the least loaded
    /// one in its mask, no more than the allowed lag behind that pCPU's
    /// floor. Returns that pCPU.
    fn make_runnable(&mut self, i: usize, now: Option<u64>) -> usize {
        self.queue(i, MAX_LAG_SLICES, now)
    }

    /// [`Inner::make_runnable`], no more than `lag_slices` slices behind
    /// the floor.
    fn queue(&mut self, i: usize, lag_slices: u64, now: Option<u64>) -> usize {
        let e = &self.entries[i];
        let cpu = if e.affinity.contains(e.home)
            && !self.idle.is_empty()
            && !self.idle.contains(e.home)
        {
            // Home is busy while another allowed pCPU idles: go there.
            let idle_ok = self.idle.and(e.affinity);
            if idle_ok.is_empty() {
                e.home
            } else {
                idle_ok.iter().next().unwrap_or(e.home)
            }
        } else if e.affinity.contains(e.home) {
            e.home
        } else {
            self.least_loaded(e.affinity)
        };
        self.clamp_to(i, cpu, lag_slices);
        let e = &mut self.entries[i];
        e.state = RunState::Runnable;
        e.home = cpu;
        e.wake_pending = false;
        e.delay.queued(now);
        self.queues[cpu].push_back(i);
        cpu
    }

    /// Raises entry `i`'s vruntime to no less than `cpu`'s floor minus the
    /// allowed lag: time spent blocked, offline or elsewhere is not banked.
    fn clamp(&mut self, i: usize, cpu: usize) {
        self.clamp_to(i, cpu, MAX_LAG_SLICES);
    }

    /// [`Inner::clamp`] with a lag of `lag_slices` slices.
    fn clamp_to(&mut self, i: usize, cpu: usize, lag_slices: u64) {
        let lag = self.slice.saturating_mul(lag_slices);
        let least = self.floor(cpu, i).saturating_sub(lag);
        let e = &mut self.entries[i];
        e.vruntime = e.vruntime.max(least);
    }

    /// The lowest vruntime among the vCPUs other than `except` running on
    /// or queued on `cpu`; without any, the global floor.
    fn floor(&mut self, cpu: usize, except: usize) -> u64 {
        let running = self.running_on(cpu).filter(|&r| r != except);
        let local = self.queues[cpu]
            .iter()
            .copied()
            .chain(running)
            .filter(|&j| j != except)
            .map(|j| self.entries[j].vruntime)
            .min();
        match local {
            Some(v) => v,
            None => {
                self.update_global_floor();
                self.global_floor
            }
        }
    }

    /// Raises the global floor to the lowest vruntime of the running and
    /// runnable vCPUs, if any.
    fn update_global_floor(&mut self) {
        let lowest = self
            .entries
            .iter()
            .filter(|e| matches!(e.state, RunState::Running(_) | RunState::Runnable))
            .map(|e| e.vruntime)
            .min();
        if let Some(v) = lowest {
            self.global_floor = self.global_floor.max(v);
        }
    }

    /// Adds the counter ticks entry `i` ran since it was last charged;
    /// returns them. A counter that went backwards charges nothing.
    fn charge(&mut self, i: usize, now: u64) -> u64 {
        let e = &mut self.entries[i];
        let ran = now.saturating_sub(e.charged_to);
        e.vruntime = e.vruntime.saturating_add(ran);
        e.charged_to = e.charged_to.max(now);
        ran
    }

    /// The entry running on `cpu`, if any.
    fn running_on(&self, cpu: usize) -> Option<usize> {
        let i = (*self.last_run.get(cpu)?)?;
        (self.entries[i].state == RunState::Running(cpu)).then_some(i)
    }

    /// The runnable vCPU `cpu` should take: the lowest vruntime among its
    /// own queue and the other queues' vCPUs whose affinity allows `cpu`
    /// (ties: own queue first, then queue order), passing over `skip`.
    fn best(&self, cpu: usize, skip: Option<usize>) -> Option<Candidate> {
        if cpu >= MAX_CPUS {
            return None;
        }
        let order = core::iter::once(cpu).chain((0..self.queues.len()).filter(move |&q| q != cpu));
        let mut best: Option<(u64, Candidate)> = None;
        for queue in order {
            for (pos, &entry) in self.queues[queue].iter().enumerate() {
                let e = &self.entries[entry];
                if Some(entry) == skip || !e.affinity.contains(cpu) {
                    continue;
                }
                if best.is_none_or(|(v, _)| e.vruntime < v) {
                    best = Some((e.vruntime, Candidate { queue, pos, entry }));
                }
            }
        }
        best.map(|(_, c)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(vm: u16, vcpu: u16) -> VcpuKey {
        VcpuKey { vm, vcpu }
    }

    #[test]
    fn round_robin_on_one_cpu() {
        let s = Scheduler::new(CpuMask::first(1));
        for v in 0..3 {
            s.add(key(0, v), CpuMask::first(1), true).unwrap();
        }
        let mut order = Vec::new();
        for _ in 0..6 {
            let k = s.pick(0, 0).unwrap();
            order.push(k.vcpu);
            s.put(0, k, PutReason::Preempted, 0).unwrap();
        }
        assert_eq!(order, [0, 1, 2, 0, 1, 2]);
        assert_eq!(s.counters().0, 6, "every pick switched vCPU");
    }

    /// Issue 22 item 6: a run queue was allocated the first time a vCPU
    /// waited on its pCPU, at any point of a run (the reboot case saw the
    /// heap's floor rise by 32 bytes at restart 146). Every queue a vCPU
    /// may wait on holds all vCPUs from `add` on, so none grows later.
    #[test]
    fn run_queues_never_grow_after_add() {
        let s = Scheduler::new(CpuMask::first(4));
        for v in 0..6 {
            s.add(key(0, v), CpuMask::first(4), v == 0).unwrap();
        }
        let caps = |s: &Scheduler| -> Vec<usize> {
            s.inner.lock().queues.iter().map(|q| q.capacity()).collect()
        };
        let before = caps(&s);
        assert!(before[..4].iter().all(|&c| c >= 6), "{before:?}");
        // Every vCPU runnable, moved across every pCPU, stopped, restarted.
        for v in 1..6 {
            s.power_on(key(0, v), 0).unwrap();
        }
        for round in 0..50u64 {
            for cpu in 0..4 {
                if let Some(k) = s.pick(cpu, round) {
                    s.put(cpu, k, PutReason::Preempted, round).unwrap();
                }
            }
        }
        let _ = s.stop_vm(0);
        let _ = s.restart_vm(0, 1, 0);
        assert_eq!(caps(&s), before);
    }

    /// The lookup by key (an index by VM slot and vCPU, not a walk): keys
    /// added out of order, with VM slots and vCPU numbers left out, each
    /// find their own entry; the gaps and keys past the ends are no vCPU;
    /// a key added twice is refused.
    #[test]
    fn every_key_finds_its_own_entry_and_gaps_find_none() {
        let s = Scheduler::new(CpuMask::first(2));
        let added = [key(5, 2), key(0, 0), key(5, 0), key(2, 7), key(0, 1)];
        for (i, &k) in added.iter().enumerate() {
            // Every second one starts, so the states tell entries apart.
            s.add(k, CpuMask::first(2), i % 2 == 0).unwrap();
        }
        for (i, &k) in added.iter().enumerate() {
            let want = if i % 2 == 0 {
                RunState::Runnable
            } else {
                RunState::Offline
            };
            assert_eq!(s.state(k), Some(want), "{k:?}");
        }
        for k in [
            key(5, 1),
            key(2, 0),
            key(1, 0),
            key(0, 2),
            key(6, 0),
            key(2, 8),
        ] {
            assert_eq!(s.state(k), None, "{k:?}");
            assert_eq!(s.wake(k, 0, 0), Err(SchedError::NoSuchVcpu), "{k:?}");
        }
        assert_eq!(
            s.add(key(2, 7), CpuMask::first(2), true),
            Err(SchedError::WrongState(RunState::Runnable))
        );
        // The offline one at slot 2, vCPU 7 powers on; the other stays off.
        s.power_on(key(2, 7), 1).unwrap();
        assert_eq!(s.state(key(2, 7)), Some(RunState::Runnable));
        assert_eq!(s.state(key(0, 0)), Some(RunState::Offline));
    }

    #[test]
    fn offline_vcpu_waits_for_power_on() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::first(2), true).unwrap();
        s.add(key(0, 1), CpuMask::first(2), false).unwrap();
        let boot = s.pick(0, 0).unwrap();
        assert_eq!(boot, key(0, 0));
        assert_eq!(s.pick(1, 0), None, "secondary is offline");
        assert_eq!(
            s.power_on(key(0, 1), 0).unwrap(),
            Kick::Cpu(1),
            "cpu1 idles: kick it"
        );
        assert_eq!(s.pick(1, 0), Some(key(0, 1)));
        assert_eq!(
            s.power_on(key(0, 1), 0),
            Err(SchedError::WrongState(RunState::Running(1)))
        );
        assert_eq!(s.power_on(key(9, 9), 0), Err(SchedError::NoSuchVcpu));
    }

    #[test]
    fn a_stopped_vm_restarts_once_no_pcpu_holds_its_vcpus() {
        let s = Scheduler::new(CpuMask::first(2));
        for v in 0..3 {
            s.add(key(0, v), CpuMask::first(2), v == 0).unwrap();
        }
        // Another VM's vCPU, untouched by VM 0's restart.
        s.add(key(1, 0), CpuMask::first(2), false).unwrap();
        let a = s.pick(0, 0).unwrap();
        assert_eq!(a, key(0, 0));
        s.power_on(key(0, 1), 0).unwrap();
        let b = s.pick(1, 0).unwrap();
        assert_eq!(b, key(0, 1));
        s.power_on(key(0, 2), 0).unwrap();
        // Not stopped yet: no restart.
        assert!(matches!(
            s.restart_vm(0, 1, 0),
            Err(SchedError::WrongState(_))
        ));
        assert_eq!(s.stop_vm(0), CpuMask(0b11));
        // Both pCPUs still hold a vCPU of VM 0 until they put it.
        assert_eq!(s.vm_on_cpus(0), CpuMask(0b11));
        assert_eq!(
            s.restart_vm(0, 1, 0),
            Err(SchedError::WrongState(RunState::Stopped))
        );
        assert_eq!(
            s.put(0, a, PutReason::Preempted, 1).unwrap(),
            RunState::Stopped
        );
        assert_eq!(s.vm_on_cpus(0), CpuMask(0b10));
        assert!(s.restart_vm(0, 1, 0).is_err());
        assert_eq!(
            s.put(1, b, PutReason::Offline, 1).unwrap(),
            RunState::Stopped
        );
        assert_eq!(s.vm_on_cpus(0), CpuMask::default());
        s.restart_vm(0, 1, 0).unwrap();
        // As at creation: vCPU 0 runnable, the others off.
        assert_eq!(s.state(key(0, 0)), Some(RunState::Runnable));
        assert_eq!(s.state(key(0, 1)), Some(RunState::Offline));
        assert_eq!(s.state(key(0, 2)), Some(RunState::Offline));
        assert_eq!(s.state(key(1, 0)), Some(RunState::Offline));
        assert!(s.vm_alive(0));
        let got = [s.pick(0, 2), s.pick(1, 2)];
        assert!(got.contains(&Some(key(0, 0))) && got.contains(&None));
        s.power_on(key(0, 1), 0).unwrap();
        assert_eq!(s.restart_vm(7, 1, 0), Err(SchedError::NoSuchVcpu));
    }

    /// A vCPU whose VM is stopped while it runs (its own reset, or another
    /// vCPU's) is charged for the time it ran when its pCPU puts it; a put
    /// that holds nothing charges nothing.
    #[test]
    fn a_vcpu_stopped_while_running_is_charged_at_its_put() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::first(2), true).unwrap();
        let a = s.pick(0, 100).unwrap();
        s.stop_vm(0);
        assert_eq!(
            s.put(0, a, PutReason::Preempted, 350),
            Ok(RunState::Stopped)
        );
        assert_eq!(s.vruntime(a), Some(250));
        assert_eq!(
            s.put(0, a, PutReason::Preempted, 900),
            Ok(RunState::Stopped)
        );
        assert_eq!(s.vruntime(a), Some(250), "charged once");
    }

    /// Slices stretched by long exits are charged in full but do not
    /// stretch the learnt slice length beyond the configured one, and with
    /// it a sleeper's head start.
    #[test]
    fn long_slices_do_not_stretch_a_sleepers_head_start() {
        let run = |max: u64| {
            let s = Scheduler::new(CpuMask::first(1));
            s.set_slice(max);
            s.add(key(0, 0), CpuMask::first(1), true).unwrap();
            s.add(key(1, 0), CpuMask::first(1), true).unwrap();
            let a = s.pick(0, 0).unwrap();
            s.put(0, a, PutReason::Blocked, 0).unwrap();
            let b = s.pick(0, 0).unwrap();
            // Slices of 100 ticks, every fourth one ended by a 10_000-tick exit.
            let mut now = 0;
            for n in 0..400 {
                now += if n % 4 == 3 { 10_000 } else { 100 };
                assert!(!s.slice_end(0, now), "b is alone");
            }
            assert_eq!(s.vruntime(b), Some(now), "charged in full");
            s.put(0, b, PutReason::Preempted, now).unwrap();
            s.wake(a, 0, 0).unwrap();
            now - s.vruntime(a).unwrap()
        };
        assert_eq!(run(100), 200, "two slices of 100 ticks");
        let unbounded = run(0);
        assert!(unbounded > 2000, "without a bound: {unbounded}");
    }

    /// A restarted vCPU is queued at its pCPU's floor, not two slices below
    /// it as a sleeper would be: a reset buys no head start.
    #[test]
    fn a_restart_queues_at_the_floor_without_a_head_start() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        s.add(key(1, 0), CpuMask::first(1), true).unwrap();
        let a = s.pick(0, 0).unwrap();
        assert_eq!(a, key(0, 0));
        s.put(0, a, PutReason::Blocked, 0).unwrap();
        let b = s.pick(0, 0).unwrap();
        let mut now = 0;
        while now < 10_000 {
            now += 100;
            assert!(!s.slice_end(0, now), "b is alone");
        }
        s.put(0, b, PutReason::Preempted, now).unwrap();
        s.stop_vm(0);
        s.restart_vm(0, 1, 0).unwrap();
        assert_eq!(s.vruntime(a), s.vruntime(b), "queued at the floor");
        // A wake, by contrast, gives its two slices.
        let s2 = Scheduler::new(CpuMask::first(1));
        s2.add(a, CpuMask::first(1), true).unwrap();
        s2.add(b, CpuMask::first(1), true).unwrap();
        s2.pick(0, 0).unwrap();
        s2.put(0, a, PutReason::Blocked, 0).unwrap();
        s2.pick(0, 0).unwrap();
        for t in 1..=100 {
            s2.slice_end(0, t * 100);
        }
        s2.put(0, b, PutReason::Preempted, now).unwrap();
        s2.wake(a, 0, 0).unwrap();
        assert_eq!(s2.vruntime(a), Some(now - 200));
    }

    /// A VM whose vCPU resets it at the end of each of its slices, beside a
    /// spinning VM on one pCPU: the resetter gains no time by restarting
    /// (it was never charged for the slice it reset in, and each restart
    /// queued it two slices below the spinner: the spinner starved).
    #[test]
    fn a_vm_resetting_every_slice_gains_no_time() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        s.add(key(1, 0), CpuMask::first(1), true).unwrap();
        let mut ran = std::collections::HashMap::new();
        let mut now = 0;
        while now < 200_000 {
            let k = s.pick(0, now).unwrap();
            if k.vm == 0 {
                now += 100;
                *ran.entry(k.vm).or_insert(0u64) += 100;
                s.stop_vm(0);
                assert_eq!(
                    s.put(0, k, PutReason::Preempted, now),
                    Ok(RunState::Stopped)
                );
                s.restart_vm(0, 1, 0).unwrap();
                continue;
            }
            loop {
                now += 100;
                *ran.entry(k.vm).or_insert(0u64) += 100;
                if s.slice_end(0, now) {
                    break;
                }
            }
            s.put(0, k, PutReason::Preempted, now).unwrap();
        }
        let share = ran[&0] * 1000 / now;
        assert!(
            (450..=550).contains(&share),
            "the resetter got {share}/1000 of the pCPU: {ran:?}"
        );
    }

    #[test]
    fn blocked_vcpu_runs_again_only_after_wake() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        let k = s.pick(0, 0).unwrap();
        assert_eq!(
            s.put(0, k, PutReason::Blocked, 0).unwrap(),
            RunState::Blocked
        );
        assert_eq!(s.pick(0, 0), None);
        // The pCPU is idle; a wake from another CPU (1) must kick it.
        assert_eq!(s.wake(k, 1, 0).unwrap(), Kick::Cpu(0));
        assert_eq!(s.pick(0, 0), Some(k));
    }

    #[test]
    fn quiet_wake_tells_an_idle_pcpu_from_a_running_one_and_is_not_lost() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::single(0), true).unwrap();
        let k = s.pick(0, 0).unwrap();
        // From its own pCPU: nothing to send.
        assert_eq!(s.wake_quiet(k, 0, 0).unwrap(), QuietWake::None);
        // Running on cpu0: named as running, and the wake is remembered.
        assert_eq!(s.wake_quiet(k, 1, 0).unwrap(), QuietWake::Running(0));
        assert_eq!(
            s.put(0, k, PutReason::Blocked, 0).unwrap(),
            RunState::Runnable
        );
        assert_eq!(s.pick(0, 0), Some(k));
        assert_eq!(
            s.put(0, k, PutReason::Blocked, 0).unwrap(),
            RunState::Blocked
        );
        // Blocked with cpu0 idle: the IPI to it is the wake.
        assert_eq!(s.pick(0, 0), None);
        assert_eq!(s.wake_quiet(k, 1, 0).unwrap(), QuietWake::Idle(0));
        assert_eq!(s.pick(0, 0), Some(k));
    }

    #[test]
    fn wake_while_running_is_not_lost() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::single(0), true).unwrap();
        let k = s.pick(0, 0).unwrap();
        // cpu1 sends an interrupt while cpu0 runs the vCPU: kick cpu0.
        assert_eq!(s.wake(k, 1, 0).unwrap(), Kick::Cpu(0));
        // The vCPU executes WFI having not yet seen it: it must stay runnable.
        assert_eq!(
            s.put(0, k, PutReason::Blocked, 0).unwrap(),
            RunState::Runnable
        );
        assert_eq!(s.pick(0, 0), Some(k));
    }

    #[test]
    fn pinned_vcpu_never_moves_and_shared_ones_are_stolen() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::single(0), true).unwrap();
        s.add(key(0, 1), CpuMask::single(0), true).unwrap();
        s.add(key(1, 0), CpuMask::first(2), true).unwrap();
        // cpu1 may take only the shared vCPU, whatever queue holds it.
        let mut seen_on_1 = Vec::new();
        for _ in 0..10 {
            if let Some(k) = s.pick(1, 0) {
                seen_on_1.push(k);
                s.put(1, k, PutReason::Preempted, 0).unwrap();
            }
            if let Some(k) = s.pick(0, 0) {
                assert!(k.vm == 0 || k == key(1, 0));
                s.put(0, k, PutReason::Preempted, 0).unwrap();
            }
        }
        assert!(!seen_on_1.is_empty());
        assert!(seen_on_1.iter().all(|&k| k == key(1, 0)), "{seen_on_1:?}");
    }

    #[test]
    fn empty_affinity_and_put_from_wrong_cpu_are_refused() {
        let s = Scheduler::new(CpuMask::first(2));
        assert_eq!(
            s.add(key(0, 0), CpuMask::single(5), true),
            Err(SchedError::EmptyAffinity)
        );
        s.add(key(0, 0), CpuMask::first(2), true).unwrap();
        let k = s.pick(0, 0).unwrap();
        assert_eq!(
            s.put(1, k, PutReason::Preempted, 0),
            Err(SchedError::NotRunningHere)
        );
        assert_eq!(
            s.put(0, key(3, 3), PutReason::Preempted, 0),
            Err(SchedError::NoSuchVcpu)
        );
    }

    #[test]
    fn stop_vm_takes_its_vcpus_off_and_leaves_others() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::first(2), true).unwrap();
        s.add(key(0, 1), CpuMask::first(2), true).unwrap();
        s.add(key(1, 0), CpuMask::first(2), true).unwrap();
        let running = s.pick(0, 0).unwrap();
        assert_eq!(running.vm, 0);
        let mask = s.stop_vm(0);
        assert_eq!(
            mask,
            CpuMask::single(0),
            "the pCPU running VM 0 must be kicked"
        );
        assert_eq!(
            s.put(0, running, PutReason::Preempted, 0).unwrap(),
            RunState::Stopped
        );
        assert!(!s.vm_alive(0));
        assert!(s.vm_alive(1));
        assert!(!s.all_stopped());
        for _ in 0..4 {
            if let Some(k) = s.pick(1, 0) {
                assert_eq!(k.vm, 1, "a stopped VM's vCPU was scheduled");
                s.put(1, k, PutReason::Preempted, 0).unwrap();
            }
        }
        s.stop_vm(1);
        assert!(s.all_stopped());
    }

    #[test]
    fn should_preempt_only_when_someone_waits() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        let k = s.pick(0, 0).unwrap();
        assert!(!s.should_preempt(0));
        s.add(key(0, 1), CpuMask::first(1), true).unwrap();
        assert!(s.should_preempt(0));
        s.put(0, k, PutReason::Preempted, 0).unwrap();
    }

    #[test]
    fn slice_end_preempts_only_for_a_lower_vruntime() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        let a = s.pick(0, 0).unwrap();
        assert!(!s.slice_end(0, 100), "nobody else: keep running");
        assert_eq!(s.vruntime(a), Some(100), "charged up to the slice end");
        s.add(key(0, 1), CpuMask::first(1), true).unwrap();
        assert!(s.slice_end(0, 200), "the newcomer has run less");
        assert_eq!(
            s.put(0, a, PutReason::Preempted, 210),
            Ok(RunState::Runnable)
        );
        assert_eq!(s.vruntime(a), Some(210));
        let b = s.pick(0, 210).unwrap();
        assert_eq!(b, key(0, 1));
        // b runs until it has caught up with a (vruntime 210).
        let mut t = 210;
        while !s.slice_end(0, t + 100) {
            t += 100;
            assert!(t < 2000, "b was never preempted");
        }
        assert!(s.vruntime(b).unwrap() > 210);
        assert!(!s.slice_end(7, 0), "nothing runs on a pCPU out of range");
    }

    #[test]
    fn a_yield_passes_over_the_yielder_once() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        s.add(key(0, 1), CpuMask::first(1), true).unwrap();
        let a = s.pick(0, 0).unwrap();
        s.put(0, a, PutReason::Yield, 0).unwrap();
        let b = s.pick(0, 0).unwrap();
        assert_ne!(a, b, "the yielder was picked again");
        s.put(0, b, PutReason::Yield, 0).unwrap();
        assert_eq!(s.pick(0, 0), Some(a));
        s.put(0, a, PutReason::Blocked, 0).unwrap();
        assert_eq!(s.pick(0, 0), Some(b), "alone, a yielder runs again");
    }

    /// Simulates `cpus` pCPUs from counter value `from` to `to`. Every vCPU in the
    /// scheduler spins (never blocks); slices last 80-120 ticks, ending at
    /// different times on each pCPU. Checks that nothing runs outside its
    /// affinity or on two pCPUs, and returns each vCPU of `affinity`'s share
    /// of one pCPU in thousandths (its run time over `to - from`), measured
    /// by the simulation, not by the scheduler's own accounting. At the end
    /// the running vCPUs are put back (preempted).
    fn spin_shares(
        s: &Scheduler,
        cpus: usize,
        from: u64,
        to: u64,
        affinity: &std::collections::HashMap<VcpuKey, CpuMask>,
    ) -> std::collections::HashMap<VcpuKey, u64> {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut running: Vec<Option<VcpuKey>> = vec![None; cpus];
        let mut slice_end: Vec<u64> = (0..cpus).map(|c| from + 80 + 10 * c as u64).collect();
        let mut ran = std::collections::HashMap::new();
        for now in from..to {
            for cpu in 0..cpus {
                if let Some(k) = running[cpu] {
                    if now >= slice_end[cpu] {
                        slice_end[cpu] = now + 80 + next() % 41;
                        if s.slice_end(cpu, now) {
                            s.put(cpu, k, PutReason::Preempted, now).unwrap();
                            running[cpu] = None;
                        }
                    }
                }
                if running[cpu].is_none() {
                    running[cpu] = s.pick(cpu, now);
                    if let Some(k) = running[cpu] {
                        assert!(affinity[&k].contains(cpu), "{k:?} ran on cpu{cpu}");
                        assert_eq!(running.iter().filter(|r| **r == Some(k)).count(), 1);
                    }
                }
                if let Some(k) = running[cpu] {
                    *ran.entry(k).or_insert(0u64) += 1;
                }
            }
        }
        for (cpu, k) in running.iter().enumerate() {
            if let Some(k) = k {
                s.put(cpu, *k, PutReason::Preempted, to).unwrap();
            }
        }
        affinity
            .keys()
            .map(|k| (*k, ran.get(k).copied().unwrap_or(0) * 1000 / (to - from)))
            .collect()
    }

    /// Two vCPUs of one VM and a 1-vCPU VM on 2 pCPUs: each gets 2/3 of a
    /// pCPU. (Round robin per queue gave 1/2, 1/2 and 1: the vCPU alone on
    /// its queue was never stolen from.)
    #[test]
    fn three_spinning_vcpus_on_two_pcpus_get_two_thirds_each() {
        let s = Scheduler::new(CpuMask::first(2));
        let mut aff = std::collections::HashMap::new();
        for k in [key(0, 0), key(0, 1), key(1, 0)] {
            s.add(k, CpuMask::first(2), true).unwrap();
            aff.insert(k, CpuMask::first(2));
        }
        let shares = spin_shares(&s, 2, 0, 200_000, &aff);
        for (k, share) in &shares {
            assert!(
                (620..=720).contains(share),
                "{k:?} got {share}/1000 of a pCPU, fair is 667: {shares:?}"
            );
        }
    }

    /// A VM whose 16 vCPUs spin (the boot vCPU powers on the 15 others, as
    /// a guest does) beside a 1-vCPU VM, on 4 pCPUs: everyone gets 4/17.
    #[test]
    fn victim_beside_sixteen_spinners_gets_four_seventeenths() {
        let s = Scheduler::new(CpuMask::first(4));
        let mut aff = std::collections::HashMap::new();
        for v in 0..16 {
            s.add(key(0, v), CpuMask::first(4), v == 0).unwrap();
            aff.insert(key(0, v), CpuMask::first(4));
        }
        s.add(key(1, 0), CpuMask::first(4), true).unwrap();
        aff.insert(key(1, 0), CpuMask::first(4));
        let boot = s.pick(0, 0).unwrap();
        for v in 1..16 {
            s.power_on(key(0, v), 0).unwrap();
        }
        s.put(0, boot, PutReason::Preempted, 0).unwrap();
        let shares = spin_shares(&s, 4, 0, 400_000, &aff);
        let fair = 4000 / 17;
        for (k, share) in &shares {
            assert!(
                share.abs_diff(fair) < fair * 15 / 100,
                "{k:?} got {share}/1000 of a pCPU, fair is {fair}: {shares:?}"
            );
        }
    }

    /// The guest's boot: the boot vCPU of a 16-vCPU VM and a 1-vCPU VM spin
    /// while the 15 secondaries sleep, then the secondaries wake and all
    /// spin. The sleepers must not bank their sleep, and none of them may
    /// come back with more than the others: everyone gets 4/17 at once.
    #[test]
    fn secondaries_waking_after_a_long_boot_share_fairly() {
        let s = Scheduler::new(CpuMask::first(4));
        let mut all = std::collections::HashMap::new();
        for v in 0..16 {
            s.add(key(0, v), CpuMask::first(4), v == 0).unwrap();
            all.insert(key(0, v), CpuMask::first(4));
        }
        s.add(key(1, 0), CpuMask::first(4), true).unwrap();
        all.insert(key(1, 0), CpuMask::first(4));
        for v in 1..16 {
            s.power_on(key(0, v), 0).unwrap();
        }
        // Each secondary runs briefly, then waits for an interrupt.
        let mut asleep = 0;
        for n in 0..1000 {
            let cpu = n % 4;
            if let Some(k) = s.pick(cpu, 0) {
                let secondary = k.vm == 0 && k.vcpu != 0;
                let why = if secondary {
                    asleep += 1;
                    PutReason::Blocked
                } else {
                    PutReason::Preempted
                };
                s.put(cpu, k, why, 0).unwrap();
            }
        }
        assert_eq!(asleep, 15);
        let awake: std::collections::HashMap<_, _> = [key(0, 0), key(1, 0)]
            .into_iter()
            .map(|k| (k, CpuMask::first(4)))
            .collect();
        let boot = spin_shares(&s, 4, 0, 100_000, &awake);
        assert!(boot.values().all(|&v| v > 900), "{boot:?}");
        for v in 1..16 {
            s.wake(key(0, v), 0, 0).unwrap();
        }
        // Measure from the first slices after the wake: one long window
        // would hide a vCPU that starved at first and caught up later.
        let fair = 4000 / 17;
        for window in 0..4u64 {
            let from = 100_000 + window * 25_000;
            let shares = spin_shares(&s, 4, from, from + 25_000, &all);
            for (k, share) in &shares {
                assert!(
                    share.abs_diff(fair) < fair * 30 / 100,
                    "window {window}: {k:?} got {share}/1000, fair is {fair}: {shares:?}"
                );
            }
        }
    }

    /// Pinned vCPUs stay on their pCPU; the unpinned one goes where it is
    /// least crowded, so nobody gets much less than half a pCPU.
    #[test]
    fn pinned_and_free_vcpus_share_fairly() {
        let s = Scheduler::new(CpuMask::first(2));
        let mut aff = std::collections::HashMap::new();
        for (k, m) in [
            (key(0, 0), CpuMask::single(0)),
            (key(0, 1), CpuMask::single(0)),
            (key(1, 0), CpuMask::single(1)),
            (key(2, 0), CpuMask::first(2)),
        ] {
            s.add(k, m, true).unwrap();
            aff.insert(k, m);
        }
        let shares = spin_shares(&s, 2, 0, 200_000, &aff);
        for (k, share) in &shares {
            assert!(*share > 400, "{k:?} got {share}/1000: {shares:?}");
        }
    }

    /// A vCPU that slept while another ran gets a short head start when it
    /// wakes, not the whole time it slept.
    #[test]
    fn a_sleeper_does_not_bank_its_sleep() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        s.add(key(1, 0), CpuMask::first(1), true).unwrap();
        let a = s.pick(0, 0).unwrap();
        s.put(0, a, PutReason::Preempted, 0).unwrap();
        let b = s.pick(0, 0).unwrap();
        s.put(0, b, PutReason::Blocked, 0).unwrap();
        assert_eq!(s.pick(0, 0), Some(a));
        let mut now = 0;
        for _ in 0..1000 {
            now += 100;
            assert!(!s.slice_end(0, now), "a is alone");
        }
        s.wake(b, 0, 0).unwrap();
        let mut slices = std::collections::HashMap::new();
        let mut cur = a;
        for _ in 0..20 {
            now += 100;
            *slices.entry(cur).or_insert(0) += 1;
            if s.slice_end(0, now) {
                s.put(0, cur, PutReason::Preempted, now).unwrap();
                cur = s.pick(0, now).unwrap();
            }
        }
        assert!(slices[&b] >= 8, "the sleeper got too little: {slices:?}");
        assert!(
            slices[&a] >= 8,
            "the sleeper monopolised the pCPU: {slices:?}"
        );
    }

    /// Random schedule over 4 pCPUs: a vCPU never runs on two pCPUs, never
    /// outside its affinity, and every runnable vCPU gets to run.
    #[test]
    fn random_schedule_keeps_invariants() {
        let cpus = 4;
        let s = Scheduler::new(CpuMask::first(cpus));
        let mut keys = Vec::new();
        for vm in 0..3u16 {
            for v in 0..3u16 {
                let aff = if v == 0 {
                    CpuMask::single((vm as usize) % cpus)
                } else {
                    CpuMask::first(cpus)
                };
                s.add(key(vm, v), aff, true).unwrap();
                keys.push((key(vm, v), aff));
            }
        }
        let mut running: [Option<VcpuKey>; 4] = [None; 4];
        let mut runs = std::collections::HashMap::new();
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for now in 0..20_000u64 {
            let cpu = (next() % cpus as u64) as usize;
            match running[cpu] {
                None => {
                    if let Some(k) = s.pick(cpu, now) {
                        let aff = keys.iter().find(|(kk, _)| *kk == k).unwrap().1;
                        assert!(aff.contains(cpu), "{k:?} on cpu{cpu} outside its affinity");
                        assert!(!running.contains(&Some(k)), "{k:?} on two pCPUs");
                        running[cpu] = Some(k);
                        *runs.entry(k).or_insert(0u32) += 1;
                    }
                }
                Some(k) => {
                    if next() % 2 == 0 && !s.slice_end(cpu, now) {
                        continue;
                    }
                    let why = match next() % 4 {
                        0 => PutReason::Blocked,
                        1 => PutReason::Yield,
                        _ => PutReason::Preempted,
                    };
                    s.put(cpu, k, why, now).unwrap();
                    running[cpu] = None;
                    // Something wakes a random vCPU now and then.
                    let (wk, _) = keys[(next() % keys.len() as u64) as usize];
                    s.wake(wk, cpu, 0).unwrap();
                }
            }
        }
        for (k, _) in &keys {
            assert!(
                runs.get(k).copied().unwrap_or(0) > 50,
                "{k:?} starved: {runs:?}"
            );
        }
    }
}
