//! From the embedded package to the VMs to create.
//!
//! The firmware embeds a kestrel package (format: [`kestrel_abi::package`]).
//! [`plan`] checks its header (a bad header refuses every VM), then each VM
//! on its own: the record and its images ([`VmError`]), then what only the
//! running machine can say — are its pCPUs online, does another pinned VM
//! already own one, is there host memory left, does its kind run on this
//! architecture. Each VM ends up a [`VmSpec`] (plain data: names, sizes and
//! guest physical addresses for the VM-creation code) or a
//! [`VmConfigError`] that is printed while the other VMs still start.
//!
//! Guest physical map (arm64, as QEMU `virt`, so stock guest kernels work):
//! RAM at [`ARM64_GUEST_RAM_BASE`], GIC distributor `0x0800_0000`,
//! redistributors `0x080A_0000` (GICv3) or CPU interface `0x0801_0000`
//! (GICv2), console UART `0x0900_0000` (SPI 1). LoongArch guests get RAM at
//! [`LOONGARCH_GUEST_RAM_BASE`].

use alloc::vec::Vec;
use core::fmt;

use kestrel_abi::package::{
    Affinity, ConsoleKind, Devices, Field, GuestKind, Package, PackageError, Passthroughs, Problem,
    VmError, VmRecord,
};

use crate::host::board::Arch;
use crate::vcpu::steal::PvTimeRegion;
use crate::vmm::fdt_build::{guest_dtb_arm64, GuestDtbSpec, GuestGic, GuestPtNode, GuestUart};

/// Guest physical base of RAM on arm64.
pub const ARM64_GUEST_RAM_BASE: u64 = 0x4000_0000;
/// Guest physical base of RAM on LoongArch (low memory, as QEMU `virt`).
pub const LOONGARCH_GUEST_RAM_BASE: u64 = 0;
/// arm64 guest GIC distributor.
pub const GUEST_GICD: (u64, u64) = (0x0800_0000, 0x1_0000);
/// arm64 guest GICv2 CPU interface.
pub const GUEST_GICC: (u64, u64) = (0x0801_0000, 0x1_0000);
/// arm64 guest GICv3 redistributors (room for 123 vCPUs, as QEMU).
pub const GUEST_GICR: (u64, u64) = (0x080A_0000, 0xF6_0000);
/// arm64 guest console UART and its SPI.
pub const GUEST_UART: (u64, u64, u32) = (0x0900_0000, 0x1000, 1);
/// arm64 guest virtio-mmio transports: the first one's base, the stride
/// between them, and the first one's SPI (slot i: base + i * stride, SPI
/// first + i), as QEMU `virt` places them.
pub const GUEST_VIRTIO: (u64, u64, u32) = (0x0a00_0000, 0x200, 16);

/// What sits in a virtio-mmio slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioSlotKind {
    Console,
    /// The i-th device of the VM's device table.
    Device(usize),
}

/// One virtio-mmio transport of a VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioSlot {
    pub base: u64,
    pub size: u64,
    pub spi: u32,
    pub kind: VirtioSlotKind,
}

static PACKAGE: crate::base::lock::Once<&'static [u8]> = crate::base::lock::Once::new();
static MODULE: crate::base::lock::Once<&'static [u8]> = crate::base::lock::Once::new();

/// Records the package embedded in the firmware (the boot crate calls this
/// once, early). Later calls are ignored.
pub fn set_package(bytes: &'static [u8]) {
    PACKAGE.call_once(|| bytes);
}

/// Offers the boot module (the loader's initrd, already checked against
/// the board's RAM and kept from guests by the caller) as the VM package.
/// A module that is a valid package replaces the embedded one from here
/// on, and the number of its VMs is returned; anything else is refused
/// with the reason and the embedded package stays. Only the first offer
/// counts.
pub fn set_module(bytes: &'static [u8]) -> Result<usize, alloc::string::String> {
    let vms = Package::parse(bytes)
        .map_err(|e| alloc::format!("not a kestrel VM package: {e}"))?
        .vm_count();
    let mut taken = false;
    MODULE.call_once(|| {
        taken = true;
        bytes
    });
    if !taken {
        return Err("a boot module was already taken".into());
    }
    Ok(vms)
}

