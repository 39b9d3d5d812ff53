//! The virtual GIC: a portable model of an Arm Generic Interrupt Controller
//! (GICv3 with affinity routing, or GICv2) for one VM, free of registers.
//!
//! The arm64 backend owns the hardware (the virtual CPU interface and its list
//! registers) and calls this model:
//!
//! - on a trapped access to the distributor or a redistributor frame:
//!   [`Vgic::dist_read`] / [`Vgic::dist_write`], [`Vgic::redist_read`] /
//!   [`Vgic::redist_write`] (offsets are from the start of the region);
//! - on a trapped `ICC_SGI1R_EL1` / `ICC_ASGI1R_EL1` / `ICC_SGI0R_EL1` write:
//!   [`Vgic::write_icc_sgi`] (GICv2 guests write `GICD_SGIR`, which is MMIO);
//! - for device and timer interrupts: [`Vgic::set_level`] and [`Vgic::inject`];
//! - before each guest entry: [`Vgic::fill_lrs`], whose entries it encodes with
//!   [`LrEntry::to_ich_lr`] / [`LrEntry::to_gich_lr`] into the list registers;
//! - after each guest exit, before handling the exit: [`Vgic::sync_lrs`] with
//!   the list registers decoded by [`LrEntry::from_ich_lr`] / [`LrEntry::from_gich_lr`];
//! - to decide whether a WFI blocks: [`Vgic::has_pending`].
//!
//! Every call that can make an interrupt pending returns a [`VcpuSet`]: the
//! vCPUs that may have something new to take, to pass to
//! [`crate::vcpu::sched::Scheduler::wake`] (a running one needs a kick to exit and
//! refill its list registers; the caller itself needs none). One `Vgic` serves
//! all vCPUs of a VM: the backend keeps it behind one lock.
//!
//! # What is emulated
//!
//! - Interrupts: SGIs 0-15 and PPIs 16-31 per vCPU, and `nr_spis` SPIs from 32
//!   (a multiple of 32; INTIDs stop at 1019). State per interrupt: pending
//!   (an edge/software latch, plus the line level for level-sensitive ones),
//!   active, enabled, priority, group, edge/level, and for SPIs the route.
//! - GICv3: distributor (`GICD_*`) with affinity routing always on, and one
//!   redistributor per vCPU (`RD_base` + `SGI_base`, 2 x 64 KiB, contiguous,
//!   `GICR_TYPER.Last` on the last). SPIs follow `GICD_IROUTER`: an affinity,
//!   or with IRM = 1 the lowest-numbered vCPU whose redistributor is awake.
//! - GICv2: distributor with banked SGI/PPI registers, `GICD_ITARGETSR`
//!   (an SPI goes to the lowest-numbered CPU of its mask), `GICD_SGIR`, and
//!   per-source SGI pending state (`GICD_SPENDSGIR` / `GICD_CPENDSGIR`).
//! - Priorities keep their top 5 bits ([`PRIORITY_MASK`]): 32 levels, what
//!   every virtual CPU interface can hold (GICH_LR has 5 bits).
//!
//! # What is not
//!
//! - No LPIs, no ITS, no MBIs (`GICD_TYPER.LPIS`/`MBIS` = 0; `GICR_PROPBASER`,
//!   `GICR_PENDBASER` read as 0), no extended SPI/PPI ranges, no GICv4.
//! - The guest sees a GIC with a single security state (`GICD_CTLR.DS` = 1,
//!   as Linux finds under KVM): both groups are its own. Group 0 interrupts
//!   are enabled by `GICD_CTLR` bit 0, group 1 by bit 1, and are given to the
//!   list registers with their group (Linux uses group 1 on GICv3, group 0 on
//!   GICv2, where the virtual CPU interface signals group 0 as IRQ unless the
//!   guest sets FIQEn). `GICD_IGRPMODR`/`GICR_IGRPMODR0`/`NSACR` are RAZ/WI.
//!   `ICC_SGI0R_EL1` and `ICC_ASGI1R_EL1` make only group 0 SGIs pending,
//!   `ICC_SGI1R_EL1` SGIs of either group (GICv3 with DS = 1).
//! - GICv2 allows at most 8 vCPUs: [`Vgic::new`] refuses more.
//! - The CPU interface itself (`ICC_*` system registers, `GICC`/`GICV`) is the
//!   hardware's; priority masking and running priority are not seen here.
//! - An interrupt in flight in a running vCPU's list registers is read back
//!   (ISPENDR/ISACTIVER) as it was handed out; a write that clears its state
//!   asks for that vCPU to be kicked so the change lands at its next exit.
//!
//! Unimplemented and reserved offsets read as zero and ignore writes, counted
//! in [`VgicStats::raz_wi`]; an access of a width or alignment a register does
//! not support is an [`MmioError`], which the backend turns into a data abort.
//! No guest-provided offset, width or value panics the model.

