//! The PL011 UART, transmit only (the console). The loader (QEMU, U-Boot,
//! TF-A) leaves it enabled and configured; kestrel does not reprogram it.
//!
//! Before the device tree is read, the console address is a guess:
//! [`EARLY_GUESS`], the PL011 of QEMU `virt`. It is used only for the
//! messages of a boot that cannot continue (wrong EL, no or bad DTB), and is
//! replaced by the DTB's UART as soon as the DTB header is valid.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicUsize, Ordering};

use bitflags::bitflags;
use volatile::access::ReadOnly;

use super::super::mmio::{Block, VolatileFieldAccess};

/// QEMU `virt`'s PL011 (Juno's is 0x7FF8_0000: only the DTB can tell).
pub const EARLY_GUESS: usize = 0x0900_0000;

/// The PL011 registers kestrel uses.
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct Pl011Regs {
    /// UARTDR: data (bits 7:0).
    dr: u32,
    _reserved: [u32; 5],
    /// UARTFR: flags.
    #[access(ReadOnly)]
    fr: u32,
}
const _: () = assert!(core::mem::offset_of!(Pl011Regs, fr) == 0x18);

bitflags! {
    /// UARTFR bits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Fr: u32 {
        /// Receive FIFO empty.
        const RXFE = 1 << 4;
        /// Transmit FIFO full.
        const TXFF = 1 << 5;
    }
}
/// Polls of a full FIFO before a byte is dropped (a missing UART must not hang us).
const SPIN_LIMIT: u32 = 1_000_000;

/// The UART the early (pre-platform) console and crash dumps use. Only
/// plain loads and stores: safe with the MMU off.
static EARLY: AtomicUsize = AtomicUsize::new(EARLY_GUESS);

/// Sets the early console UART (from the DTB).
pub fn set_early(base: usize) {
    EARLY.store(base, Ordering::Relaxed);
}

/// The early console UART.
pub fn early() -> Pl011 {
    Pl011::new(EARLY.load(Ordering::Relaxed))
}

#[derive(Clone, Copy, Debug)]
pub struct Pl011 {
    regs: Block<Pl011Regs>,
}

impl Pl011 {
    /// The PL011 at `base`: the DTB's UART or [`EARLY_GUESS`].
    pub const fn new(base: usize) -> Self {
        assert!(base != 0 && base.is_multiple_of(4), "PL011 base");
        // SAFETY: `base` (checked non-zero and aligned) is the PL011 the
        // DTB names (or the documented guess); it is identity-mapped as
        // Device memory on every CPU (or the MMU is off), and kestrel makes
        // no reference into it.
        let regs = unsafe { Block::new(base) };
        Pl011 { regs }
    }

    fn flags(&self) -> Fr {
        Fr::from_bits_retain(self.regs.regs().fr().read())
    }

    pub fn write_bytes(&self, bytes: &[u8]) {
        for &b in bytes {
            self.put(b);
        }
    }

    /// Writes as many of `bytes` as the transmit FIFO takes now (until
    /// `FR.TXFF`), without waiting; returns how many.
    pub fn try_write(&self, bytes: &[u8]) -> usize {
        let mut n = 0;
        for &b in bytes {
            if self.flags().contains(Fr::TXFF) {
                break;
            }
            self.regs.regs().dr().write(u32::from(b));
            n += 1;
        }
        n
    }

    /// A received byte, if the receive FIFO holds one.
    pub fn read_byte(&self) -> Option<u8> {
        if self.flags().contains(Fr::RXFE) {
            return None;
        }
        // Reading DR pops one byte from the FIFO.
        Some(self.regs.regs().dr().read() as u8)
    }

    fn put(&self, b: u8) {
        let mut spins = 0;
        while self.flags().contains(Fr::TXFF) && spins < SPIN_LIMIT {
            spins += 1;
            core::hint::spin_loop();
        }
        self.regs.regs().dr().write(u32::from(b));
    }
}

/// `fmt::Write` with CRLF line ends, for messages printed without `klog`.
impl Write for Pl011 {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for (i, line) in s.split('\n').enumerate() {
            if i > 0 {
                self.write_bytes(b"\r\n");
            }
            self.write_bytes(line.as_bytes());
        }
        Ok(())
    }
}

/// Prints on the early console (no lock: boot CPU alone, or a crash).
pub fn early_print(args: fmt::Arguments) {
    let _ = early().write_fmt(args);
}
