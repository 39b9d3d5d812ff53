//! The LoongArch LVZ backend: guests run in the CPU's guest mode at their
//! own PLV0 with their own CSRs, TLB, timer and interrupt lines, so kestrel
//! sees only what LVZ sends to the root: privileged resources it must
//! emulate (GSPR: `cpucfg`, IOCSR, `idle`, `cacop`, CSRs the guest has no
//! copy of), hypercalls (`hvcl`), guest-CSR traps, second-stage misses and
//! faults, FP traps and physical interrupts. [`Lvz`] is the [`Mode`] of
//! the shared LoongArch backend (`super::backend`: the VM, its devices,
//! image loading, the world switch, FP hardware and the run loop), as
//! trap-and-emulate's is (`super::vm`); `crate::runtime::backend` picks one
//! at boot.
//!
//! - **Memory**: guest physical addresses are translated by root TLB
//!   entries tagged with the VM's GID (the VMID from the portable
//!   allocator), filled on second-stage misses from the VM's frame list;
//!   an address that is not RAM gets an invalid entry, so the retried
//!   access raises a page-invalid exit whose BADI says what to emulate on
//!   the VM's bus (the way KVM reaches its MMIO path).
//! - **Interrupts**: SWI (PV IPIs) and the IOCSR IPI line are written into
//!   the guest's ESTAT before each entry; the guest timer is the hardware's
//!   while loaded and a deadline on the stable counter while not.
//! - **FP**: the lazy engine as on the other backend: root EUEN is 0 while
//!   the vCPU does not own the unit, so its first FP/LSX/LASX instruction
//!   exits.
//!
//! Design notes and the guest-visible machine: docs/loongarch-vm.md.

pub mod exits;
pub mod gcsr;
pub mod switch;
pub mod vcpu;

use core::arch::asm;

use crate::guest::loongarch::gtimer::{self, GuestTimer};
use crate::guest::loongarch::steal;
use crate::host::board::BoardInfo;
use crate::mem::vmid::VmVmid;
use crate::vcpu::fpu::FpPolicy;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{RunExit, Vcpu, Vm};

use super::backend::{LaBackend, Mode, VcpuIrqs, VmState, PCPU};
use super::csr;
use gcsr::{g, gcsr_read, gcsr_xchg};
pub use vcpu::VcpuState;
use vcpu::{IS_HWI, IS_IPI, IS_TI, TCFG_EN, TCFG_INIT, TCFG_PERIODIC};

/// A periodic guest timer is never reloaded faster than this many counter
/// ticks when kestrel computes it for a vCPU that was not loaded.
const MIN_PERIOD: u64 = 4;

/// The CPU's PRCFG1-3 (what the guest's copies report).
pub fn host_prcfg() -> [(u32, u64); 3] {
    let (a, b, c): (u64, u64, u64);
    // SAFETY: reading the processor configuration CSRs has no side effect.
    unsafe {
        asm!("csrrd {0}, 0x21", "csrrd {1}, 0x22", "csrrd {2}, 0x23",
            out(reg) a, out(reg) b, out(reg) c, options(nomem, nostack));
    }
    [(0x21, a), (0x22, b), (0x23, c)]
}

/// Invalidates the guest entries (GVA -> GPA) of `gid` on this CPU.
fn flush_guest_tlb(gid: u16) {
    // SAFETY: `invtlb 0x13` (INVGTLB_GID_GVA_TO_GPA) drops guest TLB
    // entries of one GID; kestrel keeps nothing there. The GID's
    // second-stage entries stay (the emulator in tools/qemu-lvz dropped
    // them too before its patch 0010, which only cost refills).
    unsafe {
        asm!("invtlb 0x13, {0}, $zero", in(reg) u64::from(gid) << 16, options(nostack));
    }
}

/// Invalidates every guest and second-stage entry of every GID on this CPU.
fn flush_all_gids() {
    // SAFETY: kestrel maps nothing of its own through the TLB. `invtlb
    // 0x12` (INVTLB_ALLGID) is the architectural "all GIDs"; `invtlb 0`
    // also covers emulators that apply 0x12 to one GID only.
    unsafe {
        asm!(
            "invtlb 0x12, $zero, $zero",
            "invtlb 0, $zero, $zero",
            options(nostack)
        );
    }
}

