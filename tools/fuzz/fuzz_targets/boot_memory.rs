//! Boot memory from every source at once: a device tree's memory nodes
//! (read by `dtb`), a UEFI memory map (its RAM runs, free ranges and the
//! ranges the firmware keeps, read by `reserve`) and ACPI-derived ranges
//! (SRAT-style base/length pairs), with reservations, as a boot path could
//! hand them to `frames::FramePool::from_board`, overlapping, nested,
//! adjacent or repeated. Then VMs take and give back frames at random.
//!
//! Invariants: no frame is owned twice (by two VMs, or by a VM and the free
//! list); every frame handed out lies inside the memory given and outside
//! every reservation; the pool is never larger than the memory's union;
//! the pool's own double-ownership check never fires; giving everything
//! back restores the pool.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use kernel::host::board::{Arch, MemRegion};
use kernel::host::dtb;
use kernel::host::reserve::{self, Ranges};
use kernel::mem::frames::{merge_ranges, FramePool, FRAME};
use kernel::vmm::fdt_build::FdtWriter;
use libfuzzer_sys::fuzz_target;

/// Addresses are drawn from a small window so that ranges meet.
const WINDOW: u64 = 1 << 32;
const MB: u64 = 1 << 20;

#[derive(Arbitrary, Debug)]
struct Range {
    base_mb: u16,
    size_mb: u16,
    /// Low bits: an unaligned start or end.
    skew: u16,
}

impl Range {
    fn get(&self) -> (u64, u64) {
        let base = (u64::from(self.base_mb) * MB + u64::from(self.skew & 0xff) * 4096) % WINDOW;
        let size = u64::from(self.size_mb % 2048) * MB + u64::from(self.skew >> 8) * 4096;
        (base, size)
    }
}

