//! What the guest learns from its DTB: console, GIC, CPUs, RAM, PSCI
//! conduit and command-line options. QEMU `virt` defaults fill any gap.

use crate::cpu::MAX_CPUS;
use crate::gic::Version;

/// The machine as the DTB describes it.
#[derive(Clone, Copy, Debug)]
pub struct Platform {
    pub uart: usize,
    pub gic: Version,
    pub gicd: usize,
    /// GICv3 redistributors or GICv2 CPU interface.
    pub gicr_or_gicc: usize,
    pub cpus: [u64; MAX_CPUS],
    pub ncpus: usize,
    pub ram_base: u64,
    pub ram_size: u64,
    pub psci_smc: bool,
    /// `fp_iters=N` on the command line (rounds of the FP check).
    pub fp_iters: Option<u64>,
    /// `sve_iters=N`: rounds of the SVE check per vCPU.
    pub sve_iters: Option<u64>,
    /// `sve_vl=BITS`: the SVE vector length the VM is configured with
    /// (kestrel's `sve_max_vl`), which `rdvl` must give; absent: SVE must
    /// be hidden under kestrel (any length on bare QEMU).
    pub sve_vl: Option<u64>,
    /// `bench_n=N`: IPIs per benchmark case.
    pub bench_n: Option<u64>,
    /// `share_ms=N`: instead of the checks, every vCPU spins N ms and the
    /// guest prints how many iterations each managed (the fairness test).
    pub share_ms: Option<u64>,
    /// `share_delay_ms=N`: sleep N ms before that window.
    pub share_delay_ms: Option<u64>,
    /// Whether a DTB was found at all.
    pub from_dtb: bool,
    /// `mode=attack` / `mode=victim`: the hostile-guest suite instead of
    /// the checks (`hostile.rs`).
    pub mode: Mode,
    /// `window_ms=N`: how long the victim measures (`mode=resetrace`: the
    /// counter value, in ms, its resets go on until); `hold_ms=N`: how long
    /// after its start the attacker keeps its pCPU busy.
    pub window_ms: Option<u64>,
    pub hold_ms: Option<u64>,
    /// `mode=reboot cycles=N`: boots to count on the disk (`reboot.rs`).
    pub cycles: Option<u64>,
    /// Bases of the virtio-mmio transports the DTB describes (`virtio,mmio`
    /// nodes), in address order; the first `nvirtio` are valid.
    pub virtio: [usize; MAX_VIRTIO],
    pub nvirtio: usize,
    /// The `/reserved-memory/pv-time@..` node (`no-map`): where kestrel
    /// keeps the stolen-time records (base, size).
    pub pv_time: Option<(u64, u64)>,
    /// `steal=alone|shared`: what the stolen-time check expects of the
    /// spin window (no other vCPU waits for its pCPUs / its vCPUs share
    /// pCPUs); default: anything, monotonic and bounded. `steal=off`: not
    /// offered at all.
    pub steal: Steal,
}

/// What the stolen-time check expects (`steal=` on the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steal {
    Any,
    Alone,
    Shared,
    /// `steal=off`: the VM is configured without it (`pv_time = false`).
    Off,
}

/// virtio-mmio transports the guest keeps track of.
pub const MAX_VIRTIO: usize = 8;

/// What the guest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Checks,
    Attack,
    Victim,
    /// `mode=bench-exits`: instructions per exit kind (`exitbench.rs`).
    BenchExits,
    /// `mode=bench-switch`: instructions per switch between two VMs.
    BenchSwitch,
    /// `mode=bench-ipi`: instructions per IPI round trip to vCPU 1.
    BenchIpi,
    /// `mode=reboot`: reboot until a counter on the disk says enough
    /// (`reboot.rs`).
    Reboot,
    /// `mode=resetrace`: resets racing CPU_ON until the counter passes
    /// `window_ms` (`resetrace.rs`).
    ResetRace,
}

impl Platform {
    /// QEMU `virt`: GICv3, PL011, one CPU, 128 MiB at 1 GiB.
    pub const fn qemu_virt() -> Self {
        let mut cpus = [0; MAX_CPUS];
        cpus[0] = 0;
        Platform {
            uart: 0x0900_0000,
            gic: Version::V3,
            gicd: 0x0800_0000,
            gicr_or_gicc: 0x080A_0000,
            cpus,
            ncpus: 1,
            ram_base: 0x4000_0000,
            ram_size: 128 << 20,
            psci_smc: false,
            fp_iters: None,
            sve_iters: None,
            sve_vl: None,
            bench_n: None,
            share_ms: None,
            share_delay_ms: None,
            from_dtb: false,
            mode: Mode::Checks,
            window_ms: None,
            cycles: None,
            hold_ms: None,
            virtio: [0; MAX_VIRTIO],
            nvirtio: 0,
            pv_time: None,
            steal: Steal::Any,
        }
    }

