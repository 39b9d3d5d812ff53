//! Host memory and its guest-facing allocators: physical frames, kestrel's
//! heap accounting, guest RAM zeroed on first touch, a VM's images copied
//! into its RAM in bounded steps, and the VMID allocator.

pub mod frames;
pub mod heap;
pub mod imageload;
pub mod lazyram;
pub mod vmid;
