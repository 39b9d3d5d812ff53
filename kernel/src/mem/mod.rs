//! Host memory and its guest-facing allocators: physical frames, kestrel's
//! heap accounting, guest RAM zeroed on first touch, and the VMID allocator.

pub mod frames;
pub mod heap;
pub mod lazyram;
pub mod vmid;
