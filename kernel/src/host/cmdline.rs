//! kestrel's boot options, read from the command line the loader passes
//! (`/chosen/bootargs` on arm64, the a1 string on LoongArch).
//!
//! | option                   | meaning                                              |
//! |--------------------------|------------------------------------------------------|
//! | `kestrel.exit=poweroff`  | power the machine off with a status when work is done |
//! | `kestrel.tick_hz=N`      | timer tick frequency (default 100, 1..=10000)          |
//! | `kestrel.backend=lvz\|tne` | LoongArch: force the LVZ or the trap-and-emulate backend (default: LVZ when the CPU has it) |
//! | `kestrel.console=raw`    | the focused VM owns the terminal, bytes untouched (default, or the package's `console`) |
//! | `kestrel.console=log`    | every VM's output as tagged lines (what the tests read) |
//! | `kestrel.scrollback=N`   | bytes of output kept per VM for replay (default 16384 or the package's `scrollback`; 0..=1048576, `K` suffix allowed) |
//! | `kestrel.baud=N`         | the console line's rate in bits per second (1200..=4000000): output no faster than a UART at that rate takes it (default: as fast as the UART takes it; QEMU's takes everything at once) |
//!
//! Unknown `kestrel.*` options are reported, never silently ignored.

use heapless::Vec;

/// What to do when kestrel's work is done.
/// The largest scrollback ring per VM that `kestrel.scrollback=` accepts.
pub const SCROLLBACK_MAX: usize = 1 << 20;

/// How guest output reaches the terminal (`kestrel.console=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsoleMode {
    /// The focused VM's bytes through its filter; the others' kept for
    /// replay.
    Raw,
    /// Tagged lines of every VM, control bytes made visible.
    Log,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExit {
    /// Stay up (idle CPUs), the default for interactive use.
    Stay,
    /// Power the machine off (PSCI SYSTEM_OFF / the virt power-off register).
    PowerOff,
}

/// Which LoongArch VM backend the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// LVZ when the CPU has it, else trap-and-emulate.
    Auto,
    /// LVZ; an error where the CPU has none.
    Lvz,
    /// Trap-and-emulate, even on a CPU with LVZ.
    TrapEmulate,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootOptions<'a> {
    pub on_exit: OnExit,
    pub tick_hz: u32,
    /// `kestrel.tick_hz=` was given (it overrides the package's
    /// `[hypervisor] tick_hz`).
    pub tick_hz_given: bool,
    pub backend: BackendChoice,
    /// How guest output reaches the terminal, if the command line says
    /// (it overrides the package's `[hypervisor] console`).
    pub console: Option<ConsoleMode>,
    /// Bytes of output kept per VM (raw mode), if the command line says.
    pub scrollback: Option<usize>,
    /// The console line's rate in bits per second, if the command line
    /// says (`base::conout::set_baud`).
    pub baud: Option<u32>,
    /// `kestrel.*` words that were not understood, to be reported.
    pub unknown: Vec<&'a str, 8>,
}

impl Default for BootOptions<'_> {
    fn default() -> Self {
        BootOptions {
            on_exit: OnExit::Stay,
            tick_hz: 100,
            tick_hz_given: false,
            backend: BackendChoice::Auto,
            console: None,
            scrollback: None,
            baud: None,
            unknown: Vec::new(),
        }
    }
}

