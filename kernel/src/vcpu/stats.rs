//! Statistics: exit counters by reason and the counters of the portable
//! mechanisms (FP, VMID, IPI).
//!
//! One [`Stats`] block per VM and one per vCPU, and one for the host
//! ([`HOST`]: what belongs to no one VM). A vCPU's exits are counted in
//! its own block by the pCPU running it ([`Stats::exit_owned`]); the rest
//! (the timer wake-ups another pCPU finds, the mechanisms' counters) in
//! the VM's. A VM's figures are the sum of its block and its vCPUs'
//! (`Vm::counters`). Every counter is an `AtomicU64` bumped with `Relaxed`
//! ordering: counters are independent and only ever read as a snapshot for
//! the log or the guest, so no ordering between them is promised.
//!
//! The counter indices ([`Counter`]) are guest-visible through the statistics
//! hypercall and defined in `kestrel_abi::stat`; a [`Snapshot`] prints as the
//! summary the hypervisor logs.

use crate::mem::vmid::VmidLoad;
use crate::vcpu::ipi::IpiOutcome;
use core::fmt;
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use kestrel_abi::stat;

/// kestrel's own counters: events of the host rather than of one VM,
/// which no VM's counters show (the operator's live view and kestrel's
/// log do): VMID (LoongArch GID) rollovers and the TLB flushes they take,
/// whichever VM's load met them, and the saves of one VM's FP registers
/// that another VM's FP use caused on the same pCPU.
pub static HOST: Stats = Stats::new();

/// The host counters as kestrel's log and the live view name them:
/// `vmid_rollovers=R tlb_flushes=T fp_saves=S sve_saves=V` (FP saves for
/// another VM's use, V of them SVE-sized).
pub fn host_summary(s: &Snapshot) -> alloc::string::String {
    alloc::format!(
        "vmid_rollovers={} tlb_flushes={} fp_saves={} sve_saves={}",
        s.get(Counter::VmidRollovers),
        s.get(Counter::TlbFlushes),
        s.get(Counter::FpSaves),
        s.get(Counter::SveSaves)
    )
}

/// Number of counters in a [`Stats`] block.
pub const COUNT: usize = stat::COUNT as usize;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident = $index:path, $label:literal;)*) => {
        /// One counter of a [`Stats`] block; the discriminant is its
        /// guest-visible index (`kestrel_abi::stat`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Counter {
            $($(#[$doc])* $name = $index as u8,)*
        }

        impl Counter {
            /// Every counter, in index order.
            pub const ALL: [Counter; COUNT] = [$(Counter::$name,)*];

            /// Short name used in the summary.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$name => $label,)*
                }
            }
        }
    };
}

counters! {
    /// Exits for hypercalls.
    ExitHypercall = stat::EXIT_HYPERCALL, "hypercall";
    /// Exits for system register / CSR / IOCSR / cpucfg accesses.
    ExitSysreg = stat::EXIT_SYSREG, "sysreg";
    /// Exits for emulated MMIO.
    ExitMmio = stat::EXIT_MMIO, "mmio";
    /// Exits for WFI / WFE / idle.
    ExitIdle = stat::EXIT_IDLE, "idle";
    /// Exits for physical interrupts.
    ExitIrq = stat::EXIT_IRQ, "irq";
    /// Exits for FP/SIMD traps.
    ExitFp = stat::EXIT_FP, "fp";
    /// Exits for emulated IPI registers.
    ExitIpi = stat::EXIT_IPI, "ipi";
    /// Exits for timer emulation.
    ExitTimer = stat::EXIT_TIMER, "timer";
    /// Exits for non-MMIO aborts.
    ExitAbort = stat::EXIT_ABORT, "abort";
    /// Other exits.
    ExitOther = stat::EXIT_OTHER, "other";
    /// FP register file saves.
    FpSaves = stat::FP_SAVES, "fp_saves";
    /// FP register file restores.
    FpRestores = stat::FP_RESTORES, "fp_restores";
    /// FP traps.
    FpTraps = stat::FP_TRAPS, "fp_traps";
    /// VMID fast-path loads.
    VmidFast = stat::VMID_FAST, "vmid_fast";
    /// VMID slow-path loads.
    VmidSlow = stat::VMID_SLOW, "vmid_slow";
    /// VMID rollovers.
    VmidRollovers = stat::VMID_ROLLOVERS, "vmid_rollovers";
    /// TLB invalidations of all VMIDs.
    TlbFlushes = stat::TLB_FLUSHES, "tlb_flushes";
    /// PV IPI sends accepted.
    IpiSent = stat::IPI_SENT, "ipi_sent";
    /// IPI targets newly marked pending.
    IpiDelivered = stat::IPI_DELIVERED, "ipi_delivered";
    /// IPI targets already pending.
    IpiCoalesced = stat::IPI_COALESCED, "ipi_coalesced";
    /// Guest RAM blocks zeroed at their first touch.
    LazyZero = stat::LAZY_ZERO, "lazy_zero";
    /// Emulated IPIs sent (IOCSR IPI_SEND).
    IpiEmulated = stat::IPI_EMULATED, "ipi_emulated";
    /// SVE traps (also counted in `fp_traps`).
    SveTraps = stat::SVE_TRAPS, "sve_traps";
    /// SVE-sized saves (also counted in `fp_saves`).
    SveSaves = stat::SVE_SAVES, "sve_saves";
    /// SVE-sized restores (also counted in `fp_restores`).
    SveRestores = stat::SVE_RESTORES, "sve_restores";
}

