//! The arm64 board from ACPI tables: the [`BoardInfo`] that
//! `dtb::parse` makes from a device tree, made from the MADT (CPUs and the
//! GIC), the GTDT (the timer interrupts), the SPCR (the console UART) and
//! the FADT (the PSCI conduit). RAM comes from the UEFI memory map, not
//! from ACPI (`reserve::ram_from_uefi_map`). Field offsets are those of
//! ACPI 6.5 (section 5.2.12 MADT, 5.2.24 GTDT, 5.2.9 FADT) and Microsoft's
//! SPCR specification.

use heapless::{String, Vec};

use super::*;
use crate::host::board::*;

/// The interrupts kestrel uses at fixed PPI numbers; the tables must
/// agree when they name them (a table giving 0 gets a warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ppis {
    /// kestrel's tick: the non-secure EL2 physical timer.
    pub el2_timer: u32,
    /// The virtual timer kestrel forwards to guests.
    pub vtimer: u32,
    /// The GIC's virtualization maintenance interrupt.
    pub maintenance: u32,
}

/// A GTDT timer: its GSIV (the GIC INTID) and flags (bit 0: edge
/// triggered, bit 1: active low, bit 2: always-on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timer {
    pub gsiv: u32,
    pub flags: u32,
}

impl Timer {
    pub const fn edge(&self) -> bool {
        self.flags & 1 != 0
    }
    pub const fn active_low(&self) -> bool {
        self.flags & 2 != 0
    }
}

/// The GTDT's per-CPU timers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timers {
    pub el1_ns: Timer,
    pub virt: Timer,
    pub el2: Timer,
}

/// Everything read from the tables, beyond the [`BoardInfo`] itself (for
/// the boot log).
#[derive(Clone, Debug)]
pub struct Arm64Acpi {
    /// OEM ID and OEM table ID of the XSDT: the board's model.
    pub model: String<64>,
    pub cpus: Vec<CpuDesc, { crate::MAX_CPUS }>,
    /// Enabled CPUs beyond `MAX_CPUS` (the lowest MPIDRs are kept).
    pub cpus_ignored: usize,
    /// GICC entries not enabled (not started).
    pub cpus_disabled: usize,
    pub irqchip: IrqChip,
    /// The MADT's GICD version field (0: "detect", then inferred).
    pub gic_version: u8,
    /// Redistributor ranges the MADT lists (GICR entries) beyond the first,
    /// which kestrel does not walk.
    pub gicr_unused: usize,
    /// The VGIC maintenance interrupt of the GICC entries (0: not given).
    pub maintenance: u32,
    pub timers: Timers,
    pub uart: Option<Uart>,
    /// The SPCR's interface type.
    pub uart_type: Option<u8>,
    pub psci: Option<PsciConduit>,
    /// The tables the XSDT lists (the first [`MAX_TABLES`]), for the log
    /// and for cache maintenance; `more` were listed beyond.
    pub tables: Vec<TableRef, MAX_TABLES>,
    pub more: usize,
    pub rsdp: Rsdp,
    pub xsdt: TableRef,
    pub warnings: Vec<&'static str, MAX_WARNINGS>,
}

impl Arm64Acpi {
    /// Every `(address, length)` the reader reads: the RSDP, the XSDT and
    /// the tables it lists.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        [
            (self.rsdp.pa, u64::from(self.rsdp.length)),
            (self.xsdt.pa, u64::from(self.xsdt.len)),
        ]
        .into_iter()
        .chain(self.tables.iter().map(|t| (t.pa, u64::from(t.len))))
    }

    /// The board: what `dtb::parse` gives for a device tree, with the
    /// RAM of the UEFI memory map and the loader's command line.
    pub fn board(&self, memory: &[MemRegion], cmdline: &str) -> BoardInfo {
        let mut mem = Vec::new();
        for r in memory.iter().take(MAX_MEM_REGIONS) {
            let _ = mem.push(*r);
        }
        mem.sort_unstable_by_key(|r| r.base);
        BoardInfo {
            arch: Arch::Aarch64,
            model: self.model.clone(),
            memory: mem,
            cpus: self.cpus.clone(),
            cpus_ignored: self.cpus_ignored,
            irqchip: self.irqchip,
            uart: self.uart,
            timer_hz: 0,
            psci: self.psci,
            backend: Backend::El2,
            cmdline: bounded(cmdline),
            warnings: self.warnings.clone(),
            module: None,
        }
    }
}

// MADT (ACPI 6.5, 5.2.12).
const MADT_ENTRIES: usize = 44;
const GICC: u8 = 0x0b;
const GICD: u8 = 0x0c;
const GICR: u8 = 0x0e;
/// ACPI 5.1's GICC, up to the MPIDR (later revisions add fields).
const GICC_MIN: usize = 76;
const GICD_LEN: usize = 24;
const GICR_LEN: usize = 16;
/// MPIDR bits a GICC may set: Aff3 (39:32) and Aff2..Aff0 (23:0).
const MPIDR_AFF: u64 = 0xff_00ff_ffff;
/// A GICv3 distributor frame (64 KiB), GICv2 distributor and CPU
/// interface frames (4 KiB and 8 KiB), a GICv4 redistributor (256 KiB),
/// for the overlap checks and a redistributor range made of GICC entries.
const GICD_V3_SIZE: u64 = 0x1_0000;
const GICD_V2_SIZE: u64 = 0x1000;
const GICC_V2_SIZE: u64 = 0x2000;
const GICR_FRAME_MAX: u64 = 0x4_0000;

// GTDT (5.2.24): the four per-CPU timers, GSIV and flags each.
const GTDT_MIN: usize = 80;
const GTDT_EL1_NS: usize = 56;
const GTDT_VIRT: usize = 64;
const GTDT_EL2: usize = 72;

