//! The arm64 VM backend: guests at EL1 under kestrel at EL2 (non-VHE), with
//! stage-2 translation, a virtual GIC (list registers + the portable model in
//! `crate::dev::vgic`), the EL1 virtual timer, PSCI, lazy FP, VMIDs from the
//! allocator and kestrel's PV IPI. It implements [`crate::vm::Backend`];
//! scheduling, blocking and VM lifetime are the portable run loop's
//! (`crate::vm`). Design notes: docs/arm64-vm.md.

pub mod aarch32;
pub mod build;
pub mod devices;
pub mod entry;
pub mod exits;
pub mod fp;
pub mod mem;
pub mod passthrough;
pub mod regs;
pub mod setup;
pub mod stage2;
pub mod switch;
pub mod vcpu;
pub mod vgic_hw;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::base::{clock, conout};
use crate::dev::vdev::bus::GuestMemory;
use crate::dev::vdev::pl011::Pl011 as VPl011;
use crate::dev::vdev::uart::Uart;
use crate::dev::vgic::mmio::SharedVgic;
use crate::dev::vgic::GicVersion;
use crate::guest::arm64::esr::ec as class;
use crate::guest::arm64::idregs::IdConfig;
use crate::mem::vmid::VmidAllocator;
use crate::vcpu::fpu::{self, pcpu::PcpuFp, FpPolicy};
use crate::vcpu::stats::{self, Counter, HOST};
use crate::vcpu::steal::{self, PvTimeRegion};
use crate::vm::exitctx::ExitCtx;
use crate::vm::{Backend, Hypervisor, RunExit, Vcpu, Vm, VmEnd};
use crate::vmm;
use crate::vmm::vmconfig::VmSpec;
use crate::MAX_CPUS;
use alloc::sync::Arc;

use super::el2::{CnthctlEl2, HcrEl2};
use super::gic::Gic;
use super::{exceptions, percpu, timer};
use entry::set_vtimer_phys;
use fp::Arm64FpHw;
use regs::{mrs, msr};
pub use setup::probe;
use stage2::Stage2;
pub use vcpu::{VcpuShared, VcpuState};
use vgic_hw::VgicHw;

/// The physical SGI that kicks a pCPU out of its guest or its idle wait.
pub const KICK_SGI: u32 = 1;
/// The longest a WFI is polled before the vCPU blocks (`crate::base::haltpoll`).
const HALT_POLL_US: u64 = 100;

/// The GIC maintenance interrupt (PPI).
pub const MAINTENANCE_PPI: u32 = 25;
/// The EL1 virtual timer (PPI), physical and virtual.
pub const VTIMER_PPI: u32 = 27;
/// The EL1 physical timer (PPI): emulated for guests (trapped registers,
/// `guest::arm64::ptimer`), backed by the hardware EL1 physical timer
/// while the vCPU is loaded and by the deadline checks when it is not.
pub const PTIMER_PPI: u32 = 30;
/// SPIs every VM's virtual GIC has (INTIDs 32-63; the UART is SPI 1 = 33).
const NR_SPIS: usize = 32;

/// A vCPU's deadlines (`crate::vm::Deadlines`) while it is not loaded: its
/// virtual timer, its emulated physical timer, a WFIT timeout.
const DL_VTIMER: usize = 0;
const DL_PTIMER: usize = 1;
const DL_WFXT: usize = 2;

/// Per-VM architectural state.
pub struct VmState {
    pub stage2: Stage2,
    pub ram_base: u64,
    pub ram_size: u64,
    /// Guest RAM: host frames, 2 MiB each, in IPA order, zeroed and
    /// mapped at their first touch (`mem::VmRam`).
    pub ram: mem::VmRam,
    /// What it was built from (a restart loads its images again).
    pub spec: VmSpec<'static>,
    /// Its device tree as built (a restart copies it in again).
    pub dtb: alloc::borrow::Cow<'static, [u8]>,
    /// The virtual GIC, also behind the distributor and redistributor
    /// frames on the VM's bus (`devices`).
    pub vgic: SharedVgic,
    /// The vGIC's per-vCPU "fill needed" flags, read at each entry without
    /// its lock (kept across restarts: the new model takes them).
    pub fill_hints: Arc<crate::dev::vgic::FillHints>,
    /// The PL011 on the VM's bus, for console input.
    pub uart: Arc<Uart<VPl011>>,
    pub cntvoff: u64,
    pub ids: IdConfig,
    /// The VM's SVE vector length in quadwords, the same for every vCPU
    /// (`None`: SVE hidden).
    pub sve_vq: Option<u8>,
    pub shared: Vec<VcpuShared>,
    /// Host SPIs forwarded to this VM (device passthrough).
    pub passthrough: passthrough::VmPassthrough,
    /// A restart's image reload still under way (`reload_step`), and
    /// whether there is one (read at each run of vCPU 0).
    pub reload: crate::base::lock::Mutex<Option<crate::mem::imageload::ImageLoad>>,
    pub reloading: AtomicBool,
}

