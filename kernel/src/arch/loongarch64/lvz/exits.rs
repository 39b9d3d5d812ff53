//! What the LVZ backend does with each exit. The world switch saved the
//! guest's GPRs and the root exception CSRs in the frame; the guest's own
//! CSRs stay in the hardware while it is loaded, so an exit handler reads
//! and writes them one at a time (`gcsr`).
//!
//! | exit (root ECODE) | action |
//! |---|---|
//! | TLB refill (a second-stage miss; GPA in TLBRBADV) | the pair of 2 MiB pages around the GPA is filled under the VM's GID: RAM maps to its frames, anything else gets an invalid half |
//! | PIL / PIS (a second-stage invalid half) | MMIO: the load or store in BADI is sent to the VM's bus; nothing there, or an instruction kestrel does not emulate there, gets the guest's ADE |
//! | PIF (a fetch from no RAM) | the guest's ADEF |
//! | ADE | the guest's ADE |
//! | PME, PNR, PNX, PPI | cannot happen with kestrel's entries: the VM is stopped with a message |
//! | INT | kestrel's tick and kicks |
//! | GSPR (BADI) | `cpucfg` (the CPU's words with LVZ, LBT and the PMU hidden; KVM's range at 0x4000_0000), IOCSR (the shared IPI block and identification words), `idle`, `cacop` (no effect), CSRs the guest has no copy of (kept in software); anything else: the guest's INE |
//! | HVC | KVM's hypercall ABI; steal time is this backend's |
//! | GCM | as a CSR access under GSPR |
//! | FPD / SXD / ASXD | the lazy FP engine's trap |
//! | anything else | the VM is stopped with a message (LVZ raises nothing else to the root) |
//!
//! What both LoongArch modes do alike (MMIO on the VM's bus, IOCSR
//! effects, `idle`, hypercalls) is `super::super::backend::exits`'.

use alloc::format;

use crate::guest::loongarch::csr::ecode;
use crate::guest::loongarch::insn::{self, Addr, Insn};
use crate::vcpu::stats::ExitReason;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{RunExit, Vm, VmEnd};
use kestrel_abi::loongarch as la;

use super::super::backend::exits::{self as shared, MemOp};
use super::super::{csr, exceptions};
use super::gcsr::{self, g, gcsr_read, gcsr_write, gcsr_xchg};
use super::{LvzBackend, VcpuState};

type B = LvzBackend;

/// Second-stage page size (log2): 2 MiB, the size of the frames guest RAM
/// is made of, so one entry maps 4 MiB; kestrel sets the root STLB to this
/// page size ([`super::LvzBackend`]'s per-CPU set-up), so the entries go
/// to the large STLB, not the 64-entry MTLB.
pub const S2_PS: u64 = 21;
const S2_PAGE: u64 = 1 << S2_PS;

fn count(env: &ExitCtx<'_, B>, r: ExitReason) {
    env.vcpu.stats.exit_owned(r);
}

/// Handles the exit `env`'s vCPU just took (registers in `ctx`).
pub fn handle(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState) -> RunExit {
    let f = &ctx.frame;
    if f.kind == 1 {
        // TLBRERA: bit 0 is IsTLBR, not part of the PC.
        ctx.frame.pc &= !3;
        count(env, ExitReason::Abort);
        return stage2_fill(env.vm, ctx.frame.badv);
    }
    let (estat, badv, badi) = (f.estat, f.badv, f.badi as u32);
    let code = ((estat >> 16) & 0x3f) as u8;
    match code {
        ecode::INT => {
            count(env, ExitReason::Irq);
            exceptions::host_interrupts(estat);
            RunExit::Continue
        }
        ecode::PIL | ecode::PIS => mmio(env, ctx, badv, badi),
        ecode::PIF => {
            count(env, ExitReason::Abort);
            inject(ctx, ecode::ADE, ecode::ADEF, Some(ctx.frame.pc), 0)
        }
        ecode::ADE => {
            count(env, ExitReason::Abort);
            let sub = ((estat >> 22) & 0x1ff) as u16;
            inject(ctx, ecode::ADE, sub, Some(badv), badi)
        }
        ecode::FPD | ecode::SXD | ecode::ASXD => {
            count(env, ExitReason::FpTrap);
            shared::fp_trap(env.cpu);
            RunExit::Continue
        }
        ecode::GSPR => gspr(env, ctx, badi),
        ecode::HVC => hvcl(env, ctx, badi),
        ecode::GCM => {
            count(env, ExitReason::Sysreg);
            match insn::decode(badi) {
                Some(i @ (Insn::CsrRd { .. } | Insn::CsrWr { .. } | Insn::CsrXchg { .. })) => {
                    soft_csr(ctx, i);
                    ctx.frame.pc = ctx.frame.pc.wrapping_add(4);
                    RunExit::Continue
                }
                _ => inject(ctx, ecode::INE, 0, None, badi),
            }
        }
        _ => RunExit::VmEnd(VmEnd::Fatal(format!(
            "unexpected exit (ECODE {code}, ESTAT {estat:#x}, BADV {badv:#x}, BADI {badi:#010x}) \
             at guest PC {:#x}",
            ctx.frame.pc
        ))),
    }
}

