//! Secondary vCPUs and the commands the boot vCPU sends them.
//!
//! The boot vCPU posts a command (a sequence number, a command and an
//! argument) and runs its own share; every online secondary runs the
//! command once and counts itself done. Between commands a secondary idles
//! in WFI with a 1 ms virtual timer, or spins (no exits) during the
//! benchmark.

use crate::cpu::{self, CPUS, MAX_CPUS};
use crate::{gic, smccc};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kestrel_abi::{arm64, IpiWindows};

/// The SGI kestrel's PV IPI hypercall delivers.
pub const PV_IPI_SGI: u32 = arm64::PV_IPI_SGI;

/// What a command asks each vCPU to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cmd {
    /// Nothing (used to check the command path itself).
    Nop = 0,
    /// `arg` virtual-timer sleeps of 1 ms each.
    Timer = 1,
    /// `arg` rounds of the FP/SIMD check.
    Fp = 2,
    /// The vCPU [`sender`] sends SGI [`intid`] to [`mask`] (ICC_SGI1R / GICD_SGIR).
    SgiList = 3,
    /// The vCPU [`sender`] sends SGI [`intid`] to all others (IRM / filter 1).
    SgiOthers = 4,
    /// The vCPU [`sender`] sends a PV IPI to [`mask`].
    PvIpi = 5,
    /// Spin until the physical counter reaches `arg`, counting iterations
    /// of a fixed loop: result = iterations, detail = the counter at the start.
    Spin = 6,
    /// The vCPU [`sender`] calls PSCI CPU_ON for the vCPU `arg` names
    /// ([`cpu_on_arg`]) without pause, forever (`mode=resetrace`).
    CpuOnLoop = 7,
    /// PV_TIME_ST: result = x0 (this vCPU's stolen-time record, or an
    /// error), detail = its stolen time now (0 if x0 is not an address).
    PvTime = 8,
    /// `arg` rounds of the SVE check (`crate::sve::soak`).
    Sve = 9,
    /// Clear everything beyond the V registers (`crate::sve::flush`).
    SveFlush = 10,
    /// Part `arg` of an EL1-state check (`crate::el1state::execute`).
    El1State = 16,
}

impl Cmd {
    fn from_u8(v: u8) -> Cmd {
        match v {
            1 => Cmd::Timer,
            2 => Cmd::Fp,
            3 => Cmd::SgiList,
            4 => Cmd::SgiOthers,
            5 => Cmd::PvIpi,
            6 => Cmd::Spin,
            7 => Cmd::CpuOnLoop,
            8 => Cmd::PvTime,
            9 => Cmd::Sve,
            10 => Cmd::SveFlush,
            16 => Cmd::El1State,
            _ => Cmd::Nop,
        }
    }
}

/// Packs a send command's argument.
pub const fn send_arg(sender: usize, intid: u32, mask: u32) -> u64 {
    (sender as u64) << 48 | (intid as u64) << 32 | mask as u64
}
fn sender(arg: u64) -> usize {
    (arg >> 48) as usize
}
fn intid(arg: u64) -> u32 {
    ((arg >> 32) & 0xF) as u32
}
fn mask(arg: u64) -> u32 {
    arg as u32
}

/// Packs [`Cmd::CpuOnLoop`]'s argument: `sender` starts the vCPU of index
/// `target` and MPIDR `mpidr` (affinity fields: 40 bits).
pub const fn cpu_on_arg(sender: usize, target: usize, mpidr: u64) -> u64 {
    (sender as u64) << 48 | (target as u64 & 0xFF) << 40 | mpidr & 0xFF_FFFF_FFFF
}

/// Secondaries (bit i: vCPU i) that turn themselves off (PSCI CPU_OFF) as
/// soon as they start (`mode=resetrace`).
pub static OFF_AT_START: AtomicU32 = AtomicU32::new(0);

/// seq << 32 | cmd.
static CMD: AtomicU64 = AtomicU64::new(0);
static ARG: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicU32 = AtomicU32::new(0);
/// Secondaries spin instead of sleeping between commands.
pub static SPIN: AtomicBool = AtomicBool::new(false);
/// Secondaries wait between commands with interrupts on, ending QEMU's
/// turn with YIELD each round (`mode=bench-ipi`'s target).
pub static YIELD: AtomicBool = AtomicBool::new(false);
/// `mode=bench-ipi`'s `poke-other`: the boot vCPU bumps POKE, a waiting
/// secondary copies it to PONG (no interrupt).
pub static POKE: AtomicU32 = AtomicU32::new(0);
pub static PONG: AtomicU32 = AtomicU32::new(0);
/// Number of CPUs in the DTB.
pub static NCPUS: AtomicUsize = AtomicUsize::new(1);
/// Index of the boot CPU.
pub static BOOT: AtomicUsize = AtomicUsize::new(0);

