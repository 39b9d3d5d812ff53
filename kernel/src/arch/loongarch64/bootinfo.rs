//! What the loader hands the boot CPU, as QEMU's LoongArch virt machine
//! passes it (hw/loongarch/boot.c, direct kernel boot):
//!
//! - a0 = 1 (EFI-style boot: a1/a2 are valid),
//! - a1 = physical address of the NUL-terminated command line (512 bytes at
//!   most; QEMU puts it at physical 0),
//! - a2 = physical address of a minimal EFI system table whose configuration
//!   tables hold the boot memory map, the initrd and the device tree
//!   (DEVICE_TREE_GUID; QEMU places the FDT at physical 0x10_0000).

use super::dmw;
use crate::host::board::MemRegion;

/// Where QEMU's virt machine puts the FDT when no table says otherwise.
pub const QEMU_VIRT_FDT_PA: u64 = 0x10_0000;
/// Largest device tree kestrel accepts.
const MAX_FDT_SIZE: usize = 2 << 20;
/// The command-line buffer size QEMU uses (COMMAND_LINE_SIZE).
const CMDLINE_MAX: usize = 512;
/// Everything the loader passes lives in low RAM (first 256 MiB on virt).
const LOW_RAM_END: u64 = 0x1000_0000;

const EFI_SYSTEM_TABLE_SIGNATURE: u64 = 0x5453_5953_2049_4249; // "IBI SYST"
/// b1b621d5-f19c-41a5-830b-d9152c69aae0, in EFI byte order.
const DEVICE_TREE_GUID: [u8; 16] = [
    0xd5, 0x21, 0xb6, 0xb1, 0x9c, 0xf1, 0xa5, 0x41, 0x83, 0x0b, 0xd9, 0x15, 0x2c, 0x69, 0xaa, 0xe0,
];
/// 5568e427-68fc-4f3d-ac74-ca555231cc68, in EFI byte order.
const LINUX_EFI_INITRD_GUID: [u8; 16] = [
    0x27, 0xe4, 0x68, 0x55, 0xfc, 0x68, 0x3d, 0x4f, 0xac, 0x74, 0xca, 0x55, 0x52, 0x31, 0xcc, 0x68,
];
/// Offsets in the EFI system table (64-bit layout).
const SYSTAB_NR_TABLES: u64 = 104;
const SYSTAB_TABLES: u64 = 112;
const CONFIG_ENTRY_SIZE: u64 = 24;

fn read_u64(pa: u64) -> u64 {
    // SAFETY: callers only pass 8-byte aligned addresses below LOW_RAM_END,
    // which is RAM on every LoongArch virt/3A5000 layout; the cached window
    // maps it read-only from kestrel's point of view.
    unsafe { core::ptr::read_volatile(dmw::cached(pa) as *const u64) }
}

fn in_low_ram(pa: u64, len: u64) -> bool {
    pa.checked_add(len).is_some_and(|end| end <= LOW_RAM_END)
}

/// The physical address a configuration table of the EFI system table at
/// `systab_pa` gives for `guid`, if `systab_pa` holds one.
fn efi_table(systab_pa: u64, want: &[u8; 16]) -> Option<u64> {
    if !systab_pa.is_multiple_of(8) || !in_low_ram(systab_pa, SYSTAB_TABLES + 8) {
        return None;
    }
    if read_u64(systab_pa) != EFI_SYSTEM_TABLE_SIGNATURE {
        return None;
    }
    let nr = read_u64(systab_pa + SYSTAB_NR_TABLES).min(64);
    let tables = read_u64(systab_pa + SYSTAB_TABLES);
    if !tables.is_multiple_of(8) || !in_low_ram(tables, nr * CONFIG_ENTRY_SIZE) {
        return None;
    }
    (0..nr)
        .map(|i| tables + i * CONFIG_ENTRY_SIZE)
        .find_map(|entry| {
            let lo = read_u64(entry).to_le_bytes();
            let hi = read_u64(entry + 8).to_le_bytes();
            let mut guid = [0u8; 16];
            guid[..8].copy_from_slice(&lo);
            guid[8..].copy_from_slice(&hi);
            (&guid == want).then(|| dmw::to_phys(read_u64(entry + 16)))
        })
}

/// The FDT address from the EFI system table at `systab_pa`, if it is one.
pub fn fdt_from_efi(systab_pa: u64) -> Option<u64> {
    efi_table(systab_pa, &DEVICE_TREE_GUID)
}

/// The initrd QEMU's direct boot loaded (`-initrd`), from the EFI system
/// table at `systab_pa`: the table Linux reads (LINUX_EFI_INITRD_MEDIA_GUID,
/// base and size as two u64). `None` without one or with size 0.
pub fn initrd_from_efi(systab_pa: u64) -> Option<MemRegion> {
    let table = efi_table(systab_pa, &LINUX_EFI_INITRD_GUID)?;
    if !table.is_multiple_of(8) || !in_low_ram(table, 16) {
        return None;
    }
    let (base, size) = (read_u64(table), read_u64(table + 8));
    (size > 0).then_some(MemRegion { base, size })
}

