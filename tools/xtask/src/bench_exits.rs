//! `cargo xtask bench-exits`: what one exit costs, in guest instructions.
//!
//! QEMU runs with `-icount shift=0,sleep=off`: every instruction advances
//! the virtual clock by 1 ns, so the test guest's `mode=bench-exits`, which
//! times N round trips of each operation with its own counter, measures
//! instructions per operation (the guest's and kestrel's together), the
//! same on every run and every host. The same guest on bare QEMU at EL1
//! (same flags) gives the native cost where the operation exists there.
//! Two VMs pinned to one pCPU in `mode=bench-switch` give the cost of a
//! vCPU switch between VMs. The LoongArch test guest has the same modes
//! (`configs/bench/la64-*.toml`; bare QEMU runs it at PLV0). Output: one
//! table per architecture, case | kestrel | exits/op | bare | goal.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::guests::{build_guest_arm64, build_guest_la64};
use crate::qemu::{bare_command, BareConsole, Runner};
use crate::{qemu, root, Arch, Opts};

const ICOUNT: [&str; 2] = ["-icount", "shift=0,sleep=off"];
const LIMIT: Duration = Duration::from_secs(600);

/// One `EXIT <case> instr=N exits=E n=M` line.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitLine {
    pub case: String,
    pub instr: u64,
    pub exits: Option<String>,
}

/// Every `EXIT` case line of a log (tagged or not).
pub fn parse(log: &str) -> BTreeMap<String, ExitLine> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        let Some(rest) = line.split("EXIT ").nth(1) else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(case) = words.next() else { continue };
        let mut instr = None;
        let mut exits = None;
        for w in words {
            if let Some(v) = w.strip_prefix("instr=") {
                instr = v.parse().ok();
            } else if let Some(v) = w.strip_prefix("exits=") {
                exits = (v != "-").then(|| v.to_string());
            }
        }
        if let Some(instr) = instr {
            out.insert(
                case.to_string(),
                ExitLine {
                    case: case.to_string(),
                    instr,
                    exits,
                },
            );
        }
    }
    out
}

/// A goal for one row: at most so many instructions per round trip, or
/// at most so many above the bare-QEMU figure of the same row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    Max(u64),
    AboveBare(u64),
}

impl Goal {
    /// The goal column's text.
    fn text(self) -> String {
        match self {
            Goal::Max(g) => format!("<={g}"),
            Goal::AboveBare(g) => format!("bare+{g}"),
        }
    }

    /// Why a row misses the goal (None: met).
    pub fn missed(self, case: &str, kestrel: Option<u64>, bare: Option<u64>) -> Option<String> {
        let Some(k) = kestrel else {
            return Some(format!("{case}: no measurement"));
        };
        match self {
            Goal::Max(g) => (k > g).then(|| format!("{case} {k} > {g}")),
            Goal::AboveBare(g) => match bare {
                None => Some(format!("{case}: no bare measurement")),
                Some(b) => (k.saturating_sub(b) > g)
                    .then(|| format!("{case} {k} - bare {b} = {} > {g}", k.saturating_sub(b))),
            },
        }
    }
}

/// Issue 31's goals (arm64), instructions per round trip: a hypercall, a
/// trapped MMIO access (the UART's and the vGIC distributor's), an IPI to
/// another vCPU on GICv3 and on GICv2, and what kestrel adds to taking a
/// virtual timer interrupt. The other rows have none.
fn goal(case: &str) -> Option<Goal> {
    match case {
        "hypercall" => Some(Goal::Max(200)),
        "mmio-uart-read" | "gicd-read" => Some(Goal::Max(300)),
        "ipi-other-gicv3" | "ipi-other-gicv2" => Some(Goal::Max(1_500)),
        "vtimer-irq" => Some(Goal::AboveBare(1_000)),
        _ => None,
    }
}

/// `lines` with every case renamed `<case><suffix>` (the IPI runs on each
/// GIC version land in one table).
pub fn tagged(lines: Lines, suffix: &str) -> Lines {
    lines
        .into_values()
        .map(|mut l| {
            l.case = format!("{}{suffix}", l.case);
            (l.case.clone(), l)
        })
        .collect()
}

/// Boots kestrel for `arch` with `config` under `-icount`; the serial log
/// is also saved to `build/<arch>/bench-<config name>.log`.
fn boot_kestrel(arch: Arch, config: &str, gic: u32) -> Result<String, String> {
    boot_kestrel_on(arch, config, gic, false, "")
}

