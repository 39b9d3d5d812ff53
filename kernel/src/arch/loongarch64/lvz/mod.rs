//! The LoongArch LVZ backend: guests run in the CPU's guest mode at their
//! own PLV0 with their own CSRs, TLB, timer and interrupt lines, so kestrel
//! sees only what LVZ sends to the root: privileged resources it must
//! emulate (GSPR: `cpucfg`, IOCSR, `idle`, `cacop`, CSRs the guest has no
//! copy of), hypercalls (`hvcl`), guest-CSR traps, second-stage misses and
//! faults, FP traps and physical interrupts. It implements
//! [`crate::vm::Backend`] beside the trap-and-emulate backend (`super::vm`),
//! sharing its VM state (RAM, devices, IOCSR IPI blocks), image loading,
//! world switch and FP hardware; `crate::runtime::backend` picks one at boot.
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

pub mod build;
pub mod exits;
pub mod gcsr;
pub mod switch;
pub mod vcpu;

use alloc::vec::Vec;
use core::arch::asm;
use core::sync::atomic::Ordering;

use crate::base::haltpoll::PollEnd;
use crate::host::board::BoardInfo;
use crate::mem::vmid::VmidAllocator;
use crate::vcpu::fpu::pcpu as fpcpu;
use crate::vcpu::fpu::FpPolicy;
use crate::vcpu::stats::{Counter, HOST};
use crate::vm::exitctx::ExitCtx;
use crate::vm::{Backend, Hypervisor, RunExit, Vcpu, Vm};
use crate::vmm;
use crate::MAX_CPUS;

use super::vm::fpu::{self as lafpu, LaFpHw};
use super::vm::{ticks, VmState, PCPU};
use super::{csr, iocsr, platform};
use crate::guest::loongarch::gtimer::{self, GuestTimer};
use gcsr::{g, gcsr_read, gcsr_xchg};
pub use vcpu::VcpuState;
use vcpu::{IS_HWI, IS_IPI, IS_TI, TCFG_EN, TCFG_INIT, TCFG_PERIODIC};

/// IPI vector kestrel kicks pCPUs with (vector 0 is the boot mailbox's).
const KICK_VECTOR: u32 = 1;
/// The longest an `idle` is polled before the vCPU blocks.
const HALT_POLL_US: u64 = 100;
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
    // entries of one GID; kestrel keeps nothing there. (The emulator in
    // tools/qemu-lvz drops that GID's second-stage entries as well and
    // flushes its whole translation cache, which only costs refills.)
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

/// Arms this CPU's one-shot timer for kestrel's next tick or the earliest
/// deadline of a vCPU that is not loaded.
fn arm_timer(hv: &Hypervisor<LvzBackend>, cpu: usize) {
    let now = csr::rdtime();
    let at = platform::next_tick(cpu).min(hv.deadline_bound(now));
    super::timer::oneshot_at(cpu, at, now);
}

/// The LVZ backend.
pub struct LvzBackend {
    pub vmids: VmidAllocator,
    policy: FpPolicy,
    hw_ids: Vec<u64>,
    /// FP width the CPU has: 1 FP64, 2 LSX, 3 LASX.
    fp_level: u8,
}

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
    let backend = LvzBackend {
        vmids: VmidAllocator::new(gid_bits, board.cpus.len().clamp(1, MAX_CPUS)),
        policy,
        hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
        fp_level: super::vm::fp_level(),
    };
    log::info!(
        "LoongArch VMs: LVZ guest mode, {}-bit GIDs (CPU: {reported}), FP {} ({policy:?})",
        backend.vmids.bits(),
        ["none", "FP64", "LSX", "LASX"][backend.fp_level as usize],
    );
    Ok(backend)
}

impl LvzBackend {
    fn fp_mask(&self) -> u64 {
        match self.fp_level {
            3 => 7,
            2 => 3,
            _ => 1,
        }
    }

    fn init_cpu_state(&self, hv: &Hypervisor<Self>, cpu: usize) {
        csr::irq_disable();
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
        flush_all_gids();
        PCPU[cpu]
            .fp
            .init(cpu, self.policy, LaFpHw::new(self.fp_level));
        *PCPU[cpu].last.lock() = None;
        platform::start_oneshot_tick(cpu);
        arm_timer(hv, cpu);
    }

    /// Whether an interrupt the guest enables is pending (the vCPU is
    /// loaded: its CSRs are in the hardware).
    fn wake_pending(&self, vm: &Vm<Self>, index: usize) -> bool {
        let sh = &vm.arch.shared[index];
        let estat = gcsr_read!(g::ESTAT)
            | u64::from(sh.swi.load(Ordering::Acquire) & 3)
            | if vm.arch.ipi[index].line() { IS_IPI } else { 0 }
            | u64::from(vm.arch.intc.hwi(index)) << 2;
        estat & gcsr_read!(g::ECFG) & 0x1fff != 0
    }

