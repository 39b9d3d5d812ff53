//! The one place kestrel touches FP/SIMD registers: saving and restoring a
//! guest's V0-V31, FPSR and FPCR for the lazy FP engine (`crate::vcpu::fpu`).
//!
//! `kestrel_fp_save` and `kestrel_fp_restore` are hand-written assembly (the
//! rest of kestrel is built for a softfloat target and never uses the
//! unit); `cargo xtask check-fp` allows exactly these two symbols. Each
//! clears CPTR_EL2.TFP around its own accesses (TFP traps EL2 too) and puts
//! the caller's CPTR_EL2 back.

use crate::vcpu::fpu::{Arm64FpState, FpHw};

use super::super::el2::CptrEl2;

core::arch::global_asm!(
    r#"
    .text
    .arch_extension fp
    .arch_extension simd
    .balign 4
    .global kestrel_fp_save
kestrel_fp_save:
    mrs     x1, cptr_el2
    bic     x2, x1, #{tfp}
    msr     cptr_el2, x2
    isb
    stp     q0, q1, [x0, #0]
    stp     q2, q3, [x0, #32]
    stp     q4, q5, [x0, #64]
    stp     q6, q7, [x0, #96]
    stp     q8, q9, [x0, #128]
    stp     q10, q11, [x0, #160]
    stp     q12, q13, [x0, #192]
    stp     q14, q15, [x0, #224]
    stp     q16, q17, [x0, #256]
    stp     q18, q19, [x0, #288]
    stp     q20, q21, [x0, #320]
    stp     q22, q23, [x0, #352]
    stp     q24, q25, [x0, #384]
    stp     q26, q27, [x0, #416]
    stp     q28, q29, [x0, #448]
    stp     q30, q31, [x0, #480]
    mrs     x2, fpsr
    mrs     x3, fpcr
    str     x2, [x0, #512]
    str     x3, [x0, #520]
    msr     cptr_el2, x1
    isb
    ret

    .balign 4
    .global kestrel_fp_restore
kestrel_fp_restore:
    mrs     x1, cptr_el2
    bic     x2, x1, #{tfp}
    msr     cptr_el2, x2
    isb
    ldp     q0, q1, [x0, #0]
    ldp     q2, q3, [x0, #32]
    ldp     q4, q5, [x0, #64]
    ldp     q6, q7, [x0, #96]
    ldp     q8, q9, [x0, #128]
    ldp     q10, q11, [x0, #160]
    ldp     q12, q13, [x0, #192]
    ldp     q14, q15, [x0, #224]
    ldp     q16, q17, [x0, #256]
    ldp     q18, q19, [x0, #288]
    ldp     q20, q21, [x0, #320]
    ldp     q22, q23, [x0, #352]
    ldp     q24, q25, [x0, #384]
    ldp     q26, q27, [x0, #416]
    ldp     q28, q29, [x0, #448]
    ldp     q30, q31, [x0, #480]
    ldr     x2, [x0, #512]
    ldr     x3, [x0, #520]
    msr     fpsr, x2
    msr     fpcr, x3
    msr     cptr_el2, x1
    isb
    ret
"#,
    tfp = const CptrEl2::TFP.bits(),
);

extern "C" {
    fn kestrel_fp_save(into: *mut Arm64FpState);
    fn kestrel_fp_restore(from: *const Arm64FpState);
}

const _: () = assert!(core::mem::offset_of!(Arm64FpState, fpsr) == 512);
const _: () = assert!(core::mem::offset_of!(Arm64FpState, fpcr) == 520);

fn write_cptr(v: CptrEl2) {
    let v = v.bits();
    // SAFETY: CPTR_EL2 only controls trapping of lower-EL (and EL2) FP/SVE/
    // SME/trace/AMU accesses on this CPU; kestrel itself uses none of them.
    unsafe {
        core::arch::asm!("msr cptr_el2, {}", "isb", in(reg) v, options(nostack, preserves_flags))
    };
}

/// arm64 [`FpHw`]: the assembly above plus CPTR_EL2.TFP.
pub struct Arm64FpHw;

impl FpHw for Arm64FpHw {
    type State = Arm64FpState;

    fn save(&mut self, into: &mut Arm64FpState) {
        // SAFETY: `into` is a valid, exclusively borrowed, 16-byte aligned
        // Arm64FpState (repr(C): v at 0, fpsr at 512, fpcr at 520), exactly
        // what the asm writes; it clobbers only x1-x3 (caller-saved) and
        // restores CPTR_EL2.
        unsafe { kestrel_fp_save(into) }
    }

    fn restore(&mut self, from: &Arm64FpState) {
        // SAFETY: as in `save`; the asm only reads `from` and loads the FP
        // unit, which holds nothing of kestrel's.
        unsafe { kestrel_fp_restore(from) }
    }

    fn trap_on(&mut self) {
        write_cptr(CptrEl2::GUEST.union(CptrEl2::TFP));
    }

    fn trap_off(&mut self) {
        write_cptr(CptrEl2::GUEST);
    }
}
