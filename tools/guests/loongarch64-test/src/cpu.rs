//! CSR, IOCSR, `cpucfg`, counter and `idle` access.
//!
//! Under kestrel every one of these (except `rdtime`) traps to the
//! hypervisor: the guest uses them where a kernel would, not in loops.

use core::arch::asm;

/// CSR numbers (LoongArch Reference Manual vol. 1, ch. 7).
pub mod csr {
    pub const CRMD: u32 = 0x0;
    pub const PRMD: u32 = 0x1;
    pub const ECFG: u32 = 0x4;
    pub const ESTAT: u32 = 0x5;
    pub const ERA: u32 = 0x6;
    pub const BADV: u32 = 0x7;
    pub const BADI: u32 = 0x8;
    pub const EENTRY: u32 = 0xc;
    pub const TLBREHI: u32 = 0x8e;
    pub const ASID: u32 = 0x18;
    pub const PGDL: u32 = 0x19;
    pub const PGDH: u32 = 0x1a;
    pub const PWCL: u32 = 0x1c;
    pub const PWCH: u32 = 0x1d;
    pub const STLBPS: u32 = 0x1e;
    pub const TCFG: u32 = 0x41;
    pub const TICLR: u32 = 0x44;
    pub const TLBRENTRY: u32 = 0x88;
}

/// CRMD bits.
pub const CRMD_IE: u64 = 1 << 2;
pub const CRMD_PG: u64 = 1 << 4;
/// ECFG.LIE / ESTAT.IS bits.
pub const INT_SWI0: u64 = 1 << 0;
pub const INT_TI: u64 = 1 << 11;
/// HWI0..3 (ESTAT.IS[5:2]): the lines the EIOINTC drives.
pub const INT_HWI0_3: u64 = 0xf << 2;
pub const INT_HWI1: u64 = 1 << 3;
pub const INT_IPI: u64 = 1 << 12;

/// Reads CSR `$n`.
macro_rules! csr_read {
    ($n:expr) => {{
        let v: u64;
        #[allow(unused_unsafe)]
        // SAFETY: reading a CSR has no side effect on the CSRs this guest reads.
        unsafe { core::arch::asm!("csrrd {0}, {n}", out(reg) v, n = const $n, options(nostack)) };
        v
    }};
}

/// Writes CSR `$n`. Must be used inside `unsafe`: the caller keeps the CPU's
/// state coherent with the new value.
macro_rules! csr_write {
    ($n:expr, $v:expr) => {{
        let v: u64 = $v;
        core::arch::asm!("csrwr {0}, {n}", inout(reg) v => _, n = const $n, options(nostack));
    }};
}

/// Replaces the bits `$mask` of CSR `$n` with those of `$v`; returns the old
/// value. Must be used inside `unsafe`, as `csr_write!`.
macro_rules! csr_xchg {
    ($n:expr, $v:expr, $mask:expr) => {{
        let old: u64;
        let m: u64 = $mask;
        core::arch::asm!("csrxchg {0}, {1}, {n}", inout(reg) ($v as u64) => old, in(reg) m,
            n = const $n, options(nostack));
        old
    }};
}

pub(crate) use {csr_read, csr_write, csr_xchg};

/// IOCSR registers (Loongson IPI block, as QEMU `loongson_ipi`).
pub mod iocsr {
    /// Feature register; bit 11 = running in a VM.
    pub const FEATURES: u64 = 0x8;
    pub const FEATURE_VM: u64 = 1 << 11;
    pub const IPI_STATUS: u64 = 0x1000;
    pub const IPI_EN: u64 = 0x1004;
    pub const IPI_CLEAR: u64 = 0x100c;
    /// [4:0] vector, [25:16] cpu, [31] wait.
    pub const IPI_SEND: u64 = 0x1040;
    /// [4:2] word (mailbox * 2 + high half), [25:16] cpu, [31] wait, [63:32] data.
    pub const MAIL_SEND: u64 = 0x1048;
}

pub fn iocsr_read32(reg: u64) -> u32 {
    let v: u64;
    // SAFETY: the registers this guest reads (features, IPI status/enable)
    // have no read side effect.
    unsafe { asm!("iocsrrd.w {0}, {1}", out(reg) v, in(reg) reg, options(nostack)) };
    v as u32
}

