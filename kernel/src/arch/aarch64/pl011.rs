//! The PL011 UART, transmit only (the console). The loader (QEMU, U-Boot,
//! TF-A) leaves it enabled and configured; kestrel does not reprogram it.
//!
//! Before the device tree is read, the console address is a guess:
//! [`EARLY_GUESS`], the PL011 of QEMU `virt`. It is used only for the
//! messages of a boot that cannot continue (wrong EL, no or bad DTB), and is
//! replaced by the DTB's UART as soon as the DTB header is valid.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicUsize, Ordering};

/// QEMU `virt`'s PL011 (Juno's is 0x7FF8_0000: only the DTB can tell).
pub const EARLY_GUESS: usize = 0x0900_0000;

const DR: usize = 0x00;
const FR: usize = 0x18;
const FR_TXFF: u32 = 1 << 5;
const FR_RXFE: u32 = 1 << 4;
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
    base: usize,
}

impl Pl011 {
    pub const fn new(base: usize) -> Self {
        Pl011 { base }
    }

    pub fn write_bytes(&self, bytes: &[u8]) {
        for &b in bytes {
            self.put(b);
        }
    }

    /// A received byte, if the receive FIFO holds one.
    pub fn read_byte(&self) -> Option<u8> {
        let fr = (self.base + FR) as *const u32;
        let dr = (self.base + DR) as *const u32;
        // SAFETY: as in `put`; reading DR pops one byte from the FIFO.
        unsafe {
            if core::ptr::read_volatile(fr) & FR_RXFE != 0 {
                return None;
            }
            Some(core::ptr::read_volatile(dr) as u8)
        }
    }

    fn put(&self, b: u8) {
        let fr = (self.base + FR) as *const u32;
        let dr = (self.base + DR) as *mut u32;
        let mut spins = 0;
        // SAFETY: `base` is the PL011 the DTB (or the documented guess)
        // names; it is identity-mapped as Device memory (or the MMU is off).
        // FR and DR are 32-bit registers at aligned offsets.
        unsafe {
            while core::ptr::read_volatile(fr) & FR_TXFF != 0 && spins < SPIN_LIMIT {
                spins += 1;
                core::hint::spin_loop();
            }
            core::ptr::write_volatile(dr, u32::from(b));
        }
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
