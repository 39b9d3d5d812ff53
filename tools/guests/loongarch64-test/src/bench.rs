//! The guest-measured benchmark, from kestrel's own counters (the stats
//! hypercall): exits per IPI, PV against IOCSR, to 1, 3 and all vCPUs,
//! split into the sender's and the receivers' share; and traps per guest
//! timer interrupt. Machine-readable lines:
//!
//! ```text
//! BENCH ipi pv targets=3 exits_per_ipi=4.00 sender=1.00 receivers=3.00 per_target=1.00
//! BENCH timer traps_per_irq=5.00 irqs=100
//! ```
//!
//! kestrel keeps the counters per VM (the stats call returns the calling
//! VM's), so other VMs do not disturb them; every measurement subtracts the
//! cost of reading them (calibrated), and the IPI numbers ignore `EXIT_IRQ`
//! (the hypervisor's own tick interrupting this VM). The sender share is measured with the
//! receivers spinning with interrupts masked; the receivers' share is the
//! rest of a run in which they take and acknowledge every IPI.

use core::sync::atomic::Ordering;

use kestrel_abi::loongarch::{FN_KESTREL_FEATURES, FN_KESTREL_STATS};
use kestrel_abi::{features, stat};

use crate::checks::{self, Targets};
use crate::console::{println, report, skip};
use crate::cpu::{self, csr, csr_write};
use crate::{smp, trap, COUNTER_HZ, CPUS, MAX_CPUS};

const EXIT_KINDS: usize = 10;
const ROUNDS: u64 = 200;

type Snap = [u64; EXIT_KINDS];

fn snapshot() -> Snap {
    let mut s = [0; EXIT_KINDS];
    for (i, v) in s.iter_mut().enumerate() {
        *v = trap::hvcl(FN_KESTREL_STATS, stat::EXIT_HYPERCALL + i as u64, 0, 0);
    }
    s
}

fn delta(a: &Snap, b: &Snap) -> Snap {
    let mut d = [0; EXIT_KINDS];
    for i in 0..EXIT_KINDS {
        d[i] = b[i].wrapping_sub(a[i]);
    }
    d
}

/// Sum of the exits a guest action causes (all kinds but the host tick).
fn guest_exits(d: &Snap) -> u64 {
    d.iter()
        .enumerate()
        .filter(|&(i, _)| i as u64 != stat::EXIT_IRQ)
        .map(|(_, v)| *v)
        .sum()
}

/// `x / n` with two decimals, as "I.FF".
struct Fixed(u64, u64);

impl core::fmt::Display for Fixed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (x, n) = (self.0, self.1.max(1));
        let h = (x * 100 + n / 2) / n;
        write!(f, "{}.{:02}", h / 100, h % 100)
    }
}

/// Runs the benchmark when kestrel's stats are available.
pub fn run(on_kestrel: bool) {
    if !on_kestrel {
        report("bench", skip!("not on kestrel (needs the stats hypercall)"));
        return;
    }
    let f = trap::hvcl(FN_KESTREL_FEATURES, 0, 0, 0);
    if f & features::STATS == 0 {
        report("bench", skip!("kestrel offers no stats (features {f:#x})"));
        return;
    }
    // Calibration: what reading the counters itself costs.
    let a = snapshot();
    let b = snapshot();
    let overhead = guest_exits(&delta(&a, &b));
    println!("BENCH calibration stats_read_exits={overhead}");
    for pv in [true, false] {
        for set in checks::TARGET_SETS {
            ipi(pv, set, overhead);
        }
    }
    timer(overhead);
}

fn targets_of(set: Targets) -> Option<([usize; MAX_CPUS], usize)> {
    let n = CPUS.load(Ordering::Acquire);
    let count = match set {
        Targets::One if n >= 2 => 1,
        Targets::Three if n >= 4 => 3,
        Targets::All if n >= 2 => n,
        _ => return None,
    };
    let mut t = [0; MAX_CPUS];
    for (i, slot) in t.iter_mut().enumerate().take(count) {
        *slot = if matches!(set, Targets::All) {
            i
        } else {
            i + 1
        };
    }
    Some((t, count))
}

fn send(pv: bool, targets: &[usize]) {
    if pv {
        checks::send_pv(targets);
    } else {
        checks::send_iocsr(targets);
    }
}

