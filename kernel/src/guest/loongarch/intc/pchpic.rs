//! The platform interrupt controller of a Loongson 7A bridge (PCH-PIC,
//! "platic"), MMIO at QEMU virt's address, as Linux's `irq-loongson-pch-pic`
//! driver programs it: 64 input lines, each turned into a vector of the
//! EIOINTC (HT message mode).
//!
//! | offset        | what                                                    |
//! |---------------|---------------------------------------------------------|
//! | 0x000 / 0x004 | ID; version and (lines - 1) in bits 23:16               |
//! | 0x020         | mask (1 = masked), 64 bits                              |
//! | 0x040         | HT-MSI enable: only enabled lines send vectors          |
//! | 0x060         | edge (1) or level (0)                                   |
//! | 0x080         | clear: write 1 to clear an edge line's request          |
//! | 0x0c0 / 0x0e0 | auto control 0 / 1 (kept; no effect)                    |
//! | 0x100..0x140  | route entry, one byte per line (kept; HT mode ignores)  |
//! | 0x200..0x240  | HT-MSI vector, one byte per line: the EIOINTC vector    |
//! | 0x380         | IRR, request register (read only)                       |
//! | 0x3a0         | ISR: requests sent (IRR and not masked, read only)      |
//! | 0x3e0         | polarity (1 = active low / falling edge)                |
//!
//! A line's input, inverted where its polarity bit says so, makes its
//! request: level lines follow it, edge lines latch on its rise until the
//! guest clears them. A request that is neither masked nor without HT-MSI
//! drives its vector's EIOINTC input ([`PchPic::vectors`]); several lines
//! on one vector are or-ed.
//!
//! 32-bit registers take 4- and 8-byte accesses (8 = both halves); the
//! byte arrays any naturally aligned width. Anything else is refused
//! ([`BadAccess`]; both LoongArch backends then complete the guest's
//! access, a load reading 0 and a store dropped, as for any device's
//! refused access); offsets with no register read 0 and
//! ignore writes.

pub const LINES: usize = 64;
/// The register window (the device tree's `reg` size).
pub const SIZE: u64 = 0x400;

pub const ID: u64 = 0x000;
pub const ID_HI: u64 = 0x004;
pub const MASK: u64 = 0x020;
pub const HTMSI_EN: u64 = 0x040;
pub const EDGE: u64 = 0x060;
pub const CLEAR: u64 = 0x080;
pub const AUTO0: u64 = 0x0c0;
pub const AUTO1: u64 = 0x0e0;
pub const ROUTE: u64 = 0x100;
pub const HTVEC: u64 = 0x200;
pub const IRR: u64 = 0x380;
pub const ISR: u64 = 0x3a0;
pub const POL: u64 = 0x3e0;

const ID_VALUE: u32 = 0x0700_0000;
const VERSION: u32 = 1;

/// An access the registers do not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadAccess;

/// One VM's PCH-PIC (plain state; [`super::Intc`] locks it).
#[derive(Clone, Debug)]
pub struct PchPic {
    mask: u64,
    htmsi_en: u64,
    edge: u64,
    auto0: u64,
    auto1: u64,
    pol: u64,
    route: [u8; LINES],
    htvec: [u8; LINES],
    /// Device line levels as the devices drive them.
    input: u64,
    /// Request register.
    irr: u64,
}

impl Default for PchPic {
    fn default() -> Self {
        Self::new()
    }
}

impl PchPic {
    pub const fn new() -> PchPic {
        PchPic {
            mask: u64::MAX,
            htmsi_en: 0,
            edge: 0,
            auto0: 0,
            auto1: 0,
            pol: 0,
            route: [1; LINES],
            htvec: [0; LINES],
            input: 0,
            irr: 0,
        }
    }

    /// Back to the power-on state, every line low (the devices are reset
    /// with it).
    pub fn reset(&mut self) {
        *self = PchPic::new();
    }

    fn effective(&self) -> u64 {
        self.input ^ self.pol
    }

    /// Recomputes level requests after the input or polarity changed;
    /// `rose` are the effective inputs that went from 0 to 1.
    fn update(&mut self, old_effective: u64) {
        let e = self.effective();
        let rose = e & !old_effective;
        self.irr = (self.irr & self.edge) | (rose & self.edge) | (e & !self.edge);
    }