/// A second-stage miss at `gpa`: fills the entry for the pair of pages
/// around it under the VM's GID. A half that is not RAM is invalid, so an
/// access there comes back as PIL/PIS (MMIO) or PIF.
fn stage2_fill(vm: &Vm<B>, gpa: u64) -> RunExit {
    let base = gpa & !(2 * S2_PAGE - 1) & ((1 << 48) - 1);
    let mut elo = [0u64; 2];
    for (half, e) in elo.iter_mut().enumerate() {
        let page = base + half as u64 * S2_PAGE;
        // The whole page must be RAM (one 2 MiB frame).
        // (Frames are 2 MiB aligned; a misaligned one is never mapped.)
        let h = vm.arch.hpa(page).filter(|h| h & (S2_PAGE - 1) == 0);
        if let (Some(h), Some(_)) = (h, vm.arch.hpa(page + S2_PAGE - 1)) {
            // V, D, PLV0, MAT 1 (coherent cached), G (any root ASID).
            *e = (h & 0x0000_ffff_ffff_f000) | 1 | 1 << 1 | 1 << 4 | 1 << 6;
        }
    }
    let gid = gcsr::gstat() >> gcsr::GSTAT_GID_SHIFT & gcsr::GID_MASK;
    // SAFETY: writes one root TLB entry tagged with the running VM's GID
    // (GTLBC.USETGID + TGID for this one instruction) mapping only this
    // VM's frames; kestrel's own translations are DMWs. TLBRERA.IsTLBR is
    // 0 (the exit path cleared it), so `tlbfill` takes TLBEHI/TLBELO*/TLBIDX.
    unsafe {
        let gtlbc = gcsr::gtlbc();
        gcsr::write_gtlbc(
            gtlbc & !(gcsr::GID_MASK << gcsr::GTLBC_TGID_SHIFT)
                | gcsr::GTLBC_USETGID
                | gid << gcsr::GTLBC_TGID_SHIFT,
        );
        core::arch::asm!(
            "csrwr {ehi}, 0x11",
            "csrwr {lo0}, 0x12",
            "csrwr {lo1}, 0x13",
            "csrwr {idx}, 0x10",
            "tlbfill",
            ehi = inout(reg) base => _,
            lo0 = inout(reg) elo[0] => _,
            lo1 = inout(reg) elo[1] => _,
            idx = inout(reg) S2_PS << 24 => _,
            options(nostack),
        );
        gcsr::write_gtlbc(gtlbc);
    }
    RunExit::Continue
}

/// Gives the guest exception `code` (subcode `sub`) at its PC, as its own
/// CPU would: PRMD <- PLV/IE, PLV0 with interrupts off, ERA, ESTAT, BADV
/// (if given), BADI, and on to its handler (EENTRY, vectored by ECFG.VS).
fn inject(ctx: &mut VcpuState, code: u8, sub: u16, badv: Option<u64>, insn: u32) -> RunExit {
    let crmd = gcsr_read!(g::CRMD);
    let prmd = gcsr_read!(g::PRMD);
    gcsr_write!(g::PRMD, (prmd & !7) | (crmd & 7));
    gcsr_write!(g::CRMD, crmd & !7);
    gcsr_write!(g::ERA, ctx.frame.pc);
    gcsr_xchg!(
        g::ESTAT,
        u64::from(code) << 16 | u64::from(sub) << 22,
        0x7fff_0000
    );
    if let Some(v) = badv {
        gcsr_write!(g::BADV, v);
    }
    gcsr_write!(g::BADI, u64::from(insn));
    let vs = (gcsr_read!(g::ECFG) >> 16) & 7;
    let step = if vs == 0 { 0 } else { (1u64 << vs) * 4 };
    ctx.frame.pc = gcsr_read!(g::EENTRY).wrapping_add(u64::from(code) * step);
    RunExit::Continue
}

/// A load or store (BADI `w`) at guest physical `gpa` that is not RAM: a
/// device on the VM's bus, else the guest's ADE.
fn mmio(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, gpa: u64, w: u32) -> RunExit {
    let Some(op) = insn::decode_mem(w).and_then(MemOp::of) else {
        count(env, ExitReason::Abort);
        return inject(ctx, ecode::ADE, ecode::ADEM, Some(gpa), w);
    };
    // The guest's BADV names the virtual address it used (LVZ gives the
    // root only the GPA, which differs from it through a DMW or the
    // guest's TLB): recomputed from the instruction's registers, which
    // the access left unchanged.
    let va = match op.addr {
        Addr::Imm(rj, imm) => ctx.frame.reg(rj).wrapping_add(imm as u64),
        Addr::Index(rj, rk) => ctx.frame.reg(rj).wrapping_add(ctx.frame.reg(rk)),
    };
    match shared::mmio(env, ctx, gpa, op) {
        Some(r) => {
            count(env, ExitReason::Mmio);
            r
        }
        None => {
            count(env, ExitReason::Abort);
            inject(ctx, ecode::ADE, ecode::ADEM, Some(va), w)
        }
    }
}

