//! Exit handling both LoongArch modes share, once their own decoder
//! ([`super::Mode::enter`]) has said what the exit is: a load or store
//! sent to the VM's bus, the effects of an IOCSR write (IPIs, mail, the
//! interrupt controllers' lines), the firmware's part of a secondary's
//! start, `idle` with halt polling, `hvcl` hypercalls, the lazy FP trap,
//! and the PV IPI hooks of the exit context ([`ExitArch`]).

use crate::dev::vdev::Width;
use crate::guest::loongarch::csr::ecode;
use crate::guest::loongarch::insn::{Addr, Insn, Size};
use crate::guest::loongarch::iocsr as viocsr;
use crate::vcpu::hypercall::{Abi, HypercallArgs};
use crate::vcpu::stats::Counter;
use crate::vm::exitctx::{ExitArch, ExitCtx};
use crate::vm::{RunExit, Vm};
use crate::vmm::devices::VmDeviceEnv;

use super::super::csr;
use super::{LaBackend, LaVcpu, Mode, PCPU};

/// Whether an exit's ESTAT says a hardware interrupt caused it (ECODE 0).
#[inline]
pub fn is_interrupt(estat: u64) -> bool {
    ((estat >> 16) & 0x3f) as u8 == ecode::INT
}

/// A guest load or store: its data register, width, direction, sign
/// extension and address operands.
#[derive(Clone, Copy, Debug)]
pub struct MemOp {
    pub rd: u8,
    pub size: Size,
    pub store: bool,
    pub signed: bool,
    pub addr: Addr,
}

impl MemOp {
    /// `i` if it is a plain load or store.
    pub fn of(i: Insn) -> Option<MemOp> {
        match i {
            Insn::Load {
                rd,
                size,
                signed,
                addr,
            } => Some(MemOp {
                rd,
                size,
                store: false,
                signed,
                addr,
            }),
            Insn::Store { rd, size, addr } => Some(MemOp {
                rd,
                size,
                store: true,
                signed: false,
                addr,
            }),
            _ => None,
        }
    }
}

/// The load or store `op` of `env`'s vCPU (registers `ctx`) at guest
/// physical `gpa`, which is not RAM: sent to the device on the VM's bus
/// there, the PC past it. A width or offset the device's registers do not
/// take reads as 0 and is not written (the guest gets no exception for
/// it). `None`: no device there takes such an access (the caller gives
/// the guest its address error).
pub fn mmio<M: Mode>(
    env: &ExitCtx<'_, LaBackend<M>>,
    ctx: &mut M::Vcpu,
    gpa: u64,
    op: MemOp,
) -> Option<RunExit> {
    let vm = env.vm;
    let hit = vm.bus.find_from(gpa, &mut ctx.run().mmio_region)?;
    let width = Width::new(op.size.bytes() as u8)?;
    let f = ctx.frame();
    let value = f.reg(op.rd) & op.size.mask();
    let mut dev = VmDeviceEnv::new(env.hv, vm, env.index(), env.cpu);
    let read = hit
        .access(&mut dev, width, op.store.then_some(value))
        .unwrap_or(Some(0));
    f.pc = f.pc.wrapping_add(4);
    if let Some(end) = dev.end() {
        return Some(RunExit::VmEnd(end));
    }
    if let (Some(v), false) = (read, op.store) {
        let v = if op.signed {
            op.size.sign_extend(v)
        } else {
            v & op.size.mask()
        };
        f.set_reg(op.rd, v);
    }
    Some(RunExit::Continue)
}

/// What an IOCSR write of `env`'s vCPU did beside its own registers: an
/// IPI wakes its target (or starts a parked secondary), mail may start
/// one, lines of the interrupt controllers rose on some vCPUs. (The
/// caller's own lines are merged into its ESTAT before its next entry.)
#[inline]
pub fn iocsr_effect<M: Mode>(env: &ExitCtx<'_, LaBackend<M>>, fx: viocsr::Effect) {
    match fx {
        viocsr::Effect::Ipi(t) => {
            env.vm.stats.inc(Counter::IpiEmulated);
            if !try_start(env, t) {
                env.wake(t);
            }
        }
        viocsr::Effect::Mail(t) => {
            try_start(env, t);
        }
        viocsr::Effect::Irq(rose) => env.wake_set(rose),
        viocsr::Effect::SelfLine | viocsr::Effect::None => {}
    }
}

