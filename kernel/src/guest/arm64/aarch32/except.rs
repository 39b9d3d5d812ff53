//! Taking an exception to an AArch32 EL1, as the hypervisor does when it
//! injects one (an undefined instruction, an abort on an access it refused,
//! a virtual interrupt): the mode entered, the vector, the banked LR and
//! SPSR, and the new CPSR. Plus the fault status (DFSR/IFSR) and address
//! (DFAR/IFAR) of an injected abort.
//!
//! Arm ARM (DDI 0487) G1 "Exception entry" (AArch32 state): the exception
//! vectors and the LR offsets of "Exception return addresses", and how each
//! CPSR field is set on entry; G8 DFSR/IFSR (short- and long-descriptor
//! formats). Cross-checked with arm64 KVM (`enter_exception32`,
//! `get_except32_cpsr`, `inject_abt32`) and QEMU (`arm_cpu_do_interrupt_aarch32`).
//!
//! | exception | mode | vector | LR (A32) | LR (T32) | CPSR.A | CPSR.F |
//! |---|---|---|---|---|---|---|
//! | undefined instruction | und | +0x04 | +4 | +2 | kept | kept |
//! | SVC | svc | +0x08 | +0 | +0 | kept | kept |
//! | prefetch abort | abt | +0x0C | +4 | +4 | set | kept |
//! | data abort | abt | +0x10 | +8 | +8 | set | kept |
//! | IRQ | irq | +0x18 | +4 | +4 | set | kept |
//! | FIQ | fiq | +0x1C | +4 | +4 | set | set |
//!
//! The LR is the *preferred return address* plus that offset: the
//! undefined or aborting instruction itself for UNDEF and aborts, the next
//! instruction for SVC (the PC after it), IRQ and FIQ. The vector base is
//! 0xFFFF_0000 with SCTLR.V (high vectors), else VBAR. On entry CPSR.I is
//! set, the IT bits, IL and SS are cleared, T comes from SCTLR.TE, E from
//! SCTLR.EE, SSBS from SCTLR.DSSBS, PAN is set when SCTLR.SPAN is 0.
//!
//! Layouts: the guest's PSTATE as the hypervisor holds it (SPSR_EL2) has
//! DIT at bit 24 and SS at bit 21; the AArch32 SPSR_<mode> registers (what
//! the guest reads with MRS) have DIT at bit 21 and J (RES0) at bit 24.

use super::cond::PSR_IT_MASK;
use super::regs::Mode;

/// CPSR/SPSR bits (AArch32 state; bit 24 and 21 differ per view, below).
pub mod psr {
    pub const N: u64 = 1 << 31;
    pub const Z: u64 = 1 << 30;
    pub const C: u64 = 1 << 29;
    pub const V: u64 = 1 << 28;
    pub const Q: u64 = 1 << 27;
    /// DIT in SPSR_EL2 (the hypervisor's view of the guest PSTATE).
    pub const DIT_EL2: u64 = 1 << 24;
    /// DIT in an AArch32 SPSR/CPSR (the guest's view).
    pub const DIT_AA32: u64 = 1 << 21;
    /// J in an AArch32 SPSR (RES0 from Armv8).
    pub const J_AA32: u64 = 1 << 24;
    pub const SSBS: u64 = 1 << 23;
    pub const PAN: u64 = 1 << 22;
    /// Software step, SPSR_EL2 only.
    pub const SS: u64 = 1 << 21;
    pub const IL: u64 = 1 << 20;
    pub const GE: u64 = 0xf << 16;
    pub const E: u64 = 1 << 9;
    pub const A: u64 = 1 << 8;
    pub const I: u64 = 1 << 7;
    pub const F: u64 = 1 << 6;
    pub const T: u64 = 1 << 5;
    pub const M: u64 = 0x1f;
}

/// SCTLR (AArch32) bits that shape exception entry.
pub mod sctlr {
    /// High exception vectors (0xFFFF_0000).
    pub const V: u32 = 1 << 13;
    /// Set PAN on exception entry when clear (FEAT_PAN; RES1 without it).
    pub const SPAN: u32 = 1 << 23;
    /// Exception endianness: CPSR.E on entry.
    pub const EE: u32 = 1 << 25;
    /// Thumb exception entry: CPSR.T on entry.
    pub const TE: u32 = 1 << 30;
    /// CPSR.SSBS on entry (FEAT_SSBS).
    pub const DSSBS: u32 = 1 << 31;
}

