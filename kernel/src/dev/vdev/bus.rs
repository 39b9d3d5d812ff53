//! The per-VM MMIO bus: guest-physical ranges mapped to device objects.
//!
//! Every emulated device a VM sees (the vGIC frames, the UARTs, the
//! power-off register, virtio-mmio transports, passthrough regions that
//! need trapping) is an [`MmioDevice`] registered on the VM's [`Bus`] at
//! creation. A backend decodes a trapped access into (guest physical
//! address, [`Width`], value), asks the bus, and applies the answer: a read
//! value goes to the destination register, an error becomes the guest's
//! data abort / address error. What a device wants done outside itself
//! (raise an interrupt line, print a console byte, wake vCPUs, end the VM)
//! it asks through the [`DeviceEnv`] the backend passes in, so a device
//! never names an architecture. The core implements that environment once
//! over the running hypervisor, VM and vCPU ([`super::env::VmDeviceEnv`]).
//!
//! The bus is built once and not changed while the VM runs: lookups take no
//! lock. Devices keep their own state behind their own locks.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::{MmioError, Width};

/// What a device may ask of the VM around it during an access.
///
/// Implemented by the core over the running hypervisor, VM and vCPU; host
/// tests implement it with a recorder.
pub trait DeviceEnv {
    /// Index of the vCPU that made the access (`usize::MAX` when the host
    /// changed the device, e.g. typed console input).
    fn vcpu(&self) -> usize;
    /// The pCPU the access runs on (`usize::MAX`: not known), so that a
    /// device waking another VM's vCPUs kicks no one needlessly.
    fn pcpu(&self) -> usize {
        usize::MAX
    }
    /// An interrupt became pending for vCPU `vcpu` of this VM: wake it if
    /// it waits, kick it if it runs elsewhere. The accessing vCPU itself
    /// needs nothing (it looks at its interrupts before its next entry),
    /// and an index the VM does not have is ignored.
    fn wake(&mut self, vcpu: usize);
    /// Drives device interrupt line `line` (the number the guest's device
    /// description gives the device: an SPI number on arm64) to `level`.
    fn set_irq(&mut self, line: u32, level: bool);
    /// One byte of the VM's console output.
    fn console_out(&mut self, byte: u8);
    /// Bytes of the VM's virtio console output (by default as the UART's).
    fn console_write_virtio(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.console_out(b);
        }
    }
    /// The guest asked to power the VM off (a board power register).
    fn power_off(&mut self);
    /// The guest asked to reset the VM.
    fn reset(&mut self);
    /// Guest RAM, for devices that move data by DMA (virtio rings).
    fn memory(&self) -> &dyn GuestMemory;
    /// Host time in nanoseconds (monotonic, the same on every pCPU), for
    /// rate limits (the switch's broadcast budget).
    fn now_ns(&self) -> u64;
}

/// Guest RAM as a device reaches it: checked copies by guest physical
/// address. An address range not wholly in the VM's RAM is an error and
/// nothing is copied.
pub trait GuestMemory {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError>;
    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError>;
    /// Makes `[gpa, gpa + len)` ready for device access with at most
    /// `zero_allowance` first-touch zeroings. RAM the guest never touched
    /// is zeroed when a device first reaches it (`read`/`write` do it
    /// themselves), work the size of a block (2 MiB), not of the access:
    /// a device charges it to its budget through this call before it
    /// touches the memory, so that a chain over many untouched blocks is
    /// served over several exits. A range that is not (all) RAM counts as
    /// ready: the access itself then fails as it would. By default memory
    /// is always ready (no lazy zeroing).
    fn prepare(&self, _gpa: u64, _len: u64, _zero_allowance: u32) -> Prepared {
        Prepared::READY
    }
}

/// What [`GuestMemory::prepare`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// Blocks zeroed for it.
    pub zeroed: u32,
    /// Whether the whole range is ready now (false: more blocks wait for
    /// a zeroing the allowance did not cover).
    pub ready: bool,
}

impl Prepared {
    pub const READY: Prepared = Prepared {
        zeroed: 0,
        ready: true,
    };
}

