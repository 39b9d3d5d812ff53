//! The arm64 VM's devices: its MMIO bus (the vGIC distributor and, on
//! GICv3, redistributors over the VM's one [`Vgic`]; the PL011), and what
//! the core's device environment needs from this backend: a device line is
//! an SPI of the vGIC, console input comes from the physical UART to the
//! PL011, console bytes go to the console multiplexer, guest RAM is the
//! VM's 2 MiB frames.

use crate::base::lock::Mutex;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::dev::vdev::bus::{Bus, GuestMemory, MemError, Prepared};
use crate::dev::vdev::pl011::{self, Pl011};
use crate::dev::vdev::uart::Uart;
use crate::dev::vgic::mmio::{DistFrame, RedistFrame, SharedVgic};
use crate::dev::vgic::{GicVersion, VcpuSet, Vgic};
use crate::dev::virtio::set::VmVirtio;
use crate::vm::Vm;
use crate::vmm::devices::DeviceHost;
use crate::vmm::vmconfig::{VmSpec, GUEST_GICD, GUEST_GICR, GUEST_UART};

use super::super::{mmu, platform};
use super::{stage2, Arm64Backend, VmState};

/// A new VM's devices: the bus, and typed handles for the backend (the
/// vGIC for list registers, timers and SGIs; the UART for console input).
pub struct Devices {
    pub bus: Bus,
    /// The virtio devices (their transports are on `bus` too).
    pub virtio: VmVirtio,
    pub vgic: SharedVgic,
    pub uart: Arc<Uart<Pl011>>,
}

/// Maps the VM's devices at the addresses its device tree gives them;
/// `disk_memory` provides writable virtio disks' memory.
pub fn build(
    vgic: Vgic,
    spec: &VmSpec<'static>,
    disk_memory: &mut dyn FnMut(u64) -> Result<Vec<&'static mut [u8]>, String>,
) -> Result<Devices, String> {
    let v3 = vgic.version() == GicVersion::V3;
    let (dist_size, redist_size) = (vgic.dist_size(), vgic.redist_size());
    let vgic = Arc::new(Mutex::new(vgic));
    // The UART drives SPI GUEST_UART.2.
    let uart = Arc::new(Uart::new(Pl011::new(), Some(GUEST_UART.2)));
    let mut bus = Bus::new();
    let err = |e| format!("device map: {e:?}");
    bus.add(GUEST_GICD.0, dist_size, Arc::new(DistFrame(vgic.clone())))
        .map_err(err)?;
    if v3 {
        // Only the VM's own redistributors: the rest of the GICR region
        // is nothing (an external abort).
        bus.add(
            GUEST_GICR.0,
            redist_size,
            Arc::new(RedistFrame(vgic.clone())),
        )
        .map_err(err)?;
    }
    debug_assert_eq!(GUEST_UART.1, pl011::FRAME_SIZE);
    bus.add(GUEST_UART.0, GUEST_UART.1, uart.clone())
        .map_err(err)?;
    let virtio = crate::vmm::virtio::build(spec, &mut bus, disk_memory)?;
    Ok(Devices {
        bus,
        virtio,
        vgic,
        uart,
    })
}

impl DeviceHost for Arm64Backend {
    type ConsoleUart = Pl011;

    fn device_irq(&self, vm: &Vm<Self>, line: u32, level: bool) -> VcpuSet {
        // Device lines are SPIs: INTID 32 + line (SPIs are shared: the
        // vCPU argument is not used for them).
        vm.arch.vgic.lock().set_level(0, 32 + line, level)
    }

    fn guest_memory(vm: &Vm<Self>) -> &dyn GuestMemory {
        &vm.arch
    }

    fn console_uart(vm: &Vm<Self>) -> &Uart<Pl011> {
        &vm.arch.uart
    }

    fn console_read(&self) -> Option<u8> {
        platform::console_read()
    }
}

