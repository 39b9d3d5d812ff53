//! The one place kestrel touches FP/SIMD and SVE registers: saving and
//! restoring a guest's V0-V31, FPSR and FPCR, or its SVE state (Z0-Z31 at
//! the VM's vector length, P0-P15, FFR, ZCR_EL1), for the lazy FP engine
//! (`crate::vcpu::fpu`).
//!
//! `kestrel_fp_save`/`kestrel_fp_restore` (narrow form) and
//! `kestrel_sve_save`/`kestrel_sve_restore`/`kestrel_sve_widen`/
//! `kestrel_sve_probe` (wide form) are hand-written assembly (the rest of
//! kestrel is built for a softfloat target and never uses the unit);
//! `cargo xtask check-fp` allows exactly these symbols. Each clears
//! CPTR_EL2.TFP (and TZ for SVE) around its own accesses (they trap EL2
//! too) and puts the caller's CPTR_EL2 back.
//!
//! # Vector lengths across VMs
//!
//! ZCR_EL2.LEN caps the guest's vector length (and sets EL2's own). Each
//! wide move first sets it to the owner VM's length, so a save or restore
//! covers exactly the bits that VM can reach: a restore overwrites all of
//! them, and bits beyond the VM's length (another VM's, when ZCR_EL2 was
//! larger before) stay out of its reach, whatever the architecture keeps
//! there when the length later grows (such bits are UNKNOWN then, and the
//! next wide restore of a longer VM overwrites them all). A narrow restore
//! loads V0-V31 with AdvSIMD loads, which zero every Z bit above 128; P and
//! FFR keep someone else's values there, but the guest cannot reach them:
//! CPTR_EL2.TZ stays set until it widens (`kestrel_sve_widen`: ZCR_EL2 set
//! first, then the Z bits above 128 zeroed by writing each V register to
//! itself, P0-P15 and FFR cleared, ZCR_EL1 loaded).

use crate::vcpu::fpu::{Arm64FpState, Arm64SveState, FpHw};

use super::super::el2::CptrEl2;
use super::regs::mrs;

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

