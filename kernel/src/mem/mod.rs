//! Host memory and its guest-facing allocators: physical frames, guest RAM
//! zeroed on first touch, and the VMID allocator.

pub mod frames;
pub mod lazyram;
pub mod vmid;
