//! The Linux guests' benchmarks: `cargo xtask bench-linux` (Linux boot to
//! init and to power-off, bare QEMU against kestrel with the same kernel,
//! initrd and command line) and `cargo xtask bench-net` (VM-to-VM TCP
//! throughput through kestrel's virtio switch). The boots and judges are
//! the Linux cases' (vmtests_linux.rs). docs/linux-guests.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::assets;
use crate::qemu::{bare_command, BareConsole, Boot, Runner};
use crate::vmtests_linux::{
    judge_kestrel, judge_linux, judge_lvz_la64, kestrel_boot, BOOT_LIMIT, INIT_LINE, KESTREL_CASES,
    LA64_BOOT_LIMIT, LA64_LVZ_CONFIG, PASS_4,
};
use crate::{qemu, Arch, Opts};

/// The config of the benchmark's kestrel side (and of the bare side's
/// kernel, initrd and command line).
const BENCH_CONFIG: &str = "configs/linux-1vm.toml";

/// The first VM of a config: kernel, initrd (paths resolved against the
/// config's directory), command line, vCPUs.
struct VmUnderTest {
    kernel: PathBuf,
    initrd: Option<PathBuf>,
    cmdline: String,
    vcpus: u32,
    /// `virtio_console = true`: the bare side gets QEMU's virtio console.
    virtio_console: bool,
}

fn first_vm(config: &Path) -> Result<VmUnderTest, String> {
    let text = std::fs::read_to_string(config).map_err(|e| format!("{}: {e}", config.display()))?;
    let v: toml::Value = toml::from_str(&text).map_err(|e| format!("{}: {e}", config.display()))?;
    let vm = v
        .get("vm")
        .and_then(|a| a.as_array())
        .and_then(|a| a.first())
        .ok_or_else(|| format!("{}: no [[vm]]", config.display()))?;
    let dir = config.parent().unwrap_or(Path::new("."));
    let path = |k: &str| vm.get(k).and_then(|p| p.as_str()).map(|p| dir.join(p));
    Ok(VmUnderTest {
        kernel: path("kernel")
            .ok_or_else(|| format!("{}: vm[0].kernel missing", config.display()))?,
        initrd: path("initrd"),
        cmdline: vm
            .get("cmdline")
            .and_then(|c| c.as_str())
            .unwrap_or("")
            .to_string(),
        vcpus: vm
            .get("vcpus")
            .and_then(|c| c.as_integer())
            .unwrap_or(1)
            .try_into()
            .map_err(|_| format!("{}: vm[0].vcpus out of range", config.display()))?,
        virtio_console: vm
            .get("virtio_console")
            .and_then(|c| c.as_bool())
            .unwrap_or(false),
    })
}

/// Times of one boot, in seconds from QEMU's start (host clock): to the
/// init script's first line, to the test's result, to power-off (QEMU
/// exit), and when the kernel started ([`kernel_start`]).
#[derive(Clone, Copy, Default)]
struct Times {
    init: Option<f64>,
    result: Option<f64>,
    off: Option<f64>,
    kstart: Option<KernelStart>,
    /// When the kernel's printk clock started ([`clock_start`]).
    clock: Option<f64>,
}

/// When the kernel started, in seconds from QEMU's start, and how that is
/// known.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KernelStart {
    /// The arrival of its first console line (`Linux version ...`) through
    /// an early console, before its clock started.
    FirstLine(f64),
    /// Only from its clock (no early console, or `quiet`): when its printk
    /// clock read zero, at `time_init`, after the early setup.
    Clock(f64),
}

impl KernelStart {
    fn at(self) -> f64 {
        match self {
            KernelStart::FirstLine(t) | KernelStart::Clock(t) => t,
        }
    }

    /// The table's cell: `c` marks a start known only from the clock.
    fn cell(self) -> String {
        match self {
            KernelStart::FirstLine(t) => format!("{t:.2}"),
            KernelStart::Clock(t) => format!("{t:.2}c"),
        }
    }
}

