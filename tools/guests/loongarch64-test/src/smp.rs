//! Secondary CPUs: bring-up through the IOCSR mailbox + IPI (as QEMU's boot
//! ROM and kestrel's emulated mailbox expect), and a small command loop the
//! boot CPU drives.
//!
//! A secondary waits for work race-free: with CRMD.IE off it checks the
//! sequence number, runs `idle` (which wakes on a pending interrupt whatever
//! CRMD.IE says), then turns IE on to take the interrupt. The boot CPU kicks
//! it with IPI vector [`KICK_VECTOR`] after posting a command.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::console::{fail, pass, Outcome};
use crate::cpu::{csr, csr_write, csr_xchg};
use crate::{asm, checks, cpu, wait_for, CPUS, MAX_CPUS};

/// IPI vector used to wake secondaries for a new command (not counted as a
/// test IPI by the handler).
pub const KICK_VECTOR: u64 = 31;
/// IPI vector the IPI checks send.
pub const TEST_VECTOR: u64 = 2;

/// Commands for the secondaries.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Cmd {
    /// Run the FP/LSX check; the result lands in `FP_ERRORS`.
    Fp = 1,
    /// Spin with interrupts on until `STOP` (bench receivers).
    SpinIrqsOn = 2,
    /// Spin with interrupts masked until `STOP` (bench: sender-only cost).
    SpinIrqsOff = 3,
    /// Spin until the counter reaches `SPIN_END`, counting iterations of a
    /// fixed loop into `SPIN_ITERS` (the fairness window).
    SpinCount = 4,
    /// Write the GED reset register for ever (`mode=resetstorm`).
    ResetLoop = 5,
    /// Register a steal-time record and spin until `STOP`, reading its
    /// `preempted` byte (`pvpreempt`).
    PvPreempt = 6,
    /// Wait with interrupts on until `STOP`, ending QEMU's turn each round
    /// ([`end_turn`]; `mode=bench-ipi`'s target).
    SpinYield = 7,
}

#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const NO: AtomicBool = AtomicBool::new(false);
static ONLINE: [AtomicBool; MAX_CPUS] = [NO; MAX_CPUS];
static SEQ: AtomicU64 = AtomicU64::new(0);
static CMD: AtomicU64 = AtomicU64::new(0);
static DONE: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// Set to end a spin command.
pub static STOP: AtomicBool = AtomicBool::new(false);
/// Per-CPU result of the last FP check: mismatching iterations, or
/// `u64::MAX` when it did not run.
pub static FP_ERRORS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// First bad iteration's detail, per CPU (register index << 32 | iteration).
pub static FP_FIRST: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// `mode=bench-ipi`'s `poke-other`: CPU 0 bumps POKE, a secondary in
/// `Cmd::SpinYield` copies it to PONG (no interrupt). In `.bench_tail`
/// with that mode's code (`exitbench::ipi_mode`).
#[link_section = ".bench_tail.data"]
pub static POKE: AtomicU64 = AtomicU64::new(0);
#[link_section = ".bench_tail.data"]
pub static PONG: AtomicU64 = AtomicU64::new(0);
/// Set by a spinning secondary once it spins (bench start condition).
pub static SPINNING: [AtomicBool; MAX_CPUS] = [NO; MAX_CPUS];
/// The counter value a `SpinCount` window ends at.
static SPIN_END: AtomicU64 = AtomicU64::new(0);
/// Per CPU: chunks of the `SpinCount` loop done, and the counter at its start.
static SPIN_ITERS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
static SPIN_START: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// Iterations of the fixed loop between two counter reads.
const SPIN_CHUNK: u64 = 256;

/// Starts the secondaries; `expected` is the FDT's CPU count (0 = unknown:
/// try every id up to `MAX_CPUS` and count who answers).
pub fn bring_up(expected: usize) -> Outcome {
    let tries = if expected > 0 {
        expected.min(MAX_CPUS)
    } else {
        MAX_CPUS
    };
    let entry = asm::guest_secondary_entry as *const () as u64;
    for c in 1..tries {
        cpu::mail_send(c as u64, 0, entry);
        cpu::ipi_send(c as u64, 0);
    }
    let timeout = if expected > 0 { 10_000_000 } else { 2_000_000 };
    wait_for(timeout, || {
        (1..tries).all(|c| ONLINE[c].load(Ordering::Acquire))
    });
    let online = 1
        + (1..tries)
            .filter(|&c| ONLINE[c].load(Ordering::Acquire))
            .count();
    // CPUs are used densely: stop at the first hole.
    let dense = 1
        + (1..tries)
            .take_while(|&c| ONLINE[c].load(Ordering::Acquire))
            .count();
    CPUS.store(dense, Ordering::Release);
    if expected > 0 && online != expected {
        return fail!("{online} of {expected} CPUs came online");
    }
    if expected == 0 {
        return pass!("{online} CPUs online (no FDT: counted the CPUs that answered)");
    }
    pass!("{online} of {expected} CPUs online, paging and vectors on each")
}

