/*
 * kestrel LoongArch64 entry points. Included by mod.rs through global_asm!
 * (operands: {stacks}, {stack_size}, {max_cpus}, {primary}, {secondary},
 * {dmw0}, {dmw1}, {pa_mask}, {hw_to_index}, {efi_main}).
 *
 * The image starts with a PE/COFF header (.kestrel_pe_head), so that the raw
 * image (llvm-objcopy -O binary: file offset = RVA) is also a UEFI
 * application for LoongArch64 (machine 0x6264), entered at
 * kestrel_efi_entry. The ELF is entered at _start (QEMU -kernel).
 *
 * Both entries are reached in direct-address (DA) mode at their physical
 * address, PLV0, interrupts off. They run position-independently until they
 * have set the direct-map windows and jumped to the link address
 * (0x9000_0000_0020_0000 + ...), then enable paging (CRMD.PG) so the DMWs
 * translate. No FP/SIMD register is used; EUEN stays 0.
 */
/*
 * The PE/COFF view (PE/COFF specification: MS-DOS stub signature, COFF
 * file header, PE32+ optional header, section table). kestrel is not
 * position independent: it runs in the DMW windows at VA = 0x9000... | PA
 * and must lie at the physical address it was linked for. ImageBase says
 * that address and the relocations are marked stripped, so a UEFI loader
 * places the image there (or refuses it) and never relocates it.
 */
    .section .kestrel_pe_head, "a"
kestrel_la_pe_dos:
    .ascii  "MZ"
    .org    kestrel_la_pe_dos + 0x3c
    .long   kestrel_la_pe_header - kestrel_la_pe_dos
    .balign 8
kestrel_la_pe_header:
    .ascii  "PE\0\0"
    .short  0x6264                  /* Machine: LoongArch64 */
    .short  2                       /* NumberOfSections */
    .long   0                       /* TimeDateStamp */
    .long   0                       /* PointerToSymbolTable */
    .long   0                       /* NumberOfSymbols */
    .short  kestrel_la_pe_sections - kestrel_la_pe_optional
    .short  0x0207                  /* relocations stripped, executable, no line numbers, no debug info */
kestrel_la_pe_optional:
    .short  0x20b                   /* PE32+ */
    .byte   1, 0                    /* linker version */
    .long   __efi_text_size         /* SizeOfCode */
    .long   __efi_data_file_size    /* SizeOfInitializedData */
    .long   __efi_bss_size          /* SizeOfUninitializedData */
    .long   __efi_entry_rva         /* AddressOfEntryPoint: kestrel_efi_entry */
    .long   __efi_text_rva          /* BaseOfCode */
    .quad   __efi_image_base        /* ImageBase: the physical link address */
    .long   4096                    /* SectionAlignment */
    .long   4096                    /* FileAlignment */
    .short  0, 0, 0, 0, 0, 0        /* OS, image, subsystem versions */
    .long   0                       /* Win32VersionValue */
    .long   __efi_image_size        /* SizeOfImage (with .bss) */
    .long   __efi_text_rva          /* SizeOfHeaders: the first page */
    .long   0                       /* CheckSum */
    .short  10                      /* Subsystem: EFI application */
    .short  0                       /* DllCharacteristics */
    .quad   0, 0, 0, 0              /* stack and heap reserve/commit */
    .long   0                       /* LoaderFlags */
    .long   6                       /* NumberOfRvaAndSizes */
    .quad   0, 0, 0, 0, 0, 0        /* export .. base relocation: none */
kestrel_la_pe_sections:
    .ascii  ".text\0\0\0"
    .long   __efi_text_size         /* VirtualSize */
    .long   __efi_text_rva          /* VirtualAddress */
    .long   __efi_text_size         /* SizeOfRawData */
    .long   __efi_text_rva          /* PointerToRawData */
    .long   0, 0
    .short  0, 0
    .long   0x60000020              /* code, execute, read */
    .ascii  ".data\0\0\0"            /* read-only data, data, .bss */
    .long   __efi_data_size
    .long   __efi_data_rva
    .long   __efi_data_file_size
    .long   __efi_data_rva
    .long   0, 0
    .short  0, 0
    .long   0xc0000040              /* initialised data, read, write */

    .section .text.entry, "ax"

    .macro KESTREL_ENTER_VIRTUAL
    li.d    $t0, {dmw0}             /* DMW0: 0x8000..., uncached, PLV0 */
    csrwr   $t0, 0x180
    li.d    $t0, {dmw1}             /* DMW1: 0x9000..., cached, PLV0 */
    csrwr   $t0, 0x181
    csrwr   $zero, 0x182
    csrwr   $zero, 0x183
    la.abs  $t0, 1f                 /* DA mode: PC = VA[47:0], so the */
    jirl    $zero, $t0, 0           /* link address is reachable now */
1:
    li.w    $t0, 0xb0               /* CRMD: PLV0, IE=0, PG=1, DATF=DATM=CC */
    csrwr   $t0, 0x0
    csrwr   $zero, 0x1              /* PRMD = 0 */
    csrwr   $zero, 0x2              /* EUEN = 0: no FP/LSX/LASX for kestrel */
    csrwr   $zero, 0x4              /* ECFG = 0: all lines masked, VS = 0 */
    .endm

    /* Boot CPU: a0 = 1, a1 = command line PA, a2 = EFI system table PA
     * (QEMU's direct boot), or a0 = a1 = a2 = 0 from kestrel_la_efi_enter. */
    .global _start
