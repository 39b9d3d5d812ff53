// kestrel arm64 entry code: the Linux arm64 Image header, the boot CPU's
// entry (self-relocation, .bss, stack) and the secondary CPUs' entry.
// No FP/SIMD register is touched here.

    .section .text.head, "ax"
    .global _start
_start:
    // code0: an instruction whose first two bytes are "MZ" (0x4d 0x5a), the
    // DOS signature PE/COFF loaders look for; it only writes x13, which
    // nothing reads. code1: the branch to the entry of the Linux protocol.
    add     x13, x18, #22           // 0x91005a4d
    b       kestrel_primary_entry
    .quad   0                       // text_offset: load at a 2 MiB boundary
    .quad   __image_size            // image_size: file + .bss (linker script)
    .quad   0xa                     // flags: LE (bit 0 = 0), 4K pages (bits 2:1 = 1),
                                    // anywhere in physical memory (bit 3)
    .quad   0                       // res2
    .quad   0                       // res3
    .quad   0                       // res4
    .ascii  "ARM\x64"               // magic at 0x38
    .long   kestrel_pe_header - _start  // 0x3c: where the PE header is

// The PE32+ header that makes the same file a UEFI application for arm64
// (PE/COFF specification: COFF file header, optional header, section
// table). The file is laid out as it lies in memory (file offset = RVA,
// both aligned to 4 KiB), so a loader copies it as is; kestrel relocates
// itself, so no base relocations are listed and any load address works.
    .balign 8
kestrel_pe_header:
    .ascii  "PE\0\0"
    .short  0xaa64                  // Machine: arm64
    .short  2                       // NumberOfSections
    .long   0                       // TimeDateStamp
    .long   0                       // PointerToSymbolTable
    .long   0                       // NumberOfSymbols
    .short  kestrel_pe_sections - kestrel_pe_optional   // SizeOfOptionalHeader
    .short  0x0206                  // Characteristics: executable, no line numbers, no debug info
kestrel_pe_optional:
    .short  0x20b                   // Magic: PE32+
    .byte   1, 0                    // linker version
    .long   __efi_text_size         // SizeOfCode
    .long   __efi_data_file_size    // SizeOfInitializedData
    .long   __efi_bss_size          // SizeOfUninitializedData
    .long   __efi_entry_rva         // AddressOfEntryPoint: kestrel_efi_entry
    .long   __efi_text_rva          // BaseOfCode
    .quad   0                       // ImageBase
    .long   4096                    // SectionAlignment
    .long   4096                    // FileAlignment
    .short  0, 0                    // OS version
    .short  0, 0                    // image version
    .short  0, 0                    // subsystem version
    .long   0                       // Win32VersionValue
    .long   __image_size            // SizeOfImage (with .bss)
    .long   __efi_text_rva          // SizeOfHeaders: the first page
    .long   0                       // CheckSum
    .short  10                      // Subsystem: EFI application
    .short  0                       // DllCharacteristics
    .quad   0, 0, 0, 0              // stack and heap reserve/commit: unused by UEFI
    .long   0                       // LoaderFlags
    .long   6                       // NumberOfRvaAndSizes
    .quad   0, 0, 0, 0, 0, 0        // export, import, resource, exception,
                                    // certificate, base relocation: none
kestrel_pe_sections:
    .ascii  ".text\0\0\0"
    .long   __efi_text_size         // VirtualSize
    .long   __efi_text_rva          // VirtualAddress
    .long   __efi_text_size         // SizeOfRawData
    .long   __efi_text_rva          // PointerToRawData
    .long   0, 0                    // relocations, line numbers
    .short  0, 0
    .long   0x60000020              // code, execute, read
    .ascii  ".data\0\0\0"            // read-only data, GOT, relocations, data, .bss
    .long   __efi_data_size         // VirtualSize (with .bss)
    .long   __efi_data_rva          // VirtualAddress
    .long   __efi_data_file_size    // SizeOfRawData
    .long   __efi_data_rva          // PointerToRawData
    .long   0, 0
    .short  0, 0
    .long   0xc0000040              // initialised data, read, write

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

    // Self-relocation (kestrel_apply_relocs): x21 = load address, x22 =
    // relocations of an unsupported type, reported once a console exists.
    bl      kestrel_apply_relocs
    mov     x21, x0
    mov     x22, x1
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

// The image is linked at 0, so the runtime address of __image_start is the
// load offset. Every R_AARCH64_RELATIVE entry says *(base + r_offset) =
// base + r_addend (applying them twice is harmless: each is a plain
// store). Returns x0 = load address, x1 = entries of any other type (not
// applied). Clobbers x2-x6; no stack.
kestrel_apply_relocs:
    adrp    x0, __image_start
    add     x0, x0, :lo12:__image_start
    adrp    x2, __rela_start
    add     x2, x2, :lo12:__rela_start
    adrp    x3, __rela_end
    add     x3, x3, :lo12:__rela_end
    mov     x1, #0
1:  cmp     x2, x3
    b.hs    3f
    ldp     x4, x5, [x2], #16       // r_offset, r_info
    ldr     x6, [x2], #8            // r_addend
    and     x5, x5, #0xffffffff     // ELF64_R_TYPE
    cmp     x5, #1027               // R_AARCH64_RELATIVE
    b.ne    2f
    add     x6, x6, x0
    str     x6, [x0, x4]
    b       1b
2:  add     x1, x1, #1
    b       1b
3:  ret

// The UEFI entry point (AddressOfEntryPoint): x0 = image handle, x1 =
// system table, MMU and caches on with an identity map, on the firmware's
// stack. Relocates the image, lets Rust (efi.rs) take what kestrel needs
// from the firmware and exit boot services, then turns the MMU and caches
// off (Rust cleaned the image, the DTB or the ACPI tables to the point of
// coherency) and enters as the Linux protocol would: kestrel_primary_entry
// with x0 = DTB (0 when the board comes from ACPI: the UEFI stage left the
// RSDP for the boot path). Rust returns x0 = go, x1 = DTB; if it could not
// get that far x0 is 0 and the firmware gets EFI_LOAD_ERROR back (boot
// services still running).
    .global kestrel_efi_entry
    .balign 4
kestrel_efi_entry:
    stp     x29, x30, [sp, #-48]!
    mov     x29, sp
    stp     x19, x20, [sp, #16]
    stp     x21, x22, [sp, #32]
    mov     x19, x0
    mov     x20, x1
    bl      kestrel_apply_relocs
    mov     x3, x0                  // load address
    mov     x2, x1                  // unsupported relocations
    mov     x0, x19
    mov     x1, x20
    bl      kestrel_efi_main
    cbnz    x0, 1f
    ldp     x21, x22, [sp, #32]
    ldp     x19, x20, [sp, #16]
    ldp     x29, x30, [sp], #48
    mov     x0, #1
    orr     x0, x0, #(1 << 63)      // EFI_LOAD_ERROR
    ret
1:  mov     x19, x1                 // the DTB (or 0); boot services are gone
    msr     daifset, #0xf
    mrs     x1, sctlr_el2
    movz    x2, #0x1005             // I (12), C (2), M (0)
    bic     x1, x1, x2
    dsb     sy
    msr     sctlr_el2, x1
    isb
    ic      iallu
    tlbi    alle2
    dsb     nsh
    isb
    mov     x0, x19
    b       kestrel_primary_entry

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