// SVE: x0 = Z area (32 registers, VL bytes each), x1 = P area (P0-P15 then
// FFR, VL/8 bytes each), x2 = FPSR then FPCR (8 bytes each), x3 = ZCR_EL2
// (the owner VM's LEN). ZCR_EL2 is S3_4_C1_C2_0, ZCR_EL1 S3_0_C1_C2_0.
core::arch::global_asm!(
    r#"
    .text
    .arch_extension fp
    .arch_extension simd
    .arch_extension sve

// Every stub's start: CPTR_EL2 saved in \saved and FP and SVE untrapped
// at EL2 (TFP and TZ clear, through \tmp), then ZCR_EL2 = \zcr.
    .macro kestrel_sve_open saved, tmp, zcr
    mrs     \saved, cptr_el2
    bic     \tmp, \saved, #{tfp}
    bic     \tmp, \tmp, #{tz}
    msr     cptr_el2, \tmp
    isb
    msr     s3_4_c1_c2_0, \zcr
    isb
    .endm

    .balign 4
    .global kestrel_sve_save
// Returns ZCR_EL1.
kestrel_sve_save:
    kestrel_sve_open x4, x5, x3
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str     z\n, [x0, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    str     p\n, [x1, #\n, mul vl]
    .endr
    rdffr   p0.b
    str     p0, [x1, #16, mul vl]
    mrs     x5, fpsr
    mrs     x6, fpcr
    stp     x5, x6, [x2]
    mrs     x0, s3_0_c1_c2_0
    msr     cptr_el2, x4
    isb
    ret

    .balign 4
    .global kestrel_sve_restore
// x4 = ZCR_EL1.
kestrel_sve_restore:
    kestrel_sve_open x5, x6, x3
    ldr     p0, [x1, #16, mul vl]
    wrffr   p0.b
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    ldr     p\n, [x1, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ldr     z\n, [x0, #\n, mul vl]
    .endr
    ldp     x6, x7, [x2]
    msr     fpsr, x6
    msr     fpcr, x7
    msr     s3_0_c1_c2_0, x4
    msr     cptr_el2, x5
    isb
    ret

    .balign 4
    .global kestrel_sve_widen
// x0 = ZCR_EL2, x1 = ZCR_EL1. The unit holds the owner's V0-V31 (narrow).
kestrel_sve_widen:
    kestrel_sve_open x2, x3, x0
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    mov     v\n\().16b, v\n\().16b
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    pfalse  p\n\().b
    .endr
    wrffr   p0.b
    msr     s3_0_c1_c2_0, x1
    msr     cptr_el2, x2
    isb
    ret

    .balign 4
    .global kestrel_sve_probe
// x0 = ZCR_EL2.LEN to try; returns the vector length in bytes it gives.
kestrel_sve_probe:
    kestrel_sve_open x2, x3, x0
    rdvl    x0, #1
    msr     cptr_el2, x2
    isb
    ret
"#,
    tfp = const CptrEl2::TFP.bits(),
    tz = const CptrEl2::TZ.bits(),
);

extern "C" {
    // The FP state's first 528 bytes (v, fpsr, fpcr), as laid out in the
    // repr(C) Arm64FpState.
    fn kestrel_fp_save(into: *mut u8);
    fn kestrel_fp_restore(from: *const u8);
    fn kestrel_sve_save(z: *mut u8, p: *mut u8, ctl: *mut u64, zcr_el2: u64) -> u64;
    fn kestrel_sve_restore(z: *const u8, p: *const u8, ctl: *const u64, zcr_el2: u64, zcr_el1: u64);
    fn kestrel_sve_widen(zcr_el2: u64, zcr_el1: u64);
    fn kestrel_sve_probe(len: u64) -> u64;
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

const _: () = assert!(
    core::mem::offset_of!(Arm64FpState, fpcr) == 8 + core::mem::offset_of!(Arm64FpState, fpsr)
);

/// The vector lengths this CPU supports: bit `vq - 1` for a length of `vq`
/// quadwords (0: no SVE). Asks ZCR_EL2 for each length and reads back with
/// `rdvl` what the CPU gives (the longest it supports up to the one asked).
pub fn probe_sve_lengths() -> u16 {
    if (mrs!("id_aa64pfr0_el1") >> 32) & 0xf == 0 {
        return 0;
    }
    let mut set = 0u16;
    for len in 0..16u64 {
        // SAFETY: the asm clears CPTR_EL2.TFP/TZ only around its own
        // ZCR_EL2 write and `rdvl` (no vector register is touched) and puts
        // CPTR_EL2 back; ZCR_EL2 is rewritten before any guest's SVE use.
        let bytes = unsafe { kestrel_sve_probe(len) };
        let vq = bytes / 16;
        if (1..=16).contains(&vq) {
            set |= 1 << (vq - 1);
        }
    }
    set
}

/// arm64 [`FpHw`]: the assembly above plus CPTR_EL2.TFP and TZ.
#[derive(Default)]
pub struct Arm64FpHw {
    /// The unit holds its owner's SVE state (CPTR_EL2.TZ off with TFP).
    wide: bool,
}

impl FpHw for Arm64FpHw {
    type State = Arm64FpState;

    fn save(&mut self, into: &mut Arm64FpState) {
        let ctl = core::ptr::addr_of_mut!(into.fpsr);
        match into.sve.as_deref_mut() {
            Some(sve) if self.wide => {
                let vq = sve.vq;
                let z = sve.regs.as_mut_ptr().cast::<u8>();
                // SAFETY: `regs` holds `quads(vq)` 128-bit words, room for
                // the 32 Z registers at `vq` quadwords and, after them, the
                // 17 predicates at `2 * vq` bytes: exactly what the asm
                // stores at the length it sets (ZCR_EL2.LEN = vq - 1, the
                // VM's, which the CPU supports: `sve_vq_for`). `ctl` points
                // at `fpsr` with `fpcr` right after it (asserted above).
                // The asm clobbers only x0-x6 and restores CPTR_EL2.
                let zcr_el1 = unsafe {
                    let p = z.add(Arm64SveState::z_bytes(vq));
                    kestrel_sve_save(z, p, ctl, u64::from(vq - 1))
                };
                sve.zcr_el1 = zcr_el1;
                sve.wide = true;
                sve.narrow_if_clear(&mut into.v);
            }
            // SAFETY: `into` is a valid, exclusively borrowed, 16-byte
            // aligned Arm64FpState (repr(C): v at 0, fpsr at 512, fpcr at
            // 520), exactly what the asm writes; it clobbers only x1-x3
            // (caller-saved) and restores CPTR_EL2.
            _ => unsafe { kestrel_fp_save(core::ptr::from_mut(into).cast()) },
        }
        self.wide = false;
    }

    fn restore(&mut self, from: &Arm64FpState) {
        match from.sve.as_deref() {
            Some(sve) if sve.wide => {
                let vq = sve.vq;
                let z = sve.regs.as_ptr().cast::<u8>();
                // SAFETY: as in `save`, reading instead of writing; the unit
                // and ZCR_EL1/ZCR_EL2 hold nothing of kestrel's.
                unsafe {
                    let p = z.add(Arm64SveState::z_bytes(vq));
                    kestrel_sve_restore(z, p, &from.fpsr, u64::from(vq - 1), sve.zcr_el1)
                };
                self.wide = true;
            }
            _ => {
                // SAFETY: as in `save`; the asm only reads `from` and loads
                // the FP unit, which holds nothing of kestrel's.
                unsafe { kestrel_fp_restore(core::ptr::from_ref(from).cast()) };
                self.wide = false;
            }
        }
    }

    fn trap_on(&mut self) {
        write_cptr(CptrEl2::GUEST.union(CptrEl2::TFP));
    }

    fn trap_off(&mut self) {
        if self.wide {
            write_cptr(CptrEl2::GUEST.difference(CptrEl2::TZ));
        } else {
            write_cptr(CptrEl2::GUEST);
        }
    }

    fn wide(&self) -> bool {
        self.wide
    }

    fn widen(&mut self, state: &Arm64FpState) {
        // A VM without SVE never gets here (its SVE traps are UNDEF).
        let Some(sve) = state.sve.as_deref() else {
            return;
        };
        // SAFETY: the asm writes only ZCR_EL2 (the VM's length, which the
        // CPU supports), ZCR_EL1 and the vector unit, which holds the owner's
        // own registers and nothing of kestrel's; it restores CPTR_EL2.
        unsafe { kestrel_sve_widen(u64::from(sve.vq - 1), sve.zcr_el1) };
        self.wide = true;
    }
}
