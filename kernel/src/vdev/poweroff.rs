//! A board power-off register as a bus device: a write of its value (QEMU
//! virt LoongArch's GED sleep control: 0x34, SLP_TYP 5 | SLP_EN) ends the
//! VM through [`DeviceEnv::power_off`]; other writes are ignored and reads
//! return 0, at any width.

use super::bus::{DeviceEnv, MmioDevice};
use super::{MmioError, Width};

/// The power-off register.
pub struct PowerOff {
    /// The value that powers off (compared with the written bits of the
    /// access's width).
    pub value: u64,
}

impl MmioDevice for PowerOff {
    fn name(&self) -> &'static str {
        "poweroff"
    }

    fn read(&self, _: &mut dyn DeviceEnv, _offset: u64, _: Width) -> Result<u64, MmioError> {
        Ok(0)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        _offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        if width.mask(value) == self.value {
            env.power_off();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::bus::{Bus, BusFault};
    use crate::vdev::testenv::Recorder;
    use alloc::sync::Arc;

    const AT: u64 = 0x100e_001c;

    fn bus() -> Bus {
        let mut bus = Bus::new();
        bus.add(AT, 1, Arc::new(PowerOff { value: 0x34 })).unwrap();
        bus
    }

    #[test]
    fn only_the_power_off_value_ends_the_vm() {
        let bus = bus();
        let mut env = Recorder::new(2);
        for w in [Width::Byte, Width::Half, Width::Word, Width::Dword] {
            assert_eq!(bus.read(&mut env, AT, w), Ok(0));
        }
        for v in [0, 0x33, 0x35, 0xff, 0x3400] {
            bus.write(&mut env, AT, Width::Byte, v).unwrap();
        }
        bus.write(&mut env, AT, Width::Word, 0x1_0034).unwrap();
        assert_eq!(env.power_offs, 0, "0x34 must be the whole written value");
        // A byte store of a register holding 0x134 writes 0x34.
        bus.write(&mut env, AT, Width::Byte, 0x134).unwrap();
        assert_eq!(env.power_offs, 1);
        bus.write(&mut env, AT, Width::Dword, 0x34).unwrap();
        assert_eq!(env.power_offs, 2);
        assert!(env.irqs.is_empty() && env.out.is_empty() && env.resets == 0);
    }

    #[test]
    fn one_byte_wide() {
        let bus = bus();
        let mut env = Recorder::new(0);
        for gpa in [AT - 1, AT + 1, AT + 4] {
            assert_eq!(
                bus.write(&mut env, gpa, Width::Byte, 0x34),
                Err(BusFault::NoDevice)
            );
        }
        assert_eq!(env.power_offs, 0);
    }
}
