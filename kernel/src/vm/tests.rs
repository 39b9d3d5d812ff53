//! The run loop and scheduler together, with a fake backend whose vCPUs
//! run small scripts, on host threads standing in for pCPUs.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex as StdMutex;
use std::vec;

#[derive(Clone, Debug)]
enum Op {
    /// Run this many times (each a `Continue`).
    Work(u32),
    /// Wait for an IPI (blocks unless one is pending), then consume it.
    WaitIpi,
    /// Power on vCPU n of the same VM.
    PowerOn(usize),
    /// Send an IPI to vCPU n of the same VM.
    Ipi(usize),
    CpuOff,
    PowerOff,
    Fatal,
    /// Ask for a reset until the VM has restarted this many times, then
    /// power off.
    ResetUntil(u64),
    /// Wait (block) until the VM's devices have no pending work.
    WaitDevices,
    /// Work until the test releases the VMs ([`Fake::release`]), then power off.
    UntilReleased,
    /// Power on vCPU n of the same VM, again and again (whatever the
    /// answer), forever.
    HammerOn(usize),
    /// Stay in the guest (one long run) while [`Fake::hold`] is set.
    Hold,
    /// Work until some vCPU is in [`Op::Hold`] (or has been).
    WaitHeld,
}

struct Ctx {
    script: Vec<Op>,
    pc: usize,
    left: u32,
    /// pCPUs this vCPU ran on.
    ran_on: Vec<usize>,
}

impl Ctx {
    fn new(script: Vec<Op>) -> Self {
        Ctx {
            script,
            pc: 0,
            left: 0,
            ran_on: Vec::new(),
        }
    }
}

/// Guest RAM and interrupt recorder of the one test with devices
/// ([`Fake::device_work`] continues its work there).
static DEVICE_ENV: StdMutex<Option<crate::dev::virtio::mmio::tests::Env>> = StdMutex::new(None);
static DEVICE_WORK: AtomicUsize = AtomicUsize::new(0);

struct VmArch {
    /// IPIs received and not yet consumed, per vCPU (a count, so pings
    /// from several senders are not merged).
    pending: Vec<AtomicUsize>,
    /// Runs of its vCPUs (guest entries).
    runs: AtomicUsize,
}

std::thread_local! {
    /// The pCPU this test thread stands for.
    static THIS_CPU: core::cell::Cell<usize> = const { core::cell::Cell::new(usize::MAX) };
}

struct Fake {
    cpus: usize,
    /// The vCPU loaded on each pCPU, to catch double loads.
    loaded: StdMutex<Vec<Option<VcpuKey>>>,
    slice_runs: Vec<AtomicUsize>,
    idles: AtomicUsize,
    /// The fake platform counter: one tick per `run` on any pCPU.
    clock: AtomicU64,
    /// A hung run loop fails the test instead of hanging it.
    deadline: std::time::Instant,
    /// VMs rebuilt for a restart.
    rebuilds: AtomicUsize,
    /// Ends [`Op::UntilReleased`].
    release: AtomicBool,
    /// Keeps an [`Op::Hold`] in the guest.
    hold: AtomicBool,
    /// An [`Op::Hold`] began.
    holding: AtomicBool,
    /// The pCPU of each rebuild, in order.
    rebuilt_on: StdMutex<Vec<usize>>,
}

impl Fake {
    fn check_deadline(&self) {
        assert!(
            std::time::Instant::now() < self.deadline,
            "run loop made no end within 20 s (livelock?)"
        );
    }
}

/// The fake clock at the start of each device-work round.
static DEVICE_WORK_AT: StdMutex<Vec<u64>> = StdMutex::new(Vec::new());
/// The fake clock ticks a round of device work takes.
const DEVICE_WORK_TICKS: u64 = 4;

impl DeviceWork for Fake {
    fn device_work(hv: &Hypervisor<Self>, vm: &Vm<Self>, _: usize) {
        DEVICE_WORK_AT.lock().unwrap().push(
            hv.backend
                .clock
                .fetch_add(DEVICE_WORK_TICKS, Ordering::Relaxed),
        );
        let mut env = DEVICE_ENV.lock().unwrap();
        let env = env
            .as_mut()
            .expect("device work without the test's devices");
        if let Some(c) = &vm.virtio.console {
            c.resume(env, &mut crate::dev::virtio::Budget::exit());
        }
        DEVICE_WORK.fetch_add(1, Ordering::Relaxed);
    }
}

impl Backend for Fake {
    type VmState = VmArch;
    type VcpuState = Ctx;

    fn load(&self, cpu: usize, _vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut Ctx) {
        let mut loaded = self.loaded.lock().unwrap();
        assert_eq!(
            loaded[cpu], None,
            "pCPU {cpu} loads a vCPU while one is loaded"
        );
        assert!(
            !loaded.contains(&Some(vcpu.key)),
            "{:?} loaded on two pCPUs",
            vcpu.key
        );
        loaded[cpu] = Some(vcpu.key);
        ctx.ran_on.push(cpu);
    }