// FADT (5.2.9): Flags, ARM_BOOT_ARCH, FADT Minor Version.
const FADT_ARM_MIN: usize = 132;
const FADT_ARM_BOOT_ARCH: usize = 129;
const FADT_MINOR: usize = 131;
const PSCI_COMPLIANT: u16 = 1 << 0;
const PSCI_USE_HVC: u16 = 1 << 1;

// SPCR: Interface Type, then the base address as a Generic Address
// Structure (space ID, bit width, bit offset, access size, address).
const SPCR_MIN: usize = 52;
const SPCR_TYPE: usize = 36;
const SPCR_GAS: usize = 40;

fn err(t: Sig, field: &'static str, p: Problem) -> AcpiError {
    AcpiError::new(t, field, p)
}

/// Reads the arm64 board from the tables the RSDP at `rsdp_pa` leads to.
/// `ppis` are the interrupts kestrel uses at fixed numbers; a table that
/// names another is refused.
pub fn parse<M: PhysMem>(mem: &M, rsdp_pa: u64, ppis: Ppis) -> Result<Arm64Acpi, AcpiError> {
    let t = tables(mem, rsdp_pa)?;
    let mut warnings: Vec<&'static str, MAX_WARNINGS> = Vec::new();
    let mut warn = |w: &'static str| {
        let _ = warnings.push(w);
    };

    if t.bad_checksums > 0 {
        warn("ACPI: a table kestrel does not read has a bad checksum: ignored");
    }
    let madt = t
        .find(Sig::MADT)?
        .ok_or(err(Sig::MADT, "XSDT entries", Problem::Missing))?;
    let gic = madt_read(&madt, ppis)?;
    if gic.maintenance == 0 {
        warn("ACPI MADT: the GICC entries give no VGIC maintenance interrupt: PPI 25 assumed");
    }
    if gic.gicr_unused > 0 {
        warn("ACPI MADT: more than one GICR range: only the first one's redistributors are used");
    }

    let timers = match t.find(Sig::GTDT)? {
        Some(g) => {
            let timers = gtdt_read(&g, ppis)?;
            if timers.el2.gsiv == 0 {
                warn("ACPI GTDT: no non-secure EL2 timer GSIV: PPI 26 assumed");
            }
            timers
        }
        None => {
            warn("ACPI: no GTDT: the architected timer PPIs (EL2 26, virtual 27) assumed");
            Timers::default()
        }
    };

    let (uart, uart_type) = match t.find(Sig::SPCR)? {
        Some(s) => {
            let (u, ty) = spcr_read(&s)?;
            if u.is_none() {
                warn("ACPI SPCR: the console's interface type is not a PL011, SBSA or 16550 UART: no console");
            }
            (u, Some(ty))
        }
        None => {
            warn("ACPI: no SPCR: no console UART named");
            (None, None)
        }
    };

    let psci = match t.find(Sig::FADT)? {
        Some(f) => {
            let (p, old) = fadt_psci(&f)?;
            if old {
                warn("ACPI FADT: older than ACPI 5.1 (no ARM boot flags): no PSCI");
            }
            p
        }
        None => {
            warn("ACPI: no FADT: no PSCI");
            None
        }
    };

    let mut model: String<64> = String::new();
    for part in [t.xsdt.oem_id(), t.xsdt.oem_table_id()] {
        let s: &[u8] = trim(part);
        if s.is_empty() {
            continue;
        }
        if !model.is_empty() {
            let _ = model.push(' ');
        }
        for &b in s {
            let _ = model.push(if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            });
        }
    }
    if model.is_empty() {
        let _ = model.push_str("unknown ACPI board");
    }

    let mut tabs = Vec::new();
    for r in &t.list {
        let _ = tabs.push(*r);
    }
    Ok(Arm64Acpi {
        model,
        cpus: gic.cpus,
        cpus_ignored: gic.cpus_ignored,
        cpus_disabled: gic.cpus_disabled,
        irqchip: gic.irqchip,
        gic_version: gic.version,
        gicr_unused: gic.gicr_unused,
        maintenance: gic.maintenance,
        timers,
        uart,
        uart_type,
        psci,
        tables: tabs,
        more: t.more,
        rsdp: t.rsdp,
        xsdt: TableRef {
            sig: Sig::XSDT,
            pa: t.xsdt.pa(),
            len: t.xsdt.len() as u32,
        },
        warnings,
    })
}

fn trim(b: &[u8]) -> &[u8] {
    let end = b
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    &b[..end]
}

struct Gic {
    cpus: Vec<CpuDesc, { crate::MAX_CPUS }>,
    cpus_ignored: usize,
    cpus_disabled: usize,
    irqchip: IrqChip,
    version: u8,
    gicr_unused: usize,
    maintenance: u32,
}

/// One GICC entry's fields kestrel reads.
#[derive(Clone, Copy)]
struct Gicc {
    index: usize,
    gicc: u64,
    gicv: u64,
    gich: u64,
    maintenance: u32,
    gicr: u64,
}

