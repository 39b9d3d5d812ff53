//! The exit-cost benchmark (`mode=bench-exits`, `mode=bench-switch`;
//! `cargo xtask bench-exits`, `docs/test-guest-loongarch.md`).
//!
//! Meant for QEMU's `-icount shift=0,sleep=off`: every guest instruction
//! (and every instruction kestrel runs on the guest's behalf) then advances
//! QEMU's virtual clock by one nanosecond. The stable counter (`rdtime.d`)
//! counts that clock at its own frequency (100 MHz on QEMU virt: one tick
//! per 10 instructions), so a loop of N operations timed with it gives
//! *instructions per operation*, the same on every run and every host.
//! Each case prints
//!
//! ```text
//! EXIT <case> instr=<per op> exits=<kestrel exits per op> n=<N>
//! ```
//!
//! (`exits=-` off kestrel). The per-op figure includes the loop's own few
//! instructions; `EXIT loop` measures them alone. Each case runs its
//! operation once before the timing (the guest TLB entry of the UART, the
//! code's own shadow entries), so the timed loop measures the steady state.

use core::sync::atomic::{AtomicU8, Ordering};

use kestrel_abi::loongarch::{FN_IPI, FN_KESTREL_FEATURES, FN_KESTREL_STATS};
use kestrel_abi::stat;

use crate::console::println;
use crate::cpu::{self, csr, csr_read, csr_write, iocsr};
use crate::{mmu, smp, trap, COUNTER_HZ, RAM_TOP};

/// Operations per case.
const N: u64 = 2000;
/// `mode=bench-exits` (1) or `mode=bench-switch` (2); 0: the checks.
static MODE: AtomicU8 = AtomicU8::new(0);
/// Pages the TLB-refill case touches, one per even/odd pair (a refill
/// fills a pair): 256 pairs = 2 MiB = one page-table page.
const REFILL_PAIRS: usize = 256;
/// Where they are mapped (all onto one physical page).
const REFILL_VA: usize = 0x7000_0000;
/// The stage-2 case's blocks: 4 MiB apart in the high RAM of its VM
/// (`configs/bench/la64-exits.toml` gives it 768 MiB, so guest physical
/// 0x8000_0000-0xa000_0000; the guest's image and stacks are in the low
/// RAM, its DTB in the last 2 MiB, beyond these 400 MiB). On a VM without
/// such RAM the loads hit nothing kestrel maps: the case is skipped there
/// (its one-VM configs have 32 MiB: `blocks` says how many fit).
const S2_RAM_START: u64 = 0x8000_0000;
const S2_RAM_END: u64 = 0x8000_0000 + 100 * S2_BLOCK;
const S2_BLOCK: u64 = 4 << 20;
/// Where the guest maps them (one page each).
const S2_VA: usize = 0x6000_0000;

/// The physical page behind every page of the refill case.
#[repr(C, align(4096))]
struct Page([u64; 512]);
static mut REFILL_PAGE: Page = Page([0; 512]);

/// `mode=bench-exits` / `mode=bench-switch` / `mode=bench-ipi` from the
/// command line.
pub fn set_mode(m: &str) -> bool {
    let v = match m {
        "bench-exits" => 1,
        "bench-switch" => 2,
        "bench-ipi" => 3,
        _ => return false,
    };
    MODE.store(v, Ordering::Relaxed);
    true
}

/// Runs the selected benchmark (never returns), or returns for the checks.
/// Called with paging on (the refill case needs the guest's page tables);
/// `fdt_cpus` is the FDT's CPU count (`mode=bench-ipi` starts them).
pub fn run_mode(fdt_cpus: usize) {
    match MODE.load(Ordering::Relaxed) {
        1 => exits_mode(),
        2 => switch_mode(),
        3 => ipi_mode(fdt_cpus),
        _ => {}
    }
}

/// Whether kestrel answers (the probe `hvcl`; INE off kestrel).
fn on_kestrel() -> bool {
    trap::hvcl(kestrel_abi::loongarch::FN_KESTREL_PROBE, 0, 0, 0) == kestrel_abi::KESTREL_MAGIC
}

