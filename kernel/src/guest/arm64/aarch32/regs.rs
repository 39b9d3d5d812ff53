//! AArch32 processor modes and where their registers live in the AArch64
//! register file (Arm ARM "Mapping of the general-purpose registers between
//! the Execution states": R0-R12, the banked SP/LR and the FIQ R8-R12 are
//! X0-X30 of the AArch64 view; the PC has no X register).
//!
//! | mode | R0-R7 | R8-R12 | SP (R13) | LR (R14) |
//! |---|---|---|---|---|
//! | usr, sys | X0-X7 | X8-X12 | X13 | X14 |
//! | hyp | X0-X7 | X8-X12 | X15 | X14 |
//! | irq | X0-X7 | X8-X12 | X17 | X16 |
//! | svc | X0-X7 | X8-X12 | X19 | X18 |
//! | abt | X0-X7 | X8-X12 | X21 | X20 |
//! | und | X0-X7 | X8-X12 | X23 | X22 |
//! | fiq | X0-X7 | X24-X28 | X29 | X30 |
//!
//! (Linux's `compat_*` register names in arch/arm64/include/asm/ptrace.h;
//! QEMU's `aarch64_regnum`.) Monitor mode (EL3) has no mapping for its SP
//! and LR; a guest (EL1/EL0) can be in neither Monitor nor Hyp mode.
//!
//! Note: the Rt, Rt2 and Rn fields of a trapped MCR/MRC/MCRR/MRRC/LDC/STC
//! and the SRT of a data abort are reported in ESR_EL2 already in the
//! AArch64 view (an X register number): [`map`] is for the registers the
//! hypervisor finds itself, such as the banked LR of an exception it
//! injects, or an operand of an instruction it decodes from memory.

use core::fmt;

/// An AArch32 processor mode (PSTATE.M[4:0]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Usr,
    Fiq,
    Irq,
    Svc,
    Mon,
    Abt,
    Hyp,
    Und,
    Sys,
}

/// Why an SPSR names no AArch32 mode a guest can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeError {
    /// M[4] is clear: the SPSR describes AArch64 state.
    NotAarch32 { m: u8 },
    /// M[4:0] is a reserved AArch32 mode encoding.
    Reserved { m: u8 },
    /// A mode of EL2 or EL3 (Hyp, Monitor), which a guest never runs in.
    NotGuest(Mode),
}

impl fmt::Display for ModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ModeError::NotAarch32 { m } => write!(f, "M[4:0] {m:#04x} is AArch64 state"),
            ModeError::Reserved { m } => write!(f, "M[4:0] {m:#04x} is a reserved AArch32 mode"),
            ModeError::NotGuest(mode) => write!(f, "{mode:?} mode is not an EL1/EL0 mode"),
        }
    }
}

impl Mode {
    /// The M[4:0] encoding.
    pub const fn bits(self) -> u8 {
        match self {
            Mode::Usr => 0x10,
            Mode::Fiq => 0x11,
            Mode::Irq => 0x12,
            Mode::Svc => 0x13,
            Mode::Mon => 0x16,
            Mode::Abt => 0x17,
            Mode::Hyp => 0x1a,
            Mode::Und => 0x1b,
            Mode::Sys => 0x1f,
        }
    }

    /// The mode M[4:0] = `m` names (bits above 4 are ignored).
    pub const fn from_bits(m: u8) -> Result<Mode, ModeError> {
        let m = m & 0x1f;
        Ok(match m {
            0x10 => Mode::Usr,
            0x11 => Mode::Fiq,
            0x12 => Mode::Irq,
            0x13 => Mode::Svc,
            0x16 => Mode::Mon,
            0x17 => Mode::Abt,
            0x1a => Mode::Hyp,
            0x1b => Mode::Und,
            0x1f => Mode::Sys,
            _ if m & 0x10 == 0 => return Err(ModeError::NotAarch32 { m }),
            _ => return Err(ModeError::Reserved { m }),
        })
    }

