//! The platform this image runs on, once boot has registered it, and the
//! time it keeps: the free-running counter every CPU shares.

use crate::base::lock::Once;
use core::sync::atomic::{AtomicU32, Ordering};

use super::platform::Platform;

static PLATFORM: Once<&'static dyn Platform> = Once::new();

/// Registers the arch's platform (once, by the boot CPU) and returns it.
pub fn register(platform: &'static dyn Platform) -> &'static dyn Platform {
    *PLATFORM.call_once(|| platform)
}

/// The registered platform (None before boot registered it, or on the host).
pub fn platform() -> Option<&'static dyn Platform> {
    PLATFORM.get().copied()
}

/// Nanoseconds on the platform counter (0 before boot set the platform up).
pub fn now_ns() -> u64 {
    platform().map_or(0, |p| {
        let hz = u128::from(p.counter_hz().max(1));
        (u128::from(p.counter()) * 1_000_000_000 / hz) as u64
    })
}

/// The platform counter's frequency (0 before boot, or on the host).
pub fn counter_hz() -> u64 {
    platform().map_or(0, |p| p.counter_hz())
}

/// kestrel's tick frequency (each tick ends a time slice), once the boot
/// CPU started its tick.
static TICK_HZ: AtomicU32 = AtomicU32::new(0);

/// Records the tick frequency every CPU's tick runs at.
pub fn set_tick_hz(hz: u32) {
    TICK_HZ.store(hz, Ordering::Release);
}

/// One time slice (a tick period) in platform counter ticks (0: not known,
/// before boot or on the host).
pub fn slice_ticks() -> u64 {
    match TICK_HZ.load(Ordering::Acquire) {
        0 => 0,
        hz => counter_hz() / u64::from(hz),
    }
}
