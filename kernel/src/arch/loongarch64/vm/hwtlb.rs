//! The real TLB as kestrel uses it for guests: shadow entries of 4 KiB
//! pages (pairs of 8 KiB), PLV3, tagged with a real ASID per VM and guest
//! privilege context, installed with `tlbsrch` + `tlbwr`/`tlbfill` and
//! dropped with `invtlb` (CPU-local). kestrel itself never uses the TLB.

use core::arch::asm;

/// Real page size of shadow entries (log2).
pub const PS: u64 = 12;

/// Sets up this CPU's TLB for guests: STLB page size 4 KiB, everything invalidated.
pub fn init_cpu() {
    // SAFETY: STLBPS only selects the STLB page size; kestrel maps nothing
    // through the TLB, so invalidating every entry loses nothing of its own.
    unsafe {
        asm!("csrwr {0}, 0x1e", inout(reg) PS => _, options(nostack));
        asm!("invtlb 0, $zero, $zero", options(nostack));
    }
}

/// Sets the real ASID (CSR.ASID) the guest runs under.
pub fn set_asid(asid: u16) {
    // SAFETY: the ASID only selects which TLB entries match guest accesses;
    // kestrel's own accesses go through the DMWs.
    unsafe { asm!("csrwr {0}, 0x18", inout(reg) u64::from(asid) => _, options(nostack)) };
}

/// Drops every entry of `asid` on this CPU.
pub fn flush_asid(asid: u16) {
    // SAFETY: `invtlb 4` invalidates non-global entries of one ASID: shadow
    // entries are never global and kestrel does not depend on any entry.
    unsafe { asm!("invtlb 4, {0}, $zero", in(reg) u64::from(asid), options(nostack)) };
}

/// Drops the entries of `asid` mapping the pair containing `va`.
pub fn flush_page(asid: u16, va: u64) {
    // SAFETY: as for `flush_asid`, for one page.
    unsafe { asm!("invtlb 5, {0}, {1}", in(reg) u64::from(asid), in(reg) va, options(nostack)) };
}

/// Drops every entry on this CPU.
pub fn flush_all() {
    // SAFETY: as for `init_cpu`.
    unsafe { asm!("invtlb 0, $zero, $zero", options(nostack)) };
}

/// Installs (or replaces) the entry for the 8 KiB pair containing `va`
/// under the current ASID: `elo` are the two halves (V = 0 for a half
/// without a mapping).
pub fn install(va: u64, elo: [u64; 2]) {
    let ehi = va & !0x1fff;
    let idx_ps = PS << 24;
    // SAFETY: writes one TLB entry for the current (guest) ASID; the
    // TLB CSRs are scratch for kestrel (it has no entries of its own), and
    // TLBRERA.IsTLBR is 0 here (the exit path cleared it), so tlbsrch/tlbwr/
    // tlbfill use TLBEHI/TLBELO*/TLBIDX.
    unsafe {
        asm!(
            "csrwr {ehi}, 0x11",
            "csrwr {lo0}, 0x12",
            "csrwr {lo1}, 0x13",
            "csrwr {idx}, 0x10",
            "tlbsrch",
            "csrrd {t}, 0x10",
            "slli.d {u}, {t}, 32",
            "bltz {u}, 1f",
            // Found: keep its index, set PS and NE = 0, overwrite it.
            "bstrins.d {t}, {ps}, 29, 24",
            "csrwr {t}, 0x10",
            "tlbwr",
            "b 2f",
            "1:",
            "li.d {t}, {idxps}",
            "csrwr {t}, 0x10",
            "tlbfill",
            "2:",
            ehi = inout(reg) ehi => _,
            lo0 = inout(reg) elo[0] => _,
            lo1 = inout(reg) elo[1] => _,
            idx = inout(reg) idx_ps => _,
            ps = in(reg) PS,
            idxps = const PS << 24,
            t = out(reg) _,
            u = out(reg) _,
            options(nostack),
        )
    };
}