pub fn iocsr_read64(reg: u64) -> u64 {
    let v: u64;
    // SAFETY: the registers this guest reads (MISC_FUNC, the EIOINTC's
    // ISR) have no read side effect.
    unsafe { asm!("iocsrrd.d {0}, {1}", out(reg) v, in(reg) reg, options(nostack)) };
    v
}

/// # Safety
/// `reg` must be an IOCSR register and `v` a value with the intended meaning.
pub unsafe fn iocsr_write32(reg: u64, v: u32) {
    // SAFETY: forwarded to the caller.
    unsafe { asm!("iocsrwr.w {0}, {1}", in(reg) v as u64, in(reg) reg, options(nostack)) };
}

/// # Safety
/// As [`iocsr_write32`].
pub unsafe fn iocsr_write64(reg: u64, v: u64) {
    // SAFETY: forwarded to the caller.
    unsafe { asm!("iocsrwr.d {0}, {1}", in(reg) v, in(reg) reg, options(nostack)) };
}

/// Sends IPI `vector` to physical CPU `cpu` through IOCSR IPI_SEND.
pub fn ipi_send(cpu: u64, vector: u64) {
    // SAFETY: IPI_SEND only sets a status bit on the target core.
    unsafe {
        iocsr_write32(
            iocsr::IPI_SEND,
            ((cpu & 0x3ff) << 16 | (vector & 0x1f)) as u32,
        )
    };
}

/// Writes `data` into mailbox `mbox` of CPU `cpu`, high half first (the boot
/// ROM polls the low word).
pub fn mail_send(cpu: u64, mbox: u64, data: u64) {
    let base = (cpu & 0x3ff) << 16 | ((mbox & 3) * 2) << 2;
    // SAFETY: writes another core's mailbox; only that core's boot ROM reads it.
    unsafe {
        iocsr_write64(iocsr::MAIL_SEND, base | 1 << 2 | (data >> 32) << 32);
        iocsr_write64(iocsr::MAIL_SEND, base | (data & 0xffff_ffff) << 32);
    }
}

pub fn cpucfg(word: u64) -> u64 {
    let v: u64;
    // SAFETY: cpucfg only reads configuration words.
    unsafe { asm!("cpucfg {0}, {1}", out(reg) v, in(reg) word, options(nomem, nostack)) };
    v
}

/// The stable counter (never traps).
#[inline(always)]
pub fn now() -> u64 {
    let v: u64;
    // SAFETY: rdtime.d reads the constant-frequency counter.
    unsafe { asm!("rdtime.d {0}, $zero", out(reg) v, options(nomem, nostack)) };
    v
}

/// Counter frequency in Hz: CPUCFG4 x CPUCFG5.MUL / CPUCFG5.DIV.
pub fn counter_hz() -> u64 {
    let base = cpucfg(4) & 0xffff_ffff;
    let c5 = cpucfg(5);
    let (mul, div) = (c5 & 0xffff, (c5 >> 16) & 0xffff);
    let hz = if mul != 0 && div != 0 {
        base * mul / div
    } else {
        base
    };
    if hz == 0 {
        100_000_000
    } else {
        hz
    }
}

/// `idle 0`: waits for an interrupt (one enabled in ECFG.LIE, whatever
/// CRMD.IE says).
#[inline(always)]
pub fn idle() {
    // SAFETY: idle only waits.
    unsafe { asm!("idle 0", options(nostack)) };
}

/// Logical CPU index: the entry code puts CSR.CPUID in `tp` (read once, so
/// the trap path needs no CSR access to find its per-CPU data).
#[inline(always)]
pub fn cpu() -> usize {
    let v: usize;
    // SAFETY: reads the tp register.
    unsafe { asm!("move {0}, $tp", out(reg) v, options(nomem, nostack)) };
    v
}

/// Enables (true) or masks interrupts; returns the previous CRMD.IE.
pub fn set_irqs(on: bool) -> bool {
    // SAFETY: toggling CRMD.IE only changes when interrupts are taken; every
    // source this guest enables has a handler.
    let old = unsafe { csr_xchg!(csr::CRMD, if on { CRMD_IE } else { 0 }, CRMD_IE) };
    old & CRMD_IE != 0
}

/// A pause for spin loops.
#[inline(always)]
pub fn relax() {
    core::hint::spin_loop();
}
