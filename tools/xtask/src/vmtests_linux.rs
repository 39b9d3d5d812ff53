//! Linux guests: the bare-QEMU smoke cases that validate the guest assets
//! and the init test, and the cases of Linux VMs under kestrel, with their
//! boots and judges (which `cargo xtask bench-linux` and `bench-net`,
//! bench_linux.rs, share). docs/linux-guests.md.
//!
//! The smoke cases boot Debian's kernel with the test initramfs directly on
//! QEMU (no kestrel): they prove the kernel, the initramfs and the test
//! script, so that a failure of the same kernel under kestrel is kestrel's.
//! They run in `make test` when the assets are cached or can be fetched in
//! [`FETCH_LIMIT`]; otherwise they are skipped with the reason (never failed
//! for a missing network). The virtio cases boot the same kernel with QEMU's
//! virtio-mmio disk, console and network devices and the guest options
//! `kestrel.root=`, `kestrel.console=` and `kestrel.ip=`: the guest side of
//! kestrel's virtio devices, proven without kestrel.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::Duration;

use crate::assets::{self, FETCH_LIMIT};
use crate::qemu::{bare_command, BareConsole, Boot, Runner};
use crate::suite::{Selection, Suite, Test, Verdict};
use crate::{qemu, Arch, Opts};

/// How long one bare Linux boot may take (about 5 s here).
pub const BOOT_LIMIT: Duration = Duration::from_secs(120);
/// The first line of the init script.
pub const INIT_LINE: &str = "LINUX-INIT: started";
/// The line a passing test prints (with `kestrel.test_cpus=4`).
pub const PASS_4: &str = "LINUX-TEST: PASS cpus=4 fp=ok";
/// The line a passing test prints with `kestrel.test_cpus=2` (virtio cases).
pub const PASS_2: &str = "LINUX-TEST: PASS cpus=2 fp=ok";

/// A bare-QEMU Linux smoke case.
struct BareCase {
    name: &'static str,
    machine: &'static str,
}

const BARE_CASES: [BareCase; 3] = [
    BareCase {
        name: "linux bare QEMU GICv3 virtualization=on (assets + init test)",
        machine: "virt,virtualization=on,gic-version=3",
    },
    BareCase {
        name: "linux bare QEMU GICv3 at EL1 (assets + init test)",
        machine: "virt,gic-version=3",
    },
    BareCase {
        name: "linux bare QEMU GICv2 virtualization=on (assets + init test)",
        machine: "virt,virtualization=on,gic-version=2",
    },
];

/// A bare-QEMU Linux case with virtio-mmio devices (`-smp 2`).
struct VirtioCase {
    name: &'static str,
    /// The root disk is `readonly=on` (else `snapshot=on`: writes dropped).
    read_only: bool,
    /// A virtio console (`virtconsole` on a file) and `kestrel.console=hvc0`.
    console: bool,
    /// A virtio-net device (QEMU user network) and `kestrel.ip=`.
    net: bool,
}

const VIRTIO_CASES: [VirtioCase; 2] = [
    VirtioCase {
        name: "linux bare QEMU virtio: root on /dev/vda, console on hvc0, eth0 up (init test)",
        read_only: false,
        console: true,
        net: true,
    },
    VirtioCase {
        name: "linux bare QEMU virtio: read-only root on /dev/vda (init test)",
        read_only: true,
        console: false,
        net: false,
    },
];

/// The address the virtio case gives eth0.
const VIRTIO_IP: &str = "10.0.0.2/24";

/// The line `/init` prints after loading every virtio module.
fn modules_line() -> String {
    let names: Vec<&str> = assets::VIRTIO_MODULES
        .iter()
        .map(|m| assets::module_name(m))
        .collect();
    format!("LINUX-INIT: modules loaded: {}", names.join(" "))
}

/// The serial lines a virtio case must show, in this order.
fn virtio_expected(case: &VirtioCase) -> Vec<String> {
    let mut want = vec![INIT_LINE.to_string(), modules_line()];
    let mode = if case.read_only {
        "read-only"
    } else {
        "read-write"
    };
    want.push(format!(
        "LINUX-INIT: root mounted from /dev/vda (ext4, {mode}): switch_root"
    ));
    want.push("LINUX-INIT: started on root /dev/vda".into());
    if case.net {
        want.push(format!("LINUX-INIT: eth0 up {VIRTIO_IP}"));
    }
    if case.console {
        want.push("LINUX-INIT: console on hvc0".into());
    }
    want
}

/// Problems with one virtio boot: the serial log (`boot`) has the expected
/// steps in order; the test passed on hvc0 (`hvc0`: what the virtio
/// console received) and not on the serial port, or on the serial port
/// when there is no virtio console.
fn judge_virtio(case: &VirtioCase, boot: &Boot, hvc0: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if boot.timed_out {
        problems.push("no power-off within the time limit".to_string());
    }
    let mut from = 0;
    for want in virtio_expected(case) {
        match boot.lines[from..]
            .iter()
            .position(|l| l.text.contains(&want))
        {
            Some(i) => from += i + 1,
            None if boot.has(&want) => problems.push(format!("{want:?} out of order")),
            None => problems.push(format!("serial log lacks {want:?}")),
        }
    }
    let passed_on = |text: &str| text.lines().any(|l| l.contains(PASS_2));
    let fail_line = |text: &str| {
        text.lines()
            .find(|l| l.contains("LINUX-TEST: FAIL"))
            .map(str::to_string)
    };
    if case.console {
        if !hvc0
            .lines()
            .any(|l| l.contains("LINUX-INIT: console on hvc0"))
        {
            problems.push("hvc0 lacks \"LINUX-INIT: console on hvc0\"".into());
        }
        if !passed_on(hvc0) {
            problems.push(match fail_line(hvc0) {
                Some(l) => format!("the test failed on hvc0: {l}"),
                None => format!("hvc0 lacks {PASS_2:?}"),
            });
        }
        if boot.has("LINUX-TEST:") {
            problems.push("the test printed on the serial port, not on hvc0".into());
        }
    } else if !passed_on(&boot.text()) {
        problems.push(match fail_line(&boot.text()) {
            Some(l) => format!("the test failed: {l}"),
            None => format!("serial log lacks {PASS_2:?}"),
        });
    }
    for bad in ["Kernel panic", "Internal error:", "Unable to handle kernel"] {
        if boot.has(bad) {
            problems.push(format!("serial log contains {bad:?}"));
        }
    }
    if let Some(s) = boot.exit.filter(|s| !s.success()) {
        problems.push(format!("QEMU exited with {s}"));
    }
    problems
}

/// Problems with one test boot (empty = pass).
pub fn judge_linux(boot: &Boot, pass_line: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if boot.timed_out {
        problems.push("no power-off within the time limit".to_string());
    }
    let has = |s: &str| boot.has(s);
    if !has(INIT_LINE) {
        problems.push(format!(
            "the init script never started ({INIT_LINE:?} missing)"
        ));
    }
    if !has(pass_line) {
        match boot
            .lines
            .iter()
            .find(|l| l.text.contains("LINUX-TEST: FAIL"))
        {
            Some(l) => problems.push(format!("the test failed: {}", l.text)),
            None => problems.push(format!("serial log lacks {pass_line:?}")),
        }
    }
    for bad in ["Kernel panic", "Internal error:", "Unable to handle kernel"] {
        if has(bad) {
            problems.push(format!("serial log contains {bad:?}"));
        }
    }
    match boot.exit {
        Some(s) if !s.success() => problems.push(format!("QEMU exited with {s}")),
        _ => {}
    }
    problems
}

/// One boot of Debian's kernel as VMs under kestrel.
pub struct KestrelCase {
    pub name: &'static str,
    /// Relative to the workspace root.
    pub config: &'static str,
    gic: u32,
    /// The VMs' names: each must print its own PASS line, tagged by kestrel.
    vms: &'static [&'static str],
    /// The PASS line each VM must print.
    pass: &'static str,
    /// The virtio case: root on /dev/vda, test on hvc0, network test.
    virtio: bool,
    /// Reboots the first VM does before its test (`kestrel.reboots=N`),
    /// counting them on its /dev/vda.
    reboots: u32,
    /// Each VM also runs the seeds' workloads after its test
    /// (`kestrel.bench=`, short): each prints its result and kestrel's
    /// counters for FP, IPI and VMID moved ([`judge_seeds`]).
    seeds: bool,
    /// Each VM's kernel uses kestrel's stolen time (arm64 PV time) and its
    /// `/proc/stat` steal grew while the VMs shared pCPUs ([`judge_steal`]).
    steal: bool,
    /// Each VM's kernel finds SVE with vectors of this many bytes (its
    /// config's `sve_max_vl`); 0: not checked.
    sve_bytes: u32,
    /// The Juno mix ([`judge_mix`]): the case writes each VM's raw disk
    /// image (`assets::armhf::write_mix_disks`) first, and each VM runs the FP sleeper, its
    /// raw disk test and (the 32-bit ones) pings and fetches from its
    /// 64-bit peer.
    mix: bool,
}

pub const KESTREL_CASES: [KestrelCase; 7] = [
    KestrelCase {
        name: "linux on kestrel: 1 VM x 4 vCPUs, GICv3",
        config: "configs/linux-1vm.toml",
        gic: 3,
        vms: &["linux0"],
        pass: PASS_4,
        virtio: false,
        reboots: 0,
        seeds: false,
        steal: false,
        sve_bytes: 64,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel: 2 VMs x 4 vCPUs sharing 4 pCPUs, the seeds' workloads (short), stolen time, GICv3",
        config: "configs/linux-2vm.toml",
        gic: 3,
        vms: &["linux0", "linux1"],
        pass: PASS_4,
        virtio: false,
        reboots: 0,
        seeds: true,
        steal: true,
        sve_bytes: 0,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel: 1 VM x 4 vCPUs, GICv2",
        config: "configs/linux-1vm.toml",
        gic: 2,
        vms: &["linux0"],
        pass: PASS_4,
        virtio: false,
        reboots: 0,
        seeds: false,
        steal: false,
        sve_bytes: 64,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel virtio: 2 VMs, root on virtio-blk, test on hvc0, ping + 4 MiB over TCP",
        config: "configs/linux-virtio.toml",
        gic: 3,
        vms: &["vm0", "vm1"],
        pass: PASS_2,
        virtio: true,
        reboots: 0,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel reboot: root on virtio-blk, reboot -f once, the second boot finds its count on the disk, GICv2",
        config: "configs/linux-reboot.toml",
        gic: 2,
        vms: &["rb0"],
        pass: PASS_2,
        virtio: false,
        reboots: 1,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel aarch32: a 32-bit Linux VM (Debian armhf zImage, 2 vCPUs, AArch32 EL1) beside a 64-bit one (2 vCPUs) on the other 2 pCPUs, FP check in both, GICv3",
        config: "configs/linux-aarch32.toml",
        gic: 3,
        vms: &["a32", "a64"],
        pass: PASS_2,
        virtio: false,
        reboots: 0,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel juno mix: 2 32-bit + 2 64-bit VMs x 2 vCPUs sharing 4 pCPUs (one 32-bit vCPU per pCPU), FP sleeper, raw virtio disks, the 32-bit ones ping and fetch from a 64-bit one on lan, GICv3",
        config: MIX_CONFIG,
        gic: 3,
        vms: &assets::armhf::MIX_VMS,
        pass: PASS_2,
        virtio: false,
        reboots: 0,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: true,
    },
];

