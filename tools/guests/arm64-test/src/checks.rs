//! The boot vCPU: platform discovery, then the numbered checks, the
//! benchmark, the summary line and SYSTEM_OFF.

use crate::console::Msg;
use crate::cpu::{self, CPUS};
use crate::exceptions::probe_read;
use crate::platform::{Platform, Steal};
use crate::smccc::{self, call, call0, psci};
use crate::smp::{self, run_everywhere, send_arg, Cmd, PV_IPI_SGI};
use crate::{gic, msg, println};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use kestrel_abi::{arm64, features, ret, stat};

/// The outcome of one check.
pub enum Verdict {
    Pass(Msg),
    Fail(Msg),
    Skip(&'static str),
}

macro_rules! fail {
    ($($t:tt)*) => { return Verdict::Fail(msg!($($t)*)) };
}

/// SGI used by the target-list check.
const SGI_LIST: u32 = 3;
/// SGI used by the broadcast check.
const SGI_BROADCAST: u32 = 4;
/// SGI used by the ICC_SGI1R side of the benchmark.
const SGI_BENCH: u32 = 5;
/// Rounds of the FP check per vCPU unless `fp_iters=` says otherwise.
const FP_ROUNDS: u64 = 2000;
/// IPIs per benchmark case unless `bench_n=` says otherwise.
const BENCH_N: u64 = 200;

static PASSED: AtomicU32 = AtomicU32::new(0);
static FAILED: AtomicU32 = AtomicU32::new(0);
static SKIPPED: AtomicU32 = AtomicU32::new(0);
static CURRENT: AtomicUsize = AtomicUsize::new(0);
const NAMES: [&str; 20] = [
    "boot",
    "hypercall-discovery",
    "hypercall-errors",
    "psci-version-features",
    "psci-smp-bringup",
    "psci-errors",
    "timer",
    "sgi-target-list",
    "sgi-broadcast",
    "pv-ipi",
    "fp-simd-switches",
    "abort-outside-memory",
    "bench-ipi-exits",
    "disr-switch",
    "phys-timer",
    "wfit-timeout",
    "debug-bp-wp-step",
    "stolen-time",
    "sve-switches",
    "share",
];

/// The check running now: (number, name).
pub fn current() -> (usize, &'static str) {
    let n = CURRENT.load(Ordering::Relaxed).min(NAMES.len() - 1);
    (n, NAMES[n])
}

fn report(n: usize, v: Verdict) {
    let name = NAMES[n];
    match v {
        Verdict::Pass(m) if m.is_empty() => {
            PASSED.fetch_add(1, Ordering::Relaxed);
            println!("PASS {n} {name}");
        }
        Verdict::Pass(m) => {
            PASSED.fetch_add(1, Ordering::Relaxed);
            println!("PASS {n} {name} ({})", m.as_str());
        }
        Verdict::Fail(m) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            println!("FAIL {n} {name}: {}", m.as_str());
        }
        Verdict::Skip(why) => {
            SKIPPED.fetch_add(1, Ordering::Relaxed);
            println!("SKIP {n} {name} ({why})");
        }
    }
}

fn summary_and_off(extra_failure: bool) -> ! {
    if extra_failure {
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
    let skipped = SKIPPED.load(Ordering::Relaxed);
    if skipped > 0 {
        println!("{skipped} check(s) skipped");
    }
    println!(
        "RESULT: {} passed, {} failed",
        PASSED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed)
    );
    smccc::system_off()
}

/// After a fatal error (already printed as a FAIL line): summary, power off.
pub fn finish_fatal() -> ! {
    summary_and_off(true)
}

/// What every check may need.
struct Ctx {
    p: Platform,
    kestrel: bool,
    boot: usize,
    /// All CPUs that came online (boot included).
    all: u32,
}

/// Rust entry of the boot vCPU (from `primary_entry` in start.S).
#[no_mangle]
extern "C" fn primary_main(dtb: usize) -> ! {
    let p = Platform::from_dtb(dtb);
    crate::console::init(p.uart);
    smccc::set_conduit_smc(p.psci_smc);
    let mpidr = cpu::mpidr();
    let boot = p.cpus[..p.ncpus]
        .iter()
        .position(|&m| m == mpidr)
        .unwrap_or(0);
    cpu::set_index(boot);
    for (i, c) in CPUS.iter().enumerate().take(p.ncpus) {
        c.mpidr.store(p.cpus[i], Ordering::Relaxed);
    }
    smp::NCPUS.store(p.ncpus, Ordering::Relaxed);
    smp::BOOT.store(boot, Ordering::Relaxed);
    CPUS[boot].seen_mpidr.store(mpidr, Ordering::Relaxed);
    CPUS[boot].online.store(true, Ordering::Release);

    println!(
        "arm64-test: kestrel test guest; DTB {:#x}{}; {} vCPU(s), boot MPIDR {:#x}; GIC{:?} GICD {:#x} {} {:#x}; PL011 {:#x}; RAM {:#x}+{:#x}; PSCI via {}",
        dtb,
        if p.from_dtb { "" } else { " (unreadable: QEMU virt defaults)" },
        p.ncpus,
        mpidr,
        p.gic,
        p.gicd,
        if p.gic == gic::Version::V3 { "GICR" } else { "GICC" },
        p.gicr_or_gicc,
        p.uart,
        p.ram_base,
        p.ram_size,
        smccc::conduit()
    );
    gic::configure(p.gic, p.gicd, p.gicr_or_gicc);
    gic::init_distributor();
    if let Err(e) = gic::init_cpu(boot) {
        report(0, Verdict::Fail(msg!("GIC CPU interface: {e}")));
    }
    cpu::irq_enable();

    let kestrel = is_kestrel();
    println!(
        "arm64-test: hypervisor: {}",
        if kestrel {
            "kestrel"
        } else {
            "not kestrel (kestrel-specific checks are skipped)"
        }
    );
    match p.mode {
        crate::platform::Mode::Checks => {}
        crate::platform::Mode::Attack => crate::hostile::attack(&p),
        crate::platform::Mode::Victim => crate::hostile::victim(&p),
        crate::platform::Mode::BenchExits => crate::exitbench::exits_mode(&p, kestrel),
        crate::platform::Mode::BenchSwitch => crate::exitbench::switch_mode(kestrel),
        crate::platform::Mode::BenchIpi => crate::exitbench::ipi_mode(&p, boot, kestrel),
        crate::platform::Mode::Reboot => crate::reboot::run(&p),
        crate::platform::Mode::ResetRace => crate::resetrace::run(&p),
    }
    let mut ctx = Ctx {
        p,
        kestrel,
        boot,
        all: 1 << boot,
    };

    if ctx.p.share_ms.is_some() {
        // The fairness test: bring the vCPUs up, then only the spin window.
        for (n, check) in [(4, psci_smp as fn(&mut Ctx) -> Verdict), (19, share)] {
            CURRENT.store(n, Ordering::Relaxed);
            let v = check(&mut ctx);
            report(n, v);
        }
        summary_and_off(false)
    }
    let checks: [fn(&mut Ctx) -> Verdict; 18] = [
        hypercall_discovery,
        hypercall_errors,
        psci_version,
        psci_smp,
        psci_errors,
        timer,
        sgi_target_list,
        sgi_broadcast,
        pv_ipi,
        fp_simd,
        abort_outside_memory,
        bench,
        |c| crate::el1state::check_disr(c.all, c.kestrel),
        |c| crate::el1state::check_ptimer(c.all),
        |c| crate::el1state::check_wfit(c.all),
        |_| crate::el1state::check_debug(),
        stolen_time,
        sve_switches,
    ];
    for (i, check) in checks.iter().enumerate() {
        let n = i + 1;
        CURRENT.store(n, Ordering::Relaxed);
        let v = check(&mut ctx);
        report(n, v);
    }
    summary_and_off(false)
}

