//! The exit context over a real [`Hypervisor`] and scheduler, with a mock
//! backend that records what the arch is asked to do.

use super::*;
use crate::vcpu::ipi::Delivery;
use crate::vcpu::sched::{CpuMask, PutReason, RunState};
use crate::vcpu::stats::{ExitReason, Stats};
use crate::vm::{DeviceWork, Vcpu, VmParts};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use kestrel_abi::{loongarch, ret, stat};
use std::sync::Mutex as StdMutex;

const RAM: core::ops::Range<u64> = 0x4000_0000..0x5000_0000;

#[derive(Default)]
struct Mock {
    /// Physical IPIs sent, in order.
    kicks: StdMutex<Vec<usize>>,
}

struct MockVm {
    pending: Vec<AtomicBool>,
    entry: Vec<StdMutex<Option<(u64, u64)>>>,
}

impl DeviceWork for Mock {}

impl Backend for Mock {
    type VmState = MockVm;
    type VcpuState = ();

    fn load(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut ()) {}
    fn run(&self, _: &mut ExitCtx<'_, Self>, _: &mut ()) -> RunExit {
        RunExit::Continue
    }
    fn put(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut ()) {}
    fn kick(&self, cpu: usize) {
        self.kicks.lock().unwrap().push(cpu);
    }
    fn idle(&self, _: &Hypervisor<Self>, _: usize) {}
    fn slice_expired(&self, _: usize) -> bool {
        false
    }
    fn slice_start(&self, _: usize) {}
    fn now(&self) -> u64 {
        0
    }
}

impl ExitArch for Mock {
    fn raise_pv_ipi(&self, vm: &Vm<Self>, _sender: usize, target: usize) -> bool {
        vm.arch.pending[target].swap(true, Ordering::AcqRel)
    }
    fn set_entry(&self, vm: &Vm<Self>, index: usize, entry: Option<(u64, u64)>) -> bool {
        let Some(e) = vm.arch.entry.get(index) else {
            return false;
        };
        *e.lock().unwrap() = entry;
        true
    }
    fn is_guest_ram(&self, _: &Vm<Self>, addr: u64) -> bool {
        RAM.contains(&addr)
    }
}

/// A hypervisor with `cpus` pCPUs and one VM of `vcpus` vCPUs, vCPU i
/// pinned to pCPU i % cpus; the first `started` are on.
fn setup(cpus: usize, vcpus: usize, started: usize) -> (Hypervisor<Mock>, Arc<Vm<Mock>>) {
    let hv = Hypervisor::new(Mock::default(), CpuMask::first(cpus));
    let vm = hv
        .add_vm(VmParts {
            name: String::from("t"),
            arch: MockVm {
                pending: (0..vcpus).map(|_| AtomicBool::new(false)).collect(),
                entry: (0..vcpus).map(|_| StdMutex::new(None)).collect(),
            },
            stats: Arc::new(Stats::new()),
            vcpus: (0..vcpus).map(|_| ()).collect(),
            affinity: CpuMask::first(cpus),
            pinned: true,
            started,
            on_reboot: crate::vmm::vmconfig::OnReboot::Restart,
            pv_ipi: true,
            pv_time: None,
            bus: crate::dev::vdev::bus::Bus::new(),
            virtio: Default::default(),
        })
        .unwrap();
    (hv, vm)
}

fn window(ids: &[u64]) -> IpiWindow {
    let mut w = IpiWindow {
        low: 0,
        high: 0,
        min: 0,
    };
    for &i in ids {
        if i < 64 {
            w.low |= 1 << i;
        } else {
            w.high |= 1 << (i - 64);
        }
    }
    w
}

fn kicks(hv: &Hypervisor<Mock>) -> Vec<usize> {
    core::mem::take(&mut *hv.backend.kicks.lock().unwrap())
}

fn state(hv: &Hypervisor<Mock>, vm: &Vm<Mock>, i: usize) -> Option<RunState> {
    hv.sched.state(VcpuKey {
        vm: vm.slot,
        vcpu: i as u16,
    })
}

