//! EL2 stage-1 translation (non-VHE regime, TTBR0_EL2 only): an identity
//! map of the low 512 GiB of physical address space with a 4 KiB granule,
//! T0SZ = 25 (39-bit VA, walks start at level 1).
//!
//! - every 1 GiB not touching RAM: one Device-nGnRE, execute-never block;
//! - a 1 GiB wholly RAM: one Normal write-back, inner-shareable block;
//! - a 1 GiB partly RAM: a level-2 table of 2 MiB blocks, Normal where the
//!   block overlaps a DTB memory region, Device (XN) elsewhere.
//!
//! Only RAM is executable. The tables are static (.bss): one level-1 table
//! and up to [`MAX_L2`] level-2 tables. All CPUs share them.

use crate::base::lock::Once;
use core::cell::UnsafeCell;

use aarch64_cpu::registers::*;

use crate::host::board::MemRegion;

const ENTRIES: usize = 512;
const GIB: u64 = 1 << 30;
const BLOCK_2M: u64 = 2 << 20;
/// Level-2 tables available for 1 GiB ranges that are partly RAM.
pub const MAX_L2: usize = 16;
/// The top of the identity map (T0SZ = 25).
pub const VA_LIMIT: u64 = 1 << 39;

// MAIR_EL2: attr0 Device-nGnRE, attr1 Normal inner/outer write-back
// read/write-allocate.
const ATTR_DEVICE: u64 = 0;
const ATTR_NORMAL: u64 = 1;
const MAIR: u64 = 0x04 | (0xff << 8);

// Descriptor bits (stage 1, EL2 regime).
const DESC_BLOCK: u64 = 0b01;
const DESC_TABLE: u64 = 0b11;
const ATTR_INDX_SHIFT: u64 = 2;
/// AP[1]: RES1 in the single-privilege EL2 regime; AP[2] = 0: read/write.
const AP_EL2_RW: u64 = 1 << 6;
const SH_INNER: u64 = 0b11 << 8;
const AF: u64 = 1 << 10;
/// XN (bit 54) of the EL2 regime.
const XN: u64 = 1 << 54;

const NORMAL_BLOCK: u64 = DESC_BLOCK | (ATTR_NORMAL << ATTR_INDX_SHIFT) | AP_EL2_RW | SH_INNER | AF;
const DEVICE_BLOCK: u64 = DESC_BLOCK | (ATTR_DEVICE << ATTR_INDX_SHIFT) | AP_EL2_RW | AF | XN;

// TCR_EL2 (E2H = 0): T0SZ 25, inner/outer WB-WA walks, inner shareable,
// 4 KiB granule, PS from ID_AA64MMFR0_EL1, RES1 bits 31 and 23.
const TCR_T0SZ: u64 = 25;
const TCR_IRGN0_WBWA: u64 = 1 << 8;
const TCR_ORGN0_WBWA: u64 = 1 << 10;
const TCR_SH0_INNER: u64 = 0b11 << 12;
const TCR_PS_SHIFT: u64 = 16;
const TCR_RES1: u64 = (1 << 31) | (1 << 23);

// SCTLR_EL2 (E2H = 0): RES1 bits, then M, C, SA, I. WXN, EE and A stay 0.
const SCTLR_RES1: u64 = 0x30c5_0830;
const SCTLR_M: u64 = 1 << 0;
const SCTLR_C: u64 = 1 << 2;
const SCTLR_SA: u64 = 1 << 3;
const SCTLR_I: u64 = 1 << 12;
/// SCTLR_EL2 with the MMU and caches on.
pub const SCTLR_ON: u64 = SCTLR_RES1 | SCTLR_M | SCTLR_C | SCTLR_SA | SCTLR_I;

#[repr(C, align(4096))]
struct Table([u64; ENTRIES]);

struct Tables(UnsafeCell<[Table; 1 + MAX_L2]>);

// SAFETY: the tables are written only by the boot CPU in `build`, before
// any other CPU runs; afterwards only the MMUs read them.
unsafe impl Sync for Tables {}

static TABLES: Tables = Tables(UnsafeCell::new([const { Table([0; ENTRIES]) }; 1 + MAX_L2]));

/// Register values that turn the MMU on with kestrel's tables, for the
/// boot CPU (via [`enable`]) and the secondaries (via their `CpuBoot`).
#[derive(Clone, Copy, Debug)]
pub struct MmuConfig {
    pub mair: u64,
    pub tcr: u64,
    pub ttbr0: u64,
    pub sctlr: u64,
}

static CONFIG: Once<MmuConfig> = Once::new();

/// Why the map could not be built.
#[derive(Clone, Copy, Debug)]
pub enum MmuError {
    /// More 1 GiB ranges are partly RAM than there are level-2 tables.
    TooManyPartialGiB,
}

/// What [`build`] mapped.
pub struct MapSummary {
    pub config: MmuConfig,
    /// RAM bytes above [`VA_LIMIT`], left unmapped.
    pub ram_unmapped: u64,
    pub l2_tables: usize,
}

fn overlaps_ram(memory: &[MemRegion], base: u64, size: u64) -> bool {
    memory
        .iter()
        .any(|r| r.base < base + size && base < r.end())
}