/// Kestrel Linux cases that `make test` leaves out: `cargo xtask smoke
/// --case NAME` runs them when NAME selects them. None today: the 32-bit
/// Linux case, once here for a hang seen in one run of twelve, passed 149
/// runs since, and the Juno mix its first 10 (docs/arm64-vm.md, "AArch32
/// guests").
pub const ON_DEMAND_CASES: [KestrelCase; 0] = [];

/// The Juno mix's config.
const MIX_CONFIG: &str = "configs/linux-juno-mix.toml";
/// The FP sleeper's rounds in the mix's command lines (`kestrel.fpsleep=`).
const MIX_ROUNDS: u32 = 10;
/// Who fetches from whom (32-bit fetcher, 64-bit server): their command
/// lines' `kestrel.net=` and `kestrel.ip=`.
const MIX_PAIRS: [(&str, &str, &str); 2] =
    [("a32a", "a64a", "10.0.0.3"), ("a32b", "a64b", "10.0.0.4")];

/// The Juno mix's own checks, from what each VM printed (tagged by
/// kestrel) and kestrel's per-VM counters: a 32-bit VM is AArch32; the FP
/// sleeper passed on both CPUs with every round's answer right; the raw
/// disk showed its label and read back what was written (kestrel's disk
/// counters moved both ways); eth0 up; each 32-bit VM's 3 pings to its
/// 64-bit peer answered and the MiB it fetched has the MD5 the peer served.
fn judge_mix(boot: &Boot, vms: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let line_of = |prefix: &str| boot.lines.iter().find(|l| l.text.contains(prefix));
    for vm in vms {
        let tagged = |s: &str| format!("[{vm}] {s}");
        if vm.starts_with("a32")
            && line_of(&format!(
                "\"{vm}\": 2 vCPUs, 192 MiB, linux (32-bit ARM zImage, AArch32)"
            ))
            .is_none()
        {
            problems.push(format!("{vm}: kestrel did not make it an AArch32 VM"));
        }
        let sleeper = tagged(&format!(
            "LINUX-FPSLEEP: PASS cpus=2 rounds={MIX_ROUNDS} wrong=0"
        ));
        if line_of(&sleeper).is_none() {
            let failed = boot.lines.iter().find(|l| {
                l.text.contains(&tagged("LINUX-FPSLEEP: "))
                    && ["WRONG", "FAIL", "no known answer"]
                        .iter()
                        .any(|w| l.text.contains(w))
            });
            match failed {
                Some(l) => problems.push(format!("{vm}: the FP sleeper failed: {}", l.text)),
                None => problems.push(format!("serial log lacks {sleeper:?}")),
            }
        }
        let disk = tagged("LINUX-DISK: ");
        match line_of(&disk) {
            None => problems.push(format!("serial log lacks {disk:?}")),
            Some(l) => {
                let want = format!(
                    "/dev/vda label '{}', wrote 64 KiB",
                    assets::armhf::mix_label(vm)
                );
                let md5s: Vec<&str> = l
                    .text
                    .split(" md5 ")
                    .skip(1)
                    .filter_map(|t| t.split([' ', ',']).next())
                    .collect();
                if !l.text.contains(&want) {
                    problems.push(format!("{vm}: the disk's label is not its own: {}", l.text));
                }
                if md5s.len() != 2 || md5s[0] != md5s[1] || md5s[0].len() != 32 {
                    problems.push(format!(
                        "{vm}: the disk did not read back what was written: {}",
                        l.text
                    ));
                }
            }
        }
        let eth = tagged("LINUX-INIT: eth0 up 10.0.0.");
        if line_of(&eth).is_none() {
            problems.push(format!("serial log lacks {eth:?}"));
        }
        let counters = format!("VM \"{vm}\" virtio: ");
        match line_of(&counters) {
            None => problems.push(format!("kestrel printed no virtio counters for {vm}")),
            Some(l) => {
                if l.text.contains("disk0: 0 reads")
                    || l.text.contains(", 0 writes")
                    || l.text.contains("net0: 0 frames out")
                    || l.text.contains("needs reset")
                {
                    problems.push(format!(
                        "{vm}: a virtio device was not used both ways: {}",
                        l.text
                    ));
                }
            }
        }
    }
    let md5 = |vm: &str, what: &str| {
        line_of(&format!("[{vm}] LINUX-NET: {what} 1 MiB md5 ")).and_then(|l| {
            let t = &l.text[l.text.find(" md5 ")? + 5..];
            Some(t.split(' ').next()?.to_string())
        })
    };
    for (fetcher, server, ip) in MIX_PAIRS {
        let ping = format!("[{fetcher}] LINUX-NET: ping {ip}: ");
        match line_of(&ping) {
            Some(l) if l.text.contains(" 3 packets received") => {}
            Some(l) => problems.push(format!("{fetcher}: pings to {server} lost: {}", l.text)),
            None => problems.push(format!("serial log lacks {ping:?}")),
        }
        match (md5(server, "serving"), md5(fetcher, "fetched")) {
            (Some(a), Some(b)) if a == b && a.len() == 32 => {}
            (a, b) => problems.push(format!(
                "{fetcher} fetched from {server}: MD5 served {a:?}, fetched {b:?}"
            )),
        }
    }
    if let Some(l) = boot
        .lines
        .iter()
        .find(|l| l.text.contains("LINUX-NET: FAIL") || l.text.contains("LINUX-DISK: FAIL"))
    {
        problems.push(format!("a guest test failed: {}", l.text));
    }
    problems
}

/// How long one kestrel Linux boot may take before it counts as hung (up
/// to four VMs share the pCPUs; the Juno mix took up to 146 s beside other
/// QEMU runs on 2 host cores, and a host with four busy loops beside it
/// runs QEMU at under half that pace). A hang only, not a judge of speed.
const KESTREL_BOOT_LIMIT: Duration = Duration::from_secs(600);

/// Problems with one kestrel Linux boot: every VM's tagged PASS line, every
/// VM ended, kestrel's own clean power-off; for the virtio case also what
/// [`judge_virtio_vms`] checks.
pub fn judge_kestrel(boot: &Boot, case: &KestrelCase) -> Vec<String> {
    let mut problems = Vec::new();
    if boot.timed_out {
        problems.push("no power-off within the time limit".to_string());
    }
    if case.virtio {
        problems.extend(judge_virtio_vms(boot, case.vms));
    }
    if case.reboots > 0 {
        problems.extend(judge_reboots(boot, &case.vms[..1], case.reboots));
    }
    if case.seeds {
        problems.extend(judge_seeds(boot, case.vms));
    }
    if case.steal {
        problems.extend(judge_steal(boot, case.vms));
    }
    if case.mix {
        problems.extend(judge_mix(boot, case.vms));
    }
    let has = |s: &str| boot.has(s);
    if case.sve_bytes > 0 {
        for vm in case.vms {
            let want = format!(
                "SVE: maximum available vector length {} bytes per vector",
                case.sve_bytes
            );
            if !boot
                .lines
                .iter()
                .any(|l| l.text.contains(&format!("[{vm}] ")) && l.text.contains(&want))
            {
                problems.push(format!(
                    "{vm}: its kernel did not say {want:?} (sve = true in its config)"
                ));
            }
        }
    }
    for vm in case.vms {
        let pass = format!("[{vm}] {}", case.pass);
        if !has(&pass) {
            let fail = format!("[{vm}] LINUX-TEST: FAIL");
            match boot.lines.iter().find(|l| l.text.contains(&fail)) {
                Some(l) => problems.push(format!("{vm}: the test failed: {}", l.text)),
                None => problems.push(format!("serial log lacks {pass:?}")),
            }
        }
    }
    for must in [
        "kestrel: all VMs have ended (status 0)",
        "kestrel: work done, powering off (status 0)",
    ] {
        if !has(must) {
            problems.push(format!("serial log lacks {must:?}"));
        }
    }
    for bad in [
        "Kernel panic",
        "Internal error:",
        "Unable to handle kernel",
        "FATAL",
    ] {
        if has(bad) {
            problems.push(format!("serial log contains {bad:?}"));
        }
    }
    if let Some(s) = boot.exit.filter(|s| !s.success()) {
        problems.push(format!("QEMU exited with {s}"));
    }
    problems
}

/// Stolen time in each VM: its kernel found kestrel's PV time (Linux's
/// `arm-pv: using stolen time PV`) and the steal column of its
/// `/proc/stat`, which `/init` prints at its start and end
/// (`LINUX-STEAL: /proc/stat steal A -> B`), grew: its vCPUs waited for
/// pCPUs the other VM's vCPUs held.
fn judge_steal(boot: &Boot, vms: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for vm in vms {
        // Kernel lines carry its timestamp between the tag and the text.
        let (tagged, using) = (format!("[{vm}] "), "arm-pv: using stolen time PV");
        if !boot
            .lines
            .iter()
            .any(|l| l.text.contains(&tagged) && l.text.contains(using))
        {
            problems.push(format!(
                "{vm}: its kernel did not take stolen time ({using:?})"
            ));
        }
        let tag = format!("[{vm}] LINUX-STEAL: /proc/stat steal ");
        let Some(line) = boot.lines.iter().find(|l| l.text.contains(&tag)) else {
            problems.push(format!("serial log lacks {tag:?}"));
            continue;
        };
        match steal_figures(&line.text[line.text.find(&tag).unwrap_or(0) + tag.len()..]) {
            Some((a, b)) if b > a => {}
            Some((a, b)) => problems.push(format!(
                "{vm}: /proc/stat steal did not grow ({a} -> {b}) while sharing pCPUs"
            )),
            None => problems.push(format!("{vm}: unreadable steal line: {}", line.text)),
        }
    }
    problems
}

/// `A -> B ...` of a `LINUX-STEAL` line: the two figures.
fn steal_figures(rest: &str) -> Option<(u64, u64)> {
    let mut w = rest.split_whitespace();
    let a = w.next()?.parse().ok()?;
    (w.next()? == "->").then_some(())?;
    let b = w.next()?.parse().ok()?;
    Some((a, b))
}

