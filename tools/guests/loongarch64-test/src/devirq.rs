//! The device interrupt path: the 16550's line through the PCH-PIC (MMIO)
//! to an EIOINTC vector (IOCSR) routed to a chosen CPU's HWI1, programmed
//! the way Linux's drivers do it. The same code passes on bare QEMU virt,
//! which proves what it checks.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::console::{fail, pass, Outcome};
use crate::cpu::{self, iocsr_read32, iocsr_read64, iocsr_write32, iocsr_write64};
use crate::{wait_for, CPUS, MAX_CPUS};

/// QEMU virt's PCH-PIC ("platic") and the 16550's line on it.
pub const PCH_PIC: usize = 0x1000_0000;
const UART_LINE: u32 = 2;
/// The EIOINTC vector the check gives the 16550. Below 32: QEMU virt
/// wires only PCH-PIC vectors 0..31 to its EIOINTC (a vector beyond them
/// crashes QEMU 10 when the line rises).
pub const VECTOR: u64 = 29;

mod pch {
    pub const MASK: usize = 0x20;
    pub const HTMSI_EN: usize = 0x40;
    pub const EDGE: usize = 0x60;
    pub const HTVEC: usize = 0x200;
    pub const ISR: usize = 0x3a0;
    pub const POL: usize = 0x3e0;
}

mod eio {
    pub const MISC_FUNC: u64 = 0x420;
    pub const EXT_IOI_EN: u64 = 1 << 48;
    pub const IPMAP: u64 = 0x14c0;
    pub const ENABLE: u64 = 0x1600;
    pub const ISR: u64 = 0x1800;
    pub const ROUTE: u64 = 0x1c00;
}

/// 16550 interrupt enable register, and its transmitter-empty bit.
const UART_IER: usize = 1;
const IER_THRI: u8 = 0x02;

#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const ZERO: AtomicU64 = AtomicU64::new(0);
/// Per CPU: EIOINTC vectors taken, and the last one.
pub static HITS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
pub static LAST: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];

fn pch_read(off: usize) -> u32 {
    // SAFETY: the PCH-PIC page is identity mapped uncached (`checks::paging`);
    // its registers have no read side effects.
    unsafe { core::ptr::read_volatile((PCH_PIC + off) as *const u32) }
}

fn pch_write(off: usize, v: u32) {
    // SAFETY: as `pch_read`; only this check programs the PCH-PIC.
    unsafe { core::ptr::write_volatile((PCH_PIC + off) as *mut u32, v) };
}

fn pch_write8(off: usize, v: u8) {
    // SAFETY: as `pch_write` (the vector bytes are byte registers).
    unsafe { core::ptr::write_volatile((PCH_PIC + off) as *mut u8, v) };
}

pub fn uart_ier(v: u8) {
    // SAFETY: the 16550 is identity mapped uncached; IER only changes which
    // of its interrupts are enabled (LCR.DLAB is 0: the console never sets it).
    unsafe { core::ptr::write_volatile((crate::console::base() + UART_IER) as *mut u8, v) };
}

