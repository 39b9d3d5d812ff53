//! Per-interrupt state.

/// The state of one interrupt (one INTID on one vCPU for SGIs/PPIs, or one SPI).
///
/// While the interrupt sits in a list register (`in_lr`), its pending and
/// active state belong to the LR: `latch`/`active` here then only record
/// what the distributor changed meanwhile, and `lr_*` what was handed out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Irq {
    pub enabled: bool,
    /// Pending latch: an edge, a software set-pending, an SGI.
    pub latch: bool,
    /// Input line level (level-sensitive interrupts are pending while high).
    pub line: bool,
    pub active: bool,
    /// Edge-triggered (ICFGR bit 2n+1).
    pub edge: bool,
    pub group1: bool,
    /// Priority, masked to [`super::PRIORITY_MASK`].
    pub priority: u8,
    /// Physical INTID the backend linked this interrupt to (LR HW bit).
    pub hw: Option<u16>,
    /// For SPIs: the vCPU that holds it active (or in an LR).
    pub owner: u8,
    pub in_lr: bool,
    /// The LR was given the pending state from `latch` (not only the line).
    pub lr_latch: bool,
    /// The guest cleared the pending state (ICPENDR) while it was in an LR.
    pub lr_pend_cleared: bool,
    /// The guest cleared the active state (ICACTIVER) while it was in an LR.
    pub lr_active_cleared: bool,
    /// The state the LR was filled with (for reads while it is in flight).
    pub lr_pending: bool,
    pub lr_active: bool,
}

impl Irq {
    /// A fresh SGI: edge-triggered, everything else zero.
    pub const fn sgi() -> Irq {
        Irq {
            enabled: false,
            latch: false,
            line: false,
            active: false,
            edge: true,
            group1: false,
            priority: 0,
            hw: None,
            owner: 0,
            in_lr: false,
            lr_latch: false,
            lr_pend_cleared: false,
            lr_active_cleared: false,
            lr_pending: false,
            lr_active: false,
        }
    }

    /// Pending in the model (not counting a copy in flight in an LR).
    pub fn pending(&self) -> bool {
        self.latch || (!self.edge && self.line)
    }

    /// Pending as the guest reads it through ISPENDR.
    pub fn pending_view(&self) -> bool {
        self.pending() || (self.in_lr && self.lr_pending && !self.lr_pend_cleared)
    }

    /// Active as the guest reads it through ISACTIVER.
    pub fn active_view(&self) -> bool {
        self.active || (self.in_lr && self.lr_active && !self.lr_active_cleared)
    }

    /// Sets the pending latch (ISPENDR, an injected edge).
    pub fn set_pending(&mut self) {
        self.latch = true;
        self.lr_pend_cleared = false;
    }

    /// Clears the pending latch (ICPENDR), including the copy in an LR.
    pub fn clear_pending(&mut self) {
        self.latch = false;
        if self.in_lr {
            self.lr_pend_cleared = true;
        }
    }

    pub fn set_active(&mut self, active: bool) {
        self.active = active;
        if self.in_lr && !active {
            self.lr_active_cleared = true;
        }
    }

    /// Drives the input line; a rising edge latches an edge-triggered interrupt.
    pub fn set_line(&mut self, level: bool) {
        if self.edge && level && !self.line {
            self.set_pending();
        }
        self.line = level;
    }
}

/// One vCPU's private interrupts (SGIs 0-15, PPIs 16-31) and redistributor.
#[derive(Clone, Debug)]
pub(crate) struct Private {
    pub irqs: [Irq; 32],
    /// GICv2: per SGI, the source vCPUs whose request is pending (bit = source).
    pub sgi_sources: [u8; 16],
    /// GICv2: per SGI, the source of the instance the guest holds active.
    pub sgi_active_source: [u8; 16],
    /// GICR_WAKER.ProcessorSleep (ChildrenAsleep follows it at once).
    pub sleeping: bool,
    /// What the last `fill_lrs` handed out: (INTID, SGI source, state).
    pub in_lr: heapless::Vec<(u32, u8, super::LrState), { super::MAX_LRS }>,
    /// A bit per INTID whose state may have changed since a fill last
    /// found it idle (neither latched, line high nor active): set by every
    /// mutable access ([`Private::irq_mut`] or a split borrow that sets it
    /// by hand), cleared by the fill's scan, which looks at these only.
    pub maybe_busy: u32,
}

impl Private {
    pub fn new() -> Self {
        let mut irqs = [Irq::default(); 32];
        for irq in irqs.iter_mut().take(16) {
            *irq = Irq::sgi();
        }
        Private {
            irqs,
            sgi_sources: [0; 16],
            sgi_active_source: [0; 16],
            sleeping: true,
            in_lr: heapless::Vec::new(),
            maybe_busy: 0,
        }
    }

    /// INTID `i` (< 32) to change: marked for the next fill's scan.
    pub fn irq_mut(&mut self, i: usize) -> &mut Irq {
        self.maybe_busy |= 1 << (i & 31);
        &mut self.irqs[i]
    }
}
