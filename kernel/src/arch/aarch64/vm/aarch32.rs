//! AArch32 guests on the arm64 backend: a VM whose EL1 runs in AArch32
//! state (HCR_EL2.RW clear), and the traps of an AArch32 EL0 under an
//! AArch64 kernel. The decoding and the register model are portable and
//! host-tested (`crate::guest::arm64::aarch32`); this file is what touches
//! the hardware: the AArch32-only EL1 state kestrel switches (SPSR_abt/
//! und/irq/fiq, DACR32_EL2, IFSR32_EL2, FPEXC32_EL2), the answers to
//! coprocessor, VMRS, HVC32 and SMC32 traps, and exceptions injected into
//! an AArch32 EL1 (undefined instruction, prefetch and data aborts) at its
//! vectors with the mode, LR offset and SPSR of the Arm ARM.
//!
//! FPEXC32_EL2 follows the lazy FP unit: while the vCPU's FP/SIMD
//! registers are not live on the pCPU (CPTR_EL2.TFP set) the hardware holds
//! FPEXC.EN = 1, so that a VFP/Advanced SIMD instruction traps to EL2
//! (the trap to EL2 is taken only if the instruction would not first be
//! UNDEFINED at EL1 by FPEXC.EN = 0); once the registers are the vCPU's
//! (the FP trap, or a load that finds them live) it holds the guest's own
//! value, so the guest's FPEXC.EN = 0 still makes its instructions
//! UNDEFINED to its own EL1 (Linux's lazy VFP switching relies on that).

use alloc::format;

use crate::dev::vgic::SgiRegister;
use crate::guest::arm64::aarch32::cp14;
use crate::guest::arm64::aarch32::cp15::{self, Kind, Trap};
use crate::guest::arm64::aarch32::except::{self, Exception, Fault, FsrFormat, SpsrReg};
use crate::guest::arm64::aarch32::idregs::guest_view32;
use crate::guest::arm64::aarch32::regs::trap_reg;
use crate::guest::arm64::aarch32::smccc::{self, Call32};
use crate::guest::arm64::aarch32::trap::{self, Exit32, Mcr, Mcrr, VmrsReg, RT_PC};
use crate::guest::arm64::debug::Answer as DebugAnswer;
use crate::guest::arm64::esr::{sysreg, Abort, SysReg};
use crate::guest::arm64::idregs;
use crate::guest::arm64::ptimer::PhysTimer;
use crate::vcpu::hypercall::{Abi, HypercallArgs};
use crate::vcpu::psci;
use crate::vcpu::stats::ExitReason;
use crate::vcpu::steal;
use crate::vm::exitctx::ExitCtx;
use crate::vm::RunExit;

use super::super::el2::CptrEl2;
use super::exits::{self, Syndrome};
use super::regs::{mrs, msr};
use super::{Arm64Backend, VcpuState};

type B = Arm64Backend;

/// Whether this CPU runs AArch32 at EL1 (ID_AA64PFR0_EL1.EL1 = 2).
pub fn el1_supported() -> bool {
    el1_field() == 2
}

/// ID_AA64PFR0_EL1.EL1: 1 AArch64 only, 2 AArch64 and AArch32.
pub fn el1_field() -> u64 {
    (mrs!("id_aa64pfr0_el1") >> 4) & 0xf
}

/// SCTLR (AArch32 view of SCTLR_EL1) at reset: MMU, caches and alignment
/// checks off, exception vectors at VBAR, the RES1 bits and the CP15
/// barrier enable set (KVM's reset value for 32-bit guests).
pub const SCTLR32_RESET: u64 = 0x00C5_0078;
/// The CPSR a 32-bit vCPU starts with: SVC mode, A, I and F masked, A32,
/// little-endian (`kestrel_abi::image::ARM32_ENTRY_CPSR`).
pub const CPSR_SVC_MASKED: u64 = kestrel_abi::image::ARM32_ENTRY_CPSR as u64;
/// CPSR.T: Thumb state.
const CPSR_T: u64 = 1 << 5;
/// FPEXC.EN.
const FPEXC_EN: u64 = 1 << 30;

/// The AArch32-only EL1 state of a vCPU (switched on load/put for the
/// vCPUs of AArch32 VMs only: an AArch64 EL1 cannot reach it).
#[derive(Clone, Copy, Debug, Default)]
pub struct A32Regs {
    pub spsr_abt: u64,
    pub spsr_und: u64,
    pub spsr_irq: u64,
    pub spsr_fiq: u64,
    pub dacr: u64,
    pub ifsr: u64,
    /// FPEXC: in the hardware only while the FP unit is the vCPU's.
    pub fpexc: u64,
}

