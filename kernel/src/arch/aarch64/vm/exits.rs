//! Synchronous guest exits: every trapped instruction and access gets a
//! defined answer. HVC/SMC go to PSCI/SMCCC or kestrel's hypercalls; system
//! register traps to the vGIC (SGIs), the ID-register view, RAZ/WI (debug,
//! PMU, ACTLR, LORegions, physical timer) or UNDEF; a stage-2 translation
//! fault on guest RAM zeroes and maps the block (its first touch); other
//! data aborts go to the VM's MMIO bus (vGIC distributor and
//! redistributors, PL011: `devices`) or, outside every region, a
//! synchronous external abort injected into the guest.

use alloc::format;

use crate::dev::vdev::{MmioError, Width};
use crate::guest::arm64::aarch32;
use crate::guest::arm64::debug::Answer as DebugAnswer;
use crate::guest::arm64::esr::{self, sysreg, Abort, Exit, SysReg, SysRegAccess};
use crate::guest::arm64::idregs;
use crate::guest::arm64::ptimer::PhysTimer;
use crate::vcpu::hypercall::{Abi, HypercallArgs};
use crate::vcpu::psci;
use crate::vcpu::stats::ExitReason;
use crate::vcpu::steal::{self, PvTimeEffect};
use crate::vm::exitctx::{ExitArch, ExitCtx};
use crate::vmm::devices::VmDeviceEnv;

use crate::dev::vgic::SgiRegister;
use crate::vm::{RunExit, Vcpu, Vm, VmEnd};

use super::regs::{mrs, msr, PSTATE_EL1H_MASKED};
use super::{Arm64Backend, VcpuState};

type B = Arm64Backend;

/// kestrel's PV IPI arrives as this SGI (kestrel_abi::arm64::PV_IPI_SGI).
pub const PV_IPI_SGI: u8 = kestrel_abi::arm64::PV_IPI_SGI as u8;

/// Steps over the trapped instruction (4 bytes, or 2 for a 16-bit T32
/// instruction of an AArch32 EL0: ESR_EL2.IL, recorded in `ctx.ilen`).
///
/// PSTATE.SS is cleared: a guest single-stepping the trapped instruction
/// has now executed it, so its software-step exception is taken before the
/// next one (the step state machine's active-pending state).
///
/// From AArch32 (PSTATE.nRW, an EL0 of a guest kernel) the PC wraps at
/// 4 GiB and a T32 instruction in an IT block advances the IT state, as
/// if it had completed ([`aarch32::cond::skip_instruction`]): the next
/// instruction of the block must see its own condition, not this one's.
pub(super) fn skip(ctx: &mut VcpuState) {
    if ctx.regs.pstate & PSTATE_NRW != 0 {
        let (pc, spsr) =
            aarch32::cond::skip_instruction(ctx.regs.pstate, ctx.regs.pc, ctx.ilen == 4);
        ctx.regs.pc = pc;
        ctx.regs.pstate = spsr;
    } else {
        ctx.regs.pc = ctx.regs.pc.wrapping_add(ctx.ilen);
    }
    ctx.regs.pstate &= !PSTATE_SS;
}

/// SPSR_EL2.M[4] (nRW): the exception came from AArch32 state.
const PSTATE_NRW: u64 = 1 << 4;

/// A trap from AArch32 of a conditional instruction that fails its
/// condition (CV/COND, or the IT state): whether a conditional
/// instruction that fails traps is IMPLEMENTATION DEFINED, and such an
/// instruction does nothing but advance. Not for the FP trap (the
/// instruction runs again once the unit is the vCPU's) nor aborts.
fn failed_condition(ctx: &VcpuState, esr: u64) -> bool {
    if ctx.regs.pstate & PSTATE_NRW == 0 {
        return false;
    }
    let t = aarch32::trap::decode(esr, 0, 0);
    !matches!(
        t.exit,
        aarch32::trap::Exit32::FpAccess
            | aarch32::trap::Exit32::DataAbort(_)
            | aarch32::trap::Exit32::InstAbort(_)
    ) && !t.cond.passed(ctx.regs.pstate)
}

/// PSTATE.SS (software step), bit 21 of SPSR.
const PSTATE_SS: u64 = 1 << 21;

fn reg(ctx: &VcpuState, r: u8) -> u64 {
    if r >= 31 {
        0
    } else {
        ctx.regs.x[r as usize]
    }
}

