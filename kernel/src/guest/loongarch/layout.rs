//! A LoongArch VM's guest physical map, as QEMU `virt` lays it out: the
//! first [`LOW_RAM`] bytes of the VM's RAM at guest physical 0, the rest at
//! [`HIGH_RAM_BASE`], devices in between (the console 16550 at
//! [`UART`], the power-off register at [`POWEROFF`]).

use alloc::vec::Vec;

/// RAM below the device window.
pub const LOW_RAM: u64 = 0x1000_0000;
/// Where RAM beyond [`LOW_RAM`] continues.
pub const HIGH_RAM_BASE: u64 = 0x8000_0000;
/// The console NS16550A (byte registers).
pub const UART: u64 = 0x1fe0_01e0;
/// The power-off register: a byte write of [`POWEROFF_VALUE`] ends the VM.
pub const POWEROFF: u64 = 0x100e_001c;
pub const POWEROFF_VALUE: u64 = 0x34;

/// Offset in a VM's RAM of `size` bytes of guest physical `gpa`, if RAM.
pub fn ram_offset(gpa: u64, size: u64) -> Option<u64> {
    let off = if gpa < LOW_RAM {
        gpa
    } else if gpa >= HIGH_RAM_BASE {
        gpa - HIGH_RAM_BASE + LOW_RAM
    } else {
        return None;
    };
    (off < size).then_some(off)
}

/// Guest physical address of RAM offset `off`.
pub fn gpa_of(off: u64) -> u64 {
    if off < LOW_RAM {
        off
    } else {
        off - LOW_RAM + HIGH_RAM_BASE
    }
}

/// The guest physical RAM ranges (start, size) of a VM with `size` bytes.
pub fn ram_ranges(size: u64) -> Vec<(u64, u64)> {
    let mut v = alloc::vec![(0, size.min(LOW_RAM))];
    if size > LOW_RAM {
        v.push((HIGH_RAM_BASE, size - LOW_RAM));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_vm_is_identity() {
        let size = 64 << 20;
        assert_eq!(ram_offset(0, size), Some(0));
        assert_eq!(ram_offset(size - 1, size), Some(size - 1));
        assert_eq!(ram_offset(size, size), None);
        assert_eq!(ram_offset(UART, size), None);
        assert_eq!(ram_offset(HIGH_RAM_BASE, size), None);
        assert_eq!(ram_ranges(size), [(0, size)]);
    }

    #[test]
    fn big_vm_skips_the_device_window() {
        let size = 512 << 20;
        assert_eq!(ram_offset(UART, size), None);
        assert_eq!(ram_offset(POWEROFF, size), None);
        assert_eq!(ram_offset(LOW_RAM - 1, size), Some(LOW_RAM - 1));
        assert_eq!(ram_offset(HIGH_RAM_BASE, size), Some(LOW_RAM));
        assert_eq!(
            ram_offset(HIGH_RAM_BASE + (256 << 20) - 1, size),
            Some(size - 1)
        );
        assert_eq!(ram_offset(HIGH_RAM_BASE + (256 << 20), size), None);
        assert_eq!(ram_ranges(size), [(0, LOW_RAM), (HIGH_RAM_BASE, 256 << 20)]);
        for off in [0, 1, LOW_RAM - 1, LOW_RAM, size - 1] {
            assert_eq!(ram_offset(gpa_of(off), size), Some(off));
        }
    }

    #[test]
    fn hostile_addresses() {
        let mut r = crate::guest::loongarch::csr::tests::Rng(0x5151_2323_8989_abab);
        for _ in 0..100_000 {
            let gpa = r.next();
            let size = (r.next() % 64 + 1) << 21;
            if let Some(off) = ram_offset(gpa, size) {
                assert!(off < size);
                assert_eq!(gpa_of(off), gpa);
            }
        }
        assert_eq!(ram_offset(u64::MAX, 1 << 40), None);
    }
}
