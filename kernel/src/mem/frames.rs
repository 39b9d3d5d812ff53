//! Host memory for guests, the same on every architecture: a free list of
//! 2 MiB frames over the board's RAM minus what kestrel keeps (its image
//! with .bss, heap and stacks, the boot DTB or the loader's data), and a
//! VM's RAM as a list of such frames in guest order. Nothing here touches
//! memory: the backend zeroes what it gets, maps it (stage 2, shadow TLB)
//! and copies through [`GuestRam::chunks`].

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::host::board::MemRegion;

/// The size (and alignment) of one frame.
pub const FRAME: u64 = 2 << 20;

/// Free physical ranges (start, end), `FRAME` aligned, sorted, disjoint;
/// and the ranges handed out, the same way.
///
/// One owner per frame: the board's memory may list a range twice or
/// overlapping (a device tree's memory nodes, a UEFI map, ACPI ranges,
/// merged by whoever read them or not), so [`FramePool::from_board`]
/// merges it before cutting it into frames. And the pool keeps what it
/// handed out: a frame already out is never handed out again (a cheap
/// look-up in a few ranges), and only frames it handed out come back.
#[derive(Debug, Default)]
pub struct FramePool {
    free: Vec<(u64, u64)>,
    out: Vec<(u64, u64)>,
    /// Frames found both free and handed out (never handed out again).
    refused: u64,
}

/// Sorts `ranges` and merges those that overlap or touch; empty ones go.
pub fn merge_ranges(ranges: &mut Vec<(u64, u64)>) {
    ranges.retain(|&(s, e)| s < e);
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(s, e) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    *ranges = merged;
}

/// Adds `[s, e)` to the sorted, disjoint, merged `set`.
fn range_add(set: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    let i = set.partition_point(|&(_, re)| re < s);
    let mut j = i;
    let (mut ns, mut ne) = (s, e);
    while j < set.len() && set[j].0 <= e {
        ns = ns.min(set[j].0);
        ne = ne.max(set[j].1);
        j += 1;
    }
    set.splice(i..j, core::iter::once((ns, ne)));
}

/// Takes `[s, e)` out of the sorted, disjoint `set`.
fn range_remove(set: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    let mut i = set.partition_point(|&(_, re)| re <= s);
    while i < set.len() && set[i].0 < e {
        let (rs, re) = set[i];
        let mut keep: heapless::Vec<(u64, u64), 2> = heapless::Vec::new();
        if rs < s {
            let _ = keep.push((rs, s));
        }
        if e < re {
            let _ = keep.push((e, re));
        }
        let n = keep.len();
        set.splice(i..=i, keep);
        i += n;
    }
}

/// Whether `[s, e)` overlaps the sorted, disjoint `set`.
fn range_overlaps(set: &[(u64, u64)], s: u64, e: u64) -> bool {
    let i = set.partition_point(|&(_, re)| re <= s);
    i < set.len() && set[i].0 < e
}

/// Whether the sorted, disjoint `set` holds all of `[s, e)`.
fn range_holds(set: &[(u64, u64)], s: u64, e: u64) -> bool {
    let i = set.partition_point(|&(_, re)| re <= s);
    i < set.len() && set[i].0 <= s && e <= set[i].1
}

impl FramePool {
    /// An empty pool.
    pub const fn new() -> FramePool {
        FramePool {
            free: Vec::new(),
            out: Vec::new(),
            refused: 0,
        }
    }

    /// The pool of `memory` minus the `reserved` (start, end) ranges, below
    /// `limit` (the highest address kestrel can reach), cut to whole frames.
    /// Regions that overlap, nest or repeat count once.
    pub fn from_board(memory: &[MemRegion], reserved: &[(u64, u64)], limit: u64) -> FramePool {
        let mut ram: Vec<(u64, u64)> = memory
            .iter()
            .map(|r| (r.base, r.end().min(limit)))
            .collect();
        merge_ranges(&mut ram);
        let mut reserved = reserved.to_vec();
        merge_ranges(&mut reserved);
        let mut free = Vec::new();
        for (rs, re) in ram {
            // Sorted, disjoint reservations: one pass.
            let mut at = rs;
            for &(s, e) in &reserved {
                if e <= at || s >= re {
                    continue;
                }
                if at < s {
                    free.push((at, s));
                }
                at = at.max(e);
                if at >= re {
                    break;
                }
            }
            if at < re {
                free.push((at, re));
            }
        }
        let free = free
            .into_iter()
            .filter_map(|(s, e)| {
                let s = s.div_ceil(FRAME).checked_mul(FRAME)?;
                let e = e / FRAME * FRAME;
                (s < e).then_some((s, e))
            })
            .collect();
        FramePool {
            free,
            out: Vec::new(),
            refused: 0,
        }
    }