impl VmState {
    /// Stores `value` as one aligned little-endian 64-bit word at guest
    /// physical `gpa`, through the same checks as every copy
    /// ([`VmState::each_piece`]): a single store, so a guest vCPU reading
    /// the word meanwhile sees the old or the new value, never a mix (the
    /// stolen time of a record, `crate::vcpu::steal`). An unaligned `gpa`
    /// or one outside RAM is an error and nothing is written.
    pub fn store_u64(&self, gpa: u64, value: u64) -> Result<(), MemError> {
        if !gpa.is_multiple_of(8) {
            return Err(MemError { gpa, len: 8 });
        }
        self.each_piece(gpa, 8, |dst, _, n| {
            // An aligned word never crosses a frame: one piece of 8.
            if n != 8 {
                return;
            }
            // SAFETY: `dst..dst + 8` lies inside one 2 MiB frame owned by
            // this VM and zeroed for it (`each_piece`), identity mapped at
            // EL2 as Normal memory; it is 8-byte aligned (frames are 2 MiB
            // aligned, RAM starts 2 MiB aligned and `gpa` is aligned).
            unsafe { core::ptr::write_volatile(dst as *mut u64, value.to_le()) };
            // Cleaned to the point of coherency, as every write to guest
            // RAM is: a guest with its caches off sees it.
            mmu::clean_dcache_range(dst, dst + 8);
        })
    }

    /// Calls `f(host address, offset in the range, length)` for each piece
    /// of `[gpa, gpa + len)` within one RAM frame, after checking that the
    /// whole range is this VM's RAM (so nothing is copied for a range that
    /// is not: the frames cover all of it). A block the guest never touched
    /// is zeroed and mapped first, as its first touch would: a device sees
    /// and leaves only what the guest may see.
    fn each_piece(
        &self,
        gpa: u64,
        len: usize,
        mut f: impl FnMut(usize, usize, usize),
    ) -> Result<(), MemError> {
        let err = MemError {
            gpa,
            len: len as u64,
        };
        let end = gpa.checked_add(len as u64).ok_or(err)?;
        if gpa < self.ram_base || end > self.ram_base + self.ram_size {
            return Err(err);
        }
        let mut done = 0usize;
        while done < len {
            let off = gpa - self.ram_base + done as u64;
            let frame = self
                .ram
                .host_block((off / stage2::BLOCK) as usize)
                .ok_or(err)?;
            let within = off % stage2::BLOCK;
            let n = ((stage2::BLOCK - within) as usize).min(len - done);
            f((frame + within) as usize, done, n);
            done += n;
        }
        Ok(())
    }
}

impl GuestMemory for VmState {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.each_piece(gpa, buf.len(), |src, at, n| {
            // SAFETY: `src..src + n` lies inside one 2 MiB frame owned by
            // this VM and zeroed for it (`each_piece`), identity mapped at
            // EL2 as Normal memory, and `buf[at..at + n]` is in bounds.
            unsafe {
                core::ptr::copy_nonoverlapping(src as *const u8, buf.as_mut_ptr().add(at), n)
            };
        })
    }

    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        self.each_piece(gpa, data.len(), |dst, at, n| {
            // SAFETY: `dst..dst + n` lies inside one 2 MiB frame owned by
            // this VM (as above), and `data[at..at + n]` is a valid source.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(at), dst as *mut u8, n) };
            // Cleaned to the point of coherency, as guest RAM is written
            // at load: a guest with its caches off sees the data.
            mmu::clean_dcache_range(dst, dst + n);
        })
    }

    fn prepare(&self, gpa: u64, len: u64, zero_allowance: u32) -> Prepared {
        let Some(end) = gpa.checked_add(len) else {
            return Prepared::READY;
        };
        if len == 0 || gpa < self.ram_base || end > self.ram_base + self.ram_size {
            return Prepared::READY;
        }
        let first = ((gpa - self.ram_base) / stage2::BLOCK) as usize;
        let last = ((end - 1 - self.ram_base) / stage2::BLOCK) as usize;
        let mut zeroed = 0;
        for i in first..=last {
            if self.ram.ready_block(i).is_some() {
                continue;
            }
            if zeroed == zero_allowance {
                return Prepared {
                    zeroed,
                    ready: false,
                };
            }
            // Zeroes and maps it (or waits for the pCPU already at it).
            self.ram.host_block(i);
            zeroed += 1;
        }
        Prepared {
            zeroed,
            ready: true,
        }
    }
}
