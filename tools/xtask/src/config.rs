//! The VM config file (TOML) and its packing into a kestrel package.
//!
//! `cargo xtask image --config FILE` calls [`write_package`]: the config is
//! read and every check below is made, the guest images are read and
//! checked, the package is built and read back with the hypervisor's own
//! reader; only then is `build/<arch>/package.bin` written. Any problem is a
//! [`ConfigError`] naming the file, the field (`vm[1].memory`) and the
//! problem. The schema is documented in `docs/config.md`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use kestrel_abi::image::{
    arm32_layout, Arm64Image, Elf, ZImage, EM_AARCH64, EM_LOONGARCH, ZIMAGE_MAGIC,
    ZIMAGE_MAGIC_OFFSET, ZIMAGE_SLACK,
};
use kestrel_abi::package::{
    self, Affinity, ConsoleKind, Device, FpPolicy, GuestKind, GuestLayout, HypervisorSettings,
    Package, VmInput, Writer,
};
use serde::Deserialize;

use crate::Arch;

/// A config problem: file, field, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// `vm[1].memory`, `hypervisor.tick_hz`, or "" for the file as a whole.
    pub field: String,
    /// 1-based line and column, when known.
    pub line_col: Option<(usize, usize)>,
    pub problem: String,
    /// The config's further problems (in other VMs), found after this one.
    pub more: Vec<ConfigError>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((l, c)) = self.line_col {
            write!(f, ":{l}:{c}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.problem)?;
        for m in &self.more {
            write!(f, "\n{m}")?;
        }
        Ok(())
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    hypervisor: RawHypervisor,
    #[serde(default)]
    vm: Vec<RawVm>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RawHypervisor {
    fp_policy: Option<String>,
    tick_hz: Option<i64>,
    max_cpus: Option<i64>,
    console: Option<String>,
    scrollback: Option<RawSize>,
}

/// A size: bytes as an integer, or a string with a K/M/G suffix.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum RawSize {
    Bytes(i64),
    Text(String),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawVm {
    name: String,
    vcpus: i64,
    memory: RawSize,
    cpus: Option<Vec<i64>>,
    #[serde(default)]
    pinned: bool,
    /// With `pinned`: false lets other VMs list the same pCPUs.
    exclusive: Option<bool>,
    kernel: String,
    initrd: Option<String>,
    #[serde(default)]
    cmdline: String,
    dtb: Option<String>,
    console: Option<String>,
    kind: Option<String>,
    /// arm64 only: the state of the VM's EL1, "aarch64" (default) or
    /// "aarch32" (a 32-bit guest; a zImage kernel implies it).
    arch: Option<String>,
    #[serde(default)]
    virtio_console: bool,
    on_reboot: Option<String>,
    #[serde(default)]
    disk: Vec<RawDisk>,
    #[serde(default)]
    net: Vec<RawNet>,
    #[serde(default)]
    identity: bool,
    #[serde(default = "yes")]
    pv_ipi: bool,
    #[serde(default = "yes")]
    pv_time: bool,
    #[serde(default)]
    sve: bool,
    sve_max_vl: Option<i64>,
    #[serde(default)]
    passthrough: Vec<RawPassthrough>,
}

fn yes() -> bool {
    true
}

/// The VM's SVE vector length in bits from `sve` and `sve_max_vl` (0:
/// hidden). kestrel gives the VM the longest length the CPU supports up
/// to this one (docs/config.md).
fn sve_vl(
    v: &RawVm,
    arch: Arch,
    f: &dyn Fn(&str) -> String,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<u16, ConfigError> {
    let (step, max) = (package::SVE_VL_STEP, package::SVE_VL_MAX);
    if arch != Arch::Aarch64 && (v.sve || v.sve_max_vl.is_some()) {
        let key = if v.sve { "sve" } else { "sve_max_vl" };
        return Err(err(
            &f(key),
            "SVE is arm64's: LoongArch VMs get FP/LSX/LASX without a key; remove it".into(),
        ));
    }
    match (v.sve, v.sve_max_vl) {
        (false, None) => Ok(0),
        (false, Some(_)) => Err(err(
            &f("sve_max_vl"),
            "needs sve = true (SVE is hidden from a VM unless it asks for it)".into(),
        )),
        (true, None) => Ok(max),
        (true, Some(bits)) => {
            if bits < i64::from(step) || bits > i64::from(max) || bits % i64::from(step) != 0 {
                Err(err(
                    &f("sve_max_vl"),
                    format!(
                        "{bits} bits: an SVE vector length is a multiple of {step} bits from {step} to {max} (e.g. 256 or 512)"
                    ),
                ))
            } else {
                Ok(bits as u16)
            }
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawPassthrough {
    reg: Vec<i64>,
    #[serde(default)]
    interrupts: Vec<i64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawDisk {
    image: String,
    #[serde(default)]
    read_only: bool,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawNet {
    network: String,
    mac: Option<String>,
    #[serde(default)]
    allow_mac_spoofing: bool,
    #[serde(default)]
    learn: i64,
    broadcast_rate: Option<i64>,
}

/// A disk or network port of a VM, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceConfig {
    Disk {
        image: Vec<u8>,
        read_only: bool,
    },
    Net {
        network: String,
        mac: Option<[u8; 6]>,
        allow_mac_spoofing: bool,
        learn: u16,
        /// 0: kestrel's default.
        broadcast_rate: u32,
    },
}

impl DeviceConfig {
    fn as_device(&self) -> Device<'_> {
        match self {
            DeviceConfig::Disk { image, read_only } => Device::Disk {
                image,
                read_only: *read_only,
            },
            DeviceConfig::Net {
                network,
                mac,
                allow_mac_spoofing,
                learn,
                broadcast_rate,
            } => Device::Net {
                network,
                mac: *mac,
                allow_mac_spoofing: *allow_mac_spoofing,
                learn: *learn,
                broadcast_rate: *broadcast_rate,
            },
        }
    }
}

/// `"02:00:00:00:00:01"` as bytes: six hex pairs, unicast, not all zero.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || format!("bad MAC \"{s}\": use six hex pairs, e.g. \"02:00:00:00:00:01\"");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(&parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *m = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 != 0 {
        return Err(format!(
            "MAC \"{s}\" is a multicast address: a VM needs a unicast one"
        ));
    }
    if mac == [0; 6] {
        return Err(format!("MAC \"{s}\" is all zero"));
    }
    Ok(mac)
}

/// One checked VM with its images loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmConfig {
    pub name: String,
    pub vcpus: u16,
    pub memory: u64,
    pub affinity: Affinity,
    pub kind: GuestKind,
    pub console: ConsoleKind,
    pub kernel: Vec<u8>,
    pub initrd: Option<Vec<u8>>,
    pub dtb: Option<Vec<u8>>,
    pub cmdline: String,
    pub load_offset: u64,
    pub entry_offset: u64,
    pub kernel_footprint: u64,
    /// A virtio console (`hvc0`) beside the UART.
    pub virtio_console: bool,
    /// `on_reboot = "stop"`: a guest reset ends the VM (default: restart).
    pub reboot_stop: bool,
    /// Disks, then network ports, in config order.
    pub devices: Vec<DeviceConfig>,
    /// Host devices passed through, in config order.
    pub passthrough: Vec<package::Passthrough>,
    /// RAM at IPA == PA.
    pub identity: bool,
    /// `pv_ipi = false`: the PV IPI feature hidden from the guest (default:
    /// offered).
    pub pv_ipi: bool,
    /// `pv_time = false`: arm64 paravirtual stolen time not offered
    /// (default: offered).
    pub pv_time: bool,
    /// arm64 SVE: the VM's maximum vector length in bits (`sve = true`,
    /// `sve_max_vl`, default [`package::SVE_VL_MAX`]: the CPU's longest);
    /// 0 = SVE hidden (the default).
    pub sve_vl: u16,
}

/// A checked config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub file: PathBuf,
    pub arch: Arch,
    pub settings: HypervisorSettings,
    pub vms: Vec<VmConfig>,
}

/// Longest command line (Linux arm64's COMMAND_LINE_SIZE is 2048, with the NUL).
pub const MAX_CMDLINE: usize = 2047;
/// Largest guest RAM accepted (1 TiB).
pub const MAX_MEMORY: u64 = 1 << 40;

/// Parses a size: `536870912`, `"512M"`, `"512MiB"`, `"1G"`, `"65536K"`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits);
    let bad = || {
        format!(
            "bad size \"{s}\": use a number of bytes, or a number with B, K (k, KiB), M (MiB), G (GiB) or T (TiB), powers of 1024 (e.g. \"512M\")"
        )
    };
    if num.is_empty() {
        return Err(bad());
    }
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match suffix.trim() {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size \"{s}\" is too large"))
}

