//! Emulation of the privileged instructions a guest kernel at virtual PLV0
//! traps on ([`super::exit::Exit::Privileged`]), on its software state: the
//! general registers and PC, the virtual CSR file, the software TLB and the
//! VM's IOCSR IPI blocks. What only the backend can do (drop shadow TLB
//! entries, start or wake another vCPU, decide whether an `idle` blocks) is
//! returned as an [`Effect`] for it to apply.

use super::csr::{ecode, CsrFile, IRQ_IPI};

/// ESTAT.IS bit of HWI0 (HWIn is `IRQ_HWI0 + n`).
pub const IRQ_HWI0: u32 = 2;
use super::insn::{Insn, Reg};
use super::iocsr;
use super::tlb::{self, Inval, SoftTlb};

/// The guest vCPU state an instruction reads and writes.
pub struct GuestCpu<'a> {
    /// `$r0..$r31` (`$r0` reads as zero; writes to it are dropped).
    pub regs: &'a mut [u64; 32],
    pub pc: &'a mut u64,
    pub csr: &'a mut CsrFile,
    pub tlb: &'a mut SoftTlb,
}

impl GuestCpu<'_> {
    fn reg(&self, r: Reg) -> u64 {
        if r == 0 {
            0
        } else {
            self.regs[usize::from(r & 31)]
        }
    }

    fn set_reg(&mut self, r: Reg, v: u64) {
        if r != 0 {
            self.regs[usize::from(r & 31)] = v;
        }
    }
}

/// What the backend does after [`emulate`], besides the state it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing more.
    None,
    /// The guest's translation changed as a whole (a CSR write, a new guest
    /// ASID): drop every shadow entry of this vCPU.
    Retranslate,
    /// The guest's TLB changed: drop the shadow entries it names.
    Inval(Inval),
    /// An IOCSR write reached the IPI blocks: start or wake the target.
    Iocsr(iocsr::Effect),
    /// `idle`: the PC is past it and the timer and IPI line are current;
    /// the backend checks what is pending, polls, or blocks the vCPU.
    Idle,
    /// Not emulated: the guest takes exception `code` at its PC (unchanged).
    Deliver(u8),
}

/// Emulates privileged instruction `i` of vCPU `me` at counter time `now`.
/// `io` is the VM's IOCSR space (IPI blocks, interrupt controllers), `mem` reads a 64-bit guest physical
/// word (the page-walk instructions; 0 where there is nothing). Never
/// panics; the PC advances past the instruction unless it is `ertn` (the
/// PC becomes ERA) or the effect is [`Effect::Deliver`].
#[inline(always)]
pub fn emulate(
    i: Insn,
    cpu: &mut GuestCpu<'_>,
    now: u64,
    io: &iocsr::Space<'_>,
    me: usize,
    mem: impl Fn(u64) -> u64,
) -> Effect {
    let retranslate = |changed: bool| {
        if changed {
            Effect::Retranslate
        } else {
            Effect::None
        }
    };
    let fx = match i {
        Insn::CsrRd { rd, csr } => {
            let v = cpu.csr.read(csr, now);
            cpu.set_reg(rd, v);
            Effect::None
        }
        Insn::CsrWr { rd, csr } => {
            let old = cpu.csr.read(csr, now);
            let fx = cpu.csr.write(csr, cpu.reg(rd), now);
            cpu.set_reg(rd, old);
            retranslate(fx.translation)
        }
        Insn::CsrXchg { rd, rj, csr } => {
            let (old, fx) = cpu.csr.xchg(csr, cpu.reg(rd), cpu.reg(rj), now);
            cpu.set_reg(rd, old);
            retranslate(fx.translation)
        }
        Insn::IocsrRd { rd, rj, size } => {
            let v = io.read(me, cpu.reg(rj), size);
            cpu.set_reg(rd, v);
            Effect::None
        }
        Insn::IocsrWr { rd, rj, size } => {
            Effect::Iocsr(io.write(me, cpu.reg(rj), size, cpu.reg(rd)))
        }
        Insn::TlbSrch => {
            cpu.tlb.srch(cpu.csr);
            Effect::None
        }
        Insn::TlbRd => {
            // tlbrd loads ASID.ASID too: a new guest ASID is a new address space.
            let asid = cpu.csr.guest_asid();
            cpu.tlb.rd(cpu.csr);
            retranslate(cpu.csr.guest_asid() != asid)
        }
        Insn::TlbWr => Effect::Inval(cpu.tlb.wr(cpu.csr)),
        Insn::TlbFill => Effect::Inval(cpu.tlb.fill(cpu.csr)),
        Insn::TlbClr => Effect::Inval(cpu.tlb.clr(cpu.csr)),
        Insn::TlbFlush => Effect::Inval(cpu.tlb.flush()),
        Insn::Invtlb { op, rj, rk } => match cpu.tlb.invtlb(op, cpu.reg(rj), cpu.reg(rk)) {
            Some(inv) => Effect::Inval(inv),
            None => return Effect::Deliver(ecode::INE),
        },
        Insn::Lddir { rd, rj, level } => {
            let v = tlb::lddir(cpu.csr, cpu.reg(rj), level, |pa| Some(mem(pa)));
            cpu.set_reg(rd, v.unwrap_or(0));
            Effect::None
        }
        Insn::Ldpte { rj, seq } => {
            let base = cpu.reg(rj);
            let _ = tlb::ldpte(cpu.csr, base, seq, |pa| Some(mem(pa)));
            Effect::None
        }
        Insn::Ertn => {
            *cpu.pc = cpu.csr.ertn();
            return Effect::None;
        }
        Insn::Idle { .. } => {
            cpu.csr.update_timer(now);
            let line = io.ipi.get(me).is_some_and(iocsr::VIpi::line);
            cpu.csr.set_line(IRQ_IPI, line);
            let hwi = io.intc.map_or(0, |i| i.hwi(me));
            for n in 0..8 {
                cpu.csr.set_line(IRQ_HWI0 + n, hwi & (1 << n) != 0);
            }
            Effect::Idle
        }
        Insn::Cacop { .. } => Effect::None,
        _ => return Effect::Deliver(ecode::IPE),
    };
    *cpu.pc = cpu.pc.wrapping_add(4);
    fx
}

#[cfg(test)]
mod tests;
