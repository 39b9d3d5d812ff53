//! What both LoongArch VM backends share: the VM itself (RAM, images,
//! devices, the IOCSR IPI blocks and interrupt controllers, restarts), the
//! world switch's register save/restore, the FP hardware, and one run
//! loop: [`LaBackend`] implements [`crate::vm::Backend`] (load, run, put,
//! idle, kick, restart), [`crate::vmm::Machine`] and
//! [`crate::vmm::devices::DeviceHost`] once, generic over a [`Mode`] that
//! supplies only what differs between the two ways of running a guest:
//!
//! - trap-and-emulate at PLV3 (`super::vm::Tne`): the guest's privileged
//!   state in software, shadow TLB entries under per-VM ASIDs;
//! - LVZ guest mode (`super::lvz::Lvz`): the guest's own CSRs in the
//!   hardware, second-stage entries under per-vCPU GIDs.
//!
//! A mode supplies its vCPU state ([`LaVcpu`]), guest entry and exit
//! decoding ([`Mode::enter`]), and its CSR and TLB state at a load, an
//! entry and a put. Exit handling both share (MMIO on the VM's bus, IOCSR
//! effects, `idle`, hypercalls, vCPU starts) is in [`exits`].
//! `crate::runtime::backend` picks one mode at boot.

pub mod build;
pub mod devices;
pub mod exits;
pub mod fpu;
pub mod mem;
pub mod switch;

use crate::base::lock::{Mutex, MutexGuard};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::base::haltpoll::{HaltPoll, PollEnd};
use crate::dev::vdev::ns16550::Ns16550 as VNs16550;
use crate::dev::vdev::uart::Uart;
use crate::guest::loongarch::csr::{self as vcsr};
use crate::guest::loongarch::emulate::IRQ_HWI0;
use crate::guest::loongarch::intc::Intc;
use crate::guest::loongarch::iocsr::{self as viocsr, VIpi};
use crate::guest::loongarch::layout;
use crate::host::board::BoardInfo;
use crate::mem::frames::GuestRam;
use crate::mem::vmid::{VmVmid, VmidAllocator};
use crate::vcpu::fpu::pcpu::{self as fpcpu, PcpuFp};
use crate::vcpu::fpu::{FpPolicy, LoongArchFpState, VcpuFp};
use crate::vcpu::sched::VcpuKey;
use crate::vcpu::stats::{self, Counter, Stats, HOST};
use crate::vm::exitctx::ExitCtx;
use crate::vm::{Backend, Hypervisor, RunExit, Vcpu, Vm};
use crate::vmm;
use crate::MAX_CPUS;

use super::{csr, dmw, iocsr, platform};
use fpu::LaFpHw;
use switch::GuestFrame;

/// Guest physical address of the console 16550 (as QEMU virt).
pub const GUEST_UART: u64 = layout::UART;
/// Guest physical address of the power-off register (QEMU virt's GED
/// sleep control: a byte write of 0x34 powers off).
pub const GUEST_POWEROFF: u64 = layout::POWEROFF;
/// IPI vector kestrel kicks pCPUs with (vector 0 is the boot mailbox's).
const KICK_VECTOR: u32 = 1;
/// The longest an `idle` is polled before the vCPU blocks (`crate::base::haltpoll`).
const HALT_POLL_US: u64 = 100;