/// An exception taken to an AArch32 EL1 mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exception {
    Undefined,
    Svc,
    PrefetchAbort,
    DataAbort,
    Irq,
    Fiq,
}

impl Exception {
    /// The mode the exception enters.
    pub const fn mode(self) -> Mode {
        match self {
            Exception::Undefined => Mode::Und,
            Exception::Svc => Mode::Svc,
            Exception::PrefetchAbort | Exception::DataAbort => Mode::Abt,
            Exception::Irq => Mode::Irq,
            Exception::Fiq => Mode::Fiq,
        }
    }

    /// The vector's offset from the vector base.
    pub const fn vector_offset(self) -> u32 {
        match self {
            Exception::Undefined => 0x04,
            Exception::Svc => 0x08,
            Exception::PrefetchAbort => 0x0c,
            Exception::DataAbort => 0x10,
            Exception::Irq => 0x18,
            Exception::Fiq => 0x1c,
        }
    }

    /// What the LR holds beyond the preferred return address, from A32
    /// (`thumb` false) or T32 state.
    pub const fn lr_offset(self, thumb: bool) -> u32 {
        match self {
            Exception::Undefined if thumb => 2,
            Exception::Undefined => 4,
            Exception::Svc => 0,
            Exception::PrefetchAbort | Exception::Irq | Exception::Fiq => 4,
            Exception::DataAbort => 8,
        }
    }
}

/// Where the saved SPSR of a mode lives in the AArch64 register file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpsrReg {
    /// SPSR_svc is SPSR_EL1.
    El1,
    Abt,
    Und,
    Irq,
    Fiq,
}

impl SpsrReg {
    /// The banked SPSR of `mode` (none for usr and sys).
    pub const fn of(mode: Mode) -> Option<SpsrReg> {
        Some(match mode {
            Mode::Svc => SpsrReg::El1,
            Mode::Abt => SpsrReg::Abt,
            Mode::Und => SpsrReg::Und,
            Mode::Irq => SpsrReg::Irq,
            Mode::Fiq => SpsrReg::Fiq,
            _ => return None,
        })
    }
}

/// The state after taking an exception to AArch32 EL1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub mode: Mode,
    /// The new PC: the vector.
    pub pc: u32,
    /// The new PSTATE, SPSR_EL2 layout (what to return to with ERET).
    pub cpsr: u64,
    /// The value for the banked LR of `mode`.
    pub lr: u32,
    /// The X register holding that LR (`regs::lr_of`).
    pub lr_x: u8,
    /// The value for the banked SPSR of `mode`: the old CPSR, AArch32 layout.
    pub spsr: u32,
    pub spsr_reg: SpsrReg,
}

/// The AArch32 SPSR view (DIT at bit 21, J at 24 zero) of a PSTATE held
/// in SPSR_EL2 layout (DIT at 24, SS at 21). Linux: `host_spsr_to_spsr32`.
pub const fn spsr_el2_to_aarch32(spsr: u64) -> u32 {
    let dit = spsr & psr::DIT_EL2 != 0;
    let v = spsr & !(psr::DIT_EL2 | psr::SS);
    (if dit { v | psr::DIT_AA32 } else { v }) as u32
}

/// The SPSR_EL2 layout of an AArch32 SPSR value (what an exception return
/// from `SPSR_<mode>` restores; SS clear).
pub const fn aarch32_to_spsr_el2(spsr: u32) -> u64 {
    let spsr = spsr as u64;
    let dit = spsr & psr::DIT_AA32 != 0;
    let v = spsr & !(psr::J_AA32 | psr::DIT_AA32);
    if dit {
        v | psr::DIT_EL2
    } else {
        v
    }
}

