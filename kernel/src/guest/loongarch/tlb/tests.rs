use super::*;
use crate::guest::loongarch::csr::{ecode, Crmd};

fn paging(plv: u64) -> CsrFile {
    let mut c = CsrFile::new(0);
    c.write(num::CRMD, Crmd::PG.bits() | plv, 0);
    c
}

/// Writes an entry for the 4 KiB pair at `va` with `tlbfill`.
fn fill(t: &mut SoftTlb, c: &mut CsrFile, va: u64, elo0: u64, elo1: u64) -> Inval {
    c.write(num::TLBEHI, va, 0);
    c.write(num::TLBELO0, elo0, 0);
    c.write(num::TLBELO1, elo1, 0);
    c.write(num::TLBIDX, 12 << 24, 0);
    t.fill(c)
}

const RW_PLV3: u64 = ELO_V | ELO_D | 3 << 2 | 1 << 4;
const RW_PLV0: u64 = ELO_V | ELO_D | 1 << 4;

#[test]
fn da_and_dmw() {
    let mut c = CsrFile::new(0);
    let t = SoftTlb::new();
    assert!(c.da());
    let m = translate(&c, &t, 0x1fe0_01e0, Access::Store).unwrap();
    assert_eq!(m.pa, 0x1fe0_01e0);
    c.write(num::CRMD, Crmd::PG.bits(), 0);
    c.write(num::DMW0, 0xf000_0000_0000_0011, 0);
    let m = translate(&c, &t, 0xf000_0000_0020_0000, Access::Fetch).unwrap();
    assert_eq!((m.pa, m.mat), (0x20_0000, 1));
    // The window is PLV0 only.
    c.write(num::CRMD, Crmd::PG.bits() | 3, 0);
    assert_eq!(
        translate(&c, &t, 0xf000_0000_0020_0000, Access::Load),
        Err(Fault::Exception(ecode::ADE, ecode::ADEM))
    );
    assert_eq!(translate(&c, &t, 0x1000, Access::Load), Err(Fault::Refill));
}

#[test]
fn fill_lookup_and_permissions() {
    let mut c = paging(0);
    let mut t = SoftTlb::new();
    assert_eq!(
        fill(&mut t, &mut c, 0x4000_0000, RW_PLV0 | 0x10_0000, 0),
        Inval::None
    );
    let m = translate(&c, &t, 0x4000_0123, Access::Store).unwrap();
    assert_eq!(m.pa, 0x10_0123);
    // Odd page invalid.
    assert_eq!(
        translate(&c, &t, 0x4000_1000, Access::Load),
        Err(Fault::Exception(ecode::PIL, 0))
    );
    // Kernel page from PLV3: PPI.
    c.write(num::CRMD, Crmd::PG.bits() | 3, 0);
    assert_eq!(
        translate(&c, &t, 0x4000_0000, Access::Load),
        Err(Fault::Exception(ecode::PPI, 0))
    );
    // A user page, clean: store gives PME; NX fetch gives PNX.
    c.write(num::CRMD, Crmd::PG.bits(), 0);
    fill(
        &mut t,
        &mut c,
        0x6000_0000,
        ELO_V | 3 << 2 | 0x20_0000,
        RW_PLV3 | ELO_NX | 0x30_0000,
    );
    c.write(num::CRMD, Crmd::PG.bits() | 3, 0);
    assert_eq!(
        translate(&c, &t, 0x6000_0010, Access::Load).unwrap().pa,
        0x20_0010
    );
    assert_eq!(
        translate(&c, &t, 0x6000_0010, Access::Store),
        Err(Fault::Exception(ecode::PME, 0))
    );
    assert_eq!(
        translate(&c, &t, 0x6000_1010, Access::Fetch),
        Err(Fault::Exception(ecode::PNX, 0))
    );
    // Another ASID does not see non-global entries.
    c.write(num::ASID, 7, 0);
    assert_eq!(
        translate(&c, &t, 0x6000_0010, Access::Load),
        Err(Fault::Refill)
    );
}

