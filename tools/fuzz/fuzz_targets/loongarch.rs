//! LoongArch trap-and-emulate state under guest instruction sequences:
//! instruction decode, CSR reads/writes/exchanges, the software TLB
//! (tlbwr/tlbfill/tlbrd/tlbsrch/tlbclr/tlbflush/invtlb, lddir/ldpte),
//! address translation and IOCSR IPIs. Decoded fields are in range and
//! privileged decodes agree with the instruction word; STLBPS and every
//! valid TLB entry use a page size PRCFG2 advertises; TLBIDX stays a TLB
//! index; csrxchg returns what csrrd read; a translation keeps the page
//! offset and stays inside the physical address space; an invalidated
//! range is a whole, aligned page pair; IPI status bits set and clear as
//! written.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::guest::loongarch::csr::{num, page_size_supported, CsrFile, TLB_ENTRIES};
use kernel::guest::loongarch::insn::{self, Insn, Size};
use kernel::guest::loongarch::iocsr::{self, VIpi, IPI_CLEAR, IPI_SET, IPI_STATUS};
use kernel::guest::loongarch::tlb::{self, Access, Inval, SoftTlb, PA_MASK};
use libfuzzer_sys::fuzz_target;

/// CSRs a kernel touches, to aim the fuzzer.
const CSRS: [u16; 24] = [
    num::CRMD,
    num::PRMD,
    num::EUEN,
    num::ECFG,
    num::ESTAT,
    num::ERA,
    num::BADV,
    num::EENTRY,
    num::TLBIDX,
    num::TLBEHI,
    num::TLBELO0,
    num::TLBELO1,
    num::ASID,
    num::PGDL,
    num::PGDH,
    num::PWCL,
    num::PWCH,
    num::STLBPS,
    num::TLBRERA,
    num::TLBREHI,
    num::TLBRELO0,
    num::TLBRBADV,
    num::TCFG,
    num::SAVE0,
];

#[derive(Arbitrary, Debug)]
enum Op {
    Decode(u32),
    CsrWr {
        pick: u8,
        raw: u16,
        v: u64,
    },
    CsrXchg {
        pick: u8,
        v: u64,
        mask: u64,
    },
    Fill,
    Wr,
    Rd,
    Srch,
    Clr,
    Flush,
    Invtlb {
        op: u8,
        asid: u64,
        va: u64,
    },
    Translate {
        va: u64,
        acc: u8,
    },
    Lddir {
        base: u64,
        level: u8,
        word: u64,
    },
    Ldpte {
        base: u64,
        seq: u8,
        word: u64,
    },
    Ertn,
    Iocsr {
        me: u8,
        addr: u16,
        size: u8,
        value: u64,
        write: bool,
    },
    Timer {
        now: u32,
    },
}

fn csr_of(pick: u8, raw: u16) -> u16 {
    if pick < 200 {
        CSRS[pick as usize % CSRS.len()]
    } else {
        raw & 0x3fff
    }
}

fn check_inval(i: Inval) {
    if let Inval::Range(start, len) = i {
        assert!(
            len.is_power_of_two() && len >= 0x2000,
            "range length {len:#x}"
        );
        assert_eq!(
            start & (len - 1),
            0,
            "range start {start:#x} not aligned to {len:#x}"
        );
    }
}

