//! An emulated Arm PL011 UART (Arm DDI 0183), enough for Linux's
//! `amba-pl011` driver and earlycon: transmit goes straight out (the FIFO is
//! always empty), receive has a 32-byte FIFO fed by the console multiplexer,
//! and the interrupt line is `(RIS & IMSC) != 0`.

use heapless::Deque;

use super::{MmioError, Width};

/// Size of the register frame.
pub const FRAME_SIZE: u64 = 0x1000;
/// Receive FIFO depth (the PL011's, with FIFOs enabled).
pub const RX_FIFO: usize = 32;

mod reg {
    pub const DR: u64 = 0x000;
    pub const RSR: u64 = 0x004;
    pub const FR: u64 = 0x018;
    pub const ILPR: u64 = 0x020;
    pub const IBRD: u64 = 0x024;
    pub const FBRD: u64 = 0x028;
    pub const LCR_H: u64 = 0x02c;
    pub const CR: u64 = 0x030;
    pub const IFLS: u64 = 0x034;
    pub const IMSC: u64 = 0x038;
    pub const RIS: u64 = 0x03c;
    pub const MIS: u64 = 0x040;
    pub const ICR: u64 = 0x044;
    pub const DMACR: u64 = 0x048;
    pub const ID_BASE: u64 = 0xfe0;
}

/// Flag register bits.
mod fr {
    pub const RXFE: u32 = 1 << 4;
    /// Never set: the transmit FIFO drains instantly.
    #[allow(dead_code)]
    pub const TXFF: u32 = 1 << 5;
    pub const RXFF: u32 = 1 << 6;
    pub const TXFE: u32 = 1 << 7;
}

/// Interrupt bits (RIS/MIS/IMSC/ICR).
pub mod int {
    pub const RX: u32 = 1 << 4;
    pub const TX: u32 = 1 << 5;
    pub const RT: u32 = 1 << 6;
    pub const ALL: u32 = 0x7ff;
}

/// PeriphID0-3 and CellID0-3 as an r1p5 PL011 reports them.
const ID: [u32; 8] = [0x11, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1];

/// What a register write asks the outside world to do (one type for both
/// UART models).
pub use super::UartEffect as Effect;

/// One emulated PL011.
pub struct Pl011 {
    rx: Deque<u8, RX_FIFO>,
    /// Latched interrupt causes other than RX (which follows the FIFO).
    latched: u32,
    imsc: u32,
    ibrd: u32,
    fbrd: u32,
    lcr_h: u32,
    cr: u32,
    ifls: u32,
    ilpr: u32,
    dmacr: u32,
    /// Input bytes dropped because the FIFO was full.
    pub rx_dropped: u64,
}

impl Default for Pl011 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pl011 {
    pub const fn new() -> Self {
        Pl011 {
            rx: Deque::new(),
            latched: 0,
            imsc: 0,
            ibrd: 0,
            fbrd: 0,
            lcr_h: 0,
            // UARTEN | TXE | RXE, as firmware leaves it.
            cr: 0x301,
            ifls: 0x12,
            ilpr: 0,
            dmacr: 0,
            rx_dropped: 0,
        }
    }

    fn ris(&self) -> u32 {
        let rx = if self.rx.is_empty() {
            0
        } else {
            int::RX | int::RT
        };
        self.latched | rx
    }

