//! RAM the firmware keeps for itself: it must never become guest RAM.
//!
//! Two sources, read the same way on every board:
//!
//! - the device tree: its `/memreserve/` block and the `reg` of every
//!   child of `/reserved-memory` ([`from_dtb`]);
//! - the UEFI memory map taken at `ExitBootServices` ([`from_uefi_map`]):
//!   runtime services code and data, ACPI tables and NVS, reserved,
//!   unusable, persistent and unaccepted memory, MMIO and PAL code stay the
//!   firmware's after boot services end. Loader and boot services memory
//!   and conventional memory are free. A device tree edk2 hands over does
//!   not list its runtime regions, so this is the only place they show.
//!
//! The ranges go into a [`Ranges`] set, which kestrel subtracts from the
//! RAM it gives to VMs (`frames::FramePool::from_board`). A malformed map
//! or reservation block is an error naming the field.

use core::fmt;

use heapless::Vec;

/// Most reserved ranges kept (after merging); beyond that neighbours are
/// merged, which reserves the gap too (safe: less guest RAM, never more).
pub const MAX_RANGES: usize = 64;

/// A set of `[start, end)` physical ranges, sorted, disjoint and not
/// adjacent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    list: Vec<(u64, u64), MAX_RANGES>,
}

impl Ranges {
    pub const fn new() -> Ranges {
        Ranges { list: Vec::new() }
    }

    pub fn as_slice(&self) -> &[(u64, u64)] {
        &self.list
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Total bytes covered.
    pub fn bytes(&self) -> u64 {
        self.list.iter().map(|(s, e)| e - s).sum()
    }

    /// Adds `[start, end)` (empty ranges are ignored), merging with what
    /// it overlaps or touches. When the set is full, the new range is
    /// merged with its nearest neighbour (the gap between is reserved too).
    pub fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // Take out every range that overlaps or touches [s, e).
        let mut i = 0;
        while i < self.list.len() {
            let (rs, re) = self.list[i];
            if re >= s && rs <= e {
                s = s.min(rs);
                e = e.max(re);
                self.list.remove(i);
            } else {
                i += 1;
            }
        }
        let at = self
            .list
            .iter()
            .position(|&(rs, _)| rs > s)
            .unwrap_or(self.list.len());
        if self.list.is_full() {
            // Merge with the nearer neighbour.
            let left = at.checked_sub(1).map(|j| (j, s - self.list[j].1));
            let right = self.list.get(at).map(|&(rs, _)| (at, rs - e));
            let j = match (left, right) {
                (Some((l, gl)), Some((r, gr))) => {
                    if gl <= gr {
                        l
                    } else {
                        r
                    }
                }
                (Some((l, _)), None) => l,
                (None, Some((r, _))) => r,
                (None, None) => return,
            };
            let (rs, re) = self.list.remove(j);
            return self.add(s.min(rs), e.max(re));
        }
        // Cannot fail: the set was not full.
        let _ = self.list.insert(at, (s, e));
    }
}

impl Ranges {
    /// [`Ranges::add`] for a set that must never grow beyond what was
    /// added (free memory): when the set is full and `[start, end)` touches
    /// none of its ranges, it is left out instead of joined over a gap.
    /// Returns whether it was added.
    pub fn add_exact(&mut self, start: u64, end: u64) -> bool {
        let touches = self.list.iter().any(|&(s, e)| e >= start && s <= end);
        if self.list.is_full() && !touches {
            return false;
        }
        self.add(start, end);
        true
    }
}