/// Requires `v` to equal `first` (the value the first entry gave; `None`
/// before it).
fn same(
    first: &mut Option<u64>,
    v: u64,
    field: &'static str,
    index: usize,
) -> Result<(), AcpiError> {
    match *first {
        None => *first = Some(v),
        Some(f) if f != v => {
            return Err(err(Sig::MADT, field, Problem::Mismatch { first: f, other: v }).at(index))
        }
        Some(_) => {}
    }
    Ok(())
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// Whether an enabled GICC entry before entry `index` has `mpidr` (the
/// entries before it were walked once already, so they are well formed).
fn enabled_before(madt: &Sdt, index: usize, mpidr: u64) -> bool {
    entries(madt, MADT_ENTRIES)
        .take(index)
        .filter_map(Result::ok)
        .any(|e| {
            e.kind == GICC
                && e.bytes.len() >= GICC_MIN
                && u32_at(e.bytes, 12) & 1 != 0
                && u64_at(e.bytes, 68) == mpidr
        })
}

fn madt_read(madt: &Sdt, ppis: Ppis) -> Result<Gic, AcpiError> {
    let m = Sig::MADT;
    madt.need(MADT_ENTRIES, "Length")?;
    if madt.revision() < 3 {
        // GICC and GICD entries came with ACPI 5.0's MADT revision 3.
        return Err(err(m, "Revision", Problem::Revision(madt.revision())));
    }
    let mut cpus: Vec<CpuDesc, { crate::MAX_CPUS }> = Vec::new();
    let mut cpus_ignored = 0;
    let mut cpus_disabled = 0;
    let mut gicd: Option<(u64, u8)> = None;
    let mut gicrs: Vec<(u64, u64), 4> = Vec::new();
    let mut gicr_extra = 0usize;
    let mut first_gicc: Option<Gicc> = None;
    let (mut cpu_if, mut gicv, mut gich, mut maint) = (None, None, None, None);
    let mut gicr_min = u64::MAX;
    let mut gicr_max = 0u64;
    let mut gicr_per_cpu = 0usize;

    for e in entries(madt, MADT_ENTRIES) {
        let e = e?;
        let b = e.bytes;
        let need = |min: usize, field: &'static str| {
            if b.len() < min {
                Err(err(
                    m,
                    field,
                    Problem::TooShort {
                        len: b.len() as u64,
                        min: min as u64,
                    },
                )
                .at(e.index))
            } else {
                Ok(())
            }
        };
        match e.kind {
            GICC => {
                need(GICC_MIN, "GICC Length")?;
                let flags = u32_at(b, 12);
                let mpidr = u64_at(b, 68);
                if flags & 1 == 0 {
                    // Not enabled (perhaps online capable): not started.
                    cpus_disabled += 1;
                    continue;
                }
                if mpidr & !MPIDR_AFF != 0 {
                    return Err(err(m, "GICC MPIDR", Problem::Unsupported(mpidr)).at(e.index));
                }
                if enabled_before(madt, e.index, mpidr) {
                    return Err(err(m, "GICC MPIDR", Problem::Duplicate(mpidr)).at(e.index));
                }
                let g = Gicc {
                    index: e.index,
                    gicc: u64_at(b, 32),
                    gicv: u64_at(b, 40),
                    gich: u64_at(b, 48),
                    maintenance: u32_at(b, 56),
                    gicr: u64_at(b, 60),
                };
                same(&mut cpu_if, g.gicc, "GICC Physical Base Address", e.index)?;
                same(&mut gicv, g.gicv, "GICC GICV", e.index)?;
                same(&mut gich, g.gich, "GICC GICH", e.index)?;
                same(
                    &mut maint,
                    g.maintenance.into(),
                    "GICC VGIC Maintenance interrupt",
                    e.index,
                )?;
                if g.maintenance != 0 && g.maintenance != ppis.maintenance {
                    return Err(err(
                        m,
                        "GICC VGIC Maintenance interrupt",
                        Problem::Unexpected {
                            got: g.maintenance.into(),
                            want: ppis.maintenance.into(),
                        },
                    )
                    .at(e.index));
                }
                if g.gicr != 0 {
                    gicr_per_cpu += 1;
                    gicr_min = gicr_min.min(g.gicr);
                    gicr_max = gicr_max.max(g.gicr);
                }
                if first_gicc.is_none() {
                    first_gicc = Some(g);
                }
                // Keep the lowest MPIDRs, whatever the order.
                if let Err(desc) = cpus.push(CpuDesc { hw_id: mpidr }) {
                    cpus_ignored += 1;
                    let highest = cpus.iter_mut().max_by_key(|c| c.hw_id);
                    if let Some(max) = highest.filter(|c| c.hw_id > desc.hw_id) {
                        *max = desc;
                    }
                }
            }
            GICD => {
                need(GICD_LEN, "GICD Length")?;
                let base = u64_at(b, 8);
                if gicd.is_some() {
                    return Err(err(m, "GICD", Problem::Duplicate(base)).at(e.index));
                }
                if base == 0 {
                    return Err(err(m, "GICD Physical Base Address", Problem::Missing).at(e.index));
                }
                gicd = Some((base, u8_at(b, 20)));
            }
            GICR => {
                need(GICR_LEN, "GICR Length")?;
                let base = u64_at(b, 4);
                let len = u64::from(u32_at(b, 12));
                if base == 0 || len == 0 {
                    return Err(err(m, "GICR Discovery Range", Problem::Missing).at(e.index));
                }
                if base.checked_add(len).is_none() {
                    return Err(
                        err(m, "GICR Discovery Range", Problem::Unsupported(base)).at(e.index)
                    );
                }
                if let Some(o) = gicrs.iter().find(|&&r| overlaps(r, (base, len))) {
                    return Err(err(
                        m,
                        "GICR Discovery Range",
                        Problem::Mismatch {
                            first: o.0,
                            other: base,
                        },
                    )
                    .at(e.index));
                }
                if gicrs.push((base, len)).is_err() {
                    gicr_extra += 1;
                }
            }
            // Other types (MSI frames, ITSs, the x86 and LoongArch
            // controllers) are not read.
            _ => {}
        }
    }

    let Some((gicd, version)) = gicd else {
        return Err(err(m, "GICD entry", Problem::Missing));
    };
    let Some(first) = first_gicc else {
        return Err(err(m, "GICC entry (enabled)", Problem::Missing));
    };
    let v3 = match version {
        3 | 4 => true,
        1 | 2 => false,
        // "Detect from hardware": GICv3 if there are redistributors.
        0 => !gicrs.is_empty() || gicr_per_cpu > 0,
        v => return Err(err(m, "GICD GIC version", Problem::Unsupported(v.into()))),
    };
    let irqchip = if v3 {
        let (gicr, gicr_size) = if let Some(&r) = gicrs.first() {
            r
        } else if gicr_per_cpu == cpus.len() + cpus_ignored && gicr_per_cpu > 0 {
            // Each GICC names its redistributor: walk from the lowest to
            // past the highest (the walk stops at GICR_TYPER.Last or the
            // matching affinity).
            (gicr_min, gicr_max - gicr_min + GICR_FRAME_MAX)
        } else {
            return Err(err(
                m,
                "GICR entry or GICC GICR Base Address",
                Problem::Missing,
            ));
        };
        if overlaps((gicd, GICD_V3_SIZE), (gicr, gicr_size)) {
            return Err(err(
                m,
                "GICR Discovery Range",
                Problem::Mismatch {
                    first: gicd,
                    other: gicr,
                },
            ));
        }
        IrqChip::GicV3 {
            gicd,
            gicr,
            gicr_size,
        }
    } else {
        if first.gicc == 0 {
            return Err(err(m, "GICC Physical Base Address", Problem::Missing).at(first.index));
        }
        if overlaps((gicd, GICD_V2_SIZE), (first.gicc, GICC_V2_SIZE)) {
            return Err(err(
                m,
                "GICC Physical Base Address",
                Problem::Mismatch {
                    first: gicd,
                    other: first.gicc,
                },
            )
            .at(first.index));
        }
        IrqChip::GicV2 {
            gicd,
            gicc: first.gicc,
            gich: (first.gich != 0).then_some(first.gich),
            gicv: (first.gicv != 0).then_some(first.gicv),
        }
    };
    cpus.sort_unstable_by_key(|c| c.hw_id);
    Ok(Gic {
        cpus,
        cpus_ignored,
        cpus_disabled,
        irqchip,
        version,
        gicr_unused: gicrs.len().saturating_sub(1) + gicr_extra,
        maintenance: first.maintenance,
    })
}

