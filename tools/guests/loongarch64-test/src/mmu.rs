//! The guest's own page tables: 4 KiB pages, three levels (VA[38:30],
//! VA[29:21], VA[20:12]), walked by the refill handler in `asm.rs` with
//! `lddir`/`ldpte`. Directory entries hold the physical address of the
//! next table; empty slots point at a shared "invalid" table so a walk of
//! an unmapped address ends in a zero PTE (V = 0), i.e. a page-invalid
//! exception rather than a read of random memory.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::cpu::{csr, csr_read, csr_write};

/// PTE bits (= TLBELO layout).
pub const V: u64 = 1 << 0;
pub const D: u64 = 1 << 1;
pub const PLV3: u64 = 3 << 2;
/// MAT = 1: coherent cached; MAT = 0: strongly-ordered uncached.
pub const CACHED: u64 = 1 << 4;
pub const GLOBAL: u64 = 1 << 6;

/// Kernel RAM: valid, dirty (writable), PLV0, cached, global.
pub const KERNEL_RW: u64 = V | D | CACHED | GLOBAL;
/// Device: valid, writable, PLV0, uncached.
pub const DEVICE: u64 = V | D | GLOBAL;
/// User: as kernel RAM, but PLV3 (reachable from PLV3 and PLV0).
pub const USER_RW: u64 = V | D | PLV3 | CACHED | GLOBAL;

const PAGE: usize = 4096;
const POOL_PAGES: usize = 48;

#[repr(C, align(4096))]
struct Pool(UnsafeCell<[[u64; 512]; POOL_PAGES]>);
// SAFETY: only the boot CPU builds the tables, before any other CPU runs;
// afterwards they are read by the hardware walker and by `map` on the boot
// CPU only.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool(UnsafeCell::new([[0; 512]; POOL_PAGES]));
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Physical address of the root table (0 until `build` ran).
static ROOT: AtomicUsize = AtomicUsize::new(0);
static INVALID_PMD: AtomicUsize = AtomicUsize::new(0);
static INVALID_PTE: AtomicUsize = AtomicUsize::new(0);

fn alloc(fill: u64) -> *mut u64 {
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    assert!(i < POOL_PAGES, "page-table pool exhausted");
    // SAFETY: page i of the pool is handed out once.
    let p = unsafe { (*POOL.0.get())[i].as_mut_ptr() };
    for k in 0..512 {
        // SAFETY: k < 512, inside page i.
        unsafe { p.add(k).write_volatile(fill) };
    }
    p
}

/// Creates the root table (every slot pointing at the invalid tables).
pub fn build() {
    let pte = alloc(0);
    INVALID_PTE.store(pte as usize, Ordering::Relaxed);
    let pmd = alloc(pte as u64);
    INVALID_PMD.store(pmd as usize, Ordering::Relaxed);
    let root = alloc(pmd as u64);
    ROOT.store(root as usize, Ordering::Relaxed);
}

/// Maps the 4 KiB page at `va` to `pa` with `flags` (replacing any mapping).
pub fn map(va: usize, pa: u64, flags: u64) {
    let root = ROOT.load(Ordering::Relaxed) as *mut u64;
    let inv_pmd = INVALID_PMD.load(Ordering::Relaxed) as u64;
    let inv_pte = INVALID_PTE.load(Ordering::Relaxed) as u64;
    let i3 = (va >> 30) & 511;
    let i1 = (va >> 21) & 511;
    let i0 = (va >> 12) & 511;
    // SAFETY: the tables come from the pool and are indexed below 512.
    unsafe {
        let mut pmd = root.add(i3).read_volatile();
        if pmd == inv_pmd {
            pmd = alloc(inv_pte) as u64;
            root.add(i3).write_volatile(pmd);
        }
        let pmd = pmd as *mut u64;
        let mut pt = pmd.add(i1).read_volatile();
        if pt == inv_pte {
            pt = alloc(0) as u64;
            pmd.add(i1).write_volatile(pt);
        }
        (pt as *mut u64)
            .add(i0)
            .write_volatile((pa & !(PAGE as u64 - 1) & ((1 << 48) - 1)) | flags);
    }
}

/// Maps `[start, end)` to itself.
pub fn identity(start: usize, end: usize, flags: u64) {
    let mut a = start & !(PAGE - 1);
    while a < end {
        map(a, a as u64, flags);
        a += PAGE;
    }
}

/// Invalidates every TLB entry of this CPU.
pub fn flush_tlb() {
    // SAFETY: invtlb op 0 drops all entries; the tables stay valid.
    unsafe { core::arch::asm!("dbar 0", "invtlb 0, $zero, $zero", options(nostack)) };
}

/// Points this CPU at the tables and switches CRMD from DA to PG. The code
/// keeps running because everything it touches is identity mapped.
pub fn enable_on_this_cpu() {
    let root = ROOT.load(Ordering::Relaxed) as u64;
    // PWCL: PTbase 12, PTwidth 9, Dir1 base 21 width 9, Dir2 unused, 64-bit PTEs.
    let pwcl = 12 | 9 << 5 | 21 << 10 | 9 << 15;
    // PWCH: Dir3 base 30 width 9, Dir4 unused.
    let pwch = 30 | 9 << 6;
    // SAFETY: the tables identity-map the image, its stacks and devices,
    // and the refill entry is the 4 KiB-aligned handler in asm.rs (a
    // physical address, as TLBRENTRY wants; VA = PA here).
    unsafe {
        csr_write!(csr::PGDL, root);
        csr_write!(csr::PGDH, root);
        csr_write!(csr::PWCL, pwcl);
        csr_write!(csr::PWCH, pwch);
        csr_write!(csr::STLBPS, 12);
        csr_write!(csr::TLBREHI, 12);
        csr_write!(csr::TLBRENTRY, crate::asm::__tlbr_entry as *const () as u64);
        csr_write!(csr::ASID, 0);
        flush_tlb();
        let crmd = csr_read!(csr::CRMD);
        // PLV0, keep IE, DA off, PG on, DATF = DATM = cached (for DA; unused).
        let new = (crmd & crate::cpu::CRMD_IE) | crate::cpu::CRMD_PG | 1 << 5 | 1 << 7;
        csr_write!(csr::CRMD, new);
    }
}

/// Whether this CPU runs with paging on.
pub fn paging_on() -> bool {
    csr_read!(csr::CRMD) & crate::cpu::CRMD_PG != 0
}
