//! An emulated NS16550A UART (byte registers, `reg-shift` 0), enough for
//! Linux's 8250 driver and simple polled guests: transmit goes straight out,
//! receive has a 16-byte FIFO fed by the console multiplexer, and the
//! interrupt line follows IER and the IIR priority rules.

use heapless::Deque;

use super::{MmioError, Width};

/// Size of the register frame.
pub const FRAME_SIZE: u64 = 0x100;
/// Receive FIFO depth.
pub const RX_FIFO: usize = 16;

mod reg {
    pub const RBR_THR_DLL: u64 = 0;
    pub const IER_DLM: u64 = 1;
    pub const IIR_FCR: u64 = 2;
    pub const LCR: u64 = 3;
    pub const MCR: u64 = 4;
    pub const LSR: u64 = 5;
    pub const MSR: u64 = 6;
    pub const SCR: u64 = 7;
}

mod ier {
    pub const RDI: u8 = 1 << 0;
    pub const THRI: u8 = 1 << 1;
}

mod iir {
    pub const NO_INT: u8 = 0x01;
    pub const THRI: u8 = 0x02;
    pub const RDI: u8 = 0x04;
    pub const FIFO_ENABLED: u8 = 0xc0;
}

mod lsr {
    pub const DR: u8 = 1 << 0;
    pub const THRE: u8 = 1 << 5;
    pub const TEMT: u8 = 1 << 6;
}

const LCR_DLAB: u8 = 1 << 7;
const MCR_LOOP: u8 = 1 << 4;
/// MSR with the modem lines up: DCD, DSR, CTS.
const MSR_LINES_UP: u8 = 0xb0;

/// What a register write asks the outside world to do (one type for both
/// UART models).
pub use super::UartEffect as Effect;

/// One emulated 16550A.
pub struct Ns16550 {
    rx: Deque<u8, RX_FIFO>,
    ier: u8,
    lcr: u8,
    mcr: u8,
    scr: u8,
    dll: u8,
    dlm: u8,
    fifo_enabled: bool,
    /// "Transmitter empty" interrupt pending (cleared by reading IIR or writing THR).
    thr_pending: bool,
    /// Input bytes dropped because the FIFO was full.
    pub rx_dropped: u64,
}

impl Default for Ns16550 {
    fn default() -> Self {
        Self::new()
    }
}

impl Ns16550 {
    pub const fn new() -> Self {
        Ns16550 {
            rx: Deque::new(),
            ier: 0,
            lcr: 0x03,
            mcr: 0,
            scr: 0,
            dll: 1,
            dlm: 0,
            fifo_enabled: false,
            thr_pending: false,
            rx_dropped: 0,
        }
    }

    fn iir(&self) -> u8 {
        let fifo = if self.fifo_enabled {
            iir::FIFO_ENABLED
        } else {
            0
        };
        let cause = if self.ier & ier::RDI != 0 && !self.rx.is_empty() {
            iir::RDI
        } else if self.ier & ier::THRI != 0 && self.thr_pending {
            iir::THRI
        } else {
            iir::NO_INT
        };
        fifo | cause
    }

    /// The level of the UART's interrupt line.
    pub fn irq_level(&self) -> bool {
        self.iir() & iir::NO_INT == 0
    }

    /// Whether the receive FIFO has room for another byte (else the
    /// console multiplexer holds typed input until it has).
    pub fn can_receive(&self) -> bool {
        !self.rx.is_full()
    }

    /// A byte typed for this VM. Returns false if the FIFO was full.
    pub fn receive(&mut self, byte: u8) -> bool {
        if self.rx.push_back(byte).is_err() {
            self.rx_dropped += 1;
            return false;
        }
        true
    }

    fn dlab(&self) -> bool {
        self.lcr & LCR_DLAB != 0
    }

    /// A guest read of `offset` (byte registers only).
    pub fn read(&mut self, offset: u64, width: Width) -> Result<u64, MmioError> {
        check(offset, width)?;
        let v = match offset {
            reg::RBR_THR_DLL if self.dlab() => self.dll,
            reg::RBR_THR_DLL => self.rx.pop_front().unwrap_or(0),
            reg::IER_DLM if self.dlab() => self.dlm,
            reg::IER_DLM => self.ier,
            reg::IIR_FCR => {
                let v = self.iir();
                if v & 0x0f == iir::THRI {
                    self.thr_pending = false;
                }
                v
            }
            reg::LCR => self.lcr,
            reg::MCR => self.mcr,
            reg::LSR => {
                let dr = if self.rx.is_empty() { 0 } else { lsr::DR };
                lsr::THRE | lsr::TEMT | dr
            }
            reg::MSR if self.mcr & MCR_LOOP != 0 => {
                // Loopback: RTS->CTS, DTR->DSR, OUT1->RI, OUT2->DCD.
                let m = self.mcr;
                ((m & 0x02) << 3) | ((m & 0x01) << 5) | ((m & 0x04) << 4) | ((m & 0x08) << 4)
            }
            reg::MSR => MSR_LINES_UP,
            reg::SCR => self.scr,
            _ => 0,
        };
        Ok(u64::from(v))
    }