/// What is wrong with a reservation source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveError {
    /// The UEFI memory map's DescriptorSize is below the 40 bytes of a
    /// version-1 descriptor, or not a multiple of 8.
    DescriptorSize(usize),
    /// The map's size is not a whole number of descriptors.
    MapSize { size: usize, descriptor: usize },
    /// Descriptor `index`: PhysicalStart + NumberOfPages * 4096 overflows,
    /// or PhysicalStart is not 4 KiB aligned.
    Descriptor {
        index: usize,
        start: u64,
        pages: u64,
    },
    /// The device tree's `/memreserve/` block runs past the blob, or an
    /// entry's address + size overflows.
    MemReserve { index: usize },
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReserveError::DescriptorSize(n) => write!(
                f,
                "UEFI memory map: DescriptorSize {n} is not a multiple of 8 of at least 40 bytes"
            ),
            ReserveError::MapSize { size, descriptor } => write!(
                f,
                "UEFI memory map: MemoryMapSize {size} is not a whole number of {descriptor}-byte descriptors"
            ),
            ReserveError::Descriptor { index, start, pages } => write!(
                f,
                "UEFI memory map: descriptor {index}: PhysicalStart {start:#x} with NumberOfPages {pages:#x} \
                 is not 4 KiB aligned or runs past the end of the address space"
            ),
            ReserveError::MemReserve { index } => write!(
                f,
                "device tree: /memreserve/ entry {index} runs past the blob or wraps the address space"
            ),
        }
    }
}

/// UEFI memory types (UEFI 2.10, 7.2 `EFI_MEMORY_TYPE`) that are free once
/// boot services have ended: loader code/data, boot services code/data,
/// conventional memory. Every other type, known or not, stays reserved.
pub fn uefi_type_is_free(ty: u32) -> bool {
    matches!(ty, 1..=4 | 7)
}

/// A version-1 `EFI_MEMORY_DESCRIPTOR`: Type (u32), pad, PhysicalStart,
/// VirtualStart, NumberOfPages, Attribute (u64 each).
const UEFI_DESC_MIN: usize = 40;

fn le_u32(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

fn le_u64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

/// One descriptor of a UEFI memory map, checked: its type, `[start, end)`
/// and its attributes.
struct UefiDesc {
    ty: u32,
    start: u64,
    end: u64,
    attr: u64,
}

/// Checks the shape of the UEFI memory map `map` (`desc_size` bytes per
/// descriptor) and calls `f` with each descriptor in order; the first
/// descriptor that is not 4 KiB aligned or runs past the end of the
/// address space stops the walk with its error.
fn walk_uefi_map(
    map: &[u8],
    desc_size: usize,
    mut f: impl FnMut(UefiDesc),
) -> Result<(), ReserveError> {
    if desc_size < UEFI_DESC_MIN || !desc_size.is_multiple_of(8) {
        return Err(ReserveError::DescriptorSize(desc_size));
    }
    if !map.len().is_multiple_of(desc_size) {
        return Err(ReserveError::MapSize {
            size: map.len(),
            descriptor: desc_size,
        });
    }
    for (index, d) in map.chunks_exact(desc_size).enumerate() {
        let (ty, start, pages, attr) = (le_u32(d, 0), le_u64(d, 8), le_u64(d, 24), le_u64(d, 32));
        let end = pages
            .checked_mul(4096)
            .and_then(|len| start.checked_add(len))
            .filter(|_| start.is_multiple_of(4096))
            .ok_or(ReserveError::Descriptor {
                index,
                start,
                pages,
            })?;
        f(UefiDesc {
            ty,
            start,
            end,
            attr,
        });
    }
    Ok(())
}

/// Adds every range of the UEFI memory map `map` (as `GetMemoryMap`
/// returned it, `desc_size` bytes per descriptor) that the firmware keeps
/// after `ExitBootServices` to `out`. Returns how many descriptors were
/// reserved.
pub fn from_uefi_map(
    map: &[u8],
    desc_size: usize,
    out: &mut Ranges,
) -> Result<usize, ReserveError> {
    let mut n = 0;
    walk_uefi_map(map, desc_size, |d| {
        if !uefi_type_is_free(d.ty) && d.end > d.start {
            out.add(d.start, d.end);
            n += 1;
        }
    })?;
    Ok(n)
}

/// UEFI memory types that are RAM: loader, boot services and runtime
/// services code and data, conventional memory, ACPI reclaim and ACPI NVS
/// memory (types 1 to 7, 9 and 10).
pub fn uefi_type_is_ram(ty: u32) -> bool {
    matches!(ty, 1..=7 | 9 | 10)
}

/// `EFI_MEMORY_WB`: the range supports write-back caching (kestrel maps
/// RAM as Normal write-back memory).
const EFI_MEMORY_WB: u64 = 1 << 3;

/// The RAM of a UEFI memory map, when no device tree describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UefiRam {
    /// Runs of RAM (descriptors of a RAM type with the write-back
    /// attribute, adjacent ones joined), the largest
    /// [`crate::host::board::MAX_MEM_REGIONS`], by address.
    pub regions: Vec<crate::host::board::MemRegion, { crate::host::board::MAX_MEM_REGIONS }>,
    /// Runs left out (smaller than those kept).
    pub dropped: usize,
}

