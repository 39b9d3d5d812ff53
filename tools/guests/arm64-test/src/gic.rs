//! A minimal GIC driver for the guest: GICv3 (distributor, redistributors,
//! system-register CPU interface) or GICv2 (distributor, memory-mapped CPU
//! interface). SGIs and the virtual and physical timer PPIs are enabled;
//! nothing else.

use crate::cpu::{sysreg_read, sysreg_write, CPUS, MAX_CPUS, VTIMER_INTID};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Which GIC the DTB describes, with its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V2,
    V3,
}

static VERSION: AtomicU32 = AtomicU32::new(3);
static GICD: AtomicUsize = AtomicUsize::new(0x0800_0000);
/// GICv3: the first redistributor region; GICv2: the CPU interface.
static GICR_OR_GICC: AtomicUsize = AtomicUsize::new(0x080A_0000);
/// GICv3: each CPU's redistributor (RD_base).
static RD_BASE: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];

// Distributor.
const GICD_CTLR: usize = 0x0;
const GICD_ISENABLER: usize = 0x100;
const GICD_IPRIORITYR: usize = 0x400;
const GICD_ITARGETSR: usize = 0x800;
const GICD_SGIR: usize = 0xF00;
const GICD_CTLR_RWP: u32 = 1 << 31;
// Redistributor (RD_base and SGI_base = RD_base + 64 KiB).
const GICR_CTLR: usize = 0x0;
const GICR_TYPER: usize = 0x8;
const GICR_WAKER: usize = 0x14;
const SGI_BASE: usize = 0x1_0000;
const GICR_IGROUPR0: usize = SGI_BASE + 0x80;
const GICR_ISENABLER0: usize = SGI_BASE + 0x100;
const GICR_IPRIORITYR: usize = SGI_BASE + 0x400;
// GICv2 CPU interface.
const GICC_CTLR: usize = 0x0;
const GICC_PMR: usize = 0x4;
const GICC_IAR: usize = 0xC;
const GICC_EOIR: usize = 0x10;

/// Priority given to every enabled interrupt.
const PRIORITY: u32 = 0xA0;
/// SGIs 0-15, the virtual timer and the EL1 physical timer.
const ENABLED: u32 = 0xFFFF | (1 << VTIMER_INTID) | (1 << crate::el1state::PTIMER_INTID);

fn rd(addr: usize) -> u32 {
    // SAFETY: every caller passes a register of the GIC frames the DTB
    // names (or QEMU's defaults), mapped as Device memory.
    unsafe { crate::cpu::mmio_read32(addr) }
}

fn wr(addr: usize, v: u32) {
    // SAFETY: as in `rd`.
    unsafe { crate::cpu::mmio_write32(addr, v) }
}

/// Records the GIC found in the DTB.
pub fn configure(version: Version, gicd: usize, gicr_or_gicc: usize) {
    VERSION.store(
        match version {
            Version::V2 => 2,
            Version::V3 => 3,
        },
        Ordering::Relaxed,
    );
    GICD.store(gicd, Ordering::Relaxed);
    GICR_OR_GICC.store(gicr_or_gicc, Ordering::Relaxed);
}

pub fn version() -> Version {
    if VERSION.load(Ordering::Relaxed) == 2 {
        Version::V2
    } else {
        Version::V3
    }
}

fn gicd() -> usize {
    GICD.load(Ordering::Relaxed)
}

fn wait_rwp(addr: usize) {
    let give_up = crate::cpu::deadline(100_000);
    while rd(addr) & GICD_CTLR_RWP != 0 && crate::cpu::now() < give_up {
        core::hint::spin_loop();
    }
}

/// Enables the distributor (boot CPU, once).
pub fn init_distributor() {
    match version() {
        Version::V3 => {
            // ARE first, then the groups (with DS = 1 bit 0 is Group 0,
            // bit 1 Group 1; in the non-secure view bit 1 is Group 1).
            wr(gicd() + GICD_CTLR, 1 << 4);
            wait_rwp(gicd() + GICD_CTLR);
            wr(gicd() + GICD_CTLR, (1 << 4) | (1 << 1) | 1);
            wait_rwp(gicd() + GICD_CTLR);
        }
        Version::V2 => wr(gicd() + GICD_CTLR, 1),
    }
}

