//! The LoongArch board from the ACPI tables UEFI firmware hands over
//! (ACPI 6.5), on top of the generic reader in [`super`] (RSDP, XSDT,
//! header and checksum checks, entry walks): the cores and their physical
//! IDs (MADT core PIC entries, type 0x11), the NUMA nodes of cores and
//! memory (SRAT) and their distances (SLIT), the console UART (SPCR) and
//! the power-off and reset registers (FADT).
//!
//! Every length, offset and checksum is checked before use: a malformed
//! table is an [`AcpiError`] naming the table, the entry and the field,
//! never a panic. Tables kestrel does not read are only checked by the
//! generic reader (a bad checksum there is counted, not refused).

use heapless::Vec;

use super::{
    entries, tables, u32_at, u64_at, u8_at, AcpiError, PhysMem, Problem, Sdt, Sig, MAX_TABLES,
};
use crate::host::board::{Arch, Backend, BoardInfo, CpuDesc, IrqChip, MemRegion, Uart, UartKind};

/// Most cores kept (more are counted in [`AcpiInfo::cpus_ignored`]).
pub const MAX_CORES: usize = crate::MAX_CPUS;
/// Most memory affinity ranges kept.
pub const MAX_MEM_RANGES: usize = 16;
/// Most NUMA nodes (proximity domains) whose distances are kept.
pub const MAX_NODES: usize = 16;

/// MADT: the interrupt controller structures start at offset 44.
const MADT_ENTRIES: usize = 44;
/// SRAT: the affinity structures start at offset 48.
const SRAT_ENTRIES: usize = 48;

/// One core of the MADT's core interrupt controller entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Core {
    /// ACPI processor UID.
    pub uid: u32,
    /// Physical core ID (CSR.CPUID on LoongArch: the IPI target).
    pub hw_id: u32,
    /// Proximity domain from the SRAT (0 without one).
    pub node: u32,
}

/// One SRAT memory affinity range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAffinity {
    pub base: u64,
    pub size: u64,
    pub node: u32,
    pub hotplug: bool,
}

/// A register named by a Generic Address Structure in system memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    pub pa: u64,
    /// Access width in bytes (1, 2, 4 or 8).
    pub width: u8,
}

/// The console the SPCR names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpcrUart {
    /// SPCR interface type (0x00 16550, 0x01 16450, 0x12 16550-compatible
    /// described by the GAS, ...).
    pub interface: u8,
    pub reg: Reg,
}

/// What the reader learned.
#[derive(Clone, Debug, Default)]
pub struct AcpiInfo {
    /// RSDP revision (2 or later: the XSDT).
    pub revision: u8,
    pub oem: [u8; 6],
    /// Enabled cores, in MADT order (the firmware's logical order).
    pub cores: Vec<Core, MAX_CORES>,
    /// Enabled cores beyond [`MAX_CORES`].
    pub cpus_ignored: usize,
    /// Cores the MADT lists as disabled (not started).
    pub cores_disabled: usize,
    pub memory: Vec<MemAffinity, MAX_MEM_RANGES>,
    /// SLIT: number of localities and their distance matrix (row-major),
    /// when there are at most [`MAX_NODES`].
    pub localities: u64,
    pub distances: Vec<u8, { MAX_NODES * MAX_NODES }>,
    pub uart: Option<SpcrUart>,
    /// FADT sleep control register (hardware-reduced ACPI).
    pub sleep_control: Option<Reg>,
    /// FADT reset register and the value to write.
    pub reset: Option<(Reg, u8)>,
    /// Signatures of the tables listed, in XSDT order.
    pub tables: Vec<Sig, MAX_TABLES>,
    /// SRAT processor affinity: (physical core ID, proximity domain).
    pub cpu_nodes: Vec<(u32, u32), 64>,
    /// Listed tables with a bad checksum (a table kestrel reads is
    /// refused for it; the others are only reported).
    pub bad_checksums: usize,
}

