use super::*;
use crate::guest::loongarch::insn::Size;

/// `csrrd $a0, 0x5` (ESTAT), `hvcl 0x100`, `iocsrrd.w $a0, $a1`, `idle 0`,
/// `syscall 0`, `cpucfg $a0, $a1`.
const CSRRD: u32 = 0x0400_0000 | (5 << 10) | 4;
const HVCL: u32 = kestrel_abi::loongarch::HVCL_BASE | 0x100;
const IOCSRRD_W: u32 = 0x0648_0800 | (5 << 5) | 4;
const IDLE: u32 = 0x0648_8000;
const SYSCALL: u32 = 0x002b_0000;
const CPUCFG: u32 = 0x0000_6c00 | (5 << 5) | 4;

fn trap(code: u8, sub: u16, badi: u32, plv: u64) -> Trap {
    Trap {
        refill: false,
        estat: u64::from(code) << 16 | u64::from(sub) << 22,
        pc: 0x9000_0000_0020_0000,
        badv: 0x1234_5678,
        badi,
        plv,
    }
}

#[test]
fn the_words_used_here_decode_as_meant() {
    assert_eq!(insn::decode(CSRRD), Some(Insn::CsrRd { rd: 4, csr: 5 }));
    assert_eq!(insn::decode(HVCL), Some(Insn::Hvcl { code: 0x100 }));
    assert_eq!(
        insn::decode(IOCSRRD_W),
        Some(Insn::IocsrRd {
            rd: 4,
            rj: 5,
            size: Size::W
        })
    );
    assert_eq!(insn::decode(IDLE), Some(Insn::Idle { level: 0 }));
    assert_eq!(insn::decode(SYSCALL), Some(Insn::Syscall { code: 0 }));
    assert!(matches!(insn::decode(CPUCFG), Some(Insn::Cpucfg { .. })));
}

#[test]
fn every_ecode() {
    for code in 0..64u8 {
        let t = trap(code, 0, CSRRD, 0);
        let want = match code {
            ecode::INT => Exit::Interrupt,
            ecode::PIL | ecode::PNR | ecode::PPI => Exit::PageFault {
                va: t.badv,
                access: Access::Load,
            },
            ecode::PIS | ecode::PME => Exit::PageFault {
                va: t.badv,
                access: Access::Store,
            },
            ecode::PIF | ecode::PNX => Exit::PageFault {
                va: t.badv,
                access: Access::Fetch,
            },
            ecode::ADE => Exit::AddressError { va: t.badv, sub: 0 },
            ecode::IPE => Exit::Privileged(Insn::CsrRd { rd: 4, csr: 5 }),
            ecode::FPD => Exit::FpDisabled(FpUnit::Fp),
            ecode::SXD => Exit::FpDisabled(FpUnit::Lsx),
            ecode::ASXD => Exit::FpDisabled(FpUnit::Lasx),
            // A privileged instruction reported as undefined is the guest's.
            ecode::INE => Exit::GuestException {
                code,
                sub: 0,
                badv: None,
                insn: CSRRD,
            },
            ecode::ALE | ecode::BCE | 19 => Exit::GuestException {
                code,
                sub: 0,
                badv: Some(t.badv),
                insn: CSRRD,
            },
            _ => Exit::GuestException {
                code,
                sub: 0,
                badv: None,
                insn: CSRRD,
            },
        };
        assert_eq!(decode(&t), want, "ecode {code}");
    }
}

#[test]
fn esubcode_and_unknown_codes_pass_through() {
    let t = trap(ecode::ADE, ecode::ADEF, 0, 0);
    assert_eq!(decode(&t), Exit::AddressError { va: t.badv, sub: 0 });
    let t = trap(ecode::ADE, 0x1ff, 0, 0);
    assert_eq!(
        decode(&t),
        Exit::AddressError {
            va: t.badv,
            sub: 0x1ff
        }
    );
    // An exception kestrel does not handle keeps its ESUBCODE (FPE's
    // SIMD variant, say).
    let t = trap(ecode::FPE, 1, 0xdead_beef, 0);
    assert_eq!(
        decode(&t),
        Exit::GuestException {
            code: ecode::FPE,
            sub: 1,
            badv: None,
            insn: 0xdead_beef
        }
    );
}