/// `cpucfg` word `index` as the guest sees it: the CPU's, with LVZ, LBT
/// and the PMU hidden (kestrel switches neither LBT nor PMU state), KVM's
/// signature and feature bits in its range (the PV IPI bit only when
/// `pv_ipi`, the VM's config; steal time, preempt and the EIOINTC's
/// virtual extension always), 0 elsewhere.
pub fn cpucfg(index: u32, pv_ipi: bool) -> u32 {
    if let Some(v) = crate::vcpu::hypercall::cpucfg(index, pv_ipi) {
        return if index == la::CPUCFG_KVM_FEATURE {
            v | la::KVM_FEATURE_STEAL_TIME | la::KVM_FEATURE_PREEMPT | la::KVM_FEATURE_VIRT_EXTIOI
        } else {
            v
        };
    }
    match index {
        // LVZ (bit 10) and its version (13:11); LBT x86/ARM/MIPS (20:18).
        2 => csr::cpucfg(2) & !(0xf << 10) & !(7 << 18),
        // The PMU.
        6 => 0,
        0..=0x14 => csr::cpucfg(index),
        _ => 0,
    }
}

/// A CSR access the guest has no hardware copy of: kept in software.
fn soft_csr(ctx: &mut VcpuState, i: Insn) {
    match i {
        Insn::CsrRd { rd, csr } => {
            let v = ctx.soft.get(u32::from(csr));
            ctx.frame.set_reg(rd, v);
        }
        Insn::CsrWr { rd, csr } => {
            let old = ctx.soft.get(u32::from(csr));
            ctx.soft.set(u32::from(csr), ctx.frame.reg(rd));
            ctx.frame.set_reg(rd, old);
        }
        Insn::CsrXchg { rd, rj, csr } => {
            let old = ctx.soft.get(u32::from(csr));
            let mask = ctx.frame.reg(rj);
            let v = (ctx.frame.reg(rd) & mask) | (old & !mask);
            ctx.soft.set(u32::from(csr), v);
            ctx.frame.set_reg(rd, old);
        }
        _ => {}
    }
}

/// A guest privileged instruction LVZ leaves to the root (BADI `w`).
fn gspr(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState, w: u32) -> RunExit {
    let vm = env.vm;
    let index = env.index();
    let Some(i) = insn::decode(w) else {
        count(env, ExitReason::Other);
        return inject(ctx, ecode::INE, 0, None, w);
    };
    // A privileged instruction from the guest's PLV1-3 is the guest's IPE,
    // whatever LVZ sent here: the emulator in tools/qemu-lvz raises GSPR
    // for IOCSR accesses before it checks the PLV, which would otherwise
    // let guest user code send IPIs and mail as its kernel.
    if i.is_privileged() && gcsr_read!(g::CRMD) & 3 != 0 {
        count(env, ExitReason::Other);
        return inject(ctx, ecode::IPE, 0, None, w);
    }
    match i {
        Insn::Cpucfg { rd, rj } => {
            count(env, ExitReason::Sysreg);
            let v = cpucfg(ctx.frame.reg(rj) as u32, env.vm.pv_ipi);
            ctx.frame.set_reg(rd, u64::from(v));
        }
        Insn::CsrRd { .. } | Insn::CsrWr { .. } | Insn::CsrXchg { .. } => {
            count(env, ExitReason::Sysreg);
            soft_csr(ctx, i);
        }
        Insn::IocsrRd { rd, rj, size } => {
            count(env, ExitReason::Ipi);
            let v = vm.arch.iocsr().read(index, ctx.frame.reg(rj), size);
            ctx.frame.set_reg(rd, v);
        }
        Insn::IocsrWr { rd, rj, size } => {
            count(env, ExitReason::Ipi);
            let fx = vm
                .arch
                .iocsr()
                .write(index, ctx.frame.reg(rj), size, ctx.frame.reg(rd));
            shared::iocsr_effect(env, fx);
        }
        Insn::Idle { .. } => {
            count(env, ExitReason::Idle);
            ctx.frame.pc = ctx.frame.pc.wrapping_add(4);
            return shared::idle(env, ctx);
        }
        Insn::Cacop { .. } => count(env, ExitReason::Other),
        _ => {
            count(env, ExitReason::Other);
            return inject(ctx, ecode::INE, 0, None, w);
        }
    }
    ctx.frame.pc = ctx.frame.pc.wrapping_add(4);
    RunExit::Continue
}

/// `hvcl` (BADI `w`): the shared ABI ([`shared::hvcl`]), from the guest
/// kernel only; steal time (NOTIFY) is this mode's
/// ([`super::Lvz`]'s `hypercall`).
fn hvcl(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState, w: u32) -> RunExit {
    count(env, ExitReason::Hypercall);
    let user = gcsr_read!(g::CRMD) & 3 != 0;
    shared::hvcl(env, ctx, w & 0x7fff, user)
}