impl UefiRam {
    pub const fn new() -> UefiRam {
        UefiRam {
            regions: Vec::new(),
            dropped: 0,
        }
    }
}

/// Reads the RAM of the UEFI memory map `map` (`desc_size` bytes per
/// descriptor): what firmware that hands over ACPI tables instead of a
/// device tree gives as the machine's memory. The firmware's own ranges
/// among it are kept from guests by [`from_uefi_map`].
pub fn ram_from_uefi_map(map: &[u8], desc_size: usize) -> Result<UefiRam, ReserveError> {
    let mut runs: Vec<(u64, u64), MAX_RANGES> = Vec::new();
    let mut dropped = 0;
    walk_uefi_map(map, desc_size, |d| {
        if !uefi_type_is_ram(d.ty) || d.attr & EFI_MEMORY_WB == 0 || d.end == d.start {
            return;
        }
        // Join every run this one overlaps or touches.
        let (mut s, mut e) = (d.start, d.end);
        runs.retain(|&(rs, re)| {
            let joins = re >= s && rs <= e;
            if joins {
                s = s.min(rs);
                e = e.max(re);
            }
            !joins
        });
        if runs.push((s, e)).is_err() {
            dropped += 1;
        }
    })?;
    // The largest runs, then by address.
    runs.sort_unstable_by_key(|&(s, e)| core::cmp::Reverse(e - s));
    let mut out = UefiRam::new();
    out.dropped = dropped;
    for &(s, e) in &runs {
        let r = crate::host::board::MemRegion {
            base: s,
            size: e - s,
        };
        if out.regions.push(r).is_err() {
            out.dropped += 1;
        }
    }
    out.regions.sort_unstable_by_key(|r| r.base);
    Ok(out)
}

/// Adds the device tree's reservations to `out`: the `/memreserve/` block
/// (16-byte big-endian address/size pairs up to a 0/0 pair) and the `reg`
/// of every child of `/reserved-memory`. `blob` must be a tree that
/// `dtb::Tree::new` accepted.
pub fn from_dtb(blob: &[u8], out: &mut Ranges) -> Result<(), ReserveError> {
    let be = |off: usize| -> Option<u64> {
        let w = blob.get(off..off.checked_add(8)?)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        Some(u64::from_be_bytes(a))
    };
    let rsv = blob
        .get(16..20)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as usize)
        .ok_or(ReserveError::MemReserve { index: 0 })?;
    for index in 0.. {
        let off = rsv + index * 16;
        let (Some(addr), Some(size)) = (be(off), be(off + 8)) else {
            return Err(ReserveError::MemReserve { index });
        };
        if addr == 0 && size == 0 {
            break;
        }
        let end = addr
            .checked_add(size)
            .ok_or(ReserveError::MemReserve { index })?;
        out.add(addr, end);
    }
    if let Ok(tree) = crate::host::dtb::Tree::new(blob) {
        if let Some(node) = tree.find("/reserved-memory") {
            for child in node.children() {
                for (base, size) in child.reg().into_iter().flatten() {
                    out.add(base, base.saturating_add(size));
                }
            }
        }
    }
    Ok(())
}

/// UEFI memory types that are not memory: unusable (8), memory-mapped I/O
/// (11) and I/O port space (12).
fn uefi_type_is_memory(ty: u32) -> bool {
    !matches!(ty, 8 | 11 | 12)
}

