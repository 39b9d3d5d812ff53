//! Lazy FP/SIMD ownership engine.
//!
//! The FP/SIMD register file is big (arm64: 32 x 128 bits; LoongArch LASX:
//! 32 x 256 bits) and most vCPU switches do not need it switched: most vCPUs
//! use FP rarely. The engine decides, per physical CPU, when to save and
//! restore it; the architecture only supplies the register moves and the trap
//! control through [`FpHw`] (arm64: `CPTR_EL2.TFP`, EC 0x07; LoongArch:
//! `EUEN.FPE/SXE/ASXE`, FPD/SXD/ASXD). kestrel itself never uses FP registers
//! (softfloat targets), so the unit only ever holds guest state.
//!
//! # Policies ([`FpPolicy`])
//!
//! * `Eager`: restore on every `vcpu_load`, save on every `vcpu_put`, never
//!   trap (what Xen and rust-shyper do; the baseline).
//! * `SaveOnPut`: trap on the first FP use after `vcpu_load`, restore then,
//!   and save on `vcpu_put` if it was restored (the arm KVM scheme of seed 003).
//! * `Lazy` (default): like `SaveOnPut` but `vcpu_put` does not save. The
//!   registers stay live in the unit, owned by their vCPU, until another vCPU
//!   traps on that pCPU (then the owner's state is saved first) or the owner
//!   wants to run on another pCPU. Re-loading the owner on the same pCPU costs
//!   nothing.
//!
//! # Wide state (arm64 SVE)
//!
//! One ownership covers the unit whatever its width: on arm64 the V
//! registers are the low 128 bits of the SVE Z registers. The hardware layer
//! keeps a vCPU's state in memory in one of two forms: narrow (FP/SIMD
//! only: every bit beyond is zero) or wide (SVE: Z, P, FFR at the VM's vector
//! length). [`FpHw::restore`] loads the form memory holds; an SVE
//! instruction of a narrow owner traps ([`FpEngine::wide_trap`]) and
//! [`FpHw::widen`] turns the live narrow registers into the wide form in
//! place; [`FpHw::save`] writes back the form the unit holds. So a vCPU
//! whose state is narrow and that used only FP since its load costs an
//! FP-sized save and restore. [`FpHw::wide`] tells the engine which size
//! it moved, for the statistics.
//!
//! # Invariants
//!
//! * A vCPU's up-to-date FP state is in exactly one place: either its
//!   [`VcpuFp`] memory or the unit of the pCPU recorded in its `live_on`
//!   (and that pCPU's engine has it as `owner`).
//! * FP traps are disabled on a pCPU only while the loaded vCPU is the owner,
//!   so a guest never reads another vCPU's registers.
//!
//! # Migration
//!
//! Only the pCPU holding the registers can save them. When a vCPU whose state
//! is live on pCPU `p` is loaded elsewhere, [`FpEngine::vcpu_load`] refuses
//! with [`FpLoad::LiveOn`]`(p)`: the caller asks `p` (IPI, or its own
//! scheduler when it pushes the vCPU away) to run [`FpEngine::vcpu_migrate`]
//! for that vCPU, then loads again. A scheduler that migrates from the source
//! pCPU can call `vcpu_migrate` right after `vcpu_put` and never see `LiveOn`.
//!
//! # How the arch calls it
//!
//! ```text
//! per pCPU:  engine = FpEngine::new(cpu, policy, ArchFpHw)
//! per vCPU:  fp = Arc::new(VcpuFp::new(ArchFpState::default()))
//! switch in: while let FpLoad::LiveOn(p) = engine.vcpu_load(&fp) { ask p: vcpu_migrate(&fp) }
//! FP trap:   engine.fp_trap()           // then return to the guest, retrying the instruction
//! switch out: engine.vcpu_put()
//! ```

use crate::base::sync::{AtomicUsize, Mutex, Ordering};
use alloc::boxed::Box;
use alloc::sync::Arc;

use crate::vcpu::stats::{Counter, Stats};

pub mod pcpu;

#[cfg(test)]
mod tests;