mod dist;
mod lr;
pub mod mmio;
mod redist;
mod sgi;
mod state;
#[cfg(test)]
mod tests;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

pub use crate::vcpu::cpuset::VcpuSet;
pub use lr::{LrEntry, LrFill, LrState, MAX_LRS};
pub use sgi::{decode_gicd_sgir, decode_icc_sgi1r, SgiRegister};

use state::{Irq, Private};

use crate::vcpu::psci::vcpu_index_of_mpidr;

/// Which GIC architecture the guest sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicVersion {
    V2,
    V3,
}

/// A VM's virtual GIC shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VgicConfig {
    pub version: GicVersion,
    /// vCPUs: 1..=[`crate::MAX_CPUS`] (GICv3), 1..=8 (GICv2).
    pub vcpus: usize,
    /// SPIs: a multiple of 32, 32..=992 (INTIDs 1020 and up never exist).
    pub nr_spis: usize,
}

/// Why a configuration is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VgicError {
    /// No vCPU, or more than the version allows.
    BadVcpuCount { max: usize },
    /// SPIs not a multiple of 32, or out of 32..=992.
    BadSpiCount,
}

pub use crate::dev::vdev::{MmioError, Width};

/// Counters for diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VgicStats {
    /// Accesses to unimplemented or reserved offsets (read as 0, write ignored).
    pub raz_wi: u64,
    /// Accesses refused with an [`MmioError`].
    pub bad_access: u64,
}

/// Priority bits kept (5: 32 levels).
pub const PRIORITY_MASK: u8 = 0xF8;
/// INTIDs 1020..1023 are special and never name an interrupt.
pub const MAX_INTID: u32 = 1019;
/// The EL1 virtual timer PPI.
pub const VTIMER_PPI: u32 = 27;
/// GICv2 supports 8 CPU interfaces.
pub const V2_MAX_VCPUS: usize = 8;

/// Per vCPU, whether its list registers need a fill ([`Vgic::fill_needed`]),
/// shared with the backend so an entry can look without the model's lock.
#[derive(Debug)]
pub struct FillHints {
    flags: Vec<AtomicBool>,
}

