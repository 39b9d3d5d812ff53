@ kestrel's AArch32 attacker: a small A32/T32 program for the hostile case
@ `arm64-aarch32-hostile` (configs/test/arm64-aarch32-hostile.toml), where
@ it shares one pCPU with a 64-bit victim VM. For at least HOLD_S seconds
@ of its counter it repeats rounds of:
@
@ - wfx: WFI (an SGI pending behind the CPSR mask, so none waits), WFE
@   with and without an event, conditional WFI that fails, and the same
@   from T32 (16-bit, ESR.IL = 0);
@ - calls: PSCI and kestrel calls over HVC32 and SMC32 with wrong
@   arguments, each with its required answer (SMC64 ids, CPU_ON to no
@   vCPU and to itself, AFFINITY_INFO of nobody, PV IPI windows that are
@   empty, huge or start past the vCPUs, unknown ids, a failed
@   conditional SMC), then pseudo-random ids and arguments;
@ - cp-walk: a deterministic xorshift walk over the MCR/MRC, MCRR/MRRC
@   (cp14 and cp15) and LDC/STC (cp14) encodings with random conditions,
@   in A32 and in T32 inside an IT block, each executed from a slot it
@   writes; its UNDEF handler counts and resumes the walk (writes that
@   would pull the attacker's own floor away, SCTLR, CPACR, TTBRs, DACR,
@   VBAR, MDBGEN, are done as reads);
@ - mmio: loads and stores with the banked SP, LR (and fiq R8-R12) of
@   irq, abt, und and fiq mode to unmapped addresses (each must be a data
@   abort to it) and to the GIC (words; the offsets its model does not
@   take are aborts too, counted).
@
@ Then it prints its counts and `RESULT: <p> passed, <f> failed` and
@ powers off. Position-independent (r11 = the image's base outside fiq
@ mode); handlers return by switching mode, as the test guest's do
@ (guest.S explains why). Build: assemble.sh, as guest.S.

        .syntax unified
        .arch armv7-a
        .arch_extension virt
        .arch_extension sec
        .arm
        .text

        .equ UART, 0x09000000
        .equ GICD, 0x08000000
        .equ GICR, 0x080A0000
        .equ PSCI_VERSION, 0x84000000
        .equ PSCI_CPU_ON, 0x84000003
        .equ PSCI_AFFINITY_INFO, 0x84000004
        .equ PSCI_SYSTEM_OFF, 0x84000008
        .equ KESTREL_IPI, 0xC6000002
        .equ HOLD_S, 3
        .equ WALK_N, 400                @ cp accesses per round
        .equ MMIO_N, 16                 @ accesses per mode per round
        .equ WFX_N, 64                  @ WFI/WFE groups per round
        .equ RAND_CALLS, 32             @ random calls per round

        .macro  addr reg, label
        ldr     \reg, =(\label - _start)
        add     \reg, \reg, r11
        .endm

        @ var_inc label: increments the word at label (clobbers r0, r1)
        .macro  var_inc label
        addr    r0, \label
        ldr     r1, [r0]
        add     r1, r1, #1
        str     r1, [r0]
        .endm

        @ set_var label, stub: the word at label = the address of stub (r0, r1)
        .macro  set_var label, stub
        addr    r0, \stub
        addr    r1, \label
        str     r0, [r1]
        .endm