/// `share_ms=N` (after `share_delay_ms=D` of sleep): every online vCPU
/// spins the same loop until the physical counter reaches the same end,
/// and the guest prints one line per vCPU,
/// `SHARE vcpu=I iters=N start=S end=E hz=F` (S, E in physical counter
/// ticks, F its frequency). The share each vCPU got of a pCPU is judged by
/// whoever compares those lines across VMs (`cargo xtask vmtest`); here it
/// passes when every vCPU finished and counted.
fn share(c: &mut Ctx) -> Verdict {
    let ms = c.p.share_ms.unwrap_or(0).clamp(1, 60_000);
    let delay = c.p.share_delay_ms.unwrap_or(0).min(60_000);
    if delay > 0 {
        sleep_us(delay * 1000);
    }
    let hz = cpu::freq();
    let end = cpu::phys_now() + hz * ms / 1000;
    if !run_everywhere(Cmd::Spin, end, (ms + 60_000) * 1000) {
        fail!("not every vCPU finished its {ms} ms spin");
    }
    for i in cpus(c.all) {
        let iters = CPUS[i].result.load(Ordering::Acquire);
        let start = CPUS[i].detail.load(Ordering::Acquire);
        println!("SHARE vcpu={i} iters={iters} start={start} end={end} hz={hz}");
        if iters == 0 {
            fail!("vCPU {i} never ran during the {ms} ms window");
        }
    }
    Verdict::Pass(msg!(
        "{} vCPU(s) spun {ms} ms after {delay} ms",
        c.all.count_ones()
    ))
}

/// How long every vCPU spins in the stolen-time check.
const STEAL_WINDOW_MS: u64 = 400;

/// Paravirtual stolen time (DEN0057A): discovery through SMCCC, one
/// record per vCPU inside the DTB's reserved `pv-time` region (revision
/// and attributes 0), and its stolen time over a window in which every
/// vCPU spins: never going backwards, never more than the time between the
/// two reads (the window and the commands around it), at most a fifth of
/// the window when the VM's vCPUs
/// have their pCPUs to themselves (`steal=alone`; measured 0-21 ms of
/// 400), at least a quarter when they share them (`steal=shared`: two
/// VMs' four vCPUs on one pCPU, measured 256-299 ms).
fn stolen_time(c: &mut Ctx) -> Verdict {
    use smccc::pv_time::{self, ARCH_FEATURES, FEATURES, ST};
    if !c.kestrel {
        return Verdict::Skip(NOT_KESTREL);
    }
    if c.p.steal == Steal::Off {
        return stolen_time_off(c);
    }
    let arch = call0(ARCH_FEATURES, [FEATURES as u64, 0, 0]);
    let f_st = call0(FEATURES, [ST as u64, 0, 0]);
    let f_f = call0(FEATURES, [FEATURES as u64, 0, 0]);
    let f_bad = call0(FEATURES, [0xC500_0022, 0, 0]);
    let st32 = call0(ST & !0x4000_0000, [0; 3]);
    if (arch, f_st, f_f, f_bad, st32) != (0, 0, 0, -1, -1) {
        fail!("discovery: ARCH_FEATURES {arch}, FEATURES(ST) {f_st}, FEATURES(FEATURES) {f_f}, FEATURES(0xC5000022) {f_bad}, SMC32 ST {st32}; want 0 0 0 -1 -1");
    }
    let Some((rbase, rsize)) = c.p.pv_time else {
        fail!("the DTB has no /reserved-memory/pv-time@.. node with no-map");
    };
    let t0 = cpu::phys_now();
    if !run_everywhere(Cmd::PvTime, 0, 30_000_000) {
        fail!("not every vCPU answered PV_TIME_ST");
    }
    let mut seen = [0u64; cpu::MAX_CPUS];
    let mut before = [0u64; cpu::MAX_CPUS];
    for i in cpus(c.all) {
        let ipa = CPUS[i].result.load(Ordering::Acquire);
        if !pv_time::is_record(ipa) || ipa < rbase || ipa + 64 > rbase + rsize {
            fail!("vCPU {i}: PV_TIME_ST {ipa:#x}, not a record in {rbase:#x}+{rsize:#x}");
        }
        if seen[..i].contains(&ipa) {
            fail!("vCPU {i}: record {ipa:#x} shared with another vCPU");
        }
        if pv_time::header(ipa) != Some((0, 0)) {
            fail!("vCPU {i}: revision/attributes {:?}", pv_time::header(ipa));
        }
        seen[i] = ipa;
        before[i] = pv_time::stolen(ipa).unwrap_or(0);
    }
    // A second call answers the same record.
    let again = call(u64::from(ST), [u64::MAX, 1, 2])[0];
    if again != seen[c.boot] {
        fail!(
            "PV_TIME_ST again (garbage in x1-x3): {again:#x}, first {:#x}",
            seen[c.boot]
        );
    }
    let hz = cpu::freq();
    let end = cpu::phys_now() + hz * STEAL_WINDOW_MS / 1000;
    if !run_everywhere(Cmd::Spin, end, (STEAL_WINDOW_MS + 60_000) * 1000) {
        fail!("not every vCPU finished its {STEAL_WINDOW_MS} ms spin");
    }
    // Each vCPU's record is written at its loads: a vCPU reads its own
    // (its latest load is behind it).
    if !run_everywhere(Cmd::PvTime, 0, 30_000_000) {
        fail!("not every vCPU read its record again");
    }
    // Every wait counted between a vCPU's two reads lies between them,
    // so inside [t0, t1].
    let elapsed_ns = ((cpu::phys_now() - t0) as u128 * 1_000_000_000 / hz.max(1) as u128) as u64;
    let window_ns = STEAL_WINDOW_MS * 1_000_000;
    let (mut least, mut most) = (u64::MAX, 0);
    for i in cpus(c.all) {
        let after = CPUS[i].detail.load(Ordering::Acquire);
        if after < before[i] {
            fail!(
                "vCPU {i}: stolen time went back, {} -> {after} ns",
                before[i]
            );
        }
        let grew = after - before[i];
        // Never more than the time between the two reads (1 ms for
        // rounding).
        if grew > elapsed_ns + 1_000_000 {
            fail!("vCPU {i}: {grew} ns stolen in {elapsed_ns} ns");
        }
        least = least.min(grew);
        most = most.max(grew);
    }
    let (least_ms, most_ms) = (least / 1_000_000, most / 1_000_000);
    match c.p.steal {
        Steal::Alone if most > window_ns / 5 => {
            fail!("alone on its pCPUs, yet up to {most_ms} ms stolen in {STEAL_WINDOW_MS} ms")
        }
        Steal::Shared if least < window_ns / 4 => {
            fail!("sharing pCPUs, yet only {least_ms} ms stolen in {STEAL_WINDOW_MS} ms")
        }
        _ => {}
    }
    Verdict::Pass(msg!(
        "records in {rbase:#x}+{rsize:#x}; {STEAL_WINDOW_MS} ms spin on {} vCPU(s) ({:?}): {least_ms}-{most_ms} ms stolen each",
        c.all.count_ones(),
        c.p.steal
    ))
}

