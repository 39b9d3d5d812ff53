//! Stolen time: how long a vCPU was runnable but not running, and the
//! arm64 paravirtual interface that reports it to the guest (Arm DEN0057A,
//! as Linux's KVM and Xen offer it).
//!
//! The accounting is the scheduler's: every vCPU has a [`RunDelay`], the
//! counter ticks it spent waiting in a run queue, from the moment it was
//! queued (put while still runnable: preempted or yielding; woken from a
//! block) to the moment a pCPU picked it. The run loop hands the total to
//! the vCPU's [`VcpuSteal`] before each load; the backend then writes what
//! changed into the guest's record (arm64: [`PvTimeRegion`], LoongArch has
//! its own record and accounting in its backend).
//!
//! # The arm64 interface (DEN0057A)
//!
//! - `SMCCC_ARCH_FEATURES(PV_TIME_FEATURES)` answers 0 when the VM is
//!   offered stolen time (config `pv_time`, default on), -1 otherwise.
//! - `PV_TIME_FEATURES(x1)`, SMC64 only: 0 for `PV_TIME_FEATURES` and
//!   `PV_TIME_ST`, -1 for anything else (and when not offered).
//! - `PV_TIME_ST`, SMC64 only, no argument (SMCCC: unused registers are
//!   ignored): the IPA of the calling vCPU's 64-byte record. Counting
//!   starts at the vCPU's first call; a later call (a CPU brought online
//!   again) returns the same record, whose value keeps growing.
//! - Anything else in the standard hypervisor service range, and the SMC32
//!   spellings of these (DEN0057A defines none), answers -1.
//!
//! The records sit in [`PvTimeRegion::SIZE`] bytes at the top of the VM's
//! RAM, which kestrel's generated device tree marks `no-map` under
//! `/reserved-memory` (a VM whose config gives its own DTB is not offered
//! stolen time: nothing would tell its guest to keep off). A record is
//! revision 0 (u32 at 0), attributes 0 (u32 at 4) and the stolen time in
//! nanoseconds (u64 at 8), little endian, 64-byte aligned.

use core::sync::atomic::{AtomicU64, Ordering};

/// The wait of one vCPU in run queues, kept by the scheduler in platform
/// counter ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunDelay {
    /// When it was queued, if that is known (a vCPU queued at its VM's
    /// creation or power-on has no wait to account).
    since: Option<u64>,
    total: u64,
}

impl RunDelay {
    pub const fn new() -> Self {
        RunDelay {
            since: None,
            total: 0,
        }
    }

    /// It is runnable from counter value `now` (`None`: not counted until
    /// its next queueing).
    pub fn queued(&mut self, now: Option<u64>) {
        self.since = now;
    }

    /// It was picked to run at `now`: its wait since it was queued is
    /// added (a counter that went backwards adds nothing). Returns the
    /// total.
    pub fn picked(&mut self, now: u64) -> u64 {
        if let Some(since) = self.since.take() {
            self.total = self.total.wrapping_add(now.saturating_sub(since));
        }
        self.total
    }

    /// Ticks spent waiting so far, up to its last pick.
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// Not registered ([`VcpuSteal`]).
const NONE: u64 = u64::MAX;

/// One vCPU's stolen time as its guest sees it: the scheduler's run delay
/// at its last load, and from when its guest counts (its first
/// `PV_TIME_ST`). Written only by the pCPU that holds the vCPU (the run
/// loop before `load`, the vCPU's own exits), so relaxed atomics suffice:
/// they only make it shareable.
#[derive(Debug)]
pub struct VcpuSteal {
    /// [`RunDelay::total`] at the last pick, in counter ticks.
    delay: AtomicU64,
    /// `delay` when the guest registered ([`NONE`]: it has not).
    from: AtomicU64,
    /// The stolen ticks last written to the guest's record ([`NONE`]:
    /// nothing written since it registered).
    written: AtomicU64,
}

impl Default for VcpuSteal {
    fn default() -> Self {
        Self::new()
    }
}

impl VcpuSteal {
    pub const fn new() -> Self {
        VcpuSteal {
            delay: AtomicU64::new(0),
            from: AtomicU64::new(NONE),
            written: AtomicU64::new(NONE),
        }
    }

    /// The run loop, before a load: the vCPU's run delay up to now.
    pub fn set_delay(&self, total: u64) {
        self.delay.store(total, Ordering::Relaxed);
    }

    /// The vCPU's run delay up to its last pick, in counter ticks.
    pub fn delay(&self) -> u64 {
        self.delay.load(Ordering::Relaxed)
    }

    /// The guest asked for its record: counting starts now, unless it had
    /// already (a second call keeps the value growing from where it is).
    pub fn register(&self) {
        if self.from.load(Ordering::Relaxed) == NONE {
            self.from
                .store(self.delay.load(Ordering::Relaxed), Ordering::Relaxed);
            self.written.store(NONE, Ordering::Relaxed);
        }
    }

    /// Whether the guest registered.
    pub fn registered(&self) -> bool {
        self.from.load(Ordering::Relaxed) != NONE
    }

    /// Forgets the registration (the VM restarts: its guest starts over).
    pub fn reset(&self) {
        self.from.store(NONE, Ordering::Relaxed);
        self.written.store(NONE, Ordering::Relaxed);
    }

