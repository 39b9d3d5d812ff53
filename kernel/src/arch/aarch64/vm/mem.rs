//! Guest RAM on arm64: the frames come from the portable pool
//! (`crate::mem::frames`); here they are zeroed and cleaned to the point of
//! coherency (a guest starts with its caches off) at their first touch
//! (`crate::mem::lazyram`), mapped in stage 2 (`stage2`), and images are copied
//! in through the EL2 identity map.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::host::board::MemRegion;
use crate::mem::frames::{FramePool, GuestRam, FRAME};
use crate::mem::lazyram::{Blocks, Touch};
use crate::vcpu::stats::{Counter, Stats};

use super::super::mmu;
use super::stage2::{RamSlot, Stage2};

const _: () = assert!(FRAME == super::stage2::BLOCK);

/// The frames guests may have: `memory` minus kestrel's `reserved`
/// (start, end) ranges, below the EL2 identity map's `limit`.
pub fn pool(memory: &[MemRegion], reserved: &[(u64, u64)], limit: u64) -> FramePool {
    FramePool::from_board(memory, reserved, limit)
}

/// Zeroes the 2 MiB frame at `f` and cleans it to the point of coherency.
/// With `DC ZVA` permitted (DCZID_EL0.DZP clear) a block at a time, which
/// is several times faster than stores (under QEMU TCG most of all).
///
/// The frame must belong to one VM (or be about to) and be mapped for
/// nobody else: its old contents are destroyed.
fn zero_frame(f: u64) {
    let dczid = super::regs::mrs!("dczid_el0");
    // Block size: 4 << BS bytes (BS in words).
    let block = 4u64 << (dczid & 0xf);
    if dczid & (1 << 4) == 0 && block <= FRAME {
        let mut a = f;
        while a < f + FRAME {
            // SAFETY: `a` is a block-aligned address (frames are 2 MiB
            // aligned, the block a power of two below that) inside a frame
            // that is RAM from the DTB, not used by kestrel, identity mapped
            // as Normal memory and owned by one VM: zeroing it changes
            // nothing else.
            unsafe { core::arch::asm!("dc zva, {}", in(reg) a, options(nostack, preserves_flags)) };
            a += block;
        }
    } else {
        // SAFETY: as above, for the whole frame.
        unsafe { core::ptr::write_bytes(f as *mut u8, 0, FRAME as usize) };
    }
    mmu::clean_dcache_range(f as usize, (f + FRAME) as usize);
}

/// Drops every CPU's instruction cache lines (unless CTR_EL0.DIC says the
/// instruction cache needs no maintenance): a frame just zeroed or loaded
/// may still have its previous contents there.
fn invalidate_icache() {
    if super::regs::mrs!("ctr_el0") & (1 << 29) == 0 {
        // SAFETY: cache maintenance only: instructions are fetched again
        // from memory.
        unsafe { core::arch::asm!("ic ialluis", "dsb ish", options(nostack, preserves_flags)) };
    }
}

/// A VM's RAM: its frames in IPA order, each block's stage-2 entry and its
/// first-touch state ([`Blocks`]).
///
/// Lazy RAM (every VM but identity RAM) starts with nothing mapped: a
/// block is zeroed, cleaned to PoC and mapped at its first touch, the
/// guest's (a stage-2 translation fault: [`VmRam::guest_fault`]) or
/// kestrel's on its behalf ([`VmRam::host_block`]: devices through guest
/// memory, [`VmRam::copy_in`]: images), so a frame's old contents never
/// reach the guest or a device acting for it. Identity RAM (a passthrough
/// device may DMA into any block, touched or not) is zeroed and mapped
/// whole at creation and at every restart.
pub struct VmRam {
    base: u64,
    size: u64,
    frames: Vec<u64>,
    slots: Vec<RamSlot>,
    blocks: Blocks,
    lazy: bool,
    stats: Arc<Stats>,
}

