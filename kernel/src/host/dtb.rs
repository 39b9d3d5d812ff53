//! Reads the flattened device tree the loader passes into a [`BoardInfo`].
//!
//! Only what kestrel needs is read: model, memory, CPUs, the interrupt
//! controller, the console UART, PSCI and the command line. Every problem
//! is a [`DtbError`] the boot path prints before halting.

use core::fmt;
use heapless::Vec;

use crate::host::board::*;

mod tree;
pub use tree::{Cells, Node, Prop, Tree};

/// Why a device tree could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtbError {
    /// The blob is not a device tree (bad magic, truncated, bad offsets).
    Malformed(&'static str),
    /// No `memory` node with a usable `reg`.
    NoMemory,
    /// No `/cpus/cpu@*` node.
    NoCpus,
    /// No interrupt controller kestrel can drive.
    NoIrqChip,
    /// The interrupt controller lacks a register frame kestrel needs.
    IrqChipRegs(&'static str),
}

impl fmt::Display for DtbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtbError::Malformed(why) => write!(f, "device tree is malformed: {why}"),
            DtbError::NoMemory => f.write_str("device tree has no memory node"),
            DtbError::NoCpus => f.write_str("device tree has no cpu nodes under /cpus"),
            DtbError::NoIrqChip => f.write_str(
                "device tree has no supported interrupt controller \
                 (need arm,gic-v3, arm,gic-400, arm,cortex-a15-gic or a LoongArch eiointc)",
            ),
            DtbError::IrqChipRegs(which) => write!(f, "interrupt controller node lacks {which}"),
        }
    }
}

/// The device-tree header's total size, read from the first 8 bytes, so the
/// arch can build a slice of the right length from the pointer it was given.
/// `None` when the magic is wrong.
pub fn total_size(header: &[u8; 8]) -> Option<usize> {
    const MAGIC: u32 = 0xd00d_feed;
    let magic = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let size = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    (magic == MAGIC && size >= 40).then_some(size as usize)
}