/// Sum of kestrel's exit counters for this VM (0 off kestrel).
fn exits(kestrel: bool) -> u64 {
    if !kestrel {
        return 0;
    }
    (stat::EXIT_HYPERCALL..=stat::EXIT_OTHER)
        .map(|i| trap::hvcl(FN_KESTREL_STATS, i, 0, 0))
        .fold(0u64, u64::wrapping_add)
}

/// Nanoseconds of counter time (= instructions under `-icount shift=0`).
fn ns(ticks: u64) -> u64 {
    let hz = COUNTER_HZ.load(Ordering::Relaxed).max(1);
    (ticks as u128 * 1_000_000_000 / hz as u128) as u64
}

/// Times `n` runs of `op` (after one untimed run) and prints its line.
fn case(name: &str, kestrel: bool, n: u64, mut op: impl FnMut()) {
    op();
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
        // The first read's hypercalls after its counters were sampled, and
        // the second read's before: one read's worth in all.
        let stat_reads = stat::EXIT_OTHER - stat::EXIT_HYPERCALL + 1;
        let ex = e1.wrapping_sub(e0).saturating_sub(stat_reads);
        println!(
            "EXIT {name} instr={per} exits={}.{:02} n={n}",
            ex / n,
            ex % n * 100 / n
        );
    } else {
        println!("EXIT {name} instr={per} exits=- n={n}");
    }
}

/// Arms the guest's timer, one shot, `ticks` ahead (a multiple of 4).
fn timer_oneshot(ticks: u64) {
    // SAFETY: TCFG En, one shot; the handler clears the interrupt (TICLR).
    unsafe { csr_write!(csr::TCFG, (ticks.max(4) & !3) | 1) };
}

/// Blocks in `idle` until the timer interrupt `ticks` ahead was taken.
/// Interrupts are masked between the check and the `idle` (which wakes on
/// ECFG.LIE alone), so the interrupt cannot slip in between.
fn idle_for(ticks: u64) {
    let me = cpu::cpu();
    let before = trap::TICKS[me].load(Ordering::Acquire);
    cpu::set_irqs(false);
    timer_oneshot(ticks);
    while trap::TICKS[me].load(Ordering::Acquire) == before {
        cpu::idle();
        cpu::set_irqs(true);
        cpu::set_irqs(false);
    }
    cpu::set_irqs(true);
}

/// Maps the refill case's pages: the even page of each pair, all onto one
/// physical page (the odd page stays invalid: a refill loads both).
fn map_refill_pages() {
    let pa = core::ptr::addr_of!(REFILL_PAGE) as u64;
    for i in 0..REFILL_PAIRS {
        mmu::map(REFILL_VA + i * 8192, pa, mmu::KERNEL_RW);
    }
}

