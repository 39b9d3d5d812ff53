//! The vCPU scheduler: which vCPU each physical CPU runs next.
//!
//! One decision-making structure for both architectures, free of registers so
//! it runs under `cargo test`. The arch's per-pCPU run loop asks it what to
//! run ([`Scheduler::pick`]), tells it why a vCPU stopped running
//! ([`Scheduler::put`]), and asks it whom to kick when an interrupt is made
//! pending for a vCPU ([`Scheduler::wake`]).
//!
//! Policy: round robin with a time slice, per-pCPU run queues, and work
//! stealing within each vCPU's affinity mask. A pinned vCPU has a one-CPU
//! mask and so never moves. One lock guards the whole structure: with at most
//! [`crate::MAX_CPUS`] pCPUs the critical sections are a few dozen
//! instructions, and one lock makes the state machine easy to reason about.
//!
//! Each vCPU is in exactly one state:
//!
//! ```text
//!            power_on            pick               put(Blocked)
//!  Offline ───────────▶ Runnable ─────▶ Running(c) ───────────▶ Blocked
//!     ▲                    ▲  ▲            │  │                   │
//!     │  put(Offline)      │  └────────────┘  │ put(Preempted)    │ wake
//!     └────────────────────┼──────────────────┘                   │
//!                          └──────────────────────────────────────┘
//!  any state ── stop_vm ──▶ Stopped (the vCPU is taken off its pCPU at the next exit)
//! ```
//!
//! A wake that arrives while the vCPU runs is remembered (`wake_pending`), so
//! a `put(Blocked)` racing with it leaves the vCPU runnable: no lost wake-ups.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use spin::Mutex;

use crate::MAX_CPUS;

/// A set of physical CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuMask(pub u64);

impl CpuMask {
    pub const fn single(cpu: usize) -> Self {
        CpuMask(1 << cpu)
    }

    /// CPUs `0..n`.
    pub const fn first(n: usize) -> Self {
        if n >= 64 {
            CpuMask(u64::MAX)
        } else {
            CpuMask((1u64 << n) - 1)
        }
    }

    pub const fn contains(self, cpu: usize) -> bool {
        cpu < 64 && self.0 & (1 << cpu) != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub const fn and(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 & other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..64).filter(move |&c| self.contains(c))
    }
}

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
    /// Its time slice ended, or it yielded: back in the queue.
    Preempted,
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
}

struct Inner {
    entries: Vec<Entry>,
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
}

/// The scheduler. See the module documentation.
pub struct Scheduler {
    inner: Mutex<Inner>,
}

/// What [`Scheduler::wake`] asks the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kick {
    /// Nothing: the vCPU was already runnable, or will see the interrupt at its next entry.
    None,
    /// Send a physical IPI to this pCPU (it is idle with new work, or runs the vCPU).
    Cpu(usize),
}