/// The seeds' workloads (`kestrel-seedbench`, docs/performance.md) in each
/// VM: every command announced ran and printed its result line (hackbench's
/// `done`, fp's `wrong=0`, futex's wake-all times), none failed, and
/// kestrel's counters of the VM moved: FP registers restored, trapped SGI
/// writes (the futex wakes send IPIs), VMID loads.
fn judge_seeds(boot: &Boot, vms: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let counters = crate::counters::parse_vm_counters(&boot.text());
    for vm in vms {
        let tagged = |s: &str| format!("[{vm}] {s}");
        for (workload, result) in [
            ("hackbench", "SEEDBENCH hackbench done runs="),
            ("fp", "SEEDBENCH fp procs="),
            ("futex", "SEEDBENCH futex threads="),
            ("sve", "SEEDBENCH sve procs="),
        ] {
            let started = tagged(&format!("LINUX-BENCH: kestrel-seedbench {workload} "));
            if !boot.has(&started) {
                problems.push(format!("{vm}: never started {workload} ({started:?})"));
            } else if !boot.has(&tagged(result)) {
                let fail = tagged(&format!("SEEDBENCH {workload} FAIL"));
                match boot.lines.iter().find(|l| l.text.contains(&fail)) {
                    Some(l) => problems.push(format!("{vm}: {}", l.text)),
                    None => problems.push(format!("{vm}: no {workload} result ({result:?})")),
                }
            }
        }
        if let Some(l) = boot
            .lines
            .iter()
            .find(|l| l.text.contains(&tagged("SEEDBENCH fp ")) && !l.text.contains(" wrong=0"))
        {
            problems.push(format!("{vm}: FP results wrong: {}", l.text));
        }
        if let Some(l) = boot
            .lines
            .iter()
            .find(|l| l.text.contains(&tagged("SEEDBENCH sve ")) && !l.text.contains(" bad=0"))
        {
            problems.push(format!("{vm}: SVE registers changed: {}", l.text));
        }
        if boot.has(&tagged("LINUX-BENCH: FAIL")) {
            problems.push(format!("{vm}: a workload exited with an error"));
        }
        match counters.iter().find(|c| c.name == *vm) {
            None => problems.push(format!("{vm}: kestrel printed no counters")),
            Some(c) => {
                for key in [
                    "fp_restores",
                    "exit_ipi",
                    "vmid_fast",
                    "sve_traps",
                    "sve_restores",
                ] {
                    if c.values.get(key).copied().unwrap_or(0) == 0 {
                        problems.push(format!("{vm}: kestrel's {key} counter did not move"));
                    }
                }
            }
        }
    }
    problems
}

/// The reboot case's own checks: each VM announced its `reboot -f` at
/// boots 1..=N, kestrel restarted it N times, and the last boot found the
/// count on its disk.
fn judge_reboots(boot: &Boot, vms: &[&str], n: u32) -> Vec<String> {
    let mut problems = Vec::new();
    for vm in vms {
        let mut want: Vec<String> = (1..=n)
            .flat_map(|k| {
                [
                    format!(
                        "[{vm}] LINUX-INIT: boot {k} of {} on /dev/vda: reboot -f",
                        n + 1
                    ),
                    format!("VM \"{vm}\" restarted ({k})"),
                ]
            })
            .collect();
        want.push(format!(
            "[{vm}] LINUX-INIT: boot {} of {} on /dev/vda: {n} reboot(s) done, the disk kept the count",
            n + 1,
            n + 1
        ));
        // In this order in the log.
        let mut at = 0;
        for w in &want {
            match boot.lines[at..]
                .iter()
                .position(|l| l.text.contains(w.as_str()))
            {
                Some(i) => at += i + 1,
                None => {
                    problems.push(format!("serial log lacks {w:?} (in order)"));
                    break;
                }
            }
        }
    }
    problems
}

/// The virtio case's own checks, from what each VM printed (tagged by
/// kestrel) and kestrel's per-VM device counters: the root mounted from the
/// virtio disk, the test output on hvc0 (the console device carried bytes),
/// eth0 up, both pings answered, and the 4 MiB fetched with the MD5 the
/// server printed.
fn judge_virtio_vms(boot: &Boot, vms: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let line_of = |prefix: &str| boot.lines.iter().find(|l| l.text.contains(prefix));
    for vm in vms {
        for step in [
            "LINUX-INIT: root mounted from /dev/vda (ext4, read-write): switch_root",
            "LINUX-INIT: console on hvc0",
            "LINUX-INIT: eth0 up 10.0.0.",
            "LINUX-NET: ping 10.0.0.",
        ] {
            let want = format!("[{vm}] {step}");
            if line_of(&want).is_none() {
                problems.push(format!("serial log lacks {want:?}"));
            }
        }
        let ping = format!("[{vm}] LINUX-NET: ping ");
        if let Some(l) = line_of(&ping) {
            if !l.text.contains(" 3 packets received") {
                problems.push(format!("{vm}: ping lost packets: {}", l.text));
            }
        }
        // kestrel's end-of-VM counters: the console device carried the
        // test's output, the disk was read, frames went both ways.
        let counters = format!("VM \"{vm}\" virtio: console: ");
        match line_of(&counters) {
            Some(l) => {
                let bytes: u64 = l.text[l.text.find("console: ").unwrap_or(0) + 9..]
                    .split(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if bytes < 100 {
                    problems.push(format!(
                        "{vm}: the virtio console carried {bytes} bytes: {}",
                        l.text
                    ));
                }
                if l.text.contains("disk0: 0 reads") || l.text.contains("net0: 0 frames out") {
                    problems.push(format!("{vm}: a virtio device was not used: {}", l.text));
                }
                if l.text.contains("needs reset") {
                    problems.push(format!("{vm}: {}", l.text));
                }
            }
            None => problems.push(format!("kestrel printed no virtio counters for {vm}")),
        }
    }
    let md5 = |prefix: &str| {
        line_of(prefix).and_then(|l| {
            let t = &l.text[l.text.find(" md5 ")? + 5..];
            Some(t.split(' ').next()?.to_string())
        })
    };
    let served = md5("LINUX-NET: serving 4 MiB md5 ");
    let fetched = md5("LINUX-NET: fetched 4 MiB md5 ");
    match (served, fetched) {
        (Some(a), Some(b)) if a == b && a.len() == 32 => {}
        (Some(a), Some(b)) => {
            problems.push(format!("MD5 of the data differs: served {a}, fetched {b}"))
        }
        _ => problems.push("no served/fetched MD5 lines (LINUX-NET)".to_string()),
    }
    if let Some(l) = boot
        .lines
        .iter()
        .find(|l| l.text.contains("LINUX-NET: FAIL"))
    {
        problems.push(format!("network test failed: {}", l.text));
    }
    problems
}

/// The LoongArch bare-QEMU case: Debian's loong64 `vmlinuz` (zboot, as
/// shipped) under Debian's edk2 (UEFI + ACPI), the test initramfs.
pub const LA64_BARE_CASE: &str =
    "linux-la64 bare QEMU la464 -smp 4, Debian edk2 (assets + init test)";
/// How long the LoongArch bare boot may take (about 60 s here under TCG).
pub const LA64_BOOT_LIMIT: Duration = Duration::from_secs(300);

/// Boots the LoongArch bare-QEMU case with `assets`.
fn bare_test_la64(assets: &assets::loong64::Loong64Assets) -> Verdict {
    let mut cmd = bare_command(
        BareConsole::Serial,
        Arch::LoongArch64,
        "virt",
        4,
        2048,
        &assets.vmlinuz,
        Some(&assets.initramfs),
        "console=ttyS0,115200 rdinit=/init kestrel.test_cpus=4 kestrel.name=bare",
    );
    cmd.arg("-bios").arg(&assets.firmware);
    match Runner::new(cmd, LA64_BOOT_LIMIT).run() {
        Ok(boot) => Verdict {
            problems: judge_linux(&boot, PASS_4),
            detail: Some(format!(
                "{}: init at {:.1} s, power-off at {:.1} s",
                assets.kernel,
                boot.when(INIT_LINE).unwrap_or_default().as_secs_f64(),
                boot.ended.unwrap_or_default().as_secs_f64()
            )),
            log: boot.log(),
            ..Verdict::default()
        },
        Err(e) => Verdict::error(e),
    }
}

/// Debian's loong64 kernel as one VM with 4 vCPUs under kestrel's LVZ
/// backend, on the LVZ emulator.
pub const LA64_LVZ_CASE: &str =
    "linux-la64 on kestrel LVZ: 1 VM x 4 vCPUs, Debian vmlinuz as shipped, init test, futex wake-all workload, IPIs by PV hypercall";
/// Its config (the same kernel and initramfs as the bare case).
pub const LA64_LVZ_CONFIG: &str = "configs/la64-linux-1vm.toml";

/// Two Debian loong64 VMs (4 + 2 vCPUs) sharing 4 pCPUs under the LVZ
/// backend.
pub const LA64_LVZ_2VM_CASE: &str =
    "linux-la64 on kestrel LVZ: 2 VMs (4 + 2 vCPUs) sharing 4 pCPUs, root on virtio-blk, test on hvc0, IPIs by PV hypercall (linux0) and by IOCSR with pv_ipi = false (linux1), ping + 4 MiB over TCP";
const LA64_LVZ_2VM_CONFIG: &str = "configs/la64-linux-2vm.toml";

/// One Debian loong64 VM with 8 vCPUs on 4 pCPUs under the LVZ backend,
/// its virtio interrupts moved to vCPU 5 (KVM_FEATURE_VIRT_EXTIOI).
pub const LA64_LVZ_8VCPU_CASE: &str =
    "linux-la64 on kestrel LVZ: 1 VM x 8 vCPUs on 4 pCPUs, KVM_FEATURE_VIRT_EXTIOI, virtio-blk interrupts moved to vCPU 5 then vCPU 2 and taken there";
const LA64_LVZ_8VCPU_CONFIG: &str = "configs/la64-linux-8vcpu.toml";
/// The vCPUs its config (`kestrel.irqcpu=5,2:/dev/vda`) moves them to, in
/// turn: one of the second four, then one of the first four (routed by
/// EIOINTC node and core instead, Linux's writes for the second node
/// would send the latter's interrupts to vCPU 6).
const LA64_IRQ_CPUS: [u32; 2] = [5, 2];
/// The line a passing test prints with `kestrel.test_cpus=8`.
const PASS_8: &str = "LINUX-TEST: PASS cpus=8 fp=ok";

/// One Debian loong64 VM (2 vCPUs) that reboots itself once through the
/// GED's reset register (`syscon-reboot`), its boot count on its disk.
pub const LA64_LVZ_REBOOT_CASE: &str =
    "linux-la64 on kestrel LVZ reboot: 1 VM x 2 vCPUs, root on virtio-blk, reboot -f through the GED once, the second boot finds its count on the disk";
const LA64_LVZ_REBOOT_CONFIG: &str = "configs/la64-linux-reboot.toml";

/// One Debian loong64 VM (2 vCPUs) booted with `console=ttyS0` and
/// nothing else on its command line.
pub const LA64_LVZ_PLAIN_CASE: &str =
    "linux-la64 on kestrel LVZ plain: 1 VM x 2 vCPUs, the command line console=ttyS0 and nothing else, the legacy I/O window probed by i8042";
const LA64_LVZ_PLAIN_CONFIG: &str = "configs/la64-linux-plain.toml";
/// The whole command line of [`LA64_LVZ_PLAIN_CONFIG`]'s VM.
const LA64_PLAIN_CMDLINE: &str = "console=ttyS0";

/// The test guest's attacker beside a Debian loong64 victim VM, sharing
/// two pCPUs: every attack phase, the interrupt controllers' and virtio's
/// included.
pub const LA64_LVZ_HOSTILE_CASE: &str =
    "linux-la64 on kestrel LVZ hostile: the test guest's attacker (EIOINTC/PCH-PIC and virtio phases included) beside a Linux victim (root on virtio-blk, hvc0, network) on 2 pCPUs";
const LA64_LVZ_HOSTILE_CONFIG: &str = "configs/test/la64-hostile-linux.toml";
/// The attack phases its attacker runs (its command line): every one
/// (`configs/test/la64-hostile-linux.toml`).
const LA64_HOSTILE_PHASES: [&str; 12] = [
    "iocsr", "insn", "user", "console", "memory", "csr", "tlb", "hvcl", "storm", "timer0", "intc",
    "virtio",
];
const LA64_HOSTILE_VIRTIO: [&str; 6] = [
    "setup",
    "rings",
    "block",
    "switch",
    "registers",
    "left-broken",
];

/// Boots [`LA64_LVZ_CASE`]: after the init test the VM runs the IPI
/// experiment's workload briefly (`kestrel.bench=futex,threads=16,rounds=5`
/// in its config).
fn lvz_test_la64() -> Verdict {
    lvz_boot_la64(LA64_LVZ_CONFIG, 2048, |b| {
        let mut problems = judge_lvz_la64(b, &[("linux0", PASS_4)]);
        problems.extend(judge_futex_la64(b, "linux0", 16, 5));
        problems
    })
}

/// The LoongArch workload program (`tools/guests/seedbench-nostd`) ran the
/// futex wake-all in `vm`: its result line with every thread pinned, all
/// rounds done and at least one FUTEX_WAKE per thread and round, no
/// failure line.
fn judge_futex_la64(boot: &Boot, vm: &str, threads: u64, rounds: u64) -> Vec<String> {
    let head = format!("[{vm}] SEEDBENCH futex ");
    let Some(line) = boot.lines.iter().find(|l| l.text.contains(&head)) else {
        return vec![format!("{vm}: no futex wake-all result ({head:?})")];
    };
    let field = |k: &str| {
        line.text
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse::<f64>().ok())
    };
    let mut problems = Vec::new();
    if line.text.contains(" FAIL ") {
        problems.push(format!("{vm}: {}", line.text));
        return problems;
    }
    for (k, want) in [
        ("threads", threads),
        ("pinned", threads),
        ("rounds", rounds),
    ] {
        if field(k) != Some(want as f64) {
            problems.push(format!("{vm}: futex {k} is not {want}: {}", line.text));
        }
    }
    if field("wake_calls").unwrap_or(0.0) < (threads * rounds) as f64
        || !field("median_us").is_some_and(|m| m > 0.0)
    {
        problems.push(format!("{vm}: futex result implausible: {}", line.text));
    }
    problems
}

