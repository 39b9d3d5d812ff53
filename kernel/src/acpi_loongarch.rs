//! A reader for the ACPI tables UEFI firmware hands over (ACPI 6.5), for
//! what a hypervisor needs to start: the cores and their physical IDs
//! (MADT), the NUMA nodes of cores and memory (SRAT) and their distances
//! (SLIT), the console UART (SPCR) and the power-off and reset registers
//! (FADT). Written for LoongArch (MADT core PIC entries, type 0x11); the
//! table walk and checks (RSDP, XSDT/RSDT, lengths, checksums, MADT/SRAT
//! structure walks) are not LoongArch-specific and can become the shared
//! core of an arm64 reader's too.
//!
//! The tables lie in physical memory the firmware owns; the reader sees it
//! through [`Memory`] (the arch maps it, host tests give byte arrays).
//! Every length, offset and checksum is checked before use: a malformed
//! table is an [`AcpiError`] naming the table and field, never a panic.
//! A table kestrel does not need is skipped (its header and checksum are
//! still checked, since a bad one says the firmware's tables are broken).

use core::fmt;

use heapless::Vec;

use crate::board::{Arch, Backend, BoardInfo, CpuDesc, IrqChip, MemRegion, Uart, UartKind};

/// Physical memory as the reader sees it.
pub trait Memory {
    /// The `len` bytes at physical `pa`, or `None` where nothing is mapped
    /// (outside RAM, or too long).
    fn bytes(&self, pa: u64, len: usize) -> Option<&[u8]>;
}

/// Largest table accepted (QEMU's whole set is under 128 KiB).
pub const MAX_TABLE: usize = 1 << 20;
/// Most tables listed in the XSDT that are looked at.
pub const MAX_ENTRIES: usize = 64;
/// Most cores kept (more are counted in [`AcpiInfo::cpus_ignored`]).
pub const MAX_CORES: usize = crate::MAX_CPUS;
/// Most memory affinity ranges kept.
pub const MAX_MEM_RANGES: usize = 16;
/// Most NUMA nodes (proximity domains) whose distances are kept.
pub const MAX_NODES: usize = 16;

const HEADER: usize = 36;

/// What is wrong with the ACPI tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcpiError {
    /// The table (`table`, e.g. "RSDP", "XSDT", "APIC") could not be read
    /// at `pa` (not in memory the firmware described, or longer than
    /// [`MAX_TABLE`]).
    Unreadable { table: Sig, pa: u64, len: u64 },
    /// A signature is not the one expected where the table was found.
    Signature { table: Sig, pa: u64, found: Sig },
    /// The table's bytes do not sum to 0.
    Checksum { table: Sig, pa: u64 },
    /// A field has a value the reader cannot use.
    Field {
        table: Sig,
        field: &'static str,
        value: u64,
    },
}

/// A table signature ("RSDP" for the root pointer).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sig(pub [u8; 4]);

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0 {
            let c = if b.is_ascii_graphic() { b as char } else { '?' };
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

const RSDP: Sig = Sig(*b"RSDP");
const XSDT: Sig = Sig(*b"XSDT");
const RSDT: Sig = Sig(*b"RSDT");
const MADT: Sig = Sig(*b"APIC");
const SRAT: Sig = Sig(*b"SRAT");
const SLIT: Sig = Sig(*b"SLIT");
const SPCR: Sig = Sig(*b"SPCR");
const FADT: Sig = Sig(*b"FACP");

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AcpiError::Unreadable { table, pa, len } => write!(
                f,
                "ACPI {table}: {len:#x} bytes at {pa:#x} are not readable memory (or longer than {MAX_TABLE:#x})"
            ),
            AcpiError::Signature { table, pa, found } => {
                write!(f, "ACPI {table}: the table at {pa:#x} has signature {found}")
            }
            AcpiError::Checksum { table, pa } => {
                write!(f, "ACPI {table}: checksum of the table at {pa:#x} is wrong")
            }
            AcpiError::Field {
                table,
                field,
                value,
            } => write!(f, "ACPI {table}: field {field} has unusable value {value:#x}"),
        }
    }
}

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
    /// RSDP revision (0: ACPI 1.0 with an RSDT, 2: XSDT).
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
    pub tables: Vec<Sig, MAX_ENTRIES>,
    /// SRAT processor affinity: (physical core ID, proximity domain).
    pub cpu_nodes: Vec<(u32, u32), 64>,
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

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from(u32_at(b, off)) | u64::from(u32_at(b, off + 4)) << 32
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
}

