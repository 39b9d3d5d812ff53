//! The only code in kestrel that touches FP/SIMD registers: saving and
//! restoring a vCPU's FP state (`kestrel_la_fp_save` /
//! `kestrel_la_fp_restore`), at the width the CPU has (FP64, LSX 128-bit or
//! LASX 256-bit), plus FCSR0 and FCC0-7. Layout: `crate::vcpu::fpu::LoongArchFpState`
//! (32 x 32 bytes of registers, FCSR0 at 1024, FCC bits at 1028).
//! `make test` (check-fp) allows FP instructions in these two symbols only.
//!
//! Both enable the units they need in EUEN for the duration (PLV0 is subject
//! to EUEN too) and put the caller's EUEN back.

use core::arch::global_asm;

use crate::vcpu::fpu::LoongArchFpState;

const _: () = assert!(core::mem::offset_of!(LoongArchFpState, fcsr0) == 1024);
const _: () = assert!(core::mem::offset_of!(LoongArchFpState, fcc) == 1028);

// SAFETY (for the whole block): both functions take a0 = pointer to a
// 32-byte aligned `LoongArchFpState`, a1 = width level (1 FP64, 2 LSX,
// 3 LASX, only as the CPU has them); they clobber t0-t2 and the FP unit only.
global_asm!(
    r#"
    .section .text.kestrel_fp, "ax"
    .global kestrel_la_fp_save
    .p2align 4
kestrel_la_fp_save:
    csrrd   $t1, 0x2
    li.d    $t0, 1
    sll.d   $t0, $t0, $a1
    addi.d  $t0, $t0, -1
    csrwr   $t0, 0x2
    li.d    $t2, 3
    beq     $a1, $t2, 3f
    li.d    $t2, 2
    beq     $a1, $t2, 2f
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    fst.d   $f\n, $a0, \n * 32
    .endr
    b       4f
2:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    vst     $vr\n, $a0, \n * 32
    .endr
    b       4f
3:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    xvst    $xr\n, $a0, \n * 32
    .endr
4:
    movfcsr2gr $t0, $fcsr0
    st.w    $t0, $a0, 1024
    move    $t2, $zero
    .irp n, 0,1,2,3,4,5,6,7
    movcf2gr $t0, $fcc\n
    slli.d  $t0, $t0, \n
    or      $t2, $t2, $t0
    .endr
    st.b    $t2, $a0, 1028
    csrwr   $t1, 0x2
    jr      $ra

    .global kestrel_la_fp_restore
    .p2align 4
kestrel_la_fp_restore:
    csrrd   $t1, 0x2
    li.d    $t0, 1
    sll.d   $t0, $t0, $a1
    addi.d  $t0, $t0, -1
    csrwr   $t0, 0x2
    li.d    $t2, 3
    beq     $a1, $t2, 3f
    li.d    $t2, 2
    beq     $a1, $t2, 2f
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    fld.d   $f\n, $a0, \n * 32
    .endr
    b       4f
2:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    vld     $vr\n, $a0, \n * 32
    .endr
    b       4f
3:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    xvld    $xr\n, $a0, \n * 32
    .endr
4:
    ld.w    $t0, $a0, 1024
    movgr2fcsr $fcsr0, $t0
    ld.bu   $t2, $a0, 1028
    .irp n, 0,1,2,3,4,5,6,7
    srli.d  $t0, $t2, \n
    andi    $t0, $t0, 1
    movgr2cf $fcc\n, $t0
    .endr
    csrwr   $t1, 0x2
    jr      $ra
    "#
);

unsafe extern "C" {
    fn kestrel_la_fp_save(state: *mut LoongArchFpState, level: u64);
    fn kestrel_la_fp_restore(state: *const LoongArchFpState, level: u64);
}

/// Copies the FP unit into `into`, `level` wide (1 FP64, 2 LSX, 3 LASX).
pub fn save(into: &mut LoongArchFpState, level: u8) {
    // SAFETY: `into` is a valid, exclusively borrowed, 32-byte aligned state;
    // `level` is clamped to what the caller found in CPUCFG2.
    unsafe { kestrel_la_fp_save(into, u64::from(level.clamp(1, 3))) }
}

/// Loads the FP unit from `from`.
pub fn restore(from: &LoongArchFpState, level: u8) {
    // SAFETY: as for `save`.
    unsafe { kestrel_la_fp_restore(from, u64::from(level.clamp(1, 3))) }
}