impl A32Regs {
    pub fn restore(&self) {
        msr!("spsr_abt", self.spsr_abt);
        msr!("spsr_und", self.spsr_und);
        msr!("spsr_irq", self.spsr_irq);
        msr!("spsr_fiq", self.spsr_fiq);
        msr!("dacr32_el2", self.dacr);
        msr!("ifsr32_el2", self.ifsr);
    }

    pub fn save(&mut self) {
        self.spsr_abt = mrs!("spsr_abt");
        self.spsr_und = mrs!("spsr_und");
        self.spsr_irq = mrs!("spsr_irq");
        self.spsr_fiq = mrs!("spsr_fiq");
        self.dacr = mrs!("dacr32_el2");
        self.ifsr = mrs!("ifsr32_el2");
    }
}

/// Whether CPTR_EL2.TFP traps FP/SIMD (the vCPU's registers are not live).
fn fp_trapped() -> bool {
    mrs!("cptr_el2") & CptrEl2::TFP.bits() != 0
}

/// Writes FPEXC32_EL2 (CPTR_EL2.TFP also traps EL2's own accesses: it is
/// cleared around the write and put back).
fn write_fpexc32(v: u64) {
    // SAFETY: only CPTR_EL2's FP trap bit changes, for two instructions,
    // and is restored; FPEXC32_EL2 is guest state (the CPU runs AArch32 at
    // EL1: only AArch32 VMs, which need it, get here). No memory is
    // touched.
    unsafe {
        core::arch::asm!(
            "mrs {old}, cptr_el2",
            "bic {tmp}, {old}, #{tfp}",
            "msr cptr_el2, {tmp}",
            "isb",
            "msr fpexc32_el2, {v}",
            "msr cptr_el2, {old}",
            "isb",
            old = out(reg) _,
            tmp = out(reg) _,
            v = in(reg) v,
            tfp = const CptrEl2::TFP.bits(),
            options(nostack, preserves_flags)
        )
    };
}

/// Reads FPEXC32_EL2 (as [`write_fpexc32`]).
fn read_fpexc32() -> u64 {
    let v: u64;
    // SAFETY: as in `write_fpexc32`, reading.
    unsafe {
        core::arch::asm!(
            "mrs {old}, cptr_el2",
            "bic {tmp}, {old}, #{tfp}",
            "msr cptr_el2, {tmp}",
            "isb",
            "mrs {v}, fpexc32_el2",
            "msr cptr_el2, {old}",
            "isb",
            old = out(reg) _,
            tmp = out(reg) _,
            v = out(reg) v,
            tfp = const CptrEl2::TFP.bits(),
            options(nostack, preserves_flags)
        )
    };
    v
}

/// At the load of an AArch32 VM's vCPU, after the FP engine's: its
/// AArch32 state, and FPEXC as the module documentation says.
pub fn load(ctx: &VcpuState) {
    ctx.a32.restore();
    write_fpexc32(if fp_trapped() {
        FPEXC_EN
    } else {
        ctx.a32.fpexc
    });
}

/// At its put, before the FP engine's: its FPEXC if the unit is its own.
pub fn put(ctx: &mut VcpuState) {
    if !fp_trapped() {
        ctx.a32.fpexc = read_fpexc32();
    }
    ctx.a32.save();
}

/// The FP trap gave the vCPU the unit: its own FPEXC now.
pub fn fp_loaded(ctx: &VcpuState) {
    write_fpexc32(ctx.a32.fpexc);
}

/// The state of a 32-bit vCPU entering at `entry` (bit 0: Thumb): SVC
/// mode, A/I/F masked, MMU and caches off.
pub fn reset_state(ctx: &mut VcpuState, entry: u64) {
    ctx.regs.pc = entry & 0xffff_fffe;
    ctx.regs.pstate = CPSR_SVC_MASKED | if entry & 1 != 0 { CPSR_T } else { 0 };
    ctx.el1.sctlr = SCTLR32_RESET;
    ctx.a32 = A32Regs::default();
}

/// Writes the banked SPSR `which` (the vCPU is loaded: it is live).
fn write_spsr(which: SpsrReg, v: u64) {
    match which {
        SpsrReg::El1 => msr!("spsr_el1", v),
        SpsrReg::Abt => msr!("spsr_abt", v),
        SpsrReg::Und => msr!("spsr_und", v),
        SpsrReg::Irq => msr!("spsr_irq", v),
        SpsrReg::Fiq => msr!("spsr_fiq", v),
    }
}

