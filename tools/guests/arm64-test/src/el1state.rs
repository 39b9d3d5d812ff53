//! Checks of EL1 state a hypervisor must switch or emulate per vCPU:
//! DISR_EL1 across vCPU switches, the EL1 physical timer (PPI 30), WFIT's
//! timeout, and the self-hosted debug registers (a breakpoint, a
//! watchpoint and one software step). The boot vCPU calls the `check_*`
//! functions; the per-vCPU parts run on every vCPU through
//! [`crate::smp::Cmd::El1State`] and [`execute`]. They pass on bare QEMU
//! too (`docs/test-guest.md`).

use crate::checks::Verdict;
use crate::cpu::{self, sysreg_read, CPUS};
use crate::exceptions::Frame;
use crate::msg;
use crate::smp::{run_everywhere, Cmd};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The EL1 physical timer's PPI.
pub const PTIMER_INTID: u32 = 30;

/// Sub-commands of [`Cmd::El1State`].
const DISR: u64 = 1;
const PTIMER: u64 = 2;
const WFIT: u64 = 3;

/// Rounds of the DISR check per vCPU.
const DISR_ROUNDS: u64 = 16;
/// Rounds of the physical-timer check per vCPU (half waiting in WFI, half
/// spinning with interrupts on).
const PTIMER_ROUNDS: u64 = 4;
/// Physical-timer sleep.
const PTIMER_US: u64 = 2_000;
/// WFIT rounds per vCPU and their timeout.
const WFIT_ROUNDS: u64 = 2;
const WFIT_US: u64 = 10_000;
/// A WFIT may end this late and still pass: the vCPU wakes at the
/// deadline but may wait for its turn on a pCPU (the rollover case runs 40
/// vCPUs on 4 pCPUs under TCG on a shared machine; 327 ms was seen). A
/// WFIT whose timeout kestrel ignored ends only at the 2 s backstop.
const WFIT_SLACK_US: u64 = 1_000_000;

/// Writes a system register (and synchronizes).
macro_rules! wr {
    ($name:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: the registers written here (DISR_EL1, the EL1 physical
        // timer, MDSCR_EL1, OSLAR_EL1, breakpoint/watchpoint 0) only
        // affect this vCPU's own error record, timer and debug events,
        // which these checks own while they run.
        unsafe { core::arch::asm!(concat!("msr ", $name, ", {}"), "isb", in(reg) v, options(nostack)) };
    }};
}

/// Per-vCPU physical-timer interrupts.
static PTICKS: [AtomicU32; cpu::MAX_CPUS] = [const { AtomicU32::new(0) }; cpu::MAX_CPUS];
/// CNTP_CTL_EL0 as the last interrupt saw it.
static PT_CTL: [AtomicU64; cpu::MAX_CPUS] = [const { AtomicU64::new(0) }; cpu::MAX_CPUS];
/// CNTPCT_EL0 at the last interrupt.
static PT_AT: [AtomicU64; cpu::MAX_CPUS] = [const { AtomicU64::new(0) }; cpu::MAX_CPUS];

/// The physical counter.
fn pct() -> u64 {
    // SAFETY: an ISB orders the counter read after earlier instructions.
    unsafe { core::arch::asm!("isb", options(nomem, nostack)) };
    sysreg_read!("cntpct_el0")
}

/// PPI 30 (from the GIC's interrupt handler): records the timer state,
/// then stops the timer, which lowers the interrupt.
pub fn ptimer_irq() {
    let me = cpu::index();
    PT_CTL[me].store(sysreg_read!("cntp_ctl_el0"), Ordering::Relaxed);
    PT_AT[me].store(pct(), Ordering::Relaxed);
    wr!("cntp_ctl_el0", 0);
    PTICKS[me].fetch_add(1, Ordering::Release);
}

/// Runs sub-command `arg` on this vCPU: (0 or a failure code, detail).
pub fn execute(arg: u64) -> (u64, u64) {
    match arg {
        DISR => disr_rounds(),
        PTIMER => ptimer_rounds(),
        WFIT => wfit_rounds(),
        _ => (0, 0),
    }
}

