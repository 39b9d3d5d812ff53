//! The list-register interface: what to load before a guest entry, folding
//! the state back after an exit, and the `ICH_LR<n>_EL2` / `GICH_LR<n>`
//! encodings.

use super::state::Irq;
use super::{GicVersion, Vgic};

/// The most list registers the model fills (ICH_VTR_EL2 allows 16).
pub const MAX_LRS: usize = 16;

/// A list register's state field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LrState {
    /// Empty, or the guest has deactivated the interrupt: done.
    Invalid,
    Pending,
    Active,
    PendingActive,
}

impl LrState {
    const fn bits(self) -> u64 {
        match self {
            LrState::Invalid => 0,
            LrState::Pending => 1,
            LrState::Active => 2,
            LrState::PendingActive => 3,
        }
    }

    const fn from_bits(bits: u64) -> LrState {
        match bits & 3 {
            0 => LrState::Invalid,
            1 => LrState::Pending,
            2 => LrState::Active,
            _ => LrState::PendingActive,
        }
    }

    const fn of(pending: bool, active: bool) -> LrState {
        match (pending, active) {
            (false, false) => LrState::Invalid,
            (true, false) => LrState::Pending,
            (false, true) => LrState::Active,
            (true, true) => LrState::PendingActive,
        }
    }

    pub const fn is_pending(self) -> bool {
        matches!(self, LrState::Pending | LrState::PendingActive)
    }

    pub const fn is_active(self) -> bool {
        matches!(self, LrState::Active | LrState::PendingActive)
    }
}

/// One list register's content, in plain fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LrEntry {
    /// The virtual INTID.
    pub intid: u32,
    /// The priority (GICH_LR keeps bits [7:3]).
    pub priority: u8,
    pub group1: bool,
    pub state: LrState,
    /// GICv2 SGIs: the requesting vCPU (CPUID field). 0 otherwise.
    pub source_cpu: u8,
    /// Hardware interrupt: deactivation also deactivates `pintid`.
    pub hw: bool,
    pub pintid: u16,
    /// Ask for a maintenance interrupt when the guest deactivates it (HW = 0
    /// only): set for level-sensitive interrupts (re-check the line) and when
    /// the interrupt blocks others from the list registers.
    pub eoi_maintenance: bool,
}

const ICH_LR_GROUP: u64 = 1 << 60;
const ICH_LR_HW: u64 = 1 << 61;
const ICH_LR_EOI: u64 = 1 << 41;
const GICH_LR_GRP1: u32 = 1 << 30;
const GICH_LR_HW: u32 = 1 << 31;
const GICH_LR_EOI: u32 = 1 << 19;

impl LrEntry {
    /// Encodes for ICH_LR<n>_EL2: vINTID [31:0], pINTID [44:32] (HW = 1) or
    /// EOI [41] (HW = 0), priority [55:48], Group [60], HW [61], State [63:62].
    pub const fn to_ich_lr(&self) -> u64 {
        let mut v = self.intid as u64 | (self.priority as u64) << 48 | self.state.bits() << 62;
        if self.group1 {
            v |= ICH_LR_GROUP;
        }
        if self.hw {
            v |= ICH_LR_HW | ((self.pintid as u64) & 0x1FFF) << 32;
        } else if self.eoi_maintenance {
            v |= ICH_LR_EOI;
        }
        v
    }

    /// Decodes an ICH_LR<n>_EL2 value.
    pub const fn from_ich_lr(v: u64) -> LrEntry {
        let hw = v & ICH_LR_HW != 0;
        LrEntry {
            intid: v as u32,
            priority: (v >> 48) as u8,
            group1: v & ICH_LR_GROUP != 0,
            state: LrState::from_bits(v >> 62),
            source_cpu: 0,
            hw,
            pintid: if hw { ((v >> 32) & 0x1FFF) as u16 } else { 0 },
            eoi_maintenance: !hw && v & ICH_LR_EOI != 0,
        }
    }