impl Times {
    /// The same times counted from the kernel's start instead of QEMU's:
    /// the work both sides share, without a firmware's start (the bare
    /// LoongArch side) or kestrel's own start and VM creation.
    fn since_kernel(&self) -> Times {
        let k = |t: Option<f64>| Some(t? - self.kstart?.at());
        Times {
            init: k(self.init),
            result: k(self.result),
            off: k(self.off),
            kstart: None,
            clock: k(self.clock),
        }
    }
}

fn times_of(b: &Boot) -> Times {
    let s = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    Times {
        init: s(b.when(INIT_LINE)),
        result: s(b
            .when("LINUX-TEST: PASS")
            .or_else(|| b.when("LINUX-TEST: FAIL"))),
        off: s(b.ended),
        kstart: kernel_start(b),
        clock: clock_start(b),
    }
}

/// The kernel's printk time stamp of a console line, `[    2.305275] Run
/// /init ...`, also behind kestrel's `[linux0] ` prefix; `None` for other
/// lines (kestrel's own `[cpu0] INFO ...`, the guest's programs).
fn printk_stamp(text: &str) -> Option<f64> {
    let stamp = |t: &str| -> Option<f64> {
        let inner = t.strip_prefix('[')?;
        let (num, _) = inner.split_once(']')?;
        let num = num.trim_start();
        let (secs, frac) = num.split_once('.')?;
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
        if !(digits(secs) && digits(frac)) {
            return None;
        }
        num.parse().ok()
    };
    let t = text.trim_start();
    stamp(t).or_else(|| {
        let (_, rest) = t.strip_prefix('[')?.split_once(']')?;
        stamp(rest.trim_start())
    })
}

/// When (seconds from QEMU's start, host clock) the kernel's printk clock
/// read zero: the least of arrival minus stamp over the lines stamped
/// after it started. Such a line arrives no earlier than it was printed,
/// so each difference is an upper bound, and a line the console sent as it
/// was printed comes within the serial port's latency of it. (Lines
/// stamped 0 were printed before the clock started, earlier than it.)
/// The clock starts with the kernel's `sched_clock`, at `time_init` in
/// `start_kernel`, after `setup_arch`; under QEMU TCG without `-icount`
/// the guest's counter runs with the host's clock, bare and under kestrel
/// alike.
fn clock_start(b: &Boot) -> Option<f64> {
    b.lines
        .iter()
        .filter_map(|l| {
            let stamp = printk_stamp(&l.text).filter(|s| *s > 0.0)?;
            Some(l.at.as_secs_f64() - stamp)
        })
        .reduce(f64::min)
}

/// When the kernel started: the arrival of its `Linux version` line if
/// that came before its clock started (an early console sent it as it was
/// printed, at the console's setup in `setup_arch`), else the clock's
/// start (without an early console the line is replayed only once the
/// real console is up, seconds later).
fn kernel_start(b: &Boot) -> Option<KernelStart> {
    let clock = clock_start(b)?;
    match b.when("] Linux version ").map(|d| d.as_secs_f64()) {
        Some(first) if first <= clock => Some(KernelStart::FirstLine(first)),
        _ => Some(KernelStart::Clock(clock)),
    }
}

