//! The VMID allocator against a model of what must hold: the VMIDs of the
//! VMs running at one time on different pCPUs differ (never two VMs with
//! one TLB tag), a VM keeps one id while it runs anywhere, 0 is never
//! handed out, ids fit the width, and a pCPU's first load after a rollover
//! asks for its local TLB flush.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::mem::vmid::{VmVmid, VmidAllocator};
use libfuzzer_sys::fuzz_target;
use std::cell::Cell;

#[derive(Arbitrary, Debug)]
enum Op {
    Load { cpu: u8, vm: u8 },
    Put { cpu: u8 },
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(bits), Ok(cpus), Ok(nvms)) = (
        u.int_in_range(4u32..=8),
        u.int_in_range(1usize..=8),
        u.int_in_range(1usize..=40),
    ) else {
        return;
    };
    let Ok(ops) = u.arbitrary::<Vec<Op>>() else {
        return;
    };
    if cpus + 2 > 1 << bits {
        return;
    }
    let a = VmidAllocator::new(bits, cpus);
    let vms: Vec<VmVmid> = (0..nvms).map(|_| VmVmid::new()).collect();
    let flushes = Cell::new(0u64);
    let flush = || flushes.set(flushes.get() + 1);
    // What each pCPU runs: (vm, vmid).
    let mut running: Vec<Option<(usize, u16)>> = vec![None; cpus];
    // Rollovers seen by each pCPU's last load.
    let mut seen = vec![0u64; cpus];
    for op in ops {
        match op {
            Op::Load { cpu, vm } => {
                let (cpu, vm) = (cpu as usize % cpus, vm as usize % nvms);
                if running[cpu].is_some() {
                    a.vcpu_put(cpu);
                    running[cpu] = None;
                }
                let before = a.counters().rollovers;
                let l = a.vcpu_load(cpu, &vms[vm], &flush);
                let after = a.counters().rollovers;
                assert_ne!(l.vmid, 0, "VMID 0 handed out");
                assert!(u32::from(l.vmid) < 1 << bits);
                assert_eq!(l.id, vms[vm].raw(), "the VM holds the id it was given");
                assert_eq!(l.id & ((1 << bits) - 1), u64::from(l.vmid));
                if after > seen[cpu] && seen[cpu] != 0 || after > before {
                    assert!(l.flush_local, "first load after a rollover must flush");
                }
                seen[cpu] = after.max(1);
                if after > before {
                    assert!(flushes.get() >= after, "a rollover flushes every VMID");
                }
                running[cpu] = Some((vm, l.vmid));
                let snapshot = running.clone();
                for (c, r) in snapshot.iter().enumerate() {
                    let Some((other, id)) = *r else { continue };
                    if other == vm {
                        // A rollover may have moved the VM: its other pCPUs
                        // reload before they enter it again; the id is the
                        // VM's one either way.
                        if vms[vm].raw() & ((1 << bits) - 1) == u64::from(id) {
                            continue;
                        }
                        running[c] = None;
                        a.vcpu_put(c);
                    } else {
                        assert_ne!(
                            id, l.vmid,
                            "vm {vm} on cpu {cpu} and vm {other} on cpu {c} share VMID {id}"
                        );
                    }
                }
            }
            Op::Put { cpu } => {
                let cpu = cpu as usize % cpus;
                if running[cpu].take().is_some() {
                    a.vcpu_put(cpu);
                }
            }
        }
    }
});