/// Reads `blob` into a [`BoardInfo`] for `arch`. The caller fills in what
/// only registers can say (`timer_hz` when the tree has no
/// `clock-frequency`, the LoongArch backend).
///
/// The blob is checked whole first ([`Tree::new`]): a malformed tree is a
/// [`DtbError::Malformed`]. Unusual but well-formed content gets a warning
/// and a fallback: no `model` or `compatible` on the root reads as "unknown
/// board", a `#address-cells`/`#size-cells` that is not one cell as the
/// default, a missing `/chosen` as no command line (and the first UART), a
/// memory range that wraps past 2^64 is dropped.
pub fn parse(blob: &[u8], arch: Arch) -> Result<BoardInfo, DtbError> {
    let fdt = Tree::new(blob).map_err(DtbError::Malformed)?;
    let root = fdt.root();
    // Printed once the console logs (runtime), with the banner.
    let mut warnings: Vec<&'static str, MAX_WARNINGS> = Vec::new();
    let mut warn = |w: &'static str| {
        let _ = warnings.push(w);
    };

    let model = root
        .prop_str("model")
        .filter(|m| !m.is_empty())
        .or_else(|| root.compatible().next())
        .unwrap_or_else(|| {
            warn("device tree: the root has no model or compatible string: 'unknown board'");
            "unknown board"
        });

    if fdt.nodes().any(|n| n.bad_cells()) {
        warn("device tree: a #address-cells/#size-cells is not one 4-byte cell: read as the defaults (2/1)");
    }

    let mut memory: Vec<MemRegion, MAX_MEM_REGIONS> = Vec::new();
    for node in fdt.nodes() {
        if node.prop_str("device_type") != Some("memory") {
            continue;
        }
        for (base, size) in node.reg().into_iter().flatten() {
            if size == 0 {
                continue;
            }
            if base.checked_add(size).is_none() {
                warn(
                    "device tree: a memory range wraps past the top of the address space: ignored",
                );
                continue;
            }
            // More regions than we keep: the first ones are enough to run.
            let _ = memory.push(MemRegion { base, size });
        }
    }
    if memory.is_empty() {
        return Err(DtbError::NoMemory);
    }
    // One owner per frame: a tree may list a range twice or nest one
    // inside another; the frame pool must see each byte once.
    if crate::host::board::merge_regions(&mut memory) {
        warn("device tree: memory ranges overlap: merged");
    }

    let mut cpus: Vec<CpuDesc, { crate::MAX_CPUS }> = Vec::new();
    let mut cpus_ignored = 0;
    if let Some(cpus_node) = fdt.find("/cpus") {
        for node in cpus_node.children() {
            let is_cpu =
                node.prop_str("device_type") == Some("cpu") || node.name().starts_with(b"cpu@");
            if !is_cpu {
                continue;
            }
            let Some((hw_id, _)) = node.reg().and_then(|mut r| r.next()) else {
                continue;
            };
            // Keep the lowest hardware ids whatever the listing order (QEMU's
            // LoongArch tree lists cpu@N in descending order).
            if let Err(desc) = cpus.push(CpuDesc { hw_id }) {
                cpus_ignored += 1;
                let highest = cpus.iter_mut().max_by_key(|c| c.hw_id);
                if let Some(max) = highest.filter(|c| c.hw_id > desc.hw_id) {
                    *max = desc;
                }
            }
        }
    }
    if cpus.is_empty() {
        return Err(DtbError::NoCpus);
    }
    // Firmware lists CPUs in any order; kestrel numbers them by hardware id.
    cpus.sort_unstable_by_key(|c| c.hw_id);

    let irqchip = match arch {
        Arch::Aarch64 => gic(&fdt)?,
        Arch::LoongArch64 => {
            let has = fdt
                .nodes()
                .any(|n| n.compatible().any(|s| s.contains("eiointc")));
            if !has {
                return Err(DtbError::NoIrqChip);
            }
            IrqChip::LoongArchEiointc
        }
    };

    let chosen = fdt.find("/chosen");
    if chosen.is_none() {
        warn("device tree has no /chosen: no command line; the console is the first UART");
    }
    let uart = console_uart(&fdt, chosen);

    let psci = fdt
        .find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"])
        .and_then(|n| n.prop_str("method"))
        .and_then(|m| match m {
            "smc" => Some(PsciConduit::Smc),
            "hvc" => Some(PsciConduit::Hvc),
            _ => None,
        });

    let timer_hz = fdt
        .find_compatible(&["arm,armv8-timer"])
        .and_then(|n| n.prop_u64("clock-frequency"))
        .unwrap_or(0);

    let cmdline = chosen.and_then(|c| c.prop_str("bootargs")).unwrap_or("");
    let module = chosen.and_then(|c| initrd(c, &mut warn));

    Ok(BoardInfo {
        arch,
        model: bounded(model),
        memory,
        cpus,
        cpus_ignored,
        irqchip,
        uart,
        timer_hz,
        psci,
        backend: match arch {
            Arch::Aarch64 => Backend::El2,
            Arch::LoongArch64 => Backend::LoongArchTrapEmulate,
        },
        cmdline: bounded(cmdline),
        warnings,
        module,
    })
}

/// The boot module (`linux,initrd-start` and `linux,initrd-end`, one or two
/// cells each, end exclusive, as Linux reads them) in `/chosen`.
fn initrd(chosen: Node, warn: &mut impl FnMut(&'static str)) -> Option<MemRegion> {
    let start = chosen.prop("linux,initrd-start");
    let end = chosen.prop("linux,initrd-end");
    if start.is_none() && end.is_none() {
        return None;
    }
    match (
        chosen.prop_u64("linux,initrd-start"),
        chosen.prop_u64("linux,initrd-end"),
    ) {
        (Some(base), Some(end)) if end > base => Some(MemRegion {
            base,
            size: end - base,
        }),
        _ => {
            warn("device tree: /chosen linux,initrd-start/-end are not a range of one or two cells each: no boot module");
            None
        }
    }
}

fn gic(fdt: &Tree) -> Result<IrqChip, DtbError> {
    if let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) {
        let mut regs = node.reg().ok_or(DtbError::IrqChipRegs("a reg property"))?;
        let (gicd, _) = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the distributor frame"))?;
        let (gicr, gicr_size) = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the redistributor region"))?;
        return Ok(IrqChip::GicV3 {
            gicd,
            gicr,
            gicr_size,
        });
    }
    if let Some(node) =
        fdt.find_compatible(&["arm,gic-400", "arm,cortex-a15-gic", "arm,cortex-a9-gic"])
    {
        let mut regs = node.reg().ok_or(DtbError::IrqChipRegs("a reg property"))?;
        let (gicd, _) = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the distributor frame"))?;
        let (gicc, _) = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the CPU interface frame"))?;
        let gich = regs.next().map(|r| r.0);
        let gicv = regs.next().map(|r| r.0);
        return Ok(IrqChip::GicV2 {
            gicd,
            gicc,
            gich,
            gicv,
        });
    }
    Err(DtbError::NoIrqChip)
}