impl AcpiInfo {
    /// The number of distinct nodes the cores are on.
    pub fn core_nodes(&self) -> usize {
        let mut seen: Vec<u32, MAX_CORES> = Vec::new();
        for c in &self.cores {
            if !seen.contains(&c.node) {
                let _ = seen.push(c.node);
            }
        }
        seen.len()
    }

    /// The SLIT distance from node `a` to node `b`, if known.
    pub fn distance(&self, a: u32, b: u32) -> Option<u8> {
        let n = self.localities;
        if u64::from(a) >= n || u64::from(b) >= n {
            return None;
        }
        self.distances
            .get((u64::from(a) * n + u64::from(b)) as usize)
            .copied()
    }
}

/// Reads the tables from the RSDP at `rsdp_pa`: the MADT is required,
/// the SRAT, SLIT, SPCR and FADT are read when listed.
pub fn parse<M: PhysMem>(mem: &M, rsdp_pa: u64) -> Result<AcpiInfo, AcpiError> {
    let t = tables(mem, rsdp_pa)?;
    let mut info = AcpiInfo {
        revision: t.rsdp.revision,
        oem: t.rsdp.oem_id,
        bad_checksums: t.bad_checksums,
        ..AcpiInfo::default()
    };
    for r in &t.list {
        let _ = info.tables.push(r.sig);
    }
    let madt_t =
        t.find(Sig::MADT)?
            .ok_or(AcpiError::new(Sig::MADT, "XSDT entries", Problem::Missing))?;
    madt(&madt_t, &mut info)?;
    if let Some(s) = t.find(Sig::SRAT)? {
        srat(&s, &mut info)?;
    }
    if let Some(s) = t.find(Sig::SLIT)? {
        slit(&s, &mut info)?;
    }
    if let Some(s) = t.find(Sig::SPCR)? {
        spcr(&s, &mut info)?;
    }
    if let Some(f) = t.find(Sig::FADT)? {
        fadt(&f, &mut info)?;
    }
    // Nodes of the cores from the SRAT's processor affinity.
    for c in info.cores.iter_mut() {
        if let Some(&(_, node)) = info.cpu_nodes.iter().find(|&&(id, _)| id == c.hw_id) {
            c.node = node;
        }
    }
    Ok(info)
}

/// Fails unless entry `e` of `table` has `min` bytes.
fn need_entry(
    table: Sig,
    e: &super::Entry,
    min: usize,
    field: &'static str,
) -> Result<(), AcpiError> {
    if e.bytes.len() < min {
        return Err(AcpiError::new(
            table,
            field,
            Problem::TooShort {
                len: e.bytes.len() as u64,
                min: min as u64,
            },
        )
        .at(e.index));
    }
    Ok(())
}

/// MADT: the Core Programmable Interrupt Controller structures (type
/// 0x11: version, ACPI processor UID, physical core ID, flags bit 0 =
/// enabled). Other structures (EIOINTC, MSI, BIO PIC, ...) are skipped.
fn madt(t: &Sdt, info: &mut AcpiInfo) -> Result<(), AcpiError> {
    t.need(MADT_ENTRIES, "Length")?;
    for e in entries(t, MADT_ENTRIES) {
        let e = e?;
        if e.kind != 0x11 {
            continue;
        }
        need_entry(Sig::MADT, &e, 15, "Core PIC Length")?;
        let d = e.bytes;
        let (uid, hw_id, flags) = (u32_at(d, 3), u32_at(d, 7), u32_at(d, 11));
        if flags & 1 == 0 {
            info.cores_disabled += 1;
            continue;
        }
        let dup = |field, v: u32| {
            AcpiError::new(Sig::MADT, field, Problem::Duplicate(v.into())).at(e.index)
        };
        if info.cores.iter().any(|c| c.hw_id == hw_id) {
            return Err(dup("Core PIC Physical Core ID", hw_id));
        }
        if info.cores.iter().any(|c| c.uid == uid) {
            return Err(dup("Core PIC ACPI Processor UID", uid));
        }
        if info
            .cores
            .push(Core {
                uid,
                hw_id,
                node: 0,
            })
            .is_err()
        {
            info.cpus_ignored += 1;
        }
    }
    Ok(())
}