fn field(table: Sig, field: &'static str, value: u64) -> AcpiError {
    AcpiError::Field {
        table,
        field,
        value,
    }
}

fn read<M: Memory + ?Sized>(mem: &M, table: Sig, pa: u64, len: u64) -> Result<&[u8], AcpiError> {
    let bad = AcpiError::Unreadable { table, pa, len };
    if len > MAX_TABLE as u64 {
        return Err(bad);
    }
    mem.bytes(pa, len as usize)
        .filter(|b| b.len() == len as usize)
        .ok_or(bad)
}

/// A whole system description table at `pa`, header and checksum checked;
/// `expect` is the signature wanted (the XSDT/RSDT), or `None` for any.
fn table<M: Memory + ?Sized>(
    mem: &M,
    pa: u64,
    expect: Option<Sig>,
) -> Result<(Sig, &[u8]), AcpiError> {
    let name = expect.unwrap_or(Sig(*b"SDT?"));
    let head = read(mem, name, pa, HEADER as u64)?;
    let sig = Sig([head[0], head[1], head[2], head[3]]);
    if let Some(want) = expect {
        if sig != want {
            return Err(AcpiError::Signature {
                table: want,
                pa,
                found: sig,
            });
        }
    }
    let len = u64::from(u32_at(head, 4));
    if len < HEADER as u64 {
        return Err(field(sig, "Length", len));
    }
    let t = read(mem, sig, pa, len)?;
    if sum(t) != 0 {
        return Err(AcpiError::Checksum { table: sig, pa });
    }
    Ok((sig, t))
}

/// Reads the tables from the RSDP at `rsdp_pa`.
pub fn parse<M: Memory + ?Sized>(mem: &M, rsdp_pa: u64) -> Result<AcpiInfo, AcpiError> {
    let mut info = AcpiInfo::default();
    let r = read(mem, RSDP, rsdp_pa, 20)?;
    if &r[..8] != b"RSD PTR " {
        return Err(AcpiError::Signature {
            table: RSDP,
            pa: rsdp_pa,
            found: Sig([r[0], r[1], r[2], r[3]]),
        });
    }
    if sum(r) != 0 {
        return Err(AcpiError::Checksum {
            table: RSDP,
            pa: rsdp_pa,
        });
    }
    info.oem.copy_from_slice(&r[9..15]);
    info.revision = r[15];
    let (root_pa, root_sig, entry) = if info.revision >= 2 {
        let head = read(mem, RSDP, rsdp_pa, 36)?;
        let len = u32_at(head, 20);
        if !(36..=4096).contains(&len) {
            return Err(field(RSDP, "Length", u64::from(len)));
        }
        let whole = read(mem, RSDP, rsdp_pa, u64::from(len))?;
        if sum(whole) != 0 {
            return Err(field(RSDP, "Extended Checksum", u64::from(whole[32])));
        }
        (u64_at(head, 24), XSDT, 8)
    } else {
        (u64::from(u32_at(r, 16)), RSDT, 4)
    };
    if root_pa == 0 {
        return Err(field(RSDP, "XsdtAddress", 0));
    }
    let (_, root) = table(mem, root_pa, Some(root_sig))?;
    let body = &root[HEADER..];
    if body.len() % entry != 0 {
        return Err(field(root_sig, "Length", root.len() as u64));
    }
    for e in body.chunks_exact(entry).take(MAX_ENTRIES) {
        let pa = if entry == 8 {
            u64_at(e, 0)
        } else {
            u64::from(u32_at(e, 0))
        };
        let (sig, t) = table(mem, pa, None)?;
        let _ = info.tables.push(sig);
        match sig {
            MADT => madt(t, &mut info)?,
            SRAT => srat(t, &mut info)?,
            SLIT => slit(t, &mut info)?,
            SPCR => spcr(t, &mut info)?,
            FADT => fadt(t, &mut info)?,
            _ => {}
        }
    }
    if !info.tables.contains(&MADT) {
        return Err(field(root_sig, "Entry (no MADT among the tables)", 0));
    }
    // Nodes of the cores from the SRAT's processor affinity (the SRAT may
    // come before or after the MADT).
    for c in info.cores.iter_mut() {
        if let Some(&(_, node)) = info.cpu_nodes.iter().find(|&&(id, _)| id == c.hw_id) {
            c.node = node;
        }
    }
    Ok(info)
}