fn ipi(pv: bool, set: Targets, overhead: u64) {
    let mode = if pv { "pv" } else { "iocsr" };
    let Some((list, count)) = targets_of(set) else {
        println!("BENCH ipi {mode} targets=? skipped (too few vCPUs)");
        return;
    };
    let targets = &list[..count];
    let label = match set {
        Targets::All => "all",
        Targets::One => "1",
        Targets::Three => "3",
    };

    // Sender only: receivers (and this CPU) with interrupts masked.
    let s = smp::post(smp::Cmd::SpinIrqsOff);
    smp::wait_spinning();
    let irqs = cpu::set_irqs(false);
    let a = snapshot();
    for _ in 0..ROUNDS {
        send(pv, targets);
    }
    let b = snapshot();
    let sender = guest_exits(&delta(&a, &b)).saturating_sub(overhead);
    smp::stop(s);
    cpu::set_irqs(true);
    crate::wait_for(20_000, || false);

    // Full path: every target takes and acknowledges every IPI.
    let s = smp::post(smp::Cmd::SpinIrqsOn);
    smp::wait_spinning();
    let a = snapshot();
    let mut lost = 0;
    for _ in 0..ROUNDS {
        let mut before = [0u64; MAX_CPUS];
        for &t in targets {
            before[t] = if pv {
                trap::SWIS[t].load(Ordering::Acquire)
            } else {
                trap::IPIS[t].load(Ordering::Acquire)
            };
        }
        send(pv, targets);
        if checks::wait_acks(pv, targets, &before).is_some() {
            lost += 1;
        }
    }
    let b = snapshot();
    smp::stop(s);
    cpu::set_irqs(irqs);
    let d = delta(&a, &b);
    let total = guest_exits(&d).saturating_sub(overhead);
    let receivers = total.saturating_sub(sender);
    println!(
        "BENCH ipi {mode} targets={label} exits_per_ipi={} sender={} receivers={} per_target={} rounds={ROUNDS} lost={lost}",
        Fixed(total, ROUNDS),
        Fixed(sender, ROUNDS),
        Fixed(receivers, ROUNDS),
        Fixed(receivers, ROUNDS * count as u64),
    );
}

/// Prints this VM's FP and VMID counters as kestrel keeps them:
/// `BENCH counters fp_saves=.. fp_restores=.. fp_traps=.. vmid_fast=..
/// vmid_slow=.. vmid_rollovers=.. tlb_flushes=..` (rollovers and flushes
/// are the host's: always 0 here, docs/hypercalls.md).
pub fn counters(on_kestrel: bool) {
    if !on_kestrel {
        return;
    }
    let s = |i| trap::hvcl(FN_KESTREL_STATS, i, 0, 0) as i64;
    println!(
        "BENCH counters fp_saves={} fp_restores={} fp_traps={} vmid_fast={} vmid_slow={} vmid_rollovers={} tlb_flushes={}",
        s(stat::FP_SAVES),
        s(stat::FP_RESTORES),
        s(stat::FP_TRAPS),
        s(stat::VMID_FAST),
        s(stat::VMID_SLOW),
        s(stat::VMID_ROLLOVERS),
        s(stat::TLB_FLUSHES),
    );
}

fn timer(overhead: u64) {
    let me = cpu::cpu();
    let hz = COUNTER_HZ.load(Ordering::Relaxed);
    let period = (hz / 1000).max(4) & !3;
    const IRQS: u64 = 100;
    cpu::set_irqs(true);
    let before = trap::TICKS[me].load(Ordering::Relaxed);
    let a = snapshot();
    // SAFETY: periodic 1 ms timer; the handler clears each interrupt.
    unsafe { csr_write!(csr::TCFG, period | 3) };
    let end = cpu::now() + crate::us(10_000_000);
    while trap::TICKS[me].load(Ordering::Relaxed) < before + IRQS && cpu::now() < end {
        cpu::idle();
    }
    // SAFETY: stops the timer.
    unsafe { csr_write!(csr::TCFG, 0) };
    let b = snapshot();
    let got = trap::TICKS[me].load(Ordering::Relaxed) - before;
    let d = delta(&a, &b);
    let all: u64 = d.iter().sum::<u64>().saturating_sub(overhead);
    println!(
        "BENCH timer traps_per_irq={} irqs={got} timer={} idle={} sysreg={} irq={} other={}",
        Fixed(all, got),
        d[stat::EXIT_TIMER as usize],
        d[stat::EXIT_IDLE as usize],
        d[stat::EXIT_SYSREG as usize],
        d[stat::EXIT_IRQ as usize],
        d[stat::EXIT_OTHER as usize],
    );
}