/// [`boot_kestrel`], on the LVZ emulator (kestrel's LVZ backend) if `lvz`;
/// `tag` is added to the log's name.
fn boot_kestrel_on(
    arch: Arch,
    config: &str,
    gic: u32,
    lvz: bool,
    tag: &str,
) -> Result<String, String> {
    let config = root().join(config);
    let log = root().join("build").join(arch.name()).join(format!(
        "bench-{}{}{tag}.log",
        config
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("exits"),
        if lvz { "-lvz" } else { "" }
    ));
    let image = crate::build_image_with(arch, &[], Some(&config))?;
    let opts = Opts {
        arch,
        smp: 2,
        gic,
        mem_mib: 2048,
        features: Vec::new(),
        append: crate::TEST_APPEND.into(),
        config: Some(config),
        lvz,
        module: None,
        as_module: false,
    };
    run_icount(qemu::command(&opts, &image, true), "kestrel", Some(log))
}

/// Runs `cmd` under `-icount` to its end (its log teed to `log`); its
/// serial log.
fn run_icount(
    mut cmd: std::process::Command,
    what: &str,
    log: Option<std::path::PathBuf>,
) -> Result<String, String> {
    cmd.args(ICOUNT);
    let mut runner = Runner::new(cmd, LIMIT);
    if let Some(log) = log {
        runner = runner.log_to(log);
    }
    let boot = runner.run()?;
    if boot.timed_out {
        return Err(format!(
            "{what} did not finish within {} s",
            LIMIT.as_secs()
        ));
    }
    Ok(boot.text())
}

/// The kestrel runs' and the bare run's `EXIT` lines: (kestrel, bare).
type Lines = BTreeMap<String, ExitLine>;
fn collect(exits: &str, switch: &str, bare: &str) -> Result<(Lines, Lines), String> {
    let mut kestrel = parse(exits);
    kestrel.extend(parse(switch));
    if !kestrel.contains_key("hypercall") {
        return Err(format!("no EXIT lines from kestrel:\n{exits}"));
    }
    Ok((kestrel, parse(bare)))
}

/// The arm64 test guest alone on bare QEMU at EL1 with `smp` CPUs.
fn boot_bare(gic: u32, smp: u32, mode: &str) -> Result<String, String> {
    let guest = build_guest_arm64()?;
    let cmd = bare_command(
        BareConsole::Serial,
        Arch::Aarch64,
        &format!("virt,gic-version={gic}"),
        smp,
        1024,
        &guest,
        None,
        mode,
    );
    run_icount(cmd, "the bare-QEMU run", None)
}

/// The LoongArch goals (trap-and-emulate), instructions per round trip;
/// docs/performance.md gives the reasoning.
fn goal_la(case: &str) -> Option<Goal> {
    match case {
        "hypercall" | "csr-read" | "iocsr-read" | "mmio-uart-read" => Some(GOAL_LA_EXIT),
        "tlb-refill" => Some(GOAL_LA_REFILL),
        "ipi-pv-self" | "ipi-iocsr-self" => Some(GOAL_LA_IPI),
        _ => None,
    }
    .map(Goal::Max)
}

/// The LoongArch goals under LVZ, instructions per round trip (issue 31):
/// a hypercall, a trapped MMIO access, a PV IPI to another vCPU.
fn goal_lvz(case: &str) -> Option<Goal> {
    match case {
        "hypercall" => Some(Goal::Max(250)),
        "mmio-uart-read" => Some(Goal::Max(400)),
        "ipi-pv-other" => Some(Goal::Max(1_000)),
        _ => None,
    }
}

/// One trapped instruction, emulated and back.
const GOAL_LA_EXIT: u64 = 1_000;
/// A TLB refill the guest's own handler serves: about 13 exits.
const GOAL_LA_REFILL: u64 = 10_000;
/// A self-IPI, sent, delivered and acknowledged: about 5 exits.
const GOAL_LA_IPI: u64 = 4_000;

