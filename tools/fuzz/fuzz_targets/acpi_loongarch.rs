//! The LoongArch ACPI reader (`kernel::host::acpi::loongarch`): arbitrary bytes as physical memory with
//! the RSDP at its start are read or refused, never a panic. So that the
//! fuzzer gets past the checksums, the input is fixed up first: the RSDP's
//! signature, revision 2 and checksums, its XSDT pointer folded into the
//! image, and every table the XSDT lists (pointers folded in too) with its
//! length bounded by the image and its checksum corrected. What is read is
//! sane: cores within the limit with distinct physical IDs and UIDs,
//! distances only for the localities kept, a board built from it.
#![no_main]

use kernel::host::acpi::loongarch::{self as acpi, MAX_CORES, MAX_NODES};
use kernel::host::acpi::PhysMem;
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 0x10_0000;

struct Img(Vec<u8>);

impl PhysMem for Img {
    fn read(&self, pa: u64, len: usize) -> Option<&[u8]> {
        let off = usize::try_from(pa.checked_sub(BASE)?).ok()?;
        self.0.get(off..off.checked_add(len)?)
    }
}

fn fix(t: &mut [u8], at: usize) {
    t[at] = 0;
    let s = t.iter().fold(0u8, |a, &x| a.wrapping_add(x));
    t[at] = 0u8.wrapping_sub(s);
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// Folds the pointer at `at` into the image (8-byte aligned, room for a
/// header) and fixes the table there: length bounded, checksum corrected.
/// Returns the table's offset and length.
fn fold_table(b: &mut [u8], at: usize, wide: bool) -> Option<(usize, usize)> {
    let room = b.len().checked_sub(36)?;
    let raw = if wide {
        u64_at(b, at)
    } else {
        u64::from(u32_at(b, at))
    };
    let off = ((raw % (room as u64 + 1)) as usize) & !7;
    let pa = BASE + off as u64;
    if wide {
        b[at..at + 8].copy_from_slice(&pa.to_le_bytes());
    } else {
        b[at..at + 4].copy_from_slice(&(pa as u32).to_le_bytes());
    }
    let max = b.len() - off;
    let len = (u32_at(b, off + 4) as usize).clamp(36, max);
    b[off + 4..off + 8].copy_from_slice(&(len as u32).to_le_bytes());
    fix(&mut b[off..off + len], 9);
    Some((off, len))
}

fuzz_target!(|data: &[u8]| {
    let mut b = data.to_vec();
    if b.len() >= 36 + 36 && BASE.checked_add(b.len() as u64).is_some() {
        b[..8].copy_from_slice(b"RSD PTR ");
        b[15] = 2;
        b[20..24].copy_from_slice(&36u32.to_le_bytes());
        if let Some((xoff, xlen)) = fold_table(&mut b, 24, true) {
            b[xoff..xoff + 4].copy_from_slice(b"XSDT");
            let entries = (xlen - 36) / 8;
            for i in 0..entries.min(16) {
                let at = xoff + 36 + i * 8;
                let _ = fold_table(&mut b, at, true);
            }
            // Entries may overlap the XSDT itself: fix it last.
            fix(&mut b[xoff..xoff + xlen], 9);
        }
        fix(&mut b[..20], 8);
        fix(&mut b[..36], 32);
    }
    let img = Img(b);
    if let Ok(info) = acpi::parse(&img, BASE) {
        assert!(info.cores.len() <= MAX_CORES);
        for (i, c) in info.cores.iter().enumerate() {
            for d in &info.cores[..i] {
                assert!(c.hw_id != d.hw_id && c.uid != d.uid);
            }
        }
        if info.localities as usize > MAX_NODES {
            assert!(info.distances.is_empty());
        }
        for a in 0..4 {
            for b in 0..4 {
                if let Some(d) = info.distance(a, b) {
                    assert!(a != b || d == 10);
                }
            }
        }
        let board = acpi::loongarch_board(&info, &[]);
        assert_eq!(board.cpus.len(), info.cores.len());
    }
    let _ = acpi::parse(&img, BASE + 8);
});
