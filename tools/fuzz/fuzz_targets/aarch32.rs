//! AArch32 guest decoders: any ESR decodes to a trap whose fields
//! re-encode to the syndrome and whose condition is the one the flags and
//! IT state give; every cp15 encoding has an answer and MCRR answers move
//! 64 bits; a cp14 access answers from the debug shadow within its
//! bounds (UNDEFINED ones change nothing); stepping over an instruction moves the 32-bit PC by 2 or 4 and
//! changes nothing but the IT bits; a guest mode's 15 registers land on 15
//! distinct X registers that map back; exception entry lands on its vector
//! in its mode with IRQs masked and the IT state cleared, keeping the old
//! CPSR in the SPSR; fault status codes say their format; a zImage is read
//! or refused, and an accepted one's layout stays inside RAM, below 4 GiB
//! and clear of the zImage.
#![no_main]

use arbitrary::Arbitrary;
use kernel::guest::arm64::aarch32::cond::{
    self, condition_passed, current_cond, it_advance, it_state, nzcv, skip_instruction,
    PSR_IT_MASK, PSR_T,
};
use kernel::guest::arm64::aarch32::cp14;
use kernel::guest::arm64::aarch32::cp15::{self, Kind, Part};
use kernel::guest::arm64::aarch32::except::{self, psr, sctlr, Exception, Fault, FsrFormat};
use kernel::guest::arm64::aarch32::idregs;
use kernel::guest::arm64::aarch32::regs::{self, Mode, Reg64};
use kernel::guest::arm64::aarch32::smccc::{self, Call32};
use kernel::guest::arm64::aarch32::trap::{self, Cond, CpReg, Exit32, Mcr, VmrsReg};
use kernel::guest::arm64::debug::{self, Answer, DebugRegs};
use kernel::guest::arm64::esr;
use kestrel_abi::image::{self as img, ZImage};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    esr: u64,
    far: u64,
    hpfar: u64,
    spsr: u64,
    pc: u64,
    sctlr: u32,
    vbar: u32,
    exception: u8,
    fault: (u8, u8, bool, bool),
    ram: (u8, u64, u64, u64),
    /// Patch a valid zImage header over `file` first.
    patch: bool,
    file: Vec<u8>,
}

const EXCEPTIONS: [Exception; 6] = [
    Exception::Undefined,
    Exception::Svc,
    Exception::PrefetchAbort,
    Exception::DataAbort,
    Exception::Irq,
    Exception::Fiq,
];