    /// Encodes for GICH_LR<n>: VirtualID [9:0], PhysicalID [19:10] (HW = 1)
    /// or CPUID [12:10] and EOI [19] (HW = 0), Priority [27:23] (bits [7:3]),
    /// State [29:28], Grp1 [30], HW [31].
    pub const fn to_gich_lr(&self) -> u32 {
        let mut v = (self.intid & 0x3FF)
            | ((self.priority as u32) >> 3) << 23
            | (self.state.bits() as u32) << 28;
        if self.group1 {
            v |= GICH_LR_GRP1;
        }
        if self.hw {
            v |= GICH_LR_HW | ((self.pintid as u32) & 0x3FF) << 10;
        } else {
            v |= ((self.source_cpu as u32) & 7) << 10;
            if self.eoi_maintenance {
                v |= GICH_LR_EOI;
            }
        }
        v
    }

    /// Decodes a GICH_LR<n> value.
    pub const fn from_gich_lr(v: u32) -> LrEntry {
        let hw = v & GICH_LR_HW != 0;
        LrEntry {
            intid: v & 0x3FF,
            priority: (((v >> 23) & 0x1F) << 3) as u8,
            group1: v & GICH_LR_GRP1 != 0,
            state: LrState::from_bits((v >> 28) as u64),
            source_cpu: if hw { 0 } else { ((v >> 10) & 7) as u8 },
            hw,
            pintid: if hw { ((v >> 10) & 0x3FF) as u16 } else { 0 },
            eoi_maintenance: !hw && v & GICH_LR_EOI != 0,
        }
    }
}

/// What to load into the list registers before a guest entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrFill {
    /// Load these into LR 0.. and make the remaining list registers invalid.
    pub lrs: heapless::Vec<LrEntry, MAX_LRS>,
    /// A deliverable interrupt did not fit.
    pub overflow: bool,
    /// Set ICH_HCR_EL2.NPIE / GICH_HCR.NPIE: the guest will take the pending
    /// entries, and the exit when none is left pending lets the rest in.
    /// Only set when some entry is in the Pending state (not
    /// pending+active); otherwise every non-HW entry carries
    /// `eoi_maintenance`, so the rest get in when the guest deactivates one.
    pub npie: bool,
}

/// A candidate for a list register, ordered: active first (the guest holds
/// them), then by priority (lower value first), then INTID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    inactive: bool,
    priority: u8,
    intid: u32,
    /// Has a deliverable pending part.
    pending: bool,
}

impl Vgic {
    /// Whether `irq`'s pending part may go to a list register now. An active
    /// level-sensitive interrupt adds only its latch: its line is looked at
    /// again when the guest deactivates it.
    fn pending_part(&self, irq: &Irq) -> bool {
        let pending = if irq.active { irq.latch } else { irq.pending() };
        pending && irq.enabled && self.group_enabled(irq) && !irq.in_lr
    }

    fn candidate(&self, intid: u32, irq: &Irq) -> Option<Candidate> {
        let pending = self.pending_part(irq);
        (irq.active || pending).then_some(Candidate {
            inactive: !irq.active,
            priority: irq.priority,
            intid,
            pending,
        })
    }

    /// Chooses what `vcpu` gets in its `nr_lrs` list registers: the active
    /// interrupts it holds, then its highest-priority deliverable pending
    /// ones. What is chosen is "in flight" until [`Vgic::sync_lrs`]: it is
    /// not handed out again. Call before every guest entry; an unknown vCPU
    /// gets nothing.
    pub fn fill_lrs(&mut self, vcpu: usize, nr_lrs: usize) -> LrFill {
        let mut fill = LrFill::default();
        self.fill_lrs_into(vcpu, nr_lrs, &mut fill);
        fill
    }