/// When FP/SIMD state is switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FpPolicy {
    /// Save and restore on every switch.
    Eager,
    /// Restore on first use, save on `vcpu_put`.
    SaveOnPut,
    /// Restore on first use, save only when another vCPU needs the unit.
    #[default]
    Lazy,
}

impl FpPolicy {
    /// Parse a boot-time choice: `eager`, `save-on-put` or `lazy`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "eager" => Some(Self::Eager),
            "save-on-put" | "saveonput" => Some(Self::SaveOnPut),
            "lazy" => Some(Self::Lazy),
            _ => None,
        }
    }
}

/// The FP unit of the current pCPU, as the architecture drives it.
pub trait FpHw {
    /// The register file as saved in memory.
    type State;
    /// Copy the unit's registers into `into`.
    fn save(&mut self, into: &mut Self::State);
    /// Load the unit's registers from `from`.
    fn restore(&mut self, from: &Self::State);
    /// Make guest FP/SIMD use trap to the hypervisor.
    fn trap_on(&mut self);
    /// Let the guest use FP/SIMD directly (and the wide registers too
    /// when the unit holds them: [`FpHw::wide`]).
    fn trap_off(&mut self);
    /// Whether the unit holds its owner's registers in their wide form
    /// (arm64: SVE). Architectures without one never do.
    fn wide(&self) -> bool {
        false
    }
    /// The owner, whose registers the unit holds narrow, needs the wide
    /// form (an SVE instruction trapped): make the unit hold it in place,
    /// every wide-only bit zero and the wide controls from `state`.
    fn widen(&mut self, _state: &Self::State) {}
}

/// No pCPU holds the state: memory is current.
const NOWHERE: usize = usize::MAX;

/// A vCPU's FP/SIMD state, shared (through `Arc`) between the engines.
#[derive(Debug)]
pub struct VcpuFp<S> {
    state: Mutex<S>,
    /// pCPU whose unit holds newer registers than `state`, or `NOWHERE`.
    live_on: AtomicUsize,
    /// Where this vCPU's saves, restores and traps are counted (its VM's
    /// statistics). A VM's counters move only with its own vCPUs' doing:
    /// its traps, the restores they cause, the saves of its registers at
    /// its own puts and moves or caused by another of its vCPUs. A save of
    /// its registers that another VM's trap caused on the same pCPU is a
    /// host event ([`crate::vcpu::stats::HOST`]): counted in neither VM,
    /// so neither learns through its counters what the other does.
    account: Option<Arc<Stats>>,
}

impl<S> VcpuFp<S> {
    /// A vCPU whose FP registers start as `initial` (moves not counted).
    pub fn new(initial: S) -> Self {
        Self {
            state: Mutex::new(initial),
            live_on: AtomicUsize::new(NOWHERE),
            account: None,
        }
    }

    /// A vCPU whose FP registers start as `initial` and whose register
    /// moves are counted in `stats` (its VM's `FpSaves`, `FpRestores`,
    /// `FpTraps`).
    pub fn counted(initial: S, stats: Arc<Stats>) -> Self {
        Self {
            account: Some(stats),
            ..Self::new(initial)
        }
    }

    fn count(&self, c: Counter) {
        if let Some(s) = &self.account {
            s.inc(c);
        }
    }

    /// Whether `other`'s moves are counted in the same VM's statistics.
    fn same_vm(&self, other: &Self) -> bool {
        match (&self.account, &other.account) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Counts a save of this vCPU's registers that `cause`'s FP use made
    /// (`None`: its own put or move).
    fn count_save(&self, cause: Option<&Self>, wide: bool) {
        let counters: &[Counter] = if wide {
            &[Counter::FpSaves, Counter::SveSaves]
        } else {
            &[Counter::FpSaves]
        };
        for &c in counters {
            match cause {
                Some(o) if self.account.is_some() && !self.same_vm(o) => {
                    crate::vcpu::stats::HOST.inc(c)
                }
                _ => self.count(c),
            }
        }
    }

    /// The pCPU whose unit holds this vCPU's registers, if any.
    pub fn live_on(&self) -> Option<usize> {
        match self.live_on.load(Ordering::Acquire) {
            NOWHERE => None,
            p => Some(p),
        }
    }

    /// Run `f` on the saved state; `None` if the registers are live in some
    /// unit (the memory copy is stale then).
    pub fn with_saved<R>(&self, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        if self.live_on().is_some() {
            return None;
        }
        Some(f(&mut self.state.lock()))
    }
}

/// Result of [`FpEngine::vcpu_load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum FpLoad {
    /// Loaded; the vCPU may run.
    Ready,
    /// Not loaded: the registers are live on this other pCPU, which must run
    /// [`FpEngine::vcpu_migrate`] for the vCPU first.
    LiveOn(usize),
}

