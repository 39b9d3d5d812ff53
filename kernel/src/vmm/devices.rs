//! The environment devices act through, written once for every backend:
//! [`VmDeviceEnv`] implements [`DeviceEnv`] over the running hypervisor,
//! VM and vCPU. What differs per architecture is the small [`DeviceHost`]
//! hook a backend implements: how a device interrupt line reaches the
//! VM's interrupt controller, the VM's console UART and the physical
//! console, and guest RAM.

use crate::vcpu::cpuset::VcpuSet;
use crate::vcpu::sched::VcpuKey;
use crate::vm::{Backend, Hypervisor, Vm, VmEnd};

use crate::dev::vdev::bus::{DeviceEnv, GuestMemory};
use crate::dev::vdev::uart::{Uart, UartRegs};

/// What a backend supplies to its VMs' devices.
pub trait DeviceHost: Backend {
    /// The register model of a VM's console UART (PL011, 16550).
    type ConsoleUart: UartRegs;
    /// Drives device interrupt line `line` of `vm` (the number the guest's
    /// device tree gives it) to `level`; returns the vCPUs the change made
    /// an interrupt pending for.
    fn device_irq(&self, vm: &Vm<Self>, line: u32, level: bool) -> VcpuSet;
    /// One byte of `vm`'s console output: by default into its output
    /// buffer on the way to the physical console
    /// ([`crate::vmm::terminal::console_out`]).
    fn device_console(&self, vm: &Vm<Self>, byte: u8) {
        crate::vmm::terminal::console_out(vm.slot, byte);
    }
    /// Bytes of `vm`'s virtio console output (log mode keeps its lines
    /// apart from the UART's).
    fn device_console_virtio(&self, vm: &Vm<Self>, bytes: &[u8]) {
        crate::vmm::terminal::console_write_from(vm.slot, true, bytes);
    }
    /// `vm`'s RAM as devices reach it.
    fn guest_memory(vm: &Vm<Self>) -> &dyn GuestMemory;
    /// `vm`'s console UART (also on its bus), for typed input
    /// ([`crate::vmm::poll_console`]).
    fn console_uart(vm: &Vm<Self>) -> &Uart<Self::ConsoleUart>;
    /// A byte typed on the physical console, if one waits.
    fn console_read(&self) -> Option<u8>;
}

/// A [`DeviceEnv`] for one access (or one host-side change) to a device of
/// `vm`. A power-off or reset request is recorded; the backend ends the VM
/// after the access ([`VmDeviceEnv::end`]).
pub struct VmDeviceEnv<'a, B: DeviceHost> {
    hv: &'a Hypervisor<B>,
    vm: &'a Vm<B>,
    vcpu: usize,
    cpu: usize,
    /// A power-off (`Some(true)`) or reset (`Some(false)`) request, the
    /// first one wins (a plain flag: nothing to drop on the fast path).
    end: Option<bool>,
}

impl<'a, B: DeviceHost> VmDeviceEnv<'a, B> {
    /// An access by vCPU `vcpu` of `vm`, running on pCPU `cpu`.
    pub fn new(hv: &'a Hypervisor<B>, vm: &'a Vm<B>, vcpu: usize, cpu: usize) -> Self {
        VmDeviceEnv {
            hv,
            vm,
            vcpu,
            cpu,
            end: None,
        }
    }

    /// A change the host made on pCPU `cpu` (typed console input): no vCPU
    /// is the accessor, so every vCPU an interrupt reaches is woken.
    pub fn host(hv: &'a Hypervisor<B>, vm: &'a Vm<B>, cpu: usize) -> Self {
        Self::new(hv, vm, usize::MAX, cpu)
    }

    /// How the VM must end, if a device asked (power-off, reset).
    pub fn end(&self) -> Option<VmEnd> {
        self.end
            .map(|off| if off { VmEnd::PowerOff } else { VmEnd::Reset })
    }
}

impl<B: DeviceHost> DeviceEnv for VmDeviceEnv<'_, B> {
    fn vcpu(&self) -> usize {
        self.vcpu
    }

    fn pcpu(&self) -> usize {
        self.cpu
    }

    fn wake(&mut self, vcpu: usize) {
        if vcpu != self.vcpu && vcpu < self.vm.vcpus.len() {
            self.hv.wake(
                VcpuKey {
                    vm: self.vm.slot,
                    vcpu: vcpu as u16,
                },
                self.cpu,
            );
        }
    }

    fn set_irq(&mut self, line: u32, level: bool) {
        let woken = self.hv.backend.device_irq(self.vm, line, level);
        for v in woken.iter() {
            self.wake(v);
        }
    }

    fn console_out(&mut self, byte: u8) {
        self.hv.backend.device_console(self.vm, byte);
    }

    fn console_write_virtio(&mut self, bytes: &[u8]) {
        self.hv.backend.device_console_virtio(self.vm, bytes);
    }

    fn power_off(&mut self) {
        self.end.get_or_insert(true);
    }

    fn reset(&mut self) {
        self.end.get_or_insert(false);
    }

    fn memory(&self) -> &dyn GuestMemory {
        B::guest_memory(self.vm)
    }

    fn now_ns(&self) -> u64 {
        crate::base::clock::now_ns()
    }
}

#[cfg(test)]
mod tests;