/// One way of running LoongArch guests: what differs between the two
/// backends, for the shared run loop of [`LaBackend`]. Every hook runs on
/// the pCPU the vCPU is (being) loaded on, with interrupts masked.
pub trait Mode: Sized + 'static {
    /// Its per-vCPU state.
    type Vcpu: LaVcpu;
    /// What polling an `idle` watches beside the vCPU's interrupt lines
    /// ([`Mode::poll_begin`]).
    type Poll;

    /// Per-pCPU set-up of the TLB and the mode's control registers, before
    /// the run loop (no guest is loaded).
    fn init_cpu();
    /// The VMID a load of `ctx` takes (its real ASIDs or its GID): the VM's
    /// or the vCPU's own.
    fn vmid<'a>(vm: &'a Vm<LaBackend<Self>>, ctx: &'a Self::Vcpu) -> &'a VmVmid;
    /// The rest of a load of `vcpu` (registers `ctx`) on `cpu` under VMID
    /// `vmid`, at stable counter `now`: every guest translation on this
    /// pCPU dropped first if `rollover` says so (TLB invalidation is
    /// CPU-local), then its CSR and TLB state, what may be stale here
    /// dropped. Before its FP registers are asked back.
    fn load(
        cpu: usize,
        vm: &Vm<LaBackend<Self>>,
        vcpu: &Vcpu<LaBackend<Self>>,
        ctx: &mut Self::Vcpu,
        vmid: u16,
        rollover: bool,
        now: u64,
    );
    /// Before an entry: the pending interrupts (PV IPIs, the IOCSR IPI,
    /// the interrupt controllers' lines) into the guest's ESTAT, and the
    /// mode's translation state. Returns the FP/LSX/LASX enables the guest
    /// runs with if it owns the unit (cut to what the CPU has).
    fn prepare_entry(irqs: &VcpuIrqs<'_>, ctx: &mut Self::Vcpu) -> u64;
    /// [`Mode::prepare_entry`] for a re-entry in place after a hypercall:
    /// a hypercall changes no interrupt line of its caller but the SWI
    /// bits of a PV IPI it sent itself, and another pCPU's change to them
    /// comes with a kick to this pCPU, a host interrupt that keeps the
    /// exit from re-entering in place or ends the entry at once (whose
    /// exit then takes the whole look). It changes neither the guest's
    /// EUEN nor the FP unit's owner, so the FP enables stand. The whole
    /// look unless a mode has a shorter one.
    fn prepare_after_call(irqs: &VcpuIrqs<'_>, ctx: &mut Self::Vcpu) {
        let _ = Self::prepare_entry(irqs, ctx);
    }
    /// Whether the vCPU may enter: not waiting in `idle` with nothing
    /// pending (a stale wake-up waits on).
    fn idle_over(st: &VmState, index: usize, ctx: &mut Self::Vcpu) -> bool;
    /// The deadline of the guest's timer kestrel must watch while it runs
    /// (the pCPU's one-shot timer is armed for it too), if any.
    fn guest_timer(ctx: &Self::Vcpu) -> Option<u64>;
    /// Runs the guest until its next exit (then in its frame), and
    /// decodes and handles that; also returns the stable counter at the
    /// exit (where kestrel's work for it began).
    ///
    /// # Safety
    /// Interrupts masked; the vCPU loaded ([`Mode::load`]) and prepared
    /// ([`Mode::prepare_entry`]) on this pCPU; EUEN exposes the FP unit
    /// only if it owns it.
    unsafe fn enter(env: &mut ExitCtx<'_, LaBackend<Self>>, ctx: &mut Self::Vcpu)
        -> (RunExit, u64);
    /// The rest of a put of a vCPU of the VM `st`: the mode's state of the
    /// vCPU saved; returns the deadline it wakes at (its timer, if its line
    /// can wake it).
    fn put(st: &VmState, ctx: &mut Self::Vcpu) -> Option<u64>;
    /// Whether an interrupt the guest enables is pending (at an `idle`).
    fn wake_pending(st: &VmState, index: usize, ctx: &Self::Vcpu) -> bool;
    /// The start of a halt poll.
    fn poll_begin(ctx: &Self::Vcpu) -> Self::Poll;
    /// One round of a halt poll: whether an interrupt the guest enables
    /// is pending now.
    fn poll_pending(st: &VmState, index: usize, ctx: &mut Self::Vcpu, poll: &Self::Poll) -> bool;
    /// A halt poll found work (what it watched may have to be raised).
    fn poll_woke(poll: &Self::Poll) {
        let _ = poll;
    }
    /// The vCPU waits in `idle` until an interrupt it enables is pending.
    fn start_idle(ctx: &mut Self::Vcpu);
    /// A hypercall the mode answers itself (`code`, a0 = `function`, a1-a5
    /// = `args`): its a0, or `None` for the shared services.
    fn hypercall(
        st: &VmState,
        ctx: &mut Self::Vcpu,
        code: u32,
        function: u64,
        args: &[u64; 5],
    ) -> Option<u64> {
        let _ = (st, ctx, code, function, args);
        None
    }
}

/// A LoongArch vCPU's register state, as the shared run loop sees it.
pub trait LaVcpu: Send + Sized {
    /// vCPU `index` as at its VM's creation (or restart), the stable
    /// counter then being `created`.
    fn new(index: usize, stats: &Arc<Stats>, created: u64) -> Self;
    /// Architectural reset for an entry at `pc` with a0-a2 = `args`: DA
    /// mode, PLV0, interrupts off; its old translations are stale (a new
    /// epoch).
    fn reset(&mut self, index: usize, pc: u64, args: [u64; 3]);
    /// Its GPRs and PC, and the last exit.
    fn frame(&mut self) -> &mut GuestFrame;
    fn fp(&self) -> &Arc<VcpuFp<LoongArchFpState>>;
    /// Bumped whenever its translations on other pCPUs are stale.
    fn epoch(&mut self) -> &mut u64;
    fn run(&mut self) -> &mut VcpuRun;
}

/// [`LaVcpu`]'s accessors, for a vCPU state with fields `frame`, `fp`,
/// `epoch` and `run`.
macro_rules! la_vcpu_fields {
    () => {
        fn frame(&mut self) -> &mut $crate::arch::loongarch64::backend::switch::GuestFrame {
            &mut self.frame
        }

        fn fp(&self) -> &Arc<VcpuFp<LoongArchFpState>> {
            &self.fp
        }

        fn epoch(&mut self) -> &mut u64 {
            &mut self.epoch
        }

        fn run(&mut self) -> &mut $crate::arch::loongarch64::backend::VcpuRun {
            &mut self.run
        }
    };
}
pub(in crate::arch::loongarch64) use la_vcpu_fields;

/// What the run loop keeps of each vCPU whatever its mode.
pub struct VcpuRun {
    /// Adaptive halt polling of its `idle`s.
    pub halt: HaltPoll,
    /// The bus region of its last MMIO access ([`crate::dev::vdev::bus::Bus::find_from`]).
    pub mmio_region: usize,
}

impl Default for VcpuRun {
    fn default() -> VcpuRun {
        VcpuRun {
            halt: HaltPoll::new(csr::counter_hz() / 1_000_000 * HALT_POLL_US),
            mmio_region: 0,
        }
    }
}

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

/// Per-VM state (both modes).
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
    /// [`LaBackend`] run, before it enters the guest
    /// ([`LaBackend::rebuild_step`]), then its images copied in steps.
    pub rebuild: AtomicUsize,
    /// The images' copy under way in a rebuild, and where vCPU 0 starts.
    pub(in crate::arch::loongarch64) reload:
        Mutex<Option<(crate::mem::imageload::ImageLoad, build::BootRegs)>>,
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
        self.irqs(index).merge_lines(csr);
    }

    /// vCPU `index`'s share of the VM's interrupt state.
    pub fn irqs(&self, index: usize) -> VcpuIrqs<'_> {
        VcpuIrqs {
            shared: &self.shared[index],
            ipi: self.ipi.get(index),
            hwi: self.intc.hwi_lines(index),
        }
    }

    /// Copies `data` to offset `off` of the VM's RAM.
    pub fn copy_in(&self, off: u64, data: &[u8]) -> Result<(), String> {
        mem::copy_in(&self.ram, off, data)
    }
}