/// Boots [`LA64_LVZ_8VCPU_CASE`]: the usual judgement for 8 vCPUs, and
/// each vCPU of [`LA64_IRQ_CPUS`] took the virtio disk's interrupts once
/// Linux moved them there (/proc/interrupts, `kestrel.irqcpu`).
fn lvz_test_la64_8vcpu() -> Verdict {
    lvz_boot_la64(LA64_LVZ_8VCPU_CONFIG, 2048, |b| {
        let mut problems = judge_lvz_la64(b, &[("linux0", PASS_8)]);
        for cpu in LA64_IRQ_CPUS {
            problems.extend(judge_irq_cpu(b, "linux0", cpu));
        }
        problems
    })
}

/// `vm`'s interrupt routing test passed for CPU `cpu`: it took (at least
/// 9 in 10 of) the virtio interrupts of a disk read after every virtio
/// interrupt was moved to it.
fn judge_irq_cpu(boot: &Boot, vm: &str, cpu: u32) -> Vec<String> {
    let pass = format!("[{vm}] LINUX-IRQ: PASS cpu {cpu} took ");
    if boot.has(&pass) {
        return Vec::new();
    }
    let why: Vec<&str> = boot
        .lines
        .iter()
        .filter(|l| l.text.contains(&format!("[{vm}] LINUX-IRQ: ")))
        .map(|l| l.text.as_str())
        .collect();
    vec![format!(
        "{vm}: no {pass:?} (its LINUX-IRQ lines: {})",
        if why.is_empty() {
            "none".to_string()
        } else {
            why.join(" | ")
        }
    )]
}

/// Boots [`LA64_LVZ_2VM_CASE`].
fn lvz_test_la64_2vm() -> Verdict {
    lvz_boot_la64(LA64_LVZ_2VM_CONFIG, 1024, |b| {
        let vms = ["linux0", "linux1"];
        let mut problems =
            judge_lvz_la64_iocsr(b, &[("linux0", PASS_4), ("linux1", PASS_2)], &["linux1"]);
        problems.extend(judge_virtio_vms(b, &vms));
        // The first /init (in the initramfs) loads every module the root
        // disk and the network need (virtio-mmio, block, net, ext4).
        let names: Vec<&str> = assets::LA64_VIRTIO_MODULES
            .iter()
            .map(|m| assets::module_name(m))
            .collect();
        let modules = format!("LINUX-INIT: modules loaded: {}", names.join(" "));
        for vm in vms {
            let want = format!("[{vm}] {modules}");
            if !b.has(&want) {
                problems.push(format!("serial log lacks {want:?}"));
            }
        }
        problems
    })
}

/// Boots [`LA64_LVZ_PLAIN_CASE`]: the VM passes its test with the
/// defaults of `/init` (2 CPUs online, FP on each), as any LVZ Linux VM
/// (PV IPIs, steal time, kestrel's clean power-off); its kernel saw the
/// plain command line and nothing more, mapped the legacy I/O window from
/// the device tree's `isa` node, and its i8042 probe found no controller
/// there (the driver ran: nothing left it out).
fn lvz_test_la64_plain() -> Verdict {
    lvz_boot_la64(LA64_LVZ_PLAIN_CONFIG, 1024, judge_lvz_la64_plain)
}

fn judge_lvz_la64_plain(b: &Boot) -> Vec<String> {
    let mut problems = judge_lvz_la64(b, &[("plain0", PASS_2)]);
    let cmdline = b.lines.iter().find_map(|l| {
        let (_, rest) = l.text.split_once("Kernel command line: ")?;
        l.text.contains("[plain0]").then(|| rest.trim().to_string())
    });
    match cmdline {
        None => problems.push("plain0: no \"Kernel command line:\" in its log".into()),
        Some(c) if c != LA64_PLAIN_CMDLINE => problems.push(format!(
            "plain0: the kernel's command line is {c:?}, want {LA64_PLAIN_CMDLINE:?} alone"
        )),
        Some(_) => {}
    }
    for want in [
        "ISA Bridge: /isa@18000000",
        "IO 0x0000000018000000..0x0000000018003fff  ->  0x0000000000000000",
        "i8042: No controller found",
    ] {
        if !b
            .lines
            .iter()
            .any(|l| l.text.contains("[plain0]") && l.text.contains(want))
        {
            problems.push(format!("plain0: its log lacks {want:?}"));
        }
    }
    problems
}

/// Boots [`LA64_LVZ_REBOOT_CASE`]: the VM's two boots in order (the first
/// announcing its `reboot -f`, kestrel's restart of the VM, the second
/// finding the count on its disk), its test passed on the second boot,
/// kestrel's clean power-off on its LVZ backend.
fn lvz_test_la64_reboot() -> Verdict {
    lvz_boot_la64(LA64_LVZ_REBOOT_CONFIG, 1024, judge_lvz_la64_reboot)
}

fn judge_lvz_la64_reboot(b: &Boot) -> Vec<String> {
    let case = KestrelCase {
        name: LA64_LVZ_REBOOT_CASE,
        config: LA64_LVZ_REBOOT_CONFIG,
        gic: 3,
        vms: &["rb0"],
        pass: PASS_2,
        virtio: false,
        reboots: 1,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    };
    let mut problems = judge_kestrel(b, &case);
    // Exactly one restart: the VM did not reboot again after its count.
    let restarts = b
        .lines
        .iter()
        .filter(|l| l.text.contains("VM \"rb0\" restarted ("))
        .count();
    if restarts != 1 {
        problems.push(format!("kestrel restarted rb0 {restarts} times, want 1"));
    }
    // Both boots mounted the root from the disk and the test ran after the
    // second (its PASS line follows the count).
    let mounted = b
        .lines
        .iter()
        .filter(|l| {
            l.text
                .contains("[rb0] LINUX-INIT: root mounted from /dev/vda")
        })
        .count();
    if mounted != 2 {
        problems.push(format!("rb0 mounted its root disk {mounted} times, want 2"));
    }
    if !b.has("backend:  LVZ") || !b.has("LoongArch VMs: LVZ guest mode") {
        problems.push("kestrel did not run the VM on its LVZ backend".into());
    }
    problems
}

/// Boots [`LA64_LVZ_HOSTILE_CASE`] (the test guest built first).
fn lvz_test_la64_hostile() -> Verdict {
    if let Err(e) = crate::guests::build_guest_la64() {
        return Verdict::error(e);
    }
    lvz_boot_la64_on(LA64_LVZ_HOSTILE_CONFIG, 2, 1024, judge_lvz_la64_hostile)
}

