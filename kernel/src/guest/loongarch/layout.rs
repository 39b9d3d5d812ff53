//! A LoongArch VM's guest physical map, as QEMU `virt` lays it out: the
//! first [`LOW_RAM`] bytes of the VM's RAM at guest physical 0, the rest at
//! [`HIGH_RAM_BASE`], devices in between (the console 16550 at
//! [`UART`], the power-off register at [`POWEROFF`], the legacy I/O port
//! window at [`ISA_IO`]).

use alloc::vec::Vec;

/// RAM below the device window.
pub const LOW_RAM: u64 = 0x1000_0000;
/// Where RAM beyond [`LOW_RAM`] continues.
pub const HIGH_RAM_BASE: u64 = 0x8000_0000;
/// The console NS16550A (byte registers).
pub const UART: u64 = 0x1fe0_01e0;
/// The PCH-PIC's registers (QEMU virt's `platic`), and how many bytes.
pub const PCH_PIC: u64 = 0x1000_0000;
pub const PCH_PIC_SIZE: u64 = 0x400;
/// The 16550's PCH-PIC input line (QEMU virt's).
pub const UART_IRQ: u32 = 2;
/// virtio-mmio transports: (base of the first, bytes each, PCH-PIC line
/// of the first), in QEMU virt's platform-bus window.
pub const VIRTIO: (u64, u64, u32) = (0x1600_0000, 0x200, 16);
/// The legacy (ISA) I/O port window, where Loongson boards and QEMU virt
/// decode it: port N is the byte at `ISA_IO + N`, [`ISA_IO_SIZE`] bytes
/// of ports (one 16 KiB page, Linux's LoongArch page size). No port
/// answers in it (`dev::vdev::isaio`: reads all-ones, writes ignored).
pub const ISA_IO: u64 = 0x1800_0000;
pub const ISA_IO_SIZE: u64 = 0x4000;
/// The power-off register: a byte write of [`POWEROFF_VALUE`] ends the VM.
pub const POWEROFF: u64 = 0x100e_001c;
pub const POWEROFF_VALUE: u64 = 0x34;
/// The reset register, at this offset from [`POWEROFF`]: a byte write of
/// [`RESET_VALUE`] restarts the VM (QEMU virt's GED reset register).
pub const RESET_OFFSET: u64 = 2;
pub const RESET_VALUE: u64 = 0x42;

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

/// What kestrel does with an access the real MMU refused with ADE (the VA
/// is not canonical at PLV3) but the guest's own translation accepted (a
/// DMW window such as 0x9000..., or the high bits of a DA-mode address),
/// landing on guest physical `gpa` of a VM with `ram_size` bytes of RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WideAccess {
    /// A load or store: emulated (RAM, a device, or ADEM for nothing there).
    Emulate,
    /// A fetch from nothing: ADE (ADEF) to the guest, as the hardware
    /// raises for a fetch no memory answers.
    FetchFault,
    /// A fetch from the VM's RAM: its code cannot run at that address at
    /// PLV3, and kestrel does not emulate instructions: the VM is stopped.
    Stop,
}

/// Classifies a non-canonical access (see [`WideAccess`]).
pub fn wide_access(fetch: bool, gpa: u64, ram_size: u64) -> WideAccess {
    match (fetch, ram_offset(gpa, ram_size).is_some()) {
        (false, _) => WideAccess::Emulate,
        (true, false) => WideAccess::FetchFault,
        (true, true) => WideAccess::Stop,
    }
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
    fn the_io_window_is_in_the_device_hole_and_alone() {
        let size = 4 << 30;
        let end = ISA_IO + ISA_IO_SIZE;
        for gpa in [ISA_IO, ISA_IO + 0x64, end - 1] {
            assert_eq!(ram_offset(gpa, size), None);
        }
        assert!(ISA_IO >= LOW_RAM && end <= HIGH_RAM_BASE);
        // Clear of the other devices, the 48 virtio transports the
        // PCH-PIC's lines from 16 allow included.
        let virtio_end = VIRTIO.0 + 48 * VIRTIO.1;
        for (base, len) in [
            (PCH_PIC, PCH_PIC_SIZE),
            (VIRTIO.0, virtio_end - VIRTIO.0),
            (UART, 8),
            (POWEROFF, RESET_OFFSET + 1),
        ] {
            assert!(base + len <= ISA_IO || end <= base, "{base:#x}");
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

    #[test]
    fn wide_fetch_from_nothing_is_the_guests_fault() {
        let size = 32 << 20;
        // A DMW-window fetch (or DA-mode high bits) at no memory: ADEF,
        // never the VM stopped (the hostile-guest test's `ertn` probe).
        assert_eq!(wide_access(true, 0xf000_0000, size), WideAccess::FetchFault);
        assert_eq!(wide_access(true, UART, size), WideAccess::FetchFault);
        assert_eq!(wide_access(true, size, size), WideAccess::FetchFault);
        assert_eq!(wide_access(true, size - 4, size), WideAccess::Stop);
        assert_eq!(wide_access(true, 0x20_0000, size), WideAccess::Stop);
        for gpa in [0, size - 8, size, UART, POWEROFF, 0xf000_0000, u64::MAX] {
            assert_eq!(wide_access(false, gpa, size), WideAccess::Emulate);
        }
    }
}
