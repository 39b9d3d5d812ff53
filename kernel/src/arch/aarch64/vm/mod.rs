//! The arm64 VM backend: guests at EL1 under kestrel at EL2 (non-VHE), with
//! stage-2 translation, a virtual GIC (list registers + the portable model in
//! `crate::vgic`), the EL1 virtual timer, PSCI, lazy FP, VMIDs from the
//! allocator and kestrel's PV IPI. It implements [`crate::vm::Backend`];
//! scheduling, blocking and VM lifetime are the portable run loop's
//! (`crate::vm`). Design notes: docs/arm64-vm.md.

pub mod devices;
pub mod exits;
pub mod fp;
pub mod mem;
pub mod regs;
pub mod stage2;
pub mod switch;
pub mod vgic_hw;

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spin::{Mutex, Once};

use kestrel_abi::package::{ConsoleKind, Package};

use crate::board::{BoardInfo, IrqChip};
use crate::console::ConsoleMux;
use crate::fpu::{Arm64FpState, FpEngine, FpLoad, FpPolicy, VcpuFp};
use crate::guest::arm64::debug::DebugRegs;
use crate::guest::arm64::idregs::IdConfig;
use crate::guest::arm64::ptimer::PhysTimer;
use crate::haltpoll::{HaltPoll, PollEnd};
use crate::platform::ExitStatus;
use crate::sched::{CpuMask, VcpuKey};
use crate::stats::{Counter, Stats};
use crate::vdev::env::VmDeviceEnv;
use crate::vdev::pl011::Pl011 as VPl011;
use crate::vdev::uart::Uart;
use crate::vgic::mmio::SharedVgic;
use crate::vgic::{GicVersion, LrEntry, Vgic, VgicConfig, MAX_LRS};
use crate::vm::{Backend, Hypervisor, Observer, RunExit, Vcpu, Vm, VmEnd, VmParts};
use crate::vmconfig::{VmSpec, GUEST_GICC};
use crate::vmid::VmidAllocator;
use crate::MAX_CPUS;

use super::gic::{Gic, Priority};
use super::{exceptions, mmu, percpu, platform, timer};
use fp::Arm64FpHw;
use regs::{mrs, msr, El1Regs, PSTATE_EL1H_MASKED};
use stage2::Stage2;
use switch::GuestRegs;
use vgic_hw::{VgicCpu, VgicHw};

/// The physical SGI that kicks a pCPU out of its guest or its idle wait.
pub const KICK_SGI: u32 = 1;
/// The longest a WFI is polled before the vCPU blocks (`crate::haltpoll`).
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

// HCR_EL2 for guests, as KVM sets it.
const HCR_VM: u64 = 1 << 0;
const HCR_SWIO: u64 = 1 << 1;
const HCR_PTW: u64 = 1 << 2;
const HCR_FMO: u64 = 1 << 3;
const HCR_IMO: u64 = 1 << 4;
const HCR_AMO: u64 = 1 << 5;
const HCR_FB: u64 = 1 << 9;
const HCR_BSU_IS: u64 = 1 << 10;
const HCR_TWI: u64 = 1 << 13;
const HCR_TWE: u64 = 1 << 14;
const HCR_TID3: u64 = 1 << 18;
const HCR_TSC: u64 = 1 << 19;
const HCR_TIDCP: u64 = 1 << 20;
const HCR_TACR: u64 = 1 << 21;
const HCR_TSW: u64 = 1 << 22;
const HCR_RW: u64 = 1 << 31;
const HCR_TLOR: u64 = 1 << 35;
const HCR_TERR: u64 = 1 << 36;
/// API (41) and APK (40) stay clear: pointer authentication is hidden from
/// the guest (idregs), so its instructions and key registers trap to EL2
/// and are answered with UNDEF.
pub const HCR_GUEST: u64 = HCR_VM
    | HCR_SWIO
    | HCR_PTW
    | HCR_FMO
    | HCR_IMO
    | HCR_AMO
    | HCR_FB
    | HCR_BSU_IS
    | HCR_TWI
    | HCR_TWE
    | HCR_TID3
    | HCR_TSC
    | HCR_TIDCP
    | HCR_TACR
    | HCR_TSW
    | HCR_RW
    | HCR_TLOR
    | HCR_TERR;

/// MDCR_EL2: trap debug (TDA, TDOSA, TDRA: emulated from each vCPU's
/// shadow, `guest::arm64::debug`) and PMU (TPM, TPMCR: RAZ/WI, the ID
/// registers show no PMU) accesses. TDE = 0: debug exceptions from EL1/EL0
/// go to the guest's EL1. E2PB = E2TB = 0: profiling and trace buffer
/// controls trap. [`mdcr_guest`] adds TPMS and TTRF where implemented.
const MDCR_GUEST: u64 = (1 << 5) | (1 << 6) | (1 << 9) | (1 << 10) | (1 << 11);

