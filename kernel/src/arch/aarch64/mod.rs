//! arm64 (EL2) support: the boot sequence after the entry assembly, the
//! drivers kestrel itself uses (PL011, GICv2/v3, EL2 physical timer, PSCI),
//! the EL2 stage-1 MMU, exception vectors, SMP bring-up and the
//! [`crate::base::platform::Platform`] implementation. See docs/arm64-boot.md.

pub mod boot;
pub mod el2;
pub mod exceptions;
pub mod gic;
pub mod mmu;
pub mod percpu;
pub mod pl011;
pub mod platform;
pub mod psci;
pub mod smp;
pub mod timer;
pub mod vm;
