//! A UART register model as a bus device: [`Uart`] puts a PL011 or a
//! 16550 on the VM's [`super::bus::Bus`], sends what the guest transmits to
//! the VM's console and drives the UART's interrupt line when its level
//! changes. The backend keeps a typed handle (`Arc<Uart<..>>`) beside the
//! bus for the host side: typed console input goes into [`Uart::regs`]
//! directly, not through MMIO.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::base::lock::Mutex;

use super::bus::{DeviceEnv, MmioDevice};
use super::{ns16550, pl011, MmioError, UartEffect, Width};

/// A UART's registers as the bus adapter drives them. Its receive side and
/// interrupt level are the console's [`RxPort`] (one definition of the
/// level for both the guest's accesses and typed input).
pub trait UartRegs: RxPort + Send + Default {
    /// The device's name in logs and bus listings.
    const NAME: &'static str;
    /// A guest read of `offset`.
    fn mmio_read(&mut self, offset: u64, width: Width) -> Result<u64, MmioError>;
    /// A guest write of `value` to `offset`: the byte transmitted, if any.
    fn mmio_write(
        &mut self,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<Option<u8>, MmioError>;
    /// Whether a guest read of `offset` can change the registers (and so
    /// the interrupt line): the line is looked at again only after those.
    fn read_changes(offset: u64) -> bool {
        let _ = offset;
        true
    }
}

impl UartRegs for pl011::Pl011 {
    const NAME: &'static str = "pl011";
    fn mmio_read(&mut self, offset: u64, width: Width) -> Result<u64, MmioError> {
        self.read(offset, width)
    }
    fn mmio_write(
        &mut self,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<Option<u8>, MmioError> {
        self.write(offset, width, value).map(UartEffect::byte)
    }
    fn read_changes(offset: u64) -> bool {
        pl011::Pl011::read_changes(offset)
    }
}

impl UartRegs for ns16550::Ns16550 {
    const NAME: &'static str = "ns16550";
    fn mmio_read(&mut self, offset: u64, width: Width) -> Result<u64, MmioError> {
        self.read(offset, width)
    }
    fn mmio_write(
        &mut self,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<Option<u8>, MmioError> {
        self.write(offset, width, value).map(UartEffect::byte)
    }
}

/// One emulated UART of a VM.
///
/// Lock order: the UART's registers, then the console multiplexer (a
/// transmitted byte) or the interrupt controller (a line change).
pub struct Uart<R> {
    regs: Mutex<R>,
    /// The device interrupt line it drives (`None`: not wired, guests poll).
    irq: Option<u32>,
    /// The line level as last given to [`DeviceEnv::set_irq`].
    level: AtomicBool,
}

impl<R: UartRegs> Uart<R> {
    pub fn new(regs: R, irq: Option<u32>) -> Uart<R> {
        Uart {
            regs: Mutex::new(regs),
            irq,
            level: AtomicBool::new(false),
        }
    }

    /// The registers, for the host side (console input into the receive
    /// FIFO). Call [`Uart::update_line`] under the same lock after a change.
    pub fn regs(&self) -> &Mutex<R> {
        &self.regs
    }

    /// Drives the interrupt line to `regs`' level if it changed. Call with
    /// the registers' lock held (`regs` is its guard), so line changes
    /// reach the interrupt controller in the order they happened.
    pub fn update_line(&self, regs: &R, env: &mut dyn DeviceEnv) {
        self.update_level(regs.irq_level(), env);
    }

    /// As [`Uart::update_line`], given the registers' line level.
    pub fn update_level(&self, level: bool, env: &mut dyn DeviceEnv) {
        let Some(line) = self.irq else { return };
        // Changed only under the registers' lock: a plain look first (the
        // line rarely changes; a swap is a loop on some CPUs).
        if self.level.load(Ordering::Acquire) != level
            && self.level.swap(level, Ordering::AcqRel) != level
        {
            env.set_irq(line, level);
        }
    }
}

impl<R: UartRegs> MmioDevice for Uart<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn read(&self, env: &mut dyn DeviceEnv, offset: u64, width: Width) -> Result<u64, MmioError> {
        let mut u = self.regs.lock();
        let r = u.mmio_read(offset, width);
        // Every other change (writes, console input) drives the line as it
        // happens, so a read that changes nothing leaves it right.
        if R::read_changes(offset) {
            self.update_line(&u, env);
        }
        r
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        let mut u = self.regs.lock();
        let r = u.mmio_write(offset, width, value);
        if let Ok(Some(byte)) = r {
            env.console_out(byte);
        }
        self.update_line(&u, env);
        r.map(|_| ())
    }

