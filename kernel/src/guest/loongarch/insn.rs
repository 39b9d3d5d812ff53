//! Decoding the LoongArch instructions a deprivileged (PLV3) guest kernel
//! traps on, plus the loads and stores kestrel emulates for MMIO and for
//! accesses through guest DMW windows that the TLB cannot map.
//!
//! [`decode`] takes any 32-bit word and returns either an [`Insn`] or
//! `None` ("not ours": the arch delivers the original exception to the
//! guest). It never panics. Encodings: LoongArch Reference Manual vol. 1,
//! checked against LLVM's assembler.

/// A general register number (0..=31; `$r0` reads as zero, writes are dropped).
pub type Reg = u8;

/// Access width of a load, store or IOCSR access, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    B = 1,
    H = 2,
    W = 4,
    D = 8,
}

impl Size {
    pub const fn bytes(self) -> u64 {
        self as u64
    }

    fn from_bits(b: u32) -> Size {
        match b & 3 {
            0 => Size::B,
            1 => Size::H,
            2 => Size::W,
            _ => Size::D,
        }
    }

    /// Mask of the low `bytes()` bytes.
    pub const fn mask(self) -> u64 {
        match self {
            Size::D => u64::MAX,
            s => (1u64 << (8 * s as u64)) - 1,
        }
    }

    /// Sign-extends the low `bytes()` bytes of `v`.
    pub const fn sign_extend(self, v: u64) -> u64 {
        let shift = 64 - 8 * self as u64;
        (((v << shift) as i64) >> shift) as u64
    }
}

/// How the effective address of a memory access is formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr {
    /// rj + sign-extended immediate.
    Imm(Reg, i64),
    /// rj + rk.
    Index(Reg, Reg),
}

/// A decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    /// `csrrd rd, csr`.
    CsrRd {
        rd: Reg,
        csr: u16,
    },
    /// `csrwr rd, csr`: CSR <- rd, rd <- old CSR.
    CsrWr {
        rd: Reg,
        csr: u16,
    },
    /// `csrxchg rd, rj, csr`: bits of mask rj replaced by rd, rd <- old CSR.
    CsrXchg {
        rd: Reg,
        rj: Reg,
        csr: u16,
    },
    /// `iocsrrd.{b,h,w,d} rd, rj`: rd <- IOCSR[rj].
    IocsrRd {
        rd: Reg,
        rj: Reg,
        size: Size,
    },
    /// `iocsrwr.{b,h,w,d} rd, rj`: IOCSR[rj] <- rd.
    IocsrWr {
        rd: Reg,
        rj: Reg,
        size: Size,
    },
    TlbClr,
    TlbFlush,
    TlbSrch,
    TlbRd,
    TlbWr,
    TlbFill,
    Ertn,
    /// `idle level`.
    Idle {
        level: u16,
    },
    /// `invtlb op, rj, rk`.
    Invtlb {
        op: u8,
        rj: Reg,
        rk: Reg,
    },
    /// `lddir rd, rj, level`.
    Lddir {
        rd: Reg,
        rj: Reg,
        level: u8,
    },
    /// `ldpte rj, seq`.
    Ldpte {
        rj: Reg,
        seq: u8,
    },
    /// `cacop code, rj, si12`.
    Cacop {
        code: u8,
        rj: Reg,
        si12: i64,
    },
    /// `hvcl code`.
    Hvcl {
        code: u16,
    },
    /// `break code` (never privileged: delivered as BRK).
    Break {
        code: u16,
    },
    /// `syscall code` (delivered as SYS).
    Syscall {
        code: u16,
    },
    /// `cpucfg rd, rj` (traps only with LVZ).
    Cpucfg {
        rd: Reg,
        rj: Reg,
    },
    /// A load: rd <- [addr] (sign- or zero-extended).
    Load {
        rd: Reg,
        addr: Addr,
        size: Size,
        signed: bool,
    },
    /// A store: [addr] <- rd.
    Store {
        rd: Reg,
        addr: Addr,
        size: Size,
    },
}

