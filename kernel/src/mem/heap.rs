//! kestrel's own heap, as seen by the statistics: the image that owns the
//! allocator says once, at boot, how to measure it.

use crate::base::lock::Once;

static HEAP_USAGE: Once<fn() -> (usize, usize)> = Once::new();

/// The image's heap says how to measure it: (bytes used, bytes free).
pub fn set_heap_usage(f: fn() -> (usize, usize)) {
    HEAP_USAGE.call_once(|| f);
}

/// The heap's (bytes used, bytes free), if [`set_heap_usage`] was called.
pub fn heap_usage() -> Option<(usize, usize)> {
    HEAP_USAGE.get().map(|f| f())
}
