//! QEMU command lines for the boards kestrel supports under emulation, and
//! the one runner every test and benchmark boots QEMU with ([`Runner`]).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Arch, Opts};

/// The QEMU invocation for `opts`, booting `image`. `headless` sends the
/// serial port to stdout with no monitor (tests); otherwise `-nographic`
/// (serial and monitor on the terminal: Ctrl-A X quits).
pub fn command(opts: &Opts, image: &Path, headless: bool) -> Command {
    let mut cmd = match opts.arch {
        Arch::Aarch64 => {
            let mut c = Command::new("qemu-system-aarch64");
            c.args([
                "-M",
                &format!("virt,virtualization=on,gic-version={}", opts.gic),
                "-cpu",
                "max",
            ]);
            c
        }
        Arch::LoongArch64 => {
            let mut c = if opts.lvz {
                lvz_command()
            } else {
                Command::new("qemu-system-loongarch64")
            };
            c.args(["-M", "virt", "-cpu", "la464"]);
            c
        }
    };
    cmd.args([
        "-smp",
        &opts.smp.to_string(),
        "-m",
        &opts.mem_mib.to_string(),
        "-nic",
        "none",
    ]);
    if headless {
        cmd.args([
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ]);
    } else {
        cmd.arg("-nographic");
    }
    cmd.arg("-kernel").arg(image);
    if let Some(module) = &opts.module {
        cmd.arg("-initrd").arg(module);
    }
    if !opts.append.is_empty() {
        cmd.args(["-append", &opts.append]);
    }
    cmd
}

/// Boots `image` on the terminal, or (with `debug`) stopped at the first
/// instruction with a gdb server on :1234.
pub fn run_interactive(opts: &Opts, image: &Path, debug: bool) -> Result<(), String> {
    let mut cmd = command(opts, image, false);
    if debug {
        cmd.args(["-s", "-S"]);
        let elf = crate::elf_path(opts.arch);
        eprintln!("QEMU is waiting for gdb on localhost:1234. In another terminal:");
        eprintln!("    {}", gdb_command(opts.arch, &elf));
        eprintln!("(docs/debugging.md: a breakpoint in kestrel, stepping into an exit handler)");
    }
    eprintln!("running: {}", render(&cmd));
    eprintln!("(Ctrl-A X quits QEMU)");
    if debug {
        let status = cmd.status().map_err(|e| cannot_start(&cmd, e))?;
        return if status.success() {
            Ok(())
        } else {
            Err(format!("QEMU exited with {status}"))
        };
    }
    // kestrel's output passes through byte for byte; its final status
    // and refused VMs are read on the way.
    cmd.stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| cannot_start(&cmd, e))?;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut watch = Watch::default();
    let mut buf = [0u8; 4096];
    let mut stdout = std::io::stdout();
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let _ = stdout.write_all(&buf[..n]);
        let _ = stdout.flush();
        if watch.feed(&buf[..n]) {
            // kestrel has nothing more to do: stop QEMU (SIGTERM lets it
            // give the terminal back as it was).
            std::thread::sleep(Duration::from_millis(200));
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            break;
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for QEMU: {e}"))?;
    watch.verdict(status)
}

fn cannot_start(cmd: &Command, e: std::io::Error) -> String {
    format!(
        "cannot start {}: {e} (run `make setup`)",
        cmd.get_program().to_string_lossy()
    )
}

/// What `make run` reads in kestrel's output as it passes: the VMs refused
/// at boot and kestrel's final status.
#[derive(Default, Debug)]
pub struct Watch {
    line: Vec<u8>,
    /// The refusals, as kestrel printed them.
    pub refused: Vec<String>,
    /// The status of kestrel's last line ("work done" or "boot done").
    pub status: Option<u32>,
}

impl Watch {
    /// Takes output bytes; true once kestrel has said its final status
    /// and idles or powers off.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut done = false;
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() < 4096 {
                    self.line.push(b);
                }
                continue;
            }
            let line = String::from_utf8_lossy(&self.line).trim_end().to_string();
            self.line.clear();
            if line.contains("VM refused: ") || line.contains("VM package refused: ") {
                self.refused.push(line.clone());
            }
            for key in [
                "kestrel: boot done (status ",
                "kestrel: work done, powering off (status ",
            ] {
                if let Some(rest) = line.split_once(key).map(|(_, r)| r) {
                    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    self.status = n.parse().ok();
                    done = true;
                }
            }
        }
        done
    }

    /// How `make run` ends.
    pub fn verdict(&self, qemu: ExitStatus) -> Result<(), String> {
        let why = if self.refused.is_empty() {
            String::new()
        } else {
            format!(":\n  {}", self.refused.join("\n  "))
        };
        match self.status {
            Some(0) if self.refused.is_empty() => {
                eprintln!("\nkestrel's work is done (status 0)");
                Ok(())
            }
            Some(n) => Err(format!("kestrel ended with status {n}{why}")),
            None if !self.refused.is_empty() => Err(format!("kestrel refused VMs at boot{why}")),
            // QEMU quit by the user (Ctrl-A X), or QEMU's own error.
            None if qemu.success() => Ok(()),
            None => Err(format!("QEMU exited with {qemu}")),
        }
    }
}