    fn run(&self, env: &mut ExitCtx<'_, Self>, ctx: &mut Ctx) -> RunExit {
        let (hv, cpu, vm, vcpu) = (env.hv, env.cpu, env.vm, env.vcpu);
        self.check_deadline();
        self.slice_runs[cpu].fetch_add(1, Ordering::Relaxed);
        self.clock.fetch_add(1, Ordering::Relaxed);
        vm.arch.runs.fetch_add(1, Ordering::Relaxed);
        let Some(op) = ctx.script.get(ctx.pc).cloned() else {
            return RunExit::CpuOff;
        };
        match op {
            Op::Work(n) => {
                ctx.left += 1;
                if ctx.left >= n {
                    ctx.left = 0;
                    ctx.pc += 1;
                }
                RunExit::Continue
            }
            Op::WaitIpi => {
                let pending = &vm.arch.pending[vcpu.index];
                if pending
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
                {
                    ctx.pc += 1;
                    RunExit::Continue
                } else {
                    RunExit::Block
                }
            }
            Op::PowerOn(n) => {
                ctx.pc += 1;
                hv.power_on(vm, n, cpu).unwrap();
                RunExit::Continue
            }
            Op::Ipi(n) => {
                ctx.pc += 1;
                vm.arch.pending[n].fetch_add(1, Ordering::Release);
                hv.wake(vm.vcpus[n].key, cpu);
                RunExit::Continue
            }
            Op::CpuOff => {
                ctx.pc += 1;
                RunExit::CpuOff
            }
            Op::PowerOff => RunExit::VmEnd(VmEnd::PowerOff),
            Op::Fatal => RunExit::VmEnd(VmEnd::Fatal("guest did something bad".into())),
            Op::ResetUntil(n) if vm.restarts() < n => RunExit::VmEnd(VmEnd::Reset),
            Op::ResetUntil(_) => RunExit::VmEnd(VmEnd::PowerOff),
            Op::WaitDevices if vm.virtio.pending() => RunExit::Block,
            Op::WaitDevices => {
                ctx.pc += 1;
                RunExit::Continue
            }
            Op::UntilReleased if self.release.load(Ordering::Acquire) => {
                RunExit::VmEnd(VmEnd::PowerOff)
            }
            Op::UntilReleased => RunExit::Continue,
            Op::HammerOn(n) => {
                let _ = hv.power_on(vm, n, cpu);
                RunExit::Continue
            }
            Op::WaitHeld => {
                if self.holding.load(Ordering::Acquire) {
                    ctx.pc += 1;
                }
                RunExit::Continue
            }
            Op::Hold => {
                self.holding.store(true, Ordering::Release);
                while self.hold.load(Ordering::Acquire) {
                    self.check_deadline();
                    std::thread::yield_now();
                }
                ctx.pc += 1;
                RunExit::Continue
            }
        }
    }

    fn can_restart(&self) -> bool {
        true
    }

    fn restart_vm(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [crate::base::lock::MutexGuard<'_, Ctx>],
    ) -> Result<(), String> {
        let loaded = self.loaded.lock().unwrap();
        assert!(
            !loaded.iter().flatten().any(|k| k.vm == vm.slot),
            "a vCPU of the restarting VM is loaded: {loaded:?}"
        );
        for ctx in vcpus.iter_mut() {
            ctx.pc = 0;
            ctx.left = 0;
        }
        for p in &vm.arch.pending {
            p.store(0, Ordering::Release);
        }
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        self.rebuilt_on
            .lock()
            .unwrap()
            .push(THIS_CPU.with(|c| c.get()));
        Ok(())
    }

    fn put(&self, cpu: usize, _vm: &Vm<Self>, vcpu: &Vcpu<Self>, _ctx: &mut Ctx) {
        let mut loaded = self.loaded.lock().unwrap();
        assert_eq!(loaded[cpu], Some(vcpu.key));
        loaded[cpu] = None;
    }

    fn kick(&self, cpu: usize) {
        assert!(cpu < self.cpus);
    }

    fn deadline_passed(&self, vm: &Vm<Self>, vcpu: usize, which: usize) -> bool {
        // Deadline 1 stands for an interrupt the guest has masked: no wake.
        vm.arch.pending[vcpu].fetch_add(usize::from(which != 1), Ordering::Release);
        which != 1
    }

    fn idle(&self, _hv: &Hypervisor<Self>, _cpu: usize) {
        self.check_deadline();
        self.idles.fetch_add(1, Ordering::Relaxed);
        std::thread::yield_now();
    }

    fn slice_expired(&self, cpu: usize) -> bool {
        self.slice_runs[cpu].load(Ordering::Relaxed) >= 7
    }

    fn slice_start(&self, cpu: usize) {
        self.slice_runs[cpu].store(0, Ordering::Relaxed);
    }

    fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct Log {
    ended: StdMutex<Vec<(String, VmEnd)>>,
    all: AtomicUsize,
    restarted: StdMutex<Vec<(String, u64)>>,
    started: StdMutex<Vec<String>>,
}

impl Observer for Log {
    fn vm_restarted(&self, vm: &str, n: u64) {
        self.restarted.lock().unwrap().push((vm.into(), n));
    }
    fn vm_ended(&self, vm: &str, why: &VmEnd) {
        self.ended.lock().unwrap().push((vm.into(), why.clone()));
    }
    fn vm_started(&self, vm: &str) {
        self.started.lock().unwrap().push(vm.into());
    }
    fn all_ended(&self) {
        self.all.fetch_add(1, Ordering::Relaxed);
    }
}

fn hv(cpus: usize) -> Hypervisor<Fake> {
    Hypervisor::new(
        Fake {
            cpus,
            loaded: StdMutex::new(vec![None; cpus]),
            slice_runs: (0..cpus).map(|_| AtomicUsize::new(0)).collect(),
            idles: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(20),
            rebuilds: AtomicUsize::new(0),
            release: AtomicBool::new(false),
            hold: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            rebuilt_on: StdMutex::new(Vec::new()),
        },
        CpuMask::first(cpus),
    )
}

fn add(
    hv: &Hypervisor<Fake>,
    name: &str,
    scripts: Vec<Vec<Op>>,
    affinity: CpuMask,
    pinned: bool,
) -> Arc<Vm<Fake>> {
    add_with(hv, name, scripts, affinity, pinned, OnReboot::Restart)
}

fn add_with(
    hv: &Hypervisor<Fake>,
    name: &str,
    scripts: Vec<Vec<Op>>,
    affinity: CpuMask,
    pinned: bool,
    on_reboot: OnReboot,
) -> Arc<Vm<Fake>> {
    let n = scripts.len();
    hv.add_vm(VmParts {
        name: name.into(),
        arch: VmArch {
            pending: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            runs: AtomicUsize::new(0),
        },
        bus: crate::dev::vdev::bus::Bus::new(),
        virtio: Default::default(),
        stats: Arc::new(Stats::new()),
        vcpus: scripts.into_iter().map(Ctx::new).collect(),
        affinity,
        pinned,
        started: 1,
        on_reboot,
        pv_ipi: true,
        pv_time: None,
    })
    .unwrap()
}

fn run_all(hv: &Hypervisor<Fake>, cpus: usize, log: &Log) {
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            s.spawn(move || run_cpu(hv, cpu, log));
        }
    });
}

