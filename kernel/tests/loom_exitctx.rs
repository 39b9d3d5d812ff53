//! loom model of the PV IPI's pending-then-kick ordering (`kernel::vcpu::ipi`,
//! `kernel::vm::exitctx`). Built only with `RUSTFLAGS="--cfg loom"` (`make
//! test-loom`, docs/concurrency.md); the real router (`ipi::send`), the
//! real steps over the scheduler (`exitctx::PvIpiRoute`, which `ExitCtx`
//! uses) and the real `Scheduler` run under loom.
//!
//! vCPU 0 (pinned to pCPU 0, running) sends the PV IPI to vCPU 1 (pinned
//! to pCPU 1). pCPU 1 runs its side of the contract: `pick` (the
//! scheduler marks vCPU 1 running there) and then samples the vCPU's
//! pending interrupts for the entry; with nothing pending the guest runs
//! until a kick; with nothing to run pCPU 1 sleeps until a kick. The
//! target starts queued (not yet picked) or blocked (pCPU 1 about to find
//! nothing to run). In every interleaving the IPI must be taken at an
//! entry, or pCPU 1 kicked: never a guest running, or a pCPU asleep, with
//! the IPI pending and no kick.
//!
//! Shown to fail when the ordering is broken (each change made by hand,
//! the model run, the change reverted):
//! - `PvIpiRoute::deliver` asking the scheduler (the wake and where the
//!   target runs) before raising the bit: "IPI pending, vCPU 1 in its
//!   guest on pCPU 1, no kick" (the sender saw the target not running,
//!   the target entered and sampled nothing, then the bit was set), in
//!   both models.
//! - `PvIpiRoute::deliver` without its `wake_quiet` (a blocked target
//!   not woken): "IPI pending, pCPU 1 asleep, no kick".
//!
//! The model's own flags are set with `swap`, not `store` (loom issue #254,
//! see `loom_sched.rs`).
#![cfg(loom)]

mod common;
use common::check;

use kernel::vcpu::ipi::{self, IpiWindow};
use kernel::vcpu::sched::{CpuMask, PutReason, Scheduler, VcpuKey};
use kernel::vm::exitctx::{PvIpiArch, PvIpiRoute};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

const SENDER: VcpuKey = VcpuKey { vm: 0, vcpu: 0 };
const TARGET: VcpuKey = VcpuKey { vm: 0, vcpu: 1 };

struct World {
    sched: Scheduler,
    /// The PV IPI pending on vCPU 1 (arm64 SGI 15 in the vGIC, LoongArch
    /// SWI0 in its shared state).
    pending: AtomicBool,
    /// A physical IPI to pCPU 1 not yet taken.
    kick: AtomicBool,
}

/// The backend's hooks, over the model's flags.
struct Arch<'a>(&'a World);

impl PvIpiArch for Arch<'_> {
    fn raise(&self, _sender: usize, target: usize) -> bool {
        assert_eq!(target, 1);
        self.0.pending.swap(true, Ordering::AcqRel)
    }
    fn kick(&self, pcpu: usize) {
        assert_eq!(pcpu, 1, "only the target's pCPU is ever kicked");
        self.0.kick.swap(true, Ordering::AcqRel);
    }
}

#[derive(Debug, PartialEq)]
enum End {
    /// vCPU 1 took the IPI at an entry.
    Taken,
    /// vCPU 1 runs its guest (nothing was pending at its entry).
    InGuest,
    /// pCPU 1 sleeps (nothing to run).
    Asleep,
}

/// pCPU 1's run loop, a few rounds.
fn pcpu1(w: &World) -> End {
    let mut end = End::Asleep;
    for _ in 0..3 {
        match w.sched.pick(1, 0) {
            Some(k) => {
                // Entry: sample pending interrupts after `pick` published
                // "running on 1".
                if w.pending.swap(false, Ordering::AcqRel) {
                    w.sched.put(1, k, PutReason::Preempted, 0).unwrap();
                    return End::Taken;
                }
                // In the guest until a kick makes it exit.
                if !w.kick.swap(false, Ordering::AcqRel) {
                    return End::InGuest;
                }
                w.sched.put(1, k, PutReason::Preempted, 0).unwrap();
                end = End::InGuest;
            }
            None => {
                if !w.kick.swap(false, Ordering::AcqRel) {
                    return End::Asleep;
                }
                end = End::Asleep;
            }
        }
    }
    end
}

fn model(blocked: bool) -> usize {
    check(10, move || {
        let w = Arc::new(World {
            sched: Scheduler::new(CpuMask::first(2)),
            pending: AtomicBool::new(false),
            kick: AtomicBool::new(false),
        });
        w.sched.add(SENDER, CpuMask::single(0), true).unwrap();
        w.sched.add(TARGET, CpuMask::single(1), true).unwrap();
        assert_eq!(w.sched.pick(0, 0), Some(SENDER));
        if blocked {
            // vCPU 1 ran and waits for an interrupt.
            assert_eq!(w.sched.pick(1, 0), Some(TARGET));
            w.sched.put(1, TARGET, PutReason::Blocked, 0).unwrap();
        }
        let sender = {
            let w = w.clone();
            thread::spawn(move || {
                let route = PvIpiRoute {
                    sched: &w.sched,
                    vm: 0,
                    vcpus: 2,
                    sender: 0,
                    cpu: 0,
                    now: 0,
                    arch: Arch(&w),
                };
                let out = ipi::send(
                    &route,
                    0,
                    &IpiWindow {
                        low: 0b10,
                        high: 0,
                        min: 0,
                    },
                )
                .unwrap();
                assert_eq!(out.delivered, 1);
            })
        };
        let end = pcpu1(&w);
        sender.join().unwrap();
        if end == End::Taken || !w.pending.load(Ordering::Acquire) {
            return;
        }
        let kicked = w.kick.load(Ordering::Acquire);
        match end {
            End::InGuest => assert!(
                kicked,
                "IPI pending, vCPU 1 in its guest on pCPU 1, no kick"
            ),
            End::Asleep => assert!(kicked, "IPI pending, pCPU 1 asleep, no kick"),
            End::Taken => unreachable!(),
        }
    })
}

#[test]
fn a_pv_ipi_to_a_vcpu_entering_is_seen_or_kicked() {
    let runs = model(false);
    println!("PV IPI, target entering: {runs} interleavings");
    assert!(runs > 10, "only {runs} interleavings explored");
}

#[test]
fn a_pv_ipi_to_a_blocked_vcpu_wakes_it() {
    let runs = model(true);
    println!("PV IPI, target blocked: {runs} interleavings");
    assert!(runs > 5, "only {runs} interleavings explored");
}
