//! The LVZ control registers: the root-side ones (GSTAT, GCFG, GINTC,
//! GCNTC, GTLBC) and the guest CSRs, reached from root mode with
//! `gcsrrd`/`gcsrwr`/`gcsrxchg` (the `csrrd`/`csrwr`/`csrxchg` encodings
//! with opcode byte 0x05). The assembler does not know the LVZ mnemonics,
//! so they are emitted as words with fixed registers ($t0 = r12 for the
//! value, $t1 = r13 for a mask).
//!
//! Only [`save`] and [`restore`] move a vCPU's whole guest CSR state; the
//! exit handlers touch single registers.

use core::arch::asm;

/// Root CSR numbers of LVZ (Linux's `loongarch.h`, the hardware layout).
pub mod num {
    pub const GTLBC: u32 = 0x15;
    pub const GSTAT: u32 = 0x50;
    pub const GCFG: u32 = 0x51;
    pub const GINTC: u32 = 0x52;
    pub const GCNTC: u32 = 0x53;
}

/// Width of the GID fields (GSTAT.GID, GTLBC.TGID, TRGP.GID): the widest
/// GID kestrel may use, whatever GSTAT.GIDBITS reports.
pub const GID_FIELD_BITS: u32 = 8;
/// A GID field's mask (before its shift).
pub const GID_MASK: u64 = (1 << GID_FIELD_BITS) - 1;

/// GSTAT fields.
pub const GSTAT_PVM: u64 = 1 << 1;
pub const GSTAT_GIDBITS_SHIFT: u32 = 4;
pub const GSTAT_GID_SHIFT: u32 = 16;
/// GTLBC fields: root TLB instructions act on entries of TGID when USETGID.
pub const GTLBC_USETGID: u64 = 1 << 12;
pub const GTLBC_TOTI: u64 = 1 << 13;
pub const GTLBC_TGID_SHIFT: u32 = 16;

/// Emits one guest-CSR instruction word: `gcsrrd`/`gcsrwr` (rj 0/1) or
/// `gcsrxchg` (rj = r13) of CSR `$n` with rd = r12.
macro_rules! gcsr_word {
    ($n:expr, $rj:expr) => {
        0x0500_000c_u32 | (($n as u32) << 10) | (($rj as u32) << 5)
    };
}

/// Reads guest CSR `$n` (a constant).
macro_rules! gcsr_read {
    ($n:expr) => {{
        let v: u64;
        // SAFETY: `gcsrrd` only reads the guest copy of a CSR; root-mode
        // state is untouched (LVZ is present: the backend is only chosen then).
        unsafe {
            core::arch::asm!(".word {w}", w = const $crate::arch::loongarch64::lvz::gcsr::gcsr_word!($n, 0), out("$r12") v,
                options(nomem, nostack))
        };
        v
    }};
}

/// Writes guest CSR `$n` (a constant).
macro_rules! gcsr_write {
    ($n:expr, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: `gcsrwr` changes only the guest's copy of a CSR, which
        // takes effect in guest mode alone.
        unsafe {
            core::arch::asm!(".word {w}", w = const $crate::arch::loongarch64::lvz::gcsr::gcsr_word!($n, 1), inout("$r12") v => _,
                options(nostack))
        };
    }};
}

/// Replaces the bits `$mask` of guest CSR `$n` with those of `$v`; the old value.
macro_rules! gcsr_xchg {
    ($n:expr, $v:expr, $mask:expr) => {{
        let v: u64 = $v;
        let m: u64 = $mask;
        let old: u64;
        // SAFETY: as for `gcsr_write`.
        unsafe {
            core::arch::asm!(".word {w}", w = const $crate::arch::loongarch64::lvz::gcsr::gcsr_word!($n, 13), inout("$r12") v => old,
                in("$r13") m, options(nostack))
        };
        old
    }};
}

pub(crate) use {gcsr_read, gcsr_word, gcsr_write, gcsr_xchg};

super::super::csr::csr_access! {
    gstat, write_gstat, xchg_gstat = num::GSTAT;
    gcfg, write_gcfg, xchg_gcfg = num::GCFG;
    gintc, write_gintc, xchg_gintc = num::GINTC;
    gcntc, write_gcntc, xchg_gcntc = num::GCNTC;
    gtlbc, write_gtlbc, xchg_gtlbc = num::GTLBC;
}

/// GID width the CPU implements (GSTAT.GIDBITS).
pub fn gid_bits() -> u32 {
    ((gstat() >> GSTAT_GIDBITS_SHIFT) & 0x3f) as u32
}

/// Guest CSR numbers the backend reads or writes one at a time.
pub mod g {
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
    pub const TCFG: u32 = 0x41;
    pub const TVAL: u32 = 0x42;
    pub const LLBCTL: u32 = 0x60;
}

/// Moves every listed guest CSR between the hardware and `$arr` (an
/// array of [`COUNT`] words, in list order).
macro_rules! gcsr_list {
    ($($n:expr),* $(,)?) => {
        /// The guest CSRs the hardware holds for the loaded vCPU, in the
        /// order of [`GuestCsrs::regs`] (see [`index`]).
        pub const LIST: &[u32] = &[$($n),*];
        /// How many there are.
        pub const COUNT: usize = LIST.len();

        /// Reads them all into `regs`.
        pub fn save(regs: &mut [u64; COUNT]) {
            let mut i = 0;
            $(
                regs[i] = gcsr_read!($n);
                i += 1;
            )*
            let _ = i;
        }

        /// Writes them all from `regs`, in list order (TCFG before TVAL,
        /// ESTAT after the timer).
        pub fn restore(regs: &[u64; COUNT]) {
            let mut i = 0;
            $(
                gcsr_write!($n, regs[i]);
                i += 1;
            )*
            let _ = i;
        }
    };
}

// The hardware guest CSRs (those LVZ gives the guest its own copy of):
// CRMD..BADI, EENTRY, the TLB registers, ASID, page-walk and page-size
// registers, RVACFG, CPUID, PRCFG1-3, SAVE0-15, the timer (TCFG, TVAL,
// CNTC), LLBCTL, the TLB-refill registers and the four DMWs.
gcsr_list!(
    0x0, 0x1, 0x2, 0x3, 0x4, 0x6, 0x7, 0x8, 0xc, 0x10, 0x11, 0x12, 0x13, 0x18, 0x19, 0x1a, 0x1c,
    0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,
    0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x60, 0x88, 0x89, 0x8a, 0x8b,
    0x8c, 0x8d, 0x8e, 0x8f, 0x180, 0x181, 0x182, 0x183, 0x5,
);

/// Where guest CSR `n` sits in a saved array, if it is one of [`LIST`].
pub const fn index(n: u32) -> Option<usize> {
    let mut i = 0;
    while i < COUNT {
        if LIST[i] == n {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// A vCPU's guest CSRs while it is not loaded.
#[derive(Clone, Debug)]
pub struct GuestCsrs {
    pub regs: [u64; COUNT],
}

impl GuestCsrs {
    pub const fn zeroed() -> Self {
        GuestCsrs { regs: [0; COUNT] }
    }

    /// Guest CSR `n` (0 if it is not one the hardware holds).
    pub fn get(&self, n: u32) -> u64 {
        index(n).map_or(0, |i| self.regs[i])
    }

    pub fn set(&mut self, n: u32, v: u64) {
        if let Some(i) = index(n) {
            self.regs[i] = v;
        }
    }
}