fn exits_mode() -> ! {
    let kestrel = on_kestrel();
    println!(
        "EXIT begin kestrel={} freq={}",
        kestrel as u8,
        COUNTER_HZ.load(Ordering::Relaxed)
    );
    case("loop", kestrel, N, core::hint::spin_loop);
    if kestrel {
        case("hypercall", kestrel, N, || {
            let _ = trap::hvcl(FN_KESTREL_FEATURES, 0, 0, 0);
        });
    }
    case("csr-read", kestrel, N, || {
        // PRCFG1: read-only, no side effect; kestrel emulates every CSR.
        let _ = csr_read!(0x21);
    });
    case("iocsr-read", kestrel, N, || {
        let _ = cpu::iocsr_read32(iocsr::FEATURES);
    });
    let lsr = crate::console::base() + 5;
    case("mmio-uart-read", kestrel, N, || {
        // SAFETY: the 16550's LSR (identity mapped as a device): reading
        // it has no side effect.
        let _ = unsafe { core::ptr::read_volatile(lsr as *const u8) };
    });
    // TLB refill: each operation loads from a page pair nobody has touched,
    // so the guest's own refill handler runs (under kestrel each of its
    // privileged instructions is an exit, and then a shadow entry is made).
    map_refill_pages();
    mmu::flush_tlb();
    let mut next = 0;
    case("tlb-refill", kestrel, REFILL_PAIRS as u64 - 1, || {
        let va = REFILL_VA + next * 8192;
        next += 1;
        // SAFETY: mapped above onto REFILL_PAGE.
        let _ = unsafe { core::ptr::read_volatile(va as *const u64) };
    });
    case("cpucfg", kestrel, N, || {
        // Word 2 (the ISA features): traps under LVZ, not without it.
        let _ = cpu::cpucfg(2);
    });
    // A second-stage fill: each operation loads from a 4 MiB block of this
    // VM's RAM nobody touched yet (under kestrel's LVZ backend, one miss
    // filling a pair of 2 MiB pages; the guest's own TLB refill runs
    // natively there), through its own page tables like the refill case.
    let blocks = S2_RAM_END.saturating_sub(S2_RAM_START) / S2_BLOCK;
    if kestrel && blocks > 1 && RAM_TOP.load(Ordering::Relaxed) >= S2_RAM_END + (2 << 20) {
        for i in 0..blocks {
            mmu::map(
                S2_VA + i as usize * 8192,
                S2_RAM_START + i * S2_BLOCK,
                mmu::KERNEL_RW,
            );
        }
        mmu::flush_tlb();
        let mut next = 0;
        case("stage2-fill", kestrel, blocks - 1, || {
            let va = S2_VA + next * 8192;
            next += 1;
            // SAFETY: mapped above onto this VM's RAM, which nothing else uses.
            let _ = unsafe { core::ptr::read_volatile(va as *const u64) };
        });
    }
    let me = cpu::cpu();
    cpu::set_irqs(true);
    if kestrel {
        case("ipi-pv-self", kestrel, N / 4, || {
            let before = trap::SWIS[me].load(Ordering::Acquire);
            trap::MESSAGES[me].fetch_or(1, Ordering::AcqRel);
            let _ = trap::hvcl(FN_IPI, 1 << me, 0, 0);
            while trap::SWIS[me].load(Ordering::Acquire) == before {
                core::hint::spin_loop();
            }
        });
    }
    // Off kestrel QEMU 10 aborts under -icount when an IOCSR write raises
    // an interrupt ("Raised interrupt while not in I/O function"): kestrel
    // only.
    if kestrel {
        case("ipi-iocsr-self", kestrel, N / 4, || {
            let before = trap::IPIS[me].load(Ordering::Acquire);
            cpu::ipi_send(me as u64, smp::TEST_VECTOR);
            while trap::IPIS[me].load(Ordering::Acquire) == before {
                core::hint::spin_loop();
            }
        });
    }
    let period = crate::us(50);
    case("idle-timer-wake", kestrel, N / 8, || idle_for(period));
    println!("EXIT note idle-timer-wake includes the 50 us (50000 instr) timer period");
    println!("EXIT end");
    crate::poweroff()
}

