//! Polled NS16550A output (register stride 1, as on QEMU's LoongArch virt
//! machine and the Loongson 3A5000/LS7A UARTs). Firmware has set the baud
//! rate; kestrel transmits, and polls for input bytes for the VMs' consoles.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bitflags::bitflags;
use volatile::access::ReadOnly;

use super::super::mmio::{Block, VolatileFieldAccess};
use super::dmw;

/// The 16550 registers kestrel uses (byte registers, stride 1).
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct Ns16550Regs {
    /// THR when written, RBR when read.
    data: u8,
    _ier: u8,
    /// IIR when read (FCR when written: kestrel does not).
    #[access(ReadOnly)]
    iir: u8,
    _reserved: [u8; 2],
    #[access(ReadOnly)]
    lsr: u8,
}
const _: () = assert!(core::mem::offset_of!(Ns16550Regs, iir) == 2);
const _: () = assert!(core::mem::offset_of!(Ns16550Regs, lsr) == 5);

/// IIR bits 7:6: both set when the FIFOs are enabled (a 16550A's).
const IIR_FIFOS: u8 = 0xc0;
/// The transmit FIFO of a 16550A: bytes it takes once LSR.THRE says it
/// is empty.
const TX_FIFO: usize = 16;

bitflags! {
    /// Line status register bits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Lsr: u8 {
        /// Data ready: RBR holds a byte.
        const DR = 1 << 0;
        /// THR empty.
        const THRE = 1 << 5;
    }
}

pub struct Ns16550 {
    /// Uncached virtual address of the register block; 0 = no console.
    base: AtomicU64,
    /// The firmware left the FIFOs on: THRE means 16 bytes of room.
    fifo: AtomicBool,
}

impl Ns16550 {
    pub const fn new() -> Self {
        Ns16550 {
            base: AtomicU64::new(0),
            fifo: AtomicBool::new(false),
        }
    }

    /// Uses the UART at physical address `pa` from now on.
    pub fn set_base(&self, pa: u64) {
        self.base.store(dmw::uncached(pa), Ordering::Release);
        // Reading IIR only clears a pending THRE interrupt, which kestrel
        // does not use (the UART's interrupt is not wired to anyone).
        let fifo = self
            .regs()
            .is_some_and(|u| u.regs().iir().read() & IIR_FIFOS == IIR_FIFOS);
        self.fifo.store(fifo, Ordering::Release);
    }

    pub fn base_pa(&self) -> u64 {
        dmw::to_phys(self.base.load(Ordering::Acquire))
    }

    /// The registers, if a console is set.
    fn regs(&self) -> Option<Block<Ns16550Regs>> {
        let base = self.base.load(Ordering::Acquire);
        if base == 0 {
            return None;
        }
        // SAFETY: a non-zero `base` is the uncached-window address of the
        // 16550 the DTB names (`set_base`): strongly-ordered uncached
        // memory on every CPU (DMW0), byte registers, no Rust reference.
        Some(unsafe { Block::new(base as usize) })
    }

    pub fn write_bytes(&self, bytes: &[u8]) {
        let Some(uart) = self.regs() else {
            return;
        };
        let r = uart.regs();
        for &b in bytes {
            while !Lsr::from_bits_retain(r.lsr().read()).contains(Lsr::THRE) {
                core::hint::spin_loop();
            }
            r.data().write(b);
        }
    }
}

impl Ns16550 {
    /// Writes as many of `bytes` as the transmitter takes now, without
    /// waiting: while LSR.THRE says it is empty, a byte (or a FIFO's worth
    /// when the FIFOs are on). Returns how many; all of them when there is
    /// no console.
    pub fn try_write(&self, bytes: &[u8]) -> usize {
        let Some(uart) = self.regs() else {
            return bytes.len();
        };
        let r = uart.regs();
        let burst = if self.fifo.load(Ordering::Acquire) {
            TX_FIFO
        } else {
            1
        };
        let mut n = 0;
        while n < bytes.len() && Lsr::from_bits_retain(r.lsr().read()).contains(Lsr::THRE) {
            let end = (n + burst).min(bytes.len());
            for &b in &bytes[n..end] {
                r.data().write(b);
            }
            n = end;
        }
        n
    }

    /// A received byte, if one is waiting (LSR.DR).
    pub fn read_byte(&self) -> Option<u8> {
        let r = self.regs()?.regs();
        if !Lsr::from_bits_retain(r.lsr().read()).contains(Lsr::DR) {
            return None;
        }
        // Reading RBR only pops the byte LSR.DR says is there.
        Some(r.data().read())
    }
}

impl Default for Ns16550 {
    fn default() -> Self {
        Self::new()
    }
}
