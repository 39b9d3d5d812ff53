//! The scheduler through its public API (add, pick, put, wake, power_on,
//! stop_vm), driven as the run loop drives it: a vCPU is never picked on
//! two pCPUs at once, never outside its affinity or on an offline pCPU,
//! never after its VM was stopped; `put` works exactly for the vCPU the
//! pCPU runs; the state it reports matches; and when every pCPU is idle a
//! runnable vCPU is picked by some pCPU of its affinity. A vCPU's run
//! delay (its stolen time) never goes back and never exceeds the time
//! that passed.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::vcpu::sched::{CpuMask, Kick, PutReason, RunState, Scheduler, VcpuKey};
use libfuzzer_sys::fuzz_target;
use std::collections::{HashMap, HashSet};

#[derive(Arbitrary, Debug)]
enum Op {
    Add {
        vm: u8,
        vcpu: u8,
        affinity: u16,
        start: bool,
    },
    Pick {
        cpu: u8,
    },
    Put {
        cpu: u8,
        why: u8,
    },
    PutWrong {
        cpu: u8,
        vm: u8,
        vcpu: u8,
    },
    Wake {
        vm: u8,
        vcpu: u8,
        from: u8,
    },
    PowerOn {
        vm: u8,
        vcpu: u8,
        from: u8,
    },
    Stop {
        vm: u8,
    },
    Drain,
}

const CPUS: usize = 8;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(online) = u.arbitrary::<u8>() else {
        return;
    };
    let Ok(ops) = u.arbitrary::<Vec<Op>>() else {
        return;
    };
    let online = CpuMask(u64::from(online) | 1);
    let s = Scheduler::new(online);
    // The counter the run loop would pass: it moves on with every operation.
    let clock = core::cell::Cell::new(0u64);
    let mut running: [Option<VcpuKey>; CPUS] = [None; CPUS];
    let mut affinity: HashMap<VcpuKey, CpuMask> = HashMap::new();
    let mut stopped: HashSet<u16> = HashSet::new();
    let key = |vm: u8, vcpu: u8| VcpuKey {
        vm: u16::from(vm % 4),
        vcpu: u16::from(vcpu % 4),
    };
    let check_kick = |k: Kick| {
        if let Kick::Cpu(c) = k {
            assert!(online.contains(c), "kick of offline pCPU {c}");
        }
    };
    let delays: core::cell::RefCell<HashMap<VcpuKey, u64>> = Default::default();
    let pick = |s: &Scheduler,
                cpu: usize,
                running: &mut [Option<VcpuKey>; CPUS],
                affinity: &HashMap<VcpuKey, CpuMask>,
                stopped: &HashSet<u16>| {
        assert!(running[cpu].is_none());
        let Some(p) = s.pick_run(cpu, clock.get()) else {
            return false;
        };
        let k = p.key;
        let last = delays.borrow_mut().insert(k, p.run_delay).unwrap_or(0);
        assert!(p.run_delay >= last, "{k:?}: run delay went back");
        assert!(
            p.run_delay <= clock.get(),
            "{k:?}: waited longer than time passed"
        );
        assert!(online.contains(cpu), "pick on offline pCPU {cpu}");
        assert!(!running.contains(&Some(k)), "{k:?} picked on two pCPUs");
        assert!(
            affinity[&k].contains(cpu),
            "{k:?} picked outside its affinity"
        );
        assert!(
            !stopped.contains(&k.vm),
            "{k:?} picked after its VM stopped"
        );
        assert_eq!(s.state(k), Some(RunState::Running(cpu)));
        running[cpu] = Some(k);
        true
    };
    for op in ops {
        clock.set(clock.get() + 997);
        match op {
            Op::Add {
                vm,
                vcpu,
                affinity: a,
                start,
            } => {
                let k = key(vm, vcpu);
                if stopped.contains(&k.vm) {
                    // VMs are created whole before any is stopped.
                    continue;
                }
                let mask = CpuMask(u64::from(a));
                let r = s.add(k, mask, start);
                if !affinity.contains_key(&k) && !mask.and(online).is_empty() {
                    assert!(r.is_ok(), "{r:?}");
                    affinity.insert(k, mask);
                } else {
                    assert!(r.is_err());
                }
            }
            Op::Pick { cpu } => {
                let cpu = cpu as usize % CPUS;
                if running[cpu].is_none() {
                    pick(&s, cpu, &mut running, &affinity, &stopped);
                }
            }
            Op::Put { cpu, why } => {
                let cpu = cpu as usize % CPUS;
                let Some(k) = running[cpu].take() else {
                    continue;
                };
                let why = [PutReason::Preempted, PutReason::Blocked, PutReason::Offline]
                    [why as usize % 3];
                let st = s
                    .put(cpu, k, why, clock.get())
                    .expect("put of the running vCPU");
                assert!(!matches!(st, RunState::Running(_)));
                assert_eq!(s.state(k), Some(st));
            }
            Op::PutWrong { cpu, vm, vcpu } => {
                let cpu = cpu as usize % CPUS;
                let k = key(vm, vcpu);
                if running[cpu] != Some(k) {
                    let before = s.state(k);
                    let r = s.put(cpu, k, PutReason::Preempted, clock.get());
                    // A stopped vCPU stays stopped (stop_vm may beat the put).
                    assert!(
                        r.is_err()
                            || (before == Some(RunState::Stopped) && r == Ok(RunState::Stopped)),
                        "{r:?}"
                    );
                    assert_eq!(s.state(k), before);
                }
            }
            Op::Wake { vm, vcpu, from } => {
                if let Ok(k) = s.wake(key(vm, vcpu), from as usize % CPUS, clock.get()) {
                    check_kick(k);
                }
            }
            Op::PowerOn { vm, vcpu, from } => {
                if let Ok(k) = s.power_on(key(vm, vcpu), from as usize % CPUS) {
                    check_kick(k);
                }
            }
            Op::Stop { vm } => {
                let vm = u16::from(vm % 4);
                let kicks = s.stop_vm(vm);
                stopped.insert(vm);
                for (c, r) in running.iter_mut().enumerate() {
                    if r.is_some_and(|k| k.vm == vm) {
                        assert!(kicks.contains(c), "stop_vm did not report pCPU {c}");
                        let k = r.take().unwrap();
                        let _ = s.put(c, k, PutReason::Preempted, clock.get());
                        assert_eq!(s.state(k), Some(RunState::Stopped));
                    }
                }
                assert!(!s.vm_alive(vm) || affinity.keys().all(|k| k.vm != vm));
            }
            Op::Drain => {
                // Everyone puts; then a runnable vCPU must be picked by someone.
                for (cpu, r) in running.iter_mut().enumerate() {
                    if let Some(k) = r.take() {
                        s.put(cpu, k, PutReason::Preempted, clock.get())
                            .expect("put");
                    }
                }
                let runnable = affinity
                    .keys()
                    .any(|&k| s.state(k) == Some(RunState::Runnable));
                let mut any = false;
                for cpu in online.iter().filter(|&c| c < CPUS) {
                    any |= pick(&s, cpu, &mut running, &affinity, &stopped);
                }
                assert_eq!(
                    any, runnable,
                    "a runnable vCPU waits while every pCPU idles"
                );
            }
        }
    }
});