/// pCPU `cpu`'s run loop, on this thread.
fn run_cpu(hv: &Hypervisor<Fake>, cpu: usize, log: &Log) {
    THIS_CPU.with(|c| c.set(cpu));
    hv.run_cpu(cpu, log);
}

/// An SMP guest: the boot vCPU starts the others, each works, pings the boot
/// vCPU and turns itself off; the boot vCPU waits for the pings and powers off.
fn smp_guest(vcpus: usize, work: u32) -> Vec<Vec<Op>> {
    let mut boot = vec![Op::Work(work)];
    boot.extend((1..vcpus).map(Op::PowerOn));
    boot.push(Op::Work(work));
    boot.extend((1..vcpus).map(|_| Op::WaitIpi));
    boot.push(Op::PowerOff);
    let mut scripts = vec![boot];
    for _ in 1..vcpus {
        scripts.push(vec![Op::Work(work), Op::Ipi(0), Op::CpuOff]);
    }
    scripts
}

#[test]
fn several_smp_vms_share_pcpus_and_all_end() {
    let cpus = 3;
    let hv = hv(cpus);
    let log = Log::default();
    let a = add(&hv, "a", smp_guest(4, 200), CpuMask::first(cpus), false);
    let b = add(&hv, "b", smp_guest(4, 150), CpuMask::first(cpus), false);
    let c = add(&hv, "c", smp_guest(2, 300), CpuMask::first(cpus), true);
    run_all(&hv, cpus, &log);
    for vm in [&a, &b, &c] {
        assert_eq!(vm.end_reason(), Some(VmEnd::PowerOff), "{}", vm.name);
        for v in &vm.vcpus {
            let ctx = v.ctx.lock();
            if v.index == 0 {
                assert_eq!(
                    ctx.pc,
                    ctx.script.len() - 1,
                    "{}: boot vCPU did not reach PowerOff",
                    vm.name
                );
            } else {
                // The VM may power off before a secondary executes its CpuOff.
                assert!(
                    ctx.pc >= 2,
                    "{}/{}: ping never sent (pc {})",
                    vm.name,
                    v.index,
                    ctx.pc
                );
            }
        }
    }
    assert_eq!(
        log.all.load(Ordering::Relaxed),
        1,
        "all_ended is reported once"
    );
    assert_eq!(log.ended.lock().unwrap().len(), 3);
    // Pinned VM c: vCPU i ran only on pCPU i.
    for v in &c.vcpus {
        let ctx = v.ctx.lock();
        assert!(
            ctx.ran_on.iter().all(|&p| p == v.index),
            "pinned vCPU moved: {:?}",
            ctx.ran_on
        );
    }
    // Time slices preempted the long runs: vCPUs were loaded many times.
    assert!(hv.loads.load(Ordering::Relaxed) > 20);
}

#[test]
fn a_fatal_vm_ends_alone() {
    let cpus = 2;
    let hv = hv(cpus);
    let log = Log::default();
    let bad = add(
        &hv,
        "bad",
        vec![vec![Op::Work(10), Op::Fatal], vec![Op::Work(1_000_000)]],
        CpuMask::first(cpus),
        false,
    );
    let good = add(&hv, "good", smp_guest(2, 500), CpuMask::first(cpus), false);
    // The bad VM's second vCPU would work forever: starting it shows a VM end
    // stops running vCPUs too.
    hv.power_on(&bad, 1, 0).unwrap();
    run_all(&hv, cpus, &log);
    assert!(matches!(bad.end_reason(), Some(VmEnd::Fatal(_))));
    assert_eq!(
        hv.exit_status(),
        ExitStatus::Failure,
        "one VM stopped by kestrel"
    );
    assert_eq!(good.end_reason(), Some(VmEnd::PowerOff));
    assert!(bad.vcpus[1].ctx.lock().left < 1_000_000);
}