// The table above must list every index of the ABI once, in order.
const _: () = {
    let mut i = 0;
    while i < COUNT {
        assert!(Counter::ALL[i] as usize == i);
        i += 1;
    }
};

impl Counter {
    /// Index of this counter.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The counter at a guest-supplied index, if any.
    pub fn from_index(index: u64) -> Option<Self> {
        usize::try_from(index)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }
}

/// Why a vCPU left the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// `hvc` / `smc` / `hvcl`.
    Hypercall,
    /// System register, CSR, IOCSR or `cpucfg` trap.
    Sysreg,
    /// Emulated MMIO access.
    Mmio,
    /// WFI / WFE / `idle`.
    Idle,
    /// A physical interrupt.
    Irq,
    /// FP/SIMD trap.
    FpTrap,
    /// Emulated IPI register access (SGI1R, IOCSR IPI_SEND/STATUS/CLEAR).
    Ipi,
    /// Timer emulation.
    Timer,
    /// Guest abort that is not MMIO.
    Abort,
    /// Anything else.
    Other,
}

impl ExitReason {
    /// The counter this reason bumps.
    pub const fn counter(self) -> Counter {
        match self {
            Self::Hypercall => Counter::ExitHypercall,
            Self::Sysreg => Counter::ExitSysreg,
            Self::Mmio => Counter::ExitMmio,
            Self::Idle => Counter::ExitIdle,
            Self::Irq => Counter::ExitIrq,
            Self::FpTrap => Counter::ExitFp,
            Self::Ipi => Counter::ExitIpi,
            Self::Timer => Counter::ExitTimer,
            Self::Abort => Counter::ExitAbort,
            Self::Other => Counter::ExitOther,
        }
    }
}

/// A block of counters (per VM, per vCPU, or global).
#[derive(Debug)]
pub struct Stats {
    counters: [AtomicU64; COUNT],
    /// The longest stretch of kestrel's work in one exit for this VM:
    /// counter ticks << 8 | what the exit was ([`Stats::note_exit`]), never
    /// negative.
    worst_exit: AtomicI64,
    /// The longest step of its restarts, in counter ticks.
    worst_step: AtomicU64,
}

/// What an exit was, for [`Stats::note_exit`]: the arch's own exit code
/// (arm64: ESR_EL2.EC; LoongArch: ESTAT.Ecode), or one of these.
pub mod what {
    /// A TLB refill (LoongArch).
    pub const TLB_REFILL: u8 = 0xfc;
    /// A physical interrupt.
    pub const IRQ: u8 = 0xfd;
    /// The VM's device work before an entry (`vm::DeviceWork`).
    pub const DEVICES: u8 = 0xfe;
}

