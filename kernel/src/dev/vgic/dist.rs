//! The distributor (GICD_*), GICv3 (affinity routing on) and GICv2, and the
//! per-INTID register banks the redistributors share.

use super::sgi::decode_gicd_sgir;
use super::{GicVersion, MmioError, VcpuSet, Vgic, Width, IIDR, IROUTER_MASK, PRIORITY_MASK};

/// GICv3 distributor: 64 KiB.
pub const V3_DIST_SIZE: u64 = 0x1_0000;
/// GICv2 distributor: 4 KiB.
pub const V2_DIST_SIZE: u64 = 0x1000;

const CTLR_ENABLE_GRP0: u32 = 1 << 0;
const CTLR_ENABLE_GRP1: u32 = 1 << 1;
/// GICv3, single security state: ARE (bit 4) and DS (bit 6) read as one.
const CTLR_ARE: u32 = 1 << 4;
const CTLR_DS: u32 = 1 << 6;

/// The registers with one bit per INTID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BitReg {
    Group,
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

impl BitReg {
    /// The register whose 32-register block starts at `base` (0x80, 0x100, ... 0x380).
    pub(super) fn at(base: u64) -> Option<BitReg> {
        Some(match base {
            0x080 => BitReg::Group,
            0x100 => BitReg::SetEnable,
            0x180 => BitReg::ClearEnable,
            0x200 => BitReg::SetPending,
            0x280 => BitReg::ClearPending,
            0x300 => BitReg::SetActive,
            0x380 => BitReg::ClearActive,
            _ => return None,
        })
    }
}

/// A decoded distributor offset.
#[derive(Clone, Copy, Debug)]
enum Reg {
    Ctlr,
    Typer,
    Iidr,
    Typer2,
    Statusr,
    /// One bit per INTID; the INTID of bit 0.
    Bits(BitReg, u32),
    /// The INTID of the addressed byte.
    Priority(u32),
    Targets(u32),
    /// Two bits per INTID; the INTID of bits [1:0].
    Config(u32),
    Sgir,
    /// GICv2 SGI pending sources: set?, SGI of the addressed byte.
    SgiPending(bool, u32),
    /// GICv3 IROUTER of INTID, upper half?
    Irouter(u32, bool),
    Id(u64),
    /// Architecturally RAZ/WI here (e.g. SGI/PPI banks with affinity routing).
    RazWi,
    /// Unimplemented or reserved: RAZ/WI, counted.
    Reserved,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Word,
    ByteOrWord,
    /// A 64-bit register: doubleword, or either 32-bit half.
    Dword,
}

/// Checks width and alignment for a register of kind `access`.
pub(super) fn check_width(
    offset: u64,
    width: Width,
    byte_ok: bool,
    dword: bool,
) -> Result<(), MmioError> {
    let ok = match width {
        Width::Byte => byte_ok,
        Width::Half => false,
        Width::Word => true,
        Width::Dword => dword,
    };
    if ok && offset.is_multiple_of(width.bytes()) {
        Ok(())
    } else {
        Err(MmioError::BadAccess)
    }
}

/// CoreSight-style ID registers at 0x_FD0..0x_FFC (PIDR4..7, PIDR0..3, CIDR0..3).
pub(super) fn id_register(index: u64, arch_rev: u32) -> u32 {
    const IDS: [u32; 12] = [0x04, 0, 0, 0, 0x6B, 0xB0, 0x0B, 0, 0x0D, 0xF0, 0x05, 0xB1];
    match index {
        6 => IDS[6] | (arch_rev << 4),
        i if i < 12 => IDS[i as usize],
        _ => 0,
    }
}

impl Vgic {
    /// The size of the distributor region the backend traps.
    pub fn dist_size(&self) -> u64 {
        match self.version {
            GicVersion::V3 => V3_DIST_SIZE,
            GicVersion::V2 => V2_DIST_SIZE,
        }
    }

    fn arch_rev(&self) -> u32 {
        match self.version {
            GicVersion::V3 => 3,
            GicVersion::V2 => 2,
        }
    }

