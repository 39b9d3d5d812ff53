//! The counter values at which vCPUs that are not loaded must be looked at
//! ([`Deadlines`], one set per vCPU), and the one lower bound of them all
//! that every exit consults ([`DeadlineBound`]).
//!
//! A LoongArch pCPU has one timer for kestrel's tick and for the deadlines
//! of every vCPU that is put away; before each entry it must fire no later
//! than the earliest of them. Walking every vCPU of every VM for that on
//! each exit cost 54 instructions per exit with one VM (and grows with the
//! vCPUs); the bound makes it one load. The protocol is model-checked
//! (`kernel/tests/loom_deadline.rs`, docs/concurrency.md).

use alloc::sync::Arc;

use crate::base::sync::{AtomicU64, Mutex, Ordering};

/// How many deadlines a vCPU has ([`Deadlines`]).
pub const DEADLINES: usize = 3;

/// Platform counter values at which a vCPU that is not loaded must be
/// looked at (its timers, a timed wait), `u64::MAX` for none. The backend
/// sets them when it puts the vCPU and clears them at its load; what each
/// slot means is the backend's ([`Backend::deadline_passed`]).
///
/// Every vCPU's deadlines share one [`DeadlineBound`] with the hypervisor:
/// setting a deadline lowers it, so it is never above a deadline that is
/// set, and the per-exit question "when must this pCPU's timer fire at the
/// latest?" is one load instead of a walk over every vCPU of every VM.
pub struct Deadlines {
    slots: [AtomicU64; DEADLINES],
    bound: Arc<DeadlineBound>,
}

/// A lower bound of every vCPU deadline that is set (`u64::MAX`: none is).
/// It may be lower than the earliest deadline (one was cleared or taken):
/// then it is recomputed from the deadlines when it has passed or when the
/// vCPU that held it is loaded ([`Hypervisor::deadline_bound`]). Never
/// higher: [`Deadlines::set`] stores the deadline, then lowers the bound,
/// and a recomputation raises it to `u64::MAX` before it reads the
/// deadlines (all `SeqCst`), so a deadline set while it reads is either
/// read or lowers the bound again.
pub struct DeadlineBound {
    bound: AtomicU64,
    /// One pCPU recomputes at a time (the others use the bound as it is).
    recompute: Mutex<()>,
}

impl DeadlineBound {
    pub fn new() -> DeadlineBound {
        DeadlineBound {
            bound: AtomicU64::new(u64::MAX),
            recompute: Mutex::new(()),
        }
    }

    /// The bound as it stands.
    pub fn get(&self) -> u64 {
        self.bound.load(Ordering::SeqCst)
    }

    fn lower(&self, at: u64) {
        self.bound.fetch_min(at, Ordering::SeqCst);
    }

    /// A counter value no later than any deadline set, at `now`: the bound,
    /// or, when it has passed, the bound recomputed with `earliest` (the
    /// earliest deadline set, read after the bound was raised). One pCPU
    /// recomputes at a time; another one meanwhile gets the bound as it
    /// was, low enough.
    pub fn at(&self, now: u64, earliest: impl FnOnce() -> u64) -> u64 {
        let at = self.get();
        if at > now {
            return at;
        }
        let Some(_one) = self.recompute.try_lock() else {
            return at;
        };
        self.bound.store(u64::MAX, Ordering::SeqCst);
        self.lower(earliest());
        self.get()
    }
}

impl Default for DeadlineBound {
    fn default() -> Self {
        DeadlineBound::new()
    }
}

impl Deadlines {
    /// No deadline set; `bound` is the hypervisor's.
    pub fn new(bound: Arc<DeadlineBound>) -> Deadlines {
        Deadlines {
            slots: core::array::from_fn(|_| AtomicU64::new(u64::MAX)),
            bound,
        }
    }

    /// Sets deadline `which` (out of range: ignored).
    pub fn set(&self, which: usize, at: u64) {
        if let Some(d) = self.slots.get(which) {
            d.store(at, Ordering::SeqCst);
            self.bound.lower(at);
        }
    }

    /// Deadline `which` (`u64::MAX`: none).
    pub fn get(&self, which: usize) -> u64 {
        self.slots
            .get(which)
            .map_or(u64::MAX, |d| d.load(Ordering::Acquire))
    }

    /// Clears every deadline (the vCPU is loaded: it watches its own). If
    /// one of them was the bound, the bound drops to 0 so that the next
    /// look recomputes it (0 is below everything: never too high).
    pub fn clear(&self) {
        let first = self.earliest();
        for d in &self.slots {
            d.store(u64::MAX, Ordering::SeqCst);
        }
        if first != u64::MAX && first == self.bound.get() {
            self.bound.lower(0);
        }
    }

    /// The earliest deadline.
    pub fn earliest(&self) -> u64 {
        self.slots
            .iter()
            .map(|d| d.load(Ordering::SeqCst))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Clears deadline `which` if it has passed at `now`; whether it did
    /// (exactly one caller sees each deadline pass).
    pub fn take_passed(&self, which: usize, now: u64) -> bool {
        let d = &self.slots[which];
        let t = d.load(Ordering::Acquire);
        t <= now
            && d.compare_exchange(t, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}