/// LVZ guest mode: the guest at its own PLV0 with its own CSRs and TLB.
pub struct Lvz;

/// The LVZ backend.
pub type LvzBackend = LaBackend<Lvz>;

/// Which backend the boot path records for this CPU and command line:
/// LVZ where the CPU has it, unless `kestrel.backend=tne` says otherwise.
/// (`kestrel.backend=lvz` on a CPU without it is refused when the VMs are
/// created.)
pub fn select(cmdline: &str) -> crate::host::board::Backend {
    use crate::host::board::Backend;
    use crate::host::cmdline::{BackendChoice, BootOptions};
    match (BootOptions::parse(cmdline).backend, csr::has_lvz()) {
        (BackendChoice::TrapEmulate, _) | (_, false) => Backend::LoongArchTrapEmulate,
        (_, true) => Backend::LoongArchLvz,
    }
}

/// The LVZ backend for `board`, if the CPU has LVZ.
pub fn probe(board: &BoardInfo, policy: FpPolicy) -> Result<LvzBackend, &'static str> {
    if !csr::has_lvz() {
        return Err("this CPU has no LVZ (CPUCFG2 bit 10 is 0)");
    }
    let reported = gcsr::gid_bits();
    // No wider than the 8-bit GID fields, or two VMs could share a GID.
    let gid_bits = crate::mem::vmid::usable_bits(reported, gcsr::GID_FIELD_BITS);
    if gid_bits < 2 {
        return Err("LVZ reports fewer than 2 GID bits (GSTAT.GIDBITS)");
    }
    let backend = LvzBackend::new(board, policy, gid_bits);
    log::info!(
        "LoongArch VMs: LVZ guest mode, {}-bit GIDs (CPU: {reported}), FP {} ({policy:?})",
        backend.vmids.bits(),
        backend.fp_name(),
    );
    Ok(backend)
}

/// Restores the guest timer of a vCPU that was not loaded: TVAL from its
/// deadline, TI raised if the deadline passed (a periodic timer reloads;
/// a one-shot one stops).
fn restore_timer(ctx: &mut VcpuState, now: u64) {
    let mut tcfg = ctx.gcsr.get(g::TCFG);
    if tcfg & TCFG_EN == 0 {
        return;
    }
    let at = ctx.timer_at.unwrap_or(now);
    let tval = if now < at {
        at - now
    } else {
        let e = ctx.gcsr.get(g::ESTAT);
        ctx.gcsr.set(g::ESTAT, e | IS_TI);
        if tcfg & TCFG_PERIODIC != 0 {
            let period = (tcfg & TCFG_INIT).max(MIN_PERIOD);
            period - (now - at) % period
        } else {
            tcfg &= !TCFG_EN;
            ctx.gcsr.set(g::TCFG, tcfg);
            0
        }
    };
    ctx.gcsr.set(g::TVAL, tval);
}

impl Mode for Lvz {
    type Vcpu = VcpuState;
    /// When the guest timer fires (on the stable counter), if it counts
    /// and its line can wake the vCPU.
    type Poll = Option<u64>;

    fn init_cpu() {
        super::vm::hwtlb::init_cpu();
        // SAFETY: the STLB page size only decides which root entries go to
        // the STLB; kestrel's own translations are DMWs, and the root TLB
        // holds only second-stage entries (2 MiB: `exits::S2_PS`).
        unsafe { asm!("csrwr {0}, 0x1e", inout(reg) exits::S2_PS => _, options(nostack)) };
        // SAFETY: no guest runs on this CPU yet. GCFG 0: no optional traps
        // (the guest keeps its timer, exceptions and PLVs); GINTC 0: no
        // injected or passed-through lines; TLB instructions act on root
        // entries (GID 0) until a fill sets the target GID.
        unsafe {
            gcsr::write_gcfg(0);
            gcsr::write_gstat(0);
            gcsr::write_gintc(0);
            gcsr::xchg_gtlbc(0, gcsr::GTLBC_USETGID | gcsr::GTLBC_TOTI);
        }
        // With GSTAT clear: the entries that tell a guest's exit from
        // kestrel's own exception (`switch`).
        switch::install_entries();
        flush_all_gids();
    }

