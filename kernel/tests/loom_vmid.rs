//! loom models of the VMID allocator (`kernel::mem::vmid`): the lock-free fast
//! path of `vcpu_load` against a rollover on another pCPU. Built only with
//! `RUSTFLAGS="--cfg loom"` (`make test-loom`, docs/concurrency.md); the
//! real `VmidAllocator` runs on loom's atomics and mutex.
//!
//! Each thread is a pCPU running a list of loads and puts on an allocator
//! that is full, so the next new VM rolls over: 2-bit VMIDs (indices 1-3)
//! on 2 pCPUs, and 3-bit ones on 3 pCPUs. After every load the thread checks, in a ghost table outside the
//! model (a std mutex, taken with no loom operation inside), what
//! `vmid::tests` checks without weak memory: no two pCPUs run different
//! VMs under one VMID, no VM runs under two VMIDs at once, and no pCPU's
//! TLB (modelled: VMID -> the VM whose entries it may hold) has another
//! VM's entries for the VMID it is about to use. The broadcast variant
//! clears every TLB in the rollover's `TlbFlush` (then refills those of
//! the pCPUs still running a guest); the local one clears a pCPU's TLB
//! when its load says `flush_local`.
//!
//! Shown to fail when the protocol is broken (each change made by hand in
//! `vmid.rs`, the models run, the change reverted):
//! - the fast path without the pending-flush check (`&& !self.flush_due(..)`
//!   removed from `load_hooked`): `put_after_rollover_still_flushes` fails
//!   in the local-flush variant, "cpu0: VMID 1 has stale entries of vm0
//!   for vm3" (its `vcpu_put` overwrote the 0 the rollover left in
//!   `active`, and nothing else sends it to the slow path).
//! - the fast path's compare-and-swap of `active` as a plain store
//!   (`active.store(id, SeqCst)` and success): `fast_path_against_rollover`
//!   fails, "vm3 on cpu1 and vm0 on cpu0 share VMID 1" (the rollover's
//!   swap to 0 came between the fast path's read and its store, so the
//!   index it runs under was not reserved); `three_pcpus_through_a_rollover`
//!   fails too, "vm1 runs under VMIDs 2 and 3 at once".
//! - the rollover's two steps swapped (the generation bumped after the
//!   `active` swaps instead of before): `fast_path_against_rollover`
//!   fails, "vm3 on cpu1 and vm1 on cpu0 share VMID 2" (cpu0's fast path
//!   read the old generation after the swap, its `vcpu_put` had replaced
//!   the 0, and its compare-and-swap succeeded on an unreserved index).
//!
//! Not caught: the generation's accesses weakened to `Relaxed`. The shim
//! brackets every `SeqCst` access with `SeqCst` fences under loom
//! (`kernel/src/sync.rs`), and the fences around the neighbouring `active`
//! accesses order the generation too. Without that bracketing loom
//! rejects the real code: it treats `SeqCst` as `AcqRel` and lets the fast
//! path read the old generation after a put that follows the rollover's
//! swap, which the single `SeqCst` order forbids (the same failure as
//! above, "share VMID 2").
#![cfg(loom)]

mod common;
use common::check;

use kernel::mem::vmid::{VmVmid, VmidAllocator, VmidLoad};
use loom::sync::Arc;
use loom::thread;
use std::collections::BTreeMap;
use std::sync::Mutex as StdMutex;

/// The ghost state: who runs what where, and each pCPU's TLB.
#[derive(Default)]
struct World {
    running: BTreeMap<usize, (usize, u16)>, // cpu -> (vm, vmid)
    tlb: BTreeMap<usize, BTreeMap<u16, usize>>,
    flushes: u64,
    /// What happened, for the failure message.
    log: Vec<String>,
}

impl World {
    fn loaded(&mut self, cpu: usize, vm: usize, l: VmidLoad) {
        self.log.push(format!("cpu{cpu} loads vm{vm}: {l:?}"));
        let log = self.log.join("; ");
        for (&other, &(ovm, ovmid)) in &self.running {
            assert!(
                other == cpu || ovmid != l.vmid || ovm == vm,
                "vm{vm} on cpu{cpu} and vm{ovm} on cpu{other} share VMID {}: {log}",
                l.vmid
            );
            assert!(
                other == cpu || ovm != vm || ovmid == l.vmid,
                "vm{vm} runs under VMIDs {} and {ovmid} at once: {log}",
                l.vmid
            );
        }
        let tlb = self.tlb.entry(cpu).or_default();
        if l.flush_local {
            tlb.clear();
        }
        if let Some(&stale) = tlb.get(&l.vmid) {
            assert_eq!(
                stale, vm,
                "cpu{cpu}: VMID {} has stale entries of vm{stale} for vm{vm}: {log}",
                l.vmid
            );
        }
        tlb.insert(l.vmid, vm);
        self.running.insert(cpu, (vm, l.vmid));
    }

    /// The rollover's broadcast invalidation: every TLB empty, then the
    /// pCPUs still in a guest fill theirs again.
    fn flush_all(&mut self) {
        self.flushes += 1;
        self.log.push("flush".into());
        self.tlb.clear();
        for (&cpu, &(vm, vmid)) in &self.running {
            self.tlb.entry(cpu).or_default().insert(vmid, vm);
        }
    }
}

/// Preemptions per schedule: these two-thread models have no schedule
/// with more (a higher bound explores the same interleavings), so each
/// model is exhaustive.
const BOUND: usize = 10;

/// One pCPU's program: `Some(vm)` loads that VM's vCPU, `None` puts it.
type Program = &'static [Option<usize>];

