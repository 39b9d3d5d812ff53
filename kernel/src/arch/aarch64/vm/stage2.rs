//! Stage-2 translation: one table tree per VM, 4 KiB granule, walks start
//! at level 1. The IPA size is 40 bits when the hardware's PARange allows
//! (two concatenated level-1 tables, as the architecture requires for
//! T0SZ = 24 at level 1), else the hardware's size (one level-1 table).
//!
//! Guest RAM is mapped with 2 MiB blocks (Normal write-back, inner
//! shareable, read/write/execute), each at its first touch (`mem::VmRam`:
//! the tables exist from creation, the block entry is written while the
//! VM runs, [`RamSlot`]); device frames passed through (the GICv2
//! GICV frame) with 4 KiB Device-nGnRE, execute-never pages. Everything else
//! faults to EL2, where kestrel emulates it or injects an abort.
//!
//! TLB maintenance: a VMID rollover invalidates every VMID at once
//! ([`flush_all_vmids`]: `TLBI ALLE1IS`); a VM's entries are dropped when
//! it ends or a restart unmaps its RAM ([`flush_all_vmids`] again: VMs end
//! and restart rarely, and their tables are never reused). Mapping a RAM
//! block at its first touch needs none: an invalid entry is never cached.

use alloc::boxed::Box;
use alloc::vec::Vec;

const ENTRIES: usize = 512;
const GIB: u64 = 1 << 30;
pub const BLOCK: u64 = 2 << 20;
const PAGE: u64 = 4096;

const DESC_VALID: u64 = 1;
const DESC_TABLE: u64 = 0b11;
const DESC_PAGE: u64 = 0b11;
const DESC_BLOCK: u64 = 0b01;
/// MemAttr[5:2] = 0b1111: Normal, outer and inner write-back cacheable.
const MEMATTR_NORMAL: u64 = 0b1111 << 2;
/// MemAttr[5:2] = 0b0001: Device-nGnRE.
const MEMATTR_DEVICE: u64 = 0b0001 << 2;
/// S2AP[7:6] = 0b11: read/write.
const S2AP_RW: u64 = 0b11 << 6;
const SH_INNER: u64 = 0b11 << 8;
const AF: u64 = 1 << 10;
/// XN[54:53] = 0b10: execute-never at EL1 and EL0.
const XN: u64 = 0b10 << 53;
const ADDR_MASK: u64 = 0x0000_FFFF_FFFF_F000;

const NORMAL: u64 = MEMATTR_NORMAL | S2AP_RW | SH_INNER | AF;
const DEVICE: u64 = MEMATTR_DEVICE | S2AP_RW | AF | XN;

#[repr(C, align(4096))]
struct Table([u64; ENTRIES]);

#[repr(C, align(8192))]
struct Root([u64; 2 * ENTRIES]);

/// Why a mapping could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// The IPA lies beyond the stage-2 input size.
    OutOfRange,
    /// Something else is mapped there already.
    Overlap,
    /// Not aligned as the mapping needs.
    Misaligned,
}

/// One VM's stage-2 tables. The tables live on the heap (identity mapped,
/// so their virtual address is the physical address the walker needs).
pub struct Stage2 {
    root: Box<Root>,
    tables: Vec<Box<Table>>,
    ipa_bits: u8,
    vtcr: u64,
}

/// The PARange field of ID_AA64MMFR0_EL1, as bits.
pub fn host_pa_bits() -> u8 {
    let mmfr0: u64;
    // SAFETY: reading an ID register has no side effect.
    unsafe {
        core::arch::asm!("mrs {}, id_aa64mmfr0_el1", out(reg) mmfr0, options(nomem, nostack))
    };
    match mmfr0 & 0xf {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    }
}

fn parange_code(bits: u8) -> u64 {
    match bits {
        0..=32 => 0,
        33..=36 => 1,
        37..=40 => 2,
        41..=42 => 3,
        43..=44 => 4,
        45..=48 => 5,
        _ => 6,
    }
}

/// The hardware's VMID width: 16 if ID_AA64MMFR1_EL1.VMIDBits says so, else 8.
pub fn host_vmid_bits() -> u32 {
    let mmfr1: u64;
    // SAFETY: reading an ID register has no side effect.
    unsafe {
        core::arch::asm!("mrs {}, id_aa64mmfr1_el1", out(reg) mmfr1, options(nomem, nostack))
    };
    if (mmfr1 >> 4) & 0xf == 2 {
        16
    } else {
        8
    }
}

impl Stage2 {
    /// Empty tables for an IPA space of min(40, hardware) bits. `vmid16`
    /// sets VTCR_EL2.VS (16-bit VMIDs in VTTBR_EL2).
    pub fn new(vmid16: bool) -> Stage2 {
        let host = host_pa_bits();
        let ipa_bits = host.min(40);
        // VTCR_EL2: T0SZ, SL0 = 1 (start at level 1), IRGN0/ORGN0 WB-WA,
        // SH0 inner, TG0 4 KiB, PS = the hardware's PA size, VS, RES1 bit 31.
        let vtcr = (64 - ipa_bits as u64)
            | (1 << 6)
            | (1 << 8)
            | (1 << 10)
            | (0b11 << 12)
            | (parange_code(host) << 16)
            | (u64::from(vmid16) << 19)
            | (1 << 31);
        Stage2 {
            root: Box::new(Root([0; 2 * ENTRIES])),
            tables: Vec::new(),
            ipa_bits,
            vtcr,
        }
    }

    pub fn ipa_bits(&self) -> u8 {
        self.ipa_bits
    }

    pub fn vtcr(&self) -> u64 {
        self.vtcr
    }

