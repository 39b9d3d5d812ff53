//! kestrel's spin locks, and how a pCPU waits for one another pCPU holds.
//!
//! Every lock in kestrel is one of these aliases of the `spin` crate's
//! (`Mutex`, `RwLock`, `Once`), with one wait: [`Relax`], which runs the
//! architecture's spin-wait hint ([`set_relax_hint`]). On arm64 that is
//! `YIELD`: on hardware a hint that costs nothing (a core may give its
//! pipeline to another hardware thread), under an emulator that runs its
//! vCPUs one at a time (QEMU's TCG without multi-threading, which
//! `-icount` implies) the end of this vCPU's turn, so the pCPU holding the
//! lock runs instead of the waiter spinning out its whole turn
//! ("lock-holder preemption", `docs/performance.md`). Before the
//! architecture registered its hint (and in host tests) the wait is
//! [`core::hint::spin_loop`].
//!
//! The locks of the model-checked protocols are `base::sync`'s, which are
//! these outside the models.

use spin::RelaxStrategy;

/// The wait of every kestrel lock: the architecture's spin-wait hint.
pub struct Relax;

impl RelaxStrategy for Relax {
    #[inline]
    fn relax() {
        relax();
    }
}

/// The architecture's spin-wait hint, once registered.
static HINT: Once<fn()> = Once::new();

/// Registers the architecture's spin-wait hint (once, by the boot CPU
/// before it starts the others; later calls change nothing).
pub fn set_relax_hint(hint: fn()) {
    HINT.call_once(|| hint);
}

/// One round of a spin-wait: the architecture's hint
/// ([`set_relax_hint`]), or [`core::hint::spin_loop`] before there is one.
/// For hand-written wait loops as well as the locks.
#[inline]
pub fn relax() {
    match HINT.get() {
        Some(hint) => hint(),
        None => core::hint::spin_loop(),
    }
}

/// A spin lock.
pub type Mutex<T> = spin::mutex::Mutex<T, Relax>;
/// What [`Mutex::lock`] returns.
pub type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;
/// A readers-writer spin lock.
pub type RwLock<T> = spin::rwlock::RwLock<T, Relax>;
/// A value set once, which later readers wait for while it is being set.
pub type Once<T> = spin::once::Once<T, Relax>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};

    static HINTS: AtomicUsize = AtomicUsize::new(0);

    fn counting_hint() {
        HINTS.fetch_add(1, Ordering::Relaxed);
        core::hint::spin_loop();
    }

    /// A registered hint is what every wait runs: a lock's waiter runs it
    /// while the holder keeps the lock, then gets the lock.
    #[test]
    fn a_waiter_runs_the_registered_hint() {
        set_relax_hint(counting_hint);
        let before = HINTS.load(Ordering::Relaxed);
        relax();
        assert!(HINTS.load(Ordering::Relaxed) > before);
        static M: Mutex<u32> = Mutex::new(0);
        let held = M.lock();
        let waiter = std::thread::spawn(|| {
            *M.lock() += 1;
        });
        let seen = HINTS.load(Ordering::Relaxed);
        while HINTS.load(Ordering::Relaxed) < seen + 10 {
            std::thread::yield_now();
        }
        drop(held);
        waiter.join().unwrap();
        assert_eq!(*M.lock(), 1);
    }
}