/// One vCPU's share of its VM's interrupt state (its SWI bits, its IOCSR
/// IPI block, its HWI lines), looked up once per `run`: the entry reads it
/// before every entry.
pub struct VcpuIrqs<'a> {
    pub shared: &'a VcpuShared,
    ipi: Option<&'a VIpi>,
    hwi: Option<&'a AtomicU8>,
}

impl VcpuIrqs<'_> {
    /// The SWI bits (ESTAT.IS[1:0]) PV IPIs raised since they were last
    /// taken, left in place.
    #[inline]
    pub fn swi(&self) -> u64 {
        u64::from(self.shared.swi.load(Ordering::Acquire) & 3)
    }

    /// The SWI bits PV IPIs raised, taken (cleared) for the next entry.
    #[inline]
    pub fn take_swi(&self) -> u64 {
        u64::from(self.shared.swi.swap(0, Ordering::AcqRel) & 3)
    }

    /// The IOCSR IPI line (ESTAT.IS[12]).
    #[inline]
    pub fn ipi_line(&self) -> bool {
        self.ipi.is_some_and(VIpi::line)
    }

    /// The HWI lines up ([`Intc::hwi`]).
    #[inline]
    pub fn hwi(&self) -> u8 {
        self.hwi.map_or(0, |l| l.load(Ordering::Acquire))
    }

    /// Puts the IPI and HWI lines into the vCPU's virtual ESTAT.
    pub fn merge_lines(&self, csr: &mut vcsr::CsrFile) {
        csr.set_line(vcsr::IRQ_IPI, self.ipi_line());
        let hwi = self.hwi();
        for n in 0..8 {
            csr.set_line(IRQ_HWI0 + n, hwi & (1 << n) != 0);
        }
    }
}