fn check_state(c: &CsrFile, t: &SoftTlb) {
    assert!(
        page_size_supported(c.read(num::STLBPS, 0)),
        "STLBPS {}",
        c.read(num::STLBPS, 0)
    );
    assert!((c.read(num::TLBIDX, 0) & 0xffff) < TLB_ENTRIES as u64);
    for i in 0..TLB_ENTRIES {
        let e = t.entry(i).unwrap();
        if e.e {
            assert!(
                page_size_supported(u64::from(e.ps)),
                "entry {i} has PS {}",
                e.ps
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(ops) = u.arbitrary::<Vec<Op>>() else {
        return;
    };
    let mut c = CsrFile::new(0);
    let mut t = SoftTlb::new();
    let ipis: Vec<VIpi> = (0..4).map(|_| VIpi::new()).collect();
    let mut now = 0u64;
    for op in ops {
        match op {
            Op::Decode(w) => {
                if let Some(i) = insn::decode(w) {
                    match i {
                        Insn::CsrRd { rd, csr } | Insn::CsrWr { rd, csr } => {
                            assert!(rd < 32);
                            assert_eq!(u32::from(csr), (w >> 10) & 0x3fff);
                        }
                        Insn::CsrXchg { rd, rj, csr } => {
                            assert!(rd < 32 && (2..32).contains(&rj));
                            assert_eq!(u32::from(csr), (w >> 10) & 0x3fff);
                        }
                        Insn::Load { rd, .. } | Insn::Store { rd, .. } => assert!(rd < 32),
                        Insn::Invtlb { op, rj, rk } => assert!(op < 32 && rj < 32 && rk < 32),
                        _ => {}
                    }
                    if matches!(i, Insn::Store { .. }) {
                        assert!(insn::writes_memory(w));
                    }
                }
            }
            Op::CsrWr { pick, raw, v } => {
                let csr = csr_of(pick, raw);
                let _ = c.write(csr, v, now);
                if (num::SAVE0..num::SAVE0 + 16).contains(&csr) {
                    assert_eq!(c.read(csr, now), v);
                }
            }
            Op::CsrXchg { pick, v, mask } => {
                let csr = CSRS[pick as usize % CSRS.len()];
                let before = c.read(csr, now);
                let (old, _) = c.xchg(csr, v, mask, now);
                if csr != num::TCFG {
                    assert_eq!(
                        old, before,
                        "csrxchg of {csr:#x} returned another old value"
                    );
                }
            }
            Op::Fill => check_inval(t.fill(&c)),
            Op::Wr => check_inval(t.wr(&c)),
            Op::Rd => t.rd(&mut c),
            Op::Srch => t.srch(&mut c),
            Op::Clr => check_inval(t.clr(&c)),
            Op::Flush => check_inval(t.flush()),
            Op::Invtlb { op, asid, va } => {
                if let Some(i) = t.invtlb(op, asid, va) {
                    check_inval(i);
                }
            }
            Op::Translate { va, acc } => {
                let acc = [Access::Load, Access::Store, Access::Fetch][acc as usize % 3];
                if let Ok(m) = tlb::translate(&c, &t, va, acc) {
                    assert!(m.pa <= PA_MASK);
                    assert!(m.ps >= 12 && m.ps < 64);
                    let off = (1u64 << m.ps) - 1;
                    assert_eq!(m.pa & off & 0xfff, va & off & 0xfff, "page offset lost");
                    if let Some(i) = m.tlb_index {
                        let e = t.entry(i).unwrap();
                        assert!(e.e);
                        assert_eq!(m.pa & off, va & off);
                    }
                }
            }
            Op::Lddir { base, level, word } => {
                if let Some(v) = tlb::lddir(&c, base, level, |pa| {
                    assert!(pa <= PA_MASK);
                    Some(word)
                }) {
                    let _ = v;
                }
            }
            Op::Ldpte { base, seq, word } => {
                let _ = tlb::ldpte(&mut c, base, seq, |pa| {
                    assert!(pa <= PA_MASK);
                    Some(word)
                });
            }
            Op::Ertn => {
                let _ = c.ertn();
            }
            Op::Iocsr {
                me,
                addr,
                size,
                value,
                write,
            } => {
                let me = me as usize % 5;
                let size = [Size::B, Size::H, Size::W, Size::D][size as usize % 4];
                let addr = 0x1000 + u64::from(addr % 0x60);
                if write {
                    let _ = iocsr::write(&ipis, me, addr, size, value);
                    if me < 4 && size == Size::W {
                        let st = iocsr::read(&ipis, me, IPI_STATUS, Size::W) as u32;
                        if addr == IPI_SET {
                            assert_eq!(st & value as u32, value as u32, "IPI_SET lost bits");
                        } else if addr == IPI_CLEAR {
                            assert_eq!(st & value as u32, 0, "IPI_CLEAR left bits");
                        }
                    }
                } else {
                    let v = iocsr::read(&ipis, me, addr, size);
                    assert_eq!(v & !size.mask(), 0, "read wider than its size");
                }
            }
            Op::Timer { now: d } => {
                now = now.saturating_add(u64::from(d));
                let _ = c.update_timer(now);
                let _ = c.tval(now);
            }
        }
        check_state(&c, &t);
    }
});