    fn decode_dist(&self, offset: u64) -> (Reg, Access) {
        let v3 = self.version == GicVersion::V3;
        // With affinity routing, the SGI/PPI parts of the banked registers live in
        // the redistributors: the distributor's copies are RAZ/WI.
        let private_razwi = |intid: u32| v3 && intid < 32;
        let id_base = self.dist_size() - 0x30;
        let (reg, access) = match offset {
            0x000 => (Reg::Ctlr, Access::Word),
            0x004 => (Reg::Typer, Access::Word),
            0x008 => (Reg::Iidr, Access::Word),
            0x00C if v3 => (Reg::Typer2, Access::Word),
            0x010 if v3 => (Reg::Statusr, Access::Word),
            0x080..=0x3FF => {
                let Some(reg) = BitReg::at(offset & !0x7F) else {
                    return (Reg::Reserved, Access::Word);
                };
                let intid = ((offset & 0x7F) / 4 * 32) as u32;
                let r = if private_razwi(intid) {
                    Reg::RazWi
                } else {
                    Reg::Bits(reg, intid)
                };
                (r, Access::Word)
            }
            0x400..=0x7FF => {
                let intid = (offset - 0x400) as u32;
                let r = if private_razwi(intid) {
                    Reg::RazWi
                } else {
                    Reg::Priority(intid)
                };
                (r, Access::ByteOrWord)
            }
            0x800..=0xBFF if v3 => (Reg::RazWi, Access::ByteOrWord),
            0x800..=0xBFF => (Reg::Targets((offset - 0x800) as u32), Access::ByteOrWord),
            0xC00..=0xCFF => {
                let intid = ((offset - 0xC00) / 4 * 16) as u32;
                let r = if private_razwi(intid) {
                    Reg::RazWi
                } else {
                    Reg::Config(intid)
                };
                (r, Access::Word)
            }
            // IGRPMODR and NSACR: RAZ/WI with a single security state.
            0xD00..=0xD7F | 0xE00..=0xEFF => (Reg::RazWi, Access::Word),
            0xF00 if !v3 => (Reg::Sgir, Access::Word),
            0xF10..=0xF1F if !v3 => (
                Reg::SgiPending(false, (offset - 0xF10) as u32),
                Access::ByteOrWord,
            ),
            0xF20..=0xF2F if !v3 => (
                Reg::SgiPending(true, (offset - 0xF20) as u32),
                Access::ByteOrWord,
            ),
            // IROUTER0..31 (SGIs/PPIs) are reserved.
            0x6000..=0x60FF if v3 => (Reg::RazWi, Access::Dword),
            0x6100..=0x7FDF if v3 => {
                let intid = ((offset - 0x6000) / 8) as u32;
                (Reg::Irouter(intid, offset & 4 != 0), Access::Dword)
            }
            o if o >= id_base => (Reg::Id((o - id_base) / 4), Access::Word),
            _ => (Reg::Reserved, Access::Word),
        };
        (reg, access)
    }

    /// Checks the accessing vCPU, range, width and alignment; decodes the offset.
    fn dist_access(&mut self, vcpu: usize, offset: u64, width: Width) -> Result<Reg, MmioError> {
        let result = if vcpu >= self.vcpus {
            Err(MmioError::NoSuchVcpu)
        } else if offset
            .checked_add(width.bytes())
            .is_none_or(|end| end > self.dist_size())
        {
            Err(MmioError::OutOfRange)
        } else {
            let (reg, access) = self.decode_dist(offset);
            check_width(
                offset,
                width,
                access == Access::ByteOrWord,
                access == Access::Dword,
            )
            .map(|_| reg)
        };
        match result {
            Ok(Reg::Reserved) => self.stats.raz_wi += 1,
            Err(_) => self.stats.bad_access += 1,
            Ok(_) => {}
        }
        result
    }

    /// A guest read of the distributor at `offset` by `vcpu`.
    pub fn dist_read(&mut self, vcpu: usize, offset: u64, width: Width) -> Result<u64, MmioError> {
        let reg = self.dist_access(vcpu, offset, width)?;
        let v3 = self.version == GicVersion::V3;
        let value = match reg {
            Reg::Ctlr => {
                let mut v = (u32::from(self.grp0_enabled) * CTLR_ENABLE_GRP0)
                    | (u32::from(self.grp1_enabled) * CTLR_ENABLE_GRP1);
                if v3 {
                    v |= CTLR_ARE | CTLR_DS;
                }
                v as u64
            }
            Reg::Typer => {
                let lines = self.nr_irqs.div_ceil(32) - 1;
                let cpus = (self.vcpus.min(8) - 1) as u32;
                // IDbits = 9: 10-bit INTIDs. No LPIs, MBIs, security extension, Aff3, RSS.
                let idbits = if v3 { 9 << 19 } else { 0 };
                (lines | (cpus << 5) | idbits) as u64
            }
            Reg::Iidr => IIDR as u64,
            Reg::Typer2 | Reg::Statusr | Reg::RazWi | Reg::Reserved | Reg::Sgir => 0,
            Reg::Bits(reg, intid) => self.read_bits(vcpu, intid, reg) as u64,
            Reg::Priority(intid) => {
                self.read_bytes(offset, width, intid, |g, i| g.read_priority(vcpu, i))
            }
            Reg::Targets(intid) => {
                self.read_bytes(offset, width, intid, |g, i| g.read_target(vcpu, i))
            }
            Reg::Config(intid) => self.read_config(vcpu, intid) as u64,
            Reg::SgiPending(_, sgi) => self.read_bytes(offset, width, sgi, |g, s| {
                g.private[vcpu].sgi_sources[s as usize]
            }),
            Reg::Irouter(intid, high) => {
                let r = self
                    .irouter
                    .get((intid - 32) as usize)
                    .copied()
                    .unwrap_or(0);
                match (width, high) {
                    (Width::Dword, _) => r,
                    (_, false) => r & 0xFFFF_FFFF,
                    (_, true) => r >> 32,
                }
            }
            Reg::Id(i) => id_register(i, self.arch_rev()) as u64,
        };
        Ok(value)
    }

