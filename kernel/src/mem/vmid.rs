//! ASID-style VMID allocator (the scheme of Linux arm64 KVM's `vmid.c`).
//!
//! Stage-2 TLB entries are tagged with a VMID (arm64 `VTTBR_EL2.VMID`,
//! LoongArch `GSTAT.GID`), and the hardware has few of them: 8 or 16 bits on
//! arm64, up to 10 or so on LoongArch, 4 with the `vmid4` feature. kestrel
//! hands them out lazily on `vcpu_load` and recycles them all at once when
//! they run out.
//!
//! # Algorithm
//!
//! A VM's id ([`VmVmid`]) is `generation | index`, where the low `bits` bits
//! are the hardware VMID and the generation counter (starting at `1 << bits`,
//! `+= 1 << bits` per rollover) lives above them. Global state: the
//! generation, a bitmap of the indices used in this generation, a search
//! cursor, and per CPU an `active` slot (atomic) and a `reserved` slot.
//!
//! * **Fast path** (no lock): if this CPU's `active` is non-zero and the VM's
//!   id is of the current generation, compare-and-swap `active` from the value
//!   just read to the VM's id. Success means no rollover slipped in between
//!   (a rollover swaps every `active` to 0), so the id stays valid.
//! * **Slow path** (under the lock): re-read the VM's id; if it is stale, keep
//!   its old index when some CPU still has it reserved (rewriting every
//!   reserved copy to the new generation) or when it is free in the bitmap;
//!   otherwise take the next free index after the cursor; otherwise roll over.
//! * **Rollover**: bump the generation, clear the bitmap, and for each CPU
//!   swap `active` to 0, keeping what it held (or its previous `reserved` if
//!   it held 0) as its new `reserved` index, marked in the bitmap. Then
//!   invalidate the stage-2 TLB for all VMIDs exactly once (see below).
//! * **vcpu_put** stores an invalid id (generation 1, index 0: non-zero) into
//!   `active`: the fast path still works for the next load on this CPU, but a
//!   descheduled VM no longer pins its index across rollovers.
//!
//! Index 0 is never handed out. Freed VMs do not return their index: it is
//! reclaimed at the next rollover, when only indices live on some CPU survive.
//!
//! # Invariants
//!
//! * A VM has one index at a time: every CPU running a VM uses the same index.
//! * Within a generation, two different VMs never run under the same index on
//!   any CPU, and an index reused by a new VM was invalidated in every TLB
//!   since its previous owner last ran under it.
//!
//! Both are checked by the exhaustive interleaving test (`vmid::tests`) and the
//! multi-threaded stress test (`tests/vmid_stress.rs`).
//!
//! # TLB maintenance: how the arch is expected to call this
//!
//! ```text
//! // at boot, once:        static VMIDS = VmidAllocator::new(hw_vmid_bits, online_cpus);
//! // per VM:               vm.vmid = VmVmid::new();
//! // on every vcpu_load:   let l = VMIDS.vcpu_load(cpu, &vm.vmid, &tlb);
//! //                       if l.flush_local { local_flush_all_guest_tlb() }   // local-only archs
//! //                       program VTTBR_EL2.VMID / GSTAT.GID = l.vmid
//! // on every vcpu_put:    VMIDS.vcpu_put(cpu);
//! ```
//!
//! The CPU that rolls over calls [`TlbFlush::flush_all_vmids`] once, *under
//! the allocator lock*, before any CPU can be handed a recycled index: that is
//! where arm64 issues its broadcast `TLBI ALLE1IS; DSB ISH` (all VMIDs: `VMALLS12E1IS`
//! would only cover the VMID in VTTBR_EL2). Architectures
//! whose TLB invalidation is CPU-local (LoongArch `invtlb`) pass a no-op
//! [`TlbFlush`] and honour [`VmidLoad::flush_local`] instead, which is set on
//! each CPU's first load after a rollover (the per-CPU pending-flush variant
//! that Linux uses for ASIDs); the fast path checks that flag too, because a
//! `vcpu_put` after the rollover may have replaced the 0 it left in `active`.

use crate::base::sync::{AtomicBool, AtomicU64, Mutex, Ordering};
use alloc::vec;
use alloc::vec::Vec;

#[cfg(test)]
mod tests;

/// Widest VMID supported (arm64 16-bit VMIDs).
pub const MAX_VMID_BITS: u32 = 16;