/// Seconds kestrel took to create its VMs (from its `guest memory: N MiB
/// free` line to the last VM's `created` line): zeroing guest RAM, loading
/// the images, building the devices.
fn creation_time(b: &Boot) -> Option<f64> {
    let start = b.when("guest memory: ")?;
    let end = b
        .lines
        .iter()
        .rev()
        .find(|l| l.text.contains("\" created: "))?
        .at;
    Some(end.checked_sub(start)?.as_secs_f64())
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn fmt_s(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

/// `cargo xtask bench-linux [--runs N] [--config FILE]`: Linux boot to init
/// on bare QEMU and under kestrel with the same machine flags, same kernel,
/// initrd and command line (those of the config's first VM).
pub fn run(args: &[String]) -> Result<(), String> {
    let mut runs = 3usize;
    let mut config = None;
    let mut arch = Arch::Aarch64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--arch" => {
                arch = Arch::parse(it.next().ok_or("--arch needs aarch64 or loongarch64")?)?;
            }
            "--runs" => {
                runs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| (1..=50).contains(n))
                    .ok_or("--runs needs a number from 1 to 50")?
            }
            "--config" => {
                config = Some(PathBuf::from(it.next().ok_or("--config needs a file")?));
            }
            other => return Err(format!("bench-linux: unknown option '{other}'")),
        }
    }
    if arch == Arch::LoongArch64 {
        let config = config.unwrap_or_else(|| crate::root().join(LA64_LVZ_CONFIG));
        return bench_la64(runs, &config);
    }
    let config = config.unwrap_or_else(|| crate::root().join(BENCH_CONFIG));
    let Some(assets) = assets::built() else {
        println!(
            "bench-linux: skipped: no Linux guest assets in {} (run `cargo xtask guest-assets`)",
            assets::out_dir().display()
        );
        return Ok(());
    };
    if Command::new("qemu-system-aarch64")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("bench-linux: skipped: qemu-system-aarch64 not found (run `make setup`)");
        return Ok(());
    }
    let vm = first_vm(&config)?;
    let opts = Opts {
        arch: Arch::Aarch64,
        smp: vm.vcpus.max(1),
        gic: 3,
        mem_mib: 1024,
        append: crate::TEST_APPEND.into(),
        config: Some(config.clone()),
        ..Opts::default()
    };
    let machine = format!("virt,virtualization=on,gic-version={}", opts.gic);
    println!(
        "== Linux boot to init: {} ({}), {} vCPUs, -M {machine} -cpu max -smp {} -m {} ==",
        assets.kernel,
        vm.kernel.display(),
        vm.vcpus,
        opts.smp,
        opts.mem_mib
    );
    println!("   command line: {}", vm.cmdline);
    println!(
        "   times in seconds to the serial line's arrival; {runs} rounds, each boots bare then kestrel"
    );
    // HOOK (issue 5, benchmark): the kestrel side packs the same kernel,
    // initrd and command line (vm[0] of `config`) into kestrel and boots it
    // on the same machine flags. A kestrel that cannot run Linux does not
    // reach the init script within the limit: then it is reported as such
    // and no number is made up.
    eprintln!("bench-linux: building kestrel with {}", config.display());
    let mut kestrel = crate::build_image_with(opts.arch, &opts.features, Some(&config))
        .and_then(|image| private_copy(&image, &vm.cmdline))
        .map_err(|e| {
            format!(
                "kestrel: cannot build the image with {}: {e}",
                config.display()
            )
        });
    print_header();
    let (mut bare, mut ks) = (Vec::new(), Vec::new());
    let mut creation = Vec::new();
    let mut exit_lines = Vec::new();
    for r in 1..=runs {
        let console = if vm.virtio_console {
            BareConsole::SerialAndHvc0
        } else {
            BareConsole::Serial
        };
        let cmd = bare_command(
            console,
            Arch::Aarch64,
            &machine,
            opts.smp,
            opts.mem_mib,
            &vm.kernel,
            vm.initrd.as_deref(),
            &vm.cmdline,
        );
        let boot = Runner::new(cmd, BOOT_LIMIT)
            .quiet()
            .log_to(log_path("aarch64", "bare", r))
            .run()?;
        let t = times_of(&boot);
        print_row(
            &r.to_string(),
            "bare",
            t,
            &judge_linux(&boot, "LINUX-TEST: PASS"),
        );
        bare.push(t);

        let Ok(image) = &kestrel else { continue };
        let limit = Duration::from_secs_f64((t.off.unwrap_or(10.0) * 5.0).max(30.0));
        let boot = Runner::new(qemu::command(&opts, image, true), limit)
            .quiet()
            .log_to(log_path("aarch64", "kestrel", r))
            .run()?;
        if boot.when(INIT_LINE).is_none() {
            let tail: Vec<String> = boot
                .lines
                .iter()
                .rev()
                .take(4)
                .rev()
                .map(|l| l.text.trim().to_string())
                .collect();
            let how = match boot.ended {
                Some(t) => format!(
                    "QEMU exited after {:.1} s without {INIT_LINE:?}",
                    t.as_secs_f64()
                ),
                None => format!("no {INIT_LINE:?} within {:.0} s", limit.as_secs_f64()),
            };
            kestrel = Err(format!(
                "kestrel: not yet able to run Linux (backend missing): {how}; last lines: {}",
                tail.join(" | ")
            ));
            continue;
        }
        let t = times_of(&boot);
        print_row(
            &r.to_string(),
            "kestrel",
            t,
            &judge_linux(&boot, "LINUX-TEST: PASS"),
        );
        ks.push(t);
        if let Some(c) = creation_time(&boot) {
            creation.push(c);
        }
        exit_lines = stat_lines(&boot, &["exits ", "fp:", "vmid:", "ipi:", "mem:"]);
    }
    print_median_row("bare", &bare);
    match kestrel {
        Ok(_) => {
            print_median_row("kestrel", &ks);
            print_ratios(&bare, &ks, "goal: to off at most 1.20x");
            print_early_setup(&bare, &ks);
            let lo = creation.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = creation.iter().cloned().fold(0.0, f64::max);
            match median(creation.clone()) {
                Some(m) => println!(
                    "kestrel VM creation (`guest memory: N MiB free` to `created`): median {m:.2} s ({lo:.2}-{hi:.2})"
                ),
                None => println!("kestrel VM creation: - (no `created` line)"),
            }
            println!("kestrel exits by reason during the last boot:");
            if exit_lines.is_empty() {
                println!("    (kestrel printed no `exits N: ...` line)");
            }
            for l in &exit_lines {
                println!("    {l}");
            }
        }
        Err(why) => {
            row("-", "kestrel", std::array::from_fn(|_| "-".into()), &why);
            println!("ratio kestrel/bare: n/a (no kestrel number)");
        }
    }
    Ok(())
}

