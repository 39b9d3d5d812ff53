//! loom model of a VM rebuild waiting for its vCPUs to leave their pCPUs
//! (`kernel::vm::rebuild`, `kernel::vcpu::sched`): the put that lets go
//! of the VM's last vCPU completes the restart, and no pCPU waits for it.
//! Built only with `RUSTFLAGS="--cfg loom"` (`make test-loom`,
//! docs/concurrency.md); the real `PendingRebuild` and the real
//! `Scheduler` run under loom.
//!
//! VM 0 has vCPUs A (0), B (1) and C (2, off). Each pCPU runs the run
//! loop's steps: `pick`, load (the model's hardware: under its lock, no
//! load while a rebuild runs), run, unload, `put_vcpu`, and when the put
//! says it released the VM (or the rebuild was posted with nothing held),
//! complete it: the backend's rebuild under the hardware lock (no vCPU of
//! the VM loaded anywhere, and the scheduler agrees), then
//! `PendingRebuild::done` and `Scheduler::restart_vm`. Running A resets
//! the VM (stop, kick, post the restart, put A); running B powers on C
//! (CPU_ON racing the reset); C only runs. The models:
//!
//! - a guest's reset from pCPU 0 while pCPU 1 runs B (which powers on C,
//!   which pCPU 2 may pick), with a second reset when A runs again (two
//!   restarts in a row);
//! - the operator's restart from a pCPU that holds no vCPU, while A and B
//!   run on the other two;
//! - the operator's start of a VM that has ended, racing the last put of
//!   its end (a put that saw the VM released before the start was posted
//!   must not complete it).
//!
//! In every interleaving: every posted rebuild is accepted (none refused
//! as busy) and completed exactly once, never while a pCPU holds a vCPU of
//! the VM, and never with a load during it.
//!
//! Shown to fail when the protocol is broken (each change made by hand,
//! the model run, the change reverted):
//! - `Scheduler::await_release` not marking the VM awaited when a vCPU is
//!   held (the `awaited = true` loop removed): "a posted rebuild was never
//!   completed" (nobody was told at the last put).
//! - `Inner::release` not checking the VM's other vCPUs (its `on_cpu`
//!   test removed): "rebuild while the scheduler has a vCPU on pCPUs ..."
//!   (the first of two puts completed it).
//! - the completion calling `PendingRebuild::done` after
//!   `Scheduler::restart_vm` (the order `Hypervisor::finish_restart` must
//!   keep; changed in the model's `complete`): "the post of a Restart was
//!   refused: Busy" (A ran and reset again before the first restart was
//!   marked done).
//!
//! The model's own flags are set with `swap`, not `store` (loom issue #254,
//! see `loom_sched.rs`).
#![cfg(loom)]

mod common;
use common::check;

use kernel::vcpu::sched::{CpuMask, Kick, PutReason, RunState, Scheduler, VcpuKey};
use kernel::vm::rebuild::{PendingRebuild, Rebuild};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

const A: VcpuKey = VcpuKey { vm: 0, vcpu: 0 };
const B: VcpuKey = VcpuKey { vm: 0, vcpu: 1 };
const C: VcpuKey = VcpuKey { vm: 0, vcpu: 2 };

/// The model's hardware: which pCPU holds each vCPU's registers, and
/// whether a rebuild rewrites them (the run loop's per-vCPU context locks,
/// which a rebuild takes all of).
#[derive(Default)]
struct Hw {
    loaded: [Option<usize>; 3],
    rebuilding: bool,
}

struct World {
    sched: Scheduler,
    rebuild: PendingRebuild,
    hw: Mutex<Hw>,
    /// Resets A may still ask for.
    resets_left: AtomicUsize,
    posted: AtomicUsize,
    completed: AtomicUsize,
}

impl World {
    fn new(resets: usize) -> Arc<Self> {
        let w = Arc::new(World {
            sched: Scheduler::new(CpuMask::first(3)),
            rebuild: PendingRebuild::new(),
            hw: Mutex::new(Hw::default()),
            resets_left: AtomicUsize::new(resets),
            posted: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
        });
        // A pinned to pCPU 0, B to pCPU 1, C off and free to run anywhere.
        w.sched.add(A, CpuMask::single(0), true).unwrap();
        w.sched.add(B, CpuMask::single(1), true).unwrap();
        w.sched.add(C, CpuMask::first(3), false).unwrap();
        w
    }

    /// The backend's load: never during a rebuild.
    fn load(&self, cpu: usize, k: VcpuKey) {
        let mut hw = self.hw.lock().unwrap();
        assert!(!hw.rebuilding, "vCPU {} loaded during a rebuild", k.vcpu);
        hw.loaded[usize::from(k.vcpu)] = Some(cpu);
    }

    fn unload(&self, k: VcpuKey) {
        self.hw.lock().unwrap().loaded[usize::from(k.vcpu)] = None;
    }

    /// Posts `op` (the VM's vCPUs stopped); completes it at once if the
    /// scheduler says no pCPU holds one.
    fn post(&self, cpu: usize, op: Rebuild) {
        let now = self
            .rebuild
            .post(&self.sched, 0, op)
            .unwrap_or_else(|e| panic!("the post of a {op:?} was refused: {e:?}"));
        self.posted.fetch_add(1, Ordering::AcqRel);
        if now {
            self.complete(cpu);
        }
    }

    /// A reset from a vCPU of the VM: stop its vCPUs, post the restart.
    fn reset(&self, cpu: usize) {
        let _kick = self.sched.stop_vm(0);
        self.post(cpu, Rebuild::Restart);
    }

