// kestrel arm64 test guest: entry, relocation, MMU, secondary entry,
// exception vectors and the FP/SIMD round used by the FP check.
//
// Boot protocol (Linux arm64 `Image`): EL1h, MMU off, x0 = DTB. The same
// bytes are entered at their first byte by kestrel (test-guest raw binary)
// and at the Image entry by bare QEMU.

.equ NCPU_MAX, 16
.equ STACK_SIZE, 16384
.equ R_AARCH64_RELATIVE, 1027
// One exception frame: x0-x30, ELR, SPSR, FPCR, FPSR, pad, q0-q31.
.equ FRAME_SIZE, 800
.equ FRAME_Q, 288

.macro adr_l reg, sym
    adrp \reg, \sym
    add \reg, \reg, :lo12:\sym
.endm

.section .text.head, "ax"
.global _start
_start:
    b       primary_entry           // code0
    .long   0                       // code1
    .quad   0                       // text_offset (QEMU adds 2 MiB)
    .quad   __image_size            // image_size: file + bss + stacks
    .quad   0xa                     // flags: LE, 4K pages, anywhere in RAM
    .quad   0, 0, 0                 // res2-res4
    .ascii  "ARM\x64"               // magic
    .long   0                       // res5

.text
primary_entry:
    mov     x19, x0                 // DTB
    // Apply the R_AARCH64_RELATIVE relocations: *(base + off) = base + addend.
    adr_l   x20, _start
    adr_l   x1, __rela_start
    adr_l   x2, __rela_end
1:  cmp     x1, x2
    b.hs    2f
    ldp     x3, x4, [x1], #16
    ldr     x5, [x1], #8
    cmp     w4, #R_AARCH64_RELATIVE
    b.ne    1b
    add     x5, x5, x20
    str     x5, [x20, x3]
    b       1b
2:  // Zero .bss (page tables, stacks, statics).
    adr_l   x1, __bss_start
    adr_l   x2, __bss_end
3:  cmp     x1, x2
    b.hs    4f
    stp     xzr, xzr, [x1], #16
    b       3b
4:  mov     x0, #NCPU_MAX           // the boot CPU has its own stack slot
    bl      cpu_setup
    bl      build_page_table
    bl      mmu_enable
    mov     x0, x19
    bl      primary_main
5:  wfi
    b       5b

// PSCI CPU_ON entry: x0 = context = the CPU's index.
.global secondary_entry
secondary_entry:
    mov     x19, x0
    cmp     x19, #NCPU_MAX
    b.hs    5b
    bl      cpu_setup
    bl      mmu_enable
    mov     x0, x19
    bl      secondary_main
    b       5b

// x0 = stack slot (CPU index, NCPU_MAX for the boot CPU): FP/SIMD on, stack, vectors. Clobbers x0-x2.
cpu_setup:
    mov     x1, #(3 << 20)          // CPACR_EL1.FPEN: no FP/SIMD traps
    msr     cpacr_el1, x1
    isb
    adr_l   x1, __stacks
    add     x2, x0, #1
    lsl     x2, x2, #14             // STACK_SIZE
    add     sp, x1, x2
    adr_l   x1, exception_vectors
    msr     vbar_el1, x1
    isb
    ret

// One level-1 table of 512 1 GiB blocks (39-bit VA = PA): the GiB holding
// this image is normal write-back memory, everything else Device-nGnRnE.
build_page_table:
    adr_l   x0, __page_table
    adr_l   x1, _start
    lsr     x1, x1, #30
    mov     x2, #0
    ldr     x3, =0x0060000000000401 // block, AttrIndx 0 (device), AF, PXN, UXN
    ldr     x4, =0x0000000000000705 // block, AttrIndx 1 (normal), inner shareable, AF
