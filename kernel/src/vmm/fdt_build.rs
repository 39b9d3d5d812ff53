//! Writes flattened device trees: the DTB kestrel hands each guest that has
//! none of its own in the config.
//!
//! # The format written (devicetree specification v0.4, version 17)
//!
//! ```text
//! header (40 bytes, big-endian u32s): magic 0xd00dfeed, totalsize,
//!     off_dt_struct, off_dt_strings, off_mem_rsvmap, version 17,
//!     last_comp_version 16, boot_cpuid_phys, size_dt_strings, size_dt_struct
//! memory reservation map: (address u64, size u64) pairs, ended by (0, 0); 8-aligned
//! structure block: FDT_BEGIN_NODE (1) name\0 pad4 | FDT_PROP (3) len nameoff value pad4
//!     | FDT_END_NODE (2) | ... | FDT_END (9)
//! strings block: property names, NUL-terminated, each stored once
//! ```
//!
//! [`FdtWriter`] is the generic writer; [`guest_dtb_arm64`] builds a whole
//! arm64 guest tree from a [`GuestDtbSpec`]: `/memory`, `/cpus` (PSCI enable
//! method), `/psci` (method `hvc`: the guest's PSCI calls trap to kestrel), the
//! GIC (v3: distributor + redistributors; v2: distributor + CPU interface),
//! `/timer` (the four architected timer PPIs), the console UART (PL011 with a
//! fixed 24 MHz `apb_pclk` clock, or an NS16550) and `/chosen` (bootargs,
//! stdout-path, initrd bounds).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_END: u32 = 9;
const HEADER_SIZE: usize = 40;

/// A misuse of [`FdtWriter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdtBuildError {
    /// `end_node` without a matching `begin_node`.
    UnbalancedEnd,
    /// `finish` with nodes still open (how many).
    Unclosed(usize),
    /// A property outside any node, or a node before/after the root.
    OutsideRoot,
    /// A name with a NUL byte.
    BadName,
    /// The tree would exceed 4 GiB.
    TooLarge,
}

impl fmt::Display for FdtBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FdtBuildError::UnbalancedEnd => f.write_str("end_node without an open node"),
            FdtBuildError::Unclosed(n) => write!(f, "{n} node(s) still open at finish"),
            FdtBuildError::OutsideRoot => {
                f.write_str("property or node outside the single root node")
            }
            FdtBuildError::BadName => f.write_str("node or property name contains NUL"),
            FdtBuildError::TooLarge => f.write_str("device tree larger than 4 GiB"),
        }
    }
}

/// Builds a device tree in memory. Errors are sticky: the first misuse is
/// reported by [`FdtWriter::finish`], so callers can chain calls freely.
#[derive(Debug, Default)]
pub struct FdtWriter {
    structure: Vec<u8>,
    strings: Vec<u8>,
    string_offsets: BTreeMap<String, u32>,
    reservations: Vec<(u64, u64)>,
    depth: usize,
    roots: usize,
    boot_cpuid: u32,
    error: Option<FdtBuildError>,
}

impl FdtWriter {
    pub fn new() -> Self {
        Self::default()
    }

    fn fail(&mut self, e: FdtBuildError) {
        self.error.get_or_insert(e);
    }

    fn word(&mut self, v: u32) {
        self.structure.extend_from_slice(&v.to_be_bytes());
    }

    fn pad(&mut self) {
        while !self.structure.len().is_multiple_of(4) {
            self.structure.push(0);
        }
    }

    /// Adds a memory reservation map entry.
    pub fn reserve(&mut self, address: u64, size: u64) -> &mut Self {
        self.reservations.push((address, size));
        self
    }

    /// The physical id of the boot CPU (header field).
    pub fn boot_cpuid(&mut self, id: u32) -> &mut Self {
        self.boot_cpuid = id;
        self
    }

