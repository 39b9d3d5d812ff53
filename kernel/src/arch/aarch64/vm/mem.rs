//! Host memory for guests: a 2 MiB frame allocator over the DTB's RAM minus
//! what kestrel and the loader use (the image with its .bss, heap and
//! stacks, and the boot DTB). Guest RAM is a list of 2 MiB frames, mapped by
//! stage 2 in order; nothing needs host-contiguous memory.

use alloc::vec::Vec;
use spin::Mutex;

use crate::board::MemRegion;

use super::stage2::BLOCK;

/// Free physical ranges, 2 MiB aligned, below the EL2 identity map's limit.
static FREE: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Builds the free list: `memory` minus `reserved` (start, end) ranges.
pub fn init(memory: &[MemRegion], reserved: &[(u64, u64)], limit: u64) {
    let mut free = FREE.lock();
    free.clear();
    for r in memory {
        let mut pieces = alloc::vec![(r.base, r.end().min(limit))];
        for &(rs, re) in reserved {
            let mut next = Vec::new();
            for (s, e) in pieces {
                if re <= s || e <= rs {
                    next.push((s, e));
                    continue;
                }
                if s < rs {
                    next.push((s, rs));
                }
                if re < e {
                    next.push((re, e));
                }
            }
            pieces = next;
        }
        for (s, e) in pieces {
            let s = s.div_ceil(BLOCK) * BLOCK;
            let e = e / BLOCK * BLOCK;
            if s < e {
                free.push((s, e));
            }
        }
    }
}

/// Bytes left for guests.
pub fn free_bytes() -> u64 {
    FREE.lock().iter().map(|(s, e)| e - s).sum()
}

/// Takes `bytes` (a multiple of 2 MiB) as 2 MiB frames, zeroed and cleaned
/// to the point of coherency (a guest starts with its caches off). `None`,
/// with nothing taken, when there is not enough.
pub fn alloc_frames(bytes: u64) -> Option<Vec<u64>> {
    let n = bytes.div_ceil(BLOCK) as usize;
    let mut frames = Vec::with_capacity(n);
    {
        let mut free = FREE.lock();
        let avail: u64 = free.iter().map(|(s, e)| (e - s) / BLOCK).sum();
        if (avail as usize) < n {
            return None;
        }
        while frames.len() < n {
            let (s, e) = free.last_mut()?;
            let take = (((*e - *s) / BLOCK) as usize).min(n - frames.len());
            for i in 0..take as u64 {
                frames.push(*s + i * BLOCK);
            }
            *s += take as u64 * BLOCK;
            if *s == *e {
                free.pop();
            }
        }
    }
    for &f in &frames {
        // SAFETY: the frame is RAM from the DTB, not used by kestrel (the
        // free list excludes the image, heap, stacks and DTB), identity
        // mapped as Normal memory, and now owned by this allocation alone.
        unsafe { core::ptr::write_bytes(f as *mut u8, 0, BLOCK as usize) };
        crate::arch::aarch64::mmu::clean_dcache_range(f as usize, (f + BLOCK) as usize);
    }
    Some(frames)
}
