//! The atomics and locks of kestrel's lock-free and cross-pCPU protocols
//! (VMIDs, lazy FP hand-off, first-touch zeroing, the scheduler, the
//! deadline bound, a VM rebuild's hand-off), in one
//! place so a model checker can stand in for them.
//!
//! Normally these are `core::sync::atomic`'s atomics and kestrel's spin
//! lock and spin-wait (`base::lock`), re-exported: what the firmware and
//! `cargo test` run. Built with `RUSTFLAGS="--cfg loom"` (`make
//! test-loom`), they are the `loom` crate's: every load, store,
//! read-modify-write and lock becomes a point where loom may switch
//! threads, and its memory model decides which stores a load may see. The
//! models in `kernel/tests/loom_*.rs` then run the real protocol code under
//! every interleaving within a preemption bound (`docs/concurrency.md`).

#[cfg(not(loom))]
pub use super::lock::relax as spin_loop;
#[cfg(not(loom))]
pub use super::lock::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(loom)]
pub use loom::hint::spin_loop;
#[cfg(loom)]
pub use loom::sync::atomic::Ordering;
#[cfg(loom)]
pub use loom::sync::MutexGuard;
#[cfg(loom)]
pub use loom_atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};

/// `spin::Mutex`'s interface over loom's mutex (which cannot be poisoned
/// here: a panic ends the model).
#[cfg(loom)]
#[derive(Debug, Default)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .expect("a loom mutex is poisoned only by a panic")
    }

    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}

/// loom's atomics, with `SeqCst` as the language defines it.
///
/// loom treats a `SeqCst` load, store or read-modify-write as `AcqRel`
/// (loom issue #180), so it reports outcomes that `SeqCst` forbids, such
/// as a load missing a store that the single total order puts before it
/// (the VMID fast path relies on that order: `vmid.rs`, "Why SeqCst").
/// It does model `fence(SeqCst)` (more strongly than the language: its
/// fences also synchronise with each other). So here a `SeqCst` access is
/// a `SeqCst` fence, the access, and another `SeqCst` fence, which gives
/// every `SeqCst` access the total order it has in the language (and on
/// arm64 and LoongArch). The price: `SeqCst` accesses also create
/// happens-before edges they do not have, so a plain-memory race
/// that only `SeqCst` atomics appear to order would go unreported; the
/// protocols checked this way keep their plain data under locks (VMIDs)
/// or behind acquire/release pairs, which are modelled exactly.
///
/// A store is modelled as a swap whose result is dropped: loom 0.7 lets a
/// plain store slip between the read and the write of another thread's
/// read-modify-write (loom issue #254), so a flag set with `store` and
/// taken with `swap` (lazy FP's `asked`) could be lost in the model
/// though not on any machine. A swap cannot; the one thing it adds is
/// that it continues a release sequence a store would end, which none of
/// these protocols relies on.
#[cfg(loom)]
mod loom_atomic {
    use loom::sync::atomic::{fence, Ordering};

    fn seq_cst<R>(strong: bool, access: impl FnOnce() -> R) -> R {
        if strong {
            fence(Ordering::SeqCst);
        }
        let r = access();
        if strong {
            fence(Ordering::SeqCst);
        }
        r
    }

    macro_rules! atomic {
        ($name:ident, $t:ty) => {
            #[derive(Debug, Default)]
            pub struct $name(loom::sync::atomic::$name);

            impl $name {
                pub fn new(v: $t) -> Self {
                    $name(loom::sync::atomic::$name::new(v))
                }
                pub fn load(&self, o: Ordering) -> $t {
                    seq_cst(o == Ordering::SeqCst, || self.0.load(o))
                }
                /// A swap whose result is dropped: see the module's
                /// notes (loom issue #254).
                pub fn store(&self, v: $t, o: Ordering) {
                    let o = match o {
                        Ordering::Release => Ordering::AcqRel,
                        o => o,
                    };
                    seq_cst(o == Ordering::SeqCst, || {
                        self.0.swap(v, o);
                    })
                }
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    seq_cst(o == Ordering::SeqCst, || self.0.swap(v, o))
                }
                pub fn compare_exchange(
                    &self,
                    current: $t,
                    new: $t,
                    success: Ordering,
                    failure: Ordering,
                ) -> Result<$t, $t> {
                    let strong = success == Ordering::SeqCst || failure == Ordering::SeqCst;
                    seq_cst(strong, || {
                        self.0.compare_exchange(current, new, success, failure)
                    })
                }
            }
        };
    }

    macro_rules! atomic_int {
        ($name:ident, $t:ty) => {
            atomic!($name, $t);
            impl $name {
                pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                    seq_cst(o == Ordering::SeqCst, || self.0.fetch_add(v, o))
                }
                pub fn fetch_min(&self, v: $t, o: Ordering) -> $t {
                    seq_cst(o == Ordering::SeqCst, || self.0.fetch_min(v, o))
                }
            }
        };
    }

    atomic!(AtomicBool, bool);
    atomic_int!(AtomicU8, u8);
    atomic_int!(AtomicU64, u64);
    atomic_int!(AtomicUsize, usize);
}

/// A `const fn` normally; a plain `fn` under loom, whose atomics and locks
/// cannot be built in a constant (the firmware's per-pCPU statics need the
/// `const`).
macro_rules! const_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:tt)*) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$m])*
        $vis const fn $name($($arg)*) -> $ret $body
        #[cfg(loom)]
        $(#[$m])*
        $vis fn $name($($arg)*) -> $ret $body
    };
}
pub(crate) use const_fn;
