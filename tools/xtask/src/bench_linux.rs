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

/// Times of one boot: to the init script's first line, to the test's
/// result, to power-off (QEMU exit).
#[derive(Clone, Copy, Default)]
struct Times {
    init: Option<f64>,
    result: Option<f64>,
    off: Option<f64>,
}

fn times_of(b: &Boot) -> Times {
    let s = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    Times {
        init: s(b.when(INIT_LINE)),
        result: s(b
            .when("LINUX-TEST: PASS")
            .or_else(|| b.when("LINUX-TEST: FAIL"))),
        off: s(b.ended),
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
        "   times in seconds from QEMU start to the serial line's arrival; {runs} rounds, each boots bare then kestrel"
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
    println!(
        "{:<10} {:<8} {:>10} {:>12} {:>14}  note",
        "run", "side", "to init", "to result", "to power-off"
    );
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
        let boot = Runner::new(cmd, BOOT_LIMIT).quiet().run()?;
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
    let medians = |ts: &[Times]| {
        let med = |f: fn(&Times) -> Option<f64>| median(ts.iter().filter_map(f).collect());
        Times {
            init: med(|t| t.init),
            result: med(|t| t.result),
            off: med(|t| t.off),
        }
    };
    let bare_med = medians(&bare);
    print_row("median", "bare", bare_med, &[]);
    match kestrel {
        Ok(_) => {
            let k_med = medians(&ks);
            print_row("median", "kestrel", k_med, &[]);
            let ratio = |k: Option<f64>, b: Option<f64>| match (k, b) {
                (Some(k), Some(b)) if b > 0.0 => format!("{:.2}x", k / b),
                _ => "-".into(),
            };
            println!(
                "{:<10} {:<8} {:>10} {:>12} {:>14}  of the medians",
                "ratio",
                "k/bare",
                ratio(k_med.init, bare_med.init),
                ratio(k_med.result, bare_med.result),
                ratio(k_med.off, bare_med.off)
            );
            let paired = |f: fn(&Times) -> Option<f64>| {
                RoundRatios::of(&bare, &ks, f)
                    .median()
                    .map(|m| format!("{m:.2}x"))
                    .unwrap_or_else(|| "-".into())
            };
            let spread = |f: fn(&Times) -> Option<f64>| {
                RoundRatios::of(&bare, &ks, f)
                    .spread()
                    .map(|(lo, hi)| format!("{lo:.2}-{hi:.2}"))
                    .unwrap_or_else(|| "-".into())
            };
            println!(
                "{:<10} {:<8} {:>10} {:>12} {:>14}  median of the per-round ratios (goal: power-off at most 1.20x)",
                "ratio",
                "k/bare",
                paired(|t| t.init),
                paired(|t| t.result),
                paired(|t| t.off)
            );
            println!(
                "{:<10} {:<8} {:>10} {:>12} {:>14}  lowest-highest per-round ratio",
                "spread",
                "k/bare",
                spread(|t| t.init),
                spread(|t| t.result),
                spread(|t| t.off)
            );
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
            println!(
                "{:<10} {:<8} {:>10} {:>12} {:>14}  {why}",
                "-", "kestrel", "-", "-", "-"
            );
            println!("ratio kestrel/bare: n/a (no kestrel number)");
        }
    }
    Ok(())
}

/// `cargo xtask bench-linux --arch loongarch64`: Debian's loong64 kernel
/// (its zboot `vmlinuz`, started by Debian's edk2) on the bare LVZ emulator
/// against the same kernel, initramfs and command line as a VM under
/// kestrel's LVZ backend on the same emulator and flags; per-round ratios
/// and their median (issue goal: power-off at most 1.3x), and kestrel's
/// exits by kind.
fn bench_la64(runs: usize, config: &Path) -> Result<(), String> {
    let vm = first_vm(config)?;
    // The bare side: Debian's edk2 starts the same zboot `vmlinuz` (the
    // LVZ emulator's QEMU loads only ELF kernels directly), so its times
    // include the firmware's start as well.
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
        "== Linux boot to power-off, loongarch64: {} ({} vCPUs), LVZ emulator -M virt -cpu la464 -smp {} -m {} (bare: under edk2, whose start counts too) ==",
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
    println!(
        "{:<10} {:<8} {:>10} {:>12} {:>14}  note",
        "run", "side", "to init", "to result", "to power-off"
    );
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
        // console under edk2, where this kernel stops before init: leave
        // it out on the bare side (kestrel's VM has a device tree).
        let bare_cmdline: Vec<&str> = vm
            .cmdline
            .split_whitespace()
            .filter(|w| *w != "earlycon")
            .collect();
        cmd.args(["-append", &bare_cmdline.join(" ")]);
        let boot = Runner::new(cmd, LA64_BOOT_LIMIT).quiet().run()?;
        let t = times_of(&boot);
        print_row(&r.to_string(), "bare", t, &judge_linux(&boot, PASS_4));
        bare.push(t);
        let boot = Runner::new(qemu::command(&opts, &image, true), LA64_BOOT_LIMIT)
            .quiet()
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
    let ratios = RoundRatios::of(&bare, &ks, |t| t.off);
    match (ratios.median(), ratios.spread()) {
        (Some(m), Some((lo, hi))) => println!(
            "ratio k/bare to power-off: median of the per-round ratios {m:.2}x (lowest-highest {lo:.2}-{hi:.2}; goal: at most 1.30x)"
        ),
        _ => println!("ratio k/bare: - (a side did not power off)"),
    }
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

fn print_row(run: &str, side: &str, t: Times, problems: &[String]) {
    let note = if run == "median" {
        String::new()
    } else if problems.is_empty() {
        "PASS".to_string()
    } else {
        problems.join("; ")
    };
    println!(
        "{:<10} {:<8} {:>10} {:>12} {:>14}  {note}",
        run,
        side,
        fmt_s(t.init),
        fmt_s(t.result),
        fmt_s(t.off)
    );
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
            init: None,
            result: None,
            off,
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
}