fn set_reg(ctx: &mut VcpuState, r: u8, v: u64) {
    if r < 31 {
        ctx.regs.x[r as usize] = v;
    }
}

/// Takes an exception to the guest's EL1 (the loaded vCPU: its EL1
/// registers are live in the CPU): ESR_EL1 = `esr`, FAR_EL1 = `far`,
/// ELR/SPSR from the guest's PC/PSTATE, PC = the VBAR_EL1 sync vector.
pub fn inject_sync(ctx: &mut VcpuState, esr: u64, far: Option<u64>) {
    let pstate = ctx.regs.pstate;
    let vbar = mrs!("vbar_el1");
    let offset = if pstate & 0x10 != 0 {
        0x600 // from AArch32 (lower EL)
    } else {
        match pstate & 0xf {
            0 => 0x400,    // EL0t: lower EL, AArch64
            0b0100 => 0x0, // EL1t: current EL, SP_EL0
            _ => 0x200,    // EL1h: current EL, SP_ELx
        }
    };
    msr!("elr_el1", ctx.regs.pc);
    msr!("spsr_el1", pstate);
    msr!("esr_el1", esr);
    if let Some(far) = far {
        msr!("far_el1", far);
    }
    ctx.regs.pc = vbar.wrapping_add(offset);
    ctx.regs.pstate = PSTATE_EL1H_MASKED;
}

const ESR_IL: u64 = 1 << 25;

/// An undefined-instruction exception (EC 0x00) for the current instruction
/// (to an AArch32 EL1: its undefined-instruction vector, und mode).
pub fn inject_undef(ctx: &mut VcpuState) {
    if ctx.aarch32 {
        return super::aarch32::inject_undef32(ctx);
    }
    let il = if ctx.ilen == 2 { 0 } else { ESR_IL };
    inject_sync(ctx, il, None);
}

fn from_el0(ctx: &VcpuState) -> bool {
    ctx.regs.pstate & 0xf == 0 || ctx.regs.pstate & 0x10 != 0
}

/// A synchronous external abort on the access `a` describes (to an
/// AArch32 EL1: a data or prefetch abort, abt mode).
pub fn inject_abort(ctx: &mut VcpuState, a: &Abort, data: bool) {
    if ctx.aarch32 {
        return super::aarch32::inject_abort32(ctx, a, data);
    }
    let ec: u64 = match (data, from_el0(ctx)) {
        (true, true) => 0x24,
        (true, false) => 0x25,
        (false, true) => 0x20,
        (false, false) => 0x21,
    };
    // FSC 0b010000: synchronous external abort, not on a translation walk.
    let mut iss: u64 = 0x10;
    if data && a.write {
        iss |= 1 << 6;
    }
    inject_sync(ctx, (ec << 26) | ESR_IL | iss, Some(a.far));
}

/// What the hardware reported of a synchronous exit: ESR_EL2, FAR_EL2 and
/// HPFAR_EL2, read right after the guest left.
#[derive(Clone, Copy)]
pub struct Syndrome {
    pub esr: u64,
    pub far: u64,
    pub hpfar: u64,
}

