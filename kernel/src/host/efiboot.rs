//! What a UEFI entry (boot crate, `efi.rs` of each arch) leaves for the
//! boot path after `ExitBootServices`, on either architecture: the RAM the
//! firmware keeps, the RAM that is free, the RAM runs of the memory map,
//! the configuration tables found, the command line from the image's load
//! options, the firmware's name.
//!
//! The memory map is read by `reserve` (types, alignment, overflow);
//! [`EfiBoot::memory_regions`] turns its free ranges into the few RAM
//! regions a `BoardInfo` holds.

use heapless::Vec;

use crate::host::board::{MemRegion, MAX_MEM_REGIONS};
use crate::host::reserve::{Ranges, ReserveError, UefiRam};

/// A bounded ASCII string taken from the firmware.
pub type EfiText<const N: usize> = heapless::String<N>;

#[derive(Debug)]
pub struct EfiBoot {
    /// Set last: the rest is meaningful.
    pub valid: bool,
    /// Ranges of the final UEFI memory map the firmware keeps (runtime
    /// services, ACPI, reserved, ...), merged.
    pub firmware: Ranges,
    /// Ranges that are free once boot services are gone (conventional,
    /// loader and boot services memory), merged.
    pub free: Ranges,
    /// Every range the map describes as memory (not MMIO): where firmware
    /// tables may be read.
    pub described: Ranges,
    /// The RAM runs of the memory map ([`crate::host::reserve::ram_from_uefi_map`]):
    /// the machine's memory on arm64 when the board comes from ACPI.
    pub ram: UefiRam,
    /// How many descriptors were kept, of how many.
    pub descriptors: usize,
    pub map_entries: usize,
    /// The memory map was malformed: reported, and kestrel stops.
    pub map_error: Option<ReserveError>,
    /// The load options were a printable command line.
    pub has_cmdline: bool,
    pub cmdline: EfiText<256>,
    pub vendor: EfiText<64>,
    /// Where the firmware loaded the image.
    pub load_addr: usize,
    /// Physical address of the ACPI 2.0+ RSDP from the configuration
    /// table (0: none). On arm64 it is set only when there is no device
    /// tree; the tables were then checked by the UEFI stage and cleaned to
    /// the point of coherency.
    pub rsdp: u64,
    /// Physical address of the device tree from the configuration table
    /// (0: none).
    pub dtb: u64,
}

impl EfiBoot {
    pub const fn new() -> EfiBoot {
        EfiBoot {
            valid: false,
            firmware: Ranges::new(),
            free: Ranges::new(),
            described: Ranges::new(),
            ram: UefiRam::new(),
            descriptors: 0,
            map_entries: 0,
            map_error: None,
            has_cmdline: false,
            cmdline: heapless::String::new(),
            vendor: heapless::String::new(),
            load_addr: 0,
            rsdp: 0,
            dtb: 0,
        }
    }

    /// The free RAM as at most [`MAX_MEM_REGIONS`] regions, and the ranges
    /// that must be reserved because of the merging: when the map has more
    /// free ranges than that, the closest neighbours are joined and the gap
    /// between them (memory the firmware keeps, or a hole) is returned to
    /// be kept from guests.
    pub fn memory_regions(&self) -> (Vec<MemRegion, MAX_MEM_REGIONS>, Ranges) {
        regions(&self.free)
    }
}

impl Default for EfiBoot {
    fn default() -> Self {
        EfiBoot::new()
    }
}

/// [`EfiBoot::memory_regions`] for any set of free ranges.
pub fn regions(free: &Ranges) -> (Vec<MemRegion, MAX_MEM_REGIONS>, Ranges) {
    let mut list: alloc::vec::Vec<(u64, u64)> = free.as_slice().to_vec();
    let mut gaps = Ranges::new();
    while list.len() > MAX_MEM_REGIONS {
        // Join the pair with the smallest gap.
        let i = (0..list.len() - 1)
            .min_by_key(|&i| list[i + 1].0 - list[i].1)
            .unwrap_or(0);
        let (s, _) = list[i];
        let (gs, ge) = (list[i].1, list[i + 1].0);
        let (_, e) = list.remove(i + 1);
        list[i] = (s, e);
        gaps.add(gs, ge);
    }
    let mut out = Vec::new();
    for (s, e) in list {
        let _ = out.push(MemRegion {
            base: s,
            size: e - s,
        });
    }
    (out, gaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_ranges_are_regions_as_they_are() {
        let mut free = Ranges::new();
        free.add(0x20_0000, 0x1000_0000);
        free.add(0x8000_0000, 0x9000_0000);
        let (r, gaps) = regions(&free);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[1],
            MemRegion {
                base: 0x8000_0000,
                size: 0x1000_0000
            }
        );
        assert!(gaps.is_empty());
    }

    #[test]
    fn many_ranges_join_the_closest_and_reserve_the_gaps() {
        let mut free = Ranges::new();
        // 12 ranges of 1 MiB with gaps of 4 KiB, except one gap of 1 GiB.
        let mut at = 0u64;
        for i in 0..12u64 {
            free.add(at, at + (1 << 20));
            at += (1 << 20) + if i == 5 { 1 << 30 } else { 0x1000 };
        }
        let (r, gaps) = regions(&free);
        assert_eq!(r.len(), MAX_MEM_REGIONS);
        assert_eq!(gaps.len(), 12 - MAX_MEM_REGIONS);
        assert!(gaps.as_slice().iter().all(|(s, e)| e - s == 0x1000));
        // The big hole is never joined.
        assert!(r.iter().all(|m| m.size < 1 << 30));
        // Regions minus gaps cover exactly the free bytes.
        let total: u64 = r.iter().map(|m| m.size).sum();
        assert_eq!(total - gaps.bytes(), free.bytes());
    }
}
