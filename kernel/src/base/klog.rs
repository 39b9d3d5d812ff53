//! `log` output on the boot console: one lock for whole lines so CPUs do not
//! interleave, and the CPU index on every line.

use core::fmt::{self, Write};
use spin::{Mutex, Once};

use crate::base::platform::Platform;

static PLATFORM: Once<&'static dyn Platform> = Once::new();
static CONSOLE_LOCK: Mutex<()> = Mutex::new(());

struct ConsoleWriter(&'static dyn Platform);

impl Write for ConsoleWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Serial terminals want CRLF.
        for (i, line) in s.split('\n').enumerate() {
            if i > 0 {
                self.0.console_write(b"\r\n");
            }
            self.0.console_write(line.as_bytes());
        }
        Ok(())
    }
}

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        if let Some(p) = PLATFORM.get() {
            let cpu = p.cpu_index();
            let level = match record.level() {
                log::Level::Error => "ERROR",
                log::Level::Warn => "WARN ",
                log::Level::Info => "INFO ",
                log::Level::Debug => "DEBUG",
                log::Level::Trace => "TRACE",
            };
            let _guard = CONSOLE_LOCK.lock();
            let _ = writeln!(ConsoleWriter(*p), "[cpu{cpu}] {level} {}", record.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// Sends `log` output to `platform`'s console. Idempotent.
pub fn init(platform: &'static dyn Platform, level: log::LevelFilter) {
    PLATFORM.call_once(|| platform);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

/// Prints without the log prefix (banner, crash dumps). Takes the console
/// lock; do not call it from a context that may already hold it.
pub fn print(args: fmt::Arguments) {
    if let Some(p) = PLATFORM.get() {
        let _guard = CONSOLE_LOCK.lock();
        let _ = ConsoleWriter(*p).write_fmt(args);
    }
}

/// Writes `bytes` exactly as they are (a VM's terminal output), under the
/// console lock. Same rule as [`print`] about the lock.
pub fn write_raw(bytes: &[u8]) {
    if let Some(p) = PLATFORM.get() {
        let _guard = CONSOLE_LOCK.lock();
        p.console_write(bytes);
    }
}

/// Like [`print`], but never waits for the lock: for crash dumps, where the
/// lock holder may be the CPU that crashed.
pub fn print_unlocked(args: fmt::Arguments) {
    if let Some(p) = PLATFORM.get() {
        let _ = ConsoleWriter(*p).write_fmt(args);
    }
}

/// `println!`-style output on the boot console.
#[macro_export]
macro_rules! kprintln {
    ($($arg:tt)*) => {
        $crate::base::klog::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