    /// Parses the DTB at `dtb`, keeping defaults for what it lacks.
    pub fn from_dtb(dtb: usize) -> Self {
        let mut p = Self::qemu_virt();
        if dtb == 0 {
            return p;
        }
        // SAFETY: the boot protocol hands the DTB's address in x0; the
        // identity map covers it. `from_ptr` checks the magic and size.
        let Ok(fdt) = (unsafe { fdt::Fdt::from_ptr(dtb as *const u8) }) else {
            return p;
        };
        p.from_dtb = true;
        let first_reg = |node: fdt::node::FdtNode| -> Option<(usize, usize)> {
            let mut regs = node.reg()?;
            let r = regs.next()?;
            Some((r.starting_address as usize, r.size.unwrap_or(0)))
        };
        if let Some(rm) = fdt.find_node("/reserved-memory") {
            for child in rm.children() {
                if child.name.starts_with("pv-time@") && child.property("no-map").is_some() {
                    p.pv_time = first_reg(child).map(|(b, s)| (b as u64, s as u64));
                }
            }
        }
        if let Some(uart) = fdt.find_compatible(&["arm,pl011"]).and_then(first_reg) {
            p.uart = uart.0;
        }
        if let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) {
            if let Some(mut regs) = node.reg() {
                if let (Some(d), Some(r)) = (regs.next(), regs.next()) {
                    p.gic = Version::V3;
                    p.gicd = d.starting_address as usize;
                    p.gicr_or_gicc = r.starting_address as usize;
                }
            }
        } else if let Some(node) =
            fdt.find_compatible(&["arm,cortex-a15-gic", "arm,gic-400", "arm,cortex-a9-gic"])
        {
            if let Some(mut regs) = node.reg() {
                if let (Some(d), Some(c)) = (regs.next(), regs.next()) {
                    p.gic = Version::V2;
                    p.gicd = d.starting_address as usize;
                    p.gicr_or_gicc = c.starting_address as usize;
                }
            }
        }
        if let Some(cpus) = fdt.find_node("/cpus") {
            let mut n = 0;
            for c in cpus.children() {
                if c.name.split('@').next() != Some("cpu") || n == MAX_CPUS {
                    continue;
                }
                let Some(reg) = c.property("reg") else {
                    continue;
                };
                let v = reg.value;
                let id = match v.len() {
                    4 => u32::from_be_bytes([v[0], v[1], v[2], v[3]]) as u64,
                    8 => u64::from_be_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]),
                    _ => continue,
                };
                p.cpus[n] = id;
                n += 1;
            }
            if n > 0 {
                p.ncpus = n;
            }
        }
        for node in fdt.all_nodes() {
            let is_virtio = node
                .compatible()
                .is_some_and(|c| c.all().any(|c| c == "virtio,mmio"));
            if !is_virtio || p.nvirtio == MAX_VIRTIO {
                continue;
            }
            if let Some((base, _)) = first_reg(node) {
                p.virtio[p.nvirtio] = base;
                p.nvirtio += 1;
            }
        }
        p.virtio[..p.nvirtio].sort_unstable();
        if let Some(mem) = fdt.find_node("/memory").and_then(first_reg) {
            p.ram_base = mem.0 as u64;
            p.ram_size = mem.1 as u64;
        }
        if let Some(method) = fdt
            .find_node("/psci")
            .and_then(|n| n.property("method"))
            .and_then(|m| m.as_str())
        {
            p.psci_smc = method == "smc";
        }
        if let Some(args) = fdt
            .find_node("/chosen")
            .and_then(|c| c.property("bootargs").and_then(|b| b.as_str()))
        {
            for word in args.split_whitespace() {
                let num = |k: &str| word.strip_prefix(k).and_then(|v| v.parse().ok());
                if let Some(n) = num("fp_iters=") {
                    p.fp_iters = Some(n);
                }
                if let Some(n) = num("sve_iters=") {
                    p.sve_iters = Some(n);
                }
                if let Some(n) = num("sve_vl=") {
                    p.sve_vl = Some(n);
                }
                if let Some(n) = num("bench_n=") {
                    p.bench_n = Some(n);
                }
                if let Some(n) = num("window_ms=") {
                    p.window_ms = Some(n);
                }
                if let Some(n) = num("hold_ms=") {
                    p.hold_ms = Some(n);
                }
                if let Some(n) = num("cycles=") {
                    p.cycles = Some(n);
                }
                match word {
                    "mode=attack" => p.mode = Mode::Attack,
                    "mode=victim" => p.mode = Mode::Victim,
                    "mode=bench-exits" => p.mode = Mode::BenchExits,
                    "mode=bench-switch" => p.mode = Mode::BenchSwitch,
                    "mode=bench-ipi" => p.mode = Mode::BenchIpi,
                    "mode=reboot" => p.mode = Mode::Reboot,
                    "mode=resetrace" => p.mode = Mode::ResetRace,
                    "steal=alone" => p.steal = Steal::Alone,
                    "steal=shared" => p.steal = Steal::Shared,
                    "steal=off" => p.steal = Steal::Off,
                    _ => {}
                }
                if let Some(n) = num("share_ms=") {
                    p.share_ms = Some(n);
                }
                if let Some(n) = num("share_delay_ms=") {
                    p.share_delay_ms = Some(n);
                }
            }
        }
        p
    }
}
