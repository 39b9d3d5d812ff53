//! The 16550 console (polled, 8 bits, registers one byte apart) and the
//! result lines.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// QEMU virt / Loongson 3A5000 default; replaced by the FDT's serial node.
pub const DEFAULT_UART: usize = 0x1fe0_01e0;

static BASE: AtomicUsize = AtomicUsize::new(DEFAULT_UART);
static LOCK: AtomicBool = AtomicBool::new(false);
static PASSED: AtomicU32 = AtomicU32::new(0);
static FAILED: AtomicU32 = AtomicU32::new(0);

pub fn set_base(base: usize) {
    BASE.store(base, Ordering::Relaxed);
}

pub fn base() -> usize {
    BASE.load(Ordering::Relaxed)
}

struct Uart;

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let base = base();
        for b in s.bytes() {
            if b == b'\n' {
                put(base, b'\r');
            }
            put(base, b);
        }
        Ok(())
    }
}

fn put(base: usize, b: u8) {
    // SAFETY: `base` is the 16550 (identity mapped, uncached); LSR is at +5,
    // THR at +0.
    unsafe {
        let mut n = 0u32;
        while core::ptr::read_volatile((base + 5) as *const u8) & 0x20 == 0 && n < 100_000 {
            n += 1;
        }
        core::ptr::write_volatile(base as *mut u8, b);
    }
}

/// Prints under the console lock. A CPU that cannot get the lock within a
/// long while prints anyway (a dead CPU must not silence the others).
pub fn print(args: fmt::Arguments) {
    let mut spins = 0u64;
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins > 50_000_000 {
            break;
        }
        core::hint::spin_loop();
    }
    let _ = Uart.write_fmt(args);
    LOCK.store(false, Ordering::Release);
}

macro_rules! println {
    () => { $crate::console::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::print(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use println;

/// The outcome of one check.
pub enum Outcome {
    Pass(Msg),
    Fail(Msg),
    Skip(Msg),
}

/// A short message built without an allocator.
pub struct Msg {
    buf: [u8; 200],
    len: usize,
}

impl Msg {
    pub fn new(args: fmt::Arguments) -> Msg {
        let mut m = Msg {
            buf: [0; 200],
            len: 0,
        };
        let _ = m.write_fmt(args);
        m
    }

    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
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

macro_rules! pass {
    ($($arg:tt)*) => { $crate::console::Outcome::Pass($crate::console::Msg::new(format_args!($($arg)*))) };
}
macro_rules! fail {
    ($($arg:tt)*) => { $crate::console::Outcome::Fail($crate::console::Msg::new(format_args!($($arg)*))) };
}
macro_rules! skip {
    ($($arg:tt)*) => { $crate::console::Outcome::Skip($crate::console::Msg::new(format_args!($($arg)*))) };
}
pub(crate) use {fail, pass, skip};

/// Prints the line for check `name` and counts it:
/// `PASS name[: detail]`, `FAIL name: why`, `SKIP name: why`.
pub fn report(name: &str, o: Outcome) {
    match o {
        Outcome::Pass(m) => {
            PASSED.fetch_add(1, Ordering::Relaxed);
            if m.as_str().is_empty() {
                println!("PASS {name}");
            } else {
                println!("PASS {name}: {}", m.as_str());
            }
        }
        Outcome::Fail(m) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            println!("FAIL {name}: {}", m.as_str());
        }
        Outcome::Skip(m) => println!("SKIP {name}: {}", m.as_str()),
    }
}

/// Prints `RESULT: N passed, M failed`; returns M.
pub fn result() -> u32 {
    let (p, f) = (
        PASSED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
    );
    println!("RESULT: {p} passed, {f} failed");
    f
}