/// MDCR_EL2 for guests on this CPU: [`MDCR_GUEST`], plus TPMS (SPE
/// sampling controls trap) with FEAT_SPE and TTRF (TRFCR_EL1 traps) with
/// FEAT_TRF; those bits are RES0 elsewhere.
fn mdcr_guest() -> u64 {
    let dfr0 = mrs!("id_aa64dfr0_el1");
    let mut v = MDCR_GUEST;
    if (dfr0 >> 32) & 0xf != 0 {
        v |= 1 << 14;
    }
    if (dfr0 >> 40) & 0xf != 0 {
        v |= 1 << 19;
    }
    v
}
/// CNTHCTL_EL2 (E2H = 0): EL1PCTEN (physical counter readable, no offset),
/// EL1PCEN clear (CNTP_CTL/CVAL/TVAL_EL0 trap and are emulated per vCPU).
const CNTHCTL_GUEST: u64 = 1;

/// Per-vCPU state other pCPUs touch.
pub struct VcpuShared {
    /// Physical counter value at which this (not loaded) vCPU's virtual
    /// timer fires, or `u64::MAX`.
    pub wake_at: AtomicU64,
    /// Physical counter value at which this (not loaded) vCPU's emulated
    /// physical timer raises PPI 30, or `u64::MAX`.
    pub ptimer_at: AtomicU64,
    /// Physical counter value at which this vCPU's WFIT times out (it
    /// blocked in one), or `u64::MAX`.
    pub wfxt_at: AtomicU64,
    /// A PSCI CPU_ON waiting to be applied at the next load: (entry, context).
    pub boot: Mutex<Option<(u64, u64)>>,
}

/// Per-VM architectural state.
pub struct VmState {
    /// Console number (= the VM's slot).
    pub console: usize,
    pub stage2: Stage2,
    pub ram_base: u64,
    pub ram_size: u64,
    /// Host frames backing guest RAM, 2 MiB each, in IPA order.
    pub frames: Vec<u64>,
    /// The virtual GIC, also behind the distributor and redistributor
    /// frames on the VM's bus (`devices`).
    pub vgic: SharedVgic,
    /// The PL011 on the VM's bus, for console input.
    pub uart: Arc<Uart<VPl011>>,
    pub cntvoff: u64,
    pub ids: IdConfig,
    pub shared: Vec<VcpuShared>,
}

/// Per-vCPU register file.
pub struct VcpuState {
    pub regs: GuestRegs,
    pub el1: El1Regs,
    pub gic: VgicCpu,
    pub fp: Arc<VcpuFp<Arm64FpState>>,
    pub vmpidr: u64,
    /// List registers filled at the last entry.
    pub lrs_used: usize,
    /// What the last fill put in them, while `lrs_live`.
    pub filled: heapless::Vec<LrEntry, MAX_LRS>,
    /// The list registers still hold `filled`, unsynced: the guest changed
    /// none of them since (the exit fast path, `sync_after_exit`).
    pub lrs_live: bool,
    /// The last exit blocked the vCPU (WFI, WFIT, PSCI CPU_SUSPEND): its
    /// put arms the pCPU's timer for its deadlines.
    pub blocking: bool,
    /// Adaptive halt polling of its WFIs, and when its last unpolled wait
    /// began (its length, known at the next load, adapts the window).
    pub halt: HaltPoll,
    pub blocked_at: Option<u64>,
    /// The virtual and physical timer levels last given to the vGIC model.
    pub vtimer_level: Option<bool>,
    pub ptimer_level: Option<bool>,
    /// The vCPU has run at least once (so its EL1 state is its own).
    pub started: bool,
    /// Length of the instruction that caused the last synchronous exit.
    pub ilen: u64,
    /// The emulated EL1 physical timer.
    pub ptimer: PhysTimer,
    /// The physical counter value at which a WFIT the vCPU blocked in
    /// times out (`u64::MAX`: none).
    pub wfxt_at: u64,
    /// The debug registers' shadow (loaded into the hardware when dirty).
    pub debug: DebugRegs,
}

impl VcpuState {
    fn new(index: usize, stats: &Arc<Stats>, dbg_points: (usize, usize)) -> VcpuState {
        VcpuState {
            regs: GuestRegs::default(),
            el1: El1Regs::reset(),
            gic: VgicCpu::default(),
            fp: Arc::new(VcpuFp::counted(Arm64FpState::default(), Arc::clone(stats))),
            vmpidr: (1 << 31) | crate::psci::vcpu_mpidr(index),
            lrs_used: 0,
            filled: heapless::Vec::new(),
            lrs_live: false,
            vtimer_level: None,
            ptimer_level: None,
            blocking: false,
            halt: HaltPoll::new(timer::frequency() / 1_000_000 * HALT_POLL_US),
            blocked_at: None,
            started: false,
            ilen: 4,
            ptimer: PhysTimer::default(),
            wfxt_at: u64::MAX,
            debug: DebugRegs::new(dbg_points.0, dbg_points.1),
        }
    }

    /// Architectural reset for an entry at `entry` with x0 = `x0` (boot and
    /// PSCI CPU_ON): EL1h, MMU off, DAIF masked.
    fn reset(&mut self, entry: u64, x0: u64) {
        self.regs = GuestRegs::default();
        self.regs.x[0] = x0;
        self.regs.pc = entry;
        self.regs.pstate = PSTATE_EL1H_MASKED;
        self.el1 = El1Regs::reset();
        self.gic = VgicCpu::default();
        self.ptimer = PhysTimer::default();
        self.debug = DebugRegs::new(self.debug.brps, self.debug.wrps);
    }
}