/// Handles a synchronous exit (vector 8) of `env`'s vCPU, whose registers
/// are `ctx`.
pub fn sync(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState, esr: u64) -> RunExit {
    let (be, vm, vcpu) = (env.backend(), env.vm, env.vcpu);
    let aarch32_state = ctx.regs.pstate & PSTATE_NRW != 0;
    // The commonest exit first, without the decoder: an HVC from AArch64
    // (its ELR already points past it).
    if (esr >> 26) & 0x3f == u64::from(esr::ec::HVC64) && !aarch32_state {
        ctx.ilen = 4;
        vcpu.stats.exit_owned(ExitReason::Hypercall);
        return call(env, ctx);
    }
    // The fault addresses, read only for the exits that may need them (no
    // EL2 exception since the exit has changed them).
    let syn = Syndrome {
        esr,
        far: mrs!("far_el2"),
        hpfar: mrs!("hpfar_el2"),
    };
    ctx.ilen = if esr & ESR_IL != 0 { 4 } else { 2 };
    if failed_condition(ctx, esr) {
        vcpu.stats.exit_owned(ExitReason::Other);
        skip(ctx);
        return RunExit::Continue;
    }
    if aarch32_state {
        // Coprocessor, VMRS, HVC32 and SMC32 traps; the rest below.
        if let Some(exit) = super::aarch32::sync32(env, ctx, syn) {
            return exit;
        }
    }
    let mut exit = esr::decode(esr, syn.far, syn.hpfar);
    if exit == Exit::Wfi && be.wfxt && !aarch32_state {
        // QEMU reports a trapped WFIT with the WFI syndrome (TI = 0, no
        // RV): the instruction itself tells them apart.
        if let Some(rt) = wfit_at_pc(vm, ctx) {
            exit = Exit::Wfit { rt };
        }
    }
    match exit {
        Exit::Wfi => {
            vcpu.stats.exit_owned(ExitReason::Idle);
            skip(ctx);
            if be.has_work(vm, vcpu, ctx) || be.halt_poll(env, ctx) {
                RunExit::Continue
            } else {
                ctx.halt
                    .blocking(super::timer::counter(), vcpu.steal.delay());
                RunExit::Block
            }
        }
        Exit::Wfit { rt } => {
            vcpu.stats.exit_owned(ExitReason::Idle);
            // The timeout is a CNTVCT_EL0 value: in physical counter ticks
            // it is CNTVOFF_EL2 later.
            let deadline = reg(ctx, rt).saturating_add(vm.arch.cntvoff);
            skip(ctx);
            if be.has_work(vm, vcpu, ctx) || super::timer::counter() >= deadline {
                RunExit::Continue
            } else {
                // `put` publishes the timeout; `check_timers` wakes us.
                ctx.wfxt_at = deadline;
                RunExit::Block
            }
        }
        // WFET: like WFE (which may return early), whatever its timeout.
        Exit::Wfe | Exit::Wfet { .. } => {
            vcpu.stats.exit_owned(ExitReason::Idle);
            skip(ctx);
            if env.should_preempt() {
                RunExit::Yield
            } else {
                RunExit::Continue
            }
        }
        Exit::FpAccess => {
            vcpu.stats.exit_owned(ExitReason::FpTrap);
            let mut e = super::PCPU[env.cpu].fp.lock();
            if let Some(engine) = e.as_mut() {
                // Counts the trap and restore in this VM, and the save of
                // the previous owner's registers in that owner's VM.
                engine.fp_trap();
            }
            drop(e);
            if ctx.aarch32 {
                super::aarch32::fp_loaded(ctx);
            }
            RunExit::Continue
        }
        // SVE of a VM that has it: the lazy trap, like FP's (counted as
        // one, and as an SVE trap).
        Exit::SveAccess if vm.arch.sve_vq.is_some() => {
            vcpu.stats.exit_owned(ExitReason::FpTrap);
            if let Some(engine) = super::PCPU[env.cpu].fp.lock().as_mut() {
                engine.wide_trap();
            }
            RunExit::Continue
        }
        Exit::SveAccess | Exit::SmeAccess => {
            vcpu.stats.exit_owned(ExitReason::Other);
            inject_undef(ctx);
            RunExit::Continue
        }
        Exit::Hvc { .. } => {
            vcpu.stats.exit_owned(ExitReason::Hypercall);
            call(env, ctx)
        }
        Exit::Smc { .. } => {
            vcpu.stats.exit_owned(ExitReason::Hypercall);
            // A trapped SMC's ELR points at the SMC itself.
            skip(ctx);
            call(env, ctx)
        }
        Exit::SysReg(acc) => sysreg_trap(env, ctx, acc),
        Exit::DataAbort(a) | Exit::InstAbort(a) if first_touch(vm, vcpu, &a) => RunExit::Continue,
        Exit::DataAbort(a) => data_abort(env, ctx, &a),
        Exit::InstAbort(a) => {
            vcpu.stats.exit_owned(ExitReason::Abort);
            inject_abort(ctx, &a, false);
            RunExit::Continue
        }
        Exit::Unknown { ec, .. } => {
            vcpu.stats.exit_owned(ExitReason::Other);
            if ec == esr::ec::SERROR {
                return RunExit::VmEnd(VmEnd::Fatal(format!(
                    "SError from the guest (ESR_EL2 {esr:#x})"
                )));
            }
            inject_undef(ctx);
            RunExit::Continue
        }
    }
}

