//! Condition codes and the IT state of an AArch32 guest, and stepping over
//! a trapped AArch32 instruction.
//!
//! Arm ARM (DDI 0487) references: `ConditionHolds` (shared pseudocode),
//! "The ITSTATE" and `AArch32.ITAdvance` (the IT bits in the SPSR), and the
//! CV/COND fields of ESR_EL2 for the conditional exception classes.
//!
//! Every function here takes the guest's PSTATE as the hypervisor holds it:
//! the SPSR_EL2 value saved when the guest trapped (AArch32 layout as seen
//! from AArch64: N Z C V at [31:28], IT[1:0] at [26:25], IT[7:2] at [15:10],
//! T at [5], M[4:0] at [4:0]).

/// The "always" condition, and the one a trapped unconditional A32
/// instruction reports.
pub const COND_AL: u8 = 0xe;

/// PSTATE.T: T32 (Thumb) state.
pub const PSR_T: u64 = 1 << 5;
/// IT[1:0] in the SPSR (bits [26:25]).
const IT_LO_SHIFT: u32 = 25;
/// IT[7:2] in the SPSR (bits [15:10]).
const IT_HI_SHIFT: u32 = 10;
/// Every IT bit of the SPSR.
pub const PSR_IT_MASK: u64 = (0b11 << IT_LO_SHIFT) | (0x3f << IT_HI_SHIFT);

/// The NZCV flags of `spsr` as a 4-bit value (N = 8, Z = 4, C = 2, V = 1).
pub const fn nzcv(spsr: u64) -> u8 {
    ((spsr >> 28) & 0xf) as u8
}

/// `ConditionHolds(cond)` for the flags `nzcv` (N = 8, Z = 4, C = 2, V = 1).
///
/// `cond` is the 4-bit condition field (higher bits are ignored): EQ NE CS
/// CC MI PL VS VC HI LS GE LT GT LE AL, and 0b1111, which the pseudocode
/// treats like AL (it selects the unconditional A32 space; no trapped
/// instruction reports it, the ESR uses 0b1110 for unconditional ones).
pub const fn condition_passed(cond: u8, nzcv: u8) -> bool {
    let n = nzcv & 8 != 0;
    let z = nzcv & 4 != 0;
    let c = nzcv & 2 != 0;
    let v = nzcv & 1 != 0;
    let cond = cond & 0xf;
    let base = match cond >> 1 {
        0 => z,            // EQ / NE
        1 => c,            // CS / CC
        2 => n,            // MI / PL
        3 => v,            // VS / VC
        4 => c && !z,      // HI / LS
        5 => n == v,       // GE / LT
        6 => n == v && !z, // GT / LE
        _ => true,         // AL (and 0b1111)
    };
    if cond & 1 == 1 && cond != 0xf {
        !base
    } else {
        base
    }
}

/// IT[7:0] of `spsr` (IT[1:0] from bits [26:25], IT[7:2] from [15:10]).
pub const fn it_state(spsr: u64) -> u8 {
    (((spsr >> IT_LO_SHIFT) & 0b11) | (((spsr >> IT_HI_SHIFT) & 0x3f) << 2)) as u8
}

/// `spsr` with its IT bits replaced by `it`.
pub const fn with_it_state(spsr: u64, it: u8) -> u64 {
    let it = it as u64;
    (spsr & !PSR_IT_MASK) | ((it & 0b11) << IT_LO_SHIFT) | ((it >> 2) << IT_HI_SHIFT)
}

/// Whether the IT state says an IT block is in progress (`InITBlock()`:
/// IT[3:0] != 0).
pub const fn in_it_block(it: u8) -> bool {
    it & 0xf != 0
}

/// `AArch32.ITAdvance`: the IT state after the current instruction of an
/// IT block completes (or is skipped): the block ends when IT[2:0] is 0,
/// otherwise IT[4:0] shifts left by one (IT[7:5], the base condition, stays).
pub const fn it_advance(it: u8) -> u8 {
    if it & 0b111 == 0 {
        0
    } else {
        (it & 0xe0) | ((it << 1) & 0x1f)
    }
}