#[test]
fn a_reset_restarts_the_vm_with_its_vcpus_as_at_creation() {
    let cpus = 3;
    let hv = hv(cpus);
    let log = Log::default();
    // vCPU 0 starts vCPU 1, which works on (on another pCPU) while vCPU 0
    // asks for the reset: it must be stopped and put before the rebuild
    // (the fake backend checks). vCPU 2 is never started: it stays off.
    let vm = add(
        &hv,
        "reboots",
        vec![
            vec![Op::PowerOn(1), Op::Work(20), Op::ResetUntil(25)],
            vec![Op::Work(1_000_000)],
            vec![Op::Work(1_000_000)],
        ],
        CpuMask::first(cpus),
        false,
    );
    let other = add(
        &hv,
        "other",
        smp_guest(2, 3000),
        CpuMask::first(cpus),
        false,
    );
    run_all(&hv, cpus, &log);
    assert_eq!(vm.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(other.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(vm.restarts(), 25);
    assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 25);
    // Each restart reported once, in order (a report comes before the VM
    // may run again, so before its next restart).
    let restarted = log.restarted.lock().unwrap().clone();
    let want: Vec<(String, u64)> = (1..=25).map(|n| ("reboots".into(), n)).collect();
    assert_eq!(restarted, want);
    assert!(
        vm.vcpus[2].ctx.lock().ran_on.is_empty(),
        "vCPU 2 stayed off"
    );
    // vCPU 1 ran in several boots: each restart took it off its pCPU.
    assert!(vm.vcpus[1].ctx.lock().left < 1_000_000);
    assert_eq!(hv.exit_status(), ExitStatus::Success);
    assert_eq!(log.all.load(Ordering::Relaxed), 1);
}

#[test]
fn a_reset_with_on_reboot_stop_ends_the_vm() {
    let hv = hv(2);
    let log = Log::default();
    let vm = add_with(
        &hv,
        "stops",
        vec![
            vec![Op::PowerOn(1), Op::Work(5), Op::ResetUntil(1)],
            vec![Op::Work(1_000_000)],
        ],
        CpuMask::first(2),
        false,
        OnReboot::Stop,
    );
    run_all(&hv, 2, &log);
    assert_eq!(vm.end_reason(), Some(VmEnd::Reset));
    assert_eq!(vm.restarts(), 0);
    assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 0);
    assert!(log.restarted.lock().unwrap().is_empty());
    assert_eq!(hv.exit_status(), ExitStatus::Failure);
}

#[test]
fn a_reset_racing_a_power_off_leaves_the_vm_ended() {
    // vCPU 1 powers the VM off while vCPU 0 keeps asking for resets: the
    // VM ends once, whichever comes first, and never runs after its end.
    for _ in 0..20 {
        let hv = hv(2);
        let log = Log::default();
        let vm = add(
            &hv,
            "race",
            vec![
                vec![Op::PowerOn(1), Op::ResetUntil(u64::MAX)],
                vec![Op::Work(2), Op::PowerOff],
            ],
            CpuMask::first(2),
            false,
        );
        run_all(&hv, 2, &log);
        assert_eq!(vm.end_reason(), Some(VmEnd::PowerOff));
        assert_eq!(log.ended.lock().unwrap().len(), 1);
        assert!(!vm.is_stopping() || vm.has_ended());
    }
}

