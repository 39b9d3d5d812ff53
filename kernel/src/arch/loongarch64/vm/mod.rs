//! The LoongArch trap-and-emulate VM backend: guests run at PLV3 under
//! kestrel at PLV0, which keeps each vCPU's privileged state in software
//! (`crate::guest::loongarch`), emulates what traps, maps guest memory with
//! shadow TLB entries tagged by ASIDs from the VMID allocator, and delivers
//! exceptions and interrupts to the guest's virtual handlers. It implements
//! [`crate::vm::Backend`]; scheduling, blocking and VM lifetime are the
//! portable run loop's. An LVZ backend would be a second `Backend` beside
//! this one. Design notes and the guest-visible machine: docs/loongarch-vm.md.

pub mod build;
pub mod devices;
pub mod exits;
pub mod fpu;
pub mod hwtlb;
pub mod mem;
pub mod switch;
pub mod vcpu;

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use spin::Mutex;

use crate::base::haltpoll::PollEnd;
use crate::dev::vdev::ns16550::Ns16550 as VNs16550;
use crate::dev::vdev::uart::Uart;
use crate::guest::loongarch::csr::{self as vcsr};
use crate::guest::loongarch::emulate::IRQ_HWI0;
use crate::guest::loongarch::intc::Intc;
use crate::guest::loongarch::iocsr::{self as viocsr, VIpi};
use crate::guest::loongarch::layout;
use crate::host::board::BoardInfo;
use crate::mem::vmid::VmidAllocator;
use crate::vcpu::fpu::FpPolicy;
use crate::vcpu::sched::VcpuKey;
use crate::vcpu::stats::{Counter, HOST};
use crate::vm::exitctx::ExitCtx;
use crate::vm::{Backend, Hypervisor, RunExit, Vcpu, Vm};
use crate::MAX_CPUS;

use super::{csr, dmw, iocsr, platform};
use crate::mem::frames::GuestRam;
use crate::vcpu::fpu::pcpu::{self as fpcpu, PcpuFp};
use crate::vmm;
use fpu::LaFpHw;
pub use vcpu::VcpuState;

/// Guest physical address of the console 16550 (as QEMU virt).
pub const GUEST_UART: u64 = layout::UART;
/// Guest physical address of the power-off register (QEMU virt's GED
/// sleep control: a byte write of 0x34 powers off).
pub const GUEST_POWEROFF: u64 = layout::POWEROFF;
/// IPI vector kestrel kicks pCPUs with (vector 0 is the boot mailbox's).
const KICK_VECTOR: u32 = 1;
/// The longest an `idle` is polled before the vCPU blocks (`crate::base::haltpoll`).
const HALT_POLL_US: u64 = 100;
/// Real ASIDs per VM: direct-address mode, paged at virtual PLV0, paged at
/// virtual PLV1-3. ASID = VMID * 4 + context.
pub const CONTEXTS: u16 = 4;
pub const CTX_DA: u16 = 0;
pub const CTX_KERNEL: u16 = 1;
pub const CTX_USER: u16 = 2;
/// Real ASID bits on la464 (ASID.ASIDBITS): VMIDs get two fewer.
const ASID_BITS: u32 = 10;

/// Per-vCPU state other pCPUs touch.
pub struct VcpuShared {
    /// SWI bits (ESTAT.IS[1:0]) injected by PV IPIs, merged at the next entry.
    pub swi: AtomicU32,
    /// The pCPU running this vCPU, or `usize::MAX`.
    pub running_on: AtomicUsize,
    /// A secondary waiting "in firmware" for its mailbox.
    pub parked: AtomicBool,
    /// Entry address taken from the mailbox and a0, applied at the next load.
    pub boot: Mutex<Option<(u64, u64)>>,
}

/// Per-VM state.
pub struct VmState {
    pub ram_size: u64,
    /// Host frames backing guest RAM (2 MiB each, guest-physical order).
    pub ram: GuestRam,
    /// What it was built from (a restart loads its images again).
    pub spec: crate::vmm::vmconfig::VmSpec<'static>,
    /// The 16550 on the VM's bus (`devices`), for console input.
    pub uart: Arc<Uart<VNs16550>>,
    /// The IOCSR IPI block of each vCPU.
    pub ipi: Vec<VIpi>,
    /// The device interrupt controllers (PCH-PIC on the bus, EIOINTC in
    /// IOCSR space) and each vCPU's HWI lines.
    pub intc: Arc<Intc>,
    pub shared: Vec<VcpuShared>,
    /// A restart's rebuild still to do (0: none): its RAM is zeroed and its
    /// images loaded by vCPU 0, frame `rebuild - 1` next, a frame per
    /// [`LaBackend::run`], before it enters the guest (see
    /// [`LaBackend::rebuild_step`]).
    pub rebuild: AtomicUsize,
}

