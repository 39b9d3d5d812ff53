//! The LoongArch trap-and-emulate VM backend: guests run at PLV3 under
//! kestrel at PLV0, which keeps each vCPU's privileged state in software
//! (`crate::guest::loongarch`), emulates what traps, maps guest memory with
//! shadow TLB entries tagged by ASIDs from the VMID allocator, and delivers
//! exceptions and interrupts to the guest's virtual handlers. It implements
//! [`crate::vm::Backend`]; scheduling, blocking and VM lifetime are the
//! portable run loop's. An LVZ backend would be a second `Backend` beside
//! this one. Design notes and the guest-visible machine: docs/loongarch-vm.md.

pub mod devices;
pub mod dtb;
pub mod exits;
pub mod fpu;
pub mod hwtlb;
pub mod mem;
pub mod switch;

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use spin::{Mutex, Once};

use kestrel_abi::package::{ConsoleKind, FpPolicy as PkgFpPolicy, GuestKind, Package};

use crate::board::BoardInfo;
use crate::console::ConsoleMux;
use crate::fpu::{FpEngine, FpLoad, FpPolicy, LoongArchFpState, VcpuFp};
use crate::guest::loongarch::csr::{self as vcsr, CsrFile};
use crate::guest::loongarch::iocsr::VIpi;
use crate::guest::loongarch::layout;
use crate::guest::loongarch::tlb::SoftTlb;
use crate::haltpoll::{HaltPoll, PollEnd};
use crate::platform::ExitStatus;
use crate::sched::{CpuMask, VcpuKey};
use crate::stats::{Counter, Stats};
use crate::vdev::ns16550::Ns16550 as VNs16550;
use crate::vdev::uart::Uart;
use crate::vm::{Backend, Hypervisor, Observer, RunExit, Vcpu, Vm, VmEnd, VmParts};
use crate::vmconfig::VmSpec;
use crate::vmid::VmidAllocator;
use crate::MAX_CPUS;

use super::{csr, dmw, iocsr};
use fpu::LaFpHw;
use switch::GuestFrame;

/// Guest physical address of the console 16550 (as QEMU virt).
pub const GUEST_UART: u64 = layout::UART;
/// Guest physical address of the power-off register (QEMU virt's GED
/// sleep control: a byte write of 0x34 powers off).
pub const GUEST_POWEROFF: u64 = layout::POWEROFF;
/// IPI vector kestrel kicks pCPUs with (vector 0 is the boot mailbox's).
const KICK_VECTOR: u32 = 1;
/// The longest an `idle` is polled before the vCPU blocks (`crate::haltpoll`).
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
    /// Counter value at which the (not loaded) vCPU's virtual timer fires.
    pub wake_at: AtomicU64,
    /// The pCPU running this vCPU, or `usize::MAX`.
    pub running_on: AtomicUsize,
    /// A secondary waiting "in firmware" for its mailbox.
    pub parked: AtomicBool,
    /// Entry address taken from the mailbox, applied at the next load.
    pub boot: Mutex<Option<u64>>,
}

/// Per-VM state.
pub struct VmState {
    pub console: usize,
    pub ram_size: u64,
    /// Host frames backing guest RAM (2 MiB each, guest-physical order).
    pub frames: Vec<u64>,
    /// The 16550 on the VM's bus (`devices`), for console input.
    pub uart: Arc<Uart<VNs16550>>,
    /// The IOCSR IPI block of each vCPU.
    pub ipi: Vec<VIpi>,
    pub shared: Vec<VcpuShared>,
}

impl VmState {
    /// Offset in the VM's RAM of guest physical `gpa`, if it is RAM.
    pub fn ram_offset(&self, gpa: u64) -> Option<u64> {
        layout::ram_offset(gpa, self.ram_size)
    }