/// Sets up this CPU's redistributor / banked registers and CPU interface.
/// Returns an error text when the CPU's redistributor cannot be found.
pub fn init_cpu(cpu: usize) -> Result<(), &'static str> {
    let prio = PRIORITY * 0x0101_0101;
    match version() {
        Version::V3 => {
            let rdb = find_redistributor(crate::cpu::mpidr()).ok_or("no redistributor")?;
            RD_BASE[cpu].store(rdb, Ordering::Relaxed);
            // Wake it: clear ProcessorSleep, wait for ChildrenAsleep to clear.
            wr(rdb + GICR_WAKER, rd(rdb + GICR_WAKER) & !(1 << 1));
            let give_up = crate::cpu::deadline(100_000);
            while rd(rdb + GICR_WAKER) & (1 << 2) != 0 && crate::cpu::now() < give_up {
                core::hint::spin_loop();
            }
            wr(rdb + GICR_IGROUPR0, !0);
            for i in 0..8 {
                wr(rdb + GICR_IPRIORITYR + 4 * i, prio);
            }
            wr(rdb + GICR_ISENABLER0, ENABLED);
            wait_rwp(rdb + GICR_CTLR);
            // ICC_SRE_EL1.SRE, then priority mask, binary point, Group 1 on.
            sysreg_write!("s3_0_c12_c12_5", sysreg_read!("s3_0_c12_c12_5") | 1);
            sysreg_write!("s3_0_c4_c6_0", 0xFF);
            sysreg_write!("s3_0_c12_c12_3", 0);
            sysreg_write!("s3_0_c12_c12_7", 1);
        }
        Version::V2 => {
            let d = gicd();
            for i in 0..8 {
                wr(d + GICD_IPRIORITYR + 4 * i, prio);
            }
            wr(d + GICD_ISENABLER, ENABLED);
            let iface = rd(d + GICD_ITARGETSR) & 0xFF;
            CPUS[cpu].gic_iface.store(iface, Ordering::Relaxed);
            let c = GICR_OR_GICC.load(Ordering::Relaxed);
            wr(c + GICC_PMR, 0xFF);
            wr(c + GICC_CTLR, 1);
        }
    }
    Ok(())
}

/// Walks the redistributor region for the frame whose GICR_TYPER affinity
/// is `mpidr`.
fn find_redistributor(mpidr: u64) -> Option<usize> {
    let want = ((mpidr >> 32) & 0xFF) << 24 | (mpidr & 0xFF_FFFF);
    let mut base = GICR_OR_GICC.load(Ordering::Relaxed);
    for _ in 0..256 {
        let lo = rd(base + GICR_TYPER) as u64;
        let hi = rd(base + GICR_TYPER + 4) as u64;
        if hi == want {
            return Some(base);
        }
        // VLPIS (bit 1) adds two more 64 KiB frames; Last is bit 4.
        if lo & (1 << 4) != 0 {
            return None;
        }
        base += if lo & (1 << 1) != 0 {
            0x4_0000
        } else {
            0x2_0000
        };
    }
    None
}

/// Acknowledges the highest-priority pending interrupt: (INTID, raw IAR).
pub fn ack() -> (u32, u32) {
    match version() {
        Version::V3 => {
            let iar = sysreg_read!("s3_0_c12_c12_0") as u32;
            (iar & 0xFF_FFFF, iar)
        }
        Version::V2 => {
            let iar = rd(GICR_OR_GICC.load(Ordering::Relaxed) + GICC_IAR);
            (iar & 0x3FF, iar)
        }
    }
}

/// GICv2: the source CPU interface number in an SGI's IAR value.
pub fn sgi_source(raw: u32) -> Option<u32> {
    (version() == Version::V2).then_some((raw >> 10) & 7)
}

/// Ends (and deactivates) an interrupt taken with [`ack`].
pub fn eoi(raw: u32) {
    match version() {
        Version::V3 => sysreg_write!("s3_0_c12_c12_1", raw as u64),
        Version::V2 => wr(GICR_OR_GICC.load(Ordering::Relaxed) + GICC_EOIR, raw),
    }
}

/// Sends SGI `intid` to the CPUs in `mask` (bit i = CPU index i) through
/// the architected path: ICC_SGI1R_EL1 (one write per cluster) or GICD_SGIR.
pub fn send_sgi(intid: u32, mask: u32) {
    match version() {
        Version::V3 => {
            let mut left = mask;
            while left != 0 {
                let first = left.trailing_zeros() as usize;
                let cluster = CPUS[first].mpidr.load(Ordering::Relaxed) & !0xFF;
                let mut list = 0u64;
                for (i, c) in CPUS.iter().enumerate() {
                    let m = c.mpidr.load(Ordering::Relaxed);
                    if left & (1 << i) != 0 && m & !0xFF == cluster && m & 0xFF < 16 {
                        list |= 1 << (m & 0xFF);
                        left &= !(1 << i);
                    }
                }
                if list == 0 {
                    // Aff0 >= 16 cannot be named by a target list.
                    left &= !(1 << first);
                    continue;
                }
                let aff1 = (cluster >> 8) & 0xFF;
                let aff2 = (cluster >> 16) & 0xFF;
                let aff3 = (cluster >> 32) & 0xFF;
                let v = aff3 << 48 | aff2 << 32 | (intid as u64 & 0xF) << 24 | aff1 << 16 | list;
                sysreg_write!("s3_0_c12_c11_5", v);
            }
        }
        Version::V2 => {
            let mut list = 0;
            for (i, c) in CPUS.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    list |= c.gic_iface.load(Ordering::Relaxed);
                }
            }
            wr(gicd() + GICD_SGIR, (list & 0xFF) << 16 | (intid & 0xF));
        }
    }
}

/// Sends SGI `intid` to every CPU but this one (ICC_SGI1R_EL1.IRM, or the
/// GICD_SGIR "all but self" filter).
pub fn send_sgi_others(intid: u32) {
    match version() {
        Version::V3 => sysreg_write!("s3_0_c12_c11_5", 1 << 40 | (intid as u64 & 0xF) << 24),
        Version::V2 => wr(gicd() + GICD_SGIR, 1 << 24 | (intid & 0xF)),
    }
}