fn results(all: u32) -> impl Iterator<Item = (usize, u64, u64)> {
    (0..32).filter(move |i| all & (1 << i) != 0).map(|i| {
        (
            i,
            CPUS[i].result.load(Ordering::Acquire),
            CPUS[i].detail.load(Ordering::Acquire),
        )
    })
}

// ---------------------------------------------------------------------------
// DISR_EL1

/// DISR_EL1 bits that hold state (A, IDS, ISS); the rest are RES0.
const DISR_BITS: u64 = 0x81FF_FFFF;

/// Writes a per-vCPU, per-round pattern into DISR_EL1, gives the pCPU up
/// (WFI with a 300 µs timer, or a spin every fourth round), and reads it
/// back. A hypervisor that does not switch DISR (VDISR_EL2) hands the
/// value of whatever ran meanwhile on that pCPU, or loses it on migration.
fn disr_rounds() -> (u64, u64) {
    let seed = cpu::now().wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ cpu::mpidr().rotate_left(17);
    let mut result = (0, 0);
    for i in 0..DISR_ROUNDS {
        let mut pattern = seed.wrapping_add(i.wrapping_mul(0xA24B_AED4_963E_E407)) & DISR_BITS;
        pattern |= 1 << (i % 24);
        wr!("s3_0_c12_c1_1", pattern);
        if i % 4 == 3 {
            let t = cpu::deadline(300);
            while cpu::now() < t {
                core::hint::spin_loop();
            }
        } else {
            cpu::sleep_us(300);
        }
        let got = sysreg_read!("s3_0_c12_c1_1") & DISR_BITS;
        if got != pattern {
            result = (i + 1, got ^ pattern);
            break;
        }
    }
    wr!("s3_0_c12_c1_1", 0);
    result
}

pub fn check_disr(all: u32, kestrel: bool) -> Verdict {
    // FEAT_RAS: DISR_EL1 exists. kestrel hides RAS but switches DISR.
    if !kestrel && (sysreg_read!("id_aa64pfr0_el1") >> 28) & 0xf == 0 {
        return Verdict::Skip("no FEAT_RAS: no DISR_EL1");
    }
    if !run_everywhere(Cmd::El1State, DISR, 60_000_000) {
        return Verdict::Fail(msg!("not every vCPU finished {DISR_ROUNDS} DISR rounds"));
    }
    for (i, r, d) in results(all) {
        if r != 0 {
            return Verdict::Fail(msg!(
                "CPU {i}: round {r}: DISR_EL1 changed across a yield (changed bits {d:#x}): \
                 another vCPU's value or a lost one"
            ));
        }
    }
    Verdict::Pass(msg!(
        "{DISR_ROUNDS} patterns per vCPU on {} vCPUs survived WFI blocks and preemption",
        all.count_ones()
    ))
}

// ---------------------------------------------------------------------------
// The EL1 physical timer

/// Failure codes of [`ptimer_rounds`] (detail: the round).
const PT_NO_IRQ: u64 = 1;
const PT_EARLY: u64 = 2;
const PT_NO_ISTATUS: u64 = 3;
const PT_TWICE: u64 = 4;
const PT_POLL: u64 = 5;
const PT_TVAL: u64 = 6;