    /// Host physical address of guest physical `gpa`, if it is guest RAM.
    pub fn hpa(&self, gpa: u64) -> Option<u64> {
        let off = self.ram_offset(gpa)?;
        let f = self.frames.get((off / mem::FRAME) as usize)?;
        Some(f + off % mem::FRAME)
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

    /// Copies `data` to offset `off` of the VM's RAM.
    pub fn copy_in(&self, off: u64, data: &[u8]) -> Result<(), String> {
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.ram_size)
            .ok_or_else(|| format!("{} bytes at RAM offset {off:#x} do not fit", data.len()))?;
        let mut at = off;
        while at < end {
            let n = (mem::FRAME - at % mem::FRAME).min(end - at);
            let h = self
                .frames
                .get((at / mem::FRAME) as usize)
                .map(|f| f + at % mem::FRAME)
                .ok_or("outside guest RAM")?;
            let src = &data[(at - off) as usize..(at - off + n) as usize];
            // SAFETY: [h, h + n) lies inside one frame of this VM's RAM
            // (n stops at the frame end), reached through the cached window.
            unsafe {
                core::ptr::copy_nonoverlapping(src.as_ptr(), dmw::cached(h) as *mut u8, n as usize)
            };
            at += n;
        }
        Ok(())
    }
}

/// Per-vCPU register file and privileged state.
pub struct VcpuState {
    pub frame: GuestFrame,
    pub csr: CsrFile,
    pub tlb: SoftTlb,
    pub fp: Arc<VcpuFp<LoongArchFpState>>,
    /// Bumped whenever this vCPU's shadow entries become stale.
    pub epoch: u64,
    /// VMID of the current load (real ASIDs VMID * 4 + context).
    pub vmid: u16,
    /// Guest PLV the user context's shadows were made at (1..=3).
    pub user_plv: u64,
    /// This vCPU (set at each load).
    pub key: VcpuKey,
    /// Adaptive halt polling of its `idle`s, and when its last unpolled
    /// wait began (its length, known at the next load, adapts the window).
    pub halt: HaltPoll,
    pub blocked_at: Option<u64>,
}

impl VcpuState {
    fn new(index: usize, stats: &Arc<Stats>) -> VcpuState {
        VcpuState {
            frame: GuestFrame::default(),
            csr: CsrFile::new(index as u64),
            tlb: SoftTlb::new(),
            fp: Arc::new(VcpuFp::counted(
                LoongArchFpState::default(),
                Arc::clone(stats),
            )),
            epoch: 0,
            vmid: 0,
            user_plv: 3,
            halt: HaltPoll::new(csr::counter_hz() / 1_000_000 * HALT_POLL_US),
            blocked_at: None,
            key: VcpuKey {
                vm: 0,
                vcpu: index as u16,
            },
        }
    }

    /// Architectural reset for an entry at `pc`: DA mode, PLV0, IE off.
    fn reset(&mut self, index: usize, pc: u64, args: [u64; 3]) {
        self.frame = GuestFrame::default();
        self.frame.pc = pc;
        self.frame.regs[4..7].copy_from_slice(&args);
        self.csr = CsrFile::new(index as u64);
        self.tlb = SoftTlb::new();
        self.epoch += 1;
    }

    /// The real ASID for the guest's current mode.
    pub fn asid(&self, ctx: u16) -> u16 {
        self.vmid * CONTEXTS + ctx
    }

    /// The context the guest runs in now.
    pub fn context(&self) -> u16 {
        if self.csr.da() {
            CTX_DA
        } else if self.csr.plv() == 0 {
            CTX_KERNEL
        } else {
            CTX_USER
        }
    }

    /// Drops every shadow entry of this vCPU on this pCPU and marks them
    /// stale everywhere else.
    pub fn invalidate_shadows(&mut self, cpu: usize) {
        for c in 0..CONTEXTS {
            hwtlb::flush_asid(self.asid(c));
        }
        self.shadows_changed(cpu);
    }

    /// The caller dropped what became stale on this pCPU: other pCPUs'
    /// shadows of this vCPU are stale now (they flush at its next load
    /// there), this pCPU's are current.
    pub fn shadows_changed(&mut self, cpu: usize) {
        self.epoch += 1;
        if let Some(p) = PCPU.get(cpu) {
            *p.last.lock() = Some((self.key, self.epoch, self.vmid));
        }
    }
}

/// Per-pCPU state of the backend.
struct Pcpu {
    fp: Mutex<Option<FpEngine<LaFpHw>>>,
    fp_requests: Mutex<Vec<Arc<VcpuFp<LoongArchFpState>>>>,
    /// Set after a push to `fp_requests`: the exit path looks at this
    /// flag, not the lock, when nobody asked.
    fp_asked: AtomicBool,
    slice_expired: AtomicBool,
    /// Counter value of kestrel's next tick (0: the timer is still periodic).
    next_tick: AtomicU64,
    /// Whose shadow entries this pCPU's TLB holds: (vCPU, epoch, VMID).
    last: Mutex<Option<(VcpuKey, u64, u16)>>,
}

