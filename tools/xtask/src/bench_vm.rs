//! `cargo xtask bench-vm`: the benchmarks measured with real VMs under
//! kestrel (QEMU), from kestrel's own per-VM counters and the test guests'
//! `BENCH` lines. Counts, not times: the same workload gives the same
//! order of numbers on any machine, and ratios are taken within one run.
//!
//! - FP: exits and FP/SIMD saves+restores per 1000 vCPU switches under the
//!   three policies (`eager`, `save-on-put`, `lazy`), with the test guests'
//!   FP workload (configs/test/*-fp-shared.toml, the policy swapped in).
//! - IPI: exits per IPI, PV hypercall against the emulated path (arm64
//!   trapped ICC_SGI1R_EL1, LoongArch IOCSR), to 1, 3 and all vCPUs, as the
//!   guests measure them; LoongArch also traps per guest timer interrupt.
//! - VMID: fast-path share, rollovers and TLB flushes in the 4-bit rollover runs.
//!
//! A vCPU switch is a vCPU load, which is also one VMID lookup: the sum of
//! kestrel's `vmid_fast` and `vmid_slow` counters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::counters::{parse_host_counters, parse_vm_counters, VmCounters};
use crate::qemu::Runner;
use crate::{qemu, root, Arch, Opts};

/// How long one benchmark boot may take.
const LIMIT: Duration = Duration::from_secs(600);

/// The `key=value` fields of a `BENCH` line.
fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

fn build_guest(arch: Arch) -> Result<(), String> {
    match arch {
        Arch::Aarch64 => crate::guests::build_guest_arm64().map(|_| ()),
        Arch::LoongArch64 => crate::guests::build_guest_la64().map(|_| ()),
    }
}

fn prefix(arch: Arch) -> &'static str {
    match arch {
        Arch::Aarch64 => "arm64",
        Arch::LoongArch64 => "la64",
    }
}

