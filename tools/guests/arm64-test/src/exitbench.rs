//! The exit-cost benchmark (`mode=bench-exits`, `mode=bench-switch`;
//! `cargo xtask bench-exits`, `docs/test-guest.md`).
//!
//! Meant for QEMU's `-icount shift=0,sleep=off`: every guest instruction
//! then advances the virtual counter by one nanosecond, so a loop of N
//! operations timed with the guest's own counter gives *instructions per
//! operation*, the same on every run and every host. Each case prints
//!
//! ```text
//! EXIT <case> instr=<per op> exits=<kestrel exits per op> n=<N>
//! ```
//!
//! (`exits=-` off kestrel). The per-op figure includes the loop's own few
//! instructions; `EXIT loop` measures them alone.

use crate::cpu::{self, sysreg_read, CPUS};
use crate::platform::Platform;
use crate::smccc::{self, call, call0};
use crate::{gic, println};
use core::sync::atomic::Ordering;
use kestrel_abi::{arm64, stat};

/// Operations per case.
const N: u64 = 2000;
/// SGI the self-IPI case uses.
const SGI: u32 = 7;

/// Sum of kestrel's exit counters (0 off kestrel).
fn exits(kestrel: bool) -> u64 {
    if !kestrel {
        return 0;
    }
    (0..=stat::EXIT_OTHER)
        .map(|i| call0(arm64::STATS, [i, 0, 0]).max(0) as u64)
        .sum()
}

/// Nanoseconds of counter time (= instructions under `-icount shift=0`).
fn ns(ticks: u64) -> u64 {
    (ticks as u128 * 1_000_000_000 / cpu::freq() as u128) as u64
}

/// Times `n` runs of `op` and prints its line.
fn case(name: &str, kestrel: bool, n: u64, mut op: impl FnMut()) {
    // The exit counter reads are hypercalls themselves: outside the timing.
    let e0 = exits(kestrel);
    let t0 = cpu::now();
    for _ in 0..n {
        op();
    }
    let t1 = cpu::now();
    let e1 = exits(kestrel);
    line(name, kestrel, n, t1 - t0, e0, e1);
}

/// Entry of `mode=bench-exits` (boot vCPU only): never returns.
pub fn exits_mode(p: &Platform, kestrel: bool) -> ! {
    println!(
        "EXIT begin kestrel={} gic={:?} freq={}",
        kestrel as u8,
        p.gic,
        cpu::freq()
    );
    case("loop", kestrel, N, core::hint::spin_loop);
    if kestrel {
        case("hypercall", kestrel, N, || {
            let _ = call(arm64::FEATURES as u64, [0; 3]);
        });
    }
    case("mmio-uart-read", kestrel, N, || {
        // SAFETY: UARTFR of this VM's PL011: reading it has no side effect.
        let _ = unsafe { cpu::mmio_read32(p.uart + 0x18) };
    });
    case("gicd-read", kestrel, N, || {
        // SAFETY: GICD_TYPER: read-only, no side effect.
        let _ = unsafe { cpu::mmio_read32(p.gicd + 0x4) };
    });
    case("sysreg-trap", kestrel, N, || {
        // ID_AA64PFR0_EL1: kestrel traps the ID registers (HCR_EL2.TID3).
        let _ = sysreg_read!("id_aa64pfr0_el1");
    });
    let me = cpu::index();
    let mine = &CPUS[me].sgi[SGI as usize];
    case("ipi-self", kestrel, N / 4, || {
        let before = mine.load(Ordering::Acquire);
        gic::send_sgi(SGI, 1 << me);
        while mine.load(Ordering::Acquire) == before {
            core::hint::spin_loop();
        }
    });
    let period = cpu::us_to_ticks(50);
    let ticks = &CPUS[me].ticks;
    case("wfi-timer-wake", kestrel, N / 8, || {
        // Masked between the check and the WFI; the timer pending ends it.
        let before = ticks.load(Ordering::Acquire);
        cpu::irq_disable();
        cpu::timer_arm(period);
        while ticks.load(Ordering::Acquire) == before {
            cpu::wfi();
            cpu::irq_enable();
            cpu::irq_disable();
        }
        cpu::irq_enable();
    });
    println!("EXIT note wfi-timer-wake includes the 50 us (50000 instr) timer period");
    vtimer_irq(kestrel);
    println!("EXIT end");
    smccc::system_off()
}

/// Prints one case line from a total of `ticks` over `n` operations and
/// the exit counters around them.
fn line(name: &str, kestrel: bool, n: u64, ticks: u64, e0: u64, e1: u64) {
    let per = ns(ticks) / n;
    if kestrel {
        // The second counter read's own hypercalls are not the case's.
        let stat_reads = stat::EXIT_OTHER + 1;
        let ex = e1.saturating_sub(e0).saturating_sub(stat_reads);
        println!(
            "EXIT {name} instr={per} exits={}.{:02} n={n}",
            ex / n,
            ex % n * 100 / n
        );
    } else {
        println!("EXIT {name} instr={per} exits=- n={n}");
    }
}

