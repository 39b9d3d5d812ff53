//! Unit tests of the VMID allocator, and an exhaustive interleaving check of
//! the lock-free fast path against rollover (a small model checker: every
//! schedule of the threads' shared-memory steps is run on the real code).

use super::*;
use core::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex as StdMutex};
use std::time::Duration;

fn no_flush() {}

/// Bits the allocator really uses (the `vmid4` feature caps them).
fn eff(bits: u32) -> u32 {
    VmidAllocator::new(bits, 1).bits()
}

#[test]
fn first_load_is_slow_then_fast() {
    let a = VmidAllocator::new(8, 2);
    let vm = VmVmid::new();
    let l = a.vcpu_load(0, &vm, &no_flush);
    assert!(!l.fast);
    assert_eq!(l.vmid, 1);
    assert_eq!(l.id, a.generation() | 1);
    assert_eq!(vm.raw(), l.id);
    a.vcpu_put(0);
    let l2 = a.vcpu_load(0, &vm, &no_flush);
    assert!(l2.fast, "same generation, active non-zero: fast path");
    assert_eq!(l2.id, l.id);
    // Other CPU: its active is 0 (never loaded), so the first load is slow but keeps the id.
    let l3 = a.vcpu_load(1, &vm, &no_flush);
    assert!(!l3.fast);
    assert_eq!(l3.id, l.id);
    assert_eq!(
        a.counters(),
        VmidCounters {
            fast: 1,
            slow: 2,
            rollovers: 0,
            flushes: 0
        }
    );
}

#[test]
fn distinct_vms_get_distinct_nonzero_vmids_until_rollover() {
    let bits = eff(8);
    let a = VmidAllocator::new(bits, 1);
    let vms: Vec<VmVmid> = (0..(1 << bits) - 1).map(|_| VmVmid::new()).collect();
    let mut seen = std::collections::BTreeSet::new();
    for vm in &vms {
        let l = a.vcpu_load(0, vm, &no_flush);
        assert_ne!(l.vmid, 0);
        assert!(seen.insert(l.vmid), "VMID {} handed out twice", l.vmid);
        a.vcpu_put(0);
    }
    assert_eq!(a.counters().rollovers, 0);
    assert_eq!(seen.len(), (1 << bits) - 1);
}

#[test]
fn rollover_flushes_once_and_keeps_running_vms() {
    let a = VmidAllocator::new(2, 2); // indices 1..=3
    let flushes = Cell::new(0);
    let flush = || flushes.set(flushes.get() + 1);
    let (v1, v2, v3, v4) = (VmVmid::new(), VmVmid::new(), VmVmid::new(), VmVmid::new());
    let g1 = a.generation();
    assert_eq!(a.vcpu_load(0, &v1, &flush).vmid, 1); // cpu0 keeps running v1
    assert_eq!(a.vcpu_load(1, &v2, &flush).vmid, 2);
    a.vcpu_put(1);
    assert_eq!(a.vcpu_load(1, &v3, &flush).vmid, 3);
    a.vcpu_put(1);
    // Bitmap full: v4 forces a rollover.
    let l4 = a.vcpu_load(1, &v4, &flush);
    assert_eq!(flushes.get(), 1);
    assert_eq!(a.generation(), g1 + 4);
    assert_eq!(a.counters().rollovers, 1);
    assert_ne!(l4.vmid, 1, "index 1 is reserved: v1 still runs on cpu0");
    assert!(
        l4.flush_local,
        "the rolling CPU's first load after rollover"
    );
    // v1 reloads on cpu0: its index is reserved, so it keeps it in the new generation.
    a.vcpu_put(0);
    let l1 = a.vcpu_load(0, &v1, &flush);
    assert!(!l1.fast, "active was zeroed by the rollover");
    assert!(l1.flush_local);
    assert_eq!(l1.vmid, 1);
    assert_eq!(l1.id, a.generation() | 1);
    assert_eq!(flushes.get(), 1);
}

