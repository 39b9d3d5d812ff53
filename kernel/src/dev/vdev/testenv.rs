//! A [`DeviceEnv`] for host tests: records what devices ask for.

use alloc::vec::Vec;

use super::bus::{DeviceEnv, GuestMemory, MemError};

/// Guest RAM of `len` bytes at `base`, in a vector.
pub struct Ram {
    pub base: u64,
    pub bytes: crate::base::lock::Mutex<Vec<u8>>,
}

impl Ram {
    fn range(&self, gpa: u64, len: usize) -> Result<core::ops::Range<usize>, MemError> {
        let size = self.bytes.lock().len() as u64;
        let err = MemError {
            gpa,
            len: len as u64,
        };
        let off = gpa.checked_sub(self.base).ok_or(err)?;
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= size)
            .ok_or(err)?;
        Ok(off as usize..end as usize)
    }
}

impl GuestMemory for Ram {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.range(gpa, buf.len())?;
        buf.copy_from_slice(&self.bytes.lock()[r]);
        Ok(())
    }
    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.range(gpa, data.len())?;
        self.bytes.lock()[r].copy_from_slice(data);
        Ok(())
    }
}

/// Everything a device asked for, in order per kind.
pub struct Recorder {
    pub vcpu: usize,
    pub irqs: Vec<(u32, bool)>,
    pub out: Vec<u8>,
    pub wakes: Vec<usize>,
    pub power_offs: usize,
    pub resets: usize,
    pub ram: Ram,
}

impl Recorder {
    /// As vCPU `vcpu`, with 64 KiB of zeroed RAM at 0x1000_0000.
    pub fn new(vcpu: usize) -> Recorder {
        Recorder {
            vcpu,
            irqs: Vec::new(),
            out: Vec::new(),
            wakes: Vec::new(),
            power_offs: 0,
            resets: 0,
            ram: Ram {
                base: 0x1000_0000,
                bytes: crate::base::lock::Mutex::new(alloc::vec![0; 0x1_0000]),
            },
        }
    }
}

impl DeviceEnv for Recorder {
    fn vcpu(&self) -> usize {
        self.vcpu
    }
    fn wake(&mut self, vcpu: usize) {
        self.wakes.push(vcpu);
    }
    fn set_irq(&mut self, line: u32, level: bool) {
        self.irqs.push((line, level));
    }
    fn console_out(&mut self, byte: u8) {
        self.out.push(byte);
    }
    fn power_off(&mut self) {
        self.power_offs += 1;
    }
    fn reset(&mut self) {
        self.resets += 1;
    }
    fn memory(&self) -> &dyn GuestMemory {
        &self.ram
    }
    fn now_ns(&self) -> u64 {
        0
    }
}
