//! Reads the flattened device tree the loader passes into a [`BoardInfo`].
//!
//! Only what kestrel needs is read: model, memory, CPUs, the interrupt
//! controller, the console UART, PSCI and the command line. Every problem
//! is a [`DtbError`] the boot path prints before halting.

use core::fmt;
use fdt::Fdt;
use heapless::Vec;

use crate::board::*;

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

/// Checks the header's offsets and sizes against the blob before the `fdt`
/// crate trusts them (it indexes with them unchecked).
fn check_header(blob: &[u8]) -> Result<(), DtbError> {
    let word = |i: usize| -> Result<usize, DtbError> {
        blob.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or(DtbError::Malformed("truncated header"))
    };
    let header: [u8; 8] = blob
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(DtbError::Malformed("truncated header"))?;
    let total = total_size(&header).ok_or(DtbError::Malformed("bad magic (not a device tree)"))?;
    if total > blob.len() {
        return Err(DtbError::Malformed(
            "truncated (buffer smaller than header says)",
        ));
    }
    let (off_struct, off_strings, off_rsvmap) = (word(2)?, word(3)?, word(4)?);
    let (version, last_compat) = (word(5)?, word(6)?);
    let (size_strings, size_struct) = (word(8)?, word(9)?);
    if version < 17 || last_compat > 17 {
        return Err(DtbError::Malformed("unsupported version (need 17)"));
    }
    let within = |off: usize, len: usize| off.checked_add(len).is_some_and(|end| end <= total);
    if !within(off_struct, size_struct)
        || !within(off_strings, size_strings)
        || !within(off_rsvmap, 16)
        || off_struct % 4 != 0
        || off_rsvmap % 8 != 0
    {
        return Err(DtbError::Malformed("a block lies outside the blob"));
    }
    Ok(())
}

fn malformed(e: fdt::FdtError) -> DtbError {
    DtbError::Malformed(match e {
        fdt::FdtError::BadMagic => "bad magic (not a device tree)",
        fdt::FdtError::BadPtr => "bad pointer",
        fdt::FdtError::BufferTooSmall => "truncated (buffer smaller than header says)",
    })
}

/// Reads `blob` into a [`BoardInfo`] for `arch`. The caller fills in what
/// only registers can say (`timer_hz` when the tree has no
/// `clock-frequency`, the LoongArch backend).
pub fn parse(blob: &[u8], arch: Arch) -> Result<BoardInfo, DtbError> {
    check_header(blob)?;
    let fdt = Fdt::new(blob).map_err(malformed)?;

    let model = fdt
        .find_node("/")
        .and_then(|root| {
            root.property("model")
                .and_then(|p| p.as_str())
                .or_else(|| root.compatible().map(|c| c.first()))
        })
        .unwrap_or("unknown board");

    let mut memory: Vec<MemRegion, MAX_MEM_REGIONS> = Vec::new();
    for node in fdt.all_nodes() {
        let is_memory = node.property("device_type").and_then(|p| p.as_str()) == Some("memory");
        if !is_memory {
            continue;
        }
        if let Some(regs) = node.reg() {
            for r in regs {
                let size = r.size.unwrap_or(0) as u64;
                if size > 0 {
                    // More regions than we keep: the first ones are enough to run.
                    let _ = memory.push(MemRegion {
                        base: r.starting_address as u64,
                        size,
                    });
                }
            }
        }
    }
    if memory.is_empty() {
        return Err(DtbError::NoMemory);
    }
    memory.sort_unstable_by_key(|r| r.base);

    let mut cpus: Vec<CpuDesc, { crate::MAX_CPUS }> = Vec::new();
    let mut cpus_ignored = 0;
    if let Some(cpus_node) = fdt.find_node("/cpus") {
        for node in cpus_node.children() {
            let is_cpu = node.property("device_type").and_then(|p| p.as_str()) == Some("cpu")
                || node.name.starts_with("cpu@");
            if !is_cpu {
                continue;
            }
            let Some(hw_id) = node
                .reg()
                .and_then(|mut r| r.next())
                .map(|r| r.starting_address as u64)
            else {
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
            let has = fdt.all_nodes().any(|n| {
                n.compatible()
                    .is_some_and(|c| c.all().any(|s| s.contains("eiointc")))
            });
            if !has {
                return Err(DtbError::NoIrqChip);
            }
            IrqChip::LoongArchEiointc
        }
    };

    let uart = console_uart(&fdt);

    let psci = fdt
        .find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"])
        .and_then(|n| n.property("method").and_then(|p| p.as_str()))
        .and_then(|m| match m {
            "smc" => Some(PsciConduit::Smc),
            "hvc" => Some(PsciConduit::Hvc),
            _ => None,
        });

    let timer_hz = fdt
        .find_compatible(&["arm,armv8-timer"])
        .and_then(|n| n.property("clock-frequency"))
        .and_then(|p| p.as_usize())
        .unwrap_or(0) as u64;

    let cmdline = fdt.chosen().bootargs().unwrap_or("");

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
    })
}

fn gic(fdt: &Fdt) -> Result<IrqChip, DtbError> {
    if let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) {
        let mut regs = node.reg().ok_or(DtbError::IrqChipRegs("a reg property"))?;
        let gicd = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the distributor frame"))?;
        let gicr = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the redistributor region"))?;
        return Ok(IrqChip::GicV3 {
            gicd: gicd.starting_address as u64,
            gicr: gicr.starting_address as u64,
            gicr_size: gicr.size.unwrap_or(0) as u64,
        });
    }
    if let Some(node) =
        fdt.find_compatible(&["arm,gic-400", "arm,cortex-a15-gic", "arm,cortex-a9-gic"])
    {
        let mut regs = node.reg().ok_or(DtbError::IrqChipRegs("a reg property"))?;
        let gicd = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the distributor frame"))?;
        let gicc = regs
            .next()
            .ok_or(DtbError::IrqChipRegs("the CPU interface frame"))?;
        let gich = regs.next().map(|r| r.starting_address as u64);
        let gicv = regs.next().map(|r| r.starting_address as u64);
        return Ok(IrqChip::GicV2 {
            gicd: gicd.starting_address as u64,
            gicc: gicc.starting_address as u64,
            gich,
            gicv,
        });
    }
    Err(DtbError::NoIrqChip)
}

fn console_uart(fdt: &Fdt) -> Option<Uart> {
    let kind_of = |node: &fdt::node::FdtNode| {
        let compat = node.compatible()?;
        if compat.all().any(|c| c == "arm,pl011") {
            Some(UartKind::Pl011)
        } else if compat.all().any(|c| c == "ns16550a" || c == "ns16550") {
            Some(UartKind::Ns16550)
        } else {
            None
        }
    };
    let uart_of = |node: fdt::node::FdtNode| {
        let kind = kind_of(&node)?;
        let base = node.reg()?.next()?.starting_address as u64;
        Some(Uart { kind, base })
    };
    // The firmware's choice first, then the first UART kestrel can drive.
    fdt.chosen()
        .stdout()
        .and_then(uart_of)
        .or_else(|| fdt.all_nodes().find_map(uart_of))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V3: &[u8] = include_bytes!("../tests/fixtures/qemu-v3.dtb");
    const V2: &[u8] = include_bytes!("../tests/fixtures/qemu-v2.dtb");
    const LA: &[u8] = include_bytes!("../tests/fixtures/qemu-la.dtb");

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
    fn total_size_reads_header() {
        let hdr: [u8; 8] = V3[..8].try_into().unwrap();
        assert_eq!(total_size(&hdr), Some(V3.len()));
        assert_eq!(total_size(&[0; 8]), None);
    }
}
