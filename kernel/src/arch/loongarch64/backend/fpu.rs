//! The FP unit as the portable lazy-FP engine drives it ([`crate::vcpu::fpu::FpHw`]):
//! register moves in `arch::loongarch64::fp`, traps through EUEN. While a
//! vCPU that does not own the unit runs, EUEN.FPE/SXE/ASXE are 0 and its
//! first FP/LSX/LASX instruction raises FPD/SXD/ASXD (a VM exit); while it
//! owns it, EUEN is what the mode gives the guest ([`super::Mode::prepare_entry`]:
//! under trap-and-emulate the guest's virtual EUEN, so FP it disabled
//! itself still raises its own exception, delivered to it).

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::vcpu::fpu::{FpHw, LoongArchFpState};

use super::super::fp;

pub struct LaFpHw {
    level: u8,
    /// Whether the loaded vCPU owns the unit (FP traps off): this pCPU's
    /// flag, which its entry path reads without the engine's lock. Only
    /// this pCPU's engine changes it (other pCPUs ask and wait), so the
    /// flag and the engine never disagree where it is read.
    enabled: &'static AtomicBool,
}

impl LaFpHw {
    /// The unit at FP width `level`, its ownership kept in `enabled` (the
    /// pCPU's own flag; cleared here: nothing is loaded yet).
    pub fn new(level: u8, enabled: &'static AtomicBool) -> Self {
        enabled.store(false, Ordering::Relaxed);
        LaFpHw { level, enabled }
    }
}

impl FpHw for LaFpHw {
    type State = LoongArchFpState;

    fn save(&mut self, into: &mut LoongArchFpState) {
        fp::save(into, self.level);
    }

    fn restore(&mut self, from: &LoongArchFpState) {
        fp::restore(from, self.level);
    }

    fn trap_on(&mut self) {
        self.enabled.store(false, Ordering::Relaxed);
        set_guest_euen(0);
    }

    fn trap_off(&mut self) {
        self.enabled.store(true, Ordering::Relaxed);
    }
}

/// Sets the real EUEN the guest runs with.
pub fn set_guest_euen(v: u64) {
    // SAFETY: EUEN only gates FP/SIMD instructions; kestrel itself uses none
    // (softfloat), and the guest gets the unit only as the engine decided.
    unsafe { asm!("csrwr {0}, 0x2", inout(reg) v & 7 => _, options(nostack)) };
}