    fn reset(&self) {
        *self.regs.lock() = R::default();
        self.level.store(false, Ordering::Release);
    }
}

/// A guest console's receive side (a UART's FIFO, a virtio console's
/// input buffer), as the console feeds it.
pub trait RxPort {
    /// Whether the receive FIFO has room for another byte.
    fn can_receive(&self) -> bool;
    /// Adds a byte; false if there was no room.
    fn receive(&mut self, byte: u8) -> bool;
    /// The level of the interrupt line it drives (false: none).
    fn irq_level(&self) -> bool {
        false
    }
}

impl RxPort for pl011::Pl011 {
    fn can_receive(&self) -> bool {
        pl011::Pl011::can_receive(self)
    }
    fn receive(&mut self, byte: u8) -> bool {
        pl011::Pl011::receive(self, byte)
    }
    fn irq_level(&self) -> bool {
        pl011::Pl011::irq_level(self)
    }
}

impl RxPort for ns16550::Ns16550 {
    fn can_receive(&self) -> bool {
        ns16550::Ns16550::can_receive(self)
    }
    fn receive(&mut self, byte: u8) -> bool {
        ns16550::Ns16550::receive(self, byte)
    }
    fn irq_level(&self) -> bool {
        ns16550::Ns16550::irq_level(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::vdev::bus::{Bus, BusFault};
    use crate::dev::vdev::testenv::Recorder;
    use alloc::sync::Arc;

    const BASE: u64 = 0x0900_0000;
    const W4: Width = Width::Word;

    fn pl011_bus() -> (Bus, Arc<Uart<pl011::Pl011>>) {
        let uart = Arc::new(Uart::new(pl011::Pl011::new(), Some(1)));
        let mut bus = Bus::new();
        bus.add(BASE, pl011::FRAME_SIZE, uart.clone()).unwrap();
        (bus, uart)
    }

    #[test]
    fn pl011_behind_the_bus_transmits_and_drives_its_line_on_changes_only() {
        let (bus, _uart) = pl011_bus();
        let mut env = Recorder::new(0);
        for &b in b"hi" {
            bus.write(&mut env, BASE, W4, u64::from(b)).unwrap();
        }
        assert_eq!(env.out, b"hi");
        assert!(env.irqs.is_empty(), "TX latched but masked: line stays low");
        // IMSC = TX: the latched TX interrupt raises SPI 1, once.
        bus.write(&mut env, BASE + 0x38, W4, u64::from(pl011::int::TX))
            .unwrap();
        bus.read(&mut env, BASE + 0x18, W4).unwrap();
        bus.write(&mut env, BASE, W4, u64::from(b'!')).unwrap();
        assert_eq!(env.irqs, [(1, true)]);
        // ICR clears it: the line falls.
        bus.write(&mut env, BASE + 0x44, W4, u64::from(pl011::int::TX))
            .unwrap();
        assert_eq!(env.irqs, [(1, true), (1, false)]);
        assert_eq!(env.out, b"hi!");
        assert_eq!(
            (env.power_offs, env.resets, env.wakes.len()),
            (0, 0, 0),
            "a UART asks for nothing else"
        );
    }

    #[test]
    fn pl011_refusals_reach_the_backend_and_holes_have_no_device() {
        let (bus, _uart) = pl011_bus();
        let mut env = Recorder::new(0);
        assert_eq!(
            bus.read(&mut env, BASE + 2, W4),
            Err(BusFault::Device(MmioError::BadAccess)),
            "misaligned"
        );
        assert_eq!(
            bus.write(&mut env, BASE, Width::Dword, 0x41),
            Err(BusFault::Device(MmioError::BadAccess)),
            "64-bit"
        );
        assert!(env.out.is_empty());
        assert_eq!(
            bus.read(&mut env, BASE + pl011::FRAME_SIZE, W4),
            Err(BusFault::NoDevice)
        );
    }

    #[test]
    fn host_input_goes_through_the_typed_handle_and_raises_the_line() {
        let (bus, uart) = pl011_bus();
        let mut env = Recorder::new(0);
        bus.write(&mut env, BASE + 0x38, W4, u64::from(pl011::int::RX))
            .unwrap();
        assert!(env.irqs.is_empty());
        // The console input path: no MMIO, the handle beside the bus.
        let mut host = Recorder::new(usize::MAX);
        {
            let mut u = uart.regs().lock();
            assert!(RxPort::receive(&mut *u, b'x'));
            uart.update_line(&u, &mut host);
        }
        assert_eq!(host.irqs, [(1, true)]);
        assert_eq!(bus.read(&mut env, BASE, W4), Ok(u64::from(b'x')));
        assert_eq!(env.irqs, [(1, false)], "the guest's read drained the FIFO");
    }

    #[test]
    fn an_unwired_16550_never_drives_a_line() {
        let uart = Arc::new(Uart::new(ns16550::Ns16550::new(), None));
        let mut bus = Bus::new();
        bus.add(0x1fe0_01e0, 8, uart).unwrap();
        let mut env = Recorder::new(0);
        // IER = THRI: the 16550's interrupt output rises at once.
        bus.write(&mut env, 0x1fe0_01e1, Width::Byte, 2).unwrap();
        bus.write(&mut env, 0x1fe0_01e0, Width::Byte, u64::from(b'k'))
            .unwrap();
        assert_eq!(env.out, b"k");
        assert!(env.irqs.is_empty());
        assert_eq!(bus.read(&mut env, 0x1fe0_01e5, Width::Byte), Ok(0x60));
        assert_eq!(
            bus.read(&mut env, 0x1fe0_01e0, Width::Word),
            Err(BusFault::Device(MmioError::BadAccess))
        );
        assert_eq!(
            bus.read(&mut env, 0x1fe0_01e8, Width::Byte),
            Err(BusFault::NoDevice),
            "only the 8 registers are mapped"
        );
    }
}