/// Takes exception `exc` for a guest whose PSTATE is `cpsr` (SPSR_EL2
/// layout), with `preferred_return` the preferred return address (see the
/// module table) and the guest's SCTLR and VBAR.
pub const fn enter(
    exc: Exception,
    cpsr: u64,
    preferred_return: u32,
    sctlr: u32,
    vbar: u32,
) -> Entry {
    let mode = exc.mode();
    let thumb = cpsr & psr::T != 0;

    // Kept: NZCV, Q, GE, DIT; A and F unless the exception sets them; PAN
    // unless SCTLR.SPAN is clear. Cleared: IT, IL, SS (and J).
    let mut new = cpsr & (psr::N | psr::Z | psr::C | psr::V | psr::Q | psr::GE | psr::DIT_EL2);
    new |= cpsr & (psr::A | psr::F | psr::PAN);
    if sctlr & sctlr::SPAN == 0 {
        new |= psr::PAN;
    }
    if sctlr & sctlr::DSSBS != 0 {
        new |= psr::SSBS;
    }
    if sctlr & sctlr::EE != 0 {
        new |= psr::E;
    }
    if !matches!(exc, Exception::Undefined | Exception::Svc) {
        new |= psr::A;
    }
    new |= psr::I;
    if matches!(exc, Exception::Fiq) {
        new |= psr::F;
    }
    if sctlr & sctlr::TE != 0 {
        new |= psr::T;
    }
    new |= mode.bits() as u64;
    debug_assert!(new & PSR_IT_MASK == 0);

    let base = if sctlr & sctlr::V != 0 {
        0xffff_0000
    } else {
        vbar & !0x1f
    };
    let (lr_x, spsr_reg) = match mode {
        Mode::Und => (22, SpsrReg::Und),
        Mode::Svc => (18, SpsrReg::El1),
        Mode::Abt => (20, SpsrReg::Abt),
        Mode::Irq => (16, SpsrReg::Irq),
        _ => (30, SpsrReg::Fiq),
    };
    Entry {
        mode,
        pc: base.wrapping_add(exc.vector_offset()),
        cpsr: new,
        lr: preferred_return.wrapping_add(exc.lr_offset(thumb)),
        lr_x,
        spsr: spsr_el2_to_aarch32(cpsr),
        spsr_reg,
    }
}

/// The DFSR/IFSR format, chosen by TTBCR.EAE (bit 31): the
/// short-descriptor format without LPAE translation tables, the
/// long-descriptor format with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FsrFormat {
    Short,
    Long,
}

impl FsrFormat {
    /// The format the guest's TTBCR (TCR_EL1[31:0]) selects.
    pub const fn of_ttbcr(ttbcr: u32) -> FsrFormat {
        if ttbcr & (1 << 31) != 0 {
            FsrFormat::Long
        } else {
            FsrFormat::Short
        }
    }
}

/// The fault an injected abort reports. Levels are translation table
/// levels: 1-2 in the short-descriptor format (section, page), 1-3 in the
/// long-descriptor one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    Alignment,
    Debug,
    Translation {
        level: u8,
    },
    AccessFlag {
        level: u8,
    },
    /// Short-descriptor format only.
    Domain {
        level: u8,
    },
    Permission {
        level: u8,
    },
    /// A synchronous external abort, not on a table walk: what kestrel
    /// gives for an access to nothing.
    SyncExternal,
    SyncExternalOnWalk {
        level: u8,
    },
    TlbConflict,
}

/// DFSR.LPAE / IFSR.LPAE: the long-descriptor format.
pub const FSR_LPAE: u32 = 1 << 9;
/// DFSR.WnR: the abort was on a write.
pub const DFSR_WNR: u32 = 1 << 11;

/// The fault status code: FS[4:0] (short) or STATUS[5:0] (long).
const fn status(fault: Fault, format: FsrFormat) -> Option<u32> {
    Some(match format {
        FsrFormat::Short => match fault {
            Fault::Alignment => 0b00001,
            Fault::Debug => 0b00010,
            Fault::AccessFlag { level: 1 } => 0b00011,
            Fault::AccessFlag { level: 2 } => 0b00110,
            Fault::Translation { level: 1 } => 0b00101,
            Fault::Translation { level: 2 } => 0b00111,
            Fault::SyncExternal => 0b01000,
            Fault::Domain { level: 1 } => 0b01001,
            Fault::Domain { level: 2 } => 0b01011,
            Fault::SyncExternalOnWalk { level: 1 } => 0b01100,
            Fault::SyncExternalOnWalk { level: 2 } => 0b01110,
            Fault::Permission { level: 1 } => 0b01101,
            Fault::Permission { level: 2 } => 0b01111,
            Fault::TlbConflict => 0b10000,
            _ => return None,
        },
        FsrFormat::Long => match fault {
            Fault::Translation { level: l @ 1..=3 } => 0b000100 | l as u32,
            Fault::AccessFlag { level: l @ 1..=3 } => 0b001000 | l as u32,
            Fault::Permission { level: l @ 1..=3 } => 0b001100 | l as u32,
            Fault::SyncExternal => 0b010000,
            Fault::SyncExternalOnWalk { level: l @ 1..=3 } => 0b010100 | l as u32,
            Fault::Alignment => 0b100001,
            Fault::Debug => 0b100010,
            Fault::TlbConflict => 0b110000,
            _ => return None,
        },
    })
}