_start:
        adr     r11, _start
        add     sp, r11, #0x10000       @ svc
        cps     #0x1b
        add     sp, r11, #0x10800       @ und
        cps     #0x17
        add     sp, r11, #0x11000       @ abt
        cps     #0x12
        add     sp, r11, #0x11800       @ irq
        cps     #0x11
        add     sp, r11, #0x12000       @ fiq
        cps     #0x13
        addr    r0, vectors
        mcr     p15, 0, r0, c12, c0, 0
        isb
        set_var walk_resume, unexpected
        set_var dabt_resume, unexpected
        addr    r0, s_start
        bl      puts
        @ end = CNTVCT + HOLD_S * CNTFRQ
        mrc     p15, 0, r0, c14, c0, 0
        mov     r1, #HOLD_S
        umull   r2, r3, r0, r1
        mrrc    p15, 1, r0, r1, c14
        adds    r2, r2, r0
        adc     r3, r3, r1
        addr    r0, end_time
        str     r2, [r0]
        str     r3, [r0, #4]
        mov     r10, #0                 @ rounds
round:
        bl      wfx
        bl      calls
        bl      cp_walk
        bl      mmio
        add     r10, r10, #1
        mrrc    p15, 1, r0, r1, c14
        addr    r2, end_time
        ldr     r3, [r2]
        ldr     r2, [r2, #4]
        subs    r0, r0, r3
        sbcs    r1, r1, r2
        bmi     round

@ The report: a PASS/FAIL line per phase, then the rounds.
        addr    r0, wfx_count
        ldr     r0, [r0]
        bl      nonzero
        bl      verdict
        addr    r0, s_wfx
        bl      puts
        addr    r0, wfx_count
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_wfx2
        bl      puts
        @ calls: every fixed answer as required
        addr    r0, call_bad
        ldr     r0, [r0]
        cmp     r0, #0
        bl      verdict
        addr    r0, s_calls
        bl      puts
        addr    r0, call_count
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_calls2
        bl      puts
        addr    r0, call_bad
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_calls3
        bl      puts
        @ cp-walk: it ended, and some encodings were UNDEFINED
        addr    r0, und_count
        ldr     r0, [r0]
        bl      nonzero
        bl      verdict
        addr    r0, s_walk
        bl      puts
        addr    r0, walk_count
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_walk2
        bl      puts
        addr    r0, und_count
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_walk3
        bl      puts
        addr    r0, t32_count
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_walk4
        bl      puts
        @ mmio: every access to nowhere aborted (and there were some)
        addr    r0, abort_expected
        ldr     r0, [r0]
        addr    r1, nowhere_missed
        ldr     r1, [r1]
        cmp     r0, #0
        moveq   r1, #1
        cmp     r1, #0
        bl      verdict
        addr    r0, s_mmio
        bl      puts
        addr    r0, mmio_count
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_mmio2
        bl      puts
        addr    r0, abort_expected
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_mmio3
        bl      puts
        addr    r0, nowhere_missed
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_mmio4
        bl      puts
        addr    r0, gic_aborts
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_mmio5
        bl      puts
        addr    r0, s_rounds
        bl      puts
        mov     r0, r10
        bl      putdec
        bl      newline
finish:
        addr    r0, s_result
        bl      puts
        addr    r0, passed
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_passed
        bl      puts
        addr    r0, failed
        ldr     r0, [r0]
        bl      putdec
        addr    r0, s_failed
        bl      puts
        ldr     r0, =PSCI_SYSTEM_OFF
        hvc     #0
        b       .

@ An exception nothing expected: say so, count it as a failure, end.
unexpected:
        cps     #0x13
1:      adr     r11, 1b
        ldr     r0, =(1b - _start)
        sub     r11, r11, r0
        addr    r0, s_unexpected
        bl      puts
        var_inc failed
        b       finish

@ nonzero: flags EQ iff r0 != 0 (clobbers r0)
nonzero:
        cmp     r0, #0
        moveq   r0, #1
        movne   r0, #0
        cmp     r0, #0
        bx      lr

@ verdict: flags EQ = pass: prints "PASS " or "FAIL " (the caller prints
@ the rest of the line) and counts it (clobbers r0-r2)
verdict:
        push    {r4, lr}
        addr    r4, passed
        addr    r0, failed
        movne   r4, r0
        addr    r0, s_pass
        addr    r1, s_fail
        movne   r0, r1
        bl      puts
        ldr     r1, [r4]
        add     r1, r1, #1
        str     r1, [r4]
        pop     {r4, pc}

@ ---------------------------------------------------------------------
@ wfx: the GIC set up with SGI 1 pending behind the mask, then WFI and
@ WFE floods, A32 and T32.
wfx:
        push    {r4, lr}
        bl      gic_setup
        mov     r4, #WFX_N
1:      wfi
        sev
        wfe
        wfe
        cmp     r4, r4                  @ Z set: NE fails, no trap
        wfine
        wfieq
        addr    r0, thumb_wfx
        orr     r0, r0, #1
        blx     r0
        var_inc wfx_count
        subs    r4, r4, #1
        bne     1b
        pop     {r4, pc}

@ GICv3 (kestrel's map): distributor with ARE and both groups, the first
@ redistributor awake with SGIs 0-15 enabled in Group 1 at priority 0xA0,
@ the CPU interface open (SRE, PMR 0xFF, Group 1 on), then SGI 1 to
@ itself: pending for good, as nothing acknowledges it.
gic_setup:
        ldr     r1, =GICD
        mov     r0, #0x10
        str     r0, [r1]
        mov     r0, #0x13
        str     r0, [r1]
        ldr     r1, =GICR
        ldr     r0, [r1, #0x14]
        bic     r0, r0, #2
        str     r0, [r1, #0x14]
        add     r1, r1, #0x10000        @ SGI_base
        mvn     r0, #0
        str     r0, [r1, #0x80]         @ IGROUPR0
        ldr     r0, =0xa0a0a0a0
        str     r0, [r1, #0x400]
        ldr     r0, =0xffff
        str     r0, [r1, #0x100]        @ ISENABLER0
        mrc     p15, 0, r0, c12, c12, 5 @ ICC_SRE
        orr     r0, r0, #1
        mcr     p15, 0, r0, c12, c12, 5
        isb
        mov     r0, #0xff
        mcr     p15, 0, r0, c4, c6, 0   @ ICC_PMR
        mov     r0, #1
        mcr     p15, 0, r0, c12, c12, 7 @ ICC_IGRPEN1
        isb
        mov     r0, #1                  @ target list: Aff0 0
        orr     r0, r0, #(1 << 24)      @ INTID 1
        mov     r1, #0
        mcrr    p15, 0, r0, r1, c12     @ ICC_SGI1R
        isb
        bx      lr

@ ---------------------------------------------------------------------
@ calls: fixed wrong calls with their required answers, then random ones.
calls:
        push    {r4-r8, lr}
        addr    r4, call_table
1:      ldm     r4!, {r0-r3, r5}        @ r0-r3, the answer
        cmp     r0, #0
        beq     2f
        hvc     #0
        bl      call_check
        b       1b
2:      @ SMC32 (trapped): PSCI_VERSION; then an SMC whose condition fails
        ldr     r0, =PSCI_VERSION
        smc     #0
        ldr     r5, =0x10001
        bl      call_check
        ldr     r0, =0x1234
        cmp     r0, r0                  @ Z set: NE fails
        smcne   #0
        ldr     r5, =0x1234
        bl      call_check
        @ PV IPI: a huge window from vCPU 0 (0 or INVALID_PARAMETERS)
        ldr     r0, =KESTREL_IPI
        mvn     r1, #0
        mvn     r2, #0
        mov     r3, #0
        hvc     #0
        cmp     r0, #0
        cmnne   r0, #2
        addr    r0, call_bad
        ldr     r1, [r0]
        addne   r1, r1, #1
        str     r1, [r0]
        var_inc call_count
        @ random ids and arguments (never CPU_SUSPEND/OFF, SYSTEM_*)
        mov     r8, #RAND_CALLS
3:      bl      rand
        mov     r6, r0
        and     r7, r0, #7
        addr    r1, id_tops
        ldrb    r7, [r1, r7]
        lsl     r7, r7, #24
        tst     r6, #0x100
        andeq   r0, r6, #0x1f           @ a small function number
        ldrne   r0, =0xffff
        andne   r0, r6, r0, lsl #8      @ or a wild one
        lsrne   r0, r0, #8
        orr     r0, r0, r7
        @ refuse the calls that stop or block the attacker
        bic     r1, r0, #0x40000000
        ldr     r2, =0x84000001
        cmp     r1, r2
        ldrne   r2, =0x84000002
        cmpne   r1, r2
        ldrne   r2, =0x84000008
        cmpne   r1, r2
        ldrne   r2, =0x84000009
        cmpne   r1, r2
        ldreq   r0, =0x840000ff
        mov     r5, r0
        bl      rand
        mov     r1, r0
        bl      rand
        mov     r2, r0
        bl      rand
        mov     r3, r0
        mov     r0, r5
        tst     r6, #0x200
        bne     4f
        hvc     #0
        b       5f
4:      smc     #0
5:      var_inc call_count
        subs    r8, r8, #1
        bne     3b
        pop     {r4-r8, pc}

@ call_check: r0 = the answer, r5 = the required one (clobbers r0, r1)
call_check:
        cmp     r0, r5
        addr    r0, call_bad
        ldr     r1, [r0]
        addne   r1, r1, #1
        str     r1, [r0]
        addr    r0, call_count
        ldr     r1, [r0]
        add     r1, r1, #1
        str     r1, [r0]
        bx      lr

        .ltorg

@ ---------------------------------------------------------------------
@ cp_walk: WALK_N pseudo-random coprocessor instructions, each written to
@ a slot and run; an UNDEF or abort resumes at walk_next.
cp_walk:
        push    {r4-r9, lr}
        set_var walk_resume, walk_next
        set_var dabt_resume, walk_stub
        mov     r9, #WALK_N
1:      bl      rand
        mov     r6, r0                  @ the encoding's bits
        bl      rand
        mov     r7, r0                  @ more bits
        @ fields: opc1 [2:0], CRn [6:3], CRm [10:7], opc2 [13:11], L [14],
        @ cp14 [15], kind [19:16], cond [23:20] (AL when bit 24 is set)
        and     r0, r6, #0xf00000
        lsr     r8, r0, #20             @ cond
        tst     r6, #0x1000000
        movne   r8, #14
        cmp     r8, #15
        moveq   r8, #14
        ubfx    r0, r6, #3, #4          @ CRn
        ubfx    r1, r6, #14, #1         @ L (1: read)
        tst     r6, #0x8000
        beq     2f
        @ cp14: DBGDSCRext (opc1 0, c0, c2, 2) only read (no MDBGEN)
        ldr     r2, =0x7fff & ~(1 << 14)
        and     r2, r6, r2
        ldr     r3, =(0 | (0 << 3) | (2 << 7) | (2 << 11))
        cmp     r2, r3
        moveq   r1, #1
        b       3f
2:      @ cp15: SCTLR/ACTLR/CPACR (c1), TTBRs/TTBCR (c2), DACR (c3),
        @ VBAR and the GIC CPU interface (c12) only read
        cmp     r0, #1
        cmpne   r0, #2
        cmpne   r0, #3
        cmpne   r0, #12
        moveq   r1, #1
3:      bic     r6, r6, #(1 << 14)
        orr     r6, r6, r1, lsl #14
        ubfx    r2, r6, #16, #4         @ kind
        cmp     r2, #13
        bhs     t32
        cmp     r2, #12
        beq     ldcstc
        cmp     r2, #10
        bhs     mcrr
        @ A32 MCR/MRC: cond 1110 opc1 L CRn Rt coproc opc2 1 CRm
        lsl     r0, r8, #28
        orr     r0, r0, #0x0e000000
        and     r1, r6, #7
        orr     r0, r0, r1, lsl #21     @ opc1
        ubfx    r1, r6, #14, #1
        orr     r0, r0, r1, lsl #20     @ L
        ubfx    r1, r6, #3, #4
        orr     r0, r0, r1, lsl #16     @ CRn
        @ Rt: r4, or APSR_nzcv (15) for some reads
        mov     r2, #4
        tst     r7, #0x3
        bne     4f
        tst     r6, #(1 << 14)
        movne   r2, #15
4:      orr     r0, r0, r2, lsl #12
        tst     r6, #0x8000
        moveq   r1, #15
        movne   r1, #14
        orr     r0, r0, r1, lsl #8      @ coproc
        ubfx    r1, r6, #11, #3
        orr     r0, r0, r1, lsl #5      @ opc2
        orr     r0, r0, #0x10
        ubfx    r1, r6, #7, #4
        orr     r0, r0, r1              @ CRm
        b       run_a32
mcrr:   @ A32 MCRR/MRRC: cond 1100 010 L Rt2 Rt coproc opc1 CRm; Rt r4,
        @ Rt2 r5; 64-bit writes of the TTBRs (CRm 2) and CRm 15 only read
        ubfx    r1, r6, #7, #4          @ CRm
        cmp     r1, #2
        cmpne   r1, #15
        orreq   r6, r6, #(1 << 14)
        lsl     r0, r8, #28
        orr     r0, r0, #0x0c400000
        ubfx    r1, r6, #14, #1
        orr     r0, r0, r1, lsl #20
        orr     r0, r0, #(5 << 16)
        orr     r0, r0, #(4 << 12)
        tst     r6, #0x8000
        moveq   r1, #15
        movne   r1, #14
        orr     r0, r0, r1, lsl #8
        ubfx    r1, r7, #4, #4          @ opc1
        orr     r0, r0, r1, lsl #4
        ubfx    r1, r6, #7, #4
        orr     r0, r0, r1
        b       run_a32
ldcstc: @ A32 LDC/STC p14, c5 (the DCC): cond 110 P U D W L Rn CRd coproc
        @ imm8, U = 1, D = 0, Rn = r4 (pointing nowhere if it ran)
        lsl     r0, r8, #28
        orr     r0, r0, #0x0c800000     @ 110, U
        tst     r7, #0x100
        orrne   r0, r0, #(1 << 24)      @ P
        tst     r7, #0x200
        orrne   r0, r0, #(1 << 21)      @ W
        ubfx    r1, r6, #14, #1
        orr     r0, r0, r1, lsl #20     @ L
        orr     r0, r0, #(4 << 16)      @ Rn
        orr     r0, r0, #(5 << 12)      @ CRd c5
        orr     r0, r0, #(14 << 8)
        and     r1, r7, #0xff
        orr     r0, r0, r1
        mov     r7, #0x10000000         @ r4 below
        b       run_a32_r7
run_a32:
        mov     r7, #0
run_a32_r7:
        addr    r1, slot
        str     r0, [r1]
        ldr     r0, =0xe12fff1e         @ bx lr
        str     r0, [r1, #4]
        dsb
        mcr     p15, 0, r0, c7, c5, 0   @ ICIALLU
        isb
        bl      rand
        mov     r4, r0
        cmp     r7, #0
        movne   r4, r7
        bl      rand
        mov     r5, r0
        addr    r0, slot
        blx     r0
        b       walk_next
t32:    @ T32: IT<cond> then MCR/MRC: 1110 1110 opc1 L CRn | Rt coproc opc2 1 CRm
        ldr     r0, =0xee00
        and     r1, r6, #7
        orr     r0, r0, r1, lsl #5
        ubfx    r1, r6, #14, #1
        orr     r0, r0, r1, lsl #4
        ubfx    r1, r6, #3, #4
        orr     r0, r0, r1              @ hw1
        mov     r2, #(4 << 12)          @ Rt r4
        tst     r6, #0x8000
        orreq   r2, r2, #(15 << 8)
        orrne   r2, r2, #(14 << 8)
        ubfx    r1, r6, #11, #3
        orr     r2, r2, r1, lsl #5
        orr     r2, r2, #0x10
        ubfx    r1, r6, #7, #4
        orr     r2, r2, r1              @ hw2
        ldr     r1, =0xbf08             @ IT, mask 1000: one instruction
        orr     r1, r1, r8, lsl #4
        orr     r1, r1, r0, lsl #16     @ word 0: IT, hw1
        ldr     r3, =0x47700000         @ word 1: hw2, bx lr
        orr     r3, r3, r2
        addr    r0, slot
        str     r1, [r0]
        str     r3, [r0, #4]
        dsb
        mcr     p15, 0, r0, c7, c5, 0
        isb
        var_inc t32_count
        bl      rand
        mov     r4, r0
        bl      rand
        mov     r5, r0
        addr    r0, slot
        orr     r0, r0, #1
        blx     r0
walk_next:
        var_inc walk_count
        subs    r9, r9, #1
        bne     1b
        set_var walk_resume, unexpected
        set_var dabt_resume, unexpected
        pop     {r4-r9, pc}

        .ltorg

@ ---------------------------------------------------------------------
@ mmio: in irq, abt, und and fiq mode, MMIO_N loads and stores each with
@ the banked SP and LR (fiq: R8-R12 too) to unmapped addresses and the
@ GIC; each abort returns to the next instruction in that mode.
mmio:
        push    {r4-r9, lr}
        set_var dabt_resume, stub_irq
        mov     r9, #0x12
        bl      mmio_mode
        set_var dabt_resume, stub_abt
        mov     r9, #0x17
        bl      mmio_mode
        set_var dabt_resume, stub_und
        mov     r9, #0x1b
        bl      mmio_mode
        set_var dabt_resume, stub_fiq
        mov     r9, #0x11
        bl      mmio_mode
        set_var dabt_resume, unexpected
        pop     {r4-r9, pc}

@ mmio_mode: r9 = the mode (CPSR[4:0]); clobbers r0-r8
mmio_mode:
        push    {lr}
        mov     r8, #MMIO_N
1:      var_inc mmio_count
        bl      rand
        mov     r4, r0                  @ the choices
        bl      rand
        mov     r2, r0                  @ a value to store
        and     r0, r4, #3
        cmp     r0, #2
        blo     2f
        beq     3f
        @ the redistributor's two frames: loads only
        ldr     r1, =GICR
        ldr     r0, =0x1fffc
        and     r0, r4, r0, lsl #4
        add     r1, r1, r0, lsr #4
        b       4f
3:      ldr     r1, =GICD
        ldr     r0, =0xfffc
        and     r0, r4, r0, lsl #4
        add     r1, r1, r0, lsr #4
        b       4f
2:      @ nowhere: 0x1000_0000 - 0x1fff_fffc
        var_inc abort_expected
        ldr     r1, =0x0ffffffc
        and     r1, r2, r1
        orr     r1, r1, #0x10000000
4:      ubfx    r3, r4, #24, #3         @ the kind (stores odd)
        cmp     r1, #0x10000000
        bhs     5f
        @ the GIC: words only (kinds 0, 1, 2, 5), the GICR frames loads only
        cmp     r3, #3
        cmpne   r3, #4
        cmpne   r3, #6
        cmpne   r3, #7
        andeq   r3, r3, #1
        ldr     r0, =GICR
        cmp     r1, r0
        andhs   r3, r3, #2              @ GICR: ldr lr or ldr sp
5:      addr    r0, dabt_count
        ldr     r12, [r0]               @ the aborts so far (usr R12)
        mov     r0, r9                  @ the mode, in a register fiq shares
        mrs     r5, cpsr
        bic     r5, r5, #0x1f
        orr     r5, r5, r9
        msr     cpsr_c, r5
        mov     r6, sp                  @ this mode's SP
        mov     r7, lr
        add     pc, pc, r3, lsl #3      @ two instructions per kind
        nop
        ldr     lr, [r1]                @ 0
        b       6f
        str     lr, [r1]                @ 1
        b       6f
        ldr     sp, [r1]                @ 2
        b       6f
        strh    lr, [r1]                @ 3
        b       6f
        ldrh    lr, [r1]                @ 4
        b       6f
        str     sp, [r1]                @ 5
        b       6f
        ldrb    lr, [r1]                @ 6 (fiq: R8-R12 below)
        b       7f
        strb    lr, [r1]                @ 7
        b       6f
7:      cmp     r0, #0x11
        bne     6f
        ldr     r8, [r1]
        ldr     r9, [r1]
        ldr     r10, [r1]
        ldr     r11, [r1]
        ldr     r12, [r1]
6:      mov     sp, r6
        mov     lr, r7
        cps     #0x13
        @ to nowhere: it must have aborted; to the GIC: counted if it did
        @ (offsets and widths the vGIC does not take are external aborts)
        addr    r0, dabt_count
        ldr     r0, [r0]
        cmp     r1, #0x10000000
        blo     8f
        cmp     r0, r12
        bne     9f
        var_inc nowhere_missed
        b       9f
8:      cmp     r0, r12
        beq     9f
        var_inc gic_aborts
9:      subs    r8, r8, #1
        bne     1b
        pop     {pc}

@ ---------------------------------------------------------------------
@ rand: xorshift32 (r0 = the next value; clobbers r1)
rand:
        ldr     r0, seed
        eor     r0, r0, r0, lsl #13
        eor     r0, r0, r0, lsr #17
        eor     r0, r0, r0, lsl #5
        adr     r1, seed
        str     r0, [r1]
        bx      lr
seed:   .word   0x2545f491

@ puts: r0 = NUL-terminated string (clobbers r0-r2)
puts:
        mov     r1, #UART
1:      ldrb    r2, [r0], #1
        cmp     r2, #0
        bxeq    lr
        strb    r2, [r1]
        b       1b

newline:
        mov     r1, #UART
        mov     r0, #'\n'
        strb    r0, [r1]
        bx      lr

@ putdec: r0 as decimal (clobbers r0-r3)
putdec:
        push    {r4, r5}
        mov     r4, #UART
        adr     r2, pow10
        mov     r5, #0
1:      ldr     r1, [r2], #4
        cmp     r1, #0
        beq     3f
        mov     r3, #0
2:      cmp     r0, r1
        subhs   r0, r0, r1
        addhs   r3, r3, #1
        bhs     2b
        orr     r5, r5, r3
        cmp     r5, #0
        addne   r3, r3, #'0'
        strbne  r3, [r4]
        b       1b
3:      add     r0, r0, #'0'
        strb    r0, [r4]
        pop     {r4, r5}
        bx      lr
pow10:  .word   1000000000, 100000000, 10000000, 1000000, 100000, 10000, 1000, 100, 10, 0

@ ---------------------------------------------------------------------
@ Handlers. UNDEF and prefetch abort: only the walk expects them (it
@ resumes at walk_resume, in SVC); data abort: counted, then to
@ dabt_resume (a stub that goes back to the mode it came from, to the
@ instruction after the abort, or the walk's).
und_handler:
        push    {r0, r1}
        var_inc und_count
        pop     {r0, r1}
        cps     #0x13
        ldr     pc, walk_resume

pabt_handler:
        cps     #0x13
        ldr     pc, walk_resume

dabt_handler:
        push    {r0, r1}
        adr     r0, dabt_count
        ldr     r1, [r0]
        add     r1, r1, #1
        str     r1, [r0]
        sub     r1, lr, #4              @ LR_abt = the instruction + 8
        adr     r0, ret_addr
        str     r1, [r0]
        pop     {r0, r1}
        ldr     pc, dabt_resume

walk_stub:
        cps     #0x13
        ldr     pc, walk_resume
stub_irq:
        cps     #0x12
        ldr     pc, ret_addr
stub_abt:
        cps     #0x17
        ldr     pc, ret_addr
stub_und:
        cps     #0x1b
        ldr     pc, ret_addr
stub_fiq:
        cps     #0x11
        ldr     pc, ret_addr

walk_resume:    .word 0
dabt_resume:    .word 0
ret_addr:       .word 0
dabt_count:     .word 0

        .thumb
        .balign 4
thumb_wfx:
        wfi                             @ 16-bit: ESR.IL = 0
        wfe
        cmp     r0, r0
        it      ne
        wfine                           @ fails: no trap
        bx      lr

        .arm
        .balign 4
        .ltorg

        .balign 32
vectors:
        b       .
        b       und_handler
        b       .
        b       pabt_handler
        b       dabt_handler
        b       .
        b       .
        b       .

        .balign 8
slot:   .word   0, 0

@ The fixed calls: r0-r3 and the required answer; r0 = 0 ends.
        .balign 4
call_table:
        .word   0xC4000003, 1, 0, 0, -1                 @ CPU_ON, SMC64 id
        .word   PSCI_CPU_ON, 1, 0x40000000, 0, -2       @ no vCPU 1
        .word   PSCI_CPU_ON, 0xffffffff, 0x40000001, 0, -2
        .word   PSCI_CPU_ON, 0, 0x40000000, 0, -4       @ itself: ALREADY_ON
        .word   PSCI_CPU_ON, 0, 0xfffffffe, 0, -4
        .word   PSCI_AFFINITY_INFO, 0x55, 0, 0, -2
        .word   PSCI_AFFINITY_INFO, 0, 1, 0, -2         @ level 1
        .word   0x8400000A, 0x12345678, 0, 0, -1        @ FEATURES of nothing
        .word   0x840000ff, 0, 0, 0, -1
        .word   0xC5000020, 0, 0, 0, -1                 @ stolen time: SMC64 only
        .word   0x85000020, 0, 0, 0, -1
        .word   0x12345678, 1, 2, 3, -1
        .word   KESTREL_IPI, 0, 0, 0, -2                @ empty window
        .word   KESTREL_IPI, 1, 0, 5, -2                @ min past the vCPUs
        .word   KESTREL_IPI, 1, 0, 0x80000000, -2       @ min "negative"
        .word   KESTREL_IPI, 0xffffffff, 0xffffffff, 0xffffffff, -2
        .word   0, 0, 0, 0, 0

id_tops: .byte  0x84, 0xC4, 0x80, 0xC0, 0x86, 0xC6, 0x85, 0xC5

s_start:  .asciz "ATTACK32 start\n"
s_rounds: .asciz "ATTACK32 rounds "
s_wfx:    .asciz "a32-wfx "
s_wfx2:   .asciz " WFI/WFE groups came back\n"
s_calls:  .asciz "a32-calls "
s_calls2: .asciz " calls, "
s_calls3: .asciz " wrong answers\n"
s_walk:   .asciz "a32-cp-walk "
s_walk2:  .asciz " coprocessor accesses, "
s_walk3:  .asciz " UNDEF, "
s_walk4:  .asciz " from T32\n"
s_mmio:   .asciz "a32-mmio "
s_mmio2:  .asciz " banked accesses: "
s_mmio3:  .asciz " to nowhere ("
s_mmio4:  .asciz " of them not an abort), "
s_mmio5:  .asciz " to the GIC refused by its model\n"
s_pass:   .asciz "PASS "
s_fail:   .asciz "FAIL "
s_unexpected: .asciz "FAIL a32-unexpected-exception\n"
s_result: .asciz "RESULT: "
s_passed: .asciz " passed, "
s_failed: .asciz " failed\n"
        .balign 4
end_time:       .word 0, 0
wfx_count:      .word 0
call_count:     .word 0
call_bad:       .word 0
walk_count:     .word 0
t32_count:      .word 0
und_count:      .word 0
mmio_count:     .word 0
abort_expected: .word 0
nowhere_missed: .word 0
gic_aborts:     .word 0
passed:         .word 0
failed:         .word 0
