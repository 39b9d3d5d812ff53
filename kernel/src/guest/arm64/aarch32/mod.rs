//! AArch32 guests (EL1 and EL0 in AArch32 state under kestrel's AArch64
//! EL2): the portable facts a backend needs, each decoded or computed
//! without touching hardware and tested on the host.
//!
//! - [`trap`]: ESR_EL2 of a trap from AArch32 (coprocessor accesses, VMRS,
//!   WFI/WFE with their condition, HVC/SMC, aborts) into a [`trap::Trap32`].
//! - [`cond`]: condition codes, the IT state, stepping over a trapped
//!   instruction (2 or 4 bytes, IT advanced).
//! - [`regs`]: AArch32 modes and the AArch64 view of their registers.
//! - [`except`]: taking an exception to an AArch32 EL1 (vector, LR, SPSR,
//!   CPSR) and the DFSR/IFSR/DFAR/IFAR of an injected abort.
//! - [`cp14`]: the cp14 debug registers, the AArch32 views of the
//!   per-vCPU debug shadow (`guest::arm64::debug`).
//! - [`cp15`]: the cp15 registers a Linux guest uses, mapped to their
//!   AArch64 counterparts or to a defined answer (UNDEF for the rest).
//! - [`idregs`]: the AArch32 feature ID registers an AArch32 EL1 sees.
//! - [`smccc`]: which SMCCC calls an AArch32 caller may make, and kestrel's
//!   32-bit calling convention.
//!
//! The arm64 backend (`arch::aarch64::vm::aarch32`) answers the traps of an
//! AArch32 VM (and of an AArch32 EL0 under an AArch64 kernel) with these.

pub mod cond;
pub mod cp14;
pub mod cp15;
pub mod except;
pub mod idregs;
pub mod regs;
pub mod smccc;
pub mod trap;
