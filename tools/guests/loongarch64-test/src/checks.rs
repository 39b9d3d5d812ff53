//! The checks. Each returns an [`Outcome`]; `main` prints it.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

use kestrel_abi::loongarch::{FN_IPI, FN_KESTREL_FEATURES, FN_KESTREL_PROBE};
use kestrel_abi::{ret, IpiWindows, KESTREL_MAGIC};

use crate::asm::{self, FpState};
use crate::console::{fail, pass, report, skip, Outcome};
use crate::cpu::{self, csr, csr_write, csr_xchg, iocsr};
use crate::trap::{self, ecode, ecode_of, HVCL_TRAPPED};
use crate::{mmu, smp, wait_for, COUNTER_HZ, CPUS, LSX, MAX_CPUS, POWEROFF_REG, RAM_TOP};

/// A page-aligned test area of `N` pages.
#[repr(C, align(4096))]
pub struct Pages<const N: usize>(UnsafeCell<[[u64; 512]; N]>);
// SAFETY: the pages are test memory touched through volatile accesses; the
// checks that use them run on the boot CPU only.
unsafe impl<const N: usize> Sync for Pages<N> {}

impl<const N: usize> Pages<N> {
    const fn new() -> Self {
        Pages(UnsafeCell::new([[0; 512]; N]))
    }
    fn addr(&self) -> usize {
        self.0.get() as usize
    }
    fn end(&self) -> usize {
        self.addr() + N * 4096
    }
    fn word(&self, page: usize) -> *mut u64 {
        (self.addr() + page * 4096) as *mut u64
    }
}

/// PLV3 data page (the user code may read it).
static USER_PAGE: Pages<1> = Pages::new();
/// PLV3 stack for the user code (and for traps taken from it).
static USER_STACK: Pages<4> = Pages::new();
/// A PLV0-only page the user code must not reach.
static SECRET: Pages<1> = Pages::new();
/// Physical pages behind the alias mapping of the paging check.
static ALIAS: Pages<16> = Pages::new();

/// Virtual addresses the paging check maps.
const ALIAS_VA: usize = 0x4000_0000;
const OUTSIDE_VA: usize = 0x5000_0000;
const UNMAPPED_VA: usize = 0x6000_0000;
/// A guest physical address far beyond any RAM (PALEN is 48 on la464).
const FAR_PA: u64 = 0xf000_0000_0000;

const USER_MAGIC: u64 = 0x0055_5345_5250_4147; // "GAPRESU\0"
const SECRET_MAGIC: u64 = 0x0054_4552_4345_534b; // "KSECRET\0"

/// `break 0` caught by the guest's own handler.
pub fn exceptions() -> Outcome {
    let me = cpu::cpu();
    let before = trap::BRKS.load(Ordering::Relaxed);
    trap::EXPECT_BRK[me].store(true, Ordering::Relaxed);
    // SAFETY: `break 0` traps to the handler, which expects it and resumes
    // at the next instruction.
    unsafe { core::arch::asm!("break 0", options(nostack)) };
    if trap::BRKS.load(Ordering::Relaxed) == before + 1 {
        pass!("break 0 delivered to the guest's EENTRY and resumed")
    } else {
        fail!("break 0 was not delivered")
    }
}

