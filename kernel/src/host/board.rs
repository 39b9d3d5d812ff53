//! What kestrel knows about the machine it runs on: a board is data
//! (addresses, CPUs, interrupt controller), filled in from the device tree
//! (or, where there is none, by the arch's board table), never a code fork.

use core::fmt;
use heapless::{String, Vec};

/// Most memory regions kept from the device tree.
pub const MAX_MEM_REGIONS: usize = 8;
/// Most warnings kept about the device tree.
pub const MAX_WARNINGS: usize = 4;

/// The architecture kestrel was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Aarch64,
    LoongArch64,
}

impl Arch {
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Aarch64 => "arm64",
            Arch::LoongArch64 => "loongarch64",
        }
    }
}

/// One range of RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRegion {
    pub base: u64,
    pub size: u64,
}

impl MemRegion {
    /// One past the last byte (saturating: a range the firmware made wrap
    /// ends at the top of the address space).
    pub const fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }
}

/// Sorts `regions` by base and merges those that overlap (a range listed
/// twice, or inside another): every byte of RAM once. Ranges that only
/// touch stay apart. Returns whether any overlapped.
pub fn merge_regions<const N: usize>(regions: &mut heapless::Vec<MemRegion, N>) -> bool {
    regions.sort_unstable_by_key(|r| r.base);
    let mut merged: heapless::Vec<MemRegion, N> = heapless::Vec::new();
    let mut overlapped = false;
    for r in regions.iter() {
        match merged.last_mut() {
            Some(last) if r.base < last.end() => {
                overlapped = true;
                last.size = last.end().max(r.end()) - last.base;
            }
            // Cannot fail: no more regions than there were.
            _ => {
                let _ = merged.push(*r);
            }
        }
    }
    *regions = merged;
    overlapped
}

/// One CPU as the firmware names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuDesc {
    /// Hardware id: MPIDR affinity bits on arm64, physical CPU id on LoongArch.
    pub hw_id: u64,
}

/// The interrupt controller and where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqChip {
    /// GICv2 (GIC-400 on Juno): distributor, CPU interface, and (if the
    /// virtualization extension is present) the GICH and GICV frames.
    GicV2 {
        gicd: u64,
        gicc: u64,
        gich: Option<u64>,
        gicv: Option<u64>,
    },
    /// GICv3: distributor and the redistributor region.
    GicV3 {
        gicd: u64,
        gicr: u64,
        gicr_size: u64,
    },
    /// LoongArch: per-core CSR interrupts (timer, IPI) and the EIOINTC in IOCSR space.
    LoongArchEiointc,
}

impl fmt::Display for IrqChip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IrqChip::GicV2 { gicd, gicc, .. } => {
                write!(f, "GICv2 (dist {gicd:#x}, cpu {gicc:#x})")
            }
            IrqChip::GicV3 { gicd, gicr, .. } => {
                write!(f, "GICv3 (dist {gicd:#x}, redist {gicr:#x})")
            }
            IrqChip::LoongArchEiointc => write!(f, "LoongArch CPU-INTC + EIOINTC (IOCSR)"),
        }
    }
}

/// The console UART.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UartKind {
    Pl011,
    Ns16550,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uart {
    pub kind: UartKind,
    pub base: u64,
}

/// How PSCI calls are made (arm64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsciConduit {
    Smc,
    Hvc,
}

/// How guests will run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// arm64 hardware virtualization at EL2.
    El2,
    /// LoongArch with the LVZ extension.
    LoongArchLvz,
    /// LoongArch without LVZ: guests at PLV3, kestrel traps and emulates.
    LoongArchTrapEmulate,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::El2 => "EL2 (stage-2, virtual GIC)",
            Backend::LoongArchLvz => "LVZ (hardware virtualization)",
            Backend::LoongArchTrapEmulate => "trap-and-emulate (no LVZ: guests at PLV3)",
        })
    }
}

/// Everything the boot path learned about the machine.
#[derive(Clone, Debug)]
pub struct BoardInfo {
    pub arch: Arch,
    /// The board's model string (device tree `/model`, or the board table's).
    pub model: String<64>,
    pub memory: Vec<MemRegion, MAX_MEM_REGIONS>,
    pub cpus: Vec<CpuDesc, { crate::MAX_CPUS }>,
    /// CPUs the firmware listed beyond `MAX_CPUS` (left offline, reported).
    pub cpus_ignored: usize,
    pub irqchip: IrqChip,
    pub uart: Option<Uart>,
    /// Counter frequency in Hz (0 if the firmware did not say).
    pub timer_hz: u64,
    pub psci: Option<PsciConduit>,
    pub backend: Backend,
    /// The boot command line (`/chosen/bootargs` or the loader's string).
    pub cmdline: String<256>,
    /// What was unusual in the device tree and the fallback taken (printed
    /// at boot once the console logs).
    pub warnings: Vec<&'static str, MAX_WARNINGS>,
    /// The boot module the loader placed in RAM (the "initrd": device tree
    /// `/chosen/linux,initrd-start|end`, or the LoongArch EFI initrd
    /// table): a VM package that replaces the embedded one
    /// ([`check_module`], `docs/config.md`). Unchecked as parsed.
    pub module: Option<MemRegion>,
}