struct Machine {
    bits: u32,
    alloc: VmidAllocator,
    vms: Vec<VmVmid>,
    world: StdMutex<World>,
    broadcast: bool,
}

impl Machine {
    fn new(bits: u32, cpus: usize, vms: usize, broadcast: bool) -> Self {
        Machine {
            bits,
            alloc: VmidAllocator::new(bits, cpus),
            vms: (0..vms).map(|_| VmVmid::new()).collect(),
            world: StdMutex::new(World::default()),
            broadcast,
        }
    }

    fn run(&self, cpu: usize, prog: &[Option<usize>]) {
        for &step in prog {
            match step {
                Some(vm) => {
                    let flush = || {
                        if self.broadcast {
                            self.world.lock().unwrap().flush_all();
                        }
                    };
                    let l = self.alloc.vcpu_load(cpu, &self.vms[vm], &flush);
                    self.world.lock().unwrap().loaded(cpu, vm, l);
                }
                None => {
                    let mut w = self.world.lock().unwrap();
                    w.running.remove(&cpu);
                    w.log.push(format!("cpu{cpu} puts"));
                    drop(w);
                    self.alloc.vcpu_put(cpu);
                }
            }
        }
    }

    fn finish(&self) {
        let c = self.alloc.counters();
        assert_eq!(c.flushes, c.rollovers, "one TLB flush per rollover");
        if self.broadcast {
            assert_eq!(self.world.lock().unwrap().flushes, c.rollovers);
        }
        assert_eq!(self.alloc.generation(), (1 + c.rollovers) << self.bits);
    }
}

/// Runs `programs[c]` on pCPU `c` (pCPU 0 on the model's main thread)
/// after `setup` (one thread, in order: `(cpu, step)`), on a `bits`-bit
/// allocator, for both flush variants.
fn scenario(
    name: &str,
    bound: usize,
    bits: u32,
    vms: usize,
    setup: &'static [(usize, Option<usize>)],
    programs: &'static [Program],
) {
    for broadcast in [true, false] {
        let runs = check(bound, move || {
            let m = Arc::new(Machine::new(bits, programs.len(), vms, broadcast));
            for &(cpu, step) in setup {
                m.run(cpu, &[step]);
            }
            let others: Vec<_> = (1..programs.len())
                .map(|cpu| {
                    let m = m.clone();
                    thread::spawn(move || m.run(cpu, programs[cpu]))
                })
                .collect();
            m.run(0, programs[0]);
            for t in others {
                t.join().unwrap();
            }
            m.finish();
        });
        println!("vmid {name} (broadcast {broadcast}): {runs} interleavings");
        assert!(runs > 100, "only {runs} interleavings explored");
    }
}

/// vm0-2 hold indices 1-3; cpu0 runs vm0, cpu1 is idle.
const FULL: &[(usize, Option<usize>)] = &[
    (0, Some(0)),
    (0, None),
    (1, Some(1)),
    (1, None),
    (1, Some(2)),
    (1, None),
    (0, Some(0)),
];

/// cpu0 puts vm0 and reloads it, then switches to vm1 (fast-path
/// candidates: index 1 is the one the rollover hands to vm3 unless cpu0
/// holds it) while cpu1 brings in vm3, which rolls over.
#[test]
fn fast_path_against_rollover() {
    scenario(
        "fast path against rollover",
        BOUND,
        2,
        4,
        FULL,
        &[&[None, Some(0), None, Some(1)], &[Some(3)]],
    );
}

/// Both vCPUs of vm0 race, one of them through a rollover.
#[test]
fn one_vm_on_two_cpus_through_a_rollover() {
    scenario(
        "one VM on two pCPUs",
        BOUND,
        2,
        4,
        FULL,
        &[&[None, Some(0)], &[Some(3), None, Some(0)]],
    );
}

/// cpu0's TLB has entries of vm0, vm1 and vm2 (indices 1-3) and it keeps
/// running vm2; cpu1 ran vm0 and is idle. cpu1 brings in vm3 (a rollover:
/// vm3 gets index 1) while cpu0 switches to vm3. cpu0's `vcpu_put`
/// replaces the 0 the rollover left in its `active`, so only the
/// pending-flush flag keeps it from running vm3 on vm0's index-1 entries.
#[test]
fn put_after_rollover_still_flushes() {
    scenario(
        "put after rollover",
        BOUND,
        2,
        4,
        &[
            (0, Some(0)),
            (0, None),
            (0, Some(1)),
            (0, None),
            (0, Some(2)),
            (1, Some(0)),
            (1, None),
        ],
        &[&[None, Some(3)], &[Some(3)]],
    );
}

/// Three pCPUs, 3-bit VMIDs (indices 1-7, all taken; vm0 has 1 and runs
/// on cpu0, vm1 has 2 and runs on cpu2): cpu0 reloads vm0 and cpu2
/// reloads vm1 on their fast paths (a rollover hands index 1 to vm7
/// unless cpu0 holds it) while cpu1 brings in vm7,
/// which rolls over, then runs vm1 too. Three preemptions per schedule
/// (about 3,000 interleavings; four give 20,000).
#[test]
fn three_pcpus_through_a_rollover() {
    scenario(
        "three pCPUs",
        3,
        3,
        8,
        &[
            (0, Some(0)),
            (2, Some(1)),
            (1, Some(2)),
            (1, None),
            (1, Some(3)),
            (1, None),
            (1, Some(4)),
            (1, None),
            (1, Some(5)),
            (1, None),
            (1, Some(6)),
            (1, None),
        ],
        &[
            &[None, Some(0)],
            &[Some(7), None, Some(1)],
            &[None, Some(1)],
        ],
    );
}