#[test]
fn put_does_not_pin_an_index_across_rollover() {
    let a = VmidAllocator::new(2, 1);
    let vms: Vec<VmVmid> = (0..4).map(|_| VmVmid::new()).collect();
    for vm in &vms[..3] {
        let _ = a.vcpu_load(0, vm, &no_flush);
        a.vcpu_put(0);
    }
    // Rollover while cpu0 is idle (put): nothing is reserved but index 0.
    let l = a.vcpu_load(0, &vms[3], &no_flush);
    assert_eq!(l.vmid, 1, "all indices were released by vcpu_put");
    a.vcpu_put(0);
    // vms[0] had index 1 in the old generation: it is taken now, so it moves.
    let l0 = a.vcpu_load(0, &vms[0], &no_flush);
    assert_eq!(l0.vmid, 2);
}

#[test]
fn stale_vm_keeps_its_index_if_still_free() {
    let a = VmidAllocator::new(2, 2);
    let (v1, v2, v3, v4) = (VmVmid::new(), VmVmid::new(), VmVmid::new(), VmVmid::new());
    let _ = a.vcpu_load(0, &v1, &no_flush);
    a.vcpu_put(0);
    let _ = a.vcpu_load(0, &v2, &no_flush); // cpu0 keeps v2 (index 2) active
    let _ = a.vcpu_load(1, &v3, &no_flush); // index 3
    a.vcpu_put(1);
    let l4 = a.vcpu_load(1, &v4, &no_flush); // rollover; cpu1 was idle, takes index 1
    assert_eq!(l4.vmid, 1);
    a.vcpu_put(1);
    // v3 (index 3) is stale but index 3 is free in the new generation: kept.
    assert_eq!(a.vcpu_load(1, &v3, &no_flush).vmid, 3);
    // v2 is still running on cpu0 with a reserved index 2: kept too.
    assert_eq!(a.vcpu_load(1, &v2, &no_flush).vmid, 2);
}

#[test]
fn flush_local_only_on_first_load_per_cpu_after_rollover() {
    let a = VmidAllocator::new(2, 2);
    let vms: Vec<VmVmid> = (0..4).map(|_| VmVmid::new()).collect();
    let mut locals = [0; 2];
    for round in 0..3 {
        for (i, vm) in vms.iter().enumerate() {
            let cpu = (i + round) % 2;
            let l = a.vcpu_load(cpu, vm, &no_flush);
            locals[cpu] += l.flush_local as u32;
            a.vcpu_put(cpu);
        }
    }
    let r = a.counters().rollovers as u32;
    assert!(r >= 1);
    // Each rollover makes each CPU flush exactly once (both CPUs load after every rollover here).
    assert_eq!(locals, [r, r]);
}

#[test]
fn wide_vmids_fit_hardware_fields() {
    for bits in [8, 10, 16] {
        let cpus = crate::MAX_CPUS.min((1 << eff(bits)) - 2);
        let a = VmidAllocator::new(bits, cpus);
        let vm = VmVmid::new();
        let l = a.vcpu_load(cpus - 1, &vm, &no_flush);
        assert_eq!(u64::from(l.vmid), l.id & ((1 << a.bits()) - 1));
        assert_eq!(a.generation(), 1 << a.bits());
    }
}

/// A CPU reporting more VMID bits than the register fields that carry a
/// VMID hold (LoongArch: GIDBITS may say up to 63, the GID fields hold 8):
/// the allocator is cut to the fields, so every id it hands out fits them
/// and no two VMs running in one generation share a tag. Uncut, a 10-bit
/// allocator hands out ids that alias once masked to 8 bits.
#[test]
fn vmids_never_outgrow_the_fields_that_carry_them() {
    assert_eq!(usable_bits(10, 8), 8);
    assert_eq!(usable_bits(6, 8), 6);
    assert_eq!(usable_bits(63, 63), MAX_VMID_BITS);
    let run = |bits: u32| {
        let a = VmidAllocator::new(bits, 2);
        let vms: Vec<VmVmid> = (0..600).map(|_| VmVmid::new()).collect();
        let mut aliased = false;
        let mut live = BTreeMap::new();
        for (i, vm) in vms.iter().enumerate() {
            let l = a.vcpu_load(i % 2, vm, &no_flush);
            if l.flush_local {
                live.clear(); // a new generation
            }
            assert!(u64::from(l.vmid) < 1 << a.bits());
            if let Some(other) = live.insert(l.vmid & 0xff, i) {
                aliased |= other != i;
            }
            a.vcpu_put(i % 2);
        }
        (a.bits(), aliased, a.counters().rollovers)
    };
    let (bits, aliased, rollovers) = run(usable_bits(10, 8));
    assert_eq!(bits, eff(8));
    assert!(!aliased, "two VMs of one generation share an 8-bit GID");
    assert!(rollovers > 0);
    if eff(10) == 10 {
        let (_, aliased, _) = run(10);
        assert!(aliased, "uncut 10-bit ids alias once masked to 8 bits");
    }
}