/// Per-pCPU state of the LoongArch backend.
pub(in crate::arch::loongarch64) struct Pcpu {
    pub fp: PcpuFp<LaFpHw>,
    /// Whether the vCPU loaded here owns the FP unit (its engine's
    /// [`LaFpHw`] keeps it): the entry's look, without the engine's lock.
    pub fp_owned: AtomicBool,
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
            fp_owned: AtomicBool::new(false),
            slice_tick: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }
}

pub(in crate::arch::loongarch64) static PCPU: [Pcpu; MAX_CPUS] = [const { Pcpu::new() }; MAX_CPUS];

/// kestrel's ticks on `cpu` so far (the timer interrupts `platform::tick_due`
/// found due).
fn ticks(cpu: usize) -> u64 {
    crate::base::cpu::cpu(cpu).map_or(0, |c| c.ticks())
}

/// Arms this CPU's timer for the earliest of kestrel's next tick, `guest`
/// (the loaded vCPU's timer, where kestrel watches it), the deadlines
/// of vCPUs that are not loaded and, on the boot CPU, the console's next
/// drain.
fn arm_timer<M: Mode>(hv: &Hypervisor<LaBackend<M>>, cpu: usize, guest: Option<u64>) {
    let now = csr::rdtime();
    let next = platform::next_tick(cpu);
    // The boot CPU owns the console's timed drain: its interrupt is not a
    // tick (`platform::tick_due`), the drain runs after it.
    let console = if cpu == 0 {
        crate::base::conout::wake_at()
    } else {
        u64::MAX
    };
    let at = next
        .min(guest.unwrap_or(u64::MAX))
        .min(hv.deadline_bound(now))
        .min(console);
    super::timer::oneshot_at(cpu, at, now);
}

/// The FP width the CPU has (CPUCFG2): 1 FP64, 2 LSX, 3 LASX.
fn fp_level() -> u8 {
    let c2 = csr::cpucfg(2);
    if c2 & (1 << 7) != 0 {
        3
    } else if c2 & (1 << 6) != 0 {
        2
    } else {
        1
    }
}

/// The LoongArch VM backend, running guests in mode `M`.
pub struct LaBackend<M: Mode> {
    pub vmids: VmidAllocator,
    policy: FpPolicy,
    hw_ids: Vec<u64>,
    /// FP width the CPU has: 1 FP64, 2 LSX, 3 LASX.
    fp_level: u8,
    mode: PhantomData<fn() -> M>,
}