/// A stage-2 translation fault on the VM's RAM (a data access, an
/// instruction fetch or the guest's own table walk): the first touch of a
/// block, which is zeroed and mapped now (or by the pCPU already at it).
/// The guest retries the access (the PC is not moved). Returns whether it
/// was one; anything else is for the MMIO bus or an abort.
fn first_touch(vm: &Vm<B>, vcpu: &Vcpu<B>, a: &Abort) -> bool {
    if a.external || !esr::is_translation_fault(a.fsc) {
        return false;
    }
    let ram = &vm.arch.ram;
    if ram
        .block_of(a.ipa)
        .and_then(|i| ram.guest_fault(i))
        .is_none()
    {
        return false;
    }
    vcpu.stats.exit_owned(ExitReason::Abort);
    true
}

/// The register of the WFIT at the loaded vCPU's PC, if that is one.
/// Translates the PC with `AT S12E1R` (the guest's EL1 regime and stage 2
/// are live; its PAR_EL1 is saved around it) and reads the word only if it
/// lies in the VM's RAM.
fn wfit_at_pc(vm: &Vm<B>, ctx: &VcpuState) -> Option<u8> {
    let pc = ctx.regs.pc;
    if pc & 3 != 0 || ctx.ilen != 4 {
        return None;
    }
    let saved = mrs!("par_el1");
    // SAFETY: address translation only: the result goes to PAR_EL1, which
    // is restored below; no memory is accessed.
    unsafe { core::arch::asm!("at s12e1r, {}", "isb", in(reg) pc, options(nostack)) };
    let par = mrs!("par_el1");
    msr!("par_el1", saved);
    if par & 1 != 0 {
        return None;
    }
    let pa = (par & 0x000F_FFFF_FFFF_F000) | (pc & 0xFFF);
    let frame = pa & !(super::stage2::BLOCK - 1);
    let ram = &vm.arch.ram;
    let block = ram.frames().iter().position(|&f| f == frame)?;
    ram.ready_block(block)?;
    // SAFETY: `pa` is a 4-byte aligned address inside a 2 MiB RAM frame
    // owned by this VM and zeroed for it (touched), identity mapped at EL2
    // as Normal memory.
    let insn = unsafe { core::ptr::read_volatile(pa as *const u32) };
    // WFIT Xt: 0xD503_1020 | Rt.
    (insn & !0x1F == 0xD503_1020).then_some((insn & 0x1F) as u8)
}

impl ExitArch for B {
    /// SGI 15 from `sender` pending on `target` in the vGIC (the next
    /// entry of `target` puts it in a list register).
    fn raise_pv_ipi(&self, vm: &Vm<B>, sender: usize, target: usize) -> bool {
        match vm.arch.vgic.lock().raise_sgi(sender, target, PV_IPI_SGI) {
            Some((already, _)) => already,
            // No such vCPU (the router validated the window): nothing new.
            None => true,
        }
    }

    /// Applied at the vCPU's next load: EL1h, MMU off, PC = entry, x0 = context.
    fn set_entry(&self, vm: &Vm<B>, index: usize, entry: Option<(u64, u64)>) -> bool {
        let Some(sh) = vm.arch.shared.get(index) else {
            return false;
        };
        *sh.boot.lock() = entry;
        true
    }

    fn is_guest_ram(&self, vm: &Vm<B>, addr: u64) -> bool {
        let st = &vm.arch;
        addr >= st.ram_base && addr < st.ram_base + st.ram_size
    }
}

/// HVC or trapped SMC: PSCI/SMCCC architecture calls, else kestrel's
/// vendor hypercalls (unknown ids answer -1).
fn call(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState) -> RunExit {
    // The PV time and PSCI services are out of line: inlined here, their
    // register saves were paid by every hypercall (docs/performance.md).
    if steal::is_standard_hyp(ctx.regs.x[0]) {
        return call_pv_time(env, ctx);
    }
    if psci::is_psci_or_arch(ctx.regs.x[0]) {
        return call_psci(env, ctx);
    }
    let x = &ctx.regs.x;
    let args = HypercallArgs {
        code: 0,
        function: x[0],
        args: [x[1], x[2], x[3], x[4], x[5]],
    };
    let r = env.hypercall(Abi::Arm64, &args);
    for (i, &v) in r.regs().iter().enumerate() {
        ctx.regs.x[i] = v;
    }
    RunExit::Continue
}

