//! IOCSR space: the per-core IPI block and mailboxes (Loongson 3A5000
//! layout; QEMU hw/intc/loongson_ipi). Registers are addressed with the
//! `iocsrrd`/`iocsrwr` instructions, not through memory.

use core::arch::asm;
use core::marker::PhantomData;

/// An IOCSR register whose accesses are `T` wide (`u32` or `u64`).
#[derive(Clone, Copy, Debug)]
pub struct Iocsr<T> {
    addr: u64,
    _width: PhantomData<T>,
}

impl<T> Iocsr<T> {
    const fn at(addr: u64) -> Self {
        Iocsr {
            addr,
            _width: PhantomData,
        }
    }
}

pub const IPI_STATUS: Iocsr<u32> = Iocsr::at(0x1000);
pub const IPI_EN: Iocsr<u32> = Iocsr::at(0x1004);
pub const IPI_CLEAR: Iocsr<u32> = Iocsr::at(0x100c);
/// This core's mailboxes 0-3 (64-bit each).
pub const MBUF: [Iocsr<u64>; 4] = [
    Iocsr::at(0x1020),
    Iocsr::at(0x1028),
    Iocsr::at(0x1030),
    Iocsr::at(0x1038),
];
/// Sends an IPI: [4:0] vector, [25:16] target cpu, [31] wait for completion.
pub const IPI_SEND: Iocsr<u32> = Iocsr::at(0x1040);
/// Writes 32 bits into another core's mailbox: [4:2] word (box * 2 + high
/// half), [25:16] cpu, [31] wait, [63:32] data.
pub const MAIL_SEND: Iocsr<u64> = Iocsr::at(0x1048);

const SEND_BLOCKING: u64 = 1 << 31;
const SEND_CPU_SHIFT: u64 = 16;
/// Highest physical cpu id the IPI block can address (10 bits).
pub const MAX_HW_CPU: u64 = 0x3ff;

impl Iocsr<u32> {
    /// `iocsrrd.w`.
    fn read(self) -> u32 {
        let v: u64;
        // SAFETY: the registers read here (IPI status/enable) have no read
        // side effect.
        unsafe { asm!("iocsrrd.w {0}, {1}", out(reg) v, in(reg) self.addr, options(nostack)) };
        v as u32
    }

    /// `iocsrwr.w`.
    ///
    /// # Safety
    /// `v` must have the meaning the caller intends for this register.
    unsafe fn write(self, v: u32) {
        // SAFETY: forwarded to the caller; the register is one of the IPI
        // block's above.
        unsafe {
            asm!("iocsrwr.w {0}, {1}", in(reg) v as u64, in(reg) self.addr, options(nostack))
        };
    }
}

impl Iocsr<u64> {
    /// `iocsrrd.d`.
    fn read(self) -> u64 {
        let v: u64;
        // SAFETY: as for the 32-bit read: only side-effect-free registers
        // (the mailboxes) are read.
        unsafe { asm!("iocsrrd.d {0}, {1}", out(reg) v, in(reg) self.addr, options(nostack)) };
        v
    }

    /// `iocsrwr.d`.
    ///
    /// # Safety
    /// As for the 32-bit write.
    unsafe fn write(self, v: u64) {
        // SAFETY: forwarded to the caller.
        unsafe { asm!("iocsrwr.d {0}, {1}", in(reg) v, in(reg) self.addr, options(nostack)) };
    }
}

/// Reads this core's mailbox `n` (0..=3).
pub fn mailbox(n: u64) -> u64 {
    MBUF[(n & 3) as usize].read()
}

/// Writes `data` into mailbox `mailbox` (0..=3) of physical cpu `cpu`:
/// high half first, then the low half (firmware polls the low word).
pub fn mail_send(cpu: u64, mailbox: u64, data: u64) {
    let base = SEND_BLOCKING | (cpu & MAX_HW_CPU) << SEND_CPU_SHIFT;
    let hi = base | ((mailbox & 3) * 2 + 1) << 2 | (data & 0xffff_ffff_0000_0000);
    let lo = base | ((mailbox & 3) * 2) << 2 | (data << 32);
    // SAFETY: MAIL_SEND only writes the target core's mailbox word.
    unsafe {
        MAIL_SEND.write(hi);
        MAIL_SEND.write(lo);
    }
}

/// Raises IPI `vector` (0..=31) on physical cpu `cpu`.
pub fn ipi_send(cpu: u64, vector: u32) {
    let v = SEND_BLOCKING as u32 | ((cpu & MAX_HW_CPU) as u32) << SEND_CPU_SHIFT | (vector & 31);
    // SAFETY: IPI_SEND only sets a bit in the target core's IPI status.
    unsafe { IPI_SEND.write(v) };
}

/// Enables every IPI vector on this core.
pub fn ipi_enable_all() {
    // SAFETY: enabling IPI vectors only lets them reach ESTAT.IS[12].
    unsafe { IPI_EN.write(u32::MAX) };
}

/// Reads and clears this core's pending IPI vectors; returns them.
pub fn ipi_ack() -> u32 {
    let pending = IPI_STATUS.read();
    if pending != 0 {
        // SAFETY: clearing the vectors just read acknowledges them.
        unsafe { IPI_CLEAR.write(pending) };
    }
    pending
}

/// Clears mailboxes 0 and 1 of this core (after a secondary has read them).
pub fn clear_boot_mailboxes() {
    // SAFETY: mailboxes 0/1 carry only the start protocol, which is over.
    unsafe {
        MBUF[0].write(0);
        MBUF[1].write(0);
    }
}