_start:
    KESTREL_ENTER_VIRTUAL
    /* Clear .bss (it holds the stacks and the heap). */
    la.abs  $t0, __bss_start
    la.abs  $t1, __bss_end
2:
    bgeu    $t0, $t1, 3f
    st.d    $zero, $t0, 0
    addi.d  $t0, $t0, 8
    b       2b
3:
    /* Logical index 0 until the device tree says otherwise (SAVE1). */
    csrwr   $zero, 0x31
    /* Stack slot 0 belongs to the boot CPU. */
    la.abs  $sp, {stacks}
    li.d    $t0, {stack_size}
    add.d   $sp, $sp, $t0
    move    $fp, $zero
    move    $ra, $zero
    bl      {primary}
    b       kestrel_la_park

    /*
     * Secondary CPU, jumped to by the firmware's park loop with the
     * physical address from mailbox 0 (direct-address mode, or the
     * firmware's identity paging).
     */
    .global kestrel_la_secondary_entry
kestrel_la_secondary_entry:
    KESTREL_ENTER_VIRTUAL
    /* Logical index + 1 by physical core ID (CSR.CPUID [8:0]), written by
     * the boot CPU before it sent the IPI; 0: not started by kestrel. */
    csrrd   $t0, 0x20
    andi    $t0, $t0, 0x1ff
    slli.d  $t0, $t0, 1
    la.abs  $t1, {hw_to_index}
    add.d   $t1, $t1, $t0
    ld.hu   $a0, $t1, 0
    beqz    $a0, kestrel_la_park
    addi.d  $a0, $a0, -1
    li.d    $t0, {max_cpus}
    bgeu    $a0, $t0, kestrel_la_park
    move    $t0, $a0
    csrwr   $t0, 0x31               /* SAVE1 = logical index */
    /* Stack slot index + 1: top = stacks + (index + 2) * stack_size. */
    addi.d  $t0, $a0, 2
    li.d    $t1, {stack_size}
    mul.d   $t0, $t0, $t1
    la.abs  $sp, {stacks}
    add.d   $sp, $sp, $t0
    move    $fp, $zero
    move    $ra, $zero
    bl      {secondary}

    .global kestrel_la_park
kestrel_la_park:
    idle    0
    b       kestrel_la_park

    /*
     * UEFI entry: a0 = ImageHandle, a1 = SystemTable, ra = back to the
     * firmware; paging on with the firmware's identity map, at the physical
     * load address. Checks that the image lies where it was linked, sets
     * kestrel's DMW windows and calls {efi_main} at its link address (the
     * firmware's code, stack and tables stay reachable through its page
     * tables). {efi_main} returns only if kestrel cannot run here (a0 =
     * the EFI status); the firmware's windows are then put back.
     */
    .global kestrel_efi_entry
kestrel_efi_entry:
    addi.d  $sp, $sp, -32
    st.d    $ra, $sp, 0
    st.d    $s0, $sp, 8
    st.d    $s1, $sp, 16
    la.pcrel $t0, kestrel_efi_entry
    la.abs  $t1, kestrel_efi_entry
    li.d    $t2, {pa_mask}
    and     $t1, $t1, $t2
    bne     $t0, $t1, 8f
    csrrd   $s0, 0x180
    csrrd   $s1, 0x181
    li.d    $t0, {dmw0}
    csrwr   $t0, 0x180
    li.d    $t0, {dmw1}
    csrwr   $t0, 0x181
    la.abs  $t0, 1f
    jirl    $zero, $t0, 0
1:
    bl      {efi_main}
    /* Back to the physical alias before the windows are given back. */
    la.abs  $t0, 2f
    li.d    $t1, {pa_mask}
    and     $t0, $t0, $t1
    jirl    $zero, $t0, 0
2:
    csrwr   $s0, 0x180
    csrwr   $s1, 0x181
    b       9f
8:
    li.d    $a0, 0x8000000000000001 /* EFI_LOAD_ERROR: not at its link address */
9:
    ld.d    $ra, $sp, 0
    ld.d    $s0, $sp, 8
    ld.d    $s1, $sp, 16
    addi.d  $sp, $sp, 32
    jirl    $zero, $ra, 0

    /*
     * After ExitBootServices (called from efi.rs at the link address):
     * enter _start in the state QEMU's direct boot gives: direct-address
     * mode, PLV0, interrupts off, no TLB entry left from the firmware, its
     * timer stopped and every interrupt line masked; a0 = a1 = a2 = 0 (the
     * hand-over is in efi.rs's HANDOFF). In DA mode the fetch address is
     * the low bits of the PC, which is where the image lies.
     */
    .global kestrel_la_efi_enter
kestrel_la_efi_enter:
    li.w    $t0, 0x8                /* CRMD: DA = 1, PG = 0, PLV0, IE = 0 */
    csrwr   $t0, 0x0
    invtlb  0, $zero, $zero
    csrwr   $zero, 0x4              /* ECFG: all lines masked */
    csrwr   $zero, 0x41             /* TCFG: the firmware's timer off */
    li.w    $t0, 1
    csrwr   $t0, 0x44               /* TICLR: drop a pending timer interrupt */
    move    $a0, $zero
    move    $a1, $zero
    move    $a2, $zero
    b       _start