/// Logs what became of the boot module at `m` that [`set_module`] was
/// offered.
pub fn log_module(m: crate::host::board::MemRegion, taken: Result<usize, alloc::string::String>) {
    match taken {
        Ok(vms) => log::info!(
            "boot module at [{:#x}-{:#x}) ({} KiB): a VM package of {vms} VM(s), used instead of the embedded one",
            m.base,
            m.end(),
            m.size >> 10
        ),
        Err(why) => log_module_refused(m, &why),
    }
}

/// Logs that the boot module at `m` was refused, and why.
pub fn log_module_refused(m: crate::host::board::MemRegion, why: &str) {
    log::error!(
        "boot module at [{:#x}-{:#x}): {why}; ignored (the embedded package's VMs run)",
        m.base,
        m.end()
    );
}

/// The VM package: the boot module's when one was taken ([`set_module`]),
/// else the embedded one; empty before either (no VMs).
pub fn package() -> &'static [u8] {
    MODULE.get().or(PACKAGE.get()).copied().unwrap_or(&[])
}

/// Host RAM kept back from guests for the hypervisor (image, heap, page
/// tables) until VM creation accounts memory exactly.
pub const HYPERVISOR_RESERVE: u64 = 64 << 20;

/// Where the guest's DTB comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtbSource<'a> {
    /// Given in the config: used as is.
    Provided(&'a [u8]),
    /// kestrel generates it ([`VmSpec::guest_dtb`]).
    Generate,
}

/// One VM as the VM-creation code needs it. Addresses are guest physical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmSpec<'a> {
    /// Index in the package (also the VM's position in the config).
    pub index: usize,
    pub name: &'a str,
    pub vcpus: u16,
    pub affinity: Affinity,
    pub kind: GuestKind,
    pub console: ConsoleKind,
    pub ram_base: u64,
    pub ram_size: u64,
    pub kernel: &'a [u8],
    /// Where the kernel is copied.
    pub kernel_gpa: u64,
    /// Where the first vCPU starts.
    pub entry_gpa: u64,
    pub initrd: Option<&'a [u8]>,
    /// Guest physical address of the initrd (when there is one).
    pub initrd_gpa: u64,
    pub dtb: DtbSource<'a>,
    /// Where the DTB is copied (x0 at entry on arm64).
    pub dtb_gpa: u64,
    pub cmdline: &'a str,
    /// A virtio console (`hvc0`) beside the UART.
    pub virtio_console: bool,
    /// What a guest reset does: restart the VM from its images, or end it.
    pub on_reboot: OnReboot,
    /// Disks and network ports, in config order.
    pub devices: Devices<'a>,
    /// Host devices passed through (arm64), in config order.
    pub passthrough: Passthroughs,
    /// RAM at IPA == PA: `ram_base` and the addresses above are moved to
    /// where the host gives the RAM ([`VmSpec::rebased`]) when the VM is built.
    pub identity: bool,
    /// The PV IPI feature is offered to the guest (config `pv_ipi`, default
    /// true): advertised (LoongArch `cpucfg`, the features hypercall) and
    /// its hypercall served; false hides it and refuses the call.
    pub pv_ipi: bool,
    /// arm64 paravirtual stolen time is offered (config `pv_time`, default
    /// true): only to an arm64 VM whose DTB kestrel generates, which
    /// reserves the records' region ([`VmSpec::pv_time_region`]).
    pub pv_time: bool,
    /// arm64 SVE: the VM's maximum vector length in bits (config `sve`,
    /// `sve_max_vl`); 0 = SVE hidden. The backend gives every vCPU the
    /// longest length the CPU supports up to this, or refuses the VM on a
    /// CPU without SVE.
    pub sve_vl: u16,
}

pub use crate::vm::OnReboot;