#[test]
#[should_panic(expected = "cannot share")]
fn too_many_cpus_for_the_width_is_refused() {
    let _ = VmidAllocator::new(2, 3);
}

// ---------------------------------------------------------------------------
// Exhaustive interleaving check.
//
// Each scenario runs two or three real threads over one allocator. Only one
// thread runs at a time: at every `Step` hook (each access to shared state in
// the allocator) the running thread parks and a scheduler picks who goes next,
// following a choice list. A depth-first search over those lists runs every
// schedule. A thread waiting for the allocator lock is not schedulable while
// another thread holds it, so spinning never happens.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    Waiting(Step),
    Running,
    Done,
}

struct Sched {
    status: Vec<Status>,
    /// Context switches away from a thread that could have continued.
    preemptions: usize,
    bound: usize,
    started: usize,
    turn: Option<usize>,
    lock_holder: Option<usize>,
    prefix: Vec<usize>,
    trace: Vec<(usize, usize)>,
}

struct Explorer {
    state: StdMutex<Sched>,
    cv: Condvar,
}

impl Explorer {
    fn new(threads: usize, prefix: Vec<usize>, bound: usize) -> Self {
        Self {
            state: StdMutex::new(Sched {
                status: vec![Status::Waiting(Step::Put); threads],
                preemptions: 0,
                bound,
                started: 0,
                turn: None,
                lock_holder: None,
                prefix,
                trace: Vec::new(),
            }),
            cv: Condvar::new(),
        }
    }

    /// Pick the next thread to run after `last` parked (called with the state
    /// locked). Choice 0 is always "let `last` continue", so a schedule's
    /// preemptions are the non-zero choices made while `last` was eligible.
    fn decide(s: &mut Sched, last: Option<usize>) {
        let eligible_t = |s: &Sched, t: usize| match s.status[t] {
            Status::Waiting(Step::Lock) => s.lock_holder.is_none(),
            Status::Waiting(_) => true,
            _ => false,
        };
        let mut eligible: Vec<usize> = (0..s.status.len()).filter(|&t| eligible_t(s, t)).collect();
        let continuing = last.filter(|&t| eligible.contains(&t));
        if let Some(t) = continuing {
            eligible.retain(|&e| e != t);
            eligible.insert(0, t);
            if s.preemptions >= s.bound {
                eligible.truncate(1);
            }
        }
        if eligible.is_empty() {
            assert!(
                s.status.iter().all(|&st| st == Status::Done),
                "deadlock: {:?}",
                s.status
            );
            s.turn = None;
            return;
        }
        let pos = s.trace.len();
        let choice = s.prefix.get(pos).copied().unwrap_or(0);
        s.trace.push((choice, eligible.len()));
        if continuing.is_some() && choice != 0 {
            s.preemptions += 1;
        }
        let t = eligible[choice];
        if s.status[t] == Status::Waiting(Step::Lock) {
            s.lock_holder = Some(t);
        }
        s.status[t] = Status::Running;
        s.turn = Some(t);
    }

    /// Park thread `me` before `step`, until the scheduler picks it.
    fn park(&self, me: usize, step: Step, first: bool) {
        let mut s = self.state.lock().unwrap();
        if step == Step::Unlocked {
            // Bookkeeping only: not a preemption point.
            s.lock_holder = None;
            return;
        }
        s.status[me] = Status::Waiting(step);
        if first {
            s.started += 1;
            if s.started == s.status.len() {
                Self::decide(&mut s, None);
            }
        } else {
            Self::decide(&mut s, Some(me));
        }
        self.cv.notify_all();
        while s.turn != Some(me) {
            let (g, timeout) = self.cv.wait_timeout(s, Duration::from_secs(10)).unwrap();
            s = g;
            assert!(!timeout.timed_out(), "scheduler stuck");
        }
    }