impl Pcpu {
    const fn new() -> Pcpu {
        Pcpu {
            fp: Mutex::new(None),
            fp_requests: Mutex::new(Vec::new()),
            fp_asked: AtomicBool::new(false),
            slice_expired: AtomicBool::new(false),
            next_tick: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }
}

static PCPU: [Pcpu; MAX_CPUS] = [const { Pcpu::new() }; MAX_CPUS];
static HV: Once<Hypervisor<LaBackend>> = Once::new();
static VMS: Once<Vec<Arc<Vm<LaBackend>>>> = Once::new();
static CONSOLE: Once<Mutex<ConsoleMux>> = Once::new();

fn console() -> &'static Mutex<ConsoleMux> {
    CONSOLE.call_once(|| Mutex::new(ConsoleMux::new()))
}

fn vms() -> &'static [Arc<Vm<LaBackend>>] {
    VMS.get().map_or(&[], |v| v.as_slice())
}

/// A timer interrupt on `cpu` (interrupt context): whether it is kestrel's
/// tick. Before the CPU runs VMs the timer is periodic and every interrupt
/// is; afterwards it is one-shot ([`arm_timer`]) and the tick is due when
/// its deadline has passed, which also ends the time slice.
pub fn host_tick_due(cpu: usize) -> bool {
    let Some(p) = PCPU.get(cpu) else { return true };
    let next = p.next_tick.load(Ordering::Relaxed);
    if next == 0 {
        return true;
    }
    let now = csr::rdtime();
    if now < next {
        return false;
    }
    let period = super::timer::period().max(1);
    p.next_tick.store(
        next + period * ((now - next) / period + 1),
        Ordering::Relaxed,
    );
    p.slice_expired.store(true, Ordering::Release);
    true
}