/// The bare LoongArch side's `earlycon`: QEMU virt's 16550, the one
/// kestrel gives its VM as `earlycon` finds it in the device tree.
const LA64_EARLYCON: &str = "earlycon=ns16550a,mmio,0x1fe001e0";

/// `cargo xtask bench-linux --arch loongarch64`: Debian's loong64 kernel
/// (its zboot `vmlinuz`, started by Debian's edk2) on the bare LVZ emulator
/// against the same kernel, initramfs and command line as a VM under
/// kestrel's LVZ backend on the same emulator and flags; per-round ratios
/// and their median (issue goal: power-off at most 1.3x), and kestrel's
/// exits by kind. The ratios that compare the same work are those counted
/// from the kernel's start: from QEMU's start the bare side's times hold
/// edk2's start and the EFI stub's unpacking of the kernel, kestrel's its
/// own start and the VM's creation (kestrel's config tool unpacked the
/// kernel on the host).
fn bench_la64(runs: usize, config: &Path) -> Result<(), String> {
    let vm = first_vm(config)?;
    // The bare side: Debian's edk2 starts the same zboot `vmlinuz` (the
    // LVZ emulator's QEMU loads only ELF kernels directly), so its times
    // from QEMU's start include the firmware's start as well; those from
    // the kernel's start do not.
    let efi = vm.kernel.clone();
    let bios = vm.kernel.with_file_name("QEMU_EFI.fd");
    if !efi.exists() || !bios.exists() {
        println!(
            "bench-linux: skipped: no {} or {} (run `cargo xtask guest-assets --arch loongarch64`)",
            efi.display(),
            bios.display()
        );
        return Ok(());
    }
    let opts = Opts {
        arch: Arch::LoongArch64,
        smp: vm.vcpus.max(1),
        mem_mib: 2048,
        append: crate::TEST_APPEND.into(),
        config: Some(config.to_path_buf()),
        lvz: true,
        ..Opts::default()
    };
    println!(
        "== Linux boot to power-off, loongarch64: {} ({} vCPUs), LVZ emulator -M virt -cpu la464 -smp {} -m {} (bare: under edk2) ==",
        efi.display(),
        vm.vcpus,
        opts.smp,
        opts.mem_mib
    );
    println!("   command line: {}", vm.cmdline);
    println!(
        "   machine: QEMU TCG on {} host cores; {runs} rounds, each boots bare then kestrel",
        host_cores()
    );
    let image = crate::build_image_with(opts.arch, &opts.features, Some(config))
        .and_then(|image| private_copy(&image, &vm.cmdline))?;
    print_header();
    let (mut bare, mut ks) = (Vec::new(), Vec::new());
    let mut exit_lines = Vec::new();
    for r in 1..=runs {
        let mut cmd = qemu::lvz_command();
        cmd.args(["-M", "virt", "-cpu", "la464"])
            .args([
                "-smp",
                &opts.smp.to_string(),
                "-m",
                &opts.mem_mib.to_string(),
            ])
            .args(["-nic", "none", "-display", "none", "-monitor", "none"])
            .args(["-serial", "stdio", "-no-reboot", "-bios"])
            .arg(&bios)
            .arg("-kernel")
            .arg(&efi);
        if let Some(i) = &vm.initrd {
            cmd.arg("-initrd").arg(i);
        }
        // `earlycon` without an address takes the firmware's (ACPI SPCR)
        // console under edk2, where this kernel stops before init: the
        // bare side names the UART kestrel's device tree gives the VM
        // (the machine's 16550), so both sides print the early lines
        // through the same early console and show when the kernel starts.
        let bare_cmdline: Vec<&str> = vm
            .cmdline
            .split_whitespace()
            .map(|w| if w == "earlycon" { LA64_EARLYCON } else { w })
            .collect();
        cmd.args(["-append", &bare_cmdline.join(" ")]);
        let boot = Runner::new(cmd, LA64_BOOT_LIMIT)
            .quiet()
            .log_to(log_path("la64", "bare", r))
            .run()?;
        let t = times_of(&boot);
        print_row(&r.to_string(), "bare", t, &judge_linux(&boot, PASS_4));
        bare.push(t);
        let boot = Runner::new(qemu::command(&opts, &image, true), LA64_BOOT_LIMIT)
            .quiet()
            .log_to(log_path("la64", "kestrel", r))
            .run()?;
        let t = times_of(&boot);
        print_row(
            &r.to_string(),
            "kestrel",
            t,
            &judge_lvz_la64(&boot, &[("linux0", PASS_4)]),
        );
        ks.push(t);
        exit_lines = stat_lines(&boot, &["exits ", "fp:", "vmid:", "ipi:", "emulated ipi:"]);
    }
    print_median_row("bare", &bare);
    print_median_row("kestrel", &ks);
    print_ratios(
        &bare,
        &ks,
        "goal: to off at most 1.30x; left of |, the bare side's edk2 counts too",
    );
    print_early_setup(&bare, &ks);
    println!("kestrel exits by reason during the last boot:");
    for l in &exit_lines {
        println!("    {l}");
    }
    Ok(())
}

