//! The arm64 test guest (`tools/guests/arm64-test`): its build, its
//! bare-QEMU smoke cases, and the kestrel VM tests.
//!
//! - [`crate::guests::build_guest_arm64`] builds the guest for `aarch64-unknown-none`
//!   (hard float: it checks the FP/SIMD registers) and flattens it into
//!   `build/guests/arm64-test.bin` (an arm64 `Image`, which QEMU `-kernel`
//!   loads and which the configs name with `kind = "test-guest"`).
//! - [`bare_case`] (GICv3 and GICv2) are in `make test` (`cargo xtask smoke`): the guest alone on
//!   QEMU at EL1 (`-M virt,gic-version=3|2`, no virtualization, PSCI over
//!   HVC handled by QEMU) with 4 CPUs. Every check but the kestrel-specific
//!   ones must pass there, which proves the checks are real: a failure under
//!   kestrel is kestrel's. A few seconds each.
//! - [`run`] (`cargo xtask vmtest --arch aarch64 [--case NAME] [--list]`)
//!   boots kestrel with the VMs of `configs/test/arm64-*.toml`. It needs the
//!   arm64 VM backend and takes minutes: it is not in `make test`.
//!
//! docs/test-guest.md describes the guest, its checks and its output.

use std::time::Duration;

use crate::boot_case::{Case, Ending};
use crate::guests::build_guest_arm64;
use crate::suite::Suite;
use crate::vmtest::{self, VmCase, VmSuite, ICOUNT};
use crate::{Arch, Opts};

/// Checks only kestrel can pass; on bare QEMU they print `SKIP`.
const KESTREL_ONLY: &[&str] = &[
    "hypercall-discovery",
    "hypercall-errors",
    "pv-ipi",
    "bench-ipi-exits",
    "stolen-time",
];

/// Checks that pass anywhere with 4 CPUs.
const EVERYWHERE: &[&str] = &[
    "psci-version-features",
    "psci-smp-bringup",
    "psci-errors",
    "timer",
    "sgi-target-list",
    "sgi-broadcast",
    "fp-simd-switches",
    "abort-outside-memory",
    "disr-switch",
    "phys-timer",
    "wfit-timeout",
    "debug-bp-wp-step",
    "sve-switches",
];

/// A smoke case: the guest on bare QEMU at EL1 with GIC version `gic`
/// (3 or 2), as QEMU's `-kernel`.
pub fn bare_case(gic: u32) -> Case {
    let mut expect: Vec<&'static str> = vec!["RESULT: 13 passed, 0 failed"];
    expect.extend(
        EVERYWHERE
            .iter()
            .map(|c| leak(format!("PASS {} {c}", number(c)))),
    );
    Case {
        name: if gic == 2 {
            "arm64 test guest on bare QEMU at EL1 (GICv2, -smp 4)"
        } else {
            "arm64 test guest on bare QEMU at EL1 (GICv3, -smp 4)"
        },
        opts: Opts {
            arch: Arch::Aarch64,
            smp: 4,
            gic,
            ..Opts::default()
        },
        ending: Ending::PowerOff,
        expect,
        reject: vec!["FAIL ", "panic", "unexpected exception"],
        extra: vec![],
        machine: Some(if gic == 2 {
            "virt,gic-version=2"
        } else {
            "virt,gic-version=3"
        }),
        check: Some(check_bare),
        timeout: Duration::from_secs(120),
        guest: Some(build_guest_arm64),
    }
}