impl<M: Mode> LaBackend<M> {
    /// The backend for `board`'s CPUs, with `vmid_bits`-bit VMIDs.
    pub fn new(board: &BoardInfo, policy: FpPolicy, vmid_bits: u32) -> Self {
        LaBackend {
            vmids: VmidAllocator::new(vmid_bits, board.cpus.len().clamp(1, MAX_CPUS)),
            policy,
            hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
            fp_level: fp_level(),
            mode: PhantomData,
        }
    }

    /// The FP unit's name, for the log.
    pub fn fp_name(&self) -> &'static str {
        ["none", "FP64", "LSX", "LASX"][self.fp_level as usize]
    }

    fn fp_mask(&self) -> u64 {
        match self.fp_level {
            3 => 7,
            2 => 3,
            _ => 1,
        }
    }

    fn init_cpu_state(&self, hv: &Hypervisor<Self>, cpu: usize) {
        csr::irq_disable();
        M::init_cpu();
        PCPU[cpu].fp.init(
            cpu,
            self.policy,
            LaFpHw::new(self.fp_level, &PCPU[cpu].fp_owned),
        );
        *PCPU[cpu].last.lock() = None;
        platform::start_oneshot_tick(cpu);
        arm_timer(hv, cpu, None);
    }

    /// An `idle` found nothing to wake on: poll for up to the vCPU's
    /// halt-poll window whether an interrupt it enables becomes pending
    /// (its timer, an IPI, SWI, a device line), while nobody else wants
    /// this pCPU and no host interrupt waits. Returns whether one is
    /// pending now (no block) for `env`'s vCPU (registers `ctx`).
    pub fn halt_poll(&self, env: &ExitCtx<'_, Self>, ctx: &mut M::Vcpu) -> bool {
        let (st, index) = (&env.vm.arch, env.index());
        let poll = M::poll_begin(ctx);
        let halt = ctx.run().halt;
        let end = halt.poll(
            csr::rdtime,
            || M::poll_pending(st, index, ctx, &poll),
            // ESTAT.IS [12:2]: a host interrupt waits (the tick, a kick, or
            // the one-shot timer armed for this vCPU's own deadline): block.
            || csr::estat() & 0x1ffc != 0,
            || env.should_preempt(),
        );
        // The host interrupt may be that one-shot timer, which fires as the
        // vCPU's timer does: between the round's look at the vCPU and its
        // look at ESTAT. One more look, so that the vCPU goes on (and the
        // interrupt is taken at its entry) rather than blocking until the
        // deadline check wakes it.
        let work = end == PollEnd::Work
            || (end == PollEnd::Interrupted && M::poll_pending(st, index, ctx, &poll));
        if work {
            M::poll_woke(&poll);
        }
        work
    }

    /// Before an entry: the mode's look ([`Mode::prepare_entry`]) and the
    /// FP enables, the unit's only if this vCPU owns it.
    #[inline(always)]
    fn prepare_entry(&self, cpu: usize, irqs: &VcpuIrqs<'_>, ctx: &mut M::Vcpu) {
        let euen = M::prepare_entry(irqs, ctx);
        let owns = PCPU[cpu].fp_owned.load(Ordering::Relaxed);
        fpu::set_guest_euen(if owns { euen & self.fp_mask() } else { 0 });
    }

    /// Writes back the FP registers other pCPUs asked for (at each call of
    /// `run`, after an interrupt it re-enters from, in idle: a request
    /// comes with a kick; kept inline).
    #[inline]
    fn service_fp(&self, cpu: usize) {
        PCPU[cpu].fp.service();
    }
}