/// Takes exception `exc` to the AArch32 EL1 of the loaded vCPU, for the
/// instruction at its PC.
fn take(ctx: &mut VcpuState, exc: Exception) {
    let sctlr = mrs!("sctlr_el1") as u32;
    let vbar = mrs!("vbar_el1") as u32;
    let e = except::enter(exc, ctx.regs.pstate, ctx.regs.pc as u32, sctlr, vbar);
    write_spsr(e.spsr_reg, u64::from(e.spsr));
    if let Some(x) = ctx.regs.x.get_mut(usize::from(e.lr_x)) {
        *x = u64::from(e.lr);
    }
    ctx.regs.pc = u64::from(e.pc);
    ctx.regs.pstate = e.cpsr;
    ctx.regs.pstate &= !(1 << 21); // SS: the step state starts afresh.
}

/// An undefined-instruction exception to an AArch32 EL1.
pub fn inject_undef32(ctx: &mut VcpuState) {
    take(ctx, Exception::Undefined);
}

/// A synchronous external abort to an AArch32 EL1: a data abort (DFSR in
/// ESR_EL1[31:0], DFAR in FAR_EL1[31:0]) or a prefetch abort (IFSR32_EL2,
/// IFAR in FAR_EL1[63:32]), in the format the guest's TTBCR.EAE selects.
pub fn inject_abort32(ctx: &mut VcpuState, a: &Abort, data: bool) {
    let format = FsrFormat::of_ttbcr(mrs!("tcr_el1") as u32);
    let far = mrs!("far_el1");
    if data {
        let dfsr = except::dfsr(Fault::SyncExternal, format, a.write).unwrap_or(0);
        msr!("esr_el1", u64::from(dfsr));
        msr!("far_el1", except::far_with_dfar(far, a.far as u32));
        take(ctx, Exception::DataAbort);
    } else {
        let ifsr = except::ifsr(Fault::SyncExternal, format).unwrap_or(0);
        msr!("ifsr32_el2", u64::from(ifsr));
        msr!("far_el1", except::far_with_ifar(far, a.far as u32));
        take(ctx, Exception::PrefetchAbort);
    }
}

/// A trap from AArch32 state (EL1 of an AArch32 VM, or an AArch32 EL0)
/// whose condition passed: the coprocessor, VMRS, HVC32 and SMC32 classes
/// are answered here; `None` for the classes both states share (WFI/WFE,
/// the FP trap, aborts, the unknown class), which the common path answers.
pub fn sync32(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState, syn: Syndrome) -> Option<RunExit> {
    let t = trap::decode(syn.esr, syn.far, syn.hpfar);
    let vm = env.vm;
    Some(match t.exit {
        Exit32::Cp15(m) => cp15_32(env, ctx, m),
        Exit32::Cp15Pair(m) => cp15_64(env, ctx, m),
        Exit32::Cp14(m) => {
            // Debug (MDCR_EL2.TDA/TDOSA/TDRA): the vCPU's debug shadow in
            // its AArch32 views (cp14::access); trace (CPTR_EL2.TTA) and
            // anything unknown are UNDEFINED.
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            let dfr0 = idregs::guest_view(
                sysreg::ID_AA64DFR0_EL1,
                mrs!("id_aa64dfr0_el1"),
                vm.arch.ids,
            );
            let was_dirty = ctx.debug.dirty;
            let value = get32(ctx, m.rt);
            let a = cp14::access(&mut ctx.debug, dfr0, m.reg, m.read, value);
            match a.answer {
                DebugAnswer::Read(v) => {
                    set32(ctx, m.rt, v as u32);
                    exits::skip(ctx);
                }
                DebugAnswer::Written { hw } => {
                    if hw {
                        debug_written(ctx, was_dirty, a.reg);
                    }
                    exits::skip(ctx);
                }
                DebugAnswer::Undef => exits::inject_undef(ctx),
            }
            RunExit::Continue
        }
        Exit32::Cp14Pair(m) => {
            // MRRC of DBGDRAR/DBGDSAR (TDRA): no ROM table; else UNDEFINED.
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            match cp14::access64(m.opc1, m.crm, m.read) {
                DebugAnswer::Read(v) => {
                    let (lo, hi) = cp15::split(v);
                    set32(ctx, m.rt, lo);
                    set32(ctx, m.rt2, hi);
                    exits::skip(ctx);
                }
                _ => exits::inject_undef(ctx),
            }
            RunExit::Continue
        }
        Exit32::Cp14Mem(_) => {
            // LDC/STC to the DCC: there is no DCC.
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            exits::inject_undef(ctx);
            RunExit::Continue
        }
        Exit32::Vmrs { reg, rt } => {
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            let host = match reg {
                VmrsReg::Mvfr0 => Some(mrs!("mvfr0_el1")),
                VmrsReg::Mvfr1 => Some(mrs!("mvfr1_el1")),
                VmrsReg::Mvfr2 => Some(mrs!("mvfr2_el1")),
                VmrsReg::Fpsid | VmrsReg::Other(_) => None,
            };
            match (cp15::vmrs_id(reg), host) {
                (Some(r), Some(h)) => {
                    let v = guest_view32(r, h, vm.arch.ids.gic_v3);
                    set32(ctx, rt, v);
                    exits::skip(ctx);
                }
                _ => exits::inject_undef(ctx),
            }
            RunExit::Continue
        }
        Exit32::Hvc { .. } => {
            env.vcpu.stats.exit_owned(ExitReason::Hypercall);
            call32(env, ctx)
        }
        Exit32::Smc => {
            env.vcpu.stats.exit_owned(ExitReason::Hypercall);
            // A trapped SMC's ELR points at the SMC itself.
            exits::skip(ctx);
            call32(env, ctx)
        }
        Exit32::Svc { .. } => {
            // SVC is never routed to EL2 (HCR_EL2.TGE = 0): a guest cannot
            // cause this; answer as for any unexpected class.
            env.vcpu.stats.exit_owned(ExitReason::Other);
            exits::inject_undef(ctx);
            RunExit::Continue
        }
        _ => return None,
    })
}

