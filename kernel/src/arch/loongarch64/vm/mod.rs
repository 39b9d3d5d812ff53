//! The LoongArch trap-and-emulate mode: guests run at PLV3 under kestrel
//! at PLV0, which keeps each vCPU's privileged state in software
//! (`crate::guest::loongarch`), emulates what traps, maps guest memory with
//! shadow TLB entries tagged by ASIDs from the VMID allocator, and delivers
//! exceptions and interrupts to the guest's virtual handlers. [`Tne`] is
//! the [`Mode`] of the shared LoongArch backend ([`super::backend`]: the
//! VM, its devices, the run loop), as LVZ's is (`super::lvz`). Design notes
//! and the guest-visible machine: docs/loongarch-vm.md.

pub mod exits;
pub mod hwtlb;
pub mod vcpu;

use crate::guest::loongarch::csr::{self as vcsr};
use crate::host::board::BoardInfo;
use crate::mem::vmid::VmVmid;
use crate::vcpu::fpu::FpPolicy;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{RunExit, Vcpu, Vm};

use super::backend::{switch, LaBackend, Mode, VcpuIrqs, VmState, PCPU};
use super::csr;
pub use vcpu::VcpuState;

/// Real ASIDs per VM: direct-address mode, paged at virtual PLV0, paged at
/// virtual PLV1-3. ASID = VMID * 4 + context.
pub const CONTEXTS: u16 = 4;
pub const CTX_DA: u16 = 0;
pub const CTX_KERNEL: u16 = 1;
pub const CTX_USER: u16 = 2;
/// Real ASID bits on la464 (ASID.ASIDBITS): VMIDs get two fewer.
const ASID_BITS: u32 = 10;

/// Trap-and-emulate: the guest at PLV3, its privileged state in software.
pub struct Tne;

/// The trap-and-emulate backend.
pub type TneBackend = LaBackend<Tne>;

/// The trap-and-emulate backend for `board`.
pub fn probe(board: &BoardInfo, policy: FpPolicy) -> TneBackend {
    let backend = TneBackend::new(board, policy, ASID_BITS - 2);
    log::info!(
        "LoongArch VMs: trap-and-emulate at PLV3, {}-bit VMIDs x {CONTEXTS} ASIDs, FP {} ({policy:?})",
        backend.vmids.bits(),
        backend.fp_name(),
    );
    backend
}

impl Mode for Tne {
    type Vcpu = VcpuState;
    type Poll = ();

    fn init_cpu() {
        hwtlb::init_cpu();
    }

    /// The VM's: its ASIDs are VMID * 4 + context.
    fn vmid<'a>(vm: &'a Vm<TneBackend>, _ctx: &'a VcpuState) -> &'a VmVmid {
        &vm.vmid
    }

    /// Shadow entries on this pCPU belong to whoever ran last here: unless
    /// that was this vCPU in this epoch under this VMID, its ASIDs' go.
    fn load(
        cpu: usize,
        _vm: &Vm<TneBackend>,
        vcpu: &Vcpu<TneBackend>,
        ctx: &mut VcpuState,
        vmid: u16,
        rollover: bool,
        _now: u64,
    ) {
        let mut last = PCPU[cpu].last.lock();
        if rollover {
            hwtlb::flush_all();
            *last = None;
        }
        ctx.vmid = vmid;
        ctx.key = vcpu.key;
        let me = (vcpu.key, ctx.epoch, ctx.vmid);
        if *last != Some(me) {
            for c in 0..CONTEXTS {
                hwtlb::flush_asid(ctx.asid(c));
            }
            *last = Some(me);
        }
    }

    /// Pending interrupts into the virtual ESTAT and, if the guest takes
    /// one, its delivery; the real ASID of the guest's context. The guest
    /// runs with its virtual EUEN: FP it disabled itself raises its own
    /// exception.
    #[inline(always)]
    fn prepare_entry(irqs: &VcpuIrqs<'_>, ctx: &mut VcpuState) -> u64 {
        ctx.csr.update_timer(csr::rdtime());
        irqs.merge_lines(&mut ctx.csr);
        let swi = irqs.take_swi();
        if swi != 0 {
            ctx.csr.estat |= swi;
        }
        if let Some(line) = ctx.csr.pending_irq() {
            ctx.frame.pc = ctx.csr.raise_irq(ctx.frame.pc, line);
        }
        let c = ctx.context();
        if c == CTX_USER && ctx.csr.plv() != ctx.user_plv {
            // PLV1/2/3 share the user context: keep it to one level at a time.
            hwtlb::flush_asid(ctx.asid(CTX_USER));
            ctx.user_plv = ctx.csr.plv();
        }
        hwtlb::set_asid(ctx.asid(c));
        ctx.csr.get(vcsr::num::EUEN)
    }

    fn idle_over(_st: &VmState, _index: usize, ctx: &mut VcpuState) -> bool {
        ctx.csr.idle_over()
    }

    /// Its virtual timer is kestrel's to raise: the pCPU's timer fires for it.
    fn guest_timer(ctx: &VcpuState) -> Option<u64> {
        ctx.csr.timer_wake_deadline()
    }

    unsafe fn enter(env: &mut ExitCtx<'_, TneBackend>, ctx: &mut VcpuState) -> (RunExit, u64) {
        // SAFETY: forwarded to the caller (the TLB holds only this vCPU's
        // shadows under its ASIDs: `load` flushed others' of this VM).
        unsafe { switch::enter(&mut ctx.frame) };
        let exited = csr::rdtime();
        (exits::handle(env, ctx), exited)
    }

    fn put(_st: &VmState, ctx: &mut VcpuState) -> Option<u64> {
        let lie = ctx.csr.get(vcsr::num::ECFG) & (1 << vcsr::IRQ_TI) != 0;
        ctx.csr.timer_wake_deadline().filter(|_| lie)
    }

    /// In its virtual ESTAT, or a PV IPI not merged yet.
    fn wake_pending(st: &VmState, index: usize, ctx: &VcpuState) -> bool {
        let swi = st.irqs(index).swi();
        ctx.csr.wake_pending().is_some() || swi & ctx.csr.get(vcsr::num::ECFG) != 0
    }

    fn poll_begin(_ctx: &VcpuState) {}

    /// Its timer and lines brought up to date first.
    #[inline]
    fn poll_pending(st: &VmState, index: usize, ctx: &mut VcpuState, _poll: &()) -> bool {
        ctx.csr.update_timer(csr::rdtime());
        st.merge_lines(index, &mut ctx.csr);
        Self::wake_pending(st, index, ctx)
    }

    fn start_idle(ctx: &mut VcpuState) {
        ctx.csr.start_idle();
    }
}