/// The IFSR of a prefetch abort (it goes to IFSR32_EL2): short format
/// FS[3:0] at [3:0] and FS[4] at bit 10; long format STATUS at [5:0] and
/// LPAE set. `None`: the fault has no encoding in that format (a domain
/// fault in the long format, a level the format lacks).
pub const fn ifsr(fault: Fault, format: FsrFormat) -> Option<u32> {
    let Some(fs) = status(fault, format) else {
        return None;
    };
    Some(match format {
        FsrFormat::Short => (fs & 0xf) | ((fs & 0x10) << 6),
        FsrFormat::Long => fs | FSR_LPAE,
    })
}

/// The DFSR of a data abort (it goes to ESR_EL1[31:0]): the IFSR fields
/// plus WnR (`write`). The Domain field (short format) is 0.
pub const fn dfsr(fault: Fault, format: FsrFormat, write: bool) -> Option<u32> {
    let Some(fsr) = ifsr(fault, format) else {
        return None;
    };
    Some(if write { fsr | DFSR_WNR } else { fsr })
}

/// FAR_EL1 with the DFAR (FAR_EL1[31:0]) of a data abort at `va`.
pub const fn far_with_dfar(far_el1: u64, va: u32) -> u64 {
    (far_el1 & 0xffff_ffff_0000_0000) | va as u64
}

