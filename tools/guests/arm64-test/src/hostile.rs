//! The hostile-guest suite (`mode=attack` / `mode=victim` on the command
//! line; `docs/test-guest.md`).
//!
//! The attacker throws garbage at every trap class kestrel handles, probes
//! the whole guest physical address space, storms itself with interrupts,
//! leaves its virtual GIC in the state that once froze a pCPU (more
//! interrupts pending+active than list registers, IRQs masked), writes
//! patterns into every register a leak could carry, and then keeps its
//! pCPU busy with interrupts masked until `hold_ms`. Each phase prints a
//! `PASS`/`FAIL` line: an answer that is not architectural (an exception
//! class no instruction of that kind can raise, a value carrying the
//! victim's pattern) is a failure.
//!
//! The victim shares the attacker's pCPU. It fills part of its RAM and a
//! set of registers with its own patterns, runs a periodic virtual timer,
//! and for `window_ms` measures how much of the time it ran (the sum of
//! the short gaps between consecutive counter reads), how often its timer
//! fired, and that its memory and registers still hold its patterns.
//!
//! Both end with the usual `RESULT:` line and power off.

use crate::cpu::{self, CPUS};
use crate::exceptions::probe_any;
use crate::gic;
use crate::platform::Platform;
use crate::println;
use crate::smccc::{self, call};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kestrel_abi::arm64;

mod cold;
pub(crate) mod virtio;

/// The victim's memory pattern: this in the upper half, the address in
/// the lower. An attacker read that returns it has seen the victim's RAM.
const VICTIM_TAG: u64 = 0x5EC0_DE55;
/// SGI the attacker storms itself with.
const STORM_SGI: u32 = 6;

static PASSED: AtomicU32 = AtomicU32::new(0);
static FAILED: AtomicU32 = AtomicU32::new(0);
/// Counter value at the start of the mode.
static START: AtomicU64 = AtomicU64::new(0);

fn verdict(name: &str, ok: bool, detail: core::fmt::Arguments) {
    let at = elapsed_ms(START.load(Ordering::Relaxed));
    if ok {
        PASSED.fetch_add(1, Ordering::Relaxed);
        println!("PASS {name} ({detail}) at {at} ms");
    } else {
        FAILED.fetch_add(1, Ordering::Relaxed);
        println!("FAIL {name}: {detail} (at {at} ms)");
    }
}

fn finish() -> ! {
    println!(
        "RESULT: {} passed, {} failed",
        PASSED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed)
    );
    smccc::system_off()
}

/// Exception class of an ESR value.
const fn ec(esr: u64) -> u64 {
    (esr >> 26) & 0x3F
}

/// EC 0x00: unknown reason, what an undefined instruction raises.
const EC_UNKNOWN: u64 = 0x00;
/// EC 0x18: a trapped system register access (FEAT_IDST's answer for
/// unallocated ID registers).
const EC_SYSREG: u64 = 0x18;
/// EC 0x19 / 0x1D: SVE / SME access trapped by CPACR_EL1.
const EC_SVE: u64 = 0x19;
const EC_SME: u64 = 0x1D;
/// EC 0x21: instruction abort without a change in EL.
const EC_IABT_SAME: u64 = 0x21;
/// EC 0x25: data abort without a change in EL.
const EC_DABT_SAME: u64 = 0x25;

// ---------------------------------------------------------------------------
// Running instructions the attacker builds at run time.

/// Two instruction slots: the probed instruction and `ret`.
#[repr(C, align(64))]
struct Jit([u32; 16]);

static mut JIT: Jit = Jit([0; 16]);

const RET: u32 = 0xD65F_03C0;

/// Runs the single instruction `insn` (which uses x0 as its register, if
/// any) with x0 = `x0`, catching any exception. Returns (x0 after, ESR).
fn run_insn(insn: u32, x0: u64) -> (u64, u64) {
    let slot = core::ptr::addr_of_mut!(JIT) as *mut u32;
    // SAFETY: the attacker has one vCPU, so nothing else uses the slots;
    // they are in this image's normal, executable RAM (no WXN). The cache
    // maintenance makes the new instruction visible to instruction fetch.
    unsafe {
        slot.write_volatile(insn);
        slot.add(1).write_volatile(RET);
        core::arch::asm!(
            "dc cvau, {p}", "dsb ish", "ic ivau, {p}", "dsb ish", "isb",
            p = in(reg) slot, options(nostack)
        );
    }
    let (v, esr, _) = probe_any(|| {
        let mut r = x0;
        // SAFETY: the slot holds one system instruction (or HVC/SMC) and a
        // RET; whatever exception it raises, the probe handler resumes
        // after it. The C ABI's clobbers cover a called function.
        unsafe {
            core::arch::asm!("blr {f}", f = in(reg) slot, inout("x0") r, clobber_abi("C"));
        }
        r
    });
    (v, esr)
}

/// MRS x0, <op0,op1,CRn,CRm,op2>.
const fn mrs(op0: u32, op1: u32, crn: u32, crm: u32, op2: u32) -> u32 {
    0xD520_0000 | op0 << 19 | op1 << 16 | crn << 12 | crm << 8 | op2 << 5
}