    /// Drives input line `line` (0..64; others ignored) to `level`.
    pub fn set_level(&mut self, line: usize, level: bool) {
        if line >= LINES {
            return;
        }
        let old = self.effective();
        if level {
            self.input |= 1 << line;
        } else {
            self.input &= !(1 << line);
        }
        self.update(old);
    }

    /// Requests sent: IRR, not masked.
    pub fn isr(&self) -> u64 {
        self.irr & !self.mask
    }

    /// Which EIOINTC input vectors the controller drives high now.
    pub fn vectors(&self) -> [u64; 4] {
        let mut out = [0u64; 4];
        let mut send = self.isr() & self.htmsi_en;
        while send != 0 {
            let line = send.trailing_zeros() as usize;
            send &= send - 1;
            let v = usize::from(self.htvec[line]);
            out[v / 64] |= 1 << (v % 64);
        }
        out
    }

    pub fn irr(&self) -> u64 {
        self.irr
    }

    fn reg64(&self, off: u64) -> Option<u64> {
        Some(match off {
            ID => u64::from(ID_VALUE) | u64::from(VERSION | ((LINES as u32 - 1) << 16)) << 32,
            MASK => self.mask,
            HTMSI_EN => self.htmsi_en,
            EDGE => self.edge,
            CLEAR => 0,
            AUTO0 => self.auto0,
            AUTO1 => self.auto1,
            IRR => self.irr,
            ISR => self.isr(),
            POL => self.pol,
            _ => return None,
        })
    }

    fn set_reg64(&mut self, off: u64, keep: u64, val: u64) {
        let merge = |old: u64| (old & keep) | (val & !keep);
        match off {
            MASK => self.mask = merge(self.mask),
            HTMSI_EN => self.htmsi_en = merge(self.htmsi_en),
            EDGE => {
                self.edge = merge(self.edge);
                // A line made level follows its input at once.
                let e = self.effective();
                self.irr = (self.irr & self.edge) | (e & !self.edge);
            }
            CLEAR => self.irr &= !(val & !keep & self.edge),
            AUTO0 => self.auto0 = merge(self.auto0),
            AUTO1 => self.auto1 = merge(self.auto1),
            POL => {
                let old = self.effective();
                self.pol = merge(self.pol);
                self.update(old);
            }
            _ => {}
        }
    }

    /// A guest load of `size` bytes at `off`.
    pub fn read(&self, off: u64, size: u64) -> Result<u64, BadAccess> {
        if !matches!(size, 1 | 2 | 4 | 8) || !off.is_multiple_of(size) || off >= SIZE {
            return Err(BadAccess);
        }
        if let Some(arr) = self.bytes(off) {
            let i = (off % 0x100) as usize;
            let mut v = 0u64;
            for k in (0..size as usize).rev() {
                v = v << 8 | u64::from(arr.get(i + k).copied().unwrap_or(0));
            }
            return Ok(v);
        }
        if size < 4 {
            return Err(BadAccess);
        }
        let base = off & !7;
        let v = self.reg64(base).unwrap_or(0);
        Ok(match (size, off & 4) {
            (8, _) => v,
            (_, 0) => v & 0xffff_ffff,
            _ => v >> 32,
        })
    }

    /// A guest store of `size` bytes of `val` at `off`.
    pub fn write(&mut self, off: u64, size: u64, val: u64) -> Result<(), BadAccess> {
        if !matches!(size, 1 | 2 | 4 | 8) || !off.is_multiple_of(size) || off >= SIZE {
            return Err(BadAccess);
        }
        if (ROUTE..ROUTE + 0x100).contains(&off) || (HTVEC..HTVEC + 0x100).contains(&off) {
            let i = (off % 0x100) as usize;
            let arr = if off < HTVEC {
                &mut self.route
            } else {
                &mut self.htvec
            };
            for k in 0..size as usize {
                if let Some(b) = arr.get_mut(i + k) {
                    *b = (val >> (8 * k)) as u8;
                }
            }
            return Ok(());
        }
        if size < 4 {
            return Err(BadAccess);
        }
        let base = off & !7;
        let (keep, v) = match (size, off & 4) {
            (8, _) => (0, val),
            (_, 0) => (0xffff_ffff_0000_0000, val & 0xffff_ffff),
            _ => (0xffff_ffff, val << 32),
        };
        self.set_reg64(base, keep, v);
        Ok(())
    }