/// The command loop of a secondary.
pub fn secondary_loop(me: usize) -> ! {
    ONLINE[me].store(true, Ordering::Release);
    let mut seen = SEQ.load(Ordering::Acquire);
    loop {
        cpu::set_irqs(false);
        if SEQ.load(Ordering::Acquire) == seen {
            cpu::idle();
        }
        cpu::set_irqs(true);
        let s = SEQ.load(Ordering::Acquire);
        if s != seen {
            seen = s;
            match CMD.load(Ordering::Acquire) {
                x if x == Cmd::Fp as u64 => {
                    let (errs, first) = checks::fp_on_this_cpu(me);
                    FP_FIRST[me].store(first, Ordering::Relaxed);
                    FP_ERRORS[me].store(errs, Ordering::Release);
                }
                x if x == Cmd::SpinCount as u64 => spin_count(me),
                x if x == Cmd::ResetLoop as u64 => crate::reboot::reset_for_ever(),
                x if x == Cmd::PvPreempt as u64 => crate::pvpreempt::secondary(me),
                x if x == Cmd::SpinYield as u64 => spin_yield(me),
                x if x == Cmd::SpinIrqsOn as u64 || x == Cmd::SpinIrqsOff as u64 => {
                    let on = x == Cmd::SpinIrqsOn as u64;
                    cpu::set_irqs(on);
                    SPINNING[me].store(true, Ordering::Release);
                    while !STOP.load(Ordering::Acquire) {
                        cpu::relax();
                    }
                    SPINNING[me].store(false, Ordering::Release);
                    cpu::set_irqs(true);
                }
                _ => {}
            }
            DONE[me].store(s, Ordering::Release);
        }
    }
}

/// `Cmd::SpinYield`: waits with interrupts on until `STOP`, copying
/// `POKE` to `PONG`, ending QEMU's turn each round. In `.bench_tail`, with
/// `mode=bench-ipi`'s code (`exitbench::ipi_mode`).
#[link_section = ".bench_tail"]
#[inline(never)]
fn spin_yield(me: usize) {
    turns_begin();
    cpu::set_irqs(true);
    SPINNING[me].store(true, Ordering::Release);
    while !STOP.load(Ordering::Acquire) {
        let poke = POKE.load(Ordering::Acquire);
        if PONG.load(Ordering::Relaxed) != poke {
            PONG.store(poke, Ordering::Release);
        }
        end_turn();
    }
    SPINNING[me].store(false, Ordering::Release);
    turns_end();
}

/// Ticks ahead [`end_turn`] arms the timer (the shortest one-shot).
const TURN_TICKS: u64 = 4;

/// Masks this CPU's timer interrupt (ECFG.LIE.TI) for [`end_turn`].
#[link_section = ".bench_tail"]
#[inline(never)]
pub fn turns_begin() {
    // SAFETY: only the timer line's enable; the other lines stay as they are.
    unsafe { csr_xchg!(csr::ECFG, 0u64, cpu::INT_TI) };
}

/// Undoes [`turns_begin`]: the timer stopped, its pending interrupt
/// cleared, the line enabled again.
#[link_section = ".bench_tail"]
#[inline(never)]
pub fn turns_end() {
    // SAFETY: stops this CPU's timer, clears its interrupt, re-enables the
    // line (its handler is the trap handler's).
    unsafe {
        csr_write!(csr::TCFG, 0);
        csr_write!(csr::TICLR, 1);
        csr_xchg!(csr::ECFG, cpu::INT_TI, cpu::INT_TI);
    }
}

/// Ends this CPU's turn in QEMU's round robin, for a wait on another CPU.
/// LoongArch has no instruction QEMU takes as a yield (arm64's YIELD);
/// re-arming the timer [`TURN_TICKS`] ahead makes it QEMU's earliest
/// virtual-clock deadline, on which QEMU under `-icount` ends the running
/// CPU's turn at once, to recompute its budget, and the next CPU runs. The
/// timer interrupt is masked ([`turns_begin`]), so it is never taken.
#[inline(always)]
pub fn end_turn() {
    // SAFETY: a one-shot timer on this CPU, its interrupt masked in ECFG.
    unsafe { csr_write!(csr::TCFG, TURN_TICKS | 1) };
}