    /// Frames the pool found both free and handed out, and so kept back
    /// (0 unless its bookkeeping broke).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Marks `[s, s + n * FRAME)`, just taken from the free list, as
    /// handed out; returns the frames that were out already (kept back,
    /// never handed out twice).
    fn hand_out(&mut self, s: u64, n: u64, frames: &mut Vec<u64>) {
        let e = s + n * FRAME;
        if !range_overlaps(&self.out, s, e) {
            range_add(&mut self.out, s, e);
            frames.extend((0..n).map(|k| s + k * FRAME));
            return;
        }
        for k in 0..n {
            let f = s + k * FRAME;
            if range_overlaps(&self.out, f, f + FRAME) {
                self.refused += 1;
                log::error!("frames: frame {f:#x} is free and handed out: kept back");
            } else {
                range_add(&mut self.out, f, f + FRAME);
                frames.push(f);
            }
        }
    }

    /// Bytes left for guests.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).sum()
    }

    /// Takes `bytes` (rounded up to whole frames) as frames, from the end
    /// of the list; `None`, with nothing taken, when there is not enough.
    pub fn alloc(&mut self, bytes: u64) -> Option<Vec<u64>> {
        let n = bytes.div_ceil(FRAME) as usize;
        let avail: u64 = self.free.iter().map(|(s, e)| (e - s) / FRAME).sum();
        if (avail as usize) < n {
            return None;
        }
        let mut frames = Vec::with_capacity(n);
        while frames.len() < n {
            let Some(&mut (ref mut s, e)) = self.free.last_mut() else {
                // Only when frames were kept back: give back what was taken.
                self.free(&frames);
                return None;
            };
            let take = ((e - *s) / FRAME).min((n - frames.len()) as u64);
            let at = *s;
            *s += take * FRAME;
            if *s == e {
                self.free.pop();
            }
            self.hand_out(at, take, &mut frames);
        }
        Some(frames)
    }

    /// Gives `frames` back (a VM's RAM at its restart or end). Each goes
    /// into the free ranges in address order, joined with its neighbours,
    /// so freeing what [`FramePool::alloc`] took restores the pool it took
    /// it from. A frame that is misaligned, already free or never handed
    /// out is left out (taking it twice would give one frame to two
    /// owners). Returns how many frames came back.
    pub fn free(&mut self, frames: &[u64]) -> usize {
        let mut n = 0;
        for &f in frames {
            if f % FRAME != 0 {
                continue;
            }
            let Some(end) = f.checked_add(FRAME) else {
                continue;
            };
            if !range_holds(&self.out, f, end) {
                continue; // not handed out (or already back)
            }
            range_remove(&mut self.out, f, end);
            // The first range that starts after `f`.
            let i = self.free.partition_point(|&(s, _)| s <= f);
            if i > 0 && self.free[i - 1].1 > f {
                continue; // inside a free range already
            }
            let joins_prev = i > 0 && self.free[i - 1].1 == f;
            let joins_next = i < self.free.len() && self.free[i].0 == end;
            match (joins_prev, joins_next) {
                (true, true) => {
                    self.free[i - 1].1 = self.free[i].1;
                    self.free.remove(i);
                }
                (true, false) => self.free[i - 1].1 = end,
                (false, true) => self.free[i].0 = f,
                (false, false) => self.free.insert(i, (f, end)),
            }
            n += 1;
        }
        n
    }

    /// [`FramePool::alloc`] for a VM of `bytes`, with the message a refused
    /// VM is reported with.
    pub fn alloc_ram(&mut self, bytes: u64) -> Result<GuestRam, String> {
        let free = self.free_bytes();
        self.alloc(bytes)
            .map(|frames| GuestRam {
                frames,
                size: bytes,
            })
            .ok_or_else(|| {
                format!(
                    "memory: {} MiB needed, only {} MiB of host memory left",
                    bytes >> 20,
                    free >> 20
                )
            })
    }
}