impl<'a> VmSpec<'a> {
    /// The same VM with its RAM (and the images and DTB in it) at `ram_base`.
    pub fn rebased(&self, ram_base: u64) -> VmSpec<'a> {
        let moved = |a: u64| a - self.ram_base + ram_base;
        VmSpec {
            ram_base,
            kernel_gpa: moved(self.kernel_gpa),
            entry_gpa: moved(self.entry_gpa),
            initrd_gpa: moved(self.initrd_gpa),
            dtb_gpa: moved(self.dtb_gpa),
            ..*self
        }
    }

    /// Turns a validated record into a spec for `arch`.
    pub fn from_record(rec: &VmRecord<'a>, arch: Arch) -> Self {
        let ram_base = match arch {
            Arch::Aarch64 => ARM64_GUEST_RAM_BASE,
            Arch::LoongArch64 => LOONGARCH_GUEST_RAM_BASE,
        };
        let l = rec.layout;
        VmSpec {
            index: rec.index,
            name: rec.name,
            vcpus: rec.vcpus,
            affinity: rec.affinity,
            kind: rec.kind,
            console: rec.console,
            ram_base,
            ram_size: rec.memory,
            kernel: rec.kernel,
            kernel_gpa: ram_base + l.kernel,
            entry_gpa: ram_base + l.kernel + rec.entry_offset,
            initrd: rec.initrd,
            initrd_gpa: ram_base + l.initrd,
            dtb: rec.dtb.map_or(DtbSource::Generate, DtbSource::Provided),
            dtb_gpa: ram_base + l.dtb,
            cmdline: rec.cmdline,
            virtio_console: rec.virtio_console,
            on_reboot: if rec.reboot_stop {
                OnReboot::Stop
            } else {
                OnReboot::Restart
            },
            devices: rec.devices,
            passthrough: rec.passthrough,
            identity: rec.identity,
            pv_ipi: !rec.pv_ipi_hidden,
            // Stolen time (DEN0057A) is an SMC64 interface: not for AArch32.
            pv_time: arch == Arch::Aarch64
                && !rec.kind.is_aarch32()
                && !rec.pv_time_hidden
                && rec.dtb.is_none(),
            // SVE is AArch64 state: an AArch32 VM never has it.
            sve_vl: if arch == Arch::Aarch64 && !rec.kind.is_aarch32() {
                rec.sve_vl
            } else {
                0
            },
        }
    }

    /// Where the vCPUs' stolen-time records are (arm64, `pv_time`): the
    /// last 64 KiB of RAM, which the generated DTB reserves.
    pub fn pv_time_region(&self) -> Option<PvTimeRegion> {
        if !self.pv_time {
            return None;
        }
        PvTimeRegion::at_top_of(self.ram_base, self.ram_size, usize::from(self.vcpus))
    }

    /// Guest physical (start, end) of the initrd.
    pub fn initrd_range(&self) -> Option<(u64, u64)> {
        self.initrd
            .map(|i| (self.initrd_gpa, self.initrd_gpa + i.len() as u64))
    }

    /// What [`guest_dtb_arm64`] needs for this VM, with a GICv3 or GICv2.
    pub fn dtb_spec_arm64(&self, gic_v3: bool) -> GuestDtbSpec<'a> {
        GuestDtbSpec {
            ram_base: self.ram_base,
            ram_size: self.ram_size,
            vcpus: self.vcpus,
            gic: if gic_v3 {
                GuestGic::V3 {
                    dist: GUEST_GICD,
                    redist: GUEST_GICR,
                }
            } else {
                GuestGic::V2 {
                    dist: GUEST_GICD,
                    cpu: GUEST_GICC,
                }
            },
            uart: GuestUart {
                kind: self.console,
                base: GUEST_UART.0,
                size: GUEST_UART.1,
                spi: GUEST_UART.2,
            },
            bootargs: self.cmdline,
            initrd: self.initrd_range(),
            virtio: self
                .virtio_slots()
                .iter()
                .map(|v| (v.base, v.size, v.spi))
                .collect(),
            passthrough: Vec::new(),
            reserved: self
                .pv_time_region()
                .map(|r| r.range())
                .into_iter()
                .collect(),
        }
    }

    /// The VM's virtio-mmio transports on arm64, in slot order: the virtio
    /// console (when asked for) first, then the device table's entries.
    /// The DTB writer and the VM builder both take them from here.
    pub fn virtio_slots(&self) -> Vec<VirtioSlot> {
        self.virtio_slots_at(GUEST_VIRTIO)
    }

    /// [`VmSpec::virtio_slots`] in another window: `(base, size per slot,
    /// interrupt line of the first)` (LoongArch: PCH-PIC lines).
    pub fn virtio_slots_at(&self, window: (u64, u64, u32)) -> Vec<VirtioSlot> {
        let console = self.virtio_console.then_some(VirtioSlotKind::Console);
        let devices = (0..self.devices.len()).map(VirtioSlotKind::Device);
        console
            .into_iter()
            .chain(devices)
            .enumerate()
            .map(|(i, kind)| VirtioSlot {
                base: window.0 + i as u64 * window.1,
                size: window.1,
                spi: window.2 + i as u32,
                kind,
            })
            .collect()
    }

    /// The DTB to give an arm64 guest: the config's, or a generated one.
    pub fn guest_dtb(&self, gic_v3: bool) -> alloc::borrow::Cow<'a, [u8]> {
        self.guest_dtb_with(gic_v3, Vec::new())
    }

    /// [`VmSpec::guest_dtb`] with the passed-through host devices `pt`
    /// described in a generated one.
    pub fn guest_dtb_with(
        &self,
        gic_v3: bool,
        pt: Vec<GuestPtNode>,
    ) -> alloc::borrow::Cow<'a, [u8]> {
        match self.dtb {
            DtbSource::Provided(d) => alloc::borrow::Cow::Borrowed(d),
            DtbSource::Generate => {
                let mut spec = self.dtb_spec_arm64(gic_v3);
                spec.passthrough = pt;
                alloc::borrow::Cow::Owned(guest_dtb_arm64(&spec))
            }
        }
    }
}