/// `steal=off` (the VM's config says `pv_time = false`): every PV time
/// call answers NOT_SUPPORTED and the DTB reserves nothing for it.
fn stolen_time_off(c: &mut Ctx) -> Verdict {
    use smccc::pv_time::{ARCH_FEATURES, FEATURES, ST};
    let answers = [
        call0(ARCH_FEATURES, [FEATURES as u64, 0, 0]),
        call0(FEATURES, [ST as u64, 0, 0]),
        call0(FEATURES, [FEATURES as u64, 0, 0]),
        call0(ST, [0; 3]),
    ];
    if answers != [-1; 4] {
        fail!("pv_time = false, yet ARCH_FEATURES, FEATURES(ST), FEATURES(FEATURES), ST answered {answers:?}");
    }
    if let Some((b, s)) = c.p.pv_time {
        fail!("pv_time = false, yet the DTB reserves {b:#x}+{s:#x}");
    }
    Verdict::Pass(msg!("not offered: every call -1, nothing reserved"))
}

/// The SMCCC vendor UID query answers kestrel's UUID.
fn is_kestrel() -> bool {
    let r = call(arm64::CALL_UID as u64, [0; 3]);
    (0..4).all(|i| r[i] == arm64::KESTREL_UID[i] as u64)
}

const NOT_KESTREL: &str = "not running on kestrel";

fn hypercall_discovery(c: &mut Ctx) -> Verdict {
    if !c.kestrel {
        return Verdict::Skip(NOT_KESTREL);
    }
    let uid64 = call(arm64::CALL_UID as u64 | 0x4000_0000, [0; 3]);
    if (0..4).any(|i| uid64[i] != arm64::KESTREL_UID[i] as u64) {
        fail!("UID over the SMC64 spelling: {:#x?}", uid64);
    }
    let count = call0(arm64::CALL_COUNT, [0; 3]);
    if count != arm64::FUNCTION_COUNT as i64 {
        fail!("call count {count}, expected {}", arm64::FUNCTION_COUNT);
    }
    let rev = call(arm64::REVISION as u64, [0; 3]);
    if rev[0] != arm64::REVISION_MAJOR || rev[1] != arm64::REVISION_MINOR {
        fail!("revision {}.{}", rev[0], rev[1]);
    }
    let feats = call0(arm64::FEATURES, [0; 3]);
    if feats != features::ALL as i64 {
        fail!("features {feats:#x}, expected {:#x}", features::ALL);
    }
    // SMCCC: only w0 names the function.
    let upper = call(0xFFFF_FFFF_0000_0000 | arm64::FEATURES as u64, [0; 3])[0] as i64;
    if upper != feats {
        fail!("features with x0[63:32] set: {upper:#x}");
    }
    let exits = call0(arm64::STATS, [stat::EXIT_HYPERCALL, 0, 0]);
    if exits <= 0 {
        fail!("stats[hypercall exits] = {exits}, expected > 0");
    }
    Verdict::Pass(msg!(
        "UID 4b455354-524c-4e8a-9c1f-6b6573747265, {count} functions, revision {}.{}, features {feats:#x}, {exits} hypercall exits so far",
        rev[0],
        rev[1]
    ))
}

