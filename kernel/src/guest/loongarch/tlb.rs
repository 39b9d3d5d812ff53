//! The guest's TLB, kept in software: what its `tlbwr`/`tlbfill` wrote,
//! searched by `tlbsrch`, read by `tlbrd`, invalidated by `tlbclr`,
//! `tlbflush` and `invtlb`, and the page-walk helpers `lddir`/`ldpte`.
//!
//! kestrel never loads guest TLB entries into the real TLB as they are: the
//! arch translates a guest access with [`translate`] (DA mode, the guest's
//! DMW windows, then this TLB) and installs a *shadow* entry mapping the
//! guest virtual page to the VM's host page. This module reports which guest
//! virtual range an operation invalidated ([`Inval`]) so the arch drops the
//! matching shadows.
//!
//! Geometry (PRCFG3, see [`super::csr`]): an STLB of 8 ways x 32 sets
//! (index `set * 8 + way`, pages of STLBPS) and a 64-entry MTLB (any page
//! size) after it. `tlbclr` and `tlbflush` invalidate every matching entry,
//! not only the indexed set: a TLB may always forget more than asked.

use super::csr::{
    self, num, page_size_supported, CsrFile, ASID_BITS, MTLB_ENTRIES, STLB_SETS, STLB_WAYS,
    TLB_ENTRIES, VALEN,
};

/// ELO bits.
pub const ELO_V: u64 = 1 << 0;
pub const ELO_D: u64 = 1 << 1;
pub const ELO_G: u64 = 1 << 6;
pub const ELO_NR: u64 = 1 << 61;
pub const ELO_NX: u64 = 1 << 62;
pub const ELO_RPLV: u64 = 1 << 63;
/// PPN field of an ELO (PALEN 48).
pub const ELO_PPN: u64 = 0x0000_ffff_ffff_f000;
/// Guest physical address width.
pub const PALEN: u32 = 48;
pub const PA_MASK: u64 = (1 << PALEN) - 1;

/// One TLB entry (a pair of pages of 2^ps bytes each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlbEntry {
    pub e: bool,
    /// Virtual address of the pair (VALEN bits, sign-extended, pair-aligned).
    pub va: u64,
    pub ps: u8,
    pub asid: u16,
    pub g: bool,
    pub elo: [u64; 2],
}

impl TlbEntry {
    fn pair_mask(&self) -> u64 {
        !((2u64 << self.ps.clamp(12, 48)) - 1)
    }
    fn matches(&self, va: u64, asid: u16) -> bool {
        let m = self.pair_mask() & ((1 << VALEN) - 1);
        self.e && (self.g || self.asid == asid) && (va & m) == (self.va & m)
    }
    /// The guest virtual range the entry covers.
    pub fn range(&self) -> (u64, u64) {
        (self.va & self.pair_mask(), 2u64 << self.ps.clamp(12, 48))
    }
}

/// What the arch must drop from its shadow entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inval {
    None,
    /// Guest virtual range (start, length).
    Range(u64, u64),
    /// Everything of this vCPU.
    All,
}

impl Inval {
    fn of(old: &TlbEntry) -> Inval {
        if old.e {
            let (s, l) = old.range();
            Inval::Range(s, l)
        } else {
            Inval::None
        }
    }
}

const fn sext(v: u64) -> u64 {
    (((v << (64 - VALEN)) as i64) >> (64 - VALEN)) as u64
}

/// The guest's TLB.
/// Words of an entry bitmap.
const WORDS: usize = TLB_ENTRIES.div_ceil(64);
/// Lookup buckets: enabled entries whose pair lies inside one aligned
/// `2^BUCKET_SHIFT` granule (4 KiB and 16 KiB pages) are filed under
/// VA bits [`BUCKET_SHIFT`..) modulo `BUCKETS`; larger ones are `wide`.
const BUCKET_SHIFT: u32 = 15;
const BUCKETS: usize = 64;

type Bits = [u64; WORDS];

#[derive(Clone, Debug)]
pub struct SoftTlb {
    entries: alloc::vec::Vec<TlbEntry>,
    /// Index of the enabled entries, kept with every change of `entries`,
    /// so a lookup tests only the entries that can match (in index order,
    /// as a scan of all would) instead of all `TLB_ENTRIES`.
    buckets: alloc::vec::Vec<Bits>,
    wide: Bits,
    valid: Bits,
    rand: u32,
}

/// Where an enabled entry is filed: `Some(bucket)` or `None` (wide).
fn bucket_of(e: &TlbEntry) -> Option<usize> {
    (u32::from(e.ps.clamp(12, 48)) < BUCKET_SHIFT).then(|| bucket_va(e.va))
}

