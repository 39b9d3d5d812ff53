//! The bottom layer: what every other layer may use, and which uses nothing
//! of kestrel's own above it: locks, the log and the console's output
//! buffers, the platform contract and the registered platform, time,
//! per-CPU boot state, fatal stops, deadlines and halt polling.

pub mod clock;
pub mod conout;
pub mod cpu;
pub mod deadline;
pub mod fatal;
pub mod haltpoll;
pub mod klog;
pub mod lock;
pub mod platform;
pub mod sync;