/// Arms this CPU's timer for the earliest of kestrel's next tick, `guest`
/// (the loaded vCPU's virtual timer) and the virtual timers of blocked vCPUs.
fn arm_timer(cpu: usize, guest: Option<u64>) {
    let next = PCPU[cpu].next_tick.load(Ordering::Relaxed);
    let blocked = vms()
        .iter()
        .filter(|vm| !vm.has_ended())
        .flat_map(|vm| vm.arch.shared.iter())
        .map(|s| s.wake_at.load(Ordering::Relaxed))
        .min()
        .unwrap_or(u64::MAX);
    let at = next.min(guest.unwrap_or(u64::MAX)).min(blocked);
    super::timer::oneshot(at.saturating_sub(csr::rdtime()));
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
    fn init_cpu(&self, cpu: usize) {
        csr::irq_disable();
        hwtlb::init_cpu();
        *PCPU[cpu].fp.lock() = Some(FpEngine::new(cpu, self.policy, LaFpHw::new(self.fp_level)));
        *PCPU[cpu].last.lock() = None;
        let period = super::timer::period().max(1);
        PCPU[cpu]
            .next_tick
            .store(csr::rdtime() + period, Ordering::Relaxed);
        arm_timer(cpu, None);
    }

    fn now(&self) -> u64 {
        csr::rdtime()
    }

    /// An `idle` found nothing to wake on: poll for up to the vCPU's
    /// halt-poll window whether an interrupt it enables becomes pending
    /// (its timer, an IPI, SWI), while nobody else wants this pCPU and no
    /// host interrupt waits. Returns whether one is pending now (no block).
    pub fn halt_poll(
        &self,
        hv: &Hypervisor<Self>,
        cpu: usize,
        vm: &Vm<Self>,
        vcpu: &Vcpu<Self>,
        ctx: &mut VcpuState,
    ) -> bool {
        let sh = &vm.arch.shared[vcpu.index];
        let halt = ctx.halt;
        let end = halt.poll(
            csr::rdtime,
            || {
                ctx.csr.update_timer(csr::rdtime());
                ctx.csr
                    .set_line(vcsr::IRQ_IPI, vm.arch.ipi[vcpu.index].line());
                let swi = u64::from(sh.swi.load(Ordering::Acquire) & 3);
                ctx.csr.wake_pending().is_some() || swi & ctx.csr.get(vcsr::num::ECFG) != 0
            },
            // ESTAT.IS [12:2]: a host interrupt waits (the tick, a kick, or
            // the one-shot timer armed for this vCPU's own deadline, which
            // `update_timer` above has then seen too): block.
            || csr::estat() & 0x1ffc != 0,
            || hv.sched.should_preempt(cpu),
        );
        end == PollEnd::Work
    }

    /// Writes back the FP registers other pCPUs asked for.
    fn service_fp(&self, cpu: usize) {
        // A request pushed after this swap sets the flag again and is
        // served at the next call (its requester kicks and waits).
        if !PCPU[cpu].fp_asked.swap(false, Ordering::AcqRel) {
            return;
        }
        let reqs = core::mem::take(&mut *PCPU[cpu].fp_requests.lock());
        if reqs.is_empty() {
            return;
        }
        if let Some(engine) = PCPU[cpu].fp.lock().as_mut() {
            for r in reqs {
                engine.vcpu_migrate(&r);
            }
        }
    }

    /// Wakes the vCPUs (not loaded) whose virtual timer has fired.
    fn check_timers(&self, cpu: usize) {
        let Some(hv) = HV.get() else { return };
        let now = self.now();
        for vm in vms() {
            if vm.has_ended() {
                continue;
            }
            for (i, sh) in vm.arch.shared.iter().enumerate() {
                let at = sh.wake_at.load(Ordering::Acquire);
                if at <= now
                    && sh
                        .wake_at
                        .compare_exchange(at, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    vm.stats.exit(crate::stats::ExitReason::Timer);
                    hv.wake(
                        VcpuKey {
                            vm: vm.slot,
                            vcpu: i as u16,
                        },
                        cpu,
                    );
                }
            }
        }
    }

    /// Console input (boot CPU only): bytes typed on the physical UART go
    /// to the VM with the focus (its 16550's receive FIFO; guests poll it).
    fn poll_console(&self, cpu: usize) {
        if cpu != 0 {
            return;
        }
        // The 16550 has no receive interrupt here: guests poll it.
        crate::console::pump_input(
            console(),
            |i| vms().get(i).map(|vm| vm.arch.uart.regs()),
            || super::platform::PLATFORM.console_read(),
            |_, _| {},
        );
    }

    /// A guest byte for the console: tagged lines on the physical UART.
    pub fn console_out(&self, vm: &Vm<Self>, byte: u8) {
        // Written under the multiplexer's lock: the terminal must see
        // the order the multiplexer decided (streamed partial lines).
        let mut mux = console().lock();
        if let Some(line) = mux.output(vm.arch.console, byte) {
            crate::klog::print(format_args!("{line}"));
        }
    }

    /// Before an entry: pending interrupts into the virtual ESTAT and, if
    /// the guest takes one, its delivery; the real ASID and EUEN.
    fn prepare_entry(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        let now = self.now();
        ctx.csr.update_timer(now);
        ctx.csr
            .set_line(vcsr::IRQ_IPI, vm.arch.ipi[vcpu.index].line());
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

impl Backend for LaBackend {
    type VmState = VmState;
    type VcpuState = VcpuState;

    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        sh.wake_at.store(u64::MAX, Ordering::Release);
        if let Some(entry) = sh.boot.lock().take() {
            ctx.reset(vcpu.index, entry, [0, 0, 0]);
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
        vm.stats.add(Counter::VmidRollovers, rolled);
        if l.flush_local {
            vm.stats.inc(Counter::TlbFlushes);
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
        // FP: ask the pCPU holding this vCPU's registers to write them back.
        loop {
            // (Register moves count themselves in their own VM's stats.)
            let r = PCPU[cpu].fp.lock().as_mut().map(|e| e.vcpu_load(&ctx.fp));
            match r {
                Some(FpLoad::LiveOn(p)) if p < MAX_CPUS => {
                    PCPU[p].fp_requests.lock().push(Arc::clone(&ctx.fp));
                    PCPU[p].fp_asked.store(true, Ordering::Release);
                    self.kick(p);
                    while ctx.fp.live_on() == Some(p) && !vm.has_ended() {
                        self.service_fp(cpu);
                        core::hint::spin_loop();
                    }
                    // Once every VM has ended `p` may have left its run loop
                    // and will never answer; the run loop drops this vCPU.
                    if vm.has_ended() {
                        break;
                    }
                }
                _ => break,
            }
        }
        sh.running_on.store(cpu, Ordering::SeqCst);
    }

    fn run(
        &self,
        hv: &Hypervisor<Self>,
        cpu: usize,
        vm: &Vm<Self>,
        vcpu: &Vcpu<Self>,
        ctx: &mut VcpuState,
    ) -> RunExit {
        self.service_fp(cpu);
        self.prepare_entry(cpu, vm, vcpu, ctx);
        if !ctx.csr.idle_over() {
            // Woken while waiting in `idle` with nothing pending (a stale
            // wake-up, e.g. for an IPI it took before idling): wait on.
            return RunExit::Block;
        }
        csr::irq_disable();
        arm_timer(cpu, ctx.csr.timer_deadline());
        // SAFETY: interrupts are masked; the TLB holds only this vCPU's
        // shadows under its ASIDs (load flushed others' of this VM); EUEN
        // exposes the FP unit only if this vCPU owns it.
        unsafe { switch::enter(&mut ctx.frame) };
        let exit = exits::handle(self, hv, cpu, vm, vcpu, ctx);
        // Deadlines pass only with time, and the one-shot timer armed above
        // fires at the earliest of them (and at the tick): timers and the
        // console are looked at after an interrupt exit, not after every
        // trapped instruction.
        if ctx.frame.kind != 1 && exits::is_interrupt(ctx.frame.estat) {
            self.check_timers(cpu);
            self.poll_console(cpu);
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
        if let Some(at) = ctx.csr.timer_deadline().filter(|_| lie) {
            sh.wake_at.store(at, Ordering::Release);
        }
    }

    fn kick(&self, cpu: usize) {
        if let Some(&hw) = self.hw_ids.get(cpu) {
            iocsr::ipi_send(hw, KICK_VECTOR);
        }
    }

    fn idle(&self, cpu: usize) {
        self.service_fp(cpu);
        self.check_timers(cpu);
        // `idle` wakes on a pending interrupt even with CRMD.IE = 0: take it
        // right after, so a kick between the scheduler's decision and here
        // is not lost.
        arm_timer(cpu, None);
        csr::idle();
        csr::irq_enable();
        csr::irq_disable();
        self.check_timers(cpu);
        self.poll_console(cpu);
    }

    fn slice_expired(&self, cpu: usize) -> bool {
        PCPU[cpu].slice_expired.load(Ordering::Acquire)
    }

    fn slice_start(&self, cpu: usize) {
        PCPU[cpu].slice_expired.store(false, Ordering::Release);
    }

    fn now(&self) -> u64 {
        csr::rdtime()
    }
}

struct LogObserver;

impl Observer for LogObserver {
    fn vm_ended(&self, vm: &str, why: &VmEnd) {
        if let Some(v) = vms().iter().find(|v| v.name == vm) {
            if let Some(line) = console().lock().flush(v.arch.console) {
                crate::klog::print(format_args!("{line}"));
            }
            log::info!("vm \"{vm}\" {why}; {}", v.stats.snapshot());
        } else {
            log::info!("vm \"{vm}\" {why}");
        }
    }

    fn all_ended(&self) {
        log::info!("every VM has ended");
    }
}

static OBSERVER: LogObserver = LogObserver;

impl LaBackend {
    fn build_vm(
        &self,
        spec: &VmSpec<'static>,
        console: usize,
        online: CpuMask,
        pinned_elsewhere: CpuMask,
    ) -> Result<VmParts<Self>, String> {
        if spec.console != ConsoleKind::Ns16550 {
            return Err(String::from(
                "console: only the NS16550 is emulated on LoongArch (console = \"ns16550\")",
            ));
        }
        let vcpus = spec.vcpus as usize;
        let frames = mem::alloc_frames(spec.ram_size).ok_or_else(|| {
            format!(
                "memory: {} MiB needed, only {} MiB of host memory left",
                spec.ram_size >> 20,
                mem::free_bytes() >> 20
            )
        })?;
        let devices = devices::build()?;
        let st = VmState {
            console,
            ram_size: spec.ram_size,
            frames,
            uart: devices.uart,
            ipi: (0..vcpus).map(|_| VIpi::new()).collect(),
            shared: (0..vcpus)
                .map(|i| VcpuShared {
                    swi: AtomicU32::new(0),
                    wake_at: AtomicU64::new(u64::MAX),
                    running_on: AtomicUsize::new(usize::MAX),
                    parked: AtomicBool::new(i != 0),
                    boot: Mutex::new(None),
                })
                .collect(),
        };
        let entry = match spec.kind {
            GuestKind::TestElf | GuestKind::LinuxLoongArchElf => load_elf(&st, spec.kernel)?,
            GuestKind::TestRaw => {
                st.copy_in(spec.kernel_gpa, spec.kernel)
                    .map_err(|e| format!("kernel: {e}"))?;
                spec.entry_gpa
            }
            GuestKind::LinuxArm64Image => {
                return Err(String::from("kind: an arm64 Image cannot run on LoongArch"))
            }
        };
        if let Some(initrd) = spec.initrd {
            st.copy_in(spec.initrd_gpa, initrd)
                .map_err(|e| format!("initrd: {e}"))?;
        }
        let blob = match spec.dtb {
            crate::vmconfig::DtbSource::Provided(d) => d.to_vec(),
            crate::vmconfig::DtbSource::Generate => dtb::generate(spec),
        };
        st.copy_in(spec.dtb_gpa, &blob)
            .map_err(|e| format!("dtb: {e}"))?;
        // The command line, NUL-terminated, right after the DTB (the spec's
        // "guest physical" addresses are RAM offsets: its RAM base is 0).
        let cmdline_off = (spec.dtb_gpa + blob.len() as u64 + 8) & !7;
        let mut cl = Vec::from(spec.cmdline.as_bytes());
        cl.push(0);
        st.copy_in(cmdline_off, &cl)
            .map_err(|e| format!("cmdline: {e}"))?;
        let stats = Arc::new(Stats::new());
        let mut states: Vec<VcpuState> = (0..vcpus).map(|i| VcpuState::new(i, &stats)).collect();
        let args = [0, layout::gpa_of(cmdline_off), layout::gpa_of(spec.dtb_gpa)];
        states[0].reset(0, entry, args);
        let affinity = if spec.affinity.mask != 0 {
            CpuMask(spec.affinity.mask).and(online)
        } else {
            CpuMask(online.0 & !pinned_elsewhere.0)
        };
        if affinity.is_empty() {
            return Err(String::from("cpus: no online pCPU left for this VM"));
        }
        Ok(VmParts {
            name: String::from(spec.name),
            arch: st,
            bus: devices.bus,
            stats,
            vcpus: states,
            affinity,
            pinned: spec.affinity.pinned,
            started: 1,
        })
    }
}

/// Loads an ELF's PT_LOAD segments at their physical address (masked to
/// 48 bits, as QEMU does); returns the entry (the raw `e_entry`).
fn load_elf(st: &VmState, elf: &[u8]) -> Result<u64, String> {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) {
        return Err(String::from("kernel: not a 64-bit ELF"));
    }
    let bad = || String::from("kernel: truncated ELF header");
    let entry = u64_at(24).ok_or_else(bad)?;
    let phoff = u64_at(32).ok_or_else(bad)? as usize;
    let phentsize = u16_at(54).ok_or_else(bad)? as usize;
    let phnum = u16_at(56).ok_or_else(bad)? as usize;
    if phentsize < 56 {
        return Err(String::from("kernel: bad program header size"));
    }
    let mut loaded = 0;
    for i in 0..phnum {
        let ph = phoff.checked_add(i * phentsize).ok_or_else(bad)?;
        if u32_at(ph) != Some(1) {
            continue;
        }
        let off = u64_at(ph + 8).ok_or_else(bad)? as usize;
        let paddr = u64_at(ph + 24).ok_or_else(bad)? & ((1 << 48) - 1);
        let filesz = u64_at(ph + 32).ok_or_else(bad)? as usize;
        let memsz = u64_at(ph + 40).ok_or_else(bad)?;
        let data = off
            .checked_add(filesz)
            .and_then(|end| elf.get(off..end))
            .ok_or_else(|| format!("kernel: segment {i} outside the file"))?;
        // The segment must be RAM from end to end (not across the device window).
        let off = st.ram_offset(paddr);
        let last = paddr
            .checked_add(memsz.max(1) - 1)
            .and_then(|l| st.ram_offset(l));
        let (Some(off), Some(last)) = (off, last) else {
            return Err(format!(
                "kernel: segment {i} at {paddr:#x} (+{memsz:#x}) is outside guest RAM"
            ));
        };
        if last - off != memsz.max(1) - 1 {
            return Err(format!(
                "kernel: segment {i} at {paddr:#x} (+{memsz:#x}) spans the device window"
            ));
        }
        st.copy_in(off, data).map_err(|e| format!("kernel: {e}"))?;
        loaded += 1;
    }
    if loaded == 0 {
        return Err(String::from("kernel: no loadable segment"));
    }
    Ok(entry)
}

/// `Platform::create_vms` (boot CPU).
pub fn create_vms(board: &BoardInfo, specs: Vec<VmSpec<'static>>, reserved_end: u64) -> usize {
    let policy = Package::parse(crate::vmconfig::package())
        .map(|p| match p.settings().fp_policy {
            PkgFpPolicy::Eager => FpPolicy::Eager,
            PkgFpPolicy::SaveOnPut => FpPolicy::SaveOnPut,
            _ => FpPolicy::Lazy,
        })
        .unwrap_or_default();
    let mut online = CpuMask::default();
    for i in 0..board.cpus.len().min(MAX_CPUS) {
        if crate::runtime::cpu(i).is_some_and(|c| c.is_online()) {
            online.0 |= 1 << i;
        }
    }
    let c2 = csr::cpucfg(2);
    let fp_level = if c2 & (1 << 7) != 0 {
        3
    } else if c2 & (1 << 6) != 0 {
        2
    } else {
        1
    };
    let backend = LaBackend {
        vmids: VmidAllocator::new(ASID_BITS - 2, board.cpus.len().clamp(1, MAX_CPUS)),
        policy,
        hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
        fp_level,
    };
    if board.backend == crate::board::Backend::LoongArchLvz {
        // An LVZ backend would be a second `Backend` chosen here; until it
        // exists, trap-and-emulate runs on LVZ hardware too.
        log::warn!("LVZ present, but kestrel has no LVZ backend yet: using trap-and-emulate");
    }
    log::info!(
        "LoongArch VMs: trap-and-emulate at PLV3, {}-bit VMIDs x {CONTEXTS} ASIDs, FP {} ({policy:?})",
        backend.vmids.bits(),
        ["none", "FP64", "LSX", "LASX"][fp_level as usize],
    );
    mem::init(&board.memory, reserved_end);
    log::info!("guest memory: {} MiB free", mem::free_bytes() >> 20);
    let hv = HV.call_once(|| Hypervisor::new(backend, online));
    let mut pinned = CpuMask::default();
    let mut created = Vec::new();
    for spec in &specs {
        let slot = created.len();
        let parts = hv
            .backend
            .build_vm(spec, slot, online, pinned)
            .and_then(|p| {
                let pin = if p.pinned {
                    p.affinity
                } else {
                    CpuMask::default()
                };
                hv.add_vm(p)
                    .map(|vm| (vm, pin))
                    .map_err(|e| format!("scheduler: {e:?}"))
            });
        match parts {
            Ok((vm, pin)) => {
                pinned.0 |= pin.0;
                console().lock().add_vm(&vm.name);
                log::info!(
                    "vm[{}] \"{}\" created: {} vCPU(s), {} MiB, entry {:#x}",
                    spec.index,
                    spec.name,
                    spec.vcpus,
                    spec.ram_size >> 20,
                    vm.vcpus[0].ctx.lock().frame.pc,
                );
                created.push(vm);
            }
            Err(e) => log::error!("VM refused: vm[{}] \"{}\": {e}", spec.index, spec.name),
        }
    }
    let n = created.len();
    VMS.call_once(|| created);
    n
}

/// `Platform::run_vms` (every online CPU).
pub fn run_vms(cpu: usize) -> ExitStatus {
    let Some(hv) = HV.get() else {
        return ExitStatus::Success;
    };
    if cpu >= MAX_CPUS {
        return ExitStatus::Failure;
    }
    hv.backend.init_cpu(cpu);
    hv.run_cpu(cpu, &OBSERVER);
    csr::irq_enable();
    hv.exit_status()
}