impl BoardInfo {
    /// Total RAM in bytes (saturating: firmware can list overlapping or
    /// huge ranges).
    pub fn memory_bytes(&self) -> u64 {
        self.memory
            .iter()
            .fold(0u64, |acc, r| acc.saturating_add(r.size))
    }

    /// The logical index of the CPU whose hardware id is `hw_id`.
    pub fn cpu_index(&self, hw_id: u64) -> Option<usize> {
        self.cpus.iter().position(|c| c.hw_id == hw_id)
    }
}

/// Checks the boot module `module` the loader says it placed, before
/// kestrel reads it as a VM package and keeps its frames from guests: it
/// must be non-empty, start on a 4 KiB boundary (so reserving it cannot
/// take part of a page that also holds something else), lie whole inside
/// one RAM region of `memory`, and not overlap `image` (kestrel's own
/// image, with its heap and stacks). The loader's word is firmware input:
/// a module that fails is reported and ignored.
pub fn check_module(
    module: MemRegion,
    memory: &[MemRegion],
    image: (u64, u64),
) -> Result<MemRegion, &'static str> {
    if module.size == 0 {
        return Err("it is empty");
    }
    let Some(end) = module.base.checked_add(module.size) else {
        return Err("it wraps past the top of the address space");
    };
    if !module.base.is_multiple_of(4096) {
        return Err("it does not start on a 4 KiB boundary");
    }
    if !memory
        .iter()
        .any(|r| r.base <= module.base && end <= r.end())
    {
        return Err("it is not inside one RAM region");
    }
    if module.base < image.1 && image.0 < end {
        return Err("it overlaps kestrel's image");
    }
    Ok(module)
}

/// Copies `s` into a bounded string, cutting it at a character boundary.
pub fn bounded<const N: usize>(s: &str) -> String<N> {
    let mut out = String::new();
    for c in s.chars() {
        if out.push(c).is_err() {
            break;
        }
    }
    out
}

/// The board, published once by the boot CPU ([`publish`]).
static BOARD: crate::base::lock::Once<BoardInfo> = crate::base::lock::Once::new();

/// Publishes the board the boot CPU found (once; later calls keep the
/// first) and returns the published copy.
pub fn publish(board: BoardInfo) -> &'static BoardInfo {
    BOARD.call_once(|| board)
}

/// The board, once the boot CPU has published it.
pub fn get() -> Option<&'static BoardInfo> {
    BOARD.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_must_be_whole_in_ram_aligned_and_clear_of_the_image() {
        let ram = [
            MemRegion {
                base: 0,
                size: 0x1000_0000,
            },
            MemRegion {
                base: 0x8000_0000,
                size: 0x1000_0000,
            },
        ];
        let image = (0x20_0000, 0x160_0000);
        let m = |base, size| MemRegion { base, size };
        let ok = m(0x600_0000, 0x10_0001);
        assert_eq!(check_module(ok, &ram, image), Ok(ok), "any length");
        let top = m(0x8000_0000, 0x1000_0000);
        assert_eq!(check_module(top, &ram, image), Ok(top), "a whole region");
        for (bad, why) in [
            (m(0x600_0000, 0), "empty"),
            (m(0x600_0800, 0x1000), "unaligned"),
            (m(0xfff_f000, 0x2000), "runs past the end of RAM"),
            (m(0xfff_f000, 0x8000_2000), "spans the hole between regions"),
            (m(0x4000_0000, 0x1000), "in the hole"),
            (m(0x100_0000, 0x100_0000), "overlaps the image's end"),
            (m(0x10_0000, 0x20_0000), "overlaps the image's start"),
            (m(0xffff_ffff_ffff_f000, 0x2000), "wraps"),
        ] {
            assert!(check_module(bad, &ram, image).is_err(), "{why}");
        }
    }

    #[test]
    fn bounded_cuts_long_strings_at_char_boundary() {
        let s: String<4> = bounded("abcdé");
        assert_eq!(s.as_str(), "abcd");
        let s: String<5> = bounded("abcdé");
        assert_eq!(s.as_str(), "abcd", "é needs two bytes, only one fits");
        let s: String<8> = bounded("ab");
        assert_eq!(s.as_str(), "ab");
    }
}
