//! What kestrel does with each guest exit. The trap entry saved the exit
//! in the vCPU's frame; [`exit::decode`] (portable, host-tested) turns it
//! into an [`Exit`], and this file applies it: physical interrupts, TLB
//! refills and page faults (shadow entries, MMIO, guest exceptions),
//! privileged instructions (emulated by [`emulate::emulate`] on the
//! software state; the shadow TLB, vCPU starts and wake-ups and `idle`
//! applied here), `hvcl` hypercalls, FP traps, and everything else
//! delivered to the guest's own handler as the architecture would. What
//! both LoongArch modes do alike (MMIO on the VM's bus, IOCSR effects,
//! `idle`, hypercalls) is `super::super::backend::exits`'.

use alloc::format;
use core::sync::atomic::Ordering;

use crate::guest::loongarch::csr::{ecode, num as vnum};
use crate::guest::loongarch::emulate::{self, Effect, GuestCpu};
use crate::guest::loongarch::exit::{self, Exit, FpUnit, Trap};
use crate::guest::loongarch::insn::{self, Insn};
use crate::guest::loongarch::layout::{self, WideAccess};
use crate::guest::loongarch::tlb::{self as vtlb, Access, Fault, Inval, ELO_D, ELO_NR, ELO_NX};
use crate::vcpu::stats::ExitReason;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{Backend, RunExit, Vm, VmEnd};

use super::super::backend::exits::{self as shared, MemOp};
use super::super::{dmw, exceptions};
use super::{hwtlb, TneBackend, VcpuState};

type B = TneBackend;

/// Handles the exit `env`'s vCPU just took (its registers: `ctx`):
/// decode, count, act.
pub fn handle(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState) -> RunExit {
    let vm = env.vm;
    let f = &ctx.frame;
    let trap = Trap {
        refill: f.kind == 1,
        estat: f.estat,
        pc: f.pc,
        badv: f.badv,
        badi: f.badi as u32,
        plv: ctx.csr.plv(),
    };
    let exit = exit::decode(&trap);
    if let Some(r) = exit.reason() {
        env.vcpu.stats.exit_owned(r);
    }
    match exit {
        Exit::Interrupt => {
            exceptions::host_interrupts(trap.estat);
            RunExit::Continue
        }
        Exit::TlbRefill { va, fetch } => {
            // TLBRERA: bit 0 is IsTLBR, not part of the PC.
            ctx.frame.pc &= !3;
            let acc = if fetch {
                Access::Fetch
            } else {
                data_access(vm, ctx)
            };
            mem_fault(env, ctx, va, acc)
        }
        Exit::PageFault { va, access } => mem_fault(env, ctx, va, access),
        Exit::AddressError { va, sub } => address_error(env, ctx, va, sub),
        Exit::Hypercall { code } => shared::hvcl(env, ctx, u32::from(code), false),
        Exit::UserHypercall => shared::hvcl(env, ctx, 0, true),
        Exit::Privileged(i) => privileged(env, ctx, i, trap.badi),
        Exit::FpDisabled(unit) => fp_disabled(env.cpu, ctx, unit, trap.badi),
        Exit::GuestException {
            code,
            sub,
            badv,
            insn,
        } => deliver(ctx, code, sub, badv, insn),
    }
}

/// An FP/LSX/LASX instruction with the unit off in the real EUEN: the
/// guest's own exception, or kestrel's lazy switch of the FP registers.
fn fp_disabled(cpu: usize, ctx: &mut VcpuState, unit: FpUnit, badi: u32) -> RunExit {
    let live = super::PCPU[cpu].fp_owned.load(Ordering::Relaxed);
    if unit.trap_is_guests(ctx.csr.get(vnum::EUEN), live) {
        // The guest disabled it itself (or the CPU lacks it): its exception.
        return deliver(ctx, unit.ecode(), 0, None, badi);
    }
    shared::fp_trap(cpu);
    RunExit::Continue
}

/// Delivers exception `code` to the guest at its current PC.
fn deliver(ctx: &mut VcpuState, code: u8, sub: u16, badv: Option<u64>, insn: u32) -> RunExit {
    ctx.frame.pc = ctx.csr.raise(ctx.frame.pc, code, sub, badv, insn);
    RunExit::Continue
}

/// The instruction word at the guest's PC (`None` if it cannot be fetched).
fn fetch_insn(vm: &Vm<B>, ctx: &VcpuState) -> Option<u32> {
    let pc = ctx.frame.pc;
    let m = vtlb::translate(&ctx.csr, &ctx.tlb, pc, Access::Fetch).ok()?;
    let h = vm.arch.hpa(m.pa & !3)?;
    // SAFETY: a 4-byte aligned word of this VM's RAM, through the cached window.
    Some(unsafe { core::ptr::read_volatile(dmw::cached(h) as *const u32) })
}

