//! The world switch: general registers in and out of the guest.
//!
//! `kestrel_guest_enter(regs)` saves the host's callee-saved registers on the
//! EL2 stack, leaves `regs` on top of it, loads the guest's x0-x30, ELR_EL2
//! (guest PC) and SPSR_EL2 (guest PSTATE) and `eret`s. Any exception from the
//! guest arrives at a lower-EL vector of `kestrel_el2_vectors`
//! (exceptions.rs), which pushes x0/x1 and jumps to `kestrel_guest_exit`:
//! the guest's registers go back into `regs` (found on the stack, which the
//! guest cannot touch: SP_EL2 is the host's), the host's are restored, and
//! `kestrel_guest_enter` returns the vector index (8 sync, 9 IRQ, 10 FIQ, 11
//! SError; 12-15 the same from AArch32).
//!
//! EL1 system registers, the virtual timer and the virtual GIC interface are
//! switched in Rust (`load`/`put`, and the list registers around each entry):
//! kestrel at EL2 never uses them, so they may stay live across exits.

/// The guest's general registers, PC and PSTATE (layout shared with the asm).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GuestRegs {
    pub x: [u64; 31],
    pub pc: u64,
    pub pstate: u64,
}

const _: () = assert!(core::mem::size_of::<GuestRegs>() == 264);

core::arch::global_asm!(
    r#"
    .text
    .balign 4
    .global kestrel_guest_enter
kestrel_guest_enter:
    stp     x29, x30, [sp, #-96]!
    stp     x19, x20, [sp, #16]
    stp     x21, x22, [sp, #32]
    stp     x23, x24, [sp, #48]
    stp     x25, x26, [sp, #64]
    stp     x27, x28, [sp, #80]
    sub     sp, sp, #16
    str     x0, [sp]
    ldp     x1, x2, [x0, #248]
    msr     elr_el2, x1
    msr     spsr_el2, x2
    ldp     x2, x3, [x0, #16]
    ldp     x4, x5, [x0, #32]
    ldp     x6, x7, [x0, #48]
    ldp     x8, x9, [x0, #64]
    ldp     x10, x11, [x0, #80]
    ldp     x12, x13, [x0, #96]
    ldp     x14, x15, [x0, #112]
    ldp     x16, x17, [x0, #128]
    ldp     x18, x19, [x0, #144]
    ldp     x20, x21, [x0, #160]
    ldp     x22, x23, [x0, #176]
    ldp     x24, x25, [x0, #192]
    ldp     x26, x27, [x0, #208]
    ldp     x28, x29, [x0, #224]
    ldr     x30, [x0, #240]
    ldp     x0, x1, [x0, #0]
    eret
    dsb     nsh
    isb

// From a lower-EL vector: guest x0/x1 pushed at [sp], x1 = vector index,
// the GuestRegs pointer at [sp + 16].
    .global kestrel_guest_exit
kestrel_guest_exit:
    ldr     x0, [sp, #16]
    stp     x2, x3, [x0, #16]
    stp     x4, x5, [x0, #32]
    stp     x6, x7, [x0, #48]
    stp     x8, x9, [x0, #64]
    stp     x10, x11, [x0, #80]
    stp     x12, x13, [x0, #96]
    stp     x14, x15, [x0, #112]
    stp     x16, x17, [x0, #128]
    stp     x18, x19, [x0, #144]
    stp     x20, x21, [x0, #160]
    stp     x22, x23, [x0, #176]
    stp     x24, x25, [x0, #192]
    stp     x26, x27, [x0, #208]
    stp     x28, x29, [x0, #224]
    str     x30, [x0, #240]
    ldp     x2, x3, [sp], #16
    stp     x2, x3, [x0, #0]
    mrs     x2, elr_el2
    mrs     x3, spsr_el2
    stp     x2, x3, [x0, #248]
    mov     x0, x1
    add     sp, sp, #16
    ldp     x19, x20, [sp, #16]
    ldp     x21, x22, [sp, #32]
    ldp     x23, x24, [sp, #48]
    ldp     x25, x26, [sp, #64]
    ldp     x27, x28, [sp, #80]
    ldp     x29, x30, [sp], #96
    ret
"#
);

extern "C" {
    fn kestrel_guest_enter(regs: *mut GuestRegs) -> u64;
}

/// Runs the guest until its next exception to EL2; returns the vector index.
///
/// The caller has loaded the vCPU's EL1 state, stage 2 (VTTBR/VTCR), HCR_EL2
/// and the virtual GIC interface on this CPU, with IRQs masked at EL2.
pub fn enter(regs: &mut GuestRegs) -> u64 {
    // SAFETY: `regs` is a valid, exclusively borrowed GuestRegs for the whole
    // call. The asm saves and restores every callee-saved register and SP and
    // returns like a function; the guest runs at EL1 under stage 2 with
    // HCR_EL2.VM set, so it can reach neither kestrel's memory nor its stack.
    unsafe { kestrel_guest_enter(regs) }
}