impl VmState {
    /// Offset in the VM's RAM of guest physical `gpa`, if it is RAM.
    pub fn ram_offset(&self, gpa: u64) -> Option<u64> {
        layout::ram_offset(gpa, self.ram_size)
    }

    /// Host physical address of guest physical `gpa`, if it is guest RAM.
    pub fn hpa(&self, gpa: u64) -> Option<u64> {
        self.ram.hpa(self.ram_offset(gpa)?)
    }

    /// Reads a 64-bit guest physical word (0 outside RAM, as on a bus that
    /// answers nothing: the page-walk instructions never fault on it).
    pub fn read_u64(&self, gpa: u64) -> u64 {
        match self.hpa(gpa & !7) {
            // SAFETY: the address is inside this VM's RAM frames, 8-byte
            // aligned, reached through kestrel's cached window.
            Some(h) => unsafe { core::ptr::read_volatile(dmw::cached(h) as *const u64) },
            None => 0,
        }
    }

    /// The VM's IOCSR space (IPI blocks and interrupt controllers).
    pub fn iocsr(&self) -> viocsr::Space<'_> {
        viocsr::Space {
            ipi: &self.ipi,
            intc: Some(&self.intc),
        }
    }

    /// Puts vCPU `index`'s IPI and HWI lines into its virtual ESTAT.
    pub fn merge_lines(&self, index: usize, csr: &mut vcsr::CsrFile) {
        csr.set_line(vcsr::IRQ_IPI, self.ipi.get(index).is_some_and(VIpi::line));
        let hwi = self.intc.hwi(index);
        for n in 0..8 {
            csr.set_line(IRQ_HWI0 + n, hwi & (1 << n) != 0);
        }
    }

    /// Copies `data` to offset `off` of the VM's RAM.
    pub fn copy_in(&self, off: u64, data: &[u8]) -> Result<(), String> {
        mem::copy_in(&self.ram, off, data)
    }
}

/// Per-pCPU state of a LoongArch backend (both use it: one runs per boot).
pub(in crate::arch::loongarch64) struct Pcpu {
    pub fp: PcpuFp<LaFpHw>,
    /// kestrel's tick count when the current time slice started.
    pub slice_tick: AtomicU64,
    /// Whose guest translations this pCPU's TLB may hold: (vCPU, epoch,
    /// VMID); trap-and-emulate's shadow entries, LVZ's guest TLB entries
    /// of the VMID (its GID).
    pub last: Mutex<Option<(VcpuKey, u64, u16)>>,
}

impl Pcpu {
    const fn new() -> Pcpu {
        Pcpu {
            fp: PcpuFp::new(),
            slice_tick: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }
}

pub(in crate::arch::loongarch64) static PCPU: [Pcpu; MAX_CPUS] = [const { Pcpu::new() }; MAX_CPUS];

/// kestrel's ticks on `cpu` so far (the timer interrupts `platform::tick_due`
/// found due).
pub(in crate::arch::loongarch64) fn ticks(cpu: usize) -> u64 {
    crate::base::cpu::cpu(cpu).map_or(0, |c| c.ticks())
}

/// Arms this CPU's timer for the earliest of kestrel's next tick, `guest`
/// (the loaded vCPU's virtual timer) and the deadlines of vCPUs that are
/// not loaded.
fn arm_timer(hv: &Hypervisor<LaBackend>, cpu: usize, guest: Option<u64>) {
    let now = csr::rdtime();
    let next = platform::next_tick(cpu);
    let at = next
        .min(guest.unwrap_or(u64::MAX))
        .min(hv.deadline_bound(now));
    super::timer::oneshot_at(cpu, at, now);
}

/// The trap-and-emulate backend.
pub struct LaBackend {
    pub vmids: VmidAllocator,
    policy: FpPolicy,
    hw_ids: Vec<u64>,
    /// FP width the CPU has: 1 FP64, 2 LSX, 3 LASX.
    fp_level: u8,
}

impl LaBackend {
    /// The stable counter now.
    fn now(&self) -> u64 {
        csr::rdtime()
    }