fn gtdt_read(g: &Sdt, ppis: Ppis) -> Result<Timers, AcpiError> {
    let s = Sig::GTDT;
    g.need(GTDT_MIN, "Length")?;
    if g.revision() < 1 {
        return Err(err(s, "Revision", Problem::Revision(g.revision())));
    }
    let timer = |off: usize| Timer {
        gsiv: u32_at(g.bytes, off),
        flags: u32_at(g.bytes, off + 4),
    };
    let t = Timers {
        el1_ns: timer(GTDT_EL1_NS),
        virt: timer(GTDT_VIRT),
        el2: timer(GTDT_EL2),
    };
    for (tm, want, field) in [
        (t.el2, ppis.el2_timer, "Non-Secure EL2 Timer GSIV"),
        (t.virt, ppis.vtimer, "Virtual EL1 Timer GSIV"),
    ] {
        if tm.gsiv != 0 && tm.gsiv != want {
            return Err(err(
                s,
                field,
                Problem::Unexpected {
                    got: tm.gsiv.into(),
                    want: want.into(),
                },
            ));
        }
    }
    Ok(t)
}

/// The console UART: PL011 (type 3), the SBSA generic UART (types 0x0d,
/// 0x0e: a PL011 subset kestrel drives the same way), 16550 (0, 1, 0x12).
fn spcr_read(t: &Sdt) -> Result<(Option<Uart>, u8), AcpiError> {
    let s = Sig::SPCR;
    t.need(SPCR_MIN, "Length")?;
    if t.revision() < 1 {
        return Err(err(s, "Revision", Problem::Revision(t.revision())));
    }
    let ty = u8_at(t.bytes, SPCR_TYPE);
    let kind = match ty {
        0x03 | 0x0d | 0x0e => Some(UartKind::Pl011),
        0x00 | 0x01 | 0x12 => Some(UartKind::Ns16550),
        _ => None,
    };
    let space = u8_at(t.bytes, SPCR_GAS);
    let base = u64_at(t.bytes, SPCR_GAS + 4);
    if kind.is_some() {
        if space != 0 {
            // Only system memory: the arm64 UARTs are MMIO.
            return Err(err(
                s,
                "Base Address (Address Space ID)",
                Problem::Unsupported(space.into()),
            ));
        }
        if base == 0 {
            return Err(err(s, "Base Address", Problem::Missing));
        }
    }
    Ok((kind.map(|kind| Uart { kind, base }), ty))
}

/// The PSCI conduit from the FADT's ARM_BOOT_ARCH flags (ACPI 5.1 and
/// later); `true` if the FADT predates them.
fn fadt_psci(f: &Sdt) -> Result<(Option<PsciConduit>, bool), AcpiError> {
    let (major, minor) = (f.revision(), u8_at(f.bytes, FADT_MINOR));
    if major < 5 || (major == 5 && minor == 0) || f.len() < FADT_ARM_MIN {
        if major >= 6 || (major == 5 && minor >= 1) {
            f.need(FADT_ARM_MIN, "Length")?;
        }
        return Ok((None, true));
    }
    let flags = u16_at(f.bytes, FADT_ARM_BOOT_ARCH);
    if flags & !(PSCI_COMPLIANT | PSCI_USE_HVC) != 0 {
        // Unknown flags may change what the known ones mean.
        return Err(err(
            Sig::FADT,
            "ARM_BOOT_ARCH",
            Problem::Unsupported(flags.into()),
        ));
    }
    let psci = (flags & PSCI_COMPLIANT != 0).then_some(if flags & PSCI_USE_HVC != 0 {
        PsciConduit::Hvc
    } else {
        PsciConduit::Smc
    });
    Ok((psci, false))
}