    /// Opens a node; the first one must be the root (name "").
    pub fn begin_node(&mut self, name: &str) -> &mut Self {
        if name.contains('\0') {
            self.fail(FdtBuildError::BadName);
        }
        if self.depth == 0 {
            self.roots += 1;
            if self.roots > 1 {
                self.fail(FdtBuildError::OutsideRoot);
            }
        }
        self.word(FDT_BEGIN_NODE);
        self.structure.extend_from_slice(name.as_bytes());
        self.structure.push(0);
        self.pad();
        self.depth += 1;
        self
    }

    pub fn end_node(&mut self) -> &mut Self {
        if self.depth == 0 {
            self.fail(FdtBuildError::UnbalancedEnd);
            return self;
        }
        self.word(FDT_END_NODE);
        self.depth -= 1;
        self
    }

    fn name_offset(&mut self, name: &str) -> u32 {
        if let Some(&off) = self.string_offsets.get(name) {
            return off;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(name.as_bytes());
        self.strings.push(0);
        self.string_offsets.insert(String::from(name), off);
        off
    }

    /// A property with raw bytes as its value.
    pub fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
        if name.contains('\0') {
            self.fail(FdtBuildError::BadName);
        }
        if self.depth == 0 {
            self.fail(FdtBuildError::OutsideRoot);
        }
        let Ok(len) = u32::try_from(value.len()) else {
            self.fail(FdtBuildError::TooLarge);
            return self;
        };
        let off = self.name_offset(name);
        self.word(FDT_PROP);
        self.word(len);
        self.word(off);
        self.structure.extend_from_slice(value);
        self.pad();
        self
    }

    /// An empty property (a flag such as `interrupt-controller`).
    pub fn prop_empty(&mut self, name: &str) -> &mut Self {
        self.prop(name, &[])
    }

    pub fn prop_u32(&mut self, name: &str, v: u32) -> &mut Self {
        self.prop(name, &v.to_be_bytes())
    }

    pub fn prop_u64(&mut self, name: &str, v: u64) -> &mut Self {
        self.prop(name, &v.to_be_bytes())
    }

    /// A list of 32-bit cells.
    pub fn prop_cells(&mut self, name: &str, cells: &[u32]) -> &mut Self {
        let bytes: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
        self.prop(name, &bytes)
    }

    /// `(address, size)` pairs with 2 address and 2 size cells.
    pub fn prop_reg(&mut self, name: &str, regions: &[(u64, u64)]) -> &mut Self {
        let bytes: Vec<u8> = regions
            .iter()
            .flat_map(|&(a, s)| a.to_be_bytes().into_iter().chain(s.to_be_bytes()))
            .collect();
        self.prop(name, &bytes)
    }

    pub fn prop_str(&mut self, name: &str, s: &str) -> &mut Self {
        self.prop_strs(name, &[s])
    }

    /// A string list (each NUL-terminated), as `compatible`.
    pub fn prop_strs(&mut self, name: &str, list: &[&str]) -> &mut Self {
        let mut bytes = Vec::new();
        for s in list {
            bytes.extend_from_slice(s.as_bytes());
            bytes.push(0);
        }
        self.prop(name, &bytes)
    }

    /// The finished blob.
    pub fn finish(&mut self) -> Result<Vec<u8>, FdtBuildError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.depth != 0 {
            return Err(FdtBuildError::Unclosed(self.depth));
        }
        if self.roots != 1 {
            return Err(FdtBuildError::OutsideRoot);
        }
        self.word(FDT_END);
        let rsv_off = HEADER_SIZE.next_multiple_of(8);
        let rsv_size = (self.reservations.len() + 1) * 16;
        let struct_off = rsv_off + rsv_size;
        let strings_off = struct_off + self.structure.len();
        let total = strings_off + self.strings.len();
        let total32 = u32::try_from(total).map_err(|_| FdtBuildError::TooLarge)?;
        let mut out = Vec::with_capacity(total);
        for w in [
            FDT_MAGIC,
            total32,
            struct_off as u32,
            strings_off as u32,
            rsv_off as u32,
            17,
            16,
            self.boot_cpuid,
            self.strings.len() as u32,
            self.structure.len() as u32,
        ] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        out.resize(rsv_off, 0);
        for &(a, s) in self.reservations.iter().chain([(0, 0)].iter()) {
            out.extend_from_slice(&a.to_be_bytes());
            out.extend_from_slice(&s.to_be_bytes());
        }
        out.extend_from_slice(&self.structure);
        out.extend_from_slice(&self.strings);
        // The FDT_END word was appended for this blob only.
        self.structure.truncate(self.structure.len() - 4);
        Ok(out)
    }
}