#[test]
fn a_vm_whose_vcpus_all_turn_off_has_ended() {
    let hv = hv(1);
    let log = Log::default();
    let vm = add(
        &hv,
        "quiet",
        vec![vec![Op::Work(3), Op::CpuOff]],
        CpuMask::first(1),
        false,
    );
    run_all(&hv, 1, &log);
    assert_eq!(vm.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(log.all.load(Ordering::Relaxed), 1);
}

#[test]
fn power_on_of_a_running_vcpu_is_refused() {
    let hv = hv(1);
    let vm = add(&hv, "x", smp_guest(2, 1), CpuMask::first(1), false);
    assert_eq!(
        hv.power_on(&vm, 0, 0),
        Err(SchedError::WrongState(RunState::Runnable))
    );
    assert!(hv.vcpu_is_on(&vm, 0));
    assert!(!hv.vcpu_is_on(&vm, 1));
    assert_eq!(hv.power_on(&vm, 5, 0), Err(SchedError::NoSuchVcpu));
}

/// The two VMs the deadline tests watch: "a" with two vCPUs (the first
/// waiting for an IPI), "b" with one waiting vCPU, on 2 pCPUs.
fn deadline_vms(hv: &Hypervisor<Fake>) -> (Arc<Vm<Fake>>, Arc<Vm<Fake>>) {
    let a = add(
        hv,
        "a",
        vec![vec![Op::WaitIpi], vec![]],
        CpuMask::first(2),
        false,
    );
    let b = add(hv, "b", vec![vec![Op::WaitIpi]], CpuMask::first(2), false);
    (a, b)
}

#[test]
fn deadline_bound_is_never_above_a_set_deadline() {
    let hv = hv(2);
    let (a, b) = deadline_vms(&hv);
    hv.publish();
    assert_eq!(hv.deadline_bound(0), u64::MAX, "nothing set");
    a.vcpus[1].deadlines.set(1, 500);
    b.vcpus[0].deadlines.set(0, 300);
    assert_eq!(hv.deadline_bound(0), 300);
    // The vCPU holding the bound is loaded: its deadlines go, the bound is
    // recomputed at the next look, not left at 300 (a timer interrupt for
    // nothing) and never raised past 500.
    b.vcpus[0].deadlines.clear();
    assert_eq!(hv.deadline_bound(10), 500);
    // Clearing a vCPU that does not hold the bound leaves it alone.
    b.vcpus[0].deadlines.set(2, 700);
    b.vcpus[0].deadlines.clear();
    assert_eq!(
        hv.deadline_bound(10),
        500,
        "stale-low is allowed, recomputed once passed"
    );
    assert_eq!(
        hv.deadline_bound(600),
        500,
        "passed, not yet taken: still due"
    );
    hv.check_timers(0, 600);
    assert_eq!(hv.deadline_bound(600), u64::MAX, "taken: none set");
    // Taken deadlines: the bound passes, is recomputed, moves on.
    a.vcpus[0].deadlines.set(0, 40);
    a.vcpus[1].deadlines.set(0, 90);
    assert_eq!(hv.deadline_bound(0), 40);
    hv.check_timers(0, 50);
    assert_eq!(a.vcpus[0].deadlines.get(0), u64::MAX, "taken");
    assert_eq!(hv.deadline_bound(50), 90);
    // Below the bound nothing is looked at; at it the deadline is taken.
    hv.check_timers(0, 89);
    assert_eq!(a.vcpus[1].deadlines.get(0), 90);
    hv.check_timers(0, 90);
    assert_eq!(a.vcpus[1].deadlines.get(0), u64::MAX);
    // A lower deadline set later lowers the bound at once.
    a.vcpus[0].deadlines.set(2, 1000);
    a.vcpus[1].deadlines.set(2, 95);
    assert_eq!(hv.deadline_bound(91), 95);
}

#[test]
fn passed_deadlines_wake_blocked_vcpus_once() {
    let hv = hv(2);
    let (a, b) = deadline_vms(&hv);
    assert!(hv.created().is_empty(), "nothing before publish");
    hv.check_timers(0, u64::MAX);
    hv.publish();
    assert_eq!(hv.created().len(), 2);
    assert_eq!(hv.next_deadline(), u64::MAX);
    a.vcpus[0].deadlines.set(0, 50);
    a.vcpus[0].deadlines.set(2, 40);
    b.vcpus[0].deadlines.set(1, 30);
    assert_eq!(a.vcpus[0].deadlines.earliest(), 40);
    assert_eq!(hv.next_deadline(), 30);
    // Nothing has passed at 29.
    hv.check_timers(1, 29);
    assert_eq!(
        a.stats
            .snapshot()
            .get(crate::vcpu::stats::Counter::ExitTimer),
        0
    );
    // At 45: b's masked deadline passes without a wake, a's slot 2 wakes a.
    hv.check_timers(1, 45);
    assert_eq!(
        b.stats
            .snapshot()
            .get(crate::vcpu::stats::Counter::ExitTimer),
        0
    );
    assert_eq!(b.vcpus[0].deadlines.get(1), u64::MAX, "taken even so");
    assert_eq!(
        a.stats
            .snapshot()
            .get(crate::vcpu::stats::Counter::ExitTimer),
        1
    );
    assert_eq!(a.arch.pending[0].load(Ordering::Acquire), 1);
    assert_eq!(hv.next_deadline(), 50);
    hv.check_timers(1, 100);
    assert_eq!(
        a.stats
            .snapshot()
            .get(crate::vcpu::stats::Counter::ExitTimer),
        2
    );
    assert_eq!(hv.next_deadline(), u64::MAX);
    hv.check_timers(1, 200);
    assert_eq!(
        a.stats
            .snapshot()
            .get(crate::vcpu::stats::Counter::ExitTimer),
        2
    );
    // An ended VM's deadlines are neither watched nor taken.
    b.vcpus[0].deadlines.set(0, 10);
    hv.end_vm(&b, VmEnd::PowerOff, 0, &Log::default());
    assert_eq!(hv.next_deadline(), u64::MAX);
    hv.check_timers(0, 300);
    assert_eq!(b.vcpus[0].deadlines.get(0), 10);
}

/// The work is over only once the last VM's end has been reported: an
/// observer still printing a VM's last lines sees `all_ended` false, so no
/// pCPU leaves its run loop (and powers the machine off) under it.
#[test]
fn all_ended_waits_for_the_last_report() {
    struct Peek<'a> {
        hv: &'a Hypervisor<Fake>,
        seen: std::sync::Mutex<Vec<bool>>,
    }
    impl Observer for Peek<'_> {
        fn vm_ended(&self, _: &str, _: &VmEnd) {
            self.seen.lock().unwrap().push(self.hv.all_ended());
        }
        fn all_ended(&self) {}
    }
    let hv = hv(1);
    let a = add(&hv, "a", vec![vec![]], CpuMask::first(1), false);
    let b = add(&hv, "b", vec![vec![]], CpuMask::first(1), false);
    let peek = Peek {
        hv: &hv,
        seen: std::sync::Mutex::new(Vec::new()),
    };
    hv.end_vm(&a, VmEnd::PowerOff, 0, &peek);
    hv.end_vm(&b, VmEnd::PowerOff, 0, &peek);
    assert_eq!(*peek.seen.lock().unwrap(), [false, false]);
    assert!(hv.all_ended());
    assert!(a.has_ended() && b.has_ended());
}

