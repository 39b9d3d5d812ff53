//! kestrel: a micro-hypervisor for arm64 (EL2) and LoongArch64 (root mode).
//!
//! This crate is the hypervisor as a library. The portable core (everything
//! outside `arch`) is safe Rust and builds and runs its tests on the host with
//! `cargo test`; `arch::<name>` holds the registers, drivers and assembly of
//! one architecture and is compiled only for that bare-metal target.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

extern crate alloc;

// The layers, lowest first. `kernel/layers.txt` declares the order and
// `cargo xtask layers` checks it: a module uses only its own layer and the
// layers listed before it here, and no two modules import each other.
pub mod base;

// The machine kestrel runs on.
pub mod host;

// Host memory and guest-RAM allocators, VMIDs.
pub mod mem;

// One virtual CPU: scheduler, lazy FP, PSCI, PV IPI, hypercalls.
pub mod vcpu;

// Device models.
pub mod dev;

// Guest architecture models.
pub mod guest;

// VMs, vCPUs and the run loop.
pub mod vm;

// The VM manager.
pub mod vmm;

/// Architecture-specific code: only built for the bare-metal targets.
#[cfg(all(
    target_os = "none",
    any(target_arch = "aarch64", target_arch = "loongarch64")
))]
#[allow(unsafe_code)]
pub mod arch;

// The boot flow, on top.
pub mod runtime;

/// kestrel's version, as printed in the boot banner.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Most physical CPUs kestrel manages.
pub const MAX_CPUS: usize = 16;
