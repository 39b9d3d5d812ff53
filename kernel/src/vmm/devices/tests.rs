//! The core's device environment over a fake backend: who is woken and
//! kicked, where console bytes and line changes go, how a power-off ends
//! the VM, where typed console input goes.

use super::*;
use crate::base::lock::Mutex;
use crate::dev::vdev::bus::Bus;
use crate::dev::vdev::pl011::{self, Pl011};
use crate::dev::vdev::testenv::Ram;
use crate::dev::vdev::Width;
use crate::vcpu::sched::{CpuMask, PutReason, RunState};
use crate::vcpu::stats::Stats;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{RunExit, Vcpu, VmParts};
use crate::vmm::console::ConsoleMux;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

#[derive(Default)]
struct Fake {
    kicks: Mutex<Vec<usize>>,
    lines: Mutex<Vec<(u32, bool)>>,
    console: Mutex<Vec<u8>>,
    /// What `device_irq` reports as made pending.
    reaches: Mutex<VcpuSet>,
    /// Bytes typed on the physical console, not read yet.
    typed: Mutex<VecDeque<u8>>,
}

/// A VM of the fake backend: its RAM and its console UART (on line 1).
struct FakeVm {
    ram: Ram,
    uart: Uart<Pl011>,
}

impl Backend for Fake {
    type VmState = FakeVm;
    type VcpuState = ();
    fn load(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut ()) {}
    fn run(&self, _: &mut ExitCtx<'_, Self>, _: &mut ()) -> RunExit {
        RunExit::Continue
    }
    fn put(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut ()) {}
    fn kick(&self, cpu: usize) {
        self.kicks.lock().push(cpu);
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

impl DeviceHost for Fake {
    type ConsoleUart = Pl011;
    fn device_irq(&self, _: &Vm<Self>, line: u32, level: bool) -> VcpuSet {
        self.lines.lock().push((line, level));
        *self.reaches.lock()
    }
    fn device_console(&self, _: &Vm<Self>, byte: u8) {
        self.console.lock().push(byte);
    }
    fn device_console_virtio(&self, _: &Vm<Self>, bytes: &[u8]) {
        self.console.lock().extend_from_slice(bytes);
    }
    fn guest_memory(vm: &Vm<Self>) -> &dyn GuestMemory {
        &vm.arch.ram
    }
    fn console_uart(vm: &Vm<Self>) -> &Uart<Pl011> {
        &vm.arch.uart
    }
    fn console_read(&self) -> Option<u8> {
        self.typed.lock().pop_front()
    }
}

/// Two vCPUs pinned to pCPUs 0 and 1, both running there.
fn running_vm() -> (Hypervisor<Fake>, Arc<Vm<Fake>>) {
    let hv = Hypervisor::new(Fake::default(), CpuMask::first(2));
    let vm = hv
        .add_vm(VmParts {
            name: "dev".into(),
            arch: FakeVm {
                ram: Ram {
                    base: 0x4000_0000,
                    bytes: Mutex::new(alloc::vec![0; 0x1000]),
                },
                uart: Uart::new(Pl011::new(), Some(1)),
            },
            bus: Bus::new(),
            virtio: Default::default(),
            stats: Arc::new(Stats::new()),
            vcpus: alloc::vec![(), ()],
            affinity: CpuMask::first(2),
            pinned: true,
            started: 2,
            on_reboot: crate::vmm::vmconfig::OnReboot::Restart,
            pv_ipi: true,
            pv_time: None,
        })
        .unwrap();
    for cpu in 0..2 {
        let key = hv.sched.pick(cpu, 0).unwrap();
        assert_eq!(key.vcpu as usize, cpu);
    }
    (hv, vm)
}

/// Every backend with devices continues their pending work the same way,
/// without a line of its own ([`crate::vm::DeviceWork`] from
/// `crate::vmm::virtio`): a budget per call, none on the call right after
/// the notification that did its own budget's work, until it is done.
#[test]
fn a_backend_with_devices_continues_their_work_a_budget_at_a_time() {
    use crate::dev::virtio::console::Console;
    use crate::dev::virtio::mmio::tests::{bring_up, wr, Env};
    use crate::dev::virtio::mmio::{reg, Transport};
    use crate::dev::virtio::queue::tests::{Driver, DATA, DESC, RAM, USED};
    use crate::dev::virtio::{BUDGET_CHAINS, F_VERSION_1};
    use crate::vm::DeviceWork;
    // A guest driver puts 256 one-byte chains on the console's transmit
    // queue (queue 1) and notifies: the notification serves one budget.
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
    assert_eq!(env.out.len(), BUDGET_CHAINS as usize);
    // The VM's RAM holds the rings as the driver left them.
    let hv = Hypervisor::new(Fake::default(), CpuMask::first(1));
    let vm = hv
        .add_vm(VmParts {
            name: "dev".into(),
            arch: FakeVm {
                ram: Ram {
                    base: RAM,
                    bytes: Mutex::new(env.ram.bytes.borrow().clone()),
                },
                uart: Uart::new(Pl011::new(), Some(1)),
            },
            bus: Bus::new(),
            virtio: crate::dev::virtio::set::VmVirtio {
                console: Some(t.clone()),
                ..Default::default()
            },
            stats: Arc::new(Stats::new()),
            vcpus: alloc::vec![()],
            affinity: CpuMask::first(1),
            pinned: false,
            started: 1,
            on_reboot: crate::vmm::vmconfig::OnReboot::Restart,
            pv_ipi: true,
            pv_time: None,
        })
        .unwrap();
    let used = |vm: &Vm<Fake>| {
        let mut idx = [0; 2];
        vm.arch.ram.read(USED + 0x4000 + 2, &mut idx).unwrap();
        u16::from_le_bytes(idx)
    };
    // The notification's own exit: nothing more.
    Fake::device_work(&hv, &vm, 0);
    assert!(hv.backend.console.lock().is_empty());
    let budget = BUDGET_CHAINS as usize;
    let mut calls = 0;
    while vm.virtio.pending() {
        Fake::device_work(&hv, &vm, 0);
        calls += 1;
        let served = (budget * (calls + 1)).min(256);
        assert_eq!(hv.backend.console.lock().len(), served - budget);
        assert!(calls < 8);
    }
    // The rest, a budget per call, and a call that finds the queue empty.
    assert_eq!(calls, 256 / budget);
    assert_eq!(used(&vm), 256);
}

fn key(vcpu: u16) -> VcpuKey {
    VcpuKey { vm: 0, vcpu }
}

#[test]
fn a_line_change_wakes_the_vcpus_it_reaches_but_not_the_accessor() {
    let (hv, vm) = running_vm();
    *hv.backend.reaches.lock() = VcpuSet(0b1_0000_0111);
    let mut env = VmDeviceEnv::new(&hv, &vm, 0, 0);
    env.set_irq(1, true);
    assert_eq!(*hv.backend.lines.lock(), [(1, true)]);
    // vCPU 1 runs on pCPU 1: kicked. vCPU 0 made the access: left alone.
    // vCPUs 2 and 8 do not exist: ignored.
    assert_eq!(*hv.backend.kicks.lock(), [1]);
    assert_eq!(env.end(), None);
    assert_eq!(
        hv.sched.put(0, key(0), PutReason::Blocked, 1),
        Ok(RunState::Blocked),
        "no wake was recorded for the accessor"
    );
    assert_eq!(
        hv.sched.put(1, key(1), PutReason::Blocked, 1),
        Ok(RunState::Runnable),
        "the woken vCPU does not block"
    );
}

#[test]
fn a_host_change_wakes_every_vcpu_it_reaches() {
    let (hv, vm) = running_vm();
    *hv.backend.reaches.lock() = VcpuSet(0b11);
    let mut env = VmDeviceEnv::host(&hv, &vm, 0);
    assert_eq!(env.vcpu(), usize::MAX);
    env.set_irq(1, true);
    assert_eq!(*hv.backend.kicks.lock(), [1], "pCPU 0 notices by itself");
    assert_eq!(
        hv.sched.put(0, key(0), PutReason::Blocked, 1),
        Ok(RunState::Runnable)
    );
}

#[test]
fn console_bytes_memory_and_the_end_of_the_vm() {
    let (hv, vm) = running_vm();
    let mut env = VmDeviceEnv::new(&hv, &vm, 1, 1);
    assert_eq!(env.vcpu(), 1);
    env.console_out(b'o');
    env.console_out(b'k');
    assert_eq!(*hv.backend.console.lock(), b"ok");
    env.memory().write(0x4000_0ffe, &[1, 2]).unwrap();
    let mut b = [0; 2];
    env.memory().read(0x4000_0ffe, &mut b).unwrap();
    assert_eq!(b, [1, 2]);
    assert!(env.memory().write(0x4000_0fff, &[1, 2]).is_err());
    env.power_off();
    env.reset();
    assert_eq!(env.end(), Some(VmEnd::PowerOff), "the first request wins");
    let mut env = VmDeviceEnv::new(&hv, &vm, 0, 0);
    env.reset();
    assert_eq!(env.end(), Some(VmEnd::Reset));
}

#[test]
fn the_power_off_register_on_a_vm_bus_ends_the_vm() {
    let (hv, vm) = running_vm();
    let mut bus = Bus::new();
    bus.add(
        0x100e_001c,
        1,
        Arc::new(crate::dev::vdev::poweroff::PowerRegs {
            off: (0, 0x34),
            reset: None,
        }),
    )
    .unwrap();
    let mut env = VmDeviceEnv::new(&hv, &vm, 0, 0);
    bus.write(&mut env, 0x100e_001c, Width::Byte, 0x12).unwrap();
    bus.write(&mut env, 0x100e_001c, Width::Byte, 0x34).unwrap();
    assert_eq!(env.end(), Some(VmEnd::PowerOff));
}

/// The PL011's data and interrupt mask registers.
const PL011_DR: u64 = 0x000;
const PL011_IMSC: u64 = 0x038;

#[test]
fn typed_input_goes_to_the_focused_vms_uart_and_its_line_follows() {
    let (hv, vm) = running_vm();
    hv.publish();
    let mux = Mutex::new(ConsoleMux::new());
    mux.lock().add_vm("dev");
    *hv.backend.reaches.lock() = VcpuSet(0b11);
    // The guest enabled the receive interrupt.
    let imsc = u64::from(pl011::int::RX);
    vm.arch
        .uart
        .regs()
        .lock()
        .write(PL011_IMSC, Width::Word, imsc)
        .unwrap();
    hv.backend.typed.lock().extend(b"hi");
    crate::vmm::pump_console(&hv, 0, &mux);
    assert!(hv.backend.typed.lock().is_empty(), "all of it was read");
    // No virtio console: the bytes are in the UART, whose line rose once,
    // waking every vCPU it reached (vCPU 1 runs on pCPU 1: kicked; pCPU 0
    // pumps the input and notices by itself).
    assert_eq!(*hv.backend.lines.lock(), [(1, true)]);
    assert_eq!(*hv.backend.kicks.lock(), [1]);
    {
        let mut u = vm.arch.uart.regs().lock();
        for &b in b"hi" {
            assert_eq!(u.read(PL011_DR, Width::Word).unwrap() & 0xff, u64::from(b));
        }
    }
    // Nothing more typed: nothing changes.
    crate::vmm::pump_console(&hv, 0, &mux);
    assert_eq!(hv.backend.lines.lock().len(), 1);
    // Only the boot CPU reads the physical console.
    hv.backend.typed.lock().push_back(b'!');
    crate::vmm::poll_console(&hv, 1);
    assert_eq!(hv.backend.typed.lock().len(), 1);
}
