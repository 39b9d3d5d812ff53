//! `log` output on the boot console: whole lines (so CPUs do not
//! interleave), the CPU index on every line. Lines go through the
//! console's output buffers ([`crate::base::conout`]): written before the
//! call returns while kestrel boots and ends, queued ahead of every VM's
//! output while VMs run.

use crate::base::lock::Once;
use alloc::string::String;
use core::fmt::{self, Write};

use crate::base::conout;
use crate::base::platform::Platform;

static PLATFORM: Once<&'static dyn Platform> = Once::new();

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

/// Text as the terminal takes it: each `\n` as CRLF.
struct CrLf(String);

impl Write for CrLf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for (i, line) in s.split('\n').enumerate() {
            if i > 0 {
                self.0.push_str("\r\n");
            }
            self.0.push_str(line);
        }
        Ok(())
    }
}

/// `args` as the terminal takes it.
fn crlf(args: fmt::Arguments) -> String {
    let mut w = CrLf(String::new());
    let _ = w.write_fmt(args);
    w.0
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
            let line = crlf(format_args!("[cpu{cpu}] {level} {}\n", record.args()));
            conout::log_line(line.as_bytes());
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

/// Prints without the log prefix (banner, kestrel's own lines): as a log
/// line, through the console's output buffers.
pub fn print(args: fmt::Arguments) {
    if PLATFORM.get().is_some() {
        conout::log_line(crlf(args).as_bytes());
    }
}

/// Prints at once, waiting for the UART, and never waits for a lock: for
/// crash dumps, where a lock holder may be the CPU that crashed. What the
/// console's buffers hold is written first where no CPU holds them.
pub fn print_unlocked(args: fmt::Arguments) {
    if let Some(p) = PLATFORM.get() {
        conout::crash_flush(|b| p.console_write(b));
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
