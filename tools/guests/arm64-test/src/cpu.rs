//! CPU-local helpers: system registers, the EL1 virtual timer, interrupt
//! masking, and the per-CPU state shared between the vCPUs.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Most vCPUs the guest handles (GICv3 target lists hold 16 per cluster).
pub const MAX_CPUS: usize = 16;
/// The EL1 virtual timer's PPI.
pub const VTIMER_INTID: u32 = 27;

/// Reads a system register by name.
macro_rules! sysreg_read {
    ($name:literal) => {{
        let v: u64;
        // SAFETY: reading this system register at EL1 has no side effect.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $name), out(reg) v, options(nomem, nostack)) };
        v
    }};
}
pub(crate) use sysreg_read;

/// Writes a system register by name.
macro_rules! sysreg_write {
    ($name:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: the callers write registers whose effect is local to this
        // CPU's timer / interrupt state, which this guest owns.
        unsafe { core::arch::asm!(concat!("msr ", $name, ", {}"), "isb", in(reg) v, options(nostack)) };
    }};
}
pub(crate) use sysreg_write;

/// Reads a 32-bit device register. A single `ldr w, [x]` (no writeback,
/// no pair): a hypervisor emulating the device gets a valid syndrome
/// (ESR ISV = 1) for it, which compiler-chosen addressing modes do not
/// guarantee.
///
/// # Safety
///
/// `addr` must be a 4-byte aligned device register that may be read (its
/// side effects, such as acknowledging an interrupt, are the caller's).
pub unsafe fn mmio_read32(addr: usize) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees `addr` is a readable device register.
    unsafe { asm!("ldr {v:w}, [{a}]", a = in(reg) addr, v = out(reg) v, options(nostack)) };
    v
}

/// Writes a 32-bit device register with a single `str w, [x]` (see
/// [`mmio_read32`]).
///
/// # Safety
///
/// `addr` must be a 4-byte aligned device register that may be written
/// with `v`.
pub unsafe fn mmio_write32(addr: usize, v: u32) {
    // SAFETY: the caller guarantees `addr` is a writable device register.
    unsafe { asm!("str {v:w}, [{a}]", a = in(reg) addr, v = in(reg) v, options(nostack)) };
}

/// State one vCPU publishes to the others.
pub struct PerCpu {
    /// MPIDR affinity from the DTB (`reg` of `/cpus/cpu@N`).
    pub mpidr: AtomicU64,
    /// Set by the vCPU itself once it runs Rust code.
    pub online: AtomicBool,
    /// MPIDR_EL1 as the vCPU read it.
    pub seen_mpidr: AtomicU64,
    /// GICv2: this CPU's interface mask (GICD_ITARGETSR0).
    pub gic_iface: AtomicU32,
    /// Interrupts taken, per SGI.
    pub sgi: [AtomicU32; 16],
    /// GICv2: source CPU interface number of the last SGI + 1 (0 = none).
    pub sgi_source: AtomicU32,
    /// Virtual timer interrupts taken.
    pub ticks: AtomicU32,
    /// Other interrupts (unexpected INTIDs).
    pub other_irqs: AtomicU32,
    /// Last unexpected INTID.
    pub last_other: AtomicU32,
    /// Result of the last command (0 = fine, otherwise command-specific).
    pub result: AtomicU64,
    /// Detail of the last command.
    pub detail: AtomicU64,
}

impl PerCpu {
    const fn new() -> Self {
        PerCpu {
            mpidr: AtomicU64::new(0),
            online: AtomicBool::new(false),
            seen_mpidr: AtomicU64::new(0),
            gic_iface: AtomicU32::new(0),
            sgi: [const { AtomicU32::new(0) }; 16],
            sgi_source: AtomicU32::new(0),
            ticks: AtomicU32::new(0),
            other_irqs: AtomicU32::new(0),
            last_other: AtomicU32::new(0),
            result: AtomicU64::new(0),
            detail: AtomicU64::new(0),
        }
    }
}

/// Per-CPU state, indexed by the CPU's position in the DTB.
pub static CPUS: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];