#[derive(Arbitrary, Debug)]
struct UefiDesc {
    ty: u8,
    range: Range,
    wb: bool,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc {
        vm: u8,
        frames: u8,
    },
    Contiguous {
        vm: u8,
        frames: u8,
    },
    Free {
        vm: u8,
    },
    /// A VM gives back one frame twice, or a frame it does not own.
    FreeBogus {
        frame: u16,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    dtb_memory: Vec<Range>,
    uefi: Vec<UefiDesc>,
    acpi: Vec<Range>,
    reserved: Vec<Range>,
    limit_mb: Option<u16>,
    ops: Vec<Op>,
}

/// A tree with one memory node per range (two cells each).
fn tree(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut w = FdtWriter::new();
    w.begin_node("")
        .prop_u32("#address-cells", 2)
        .prop_u32("#size-cells", 2)
        .prop_str("compatible", "linux,dummy-loongson3");
    for (i, &(a, s)) in ranges.iter().enumerate() {
        let reg: Vec<u8> = [a.to_be_bytes(), s.to_be_bytes()].concat();
        w.begin_node(&format!("memory@{i}"))
            .prop_str("device_type", "memory")
            .prop("reg", &reg)
            .end_node();
    }
    w.begin_node("cpus")
        .prop_u32("#address-cells", 1)
        .prop_u32("#size-cells", 0)
        .begin_node("cpu@0")
        .prop_str("device_type", "cpu")
        .prop_u32("reg", 0)
        .end_node()
        .end_node();
    w.end_node();
    w.finish().unwrap()
}

/// A UEFI map of 48-byte descriptors.
fn uefi_map(descs: &[UefiDesc]) -> Vec<u8> {
    let mut map = Vec::new();
    for d in descs {
        let (base, size) = d.range.get();
        let mut b = vec![0u8; 48];
        b[0..4].copy_from_slice(&u32::from(d.ty % 16).to_le_bytes());
        b[8..16].copy_from_slice(&(base & !0xfff).to_le_bytes());
        b[24..32].copy_from_slice(&(size / 4096).to_le_bytes());
        b[32..40].copy_from_slice(&(if d.wb { 0xfu64 } else { 1 }).to_le_bytes());
        map.extend(b);
    }
    map
}

fn inside(set: &[(u64, u64)], s: u64, e: u64) -> bool {
    set.iter().any(|&(rs, re)| rs <= s && e <= re)
}

fn overlaps(set: &[(u64, u64)], s: u64, e: u64) -> bool {
    set.iter().any(|&(rs, re)| rs < re && rs < e && s < re)
}

fn run(input: &Input) {
    let mut memory: Vec<MemRegion> = Vec::new();
    // The device tree's memory nodes, through the boot tree reader.
    let dt: Vec<(u64, u64)> = input.dtb_memory.iter().take(24).map(Range::get).collect();
    if let Ok(board) = dtb::parse(&tree(&dt), Arch::LoongArch64) {
        for w in board.memory.windows(2) {
            assert!(
                w[0].end() <= w[1].base,
                "dtb kept an overlap: {:x?}",
                board.memory
            );
        }
        memory.extend(board.memory.iter().copied());
    }
    // The UEFI map: its RAM runs, its free ranges as regions (what the
    // UEFI boot hands over) and the firmware's ranges as reservations.
    let map = uefi_map(&input.uefi[..input.uefi.len().min(96)]);
    let mut reserved: Vec<(u64, u64)> = Vec::new();
    if let Ok(ram) = reserve::ram_from_uefi_map(&map, 48) {
        memory.extend(ram.regions.iter().copied());
    }
    let (mut firmware, mut free, mut described) = (Ranges::new(), Ranges::new(), Ranges::new());
    if reserve::split_uefi_map(&map, 48, &mut firmware, &mut free, &mut described).is_ok() {
        let (regions, gaps) = kernel::host::efiboot::regions(&free);
        memory.extend(regions.iter().copied());
        reserved.extend(firmware.as_slice());
        reserved.extend(gaps.as_slice());
    }
    // ACPI (SRAT memory affinity) ranges, as read: base and length.
    for r in input.acpi.iter().take(32) {
        let (base, size) = r.get();
        if size > 0 {
            memory.push(MemRegion { base, size });
        }
    }
    reserved.extend(input.reserved.iter().take(16).map(|r| {
        let (b, s) = r.get();
        (b, b + s)
    }));
    let limit = input.limit_mb.map_or(u64::MAX, |m| u64::from(m) * MB);

    // What may be handed out: the union of the memory below the limit,
    // minus every reservation.
    let mut union: Vec<(u64, u64)> = memory
        .iter()
        .map(|r| (r.base, r.end().min(limit)))
        .collect();
    merge_ranges(&mut union);
    let union_frames: u64 = union.iter().map(|&(s, e)| (e - s) / FRAME + 1).sum();

    let mut pool = FramePool::from_board(&memory, &reserved, limit);
    let start = pool.free_bytes();
    assert!(start / FRAME <= union_frames, "pool larger than the memory");
    let mut owner: BTreeMap<u64, u8> = BTreeMap::new();
    let mut vms: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
    let take = |vm: u8,
                frames: Vec<u64>,
                owner: &mut BTreeMap<u64, u8>,
                vms: &mut BTreeMap<u8, Vec<u64>>| {
        for &f in &frames {
            assert_eq!(f % FRAME, 0);
            assert!(inside(&union, f, f + FRAME), "frame {f:#x} outside memory");
            assert!(
                !overlaps(&reserved, f, f + FRAME),
                "frame {f:#x} reserved: {reserved:x?}, memory {memory:x?}"
            );
            if let Some(o) = owner.insert(f, vm) {
                panic!("frame {f:#x} owned by VM {o} and VM {vm}");
            }
        }
        vms.entry(vm).or_default().extend(frames);
    };
    for op in input.ops.iter().take(64) {
        match *op {
            Op::Alloc { vm, frames } => {
                if let Some(f) = pool.alloc(u64::from(frames) * FRAME) {
                    assert_eq!(f.len(), usize::from(frames));
                    take(vm % 8, f, &mut owner, &mut vms);
                }
            }
            Op::Contiguous { vm, frames } => {
                if let Ok(r) = pool.alloc_contiguous(u64::from(frames.max(1)) * FRAME) {
                    assert!(r.frames.windows(2).all(|w| w[1] == w[0] + FRAME));
                    take(vm % 8, r.frames, &mut owner, &mut vms);
                }
            }
            Op::Free { vm } => {
                let frames = vms.remove(&(vm % 8)).unwrap_or_default();
                assert_eq!(pool.free(&frames), frames.len());
                for f in frames {
                    owner.remove(&f);
                }
            }
            Op::FreeBogus { frame } => {
                // Not owned by anyone: nothing comes back.
                let f = u64::from(frame) * FRAME;
                if !owner.contains_key(&f) {
                    assert_eq!(
                        pool.free(&[f]),
                        0,
                        "frame {f:#x} freed but never handed out"
                    );
                }
            }
        }
        let owned = owner.len() as u64 * FRAME;
        assert_eq!(pool.free_bytes() + owned, start);
    }
    for (_, frames) in std::mem::take(&mut vms) {
        assert_eq!(pool.free(&frames), frames.len());
    }
    assert_eq!(pool.free_bytes(), start);
    assert_eq!(pool.refused(), 0);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) {
        run(&input);
    }
});
