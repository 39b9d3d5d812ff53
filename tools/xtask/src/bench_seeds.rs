//! `cargo xtask bench-seeds`: the seeds' own experiments rerun with
//! Debian's Linux as the guest (docs/performance.md, "The seeds'
//! experiments"). Four experiments, each a table with the seed's figure,
//! kestrel's and (where there is one) the bare-QEMU baseline, measured side
//! by side in one run:
//!
//! - **vmid** (seed 004): N Linux VMs x 2 vCPUs on 4 pCPUs, each running a
//!   hackbench-style workload (`kestrel-seedbench hackbench`) 5 times and
//!   powering off, with 4-, 8- and 16-bit VMIDs, under kestrel's allocator
//!   and under the naive policy (feature `vmid-flush-switch`: the TLB
//!   invalidated on every VM switch). Total time, per-VM time, kestrel's
//!   VMID rollovers and TLB invalidations.
//! - **fp** (seed 003): two Linux VMs x 4 vCPUs sharing 4 pCPUs, each with
//!   12 processes doing FP bursts and sleeping 100 ms / 10 ms / 1 ms / 1 us;
//!   FP/SIMD switches per second under the lazy and the eager policy.
//! - **fp32** (seed 003, as the seed ran it on Juno): two 32-bit (armhf)
//!   and two 64-bit Linux VMs x 2 vCPUs on 4 pCPUs, each running the FP
//!   sleeper (busybox awk, known answers) on both CPUs at 100 ms / 10 ms /
//!   1 ms / 1 us; FP switches (saves + restores) of the 32-bit and the
//!   64-bit VMs apart under eager, lazy and save-on-put.
//! - **ipi** (seed 002): a futex wake-all of 16 threads, each pinned to its
//!   own CPU, in a 16-vCPU and a 4-vCPU VM on 4 pCPUs and on bare QEMU with
//!   16 and 4 CPUs; the time per wake-all and kestrel's exits per wake-all.
//!   `--arch loongarch64` runs this one only, on the LVZ emulator: kestrel's
//!   LVZ backend with the PV IPI offered and hidden (`pv_ipi = false`, the
//!   IOCSR path), against the bare emulator under edk2.
//!
//! Counters come from kestrel's per-VM statistics (printed when a VM
//! ends); a boot of the same VMs with an empty workload gives the counts of
//! boot and power-off, which are subtracted where a rate is reported.
//! Nothing here is estimated: a boot that fails prints its reason in the
//! table instead of a figure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::counters::{parse_host_counters, parse_vm_counters, VmCounters};
use crate::qemu::{bare_command, BareConsole, Boot, Runner};
use crate::{assets, qemu, root, Arch, Opts};

/// One boot may take this long (40 Linux VMs under TCG take minutes).
const BOOT_LIMIT: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exp {
    Vmid,
    Fp,
    Fp32,
    Ipi,
}

#[derive(Clone, Debug)]
struct Params {
    arch: Arch,
    only: Vec<Exp>,
    runs: usize,
    vmid_runs: usize,
    vms: usize,
    widths: Vec<u32>,
    hb_runs: u64,
    hb_groups: u64,
    hb_fds: u64,
    hb_loops: u64,
    fp_seconds: u64,
    fp_sleeps: Vec<u64>,
    futex_rounds: u64,
    /// The IPI experiment's VM shapes (16 unpinned, 4 pinned vCPUs).
    ipi_vcpus: Vec<u32>,
}

impl Params {
    fn full() -> Params {
        Params {
            arch: Arch::Aarch64,
            only: vec![Exp::Vmid, Exp::Fp, Exp::Fp32, Exp::Ipi],
            runs: 3,
            vmid_runs: 1,
            vms: 40,
            widths: vec![4, 8, 16],
            hb_runs: 5,
            hb_groups: 2,
            hb_fds: 10,
            hb_loops: 50,
            fp_seconds: 10,
            fp_sleeps: vec![100_000, 10_000, 1_000, 1],
            futex_rounds: 200,
            ipi_vcpus: vec![16, 4],
        }
    }

    fn quick() -> Params {
        Params {
            runs: 1,
            vmid_runs: 1,
            vms: 8,
            widths: vec![4, 16],
            hb_runs: 1,
            fp_seconds: 3,
            futex_rounds: 30,
            ..Params::full()
        }
    }
}

const USAGE: &str = "usage: cargo xtask bench-seeds [--arch aarch64|loongarch64] [--quick] \
[--only vmid,fp,fp32,ipi] [--runs N] [--vmid-runs N] [--vms N] [--widths 4,8,16] \
[--hackbench-runs N] [--hackbench G,F,L] [--fp-seconds S] [--fp-sleeps US,US,..] \
[--futex-rounds R] [--ipi-vcpus 16,4]";