    /// Each vCPU has a GID of its own from the VMID allocator, as KVM gives
    /// each vCPU a VPID: its guest TLB entries and the second-stage entries
    /// it fills are tagged with it, so a switch between vCPUs on a pCPU
    /// flushes nothing.
    fn vmid<'a>(_vm: &'a Vm<LvzBackend>, ctx: &'a VcpuState) -> &'a VmVmid {
        &ctx.vmid
    }

    /// Steal time (the time since a put while runnable, in nanoseconds,
    /// and the record's `preempted` byte cleared), the GID and the counter
    /// offset, the guest TLB entries that may be stale here, the guest
    /// timer and CSRs.
    fn load(
        cpu: usize,
        vm: &Vm<LvzBackend>,
        vcpu: &Vcpu<LvzBackend>,
        ctx: &mut VcpuState,
        vmid: u16,
        rollover: bool,
        now: u64,
    ) {
        if rollover {
            flush_all_gids();
        }
        let stolen = ctx
            .preempted_at
            .take()
            .map(|at| steal::ticks_to_ns(now.saturating_sub(at), csr::counter_hz()));
        ctx.steal.load(&vm.arch, stolen);
        ctx.gid = vmid;
        ctx.key = vcpu.key;
        // SAFETY: no guest runs here now; the GID and the counter offset
        // take effect at the entry.
        unsafe {
            gcsr::write_gcntc(ctx.counter_offset);
            gcsr::xchg_gstat(
                u64::from(ctx.gid) << gcsr::GSTAT_GID_SHIFT,
                gcsr::GID_MASK << gcsr::GSTAT_GID_SHIFT,
            );
        }
        // Its entries on this pCPU are stale if it ran on another one since
        // it was last here (the guest may have changed its page tables and
        // flushed only there), was reset (a new epoch) or has another GID.
        let here = (cpu, ctx.epoch, ctx.gid);
        if ctx.tlb_on != Some(here) {
            flush_guest_tlb(ctx.gid);
            ctx.tlb_on = Some(here);
        }
        // Another vCPU ran here since, or this one moved: an LL/SC pair it
        // had open must fail.
        let me = (vcpu.key, ctx.epoch, ctx.gid);
        let moved = {
            let mut last = PCPU[cpu].last.lock();
            let moved = *last != Some(me);
            *last = Some(me);
            moved
        };
        restore_timer(ctx, now);
        gcsr::restore(&ctx.gcsr.regs);
        if moved {
            // An LL/SC pair cut by the move must fail (LLBCTL.WCLLB).
            gcsr_xchg!(g::LLBCTL, 2, 2);
        }
    }

    /// PV IPIs (SWI), the IOCSR IPI line and the HWI lines of the
    /// interrupt controllers (EIOINTC, fed by the PCH-PIC) into the guest's
    /// ESTAT. The guest gets the whole FP unit (its own EUEN, a guest CSR,
    /// gates it further).
    #[inline(always)]
    fn prepare_entry(irqs: &VcpuIrqs<'_>, _ctx: &mut VcpuState) -> u64 {
        let swi = irqs.take_swi();
        let ipi = if irqs.ipi_line() { IS_IPI } else { 0 };
        let hwi = u64::from(irqs.hwi()) << 2;
        // Only the bits kestrel owns, and only when they change: the guest
        // timer sets TI meanwhile (the masked exchange leaves it alone).
        let (set, mask) = (swi | ipi | hwi, swi | IS_IPI | IS_HWI);
        if gcsr_read!(g::ESTAT) & mask != set {
            gcsr_xchg!(g::ESTAT, set, mask);
        }
        7
    }

    /// The SWI bits alone (a PV IPI the call sent its own vCPU); the IPI
    /// and HWI lines are left as the last entry put them.
    fn prepare_after_call(irqs: &VcpuIrqs<'_>, _ctx: &mut VcpuState) {
        let swi = irqs.take_swi();
        if swi != 0 {
            gcsr_xchg!(g::ESTAT, swi, swi);
        }
    }

    fn idle_over(st: &VmState, index: usize, ctx: &mut VcpuState) -> bool {
        if ctx.idle {
            if !Self::wake_pending(st, index, ctx) {
                return false;
            }
            ctx.idle = false;
        }
        true
    }

    /// The hardware's: it raises TI itself while the guest runs.
    fn guest_timer(_ctx: &VcpuState) -> Option<u64> {
        None
    }