    fn init_cpu_state(&self, hv: &Hypervisor<Self>, cpu: usize) {
        csr::irq_disable();
        hwtlb::init_cpu();
        PCPU[cpu]
            .fp
            .init(cpu, self.policy, LaFpHw::new(self.fp_level));
        *PCPU[cpu].last.lock() = None;
        platform::start_oneshot_tick(cpu);
        arm_timer(hv, cpu, None);
    }

    /// An `idle` found nothing to wake on: poll for up to the vCPU's
    /// halt-poll window whether an interrupt it enables becomes pending
    /// (its timer, an IPI, SWI), while nobody else wants this pCPU and no
    /// host interrupt waits. Returns whether one is pending now (no block)
    /// for `env`'s vCPU (registers `ctx`).
    pub fn halt_poll(&self, env: &ExitCtx<'_, Self>, ctx: &mut VcpuState) -> bool {
        let (vm, index) = (env.vm, env.index());
        let sh = &vm.arch.shared[index];
        let halt = ctx.halt;
        let end = halt.poll(
            csr::rdtime,
            || {
                ctx.csr.update_timer(csr::rdtime());
                vm.arch.merge_lines(index, &mut ctx.csr);
                let swi = u64::from(sh.swi.load(Ordering::Acquire) & 3);
                ctx.csr.wake_pending().is_some() || swi & ctx.csr.get(vcsr::num::ECFG) != 0
            },
            // ESTAT.IS [12:2]: a host interrupt waits (the tick, a kick, or
            // the one-shot timer armed for this vCPU's own deadline, which
            // `update_timer` above has then seen too): block.
            || csr::estat() & 0x1ffc != 0,
            || env.should_preempt(),
        );
        end == PollEnd::Work
    }

    /// Writes back the FP registers other pCPUs asked for (before every
    /// entry: kept inline).
    #[inline]
    fn service_fp(&self, cpu: usize) {
        PCPU[cpu].fp.service();
    }