    /// An `idle` with nothing pending: poll for up to the halt-poll window
    /// while nobody else wants this pCPU. Its timer's deadline is watched
    /// here and TI raised when it passes (the LVZ emulator stops the guest
    /// timer outside guest mode; the hardware's raises TI itself then).
    pub fn halt_poll(&self, env: &ExitCtx<'_, Self>, ctx: &mut VcpuState) -> bool {
        let (vm, index) = (env.vm, env.index());
        let lie_ti = gcsr_read!(g::ECFG) & IS_TI != 0;
        let timer_at = match gtimer::state(gcsr_read!(g::TCFG), gcsr_read!(g::TVAL)) {
            GuestTimer::Counting(ticks) if lie_ti => Some(csr::rdtime().saturating_add(ticks)),
            _ => None,
        };
        let halt = ctx.halt;
        let end = halt.poll(
            csr::rdtime,
            || timer_at.is_some_and(|at| csr::rdtime() >= at) || self.wake_pending(vm, index),
            || csr::estat() & 0x1ffc != 0,
            || env.should_preempt(),
        );
        if end == PollEnd::Work && timer_at.is_some_and(|at| csr::rdtime() >= at) {
            gcsr_xchg!(g::ESTAT, IS_TI, IS_TI);
        }
        end == PollEnd::Work
    }

    /// Before an entry: PV IPIs (SWI), the IOCSR IPI line and the HWI
    /// lines of the interrupt controllers (EIOINTC, fed by the PCH-PIC)
    /// into the guest's ESTAT, and the FP unit as the engine decided.
    fn prepare_entry(&self, cpu: usize, vm: &Vm<Self>, index: usize) {
        let sh = &vm.arch.shared[index];
        let swi = u64::from(sh.swi.swap(0, Ordering::AcqRel) & 3);
        let ipi = if vm.arch.ipi[index].line() { IS_IPI } else { 0 };
        let hwi = u64::from(vm.arch.intc.hwi(index)) << 2;
        // Only the bits kestrel owns, and only when they change: the guest
        // timer sets TI meanwhile (the masked exchange leaves it alone).
        let (set, mask) = (swi | ipi | hwi, swi | IS_IPI | IS_HWI);
        if gcsr_read!(g::ESTAT) & mask != set {
            gcsr_xchg!(g::ESTAT, set, mask);
        }
        let owns = PCPU[cpu]
            .fp
            .lock()
            .as_ref()
            .is_some_and(|e| e.hw().enabled());
        lafpu::set_guest_euen(if owns { self.fp_mask() } else { 0 });
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

    /// Writes the steal-time record of a vCPU that registered one (KVM's
    /// `kvm_steal_time`: steal at 0, version at 8, bumped odd then even).
    pub(super) fn write_steal(vm: &Vm<Self>, ctx: &VcpuState) {
        let Some(gpa) = ctx.steal_gpa else {
            return;
        };
        let st = &vm.arch;
        let (Some(steal_h), Some(ver_h)) = (st.hpa(gpa), st.hpa(gpa + 8)) else {
            return;
        };
        // SAFETY: both words are 8-byte aligned words of this VM's RAM
        // (checked when the guest registered the record), reached through
        // kestrel's cached window; the guest reads them with its seqcount.
        unsafe {
            let ver = super::dmw::cached(ver_h) as *mut u32;
            let v = core::ptr::read_volatile(ver);
            core::ptr::write_volatile(ver, v.wrapping_add(1) | 1);
            core::ptr::write_volatile(super::dmw::cached(steal_h) as *mut u64, ctx.steal);
            core::ptr::write_volatile(ver, (v | 1).wrapping_add(1));
        }
    }
}

impl Backend for LvzBackend {
    type VmState = VmState;
    type VcpuState = VcpuState;

    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        vcpu.deadlines.clear();
        if let Some((entry, a0)) = sh.boot.lock().take() {
            ctx.reset(vcpu.index, entry, [a0, 0, 0]);
        }
        let now = csr::rdtime();
        if let Some(at) = ctx.blocked_at.take() {
            ctx.halt.blocked_for(now.saturating_sub(at));
        }
        if let Some(at) = ctx.preempted_at.take() {
            ctx.steal = ctx.steal.wrapping_add(now.saturating_sub(at));
            Self::write_steal(vm, ctx);
        }
        // Each vCPU has a GID of its own from the VMID allocator, as KVM
        // gives each vCPU a VPID: its guest TLB entries and the second-stage
        // entries it fills are tagged with it, so a switch between vCPUs on
        // a pCPU flushes nothing. TLB invalidation is CPU-local, so a
        // rollover is seen as `flush_local` on each CPU's next load.
        let before = self.vmids.counters().rollovers;
        let l = self.vmids.vcpu_load(cpu, &ctx.vmid, &|| {});
        let rolled = self.vmids.counters().rollovers - before;
        vm.stats.record_vmid(&l);
        // Rollovers and their flushes are the host's, not the loading VM's.
        HOST.add(Counter::VmidRollovers, rolled);
        if l.flush_local {
            HOST.inc(Counter::TlbFlushes);
            flush_all_gids();
        }
        ctx.gid = l.vmid;
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
        Self::restore_timer(ctx, now);
        gcsr::restore(&ctx.gcsr.regs);
        if moved {
            // An LL/SC pair cut by the move must fail (LLBCTL.WCLLB).
            gcsr_xchg!(g::LLBCTL, 2, 2);
        }
        let _ = fpcpu::load_waiting(
            |c| PCPU.get(c).map(|p| &p.fp),
            cpu,
            &ctx.fp,
            |p| self.kick(p),
            || vm.has_ended(),
        );
        sh.running_on.store(cpu, Ordering::SeqCst);
    }