impl<'a> BootOptions<'a> {
    /// Parses a whitespace-separated command line. Words not starting with
    /// `kestrel.` belong to someone else and are skipped.
    pub fn parse(cmdline: &'a str) -> Self {
        let mut opts = BootOptions::default();
        for word in cmdline.split_ascii_whitespace() {
            let Some(rest) = word.strip_prefix("kestrel.") else {
                continue;
            };
            let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
            let ok = match key {
                "exit" => match value {
                    "poweroff" => {
                        opts.on_exit = OnExit::PowerOff;
                        true
                    }
                    "stay" => {
                        opts.on_exit = OnExit::Stay;
                        true
                    }
                    _ => false,
                },
                "backend" => match value {
                    "lvz" => {
                        opts.backend = BackendChoice::Lvz;
                        true
                    }
                    "tne" => {
                        opts.backend = BackendChoice::TrapEmulate;
                        true
                    }
                    _ => false,
                },
                "console" => match value {
                    "raw" => {
                        opts.console = Some(ConsoleMode::Raw);
                        true
                    }
                    "log" => {
                        opts.console = Some(ConsoleMode::Log);
                        true
                    }
                    _ => false,
                },
                "scrollback" => {
                    let (digits, unit) = match value.strip_suffix(['K', 'k']) {
                        Some(d) => (d, 1024),
                        None => (value, 1),
                    };
                    match digits
                        .parse::<usize>()
                        .ok()
                        .and_then(|n| n.checked_mul(unit))
                    {
                        Some(n) if n <= SCROLLBACK_MAX => {
                            opts.scrollback = Some(n);
                            true
                        }
                        _ => false,
                    }
                }
                "baud" => match value.parse::<u32>() {
                    Ok(b) if crate::base::conout::BAUD_RANGE.contains(&b) => {
                        opts.baud = Some(b);
                        true
                    }
                    _ => false,
                },
                "tick_hz" => match value.parse::<u32>() {
                    Ok(hz @ 1..=10_000) => {
                        opts.tick_hz = hz;
                        opts.tick_hz_given = true;
                        true
                    }
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                // Full list: the first eight are enough to tell the user.
                let _ = opts.unknown.push(word);
            }
        }
        opts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_empty() {
        let o = BootOptions::parse("");
        assert_eq!(o, BootOptions::default());
        assert_eq!(o.on_exit, OnExit::Stay);
        assert_eq!(o.tick_hz, 100);
    }

    #[test]
    fn parses_known_options_and_skips_foreign_words() {
        let o =
            BootOptions::parse("console=ttyAMA0 kestrel.exit=poweroff  kestrel.tick_hz=250 quiet");
        assert_eq!(o.on_exit, OnExit::PowerOff);
        assert_eq!(o.tick_hz, 250);
        assert!(o.unknown.is_empty());
    }

    #[test]
    fn console_mode_and_scrollback() {
        let o = BootOptions::parse("kestrel.console=log kestrel.scrollback=64K");
        assert_eq!(o.console, Some(ConsoleMode::Log));
        assert_eq!(o.scrollback, Some(64 * 1024));
        let o = BootOptions::parse(
            "kestrel.console=tty kestrel.scrollback=2048K kestrel.scrollback=-1",
        );
        assert_eq!(o.console, None);
        assert_eq!(o.scrollback, None);
        assert_eq!(o.unknown.len(), 3);
        assert_eq!(
            BootOptions::parse("kestrel.scrollback=0").scrollback,
            Some(0)
        );
    }

    #[test]
    fn console_line_rate() {
        assert_eq!(
            BootOptions::parse("kestrel.baud=115200").baud,
            Some(115_200)
        );
        let o = BootOptions::parse("kestrel.baud=50 kestrel.baud=fast kestrel.baud=9000000");
        assert_eq!(o.baud, None);
        assert_eq!(o.unknown.len(), 3);
    }

    #[test]
    fn reports_bad_values_and_unknown_keys() {
        let o = BootOptions::parse(
            "kestrel.exit=maybe kestrel.tick_hz=0 kestrel.tick_hz=x kestrel.frob",
        );
        assert_eq!(o.on_exit, OnExit::Stay);
        assert_eq!(o.tick_hz, 100);
        assert_eq!(
            o.unknown.as_slice(),
            [
                "kestrel.exit=maybe",
                "kestrel.tick_hz=0",
                "kestrel.tick_hz=x",
                "kestrel.frob"
            ]
        );
    }

    #[test]
    fn backend_choice() {
        assert_eq!(BootOptions::parse("").backend, BackendChoice::Auto);
        assert_eq!(
            BootOptions::parse("kestrel.backend=lvz").backend,
            BackendChoice::Lvz
        );
        assert_eq!(
            BootOptions::parse("kestrel.backend=lvz kestrel.backend=tne").backend,
            BackendChoice::TrapEmulate
        );
        let o = BootOptions::parse("kestrel.backend=kvm kestrel.backend=");
        assert_eq!(o.backend, BackendChoice::Auto);
        assert_eq!(
            o.unknown.as_slice(),
            ["kestrel.backend=kvm", "kestrel.backend="]
        );
    }
}