/// [`from_uefi_map`] that also sorts the rest: the ranges the firmware
/// keeps go to `firmware`, the free ones ([`uefi_type_is_free`]) to
/// `free`, and every range that is memory (not MMIO, I/O ports or
/// unusable) to `described` (where firmware tables may be read). The free
/// and described sets only ever hold what the map lists (beyond
/// [`MAX_RANGES`] separate ranges, the rest is left out); the firmware's
/// set may be widened over gaps, which only keeps more from guests.
/// Returns how many descriptors went to `firmware`.
pub fn split_uefi_map(
    map: &[u8],
    desc_size: usize,
    firmware: &mut Ranges,
    free: &mut Ranges,
    described: &mut Ranges,
) -> Result<usize, ReserveError> {
    let mut n = 0;
    walk_uefi_map(map, desc_size, |d| {
        if d.end == d.start {
            return;
        }
        if uefi_type_is_memory(d.ty) {
            described.add_exact(d.start, d.end);
        }
        if uefi_type_is_free(d.ty) {
            // Never widened over a gap: a range that would not fit is
            // left out (less guest RAM, never memory that is not free).
            free.add_exact(d.start, d.end);
        } else {
            firmware.add(d.start, d.end);
            n += 1;
        }
    })?;
    // A range listed twice with different types (a firmware bug) is kept
    // from guests: the reserved ranges are subtracted from the free ones
    // by whoever uses both.
    Ok(n)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec as StdVec;

    fn desc(ty: u32, start: u64, pages: u64, size: usize) -> StdVec<u8> {
        let mut d = std::vec![0u8; size];
        d[0..4].copy_from_slice(&ty.to_le_bytes());
        d[8..16].copy_from_slice(&start.to_le_bytes());
        d[16..24].copy_from_slice(&start.to_le_bytes());
        d[24..32].copy_from_slice(&pages.to_le_bytes());
        d
    }

    fn ram_desc(ty: u32, start: u64, pages: u64, wb: bool) -> StdVec<u8> {
        let mut d = desc(ty, start, pages, 48);
        d[32..40].copy_from_slice(&(if wb { 0xfu64 } else { 1 }).to_le_bytes());
        d
    }

    #[test]
    fn uefi_ram_joins_ram_types() {
        let mut map = StdVec::new();
        map.extend(ram_desc(7, 0x4000_0000, 0x100, true)); // conventional
        map.extend(ram_desc(9, 0x4010_0000, 0x10, true)); // ACPI reclaim, adjacent
        map.extend(ram_desc(6, 0x4011_0000, 0x10, true)); // runtime data, adjacent
        map.extend(ram_desc(11, 0x0900_0000, 1, true)); // MMIO: not RAM
        map.extend(ram_desc(0, 0x4012_0000, 0x10, true)); // reserved: a hole
        map.extend(ram_desc(2, 0x4013_0000, 0x10, true)); // loader data
        map.extend(ram_desc(7, 0x8000_0000, 0x10, false)); // no WB: not RAM
        map.extend(ram_desc(7, 0x4000_0000, 0x10, true)); // overlapping: joined
        let r = ram_from_uefi_map(&map, 48).unwrap();
        assert_eq!(
            r.regions.as_slice(),
            [
                crate::host::board::MemRegion {
                    base: 0x4000_0000,
                    size: 0x12_0000
                },
                crate::host::board::MemRegion {
                    base: 0x4013_0000,
                    size: 0x1_0000
                }
            ]
        );
        assert_eq!(r.dropped, 0);
    }

    #[test]
    fn uefi_ram_keeps_the_largest_runs() {
        let mut map = StdVec::new();
        // Twelve separate runs, the i-th i+1 pages long.
        for i in 0..12u64 {
            map.extend(ram_desc(7, 0x1000_0000 * (i + 1), i + 1, true));
        }
        let r = ram_from_uefi_map(&map, 48).unwrap();
        assert_eq!(r.regions.len(), crate::host::board::MAX_MEM_REGIONS);
        assert_eq!(r.dropped, 12 - crate::host::board::MAX_MEM_REGIONS);
        assert!(r.regions.iter().all(|m| m.size >= 5 * 4096));
        assert!(r.regions.windows(2).all(|w| w[0].base < w[1].base));
    }

    #[test]
    fn uefi_ram_malformed_maps() {
        assert_eq!(
            ram_from_uefi_map(&[0; 48], 24),
            Err(ReserveError::DescriptorSize(24))
        );
        assert!(matches!(
            ram_from_uefi_map(&[0; 50], 48),
            Err(ReserveError::MapSize { .. })
        ));
        let map = ram_desc(7, u64::MAX - 0xfff, 2, true);
        assert!(matches!(
            ram_from_uefi_map(&map, 48),
            Err(ReserveError::Descriptor { index: 0, .. })
        ));
    }

    #[test]
    fn free_ranges_never_grow_over_gaps() {
        let mut r = Ranges::new();
        for i in 0..MAX_RANGES as u64 {
            assert!(r.add_exact(i * 0x2000, i * 0x2000 + 0x1000));
        }
        let before = r.bytes();
        // A new separate range does not fit: left out, nothing joined.
        assert!(!r.add_exact(0x100_0000, 0x100_1000));
        assert_eq!(r.bytes(), before);
        // One that touches an existing range still joins it.
        assert!(r.add_exact(0x1000, 0x1800));
        assert_eq!(r.bytes(), before + 0x800);
        assert_eq!(r.len(), MAX_RANGES);
    }

    #[test]
    fn split_sorts_free_firmware_and_memory() {
        let mut map = StdVec::new();
        map.extend(desc(7, 0x20_0000, 0x100, 48)); // conventional
        map.extend(desc(4, 0x30_0000, 0x10, 48)); // boot services data: free
        map.extend(desc(9, 0x40_0000, 0x10, 48)); // ACPI reclaim
        map.extend(desc(11, 0x1fe0_0000, 1, 48)); // MMIO
        map.extend(desc(7, 0x8000_0000, 0, 48)); // empty: ignored
        let (mut fw, mut free, mut mem) = (Ranges::new(), Ranges::new(), Ranges::new());
        let n = split_uefi_map(&map, 48, &mut fw, &mut free, &mut mem).unwrap();
        assert_eq!(n, 2);
        assert_eq!(free.as_slice(), &[(0x20_0000, 0x31_0000)]);
        assert_eq!(
            fw.as_slice(),
            &[(0x40_0000, 0x41_0000), (0x1fe0_0000, 0x1fe0_1000)]
        );
        assert_eq!(
            mem.as_slice(),
            &[(0x20_0000, 0x31_0000), (0x40_0000, 0x41_0000)]
        );
    }

    #[test]
    fn ranges_merge_and_sort() {
        let mut r = Ranges::new();
        r.add(0x3000, 0x4000);
        r.add(0x1000, 0x2000);
        r.add(0x2000, 0x2800); // touches the first: merged
        r.add(0x5000, 0x5000); // empty: ignored
        assert_eq!(r.as_slice(), &[(0x1000, 0x2800), (0x3000, 0x4000)]);
        r.add(0x0, 0x10000);
        assert_eq!(r.as_slice(), &[(0, 0x10000)]);
        assert_eq!(r.bytes(), 0x10000);
    }

    #[test]
    fn a_full_set_merges_the_nearest_neighbour() {
        let mut r = Ranges::new();
        for i in 0..MAX_RANGES as u64 {
            r.add(i * 0x10000, i * 0x10000 + 0x1000);
        }
        assert_eq!(r.len(), MAX_RANGES);
        // Closer to the range at 0x20000 than to the one at 0x30000.
        r.add(0x22000, 0x23000);
        assert_eq!(r.len(), MAX_RANGES);
        assert!(r.as_slice().contains(&(0x20000, 0x23000)));
        // Everything asked for is still covered.
        for i in 0..MAX_RANGES as u64 {
            let s = i * 0x10000;
            assert!(r.as_slice().iter().any(|&(a, b)| a <= s && s + 0x1000 <= b));
        }
    }

    #[test]
    fn uefi_map_keeps_runtime_and_acpi() {
        let mut map = StdVec::new();
        map.extend(desc(7, 0x4000_0000, 0x1000, 48)); // conventional
        map.extend(desc(2, 0x4100_0000, 0x10, 48)); // loader data
        map.extend(desc(4, 0x4200_0000, 0x10, 48)); // boot services data
        map.extend(desc(5, 0x7f00_0000, 0x20, 48)); // runtime code
        map.extend(desc(6, 0x7f02_0000, 0x10, 48)); // runtime data (adjacent)
        map.extend(desc(9, 0x7e00_0000, 0x4, 48)); // ACPI reclaim
        map.extend(desc(10, 0x7e10_0000, 0x1, 48)); // ACPI NVS
        map.extend(desc(11, 0x0900_0000, 0x1, 48)); // MMIO
        map.extend(desc(99, 0x7d00_0000, 0x1, 48)); // unknown: kept
        let mut r = Ranges::new();
        assert_eq!(from_uefi_map(&map, 48, &mut r), Ok(6));
        assert_eq!(
            r.as_slice(),
            &[
                (0x0900_0000, 0x0900_1000),
                (0x7d00_0000, 0x7d00_1000),
                (0x7e00_0000, 0x7e00_4000),
                (0x7e10_0000, 0x7e10_1000),
                (0x7f00_0000, 0x7f03_0000),
            ]
        );
    }

    #[test]
    fn malformed_uefi_maps_are_named() {
        let mut r = Ranges::new();
        assert_eq!(
            from_uefi_map(&[0; 48], 24, &mut r),
            Err(ReserveError::DescriptorSize(24))
        );
        assert_eq!(
            from_uefi_map(&[0; 50], 48, &mut r),
            Err(ReserveError::MapSize {
                size: 50,
                descriptor: 48
            })
        );
        let bad = desc(5, u64::MAX - 0xfff, 2, 48);
        assert!(matches!(
            from_uefi_map(&bad, 48, &mut r),
            Err(ReserveError::Descriptor { index: 0, .. })
        ));
        let unaligned = desc(5, 0x1234, 1, 48);
        assert!(from_uefi_map(&unaligned, 48, &mut r).is_err());
        let e = from_uefi_map(&bad, 48, &mut r).unwrap_err();
        assert!(std::format!("{e}").contains("NumberOfPages"));
        // Larger descriptors (newer firmware) are read by their first 40 bytes.
        assert_eq!(from_uefi_map(&desc(6, 0x1000, 1, 56), 56, &mut r), Ok(1));
    }

    /// A minimal tree: header, `rsv` memreserve pairs, an empty root.
    fn blob_with(rsv: &[(u64, u64)], terminate: bool) -> StdVec<u8> {
        let mut rsvmap = StdVec::new();
        for &(a, s) in rsv {
            rsvmap.extend(a.to_be_bytes());
            rsvmap.extend(s.to_be_bytes());
        }
        if terminate {
            rsvmap.extend([0u8; 16]);
        }
        let structs: StdVec<u8> = [1u32, 0, 2, 9]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        let off_rsv = 40usize;
        let off_struct = off_rsv + rsvmap.len();
        let off_strings = off_struct + structs.len();
        let total = off_strings;
        let mut h = StdVec::new();
        for w in [
            0xd00d_feedu32,
            total as u32,
            off_struct as u32,
            off_strings as u32,
            off_rsv as u32,
            17,
            16,
            0,
            0,
            structs.len() as u32,
        ] {
            h.extend(w.to_be_bytes());
        }
        h.extend(rsvmap);
        h.extend(structs);
        h
    }

    #[test]
    fn dtb_memreserve_block() {
        let b = blob_with(&[(0x4800_0000, 0x10_0000), (0x4000_0000, 0x1000)], true);
        assert!(crate::host::dtb::Tree::new(&b).is_ok());
        let mut r = Ranges::new();
        assert_eq!(from_dtb(&b, &mut r), Ok(()));
        assert_eq!(
            r.as_slice(),
            &[(0x4000_0000, 0x4000_1000), (0x4800_0000, 0x4810_0000)]
        );
        let wraps = blob_with(&[(u64::MAX, 2)], true);
        assert_eq!(
            from_dtb(&wraps, &mut r),
            Err(ReserveError::MemReserve { index: 0 })
        );
    }
}
