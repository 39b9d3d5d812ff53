//! The physical GIC, for kestrel's own interrupts (the EL2 timer PPI):
//! GICv3 through the system-register CPU interface (ICC_*_EL1 at EL2, with
//! ICC_SRE_EL2.SRE/Enable set) and the redistributors, or GICv2 (GIC-400)
//! through the GICD and GICC frames. Interrupts are group 1 non-secure
//! (GICv3) or whatever group the firmware left (GICv2: group 0 without
//! security extensions, as on QEMU; group 1 as seen from the non-secure side).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bitflags::bitflags;
use volatile::access::{ReadOnly, WriteOnly};

use crate::host::board::IrqChip;
use crate::MAX_CPUS;

use super::super::mmio::{at, Block, VolatileFieldAccess};
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
const PMR: u32 = 0xf0;
const SPIN_LIMIT: u32 = 10_000_000;

/// The distributor (GICD), and the same layout for the private interrupts
/// in a GICv3 redistributor's SGI_base frame (GICR_IGROUPR0 & co.).
/// Register arrays are indexed by interrupt / 32 (one bit each), / 4 (one
/// byte each: priorities, targets).
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct DistRegs {
    ctlr: u32,
    #[access(ReadOnly)]
    typer: u32,
    _reserved0: [u32; 30],
    igroupr: [u32; 32],
    isenabler: [u32; 32],
    icenabler: [u32; 32],
    _reserved1: [u32; 96],
    icactiver: [u32; 32],
    ipriorityr: [u32; 256],
    itargetsr: [u32; 256],
    icfgr: [u32; 64],
    /// GICv3 (GICR_IGRPMODR0 in the SGI frame).
    igrpmodr: [u32; 32],
    _reserved3: [u32; 96],
    #[access(WriteOnly)]
    sgir: u32,
}
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(DistRegs, igroupr) == 0x080);
    assert!(offset_of!(DistRegs, isenabler) == 0x100);
    assert!(offset_of!(DistRegs, icenabler) == 0x180);
    assert!(offset_of!(DistRegs, icactiver) == 0x380);
    assert!(offset_of!(DistRegs, ipriorityr) == 0x400);
    assert!(offset_of!(DistRegs, itargetsr) == 0x800);
    assert!(offset_of!(DistRegs, icfgr) == 0xc00);
    assert!(offset_of!(DistRegs, igrpmodr) == 0xd00);
    assert!(offset_of!(DistRegs, sgir) == 0xf00);
};

/// GICv3: the distributor's GICD_IROUTER<n> registers, from offset 0x6000
/// (n < 32 reserved).
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct RouterRegs {
    irouter: [u64; 1024],
}
/// Offset of [`RouterRegs`] in the distributor frame.
const GICD_IROUTER: usize = 0x6000;

/// A GICv3 redistributor's RD_base frame; its SGI_base frame (a
/// [`DistRegs`]) follows 64 KiB above.
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct RedistRegs {
    #[access(ReadOnly)]
    ctlr: u32,
    _reserved0: u32,
    #[access(ReadOnly)]
    typer: u64,
    _reserved1: u32,
    waker: u32,
}
const _: () = assert!(core::mem::offset_of!(RedistRegs, typer) == 0x08);
const _: () = assert!(core::mem::offset_of!(RedistRegs, waker) == 0x14);
/// The SGI_base frame's offset from RD_base.
const GICR_SGI: usize = 0x1_0000;

/// The GICv2 CPU interface (GICC).
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct CpuRegs {
    ctlr: u32,
    pmr: u32,
    bpr: u32,
    #[access(ReadOnly)]
    iar: u32,
    #[access(WriteOnly)]
    eoir: u32,
    _reserved: [u32; 1019],
    #[access(WriteOnly)]
    dir: u32,
}
const _: () = assert!(core::mem::offset_of!(CpuRegs, iar) == 0x0c);
const _: () = assert!(core::mem::offset_of!(CpuRegs, dir) == 0x1000);