/// Builds the page tables, switches CRMD from DA to PG and proves the TLB
/// is filled from the guest's tables by its own refill handler.
pub fn paging() -> Outcome {
    mmu::build();
    // SAFETY: linker symbols, only their addresses are used.
    let (img_start, img_end, ut_start, ut_end) = unsafe {
        (
            &asm::__image_start as *const u8 as usize,
            &asm::__image_end as *const u8 as usize,
            &asm::__user_text_start as *const u8 as usize,
            &asm::__user_text_end as *const u8 as usize,
        )
    };
    mmu::identity(img_start, img_end, mmu::KERNEL_RW);
    mmu::identity(ut_start, ut_end, mmu::USER_RW);
    mmu::identity(USER_PAGE.addr(), USER_PAGE.end(), mmu::USER_RW);
    mmu::identity(USER_STACK.addr(), USER_STACK.end(), mmu::USER_RW);
    mmu::identity(
        crate::console::base(),
        crate::console::base() + 8,
        mmu::DEVICE,
    );
    mmu::identity(POWEROFF_REG, POWEROFF_REG + 1, mmu::DEVICE);
    mmu::identity(
        crate::devirq::PCH_PIC,
        crate::devirq::PCH_PIC + 0x400,
        mmu::DEVICE,
    );
    mmu::identity(
        crate::virtio::BASE,
        crate::virtio::BASE + crate::virtio::SIZE,
        mmu::DEVICE,
    );
    for i in 0..16 {
        mmu::map(
            ALIAS_VA + i * 4096,
            (ALIAS.addr() + (15 - i) * 4096) as u64,
            mmu::KERNEL_RW,
        );
    }
    let top = RAM_TOP.load(Ordering::Relaxed);
    if top != 0 {
        mmu::map(OUTSIDE_VA, top, mmu::KERNEL_RW);
    }
    mmu::map(OUTSIDE_VA + 4096, FAR_PA, mmu::KERNEL_RW);

    mmu::enable_on_this_cpu();
    if !mmu::paging_on() {
        return fail!("CRMD.PG did not stick");
    }
    mmu::flush_tlb();
    let r0 = trap::GUEST_TLB_REFILLS.load(Ordering::Relaxed);
    for i in 0..16 {
        // SAFETY: ALIAS_VA + i pages map the ALIAS pages (mapped above).
        unsafe { ((ALIAS_VA + i * 4096) as *mut u64).write_volatile(0xa11a_5000 + i as u64) };
    }
    let refills = trap::GUEST_TLB_REFILLS.load(Ordering::Relaxed) - r0;
    for i in 0..16 {
        // SAFETY: ALIAS pages are identity mapped test memory.
        let v = unsafe { ALIAS.word(15 - i).read_volatile() };
        if v != 0xa11a_5000 + i as u64 {
            return fail!(
                "alias page {i}: wrote {:#x} through VA {:#x}, physical page holds {v:#x}",
                0xa11a_5000 + i as u64,
                ALIAS_VA + i * 4096
            );
        }
    }
    if refills < 8 {
        return fail!("only {refills} TLB refills for 16 fresh pages");
    }
    match trap::probe(UNMAPPED_VA) {
        Err(e) if ecode_of(e) == ecode::PIL => {}
        Err(e) => {
            return fail!(
                "unmapped VA {UNMAPPED_VA:#x}: {} instead of PIL",
                ecode::name(ecode_of(e))
            )
        }
        Ok(v) => return fail!("unmapped VA {UNMAPPED_VA:#x} read {v:#x} without a fault"),
    }
    pass!("PG on, {refills} refills by the guest's handler for 16 remapped pages, data where its page tables say, PIL at an unmapped VA")
}

/// Ten periodic timer interrupts on the boot CPU.
pub fn timer() -> Outcome {
    let me = cpu::cpu();
    let hz = COUNTER_HZ.load(Ordering::Relaxed);
    let period = (hz / 1000).max(4) & !3;
    let before = trap::TICKS[me].load(Ordering::Relaxed);
    let t0 = cpu::now();
    // SAFETY: periodic timer, 1 ms; the handler clears each interrupt.
    unsafe { csr_write!(csr::TCFG, period | 3) };
    cpu::set_irqs(true);
    let end = t0 + crate::us(5_000_000);
    while trap::TICKS[me].load(Ordering::Relaxed) < before + 10 && cpu::now() < end {
        cpu::idle();
    }
    let t1 = cpu::now();
    // SAFETY: stops the timer.
    unsafe {
        csr_write!(csr::TCFG, 0);
        csr_write!(csr::TICLR, 1);
    }
    let got = trap::TICKS[me].load(Ordering::Relaxed) - before;
    let elapsed_us = (t1 - t0) * 1000 / (hz / 1000);
    if got < 10 {
        return fail!("{got} timer interrupts in {elapsed_us} us (wanted 10)");
    }
    if elapsed_us < 8_000 {
        return fail!("10 interrupts of a 1 ms timer came in only {elapsed_us} us");
    }
    pass!("{got} interrupts of a 1 ms periodic timer in {elapsed_us} us (TCFG, TICLR, ECFG.LIE, CRMD.IE)")
}