6:  lsl     x5, x2, #30
    cmp     x2, x1
    csel    x6, x4, x3, eq
    orr     x5, x5, x6
    str     x5, [x0, x2, lsl #3]
    add     x2, x2, #1
    cmp     x2, #512
    b.lo    6b
    dsb     ish
    ret

mmu_enable:
    ldr     x0, =0xff00             // MAIR: attr0 Device-nGnRnE, attr1 normal WB
    msr     mair_el1, x0
    mrs     x1, id_aa64mmfr0_el1
    and     x1, x1, #7              // PARange -> TCR.IPS
    ldr     x0, =0x803519           // T0SZ 25, IRGN0/ORGN0 WBWA, SH0 inner, TG0 4K, EPD1
    orr     x0, x0, x1, lsl #32
    msr     tcr_el1, x0
    adr_l   x0, __page_table
    msr     ttbr0_el1, x0
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    ldr     x0, =0x30d01805         // RES1 bits, M, C, I
    msr     sctlr_el1, x0
    isb
    ret
.ltorg

// ---------------------------------------------------------------------------
// Exception vectors: every entry saves a full frame (general registers, ELR,
// SPSR, FP/SIMD state) and calls exception_handler(kind, frame).

.macro ventry kind
    .balign 0x80
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       exception_common
.endm

.balign 0x800
.global exception_vectors
exception_vectors:
    ventry 0    // current EL, SP0: sync
    ventry 1    //   irq
    ventry 2    //   fiq
    ventry 3    //   serror
    ventry 4    // current EL, SPx: sync
    ventry 5    //   irq
    ventry 6    //   fiq
    ventry 7    //   serror
    ventry 8    // lower EL, AArch64
    ventry 9
    ventry 10
    ventry 11
    ventry 12   // lower EL, AArch32
    ventry 13
    ventry 14
    ventry 15

exception_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    str     x30, [sp, #240]
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x2, x3, [sp, #248]
    mrs     x2, fpcr
    mrs     x3, fpsr
    stp     x2, x3, [sp, #264]
    add     x2, sp, #FRAME_Q
    stp     q0, q1, [x2, #0]
    stp     q2, q3, [x2, #32]
    stp     q4, q5, [x2, #64]
    stp     q6, q7, [x2, #96]
    stp     q8, q9, [x2, #128]
    stp     q10, q11, [x2, #160]
    stp     q12, q13, [x2, #192]
    stp     q14, q15, [x2, #224]
    stp     q16, q17, [x2, #256]
    stp     q18, q19, [x2, #288]
    stp     q20, q21, [x2, #320]
    stp     q22, q23, [x2, #352]
    stp     q24, q25, [x2, #384]
    stp     q26, q27, [x2, #416]
    stp     q28, q29, [x2, #448]
    stp     q30, q31, [x2, #480]
    mov     x1, sp
    bl      exception_handler
    add     x2, sp, #FRAME_Q
    ldp     q0, q1, [x2, #0]
    ldp     q2, q3, [x2, #32]
    ldp     q4, q5, [x2, #64]
    ldp     q6, q7, [x2, #96]
    ldp     q8, q9, [x2, #128]
    ldp     q10, q11, [x2, #160]
    ldp     q12, q13, [x2, #192]
    ldp     q14, q15, [x2, #224]
    ldp     q16, q17, [x2, #256]
    ldp     q18, q19, [x2, #288]
    ldp     q20, q21, [x2, #320]
    ldp     q22, q23, [x2, #352]
    ldp     q24, q25, [x2, #384]
    ldp     q26, q27, [x2, #416]
    ldp     q28, q29, [x2, #448]
    ldp     q30, q31, [x2, #480]
    ldp     x2, x3, [sp, #264]
    msr     fpcr, x2
    msr     fpsr, x3
    ldp     x2, x3, [sp, #248]
    msr     elr_el1, x2
    msr     spsr_el1, x3
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x19, [sp, #144]
    ldp     x20, x21, [sp, #160]
    ldp     x22, x23, [sp, #176]
    ldp     x24, x25, [sp, #192]
    ldp     x26, x27, [sp, #208]
    ldp     x28, x29, [sp, #224]
    ldr     x30, [sp, #240]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #FRAME_SIZE
    eret

// ---------------------------------------------------------------------------
// u64 fp_round(u64 seed, u64 spin, u64 fpcr, u64 fpsr)
//
// Writes a pattern derived from `seed` into all 32 V registers (both
// halves) and writes FPCR/FPSR, then yields: `spin` == 0 waits in WFI with
// IRQs masked and takes the pending interrupt after it (the caller armed a
// timer), otherwise it spins `spin` iterations with IRQs unmasked. Then it
// checks every register. Returns a bitmap of the registers that changed:
// bit n = Vn, bit 32 = FPCR, bit 33 = FPSR (compared with what read back
// right after the write, since some bits may be RAZ/WI).
.macro setv n
    add     x9, x9, x10
    fmov    d\n, x9
    mvn     x11, x9
    ror     x11, x11, #\n
    mov     v\n\().d[1], x11
.endm
.macro chkv n
    add     x9, x9, x10
    mvn     x11, x9
    ror     x11, x11, #\n
    fmov    x12, d\n
    mov     x13, v\n\().d[1]
    cmp     x12, x9
    ccmp    x13, x11, #0, eq
    cset    x14, ne
    lsl     x14, x14, #\n
    orr     x8, x8, x14
.endm

.global fp_round
fp_round:
    ldr     x10, =0x9e3779b97f4a7c15
    msr     daifset, #2
    msr     fpcr, x2
    msr     fpsr, x3
    isb
    mrs     x2, fpcr
    mrs     x3, fpsr
    mov     x9, x0
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    setv \n
    .endr
    cbnz    x1, 8f
    dsb     sy
    wfi
    msr     daifclr, #2
    isb
    nop
    nop
    msr     daifset, #2
    b       9f
8:  msr     daifclr, #2
7:  subs    x1, x1, #1
    b.ne    7b
    msr     daifset, #2
9:  mov     x8, #0
    mov     x9, x0
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    chkv \n
    .endr
    mrs     x12, fpcr
    cmp     x12, x2
    cset    x14, ne
    orr     x8, x8, x14, lsl #32
    mrs     x12, fpsr
    cmp     x12, x3
    cset    x14, ne
    orr     x8, x8, x14, lsl #33
    msr     daifclr, #2
    mov     x0, x8
    ret
.ltorg

.section .bss.pagetable, "aw", %nobits
.balign 4096
__page_table:
    .space 4096
.balign 16
.global __stacks
__stacks:
    .space STACK_SIZE * (NCPU_MAX + 1)