/// The guest's interrupt controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestGic {
    /// GICv3: distributor and redistributor regions (base, size).
    V3 {
        dist: (u64, u64),
        redist: (u64, u64),
    },
    /// GICv2: distributor and CPU interface (base, size).
    V2 { dist: (u64, u64), cpu: (u64, u64) },
}

/// The guest's console UART.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestUart {
    pub kind: kestrel_abi::package::ConsoleKind,
    pub base: u64,
    pub size: u64,
    /// Its SPI number (the GIC interrupt is 32 + spi).
    pub spi: u32,
}

/// Everything that goes into a generated arm64 guest tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestDtbSpec<'a> {
    /// Guest physical RAM.
    pub ram_base: u64,
    pub ram_size: u64,
    /// Number of vCPUs; vCPU i has MPIDR affinity `(i / 16) << 8 | i % 16`.
    pub vcpus: u16,
    pub gic: GuestGic,
    pub uart: GuestUart,
    pub bootargs: &'a str,
    /// Guest physical start and end (exclusive) of the initrd.
    pub initrd: Option<(u64, u64)>,
    /// virtio-mmio transports: (base, size, SPI number).
    pub virtio: Vec<(u64, u64, u32)>,
    /// Host devices passed through (`crate::vmm::passthrough`).
    pub passthrough: Vec<GuestPtNode>,
    /// RAM the guest must leave alone (base, size): `/reserved-memory`
    /// nodes with `no-map` (the stolen-time records,
    /// [`crate::vcpu::steal::PvTimeRegion`]).
    pub reserved: Vec<(u64, u64)>,
}

/// A passed-through host device as the guest sees it: the host node's
/// name, `compatible` and `reg` (at IPA == PA), its interrupts moved to the
/// guest's SPIs (GIC specifiers: type, number, flags), `dma-coherent` when
/// the host node has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestPtNode {
    pub name: String,
    /// The raw `compatible` value (NUL-separated strings).
    pub compatible: Vec<u8>,
    pub reg: Vec<(u64, u64)>,
    /// (SPI number, flags) per interrupt, in the host node's order.
    pub interrupts: Vec<(u32, u32)>,
    pub dma_coherent: bool,
}

/// MPIDR affinity (Aff1.Aff0) of vCPU `i`: 16 per cluster, as KVM does.
pub const fn vcpu_mpidr(i: u16) -> u64 {
    (((i / 16) as u64) << 8) | (i % 16) as u64
}

/// Phandles of the generated tree.
pub mod phandle {
    pub const GIC: u32 = 1;
    pub const APB_PCLK: u32 = 2;
}

/// GIC interrupt specifier types and flags (dt-bindings/interrupt-controller).
const GIC_SPI: u32 = 0;
const GIC_PPI: u32 = 1;
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;
/// Architected timer PPIs as DT numbers (INTID - 16): secure phys, non-secure
/// phys, virtual, hypervisor.
pub const TIMER_PPIS: [u32; 4] = [13, 14, 11, 10];
/// The fixed clock feeding the PL011.
pub const APB_PCLK_HZ: u32 = 24_000_000;