    /// Stolen ticks since the guest registered (`None`: it has not).
    pub fn stolen(&self) -> Option<u64> {
        let from = self.from.load(Ordering::Relaxed);
        (from != NONE).then(|| self.delay.load(Ordering::Relaxed).wrapping_sub(from))
    }

    /// The stolen ticks to write into the record now: `Some` when the
    /// guest registered and the value changed since the last write (or
    /// nothing was written since it registered), and it counts as written.
    pub fn take_update(&self) -> Option<u64> {
        let stolen = self.stolen()?;
        let old = self.written.swap(stolen, Ordering::Relaxed);
        (old != stolen).then_some(stolen)
    }

    /// The write of the record failed: try again at the next load.
    pub fn write_failed(&self) {
        self.written.store(NONE, Ordering::Relaxed);
    }
}

/// `ticks` of a counter running at `hz` in nanoseconds (0 when `hz` is
/// not known), without floating point.
pub fn ticks_to_ns(ticks: u64, hz: u64) -> u64 {
    if hz == 0 {
        return 0;
    }
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(hz);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// SMCCC function ids of DEN0057A (standard hypervisor service, SMC64).
pub mod fid {
    pub use kestrel_abi::arm64::{PV_TIME_FEATURES, PV_TIME_ST};
}

/// SMCCC return codes the PV time calls use.
pub mod ret {
    pub const SUCCESS: i64 = 0;
    pub const NOT_SUPPORTED: i64 = -1;
}

/// Where a VM's stolen-time records are: one 64-byte record per vCPU, in
/// the last [`PvTimeRegion::SIZE`] bytes of its RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PvTimeRegion {
    /// Guest physical address of vCPU 0's record (the region's start).
    pub base: u64,
    /// Records in it (the VM's vCPUs).
    pub vcpus: usize,
}

impl PvTimeRegion {
    /// The region: 64 KiB, so a guest with 64 KiB pages maps it alone
    /// (DEN0057A's advice), room for 1024 vCPUs.
    pub const SIZE: u64 = 64 << 10;
    /// One record.
    pub const RECORD: u64 = 64;
    /// Offset of the stolen time in a record.
    pub const STOLEN_AT: u64 = 8;

    /// The region of a VM with `vcpus` vCPUs and RAM `[ram_base, ram_base +
    /// ram_size)`: its last 64 KiB (`None` when the RAM is smaller than 2
    /// MiB, not 64 KiB-aligned, or the vCPUs do not fit).
    pub fn at_top_of(ram_base: u64, ram_size: u64, vcpus: usize) -> Option<PvTimeRegion> {
        let end = ram_base.checked_add(ram_size)?;
        if ram_size < 2 << 20 || !end.is_multiple_of(Self::SIZE) {
            return None;
        }
        if vcpus == 0 || vcpus as u64 > Self::SIZE / Self::RECORD {
            return None;
        }
        Some(PvTimeRegion {
            base: end - Self::SIZE,
            vcpus,
        })
    }

    /// The region as (guest physical base, size), for the device tree.
    pub fn range(&self) -> (u64, u64) {
        (self.base, Self::SIZE)
    }

    /// Guest physical address of vCPU `index`'s record.
    pub fn record(&self, index: usize) -> Option<u64> {
        (index < self.vcpus).then(|| self.base + index as u64 * Self::RECORD)
    }
}

/// The first 16 bytes of a record: revision 0, attributes 0, `stolen_ns`.
pub fn record_bytes(stolen_ns: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[8..].copy_from_slice(&stolen_ns.to_le_bytes());
    r
}

/// What a PV time call does beside its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvTimeEffect {
    None,
    /// `PV_TIME_ST`: the caller's record is at x0, counting starts (or
    /// goes on): register the vCPU and write the record.
    Register,
}

/// Whether `function` (x0) is in the SMCCC standard hypervisor service
/// range (owner 5: 0x8500_xxxx / 0xC500_xxxx), where DEN0057A lives.
pub fn is_standard_hyp(function: u64) -> bool {
    function >> 32 == 0 && (function as u32) & 0xBFFF_0000 == 0x8500_0000
}

/// `SMCCC_ARCH_FEATURES(queried)` for the PV time calls: `Some(answer)`
/// when `queried` is one of them.
pub fn arch_features(queried: u32, offered: bool) -> Option<i64> {
    (queried == fid::PV_TIME_FEATURES).then_some(if offered {
        ret::SUCCESS
    } else {
        ret::NOT_SUPPORTED
    })
}

/// Answers a call in the standard hypervisor service range
/// ([`is_standard_hyp`]) from vCPU `index`, with `x1` its first argument
/// and `region` the VM's records (`None`: not offered). Never panics;
/// every id gets an answer.
pub fn call(
    function: u64,
    x1: u64,
    region: Option<&PvTimeRegion>,
    index: usize,
) -> (i64, PvTimeEffect) {
    let not = (ret::NOT_SUPPORTED, PvTimeEffect::None);
    let Some(region) = region else {
        return not;
    };
    if function >> 32 != 0 {
        return not;
    }
    match function as u32 {
        fid::PV_TIME_FEATURES => match x1 as u32 {
            fid::PV_TIME_FEATURES | fid::PV_TIME_ST => (ret::SUCCESS, PvTimeEffect::None),
            _ => not,
        },
        fid::PV_TIME_ST => match region.record(index) {
            Some(ipa) => (ipa as i64, PvTimeEffect::Register),
            None => not,
        },
        _ => not,
    }
}

#[cfg(test)]
mod tests;