/// Builders of the tables QEMU's `virt` gives (shared with the fuzz
/// target's seeds through `testmem` in tests only).
#[cfg(test)]
pub(crate) mod build {
    extern crate std;
    use super::super::testmem::*;
    use super::*;
    use std::vec::Vec as StdVec;

    pub fn gicc(mpidr: u64, enabled: bool, gicc: u64, gich: u64, gicv: u64) -> StdVec<u8> {
        let mut e = std::vec![0u8; 80];
        e[0] = GICC;
        e[1] = 80;
        e[12..16].copy_from_slice(&(enabled as u32).to_le_bytes());
        e[32..40].copy_from_slice(&gicc.to_le_bytes());
        e[40..48].copy_from_slice(&gicv.to_le_bytes());
        e[48..56].copy_from_slice(&gich.to_le_bytes());
        e[56..60].copy_from_slice(&25u32.to_le_bytes());
        e[68..76].copy_from_slice(&mpidr.to_le_bytes());
        e
    }

    pub fn gicd(base: u64, version: u8) -> StdVec<u8> {
        let mut e = std::vec![0u8; GICD_LEN];
        e[0] = GICD;
        e[1] = GICD_LEN as u8;
        e[8..16].copy_from_slice(&base.to_le_bytes());
        e[20] = version;
        e
    }

    pub fn gicr(base: u64, len: u32) -> StdVec<u8> {
        let mut e = std::vec![0u8; GICR_LEN];
        e[0] = GICR;
        e[1] = GICR_LEN as u8;
        e[4..12].copy_from_slice(&base.to_le_bytes());
        e[12..16].copy_from_slice(&len.to_le_bytes());
        e
    }

    pub fn madt(entries: &[StdVec<u8>]) -> StdVec<u8> {
        let mut body = std::vec![0u8; 8];
        for e in entries {
            body.extend_from_slice(e);
        }
        table(b"APIC", 4, &body)
    }

    /// QEMU virt's MADT: GICD, 4 CPUs, and a GICR range (v3) or the CPU
    /// interface and virtualization frames (v2).
    pub fn qemu_madt(v3: bool) -> StdVec<u8> {
        let mut es = std::vec![gicd(0x800_0000, if v3 { 3 } else { 2 })];
        for i in 0..4 {
            es.push(if v3 {
                gicc(i, true, 0, 0, 0)
            } else {
                gicc(i, true, 0x801_0000, 0x803_0000, 0x804_0000)
            });
        }
        if v3 {
            es.push(gicr(0x80a_0000, 0xf6_0000));
        }
        madt(&es)
    }

    pub fn gtdt(el2: u32, virt: u32) -> StdVec<u8> {
        let mut body = std::vec![0u8; 104 - HEADER_LEN];
        let mut put = |off: usize, v: u32| {
            body[off - HEADER_LEN..off - HEADER_LEN + 4].copy_from_slice(&v.to_le_bytes())
        };
        put(48, 29);
        put(56, 30);
        put(60, 4);
        put(64, virt);
        put(72, el2);
        table(b"GTDT", 3, &body)
    }

    pub fn spcr(kind: u8, space: u8, base: u64) -> StdVec<u8> {
        let mut body = std::vec![0u8; 80 - HEADER_LEN];
        body[0] = kind;
        body[4] = space;
        body[5] = 8;
        body[7] = 1;
        body[8..16].copy_from_slice(&base.to_le_bytes());
        table(b"SPCR", 2, &body)
    }

    pub fn fadt(major: u8, minor: u8, arm_flags: u16) -> StdVec<u8> {
        let mut body = std::vec![0u8; 276 - HEADER_LEN];
        body[112 - HEADER_LEN..116 - HEADER_LEN].copy_from_slice(&(1u32 << 20).to_le_bytes());
        body[FADT_ARM_BOOT_ARCH - HEADER_LEN..FADT_ARM_BOOT_ARCH - HEADER_LEN + 2]
            .copy_from_slice(&arm_flags.to_le_bytes());
        body[FADT_MINOR - HEADER_LEN] = minor;
        table(b"FACP", major, &body)
    }