/// Arms the physical timer `PTIMER_US` ahead with CNTP_TVAL_EL0 and waits
/// for PPI 30: in WFI (the vCPU blocks: a hypervisor must wake it from its
/// own deadline), or spinning with interrupts on (it keeps running: the
/// interrupt must arrive while it runs). The interrupt must come once, not
/// before CVAL, with ISTATUS set; TVAL must count down. Then one round
/// masked (IMASK): ISTATUS is polled, no interrupt may arrive.
fn ptimer_rounds() -> (u64, u64) {
    let me = cpu::index();
    let ticks = cpu::us_to_ticks(PTIMER_US);
    for round in 0..PTIMER_ROUNDS {
        let before = PTICKS[me].load(Ordering::Acquire);
        cpu::irq_disable();
        // CVAL = counter + TVAL at the write; TVAL reads CVAL - counter.
        let t0 = pct();
        wr!("cntp_tval_el0", ticks);
        let t1 = pct();
        let cval = sysreg_read!("cntp_cval_el0");
        wr!("cntp_ctl_el0", 1);
        let ta = pct();
        let tval = i64::from(sysreg_read!("cntp_tval_el0") as u32 as i32);
        let tb = pct();
        let left = |t: u64| cval.wrapping_sub(t) as i64;
        if cval < t0 + ticks || cval > t1 + ticks || tval > left(ta) || tval < left(tb) {
            wr!("cntp_ctl_el0", 0);
            cpu::irq_enable();
            return (PT_TVAL, round);
        }
        let give_up = pct() + ticks + cpu::us_to_ticks(2_000_000);
        let wait = round % 2 == 0;
        if !wait {
            cpu::irq_enable();
        }
        while PTICKS[me].load(Ordering::Acquire) == before {
            if pct() > give_up {
                wr!("cntp_ctl_el0", 0);
                cpu::irq_enable();
                return (PT_NO_IRQ, round);
            }
            if wait {
                cpu::wfi();
                cpu::irq_enable();
                cpu::irq_disable();
            } else {
                core::hint::spin_loop();
            }
        }
        cpu::irq_enable();
        if PT_AT[me].load(Ordering::Relaxed) < cval {
            return (PT_EARLY, round);
        }
        if PT_CTL[me].load(Ordering::Relaxed) & 0b111 != 0b101 {
            return (PT_NO_ISTATUS, round);
        }
        // The handler disabled the timer: nothing more may come.
        let t = cpu::deadline(1_000);
        while cpu::now() < t {
            core::hint::spin_loop();
        }
        if PTICKS[me].load(Ordering::Acquire) != before + 1 {
            return (PT_TWICE, round);
        }
    }
    // Masked: poll ISTATUS.
    let before = PTICKS[me].load(Ordering::Acquire);
    wr!("cntp_tval_el0", ticks);
    let cval = sysreg_read!("cntp_cval_el0");
    wr!("cntp_ctl_el0", 0b11);
    let give_up = pct() + ticks + cpu::us_to_ticks(2_000_000);
    let mut ok = false;
    while pct() < give_up {
        let ctl = sysreg_read!("cntp_ctl_el0");
        if ctl & 0b100 != 0 {
            ok = pct() >= cval;
            break;
        }
        core::hint::spin_loop();
    }
    let t = cpu::deadline(1_000);
    while cpu::now() < t {
        core::hint::spin_loop();
    }
    wr!("cntp_ctl_el0", 0);
    if !ok || PTICKS[me].load(Ordering::Acquire) != before {
        return (PT_POLL, PTIMER_ROUNDS);
    }
    (0, 0)
}

pub fn check_ptimer(all: u32) -> Verdict {
    if !run_everywhere(Cmd::El1State, PTIMER, 120_000_000) {
        return Verdict::Fail(msg!("not every vCPU finished its physical-timer rounds"));
    }
    for (i, r, d) in results(all) {
        let why = match r {
            0 => continue,
            PT_NO_IRQ => "no PPI 30 within 2 s of the deadline",
            PT_EARLY => "PPI 30 before CNTPCT_EL0 reached CVAL",
            PT_NO_ISTATUS => "CNTP_CTL_EL0 in the handler was not ENABLE|ISTATUS",
            PT_TWICE => "PPI 30 more than once",
            PT_POLL => "masked: ISTATUS not set at CVAL, or an interrupt arrived",
            PT_TVAL => "CNTP_CVAL_EL0/CNTP_TVAL_EL0 disagree with the counter and the TVAL written",
            _ => "unknown failure",
        };
        return Verdict::Fail(msg!("CPU {i}, round {d}: {why}"));
    }
    Verdict::Pass(msg!(
        "{PTIMER_ROUNDS} PPI 30 interrupts per vCPU on {} vCPUs (WFI and running), ISTATUS set, \
         not before CVAL; masked ISTATUS polled",
        all.count_ones()
    ))
}

// ---------------------------------------------------------------------------
// WFIT

/// WFIT Xt (FEAT_WFxT; the assembler may not know it).
fn wfit(deadline: u64) {
    // SAFETY: WFIT only waits (until an interrupt is pending or CNTVCT_EL0
    // reaches `deadline`).
    unsafe {
        core::arch::asm!(
            "dsb sy",
            ".inst 0xd5031020 | 9", // wfit x9
            in("x9") deadline,
            options(nomem, nostack)
        )
    };
}