/// Each round's kestrel time over its own bare time (one measure `f` of
/// [`Times`]): robust against the machine's load changing between rounds.
struct RoundRatios(Vec<f64>);

impl RoundRatios {
    fn of(bare: &[Times], kestrel: &[Times], f: fn(&Times) -> Option<f64>) -> RoundRatios {
        RoundRatios(
            bare.iter()
                .zip(kestrel)
                .filter_map(|(b, k)| Some(f(k)? / f(b)?))
                .collect(),
        )
    }

    fn median(&self) -> Option<f64> {
        median(self.0.clone())
    }

    /// The lowest and the highest ratio.
    fn spread(&self) -> Option<(f64, f64)> {
        let lo = self.0.iter().cloned().reduce(f64::min)?;
        let hi = self.0.iter().cloned().reduce(f64::max)?;
        Some((lo, hi))
    }
}

/// kestrel's statistics lines of `boot` (exits by kind, FP, VMID, IPI
/// counters): those containing one of `kinds`, not the guest's own.
fn stat_lines(boot: &Boot, kinds: &[&str]) -> Vec<String> {
    boot.lines
        .iter()
        .map(|l| l.text.trim())
        .filter(|l| kinds.iter().any(|p| l.contains(p)) && !l.contains("LINUX-"))
        .map(str::to_string)
        .collect()
}