fn hypercall_errors(c: &mut Ctx) -> Verdict {
    if !c.kestrel {
        return Verdict::Skip(NOT_KESTREL);
    }
    let n = c.p.ncpus as u64;
    for fid in [
        0xC600_0000u32,
        0xC600_0004,
        0xC600_FFFE,
        0x8600_FF02,
        0x8600_0001,
    ] {
        let r = call0(fid, [0; 3]);
        if r != ret::INVALID_CODE {
            fail!("unknown vendor function {fid:#x} returned {r}, expected -1");
        }
    }
    let before = sgi_counts(PV_IPI_SGI);
    let mut bad: [(u64, u64, u64, &str); 6] = [
        (0, 0, 0, "empty bitmap"),
        (1, 0, n, "min = number of vCPUs"),
        (1, 0, u64::MAX, "min = 2^64-1"),
        (0, 1 << 63, u64::MAX - 64, "min + 127 overflowing"),
        (0, 1 << 63, 0, "bit 127 (no such vCPU)"),
        (0, 0, 0, ""),
    ];
    if n < 64 {
        bad[5] = (1 << n, 0, 0, "bit n (no such vCPU)");
    }
    let mut tried = 0;
    for (low, high, min, what) in bad {
        if what.is_empty() {
            continue;
        }
        let r = call0(arm64::IPI_SEND, [low, high, min]);
        if r != ret::INVALID_PARAMETER {
            fail!("IPI_SEND with {what} returned {r}, expected -2");
        }
        tried += 1;
    }
    for idx in [stat::COUNT, u64::MAX] {
        let r = call0(arm64::STATS, [idx, 0, 0]);
        if r != ret::INVALID_PARAMETER {
            fail!("STATS index {idx:#x} returned {r}, expected -2");
        }
    }
    // Nothing may have been delivered by the refused sends.
    sleep_us(20_000);
    if before != sgi_counts(PV_IPI_SGI) {
        fail!("a refused IPI_SEND delivered SGI {PV_IPI_SGI}");
    }
    Verdict::Pass(msg!(
        "5 unknown functions -> -1; {tried} bad IPI windows and 2 bad stats indices -> -2, nothing delivered"
    ))
}

fn psci_version(c: &mut Ctx) -> Verdict {
    let v = call0(psci::VERSION, [0; 3]);
    if v < 0x2 {
        fail!("PSCI_VERSION returned {v:#x}");
    }
    let (major, minor) = (v >> 16, v & 0xFFFF);
    if major < 1 {
        return Verdict::Pass(msg!("PSCI {major}.{minor} (no FEATURES before 1.0)"));
    }
    for (fid, name) in [
        (psci::CPU_ON, "CPU_ON"),
        (psci::AFFINITY_INFO, "AFFINITY_INFO"),
        (psci::SYSTEM_OFF, "SYSTEM_OFF"),
        (psci::VERSION, "PSCI_VERSION"),
        (psci::FEATURES, "PSCI_FEATURES"),
    ] {
        let r = call0(psci::FEATURES, [fid as u64, 0, 0]);
        if r < 0 {
            fail!("PSCI_FEATURES({name}) = {r}");
        }
    }
    let r = call0(psci::FEATURES, [0x8400_00FF, 0, 0]);
    if r != psci::NOT_SUPPORTED {
        fail!("PSCI_FEATURES(0x840000ff) = {r}, expected NOT_SUPPORTED");
    }
    let mig = call0(psci::MIGRATE_INFO_TYPE, [0; 3]);
    if mig != 2 {
        fail!("MIGRATE_INFO_TYPE = {mig}, expected 2 (no trusted OS)");
    }
    // SMCCC_VERSION exists from SMCCC 1.1 on; PSCI_FEATURES says whether.
    let smccc = if call0(psci::FEATURES, [psci::SMCCC_VERSION as u64, 0, 0]) == psci::SUCCESS {
        let v = call0(psci::SMCCC_VERSION, [0; 3]);
        if v < 0x1_0001 {
            fail!("SMCCC_VERSION = {v:#x}, expected 1.1 or later");
        }
        v
    } else if c.kestrel {
        fail!("PSCI_FEATURES(SMCCC_VERSION) says not supported; kestrel offers SMCCC 1.1");
    } else {
        0x1_0000
    };
    // kestrel also answers over SMC (trapped with HCR_EL2.TSC).
    if c.kestrel {
        let over_smc = smccc::call0_smc(psci::VERSION);
        if over_smc != v {
            fail!("PSCI_VERSION over SMC = {over_smc:#x}, over the DTB's conduit {v:#x}");
        }
    }
    Verdict::Pass(msg!(
        "PSCI {major}.{minor}, SMCCC {}.{}, FEATURES ok, MIGRATE_INFO_TYPE 2{}",
        smccc >> 16,
        smccc & 0xFFFF,
        if c.kestrel { ", also over SMC" } else { "" }
    ))
}

extern "C" {
    fn secondary_entry();
}

pub(crate) fn secondary_entry_pa() -> u64 {
    // The identity map makes the address the code runs at its PA.
    secondary_entry as *const () as u64
}

fn psci_smp(c: &mut Ctx) -> Verdict {
    let entry = secondary_entry_pa();
    let mut problem = Msg::new();
    for i in 0..c.p.ncpus {
        if i == c.boot {
            continue;
        }
        let m = c.p.cpus[i];
        let a = call0(psci::AFFINITY_INFO, [m, 0, 0]);
        if a != psci::AFF_OFF && problem.is_empty() {
            problem = msg!("AFFINITY_INFO({m:#x}) before CPU_ON = {a}, expected 1 (OFF)");
        }
        let r = call0(psci::CPU_ON, [m, entry, i as u64]);
        if r != psci::SUCCESS {
            fail!("CPU_ON({m:#x}) = {r}");
        }
    }
    let give_up = cpu::deadline(30_000_000);
    let want = (1u32 << c.p.ncpus) - 1;
    while smp::online_mask() != want {
        if cpu::now() > give_up {
            fail!(
                "only CPUs {:#b} of {want:#b} reported in within 30 s",
                smp::online_mask()
            );
        }
        sleep_us(100);
    }
    c.all = want;
    for (i, (state, &m)) in CPUS.iter().zip(&c.p.cpus[..c.p.ncpus]).enumerate() {
        let seen = state.seen_mpidr.load(Ordering::Relaxed);
        if seen != m {
            fail!("CPU {i} reads MPIDR {seen:#x}, the DTB says {m:#x}");
        }
        let a = call0(psci::AFFINITY_INFO, [m, 0, 0]);
        if a != psci::AFF_ON {
            fail!("AFFINITY_INFO({m:#x}) = {a}, expected 0 (ON)");
        }
    }
    if !run_everywhere(Cmd::Nop, 0, 30_000_000) {
        fail!("secondaries do not answer commands");
    }
    if !problem.is_empty() {
        return Verdict::Fail(problem);
    }
    Verdict::Pass(msg!(
        "{} of {} vCPUs online with the DTB's MPIDRs, AFFINITY_INFO OFF before and ON after",
        c.all.count_ones(),
        c.p.ncpus
    ))
}

