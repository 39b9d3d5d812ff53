//! Decodes a LoongArch guest exit (what the trap entry saved: which vector,
//! ESTAT, ERA, BADV, BADI, plus the guest's virtual privilege level) into
//! an [`Exit`]: the plain value the trap-and-emulate backend acts on, as
//! the arm64 backend acts on [`crate::guest::arm64::esr::Exit`].
//!
//! Any input decodes, and nothing here panics: ESTAT's ECODE (6 bits) and
//! ESUBCODE (9 bits) are taken as the hardware masks them, every ECODE the
//! backend does not handle itself is the guest's own exception
//! ([`Exit::GuestException`]), and BADI is decoded by [`insn::decode`],
//! which takes any word. LoongArch Reference Manual vol. 1, 7.4.6 (ESTAT)
//! and table 7-7 (exception codes).

use super::csr::ecode;
use super::insn::{self, Insn};
use super::tlb::Access;
use crate::vcpu::stats::ExitReason;

/// What the trap entry saved for one exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trap {
    /// Taken through the TLB refill vector (rather than the general
    /// exception/interrupt one).
    pub refill: bool,
    /// ESTAT (ECODE in [21:16], ESUBCODE in [30:22]).
    pub estat: u64,
    /// ERA, or TLBRERA after a refill (bit 0 is then IsTLBR).
    pub pc: u64,
    /// BADV, or TLBRBADV after a refill.
    pub badv: u64,
    /// BADI: the trapping instruction word (general exceptions only).
    pub badi: u32,
    /// The guest's virtual CRMD.PLV (0: its kernel).
    pub plv: u64,
}

impl Trap {
    /// ESTAT.Ecode.
    pub const fn ecode(&self) -> u8 {
        ((self.estat >> 16) & 0x3f) as u8
    }

    /// ESTAT.EsubCode.
    pub const fn esubcode(&self) -> u16 {
        ((self.estat >> 22) & 0x1ff) as u16
    }
}

/// The FP units EUEN enables one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpUnit {
    /// Scalar FP (ECODE FPD, EUEN.FPE).
    Fp,
    /// 128-bit SIMD (ECODE SXD, EUEN.SXE).
    Lsx,
    /// 256-bit SIMD (ECODE ASXD, EUEN.ASXE).
    Lasx,
}

impl FpUnit {
    /// Its enable bit in EUEN.
    pub const fn euen_bit(self) -> u64 {
        match self {
            FpUnit::Fp => 1,
            FpUnit::Lsx => 2,
            FpUnit::Lasx => 4,
        }
    }

    /// The "unit disabled" exception code.
    pub const fn ecode(self) -> u8 {
        match self {
            FpUnit::Fp => ecode::FPD,
            FpUnit::Lsx => ecode::SXD,
            FpUnit::Lasx => ecode::ASXD,
        }
    }

    /// Whether the disabled-unit trap is the guest's own exception rather
    /// than kestrel's lazy FP switch: the guest disabled the unit in its
    /// virtual EUEN, or this pCPU's FP registers already hold its state
    /// (`live`: the trap is then a unit the CPU lacks).
    pub const fn trap_is_guests(self, guest_euen: u64, live: bool) -> bool {
        guest_euen & self.euen_bit() == 0 || live
    }
}