    /// The level of the UART's interrupt line.
    pub fn irq_level(&self) -> bool {
        self.ris() & self.imsc != 0
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

    /// Whether a guest read of `offset` changes the device: only the data
    /// register's (it pops the receive FIFO); every other read has no
    /// side effect.
    pub fn read_changes(offset: u64) -> bool {
        offset & !3 == reg::DR
    }

    /// A guest read of `offset`.
    pub fn read(&mut self, offset: u64, width: Width) -> Result<u64, MmioError> {
        check(offset, width)?;
        let v = match offset & !3 {
            reg::DR => self.rx.pop_front().map_or(0, u32::from),
            reg::RSR => 0,
            reg::FR => {
                let mut f = fr::TXFE;
                if self.rx.is_empty() {
                    f |= fr::RXFE;
                }
                if self.rx.is_full() {
                    f |= fr::RXFF;
                }
                f
            }
            reg::ILPR => self.ilpr,
            reg::IBRD => self.ibrd,
            reg::FBRD => self.fbrd,
            reg::LCR_H => self.lcr_h,
            reg::CR => self.cr,
            reg::IFLS => self.ifls,
            reg::IMSC => self.imsc,
            reg::RIS => self.ris(),
            reg::MIS => self.ris() & self.imsc,
            reg::DMACR => self.dmacr,
            o if (reg::ID_BASE..reg::ID_BASE + 32).contains(&o) => {
                ID[((o - reg::ID_BASE) / 4) as usize]
            }
            _ => 0,
        };
        // Sub-word reads see the addressed bytes.
        let shift = (offset & 3) * 8;
        Ok(u64::from(v >> shift) & mask(width))
    }

    /// A guest write of `value` to `offset`.
    pub fn write(&mut self, offset: u64, width: Width, value: u64) -> Result<Effect, MmioError> {
        check(offset, width)?;
        if offset & 3 != 0 {
            // Sub-word writes into the middle of a register: ignored, as the
            // PL011 decodes only word addresses.
            return Ok(Effect::None);
        }
        let v = (value & mask(width)) as u32;
        match offset {
            reg::DR => {
                // Sent at once: the TX FIFO drains instantly.
                self.latched |= int::TX;
                return Ok(Effect::Transmit(v as u8));
            }
            reg::RSR => {}
            reg::ILPR => self.ilpr = v & 0xff,
            reg::IBRD => self.ibrd = v & 0xffff,
            reg::FBRD => self.fbrd = v & 0x3f,
            reg::LCR_H => self.lcr_h = v & 0xff,
            reg::CR => self.cr = v & 0xff87,
            reg::IFLS => self.ifls = v & 0x3f,
            reg::IMSC => self.imsc = v & int::ALL,
            reg::ICR => self.latched &= !v,
            reg::DMACR => self.dmacr = v & 7,
            _ => {}
        }
        Ok(Effect::None)
    }
}

fn mask(width: Width) -> u64 {
    match width.bytes() {
        8 => u64::MAX,
        n => (1u64 << (n * 8)) - 1,
    }
}

fn check(offset: u64, width: Width) -> Result<(), MmioError> {
    let n = width.bytes();
    if offset >= FRAME_SIZE || n == 8 || !offset.is_multiple_of(n) {
        return Err(MmioError::BadAccess);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const W4: Width = match Width::new(4) {
        Some(w) => w,
        None => panic!(),
    };
    const W1: Width = match Width::new(1) {
        Some(w) => w,
        None => panic!(),
    };

    #[test]
    fn transmit_goes_out_and_latches_tx_interrupt() {
        let mut u = Pl011::new();
        assert_eq!(u.write(0, W4, 0x141).unwrap(), Effect::Transmit(0x41));
        assert_eq!(u.write(0, W1, b'x' as u64).unwrap(), Effect::Transmit(b'x'));
        assert!(!u.irq_level(), "masked");
        u.write(reg::IMSC, W4, int::TX as u64).unwrap();
        assert!(u.irq_level());
        u.write(reg::ICR, W4, int::TX as u64).unwrap();
        assert!(!u.irq_level());
        let fr = u.read(reg::FR, W4).unwrap() as u32;
        assert_eq!(fr & (fr::TXFE | fr::RXFE | fr::TXFF), fr::TXFE | fr::RXFE);
    }

    /// `read_changes` is what lets the UART skip its line update: every
    /// read it calls side-effect free must leave every register as it was.
    #[test]
    fn only_data_register_reads_change_anything() {
        let mut u = Pl011::new();
        u.write(reg::IMSC, W4, int::ALL as u64).unwrap();
        assert!(u.receive(b'a'));
        assert!(u.receive(b'b'));
        let snapshot = |u: &mut Pl011| {
            let regs: alloc::vec::Vec<u64> = (0..0x1000u64)
                .step_by(4)
                .filter(|&o| !Pl011::read_changes(o))
                .map(|o| u.read(o, W4).unwrap_or(u64::MAX))
                .collect();
            (regs, u.irq_level())
        };
        let before = snapshot(&mut u);
        for offset in 0..0x1000u64 {
            if Pl011::read_changes(offset) {
                continue;
            }
            for w in [W1, W4] {
                let _ = u.read(offset, w);
            }
        }
        assert_eq!(snapshot(&mut u), before);
        assert!(Pl011::read_changes(reg::DR));
        assert_eq!(u.read(reg::DR, W4).unwrap(), b'a' as u64);
    }

    #[test]
    fn receive_fifo_and_rx_interrupt() {
        let mut u = Pl011::new();
        u.write(reg::IMSC, W4, (int::RX | int::RT) as u64).unwrap();
        assert!(!u.irq_level());
        assert!(u.receive(b'a'));
        assert!(u.receive(b'b'));
        assert!(u.irq_level());
        assert_eq!(u.read(reg::FR, W4).unwrap() as u32 & fr::RXFE, 0);
        assert_eq!(u.read(reg::MIS, W4).unwrap() as u32, int::RX | int::RT);
        assert_eq!(u.read(0, W4).unwrap(), b'a' as u64);
        assert_eq!(u.read(0, W4).unwrap(), b'b' as u64);
        assert!(!u.irq_level(), "empty FIFO drops the line");
        assert_eq!(
            u.read(0, W4).unwrap(),
            0,
            "reading an empty FIFO is harmless"
        );
        for i in 0..RX_FIFO {
            assert!(u.receive(i as u8));
        }
        assert!(!u.receive(0xff));
        assert_eq!(u.rx_dropped, 1);
        assert_ne!(u.read(reg::FR, W4).unwrap() as u32 & fr::RXFF, 0);
    }

    #[test]
    fn identification_registers() {
        let mut u = Pl011::new();
        let id: Vec<u64> = (0..8).map(|i| u.read(0xfe0 + 4 * i, W4).unwrap()).collect();
        assert_eq!(id, [0x11, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1]);
    }

    #[test]
    fn control_registers_keep_what_the_guest_wrote() {
        let mut u = Pl011::new();
        u.write(reg::IBRD, W4, 0x1a).unwrap();
        u.write(reg::LCR_H, W4, 0x70).unwrap();
        u.write(reg::CR, W4, 0x301).unwrap();
        assert_eq!(u.read(reg::IBRD, W4).unwrap(), 0x1a);
        assert_eq!(u.read(reg::LCR_H, W4).unwrap(), 0x70);
        assert_eq!(u.read(reg::CR, W4).unwrap(), 0x301);
    }

    #[test]
    fn hostile_accesses_get_answers_not_panics() {
        let mut u = Pl011::new();
        for w in [1u8, 2, 4, 8] {
            let width = Width::new(w).unwrap();
            for off in (0..0x1100u64).step_by(1) {
                let ok = off < FRAME_SIZE && w != 8 && off % w as u64 == 0;
                assert_eq!(u.read(off, width).is_ok(), ok, "read {off:#x}/{w}");
                assert_eq!(
                    u.write(off, width, u64::MAX).is_ok(),
                    ok,
                    "write {off:#x}/{w}"
                );
            }
        }
        assert_eq!(Width::new(3), None);
    }
}