/// WFIT with a `WFIT_US` timeout and nothing else to wake it: IRQs
/// masked, the virtual timer armed 2 s late only as a backstop against a
/// hang. Like an idle loop, a WFIT that returns before the timeout (the
/// architecture lets WFIT end early, e.g. for an interrupt that is already
/// pending) briefly unmasks IRQs and waits again; it may do so at most
/// `WFIT_MAX_WAKES` times per round, so a WFIT that never waits fails.
/// The wait must end at the timeout, not before, not long after.
/// Detail: the longest wait in µs (failure 2) or the wake-up count
/// (failure 1).
fn wfit_rounds() -> (u64, u64) {
    const WFIT_MAX_WAKES: u64 = 3;
    let mut longest = 0;
    let mut result = (0, 0);
    for _ in 0..WFIT_ROUNDS {
        cpu::irq_disable();
        let t0 = cpu::now();
        let deadline = t0 + cpu::us_to_ticks(WFIT_US);
        cpu::timer_arm(cpu::us_to_ticks(WFIT_US + 2_000_000));
        let mut wakes = 0;
        loop {
            wfit(deadline);
            wakes += 1;
            if cpu::now() >= deadline || wakes > WFIT_MAX_WAKES {
                break;
            }
            cpu::irq_enable();
            cpu::irq_disable();
        }
        let t1 = cpu::now();
        cpu::timer_stop();
        cpu::irq_enable();
        if wakes > WFIT_MAX_WAKES {
            result = (1, wakes);
            break;
        }
        longest = longest.max(cpu::ticks_to_us(t1 - t0));
    }
    if result.0 == 0 && longest > WFIT_US + WFIT_SLACK_US {
        result = (2, longest);
    }
    if result.0 == 0 {
        result = (0, longest);
    }
    result
}

pub fn check_wfit(all: u32) -> Verdict {
    if sysreg_read!("s3_0_c0_c6_2") & 0xf < 2 {
        return Verdict::Skip("ID_AA64ISAR2_EL1.WFxT does not advertise WFIT");
    }
    if !run_everywhere(Cmd::El1State, WFIT, 60_000_000) {
        return Verdict::Fail(msg!("not every vCPU finished {WFIT_ROUNDS} WFITs"));
    }
    let mut longest = 0;
    for (i, r, d) in results(all) {
        match r {
            0 => longest = longest.max(d),
            1 => {
                return Verdict::Fail(msg!(
                    "CPU {i}: WFIT returned after {d} us, before its {WFIT_US} us timeout"
                ))
            }
            _ => {
                return Verdict::Fail(msg!(
                    "CPU {i}: a WFIT with a {WFIT_US} us timeout returned after {d} us"
                ))
            }
        }
    }
    Verdict::Pass(msg!(
        "{WFIT_ROUNDS} WFIT waits of {WFIT_US} us per vCPU on {} vCPUs, none ended early, longest {longest} us",
        all.count_ones()
    ))
}

// ---------------------------------------------------------------------------
// Debug: breakpoint, watchpoint, software step

core::arch::global_asm!(
    r#"
.text
.balign 4
.global el1state_bp_target
el1state_bp_target:        // x0 += 1 (breakpoint 0 points here)
    add     x0, x0, #1
    ret

.global el1state_store
el1state_store:            // *x0 = x1; x2 = *x0 before (watchpoint 0 watches stores to x0)
    ldr     x2, [x0]
.global el1state_store_insn
el1state_store_insn:
    str     x1, [x0]
    ret

// Single-steps one instruction: ERET to `1:` with SPSR.SS set, D clear
// (MDSCR_EL1.SS and KDE are set by the caller). Returns x0 + 1.
.global el1state_step
el1state_step:
    mrs     x9, daif
    adr     x10, el1state_step_insn
    msr     elr_el1, x10
    mov     x10, #0x1c5             // EL1h, A I F masked, D clear
    orr     x10, x10, #(1 << 21)    // SS
    msr     spsr_el1, x10
    isb
    eret
.global el1state_step_insn
el1state_step_insn:
    add     x0, x0, #1
.global el1state_step_after
el1state_step_after:
    msr     daif, x9
    ret
"#
);