fn psci_errors(c: &mut Ctx) -> Verdict {
    let entry = secondary_entry_pa();
    let me = c.p.cpus[c.boot];
    let r = call0(psci::CPU_ON, [me, entry, 0]);
    if r != psci::ALREADY_ON {
        fail!("CPU_ON(self) = {r}, expected -4 (ALREADY_ON)");
    }
    if let Some(other) = (0..c.p.ncpus).find(|&i| i != c.boot) {
        let r = call0(psci::CPU_ON, [c.p.cpus[other], entry, other as u64]);
        if r != psci::ALREADY_ON {
            fail!("CPU_ON(running CPU {other}) = {r}, expected -4 (ALREADY_ON)");
        }
    }
    let bad = 0xFE_0000_FEFE;
    let r = call0(psci::CPU_ON, [bad, entry, 0]);
    if r != psci::INVALID_PARAMETERS {
        fail!("CPU_ON({bad:#x}) = {r}, expected -2 (INVALID_PARAMETERS)");
    }
    let r = call0(psci::AFFINITY_INFO, [bad, 0, 0]);
    if r != psci::INVALID_PARAMETERS {
        fail!("AFFINITY_INFO({bad:#x}) = {r}, expected -2 (INVALID_PARAMETERS)");
    }
    Verdict::Pass(msg!(
        "ALREADY_ON for self and a running vCPU, INVALID_PARAMETERS for MPIDR {bad:#x}"
    ))
}

fn timer(c: &mut Ctx) -> Verdict {
    const ROUNDS: u64 = 20;
    if !run_everywhere(Cmd::Timer, ROUNDS, 120_000_000) {
        fail!("not every vCPU finished {ROUNDS} timer sleeps");
    }
    let mut shortest = u64::MAX;
    for i in cpus(c.all) {
        let failures = CPUS[i].result.load(Ordering::Acquire);
        if failures != 0 {
            fail!(
                "CPU {i}: {failures} of {ROUNDS} 1 ms sleeps had no PPI 27 or ended early (shortest {} us)",
                CPUS[i].detail.load(Ordering::Relaxed)
            );
        }
        shortest = shortest.min(CPUS[i].detail.load(Ordering::Relaxed));
        if CPUS[i].other_irqs.load(Ordering::Relaxed) != 0 {
            fail!(
                "CPU {i} took unexpected INTID {}",
                CPUS[i].last_other.load(Ordering::Relaxed)
            );
        }
    }
    Verdict::Pass(msg!(
        "{ROUNDS} virtual timer interrupts (PPI 27) on each of {} vCPUs, shortest 1 ms sleep {shortest} us",
        c.all.count_ones()
    ))
}

/// Busy-waits `us` microseconds (the benchmark: no exits).
fn spin_us(us: u64) {
    let t = cpu::deadline(us);
    while cpu::now() < t {
        core::hint::spin_loop();
    }
}

/// Waits `us` microseconds in WFI on the virtual timer, so a hypervisor
/// can run other vCPUs meanwhile (many vCPUs share few pCPUs in the
/// multi-VM runs).
fn sleep_us(us: u64) {
    if !cpu::sleep_us(us) {
        spin_us(us);
    }
}

/// CPU indices in `mask`.
fn cpus(mask: u32) -> impl Iterator<Item = usize> {
    (0..32).filter(move |i| mask & (1 << i) != 0)
}

fn sgi_counts(intid: u32) -> [u32; cpu::MAX_CPUS] {
    core::array::from_fn(|i| CPUS[i].sgi[intid as usize].load(Ordering::Acquire))
}

/// Posts a send command and checks that exactly `targets` got SGI `intid`
/// once (and, on GICv2, from the sender's CPU interface).
fn deliver(
    c: &Ctx,
    cmd: Cmd,
    sender: usize,
    intid: u32,
    mask: u32,
    targets: u32,
) -> Result<(), Msg> {
    let before = sgi_counts(intid);
    for i in cpus(c.all) {
        CPUS[i].sgi_source.store(0, Ordering::Relaxed);
    }
    if !run_everywhere(cmd, send_arg(sender, intid, mask), 30_000_000) {
        return Err(msg!("sender CPU {sender} did not finish"));
    }
    let r = CPUS[sender].result.load(Ordering::Acquire) as i64;
    if r != 0 {
        return Err(msg!("send from CPU {sender} returned {r}"));
    }
    let give_up = cpu::deadline(10_000_000);
    loop {
        let now = sgi_counts(intid);
        if cpus(targets).all(|i| now[i] != before[i]) {
            break;
        }
        if cpu::now() > give_up {
            let missing = cpus(targets)
                .filter(|&i| now[i] == before[i])
                .fold(0u32, |m, i| m | 1 << i);
            return Err(msg!(
                "SGI {intid} from CPU {sender} to {targets:#b}: CPUs {missing:#b} got nothing in 10 s"
            ));
        }
        sleep_us(100);
    }
    // Let stray deliveries show up.
    sleep_us(10_000);
    let now = sgi_counts(intid);
    for i in cpus(c.all) {
        let got = now[i].wrapping_sub(before[i]);
        let want = u32::from(targets & (1 << i) != 0);
        if got != want {
            return Err(msg!(
                "SGI {intid} from CPU {sender} to {targets:#b}: CPU {i} got it {got} times, expected {want}"
            ));
        }
        if want == 1 && gic::version() == gic::Version::V2 {
            let src = CPUS[i].sgi_source.load(Ordering::Relaxed);
            let iface = CPUS[sender].gic_iface.load(Ordering::Relaxed);
            if src == 0 || 1 << (src - 1) != iface {
                return Err(msg!(
                    "SGI {intid} from CPU {sender} (interface mask {iface:#x}) arrived at CPU {i} with source {}",
                    src.wrapping_sub(1)
                ));
            }
        }
    }
    Ok(())
}

