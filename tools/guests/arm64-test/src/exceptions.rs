//! Exception handling: interrupts (SGIs, the virtual timer) and the
//! synchronous aborts the abort check provokes on purpose. Anything else
//! is fatal: the guest reports it and powers off.

use crate::cpu::{sysreg_read, CPUS, VTIMER_INTID};
use crate::gic;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The frame `start.S` saves on every exception.
#[repr(C)]
pub struct Frame {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    pub fpcr: u64,
    pub fpsr: u64,
    _pad: u64,
    pub q: [u128; 32],
}

/// Set to the address being probed while a probe is armed (0 = none).
static PROBE_ADDR: AtomicU64 = AtomicU64::new(0);
/// ESR_EL1 of the abort the probe took (0 = none).
static PROBE_ESR: AtomicU64 = AtomicU64::new(0);
/// FAR_EL1 of that abort.
static PROBE_FAR: AtomicU64 = AtomicU64::new(0);

/// Set while [`probe_any`] runs: any synchronous exception is recorded and
/// the faulting instruction skipped (an instruction abort returns to the
/// caller of the probed code through x30).
static PROBE_ANY: AtomicBool = AtomicBool::new(false);

/// Runs `f` with every synchronous exception caught: returns what `f`
/// returned and ESR_EL1 of the first exception it took (0 = none), with
/// FAR_EL1. Used by the hostile-guest mode to see what answer each probe
/// got.
pub fn probe_any(f: impl FnOnce() -> u64) -> (u64, u64, u64) {
    PROBE_ESR.store(0, Ordering::SeqCst);
    PROBE_ANY.store(true, Ordering::SeqCst);
    let v = f();
    PROBE_ANY.store(false, Ordering::SeqCst);
    (
        v,
        PROBE_ESR.load(Ordering::SeqCst),
        PROBE_FAR.load(Ordering::SeqCst),
    )
}

/// What a probe read saw.
#[derive(Clone, Copy, Debug)]
pub struct ProbeResult {
    /// ESR_EL1, 0 if no exception was taken.
    pub esr: u64,
    pub far: u64,
    /// The value read, if the load completed.
    pub value: u64,
}

/// Reads 8 bytes at `addr`, catching a synchronous data abort (the
/// handler skips the load).
pub fn probe_read(addr: u64) -> ProbeResult {
    PROBE_ESR.store(0, Ordering::SeqCst);
    PROBE_ADDR.store(addr, Ordering::SeqCst);
    let value: u64;
    // SAFETY: the load may fault; the armed probe makes the sync handler
    // record the abort and resume at the next instruction. `value` is then
    // whatever the register held, which is reported but not trusted.
    unsafe {
        core::arch::asm!("mov {v}, xzr", "ldr {v}, [{a}]", a = in(reg) addr, v = out(reg) value,
            options(nostack));
    }
    PROBE_ADDR.store(0, Ordering::SeqCst);
    ProbeResult {
        esr: PROBE_ESR.load(Ordering::SeqCst),
        far: PROBE_FAR.load(Ordering::SeqCst),
        value,
    }
}

const KIND_NAMES: [&str; 16] = [
    "sync (SP0)",
    "irq (SP0)",
    "fiq (SP0)",
    "serror (SP0)",
    "sync",
    "irq",
    "fiq",
    "serror",
    "sync (lower EL)",
    "irq (lower EL)",
    "fiq (lower EL)",
    "serror (lower EL)",
    "sync (AArch32)",
    "irq (AArch32)",
    "fiq (AArch32)",
    "serror (AArch32)",
];

#[no_mangle]
extern "C" fn exception_handler(kind: u64, frame: &mut Frame) {
    match kind {
        5 => irq(),
        4 => {
            let esr = sysreg_read!("esr_el1");
            let far = sysreg_read!("far_el1");
            let ec = (esr >> 26) & 0x3F;
            if ec == 0x25 && PROBE_ADDR.load(Ordering::SeqCst) != 0 {
                PROBE_FAR.store(far, Ordering::SeqCst);
                PROBE_ESR.store(esr, Ordering::SeqCst);
                frame.elr += 4;
                return;
            }
            if PROBE_ANY.load(Ordering::SeqCst) {
                if PROBE_ESR.load(Ordering::SeqCst) == 0 {
                    PROBE_FAR.store(far, Ordering::SeqCst);
                    PROBE_ESR.store(esr, Ordering::SeqCst);
                }
                // An instruction abort (EC 0x21) has nothing to skip: go
                // back to the caller, which reached it with BLR.
                frame.elr = if ec == 0x21 {
                    frame.x[30]
                } else {
                    frame.elr + 4
                };
                return;
            }
            if crate::el1state::debug_exception(ec, frame) {
                return;
            }
            fatal(kind, frame)
        }
        _ => fatal(kind, frame),
    }
}

fn irq() {
    let me = &CPUS[crate::cpu::index()];
    loop {
        let (intid, raw) = gic::ack();
        if intid >= 1020 {
            break;
        }
        match intid {
            0..=15 => {
                if let Some(src) = gic::sgi_source(raw) {
                    me.sgi_source.store(src + 1, Ordering::Relaxed);
                }
                me.sgi[intid as usize].fetch_add(1, Ordering::Release);
            }
            VTIMER_INTID => {
                crate::cpu::timer_stop();
                me.ticks.fetch_add(1, Ordering::Release);
            }
            crate::el1state::PTIMER_INTID => crate::el1state::ptimer_irq(),
            _ => {
                me.last_other.store(intid, Ordering::Relaxed);
                me.other_irqs.fetch_add(1, Ordering::Relaxed);
            }
        }
        gic::eoi(raw);
    }
}

fn fatal(kind: u64, frame: &Frame) -> ! {
    let esr = sysreg_read!("esr_el1");
    let far = sysreg_read!("far_el1");
    crate::println!(
        "FAIL {} {}: unexpected exception on CPU {}: {} ESR {:#x} (EC {:#x}) ELR {:#x} FAR {:#x} SPSR {:#x}",
        crate::checks::current().0,
        crate::checks::current().1,
        crate::cpu::index(),
        KIND_NAMES[kind as usize & 15],
        esr,
        (esr >> 26) & 0x3F,
        frame.elr,
        far,
        frame.spsr
    );
    crate::checks::finish_fatal()
}