extern "C" {
    fn el1state_bp_target(x: u64) -> u64;
    fn el1state_store(addr: *mut u64, v: u64);
    static el1state_store_insn: u8;
    fn el1state_step(x: u64) -> u64;
    static el1state_step_insn: u8;
    static el1state_step_after: u8;
}

/// Set while `check_debug` has debug events armed: a debug exception at
/// any other time (another VM's breakpoint, say) is unexpected and fatal.
static ARMED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
/// Debug exceptions taken: breakpoint, software step, watchpoint.
static BP_HITS: AtomicU32 = AtomicU32::new(0);
static SS_HITS: AtomicU32 = AtomicU32::new(0);
static WP_HITS: AtomicU32 = AtomicU32::new(0);
/// ELR of the last of each, and FAR of the last watchpoint.
static BP_ELR: AtomicU64 = AtomicU64::new(0);
static SS_ELR: AtomicU64 = AtomicU64::new(0);
static WP_ELR: AtomicU64 = AtomicU64::new(0);
static WP_FAR: AtomicU64 = AtomicU64::new(0);

/// The word the watchpoint watches.
#[repr(align(8))]
struct Watched(core::cell::UnsafeCell<u64>);
// SAFETY: only the boot vCPU touches it, through `el1state_store`.
unsafe impl Sync for Watched {}
static WATCHED: Watched = Watched(core::cell::UnsafeCell::new(0));

/// MDSCR_EL1 bits.
const MDSCR_SS: u64 = 1 << 0;
const MDSCR_KDE: u64 = 1 << 13;
const MDSCR_MDE: u64 = 1 << 15;

/// From the synchronous exception handler (current EL): a breakpoint
/// (EC 0x31), software step (0x33) or watchpoint (0x35) exception is
/// counted and its source disabled, so the interrupted code continues.
/// Returns false for anything else, and for any of them while the check
/// is not running or on another vCPU than the boot one.
pub fn debug_exception(ec: u64, frame: &mut Frame) -> bool {
    if !ARMED.load(Ordering::SeqCst) || cpu::index() != crate::smp::BOOT.load(Ordering::Relaxed) {
        return false;
    }
    match ec {
        0x31 => {
            BP_ELR.store(frame.elr, Ordering::Relaxed);
            BP_HITS.fetch_add(1, Ordering::Release);
            wr!("dbgbcr0_el1", 0);
        }
        0x33 => {
            SS_ELR.store(frame.elr, Ordering::Relaxed);
            SS_HITS.fetch_add(1, Ordering::Release);
            wr!("mdscr_el1", sysreg_read!("mdscr_el1") & !MDSCR_SS);
        }
        0x35 => {
            WP_ELR.store(frame.elr, Ordering::Relaxed);
            WP_FAR.store(sysreg_read!("far_el1"), Ordering::Relaxed);
            WP_HITS.fetch_add(1, Ordering::Release);
            wr!("dbgwcr0_el1", 0);
        }
        _ => return false,
    }
    true
}

fn debug_unmask() {
    // SAFETY: clears PSTATE.D: debug exceptions at EL1 (KDE) are taken by
    // `debug_exception`.
    unsafe { core::arch::asm!("msr daifclr, #8", "isb", options(nomem, nostack)) };
}

fn debug_mask() {
    // SAFETY: sets PSTATE.D.
    unsafe { core::arch::asm!("msr daifset, #8", "isb", options(nomem, nostack)) };
}

