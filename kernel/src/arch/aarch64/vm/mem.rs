//! Guest RAM on arm64: the frames come from the portable pool
//! (`crate::frames`); here they are zeroed and cleaned to the point of
//! coherency (a guest starts with its caches off), and images are copied
//! in through the EL2 identity map. Stage 2 maps them (`stage2`).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::board::MemRegion;
use crate::frames::{FramePool, GuestRam, FRAME};

use super::super::mmu;

const _: () = assert!(FRAME == super::stage2::BLOCK);

/// The frames guests may have: `memory` minus kestrel's `reserved`
/// (start, end) ranges, below the EL2 identity map's `limit`.
pub fn pool(memory: &[MemRegion], reserved: &[(u64, u64)], limit: u64) -> FramePool {
    FramePool::from_board(memory, reserved, limit)
}

/// Zeroes `ram`'s frames and cleans them to the point of coherency. With
/// `DC ZVA` permitted (DCZID_EL0.DZP clear) a block at a time, which is
/// several times faster than stores (under QEMU TCG most of all): zeroing
/// the RAM of a VM is most of the time from power-on to its first
/// instruction.
pub fn clear(ram: &GuestRam) {
    let dczid = super::regs::mrs!("dczid_el0");
    // Block size: 4 << BS bytes (BS in words).
    let block = 4u64 << (dczid & 0xf);
    let zva = dczid & (1 << 4) == 0 && block <= FRAME;
    for &f in &ram.frames {
        if zva {
            let mut a = f;
            while a < f + FRAME {
                // SAFETY: `a` is a block-aligned address (frames are 2 MiB
                // aligned, the block a power of two below that) inside a
                // frame that is RAM from the DTB, not used by kestrel,
                // identity mapped as Normal memory and owned by this VM
                // alone: zeroing it changes nothing else.
                unsafe {
                    core::arch::asm!("dc zva, {}", in(reg) a, options(nostack, preserves_flags))
                };
                a += block;
            }
        } else {
            // SAFETY: as above, for the whole frame.
            unsafe { core::ptr::write_bytes(f as *mut u8, 0, FRAME as usize) };
        }
        mmu::clean_dcache_range(f as usize, (f + FRAME) as usize);
    }
}

/// Copies `data` into guest RAM at guest physical `gpa` (RAM starting at
/// `ram_base`), cleaned to the point of coherency.
pub fn copy_to_guest(ram: &GuestRam, ram_base: u64, gpa: u64, data: &[u8]) -> Result<(), String> {
    let end = gpa
        .checked_add(data.len() as u64)
        .ok_or_else(|| String::from("address overflow"))?;
    let ram_end = ram_base + ram.size;
    if gpa < ram_base || end > ram_end {
        return Err(format!(
            "[{gpa:#x}, {end:#x}) lies outside guest RAM [{ram_base:#x}, {ram_end:#x})"
        ));
    }
    for (h, at, n) in ram.chunks(gpa - ram_base, data.len())? {
        let dst = h as usize;
        // SAFETY: `dst..dst + n` lies inside one frame owned by this VM
        // (`GuestRam::chunks` stops at frame ends), identity mapped as
        // Normal memory, and `data[at..at + n]` is a valid source.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(at), dst as *mut u8, n) };
        mmu::clean_dcache_range(dst, dst + n);
    }
    Ok(())
}

/// Private memory for a writable virtio disk of `bytes`: whole frames from
/// `pool`, handed out as slices (the last one cut to the disk's end).
pub fn disk_memory(pool: &mut FramePool, bytes: u64) -> Result<Vec<&'static mut [u8]>, String> {
    let ram = pool.alloc_ram(bytes.next_multiple_of(FRAME))?;
    let mut left = bytes;
    Ok(ram
        .frames
        .iter()
        .map(|&f| {
            let n = left.min(FRAME);
            left -= n;
            // SAFETY: the frame is RAM from the pool (not used by kestrel),
            // identity mapped at EL2 as Normal memory, and belongs to this
            // disk alone from now on: it is never handed out again (frames
            // are not returned to the pool), so this is the only reference.
            unsafe { core::slice::from_raw_parts_mut(f as *mut u8, n as usize) }
        })
        .collect())
}