    /// The mode of a guest (EL1 or EL0) whose saved PSTATE is `spsr`
    /// (SPSR_EL2): Hyp and Monitor are refused, like AArch64 state and the
    /// reserved encodings.
    pub const fn of_guest(spsr: u64) -> Result<Mode, ModeError> {
        match Mode::from_bits(spsr as u8) {
            Ok(mode @ (Mode::Hyp | Mode::Mon)) => Err(ModeError::NotGuest(mode)),
            other => other,
        }
    }

    /// The Exception level the mode runs at (usr: 0; Hyp: 2; Monitor: 3;
    /// the others: 1, with EL3 in AArch64).
    pub const fn el(self) -> u8 {
        match self {
            Mode::Usr => 0,
            Mode::Hyp => 2,
            Mode::Mon => 3,
            _ => 1,
        }
    }
}

/// An AArch32 register in the AArch64 view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reg64 {
    /// General register Xn (0-30).
    X(u8),
    /// R15: the PC (ELR_EL2 while the guest is trapped).
    Pc,
}

/// Why an AArch32 register has no AArch64 view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegError {
    /// The mode is not one the guest can be in.
    Mode(ModeError),
    /// Not R0-R15.
    NoSuchRegister(u8),
    /// Monitor mode's SP and LR are not mapped to X registers.
    Unmapped { mode: Mode, r: u8 },
}

/// X register of banked SP and LR per mode: (SP, LR).
const fn banked_sp_lr(mode: Mode) -> Option<(u8, u8)> {
    Some(match mode {
        Mode::Usr | Mode::Sys => (13, 14),
        Mode::Hyp => (15, 14),
        Mode::Irq => (17, 16),
        Mode::Svc => (19, 18),
        Mode::Abt => (21, 20),
        Mode::Und => (23, 22),
        Mode::Fiq => (29, 30),
        Mode::Mon => return None,
    })
}

/// The AArch64 view of AArch32 register `r` (0-15) in `mode`.
pub const fn map(mode: Mode, r: u8) -> Result<Reg64, RegError> {
    match r {
        0..=7 => Ok(Reg64::X(r)),
        8..=12 if matches!(mode, Mode::Fiq) => Ok(Reg64::X(r + 16)),
        8..=12 => Ok(Reg64::X(r)),
        13 | 14 => match banked_sp_lr(mode) {
            Some((sp, lr)) => Ok(Reg64::X(if r == 13 { sp } else { lr })),
            None => Err(RegError::Unmapped { mode, r }),
        },
        15 => Ok(Reg64::Pc),
        _ => Err(RegError::NoSuchRegister(r)),
    }
}

/// The AArch64 view of register `r` for a guest whose saved PSTATE is
/// `spsr`: [`map`] in the guest's current mode ([`Mode::of_guest`]).
pub const fn guest_reg(spsr: u64, r: u8) -> Result<Reg64, RegError> {
    match Mode::of_guest(spsr) {
        Ok(mode) => map(mode, r),
        Err(e) => Err(RegError::Mode(e)),
    }
}

/// The inverse of [`map`]: which AArch32 register X`x` is in `mode`
/// (`None`: none, the X register is another mode's banked copy or not
/// part of the AArch32 state).
pub const fn aarch32_reg(mode: Mode, x: u8) -> Option<u8> {
    match x {
        0..=7 => Some(x),
        8..=12 if matches!(mode, Mode::Fiq) => None,
        8..=12 => Some(x),
        24..=28 if matches!(mode, Mode::Fiq) => Some(x - 16),
        _ => match banked_sp_lr(mode) {
            Some((sp, _)) if sp == x => Some(13),
            Some((_, lr)) if lr == x => Some(14),
            _ => None,
        },
    }
}