/// No pCPU leaves its run loop while another one is still telling the
/// observer that the work is over: the boot pCPU powers off when it
/// returns, and the report (kestrel's host counters) would be lost.
#[test]
fn no_pcpu_returns_before_the_final_report() {
    struct Slow {
        told: AtomicBool,
        calls: AtomicU64,
    }
    impl Observer for Slow {
        fn vm_ended(&self, _: &str, _: &VmEnd) {}
        fn all_ended(&self) {
            self.calls.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(50));
            self.told.store(true, Ordering::SeqCst);
        }
    }
    let hv = hv(2);
    let a = add(&hv, "a", vec![vec![]], CpuMask::first(2), false);
    hv.end_vm(&a, VmEnd::PowerOff, 0, &Log::default());
    let slow = Slow {
        told: AtomicBool::new(false),
        calls: AtomicU64::new(0),
    };
    std::thread::scope(|s| {
        for cpu in 0..2 {
            let (hv, slow) = (&hv, &slow);
            s.spawn(move || {
                hv.run_cpu(cpu, slow);
                assert!(
                    slow.told.load(Ordering::SeqCst),
                    "pCPU {cpu} returned early"
                );
            });
        }
    });
    assert_eq!(slow.calls.load(Ordering::SeqCst), 1);
}

/// A vCPU that waits (WFI) for its VM's device work keeps running, and the
/// run loop continues that work before its entries, a budget each time,
/// until it is done: 256 console chains notified at once are all served,
/// in several rounds.
#[test]
fn pending_device_work_continues_before_entries_and_a_waiting_vcpu_keeps_running() {
    use crate::dev::virtio::console::Console;
    use crate::dev::virtio::mmio::tests::{bring_up, wr, Env};
    use crate::dev::virtio::mmio::{reg, Transport};
    use crate::dev::virtio::queue::tests::{Driver, DATA, DESC};
    use crate::dev::virtio::{BUDGET_CHAINS, F_VERSION_1};
    let t = Arc::new(Transport::new("virtio-console", 1, Console::new()));
    let mut env = Env::new();
    bring_up(&*t, &mut env, F_VERSION_1, &[0, 1], 256);
    let mut d = Driver::at(256, 0x4000);
    env.ram.put(DATA, b"x");
    for i in 0..256u16 {
        d.desc(&env.ram, DESC + 0x4000, i, DATA, 1, 0, 0);
        d.offer(&env.ram, i);
    }
    wr(&*t, &mut env, reg::QUEUE_NOTIFY, 1);
    assert_eq!(u32::from(d.used(&env.ram).0), BUDGET_CHAINS);
    assert!(t.has_pending());
    // The notification's own exit: its continuation skips one round.
    assert!(t.take_fresh());
    *DEVICE_ENV.lock().unwrap() = Some(env);
    let h = hv(1);
    h.add_vm(VmParts {
        name: "dev".into(),
        arch: VmArch {
            pending: vec![AtomicUsize::new(0)],
            runs: AtomicUsize::new(0),
        },
        bus: crate::dev::vdev::bus::Bus::new(),
        virtio: crate::dev::virtio::set::VmVirtio {
            console: Some(t.clone()),
            ..Default::default()
        },
        stats: Arc::new(Stats::new()),
        vcpus: vec![Ctx::new(vec![Op::WaitDevices, Op::PowerOff])],
        affinity: CpuMask::first(1),
        pinned: false,
        started: 1,
        on_reboot: OnReboot::Restart,
        pv_ipi: true,
        pv_time: None,
    })
    .unwrap();
    let log = Log::default();
    run_all(&h, 1, &log);
    let env = DEVICE_ENV.lock().unwrap().take().unwrap();
    assert_eq!(d.used(&env.ram).0, 256);
    assert_eq!(env.out.len(), 256);
    assert!(!t.has_pending());
    let rounds = DEVICE_WORK.load(Ordering::Relaxed);
    assert!(
        rounds >= (256 / BUDGET_CHAINS as usize) - 1,
        "{rounds} rounds"
    );
    // No more than half the VM's time: after a round of t ticks, t ticks
    // of its own (the fake's entries tick once each) before the next.
    let at = DEVICE_WORK_AT.lock().unwrap().clone();
    assert_eq!(at.len(), rounds);
    for w in at.windows(2) {
        assert!(
            w[1] - w[0] >= 2 * DEVICE_WORK_TICKS,
            "device work at {} and again at {}",
            w[0],
            w[1]
        );
    }
    assert_eq!(
        log.ended.lock().unwrap().as_slice(),
        [("dev".into(), VmEnd::PowerOff)]
    );
}