/// Per-pCPU state of the backend.
struct Pcpu {
    fp: PcpuFp<Arm64FpHw>,
    slice_expired: AtomicBool,
    /// Whether the physical virtual-timer PPI is enabled on this pCPU.
    vtimer_enabled: AtomicBool,
    /// A vCPU is loaded here.
    loaded: AtomicBool,
    /// The physical virtual-timer PPI was left active for the loaded vCPU.
    vtimer_forwarded: AtomicBool,
    /// The VM whose vCPU was loaded here last (its address; 0: none), for
    /// the `vmid-flush-switch` comparison policy.
    last_vm: AtomicUsize,
}

impl Pcpu {
    const fn new() -> Pcpu {
        Pcpu {
            fp: PcpuFp::new(),
            slice_expired: AtomicBool::new(false),
            vtimer_enabled: AtomicBool::new(true),
            loaded: AtomicBool::new(false),
            vtimer_forwarded: AtomicBool::new(false),
            last_vm: AtomicUsize::new(0),
        }
    }
}

static PCPU: [Pcpu; MAX_CPUS] = [const { Pcpu::new() }; MAX_CPUS];

/// The arm64 backend.
pub struct Arm64Backend {
    gic: Gic,
    hw: VgicHw,
    version: GicVersion,
    pub vmids: VmidAllocator,
    policy: FpPolicy,
    midr: u64,
    hw_ids: Vec<u64>,
    /// MDCR_EL2 for guests ([`el2::mdcr_guest`]).
    mdcr: u64,
    /// Breakpoints and watchpoints the hardware has (ID_AA64DFR0_EL1
    /// BRPs + 1, WRPs + 1): what guests get.
    dbg_points: (usize, usize),
    /// The CPUs implement WFIT/WFET (ID_AA64ISAR2_EL1.WFxT = 2), which
    /// guests see.
    pub wfxt: bool,
    /// The CPUs implement FEAT_RAS (ID_AA64PFR0_EL1.RAS != 0): VDISR_EL2
    /// holds the guest's DISR_EL1 and must be switched.
    ras: bool,
    /// The SVE vector lengths the CPU supports, bit `vq - 1` for `vq`
    /// quadwords (`fp::probe_sve_lengths`, on the boot CPU: kestrel
    /// assumes every CPU has the same); 0 = no SVE.
    sve_lengths: u16,
}

/// Writes `vcpu`'s whole stolen-time record (DEN0057A: revision 0,
/// attributes 0, the stolen nanoseconds), at its `PV_TIME_ST` call.
fn write_steal_record(vm: &Vm<Arm64Backend>, vcpu: &Vcpu<Arm64Backend>) {
    let (Some(region), Some(ticks)) = (vm.pv_time, vcpu.steal.stolen()) else {
        return;
    };
    let Some(gpa) = region.record(vcpu.index) else {
        return;
    };
    let ns = steal::ticks_to_ns(ticks, clock::counter_hz());
    let _ = vcpu.steal.take_update();
    if vm.arch.write(gpa, &steal::record_bytes(ns)).is_err() {
        vcpu.steal.write_failed();
    }
}

/// At a load: the stolen time of `vcpu` into its record, if its guest asked
/// for one and it changed since the last write (one 64-bit store).
fn update_steal(vm: &Vm<Arm64Backend>, vcpu: &Vcpu<Arm64Backend>) {
    let (Some(region), Some(ticks)) = (vm.pv_time, vcpu.steal.take_update()) else {
        return;
    };
    let Some(gpa) = region.record(vcpu.index) else {
        return;
    };
    let ns = steal::ticks_to_ns(ticks, clock::counter_hz());
    if vm
        .arch
        .store_u64(gpa + PvTimeRegion::STOLEN_AT, ns)
        .is_err()
    {
        vcpu.steal.write_failed();
    }
}