/// Boots kestrel with `config` (and `features`) until it powers off;
/// returns the serial log.
fn boot(arch: Arch, config: &Path, features: &[&str]) -> Result<String, String> {
    let features: Vec<String> = features.iter().map(|s| s.to_string()).collect();
    let image = crate::build_image_with(arch, &features, Some(config))?;
    // Each boot gets its own copy: other builds may replace the shared image.
    let private = root()
        .join("build/bench-vm")
        .join(format!("kestrel-{}", image_name(config)));
    std::fs::copy(&image, &private).map_err(|e| format!("{}: {e}", private.display()))?;
    let opts = Opts {
        arch,
        smp: 4,
        gic: 3,
        mem_mib: if features.is_empty() { 1024 } else { 2048 },
        features,
        append: crate::TEST_APPEND.into(),
        config: Some(config.to_path_buf()),
        lvz: false,
        module: None,
        as_module: false,
    };
    let b = Runner::new(qemu::command(&opts, &private, true), LIMIT).run()?;
    let log = b.text();
    if b.timed_out || !log.contains("all VMs have ended (status 0)") {
        return Err(format!(
            "{}: the VMs did not all end well (timed out: {}); last lines:\n{}",
            config.display(),
            b.timed_out,
            log.lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(log)
}

fn image_name(config: &Path) -> String {
    config
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image".into())
}

/// The FP-policy table of one architecture.
fn fp_policies(arch: Arch) -> Result<(), String> {
    let base = root().join(format!("configs/test/{}-fp-shared.toml", prefix(arch)));
    let text = std::fs::read_to_string(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    if !text.contains("fp_policy = \"lazy\"") {
        return Err(format!(
            "{}: expected a line fp_policy = \"lazy\"",
            base.display()
        ));
    }
    // Same depth as configs/test, so the config's relative paths still hold.
    let dir = root().join("build/bench-vm");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "== {}: FP/SIMD switching with the test guest's FP workload ({}) ==",
        arch.name(),
        base.strip_prefix(root()).unwrap_or(&base).display()
    );
    println!(
        "{:<12} {:>14} {:>20} {:>24} {:>18} {:>26}",
        "policy",
        "vCPU switches",
        "exits/1000 switches",
        "FP saves+restores/1000",
        "FP traps/1000",
        "of them SVE-sized/1000"
    );
    let mut rows = Vec::new();
    for policy in ["eager", "save-on-put", "lazy"] {
        let config: PathBuf = dir.join(format!("{}-fp-{policy}.toml", prefix(arch)));
        let text = text.replace("fp_policy = \"lazy\"", &format!("fp_policy = \"{policy}\""));
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let vms = parse_vm_counters(&boot(arch, &config, &[])?);
        if vms.is_empty() {
            return Err(format!(
                "{}: kestrel printed no per-VM counters",
                config.display()
            ));
        }
        let sum = |k: &str| vms.iter().map(|v| v.get(k)).sum::<u64>();
        let switches: u64 = vms.iter().map(VmCounters::switches).sum();
        let exits: u64 = vms.iter().map(|v| v.exits).sum();
        let per_k = |n: u64| n as f64 * 1000.0 / switches.max(1) as f64;
        let fp = sum("fp_saves") + sum("fp_restores");
        let sve = sum("sve_saves") + sum("sve_restores");
        println!(
            "{:<12} {:>14} {:>20.1} {:>24.1} {:>18.1} {:>26.1}",
            policy,
            switches,
            per_k(exits),
            per_k(fp),
            per_k(sum("fp_traps")),
            per_k(sve)
        );
        rows.push((policy, per_k(fp)));
    }
    let eager = rows[0].1;
    let lazy = rows[2].1;
    println!(
        "every vCPU here uses FP, so most switches change the FP owner; lazy does {:.0}% fewer FP saves+restores than eager\n",
        if eager > 0.0 { 100.0 * (1.0 - lazy / eager) } else { 0.0 }
    );
    if arch == Arch::Aarch64 {
        sve_sizes();
    }
    Ok(())
}

/// Bytes one save or restore moves, FP/SIMD against SVE at each
/// power-of-two vector length (`kernel::vcpu::fpu::Arm64SveState`: Z0-Z31,
/// P0-P15 and FFR, with FPSR/FPCR and ZCR_EL1 beside).
fn sve_sizes() {
    println!("== arm64: bytes per FP/SIMD or SVE save (a restore moves the same) ==");
    println!(
        "{:<16} {:>8} {:>10} {:>8} {:>8}",
        "state", "Z or V", "P + FFR", "control", "total"
    );
    println!(
        "{:<16} {:>8} {:>10} {:>8} {:>8}",
        "FP/SIMD (narrow)", 512, 0, 16, 528
    );
    for bits in [128u32, 256, 512, 1024, 2048] {
        let (z, p) = (32 * bits / 8, 17 * bits / 64);
        println!(
            "{:<16} {:>8} {:>10} {:>8} {:>8}",
            format!("SVE {bits}-bit"),
            z,
            p,
            24,
            z + p + 24
        );
    }
    println!("(a vCPU whose SVE state holds nothing beyond its V registers is saved narrow again; the fp-shared VMs run SVE at 512 and 256 bits and keep patterns in P and FFR, so their SVE state stays wide)\n");
}

/// The IPI table of one architecture from its 1-VM test run.
fn ipi(arch: Arch) -> Result<(), String> {
    let config = root().join(format!("configs/test/{}-1vm.toml", prefix(arch)));
    let log = boot(arch, &config, &[])?;
    let emulated = match arch {
        Arch::Aarch64 => "sgi",
        Arch::LoongArch64 => "iocsr",
    };
    println!(
        "== {}: exits per IPI, measured in the test guest (PV hypercall vs {}) ==",
        arch.name(),
        match arch {
            Arch::Aarch64 => "trapped ICC_SGI1R_EL1",
            Arch::LoongArch64 => "emulated IOCSR IPI_SEND",
        }
    );
    println!(
        "{:<8} {:>10} {:>10} {:>12} {:>10} {:>10} {:>12}",
        "targets", "PV total", "PV send", "PV receive", "emul total", "emul send", "emul receive"
    );
    let find = |mode: &str, t: &str| {
        log.lines()
            .find(|l| l.contains(&format!("BENCH ipi {mode} targets={t} ")))
            .map(fields)
    };
    let mut rows = 0;
    for t in ["1", "3", "all"] {
        let (Some(pv), Some(em)) = (find("pv", t), find(emulated, t)) else {
            continue;
        };
        let g = |m: &BTreeMap<&str, &str>, k: &str| m.get(k).copied().unwrap_or("-").to_string();
        // arm64 lines give the send as hvc/ipi exits, LoongArch as sender=.
        let send = |m: &BTreeMap<&str, &str>| {
            m.get("sender")
                .or_else(|| m.get("hvc"))
                .or_else(|| m.get("ipi"))
                .copied()
                .unwrap_or("-")
                .to_string()
        };
        let recv = |m: &BTreeMap<&str, &str>| {
            m.get("receivers")
                .or_else(|| m.get("irq"))
                .copied()
                .unwrap_or("-")
                .to_string()
        };
        println!(
            "{:<8} {:>10} {:>10} {:>12} {:>10} {:>10} {:>12}",
            t,
            g(&pv, "exits_per_ipi"),
            send(&pv),
            recv(&pv),
            g(&em, "exits_per_ipi"),
            send(&em),
            recv(&em)
        );
        rows += 1;
    }
    if rows == 0 {
        return Err(format!(
            "{}: the guest printed no BENCH ipi lines",
            config.display()
        ));
    }
    if let Some(t) = log.lines().find(|l| l.contains("BENCH timer ")) {
        let f = fields(t);
        println!(
            "traps per guest timer interrupt: {}",
            f.get("traps_per_irq").copied().unwrap_or("-")
        );
    }
    println!("(receive-side exits on arm64 are the kicks of running targets; a trap-and-emulate LoongArch receiver also traps on its handler's privileged instructions)\n");
    Ok(())
}

/// The VMID table of one architecture from its 4-bit rollover run.
fn vmid(arch: Arch) -> Result<(), String> {
    let config = root().join(format!("configs/test/{}-rollover.toml", prefix(arch)));
    let log = boot(arch, &config, &["vmid4"])?;
    let vms = parse_vm_counters(&log);
    let host = parse_host_counters(&log);
    if vms.is_empty() {
        return Err(format!(
            "{}: kestrel printed no per-VM counters",
            config.display()
        ));
    }
    let sum = |k: &str| vms.iter().map(|v| v.get(k)).sum::<u64>();
    let loads = sum("vmid_fast") + sum("vmid_slow");
    println!(
        "== {}: VMIDs in the rollover run ({} VMs, 4-bit VMIDs, 4 pCPUs) ==",
        arch.name(),
        vms.len()
    );
    println!(
        "vCPU loads {loads}   fast path {:.1}%   rollovers {}   TLB flushes {}\n",
        100.0 * sum("vmid_fast") as f64 / loads.max(1) as f64,
        host.get("vmid_rollovers").copied().unwrap_or(0),
        host.get("tlb_flushes").copied().unwrap_or(0)
    );
    Ok(())
}

/// `cargo xtask bench-vm [--arch A]`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut arches = vec![Arch::Aarch64, Arch::LoongArch64];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--arch" => arches = vec![Arch::parse(it.next().ok_or("--arch needs a value")?)?],
            other => return Err(format!("bench-vm: unknown option '{other}'")),
        }
    }
    std::fs::create_dir_all(root().join("build/bench-vm")).map_err(|e| e.to_string())?;
    for arch in arches {
        build_guest(arch)?;
        fp_policies(arch)?;
        ipi(arch)?;
        vmid(arch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_fields() {
        let f = fields("[a] BENCH ipi pv targets=3 exits_per_ipi=4.42 hvc=1.00 irq=3.42");
        assert_eq!(f.get("targets"), Some(&"3"));
        assert_eq!(f.get("exits_per_ipi"), Some(&"4.42"));
        assert_eq!(f.get("irq"), Some(&"3.42"));
    }
}