impl Scheduler {
    /// A scheduler for the pCPUs in `online`.
    pub fn new(online: CpuMask) -> Self {
        Scheduler {
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                queues: (0..MAX_CPUS).map(|_| VecDeque::new()).collect(),
                online: online.and(CpuMask::first(MAX_CPUS)),
                idle: CpuMask::default(),
                steals: 0,
                switches: 0,
                last_run: [None; MAX_CPUS],
            }),
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
        s.entries.push(Entry {
            key,
            affinity,
            state: RunState::Offline,
            home,
            wake_pending: false,
        });
        if start {
            s.make_runnable(idx);
        }
        Ok(())
    }

    /// The state of `key`.
    pub fn state(&self, key: VcpuKey) -> Option<RunState> {
        let s = self.inner.lock();
        s.find(key).map(|i| s.entries[i].state)
    }

    /// Takes the next vCPU for `cpu`: from its own queue first, else stolen
    /// from the longest queue whose head may run here. `None` marks `cpu`
    /// idle, so a later wake of work it could run kicks it.
    pub fn pick(&self, cpu: usize) -> Option<VcpuKey> {
        let mut s = self.inner.lock();
        let found = s
            .queues
            .get_mut(cpu)
            .and_then(|q| q.pop_front())
            .or_else(|| s.steal(cpu));
        match found {
            Some(i) => {
                s.idle.0 &= !(1 << cpu);
                let e = &mut s.entries[i];
                e.state = RunState::Running(cpu);
                e.home = cpu;
                e.wake_pending = false;
                let key = e.key;
                if s.last_run[cpu] != Some(i) {
                    s.switches += 1;
                }
                s.last_run[cpu] = Some(i);
                Some(key)
            }
            None => {
                if cpu < MAX_CPUS {
                    s.idle.0 |= 1 << cpu;
                }
                None
            }
        }
    }

    /// `cpu` stops running `key` for `why`.
    pub fn put(&self, cpu: usize, key: VcpuKey, why: PutReason) -> Result<RunState, SchedError> {
        let mut s = self.inner.lock();
        let i = s.find(key).ok_or(SchedError::NoSuchVcpu)?;
        match s.entries[i].state {
            RunState::Running(c) if c == cpu => {}
            // stop_vm got there first: it stays stopped.
            RunState::Stopped => return Ok(RunState::Stopped),
            _ => return Err(SchedError::NotRunningHere),
        }
        let wake = core::mem::take(&mut s.entries[i].wake_pending);
        match why {
            PutReason::Preempted => {
                s.make_runnable(i);
            }
            PutReason::Blocked if wake => {
                s.make_runnable(i);
            }
            PutReason::Blocked => s.entries[i].state = RunState::Blocked,
            PutReason::Offline => s.entries[i].state = RunState::Offline,
        }
        Ok(s.entries[i].state)
    }

    /// An interrupt became pending for `key`: make it runnable if it waits,
    /// and say which pCPU to kick so the interrupt is taken promptly.
    /// `from` is the calling pCPU (never kicked: it will notice by itself).
    pub fn wake(&self, key: VcpuKey, from: usize) -> Result<Kick, SchedError> {
        let mut s = self.inner.lock();
        let i = s.find(key).ok_or(SchedError::NoSuchVcpu)?;
        let kick = match s.entries[i].state {
            RunState::Blocked => {
                let cpu = s.make_runnable(i);
                if s.idle.contains(cpu) && cpu != from {
                    Kick::Cpu(cpu)
                } else {
                    Kick::None
                }
            }
            RunState::Running(c) => {
                s.entries[i].wake_pending = true;
                if c != from {
                    Kick::Cpu(c)
                } else {
                    Kick::None
                }
            }
            RunState::Runnable | RunState::Offline | RunState::Stopped => Kick::None,
        };
        Ok(kick)
    }

    /// PSCI CPU_ON: an offline vCPU becomes runnable. Returns the pCPU to
    /// kick if it is idle.
    pub fn power_on(&self, key: VcpuKey, from: usize) -> Result<Kick, SchedError> {
        let mut s = self.inner.lock();
        let i = s.find(key).ok_or(SchedError::NoSuchVcpu)?;
        match s.entries[i].state {
            RunState::Offline => {
                let cpu = s.make_runnable(i);
                Ok(if s.idle.contains(cpu) && cpu != from {
                    Kick::Cpu(cpu)
                } else {
                    Kick::None
                })
            }
            other => Err(SchedError::WrongState(other)),
        }
    }

    /// Whether `cpu` should give up its current vCPU at the end of a slice:
    /// some other vCPU waits that may run here.
    pub fn should_preempt(&self, cpu: usize) -> bool {
        let s = self.inner.lock();
        s.queues.get(cpu).is_some_and(|q| !q.is_empty()) || s.stealable(cpu).is_some()
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
        self.entries.iter().position(|e| e.key == key)
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
    /// one in its mask. Returns that pCPU.
    fn make_runnable(&mut self, i: usize) -> usize {
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
        let e = &mut self.entries[i];
        e.state = RunState::Runnable;
        e.home = cpu;
        e.wake_pending = false;
        self.queues[cpu].push_back(i);
        cpu
    }

    /// A queue position another pCPU holds that `cpu` may take.
    fn stealable(&self, cpu: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None; // (queue len, victim cpu, position)
        for (victim, q) in self.queues.iter().enumerate() {
            if victim == cpu {
                continue;
            }
            if let Some(pos) = q
                .iter()
                .position(|&i| self.entries[i].affinity.contains(cpu))
            {
                if best.is_none_or(|(len, _, _)| q.len() > len) {
                    best = Some((q.len(), victim, pos));
                }
            }
        }
        best.map(|(_, v, p)| (v, p))
    }

    fn steal(&mut self, cpu: usize) -> Option<usize> {
        let (victim, pos) = self.stealable(cpu)?;
        self.steals += 1;
        self.queues[victim].remove(pos)
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
            let k = s.pick(0).unwrap();
            order.push(k.vcpu);
            s.put(0, k, PutReason::Preempted).unwrap();
        }
        assert_eq!(order, [0, 1, 2, 0, 1, 2]);
        assert_eq!(s.counters().0, 6, "every pick switched vCPU");
    }

    #[test]
    fn offline_vcpu_waits_for_power_on() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::first(2), true).unwrap();
        s.add(key(0, 1), CpuMask::first(2), false).unwrap();
        let boot = s.pick(0).unwrap();
        assert_eq!(boot, key(0, 0));
        assert_eq!(s.pick(1), None, "secondary is offline");
        assert_eq!(
            s.power_on(key(0, 1), 0).unwrap(),
            Kick::Cpu(1),
            "cpu1 idles: kick it"
        );
        assert_eq!(s.pick(1), Some(key(0, 1)));
        assert_eq!(
            s.power_on(key(0, 1), 0),
            Err(SchedError::WrongState(RunState::Running(1)))
        );
        assert_eq!(s.power_on(key(9, 9), 0), Err(SchedError::NoSuchVcpu));
    }

    #[test]
    fn blocked_vcpu_runs_again_only_after_wake() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        let k = s.pick(0).unwrap();
        assert_eq!(s.put(0, k, PutReason::Blocked).unwrap(), RunState::Blocked);
        assert_eq!(s.pick(0), None);
        // The pCPU is idle; a wake from another CPU (1) must kick it.
        assert_eq!(s.wake(k, 1).unwrap(), Kick::Cpu(0));
        assert_eq!(s.pick(0), Some(k));
    }

    #[test]
    fn wake_while_running_is_not_lost() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::single(0), true).unwrap();
        let k = s.pick(0).unwrap();
        // cpu1 sends an interrupt while cpu0 runs the vCPU: kick cpu0.
        assert_eq!(s.wake(k, 1).unwrap(), Kick::Cpu(0));
        // The vCPU executes WFI having not yet seen it: it must stay runnable.
        assert_eq!(s.put(0, k, PutReason::Blocked).unwrap(), RunState::Runnable);
        assert_eq!(s.pick(0), Some(k));
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
            if let Some(k) = s.pick(1) {
                seen_on_1.push(k);
                s.put(1, k, PutReason::Preempted).unwrap();
            }
            if let Some(k) = s.pick(0) {
                assert!(k.vm == 0 || k == key(1, 0));
                s.put(0, k, PutReason::Preempted).unwrap();
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
        let k = s.pick(0).unwrap();
        assert_eq!(
            s.put(1, k, PutReason::Preempted),
            Err(SchedError::NotRunningHere)
        );
        assert_eq!(
            s.put(0, key(3, 3), PutReason::Preempted),
            Err(SchedError::NoSuchVcpu)
        );
    }

    #[test]
    fn stop_vm_takes_its_vcpus_off_and_leaves_others() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0, 0), CpuMask::first(2), true).unwrap();
        s.add(key(0, 1), CpuMask::first(2), true).unwrap();
        s.add(key(1, 0), CpuMask::first(2), true).unwrap();
        let running = s.pick(0).unwrap();
        assert_eq!(running.vm, 0);
        let mask = s.stop_vm(0);
        assert_eq!(
            mask,
            CpuMask::single(0),
            "the pCPU running VM 0 must be kicked"
        );
        assert_eq!(
            s.put(0, running, PutReason::Preempted).unwrap(),
            RunState::Stopped
        );
        assert!(!s.vm_alive(0));
        assert!(s.vm_alive(1));
        assert!(!s.all_stopped());
        for _ in 0..4 {
            if let Some(k) = s.pick(1) {
                assert_eq!(k.vm, 1, "a stopped VM's vCPU was scheduled");
                s.put(1, k, PutReason::Preempted).unwrap();
            }
        }
        s.stop_vm(1);
        assert!(s.all_stopped());
    }

    #[test]
    fn should_preempt_only_when_someone_waits() {
        let s = Scheduler::new(CpuMask::first(1));
        s.add(key(0, 0), CpuMask::first(1), true).unwrap();
        let k = s.pick(0).unwrap();
        assert!(!s.should_preempt(0));
        s.add(key(0, 1), CpuMask::first(1), true).unwrap();
        assert!(s.should_preempt(0));
        s.put(0, k, PutReason::Preempted).unwrap();
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
        for _ in 0..20_000 {
            let cpu = (next() % cpus as u64) as usize;
            match running[cpu] {
                None => {
                    if let Some(k) = s.pick(cpu) {
                        let aff = keys.iter().find(|(kk, _)| *kk == k).unwrap().1;
                        assert!(aff.contains(cpu), "{k:?} on cpu{cpu} outside its affinity");
                        assert!(!running.contains(&Some(k)), "{k:?} on two pCPUs");
                        running[cpu] = Some(k);
                        *runs.entry(k).or_insert(0u32) += 1;
                    }
                }
                Some(k) => {
                    let why = match next() % 3 {
                        0 => PutReason::Blocked,
                        _ => PutReason::Preempted,
                    };
                    s.put(cpu, k, why).unwrap();
                    running[cpu] = None;
                    // Something wakes a random vCPU now and then.
                    let (wk, _) = keys[(next() % keys.len() as u64) as usize];
                    s.wake(wk, cpu).unwrap();
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