fn sgi_target_list(c: &mut Ctx) -> Verdict {
    let n = c.p.ncpus;
    if c.all.count_ones() < 2 {
        return Verdict::Skip("needs 2 or more vCPUs");
    }
    let mut sends = 0;
    for s in cpus(c.all) {
        // A list that skips a vCPU when there are enough of them.
        let mut mask = 1 << ((s + 1) % n);
        if n >= 4 {
            mask |= 1 << ((s + 3) % n);
        }
        mask &= c.all & !(1 << s);
        if let Err(m) = deliver(c, Cmd::SgiList, s, SGI_LIST, mask, mask) {
            return Verdict::Fail(m);
        }
        // And one including the sender itself.
        let with_self = mask | 1 << s;
        if let Err(m) = deliver(c, Cmd::SgiList, s, SGI_LIST, with_self, with_self) {
            return Verdict::Fail(m);
        }
        sends += 2;
    }
    let how = match gic::version() {
        gic::Version::V3 => "ICC_SGI1R_EL1 target lists",
        gic::Version::V2 => "GICD_SGIR target lists, sources checked",
    };
    Verdict::Pass(msg!(
        "{sends} sends, 2 from each vCPU, through {how}: each target exactly once, nobody else"
    ))
}

fn sgi_broadcast(c: &mut Ctx) -> Verdict {
    if c.all.count_ones() < 2 {
        return Verdict::Skip("needs 2 or more vCPUs");
    }
    for s in cpus(c.all) {
        let targets = c.all & !(1 << s);
        if let Err(m) = deliver(c, Cmd::SgiOthers, s, SGI_BROADCAST, 0, targets) {
            return Verdict::Fail(m);
        }
    }
    let how = match gic::version() {
        gic::Version::V3 => "ICC_SGI1R_EL1.IRM",
        gic::Version::V2 => "GICD_SGIR filter 1, sources checked",
    };
    Verdict::Pass(msg!(
        "from each of {} vCPUs through {how}: every other vCPU once, never the sender",
        c.all.count_ones()
    ))
}