/// kestrel discovery: IOCSR features bit 11, then the `hvcl` probe. Prints
/// its own line; returns whether kestrel answered.
pub fn probe_kestrel() -> bool {
    let vm = cpu::iocsr_read32(iocsr::FEATURES) as u64 & iocsr::FEATURE_VM != 0;
    let r = trap::hvcl(FN_KESTREL_PROBE, 0, 0, 0);
    let (o, found) = if r == HVCL_TRAPPED {
        (
            skip!(
                "not on kestrel (hvcl raised INE, caught by the guest's handler; IOCSR VM bit {})",
                vm as u8
            ),
            false,
        )
    } else if r == KESTREL_MAGIC {
        let f = trap::hvcl(FN_KESTREL_FEATURES, 0, 0, 0);
        if !vm {
            (
                fail!("kestrel answered the probe but IOCSR features (0x8) lack the VM bit 11"),
                true,
            )
        } else {
            (
                pass!("IOCSR VM bit set, hvcl probe answered \"kestrel\", features {f:#x}"),
                true,
            )
        }
    } else {
        (
            skip!("a hypervisor answered the probe with {r:#x}: not kestrel"),
            false,
        )
    };
    report("kestrel-probe", o);
    found
}

/// SWI0 raised on the CPU itself reaches the handler (the PV IPI path).
///
/// QEMU TCG notices a software-set ESTAT.IS bit only when it next evaluates
/// interrupts (at a hardware interrupt), so if SWI0 is not taken within
/// 10 ms a one-shot timer is armed to make it look; the handler must then
/// see and clear SWI0 as well.
pub fn swi0_self() -> Outcome {
    let me = cpu::cpu();
    let before = trap::SWIS[me].load(Ordering::Relaxed);
    cpu::set_irqs(true);
    // SAFETY: sets ESTAT.IS bit 0; the handler clears it.
    unsafe { csr_xchg!(csr::ESTAT, cpu::INT_SWI0, cpu::INT_SWI0) };
    let taken = || trap::SWIS[me].load(Ordering::Relaxed) > before;
    if wait_for(10_000, taken) {
        return pass!("ESTAT.IS[0] set by software, taken at once and cleared by the handler");
    }
    let period = (COUNTER_HZ.load(Ordering::Relaxed) / 1000).max(4) & !3;
    // SAFETY: one-shot timer (no PERIODIC bit); the handler clears it.
    unsafe { csr_write!(csr::TCFG, period | 1) };
    let ok = wait_for(1_000_000, taken);
    // SAFETY: stops the timer.
    unsafe { csr_write!(csr::TCFG, 0) };
    let still = crate::cpu::csr_read!(csr::ESTAT) & cpu::INT_SWI0 != 0;
    if ok && !still {
        pass!("ESTAT.IS[0] set by software, taken (at the next hardware interrupt) and cleared by the handler")
    } else if ok {
        fail!("SWI0 taken but ESTAT.IS[0] still set")
    } else {
        fail!("SWI0 was not taken")
    }
}

/// The IPI target sets: 1, 3 and all CPUs.
#[derive(Clone, Copy)]
pub enum Targets {
    One,
    Three,
    All,
}

pub const TARGET_SETS: [Targets; 3] = [Targets::One, Targets::Three, Targets::All];

impl Targets {
    fn list(self, n: usize) -> Option<([usize; MAX_CPUS], usize)> {
        let mut t = [0; MAX_CPUS];
        let count = match self {
            Targets::One if n >= 2 => 1,
            Targets::Three if n >= 4 => 3,
            Targets::All if n >= 2 => n,
            _ => return None,
        };
        for (i, slot) in t.iter_mut().enumerate().take(count) {
            *slot = match self {
                Targets::All => i,
                _ => i + 1,
            };
        }
        Some((t, count))
    }
    fn suffix(self) -> &'static str {
        match self {
            Targets::One => "1",
            Targets::Three => "3",
            Targets::All => "all",
        }
    }
}