/// Per-pCPU state of the backend.
struct Pcpu {
    fp: Mutex<Option<FpEngine<Arm64FpHw>>>,
    /// vCPUs whose FP registers another pCPU wants written back.
    fp_requests: Mutex<Vec<Arc<VcpuFp<Arm64FpState>>>>,
    slice_expired: AtomicBool,
    /// Whether the physical virtual-timer PPI is enabled on this pCPU.
    vtimer_enabled: AtomicBool,
    /// A vCPU is loaded here.
    loaded: AtomicBool,
    /// The physical virtual-timer PPI was left active for the loaded vCPU.
    vtimer_forwarded: AtomicBool,
}

impl Pcpu {
    const fn new() -> Pcpu {
        Pcpu {
            fp: Mutex::new(None),
            fp_requests: Mutex::new(Vec::new()),
            slice_expired: AtomicBool::new(false),
            vtimer_enabled: AtomicBool::new(true),
            loaded: AtomicBool::new(false),
            vtimer_forwarded: AtomicBool::new(false),
        }
    }
}

static PCPU: [Pcpu; MAX_CPUS] = [const { Pcpu::new() }; MAX_CPUS];
static HV: Once<Hypervisor<Arm64Backend>> = Once::new();
static VMS: Once<Vec<Arc<Vm<Arm64Backend>>>> = Once::new();
static CONSOLE: Once<Mutex<ConsoleMux>> = Once::new();

/// The arm64 backend.
pub struct Arm64Backend {
    gic: Gic,
    hw: VgicHw,
    version: GicVersion,
    pub vmids: VmidAllocator,
    policy: FpPolicy,
    midr: u64,
    hw_ids: Vec<u64>,
    /// MDCR_EL2 for guests ([`mdcr_guest`]).
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
}

fn console() -> &'static Mutex<ConsoleMux> {
    CONSOLE.call_once(|| Mutex::new(ConsoleMux::new()))
}

/// The VMs, once created (no lock, no allocation: usable anywhere).
fn vms() -> &'static [Arc<Vm<Arm64Backend>>] {
    VMS.get().map_or(&[], |v| v.as_slice())
}