/// Target sets of the IPI checks: (label, mask) for 1, 3 and all vCPUs,
/// seen from `sender` (0 when there are too few vCPUs).
fn target_sets(c: &Ctx, sender: usize) -> [(&'static str, u32); 3] {
    let others: u32 = c.all & !(1 << sender);
    let first_n = |k: u32| {
        let mut m = 0u32;
        for i in cpus(others) {
            if m.count_ones() < k {
                m |= 1 << i;
            }
        }
        m
    };
    [
        ("1", first_n(1)),
        (
            "3",
            if others.count_ones() >= 3 {
                first_n(3)
            } else {
                0
            },
        ),
        ("all", c.all),
    ]
}

fn pv_ipi(c: &mut Ctx) -> Verdict {
    if !c.kestrel {
        return Verdict::Skip(NOT_KESTREL);
    }
    let mut done = 0;
    let senders = [c.boot, cpus(c.all).last().unwrap_or(c.boot)];
    for s in senders {
        for (label, mask) in target_sets(c, s) {
            if mask == 0 {
                continue;
            }
            if let Err(m) = deliver(c, Cmd::PvIpi, s, PV_IPI_SGI, mask, mask) {
                return Verdict::Fail(msg!("targets={label}: {}", m.as_str()));
            }
            done += 1;
        }
    }
    Verdict::Pass(msg!(
        "{done} IPI_SEND hypercalls to 1, 3 and all vCPUs from 2 senders: SGI {PV_IPI_SGI} acknowledged by exactly the targets"
    ))
}

fn stat_read(i: u64) -> u64 {
    call0(arm64::STATS, [i, 0, 0]).max(0) as u64
}

fn fp_stats() -> [u64; 3] {
    [
        stat_read(stat::FP_SAVES),
        stat_read(stat::FP_RESTORES),
        stat_read(stat::FP_TRAPS),
    ]
}

fn fp_simd(c: &mut Ctx) -> Verdict {
    let rounds = c.p.fp_iters.unwrap_or(FP_ROUNDS);
    let before = c.kestrel.then(fp_stats);
    let t0 = cpu::now();
    if !run_everywhere(Cmd::Fp, rounds, 1_200_000_000) {
        fail!("not every vCPU finished {rounds} rounds within 1200 s");
    }
    let ms = cpu::ticks_to_us(cpu::now() - t0) / 1000;
    for i in cpus(c.all) {
        let r = CPUS[i].result.load(Ordering::Acquire);
        if r != 0 {
            let bad = CPUS[i].detail.load(Ordering::Relaxed);
            fail!(
                "CPU {i}: round {r}: registers changed across the yield: V mask {:#x}{}{}",
                bad & 0xFFFF_FFFF,
                if bad & 1 << 32 != 0 { ", FPCR" } else { "" },
                if bad & 1 << 33 != 0 { ", FPSR" } else { "" }
            );
        }
    }
    let mut m = msg!(
        "{rounds} rounds x {} vCPUs, V0-V31 + FPCR/FPSR intact after every WFI/spin yield, {ms} ms",
        c.all.count_ones()
    );
    if let Some(b) = before {
        let a = fp_stats();
        m = msg!(
            "{}; kestrel meanwhile: {} FP saves, {} restores, {} traps",
            m.as_str(),
            a[0] - b[0],
            a[1] - b[1],
            a[2] - b[2]
        );
    }
    Verdict::Pass(m)
}

fn sve_stats() -> [u64; 3] {
    [
        stat_read(stat::SVE_TRAPS),
        stat_read(stat::SVE_SAVES),
        stat_read(stat::SVE_RESTORES),
    ]
}

/// Rounds of the SVE check per vCPU unless `sve_iters=` says otherwise.
const SVE_ROUNDS: u64 = 400;
/// FP rounds per vCPU after the SVE state is cleared.
const NARROW_ROUNDS: u64 = 100;

fn sve_switches(c: &mut Ctx) -> Verdict {
    use crate::sve;
    if !sve::present() {
        if let Some(bits) = c.p.sve_vl {
            fail!("ID_AA64PFR0_EL1.SVE is 0, but the VM is configured with {bits}-bit SVE (sve_vl={bits})");
        }
        let zfr0 = sve::zfr0();
        if zfr0 != 0 {
            fail!("SVE hidden but ID_AA64ZFR0_EL1 = {zfr0:#x}");
        }
        // Open to EL1 as far as this guest can: the hypervisor must answer.
        sve::open_zen();
        let (_, esr, _) = crate::exceptions::probe_any(sve::vl_bytes);
        if esr == 0 {
            fail!("SVE hidden, yet rdvl executed");
        }
        if esr >> 26 != 0 {
            fail!("rdvl with SVE hidden: ESR {esr:#x}, expected EC 0x0 (UNDEF)");
        }
        return Verdict::Pass(msg!(
            "SVE hidden (PFR0.SVE 0, ZFR0 0): rdvl is UNDEF (EC 0x0)"
        ));
    }
    sve::enable();
    let bits = sve::vl_bytes() * 8;
    if let Some(want) = c.p.sve_vl {
        if bits != want {
            fail!("rdvl gives {bits}-bit vectors with ZCR_EL1.LEN = 15; the VM is configured for {want}");
        }
    }
    let rounds = c.p.sve_iters.unwrap_or(SVE_ROUNDS);
    let before = c.kestrel.then(|| (sve_stats(), fp_stats()));
    let t0 = cpu::now();
    if !run_everywhere(Cmd::Sve, rounds, 1_200_000_000) {
        fail!("not every vCPU finished {rounds} SVE rounds within 1200 s");
    }
    let ms = cpu::ticks_to_us(cpu::now() - t0) / 1000;
    for i in cpus(c.all) {
        let r = CPUS[i].result.load(Ordering::Acquire);
        let d = CPUS[i].detail.load(Ordering::Relaxed);
        if r != 0 {
            fail!(
                "CPU {i}: round {r}: {}: Z mask {:#x}, P mask {:#x}{}",
                if d & sve::BAD_AFTER_SHRINK != 0 {
                    "shrunk to 128 bits and grown back, bits beyond 128 neither its own nor zero"
                } else if d & sve::BAD_FRESH != 0 {
                    "at its first SVE use, before writing any, bits set beyond the V registers"
                } else {
                    "registers changed across the yield"
                },
                d & 0xFFFF_FFFF,
                (d >> 32) & 0xFFFF,
                if d & sve::BAD_FFR != 0 { ", FFR" } else { "" }
            );
        }
        if d * 8 != bits {
            fail!("CPU {i}: {}-bit vectors, CPU {} has {bits}", d * 8, c.boot);
        }
    }
    // Back to FP only: every vCPU clears what lies beyond its V registers,
    // then runs FP rounds. kestrel must go back to FP-sized moves: its first
    // save of each vCPU finds nothing wide and narrows it, so no SVE trap
    // and no SVE-sized restore may follow, and at most one SVE-sized save
    // per vCPU.
    if !run_everywhere(Cmd::SveFlush, 0, 60_000_000) {
        fail!("not every vCPU cleared its SVE state within 60 s");
    }
    let narrow_before = c.kestrel.then(|| (sve_stats(), fp_stats()));
    if !run_everywhere(Cmd::Fp, NARROW_ROUNDS, 1_200_000_000) {
        fail!("not every vCPU finished {NARROW_ROUNDS} FP rounds after clearing SVE");
    }
    for i in cpus(c.all) {
        let r = CPUS[i].result.load(Ordering::Acquire);
        if r != 0 {
            fail!("CPU {i}: FP round {r} after clearing SVE: V registers changed across the yield");
        }
    }
    let mut m = msg!(
        "{bits}-bit vectors, {rounds}x{} rounds: Z/P/FFR kept over yields and shrinks, {ms} ms",
        c.all.count_ones()
    );
    if let (Some((sb, fb)), Some((nsb, nfb))) = (before, narrow_before) {
        let (sa, fa) = (sve_stats(), fp_stats());
        if nsb[0] == sb[0] {
            fail!("{}; but kestrel counted no SVE trap", m.as_str());
        }
        let (traps, saves, restores) = (sa[0] - nsb[0], sa[1] - nsb[1], sa[2] - nsb[2]);
        if traps != 0 || restores != 0 || saves > u64::from(c.all.count_ones()) {
            fail!(
                "after every vCPU cleared its SVE state, kestrel still counted {traps} SVE traps, {restores} SVE restores (want 0) and {saves} SVE saves (want at most one per vCPU)"
            );
        }
        m = msg!(
            "{}; kestrel: {} SVE traps, {} SVE saves, {} SVE restores of {}/{} FP; FP only: {saves} SVE of {} FP saves",
            m.as_str(),
            nsb[0] - sb[0],
            nsb[1] - sb[1],
            nsb[2] - sb[2],
            nfb[0] - fb[0],
            nfb[1] - fb[1],
            fa[0] - nfb[0]
        );
    }
    Verdict::Pass(m)
}

fn abort_outside_memory(c: &mut Ctx) -> Verdict {
    let past_ram = c.p.ram_base + c.p.ram_size;
    let mut addrs = [(past_ram, "first byte past RAM"), (0, "")];
    if c.kestrel {
        // Unmapped in kestrel's guest map (QEMU has its PCIe window here).
        addrs[1] = (0x1000_0000, "unmapped IPA 0x10000000");
    }
    let mut seen = Msg::new();
    for (addr, what) in addrs {
        if what.is_empty() {
            continue;
        }
        let r = probe_read(addr);
        if r.esr == 0 {
            fail!(
                "read of {what} ({addr:#x}) completed with {:#x}, no abort",
                r.value
            );
        }
        let ec = (r.esr >> 26) & 0x3F;
        let dfsc = r.esr & 0x3F;
        let fnv = r.esr & (1 << 10) != 0;
        if ec != 0x25 {
            fail!("read of {what} ({addr:#x}): EC {ec:#x}, expected 0x25 (data abort)");
        }
        if dfsc != 0x10 {
            fail!(
                "read of {what} ({addr:#x}): DFSC {dfsc:#x}, expected 0x10 (synchronous external abort); ESR {:#x}",
                r.esr
            );
        }
        if !fnv && r.far != addr {
            fail!("read of {what} ({addr:#x}): FAR {:#x}", r.far);
        }
        seen = msg!(
            "{}{}{addr:#x}: ESR {:#x}",
            seen.as_str(),
            if seen.is_empty() { "" } else { ", " },
            r.esr
        );
    }
    Verdict::Pass(msg!(
        "synchronous external abort (EC 0x25, DFSC 0x10), guest continued: {}",
        seen.as_str()
    ))
}

/// Number of exit counters (`kestrel_abi::stat` 0-9).
const EXIT_KINDS: usize = (stat::EXIT_OTHER + 1) as usize;
/// Short names of the exit counters, for the BENCH lines.
const EXIT_NAMES: [&str; EXIT_KINDS] = [
    "hvc", "sysreg", "mmio", "idle", "irq", "fp", "ipi", "timer", "abort", "other",
];

/// Exits of every kind so far.
fn exits() -> [u64; EXIT_KINDS] {
    core::array::from_fn(|i| stat_read(i as u64))
}

/// `after - before`, per kind.
fn delta(before: [u64; EXIT_KINDS], after: [u64; EXIT_KINDS]) -> [u64; EXIT_KINDS] {
    core::array::from_fn(|i| after[i].saturating_sub(before[i]))
}

/// Exits during `n` sends to `mask` (PV IPI or the GIC's SGI register),
/// each acknowledged by every target before the next, and how long that
/// took in counter ticks.
fn measure(pv: bool, mask: u32, n: u64) -> Result<([u64; EXIT_KINDS], u64), Msg> {
    let intid = if pv { PV_IPI_SGI } else { SGI_BENCH };
    let start = exits();
    let t0 = cpu::now();
    for _ in 0..n {
        let before = sgi_counts(intid);
        if pv {
            let r = smp::pv_ipi(mask);
            if r != 0 {
                return Err(msg!("IPI_SEND returned {r}"));
            }
        } else {
            gic::send_sgi(intid, mask);
        }
        let give_up = cpu::deadline(10_000_000);
        loop {
            let now = sgi_counts(intid);
            if cpus(mask).all(|i| now[i] != before[i]) {
                break;
            }
            if cpu::now() > give_up {
                return Err(msg!("SGI {intid} to {mask:#b} not acknowledged in 10 s"));
            }
            core::hint::spin_loop();
        }
    }
    let ticks = cpu::now() - t0;
    Ok((delta(start, exits()), ticks))
}

/// Exits while spinning `ticks` with no IPI: the background (hypervisor
/// ticks, timer emulation, the counter reads themselves) a measurement of
/// the same length also contains.
fn background(ticks: u64) -> [u64; EXIT_KINDS] {
    let start = exits();
    let end = cpu::now() + ticks;
    while cpu::now() < end {
        core::hint::spin_loop();
    }
    delta(start, exits())
}

/// `x / n` with two decimals.
struct Per(u64, u64);

impl core::fmt::Display for Per {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let h = self.0 * 100 / self.1.max(1);
        write!(f, "{}.{:02}", h / 100, h % 100)
    }
}

