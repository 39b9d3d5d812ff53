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

/// The goals of issue-level targets (arm64): instructions per round trip.
fn goal(case: &str) -> Option<u64> {
    match case {
        "hypercall" | "mmio-uart-read" | "gicd-read" | "sysreg-trap" => Some(1_000),
        "ipi-self" => Some(3_000),
        _ => None,
    }
}

/// Boots kestrel for `arch` with `config` under `-icount`; the serial log
/// is also saved to `build/<arch>/bench-<config name>.log`.
fn boot_kestrel(arch: Arch, config: &str, gic: u32) -> Result<String, String> {
    boot_kestrel_on(arch, config, gic, false)
}

/// [`boot_kestrel`], on the LVZ emulator (kestrel's LVZ backend) if `lvz`.
fn boot_kestrel_on(arch: Arch, config: &str, gic: u32, lvz: bool) -> Result<String, String> {
    let config = root().join(config);
    let log = root().join("build").join(arch.name()).join(format!(
        "bench-{}{}.log",
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

fn boot_bare(gic: u32) -> Result<String, String> {
    let guest = build_guest_arm64()?;
    let cmd = bare_command(
        BareConsole::Serial,
        Arch::Aarch64,
        &format!("virt,gic-version={gic}"),
        1,
        1024,
        &guest,
        None,
        "mode=bench-exits",
    );
    run_icount(cmd, "the bare-QEMU run", None)
}

/// The LoongArch goals (trap-and-emulate), instructions per round trip;
/// docs/performance.md gives the reasoning.
fn goal_la(case: &str) -> Option<u64> {
    match case {
        "hypercall" | "csr-read" | "iocsr-read" | "mmio-uart-read" => Some(GOAL_LA_EXIT),
        "tlb-refill" => Some(GOAL_LA_REFILL),
        "ipi-pv-self" | "ipi-iocsr-self" => Some(GOAL_LA_IPI),
        _ => None,
    }
}

/// The LoongArch goals under LVZ, instructions per round trip (issue 19).
fn goal_lvz(case: &str) -> Option<u64> {
    match case {
        "hypercall" => Some(400),
        "mmio-uart-read" => Some(600),
        _ => None,
    }
}

/// One trapped instruction, emulated and back.
const GOAL_LA_EXIT: u64 = 1_000;
/// A TLB refill the guest's own handler serves: about 13 exits.
const GOAL_LA_REFILL: u64 = 10_000;
/// A self-IPI, sent, delivered and acknowledged: about 5 exits.
const GOAL_LA_IPI: u64 = 4_000;

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
    goal: fn(&str) -> Option<u64>,
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
            g.map_or("-".into(), |g| format!("<={g}")),
        );
        match (kv, g) {
            (Some(l), Some(g)) if l.instr > g => missed.push(format!("{case} {} > {g}", l.instr)),
            (None, Some(_)) => missed.push(format!("{case}: no measurement")),
            _ => {}
        }
    }
    missed
}

fn run_arm64(gic: u32) -> Result<Vec<String>, String> {
    build_guest_arm64()?;
    let (kestrel, bare) = collect(
        &boot_kestrel(Arch::Aarch64, "configs/bench/arm64-exits.toml", gic)?,
        &boot_kestrel(Arch::Aarch64, "configs/bench/arm64-switch.toml", gic)?,
        &boot_bare(gic)?,
    )?;
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
    ];
    let missed = table(&order, &kestrel, &bare, goal);
    println!(
        "(wfi-timer-wake includes its 50 us = 50000-instruction timer period; vm-switch-wfi is a round of two VMs blocking in WFI on one pCPU, woken by 200 us timers (beyond the halt-poll limit), including the 200000-instruction wait: two switches, two WFI exits, a wake-up)"
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
        "(the stable counter runs at 100 MHz: one tick = 10 instructions; idle-timer-wake includes its 50 us = 50000-instruction timer period; vm-switch-idle is a round of two VMs blocking in idle on one pCPU, woken by 200 us timers (beyond the halt-poll limit), including the 200000-instruction wait; ipi-iocsr-self has no bare figure: QEMU aborts under -icount when an IOCSR write raises an interrupt)"
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
        &boot_kestrel_on(Arch::LoongArch64, "configs/bench/la64-exits.toml", 3, true)?,
        &boot_kestrel_on(Arch::LoongArch64, "configs/bench/la64-switch.toml", 3, true)?,
        &run_icount(bare_cmd, "the bare LVZ-emulator run", None)?,
    )?;
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
    ];
    let missed = table(&order, &kestrel, &bare, goal_lvz);
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
}
