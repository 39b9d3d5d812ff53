//! kestrel's per-VM counters, as it prints them in the serial log when a
//! VM ends: read by the benchmarks (`bench-vm`, `bench-seeds`) and by the
//! judges of the Linux cases.

use std::collections::BTreeMap;

/// Per-VM counters kestrel prints when a VM ends
/// (`vm "x" powered off; exits N: ...` then `fp: ...`, `vmid: ...`, `ipi: ...`,
/// `emulated ipi: ...`, `mem: ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmCounters {
    pub name: String,
    pub exits: u64,
    pub values: BTreeMap<String, u64>,
}

impl VmCounters {
    /// Counter `key`, 0 when kestrel did not print it.
    pub fn get(&self, key: &str) -> u64 {
        self.values.get(key).copied().unwrap_or(0)
    }
    /// vCPU switches: vCPU loads, each one VMID lookup (`vmid_fast` +
    /// `vmid_slow`).
    pub fn switches(&self) -> u64 {
        self.get("vmid_fast") + self.get("vmid_slow")
    }
}

/// kestrel's host counters (`host counters: vmid_rollovers=R ...`, logged
/// when the last VM has ended): VMID rollovers and TLB flushes belong to
/// no one VM, so no VM's counters show them.
pub fn parse_host_counters(log: &str) -> BTreeMap<String, u64> {
    log.lines()
        .filter_map(|l| l.split("host counters: ").nth(1))
        .next_back()
        .map(|pairs| {
            pairs
                .split_whitespace()
                .filter_map(|p| p.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Every VM's end-of-run counters in a serial log.
pub fn parse_vm_counters(log: &str) -> Vec<VmCounters> {
    let mut out = Vec::new();
    let mut current: Option<VmCounters> = None;
    for line in log.lines() {
        // arm64 says `VM "x" powered off; stats: exits N: ...`, LoongArch
        // `vm "x" powered off; exits N: ...`.
        let start = line
            .split("INFO  vm \"")
            .nth(1)
            .or_else(|| line.split("INFO  VM \"").nth(1));
        if let Some(rest) = start {
            if let Some(c) = current.take() {
                out.push(c);
            }
            let Some((name, tail)) = rest.split_once('"') else {
                continue;
            };
            let Some(exits) = tail
                .split("exits ")
                .nth(1)
                .and_then(|t| t.split(':').next())
                .and_then(|n| n.trim().parse().ok())
            else {
                continue;
            };
            // The exit reasons on the same line, as `exit_<reason>`.
            let values = tail
                .split("exits ")
                .nth(1)
                .and_then(|t| t.split_once(':'))
                .map(|(_, pairs)| {
                    pairs
                        .split_whitespace()
                        .filter_map(|p| p.split_once('='))
                        .filter_map(|(k, v)| Some((format!("exit_{k}"), v.parse().ok()?)))
                        .collect()
                })
                .unwrap_or_default();
            current = Some(VmCounters {
                name: name.to_string(),
                exits,
                values,
            });
            continue;
        }
        let Some(c) = current.as_mut() else { continue };
        let trimmed = line.trim();
        let group = ["fp:", "vmid:", "ipi:", "emulated ipi:", "mem:", "sve:"]
            .iter()
            .find_map(|g| trimmed.strip_prefix(g));
        match group {
            Some(pairs) => {
                for pair in pairs.split_whitespace() {
                    if let Some((k, v)) = pair.split_once('=') {
                        if let Ok(v) = v.parse() {
                            c.values.insert(k.to_string(), v);
                        }
                    }
                }
            }
            None => out.extend(current.take()),
        }
    }
    out.extend(current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_host_counters_kestrel_prints() {
        let log = "[cpu0] INFO  the last VM has ended\n\
                   [cpu0] INFO  host counters: vmid_rollovers=4 tlb_flushes=9 fp_saves=2\n";
        let h = parse_host_counters(log);
        assert_eq!(h.get("vmid_rollovers"), Some(&4));
        assert_eq!(h.get("tlb_flushes"), Some(&9));
        assert!(parse_host_counters("nothing").is_empty());
    }

    #[test]
    fn reads_the_per_vm_counters_kestrel_prints() {
        let log = "\
[cpu2] INFO  vm \"fp-b\" powered off; exits 151294: hypercall=163 sysreg=51521
fp: fp_saves=7711 fp_restores=7756 fp_traps=7756
vmid: vmid_fast=8943 vmid_slow=2
ipi: ipi_sent=150 ipi_delivered=400
[fp-c] PASS fp-lsx: something
[cpu0] INFO  vm \"fp-c\" powered off; exits 10: hypercall=1
vmid: vmid_fast=5 vmid_rollovers=1
";
        let vms = parse_vm_counters(log);
        assert_eq!(vms.len(), 2);
        let arm = parse_vm_counters(
            "[cpu1] INFO  VM \"a\" powered off; stats: exits 7: hvc=7\nfp: fp_saves=3\n",
        );
        assert_eq!(arm.len(), 1);
        assert_eq!(
            (arm[0].name.as_str(), arm[0].exits, arm[0].get("fp_saves")),
            ("a", 7, 3)
        );
        assert_eq!(vms[0].name, "fp-b");
        assert_eq!(vms[0].exits, 151_294);
        assert_eq!(vms[0].get("fp_restores"), 7756);
        assert_eq!(vms[0].switches(), 8945);
        assert_eq!(vms[1].name, "fp-c");
        assert_eq!(vms[1].get("vmid_rollovers"), 1);
        assert_eq!(vms[1].get("fp_saves"), 0);
    }
}
