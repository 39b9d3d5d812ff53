//! Host memory for guests: 2 MiB frames from the device tree's RAM above
//! kestrel's image (the image holds .bss, stacks and heap; below it lie the
//! loader's command line, EFI tables and FDT). A VM's RAM is a list of
//! frames in guest-physical order; kestrel reaches it through its cached
//! DMW window, the guest through shadow TLB entries.

use alloc::vec::Vec;
use spin::Mutex;

use crate::board::MemRegion;

use super::super::dmw;

pub const FRAME: u64 = 2 << 20;

static FREE: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Builds the free list: `memory` above `reserved_end`.
pub fn init(memory: &[MemRegion], reserved_end: u64) {
    let mut free = FREE.lock();
    free.clear();
    for r in memory {
        let s = r.base.max(reserved_end).div_ceil(FRAME) * FRAME;
        let e = r.end() / FRAME * FRAME;
        if s < e {
            free.push((s, e));
        }
    }
}

/// Bytes left for guests.
pub fn free_bytes() -> u64 {
    FREE.lock().iter().map(|(s, e)| e - s).sum()
}

/// Takes `bytes` as zeroed 2 MiB frames; `None` (nothing taken) when short.
pub fn alloc_frames(bytes: u64) -> Option<Vec<u64>> {
    let n = bytes.div_ceil(FRAME) as usize;
    let mut frames = Vec::with_capacity(n);
    {
        let mut free = FREE.lock();
        let avail: u64 = free.iter().map(|(s, e)| (e - s) / FRAME).sum();
        if (avail as usize) < n {
            return None;
        }
        while frames.len() < n {
            let (s, e) = free.last_mut()?;
            let take = (((*e - *s) / FRAME) as usize).min(n - frames.len());
            for i in 0..take as u64 {
                frames.push(*s + i * FRAME);
            }
            *s += take as u64 * FRAME;
            if *s == *e {
                free.pop();
            }
        }
    }
    for &f in &frames {
        // SAFETY: the frame is RAM from the device tree above kestrel's
        // image, owned by this allocation alone, reached through the cached
        // window.
        unsafe { core::ptr::write_bytes(dmw::cached(f) as *mut u8, 0, FRAME as usize) };
    }
    Some(frames)
}