const IPI_ROUNDS: usize = 50;

/// Sends one IPI to every target of `set` through IOCSR IPI_SEND and waits
/// for each target's acknowledgement (its handler's count).
pub fn send_iocsr(targets: &[usize]) {
    for &t in targets {
        cpu::ipi_send(t as u64, smp::TEST_VECTOR);
    }
}

/// Sends one PV IPI (as few `hvcl` as the 128-wide windows allow) to
/// `targets` (ascending); returns the first non-zero return code.
pub fn send_pv(targets: &[usize]) -> u64 {
    let mut w = IpiWindows::new();
    let mut rc = 0;
    for &t in targets {
        trap::MESSAGES[t].fetch_or(1, Ordering::AcqRel);
        if let Some(win) = w.push(t as u64) {
            let r = trap::hvcl(FN_IPI, win.low, win.high, win.min);
            if rc == 0 {
                rc = r;
            }
        }
    }
    if let Some(win) = w.finish() {
        let r = trap::hvcl(FN_IPI, win.low, win.high, win.min);
        if rc == 0 {
            rc = r;
        }
    }
    rc
}

fn counts(pv: bool, t: usize) -> u64 {
    if pv {
        trap::SWIS[t].load(Ordering::Acquire)
    } else {
        trap::IPIS[t].load(Ordering::Acquire)
    }
}

/// Waits until every target's count passed `before`.
pub fn wait_acks(pv: bool, targets: &[usize], before: &[u64; MAX_CPUS]) -> Option<usize> {
    targets
        .iter()
        .find(|&&t| !wait_for(2_000_000, || counts(pv, t) > before[t]))
        .copied()
}

fn ipi_check(set: Targets, pv: bool) -> Outcome {
    let n = CPUS.load(Ordering::Acquire);
    let Some((list, count)) = set.list(n) else {
        return skip!("needs more CPUs ({n} online)");
    };
    let targets = &list[..count];
    cpu::set_irqs(true);
    for round in 0..IPI_ROUNDS {
        let mut before = [0u64; MAX_CPUS];
        for &t in targets {
            before[t] = counts(pv, t);
        }
        if pv {
            let rc = send_pv(targets);
            if rc != 0 {
                return fail!("round {round}: hvcl IPI returned {}", rc as i64);
            }
        } else {
            send_iocsr(targets);
        }
        if let Some(t) = wait_acks(pv, targets, &before) {
            return fail!("round {round}: cpu {t} did not acknowledge within 2 s");
        }
    }
    pass!(
        "{IPI_ROUNDS} rounds to cpus {:?}, each acknowledged by the target's {} handler",
        targets,
        if pv { "SWI0" } else { "IPI" }
    )
}

/// IOCSR IPIs (IPI_SEND) to 1, 3 and all CPUs.
pub fn ipi_iocsr(set: Targets) -> (&'static str, Outcome) {
    let name = match set {
        Targets::One => "ipi-iocsr-1",
        Targets::Three => "ipi-iocsr-3",
        Targets::All => "ipi-iocsr-all",
    };
    let _ = set.suffix();
    (name, ipi_check(set, false))
}

/// PV IPIs (hvcl 0x100, function 1) to 1, 3 and all CPUs.
pub fn ipi_pv(set: Targets, on_kestrel: bool) -> (&'static str, Outcome) {
    let name = match set {
        Targets::One => "ipi-pv-1",
        Targets::Three => "ipi-pv-3",
        Targets::All => "ipi-pv-all",
    };
    if !on_kestrel {
        return (name, skip!("not on kestrel"));
    }
    (name, ipi_check(set, true))
}

