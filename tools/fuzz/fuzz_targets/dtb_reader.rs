//! The boot device-tree reader: arbitrary blobs (and real QEMU trees with
//! fuzzed bytes) are read or refused, never a panic, and what is read is
//! sane (memory ranges non-empty, sorted and not wrapping, CPUs sorted,
//! strings bounded). Trees built from fuzzed boards read back what was
//! written: the memory ranges (overlapping ones merged), the lowest CPU
//! ids, the command line.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::host::board::{Arch, BoardInfo, MAX_MEM_REGIONS};
use kernel::host::dtb;
use kernel::vmm::fdt_build::FdtWriter;
use libfuzzer_sys::fuzz_target;

const V3: &[u8] = include_bytes!("../../../kernel/tests/fixtures/qemu-v3.dtb");
const LA: &[u8] = include_bytes!("../../../kernel/tests/fixtures/qemu-la.dtb");

fn sane(b: &BoardInfo) {
    assert!(!b.memory.is_empty() && !b.cpus.is_empty());
    for w in b.memory.windows(2) {
        assert!(w[0].end() <= w[1].base, "overlapping memory kept");
    }
    for r in &b.memory {
        assert!(r.size > 0 && r.base.checked_add(r.size).is_some());
    }
    for w in b.cpus.windows(2) {
        assert!(w[0].hw_id <= w[1].hw_id);
    }
    let _ = b.memory_bytes();
}

fn parse_both(blob: &[u8]) {
    for arch in [Arch::Aarch64, Arch::LoongArch64] {
        if let Ok(b) = dtb::parse(blob, arch) {
            sane(&b);
        }
    }
    if let Ok(t) = dtb::Tree::new(blob) {
        for n in t.nodes() {
            let _ = n.reg().map(|r| r.count());
            let _ = n.compatible().count();
            let _ = n.children().count();
            let _ = n.prop_str("stdout-path").and_then(|p| t.resolve(p));
        }
        let _ = t.find_phandle(1);
    }
}

#[derive(Arbitrary, Debug)]
struct Board {
    memory: Vec<(u64, u64)>,
    cpus: Vec<u32>,
    bootargs: String,
    two_cells: bool,
}

fn round_trip(b: &Board) {
    let mut w = FdtWriter::new();
    let cells = if b.two_cells { 2 } else { 1 };
    w.begin_node("")
        .prop_u32("#address-cells", cells)
        .prop_u32("#size-cells", cells);
    let bootargs: String = b.bootargs.chars().filter(|&c| c != '\0').collect();
    w.begin_node("chosen")
        .prop_str("bootargs", &bootargs)
        .end_node();
    let enc = |v: u64| -> Vec<u8> {
        if b.two_cells {
            v.to_be_bytes().to_vec()
        } else {
            (v as u32).to_be_bytes().to_vec()
        }
    };
    let mem: Vec<(u64, u64)> = b
        .memory
        .iter()
        .map(|&(a, s)| {
            if b.two_cells {
                (a, s)
            } else {
                (a & 0xffff_ffff, s & 0xffff_ffff)
            }
        })
        .collect();
    let reg: Vec<u8> = mem
        .iter()
        .flat_map(|&(a, s)| [enc(a), enc(s)].concat())
        .collect();
    w.begin_node("memory")
        .prop_str("device_type", "memory")
        .prop("reg", &reg)
        .end_node();
    w.begin_node("cpus")
        .prop_u32("#address-cells", 1)
        .prop_u32("#size-cells", 0);
    for (i, id) in b.cpus.iter().enumerate() {
        w.begin_node(&format!("cpu@{i}"))
            .prop_str("device_type", "cpu")
            .prop_u32("reg", *id)
            .end_node();
    }
    w.end_node();
    w.begin_node("eiointc")
        .prop_str("compatible", "loongson,ls2k2000-eiointc")
        .end_node();
    w.end_node();
    let blob = w.finish().unwrap();
    match dtb::parse(&blob, Arch::LoongArch64) {
        Ok(board) => {
            sane(&board);
            let mut want: Vec<(u64, u64)> = mem
                .iter()
                .copied()
                .filter(|&(a, s)| s > 0 && a.checked_add(s).is_some())
                .take(MAX_MEM_REGIONS)
                .collect();
            want.sort_by_key(|r| r.0);
            // Overlapping and nested ranges read back merged (one owner
            // per frame); touching ones as written.
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (a, s) in want {
                match merged.last_mut() {
                    Some(last) if a < last.0 + last.1 => {
                        last.1 = (last.0 + last.1).max(a + s) - last.0;
                    }
                    _ => merged.push((a, s)),
                }
            }
            let got: Vec<(u64, u64)> = board.memory.iter().map(|r| (r.base, r.size)).collect();
            assert_eq!(got, merged);
            for w in got.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "overlap kept: {got:x?}");
            }
            let mut ids: Vec<u64> = b.cpus.iter().map(|&i| u64::from(i)).collect();
            ids.sort();
            ids.truncate(kernel::MAX_CPUS);
            let got_ids: Vec<u64> = board.cpus.iter().map(|c| c.hw_id).collect();
            assert_eq!(got_ids, ids);
            let cut: String = kernel::host::board::bounded::<256>(&bootargs)
                .as_str()
                .into();
            assert_eq!(board.cmdline.as_str(), cut);
        }
        Err(e) => {
            let has_mem = mem
                .iter()
                .any(|&(a, s)| s > 0 && a.checked_add(s).is_some());
            assert!(!has_mem || b.cpus.is_empty(), "refused a good board: {e}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((0, rest)) => parse_both(rest),
        Some((1, rest)) | Some((2, rest)) => {
            // Real trees with fuzzed bytes patched in.
            let mut blob = if data[0] == 1 {
                V3.to_vec()
            } else {
                LA.to_vec()
            };
            for p in rest.chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([p[0], p[1]])) % blob.len();
                blob[at] = p[2];
            }
            parse_both(&blob);
        }
        Some((_, rest)) => {
            if let Ok(b) = Unstructured::new(rest).arbitrary::<Board>() {
                round_trip(&b);
            }
        }
        None => {}
    }
});
