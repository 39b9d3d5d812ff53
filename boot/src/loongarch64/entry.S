/*
 * kestrel LoongArch64 entry points. Included by mod.rs through global_asm!
 * (operands: {stacks}, {stack_size}, {max_cpus}, {primary}, {secondary},
 * {dmw0}, {dmw1}).
 *
 * Both entries are reached in direct-address (DA) mode at their physical
 * address, PLV0, interrupts off. They run position-independently until they
 * have set the direct-map windows and jumped to the link address
 * (0x9000_0000_0020_0000 + ...), then enable paging (CRMD.PG) so the DMWs
 * translate. No FP/SIMD register is used; EUEN stays 0.
 */
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

    /* Boot CPU: a0 = 1, a1 = command line PA, a2 = EFI system table PA. */
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
     * physical address from mailbox 0. Mailbox 1 holds the logical index.
     */
    .global kestrel_la_secondary_entry
kestrel_la_secondary_entry:
    KESTREL_ENTER_VIRTUAL
    li.d    $t1, 0x1028
    iocsrrd.d $a0, $t1
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