/// From the interrupt handler, HWI0..3 pending: claims this CPU's EIOINTC
/// ISR bits (write 1 to clear) and quiets the 16550.
pub fn interrupt(me: usize) {
    for w in 0..4u64 {
        let isr = iocsr_read64(eio::ISR + 8 * w);
        if isr == 0 {
            continue;
        }
        // SAFETY: clears this CPU's ISR bits just read.
        unsafe { iocsr_write64(eio::ISR + 8 * w, isr) };
        let mut bits = isr;
        while bits != 0 {
            let v = w * 64 + u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            if v == VECTOR {
                uart_ier(0);
            }
            if v == crate::virtio::VECTOR {
                crate::virtio::interrupt();
            }
            LAST[me].store(v, Ordering::Relaxed);
            HITS[me].fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn route_to(target: usize) {
    let word = eio::ROUTE + (VECTOR & !3);
    let shift = 8 * (VECTOR & 3);
    let old = iocsr_read32(word);
    // Node 0, core bitmap: the first four CPUs (what QEMU's model routes).
    let new = (old & !(0xff << shift)) | (1u32 << target) << shift;
    // SAFETY: routes this check's vector only.
    unsafe { iocsr_write32(word, new) };
}

/// Routes PCH-PIC `line` (level high) to EIOINTC `vector` on HWI1 of
/// CPU `target` (0-3) and unmasks it.
pub fn program_line(line: u32, vector: u64, target: usize) {
    // SAFETY: EIOINTC routing on, every group to HWI1 (as `check`), this
    // vector routed and enabled.
    unsafe {
        let misc = cpu::iocsr_read64(eio::MISC_FUNC);
        iocsr_write64(eio::MISC_FUNC, misc | eio::EXT_IOI_EN);
        iocsr_write32(eio::IPMAP, 0x0202_0202);
        iocsr_write32(eio::IPMAP + 4, 0x0202_0202);
    }
    let word = eio::ROUTE + (vector & !3);
    let shift = 8 * (vector & 3);
    let old = iocsr_read32(word);
    let en = eio::ENABLE + (vector / 32) * 4;
    // SAFETY: routes and enables this vector only.
    unsafe {
        iocsr_write32(word, (old & !(0xff << shift)) | (1u32 << target) << shift);
        iocsr_write32(en, iocsr_read32(en) | 1 << (vector % 32));
    }
    let (off, bit) = ((line / 32 * 4) as usize, 1u32 << (line % 32));
    pch_write8(pch::HTVEC + line as usize, vector as u8);
    pch_write(pch::EDGE + off, pch_read(pch::EDGE + off) & !bit);
    pch_write(pch::POL + off, pch_read(pch::POL + off) & !bit);
    pch_write(pch::HTMSI_EN + off, pch_read(pch::HTMSI_EN + off) | bit);
    pch_write(pch::MASK + off, pch_read(pch::MASK + off) & !bit);
}

/// Masks `line` and disables `vector` again.
pub fn release_line(line: u32, vector: u64) {
    let (off, bit) = ((line / 32 * 4) as usize, 1u32 << (line % 32));
    pch_write(pch::MASK + off, pch_read(pch::MASK + off) | bit);
    let en = eio::ENABLE + (vector / 32) * 4;
    // SAFETY: disables this vector only.
    unsafe { iocsr_write32(en, iocsr_read32(en) & !(1 << (vector % 32))) };
}

fn snapshot() -> [u64; MAX_CPUS] {
    core::array::from_fn(|c| HITS[c].load(Ordering::Acquire))
}

/// Raises the 16550's THRE interrupt and waits for vector [`VECTOR`] on
/// `target` alone; the failure, if it did not.
fn deliver(target: usize, n: usize) -> Option<Outcome> {
    let before = snapshot();
    uart_ier(IER_THRI);
    if !wait_for(2_000_000, || {
        HITS[target].load(Ordering::Acquire) > before[target]
    }) {
        uart_ier(0);
        return Some(fail!("the 16550's interrupt never reached CPU {target}"));
    }
    let last = LAST[target].load(Ordering::Relaxed);
    if last != VECTOR {
        return Some(fail!("CPU {target} took vector {last}, not {VECTOR}"));
    }
    if let Some(c) = (0..n).find(|&c| c != target && HITS[c].load(Ordering::Acquire) != before[c]) {
        return Some(fail!("CPU {c} took an interrupt routed to CPU {target}"));
    }
    None
}

pub fn check() -> Outcome {
    let n = CPUS.load(Ordering::Acquire).clamp(1, 4);
    let target = n - 1;
    cpu::set_irqs(true);
    uart_ier(0);
    // SAFETY: EIOINTC set-up as Linux's driver does it: routing on, every
    // vector group to HWI1, this check's vector enabled.
    unsafe {
        let misc = cpu::iocsr_read64(eio::MISC_FUNC);
        iocsr_write64(eio::MISC_FUNC, misc | eio::EXT_IOI_EN);
        iocsr_write32(eio::IPMAP, 0x0202_0202);
        iocsr_write32(eio::IPMAP + 4, 0x0202_0202);
    }
    route_to(target);
    let en = eio::ENABLE + (VECTOR / 32) * 4;
    // SAFETY: enables this check's vector only.
    unsafe { iocsr_write32(en, iocsr_read32(en) | 1 << (VECTOR % 32)) };
    // PCH-PIC: everything masked, line 2 level-high on VECTOR.
    let bit = 1u32 << UART_LINE;
    pch_write(pch::MASK, 0xffff_ffff);
    pch_write8(pch::HTVEC + UART_LINE as usize, VECTOR as u8);
    pch_write(pch::EDGE, pch_read(pch::EDGE) & !bit);
    pch_write(pch::POL, pch_read(pch::POL) & !bit);
    pch_write(pch::HTMSI_EN, pch_read(pch::HTMSI_EN) | bit);

    // Masked: the request goes nowhere.
    let before = snapshot();
    uart_ier(IER_THRI);
    let leaked = wait_for(20_000, || snapshot() != before);
    let isr_masked = pch_read(pch::ISR) & bit;
    uart_ier(0);
    if leaked || isr_masked != 0 {
        return fail!("a masked PCH-PIC line interrupted (ISR {isr_masked:#x})");
    }
    pch_write(pch::MASK, !bit);
    let mut outcome = deliver(target, n);
    // The same line, routed to another CPU.
    if outcome.is_none() && n > 1 {
        route_to(0);
        outcome = deliver(0, n);
    }
    pch_write(pch::MASK, 0xffff_ffff);
    // SAFETY: disables this check's vector again.
    unsafe { iocsr_write32(en, iocsr_read32(en) & !(1 << (VECTOR % 32))) };
    match outcome {
        None if n > 1 => pass!(
            "16550 line {UART_LINE} -> PCH-PIC -> EIOINTC vector {VECTOR} -> HWI1 of CPU {target}, then of CPU 0 after re-routing; none while masked"
        ),
        None => pass!(
            "16550 line {UART_LINE} -> PCH-PIC -> EIOINTC vector {VECTOR} -> HWI1 of CPU 0; none while masked"
        ),
        Some(o) => o,
    }
}