/// Breakpoint 0 on `el1state_bp_target`, watchpoint 0 on stores to
/// `WATCHED`, one software step: each must fire exactly once, at the right
/// instruction (and address), with a WFI yield while they are armed so a
/// hypervisor switches vCPUs (and, with several VMs, runs others which
/// execute the same code at the same addresses: they must not see them).
pub fn check_debug() -> Verdict {
    let bp = el1state_bp_target as *const () as u64;
    // SAFETY: taking the addresses of labels in this image's text.
    let (st, step, after) = unsafe {
        (
            &el1state_store_insn as *const u8 as u64,
            &el1state_step_insn as *const u8 as u64,
            &el1state_step_after as *const u8 as u64,
        )
    };
    let watched = WATCHED.0.get();
    let nbrps = ((sysreg_read!("id_aa64dfr0_el1") >> 12) & 0xf) + 1;
    let nwrps = ((sysreg_read!("id_aa64dfr0_el1") >> 20) & 0xf) + 1;
    for h in [&BP_HITS, &SS_HITS, &WP_HITS] {
        h.store(0, Ordering::SeqCst);
    }
    ARMED.store(true, Ordering::SeqCst);
    // OS lock off (locked at reset), self-hosted debug on at EL1.
    wr!("oslar_el1", 0);
    wr!("mdscr_el1", MDSCR_MDE | MDSCR_KDE);
    debug_unmask();

    // Breakpoint: EL1 (PMC 0b01), BAS 0b1111, enabled.
    wr!("dbgbvr0_el1", bp);
    wr!("dbgbcr0_el1", (0xF << 5) | (0b01 << 1) | 1);
    cpu::sleep_us(2_000);
    // SAFETY: the target only adds 1 to its argument.
    let r = unsafe { el1state_bp_target(41) };
    // SAFETY: as above; the breakpoint is disabled by now.
    let r2 = unsafe { el1state_bp_target(1) };

    // Watchpoint: EL1, stores only (LSC 0b10), 8 bytes, enabled.
    wr!("dbgwvr0_el1", watched as u64);
    wr!("dbgwcr0_el1", (0xFF << 5) | (0b10 << 3) | (0b01 << 1) | 1);
    cpu::sleep_us(2_000);
    // A load must not trigger it (el1state_store loads first).
    // SAFETY: `watched` is a valid, aligned u64 only this vCPU uses.
    unsafe { el1state_store(watched, 0x5EED) };
    // SAFETY: as above.
    let stored = unsafe { core::ptr::read_volatile(watched) };

    // Software step of one instruction. MDSCR_EL1.SS is set with PSTATE.D
    // set: with D clear and PSTATE.SS = 0 the step would be active-pending
    // and fire at once. The ERET clears D and sets SS: one instruction.
    debug_mask();
    wr!("mdscr_el1", MDSCR_MDE | MDSCR_KDE | MDSCR_SS);
    cpu::sleep_us(2_000);
    // SAFETY: steps one `add` and returns with DAIF restored.
    let s = unsafe { el1state_step(7) };
    let mdscr_left = sysreg_read!("mdscr_el1");
    wr!("mdscr_el1", 0);
    ARMED.store(false, Ordering::SeqCst);
    cpu::sleep_us(2_000);

    let (b, w, ss) = (
        BP_HITS.load(Ordering::Acquire),
        WP_HITS.load(Ordering::Acquire),
        SS_HITS.load(Ordering::Acquire),
    );
    if b != 1 || BP_ELR.load(Ordering::Relaxed) != bp || r != 42 || r2 != 2 {
        return Verdict::Fail(msg!(
            "breakpoint at {bp:#x}: {b} exception(s), last ELR {:#x} (results {r}, {r2})",
            BP_ELR.load(Ordering::Relaxed)
        ));
    }
    let far = WP_FAR.load(Ordering::Relaxed);
    if w != 1
        || WP_ELR.load(Ordering::Relaxed) != st
        || far < watched as u64
        || far >= watched as u64 + 8
        || stored != 0x5EED
    {
        return Verdict::Fail(msg!(
            "watchpoint on stores to {:#x}: {w} exception(s), ELR {:#x} (store at {st:#x}), FAR {far:#x}, value {stored:#x}",
            watched as u64,
            WP_ELR.load(Ordering::Relaxed)
        ));
    }
    if ss != 1 || SS_ELR.load(Ordering::Relaxed) != after || s != 8 || mdscr_left & MDSCR_SS != 0 {
        return Verdict::Fail(msg!(
            "single step of {step:#x}: {ss} step exception(s), ELR {:#x} (expected {after:#x}), result {s}",
            SS_ELR.load(Ordering::Relaxed)
        ));
    }
    Verdict::Pass(msg!(
        "{nbrps} breakpoints, {nwrps} watchpoints; breakpoint, store watchpoint (not the load) and one step each fired once at the right PC/address"
    ))
}
