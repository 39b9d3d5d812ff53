//! What one virtual CPU needs, whatever VM it is in: the scheduler, the
//! statistics, the lazy FP/SIMD owner, and the hypercall, PSCI and PV IPI
//! logic.

pub mod cpuset;
pub mod fpu;
pub mod hypercall;
pub mod ipi;
pub mod psci;
pub mod sched;
pub mod stats;
pub mod steal;