fn parse(args: &[String]) -> Result<Params, String> {
    let mut p = if args.iter().any(|a| a == "--quick") {
        Params::quick()
    } else {
        Params::full()
    };
    let mut it = args.iter();
    let num = |v: &str, what: &str| -> Result<u64, String> {
        v.parse::<u64>()
            .map_err(|_| format!("{what}: '{v}' is not a number\n{USAGE}"))
    };
    let list = |v: &str, what: &str| -> Result<Vec<u64>, String> {
        v.split(',').map(|x| num(x.trim(), what)).collect()
    };
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => {}
            "--arch" => p.arch = Arch::parse(&val()?)?,
            "--only" => {
                p.only = val()?
                    .split(',')
                    .map(|e| match e.trim() {
                        "vmid" => Ok(Exp::Vmid),
                        "fp" => Ok(Exp::Fp),
                        "fp32" => Ok(Exp::Fp32),
                        "ipi" => Ok(Exp::Ipi),
                        o => Err(format!("--only: unknown experiment '{o}'\n{USAGE}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--runs" => p.runs = num(&val()?, "--runs")?.max(1) as usize,
            "--vmid-runs" => p.vmid_runs = num(&val()?, "--vmid-runs")?.max(1) as usize,
            "--vms" => p.vms = num(&val()?, "--vms")?.clamp(1, 60) as usize,
            "--widths" => {
                p.widths = list(&val()?, "--widths")?
                    .into_iter()
                    .map(|w| match w {
                        4 | 8 | 16 => Ok(w as u32),
                        _ => Err(format!("--widths: {w}: use 4, 8 or 16")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--hackbench-runs" => p.hb_runs = num(&val()?, "--hackbench-runs")?.max(1),
            "--hackbench" => match list(&val()?, "--hackbench")?[..] {
                [g, f, l] => (p.hb_groups, p.hb_fds, p.hb_loops) = (g, f, l),
                _ => return Err(format!("--hackbench wants GROUPS,FDS,LOOPS\n{USAGE}")),
            },
            "--fp-seconds" => p.fp_seconds = num(&val()?, "--fp-seconds")?.max(1),
            "--fp-sleeps" => p.fp_sleeps = list(&val()?, "--fp-sleeps")?,
            "--futex-rounds" => p.futex_rounds = num(&val()?, "--futex-rounds")?.max(2),
            "--ipi-vcpus" => {
                p.ipi_vcpus = list(&val()?, "--ipi-vcpus")?
                    .into_iter()
                    .map(|v| match v {
                        4 | 16 => Ok(v as u32),
                        _ => Err(format!("--ipi-vcpus: {v}: use 16 or 4")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--help" | "-h" => return Err(USAGE.to_string()),
            o => return Err(format!("unknown option '{o}'\n{USAGE}")),
        }
    }
    Ok(p)
}

/// What one measurement gave: the figure or why there is none.
type Got<T> = Result<T, String>;

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// "median (min-max, n=N)" of successful runs, or the first failure.
fn summary(v: &[Got<f64>], digits: usize) -> String {
    let ok: Vec<f64> = v.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    match median(&ok) {
        Some(m) if ok.len() == 1 => format!("{m:.digits$}"),
        Some(m) => {
            let lo = ok.iter().copied().fold(f64::MAX, f64::min);
            let hi = ok.iter().copied().fold(f64::MIN, f64::max);
            let failed = v.len() - ok.len();
            format!(
                "{m:.digits$} ({lo:.digits$}-{hi:.digits$}, n={}{})",
                ok.len(),
                if failed > 0 {
                    format!(", {failed} failed")
                } else {
                    String::new()
                }
            )
        }
        None => match v.iter().find_map(|r| r.as_ref().err()) {
            Some(e) => format!("failed: {e}"),
            None => "no runs".into(),
        },
    }
}

fn med(v: &[Got<f64>]) -> Option<f64> {
    median(
        &v.iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect::<Vec<_>>(),
    )
}

/// The `key=value` fields of the `SEEDBENCH <workload>` line of `vm`
/// (`None`: a bare boot, untagged) that has `key` (each workload's result
/// line has its own keys).
fn seed_line(
    boot: &Boot,
    vm: Option<&str>,
    workload: &str,
    key: &str,
) -> Got<BTreeMap<String, f64>> {
    let head = format!("SEEDBENCH {workload} ");
    let tag = vm.map(|v| format!("[{v}] "));
    for l in &boot.lines {
        let Some(at) = l.text.find(&head) else {
            continue;
        };
        if let Some(t) = &tag {
            if !l.text[..at].ends_with(t.as_str()) {
                continue;
            }
        }
        let rest = &l.text[at + head.len()..];
        if rest.starts_with("FAIL") {
            return Err(format!("{}: {}", vm.unwrap_or("bare"), rest));
        }
        let f: BTreeMap<String, f64> = rest
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
            .collect();
        if f.contains_key(key) {
            return Ok(f);
        }
    }
    Err(format!(
        "{}: no `SEEDBENCH {workload}` result{}",
        vm.unwrap_or("bare"),
        last_lines(boot)
    ))
}

fn last_lines(boot: &Boot) -> String {
    let n = boot.lines.len();
    let tail: Vec<&str> = boot.lines[n.saturating_sub(4)..]
        .iter()
        .map(|l| l.text.as_str())
        .collect();
    if boot.timed_out {
        format!(" (timed out; last lines: {})", tail.join(" | "))
    } else {
        format!(" (last lines: {})", tail.join(" | "))
    }
}

fn git_commit() -> String {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let head = out(&["rev-parse", "--short=12", "HEAD"]);
    let dirty = !out(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    format!("{head}{}", if dirty { "+changes" } else { "" })
}

fn qemu_version(program: &str) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .and_then(|l| l.split("version ").nth(1))
                .map(|v| v.split_whitespace().next().unwrap_or(v).to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// The host's 1-, 5- and 15-minute load averages (the machine may be shared).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The report: printed as it grows and written to `build/bench-seeds/report.md`.
struct Report {
    text: String,
    path: PathBuf,
}

impl Report {
    fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.text.push_str(s.as_ref());
        self.text.push('\n');
        let _ = std::fs::write(&self.path, &self.text);
    }
}

/// One VM of a generated config.
struct VmDef {
    name: String,
    vcpus: u32,
    memory_mib: u32,
    pinned: bool,
    cmdline: String,
    /// Further `key = value` lines of the VM's table (LoongArch: its
    /// console, `pv_ipi`).
    extra: String,
}

/// The guest kernel and initramfs a generated config names.
struct GuestFiles<'a> {
    kernel: &'a Path,
    initrd: &'a Path,
}

impl<'a> From<&'a assets::LinuxAssets> for GuestFiles<'a> {
    fn from(a: &'a assets::LinuxAssets) -> Self {
        GuestFiles {
            kernel: &a.image,
            initrd: &a.initramfs,
        }
    }
}

fn write_config(
    name: &str,
    fp_policy: &str,
    vms: &[VmDef],
    files: GuestFiles,
) -> Result<PathBuf, String> {
    let dir = root().join("build/bench-seeds");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut t = format!(
        "# Generated by `cargo xtask bench-seeds` (docs/performance.md).\n\
         [hypervisor]\nmax_cpus = 4\nfp_policy = \"{fp_policy}\"\n"
    );
    for v in vms {
        let _ = write!(
            t,
            "\n[[vm]]\nname = \"{}\"\nvcpus = {}\nmemory = \"{}M\"\ncpus = [0, 1, 2, 3]\n\
             pinned = {}\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\n{}",
            v.name,
            v.vcpus,
            v.memory_mib,
            v.pinned,
            files.kernel.display(),
            files.initrd.display(),
            v.cmdline,
            v.extra
        );
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, t).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The guest command line running `bench` (`kestrel.bench=` syntax).
fn cmdline(name: &str, bench: &str) -> String {
    format!("console=ttyAMA0 quiet rdinit=/init kestrel.test=0 kestrel.name={name} kestrel.bench={bench}")
}

/// Boots kestrel built with `features` and `config` on QEMU -smp 4.
fn kestrel_boot(config: &Path, features: &[&str], mem_mib: u32) -> Got<Boot> {
    kestrel_boot_on(Arch::Aarch64, config, features, mem_mib)
}

/// [`kestrel_boot`] for `arch` (LoongArch: on the LVZ emulator).
fn kestrel_boot_on(arch: Arch, config: &Path, features: &[&str], mem_mib: u32) -> Got<Boot> {
    let features: Vec<String> = features.iter().map(|s| s.to_string()).collect();
    let stem = config
        .file_stem()
        .map_or("x".into(), |s| s.to_string_lossy().into_owned());
    let private = root().join(format!("build/bench-seeds/kestrel-{stem}.bin"));
    {
        // Two bench-seeds at once (one experiment each) must not pack each
        // other's config into the shared build/<arch>/ image: the build
        // and the copy of the image happen under a lock.
        let lock_path = root().join("build/bench-seeds/.build.lock");
        let lock = std::fs::File::create(&lock_path)
            .map_err(|e| format!("{}: {e}", lock_path.display()))?;
        lock.lock()
            .map_err(|e| format!("{}: {e}", lock_path.display()))?;
        let image = crate::build_image_with(arch, &features, Some(config))?;
        std::fs::copy(&image, &private).map_err(|e| format!("{}: {e}", private.display()))?;
    }
    let opts = Opts {
        arch,
        smp: 4,
        gic: 3,
        mem_mib,
        features,
        append: crate::TEST_APPEND.into(),
        config: Some(config.to_path_buf()),
        lvz: arch == Arch::LoongArch64,
        module: None,
        as_module: false,
    };
    let log = root().join(format!("build/bench-seeds/{stem}.log"));
    let boot = Runner::new(qemu::command(&opts, &private, true), BOOT_LIMIT)
        .quiet()
        .log_to(log.clone())
        .run()?;
    if boot.timed_out || !boot.has("kestrel: all VMs have ended") {
        return Err(format!(
            "kestrel did not end its VMs (log {}){}",
            log.display(),
            last_lines(&boot)
        ));
    }
    Ok(boot)
}

/// Boots the Linux guest on bare QEMU with `cpus` CPUs.
fn bare_boot(a: &assets::LinuxAssets, cpus: u32, mem_mib: u32, cmd: &str, tag: &str) -> Got<Boot> {
    let c = bare_command(
        BareConsole::Serial,
        Arch::Aarch64,
        "virt,virtualization=on,gic-version=3",
        cpus,
        mem_mib,
        &a.image,
        Some(&a.initramfs),
        cmd,
    );
    let log = root().join(format!("build/bench-seeds/bare-{tag}.log"));
    let boot = Runner::new(c, BOOT_LIMIT).quiet().log_to(log).run()?;
    if boot.timed_out {
        return Err(format!("bare QEMU timed out{}", last_lines(&boot)));
    }
    Ok(boot)
}

fn counters_of(boot: &Boot) -> BTreeMap<String, VmCounters> {
    parse_vm_counters(&boot.text())
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect()
}

fn get(c: &VmCounters, key: &str) -> u64 {
    c.values.get(key).copied().unwrap_or(0)
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

// ---------------------------------------------------------------- VMID ----

struct VmidRun {
    total_s: f64,
    vm_median_s: f64,
    exits: u64,
    rollovers: u64,
    flushes: u64,
    slow: u64,
    bits: Option<u32>,
}

fn vmid_boot(p: &Params, a: &assets::LinuxAssets, width: u32, naive: bool) -> Got<VmidRun> {
    let bench = format!(
        "hackbench,runs={},groups={},fds={},loops={}",
        p.hb_runs, p.hb_groups, p.hb_fds, p.hb_loops
    );
    let vms: Vec<VmDef> = (0..p.vms)
        .map(|i| {
            let name = format!("vm{i:02}");
            VmDef {
                cmdline: cmdline(&name, &bench),
                extra: String::new(),
                name,
                vcpus: 2,
                memory_mib: 64,
                pinned: false,
            }
        })
        .collect();
    let tag = format!("vmid{width}{}", if naive { "-naive" } else { "" });
    let config = write_config(&tag, "lazy", &vms, a.into())?;
    let mut features = Vec::new();
    match width {
        4 => features.push("vmid4"),
        8 => features.push("vmid8"),
        _ => {}
    }
    if naive {
        features.push("vmid-flush-switch");
    }
    let mem = (64 * p.vms as u32 + 512).max(1024);
    let boot = kestrel_boot(&config, &features, mem)?;
    let counters = counters_of(&boot);
    // Rollovers and their flushes are the host's (no VM's counters).
    let host = parse_host_counters(&boot.text());
    let rollovers = host.get("vmid_rollovers").copied().unwrap_or(0);
    let flushes = host.get("tlb_flushes").copied().unwrap_or(0);
    let mut per_vm = Vec::new();
    let (mut exits, mut slow) = (0, 0);
    for v in &vms {
        let f = seed_line(&boot, Some(&v.name), "hackbench", "total")?;
        per_vm.push(f["total"]);
        let c = counters
            .get(&v.name)
            .ok_or_else(|| format!("{}: kestrel printed no counters", v.name))?;
        exits += c.exits;
        slow += get(c, "vmid_slow");
    }
    let total_s = boot
        .when("kestrel: all VMs have ended")
        .ok_or("no end line")?
        .as_secs_f64();
    let bits = boot.lines.iter().find_map(|l| {
        let t = &l.text[l.text.find("list registers, ")? + 16..];
        t.split("-bit VMIDs").next()?.parse().ok()
    });
    Ok(VmidRun {
        total_s,
        vm_median_s: median(&per_vm).unwrap_or(f64::NAN),
        exits,
        rollovers,
        flushes,
        slow,
        bits,
    })
}

fn vmid(p: &Params, a: &assets::LinuxAssets, r: &mut Report) -> Result<(), String> {
    let bench = format!(
        "hackbench,runs={},groups={},fds={},loops={}",
        p.hb_runs, p.hb_groups, p.hb_fds, p.hb_loops
    );
    let procs = p.hb_groups * p.hb_fds * 2;
    r.line(format!(
        "\n### VMID (seed 004): {} Linux VMs x 2 vCPUs (64 MiB each) on 4 pCPUs, hackbench x {} per VM\n",
        p.vms, p.hb_runs
    ));
    r.line(format!(
        "Workload: `kestrel-seedbench {}` ({procs} processes over pipes, {} 100-byte messages per run). \
         `total`: QEMU start to kestrel's `all VMs have ended` (boots included); `per VM`: the median \
         over VMs of the VM's own hackbench time (its {} runs); counters summed over the VMs. \
         Runs: {}.\n",
        bench.replace(',', " "),
        p.hb_groups * p.hb_fds * p.hb_fds * p.hb_loops,
        p.hb_runs,
        p.vmid_runs
    ));
    // Bare-QEMU baseline: one VM's workload alone on -smp 2.
    let mut bare = Vec::new();
    for run in 0..p.vmid_runs {
        bare.push(
            bare_boot(a, 2, 64, &cmdline("bare", &bench), &format!("vmid-{run}"))
                .and_then(|b| seed_line(&b, None, "hackbench", "total"))
                .map(|f| f["total"]),
        );
    }
    r.line("| VMIDs | policy | total s | per VM s | exits | vmid_rollovers | tlb_flushes | vmid_slow |");
    r.line("|---|---|---|---|---|---|---|---|");
    r.line(
        "| seed | ASID-style vs old allocator (8 CPUs, 4-bit, 40 VMs x 2 vCPUs, hackbench x 5) | 0.5% faster | | 1.9% fewer | | | |",
    );
    r.line(format!(
        "| bare QEMU | one VM's workload alone, -smp 2 | | {} | | | | |",
        summary(&bare, 3)
    ));
    let mut totals: BTreeMap<(u32, bool), Option<f64>> = BTreeMap::new();
    let mut exits: BTreeMap<(u32, bool), Option<f64>> = BTreeMap::new();
    for &w in &p.widths {
        for naive in [false, true] {
            let mut v = Vec::new();
            for _ in 0..p.vmid_runs {
                eprintln!(
                    "bench-seeds: vmid {w}-bit {}",
                    if naive { "naive" } else { "allocator" }
                );
                v.push(vmid_boot(p, a, w, naive));
            }
            let series = |f: &dyn Fn(&VmidRun) -> f64| -> Vec<Got<f64>> {
                v.iter()
                    .map(|x| x.as_ref().map(f).map_err(Clone::clone))
                    .collect()
            };
            totals.insert((w, naive), med(&series(&|x| x.total_s)));
            exits.insert((w, naive), med(&series(&|x| x.exits as f64)));
            let seen_bits = v.iter().find_map(|x| x.as_ref().ok().and_then(|x| x.bits));
            let label = match seen_bits {
                Some(b) if b != w => format!("{w} (kestrel used {b}!)"),
                _ => format!("{w}-bit"),
            };
            r.line(format!(
                "| {label} | {} | {} | {} | {} | {} | {} | {} |",
                if naive {
                    "naive: flush on every VM switch"
                } else {
                    "kestrel allocator"
                },
                summary(&series(&|x| x.total_s), 1),
                summary(&series(&|x| x.vm_median_s), 2),
                summary(&series(&|x| x.exits as f64), 0),
                summary(&series(&|x| x.rollovers as f64), 0),
                summary(&series(&|x| x.flushes as f64), 0),
                summary(&series(&|x| x.slow as f64), 0),
            ));
        }
    }
    r.line("");
    for &w in &p.widths {
        if let (Some(Some(al)), Some(Some(nv))) = (totals.get(&(w, false)), totals.get(&(w, true)))
        {
            let (ea, en) = (exits[&(w, false)], exits[&(w, true)]);
            r.line(format!(
                "- {w}-bit: naive policy / allocator: total time {:.3}x, exits {}",
                nv / al,
                match (ea, en) {
                    (Some(ea), Some(en)) if ea > 0.0 => format!("{:.3}x", en / ea),
                    _ => "-".into(),
                }
            ));
        }
    }
    if let (Some(Some(t4)), Some(Some(t16))) = (totals.get(&(4, false)), totals.get(&(16, false))) {
        r.line(format!(
            "- 4-bit against 16-bit VMIDs (allocator, total time; rollovers cost < 5% is the goal): {:+.1}%",
            (t4 / t16 - 1.0) * 100.0
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ FP ----

struct FpRun {
    /// Per VM: (fp_restores, fp_saves, fp_traps, seconds, bursts).
    vms: Vec<(u64, u64, u64, f64, f64)>,
    /// vCPU loads (VMID lookups) of both VMs over the whole boot.
    loads: u64,
}

impl FpRun {
    /// FP restores per 1000 vCPU loads over the whole boot (both VMs):
    /// eager restores on every load (about 1000), lazy only on a trap.
    fn per_kload(&self) -> f64 {
        self.vms.iter().map(|v| v.0).sum::<u64>() as f64 * 1000.0 / self.loads.max(1) as f64
    }
}

const FP_VMS: [&str; 2] = ["fp0", "fp1"];

fn fp_boot(
    p: &Params,
    a: &assets::LinuxAssets,
    policy: &str,
    sleep_us: u64,
    seconds: u64,
    run: usize,
) -> Got<FpRun> {
    let bench = format!("fp,procs=12,sleep_us={sleep_us},seconds={seconds}");
    let vms: Vec<VmDef> = FP_VMS
        .iter()
        .map(|n| VmDef {
            name: n.to_string(),
            vcpus: 4,
            memory_mib: 128,
            pinned: false,
            cmdline: cmdline(n, &bench),
            extra: String::new(),
        })
        .collect();
    let _ = p;
    let tag = format!("fp-{policy}-{sleep_us}us-{seconds}s-r{run}");
    let config = write_config(&tag, policy, &vms, a.into())?;
    let boot = kestrel_boot(&config, &[], 1024)?;
    let counters = counters_of(&boot);
    let mut out = Vec::new();
    let mut loads = 0;
    for v in &vms {
        let f = seed_line(&boot, Some(&v.name), "fp", "bursts")?;
        let c = counters
            .get(&v.name)
            .ok_or_else(|| format!("{}: kestrel printed no counters", v.name))?;
        loads += get(c, "vmid_fast") + get(c, "vmid_slow");
        out.push((
            get(c, "fp_restores"),
            get(c, "fp_saves"),
            get(c, "fp_traps"),
            f["seconds"],
            f["bursts"],
        ));
    }
    Ok(FpRun { vms: out, loads })
}

/// FP switches (restores) per second of workload: this run's counts minus
/// the empty-workload boot's, over each VM's measured seconds, summed
/// (negative when the boots differed by more than the workload added).
fn fp_rate(run: &FpRun, base: &FpRun) -> f64 {
    run.vms
        .iter()
        .zip(&base.vms)
        .map(|(r, b)| (r.0 as f64 - b.0 as f64) / r.3.max(1e-9))
        .sum()
}

fn fp(p: &Params, a: &assets::LinuxAssets, r: &mut Report) -> Result<(), String> {
    r.line(format!(
        "\n### Lazy FP (seed 003): 2 Linux VMs x 4 vCPUs sharing 4 pCPUs, 12 FP processes each, {} s\n",
        p.fp_seconds
    ));
    r.line(format!(
        "Workload: `kestrel-seedbench fp procs=12 sleep_us=S seconds={}` (an FP burst of 2000 \
         terms of two series, checked, then sleep S). FP switches = kestrel's `fp_restores` of both \
         VMs (a register file brought in), minus those of a boot with an empty workload \
         (`seconds=0`: boot and power-off), per second of workload: that difference is small \
         beside boot-to-boot variation unless the workload runs long (`--fp-seconds`). Per 1000 \
         vCPU loads: `fp_restores` over kestrel's vCPU loads (`vmid_fast + vmid_slow`) of the \
         whole boot, boot included (eager restores on every load). Bare QEMU (-smp 4, one VM's \
         workload) has no switches to count: its column is the bursts per second, beside kestrel's \
         (per VM). Runs: {}.\n",
        p.fp_seconds, p.runs
    ));
    let mut base: BTreeMap<&str, Got<FpRun>> = BTreeMap::new();
    for policy in ["lazy", "eager"] {
        eprintln!("bench-seeds: fp {policy} baseline (empty workload)");
        base.insert(policy, fp_boot(p, a, policy, 1_000, 0, 0));
    }
    r.line("| sleep | seed: fewer switches | eager: switches/s | lazy: switches/s | reduction | per 1000 loads: eager, lazy | reduction per load | lazy fp_traps/s | bursts/s per VM: bare, eager, lazy |");
    r.line("|---|---|---|---|---|---|---|---|---|");
    for &s in &p.fp_sleeps {
        let mut rate: BTreeMap<&str, Vec<Got<f64>>> = BTreeMap::new();
        let mut traps: Vec<Got<f64>> = Vec::new();
        let mut kload: BTreeMap<&str, Vec<Got<f64>>> = BTreeMap::new();
        let mut bursts: BTreeMap<&str, Vec<Got<f64>>> = BTreeMap::new();
        for run in 0..p.runs {
            bursts.entry("bare").or_default().push(
                bare_boot(
                    a,
                    4,
                    128,
                    &cmdline(
                        "bare",
                        &format!("fp,procs=12,sleep_us={s},seconds={}", p.fp_seconds),
                    ),
                    &format!("fp-{s}-{run}"),
                )
                .and_then(|b| seed_line(&b, None, "fp", "bursts"))
                .map(|f| f["bursts"] / f["seconds"].max(1e-9)),
            );
            for policy in ["eager", "lazy"] {
                eprintln!("bench-seeds: fp {policy} sleep {s} us run {}", run + 1);
                let got = fp_boot(p, a, policy, s, p.fp_seconds, run);
                let b = base[policy].as_ref().map_err(|e| format!("baseline: {e}"));
                let r2 = match (&got, &b) {
                    (Ok(g), Ok(b)) => Ok(fp_rate(g, b)),
                    (Err(e), _) | (_, Err(e)) => Err(e.clone()),
                };
                if policy == "lazy" {
                    traps.push(match (&got, &b) {
                        (Ok(g), Ok(b)) => Ok(g
                            .vms
                            .iter()
                            .zip(&b.vms)
                            .map(|(x, y)| (x.2 as f64 - y.2 as f64) / x.3.max(1e-9))
                            .sum()),
                        (Err(e), _) | (_, Err(e)) => Err(e.clone()),
                    });
                }
                bursts.entry(policy).or_default().push(
                    got.as_ref()
                        .map(|g| {
                            g.vms.iter().map(|v| v.4 / v.3.max(1e-9)).sum::<f64>()
                                / g.vms.len() as f64
                        })
                        .map_err(Clone::clone),
                );
                rate.entry(policy).or_default().push(r2);
                kload
                    .entry(policy)
                    .or_default()
                    .push(got.as_ref().map(FpRun::per_kload).map_err(Clone::clone));
            }
        }
        let (e, l) = (med(&rate["eager"]), med(&rate["lazy"]));
        let reduction = match (e, l) {
            (Some(e), Some(l)) if e > 0.0 => format!("{:.1}%", (1.0 - l / e) * 100.0),
            _ => "-".into(),
        };
        let per_load = match (med(&kload["eager"]), med(&kload["lazy"])) {
            (Some(e), Some(l)) if e > 0.0 => format!("{:.1}%", (1.0 - l / e) * 100.0),
            _ => "-".into(),
        };
        let label = sleep_label(s);
        r.line(format!(
            "| {label} | {} | {} | {} | {reduction} | {}, {} | {per_load} | {} | {} / {} / {} |",
            seed_fp(s),
            summary(&rate["eager"], 0),
            summary(&rate["lazy"], 0),
            summary(&kload["eager"], 0),
            summary(&kload["lazy"], 0),
            summary(&traps, 0),
            fmt_opt(med(&bursts["bare"]), 0),
            fmt_opt(med(&bursts["eager"]), 0),
            fmt_opt(med(&bursts["lazy"]), 0),
        ));
    }
    Ok(())
}

// ------------------------------------------------------- FP, 32-bit ----

/// The 2 + 2 mix of `configs/linux-juno-mix.toml`: the 32-bit VMs (each
/// pinned one vCPU per pCPU, not owning them) and the 64-bit ones.
const MIX32: [(&str, [u32; 2]); 2] = [("a32a", [0, 1]), ("a32b", [2, 3])];
const MIX64: [&str; 2] = ["a64a", "a64b"];

/// What one round of the sleeper costs besides its sleep under TCG (the
/// awk FP work and the spawn of `usleep` through `system()`: 140-390 ms
/// measured with 8 vCPUs on 4 pCPUs on 2 host cores), to choose the rounds
/// for a run of about `--fp-seconds`; the run reports the period it
/// really had.
const FP32_ROUND_US: u64 = 250_000;

/// The sleeper's rounds for a sleep of `us` to last about `seconds`.
fn fp32_rounds(seconds: u64, us: u64) -> u64 {
    if seconds == 0 {
        return 0;
    }
    (seconds * 1_000_000 / (us + FP32_ROUND_US)).clamp(3, 1000)
}

/// The guest command line running the FP sleeper (`kestrel.fpsleep=`)
/// and nothing else (`kestrel.test=0`).
fn fp32_cmdline(vm: &str, rounds: u64, us: u64) -> String {
    format!(
        "console=ttyAMA0 quiet rdinit=/init kestrel.test=0 kestrel.name={vm} \
         kestrel.fpsleep={rounds}:{us}"
    )
}

/// The mix's config with `policy`, every VM running the sleeper for
/// `rounds` rounds with a sleep of `us`: as `configs/linux-juno-mix.toml`
/// without the disks and the network.
fn fp32_config(policy: &str, rounds: u64, us: u64, armhf: GuestFiles, arm64: GuestFiles) -> String {
    let mut t = format!(
        "# Generated by `cargo xtask bench-seeds --only fp32` (docs/performance.md):\n\
         # the Juno mix of configs/linux-juno-mix.toml, FP sleeper only.\n\
         [hypervisor]\nmax_cpus = 4\nfp_policy = \"{policy}\"\n"
    );
    for (vm, cpus) in MIX32 {
        let _ = write!(
            t,
            "\n[[vm]]\nname = \"{vm}\"\nvcpus = 2\nmemory = \"192M\"\ncpus = [{}, {}]\n\
             pinned = true\nexclusive = false\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\n",
            cpus[0],
            cpus[1],
            armhf.kernel.display(),
            armhf.initrd.display(),
            fp32_cmdline(vm, rounds, us)
        );
    }
    for vm in MIX64 {
        let _ = write!(
            t,
            "\n[[vm]]\nname = \"{vm}\"\nvcpus = 2\nmemory = \"192M\"\n\
             kernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\n",
            arm64.kernel.display(),
            arm64.initrd.display(),
            fp32_cmdline(vm, rounds, us)
        );
    }
    t
}

/// The seconds the sleeper of `vm` took (the longest of its CPUs), from
/// its `LINUX-FPSLEEP: PASS cpus=2 rounds=R wrong=0 seconds=S` line; Err
/// when it failed (a wrong answer, not both CPUs, other rounds) or did not
/// say.
fn fp32_result<'a>(
    lines: impl Iterator<Item = &'a str>,
    vm: &str,
    rounds: u64,
) -> Result<f64, String> {
    let tag = format!("[{vm}] LINUX-FPSLEEP: ");
    let pass = format!("PASS cpus=2 rounds={rounds} wrong=0 seconds=");
    let mut failed = None;
    for l in lines {
        let Some(at) = l.find(&tag) else { continue };
        let rest = &l[at + tag.len()..];
        if let Some(s) = rest.strip_prefix(&pass) {
            return s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{vm}: bad seconds in {rest:?}"));
        }
        if ["WRONG", "FAIL", "no known answer"]
            .iter()
            .any(|w| rest.contains(w))
            && failed.is_none()
        {
            failed = Some(format!("{vm}: the FP sleeper failed: {rest}"));
        }
    }
    Err(failed.unwrap_or_else(|| format!("{vm}: no `LINUX-FPSLEEP: {pass}..` line")))
}

/// One VM's FP counters and the seconds of its sleeper.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Fp32Vm {
    saves: u64,
    restores: u64,
    traps: u64,
    seconds: f64,
}

/// FP register switches (saves + restores) of the VMs named `vms` in
/// `run`, minus those of the empty-workload boot `base` (negative when
/// the boots differed by more than the workload added).
fn fp32_switches(
    run: &BTreeMap<String, Fp32Vm>,
    base: &BTreeMap<String, Fp32Vm>,
    vms: &[&str],
) -> f64 {
    vms.iter()
        .map(|v| {
            let (r, b) = (
                run.get(*v).copied().unwrap_or_default(),
                base.get(*v).copied().unwrap_or_default(),
            );
            (r.saves + r.restores) as f64 - (b.saves + b.restores) as f64
        })
        .sum()
}

/// "N%" fewer switches under lazy than under eager, or "-".
fn reduction(eager: Option<f64>, lazy: Option<f64>) -> String {
    match (eager, lazy) {
        (Some(e), Some(l)) if e > 0.0 => format!("{:.1}%", (1.0 - l / e) * 100.0),
        _ => "-".into(),
    }
}

/// Boots the mix with `policy`, every VM running `rounds` rounds of the
/// sleeper with a sleep of `us`; per VM its counters and seconds. Every
/// VM's sleeper must have had every answer right on both its CPUs.
fn fp32_boot(
    a: &assets::LinuxAssets,
    policy: &str,
    rounds: u64,
    us: u64,
    run: usize,
) -> Got<BTreeMap<String, Fp32Vm>> {
    let armhf = assets::armhf::out_dir();
    let (zimage, initrd32) = (armhf.join("zImage"), armhf.join("initramfs.cpio.gz"));
    for f in [&zimage, &initrd32] {
        if !f.is_file() {
            return Err(format!(
                "{} missing (`cargo xtask guest-assets` builds it)",
                f.display()
            ));
        }
    }
    let text = fp32_config(
        policy,
        rounds,
        us,
        GuestFiles {
            kernel: &zimage,
            initrd: &initrd32,
        },
        a.into(),
    );
    let dir = root().join("build/bench-seeds");
    let config = dir.join(format!("fp32-{policy}-{us}us-{rounds}r-r{run}.toml"));
    std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
    let boot = kestrel_boot(&config, &[], 1024)?;
    let counters = counters_of(&boot);
    let mut out = BTreeMap::new();
    for vm in MIX32.iter().map(|m| m.0).chain(MIX64) {
        let seconds = fp32_result(boot.lines.iter().map(|l| l.text.as_str()), vm, rounds)?;
        let c = counters
            .get(vm)
            .ok_or_else(|| format!("{vm}: kestrel printed no counters"))?;
        out.insert(
            vm.to_string(),
            Fp32Vm {
                saves: get(c, "fp_saves"),
                restores: get(c, "fp_restores"),
                traps: get(c, "fp_traps"),
                seconds,
            },
        );
    }
    Ok(out)
}

/// The seed's "fewer FP switches" at each of its sleeps.
fn seed_fp(sleep_us: u64) -> &'static str {
    match sleep_us {
        100_000 => "99%+",
        10_000 => "98%+",
        1_000 => "~98%",
        1 => "2%",
        _ => "-",
    }
}

fn sleep_label(s: u64) -> String {
    if s >= 1000 {
        format!("{} ms", s / 1000)
    } else {
        format!("{s} us")
    }
}

fn fp32(p: &Params, a: &assets::LinuxAssets, r: &mut Report) -> Result<(), String> {
    r.line(format!(
        "\n### Lazy FP with 32-bit guests (seed 003's Juno mix): 2 armhf + 2 arm64 Linux VMs x 2 vCPUs sharing 4 pCPUs, about {} s of sleeper\n",
        p.fp_seconds
    ));
    r.line(format!(
        "Workload: the FP sleeper (`kestrel.fpsleep=R:S`, `/bin/kestrel-fp-sleep`) on both CPUs of \
         every VM: busybox awk (VFP in the armhf build, FP/SIMD in the arm64 one) sums two series \
         of 3000+ terms per round, checks the digits against the known answer, then \
         `system(\"usleep S\")`; R rounds, chosen for about {} s at an assumed {} ms of work and \
         spawn per round. The 32-bit VMs are pinned one vCPU per pCPU (`exclusive = false`), the \
         64-bit ones float, as in `configs/linux-juno-mix.toml` (no disks, no network). FP switches \
         = kestrel's `fp_saves + fp_restores` (registers put away and brought in) of the VMs, minus \
         those of a boot of the same mix with 0 rounds (boot and power-off), same policy; reduction \
         = 1 - lazy / eager (last column: save-on-put, the third policy, against eager). Period = \
         the sleeper's own seconds (from `/proc/uptime`, the slower CPU) over R: what a round \
         really took, sleep included. Every run checks every VM's answers (a wrong one fails it). \
         Runs: {}.\n",
        p.fp_seconds,
        FP32_ROUND_US / 1000,
        p.runs
    ));
    // The third policy (docs/config.md, `fp_policy`) beside the two the
    // seed compared.
    let policies = ["eager", "lazy", "save-on-put"];
    let mut base: BTreeMap<&str, Got<BTreeMap<String, Fp32Vm>>> = BTreeMap::new();
    for policy in policies {
        eprintln!("bench-seeds: fp32 {policy} baseline (0 rounds)");
        base.insert(policy, fp32_boot(a, policy, 0, 1_000, 0));
    }
    let v32: Vec<&str> = MIX32.iter().map(|m| m.0).collect();
    let v64: Vec<&str> = MIX64.to_vec();
    let all: Vec<&str> = v32.iter().chain(&v64).copied().collect();
    r.line("| sleep | rounds | period per round: 32-bit, 64-bit VMs | seed: fewer switches | 32-bit VMs: eager, lazy switches | 32-bit reduction | 64-bit VMs: eager, lazy switches | 64-bit reduction | all 4 VMs: reduction | lazy fp_traps (all) | save-on-put: 32-bit, 64-bit switches; reduction (all) |");
    r.line("|---|---|---|---|---|---|---|---|---|---|---|");
    for &s in &p.fp_sleeps {
        let rounds = fp32_rounds(p.fp_seconds, s);
        // (policy, group) -> switches per run; period per group (all
        // policies); lazy's traps.
        let mut sw: BTreeMap<(&str, &str), Vec<Got<f64>>> = BTreeMap::new();
        let mut period: BTreeMap<&str, Vec<Got<f64>>> = BTreeMap::new();
        let mut traps: Vec<Got<f64>> = Vec::new();
        for run in 0..p.runs {
            for policy in policies {
                eprintln!(
                    "bench-seeds: fp32 {policy} sleep {s} us, {rounds} rounds, run {}",
                    run + 1
                );
                let got = fp32_boot(a, policy, rounds, s, run);
                let pair = match (&got, &base[policy]) {
                    (Ok(g), Ok(b)) => Ok((g, b)),
                    (Err(e), _) => Err(e.clone()),
                    (_, Err(e)) => Err(format!("baseline: {e}")),
                };
                for (group, vms) in [("32", &v32), ("64", &v64), ("all", &all)] {
                    sw.entry((policy, group)).or_default().push(
                        pair.as_ref()
                            .map(|(g, b)| fp32_switches(g, b, vms))
                            .map_err(Clone::clone),
                    );
                    if group != "all" {
                        period.entry(group).or_default().push(
                            got.as_ref()
                                .map(|g| {
                                    vms.iter().map(|v| g[*v].seconds).sum::<f64>()
                                        / vms.len() as f64
                                        / rounds.max(1) as f64
                                })
                                .map_err(Clone::clone),
                        );
                    }
                }
                if policy == "lazy" {
                    traps.push(
                        pair.as_ref()
                            .map(|(g, b)| {
                                all.iter()
                                    .map(|v| g[*v].traps as f64 - b[*v].traps as f64)
                                    .sum()
                            })
                            .map_err(Clone::clone),
                    );
                }
            }
        }
        let m = |policy, group| med(&sw[&(policy, group)]);
        let ms = |v: Option<f64>| fmt_opt(v.map(|x| x * 1000.0), 1);
        r.line(format!(
            "| {} | {rounds} | {} ms, {} ms | {} | {}, {} | {} | {}, {} | {} | {} | {} | {}, {}; {} |",
            sleep_label(s),
            ms(med(&period["32"])),
            ms(med(&period["64"])),
            seed_fp(s),
            summary(&sw[&("eager", "32")], 0),
            summary(&sw[&("lazy", "32")], 0),
            reduction(m("eager", "32"), m("lazy", "32")),
            summary(&sw[&("eager", "64")], 0),
            summary(&sw[&("lazy", "64")], 0),
            reduction(m("eager", "64"), m("lazy", "64")),
            reduction(m("eager", "all"), m("lazy", "all")),
            summary(&traps, 0),
            summary(&sw[&("save-on-put", "32")], 0),
            summary(&sw[&("save-on-put", "64")], 0),
            reduction(m("eager", "all"), m("save-on-put", "all")),
        ));
    }
    for policy in policies {
        if let Ok(b) = &base[policy] {
            r.line(format!(
                "- {policy} baseline (0 rounds, subtracted above): switches 32-bit {:.0}, 64-bit {:.0}",
                fp32_switches(b, &BTreeMap::new(), &v32),
                fp32_switches(b, &BTreeMap::new(), &v64)
            ));
        }
    }
    Ok(())
}

// ----------------------------------------------------------------- IPI ----

struct IpiRun {
    median_us: f64,
    mean_us: f64,
    counters: VmCounters,
}

fn ipi_boot(a: &assets::LinuxAssets, vcpus: u32, rounds: u64, run: usize) -> Got<IpiRun> {
    let name = format!("ipi{vcpus}");
    let bench = format!("futex,threads=16,rounds={rounds}");
    let vm = VmDef {
        name: name.clone(),
        vcpus,
        memory_mib: 128,
        pinned: vcpus == 4,
        cmdline: cmdline(&name, &bench),
        extra: String::new(),
    };
    let config = write_config(
        &format!("ipi-{vcpus}vcpu-{rounds}r-r{run}"),
        "lazy",
        &[vm],
        a.into(),
    )?;
    let boot = kestrel_boot(&config, &[], 1024)?;
    let f = seed_line(&boot, Some(&name), "futex", "median_us")?;
    let counters = counters_of(&boot)
        .remove(&name)
        .ok_or_else(|| format!("{name}: kestrel printed no counters"))?;
    Ok(IpiRun {
        median_us: f["median_us"],
        mean_us: f["mean_us"],
        counters,
    })
}

/// The exit counters the IPI table breaks a round's exits into.
const IPI_KEYS: [&str; 8] = [
    "exits", "ipi", "idle", "irq", "timer", "mmio", "abort", "fp",
];

/// Exits by reason per wake-all: the run's counts minus the 1-round boot's,
/// over the extra rounds.
fn per_round(run: &IpiRun, base: &IpiRun, rounds: u64, key: &str) -> f64 {
    let g = |c: &VmCounters| {
        if key == "exits" {
            c.exits
        } else {
            c.values.get(&format!("exit_{key}")).copied().unwrap_or(0)
        }
    };
    (g(&run.counters) as f64 - g(&base.counters) as f64) / (rounds - 1) as f64
}

fn ipi(p: &Params, a: &assets::LinuxAssets, r: &mut Report) -> Result<(), String> {
    r.line(format!(
        "\n### IPI (seed 002): futex wake-all of 16 threads, each pinned to its own CPU, {} rounds\n",
        p.futex_rounds
    ));
    r.line(format!(
        "Workload: `kestrel-seedbench futex threads=16 rounds={}` (like `perf bench futex wake`: the \
         waker wakes one thread per FUTEX_WAKE until all 16 are awake; the time of that loop is one \
         wake-all; thread i is pinned to CPU i mod CPUs). kestrel: one Linux VM of 16 vCPUs \
         (unpinned) or 4 vCPUs (pinned) on 4 pCPUs, 128 MiB; bare QEMU with 16 and 4 CPUs. Exits \
         per round (the waker's wait until all 16 threads sleep in the futex, then the wake-all): \
         kestrel's counters minus those of a 1-round boot, over the other rounds (SGIs are \
         trapped ICC_SGI1R_EL1 writes: `ipi`). Runs: {}.\n",
        p.futex_rounds, p.runs
    ));
    r.line("| CPUs | seed: physical / VM IOCSR / VM PV IPI (ms) | bare QEMU median us | kestrel median us | kestrel/bare | kestrel mean us | exits per round: all, ipi, idle, irq, timer, mmio, abort, fp |");
    r.line("|---|---|---|---|---|---|---|");
    for &vcpus in &p.ipi_vcpus {
        eprintln!("bench-seeds: ipi {vcpus} vCPUs baseline (1 round)");
        let base = ipi_boot(a, vcpus, 1, 0);
        let (mut bare, mut kes, mut mean, mut ratio) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut per: BTreeMap<&str, Vec<Got<f64>>> = BTreeMap::new();
        for run in 0..p.runs {
            let b = bare_boot(
                a,
                vcpus,
                128,
                &cmdline(
                    "bare",
                    &format!("futex,threads=16,rounds={}", p.futex_rounds),
                ),
                &format!("ipi-{vcpus}-{run}"),
            )
            .and_then(|b| seed_line(&b, None, "futex", "median_us"))
            .map(|f| f["median_us"]);
            eprintln!("bench-seeds: ipi {vcpus} vCPUs run {}", run + 1);
            let k = ipi_boot(a, vcpus, p.futex_rounds, run);
            ratio.push(match (&b, &k) {
                (Ok(b), Ok(k)) => Ok(k.median_us / b),
                (Err(e), _) => Err(e.clone()),
                (_, Err(e)) => Err(e.clone()),
            });
            for key in IPI_KEYS {
                per.entry(key).or_default().push(match (&k, &base) {
                    (Ok(k), Ok(bs)) => Ok(per_round(k, bs, p.futex_rounds, key)),
                    (Err(e), _) => Err(e.clone()),
                    (_, Err(e)) => Err(format!("baseline: {e}")),
                });
            }
            bare.push(b);
            mean.push(k.as_ref().map(|k| k.mean_us).map_err(Clone::clone));
            kes.push(k.map(|k| k.median_us));
        }
        let exits: Vec<String> = IPI_KEYS.iter().map(|k| fmt_opt(med(&per[*k]), 1)).collect();
        r.line(format!(
            "| {vcpus} | 0.0176 / 0.1140 (6.5x) / 0.0481 (2.7x), 16 CPUs | {} | {} | {} | {} | {} |",
            summary(&bare, 1),
            summary(&kes, 1),
            summary(&ratio, 2),
            summary(&mean, 1),
            exits.join(", ")
        ));
    }
    Ok(())
}

// ------------------------------------------------------- IPI, LoongArch ----

/// The LoongArch guest command line (the 1-VM LVZ case's) running `bench`;
/// `earlycon` only under kestrel (under edk2 it takes the firmware's
/// console and the kernel stops before init).
fn cmdline_la64(name: &str, bench: &str, earlycon: bool) -> String {
    format!(
        "console=ttyS0,115200{} rdinit=/init quiet kestrel.test=0 \
         kestrel.name={name} kestrel.bench={bench}",
        if earlycon { " earlycon" } else { "" }
    )
}

/// Guest RAM of the LoongArch IPI VM (and of the bare machine).
const LA64_IPI_MIB: u32 = 512;

/// One kestrel boot of the LoongArch futex VM: `vcpus` vCPUs on 4 pCPUs
/// (pinned when 4), the PV IPI offered or hidden (`pv_ipi`).
fn ipi_boot_la64(
    a: &assets::loong64::Loong64Assets,
    vcpus: u32,
    pv_ipi: bool,
    rounds: u64,
    run: usize,
) -> Got<IpiRun> {
    let name = format!("ipi{vcpus}");
    let bench = format!("futex,threads=16,rounds={rounds}");
    let vm = VmDef {
        name: name.clone(),
        vcpus,
        memory_mib: LA64_IPI_MIB,
        pinned: vcpus == 4,
        cmdline: cmdline_la64(&name, &bench, true),
        extra: format!("console = \"ns16550\"\nkind = \"linux\"\npv_ipi = {pv_ipi}\n"),
    };
    let path = if pv_ipi { "pv" } else { "iocsr" };
    let config = write_config(
        &format!("la64-ipi-{vcpus}vcpu-{path}-{rounds}r-r{run}"),
        "lazy",
        &[vm],
        GuestFiles {
            kernel: &a.vmlinuz,
            initrd: &a.initramfs,
        },
    )?;
    let boot = kestrel_boot_on(Arch::LoongArch64, &config, &[], 2048)?;
    let f = seed_line(&boot, Some(&name), "futex", "median_us")?;
    let counters = counters_of(&boot)
        .remove(&name)
        .ok_or_else(|| format!("{name}: kestrel printed no counters"))?;
    Ok(IpiRun {
        median_us: f["median_us"],
        mean_us: f["mean_us"],
        counters,
    })
}

/// The same kernel and initramfs on the bare LVZ emulator (no kestrel)
/// with `cpus` CPUs, under Debian's edk2 (the emulator's QEMU loads only
/// ELF kernels directly), as `bench-linux --arch loongarch64` boots it.
fn bare_boot_la64(
    a: &assets::loong64::Loong64Assets,
    cpus: u32,
    cmd: &str,
    tag: &str,
) -> Got<Boot> {
    let mut c = qemu::lvz_command();
    c.args(["-M", "virt", "-cpu", "la464"])
        .args(["-smp", &cpus.to_string(), "-m", &LA64_IPI_MIB.to_string()])
        .args(["-nic", "none", "-display", "none", "-monitor", "none"])
        .args(["-serial", "stdio", "-no-reboot", "-bios"])
        .arg(&a.firmware)
        .arg("-kernel")
        .arg(&a.vmlinuz)
        .arg("-initrd")
        .arg(&a.initramfs)
        .args(["-append", cmd]);
    let log = root().join(format!("build/bench-seeds/bare-la64-{tag}.log"));
    let boot = Runner::new(c, BOOT_LIMIT).quiet().log_to(log).run()?;
    if boot.timed_out {
        return Err(format!("bare LVZ emulator timed out{}", last_lines(&boot)));
    }
    Ok(boot)
}

/// The exit counters the LoongArch IPI table breaks a round's exits into
/// (kestrel's LVZ exit reasons: `ipi` is an IOCSR access, `hypercall` an
/// `hvcl`), then the PV IPI sends, the emulated IOCSR IPI sends and the
/// vCPU loads (a vCPU put on a pCPU: `vmid_fast + vmid_slow`).
const IPI_KEYS_LA64: [(&str, &str); 12] = [
    ("exits", "all"),
    ("exit_hypercall", "hypercall"),
    ("exit_ipi", "iocsr"),
    ("exit_idle", "idle"),
    ("exit_irq", "irq"),
    ("exit_timer", "timer"),
    ("exit_mmio", "mmio"),
    ("exit_sysreg", "sysreg"),
    ("exit_abort", "abort"),
    ("ipi_sent", "PV IPI sends"),
    ("ipi_emulated", "IOCSR IPI sends"),
    ("loads", "vCPU loads"),
];

/// Counter `key` per wake-all round: the run's count minus the 1-round
/// boot's, over the extra rounds.
fn per_round_key(run: &IpiRun, base: &IpiRun, rounds: u64, key: &str) -> f64 {
    let g = |c: &VmCounters| match key {
        "exits" => c.exits,
        "loads" => get(c, "vmid_fast") + get(c, "vmid_slow"),
        _ => get(c, key),
    };
    (g(&run.counters) as f64 - g(&base.counters) as f64) / (rounds - 1) as f64
}

fn ipi_la64(p: &Params, a: &assets::loong64::Loong64Assets, r: &mut Report) -> Result<(), String> {
    r.line(format!(
        "\n### IPI (seed 002), LoongArch: futex wake-all of 16 threads, each pinned to its own CPU, {} rounds, PV IPI against IOCSR\n",
        p.futex_rounds
    ));
    r.line(format!(
        "Workload: `kestrel-seedbench futex threads=16 rounds={}` (`tools/guests/seedbench-nostd`, \
         the freestanding LoongArch build: the waker wakes one thread per FUTEX_WAKE until all 16 \
         are awake; the time of that loop is one wake-all; thread i is pinned to CPU i mod CPUs). \
         kestrel (LVZ backend, on the LVZ emulator -smp 4): one Linux VM of 16 vCPUs (unpinned) or \
         4 vCPUs (pinned) on 4 pCPUs, {LA64_IPI_MIB} MiB, once with the PV IPI offered (Linux \
         sends IPIs by `hvcl` KVM_HCALL_FUNC_IPI) and once with `pv_ipi = false` (the feature \
         hidden: Linux sends by IOCSR IPI_SEND, kestrel emulates the IPI block); bare: the same \
         kernel and initramfs on the LVZ emulator with 16 and 4 CPUs under edk2. kestrel/bare: \
         the ratio of medians run by run (each kestrel run paired with a bare run). Exits per \
         round (the waker's wait until all 16 threads sleep in the futex, then the wake-all): \
         kestrel's counters minus those of a 1-round boot of the same VM, over the other rounds; \
         `iocsr` = trapped IOCSR accesses (IPI send, status, clear), `hypercall` = `hvcl`. \
         Runs: {}.\n",
        p.futex_rounds, p.runs
    ));
    let keys: Vec<&str> = IPI_KEYS_LA64.iter().map(|(_, label)| *label).collect();
    r.line(format!(
        "| CPUs | guest IPIs | seed: physical / VM IOCSR / VM PV IPI (ms) | bare median us | kestrel median us | kestrel/bare | kestrel mean us | per round: {} |",
        keys.join(", ")
    ));
    r.line("|---|---|---|---|---|---|---|---|");
    for &vcpus in &p.ipi_vcpus {
        let mut base = BTreeMap::new();
        for pv in [true, false] {
            eprintln!("bench-seeds: la64 ipi {vcpus} vCPUs pv_ipi={pv} baseline (1 round)");
            base.insert(pv, ipi_boot_la64(a, vcpus, pv, 1, 0));
        }
        let mut bare = Vec::new();
        let mut kes: BTreeMap<bool, Vec<Got<IpiRun>>> = BTreeMap::new();
        for run in 0..p.runs {
            eprintln!("bench-seeds: la64 ipi {vcpus} CPUs bare run {}", run + 1);
            bare.push(
                bare_boot_la64(
                    a,
                    vcpus,
                    &cmdline_la64(
                        "bare",
                        &format!("futex,threads=16,rounds={}", p.futex_rounds),
                        false,
                    ),
                    &format!("ipi-{vcpus}-{run}"),
                )
                .and_then(|b| seed_line(&b, None, "futex", "median_us"))
                .map(|f| f["median_us"]),
            );
            for pv in [true, false] {
                eprintln!(
                    "bench-seeds: la64 ipi {vcpus} vCPUs pv_ipi={pv} run {}",
                    run + 1
                );
                kes.entry(pv)
                    .or_default()
                    .push(ipi_boot_la64(a, vcpus, pv, p.futex_rounds, run));
            }
        }
        for pv in [true, false] {
            let runs = &kes[&pv];
            let b = &base[&pv];
            let ratio: Vec<Got<f64>> = bare
                .iter()
                .zip(runs)
                .map(|(b, k)| match (b, k) {
                    (Ok(b), Ok(k)) => Ok(k.median_us / b),
                    (Err(e), _) => Err(e.clone()),
                    (_, Err(e)) => Err(e.clone()),
                })
                .collect();
            let per: Vec<String> = IPI_KEYS_LA64
                .iter()
                .map(|(key, _)| {
                    let v: Vec<Got<f64>> = runs
                        .iter()
                        .map(|k| match (k, b) {
                            (Ok(k), Ok(bs)) => Ok(per_round_key(k, bs, p.futex_rounds, key)),
                            (Err(e), _) => Err(e.clone()),
                            (_, Err(e)) => Err(format!("baseline: {e}")),
                        })
                        .collect();
                    fmt_opt(med(&v), 1)
                })
                .collect();
            let got = |f: fn(&IpiRun) -> f64| -> Vec<Got<f64>> {
                runs.iter()
                    .map(|k| k.as_ref().map(f).map_err(Clone::clone))
                    .collect()
            };
            r.line(format!(
                "| {vcpus} | {} | 0.0176 / 0.1140 (6.5x) / 0.0481 (2.7x), 16 CPUs | {} | {} | {} | {} | {} |",
                if pv { "PV IPI (hvcl)" } else { "IOCSR (pv_ipi = false)" },
                summary(&bare, 1),
                summary(&got(|k| k.median_us), 1),
                summary(&ratio, 2),
                summary(&got(|k| k.mean_us), 1),
                per.join(", ")
            ));
        }
    }
    Ok(())
}

pub fn run(args: &[String]) -> Result<(), String> {
    let p = parse(args)?;
    let dir = root().join("build/bench-seeds");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut r = Report {
        text: String::new(),
        path: dir.join(format!(
            "report-{}-{}.md",
            p.arch.name(),
            p.only
                .iter()
                .map(|e| format!("{e:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join("-")
        )),
    };
    // LoongArch runs on the LVZ emulator (tools/qemu-lvz), both sides.
    let program = match p.arch {
        Arch::Aarch64 => "qemu-system-aarch64".to_string(),
        Arch::LoongArch64 => qemu::lvz_binary().to_string_lossy().into_owned(),
    };
    r.line(format!(
        "## bench-seeds ({}): QEMU {}{} TCG on {} host cores, load {}, commit {}, {} run(s) per figure ({} for VMID)",
        p.arch.name(),
        qemu_version(&program),
        if p.arch == Arch::LoongArch64 { " (LVZ emulator)" } else { "" },
        host_cores(),
        load_average(),
        git_commit(),
        p.runs,
        p.vmid_runs
    ));
    if p.arch == Arch::LoongArch64 {
        for e in &p.only {
            if *e != Exp::Ipi {
                r.line(format!(
                    "- {}: arm64 only (the seed's experiment is an arm64 one).",
                    format!("{e:?}").to_lowercase()
                ));
            }
        }
        if !p.only.contains(&Exp::Ipi) {
            return Ok(());
        }
        let a = match assets::ensure_within_la64(Duration::from_secs(600)) {
            Ok(a) => a,
            Err(e) => {
                r.line(format!(
                    "bench-seeds: skipped: no LoongArch Linux guest assets: {e}"
                ));
                return Ok(());
            }
        };
        r.line(format!("Guest: {} with the test initramfs.", a.kernel));
        ipi_la64(&p, &a, &mut r)?;
        r.line(format!("\n(report written to {})", r.path.display()));
        return Ok(());
    }
    let a = match assets::ensure_within(Duration::from_secs(600)) {
        Ok(a) => a,
        Err(e) => {
            r.line(format!("bench-seeds: skipped: no Linux guest assets: {e}"));
            return Ok(());
        }
    };
    r.line(format!("Guest: {} with the test initramfs.", a.kernel));
    for e in p.only.clone() {
        match e {
            Exp::Vmid => vmid(&p, &a, &mut r)?,
            Exp::Fp => fp(&p, &a, &mut r)?,
            Exp::Fp32 => fp32(&p, &a, &mut r)?,
            Exp::Ipi => ipi(&p, &a, &mut r)?,
        }
    }
    r.line(format!("\n(report written to {})", r.path.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let p = parse(&["--quick".into(), "--only".into(), "ipi,fp".into()]).unwrap();
        assert_eq!(p.only, vec![Exp::Ipi, Exp::Fp]);
        assert_eq!(p.vms, 8);
        let p = parse(&[
            "--widths".into(),
            "4,16".into(),
            "--hackbench".into(),
            "1,5,10".into(),
        ])
        .unwrap();
        assert_eq!(p.widths, vec![4, 16]);
        assert_eq!((p.hb_groups, p.hb_fds, p.hb_loops), (1, 5, 10));
        assert!(parse(&["--widths".into(), "5".into()]).is_err());
        assert!(parse(&["--only".into(), "tlb".into()]).is_err());
        let p = parse(&["--ipi-vcpus".into(), "16".into()]).unwrap();
        assert_eq!(p.ipi_vcpus, vec![16]);
        assert_eq!(Params::full().ipi_vcpus, vec![16, 4]);
        assert!(parse(&["--ipi-vcpus".into(), "8".into()]).is_err());
    }

    #[test]
    fn summaries() {
        assert_eq!(
            summary(&[Ok(1.0), Ok(3.0), Ok(2.0)], 1),
            "2.0 (1.0-3.0, n=3)"
        );
        assert_eq!(summary(&[Ok(2.0)], 2), "2.00");
        assert_eq!(summary(&[Err("x".into())], 2), "failed: x");
        assert_eq!(summary(&[Ok(2.0), Err("x".into())], 0), "2");
    }

    #[test]
    fn fp32_parts() {
        let p = parse(&["--only".into(), "fp32,fp".into()]).unwrap();
        assert_eq!(p.only, vec![Exp::Fp32, Exp::Fp]);
        assert!(Params::full().only.contains(&Exp::Fp32));
        assert_eq!(fp32_rounds(10, 100_000), 28);
        assert_eq!(fp32_rounds(10, 1), 39);
        assert_eq!(fp32_rounds(0, 1), 0);
        assert_eq!(fp32_rounds(1, 1_000_000), 3);
        let (z, i, img, ii) = (
            Path::new("/z"),
            Path::new("/i32"),
            Path::new("/Image"),
            Path::new("/i64"),
        );
        let t = fp32_config(
            "lazy",
            7,
            1000,
            GuestFiles {
                kernel: z,
                initrd: i,
            },
            GuestFiles {
                kernel: img,
                initrd: ii,
            },
        );
        assert!(t.contains("fp_policy = \"lazy\""));
        assert_eq!(t.matches("[[vm]]").count(), 4);
        assert_eq!(t.matches("exclusive = false").count(), 2);
        assert_eq!(t.matches("kestrel.fpsleep=7:1000").count(), 4);
        assert_eq!(t.matches("kernel = \"/z\"").count(), 2);
        assert!(t.contains("name = \"a32b\"\nvcpus = 2\nmemory = \"192M\"\ncpus = [2, 3]"));
    }

    #[test]
    fn fp32_results() {
        let log = [
            "[a32a] LINUX-FPSLEEP: cpu 0: 5 rounds of 3000 terms, a 1 us sleep after each, 0 wrong, in 1.20 s",
            "[a32a] LINUX-FPSLEEP: PASS cpus=2 rounds=5 wrong=0 seconds=1.25",
            "[a32b] LINUX-FPSLEEP: cpu 1: WRONG: got '5 1 1 1.1 1 2' (rounds wrong cpu seconds last-wrong-answer)",
            "[a32b] LINUX-FPSLEEP: FAIL cpus=2 bad=1",
            "[a64a] LINUX-FPSLEEP: PASS cpus=1 rounds=5 wrong=0 seconds=1.0",
        ];
        let r = |vm, n| fp32_result(log.iter().copied(), vm, n);
        assert_eq!(r("a32a", 5), Ok(1.25));
        assert!(r("a32a", 6).is_err());
        assert!(r("a32b", 5).unwrap_err().contains("WRONG"));
        assert!(r("a64a", 5).is_err(), "one CPU only");
        assert!(r("a64b", 5).unwrap_err().contains("no `LINUX-FPSLEEP"));
        let vm = |saves, restores| Fp32Vm {
            saves,
            restores,
            ..Fp32Vm::default()
        };
        let run: BTreeMap<String, Fp32Vm> =
            [("a".to_string(), vm(100, 110)), ("b".to_string(), vm(5, 5))]
                .into_iter()
                .collect();
        let base: BTreeMap<String, Fp32Vm> =
            [("a".to_string(), vm(10, 10)), ("b".to_string(), vm(6, 6))]
                .into_iter()
                .collect();
        assert_eq!(fp32_switches(&run, &base, &["a"]), 190.0);
        assert_eq!(fp32_switches(&run, &base, &["a", "b"]), 188.0);
        assert_eq!(fp32_switches(&run, &BTreeMap::new(), &["b"]), 10.0);
        assert_eq!(reduction(Some(200.0), Some(2.0)), "99.0%");
        assert_eq!(reduction(Some(0.0), Some(2.0)), "-");
        assert_eq!(reduction(None, Some(2.0)), "-");
        assert_eq!(seed_fp(1), "2%");
        assert_eq!(sleep_label(10_000), "10 ms");
    }
}