/// The victim unharmed: its test passed on hvc0 with root on its disk and
/// its network up, it powered off (not stopped), its devices worked and
/// none needs reset, its IPIs went by PV hypercall. The attacker: every
/// phase PASS, the virtio sub-phases too, its own interrupt back after the
/// controller games, its virtio console lines all on the console, its
/// devices left broken as kestrel's end-of-VM line names them. kestrel:
/// no panic, nothing stopped but (at most) the attacker, a clean
/// power-off on its LVZ backend.
fn judge_lvz_la64_hostile(b: &Boot) -> Vec<String> {
    let case = KestrelCase {
        name: LA64_LVZ_HOSTILE_CASE,
        config: LA64_LVZ_HOSTILE_CONFIG,
        gic: 3,
        vms: &["victim"],
        pass: PASS_2,
        virtio: false,
        reboots: 0,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    };
    let mut problems = judge_kestrel(b, &case);
    let line_of = |s: &str| b.lines.iter().find(|l| l.text.contains(s));
    for step in [
        "[victim] LINUX-INIT: root mounted from /dev/vda (ext4, read-write): switch_root",
        "[victim] LINUX-INIT: console on hvc0",
        "[victim] LINUX-INIT: eth0 up 10.0.0.2",
        "VM \"victim\" powered off; stats: ",
    ] {
        if line_of(step).is_none() {
            problems.push(format!("serial log lacks {step:?}"));
        }
    }
    match line_of("VM \"victim\" virtio: ") {
        None => problems.push("kestrel printed no virtio counters for the victim".into()),
        Some(l) => {
            let t = &l.text;
            let bytes: u64 = t[t.find("console: ").map_or(0, |i| i + 9)..]
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if bytes < 100 {
                problems.push(format!(
                    "victim: its virtio console carried {bytes} bytes: {t}"
                ));
            }
            if t.contains("disk0: 0 reads") || !t.contains(" 0 errors") {
                problems.push(format!(
                    "victim: its disk was not read, or with errors: {t}"
                ));
            }
            if t.contains("needs reset") || !t.contains("switch dropped 0 spoofed") {
                problems.push(format!("victim: a device broken or frames spoofed: {t}"));
            }
        }
    }
    problems.extend(judge_pv_ipis(b, "victim", 1));
    for l in &b.lines {
        let t = &l.text;
        if t.contains("[victim]") {
            continue;
        }
        if t.contains("panic") || t.contains("PANIC") {
            problems.push(format!("kestrel or the attacker panicked: {t}"));
        }
        if t.contains("stopped") && t.contains("\"victim\"") {
            problems.push(format!("kestrel stopped the victim: {t}"));
        }
        if t.contains("[attacker] FAIL ") || t.contains("[attacker] guest: unexpected exception") {
            problems.push(format!("attacker: {t}"));
        }
    }
    let phases = LA64_HOSTILE_PHASES
        .iter()
        .map(|p| format!("attack-{p}"))
        .chain(
            LA64_HOSTILE_VIRTIO
                .iter()
                .map(|p| format!("attack-virtio-{p}")),
        );
    for p in phases {
        let want = format!("[attacker] PASS {p}:");
        let n = b.lines.iter().filter(|l| l.text.contains(&want)).count();
        if n != 1 {
            problems.push(format!("{n} \"PASS {p}\" from the attacker, want 1"));
        }
    }
    if let Some(p) = crate::vmtests_la64::check_legacy_io(b.lines.iter().map(|l| l.text.as_str())) {
        problems.push(p);
    }
    if line_of("[attacker] ATTACK intc: ")
        .is_none_or(|l| !l.text.contains("own interrupt back: yes"))
    {
        problems.push(
            "the attacker did not get its own interrupt back after the controller games".into(),
        );
    }
    let written = b
        .lines
        .iter()
        .find_map(|l| {
            let (_, rest) = l
                .text
                .split_once("[attacker] PASS attack-virtio-left-broken: ")?;
            let (_, n) = rest.split_once("; ")?;
            n.split_whitespace().next()?.parse::<usize>().ok()
        })
        .unwrap_or(0);
    let seen = b
        .lines
        .iter()
        .filter(|l| l.text.contains("[attacker] VIRTIO-CONSOLE ok after "))
        .count();
    if written == 0 || seen != written {
        problems.push(format!(
            "attacker: {seen} VIRTIO-CONSOLE lines on the console, {written} written through its virtio console"
        ));
    }
    match line_of("VM \"attacker\" virtio: ") {
        None => problems.push("kestrel printed no virtio line for the attacker".into()),
        Some(l) => {
            for want in crate::vmtests_arm64::VIRTIO_LEFT_BROKEN {
                if !l.text.contains(want) {
                    problems.push(format!(
                        "attacker's virtio line lacks \"{want}\": {}",
                        l.text
                    ));
                }
            }
        }
    }
    if !b.has("backend:  LVZ") || !b.has("LoongArch VMs: LVZ guest mode") {
        problems.push("kestrel did not run the VMs on its LVZ backend".into());
    }
    if !b.has("[attacker] ATTACK start: on kestrel , RAM top 0x2000000, LVZ guest mode") {
        problems.push("the attacker did not start on kestrel in LVZ guest mode".into());
    }
    problems
}

/// Boots `config` on the LVZ emulator (`mem_mib` of host RAM) and judges
/// the run with `judge`.
fn lvz_boot_la64(config: &str, mem_mib: u32, judge: impl Fn(&Boot) -> Vec<String>) -> Verdict {
    lvz_boot_la64_on(config, 4, mem_mib, judge)
}

/// [`lvz_boot_la64`] on an emulated machine of `smp` CPUs.
fn lvz_boot_la64_on(
    config: &str,
    smp: u32,
    mem_mib: u32,
    judge: impl Fn(&Boot) -> Vec<String>,
) -> Verdict {
    let config = crate::root().join(config);
    let package = module_path(Arch::LoongArch64, &config);
    let opts = Opts {
        arch: Arch::LoongArch64,
        smp,
        mem_mib,
        append: crate::TEST_APPEND.into(),
        config: Some(config.clone()),
        lvz: true,
        module: Some(package.clone()),
        ..Opts::default()
    };
    let boot = crate::build_with_module(opts.arch, &opts.features, &config, &package)
        .and_then(|image| Runner::new(qemu::command(&opts, &image, true), LA64_BOOT_LIMIT).run());
    match boot {
        Ok(boot) => Verdict {
            problems: judge(&boot),
            detail: Some(format!(
                "init at {:.1} s, power-off at {:.1} s",
                boot.when(INIT_LINE).unwrap_or_default().as_secs_f64(),
                boot.ended.unwrap_or_default().as_secs_f64()
            )),
            log: boot.log(),
            ..Verdict::default()
        },
        Err(e) => Verdict::error(e),
    }
}

/// Every VM of `vms` passed its test (its PASS line), kestrel ended
/// cleanly on its LVZ backend, each VM's counters show its IPIs went
/// by PV hypercall: PV IPIs sent, no IOCSR IPIs beyond its secondaries'
/// start, and the kernel uses KVM's steal time with the preempt feature
/// ([`PV_STEAL_PREEMPT`]).
pub fn judge_lvz_la64(boot: &Boot, vms: &[(&'static str, &'static str)]) -> Vec<String> {
    judge_lvz_la64_iocsr(boot, vms, &[])
}

/// [`judge_lvz_la64`], but the VMs named in `iocsr` run with `pv_ipi =
/// false`: their counters must show no PV IPI and IOCSR IPIs beyond their
/// secondaries' start.
fn judge_lvz_la64_iocsr(
    boot: &Boot,
    vms: &[(&'static str, &'static str)],
    iocsr: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    for &(vm, pass) in vms {
        // (`KestrelCase` names static VMs; these few bytes live on.)
        let one: &'static [&'static str] = Box::leak(Box::new([vm]));
        let case = KestrelCase {
            name: LA64_LVZ_CASE,
            config: LA64_LVZ_CONFIG,
            gic: 3,
            vms: one,
            pass,
            virtio: false,
            reboots: 0,
            seeds: false,
            steal: false,
            sve_bytes: 0,
            mix: false,
        };
        for p in judge_kestrel(boot, &case) {
            if !problems.contains(&p) {
                problems.push(p);
            }
        }
        let cpus: u64 = pass
            .split("cpus=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        if iocsr.contains(&vm) {
            problems.extend(judge_iocsr_ipis(boot, vm, cpus.saturating_sub(1)));
        } else {
            problems.extend(judge_pv_ipis(boot, vm, cpus.saturating_sub(1)));
        }
    }
    if !boot.has("backend:  LVZ") || !boot.has("LoongArch VMs: LVZ guest mode") {
        problems.push("kestrel did not run the VMs on its LVZ backend".into());
    }
    // Linux 7.2's arch/loongarch/kernel/paravirt.c names the preempt
    // feature (cpucfg 0x40000004 bit 3) in its steal-time line: "with
    // preempt enabled", or "disabled" without it.
    if !boot.has(PV_STEAL_PREEMPT) {
        problems.push(format!(
            "the kernel did not find KVM's steal time with the preempt feature (cpucfg 0x40000004 bits 2 and 3): no {PV_STEAL_PREEMPT:?}"
        ));
    }
    problems
}

/// What Linux prints when it uses KVM's steal time and preempt feature.
pub const PV_STEAL_PREEMPT: &str = "Using paravirt steal-time with preempt enabled";