/// vCPU `i` (pinned to pCPU `i`) is picked and runs there.
fn run(hv: &Hypervisor<Mock>, i: usize) {
    assert_eq!(hv.sched.pick(i, 0).map(|k| k.vcpu), Some(i as u16));
}

/// vCPU `i` blocks; its pCPU finds nothing else and goes idle.
fn block(hv: &Hypervisor<Mock>, vm: &Vm<Mock>, i: usize) {
    let key = VcpuKey {
        vm: vm.slot,
        vcpu: i as u16,
    };
    hv.sched.put(i, key, PutReason::Blocked, 0).unwrap();
    assert_eq!(hv.sched.pick(i, 0), None);
}

#[test]
fn running_targets_are_kicked_once_and_counted() {
    // vCPU 0 sends from pCPU 0; 1 runs on pCPU 1, 2 is blocked with pCPU 2
    // idle, 3 is runnable but not running, 4 (pCPU 0's second) waits.
    let (hv, vm) = setup(4, 5, 5);
    for i in 0..4 {
        run(&hv, i);
    }
    block(&hv, &vm, 2);
    hv.sched
        .put(
            3,
            VcpuKey {
                vm: vm.slot,
                vcpu: 3,
            },
            PutReason::Preempted,
            0,
        )
        .unwrap();
    let mut ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    let out = ipi::send(&ctx, 0, &window(&[0, 1, 2, 3, 4])).unwrap();
    assert_eq!(
        out,
        IpiOutcome {
            delivered: 5,
            coalesced: 0,
            kicked: 1
        },
        "only the running vCPU 1 is kicked"
    );
    // In target order: the kick of pCPU 1, then the wake of vCPU 2 (its
    // idle pCPU gets an IPI: a wake, not a kick); the sender's pCPU 0
    // gets nothing.
    assert_eq!(kicks(&hv), [1, 2]);
    assert!(vm.arch.pending.iter().all(|p| p.load(Ordering::Relaxed)));
    assert_eq!(state(&hv, &vm, 2), Some(RunState::Runnable));
    assert_eq!(state(&hv, &vm, 1), Some(RunState::Running(1)));
    // Again: everything coalesces, nobody is woken or kicked.
    let out = ipi::send(&ctx, 0, &window(&[0, 1, 2, 3, 4])).unwrap();
    assert_eq!((out.delivered, out.coalesced, out.kicked), (0, 5, 0));
    assert!(kicks(&hv).is_empty());
    // Through the hypercall: the VM's counters see both sends.
    let args = HypercallArgs {
        code: loongarch::SERVICE_KVM,
        function: loongarch::FN_IPI,
        args: [0b10, 0, 0, 0, 0],
    };
    assert_eq!(ctx.hypercall(Abi::LoongArch, &args).code(), ret::SUCCESS);
    assert_eq!(vm.stats.read_index(stat::IPI_SENT), Some(1));
    assert_eq!(vm.stats.read_index(stat::IPI_COALESCED), Some(1));
}

#[test]
fn a_running_target_that_blocks_after_the_send_stays_runnable() {
    let (hv, vm) = setup(2, 2, 2);
    run(&hv, 0);
    run(&hv, 1);
    let ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    let out = ipi::send(&ctx, 0, &window(&[1])).unwrap();
    assert_eq!(out.kicked, 1);
    assert_eq!(kicks(&hv), [1]);
    // vCPU 1 had already decided to block before it saw the bit: the
    // remembered wake keeps it runnable.
    let key = VcpuKey {
        vm: vm.slot,
        vcpu: 1,
    };
    assert_eq!(
        hv.sched.put(1, key, PutReason::Blocked, 0).unwrap(),
        RunState::Runnable
    );
}

#[test]
fn self_ipi_marks_pending_and_touches_nobody() {
    let (hv, vm) = setup(2, 2, 2);
    run(&hv, 0);
    let ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    let out = ipi::send(&ctx, 0, &window(&[0])).unwrap();
    assert_eq!((out.delivered, out.kicked), (1, 0));
    assert!(vm.arch.pending[0].load(Ordering::Relaxed));
    assert!(kicks(&hv).is_empty());
    // The sender is not even told to stay awake: it samples the bit anyway.
    let key = VcpuKey {
        vm: vm.slot,
        vcpu: 0,
    };
    assert_eq!(
        hv.sched.put(0, key, PutReason::Blocked, 0).unwrap(),
        RunState::Blocked
    );
}