/// Per-pCPU counters (every vCPU's moves on this pCPU: for the host's
/// benchmarks and logs, never for a guest; see [`VcpuFp::counted`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FpCounters {
    /// Register file saves.
    pub saves: u64,
    /// Register file restores.
    pub restores: u64,
    /// FP traps taken.
    pub traps: u64,
    /// Of the saves, those of the wide form (arm64 SVE).
    pub wide_saves: u64,
    /// Of the restores, those of the wide form.
    pub wide_restores: u64,
    /// Of the traps, those of wide instructions (arm64 SVE, EC 0x19).
    pub wide_traps: u64,
}

/// The FP/SIMD engine of one pCPU. Only that pCPU touches it.
pub struct FpEngine<H: FpHw> {
    cpu: usize,
    policy: FpPolicy,
    hw: H,
    /// The vCPU loaded on this pCPU.
    current: Option<Arc<VcpuFp<H::State>>>,
    /// The vCPU whose registers are live in the unit.
    owner: Option<Arc<VcpuFp<H::State>>>,
    counters: FpCounters,
}

impl<H: FpHw> FpEngine<H> {
    /// The engine of pCPU `cpu`. Traps FP until a vCPU owns the unit.
    pub fn new(cpu: usize, policy: FpPolicy, mut hw: H) -> Self {
        assert!(cpu != NOWHERE);
        hw.trap_on();
        Self {
            cpu,
            policy,
            hw,
            current: None,
            owner: None,
            counters: FpCounters::default(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> FpPolicy {
        self.policy
    }

    /// Counters since boot.
    pub fn counters(&self) -> FpCounters {
        self.counters
    }

    /// The hardware interface (tests and diagnostics).
    pub fn hw(&self) -> &H {
        &self.hw
    }

    /// `vcpu` is about to run on this pCPU.
    pub fn vcpu_load(&mut self, vcpu: &Arc<VcpuFp<H::State>>) -> FpLoad {
        match vcpu.live_on.load(Ordering::Acquire) {
            NOWHERE => {}
            p if p == self.cpu => {}
            p => return FpLoad::LiveOn(p),
        }
        debug_assert!(self.current.is_none(), "vcpu_load without vcpu_put");
        self.current = Some(vcpu.clone());
        match self.policy {
            FpPolicy::Eager => self.take_unit(false),
            FpPolicy::SaveOnPut => self.hw.trap_on(),
            // Still ours from last time: nothing to do, no trap.
            FpPolicy::Lazy if self.owns(vcpu) => self.hw.trap_off(),
            FpPolicy::Lazy => self.hw.trap_on(),
        }
        FpLoad::Ready
    }

    /// The loaded vCPU used FP/SIMD with traps on. Afterwards the unit holds
    /// its registers and traps are off: return and retry the instruction.
    pub fn fp_trap(&mut self) {
        self.counters.traps += 1;
        if let Some(cur) = &self.current {
            cur.count(Counter::FpTraps);
        }
        self.take_unit(false);
    }

    /// The loaded vCPU used a wide instruction (arm64: SVE, or its control
    /// register ZCR_EL1) while the unit was not its or held it narrow.
    /// Afterwards the unit holds its wide registers and traps are off.
    /// Counted as an FP trap and a wide one.
    pub fn wide_trap(&mut self) {
        self.counters.traps += 1;
        self.counters.wide_traps += 1;
        if let Some(cur) = &self.current {
            cur.count(Counter::FpTraps);
            cur.count(Counter::SveTraps);
        }
        self.take_unit(true);
    }

    /// The loaded vCPU stops running on this pCPU.
    pub fn vcpu_put(&mut self) {
        let Some(vcpu) = self.current.take() else {
            return;
        };
        match self.policy {
            FpPolicy::Eager | FpPolicy::SaveOnPut => {
                if self.owns(&vcpu) {
                    self.save_owner(None);
                }
            }
            // Why keep it live: if nobody else on this pCPU uses FP before it
            // comes back, both the save and the restore are saved.
            FpPolicy::Lazy => {}
        }
        // The next vCPU's load sets the trap as it needs; until then no guest runs.
        self.hw.trap_on();
    }

    /// Run on the pCPU that holds `vcpu`'s registers (the one named by
    /// [`FpLoad::LiveOn`], or the source pCPU of a migration): write them
    /// back so the vCPU can run anywhere. Returns whether a save happened.
    /// The vCPU must not be running here.
    pub fn vcpu_migrate(&mut self, vcpu: &VcpuFp<H::State>) -> bool {
        if !self.owns(vcpu) {
            return false;
        }
        if self
            .current
            .as_deref()
            .is_some_and(|c| core::ptr::eq(c, vcpu))
        {
            // Defensive: it is still loaded here, make its next use trap back in.
            self.hw.trap_on();
        }
        self.save_owner(None);
        true
    }

    fn owns(&self, vcpu: &VcpuFp<H::State>) -> bool {
        self.owner
            .as_deref()
            .is_some_and(|o| core::ptr::eq(o, vcpu))
    }

    /// Give the unit to the current vCPU (saving the previous owner's
    /// state), in its wide form if `wide`.
    fn take_unit(&mut self, wide: bool) {
        let Some(cur) = self.current.clone() else {
            // A trap with no vCPU loaded cannot come from a guest: keep trapping.
            self.hw.trap_on();
            return;
        };
        if !self.owns(&cur) {
            if self.owner.is_some() {
                self.save_owner(Some(&cur));
            }
            self.hw.restore(&cur.state.lock());
            self.counters.restores += 1;
            cur.count(Counter::FpRestores);
            if self.hw.wide() {
                self.counters.wide_restores += 1;
                cur.count(Counter::SveRestores);
            }
            cur.live_on.store(self.cpu, Ordering::Release);
            self.owner = Some(cur.clone());
        }
        if wide && !self.hw.wide() {
            self.hw.widen(&cur.state.lock());
        }
        self.hw.trap_off();
    }

    /// Writes the owner's registers back. `cause`: the vCPU whose FP use
    /// needs the unit (`None`: the owner's own put or move).
    fn save_owner(&mut self, cause: Option<&VcpuFp<H::State>>) {
        if let Some(owner) = self.owner.take() {
            let wide = self.hw.wide();
            self.hw.save(&mut owner.state.lock());
            self.counters.saves += 1;
            if wide {
                self.counters.wide_saves += 1;
            }
            owner.count_save(cause, wide);
            // Release: the saved registers are visible before another pCPU
            // sees `live_on` cleared and restores them.
            owner.live_on.store(NOWHERE, Ordering::Release);
        }
    }
}

/// arm64 FP/SIMD state: V0-V31, FPSR, FPCR (AArch64 guests), and the SVE
/// state of a vCPU whose VM has SVE.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[repr(C, align(16))]
pub struct Arm64FpState {
    /// V0-V31 (128 bits each); stale while `sve` holds the wide form.
    pub v: [u128; 32],
    /// FPSR.
    pub fpsr: u64,
    /// FPCR.
    pub fpcr: u64,
    /// The SVE registers (`None`: the VM has no SVE).
    pub sve: Option<Box<Arm64SveState>>,
}

impl Arm64FpState {
    /// The reset state of a vCPU of a VM with SVE at `vq` quadwords
    /// (`None`: without SVE). Every register is zero, ZCR_EL1 allows the
    /// VM's whole length.
    pub fn new(vq: Option<u8>) -> Self {
        Self {
            sve: vq.map(|vq| Box::new(Arm64SveState::new(vq))),
            ..Self::default()
        }
    }
}

/// The longest SVE vector length in `supported` (bit `vq - 1` for `vq`
/// quadwords, as the arm64 backend probes them through ZCR_EL2) of at most
/// `max_bits`, in quadwords; `None` if there is none (no SVE). ZCR_EL2.LEN
/// = `vq - 1` then gives exactly this length: a LEN the CPU does not
/// support gives the longest supported length below it.
pub fn sve_vq_for(supported: u16, max_bits: u16) -> Option<u8> {
    let cap = (max_bits / 128).min(16);
    (1..=cap)
        .rev()
        .find(|vq| supported & (1 << (vq - 1)) != 0)
        .map(|vq| vq as u8)
}

/// The SVE registers of one vCPU, at its VM's vector length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm64SveState {
    /// The VM's vector length in quadwords (128 bits), 1..=16.
    pub vq: u8,
    /// Which form memory holds: wide (`regs` current, including the V
    /// registers as the low 128 bits of Z) or narrow (the V registers in
    /// [`Arm64FpState::v`], every other bit of `regs` zero).
    pub wide: bool,
    /// ZCR_EL1: the guest's own choice of length, at most the VM's.
    pub zcr_el1: u64,
    /// Z0-Z31 (`vq` quadwords each), then P0-P15 and FFR (`2 * vq` bytes
    /// each), laid out as `str z`/`str p` with `mul vl` offsets store them.
    pub regs: Box<[u128]>,
}

impl Arm64SveState {
    /// Zeroed registers at `vq` quadwords (clamped to 1..=16).
    pub fn new(vq: u8) -> Self {
        let vq = vq.clamp(1, 16);
        Self {
            vq,
            wide: false,
            zcr_el1: u64::from(vq - 1),
            regs: alloc::vec![0u128; Self::quads(vq)].into_boxed_slice(),
        }
    }

    /// Bytes of the 32 Z registers at `vq` quadwords.
    pub const fn z_bytes(vq: u8) -> usize {
        32 * 16 * vq as usize
    }

    /// Bytes of P0-P15 and FFR at `vq` quadwords.
    pub const fn p_bytes(vq: u8) -> usize {
        17 * 2 * vq as usize
    }

    /// 128-bit words of [`Arm64SveState::regs`] at `vq` quadwords.
    pub const fn quads(vq: u8) -> usize {
        (Self::z_bytes(vq) + Self::p_bytes(vq)).div_ceil(16)
    }

    /// Quadword `q` of Z register `n` (tests and the narrowing check).
    pub fn z(&self, n: usize, q: usize) -> u128 {
        self.regs[n * usize::from(self.vq) + q]
    }

    /// After a wide save: if nothing beyond the FP view is set (every Z
    /// quadword above the first, every P bit and FFR zero), go back to the
    /// narrow form, moving the V registers to `v`, so the next restore and
    /// save are FP-sized. Returns whether it did.
    pub fn narrow_if_clear(&mut self, v: &mut [u128; 32]) -> bool {
        let vq = usize::from(self.vq);
        let z_quads = 32 * vq;
        let high_clear = (0..32).all(|n| (1..vq).all(|q| self.regs[n * vq + q] == 0));
        let p_clear = self.regs[z_quads..].iter().all(|&w| w == 0);
        if !(high_clear && p_clear) {
            return false;
        }
        for (n, reg) in v.iter_mut().enumerate() {
            *reg = self.regs[n * vq];
            self.regs[n * vq] = 0;
        }
        self.wide = false;
        true
    }
}

/// LoongArch FP state: 32 FPRs as wide as LASX (256 bits: `fpr[i][0]` is the
/// 64-bit FP view, `[0..2]` the LSX view), FCSR0 and FCC0-7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, align(32))]
pub struct LoongArchFpState {
    /// `$f0`-`$f31` / `$vr` / `$xr`, 4 x 64 bits each, least significant first.
    pub fpr: [[u64; 4]; 32],
    /// FCSR0.
    pub fcsr0: u32,
    /// FCC0-7, bit `i` = FCC`i`.
    pub fcc: u8,
}