/// The host's cores (for the tables' "machine" line).
fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The measures the table shows: three from QEMU's start, three from the
/// kernel's (in [`row`]'s places, without the `kernel` column).
const MEASURES: [fn(&Times) -> Option<f64>; 6] = [
    |t| t.init,
    |t| t.result,
    |t| t.off,
    |t| t.since_kernel().init,
    |t| t.since_kernel().result,
    |t| t.since_kernel().off,
];

/// The median of each column over the rounds `ts` (each column on its
/// own: the kernel-relative ones are medians of the differences).
fn print_median_row(side: &str, ts: &[Times]) {
    let med = |f: &dyn Fn(&Times) -> Option<f64>| fmt_s(median(ts.iter().filter_map(f).collect()));
    let [a, b, c, e, f, g] = MEASURES.map(|m| med(&m));
    let k = med(&|t| t.kstart.map(KernelStart::at));
    row("median", side, [a, b, c, k, e, f, g], "");
}

/// The ratio rows, for every column: of the medians; each round's kestrel
/// time over the bare time of the same round ([`RoundRatios`]: robust
/// against the machine's load changing between rounds), their median and
/// their range.
fn print_ratios(bare: &[Times], ks: &[Times], goal: &str) {
    let cells = |cell: &dyn Fn(&RoundRatios) -> Option<String>| {
        let [a, b, c, e, f, g] =
            MEASURES.map(|m| cell(&RoundRatios::of(bare, ks, m)).unwrap_or_else(|| "-".into()));
        [a, b, c, String::new(), e, f, g]
    };
    let [a, b, c, e, f, g] = MEASURES.map(|m| {
        let med = |ts: &[Times]| median(ts.iter().filter_map(m).collect());
        match (med(ks), med(bare)) {
            (Some(k), Some(b)) if b > 0.0 => format!("{:.2}x", k / b),
            _ => "-".into(),
        }
    });
    row(
        "ratio",
        "k/bare",
        [a, b, c, String::new(), e, f, g],
        "of the medians",
    );
    row(
        "ratio",
        "k/bare",
        cells(&|r| r.median().map(|m| format!("{m:.2}x"))),
        &format!("median of the per-round ratios ({goal})"),
    );
    row(
        "spread",
        "k/bare",
        cells(&|r| r.spread().map(|(lo, hi)| format!("{lo:.2}-{hi:.2}"))),
        "lowest-highest per-round ratio",
    );
}

/// How long each side's kernel ran from its first line to its clock's
/// start (its early setup, in the times from the kernel's start when the
/// first line came through an early console).
fn print_early_setup(bare: &[Times], ks: &[Times]) {
    let setup = |ts: &[Times]| {
        let v: Vec<f64> = ts
            .iter()
            .filter(|t| matches!(t.kstart, Some(KernelStart::FirstLine(_))))
            .filter_map(|t| t.since_kernel().clock)
            .collect();
        let lo = v.iter().cloned().reduce(f64::min);
        let hi = v.iter().cloned().reduce(f64::max);
        match (median(v), lo, hi) {
            (Some(m), Some(lo), Some(hi)) => format!("median {m:.2} s ({lo:.2}-{hi:.2})"),
            _ => "- (no early console)".into(),
        }
    };
    println!(
        "kernel's first line to its clock's start (setup_arch and the rest before time_init): bare {}, kestrel {}",
        setup(bare),
        setup(ks)
    );
}

/// The table's header: to init, to result and to power-off in seconds
/// from QEMU's start (host clock); then `kernel`, when the kernel started
/// ([`kernel_start`]), and the same three counted from it.
fn print_header() {
    println!("   left of |: seconds from QEMU's start; `kernel`: when the kernel's first line (`Linux version`) arrived through its early console (`c`: no early console, when its printk clock started instead); right of |: seconds from the kernel's start");
    let h = |s: &str| s.to_string();
    row(
        "run",
        "side",
        [
            h("to init"),
            h("to result"),
            h("to off"),
            h("kernel"),
            h("to init"),
            h("to result"),
            h("to off"),
        ],
        "note",
    );
}

