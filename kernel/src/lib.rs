//! kestrel: a micro-hypervisor for arm64 (EL2) and LoongArch64 (root mode).
//!
//! This crate is the hypervisor as a library. The portable core (everything
//! outside `arch`) is safe Rust and builds and runs its tests on the host with
//! `cargo test`; `arch::<name>` holds the registers, drivers and assembly of
//! one architecture and is compiled only for that bare-metal target.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

extern crate alloc;

// Boot-time plumbing shared by both architectures.
pub mod acpi;
pub mod backend;
pub mod banner;
pub mod board;
pub mod cmdline;
pub mod console;
pub mod dtb;
pub mod efiboot;
pub mod klog;
pub mod platform;
pub mod reserve;
pub mod runtime;
pub mod termfilter;

// The portable mechanisms (issue: portable core).
pub mod deadline;
pub mod exitctx;
pub mod fpu;
pub mod frames;
pub mod guest;
pub mod haltpoll;
pub mod hypercall;
pub mod ipi;
pub mod lazyram;
pub mod passthrough;
pub mod psci;
pub mod sched;
pub mod stats;
pub mod sync;
pub mod vdev;
pub mod vgic;
pub mod virtio;
pub mod vm;
pub mod vmid;
pub mod vmm;

// VM configuration: the embedded package and generated guest device trees.
pub mod fdt_build;
pub mod vmconfig;

/// Architecture-specific code: only built for the bare-metal targets.
#[cfg(all(
    target_os = "none",
    any(target_arch = "aarch64", target_arch = "loongarch64")
))]
#[allow(unsafe_code)]
pub mod arch;

/// kestrel's version, as printed in the boot banner.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Most physical CPUs kestrel manages.
pub const MAX_CPUS: usize = 16;