/// The device tree at physical `pa`, if a valid header is there.
pub fn fdt_at(pa: u64) -> Option<&'static [u8]> {
    if !pa.is_multiple_of(8) || !in_low_ram(pa, 8) {
        return None;
    }
    let first = read_u64(pa).to_le_bytes();
    let size = crate::host::dtb::total_size(&first)?;
    if size > MAX_FDT_SIZE || !in_low_ram(pa, size as u64) {
        return None;
    }
    // SAFETY: [pa, pa + size) is low RAM holding the loader's device tree,
    // which nothing writes after boot; the cached window maps it.
    Some(unsafe { core::slice::from_raw_parts(dmw::cached(pa) as *const u8, size) })
}

/// Finds the device tree: the EFI configuration table first, then QEMU's
/// fixed address. Returns it and where it was found.
pub fn find_fdt(systab_pa: u64) -> Option<(&'static [u8], u64, &'static str)> {
    if let Some(pa) = fdt_from_efi(systab_pa) {
        if let Some(blob) = fdt_at(pa) {
            return Some((blob, pa, "EFI configuration table"));
        }
    }
    fdt_at(QEMU_VIRT_FDT_PA).map(|b| (b, QEMU_VIRT_FDT_PA, "QEMU virt default address"))
}

/// The command line at physical `pa` (the a1 string): up to the first NUL,
/// `None` if it is not printable text.
pub fn cmdline_at(pa: u64) -> Option<&'static str> {
    if !in_low_ram(pa, CMDLINE_MAX as u64) {
        return None;
    }
    // SAFETY: [pa, pa + CMDLINE_MAX) is low RAM holding the loader's
    // command-line buffer, never written after boot.
    let buf = unsafe { core::slice::from_raw_parts(dmw::cached(pa) as *const u8, CMDLINE_MAX) };
    let len = buf.iter().position(|&b| b == 0)?;
    let s = core::str::from_utf8(&buf[..len]).ok()?;
    s.chars()
        .all(|c| !c.is_control() || c == '\t')
        .then_some(s.trim())
}

/// The syscon power-off register as the device tree describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerOffReg {
    /// Physical address of the register (syscon base + offset).
    pub pa: u64,
    pub value: u32,
    /// Access width in bytes (the syscon's `reg-io-width`, default 4).
    pub width: u8,
}

/// QEMU virt's GED sleep-control register: SLP_TYP 5 | SLP_EN = 0x34, one byte.
pub const QEMU_VIRT_POWEROFF: PowerOffReg = PowerOffReg {
    pa: 0x100e_001c,
    value: 0x34,
    width: 1,
};

/// Reads `/poweroff` (compatible "syscon-poweroff": regmap phandle, offset,
/// value) and the syscon it points at.
pub fn fdt_poweroff(blob: &[u8]) -> Option<PowerOffReg> {
    let fdt = crate::host::dtb::Tree::new(blob).ok()?;
    let node = fdt.find_compatible(&["syscon-poweroff"])?;
    let regmap = node.prop_u64("regmap")? as u32;
    let offset = node.prop_u64("offset").unwrap_or(0);
    let value = node.prop_u64("value")? as u32;
    let syscon = fdt.find_phandle(regmap)?;
    let (base, _) = syscon.reg()?.next()?;
    let width = syscon.prop_u64("reg-io-width").unwrap_or(4);
    let width = if matches!(width, 1 | 2 | 4) {
        width as u8
    } else {
        4
    };
    Some(PowerOffReg {
        pa: base.checked_add(offset)?,
        value,
        width,
    })
}

/// Physical memory the UEFI memory map describes as memory (not MMIO),
/// read through the cached window: where the ACPI reader may look.
pub struct FirmwareMemory<'a> {
    described: &'a crate::host::reserve::Ranges,
}

impl<'a> FirmwareMemory<'a> {
    pub fn new(described: &'a crate::host::reserve::Ranges) -> Self {
        FirmwareMemory { described }
    }
}

impl crate::host::acpi::PhysMem for FirmwareMemory<'_> {
    fn read(&self, pa: u64, len: usize) -> Option<&[u8]> {
        let end = pa.checked_add(len as u64)?;
        if end > dmw::PA_MASK {
            return None;
        }
        self.described
            .as_slice()
            .iter()
            .any(|&(s, e)| s <= pa && end <= e)
            .then(|| {
                // SAFETY: [pa, end) lies inside one range the firmware's
                // memory map lists as memory (RAM, ACPI, runtime or
                // reserved, never MMIO), below the physical address limit,
                // reached through the cached window; the firmware's tables
                // there are not written after boot services end, and
                // nothing of kestrel's lives in the ranges that are not free.
                unsafe { core::slice::from_raw_parts(dmw::cached(pa) as *const u8, len) }
            })
    }
}