/// Secondaries that reported in.
pub fn online_mask() -> u32 {
    let mut m = 0;
    for (i, c) in CPUS.iter().enumerate().take(NCPUS.load(Ordering::Relaxed)) {
        if c.online.load(Ordering::Acquire) {
            m |= 1 << i;
        }
    }
    m
}

/// Runs `cmd` on this vCPU and every online secondary; false if some did
/// not finish within `timeout_us`.
pub fn run_everywhere(cmd: Cmd, arg: u64, timeout_us: u64) -> bool {
    let me = cpu::index();
    let others = (online_mask() & !(1 << me)).count_ones();
    DONE.store(0, Ordering::SeqCst);
    ARG.store(arg, Ordering::SeqCst);
    let seq = (CMD.load(Ordering::SeqCst) >> 32) + 1;
    CMD.store(seq << 32 | cmd as u64, Ordering::SeqCst);
    execute(me, cmd, arg);
    let give_up = cpu::deadline(timeout_us);
    while DONE.load(Ordering::Acquire) < others {
        if cpu::now() > give_up {
            return false;
        }
        if SPIN.load(Ordering::Relaxed) {
            core::hint::spin_loop();
        } else if !cpu::sleep_us(100) {
            return false;
        }
    }
    true
}

/// Posts `cmd` for the secondaries and returns at once (the boot vCPU
/// neither runs it nor waits for it).
pub fn post(cmd: Cmd, arg: u64) {
    ARG.store(arg, Ordering::SeqCst);
    let seq = (CMD.load(Ordering::SeqCst) >> 32) + 1;
    CMD.store(seq << 32 | cmd as u64, Ordering::SeqCst);
}

/// Rust entry of a secondary vCPU (from `secondary_entry` in start.S).
#[no_mangle]
extern "C" fn secondary_main(index: usize) -> ! {
    if OFF_AT_START.load(Ordering::Acquire) & (1 << index) != 0 {
        smccc::call0(smccc::psci::CPU_OFF, [0; 3]);
    }
    cpu::set_index(index);
    let me = &CPUS[index];
    me.seen_mpidr.store(cpu::mpidr(), Ordering::Relaxed);
    if let Err(e) = gic::init_cpu(index) {
        crate::println!("CPU {index}: GIC setup failed: {e}");
    }
    cpu::irq_enable();
    let mut seen = CMD.load(Ordering::Acquire) >> 32;
    me.online.store(true, Ordering::Release);
    loop {
        let c = CMD.load(Ordering::Acquire);
        if c >> 32 != seen {
            seen = c >> 32;
            execute(index, Cmd::from_u8(c as u8), ARG.load(Ordering::Acquire));
            DONE.fetch_add(1, Ordering::AcqRel);
        } else if YIELD.load(Ordering::Relaxed) {
            let poke = POKE.load(Ordering::Acquire);
            if PONG.load(Ordering::Relaxed) != poke {
                PONG.store(poke, Ordering::Release);
            }
            cpu::yield_now();
        } else if SPIN.load(Ordering::Relaxed) {
            core::hint::spin_loop();
        } else {
            // Masked while arming so the tick cannot fire before the WFI
            // (which it would then never end); taken right after it.
            cpu::irq_disable();
            cpu::timer_arm(cpu::us_to_ticks(1000));
            cpu::wfi();
            cpu::irq_enable();
        }
    }
}

fn execute(me: usize, cmd: Cmd, arg: u64) {
    let state = &CPUS[me];
    let (result, detail) = match cmd {
        Cmd::Nop => (0, 0),
        Cmd::Timer => timer_rounds(arg),
        Cmd::Fp => fp_soak(arg),
        Cmd::Sve => crate::sve::soak(arg),
        Cmd::SveFlush => {
            crate::sve::flush();
            (0, 0)
        }
        Cmd::SgiList if sender(arg) == me => {
            gic::send_sgi(intid(arg), mask(arg));
            (0, 0)
        }
        Cmd::SgiOthers if sender(arg) == me => {
            gic::send_sgi_others(intid(arg));
            (0, 0)
        }
        Cmd::PvIpi if sender(arg) == me => (pv_ipi(mask(arg)) as u64, 0),
        Cmd::Spin => spin_until(arg),
        Cmd::CpuOnLoop if sender(arg) == me => {
            let entry = crate::checks::secondary_entry_pa();
            let (target, mpidr) = ((arg >> 40) & 0xFF, arg & 0xFF_FFFF_FFFF);
            loop {
                smccc::call0(smccc::psci::CPU_ON, [mpidr, entry, target]);
            }
        }
        Cmd::El1State => crate::el1state::execute(arg),
        Cmd::PvTime => {
            let ipa = smccc::call(u64::from(smccc::pv_time::ST), [0; 3])[0];
            (ipa, smccc::pv_time::stolen(ipa).unwrap_or(0))
        }
        _ => (0, 0),
    };
    state.result.store(result, Ordering::Release);
    state.detail.store(detail, Ordering::Release);
}

