//! The direct-map windows kestrel runs in (set by the entry code, the same
//! on every CPU, PLV0 only):
//!
//! | window | VSEG | virtual base               | memory access type |
//! |--------|------|----------------------------|--------------------|
//! | DMW0   | 0x8  | 0x8000_0000_0000_0000      | strongly-ordered uncached (MMIO) |
//! | DMW1   | 0x9  | 0x9000_0000_0000_0000      | coherent cached (RAM, the image) |
//!
//! PA = VA & (2^PALEN - 1); no TLB entry is ever needed by kestrel itself.

pub const UNCACHED_BASE: u64 = 0x8000_0000_0000_0000;
pub const CACHED_BASE: u64 = 0x9000_0000_0000_0000;
/// DMW0 value: VSEG 8, MAT 0 (SUC), PLV0.
pub const DMW0_VALUE: u64 = UNCACHED_BASE | 1;
/// DMW1 value: VSEG 9, MAT 1 (CC), PLV0.
pub const DMW1_VALUE: u64 = CACHED_BASE | 1 << 4 | 1;
/// Physical addresses are at most 48 bits here (la464 PALEN).
pub const PA_MASK: u64 = (1 << 48) - 1;

pub const fn uncached(pa: u64) -> u64 {
    UNCACHED_BASE | (pa & PA_MASK)
}

pub const fn cached(pa: u64) -> u64 {
    CACHED_BASE | (pa & PA_MASK)
}

pub const fn to_phys(va: u64) -> u64 {
    va & PA_MASK
}