/// Where QEMU's `-kernel` puts the arm64 image on `virt`: RAM at
/// 0x4000_0000 plus QEMU's 2 MiB load offset for a 64-bit Image. kestrel is
/// linked at 0 and relocates itself there (its first log line says
/// `image at ... (load offset ...)`, the number to use on other loaders).
pub const ARM64_QEMU_LOAD: u64 = 0x4020_0000;

/// The gdb command that debugs kestrel for `arch` under `make debug`:
/// arm64 symbols moved to where the image runs, LoongArch's as linked (its
/// ELF is loaded at its link addresses).
pub fn gdb_command(arch: Arch, elf: &Path) -> String {
    match arch {
        Arch::Aarch64 => format!(
            "gdb-multiarch -ex 'set architecture aarch64' -ex 'symbol-file -o {ARM64_QEMU_LOAD:#x} {}' -ex 'target remote :1234'",
            elf.display()
        ),
        Arch::LoongArch64 => format!(
            "gdb-multiarch {} -ex 'target remote :1234'",
            elf.display()
        ),
    }
}

/// Where `tools/setup.sh` installs the LoongArch emulator with the
/// virtualization extension (LVZ) for the current patch set
/// (`tools/qemu-lvz/`); `$KESTREL_QEMU_LVZ` overrides it.
pub fn lvz_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KESTREL_QEMU_LVZ") {
        return PathBuf::from(p);
    }
    let out = Command::new("bash")
        .arg(crate::root().join("tools/setup.sh"))
        .arg("lvz-path")
        .output();
    match out {
        Ok(o) if o.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_string())
        }
        _ => PathBuf::from("qemu-system-loongarch64-lvz"),
    }
}

/// The LVZ emulator, its per-TLB-fill debug log sent nowhere (`-D`).
pub fn lvz_command() -> Command {
    let mut c = Command::new(lvz_binary());
    c.args(["-D", "/dev/null"]);
    c
}

/// A command line as a user would type it.
pub fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        if a.contains(' ') || a.is_empty() {
            s.push_str(&format!(" '{a}'"));
        } else {
            s.push(' ');
            s.push_str(&a);
        }
    }
    s
}

/// Where a bare-QEMU guest's console goes (stdio either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BareConsole {
    /// The serial port.
    Serial,
    /// The serial port and a virtio console (QEMU's `virtconsole` on a
    /// `virtio-serial-device`) sharing stdio, so a guest with
    /// `kestrel.console=hvc0` prints through both as it would under kestrel
    /// with `virtio_console = true`.
    SerialAndHvc0,
}

/// QEMU booting `kernel` directly (no kestrel), with the machine flags
/// kestrel runs under ([`command`]): `-M machine -cpu max|la464 -smp -m
/// -nic none`, the console (`console`) on stdout.
#[allow(clippy::too_many_arguments)]
pub fn bare_command(
    console: BareConsole,
    arch: Arch,
    machine: &str,
    smp: u32,
    mem_mib: u32,
    kernel: &Path,
    initrd: Option<&Path>,
    append: &str,
) -> Command {
    let (program, cpu) = match arch {
        Arch::Aarch64 => ("qemu-system-aarch64", "max"),
        Arch::LoongArch64 => ("qemu-system-loongarch64", "la464"),
    };
    let mut c = Command::new(program);
    c.args(["-M", machine, "-cpu", cpu])
        .args(["-smp", &smp.to_string(), "-m", &mem_mib.to_string()])
        .args(["-nic", "none", "-display", "none", "-monitor", "none"]);
    match console {
        BareConsole::Serial => c.args(["-serial", "stdio"]),
        BareConsole::SerialAndHvc0 => c
            .args(["-chardev", "stdio,id=con,mux=on", "-serial", "chardev:con"])
            .args(["-device", "virtio-serial-device"])
            .args(["-device", "virtconsole,chardev=con"]),
    };
    c.arg("-no-reboot").arg("-kernel").arg(kernel);
    if let Some(i) = initrd {
        c.arg("-initrd").arg(i);
    }
    c.args(["-append", append]);
    c
}

/// One serial line and when its newline arrived (since QEMU was started).
#[derive(Clone, Debug)]
pub struct Line {
    pub at: Duration,
    pub text: String,
}

