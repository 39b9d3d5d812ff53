//! The physical GIC, for kestrel's own interrupts (the EL2 timer PPI):
//! GICv3 through the system-register CPU interface (ICC_*_EL1 at EL2, with
//! ICC_SRE_EL2.SRE/Enable set) and the redistributors, or GICv2 (GIC-400)
//! through the GICD and GICC frames. Interrupts are group 1 non-secure
//! (GICv3) or whatever group the firmware left (GICv2: group 0 without
//! security extensions, as on QEMU; group 1 as seen from the non-secure side).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::board::IrqChip;
use crate::MAX_CPUS;

use super::percpu;

/// Priority of an interrupt kestrel takes (all below the 0xF0 mask; a
/// GIC-400 keeps 5 priority bits, so values are multiples of 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// kestrel's own tick: above everything a guest can make pending (the
    /// maintenance interrupt, kicks, forwarded timers), so no guest-driven
    /// interrupt can keep the tick, and with it the end of a time slice,
    /// from being acknowledged.
    Tick,
    /// Everything else.
    Normal,
}

impl Priority {
    const fn value(self) -> u32 {
        match self {
            Priority::Tick => 0x80,
            Priority::Normal => 0xa0,
        }
    }
}
/// Priority mask: everything with a higher priority than 0xF0 is signalled.
const PMR: u64 = 0xf0;
const SPIN_LIMIT: u32 = 10_000_000;

// Distributor (both versions).
const GICD_CTLR: usize = 0x0000;
const GICD_TYPER: usize = 0x0004;
const GICD_IGROUPR: usize = 0x0080;
const GICD_ISENABLER: usize = 0x0100;
const GICD_ICENABLER: usize = 0x0180;
const GICD_IPRIORITYR: usize = 0x0400;
const GICD_CTLR_RWP: u32 = 1 << 31;
// GICv3 GICD_CTLR (non-secure view / single security state): EnableGrp1
// (bit 0 / EnableGrp0), EnableGrp1A (bit 1 / EnableGrp1), ARE(_NS) (bit 4).
const GICD_CTLR_V3: u32 = (1 << 4) | (1 << 1) | (1 << 0);

// GICv3 redistributor: RD_base frame, then SGI_base frame 64 KiB above.
const GICR_CTLR: usize = 0x0000;
const GICR_WAKER: usize = 0x0014;
const GICR_TYPER: usize = 0x0008;
const GICR_SGI: usize = 0x1_0000;
const GICR_WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const GICR_WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
const GICR_TYPER_VLPIS: u64 = 1 << 1;
const GICR_TYPER_LAST: u64 = 1 << 4;
const GICR_IGRPMODR0: usize = 0x0d00;

// GICv2 CPU interface.
const GICC_CTLR: usize = 0x00;
const GICC_PMR: usize = 0x04;
const GICC_BPR: usize = 0x08;
const GICC_IAR: usize = 0x0c;
const GICC_EOIR: usize = 0x10;
const GICC_DIR: usize = 0x1000;
/// GICC_CTLR.EOImodeNS: EOIR only drops priority, GICC_DIR deactivates.
const GICC_CTLR_EOIMODE: u32 = 1 << 9;
/// ICC_CTLR_EL1.EOImode: the same for GICv3.
const ICC_CTLR_EOIMODE: u64 = 1 << 1;
const GICD_ICACTIVER: usize = 0x0380;

/// This CPU's redistributor (GICv3), by logical CPU index.
static REDIST: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// Per CPU: EOI split into priority drop (EOIR) and deactivation (DIR), so
/// an interrupt can stay active for a guest to deactivate (VM backend).
static SPLIT_EOI: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// GICv2: each CPU's interface mask (its banked GICD_ITARGETSR0 byte), for
/// GICD_SGIR target lists.
static V2_CPU_MASK: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
const GICD_ITARGETSR: usize = 0x0800;
const GICD_SGIR: usize = 0x0F00;

#[derive(Clone, Copy, Debug)]
pub enum Gic {
    V2 {
        gicd: usize,
        gicc: usize,
    },
    V3 {
        gicd: usize,
        gicr: usize,
        gicr_size: usize,
    },
}