/// The PV IPI call refuses bad windows with -2 and delivers nothing.
pub fn ipi_pv_invalid(on_kestrel: bool) -> Outcome {
    if !on_kestrel {
        return skip!("not on kestrel");
    }
    let n = CPUS.load(Ordering::Acquire) as u64;
    let before: u64 = (0..n as usize)
        .map(|t| trap::SWIS[t].load(Ordering::Acquire))
        .sum();
    let cases = [
        ("empty bitmap", 0u64, 0u64, 0u64),
        ("min beyond the vCPUs", 1, 0, n),
        ("bit naming a missing vCPU", 1 << n.min(63), 0, 0),
        ("high half naming a missing vCPU", 0, 1, 0),
    ];
    for (what, lo, hi, min) in cases {
        let r = trap::hvcl(FN_IPI, lo, hi, min);
        if r as i64 != ret::INVALID_PARAMETER {
            return fail!("{what}: returned {} instead of -2", r as i64);
        }
    }
    cpu::set_irqs(true);
    wait_for(10_000, || false);
    let after: u64 = (0..n as usize)
        .map(|t| trap::SWIS[t].load(Ordering::Acquire))
        .sum();
    if after != before {
        return fail!("a refused call delivered {} IPIs", after - before);
    }
    pass!("4 malformed windows refused with -2, nothing delivered")
}

/// Iterations of the FP/LSX check per CPU (command line `fp_iterations=N`).
pub static FP_ITERATIONS: AtomicU64 = AtomicU64::new(2000);

fn fp_pattern(me: usize, it: u64) -> FpState {
    let mut s = FpState::ZERO;
    for (i, r) in s.regs.iter_mut().enumerate() {
        for (h, w) in r.iter_mut().enumerate() {
            *w = 0x5a00_0000_0000_0000
                ^ (me as u64) << 48
                ^ it << 20
                ^ (i as u64) << 8
                ^ (h as u64) << 4
                ^ 0x0123_4567_0000_0000u64.rotate_left((i + me) as u32);
        }
    }
    // FCSR0: rounding mode [9:8] and flags [20:16]; no enables (no FP traps).
    s.fcsr0 = ((me as u64 + it) & 3) << 8 | (it & 0x1f) << 16;
    s.fcc = (me as u64 * 37 + it) & 0xff;
    s
}

/// The first difference between what was read back and what was loaded:
/// register 0-31, 32 = FCSR0, 33 = FCC.
fn fp_diff(out: &FpState, want: &FpState, lsx: bool) -> Option<u64> {
    for i in 0..32 {
        if out.regs[i][0] != want.regs[i][0] || (lsx && out.regs[i][1] != want.regs[i][1]) {
            return Some(i as u64);
        }
    }
    if (out.fcsr0 & 0x1f1f_031f) != want.fcsr0 {
        return Some(32);
    }
    if (out.fcc & 0xff) != want.fcc {
        return Some(33);
    }
    None
}

/// Proves the FP check can fail: loads a pattern with one register (its
/// high half when there is LSX), FCSR0 or FCC changed, and the comparison
/// against the original must name exactly that item.
fn fp_selftest() -> Result<(), u64> {
    let lsx = LSX.load(Ordering::Relaxed);
    let want = fp_pattern(0, 12345);
    for (k, item) in [7u64, 31, 32, 33].into_iter().enumerate() {
        let mut changed = want;
        match item {
            32 => changed.fcsr0 ^= 1 << 8,
            33 => changed.fcc ^= 1 << 5,
            i => changed.regs[i as usize][(lsx != 0) as usize] ^= 1 << (3 + k),
        }
        let mut out = FpState::ZERO;
        // SAFETY: valid FpState images; only FP/LSX registers and t0/t1 change.
        unsafe {
            asm::guest_fp_load(&changed, lsx);
            asm::guest_fp_store(&mut out, lsx);
        }
        if fp_diff(&out, &want, lsx != 0) != Some(item) {
            return Err(item);
        }
    }
    Ok(())
}