/// This CPU's index (kept in TPIDR_EL1; 0 before [`set_index`]).
pub fn index() -> usize {
    (sysreg_read!("tpidr_el1") as usize).min(MAX_CPUS - 1)
}

/// Records this CPU's index.
pub fn set_index(i: usize) {
    sysreg_write!("tpidr_el1", i as u64);
}

/// MPIDR_EL1 affinity fields (Aff3, Aff2..Aff0).
pub fn mpidr() -> u64 {
    sysreg_read!("mpidr_el1") & 0xFF_00FF_FFFF
}

/// The virtual counter.
pub fn now() -> u64 {
    // SAFETY: an ISB orders the counter read after earlier instructions.
    unsafe { asm!("isb", options(nomem, nostack)) };
    sysreg_read!("cntvct_el0")
}

/// The physical counter (CNTPCT_EL0): the same in every VM, so windows
/// measured in different VMs can be compared.
pub fn phys_now() -> u64 {
    // SAFETY: an ISB orders the counter read after earlier instructions.
    unsafe { asm!("isb", options(nomem, nostack)) };
    sysreg_read!("cntpct_el0")
}

/// Counter ticks per second.
pub fn freq() -> u64 {
    sysreg_read!("cntfrq_el0").max(1)
}

/// Counter ticks in `us` microseconds (at least 1).
pub fn us_to_ticks(us: u64) -> u64 {
    (freq() * us / 1_000_000).max(1)
}

/// Counter ticks to microseconds.
pub fn ticks_to_us(t: u64) -> u64 {
    t.saturating_mul(1_000_000) / freq()
}

/// A deadline `us` microseconds from now.
pub fn deadline(us: u64) -> u64 {
    now() + us_to_ticks(us)
}

/// Fires the virtual timer once, `ticks` from now.
pub fn timer_arm(ticks: u64) {
    sysreg_write!("cntv_tval_el0", ticks.min(u32::MAX as u64));
    sysreg_write!("cntv_ctl_el0", 1);
}

/// Stops the virtual timer (and lowers its interrupt).
pub fn timer_stop() {
    sysreg_write!("cntv_ctl_el0", 0);
}

/// Unmasks IRQs.
pub fn irq_enable() {
    // SAFETY: the vectors and the GIC are set up before any caller unmasks.
    unsafe { asm!("msr daifclr, #2", options(nomem, nostack)) };
}

/// Masks IRQs.
pub fn irq_disable() {
    // SAFETY: masking interrupts is always allowed at EL1.
    unsafe { asm!("msr daifset, #2", options(nomem, nostack)) };
}

/// `YIELD`: a hint only, but QEMU's TCG ends the CPU's turn on it when
/// it runs its CPUs round robin (as under `-icount`), so a wait for
/// another CPU lets that CPU run instead of spinning out its turn.
pub fn yield_now() {
    // SAFETY: YIELD is a hint with no architectural effect.
    unsafe { asm!("yield", options(nomem, nostack)) };
}

/// Waits for an interrupt.
pub fn wfi() {
    // SAFETY: WFI only waits; a pending interrupt (or anything else) ends it.
    unsafe { asm!("dsb sy", "wfi", options(nomem, nostack)) };
}

/// Sleeps about `us` microseconds on the virtual timer (IRQs must be
/// unmasked on entry). Returns false if no timer interrupt arrived within a
/// second after the deadline.
pub fn sleep_us(us: u64) -> bool {
    let me = &CPUS[index()];
    let before = me.ticks.load(Ordering::Acquire);
    // Masked between the checks and the WFI: an interrupt taken there would
    // leave the WFI waiting for nothing. WFI still wakes on a pending one.
    irq_disable();
    timer_arm(us_to_ticks(us));
    let give_up = deadline(us + 1_000_000);
    let mut ok = true;
    while me.ticks.load(Ordering::Acquire) == before {
        if now() > give_up {
            timer_stop();
            ok = false;
            break;
        }
        wfi();
        irq_enable();
        irq_disable();
    }
    irq_enable();
    ok
}