/// The AArch32 test guest alone on QEMU at EL1 in AArch32 (`-cpu
/// cortex-a15`, `-smp 2`, PSCI over HVC handled by QEMU): every check but
/// the kestrel-only ones (its PV IPI, its answers to wrong calls) must
/// pass, which proves them real. About a second.
pub fn bare_case_aarch32() -> Case {
    let mut expect: Vec<&'static str> = vec!["RESULT: 16 passed, 0 failed", "banked: IAUF"];
    expect.extend(
        AARCH32_CHECKS
            .iter()
            .enumerate()
            .filter(|(_, c)| !["pv-ipi", "hostile-calls"].contains(*c))
            .map(|(i, c)| leak(format!("PASS {} {c}", i + 1))),
    );
    Case {
        name: "aarch32 test guest on bare QEMU (cortex-a15, AArch32 EL1, -smp 2)",
        opts: Opts {
            arch: Arch::Aarch64,
            smp: 2,
            gic: 3,
            // Check 10 reads 0x7FF0_0000, past RAM below 1 GiB of it.
            mem_mib: 256,
            ..Opts::default()
        },
        ending: Ending::PowerOff,
        expect,
        reject: vec!["FAIL "],
        extra: vec!["-cpu", "cortex-a15"],
        machine: Some("virt,gic-version=3"),
        check: None,
        timeout: Duration::from_secs(60),
        guest: Some(crate::guests::build_guest_aarch32),
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The number the guest gives check `name` (its position in the run:
/// the checks of [`ALL`], then `share`).
fn number(name: &str) -> usize {
    if name == "share" {
        return ALL.len() + 1;
    }
    ALL.iter().position(|c| *c == name).map_or(0, |i| i + 1)
}

/// On bare QEMU only the kestrel-specific checks may be skipped
/// (`SKIP <n> <check> (<why>)`).
fn check_bare(log: &str) -> Vec<String> {
    crate::boot_case::only_skipped(log, KESTREL_ONLY, |rest| {
        rest.split_whitespace().nth(1).unwrap_or("")
    })
}

/// Every check of the guest, in the order it runs them.
pub(crate) const ALL: &[&str] = &[
    "hypercall-discovery",
    "hypercall-errors",
    "psci-version-features",
    "psci-smp-bringup",
    "psci-errors",
    "timer",
    "sgi-target-list",
    "sgi-broadcast",
    "pv-ipi",
    "fp-simd-switches",
    "abort-outside-memory",
    "bench-ipi-exits",
    "disr-switch",
    "phys-timer",
    "wfit-timeout",
    "debug-bp-wp-step",
    "stolen-time",
    "sve-switches",
];

/// The kestrel cases (they need the arm64 VM backend).
pub fn vm_cases() -> Vec<VmCase> {
    let names = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:02}")).collect()
    };
    // The AArch32 test VM beside an arm64 one; its GICv2 and refused
    // variants differ only where they say.
    let aarch32 = VmCase {
        name: "arm64-aarch32: an AArch32 test VM (2 vCPUs) beside an arm64 test VM sharing 2 pCPUs: traps, PSCI, lazy FP across 32/64-bit switches",
        config: "configs/test/arm64-aarch32.toml",
        features: &[],
        gic: 3,
        mem_mib: 1024,
        vms: vec!["a32".into(), "t64".into()],
        must_pass: &[],
        check: Some(check_aarch32),
        timeout: Duration::from_secs(600),
        qemu_args: &[],
        stop_after: None,
        lvz: false,
        append: "",
        smp: 4,
    };
    vec![
        VmCase {
            name: "arm64-refused: VMs refused at boot (more memory than the machine has; SVE on a CPU without it) beside one that runs: kestrel's final status is 1 and `make run` would fail with the reasons",
            config: "configs/test/arm64-refused.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["ok0".into()],
            must_pass: &[],
            check: Some(check_refused),
            timeout: Duration::from_secs(300),
            qemu_args: &["-cpu", "max,sve=off"],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        aarch32.clone(),
        VmCase {
            name: "arm64-aarch32-gicv2: the same on a GICv2 (SGIs through GICD_SGIR, the GICV frame)",
            gic: 2,
            ..aarch32.clone()
        },
        VmCase {
            name: "arm64-aarch32-refused: the same VMs on a CPU without AArch32 at EL1 (-cpu neoverse-v1): the AArch32 VM is refused with the reason, the arm64 one runs",
            vms: vec!["t64".into()],
            check: Some(check_aarch32_refused),
            qemu_args: &["-cpu", "neoverse-v1"],
            ..aarch32
        },
        VmCase {
            name: "arm64-1vm-gicv3: one VM, 4 vCPUs on -smp 4, GICv3, every check + IPI benchmark",
            config: "configs/test/arm64-1vm.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["t0".into()],
            must_pass: ALL,
            check: Some(check_bench_lines),
            timeout: Duration::from_secs(600),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        VmCase {
            name: "arm64-1vm-gicv2: one VM, 4 vCPUs on -smp 4, GICv2, every check + IPI benchmark",
            config: "configs/test/arm64-1vm.toml",
            features: &[],
            gic: 2,
            mem_mib: 1024,
            vms: vec!["t0".into()],
            must_pass: ALL,
            check: Some(check_bench_lines),
            timeout: Duration::from_secs(600),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        VmCase {
            name: "arm64-fp-shared: 3 VMs x 2-4 vCPUs sharing 4 pCPUs, lazy FP across switches",
            config: "configs/test/arm64-fp-shared.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["fp-a".into(), "fp-b".into(), "fp-c".into()],
            must_pass: ALL,
            check: Some(check_fp_switches),
            timeout: Duration::from_secs(1200),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        vmtest::hostile_case(
            "arm64-hostile-gicv3: an attacker VM beside a victim VM on one pCPU, GICv3",
            "configs/test/arm64-hostile.toml",
            3,
            check_hostile,
            Duration::from_secs(300),
            ICOUNT,
        ),
        // The same attacks on GICv2, and on a console line at a board's
        // 115200 baud: kestrel's output waits for the line, nobody's exit
        // does, and the chatty attacker loses its own oldest output.
        VmCase {
            append: "kestrel.baud=115200",
            ..vmtest::hostile_case(
                "arm64-hostile-gicv2: an attacker VM beside a victim VM on one pCPU, GICv2, console at 115200 baud",
                "configs/test/arm64-hostile.toml",
                2,
                check_hostile_slow_console,
                Duration::from_secs(300),
                ICOUNT,
            )
        },
        // A 32-bit attacker: coprocessor encodings, calls, banked-register
        // MMIO and WFI/WFE from AArch32 (A32 and T32) beside a 64-bit victim.
        vmtest::hostile_case(
            "arm64-aarch32-hostile: a 32-bit attacker VM (cp14/cp15 encoding walk in A32 and T32, wrong HVC32/SMC32 calls, banked-register MMIO, WFI/WFE floods) beside a 64-bit victim VM on one pCPU",
            "configs/test/arm64-aarch32-hostile.toml",
            3,
            check_aarch32_hostile,
            Duration::from_secs(600),
            ICOUNT,
        ),
        VmCase {
            name: "arm64-regs-shared: 2 VMs x 2 vCPUs all on pCPU 1, EL1 state across VM switches",
            config: "configs/test/arm64-regs-shared.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["rs-a".into(), "rs-b".into()],
            must_pass: ALL,
            check: None,
            timeout: Duration::from_secs(900),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        VmCase {
            name: "arm64-rollover: 20 VMs x 2 vCPUs on 4 pCPUs with 4-bit VMIDs (vmid4)",
            config: "configs/test/arm64-rollover.toml",
            features: &["vmid4"],
            gic: 3,
            mem_mib: 2048,
            vms: names("roll-", 20),
            must_pass: ALL,
            check: Some(vmtest::check_rollover),
            timeout: Duration::from_secs(1800),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        VmCase {
            name: "arm64-reboot: a VM reboots 100 times beside a VM running every check",
            config: "configs/test/arm64-reboot.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["rb".into(), "steady".into()],
            must_pass: &[],
            check: Some(check_reboot),
            timeout: Duration::from_secs(600),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        vmtest::share_case(
            "arm64-share: 16 spinning vCPUs beside a 1-vCPU spinner on 4 pCPUs, each gets a fair share",
            "configs/test/arm64-share.toml",
            &["psci-smp-bringup", "share"],
        ),
        VmCase {
            name: "arm64-resetrace: resets racing CPU_ON from another vCPU, beside a victim whose timer stays on time",
            config: "configs/test/arm64-resetrace.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["attacker".into(), "victim".into()],
            must_pass: &[],
            check: Some(check_resetrace),
            // Under -icount a loaded host only slows it.
            timeout: Duration::from_secs(600),
            qemu_args: ICOUNT,
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        },
        VmCase {
            name: "arm64-bigreset: a VM with a 64 MiB initrd resets again and again on the pCPU of a victim whose timer stays on time",
            config: "configs/test/arm64-bigreset.toml",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["attacker".into(), "victim".into()],
            must_pass: &[],
            check: Some(check_bigreset),
            // Under -icount a loaded host only slows it.
            timeout: Duration::from_secs(600),
            qemu_args: ICOUNT,
            stop_after: None,
            lvz: false,
            append: "",
            smp: 1,
        },
    ]
}

/// The victim's largest gap between two of its 10 ms ticks while the
/// attacker's restarts race CPU_ON (under -icount: counter time is guest
/// instructions, whatever the host's load). Its vCPU shares pCPU 0 with
/// the attacker's (kestrel's slice: 10 ms). Measured: 12 ms; 344 ms (and
/// 132 of 200 ticks) while a restart spun on the scheduler's lock for its
/// vCPUs.
const RESETRACE_MAX_GAP_MS: u64 = 40;
/// The victim's ticks at least this share (permille) of window / period.
const RESETRACE_MIN_TICKS_PERMILLE: u64 = 850;
/// Restarts of the attacker the run must at least see.
const RESETRACE_MIN_RESTARTS: u64 = 20;

/// Restarts of the big-image attacker the run must at least see.
const BIGRESET_MIN_RESTARTS: u64 = 10;
/// The victim shares its pCPU with the attacker's three vCPUs: it runs
/// about half the time (measured 46%) and takes its ticks then, and waits
/// at most for the attacker's vCPUs' slices (measured 30 ms; 60 ms when
/// vCPU 0 copied the 64 MiB in one run, not a step per run).
const BIGRESET_MIN_TICKS_PERMILLE: u64 = 400;

/// The big-image reset storm: as [`check_resetrace`], the victim on the
/// attacker's pCPU.
fn check_bigreset(log: &str) -> Vec<String> {
    let mut problems = check_reset_storm(log, BIGRESET_MIN_RESTARTS, BIGRESET_MIN_TICKS_PERMILLE);
    // One pCPU: the worst exit and restart step are their own instructions.
    problems.extend(vmtest::check_exit_budget(log, &["attacker", "victim"]));
    problems
}

/// The restart race: the attacker restarted again and again (each restart
/// leaving heap and guest memory as they were) until it passed, and the
/// victim kept its memory, registers and timer.
fn check_resetrace(log: &str) -> Vec<String> {
    check_reset_storm(log, RESETRACE_MIN_RESTARTS, RESETRACE_MIN_TICKS_PERMILLE)
}

/// An attacker's restarts beside a victim: at least `min_restarts`, each
/// leaving heap and guest memory as they were; the victim kept its memory
/// and registers, took at least `min_ticks_permille` of its window's
/// ticks, and waited at most [`RESETRACE_MAX_GAP_MS`] for one.
fn check_reset_storm(log: &str, min_restarts: u64, min_ticks_permille: u64) -> Vec<String> {
    let mut problems = Vec::new();
    if !log.contains("[attacker] PASS 1 resetrace") {
        problems.push("attacker: no \"PASS 1 resetrace\"".into());
    }
    problems.extend(vmtest::check_restarts(log, "attacker", min_restarts));
    for p in ["victim-memory", "victim-registers", "victim-heartbeat"] {
        if !log.contains(&format!("[victim] PASS {p} ")) {
            problems.push(format!("victim: no \"PASS {p}\""));
        }
    }
    match parse_victim(log) {
        None => problems.push("victim: no VICTIM line".into()),
        Some(v) => {
            let expected = v.window_ms / v.period_ms.max(1);
            if v.ticks * 1000 < expected * min_ticks_permille {
                problems.push(format!(
                    "victim took {} timer interrupts, below {min_ticks_permille}/1000 of {expected}, while restarts raced CPU_ON",
                    v.ticks
                ));
            }
            if v.max_gap_ms > RESETRACE_MAX_GAP_MS {
                problems.push(format!(
                    "victim waited {} ms for a timer interrupt while restarts raced CPU_ON (at most {RESETRACE_MAX_GAP_MS} ms)",
                    v.max_gap_ms
                ));
            }
        }
    }
    problems
}

/// Boots of VM "rb" in `configs/test/arm64-reboot.toml`.
const REBOOT_CYCLES: u64 = 100;

/// The reboot case: VM "rb" printed one line per boot in order, its
/// counter on the disk going up by one each time (the disk kept its data,
/// RAM was fresh), and kestrel logged each restart with the same free
/// guest memory as after creating the VMs and with heap use that does not
/// grow; "steady" passed every check (`judge_vm`).
fn check_reboot(log: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let boots: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("[rb] REBOOT ").map(|(_, r)| r))
        .collect();
    for (k, line) in boots.iter().filter(|l| !l.starts_with("done")).enumerate() {
        let want = format!("{k}: RAM fresh, disk counter {k} -> {}", k + 1);
        if !line.starts_with(&want) {
            problems.push(format!(
                "boot {k}: \"REBOOT {line}\", want \"REBOOT {want}\""
            ));
            break;
        }
    }
    if !boots.contains(&format!("done: {REBOOT_CYCLES} boots").as_str()) {
        problems.push(format!(
            "no \"REBOOT done: {REBOOT_CYCLES} boots\" (saw {} boot lines)",
            boots.len()
        ));
    }
    problems.extend(vmtest::check_restarts(log, "rb", REBOOT_CYCLES - 1));
    for l in log.lines().filter(|l| l.contains("REBOOT FAIL")) {
        problems.push(l.trim().to_string());
    }
    problems
}

/// Every phase of the hostile-guest suite (tools/guests/arm64-test/src/hostile.rs).
const HOSTILE_PASS: &[(&str, &str)] = &[
    ("attacker", "attack-storms"),
    ("attacker", "attack-vgic-freeze"),
    ("attacker", "attack-sysreg-read"),
    ("attacker", "attack-sysreg-write"),
    ("attacker", "attack-sys-insn"),
    ("attacker", "attack-hypercalls"),
    ("attacker", "attack-sve"),
    ("attacker", "attack-mmio"),
    ("attacker", "attack-isolation"),
    ("attacker", "attack-virtio-setup"),
    ("attacker", "attack-virtio-rings"),
    ("attacker", "attack-virtio-block"),
    ("attacker", "attack-virtio-switch"),
    ("attacker", "attack-virtio-registers"),
    ("attacker", "attack-virtio-left-broken"),
    ("attacker", "attack-hold"),
    ("attacker", "attack-virtio-budget"),
    ("attacker", "attack-console-budget"),
    ("attacker", "attack-rx-armed"),
    ("attacker", "attack-cold-tx"),
    ("attacker", "attack-rx-taken"),
    ("victim", "victim-memory"),
    ("victim", "victim-registers"),
    ("victim", "victim-heartbeat"),
    ("victim", "victim-steal"),
    ("victim", "victim-send-hostile-receiver"),
    ("victim", "victim-send-cold-receiver"),
];

/// The victim's numbers from its `VICTIM:` line.
#[derive(Debug, PartialEq)]
struct VictimLine {
    window_ms: u64,
    share_pct: u64,
    ticks: u64,
    period_ms: u64,
    max_gap_ms: u64,
}

fn parse_victim(log: &str) -> Option<VictimLine> {
    let line = log.lines().find_map(|l| {
        l.find("[victim] VICTIM: ")
            .map(|i| &l[i + "[victim] VICTIM: ".len()..])
    })?;
    // "window W ms, ran R ms (share S%), ticks T (period P ms, max gap G ms), ..."
    let after = |key: &str| -> Option<u64> {
        let i = line.find(key)? + key.len();
        let digits: String = line[i..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    Some(VictimLine {
        window_ms: after("window ")?,
        share_pct: after("(share ")?,
        ticks: after("ticks ")?,
        period_ms: after("(period ")?,
        max_gap_ms: after("max gap ")?,
    })
}

/// What kestrel must say about the attacker's virtio devices when it ends:
/// the attacker leaves each broken by a different ring.
pub(crate) const VIRTIO_LEFT_BROKEN: [&str; 3] = [
    "virtio-console needs reset (ChainTooLong)",
    "virtio-blk needs reset (BadIndex(200))",
    "virtio-net needs reset (AvailOverrun",
];

/// The virtio phase's console side: the lines the attacker wrote through
/// its virtio console after each reset are all on the console, as many as
/// it says it wrote; kestrel's end-of-VM virtio line names every device
/// the attacker left broken, and the victim has no virtio line.
fn check_hostile_virtio(log: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let written = log
        .lines()
        .find_map(|l| {
            let i = l.find("[attacker] PASS attack-virtio-left-broken ")?;
            let (_, rest) = l[i..].split_once("; ")?;
            rest.split_whitespace().next()?.parse::<usize>().ok()
        })
        .unwrap_or(0);
    let seen = log
        .lines()
        .filter(|l| l.contains("[attacker] VIRTIO-CONSOLE ok after "))
        .count();
    if written == 0 || seen != written {
        problems.push(format!(
            "attacker: {seen} VIRTIO-CONSOLE lines on the console, {written} written through the virtio console"
        ));
    }
    match log
        .lines()
        .find_map(|l| l.split_once("VM \"attacker\" virtio: ").map(|(_, r)| r))
    {
        None => problems.push("kestrel printed no virtio line for the attacker".into()),
        Some(line) => {
            for want in VIRTIO_LEFT_BROKEN {
                if !line.contains(want) {
                    problems.push(format!("attacker's virtio line lacks \"{want}\": {line}"));
                }
            }
        }
    }
    match log
        .lines()
        .find_map(|l| l.split_once("VM \"victim\" virtio: ").map(|(_, r)| r))
    {
        None => problems.push("kestrel printed no virtio line for the victim".into()),
        Some(line) if line.contains("needs reset") => {
            problems.push(format!("the victim's device needs reset: {line}"))
        }
        Some(_) => {}
    }
    problems
}

/// The hostile suite: every phase passed, the virtio phase's answers are
/// on the console, and the victim, sharing one pCPU with the attacker
/// (fair share 50%), got at least 20% of the time, an eighth of its timer
/// interrupts, and never waited a second for one.
/// [`check_hostile`] on a console paced to a slow line: the line was
/// slower than the attacker's floods, which lost their own output (and
/// only theirs: the victim's checks are all on the console), and the
/// drain kept the line busy while output waited
/// ([`vmtest::check_drain_rate`]).
fn check_hostile_slow_console(log: &str) -> Vec<String> {
    let mut problems = check_hostile(log);
    if !log.contains("console paced to a 115200 baud line") {
        problems.push("kestrel did not pace its console (kestrel.baud=115200)".into());
    }
    let dropped = log.lines().find_map(|l| {
        let (_, r) = l.split_once("VM \"attacker\" console: ")?;
        let (_, r) = r.split_once(" bytes of output, ")?;
        r.split_whitespace().next()?.parse::<u64>().ok()
    });
    if dropped.is_none_or(|d| d == 0) {
        problems.push("the attacker lost none of its output to the slow console".into());
    }
    if log.contains("VM \"victim\" console: ") {
        problems.push("the victim lost console output".into());
    }
    problems.extend(vmtest::check_drain_rate(log, 115_200));
    problems
}

fn check_hostile(log: &str) -> Vec<String> {
    let mut problems = check_hostile_virtio(log);
    // Both VMs on pCPU 0 (the others idle): exits measured exactly.
    problems.extend(vmtest::check_exit_budget(log, &["attacker", "victim"]));
    for (vm, name) in HOSTILE_PASS {
        let want = format!("[{vm}] PASS {name} ");
        if !log.contains(&want) {
            problems.push(format!("{vm}: no \"PASS {name}\""));
        }
    }
    problems.extend(check_victim_timer(log));
    problems
}

/// The victim beside an attacker on one pCPU (fair share 50%) got at
/// least 20% of the time, an eighth of its timer interrupts, and never
/// waited a second for one.
fn check_victim_timer(log: &str) -> Vec<String> {
    let mut problems = Vec::new();
    match parse_victim(log) {
        None => problems.push("victim: no VICTIM line".into()),
        Some(v) => {
            if v.share_pct < 20 {
                problems.push(format!(
                    "victim ran {}% of its window sharing one pCPU with the attacker (fair: 50%, at least 20% expected)",
                    v.share_pct
                ));
            }
            let expected = v.window_ms / v.period_ms.max(1);
            if v.ticks * 8 < expected {
                problems.push(format!(
                    "victim took {} timer interrupts in {} ms (period {} ms: at least {} expected)",
                    v.ticks,
                    v.window_ms,
                    v.period_ms,
                    expected / 8
                ));
            }
            if v.max_gap_ms > 1000 {
                problems.push(format!(
                    "victim waited {} ms for a timer interrupt (at most 1000 ms expected)",
                    v.max_gap_ms
                ));
            }
        }
    }
    problems
}

/// The 32-bit attacker's phases (tools/guests/aarch32-test/attack.S).
const AARCH32_HOSTILE_PASS: &[&str] = &["a32-wfx", "a32-calls", "a32-cp-walk", "a32-mmio"];

/// `arm64-aarch32-hostile`: the 32-bit attacker reached its end with every
/// phase passed (its counts printed), the 64-bit victim kept its memory,
/// registers and stolen-time record and its timer ticks came on time
/// ([`check_victim_timer`]), and no exit of either was over budget.
fn check_aarch32_hostile(log: &str) -> Vec<String> {
    let mut problems = vmtest::check_exit_budget(log, &["attacker", "victim"]);
    for name in AARCH32_HOSTILE_PASS {
        if !log.contains(&format!("[attacker] PASS {name} ")) {
            problems.push(format!("attacker: no \"PASS {name}\""));
        }
    }
    let result = format!(
        "[attacker] RESULT: {} passed, 0 failed",
        AARCH32_HOSTILE_PASS.len()
    );
    if !log.contains(&result) {
        problems.push(format!("no \"{result}\""));
    }
    if !log.contains("[attacker] ATTACK32 rounds ") {
        problems.push("the attacker printed no round count".into());
    }
    for p in [
        "victim-memory",
        "victim-registers",
        "victim-heartbeat",
        "victim-steal",
    ] {
        if !log.contains(&format!("[victim] PASS {p} ")) {
            problems.push(format!("victim: no \"PASS {p}\""));
        }
    }
    problems.extend(check_victim_timer(log));
    problems
}

/// The single-VM runs print the IPI benchmark: every line must be there.
/// The refused VM is named with its reason, kestrel's final status is a
/// failure, and what `make run` reads in the output fails it.
fn check_refused(log: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !log
        .lines()
        .any(|l| l.contains("VM refused: vm[1]") && l.contains("memory: 2048 MiB"))
    {
        problems.push("no \"VM refused: vm[1]... memory: 2048 MiB ...\" line".into());
    }
    if !log
        .lines()
        .any(|l| l.contains("VM refused: vm[2]") && l.contains("sve: this CPU has no SVE"))
    {
        problems.push("no \"VM refused: vm[2]... sve: this CPU has no SVE ...\" line".into());
    }
    if !log.contains("2 of 3 VM(s) refused at boot") {
        problems.push("kestrel did not say \"2 of 3 VM(s) refused at boot\"".into());
    }
    if !log.contains("kestrel: work done, powering off (status 1)") {
        problems.push("kestrel's final status is not 1".into());
    }
    let mut watch = crate::qemu::Watch::default();
    watch.feed(log.as_bytes());
    watch.feed(b"\n");
    {
        use std::os::unix::process::ExitStatusExt;
        match watch.verdict(std::process::ExitStatus::from_raw(0)) {
            Err(e) if e.contains("status 1") && e.contains("vm[1]: memory") => {}
            other => problems.push(format!("`make run` would end with {other:?}")),
        }
    }
    problems
}

fn check_bench_lines(log: &str) -> Vec<String> {
    vmtest::missing_ipi_bench_lines(log, ["pv", "sgi"])
}

/// The FP check must really have run across FP switches: kestrel's
/// counters, as the guests print them, show at least 1000 lazy restores.
fn check_fp_switches(log: &str) -> Vec<String> {
    let restores: u64 = log
        .lines()
        .filter(|l| l.contains("BENCH counters"))
        .filter_map(|l| l.split("fp_restores=").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    let mut problems = Vec::new();
    if restores < 1000 {
        problems.push(format!(
            "only {restores} FP restores counted by kestrel: too few switches to prove anything"
        ));
    }
    // SVE at two lengths beside a VM without it (configs/test/arm64-fp-shared.toml).
    let sve = format!("PASS {} sve-switches (", number("sve-switches"));
    for (vm, want) in [
        ("fp-a", "512-bit vectors"),
        ("fp-b", "256-bit vectors"),
        ("fp-c", "SVE hidden"),
    ] {
        let tag = format!("[{vm}] {sve}");
        let Some(line) = log
            .lines()
            .find_map(|l| l.find(&tag).map(|i| &l[i + tag.len()..]))
        else {
            problems.push(format!("{vm}: no sve-switches PASS line"));
            continue;
        };
        if !line.starts_with(want) {
            problems.push(format!("{vm}: sve-switches: wanted {want}: {line}"));
        }
        if vm != "fp-c" {
            let saves = line
                .split(" SVE saves")
                .next()
                .and_then(|s| s.rsplit(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            if saves.is_none_or(|n| n == 0) {
                problems.push(format!(
                    "{vm}: sve-switches: no SVE-sized save counted, so no switch with live SVE state was proven: {line}"
                ));
            }
        }
    }
    problems
}

/// Judges a kestrel run from each VM's tagged lines and kestrel's ending.
pub(crate) fn judge_vm(case: &VmCase, log: &str, timed_out: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if timed_out {
        problems.push(format!("no ending within {} s", case.timeout.as_secs()));
    }
    for vm in &case.vms {
        let tag = format!("[{vm}] ");
        let lines: Vec<&str> = log
            .lines()
            .filter_map(|l| l.find(&tag).map(|i| &l[i + tag.len()..]))
            .collect();
        match lines.iter().find(|l| l.starts_with("RESULT: ")) {
            None => problems.push(format!("{vm}: no RESULT line")),
            Some(r) if !r.ends_with(" passed, 0 failed") => problems.push(format!("{vm}: {r}")),
            Some(_) => {}
        }
        for l in lines.iter().filter(|l| l.starts_with("FAIL ")) {
            problems.push(format!("{vm}: {l}"));
        }
        for c in case.must_pass {
            let want = format!("PASS {} {c}", number(c));
            if !lines.iter().any(|l| {
                l.strip_prefix(&want)
                    .is_some_and(|r| r.is_empty() || r.starts_with(' '))
            }) {
                problems.push(format!("{vm}: no \"{want}\""));
            }
        }
    }
    if !log.contains("all VMs have ended (status 0)") {
        problems.push("kestrel did not say \"all VMs have ended (status 0)\"".into());
    }
    for bad in ["panic", "FATAL"] {
        if log.contains(bad) {
            problems.push(format!("the log contains {bad:?}"));
        }
    }
    if let Some(check) = case.check {
        problems.extend(check(log));
    }
    problems
}

/// The AArch32 test guest's checks (tools/guests/aarch32-test/guest.S), in
/// the order it prints them.
pub(crate) const AARCH32_CHECKS: &[&str] = &[
    "boot-registers",
    "id-pfr1",
    "vmrs-mvfr0",
    "psci-version",
    "fp-lazy",
    "fpexc-en-0",
    "undef-impdef",
    "cond-fail",
    "thumb",
    "abort-outside-memory",
    "phys-timer",
    "cpu-on",
    "pv-ipi",
    "hostile-calls",
    "mmio-banked",
    "cp14-debug",
    "cpu-on-thumb",
    "cp14-breakpoint",
];

/// `arm64-aarch32`: the AArch32 VM passed every check, the PV IPI
/// included (kestrel answers HVC32), and the arm64 VM beside it every one
/// of its own.
fn check_aarch32(log: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, c) in AARCH32_CHECKS.iter().enumerate() {
        let want = format!("[a32] PASS {} {c}", i + 1);
        if !log
            .lines()
            .any(|l| l.ends_with(&want) || l.contains(&format!("{want} ")))
        {
            problems.push(format!("no \"{want}\""));
        }
    }
    // Stores from the banked LR of irq, abt, und and fiq mode.
    if !log.contains("[a32] banked: IAUF") {
        problems.push("no \"[a32] banked: IAUF\"".into());
    }
    let result = format!("[a32] RESULT: {} passed, 0 failed", AARCH32_CHECKS.len());
    if !log.contains(&result) {
        problems.push(format!("no \"{result}\""));
    }
    for c in ALL {
        let want = format!("[t64] PASS {} {c}", number(c));
        if !log.contains(&want) {
            problems.push(format!("no \"{want}\""));
        }
    }
    problems
}

/// `arm64-aarch32-refused`: kestrel refused the AArch32 VM, saying why,
/// and ended with status 1 (the arm64 VM's checks are `judge_vm`'s).
fn check_aarch32_refused(log: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let why = "VM refused: vm[0] \"a32\": arch: an AArch32 VM needs a CPU that runs AArch32 at EL1";
    if !log.contains(why) {
        problems.push(format!("no \"{why}\" line"));
    }
    for want in [
        "1 of 2 VM(s) refused at boot",
        "kestrel: work done, powering off (status 1)",
    ] {
        if !log.contains(want) {
            problems.push(format!("no \"{want}\""));
        }
    }
    if log.contains("[a32] ") {
        problems.push("the refused VM printed".into());
    }
    problems
}

/// Whether `cargo xtask vmtest ARGS` is for this module (`--arch aarch64`).
pub fn selected(args: &[String]) -> bool {
    args.windows(2)
        .any(|w| w[0] == "--arch" && Arch::parse(&w[1]) == Ok(Arch::Aarch64))
}

/// `cargo xtask vmtest --arch aarch64 [--case NAME] [--list]`.
pub static VM_SUITE: VmSuite = VmSuite {
    arch: Arch::Aarch64,
    suite: Suite {
        command: "vmtest",
        summary_prefix: "vmtest: ",
        what: "arm64 VM test(s)",
        prepare: Some(|| build_guest_arm64().map(|_| ())),
    },
    echo: &[
        "BENCH ",
        "RESULT: ",
        "SHARE ",
        "fp-simd-switches",
        "sve-switches",
    ],
    cases: vm_cases,
    judge: judge_vm,
    stop_at_results: false,
    save_log: true,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_reads_tagged_results() {
        let case = VmCase {
            name: "t",
            config: "",
            features: &[],
            gic: 3,
            mem_mib: 1024,
            vms: vec!["a".into(), "b".into()],
            must_pass: &["timer"],
            check: None,
            timeout: Duration::from_secs(1),
            qemu_args: &[],
            stop_after: None,
            lvz: false,
            append: "",
            smp: 4,
        };
        let good = "[a] PASS 6 timer (x)\n[a] RESULT: 12 passed, 0 failed\n\
                    [b] PASS 6 timer\n[b] RESULT: 12 passed, 0 failed\n\
                    [cpu0] INFO  kestrel: all VMs have ended (status 0)\n";
        assert!(judge_vm(&case, good, false).is_empty());
        let bad = good.replace(
            "[b] RESULT: 12 passed, 0 failed",
            "[b] RESULT: 11 passed, 1 failed",
        );
        assert_eq!(judge_vm(&case, &bad, false).len(), 1);
        let missing = good.replace("[b] PASS 6 timer\n", "");
        assert_eq!(judge_vm(&case, &missing, false).len(), 1);
        assert!(!judge_vm(&case, good, true).is_empty());
    }

    #[test]
    fn bare_skips_only_kestrel_checks() {
        assert!(check_bare("SKIP 1 hypercall-discovery (not running on kestrel)").is_empty());
        assert_eq!(
            check_bare("SKIP 7 sgi-target-list (needs 2 or more vCPUs)").len(),
            1
        );
    }

    #[test]
    fn aarch32_hostile_judge() {
        let mut log = String::from(
            "[victim] VICTIM: window 2000 ms, ran 998 ms (share 49%), ticks 100 (period 10 ms, max gap 30 ms), memory ok, registers ok\n",
        );
        for p in [
            "victim-memory",
            "victim-registers",
            "victim-steal",
            "victim-heartbeat",
        ] {
            log.push_str(&format!("[victim] PASS {p} (x) at 2082 ms\n"));
        }
        for name in AARCH32_HOSTILE_PASS {
            log.push_str(&format!("[attacker] PASS {name} 12 things\n"));
        }
        log.push_str("[attacker] ATTACK32 rounds 3851\n[attacker] RESULT: 4 passed, 0 failed\n");
        log.push_str(WORST_LINES);
        assert!(
            check_aarch32_hostile(&log).is_empty(),
            "{:?}",
            check_aarch32_hostile(&log)
        );
        // A phase that failed: its PASS and the clean RESULT are missing.
        let failed = log
            .replace("PASS a32-mmio", "FAIL a32-mmio")
            .replace("4 passed, 0 failed", "3 passed, 1 failed");
        assert_eq!(check_aarch32_hostile(&failed).len(), 2);
        // A starved victim, an exit over budget.
        let starved = log.replace("ticks 100 ", "ticks 20 ");
        assert_eq!(check_aarch32_hostile(&starved).len(), 1);
        let long = log.replace("394037 ns", "1394037 ns");
        assert_eq!(check_aarch32_hostile(&long).len(), 1);
    }

    #[test]
    fn hostile_judge_reads_the_victim_line() {
        let line = "[cpu0] x\n[victim] VICTIM: window 8000 ms, ran 3900 ms (share 48%), ticks 390 (period 10 ms, max gap 31 ms), memory ok, registers ok\n";
        assert_eq!(
            parse_victim(line),
            Some(VictimLine {
                window_ms: 8000,
                share_pct: 48,
                ticks: 390,
                period_ms: 10,
                max_gap_ms: 31
            })
        );
        let mut log = String::from(line);
        for (vm, name) in HOSTILE_PASS {
            let detail = if *name == "attack-virtio-left-broken" {
                "(each device left broken; 2 VIRTIO-CONSOLE lines written) at 9 ms"
            } else {
                "(x)"
            };
            log.push_str(&format!("[{vm}] PASS {name} {detail}\n"));
        }
        log.push_str("[attacker] VIRTIO-CONSOLE ok after setup (0)\n");
        log.push_str("[attacker] VIRTIO-CONSOLE ok after NEXT to itself (4)\n");
        log.push_str(
            "[cpu0] INFO  kestrel: VM \"attacker\" virtio: console: 80 bytes out; \
             disk0: 9 reads (4 KiB), 1 writes (0 KiB), 7 errors; net0: 3 frames out, 0 in, 0 dropped; \
             virtio-console needs reset (ChainTooLong); virtio-blk needs reset (BadIndex(200)); \
             virtio-net needs reset (AvailOverrun { avail: 100, last: 0 })\n",
        );
        log.push_str("[cpu0] INFO  kestrel: VM \"victim\" virtio: net0: 1024 frames out, 0 in\n");
        log.push_str(WORST_LINES);
        assert!(check_hostile(&log).is_empty(), "{:?}", check_hostile(&log));
        let long = log.replace("394037 ns", "1394037 ns");
        assert_eq!(check_hostile(&long).len(), 1);
        // On the slow console: paced, the attacker's flood lost, the
        // victim's output whole, the drain at the line's pace.
        assert_eq!(check_hostile_slow_console(&log).len(), 3);
        let slow = log.clone()
            + "[cpu0] INFO  console paced to a 115200 baud line (11520 bytes/s)\n"
            + "[cpu0] INFO  VM \"attacker\" console: 83690 bytes of output, 62063 of them dropped (the console was slower)\n"
            + "[cpu0] INFO  console drain: 51000 bytes in 4500000 us with output waiting: 11333 bytes/s\n";
        assert!(check_hostile_slow_console(&slow).is_empty());
        // A drain that only comes at the tick: a third of the line's pace.
        let ticked = slow.replace("11333 bytes/s", "3200 bytes/s");
        assert_eq!(check_hostile_slow_console(&ticked).len(), 1);
        let short = slow.replace("4500000 us", "4500 us");
        assert_eq!(check_hostile_slow_console(&short).len(), 1);
        let none = slow.replace("console drain: ", "console: ");
        assert_eq!(check_hostile_slow_console(&none).len(), 1);
        let victim_lost = slow.clone()
            + "[cpu0] INFO  VM \"victim\" console: 900 bytes of output, 12 of them dropped (the console was slower)\n";
        assert_eq!(check_hostile_slow_console(&victim_lost).len(), 1);
        let starved = log
            .replace("share 48%", "share 3%")
            .replace("ticks 390", "ticks 20");
        assert_eq!(check_hostile(&starved).len(), 2);
        let missing = log.replace("PASS attack-mmio", "FAIL attack-mmio");
        assert_eq!(check_hostile(&missing).len(), 1);
        let lost_line = log.replace("ok after setup", "ok aft");
        assert_eq!(check_hostile(&lost_line).len(), 1);
        let not_broken = log.replace("virtio-blk needs reset (BadIndex(200)); ", "");
        assert_eq!(check_hostile(&not_broken).len(), 1);
        let victim = log.replace(
            "1024 frames out, 0 in",
            "0 frames out; virtio-net needs reset (BadIndex(9))",
        );
        assert_eq!(check_hostile(&victim).len(), 1);
        let no_victim_line = log.replace("VM \"victim\" virtio", "VM \"victim\" x");
        assert_eq!(check_hostile(&no_victim_line).len(), 1);
        let slow_send = log.replace(
            "PASS victim-send-hostile-receiver",
            "FAIL victim-send-hostile-receiver",
        );
        assert_eq!(check_hostile(&slow_send).len(), 1);
        let slow_tx = log.replace("PASS attack-cold-tx", "FAIL attack-cold-tx");
        assert_eq!(check_hostile(&slow_tx).len(), 1);
    }

    #[test]
    fn resetrace_judges_restarts_and_the_victims_timer() {
        let mut log = String::from(
            "[cpu0] INFO  guest memory: 100 bytes free after creating the VMs\n\
             [victim] VICTIM: window 2000 ms, ran 900 ms (share 45%), ticks 199 (period 10 ms, max gap 21 ms), memory ok, registers ok\n\
             [victim] PASS victim-memory (x)\n[victim] PASS victim-registers (x)\n\
             [victim] PASS victim-heartbeat (x)\n[attacker] PASS 1 resetrace: done\n",
        );
        for n in 1..=RESETRACE_MIN_RESTARTS {
            log.push_str(&format!(
                "[cpu1] INFO  VM \"attacker\" restarted ({n}): heap 5000 bytes used, guest memory 100 bytes free\n"
            ));
        }
        assert!(
            check_resetrace(&log).is_empty(),
            "{:?}",
            check_resetrace(&log)
        );
        let stalled = log.replace("max gap 21 ms", "max gap 412 ms");
        assert_eq!(check_resetrace(&stalled).len(), 1);
        let starved = log.replace("ticks 199", "ticks 120");
        assert_eq!(check_resetrace(&starved).len(), 1);
        let few = log.replace(
            &format!("restarted ({})", RESETRACE_MIN_RESTARTS),
            "restarted (x)",
        );
        assert!(!check_resetrace(&few).is_empty());
        assert_eq!(
            check_resetrace(&log.replace("PASS 1 resetrace", "FAIL 1 resetrace")).len(),
            1
        );
        // The big-image storm: the victim shares its pCPU, so half its
        // ticks do; a gap of a whole image copy does not.
        let shared = log.replace("ticks 199", "ticks 105") + WORST_LINES;
        assert!(check_bigreset(&shared).is_empty());
        // One pCPU: each restart step is held to the exit budget.
        let slow_step = shared.replace("step 370481 ns", "step 1500000 ns");
        assert_eq!(check_bigreset(&slow_step).len(), 1);
        assert_eq!(check_resetrace(&shared).len(), 1);
        let copied = shared.replace("max gap 21 ms", "max gap 60 ms");
        assert_eq!(check_bigreset(&copied).len(), 1);
    }

    /// kestrel's per-VM worst exit and restart step, as logged at each end.
    const WORST_LINES: &str = "[cpu0] INFO  VM \"victim\" worst exit 327950 ns (EC 0x24), worst restart step 0 ns\n\
        [cpu0] INFO  VM \"attacker\" worst exit 394037 ns (devices), worst restart step 370481 ns\n";

    #[test]
    fn fp_switch_counter() {
        let line = |n| format!("[a] BENCH counters vmid_fast=1 fp_restores={n} fp_traps=1\n");
        let sve = "[fp-a] PASS 18 sve-switches (512-bit vectors, 300x4 rounds: ...; kestrel: 90 SVE traps, 12 SVE saves, 40 SVE restores of 300/310 FP; FP only: 3 SVE of 90 FP saves)\n\
                   [fp-b] PASS 18 sve-switches (256-bit vectors, 300x3 rounds: ...; kestrel: 80 SVE traps, 7 SVE saves, 30 SVE restores of 200/210 FP; FP only: 0 SVE of 80 FP saves)\n\
                   [fp-c] PASS 18 sve-switches (SVE hidden (PFR0.SVE 0, ZFR0 0): rdvl is UNDEF (EC 0x0))\n";
        assert!(check_fp_switches(&(line(600) + &line(500) + sve)).is_empty());
        assert_eq!(check_fp_switches(&(line(10) + sve)).len(), 1);
        let many = line(600) + &line(500);
        assert_eq!(check_fp_switches(&many).len(), 3, "no SVE lines");
        let no_saves = sve.replace(" 7 SVE saves", " 0 SVE saves");
        assert_eq!(check_fp_switches(&(many.clone() + &no_saves)).len(), 1);
        let wrong_vl = sve.replace("(256-bit", "(128-bit");
        assert_eq!(check_fp_switches(&(many + &wrong_vl)).len(), 1);
    }

    #[test]
    fn arch_selection() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(selected(&args(&["--arch", "aarch64", "--case", "x"])));
        assert!(selected(&args(&["--arch", "arm64"])));
        assert!(!selected(&args(&["--arch", "loongarch64"])));
        assert!(!selected(&args(&[])));
    }
}