/// `kestrel` with the lines of `configs/bench/la64-ipi.toml` (two vCPUs
/// on pCPUs 0 and 1; kestrel only: no PV IPI off kestrel, and QEMU aborts
/// under -icount when an IOCSR write raises an interrupt), on the LVZ
/// emulator. (The LVZ table only: under trap-and-emulate the
/// guest's timer re-arm, with which its waits end their QEMU turn, is an
/// exit that does not end it, and a round trip measures millions.)
fn with_ipi_lvz(mut kestrel: Lines) -> Result<Lines, String> {
    let log = boot_kestrel_on(
        Arch::LoongArch64,
        "configs/bench/la64-ipi.toml",
        3,
        true,
        "",
    )?;
    let got = parse(&log);
    if !got.contains_key("ipi-pv-other") {
        return Err(format!("no ipi-pv-other line from kestrel:\n{log}"));
    }
    kestrel.extend(got);
    Ok(kestrel)
}

/// The LoongArch guest alone on bare QEMU: it runs at real PLV0.
fn boot_bare_la(guest: &std::path::Path) -> Result<String, String> {
    let cmd = bare_command(
        BareConsole::Serial,
        Arch::LoongArch64,
        "virt",
        1,
        1024,
        guest,
        None,
        "mode=bench-exits",
    );
    run_icount(cmd, "the bare-QEMU run", None)
}

/// Prints one table; returns the goals missed.
fn table(
    order: &[&str],
    kestrel: &Lines,
    bare: &Lines,
    goal: fn(&str) -> Option<Goal>,
) -> Vec<String> {
    println!(
        "{:<18} {:>10} {:>12} {:>10} {:>8}",
        "case", "kestrel", "exits/op", "bare", "goal"
    );
    let mut missed = Vec::new();
    for &case in order {
        let kv = kestrel.get(case);
        let bv = bare.get(case);
        let g = goal(case);
        println!(
            "{:<18} {:>10} {:>12} {:>10} {:>8}",
            case,
            kv.map_or("-".into(), |l| l.instr.to_string()),
            kv.and_then(|l| l.exits.clone()).unwrap_or("-".into()),
            bv.map_or("-".into(), |l| l.instr.to_string()),
            g.map_or("-".into(), Goal::text),
        );
        if let Some(m) = g.and_then(|g| g.missed(case, kv.map(|l| l.instr), bv.map(|l| l.instr))) {
            missed.push(m);
        }
    }
    missed
}

fn run_arm64(gic: u32) -> Result<Vec<String>, String> {
    build_guest_arm64()?;
    let (mut kestrel, mut bare) = collect(
        &boot_kestrel(Arch::Aarch64, "configs/bench/arm64-exits.toml", gic)?,
        &boot_kestrel(Arch::Aarch64, "configs/bench/arm64-switch.toml", gic)?,
        &boot_bare(gic, 1, "mode=bench-exits")?,
    )?;
    // The IPI to another vCPU, on both GIC versions whatever `gic` is.
    for v in [3, 2] {
        let tag = format!("-gicv{v}");
        let k = boot_kestrel_on(
            Arch::Aarch64,
            "configs/bench/arm64-ipi.toml",
            v,
            false,
            &tag,
        )?;
        let got = parse(&k);
        if !got.contains_key("ipi-other") {
            return Err(format!("no ipi-other line from kestrel (GICv{v}):\n{k}"));
        }
        kestrel.extend(tagged(got, &tag));
        bare.extend(tagged(parse(&boot_bare(v, 2, "mode=bench-ipi")?), &tag));
    }
    println!(
        "\nExit costs, arm64 (GICv{gic}), guest instructions per round trip under -icount shift=0 (kestrel's and the guest's together)"
    );
    let order = [
        "loop",
        "hypercall",
        "mmio-uart-read",
        "gicd-read",
        "sysreg-trap",
        "ipi-self",
        "wfi-timer-wake",
        "vm-switch-wfi",
        "vtimer-irq",
        "poke-other-gicv3",
        "ipi-other-gicv3",
        "ipi-pv-other-gicv3",
        "poke-other-gicv2",
        "ipi-other-gicv2",
        "ipi-pv-other-gicv2",
    ];
    let missed = table(&order, &kestrel, &bare, goal);
    println!(
        "(wfi-timer-wake includes its 50 us = 50000-instruction timer period; vm-switch-wfi is a round of two VMs blocking in WFI on one pCPU, woken by 200 us timers (beyond the halt-poll limit), including the 200000-instruction wait: two switches, two WFI exits, a wake-up)"
    );
    println!(
        "(vtimer-irq: from the virtual timer's deadline to the spinning vCPU seeing its handler's count (taken, masked, EOI'd, returned); ipi-*-other-gicvN: two vCPUs pinned to pCPUs 0 and 1 on GICvN, vCPU 0 sends one SGI (or PV IPI) and waits until vCPU 1's handler counted it (and EOI'd it); both wait with YIELD, which ends a QEMU CPU's turn, and the figure counts the instructions of both CPUs; poke-other-gicvN is the same two waits with a word copied back instead of an IPI; bare is the same guest with -smp 2)"
    );
    Ok(missed)
}