fn check_trap(esr_v: u64, far: u64, hpfar: u64, spsr: u64) {
    let t = trap::decode(esr_v, far, hpfar);
    let iss = (esr_v & 0x1ff_ffff) as u32;
    let ec = ((esr_v >> 26) & 0x3f) as u32;
    assert_eq!(t.len, if esr_v & (1 << 25) != 0 { 4 } else { 2 });
    let field_cond = if iss & (1 << 24) != 0 {
        Cond::Code(((iss >> 20) & 0xf) as u8)
    } else {
        Cond::FromIt
    };
    match t.exit {
        Exit32::Cp15(m) | Exit32::Cp14(m) => {
            let r = m.reg;
            let back = u32::from(r.opc2) << 17
                | u32::from(r.opc1) << 14
                | u32::from(r.crn) << 10
                | u32::from(m.rt) << 5
                | u32::from(r.crm) << 1
                | u32::from(m.read);
            assert_eq!(back, iss & 0xf_ffff);
            assert_eq!(t.cond, field_cond);
            if matches!(t.exit, Exit32::Cp14(_)) {
                check_cp14(m, esr_v ^ far, far as u32);
            }
            if matches!(t.exit, Exit32::Cp15(_)) {
                assert_eq!(ec, trap::ec::CP15_32);
                let e = cp15::lookup(r);
                let k = cp15::answer(&m);
                assert_eq!(k == Kind::Undef, e.kind == Kind::Undef || !e.allows(m.read));
                if let Kind::Sys { reg, part } = k {
                    assert_eq!(reg.op0, 3);
                    assert_ne!(part, Part::Double);
                }
                if r.opc1 == 0 && r.crn == 0 && (1..=3).contains(&r.crm) {
                    let Kind::Sys { reg, .. } = e.kind else {
                        panic!("ID space {r:?}")
                    };
                    assert!(reg.is_feature_id() && reg.crm == r.crm && reg.op2 == r.opc2);
                    // The guest's view of any hardware value: no Security or
                    // Virtualization Extensions, Armv8 cp14 debug, no PMU, GIC
                    // only as the VM has it.
                    let host = esr_v ^ far.rotate_left(17);
                    let v3 = hpfar & 1 != 0;
                    let v = idregs::guest_view32(reg, host, v3);
                    match (r.crm, r.opc2) {
                        (1, 1) => {
                            assert_eq!(v & 0x0ff0_fff0, 0, "ID_PFR1 {v:#x}");
                            assert_eq!(v >> 28, u32::from(v3));
                        }
                        (1, 2) => assert_eq!(v, 6, "ID_DFR0: Armv8 cp14 debug only"),
                        (1, 3) | (3, 3..=7) => assert_eq!(v, 0),
                        _ => {}
                    }
                }
                if r.opc1 == 0 && r.crn == 0 && (4..=7).contains(&r.crm) {
                    assert_eq!(e.kind, Kind::Const(0), "reserved AArch32 ID space");
                }
                if cp15::is_impdef(r.crn, r.crm) {
                    assert_eq!(e.kind, Kind::Undef);
                }
            }
        }
        Exit32::Cp15Pair(m) | Exit32::Cp14Pair(m) => {
            let back = u32::from(m.opc1) << 16
                | u32::from(m.rt2) << 10
                | u32::from(m.rt) << 5
                | u32::from(m.crm) << 1
                | u32::from(m.read);
            assert_eq!(back, iss & 0xf_7fff);
            assert_eq!(t.cond, field_cond);
            if let Kind::Sys { part, .. } = cp15::answer64(&m) {
                assert_eq!(part, Part::Double);
            }
            if matches!(t.exit, Exit32::Cp14Pair(_)) {
                let a = cp14::access64(m.opc1, m.crm, m.read);
                let exists = m.opc1 == 0 && (m.crm == 1 || m.crm == 2) && m.read;
                assert_eq!(
                    a,
                    if exists {
                        Answer::Read(0)
                    } else {
                        Answer::Undef
                    }
                );
            }
        }
        Exit32::Cp14Mem(l) => {
            assert_eq!(u32::from(l.imm8), (iss >> 12) & 0xff);
            assert_eq!(
                l.rn.is_none(),
                iss & (1 << 3) != 0,
                "literal forms have no Rn"
            );
            assert_eq!(l.load, iss & 1 != 0);
            assert_eq!(t.cond, field_cond);
        }
        Exit32::Vmrs { reg, rt } => {
            assert_eq!(reg, VmrsReg::from_reg(((iss >> 10) & 0xf) as u8));
            assert_eq!(u32::from(rt), (iss >> 5) & 0x1f);
            if let Some(r) = cp15::vmrs_id(reg) {
                assert!(r.is_feature_id());
            }
        }
        Exit32::Wfi | Exit32::Wfe => {
            assert_eq!(ec, trap::ec::WFX);
            assert_eq!(t.exit == Exit32::Wfe, iss & 1 != 0);
            assert_eq!(t.cond, field_cond);
        }
        Exit32::FpAccess => assert_eq!(t.cond, field_cond),
        Exit32::Smc => {
            let want = if iss & (1 << 19) == 0 {
                Cond::Passed
            } else {
                field_cond
            };
            assert_eq!(t.cond, want);
        }
        Exit32::Svc { imm } | Exit32::Hvc { imm } => {
            assert_eq!(imm, iss as u16);
            assert_eq!(t.cond, Cond::Passed);
        }
        Exit32::DataAbort(a) => {
            assert_eq!(esr::decode(esr_v, far, hpfar), esr::Exit::DataAbort(a));
            assert_eq!(t.cond, Cond::Passed);
        }
        Exit32::InstAbort(a) => {
            assert_eq!(esr::decode(esr_v, far, hpfar), esr::Exit::InstAbort(a));
            assert_eq!(t.cond, Cond::Passed);
        }
        Exit32::Unknown { ec: e, iss: i } => {
            assert_eq!((e, i), (ec, iss));
            assert!(!matches!(
                ec,
                0x01 | 0x03..=0x08 | 0x0c | 0x11..=0x13 | 0x20 | 0x24
            ));
        }
    }
    // The condition is the flags' verdict on COND, or on the IT state.
    let want = match t.cond {
        Cond::Passed => true,
        Cond::Code(c) => condition_passed(c, nzcv(spsr)),
        Cond::FromIt => condition_passed(current_cond(spsr), nzcv(spsr)),
    };
    assert_eq!(t.cond.passed(spsr), want);
}