/// The condition of the current T32 instruction from the IT state
/// (`CurrentCond()` in T32): IT[7:4] inside an IT block, else AL.
pub const fn current_cond(spsr: u64) -> u8 {
    let it = it_state(spsr);
    if in_it_block(it) {
        it >> 4
    } else {
        COND_AL
    }
}

/// Whether the trapped instruction passes its condition, given what the
/// syndrome says: `cv` (ESR ISS bit 24) and `cond` (ISS bits [23:20]).
///
/// With CV = 1 the syndrome's COND holds. With CV = 0 (allowed for T32
/// instructions only) the condition is the one the IT state gives: IT[7:4]
/// in an IT block, AL outside one ([`current_cond`]).
pub const fn trapped_condition_passed(cv: bool, cond: u8, spsr: u64) -> bool {
    let cond = if cv { cond } else { current_cond(spsr) };
    condition_passed(cond, nzcv(spsr))
}

/// Steps over a trapped AArch32 instruction: the PC (ELR_EL2) moves past it
/// and the IT state advances, as if it had completed or failed its
/// condition. `il` is ESR_EL2.IL: clear only for a 16-bit T32 instruction.
/// Returns `(new_pc, new_spsr)`; the PC is a 32-bit address (wraps at 4 GiB).
///
/// In A32 state every instruction is 4 bytes (an IL of 0 there is not a
/// state the hardware reports; it is stepped by 4 too) and the IT state is
/// left as it is (it is zero in A32 state).
pub const fn skip_instruction(spsr: u64, pc: u64, il: bool) -> (u64, u64) {
    let thumb = spsr & PSR_T != 0;
    let len = if thumb && !il { 2 } else { 4 };
    let new_pc = (pc as u32).wrapping_add(len) as u64;
    let new_spsr = if thumb {
        with_it_state(spsr, it_advance(it_state(spsr)))
    } else {
        spsr
    };
    (new_pc, new_spsr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's table (arch/arm/kernel/opcodes.c, also arm64 KVM's
    /// `cc_map` in hyp/aarch32.c): bit `nzcv` of entry `cond` says whether
    /// the condition passes. Its last entry (NV) is 0: Linux never runs a
    /// 0b1111 condition; the Arm ARM's ConditionHolds treats it as true.
    const CC_MAP: [u16; 16] = [
        0xF0F0, 0x0F0F, 0xCCCC, 0x3333, 0xFF00, 0x00FF, 0xAAAA, 0x5555, 0x0C0C, 0xF3F3, 0xAA55,
        0x55AA, 0x0A05, 0xF5FA, 0xFFFF, 0,
    ];

    #[test]
    fn every_condition_matches_linux_cc_map() {
        for cond in 0..15u8 {
            for flags in 0..16u8 {
                assert_eq!(
                    condition_passed(cond, flags),
                    (CC_MAP[cond as usize] >> flags) & 1 == 1,
                    "cond {cond:#x} nzcv {flags:#06b}"
                );
            }
        }
        for flags in 0..16 {
            assert!(
                condition_passed(0xf, flags),
                "0b1111 holds (ConditionHolds)"
            );
        }
    }

    #[test]
    fn named_conditions() {
        const N: u8 = 8;
        const Z: u8 = 4;
        const C: u8 = 2;
        const V: u8 = 1;
        assert!(condition_passed(0x0, Z)); // EQ
        assert!(!condition_passed(0x1, Z)); // NE
        assert!(condition_passed(0x8, C)); // HI: C and not Z
        assert!(!condition_passed(0x8, C | Z));
        assert!(condition_passed(0x9, Z)); // LS
        assert!(condition_passed(0xa, N | V)); // GE: N == V
        assert!(condition_passed(0xb, N)); // LT
        assert!(!condition_passed(0xc, N | V | Z)); // GT needs !Z
        assert!(condition_passed(0xd, Z)); // LE
        assert!(condition_passed(COND_AL, 0));
    }

    #[test]
    fn it_bits_are_split_across_the_spsr() {
        // IT = 0b1010_0110: IT[1:0] = 0b10 -> bit 26; IT[7:2] = 0b101001 -> [15:10].
        let spsr = with_it_state(0, 0xa6);
        assert_eq!(spsr, (0b10 << 25) | (0b101001 << 10));
        assert_eq!(it_state(spsr), 0xa6);
        assert_eq!(with_it_state(u64::MAX, 0), !PSR_IT_MASK);
        assert_eq!(PSR_IT_MASK, 0x0600_fc00, "Linux's PSR_AA32_IT_MASK");
        for it in 0..=255u8 {
            assert_eq!(it_state(with_it_state(0xf000_0030, it)), it);
        }
    }

    /// `ITTE EQ` sets IT = firstcond:mask = 0000:0110. The three
    /// instructions it covers run as EQ, EQ, NE; then the block is over.
    #[test]
    fn itte_block_advances_eq_eq_ne_then_ends() {
        let mut spsr = PSR_T | with_it_state(0, 0x06);
        let mut conds = [0u8; 4];
        for c in conds.iter_mut() {
            *c = current_cond(spsr);
            spsr = skip_instruction(spsr, 0x8000, false).1;
        }
        assert_eq!(conds, [0x0, 0x0, 0x1, COND_AL]);
        assert_eq!(it_state(spsr), 0);
    }

    #[test]
    fn it_advance_matches_the_pseudocode() {
        // A 4-instruction block (mask xyz1) ends after 4 advances, never later.
        for it in 0..=255u8 {
            let mut s = it;
            let mut steps = 0;
            while s & 0xf != 0 {
                s = it_advance(s);
                steps += 1;
                assert!(steps <= 4, "IT {it:#x} never ends");
            }
            assert_eq!(
                it_advance(it) & 0xe0,
                if it & 7 == 0 { 0 } else { it & 0xe0 }
            );
        }
        assert_eq!(it_advance(0x18), 0, "last instruction of a block");
    }

    #[test]
    fn cv_clear_takes_the_condition_from_the_it_state() {
        // Z clear. Outside an IT block: AL, passes whatever COND says.
        let spsr = PSR_T;
        assert!(trapped_condition_passed(false, 0x0, spsr));
        // Inside `IT EQ` (IT = 0000:1000): EQ fails with Z clear.
        let spsr = PSR_T | with_it_state(0, 0x08);
        assert!(!trapped_condition_passed(false, COND_AL, spsr));
        assert!(trapped_condition_passed(false, COND_AL, spsr | 1 << 30));
        // CV set: the syndrome's COND wins over the IT state.
        assert!(trapped_condition_passed(true, COND_AL, spsr));
        assert!(!trapped_condition_passed(true, 0x1, spsr | 1 << 30));
    }

    #[test]
    fn skip_steps_two_or_four_bytes_and_wraps_at_4gib() {
        assert_eq!(skip_instruction(0x1d3, 0x8000, true), (0x8004, 0x1d3));
        // A32 state: 4 bytes even if IL were clear.
        assert_eq!(skip_instruction(0x1d3, 0x8000, false).0, 0x8004);
        let t = 0x1d3 | PSR_T;
        assert_eq!(skip_instruction(t, 0x8000, false), (0x8002, t));
        assert_eq!(skip_instruction(t, 0x8000, true), (0x8004, t));
        assert_eq!(skip_instruction(t, 0xffff_fffe, false).0, 0);
        assert_eq!(
            skip_instruction(0x10, 0x1_ffff_fffc, true).0,
            0,
            "32-bit PC"
        );
        // Only the IT bits change.
        let s = 0xf80f_03f0 | PSR_T | with_it_state(0, 0x06);
        let (_, n) = skip_instruction(s, 0, false);
        assert_eq!(n & !PSR_IT_MASK, s & !PSR_IT_MASK);
        assert_eq!(it_state(n), 0x0c);
    }
}
