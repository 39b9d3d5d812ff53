//! A board's legacy I/O port window with nothing behind it.
//!
//! Loongson boards (and QEMU's LoongArch `virt`) decode the ISA I/O port
//! space as a window of physical memory: port `N` is the byte at the
//! window's base + `N`. A kernel that is told of the window (the device
//! tree's `isa` node) maps it and lets its legacy drivers probe their
//! ports there: Linux's i8042 reads its status register (port 0x64) at
//! boot. On a board where no chip answers a port, the bus reads all-ones
//! and drops writes, and that is what drivers take for "no device".
//!
//! [`IsaIo`] is that answer as a bus device: a load of any width at any
//! offset within the window reads all-ones (of its width), a store is
//! ignored, and nothing in it has state. The window is bounded: an access
//! that starts in it but runs past its end is refused
//! ([`MmioError::BadAccess`], the backend's answer for a register that
//! does not take an access), and one that starts outside it is not this
//! device's (the bus has nothing there).

use super::bus::{DeviceEnv, MmioDevice};
use super::{MmioError, Width};

/// A legacy I/O window of `size` bytes (ports 0 .. size - 1).
pub struct IsaIo {
    pub size: u64,
}

impl IsaIo {
    /// Whether an access of `width` at `offset` lies wholly in the window.
    fn inside(&self, offset: u64, width: Width) -> Result<(), MmioError> {
        match offset.checked_add(width.bytes()) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(MmioError::BadAccess),
        }
    }
}

impl MmioDevice for IsaIo {
    fn name(&self) -> &'static str {
        "isa-io"
    }

    /// No port answers: all-ones, as the bus floats high.
    fn read(&self, _: &mut dyn DeviceEnv, offset: u64, width: Width) -> Result<u64, MmioError> {
        self.inside(offset, width)?;
        Ok(width.mask(u64::MAX))
    }

    /// No port takes the value.
    fn write(
        &self,
        _: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        _value: u64,
    ) -> Result<(), MmioError> {
        self.inside(offset, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::vdev::bus::{Bus, BusFault};
    use crate::dev::vdev::testenv::Recorder;
    use alloc::sync::Arc;

    const AT: u64 = 0x1800_0000;
    const SIZE: u64 = 0x4000;
    const WIDTHS: [Width; 4] = [Width::Byte, Width::Half, Width::Word, Width::Dword];

    fn bus() -> Bus {
        let mut bus = Bus::new();
        bus.add(AT, SIZE, Arc::new(IsaIo { size: SIZE })).unwrap();
        bus
    }

    #[test]
    fn every_port_reads_all_ones_at_every_width() {
        let bus = bus();
        let mut env = Recorder::new(1);
        // The i8042's status and data ports, the first and last ports,
        // odd offsets (no alignment is asked for).
        for port in [0x60, 0x64, 0x0, 0x1, 0x3, 0x3ff8, 0x3ffc] {
            for w in WIDTHS {
                if port + w.bytes() > SIZE {
                    continue;
                }
                assert_eq!(
                    bus.read(&mut env, AT + port, w),
                    Ok(w.mask(u64::MAX)),
                    "port {port:#x} {w:?}"
                );
            }
        }
        assert_eq!(bus.read(&mut env, AT + 0x3fff, Width::Byte), Ok(0xff));
    }

    #[test]
    fn writes_change_nothing_and_reach_no_one() {
        let bus = bus();
        let mut env = Recorder::new(2);
        for (port, v) in [(0x64, 0xaa), (0x60, 0xf4), (0x80, 0), (0x3ff8, u64::MAX)] {
            for w in WIDTHS {
                bus.write(&mut env, AT + port, w, v).unwrap();
                assert_eq!(bus.read(&mut env, AT + port, w), Ok(w.mask(u64::MAX)));
            }
        }
        assert!(env.irqs.is_empty() && env.out.is_empty());
        assert_eq!((env.power_offs, env.resets), (0, 0));
    }

    #[test]
    fn bounded() {
        let bus = bus();
        let mut env = Recorder::new(1);
        // Outside the window: no device there.
        for gpa in [AT - 1, AT - 8, AT + SIZE, AT + SIZE + 0x60] {
            assert_eq!(
                bus.read(&mut env, gpa, Width::Byte),
                Err(BusFault::NoDevice)
            );
            assert_eq!(
                bus.write(&mut env, gpa, Width::Dword, 0),
                Err(BusFault::NoDevice)
            );
        }
        // Starting inside but running past the end: refused.
        for (off, w) in [
            (SIZE - 1, Width::Half),
            (SIZE - 2, Width::Word),
            (SIZE - 4, Width::Dword),
            (SIZE - 1, Width::Dword),
        ] {
            let bad = Err(BusFault::Device(MmioError::BadAccess));
            assert_eq!(bus.read(&mut env, AT + off, w), bad);
            assert_eq!(bus.write(&mut env, AT + off, w, 1), bad.map(|_| ()));
        }
        // Offsets near the end of the address space do not overflow.
        let dev = IsaIo { size: SIZE };
        assert_eq!(
            dev.read(&mut env, u64::MAX - 3, Width::Dword),
            Err(MmioError::BadAccess)
        );
    }

    #[test]
    fn random_accesses_have_a_defined_answer() {
        let bus = bus();
        let mut env = Recorder::new(1);
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let w = WIDTHS[(x & 3) as usize];
            let gpa = AT - 0x100 + (x >> 8) % (SIZE + 0x200);
            let inside = gpa >= AT && gpa + w.bytes() <= AT + SIZE;
            let starts_inside = (AT..AT + SIZE).contains(&gpa);
            let r = bus.read(&mut env, gpa, w);
            let wr = bus.write(&mut env, gpa, w, x);
            match (inside, starts_inside) {
                (true, _) => {
                    assert_eq!(r, Ok(w.mask(u64::MAX)));
                    assert_eq!(wr, Ok(()));
                }
                (false, true) => {
                    assert_eq!(r, Err(BusFault::Device(MmioError::BadAccess)));
                    assert_eq!(wr, Err(BusFault::Device(MmioError::BadAccess)));
                }
                (false, false) => {
                    assert_eq!(r, Err(BusFault::NoDevice));
                    assert_eq!(wr, Err(BusFault::NoDevice));
                }
            }
        }
        assert!(env.irqs.is_empty() && env.out.is_empty());
    }
}