#[test]
fn delivery_never_names_the_callers_pcpu_or_an_off_vcpu_as_running() {
    let (hv, vm) = setup(2, 3, 1);
    run(&hv, 0);
    let ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    assert_eq!(ctx.deliver(0), Delivery::Pending, "the caller itself");
    assert_eq!(ctx.deliver(0), Delivery::Coalesced);
    assert_eq!(ctx.deliver(1), Delivery::Pending, "off");
    assert_eq!(ctx.deliver(2), Delivery::Pending, "off");
    assert!(kicks(&hv).is_empty());
    // Through the router: all coalesced now, nobody woken or kicked.
    let out = ipi::send(&ctx, 0, &window(&[1, 2])).unwrap();
    assert_eq!((out.delivered, out.coalesced, out.kicked), (0, 2, 0));
    assert!(kicks(&hv).is_empty());
    assert_eq!(state(&hv, &vm, 1), Some(RunState::Offline));
}

#[test]
fn hostile_windows_touch_nothing() {
    let (hv, vm) = setup(2, 3, 3);
    run(&hv, 0);
    run(&hv, 1);
    let mut ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    for (low, high, min) in [
        (0, 0, 0),
        (1, 0, 3),
        (0b1000, 0, 0),
        (1, 1, 0),
        (u64::MAX, u64::MAX, u64::MAX),
    ] {
        let args = HypercallArgs {
            code: loongarch::SERVICE_KVM,
            function: loongarch::FN_IPI,
            args: [low, high, min, 0, 0],
        };
        let r = ctx.hypercall(Abi::LoongArch, &args);
        assert_eq!(r.code(), ret::INVALID_PARAMETER);
    }
    assert!(vm.arch.pending.iter().all(|p| !p.load(Ordering::Relaxed)));
    assert!(kicks(&hv).is_empty());
    assert_eq!(vm.stats.read_index(stat::IPI_SENT), Some(0));
}

#[test]
fn psci_cpu_on_records_the_entry_and_powers_on() {
    let (hv, vm) = setup(2, 3, 1);
    run(&hv, 0);
    // pCPU 1 idles (nothing runnable there).
    assert_eq!(hv.sched.pick(1, 0), None);
    let mut ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    let on = |target: u64, entry: u64| [u64::from(psci::fid::CPU_ON) | 1 << 30, target, entry, 7];
    assert_eq!(
        ctx.psci(on(1, 0x4008_0000), || false),
        (psci::ret::SUCCESS as u64, RunExit::Continue)
    );
    assert_eq!(*vm.arch.entry[1].lock().unwrap(), Some((0x4008_0000, 7)));
    assert_eq!(state(&hv, &vm, 1), Some(RunState::Runnable));
    assert_eq!(kicks(&hv), [1], "its idle pCPU is woken");
    // Already on; an entry outside RAM or misaligned; no such vCPU.
    let bad = [
        (on(1, 0x4008_0000), psci::ret::ALREADY_ON),
        (on(2, 0x1000), psci::ret::INVALID_ADDRESS),
        (on(2, 0x4000_0002), psci::ret::INVALID_ADDRESS),
        (on(3, 0x4000_0000), psci::ret::INVALID_PARAMETERS),
    ];
    for (args, want) in bad {
        assert_eq!(ctx.psci(args, || false).0 as i64, want, "{args:x?}");
    }
    assert_eq!(*vm.arch.entry[2].lock().unwrap(), None);
    // A vCPU that is not off cannot be started: the entry is forgotten.
    assert!(!ctx.start_vcpu(0, 0x4000_0000, 0));
    assert_eq!(*vm.arch.entry[0].lock().unwrap(), None);
    assert!(!ctx.start_vcpu(9, 0x4000_0000, 0), "no such vCPU");
}