/// Loads a per-CPU, per-iteration pattern into all 32 FPRs (128-bit LSX
/// registers when present), FCSR0 and FCC0-7, lets the CPU idle (odd
/// iterations: wait for a 200 us timer interrupt) or spin (even ones), and
/// reads everything back. Returns (bad iterations, first detail).
pub fn fp_on_this_cpu(me: usize) -> (u64, u64) {
    let lsx = LSX.load(Ordering::Relaxed);
    let hz = COUNTER_HZ.load(Ordering::Relaxed);
    let period = (hz / 5000).max(4) & !3;
    // SAFETY: this CPU's periodic timer; the handler clears each interrupt.
    unsafe { csr_write!(csr::TCFG, period | 3) };
    cpu::set_irqs(true);
    let mut errors = 0;
    let mut first = 0;
    let mut out = FpState::ZERO;
    for it in 0..FP_ITERATIONS.load(Ordering::Relaxed) {
        let want = fp_pattern(me, it);
        // SAFETY: the buffers are valid FpState images; only FP/LSX
        // registers and t0/t1 are written.
        unsafe { asm::guest_fp_load(&want, lsx) };
        if it % 2 == 1 {
            cpu::idle();
        } else {
            let end = cpu::now() + crate::us(100);
            while cpu::now() < end {
                cpu::relax();
            }
        }
        // SAFETY: as above.
        unsafe { asm::guest_fp_store(&mut out, lsx) };
        if let Some(b) = fp_diff(&out, &want, lsx != 0) {
            if errors == 0 {
                first = b << 32 | it;
            }
            errors += 1;
        }
    }
    // SAFETY: stops the timer.
    unsafe {
        csr_write!(csr::TCFG, 0);
        csr_write!(csr::TICLR, 1);
    }
    (errors, first)
}

/// The FP/LSX check on every CPU at once.
pub fn fp_all_cpus() -> Outcome {
    if let Err(item) = fp_selftest() {
        return fail!(
            "self-test: a change of item {item} (0-31 register, 32 FCSR0, 33 FCC) went unnoticed"
        );
    }
    let n = CPUS.load(Ordering::Acquire);
    for e in smp::FP_ERRORS.iter() {
        e.store(u64::MAX, Ordering::Relaxed);
    }
    let s = smp::post(smp::Cmd::Fp);
    let (e0, f0) = fp_on_this_cpu(0);
    smp::FP_ERRORS[0].store(e0, Ordering::Relaxed);
    smp::FP_FIRST[0].store(f0, Ordering::Relaxed);
    if !smp::wait_done(s, 300_000_000) {
        return fail!("the secondaries did not finish within 300 s");
    }
    for c in 0..n {
        let e = smp::FP_ERRORS[c].load(Ordering::Acquire);
        if e != 0 {
            let f = smp::FP_FIRST[c].load(Ordering::Relaxed);
            let what = match f >> 32 {
                32 => "FCSR0",
                33 => "FCC",
                _ => "an FP/vector register",
            };
            return fail!(
                "cpu {c}: {e} of {} iterations lost state (first: {what} {} at iteration {})",
                FP_ITERATIONS.load(Ordering::Relaxed),
                f >> 32,
                f & 0xffff_ffff
            );
        }
    }
    pass!(
        "{n} CPUs x {} iterations (idle / preempted), {} bits of 32 registers + FCSR0 + FCC intact (the comparison caught 4 planted changes)",
        FP_ITERATIONS.load(Ordering::Relaxed),
        if LSX.load(Ordering::Relaxed) != 0 {
            128
        } else {
            64
        }
    )
}

fn run_user(pc: unsafe extern "C" fn(), a0: u64, a1: u64) -> u64 {
    let me = cpu::cpu();
    let irqs = cpu::set_irqs(false);
    trap::IN_USER[me].store(true, Ordering::Relaxed);
    // SAFETY: `pc` is code in the PLV3 page; the user stack is PLV3; the
    // handler brings the CPU back through guest_user_return on the first
    // exception the user code takes.
    let e = unsafe { asm::guest_enter_user(pc as usize, USER_STACK.end() - 64, a0, a1) };
    trap::IN_USER[me].store(false, Ordering::Relaxed);
    cpu::set_irqs(irqs);
    e
}

