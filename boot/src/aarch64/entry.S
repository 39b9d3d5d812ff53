// kestrel arm64 entry code: the Linux arm64 Image header, the boot CPU's
// entry (self-relocation, .bss, stack) and the secondary CPUs' entry.
// No FP/SIMD register is touched here.

    .section .text.head, "ax"
    .global _start
_start:
    // code0/code1: a plain branch (no EFI stub).
    b       kestrel_primary_entry
    .long   0
    .quad   0                       // text_offset: load at a 2 MiB boundary
    .quad   __image_size            // image_size: file + .bss (linker script)
    .quad   0xa                     // flags: LE (bit 0 = 0), 4K pages (bits 2:1 = 1),
                                    // anywhere in physical memory (bit 3)
    .quad   0                       // res2
    .quad   0                       // res3
    .quad   0                       // res4
    .ascii  "ARM\x64"               // magic at 0x38
    .long   0                       // res5: no PE header

    .text
    .balign 4
// Entered with MMU off, x0 = DTB physical address, at the loader's EL
// (EL2 expected: checked in Rust, which can then report it on the UART).
kestrel_primary_entry:
    msr     daifset, #0xf
    mov     x19, x0                 // DTB
    mrs     x20, CurrentEL
    ubfx    x20, x20, #2, #2        // exception level

    // Until Rust installs the real vectors, any exception (e.g. the .bss
    // clear running past the end of RAM) prints a fixed message on the
    // early-console guess instead of hanging silently.
    adrp    x1, kestrel_early_vectors
    add     x1, x1, :lo12:kestrel_early_vectors
    cmp     x20, #2
    b.ne    10f
    msr     vbar_el2, x1
    b       12f
10: cmp     x20, #1
    b.ne    11f
    msr     vbar_el1, x1
    b       12f
11: cmp     x20, #3
    b.ne    12f
    msr     vbar_el3, x1
12: isb

    // Self-relocation: the image is linked at 0, so the runtime address of
    // __image_start is the load offset. Every R_AARCH64_RELATIVE entry says
    // *(base + r_offset) = base + r_addend. Other types are counted (x22)
    // and reported once a console exists.
    adrp    x21, __image_start
    add     x21, x21, :lo12:__image_start
    adrp    x1, __rela_start
    add     x1, x1, :lo12:__rela_start
    adrp    x2, __rela_end
    add     x2, x2, :lo12:__rela_end
    mov     x22, #0
1:  cmp     x1, x2
    b.hs    3f
    ldp     x3, x4, [x1], #16       // r_offset, r_info
    ldr     x5, [x1], #8            // r_addend
    and     x6, x4, #0xffffffff     // ELF64_R_TYPE
    cmp     x6, #1027               // R_AARCH64_RELATIVE
    b.ne    2f
    add     x5, x5, x21
    str     x5, [x21, x3]
    b       1b
2:  add     x22, x22, #1
    b       1b
3:
    // Zero .bss (16-byte aligned start, 4 KiB aligned end).
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
4:  cmp     x1, x2
    b.hs    5f
    stp     xzr, xzr, [x1], #16
    b       4b
5:
    adrp    x1, kestrel_boot_stack_top
    add     x1, x1, :lo12:kestrel_boot_stack_top
    mov     sp, x1
    mov     x29, #0
    mov     x30, #0

    mov     x0, x19                 // dtb
    mov     x1, x20                 // current EL
    mov     x2, x22                 // unsupported relocations
    mov     x3, x21                 // load address
    bl      kestrel_boot_primary
6:  wfi
    b       6b

// Secondary CPUs, started by PSCI CPU_ON with context = physical address of
// their CpuBoot block (kernel/src/arch/aarch64/smp.rs, repr(C)):
//   0 mair, 8 tcr, 16 ttbr0, 24 sctlr, 32 vbar, 40 stack_top, 48 index
// MMU off, at EL2. The MMU is turned on before anything is written to
// memory, so the stack is only ever used cacheable.
    .global kestrel_secondary_entry
    .balign 4
kestrel_secondary_entry:
    msr     daifset, #0xf
    mov     x19, x0
    ldp     x1, x2, [x19, #0]       // mair, tcr
    ldp     x3, x4, [x19, #16]      // ttbr0, sctlr
    ldp     x5, x6, [x19, #32]      // vbar, stack_top
    ldr     x7, [x19, #48]          // logical index
    mov     x8, #0x38               // HCR_EL2: AMO, IMO, FMO (IRQs to EL2)
    orr     x8, x8, #(1 << 31)      //          RW; E2H = 0 (= mmu::HCR_BOOT)
    msr     hcr_el2, x8
    msr     mair_el2, x1
    msr     tcr_el2, x2
    msr     ttbr0_el2, x3
    msr     vbar_el2, x5
    msr     tpidr_el2, x7
    isb
    tlbi    alle2
    dsb     nsh
    isb
    msr     sctlr_el2, x4
    isb
    ic      iallu
    dsb     nsh
    isb
    mov     sp, x6
    mov     x29, #0
    mov     x30, #0
    mov     x0, x7
    bl      kestrel_boot_secondary
7:  wfi
    b       7b

// Early exception vectors: every entry prints one line on the PL011 at
// 0x0900_0000 (QEMU virt; the same guess as kernel::arch::aarch64::pl011::
// EARLY_GUESS) and halts. Position independent, no stack, no memory writes
// other than the UART.
    .balign 2048
kestrel_early_vectors:
    .rept   16
    .balign 0x80
    b       kestrel_early_trap
    .endr
kestrel_early_trap:
    movz    x0, #0x0900, lsl #16
    adr     x1, kestrel_early_msg
1:  ldrb    w2, [x1], #1
    cbz     w2, 3f
2:  ldr     w3, [x0, #0x18]         // UARTFR
    tbnz    w3, #5, 2b              // TXFF
    str     w2, [x0]                // UARTDR
    b       1b
3:  wfi
    b       3b
kestrel_early_msg:
    .asciz  "\r\nkestrel: FATAL: exception during early boot, before the console was set up (image_size beyond RAM? bad load address?); halting\r\n"
    .balign 4

    .section .bss.kestrel_boot_stack, "aw", %nobits
    .balign 4096
kestrel_boot_stack:
    .space  0x10000
kestrel_boot_stack_top:
