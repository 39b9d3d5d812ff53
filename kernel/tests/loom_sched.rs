//! loom model of the scheduler's wake-versus-block race (`kernel::sched`).
//! Built only with `RUSTFLAGS="--cfg loom"` (`make test-loom`,
//! docs/concurrency.md); the real `Scheduler` runs under loom's mutex.
//!
//! pCPU 0 runs the run loop's steps for one vCPU (pinned there): `pick`,
//! look at its pending interrupt (the backend's check before
//! `RunExit::Block`), then either take it or `put(Blocked)`; with nothing
//! to run, it marks itself idle (`pick` returning `None`) and sleeps until
//! a kick. pCPU 1 makes the interrupt pending, then calls `wake` and kicks
//! the pCPU it names, as a device or a timer does. In every interleaving
//! the interrupt must end up taken, or the vCPU runnable with its pCPU
//! awake or kicked: never a vCPU blocked, or queued on a sleeping pCPU,
//! with its interrupt pending.
//!
//! Shown to fail when the protocol is broken (each change made by hand in
//! `sched.rs`, the model run, the change reverted):
//! - a wake that finds the vCPU running not remembered (`wake_pending =
//!   true` removed from `Scheduler::wake_inner`): "lost wake-up: the vCPU
//!   is Blocked with its interrupt pending" (the wake came between the
//!   vCPU's look at its interrupts and its `put(Blocked)`).
//! - `pick` not marking its pCPU idle when it finds nothing (`s.idle.0 |=
//!   1 << cpu` removed): "lost wake-up: pCPU 0 sleeps with Runnable work
//!   and no kick" (the wake queued the vCPU but kicked nobody).
//!
//! The model's own flags are set with `swap`, not `store`: loom 0.7 lets a
//! store slip between the read and the write of a concurrent swap (loom
//! issue #254) and would report lost kicks no machine can lose.
#![cfg(loom)]

use kernel::sched::{CpuMask, Kick, PutReason, RunState, Scheduler, VcpuKey};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::AtomicUsize;

/// Runs `f` under every interleaving within the preemption bound
/// (`LOOM_MAX_PREEMPTIONS` overrides `bound`); returns how many.
fn check(bound: usize, f: impl Fn() + Sync + Send + 'static) -> usize {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    let counter = runs.clone();
    b.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f()
    });
    runs.load(Ordering::Relaxed)
}

const VCPU: VcpuKey = VcpuKey { vm: 0, vcpu: 0 };

struct World {
    sched: Scheduler,
    /// The vCPU's interrupt line (the vGIC's pending state, an IOCSR IPI).
    pending: AtomicBool,
    /// A physical IPI to pCPU 0 not yet taken.
    kick: AtomicBool,
}

/// How pCPU 0's run loop ended (the model runs it a few rounds).
#[derive(Debug, PartialEq)]
enum End {
    /// The vCPU took its interrupt.
    Taken,
    /// pCPU 0 went to sleep (nothing to run, no kick).
    Asleep,
    /// Out of rounds (a kick with nothing new; not a verdict).
    Rounds,
}

fn pcpu0(w: &World) -> End {
    for _ in 0..3 {
        match w.sched.pick(0, 0) {
            Some(k) => {
                if w.pending.swap(false, Ordering::AcqRel) {
                    w.sched.put(0, k, PutReason::Preempted, 0).unwrap();
                    return End::Taken;
                }
                // Nothing pending: the guest waits for an interrupt.
                w.sched.put(0, k, PutReason::Blocked, 0).unwrap();
            }
            None => {
                // Idle: sleeps until a kick (a kick sent before is pending).
                if !w.kick.swap(false, Ordering::AcqRel) {
                    return End::Asleep;
                }
            }
        }
    }
    End::Rounds
}

/// The vCPU is running on pCPU 0 (`running`) or waiting for it (queued)
/// when the interrupt arrives from pCPU 1.
fn model(running_first: bool) -> usize {
    check(10, move || {
        let w = Arc::new(World {
            sched: Scheduler::new(CpuMask::first(2)),
            pending: AtomicBool::new(false),
            kick: AtomicBool::new(false),
        });
        w.sched.add(VCPU, CpuMask::single(0), true).unwrap();
        if !running_first {
            // It ran and blocked before: pCPU 0 starts from its idle loop.
            let k = w.sched.pick(0, 0).unwrap();
            w.sched.put(0, k, PutReason::Blocked, 0).unwrap();
        }
        let waker = {
            let w = w.clone();
            thread::spawn(move || {
                w.pending.swap(true, Ordering::AcqRel);
                if let Kick::Cpu(c) = w.sched.wake(VCPU, 1).unwrap() {
                    assert_eq!(c, 0);
                    w.kick.swap(true, Ordering::AcqRel);
                }
            })
        };
        let end = pcpu0(&w);
        waker.join().unwrap();
        let state = w.sched.state(VCPU).unwrap();
        if end == End::Taken || !w.pending.load(Ordering::Acquire) {
            return;
        }
        assert_ne!(
            state,
            RunState::Blocked,
            "lost wake-up: the vCPU is Blocked with its interrupt pending"
        );
        if end == End::Asleep {
            assert!(
                w.kick.load(Ordering::Acquire),
                "lost wake-up: pCPU 0 sleeps with {state:?} work and no kick"
            );
        }
    })
}

#[test]
fn a_wake_racing_with_a_block_is_never_lost() {
    let runs = model(true);
    println!("sched wake vs block: {runs} interleavings");
    assert!(runs > 20, "only {runs} interleavings explored");
}

#[test]
fn a_wake_racing_with_an_idle_pcpu_kicks_it() {
    let runs = model(false);
    println!("sched wake vs idle: {runs} interleavings");
    assert!(runs > 5, "only {runs} interleavings explored");
}