/// After a cp14 write the hardware must hold (AArch64 register `r` of the
/// shadow): as after an AArch64 write, the whole shadow goes to the
/// hardware at the first such write (it still holds what another vCPU
/// left), the one register afterwards.
fn debug_written(ctx: &VcpuState, was_dirty: bool, r: SysReg) {
    if was_dirty {
        super::regs::write_debug(&ctx.debug, r.op1, r.crn, r.crm, r.op2);
    } else {
        super::regs::load_debug(&ctx.debug);
    }
}

/// Writes the low 32 bits of an AArch32 register from a trapped read;
/// `RT_PC` (an MRC to APSR_nzcv) sets the condition flags from [31:28].
/// Rt is the AArch64 view, or (QEMU) the AArch32 number: `trap_reg`.
fn set32(ctx: &mut VcpuState, rt: u8, v: u32) {
    if rt == RT_PC {
        ctx.regs.pstate = (ctx.regs.pstate & !0xf000_0000) | u64::from(v & 0xf000_0000);
    } else if let Some(x) = trap_reg(ctx.regs.pstate, rt) {
        if let Some(x) = ctx.regs.x.get_mut(usize::from(x)) {
            *x = u64::from(v);
        }
    }
}

fn get32(ctx: &VcpuState, rt: u8) -> u32 {
    trap_reg(ctx.regs.pstate, rt)
        .and_then(|x| ctx.regs.x.get(usize::from(x)))
        .map_or(0, |&v| v as u32)
}

/// The host value of the AArch32 ID register `r` (op0 3, op1 0, CRn 0,
/// CRm 1-3), from its AArch64 view.
fn host_id32(r: SysReg) -> u64 {
    match (r.crm, r.op2) {
        (1, 0) => mrs!("s3_0_c0_c1_0"), // ID_PFR0_EL1
        (1, 1) => mrs!("s3_0_c0_c1_1"), // ID_PFR1_EL1
        (1, 2) => mrs!("s3_0_c0_c1_2"), // ID_DFR0_EL1
        (1, 3) => mrs!("s3_0_c0_c1_3"), // ID_AFR0_EL1
        (1, 4) => mrs!("s3_0_c0_c1_4"), // ID_MMFR0_EL1
        (1, 5) => mrs!("s3_0_c0_c1_5"), // ID_MMFR1_EL1
        (1, 6) => mrs!("s3_0_c0_c1_6"), // ID_MMFR2_EL1
        (1, 7) => mrs!("s3_0_c0_c1_7"), // ID_MMFR3_EL1
        (2, 0) => mrs!("s3_0_c0_c2_0"), // ID_ISAR0_EL1
        (2, 1) => mrs!("s3_0_c0_c2_1"), // ID_ISAR1_EL1
        (2, 2) => mrs!("s3_0_c0_c2_2"), // ID_ISAR2_EL1
        (2, 3) => mrs!("s3_0_c0_c2_3"), // ID_ISAR3_EL1
        (2, 4) => mrs!("s3_0_c0_c2_4"), // ID_ISAR4_EL1
        (2, 5) => mrs!("s3_0_c0_c2_5"), // ID_ISAR5_EL1
        (2, 6) => mrs!("s3_0_c0_c2_6"), // ID_MMFR4_EL1
        (2, 7) => mrs!("s3_0_c0_c2_7"), // ID_ISAR6_EL1
        (3, 0) => mrs!("s3_0_c0_c3_0"), // MVFR0_EL1
        (3, 1) => mrs!("s3_0_c0_c3_1"), // MVFR1_EL1
        (3, 2) => mrs!("s3_0_c0_c3_2"), // MVFR2_EL1
        // ID_PFR2, ID_DFR1, ID_MMFR5 and the reserved encodings read 0
        // to guests whatever the hardware holds: not read.
        _ => 0,
    }
}

