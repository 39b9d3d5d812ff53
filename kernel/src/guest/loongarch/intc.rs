//! A LoongArch VM's device interrupt controllers, chained as on QEMU virt
//! and Loongson 3A5000 + 7A boards: device lines -> PCH-PIC ([`pchpic`],
//! MMIO) -> EIOINTC vectors ([`eiointc`], IOCSR) -> each vCPU's HWI lines
//! (ESTAT.IS[9:2], the CPU interrupt controller Linux calls `cpuic`).
//!
//! [`Intc`] is what a backend holds per VM, whichever way it runs guests:
//! - devices drive lines ([`Intc::set_level`], [`Intc::pulse`]);
//! - the guest's IOCSR and MMIO accesses go to [`Intc::iocsr_read`] /
//!   [`Intc::iocsr_write`] and to the [`PchPicDevice`] on the VM's bus;
//! - every change returns the vCPUs whose HWI lines rose ([`VcpuSet`]):
//!   the backend wakes or kicks them;
//! - before entering vCPU i the backend asks [`Intc::hwi`] which lines are
//!   up and puts them in the guest's ESTAT (trap-and-emulate: the virtual
//!   ESTAT; LVZ: GINTC), without taking the lock.

pub mod eiointc;
pub mod pchpic;

use crate::base::lock::Mutex;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::dev::vdev::bus::{DeviceEnv, MmioDevice};
use crate::dev::vdev::{MmioError, Width};
use crate::vcpu::cpuset::VcpuSet;

pub use eiointc::Eiointc;
pub use pchpic::PchPic;

/// The two controllers, changed together under one lock.
#[derive(Clone, Debug)]
pub struct Chips {
    pub pch: PchPic,
    pub eio: Eiointc,
    /// The EIOINTC inputs the PCH-PIC drives now.
    driven: [u64; 4],
}

impl Chips {
    pub fn new(nvcpus: usize) -> Chips {
        Chips {
            pch: PchPic::new(),
            eio: Eiointc::new(nvcpus),
            driven: [0; 4],
        }
    }

    /// Passes the PCH-PIC's outputs that changed to the EIOINTC's inputs.
    fn propagate(&mut self) {
        let now = self.pch.vectors();
        for (w, (&new, old)) in now.iter().zip(self.driven.iter_mut()).enumerate() {
            let mut diff = new ^ *old;
            while diff != 0 {
                let b = diff.trailing_zeros() as usize;
                diff &= diff - 1;
                self.eio.set_input(w * 64 + b, new & (1 << b) != 0);
            }
            *old = new;
        }
    }

    /// Invariants of the chain (tests and fuzzing).
    pub fn check(&self) -> Result<(), &'static str> {
        self.pch.check()?;
        self.eio.check()?;
        if self.pch.vectors() != self.driven {
            return Err("EIOINTC inputs differ from the PCH-PIC outputs");
        }
        for v in 0..eiointc::VECTORS {
            if self.eio.input(v) != (self.driven[v / 64] & (1 << (v % 64)) != 0) {
                return Err("EIOINTC input not driven by the PCH-PIC");
            }
        }
        Ok(())
    }
}

/// One VM's interrupt controllers (see the module documentation).
pub struct Intc {
    chips: Mutex<Chips>,
    /// HWI lines of each vCPU (bit n = HWIn) as of the last change.
    lines: Vec<AtomicU8>,
}