bitflags! {
    /// GICD_CTLR. GICv3 bits as seen non-secure (or with one security
    /// state, where bits 0 and 1 are EnableGrp0 and EnableGrp1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct GicdCtlr: u32 {
        /// GICv2 Enable; GICv3 EnableGrp1 (non-secure view).
        const ENABLE = 1 << 0;
        /// GICv3 EnableGrp1A (non-secure view).
        const ENABLE_GRP1A = 1 << 1;
        /// GICv3 ARE(_NS): affinity routing.
        const ARE = 1 << 4;
        /// GICv3 register write pending.
        const RWP = 1 << 31;
    }
}

impl GicdCtlr {
    /// GICv3: affinity routing and both group enables.
    const V3: Self =
        Self::from_bits_retain(Self::ARE.bits() | Self::ENABLE_GRP1A.bits() | Self::ENABLE.bits());
}

bitflags! {
    /// GICR_CTLR bits kestrel reads.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct GicrCtlr: u32 {
        /// Register write pending.
        const RWP = 1 << 3;
    }
}

bitflags! {
    /// GICR_WAKER.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct GicrWaker: u32 {
        const PROCESSOR_SLEEP = 1 << 1;
        const CHILDREN_ASLEEP = 1 << 2;
    }
}

bitflags! {
    /// GICR_TYPER flag bits (Affinity, 63:32, is a field).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct GicrTyper: u64 {
        /// Virtual LPIs: the frame has two more 64 KiB pages.
        const VLPIS = 1 << 1;
        /// The last redistributor of the region.
        const LAST = 1 << 4;
    }
}

bitflags! {
    /// GICC_CTLR (non-secure view).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct GiccCtlr: u32 {
        const ENABLE = 1 << 0;
        /// EOImodeNS: EOIR only drops priority, GICC_DIR deactivates.
        const EOIMODE_NS = 1 << 9;
    }
}

bitflags! {
    /// ICC_CTLR_EL1.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct IccCtlr: u64 {
        /// EOImode: the same split as GICC_CTLR.EOImodeNS.
        const EOIMODE = 1 << 1;
    }
}

bitflags! {
    /// ICC_SRE_EL2.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct IccSre: u64 {
        /// System register interface.
        const SRE = 1 << 0;
        /// FIQ and IRQ bypass disabled.
        const DFB = 1 << 1;
        const DIB = 1 << 2;
        /// EL1 may use its own ICC_SRE_EL1.SRE.
        const ENABLE = 1 << 3;
    }
}

/// This CPU's redistributor (GICv3) RD_base, by logical CPU index.
static REDIST: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// Per CPU: EOI split into priority drop (EOIR) and deactivation (DIR), so
/// an interrupt can stay active for a guest to deactivate (VM backend).
static SPLIT_EOI: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// GICv2: each CPU's interface mask (its banked GICD_ITARGETSR0 byte), for
/// GICD_SGIR target lists.
static V2_CPU_MASK: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];

#[derive(Clone, Copy, Debug)]
pub enum Gic {
    V2 {
        gicd: Block<DistRegs>,
        gicc: Block<CpuRegs>,
    },
    V3 {
        gicd: Block<DistRegs>,
        /// The redistributor region (frames found by MPIDR at `init_cpu`).
        gicr: usize,
        gicr_size: usize,
    },
}

/// INTIDs 1020-1023 are special (spurious and friends), never acknowledged.
pub fn is_spurious(intid: u32) -> bool {
    (1020..=1023).contains(&intid)
}

/// A GIC frame the DTB names (`None` for address 0, which names none).
///
/// # Safety
/// `base`, if non-zero, is the address of a register frame of layout `T`
/// that the boot code identity-maps as Device memory on every CPU.
unsafe fn frame<T>(base: u64) -> Option<Block<T>> {
    let base = usize::try_from(base).ok().filter(|&b| b != 0)?;
    // SAFETY: forwarded to the caller; `base` is non-zero, and GIC frames
    // are 4 KiB (GICv2) or 64 KiB (GICv3) aligned.
    Some(unsafe { Block::new(base) })
}