/// Whether the run loop can be skipped after a guest exception with
/// ECODE `what` that its handler answered with `Continue`: a hypercall
/// (`hvcl`), an emulated privileged instruction (GSPR: `cpucfg`, IOCSR,
/// CSRs; INE/IPE under trap-and-emulate) or a load or store its MMIO bus
/// took (page invalid); or after an interrupt (`what` is
/// [`stats::what::IRQ`]) that left the run loop nothing to do
/// (`quiet_irq`: the slice goes on, and
/// [`Hypervisor::nothing_between_entries`]). A synchronous exit must have
/// left the VM's side quiet ([`Vm::quiet_after_sync_exit`]: the VM not
/// stopping; after MMIO, no device work waiting). Only with no host
/// interrupt waiting (ESTAT.IS 12:2: the run loop's business).
#[inline(always)]
fn reenters<M: Mode>(what: u8, quiet_irq: bool, vm: &Vm<LaBackend<M>>) -> bool {
    use crate::guest::loongarch::csr::ecode;
    let quiet = match what {
        // LVZ's hypercall and emulated instructions; trap-and-emulate's
        // privileged and hypercall instructions (its guest runs at PLV3).
        ecode::HVC | ecode::GSPR | ecode::INE | ecode::IPE => vm.quiet_after_sync_exit(false),
        ecode::PIL | ecode::PIS => vm.quiet_after_sync_exit(true),
        stats::what::IRQ => quiet_irq,
        _ => false,
    };
    quiet && csr::estat() & 0x1ffc == 0
}