/// Whether the instruction at the PC stores (for a TLB refill, which does
/// not say).
fn data_access(vm: &Vm<B>, ctx: &VcpuState) -> Access {
    if fetch_insn(vm, ctx).is_some_and(insn::writes_memory) {
        Access::Store
    } else {
        Access::Load
    }
}

/// A real TLB refill or page fault at `va`: install a shadow entry, emulate
/// MMIO, or give the guest the exception its own MMU would raise.
fn mem_fault(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, va: u64, acc: Access) -> RunExit {
    let vm = env.vm;
    match vtlb::translate(&ctx.csr, &ctx.tlb, va, acc) {
        Ok(m) => {
            if vm.arch.hpa(m.pa).is_some() {
                install_shadow(vm, ctx, va, acc);
                RunExit::Continue
            } else {
                mmio(env, ctx, GuestAccess { va, gpa: m.pa, acc })
            }
        }
        Err(Fault::Refill) => {
            ctx.frame.pc = ctx.csr.raise_tlbr(ctx.frame.pc, va);
            RunExit::Continue
        }
        Err(Fault::Exception(code, sub)) => {
            let w = if acc == Access::Fetch {
                0
            } else {
                fetch_insn(vm, ctx).unwrap_or(0)
            };
            deliver(ctx, code, sub, Some(va), w)
        }
    }
}

/// The real ELO for guest virtual page `va` (V = 0 if it does not map guest RAM).
fn shadow_elo(vm: &Vm<B>, ctx: &VcpuState, va: u64, first: Access) -> u64 {
    for acc in [first, Access::Load, Access::Fetch] {
        if let Ok(m) = vtlb::translate(&ctx.csr, &ctx.tlb, va, acc) {
            let Some(h) = vm.arch.hpa(m.pa & !0xfff) else {
                return 0;
            };
            let mut elo = (h & 0x0000_ffff_ffff_f000) | 1 | 3 << 2 | 1 << 4;
            if m.dirty {
                elo |= ELO_D;
            }
            if m.nr {
                elo |= ELO_NR;
            }
            if m.nx {
                elo |= ELO_NX;
            }
            return elo;
        }
    }
    0
}

fn install_shadow(vm: &Vm<B>, ctx: &VcpuState, va: u64, acc: Access) {
    let base = va & !0x1fff;
    let odd = (va >> 12) & 1;
    let mut elo = [0u64; 2];
    for (half, e) in elo.iter_mut().enumerate() {
        let a = if half as u64 == odd {
            acc
        } else {
            Access::Load
        };
        *e = shadow_elo(vm, ctx, base + half as u64 * 0x1000, a);
    }
    hwtlb::set_asid(ctx.asid(ctx.context()));
    hwtlb::install(base, elo);
}

/// A guest access at virtual `va`, guest physical `gpa`.
#[derive(Clone, Copy)]
struct GuestAccess {
    va: u64,
    gpa: u64,
    acc: Access,
}

/// A guest load or store (`at`) that is not RAM: a device on the VM's bus
/// (the console UART, the power-off register: `devices`), or nothing (ADE
/// to the guest).
fn mmio(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, at: GuestAccess) -> RunExit {
    let (vm, GuestAccess { va, gpa, acc }) = (env.vm, at);
    let w = if acc == Access::Fetch {
        None
    } else {
        fetch_insn(vm, ctx)
    };
    let done = w
        .and_then(insn::decode)
        .and_then(MemOp::of)
        .and_then(|op| shared::mmio(env, ctx, gpa, op));
    match done {
        Some(r) => {
            if r == RunExit::Continue {
                env.vcpu.stats.exit_owned(ExitReason::Mmio);
            }
            r
        }
        None => {
            let sub = if acc == Access::Fetch {
                ecode::ADEF
            } else {
                ecode::ADEM
            };
            deliver(ctx, ecode::ADE, sub, Some(va), w.unwrap_or(0))
        }
    }
}