#[test]
fn srch_rd_wr_and_invtlb() {
    let mut c = paging(0);
    let mut t = SoftTlb::new();
    fill(
        &mut t,
        &mut c,
        0x7000_0000,
        RW_PLV0 | 0x1000,
        RW_PLV0 | 0x2000,
    );
    c.write(num::TLBEHI, 0x7000_1000, 0);
    t.srch(&mut c);
    let idx = c.read(num::TLBIDX, 0);
    assert_eq!(idx >> 31, 0);
    c.write(num::TLBEHI, 0, 0);
    t.rd(&mut c);
    assert_eq!(c.read(num::TLBEHI, 0), 0x7000_0000);
    assert_eq!(c.read(num::TLBELO1, 0), RW_PLV0 | 0x2000);
    assert_eq!(c.read(num::TLBIDX, 0) >> 24 & 0x3f, 12);
    // tlbwr with NE = 1 invalidates the slot.
    c.write(num::TLBIDX, (idx & 0xffff) | 1 << 31, 0);
    assert_eq!(t.wr(&c), Inval::Range(0x7000_0000, 0x2000));
    c.write(num::TLBEHI, 0x7000_0000, 0);
    t.srch(&mut c);
    assert_ne!(c.read(num::TLBIDX, 0) >> 31, 0);
    // invtlb.
    fill(&mut t, &mut c, 0x8000, RW_PLV0, RW_PLV0);
    assert_eq!(t.invtlb(5, 1, 0x8000), Some(Inval::None), "other ASID");
    assert_eq!(t.invtlb(5, 0, 0x9000), Some(Inval::Range(0x8000, 0x2000)));
    assert_eq!(t.invtlb(7, 0, 0), None);
    fill(&mut t, &mut c, 0x8000, RW_PLV0 | ELO_G, RW_PLV0 | ELO_G);
    assert_eq!(t.invtlb(3, 0, 0), Some(Inval::None), "global kept");
    assert_eq!(t.invtlb(2, 0, 0), Some(Inval::Range(0x8000, 0x2000)));
}

#[test]
fn refill_path_with_lddir_ldpte() {
    // A 3-level table: 4 KiB pages, PT 9 bits at 12, Dir1 9 bits at 21, Dir2 9 bits at 30.
    let mut mem = std::collections::HashMap::new();
    let va = 0x0000_0040_1234_5678u64;
    let (pgd, pmd, pt) = (0x10_0000u64, 0x11_0000u64, 0x12_0000u64);
    mem.insert(pgd + ((va >> 30) & 511) * 8, pmd);
    mem.insert(pmd + ((va >> 21) & 511) * 8, pt);
    let even = ((va >> 12) & 511) & !1;
    mem.insert(pt + even * 8, RW_PLV3 | 0x50_0000);
    mem.insert(pt + (even + 1) * 8, RW_PLV3 | 0x51_0000);
    let read = |pa: u64| mem.get(&pa).copied().or(Some(0));

    let mut c = paging(3);
    c.write(
        num::PWCL,
        12 | 9 << 5 | 21 << 10 | 9 << 15 | 30 << 20 | 9 << 25,
        0,
    );
    c.write(num::PGDL, pgd, 0);
    c.write(num::TLBRENTRY, 0x3000, 0);
    let mut t = SoftTlb::new();
    assert_eq!(translate(&c, &t, va, Access::Load), Err(Fault::Refill));
    c.raise_tlbr(0x1000, va);
    assert!(c.da());
    let base = c.read(num::PGD, 0);
    let l1 = lddir(&c, base, 2, read).unwrap();
    assert_eq!(l1, pmd);
    let l0 = lddir(&c, l1, 1, read).unwrap();
    assert_eq!(l0, pt);
    ldpte(&mut c, l0, 0, read).unwrap();
    ldpte(&mut c, l0, 1, read).unwrap();
    t.fill(&c);
    assert_eq!(c.ertn(), 0x1000);
    assert_eq!(
        c.read(num::CRMD, 0) & (Crmd::DA.bits() | Crmd::PG.bits()),
        Crmd::PG.bits()
    );
    let m = translate(&c, &t, va, Access::Load).unwrap();
    assert_eq!(m.pa, 0x51_0678);
    // A walk outside guest memory reports it.
    assert_eq!(lddir(&c, base, 2, |_| None), None);
}