/// Waits (up to the fake's deadline) until `cond` holds.
fn wait_for(hv: &Hypervisor<Fake>, what: &str, cond: impl Fn() -> bool) {
    while !cond() {
        assert!(
            std::time::Instant::now() < hv.backend.deadline,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

#[test]
fn the_console_stops_restarts_and_starts_vms_while_they_run() {
    use crate::vmm::console::Op as Cmd;
    let cpus = 2;
    let hv = hv(cpus);
    let log = Log::default();
    let spin = add(
        &hv,
        "spin",
        vec![vec![Op::UntilReleased]],
        CpuMask::first(cpus),
        false,
    );
    let other = add(
        &hv,
        "other",
        vec![vec![Op::UntilReleased]; 2],
        CpuMask::first(cpus),
        false,
    );
    hv.publish();
    assert_eq!(hv.request(5, Cmd::Stop), Err("no such VM"));
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (hv, log) = (&hv, &log);
            s.spawn(move || run_cpu(hv, cpu, log));
        }
        wait_for(&hv, "the VMs to run", || hv.backend.now() > 100);
        assert_eq!(hv.vm_state(&spin), VmState::Running);
        assert_eq!(hv.request(0, Cmd::Start), Err("it runs already"));
        // Stop: as a power-off, and only once.
        hv.request(0, Cmd::Stop).unwrap();
        wait_for(&hv, "the stop", || spin.has_ended());
        assert_eq!(spin.end_reason(), Some(VmEnd::Stopped));
        assert_eq!(hv.vm_state(&spin), VmState::Stopped);
        assert_eq!(hv.request(0, Cmd::Stop), Err("it is stopped already"));
        assert!(hv.request(0, Cmd::Restart).is_err());
        // Start: rebuilt from its images, running again.
        hv.request(0, Cmd::Start).unwrap();
        wait_for(&hv, "the start", || !log.started.lock().unwrap().is_empty());
        assert!(!spin.has_ended());
        assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 1);
        assert_eq!(*log.started.lock().unwrap(), ["spin"]);
        wait_for(&hv, "spin to run", || {
            hv.sched.state(spin.vcpus[0].key) == Some(RunState::Running(0))
                || hv.sched.state(spin.vcpus[0].key) == Some(RunState::Running(1))
        });
        // Restart: as a reset, whatever on_reboot says.
        hv.request(0, Cmd::Restart).unwrap();
        wait_for(&hv, "the restart", || spin.restarts() == 1);
        assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 2);
        // Both stopped from the console: kestrel stays up for a start.
        hv.request(0, Cmd::Stop).unwrap();
        hv.request(1, Cmd::Stop).unwrap();
        wait_for(&hv, "both stops", || spin.has_ended() && other.has_ended());
        let idles = hv.backend.idles.load(Ordering::Relaxed);
        wait_for(&hv, "idle pCPUs", || {
            hv.backend.idles.load(Ordering::Relaxed) > idles + 100
        });
        assert_eq!(log.all.load(Ordering::Relaxed), 0, "kestrel must stay up");
        hv.request(0, Cmd::Start).unwrap();
        hv.request(1, Cmd::Start).unwrap();
        wait_for(&hv, "both starts", || {
            !spin.has_ended() && !other.has_ended()
        });
        hv.backend.release.store(true, Ordering::Release);
    });
    assert_eq!(spin.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(other.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(log.all.load(Ordering::Relaxed), 1);
    assert_eq!(hv.exit_status(), ExitStatus::Success);
}

/// Issue: 52 resets racing CPU_ON. vCPU 0 of "x" resets its VM 40 times
/// while vCPU 1 powers on vCPU 2 (which turns itself off again) without
/// pause, on 2 pCPUs beside a VM that must finish: every restart is
/// rebuilt once, with none of its vCPUs loaded (the fake checks), and
/// every CPU_ON either lands before the stop or is refused.
#[test]
fn restarts_racing_cpu_on_complete_and_leave_the_other_vm_alone() {
    let cpus = 2;
    let hv = hv(cpus);
    let log = Log::default();
    let x = add(
        &hv,
        "x",
        vec![
            vec![Op::PowerOn(1), Op::Work(30), Op::ResetUntil(40)],
            vec![Op::HammerOn(2)],
            vec![Op::CpuOff],
        ],
        CpuMask::first(cpus),
        false,
    );
    let other = add(
        &hv,
        "other",
        smp_guest(2, 2000),
        CpuMask::first(cpus),
        false,
    );
    run_all(&hv, cpus, &log);
    assert_eq!(x.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(other.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(x.restarts(), 40);
    assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 40);
    let want: Vec<(String, u64)> = (1..=40).map(|n| ("x".into(), n)).collect();
    assert_eq!(*log.restarted.lock().unwrap(), want);
    assert!(
        !x.vcpus[2].ctx.lock().ran_on.is_empty(),
        "CPU_ON of vCPU 2 never landed"
    );
    assert_eq!(hv.exit_status(), ExitStatus::Success);
}

/// A restart whose VM has a vCPU in the guest on another pCPU (a long
/// exit, held by the test): the pCPU that asked for it does not wait, it
/// runs the victim VM pinned beside it meanwhile; the restart is completed
/// by the pCPU that puts the VM's last vCPU, once it does.
#[test]
fn a_restart_waits_for_no_pcpu_and_the_last_put_completes_it() {
    let cpus = 2;
    let hv = hv(cpus);
    let log = Log::default();
    // vCPU i of "x" pinned to pCPU i.
    let x = add(
        &hv,
        "x",
        vec![
            vec![Op::PowerOn(1), Op::WaitHeld, Op::ResetUntil(1)],
            vec![Op::Hold, Op::UntilReleased],
        ],
        CpuMask::first(cpus),
        true,
    );
    let victim = add(
        &hv,
        "victim",
        vec![vec![Op::UntilReleased]],
        CpuMask::single(0),
        false,
    );
    hv.backend.hold.store(true, Ordering::Release);
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (hv, log) = (&hv, &log);
            s.spawn(move || run_cpu(hv, cpu, log));
        }
        wait_for(&hv, "the reset", || x.is_stopping());
        assert_eq!(hv.vm_state(&x), VmState::Restarting);
        let before = victim.arch.runs.load(Ordering::Relaxed);
        wait_for(&hv, "the victim to run beside the waiting restart", || {
            victim.arch.runs.load(Ordering::Relaxed) > before + 1000
        });
        assert_eq!(x.restarts(), 0, "vCPU 1 is still on pCPU 1");
        assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 0);
        hv.backend.hold.store(false, Ordering::Release);
        wait_for(&hv, "the restart", || x.restarts() == 1);
        assert_eq!(
            *hv.backend.rebuilt_on.lock().unwrap(),
            [1],
            "rebuilt by the last put"
        );
        hv.backend.release.store(true, Ordering::Release);
    });
    assert_eq!(x.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(victim.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(log.all.load(Ordering::Relaxed), 1);
}

/// Restarts back to back: the guest resets at its very first run after
/// each restart (its next restart is posted while the last one's pCPU may
/// still be finishing), with a second vCPU on the other pCPUs; then the
/// operator restarts a VM twice in a row.
#[test]
fn restarts_in_a_row_each_complete_once() {
    let cpus = 3;
    let hv = hv(cpus);
    let log = Log::default();
    let x = add(
        &hv,
        "x",
        vec![
            vec![Op::PowerOn(1), Op::ResetUntil(30)],
            vec![Op::Work(1_000_000)],
        ],
        CpuMask::first(cpus),
        false,
    );
    let spin = add(
        &hv,
        "spin",
        vec![vec![Op::UntilReleased]; 2],
        CpuMask::first(cpus),
        false,
    );
    hv.publish();
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (hv, log) = (&hv, &log);
            s.spawn(move || run_cpu(hv, cpu, log));
        }
        wait_for(&hv, "x's restarts", || x.has_ended());
        hv.power_on(&spin, 1, 0).unwrap();
        for n in 1..=2 {
            // Refused while the previous one is under way.
            wait_for(&hv, "a restart to be taken", || {
                hv.request(1, crate::vmm::console::Op::Restart).is_ok()
            });
            wait_for(&hv, "the operator's restart", || spin.restarts() == n);
        }
        hv.backend.release.store(true, Ordering::Release);
    });
    assert_eq!(x.end_reason(), Some(VmEnd::PowerOff));
    assert_eq!(x.restarts(), 30);
    assert_eq!(spin.restarts(), 2);
    assert_eq!(hv.backend.rebuilds.load(Ordering::Relaxed), 32);
    let mut want: Vec<(String, u64)> = (1..=30).map(|n| ("x".into(), n)).collect();
    want.extend((1..=2).map(|n| ("spin".into(), n)));
    assert_eq!(*log.restarted.lock().unwrap(), want);
    assert_eq!(spin.end_reason(), Some(VmEnd::PowerOff));
}