/// Interrupt controller structures (from offset 44): type, length, data.
/// Each must lie inside the table and be at least 2 bytes long.
fn subtables(t: &[u8], sig: Sig, start: usize) -> Result<SubIter<'_>, AcpiError> {
    if t.len() < start {
        return Err(field(sig, "Length", t.len() as u64));
    }
    Ok(SubIter { t, sig, off: start })
}

struct SubIter<'a> {
    t: &'a [u8],
    sig: Sig,
    off: usize,
}

impl<'a> Iterator for SubIter<'a> {
    type Item = Result<(u8, usize, &'a [u8]), AcpiError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.off >= self.t.len() {
            return None;
        }
        let off = self.off;
        if self.t.len() - off < 2 {
            self.off = self.t.len();
            return Some(Err(field(
                self.sig,
                "structure header (past the table)",
                off as u64,
            )));
        }
        let len = self.t[off + 1] as usize;
        if len < 2 || off + len > self.t.len() {
            self.off = self.t.len();
            return Some(Err(field(self.sig, "structure Length", len as u64)));
        }
        self.off = off + len;
        Some(Ok((self.t[off], off, &self.t[off..off + len])))
    }
}

/// MADT: the Core Programmable Interrupt Controller structures (type
/// 0x11: version, ACPI processor UID, physical core ID, flags bit 0 =
/// enabled). Other structures (EIOINTC, MSI, BIO PIC, ...) are skipped.
fn madt(t: &[u8], info: &mut AcpiInfo) -> Result<(), AcpiError> {
    for s in subtables(t, MADT, 44)? {
        let (ty, _, d) = s?;
        if ty != 0x11 {
            continue;
        }
        if d.len() < 15 {
            return Err(field(MADT, "Core PIC Length", d.len() as u64));
        }
        let (uid, hw_id, flags) = (u32_at(d, 3), u32_at(d, 7), u32_at(d, 11));
        if flags & 1 == 0 {
            info.cores_disabled += 1;
            continue;
        }
        if info.cores.iter().any(|c| c.hw_id == hw_id) {
            return Err(field(
                MADT,
                "Core PIC Physical Core ID (listed twice)",
                hw_id.into(),
            ));
        }
        if info.cores.iter().any(|c| c.uid == uid) {
            return Err(field(
                MADT,
                "Core PIC ACPI Processor UID (listed twice)",
                uid.into(),
            ));
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
fn srat(t: &[u8], info: &mut AcpiInfo) -> Result<(), AcpiError> {
    for s in subtables(t, SRAT, 48)? {
        let (ty, _, d) = s?;
        match ty {
            0 => {
                if d.len() < 16 {
                    return Err(field(SRAT, "Processor Affinity Length", d.len() as u64));
                }
                if u32_at(d, 4) & 1 != 0 {
                    let node = u32::from(d[2]) | u32::from_le_bytes([d[9], d[10], d[11], 0]) << 8;
                    let _ = info.cpu_nodes.push((u32::from(d[3]), node));
                }
            }
            2 => {
                if d.len() < 24 {
                    return Err(field(SRAT, "x2APIC Affinity Length", d.len() as u64));
                }
                if u32_at(d, 12) & 1 != 0 {
                    let _ = info.cpu_nodes.push((u32_at(d, 8), u32_at(d, 4)));
                }
            }
            1 => {
                if d.len() < 40 {
                    return Err(field(SRAT, "Memory Affinity Length", d.len() as u64));
                }
                let flags = u32_at(d, 28);
                if flags & 1 == 0 {
                    continue;
                }
                let (base, size) = (u64_at(d, 8), u64_at(d, 16));
                if base.checked_add(size).is_none() {
                    return Err(field(SRAT, "Memory Affinity Base + Length (wraps)", base));
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
fn slit(t: &[u8], info: &mut AcpiInfo) -> Result<(), AcpiError> {
    if t.len() < 44 {
        return Err(field(SLIT, "Length", t.len() as u64));
    }
    let n = u64_at(t, 36);
    let cells = n.checked_mul(n).filter(|&c| c <= (t.len() - 44) as u64);
    let Some(cells) = cells else {
        return Err(field(
            SLIT,
            "Number of System Localities (matrix past the table)",
            n,
        ));
    };
    let m = &t[44..44 + cells as usize];
    for i in 0..n as usize {
        if m[i * n as usize + i] != 10 {
            return Err(field(SLIT, "Entry[i][i] (not 10)", i as u64));
        }
    }
    info.localities = n;
    if n as usize <= MAX_NODES {
        info.distances = Vec::from_slice(m).unwrap_or_default();
    }
    Ok(())
}

/// A Generic Address Structure at `off` of table `sig`: system memory
/// only (space ID 0), access size 1-4 (byte .. qword; 0 = from the bit
/// width).
fn gas(t: &[u8], off: usize, sig: Sig, name: &'static str) -> Result<Option<Reg>, AcpiError> {
    let g = &t[off..off + 12];
    let pa = u64_at(g, 4);
    if pa == 0 {
        return Ok(None);
    }
    if g[0] != 0 {
        return Err(field(sig, name, u64::from(g[0])));
    }
    let width = match (g[3], g[1]) {
        (1, _) | (0, 8) => 1,
        (2, _) | (0, 16) => 2,
        (3, _) | (0, 32) => 4,
        (4, _) | (0, 64) => 8,
        (_, bits) => return Err(field(sig, name, u64::from(bits))),
    };
    Ok(Some(Reg { pa, width }))
}

/// SPCR: interface type at 36, the base address GAS at 40.
fn spcr(t: &[u8], info: &mut AcpiInfo) -> Result<(), AcpiError> {
    if t.len() < 52 {
        return Err(field(SPCR, "Length", t.len() as u64));
    }
    if let Some(reg) = gas(
        t,
        40,
        SPCR,
        "Base Address (not system memory, or bad width)",
    )? {
        info.uart = Some(SpcrUart {
            interface: t[36],
            reg,
        });
    }
    Ok(())
}

/// FADT: the reset register (GAS at 116, value at 128) and, for ACPI 5+
/// hardware-reduced platforms, the sleep control register (GAS at 244).
fn fadt(t: &[u8], info: &mut AcpiInfo) -> Result<(), AcpiError> {
    if t.len() >= 129 {
        let flags = u32_at(t, 112);
        // RESET_REG_SUP (bit 10).
        if flags & (1 << 10) != 0 {
            if let Some(r) = gas(t, 116, FADT, "RESET_REG")? {
                info.reset = Some((r, t[128]));
            }
        }
    }
    if t.len() >= 256 {
        info.sleep_control = gas(t, 244, FADT, "SLEEP_CONTROL_REG")?;
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
    for m in memory.iter().take(crate::board::MAX_MEM_REGIONS) {
        let _ = mem.push(*m);
    }
    BoardInfo {
        arch: Arch::LoongArch64,
        model: crate::board::bounded(model.as_str().trim_end()),
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
    }
}

#[cfg(test)]
pub mod testdata {
    //! Building ACPI tables for tests.
    extern crate std;
    use std::vec::Vec;

    /// A table with a header (`sig`, revision 1), `body` after it, the
    /// checksum fixed.
    pub fn sdt(sig: &[u8; 4], rev: u8, body: &[u8]) -> Vec<u8> {
        let mut t = std::vec![0u8; 36];
        t[..4].copy_from_slice(sig);
        t[8] = rev;
        t[10..16].copy_from_slice(b"KESTRL");
        t.extend_from_slice(body);
        let len = t.len() as u32;
        t[4..8].copy_from_slice(&len.to_le_bytes());
        fix(&mut t, 9);
        t
    }

    /// Sets byte `at` so that `t` sums to 0.
    pub fn fix(t: &mut [u8], at: usize) {
        t[at] = 0;
        let s = t.iter().fold(0u8, |a, &x| a.wrapping_add(x));
        t[at] = 0u8.wrapping_sub(s);
    }

    pub fn core_pic(uid: u32, hw: u32, flags: u32) -> Vec<u8> {
        let mut e = std::vec![0x11, 15, 1];
        e.extend_from_slice(&uid.to_le_bytes());
        e.extend_from_slice(&hw.to_le_bytes());
        e.extend_from_slice(&flags.to_le_bytes());
        e
    }

    pub fn madt_table(entries: &[Vec<u8>]) -> Vec<u8> {
        let mut b = std::vec![0u8; 8];
        b[4] = 1;
        for e in entries {
            b.extend_from_slice(e);
        }
        sdt(b"APIC", 6, &b)
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
        let mut b = std::vec![0u8; 12];
        b[0] = 1;
        for e in entries {
            b.extend_from_slice(e);
        }
        sdt(b"SRAT", 3, &b)
    }

    pub fn slit_table(n: usize, m: &[u8]) -> Vec<u8> {
        let mut b = (n as u64).to_le_bytes().to_vec();
        b.extend_from_slice(m);
        sdt(b"SLIT", 1, &b)
    }

    pub fn spcr_table(interface: u8, base: u64) -> Vec<u8> {
        let mut b = std::vec![0u8; 80 - 36];
        b[0] = interface;
        // GAS at 40 (body offset 4): system memory, 8 bits, byte access.
        b[4] = 0;
        b[5] = 8;
        b[7] = 1;
        b[8..16].copy_from_slice(&base.to_le_bytes());
        sdt(b"SPCR", 2, &b)
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
        sdt(b"FACP", 5, &b)
    }

    /// An image of physical memory: tables placed from `base`, each at a
    /// 16-byte boundary, an XSDT listing them and an RSDP at `base`.
    pub struct Image {
        pub base: u64,
        pub bytes: Vec<u8>,
    }

    impl Image {
        pub fn build(base: u64, tables: &[Vec<u8>]) -> Image {
            let mut bytes = std::vec![0u8; 48];
            let mut addrs = Vec::new();
            for t in tables {
                while !bytes.len().is_multiple_of(16) {
                    bytes.push(0);
                }
                addrs.push(base + bytes.len() as u64);
                bytes.extend_from_slice(t);
            }
            while !bytes.len().is_multiple_of(16) {
                bytes.push(0);
            }
            let xsdt_pa = base + bytes.len() as u64;
            let mut body = Vec::new();
            for a in addrs {
                body.extend_from_slice(&a.to_le_bytes());
            }
            bytes.extend_from_slice(&sdt(b"XSDT", 1, &body));
            let r = &mut bytes[..36];
            r[..8].copy_from_slice(b"RSD PTR ");
            r[9..15].copy_from_slice(b"KESTRL");
            r[15] = 2;
            r[20..24].copy_from_slice(&36u32.to_le_bytes());
            r[24..32].copy_from_slice(&xsdt_pa.to_le_bytes());
            fix(&mut r[..20], 8);
            fix(&mut r[..36], 32);
            Image { base, bytes }
        }
    }

    impl super::Memory for Image {
        fn bytes(&self, pa: u64, len: usize) -> Option<&[u8]> {
            let off = usize::try_from(pa.checked_sub(self.base)?).ok()?;
            self.bytes.get(off..off.checked_add(len)?)
        }
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

    #[test]
    fn reads_what_qemu_gives() {
        let img = Image::build(0x1000, &qemu_like());
        let info = parse(&img, 0x1000).unwrap();
        assert_eq!(info.revision, 2);
        assert_eq!(&info.oem, b"KESTRL");
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
        let img = Image::build(0x4000, &[madt_table(&entries), srat_table(&aff)]);
        let info = parse(&img, 0x4000).unwrap();
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
        let img = Image::build(0, &[madt_table(&entries)]);
        let info = parse(&img, 0).unwrap();
        assert_eq!(info.cores.len(), MAX_CORES);
        assert_eq!(info.cpus_ignored, 3);
    }

    fn err(tables: StdVec<StdVec<u8>>) -> AcpiError {
        let img = Image::build(0x1000, &tables);
        parse(&img, 0x1000).unwrap_err()
    }

    #[test]
    fn malformed_tables_name_table_and_field() {
        // A MADT structure that runs past the table.
        let mut m = madt_table(&[core_pic(0, 0, 1)]);
        m[44 + 1] = 40;
        fix(&mut m, 9);
        let e = err(std::vec![m]);
        assert!(matches!(e, AcpiError::Field { table: MADT, .. }), "{e}");
        assert!(std::format!("{e}").contains("APIC"));
        // A zero-length structure.
        let mut m = madt_table(&[core_pic(0, 0, 1)]);
        m[45] = 0;
        fix(&mut m, 9);
        assert!(matches!(
            err(std::vec![m]),
            AcpiError::Field { table: MADT, .. }
        ));
        // A short core PIC.
        let mut short = core_pic(0, 0, 1);
        short.truncate(10);
        short[1] = 10;
        assert!(matches!(
            err(std::vec![madt_table(&[short])]),
            AcpiError::Field {
                table: MADT,
                field: "Core PIC Length",
                ..
            }
        ));
        // The same physical ID twice.
        let e = err(std::vec![madt_table(&[
            core_pic(0, 5, 1),
            core_pic(1, 5, 1)
        ])]);
        assert!(std::format!("{e}").contains("Physical Core ID"), "{e}");
        // A bad checksum.
        let mut m = madt_table(&[core_pic(0, 0, 1)]);
        m[9] = m[9].wrapping_add(1);
        assert!(matches!(
            err(std::vec![m]),
            AcpiError::Checksum { table: MADT, .. }
        ));
        // A length below the header.
        let mut m = madt_table(&[]);
        m[4..8].copy_from_slice(&8u32.to_le_bytes());
        assert!(matches!(
            err(std::vec![m]),
            AcpiError::Field {
                field: "Length",
                ..
            }
        ));
        // A SLIT whose matrix does not fit, and one with a bad diagonal.
        let s = slit_table(3, &[10, 20, 20, 10]);
        let e = err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]);
        assert!(matches!(e, AcpiError::Field { table: SLIT, .. }), "{e}");
        let s = slit_table(2, &[10, 20, 20, 11]);
        assert!(matches!(
            err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]),
            AcpiError::Field { table: SLIT, .. }
        ));
        // SRAT memory that wraps.
        let s = srat_table(&[mem_affinity(u64::MAX - 10, 100, 0, 1)]);
        assert!(matches!(
            err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]),
            AcpiError::Field { table: SRAT, .. }
        ));
        // An SPCR in I/O space.
        let mut s = spcr_table(0, 0x3f8);
        s[40] = 1;
        fix(&mut s, 9);
        assert!(matches!(
            err(std::vec![madt_table(&[core_pic(0, 0, 1)]), s]),
            AcpiError::Field { table: SPCR, .. }
        ));
        // No MADT at all.
        assert!(matches!(
            err(std::vec![slit_table(1, &[10])]),
            AcpiError::Field { table: XSDT, .. }
        ));
    }

    #[test]
    fn bad_root_pointers() {
        let img = Image::build(0x1000, &[madt_table(&[core_pic(0, 0, 1)])]);
        // Wrong address: no signature.
        assert!(matches!(
            parse(&img, 0x1010),
            Err(AcpiError::Signature { .. } | AcpiError::Unreadable { .. })
        ));
        // Outside memory.
        assert!(matches!(
            parse(&img, 0x10_0000),
            Err(AcpiError::Unreadable { table: RSDP, .. })
        ));
        // RSDP checksum.
        let mut bad = Image::build(0x1000, &[madt_table(&[core_pic(0, 0, 1)])]);
        bad.bytes[8] ^= 1;
        assert!(matches!(
            parse(&bad, 0x1000),
            Err(AcpiError::Checksum { table: RSDP, .. })
        ));
        // Extended checksum.
        let mut bad = Image::build(0x1000, &[madt_table(&[core_pic(0, 0, 1)])]);
        bad.bytes[32] ^= 1;
        assert!(matches!(
            parse(&bad, 0x1000),
            Err(AcpiError::Field { table: RSDP, .. })
        ));
        // XSDT pointing at a table with another signature.
        let mut bad = Image::build(0x1000, &[madt_table(&[core_pic(0, 0, 1)])]);
        bad.bytes[24..32].copy_from_slice(&0x1030u64.to_le_bytes());
        fix(&mut bad.bytes[..36], 32);
        assert!(parse(&bad, 0x1000).is_err());
        // An XSDT entry pointing outside memory.
        let mut bad = Image::build(0x1000, &[madt_table(&[core_pic(0, 0, 1)])]);
        let x = bad.bytes.len() - 8;
        bad.bytes[x..].copy_from_slice(&0xdead_0000u64.to_le_bytes());
        let xsdt = bad.bytes.len() - 44;
        fix(&mut bad.bytes[xsdt..], 9);
        assert!(matches!(
            parse(&bad, 0x1000),
            Err(AcpiError::Unreadable { .. })
        ));
    }

    #[test]
    fn random_corruption_never_panics() {
        let good = Image::build(0x1000, &qemu_like());
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..4000 {
            let mut img = Image {
                base: good.base,
                bytes: good.bytes.clone(),
            };
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % img.bytes.len() as u64) as usize;
                img.bytes[at] = (seed >> 32) as u8;
            }
            let _ = parse(&img, 0x1000);
        }
    }

    #[test]
    fn board_from_tables() {
        let img = Image::build(0x1000, &qemu_like());
        let info = parse(&img, 0x1000).unwrap();
        let mem = [MemRegion {
            base: 0x20_0000,
            size: 0x0fe0_0000,
        }];
        let b = loongarch_board(&info, &mem);
        assert_eq!(b.model.as_str(), "ACPI KESTRL");
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
        let info = parse(&Image::build(0x1000, &t), 0x1000).unwrap();
        let b = loongarch_board(&info, &mem);
        assert_eq!(b.uart, None);
        assert_eq!(b.warnings.len(), 1);
    }
}
