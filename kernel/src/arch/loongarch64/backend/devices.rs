//! The LoongArch VM's devices: its MMIO bus (the NS16550 console, the
//! PCH-PIC, the power-off and reset registers and the legacy I/O port
//! window, where QEMU virt has them), and what the core's device environment needs from this backend:
//! device lines go to the VM's interrupt controllers
//! (`crate::guest::loongarch::intc`), console input comes from the
//! physical UART to the 16550, console bytes go to the console
//! multiplexer, guest RAM is the VM's frames.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::dev::vdev::bus::{Bus, GuestMemory, MemError};
use crate::dev::vdev::isaio::IsaIo;
use crate::dev::vdev::ns16550::Ns16550;
use crate::dev::vdev::poweroff::PowerRegs;
use crate::dev::vdev::uart::Uart;
use crate::dev::virtio::set::VmVirtio;
use crate::guest::loongarch::intc::{Intc, PchPicDevice};
use crate::guest::loongarch::layout;
use crate::vcpu::cpuset::VcpuSet;
use crate::vm::Vm;
use crate::vmm::devices::DeviceHost;
use crate::vmm::vmconfig::VmSpec;

use super::super::{dmw, platform};
use super::{LaBackend, Mode, VmState, GUEST_POWEROFF, GUEST_UART};

/// The 16550's registers on the bus: 8 bytes (`reg-shift` 0). The device
/// tree's 0x100-byte window beyond them is nothing (an address error).
const UART_REGS: u64 = 8;

/// A new VM's devices: the bus, the UART's typed handle (console input),
/// the interrupt controllers and the virtio devices (also on the bus).
pub struct Devices {
    pub bus: Bus,
    pub uart: Arc<Uart<Ns16550>>,
    pub intc: Arc<Intc>,
    pub virtio: VmVirtio,
}

/// Maps the devices of `spec`'s VM (`vcpus` vCPUs) at the addresses its
/// device tree gives them. Its virtio devices (console, disks, network
/// ports) interrupt through the PCH-PIC, lines from `layout::VIRTIO`'s;
/// `disk_memory` provides writable disks' memory.
pub fn build(
    vcpus: usize,
    spec: &VmSpec<'static>,
    disk_memory: &mut dyn FnMut(u64) -> Result<Vec<&'static mut [u8]>, String>,
) -> Result<Devices, String> {
    let intc = Arc::new(Intc::new(vcpus));
    // The 16550's line is PCH-PIC input 2, as on QEMU virt.
    let uart = Arc::new(Uart::new(Ns16550::new(), Some(layout::UART_IRQ)));
    let mut bus = Bus::new();
    let err = |e| format!("device map: {e:?}");
    bus.add(GUEST_UART, UART_REGS, uart.clone()).map_err(err)?;
    bus.add(
        layout::PCH_PIC,
        layout::PCH_PIC_SIZE,
        Arc::new(PchPicDevice(intc.clone())),
    )
    .map_err(err)?;
    let power = PowerRegs {
        off: (0, layout::POWEROFF_VALUE),
        reset: Some((layout::RESET_OFFSET, layout::RESET_VALUE)),
    };
    bus.add(GUEST_POWEROFF, power.size(), Arc::new(power))
        .map_err(err)?;
    // The legacy I/O ports the device tree's `isa` node gives the guest:
    // no port answers (all-ones), as on a board without those chips.
    bus.add(
        layout::ISA_IO,
        layout::ISA_IO_SIZE,
        Arc::new(IsaIo {
            size: layout::ISA_IO_SIZE,
        }),
    )
    .map_err(err)?;
    let virtio = crate::vmm::virtio::build_at(
        spec,
        &spec.virtio_slots_at(layout::VIRTIO),
        &mut bus,
        disk_memory,
    )?;
    Ok(Devices {
        bus,
        uart,
        intc,
        virtio,
    })
}

impl<M: Mode> DeviceHost for LaBackend<M> {
    type ConsoleUart = Ns16550;

    /// Device lines are PCH-PIC inputs (the numbers the device tree
    /// gives), on to the EIOINTC and the vCPUs' HWI lines (merged into
    /// their ESTAT before each entry).
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

/// Guest RAM is contiguous in host memory within one 4 KiB page at least.
const PAGE: u64 = 0x1000;

impl VmState {
    /// Calls `f(host address, offset in the range, length)` for each piece
    /// of `[gpa, gpa + len)` within one guest page, after checking that
    /// every page of it is this VM's RAM (so nothing is copied for a range
    /// that is not).
    fn each_piece(
        &self,
        gpa: u64,
        len: usize,
        mut f: impl FnMut(u64, usize, usize),
    ) -> Result<(), MemError> {
        let err = MemError {
            gpa,
            len: len as u64,
        };
        let end = gpa.checked_add(len as u64).ok_or(err)?;
        let pieces = || {
            let mut at = gpa;
            core::iter::from_fn(move || {
                (at < end).then(|| {
                    let n = (PAGE - at % PAGE).min(end - at);
                    let piece = (at, (at - gpa) as usize, n as usize);
                    at += n;
                    piece
                })
            })
        };
        if pieces().any(|(g, _, _)| self.hpa(g).is_none()) {
            return Err(err);
        }
        for (g, done, n) in pieces() {
            f(self.hpa(g).ok_or(err)?, done, n);
        }
        Ok(())
    }
}

impl GuestMemory for VmState {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.each_piece(gpa, buf.len(), |h, at, n| {
            // SAFETY: `h..h + n` lies inside one page of this VM's RAM
            // frames (checked by `each_piece`), reached through kestrel's
            // cached window; `buf[at..at + n]` is in bounds.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    dmw::cached(h) as *const u8,
                    buf.as_mut_ptr().add(at),
                    n,
                )
            };
        })
    }

    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        self.each_piece(gpa, data.len(), |h, at, n| {
            // SAFETY: as in `read`; `data[at..at + n]` is a valid source.
            unsafe {
                core::ptr::copy_nonoverlapping(data.as_ptr().add(at), dmw::cached(h) as *mut u8, n)
            };
        })
    }
}