    fn run(&self, env: &mut ExitCtx<'_, Self>, ctx: &mut VcpuState) -> RunExit {
        let (hv, cpu, vm) = (env.hv, env.cpu, env.vm);
        PCPU[cpu].fp.service();
        if env.index() == 0 && vm.arch.rebuild.load(Ordering::Acquire) != 0 {
            return self.rebuild_step(vm, ctx);
        }
        self.prepare_entry(cpu, vm, env.index());
        if ctx.idle {
            if !self.wake_pending(vm, env.index()) {
                // Woken for nothing (a stale wake-up): wait on.
                return RunExit::Block;
            }
            ctx.idle = false;
        }
        csr::irq_disable();
        arm_timer(hv, cpu);
        // SAFETY: interrupts are masked; `load` put this vCPU's guest CSRs
        // and GID in place and dropped stale guest TLB entries; the
        // second-stage entries of its GID map only its RAM; EUEN exposes the
        // FP unit only if this vCPU owns it.
        unsafe { switch::enter(&mut ctx.frame) };
        let exit = exits::handle(env, ctx);
        if ctx.frame.kind != 1 && exits::is_interrupt(ctx.frame.estat) {
            hv.check_timers(cpu, csr::rdtime());
            vmm::poll_console(hv, cpu);
        }
        exit
    }

    fn put(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        sh.running_on.store(usize::MAX, Ordering::SeqCst);
        lafpu::set_guest_euen(0);
        if let Some(e) = PCPU[cpu].fp.lock().as_mut() {
            e.vcpu_put();
        }
        self.vmids.vcpu_put(cpu);
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
        // A vCPU put away wakes at its timer deadline if TI can wake it.
        let lie = ctx.gcsr.get(g::ECFG) & IS_TI != 0;
        if let Some(at) = ctx.timer_at.filter(|_| lie) {
            vcpu.deadlines.set(0, at);
        }
        ctx.preempted_at = (!ctx.idle).then_some(now);
    }

    fn can_restart(&self) -> bool {
        true
    }

    fn restart_vm(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [spin::MutexGuard<'_, VcpuState>],
    ) -> Result<(), alloc::string::String> {
        self.restart(vm, vcpus)
    }

    fn device_work(hv: &Hypervisor<Self>, vm: &Vm<Self>, cpu: usize) {
        crate::vmm::virtio::resume(hv, vm, cpu);
    }

    fn kick(&self, cpu: usize) {
        if let Some(&hw) = self.hw_ids.get(cpu) {
            iocsr::ipi_send(hw, KICK_VECTOR);
        }
    }

    fn idle(&self, hv: &Hypervisor<Self>, cpu: usize) {
        PCPU[cpu].fp.service();
        hv.check_timers(cpu, csr::rdtime());
        arm_timer(hv, cpu);
        csr::idle();
        csr::irq_enable();
        csr::irq_disable();
        hv.check_timers(cpu, csr::rdtime());
        vmm::poll_console(hv, cpu);
    }

    fn slice_expired(&self, cpu: usize) -> bool {
        PCPU[cpu].slice_tick.load(Ordering::Acquire) != ticks(cpu)
    }

    fn slice_start(&self, cpu: usize) {
        PCPU[cpu].slice_tick.store(ticks(cpu), Ordering::Release);
    }

    fn now(&self) -> u64 {
        csr::rdtime()
    }
}