/// The calling CPU's redistributor: its RD_base and SGI_base frames.
fn redist() -> (Block<RedistRegs>, Block<DistRegs>) {
    let rd = REDIST[percpu::index()].load(Ordering::Relaxed);
    debug_assert!(rd != 0);
    // SAFETY: `init_cpu` stored this CPU's frame, found by
    // `find_redistributor` inside the redistributor region the DTB names
    // (identity-mapped as Device memory), before any caller could use it:
    // RD_base, and SGI_base 64 KiB above it in the same frame.
    unsafe { (Block::new(rd), Block::new(rd + GICR_SGI)) }
}

/// Polls until the bits of `mask` are clear in `read()`; false after
/// [`SPIN_LIMIT`] polls.
fn wait_clear<F: bitflags::Flags + Copy>(read: impl Fn() -> F, mask: F) -> bool {
    (0..SPIN_LIMIT).any(|_| !read().intersects(mask))
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

/// Sets the priority byte of private interrupt `intid` in a distributor-
/// layout frame (read-modify-write of its 32-bit word).
fn set_priority(frame: Block<DistRegs>, intid: u32, prio: u32) {
    let shift = (intid % 4) * 8;
    at(frame.regs().ipriorityr(), intid as usize / 4)
        .update(|v| (v & !(0xff << shift)) | (prio << shift));
}

impl Gic {
    pub fn from_board(chip: &IrqChip) -> Option<Gic> {
        match *chip {
            IrqChip::GicV2 { gicd, gicc, .. } => {
                // SAFETY: the GIC frames of the board's device tree, which
                // the boot code identity-maps as Device memory
                // (`mmu::build`) before any CPU uses the GIC.
                let (gicd, gicc) = unsafe { (frame(gicd)?, frame(gicc)?) };
                Some(Gic::V2 { gicd, gicc })
            }
            IrqChip::GicV3 {
                gicd,
                gicr,
                gicr_size,
            } => {
                // SAFETY: as for GICv2 (the redistributor region starts
                // with a frame).
                let (gicd, first) = unsafe { (frame(gicd)?, frame::<RedistRegs>(gicr)?) };
                Some(Gic::V3 {
                    gicd,
                    gicr: first.base(),
                    gicr_size: gicr_size as usize,
                })
            }
            IrqChip::LoongArchEiointc => None,
        }
    }

    /// Distributor set-up, once, on the boot CPU: all SPIs disabled (kestrel
    /// uses none yet) and in group 1, then the distributor enabled.
    pub fn init_distributor(&self) {
        let gicd = match *self {
            Gic::V2 { gicd, .. } | Gic::V3 { gicd, .. } => gicd,
        };
        let d = gicd.regs();
        d.ctlr().write(0);
        let lines = ((d.typer().read() & 0x1f) as usize + 1) * 32;
        for n in 1..lines / 32 {
            at(d.icenabler(), n).write(u32::MAX);
            if matches!(self, Gic::V3 { .. }) {
                at(d.igroupr(), n).write(u32::MAX);
            }
        }
        let ctlr = || GicdCtlr::from_bits_retain(gicd.regs().ctlr().read());
        match *self {
            Gic::V2 { .. } => d.ctlr().write(GicdCtlr::ENABLE.bits()),
            Gic::V3 { .. } => {
                wait_clear(ctlr, GicdCtlr::RWP);
                d.ctlr().write(GicdCtlr::V3.bits());
                wait_clear(ctlr, GicdCtlr::RWP);
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
                        (at(gicd.regs().itargetsr(), 0).read() & 0xff) as usize,
                        Ordering::Relaxed,
                    );
                }
                let c = gicc.regs();
                c.pmr().write(PMR);
                c.bpr().write(0);
                c.ctlr().write(GiccCtlr::ENABLE.bits());
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
                    .store(rd.base(), Ordering::Relaxed);
                rd.regs()
                    .waker()
                    .update(|w| w & !GicrWaker::PROCESSOR_SLEEP.bits());
                let waker = || GicrWaker::from_bits_retain(rd.regs().waker().read());
                if !wait_clear(waker, GicrWaker::CHILDREN_ASLEEP) {
                    return Err("GICv3 redistributor did not wake up (GICR_WAKER.ChildrenAsleep)");
                }
                // Lets EL1 use its interface too.
                sysreg_write!("icc_sre_el2", IccSre::all().bits());
                isb();
                if !IccSre::from_bits_retain(sysreg_read!("icc_sre_el2")).contains(IccSre::SRE) {
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
        match *self {
            Gic::V2 { gicd, .. } => {
                set_priority(gicd, intid, prio);
                at(gicd.regs().isenabler(), 0).write(bit);
            }
            Gic::V3 { .. } => {
                let (rd, sgi) = redist();
                let s = sgi.regs();
                at(s.igroupr(), 0).update(|v| v | bit);
                at(s.igrpmodr(), 0).update(|v| v & !bit);
                set_priority(sgi, intid, prio);
                at(s.isenabler(), 0).write(bit);
                wait_clear(
                    || GicrCtlr::from_bits_retain(rd.regs().ctlr().read()),
                    GicrCtlr::RWP,
                );
            }
        }
    }

    /// Disables private interrupt `intid` (SGI/PPI) on the calling CPU.
    pub fn disable_ppi(&self, intid: u32) {
        let bit = 1u32 << (intid % 32);
        match *self {
            Gic::V2 { gicd, .. } => at(gicd.regs().icenabler(), 0).write(bit),
            Gic::V3 { .. } => {
                let (rd, sgi) = redist();
                at(sgi.regs().icenabler(), 0).write(bit);
                wait_clear(
                    || GicrCtlr::from_bits_retain(rd.regs().ctlr().read()),
                    GicrCtlr::RWP,
                );
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
                    gicd.regs().sgir().write((mask << 16) | (sgi & 15));
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

    /// Enables SPI `intid` (INTID, 32..1020) for a guest's device: edge or
    /// level as the device is, at normal priority, routed to the CPU whose
    /// logical index is `cpu` and MPIDR `mpidr` (GICv3 affinity routing;
    /// GICv2 that CPU's interface). Group: as `init_distributor` left it.
    pub fn enable_spi(&self, intid: u32, edge: bool, cpu: usize, mpidr: u64) {
        if !(32..1020).contains(&intid) {
            return;
        }
        let (n, bit) = (intid as usize / 32, 1u32 << (intid % 32));
        let gicd = match *self {
            Gic::V2 { gicd, .. } | Gic::V3 { gicd, .. } => gicd,
        };
        let d = gicd.regs();
        at(d.icenabler(), n).write(bit);
        set_priority(gicd, intid, Priority::Normal.value());
        let shift = (intid % 16) * 2 + 1;
        at(d.icfgr(), intid as usize / 16)
            .update(|v| (v & !(1 << shift)) | (u32::from(edge) << shift));
        match *self {
            Gic::V2 { .. } => {
                let mask = V2_CPU_MASK
                    .get(cpu)
                    .map_or(1, |m| m.load(Ordering::Relaxed).max(1))
                    as u32;
                let shift = (intid % 4) * 8;
                at(d.itargetsr(), intid as usize / 4)
                    .update(|v| (v & !(0xff << shift)) | ((mask & 0xff) << shift));
            }
            Gic::V3 { .. } => {
                // SAFETY: GICD_IROUTER lies at 0x6000 in the GICv3
                // distributor's 64 KiB frame, which the boot code
                // identity-maps as Device memory (as the frame itself).
                let r = unsafe { Block::<RouterRegs>::new(gicd.base() + GICD_IROUTER) };
                let aff = (mpidr & 0xff_ffff) | ((mpidr >> 32) & 0xff) << 32;
                at(r.regs().irouter(), intid as usize).write(aff);
            }
        }
        at(d.isenabler(), n).write(bit);
    }

    /// Disables SPI `intid` and clears its active state (its guest is gone).
    pub fn disable_spi(&self, intid: u32) {
        if !(32..1020).contains(&intid) {
            return;
        }
        let (n, bit) = (intid as usize / 32, 1u32 << (intid % 32));
        let d = match *self {
            Gic::V2 { gicd, .. } | Gic::V3 { gicd, .. } => gicd,
        };
        at(d.regs().icenabler(), n).write(bit);
        at(d.regs().icactiver(), n).write(bit);
    }

    /// Acknowledges the highest-priority pending interrupt; returns the raw
    /// IAR value (INTID in the low bits) to hand back to [`Gic::eoi`].
    pub fn ack(&self) -> u32 {
        match *self {
            Gic::V2 { gicc, .. } => gicc.regs().iar().read(),
            Gic::V3 { .. } => sysreg_read!("icc_iar1_el1") as u32,
        }
    }

    /// Splits EOI on the calling CPU: from now on [`Gic::eoi`] drops the
    /// priority and deactivates, [`Gic::priority_drop`] only drops it.
    pub fn enable_split_eoi(&self) {
        let cpu = percpu::index();
        match *self {
            Gic::V2 { gicc, .. } => gicc
                .regs()
                .ctlr()
                .update(|c| c | GiccCtlr::EOIMODE_NS.bits()),
            Gic::V3 { .. } => {
                let ctlr = IccCtlr::from_bits_retain(sysreg_read!("icc_ctlr_el1"));
                sysreg_write!("icc_ctlr_el1", ctlr.union(IccCtlr::EOIMODE).bits());
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
            Gic::V2 { gicc, .. } => gicc.regs().eoir().write(iar),
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
            Gic::V2 { gicd, .. } => at(gicd.regs().icactiver(), 0).write(bit),
            Gic::V3 { .. } => at(redist().1.regs().icactiver(), 0).write(bit),
        }
    }

    /// Ends (drops priority and deactivates) an acknowledged interrupt.
    pub fn eoi(&self, iar: u32) {
        if SPLIT_EOI[percpu::index()].load(Ordering::Acquire) {
            match *self {
                Gic::V2 { gicc, .. } => {
                    gicc.regs().eoir().write(iar);
                    gicc.regs().dir().write(iar);
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
            Gic::V2 { gicc, .. } => gicc.regs().eoir().write(iar),
            Gic::V3 { .. } => {
                sysreg_write!("icc_eoir1_el1", iar);
                isb();
            }
        }
    }
}

/// Walks the redistributor region for the frame whose GICR_TYPER.Affinity
/// matches `mpidr` (Aff3 in bits 39:32, Aff2..0 in 23:0).
fn find_redistributor(gicr: usize, size: usize, mpidr: u64) -> Option<Block<RedistRegs>> {
    let want = ((mpidr >> 32) & 0xff) << 24 | (mpidr & 0xff_ffff);
    let end = if size == 0 { usize::MAX } else { gicr + size };
    let mut rd = gicr;
    while rd < end {
        // SAFETY: `rd` is the start of a redistributor frame inside the
        // region the DTB names (the region's base, then the previous
        // frame's end), identity-mapped as Device memory; 64 KiB aligned.
        let frame = unsafe { Block::<RedistRegs>::new(rd) };
        let raw = frame.regs().typer().read();
        if raw >> 32 == want {
            return Some(frame);
        }
        let typer = GicrTyper::from_bits_retain(raw);
        if typer.contains(GicrTyper::LAST) {
            break;
        }
        rd += if typer.contains(GicrTyper::VLPIS) {
            0x4_0000
        } else {
            0x2_0000
        };
    }
    None
}
