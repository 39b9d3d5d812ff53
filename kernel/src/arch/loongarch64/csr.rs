//! Control and status registers (CSRs), `cpucfg` and the stable counter.
//!
//! Reads of the CSRs named here have no side effect and are safe; writes
//! change how the CPU runs and are `unsafe`.

use core::arch::asm;

/// CSR numbers (LoongArch Reference Manual vol. 1, ch. 7).
pub mod num {
    pub const CRMD: u32 = 0x0;
    pub const PRMD: u32 = 0x1;
    pub const EUEN: u32 = 0x2;
    pub const ECFG: u32 = 0x4;
    pub const ESTAT: u32 = 0x5;
    pub const ERA: u32 = 0x6;
    pub const BADV: u32 = 0x7;
    pub const BADI: u32 = 0x8;
    pub const EENTRY: u32 = 0xc;
    pub const CPUID: u32 = 0x20;
    /// Scratch for the exception entry.
    pub const SAVE0: u32 = 0x30;
    /// kestrel's per-CPU word: the logical CPU index.
    pub const SAVE1: u32 = 0x31;
    pub const TCFG: u32 = 0x41;
    pub const TVAL: u32 = 0x42;
    pub const TICLR: u32 = 0x44;
    pub const TLBRENTRY: u32 = 0x88;
    pub const TLBRBADV: u32 = 0x89;
    pub const TLBRERA: u32 = 0x8a;
    pub const TLBRSAVE: u32 = 0x8b;
    pub const TLBRPRMD: u32 = 0x8f;
    pub const MERRCTL: u32 = 0x90;
    pub const MERRENTRY: u32 = 0x93;
    pub const MERRERA: u32 = 0x94;
    pub const MERRSAVE: u32 = 0x95;
    pub const DMW0: u32 = 0x180;
    pub const DMW1: u32 = 0x181;
}

/// CRMD bits, and interrupt lines as ECFG.LIE / ESTAT.IS bits: the
/// architecture's, as the guest CSR model defines them.
pub use crate::guest::loongarch::csr::{Crmd, Irqs};

macro_rules! csr_access {
    ($($read:ident, $write:ident, $xchg:ident = $num:expr;)*) => {$(
        #[inline(always)]
        pub fn $read() -> u64 {
            let v: u64;
            // SAFETY: reading this CSR has no side effect.
            unsafe { asm!("csrrd {0}, {n}", out(reg) v, n = const $num, options(nomem, nostack)) };
            v
        }

        /// Writes the CSR.
        ///
        /// # Safety
        /// The caller must keep the CPU's execution state coherent (mode,
        /// windows, entries) with the new value.
        #[inline(always)]
        #[allow(dead_code)]
        pub unsafe fn $write(v: u64) {
            // SAFETY: forwarded to the caller.
            unsafe { asm!("csrwr {0}, {n}", inout(reg) v => _, n = const $num, options(nostack)) };
        }

        /// Replaces the bits of `mask` with those of `v`; returns the old value.
        ///
        /// # Safety
        /// As for the write function.
        #[inline(always)]
        #[allow(dead_code)]
        pub unsafe fn $xchg(v: u64, mask: u64) -> u64 {
            let old: u64;
            // SAFETY: forwarded to the caller.
            unsafe {
                asm!("csrxchg {0}, {1}, {n}", inout(reg) v => old, in(reg) mask, n = const $num, options(nostack))
            };
            old
        }
    )*};
}

pub(crate) use csr_access;

csr_access! {
    crmd, write_crmd, xchg_crmd = num::CRMD;
    prmd, write_prmd, xchg_prmd = num::PRMD;
    ecfg, write_ecfg, xchg_ecfg = num::ECFG;
    estat, write_estat, xchg_estat = num::ESTAT;
    eentry, write_eentry, xchg_eentry = num::EENTRY;
    cpuid, write_cpuid, xchg_cpuid = num::CPUID;
    save1, write_save1, xchg_save1 = num::SAVE1;
    tcfg, write_tcfg, xchg_tcfg = num::TCFG;
    tval, write_tval, xchg_tval = num::TVAL;
    ticlr, write_ticlr, xchg_ticlr = num::TICLR;
    tlbrentry, write_tlbrentry, xchg_tlbrentry = num::TLBRENTRY;
    merrentry, write_merrentry, xchg_merrentry = num::MERRENTRY;
    dmw0, write_dmw0, xchg_dmw0 = num::DMW0;
    dmw1, write_dmw1, xchg_dmw1 = num::DMW1;
}

/// The physical CPU id (CSR.CPUID.CoreID, bits [8:0]).
pub fn hw_cpu_id() -> u64 {
    cpuid() & 0x1ff
}

/// Reads configuration word `word` with `cpucfg` (never traps in root mode).
#[inline(always)]
pub fn cpucfg(word: u32) -> u32 {
    let v: u64;
    // SAFETY: `cpucfg` only reads an identification word.
    unsafe { asm!("cpucfg {0}, {1}", out(reg) v, in(reg) word as u64, options(nomem, nostack)) };
    v as u32
}

/// The stable counter (`rdtime.d`), shared by all cores on a chip.
#[inline(always)]
pub fn rdtime() -> u64 {
    let v: u64;
    // SAFETY: reads the constant-frequency counter; no side effect.
    unsafe { asm!("rdtime.d {0}, $zero", out(reg) v, options(nomem, nostack)) };
    v
}

/// CPUCFG2 bit 10: the LVZ virtualization extension is implemented.
pub fn has_lvz() -> bool {
    cpucfg(2) & (1 << 10) != 0
}

/// Frequency of the stable counter: CPUCFG4 (CC_FREQ) * CPUCFG5.CC_MUL [15:0]
/// / CPUCFG5.CC_DIV [31:16]; 0 when the CPU does not say.
pub fn counter_hz() -> u64 {
    let freq = cpucfg(4) as u64;
    let c5 = cpucfg(5);
    let (mul, div) = ((c5 & 0xffff) as u64, (c5 >> 16) as u64);
    if mul == 0 || div == 0 {
        freq
    } else {
        freq * mul / div
    }
}

/// Waits for an interrupt (`idle 0`).
#[inline(always)]
pub fn idle() {
    // SAFETY: `idle` stops the core until an interrupt is pending; with
    // interrupts enabled the handler runs before `idle` returns.
    unsafe { asm!("idle 0", options(nomem, nostack)) };
}

/// Masks interrupts on this CPU (CRMD.IE = 0).
pub fn irq_disable() {
    // SAFETY: clearing CRMD.IE only masks interrupts.
    unsafe { xchg_crmd(0, Crmd::IE.bits()) };
}

/// Unmasks interrupts on this CPU (CRMD.IE = 1). The exception entries must
/// be installed (see `exceptions::init_cpu`).
pub fn irq_enable() {
    // SAFETY: the exception entries are installed before any CPU calls this
    // (boot order in boot/src/loongarch64).
    unsafe { xchg_crmd(Crmd::IE.bits(), Crmd::IE.bits()) };
}
