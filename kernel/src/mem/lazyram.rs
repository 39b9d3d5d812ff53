//! First-touch zeroing of guest RAM: the state of each 2 MiB block of a
//! VM's RAM, shared by every pCPU that may touch it.
//!
//! A block starts *untouched*: its host frame still holds whatever it held
//! before (another VM's data, kestrel's), so it must not be mapped for the
//! guest nor read or written for it. The first access, the guest's (a
//! stage-2 fault) or kestrel's on its behalf (a device copying through guest
//! memory, an image being loaded), *claims* it (untouched -> zeroing, one
//! compare-and-swap: exactly one claimant wins), zeroes and maps it, and
//! publishes it *ready* (a release store). Everyone else either retries
//! later ([`Blocks::try_touch`]: a vCPU returns to the guest and faults
//! again) or waits for it ([`Blocks::touch`]: kestrel's own accesses, which
//! cannot be retried). What the zeroing did (the zeroes, the mapping) is
//! visible to whoever sees the block ready (acquire).
//!
//! A VM restart makes every block untouched again ([`Blocks::forget_all`])
//! once its vCPUs are stopped; the backend unmaps them first.
//!
//! The backend (arch) does the zeroing and mapping; this is only the state
//! machine, host-tested with racing threads.

use crate::base::sync::{AtomicU8, Ordering};
use alloc::vec::Vec;

const UNTOUCHED: u8 = 0;
const ZEROING: u8 = 1;
const READY: u8 = 2;

/// What one attempt to touch a block found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// Ready before the attempt: nothing done.
    Ready,
    /// This attempt zeroed (and mapped) it: it is ready now.
    Zeroed,
    /// Someone else is zeroing it: not ready yet, try again.
    Busy,
}

/// The states of a VM's RAM blocks.
#[derive(Debug)]
pub struct Blocks {
    state: Vec<AtomicU8>,
}

impl Blocks {
    /// `n` blocks, all untouched (lazy) or all ready (`ready`: zeroed and
    /// mapped by the caller, e.g. RAM a device may DMA into).
    pub fn new(n: usize, ready: bool) -> Blocks {
        let s = if ready { READY } else { UNTOUCHED };
        Blocks {
            state: (0..n).map(|_| AtomicU8::new(s)).collect(),
        }
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.state.len()
    }