/// The longest pieces of kestrel's work for one VM ([`Stats::worst`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Worst {
    /// Counter ticks of the longest exit, and what it was.
    pub exit_ticks: u64,
    pub exit_what: u8,
    /// Counter ticks of the longest restart step.
    pub step_ticks: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// All zero; usable in a `static`.
    pub const fn new() -> Self {
        Self {
            counters: [const { AtomicU64::new(0) }; COUNT],
            worst_exit: AtomicI64::new(0),
            worst_step: AtomicU64::new(0),
        }
    }

    /// kestrel spent `ticks` of the counter on one exit of this VM, from
    /// the guest's exit to its next entry's start (or to the decision not
    /// to enter), `what` being the kind of exit. `ticks` is the wrapping
    /// difference of two counter reads: one that went backwards (on a CPU
    /// that may take a counter read before an earlier one) is below zero
    /// as a signed value and is never a worst.
    pub fn note_exit(&self, ticks: u64, what: u8) {
        // Signed, so that a backwards difference needs no test of its own
        // on the path of every exit; 55 bits of ticks are more than one
        // exit can take (11 years at LoongArch's 100 MHz, 1 at 1 GHz).
        let v = ((ticks << 8) | u64::from(what)) as i64;
        // Called after every exit: a plain load decides, and only a new
        // worst pays for the atomic read-modify-write (which settles a race
        // between two pCPUs).
        if v > self.worst_exit.load(Ordering::Relaxed) {
            self.worst_exit.fetch_max(v, Ordering::Relaxed);
        }
    }

    /// One step of a restart of this VM took `ticks`.
    pub fn note_step(&self, ticks: u64) {
        self.worst_step.fetch_max(ticks, Ordering::Relaxed);
    }

    /// The longest exit and restart step so far.
    pub fn worst(&self) -> Worst {
        // Never below zero (it starts at 0 and only rises).
        let e = self.worst_exit.load(Ordering::Relaxed) as u64;
        Worst {
            exit_ticks: e >> 8,
            exit_what: e as u8,
            step_ticks: self.worst_step.load(Ordering::Relaxed),
        }
    }

    /// Add `n` to `c`.
    pub fn add(&self, c: Counter, n: u64) {
        if n != 0 {
            self.counters[c.index()].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Add 1 to `c`.
    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Current value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.counters[c.index()].load(Ordering::Relaxed)
    }

    /// Count one exit.
    pub fn exit(&self, reason: ExitReason) {
        self.inc(reason.counter());
    }

    /// Count one exit of a vCPU in its own block: only the pCPU that holds
    /// the vCPU's registers (its context lock) counts here, so a plain
    /// load and store does, without the read-modify-write and without a
    /// cache line every vCPU of the VM writes at each exit. A reader on
    /// another pCPU sees the count as of some recent exit.
    #[inline]
    pub fn exit_owned(&self, reason: ExitReason) {
        let c = &self.counters[reason.counter().index()];
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// Value at a guest-supplied index (`None`: no such counter), of this
    /// block alone: the tests' view. The guest's statistics call reads
    /// its VM's figures with its vCPUs' added (`Vm::counter`).
    #[cfg(test)]
    pub fn read_index(&self, index: u64) -> Option<u64> {
        Counter::from_index(index).map(|c| self.get(c))
    }

    /// Count one VMID load.
    pub fn record_vmid(&self, load: &VmidLoad) {
        self.inc(if load.fast {
            Counter::VmidFast
        } else {
            Counter::VmidSlow
        });
    }

    /// Count one accepted PV IPI send.
    pub fn record_ipi(&self, outcome: &IpiOutcome) {
        self.inc(Counter::IpiSent);
        self.add(Counter::IpiDelivered, outcome.delivered.into());
        self.add(Counter::IpiCoalesced, outcome.coalesced.into());
    }

    /// A consistent-enough copy (each counter read once, relaxed).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(core::array::from_fn(|i| {
            self.counters[i].load(Ordering::Relaxed)
        }))
    }
}

/// Plain copy of a [`Stats`] block; add them up to aggregate vCPUs into a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot(pub [u64; COUNT]);

impl Default for Snapshot {
    fn default() -> Self {
        Self([0; COUNT])
    }
}

impl Snapshot {
    /// Value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c.index()]
    }

    /// Total exits.
    pub fn exits(&self) -> u64 {
        self.0[..=Counter::ExitOther.index()].iter().sum()
    }
}

impl core::ops::Add for Snapshot {
    type Output = Snapshot;
    fn add(self, rhs: Snapshot) -> Snapshot {
        Snapshot(core::array::from_fn(|i| self.0[i] + rhs.0[i]))
    }
}

impl core::iter::Sum for Snapshot {
    fn sum<I: Iterator<Item = Snapshot>>(iter: I) -> Snapshot {
        iter.fold(Snapshot::default(), |a, b| a + b)
    }
}