fn console_uart(fdt: &Tree, chosen: Option<Node>) -> Option<Uart> {
    let uart_of = |node: Node| {
        let kind = if node.compatible().any(|c| c == "arm,pl011") {
            UartKind::Pl011
        } else if node.compatible().any(|c| c == "ns16550a" || c == "ns16550") {
            UartKind::Ns16550
        } else {
            return None;
        };
        let (base, _) = node.reg()?.next()?;
        Some(Uart { kind, base })
    };
    // The firmware's choice first, then the first UART kestrel can drive.
    chosen
        .and_then(|c| c.prop_str("stdout-path"))
        .and_then(|p| fdt.resolve(p))
        .and_then(uart_of)
        .or_else(|| fdt.nodes().find_map(uart_of))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmm::fdt_build::FdtWriter;

    const V3: &[u8] = include_bytes!("../../tests/fixtures/qemu-v3.dtb");
    const V2: &[u8] = include_bytes!("../../tests/fixtures/qemu-v2.dtb");
    const LA: &[u8] = include_bytes!("../../tests/fixtures/qemu-la.dtb");

    #[test]
    fn qemu_virt_gicv3() {
        let b = parse(V3, Arch::Aarch64).unwrap();
        assert_eq!(b.model.as_str(), "linux,dummy-virt");
        assert_eq!(
            b.memory.as_slice(),
            [MemRegion {
                base: 0x4000_0000,
                size: 1 << 30
            }]
        );
        assert_eq!(
            b.cpus.iter().map(|c| c.hw_id).collect::<std::vec::Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            b.irqchip,
            IrqChip::GicV3 {
                gicd: 0x800_0000,
                gicr: 0x80a_0000,
                gicr_size: 0xf6_0000
            }
        );
        assert_eq!(
            b.uart,
            Some(Uart {
                kind: UartKind::Pl011,
                base: 0x900_0000
            })
        );
        assert_eq!(b.psci, Some(PsciConduit::Smc));
        assert_eq!(b.backend, Backend::El2);
    }

    #[test]
    fn qemu_virt_gicv2_has_virtualization_frames() {
        let b = parse(V2, Arch::Aarch64).unwrap();
        assert_eq!(
            b.irqchip,
            IrqChip::GicV2 {
                gicd: 0x800_0000,
                gicc: 0x801_0000,
                gich: Some(0x803_0000),
                gicv: Some(0x804_0000)
            }
        );
    }

    #[test]
    fn qemu_loongarch_virt() {
        let b = parse(LA, Arch::LoongArch64).unwrap();
        assert_eq!(
            b.memory.as_slice(),
            [
                MemRegion {
                    base: 0,
                    size: 0x1000_0000
                },
                MemRegion {
                    base: 0x8000_0000,
                    size: 0x3000_0000
                }
            ]
        );
        assert_eq!(b.cpus.len(), 4);
        assert_eq!(b.irqchip, IrqChip::LoongArchEiointc);
        assert_eq!(b.uart.map(|u| u.kind), Some(UartKind::Ns16550));
        assert_eq!(b.uart.map(|u| u.base), Some(0x1fe0_01e0));
        assert_eq!(b.psci, None);
    }

    #[test]
    fn loongarch_tree_is_not_an_arm_board() {
        assert_eq!(parse(LA, Arch::Aarch64).unwrap_err(), DtbError::NoIrqChip);
    }

    #[test]
    fn garbage_and_truncation_are_errors_not_panics() {
        assert!(matches!(
            parse(&[0u8; 64], Arch::Aarch64),
            Err(DtbError::Malformed(_))
        ));
        assert!(matches!(
            parse(&V3[..100], Arch::Aarch64),
            Err(DtbError::Malformed(_))
        ));
        assert!(matches!(
            parse(&[], Arch::Aarch64),
            Err(DtbError::Malformed(_))
        ));
        // Every truncation is refused or parsed, never a panic.
        for len in (0..V3.len()).step_by(97) {
            let _ = parse(&V3[..len], Arch::Aarch64);
        }
        // Header fields pointing outside the blob are refused before the
        // parser trusts them: magic, size, each offset and block size.
        for field in [0usize, 1, 2, 3, 4, 8, 9] {
            let mut bad = V3.to_vec();
            bad[field * 4] ^= 0x7f;
            assert!(
                matches!(parse(&bad, Arch::Aarch64), Err(DtbError::Malformed(_))),
                "header word {field} corrupted"
            );
        }
    }

    #[test]
    fn qemu_trees_have_nothing_to_warn_about() {
        for (blob, arch) in [
            (V3, Arch::Aarch64),
            (V2, Arch::Aarch64),
            (LA, Arch::LoongArch64),
        ] {
            let b = parse(blob, arch).unwrap();
            assert!(b.warnings.is_empty(), "{:?}", b.warnings);
        }
    }

    #[test]
    fn total_size_reads_header() {
        let hdr: [u8; 8] = V3[..8].try_into().unwrap();
        assert_eq!(total_size(&hdr), Some(V3.len()));
        assert_eq!(total_size(&[0; 8]), None);
    }

    /// A minimal arm64 board tree; `root` adds to `/` before the children,
    /// `chosen` says whether `/chosen` exists, `memory` gives the memory
    /// node's `reg` bytes (cells of the root: 2/2 unless `root` says).
    fn board_dtb(
        root: impl FnOnce(&mut FdtWriter),
        chosen: bool,
        memory: &[u8],
    ) -> std::vec::Vec<u8> {
        board_dtb_with(root, chosen, memory, reg22)
    }

    /// [`board_dtb`] with the devices' `reg` encoded by `reg`.
    fn board_dtb_with(
        root: impl FnOnce(&mut FdtWriter),
        chosen: bool,
        memory: &[u8],
        reg: fn(&[(u64, u64)]) -> std::vec::Vec<u8>,
    ) -> std::vec::Vec<u8> {
        let mut w = FdtWriter::new();
        w.begin_node("");
        root(&mut w);
        if chosen {
            w.begin_node("chosen")
                .prop_str("bootargs", "kestrel.tick_hz=50")
                .prop_str("stdout-path", "/pl011@9000000:115200n8")
                .end_node();
        }
        w.begin_node("memory@40000000")
            .prop_str("device_type", "memory")
            .prop("reg", memory)
            .end_node();
        w.begin_node("cpus")
            .prop_u32("#address-cells", 1)
            .prop_u32("#size-cells", 0)
            .begin_node("cpu@0")
            .prop_str("device_type", "cpu")
            .prop_u32("reg", 0)
            .end_node()
            .end_node();
        for (name, base) in [
            ("pl011@8000000", 0x800_0000u64),
            ("pl011@9000000", 0x900_0000),
        ] {
            w.begin_node(name)
                .prop_strs("compatible", &["arm,pl011", "arm,primecell"])
                .prop("reg", &reg(&[(base, 0x1000)]))
                .end_node();
        }
        w.begin_node("intc@8000000")
            .prop_str("compatible", "arm,gic-v3")
            .prop(
                "reg",
                &reg(&[(0x800_0000, 0x1_0000), (0x80a_0000, 0xf6_0000)]),
            )
            .end_node();
        w.end_node();
        w.finish().unwrap()
    }

    fn reg22(regions: &[(u64, u64)]) -> std::vec::Vec<u8> {
        regions
            .iter()
            .flat_map(|&(a, s)| a.to_be_bytes().into_iter().chain(s.to_be_bytes()))
            .collect()
    }

    fn cells22(w: &mut FdtWriter) {
        w.prop_u32("#address-cells", 2).prop_u32("#size-cells", 2);
    }

    #[test]
    fn hand_built_board_reads_back() {
        let blob = board_dtb(
            |w| {
                cells22(w);
                w.prop_str("model", "acme,board");
            },
            true,
            &reg22(&[(0x4000_0000, 0x1000_0000)]),
        );
        let b = parse(&blob, Arch::Aarch64).unwrap();
        assert!(b.warnings.is_empty(), "{:?}", b.warnings);
        assert_eq!(b.model.as_str(), "acme,board");
        assert_eq!(b.memory_bytes(), 0x1000_0000);
        assert_eq!(b.cmdline.as_str(), "kestrel.tick_hz=50");
        assert_eq!(b.uart.map(|u| u.base), Some(0x900_0000), "stdout-path wins");
    }

    /// The boot module in `/chosen`: one- or two-cell start and end (as
    /// QEMU and U-Boot write them); a half-given or inverted pair is
    /// warned about and ignored; no properties, no module.
    #[test]
    fn initrd_range_in_chosen_is_the_boot_module() {
        let tree = |start: Option<&[u8]>, end: Option<&[u8]>| {
            let (start, end) = (start.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec));
            board_dtb(
                move |w| {
                    cells22(w);
                    w.prop_str("model", "acme,board");
                    w.begin_node("chosen");
                    if let Some(v) = &start {
                        w.prop("linux,initrd-start", v);
                    }
                    if let Some(v) = &end {
                        w.prop("linux,initrd-end", v);
                    }
                    w.end_node();
                },
                false,
                &reg22(&[(0x4000_0000, 0x1000_0000)]),
            )
        };
        let one = |v: u32| v.to_be_bytes().to_vec();
        let two = |v: u64| v.to_be_bytes().to_vec();
        let want = Some(MemRegion {
            base: 0x4800_0000,
            size: 0x12_3456,
        });
        for (s, e) in [
            (one(0x4800_0000), one(0x4812_3456)),
            (two(0x4800_0000), two(0x4812_3456)),
            (one(0x4800_0000), two(0x4812_3456)),
        ] {
            let b = parse(&tree(Some(&s), Some(&e)), Arch::Aarch64).unwrap();
            assert_eq!(b.module, want);
            assert!(b.warnings.is_empty(), "{:?}", b.warnings);
        }
        let b = parse(&tree(None, None), Arch::Aarch64).unwrap();
        assert_eq!(b.module, None);
        assert!(b.warnings.is_empty(), "{:?}", b.warnings);
        for (s, e) in [
            (Some(one(0x4800_0000)), None),
            (None, Some(one(0x4800_0000))),
            (Some(one(0x4800_0000)), Some(one(0x4800_0000))),
            (Some(one(0x4900_0000)), Some(one(0x4800_0000))),
            (Some(vec![1, 2, 3]), Some(one(0x4800_0000))),
        ] {
            let b = parse(&tree(s.as_deref(), e.as_deref()), Arch::Aarch64).unwrap();
            assert_eq!(b.module, None, "{s:?} {e:?}");
            assert_eq!(b.warnings.len(), 1, "{:?}", b.warnings);
        }
    }

    /// Issue 13 C9: an empty or unterminated root `compatible` without a
    /// `model` panicked inside the `fdt` crate.
    /// Issue 22 item 5: a tree listing 256 MiB twice read as 512 MiB of
    /// RAM and two VMs shared frames. Repeated and nested ranges are
    /// merged (with a warning); touching ones stay as listed.
    #[test]
    fn overlapping_memory_ranges_are_merged() {
        let g = 0x4000_0000u64;
        let m = 0x10_0000u64;
        for (regs, want) in [
            (
                std::vec![(g, 256 * m), (g, 256 * m)],
                std::vec![(g, 256 * m)],
            ),
            (
                std::vec![(g + 300 * m, 8 * m), (g, 512 * m), (g + 16 * m, m)],
                std::vec![(g, 512 * m)],
            ),
            (
                std::vec![(g + 100 * m, 100 * m), (g, 128 * m)],
                std::vec![(g, 200 * m)],
            ),
        ] {
            let blob = board_dtb(cells22, true, &reg22(&regs));
            let b = parse(&blob, Arch::Aarch64).unwrap();
            let got: std::vec::Vec<(u64, u64)> =
                b.memory.iter().map(|r| (r.base, r.size)).collect();
            assert_eq!(got, want, "{regs:x?}");
            assert!(
                b.warnings
                    .iter()
                    .any(|w| w.contains("memory ranges overlap")),
                "{:?}",
                b.warnings
            );
        }
        let blob = board_dtb(cells22, true, &reg22(&[(g + 64 * m, 64 * m), (g, 64 * m)]));
        let b = parse(&blob, Arch::Aarch64).unwrap();
        assert_eq!(b.memory.len(), 2, "touching: both kept");
        assert_eq!(b.memory[0].base, g);
        assert!(!b.warnings.iter().any(|w| w.contains("overlap")));
    }

    #[test]
    fn empty_or_unterminated_root_compatible_is_unknown_board() {
        for compat in [&b""[..], b"acme,board", b"\0", b"\0\0"] {
            let blob = board_dtb(
                |w| {
                    cells22(w);
                    w.prop("compatible", compat);
                },
                true,
                &reg22(&[(0x4000_0000, 0x1000_0000)]),
            );
            let b = parse(&blob, Arch::Aarch64).unwrap();
            assert_eq!(b.model.as_str(), "unknown board", "compatible {compat:?}");
            assert!(b.warnings.iter().any(|w| w.contains("unknown board")));
        }
        // The first complete string is the model; an unterminated tail is not.
        let blob = board_dtb(
            |w| {
                cells22(w);
                w.prop("compatible", b"\0acme,one\0acme,tw");
            },
            true,
            &reg22(&[(0x4000_0000, 0x1000_0000)]),
        );
        assert_eq!(
            parse(&blob, Arch::Aarch64).unwrap().model.as_str(),
            "acme,one"
        );
    }

    /// Issue 13 C9: `#address-cells`/`#size-cells` shorter than 4 bytes
    /// panicked inside the `fdt` crate; they read as the defaults (2/1).
    #[test]
    fn short_cells_read_as_the_defaults() {
        // 2 address cells + 1 size cell.
        fn reg21(regions: &[(u64, u64)]) -> std::vec::Vec<u8> {
            regions
                .iter()
                .flat_map(|&(a, s)| a.to_be_bytes().into_iter().chain((s as u32).to_be_bytes()))
                .collect()
        }
        for (addr, size) in [(&[0u8, 2][..], &[1u8][..]), (&[][..], &[0, 0, 1][..])] {
            let blob = board_dtb_with(
                |w| {
                    w.prop("#address-cells", addr).prop("#size-cells", size);
                },
                true,
                &reg21(&[(0x4000_0000, 0x1000_0000)]),
                reg21,
            );
            let b = parse(&blob, Arch::Aarch64).unwrap();
            assert!(b.warnings.iter().any(|w| w.contains("#address-cells")));
            assert_eq!(
                b.memory.as_slice(),
                [MemRegion {
                    base: 0x4000_0000,
                    size: 0x1000_0000
                }]
            );
            assert_eq!(
                b.irqchip,
                IrqChip::GicV3 {
                    gicd: 0x800_0000,
                    gicr: 0x80a_0000,
                    gicr_size: 0xf6_0000
                }
            );
        }
    }

    /// Issue 13 C9: a tree without `/chosen` panicked inside the `fdt`
    /// crate; it has no command line and the console is the first UART.
    #[test]
    fn no_chosen_means_no_cmdline_and_first_uart() {
        let blob = board_dtb(cells22, false, &reg22(&[(0x4000_0000, 0x1000_0000)]));
        let b = parse(&blob, Arch::Aarch64).unwrap();
        assert!(b.warnings.iter().any(|w| w.contains("no /chosen")));
        assert_eq!(b.cmdline.as_str(), "");
        assert_eq!(b.uart.map(|u| u.base), Some(0x800_0000));
    }

    /// Replaces the structure block of `blob` (same length) with `words`.
    fn with_structure(blob: &[u8], words: &[u32]) -> std::vec::Vec<u8> {
        let mut out = blob.to_vec();
        let be = |i: usize| u32::from_be_bytes(blob[i * 4..i * 4 + 4].try_into().unwrap()) as usize;
        let (off, size) = (be(2), be(9));
        let bytes: std::vec::Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        assert!(bytes.len() <= size);
        out[off..off + bytes.len()].copy_from_slice(&bytes);
        out[8 * 4 + 4..8 * 4 + 8].copy_from_slice(&(bytes.len() as u32).to_be_bytes());
        out
    }

    /// Issue 13 C9: a structure block that starts with END_NODE panicked
    /// inside the `fdt` crate; every malformed structure is now refused.
    #[test]
    fn malformed_structure_blocks_are_refused() {
        let good = board_dtb(cells22, true, &reg22(&[(0x4000_0000, 0x1000_0000)]));
        let cases: &[(&[u32], &str)] = &[
            (&[2, 9], "structure block does not start with the root node"),
            (
                &[4, 4, 2, 9],
                "structure block does not start with the root node",
            ),
            (&[9], "structure block has no root node"),
            (&[1, 0, 9], "unbalanced nodes (END before the root closes)"),
            (&[1, 0, 2, 1, 0, 2, 9], "more than one root node"),
            (&[3, 4, 0, 0, 9], "a property outside any node"),
            (
                &[1, 0, 3, 0x100, 0, 2, 9],
                "property value runs past the structure block",
            ),
            (
                &[1, 0, 3, 0, 0x7fff_0000, 2, 9],
                "property name outside the strings block",
            ),
            (&[1, 0, 7, 2, 9], "unknown token in the structure block"),
            (&[1, 0, 2], "structure block ends inside a token"),
            (&[1, 0x6161_6161], "unterminated node name"),
        ];
        for (words, why) in cases {
            assert_eq!(
                parse(&with_structure(&good, words), Arch::Aarch64).unwrap_err(),
                DtbError::Malformed(why),
                "{words:?}"
            );
        }
        let deep: std::vec::Vec<u32> = core::iter::repeat_n([1u32, 0], tree::MAX_DEPTH + 1)
            .flatten()
            .chain(core::iter::repeat_n(2, tree::MAX_DEPTH + 1))
            .chain([9])
            .collect();
        assert_eq!(
            parse(&with_structure(&good, &deep), Arch::Aarch64).unwrap_err(),
            DtbError::Malformed("nodes nested too deep")
        );
    }

    /// Issue 13 C9: board.rs summed memory sizes with `+` (an overflow with
    /// firmware listing overlapping huge ranges), and a range wrapping past
    /// 2^64 gave a bogus end.
    #[test]
    fn huge_memory_ranges_do_not_overflow() {
        let blob = board_dtb(
            cells22,
            true,
            &reg22(&[
                (0, 0xf000_0000_0000_0000),
                (0x1000, 0xf000_0000_0000_0000),
                (0xffff_0000_0000_0000, 0x1_0000_0000_0000),
            ]),
        );
        let b = parse(&blob, Arch::Aarch64).unwrap();
        // The wrapping range is dropped, the overlapping two merged.
        assert_eq!(b.memory.len(), 1);
        assert!(b.warnings.iter().any(|w| w.contains("wraps")));
        assert_eq!(b.memory_bytes(), 0xf000_0000_0000_1000);
        assert!(b.memory.iter().all(|r| r.end() >= r.base));
    }

    /// Every single-byte corruption of real trees is parsed or refused,
    /// never a panic.
    #[test]
    fn byte_corruptions_never_panic() {
        for blob in [V3, V2, LA] {
            // The header and blocks; the rest of QEMU's 1 MiB is padding.
            let be = |i: usize| u32::from_be_bytes(blob[i * 4..i * 4 + 4].try_into().unwrap());
            let used = (be(3) + be(8)) as usize;
            for i in (0..used).step_by(11) {
                let mut b = blob.to_vec();
                b[i] ^= 0xff;
                let _ = parse(&b, Arch::Aarch64);
                let _ = parse(&b, Arch::LoongArch64);
            }
        }
    }
}