/// One line of the table: three times from QEMU's start, the kernel's
/// start, three times from it (or ratios in the same places).
fn row(run: &str, side: &str, c: [String; 7], note: &str) {
    let [a, b, c, d, e, f, g] = c;
    println!("{run:<8} {side:<8} {a:>9} {b:>10} {c:>9} | {d:>7} {e:>9} {f:>10} {g:>9}  {note}");
}

fn print_row(run: &str, side: &str, t: Times, problems: &[String]) {
    let note = if run == "median" {
        String::new()
    } else if problems.is_empty() {
        "PASS".to_string()
    } else {
        problems.join("; ")
    };
    let k = t.since_kernel();
    row(
        run,
        side,
        [
            fmt_s(t.init),
            fmt_s(t.result),
            fmt_s(t.off),
            t.kstart.map_or_else(|| "-".into(), KernelStart::cell),
            fmt_s(k.init),
            fmt_s(k.result),
            fmt_s(k.off),
        ],
        &note,
    );
}

/// Where round `round` of `side` tees its serial log:
/// `build/bench-linux/<arch>-<side>-<round>.log`.
fn log_path(arch: &str, side: &str, round: usize) -> PathBuf {
    crate::root()
        .join("build/bench-linux")
        .join(format!("{arch}-{side}-{round}.log"))
}