/// MSR <op0,op1,CRn,CRm,op2>, x0.
const fn msr(op0: u32, op1: u32, crn: u32, crm: u32, op2: u32) -> u32 {
    0xD500_0000 | op0 << 19 | op1 << 16 | crn << 12 | crm << 8 | op2 << 5
}

/// SYS #op1, Cn, Cm, #op2, x0 (op0 = 1).
const fn sys(op1: u32, crn: u32, crm: u32, op2: u32) -> u32 {
    msr(1, op1, crn, crm, op2)
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Tally of one sweep: how many probes completed, how many raised the
/// expected exception, and the first one that did something else.
#[derive(Default)]
struct Tally {
    done: u64,
    undef: u64,
    bad: Option<(u32, u64)>,
}

impl Tally {
    /// Records a probe of `what` that raised `esr`; `allowed` says which
    /// exception classes are architectural for it.
    fn add(&mut self, what: u32, esr: u64, allowed: &[u64]) {
        if esr == 0 {
            self.done += 1;
        } else if allowed.contains(&ec(esr)) {
            self.undef += 1;
        } else if self.bad.is_none() {
            self.bad = Some((what, esr));
        }
    }
}

// ---------------------------------------------------------------------------
// The attacker.

/// Registers both modes write a pattern into: a value that survives in
/// one VM's copy and shows in the other's is a leak. TPIDR_EL1 holds the
/// CPU index and stays out. (Fixed instructions, not the run-time slot:
/// these run in loops.)
const SHARED_REGS: [&str; 9] = [
    "TPIDR_EL0",
    "TPIDRRO_EL0",
    "CONTEXTIDR_EL1",
    "AFSR0_EL1",
    "AFSR1_EL1",
    "AMAIR_EL1",
    "PAR_EL1",
    "DISR_EL1",
    "CNTKCTL_EL1",
];

macro_rules! shared_regs {
    ($m:ident $(, $arg:expr)?) => {
        [
            $m!("tpidr_el0" $(, $arg.rotate_left(0))?),
            $m!("tpidrro_el0" $(, $arg.rotate_left(7))?),
            $m!("contextidr_el1" $(, $arg.rotate_left(14))?),
            $m!("afsr0_el1" $(, $arg.rotate_left(21))?),
            $m!("afsr1_el1" $(, $arg.rotate_left(28))?),
            $m!("amair_el1" $(, $arg.rotate_left(35))?),
            $m!("par_el1" $(, $arg.rotate_left(42))?),
            $m!("s3_0_c12_c1_1" $(, $arg.rotate_left(49))?),
            $m!("cntkctl_el1" $(, $arg.rotate_left(56))?),
        ]
    };
}

macro_rules! write_one {
    ($name:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: these registers only hold values for this VM's own
        // software (thread ids, fault/attribute records, DISR, the EL0
        // timer access control); nothing the guest relies on reads them.
        unsafe { core::arch::asm!(concat!("msr ", $name, ", {}"), in(reg) v, options(nomem, nostack)) };
    }};
}