/// An SMCCC standard hypervisor service call (PV time, DEN0057A).
#[inline(never)]
fn call_pv_time(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState) -> RunExit {
    let (vm, vcpu, x) = (env.vm, env.vcpu, &ctx.regs.x);
    let (x0, effect) = steal::call(x[0], x[1], vm.pv_time.as_ref(), vcpu.index);
    if effect == PvTimeEffect::Register {
        vcpu.steal.register();
        super::write_steal_record(vm, vcpu);
    }
    ctx.regs.x[0] = x0 as u64;
    RunExit::Continue
}

/// A PSCI or SMCCC architecture call.
#[inline(never)]
fn call_psci(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState) -> RunExit {
    let (be, vm, vcpu) = (env.backend(), env.vm, env.vcpu);
    let x = ctx.regs.x;
    let (x0, next) = env.psci([x[0], x[1], x[2], x[3]], || be.has_work(vm, vcpu, ctx));
    ctx.regs.x[0] = x0;
    next
}

/// The host value of a feature ID register the guest's view is built from.
fn host_id(reg: SysReg) -> u64 {
    match reg {
        sysreg::ID_AA64PFR0_EL1 => mrs!("id_aa64pfr0_el1"),
        sysreg::ID_AA64PFR1_EL1 => mrs!("id_aa64pfr1_el1"),
        sysreg::ID_AA64DFR0_EL1 => mrs!("id_aa64dfr0_el1"),
        sysreg::ID_AA64ISAR0_EL1 => mrs!("id_aa64isar0_el1"),
        sysreg::ID_AA64ISAR1_EL1 => mrs!("id_aa64isar1_el1"),
        sysreg::ID_AA64ISAR2_EL1 => mrs!("s3_0_c0_c6_2"),
        sysreg::ID_AA64MMFR0_EL1 => mrs!("id_aa64mmfr0_el1"),
        sysreg::ID_AA64MMFR1_EL1 => mrs!("id_aa64mmfr1_el1"),
        sysreg::ID_AA64MMFR2_EL1 => mrs!("s3_0_c0_c7_2"),
        _ => 0,
    }
}

/// Registers answered read-as-zero, write-ignored.
fn raz_wi(r: SysReg) -> bool {
    // PMU: PMCR_EL0.. (CRn 9, CRm 12-14), PMEVCNTR/TYPER (CRn 14, CRm 8-15).
    (r.op0 == 3 && r.crn == 9 && (12..=14).contains(&r.crm))
        || (r.op0 == 3 && r.op1 == 3 && r.crn == 14 && r.crm >= 8)
        // ACTLR_EL1 (HCR_EL2.TACR).
        || r == SysReg::new(3, 0, 1, 0, 1)
        // LORegion registers (HCR_EL2.TLOR): LORSA/LOREA/LORN/LORC/LORID.
        || (r.op0 == 3 && r.op1 == 0 && r.crn == 10 && r.crm == 4)
}

/// Data/instruction cache maintenance by set/way (HCR_EL2.TSW): DC ISW,
/// CSW, CISW. Guests use them only around turning their caches on or off;
/// kestrel keeps guest memory coherent (cleaned to PoC at load) and ignores them.
fn set_way(r: SysReg) -> bool {
    r.op0 == 1 && r.op1 == 0 && r.crn == 7 && matches!(r.crm, 6 | 10 | 14) && r.op2 == 2
}