/// The VMID width an allocator may use on hardware that reports
/// `reported` bits (LoongArch GSTAT.GIDBITS, a 6-bit field that may say up
/// to 63) and carries a VMID in `field`-bit register fields (LoongArch: the
/// 8-bit GID fields of GSTAT, GTLBC and TRGP). Ids wider than the fields
/// would be cut by them, and two VMs whose ids differ only above the
/// fields' width would share one tag in the TLB.
pub fn usable_bits(reported: u32, field: u32) -> u32 {
    reported.min(field).min(MAX_VMID_BITS)
}

/// Invalidates stage-2 TLB entries of every VMID. Called once per rollover,
/// under the allocator lock.
pub trait TlbFlush {
    /// Invalidate all guest TLB entries of all VMIDs (broadcast if the
    /// architecture can; see the module docs for local-only architectures).
    fn flush_all_vmids(&self);
}

/// Any closure is a [`TlbFlush`]; handy for tests and no-op flushers.
impl<F: Fn()> TlbFlush for F {
    fn flush_all_vmids(&self) {
        self()
    }
}

/// A VM's VMID state: `generation | index`, 0 before the first load.
///
/// The VM owns it and passes it to [`VmidAllocator::vcpu_load`]; it is shared
/// by all the VM's vCPUs.
#[derive(Debug, Default)]
pub struct VmVmid(AtomicU64);

impl VmVmid {
    crate::base::sync::const_fn! {
        /// A VM that has never run.
        pub fn new() -> Self {
            Self(AtomicU64::new(0))
        }
    }

    /// The raw id (`generation | index`), 0 if never assigned.
    pub fn raw(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Forgets the VMID (the VM restarts with new translations): its next
    /// load takes a fresh one from the allocator, as a VM that never ran.
    /// The old one is not handed out again before the next rollover, which
    /// flushes it; the backend flushes what it knows is stale now.
    pub fn invalidate(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

/// Result of [`VmidAllocator::vcpu_load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct VmidLoad {
    /// Hardware VMID to program (`VTTBR_EL2[63:48]`, `GSTAT.GID`). Never 0.
    pub vmid: u16,
    /// Full id, `generation | vmid`.
    pub id: u64,
    /// Taken on the lock-free fast path.
    pub fast: bool,
    /// First load on this CPU since a rollover: a CPU-local TLB invalidation of
    /// all VMIDs is due before entering the guest (only needed where
    /// [`TlbFlush`] cannot broadcast).
    pub flush_local: bool,
}

/// Allocator counters, for the statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmidCounters {
    /// Loads served by the fast path.
    pub fast: u64,
    /// Loads that took the lock.
    pub slow: u64,
    /// Generation rollovers.
    pub rollovers: u64,
    /// Calls to [`TlbFlush::flush_all_vmids`].
    pub flushes: u64,
}

/// The global VMID allocator: one per system, shared by all CPUs.
#[derive(Debug)]
pub struct VmidAllocator {
    bits: u32,
    generation: AtomicU64,
    /// Per CPU: the id running (or last run, see `vcpu_put`) on it; 0 right
    /// after a rollover.
    active: Vec<AtomicU64>,
    /// Per CPU: a local TLB flush is due (rollover since its last slow path).
    /// Atomic because the fast path must see it: `vcpu_put` overwrites the 0
    /// a rollover leaves in `active`, so `active == 0` alone does not force
    /// the first load after a rollover onto the slow path.
    flush_pending: Vec<AtomicBool>,
    inner: Mutex<Inner>,
    fast: AtomicU64,
    slow: AtomicU64,
    rollovers: AtomicU64,
    flushes: AtomicU64,
}

/// State only touched under the lock.
#[derive(Debug)]
struct Inner {
    /// Indices in use in the current generation (bit 0 always set).
    map: Vec<u64>,
    /// Where the next free-index search starts.
    cursor: usize,
    /// Number of indices (`1 << bits`).
    size: usize,
    /// Per CPU: the id it was running when the last rollover happened.
    reserved: Vec<u64>,
}

/// Points at which the interleaving test may preempt a thread (before each
/// access to shared state). Production code passes a no-op hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    ReadActive,
    ReadVm,
    ReadGeneration,
    ReadPending,
    CasActive,
    Lock,
    BumpGeneration,
    XchgActive,
    StoreVm,
    /// Not a preemption point: tells the checker the lock was released.
    Unlocked,
    Put,
}