/// SRAT: processor affinity (type 0: proximity domain [7:0] at 2, APIC
/// ID = physical core ID at 3, flags at 4, domain [31:8] at 9; type 2:
/// x2APIC affinity: domain at 4, ID at 8, flags at 12) and memory affinity
/// (type 1: domain at 2, base at 8, length at 16, flags at 28: bit 0
/// enabled, bit 1 hot-pluggable). Structures start at offset 48.
fn srat(t: &Sdt, info: &mut AcpiInfo) -> Result<(), AcpiError> {
    t.need(SRAT_ENTRIES, "Length")?;
    for e in entries(t, SRAT_ENTRIES) {
        let e = e?;
        let d = e.bytes;
        match e.kind {
            0 => {
                need_entry(Sig::SRAT, &e, 16, "Processor Affinity Length")?;
                if u32_at(d, 4) & 1 != 0 {
                    let node = u32::from(d[2]) | u32::from_le_bytes([d[9], d[10], d[11], 0]) << 8;
                    let _ = info.cpu_nodes.push((u32::from(d[3]), node));
                }
            }
            2 => {
                need_entry(Sig::SRAT, &e, 24, "x2APIC Affinity Length")?;
                if u32_at(d, 12) & 1 != 0 {
                    let _ = info.cpu_nodes.push((u32_at(d, 8), u32_at(d, 4)));
                }
            }
            1 => {
                need_entry(Sig::SRAT, &e, 40, "Memory Affinity Length")?;
                let flags = u32_at(d, 28);
                if flags & 1 == 0 {
                    continue;
                }
                let (base, size) = (u64_at(d, 8), u64_at(d, 16));
                if base.checked_add(size).is_none() {
                    return Err(AcpiError::new(
                        Sig::SRAT,
                        "Memory Affinity Base + Length (wraps)",
                        Problem::Unsupported(base),
                    )
                    .at(e.index));
                }
                let _ = info.memory.push(MemAffinity {
                    base,
                    size,
                    node: u32_at(d, 2),
                    hotplug: flags & 2 != 0,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// SLIT: the number of localities (u64 at 36), then an N x N byte matrix
/// whose diagonal is 10 (the distance of a node to itself).
fn slit(s: &Sdt, info: &mut AcpiInfo) -> Result<(), AcpiError> {
    s.need(44, "Number of System Localities")?;
    let t = s.bytes();
    let n = u64_at(t, 36);
    let cells = n.checked_mul(n).filter(|&c| c <= (t.len() - 44) as u64);
    let Some(cells) = cells else {
        return Err(AcpiError::new(
            Sig::SLIT,
            "Number of System Localities (matrix past the table)",
            Problem::Unsupported(n),
        ));
    };
    let m = &t[44..44 + cells as usize];
    for i in 0..n as usize {
        let d = m[i * n as usize + i];
        if d != 10 {
            return Err(AcpiError::new(
                Sig::SLIT,
                "Entry[i][i]",
                Problem::Unexpected {
                    got: d.into(),
                    want: 10,
                },
            )
            .at(i));
        }
    }
    info.localities = n;
    if n as usize <= MAX_NODES {
        info.distances = Vec::from_slice(m).unwrap_or_default();
    }
    Ok(())
}

/// A Generic Address Structure at `off` of table `t` (which has the 12
/// bytes): system memory only (space ID 0), access size 1-4 (byte ..
/// qword; 0 = from the bit width).
fn gas(t: &Sdt, off: usize, name: &'static str) -> Result<Option<Reg>, AcpiError> {
    let g = &t.bytes()[off..off + 12];
    let pa = u64_at(g, 4);
    if pa == 0 {
        return Ok(None);
    }
    let bad = |v: u8| AcpiError::new(t.signature(), name, Problem::Unsupported(v.into()));
    if g[0] != 0 {
        return Err(bad(g[0]));
    }
    let width = match (g[3], g[1]) {
        (1, _) | (0, 8) => 1,
        (2, _) | (0, 16) => 2,
        (3, _) | (0, 32) => 4,
        (4, _) | (0, 64) => 8,
        (_, bits) => return Err(bad(bits)),
    };
    Ok(Some(Reg { pa, width }))
}

/// SPCR: interface type at 36, the base address GAS at 40.
fn spcr(t: &Sdt, info: &mut AcpiInfo) -> Result<(), AcpiError> {
    t.need(52, "Length")?;
    if let Some(reg) = gas(t, 40, "Base Address (not system memory, or bad width)")? {
        info.uart = Some(SpcrUart {
            interface: u8_at(t.bytes(), 36),
            reg,
        });
    }
    Ok(())
}

/// FADT: the reset register (GAS at 116, value at 128) and, for ACPI 5+
/// hardware-reduced platforms, the sleep control register (GAS at 244).
fn fadt(t: &Sdt, info: &mut AcpiInfo) -> Result<(), AcpiError> {
    let b = t.bytes();
    if b.len() >= 129 {
        let flags = u32_at(b, 112);
        // RESET_REG_SUP (bit 10).
        if flags & (1 << 10) != 0 {
            if let Some(r) = gas(t, 116, "RESET_REG")? {
                info.reset = Some((r, b[128]));
            }
        }
    }
    if b.len() >= 256 {
        info.sleep_control = gas(t, 244, "SLEEP_CONTROL_REG")?;
    }
    Ok(())
}

/// True for SPCR interface types kestrel's 16550 driver serves: 0x00
/// (full 16550), 0x01 (16450 subset), 0x12 (16550-compatible with the
/// GAS describing it).
pub fn is_16550(interface: u8) -> bool {
    matches!(interface, 0x00 | 0x01 | 0x12)
}

/// A LoongArch board from the ACPI tables and the RAM regions the UEFI
/// memory map gives: the cores in MADT order (their physical IDs are the
/// IPI targets), the console from the SPCR (a 16550 in system memory)
/// when it names one. The counter frequency, backend and command line are
/// the caller's (CPUCFG, the load options).
pub fn loongarch_board(info: &AcpiInfo, memory: &[MemRegion]) -> BoardInfo {
    let mut model: heapless::String<64> = heapless::String::new();
    let _ = model.push_str("ACPI ");
    for &b in &info.oem {
        let c = if b.is_ascii_graphic() || b == b' ' {
            b as char
        } else {
            '?'
        };
        let _ = model.push(c);
    }
    let mut cpus = Vec::new();
    for c in &info.cores {
        let _ = cpus.push(CpuDesc {
            hw_id: u64::from(c.hw_id),
        });
    }
    let mut warnings = Vec::new();
    if info.bad_checksums > 0 {
        let _ = warnings.push("ACPI: a table kestrel does not read has a bad checksum: ignored");
    }
    let uart = match info.uart {
        Some(u) if is_16550(u.interface) => Some(Uart {
            kind: UartKind::Ns16550,
            base: u.reg.pa,
        }),
        Some(_) => {
            let _ =
                warnings.push("the SPCR console is not a 16550; kestrel keeps its early console");
            None
        }
        None => None,
    };
    let mut mem = Vec::new();
    for m in memory.iter().take(crate::host::board::MAX_MEM_REGIONS) {
        let _ = mem.push(*m);
    }
    BoardInfo {
        arch: Arch::LoongArch64,
        model: crate::host::board::bounded(model.as_str().trim_end()),
        memory: mem,
        cpus,
        cpus_ignored: info.cpus_ignored,
        irqchip: IrqChip::LoongArchEiointc,
        uart,
        timer_hz: 0,
        psci: None,
        backend: Backend::LoongArchTrapEmulate,
        cmdline: heapless::String::new(),
        warnings,
        module: None,
    }
}

#[cfg(test)]
pub mod testdata {
    //! LoongArch ACPI tables for tests, on the generic builders
    //! ([`super::super::testmem`]).
    extern crate std;
    use std::vec::Vec;

    pub use super::super::testmem::{seal, table, with_tables, Mem};

    pub fn core_pic(uid: u32, hw: u32, flags: u32) -> Vec<u8> {
        let mut e = std::vec![0x11, 15, 1];
        e.extend_from_slice(&uid.to_le_bytes());
        e.extend_from_slice(&hw.to_le_bytes());
        e.extend_from_slice(&flags.to_le_bytes());
        e
    }

    /// A table of `sig` and `revision` whose body is `fixed` (its fixed
    /// part after the header), then `entries`.
    fn with_entries(sig: &[u8; 4], revision: u8, fixed: &[u8], entries: &[Vec<u8>]) -> Vec<u8> {
        let mut b = fixed.to_vec();
        for e in entries {
            b.extend_from_slice(e);
        }
        table(sig, revision, &b)
    }

    pub fn madt_table(entries: &[Vec<u8>]) -> Vec<u8> {
        // Local APIC address 0, flags 1.
        with_entries(b"APIC", 6, &[0, 0, 0, 0, 1, 0, 0, 0], entries)
    }

    pub fn cpu_affinity(hw: u8, node: u32) -> Vec<u8> {
        let mut e = std::vec![0u8; 16];
        e[0] = 0;
        e[1] = 16;
        e[2] = node as u8;
        e[3] = hw;
        e[4] = 1;
        e[9..12].copy_from_slice(&(node >> 8).to_le_bytes()[..3]);
        e
    }

    pub fn mem_affinity(base: u64, size: u64, node: u32, flags: u32) -> Vec<u8> {
        let mut e = std::vec![0u8; 40];
        e[0] = 1;
        e[1] = 40;
        e[2..6].copy_from_slice(&node.to_le_bytes());
        e[8..16].copy_from_slice(&base.to_le_bytes());
        e[16..24].copy_from_slice(&size.to_le_bytes());
        e[28..32].copy_from_slice(&flags.to_le_bytes());
        e
    }

    pub fn srat_table(entries: &[Vec<u8>]) -> Vec<u8> {
        // Reserved field 1 (as ACPI requires), then 8 reserved bytes.
        let mut fixed = [0u8; 12];
        fixed[0] = 1;
        with_entries(b"SRAT", 3, &fixed, entries)
    }

    pub fn slit_table(n: usize, m: &[u8]) -> Vec<u8> {
        let mut b = (n as u64).to_le_bytes().to_vec();
        b.extend_from_slice(m);
        table(b"SLIT", 1, &b)
    }

    pub fn spcr_table(interface: u8, base: u64) -> Vec<u8> {
        let mut b = std::vec![0u8; 80 - 36];
        b[0] = interface;
        // GAS at 40 (body offset 4): system memory, 8 bits, byte access.
        b[4] = 0;
        b[5] = 8;
        b[7] = 1;
        b[8..16].copy_from_slice(&base.to_le_bytes());
        table(b"SPCR", 2, &b)
    }

    pub fn fadt_table(sleep: u64, reset: u64) -> Vec<u8> {
        let mut b = std::vec![0u8; 276 - 36];
        let gas = |b: &mut [u8], off: usize, pa: u64| {
            b[off - 36] = 0;
            b[off - 36 + 1] = 8;
            b[off - 36 + 3] = 1;
            b[off - 36 + 4..off - 36 + 12].copy_from_slice(&pa.to_le_bytes());
        };
        b[112 - 36..116 - 36].copy_from_slice(&((1u32 << 20) | (1 << 10)).to_le_bytes());
        gas(&mut b, 116, reset);
        b[128 - 36] = 0x42;
        gas(&mut b, 244, sleep);
        table(b"FACP", 5, &b)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::testdata::*;
    use super::*;
    use std::vec::Vec as StdVec;

    /// What QEMU 10's LoongArch virt machine gives with `-smp 4,sockets=2`
    /// and two NUMA nodes (cores 0-1 on node 0, 2-3 on node 1).
    fn qemu_like() -> StdVec<StdVec<u8>> {
        let madt = madt_table(&[
            core_pic(0, 0, 1),
            core_pic(1, 1, 1),
            core_pic(2, 2, 1),
            core_pic(3, 3, 1),
            std::vec![20, 13, 1, 3, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0],
        ]);
        let srat = srat_table(&[
            cpu_affinity(0, 0),
            cpu_affinity(1, 0),
            cpu_affinity(2, 1),
            cpu_affinity(3, 1),
            mem_affinity(0, 0x1000_0000, 0, 1),
            mem_affinity(0x8000_0000, 0x1000_0000, 0, 1),
            mem_affinity(0x9000_0000, 0x2000_0000, 1, 1),
        ]);
        let slit = slit_table(2, &[10, 20, 20, 10]);
        std::vec![
            fadt_table(0x100e_001c, 0x100e_001e),
            madt,
            srat,
            slit,
            spcr_table(0, 0x1fe0_01e0)
        ]
    }

    /// The RSDP's address in [`with_tables`] memory.
    const RSDP: u64 = 0x1000;

    #[test]
    fn reads_what_qemu_gives() {
        let info = parse(&with_tables(&qemu_like()), RSDP).unwrap();
        assert_eq!(info.revision, 2);
        assert_eq!(&info.oem, b"KSTREL");
        let ids: StdVec<(u32, u32, u32)> = info
            .cores
            .iter()
            .map(|c| (c.uid, c.hw_id, c.node))
            .collect();
        assert_eq!(ids, [(0, 0, 0), (1, 1, 0), (2, 2, 1), (3, 3, 1)]);
        assert_eq!(info.core_nodes(), 2);
        assert_eq!(info.memory.len(), 3);
        assert_eq!(info.memory[2].node, 1);
        assert_eq!(info.distance(0, 1), Some(20));
        assert_eq!(info.distance(1, 1), Some(10));
        assert_eq!(info.distance(2, 0), None);
        let uart = info.uart.unwrap();
        assert!(is_16550(uart.interface));
        assert_eq!(
            uart.reg,
            Reg {
                pa: 0x1fe0_01e0,
                width: 1
            }
        );
        assert_eq!(
            info.sleep_control,
            Some(Reg {
                pa: 0x100e_001c,
                width: 1
            })
        );
        assert_eq!(
            info.reset,
            Some((
                Reg {
                    pa: 0x100e_001e,
                    width: 1
                },
                0x42
            ))
        );
        assert_eq!(info.tables.len(), 5);
    }

    #[test]
    fn disabled_cores_and_sparse_ids_across_nodes() {
        // A 3C5000-like layout: 16 cores, 4 per node, IDs node * 4 + core,
        // one disabled; listed out of order.
        let mut entries = StdVec::new();
        let mut aff = StdVec::new();
        for n in (0..4u32).rev() {
            for c in 0..4u32 {
                let hw = n * 4 + c;
                entries.push(core_pic(hw + 100, hw, if hw == 6 { 0 } else { 1 }));
                aff.push(cpu_affinity(hw as u8, n));
            }
        }
        let m = with_tables(&[madt_table(&entries), srat_table(&aff)]);
        let info = parse(&m, RSDP).unwrap();
        assert_eq!(info.cores.len(), 15);
        assert_eq!(info.cores_disabled, 1);
        assert_eq!(info.cores[0].hw_id, 12);
        assert_eq!(info.cores[0].node, 3);
        assert!(info.cores.iter().all(|c| c.node == c.hw_id / 4));
        assert_eq!(info.core_nodes(), 4);
        assert_eq!(info.localities, 0);
    }

    #[test]
    fn more_cores_than_kestrel_keeps_are_counted() {
        let entries: StdVec<_> = (0..(MAX_CORES as u32 + 3))
            .map(|i| core_pic(i, i, 1))
            .collect();
        let info = parse(&with_tables(&[madt_table(&entries)]), RSDP).unwrap();
        assert_eq!(info.cores.len(), MAX_CORES);
        assert_eq!(info.cpus_ignored, 3);
    }

    fn err(tables: StdVec<StdVec<u8>>) -> AcpiError {
        parse(&with_tables(&tables), RSDP).unwrap_err()
    }

    fn is(e: AcpiError, table: Sig, field: &str) -> bool {
        e.table == table && e.field == field
    }

    #[test]
    fn malformed_tables_name_table_and_field() {
        // A MADT structure that runs past the table.
        let mut m = madt_table(&[core_pic(0, 0, 1)]);
        m[44 + 1] = 40;
        seal(&mut m, 9);
        let e = err(std::vec![m]);
        assert!(is(e, Sig::MADT, "entry Length"), "{e}");
        assert_eq!(e.entry, Some(0));
        assert!(std::format!("{e}").contains("APIC"));
        // A zero-length structure.
        let mut m = madt_table(&[core_pic(0, 0, 1)]);
        m[45] = 0;
        seal(&mut m, 9);
        assert!(is(err(std::vec![m]), Sig::MADT, "entry Length"));
        // A short core PIC.
        let mut short = core_pic(0, 0, 1);
        short.truncate(10);
        short[1] = 10;
        let e = err(std::vec![madt_table(&[short])]);
        assert!(is(e, Sig::MADT, "Core PIC Length"), "{e}");
        assert_eq!(e.problem, Problem::TooShort { len: 10, min: 15 });
        // The same physical ID twice.
        let e = err(std::vec![madt_table(&[
            core_pic(0, 5, 1),
            core_pic(1, 5, 1)
        ])]);
        assert!(std::format!("{e}").contains("Physical Core ID"), "{e}");
        assert_eq!((e.entry, e.problem), (Some(1), Problem::Duplicate(5)));
        // A bad checksum.
        let mut m = madt_table(&[core_pic(0, 0, 1)]);
        m[9] = m[9].wrapping_add(1);
        assert_eq!(err(std::vec![m]).problem, Problem::Checksum);
        // A length below the header.
        let mut m = madt_table(&[]);
        m[4..8].copy_from_slice(&8u32.to_le_bytes());
        let e = err(std::vec![m]);
        assert_eq!(e.field, "Length", "{e}");
        // A MADT too short for its entries.
        let e = err(std::vec![table(b"APIC", 6, &[0; 4])]);
        assert!(is(e, Sig::MADT, "Length"), "{e}");
        // A SLIT whose matrix does not fit, and one with a bad diagonal.
        let s = slit_table(3, &[10, 20, 20, 10]);
        let e = err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]);
        assert_eq!(e.table, Sig::SLIT, "{e}");
        let s = slit_table(2, &[10, 20, 20, 11]);
        let e = err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]);
        assert!(is(e, Sig::SLIT, "Entry[i][i]"), "{e}");
        assert_eq!(e.entry, Some(1));
        // SRAT memory that wraps.
        let s = srat_table(&[mem_affinity(u64::MAX - 10, 100, 0, 1)]);
        let e = err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]);
        assert_eq!(e.table, Sig::SRAT, "{e}");
        // An SPCR in I/O space.
        let mut s = spcr_table(0, 0x3f8);
        s[40] = 1;
        seal(&mut s, 9);
        let e = err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]);
        assert_eq!((e.table, e.problem), (Sig::SPCR, Problem::Unsupported(1)));
        // No MADT at all.
        let e = err(std::vec![slit_table(1, &[10])]);
        assert_eq!((e.table, e.problem), (Sig::MADT, Problem::Missing));
    }

    #[test]
    fn bad_root_pointers() {
        let good = || with_tables(&[madt_table(&[core_pic(0, 0, 1)])]);
        let m = good();
        // Wrong address: no signature.
        let e = parse(&m, RSDP + 0x10).unwrap_err();
        assert_eq!(e.table, Sig::RSDP);
        // Outside memory.
        let e = parse(&m, 0x10_0000).unwrap_err();
        assert!(matches!(e.problem, Problem::Unreadable { .. }), "{e}");
        // RSDP checksum.
        let mut bad = good();
        bad.get_mut(RSDP)[8] ^= 1;
        let e = parse(&bad, RSDP).unwrap_err();
        assert_eq!((e.table, e.problem), (Sig::RSDP, Problem::Checksum));
        // Extended checksum.
        let mut bad = good();
        bad.get_mut(RSDP)[32] ^= 1;
        let e = parse(&bad, RSDP).unwrap_err();
        assert!(is(e, Sig::RSDP, "Extended Checksum"), "{e}");
        // XSDT pointing at a table with another signature (the MADT).
        let mut bad = good();
        let r = bad.get_mut(RSDP);
        r[24..32].copy_from_slice(&0x3000u64.to_le_bytes());
        seal(r, 32);
        let e = parse(&bad, RSDP).unwrap_err();
        assert!(matches!(e.problem, Problem::Signature(_)), "{e}");
        // An XSDT entry pointing outside memory.
        let mut bad = good();
        let x = bad.get_mut(0x2000);
        x[36..44].copy_from_slice(&0xdead_0000u64.to_le_bytes());
        seal(x, 9);
        let e = parse(&bad, RSDP).unwrap_err();
        assert!(matches!(e.problem, Problem::Unreadable { .. }), "{e}");
        assert_eq!((e.table, e.entry), (Sig::XSDT, Some(0)));
    }

    #[test]
    fn random_corruption_never_panics() {
        let good = with_tables(&qemu_like());
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..4000 {
            let mut m = Mem {
                blocks: good.blocks.clone(),
            };
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let block = &mut m.blocks[(seed % 7) as usize].1;
                let at = ((seed >> 8) % block.len() as u64) as usize;
                block[at] = (seed >> 32) as u8;
            }
            let _ = parse(&m, RSDP);
        }
    }

    #[test]
    fn board_from_tables() {
        let info = parse(&with_tables(&qemu_like()), RSDP).unwrap();
        let mem = [MemRegion {
            base: 0x20_0000,
            size: 0x0fe0_0000,
        }];
        let b = loongarch_board(&info, &mem);
        assert_eq!(b.model.as_str(), "ACPI KSTREL");
        assert_eq!(
            b.cpus.iter().map(|c| c.hw_id).collect::<StdVec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(b.cpu_index(2), Some(2));
        assert_eq!(
            b.uart,
            Some(Uart {
                kind: UartKind::Ns16550,
                base: 0x1fe0_01e0
            })
        );
        assert_eq!(b.memory_bytes(), 0x0fe0_0000);
        // An SPCR naming another kind of UART is left out, with a warning.
        let mut t = qemu_like();
        t[4] = spcr_table(0x03, 0x900_0000);
        let info = parse(&with_tables(&t), RSDP).unwrap();
        let b = loongarch_board(&info, &mem);
        assert_eq!(b.uart, None);
        assert_eq!(b.warnings.len(), 1);
        // A table kestrel does not read with a bad checksum: a warning.
        let mut t = qemu_like();
        let mut x = table(b"XYZW", 1, &[1, 2, 3]);
        x[9] = x[9].wrapping_add(1);
        t.push(x);
        let info = parse(&with_tables(&t), RSDP).unwrap();
        assert_eq!(info.bad_checksums, 1);
        let b = loongarch_board(&info, &mem);
        assert!(b.warnings.iter().any(|w| w.contains("bad checksum")));
    }
}
