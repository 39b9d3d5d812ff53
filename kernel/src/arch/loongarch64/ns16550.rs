//! Polled NS16550A output (register stride 1, as on QEMU's LoongArch virt
//! machine and the Loongson 3A5000/LS7A UARTs). Firmware has set the baud
//! rate; kestrel transmits, and polls for input bytes for the VMs' consoles.

use core::sync::atomic::{AtomicU64, Ordering};

use super::dmw;

const THR: u64 = 0;
const LSR: u64 = 5;
const LSR_THRE: u8 = 1 << 5;
const LSR_DR: u8 = 1 << 0;

pub struct Ns16550 {
    /// Uncached virtual address of the register block; 0 = no console.
    base: AtomicU64,
}

impl Ns16550 {
    pub const fn new() -> Self {
        Ns16550 {
            base: AtomicU64::new(0),
        }
    }

    /// Uses the UART at physical address `pa` from now on.
    pub fn set_base(&self, pa: u64) {
        self.base.store(dmw::uncached(pa), Ordering::Release);
    }

    pub fn base_pa(&self) -> u64 {
        dmw::to_phys(self.base.load(Ordering::Acquire))
    }

    pub fn write_bytes(&self, bytes: &[u8]) {
        let base = self.base.load(Ordering::Acquire);
        if base == 0 {
            return;
        }
        let lsr = (base + LSR) as *const u8;
        let thr = (base + THR) as *mut u8;
        for &b in bytes {
            // SAFETY: `base` maps a 16550's registers through the uncached
            // window (set_base); LSR and THR are byte registers.
            unsafe {
                while core::ptr::read_volatile(lsr) & LSR_THRE == 0 {
                    core::hint::spin_loop();
                }
                core::ptr::write_volatile(thr, b);
            }
        }
    }
}

impl Ns16550 {
    /// A received byte, if one is waiting (LSR.DR).
    pub fn read_byte(&self) -> Option<u8> {
        let base = self.base.load(Ordering::Acquire);
        if base == 0 {
            return None;
        }
        // SAFETY: as in `write_bytes`; reading RBR only pops the byte LSR.DR
        // says is there.
        unsafe {
            if core::ptr::read_volatile((base + LSR) as *const u8) & LSR_DR == 0 {
                return None;
            }
            Some(core::ptr::read_volatile((base + THR) as *const u8))
        }
    }
}

impl Default for Ns16550 {
    fn default() -> Self {
        Self::new()
    }
}