/// A guest-physical range that is not (all) RAM of this VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemError {
    pub gpa: u64,
    pub len: u64,
}

/// An emulated device: registers at offsets from its base.
///
/// `offset` is below the size the device was registered with; `width` is
/// the access as the guest made it (alignment not checked by the bus: the
/// device refuses what its registers do not support with
/// [`MmioError::BadAccess`]).
pub trait MmioDevice: Send + Sync {
    /// A short name for logs ("pl011", "gicd", "virtio-blk").
    fn name(&self) -> &'static str;
    fn read(&self, env: &mut dyn DeviceEnv, offset: u64, width: Width) -> Result<u64, MmioError>;
    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError>;
    /// The VM restarts: back to the state at creation, with no interrupt
    /// line raised (the VM's interrupt controller is reset with it). What
    /// outlives a reset on a real machine (a disk's data) stays. The
    /// default: a device with no state.
    fn reset(&self) {}
    /// Whether the device is in the state [`MmioDevice::reset`] leaves (a
    /// VM restart checks every device after resetting the bus). The
    /// default: a device with no state.
    fn at_power_on(&self) -> bool {
        true
    }
}

/// Why a region could not be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusError {
    /// Zero size, or base + size overflows.
    BadRange { base: u64, size: u64 },
    /// Overlaps the region of the device named.
    Overlap { base: u64, with: &'static str },
}

struct Region {
    base: u64,
    size: u64,
    dev: Arc<dyn MmioDevice>,
}

/// The MMIO map of one VM. See the module documentation.
#[derive(Default)]
pub struct Bus {
    /// Sorted by base, never overlapping.
    regions: Vec<Region>,
}

/// A trapped access routed to its device.
pub struct Hit<'a> {
    pub dev: &'a Arc<dyn MmioDevice>,
    pub offset: u64,
}

impl Hit<'_> {
    /// Performs the access: a load when `store` is `None` (its value
    /// returned), else a store of that value (`Ok(None)`).
    #[inline]
    pub fn access(
        &self,
        env: &mut dyn DeviceEnv,
        width: Width,
        store: Option<u64>,
    ) -> Result<Option<u64>, MmioError> {
        match store {
            None => self.dev.read(env, self.offset, width).map(Some),
            Some(v) => self.dev.write(env, self.offset, width, v).map(|()| None),
        }
    }
}