    fn done(&self, me: usize) {
        let mut s = self.state.lock().unwrap();
        s.status[me] = Status::Done;
        Self::decide(&mut s, None);
        self.cv.notify_all();
    }
}

/// The observable state of one schedule: who runs what on which CPU, and a
/// model of each CPU's TLB (index -> VM whose entries it may hold).
#[derive(Default)]
struct World {
    running: BTreeMap<usize, (usize, u16)>, // cpu -> (vm, vmid)
    tlb: BTreeMap<usize, BTreeMap<u16, usize>>,
    violations: Vec<String>,
}

impl World {
    fn loaded(&mut self, cpu: usize, vm: usize, l: VmidLoad) {
        for (&other, &(ovm, ovmid)) in &self.running {
            if other != cpu && ovmid == l.vmid && ovm != vm {
                self.violations.push(format!(
                    "vm{vm} on cpu{cpu} and vm{ovm} on cpu{other} share VMID {}",
                    l.vmid
                ));
            }
            if other != cpu && ovm == vm && ovmid != l.vmid {
                self.violations.push(format!(
                    "vm{vm} runs under VMIDs {} and {ovmid} at once",
                    l.vmid
                ));
            }
        }
        let tlb = self.tlb.entry(cpu).or_default();
        if l.flush_local {
            tlb.clear();
        }
        if let Some(&stale) = tlb.get(&l.vmid) {
            if stale != vm {
                self.violations.push(format!(
                    "cpu{cpu}: VMID {} has stale entries of vm{stale} for vm{vm}",
                    l.vmid
                ));
            }
        }
        tlb.insert(l.vmid, vm);
        self.running.insert(cpu, (vm, l.vmid));
    }
}

/// One thread's program: a list of (cpu, action) where action is Some(vm) to
/// load, None to put.
type Program = Vec<(usize, Option<usize>)>;

/// Run every schedule of `programs` over the state built by `setup`; returns
/// the number of schedules. `broadcast` selects the TLB flush mode; `bound`
/// caps the preemptions per schedule (`usize::MAX`: all schedules).
fn explore(
    bits: u32,
    cpus: usize,
    vms: usize,
    setup: &Program,
    programs: &[Program],
    broadcast: bool,
    bound: usize,
) -> usize {
    let mut prefix = Vec::new();
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs < 200_000, "state space larger than expected");
        let alloc = VmidAllocator::new(bits, cpus);
        let vm_ids: Vec<VmVmid> = (0..vms).map(|_| VmVmid::new()).collect();
        let world = StdMutex::new(World::default());
        let flush = || {
            if broadcast {
                world.lock().unwrap().tlb.clear();
            }
        };
        let exec = |cpu: usize, act: Option<usize>, hook: &mut dyn FnMut(Step)| match act {
            Some(vm) => {
                let l = alloc.load_hooked(cpu, &vm_ids[vm], &flush, hook);
                world.lock().unwrap().loaded(cpu, vm, l);
            }
            None => {
                world.lock().unwrap().running.remove(&cpu);
                alloc.put_hooked(cpu, hook);
            }
        };
        for &(cpu, act) in setup {
            exec(cpu, act, &mut |_| {});
        }
        let ex = Explorer::new(programs.len(), prefix.clone(), bound);
        std::thread::scope(|sc| {
            for (me, prog) in programs.iter().enumerate() {
                let ex = &ex;
                let exec = &exec;
                sc.spawn(move || {
                    ex.park(me, Step::ReadActive, true);
                    let mut hook = |step: Step| ex.park(me, step, false);
                    for &(cpu, act) in prog {
                        exec(cpu, act, &mut hook);
                    }
                    ex.done(me);
                });
            }
        });
        let w = world.into_inner().unwrap();
        let trace = ex.state.into_inner().unwrap().trace;
        assert!(
            w.violations.is_empty(),
            "schedule {trace:?}: {:?}",
            w.violations
        );
        let c = alloc.counters();
        assert_eq!(c.flushes, c.rollovers, "exactly one TLB flush per rollover");
        assert_eq!(alloc.generation(), (1 + c.rollovers) << alloc.bits());
        // Next schedule: bump the deepest choice that has an untried sibling.
        match trace.iter().rposition(|&(c, n)| c + 1 < n) {
            Some(i) => {
                prefix = trace[..i].iter().map(|&(c, _)| c).collect();
                prefix.push(trace[i].0 + 1);
            }
            None => return runs,
        }
    }
}