/// A cp14 access on a shadow with some breakpoints: an UNDEFINED one
/// changes nothing; no write sets MDSCR's AArch64-only SS or KDE, HMC or
/// SSC, or a point past the counts; DBGDIDR is built from `dfr0` alone.
fn check_cp14(m: Mcr, dfr0: u64, value: u32) {
    let mut d = DebugRegs::new((dfr0 >> 12) as usize & 0xf, (dfr0 >> 20) as usize & 0xf);
    let before = d;
    let a = cp14::access(&mut d, dfr0, m.reg, m.read, value);
    match a.answer {
        Answer::Undef => assert_eq!(d, before, "{m:?}"),
        Answer::Read(v) => {
            assert_eq!(v >> 32, 0, "a 32-bit register");
            assert_eq!(d, before, "reads change nothing");
        }
        Answer::Written { hw } => {
            assert!(!m.read);
            assert_eq!(hw, d.dirty);
            assert_eq!(a.reg.op0, 2);
        }
    }
    assert_eq!(d.mdscr & !cp14::DSCR_BITS, 0);
    assert!(d.bcr.iter().all(|&b| b & !debug::BCR_KEPT == 0));
    assert!(d.bvr[d.brps..].iter().all(|&b| b == 0));
    assert!(d.wvr[d.wrps..].iter().all(|&b| b == 0));
    if m.reg == CpReg::new(0, 0, 0, 0) && m.read {
        let v = cp14::dbgdidr(dfr0);
        assert_eq!(a.answer, Answer::Read(u64::from(v)));
        assert_eq!(v & 0x7fff, 0, "no Secure state, RES0");
        assert_eq!(v >> 16 & 0xf, (dfr0 & 0xf) as u32);
    }
}

fn check_skip(spsr: u64, pc: u64, il: bool) {
    let (new_pc, new_spsr) = skip_instruction(spsr, pc, il);
    let thumb = spsr & PSR_T != 0;
    let len = if thumb && !il { 2 } else { 4 };
    assert_eq!(new_pc, u64::from((pc as u32).wrapping_add(len)));
    assert_eq!(new_spsr & !PSR_IT_MASK, spsr & !PSR_IT_MASK);
    if thumb {
        assert_eq!(it_state(new_spsr), it_advance(it_state(spsr)));
    } else {
        assert_eq!(new_spsr, spsr);
    }
    // An IT block ends within four instructions.
    let mut s = spsr | PSR_T;
    for _ in 0..4 {
        s = skip_instruction(s, 0, false).1;
    }
    assert!(!cond::in_it_block(it_state(s)));
}