fn bucket_va(va: u64) -> usize {
    ((va >> BUCKET_SHIFT) as usize) % BUCKETS
}

impl Default for SoftTlb {
    fn default() -> Self {
        Self::new()
    }
}

impl SoftTlb {
    pub fn new() -> Self {
        SoftTlb {
            entries: alloc::vec![TlbEntry::default(); TLB_ENTRIES],
            buckets: alloc::vec![[0; WORDS]; BUCKETS],
            wide: [0; WORDS],
            valid: [0; WORDS],
            rand: 0x2545_f491,
        }
    }

    pub fn entry(&self, i: usize) -> Option<&TlbEntry> {
        self.entries.get(i)
    }

    fn next_rand(&mut self) -> usize {
        let mut x = self.rand;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rand = x;
        x as usize
    }

    /// The entry translating `va` for `asid`: (index, entry).
    pub fn lookup(&self, va: u64, asid: u16) -> Option<(usize, &TlbEntry)> {
        let bucket = &self.buckets[bucket_va(va)];
        for (w, (b, wide)) in bucket.iter().zip(&self.wide).enumerate() {
            let mut bits = b | wide;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let e = &self.entries[i];
                if e.matches(va, asid) {
                    return Some((i, e));
                }
                bits &= bits - 1;
            }
        }
        None
    }

    /// Files (`on`) or unfiles entry `i` in the lookup index.
    fn index(&mut self, i: usize, on: bool) {
        let e = self.entries[i];
        if !e.e {
            return;
        }
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        let set = match bucket_of(&e) {
            Some(b) => &mut self.buckets[b],
            None => &mut self.wide,
        };
        if on {
            set[w] |= bit;
            self.valid[w] |= bit;
        } else {
            set[w] &= !bit;
            self.valid[w] &= !bit;
        }
    }

    /// `tlbsrch`.
    pub fn srch(&self, c: &mut CsrFile) {
        let va = if c.in_tlbr() { c.tlbrehi } else { c.tlbehi };
        match self.lookup(va & !0x1fff, c.guest_asid()) {
            Some((i, _)) => c.tlbidx = (c.tlbidx & !(0xffff | 1 << 31)) | i as u64,
            None => c.tlbidx |= 1 << 31,
        }
    }

    /// `tlbrd`.
    pub fn rd(&self, c: &mut CsrFile) {
        let i = (c.tlbidx & 0xffff) as usize % TLB_ENTRIES;
        let e = self.entries[i];
        if e.e {
            c.tlbehi = e.va;
            c.set(num::TLBELO0, e.elo[0]);
            c.set(num::TLBELO1, e.elo[1]);
            c.tlbidx = (c.tlbidx & 0xffff) | u64::from(e.ps & 0x3f) << 24;
            c.asid = u64::from(e.asid);
        } else {
            c.tlbehi = 0;
            c.set(num::TLBELO0, 0);
            c.set(num::TLBELO1, 0);
            c.tlbidx = (c.tlbidx & 0xffff) | 1 << 31;
            c.asid = 0;
        }
    }

    /// The entry `tlbwr`/`tlbfill` would write; `None` when it is valid
    /// (E = 1) with a page size the TLB does not support (PRCFG2): such a
    /// write is ignored, as QEMU does, and the TLB keeps what it had.
    fn from_csrs(c: &CsrFile) -> Option<TlbEntry> {
        let (va, elo0, elo1, ps, e) = if c.in_tlbr() {
            (
                c.tlbrehi & !0x3f,
                c.get(num::TLBRELO0),
                c.get(num::TLBRELO1),
                (c.tlbrehi & 0x3f) as u8,
                true,
            )
        } else {
            (
                c.tlbehi,
                c.get(num::TLBELO0),
                c.get(num::TLBELO1),
                ((c.tlbidx >> 24) & 0x3f) as u8,
                c.tlbidx & 1 << 31 == 0,
            )
        };
        if e && !page_size_supported(u64::from(ps)) {
            return None;
        }
        let mut t = TlbEntry {
            e,
            va: 0,
            ps,
            asid: c.guest_asid(),
            g: elo0 & elo1 & ELO_G != 0,
            elo: [elo0, elo1],
        };
        t.va = sext(va & t.pair_mask());
        Some(t)
    }

    fn put(&mut self, i: usize, t: TlbEntry) -> Inval {
        self.index(i, false);
        let old = core::mem::replace(&mut self.entries[i], t);
        self.index(i, true);
        Inval::of(&old)
    }

    /// `tlbwr` (with TLBIDX.NE set: invalidates the indexed entry).
    pub fn wr(&mut self, c: &CsrFile) -> Inval {
        let i = (c.tlbidx & 0xffff) as usize % TLB_ENTRIES;
        match Self::from_csrs(c) {
            Some(t) => self.put(i, t),
            None => Inval::None,
        }
    }

    /// `tlbfill`: STLB (a random way of the set) for STLBPS pages, else a random MTLB entry.
    pub fn fill(&mut self, c: &CsrFile) -> Inval {
        let Some(t) = Self::from_csrs(c) else {
            return Inval::None;
        };
        let r = self.next_rand();
        let i = if u64::from(t.ps) == c.get(num::STLBPS) {
            // ps is a supported size (< 30), so the shift is in range.
            let vpn = t.va.checked_shr(u32::from(t.ps) + 1).unwrap_or(0);
            let set = (vpn as usize) % STLB_SETS;
            set * STLB_WAYS + r % STLB_WAYS
        } else {
            STLB_WAYS * STLB_SETS + r % MTLB_ENTRIES
        };
        self.put(i, t)
    }

    fn invalidate(&mut self, f: impl Fn(&TlbEntry) -> bool) -> Inval {
        let mut out = Inval::None;
        for w in 0..WORDS {
            let mut bits = self.valid[w];
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if !f(&self.entries[i]) {
                    continue;
                }
                out = match out {
                    Inval::None => Inval::of(&self.entries[i]),
                    _ => Inval::All,
                };
                self.index(i, false);
                self.entries[i].e = false;
            }
        }
        out
    }

    /// `tlbclr`: entries with G = 0 and the current ASID.
    pub fn clr(&mut self, c: &CsrFile) -> Inval {
        let asid = c.guest_asid();
        self.invalidate(|e| !e.g && e.asid == asid)
    }

    /// `tlbflush`: every entry.
    pub fn flush(&mut self) -> Inval {
        self.invalidate(|_| true)
    }

    /// `invtlb op, rj (asid), rk (va)`; `None` for an undefined op (INE).
    pub fn invtlb(&mut self, op: u8, asid: u64, va: u64) -> Option<Inval> {
        let asid = (asid & ((1 << ASID_BITS) - 1)) as u16;
        let hit = |e: &TlbEntry| {
            let m = e.pair_mask() & ((1 << VALEN) - 1);
            (va & m) == (e.va & m)
        };
        Some(match op {
            0 | 1 => self.invalidate(|_| true),
            2 => self.invalidate(|e| e.g),
            3 => self.invalidate(|e| !e.g),
            4 => self.invalidate(|e| !e.g && e.asid == asid),
            5 => self.invalidate(|e| !e.g && e.asid == asid && hit(e)),
            6 => self.invalidate(|e| (e.g || e.asid == asid) && hit(e)),
            _ => return None,
        })
    }
}