macro_rules! read_one {
    ($name:literal) => {{
        let v: u64;
        // SAFETY: reading these registers has no side effect.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $name), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

fn write_shared_regs(pattern: u64) {
    let _: [(); 9] = shared_regs!(write_one, pattern);
    // SAFETY: a barrier only.
    unsafe { core::arch::asm!("isb", options(nomem, nostack)) };
}

fn read_shared_regs() -> [u64; 9] {
    shared_regs!(read_one)
}

/// SVE (the attacker's config has `sve = true`, `sve_max_vl = 256`,
/// `sve_vl=256`): ZCR_EL1 written with all ones (the longest length and
/// every RES0 bit) again and again, each time followed by `rdvl` and a WFI
/// that lets the victim run: the length must stay at the VM's cap. (A
/// round costs kestrel an SVE trap, save and restore only when the victim
/// took the unit meanwhile: it rarely uses FP.) Without SVE, the config
/// must not have promised it.
fn sve_attack(p: &Platform) {
    const ROUNDS: u64 = 300;
    if !crate::sve::present() {
        verdict(
            "attack-sve",
            p.sve_vl.is_none(),
            format_args!("SVE hidden (sve_vl={:?} expected)", p.sve_vl),
        );
        return;
    }
    let cap = p.sve_vl.unwrap_or(2048);
    let cpacr = cpu::sysreg_read!("cpacr_el1");
    crate::sve::open_zen();
    let (mut longest, mut over) = (0, 0);
    for _ in 0..ROUNDS {
        cpu::sysreg_write!("s3_0_c1_c2_0", u64::MAX);
        let bits = crate::sve::vl_bytes() * 8;
        longest = longest.max(bits);
        if bits > cap {
            over += 1;
        }
        cpu::irq_disable();
        cpu::timer_arm(cpu::us_to_ticks(100));
        cpu::wfi();
        cpu::irq_enable();
    }
    cpu::timer_stop();
    cpu::sysreg_write!("cpacr_el1", cpacr);
    verdict(
        "attack-sve",
        over == 0 && longest == cap,
        format_args!(
            "{ROUNDS} writes of all ones to ZCR_EL1, each with a yield: rdvl at most {longest} bits, {over} times above the VM's {cap}"
        ),
    );
}

/// Entry of `mode=attack`: never returns.
pub fn attack(p: &Platform) -> ! {
    let start = cpu::now();
    START.store(start, Ordering::Relaxed);
    let hold_ms = p.hold_ms.unwrap_or(12_000);
    println!("ATTACK: hostile guest; holding its pCPU until {hold_ms} ms after start");
    storms(p);
    vgic_freeze(p);
    write_shared_regs(0xAAAA_AAAA_AAAA_AAAA);
    sysreg_reads();
    sysreg_writes();
    sys_instructions();
    hypercalls();
    sve_attack(p);
    mmio(p);
    isolation(p);
    virtio::phase(p);
    let mut rx = cold::arm_receivers(p);
    // Inside the victim's window, so its heartbeat sees what the exits
    // cost (the attacker times them as its own time, the victim's slices
    // taken out).
    cold::cold_tx(p);
    // Keep the pCPU: interrupts masked, the vGIC still frozen, a trapped
    // access now and then, the patterns rewritten.
    let end = start + cpu::us_to_ticks(hold_ms * 1000);
    let busy_from = elapsed_ms(start);
    let mut spins = 0u64;
    while cpu::now() < end {
        write_shared_regs(0xAAAA_AAAA_AAAA_AAAA);
        for _ in 0..1000 {
            core::hint::spin_loop();
        }
        rx.refill();
        spins += 1;
    }
    verdict(
        "attack-hold",
        true,
        format_args!("{spins} rounds with IRQs masked from {busy_from} ms to {hold_ms} ms"),
    );
    virtio::budget_phase(p);
    virtio::console_phase(p);
    rx.report(3000);
    finish()
}

/// Milliseconds of guest counter time since `start`.
fn elapsed_ms(start: u64) -> u64 {
    cpu::ticks_to_us(cpu::now() - start) / 1000
}

/// Interrupt and exit storms: self-SGIs, PV IPIs to itself, WFI/WFE.
fn storms(p: &Platform) {
    let me = cpu::index();
    let before = CPUS[me].sgi[STORM_SGI as usize].load(Ordering::Acquire);
    let n = 3000u32;
    for i in 0..n {
        if i % 2 == 0 {
            gic::send_sgi(STORM_SGI, 1 << me);
        } else {
            let _ = call(
                arm64::IPI_SEND as u64,
                [1, 0, crate::smp::vcpu_id(cpu::mpidr())],
            );
        }
        if i % 64 == 0 {
            // WFE with the event register set, and WFI with an SGI pending
            // behind the mask: neither waits, both are trapped exits under
            // kestrel.
            cpu::irq_disable();
            gic::send_sgi(STORM_SGI, 1 << me);
            // SAFETY: SEVL sets the event register, so WFE returns at once.
            unsafe { core::arch::asm!("sevl", "wfe", options(nomem, nostack)) };
            cpu::wfi();
            cpu::irq_enable();
        }
    }
    // Let the last ones in.
    let settle = cpu::deadline(100_000);
    while cpu::now() < settle {}
    let sgis = CPUS[me].sgi[STORM_SGI as usize].load(Ordering::Acquire) - before;
    let pv = CPUS[me].sgi[crate::smp::PV_IPI_SGI as usize].load(Ordering::Acquire);
    verdict(
        "attack-storms",
        sgis > 0 && sgis <= n,
        format_args!(
            "{n} self-IPIs sent (half SGIs, half PV IPIs): {sgis} SGI {STORM_SGI} and {pv} PV IPI interrupts taken, WFE storm ({} vCPU, GIC{:?})",
            p.ncpus, p.gic
        ),
    );
}

/// The state that once held a pCPU in an entry/maintenance loop: IRQs
/// masked, five interrupts enabled, pending and active (one more than the
/// list registers of QEMU's GIC).
fn vgic_freeze(p: &Platform) {
    cpu::irq_disable();
    let w = |a: usize, v: u32| {
        // SAFETY: the attacker's own emulated distributor/redistributor.
        unsafe { cpu::mmio_write32(a, v) }
    };
    match p.gic {
        gic::Version::V3 => {
            w(p.gicd, 3);
            let sgi_base = p.gicr_or_gicc + 0x1_0000;
            for off in [0x100, 0x200, 0x300] {
                w(sgi_base + off, 0x1F);
            }
        }
        gic::Version::V2 => {
            w(p.gicd, 3);
            for off in [0x100, 0x200, 0x300] {
                w(p.gicd + off, 0x1F << 16);
            }
        }
    }
    verdict(
        "attack-vgic-freeze",
        true,
        format_args!("IRQs masked, 5 interrupts enabled+pending+active"),
    );
}

/// MRS of every op0 = 2/3 encoding: a value or UNDEFINED.
fn sysreg_reads() {
    let mut t = Tally::default();
    for op0 in 2..4 {
        for op1 in 0..8 {
            for crn in 0..16 {
                for crm in 0..16 {
                    for op2 in 0..8 {
                        let insn = mrs(op0, op1, crn, crm, op2);
                        let (_, esr) = run_insn(insn, 0);
                        // EL2/EL3 encodings (op1 4..7) never complete at EL1.
                        if op1 >= 4 && esr == 0 && t.bad.is_none() {
                            t.bad = Some((insn, 0));
                        }
                        // FEAT_IDST: an unallocated encoding of the ID space
                        // (op0 3, op1 0/1/3, CRn 0, CRm 0-7) may report EC
                        // 0x18 instead of 0. The
                        // SVE/SME control registers (ZCR, SMCR, SVCR, ...)
                        // of a CPU that has them trap to EL1 first, by the
                        // guest's own CPACR_EL1 (EC 0x19 / 0x1D), whatever
                        // the ID registers kestrel shows say.
                        let id_space = op0 == 3 && matches!(op1, 0 | 1 | 3) && crn == 0 && crm < 8;
                        let allowed: &[u64] = if id_space {
                            &[EC_UNKNOWN, EC_SYSREG]
                        } else {
                            &[EC_UNKNOWN, EC_SVE, EC_SME]
                        };
                        t.add(insn, esr, allowed);
                    }
                }
            }
        }
    }
    report_tally(
        "attack-sysreg-read",
        "MRS of all 32768 op0=2/3 encodings",
        &t,
    );
}

/// MSR garbage: every EL2/EL3 encoding, every debug encoding, the
/// implementation-defined spaces, and the EL0/EL1 registers kestrel traps
/// or switches.
fn sysreg_writes() {
    let mut rng = Rng(0xA77A_C4ED_5EED_0001);
    let mut t = Tally::default();
    let strict = |t: &mut Tally, insn: u32, v: u64, must_undef: bool| {
        let (_, esr) = run_insn(insn, v);
        if must_undef && esr == 0 && t.bad.is_none() {
            t.bad = Some((insn, 0));
        }
        t.add(insn, esr, &[EC_UNKNOWN]);
    };
    for op0 in 2..4 {
        for op1 in 4..8 {
            for crn in 0..16 {
                for crm in 0..16 {
                    for op2 in 0..8 {
                        strict(&mut t, msr(op0, op1, crn, crm, op2), rng.next(), true);
                    }
                }
            }
        }
    }
    // Debug registers (op0 = 2, op1 0..3): breakpoints, watchpoints, MDSCR,
    // OS lock, claim tags, DCC. PSTATE.D stays masked, so nothing fires.
    for op1 in 0..4 {
        for crn in 0..16 {
            for crm in 0..16 {
                for op2 in 0..8 {
                    strict(&mut t, msr(2, op1, crn, crm, op2), rng.next(), false);
                }
            }
        }
    }
    // Implementation-defined spaces (trapped by HCR_EL2.TIDCP).
    for crn in [11, 15] {
        for op1 in 0..8 {
            for crm in 0..16 {
                for op2 in 0..8 {
                    strict(&mut t, msr(3, op1, crn, crm, op2), rng.next(), false);
                }
            }
        }
    }
    // Registers kestrel traps, emulates or must treat as read-only.
    let listed: [(u32, u32, u32, u32); 34] = [
        (0, 12, 11, 5), // ICC_SGI1R_EL1
        (0, 12, 11, 6), // ICC_ASGI1R_EL1
        (0, 12, 11, 7), // ICC_SGI0R_EL1
        (0, 12, 11, 1), // ICC_DIR_EL1
        (0, 12, 12, 1), // ICC_EOIR1_EL1
        (0, 4, 6, 0),   // ICC_PMR_EL1
        (3, 14, 2, 1),  // CNTP_CTL_EL0
        (3, 14, 2, 2),  // CNTP_CVAL_EL0
        (3, 14, 2, 0),  // CNTP_TVAL_EL0
        (3, 14, 3, 1),  // CNTV_CTL_EL0
        (3, 14, 3, 2),  // CNTV_CVAL_EL0
        (3, 14, 0, 0),  // CNTFRQ_EL0 (EL1: undefined)
        (3, 14, 0, 1),  // CNTPCT_EL0 (read-only)
        (3, 14, 0, 2),  // CNTVCT_EL0 (read-only)
        (3, 9, 12, 0),  // PMCR_EL0
        (3, 9, 12, 1),  // PMCNTENSET_EL0
        (3, 9, 12, 2),  // PMCNTENCLR_EL0
        (3, 9, 12, 3),  // PMOVSCLR_EL0
        (3, 9, 12, 4),  // PMSWINC_EL0
        (3, 9, 12, 5),  // PMSELR_EL0
        (3, 9, 13, 0),  // PMCCNTR_EL0
        (3, 9, 13, 1),  // PMXEVTYPER_EL0
        (3, 9, 13, 2),  // PMXEVCNTR_EL0
        (3, 9, 14, 0),  // PMUSERENR_EL0
        (0, 9, 14, 1),  // PMINTENSET_EL1
        (3, 14, 15, 7), // PMCCFILTR_EL0
        (0, 0, 0, 0),   // MIDR_EL1 (read-only)
        (0, 0, 4, 0),   // ID_AA64PFR0_EL1 (read-only)
        (0, 0, 7, 0),   // ID_AA64MMFR0_EL1 (read-only)
        (3, 0, 0, 1),   // CTR_EL0 (read-only)
        (3, 0, 0, 7),   // DCZID_EL0 (read-only)
        (0, 12, 1, 1),  // DISR_EL1
        (0, 5, 3, 0),   // ERRIDR_EL1 (read-only)
        (0, 5, 3, 1),   // ERRSELR_EL1
    ];
    for &(op1, crn, crm, op2) in &listed {
        for _ in 0..16 {
            strict(&mut t, msr(3, op1, crn, crm, op2), rng.next(), false);
        }
    }
    // Leave the debug state quiet again (MDSCR_EL1, OS lock).
    run_insn(msr(2, 0, 0, 2, 2), 0);
    run_insn(msr(2, 0, 1, 0, 4), 0);
    report_tally(
        "attack-sysreg-write",
        "MSR garbage to every EL2/EL3 and debug encoding, the IMPDEF spaces and 34 trapped registers",
        &t,
    );
}

/// Cache, TLB and address-translation instructions (op0 = 1, CRn 7-9)
/// on a scratch buffer, and set/way operations with garbage operands.
fn sys_instructions() {
    #[repr(C, align(4096))]
    struct Scratch([u8; 4096]);
    static mut SCRATCH: Scratch = Scratch([0; 4096]);
    let scratch = core::ptr::addr_of_mut!(SCRATCH) as u64;
    let mut t = Tally::default();
    for op1 in 0..8 {
        for crn in 7..10 {
            for crm in 0..16 {
                for op2 in 0..8 {
                    let insn = sys(op1, crn, crm, op2);
                    let (_, esr) = run_insn(insn, scratch);
                    t.add(insn, esr, &[EC_UNKNOWN]);
                }
            }
        }
    }
    let mut rng = Rng(0x5E7_3A7);
    for (crm, op2) in [(6, 2), (10, 2), (14, 2)] {
        // DC ISW / CSW / CISW: kestrel traps set/way (HCR_EL2.TSW).
        for _ in 0..200 {
            let insn = sys(0, 7, crm, op2);
            let (_, esr) = run_insn(insn, rng.next());
            t.add(insn, esr, &[EC_UNKNOWN]);
        }
    }
    report_tally(
        "attack-sys-insn",
        "cache/TLB/AT instructions (op0=1, CRn 7-9) and 600 set/way operations with garbage",
        &t,
    );
}

/// HVC/SMC with garbage function ids and arguments, and HVC/SMC with
/// non-zero immediates. Calls that would end or suspend the attacker
/// (PSCI CPU_SUSPEND, CPU_OFF, SYSTEM_*, CPU_FREEZE, ...) are left out.
fn hypercalls() {
    let mut rng = Rng(0x4856_4321);
    let harmful = |fid: u64| {
        let owner = (fid >> 24) & 0x3F;
        let func = fid & 0xFFFF;
        owner == 4 && matches!(func, 1 | 2 | 8 | 9 | 0xB | 0xC | 0xE | 0x12 | 0x15)
    };
    let (mut calls, mut unknown, mut bad) = (0u64, 0u64, None);
    for i in 0..4000u64 {
        let r = rng.next();
        // Half fully random, half in the owners kestrel serves.
        let fid = if i % 2 == 0 {
            r
        } else {
            (r & 0xFFFF_FFFF_C000_FFFF) | [0, 4, 5, 6][(r >> 16) as usize % 4] << 24
        };
        if harmful(fid) {
            continue;
        }
        let ret = call(fid, [rng.next(), rng.next(), rng.next()])[0] as i64;
        calls += 1;
        let owner = (fid >> 24) & 0x3F;
        // SMCCC: an owner kestrel does not implement answers NOT_SUPPORTED.
        if !matches!(owner, 0 | 4 | 5 | 6) {
            unknown += 1;
            if ret != -1 && bad.is_none() {
                bad = Some((fid, ret));
            }
        }
    }
    // Vendor calls with the worst arguments: a full IPI window far away,
    // an out-of-range counter index.
    let ipi = call(arm64::IPI_SEND as u64, [u64::MAX, u64::MAX, u64::MAX - 5])[0] as i64;
    let stat = call(arm64::STATS as u64, [u64::MAX, 0, 0])[0] as i64;
    let pv = pv_time_calls(&mut rng);
    let mut t = Tally::default();
    for imm in [1u32, 2, 0x100, 0x7FFF, 0xFFFF] {
        // HVC #imm / SMC #imm: an answer (SMCCC: x0 = NOT_SUPPORTED) or UNDEFINED.
        for insn in [0xD400_0002 | imm << 5, 0xD400_0003 | imm << 5] {
            let (_, esr) = run_insn(insn, 0x8400_0000);
            t.add(insn, esr, &[EC_UNKNOWN]);
        }
    }
    let ok = bad.is_none() && ipi < 0 && stat < 0 && t.bad.is_none() && pv.is_ok();
    verdict(
        "attack-hypercalls",
        ok,
        format_args!(
            "{calls} random HVC/SMC calls, {unknown} to unimplemented owners all NOT_SUPPORTED{}; IPI to a far window {ipi}, STATS[2^64-1] {stat}; PV time: {}; HVC/SMC #imm: {} answered, {} undefined{}",
            match bad {
                Some((f, r)) => note_bad_hypercall(f, r),
                None => "",
            },
            match pv {
                Ok(s) | Err(s) => s,
            },
            t.done,
            t.undef,
            if t.bad.is_some() { " (other exception!)" } else { "" }
        ),
    );
}

/// The PV time calls (arm64 stolen time) with garbage: features of every
/// id near them and random ones (0 or -1 only), PV_TIME_ST with garbage in
/// x1-x3 (always the same record), their SMC32 spellings and other ids of
/// the range (-1), x0's upper half set (-1); then the record overwritten
/// with garbage (the guest's own memory: allowed) and kestrel still
/// answering and writing it. Ok or Err with a short description.
fn pv_time_calls(rng: &mut Rng) -> Result<&'static str, &'static str> {
    use crate::smccc::pv_time::{self, FEATURES, ST};
    let st = call(u64::from(ST), [0; 3])[0];
    if !pv_time::is_record(st) {
        return Err("PV_TIME_ST gave no record (FAIL)");
    }
    for i in 0..600u64 {
        let q = match i % 3 {
            0 => 0xC500_0000 | (rng.next() & 0xFF),
            1 => rng.next(),
            _ => (rng.next() & 0xFFFF_FFFF_0000_0000) | u64::from(ST),
        };
        let f = call(u64::from(FEATURES), [q, rng.next(), rng.next()])[0] as i64;
        if f != 0 && f != -1 {
            return Err("PV_TIME_FEATURES answered outside {0, -1} (FAIL)");
        }
        let again = call(u64::from(ST), [rng.next(), rng.next(), rng.next()])[0];
        if again != st {
            return Err("PV_TIME_ST moved its record (FAIL)");
        }
        let other = 0xC500_0000 | (rng.next() & 0xFFFF);
        if !matches!(other & 0xFFFF, 0x20 | 0x21) && call(other, [rng.next(); 3])[0] as i64 != -1 {
            return Err("another standard-hypervisor id answered (FAIL)");
        }
    }
    for fid in [
        0x8500_0020u64,
        0x8500_0021,
        0xFFFF_FFFF_C500_0021,
        0x1_C500_0020,
    ] {
        if call(fid, [u64::from(ST), 0, 0])[0] as i64 != -1 {
            return Err("an SMC32 or widened PV time id answered (FAIL)");
        }
    }
    // Garbage over the whole record; kestrel goes on writing its word.
    for w in 0..8 {
        // SAFETY: the record is this guest's own RAM (kestrel answered
        // PV_TIME_ST with it), 64-byte aligned, in its normal-memory GiB.
        unsafe { core::ptr::write_volatile((st + 8 * w) as *mut u64, rng.next()) };
    }
    if call(u64::from(ST), [0; 3])[0] != st {
        return Err("PV_TIME_ST after its record was overwritten (FAIL)");
    }
    Ok("features, ST with garbage, other ids and a scribbled record all answered")
}

/// A short marker for the first wrong hypercall answer (the guest has no
/// allocator: the detail is printed on its own line).
fn note_bad_hypercall(fid: u64, ret: i64) -> &'static str {
    println!("attack-hypercalls: fid {fid:#x} answered {ret}, expected -1");
    " EXCEPT ONE (see above)"
}

/// Emulated device registers: every word of the distributor, the own
/// redistributor and the UART read; garbage written to the GIC; accesses
/// with no valid syndrome (pairs, writeback, atomics).
fn mmio(p: &Platform) {
    let mut rng = Rng(0x0313_0000_0001);
    let mut t = Tally::default();
    let read = |t: &mut Tally, a: u64| {
        let (_, esr, _) = probe_any(|| {
            let v: u32;
            // SAFETY: any answer is caught; the address is an emulated
            // device frame of this VM.
            unsafe {
                core::arch::asm!("ldr {v:w}, [{a}]", a = in(reg) a, v = out(reg) v, options(nostack))
            };
            v as u64
        });
        t.add(0, esr, &[EC_DABT_SAME]);
    };
    let (dist, redist) = match p.gic {
        gic::Version::V3 => (0x1_0000, 0x2_0000),
        gic::Version::V2 => (0x1000, 0),
    };
    for off in (0..dist).step_by(4) {
        read(&mut t, p.gicd as u64 + off);
    }
    for off in (0..redist).step_by(4) {
        read(&mut t, p.gicr_or_gicc as u64 + off);
    }
    for off in (0..0x1000).step_by(4) {
        read(&mut t, p.uart as u64 + off);
    }
    for _ in 0..3000 {
        let off = rng.next() % dist;
        let v = rng.next();
        let a = p.gicd as u64 + off;
        let (_, esr, _) = probe_any(|| {
            // SAFETY: as above; unaligned offsets and every width included.
            unsafe {
                match v % 4 {
                    0 => {
                        core::arch::asm!("strb {v:w}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
                    }
                    1 => {
                        core::arch::asm!("strh {v:w}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
                    }
                    2 => {
                        core::arch::asm!("str {v:w}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
                    }
                    _ => {
                        core::arch::asm!("str {v}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
                    }
                }
            }
            0
        });
        t.add(1, esr, &[EC_DABT_SAME]);
    }
    // No valid syndrome: load pair, post-index writeback, exclusive, atomic.
    for i in 0..400u64 {
        let a = (p.gicd as u64 + (rng.next() % dist)) & !7;
        let (_, esr, _) = probe_any(|| {
            let (mut x, mut y) = (0u64, 0u64);
            let mut b = a;
            // SAFETY: as above; whatever happens is caught.
            unsafe {
                match i % 4 {
                    0 => {
                        core::arch::asm!("ldp {x}, {y}, [{b}]", b = in(reg) b, x = out(reg) x, y = out(reg) y, options(nostack))
                    }
                    1 => {
                        core::arch::asm!("ldr {x}, [{b}], #8", b = inout(reg) b, x = out(reg) x, options(nostack))
                    }
                    2 => {
                        core::arch::asm!("ldxr {x}, [{b}]", b = in(reg) b, x = out(reg) x, options(nostack))
                    }
                    _ => {
                        core::arch::asm!("stp {x}, {y}, [{b}]", b = in(reg) b, x = in(reg) x, y = in(reg) y, options(nostack))
                    }
                }
            }
            x ^ y ^ b
        });
        t.add(2, esr, &[EC_DABT_SAME]);
    }
    report_tally(
        "attack-mmio",
        "every word of GICD/GICR/UART read, 3000 garbage GICD writes of every width, 400 accesses without a syndrome",
        &t,
    );
}

/// Reads across the guest physical address space: each either reads this
/// VM's own RAM or device, or takes a synchronous external abort; none
/// returns the victim's pattern. An instruction fetch outside RAM takes an
/// instruction abort.
fn isolation(p: &Platform) {
    let mut t = Tally::default();
    let mut leaks = 0u64;
    let mut probe = |t: &mut Tally, a: u64| {
        let (v, esr, _) = probe_any(|| {
            let v: u64;
            // SAFETY: any answer is caught (device or normal mapping of the
            // guest's own identity map).
            unsafe {
                core::arch::asm!("ldr {v}, [{a}]", a = in(reg) a, v = out(reg) v, options(nostack))
            };
            v
        });
        if esr == 0 && v >> 32 == VICTIM_TAG {
            leaks += 1;
        }
        t.add(3, esr, &[EC_DABT_SAME]);
    };
    // Every 2 MiB of the first 4 GiB, every 64 MiB up to 512 GiB (the
    // guest's 39-bit map), offset by a page so device frame starts differ;
    // not the untouched blocks `attack-cold-tx` and port D need untouched.
    let cold = cold::cold(p);
    for a in (0..4u64 << 30).step_by(2 << 20) {
        if !cold.contains(&(a + 0x1000)) {
            probe(&mut t, a + 0x1000);
        }
    }
    for a in (4u64 << 30..512u64 << 30).step_by(64 << 20) {
        probe(&mut t, a + 0x1000);
    }
    // The rest of the GiB holding this VM's RAM, past its end.
    let past = p.ram_base + p.ram_size;
    let gib_end = (past + (1 << 30) - 1) & !((1 << 30) - 1);
    for a in (past..gib_end).step_by(1 << 20) {
        probe(&mut t, a);
    }
    // Execute outside RAM (normal memory in the guest's own map).
    let fetch = if past + 0x1000 < gib_end {
        let (_, esr, _) = probe_any(|| {
            // SAFETY: the branch target is outside RAM: the fetch aborts and
            // the probe handler returns here through x30.
            unsafe { core::arch::asm!("blr {f}", f = in(reg) past + 0x1000, clobber_abi("C")) };
            0
        });
        Some(esr)
    } else {
        None
    };
    let fetch_ok = fetch.is_none_or(|e| ec(e) == EC_IABT_SAME);
    let ok = leaks == 0 && t.bad.is_none() && fetch_ok;
    verdict(
        "attack-isolation",
        ok,
        format_args!(
            "{} reads of the IPA space: {} answered, {} external aborts, {leaks} carrying the victim's pattern{}; fetch past RAM: {}",
            t.done + t.undef,
            t.done,
            t.undef,
            match t.bad {
                Some((_, e)) => describe(e),
                None => "",
            },
            match fetch {
                Some(e) if ec(e) == EC_IABT_SAME => "instruction abort",
                Some(0) => "EXECUTED (no abort!)",
                Some(_) => "wrong exception class",
                None => "not tried (RAM fills its GiB)",
            }
        ),
    );
}

fn describe(esr: u64) -> &'static str {
    println!("attack: unexpected answer ESR {esr:#x} (EC {:#x})", ec(esr));
    ", AN UNEXPECTED EXCEPTION (see above)"
}

fn report_tally(name: &str, what: &str, t: &Tally) {
    if let Some((insn, esr)) = t.bad {
        println!(
            "{name}: first wrong answer: instruction {insn:#010x} ESR {esr:#x} (EC {:#x})",
            ec(esr)
        );
    }
    verdict(
        name,
        t.bad.is_none(),
        format_args!(
            "{what}: {} completed, {} raised the architectural exception",
            t.done, t.undef
        ),
    );
}

// ---------------------------------------------------------------------------
// The victim.

/// Entry of `mode=victim`: never returns.
pub fn victim(p: &Platform) -> ! {
    START.store(cpu::now(), Ordering::Relaxed);
    let window_ms = p.window_ms.unwrap_or(8_000);
    let period_us = 10_000;
    // RAM pattern: the second quarter of RAM (the image, its stack and
    // the DTB are in the first and last parts).
    let lo = p.ram_base + p.ram_size / 4;
    let hi = p.ram_base + p.ram_size / 2;
    let word = |a: u64| VICTIM_TAG << 32 | (a & 0xFFFF_FFFF);
    for a in (lo..hi).step_by(8) {
        // SAFETY: the second quarter of this VM's RAM is unused by the image
        // (linked at the start of RAM, well under a quarter of it).
        unsafe { (a as *mut u64).write_volatile(word(a)) };
    }
    // Register patterns, read back: the register's own view of the value.
    write_shared_regs(0x5555_5555_0000_0000 | VICTIM_TAG);
    let expect = read_shared_regs();
    let me = &CPUS[cpu::index()];
    let period = cpu::us_to_ticks(period_us);
    let small = cpu::us_to_ticks(2_000);
    // Its stolen-time record (kestrel's PV time): what it waits for the
    // pCPU it shares with the attacker shows there.
    let record = call(u64::from(smccc::pv_time::ST), [0; 3])[0];
    let stolen0 = smccc::pv_time::stolen(record);
    let start = cpu::now();
    let end = start + cpu::us_to_ticks(window_ms * 1000);
    let (mut ran, mut last, mut last_tick) = (0u64, start, start);
    let (mut max_gap, mut ticks_seen) = (0u64, me.ticks.load(Ordering::Acquire));
    let (mut reg_bad, mut mem_bad): (Option<usize>, Option<u64>) = (None, None);
    let mut cursor = lo;
    let mut loops = 0u64;
    cpu::timer_arm(period);
    loop {
        let now = cpu::now();
        let d = now - last;
        if d < small {
            ran += d;
        }
        last = now;
        let t = me.ticks.load(Ordering::Acquire);
        if t != ticks_seen {
            ticks_seen = t;
            max_gap = max_gap.max(now - last_tick);
            last_tick = now;
            cpu::timer_arm(period);
        }
        loops += 1;
        if loops.is_multiple_of(64) {
            let now_regs = read_shared_regs();
            if reg_bad.is_none() {
                reg_bad = (0..SHARED_REGS.len()).find(|&i| now_regs[i] != expect[i]);
            }
            // 4 KiB of the pattern per round.
            for a in (cursor..cursor + 4096).step_by(8) {
                // SAFETY: inside the range filled above.
                let v = unsafe { (a as *const u64).read_volatile() };
                if v != word(a) && mem_bad.is_none() {
                    mem_bad = Some(a);
                }
            }
            cursor = if cursor + 8192 > hi {
                lo
            } else {
                cursor + 4096
            };
        }
        if now >= end {
            break;
        }
    }
    cpu::timer_stop();
    // Written at its last load, behind it now.
    let stolen1 = smccc::pv_time::stolen(record);
    // Frames to the attacker's hostile receive rings, each notify timed,
    // before anything is printed (reported at the end).
    let sends = cold::victim_sends(p);
    max_gap = max_gap.max(last - last_tick);
    // The whole pattern once more.
    for a in (lo..hi).step_by(8) {
        // SAFETY: as above.
        let v = unsafe { (a as *const u64).read_volatile() };
        if v != word(a) && mem_bad.is_none() {
            mem_bad = Some(a);
        }
    }
    let ticks = ticks_seen as u64;
    let window = cpu::ticks_to_us(end - start) / 1000;
    let ran_ms = cpu::ticks_to_us(ran) / 1000;
    let share_pct = ran_ms * 100 / window.max(1);
    let gap_ms = cpu::ticks_to_us(max_gap) / 1000;
    println!(
        "VICTIM: window {window} ms, ran {ran_ms} ms (share {share_pct}%), ticks {ticks} (period {} ms, max gap {gap_ms} ms), memory {}, registers {}",
        period_us / 1000,
        if mem_bad.is_none() { "ok" } else { "CHANGED" },
        if reg_bad.is_none() { "ok" } else { "CHANGED" },
    );
    match mem_bad {
        None => verdict(
            "victim-memory",
            true,
            format_args!("{} MiB pattern intact", (hi - lo) >> 20),
        ),
        Some(a) => verdict(
            "victim-memory",
            false,
            format_args!("the pattern changed at {a:#x}"),
        ),
    }
    match reg_bad {
        None => verdict(
            "victim-registers",
            true,
            format_args!("{} registers kept their values", SHARED_REGS.len()),
        ),
        Some(i) => {
            let now_regs = read_shared_regs();
            verdict(
                "victim-registers",
                false,
                format_args!(
                    "{} changed: {:#x}, expected {:#x}",
                    SHARED_REGS[i], now_regs[i], expect[i]
                ),
            );
        }
    }
    // Stolen time: the window it did not run was mostly spent waiting for
    // the attacker to give the pCPU back, so at least half of it shows as
    // stolen, and never more than the window.
    let off_ms = window.saturating_sub(ran_ms);
    match (stolen0, stolen1) {
        (Some(a), Some(b)) if b >= a => {
            let stolen_ms = (b - a) / 1_000_000;
            verdict(
                "victim-steal",
                stolen_ms >= off_ms / 2 && stolen_ms <= window + 100,
                format_args!(
                    "{stolen_ms} ms stolen of the {off_ms} ms of its {window} ms window it did not run"
                ),
            );
        }
        (Some(a), Some(b)) => verdict(
            "victim-steal",
            false,
            format_args!("stolen time went back: {a} -> {b} ns"),
        ),
        _ => verdict(
            "victim-steal",
            false,
            format_args!("PV_TIME_ST gave no record: {record:#x}"),
        ),
    }
    // The judge (xtask) compares share and ticks with the fair share; here
    // only what no fair scheduler can produce fails.
    verdict(
        "victim-heartbeat",
        ticks > 0 && ran > 0,
        format_args!("{loops} loops, {ticks} timer interrupts"),
    );
    cold::report(sends);
    finish()
}