/// Spins until the counter reaches `SPIN_END`, counting chunks of a fixed
/// loop: every CPU runs the same loop, so the counts compare the CPU time
/// each got.
fn spin_count(me: usize) {
    let end = SPIN_END.load(Ordering::Acquire);
    let start = cpu::now();
    let mut x = start | 1;
    let mut chunks = 0;
    while cpu::now() < end {
        for _ in 0..SPIN_CHUNK {
            x = core::hint::black_box(x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1));
        }
        chunks += 1;
    }
    core::hint::black_box(x);
    SPIN_START[me].store(start, Ordering::Relaxed);
    SPIN_ITERS[me].store(chunks, Ordering::Release);
}

/// The fairness window (`share_ms=N`, after `share_delay_ms=D` of sleep):
/// every CPU spins until the same counter value and the boot CPU prints
/// one line per CPU, `SHARE vcpu=I iters=N start=S end=E hz=F` (S, E in
/// stable-counter ticks, the same counter in every VM). The share each got
/// is judged by whoever compares those lines across VMs (`cargo xtask
/// vmtest`); here it passes when every CPU finished and counted.
pub fn share(ms: u64, delay_ms: u64) -> Outcome {
    if delay_ms > 0 {
        let until = cpu::now() + crate::us(delay_ms * 1000);
        sleep_until(until);
    }
    let hz = crate::COUNTER_HZ.load(Ordering::Relaxed);
    let end = cpu::now() + crate::us(ms * 1000);
    SPIN_END.store(end, Ordering::Release);
    let s = post(Cmd::SpinCount);
    spin_count(0);
    if !wait_done(s, (ms + 60_000) * 1000) {
        return fail!("not every CPU finished its {ms} ms spin");
    }
    let n = CPUS.load(Ordering::Acquire);
    for c in 0..n {
        let iters = SPIN_ITERS[c].load(Ordering::Acquire);
        let start = SPIN_START[c].load(Ordering::Relaxed);
        crate::console::println!("SHARE vcpu={c} iters={iters} start={start} end={end} hz={hz}");
        if iters == 0 {
            return fail!("CPU {c} never ran during the {ms} ms window");
        }
    }
    pass!("{n} CPU(s) spun {ms} ms after {delay_ms} ms")
}

/// Waits in `idle` on a one-shot timer until the counter reaches `until`,
/// so the pCPU can run others meanwhile.
fn sleep_until(until: u64) {
    while cpu::now() < until {
        // Masked while arming: `idle` still wakes on the pending timer,
        // which is taken (and cleared) once interrupts are on again.
        cpu::set_irqs(false);
        let left = until.saturating_sub(cpu::now()).max(4) & !3;
        // SAFETY: a one-shot timer on this CPU; the trap handler clears it.
        unsafe { csr_write!(csr::TCFG, left | 1) };
        cpu::idle();
        cpu::set_irqs(true);
    }
    // SAFETY: stops this CPU's timer.
    unsafe { csr_write!(csr::TCFG, 0) };
}

/// Posts `cmd` to every online secondary and kicks them; returns the
/// sequence number to wait for.
pub fn post(cmd: Cmd) -> u64 {
    STOP.store(false, Ordering::Release);
    CMD.store(cmd as u64, Ordering::Release);
    let s = SEQ.fetch_add(1, Ordering::AcqRel) + 1;
    kick_pending(s);
    s
}

fn kick_pending(s: u64) {
    let n = CPUS.load(Ordering::Acquire);
    for (c, done) in DONE.iter().enumerate().take(n).skip(1) {
        if done.load(Ordering::Acquire) != s {
            cpu::ipi_send(c as u64, KICK_VECTOR);
        }
    }
}

/// Waits (re-kicking every 20 ms) until every secondary finished command
/// `s`; false after `timeout_us`.
pub fn wait_done(s: u64, timeout_us: u64) -> bool {
    let n = CPUS.load(Ordering::Acquire);
    let end = cpu::now() + crate::us(timeout_us);
    loop {
        if (1..n).all(|c| DONE[c].load(Ordering::Acquire) == s) {
            return true;
        }
        if cpu::now() > end {
            return false;
        }
        wait_for(20_000, || {
            (1..n).all(|c| DONE[c].load(Ordering::Acquire) == s)
        });
        kick_pending(s);
    }
}

/// Ends a spin command and waits for the secondaries to return to their loop.
pub fn stop(s: u64) -> bool {
    STOP.store(true, Ordering::Release);
    wait_done(s, 10_000_000)
}

/// Waits until every secondary spins (after `post` of a spin command).
pub fn wait_spinning() -> bool {
    let n = CPUS.load(Ordering::Acquire);
    wait_for(10_000_000, || {
        (1..n).all(|c| SPINNING[c].load(Ordering::Acquire))
    })
}