/// Fill a 2-bit allocator: vm0-2 hold indices 1-3, cpu0 runs vm0... as given.
fn full_setup() -> Program {
    vec![
        (0, Some(0)),
        (0, None),
        (1, Some(1)),
        (1, None),
        (1, Some(2)),
        (1, None),
        (0, Some(0)),
    ]
}

#[test]
fn exhaustive_fast_path_against_rollover() {
    if eff(2) != 2 {
        return; // the scenario is built for 2-bit VMIDs
    }
    for broadcast in [true, false] {
        // cpu0 puts vm0 and reloads it or switches to vm1 (fast-path
        // candidates: index 1 is the one the rollover hands to vm3 if cpu0
        // does not hold it) while cpu1 brings in vm3, which rolls over.
        for next in [0, 1] {
            let n = explore(
                2,
                2,
                4,
                &full_setup(),
                &[vec![(0, None), (0, Some(next))], vec![(1, Some(3))]],
                broadcast,
                usize::MAX,
            );
            println!("{n} schedules");
            assert!(n > 100, "only {n} schedules explored");
        }
        // Both vCPUs of vm0 race, one of them through a rollover.
        let n = explore(
            2,
            2,
            4,
            &full_setup(),
            &[
                vec![(0, None), (0, Some(0))],
                vec![(1, Some(3)), (1, None), (1, Some(0))],
            ],
            broadcast,
            3,
        );
        println!("{n} schedules");
        assert!(n > 100, "only {n} schedules explored");
    }
}

#[test]
fn exhaustive_put_after_rollover_still_flushes_locally() {
    if eff(2) != 2 {
        return;
    }
    // cpu0's TLB has entries of vm0, vm1, vm2 (indices 1-3) and keeps running
    // vm2; cpu1 ran vm0 and is idle. cpu1 brings in vm3 (rollover: vm3 gets
    // index 1) while cpu0 switches to vm3. cpu0's `vcpu_put` replaces the 0
    // the rollover left in its `active`, so only the pending-flush flag keeps
    // it from running vm3 on vm0's stale index-1 entries.
    let setup: Program = vec![
        (0, Some(0)),
        (0, None),
        (0, Some(1)),
        (0, None),
        (0, Some(2)),
        (1, Some(0)),
        (1, None),
    ];
    for broadcast in [false, true] {
        let n = explore(
            2,
            2,
            4,
            &setup,
            &[vec![(0, None), (0, Some(3))], vec![(1, Some(3))]],
            broadcast,
            usize::MAX,
        );
        println!("{n} schedules");
        assert!(n > 100);
    }
}

#[test]
fn exhaustive_two_rollovers_and_reserved_rewrite() {
    if eff(3) != 3 {
        return;
    }
    // 3 bits, 2 CPUs: indices 1-7. vm0-6 fill them; cpu0 keeps vm0 running.
    let mut setup: Program = Vec::new();
    for vm in 1..7 {
        setup.push((1, Some(vm)));
        setup.push((1, None));
    }
    setup.insert(0, (0, Some(0)));
    let n = explore(
        3,
        2,
        9,
        &setup,
        &[
            vec![(0, None), (0, Some(0))],
            vec![(1, Some(7)), (1, None), (1, Some(0))],
        ],
        true,
        3,
    );
    println!("{n} schedules");
    assert!(n > 100);
}

#[test]
fn explorer_detects_a_broken_allocator() {
    // Sanity check of the checker itself: two VMs forced onto the same index
    // on different CPUs must be reported.
    let mut w = World::default();
    let l = |vmid| VmidLoad {
        vmid,
        id: 4 | u64::from(vmid),
        fast: false,
        flush_local: false,
    };
    w.loaded(0, 0, l(1));
    w.loaded(1, 1, l(1));
    assert_eq!(w.violations.len(), 1);
    // And stale TLB entries on one CPU without a flush in between.
    let mut w = World::default();
    w.loaded(0, 0, l(1));
    w.running.clear();
    w.loaded(0, 1, l(1));
    assert_eq!(w.violations.len(), 1);
}