/// `vm`'s end-of-VM IPI counters: (PV IPIs sent, IOCSR IPI_SENDs emulated).
fn ipi_counters(boot: &Boot, vm: &str) -> Option<(u64, u64)> {
    let tag = format!("VM \"{vm}\"");
    let at = boot
        .lines
        .iter()
        .position(|l| l.text.contains(&tag) && l.text.contains("stats: "))?;
    let block = &boot.lines[at..(at + 7).min(boot.lines.len())];
    let counter = |name: &str| {
        block
            .iter()
            .flat_map(|l| l.text.split_whitespace())
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some((counter("ipi_sent"), counter("ipi_emulated")))
}

/// A VM with `pv_ipi = false`: its Linux found no PV IPI feature, so it
/// sent no PV IPI and its IPIs went through IOCSR IPI_SEND (more than the
/// `boot_ipis` that start its secondaries).
fn judge_iocsr_ipis(boot: &Boot, vm: &str, boot_ipis: u64) -> Vec<String> {
    match ipi_counters(boot, vm) {
        None => vec![format!("no end-of-VM statistics for {vm} in kestrel's log")],
        Some((pv, _)) if pv > 0 => vec![format!(
            "{vm} has pv_ipi = false but sent {pv} PV IPIs (ipi_sent)"
        )],
        Some((_, iocsr)) if iocsr <= boot_ipis => vec![format!(
            "{vm} sent only {iocsr} IOCSR IPIs with the PV IPI hidden (more than {boot_ipis} expected)"
        )],
        Some(_) => Vec::new(),
    }
}

/// `vm`'s end-of-VM counters: PV IPIs sent, at most `boot_ipis` IOCSR IPIs
/// (Linux starts each secondary with one: its mailbox boot action stays on
/// the IOCSR path even with PV IPIs).
fn judge_pv_ipis(boot: &Boot, vm: &str, boot_ipis: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let Some((pv, iocsr)) = ipi_counters(boot, vm) else {
        problems.push(format!("no end-of-VM statistics for {vm} in kestrel's log"));
        return problems;
    };
    if pv == 0 {
        problems.push(format!("{vm} sent no PV IPI (ipi_sent=0)"));
    }
    if iocsr > boot_ipis {
        problems.push(format!(
            "{vm} sent {iocsr} IPIs through IOCSR IPI_SEND (at most {boot_ipis}, to start its secondaries)"
        ));
    }
    problems
}

/// The LoongArch Linux cases of `cargo xtask smoke`: fetches or reuses the
/// loong64 assets first (at most [`FETCH_LIMIT`]), or skips, saying why.
pub fn smoke_tests_la64(sel: &Selection) -> Vec<Test<'static>> {
    let names = [
        LA64_BARE_CASE,
        LA64_LVZ_CASE,
        LA64_LVZ_2VM_CASE,
        LA64_LVZ_8VCPU_CASE,
        LA64_LVZ_REBOOT_CASE,
        LA64_LVZ_PLAIN_CASE,
        LA64_LVZ_HOSTILE_CASE,
    ];
    if !names.iter().any(|n| sel.matches(n)) {
        return Vec::new();
    }
    if sel.list {
        return names.map(|n| Test::new(n, Verdict::default)).into();
    }
    eprintln!(
        "smoke: LoongArch linux guest assets (cargo xtask guest-assets --arch loongarch64, at most {} s) ...",
        FETCH_LIMIT.as_secs()
    );
    match assets::ensure_within_la64(FETCH_LIMIT) {
        Ok(a) => vec![
            Test::new(LA64_BARE_CASE, move || bare_test_la64(&a)),
            Test::new(LA64_LVZ_CASE, lvz_test_la64),
            Test::new(LA64_LVZ_2VM_CASE, lvz_test_la64_2vm),
            Test::new(LA64_LVZ_8VCPU_CASE, lvz_test_la64_8vcpu),
            Test::new(LA64_LVZ_REBOOT_CASE, lvz_test_la64_reboot),
            Test::new(LA64_LVZ_PLAIN_CASE, lvz_test_la64_plain),
            Test::new(LA64_LVZ_HOSTILE_CASE, lvz_test_la64_hostile),
        ],
        Err(why) => {
            println!("SKIP LoongArch linux cases: no LoongArch guest assets: {why}");
            Vec::new()
        }
    }
}

/// `cargo xtask guest-assets --arch loongarch64 --test`.
pub fn run_bare_la64(assets: assets::loong64::Loong64Assets) -> Result<(), String> {
    const SUITE: Suite = Suite {
        command: "guest-assets",
        summary_prefix: "",
        what: "bare-QEMU LoongArch Linux case",
        prepare: None,
    };
    let tests = vec![Test::new(LA64_BARE_CASE, move || bare_test_la64(&assets))];
    let all = Selection {
        list: false,
        only: None,
    };
    crate::suite::run(&SUITE, &all, tests)
}

/// A case that needs the Linux guest assets as well: its name, and the
/// test it makes.
pub type NeedsAssets = (&'static str, fn() -> Test<'static>);

/// The Linux cases of `cargo xtask smoke` (those `sel` selects), then
/// `also`: other cases that need the Linux guest assets, each its name and
/// the test it makes. Fetches or reuses the assets first (at most
/// [`FETCH_LIMIT`]), or skips them all, saying why (never failed for a
/// missing network).
pub fn smoke_tests(sel: &Selection, also: &[NeedsAssets]) -> Vec<Test<'static>> {
    let names = BARE_CASES
        .iter()
        .map(|c| c.name)
        .chain(VIRTIO_CASES.iter().map(|c| c.name))
        .chain(KESTREL_CASES.iter().map(|c| c.name))
        .chain(on_demand(sel).map(|c| c.name))
        .chain(PT_CASES.iter().map(|c| c.name))
        .chain(also.iter().map(|(name, _)| *name));
    if !names.clone().any(|n| sel.matches(n)) {
        return Vec::new();
    }
    if sel.list {
        return names.map(|n| Test::new(n, Verdict::default)).collect();
    }
    eprintln!(
        "smoke: linux guest assets (cargo xtask guest-assets, at most {} s) ...",
        FETCH_LIMIT.as_secs()
    );
    let assets = match assets::ensure_within(FETCH_LIMIT) {
        Ok(a) => Rc::new(a),
        Err(why) => {
            println!("SKIP linux bare-QEMU and kestrel cases: no Linux guest assets: {why}");
            return Vec::new();
        }
    };
    let mut tests = bare_tests(&assets);
    tests.extend(
        KESTREL_CASES
            .iter()
            .map(|case| Test::new(case.name, move || kestrel_test(case))),
    );
    tests.extend(on_demand(sel).map(|case| Test::new(case.name, move || kestrel_test(case))));
    tests.extend(
        PT_CASES
            .iter()
            .map(|case| Test::new(case.name, move || passthrough_test(case))),
    );
    tests.extend(also.iter().map(|(_, test)| test()));
    tests
}

/// The [`ON_DEMAND_CASES`] a `--case` selects (none without one).
fn on_demand(sel: &Selection) -> impl Iterator<Item = &'static KestrelCase> + Clone + '_ {
    ON_DEMAND_CASES
        .iter()
        .filter(move |c| sel.only.is_some() && sel.matches(c.name))
}

/// `cargo xtask guest-assets --test`: the bare-QEMU cases with `assets`.
pub fn run_bare(assets: assets::LinuxAssets) -> Result<(), String> {
    const SUITE: Suite = Suite {
        command: "guest-assets",
        summary_prefix: "",
        what: "bare-QEMU Linux case(s)",
        prepare: None,
    };
    let tests = bare_tests(&Rc::new(assets));
    let all = Selection {
        list: false,
        only: None,
    };
    crate::suite::run(&SUITE, &all, tests)
}

/// Boots `case` under kestrel and returns what it printed.
pub fn kestrel_boot(case: &KestrelCase) -> Result<Boot, String> {
    kestrel_boot_with(case, &[])
}

/// [`kestrel_boot`] with `extra` QEMU arguments.
fn kestrel_boot_with(case: &KestrelCase, extra: &[String]) -> Result<Boot, String> {
    let config = crate::root().join(case.config);
    let package = module_path(Arch::Aarch64, &config);
    let opts = Opts {
        arch: Arch::Aarch64,
        smp: 4,
        gic: case.gic,
        mem_mib: 1024,
        append: crate::TEST_APPEND.into(),
        config: Some(config.clone()),
        module: Some(package.clone()),
        ..Opts::default()
    };
    crate::build_with_module(opts.arch, &opts.features, &config, &package).and_then(|image| {
        let mut cmd = qemu::command(&opts, &image, true);
        cmd.args(extra);
        Runner::new(cmd, KESTREL_BOOT_LIMIT).run()
    })
}

/// The passthrough cases: QEMU's virtio-blk-device given to `pt0`
/// (identity RAM) beside `vm1` (configs/linux-passthrough.toml), on a
/// GICv3 and a GICv2 (the forwarded SPI's split EOI differs).
const PT_CASES: [KestrelCase; 2] = [
    KestrelCase {
        name: "linux on kestrel passthrough: QEMU's virtio-blk (slot 31, SPI 47) in an identity-RAM VM beside another, its file read back from the disk, after a VM reboot, GICv3",
        config: "configs/linux-passthrough.toml",
        gic: 3,
        vms: &["pt0", "vm1"],
        pass: PASS_2,
        virtio: false,
        reboots: 1,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    },
    KestrelCase {
        name: "linux on kestrel passthrough: QEMU's virtio-blk (slot 31, SPI 47) in an identity-RAM VM beside another, its file read back from the disk, after a VM reboot, GICv2",
        config: "configs/linux-passthrough.toml",
        gic: 2,
        vms: &["pt0", "vm1"],
        pass: PASS_2,
        virtio: false,
        reboots: 1,
        seeds: false,
        steal: false,
        sve_bytes: 0,
        mix: false,
    },
];