impl Intc {
    pub fn new(nvcpus: usize) -> Intc {
        Intc {
            chips: Mutex::new(Chips::new(nvcpus)),
            lines: (0..nvcpus).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    pub fn nvcpus(&self) -> usize {
        self.lines.len()
    }

    /// vCPU `vcpu`'s HWI lines ([`Intc::hwi`]'s word), for a caller that
    /// reads them before every entry and looks the vCPU up once.
    pub fn hwi_lines(&self, vcpu: usize) -> Option<&AtomicU8> {
        self.lines.get(vcpu)
    }

    /// HWI lines up for vCPU `vcpu`: bit n = HWIn = ESTAT.IS[2 + n].
    #[inline]
    pub fn hwi(&self, vcpu: usize) -> u8 {
        self.hwi_lines(vcpu)
            .map_or(0, |l| l.load(Ordering::Acquire))
    }

    /// Runs `f` on the controllers, then settles the chain: returns the
    /// vCPUs whose lines rose.
    fn change<R>(&self, f: impl FnOnce(&mut Chips) -> R) -> (R, VcpuSet) {
        let mut c = self.chips.lock();
        let r = f(&mut c);
        c.propagate();
        let mut rose = VcpuSet::EMPTY;
        for (i, l) in self.lines.iter().enumerate() {
            let new = c.eio.lines(i);
            let old = l.swap(new, Ordering::AcqRel);
            if new & !old != 0 {
                rose.insert(i);
            }
        }
        (r, rose)
    }

    /// A device drives PCH-PIC input `line` to `level`.
    pub fn set_level(&self, line: u32, level: bool) -> VcpuSet {
        self.change(|c| c.pch.set_level(line as usize, level)).1
    }

    /// A device signals an edge on `line` (rise, then fall).
    pub fn pulse(&self, line: u32) -> VcpuSet {
        self.change(|c| {
            c.pch.set_level(line as usize, true);
            c.propagate();
            c.pch.set_level(line as usize, false);
        })
        .1
    }

    /// Whether IOCSR `addr` belongs to these controllers.
    pub fn owns_iocsr(addr: u64) -> bool {
        eiointc::owns(addr)
    }

    /// `iocsrrd` by vCPU `vcpu`: `None` if not an EIOINTC address.
    pub fn iocsr_read(&self, vcpu: usize, addr: u64, size: u64) -> Option<u64> {
        eiointc::owns(addr).then(|| self.chips.lock().eio.read(vcpu, addr, size))
    }

    /// `iocsrwr` by vCPU `vcpu`: `None` if not an EIOINTC address, else
    /// the vCPUs whose lines rose.
    pub fn iocsr_write(&self, vcpu: usize, addr: u64, size: u64, val: u64) -> Option<VcpuSet> {
        eiointc::owns(addr).then(|| self.change(|c| c.eio.write(vcpu, addr, size, val)).1)
    }

    /// An IPI block ANY_SEND to vCPU `target`'s EIOINTC view: a 32-bit
    /// write with bytes kept where `keep` has bits.
    pub fn any_send(&self, target: usize, addr: u64, val: u32, keep: u8) -> VcpuSet {
        if !eiointc::owns(addr) || target >= self.nvcpus() {
            return VcpuSet::EMPTY;
        }
        self.change(|c| c.eio.write_masked(target, addr, val, keep))
            .1
    }

    /// A guest load from the PCH-PIC's registers.
    pub fn mmio_read(&self, off: u64, size: u64) -> Result<u64, pchpic::BadAccess> {
        self.chips.lock().pch.read(off, size)
    }

    /// A guest store to the PCH-PIC's registers.
    pub fn mmio_write(&self, off: u64, size: u64, val: u64) -> Result<VcpuSet, pchpic::BadAccess> {
        let (r, rose) = self.change(|c| c.pch.write(off, size, val));
        r.map(|()| rose)
    }

    /// The VM restarts: both controllers back to power-on, every line
    /// low (its devices are reset with it).
    pub fn reset(&self) {
        self.change(|c| {
            c.pch.reset();
            c.eio.reset();
            c.driven = [0; 4];
        });
    }

    /// A copy of the state, with its invariants checked and the lines the
    /// backend sees compared with it (tests and fuzzing).
    pub fn check(&self) -> Result<Chips, &'static str> {
        let c = self.chips.lock().clone();
        c.check()?;
        for i in 0..self.nvcpus() {
            if c.eio.lines(i) != self.hwi(i) {
                return Err("published lines differ from the model");
            }
        }
        Ok(c)
    }
}

/// The PCH-PIC's registers on a VM's MMIO bus.
pub struct PchPicDevice(pub Arc<Intc>);

impl MmioDevice for PchPicDevice {
    fn name(&self) -> &'static str {
        "pch-pic"
    }

    fn read(&self, _env: &mut dyn DeviceEnv, offset: u64, width: Width) -> Result<u64, MmioError> {
        self.0
            .mmio_read(offset, width.bytes())
            .map_err(|_| MmioError::BadAccess)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        let rose = self
            .0
            .mmio_write(offset, width.bytes(), value)
            .map_err(|_| MmioError::BadAccess)?;
        for v in rose.iter() {
            env.wake(v);
        }
        Ok(())
    }

    fn reset(&self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests;
