//! loom model of first-touch zeroing (`kernel::mem::lazyram`): the one-claimant
//! rule. Built only with `RUSTFLAGS="--cfg loom"` (`make test-loom`,
//! docs/concurrency.md); the real `Blocks` runs on loom's atomics.
//!
//! The block's memory is a `loom::cell::UnsafeCell`: loom reports any
//! access to it that is not ordered after the zeroing by happens-before,
//! which is what "what the zeroing did is visible to whoever sees the block
//! ready" means.
//!
//! Shown to fail when the protocol is broken (each change made by hand in
//! `lazyram.rs`, the model run, the change reverted):
//! - READY published with `Ordering::Relaxed` instead of `Release` in
//!   `Blocks::try_touch`: loom panics with "Causality violation: Concurrent
//!   read and write accesses" on the block's memory (a vCPU found the block
//!   ready, but the zeroing did not happen-before its read).
//! - the failed claim's `Acquire` weakened to `Relaxed` (the
//!   `compare_exchange` failure ordering, the path of a vCPU that finds the
//!   block READY): the same causality violation.
//! - the claim as a load and a store (`load() == UNTOUCHED`, then
//!   `store(ZEROING)`) instead of one compare-and-swap: two claimants, and
//!   loom panics with "Causality violation: Concurrent write accesses to
//!   `UnsafeCell`" (both zero the block).
#![cfg(loom)]

mod common;
use common::check;

use kernel::mem::lazyram::{Blocks, Touch};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

/// What the frame held before the VM got it (another VM's data).
const GARBAGE: u64 = 0xdead_beef;

struct Ram {
    blocks: Blocks,
    /// Block 0's memory.
    mem: UnsafeCell<u64>,
    zeroings: UnsafeCell<u32>,
}

impl Ram {
    fn zero(&self) {
        // Plain stores, as the backend's zeroing is: loom checks them.
        self.zeroings.with_mut(|z| {
            // SAFETY: loom checks this access; it reports any write racing
            // with another claimant's.
            unsafe { *z += 1 }
        });
        self.mem.with_mut(|m| {
            // SAFETY: as above.
            unsafe { *m = 0 }
        });
    }

    /// The guest (or a device) reads the block once it is ready.
    fn read(&self) -> u64 {
        // SAFETY: loom reports a read not ordered after the zeroing.
        self.mem.with(|m| unsafe { *m })
    }
}

/// Two vCPUs fault on the same untouched block (`try_touch`, retried as the
/// guest re-faults) while kestrel copies into it for a device (`touch`,
/// waiting). Exactly one zeroes it; everybody reads zeroes, never the old
/// contents, and only after the zeroing.
#[test]
fn one_claimant_zeroes_and_everyone_sees_it() {
    let runs = check(5, || {
        let ram = Arc::new(Ram {
            blocks: Blocks::new(1, false),
            mem: UnsafeCell::new(GARBAGE),
            zeroings: UnsafeCell::new(0),
        });
        // A vCPU faults, and faults again after a `Busy` (twice at most
        // here: two spinning threads would let loom spin them forever).
        let vcpu = |ram: Arc<Ram>| {
            move || {
                for _ in 0..2 {
                    match ram.blocks.try_touch(0, || ram.zero()) {
                        Some(Touch::Busy) => thread::yield_now(),
                        Some(Touch::Ready | Touch::Zeroed) => {
                            assert_eq!(ram.read(), 0, "a vCPU saw the frame's old contents");
                            return;
                        }
                        None => panic!("block 0 exists"),
                    }
                }
            }
        };
        let a = thread::spawn(vcpu(ram.clone()));
        let b = thread::spawn(vcpu(ram.clone()));
        ram.blocks
            .touch(0, || ram.zero(), thread::yield_now)
            .expect("block 0 exists");
        assert_eq!(ram.read(), 0, "kestrel saw the frame's old contents");
        a.join().unwrap();
        b.join().unwrap();
        let n = ram.zeroings.with(|z| {
            // SAFETY: every thread has been joined.
            unsafe { *z }
        });
        assert_eq!(n, 1, "the block was zeroed {n} times");
        assert!(ram.blocks.is_ready(0));
    });
    println!("lazyram: {runs} interleavings");
    assert!(runs > 50, "only {runs} interleavings explored");
}
