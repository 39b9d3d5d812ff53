//! loom model of the scheduler's wake-versus-block race (`kernel::vcpu::sched`).
//! Built only with `RUSTFLAGS="--cfg loom"` (`make test-loom`,
//! docs/concurrency.md); the real `Scheduler` runs under loom's mutex.
//!
//! pCPU 0 runs the run loop's steps for one vCPU: `pick`, look at its
//! pending interrupt (the backend's check before `RunExit::Block`), then
//! either take it or `put(Blocked)`; with nothing to run, it marks itself
//! idle (`pick` returning `None`) and sleeps until a kick. pCPU 2 makes
//! the interrupt pending, then calls `wake` and kicks the pCPU it names,
//! as a device or a timer does. The vCPU is pinned to pCPU 0, or may run
//! on pCPU 1 too, which then runs the same loop. In every interleaving the
//! interrupt must end up taken, or the vCPU runnable with a pCPU awake or
//! kicked: never a vCPU blocked, or queued while every pCPU sleeps, with
//! its interrupt pending.
//!
//! Shown to fail when the protocol is broken (each change made by hand in
//! `sched.rs`, the model run, the change reverted):
//! - a wake that finds the vCPU running not remembered (`wake_pending =
//!   true` removed from `Scheduler::wake_inner`): "lost wake-up: the vCPU
//!   is Blocked with its interrupt pending" (the wake came between the
//!   vCPU's look at its interrupts and its `put(Blocked)`).
//! - `pick` not marking its pCPU idle when it finds nothing (`s.idle.0 |=
//!   1 << cpu` removed): "lost wake-up: the pCPUs sleep with Runnable
//!   work and no kick" (the wake queued the vCPU but kicked nobody).
//!
//! The model's own flags are set with `swap`, not `store`: loom 0.7 lets a
//! store slip between the read and the write of a concurrent swap (loom
//! issue #254) and would report lost kicks no machine can lose.
#![cfg(loom)]

mod common;
use common::check;

use kernel::vcpu::sched::{CpuMask, Kick, PutReason, RunState, Scheduler, VcpuKey};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

const VCPU: VcpuKey = VcpuKey { vm: 0, vcpu: 0 };

/// The pCPU the interrupt comes from (a device model or a timer there).
const WAKER: usize = 2;

struct World {
    sched: Scheduler,
    /// The vCPU's interrupt line (the vGIC's pending state, an IOCSR IPI).
    pending: AtomicBool,
    /// Per pCPU: a physical IPI not yet taken.
    kick: [AtomicBool; 2],
}

/// How a pCPU's run loop ended (the model runs it a few rounds).
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// The vCPU took its interrupt here.
    Taken,
    /// The pCPU went to sleep (nothing to run, no kick).
    Asleep,
    /// Out of rounds (a kick with nothing new; not a verdict).
    Rounds,
}

fn pcpu(w: &World, cpu: usize) -> End {
    for _ in 0..3 {
        match w.sched.pick(cpu, 0) {
            Some(k) => {
                if w.pending.swap(false, Ordering::AcqRel) {
                    w.sched.put(cpu, k, PutReason::Preempted, 0).unwrap();
                    return End::Taken;
                }
                // Nothing pending: the guest waits for an interrupt.
                w.sched.put(cpu, k, PutReason::Blocked, 0).unwrap();
            }
            None => {
                // Idle: sleeps until a kick (a kick sent before is pending).
                if !w.kick[cpu].swap(false, Ordering::AcqRel) {
                    return End::Asleep;
                }
            }
        }
    }
    End::Rounds
}

/// The vCPU runs on pCPU 0 only (`pinned`) or on pCPUs 0 and 1 (both run
/// their loops then), and is running or waiting to (`running_first`) or
/// blocked when the interrupt arrives from pCPU 2.
fn model(pinned: bool, running_first: bool, bound: usize) -> usize {
    check(bound, move || {
        let w = Arc::new(World {
            sched: Scheduler::new(CpuMask::first(3)),
            pending: AtomicBool::new(false),
            kick: [AtomicBool::new(false), AtomicBool::new(false)],
        });
        let affinity = if pinned {
            CpuMask::single(0)
        } else {
            CpuMask::first(2)
        };
        w.sched.add(VCPU, affinity, true).unwrap();
        if !running_first {
            // It ran and blocked before: pCPU 0 starts from its idle loop.
            let k = w.sched.pick(0, 0).unwrap();
            w.sched.put(0, k, PutReason::Blocked, 0).unwrap();
        }
        let waker = {
            let w = w.clone();
            thread::spawn(move || {
                w.pending.swap(true, Ordering::AcqRel);
                if let Kick::Cpu(c) = w.sched.wake(VCPU, WAKER, 0).unwrap() {
                    assert!(c < 2 && (c == 0 || !pinned), "kicked pCPU {c}");
                    w.kick[c].swap(true, Ordering::AcqRel);
                }
            })
        };
        let other = (!pinned).then(|| {
            let w = w.clone();
            thread::spawn(move || pcpu(&w, 1))
        });
        let mut ends = vec![pcpu(&w, 0)];
        waker.join().unwrap();
        if let Some(t) = other {
            ends.push(t.join().unwrap());
        }
        let state = w.sched.state(VCPU).unwrap();
        if ends.contains(&End::Taken) || !w.pending.load(Ordering::Acquire) {
            return;
        }
        assert_ne!(
            state,
            RunState::Blocked,
            "lost wake-up: the vCPU is Blocked with its interrupt pending"
        );
        // Runnable with its interrupt pending: some pCPU that may run it
        // must be awake (still in its loop) or have a kick waiting.
        let someone = ends
            .iter()
            .enumerate()
            .any(|(cpu, &end)| end == End::Rounds || w.kick[cpu].load(Ordering::Acquire));
        assert!(
            someone,
            "lost wake-up: the pCPUs sleep with {state:?} work and no kick"
        );
    })
}

#[test]
fn a_wake_racing_with_a_block_is_never_lost() {
    let runs = model(true, true, 10);
    println!("sched wake vs block: {runs} interleavings");
    assert!(runs > 20, "only {runs} interleavings explored");
}

#[test]
fn a_wake_racing_with_an_idle_pcpu_kicks_it() {
    let runs = model(true, false, 10);
    println!("sched wake vs idle: {runs} interleavings");
    assert!(runs > 5, "only {runs} interleavings explored");
}

/// The vCPU may run on two pCPUs, both in their loops: the wake queues it
/// where it may run and kicks an idle one.
#[test]
fn a_wake_with_two_pcpus_reaches_one_of_them() {
    for running_first in [true, false] {
        let runs = model(false, running_first, 3);
        println!("sched wake, two pCPUs (running first {running_first}): {runs} interleavings");
        assert!(runs > 50, "only {runs} interleavings explored");
    }
}