/// Node name of the console, as `/chosen/stdout-path` refers to it.
pub fn uart_node_name(uart: &GuestUart) -> String {
    match uart.kind {
        kestrel_abi::package::ConsoleKind::Pl011 => format!("pl011@{:x}", uart.base),
        kestrel_abi::package::ConsoleKind::Ns16550 => format!("serial@{:x}", uart.base),
    }
}

/// The guest DTB for `spec`.
pub fn guest_dtb_arm64(spec: &GuestDtbSpec) -> Vec<u8> {
    let mut w = FdtWriter::new();
    w.begin_node("")
        .prop_strs("compatible", &["kestrel,guest-arm64", "linux,dummy-virt"])
        .prop_str("model", "kestrel guest")
        .prop_u32("#address-cells", 2)
        .prop_u32("#size-cells", 2)
        .prop_u32("interrupt-parent", phandle::GIC);

    w.begin_node("chosen").prop_str("bootargs", spec.bootargs);
    w.prop_str("stdout-path", &format!("/{}", uart_node_name(&spec.uart)));
    if let Some((start, end)) = spec.initrd {
        w.prop_u64("linux,initrd-start", start)
            .prop_u64("linux,initrd-end", end);
    }
    w.end_node();

    w.begin_node(&format!("memory@{:x}", spec.ram_base))
        .prop_str("device_type", "memory")
        .prop_reg("reg", &[(spec.ram_base, spec.ram_size)])
        .end_node();

    if !spec.reserved.is_empty() {
        w.begin_node("reserved-memory")
            .prop_u32("#address-cells", 2)
            .prop_u32("#size-cells", 2)
            .prop_empty("ranges");
        for &(base, size) in &spec.reserved {
            w.begin_node(&format!("pv-time@{base:x}"))
                .prop_reg("reg", &[(base, size)])
                .prop_empty("no-map")
                .end_node();
        }
        w.end_node();
    }

    w.begin_node("cpus")
        .prop_u32("#address-cells", 1)
        .prop_u32("#size-cells", 0);
    for i in 0..spec.vcpus {
        let mpidr = vcpu_mpidr(i);
        w.begin_node(&format!("cpu@{mpidr:x}"))
            .prop_str("device_type", "cpu")
            .prop_str("compatible", "arm,armv8")
            .prop_u32("reg", mpidr as u32)
            .prop_str("enable-method", "psci")
            .end_node();
    }
    w.end_node();

    w.begin_node("psci")
        .prop_strs("compatible", &["arm,psci-1.0", "arm,psci-0.2"])
        .prop_str("method", "hvc")
        .end_node();

    let ppi_flags = match spec.gic {
        GuestGic::V3 { .. } => IRQ_TYPE_LEVEL_HIGH,
        // GICv2 PPIs carry a CPU mask in bits [15:8].
        GuestGic::V2 { .. } => {
            let cpus = spec.vcpus.clamp(1, 8) as u32;
            (((1u32 << cpus) - 1) << 8) | IRQ_TYPE_LEVEL_HIGH
        }
    };
    match spec.gic {
        GuestGic::V3 { dist, redist } => {
            w.begin_node(&format!("intc@{:x}", dist.0))
                .prop_str("compatible", "arm,gic-v3")
                .prop_reg("reg", &[dist, redist])
                .prop_u32("#redistributor-regions", 1);
        }
        GuestGic::V2 { dist, cpu } => {
            w.begin_node(&format!("intc@{:x}", dist.0))
                .prop_str("compatible", "arm,cortex-a15-gic")
                .prop_reg("reg", &[dist, cpu]);
        }
    }
    // No child nodes (no ITS), but dtc wants an interrupt provider to say
    // how its children would be addressed.
    w.prop_u32("#address-cells", 2)
        .prop_u32("#size-cells", 2)
        .prop_empty("ranges")
        .prop_u32("#interrupt-cells", 3)
        .prop_empty("interrupt-controller")
        .prop_u32("phandle", phandle::GIC)
        .end_node();

    let mut timer = Vec::new();
    for ppi in TIMER_PPIS {
        timer.extend_from_slice(&[GIC_PPI, ppi, ppi_flags]);
    }
    w.begin_node("timer")
        .prop_str("compatible", "arm,armv8-timer")
        .prop_cells("interrupts", &timer)
        .prop_empty("always-on")
        .end_node();

    let uart = &spec.uart;
    let uart_irq = [GIC_SPI, uart.spi, IRQ_TYPE_LEVEL_HIGH];
    match uart.kind {
        kestrel_abi::package::ConsoleKind::Pl011 => {
            w.begin_node("apb-pclk")
                .prop_str("compatible", "fixed-clock")
                .prop_u32("#clock-cells", 0)
                .prop_u32("clock-frequency", APB_PCLK_HZ)
                .prop_str("clock-output-names", "clk24mhz")
                .prop_u32("phandle", phandle::APB_PCLK)
                .end_node();
            w.begin_node(&uart_node_name(uart))
                .prop_strs("compatible", &["arm,pl011", "arm,primecell"])
                .prop_reg("reg", &[(uart.base, uart.size)])
                .prop_cells("interrupts", &uart_irq)
                .prop_cells("clocks", &[phandle::APB_PCLK, phandle::APB_PCLK])
                .prop_strs("clock-names", &["uartclk", "apb_pclk"])
                .end_node();
        }
        kestrel_abi::package::ConsoleKind::Ns16550 => {
            w.begin_node(&uart_node_name(uart))
                .prop_str("compatible", "ns16550a")
                .prop_reg("reg", &[(uart.base, uart.size)])
                .prop_cells("interrupts", &uart_irq)
                .prop_u32("clock-frequency", 1_843_200)
                .prop_u32("reg-shift", 0)
                .prop_u32("reg-io-width", 1)
                .end_node();
        }
    }
    for &(base, size, spi) in &spec.virtio {
        w.begin_node(&format!("virtio_mmio@{base:x}"))
            .prop_str("compatible", "virtio,mmio")
            .prop_reg("reg", &[(base, size)])
            .prop_cells("interrupts", &[GIC_SPI, spi, IRQ_TYPE_LEVEL_HIGH])
            .prop_empty("dma-coherent")
            .end_node();
    }
    for n in &spec.passthrough {
        w.begin_node(&n.name)
            .prop("compatible", &n.compatible)
            .prop_reg("reg", &n.reg);
        if !n.interrupts.is_empty() {
            let cells: Vec<u32> = n
                .interrupts
                .iter()
                .flat_map(|&(spi, flags)| [GIC_SPI, spi, flags])
                .collect();
            w.prop_cells("interrupts", &cells);
        }
        if n.dma_coherent {
            w.prop_empty("dma-coherent");
        }
        w.end_node();
    }
    w.end_node();
    w.boot_cpuid(0);
    // The calls above are balanced, have one root and no NUL in any name
    // (formatted numbers, fixed strings, passthrough node names from the
    // host tree, which `crate::vmm::passthrough` checked): finish cannot fail.
    w.finish().unwrap_or_default()
}