    /// VTTBR_EL2 for this VM under hardware VMID `vmid`.
    pub fn vttbr(&self, vmid: u16) -> u64 {
        (self.root.0.as_ptr() as u64) | (u64::from(vmid) << 48)
    }

    fn limit(&self) -> u64 {
        1 << self.ipa_bits
    }

    /// The next-level table behind `slot`, creating it if empty.
    fn next_table(tables: &mut Vec<Box<Table>>, slot: &mut u64) -> Result<*mut Table, MapError> {
        if *slot & DESC_VALID == 0 {
            let t = Box::new(Table([0; ENTRIES]));
            let pa = &*t as *const Table as u64;
            tables.push(t);
            *slot = pa | DESC_TABLE;
        } else if *slot & 0b11 != DESC_TABLE {
            return Err(MapError::Overlap);
        }
        Ok((*slot & ADDR_MASK) as *mut Table)
    }

    fn l2_slot(&mut self, ipa: u64) -> Result<&mut u64, MapError> {
        if ipa >= self.limit() {
            return Err(MapError::OutOfRange);
        }
        let l1 = (ipa / GIB) as usize;
        let l2 = Self::next_table(&mut self.tables, &mut self.root.0[l1])?;
        // SAFETY: `l2` points at a Table owned by `self.tables` (a live Box
        // that never moves); `&mut self` makes this the only access.
        Ok(unsafe { &mut (*l2).0[((ipa >> 21) & 0x1ff) as usize] })
    }

    /// The level-2 descriptor of the 2 MiB RAM block at IPA `ipa`, left
    /// invalid (its tables made now): [`RamSlot::map`] maps it later, while
    /// the VM runs.
    pub fn ram_slot(&mut self, ipa: u64) -> Result<RamSlot, MapError> {
        if !ipa.is_multiple_of(BLOCK) {
            return Err(MapError::Misaligned);
        }
        let slot = self.l2_slot(ipa)?;
        if *slot & DESC_VALID != 0 {
            return Err(MapError::Overlap);
        }
        Ok(RamSlot(slot as *mut u64 as u64))
    }

    /// Maps one 4 KiB device page: IPA `ipa` to PA `pa`.
    pub fn map_device_page(&mut self, ipa: u64, pa: u64) -> Result<(), MapError> {
        if !ipa.is_multiple_of(PAGE) || !pa.is_multiple_of(PAGE) {
            return Err(MapError::Misaligned);
        }
        let tables = core::ptr::addr_of_mut!(self.tables);
        let slot = self.l2_slot(ipa)?;
        // SAFETY: `tables` is self.tables, disjoint from the table entry
        // `slot` points into (entries live in the boxed tables' heap memory).
        let l3 = Self::next_table(unsafe { &mut *tables }, slot)?;
        // SAFETY: as in `l2_slot`.
        let e = unsafe { &mut (*l3).0[((ipa >> 12) & 0x1ff) as usize] };
        if *e & DESC_VALID != 0 {
            return Err(MapError::Overlap);
        }
        *e = pa | DEVICE | DESC_PAGE;
        Ok(())
    }

    /// Makes the tables visible to the walker before first use.
    pub fn publish(&self) {
        // SAFETY: barriers only.
        unsafe { core::arch::asm!("dsb ishst", "isb", options(nostack, preserves_flags)) };
    }
}

/// One 2 MiB RAM block's level-2 descriptor in a VM's stage 2 (the
/// address of the entry, inside a table its [`Stage2`] owns: valid as long
/// as that lives, and only the VM's `VmState`, which owns both, holds one).
#[derive(Clone, Copy, Debug)]
pub struct RamSlot(u64);

impl RamSlot {
    /// Maps the block to the 2 MiB frame at `pa`: the frame must hold
    /// nothing but what the guest may see (zeroed, cleaned to PoC). The
    /// walker sees it when this returns; an invalid entry was never cached
    /// in a TLB, so no invalidation is needed.
    pub fn map(self, pa: u64) {
        debug_assert!(pa.is_multiple_of(BLOCK));
        // SAFETY: `self.0` is an 8-byte aligned level-2 entry of a live
        // stage-2 table (see the type); an aligned 64-bit store is
        // single-copy atomic, so a concurrent walk sees the old or the new
        // entry. The barrier before orders the frame's zeroing (cleaned to
        // PoC, completed by the caller's DSB) before the entry; the one
        // after makes the entry visible to the walker.
        unsafe {
            core::arch::asm!("dsb ish", options(nostack, preserves_flags));
            core::ptr::write_volatile(self.0 as *mut u64, (pa & ADDR_MASK) | NORMAL | DESC_BLOCK);
            core::arch::asm!("dsb ishst", options(nostack, preserves_flags));
        }
    }

    /// Makes the entry invalid again. The caller invalidates the TLBs
    /// ([`flush_all_vmids`]) before the frame is reused.
    pub fn unmap(self) {
        // SAFETY: as in `map`.
        unsafe {
            core::ptr::write_volatile(self.0 as *mut u64, 0);
            core::arch::asm!("dsb ishst", options(nostack, preserves_flags));
        }
    }
}

/// Invalidates stage-1 and stage-2 TLB entries of every VMID on every CPU
/// of the inner shareable domain (VMID rollover, VM end).
pub fn flush_all_vmids() {
    // SAFETY: TLB maintenance for the EL1&0 regime only; kestrel's own EL2
    // translations are untouched.
    unsafe {
        core::arch::asm!(
            "dsb ishst",
            "tlbi alle1is",
            "dsb ish",
            "isb",
            options(nostack, preserves_flags)
        )
    };
}