impl Insn {
    /// Whether this is a privileged instruction (raises IPE at PLV3).
    pub const fn is_privileged(&self) -> bool {
        !matches!(
            self,
            Insn::Hvcl { .. }
                | Insn::Break { .. }
                | Insn::Syscall { .. }
                | Insn::Cpucfg { .. }
                | Insn::Load { .. }
                | Insn::Store { .. }
        )
    }
}

const fn rd(w: u32) -> Reg {
    (w & 0x1f) as Reg
}
const fn rj(w: u32) -> Reg {
    ((w >> 5) & 0x1f) as Reg
}
const fn rk(w: u32) -> Reg {
    ((w >> 10) & 0x1f) as Reg
}
/// Sign-extends the `bits`-wide field of `w` at `shift`.
const fn simm(w: u32, shift: u32, bits: u32) -> i64 {
    let v = ((w >> shift) & ((1 << bits) - 1)) as i64;
    (v << (64 - bits)) >> (64 - bits)
}

/// Decodes `w`; `None` when kestrel does not emulate it.
pub fn decode(w: u32) -> Option<Insn> {
    // csrrd / csrwr / csrxchg: 0000 0100 csr[23:10] rj rd.
    if w & 0xff00_0000 == 0x0400_0000 {
        let csr = ((w >> 10) & 0x3fff) as u16;
        return Some(match rj(w) {
            0 => Insn::CsrRd { rd: rd(w), csr },
            1 => Insn::CsrWr { rd: rd(w), csr },
            j => Insn::CsrXchg {
                rd: rd(w),
                rj: j,
                csr,
            },
        });
    }
    match w {
        0x0648_2000 => return Some(Insn::TlbClr),
        0x0648_2400 => return Some(Insn::TlbFlush),
        0x0648_2800 => return Some(Insn::TlbSrch),
        0x0648_2c00 => return Some(Insn::TlbRd),
        0x0648_3000 => return Some(Insn::TlbWr),
        0x0648_3400 => return Some(Insn::TlbFill),
        0x0648_3800 => return Some(Insn::Ertn),
        _ => {}
    }
    match w & 0xffff_f000 {
        0x0648_0000 => {
            return Some(Insn::IocsrRd {
                rd: rd(w),
                rj: rj(w),
                size: Size::from_bits(w >> 10),
            })
        }
        0x0648_1000 => {
            return Some(Insn::IocsrWr {
                rd: rd(w),
                rj: rj(w),
                size: Size::from_bits(w >> 10),
            })
        }
        _ => {}
    }
    match w & 0xffff_8000 {
        0x0648_8000 => {
            return Some(Insn::Idle {
                level: (w & 0x7fff) as u16,
            })
        }
        0x0649_8000 => {
            return Some(Insn::Invtlb {
                op: rd(w),
                rj: rj(w),
                rk: rk(w),
            })
        }
        0x002b_8000 => {
            return Some(Insn::Hvcl {
                code: (w & 0x7fff) as u16,
            })
        }
        0x002a_0000 => {
            return Some(Insn::Break {
                code: (w & 0x7fff) as u16,
            })
        }
        0x002b_0000 => {
            return Some(Insn::Syscall {
                code: (w & 0x7fff) as u16,
            })
        }
        _ => {}
    }
    match w & 0xfffc_0000 {
        0x0640_0000 => {
            return Some(Insn::Lddir {
                rd: rd(w),
                rj: rj(w),
                level: ((w >> 10) & 0xff) as u8,
            })
        }
        // ldpte has rd = 0; anything else there is reserved.
        0x0644_0000 if rd(w) == 0 => {
            return Some(Insn::Ldpte {
                rj: rj(w),
                seq: ((w >> 10) & 0xff) as u8,
            })
        }
        _ => {}
    }
    if w & 0xffc0_0000 == 0x0600_0000 {
        return Some(Insn::Cacop {
            code: rd(w),
            rj: rj(w),
            si12: simm(w, 10, 12),
        });
    }
    if w & 0xffff_fc00 == 0x0000_6c00 {
        return Some(Insn::Cpucfg {
            rd: rd(w),
            rj: rj(w),
        });
    }
    decode_mem(w)
}