/// What the running machine offers the VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLimits {
    pub arch: Arch,
    /// pCPUs online (0..online).
    pub online_cpus: u32,
    /// Host RAM available to guests, in bytes.
    pub guest_memory: u64,
}

/// Why a VM was refused at boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmConfigError {
    /// The record or its images are bad.
    Record(VmError),
    /// The kind does not run on this architecture.
    WrongArch {
        index: usize,
        kind: GuestKind,
        arch: Arch,
    },
    /// Affinity names a pCPU that is not online.
    CpuOffline { index: usize, cpu: u32, online: u32 },
    /// A pinned VM wants a pCPU another pinned VM already owns.
    PinnedConflict {
        index: usize,
        cpu: u32,
        owner: usize,
    },
    /// Not enough host memory left.
    OutOfMemory { index: usize, need: u64, left: u64 },
    /// The RAM does not fit the VM's guest physical address space.
    RamTooLarge { index: usize, memory: u64 },
    /// Passthrough or identity RAM where this architecture has none.
    NoPassthrough { index: usize, arch: Arch },
}

impl fmt::Display for VmConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VmConfigError::Record(e) => write!(f, "{e}"),
            VmConfigError::WrongArch { index, kind, arch } => {
                write!(
                    f,
                    "vm[{index}]: kind: a {} guest cannot run on {}",
                    kind.name(),
                    arch.name()
                )
            }
            VmConfigError::CpuOffline { index, cpu, online } => {
                write!(
                    f,
                    "vm[{index}]: cpus: pCPU {cpu} is not online (this machine has {online})"
                )
            }
            VmConfigError::PinnedConflict { index, cpu, owner } => {
                write!(
                    f,
                    "vm[{index}]: cpus: pCPU {cpu} is already pinned to vm[{owner}]"
                )
            }
            VmConfigError::OutOfMemory { index, need, left } => write!(
                f,
                "vm[{index}]: memory: {} MiB needed, only {} MiB of host memory left",
                need >> 20,
                left >> 20
            ),
            VmConfigError::RamTooLarge { index, memory } => write!(
                f,
                "vm[{index}]: memory: {} MiB does not fit a {GUEST_PA_BITS}-bit guest physical \
                 address space",
                memory >> 20
            ),
            VmConfigError::NoPassthrough { index, arch } => write!(
                f,
                "vm[{index}]: passthrough: device passthrough and identity RAM are arm64-only, \
                 not for {}",
                arch.name()
            ),
        }
    }
}