/// Builds the identity map for `memory`. Boot CPU only, before any other
/// CPU runs; works with the MMU off (no atomics, no heap).
pub fn build(memory: &[MemRegion]) -> Result<MapSummary, MmuError> {
    let tables = TABLES.0.get() as *mut Table;
    let mut next_l2 = 1;
    for gib in 0..ENTRIES {
        let base = gib as u64 * GIB;
        let entry = if !overlaps_ram(memory, base, GIB) {
            base | DEVICE_BLOCK
        } else if (0..ENTRIES as u64).all(|j| overlaps_ram(memory, base + j * BLOCK_2M, BLOCK_2M)) {
            base | NORMAL_BLOCK
        } else {
            if next_l2 > MAX_L2 {
                return Err(MmuError::TooManyPartialGiB);
            }
            // SAFETY: `next_l2` is in 1..=MAX_L2, inside TABLES; the boot CPU
            // is the only one running (see `Tables`), so nothing aliases it.
            let l2 = unsafe { &mut (*tables.add(next_l2)).0 };
            for (j, e) in l2.iter_mut().enumerate() {
                let b = base + j as u64 * BLOCK_2M;
                *e = b | if overlaps_ram(memory, b, BLOCK_2M) {
                    NORMAL_BLOCK
                } else {
                    DEVICE_BLOCK
                };
            }
            let pa = l2.as_ptr() as u64;
            next_l2 += 1;
            pa | DESC_TABLE
        };
        // SAFETY: as above; index 0 is the level-1 table.
        unsafe { (*tables).0[gib] = entry };
    }
    let ram_unmapped = memory
        .iter()
        .map(|r| r.end().saturating_sub(r.base.max(VA_LIMIT)))
        .sum();
    let parange = ID_AA64MMFR0_EL1.get() & 0xf;
    let ps = parange.min(0b101);
    let config = MmuConfig {
        mair: MAIR,
        tcr: TCR_RES1
            | TCR_T0SZ
            | TCR_IRGN0_WBWA
            | TCR_ORGN0_WBWA
            | TCR_SH0_INNER
            | (ps << TCR_PS_SHIFT),
        ttbr0: tables as u64,
        sctlr: SCTLR_ON,
    };
    Ok(MapSummary {
        config,
        ram_unmapped,
        l2_tables: next_l2 - 1,
    })
}

/// The data cache line size in bytes (CTR_EL0.DminLine).
fn dcache_line() -> usize {
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effect.
    unsafe {
        core::arch::asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack, preserves_flags))
    };
    4 << ((ctr >> 16) & 0xf)
}

/// Invalidates (without writing back) the data cache lines of
/// `[start, end)`: used with the MMU off on memory kestrel wrote uncached
/// (.bss, relocations, page tables, stack), so stale lines a loader left
/// cannot be written back over it nor hide it once caches are on.
pub fn invalidate_dcache_range(start: usize, end: usize) {
    let line = dcache_line();
    let mut a = start & !(line - 1);
    while a < end {
        // SAFETY: with the MMU and data cache off nothing kestrel wrote is
        // in the cache, so discarding lines loses no data.
        unsafe { core::arch::asm!("dc ivac, {}", in(reg) a, options(nostack, preserves_flags)) };
        a += line;
    }
    // SAFETY: barrier only.
    unsafe { core::arch::asm!("dsb sy", options(nostack, preserves_flags)) };
}

/// Cleans `[start, end)` to the point of coherency, so a CPU with its MMU
/// off (a secondary starting) reads what this CPU wrote.
pub fn clean_dcache_range(start: usize, end: usize) {
    let line = dcache_line();
    let mut a = start & !(line - 1);
    while a < end {
        // SAFETY: cleaning writes dirty lines back; no data changes.
        unsafe { core::arch::asm!("dc cvac, {}", in(reg) a, options(nostack, preserves_flags)) };
        a += line;
    }
    // SAFETY: barrier only.
    unsafe { core::arch::asm!("dsb sy", options(nostack, preserves_flags)) };
}

/// Turns the MMU and caches on for the calling CPU with `cfg`, then
/// publishes `cfg` for the secondaries.
///
/// # Safety
/// `cfg` must come from [`build`] (an identity map covering the running
/// code, its stack and data with the attributes they were used with), and
/// the caller must have invalidated stale cache lines of memory written
/// with the MMU off ([`invalidate_dcache_range`]).
pub unsafe fn enable(cfg: &MmuConfig) {
    HCR_EL2.set(super::el2::HcrEl2::BOOT.bits());
    // SAFETY: per the function contract, the new map is an identity map of
    // everything in use, so execution continues at the same addresses.
    unsafe {
        core::arch::asm!(
            "msr mair_el2, {mair}",
            "msr tcr_el2, {tcr}",
            "msr ttbr0_el2, {ttbr}",
            "isb",
            "tlbi alle2",
            "dsb nsh",
            "isb",
            "msr sctlr_el2, {sctlr}",
            "isb",
            "ic iallu",
            "dsb nsh",
            "isb",
            mair = in(reg) cfg.mair,
            tcr = in(reg) cfg.tcr,
            ttbr = in(reg) cfg.ttbr0,
            sctlr = in(reg) cfg.sctlr,
            options(nostack),
        );
    }
}

/// Records the configuration the secondaries use. Call with the MMU on.
pub fn publish(cfg: MmuConfig) {
    CONFIG.call_once(|| cfg);
}

/// The configuration published by the boot CPU.
pub fn config() -> Option<&'static MmuConfig> {
    CONFIG.get()
}
