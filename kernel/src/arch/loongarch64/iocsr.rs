//! IOCSR space: the per-core IPI block and mailboxes (Loongson 3A5000
//! layout; QEMU hw/intc/loongson_ipi). Registers are addressed with the
//! `iocsrrd`/`iocsrwr` instructions, not through memory.

use core::arch::asm;

pub const IPI_STATUS: u64 = 0x1000;
pub const IPI_EN: u64 = 0x1004;
pub const IPI_CLEAR: u64 = 0x100c;
/// Mailbox n (64-bit) of this core at MBUF0 + 8 * n.
pub const MBUF0: u64 = 0x1020;
/// Sends an IPI: [4:0] vector, [25:16] target cpu, [31] wait for completion.
pub const IPI_SEND: u64 = 0x1040;
/// Writes 32 bits into another core's mailbox: [4:2] word (box * 2 + high
/// half), [25:16] cpu, [31] wait, [63:32] data.
pub const MAIL_SEND: u64 = 0x1048;

const SEND_BLOCKING: u64 = 1 << 31;
const SEND_CPU_SHIFT: u64 = 16;
/// Highest physical cpu id the IPI block can address (10 bits).
pub const MAX_HW_CPU: u64 = 0x3ff;

fn read32(reg: u64) -> u32 {
    let v: u64;
    // SAFETY: the registers read here (IPI status/enable, mailboxes) have no
    // read side effect.
    unsafe { asm!("iocsrrd.w {0}, {1}", out(reg) v, in(reg) reg, options(nostack)) };
    v as u32
}

fn read64(reg: u64) -> u64 {
    let v: u64;
    // SAFETY: as for `read32`: only side-effect-free registers are read.
    unsafe { asm!("iocsrrd.d {0}, {1}", out(reg) v, in(reg) reg, options(nostack)) };
    v
}

/// # Safety
/// `reg` must be one of the IPI registers above, written with a value that
/// has the meaning the caller intends.
unsafe fn write32(reg: u64, v: u32) {
    // SAFETY: forwarded to the caller.
    unsafe { asm!("iocsrwr.w {0}, {1}", in(reg) v as u64, in(reg) reg, options(nostack)) };
}

/// # Safety
/// As for `write32`.
unsafe fn write64(reg: u64, v: u64) {
    // SAFETY: forwarded to the caller.
    unsafe { asm!("iocsrwr.d {0}, {1}", in(reg) v, in(reg) reg, options(nostack)) };
}

/// Reads this core's mailbox `n` (0..=3).
pub fn mailbox(n: u64) -> u64 {
    read64(MBUF0 + 8 * (n & 3))
}

/// Writes `data` into mailbox `mailbox` (0..=3) of physical cpu `cpu`:
/// high half first, then the low half (firmware polls the low word).
pub fn mail_send(cpu: u64, mailbox: u64, data: u64) {
    let base = SEND_BLOCKING | (cpu & MAX_HW_CPU) << SEND_CPU_SHIFT;
    let hi = base | ((mailbox & 3) * 2 + 1) << 2 | (data & 0xffff_ffff_0000_0000);
    let lo = base | ((mailbox & 3) * 2) << 2 | (data << 32);
    // SAFETY: MAIL_SEND only writes the target core's mailbox word.
    unsafe {
        write64(MAIL_SEND, hi);
        write64(MAIL_SEND, lo);
    }
}

/// Raises IPI `vector` (0..=31) on physical cpu `cpu`.
pub fn ipi_send(cpu: u64, vector: u32) {
    let v = SEND_BLOCKING as u32 | ((cpu & MAX_HW_CPU) as u32) << SEND_CPU_SHIFT | (vector & 31);
    // SAFETY: IPI_SEND only sets a bit in the target core's IPI status.
    unsafe { write32(IPI_SEND, v) };
}

/// Enables every IPI vector on this core.
pub fn ipi_enable_all() {
    // SAFETY: enabling IPI vectors only lets them reach ESTAT.IS[12].
    unsafe { write32(IPI_EN, u32::MAX) };
}

/// Reads and clears this core's pending IPI vectors; returns them.
pub fn ipi_ack() -> u32 {
    let pending = read32(IPI_STATUS);
    if pending != 0 {
        // SAFETY: clearing the vectors just read acknowledges them.
        unsafe { write32(IPI_CLEAR, pending) };
    }
    pending
}

/// Clears mailboxes 0 and 1 of this core (after a secondary has read them).
pub fn clear_boot_mailboxes() {
    // SAFETY: mailboxes 0/1 carry only the start protocol, which is over.
    unsafe {
        write64(MBUF0, 0);
        write64(MBUF0 + 8, 0);
    }
}