    unsafe fn enter(env: &mut ExitCtx<'_, LvzBackend>, ctx: &mut VcpuState) -> (RunExit, u64) {
        // SAFETY: forwarded to the caller (`load` put this vCPU's guest
        // CSRs and GID in place and dropped stale guest TLB entries; the
        // second-stage entries of its GID map only its RAM).
        unsafe { switch::enter(&mut ctx.frame) };
        let exited = csr::rdtime();
        (exits::handle(env, ctx), exited)
    }

    /// The guest CSRs saved, the guest timer as a deadline on the stable
    /// counter, and a vCPU put while runnable (not in `idle`) marked
    /// preempted: from now for its steal time, in its record's `preempted`
    /// byte for the guest (KVM_FEATURE_PREEMPT).
    fn put(st: &VmState, ctx: &mut VcpuState) -> Option<u64> {
        // The guest timer runs on until it is read: `save` reads TCFG and
        // TVAL before ESTAT, so a timer that fires in between shows as
        // fired with its TI in the ESTAT saved.
        gcsr::save(&mut ctx.gcsr.regs);
        let now = csr::rdtime();
        let tcfg = ctx.gcsr.get(g::TCFG);
        ctx.timer_at = match gtimer::state(tcfg, ctx.gcsr.get(g::TVAL)) {
            GuestTimer::Off => None,
            GuestTimer::Counting(ticks) => {
                ctx.gcsr.set(g::TVAL, ticks);
                Some(now.saturating_add(ticks))
            }
            GuestTimer::Fired => {
                // Its TI was raised when it fired (and maybe taken since):
                // stopped, so that `load` does not start it again.
                ctx.gcsr.set(g::TCFG, tcfg & !TCFG_EN);
                ctx.gcsr.set(g::TVAL, 0);
                None
            }
        };
        ctx.preempted_at = (!ctx.idle).then_some(now);
        ctx.steal.put(st, !ctx.idle);
        let lie = ctx.gcsr.get(g::ECFG) & IS_TI != 0;
        ctx.timer_at.filter(|_| lie)
    }

    /// In its ESTAT (the vCPU is loaded: its CSRs are in the hardware),
    /// or a line kestrel has not written there yet.
    fn wake_pending(st: &VmState, index: usize, _ctx: &VcpuState) -> bool {
        let irqs = st.irqs(index);
        let estat = gcsr_read!(g::ESTAT)
            | irqs.swi()
            | if irqs.ipi_line() { IS_IPI } else { 0 }
            | u64::from(irqs.hwi()) << 2;
        estat & gcsr_read!(g::ECFG) & 0x1fff != 0
    }

    /// Its timer's deadline is watched here and TI raised when it passes
    /// (the LVZ emulator stops the guest timer outside guest mode; the
    /// hardware's raises TI itself then).
    fn poll_begin(_ctx: &VcpuState) -> Option<u64> {
        let lie_ti = gcsr_read!(g::ECFG) & IS_TI != 0;
        match gtimer::state(gcsr_read!(g::TCFG), gcsr_read!(g::TVAL)) {
            GuestTimer::Counting(ticks) if lie_ti => Some(csr::rdtime().saturating_add(ticks)),
            _ => None,
        }
    }

    #[inline]
    fn poll_pending(
        st: &VmState,
        index: usize,
        ctx: &mut VcpuState,
        timer_at: &Option<u64>,
    ) -> bool {
        timer_at.is_some_and(|at| csr::rdtime() >= at) || Self::wake_pending(st, index, ctx)
    }

    fn poll_woke(timer_at: &Option<u64>) {
        if timer_at.is_some_and(|at| csr::rdtime() >= at) {
            gcsr_xchg!(g::ESTAT, IS_TI, IS_TI);
        }
    }

    fn start_idle(ctx: &mut VcpuState) {
        ctx.idle = true;
    }

    /// Steal time (KVM's NOTIFY) is this mode's: it registers the vCPU's
    /// record (`guest::loongarch::steal`).
    fn hypercall(
        st: &VmState,
        ctx: &mut VcpuState,
        code: u32,
        function: u64,
        args: &[u64; 5],
    ) -> Option<u64> {
        use kestrel_abi::loongarch as la;
        (code == la::SERVICE_KVM && function == la::FN_NOTIFY)
            .then(|| ctx.steal.notify(st, args[0], args[1]) as u64)
    }
}