impl FramePool {
    /// Memory of `bytes` for one owner that is not a VM's RAM (a writable
    /// virtio disk's private copy): whole frames, as pieces of one frame
    /// each (host physical address, length), the last cut to `bytes`. The
    /// owner holds them for good: nothing gives them back. An error says
    /// how much was needed and what is left.
    pub fn alloc_pieces(&mut self, bytes: u64) -> Result<Vec<(u64, usize)>, String> {
        let ram = self.alloc_ram(bytes.next_multiple_of(FRAME))?;
        let mut left = bytes;
        Ok(ram
            .frames
            .into_iter()
            .map(|f| {
                let n = left.min(FRAME);
                left -= n;
                (f, n as usize)
            })
            .collect())
    }

    /// [`FramePool::alloc_ram`] as one physically contiguous run of frames
    /// (for RAM at IPA == PA): taken from the top of the highest free range
    /// that holds it, so that ranges below stay whole.
    pub fn alloc_contiguous(&mut self, bytes: u64) -> Result<GuestRam, String> {
        let n = bytes.div_ceil(FRAME);
        let need = n * FRAME;
        let Some(i) = self.free.iter().rposition(|(s, e)| e - s >= need) else {
            let largest = self.free.iter().map(|(s, e)| e - s).max().unwrap_or(0);
            return Err(format!(
                "memory: {} MiB of contiguous host memory needed (identity RAM), \
                 the largest free run is {} MiB",
                bytes >> 20,
                largest >> 20
            ));
        };
        let (s, e) = &mut self.free[i];
        *e -= need;
        let base = *e;
        if *s == *e {
            self.free.remove(i);
        }
        if range_overlaps(&self.out, base, base + need) {
            // Never handed out twice: keep them back and refuse.
            let mut none = Vec::new();
            self.hand_out(base, n, &mut none);
            self.free(&none);
            return Err(format!(
                "memory: frames at {base:#x} are both free and handed out (kept back)"
            ));
        }
        range_add(&mut self.out, base, base + need);
        Ok(GuestRam {
            frames: (0..n).map(|k| base + k * FRAME).collect(),
            size: bytes,
        })
    }
}

/// One VM's RAM: `size` bytes, offset `o` in host frame `frames[o / FRAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRam {
    pub frames: Vec<u64>,
    pub size: u64,
}

impl GuestRam {
    /// Host physical address of RAM offset `off`, if inside.
    pub fn hpa(&self, off: u64) -> Option<u64> {
        if off >= self.size {
            return None;
        }
        let f = self.frames.get((off / FRAME) as usize)?;
        Some(f + off % FRAME)
    }