/// INTIDs 1020-1023 are special (spurious and friends), never acknowledged.
pub fn is_spurious(intid: u32) -> bool {
    (1020..=1023).contains(&intid)
}

fn read32(addr: usize) -> u32 {
    // SAFETY: `addr` is a register of a GIC frame the DTB names, identity
    // mapped as Device memory; 32-bit aligned.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

fn write32(addr: usize, v: u32) {
    // SAFETY: as in `read32`.
    unsafe { core::ptr::write_volatile(addr as *mut u32, v) }
}

fn read64(addr: usize) -> u64 {
    // SAFETY: as in `read32`; GICR_TYPER is a 64-bit register, 8-aligned.
    unsafe { core::ptr::read_volatile(addr as *const u64) }
}

fn wait_clear(addr: usize, mask: u32) -> bool {
    (0..SPIN_LIMIT).any(|_| read32(addr) & mask == 0)
}

macro_rules! sysreg_write {
    ($reg:literal, $v:expr) => {
        // SAFETY: a GICv3 CPU interface register, written at EL2 with the
        // system register interface enabled (ICC_SRE_EL2.SRE).
        unsafe { core::arch::asm!(concat!("msr ", $reg, ", {}"), in(reg) $v as u64, options(nostack)) }
    };
}

macro_rules! sysreg_read {
    ($reg:literal) => {{
        let v: u64;
        // SAFETY: as in `sysreg_write`.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $reg), out(reg) v, options(nostack)) };
        v
    }};
}

fn isb() {
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

impl Gic {
    pub fn from_board(chip: &IrqChip) -> Option<Gic> {
        match *chip {
            IrqChip::GicV2 { gicd, gicc, .. } => Some(Gic::V2 {
                gicd: gicd as usize,
                gicc: gicc as usize,
            }),
            IrqChip::GicV3 {
                gicd,
                gicr,
                gicr_size,
            } => Some(Gic::V3 {
                gicd: gicd as usize,
                gicr: gicr as usize,
                gicr_size: gicr_size as usize,
            }),
            IrqChip::LoongArchEiointc => None,
        }
    }

    /// Distributor set-up, once, on the boot CPU: all SPIs disabled (kestrel
    /// uses none yet) and in group 1, then the distributor enabled.
    pub fn init_distributor(&self) {
        let gicd = match *self {
            Gic::V2 { gicd, .. } | Gic::V3 { gicd, .. } => gicd,
        };
        write32(gicd + GICD_CTLR, 0);
        let lines = ((read32(gicd + GICD_TYPER) & 0x1f) as usize + 1) * 32;
        for n in 1..lines / 32 {
            write32(gicd + GICD_ICENABLER + 4 * n, u32::MAX);
            if matches!(self, Gic::V3 { .. }) {
                write32(gicd + GICD_IGROUPR + 4 * n, u32::MAX);
            }
        }
        match *self {
            Gic::V2 { .. } => write32(gicd + GICD_CTLR, 1),
            Gic::V3 { .. } => {
                wait_clear(gicd + GICD_CTLR, GICD_CTLR_RWP);
                write32(gicd + GICD_CTLR, GICD_CTLR_V3);
                wait_clear(gicd + GICD_CTLR, GICD_CTLR_RWP);
            }
        }
    }

    /// Per-CPU set-up on the calling CPU (logical `index`): GICv3 finds and
    /// wakes its redistributor and enables the system register interface;
    /// GICv2 enables its CPU interface.
    pub fn init_cpu(&self, index: usize) -> Result<(), &'static str> {
        match *self {
            Gic::V2 { gicc, gicd } => {
                if let Some(slot) = V2_CPU_MASK.get(index) {
                    slot.store(
                        (read32(gicd + GICD_ITARGETSR) & 0xff) as usize,
                        Ordering::Relaxed,
                    );
                }
                write32(gicc + GICC_PMR, PMR as u32);
                write32(gicc + GICC_BPR, 0);
                write32(gicc + GICC_CTLR, 1);
                Ok(())
            }
            Gic::V3 {
                gicr, gicr_size, ..
            } => {
                let rd = find_redistributor(gicr, gicr_size, percpu::mpidr_affinity())
                    .ok_or("no GICv3 redistributor matches this CPU's MPIDR")?;
                REDIST
                    .get(index)
                    .ok_or("CPU index out of range")?
                    .store(rd, Ordering::Relaxed);
                write32(
                    rd + GICR_WAKER,
                    read32(rd + GICR_WAKER) & !GICR_WAKER_PROCESSOR_SLEEP,
                );
                if !wait_clear(rd + GICR_WAKER, GICR_WAKER_CHILDREN_ASLEEP) {
                    return Err("GICv3 redistributor did not wake up (GICR_WAKER.ChildrenAsleep)");
                }
                // SRE | DFB | DIB | Enable (lets EL1 use its interface too).
                sysreg_write!("icc_sre_el2", 0xf_u64);
                isb();
                if sysreg_read!("icc_sre_el2") & 1 == 0 {
                    return Err(
                        "GICv3 system register interface cannot be enabled (ICC_SRE_EL2.SRE)",
                    );
                }
                sysreg_write!("icc_pmr_el1", PMR);
                sysreg_write!("icc_bpr1_el1", 0_u64);
                sysreg_write!("icc_ctlr_el1", 0_u64); // EOImode 0: EOI drops and deactivates
                sysreg_write!("icc_igrpen1_el1", 1_u64);
                isb();
                Ok(())
            }
        }
    }

    /// Enables private interrupt `intid` (a PPI) on the calling CPU at
    /// `priority`.
    pub fn enable_ppi(&self, intid: u32, priority: Priority) {
        let prio = priority.value();
        let bit = 1u32 << (intid % 32);
        let prio_reg = (intid as usize / 4) * 4;
        let prio_shift = (intid % 4) * 8;
        match *self {
            Gic::V2 { gicd, .. } => {
                let p = gicd + GICD_IPRIORITYR + prio_reg;
                write32(
                    p,
                    (read32(p) & !(0xff << prio_shift)) | (prio << prio_shift),
                );
                write32(gicd + GICD_ISENABLER, bit);
            }
            Gic::V3 { .. } => {
                let rd = REDIST[percpu::index()].load(Ordering::Relaxed);
                let sgi = rd + GICR_SGI;
                write32(sgi + GICD_IGROUPR, read32(sgi + GICD_IGROUPR) | bit);
                write32(sgi + GICR_IGRPMODR0, read32(sgi + GICR_IGRPMODR0) & !bit);
                let p = sgi + GICD_IPRIORITYR + prio_reg;
                write32(
                    p,
                    (read32(p) & !(0xff << prio_shift)) | (prio << prio_shift),
                );
                write32(sgi + GICD_ISENABLER, bit);
                wait_clear(rd + GICR_CTLR, 1 << 3);
            }
        }
    }

    /// Disables private interrupt `intid` (SGI/PPI) on the calling CPU.
    pub fn disable_ppi(&self, intid: u32) {
        let bit = 1u32 << (intid % 32);
        match *self {
            Gic::V2 { gicd, .. } => write32(gicd + GICD_ICENABLER, bit),
            Gic::V3 { .. } => {
                let rd = REDIST[percpu::index()].load(Ordering::Relaxed);
                write32(rd + GICR_SGI + GICD_ICENABLER, bit);
                wait_clear(rd + GICR_CTLR, 1 << 3);
            }
        }
    }

    /// Sends SGI `sgi` to logical CPU `index` whose MPIDR affinity is `mpidr`.
    pub fn send_sgi(&self, index: usize, mpidr: u64, sgi: u32) {
        match *self {
            Gic::V2 { gicd, .. } => {
                let mask = V2_CPU_MASK
                    .get(index)
                    .map_or(0, |m| m.load(Ordering::Relaxed)) as u32;
                if mask != 0 {
                    write32(gicd + GICD_SGIR, (mask << 16) | (sgi & 15));
                }
            }
            Gic::V3 { .. } => {
                let aff0 = mpidr & 0xf;
                let v = (((mpidr >> 32) & 0xff) << 48)
                    | (((mpidr >> 16) & 0xff) << 32)
                    | (((mpidr >> 8) & 0xff) << 16)
                    | (u64::from(sgi & 15) << 24)
                    | (1 << aff0);
                // SAFETY: writing ICC_SGI1R_EL1 at EL2 only generates a
                // group 1 SGI; the system register interface is enabled.
                unsafe {
                    core::arch::asm!("dsb ishst", "msr icc_sgi1r_el1, {}", "isb",
                        in(reg) v, options(nostack))
                };
            }
        }
    }

    /// Acknowledges the highest-priority pending interrupt; returns the raw
    /// IAR value (INTID in the low bits) to hand back to [`Gic::eoi`].
    pub fn ack(&self) -> u32 {
        match *self {
            Gic::V2 { gicc, .. } => read32(gicc + GICC_IAR),
            Gic::V3 { .. } => sysreg_read!("icc_iar1_el1") as u32,
        }
    }

    /// Splits EOI on the calling CPU: from now on [`Gic::eoi`] drops the
    /// priority and deactivates, [`Gic::priority_drop`] only drops it.
    pub fn enable_split_eoi(&self) {
        let cpu = percpu::index();
        match *self {
            Gic::V2 { gicc, .. } => write32(
                gicc + GICC_CTLR,
                read32(gicc + GICC_CTLR) | GICC_CTLR_EOIMODE,
            ),
            Gic::V3 { .. } => {
                let ctlr = sysreg_read!("icc_ctlr_el1");
                sysreg_write!("icc_ctlr_el1", ctlr | ICC_CTLR_EOIMODE);
                isb();
            }
        }
        if let Some(f) = SPLIT_EOI.get(cpu) {
            f.store(true, Ordering::Release);
        }
    }

    /// Drops the running priority of an acknowledged interrupt but leaves it
    /// active (split EOI only; otherwise a full [`Gic::eoi`]).
    pub fn priority_drop(&self, iar: u32) {
        if !SPLIT_EOI[percpu::index()].load(Ordering::Acquire) {
            return self.eoi(iar);
        }
        match *self {
            Gic::V2 { gicc, .. } => write32(gicc + GICC_EOIR, iar),
            Gic::V3 { .. } => {
                sysreg_write!("icc_eoir1_el1", iar);
                isb();
            }
        }
    }

    /// Clears the active state of private interrupt `intid` on the calling CPU.
    pub fn clear_active_ppi(&self, intid: u32) {
        let bit = 1u32 << (intid % 32);
        match *self {
            Gic::V2 { gicd, .. } => write32(gicd + GICD_ICACTIVER, bit),
            Gic::V3 { .. } => {
                let rd = REDIST[percpu::index()].load(Ordering::Relaxed);
                write32(rd + GICR_SGI + GICD_ICACTIVER, bit);
            }
        }
    }

    /// Ends (drops priority and deactivates) an acknowledged interrupt.
    pub fn eoi(&self, iar: u32) {
        if SPLIT_EOI[percpu::index()].load(Ordering::Acquire) {
            match *self {
                Gic::V2 { gicc, .. } => {
                    write32(gicc + GICC_EOIR, iar);
                    write32(gicc + GICC_DIR, iar);
                }
                Gic::V3 { .. } => {
                    sysreg_write!("icc_eoir1_el1", iar);
                    sysreg_write!("icc_dir_el1", iar);
                    isb();
                }
            }
            return;
        }
        match *self {
            Gic::V2 { gicc, .. } => write32(gicc + GICC_EOIR, iar),
            Gic::V3 { .. } => {
                sysreg_write!("icc_eoir1_el1", iar);
                isb();
            }
        }
    }
}

/// Walks the redistributor region for the frame whose GICR_TYPER.Affinity
/// matches `mpidr` (Aff3 in bits 39:32, Aff2..0 in 23:0).
fn find_redistributor(gicr: usize, size: usize, mpidr: u64) -> Option<usize> {
    let want = ((mpidr >> 32) & 0xff) << 24 | (mpidr & 0xff_ffff);
    let end = if size == 0 { usize::MAX } else { gicr + size };
    let mut rd = gicr;
    while rd < end {
        let typer = read64(rd + GICR_TYPER);
        if typer >> 32 == want {
            return Some(rd);
        }
        if typer & GICR_TYPER_LAST != 0 {
            break;
        }
        rd += if typer & GICR_TYPER_VLPIS != 0 {
            0x4_0000
        } else {
            0x2_0000
        };
    }
    None
}