/// A trapped MCR/MRC to cp15.
fn cp15_32(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState, m: Mcr) -> RunExit {
    let e = cp15::lookup(m.reg);
    let value = u64::from(get32(ctx, m.rt));
    let read = access(env, ctx, e.trap, e.answer(m.read), m.read, value);
    match read {
        Answer::Read(v) => {
            set32(ctx, m.rt, v as u32);
            exits::skip(ctx);
        }
        Answer::Done => exits::skip(ctx),
        Answer::Undef => exits::inject_undef(ctx),
        Answer::Sent => {}
    }
    RunExit::Continue
}

/// A trapped MCRR/MRRC to cp15.
fn cp15_64(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState, m: Mcrr) -> RunExit {
    let e = cp15::lookup64(m.opc1, m.crm);
    let value = cp15::join(get32(ctx, m.rt), get32(ctx, m.rt2));
    match access(env, ctx, e.trap, e.answer(m.read), m.read, value) {
        Answer::Read(v) => {
            let (lo, hi) = cp15::split(v);
            set32(ctx, m.rt, lo);
            set32(ctx, m.rt2, hi);
            exits::skip(ctx);
        }
        Answer::Done => exits::skip(ctx),
        Answer::Undef => exits::inject_undef(ctx),
        Answer::Sent => {}
    }
    RunExit::Continue
}

/// What a cp15 access came to.
enum Answer {
    /// A read of this value (the caller writes Rt/Rt2 and steps over it).
    Read(u64),
    /// A write or an operation done (the caller steps over it).
    Done,
    /// UNDEFINED: the caller injects the exception.
    Undef,
    /// Done and stepped over already.
    Sent,
}

