//! Building and restarting an LVZ VM: the VM part is the one both
//! LoongArch backends share (`vm::build`: RAM, images, devices, IPI
//! blocks); this backend adds its vCPU state, and what the core's device
//! environment needs from it.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use spin::MutexGuard;

use crate::dev::vdev::bus::GuestMemory;
use crate::dev::vdev::ns16550::Ns16550;
use crate::dev::vdev::uart::Uart;
use crate::guest::loongarch::layout;
use crate::host::board::BoardInfo;
use crate::mem::frames::FramePool;
use crate::vcpu::cpuset::VcpuSet;
use crate::vcpu::stats::Stats;
use crate::vm::{Hypervisor, Vm};
use crate::vmm::devices::DeviceHost;
use crate::vmm::vmconfig::VmSpec;
use crate::vmm::{Built, Machine};

use super::super::vm::build::{new_vm_state, rebuild_step, restart_vm_state};
use super::super::vm::mem;
use super::super::{csr, platform};
use super::{LvzBackend, VcpuState};

impl Machine for LvzBackend {
    fn guest_memory(&self, board: &BoardInfo) -> FramePool {
        mem::pool(&board.memory, platform::reserved().as_slice())
    }

    fn build_vm(
        &self,
        _board: &BoardInfo,
        spec: &VmSpec<'static>,
        pool: &mut FramePool,
        stats: &Arc<Stats>,
    ) -> Result<Built<Self>, String> {
        let (st, devices, boot) = new_vm_state(spec, pool)?;
        let offset = csr::rdtime().wrapping_neg();
        let mut vcpus: Vec<VcpuState> = (0..spec.vcpus as usize)
            .map(|i| VcpuState::new(i, stats))
            .collect();
        for v in &mut vcpus {
            v.counter_offset = offset;
        }
        vcpus[0].reset(0, boot.entry, boot.args);
        Ok(Built {
            arch: st,
            vcpus,
            entry: boot.entry,
            dtb: layout::gpa_of(spec.dtb_gpa),
            bus: devices.bus,
            virtio: devices.virtio,
        })
    }

    fn init_cpu(&self, hv: &Hypervisor<Self>, cpu: usize) {
        self.init_cpu_state(hv, cpu);
    }

    fn leave_cpu(&self, _cpu: usize) {
        csr::irq_enable();
    }
}

impl LvzBackend {
    /// [`crate::vm::Backend::restart_vm`]: the VM keeps its frames (so its
    /// second-stage entries stay right); devices and IPI blocks are as at
    /// creation, and so are its vCPUs, each with a new epoch (its old guest
    /// TLB entries are dropped at its next load anywhere); vCPU 0 zeroes
    /// the RAM and loads the images again before it runs.
    pub(super) fn restart(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [MutexGuard<'_, VcpuState>],
    ) -> Result<(), String> {
        restart_vm_state(&vm.arch, &vm.bus)?;
        let offset = csr::rdtime().wrapping_neg();
        for (i, ctx) in vcpus.iter_mut().enumerate() {
            let epoch = ctx.epoch;
            **ctx = VcpuState::new(i, &vm.stats);
            ctx.epoch = epoch + 1;
            ctx.counter_offset = offset;
        }
        Ok(())
    }

    /// A step of a restart's rebuild on vCPU 0 (`vm::build::rebuild_step`);
    /// after the last, vCPU 0 starts at the images' entry.
    pub(super) fn rebuild_step(&self, vm: &Vm<Self>, ctx: &mut VcpuState) -> crate::vm::RunExit {
        use crate::vm::{RunExit, VmEnd};
        match rebuild_step(&vm.arch) {
            Ok(None) => RunExit::Continue,
            Ok(Some(boot)) => {
                ctx.reset(0, boot.entry, boot.args);
                RunExit::Continue
            }
            Err(e) => RunExit::VmEnd(VmEnd::Fatal(alloc::format!("restart failed: {e}"))),
        }
    }
}

impl DeviceHost for LvzBackend {
    type ConsoleUart = Ns16550;

    /// Device lines go to the PCH-PIC, on to the EIOINTC and the vCPUs'
    /// HWI lines (written into their ESTAT before each entry).
    fn device_irq(&self, vm: &Vm<Self>, line: u32, level: bool) -> VcpuSet {
        vm.arch.intc.set_level(line, level)
    }

    fn guest_memory(vm: &Vm<Self>) -> &dyn GuestMemory {
        &vm.arch
    }

    /// Its interrupt reaches the guest through the PCH-PIC.
    fn console_uart(vm: &Vm<Self>) -> &Uart<Ns16550> {
        &vm.arch.uart
    }

    fn console_read(&self) -> Option<u8> {
        platform::PLATFORM.console_read()
    }
}