/// Stolen time: the run loop hands each vCPU its waits in run queues
/// before each load. Two VMs pinned to pCPU 0 wait for each other; a third
/// alone on pCPU 1 never waits.
#[test]
fn the_run_loop_hands_each_vcpu_its_waits_for_a_pcpu() {
    let hv = hv(2);
    let log = Log::default();
    let job = || vec![vec![Op::Work(300), Op::PowerOff]];
    let a = add(&hv, "a", job(), CpuMask::single(0), false);
    let b = add(&hv, "b", job(), CpuMask::single(0), false);
    let c = add(&hv, "c", job(), CpuMask::single(1), false);
    for vm in [&a, &b, &c] {
        // As its guest's PV_TIME_ST would, before it runs.
        vm.vcpus[0].steal.register();
    }
    run_all(&hv, 2, &log);
    for vm in [&a, &b] {
        let stolen = vm.vcpus[0].steal.stolen().unwrap();
        assert!(stolen > 0, "{}: shared pCPU 0, nothing stolen", vm.name);
        assert!(
            stolen <= hv.backend.now(),
            "{}: {stolen} stolen in {} ticks",
            vm.name,
            hv.backend.now()
        );
    }
    assert_eq!(c.vcpus[0].steal.stolen(), Some(0), "alone on pCPU 1");
}
