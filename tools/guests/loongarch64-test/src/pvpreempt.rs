//! The `pv-preempt` check: KVM's steal-time record and its `preempted`
//! byte (`KVM_FEATURE_PREEMPT`, what Linux's `vcpu_is_preempted()`
//! reads), where the hypervisor answers KVM's `cpucfg` range (kestrel's
//! LVZ backend; elsewhere the check is skipped).
//!
//! Every vCPU registers a record (KVM's NOTIFY) and spins, reading its own
//! `preempted` byte: a running vCPU must always read 0 (the hypervisor
//! clears it before the vCPU runs again). The boot CPU reads the others'
//! bytes meanwhile. With `pv_preempt=shared` on the command line the
//! VM's vCPUs share one pCPU (the config pins them), so whenever the boot
//! CPU runs, every other vCPU is off the pCPU although it spins (it is
//! runnable): once it has spun, each of its bytes the boot CPU reads must
//! say preempted. Without the option the others' bytes are only counted.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kestrel_abi::loongarch::{
    CPUCFG_KVM_FEATURE, CPUCFG_KVM_SIG, FN_NOTIFY, KVM_FEATURE_PREEMPT, KVM_FEATURE_STEAL_TIME,
    KVM_SIGNATURE, KVM_VCPU_PREEMPTED,
};

use crate::console::{fail, pass, skip, Outcome};
use crate::smp::{self, Cmd, SPINNING};
use crate::{cpu, trap, CPUS, MAX_CPUS};

/// `pv_preempt=shared`: the VM's vCPUs share one pCPU.
pub static SHARED: AtomicBool = AtomicBool::new(false);

/// Where the `preempted` byte is in KVM's `struct kvm_steal_time`.
const PREEMPTED: usize = 16;
/// How long the boot CPU reads the others' records, in microseconds.
const WINDOW_US: u64 = 200_000;

/// One vCPU's steal-time record: 64 bytes, 64-byte aligned (so within a
/// page), at its physical address (the guest's VA = PA).
#[repr(C, align(64))]
struct Record(UnsafeCell<[u8; 64]>);
// SAFETY: written by the hypervisor and read with volatile byte loads; the
// guest writes a record only before registering it.
unsafe impl Sync for Record {}

#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const RECORD: Record = Record(UnsafeCell::new([0; 64]));
static RECORDS: [Record; MAX_CPUS] = [RECORD; MAX_CPUS];

#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const ZERO: AtomicU64 = AtomicU64::new(0);
/// Per secondary: NOTIFY's answer, reads of its own byte, and those that
/// did not read 0.
static REGISTERED: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
static OWN_READS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
static OWN_SET: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];

fn addr(c: usize) -> u64 {
    RECORDS[c].0.get() as u64
}

/// vCPU `c`'s `preempted` byte as it is in memory now.
fn preempted(c: usize) -> u8 {
    // SAFETY: a byte of a static record; the hypervisor writes it.
    unsafe { core::ptr::read_volatile((addr(c) as *const u8).add(PREEMPTED)) }
}

/// Fills this CPU's record with garbage and registers it (NOTIFY's a0).
fn register(c: usize) -> u64 {
    for i in 0..64 {
        // SAFETY: a byte of this CPU's own record, not registered yet.
        unsafe { core::ptr::write_volatile((addr(c) as *mut u8).add(i), 0xAA) };
    }
    trap::hvcl(FN_NOTIFY, u64::from(KVM_FEATURE_STEAL_TIME), addr(c) | 1, 0)
}

fn unregister() {
    trap::hvcl(FN_NOTIFY, u64::from(KVM_FEATURE_STEAL_TIME), 0, 0);
}

/// A secondary's part ([`Cmd::PvPreempt`]): register, then spin until
/// `STOP`, counting reads of its own byte that were not 0.
pub fn secondary(me: usize) {
    REGISTERED[me].store(register(me), Ordering::Relaxed);
    let (mut reads, mut set) = (0, 0);
    SPINNING[me].store(true, Ordering::Release);
    while !smp::STOP.load(Ordering::Acquire) {
        reads += 1;
        if preempted(me) != 0 {
            set += 1;
        }
        cpu::relax();
    }
    unregister();
    OWN_READS[me].store(reads, Ordering::Relaxed);
    OWN_SET[me].store(set, Ordering::Relaxed);
    SPINNING[me].store(false, Ordering::Release);
}