    /// [`Vgic::fill_lrs`] into `fill` (reset first): the entry's path, where
    /// returning the fixed-capacity result copied all of it.
    pub fn fill_lrs_into(&mut self, vcpu: usize, nr_lrs: usize, fill: &mut LrFill) {
        fill.lrs.clear();
        fill.overflow = false;
        fill.npie = false;
        if vcpu >= self.vcpus {
            return;
        }
        if !self.private[vcpu].in_lr.is_empty() {
            // The last fill was never synced: take it back as it was handed out.
            self.sync_lrs(vcpu, &[]);
        }
        let n = nr_lrs.min(MAX_LRS);
        let mut chosen: heapless::Vec<Candidate, MAX_LRS> = heapless::Vec::new();
        let mut offer = |c: Candidate, overflow: &mut bool| {
            let at = chosen.iter().position(|x| c < *x).unwrap_or(chosen.len());
            if at >= n {
                *overflow |= c.pending;
                return;
            }
            if chosen.len() == n {
                if let Some(out) = chosen.pop() {
                    *overflow |= out.pending;
                }
            }
            // Cannot fail: there is room now. Appending (the common case:
            // one candidate, or candidates met in order) needs no move,
            // which `insert` made a call to `memmove` even for nothing.
            if at == chosen.len() {
                let _ = chosen.push(c);
            } else {
                let _ = chosen.insert(at, c);
            }
        };
        // Only the INTIDs touched since a scan found them idle (neither
        // pending, by latch or line, nor active): most are, and a scan of
        // all 32 was about 300 instructions of every fill.
        let p = &self.private[vcpu];
        let mut idle = 0u32;
        let mut bits = p.maybe_busy;
        while bits != 0 {
            let intid = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let irq = &p.irqs[intid];
            if !(irq.latch || irq.line || irq.active) {
                idle |= 1 << intid;
                continue;
            }
            if let Some(c) = self.candidate(intid as u32, irq) {
                offer(c, &mut fill.overflow);
            }
        }
        #[cfg(test)]
        for (i, irq) in p.irqs.iter().enumerate() {
            assert!(
                p.maybe_busy & (1 << i) != 0 || !(irq.latch || irq.line || irq.active),
                "INTID {i} of vCPU {vcpu} changed without its maybe_busy bit"
            );
        }
        self.private[vcpu].maybe_busy &= !idle;
        // SPIs: skipped while none is pending, active or in a list register
        // anywhere (what the last scan found, until an SPI changes).
        let mut spis_busy = false;
        if !self.spis_quiet {
            for (i, irq) in self.spis.iter().enumerate() {
                spis_busy |= irq.active || irq.pending() || irq.in_lr;
                let intid = 32 + i as u32;
                if !(irq.active || self.pending_part(irq))
                    || self.target_of(intid, irq) != Some(vcpu)
                {
                    continue;
                }
                if let Some(c) = self.candidate(intid, irq) {
                    offer(c, &mut fill.overflow);
                }
            }
        }
        // By index: moving the fixed-capacity vector into an iterator
        // copied all of it.
        for &c in chosen.iter() {
            let entry = self.take_for_lr(vcpu, c);
            let _ = self.private[vcpu]
                .in_lr
                .push((entry.intid, entry.source_cpu, entry.state));
            let _ = fill.lrs.push(entry);
        }
        if fill.overflow {
            // NPIE's maintenance interrupt is asserted while no list register
            // is in the Pending state (0b01: pending+active does not count),
            // so it is only useful, and only safe, when some entry is purely
            // pending: with every entry active or pending+active it would
            // fire at once on every entry and no guest instruction would run
            // in between (a guest with interrupts masked could hold a pCPU in
            // that loop for good). Then the entries ask to hear of their
            // deactivation instead, which takes the guest's own progress.
            fill.npie = fill.lrs.iter().any(|e| e.state == LrState::Pending);
            if !fill.npie {
                for e in fill.lrs.iter_mut().filter(|e| !e.hw) {
                    e.eoi_maintenance = true;
                }
            }
        }
        // Taking back an unsynced fill above marked it stale: it is fresh now.
        self.stale.0.set(vcpu, false);
        if !spis_busy {
            self.spis_quiet = true;
        }
    }