fn sysreg_trap(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, acc: SysRegAccess) -> RunExit {
    let vm = env.vm;
    let r = acc.reg;
    let sgi = match r {
        sysreg::ICC_SGI1R_EL1 => Some(SgiRegister::Sgi1r),
        sysreg::ICC_ASGI1R_EL1 => Some(SgiRegister::Asgi1r),
        sysreg::ICC_SGI0R_EL1 => Some(SgiRegister::Sgi0r),
        _ => None,
    };
    if let Some(which) = sgi {
        if acc.read || !vm.arch.ids.gic_v3 {
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            inject_undef(ctx);
            return RunExit::Continue;
        }
        env.vcpu.stats.exit_owned(ExitReason::Ipi);
        let value = reg(ctx, acc.rt);
        let kicks = vm.arch.vgic.lock().write_icc_sgi(env.index(), which, value);
        // The caller refills its list registers before its next entry anyway.
        env.wake_set(kicks);
        skip(ctx);
        return RunExit::Continue;
    }
    env.vcpu.stats.exit_owned(ExitReason::Sysreg);
    if r.is_feature_id() {
        if acc.read {
            let v = idregs::guest_view(r, host_id(r), vm.arch.ids);
            set_reg(ctx, acc.rt, v);
            skip(ctx);
        } else {
            inject_undef(ctx);
        }
        return RunExit::Continue;
    }
    if r.op0 == 2 {
        // Debug registers (MDCR_EL2.TDA/TDOSA/TDRA): the vCPU's shadow; a
        // write the hardware must hold goes to it at once (the vCPU is
        // loaded) and from now on at every load.
        let value = reg(ctx, acc.rt);
        let was_dirty = ctx.debug.dirty;
        match ctx.debug.access(r, acc.read, value) {
            DebugAnswer::Read(v) => set_reg(ctx, acc.rt, v),
            DebugAnswer::Written { hw: true } if !was_dirty => {
                // The first such write: the hardware still holds whatever
                // another vCPU left there; all of it becomes ours.
                super::regs::load_debug(&ctx.debug);
            }
            DebugAnswer::Written { hw } => {
                if hw {
                    super::regs::write_debug(&ctx.debug, r.op1, r.crn, r.crm, r.op2);
                }
            }
            DebugAnswer::Undef => {
                inject_undef(ctx);
                return RunExit::Continue;
            }
        }
        skip(ctx);
        return RunExit::Continue;
    }
    if PhysTimer::handles(r) {
        // The emulated EL1 physical timer (CNTHCTL_EL2.EL1PCEN clear); the
        // next entry drives PPI 30 and the backing timer from the model.
        let now = super::timer::counter();
        if acc.read {
            let v = ctx.ptimer.read(r, now).unwrap_or(0);
            set_reg(ctx, acc.rt, v);
        } else {
            let v = reg(ctx, acc.rt);
            ctx.ptimer.write(r, v, now);
        }
        skip(ctx);
        return RunExit::Continue;
    }
    if raz_wi(r) || set_way(r) {
        if acc.read {
            set_reg(ctx, acc.rt, 0);
        }
        skip(ctx);
        return RunExit::Continue;
    }
    inject_undef(ctx);
    RunExit::Continue
}

/// A data abort: an access to a device on the VM's bus (emulated, PC
/// stepped over it) or anything else (an external abort to the guest).
fn data_abort(env: &ExitCtx<'_, B>, ctx: &mut VcpuState, a: &Abort) -> RunExit {
    let vm = env.vm;
    let (Some(acc), Some(hit)) = (a.access, vm.bus.find(a.ipa)) else {
        // Outside every emulated region (or an access the syndrome does not
        // describe, e.g. a load pair): the guest gets an external abort.
        env.vcpu.stats.exit_owned(ExitReason::Abort);
        inject_abort(ctx, a, true);
        return RunExit::Continue;
    };
    env.vcpu.stats.exit_owned(ExitReason::Mmio);
    // From AArch32 the SRT is the AArch64 view, or (QEMU) the AArch32
    // number: aarch32::regs::trap_reg.
    let rt = if ctx.regs.pstate & PSTATE_NRW != 0 {
        match aarch32::regs::trap_reg(ctx.regs.pstate, acc.rt) {
            Some(x) => x,
            None => {
                inject_abort(ctx, a, true);
                return RunExit::Continue;
            }
        }
    } else {
        acc.rt
    };
    let value = reg(ctx, rt);
    let mut dev = VmDeviceEnv::new(env.hv, vm, env.index(), env.cpu);
    let result = match Width::new(acc.width) {
        Some(w) => hit.access(&mut dev, w, a.write.then_some(value)),
        None => Err(MmioError::BadAccess),
    };
    let end = dev.end();
    match result {
        Ok(read) => {
            if let Some(v) = read {
                let bits = u32::from(acc.width) * 8;
                let mut v = if bits < 64 { v & ((1 << bits) - 1) } else { v };
                if acc.sign_extend && bits < 64 && v & (1 << (bits - 1)) != 0 {
                    v |= !((1u64 << bits) - 1);
                }
                if !acc.sf {
                    v &= 0xFFFF_FFFF;
                }
                set_reg(ctx, rt, v);
            }
            skip(ctx);
        }
        Err(_) => {
            // A width or offset the device's registers do not take.
            env.vcpu.stats.exit_owned(ExitReason::Abort);
            inject_abort(ctx, a, true);
        }
    }
    match end {
        // A device asked for it (no arm64 device does yet).
        Some(end) => RunExit::VmEnd(end),
        None => RunExit::Continue,
    }
}