/// Kind of access being translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Load,
    Store,
    Fetch,
}

/// How a guest virtual address was translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Guest physical address.
    pub pa: u64,
    /// log2 of the guest page size (12 for DA/DMW: any size works).
    pub ps: u8,
    /// Writable without a fault (D bit, or DA/DMW).
    pub dirty: bool,
    pub nr: bool,
    pub nx: bool,
    /// Memory access type (0 uncached, 1 cached, 2 write-combining).
    pub mat: u8,
    /// The guest TLB entry used, if any.
    pub tlb_index: Option<usize>,
}

/// Why a translation failed: what to deliver to the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No TLB entry: TLB refill exception.
    Refill,
    /// An exception with this ecode (and EsubCode).
    Exception(u8, u16),
}

/// Translates `va` for `acc` as the guest's MMU would at its current
/// privilege level (DA mode, DMW windows, TLB, with permission checks).
pub fn translate(c: &CsrFile, tlb: &SoftTlb, va: u64, acc: Access) -> Result<Mapping, Fault> {
    let direct = |mat: u64| Mapping {
        pa: va & PA_MASK,
        ps: 12,
        dirty: true,
        nr: false,
        nx: false,
        mat: mat as u8,
        tlb_index: None,
    };
    if c.da() {
        let datm = if acc == Access::Fetch {
            (c.crmd >> 5) & 3
        } else {
            (c.crmd >> 7) & 3
        };
        return Ok(direct(datm));
    }
    let plv = c.plv();
    for i in 0..4 {
        let d = c.dmw(i);
        if d & (1 << plv) != 0 && (d >> 60) == (va >> 60) {
            return Ok(direct((d >> 4) & 3));
        }
    }
    if sext(va) != va {
        let sub = if acc == Access::Fetch {
            csr::ecode::ADEF
        } else {
            csr::ecode::ADEM
        };
        return Err(Fault::Exception(csr::ecode::ADE, sub));
    }
    let Some((i, e)) = tlb.lookup(va, c.guest_asid()) else {
        return Err(Fault::Refill);
    };
    let ps = e.ps;
    let elo = e.elo[((va >> ps) & 1) as usize];
    let ex = |code| Err(Fault::Exception(code, 0));
    if elo & ELO_V == 0 {
        return ex(match acc {
            Access::Load => csr::ecode::PIL,
            Access::Store => csr::ecode::PIS,
            Access::Fetch => csr::ecode::PIF,
        });
    }
    if acc == Access::Fetch && elo & ELO_NX != 0 {
        return ex(csr::ecode::PNX);
    }
    if acc == Access::Load && elo & ELO_NR != 0 {
        return ex(csr::ecode::PNR);
    }
    let eplv = (elo >> 2) & 3;
    let rplv = elo & ELO_RPLV != 0;
    if (!rplv && plv > eplv) || (rplv && plv != eplv) {
        return ex(csr::ecode::PPI);
    }
    if acc == Access::Store && elo & ELO_D == 0 {
        return ex(csr::ecode::PME);
    }
    let off = va & ((1u64 << ps) - 1);
    Ok(Mapping {
        pa: ((elo & ELO_PPN) & !((1u64 << ps) - 1)) | off,
        ps,
        dirty: elo & ELO_D != 0,
        nr: elo & ELO_NR != 0,
        nx: elo & ELO_NX != 0,
        mat: ((elo >> 4) & 3) as u8,
        tlb_index: Some(i),
    })
}