    fn bytes(&self, off: u64) -> Option<&[u8; LINES]> {
        if (ROUTE..ROUTE + 0x100).contains(&off) {
            Some(&self.route)
        } else if (HTVEC..HTVEC + 0x100).contains(&off) {
            Some(&self.htvec)
        } else {
            None
        }
    }

    /// Invariants (tests and fuzzing): level requests follow the inputs.
    pub fn check(&self) -> Result<(), &'static str> {
        if (self.irr ^ self.effective()) & !self.edge != 0 {
            return Err("level request differs from its input");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Linux's driver does at probe, then for one level-high line.
    fn linux_probe() -> PchPic {
        let mut p = PchPic::new();
        assert_eq!(p.read(ID_HI, 4).unwrap() >> 16 & 0xff, 63);
        for i in 0..64 {
            p.write(HTVEC + i, 1, i).unwrap();
            p.write(ROUTE + i, 1, 1).unwrap();
        }
        for i in 0..2 {
            p.write(MASK + 4 * i, 4, 0xffff_ffff).unwrap();
            p.write(CLEAR + 4 * i, 4, 0xffff_ffff).unwrap();
            p.write(AUTO0 + 4 * i, 4, 0).unwrap();
            p.write(AUTO1 + 4 * i, 4, 0).unwrap();
            p.write(HTMSI_EN + 4 * i, 4, 0xffff_ffff).unwrap();
        }
        p
    }

    #[test]
    fn level_line_masking() {
        let mut p = linux_probe();
        // Linux's first allocation: line 2 becomes its hwirq 0, vector 0.
        p.write(HTVEC + 2, 1, 0).unwrap();
        p.set_level(2, true);
        assert_eq!(p.irr(), 1 << 2);
        assert_eq!(p.vectors(), [0; 4], "masked");
        // unmask: write CLEAR, clear MASK bit.
        p.write(CLEAR, 4, 1 << 2).unwrap();
        p.write(MASK, 4, !(1u64 << 2) & 0xffff_ffff).unwrap();
        assert_eq!(p.vectors(), [1, 0, 0, 0]);
        assert_eq!(p.read(ISR, 4).unwrap(), 1 << 2);
        p.set_level(2, false);
        assert_eq!(p.vectors(), [0; 4]);
        p.check().unwrap();
    }

    #[test]
    fn edge_latches_until_cleared_and_polarity() {
        let mut p = linux_probe();
        p.write(MASK, 8, 0).unwrap();
        p.write(EDGE + 4, 4, 1).unwrap(); // line 32 edge
        p.write(HTVEC + 32, 1, 200).unwrap();
        p.set_level(32, true);
        p.set_level(32, false);
        assert_eq!(p.vectors()[3], 1 << (200 - 192));
        p.write(CLEAR + 4, 4, 1).unwrap();
        assert_eq!(p.vectors(), [0; 4]);
        // Active-low level line 5: requests while its input is low.
        p.write(POL, 4, 1 << 5).unwrap();
        p.write(HTVEC + 5, 1, 7).unwrap();
        assert_eq!(p.vectors()[0], 1 << 7);
        p.set_level(5, true);
        assert_eq!(p.vectors()[0], 0);
        // Without HT-MSI enabled a line sends nothing.
        p.set_level(5, false);
        p.write(HTMSI_EN, 4, 0).unwrap();
        assert_eq!(p.vectors(), [0; 4]);
        assert_eq!(p.read(HTVEC + 5, 1).unwrap(), 7);
        assert_eq!(p.read(HTVEC + 4, 4).unwrap(), 0x0706_0704);
        p.check().unwrap();
    }

    #[test]
    fn refused_accesses() {
        let mut p = PchPic::new();
        assert_eq!(p.read(MASK, 2), Err(BadAccess));
        assert_eq!(p.read(MASK + 1, 4), Err(BadAccess));
        assert_eq!(p.write(SIZE, 4, 0), Err(BadAccess));
        assert_eq!(p.read(0x300, 4), Ok(0));
        assert_eq!(p.read(MASK, 8), Ok(u64::MAX));
    }
}