#[test]
fn hypercalls_from_kernel_and_user_on_both_codes() {
    for code in [ecode::INE, ecode::IPE] {
        assert_eq!(
            decode(&trap(code, 0, HVCL, 0)),
            Exit::Hypercall { code: 0x100 }
        );
        for plv in 1..=3 {
            assert_eq!(decode(&trap(code, 0, HVCL, plv)), Exit::UserHypercall);
        }
    }
    assert_eq!(
        decode(&trap(ecode::IPE, 0, HVCL, 0)).reason(),
        Some(ExitReason::Hypercall)
    );
}

#[test]
fn privileged_only_at_virtual_plv0() {
    for w in [CSRRD, IOCSRRD_W, IDLE] {
        let i = insn::decode(w).unwrap();
        assert_eq!(decode(&trap(ecode::IPE, 0, w, 0)), Exit::Privileged(i));
        let user = decode(&trap(ecode::IPE, 0, w, 3));
        assert_eq!(
            user,
            Exit::GuestException {
                code: ecode::IPE,
                sub: 0,
                badv: None,
                insn: w
            }
        );
        assert_eq!(user.reason(), Some(ExitReason::Other));
    }
    // Not privileged (syscall, cpucfg) or not an instruction: the guest's IPE.
    for w in [SYSCALL, CPUCFG, 0, u32::MAX] {
        assert!(matches!(
            decode(&trap(ecode::IPE, 0, w, 0)),
            Exit::GuestException {
                code: ecode::IPE,
                ..
            }
        ));
    }
    let r = |w| decode(&trap(ecode::IPE, 0, w, 0)).reason();
    assert_eq!(r(CSRRD), Some(ExitReason::Sysreg));
    assert_eq!(r(IOCSRRD_W), Some(ExitReason::Ipi));
    assert_eq!(r(IDLE), Some(ExitReason::Idle));
    assert_eq!(decode(&trap(ecode::INE, 0, 0, 0)).reason(), None);
}

#[test]
fn refills_say_whether_they_fetch() {
    let mut t = trap(0, 0, 0, 0);
    t.refill = true;
    // TLBRERA has IsTLBR in bit 0.
    t.pc = 0x12_0000 | 1;
    t.badv = 0x12_0002;
    assert_eq!(
        decode(&t),
        Exit::TlbRefill {
            va: 0x12_0002,
            fetch: true
        }
    );
    t.badv = 0x12_0004;
    assert_eq!(
        decode(&t),
        Exit::TlbRefill {
            va: 0x12_0004,
            fetch: false
        }
    );
    // ESTAT is not looked at for a refill.
    t.estat = u64::MAX;
    assert!(matches!(decode(&t), Exit::TlbRefill { .. }));
    assert_eq!(decode(&t).reason(), Some(ExitReason::Abort));
}

#[test]
fn fp_traps_are_the_guests_when_it_disabled_the_unit() {
    for u in [FpUnit::Fp, FpUnit::Lsx, FpUnit::Lasx] {
        assert_eq!(u.euen_bit(), 1 << (u.ecode() - ecode::FPD));
        assert!(u.trap_is_guests(0, false));
        assert!(u.trap_is_guests(7, true));
        assert!(!u.trap_is_guests(7, false));
        assert!(u.trap_is_guests(!u.euen_bit(), false));
    }
}

/// Hostile and garbage values: every ESTAT bit pattern kind, every BADI
/// class, any PLV; decoding never panics and is a pure function.
#[test]
fn garbage_never_panics() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..200_000 {
        let t = Trap {
            refill: next() & 1 == 0,
            estat: next(),
            pc: next(),
            badv: next(),
            badi: next() as u32,
            plv: next() & 3,
        };
        let e = decode(&t);
        assert_eq!(decode(&t), e);
        let _ = e.reason();
        if let Exit::Privileged(i) = e {
            assert!(i.is_privileged() && t.plv == 0);
        }
    }
    for estat in [0, u64::MAX, 0x3f << 16, 0x1ff << 22, 1 << 63] {
        for badi in [0, u32::MAX, HVCL, CSRRD] {
            let _ = decode(&Trap {
                refill: false,
                estat,
                pc: u64::MAX,
                badv: u64::MAX,
                badi,
                plv: u64::MAX,
            });
        }
    }
}