/// `vtimer-irq`: the virtual timer armed for a deadline D (CNTV_CVAL) 20 us
/// ahead while the vCPU spins with interrupts on (no WFI); its handler
/// masks the timer (CNTV_CTL = 0), counts the tick and EOIs, and the spin
/// sees the count. The figure is the counter when the spin saw it, less
/// D: taking the interrupt, the handler, its EOI and the return, with
/// whatever kestrel does in between (its exits, the injection). The
/// 20 us before D are not in it.
fn vtimer_irq(kestrel: bool) {
    let me = cpu::index();
    let ticks = &CPUS[me].ticks;
    let ahead = cpu::us_to_ticks(20);
    let n = N / 8;
    let mut total = 0;
    let e0 = exits(kestrel);
    for _ in 0..n {
        let before = ticks.load(Ordering::Acquire);
        let deadline = cpu::now() + ahead;
        cpu::sysreg_write!("cntv_cval_el0", deadline);
        cpu::sysreg_write!("cntv_ctl_el0", 1);
        while ticks.load(Ordering::Acquire) == before {
            core::hint::spin_loop();
        }
        total += cpu::now().saturating_sub(deadline);
    }
    let e1 = exits(kestrel);
    line("vtimer-irq", kestrel, n, total, e0, e1);
}

/// Entry of `mode=bench-ipi` (boot vCPU `boot`; the VM has two vCPUs):
/// an interrupt to another vCPU, one at a time. vCPU 1 waits with
/// interrupts on in a loop of YIELDs (`smp::YIELD`); this vCPU sends an
/// SGI (ICC_SGI1R_EL1 or GICD_SGIR) or a PV IPI and waits, with YIELDs
/// too, until vCPU 1's handler counted it (and EOI'd it) in shared
/// memory: each operation is the round trip. Under `-icount` QEMU runs
/// the CPUs in turn and the counter counts the instructions of both, so
/// the figure is every instruction run on either CPU from the send to
/// the sender seeing the count (the YIELD ends a CPU's turn, so a wait
/// costs a few instructions per turn, not a time slice). Never returns.
pub fn ipi_mode(p: &Platform, boot: usize, kestrel: bool) -> ! {
    println!(
        "EXIT begin kestrel={} gic={:?} freq={} ncpus={}",
        kestrel as u8,
        p.gic,
        cpu::freq(),
        p.ncpus
    );
    let Some(other) = (0..p.ncpus).find(|&i| i != boot) else {
        println!("EXIT note bench-ipi needs two vCPUs");
        println!("EXIT end");
        smccc::system_off()
    };
    crate::smp::YIELD.store(true, Ordering::SeqCst);
    let entry = crate::checks::secondary_entry_pa();
    let r = smccc::call0(smccc::psci::CPU_ON, [p.cpus[other], entry, other as u64]);
    let give_up = cpu::deadline(30_000_000);
    while !CPUS[other].online.load(Ordering::Acquire) {
        if r != smccc::psci::SUCCESS || cpu::now() > give_up {
            println!("EXIT note vCPU {other} did not start (CPU_ON = {r})");
            println!("EXIT end");
            smccc::system_off()
        }
        cpu::yield_now();
    }
    // The floor under the IPI rows: the same two waits and a word written
    // to vCPU 1 and copied back by its wait loop, no interrupt, no exit.
    let (poke, pong) = (&crate::smp::POKE, &crate::smp::PONG);
    case("poke-other", kestrel, N / 4, || {
        let v = poke.load(Ordering::Relaxed).wrapping_add(1);
        poke.store(v, Ordering::Release);
        while pong.load(Ordering::Acquire) != v {
            cpu::yield_now();
        }
    });
    let theirs = &CPUS[other].sgi[SGI as usize];
    case("ipi-other", kestrel, N / 4, || {
        let before = theirs.load(Ordering::Acquire);
        gic::send_sgi(SGI, 1 << other);
        while theirs.load(Ordering::Acquire) == before {
            cpu::yield_now();
        }
    });
    if kestrel {
        let pv = &CPUS[other].sgi[crate::smp::PV_IPI_SGI as usize];
        case("ipi-pv-other", kestrel, N / 4, || {
            let before = pv.load(Ordering::Acquire);
            let _ = crate::smp::pv_ipi(1 << other);
            while pv.load(Ordering::Acquire) == before {
                cpu::yield_now();
            }
        });
    }
    println!("EXIT end");
    smccc::system_off()
}

/// Entry of `mode=bench-switch`: two VMs pinned to one pCPU, each
/// waiting for its own timer 200 us ahead in WFI. (QEMU never traps WFE,
/// so a WFI that blocks is the yield; 200 us is beyond kestrel's halt-poll
/// limit, so each wait really blocks.) Each round blocks this vCPU,
/// switches to the other VM, and switches back when the timer wakes it.
pub fn switch_mode(kestrel: bool) -> ! {
    let me = cpu::index();
    let ticks = &CPUS[me].ticks;
    let soon = cpu::us_to_ticks(200);
    let round = || {
        let before = ticks.load(Ordering::Acquire);
        cpu::irq_disable();
        cpu::timer_arm(soon);
        while ticks.load(Ordering::Acquire) == before {
            cpu::wfi();
            cpu::irq_enable();
            cpu::irq_disable();
        }
        cpu::irq_enable();
    };
    // Both VMs start at about the same time; let them both get going.
    for _ in 0..50 {
        round();
    }
    case("vm-switch-wfi", kestrel, N / 4, round);
    println!("EXIT end");
    smccc::system_off()
}