    /// Completes the posted rebuild on `cpu`, which holds no vCPU of the VM.
    fn complete(&self, cpu: usize) {
        assert!(
            self.rebuild.pending().is_some(),
            "pCPU {cpu} told to complete a rebuild nobody posted"
        );
        {
            let mut hw = self.hw.lock().unwrap();
            for (v, on) in hw.loaded.iter().enumerate() {
                assert!(on.is_none(), "rebuild while pCPU {on:?} holds vCPU {v}");
            }
            let held = self.sched.vm_on_cpus(0);
            assert!(
                held.is_empty(),
                "rebuild while the scheduler has a vCPU on pCPUs {held:?}"
            );
            hw.rebuilding = true;
        }
        self.hw.lock().unwrap().rebuilding = false;
        self.rebuild.done();
        self.sched
            .restart_vm(0, 1, cpu)
            .expect("restart_vm refused: a vCPU still held or not stopped");
        self.completed.fetch_add(1, Ordering::AcqRel);
    }

    /// One vCPU run on `cpu`: what its guest does, then unload and put;
    /// a put that released the VM completes the rebuild.
    fn run(&self, cpu: usize, k: VcpuKey) {
        self.load(cpu, k);
        let mut why = PutReason::Preempted;
        // A is pinned to pCPU 0: only that thread counts its resets.
        let left = self.resets_left.load(Ordering::Acquire);
        if k == A && left > 0 {
            self.resets_left.swap(left - 1, Ordering::AcqRel);
            self.reset(cpu);
        } else if k == B {
            // CPU_ON of C: lands before the stop, or is refused.
            match self.sched.power_on(C, cpu) {
                Ok(Kick::Cpu(_) | Kick::None)
                | Err(kernel::vcpu::sched::SchedError::WrongState(_)) => {}
                Err(e) => panic!("CPU_ON: {e:?}"),
            }
        } else if k == C {
            why = PutReason::Offline;
        }
        self.unload(k);
        let put = self.sched.put_vcpu(cpu, k, why, 0).unwrap();
        if put.released {
            self.complete(cpu);
        }
    }

    /// `rounds` rounds of pCPU `cpu`'s run loop (stops when nothing runs).
    fn pcpu(&self, cpu: usize, rounds: usize) {
        for _ in 0..rounds {
            match self.sched.pick(cpu, 0) {
                Some(k) => self.run(cpu, k),
                None => return,
            }
        }
    }

    /// Every posted rebuild completed once, nothing held or pending.
    fn check_end(&self) {
        let posted = self.posted.load(Ordering::Acquire);
        let completed = self.completed.load(Ordering::Acquire);
        assert!(completed <= posted, "a rebuild completed twice");
        assert_eq!(completed, posted, "a posted rebuild was never completed");
        assert_eq!(self.rebuild.pending(), None);
        assert!(self.sched.vm_on_cpus(0).is_empty());
    }
}

/// A guest's resets (two if A runs again) while B powers on C.
#[test]
fn a_reset_racing_cpu_on_is_completed_once_by_the_last_put() {
    let runs = check(3, || {
        let w = World::new(2);
        let (a, b) = (w.sched.pick(0, 0).unwrap(), w.sched.pick(1, 0).unwrap());
        assert_eq!((a, b), (A, B));
        let t1 = {
            let w = w.clone();
            thread::spawn(move || {
                w.run(1, B);
                w.pcpu(1, 1);
            })
        };
        let t2 = {
            let w = w.clone();
            thread::spawn(move || w.pcpu(2, 1))
        };
        w.run(0, A);
        w.pcpu(0, 2);
        t1.join().unwrap();
        t2.join().unwrap();
        assert!(w.posted.load(Ordering::Acquire) >= 1);
        w.check_end();
    });
    println!("rebuild, reset racing CPU_ON: {runs} interleavings");
    assert!(runs > 100, "only {runs} interleavings explored");
}

/// The operator's restart, from a pCPU holding no vCPU of the VM, while A
/// and B run on pCPUs 0 and 1.
#[test]
fn an_operator_restart_is_completed_once() {
    let runs = check(3, || {
        let w = World::new(0);
        w.sched.pick(0, 0).unwrap();
        w.sched.pick(1, 0).unwrap();
        let t0 = {
            let w = w.clone();
            thread::spawn(move || w.run(0, A))
        };
        let t1 = {
            let w = w.clone();
            thread::spawn(move || w.run(1, B))
        };
        let _kick = w.sched.stop_vm(0);
        w.post(2, Rebuild::Restart);
        t0.join().unwrap();
        t1.join().unwrap();
        assert_eq!(w.posted.load(Ordering::Acquire), 1);
        w.check_end();
        assert_eq!(w.sched.state(A), Some(RunState::Runnable));
    });
    println!("rebuild, operator's restart: {runs} interleavings");
    assert!(runs > 20, "only {runs} interleavings explored");
}

/// The VM ended (its vCPUs stopped, nobody waiting) while A and B ran; the
/// operator starts it again while their puts race.
#[test]
fn a_start_racing_the_last_put_of_an_end_is_completed_once() {
    let runs = check(3, || {
        let w = World::new(0);
        w.sched.pick(0, 0).unwrap();
        w.sched.pick(1, 0).unwrap();
        let _kick = w.sched.stop_vm(0);
        let t0 = {
            let w = w.clone();
            thread::spawn(move || w.run(0, A))
        };
        let t1 = {
            let w = w.clone();
            thread::spawn(move || w.run(1, B))
        };
        w.post(2, Rebuild::Start);
        t0.join().unwrap();
        t1.join().unwrap();
        assert_eq!(w.posted.load(Ordering::Acquire), 1);
        w.check_end();
    });
    println!("rebuild, start racing an end's puts: {runs} interleavings");
    assert!(runs > 20, "only {runs} interleavings explored");
}