    /// The set QEMU virt (`virtualization=on`, PSCI over SMC) gives.
    pub fn qemu_tables(v3: bool) -> StdVec<StdVec<u8>> {
        std::vec![
            fadt(6, 3, 1),
            qemu_madt(v3),
            gtdt(26, 27),
            spcr(3, 0, 0x900_0000),
        ]
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::testmem::*;
    use super::build::*;
    use super::*;
    use std::string::ToString;
    use std::vec::Vec as StdVec;

    const PPIS: Ppis = Ppis {
        el2_timer: 26,
        vtimer: 27,
        maintenance: 25,
    };

    fn run(tables: &[StdVec<u8>]) -> Result<Arm64Acpi, AcpiError> {
        parse(&with_tables(tables), 0x1000, PPIS)
    }

    /// `qemu_tables(v3)` with table `i` replaced.
    fn with(v3: bool, i: usize, t: StdVec<u8>) -> StdVec<StdVec<u8>> {
        let mut ts = qemu_tables(v3);
        ts[i] = t;
        ts
    }

    #[test]
    fn qemu_virt_gicv3_board() {
        let a = run(&qemu_tables(true)).unwrap();
        let ram = [MemRegion {
            base: 0x4000_0000,
            size: 1 << 30,
        }];
        let b = a.board(&ram, "kestrel.exit=poweroff");
        assert_eq!(b.arch, Arch::Aarch64);
        assert_eq!(b.model.as_str(), "KSTREL TESTTBL");
        assert_eq!(b.memory.as_slice(), ram);
        assert_eq!(
            b.cpus.iter().map(|c| c.hw_id).collect::<StdVec<_>>(),
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
        assert_eq!(b.cmdline.as_str(), "kestrel.exit=poweroff");
        assert!(b.warnings.is_empty(), "{:?}", b.warnings);
        assert_eq!(a.timers.el2.gsiv, 26);
        assert_eq!(a.timers.el1_ns.gsiv, 30);
        assert_eq!(a.timers.el1_ns.flags, 4);
        assert_eq!(a.maintenance, 25);
        assert_eq!(a.gic_version, 3);
        assert_eq!(a.tables.len(), 4);
    }

    const QEMU_V3: &[u8] = include_bytes!("../../../tests/fixtures/qemu-v3-acpi.bin");
    const QEMU_V2: &[u8] = include_bytes!("../../../tests/fixtures/qemu-v2-acpi.bin");
    const QEMU_RSDP: u64 = 0x7c43_0018;

    /// The tables QEMU 10 `virt,virtualization=on,acpi=on` gave Debian's
    /// edk2, saved from guest memory as records (address u64, length u32,
    /// bytes): the RSDP, the XSDT, then each table it lists.
    fn qemu_mem(records: &[u8]) -> Mem {
        let mut m = Mem::default();
        let mut off = 0;
        while off < records.len() {
            let pa = u64_at(records, off);
            let len = u32_at(records, off + 8) as usize;
            m.put(pa, records[off + 12..off + 12 + len].to_vec());
            off += 12 + len;
        }
        m
    }

    #[test]
    fn qemu_tables_give_the_board_of_qemu_device_tree() {
        for (acpi, dtb) in [
            (
                QEMU_V3,
                &include_bytes!("../../../tests/fixtures/qemu-v3.dtb")[..],
            ),
            (
                QEMU_V2,
                &include_bytes!("../../../tests/fixtures/qemu-v2.dtb")[..],
            ),
        ] {
            let m = qemu_mem(acpi);
            let a = parse(&m, QEMU_RSDP, PPIS).unwrap();
            let d = crate::host::dtb::parse(dtb, Arch::Aarch64).unwrap();
            let b = a.board(&d.memory, d.cmdline.as_str());
            assert_eq!(b.memory, d.memory);
            assert_eq!(b.cpus, d.cpus);
            assert_eq!(b.cpus_ignored, d.cpus_ignored);
            assert_eq!(b.irqchip, d.irqchip);
            assert_eq!(b.uart, d.uart);
            assert_eq!(b.psci, d.psci);
            assert_eq!(b.backend, d.backend);
            assert_eq!(b.model.as_str(), "BOCHS BXPC");
            assert!(b.warnings.is_empty(), "{:?}", b.warnings);
            assert_eq!(a.maintenance, 25);
            assert_eq!(
                (a.timers.el2.gsiv, a.timers.virt.gsiv, a.timers.el1_ns.gsiv),
                (26, 27, 30)
            );
            let sigs: StdVec<_> = a.tables.iter().map(|t| t.sig).collect();
            assert!(sigs.contains(&Sig::MADT) && sigs.contains(&Sig::SPCR));
            // Every range read is one of the records.
            for (pa, len) in a.ranges() {
                assert!(m.read(pa, len as usize).is_some());
            }
        }
    }

    #[test]
    fn qemu_tables_with_any_byte_changed() {
        // Each byte of each record (RSDP, XSDT, tables) changed, with and
        // without the checksum fixed: refused with a message, or a board
        // with CPUs and a GIC. The XSDT pointers and table lengths
        // changed this way lead anywhere.
        let base = qemu_mem(QEMU_V3);
        for bi in 0..base.blocks.len() {
            let len = base.blocks[bi].1.len();
            for i in (0..len).step_by(3) {
                for reseal in [false, true] {
                    let mut m = qemu_mem(QEMU_V3);
                    let (pa, b) = &mut m.blocks[bi];
                    b[i] = b[i].wrapping_add(0x41);
                    if reseal && *pa != QEMU_RSDP && i != 9 {
                        seal(b, 9);
                    }
                    match parse(&m, QEMU_RSDP, PPIS) {
                        Ok(a) => {
                            assert!(!a.cpus.is_empty());
                            assert!(a.cpus.windows(2).all(|w| w[0].hw_id < w[1].hw_id));
                        }
                        Err(e) => assert!(e.to_string().starts_with("ACPI "), "{e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn qemu_virt_gicv2_board() {
        let a = run(&qemu_tables(false)).unwrap();
        assert_eq!(
            a.irqchip,
            IrqChip::GicV2 {
                gicd: 0x800_0000,
                gicc: 0x801_0000,
                gich: Some(0x803_0000),
                gicv: Some(0x804_0000)
            }
        );
    }

    #[test]
    fn psci_conduit_from_fadt() {
        for (flags, want) in [
            (1, Some(PsciConduit::Smc)),
            (3, Some(PsciConduit::Hvc)),
            (0, None),
        ] {
            let a = run(&with(true, 0, fadt(6, 0, flags))).unwrap();
            assert_eq!(a.psci, want, "flags {flags}");
        }
        // ACPI 5.0: no ARM flags yet.
        let a = run(&with(true, 0, fadt(5, 0, 1))).unwrap();
        assert_eq!(a.psci, None);
        assert!(!a.warnings.is_empty());
        // Unknown flag bits.
        let e = run(&with(true, 0, fadt(6, 0, 5))).unwrap_err();
        assert_eq!((e.table, e.field), (Sig::FADT, "ARM_BOOT_ARCH"));
        // An ACPI 6 FADT too short for the flags.
        let short = table(b"FACP", 6, &[0; 40]);
        let e = run(&with(true, 0, short)).unwrap_err();
        assert_eq!((e.table, e.field), (Sig::FADT, "Length"));
    }

    #[test]
    fn missing_tables() {
        let mut ts = qemu_tables(true);
        ts.remove(1);
        let e = run(&ts).unwrap_err();
        assert_eq!(e.to_string(), "ACPI APIC: XSDT entries: missing");
        // No GTDT, SPCR, FADT: warnings and fallbacks.
        let a = run(&[qemu_madt(true)]).unwrap();
        assert_eq!(a.uart, None);
        assert_eq!(a.psci, None);
        assert_eq!(a.warnings.len(), 3);
    }

    #[test]
    fn madt_entries_checked() {
        let g = || gicd(0x800_0000, 3);
        let r = || gicr(0x80a_0000, 0xf6_0000);
        let c = |m| gicc(m, true, 0, 0, 0);
        let case = |es: &[StdVec<u8>]| run(&with(true, 1, madt(es)));
        // Zero-length entry.
        let e = case(&[g(), std::vec![GICC, 0], r()]).unwrap_err();
        assert_eq!((e.field, e.entry), ("entry Length", Some(1)));
        // Truncated GICC (ACPI 5.0 size).
        let mut short = c(0);
        short.truncate(60);
        short[1] = 60;
        let e = case(&[g(), short, r()]).unwrap_err();
        assert_eq!(e.field, "GICC Length");
        assert_eq!(e.problem, Problem::TooShort { len: 60, min: 76 });
        // No GICD, two GICDs, GICD at 0.
        assert_eq!(case(&[c(0), r()]).unwrap_err().field, "GICD entry");
        assert!(matches!(
            case(&[g(), g(), c(0), r()]).unwrap_err().problem,
            Problem::Duplicate(_)
        ));
        assert_eq!(
            case(&[gicd(0, 3), c(0), r()]).unwrap_err().field,
            "GICD Physical Base Address"
        );
        // No enabled CPU.
        let off = gicc(0, false, 0, 0, 0);
        assert_eq!(
            case(&[g(), off.clone(), r()]).unwrap_err().field,
            "GICC entry (enabled)"
        );
        // A disabled CPU is counted, not started.
        let a = case(&[g(), c(0), off, r()]).unwrap();
        assert_eq!((a.cpus.len(), a.cpus_disabled), (1, 1));
        // Duplicate and malformed MPIDRs.
        let e = case(&[g(), c(1), c(1), r()]).unwrap_err();
        assert_eq!((e.problem, e.entry), (Problem::Duplicate(1), Some(2)));
        let e = case(&[g(), c(1 << 24), r()]).unwrap_err();
        assert_eq!(e.field, "GICC MPIDR");
        // Unknown version, no redistributors for a GICv3.
        assert_eq!(
            case(&[gicd(0x800_0000, 7), c(0), r()]).unwrap_err().problem,
            Problem::Unsupported(7)
        );
        assert_eq!(
            case(&[g(), c(0)]).unwrap_err().field,
            "GICR entry or GICC GICR Base Address"
        );
        // Overlapping redistributor ranges, and over the distributor.
        let e = case(&[g(), c(0), r(), gicr(0x80b_0000, 0x1_0000)]).unwrap_err();
        assert_eq!(e.field, "GICR Discovery Range");
        let e = case(&[g(), c(0), gicr(0x800_8000, 0x2_0000)]).unwrap_err();
        assert_eq!(e.field, "GICR Discovery Range");
        // Unknown entry types are skipped.
        let a = case(&[g(), std::vec![0x7f, 3, 0], c(0), r()]).unwrap();
        assert_eq!(a.cpus.len(), 1);
        // A second GICR range is reported, not walked.
        let a = case(&[g(), c(0), r(), gicr(0x1000_0000, 0x2_0000)]).unwrap();
        assert_eq!(a.gicr_unused, 1);
        assert_eq!(a.warnings.len(), 1);
    }

    #[test]
    fn gicv2_frames_must_agree() {
        let g = || gicd(0x800_0000, 2);
        let case = |es: &[StdVec<u8>]| run(&with(false, 1, madt(es)));
        let a = gicc(0, true, 0x801_0000, 0x803_0000, 0x804_0000);
        let b = gicc(1, true, 0x901_0000, 0x803_0000, 0x804_0000);
        let e = case(&[g(), a.clone(), b]).unwrap_err();
        assert_eq!(
            (e.field, e.problem),
            (
                "GICC Physical Base Address",
                Problem::Mismatch {
                    first: 0x801_0000,
                    other: 0x901_0000
                }
            )
        );
        // No CPU interface address.
        let e = case(&[g(), gicc(0, true, 0, 0, 0)]).unwrap_err();
        assert_eq!(e.field, "GICC Physical Base Address");
        // Overlapping the distributor.
        let e = case(&[g(), gicc(0, true, 0x800_0800, 0, 0)]).unwrap_err();
        assert!(matches!(e.problem, Problem::Mismatch { .. }));
        // Without virtualization frames: none.
        let a = case(&[g(), gicc(0, true, 0x801_0000, 0, 0)]).unwrap();
        assert!(matches!(
            a.irqchip,
            IrqChip::GicV2 {
                gich: None,
                gicv: None,
                ..
            }
        ));
        // Version 0 without redistributors reads as GICv2.
        let a = case(&[gicd(0x800_0000, 0), gicc(0, true, 0x801_0000, 0, 0)]).unwrap();
        assert!(matches!(a.irqchip, IrqChip::GicV2 { .. }));
    }

    #[test]
    fn redistributors_from_gicc_entries() {
        let mut es = std::vec![gicd(0x800_0000, 0)];
        for i in 0..3u64 {
            let mut c = gicc(i, true, 0, 0, 0);
            c[60..68].copy_from_slice(&(0x80a_0000 + i * 0x2_0000).to_le_bytes());
            es.push(c);
        }
        let a = run(&with(true, 1, madt(&es))).unwrap();
        assert_eq!(
            a.irqchip,
            IrqChip::GicV3 {
                gicd: 0x800_0000,
                gicr: 0x80a_0000,
                gicr_size: 0x4_0000 + 0x4_0000
            }
        );
    }

    #[test]
    fn maintenance_interrupt_must_match() {
        let mut c = gicc(0, true, 0, 0, 0);
        c[56..60].copy_from_slice(&24u32.to_le_bytes());
        let es = [gicd(0x800_0000, 3), c, gicr(0x80a_0000, 0xf6_0000)];
        let e = run(&with(true, 1, madt(&es))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ACPI APIC entry 1: GICC VGIC Maintenance interrupt: 0x18, but kestrel relies on 0x19"
        );
    }

    #[test]
    fn more_cpus_than_kept_keeps_the_lowest() {
        let mut es = std::vec![gicd(0x800_0000, 3)];
        for i in (0..(crate::MAX_CPUS as u64 + 3)).rev() {
            es.push(gicc(i, true, 0, 0, 0));
        }
        es.push(gicr(0x80a_0000, 0xf6_0000));
        let a = run(&with(true, 1, madt(&es))).unwrap();
        assert_eq!(a.cpus.len(), crate::MAX_CPUS);
        assert_eq!(a.cpus_ignored, 3);
        assert_eq!(a.cpus[0].hw_id, 0);
        assert_eq!(
            a.cpus[crate::MAX_CPUS - 1].hw_id,
            crate::MAX_CPUS as u64 - 1
        );
    }

    #[test]
    fn gtdt_checks() {
        let e = run(&with(true, 2, gtdt(30, 27))).unwrap_err();
        assert_eq!((e.table, e.field), (Sig::GTDT, "Non-Secure EL2 Timer GSIV"));
        let e = run(&with(true, 2, gtdt(26, 20))).unwrap_err();
        assert_eq!(e.field, "Virtual EL1 Timer GSIV");
        let a = run(&with(true, 2, gtdt(0, 27))).unwrap();
        assert_eq!(a.warnings.len(), 1);
        let e = run(&with(true, 2, table(b"GTDT", 2, &[0; 20]))).unwrap_err();
        assert_eq!(e.problem, Problem::TooShort { len: 56, min: 80 });
    }

    #[test]
    fn spcr_checks() {
        let a = run(&with(true, 3, spcr(0x0e, 0, 0x900_0000))).unwrap();
        assert_eq!(a.uart.map(|u| u.kind), Some(UartKind::Pl011));
        let a = run(&with(true, 3, spcr(0x12, 0, 0x1fe0_01e0))).unwrap();
        assert_eq!(a.uart.map(|u| u.kind), Some(UartKind::Ns16550));
        // An unknown type: no console, a warning.
        let a = run(&with(true, 3, spcr(0x0f, 0, 0))).unwrap();
        assert_eq!((a.uart, a.uart_type), (None, Some(0x0f)));
        assert_eq!(a.warnings.len(), 1);
        // I/O port space, no address.
        let e = run(&with(true, 3, spcr(3, 1, 0x3f8))).unwrap_err();
        assert_eq!(e.field, "Base Address (Address Space ID)");
        let e = run(&with(true, 3, spcr(3, 0, 0))).unwrap_err();
        assert_eq!(e.field, "Base Address");
        let e = run(&with(true, 3, table(b"SPCR", 2, &[3]))).unwrap_err();
        assert_eq!((e.table, e.field), (Sig::SPCR, "Length"));
    }

    #[test]
    fn tables_overlapping_in_memory() {
        // An XSDT entry pointing into the middle of the MADT: what it finds
        // there is no table (its "length" is OEM text).
        let mut m = with_tables(&qemu_tables(true));
        m.put(0x2000, xsdt(&[0x3000, 0x4000, 0x4010, 0x6000]));
        let e = parse(&m, 0x1000, PPIS).unwrap_err();
        assert_eq!((e.table, e.entry), (Sig(*b"TEST"), None), "{e:?}");
        assert!(matches!(e.problem, Problem::TooLong { .. }), "{e:?}");
        // The same MADT listed twice.
        m.put(0x2000, xsdt(&[0x3000, 0x4000, 0x4000, 0x5000, 0x6000]));
        let e = parse(&m, 0x1000, PPIS).unwrap_err();
        assert_eq!(
            (e.table, e.problem),
            (Sig::MADT, Problem::Duplicate(0x4000))
        );
    }

    #[test]
    fn every_corruption_is_an_error_or_a_sane_board() {
        // Flip each byte of each table in turn: the reader either refuses
        // (the checksum catches most) or reads a board with CPUs and a GIC.
        let base = qemu_tables(true);
        for (ti, t) in base.iter().enumerate() {
            for i in 0..t.len() {
                for v in [0u8, 0xff, t[i] ^ 0x10] {
                    let mut ts = base.clone();
                    ts[ti][i] = v;
                    // Re-seal half of the cases so the content is parsed.
                    if i % 2 == 0 && i != 9 {
                        seal(&mut ts[ti], 9);
                    }
                    match run(&ts) {
                        Ok(a) => {
                            assert!(!a.cpus.is_empty());
                            assert!(a.cpus.windows(2).all(|w| w[0].hw_id < w[1].hw_id));
                        }
                        Err(e) => assert!(!e.to_string().is_empty()),
                    }
                }
            }
        }
    }
}