/// The firmware's part of the mailbox start: a parked secondary with an
/// IPI pending and a non-zero mailbox 0 starts there (DA mode, PLV0,
/// a0 = 0). Returns whether it started.
fn try_start<M: Mode>(env: &ExitCtx<'_, LaBackend<M>>, t: usize) -> bool {
    use core::sync::atomic::Ordering;
    let vm = env.vm;
    let (Some(sh), Some(ipi)) = (vm.arch.shared.get(t), vm.arch.ipi.get(t)) else {
        return false;
    };
    if !sh.parked.load(Ordering::Acquire) {
        return false;
    }
    let entry = ipi.mbuf[0].load(Ordering::Acquire);
    if entry & 0xffff_ffff == 0 || ipi.status.load(Ordering::Acquire) == 0 {
        return false;
    }
    if sh
        .parked
        .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    // The boot code clears the IPI it woke on before jumping.
    ipi.status.store(0, Ordering::Release);
    // A parked vCPU is off: this cannot fail; it started either way.
    let _ = env.start_vcpu(t, entry, 0);
    true
}

/// `idle` (the PC is past it): go on if an interrupt the guest enables is
/// pending or becomes so while polling ([`LaBackend::halt_poll`]), else
/// block until one is (the run loop checks before every entry
/// ([`Mode::idle_over`]), so a wake-up for nothing waits on).
pub fn idle<M: Mode>(env: &ExitCtx<'_, LaBackend<M>>, ctx: &mut M::Vcpu) -> RunExit {
    if M::wake_pending(&env.vm.arch, env.index(), ctx) || env.backend().halt_poll(env, ctx) {
        return RunExit::Continue;
    }
    M::start_idle(ctx);
    let delay = env.vcpu.steal.delay();
    ctx.run().halt.blocking(csr::rdtime(), delay);
    RunExit::Block
}

/// `hvcl code`: Linux KVM's LoongArch ABI (a0 function, a1-a5 arguments,
/// a0 result, PC + 4), for the guest's kernel; its user code (`user`) gets
/// "unknown code" and nothing happens (no IPIs from guest user space). A
/// sender of a PV IPI that targeted itself takes its SWI0 at the next
/// entry.
pub fn hvcl<M: Mode>(
    env: &mut ExitCtx<'_, LaBackend<M>>,
    ctx: &mut M::Vcpu,
    code: u32,
    user: bool,
) -> RunExit {
    let r = &ctx.frame().regs;
    let (function, args) = (r[4], [r[5], r[6], r[7], r[8], r[9]]);
    let ret = if user {
        kestrel_abi::ret::INVALID_CODE as u64
    } else if let Some(v) = M::hypercall(&env.vm.arch, ctx, code, function, &args) {
        v
    } else {
        let args = HypercallArgs {
            code,
            function,
            args,
        };
        env.hypercall(Abi::LoongArch, &args).x0()
    };
    let f = ctx.frame();
    f.regs[4] = ret;
    f.pc = f.pc.wrapping_add(4);
    RunExit::Continue
}

/// An FP/LSX/LASX instruction of a vCPU that does not own the unit:
/// kestrel's lazy switch of the FP registers (counts the trap and restore
/// in this VM, and the save of the previous owner's registers in that
/// owner's VM).
pub fn fp_trap(cpu: usize) {
    if let Some(e) = PCPU[cpu].fp.lock().as_mut() {
        e.fp_trap();
    }
}

impl<M: Mode> ExitArch for LaBackend<M> {
    /// SWI0 in the target's shared state, which its next entry merges
    /// into its ESTAT.
    fn raise_pv_ipi(&self, vm: &Vm<Self>, _sender: usize, target: usize) -> bool {
        let Some(sh) = vm.arch.shared.get(target) else {
            return true;
        };
        sh.swi.fetch_or(1, core::sync::atomic::Ordering::AcqRel) & 1 != 0
    }

    /// Applied at its next load as the reset state (DA mode, PLV0), PC =
    /// entry, a0 = context.
    fn set_entry(&self, vm: &Vm<Self>, index: usize, entry: Option<(u64, u64)>) -> bool {
        let Some(sh) = vm.arch.shared.get(index) else {
            return false;
        };
        *sh.boot.lock() = entry;
        true
    }

    fn is_guest_ram(&self, vm: &Vm<Self>, addr: u64) -> bool {
        vm.arch.ram_offset(addr).is_some()
    }
}