/// Reads and checks `file` for `arch`.
pub fn load(file: &Path, arch: Arch) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
        file: file.to_path_buf(),
        field: String::new(),
        line_col: None,
        problem: format!("cannot read the config: {e}"),
        more: Vec::new(),
    })?;
    parse(&text, file, arch)
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// Checks config `text` as if read from `file` (relative paths resolve
/// against `file`'s directory). An error names the line of its field
/// (`locate`) and says what to write for the common slips (`explain`).
pub fn parse(text: &str, file: &Path, arch: Arch) -> Result<Config, ConfigError> {
    let first = match check(text, file, arch) {
        Ok(cfg) => return Ok(cfg),
        Err(e) => e,
    };
    // The other VMs' problems: check again without the VM (or the
    // [hypervisor] key) at fault, blanked out line for line so that line
    // numbers stay those of the file, until no new problem shows.
    let mut all = vec![first];
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    // The original index of each VM still in `lines`.
    let mut vms: Vec<usize> = (0..vm_headers(&lines).len()).collect();
    while all.len() < 64 {
        let last = all.last().expect("one error at least");
        let Some(fault) = fault_of(&last.field) else {
            break;
        };
        let blanked = match fault {
            Fault::Vm(i) => {
                let ok = blank_vm(&mut lines, i);
                if ok {
                    vms.remove(i);
                }
                ok
            }
            Fault::Hypervisor(key) => blank_hypervisor_key(&mut lines, key),
        };
        if !blanked || vms.is_empty() {
            break;
        }
        match check(&lines.join("\n"), file, arch) {
            Ok(_) => break,
            Err(mut e) => {
                // Back to the file's VM numbers.
                if let Some(Fault::Vm(i)) = fault_of(&e.field) {
                    let Some(&orig) = vms.get(i) else { break };
                    e.field = e
                        .field
                        .replacen(&format!("vm[{i}]"), &format!("vm[{orig}]"), 1);
                }
                if all
                    .iter()
                    .any(|a| a.field == e.field && a.problem == e.problem)
                {
                    break;
                }
                all.push(e);
            }
        }
    }
    let mut all: Vec<ConfigError> = all
        .into_iter()
        .map(|mut e| {
            e.problem = explain(&e.field, &e.problem);
            if e.line_col.is_none() || e.problem.starts_with("write [[") {
                e.line_col = locate(text, &e.field).or(e.line_col);
            }
            e
        })
        .collect();
    let mut first = all.remove(0);
    first.more = all;
    Err(first)
}

/// Where a problem is: in a VM (by index in the text checked) or a key of
/// `[hypervisor]`.
enum Fault<'a> {
    Vm(usize),
    Hypervisor(&'a str),
}