/// Runs `debugfs -R REQUEST disk` and returns its output.
fn debugfs(disk: &Path, request: &str) -> Result<String, String> {
    let tool = assets::find_tool("debugfs").ok_or("`debugfs` is missing (e2fsprogs)")?;
    let out = Command::new(tool)
        .args(["-R", request])
        .arg(disk)
        .output()
        .map_err(|e| format!("debugfs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "debugfs -R {request:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// MD5 of `file` by `md5sum`.
fn md5_of(file: &Path) -> Result<String, String> {
    let out = Command::new("md5sum")
        .arg(file)
        .output()
        .map_err(|e| format!("md5sum: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .filter(|s| s.len() == 32)
        .map(str::to_string)
        .ok_or_else(|| format!("md5sum {} failed", file.display()))
}

/// Makes the passthrough disk: an 8 MiB ext4 file holding `hello.txt`
/// with `nonce`.
fn make_pt_disk(dir: &Path, nonce: &str) -> Result<PathBuf, String> {
    let tree = dir.join("tree");
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    std::fs::write(tree.join("hello.txt"), format!("{nonce}\n"))
        .map_err(|e| format!("{}: {e}", tree.display()))?;
    let disk = dir.join("disk.ext4");
    let _ = std::fs::remove_file(&disk);
    let mke2fs = assets::find_tool("mke2fs").ok_or("`mke2fs` is missing (e2fsprogs)")?;
    let out = Command::new(mke2fs)
        .args(["-q", "-F", "-t", "ext4", "-d"])
        .arg(&tree)
        .arg(&disk)
        .arg("8M")
        .output()
        .map_err(|e| format!("mke2fs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mke2fs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(disk)
}

/// What the passthrough case checks beyond [`judge_kestrel`]: kestrel gave
/// pt0 the host device, pt0 read the disk's nonce and wrote its files, and
/// the disk file now holds exactly what pt0 said it wrote.
fn judge_passthrough(boot: &Boot, disk: &Path, nonce: &str, dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let line_of = |prefix: &str| boot.lines.iter().find(|l| l.text.contains(prefix));
    let after = |prefix: &str| {
        line_of(prefix).map(|l| {
            l.text[l.text.find(prefix).unwrap_or(0) + prefix.len()..]
                .trim()
                .to_string()
        })
    };
    for must in [
        "\"pt0\": identity RAM at ",
        "\"pt0\": passthrough of host device virtio_mmio@a003e00 at 0xa003e00, SPIs [(47, 32)]",
    ] {
        if line_of(must).is_none() {
            problems.push(format!("kestrel did not log {must:?}"));
        }
    }
    if let Some(l) = line_of("LINUX-PT: FAIL") {
        problems.push(format!("the passthrough test failed: {}", l.text));
    }
    match after("[pt0] LINUX-PT: mounted /dev/vda, hello.txt says:") {
        Some(t) if t == nonce => {}
        Some(t) => problems.push(format!("pt0 read {t:?} from the disk, it holds {nonce:?}")),
        None => problems.push("pt0 never mounted the passed-through disk".into()),
    }
    if line_of("[vm1] LINUX-PT:").is_some() {
        problems.push("vm1 ran the passthrough test".into());
    }
    match (
        after("[pt0] LINUX-PT: wrote pt.txt:"),
        debugfs(disk, "cat /pt.txt"),
    ) {
        (Some(said), Ok(on_disk))
            if on_disk.trim() == said && said.contains("through passthrough") => {}
        (Some(said), Ok(on_disk)) => problems.push(format!(
            "pt.txt on the disk is {:?}, pt0 wrote {said:?}",
            on_disk.trim()
        )),
        (None, _) => problems.push("pt0 did not say it wrote pt.txt".into()),
        (_, Err(e)) => problems.push(e),
    }
    let dumped = dir.join("pt.bin");
    let _ = std::fs::remove_file(&dumped);
    let on_disk =
        debugfs(disk, &format!("dump /pt.bin {}", dumped.display())).and_then(|_| md5_of(&dumped));
    match (after("[pt0] LINUX-PT: wrote pt.bin: 1 MiB md5"), on_disk) {
        (Some(said), Ok(sum)) if said == sum => {}
        (Some(said), Ok(sum)) => problems.push(format!(
            "pt.bin on the disk has MD5 {sum}, pt0 wrote one with {said}"
        )),
        (None, _) => problems.push("pt0 did not say it wrote pt.bin".into()),
        (_, Err(e)) => problems.push(format!("pt.bin: {e}")),
    }
    problems
}

/// The passthrough case (issue: VM devices, passthrough).
fn passthrough_test(case: &KestrelCase) -> Verdict {
    let dir = crate::root().join("build/linux-passthrough");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return Verdict::error(format!("{}: {e}", dir.display()));
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let nonce = format!("kestrel-pt-{}-{stamp}", std::process::id());
    let disk = match make_pt_disk(&dir, &nonce) {
        Ok(d) => d,
        Err(e) => return Verdict::error(e),
    };
    // QEMU's first -device: virtio-mmio slot 31 (0x0a003e00, SPI 47).
    let extra = [
        "-drive".to_string(),
        format!("file={},if=none,format=raw,id=pt0", qemu_opt(&disk)),
        "-device".to_string(),
        "virtio-blk-device,drive=pt0".to_string(),
    ];
    kestrel_verdict(case, kestrel_boot_with(case, &extra), |boot| {
        judge_passthrough(boot, &disk, &nonce, &dir)
    })
}

/// Boots Debian's kernel as VMs under kestrel (issue: Linux guests).
fn kestrel_test(case: &KestrelCase) -> Verdict {
    if case.mix {
        if let Err(e) = assets::armhf::write_mix_disks() {
            return Verdict::error(e);
        }
    }
    kestrel_verdict(case, kestrel_boot(case), |_| Vec::new())
}

/// The verdict on one kestrel Linux boot: [`judge_kestrel`]'s problems and
/// the case's own (`extra`), the power-off time, the log.
fn kestrel_verdict(
    case: &KestrelCase,
    boot: Result<Boot, String>,
    extra: impl FnOnce(&Boot) -> Vec<String>,
) -> Verdict {
    match boot {
        Ok(boot) => {
            let mut problems = judge_kestrel(&boot, case);
            problems.extend(extra(&boot));
            Verdict {
                problems,
                detail: Some(format!(
                    "power-off at {:.1} s",
                    boot.ended.unwrap_or_default().as_secs_f64()
                )),
                log: boot.log(),
                ..Verdict::default()
            }
        }
        Err(e) => Verdict::error(e),
    }
}

/// The bare-QEMU Linux cases with `assets` (the virtio ones last).
fn bare_tests(assets: &Rc<assets::LinuxAssets>) -> Vec<Test<'static>> {
    let mut tests: Vec<Test<'static>> = BARE_CASES
        .iter()
        .map(|case| {
            let assets = Rc::clone(assets);
            Test::new(case.name, move || bare_test(case, &assets))
        })
        .collect();
    tests.extend(VIRTIO_CASES.iter().map(|case| {
        let assets = Rc::clone(assets);
        Test::new(case.name, move || virtio_test(case, &assets))
    }));
    tests
}

/// A path as a QEMU option value (a comma is doubled).
fn qemu_opt(p: &Path) -> String {
    p.display().to_string().replace(',', ",,")
}

/// Boots one virtio case: `-smp 2`, the rootfs image as a virtio-blk disk,
/// and as the case says a virtio console written to a file and a
/// virtio-net device on QEMU's user network.
fn virtio_test(case: &VirtioCase, assets: &assets::LinuxAssets) -> Verdict {
    if !assets.rootfs.is_file() {
        return Verdict::error(format!(
            "{} is missing (run `cargo xtask guest-assets`)",
            assets.rootfs.display()
        ));
    }
    let mut append =
        "console=ttyAMA0 rdinit=/init kestrel.test_cpus=2 kestrel.name=virtio kestrel.root=/dev/vda"
            .to_string();
    if case.console {
        append.push_str(" kestrel.console=hvc0");
    }
    if case.net {
        append.push_str(&format!(" kestrel.ip={VIRTIO_IP}"));
    }
    let mut cmd = bare_command(
        BareConsole::Serial,
        Arch::Aarch64,
        "virt",
        2,
        1024,
        &assets.image,
        Some(&assets.initramfs),
        &append,
    );
    let disk = format!(
        "if=none,id=root,format=raw,file={},{}",
        qemu_opt(&assets.rootfs),
        if case.read_only {
            "readonly=on"
        } else {
            "snapshot=on"
        }
    );
    cmd.args(["-drive", &disk, "-device", "virtio-blk-device,drive=root"]);
    let dir = crate::root().join("build/linux-virtio");
    let hvc0 = dir.join(format!("hvc0.{}.log", std::process::id()));
    if case.console {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return Verdict::error(format!("{}: {e}", dir.display()));
        }
        let _ = std::fs::remove_file(&hvc0);
        cmd.args(["-device", "virtio-serial-device", "-chardev"])
            .arg(format!("file,id=hvc0,path={}", qemu_opt(&hvc0)))
            .args(["-device", "virtconsole,chardev=hvc0"]);
    }
    if case.net {
        cmd.args([
            "-netdev",
            "user,id=net0",
            "-device",
            "virtio-net-device,netdev=net0",
        ]);
    }
    let boot = Runner::new(cmd, BOOT_LIMIT).run();
    let console = if case.console {
        std::fs::read_to_string(&hvc0).unwrap_or_default()
    } else {
        String::new()
    };
    let _ = std::fs::remove_file(&hvc0);
    match boot {
        Ok(boot) => {
            let mut log = boot.log();
            if case.console {
                log.push_str(&format!(
                    "\n---- hvc0 (virtio console) ----\n{}",
                    console.trim_end()
                ));
            }
            Verdict {
                problems: judge_virtio(case, &boot, &console),
                detail: Some(format!(
                    "root at {:.1} s, power-off at {:.1} s",
                    boot.when("LINUX-INIT: started on root")
                        .unwrap_or_default()
                        .as_secs_f64(),
                    boot.ended.unwrap_or_default().as_secs_f64()
                )),
                log,
                ..Verdict::default()
            }
        }
        Err(e) => Verdict::error(e),
    }
}

/// Boots one bare-QEMU Linux case with `assets`.
fn bare_test(case: &BareCase, assets: &assets::LinuxAssets) -> Verdict {
    let cmd = bare_command(
        BareConsole::Serial,
        Arch::Aarch64,
        case.machine,
        4,
        1024,
        &assets.image,
        Some(&assets.initramfs),
        "console=ttyAMA0 rdinit=/init kestrel.test_cpus=4 kestrel.name=bare",
    );
    match Runner::new(cmd, BOOT_LIMIT).run() {
        Ok(boot) => Verdict {
            problems: judge_linux(&boot, PASS_4),
            detail: Some(format!(
                "init at {:.1} s, power-off at {:.1} s",
                boot.when(INIT_LINE).unwrap_or_default().as_secs_f64(),
                boot.ended.unwrap_or_default().as_secs_f64()
            )),
            log: boot.log(),
            ..Verdict::default()
        },
        Err(e) => Verdict::error(e),
    }
}

/// Where a Linux case's VM package goes (`build/<arch>/linux-<config
/// stem>.pkg`): QEMU loads it as kestrel's boot module.
fn module_path(arch: Arch, config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map_or("case".into(), |s| s.to_string_lossy());
    crate::root()
        .join("build")
        .join(arch.name())
        .join(format!("linux-{stem}.pkg"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::Line;

    fn boot(lines: &[&str]) -> Boot {
        Boot {
            lines: lines
                .iter()
                .enumerate()
                .map(|(i, t)| Line {
                    at: Duration::from_millis(i as u64),
                    text: t.to_string(),
                })
                .collect(),
            exit: None,
            ended: Some(Duration::from_secs(1)),
            timed_out: false,
            saved: None,
        }
    }

    fn serial(case: &VirtioCase) -> Vec<String> {
        let mut l = virtio_expected(case);
        l.insert(
            1,
            "[    1.0] virtio_blk virtio2: [vda] 32768 512-byte logical blocks".into(),
        );
        l
    }

    #[test]
    fn virtio_steps_are_the_init_lines() {
        let w = virtio_expected(&VIRTIO_CASES[0]);
        assert_eq!(w[0], INIT_LINE);
        assert!(w[1]
            .ends_with("virtio_mmio virtio_blk virtio_console failover net_failover virtio_net"));
        assert!(w.contains(
            &"LINUX-INIT: root mounted from /dev/vda (ext4, read-write): switch_root".to_string()
        ));
        assert!(w.contains(&format!("LINUX-INIT: eth0 up {VIRTIO_IP}")));
        assert!(w.contains(&"LINUX-INIT: console on hvc0".to_string()));
        let r = virtio_expected(&VIRTIO_CASES[1]);
        assert!(r.iter().any(|l| l.contains("(ext4, read-only)")));
        assert!(!r.iter().any(|l| l.contains("eth0") || l.contains("hvc0")));
    }

    #[test]
    fn virtio_console_case_is_judged_on_both_logs() {
        let case = &VIRTIO_CASES[0];
        let lines = serial(case);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let hvc0 = format!("LINUX-INIT: console on hvc0\nLINUX-TEST: 2 CPUs online\n{PASS_2}\n");
        assert_eq!(
            judge_virtio(case, &boot(&refs), &hvc0),
            Vec::<String>::new()
        );
        // The test's result missing on hvc0, or on the serial port instead.
        assert_eq!(judge_virtio(case, &boot(&refs), "").len(), 2);
        let mut on_serial = refs.clone();
        on_serial.push(PASS_2);
        let p = judge_virtio(case, &boot(&on_serial), "LINUX-INIT: console on hvc0\n");
        assert!(p.iter().any(|p| p.contains("not on hvc0")), "{p:?}");
        // A step missing, steps out of order.
        let p = judge_virtio(case, &boot(&refs[..refs.len() - 1]), &hvc0);
        assert_eq!(p, ["serial log lacks \"LINUX-INIT: console on hvc0\""]);
        let mut swapped = refs.clone();
        let n = swapped.len();
        swapped.swap(n - 1, n - 2);
        let p = judge_virtio(case, &boot(&swapped), &hvc0);
        assert!(p.iter().any(|p| p.contains("out of order")), "{p:?}");
    }

    #[test]
    fn read_only_case_passes_on_the_serial_port() {
        let case = &VIRTIO_CASES[1];
        let mut lines = serial(case);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(judge_virtio(case, &boot(&refs), "").len(), 1);
        lines.push("LINUX-TEST: FAIL fp=1-wrong".into());
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let p = judge_virtio(case, &boot(&refs), "");
        assert_eq!(p, ["the test failed: LINUX-TEST: FAIL fp=1-wrong"]);
        lines.pop();
        lines.push(PASS_2.into());
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert!(judge_virtio(case, &boot(&refs), "").is_empty());
    }

    fn kestrel_virtio_log() -> Vec<String> {
        let mut l = Vec::new();
        for (vm, ip) in [("vm0", "10.0.0.1"), ("vm1", "10.0.0.2")] {
            for t in [
                "LINUX-INIT: root mounted from /dev/vda (ext4, read-write): switch_root",
                "LINUX-INIT: console on hvc0",
                &format!("LINUX-INIT: eth0 up {ip}/24"),
                PASS_2,
                "LINUX-NET: ping 10.0.0.9: 3 packets transmitted, 3 packets received, 0% packet loss",
            ] {
                l.push(format!("[{vm}] {t}"));
            }
        }
        l.push("[vm0] LINUX-NET: serving 4 MiB md5 0123456789abcdef0123456789abcdef".into());
        l.push("[vm1] LINUX-NET: fetched 4 MiB md5 0123456789abcdef0123456789abcdef in 2.80 s (1.43 MiB/s)".into());
        for vm in ["vm0", "vm1"] {
            l.push(format!(
                "[cpu0] INFO  VM \"{vm}\" virtio: console: 1433 bytes out; disk0: 62 reads (2113 KiB), 3 writes (12 KiB), 0 errors; net0: 1500 frames out, 3000 in, 0 dropped"
            ));
        }
        l.push("[cpu0] INFO  kestrel: all VMs have ended (status 0)".into());
        l.push("[cpu0] INFO  kestrel: work done, powering off (status 0)".into());
        l
    }

    fn mix_case() -> &'static KestrelCase {
        KESTREL_CASES
            .iter()
            .chain(ON_DEMAND_CASES.iter())
            .find(|c| c.mix)
            .unwrap()
    }

    /// A passing Juno-mix log, shortened from a real one.
    fn mix_log() -> Vec<String> {
        let mut l = Vec::new();
        for vm in ["a32a", "a32b"] {
            l.push(format!(
                "[cpu0] INFO  vm[0] \"{vm}\": 2 vCPUs, 192 MiB, linux (32-bit ARM zImage, AArch32)"
            ));
        }
        let md5 = |vm: &str| format!("{:0>32}", vm);
        for (i, vm) in ["a32a", "a32b", "a64a", "a64b"].iter().enumerate() {
            for t in [
                format!("LINUX-INIT: eth0 up 10.0.0.{}/24", i + 1),
                PASS_2.to_string(),
                "LINUX-FPSLEEP: cpu 0: 10 rounds of 3000 terms, a 20000 us sleep after each, 0 wrong".into(),
                "LINUX-FPSLEEP: PASS cpus=2 rounds=10 wrong=0".into(),
                format!(
                    "LINUX-DISK: /dev/vda label 'kestrel juno-mix disk of {vm}', wrote 64 KiB at 512 KiB md5 {}, read back md5 {}",
                    md5(vm),
                    md5(vm)
                ),
            ] {
                l.push(format!("[{vm}] {t}"));
            }
            l.push(format!(
                "[cpu0] INFO  VM \"{vm}\" virtio: disk0: 20 reads (84 KiB), 15 writes (64 KiB), 0 errors; net0: 189 frames out, 785 in, 0 dropped"
            ));
        }
        for (fetcher, server, ip) in MIX_PAIRS {
            l.push(format!(
                "[{fetcher}] LINUX-NET: ping {ip}: 3 packets transmitted, 3 packets received, 0% packet loss"
            ));
            l.push(format!(
                "[{server}] LINUX-NET: serving 1 MiB md5 {}",
                md5(server)
            ));
            l.push(format!(
                "[{fetcher}] LINUX-NET: fetched 1 MiB md5 {} in 4.49 s (0.22 MiB/s)",
                md5(server)
            ));
        }
        l.push("[cpu0] INFO  kestrel: all VMs have ended (status 0)".into());
        l.push("[cpu0] INFO  kestrel: work done, powering off (status 0)".into());
        l
    }

    #[test]
    fn juno_mix_passes_on_a_good_log_and_fails_on_each_missing_piece() {
        let case = mix_case();
        let judge = |lines: &[String]| {
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            judge_kestrel(&boot(&refs), case)
        };
        let good = mix_log();
        assert_eq!(judge(&good), Vec::<String>::new());
        for (needle, why) in [
            ("32-bit ARM zImage, AArch32", "AArch32"),
            ("[a64b] LINUX-FPSLEEP: PASS", "LINUX-FPSLEEP: PASS"),
            ("[a32b] LINUX-DISK:", "LINUX-DISK"),
            ("[a32a] LINUX-NET: ping", "ping"),
            ("[a32b] LINUX-NET: fetched", "MD5"),
            ("[a64a] LINUX-INIT: eth0", "eth0"),
            ("VM \"a64a\" virtio", "virtio counters"),
        ] {
            let cut: Vec<String> = good
                .iter()
                .filter(|l| !l.contains(needle))
                .cloned()
                .collect();
            let p = judge(&cut);
            assert!(p.iter().any(|p| p.contains(why)), "{needle}: {p:?}");
        }
        for (from, to, why) in [
            ("3 packets received", "2 packets received", "lost"),
            ("back md5 0000", "back md5 1111", "read back"),
            ("disk of a32b", "disk of a32a", "not its own"),
            ("15 writes", "0 writes", "both ways"),
            ("rounds=10 wrong=0", "rounds=10 wrong=1", "LINUX-FPSLEEP"),
        ] {
            let bad: Vec<String> = good.iter().map(|l| l.replacen(from, to, 1)).collect();
            let p = judge(&bad);
            assert!(p.iter().any(|p| p.contains(why)), "{from} -> {to}: {p:?}");
        }
    }

    fn judged(lines: &[String]) -> Vec<String> {
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        judge_kestrel(&boot(&refs), &KESTREL_CASES[3])
    }

    #[test]
    fn kestrel_virtio_case_passes_on_a_good_log() {
        assert!(KESTREL_CASES[3].virtio);
        assert_eq!(judged(&kestrel_virtio_log()), Vec::<String>::new());
    }

    #[test]
    fn kestrel_virtio_case_fails_on_each_missing_piece() {
        let good = kestrel_virtio_log();
        let edits: [(&str, &str, &str); 6] = [
            ("fetched 4 MiB md5 0123", "fetched 4 MiB md5 9123", "MD5"),
            (
                "[vm1] LINUX-NET: ping 10.0.0.9: 3 packets transmitted, 3 packets received",
                "[vm1] LINUX-NET: ping 10.0.0.9: 3 packets transmitted, 1 packets received",
                "lost packets",
            ),
            (
                "VM \"vm0\" virtio: console: 1433 bytes",
                "VM \"vm0\" virtio: console: 3 bytes",
                "carried 3 bytes",
            ),
            (
                "[vm1] LINUX-INIT: root mounted",
                "[vm1] LINUX-INIT: no root",
                "root mounted",
            ),
            (
                "[vm0] LINUX-INIT: console on hvc0",
                "[vm0] LINUX-INIT: console stays",
                "console on hvc0",
            ),
            ("disk0: 62 reads", "disk0: 0 reads", "not used"),
        ];
        for (from, to, needle) in edits {
            let mut log = good.clone();
            let i = log.iter().position(|l| l.contains(from)).expect(from);
            log[i] = log[i].replacen(from, to, 1);
            let p = judged(&log);
            assert!(p.iter().any(|p| p.contains(needle)), "{needle}: {p:?}");
        }
    }

    #[test]
    fn the_steal_judge_wants_pv_time_and_a_growing_steal_column() {
        let good = [
            "[linux0] [    0.002759] arm-pv: using stolen time PV",
            "[linux0] LINUX-STEAL: /proc/stat steal 0 -> 173 (USER_HZ ticks, all CPUs)",
        ];
        assert_eq!(judge_steal(&boot(&good), &["linux0"]), Vec::<String>::new());
        let flat = [
            "[linux0] arm-pv: using stolen time PV",
            "[linux0] LINUX-STEAL: /proc/stat steal 5 -> 5 (USER_HZ)",
        ];
        let p = judge_steal(&boot(&flat), &["linux0"]);
        assert!(p.iter().any(|p| p.contains("did not grow")), "{p:?}");
        let no_pv = ["[linux0] LINUX-STEAL: /proc/stat steal 0 -> 9 (x)"];
        let p = judge_steal(&boot(&no_pv), &["linux0"]);
        assert!(p.iter().any(|p| p.contains("did not take")), "{p:?}");
        let garbled = [
            "[linux0] arm-pv: using stolen time PV",
            "[linux0] LINUX-STEAL: /proc/stat steal x -> 9",
        ];
        let p = judge_steal(&boot(&garbled), &["linux0"]);
        assert!(p.iter().any(|p| p.contains("unreadable")), "{p:?}");
        let p = judge_steal(&boot(&good), &["linux1"]);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(KESTREL_CASES[1].steal && KESTREL_CASES.iter().filter(|c| c.steal).count() == 1);
    }
}