    /// A guest write of `value` to `offset`.
    pub fn write(&mut self, offset: u64, width: Width, value: u64) -> Result<Effect, MmioError> {
        check(offset, width)?;
        let v = value as u8;
        match offset {
            reg::RBR_THR_DLL if self.dlab() => self.dll = v,
            reg::RBR_THR_DLL => {
                // Sent at once; the holding register is empty again.
                self.thr_pending = true;
                if self.mcr & MCR_LOOP != 0 {
                    self.receive(v);
                    return Ok(Effect::None);
                }
                return Ok(Effect::Transmit(v));
            }
            reg::IER_DLM if self.dlab() => self.dlm = v,
            reg::IER_DLM => {
                let enabling_thri = v & ier::THRI != 0 && self.ier & ier::THRI == 0;
                self.ier = v & 0x0f;
                if enabling_thri {
                    // The holding register is empty: say so at once.
                    self.thr_pending = true;
                }
            }
            reg::IIR_FCR => {
                self.fifo_enabled = v & 1 != 0;
                if v & 0x02 != 0 {
                    self.rx.clear();
                }
            }
            reg::LCR => self.lcr = v,
            reg::MCR => self.mcr = v & 0x1f,
            reg::SCR => self.scr = v,
            _ => {}
        }
        Ok(Effect::None)
    }
}

fn check(offset: u64, width: Width) -> Result<(), MmioError> {
    if offset >= FRAME_SIZE || width.bytes() != 1 {
        return Err(MmioError::BadAccess);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Width {
        Width::new(1).unwrap()
    }

    #[test]
    fn transmit_and_line_status() {
        let mut u = Ns16550::new();
        assert_eq!(
            u.write(0, b(), b'k' as u64).unwrap(),
            Effect::Transmit(b'k')
        );
        let lsr = u.read(reg::LSR, b()).unwrap() as u8;
        assert_eq!(
            lsr & (lsr::THRE | lsr::TEMT | lsr::DR),
            lsr::THRE | lsr::TEMT
        );
        assert!(!u.irq_level(), "no interrupt enabled");
    }

    #[test]
    fn receive_interrupt_follows_fifo_and_ier() {
        let mut u = Ns16550::new();
        u.receive(b'x');
        assert!(!u.irq_level());
        u.write(reg::IER_DLM, b(), ier::RDI as u64).unwrap();
        assert!(u.irq_level());
        assert_eq!(u.read(reg::IIR_FCR, b()).unwrap() as u8 & 0x0f, iir::RDI);
        assert_eq!(u.read(reg::LSR, b()).unwrap() as u8 & lsr::DR, lsr::DR);
        assert_eq!(u.read(0, b()).unwrap(), b'x' as u64);
        assert!(!u.irq_level());
        for i in 0..RX_FIFO as u8 {
            assert!(u.receive(i));
        }
        assert!(!u.receive(0));
        assert_eq!(u.rx_dropped, 1);
    }

    #[test]
    fn thr_empty_interrupt_is_cleared_by_iir_read() {
        let mut u = Ns16550::new();
        u.write(reg::IER_DLM, b(), ier::THRI as u64).unwrap();
        assert!(
            u.irq_level(),
            "enabling THRI with an empty THR interrupts at once"
        );
        assert_eq!(u.read(reg::IIR_FCR, b()).unwrap() as u8 & 0x0f, iir::THRI);
        assert!(!u.irq_level());
        u.write(0, b(), b'a' as u64).unwrap();
        assert!(u.irq_level(), "transmit done");
    }

    #[test]
    fn divisor_latch_and_loopback() {
        let mut u = Ns16550::new();
        u.write(reg::LCR, b(), 0x83).unwrap();
        u.write(0, b(), 0x36).unwrap();
        u.write(1, b(), 0x01).unwrap();
        assert_eq!(u.read(0, b()).unwrap(), 0x36);
        assert_eq!(u.read(1, b()).unwrap(), 0x01);
        u.write(reg::LCR, b(), 0x03).unwrap();
        assert_eq!(u.read(1, b()).unwrap(), 0, "IER untouched by DLM writes");
        u.write(reg::MCR, b(), (MCR_LOOP | 0x0f) as u64).unwrap();
        assert_eq!(
            u.write(0, b(), b'z' as u64).unwrap(),
            Effect::None,
            "loopback sends nothing out"
        );
        assert_eq!(u.read(0, b()).unwrap(), b'z' as u64);
        assert_eq!(u.read(reg::MSR, b()).unwrap() as u8 & 0xf0, 0xf0);
    }

    #[test]
    fn hostile_accesses_get_answers_not_panics() {
        let mut u = Ns16550::new();
        for w in [1u8, 2, 4, 8] {
            let width = Width::new(w).unwrap();
            for off in 0..0x200u64 {
                let ok = off < FRAME_SIZE && w == 1;
                assert_eq!(u.read(off, width).is_ok(), ok);
                assert_eq!(u.write(off, width, u64::MAX).is_ok(), ok);
            }
        }
    }
}