/// Called for every physical interrupt kestrel takes (exceptions::irq),
/// before its EOI.
pub fn host_irq(intid: u32) -> bool {
    let cpu = percpu::index();
    let Some(p) = PCPU.get(cpu) else {
        return false;
    };
    if intid == timer::PPI {
        p.slice_expired.store(true, Ordering::Release);
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

fn set_vtimer_phys(gic: &Gic, cpu: usize, enable: bool) {
    let p = &PCPU[cpu];
    if p.vtimer_enabled.load(Ordering::Relaxed) != enable {
        if enable {
            gic.enable_ppi(VTIMER_PPI, Priority::Normal);
        } else {
            gic.disable_ppi(VTIMER_PPI);
        }
        p.vtimer_enabled.store(enable, Ordering::Relaxed);
    }
}

/// Programs the hardware EL1 physical timer (free for kestrel: guest
/// accesses trap) to force an exit when the loaded vCPU's emulated timer
/// output rises; off when it cannot rise or is high already (the model then
/// drives PPI 30 directly).
fn ptimer_backing(t: &PhysTimer, now: u64) {
    match t.deadline() {
        Some(at) if at > now => {
            msr!("cntp_cval_el0", at);
            msr!("cntp_ctl_el0", 1);
        }
        _ => msr!("cntp_ctl_el0", 0),
    }
}

/// Puts the EL2 trap controls of later architecture versions in a known
/// state (their reset values are UNKNOWN): fine-grained traps (FEAT_FGT,
/// FEAT_FGT2) all zero, so no extra positive trap but every negative
/// ("n"-prefixed) trap on: EL1 state kestrel does not switch (TPIDR2_EL0,
/// PIR/POR_EL1, ACCDATA_EL1, GCS, BRBE, ...) traps and is answered with
/// UNDEF; HCRX_EL2 (FEAT_HCX) zero, so TCR2/SCTLR2/FPMR/MOPS-era state
/// traps or stays off. Registers a CPU does not implement are not touched.
fn el2_trap_defaults() {
    let mmfr0 = mrs!("id_aa64mmfr0_el1");
    let fgt = (mmfr0 >> 56) & 0xf;
    if fgt >= 1 {
        msr!("s3_4_c1_c1_4", 0); // HFGRTR_EL2
        msr!("s3_4_c1_c1_5", 0); // HFGWTR_EL2
        msr!("s3_4_c1_c1_6", 0); // HFGITR_EL2
        msr!("s3_4_c3_c1_4", 0); // HDFGRTR_EL2
        msr!("s3_4_c3_c1_5", 0); // HDFGWTR_EL2
    }
    if fgt >= 2 {
        msr!("s3_4_c3_c1_2", 0); // HFGRTR2_EL2
        msr!("s3_4_c3_c1_3", 0); // HFGWTR2_EL2
        msr!("s3_4_c3_c1_7", 0); // HFGITR2_EL2
        msr!("s3_4_c3_c1_0", 0); // HDFGRTR2_EL2
        msr!("s3_4_c3_c1_1", 0); // HDFGWTR2_EL2
    }
    if (mrs!("id_aa64mmfr1_el1") >> 40) & 0xf != 0 {
        msr!("s3_4_c1_c2_2", 0); // HCRX_EL2
    }
}

/// Whether the loaded vCPU's virtual timer asserts its interrupt now
/// (CNTV_CTL_EL0: ENABLE, not IMASK, ISTATUS).
fn vtimer_level() -> bool {
    mrs!("cntv_ctl_el0") & 0b111 == 0b101
}

impl Arm64Backend {
    /// Per-pCPU set-up before its run loop: FP engine, the PPIs and SGI the
    /// backend uses, guest-independent EL2 controls. IRQs stay masked at EL2
    /// except while idle.
    fn init_cpu(&self, cpu: usize) {
        *PCPU[cpu].fp.lock() = Some(FpEngine::new(cpu, self.policy, Arm64FpHw));
        self.gic.enable_split_eoi();
        self.gic.enable_ppi(KICK_SGI, Priority::Normal);
        self.gic.enable_ppi(MAINTENANCE_PPI, Priority::Normal);
        self.gic.enable_ppi(VTIMER_PPI, Priority::Normal);
        self.gic.enable_ppi(PTIMER_PPI, Priority::Normal);
        msr!("cntp_ctl_el0", 0);
        regs::put_debug();
        PCPU[cpu].vtimer_enabled.store(true, Ordering::Relaxed);
        if let VgicHw::V3 { .. } = self.hw {
            msr!("ich_hcr_el2", 0);
        }
        msr!("cnthctl_el2", CNTHCTL_GUEST);
        msr!("cntv_ctl_el0", 0);
        if self.ras {
            // kestrel never sets HCR_EL2.VSE: no virtual SError syndrome.
            msr!("s3_4_c5_c2_3", 0); // VSESR_EL2
        }
        el2_trap_defaults();
        // SAFETY: masks IRQs at EL2 on this CPU: the run loop takes them as
        // guest exits or in `idle`.
        unsafe { core::arch::asm!("msr daifset, #2", options(nomem, nostack)) };
    }

    fn flush_tlb(&self) {
        stage2::flush_all_vmids();
    }

    /// Services other pCPUs' requests to write back FP state live here.
    fn service_fp(&self, cpu: usize) {
        let reqs = core::mem::take(&mut *PCPU[cpu].fp_requests.lock());
        if reqs.is_empty() {
            return;
        }
        let mut e = PCPU[cpu].fp.lock();
        if let Some(engine) = e.as_mut() {
            for r in reqs {
                engine.vcpu_migrate(&r);
            }
        }
    }

    /// Physical counter now.
    fn now(&self) -> u64 {
        timer::counter()
    }

    /// Fires the timers of vCPUs that are not loaded and whose deadline
    /// has passed: the virtual timer (PPI 27) and the emulated physical
    /// timer (PPI 30) make their interrupt pending and wake the vCPU if it
    /// can take it; a WFIT timeout wakes it unconditionally.
    fn check_timers(&self, cpu: usize) {
        let Some(hv) = HV.get() else { return };
        let now = self.now();
        for vm in vms() {
            if vm.has_ended() {
                continue;
            }
            for (i, sh) in vm.arch.shared.iter().enumerate() {
                let fired = |at: &AtomicU64| {
                    let t = at.load(Ordering::Acquire);
                    t <= now
                        && at
                            .compare_exchange(t, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok()
                };
                let mut wake = false;
                for (at, ppi) in [(&sh.wake_at, VTIMER_PPI), (&sh.ptimer_at, PTIMER_PPI)] {
                    if fired(at) {
                        // Only a deliverable interrupt wakes a WFI (a guest
                        // that disabled the PPI stays blocked, without
                        // re-checks).
                        wake |= vm.arch.vgic.lock().set_level(i, ppi, true).contains(i);
                    }
                }
                wake |= fired(&sh.wfxt_at);
                if wake {
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

    /// The earliest timer deadline (virtual, physical, WFIT) of a vCPU
    /// that is not loaded.
    fn next_deadline(&self) -> u64 {
        vms()
            .iter()
            .filter(|vm| !vm.has_ended())
            .flat_map(|vm| vm.arch.shared.iter())
            .map(|s| {
                s.wake_at
                    .load(Ordering::Relaxed)
                    .min(s.ptimer_at.load(Ordering::Relaxed))
                    .min(s.wfxt_at.load(Ordering::Relaxed))
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Console input (boot CPU): the physical UART's bytes go to the VM
    /// with the focus.
    fn poll_console(&self, cpu: usize) {
        if cpu != 0 {
            return;
        }
        let Some(hv) = HV.get() else { return };
        crate::console::pump_input(
            console(),
            |i| vms().get(i).map(|vm| vm.arch.uart.regs()),
            platform::console_read,
            |i, u| {
                if let Some(vm) = vms().get(i) {
                    vm.arch
                        .uart
                        .update_line(u, &mut VmDeviceEnv::host(hv, vm, cpu));
                }
            },
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

    /// Before an entry: the virtual timer's level into the model, the list
    /// registers from the model, the physical timer PPI as the level needs.
    fn prepare_entry(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let level = vtimer_level();
        let now = self.now();
        let fill = {
            let mut g = vm.arch.vgic.lock();
            if ctx.vtimer_level != Some(level) {
                g.set_level(vcpu.index, VTIMER_PPI, level);
                ctx.vtimer_level = Some(level);
            }
            let plevel = ctx.ptimer.level(now);
            if ctx.ptimer_level != Some(plevel) {
                g.set_level(vcpu.index, PTIMER_PPI, plevel);
                ctx.ptimer_level = Some(plevel);
            }
            // Fast path: nothing changed since the last fill and the list
            // registers still hold it: enter as they are.
            if ctx.lrs_live && !g.fill_needed(vcpu.index) {
                drop(g);
                ptimer_backing(&ctx.ptimer, now);
                return;
            }
            g.fill_lrs(vcpu.index, self.hw.nr_lrs())
        };
        ptimer_backing(&ctx.ptimer, now);
        // The physical timer PPI: left active for the guest while the
        // virtual one is in a list register (HW bit); otherwise deactivated,
        // and disabled while its level is high but the guest cannot take it
        // (so it does not fire again and again).
        let in_lr = fill.lrs.iter().any(|e| e.intid == VTIMER_PPI);
        let p = &PCPU[cpu];
        if !in_lr && p.vtimer_forwarded.swap(false, Ordering::AcqRel) {
            self.gic.clear_active_ppi(VTIMER_PPI);
        }
        set_vtimer_phys(&self.gic, cpu, in_lr || !level);
        self.hw.write_lrs(&fill, ctx.lrs_used);
        ctx.lrs_used = fill.lrs.len();
        ctx.filled = fill.lrs;
        ctx.lrs_live = true;
    }

    /// After an exit: the list registers back into the model, unless the
    /// guest changed none of them and none holds a pending interrupt (a
    /// WFI must find those in the model): then they stay live, handed out
    /// as filled (the model reads and writes them through its in-flight
    /// state), and the next entry keeps them if nothing else changed.
    fn sync_after_exit(&self, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let mut lrs: heapless::Vec<LrEntry, MAX_LRS> = heapless::Vec::new();
        self.hw.read_lrs(ctx.lrs_used, &mut lrs);
        let level = vtimer_level();
        let plevel = ctx.ptimer.level(self.now());
        let unchanged = ctx.lrs_live
            && lrs.len() == ctx.filled.len()
            && lrs
                .iter()
                .zip(&ctx.filled)
                .all(|(now, was)| now.intid == was.intid && now.state == was.state)
            && !lrs.iter().any(|e| e.state.is_pending());
        if unchanged && ctx.vtimer_level == Some(level) && ctx.ptimer_level == Some(plevel) {
            return;
        }
        let mut g = vm.arch.vgic.lock();
        if !unchanged {
            g.sync_lrs(vcpu.index, &lrs);
            ctx.lrs_live = false;
        }
        g.set_level(vcpu.index, VTIMER_PPI, level);
        g.set_level(vcpu.index, PTIMER_PPI, plevel);
        ctx.vtimer_level = Some(level);
        ctx.ptimer_level = Some(plevel);
    }

    /// A WFI found nothing to take: poll for up to the vCPU's halt-poll
    /// window whether something arrives, while nobody else wants this pCPU
    /// and no physical interrupt waits (a kick, the tick: the guest goes
    /// back in and takes the exit for it, which a WFI may). Returns whether
    /// the vCPU has work now (no block then).
    pub fn halt_poll(
        &self,
        hv: &Hypervisor<Self>,
        cpu: usize,
        vm: &Vm<Self>,
        vcpu: &Vcpu<Self>,
        ctx: &mut VcpuState,
    ) -> bool {
        let halt = ctx.halt;
        let end = halt.poll(
            timer::counter,
            || self.has_work(vm, vcpu, ctx),
            // ISR_EL1 at EL2: a physical IRQ is pending.
            || mrs!("isr_el1") & (1 << 7) != 0,
            || hv.sched.should_preempt(cpu),
        );
        end != PollEnd::Expired
    }

    /// Whether the loaded vCPU has an interrupt to take (WFI would wake).
    pub fn has_work(&self, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) -> bool {
        let level = vtimer_level();
        let plevel = ctx.ptimer.level(self.now());
        let mut g = vm.arch.vgic.lock();
        g.set_level(vcpu.index, VTIMER_PPI, level);
        g.set_level(vcpu.index, PTIMER_PPI, plevel);
        ctx.vtimer_level = Some(level);
        ctx.ptimer_level = Some(plevel);
        g.has_pending(vcpu.index)
    }
}

impl Backend for Arm64Backend {
    type VmState = VmState;
    type VcpuState = VcpuState;

    fn load(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let sh = &vm.arch.shared[vcpu.index];
        sh.wake_at.store(u64::MAX, Ordering::Release);
        sh.ptimer_at.store(u64::MAX, Ordering::Release);
        sh.wfxt_at.store(u64::MAX, Ordering::Release);
        // Running again ends any WFIT wait.
        ctx.wfxt_at = u64::MAX;
        if let Some((entry, x0)) = sh.boot.lock().take() {
            ctx.reset(entry, x0);
        }
        ctx.started = true;
        if let Some(at) = ctx.blocked_at.take() {
            ctx.halt.blocked_for(timer::counter().saturating_sub(at));
        }
        // VMID: from the allocator on every load.
        let before = self.vmids.counters();
        let l = self.vmids.vcpu_load(cpu, &vm.vmid, &|| self.flush_tlb());
        let after = self.vmids.counters();
        vm.stats.record_vmid(&l);
        vm.stats
            .add(Counter::VmidRollovers, after.rollovers - before.rollovers);
        vm.stats
            .add(Counter::TlbFlushes, after.flushes - before.flushes);
        msr!("vtcr_el2", vm.arch.stage2.vtcr());
        msr!("vttbr_el2", vm.arch.stage2.vttbr(l.vmid));
        if l.flush_local {
            // Only needed where the rollover flush is not broadcast; cheap
            // insurance here: this VMID's stale entries go.
            // SAFETY: TLB maintenance of the current VMID only.
            unsafe {
                core::arch::asm!("isb", "tlbi vmalls12e1", "dsb nsh", "isb", options(nostack))
            };
        }
        msr!("hcr_el2", HCR_GUEST);
        msr!("vpidr_el2", self.midr);
        msr!("vmpidr_el2", ctx.vmpidr);
        msr!("cntvoff_el2", vm.arch.cntvoff);
        let hpmn = mrs!("mdcr_el2") & 0x1f;
        msr!("mdcr_el2", self.mdcr | hpmn);
        msr!("cnthctl_el2", CNTHCTL_GUEST);
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
        loop {
            // (Register moves count themselves in their own VM's stats.)
            let r = PCPU[cpu].fp.lock().as_mut().map(|e| e.vcpu_load(&ctx.fp));
            match r {
                Some(FpLoad::LiveOn(p)) if p < MAX_CPUS => {
                    PCPU[p].fp_requests.lock().push(ctx.fp.clone());
                    self.kick(p);
                    while ctx.fp.live_on() == Some(p) {
                        if vm.has_ended() {
                            // The run loop drops this vCPU at once; `p` may
                            // have left its run loop already.
                            return;
                        }
                        self.service_fp(cpu);
                        core::hint::spin_loop();
                    }
                }
                _ => break,
            }
        }
        // SAFETY: barrier only: the EL2 controls above take effect.
        unsafe { core::arch::asm!("isb", options(nostack, preserves_flags)) };
    }

    fn run(
        &self,
        hv: &Hypervisor<Self>,
        cpu: usize,
        vm: &Vm<Self>,
        vcpu: &Vcpu<Self>,
        ctx: &mut VcpuState,
    ) -> RunExit {
        self.prepare_entry(cpu, vm, vcpu, ctx);
        let kind = switch::enter(&mut ctx.regs);
        let esr = mrs!("esr_el2");
        let far = mrs!("far_el2");
        let hpfar = mrs!("hpfar_el2");
        self.sync_after_exit(vm, vcpu, ctx);
        let exit = match kind {
            // Lower EL in AArch64 (8-11) or AArch32 (12-15, an EL0 the
            // guest kernel entered although AArch32 is hidden).
            8 | 12 => exits::sync(self, hv, cpu, vm, vcpu, ctx, esr, far, hpfar),
            9 | 10 | 13 | 14 => {
                vm.stats.exit(crate::stats::ExitReason::Irq);
                if let Some(intid) = exceptions::irq() {
                    if intid == timer::PPI {
                        self.check_timers(cpu);
                        self.poll_console(cpu);
                    }
                }
                RunExit::Continue
            }
            _ => RunExit::VmEnd(VmEnd::Fatal(format!(
                "SError from the guest (ESR_EL2 {esr:#x}) on vCPU {}",
                vcpu.index
            ))),
        };
        self.service_fp(cpu);
        ctx.blocking = matches!(exit, RunExit::Block);
        exit
    }

    fn put(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        ctx.el1.save(self.ras);
        if ctx.debug.dirty {
            regs::put_debug();
        }
        self.hw.put(&mut ctx.gic);
        ctx.lrs_used = 0;
        ctx.lrs_live = false;
        {
            let mut e = PCPU[cpu].fp.lock();
            if let Some(engine) = e.as_mut() {
                engine.vcpu_put();
            }
        }
        self.vmids.vcpu_put(cpu);
        msr!("hcr_el2", mmu::HCR_BOOT);
        // The virtual timer of a vCPU that is not loaded is watched by
        // kestrel's timer: this pCPU's fires no later than the deadline
        // (whatever runs here meanwhile), and the handler wakes the vCPU
        // (`check_timers`). Left to the periodic tick, a vCPU blocked in WFI
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
            let sh = &vm.arch.shared[vcpu.index];
            let ptimer_at = ctx.ptimer.deadline().unwrap_or(u64::MAX);
            sh.wake_at.store(deadline, Ordering::Release);
            sh.ptimer_at.store(ptimer_at, Ordering::Release);
            sh.wfxt_at.store(ctx.wfxt_at, Ordering::Release);
            // Only a vCPU that blocks needs waking; a preempted one finds
            // its timers when it runs next.
            let first = deadline.min(ptimer_at).min(ctx.wfxt_at);
            if ctx.blocking && first != u64::MAX {
                timer::arm_before(first);
            }
        }
        PCPU[cpu].loaded.store(false, Ordering::Release);
        if PCPU[cpu].vtimer_forwarded.swap(false, Ordering::AcqRel) {
            self.gic.clear_active_ppi(VTIMER_PPI);
        }
        set_vtimer_phys(&self.gic, cpu, true);
    }

    fn kick(&self, cpu: usize) {
        if let Some(&mpidr) = self.hw_ids.get(cpu) {
            self.gic.send_sgi(cpu, mpidr, KICK_SGI);
        }
    }

    fn idle(&self, cpu: usize) {
        self.service_fp(cpu);
        self.check_timers(cpu);
        self.poll_console(cpu);
        let deadline = self.next_deadline();
        if deadline != u64::MAX {
            timer::arm_before(deadline);
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
        self.service_fp(cpu);
        self.check_timers(cpu);
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
}

struct LogObserver;

impl Observer for LogObserver {
    fn vm_ended(&self, vm: &str, why: &VmEnd) {
        if let Some(v) = vms().iter().find(|v| v.name == vm) {
            let mut mux = console().lock();
            if let Some(line) = mux.flush(v.arch.console) {
                crate::klog::print(format_args!("{line}"));
            }
            drop(mux);
            log::info!("VM \"{vm}\" {why}; stats: {}", v.stats);
        } else {
            log::info!("VM \"{vm}\" {why}");
        }
        // Its VMID may be recycled: no stale translation may survive.
        stage2::flush_all_vmids();
    }

    fn all_ended(&self) {
        log::info!("the last VM has ended");
    }
}

static OBSERVER: LogObserver = LogObserver;

/// Copies `data` into guest RAM at `gpa`.
fn copy_to_guest(st: &VmState, gpa: u64, data: &[u8]) -> Result<(), String> {
    let end = gpa
        .checked_add(data.len() as u64)
        .ok_or_else(|| String::from("address overflow"))?;
    if gpa < st.ram_base || end > st.ram_base + st.ram_size {
        return Err(format!(
            "[{gpa:#x}, {end:#x}) lies outside guest RAM [{:#x}, {:#x})",
            st.ram_base,
            st.ram_base + st.ram_size
        ));
    }
    let mut done = 0usize;
    while done < data.len() {
        let off = gpa - st.ram_base + done as u64;
        let frame = st.frames[(off / stage2::BLOCK) as usize];
        let within = off % stage2::BLOCK;
        let n = ((stage2::BLOCK - within) as usize).min(data.len() - done);
        let dst = (frame + within) as usize;
        // SAFETY: `dst..dst + n` lies inside one 2 MiB frame owned by this
        // VM (allocated by mem::alloc_frames, identity mapped as Normal
        // memory), and `data[done..done + n]` is a valid source.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(done), dst as *mut u8, n) };
        mmu::clean_dcache_range(dst, dst + n);
        done += n;
    }
    Ok(())
}

impl Arm64Backend {
    fn build_vm(
        &self,
        board: &BoardInfo,
        spec: &VmSpec<'static>,
        console: usize,
        online: CpuMask,
        pinned_elsewhere: CpuMask,
    ) -> Result<VmParts<Self>, String> {
        if spec.console != ConsoleKind::Pl011 {
            return Err(String::from(
                "console: only the PL011 is emulated on arm64 (console = \"pl011\")",
            ));
        }
        let vcpus = spec.vcpus as usize;
        let vgic = Vgic::new(VgicConfig {
            version: self.version,
            vcpus,
            nr_spis: NR_SPIS,
        })
        .map_err(|e| format!("vcpus: {e:?} for this GIC"))?;
        let mut vgic = vgic;
        for v in 0..vcpus {
            // The virtual timer is forwarded: the guest's deactivation
            // deactivates the physical PPI (no maintenance exit).
            vgic.set_hw_mapping(v, VTIMER_PPI, Some(VTIMER_PPI as u16));
        }
        let v3 = self.version == GicVersion::V3;
        let mut s2 = Stage2::new(self.vmids.bits() > 8);
        let ram_end = spec.ram_base + spec.ram_size;
        if ram_end > 1 << s2.ipa_bits() {
            return Err(format!(
                "memory: guest RAM ends at {ram_end:#x}, beyond the {}-bit stage-2 space",
                s2.ipa_bits()
            ));
        }
        let frames = mem::alloc_frames(spec.ram_size).ok_or_else(|| {
            format!(
                "memory: {} MiB needed, only {} MiB of host memory left",
                spec.ram_size >> 20,
                mem::free_bytes() >> 20
            )
        })?;
        for (i, &f) in frames.iter().enumerate() {
            s2.map_ram_block(spec.ram_base + i as u64 * stage2::BLOCK, f)
                .map_err(|e| format!("stage 2: {e:?}"))?;
        }
        if !v3 {
            let gicv = match board.irqchip {
                IrqChip::GicV2 { gicv: Some(v), .. } => v,
                _ => return Err(String::from("GICv2 host without a GICV frame in its DTB")),
            };
            for page in 0..2 {
                s2.map_device_page(GUEST_GICC.0 + page * 4096, gicv + page * 4096)
                    .map_err(|e| format!("stage 2 (GICV): {e:?}"))?;
            }
        }
        s2.publish();
        let ids = IdConfig {
            gic_v3: v3,
            ipa_bits: s2.ipa_bits(),
        };
        let devices = devices::build(vgic)?;
        let st = VmState {
            console,
            stage2: s2,
            ram_base: spec.ram_base,
            ram_size: spec.ram_size,
            frames,
            vgic: devices.vgic,
            uart: devices.uart,
            cntvoff: timer::counter(),
            ids,
            shared: (0..vcpus)
                .map(|_| VcpuShared {
                    wake_at: AtomicU64::new(u64::MAX),
                    ptimer_at: AtomicU64::new(u64::MAX),
                    wfxt_at: AtomicU64::new(u64::MAX),
                    boot: Mutex::new(None),
                })
                .collect(),
        };
        copy_to_guest(&st, spec.kernel_gpa, spec.kernel).map_err(|e| format!("kernel: {e}"))?;
        if let Some(initrd) = spec.initrd {
            copy_to_guest(&st, spec.initrd_gpa, initrd).map_err(|e| format!("initrd: {e}"))?;
        }
        let dtb = spec.guest_dtb(v3);
        copy_to_guest(&st, spec.dtb_gpa, &dtb).map_err(|e| format!("dtb: {e}"))?;
        // SAFETY: invalidates the instruction cache so the copied kernel is
        // fetched from memory.
        unsafe { core::arch::asm!("dsb ish", "ic ialluis", "dsb ish", "isb", options(nostack)) };
        let stats = Arc::new(Stats::new());
        let mut states: Vec<VcpuState> = (0..vcpus)
            .map(|i| VcpuState::new(i, &stats, self.dbg_points))
            .collect();
        states[0].reset(spec.entry_gpa, spec.dtb_gpa);
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

/// `Platform::create_vms` for arm64 (boot CPU, after the banner).
pub fn create_vms(
    board: &BoardInfo,
    specs: Vec<VmSpec<'static>>,
    reserved: &[(u64, u64)],
) -> usize {
    let Some(gic) = platform::gic().copied() else {
        return 0;
    };
    let (hw, version) = match board.irqchip {
        IrqChip::GicV3 { .. } => (VgicHw::probe_v3(), GicVersion::V3),
        IrqChip::GicV2 { gich: Some(h), .. } => (VgicHw::probe_v2(h as usize), GicVersion::V2),
        _ => {
            log::error!("no virtual GIC interface (GICv2 without GICH in the DTB): no VM can run");
            return 0;
        }
    };
    let policy = Package::parse(crate::vmconfig::package())
        .map(|p| match p.settings().fp_policy {
            kestrel_abi::package::FpPolicy::Eager => FpPolicy::Eager,
            kestrel_abi::package::FpPolicy::SaveOnPut => FpPolicy::SaveOnPut,
            _ => FpPolicy::Lazy,
        })
        .unwrap_or_default();
    let mut online = CpuMask::default();
    for i in 0..board.cpus.len().min(MAX_CPUS) {
        if crate::runtime::cpu(i).is_some_and(|c| c.is_online()) {
            online.0 |= 1 << i;
        }
    }
    let vmid_bits = stage2::host_vmid_bits();
    let usable_bits = if cfg!(feature = "vmid4") {
        vmid_bits.min(4)
    } else {
        vmid_bits
    };
    let cpus = board.cpus.len().clamp(1, MAX_CPUS);
    if cpus + 2 > 1 << usable_bits {
        log::error!(
            "{cpus} CPUs cannot share {usable_bits}-bit VMIDs (each CPU may hold one across a \
             rollover): no VM can run"
        );
        return 0;
    }
    let backend = Arm64Backend {
        gic,
        hw,
        version,
        vmids: VmidAllocator::new(vmid_bits, cpus),
        policy,
        midr: mrs!("midr_el1"),
        ras: (mrs!("id_aa64pfr0_el1") >> 28) & 0xf != 0,
        mdcr: mdcr_guest(),
        wfxt: mrs!("s3_0_c0_c6_2") & 0xf >= 2,
        dbg_points: {
            let dfr0 = mrs!("id_aa64dfr0_el1");
            (
                ((dfr0 >> 12) & 0xf) as usize + 1,
                ((dfr0 >> 20) & 0xf) as usize + 1,
            )
        },
        hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
    };
    log::info!(
        "arm64 VMs: GICv{} virtual interface with {} list registers, {}-bit VMIDs, \
         {}-bit IPA, FP policy {:?}",
        if version == GicVersion::V3 { 3 } else { 2 },
        hw.nr_lrs(),
        backend.vmids.bits(),
        stage2::host_pa_bits().min(40),
        policy
    );
    mem::init(&board.memory, reserved, mmu::VA_LIMIT);
    log::info!("guest memory: {} MiB free", mem::free_bytes() >> 20);
    let hv = HV.call_once(|| Hypervisor::new(backend, online));
    let mut pinned = CpuMask::default();
    let mut created = Vec::new();
    for spec in &specs {
        let slot = created.len();
        let parts = hv
            .backend
            .build_vm(board, spec, slot, online, pinned)
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
                    "vm[{}] \"{}\" created: {} vCPU(s), {} MiB at {:#x}, entry {:#x}, DTB at {:#x}",
                    spec.index,
                    spec.name,
                    spec.vcpus,
                    spec.ram_size >> 20,
                    spec.ram_base,
                    spec.entry_gpa,
                    spec.dtb_gpa
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

/// `Platform::run_vms` for arm64 (every online CPU).
pub fn run_vms(cpu: usize) -> ExitStatus {
    let Some(hv) = HV.get() else {
        return ExitStatus::Success;
    };
    if cpu >= MAX_CPUS {
        return ExitStatus::Failure;
    }
    hv.backend.init_cpu(cpu);
    hv.run_cpu(cpu, &OBSERVER);
    // SAFETY: back to the boot flow, which idles with IRQs enabled.
    unsafe { core::arch::asm!("msr daifclr, #2", options(nomem, nostack)) };
    hv.exit_status()
}