/// What [`guest_dtb_loongarch`] needs for one LoongArch VM. The initrd is
/// given as (start, end) offsets in the VM's RAM, which
/// `guest::loongarch::layout` maps to guest physical addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoongArchDtbSpec<'a> {
    pub ram_size: u64,
    pub vcpus: u16,
    pub bootargs: &'a str,
    pub initrd: Option<(u64, u64)>,
    /// virtio-mmio transports: (base, size, PCH-PIC line).
    pub virtio: &'a [(u64, u64, u32)],
}

/// Phandles of the LoongArch guest tree: its interrupt controllers and
/// the GED syscon.
pub const LA_PHANDLE_CPUIC: u32 = 1;
pub const LA_PHANDLE_EIOINTC: u32 = 2;
pub const LA_PHANDLE_PCH_PIC: u32 = 3;
const LA_PHANDLE_GED: u32 = 4;

/// The device tree kestrel generates for a LoongArch guest (unless the
/// config gives one): memory from 0 (and above the device window when
/// there is more than `layout::LOW_RAM`), one `cpu@N` per vCPU
/// (reg = CPUID), the interrupt controllers as Linux's bindings describe
/// them (`cpuic` <- `eiointc` <- `platic`, the PCH-PIC), the console 16550
/// on PCH-PIC line 2, the virtio-mmio transports (PCH-PIC lines from 16),
/// the power-off and reset registers (also as QEMU virt's GED syscon with
/// `syscon-poweroff`/`syscon-reboot`, which Linux drives), the legacy I/O
/// port window as an `isa` bridge (which Linux maps at boot, so that its
/// legacy drivers' port probes land there), `/chosen` with the command
/// line.
pub fn guest_dtb_loongarch(spec: &LoongArchDtbSpec) -> Vec<u8> {
    use crate::guest::loongarch::layout;
    let mut w = FdtWriter::new();
    w.begin_node("")
        .prop_strs(
            "compatible",
            &["kestrel,guest-loongarch64", "linux,dummy-loongson3"],
        )
        .prop_str("model", "kestrel guest")
        .prop_u32("#address-cells", 2)
        .prop_u32("#size-cells", 2);
    let serial = format!("serial@{:x}", layout::UART);
    w.begin_node("chosen")
        .prop_str("bootargs", spec.bootargs)
        .prop_str("stdout-path", &format!("/{serial}"));
    if let Some((s, e)) = spec.initrd {
        // RAM offsets to guest physical. An initrd that straddles offset
        // LOW_RAM is not contiguous in guest physical memory: such a VM
        // needs its initrd wholly above or below 256 MiB of RAM.
        w.prop_u64("linux,initrd-start", layout::gpa_of(s))
            .prop_u64("linux,initrd-end", layout::gpa_of(e - 1) + 1);
    }
    w.end_node();
    w.begin_node("memory@0")
        .prop_str("device_type", "memory")
        .prop_reg("reg", &layout::ram_ranges(spec.ram_size))
        .end_node();
    w.begin_node("cpus")
        .prop_u32("#address-cells", 1)
        .prop_u32("#size-cells", 0);
    for i in 0..u32::from(spec.vcpus) {
        w.begin_node(&format!("cpu@{i}"))
            .prop_str("device_type", "cpu")
            .prop_str("compatible", "loongson,la464")
            .prop_u32("reg", i)
            .end_node();
    }
    w.end_node();
    // The interrupt controllers, chained as on QEMU virt: the CPU's own
    // (HWI lines, no registers), the EIOINTC in IOCSR space (its `reg` is
    // the IOCSR range; Linux's driver does not map it) on HWI1, the
    // PCH-PIC (MMIO) sending its lines as EIOINTC vectors from 0.
    use crate::guest::loongarch::intc::eiointc;
    w.begin_node("cpuic")
        .prop_str("compatible", "loongson,cpu-interrupt-controller")
        .prop_empty("interrupt-controller")
        .prop_u32("#interrupt-cells", 1)
        .prop_u32("phandle", LA_PHANDLE_CPUIC)
        .end_node();
    w.begin_node(&format!("eiointc@{:x}", eiointc::BASE))
        .prop_str("compatible", "loongson,ls2k2000-eiointc")
        .prop_reg("reg", &[(eiointc::BASE, eiointc::SIZE)])
        .prop_empty("interrupt-controller")
        .prop_u32("#interrupt-cells", 1)
        .prop_u32("interrupt-parent", LA_PHANDLE_CPUIC)
        .prop_u32("interrupts", 3)
        .prop_u32("phandle", LA_PHANDLE_EIOINTC)
        .end_node();
    w.begin_node(&format!("platic@{:x}", layout::PCH_PIC))
        .prop_str("compatible", "loongson,pch-pic-1.0")
        .prop_reg("reg", &[(layout::PCH_PIC, layout::PCH_PIC_SIZE)])
        .prop_empty("interrupt-controller")
        .prop_u32("#interrupt-cells", 2)
        .prop_u32("interrupt-parent", LA_PHANDLE_EIOINTC)
        .prop_u32("loongson,pic-base-vec", 0)
        .prop_u32("phandle", LA_PHANDLE_PCH_PIC)
        .end_node();
    w.begin_node(&serial)
        .prop_str("compatible", "ns16550a")
        .prop_reg("reg", &[(layout::UART, 0x100)])
        .prop_u32("clock-frequency", 100_000_000)
        .prop_u32("interrupt-parent", LA_PHANDLE_PCH_PIC)
        // PCH-PIC line, IRQ_TYPE_LEVEL_HIGH.
        .prop_cells("interrupts", &[layout::UART_IRQ, 4])
        .end_node();
    for &(base, size, line) in spec.virtio {
        w.begin_node(&format!("virtio_mmio@{base:x}"))
            .prop_str("compatible", "virtio,mmio")
            .prop_reg("reg", &[(base, size)])
            .prop_u32("interrupt-parent", LA_PHANDLE_PCH_PIC)
            .prop_cells("interrupts", &[line, 4])
            .prop_empty("dma-coherent")
            .end_node();
    }
    w.begin_node("poweroff")
        .prop_str("compatible", "kestrel,poweroff-byte")
        .prop_reg("reg", &[(layout::POWEROFF, 1)])
        .prop_u32("value", layout::POWEROFF_VALUE as u32)
        .end_node();
    w.begin_node("reboot")
        .prop_str("compatible", "kestrel,reset-byte")
        .prop_reg("reg", &[(layout::POWEROFF + layout::RESET_OFFSET, 1)])
        .prop_u32("value", layout::RESET_VALUE as u32)
        .end_node();
    // The legacy I/O ports, as Loongson boards' trees describe them: an
    // ISA bridge (Linux knows the bus by the node name `isa`: addresses
    // of 2 cells, the first one's bit 0 = I/O space, sizes of 1 cell)
    // whose I/O space from port 0 is the window. Linux's LoongArch setup
    // maps it for `inb`/`outb`; kestrel answers no port in it.
    w.begin_node(&format!("isa@{:x}", layout::ISA_IO))
        .prop_str("compatible", "isa")
        .prop_u32("#address-cells", 2)
        .prop_u32("#size-cells", 1)
        .prop_cells(
            "ranges",
            &[
                1,
                0,
                (layout::ISA_IO >> 32) as u32,
                layout::ISA_IO as u32,
                layout::ISA_IO_SIZE as u32,
            ],
        )
        .end_node();
    // The same two registers as Linux drives them on QEMU virt: a syscon
    // with byte accesses and its power-off and reboot children.
    // (The power-off and reboot nodes are the syscon's siblings: Linux
    // makes platform devices of the root's children only.)
    w.begin_node(&format!("ged@{:x}", layout::POWEROFF))
        .prop_str("compatible", "syscon")
        .prop_reg("reg", &[(layout::POWEROFF, 4)])
        .prop_u32("reg-io-width", 1)
        .prop_u32("phandle", LA_PHANDLE_GED)
        .end_node();
    w.begin_node("syscon-poweroff")
        .prop_str("compatible", "syscon-poweroff")
        .prop_u32("regmap", LA_PHANDLE_GED)
        .prop_u32("offset", 0)
        .prop_u32("value", layout::POWEROFF_VALUE as u32)
        .end_node();
    w.begin_node("syscon-reboot")
        .prop_str("compatible", "syscon-reboot")
        .prop_u32("regmap", LA_PHANDLE_GED)
        .prop_u32("offset", layout::RESET_OFFSET as u32)
        .prop_u32("value", layout::RESET_VALUE as u32)
        .end_node();
    w.end_node();
    // Balanced calls, one root, no NUL in any name: finish cannot fail.
    w.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests;
