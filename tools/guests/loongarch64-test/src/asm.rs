//! Everything that must be assembly: the entry points, the exception and
//! TLB-refill entries, the hypercall and fault-probe stubs, the PLV3 code and
//! the FP/LSX register loaders.
//!
//! The guest runs at VA = PA (see `link.ld`), so `la.pcrel` gives the same
//! address in direct-address mode and with paging on.
//!
//! Trap frame (`trap::Frame`, 38 x 8 bytes): `r0..r31` at `8 * n` (the `sp`
//! slot holds the interrupted `sp`), then ERA, PRMD, ESTAT, BADV, BADI and
//! one pad word. The entry reads only ESTAT; the Rust handler reads ERA and
//! the others for exceptions only, and asks for ERA/PRMD to be written back
//! by returning non-zero. That keeps the interrupt path to one CSR read and
//! `ertn`, so under trap-and-emulate the exit counts the benchmark reports are
//! the hypervisor's cost, not the guest's bookkeeping.

use core::arch::global_asm;

use crate::{MAX_CPUS, STACK_SIZE};

global_asm!(
    r#"
    .section .text.entry, "ax"
    .global _start
_start:
    // a0/a1/a2 as QEMU's direct kernel boot sets them (boot CPU only).
    move    $s0, $a0
    move    $s1, $a1
    move    $s2, $a2
    // EUEN: FP (bit 0) and LSX (bit 1) on; LASX stays off.
    li.w    $t0, 0x3
    csrwr   $t0, 0x2
    // No exception may use a stale entry: EENTRY is set before Rust runs.
    la.pcrel $t0, __exc_entry
    csrwr   $t0, 0xc
    li.w    $tp, 0
    la.pcrel $sp, GUEST_STACKS
    li.d    $t0, {stack_size}
    add.d   $sp, $sp, $t0
    // Zero .bss (the stacks are in it; nothing is on them yet).
    la.pcrel $t0, __bss_start
    la.pcrel $t1, __bss_end
1:  bgeu    $t0, $t1, 2f
    st.d    $zero, $t0, 0
    addi.d  $t0, $t0, 8
    b       1b
2:  move    $a0, $s0
    move    $a1, $s1
    move    $a2, $s2
    bl      guest_primary_main
3:  idle    0
    b       3b

    // Secondary CPUs arrive here from the boot ROM (QEMU) or kestrel's
    // emulated mailbox, in direct-address mode at PLV0.
    .global guest_secondary_entry
guest_secondary_entry:
    li.w    $t0, 0x3
    csrwr   $t0, 0x2
    la.pcrel $t0, __exc_entry
    csrwr   $t0, 0xc
    csrrd   $tp, 0x20
    andi    $tp, $tp, 0x1ff
    li.w    $t0, {max_cpus}
    bgeu    $tp, $t0, 3b
    la.pcrel $sp, GUEST_STACKS
    addi.d  $t0, $tp, 1
    li.d    $t1, {stack_size}
    mul.d   $t0, $t0, $t1
    add.d   $sp, $sp, $t0
    move    $a0, $tp
    bl      guest_secondary_main
    b       3b

    // ---- exception entry (EENTRY, ECFG.VS = 0) ------------------------
    .section .text.vectors, "ax"
    .balign 4096
    .global __exc_entry
__exc_entry:
    addi.d  $sp, $sp, -304
    st.d    $r1, $sp, 8
    st.d    $r2, $sp, 16
    .irp n, 4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    st.d    $r\n, $sp, \n * 8
    .endr
    addi.d  $t0, $sp, 304
    st.d    $t0, $sp, 24
    csrrd   $t0, 0x5
    st.d    $t0, $sp, 34 * 8
    move    $a0, $sp
    bl      guest_trap_handler
    beqz    $a0, 1f
    ld.d    $t0, $sp, 32 * 8
    csrwr   $t0, 0x6
    ld.d    $t0, $sp, 33 * 8
    csrwr   $t0, 0x1
1:  ld.d    $r1, $sp, 8
    ld.d    $r2, $sp, 16
    .irp n, 4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ld.d    $r\n, $sp, \n * 8
    .endr
    addi.d  $sp, $sp, 304
    ertn

    // ---- TLB refill entry (TLBRENTRY: runs in DA mode, PA = VA here) ----
    // Counts refills, then walks the guest's 3-level table (PWCL/PWCH:
    // 4 KiB pages, dir3 = VA[38:30], dir1 = VA[29:21], PTE = VA[20:12]).
    .balign 4096
    .global __tlbr_entry
__tlbr_entry:
    csrwr   $t0, 0x8b
    csrwr   $t1, 0x32
    la.pcrel $t0, GUEST_TLB_REFILLS
    li.w    $t1, 1
    amadd.d $zero, $t1, $t0
    csrrd   $t1, 0x32
    csrrd   $t0, 0x1b
    lddir   $t0, $t0, 3
    lddir   $t0, $t0, 1
    ldpte   $t0, 0
    ldpte   $t0, 1
    tlbfill
    csrrd   $t0, 0x8b
    ertn

    // ---- code run at PLV3 (its page is mapped PLV3) ---------------------
    // Each ends with `syscall 0`; the trap handler takes the CPU back to
    // `guest_user_return` at PLV0 (or an exception on the way does).
    .section .text.user, "ax"
    .balign 4096
    .global guest_user_load
guest_user_load:
    ld.d    $a1, $a0, 0
    syscall 0
    b       guest_user_load
    .global guest_user_store
guest_user_store:
    st.d    $a1, $a0, 0
    syscall 0
    b       guest_user_store
    .global guest_user_csr
guest_user_csr:
    csrrd   $a1, 0x0
    syscall 0
    b       guest_user_csr

    .text
    // fn guest_enter_user(pc, sp, a0, a1) -> ESTAT of the exception that ended it
    .global guest_enter_user
guest_enter_user:
    addi.d  $sp, $sp, -112
    st.d    $ra, $sp, 0
    st.d    $fp, $sp, 8
    st.d    $s0, $sp, 16
    st.d    $s1, $sp, 24
    st.d    $s2, $sp, 32
    st.d    $s3, $sp, 40
    st.d    $s4, $sp, 48
    st.d    $s5, $sp, 56
    st.d    $s6, $sp, 64
    st.d    $s7, $sp, 72
    st.d    $s8, $sp, 80
    st.d    $tp, $sp, 88
    st.d    $r21, $sp, 96
    // SAVE3 = where the kernel context is; the handler sends us back to
    // guest_user_return, which reloads it.
    move    $t0, $sp
    csrwr   $t0, 0x33
    li.w    $t0, 0x3            // PRMD: PPLV = 3, PIE = 0
    csrwr   $t0, 0x1
    csrwr   $a0, 0x6            // ERA = user pc
    move    $sp, $a1
    move    $a0, $a2
    move    $a1, $a3
    ertn
    .global guest_user_return
guest_user_return:
    csrrd   $sp, 0x33
    ld.d    $ra, $sp, 0
    ld.d    $fp, $sp, 8
    ld.d    $s0, $sp, 16
    ld.d    $s1, $sp, 24
    ld.d    $s2, $sp, 32
    ld.d    $s3, $sp, 40
    ld.d    $s4, $sp, 48
    ld.d    $s5, $sp, 56
    ld.d    $s6, $sp, 64
    ld.d    $s7, $sp, 72
    ld.d    $s8, $sp, 80
    ld.d    $tp, $sp, 88
    ld.d    $r21, $sp, 96
    addi.d  $sp, $sp, 112
    jr      $ra

    // fn guest_hvcl(a0, a1, a2, a3) -> a0: `hvcl 0x100` (0x002b8100). On a
    // CPU/hypervisor that does not decode it the INE lands in the trap
    // handler, which returns HVCL_TRAPPED in a0 and skips the instruction.
    .global guest_hvcl
guest_hvcl:
    .global guest_hvcl_insn
guest_hvcl_insn:
    .word   0x002b8100
    jr      $ra

    // fn guest_probe_load(addr) -> (estat or 0, value): a fault on the load
    // makes the handler return its ESTAT in a0 and skip the load.
    .global guest_probe_load
guest_probe_load:
    move    $a2, $a0
    move    $a0, $zero
    move    $a1, $zero
    .global guest_probe_load_insn
guest_probe_load_insn:
    ld.d    $a1, $a2, 0
    jr      $ra

    // fn guest_probe_load32(addr) -> (estat or 0, value): as
    // guest_probe_load, one 32-bit load (device registers).
    .global guest_probe_load32
guest_probe_load32:
    move    $a2, $a0
    move    $a0, $zero
    move    $a1, $zero
    .global guest_probe_load32_insn
guest_probe_load32_insn:
    ld.wu   $a1, $a2, 0
    jr      $ra

    // fn guest_probe_store(addr, value) -> estat or 0
    .global guest_probe_store
guest_probe_store:
    move    $a2, $a0
    move    $a0, $zero
    .global guest_probe_store_insn
guest_probe_store_insn:
    st.d    $a1, $a2, 0
    jr      $ra

    // fn guest_fp_load(buf, lsx): buf = 32 x 16 bytes of vector/FP registers,
    // then FCSR0 (u64) and FCC0-7 (u64, bit i = fcc i).
    .global guest_fp_load
guest_fp_load:
    beqz    $a1, 1f
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .word   0x2c000000 | ((\n * 16) << 10) | (4 << 5) | \n     // vld $vr\n, $a0, 16n
    .endr
    b       2f
1:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    fld.d   $f\n, $a0, \n * 16
    .endr
2:  ld.d    $t0, $a0, 512
    movgr2fcsr $fcsr0, $t0
    ld.d    $t0, $a0, 520
    .irp n, 0,1,2,3,4,5,6,7
    srli.d  $t1, $t0, \n
    movgr2cf $fcc\n, $t1
    .endr
    jr      $ra

    // fn guest_fp_store(buf, lsx): the reverse of guest_fp_load.
    .global guest_fp_store
guest_fp_store:
    beqz    $a1, 1f
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .word   0x2c400000 | ((\n * 16) << 10) | (4 << 5) | \n     // vst $vr\n, $a0, 16n
    .endr
    b       2f
1:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    fst.d   $f\n, $a0, \n * 16
    .endr
2:  movfcsr2gr $t0, $fcsr0
    st.d    $t0, $a0, 512
    move    $t0, $zero
    .irp n, 0,1,2,3,4,5,6,7
    movcf2gr $t1, $fcc\n
    slli.d  $t1, $t1, \n
    or      $t0, $t0, $t1
    .endr
    st.d    $t0, $a0, 520
    jr      $ra
"#,
    stack_size = const STACK_SIZE,
    max_cpus = const MAX_CPUS,
);