impl<M: Mode> Backend for LaBackend<M> {
    type VmState = VmState;
    type VcpuState = M::Vcpu;

    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut M::Vcpu) {
        let sh = &vm.arch.shared[vcpu.index];
        vcpu.deadlines.clear();
        if let Some((entry, a0)) = sh.boot.lock().take() {
            ctx.reset(vcpu.index, entry, [a0, 0, 0]);
        }
        let now = csr::rdtime();
        ctx.run().halt.loaded(now, vcpu.steal.delay());
        // TLB invalidation is CPU-local, so a rollover is seen as
        // `flush_local` on each CPU's next load.
        let before = self.vmids.counters().rollovers;
        let l = self.vmids.vcpu_load(cpu, M::vmid(vm, ctx), &|| {});
        let rolled = self.vmids.counters().rollovers - before;
        vm.stats.record_vmid(&l);
        // Rollovers and their flushes are the host's, not the loading VM's.
        HOST.add(Counter::VmidRollovers, rolled);
        if l.flush_local {
            HOST.inc(Counter::TlbFlushes);
        }
        M::load(cpu, vm, vcpu, ctx, l.vmid, l.flush_local, now);
        // FP: ask the pCPU holding this vCPU's registers to write them back
        // (once every VM has ended that pCPU may have left its run loop and
        // will never answer; the run loop drops this vCPU).
        let _ = fpcpu::load_waiting(
            |c| PCPU.get(c).map(|p| &p.fp),
            cpu,
            ctx.fp(),
            |p| self.kick(p),
            || vm.has_ended(),
        );
        sh.running_on.store(cpu, Ordering::SeqCst);
    }

    // Inlined into the run loop, whose only per-exit call it is: left to
    // the compiler it was outlined as the image grew, which cost every
    // arm64 exit about 38 instructions (docs/performance.md).
    #[inline(always)]
    fn run(&self, env: &mut ExitCtx<'_, Self>, ctx: &mut M::Vcpu) -> RunExit {
        let (hv, cpu, vm, index) = (env.hv, env.cpu, env.vm, env.index());
        self.service_fp(cpu);
        if index == 0 && vm.arch.rebuild.load(Ordering::Acquire) != 0 {
            let t = csr::rdtime();
            let exit = self.rebuild_step(vm, ctx);
            vm.stats.note_step(csr::rdtime().saturating_sub(t));
            return exit;
        }
        // Whether the last exit, handled in place, left the one-shot timer
        // armed before it standing: a hypercall (it moves no deadline this
        // pCPU arms for; under LVZ the guest's timer is its own) or an
        // interrupt other than the timer's (a kick: the timer has not
        // fired, and what the interrupt did moves no deadline either).
        let mut timer_armed = false;
        let irqs = vm.arch.irqs(index);
        self.prepare_entry(cpu, &irqs, ctx);
        // A vCPU that exits and re-enters in place is not waiting in `idle`
        // (its `idle` exit blocks), so this is looked at once per `run`,
        // after the lines are merged.
        if !M::idle_over(&vm.arch, index, ctx) {
            // Woken while waiting in `idle` with nothing pending (a stale
            // wake-up, e.g. for an IPI it took before idling): wait on.
            return RunExit::Block;
        }
        loop {
            csr::irq_disable();
            if !timer_armed {
                arm_timer(hv, cpu, M::guest_timer(ctx));
            }
            // SAFETY: interrupts are masked; `load` and `prepare_entry` put
            // this vCPU's translation state in place (the TLB holds nothing of
            // another vCPU it may use); EUEN exposes the FP unit only if this
            // vCPU owns it.
            let (exit, exited) = unsafe { M::enter(env, ctx) };
            // Deadlines pass only with time, and the one-shot timer armed above
            // fires at the earliest of them (and at the tick): timers and the
            // console are looked at after an interrupt exit, not after every
            // trapped instruction.
            let f = ctx.frame();
            let (kind, estat) = (f.kind, f.estat);
            let mut quiet_irq = false;
            let what = if kind == 1 {
                stats::what::TLB_REFILL
            } else if exits::is_interrupt(estat) {
                hv.check_timers(cpu, csr::rdtime());
                vmm::poll_console(hv, cpu);
                // The run loop would only enter again: the slice goes on
                // and it has nothing to do between entries. A kick's
                // request for FP registers is answered here then.
                quiet_irq = !self.slice_expired(cpu) && hv.nothing_between_entries(vm);
                if quiet_irq {
                    self.service_fp(cpu);
                }
                stats::what::IRQ
            } else {
                ((estat >> 16) & 0x3f) as u8
            };
            // A wrapping difference: one that went backwards is no worst
            // (`Stats::note_exit`).
            vm.stats.note_exit(csr::rdtime().wrapping_sub(exited), what);
            // An exit handled in place goes straight back in, without the
            // run loop's looks: whatever they look for (a slice's end, a
            // kick, a stop, a timer, another pCPU's call for the FP
            // registers) arrives as a host interrupt, which ends the next
            // entry at once if it waits now, as it would end a guest that
            // takes no exits; the console's requests are seen at the next
            // tick, as for such a guest.
            if kind != 1 && matches!(exit, RunExit::Continue) && reenters(what, quiet_irq, vm) {
                let after_call = what == crate::guest::loongarch::csr::ecode::HVC;
                timer_armed = after_call
                    || (what == stats::what::IRQ
                        && !csr::Irqs::from_bits_truncate(estat).contains(csr::Irqs::TI));
                if after_call {
                    M::prepare_after_call(&irqs, ctx);
                } else {
                    self.prepare_entry(cpu, &irqs, ctx);
                }
                // `Continue`: nothing to drop.
                core::mem::forget(exit);
                continue;
            }
            return exit;
        }
    }

    fn put(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut M::Vcpu) {
        let sh = &vm.arch.shared[vcpu.index];
        sh.running_on.store(usize::MAX, Ordering::SeqCst);
        fpu::set_guest_euen(0);
        if let Some(e) = PCPU[cpu].fp.lock().as_mut() {
            e.vcpu_put();
        }
        self.vmids.vcpu_put(cpu);
        // A vCPU put away wakes at its timer deadline, if the timer line is
        // one that can wake it (ECFG.LIE.TI).
        if let Some(at) = M::put(&vm.arch, ctx) {
            vcpu.deadlines.set(0, at);
        }
    }

    fn can_restart(&self) -> bool {
        true
    }

    fn restart_vm(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [MutexGuard<'_, M::Vcpu>],
    ) -> Result<(), String> {
        self.restart(vm, vcpus)
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