/// The X register a trap syndrome's register field (a data abort's SRT,
/// a coprocessor access's Rt/Rt2) names, for a guest whose saved PSTATE
/// is `spsr`. The Arm ARM reports it in the AArch64 view, which this
/// returns unchanged when the guest's mode can name that X register.
/// QEMU's TCG reports the AArch32 register number instead (13 for the SP
/// of irq mode, 8 for R8 of fiq mode): a field the mode cannot name in the
/// AArch64 view (an AArch64-view value is never one of those, since the
/// mode only sees its own banked registers) is taken as that number and
/// mapped. `None`: neither (the PC, a register no mode of a guest has).
pub const fn trap_reg(spsr: u64, field: u8) -> Option<u8> {
    let mode = match Mode::of_guest(spsr) {
        Ok(m) => m,
        Err(_) => return if field < 31 { Some(field) } else { None },
    };
    if aarch32_reg(mode, field).is_some() {
        return Some(field);
    }
    match map(mode, field) {
        Ok(Reg64::X(x)) => Some(x),
        _ => None,
    }
}

/// The banked LR of the mode an exception enters (where the hypervisor
/// writes the return address when it injects one).
pub const fn lr_of(mode: Mode) -> Option<u8> {
    match banked_sp_lr(mode) {
        Some((_, lr)) => Some(lr),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trap_registers_in_either_view() {
        const IRQ: u64 = 0x1d2;
        const FIQ: u64 = 0x1d1;
        const SVC: u64 = 0x1d3;
        const USR: u64 = 0x10;
        // The Arm ARM's AArch64 view passes unchanged.
        assert_eq!(trap_reg(IRQ, 17), Some(17));
        assert_eq!(trap_reg(IRQ, 16), Some(16));
        assert_eq!(trap_reg(FIQ, 24), Some(24));
        assert_eq!(trap_reg(FIQ, 30), Some(30));
        assert_eq!(trap_reg(SVC, 19), Some(19));
        assert_eq!(trap_reg(USR, 13), Some(13));
        assert_eq!(trap_reg(IRQ, 5), Some(5));
        // QEMU's AArch32 numbers are mapped.
        assert_eq!(trap_reg(IRQ, 13), Some(17));
        assert_eq!(trap_reg(IRQ, 14), Some(16));
        assert_eq!(trap_reg(FIQ, 8), Some(24));
        assert_eq!(trap_reg(FIQ, 12), Some(28));
        assert_eq!(trap_reg(FIQ, 14), Some(30));
        assert_eq!(trap_reg(SVC, 13), Some(19));
        // Another mode's banked register, or the PC: nothing.
        assert_eq!(trap_reg(SVC, 17), None);
        assert_eq!(trap_reg(SVC, 15), None);
        assert_eq!(trap_reg(USR, 31), None);
        // Every field in every guest mode: an X register the mode can name.
        for mode in GUEST_MODES {
            let spsr = 0x1c0 | u64::from(mode.bits());
            for f in 0..32u8 {
                if let Some(x) = trap_reg(spsr, f) {
                    assert!(aarch32_reg(mode, x).is_some(), "{mode:?} {f} -> X{x}");
                }
            }
        }
    }

    const GUEST_MODES: [Mode; 7] = [
        Mode::Usr,
        Mode::Fiq,
        Mode::Irq,
        Mode::Svc,
        Mode::Abt,
        Mode::Und,
        Mode::Sys,
    ];

    fn x(mode: Mode, r: u8) -> u8 {
        match map(mode, r) {
            Ok(Reg64::X(n)) => n,
            other => panic!("{mode:?} r{r}: {other:?}"),
        }
    }

    /// The banked registers as Linux names them (`compat_lr_irq` = regs[16],
    /// `compat_sp_irq` = regs[17], ... `compat_r8_fiq` = regs[24] ..
    /// `compat_lr_fiq` = regs[30]).
    #[test]
    fn banked_registers_match_linux_compat_names() {
        assert_eq!((x(Mode::Usr, 13), x(Mode::Usr, 14)), (13, 14));
        assert_eq!((x(Mode::Sys, 13), x(Mode::Sys, 14)), (13, 14));
        assert_eq!((x(Mode::Hyp, 13), x(Mode::Hyp, 14)), (15, 14));
        assert_eq!((x(Mode::Irq, 14), x(Mode::Irq, 13)), (16, 17));
        assert_eq!((x(Mode::Svc, 14), x(Mode::Svc, 13)), (18, 19));
        assert_eq!((x(Mode::Abt, 14), x(Mode::Abt, 13)), (20, 21));
        assert_eq!((x(Mode::Und, 14), x(Mode::Und, 13)), (22, 23));
        let fiq: [u8; 7] = core::array::from_fn(|i| x(Mode::Fiq, 8 + i as u8));
        assert_eq!(fiq, [24, 25, 26, 27, 28, 29, 30]);
        for mode in GUEST_MODES {
            for r in 0..8 {
                assert_eq!(x(mode, r), r, "R0-R7 are never banked");
            }
            assert_eq!(map(mode, 15), Ok(Reg64::Pc));
            assert_eq!(map(mode, 16), Err(RegError::NoSuchRegister(16)));
        }
        assert_eq!(x(Mode::Svc, 8), 8);
        assert_eq!(
            map(Mode::Mon, 13),
            Err(RegError::Unmapped {
                mode: Mode::Mon,
                r: 13
            })
        );
        assert_eq!(map(Mode::Mon, 12), Ok(Reg64::X(12)));
    }

    #[test]
    fn modes_decode_and_reserved_ones_are_errors() {
        for mode in GUEST_MODES.into_iter().chain([Mode::Hyp, Mode::Mon]) {
            assert_eq!(Mode::from_bits(mode.bits()), Ok(mode));
        }
        for m in [0x14, 0x15, 0x18, 0x19, 0x1c, 0x1d, 0x1e] {
            assert_eq!(Mode::from_bits(m), Err(ModeError::Reserved { m }));
        }
        // EL1h (AArch64) is not an AArch32 mode.
        assert_eq!(Mode::of_guest(0x3c5), Err(ModeError::NotAarch32 { m: 5 }));
        assert_eq!(Mode::of_guest(0x1d3), Ok(Mode::Svc));
        assert_eq!(Mode::of_guest(0x1da), Err(ModeError::NotGuest(Mode::Hyp)));
        assert_eq!(Mode::of_guest(0x16), Err(ModeError::NotGuest(Mode::Mon)));
        assert_eq!(
            guest_reg(0x1da, 13),
            Err(RegError::Mode(ModeError::NotGuest(Mode::Hyp)))
        );
        assert_eq!(guest_reg(0x1d3, 13), Ok(Reg64::X(19)), "SP_svc");
        assert_eq!(guest_reg(0x1d1, 9), Ok(Reg64::X(25)), "R9_fiq");
        assert_eq!((Mode::Usr.el(), Mode::Svc.el(), Mode::Hyp.el()), (0, 1, 2));
    }

    /// Within one mode, R0-R14 land on 15 distinct X registers, and
    /// `aarch32_reg` finds each one back.
    #[test]
    fn mapping_is_one_to_one_and_inverts() {
        for mode in GUEST_MODES.into_iter().chain([Mode::Hyp]) {
            let mut seen = 0u32;
            for r in 0..15 {
                let n = x(mode, r);
                assert!(n < 31);
                assert_eq!(seen & (1 << n), 0, "{mode:?}: X{n} twice");
                seen |= 1 << n;
                assert_eq!(aarch32_reg(mode, n), Some(r), "{mode:?} X{n}");
            }
            for n in 0..32 {
                if seen & (1 << n) == 0 {
                    assert_eq!(aarch32_reg(mode, n), None, "{mode:?} X{n}");
                }
            }
        }
        assert_eq!(lr_of(Mode::Und), Some(22));
        assert_eq!(lr_of(Mode::Mon), None);
    }
}