/// One line per group, e.g. `exits 12: hypercall=3 mmio=9`; zero counters
/// are left out to keep the log short.
impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let groups: [(&str, Counter, Counter); 7] = [
            ("exits", Counter::ExitHypercall, Counter::ExitOther),
            ("fp", Counter::FpSaves, Counter::FpTraps),
            ("vmid", Counter::VmidFast, Counter::TlbFlushes),
            ("ipi", Counter::IpiSent, Counter::IpiCoalesced),
            ("mem", Counter::LazyZero, Counter::LazyZero),
            ("emulated ipi", Counter::IpiEmulated, Counter::IpiEmulated),
            ("sve", Counter::SveTraps, Counter::SveRestores),
        ];
        for (n, (label, first, last)) in groups.into_iter().enumerate() {
            // Later groups that are all 0 (RAM zeroed lazily only on some
            // backends, IPIs sent through registers only by some guests,
            // SVE only in VMs that have it): no empty line.
            if n > 3 && (first.index()..=last.index()).all(|i| self.0[i] == 0) {
                continue;
            }
            if n > 0 {
                writeln!(f)?;
            }
            if label == "exits" {
                write!(f, "exits {}:", self.exits())?;
            } else {
                write!(f, "{label}:")?;
            }
            for c in &Counter::ALL[first.index()..=last.index()] {
                let v = self.get(*c);
                if v != 0 {
                    write!(f, " {}={v}", c.name())?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn the_worst_exit_and_step_are_kept_with_what_the_exit_was() {
        let s = Stats::new();
        assert_eq!(s.worst(), Worst::default());
        s.note_exit(500, 0x24);
        s.note_exit(90_000, what::DEVICES);
        s.note_exit(1_000, 0x16);
        s.note_step(7);
        s.note_step(3);
        assert_eq!(
            s.worst(),
            Worst {
                exit_ticks: 90_000,
                exit_what: what::DEVICES,
                step_ticks: 7
            }
        );
        // Up to 55 bits of ticks are kept exactly (no exit takes more).
        s.note_exit((1 << 55) - 1, 1);
        assert_eq!(s.worst().exit_ticks, (1 << 55) - 1);
        assert_eq!(s.worst().exit_what, 1);
        // Two counter reads that went backwards are not a worst exit.
        let t = Stats::new();
        t.note_exit(10, 0x16);
        t.note_exit(3u64.wrapping_sub(5), 0x16);
        assert_eq!(t.worst().exit_ticks, 10);
    }

    #[test]
    fn indices_are_the_abi_ones() {
        assert_eq!(Counter::ExitHypercall.index() as u64, stat::EXIT_HYPERCALL);
        assert_eq!(Counter::TlbFlushes.index() as u64, stat::TLB_FLUSHES);
        assert_eq!(Counter::IpiCoalesced.index() as u64, stat::IPI_COALESCED);
        assert_eq!(Counter::from_index(stat::COUNT), None);
        assert_eq!(Counter::from_index(u64::MAX), None);
        assert_eq!(Counter::from_index(stat::FP_TRAPS), Some(Counter::FpTraps));
    }

    #[test]
    fn counting_and_reading_by_index() {
        let s = Stats::new();
        s.exit(ExitReason::Mmio);
        s.exit(ExitReason::Mmio);
        s.exit(ExitReason::Hypercall);
        s.record_ipi(&IpiOutcome {
            delivered: 3,
            coalesced: 2,
            kicked: 1,
        });
        s.add(Counter::FpRestores, 3);
        assert_eq!(s.read_index(stat::EXIT_MMIO), Some(2));
        assert_eq!(s.read_index(stat::IPI_DELIVERED), Some(3));
        assert_eq!(s.read_index(stat::FP_RESTORES), Some(3));
        assert_eq!(s.read_index(stat::COUNT), None);
        assert_eq!(s.snapshot().exits(), 3);
        let vmid = VmidLoad {
            vmid: 1,
            id: 17,
            fast: true,
            flush_local: false,
        };
        s.record_vmid(&vmid);
        assert_eq!(s.get(Counter::VmidFast), 1);
    }

    #[test]
    fn an_owned_exit_counts_as_an_exit() {
        let s = Stats::new();
        s.exit_owned(ExitReason::Idle);
        s.exit_owned(ExitReason::Idle);
        s.exit(ExitReason::Idle);
        assert_eq!(s.get(Counter::ExitIdle), 3);
        assert_eq!(s.snapshot().exits(), 3);
    }

    #[test]
    fn summary_text() {
        let s = Stats::new();
        s.exit(ExitReason::Mmio);
        s.inc(Counter::VmidRollovers);
        let text = s.to_string();
        assert_eq!(text, "exits 1: mmio=1\nfp:\nvmid: vmid_rollovers=1\nipi:");
        s.add(Counter::LazyZero, 5);
        let text = s.to_string();
        assert_eq!(
            text,
            "exits 1: mmio=1\nfp:\nvmid: vmid_rollovers=1\nipi:\nmem: lazy_zero=5"
        );
    }

    #[test]
    fn snapshots_add_up() {
        let (a, b) = (Stats::new(), Stats::new());
        a.exit(ExitReason::Irq);
        b.exit(ExitReason::Irq);
        b.exit(ExitReason::Timer);
        let total: Snapshot = [a.snapshot(), b.snapshot()].into_iter().sum();
        assert_eq!(total.get(Counter::ExitIrq), 2);
        assert_eq!(total.exits(), 3);
    }
}