impl Bus {
    /// Resets every device ([`MmioDevice::reset`]): the VM restarts. Then
    /// checks that every device is at power-on ([`MmioDevice::at_power_on`]);
    /// one that is not is named in the error (and logged), and the restart
    /// fails rather than run the VM on a device that kept old state.
    pub fn reset_all(&self) -> Result<(), &'static str> {
        for r in &self.regions {
            r.dev.reset();
        }
        match self.not_at_power_on().next() {
            None => Ok(()),
            Some(name) => {
                log::error!("{name}: not at power-on after a reset");
                Err(name)
            }
        }
    }

    /// The devices not at power-on ([`MmioDevice::at_power_on`]): none
    /// right after [`Bus::reset_all`].
    pub fn not_at_power_on(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.regions
            .iter()
            .filter(|r| !r.dev.at_power_on())
            .map(|r| r.dev.name())
    }

    pub fn new() -> Bus {
        Bus::default()
    }

    /// Maps `dev` at `[base, base + size)`.
    pub fn add(&mut self, base: u64, size: u64, dev: Arc<dyn MmioDevice>) -> Result<(), BusError> {
        let end = base
            .checked_add(size)
            .filter(|_| size != 0)
            .ok_or(BusError::BadRange { base, size })?;
        let at = self.regions.partition_point(|r| r.base < base);
        let clash = [at.checked_sub(1), Some(at)]
            .into_iter()
            .flatten()
            .filter_map(|i| self.regions.get(i))
            .find(|r| r.base < end && base < r.base + r.size);
        if let Some(r) = clash {
            return Err(BusError::Overlap {
                base,
                with: r.dev.name(),
            });
        }
        self.regions.insert(at, Region { base, size, dev });
        Ok(())
    }

    /// The device at `gpa` and the offset into it, if any. An access that
    /// starts in a region but runs past its end still goes to that device
    /// (which refuses offsets it does not implement). A binary search over
    /// a few regions: no lock, no allocation.
    #[inline]
    pub fn find(&self, gpa: u64) -> Option<Hit<'_>> {
        let at = self.regions.partition_point(|r| r.base <= gpa);
        let r = self.regions.get(at.checked_sub(1)?)?;
        let offset = gpa - r.base;
        (offset < r.size).then_some(Hit {
            dev: &r.dev,
            offset,
        })
    }

    /// [`Bus::find`] for a vCPU that remembers where it last hit:
    /// region `*last` is tried first (a driver polling one register finds
    /// it without the search), and a hit elsewhere is remembered there.
    /// Regions do not overlap, so the answer is [`Bus::find`]'s.
    #[inline]
    pub fn find_from(&self, gpa: u64, last: &mut usize) -> Option<Hit<'_>> {
        if let Some(r) = self.regions.get(*last) {
            if let Some(offset) = gpa.checked_sub(r.base).filter(|o| *o < r.size) {
                return Some(Hit {
                    dev: &r.dev,
                    offset,
                });
            }
        }
        let at = self
            .regions
            .partition_point(|r| r.base <= gpa)
            .checked_sub(1)?;
        let r = self.regions.get(at)?;
        let offset = gpa - r.base;
        (offset < r.size).then(|| {
            *last = at;
            Hit {
                dev: &r.dev,
                offset,
            }
        })
    }

    /// A read at `gpa`: `Err(NoDevice)` where nothing is mapped.
    pub fn read(&self, env: &mut dyn DeviceEnv, gpa: u64, width: Width) -> Result<u64, BusFault> {
        let hit = self.find(gpa).ok_or(BusFault::NoDevice)?;
        hit.dev
            .read(env, hit.offset, width)
            .map_err(BusFault::Device)
    }

    /// A write at `gpa`: `Err(NoDevice)` where nothing is mapped.
    pub fn write(
        &self,
        env: &mut dyn DeviceEnv,
        gpa: u64,
        width: Width,
        value: u64,
    ) -> Result<(), BusFault> {
        let hit = self.find(gpa).ok_or(BusFault::NoDevice)?;
        hit.dev
            .write(env, hit.offset, width, value)
            .map_err(BusFault::Device)
    }

    /// The regions, in address order: (base, size, device name).
    pub fn regions(&self) -> impl Iterator<Item = (u64, u64, &'static str)> + '_ {
        self.regions.iter().map(|r| (r.base, r.size, r.dev.name()))
    }
}

