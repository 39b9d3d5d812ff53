//! Multi-threaded stress test of the VMID allocator in the setup of seed 004:
//! 8 std threads as pCPUs, 4-bit VMIDs, 40 VMs x 2 vCPUs, random scheduling.
//!
//! After every `vcpu_load` the thread checks, under a lock, a shared table of
//! what each CPU runs: no two CPUs run different VMs under one VMID, no VM
//! runs under two VMIDs at once, and no CPU's (modelled) TLB holds entries of
//! another VM for the VMID it is about to use. TLB flushes must match
//! rollovers one to one.

use kernel::mem::vmid::{VmVmid, VmidAllocator, VmidLoad};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

const CPUS: usize = 8;
const VMS: usize = 40;
const VCPUS_PER_VM: usize = 2;
const SWITCHES_PER_CPU: usize = 20_000;

#[derive(Default)]
struct Table {
    /// cpu -> (vm, vmid) while loaded.
    running: [Option<(usize, u16)>; CPUS],
    /// cpu -> vmid -> the VM whose translations that CPU may cache.
    tlb: [[Option<usize>; 1 << 4]; CPUS],
    checks: u64,
}

impl Table {
    fn loaded(&mut self, cpu: usize, vm: usize, l: &VmidLoad) {
        let v = usize::from(l.vmid);
        assert!(v != 0 && v < 16, "VMID {v} out of the 4-bit range");
        for (other, slot) in self.running.iter().enumerate() {
            if let Some((ovm, ovmid)) = *slot {
                assert!(
                    other == cpu || ovmid != l.vmid || ovm == vm,
                    "vm{vm} (cpu{cpu}) and vm{ovm} (cpu{other}) both run under VMID {v}"
                );
                assert!(
                    ovm != vm || ovmid == l.vmid,
                    "vm{vm} runs under VMIDs {v} and {ovmid} at once"
                );
            }
        }
        if l.flush_local {
            self.tlb[cpu] = [None; 16];
        }
        if let Some(stale) = self.tlb[cpu][v] {
            assert_eq!(
                stale, vm,
                "cpu{cpu}: stale TLB entries of vm{stale} under VMID {v} for vm{vm}"
            );
        }
        self.tlb[cpu][v] = Some(vm);
        self.running[cpu] = Some((vm, l.vmid));
        self.checks += 1;
    }
}

fn stress(broadcast: bool, seed: u64) {
    let alloc = VmidAllocator::new(4, CPUS);
    if alloc.bits() != 4 {
        unreachable!("4 bits requested");
    }
    let vms: Vec<VmVmid> = (0..VMS).map(|_| VmVmid::new()).collect();
    let claimed: Vec<AtomicBool> = (0..VMS * VCPUS_PER_VM)
        .map(|_| AtomicBool::new(false))
        .collect();
    let table = Mutex::new(Table::default());
    let flushes = AtomicU64::new(0);
    let flush = || {
        flushes.fetch_add(1, Ordering::SeqCst);
        if broadcast {
            // Broadcast invalidation: every CPU's TLB.
            table.lock().unwrap().tlb = [[None; 16]; CPUS];
        }
    };
    let noflush = || {
        flushes.fetch_add(1, Ordering::SeqCst);
    };
    std::thread::scope(|s| {
        for cpu in 0..CPUS {
            let (alloc, vms, claimed, table) = (&alloc, &vms, &claimed, &table);
            let (flush, noflush) = (&flush, &noflush);
            s.spawn(move || {
                let mut x = seed ^ (cpu as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut rand = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut current: Option<usize> = None;
                for _ in 0..SWITCHES_PER_CPU {
                    // Deschedule.
                    if let Some(vcpu) = current.take() {
                        table.lock().unwrap().running[cpu] = None;
                        alloc.vcpu_put(cpu);
                        claimed[vcpu].store(false, Ordering::Release);
                    }
                    // Pick a vCPU not running elsewhere.
                    let vcpu = (rand() % (VMS * VCPUS_PER_VM) as u64) as usize;
                    if claimed[vcpu].swap(true, Ordering::Acquire) {
                        continue;
                    }
                    let vm = vcpu / VCPUS_PER_VM;
                    let l = if broadcast {
                        alloc.vcpu_load(cpu, &vms[vm], flush)
                    } else {
                        alloc.vcpu_load(cpu, &vms[vm], noflush)
                    };
                    table.lock().unwrap().loaded(cpu, vm, &l);
                    current = Some(vcpu);
                    if rand() % 8 == 0 {
                        std::thread::yield_now();
                    }
                }
                if current.is_some() {
                    table.lock().unwrap().running[cpu] = None;
                    alloc.vcpu_put(cpu);
                }
            });
        }
    });
    let c = alloc.counters();
    let checks = table.lock().unwrap().checks;
    assert_eq!(c.fast + c.slow, checks);
    assert!(
        c.rollovers > 10,
        "the setup must roll over often, got {}",
        c.rollovers
    );
    assert!(c.fast > 0, "fast path never taken");
    assert_eq!(c.flushes, c.rollovers, "one TLB flush per rollover");
    assert_eq!(
        flushes.load(Ordering::SeqCst),
        c.rollovers,
        "TlbFlush called once per rollover"
    );
    assert_eq!(alloc.generation(), (c.rollovers + 1) << 4);
}

#[test]
fn seed004_setup_broadcast_flush() {
    for seed in [1, 2] {
        stress(true, seed);
    }
}

#[test]
fn seed004_setup_local_flush() {
    for seed in [3, 4] {
        stress(false, seed);
    }
}