pub fn check() -> Outcome {
    let sig = cpu::cpucfg(u64::from(CPUCFG_KVM_SIG));
    if sig != u64::from(KVM_SIGNATURE) {
        return skip!("no KVM paravirt interface (cpucfg 0x4000_0000 reads {sig:#x})");
    }
    let features = cpu::cpucfg(u64::from(CPUCFG_KVM_FEATURE));
    let want = u64::from(KVM_FEATURE_STEAL_TIME | KVM_FEATURE_PREEMPT);
    if features & want != want {
        return fail!("cpucfg 0x4000_0004 = {features:#x}: steal time (bit 2) and preempt (bit 3) not both offered");
    }
    let r = register(0);
    if r != 0 {
        return fail!(
            "NOTIFY of this vCPU's record at {:#x} returned {r:#x}",
            addr(0)
        );
    }
    if preempted(0) != 0 {
        unregister();
        return fail!(
            "the record's preempted byte reads {:#x} after registration",
            preempted(0)
        );
    }
    let n = CPUS.load(Ordering::Acquire);
    let shared = SHARED.load(Ordering::Relaxed);
    if shared && n < 2 {
        unregister();
        return fail!("pv_preempt=shared needs 2 vCPUs or more, this VM has {n}");
    }
    let s = smp::post(Cmd::PvPreempt);
    if !smp::wait_spinning() {
        unregister();
        smp::stop(s);
        return fail!("not every vCPU started spinning");
    }
    // Every other vCPU spins (it set SPINNING after registering): from
    // now it is runnable whenever it is not running.
    let mut seen = [0u64; MAX_CPUS];
    let mut set = [0u64; MAX_CPUS];
    let (mut own_reads, mut own_set) = (0u64, 0u64);
    let end = cpu::now() + crate::us(WINDOW_US);
    while cpu::now() < end {
        own_reads += 1;
        if preempted(0) != 0 {
            own_set += 1;
        }
        for c in 1..n {
            seen[c] += 1;
            if preempted(c) == KVM_VCPU_PREEMPTED {
                set[c] += 1;
            }
        }
        cpu::relax();
    }
    unregister();
    if !smp::stop(s) {
        return fail!("not every vCPU stopped spinning");
    }
    for (c, r) in REGISTERED.iter().enumerate().take(n).skip(1) {
        let r = r.load(Ordering::Relaxed);
        if r != 0 {
            return fail!("vCPU {c}: NOTIFY of its record returned {r:#x}");
        }
    }
    if own_set != 0 {
        return fail!("vCPU 0 read its own preempted byte set in {own_set} of {own_reads} reads while running");
    }
    let mut own = own_reads;
    for c in 1..n {
        let (reads, bad) = (
            OWN_READS[c].load(Ordering::Relaxed),
            OWN_SET[c].load(Ordering::Relaxed),
        );
        if bad != 0 {
            return fail!(
                "vCPU {c} read its own preempted byte set in {bad} of {reads} reads while running"
            );
        }
        own = own.min(reads);
    }
    let (all_seen, all_set): (u64, u64) = (seen[1..n].iter().sum(), set[1..n].iter().sum());
    if shared {
        for c in 1..n {
            if seen[c] == 0 || set[c] != seen[c] {
                return fail!(
                    "vCPU {c} spins on this pCPU but read preempted in only {} of {} reads",
                    set[c],
                    seen[c]
                );
            }
        }
        return pass!(
            "features {features:#x}; the other {} vCPU(s), spinning on this pCPU, read preempted in all {all_seen} reads; own byte 0 while running (at least {own} reads each)",
            n - 1
        );
    }
    pass!(
        "features {features:#x}; own byte 0 while running ({n} vCPUs, at least {own} reads each); the others read preempted in {all_set} of {all_seen} reads"
    )
}