/// `mode=bench-ipi` (a VM of two vCPUs): an interrupt to the other vCPU,
/// one at a time. CPU 1 waits with interrupts on (`smp::Cmd::SpinYield`);
/// CPU 0 sends a PV IPI (`hvcl`, function 1) or an IOCSR `IPI_SEND` and
/// waits until CPU 1's handler counted it in shared memory: each operation
/// is the round trip. Under `-icount` QEMU runs the CPUs in turn and the
/// counter counts the instructions of both, so the figure is every
/// instruction either CPU ran from the send to the sender seeing the
/// count. Both waits end their QEMU turn each round (`smp::end_turn`), so
/// a wait costs a few instructions per turn, not a time slice. kestrel
/// only: there is no PV IPI off kestrel, and QEMU aborts under `-icount`
/// when an IOCSR write raises an interrupt.
///
/// This mode's code lives in `.bench_tail`, after the rest of the image
/// (`link.ld`), and times its loops without `case`'s closures, so adding
/// it left the code and data of the other modes where they were: their
/// figures move with the guest's layout (the TLB), and are compared
/// across commits.
#[link_section = ".bench_tail"]
#[inline(never)]
fn ipi_mode(fdt_cpus: usize) -> ! {
    let kestrel = on_kestrel();
    println!(
        "EXIT begin kestrel={} freq={} ncpus={fdt_cpus}",
        kestrel as u8,
        COUNTER_HZ.load(Ordering::Relaxed)
    );
    if !kestrel || fdt_cpus < 2 {
        println!("EXIT note bench-ipi needs kestrel and two vCPUs");
        println!("EXIT end");
        crate::poweroff()
    }
    crate::console::report("smp", smp::bring_up(fdt_cpus));
    let other = 1;
    cpu::set_irqs(true);
    smp::turns_begin();
    let s = smp::post(smp::Cmd::SpinYield);
    if !smp::wait_spinning() {
        println!("EXIT note CPU {other} does not wait");
        println!("EXIT end");
        crate::poweroff()
    }
    let n = N / 4;
    // The floor under the IPI rows: the same two waits and a word written
    // to CPU 1 and copied back by its wait loop, no interrupt, no exit.
    // Each case runs one operation untimed first, as `case` does.
    let mut e0 = 0;
    let mut t0 = 0;
    for i in 0..=n {
        if i == 1 {
            (e0, t0) = (exits(kestrel), cpu::now());
        }
        let v = smp::POKE.load(Ordering::Relaxed).wrapping_add(1);
        smp::POKE.store(v, Ordering::Release);
        while smp::PONG.load(Ordering::Acquire) != v {
            smp::end_turn();
        }
    }
    ipi_line("poke-other", kestrel, n, t0, e0);
    let swis = &trap::SWIS[other];
    for i in 0..=n {
        if i == 1 {
            (e0, t0) = (exits(kestrel), cpu::now());
        }
        let before = swis.load(Ordering::Acquire);
        trap::MESSAGES[other].fetch_or(1, Ordering::AcqRel);
        let _ = trap::hvcl(FN_IPI, 1 << other, 0, 0);
        while swis.load(Ordering::Acquire) == before {
            smp::end_turn();
        }
    }
    ipi_line("ipi-pv-other", kestrel, n, t0, e0);
    let ipis = &trap::IPIS[other];
    for i in 0..=n {
        if i == 1 {
            (e0, t0) = (exits(kestrel), cpu::now());
        }
        let before = ipis.load(Ordering::Acquire);
        cpu::ipi_send(other as u64, smp::TEST_VECTOR);
        while ipis.load(Ordering::Acquire) == before {
            smp::end_turn();
        }
    }
    ipi_line("ipi-iocsr-other", kestrel, n, t0, e0);
    smp::turns_end();
    smp::stop(s);
    println!("EXIT end");
    crate::poweroff()
}

/// `case`'s line for `n` operations timed from `t0` (exits read `e0`),
/// for [`ipi_mode`] (kestrel only).
#[link_section = ".bench_tail"]
#[inline(never)]
fn ipi_line(name: &str, kestrel: bool, n: u64, t0: u64, e0: u64) {
    let t1 = cpu::now();
    let e1 = exits(kestrel);
    let per = ns(t1 - t0) / n;
    let stat_reads = stat::EXIT_OTHER - stat::EXIT_HYPERCALL + 1;
    let ex = e1.wrapping_sub(e0).saturating_sub(stat_reads);
    println!(
        "EXIT {name} instr={per} exits={}.{:02} n={n}",
        ex / n,
        ex % n * 100 / n
    );
}

/// `mode=bench-switch`: two VMs pinned to one pCPU, each waiting in `idle`
/// for its own timer 200 us ahead (beyond kestrel's halt-poll limit, so
/// each wait really blocks). Each round blocks this vCPU, switches to the
/// other VM, and switches back when the timer wakes it: two switches
/// between the VMs, their `idle` exits, a timer wake-up and the wait.
fn switch_mode() -> ! {
    let kestrel = on_kestrel();
    cpu::set_irqs(true);
    let soon = crate::us(200);
    // Both VMs start at about the same time; let them both get going.
    for _ in 0..50 {
        idle_for(soon);
    }
    case("vm-switch-idle", kestrel, N / 4, || idle_for(soon));
    println!("EXIT end");
    crate::poweroff()
}
