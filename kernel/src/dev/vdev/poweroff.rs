//! A board's power registers as a bus device (QEMU virt LoongArch's GED
//! registers: sleep control at offset 0, where 0x34 = SLP_TYP 5 | SLP_EN
//! powers off, and reset at offset 2, where 0x42 resets). A byte write of
//! the power-off value to its register ends the VM through
//! [`DeviceEnv::power_off`], of the reset value to the reset register
//! restarts it through [`DeviceEnv::reset`]; other writes are ignored and
//! reads return 0, at any width.

use super::bus::{DeviceEnv, MmioDevice};
use super::{MmioError, Width};

/// The power registers.
pub struct PowerRegs {
    /// The power-off register's offset and the value that powers off
    /// (compared with the written bits of the access's width).
    pub off: (u64, u64),
    /// The reset register's offset and value, if the board has one.
    pub reset: Option<(u64, u64)>,
}

impl PowerRegs {
    /// Bytes the registers span from the device's base.
    pub fn size(&self) -> u64 {
        self.reset.map_or(self.off.0, |r| r.0.max(self.off.0)) + 1
    }
}

impl MmioDevice for PowerRegs {
    fn name(&self) -> &'static str {
        "power"
    }

    fn read(&self, _: &mut dyn DeviceEnv, _offset: u64, _: Width) -> Result<u64, MmioError> {
        Ok(0)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        let v = width.mask(value);
        if (offset, v) == self.off {
            env.power_off();
        } else if Some((offset, v)) == self.reset {
            env.reset();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::vdev::bus::{Bus, BusFault};
    use crate::dev::vdev::testenv::Recorder;
    use alloc::sync::Arc;

    const AT: u64 = 0x100e_001c;

    fn regs() -> PowerRegs {
        PowerRegs {
            off: (0, 0x34),
            reset: Some((2, 0x42)),
        }
    }

    fn bus() -> Bus {
        let mut bus = Bus::new();
        bus.add(AT, regs().size(), Arc::new(regs())).unwrap();
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
    fn only_the_reset_value_at_the_reset_register_resets() {
        let bus = bus();
        let mut env = Recorder::new(1);
        // The reset value elsewhere, other values at the reset register.
        for (gpa, v) in [(AT, 0x42), (AT + 1, 0x42), (AT + 2, 0x34), (AT + 2, 0x43)] {
            bus.write(&mut env, gpa, Width::Byte, v).unwrap();
        }
        assert_eq!((env.resets, env.power_offs), (0, 0));
        bus.write(&mut env, AT + 2, Width::Byte, 0x142).unwrap();
        assert_eq!((env.resets, env.power_offs), (1, 0));
        assert_eq!(bus.read(&mut env, AT + 2, Width::Byte), Ok(0));
    }

    #[test]
    fn three_bytes_wide() {
        assert_eq!(regs().size(), 3);
        let off_only = PowerRegs {
            off: (0, 0x34),
            reset: None,
        };
        assert_eq!(off_only.size(), 1);
        let bus = bus();
        let mut env = Recorder::new(0);
        for gpa in [AT - 1, AT + 3, AT + 4] {
            assert_eq!(
                bus.write(&mut env, gpa, Width::Byte, 0x34),
                Err(BusFault::NoDevice)
            );
        }
        assert_eq!(env.power_offs, 0);
    }
}