    /// The host pieces of `len` bytes at RAM offset `off`, each inside one
    /// frame: (host physical address, start in the data, length). An error
    /// names the range when it does not fit.
    pub fn chunks(&self, off: u64, len: usize) -> Result<Vec<(u64, usize, usize)>, String> {
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(|| format!("{len} bytes at RAM offset {off:#x} do not fit"))?;
        let mut out = Vec::new();
        let mut at = off;
        while at < end {
            let n = (FRAME - at % FRAME).min(end - at);
            let h = self
                .hpa(at)
                .ok_or_else(|| String::from("outside guest RAM"))?;
            out.push((h, (at - off) as usize, n as usize));
            at += n;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn region(base: u64, size: u64) -> MemRegion {
        MemRegion { base, size }
    }

    #[test]
    fn contiguous_ram_comes_from_one_range_or_not_at_all() {
        let mem = [region(0x4000_0000, 64 * MB), region(0x8000_0000, 16 * MB)];
        let mut p = FramePool::from_board(&mem, &[], u64::MAX);
        // 32 MiB fits only the first range: its top.
        let r = p.alloc_contiguous(32 * MB).unwrap();
        assert_eq!(r.frames.len(), 16);
        assert_eq!(r.frames[0], 0x4000_0000 + 32 * MB);
        assert!(r.frames.windows(2).all(|w| w[1] == w[0] + FRAME));
        // 16 MiB: the highest range that holds it, taken whole.
        let r = p.alloc_contiguous(16 * MB).unwrap();
        assert_eq!(r.frames[0], 0x8000_0000);
        assert_eq!(p.free, [(0x4000_0000, 0x4000_0000 + 32 * MB)]);
        let e = p.alloc_contiguous(34 * MB).unwrap_err();
        assert!(e.contains("the largest free run is 32 MiB"), "{e}");
        assert_eq!(p.free_bytes(), 32 * MB);
    }

    #[test]
    fn the_pool_leaves_out_reserved_ranges_and_partial_frames() {
        // 1 GiB at 1 GiB; kestrel's image in the middle of a frame, the DTB
        // further up; nothing beyond the limit.
        let mem = [region(0x4000_0000, 1024 * MB)];
        let reserved = [(0x4010_0000, 0x4050_0000), (0x4800_0000, 0x4800_1000)];
        let p = FramePool::from_board(&mem, &reserved, 0x6000_0000);
        // [0x4000_0000, 0x4010_0000) is less than a frame: left out.
        assert_eq!(
            p.free,
            [(0x4060_0000, 0x4800_0000), (0x4820_0000, 0x6000_0000)]
        );
        assert_eq!(
            p.free_bytes(),
            (0x4800_0000 - 0x4060_0000) + (0x6000_0000 - 0x4820_0000)
        );
    }

    #[test]
    fn reserving_everything_below_an_end_is_one_range() {
        // LoongArch keeps everything below the end of its image.
        let mem = [region(0, 256 * MB), region(0x9000_0000, 512 * MB)];
        let p = FramePool::from_board(&mem, &[(0, 0x0300_1000)], u64::MAX);
        assert_eq!(
            p.free,
            [(0x0320_0000, 0x1000_0000), (0x9000_0000, 0xb000_0000)]
        );
    }

    #[test]
    fn pieces_are_whole_frames_the_last_cut_to_the_size() {
        let mem = [region(0, 8 * MB)];
        let mut p = FramePool::from_board(&mem, &[], u64::MAX);
        // 5 MiB: three frames, 2 + 2 + 1 MiB of them used.
        let d = p.alloc_pieces(5 * MB).unwrap();
        assert_eq!(
            d,
            [
                (0, FRAME as usize),
                (0x20_0000, FRAME as usize),
                (0x40_0000, MB as usize)
            ]
        );
        assert_eq!(p.free_bytes(), 2 * MB);
        // A whole frame is one piece; nothing is none.
        assert_eq!(p.alloc_pieces(0), Ok(Vec::new()));
        // More than is left: the reason (in whole frames), nothing taken.
        let e = p.alloc_pieces(3 * MB).unwrap_err();
        assert_eq!(e, "memory: 4 MiB needed, only 2 MiB of host memory left");
        assert_eq!(p.free_bytes(), 2 * MB);
        assert_eq!(
            p.alloc_pieces(2 * MB),
            Ok(vec![(0x60_0000, FRAME as usize)])
        );
        assert_eq!(p.free_bytes(), 0);
    }

    #[test]
    fn allocation_takes_whole_frames_from_the_end_or_nothing() {
        let mem = [region(0, 8 * MB), region(0x100_0000, 4 * MB)];
        let mut p = FramePool::from_board(&mem, &[], u64::MAX);
        assert_eq!(p.free_bytes(), 12 * MB);
        // 3 MiB rounds up to two frames, taken from the last range first.
        let a = p.alloc(3 * MB).unwrap();
        assert_eq!(a, [0x100_0000, 0x120_0000]);
        let b = p.alloc(6 * MB).unwrap();
        assert_eq!(b, [0, 0x20_0000, 0x40_0000]);
        assert_eq!(p.free_bytes(), 2 * MB);
        // Too much: refused with the reason, nothing taken.
        let e = p.alloc_ram(4 * MB).unwrap_err();
        assert_eq!(e, "memory: 4 MiB needed, only 2 MiB of host memory left");
        assert_eq!(p.free_bytes(), 2 * MB);
        let r = p.alloc_ram(2 * MB).unwrap();
        assert_eq!(r.frames, [0x60_0000]);
        assert_eq!(p.free_bytes(), 0);
        assert!(p.alloc(1).is_none());
        assert_eq!(p.alloc(0), Some(Vec::new()));
    }

    #[test]
    fn freed_frames_go_back_joined_and_are_handed_out_again() {
        let mem = [region(0, 8 * MB), region(0x100_0000, 8 * MB)];
        let mut p = FramePool::from_board(&mem, &[], u64::MAX);
        let start = p.free.clone();
        let a = p.alloc(6 * MB).unwrap();
        let b = p.alloc(4 * MB).unwrap();
        let c = p.alloc(4 * MB).unwrap();
        assert_eq!(p.free_bytes(), 2 * MB);
        // Freed out of order: the ranges are joined back.
        assert_eq!(p.free(&b), 2);
        assert_eq!(p.free(&a), 3);
        assert_eq!(p.free(&c), 2);
        assert_eq!(p.free, start);
        // A double free, a misaligned or overflowing frame: nothing taken.
        assert_eq!(p.free(&[0, 0x20_0000, 0x1234, !(FRAME - 1)]), 0);
        assert_eq!(p.free, start);
        // The same size again, 100 times: the pool ends where it started.
        for _ in 0..100 {
            let r = p.alloc_ram(6 * MB).unwrap();
            let s = p.alloc_ram(2 * MB).unwrap();
            assert_eq!(p.free(&r.frames), 3);
            assert_eq!(p.free(&s.frames), 1);
        }
        assert_eq!(p.free, start);
        // Frames from a split range: the hole is filled back.
        let mut q = FramePool::from_board(&[region(0, 8 * MB)], &[], u64::MAX);
        let x = q.alloc(2 * MB).unwrap();
        let y = q.alloc(2 * MB).unwrap();
        assert_eq!(q.free(&x), 1);
        assert_eq!(q.free, [(0, 2 * MB), (4 * MB, 8 * MB)]);
        assert_eq!(q.free(&y), 1);
        assert_eq!(q.free, [(0, 8 * MB)]);
    }

    /// Every frame handed out by `p` until it is empty: each once, inside
    /// `mem`, outside `reserved`.
    fn drain_and_check(p: &mut FramePool, mem: &[(u64, u64)], reserved: &[(u64, u64)]) -> usize {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(fs) = p.alloc(3 * FRAME).or_else(|| p.alloc(FRAME)) {
            for f in fs {
                assert!(seen.insert(f), "frame {f:#x} handed out twice");
                assert!(mem.iter().any(|&(s, e)| s <= f && f + FRAME <= e));
                assert!(!reserved.iter().any(|&(s, e)| s < f + FRAME && f < e));
            }
        }
        assert_eq!(p.free_bytes(), 0);
        seen.len()
    }

    /// Issue 22 item 5: a tree listing 256 MiB twice gave 508 MiB and two
    /// VMs shared frames. Overlapping, repeated, nested and adjacent
    /// regions count once.
    #[test]
    fn overlapping_nested_and_adjacent_regions_count_once() {
        let g = 0x4000_0000;
        for (mem, frames) in [
            // The same 256 MiB twice.
            (alloc::vec![region(g, 256 * MB), region(g, 256 * MB)], 128),
            // Overlapping by 64 MiB.
            (
                alloc::vec![region(g, 256 * MB), region(g + 192 * MB, 128 * MB)],
                160,
            ),
            // Nested, listed outer last.
            (
                alloc::vec![region(g + 32 * MB, 16 * MB), region(g, 256 * MB)],
                128,
            ),
            // Adjacent: joined, a frame straddling the seam included.
            (
                alloc::vec![
                    region(g + 128 * MB + MB, 127 * MB),
                    region(g, 128 * MB + MB)
                ],
                128,
            ),
        ] {
            let mut ranges: Vec<(u64, u64)> = mem.iter().map(|r| (r.base, r.end())).collect();
            merge_ranges(&mut ranges);
            let mut p = FramePool::from_board(&mem, &[], u64::MAX);
            assert_eq!(p.free_bytes(), frames * FRAME, "{mem:?}");
            assert_eq!(drain_and_check(&mut p, &ranges, &[]), frames as usize);
            assert_eq!(p.refused(), 0);
        }
        // Reservations that overlap each other and the regions.
        let mem = [region(g, 64 * MB), region(g + 32 * MB, 64 * MB)];
        let reserved = [
            (g + 3 * MB, g + 9 * MB),
            (g + 8 * MB, g + 10 * MB),
            (g, g + MB),
        ];
        let mut p = FramePool::from_board(&mem, &reserved, u64::MAX);
        assert_eq!(p.free, [(g + 10 * MB, g + 96 * MB)]);
        drain_and_check(&mut p, &[(g, g + 96 * MB)], &reserved);
    }

    #[test]
    fn merging_ranges() {
        let mut r = alloc::vec![(5, 9), (0, 2), (2, 3), (7, 8), (20, 20), (10, 12), (1, 2)];
        merge_ranges(&mut r);
        assert_eq!(r, [(0, 3), (5, 9), (10, 12)]);
        let mut set = alloc::vec![(0, 10), (20, 30)];
        range_add(&mut set, 10, 20);
        assert_eq!(set, [(0, 30)]);
        range_remove(&mut set, 5, 25);
        assert_eq!(set, [(0, 5), (25, 30)]);
        range_remove(&mut set, 0, 100);
        assert!(set.is_empty());
    }

    /// The pool's own check: a frame that is free and out at once (its
    /// free list broken by hand here) is never handed out again, and
    /// frames it never handed out do not come back.
    #[test]
    fn a_frame_already_handed_out_is_refused() {
        let mut p = FramePool::from_board(&[region(0, 8 * MB)], &[], u64::MAX);
        let a = p.alloc(2 * MB).unwrap();
        assert_eq!(a, [0]);
        // Corrupt the free list: frame 0 is free again, without a free.
        p.free = alloc::vec![(0, 8 * MB)];
        let b = p.alloc(8 * MB);
        assert_eq!(b, None, "only 3 frames are really free");
        assert_eq!(p.refused(), 1);
        let b = p.alloc(6 * MB).unwrap();
        assert!(!b.contains(&0));
        assert_eq!(b.len(), 3);
        // Contiguous: refused when its run holds a frame already out.
        let mut q = FramePool::from_board(&[region(0, 8 * MB)], &[], u64::MAX);
        let c = q.alloc_contiguous(2 * MB).unwrap();
        q.free = alloc::vec![(0, 8 * MB)];
        let e = q.alloc_contiguous(4 * MB).unwrap_err();
        assert!(e.contains("both free and handed out"), "{e}");
        assert!(!q
            .free
            .iter()
            .any(|&(s, e)| s < c.frames[0] + FRAME && c.frames[0] < e));
        // Never handed out: not taken back.
        let mut r = FramePool::from_board(&[region(0, 8 * MB)], &[], u64::MAX);
        let _ = r.alloc(2 * MB).unwrap();
        assert_eq!(r.free(&[4 * MB]), 0);
        assert_eq!(r.free(&[0, 0]), 1, "once");
        assert_eq!(r.free_bytes(), 8 * MB);
    }

    #[test]
    fn copies_split_at_frame_ends() {
        let ram = GuestRam {
            frames: alloc::vec![0x1000_0000, 0x2000_0000],
            size: 2 * FRAME,
        };
        assert_eq!(ram.hpa(FRAME + 5), Some(0x2000_0005));
        assert_eq!(ram.hpa(2 * FRAME), None);
        let c = ram.chunks(FRAME - 3, 10).unwrap();
        assert_eq!(c, [(0x1000_0000 + FRAME - 3, 0, 3), (0x2000_0000, 3, 7)]);
        assert_eq!(ram.chunks(0, 0).unwrap(), []);
        assert!(ram.chunks(2 * FRAME - 1, 2).is_err());
        assert!(ram.chunks(u64::MAX, 2).is_err());
        assert_eq!(
            ram.chunks(2 * FRAME, 1).unwrap_err(),
            "1 bytes at RAM offset 0x400000 do not fit"
        );
    }
}