/// Copies the freshly built kestrel image to `build/bench-linux/` so that
/// another build (tests run in parallel on a shared tree) cannot replace it
/// during the runs, and checks that it is the one with our VM: its packed
/// command line must be in it.
fn private_copy(image: &Path, cmdline: &str) -> Result<PathBuf, String> {
    let dir = crate::root().join("build/bench-linux");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let copy = dir.join("kestrel.bin");
    std::fs::copy(image, &copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    let data = std::fs::read(&copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    let needle = cmdline.as_bytes();
    if !needle.is_empty() && !data.windows(needle.len()).any(|w| w == needle) {
        return Err(format!(
            "{} lacks the config's command line: another build replaced it meanwhile; run again",
            image.display()
        ));
    }
    Ok(copy)
}

/// `cargo xtask bench-net`: the virtio case's two VMs under kestrel once;
/// prints the TCP transfer rate the fetching VM measured (4 MiB from the
/// other VM through kestrel's switch), the ping line and kestrel's per-VM
/// device counters.
pub fn bench_net(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("bench-net: unknown option '{a}'"));
    }
    if assets::built().is_none() {
        println!("bench-net: skipped: no Linux guest assets (run `cargo xtask guest-assets`)");
        return Ok(());
    }
    let case = &KESTREL_CASES[3];
    println!("== VM-to-VM network: {} ({}) ==", case.name, case.config);
    let boot = kestrel_boot(case)?;
    let problems = judge_kestrel(&boot, case);
    for l in boot.lines.iter().filter(|l| {
        ["LINUX-NET: fetched", "LINUX-NET: ping", "virtio: console"]
            .iter()
            .any(|p| l.text.contains(p))
    }) {
        println!("    {}", l.text.trim());
    }
    let rate = boot.lines.iter().find_map(|l| {
        let t = &l.text[l.text.find("LINUX-NET: fetched")?..];
        let open = t.find('(')?;
        t[open + 1..].split(' ').next().map(str::to_string)
    });
    match (rate, problems.is_empty()) {
        (Some(r), true) => println!("VM-to-VM TCP throughput: {r} MiB/s (under QEMU TCG)"),
        _ => println!(
            "VM-to-VM TCP throughput: no number: {}",
            problems.join("; ")
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds pair up in order; a round where either side lacks the
    /// measure drops out instead of skewing the others.
    #[test]
    fn round_ratios_pair_rounds_and_skip_missing_ones() {
        let t = |off: Option<f64>| Times {
            off,
            ..Times::default()
        };
        let bare = [t(Some(2.0)), t(Some(4.0)), t(None), t(Some(5.0))];
        let ks = [t(Some(3.0)), t(Some(4.0)), t(Some(9.0)), t(Some(10.0))];
        let r = RoundRatios::of(&bare, &ks, |t| t.off);
        assert_eq!(r.0, [1.5, 1.0, 2.0]);
        assert_eq!(r.median(), Some(1.5));
        assert_eq!(r.spread(), Some((1.0, 2.0)));
        let none = RoundRatios::of(&bare, &ks, |t| t.init);
        assert_eq!((none.median(), none.spread()), (None, None));
    }

    /// Stamps are read bare and behind kestrel's VM prefix, not from
    /// kestrel's own lines or the guest programs' bracketed output.
    #[test]
    fn printk_stamps() {
        assert_eq!(
            printk_stamp("[    2.305275] Run /init as init process"),
            Some(2.305275)
        );
        assert_eq!(
            printk_stamp("[linux0] [    6.834678] reboot: Power down"),
            Some(6.834678)
        );
        assert_eq!(printk_stamp("\t[12345.000001] x"), Some(12345.000001));
        assert_eq!(
            printk_stamp("[    0.000000] Linux version 7.2.13"),
            Some(0.0)
        );
        for no in [
            "[cpu0] INFO  guest memory: 2000 MiB free",
            "[linux0] LINUX-INIT: started",
            "LINUX-TEST: [1.5] not the kernel's",
            "[linux0] [cpu1] [ 1.5] two prefixes",
            "[ 1.] half a stamp",
            "[.5] half a stamp",
            "[ -1.5] negative",
            "[1.5 no bracket",
            "",
        ] {
            assert_eq!(printk_stamp(no), None, "{no:?}");
        }
    }

    /// The kernel's clock started at the least arrival-minus-stamp: lines
    /// a console replays late, lines stamped before the clock started
    /// (0.000000, whenever they arrive) and unstamped lines do not move it. The
    /// kernel's start is its first line's arrival if an early console sent
    /// it before then, else the clock's start; the kernel-relative times
    /// count from it.
    #[test]
    fn kernel_start_from_the_first_line_or_the_clock() {
        let line = |at: f64, text: &str| crate::qemu::Line {
            at: Duration::from_secs_f64(at),
            text: text.to_string(),
        };
        let boot = Boot {
            lines: vec![
                line(0.4, "InitializeExceptions,IrqEnabled = 0"),
                line(8.277, "[    0.000000] Linux version 7.2.13"),
                line(
                    8.291,
                    "[    1.670872] printk: legacy console [ttyS0] enabled",
                ),
                line(8.970, "[    2.375298] Run /init as init process"),
                line(9.202, INIT_LINE),
                line(12.973, "LINUX-TEST: PASS cpus=4 fp=ok"),
                line(13.519, "[    6.924359] reboot: Power down"),
            ],
            exit: None,
            ended: Some(Duration::from_secs_f64(13.6)),
            timed_out: false,
            saved: None,
        };
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        let clock = 13.519 - 6.924359;
        assert!(near(clock_start(&boot), clock));
        // `Linux version` came after the clock started: replayed late.
        let t = times_of(&boot);
        assert_eq!(t.kstart, Some(KernelStart::Clock(clock)));
        assert_eq!(t.kstart.unwrap().cell(), "6.59c");
        let k = t.since_kernel();
        assert!(near(k.init, 9.202 - clock));
        assert!(near(k.off, 13.6 - clock));
        assert_eq!(k.kstart, None);
        assert!(near(k.clock, 0.0));
        // Through an early console it comes first, and the kernel's start
        // is its arrival.
        let mut early = boot.lines.clone();
        early[1].at = Duration::from_secs_f64(4.138);
        let early = Boot {
            lines: early,
            ..boot
        };
        assert!(near(clock_start(&early), clock));
        let t = times_of(&early);
        assert_eq!(t.kstart, Some(KernelStart::FirstLine(4.138)));
        assert_eq!(t.kstart.unwrap().cell(), "4.14");
        assert!(near(t.since_kernel().init, 9.202 - 4.138));
        assert!(near(t.since_kernel().clock, clock - 4.138));
        let unstamped = Boot {
            lines: vec![line(1.0, INIT_LINE)],
            ..early
        };
        let t = times_of(&unstamped);
        assert_eq!(t.kstart, None);
        assert_eq!(t.since_kernel().init, None);
    }
}
