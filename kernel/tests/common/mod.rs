//! What the loom models (`tests/loom_*.rs`) share. A module directory, so
//! cargo does not build it as a test of its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Runs `f` under every interleaving within the preemption bound
/// (`LOOM_MAX_PREEMPTIONS` overrides `bound`); returns how many.
pub fn check(bound: usize, f: impl Fn() + Sync + Send + 'static) -> usize {
    let runs = Arc::new(AtomicUsize::new(0));
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