    /// A guest write of `value` to the distributor at `offset` by `vcpu`.
    /// Returns the vCPUs to kick.
    pub fn dist_write(
        &mut self,
        vcpu: usize,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<VcpuSet, MmioError> {
        let reg = self.dist_access(vcpu, offset, width)?;
        // GICD_SGIR changes only its targets' SGIs (`send_sgi_v2` marks
        // them): marking every vCPU and the SPIs made the sender, too,
        // refill with a scan of every SPI (about 1 400 instructions).
        if !matches!(reg, Reg::Sgir) {
            self.touch_all();
        }
        let value = width.mask(value);
        let kicks = match reg {
            Reg::Ctlr => {
                self.grp0_enabled = value as u32 & CTLR_ENABLE_GRP0 != 0;
                self.grp1_enabled = value as u32 & CTLR_ENABLE_GRP1 != 0;
                self.kicks_all()
            }
            Reg::Typer
            | Reg::Iidr
            | Reg::Typer2
            | Reg::Statusr
            | Reg::Id(_)
            | Reg::RazWi
            | Reg::Reserved => VcpuSet::EMPTY,
            Reg::Bits(reg, intid) => self.write_bits(vcpu, intid, reg, value as u32),
            Reg::Priority(intid) => {
                self.write_bytes(offset, width, value, intid, |g, i, b| {
                    g.write_priority(vcpu, i, b)
                });
                self.kicks(vcpu, intid, width.bytes() as u32)
            }
            Reg::Targets(intid) => {
                self.write_bytes(offset, width, value, intid, |g, i, b| g.write_target(i, b));
                self.kicks(vcpu, intid, width.bytes() as u32)
            }
            Reg::Config(intid) => {
                self.write_config(vcpu, intid, value as u32);
                VcpuSet::EMPTY
            }
            Reg::Sgir => match decode_gicd_sgir(value as u32, vcpu, self.vcpus) {
                Some((sgi, targets)) => self.send_sgi_v2(vcpu, sgi, targets),
                None => VcpuSet::EMPTY,
            },
            Reg::SgiPending(set, sgi) => {
                self.write_bytes(offset, width, value, sgi, |g, s, b| {
                    g.write_sgi_sources(vcpu, s, b, set)
                });
                if set {
                    VcpuSet::single(vcpu)
                } else {
                    VcpuSet::EMPTY
                }
            }
            Reg::Irouter(intid, high) => {
                let i = (intid - 32) as usize;
                if let Some(r) = self.irouter.get_mut(i) {
                    let new = match (width, high) {
                        (Width::Dword, _) => value,
                        (_, false) => (*r & !0xFFFF_FFFF) | value,
                        (_, true) => (*r & 0xFFFF_FFFF) | (value << 32),
                    };
                    *r = new & IROUTER_MASK;
                }
                self.kicks(vcpu, intid, 1)
            }
        };
        Ok(kicks)
    }

    /// Reads the byte-per-INTID register bytes covered by an access.
    fn read_bytes(
        &self,
        offset: u64,
        width: Width,
        first: u32,
        byte: impl Fn(&Vgic, u32) -> u8,
    ) -> u64 {
        debug_assert!(offset.is_multiple_of(width.bytes()));
        (0..width.bytes() as u32).fold(0u64, |acc, k| {
            acc | (u64::from(byte(self, first + k)) << (8 * k))
        })
    }

    fn write_bytes(
        &mut self,
        offset: u64,
        width: Width,
        value: u64,
        first: u32,
        mut byte: impl FnMut(&mut Vgic, u32, u8),
    ) {
        debug_assert!(offset.is_multiple_of(width.bytes()));
        for k in 0..width.bytes() as u32 {
            byte(self, first + k, (value >> (8 * k)) as u8);
        }
    }

    // ---- one bit per INTID (distributor and redistributor) ----

    /// Reads the 32 bits of `reg` for INTIDs `first..first + 32` (SGIs/PPIs of `vcpu`).
    pub(super) fn read_bits(&self, vcpu: usize, first: u32, reg: BitReg) -> u32 {
        let mut v = 0;
        for b in 0..32 {
            let Some(irq) = self.irq(vcpu, first + b) else {
                continue;
            };
            let bit = match reg {
                BitReg::Group => irq.group1,
                BitReg::SetEnable | BitReg::ClearEnable => irq.enabled,
                BitReg::SetPending | BitReg::ClearPending => irq.pending_view(),
                BitReg::SetActive | BitReg::ClearActive => irq.active_view(),
            };
            v |= u32::from(bit) << b;
        }
        v
    }

    /// Writes `value` to `reg` for INTIDs `first..first + 32`; returns the vCPUs to kick.
    pub(super) fn write_bits(
        &mut self,
        vcpu: usize,
        first: u32,
        reg: BitReg,
        value: u32,
    ) -> VcpuSet {
        let v2 = self.version == GicVersion::V2;
        let mut touched = 0u32;
        for b in 0..32 {
            let intid = first + b;
            let one = value & (1 << b) != 0;
            // GICv2 SGI pending state is per source: GICD_SPENDSGIR/CPENDSGIR.
            let v2_sgi_pending =
                v2 && intid < 16 && matches!(reg, BitReg::SetPending | BitReg::ClearPending);
            let Some(irq) = self.irq_mut(vcpu, intid) else {
                continue;
            };
            match reg {
                BitReg::Group => {
                    irq.group1 = one;
                    touched |= 1 << b;
                }
                _ if !one || v2_sgi_pending => {}
                BitReg::SetEnable => irq.enabled = true,
                BitReg::ClearEnable => irq.enabled = false,
                BitReg::SetPending => irq.set_pending(),
                BitReg::ClearPending => irq.clear_pending(),
                BitReg::SetActive => irq.set_active(true),
                BitReg::ClearActive => irq.set_active(false),
            }
            if one && !v2_sgi_pending {
                touched |= 1 << b;
                // An SPI made active here belongs to the vCPU that did it.
                if intid >= 32 && reg == BitReg::SetActive && !irq.in_lr {
                    irq.owner = vcpu as u8;
                }
            }
        }
        self.kicks_masked(vcpu, first, touched)
    }

    // ---- bytes per INTID ----

    pub(super) fn read_priority(&self, vcpu: usize, intid: u32) -> u8 {
        self.irq(vcpu, intid).map_or(0, |irq| irq.priority)
    }

    pub(super) fn write_priority(&mut self, vcpu: usize, intid: u32, value: u8) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.priority = value & PRIORITY_MASK;
        }
    }

    /// GICv2 ITARGETSR byte: SGIs/PPIs read the accessing CPU's bit.
    fn read_target(&self, vcpu: usize, intid: u32) -> u8 {
        if intid < 32 {
            1 << vcpu
        } else {
            self.targets
                .get((intid - 32) as usize)
                .copied()
                .unwrap_or(0)
        }
    }

    fn write_target(&mut self, intid: u32, value: u8) {
        let valid = VcpuSet::first(self.vcpus).0 as u8;
        if let Some(t) = intid
            .checked_sub(32)
            .and_then(|i| self.targets.get_mut(i as usize))
        {
            *t = value & valid;
        }
    }

    // ---- two bits per INTID: ICFGR ----

    /// ICFGR for INTIDs `first..first + 16`: bit 2n+1 set = edge-triggered.
    pub(super) fn read_config(&self, vcpu: usize, first: u32) -> u32 {
        (0..16).fold(0, |v, k| match self.irq(vcpu, first + k) {
            Some(irq) if irq.edge => v | (2 << (2 * k)),
            _ => v,
        })
    }

    /// SGIs are always edge-triggered (read-only); PPIs and SPIs are configurable.
    pub(super) fn write_config(&mut self, vcpu: usize, first: u32, value: u32) {
        for k in 0..16 {
            let intid = first + k;
            if intid < 16 {
                continue;
            }
            if let Some(irq) = self.irq_mut(vcpu, intid) {
                irq.edge = value & (2 << (2 * k)) != 0;
            }
        }
    }
}