impl VmidAllocator {
    /// An allocator for `cpus` CPUs and `hw_bits`-bit VMIDs (the hardware
    /// width; the `vmid4` feature caps it to 4).
    ///
    /// # Panics
    ///
    /// At boot, if `hw_bits` is not in `2..=16` or if `cpus` is 0 or larger
    /// than `2^bits - 2`: a rollover must always leave an index free after
    /// every CPU has reserved one (pass the number of CPUs brought up, not
    /// `MAX_CPUS`, when forcing 4-bit VMIDs).
    pub fn new(hw_bits: u32, cpus: usize) -> Self {
        let bits = if cfg!(feature = "vmid4") {
            hw_bits.min(4)
        } else {
            hw_bits
        };
        assert!(
            (2..=MAX_VMID_BITS).contains(&bits),
            "unsupported VMID width {bits}"
        );
        assert!(
            cpus >= 1 && cpus + 2 <= 1 << bits,
            "{cpus} CPUs cannot share {bits}-bit VMIDs"
        );
        let words = (1usize << bits).div_ceil(64);
        let mut map = vec![0u64; words];
        map[0] = 1; // index 0 is never handed out
        Self {
            bits,
            generation: AtomicU64::new(1 << bits),
            active: (0..cpus).map(|_| AtomicU64::new(0)).collect(),
            inner: Mutex::new(Inner {
                map,
                cursor: 1,
                size: 1 << bits,
                reserved: vec![0; cpus],
            }),
            flush_pending: (0..cpus).map(|_| AtomicBool::new(false)).collect(),
            fast: AtomicU64::new(0),
            slow: AtomicU64::new(0),
            rollovers: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    /// VMID width in use.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Number of CPUs.
    pub fn cpus(&self) -> usize {
        self.active.len()
    }

    /// Current generation (a multiple of `1 << bits`).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Counters since boot.
    pub fn counters(&self) -> VmidCounters {
        VmidCounters {
            fast: self.fast.load(Ordering::Relaxed),
            slow: self.slow.load(Ordering::Relaxed),
            rollovers: self.rollovers.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
        }
    }

    /// Make sure `vm` has a VMID valid on `cpu` and mark it active there.
    /// Call before entering the guest, with the guest's interrupts irrelevant
    /// but preemption off (`cpu` must stay the caller's CPU).
    pub fn vcpu_load(&self, cpu: usize, vm: &VmVmid, tlb: &impl TlbFlush) -> VmidLoad {
        self.load_hooked(cpu, vm, tlb, &mut |_| {})
    }

    /// The vCPU on `cpu` is descheduled: stop pinning its index.
    pub fn vcpu_put(&self, cpu: usize) {
        self.put_hooked(cpu, &mut |_| {})
    }

    fn mask(&self) -> u64 {
        (1 << self.bits) - 1
    }

    fn invalid(&self) -> u64 {
        // Generation 1, index 0: non-zero, and index 0 belongs to nobody.
        1 << self.bits
    }

    fn current(&self, id: u64, generation: u64) -> bool {
        (id ^ generation) >> self.bits == 0
    }

    fn loaded(&self, id: u64, fast: bool, flush_local: bool) -> VmidLoad {
        VmidLoad {
            vmid: (id & self.mask()) as u16,
            id,
            fast,
            flush_local,
        }
    }

    fn flush_due(&self, cpu: usize, hook: &mut dyn FnMut(Step)) -> bool {
        hook(Step::ReadPending);
        self.flush_pending[cpu].load(Ordering::SeqCst)
    }

    pub(crate) fn put_hooked(&self, cpu: usize, hook: &mut dyn FnMut(Step)) {
        hook(Step::Put);
        self.active[cpu].store(self.invalid(), Ordering::SeqCst);
    }

    pub(crate) fn load_hooked(
        &self,
        cpu: usize,
        vm: &VmVmid,
        tlb: &dyn TlbFlush,
        hook: &mut dyn FnMut(Step),
    ) -> VmidLoad {
        let active = &self.active[cpu];
        hook(Step::ReadActive);
        let old_active = active.load(Ordering::SeqCst);
        hook(Step::ReadVm);
        let id = vm.0.load(Ordering::SeqCst);
        hook(Step::ReadGeneration);
        let generation = self.generation.load(Ordering::SeqCst);
        // Why SeqCst: the argument "the CAS fails if a rollover swapped
        // `active` to 0 after we read the generation" needs the generation
        // bump and the swaps to be seen in the order the rollover made them.
        if old_active != 0 && self.current(id, generation) && !self.flush_due(cpu, hook) {
            hook(Step::CasActive);
            if active
                .compare_exchange(old_active, id, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                self.fast.fetch_add(1, Ordering::Relaxed);
                return self.loaded(id, true, false);
            }
        }

        hook(Step::Lock);
        let mut inner = self.inner.lock();
        // Re-read: another CPU may have renewed this VM's id meanwhile (ids
        // are only written under the lock, so this read cannot race).
        let mut id = vm.0.load(Ordering::SeqCst);
        if !self.current(id, self.generation.load(Ordering::SeqCst)) {
            id = self.new_vmid(&mut inner, vm, id, tlb, hook);
        }
        // Only this CPU and rollovers (under the lock) write this slot.
        active.store(id, Ordering::SeqCst);
        let flush_local = self.flush_pending[cpu].swap(false, Ordering::SeqCst);
        drop(inner);
        hook(Step::Unlocked);
        self.slow.fetch_add(1, Ordering::Relaxed);
        self.loaded(id, false, flush_local)
    }

    /// Give `vm` (whose id `old` is stale) an id of the current generation.
    fn new_vmid(
        &self,
        inner: &mut Inner,
        vm: &VmVmid,
        old: u64,
        tlb: &dyn TlbFlush,
        hook: &mut dyn FnMut(Step),
    ) -> u64 {
        let mut generation = self.generation.load(Ordering::SeqCst);
        if old != 0 {
            let idx = (old & self.mask()) as usize;
            let new = generation | idx as u64;
            // Why keep the index: it may still be live in some CPU's TLB and
            // active slot for this very VM, and reusing it avoids a new one.
            if inner.update_reserved(old, new) || !inner.test_and_set(idx) {
                hook(Step::StoreVm);
                vm.0.store(new, Ordering::SeqCst);
                return new;
            }
        }
        let idx = match inner.find_free(inner.cursor) {
            Some(idx) => idx,
            None => {
                generation = self.rollover(inner, tlb, hook);
                // `new` guarantees at most 2^bits - 2 reserved indices plus
                // index 0, so one is free.
                inner
                    .find_free(1)
                    .expect("rollover leaves a free VMID (checked in new)")
            }
        };
        inner.test_and_set(idx);
        inner.cursor = idx;
        let new = generation | idx as u64;
        hook(Step::StoreVm);
        vm.0.store(new, Ordering::SeqCst);
        new
    }

    /// Start a new generation; returns it.
    fn rollover(&self, inner: &mut Inner, tlb: &dyn TlbFlush, hook: &mut dyn FnMut(Step)) -> u64 {
        hook(Step::BumpGeneration);
        let step = 1 << self.bits;
        let generation = self.generation.fetch_add(step, Ordering::SeqCst) + step;
        inner.map.fill(0);
        inner.map[0] = 1;
        for (cpu, active) in self.active.iter().enumerate() {
            hook(Step::XchgActive);
            let mut id = active.swap(0, Ordering::SeqCst);
            // A CPU that has not loaded since the previous rollover still runs
            // (or last ran) what it had reserved then.
            if id == 0 {
                id = inner.reserved[cpu];
            }
            inner.test_and_set((id & self.mask()) as usize);
            inner.reserved[cpu] = id;
            self.flush_pending[cpu].store(true, Ordering::SeqCst);
        }
        self.rollovers.fetch_add(1, Ordering::Relaxed);
        self.flushes.fetch_add(1, Ordering::Relaxed);
        // Under the lock, before any recycled index is handed out.
        tlb.flush_all_vmids();
        generation
    }
}

impl Inner {
    /// Rewrite every reserved copy of `old` to `new`; true if there was one.
    fn update_reserved(&mut self, old: u64, new: u64) -> bool {
        let mut hit = false;
        for r in self.reserved.iter_mut().filter(|r| **r == old) {
            *r = new;
            hit = true;
        }
        hit
    }

    /// Set bit `idx`; returns its previous value.
    fn test_and_set(&mut self, idx: usize) -> bool {
        let (word, bit) = (idx / 64, idx % 64);
        let was = self.map[word] & (1 << bit) != 0;
        self.map[word] |= 1 << bit;
        was
    }

    /// First clear bit at or after `from` (no wrap-around: running off the end
    /// is what triggers a rollover).
    fn find_free(&self, from: usize) -> Option<usize> {
        (from..self.size).find(|&i| self.map[i / 64] & (1 << (i % 64)) == 0)
    }
}