/// FAR_EL1 with the IFAR (FAR_EL1[63:32]) of a prefetch abort at `va`.
pub const fn far_with_ifar(far_el1: u64, va: u32) -> u64 {
    (far_el1 & 0xffff_ffff) | ((va as u64) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::arm64::aarch32::cond::with_it_state;
    use crate::guest::arm64::aarch32::regs;

    /// KVM's VCPU_RESET_PSTATE_SVC: svc mode, A, I and F masked.
    const SVC_MASKED: u64 = 0x1d3;
    /// usr mode, nothing masked, Z and C set.
    const USR: u64 = 0x6000_0010;

    #[test]
    fn undefined_from_arm_and_thumb() {
        // SCTLR.SPAN is RES1 without FEAT_PAN: PAN stays as it was.
        let e = enter(Exception::Undefined, USR, 0x8000, sctlr::SPAN, 0x8000_0000);
        assert_eq!(e.mode, Mode::Und);
        assert_eq!(e.pc, 0x8000_0004);
        assert_eq!(e.lr, 0x8004, "A32: +4");
        assert_eq!(e.lr_x, 22, "LR_und");
        assert_eq!(e.spsr_reg, SpsrReg::Und);
        assert_eq!(e.spsr, 0x6000_0010);
        // N Z C V kept, I set, A and F kept (clear), mode und, A32.
        assert_eq!(e.cpsr, 0x6000_0000 | psr::I | 0x1b);
        let t = enter(Exception::Undefined, USR | psr::T, 0x8000, sctlr::SPAN, 0);
        assert_eq!(t.lr, 0x8002, "T32: +2");
        assert_eq!(t.cpsr & psr::T, 0, "SCTLR.TE clear: A32 handler");
    }

    /// KVM's `return_offsets`: und {4, 2}, prefetch abort {4, 4}, data
    /// abort {8, 8}; QEMU's: SVC 0, IRQ and FIQ 4.
    #[test]
    fn lr_offsets_match_kvm_and_qemu() {
        let all = [
            (Exception::Undefined, 4, 2),
            (Exception::Svc, 0, 0),
            (Exception::PrefetchAbort, 4, 4),
            (Exception::DataAbort, 8, 8),
            (Exception::Irq, 4, 4),
            (Exception::Fiq, 4, 4),
        ];
        for (exc, arm, thumb) in all {
            assert_eq!(
                (exc.lr_offset(false), exc.lr_offset(true)),
                (arm, thumb),
                "{exc:?}"
            );
            let e = enter(exc, USR, 0x1000, 0, 0);
            assert_eq!(e.lr, 0x1000 + arm);
            assert_eq!(Some(e.lr_x), regs::lr_of(e.mode), "{exc:?}");
            assert_eq!(SpsrReg::of(e.mode), Some(e.spsr_reg));
        }
    }

    #[test]
    fn vectors_low_vbar_and_high() {
        let offsets = [
            (Exception::Undefined, 0x04),
            (Exception::Svc, 0x08),
            (Exception::PrefetchAbort, 0x0c),
            (Exception::DataAbort, 0x10),
            (Exception::Irq, 0x18),
            (Exception::Fiq, 0x1c),
        ];
        for (exc, off) in offsets {
            assert_eq!(enter(exc, USR, 0, 0, 0xc000_8000).pc, 0xc000_8000 + off);
            assert_eq!(
                enter(exc, USR, 0, sctlr::V, 0xc000_8000).pc,
                0xffff_0000 + off
            );
            // VBAR[4:0] are RES0.
            assert_eq!(enter(exc, USR, 0, 0, 0xc000_801f).pc, 0xc000_8000 + off);
        }
    }

    #[test]
    fn masks_per_exception() {
        let bits = |exc| enter(exc, USR, 0, 0, 0).cpsr & (psr::A | psr::I | psr::F);
        assert_eq!(bits(Exception::Undefined), psr::I);
        assert_eq!(bits(Exception::Svc), psr::I);
        assert_eq!(bits(Exception::PrefetchAbort), psr::A | psr::I);
        assert_eq!(bits(Exception::DataAbort), psr::A | psr::I);
        assert_eq!(bits(Exception::Irq), psr::A | psr::I);
        assert_eq!(bits(Exception::Fiq), psr::A | psr::I | psr::F);
        // Already-set masks stay set.
        let e = enter(Exception::Svc, SVC_MASKED, 0, 0, 0);
        assert_eq!(e.cpsr & 0x1ff, SVC_MASKED & 0x1ff);
    }

    #[test]
    fn sctlr_te_ee_span_dssbs_and_cleared_state() {
        // From a T32 IT block with SS and IL set.
        let old = USR | psr::T | psr::SS | psr::IL | with_it_state(0, 0x3c) | psr::GE | psr::Q;
        let s = sctlr::TE | sctlr::EE | sctlr::DSSBS;
        let e = enter(Exception::DataAbort, old, 0x2000, s, 0);
        assert_eq!(e.cpsr & PSR_IT_MASK, 0, "IT cleared");
        assert_eq!(e.cpsr & (psr::IL | psr::SS), 0);
        assert_ne!(e.cpsr & psr::T, 0, "TE: T32 handler");
        assert_ne!(e.cpsr & psr::E, 0, "EE: big-endian handler");
        assert_ne!(e.cpsr & psr::SSBS, 0);
        assert_ne!(e.cpsr & psr::PAN, 0, "SPAN clear sets PAN");
        assert_eq!(e.cpsr & (psr::GE | psr::Q), psr::GE | psr::Q);
        // The SPSR keeps the IT state (the handler returns into the block)
        // and drops SS.
        assert_eq!(u64::from(e.spsr) & PSR_IT_MASK, with_it_state(0, 0x3c));
        assert_eq!(
            u64::from(e.spsr) & psr::DIT_AA32,
            0,
            "bit 21 was SS, not DIT"
        );
        // SPAN set: PAN kept as it was (clear).
        let e = enter(Exception::Irq, USR, 0, sctlr::SPAN, 0);
        assert_eq!(e.cpsr & psr::PAN, 0);
    }

    /// Linux `host_spsr_to_spsr32`: DIT moves from bit 24 to bit 21, SS
    /// (bit 21 of SPSR_EL2) is dropped.
    #[test]
    fn spsr_layouts() {
        assert_eq!(spsr_el2_to_aarch32(psr::DIT_EL2 | 0x13), 0x0020_0013);
        assert_eq!(spsr_el2_to_aarch32(psr::SS | 0x13), 0x13);
        assert_eq!(aarch32_to_spsr_el2(0x0020_0013), psr::DIT_EL2 | 0x13);
        assert_eq!(aarch32_to_spsr_el2(0x0100_0013), 0x13, "J is RES0");
        for v in [0u32, 0xffff_ffff, 0xf9ff_fdff, 0x0020_01d3] {
            let back = spsr_el2_to_aarch32(aarch32_to_spsr_el2(v));
            assert_eq!(back, v & !(psr::J_AA32 as u32));
        }
        let e = enter(Exception::Svc, psr::DIT_EL2 | 0x10, 0, 0, 0);
        assert_ne!(e.cpsr & psr::DIT_EL2, 0, "DIT kept");
        assert_eq!(e.spsr, 0x0020_0010);
    }

    /// KVM `inject_abt32`: an external abort is DFSR_LPAE |
    /// DFSR_FSC_EXTABT_LPAE (0x210) with LPAE tables, DFSR_FSC_EXTABT_nLPAE
    /// (0x8) without; DFAR in FAR_EL1[31:0], IFAR in FAR_EL1[63:32].
    #[test]
    fn external_abort_fault_status_matches_kvm() {
        let short = FsrFormat::of_ttbcr(0);
        let long = FsrFormat::of_ttbcr(0x8000_0000);
        assert_eq!(dfsr(Fault::SyncExternal, long, false), Some(0x210));
        assert_eq!(dfsr(Fault::SyncExternal, short, false), Some(0x8));
        assert_eq!(ifsr(Fault::SyncExternal, long), Some(0x210));
        assert_eq!(dfsr(Fault::SyncExternal, short, true), Some(0x808));
        assert_eq!(
            far_with_dfar(0x1111_2222_3333_4444, 0xdead_beef),
            0x1111_2222_dead_beef
        );
        assert_eq!(
            far_with_ifar(0x1111_2222_3333_4444, 0xdead_beef),
            0xdead_beef_3333_4444
        );
    }

    /// Linux's fsr-2level.c and fsr-3level.c tables index the status codes:
    /// short FS 5 "section translation fault", 7 "page translation
    /// fault", 13/15 permission (FS[4] at bit 10); long 5-7 "level 1-3
    /// translation fault", 33 "alignment fault".
    #[test]
    fn fault_status_codes_match_linux_tables() {
        use Fault::*;
        let s = FsrFormat::Short;
        let l = FsrFormat::Long;
        assert_eq!(dfsr(Translation { level: 1 }, s, false), Some(5));
        assert_eq!(dfsr(Translation { level: 2 }, s, false), Some(7));
        assert_eq!(dfsr(Permission { level: 1 }, s, false), Some(13));
        assert_eq!(dfsr(Permission { level: 2 }, s, false), Some(15));
        assert_eq!(dfsr(Domain { level: 2 }, s, false), Some(11));
        assert_eq!(dfsr(AccessFlag { level: 1 }, s, false), Some(3));
        assert_eq!(dfsr(Alignment, s, false), Some(1));
        assert_eq!(
            dfsr(TlbConflict, s, false),
            Some(1 << 10),
            "FS[4] at bit 10"
        );
        assert_eq!(ifsr(Translation { level: 3 }, s), None, "no level 3");
        assert_eq!(
            dfsr(Domain { level: 1 }, l, false),
            None,
            "no domains with LPAE"
        );
        for level in 1..=3 {
            assert_eq!(
                ifsr(Translation { level }, l),
                Some(FSR_LPAE | (4 + level as u32))
            );
            assert_eq!(
                ifsr(AccessFlag { level }, l),
                Some(FSR_LPAE | (8 + level as u32))
            );
            assert_eq!(
                ifsr(Permission { level }, l),
                Some(FSR_LPAE | (12 + level as u32))
            );
        }
        assert_eq!(dfsr(Alignment, l, true), Some(FSR_LPAE | DFSR_WNR | 33));
        assert_eq!(ifsr(Translation { level: 0 }, l), None);
    }
}