#[test]
fn hostile_tlb_ops_never_panic() {
    let mut r = crate::guest::loongarch::csr::tests::Rng(0xdead_beef_1234_5678);
    let mut c = paging(0);
    let mut t = SoftTlb::new();
    for _ in 0..50_000 {
        let v = r.next();
        match r.next() % 11 {
            0 => {
                c.write(num::TLBIDX, v, 0);
            }
            10 => {
                c.write(num::STLBPS, v, 0);
            }
            1 => {
                c.write(num::TLBEHI, v, 0);
            }
            2 => {
                c.write(num::TLBELO0, v, 0);
            }
            3 => {
                t.fill(&c);
            }
            4 => {
                t.wr(&c);
            }
            5 => t.rd(&mut c),
            6 => t.srch(&mut c),
            7 => {
                t.invtlb((v & 31) as u8, r.next(), r.next());
            }
            8 => {
                c.write(num::TLBREHI, v, 0);
                let _ = ldpte(&mut c, r.next(), (v & 1) as u8, |_| Some(v));
                let _ = lddir(&c, r.next(), (v >> 8) as u8, |_| Some(v));
            }
            _ => {
                let _ = translate(&c, &t, v, Access::Load);
            }
        }
    }
}

/// The lookup index gives what a scan of every entry in index order gives,
/// through random fills, writes (page sizes 4 KiB to 1 GiB, ASIDs, G),
/// `tlbclr`, `tlbflush` and `invtlb`.
#[test]
fn indexed_lookup_equals_a_full_scan() {
    let mut r = crate::guest::loongarch::csr::tests::Rng(0x1234_5678_9abc_def1);
    let mut c = paging(0);
    let mut t = SoftTlb::new();
    let scan = |t: &SoftTlb, va: u64, asid: u16| {
        (0..TLB_ENTRIES).find(|&i| t.entry(i).is_some_and(|e| e.matches(va, asid)))
    };
    // VAs clustered in a few MiB (and a few far ones), so lookups hit.
    let va_of = |v: u64| {
        if v & 7 == 0 {
            v & 0x0000_7fff_ffff_f000
        } else {
            0x4000_0000 + (v >> 8) % 0x80_0000
        }
    };
    for step in 0..40_000 {
        let v = r.next();
        let ps = [12u64, 12, 12, 14, 14, 15, 16, 21, 30][(v >> 40) as usize % 9];
        match r.next() % 8 {
            0..=2 => {
                c.write(num::ASID, v & 3, 0);
                c.write(num::TLBEHI, va_of(r.next()), 0);
                let g = if v & 0x100 != 0 { ELO_G } else { 0 };
                c.write(num::TLBELO0, RW_PLV0 | g | 0x10_0000, 0);
                c.write(num::TLBELO1, RW_PLV0 | g | 0x20_0000, 0);
                c.write(num::STLBPS, if v & 0x200 != 0 { ps } else { 12 }, 0);
                c.write(num::TLBIDX, ps << 24 | (r.next() % TLB_ENTRIES as u64), 0);
                if v & 0x400 != 0 {
                    t.fill(&c);
                } else {
                    t.wr(&c);
                }
            }
            3 if step % 50 == 0 => {
                c.write(num::ASID, v & 3, 0);
                t.clr(&c);
            }
            4 if step % 200 == 0 => {
                t.flush();
            }
            5 => {
                t.invtlb((v % 7) as u8, r.next() & 3, va_of(r.next()));
            }
            _ => {}
        }
        for _ in 0..4 {
            let va = va_of(r.next());
            let asid = (r.next() & 3) as u16;
            assert_eq!(
                t.lookup(va, asid).map(|(i, _)| i),
                scan(&t, va, asid),
                "step {step}, va {va:#x}"
            );
        }
    }
}