/// `lddir rd, rj, level`: the next directory (or the huge-page entry) for
/// TLBRBADV. `read` loads a 64-bit guest physical word (`None` outside guest
/// memory, which makes this `None`); it is only asked for addresses inside
/// the PALEN-bit physical space.
pub fn lddir(
    c: &CsrFile,
    base: u64,
    level: u8,
    read: impl FnOnce(u64) -> Option<u64>,
) -> Option<u64> {
    const HUGE: u64 = 1 << 6;
    if base & HUGE != 0 {
        return Some((base & !(3 << 13)) | u64::from(level & 3) << 13);
    }
    let pwcl = c.get(num::PWCL);
    let pwch = c.get(num::PWCH);
    let (dbase, dwidth) = match level {
        1 => ((pwcl >> 10) & 0x1f, (pwcl >> 15) & 0x1f),
        2 => ((pwcl >> 20) & 0x1f, (pwcl >> 25) & 0x1f),
        3 => (pwch & 0x3f, (pwch >> 6) & 0x3f),
        4 => ((pwch >> 12) & 0x3f, (pwch >> 18) & 0x3f),
        _ => return Some(0),
    };
    let shift = 3 + ((pwcl >> 30) & 3);
    let badv = c.get(num::TLBRBADV);
    let index = (badv >> dbase.min(63)) & ((1u64 << dwidth.min(63)) - 1);
    // The walk addresses PALEN bits: what carries past them is dropped.
    let pa = ((base & PA_MASK) & !0xfff).wrapping_add(index << shift) & PA_MASK;
    read(pa).map(|v| v & PA_MASK)
}

/// `ldpte rj, seq`: loads the even (seq 0) or odd (seq 1) PTE for
/// TLBRBADV into TLBRELO0/1 and sets TLBREHI.PS. `None` outside guest memory.
pub fn ldpte(
    c: &mut CsrFile,
    base: u64,
    seq: u8,
    read: impl FnOnce(u64) -> Option<u64>,
) -> Option<()> {
    const HUGE: u64 = 1 << 6;
    const HGLOBAL: u64 = 1 << 12;
    let odd = seq & 1 != 0;
    let pwcl = c.get(num::PWCL);
    let ptbase = pwcl & 0x1f;
    let ptwidth = (pwcl >> 5) & 0x1f;
    let (elo, ps) = if base & HUGE != 0 {
        let ps = (ptbase + ptwidth).saturating_sub(1).clamp(12, 47);
        let mut v = base & !HUGE & !(3 << 13);
        if v & HGLOBAL != 0 {
            v = (v & !HGLOBAL) | ELO_G;
        }
        if odd {
            v = v.wrapping_add(1 << ps);
        }
        (v, ps)
    } else {
        let shift = 3 + ((pwcl >> 30) & 3);
        let badv = c.get(num::TLBRBADV);
        let index = ((badv >> ptbase) & ((1u64 << ptwidth) - 1) & !1) | u64::from(odd);
        let pa = ((base & PA_MASK) & !0xfff).wrapping_add(index << shift) & PA_MASK;
        (read(pa)?, ptbase)
    };
    c.set(if odd { num::TLBRELO1 } else { num::TLBRELO0 }, elo);
    c.tlbrehi = (c.tlbrehi & !0x3f) | ps;
    Some(())
}

#[cfg(test)]
mod tests;
