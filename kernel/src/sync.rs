//! The atomics and locks of kestrel's lock-free and cross-pCPU protocols
//! (VMIDs, lazy FP hand-off, first-touch zeroing, the scheduler), in one
//! place so a model checker can stand in for them.
//!
//! Normally these are `core::sync::atomic`'s atomics and `spin`'s mutex,
//! re-exported unchanged: the firmware and `cargo test` build exactly what
//! they built before. Built with `RUSTFLAGS="--cfg loom"` (`make
//! test-loom`), they are the `loom` crate's: every load, store,
//! read-modify-write and lock becomes a point where loom may switch
//! threads, and its memory model decides which stores a load may see. The
//! models in `kernel/tests/loom_*.rs` then run the real protocol code under
//! every interleaving within a preemption bound (`docs/concurrency.md`).

#[cfg(not(loom))]
pub use core::hint::spin_loop;
#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use spin::{Mutex, MutexGuard};

#[cfg(loom)]
pub use loom::hint::spin_loop;
#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::MutexGuard;

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
        self.0.lock().expect("a loom mutex is poisoned only by a panic")
    }

    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
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