/// A physical interrupt pending at a guest exit (or while a vCPU is loaded
/// and not entered: `reload_step`): acknowledged, what it means to the
/// backend done ([`host_irq`], passthrough), ended; at kestrel's tick the
/// deadlines and the console are looked at; other pCPUs' FP requests are
/// answered. Returns whether it was kestrel's tick (which may end the
/// slice: the run loop's business). Out of line, so that the exits handled
/// in place do not carry its registers.
#[inline(never)]
fn take_irq(hv: &Hypervisor<Arm64Backend>, cpu: usize) -> bool {
    let mut was_tick = false;
    if let Some(irq) = exceptions::ack() {
        let (intid, tick) = (irq.intid, irq.tick);
        was_tick = tick;
        // A forwarded device SPI is only priority-dropped: the guest's
        // deactivation ends it (list register HW bit).
        let forwarded = host_irq(intid, tick) || passthrough::on_irq(intid);
        irq.end(forwarded);
        passthrough::drain(hv, cpu);
        if tick {
            hv.check_timers(cpu, timer::counter());
            vmm::poll_console(hv, cpu);
        } else if intid == timer::PPI {
            // The console's timed drain (`conout::wake_at`), on the boot
            // CPU: the UART has room again.
            vmm::terminal::drain();
        }
    }
    // Another pCPU's call for FP registers live here comes with a kick
    // (`fpu::pcpu::load_waiting`): it is answered after an interrupt, not
    // at every exit.
    PCPU[cpu].fp.service();
    was_tick
}

/// What a physical interrupt taken at a guest exit means to the backend
/// (before it ends): the tick ends the time slice, the emulated physical
/// timer's backing is masked, the loaded vCPU's virtual timer is forwarded.
/// Returns whether it was forwarded (then it is only priority-dropped).
fn host_irq(intid: u32, tick: bool) -> bool {
    let cpu = percpu::index();
    let Some(p) = PCPU.get(cpu) else {
        return false;
    };
    if intid == timer::PPI {
        if tick {
            p.slice_expired.store(true, Ordering::Release);
        }
    } else if intid == PTIMER_PPI {
        // The loaded vCPU's emulated physical timer reached its deadline:
        // mask the backing timer (ENABLE | IMASK) so it does not fire
        // again; the entry that follows raises the virtual PPI 30 from the
        // model.
        msr!("cntp_ctl_el0", 0b11);
    } else if intid == VTIMER_PPI && p.loaded.load(Ordering::Acquire) {
        // The loaded vCPU's timer fired: it stays active (no re-firing)
        // until the guest deactivates the virtual one, which the list
        // register's HW bit passes on to this physical interrupt.
        p.vtimer_forwarded.store(true, Ordering::Release);
        return true;
    }
    false
}

impl Arm64Backend {
    fn flush_tlb(&self) {
        stage2::flush_all_vmids();
    }

    /// Services other pCPUs' requests to write back FP state live here
    /// (in idle and while clearing a VM's RAM; after an interrupt exit,
    /// `take_irq` does).
    #[inline]
    fn service_fp(&self, cpu: usize) {
        PCPU[cpu].fp.service();
    }
}

/// Whether the run loop can be skipped after an exit through vector
/// `kind` (of class `ec`) that its handler answered with `Continue`: from
/// AArch64, a hypercall, a trapped system register or an MMIO access that
/// left the VM's side quiet ([`Vm::quiet_after_sync_exit`]: the VM not
/// stopping, as a handler may end it and still go on; after MMIO, no
/// device work waiting); an interrupt that left the run loop nothing to
/// do (`quiet_irq`: not kestrel's tick, and
/// [`Hypervisor::nothing_between_entries`]), as `take_irq` did what it
/// meant (a kick's interrupt for this vCPU is injected by the entry, an
/// FP request answered). Only with no physical interrupt pending at EL2
/// (the run loop's business).
#[inline(always)]
fn reenters(kind: u64, ec: u8, quiet_irq: bool, vm: &Vm<Arm64Backend>) -> bool {
    let quiet = match kind {
        8 => match ec as u32 {
            class::HVC64 | class::SMC64 | class::SYS64 => vm.quiet_after_sync_exit(false),
            class::DABT_LOWER => vm.quiet_after_sync_exit(true),
            _ => false,
        },
        9 | 13 => quiet_irq,
        _ => false,
    };
    // ISR_EL1.I at EL2: a physical IRQ (tick, kick, timer) is pending.
    quiet && mrs!("isr_el1") & (1 << 7) == 0
}

