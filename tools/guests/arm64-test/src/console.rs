//! PL011 console output (polled, transmit only), shared by all CPUs.
//!
//! Every line is written under one lock so lines from different vCPUs never
//! interleave (kestrel tags each guest line with the VM name).

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The UART base until the DTB says otherwise: QEMU `virt`'s PL011.
static BASE: AtomicUsize = AtomicUsize::new(0x0900_0000);
/// 0 = free, otherwise 1 + the index of the owning CPU.
static OWNER: AtomicUsize = AtomicUsize::new(0);

const DR: usize = 0x00;
const FR: usize = 0x18;
const FR_TXFF: u32 = 1 << 5;

/// Uses the PL011 at `base` from now on.
pub fn init(base: usize) {
    BASE.store(base, Ordering::Relaxed);
}

struct Pl011(usize);

impl Pl011 {
    fn putc(&self, byte: u8) {
        // SAFETY: `self.0` is the PL011 the DTB names (or QEMU's default),
        // mapped as Device memory; FR is read-only status, DR takes the byte.
        unsafe {
            while crate::cpu::mmio_read32(self.0 + FR) & FR_TXFF != 0 {
                core::hint::spin_loop();
            }
            crate::cpu::mmio_write32(self.0 + DR, byte as u32);
        }
    }
}

impl Write for Pl011 {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.putc(b'\r');
            }
            self.putc(b);
        }
        Ok(())
    }
}

/// Prints `args` under the console lock. Re-entry from the same CPU (an
/// exception while printing) does not deadlock: it prints anyway.
pub fn print(args: fmt::Arguments) {
    let me = crate::cpu::index() + 1;
    let mut owned = false;
    loop {
        match OWNER.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => {
                owned = true;
                break;
            }
            Err(o) if o == me => break,
            Err(_) => core::hint::spin_loop(),
        }
    }
    let _ = Pl011(BASE.load(Ordering::Relaxed)).write_fmt(args);
    if owned {
        OWNER.store(0, Ordering::Release);
    }
}

/// `println!` on the guest console.
#[macro_export]
macro_rules! println {
    ($($t:tt)*) => {
        $crate::console::print(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// A short message in a fixed buffer (the guest has no heap); text beyond
/// its capacity is cut.
#[derive(Clone, Copy)]
pub struct Msg {
    buf: [u8; 192],
    len: usize,
}

impl Msg {
    pub const fn new() -> Self {
        Msg {
            buf: [0; 192],
            len: 0,
        }
    }

    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for Msg {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for Msg {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// A [`Msg`] from format arguments.
#[macro_export]
macro_rules! msg {
    ($($t:tt)*) => {{
        let mut m = $crate::console::Msg::new();
        let _ = core::fmt::Write::write_fmt(&mut m, format_args!($($t)*));
        m
    }};
}