/// PLV3 code can read its own page but not the guest kernel's.
pub fn user_isolation() -> Outcome {
    let me = cpu::cpu();
    // SAFETY: test pages, identity mapped.
    unsafe {
        USER_PAGE.word(0).write_volatile(USER_MAGIC);
        SECRET.word(0).write_volatile(SECRET_MAGIC);
    }
    let user = USER_PAGE.addr() as u64;
    let secret = SECRET.addr() as u64;
    let e = run_user(asm::guest_user_load, user, 0);
    if ecode_of(e) != ecode::SYS || trap::USER_A1[me].load(Ordering::Relaxed) != USER_MAGIC {
        return fail!(
            "PLV3 read of its own page: {} (a1 {:#x})",
            ecode::name(ecode_of(e)),
            trap::USER_A1[me].load(Ordering::Relaxed)
        );
    }
    let e = run_user(asm::guest_user_load, secret, 0);
    if ecode_of(e) != ecode::PPI {
        return fail!(
            "PLV3 read of a PLV0 page: {} instead of PPI (a1 {:#x})",
            ecode::name(ecode_of(e)),
            trap::USER_A1[me].load(Ordering::Relaxed)
        );
    }
    if trap::USER_A1[me].load(Ordering::Relaxed) == SECRET_MAGIC {
        return fail!("PLV3 read the PLV0 secret");
    }
    if trap::LAST_BADV[me].load(Ordering::Relaxed) != secret {
        return fail!(
            "PPI with BADV {:#x}, not {secret:#x}",
            trap::LAST_BADV[me].load(Ordering::Relaxed)
        );
    }
    let e = run_user(asm::guest_user_store, secret, 0xbad);
    // SAFETY: identity-mapped test page.
    let kept = unsafe { SECRET.word(0).read_volatile() } == SECRET_MAGIC;
    if ecode_of(e) != ecode::PPI || !kept {
        return fail!(
            "PLV3 write of a PLV0 page: {}, secret {}",
            ecode::name(ecode_of(e)),
            if kept { "kept" } else { "overwritten" }
        );
    }
    let e = run_user(asm::guest_user_csr, 0, 0);
    if ecode_of(e) != ecode::IPE {
        return fail!("csrrd at PLV3: {} instead of IPE", ecode::name(ecode_of(e)));
    }
    pass!("PLV3 reads its page, gets PPI reading and writing a PLV0 page (BADV right, data kept), IPE on csrrd")
}

/// Guest physical addresses beyond its RAM raise an exception.
///
/// The first page after the RAM the FDT lists is probed unless it falls in
/// the LoongArch virt I/O window `0x1000_0000..0x8000_0000` (QEMU with
/// 256 MiB ends low RAM right where its interrupt controller starts), and a
/// page far above any RAM always is.
pub fn outside_ram() -> Outcome {
    let mut top = RAM_TOP.load(Ordering::Relaxed);
    if (0x1000_0000..0x8000_0000).contains(&top) {
        top = 0;
    }
    let mut tried = 0;
    let mut names = [""; 2];
    for (k, (va, pa)) in [(OUTSIDE_VA, top), (OUTSIDE_VA + 4096, FAR_PA)]
        .into_iter()
        .enumerate()
    {
        if pa == 0 {
            continue;
        }
        tried += 1;
        match trap::probe(va) {
            Ok(v) => return fail!("PA {pa:#x} (beyond RAM) read {v:#x} without an exception"),
            Err(e) => names[k] = ecode::name(ecode_of(e)),
        }
    }
    if tried == 2 {
        pass!(
            "loads from PA {top:#x} (end of RAM) and {FAR_PA:#x} raised {} and {}",
            names[0],
            names[1]
        )
    } else {
        pass!(
            "load from PA {FAR_PA:#x} raised {} (end of RAM unknown, or in the I/O window)",
            names[1]
        )
    }
}