    /// No blocks at all.
    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
    }

    /// Block `i` is zeroed and mapped (and what did that is visible).
    /// `false` for a block that does not exist.
    pub fn is_ready(&self, i: usize) -> bool {
        self.state
            .get(i)
            .is_some_and(|s| s.load(Ordering::Acquire) == READY)
    }

    /// How many blocks are ready.
    pub fn ready_count(&self) -> usize {
        (0..self.len()).filter(|&i| self.is_ready(i)).count()
    }

    /// One attempt to make block `i` ready: if it is untouched, claims it,
    /// runs `zero` (which must zero and map it) and publishes it ready;
    /// if another claimant is at it, returns [`Touch::Busy`] at once.
    /// `None`: no such block (`zero` is not run).
    pub fn try_touch(&self, i: usize, zero: impl FnOnce()) -> Option<Touch> {
        let s = self.state.get(i)?;
        match s.compare_exchange(UNTOUCHED, ZEROING, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                zero();
                s.store(READY, Ordering::Release);
                Some(Touch::Zeroed)
            }
            Err(READY) => Some(Touch::Ready),
            Err(_) => Some(Touch::Busy),
        }
    }

    /// Makes block `i` ready, waiting (calling `relax` between looks) while
    /// another claimant zeroes it. Returns whether this call zeroed it;
    /// `None`: no such block.
    pub fn touch(&self, i: usize, zero: impl FnOnce(), mut relax: impl FnMut()) -> Option<bool> {
        let mut zero = Some(zero);
        loop {
            let once = || {
                if let Some(z) = zero.take() {
                    z()
                }
            };
            match self.try_touch(i, once)? {
                Touch::Ready => return Some(false),
                Touch::Zeroed => return Some(true),
                Touch::Busy => relax(),
            }
        }
    }

    /// Makes every block untouched again, calling `unmap(i)` for each that
    /// was ready (a block being zeroed by a late claimant is waited for
    /// first, with `relax`). For a VM restart: its vCPUs are stopped, so
    /// only kestrel's own accesses can race with this, and whatever they
    /// touch afterwards is zeroed again first.
    pub fn forget_all(&self, mut unmap: impl FnMut(usize), mut relax: impl FnMut()) {
        for (i, s) in self.state.iter().enumerate() {
            loop {
                match s.compare_exchange(READY, UNTOUCHED, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        unmap(i);
                        break;
                    }
                    Err(UNTOUCHED) => break,
                    Err(_) => relax(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn lazy_blocks_are_zeroed_once_and_eager_ones_never() {
        let b = Blocks::new(3, false);
        assert_eq!((b.len(), b.ready_count()), (3, 0));
        let zeroed = AtomicUsize::new(0);
        let z = || {
            zeroed.fetch_add(1, Ordering::Relaxed);
        };
        assert_eq!(b.try_touch(1, z), Some(Touch::Zeroed));
        assert_eq!(b.try_touch(1, z), Some(Touch::Ready));
        assert_eq!(b.touch(1, z, || panic!("no wait")), Some(false));
        assert_eq!(b.touch(2, z, || panic!("no wait")), Some(true));
        assert_eq!(zeroed.load(Ordering::Relaxed), 2);
        assert!(!b.is_ready(0) && b.is_ready(1) && b.is_ready(2));
        // Out of range: nothing run, nothing ready.
        assert_eq!(b.try_touch(3, || panic!("zeroed a block beyond RAM")), None);
        assert_eq!(b.touch(usize::MAX, || panic!(), || panic!()), None);
        assert!(!b.is_ready(3));

        let e = Blocks::new(2, true);
        assert_eq!(e.ready_count(), 2);
        assert_eq!(
            e.try_touch(0, || panic!("eager RAM zeroed again")),
            Some(Touch::Ready)
        );
        assert!(Blocks::new(0, false).is_empty());
    }

    #[test]
    fn a_block_being_zeroed_is_busy_for_everyone_else() {
        let b = Blocks::new(1, false);
        let inner = b.try_touch(0, || {
            // While this claimant zeroes: others are told to retry, and a
            // restart cannot take the block from under it.
            assert_eq!(
                b.try_touch(0, || panic!("second zeroing")),
                Some(Touch::Busy)
            );
            assert!(!b.is_ready(0));
        });
        assert_eq!(inner, Some(Touch::Zeroed));
        assert!(b.is_ready(0));
    }

    #[test]
    fn forgetting_unmaps_the_ready_blocks_and_they_are_zeroed_again() {
        let b = Blocks::new(4, false);
        for i in [0, 2] {
            b.try_touch(i, || {});
        }
        let mut unmapped = Vec::new();
        b.forget_all(|i| unmapped.push(i), || panic!("nothing is being zeroed"));
        assert_eq!(unmapped, [0, 2]);
        assert_eq!(b.ready_count(), 0);
        assert_eq!(b.try_touch(2, || {}), Some(Touch::Zeroed));
        // An eager VM's blocks all come back untouched too: the caller
        // decides whether to zero them all again.
        let e = Blocks::new(2, true);
        let mut n = 0;
        e.forget_all(|_| n += 1, || {});
        assert_eq!((n, e.ready_count()), (2, 0));
    }

    /// Threads race for the same blocks, as vCPUs and devices do: each
    /// block is zeroed exactly once, and no thread goes on (sees it ready)
    /// before its zeroing finished.
    #[test]
    fn racing_touches_zero_each_block_exactly_once() {
        const BLOCKS: usize = 64;
        const THREADS: usize = 8;
        for round in 0..20 {
            let b = Arc::new(Blocks::new(BLOCKS, false));
            let zeroings: Arc<Vec<AtomicUsize>> =
                Arc::new((0..BLOCKS).map(|_| AtomicUsize::new(0)).collect());
            // 1 once a block's zeroing has finished.
            let done: Arc<Vec<AtomicU8>> =
                Arc::new((0..BLOCKS).map(|_| AtomicU8::new(0)).collect());
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (b, zeroings, done) = (b.clone(), zeroings.clone(), done.clone());
                    thread::spawn(move || {
                        for k in 0..BLOCKS {
                            // Different orders per thread and round.
                            let i = (k * 7 + t * 13 + round) % BLOCKS;
                            let zero = || {
                                zeroings[i].fetch_add(1, Ordering::Relaxed);
                                for _ in 0..50 {
                                    std::hint::spin_loop();
                                }
                                done[i].store(1, Ordering::Relaxed);
                            };
                            if t % 2 == 0 {
                                b.touch(i, zero, thread::yield_now).unwrap();
                            } else {
                                // A vCPU: retries until it finds it ready.
                                let mut zero = Some(zero);
                                loop {
                                    let z = || zero.take().unwrap()();
                                    if b.try_touch(i, z).unwrap() != Touch::Busy {
                                        break;
                                    }
                                    thread::yield_now();
                                }
                            }
                            // Relaxed is enough: `touch` returned after an
                            // acquire of the claimant's release.
                            assert_eq!(done[i].load(Ordering::Relaxed), 1, "block {i}");
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert!(zeroings.iter().all(|z| z.load(Ordering::Relaxed) == 1));
            assert_eq!(b.ready_count(), BLOCKS);
        }
    }
}