impl Backend for Arm64Backend {
    type VmState = VmState;
    type VcpuState = VcpuState;

    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        if !vm.arch.passthrough.routes.is_empty() {
            passthrough::arm(vm, self.hw_ids.first().copied().unwrap_or(0));
        }
        vcpu.deadlines.clear();
        // Running again ends any WFIT wait.
        ctx.wfxt_at = u64::MAX;
        if let Some((entry, x0)) = sh.boot.lock().take() {
            ctx.reset(entry, x0);
        }
        ctx.started = true;
        update_steal(vm, vcpu);
        ctx.halt.loaded(timer::counter(), vcpu.steal.delay());
        // VMID: from the allocator on every load.
        let before = self.vmids.counters();
        let l = self.vmids.vcpu_load(cpu, &vm.vmid, &|| self.flush_tlb());
        let after = self.vmids.counters();
        vm.stats.record_vmid(&l);
        // Rollovers and their flushes are the host's, not the loading VM's.
        HOST.add(Counter::VmidRollovers, after.rollovers - before.rollovers);
        HOST.add(Counter::TlbFlushes, after.flushes - before.flushes);
        msr!("vtcr_el2", vm.arch.stage2.vtcr());
        msr!("vttbr_el2", vm.arch.stage2.vttbr(l.vmid));
        if cfg!(feature = "vmid-flush-switch") {
            // The naive policy (a benchmark baseline): another VM than the
            // last one on this pCPU starts with an empty TLB.
            let me = vm as *const Vm<Self> as usize;
            if PCPU[cpu].last_vm.swap(me, Ordering::Relaxed) != me {
                // SAFETY: TLB maintenance only: drops this pCPU's EL1&0
                // entries of every VMID, which the walks refill.
                unsafe {
                    core::arch::asm!("isb", "tlbi alle1", "dsb nsh", "isb", options(nostack))
                };
                HOST.inc(Counter::TlbFlushes);
            }
        }
        if l.flush_local {
            // Only needed where the rollover flush is not broadcast; cheap
            // insurance here: this VMID's stale entries go.
            // SAFETY: TLB maintenance of the current VMID only.
            unsafe {
                core::arch::asm!("isb", "tlbi vmalls12e1", "dsb nsh", "isb", options(nostack))
            };
        }
        let hcr = if ctx.aarch32 {
            HcrEl2::GUEST32
        } else {
            HcrEl2::GUEST
        };
        msr!("hcr_el2", hcr.bits());
        msr!("vpidr_el2", self.midr);
        msr!("vmpidr_el2", ctx.vmpidr);
        msr!("cntvoff_el2", vm.arch.cntvoff);
        let hpmn = mrs!("mdcr_el2") & 0x1f;
        msr!("mdcr_el2", self.mdcr | hpmn);
        msr!("cnthctl_el2", CnthctlEl2::GUEST.bits());
        ctx.el1.restore(self.ras);
        if ctx.debug.dirty {
            regs::load_debug(&ctx.debug);
        }
        self.hw.load(&ctx.gic);
        // The load cleared the list registers: the next entry fills them
        // (taking back what an unsynced fill left handed out).
        ctx.lrs_used = 0;
        ctx.lrs_live = false;
        ctx.vtimer_level = None;
        ctx.ptimer_level = None;
        PCPU[cpu].loaded.store(true, Ordering::Release);
        // Lazy FP: wait for the pCPU holding our registers to write them back.
        if !fpu::pcpu::load_waiting(
            |c| PCPU.get(c).map(|p| &p.fp),
            cpu,
            &ctx.fp,
            |p| self.kick(p),
            || vm.has_ended(),
        ) {
            // The run loop drops this vCPU at once; the other pCPU may have
            // left its run loop already.
            return;
        }
        if ctx.aarch32 {
            // After the FP engine's load: FPEXC follows the unit.
            aarch32::load(ctx);
        }
        // SAFETY: barrier only: the EL2 controls above take effect.
        unsafe { core::arch::asm!("isb", options(nostack, preserves_flags)) };
    }

    // Out of line: the exits handled in place loop inside it, so its
    // prologue is paid once per call from the run loop, and the run loop's
    // registers stay out of the exit path (measured: docs/performance.md).
    #[inline(never)]
    fn run(&self, env: &mut ExitCtx<'_, Self>, ctx: &mut VcpuState) -> RunExit {
        let (hv, cpu, vm, vcpu) = (env.hv, env.cpu, env.vm, env.vcpu);
        if vcpu.index == 0 && vm.arch.reloading.load(Ordering::Acquire) {
            let t = timer::counter();
            let exit = self.reload_step(vm);
            // No entry takes the tick (or a kick) for it: a pending
            // interrupt is taken here, as at an exit (IRQs stay masked at
            // EL2; ISR_EL1.I is the physical IRQ line here).
            if mrs!("isr_el1") & (1 << 7) != 0 {
                let _ = take_irq(hv, cpu);
            }
            vm.stats.note_step(timer::counter().saturating_sub(t));
            return exit;
        }
        // Whether the last exit left the timers and the physical timer's
        // backing as they were (an HVC or an MMIO access: neither touches
        // them), so a re-entry needs only the model's look.
        let mut timers_kept = false;
        loop {
            if cpu == 0 {
                // The boot CPU owns the console's timed drain.
                timer::arm_quiet(conout::wake_at());
            }
            // After an exit handled in place, the timer levels are those
            // the exit read (a level that rose since is a physical
            // interrupt, pending now or at the entry) and the backing is
            // armed as before: the list registers stand unless the model
            // changed for this vCPU.
            if !(timers_kept && ctx.lrs_live && !vm.arch.fill_hints.stale(vcpu.index)) {
                self.prepare_entry(cpu, vm, vcpu, ctx);
            }
            let kind = switch::enter(&mut ctx.regs);
            let exited = timer::counter();
            let esr = mrs!("esr_el2");
            let ec = ((esr >> 26) & 0x3f) as u8;
            // An HVC reads no interrupt state: with none in flight there is
            // nothing to bring back (`nothing_to_sync`).
            if !(kind == 8 && u32::from(ec) == class::HVC64 && self.nothing_to_sync(cpu, ctx)) {
                self.sync_after_exit(vm, vcpu, ctx, exited);
            }
            let mut quiet_irq = false;
            let exit = match kind {
                // Lower EL in AArch64 (8-11) or AArch32 (12-15, an EL0 the
                // guest kernel entered although AArch32 is hidden).
                8 | 12 => exits::sync(env, ctx, esr),
                9 | 10 | 13 | 14 => {
                    vcpu.stats.exit_owned(crate::vcpu::stats::ExitReason::Irq);
                    let tick = take_irq(hv, cpu);
                    quiet_irq = !tick && hv.nothing_between_entries(vm);
                    RunExit::Continue
                }
                _ => RunExit::VmEnd(VmEnd::Fatal(format!(
                    "SError from the guest (ESR_EL2 {:#x}) on vCPU {}",
                    esr, vcpu.index
                ))),
            };
            let what = match kind {
                8 | 12 => ec,
                _ => stats::what::IRQ,
            };
            // A wrapping difference: one that went backwards is no worst
            // (`Stats::note_exit`).
            vm.stats
                .note_exit(timer::counter().wrapping_sub(exited), what);
            // An exit handled in place goes straight back in, without the
            // run loop's looks: whatever they look for (a slice's end, a
            // kick, a stop, another timer) arrives as a physical interrupt,
            // which ends the next entry at once if it is pending now, as it
            // would end a guest that takes no exits; the console's requests
            // are seen at the next tick, as for such a guest. (`exit` is
            // known to be `Continue` there: nothing to drop, and `blocking`,
            // read only by `put`, is set on the way out.)
            if let RunExit::Continue = exit {
                if reenters(kind, ec, quiet_irq, vm) {
                    timers_kept =
                        kind == 8 && matches!(ec as u32, class::HVC64 | class::DABT_LOWER);
                    continue;
                }
            }
            ctx.blocking = matches!(exit, RunExit::Block);
            return exit;
        }
    }

    fn put(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        ctx.el1.save(self.ras);
        if ctx.debug.dirty {
            regs::put_debug();
        }
        self.hw.put(&mut ctx.gic);
        ctx.lrs_used = 0;
        ctx.lrs_live = false;
        if ctx.aarch32 {
            // Before the FP engine's put, which may hand the unit on.
            aarch32::put(ctx);
        }
        {
            let mut e = PCPU[cpu].fp.lock();
            if let Some(engine) = e.as_mut() {
                engine.vcpu_put();
            }
        }
        self.vmids.vcpu_put(cpu);
        msr!("hcr_el2", HcrEl2::BOOT.bits());
        // The virtual timer of a vCPU that is not loaded is watched by
        // kestrel's timer: this pCPU's fires no later than the deadline
        // (whatever runs here meanwhile), and the handler wakes the vCPU
        // (`Hypervisor::check_timers`). Left to the periodic tick, a vCPU blocked in WFI
        // beside a busy one waited up to a whole tick for a 1 us timer.
        let ctl = ctx.el1.cntv_ctl;
        let deadline = if ctl & 0b11 == 0b01 {
            ctx.el1.cntv_cval.saturating_add(vm.arch.cntvoff)
        } else {
            u64::MAX
        };
        // The emulated physical timer's backing stops; its deadline (in
        // physical counter ticks, no offset) and a WFIT timeout are watched
        // the same way.
        msr!("cntp_ctl_el0", 0);
        if !vm.has_ended() {
            let ptimer_at = ctx.ptimer.deadline().unwrap_or(u64::MAX);
            vcpu.deadlines.set(DL_VTIMER, deadline);
            vcpu.deadlines.set(DL_PTIMER, ptimer_at);
            vcpu.deadlines.set(DL_WFXT, ctx.wfxt_at);
            // Only a vCPU that blocks needs waking; a preempted one finds
            // its timers when it runs next.
            let first = deadline.min(ptimer_at).min(ctx.wfxt_at);
            if ctx.blocking && first != u64::MAX {
                timer::arm_before(first);
            }
        }
        PCPU[cpu].loaded.store(false, Ordering::Release);
        if vm.has_ended() {
            passthrough::disarm(vm);
        }
        if PCPU[cpu].vtimer_forwarded.swap(false, Ordering::AcqRel) {
            self.gic.clear_active_ppi(VTIMER_PPI);
        }
        set_vtimer_phys(&self.gic, cpu, true);
    }

    fn can_restart(&self) -> bool {
        true
    }

    fn restart_vm(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [crate::base::lock::MutexGuard<'_, VcpuState>],
    ) -> Result<(), String> {
        self.restart(vm, vcpus)
    }

    fn kick(&self, cpu: usize) {
        if let Some(&mpidr) = self.hw_ids.get(cpu) {
            self.gic.send_sgi(cpu, mpidr, KICK_SGI);
        }
    }

    fn idle(&self, hv: &Hypervisor<Self>, cpu: usize) {
        self.service_fp(cpu);
        hv.check_timers(cpu, timer::counter());
        vmm::poll_console(hv, cpu);
        let deadline = hv.next_deadline();
        if deadline != u64::MAX {
            timer::arm_before(deadline);
        }
        if cpu == 0 {
            timer::arm_quiet(conout::wake_at());
        }
        // SAFETY: wait for an interrupt, then let it be taken (the IRQ
        // handler acknowledges the tick or the kick), then mask again.
        unsafe {
            core::arch::asm!(
                "dsb sy",
                "wfi",
                "msr daifclr, #2",
                "isb",
                "msr daifset, #2",
                options(nomem, nostack)
            )
        };
        passthrough::drain(hv, cpu);
        self.service_fp(cpu);
        hv.check_timers(cpu, timer::counter());
    }

    fn slice_expired(&self, cpu: usize) -> bool {
        PCPU.get(cpu)
            .is_some_and(|p| p.slice_expired.load(Ordering::Acquire))
    }

    fn slice_start(&self, cpu: usize) {
        if let Some(p) = PCPU.get(cpu) {
            p.slice_expired.store(false, Ordering::Release);
        }
    }

    fn now(&self) -> u64 {
        timer::counter()
    }

    /// The virtual timer (PPI 27) and the emulated physical timer (PPI 30)
    /// make their interrupt pending and wake the vCPU if it can take it (a
    /// guest that disabled the PPI stays blocked, without re-checks); a
    /// WFIT timeout wakes it unconditionally.
    fn deadline_passed(&self, vm: &Vm<Self>, vcpu: usize, which: usize) -> bool {
        let ppi = match which {
            DL_VTIMER => VTIMER_PPI,
            DL_PTIMER => PTIMER_PPI,
            _ => return true,
        };
        vm.arch
            .vgic
            .lock()
            .set_level(vcpu, ppi, true)
            .contains(vcpu)
    }
}
