@ kestrel's AArch32 test guest: a few hundred bytes of A32/T32 assembly that
@ checks an AArch32 EL1 under kestrel (and on bare QEMU): the boot
@ registers, trapped cp15 and VMRS accesses, PSCI over HVC32 (CPU_ON of a
@ secondary that starts in AArch32), the lazy FP trap with FPEXC and the
@ guest's own FPEXC.EN = 0, UNDEF and data aborts injected to its vectors,
@ conditional and Thumb traps, the emulated physical timer through cp15,
@ kestrel's PV IPI over HVC32 and its answers to wrong calls (SMC64 ids,
@ bad PSCI and IPI arguments, kestrel's cp14 view), cp14 debug (DBGDIDR,
@ a breakpoint value register, a breakpoint taken) and CPU_ON at a Thumb
@ entry point. It prints `PASS <n> <name>`, `FAIL ...` or
@ `SKIP ...` lines on the PL011 at 0x0900_0000 and `RESULT: <p> passed,
@ <f> failed`, then powers off (PSCI SYSTEM_OFF).
@
@ Position-independent (r11 = the image's base all along): QEMU loads a
@ raw 32-bit image at RAM + 0x10000, kestrel at RAM + 0.
@ Build: tools/guests/aarch32-test/assemble.sh (llvm-mc) regenerates
@ tools/xtask/src/guest32_words.rs, which `cargo xtask` writes out as
@ build/guests/aarch32-test.bin.

        .syntax unified
        .arch armv7-a
        .arch_extension virt
        .arch_extension sec
        .fpu neon
        .arm
        .text

        .equ UART, 0x09000000
        .equ PSCI_VERSION, 0x84000000
        .equ PSCI_CPU_OFF, 0x84000002
        .equ PSCI_CPU_ON, 0x84000003
        .equ PSCI_SYSTEM_OFF, 0x84000008
        .equ KESTREL_FEATURES, 0xC6000001
        .equ KESTREL_IPI, 0xC6000002

@ addr reg, label: the address of label (position-independent, r11 = base)
        .macro  addr reg, label
        ldr     \reg, =(\label - _start)
        add     \reg, \reg, r11
        .endm

_start:
        adr     r11, _start
        mov     r8, r0                  @ boot registers, checked below
        mov     r9, r1
        mrs     r10, cpsr
        @ stacks: svc, und, abt (2 KiB each) above the image
        add     sp, r11, #0x8000
        cps     #0x1b
        add     sp, r11, #0x8800
        cps     #0x17
        add     sp, r11, #0x9000
        cps     #0x13
        @ vectors
        addr    r0, vectors
        mcr     p15, 0, r0, c12, c0, 0
        isb
        mov     r6, #0                  @ passed
        mov     r7, #0                  @ failed

@ 1 boot-registers: r0 = 0, r1 = 0xffffffff, SVC with A/I/F masked, A32
        lsl     r0, r10, #23            @ CPSR[8:0]
        lsr     r0, r0, #23
        ldr     r1, =0x1d3
        cmp     r0, r1
        cmpeq   r8, #0
        mvneq   r0, #0
        cmpeq   r9, r0
        addr    r0, n_boot
        bl      verdict

@ 2 id-pfr1: trapped MRC of ID_PFR1: no Security, no Virtualization
        mrc     p15, 0, r4, c0, c1, 1
        tst     r4, #0xf0
        tsteq   r4, #0xf000
        addr    r0, n_pfr1
        bl      verdict

@ 3 vmrs-mvfr0: trapped VMRS MVFR0 (CPACR cp10/cp11 enabled first): 32 D registers
        mov     r0, #0xf00000
        mcr     p15, 0, r0, c1, c0, 2
        isb
        vmrs    r4, mvfr0
        and     r4, r4, #0xf
        cmp     r4, #2
        addr    r0, n_mvfr0
        bl      verdict

@ 4 psci-version over HVC32: 1.0 or later
        ldr     r0, =PSCI_VERSION
        hvc     #0
        lsr     r0, r0, #16
        cmp     r0, #1
        addr    r0, n_psci
        bl      verdict

@ 5 fp-lazy: FPEXC.EN set; D0 and D31 hold a new pattern in each of 2000
@ rounds across a WFE (a yield to another vCPU waiting for this pCPU: its
@ FP/SIMD state takes the unit) and an HVC
        mov     r0, #0x40000000
        vmsr    fpexc, r0
        ldr     r5, =2000
        ldr     r10, =0x5a5a5a5a
1:      mvn     r4, r5
        vmov    d0, r5, r4
        eor     r4, r5, r10
        add     r3, r5, #1
        vmov    d31, r4, r3
        wfe
        ldr     r0, =PSCI_VERSION
        hvc     #0
        vmov    r0, r1, d0
        vmov    r2, r3, d31
        mvn     r4, r5
        cmp     r0, r5
        cmpeq   r1, r4
        bne     2f
        eor     r4, r5, r10
        add     r1, r5, #1
        cmp     r2, r4
        cmpeq   r3, r1
        bne     2f
        vmrs    r0, fpexc
        lsr     r0, r0, #30
        and     r0, r0, #1
        cmp     r0, #1                  @ FPEXC.EN still set
        bne     2f
        subs    r5, r5, #1
        bne     1b
2:      ldr     r4, =0x12345678         @ for check 6
        addr    r0, n_fp
        bl      verdict

@ 6 fpexc-en-0: with the guest's FPEXC.EN clear a VFP instruction is
@ UNDEFINED to the guest (its und vector), not swallowed by kestrel
        ldr     r0, und_count_off
        add     r12, r11, r0
        ldr     r5, [r12]
        mov     r0, #0
        vmsr    fpexc, r0
        vmov    d1, r4, r4              @ UNDEF -> und handler, skipped
        ldr     r0, [r12]
        sub     r0, r0, r5
        mov     r1, #0x40000000
        vmsr    fpexc, r1
        cmp     r0, #1
        addr    r0, n_fpexc
        bl      verdict

@ 7 undef-impdef: an IMPLEMENTATION DEFINED cp15 register (CRn 9, CRm 0) is UNDEFINED
        ldr     r5, [r12]
        mrc     p15, 0, r4, c9, c0, 0
        ldr     r0, [r12]
        sub     r0, r0, r5
        cmp     r0, #1
        addr    r0, n_undef
        bl      verdict

@ 8 cond-fail: a trapped MRC whose condition fails does nothing
        ldr     r4, =0x1234
        cmp     r4, r4                  @ Z set: NE fails
        mrcne   p15, 0, r4, c0, c1, 1
        ldr     r0, =0x1234
        cmp     r4, r0
        addr    r0, n_cond
        bl      verdict

@ 9 thumb: 16-bit T32 MMIO store (ESR.IL = 0) and a failed trap in an IT block
        addr    r0, thumb_part
        orr     r0, r0, #1
        blx     r0
        cmp     r0, #0
        addr    r0, n_thumb
        bl      verdict

@ 10 abort-outside-memory: a load from nowhere is a data abort to the guest
        ldr     r0, dabt_count_off
        add     r12, r11, r0
        ldr     r5, [r12]
        ldr     r0, =0x7ff00000         @ past RAM (< 1 GiB) in both maps
        ldr     r1, [r0]                @ -> abt handler, skipped
        ldr     r0, [r12]
        sub     r0, r0, r5
        cmp     r0, #1
        addr    r0, n_dabt
        bl      verdict

@ 11 phys-timer: CNTP_CVAL = 0 (MCRR), CNTP_CTL = ENABLE | IMASK: ISTATUS reads 1
        mov     r0, #0
        mov     r1, #0
        mcrr    p15, 2, r0, r1, c14
        mov     r0, #3
        mcr     p15, 0, r0, c14, c2, 1
        isb
        mrc     p15, 0, r4, c14, c2, 1
        mov     r0, #0
        mcr     p15, 0, r0, c14, c2, 1
        and     r4, r4, #7
        cmp     r4, #7
        addr    r0, n_ptimer
        bl      verdict

@ 12 cpu-on: vCPU 1 starts in AArch32 (SVC, r0 = context), says so, turns off
        ldr     r0, sec_flag_off
        add     r12, r11, r0
        mov     r0, #0
        str     r0, [r12]
        ldr     r0, =PSCI_CPU_ON
        mov     r1, #1
        addr    r2, secondary
        ldr     r3, =0x5a5a
        hvc     #0
        mov     r4, r0
        ldr     r5, =50000000
1:      ldr     r0, [r12]
        cmp     r0, #0
        bne     2f
        subs    r5, r5, #1
        bne     1b
2:      cmp     r4, #0
        cmpeq   r0, #1
        addr    r0, n_cpuon
        bl      verdict

@ 13 pv-ipi over HVC32 (kestrel only): features bit 0, then SGI 15 to self
        ldr     r0, =KESTREL_FEATURES
        hvc     #0
        cmn     r0, #1
        beq     skip_pvipi
        tst     r0, #1
        beq     fail_pvipi
        ldr     r0, =KESTREL_IPI
        mov     r1, #1
        mov     r2, #0
        mov     r3, #0
        hvc     #0
        cmp     r0, #0
        b       done_pvipi
fail_pvipi:
        cmp     r0, #0x100              @ NE
done_pvipi:
        addr    r0, n_pvipi
        bl      verdict
        b       hostile
skip_pvipi:
        addr    r0, s_pvipi
        bl      puts
        addr    r0, s_hostile
        bl      puts
        b       mmio_banked

@ 15 mmio-banked: MMIO loads into the banked SP and LR of irq, abt, und and
@ fiq mode (and fiq's R8-R12) read what SVC mode reads (GICD_IIDR), and
@ stores from each mode's banked LR reach the UART ("banked: IAUF")
mmio_banked:
        addr    r0, s_banked
        bl      puts
        mov     r1, #0x08000000
        ldr     r2, [r1, #8]            @ GICD_IIDR from SVC
        mov     r3, #0x09000000         @ UART
        mov     r4, #0                  @ mismatches
        cps     #0x12                   @ irq: SP = X17, LR = X16
        ldr     sp, [r1, #8]
        ldr     lr, [r1, #8]
        eor     r0, sp, r2
        orr     r4, r4, r0
        eor     r0, lr, r2
        orr     r4, r4, r0
        mov     lr, #'I'
        strb    lr, [r3]
        cps     #0x17                   @ abt: SP = X21 (the handler's), LR = X20
        mov     r5, sp
        ldr     sp, [r1, #8]
        ldr     lr, [r1, #8]
        eor     r0, sp, r2
        orr     r4, r4, r0
        eor     r0, lr, r2
        orr     r4, r4, r0
        mov     sp, r5
        mov     lr, #'A'
        strb    lr, [r3]
        cps     #0x1b                   @ und: SP = X23 (the handler's), LR = X22
        mov     r5, sp
        ldr     sp, [r1, #8]
        ldr     lr, [r1, #8]
        eor     r0, sp, r2
        orr     r4, r4, r0
        eor     r0, lr, r2
        orr     r4, r4, r0
        mov     sp, r5
        mov     lr, #'U'
        strb    lr, [r3]
        cps     #0x11                   @ fiq: R8-R12 = X24-X28, SP = X29, LR = X30
        ldr     r8, [r1, #8]
        ldr     r9, [r1, #8]
        ldr     r10, [r1, #8]
        ldr     r11, [r1, #8]
        ldr     r12, [r1, #8]
        ldr     sp, [r1, #8]
        ldr     lr, [r1, #8]
        eor     r0, r8, r2
        orr     r4, r4, r0
        eor     r0, r9, r2
        orr     r4, r4, r0
        eor     r0, r10, r2
        orr     r4, r4, r0
        eor     r0, r11, r2
        orr     r4, r4, r0
        eor     r0, r12, r2
        orr     r4, r4, r0
        eor     r0, sp, r2
        orr     r4, r4, r0
        eor     r0, lr, r2
        orr     r4, r4, r0
        mov     lr, #'F'
        strb    lr, [r3]
        cps     #0x13                   @ back to svc: r8-r12 and r11 (the base) are the usr ones
        mov     lr, #'\n'
        strb    lr, [r3]
        cmp     r4, #0
        addr    r0, n_banked
        bl      verdict

@ 16 cp14-debug: DBGDIDR names v7.1 or Armv8 debug with at least 2
@ breakpoints (CTX_CMPs of them context-aware) and bit 15 set; DBGBVR1
@ (DBGBCR1 = 0: disabled) reads back what was written
        mrc     p14, 0, r4, c0, c0, 0   @ DBGDIDR
        ubfx    r0, r4, #16, #4         @ Version
        cmp     r0, #5
        blo     1f
        ubfx    r1, r4, #24, #4         @ BRPs - 1
        cmp     r1, #1
        blo     1f
        ubfx    r2, r4, #20, #4         @ CTX_CMPs - 1
        cmp     r2, r1
        bhi     1f
        tst     r4, #0x8000
        beq     1f
        mov     r0, #0
        mcr     p14, 0, r0, c0, c1, 5   @ DBGBCR1
        ldr     r0, =0x4000abc4
        mcr     p14, 0, r0, c0, c1, 4   @ DBGBVR1
        isb
        mov     r4, #0
        mrc     p14, 0, r4, c0, c1, 4
        cmp     r4, r0
        b       2f
1:      movs    r0, #1                  @ NE
2:      addr    r0, n_cp14
        bl      verdict

@ 17 cpu-on-thumb: vCPU 1 (off again after check 12) starts at a Thumb
@ entry point (bit 0 set): T32, SVC, r0 = context; it says so and turns off
        ldr     r0, sec_flag_off
        add     r12, r11, r0
        mov     r0, #0
        str     r0, [r12]
        ldr     r5, =1000000            @ retries while vCPU 1 is still on
1:      ldr     r0, =PSCI_CPU_ON
        mov     r1, #1
        addr    r2, secondary_t32
        orr     r2, r2, #1
        ldr     r3, =0x7a7a
        hvc     #0
        cmn     r0, #4                  @ ALREADY_ON: vCPU 1 not off yet
        bne     2f
        subs    r5, r5, #1
        bne     1b
2:      mov     r4, r0
        ldr     r5, =50000000
3:      ldr     r0, [r12]
        cmp     r0, #0
        bne     4f
        subs    r5, r5, #1
        bne     3b
4:      cmp     r4, #0
        cmpeq   r0, #3
        addr    r0, n_cpuon_t
        bl      verdict

@ 18 cp14-breakpoint: with the OS lock off and DBGDSCRext.MDBGEN set,
@ breakpoint 0 (address match, PL0 and PL1, all bytes) on an instruction
@ is a prefetch abort with IFSR = debug event; the handler disables it
@ and the instruction then runs
        mov     r0, #0
        mcr     p14, 0, r0, c1, c0, 4   @ DBGOSLAR: not the key
        isb
        mrc     p14, 0, r0, c0, c2, 2   @ DBGDSCRext
        orr     r0, r0, #0x8000         @ MDBGEN
        mcr     p14, 0, r0, c0, c2, 2
        addr    r0, bp_target
        mcr     p14, 0, r0, c0, c0, 4   @ DBGBVR0
        ldr     r0, =0x1e7              @ BAS 0xF, PMC 0b11, E
        mcr     p14, 0, r0, c0, c0, 5   @ DBGBCR0
        isb
        ldr     r0, pabt_count_off
        add     r12, r11, r0
        ldr     r5, [r12]
        mov     r4, #0
bp_target:
        add     r4, r4, #1              @ breakpointed, then run once
        ldr     r0, [r12]
        sub     r5, r0, r5
        ldr     r3, [r12, #4]           @ the IFSR the handler saw
        mrc     p14, 0, r0, c0, c2, 2
        bic     r0, r0, #0x8000
        mcr     p14, 0, r0, c0, c2, 2
        mov     r0, #0
        mcr     p14, 0, r0, c0, c0, 5
        isb
        ldr     r0, =0x40f
        and     r3, r3, r0
        cmp     r5, #1                  @ one prefetch abort
        cmpeq   r4, #1                  @ the instruction ran once
        cmpeq   r3, #2                  @ IFSR.FS = debug event
        addr    r0, n_bkpt
        bl      verdict
        b       result

@ 14 hostile-calls (kestrel only): defined answers to calls a 32-bit guest
@ may not make or makes wrong, and kestrel's cp14: DBGDIDR of Armv8 debug
@ without Secure state, DBGDRAR 0, the OS lock and its AArch32 key, trace
@ and DBGBXVR UNDEFINED
hostile:
        ldr     r0, =0xC4000003         @ CPU_ON, SMC64 id: NOT_SUPPORTED
        mov     r1, #1
        hvc     #0
        cmn     r0, #1
        bne     1f
        ldr     r0, =PSCI_CPU_ON        @ no such vCPU: INVALID_PARAMETERS
        mov     r1, #0x55
        mov     r2, #0
        mov     r3, #0
        hvc     #0
        cmn     r0, #2
        bne     1f
        ldr     r0, =0xC5000020         @ stolen time (SMC64 only): -1
        hvc     #0
        cmn     r0, #1
        bne     1f
        ldr     r0, =0x12345678         @ nobody's function: -1
        hvc     #0
        cmn     r0, #1
        bne     1f
        ldr     r0, =KESTREL_IPI        @ empty window: -2
        mov     r1, #0
        mov     r2, #0
        mov     r3, #0
        hvc     #0
        cmn     r0, #2
        bne     1f
        ldr     r0, =KESTREL_IPI        @ min past the vCPUs: -2
        mov     r1, #1
        mov     r2, #0
        mov     r3, #5
        hvc     #0
        cmn     r0, #2
        bne     1f
        mrc     p14, 0, r4, c0, c0, 0   @ DBGDIDR: Armv8 (6), no Secure state
        ubfx    r0, r4, #16, #4
        cmp     r0, #6
        bne     1f
        tst     r4, #0x5000             @ nSUHD_imp, SE_imp
        bne     1f
        mov     r4, #1
        mov     r5, #1
        mrrc    p14, 0, r4, r5, c1      @ DBGDRAR: 0
        orrs    r4, r4, r5
        bne     1f
        mrc     p14, 0, r4, c1, c1, 4   @ DBGOSLSR: OS lock locked at reset
        and     r4, r4, #0xf
        cmp     r4, #0xa
        bne     1f
        mov     r0, #1
        mcr     p14, 0, r0, c1, c0, 4   @ DBGOSLAR: not the key: unlocks
        mrc     p14, 0, r4, c1, c1, 4
        and     r4, r4, #0xf
        cmp     r4, #0x8
        bne     1f
        ldr     r0, und_count_off
        add     r12, r11, r0
        ldr     r5, [r12]
        mrc     p14, 1, r4, c0, c0, 0   @ trace: UNDEFINED
        mrc     p14, 0, r4, c1, c0, 1   @ DBGBXVR0 (needs EL2): UNDEFINED
        ldr     r0, [r12]
        sub     r0, r0, r5
        cmp     r0, #2
1:      addr    r0, n_hostile
        bl      verdict
        b       mmio_banked

result:
        addr    r0, s_result
        bl      puts
        mov     r0, r6
        bl      putdec
        addr    r0, s_passed
        bl      puts
        mov     r0, r7
        bl      putdec
        addr    r0, s_failed
        bl      puts
        ldr     r0, =PSCI_SYSTEM_OFF
        hvc     #0
        b       .

@ verdict: flags EQ = pass; r0 = the check's name ("<n> <name>\n").
verdict:
        push    {r4, lr}
        mov     r4, r0
        ldreq   r0, =(s_pass - _start)
        addeq   r6, r6, #1
        ldrne   r0, =(s_fail - _start)
        addne   r7, r7, #1
        add     r0, r0, r11
        bl      puts
        mov     r0, r4
        bl      puts
        pop     {r4, pc}

@ puts: r0 = NUL-terminated string; clobbers r0-r2
puts:
        mov     r1, #UART
1:      ldrb    r2, [r0], #1
        cmp     r2, #0
        bxeq    lr
        strb    r2, [r1]
        b       1b

@ putdec: r0 < 100 as decimal; clobbers r0-r3
putdec:
        mov     r1, #UART
        mov     r2, #0
1:      cmp     r0, #10
        subhs   r0, r0, #10
        addhs   r2, r2, #1
        bhs     1b
        cmp     r2, #0
        addne   r2, r2, #'0'
        strbne  r2, [r1]
        add     r0, r0, #'0'
        strb    r0, [r1]
        bx      lr

secondary:
        adr     r11, secondary
        ldr     r1, =(secondary - _start)
        sub     r11, r11, r1
        ldr     r1, sec_flag_off
        add     r12, r11, r1
        mrs     r1, cpsr
        lsl     r1, r1, #23             @ CPSR[8:0]
        lsr     r1, r1, #23
        ldr     r2, =0x1d3
        ldr     r3, =0x5a5a
        cmp     r1, r2
        cmpeq   r0, r3
        moveq   r0, #1
        movne   r0, #2
        str     r0, [r12]
        dsb
        ldr     r0, =PSCI_CPU_OFF
        hvc     #0
        b       .

@ The handlers return without their mode's SPSR: they switch back to SVC
@ (every check runs in SVC with A/I/F masked and does not depend on the
@ flags across the faulting instruction) and jump to the return address.
@ Under QEMU's TCG an exception return from AArch64 EL2 into an AArch32
@ mode does not reload that mode's SPSR from SPSR_<mode> (it keeps the
@ SPSR of the mode the guest trapped from), so the architectural
@ `movs pc, lr` would be an illegal return after an exception kestrel
@ injected; on hardware either way works.
und_handler:
        push    {r0, r1}
        ldr     r0, und_count_off
        add     r0, r0, r11
        ldr     r1, [r0]
        add     r1, r1, #1
        str     r1, [r0]
        str     lr, [r0, #12]           @ ret_addr: the instruction + 4 (A32)
        pop     {r0, r1}
        cps     #0x13
        ldr     pc, ret_addr

dabt_handler:
        push    {r0, r1}
        ldr     r0, dabt_count_off
        add     r0, r0, r11
        ldr     r1, [r0]
        add     r1, r1, #1
        str     r1, [r0]
        sub     r1, lr, #4              @ LR_abt = the instruction + 8
        str     r1, [r0, #8]            @ ret_addr
        pop     {r0, r1}
        cps     #0x13
        ldr     pc, ret_addr

@ A prefetch abort (check 18's breakpoint): counted, IFSR kept, breakpoint
@ 0 disabled, back to the instruction (LR_abt - 4) in SVC.
pabt_handler:
        push    {r0, r1}
        ldr     r0, pabt_count_off
        add     r0, r0, r11
        ldr     r1, [r0]
        add     r1, r1, #1
        str     r1, [r0]
        mrc     p15, 0, r1, c5, c0, 1   @ IFSR
        str     r1, [r0, #4]
        sub     r1, lr, #4
        str     r1, [r0, #8]
        mov     r1, #0
        mcr     p14, 0, r1, c0, c0, 5   @ DBGBCR0: off
        isb
        pop     {r0, r1}
        cps     #0x13
        ldr     pc, pabt_ret

        .thumb
        .balign 4
thumb_part:
        @ r0 = 0 on success. A 16-bit STR to the UART ('T').
        movs    r1, #0x54
        movs    r2, #0x09
        lsls    r2, r2, #24
        str     r1, [r2]                @ 16-bit: ESR.IL = 0, PC += 2
        movs    r1, #0x0a
        str     r1, [r2]
        @ An IT block whose trapped MRC fails: skipped, IT advanced.
        movw    r4, #0x4321
        movs    r3, #1
        cmp     r3, #2                  @ Z clear: EQ fails
        ite     eq
        mrceq   p15, 0, r4, c0, c1, 1   @ fails: skipped
        addne   r4, r4, #1              @ must run (the IT state advanced)
        movw    r0, #0x4322
        subs    r0, r4, r0
        bx      lr

        @ The secondary of check 17, entered in T32 state (CPU_ON with
        @ bit 0 set): SVC with A/I/F masked and r0 = 0x7a7a give sec_flag
        @ 3 (anything else 4); the flag is found from here, PC-relative.
        .balign 4
secondary_t32:
        mrs     r1, cpsr
        ubfx    r1, r1, #0, #9
        bic     r1, r1, #0x20           @ T (reads as 0 through MRS)
        movw    r2, #0x1d3
        movw    r3, #0x7a7a
        adr     r12, 1f
        ldr     r4, [r12]
        add     r12, r12, r4
        cmp     r1, r2
        it      eq
        cmpeq   r0, r3
        ite     eq
        moveq   r0, #3
        movne   r0, #4
        str     r0, [r12]
        dsb
        movw    r0, #0x0002             @ PSCI_CPU_OFF
        movt    r0, #0x8400
        hvc     #0
        b       .
        .balign 4
1:      .word   sec_flag - 1b

        .arm
        .balign 4
und_count_off:  .word und_count - _start
dabt_count_off: .word dabt_count - _start
sec_flag_off:   .word sec_flag - _start
pabt_count_off: .word pabt_count - _start
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

n_boot:   .asciz "1 boot-registers\n"
n_pfr1:   .asciz "2 id-pfr1\n"
n_mvfr0:  .asciz "3 vmrs-mvfr0\n"
n_psci:   .asciz "4 psci-version\n"
n_fp:     .asciz "5 fp-lazy\n"
n_fpexc:  .asciz "6 fpexc-en-0\n"
n_undef:  .asciz "7 undef-impdef\n"
n_cond:   .asciz "8 cond-fail\n"
n_thumb:  .asciz "9 thumb\n"
n_dabt:   .asciz "10 abort-outside-memory\n"
n_ptimer: .asciz "11 phys-timer\n"
n_cpuon:  .asciz "12 cpu-on\n"
n_pvipi:  .asciz "13 pv-ipi\n"
s_pvipi:  .asciz "SKIP 13 pv-ipi (not kestrel)\n"
n_hostile: .asciz "14 hostile-calls\n"
n_banked: .asciz "15 mmio-banked\n"
n_cp14:   .asciz "16 cp14-debug\n"
n_cpuon_t: .asciz "17 cpu-on-thumb\n"
n_bkpt:   .asciz "18 cp14-breakpoint\n"
s_banked: .asciz "banked: "
s_hostile: .asciz "SKIP 14 hostile-calls (not kestrel)\n"
s_pass:   .asciz "PASS "
s_fail:   .asciz "FAIL "
s_result: .asciz "RESULT: "
s_passed: .asciz " passed, "
s_failed: .asciz " failed\n"
        .balign 4
und_count:  .word 0
dabt_count: .word 0
sec_flag:   .word 0
ret_addr:   .word 0
pabt_count: .word 0
pabt_ifsr:  .word 0
pabt_ret:   .word 0