fn fault_of(field: &str) -> Option<Fault<'_>> {
    if let Some(key) = field.strip_prefix("hypervisor.") {
        return Some(Fault::Hypervisor(key));
    }
    let rest = field.strip_prefix("vm[")?;
    let (n, _) = rest.split_once(']')?;
    n.parse().ok().map(Fault::Vm)
}

/// The line numbers of the `[[vm]]` headers.
fn vm_headers(lines: &[String]) -> Vec<usize> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim().starts_with("[[vm]]"))
        .map(|(n, _)| n)
        .collect()
}

/// Blanks the lines of VM `i` (its `[[vm]]` table and its sub-tables).
fn blank_vm(lines: &mut [String], i: usize) -> bool {
    let heads = vm_headers(lines);
    let Some(&start) = heads.get(i) else {
        return false;
    };
    let end = lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .find(|(_, l)| {
            let l = l.trim();
            l.starts_with('[') && !l.starts_with("[[vm.") && !l.starts_with("[vm.")
        })
        .map_or(lines.len(), |(n, _)| n);
    for l in &mut lines[start..end] {
        l.clear();
    }
    true
}

/// Blanks the line of `key` in `[hypervisor]`.
fn blank_hypervisor_key(lines: &mut [String], key: &str) -> bool {
    let mut inside = false;
    for l in lines.iter_mut() {
        let t = l.trim();
        if t.starts_with('[') {
            inside = t == "[hypervisor]";
        } else if inside && t.split('=').next().map(str::trim) == Some(key) {
            l.clear();
            return true;
        }
    }
    false
}

/// The last name in a field path: `vcpus` of `vm[1].vcpus`, `disk` of `vm[0].disk`.
fn key_of(field: &str) -> &str {
    let last = field.rsplit('.').next().unwrap_or(field);
    last.split('[').next().unwrap_or(last)
}

/// A problem as the user can act on it: type errors say what the value
/// must be, a table written where an array of tables is needed says what
/// to write.
fn explain(field: &str, problem: &str) -> String {
    let key = key_of(field);
    let Some(rest) = problem.strip_prefix("invalid type: ") else {
        return problem.to_string();
    };
    let (got, want) = rest.split_once(", expected ").unwrap_or((rest, ""));
    if got == "map"
        && want.contains("sequence")
        && matches!(key, "disk" | "net" | "passthrough" | "vm")
    {
        let table = if key == "vm" {
            String::from("vm")
        } else {
            format!("vm.{key}")
        };
        return format!(
            "write [[{table}]] (two brackets: each one is a table in an array, repeatable), not [{table}]"
        );
    }
    let what = match want {
        w if w.starts_with("i64") || w.starts_with("u") || w.contains("integer") => "a number",
        w if w.contains("boolean") => "true or false",
        w if w.contains("string") => "a string in quotes",
        w if w.contains("sequence") => "a list in brackets, e.g. [0, 1]",
        _ => return problem.to_string(),
    };
    let hint = match (what, got) {
        ("a number", g) if g.starts_with("string") => {
            let v = g.trim_start_matches("string ").trim_matches('"');
            format!(" (write {key} = {v}, without quotes)")
        }
        _ => String::new(),
    };
    format!("{key} must be {what}, not {got}{hint}")
}

/// The line and column of `field` (`vm[1].memory`, `hypervisor.tick_hz`,
/// `vm[0].disk[1].image`, `vm[2]`) in config `text`: its key's line in its
/// table, or the table's header when the key is not written.
pub fn locate(text: &str, field: &str) -> Option<(usize, usize)> {
    // The wanted table: (section, vm index, sub-table and index), and key.
    let mut vm: Option<usize> = None;
    let mut sub: Option<(&str, usize)> = None;
    let mut hyper = false;
    let mut key: Option<&str> = None;
    for part in field.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        match (name, index) {
            ("vm", Some(i)) if vm.is_none() && !hyper => vm = Some(i),
            ("hypervisor", None) if vm.is_none() => hyper = true,
            (n, Some(i)) if vm.is_some() && sub.is_none() => sub = Some((n, i)),
            (n, _) => key = Some(n),
        }
    }
    if vm.is_none() && !hyper {
        return None;
    }
    // Scan: the table each line is in.
    let (mut cur_vm, mut cur_sub, mut in_hyper) = (None::<usize>, None::<(String, usize)>, false);
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut header = None;
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        let col = line.len() - line.trim_start().len() + 1;
        if let Some(h) = l.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let h = h.trim();
            in_hyper = false;
            if h == "vm" {
                cur_vm = Some(cur_vm.map_or(0, |v| v + 1));
                cur_sub = None;
                counts.clear();
            } else if let Some(s) = h.strip_prefix("vm.") {
                let c = match counts.iter_mut().find(|(k, _)| k == s) {
                    Some((_, c)) => {
                        *c += 1;
                        *c
                    }
                    None => {
                        counts.push((s.to_string(), 0));
                        0
                    }
                };
                cur_sub = Some((s.to_string(), c));
            }
        } else if let Some(h) = l.strip_prefix('[').and_then(|r| r.split(']').next()) {
            let h = h.trim();
            in_hyper = h == "hypervisor";
            if let Some(s) = h.strip_prefix("vm.") {
                cur_sub = Some((s.to_string(), 0));
            }
        } else if let Some((k, _)) = l.split_once('=') {
            let here = if hyper {
                in_hyper
            } else {
                cur_vm == vm && cur_sub.as_ref().map(|(s, i)| (s.as_str(), *i)) == sub
            };
            if here && Some(k.trim().trim_matches('"')) == key {
                return Some((n + 1, col));
            }
            continue;
        } else {
            continue;
        }
        let here = if hyper {
            in_hyper
        } else {
            cur_vm == vm && cur_sub.as_ref().map(|(s, i)| (s.as_str(), *i)) == sub
        };
        if here && header.is_none() {
            header = Some((n + 1, col));
        }
    }
    // Not written: a field of a sub-table not found names its table's
    // header; a missing key names the table's header.
    header
}