impl From<VmError> for VmConfigError {
    fn from(e: VmError) -> Self {
        VmConfigError::Record(e)
    }
}

/// The VMs of `package` for this machine, in package order: each one a spec
/// or the reason it is refused. Memory is granted in order, so an early VM
/// that fits is never displaced by a later one. An empty slice is a firmware
/// built without a config: no VMs.
pub fn plan<'a>(
    package: &'a [u8],
    host: HostLimits,
) -> Result<Vec<Result<VmSpec<'a>, VmConfigError>>, PackageError> {
    if package.is_empty() {
        return Ok(Vec::new());
    }
    let pkg = Package::parse(package)?;
    let mut left = host.guest_memory;
    // owner[cpu] = index of the pinned VM that owns it.
    let mut owner: [Option<usize>; 64] = [None; 64];
    let mut out = Vec::with_capacity(pkg.vm_count());
    for r in pkg.vms() {
        out.push(
            r.map_err(VmConfigError::from)
                .and_then(|rec| admit(&rec, host, &mut left, &mut owner)),
        );
    }
    Ok(out)
}

/// Guest physical address bits a VM has (arm64 stage 2 and LoongArch PALEN).
pub const GUEST_PA_BITS: u32 = 48;

/// One past the highest guest physical address of `memory` bytes of RAM as
/// `arch` lays it out (`None` if that overflows).
fn guest_ram_end(arch: Arch, memory: u64) -> Option<u64> {
    use crate::guest::loongarch::layout::{HIGH_RAM_BASE, LOW_RAM};
    match arch {
        Arch::Aarch64 => ARM64_GUEST_RAM_BASE.checked_add(memory),
        Arch::LoongArch64 if memory <= LOW_RAM => Some(memory),
        Arch::LoongArch64 => memory.checked_add(HIGH_RAM_BASE - LOW_RAM),
    }
}

fn admit<'a>(
    rec: &VmRecord<'a>,
    host: HostLimits,
    left: &mut u64,
    owner: &mut [Option<usize>; 64],
) -> Result<VmSpec<'a>, VmConfigError> {
    let index = rec.index;
    let runs_here = matches!(
        (rec.kind, host.arch),
        (GuestKind::LinuxArm64Image, Arch::Aarch64)
            | (
                GuestKind::LinuxArm32ZImage | GuestKind::TestRaw32,
                Arch::Aarch64
            )
            | (GuestKind::LinuxLoongArchElf, Arch::LoongArch64)
            | (GuestKind::LinuxLoongArchImage, Arch::LoongArch64)
            | (GuestKind::TestRaw | GuestKind::TestElf, _)
    );
    if !runs_here {
        return Err(VmConfigError::WrongArch {
            index,
            kind: rec.kind,
            arch: host.arch,
        });
    }
    if host.arch != Arch::Aarch64 && (rec.identity || !rec.passthrough.is_empty()) {
        return Err(VmConfigError::NoPassthrough {
            index,
            arch: host.arch,
        });
    }
    let mask = rec.affinity.mask;
    if mask != 0 {
        let highest = 63 - mask.leading_zeros();
        if highest >= host.online_cpus {
            return Err(VmConfigError::CpuOffline {
                index,
                cpu: highest,
                online: host.online_cpus,
            });
        }
    } else if host.online_cpus == 0 {
        return Err(VmConfigError::CpuOffline {
            index,
            cpu: 0,
            online: 0,
        });
    }
    // Only exclusive pinning owns pCPUs (`exclusive = false`: shared).
    let owns = rec.affinity.pinned && !rec.affinity.shared;
    if owns {
        for cpu in 0..64u32 {
            if mask & (1 << cpu) != 0 {
                if let Some(o) = owner[cpu as usize] {
                    return Err(VmConfigError::PinnedConflict {
                        index,
                        cpu,
                        owner: o,
                    });
                }
            }
        }
    }
    if guest_ram_end(host.arch, rec.memory).is_none_or(|end| end > 1 << GUEST_PA_BITS) {
        return Err(VmConfigError::RamTooLarge {
            index,
            memory: rec.memory,
        });
    }
    if rec.memory > *left {
        return Err(VmConfigError::OutOfMemory {
            index,
            need: rec.memory,
            left: *left,
        });
    }
    *left -= rec.memory;
    if owns {
        for (cpu, slot) in owner.iter_mut().enumerate() {
            if mask & (1 << cpu) != 0 {
                *slot = Some(index);
            }
        }
    }
    Ok(VmSpec::from_record(rec, host.arch))
}