/// Whether `w` writes memory: plain stores, `sc.*`, atomics (`am*`),
/// bound-checked stores, FP/LSX/LASX stores. A TLB refill does not say
/// whether the access was a store; this does, for the page-fault code the
/// guest should see (PIS rather than PIL).
pub fn writes_memory(w: u32) -> bool {
    if matches!(decode(w), Some(Insn::Store { .. })) {
        return true;
    }
    let op8 = w >> 24;
    let op10 = w & 0xffc0_0000;
    let op17 = w & 0xffff_8000;
    matches!(op8, 0x21 | 0x23 | 0x31 | 0x33)
        || matches!(op10, 0x2b40_0000 | 0x2bc0_0000 | 0x2c40_0000 | 0x2cc0_0000)
        || matches!(op17, 0x3838_0000 | 0x383c_0000 | 0x3844_0000 | 0x384c_0000)
        || (0x3857_0000..0x3857_8000).contains(&w)
        || (0x3858_0000..0x3872_0000).contains(&w)
        || (0x3876_0000..0x3878_0000).contains(&w)
        || (0x387c_0000..0x3880_0000).contains(&w)
}

/// The loads and stores of [`decode`] alone: what a second-stage fault
/// (LVZ's PIL/PIS) can be, without looking at every other class first.
pub fn decode_mem(w: u32) -> Option<Insn> {
    // ld/st with si12: 0010 10 op[25:22].
    if w & 0xfc00_0000 == 0x2800_0000 {
        let op = (w >> 22) & 0xf;
        let addr = Addr::Imm(rj(w), simm(w, 10, 12));
        let size = Size::from_bits(op);
        return match op {
            0..=3 => Some(Insn::Load {
                rd: rd(w),
                addr,
                size,
                signed: true,
            }),
            4..=7 => Some(Insn::Store {
                rd: rd(w),
                addr,
                size,
            }),
            8..=10 => Some(Insn::Load {
                rd: rd(w),
                addr,
                size,
                signed: false,
            }),
            _ => None,
        };
    }
    // ldx/stx: 0011 1000 0000 op[18:15] rk rj rd.
    if w & 0xffc0_0000 == 0x3800_0000 {
        let op = (w >> 15) & 0x7f;
        let addr = Addr::Index(rj(w), rk(w));
        let size = Size::from_bits(op >> 3);
        return match op {
            0x00 | 0x08 | 0x10 | 0x18 => Some(Insn::Load {
                rd: rd(w),
                addr,
                size,
                signed: true,
            }),
            0x20 | 0x28 | 0x30 | 0x38 => Some(Insn::Store {
                rd: rd(w),
                addr,
                size,
            }),
            0x40 | 0x48 | 0x50 => Some(Insn::Load {
                rd: rd(w),
                addr,
                size,
                signed: false,
            }),
            _ => None,
        };
    }
    // ldptr/stptr.{w,d}: 0010 01 op[25:24] si14 rj rd (offset si14 << 2).
    if w & 0xfc00_0000 == 0x2400_0000 {
        let addr = Addr::Imm(rj(w), simm(w, 10, 14) << 2);
        let r = rd(w);
        return Some(match (w >> 24) & 3 {
            0 => Insn::Load {
                rd: r,
                addr,
                size: Size::W,
                signed: true,
            },
            1 => Insn::Store {
                rd: r,
                addr,
                size: Size::W,
            },
            2 => Insn::Load {
                rd: r,
                addr,
                size: Size::D,
                signed: true,
            },
            _ => Insn::Store {
                rd: r,
                addr,
                size: Size::D,
            },
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // Words assembled by LLVM (loongarch64), see the module docs.
    #[test]
    fn known_encodings() {
        let cases: &[(u32, Insn)] = &[
            (0x0400_1404, Insn::CsrRd { rd: 4, csr: 5 }),
            (0x0400_1424, Insn::CsrWr { rd: 4, csr: 5 }),
            (
                0x0400_14a4,
                Insn::CsrXchg {
                    rd: 4,
                    rj: 5,
                    csr: 5,
                },
            ),
            (
                0x0648_00a4,
                Insn::IocsrRd {
                    rd: 4,
                    rj: 5,
                    size: Size::B,
                },
            ),
            (
                0x0648_0ca4,
                Insn::IocsrRd {
                    rd: 4,
                    rj: 5,
                    size: Size::D,
                },
            ),
            (
                0x0648_10a4,
                Insn::IocsrWr {
                    rd: 4,
                    rj: 5,
                    size: Size::B,
                },
            ),
            (
                0x0648_1ca4,
                Insn::IocsrWr {
                    rd: 4,
                    rj: 5,
                    size: Size::D,
                },
            ),
            (0x0648_2000, Insn::TlbClr),
            (0x0648_2400, Insn::TlbFlush),
            (0x0648_2800, Insn::TlbSrch),
            (0x0648_2c00, Insn::TlbRd),
            (0x0648_3000, Insn::TlbWr),
            (0x0648_3400, Insn::TlbFill),
            (0x0648_3800, Insn::Ertn),
            (0x0648_8000, Insn::Idle { level: 0 }),
            (
                0x0649_98a5,
                Insn::Invtlb {
                    op: 5,
                    rj: 5,
                    rk: 6,
                },
            ),
            (
                0x0640_04a4,
                Insn::Lddir {
                    rd: 4,
                    rj: 5,
                    level: 1,
                },
            ),
            (0x0644_04a0, Insn::Ldpte { rj: 5, seq: 1 }),
            (
                0x0600_40a8,
                Insn::Cacop {
                    code: 8,
                    rj: 5,
                    si12: 16,
                },
            ),
            (0x002b_8100, Insn::Hvcl { code: 0x100 }),
            (0x002a_0000, Insn::Break { code: 0 }),
            (0x002b_0000, Insn::Syscall { code: 0 }),
            (0x0000_6ca4, Insn::Cpucfg { rd: 4, rj: 5 }),
            (
                0x283f_f0a4,
                Insn::Load {
                    rd: 4,
                    addr: Addr::Imm(5, -4),
                    size: Size::B,
                    signed: true,
                },
            ),
            (
                0x2a00_10a4,
                Insn::Load {
                    rd: 4,
                    addr: Addr::Imm(5, 4),
                    size: Size::B,
                    signed: false,
                },
            ),
            (
                0x29c0_20a4,
                Insn::Store {
                    rd: 4,
                    addr: Addr::Imm(5, 8),
                    size: Size::D,
                },
            ),
            (
                0x3808_18a4,
                Insn::Load {
                    rd: 4,
                    addr: Addr::Index(5, 6),
                    size: Size::W,
                    signed: true,
                },
            ),
            (
                0x3810_18a4,
                Insn::Store {
                    rd: 4,
                    addr: Addr::Index(5, 6),
                    size: Size::B,
                },
            ),
            (
                0x3828_18a4,
                Insn::Load {
                    rd: 4,
                    addr: Addr::Index(5, 6),
                    size: Size::W,
                    signed: false,
                },
            ),
            (
                0x2400_08a4,
                Insn::Load {
                    rd: 4,
                    addr: Addr::Imm(5, 8),
                    size: Size::W,
                    signed: true,
                },
            ),
            (
                0x2700_08a4,
                Insn::Store {
                    rd: 4,
                    addr: Addr::Imm(5, 8),
                    size: Size::D,
                },
            ),
        ];
        for &(w, want) in cases {
            assert_eq!(decode(w), Some(want), "{w:#010x}");
        }
    }

    #[test]
    fn not_ours() {
        // dbar, ibar, rdtime.d, fld.d, vld, xvld, movfcsr2gr, movcf2gr, ll.w, amswap.w, nop.
        for w in [
            0x3872_0000u32,
            0x3872_8000,
            0x0000_6804,
            0x2b80_00a0,
            0x2c00_00a0,
            0x2c80_00a0,
            0x0114_c804,
            0x0114_dc04,
            0x2000_00a4,
            0x3860_14c4,
            0x0340_0000,
            0,
            u32::MAX,
        ] {
            assert_eq!(decode(w), None, "{w:#010x}");
        }
        // ldpte with a non-zero rd is reserved.
        assert_eq!(decode(0x0644_04a1), None);
        // gcsrrd (LVZ) is not ours either.
        assert_eq!(decode(0x0500_1404), None);
    }

    #[test]
    fn every_word_decodes_or_is_refused() {
        // Every opcode pattern (bits [31:10], exhaustively) with register
        // fields that exercise rj = 0/1/other and rd = 0/other: decoding
        // never panics and the fields of what it accepts round-trip.
        let mut accepted = 0u64;
        for hi in 0u32..(1 << 22) {
            for lo in [0u32, 0x020, 0x3ff, 0x1a5, 0x0c1] {
                let w = hi << 10 | lo;
                let Some(i) = decode(w) else { continue };
                accepted += 1;
                match i {
                    Insn::CsrRd { rd, csr } => {
                        assert_eq!((w >> 24, (w >> 5) & 31), (4, 0));
                        assert_eq!(
                            (u32::from(csr), u32::from(rd)),
                            ((w >> 10) & 0x3fff, w & 31)
                        );
                    }
                    Insn::CsrWr { .. } => assert_eq!((w >> 5) & 31, 1),
                    Insn::CsrXchg { rj, .. } => assert!(rj >= 2),
                    Insn::Load { rd, addr, .. } | Insn::Store { rd, addr, .. } => {
                        assert!(rd < 32);
                        match addr {
                            Addr::Imm(j, off) => assert!(j < 32 && (-32768..32768).contains(&off)),
                            Addr::Index(j, k) => assert!(j < 32 && k < 32),
                        }
                    }
                    Insn::Ldpte { .. } => assert_eq!(w & 31, 0),
                    _ => {}
                }
            }
        }
        assert!(accepted > 100_000);
    }

    #[test]
    fn memory_writers() {
        // sc.w, sc.d, fst.s, fstx.s, fstx.d, vstx, xvstx, vstelm.b, xvstelm.d,
        // amswap.w, ammax_db.du, amadd.b, amcas.d, stgt.b, stle.d, fstgt.s,
        // fstle.d, sc.q, st.d, vst, xvst (LLVM's encodings).
        for w in [
            0x2100_00a4u32,
            0x2300_00a4,
            0x2b40_00a0,
            0x3838_18a0,
            0x383c_18a0,
            0x3844_18a0,
            0x384c_18a0,
            0x3180_00a0,
            0x3310_00a0,
            0x3860_14c4,
            0x3870_94c4,
            0x385d_14c4,
            0x3859_94c4,
            0x387c_18a4,
            0x387f_98a4,
            0x3876_18a0,
            0x3877_98a0,
            0x3857_14c4,
            0x29c0_20a4,
            0x2c40_c083,
            0x2cc1_8083,
        ] {
            assert!(writes_memory(w), "{w:#010x}");
        }
        // ld.b, ldgt.b, fld.d, vld, ll.w, dbar, csrrd.
        for w in [
            0x283f_f0a4u32,
            0x3878_18a4,
            0x2b80_00a0,
            0x2c00_00a0,
            0x2000_00a4,
            0x3872_0000,
            0x0400_1404,
        ] {
            assert!(!writes_memory(w), "{w:#010x}");
        }
    }

    #[test]
    fn size_helpers() {
        assert_eq!(Size::B.sign_extend(0x80), 0xffff_ffff_ffff_ff80);
        assert_eq!(Size::W.sign_extend(0x7fff_ffff), 0x7fff_ffff);
        assert_eq!(Size::H.mask(), 0xffff);
        assert_eq!(Size::D.mask(), u64::MAX);
    }
}