fn run_la64() -> Result<Vec<String>, String> {
    let guest = build_guest_la64()?;
    let (kestrel, bare) = collect(
        &boot_kestrel(Arch::LoongArch64, "configs/bench/la64-exits.toml", 3)?,
        &boot_kestrel(Arch::LoongArch64, "configs/bench/la64-switch.toml", 3)?,
        &boot_bare_la(&guest)?,
    )?;
    println!(
        "\nExit costs, loongarch64 (trap-and-emulate), guest instructions per round trip under -icount shift=0 (kestrel's and the guest's together)"
    );
    let order = [
        "loop",
        "hypercall",
        "csr-read",
        "iocsr-read",
        "mmio-uart-read",
        "cpucfg",
        "tlb-refill",
        "stage2-fill",
        "ipi-pv-self",
        "ipi-iocsr-self",
        "idle-timer-wake",
        "vm-switch-idle",
    ];
    let missed = table(&order, &kestrel, &bare, goal_la);
    println!(
        "(the stable counter runs at 100 MHz: one tick = 10 instructions; idle-timer-wake includes its 50 us = 50000-instruction timer period; vm-switch-idle is a round of two VMs blocking in idle on one pCPU, woken by 200 us timers (beyond the halt-poll limit), including the 200000-instruction wait; ipi-iocsr-self has no bare figure: QEMU aborts under -icount when an IOCSR write raises an interrupt; the IPI to another vCPU is measured under LVZ only: here the waits' timer re-arm is an exit that does not end the QEMU CPU's turn)"
    );
    Ok(missed)
}

/// The LVZ backend's table: the same guest and configs on the LVZ
/// emulator; bare is the emulator without kestrel (the guest at PLV0).
fn run_lvz() -> Result<Vec<String>, String> {
    let guest = build_guest_la64()?;
    let mut bare_cmd = qemu::lvz_command();
    bare_cmd
        .args(["-M", "virt", "-cpu", "la464", "-smp", "1", "-m", "2048"])
        .args(["-nic", "none", "-display", "none", "-monitor", "none"])
        .args(["-serial", "stdio", "-no-reboot", "-kernel"])
        .arg(&guest)
        .args(["-append", "mode=bench-exits"]);
    let (kestrel, bare) = collect(
        &boot_kestrel_on(
            Arch::LoongArch64,
            "configs/bench/la64-exits.toml",
            3,
            true,
            "",
        )?,
        &boot_kestrel_on(
            Arch::LoongArch64,
            "configs/bench/la64-switch.toml",
            3,
            true,
            "",
        )?,
        &run_icount(bare_cmd, "the bare LVZ-emulator run", None)?,
    )?;
    let kestrel = with_ipi_lvz(kestrel)?;
    println!(
        "\nExit costs, loongarch64 (LVZ backend, on the LVZ emulator), guest instructions per round trip under -icount shift=0 (kestrel's and the guest's together)"
    );
    let order = [
        "loop",
        "hypercall",
        "cpucfg",
        "csr-read",
        "iocsr-read",
        "mmio-uart-read",
        "tlb-refill",
        "stage2-fill",
        "ipi-pv-self",
        "ipi-iocsr-self",
        "idle-timer-wake",
        "vm-switch-idle",
        "poke-other",
        "ipi-pv-other",
        "ipi-iocsr-other",
    ];
    let missed = table(&order, &kestrel, &bare, goal_lvz);
    println!(
        "(poke-other, ipi-*-other: one VM of two vCPUs pinned to pCPUs 0 and 1; CPU 0 sends one IPI and waits until CPU 1's handler counted it in shared memory; both waits end the QEMU CPU's turn each round by re-arming their own timer (interrupt masked), and the figure counts the instructions of both CPUs; poke-other is the same two waits with a word copied back instead of an IPI)"
    );
    println!(
        "(under LVZ the guest's CSRs and TLB are its own: csr-read and tlb-refill exit 0 times; stage2-fill is a first load from a 4 MiB block of guest RAM, one second-stage fill of a pair of 2 MiB pages plus the guest's own TLB refill; ipi-pv-self is the hypercall, the kick and the SWI0 taken)"
    );
    Ok(missed)
}