extern "C" {
    pub fn guest_secondary_entry();
    pub fn __exc_entry();
    pub fn __tlbr_entry();
    pub fn guest_user_load();
    pub fn guest_user_store();
    pub fn guest_user_csr();
    pub fn guest_user_return();
    pub fn guest_enter_user(pc: usize, sp: usize, a0: u64, a1: u64) -> u64;
    pub fn guest_hvcl(a0: u64, a1: u64, a2: u64, a3: u64) -> u64;
    pub fn guest_hvcl_insn();
    pub fn guest_probe_load(addr: usize) -> ProbeResult;
    pub fn guest_probe_load_insn();
    pub fn guest_probe_load32(addr: usize) -> ProbeResult;
    pub fn guest_probe_load32_insn();
    pub fn guest_probe_store_insn();
    pub fn guest_fp_load(buf: *const FpState, lsx: u64);
    pub fn guest_fp_store(buf: *mut FpState, lsx: u64);
    pub static __image_start: u8;
    pub static __image_end: u8;
    pub static __user_text_start: u8;
    pub static __user_text_end: u8;
}

/// What `guest_probe_load` returns in a0/a1.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProbeResult {
    /// 0, or the ESTAT of the exception the load raised.
    pub estat: u64,
    /// The value loaded (0 after a fault).
    pub value: u64,
}

/// The FP/SIMD register image `guest_fp_load`/`guest_fp_store` move.
#[repr(C, align(16))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FpState {
    /// vr0-vr31 as two u64 each (low half = f0-f31).
    pub regs: [[u64; 2]; 32],
    pub fcsr0: u64,
    /// Bit i = FCC i.
    pub fcc: u64,
}

impl FpState {
    pub const ZERO: FpState = FpState {
        regs: [[0; 2]; 32],
        fcsr0: 0,
        fcc: 0,
    };
}