fn check_regs(spsr: u64) {
    match Mode::of_guest(spsr) {
        Ok(mode) => {
            assert!(!matches!(mode, Mode::Hyp | Mode::Mon));
            assert_eq!(mode.bits(), spsr as u8 & 0x1f);
            let mut seen = 0u32;
            for r in 0..15 {
                let Ok(Reg64::X(x)) = regs::guest_reg(spsr, r) else {
                    panic!("{mode:?} r{r}")
                };
                assert!(x < 31 && seen & (1 << x) == 0);
                seen |= 1 << x;
                assert_eq!(regs::aarch32_reg(mode, x), Some(r));
            }
            assert_eq!(regs::guest_reg(spsr, 15), Ok(Reg64::Pc));
        }
        Err(_) => assert!(regs::guest_reg(spsr, 0).is_err()),
    }
}

fn check_entry(exc: Exception, cpsr: u64, ret: u32, sctlr_v: u32, vbar: u32) {
    let e = except::enter(exc, cpsr, ret, sctlr_v, vbar);
    assert_eq!(e.mode, exc.mode());
    assert_eq!(e.cpsr & psr::M, u64::from(e.mode.bits()));
    assert_ne!(e.cpsr & psr::I, 0);
    assert_eq!(e.cpsr & (PSR_IT_MASK | psr::SS | psr::IL), 0);
    assert_eq!(e.cpsr >> 32, 0);
    assert_eq!(e.cpsr & psr::T != 0, sctlr_v & sctlr::TE != 0);
    assert_eq!(e.cpsr & psr::E != 0, sctlr_v & sctlr::EE != 0);
    assert_eq!(e.cpsr & 0xf000_0000, cpsr & 0xf000_0000, "flags kept");
    let base = if sctlr_v & sctlr::V != 0 {
        0xffff_0000
    } else {
        vbar & !0x1f
    };
    assert_eq!(e.pc, base.wrapping_add(exc.vector_offset()));
    let thumb = cpsr & psr::T != 0;
    assert_eq!(e.lr, ret.wrapping_add(exc.lr_offset(thumb)));
    assert_eq!(Some(e.lr_x), regs::lr_of(e.mode));
    assert_eq!(Some(e.spsr_reg), except::SpsrReg::of(e.mode));
    assert_eq!(
        except::aarch32_to_spsr_el2(e.spsr),
        (cpsr & 0xffff_ffff) & !psr::SS,
        "the SPSR is the old CPSR"
    );
}

fn check_fault(kind: u8, level: u8, long: bool, write: bool) {
    let fault = match kind % 9 {
        0 => Fault::Alignment,
        1 => Fault::Debug,
        2 => Fault::Translation { level },
        3 => Fault::AccessFlag { level },
        4 => Fault::Domain { level },
        5 => Fault::Permission { level },
        6 => Fault::SyncExternal,
        7 => Fault::SyncExternalOnWalk { level },
        _ => Fault::TlbConflict,
    };
    let format = if long {
        FsrFormat::Long
    } else {
        FsrFormat::Short
    };
    let (d, i) = (
        except::dfsr(fault, format, write),
        except::ifsr(fault, format),
    );
    assert_eq!(d.is_some(), i.is_some());
    if let (Some(d), Some(i)) = (d, i) {
        assert_eq!(d & except::FSR_LPAE != 0, long);
        assert_eq!(d & except::DFSR_WNR != 0, write);
        assert_eq!(d & !except::DFSR_WNR, i);
        assert_eq!(
            i & !(except::FSR_LPAE | 0x43f),
            0,
            "only FS/STATUS and LPAE"
        );
    }
}