/// Why a LoongArch guest exited, as kestrel acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A host interrupt (ECODE 0): the tick, a kick, a device.
    Interrupt,
    /// A TLB refill at `va`: no shadow entry maps it. `fetch`: `va` is the
    /// PC's word; otherwise the access kind is the instruction's (a refill
    /// does not say), which the backend reads at the PC.
    TlbRefill { va: u64, fetch: bool },
    /// A page-invalid, -modify, -privilege or no-read/no-execute fault at
    /// `va` on a shadow entry, for an access of kind `access`.
    PageFault { va: u64, access: Access },
    /// ADE: `va` lies outside the real 48-bit virtual space. `sub` is
    /// ESUBCODE (ADEF: a fetch; ADEM: a load or store; anything else is
    /// passed on as it came).
    AddressError { va: u64, sub: u16 },
    /// `hvcl code` from the guest kernel (virtual PLV0): a hypercall.
    Hypercall { code: u16 },
    /// `hvcl` from guest user space: answered "unknown code", nothing runs.
    UserHypercall,
    /// A privileged instruction at virtual PLV0: kestrel emulates it.
    Privileged(Insn),
    /// An FP/LSX/LASX instruction with the unit off in the real EUEN.
    FpDisabled(FpUnit),
    /// The guest's own exception, delivered to its handler at its PC with
    /// this ECODE, ESUBCODE, BADV (`None`: left as it was) and BADI.
    GuestException {
        code: u8,
        sub: u16,
        badv: Option<u64>,
        insn: u32,
    },
}

/// ECODE WPE (watchpoint): it reports BADV.
const WPE: u8 = 19;

/// Decodes one exit. Never panics, for any input.
#[inline(always)]
pub fn decode(t: &Trap) -> Exit {
    if t.refill {
        return Exit::TlbRefill {
            va: t.badv,
            fetch: t.badv & !3 == t.pc & !3,
        };
    }
    let code = t.ecode();
    let sub = t.esubcode();
    let fault = |access| Exit::PageFault { va: t.badv, access };
    let guest = |code, badv| Exit::GuestException {
        code,
        sub: 0,
        badv,
        insn: t.badi,
    };
    match code {
        ecode::INT => Exit::Interrupt,
        ecode::PIL | ecode::PNR | ecode::PPI => fault(Access::Load),
        ecode::PIS | ecode::PME => fault(Access::Store),
        ecode::PIF | ecode::PNX => fault(Access::Fetch),
        ecode::ADE => Exit::AddressError { va: t.badv, sub },
        ecode::INE | ecode::IPE => match insn::decode(t.badi) {
            // On a CPU with LVZ, `hvcl` in root mode at PLV3 is privileged
            // rather than undefined: the same hypercall.
            Some(Insn::Hvcl { code }) if t.plv == 0 => Exit::Hypercall { code },
            Some(Insn::Hvcl { .. }) => Exit::UserHypercall,
            // A guest at virtual PLV3 gets its IPE, as hardware would give it.
            Some(i) if code == ecode::IPE && i.is_privileged() && t.plv == 0 => Exit::Privileged(i),
            _ => guest(code, None),
        },
        ecode::FPD => Exit::FpDisabled(FpUnit::Fp),
        ecode::SXD => Exit::FpDisabled(FpUnit::Lsx),
        ecode::ASXD => Exit::FpDisabled(FpUnit::Lasx),
        _ => Exit::GuestException {
            code,
            sub,
            badv: matches!(code, ecode::ALE | ecode::BCE | WPE).then_some(t.badv),
            insn: t.badi,
        },
    }
}

impl Exit {
    /// The exit counter it is counted in (`None`: an undefined instruction
    /// that is not `hvcl`, which goes straight back to the guest uncounted).
    #[inline(always)]
    pub fn reason(&self) -> Option<ExitReason> {
        Some(match self {
            Exit::Interrupt => ExitReason::Irq,
            Exit::TlbRefill { .. } | Exit::PageFault { .. } | Exit::AddressError { .. } => {
                ExitReason::Abort
            }
            Exit::Hypercall { .. } | Exit::UserHypercall => ExitReason::Hypercall,
            Exit::Privileged(Insn::IocsrRd { .. } | Insn::IocsrWr { .. }) => ExitReason::Ipi,
            Exit::Privileged(Insn::Idle { .. }) => ExitReason::Idle,
            Exit::Privileged(_) => ExitReason::Sysreg,
            Exit::FpDisabled(_) => ExitReason::FpTrap,
            Exit::GuestException {
                code: ecode::INE, ..
            } => return None,
            Exit::GuestException { .. } => ExitReason::Other,
        })
    }
}

#[cfg(test)]
mod tests;