/// Issue 13 C8: a page size the TLB does not support (here 63, which made
/// `tlbfill` shift by 64) is refused: STLBPS keeps its value, and a
/// `tlbfill`/`tlbwr` of such an entry leaves the TLB as it was.
#[test]
fn unsupported_page_size_is_ignored() {
    let mut c = paging(0);
    let mut t = SoftTlb::new();
    fill(&mut t, &mut c, 0x4000_0000, RW_PLV0, RW_PLV0);
    let before: alloc::vec::Vec<TlbEntry> =
        (0..TLB_ENTRIES).map(|i| *t.entry(i).unwrap()).collect();
    // The two `csrwr`s and the `tlbfill` of the report.
    let fx = c.write(num::STLBPS, 63, 0);
    assert!(!fx.translation);
    assert_eq!(
        c.read(num::STLBPS, 0),
        12,
        "an unsupported STLBPS write is ignored"
    );
    for ps in [0u64, 11, 30, 47, 63] {
        c.write(num::TLBIDX, ps << 24 | 5, 0);
        assert_eq!(
            c.read(num::TLBIDX, 0) >> 24 & 0x3f,
            ps,
            "TLBIDX.PS is a plain field"
        );
        assert_eq!(t.fill(&c), Inval::None);
        assert_eq!(t.wr(&c), Inval::None);
        // The same through the refill CSRs.
        c.write(num::TLBRERA, 1, 0);
        c.write(num::TLBREHI, 0x4000_0000 | ps, 0);
        assert_eq!(t.fill(&c), Inval::None);
        c.write(num::TLBRERA, 0, 0);
    }
    let after: alloc::vec::Vec<TlbEntry> = (0..TLB_ENTRIES).map(|i| *t.entry(i).unwrap()).collect();
    assert_eq!(before, after);
    // A supported STLBPS is taken, and an entry of that size goes to the STLB.
    assert!(c.write(num::STLBPS, 14 | 0xffc0, 0).translation);
    assert_eq!(c.read(num::STLBPS, 0), 14, "reserved bits read 0");
    c.write(num::TLBIDX, 14 << 24, 0);
    c.write(num::TLBEHI, 0x7fff_ffff_8000, 0);
    c.write(num::TLBELO0, RW_PLV0, 0);
    t.fill(&c);
    let (i, e) = t.lookup(0x7fff_ffff_8000, 0).unwrap();
    assert!(i < STLB_WAYS * STLB_SETS);
    assert_eq!(e.ps, 14);
    // NE = 1 still invalidates the indexed entry whatever its PS says.
    c.write(num::TLBIDX, 1 << 31 | 63 << 24 | i as u64, 0);
    assert_ne!(t.wr(&c), Inval::None);
    assert!(t.lookup(0x7fff_ffff_8000, 0).is_none());
}

/// Found by the loongarch fuzz target: a directory base near the top of
/// the physical space plus a wide index (PWCL/PWCH widths up to 31/63)
/// made `lddir`/`ldpte` read beyond PALEN bits. The walk's address is a
/// PALEN-bit physical address, as on hardware.
#[test]
fn page_walk_reads_stay_inside_palen() {
    let mut c = paging(0);
    // PTbase 12, PTwidth 31, Dir1 base 12 width 31, PTEWidth 3 (64-byte entries).
    c.write(num::PWCL, 12 | 31 << 5 | 12 << 10 | 31 << 15 | 3 << 30, 0);
    c.write(num::PWCH, 12 | 63 << 6, 0);
    c.write(num::TLBRBADV, u64::MAX, 0);
    let base = PA_MASK & !0xfff;
    for level in 1..=4 {
        let mut asked = None;
        lddir(&c, base, level, |pa| {
            asked = Some(pa);
            Some(0)
        });
        let pa = asked.expect("a directory read");
        assert!(pa <= PA_MASK, "lddir level {level} read {pa:#x}");
    }
    for seq in 0..2 {
        let mut asked = None;
        ldpte(&mut c, base, seq, |pa| {
            asked = Some(pa);
            Some(0)
        });
        let pa = asked.expect("a PTE read");
        assert!(pa <= PA_MASK, "ldpte read {pa:#x}");
    }
}
