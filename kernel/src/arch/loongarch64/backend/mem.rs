//! Guest RAM on LoongArch: the frames come from the portable pool
//! (`crate::mem::frames`) over the board's RAM above kestrel's image (the
//! image holds .bss, stacks and heap; below it lie the loader's command
//! line, EFI tables and FDT) and outside what UEFI firmware keeps. kestrel reaches a VM's RAM through its cached
//! DMW window, the guest through shadow TLB entries (trap-and-emulate) or
//! second-stage entries (LVZ).

use alloc::string::String;
use alloc::vec::Vec;

use crate::host::board::MemRegion;
use crate::mem::frames::{FramePool, GuestRam, FRAME};

use super::super::dmw;

/// The frames guests may have: `memory` without the `reserved` ranges
/// (kestrel's image and what lies below it, what UEFI firmware keeps).
pub fn pool(memory: &[MemRegion], reserved: &[(u64, u64)]) -> FramePool {
    FramePool::from_board(memory, reserved, u64::MAX)
}

/// Zeroes `ram`'s frames.
pub fn clear(ram: &GuestRam) {
    for &f in &ram.frames {
        clear_frame(f);
    }
}

/// Zeroes one frame `f` of a VM's RAM.
pub fn clear_frame(f: u64) {
    // SAFETY: the frame is RAM from the device tree above kestrel's image,
    // owned by one VM alone (the pool hands each frame to one owner),
    // reached through the cached window.
    unsafe { core::ptr::write_bytes(dmw::cached(f) as *mut u8, 0, FRAME as usize) };
}

/// Copies `data` to offset `off` of the VM's RAM.
pub fn copy_in(ram: &GuestRam, off: u64, data: &[u8]) -> Result<(), String> {
    for (h, at, n) in ram.chunks(off, data.len())? {
        // SAFETY: [h, h + n) lies inside one frame of this VM's RAM
        // (`GuestRam::chunks` stops at frame ends), reached through the
        // cached window; `data[at..at + n]` is a valid source.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr().add(at), dmw::cached(h) as *mut u8, n)
        };
    }
    Ok(())
}

/// Private memory for a writable virtio disk of `bytes`: whole frames from
/// `pool` ([`FramePool::alloc_pieces`]), handed out as slices through the
/// cached window.
pub fn disk_memory(pool: &mut FramePool, bytes: u64) -> Result<Vec<&'static mut [u8]>, String> {
    Ok(pool
        .alloc_pieces(bytes)?
        .into_iter()
        // SAFETY: each frame is RAM from the pool (not used by kestrel
        // nor any VM), reached through the cached window, and belongs to
        // this disk alone from now on: frames are never returned to the
        // pool, so this is the only reference to it; `n` is at most a
        // frame.
        .map(|(f, n)| unsafe { core::slice::from_raw_parts_mut(dmw::cached(f) as *mut u8, n) })
        .collect())
}