/// ADE: a guest address outside the real 48-bit virtual space. Through a
/// guest DMW window it is guest memory: loads and stores are emulated;
/// fetches from RAM cannot be (the VM stops), fetches from nothing get the
/// guest's ADEF. Otherwise the guest's own ADE.
fn address_error(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, badv: u64, sub: u16) -> RunExit {
    let vm = env.vm;
    let fetch = sub == ecode::ADEF;
    let acc = if fetch { Access::Fetch } else { Access::Load };
    let m = match vtlb::translate(&ctx.csr, &ctx.tlb, badv, acc) {
        Ok(m) => m,
        Err(_) => {
            let w = if fetch {
                0
            } else {
                fetch_insn(vm, ctx).unwrap_or(0)
            };
            return deliver(ctx, ecode::ADE, sub, Some(badv), w);
        }
    };
    match layout::wide_access(fetch, m.pa, vm.arch.ram_size) {
        WideAccess::Emulate => {}
        // Nothing there: the guest's own ADEF, as for a canonical address.
        WideAccess::FetchFault => return deliver(ctx, ecode::ADE, sub, Some(badv), 0),
        WideAccess::Stop => {
            return RunExit::VmEnd(VmEnd::Fatal(format!(
                "vCPU executes at {badv:#x}, outside the 48-bit canonical range (a DMW \
                 window or DA-mode high bits): at PLV3 that cannot be mapped; use a TLB \
                 mapping or a window with VSEG 0 / 0xf"
            )))
        }
    }
    let Some(w) = fetch_insn(vm, ctx) else {
        return deliver(ctx, ecode::ADE, sub, Some(badv), 0);
    };
    let Some(h) = vm.arch.hpa(m.pa) else {
        let at = GuestAccess {
            va: badv,
            gpa: m.pa,
            acc,
        };
        return mmio(env, ctx, at);
    };
    let Some(MemOp {
        rd,
        size,
        store,
        signed,
        ..
    }) = insn::decode(w).and_then(MemOp::of)
    else {
        return RunExit::VmEnd(VmEnd::Fatal(format!(
            "instruction {w:#010x} at {:#x} accesses {badv:#x} through a DMW window; \
             kestrel emulates only plain loads and stores there",
            ctx.frame.pc
        )));
    };
    if store && !m.dirty {
        return deliver(ctx, ecode::PME, 0, Some(badv), w);
    }
    let n = size.bytes();
    if (h & 0xfff) + n > 0x1000 || vm.arch.hpa(m.pa.wrapping_add(n - 1)).is_none() {
        return deliver(ctx, ecode::ALE, 0, Some(badv), w);
    }
    let p = dmw::cached(h) as *mut u8;
    let mut bytes = [0u8; 8];
    if store {
        bytes = ctx.frame.reg(rd).to_le_bytes();
        // SAFETY: [h, h + n) lies in one page of this VM's RAM (checked above).
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, n as usize) };
    } else {
        // SAFETY: as above, read.
        unsafe { core::ptr::copy_nonoverlapping(p, bytes.as_mut_ptr(), n as usize) };
        let v = u64::from_le_bytes(bytes) & size.mask();
        ctx.frame
            .set_reg(rd, if signed { size.sign_extend(v) } else { v });
    }
    ctx.frame.pc = ctx.frame.pc.wrapping_add(4);
    RunExit::Continue
}

/// The guest's TLB changed: drop the shadows it invalidated.
fn apply_inval(ctx: &mut VcpuState, cpu: usize, inv: Inval) {
    match inv {
        Inval::None => {}
        Inval::Range(start, len) if len <= 0x10000 => {
            let first = start & !0x1fff;
            let pairs = (start - first + len).div_ceil(0x2000);
            for i in 0..pairs {
                let va = first.wrapping_add(i * 0x2000);
                for c in [super::CTX_KERNEL, super::CTX_USER] {
                    hwtlb::flush_page(ctx.asid(c), va);
                }
            }
            // Shadows of this range on other pCPUs are stale too.
            ctx.shadows_changed(cpu);
        }
        _ => ctx.invalidate_shadows(cpu),
    }
}

/// A privileged instruction at virtual PLV0: emulated on the software
/// state, then what only the backend can do.
fn privileged(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, i: Insn, w: u32) -> RunExit {
    let (vm, cpu) = (env.vm, env.cpu);
    let now = env.backend().now();
    let mut guest = GuestCpu {
        regs: &mut ctx.frame.regs,
        pc: &mut ctx.frame.pc,
        csr: &mut ctx.csr,
        tlb: &mut ctx.tlb,
    };
    let fx = emulate::emulate(i, &mut guest, now, &vm.arch.iocsr(), env.index(), |pa| {
        vm.arch.read_u64(pa)
    });
    match fx {
        Effect::None => {}
        Effect::Retranslate => ctx.invalidate_shadows(cpu),
        Effect::Inval(inv) => apply_inval(ctx, cpu, inv),
        Effect::Iocsr(fx) => shared::iocsr_effect(env, fx),
        Effect::Idle => return shared::idle(env, ctx),
        Effect::Deliver(code) => return deliver(ctx, code, 0, None, w),
    }
    RunExit::Continue
}