    /// Before an entry: pending interrupts into the virtual ESTAT and, if
    /// the guest takes one, its delivery; the real ASID and EUEN.
    fn prepare_entry(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        let now = self.now();
        ctx.csr.update_timer(now);
        vm.arch.merge_lines(vcpu.index, &mut ctx.csr);
        let swi = sh.swi.swap(0, Ordering::AcqRel);
        if swi != 0 {
            ctx.csr.estat |= u64::from(swi & 3);
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
        let owns = PCPU[cpu]
            .fp
            .lock()
            .as_ref()
            .is_some_and(|e| e.hw().enabled());
        fpu::set_guest_euen(if owns {
            ctx.csr.get(vcsr::num::EUEN) & self.fp_mask()
        } else {
            0
        });
    }

    fn fp_mask(&self) -> u64 {
        match self.fp_level {
            3 => 7,
            2 => 3,
            _ => 1,
        }
    }
}

/// The FP width the CPU has (CPUCFG2): 1 FP64, 2 LSX, 3 LASX.
pub fn fp_level() -> u8 {
    let c2 = csr::cpucfg(2);
    if c2 & (1 << 7) != 0 {
        3
    } else if c2 & (1 << 6) != 0 {
        2
    } else {
        1
    }
}

/// The trap-and-emulate backend for `board`.
pub fn probe(board: &BoardInfo, policy: FpPolicy) -> LaBackend {
    let fp_level = fp_level();
    let backend = LaBackend {
        vmids: VmidAllocator::new(ASID_BITS - 2, board.cpus.len().clamp(1, MAX_CPUS)),
        policy,
        hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
        fp_level,
    };
    log::info!(
        "LoongArch VMs: trap-and-emulate at PLV3, {}-bit VMIDs x {CONTEXTS} ASIDs, FP {} ({policy:?})",
        backend.vmids.bits(),
        ["none", "FP64", "LSX", "LASX"][fp_level as usize],
    );
    backend
}

impl Backend for LaBackend {
    type VmState = VmState;
    type VcpuState = VcpuState;

    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        vcpu.deadlines.clear();
        if let Some((entry, a0)) = sh.boot.lock().take() {
            ctx.reset(vcpu.index, entry, [a0, 0, 0]);
        }
        if let Some(at) = ctx.blocked_at.take() {
            ctx.halt.blocked_for(csr::rdtime().saturating_sub(at));
        }
        // VMID -> real ASIDs; invtlb is CPU-local, so a rollover is seen
        // as `flush_local` on each CPU's next load.
        let before = self.vmids.counters().rollovers;
        let l = self.vmids.vcpu_load(cpu, &vm.vmid, &|| {});
        let rolled = self.vmids.counters().rollovers - before;
        vm.stats.record_vmid(&l);
        // Rollovers and their flushes are the host's, not the loading VM's.
        HOST.add(Counter::VmidRollovers, rolled);
        if l.flush_local {
            HOST.inc(Counter::TlbFlushes);
            hwtlb::flush_all();
            *PCPU[cpu].last.lock() = None;
        }
        ctx.vmid = l.vmid;
        ctx.key = vcpu.key;
        // Shadow entries on this pCPU belong to whoever ran last here.
        let me = (vcpu.key, ctx.epoch, ctx.vmid);
        {
            let mut last = PCPU[cpu].last.lock();
            if *last != Some(me) {
                for c in 0..CONTEXTS {
                    hwtlb::flush_asid(ctx.asid(c));
                }
                *last = Some(me);
            }
        }
        // FP: ask the pCPU holding this vCPU's registers to write them back
        // (once every VM has ended that pCPU may have left its run loop and
        // will never answer; the run loop drops this vCPU).
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
        let (hv, cpu, vm, vcpu) = (env.hv, env.cpu, env.vm, env.vcpu);
        self.service_fp(cpu);
        if vcpu.index == 0 && vm.arch.rebuild.load(Ordering::Acquire) != 0 {
            return self.rebuild_step(vm, ctx);
        }
        self.prepare_entry(cpu, vm, vcpu, ctx);
        if !ctx.csr.idle_over() {
            // Woken while waiting in `idle` with nothing pending (a stale
            // wake-up, e.g. for an IPI it took before idling): wait on.
            return RunExit::Block;
        }
        csr::irq_disable();
        arm_timer(hv, cpu, ctx.csr.timer_wake_deadline());
        // SAFETY: interrupts are masked; the TLB holds only this vCPU's
        // shadows under its ASIDs (load flushed others' of this VM); EUEN
        // exposes the FP unit only if this vCPU owns it.
        unsafe { switch::enter(&mut ctx.frame) };
        let exit = exits::handle(env, ctx);
        // Deadlines pass only with time, and the one-shot timer armed above
        // fires at the earliest of them (and at the tick): timers and the
        // console are looked at after an interrupt exit, not after every
        // trapped instruction.
        if ctx.frame.kind != 1 && exits::is_interrupt(ctx.frame.estat) {
            hv.check_timers(cpu, csr::rdtime());
            vmm::poll_console(hv, cpu);
        }
        exit
    }

    fn put(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        sh.running_on.store(usize::MAX, Ordering::SeqCst);
        fpu::set_guest_euen(0);
        if let Some(e) = PCPU[cpu].fp.lock().as_mut() {
            e.vcpu_put();
        }
        self.vmids.vcpu_put(cpu);
        // A vCPU put away wakes at its timer deadline, if the timer line is
        // one that can wake it (ECFG.LIE.TI).
        let lie = ctx.csr.get(vcsr::num::ECFG) & (1 << vcsr::IRQ_TI) != 0;
        if let Some(at) = ctx.csr.timer_wake_deadline().filter(|_| lie) {
            vcpu.deadlines.set(0, at);
        }
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
        self.service_fp(cpu);
        hv.check_timers(cpu, csr::rdtime());
        // `idle` wakes on a pending interrupt even with CRMD.IE = 0: take it
        // right after, so a kick between the scheduler's decision and here
        // is not lost.
        arm_timer(hv, cpu, None);
        csr::idle();
        csr::irq_enable();
        csr::irq_disable();
        hv.check_timers(cpu, csr::rdtime());
        vmm::poll_console(hv, cpu);
    }

    /// The slice ends at kestrel's next tick.
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
