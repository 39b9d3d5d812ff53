//! GICv3 redistributors: one per vCPU, each an `RD_base` frame (control,
//! identification, power) followed by an `SGI_base` frame (the vCPU's SGI
//! and PPI registers), 64 KiB each, frames of consecutive vCPUs contiguous.

use super::dist::{check_width, id_register, BitReg};
use super::{GicVersion, MmioError, VcpuSet, Vgic, Width, IIDR};
use crate::vcpu::psci::vcpu_mpidr;

/// One vCPU's redistributor: RD_base + SGI_base.
pub const REDIST_STRIDE: u64 = 0x2_0000;
const SGI_BASE: u64 = 0x1_0000;

const WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
const TYPER_LAST: u64 = 1 << 4;

#[derive(Clone, Copy, Debug)]
enum Reg {
    Iidr,
    Typer,
    Waker,
    Id(u64),
    Bits(BitReg),
    /// The INTID of the addressed byte.
    Priority(u32),
    /// ICFGR0 (SGIs, read-only) or ICFGR1 (PPIs): the INTID of bits [1:0].
    Config(u32),
    /// GICR_CTLR, STATUSR, PROPBASER, PENDBASER, IGRPMODR0, NSACR: nothing to do.
    RazWi,
    Reserved,
}

/// (register, byte access allowed, 64-bit register)
fn decode(offset: u64) -> (Reg, bool, bool) {
    let word = |r| (r, false, false);
    if offset < SGI_BASE {
        match offset {
            0x0000 | 0x0010 => word(Reg::RazWi),
            0x0004 => word(Reg::Iidr),
            0x0008..=0x000F => (Reg::Typer, false, true),
            0x0014 => word(Reg::Waker),
            0x0070..=0x007F => (Reg::RazWi, false, true),
            0xFFD0..=0xFFFF => word(Reg::Id((offset - 0xFFD0) / 4)),
            _ => word(Reg::Reserved),
        }
    } else {
        match offset - SGI_BASE {
            o @ (0x080 | 0x100 | 0x180 | 0x200 | 0x280 | 0x300 | 0x380) => {
                word(BitReg::at(o).map_or(Reg::Reserved, Reg::Bits))
            }
            o @ 0x400..=0x41F => (Reg::Priority((o - 0x400) as u32), true, false),
            o @ (0xC00 | 0xC04) => word(Reg::Config(((o - 0xC00) * 4) as u32)),
            0xD00 | 0xE00 => word(Reg::RazWi),
            _ => word(Reg::Reserved),
        }
    }
}

impl Vgic {
    /// The size of the redistributor region: one [`REDIST_STRIDE`] per vCPU
    /// (0 on GICv2, which has none).
    pub fn redist_size(&self) -> u64 {
        match self.version {
            GicVersion::V3 => REDIST_STRIDE * self.vcpus as u64,
            GicVersion::V2 => 0,
        }
    }

    /// Checks range, width and alignment; returns the frame's vCPU, the
    /// offset in its frame and the register.
    fn redist_access(&mut self, offset: u64, width: Width) -> Result<(usize, u64, Reg), MmioError> {
        let result = if offset
            .checked_add(width.bytes())
            .is_none_or(|end| end > self.redist_size())
        {
            Err(MmioError::OutOfRange)
        } else {
            let (vcpu, within) = ((offset / REDIST_STRIDE) as usize, offset % REDIST_STRIDE);
            let (reg, byte_ok, dword) = decode(within);
            check_width(within, width, byte_ok, dword).map(|_| (vcpu, within, reg))
        };
        match result {
            Ok((_, _, Reg::Reserved)) => self.stats.raz_wi += 1,
            Err(_) => self.stats.bad_access += 1,
            Ok(_) => {}
        }
        result
    }

    /// GICR_TYPER of `vcpu`'s redistributor.
    fn redist_typer(&self, vcpu: usize) -> u64 {
        let mpidr = vcpu_mpidr(vcpu);
        // Affinity_Value [63:32] = Aff3.Aff2.Aff1.Aff0; MPIDR keeps Aff3 at [39:32].
        let affinity = (mpidr & 0xFF_FFFF) | ((mpidr >> 32) & 0xFF) << 24;
        let last = if vcpu + 1 == self.vcpus {
            TYPER_LAST
        } else {
            0
        };
        (affinity << 32) | ((vcpu as u64) << 8) | last
    }

    /// A guest read of the redistributor region at `offset` (from its start).
    pub fn redist_read(&mut self, offset: u64, width: Width) -> Result<u64, MmioError> {
        let (vcpu, within, reg) = self.redist_access(offset, width)?;
        let value = match reg {
            Reg::Iidr => IIDR as u64,
            Reg::Typer => {
                let typer = self.redist_typer(vcpu);
                match width {
                    Width::Dword => typer,
                    _ if within & 4 != 0 => typer >> 32,
                    _ => typer & 0xFFFF_FFFF,
                }
            }
            Reg::Waker => {
                if self.private[vcpu].sleeping {
                    (WAKER_PROCESSOR_SLEEP | WAKER_CHILDREN_ASLEEP) as u64
                } else {
                    0
                }
            }
            Reg::Id(i) => id_register(i, 3) as u64,
            Reg::Bits(reg) => self.read_bits(vcpu, 0, reg) as u64,
            Reg::Priority(intid) => (0..width.bytes() as u32).fold(0, |acc, k| {
                acc | u64::from(self.read_priority(vcpu, intid + k)) << (8 * k)
            }),
            Reg::Config(first) => self.read_config(vcpu, first) as u64,
            Reg::RazWi | Reg::Reserved => 0,
        };
        Ok(value)
    }

    /// A guest write to the redistributor region at `offset` (from its
    /// start). Returns the vCPUs to kick.
    pub fn redist_write(
        &mut self,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<VcpuSet, MmioError> {
        let (vcpu, _, reg) = self.redist_access(offset, width)?;
        self.touch_all();
        let value = width.mask(value);
        let kicks = match reg {
            Reg::Waker => {
                // ChildrenAsleep follows ProcessorSleep at once: nothing to quiesce.
                let sleeping = value as u32 & WAKER_PROCESSOR_SLEEP != 0;
                let changed = sleeping != self.private[vcpu].sleeping;
                self.private[vcpu].sleeping = sleeping;
                // IRM = 1 SPIs go to the lowest awake vCPU: routes may have moved.
                if changed {
                    self.kicks_all()
                } else {
                    VcpuSet::EMPTY
                }
            }
            Reg::Bits(reg) => self.write_bits(vcpu, 0, reg, value as u32),
            Reg::Priority(intid) => {
                for k in 0..width.bytes() as u32 {
                    self.write_priority(vcpu, intid + k, (value >> (8 * k)) as u8);
                }
                self.kicks(vcpu, intid, width.bytes() as u32)
            }
            Reg::Config(first) => {
                self.write_config(vcpu, first, value as u32);
                VcpuSet::EMPTY
            }
            Reg::Iidr | Reg::Typer | Reg::Id(_) | Reg::RazWi | Reg::Reserved => VcpuSet::EMPTY,
        };
        Ok(kicks)
    }
}