#[test]
fn psci_effects_become_run_exits() {
    let (hv, vm) = setup(1, 1, 1);
    run(&hv, 0);
    let mut ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    let f = |id: u32| [u64::from(id), 0, 0, 0];
    assert_eq!(
        ctx.psci(f(psci::fid::CPU_SUSPEND), || false).1,
        RunExit::Block
    );
    assert_eq!(
        ctx.psci(f(psci::fid::CPU_SUSPEND), || true).1,
        RunExit::Continue
    );
    assert_eq!(ctx.psci(f(psci::fid::CPU_OFF), || false).1, RunExit::CpuOff);
    assert_eq!(
        ctx.psci(f(psci::fid::SYSTEM_OFF), || false).1,
        RunExit::VmEnd(VmEnd::PowerOff)
    );
    assert_eq!(
        ctx.psci(f(psci::fid::SYSTEM_RESET), || false).1,
        RunExit::VmEnd(VmEnd::Reset)
    );
    let (x0, next) = ctx.psci([u64::MAX, 0, 0, 0], || false);
    assert_eq!(
        (x0 as i64, next),
        (psci::ret::NOT_SUPPORTED, RunExit::Continue)
    );
}

#[test]
fn the_context_names_its_vcpu_and_wakes_a_set_but_never_the_caller() {
    // vCPU i pinned to pCPU i % 3: 0, 1, 2 run; 2 blocks (pCPU 2 idles);
    // 3 waits on pCPU 0 behind 0.
    let (hv, vm) = setup(3, 4, 4);
    for i in 0..3 {
        run(&hv, i);
    }
    block(&hv, &vm, 2);
    let ctx = ExitCtx::new(&hv, &vm, 1, &vm.vcpus[1]);
    assert_eq!(ctx.index(), 1);
    assert!(core::ptr::eq(ctx.backend(), &hv.backend));
    assert!(!ctx.should_preempt(), "nobody else may run on pCPU 1");
    assert!(ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]).should_preempt());
    // 0 runs elsewhere: kicked; 1 is the caller: untouched; 2 is blocked:
    // woken (its idle pCPU gets an IPI); 9 does not exist.
    ctx.wake_set(VcpuSet((1 << 0) | (1 << 1) | (1 << 2) | (1 << 9)));
    assert_eq!(kicks(&hv), [0, 2]);
    assert_eq!(state(&hv, &vm, 2), Some(RunState::Runnable));
    let key = VcpuKey {
        vm: vm.slot,
        vcpu: 1,
    };
    assert_eq!(
        hv.sched.put(1, key, PutReason::Blocked, 0).unwrap(),
        RunState::Blocked,
        "no wake was recorded for the caller"
    );
}

#[test]
fn the_stats_hypercall_reads_each_exit_once_whoever_counted_it() {
    // vCPU exits are counted in the vCPU's own block by its pCPU; a
    // timer wake-up found by another pCPU in the VM's. The guest's
    // statistics call and the VM's summary add them up, each once.
    let (hv, vm) = setup(2, 2, 2);
    vm.vcpus[0].stats.exit_owned(ExitReason::Hypercall);
    vm.vcpus[0].stats.exit_owned(ExitReason::Mmio);
    vm.vcpus[1].stats.exit_owned(ExitReason::Mmio);
    vm.stats.exit(ExitReason::Timer);
    let mut ctx = ExitCtx::new(&hv, &vm, 0, &vm.vcpus[0]);
    let stat_of = |ctx: &mut ExitCtx<'_, Mock>, index: u64| {
        let args = HypercallArgs {
            code: loongarch::SERVICE_KVM,
            function: loongarch::FN_KESTREL_STATS,
            args: [index, 0, 0, 0, 0],
        };
        ctx.hypercall(Abi::LoongArch, &args).code()
    };
    assert_eq!(stat_of(&mut ctx, stat::EXIT_MMIO), 2);
    assert_eq!(stat_of(&mut ctx, stat::EXIT_HYPERCALL), 1);
    assert_eq!(stat_of(&mut ctx, stat::EXIT_TIMER), 1);
    assert_eq!(stat_of(&mut ctx, stat::EXIT_IDLE), 0);
    assert_eq!(stat_of(&mut ctx, stat::COUNT), ret::INVALID_PARAMETER);
    let total = vm.counters();
    assert_eq!(total.exits(), 4);
    assert_eq!(total.get(Counter::ExitMmio), 2);
}
