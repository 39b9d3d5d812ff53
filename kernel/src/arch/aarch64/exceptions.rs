//! EL2 exception vectors. Every entry saves the general registers (never
//! FP/SIMD), ELR_EL2 and SPSR_EL2 in a [`Frame`] on the current stack and
//! calls [`kestrel_exception`]. IRQs are acknowledged and ended here
//! (the tick is counted); a guest's IRQ exit acknowledges through [`ack`] and
//! decides what the interrupt means itself; everything
//! else is a crash: a register dump, then `runtime::fatal` (power-off in test
//! mode) or a halt of this CPU.

use aarch64_cpu::registers::*;
use core::fmt::Write;

use super::{gic, percpu, pl011, platform, timer};

core::arch::global_asm!(
    r#"
    .equ KESTREL_FRAME_SIZE, 272

    .macro kestrel_ventry kind
    .balign 0x80
    sub     sp, sp, #KESTREL_FRAME_SIZE
    stp     x0, x1, [sp, #0]
    mov     x1, #\kind
    b       kestrel_exception_common
    .endm

    // From a guest (lower EL): back to the world switch (vm/switch.rs).
    .macro kestrel_gentry kind
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    mov     x1, #\kind
    b       kestrel_guest_exit
    .endm

    .section .text.kestrel_vectors, "ax"
    .balign 2048
    .global kestrel_el2_vectors
kestrel_el2_vectors:
    kestrel_ventry 0
    kestrel_ventry 1
    kestrel_ventry 2
    kestrel_ventry 3
    kestrel_ventry 4
    kestrel_ventry 5
    kestrel_ventry 6
    kestrel_ventry 7
    kestrel_gentry 8
    kestrel_gentry 9
    kestrel_gentry 10
    kestrel_gentry 11
    kestrel_gentry 12
    kestrel_gentry 13
    kestrel_gentry 14
    kestrel_gentry 15

kestrel_exception_common:
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
    mrs     x2, elr_el2
    stp     x30, x2, [sp, #240]
    mrs     x2, spsr_el2
    str     x2, [sp, #256]
    mov     x0, sp
    bl      kestrel_exception
    ldr     x2, [sp, #256]
    msr     spsr_el2, x2
    ldp     x30, x2, [sp, #240]
    msr     elr_el2, x2
    ldp     x28, x29, [sp, #224]
    ldp     x26, x27, [sp, #208]
    ldp     x24, x25, [sp, #192]
    ldp     x22, x23, [sp, #176]
    ldp     x20, x21, [sp, #160]
    ldp     x18, x19, [sp, #144]
    ldp     x16, x17, [sp, #128]
    ldp     x14, x15, [sp, #112]
    ldp     x12, x13, [sp, #96]
    ldp     x10, x11, [sp, #80]
    ldp     x8, x9, [sp, #64]
    ldp     x6, x7, [sp, #48]
    ldp     x4, x5, [sp, #32]
    ldp     x2, x3, [sp, #16]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #KESTREL_FRAME_SIZE
    eret
"#
);

extern "C" {
    static kestrel_el2_vectors: u8;
}

/// The registers saved by the vector code (layout shared with the assembly).
#[repr(C)]
pub struct Frame {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    _pad: u64,
}

const FRAME_SIZE: usize = 272;
const _: () = assert!(core::mem::size_of::<Frame>() == FRAME_SIZE);

const KINDS: [&str; 16] = [
    "sync (current EL, SP_EL0)",
    "IRQ (current EL, SP_EL0)",
    "FIQ (current EL, SP_EL0)",
    "SError (current EL, SP_EL0)",
    "sync (current EL)",
    "IRQ (current EL)",
    "FIQ (current EL)",
    "SError (current EL)",
    "sync (lower EL, AArch64)",
    "IRQ (lower EL, AArch64)",
    "FIQ (lower EL, AArch64)",
    "SError (lower EL, AArch64)",
    "sync (lower EL, AArch32)",
    "IRQ (lower EL, AArch32)",
    "FIQ (lower EL, AArch32)",
    "SError (lower EL, AArch32)",
];

/// Points VBAR_EL2 at kestrel's vectors (calling CPU).
pub fn install() {
    VBAR_EL2.set(vectors_addr() as u64);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// The physical (= virtual) address of the vector table.
pub fn vectors_addr() -> usize {
    core::ptr::addr_of!(kestrel_el2_vectors) as usize
}

/// Called by the vector code with the saved registers and the vector index.
#[no_mangle]
extern "C" fn kestrel_exception(frame: &mut Frame, kind: u64) {
    match kind {
        // Taken at EL2 (while idle): nothing is forwarded to a guest here.
        1 | 5 => {
            if let Some(irq) = ack() {
                // A forwarded device SPI stays active for its guest (the
                // backend injects it after the wait: `passthrough::drain`).
                let forwarded = super::vm::passthrough::on_irq(irq.intid);
                irq.end(forwarded);
            }
        }
        _ => crash(frame, kind as usize),
    }
}

/// One acknowledged physical interrupt, to be ended with [`Irq::end`].
pub struct Irq {
    pub intid: u32,
    iar: u32,
    /// kestrel's tick (or a deadline that counts as one): the timer's
    /// interrupt, unless it only came for the console's drain
    /// ([`timer::fired`]).
    pub tick: bool,
}

/// Acknowledges the highest-priority pending physical interrupt. kestrel's
/// timer is taken care of here (re-armed, a tick counted);
/// whatever else the interrupt means (a kick, a guest's timer) is the
/// caller's to decide, who then ends it. `None` for a spurious acknowledge.
pub fn ack() -> Option<Irq> {
    let gic = platform::gic()?;
    let iar = gic.ack();
    let intid = iar & 0xff_ffff;
    if gic::is_spurious(intid) {
        return None;
    }
    let tick = intid == timer::PPI && timer::fired();
    if tick {
        crate::base::cpu::tick(percpu::index());
    }
    Some(Irq { intid, iar, tick })
}

impl Irq {
    /// Ends the interrupt: EOI, or only its priority drop when it was
    /// `forwarded` to the loaded vCPU (the guest's deactivation of the
    /// virtual interrupt, through the list register's HW bit, deactivates
    /// this one).
    pub fn end(self, forwarded: bool) {
        if let Some(gic) = platform::gic() {
            if forwarded {
                gic.priority_drop(self.iar);
            } else {
                gic.eoi(self.iar);
            }
        }
    }
}

fn crash(frame: &Frame, kind: usize) -> ! {
    let esr = ESR_EL2.get();
    let far = FAR_EL2.get();
    let cpu = percpu::index();
    let sp = frame as *const Frame as usize + FRAME_SIZE;
    let mut text = heapless::String::<2048>::new();
    let _ = write!(
        text,
        "\n*** kestrel: unhandled exception on cpu{cpu}: {}\n\
         ESR_EL2  {esr:#018x} (EC {:#04x}, ISS {:#x})\n\
         ELR_EL2  {:#018x}  FAR_EL2 {far:#018x}\n\
         SPSR_EL2 {:#018x}  SP      {sp:#018x}\n",
        KINDS[kind & 15],
        (esr >> 26) & 0x3f,
        esr & 0x1ff_ffff,
        frame.elr,
        frame.spsr,
    );
    for (i, pair) in frame.x.chunks(2).enumerate() {
        let _ = write!(text, "x{:<2} {:#018x}", i * 2, pair[0]);
        if let Some(v) = pair.get(1) {
            let _ = write!(text, "  x{:<2} {v:#018x}", i * 2 + 1);
        }
        let _ = writeln!(text);
    }
    out(format_args!("{text}"));
    if crate::base::fatal::is_ready() {
        crate::base::fatal::fatal(format_args!("unhandled exception on cpu{cpu}"))
    }
    out(format_args!("kestrel: halting cpu{cpu}\n"));
    platform::halt_cpu()
}

/// Crash output: through `klog` (no lock) once the platform is up, else
/// straight to the early console.
fn out(args: core::fmt::Arguments) {
    if platform::console_ready() {
        crate::base::klog::print_unlocked(args);
    } else {
        pl011::early_print(args);
    }
}
