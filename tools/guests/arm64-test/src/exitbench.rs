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
    let per = ns(t1 - t0) / n;
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
