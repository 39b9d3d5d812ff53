//! kestrel: a micro-hypervisor for arm64 (EL2) and LoongArch64 (root mode).
//!
//! This crate is the hypervisor as a library. The portable core (everything
//! outside `arch`) is safe Rust and builds and runs its tests on the host with
//! `cargo test`; `arch::<name>` holds the registers, drivers and assembly of
//! one architecture and is compiled only for that bare-metal target.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

extern crate alloc;

// The layers, lowest first (`kernel/layers.txt` declares the order and
// `cargo xtask layers` checks it): a module uses only the layers above it
// in this list, never one below.
/// Architecture-specific code: only built for the bare-metal targets.
#[cfg(all(
    target_os = "none",
    any(target_arch = "aarch64", target_arch = "loongarch64")
))]
#[allow(unsafe_code)]
pub mod arch;
pub mod base;
pub mod dev;
pub mod guest;
pub mod host;
pub mod mem;
pub mod runtime;
pub mod vcpu;
pub mod vm;
pub mod vmm;

/// kestrel's version, as printed in the boot banner.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Most physical CPUs kestrel manages.
pub const MAX_CPUS: usize = 16;
