//! The core's device environment over a fake backend: who is woken and
//! kicked, where console bytes and line changes go, how a power-off ends
//! the VM.

use super::*;
use crate::sched::{CpuMask, PutReason, RunState};
use crate::stats::Stats;
use crate::vdev::bus::Bus;
use crate::vdev::testenv::Ram;
use crate::vdev::Width;
use crate::vm::{RunExit, Vcpu, VmParts};
use alloc::sync::Arc;
use alloc::vec::Vec;
use spin::Mutex;

#[derive(Default)]
struct Fake {
    kicks: Mutex<Vec<usize>>,
    lines: Mutex<Vec<(u32, bool)>>,
    console: Mutex<Vec<u8>>,
    /// What `device_irq` reports as made pending.
    reaches: Mutex<VcpuSet>,
}

impl Backend for Fake {
    type VmState = Ram;
    type VcpuState = ();
    fn load(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut ()) {}
    fn run(
        &self,
        _: &Hypervisor<Self>,
        _: usize,
        _: &Vm<Self>,
        _: &Vcpu<Self>,
        _: &mut (),
    ) -> RunExit {
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
    fn device_irq(&self, _: &Vm<Self>, line: u32, level: bool) -> VcpuSet {
        self.lines.lock().push((line, level));
        *self.reaches.lock()
    }
    fn device_console(&self, _: &Vm<Self>, byte: u8) {
        self.console.lock().push(byte);
    }
    fn guest_memory(vm: &Vm<Self>) -> &dyn GuestMemory {
        &vm.arch
    }
}

/// Two vCPUs pinned to pCPUs 0 and 1, both running there.
fn running_vm() -> (Hypervisor<Fake>, Arc<Vm<Fake>>) {
    let hv = Hypervisor::new(Fake::default(), CpuMask::first(2));
    let vm = hv
        .add_vm(VmParts {
            name: "dev".into(),
            arch: Ram {
                base: 0x4000_0000,
                bytes: Mutex::new(alloc::vec![0; 0x1000]),
            },
            bus: Bus::new(),
            virtio: Default::default(),
            stats: Arc::new(Stats::new()),
            vcpus: alloc::vec![(), ()],
            affinity: CpuMask::first(2),
            pinned: true,
            started: 2,
        })
        .unwrap();
    for cpu in 0..2 {
        let key = hv.sched.pick(cpu, 0).unwrap();
        assert_eq!(key.vcpu as usize, cpu);
    }
    (hv, vm)
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
        Arc::new(crate::vdev::poweroff::PowerOff { value: 0x34 }),
    )
    .unwrap();
    let mut env = VmDeviceEnv::new(&hv, &vm, 0, 0);
    bus.write(&mut env, 0x100e_001c, Width::Byte, 0x12).unwrap();
    bus.write(&mut env, 0x100e_001c, Width::Byte, 0x34).unwrap();
    assert_eq!(env.end(), Some(VmEnd::PowerOff));
}