fn check_zimage(file: &[u8], ram: (u8, u64, u64, u64)) {
    let Ok(z) = ZImage::parse(file) else {
        return;
    };
    assert!(z.size > 0 && z.size as usize <= file.len());
    let (base_sel, size, dtb, initrd) = ram;
    let base = u64::from(base_sel % 40) * img::ARM32_RAM_ALIGN;
    let (size, dtb, initrd) = (size % (5 << 30), dtb % (2 << 20), initrd % (1 << 30));
    let Ok(l) = img::arm32_layout(base, size, &z, dtb, initrd) else {
        return;
    };
    let window = (base + size).min(base + img::ARM32_LOWMEM).min(1 << 32);
    assert!(l.kernel >= base + img::ZIMAGE_LOAD_OFFSET);
    assert!(l.kernel < base + img::ZIMAGE_WINDOW);
    assert!(l.kernel + u64::from(z.size) + img::ZIMAGE_SLACK <= l.initrd);
    assert!(l.initrd <= l.initrd_end && l.initrd_end <= l.dtb);
    assert_eq!(l.initrd_end - l.initrd, initrd);
    assert!(l.dtb + dtb <= window);
    let entry = l.entry();
    assert_eq!(u64::from(entry.pc), l.kernel);
    assert_eq!(u64::from(entry.r2), l.dtb);
}

/// A 32-bit caller's SMCCC call: only SMC32 PSCI/architecture calls reach
/// the PSCI handler, with 32-bit registers; a vendor call's arguments and
/// results are 32-bit words (the PV IPI window 64 bits, a counter split).
fn check_smccc(r: [u64; 6], arch: bool, standard: bool, results: &[u64]) {
    let arch = arch || standard;
    match smccc::classify(r, arch, standard) {
        Call32::Psci(a) => {
            assert!(arch && !standard && r[0] as u32 & smccc::SMC64 == 0);
            assert!(a.iter().zip(&r).all(|(a, r)| *a == r & 0xffff_ffff));
        }
        Call32::NotSupported => {
            assert!(arch && (standard || r[0] as u32 & smccc::SMC64 != 0))
        }
        Call32::Vendor { function, args } => {
            assert!(!arch);
            assert_eq!(function, r[0] & 0xffff_ffff);
            assert!(args[1..].iter().all(|&a| a >> 32 == 0));
        }
    }
    let out = smccc::vendor_results(r[0], results);
    assert!(out.len() <= 4 && out.len() <= results.len().max(2));
    assert!(out.iter().all(|&v| v >> 32 == 0));
}

fuzz_target!(|x: Input| {
    check_smccc(
        [x.esr, x.far, x.hpfar, x.spsr, x.pc, u64::from(x.sctlr)],
        x.fault.2,
        x.fault.3,
        &[x.far, x.hpfar, x.spsr, x.pc, x.esr][..(x.exception as usize % 6)],
    );
    check_trap(x.esr, x.far, x.hpfar, x.spsr);
    // The same syndrome as each AArch32 class, to reach every decoder.
    for ec in [0x01u64, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0c, 0x13] {
        check_trap((x.esr & !(0x3f << 26)) | (ec << 26), x.far, x.hpfar, x.spsr);
    }
    check_skip(x.spsr, x.pc, x.esr & (1 << 25) != 0);
    check_regs(x.spsr);
    let exc = EXCEPTIONS[x.exception as usize % EXCEPTIONS.len()];
    check_entry(exc, x.spsr, x.pc as u32, x.sctlr, x.vbar);
    let (kind, level, long, write) = x.fault;
    check_fault(kind, level % 5, long, write);

    let mut file = x.file;
    if x.patch && file.len() >= 0x40 {
        file[0x24..0x28].copy_from_slice(&img::ZIMAGE_MAGIC.to_le_bytes());
        file[0x28..0x2c].copy_from_slice(&0u32.to_le_bytes());
        let end = (x.pc as u32) % (file.len() as u32 + 1);
        file[0x2c..0x30].copy_from_slice(&end.to_le_bytes());
        if x.exception & 0x80 != 0 {
            file[0x34..0x38].copy_from_slice(&img::ZIMAGE_TABLE_MAGIC.to_le_bytes());
        }
    }
    check_zimage(&file, x.ram);
});