impl FillHints {
    fn new(vcpus: usize) -> FillHints {
        FillHints {
            flags: (0..vcpus).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// Whether `vcpu` needs a fill (unknown vCPUs do). Acquire: pairs with
    /// the model's store, made under its lock after the change.
    pub fn stale(&self, vcpu: usize) -> bool {
        self.flags
            .get(vcpu)
            .is_none_or(|f| f.load(Ordering::Acquire))
    }

    fn set(&self, vcpu: usize, stale: bool) {
        if let Some(f) = self.flags.get(vcpu) {
            f.store(stale, Ordering::Release);
        }
    }
}

/// A model's [`FillHints`]. A clone of the model (a what-if copy) gets its
/// own flags with the same values, never the shared ones.
#[derive(Debug)]
struct StaleFlags(Arc<FillHints>);

impl Clone for StaleFlags {
    fn clone(&self) -> Self {
        let flags = self
            .0
            .flags
            .iter()
            .map(|f| AtomicBool::new(f.load(Ordering::Acquire)))
            .collect();
        StaleFlags(Arc::new(FillHints { flags }))
    }
}

/// The virtual GIC of one VM. See the module documentation.
#[derive(Clone, Debug)]
pub struct Vgic {
    version: GicVersion,
    vcpus: usize,
    /// INTIDs below this exist (32 + SPIs, at most 1020).
    nr_irqs: u32,
    grp0_enabled: bool,
    grp1_enabled: bool,
    private: Vec<Private>,
    spis: Vec<Irq>,
    /// GICv3: GICD_IROUTER per SPI (Aff3 [39:32], IRM [31], Aff2..0 [23:0]).
    irouter: Vec<u64>,
    /// GICv2: GICD_ITARGETSR per SPI.
    targets: Vec<u8>,
    stats: VgicStats,
    /// Per vCPU: something changed since its last [`Vgic::fill_lrs`] that
    /// could change what the fill chooses (see [`Vgic::fill_needed`]),
    /// readable without the model's lock ([`Vgic::fill_hints`]).
    stale: StaleFlags,
    /// No SPI is pending, active or in a list register (as the last fill's
    /// scan found, until an SPI may have changed): fills skip the SPIs.
    spis_quiet: bool,
}

impl Vgic {
    /// A GIC in its reset state: distributor disabled, every interrupt
    /// disabled, inactive, group 0, priority 0, SPIs level-sensitive and routed
    /// to vCPU 0, redistributors asleep.
    pub fn new(cfg: VgicConfig) -> Result<Vgic, VgicError> {
        let max = match cfg.version {
            GicVersion::V2 => V2_MAX_VCPUS,
            GicVersion::V3 => crate::MAX_CPUS,
        };
        if cfg.vcpus == 0 || cfg.vcpus > max {
            return Err(VgicError::BadVcpuCount { max });
        }
        if !cfg.nr_spis.is_multiple_of(32) || !(32..=992).contains(&cfg.nr_spis) {
            return Err(VgicError::BadSpiCount);
        }
        let nr_irqs = (32 + cfg.nr_spis as u32).min(MAX_INTID + 1);
        let spis = (nr_irqs - 32) as usize;
        Ok(Vgic {
            version: cfg.version,
            vcpus: cfg.vcpus,
            nr_irqs,
            grp0_enabled: false,
            grp1_enabled: false,
            private: (0..cfg.vcpus).map(|_| Private::new()).collect(),
            spis: vec![Irq::default(); spis],
            irouter: vec![0; spis],
            targets: vec![1; spis],
            stats: VgicStats::default(),
            stale: StaleFlags(Arc::new(FillHints::new(cfg.vcpus))),
            spis_quiet: false,
        })
    }

    pub fn version(&self) -> GicVersion {
        self.version
    }

    pub fn vcpus(&self) -> usize {
        self.vcpus
    }

    /// INTIDs `0..nr_irqs()` exist.
    pub fn nr_irqs(&self) -> u32 {
        self.nr_irqs
    }

    pub fn stats(&self) -> VgicStats {
        self.stats
    }

    /// Drives the input line of PPI `intid` of `vcpu`, or of SPI `intid`
    /// (`vcpu` ignored). A level-sensitive interrupt is pending while the line
    /// is high; an edge-triggered one latches pending on a rising edge.
    /// Unknown vCPUs or INTIDs (and SGIs) are ignored.
    pub fn set_level(&mut self, vcpu: usize, intid: u32, level: bool) -> VcpuSet {
        if intid < 16 {
            return VcpuSet::EMPTY;
        }
        match self.irq_mut(vcpu, intid) {
            Some(irq) => {
                let before = (irq.line, irq.latch);
                irq.set_line(level);
                if (irq.line, irq.latch) == before {
                    // Nothing changed: nothing to kick, no refill.
                    return VcpuSet::EMPTY;
                }
            }
            None => return VcpuSet::EMPTY,
        }
        self.touch_for(vcpu, intid);
        self.kicks(vcpu, intid, 1)
    }

    /// Whether `vcpu`'s list registers must be filled again before its next
    /// entry: something changed since its last [`Vgic::fill_lrs`] (a
    /// register write, an injection, a line that moved, an SGI, a sync of
    /// its list registers). When not, the list registers still hold exactly
    /// what the fill chose, provided the backend left them untouched and
    /// did not sync them (it syncs only when the guest changed one): the
    /// entry may skip the fill. Unknown vCPUs always need one (it is empty).
    pub fn fill_needed(&self, vcpu: usize) -> bool {
        self.stale.0.stale(vcpu)
    }

    /// The per-vCPU "fill needed" flags, shared: an entry may read them
    /// without this model's lock ([`FillHints::stale`]). The model sets a
    /// vCPU's flag under its lock before it returns the vCPUs to wake, so
    /// a change made while a vCPU enters is either seen by the entry or
    /// followed by the kick that makes it exit again.
    pub fn fill_hints(&self) -> Arc<FillHints> {
        self.stale.0.clone()
    }

    /// Takes `hints` (an earlier model's, for the same number of vCPUs) as
    /// this model's flags, every vCPU marked as needing a fill: a VM's
    /// restart makes a new model, and its backend keeps the flags it holds.
    /// Flags for another number of vCPUs are refused (`false`).
    pub fn use_fill_hints(&mut self, hints: Arc<FillHints>) -> bool {
        if hints.flags.len() != self.vcpus {
            return false;
        }
        self.stale = StaleFlags(hints);
        self.touch_all();
        true
    }

    /// Marks `vcpu` as needing a fill.
    fn touch(&mut self, vcpu: usize) {
        self.stale.0.set(vcpu, true);
    }

    /// Marks every vCPU as needing a fill (distributor state, routing).
    fn touch_all(&mut self) {
        for v in 0..self.vcpus {
            self.stale.0.set(v, true);
        }
        self.spis_quiet = false;
    }

    /// A change of `intid` (private to `vcpu`, or an SPI any vCPU may get).
    fn touch_for(&mut self, vcpu: usize, intid: u32) {
        if intid < 32 {
            self.touch(vcpu);
        } else {
            self.touch_all();
        }
    }

    /// Makes PPI/SPI `intid` pending as by an edge (or a software set-pending
    /// for a level-sensitive one). `vcpu` names the PPI's vCPU.
    pub fn inject(&mut self, vcpu: usize, intid: u32) -> VcpuSet {
        if intid < 16 {
            return VcpuSet::EMPTY;
        }
        match self.irq_mut(vcpu, intid) {
            Some(irq) => irq.set_pending(),
            None => return VcpuSet::EMPTY,
        }
        self.touch_for(vcpu, intid);
        self.kicks(vcpu, intid, 1)
    }

    /// Links PPI/SPI `intid` to physical INTID `pintid` (list registers get
    /// HW = 1: the guest's deactivation deactivates the physical interrupt),
    /// or unlinks it. Returns false for an unknown vCPU/INTID or a `pintid`
    /// the LR formats cannot carry (GICv3: 13 bits, GICv2: 10 bits).
    pub fn set_hw_mapping(&mut self, vcpu: usize, intid: u32, pintid: Option<u16>) -> bool {
        let limit = match self.version {
            GicVersion::V2 => 1 << 10,
            GicVersion::V3 => 1 << 13,
        };
        if intid < 16 || pintid.is_some_and(|p| p >= limit) {
            return false;
        }
        match self.irq_mut(vcpu, intid) {
            Some(irq) => {
                irq.hw = pintid;
                self.touch_for(vcpu, intid);
                true
            }
            None => false,
        }
    }

    /// Whether `vcpu` has an interrupt to take: pending, enabled, its group
    /// enabled in GICD_CTLR. For WFI: a vCPU with none may block. (The guest's
    /// priority mask is the CPU interface's and is not looked at.)
    pub fn has_pending(&self, vcpu: usize) -> bool {
        let Some(p) = self.private.get(vcpu) else {
            return false;
        };
        p.irqs.iter().any(|irq| self.deliverable(irq))
            || (32..self.nr_irqs).any(|intid| {
                let irq = &self.spis[(intid - 32) as usize];
                self.deliverable(irq) && self.target_of(intid, irq) == Some(vcpu)
            })
    }

    // ---- shared helpers ----

    fn irq(&self, vcpu: usize, intid: u32) -> Option<&Irq> {
        if intid < 32 {
            self.private.get(vcpu).map(|p| &p.irqs[intid as usize])
        } else if intid < self.nr_irqs {
            self.spis.get((intid - 32) as usize)
        } else {
            None
        }
    }

    fn irq_mut(&mut self, vcpu: usize, intid: u32) -> Option<&mut Irq> {
        if intid < 32 {
            self.private
                .get_mut(vcpu)
                .map(|p| p.irq_mut(intid as usize))
        } else if intid < self.nr_irqs {
            self.spis.get_mut((intid - 32) as usize)
        } else {
            None
        }
    }

    fn group_enabled(&self, irq: &Irq) -> bool {
        if irq.group1 {
            self.grp1_enabled
        } else {
            self.grp0_enabled
        }
    }

    /// Pending, enabled, group enabled, and not already in a list register.
    fn deliverable(&self, irq: &Irq) -> bool {
        irq.pending() && irq.enabled && self.group_enabled(irq) && !irq.in_lr
    }

    /// The vCPU SPI `intid` is routed to, by GICD_IROUTER / GICD_ITARGETSR.
    fn spi_route(&self, intid: u32) -> Option<usize> {
        let i = intid.checked_sub(32)? as usize;
        match self.version {
            GicVersion::V3 => {
                let r = *self.irouter.get(i)?;
                if r & IROUTER_IRM != 0 {
                    let awake = (0..self.vcpus).find(|&v| !self.private[v].sleeping);
                    Some(awake.unwrap_or(0))
                } else {
                    let mpidr = (r & 0xFF_FFFF) | (r & (0xFF << 32));
                    vcpu_index_of_mpidr(mpidr, self.vcpus)
                }
            }
            GicVersion::V2 => {
                let mask = *self.targets.get(i)?;
                let first = mask.trailing_zeros() as usize;
                (first < self.vcpus).then_some(first)
            }
        }
    }

    /// Where an SPI goes now: the vCPU holding it (active or in an LR), else its route.
    fn target_of(&self, intid: u32, irq: &Irq) -> Option<usize> {
        if irq.active || irq.in_lr {
            Some(irq.owner as usize)
        } else {
            self.spi_route(intid)
        }
    }

    /// The vCPUs to kick after a change to INTIDs `first..first + count` of
    /// (for SGIs/PPIs) `vcpu`: the targets of those now deliverable, and the
    /// holders of those in flight in a list register.
    fn kicks(&self, vcpu: usize, first: u32, count: u32) -> VcpuSet {
        self.kicks_masked(vcpu, first, u32::MAX >> (32 - count.clamp(1, 32)))
    }

    /// As [`Vgic::kicks`] for the INTIDs `first + b` of each bit `b` set in `bits`.
    fn kicks_masked(&self, vcpu: usize, first: u32, bits: u32) -> VcpuSet {
        let mut set = VcpuSet::EMPTY;
        for b in crate::vcpu::cpuset::set_bits(u64::from(bits)) {
            let intid = first + b as u32;
            let Some(irq) = self.irq(vcpu, intid) else {
                continue;
            };
            let target = if intid < 32 {
                Some(vcpu)
            } else {
                self.target_of(intid, irq)
            };
            if let Some(t) = target {
                if irq.in_lr || self.deliverable(irq) {
                    set.insert(t);
                }
            }
        }
        set
    }

    /// Every vCPU with something to take (after GICD_CTLR or a route change).
    fn kicks_all(&self) -> VcpuSet {
        let mut set = VcpuSet::EMPTY;
        for v in (0..self.vcpus).filter(|&v| self.has_pending(v)) {
            set.insert(v);
        }
        set
    }
}

/// GICD_IROUTER.Interrupt_Routing_Mode: any participating PE.
const IROUTER_IRM: u64 = 1 << 31;
/// The GICD_IROUTER bits that exist: Aff3, IRM, Aff2..Aff0.
const IROUTER_MASK: u64 = 0xFF_8000_0000 | 0xFF_FFFF;

/// GICD_IIDR / GICR_IIDR: ProductID 0x6B ('k'), implementer JEP106 0x43B.
/// (Not 0: Linux applies a HiSilicon erratum to an all-zero IIDR.)
pub const IIDR: u32 = 0x6B00_043B;
