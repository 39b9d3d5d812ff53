//! loom model of the deadline bound (`kernel::base::deadline`): the lower bound
//! of every vCPU deadline that each LoongArch exit arms its pCPU's timer
//! by. Built only with `RUSTFLAGS="--cfg loom"` (`make test-loom`,
//! docs/concurrency.md); the real `Deadlines` and `DeadlineBound` run on
//! loom's atomics.
//!
//! The property: once the threads are done, the bound is at or below every
//! deadline that is set. A bound above a set deadline is a lost wake-up:
//! no pCPU's timer fires for that vCPU until the next tick.
//!
//! Shown to fail when the protocol is broken (each change made by hand in
//! `deadline.rs`, the model run, the change reverted):
//! - the recomputation storing the recomputed value (`store(earliest())`)
//!   instead of raising the bound to `u64::MAX` first and then lowering it:
//!   loom finds the setter whose deadline the recomputation's read missed
//!   and whose lowering the store then overwrote ("the bound 18446744073709551615
//!   is above deadline 100").
//! - `Deadlines::set` lowering the bound before storing the deadline: the
//!   same lost deadline (the recomputation raises the bound between the two
//!   and reads the slot before the store).
#![cfg(loom)]

mod common;
use common::check;

use kernel::base::deadline::{DeadlineBound, Deadlines};
use loom::thread;
use std::sync::Arc;

struct World {
    bound: Arc<DeadlineBound>,
    vcpus: [Deadlines; 2],
}

impl World {
    fn new() -> Arc<World> {
        let bound = Arc::new(DeadlineBound::new());
        Arc::new(World {
            vcpus: [Deadlines::new(bound.clone()), Deadlines::new(bound.clone())],
            bound,
        })
    }

    /// What `Hypervisor::next_deadline` computes.
    fn earliest(&self) -> u64 {
        self.vcpus.iter().map(Deadlines::earliest).min().unwrap()
    }

    fn assert_bounded(&self) {
        let (b, e) = (self.bound.get(), self.earliest());
        assert!(b <= e, "the bound {b} is above deadline {e}");
    }
}

/// A pCPU puts vCPU 0 away with a deadline while another pCPU, whose timer
/// fired for vCPU 1's passed deadline, takes that deadline (as
/// `check_timers` does) and recomputes the bound.
#[test]
fn a_deadline_set_during_a_recomputation_is_not_lost() {
    let runs = check(3, || {
        let w = World::new();
        w.vcpus[1].set(0, 50);
        let put = {
            let w = w.clone();
            thread::spawn(move || w.vcpus[0].set(0, 100))
        };
        // The timer fired at 60: vCPU 1's deadline is taken, the bound
        // recomputed.
        assert!(w.vcpus[1].take_passed(0, 60));
        let at = w.bound.at(60, || w.earliest());
        assert!(at == 100 || at == u64::MAX || at <= 60, "armed for {at}");
        put.join().unwrap();
        w.assert_bounded();
    });
    assert!(runs > 1);
}

/// Two pCPUs look at a passed bound at once (one recomputes, the other
/// uses the bound as it is) while a third loads the vCPU that held the
/// bound (its deadlines cleared) and a fourth puts another one away.
#[test]
fn recomputations_loads_and_puts_keep_the_bound_low() {
    let runs = check(2, || {
        let w = World::new();
        w.vcpus[0].set(0, 30);
        let look = |w: Arc<World>| {
            move || {
                let at = w.bound.at(40, || w.earliest());
                // Never above what is set when it returns, but for a
                // deadline set concurrently (the other threads).
                assert!(at <= 200 || at == u64::MAX);
            }
        };
        let a = thread::spawn(look(w.clone()));
        let load = {
            let w = w.clone();
            thread::spawn(move || w.vcpus[0].clear())
        };
        w.vcpus[1].set(1, 200);
        let b = look(w.clone());
        b();
        a.join().unwrap();
        load.join().unwrap();
        w.assert_bounded();
    });
    assert!(runs > 1);
}