/// Off kestrel: only the SGI round-trip time, a baseline for kestrel's
/// `us_per_ipi` (no exit counters to read).
fn bench_latency_only(c: &Ctx) {
    smp::SPIN.store(true, Ordering::SeqCst);
    spin_us(20_000);
    let n = 50;
    for (label, mask) in target_sets(c, c.boot) {
        if mask == 0 {
            continue;
        }
        let t0 = cpu::now();
        for _ in 0..n {
            let before = sgi_counts(SGI_BENCH);
            gic::send_sgi(SGI_BENCH, mask);
            let give_up = cpu::deadline(1_000_000);
            while cpus(mask).any(|i| sgi_counts(SGI_BENCH)[i] == before[i]) && cpu::now() < give_up
            {
                core::hint::spin_loop();
            }
        }
        println!(
            "BENCH ipi-latency sgi targets={label} us_per_ipi={} n={n} vcpus={} (not on kestrel)",
            cpu::ticks_to_us(cpu::now() - t0) / n,
            c.all.count_ones()
        );
    }
    smp::SPIN.store(false, Ordering::SeqCst);
}

fn bench(c: &mut Ctx) -> Verdict {
    if !c.kestrel {
        if c.all.count_ones() > 1 {
            bench_latency_only(c);
        }
        return Verdict::Skip(NOT_KESTREL);
    }
    let counters = [
        stat::VMID_FAST,
        stat::VMID_SLOW,
        stat::VMID_ROLLOVERS,
        stat::TLB_FLUSHES,
        stat::FP_SAVES,
        stat::FP_RESTORES,
        stat::FP_TRAPS,
    ]
    .map(stat_read);
    println!(
        "BENCH counters vmid_fast={} vmid_slow={} vmid_rollovers={} tlb_flushes={} fp_saves={} fp_restores={} fp_traps={}",
        counters[0], counters[1], counters[2], counters[3], counters[4], counters[5], counters[6]
    );
    let n = c.p.bench_n.unwrap_or(BENCH_N);
    if n == 0 {
        return Verdict::Pass(msg!("IPI benchmark off (bench_n=0), counters printed"));
    }
    // Receivers spin (no WFI exits) while this runs.
    smp::SPIN.store(true, Ordering::SeqCst);
    spin_us(20_000);
    let mut result = Verdict::Pass(msg!("{n} IPIs per case, see the BENCH lines"));
    'cases: for (label, mask) in target_sets(c, c.boot) {
        if mask == 0 {
            continue;
        }
        for pv in [true, false] {
            match measure(pv, mask, n) {
                Ok((total, ticks)) => {
                    let net = delta(background(ticks), total);
                    let mut kinds = Msg::new();
                    for (name, &x) in EXIT_NAMES.iter().zip(&net) {
                        if x != 0 {
                            let _ = core::fmt::Write::write_fmt(
                                &mut kinds,
                                format_args!(" {name}={}", Per(x, n)),
                            );
                        }
                    }
                    println!(
                        "BENCH ipi {} targets={label} exits_per_ipi={} n={n} vcpus={} gic=v{} us_per_ipi={}{}",
                        if pv { "pv" } else { "sgi" },
                        Per(net.iter().sum(), n),
                        c.all.count_ones(),
                        if gic::version() == gic::Version::V3 { 3 } else { 2 },
                        cpu::ticks_to_us(ticks) / n,
                        kinds.as_str()
                    );
                }
                Err(m) => {
                    result = Verdict::Fail(msg!("targets={label}: {}", m.as_str()));
                    break 'cases;
                }
            }
        }
    }
    smp::SPIN.store(false, Ordering::SeqCst);
    result
}