/// The answer to a cp15 access of kind `kind` that trapped through `trap`,
/// writing `value` or reading.
fn access(
    env: &mut ExitCtx<'_, B>,
    ctx: &mut VcpuState,
    trap: Trap,
    kind: Kind,
    read: bool,
    value: u64,
) -> Answer {
    let vm = env.vm;
    match kind {
        Kind::Sys { reg, .. } => match trap {
            // The feature ID registers (HCR_EL2.TID3): kestrel's view.
            Trap::Tid3 => {
                env.vcpu.stats.exit_owned(ExitReason::Sysreg);
                Answer::Read(u64::from(guest_view32(
                    reg,
                    host_id32(reg),
                    vm.arch.ids.gic_v3,
                )))
            }
            // ACTLR/ACTLR2 (HCR_EL2.TACR): read as zero, writes ignored,
            // as ACTLR_EL1.
            Trap::Tacr => {
                env.vcpu.stats.exit_owned(ExitReason::Sysreg);
                if read {
                    Answer::Read(0)
                } else {
                    Answer::Done
                }
            }
            // The emulated EL1 physical timer (CNTHCTL_EL2.EL1PCEN clear).
            Trap::Timer if PhysTimer::handles(reg) => {
                env.vcpu.stats.exit_owned(ExitReason::Sysreg);
                let now = super::timer::counter();
                if read {
                    Answer::Read(ctx.ptimer.read(reg, now).unwrap_or(0))
                } else {
                    // CTL and TVAL are words (TVAL signed, as from
                    // AArch64); CVAL a 64-bit MCRR.
                    ctx.ptimer.write(reg, value, now);
                    Answer::Done
                }
            }
            // SGIs from the GICv3 CPU interface (MCRR ICC_SGI1R and co.,
            // HCR_EL2.IMO/FMO).
            Trap::Gic if !read => {
                let which = match reg {
                    sysreg::ICC_SGI1R_EL1 => SgiRegister::Sgi1r,
                    sysreg::ICC_ASGI1R_EL1 => SgiRegister::Asgi1r,
                    sysreg::ICC_SGI0R_EL1 => SgiRegister::Sgi0r,
                    _ => {
                        env.vcpu.stats.exit_owned(ExitReason::Sysreg);
                        return Answer::Undef;
                    }
                };
                if !vm.arch.ids.gic_v3 {
                    env.vcpu.stats.exit_owned(ExitReason::Sysreg);
                    return Answer::Undef;
                }
                env.vcpu.stats.exit_owned(ExitReason::Ipi);
                let kicks = vm.arch.vgic.lock().write_icc_sgi(env.index(), which, value);
                env.wake_set(kicks);
                exits::skip(ctx);
                Answer::Sent
            }
            // Nothing else kestrel's trap controls send here: a register
            // that traps unexpectedly is not given to the guest.
            _ => {
                env.vcpu.stats.exit_owned(ExitReason::Sysreg);
                Answer::Undef
            }
        },
        Kind::Const(v) => {
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            if read {
                Answer::Read(u64::from(v))
            } else {
                Answer::Done
            }
        }
        // The PMU (MDCR_EL2.TPM/TPMCR) and FCSEIDR: RAZ/WI.
        Kind::RazWi => {
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            if read {
                Answer::Read(0)
            } else {
                Answer::Done
            }
        }
        // Set/way maintenance (HCR_EL2.TSW): ignored, guest memory is kept
        // coherent (as DC ISW/CSW/CISW from AArch64); CP15 barriers: the
        // trap itself is a context synchronization.
        Kind::SetWay(_) | Kind::Barrier(_) => {
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            Answer::Done
        }
        // Maintenance by VA, invalidate-all, TLBI and AT do not trap with
        // kestrel's controls; the IMPLEMENTATION DEFINED space and every
        // unallocated encoding are UNDEFINED.
        Kind::ByVa(_) | Kind::InvalidateAll(_) | Kind::Tlbi(_) | Kind::At(_) | Kind::Undef => {
            env.vcpu.stats.exit_owned(ExitReason::Sysreg);
            Answer::Undef
        }
    }
}

/// HVC32 or a trapped SMC32 (the PC already past it): PSCI and SMCCC
/// with the SMC32 function ids, kestrel's vendor calls with the 32-bit
/// convention of docs/hypercalls.md. SMC64/HVC64 ids of the architecture
/// and standard services are not callable from AArch32: NOT_SUPPORTED.
fn call32(env: &mut ExitCtx<'_, B>, ctx: &mut VcpuState) -> RunExit {
    let x = ctx.regs.x;
    let r = [x[0], x[1], x[2], x[3], x[4], x[5]];
    let standard = steal::is_standard_hyp(x[0] & 0xffff_ffff);
    let arch = psci::is_psci_or_arch(x[0] & 0xffff_ffff) || standard;
    match smccc::classify(r, arch, standard) {
        Call32::NotSupported => {
            ctx.regs.x[0] = psci::ret::NOT_SUPPORTED as u64 & 0xffff_ffff;
            RunExit::Continue
        }
        Call32::Psci(args) => {
            let (be, vm, vcpu) = (env.backend(), env.vm, env.vcpu);
            // CPU_ON's entry bit 0 selects T32 (reset_state sets CPSR.T).
            let (x0, next) =
                env.psci_from(psci::Caller::Aarch32, args, || be.has_work(vm, vcpu, ctx));
            ctx.regs.x[0] = x0 & 0xffff_ffff;
            next
        }
        Call32::Vendor { function, args } => {
            let out = env.hypercall(
                Abi::Arm64,
                &HypercallArgs {
                    code: 0,
                    function,
                    args,
                },
            );
            for (x, v) in ctx
                .regs
                .x
                .iter_mut()
                .zip(smccc::vendor_results(function, out.regs()))
            {
                *x = v;
            }
            RunExit::Continue
        }
    }
}

/// Why an AArch32 VM cannot be built on this CPU, if it cannot.
pub fn refuse_reason() -> Option<alloc::string::String> {
    (!el1_supported()).then(|| {
        format!(
            "arch: an AArch32 VM needs a CPU that runs AArch32 at EL1, and this one does not \
             (ID_AA64PFR0_EL1.EL1 = {})",
            el1_field()
        )
    })
}