    /// Moves the chosen interrupt's state into a list register entry.
    fn take_for_lr(&mut self, vcpu: usize, c: Candidate) -> LrEntry {
        let v2_sgi = self.version == GicVersion::V2 && c.intid < 16;
        let p = &mut self.private[vcpu];
        let (irq, sgi_sources, sgi_active) = if c.intid < 32 {
            let i = c.intid as usize;
            let sgi = i & 15;
            p.maybe_busy |= 1 << i;
            (
                &mut p.irqs[i],
                &mut p.sgi_sources[sgi],
                &mut p.sgi_active_source[sgi],
            )
        } else {
            let irq = &mut self.spis[(c.intid - 32) as usize];
            (irq, &mut 0, &mut 0)
        };
        let active = irq.active;
        // Hardware interrupts cannot be pending and active in an LR.
        let mut pending = c.pending && !(active && irq.hw.is_some());
        let mut source = 0;
        let mut eoi = false;
        if v2_sgi {
            if active {
                // Only the active source's instance shares the entry.
                source = *sgi_active;
                pending &= *sgi_sources & (1 << source) != 0;
            } else {
                source = sgi_sources.trailing_zeros() as u8 & 7;
            }
            if pending {
                *sgi_sources &= !(1 << source);
                irq.latch = *sgi_sources != 0;
            }
            // Other sources wait for this instance: hear of its end.
            eoi = *sgi_sources != 0;
        } else if pending {
            irq.lr_latch = irq.latch;
            irq.latch = false;
            eoi = !irq.edge;
        }
        if active && !irq.edge {
            eoi = true;
        }
        irq.in_lr = true;
        irq.owner = vcpu as u8;
        irq.active = false;
        irq.lr_pending = pending;
        irq.lr_active = active;
        irq.lr_pend_cleared = false;
        irq.lr_active_cleared = false;
        LrEntry {
            intid: c.intid,
            priority: irq.priority,
            group1: irq.group1,
            state: LrState::of(pending, active),
            source_cpu: source,
            hw: irq.hw.is_some(),
            pintid: irq.hw.unwrap_or(0),
            eoi_maintenance: eoi && irq.hw.is_none(),
        }
    }

    /// Folds back `vcpu`'s list registers after an exit: `lrs` holds what
    /// [`Vgic::fill_lrs`] handed out with the state read back (in any order;
    /// an entry left out counts as unchanged). Invalid = the guest is done
    /// with it; still pending or active = it returns to the model (a level
    /// interrupt whose line is still high is pending again). Call after
    /// every exit, before handling it.
    pub fn sync_lrs(&mut self, vcpu: usize, lrs: &[LrEntry]) {
        let v2 = self.version == GicVersion::V2;
        self.touch(vcpu);
        if self
            .private
            .get(vcpu)
            .is_some_and(|p| p.in_lr.iter().any(|e| e.0 >= 32))
        {
            // An SPI comes back from a list register.
            self.spis_quiet = false;
        }
        let Some(p) = self.private.get_mut(vcpu) else {
            return;
        };
        // Walked in place and cleared after (taking the fixed-capacity
        // vector out copied all of it); nothing below reads `in_lr`.
        for k in 0..p.in_lr.len() {
            let (intid, source, filled) = self.private[vcpu].in_lr[k];
            let v2_sgi = v2 && intid < 16;
            let state = lrs
                .iter()
                .find(|e| e.intid == intid && (!v2_sgi || e.source_cpu == source))
                .map_or(filled, |e| e.state);
            let p = &mut self.private[vcpu];
            let (irq, sgi_sources, sgi_active) = if intid < 32 {
                let i = intid as usize;
                let sgi = i & 15;
                p.maybe_busy |= 1 << i;
                (
                    &mut p.irqs[i],
                    &mut p.sgi_sources[sgi],
                    &mut p.sgi_active_source[sgi],
                )
            } else if let Some(irq) = self.spis.get_mut((intid - 32) as usize) {
                (irq, &mut 0, &mut 0)
            } else {
                continue;
            };
            if !irq.in_lr {
                continue;
            }
            let pending = state.is_pending() && !irq.lr_pend_cleared;
            let active = state.is_active() && !irq.lr_active_cleared;
            if v2_sgi {
                if pending {
                    *sgi_sources |= 1 << (source & 7);
                    irq.latch = true;
                }
                if active {
                    *sgi_active = source & 7;
                }
            } else if pending {
                irq.latch |= irq.lr_latch;
            }
            irq.active |= active;
            irq.in_lr = false;
            irq.lr_latch = false;
            irq.lr_pending = false;
            irq.lr_active = false;
            irq.lr_pend_cleared = false;
            irq.lr_active_cleared = false;
        }
        self.private[vcpu].in_lr.clear();
    }
}