/// Logs the plan: one line per VM started or refused. Returns the VMs to
/// start and the refusals (the caller tells the operator).
pub fn report<'a>(package: &'a [u8], host: HostLimits) -> Report<'a> {
    let mut refused = Vec::new();
    match plan(package, host) {
        Err(e) => {
            log::error!("VM package refused: {e}; no VM will start");
            refused.push(("(package)".into(), alloc::format!("{e}")));
            Report {
                specs: Vec::new(),
                refused,
            }
        }
        Ok(vms) => {
            let mut ok = Vec::new();
            let pkg = kestrel_abi::package::Package::parse(package).ok();
            for (i, v) in vms.into_iter().enumerate() {
                match v {
                    Ok(s) => {
                        log::info!(
                            "vm[{}] \"{}\": {} vCPUs, {} MiB, {}",
                            s.index,
                            s.name,
                            s.vcpus,
                            s.ram_size >> 20,
                            s.kind.name()
                        );
                        ok.push(s);
                    }
                    Err(e) => {
                        log::error!("VM refused: {e}");
                        // Its name, when its record can be read.
                        let name = pkg
                            .as_ref()
                            .and_then(|p| p.vm(i).ok())
                            .map_or(alloc::string::String::from("-"), |r| r.name.into());
                        refused.push((name, alloc::format!("{e}")));
                    }
                }
            }
            Report { specs: ok, refused }
        }
    }
}

/// What [`report`] found in a package: the VMs that may be built, and the
/// refused ones as (name, reason), for the operator's list.
pub struct Report<'a> {
    pub specs: Vec<VmSpec<'a>>,
    pub refused: Vec<(alloc::string::String, alloc::string::String)>,
}

/// The tick the package asks for (`[hypervisor] tick_hz`), if it names
/// one kestrel can run (1..=10000 Hz).
pub fn tick_hz(package: &[u8]) -> Option<u32> {
    let p = kestrel_abi::package::Package::parse(package).ok()?;
    Some(p.settings().tick_hz).filter(|hz| (1..=10_000).contains(hz))
}

/// The console mode and scrollback size the package asks for (kestrel's
/// defaults where it says nothing, or when it cannot be read).
pub fn console_settings(package: &[u8]) -> (crate::vmm::console::Mode, usize) {
    use crate::vmm::console::{Mode, SCROLLBACK_DEFAULT};
    let Ok(p) = kestrel_abi::package::Package::parse(package) else {
        return (Mode::Raw, SCROLLBACK_DEFAULT);
    };
    let s = p.settings();
    let mode = match s.console {
        kestrel_abi::package::ConsoleMode::Log => Mode::Log,
        _ => Mode::Raw,
    };
    let scrollback = match s.scrollback {
        0 => SCROLLBACK_DEFAULT,
        n => n as usize,
    };
    (mode, scrollback)
}

/// Checks that an error is about `field` (used by tests and by callers that
/// react to specific problems).
pub fn is_field(e: &VmConfigError, field: Field) -> bool {
    matches!(e, VmConfigError::Record(VmError { field: f, .. }) if *f == field)
}

/// Whether `e` says the VM's images do not fit its memory.
pub fn is_too_small(e: &VmConfigError) -> bool {
    matches!(
        e,
        VmConfigError::Record(VmError {
            problem: Problem::DoesNotFit { .. },
            ..
        })
    )
}

#[cfg(test)]
mod tests;