/// What one QEMU run printed (stdout and stderr, by line, without `\r`)
/// and how it ended.
#[derive(Debug)]
pub struct Boot {
    pub lines: Vec<Line>,
    /// QEMU's exit status when it exited by itself (power-off).
    pub exit: Option<ExitStatus>,
    /// When QEMU exited by itself.
    pub ended: Option<Duration>,
    /// Killed at the time limit.
    pub timed_out: bool,
    /// Where the log was teed, if it could be written.
    pub saved: Option<PathBuf>,
}

impl Boot {
    /// When the first line containing `s` arrived.
    pub fn when(&self, s: &str) -> Option<Duration> {
        self.lines.iter().find(|l| l.text.contains(s)).map(|l| l.at)
    }

    /// Whether a line contains `s`.
    pub fn has(&self, s: &str) -> bool {
        self.lines.iter().any(|l| l.text.contains(s))
    }

    /// The serial log as printed (no arrival stamps).
    pub fn text(&self) -> String {
        self.lines
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The serial log with each line's arrival time.
    pub fn log(&self) -> String {
        self.lines
            .iter()
            .map(|l| format!("[{:7.3}] {}", l.at.as_secs_f64(), l.text))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs QEMU (or any command with the serial port on stdout): spawns it,
/// collects its output by line, tees it to a log file, and stops it when it
/// exits, when every stop pattern has been seen (after a grace period), or
/// at the time limit.
pub struct Runner {
    cmd: Command,
    limit: Duration,
    until: Vec<(String, usize)>,
    grace: Duration,
    log: Option<PathBuf>,
    echo: bool,
}

impl Runner {
    /// `cmd` with a time limit; no stop pattern, no log file, the command
    /// line echoed on stderr.
    pub fn new(cmd: Command, limit: Duration) -> Runner {
        Runner {
            cmd,
            limit,
            until: Vec::new(),
            grace: Duration::ZERO,
            log: None,
            echo: true,
        }
    }

    /// Stops QEMU once `pattern` has occurred `count` times (and every other
    /// stop pattern its count), [`Runner::grace`] later.
    pub fn stop_after(mut self, pattern: &str, count: usize) -> Runner {
        self.until.push((pattern.to_string(), count));
        self
    }

    /// How long QEMU may go on after the stop patterns were all seen (to
    /// power off by itself, or to show a wrongly continuing run).
    pub fn grace(mut self, grace: Duration) -> Runner {
        self.grace = grace;
        self
    }

    /// Tees the output to `path` as it arrives (the directory is created).
    pub fn log_to(mut self, path: PathBuf) -> Runner {
        self.log = Some(path);
        self
    }

    /// Does not echo the command line.
    pub fn quiet(mut self) -> Runner {
        self.echo = false;
        self
    }

    pub fn run(self) -> Result<Boot, String> {
        let Runner {
            mut cmd,
            limit,
            until,
            grace,
            log,
            echo,
        } = self;
        if echo {
            eprintln!("    $ {}", render(&cmd));
        }
        let file = log.as_ref().and_then(|p| {
            std::fs::create_dir_all(p.parent().unwrap_or(Path::new("."))).ok()?;
            File::create(p).ok()
        });
        let saved = file.is_some().then(|| log.clone()).flatten();
        let program = cmd.get_program().to_string_lossy().into_owned();
        let start = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e} (run `make setup`)"))?;
        let shared = Arc::new(Mutex::new((Vec::<Line>::new(), file)));
        let mut readers = Vec::new();
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for mut pipe in pipes.into_iter().flatten() {
            let shared = Arc::clone(&shared);
            readers.push(std::thread::spawn(move || {
                let push = |partial: &[u8], at: Duration| {
                    let text = String::from_utf8_lossy(partial).into_owned();
                    let mut s = shared.lock().unwrap();
                    if let Some(f) = s.1.as_mut() {
                        let _ = writeln!(f, "{text}");
                    }
                    s.0.push(Line { at, text });
                };
                let mut buf = [0u8; 4096];
                let mut partial = Vec::new();
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let at = start.elapsed();
                    for &b in &buf[..n] {
                        match b {
                            b'\n' => {
                                push(&partial, at);
                                partial.clear();
                            }
                            b'\r' => {}
                            _ => partial.push(b),
                        }
                    }
                }
                if !partial.is_empty() {
                    push(&partial, start.elapsed());
                }
            }));
        }
        let mut seen = vec![0usize; until.len()];
        let mut scanned = 0;
        let mut all_seen: Option<Instant> = None;
        let (exit, ended, timed_out) = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break (Some(status), Some(start.elapsed()), false);
            }
            if all_seen.is_none() && !until.is_empty() {
                let s = shared.lock().unwrap();
                for l in &s.0[scanned..] {
                    for (n, (p, _)) in seen.iter_mut().zip(&until) {
                        *n += l.text.matches(p.as_str()).count();
                    }
                }
                scanned = s.0.len();
                if seen.iter().zip(&until).all(|(n, (_, want))| n >= want) {
                    all_seen = Some(Instant::now());
                }
            }
            if all_seen.is_some_and(|t| t.elapsed() >= grace) {
                let _ = child.kill();
                let _ = child.wait();
                break (None, None, false);
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break (None, None, true);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for r in readers {
            let _ = r.join();
        }
        let lines = std::mem::take(&mut shared.lock().unwrap().0);
        Ok(Boot {
            lines,
            exit,
            ended,
            timed_out,
            saved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn the_run_watch_reads_refusals_and_the_final_status() {
        let mut w = Watch::default();
        assert!(!w.feed(b"[cpu0] ERROR VM refused: vm[1] \"big\": memory: 1 TiB is more"));
        assert!(!w.feed(b" than the 900 MiB free\r\n\x1b[6n~ # "));
        assert_eq!(w.refused.len(), 1);
        assert!(w.refused[0].ends_with("900 MiB free"));
        assert!(w.feed(b"[cpu0] INFO  kestrel: boot done (status 1); idling\r\n"));
        assert_eq!(w.status, Some(1));
        let e = w.verdict(exit(0)).unwrap_err();
        assert!(e.contains("status 1") && e.contains("1 TiB"), "{e}");
        // Quit by hand after a refusal: still an error, with the reason.
        let mut w = Watch::default();
        w.feed(b"[cpu0] ERROR VM package refused: bad magic; no VM will start\n");
        assert!(w.verdict(exit(0)).unwrap_err().contains("bad magic"));
        // A clean end, and a user's quit, are success; QEMU's failure is not.
        let mut w = Watch::default();
        assert!(w.feed(b"kestrel: work done, powering off (status 0)\n"));
        assert!(w.verdict(exit(0)).is_ok());
        assert!(Watch::default().verdict(exit(0)).is_ok());
        assert!(Watch::default().verdict(exit(1)).is_err());
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn runs_to_the_exit_and_collects_both_pipes_by_line() {
        let b = Runner::new(
            sh("printf 'one\\r\\ntwo\\n'; echo err >&2; printf tail; exit 3"),
            Duration::from_secs(20),
        )
        .quiet()
        .run()
        .unwrap();
        assert!(!b.timed_out);
        assert_eq!(b.exit.and_then(|s| s.code()), Some(3));
        assert!(b.ended.is_some());
        let mut texts: Vec<&str> = b.lines.iter().map(|l| l.text.as_str()).collect();
        texts.sort();
        assert_eq!(texts, ["err", "one", "tail", "two"]);
        assert!(b.has("tw") && !b.has("three"));
        assert!(b.when("one").is_some());
    }

    #[test]
    fn stops_after_the_patterns_and_the_grace() {
        let t = Instant::now();
        let b = Runner::new(
            sh("echo 'RESULT: a RESULT: b'; echo x; echo RESULT: c; exec sleep 30"),
            Duration::from_secs(25),
        )
        .stop_after("RESULT: ", 3)
        .stop_after("x", 1)
        .grace(Duration::from_millis(100))
        .quiet()
        .run()
        .unwrap();
        assert!(t.elapsed() < Duration::from_secs(20));
        assert!(!b.timed_out);
        assert!(b.exit.is_none());
        assert_eq!(b.lines.len(), 3);
    }

    #[test]
    fn times_out() {
        let b = Runner::new(
            sh("echo RESULT: 1; exec sleep 30"),
            Duration::from_millis(300),
        )
        .stop_after("RESULT: ", 2)
        .quiet()
        .run()
        .unwrap();
        assert!(b.timed_out);
        assert!(b.exit.is_none());
        assert_eq!(b.text(), "RESULT: 1");
    }

    #[test]
    fn tees_the_log() {
        let path = std::env::temp_dir()
            .join(format!("kestrel-runner-{}", std::process::id()))
            .join("x.log");
        let b = Runner::new(sh("echo a; echo b"), Duration::from_secs(20))
            .log_to(path.clone())
            .quiet()
            .run()
            .unwrap();
        assert_eq!(b.saved.as_deref(), Some(path.as_path()));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\n");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let e = Runner::new(Command::new("/nonexistent/qemu"), Duration::from_secs(1))
            .quiet()
            .run()
            .unwrap_err();
        assert!(e.contains("cannot start /nonexistent/qemu"), "{e}");
    }

    #[test]
    fn bare_commands() {
        let c = bare_command(
            BareConsole::Serial,
            Arch::LoongArch64,
            "virt",
            1,
            1024,
            Path::new("g"),
            None,
            "mode=x",
        );
        assert_eq!(
            render(&c),
            "qemu-system-loongarch64 -M virt -cpu la464 -smp 1 -m 1024 -nic none -display none \
             -monitor none -serial stdio -no-reboot -kernel g -append mode=x"
        );
    }
}