impl VmRam {
    /// `ram` at IPA `base` in `s2`: its tables made, every block left
    /// unmapped (`lazy`) or zeroed and mapped now. `stats` counts the
    /// blocks zeroed lazily.
    pub fn new(
        s2: &mut Stage2,
        base: u64,
        ram: GuestRam,
        lazy: bool,
        stats: &Arc<Stats>,
    ) -> Result<VmRam, String> {
        let slots = (0..ram.frames.len() as u64)
            .map(|i| s2.ram_slot(base + i * FRAME))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("stage 2: {e:?}"))?;
        let r = VmRam {
            base,
            size: ram.size,
            blocks: Blocks::new(ram.frames.len(), !lazy),
            frames: ram.frames,
            slots,
            lazy,
            stats: stats.clone(),
        };
        if !lazy {
            r.map_all();
        }
        Ok(r)
    }

    /// Eager RAM: every frame zeroed and mapped.
    fn map_all(&self) {
        for &f in &self.frames {
            zero_frame(f);
        }
        invalidate_icache();
        for (slot, &f) in self.slots.iter().zip(&self.frames) {
            slot.map(f);
        }
    }

    /// Blocks are zeroed and mapped at their first touch (not identity RAM).
    pub fn is_lazy(&self) -> bool {
        self.lazy
    }

    /// The host frames, in IPA order.
    pub fn frames(&self) -> &[u64] {
        &self.frames
    }

    /// The block holding IPA `ipa`, if it is RAM.
    pub fn block_of(&self, ipa: u64) -> Option<usize> {
        let off = ipa.checked_sub(self.base).filter(|&o| o < self.size)?;
        Some((off / FRAME) as usize)
    }

    /// Claimant's work: zero block `i`'s frame (cleaned to PoC, stale
    /// instructions dropped), then map it.
    fn zero_and_map(&self, i: usize) {
        let (Some(&f), Some(slot)) = (self.frames.get(i), self.slots.get(i)) else {
            return;
        };
        zero_frame(f);
        invalidate_icache();
        slot.map(f);
        self.stats.inc(Counter::LazyZero);
    }

    /// A stage-2 translation fault of the guest on block `i`: zeroes and
    /// maps it if untouched; [`Touch::Busy`] when another pCPU was at it,
    /// which this one then waits for (the zeroing of one block, on a pCPU
    /// that does nothing else meanwhile): returning to the guest at once
    /// made it fault again and again, an exit each time (thousands per
    /// boot when two vCPUs of a VM first touched one block together). The
    /// guest retries the access either way. A block found ready was mapped
    /// before the fault was seen: its entry is written again (the same
    /// value), so the retry cannot fault forever. `None`: not RAM.
    pub fn guest_fault(&self, i: usize) -> Option<Touch> {
        let t = self.blocks.try_touch(i, || self.zero_and_map(i))?;
        match t {
            Touch::Ready => self.slots[i].map(self.frames[i]),
            Touch::Busy => {
                self.blocks
                    .touch(i, || self.zero_and_map(i), crate::base::lock::relax)?;
            }
            Touch::Zeroed => {}
        }
        Some(t)
    }

    /// The host frame of block `i` for kestrel to read or write on the
    /// guest's behalf, zeroed and mapped first if untouched (waiting while
    /// another pCPU zeroes it). `None`: not RAM.
    pub fn host_block(&self, i: usize) -> Option<u64> {
        self.blocks
            .touch(i, || self.zero_and_map(i), crate::base::lock::relax)?;
        self.frames.get(i).copied()
    }

    /// The host frame of block `i` if it is ready (touched), else `None`:
    /// for looking at guest memory without touching it.
    pub fn ready_block(&self, i: usize) -> Option<u64> {
        self.blocks
            .is_ready(i)
            .then(|| self.frames.get(i).copied())
            .flatten()
    }

    /// For a restart (the VM's vCPUs stopped): lazy RAM is unmapped and
    /// untouched again, then every TLB entry goes; identity RAM is zeroed
    /// whole again (it stays mapped).
    ///
    /// `between` runs after each frame zeroed and while waiting for a block
    /// another pCPU zeroes: the caller serves what other pCPUs wait for
    /// from it (their vCPUs' FP registers), so that none waits for all of
    /// this VM's RAM.
    pub fn reset(&self, mut between: impl FnMut()) {
        if self.lazy {
            self.blocks.forget_all(
                |i| self.slots[i].unmap(),
                || {
                    between();
                    crate::base::lock::relax();
                },
            );
            super::stage2::flush_all_vmids();
        } else {
            for &f in &self.frames {
                zero_frame(f);
                between();
            }
            invalidate_icache();
        }
    }

    /// Copies `data` into guest RAM at IPA `gpa` (touching the blocks it
    /// covers), cleaned to the point of coherency.
    pub fn copy_in(&self, gpa: u64, data: &[u8]) -> Result<(), String> {
        let end = gpa
            .checked_add(data.len() as u64)
            .ok_or_else(|| String::from("address overflow"))?;
        let ram_end = self.base + self.size;
        if gpa < self.base || end > ram_end {
            return Err(format!(
                "[{gpa:#x}, {end:#x}) lies outside guest RAM [{:#x}, {ram_end:#x})",
                self.base
            ));
        }
        let mut done = 0usize;
        while done < data.len() {
            let off = gpa - self.base + done as u64;
            let i = (off / FRAME) as usize;
            let f = self
                .host_block(i)
                .ok_or_else(|| String::from("outside guest RAM"))?;
            let within = off % FRAME;
            let n = ((FRAME - within) as usize).min(data.len() - done);
            let dst = (f + within) as usize;
            // SAFETY: `dst..dst + n` lies inside one zeroed frame owned by
            // this VM, identity mapped as Normal memory, and
            // `data[done..done + n]` is a valid source.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(done), dst as *mut u8, n) };
            mmu::clean_dcache_range(dst, dst + n);
            done += n;
        }
        Ok(())
    }
}

/// Private memory for a writable virtio disk of `bytes`: whole frames from
/// `pool` ([`FramePool::alloc_pieces`]), handed out as slices.
pub fn disk_memory(pool: &mut FramePool, bytes: u64) -> Result<Vec<&'static mut [u8]>, String> {
    Ok(pool
        .alloc_pieces(bytes)?
        .into_iter()
        // SAFETY: each frame is RAM from the pool (not used by kestrel),
        // identity mapped at EL2 as Normal memory, and belongs to this
        // disk alone from now on: it is never handed out again (frames are
        // not returned to the pool), so this is the only reference; `n` is
        // at most a frame.
        .map(|(f, n)| unsafe { core::slice::from_raw_parts_mut(f as *mut u8, n) })
        .collect())
}