fn check(text: &str, file: &Path, arch: Arch) -> Result<Config, ConfigError> {
    let err = |field: &str, problem: String| ConfigError {
        file: file.to_path_buf(),
        field: field.to_string(),
        line_col: None,
        problem,
        more: Vec::new(),
    };
    let de = toml::Deserializer::new(text);
    let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ConfigError {
            file: file.to_path_buf(),
            field: if path == "." { String::new() } else { path },
            line_col: inner.span().map(|s| line_col(text, s.start)),
            problem: inner.message().trim().to_string(),
            more: Vec::new(),
        }
    })?;
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();

    // [hypervisor]
    let h = &raw.hypervisor;
    let fp_policy = match h.fp_policy.as_deref() {
        None => FpPolicy::Default,
        Some("eager") => FpPolicy::Eager,
        Some("save-on-put") => FpPolicy::SaveOnPut,
        Some("lazy") => FpPolicy::Lazy,
        Some(o) => {
            return Err(err(
                "hypervisor.fp_policy",
                format!("unknown policy \"{o}\": use eager, save-on-put or lazy"),
            ))
        }
    };
    let tick_hz = match h.tick_hz {
        None => 0,
        Some(t) if (1..=10_000).contains(&t) => t as u32,
        Some(t) => {
            return Err(err(
                "hypervisor.tick_hz",
                format!("{t} is out of range 1..=10000"),
            ))
        }
    };
    let max_cpus = match h.max_cpus {
        None => 16,
        Some(n) if (1..=package::MAX_PCPUS as i64).contains(&n) => n as u8,
        Some(n) => {
            return Err(err(
                "hypervisor.max_cpus",
                format!("{n} is out of range 1..={}", package::MAX_PCPUS),
            ))
        }
    };
    let console = match h.console.as_deref() {
        None => package::ConsoleMode::Default,
        Some("raw") => package::ConsoleMode::Raw,
        Some("log") => package::ConsoleMode::Log,
        Some(o) => {
            return Err(err(
                "hypervisor.console",
                format!("unknown console mode \"{o}\": use raw or log"),
            ))
        }
    };
    let scrollback = match &h.scrollback {
        None => 0,
        Some(s) => {
            let n = match s {
                RawSize::Bytes(b) => u64::try_from(*b).map_err(|_| format!("{b} is negative")),
                RawSize::Text(t) => parse_size(t),
            }
            .map_err(|e| err("hypervisor.scrollback", e))?;
            if !(1..=u64::from(package::MAX_SCROLLBACK)).contains(&n) {
                return Err(err(
                    "hypervisor.scrollback",
                    format!("{n} bytes is out of range 1..={}", package::MAX_SCROLLBACK),
                ));
            }
            n as u32
        }
    };
    let settings = HypervisorSettings {
        fp_policy,
        max_cpus,
        tick_hz,
        console,
        scrollback,
    };

    if raw.vm.is_empty() {
        return Err(err(
            "vm",
            "the config lists no VM: add a [[vm]] table".into(),
        ));
    }
    if raw.vm.len() > package::MAX_VMS {
        return Err(err(
            "vm",
            format!("{} VMs, at most {}", raw.vm.len(), package::MAX_VMS),
        ));
    }

    let mut names: HashMap<String, usize> = HashMap::new();
    let mut pinned_owner: HashMap<u32, usize> = HashMap::new();
    let mut shared_cpus: Vec<(usize, u32)> = Vec::new();
    let mut vms = Vec::new();
    // Passthrough claims so far: (VM, region index, base, end) and (VM, SPI).
    let mut regions: Vec<(usize, usize, u64, u64)> = Vec::new();
    let mut spi_owner: HashMap<u32, usize> = HashMap::new();
    // Configured MACs per network: (network, MAC) -> the port naming it.
    let mut macs: HashMap<(String, [u8; 6]), String> = HashMap::new();
    for (i, v) in raw.vm.iter().enumerate() {
        let f = |name: &str| format!("vm[{i}].{name}");

        // name
        if v.name.is_empty() || v.name.len() > package::NAME_LEN {
            return Err(err(
                &f("name"),
                format!(
                    "\"{}\" must be 1 to {} characters",
                    v.name,
                    package::NAME_LEN
                ),
            ));
        }
        if !v.name.bytes().all(package::is_name_byte) {
            return Err(err(
                &f("name"),
                format!("\"{}\" may only use a-z, 0-9, _ and -", v.name),
            ));
        }
        if let Some(first) = names.insert(v.name.clone(), i) {
            return Err(err(
                &f("name"),
                format!("\"{}\" is already the name of vm[{first}]", v.name),
            ));
        }

        // vcpus
        if !(1..=package::MAX_VCPUS as i64).contains(&v.vcpus) {
            return Err(err(
                &f("vcpus"),
                format!("{} is out of range 1..={}", v.vcpus, package::MAX_VCPUS),
            ));
        }
        let vcpus = v.vcpus as u16;

        // memory
        let memory = match &v.memory {
            RawSize::Bytes(b) if *b > 0 => *b as u64,
            RawSize::Bytes(b) => return Err(err(&f("memory"), format!("{b} must be positive"))),
            RawSize::Text(s) => parse_size(s).map_err(|p| err(&f("memory"), p))?,
        };
        if memory == 0 || memory % package::MEMORY_ALIGN != 0 {
            return Err(err(
                &f("memory"),
                format!("{memory} bytes is not a positive multiple of 2 MiB"),
            ));
        }
        if memory > MAX_MEMORY {
            return Err(err(
                &f("memory"),
                format!("{} GiB is above the 1 TiB limit", memory >> 30),
            ));
        }

        // cpus / pinned
        let mut mask = 0u64;
        if let Some(cpus) = &v.cpus {
            if cpus.is_empty() {
                return Err(err(
                    &f("cpus"),
                    "empty list: omit `cpus` to let kestrel choose".into(),
                ));
            }
            for &c in cpus {
                if !(0..max_cpus as i64).contains(&c) {
                    return Err(err(
                        &f("cpus"),
                        format!("pCPU {c} is out of range 0..{max_cpus} (hypervisor.max_cpus = {max_cpus})"),
                    ));
                }
                if mask & (1 << c) != 0 {
                    return Err(err(&f("cpus"), format!("pCPU {c} is listed twice")));
                }
                mask |= 1 << c;
            }
        }
        if v.exclusive.is_some() && !v.pinned {
            return Err(err(
                &f("exclusive"),
                "only a pinned VM (`pinned = true`) can be exclusive or not".into(),
            ));
        }
        // A pinned VM owns its pCPUs unless `exclusive = false`.
        let owns = v.pinned && v.exclusive != Some(false);
        if v.pinned {
            if v.cpus.is_none() {
                return Err(err(
                    &f("pinned"),
                    "a pinned VM needs `cpus`: one pCPU per vCPU".into(),
                ));
            }
            if mask.count_ones() != vcpus as u32 {
                return Err(err(
                    &f("cpus"),
                    format!(
                        "pinned VM has {vcpus} vCPUs but lists {} pCPUs (need one per vCPU)",
                        mask.count_ones()
                    ),
                ));
            }
        }
        for c in 0..64u32 {
            if mask & (1 << c) == 0 {
                continue;
            }
            if let Some(&o) = pinned_owner.get(&c) {
                return Err(err(
                    &f("cpus"),
                    format!("pCPU {c} is pinned to vm[{o}], it cannot be shared"),
                ));
            }
            if owns {
                if let Some(&(o, _)) = shared_cpus.iter().find(|&&(_, sc)| sc == c) {
                    return Err(err(
                        &f("cpus"),
                        format!("pCPU {c} is also used by vm[{o}], it cannot be pinned"),
                    ));
                }
                pinned_owner.insert(c, i);
            } else {
                shared_cpus.push((i, c));
            }
        }

        // console, kind
        let console = match v.console.as_deref() {
            None => match arch {
                Arch::Aarch64 => ConsoleKind::Pl011,
                Arch::LoongArch64 => ConsoleKind::Ns16550,
            },
            Some("pl011") if arch == Arch::Aarch64 => ConsoleKind::Pl011,
            Some("ns16550") if arch == Arch::LoongArch64 => ConsoleKind::Ns16550,
            Some(o @ ("pl011" | "ns16550")) => {
                return Err(err(
                    &f("console"),
                    format!(
                        "kestrel's {} VMs have no {o}: use \"{}\" (or leave `console` out)",
                        arch.name(),
                        match arch {
                            Arch::Aarch64 => "pl011",
                            Arch::LoongArch64 => "ns16550",
                        }
                    ),
                ))
            }
            Some(o) => {
                return Err(err(
                    &f("console"),
                    format!("unknown console \"{o}\": use pl011 or ns16550"),
                ))
            }
        };
        let reboot_stop = match v.on_reboot.as_deref() {
            None | Some("restart") => false,
            Some("stop") => true,
            Some(o) => {
                return Err(err(
                    &f("on_reboot"),
                    format!("unknown on_reboot \"{o}\": use restart or stop"),
                ))
            }
        };
        let linux = match v.kind.as_deref() {
            None | Some("linux") => true,
            Some("test-guest") => false,
            Some(o) => {
                return Err(err(
                    &f("kind"),
                    format!("unknown kind \"{o}\": use linux or test-guest"),
                ))
            }
        };

        // files
        let read = |field: &str, p: &str| -> Result<Vec<u8>, ConfigError> {
            let path = dir.join(p);
            std::fs::read(&path)
                .map_err(|e| err(&f(field), format!("cannot read {}: {e}", path.display())))
        };
        let mut kernel = read("kernel", &v.kernel)?;
        if kernel.is_empty() {
            return Err(err(&f("kernel"), format!("{} is empty", v.kernel)));
        }
        let aarch32 = match (v.arch.as_deref(), arch) {
            (None, Arch::Aarch64) => linux && is_zimage(&kernel),
            (Some("aarch64"), Arch::Aarch64) => false,
            (Some("aarch32"), Arch::Aarch64) => true,
            (None, _) => false,
            (Some(o), Arch::Aarch64) => {
                return Err(err(
                    &f("arch"),
                    format!("unknown arch \"{o}\": use aarch64 or aarch32"),
                ))
            }
            (Some(_), _) => {
                return Err(err(
                    &f("arch"),
                    "arch (AArch64 or AArch32 EL1) is for arm64 VMs only: remove it".into(),
                ))
            }
        };
        if aarch32 && v.identity {
            return Err(err(
                &f("identity"),
                "identity RAM is not for AArch32 VMs (their RAM must start \
                 128 MiB-aligned below 4 GiB): remove it"
                    .into(),
            ));
        }
        if aarch32 && linux && memory > AARCH32_LINUX_MAX_MEMORY {
            return Err(err(
                &f("memory"),
                format!(
                    "{} MiB: a 32-bit Linux VM gets at most {} MiB (its kernel must \
                     reach the initrd and DTB through its low memory)",
                    memory >> 20,
                    AARCH32_LINUX_MAX_MEMORY >> 20
                ),
            ));
        }
        let mut entry_offset = 0;
        let (kind, load_offset, footprint) = if aarch32 {
            kernel_kind32(&kernel, linux, memory).map_err(|p| err(&f("kernel"), p))?
        } else if linux && arch == Arch::LoongArch64 && !kernel.starts_with(b"\x7fELF") {
            // A LoongArch Linux image, or Debian's zboot vmlinuz (unpacked here).
            let (image, h) = crate::zboot::loongarch_kernel(&dir.join(&v.kernel), kernel)
                .map_err(|p| err(&f("kernel"), p))?;
            kernel = image;
            entry_offset = h.entry - h.text_offset;
            (GuestKind::LinuxLoongArchImage, h.text_offset, h.image_size)
        } else {
            kernel_kind(&kernel, linux, arch).map_err(|p| err(&f("kernel"), p))?
        };
        let initrd = v.initrd.as_deref().map(|p| read("initrd", p)).transpose()?;
        let dtb = v.dtb.as_deref().map(|p| read("dtb", p)).transpose()?;
        if let Some(d) = &dtb {
            if d.len() < 40 || d[..4] != [0xd0, 0x0d, 0xfe, 0xed] {
                return Err(err(
                    &f("dtb"),
                    format!(
                        "{} is not a device tree blob (magic d00dfeed)",
                        v.dtb.as_deref().unwrap_or("")
                    ),
                ));
            }
            if d.len() as u64 > package::DTB_SLOT {
                return Err(err(
                    &f("dtb"),
                    format!("{} bytes: a DTB is at most 2 MiB", d.len()),
                ));
            }
        }

        // cmdline
        if v.cmdline.len() > MAX_CMDLINE || v.cmdline.contains('\0') {
            return Err(err(
                &f("cmdline"),
                format!("must be at most {MAX_CMDLINE} bytes without NUL"),
            ));
        }

        // fit
        let initrd_len = initrd.as_ref().map_or(0, |d| d.len() as u64);
        GuestLayout::compute(memory, load_offset, footprint, initrd_len).map_err(|p| {
            err(
                &f("memory"),
                format!(
                    "{} MiB is too small for the kernel + initrd + DTB: {p}",
                    memory >> 20
                ),
            )
        })?;

        // virtio devices
        let devices = devices(v, &dir, &f, &err)?;
        let nets = devices.iter().filter_map(|d| match d {
            DeviceConfig::Net { network, mac, .. } => Some((network, *mac)),
            _ => None,
        });
        for (j, (network, mac)) in nets.enumerate() {
            let Some(mac) = mac else { continue };
            let field = f(&format!("net[{j}].mac"));
            if let Some(other) = macs.insert((network.clone(), mac), field.clone()) {
                return Err(err(
                    &field,
                    format!(
                        "{} is already {other}'s on network \"{network}\": the switch gives each MAC to one port",
                        v.net[j].mac.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
        let passthrough = passthrough(v, i, arch, &mut regions, &mut spi_owner, &f, &err)?;
        if v.identity && arch != Arch::Aarch64 {
            return Err(err(
                &f("identity"),
                "identity RAM is for arm64 passthrough only: remove it".into(),
            ));
        }
        let sve_vl = sve_vl(v, arch, &f, &err)?;
        if devices.len() + passthrough.len() > package::MAX_DEVICES {
            return Err(err(
                &f("passthrough"),
                format!(
                    "{} disks, network ports and passthrough regions: at most {} per VM",
                    devices.len() + passthrough.len(),
                    package::MAX_DEVICES
                ),
            ));
        }
        let virtio_slots = devices.len() + usize::from(v.virtio_console);
        // Without identity RAM the guest's RAM is known here; with it, it
        // lies where the host's RAM is (checked again at boot).
        let ram = if v.identity {
            (0, 0)
        } else {
            (package::ARM64_GUEST_RAM, package::ARM64_GUEST_RAM + memory)
        };
        for (k, p) in passthrough.iter().enumerate() {
            if let Some(why) = package::arm64_guest_clash(p.base, p.end(), virtio_slots, ram) {
                return Err(err(
                    &f(&format!("passthrough[{k}].reg")),
                    format!("[{:#x}, {:#x}) {why}", p.base, p.end()),
                ));
            }
        }

        vms.push(VmConfig {
            name: v.name.clone(),
            vcpus,
            memory,
            affinity: Affinity {
                mask,
                pinned: v.pinned,
                shared: v.pinned && !owns,
            },
            kind,
            console,
            kernel,
            initrd,
            dtb,
            cmdline: v.cmdline.clone(),
            load_offset,
            entry_offset,
            kernel_footprint: footprint,
            virtio_console: v.virtio_console,
            reboot_stop,
            devices,
            passthrough,
            identity: v.identity,
            pv_ipi: v.pv_ipi,
            pv_time: v.pv_time,
            sve_vl,
        });
    }
    Ok(Config {
        file: file.to_path_buf(),
        arch,
        settings,
        vms,
    })
}

/// The most RAM a 32-bit Linux VM is given: the zImage, initrd and DTB
/// must lie in its low memory (`kestrel_abi::image::ARM32_LOWMEM`).
const AARCH32_LINUX_MAX_MEMORY: u64 = 512 << 20;

/// Whether `k` is a 32-bit ARM zImage (its magic at 0x24).
fn is_zimage(k: &[u8]) -> bool {
    k.get(ZIMAGE_MAGIC_OFFSET..ZIMAGE_MAGIC_OFFSET + 4)
        .is_some_and(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == ZIMAGE_MAGIC)
}

/// The guest kind, load offset and footprint of a kernel for an AArch32
/// EL1: a zImage placed by the 32-bit boot protocol's rule
/// ([`arm32_layout`]), or a raw test guest at the start of RAM.
fn kernel_kind32(k: &[u8], linux: bool, memory: u64) -> Result<(GuestKind, u64, u64), String> {
    let len = k.len() as u64;
    if !linux {
        if k.starts_with(b"\x7fELF") {
            return Err("an AArch32 test guest is a raw binary, not an ELF".into());
        }
        return Ok((GuestKind::TestRaw32, 0, len));
    }
    let z = ZImage::parse(k).map_err(|e| format!("not a 32-bit ARM zImage: {e}"))?;
    let ram = package::ARM64_GUEST_RAM;
    let l = arm32_layout(ram, memory, &z, package::DTB_SLOT / 2, 0)
        .map_err(|e| format!("the zImage does not fit: {e:?}"))?;
    let footprint = (u64::from(z.size) + ZIMAGE_SLACK).max(len);
    Ok((GuestKind::LinuxArm32ZImage, l.kernel - ram, footprint))
}

/// The guest kind, load offset and footprint of a kernel file.
fn kernel_kind(k: &[u8], linux: bool, arch: Arch) -> Result<(GuestKind, u64, u64), String> {
    let len = k.len() as u64;
    let is_elf = k.starts_with(b"\x7fELF");
    let elf = || Elf::parse(k).map_err(|e| format!("not a loadable ELF: {e}"));
    match (linux, arch) {
        (true, Arch::Aarch64) => {
            let header = Arm64Image::parse(k).map_err(|_| {
                "not an arm64 Linux Image (no magic ARM\\x64 at 0x38); \
                 use the uncompressed Image, or kind = \"test-guest\""
                    .to_string()
            })?;
            let (load, size) = header.placement(len);
            Ok((GuestKind::LinuxArm64Image, load, size))
        }
        (true, Arch::LoongArch64) => {
            if !is_elf || elf()?.machine() != EM_LOONGARCH {
                return Err(
                    "not a LoongArch Linux ELF (vmlinux with e_machine EM_LOONGARCH)".into(),
                );
            }
            Ok((GuestKind::LinuxLoongArchElf, 0, len))
        }
        (false, _) if is_elf => {
            let want = match arch {
                Arch::Aarch64 => EM_AARCH64,
                Arch::LoongArch64 => EM_LOONGARCH,
            };
            let machine = elf()?.machine();
            if machine != want {
                return Err(format!(
                    "ELF for machine {machine}, not {} ({want})",
                    arch.name()
                ));
            }
            Ok((GuestKind::TestElf, 0, len))
        }
        (false, _) => Ok((GuestKind::TestRaw, 0, len)),
    }
}

/// Packs a checked config.
pub fn pack(cfg: &Config) -> Vec<u8> {
    let mut w = Writer::new(cfg.settings);
    let devices: Vec<Vec<Device<'_>>> = cfg
        .vms
        .iter()
        .map(|v| v.devices.iter().map(DeviceConfig::as_device).collect())
        .collect();
    for (v, devices) in cfg.vms.iter().zip(&devices) {
        w.vms.push(VmInput {
            name: &v.name,
            memory: v.memory,
            vcpus: v.vcpus,
            affinity: v.affinity,
            kind: v.kind,
            console: v.console,
            kernel: &v.kernel,
            initrd: v.initrd.as_deref(),
            dtb: v.dtb.as_deref(),
            cmdline: &v.cmdline,
            load_offset: v.load_offset,
            entry_offset: v.entry_offset,
            kernel_footprint: v.kernel_footprint,
            virtio_console: v.virtio_console,
            reboot_stop: v.reboot_stop,
            devices,
            passthrough: &v.passthrough,
            identity: v.identity,
            pv_ipi_hidden: !v.pv_ipi,
            pv_time_hidden: !v.pv_time,
            sve_vl: v.sve_vl,
        });
    }
    w.finish()
}

/// The `[[vm.disk]]` and `[[vm.net]]` tables of `v`, checked, disk images read.
fn devices(
    v: &RawVm,
    dir: &Path,
    f: &dyn Fn(&str) -> String,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Vec<DeviceConfig>, ConfigError> {
    let n = v.disk.len() + v.net.len();
    if n > package::MAX_DEVICES {
        return Err(err(
            &f("disk"),
            format!(
                "{n} disks and network ports: at most {} per VM",
                package::MAX_DEVICES
            ),
        ));
    }
    let mut out = Vec::new();
    for (i, d) in v.disk.iter().enumerate() {
        let field = f(&format!("disk[{i}].image"));
        let path = dir.join(&d.image);
        let image = std::fs::read(&path)
            .map_err(|e| err(&field, format!("cannot read {}: {e}", path.display())))?;
        if image.is_empty() || !(image.len() as u64).is_multiple_of(package::SECTOR_SIZE) {
            return Err(err(
                &field,
                format!(
                    "{}: {} bytes: a disk image must be a non-zero whole number of 512-byte sectors",
                    path.display(),
                    image.len()
                ),
            ));
        }
        out.push(DeviceConfig::Disk {
            image,
            read_only: d.read_only,
        });
    }
    for (i, n) in v.net.iter().enumerate() {
        let name_ok = !n.network.is_empty()
            && n.network.len() <= package::NAME_LEN
            && n.network.bytes().all(package::is_name_byte);
        if !name_ok {
            return Err(err(
                &f(&format!("net[{i}].network")),
                format!(
                    "\"{}\": a network name is 1-32 characters of a-z, 0-9, _ and -",
                    n.network
                ),
            ));
        }
        let mac = n
            .mac
            .as_deref()
            .map(parse_mac)
            .transpose()
            .map_err(|p| err(&f(&format!("net[{i}].mac")), p))?;
        let learn = u16::try_from(n.learn)
            .ok()
            .filter(|&l| l <= package::MAX_LEARN)
            .ok_or_else(|| {
                err(
                    &f(&format!("net[{i}].learn")),
                    format!(
                        "{}: the MACs the switch learns for this port, 0..={}",
                        n.learn,
                        package::MAX_LEARN
                    ),
                )
            })?;
        if learn > 0 && !n.allow_mac_spoofing {
            return Err(err(
                &f(&format!("net[{i}].learn")),
                String::from(
                    "learning needs allow_mac_spoofing = true (a port that may only use \
                     its own MAC has nothing to learn)",
                ),
            ));
        }
        let broadcast_rate = match n.broadcast_rate {
            None => 0,
            Some(r) => u32::try_from(r)
                .ok()
                .filter(|&r| (1..=package::MAX_BROADCAST_RATE).contains(&r))
                .ok_or_else(|| {
                    err(
                        &f(&format!("net[{i}].broadcast_rate")),
                        format!(
                            "{r}: broadcast and multicast frames a second, 1..={}",
                            package::MAX_BROADCAST_RATE
                        ),
                    )
                })?,
        };
        out.push(DeviceConfig::Net {
            network: n.network.clone(),
            mac,
            allow_mac_spoofing: n.allow_mac_spoofing,
            learn,
            broadcast_rate,
        });
    }
    Ok(out)
}

/// The `[[vm.passthrough]]` tables of VM `vm`, checked on their own and
/// against the regions and SPIs earlier VMs (and earlier tables) claimed.
#[allow(clippy::too_many_arguments)]
fn passthrough(
    v: &RawVm,
    vm: usize,
    arch: Arch,
    regions: &mut Vec<(usize, usize, u64, u64)>,
    spi_owner: &mut HashMap<u32, usize>,
    f: &dyn Fn(&str) -> String,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Vec<package::Passthrough>, ConfigError> {
    if arch != Arch::Aarch64 && !v.passthrough.is_empty() {
        return Err(err(
            &f("passthrough"),
            "device passthrough is arm64-only: remove it".into(),
        ));
    }
    let page = package::PT_PAGE as i64;
    let mut out = Vec::new();
    for (k, p) in v.passthrough.iter().enumerate() {
        let field = |n: &str| f(&format!("passthrough[{k}].{n}"));
        let [base, size] = p.reg[..] else {
            return Err(err(
                &field("reg"),
                format!("{} numbers: use [base, size]", p.reg.len()),
            ));
        };
        if base < 0 || size <= 0 || base % page != 0 || size % page != 0 {
            return Err(err(
                &field("reg"),
                format!(
                    "[{base:#x}, {size:#x}]: base and size must be non-negative multiples of 4 KiB                      (0x1000), size not 0"
                ),
            ));
        }
        let (base, end) = (base as u64, base as u64 + size as u64);
        if let Some(&(o, ok, ..)) = regions.iter().find(|&&(_, _, s, e)| base < e && s < end) {
            return Err(err(
                &field("reg"),
                format!(
                    "[{base:#x}, {end:#x}) overlaps vm[{o}].passthrough[{ok}]: a device belongs to one VM"
                ),
            ));
        }
        if p.interrupts.len() > package::MAX_PT_SPIS {
            return Err(err(
                &field("interrupts"),
                format!(
                    "{} SPIs: at most {} per region",
                    p.interrupts.len(),
                    package::MAX_PT_SPIS
                ),
            ));
        }
        let mut spis = Vec::new();
        for &s in &p.interrupts {
            if !(0..=i64::from(package::MAX_SPI)).contains(&s) {
                return Err(err(
                    &field("interrupts"),
                    format!(
                        "SPI {s} is out of range 0..={} (SPI numbers, as in a device tree: INTID - 32)",
                        package::MAX_SPI
                    ),
                ));
            }
            let s = s as u32;
            if let Some(&o) = spi_owner.get(&s) {
                let whose = if o == vm {
                    "this VM already".to_string()
                } else {
                    format!("vm[{o}]")
                };
                return Err(err(
                    &field("interrupts"),
                    format!("SPI {s} is claimed by {whose}: an SPI belongs to one device"),
                ));
            }
            spi_owner.insert(s, vm);
            spis.push(s);
        }
        regions.push((vm, k, base, end));
        out.push(package::Passthrough::new(base, end - base, &spis));
    }
    Ok(out)
}

/// Checks `config`, packs it, reads the package back with the hypervisor's
/// reader, and only then writes `out`. Returns a one-line summary per VM.
pub fn write_package(config: &Path, arch: Arch, out: &Path) -> Result<Vec<String>, String> {
    let cfg = load(config, arch).map_err(|e| e.to_string())?;
    let bytes = pack(&cfg);
    let pkg = Package::parse(&bytes)
        .map_err(|e| format!("internal error: packed config unreadable: {e}"))?;
    let mut summary = Vec::new();
    for vm in pkg.vms() {
        let vm = vm.map_err(|e| format!("internal error: packed VM unreadable: {e}"))?;
        summary.push(format!(
            "vm[{}] {}: {} vCPU(s), {} MiB, {}, kernel {} KiB{}",
            vm.index,
            vm.name,
            vm.vcpus,
            vm.memory >> 20,
            vm.kind.name(),
            vm.kernel.len() >> 10,
            vm.initrd
                .map_or(String::new(), |i| format!(", initrd {} KiB", i.len() >> 10))
        ));
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // Written only when it changes: the firmware build reruns its build
    // script, and relinks, whenever the file it embeds is touched.
    if std::fs::read(out).ok().as_deref() != Some(&bytes[..]) {
        std::fs::write(out, &bytes).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests;