/// Iterations of the fixed loop between two counter reads in [`spin_until`].
const SPIN_CHUNK: u64 = 256;

/// Spins until the physical counter reaches `end`: (chunks of
/// [`SPIN_CHUNK`] iterations done, the counter at the start). Every vCPU
/// runs the same loop, so the counts compare the CPU time each got.
fn spin_until(end: u64) -> (u64, u64) {
    let start = cpu::phys_now();
    let mut x = start | 1;
    let mut chunks = 0;
    while cpu::phys_now() < end {
        for _ in 0..SPIN_CHUNK {
            x = core::hint::black_box(x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1));
        }
        chunks += 1;
    }
    core::hint::black_box(x);
    (chunks, start)
}

/// `n` timer sleeps of 1 ms: (failures, shortest sleep in µs).
fn timer_rounds(n: u64) -> (u64, u64) {
    let mut failures = 0;
    let mut shortest = u64::MAX;
    for _ in 0..n {
        let t0 = cpu::now();
        if !cpu::sleep_us(1000) {
            failures += 1;
            continue;
        }
        let us = cpu::ticks_to_us(cpu::now() - t0);
        shortest = shortest.min(us);
        if us < 1000 {
            failures += 1;
        }
    }
    (failures, shortest)
}

/// kestrel's vCPU id for the CPU with `mpidr` (`kernel::vcpu::psci::vcpu_mpidr`'s
/// inverse: 16 vCPUs per cluster).
pub fn vcpu_id(mpidr: u64) -> u64 {
    ((mpidr >> 8) & 0xFF) * 16 + (mpidr & 0xFF)
}

/// Sends a PV IPI to the CPUs in `mask` (CPU indices); returns the first
/// error code, or 0.
pub fn pv_ipi(mask: u32) -> i64 {
    let mut windows = IpiWindows::new();
    let mut ret = 0;
    let mut send = |w: kestrel_abi::IpiWindow| {
        let r = smccc::call0(arm64::IPI_SEND, [w.low, w.high, w.min]);
        if ret == 0 {
            ret = r;
        }
    };
    for (i, c) in CPUS.iter().enumerate().take(MAX_CPUS) {
        if mask & (1 << i) != 0 {
            if let Some(w) = windows.push(vcpu_id(c.mpidr.load(Ordering::Relaxed))) {
                send(w);
            }
        }
    }
    if let Some(w) = windows.finish() {
        send(w);
    }
    ret
}

/// Rounds of the FP/SIMD check (`fp_round` in start.S): returns
/// (0, 0) or (failing round + 1, bitmap of corrupted registers).
fn fp_soak(rounds: u64) -> (u64, u64) {
    const SPIN_EVERY: u64 = 8;
    const SPIN_LOOPS: u64 = 20_000;
    let seed0 = cpu::now().wrapping_mul(0x2545_F491_4F6C_DD1D) ^ cpu::mpidr().rotate_left(40);
    let mut result = (0, 0);
    for i in 0..rounds {
        let seed = seed0.wrapping_add(i.wrapping_mul(0xD129_0B5A_7F3C_1E07));
        let fpcr = ((seed >> 7) & 3) << 22 | ((seed >> 9) & 1) << 24 | ((seed >> 10) & 1) << 25;
        let fpsr = (seed >> 11) & 0x9F | ((seed >> 16) & 1) << 27;
        let spin = if i % SPIN_EVERY == SPIN_EVERY - 1 {
            SPIN_LOOPS
        } else {
            cpu::irq_disable();
            cpu::timer_arm(cpu::us_to_ticks(200));
            0
        };
        let bad = fp_round(seed, spin, fpcr, fpsr);
        if bad != 0 {
            result = (i + 1, bad);
            break;
        }
    }
    cpu::timer_stop();
    // Leave the default FP environment to the Rust code.
    crate::cpu::sysreg_write!("fpcr", 0);
    crate::cpu::sysreg_write!("fpsr", 0);
    result
}

/// One round of `fp_round` (start.S), which owns all 32 V registers.
fn fp_round(seed: u64, spin: u64, fpcr: u64, fpsr: u64) -> u64 {
    let bad: u64;
    // SAFETY: `fp_round` follows the C ABI except that it also clobbers
    // v8-v15, which are declared here; it touches no memory.
    unsafe {
        core::arch::asm!("bl fp_round",
            inout("x0") seed => bad, inout("x1") spin => _, inout("x2") fpcr => _,
            inout("x3") fpsr => _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            clobber_abi("C"));
    }
    bad
}