/// `cargo xtask bench-exits [--gic 2|3] [--arch aarch64|loongarch64] [--lvz]` (`--lvz`: only
/// the LoongArch LVZ table)
/// (both architectures unless `--arch` names one).
pub fn run(args: &[String]) -> Result<(), String> {
    let mut gic = 3;
    let (mut arm64, mut la64, mut tne) = (true, true, true);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--gic" => {
                gic = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|g| *g == 2 || *g == 3)
                    .ok_or("--gic takes 2 or 3")?
            }
            "--arch" => match it.next().map(String::as_str) {
                Some("aarch64" | "arm64") => la64 = false,
                Some("loongarch64" | "la64") => arm64 = false,
                _ => return Err("--arch takes aarch64 or loongarch64".into()),
            },
            "--lvz" => (arm64, tne) = (false, false),
            other => return Err(format!("bench-exits: unknown option '{other}'")),
        }
    }
    let mut missed = Vec::new();
    if arm64 {
        missed.extend(run_arm64(gic)?.into_iter().map(|m| format!("arm64 {m}")));
    }
    if la64 && tne {
        missed.extend(run_la64()?.into_iter().map(|m| format!("loongarch64 {m}")));
    }
    if la64 {
        missed.extend(
            run_lvz()?
                .into_iter()
                .map(|m| format!("loongarch64 LVZ {m}")),
        );
    }
    if missed.is_empty() {
        println!("goals: all met");
    } else {
        println!("goals not met: {}", missed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exit_lines() {
        let log = "[bench] EXIT begin kestrel=1\n[bench] EXIT hypercall instr=3764 exits=1.00 n=2000\nEXIT gicd-read instr=80 exits=- n=2000\nEXIT note x\n";
        let p = parse(log);
        assert_eq!(p.len(), 2);
        assert_eq!(p["hypercall"].instr, 3764);
        assert_eq!(p["hypercall"].exits.as_deref(), Some("1.00"));
        assert_eq!(p["gicd-read"].exits, None);
    }

    #[test]
    fn reads_ipi_lines_and_tags_them() {
        let log = "EXIT begin kestrel=1 gic=V2 freq=1000000000 ncpus=2\nEXIT ipi-other instr=5128 exits=2.00 n=500\nEXIT ipi-pv-other instr=2977 exits=2.00 n=500\nEXIT end\n";
        let t = tagged(parse(log), "-gicv2");
        assert_eq!(t.len(), 2);
        assert_eq!(t["ipi-other-gicv2"].instr, 5128);
        assert_eq!(t["ipi-other-gicv2"].case, "ipi-other-gicv2");
        assert_eq!(t["ipi-pv-other-gicv2"].exits.as_deref(), Some("2.00"));
        assert!(!t.contains_key("ipi-other"));
    }

    #[test]
    fn goals_max_and_above_bare() {
        assert_eq!(goal("hypercall"), Some(Goal::Max(200)));
        assert_eq!(goal("gicd-read"), Some(Goal::Max(300)));
        assert_eq!(goal("ipi-other-gicv2"), Some(Goal::Max(1_500)));
        assert_eq!(goal("vtimer-irq"), Some(Goal::AboveBare(1_000)));
        assert_eq!(goal("ipi-self"), None);
        assert_eq!(goal_lvz("ipi-pv-other"), Some(Goal::Max(1_000)));
        assert_eq!(goal_lvz("hypercall"), Some(Goal::Max(250)));
        let g = Goal::Max(200);
        assert_eq!(g.missed("hypercall", Some(200), None), None);
        assert!(g.missed("hypercall", Some(201), None).is_some());
        assert!(g.missed("hypercall", None, None).is_some());
        let a = Goal::AboveBare(1_000);
        assert_eq!(a.missed("vtimer-irq", Some(1_150), Some(150)), None);
        assert_eq!(
            a.missed("vtimer-irq", Some(1_969), Some(150)).as_deref(),
            Some("vtimer-irq 1969 - bare 150 = 1819 > 1000")
        );
        assert!(a.missed("vtimer-irq", Some(100), None).is_some());
        assert_eq!(a.text(), "bare+1000");
        assert_eq!(g.text(), "<=200");
    }
}
