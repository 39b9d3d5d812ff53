//! Code the two test guests (tools/guests/arm64-test,
//! tools/guests/loongarch64-test) share. Nothing here touches the CPU:
//! register accesses, barriers, fault catching and the guest's console go
//! through traits each guest implements ([`hostile_virtio::VirtioHost`],
//! and [`hostile_cold::ColdHost`] on top of it for the counter and the
//! steal-time record).
//! Built for the guests' bare-metal targets, and for the host by
//! `cargo test` (the parts that are plain computation have unit tests).

#![cfg_attr(not(test), no_std)]

pub mod hostile_cold;
pub mod hostile_virtio;
pub mod virtio_mmio;