/// Why a bus access failed; the backend answers both with the guest's
/// architectural abort for that access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusFault {
    /// No device at that address.
    NoDevice,
    /// The device refused the access.
    Device(MmioError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering};

    struct Reg {
        name: &'static str,
        value: AtomicU64,
    }

    impl MmioDevice for Reg {
        fn name(&self) -> &'static str {
            self.name
        }
        fn read(&self, _: &mut dyn DeviceEnv, off: u64, _: Width) -> Result<u64, MmioError> {
            if off == 0 {
                Ok(self.value.load(Ordering::Relaxed))
            } else {
                Err(MmioError::BadAccess)
            }
        }
        fn write(
            &self,
            env: &mut dyn DeviceEnv,
            off: u64,
            _: Width,
            v: u64,
        ) -> Result<(), MmioError> {
            if off != 0 {
                return Err(MmioError::BadAccess);
            }
            self.value.store(v, Ordering::Relaxed);
            env.set_irq(7, v != 0);
            Ok(())
        }
    }

    struct NoRam;
    impl GuestMemory for NoRam {
        fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
            Err(MemError {
                gpa,
                len: buf.len() as u64,
            })
        }
        fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
            Err(MemError {
                gpa,
                len: data.len() as u64,
            })
        }
    }

    #[derive(Default)]
    struct Rec {
        irqs: Vec<(u32, bool)>,
    }
    impl DeviceEnv for Rec {
        fn vcpu(&self) -> usize {
            0
        }
        fn wake(&mut self, _: usize) {}
        fn set_irq(&mut self, line: u32, level: bool) {
            self.irqs.push((line, level));
        }
        fn console_out(&mut self, _: u8) {}
        fn power_off(&mut self) {}
        fn reset(&mut self) {}
        fn memory(&self) -> &dyn GuestMemory {
            &NoRam
        }
        fn now_ns(&self) -> u64 {
            0
        }
    }

    fn reg(name: &'static str) -> Arc<dyn MmioDevice> {
        Arc::new(Reg {
            name,
            value: AtomicU64::new(0),
        })
    }

    #[test]
    fn routes_by_address_and_offset() {
        let mut bus = Bus::new();
        bus.add(0x2000, 0x1000, reg("b")).unwrap();
        bus.add(0x1000, 0x1000, reg("a")).unwrap();
        let mut env = Rec::default();
        bus.write(&mut env, 0x2000, Width::Word, 5).unwrap();
        assert_eq!(bus.read(&mut env, 0x2000, Width::Word), Ok(5));
        assert_eq!(bus.read(&mut env, 0x1000, Width::Word), Ok(0));
        assert_eq!(env.irqs, [(7, true)]);
        assert_eq!(
            bus.read(&mut env, 0x1004, Width::Word),
            Err(BusFault::Device(MmioError::BadAccess))
        );
        let names: Vec<_> = bus.regions().map(|r| r.2).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn find_from_answers_as_find_does_and_remembers_hits() {
        let mut bus = Bus::new();
        bus.add(0x3000, 0x100, reg("c")).unwrap();
        bus.add(0x1000, 0x100, reg("a")).unwrap();
        bus.add(0x2000, 0x800, reg("b")).unwrap();
        let probes = [
            0,
            0xfff,
            0x1000,
            0x10ff,
            0x1100,
            0x2000,
            0x27ff,
            0x2800,
            0x3050,
            0x3100,
            u64::MAX,
        ];
        // From every remembered region (and a stale index past the end),
        // every probe lands where `find` says.
        for start in 0..5 {
            for gpa in probes {
                let mut last = start;
                let want = bus.find(gpa).map(|h| (h.dev.name(), h.offset));
                let got = bus
                    .find_from(gpa, &mut last)
                    .map(|h| (h.dev.name(), h.offset));
                assert_eq!(got, want, "gpa {gpa:#x} from region {start}");
                if want.is_none() {
                    assert_eq!(last, start, "a miss leaves the hint alone");
                }
            }
        }
        let mut last = 99;
        assert!(bus.find_from(0x2004, &mut last).is_some());
        assert_eq!(last, 1, "regions are kept sorted: b is the second");
        assert_eq!(
            bus.find_from(0x2010, &mut last).map(|h| h.offset),
            Some(0x10)
        );
    }

    #[test]
    fn holes_and_edges_have_no_device() {
        let mut bus = Bus::new();
        bus.add(0x1000, 0x100, reg("a")).unwrap();
        let mut env = Rec::default();
        for gpa in [0, 0xfff, 0x1100, u64::MAX] {
            assert_eq!(
                bus.read(&mut env, gpa, Width::Byte),
                Err(BusFault::NoDevice),
                "{gpa:#x}"
            );
        }
        assert!(bus.find(0x10ff).is_some());
    }

    #[test]
    fn overlaps_and_bad_ranges_are_refused() {
        let mut bus = Bus::new();
        bus.add(0x1000, 0x1000, reg("a")).unwrap();
        for (base, size) in [(0x1800, 0x1000), (0x800, 0x1000), (0x1000, 1), (0, 0x4000)] {
            assert_eq!(
                bus.add(base, size, reg("x")),
                Err(BusError::Overlap { base, with: "a" })
            );
        }
        assert_eq!(
            bus.add(0x5000, 0, reg("x")),
            Err(BusError::BadRange {
                base: 0x5000,
                size: 0
            })
        );
        assert!(bus.add(u64::MAX - 1, 4, reg("x")).is_err());
        bus.add(0x2000, 0x10, reg("c")).unwrap();
        bus.add(0xfff, 1, reg("d")).unwrap();
    }
}
