//! `kestrel-seedbench`: the workloads of the seeds' experiments as one static
//! Linux program, run from the test initramfs (docs/performance.md, "The
//! seeds' experiments"; `cargo xtask bench-seeds`).
//!
//! ```text
//! kestrel-seedbench hackbench [groups=G] [fds=F] [loops=L] [runs=N]
//! kestrel-seedbench fp [procs=P] [sleep_us=S] [seconds=T] [burst=K]
//! kestrel-seedbench futex [threads=N] [rounds=R]
//! kestrel-seedbench sve [procs=P] [seconds=T] [spin=N]   (arm64 with SVE)
//! ```
//!
//! Every result is one line `SEEDBENCH <workload> ...` of `key=value`
//! fields that xtask parses; a failure prints `SEEDBENCH <workload> FAIL
//! <reason>` and the program exits with status 1.
//!
//! It needs only the C library's `fork`, `waitpid`, `syscall` and `_exit`
//! beside Rust's std: the syscall numbers used (`futex` 98,
//! `sched_setaffinity` 122, `gettid` 178) are the generic table's, the same
//! on arm64 and LoongArch.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn syscall(number: i64, ...) -> i64;
    fn _exit(code: i32) -> !;
    fn close(fd: i32) -> i32;
}

const SYS_FUTEX: i64 = 98;
const SYS_SCHED_SETAFFINITY: i64 = 122;
const SYS_GETTID: i64 = 178;
const FUTEX_WAIT_PRIVATE: i64 = 128;
const FUTEX_WAKE_PRIVATE: i64 = 129;

fn fail(workload: &str, why: impl std::fmt::Display) -> ! {
    println!("SEEDBENCH {workload} FAIL {why}");
    let _ = std::io::stdout().flush();
    std::process::exit(1)
}

/// `key=value` options with defaults; an unknown key or a bad number fails.
struct Args {
    workload: String,
    pairs: Vec<(String, String)>,
}

impl Args {
    fn get(&self, key: &str, default: u64) -> u64 {
        match self.pairs.iter().find(|(k, _)| k == key) {
            Some((_, v)) => v
                .parse()
                .unwrap_or_else(|_| fail(&self.workload, format!("{key}={v}: not a number"))),
            None => default,
        }
    }

    fn check(&self, known: &[&str]) {
        for (k, _) in &self.pairs {
            if !known.contains(&k.as_str()) {
                fail(
                    &self.workload,
                    format!("unknown option {k} (known: {known:?})"),
                );
            }
        }
    }
}

/// Forks a child that runs `f` and exits with its status (never returning).
fn spawn_child(workload: &str, f: impl FnOnce() -> i32) -> i32 {
    let _ = std::io::stdout().flush();
    // SAFETY: the program is single-threaded when it forks (the fork
    // workloads start no threads), so the child owns a consistent copy.
    let pid = unsafe { fork() };
    if pid < 0 {
        fail(
            workload,
            format!("fork: {}", std::io::Error::last_os_error()),
        );
    }
    if pid == 0 {
        let code = f();
        let _ = std::io::stdout().flush();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { _exit(code) }
    }
    pid
}

/// Waits for every pid; the number that did not exit with status 0.
fn reap(pids: &[i32]) -> usize {
    let mut bad = 0;
    for &pid in pids {
        let mut status = 0i32;
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let r = unsafe { waitpid(pid, &mut status, 0) };
        // WIFEXITED && WEXITSTATUS == 0 is status == 0.
        if r != pid || status != 0 {
            bad += 1;
        }
    }
    bad
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

/// hackbench (pipe mode): `groups` groups of `fds` senders and `fds`
/// receivers, one process each; every sender writes `loops` 100-byte
/// messages to every receiver of its group, every receiver reads all of
/// them. Timed from the release of the children to the last exit.
fn hackbench(a: &Args) {
    a.check(&["groups", "fds", "loops", "runs"]);
    let groups = a.get("groups", 2).clamp(1, 64) as usize;
    let fds = a.get("fds", 10).clamp(1, 64) as usize;
    let loops = a.get("loops", 50).max(1) as usize;
    let runs = a.get("runs", 5).max(1) as usize;
    const MSG: usize = 100;
    let mut times = Vec::new();
    let t_all = Instant::now();
    for run in 1..=runs {
        let (mut ready_r, ready_w) =
            std::io::pipe().unwrap_or_else(|e| fail("hackbench", format!("pipe: {e}")));
        let (wake_r, wake_w) =
            std::io::pipe().unwrap_or_else(|e| fail("hackbench", format!("pipe: {e}")));
        let mut pids = Vec::new();
        for _ in 0..groups {
            let mut readers = Vec::new();
            let mut writers = Vec::new();
            for _ in 0..fds {
                let (r, w) =
                    std::io::pipe().unwrap_or_else(|e| fail("hackbench", format!("pipe: {e}")));
                readers.push(r);
                writers.push(w);
            }
            // Receivers: each reads fds * loops messages from its pipe.
            for r in 0..fds {
                let pid = spawn_child("hackbench", || {
                    drop(std::mem::take(&mut writers));
                    let mut me = readers.swap_remove(r);
                    readers.clear();
                    // SAFETY: closes this child's copy of the release pipe's
                    // write end (never used here) so that the parent's close
                    // is the last one.
                    unsafe { close(wake_w.as_raw_fd()) };
                    let mut ready = &ready_w;
                    let _ = ready.write_all(b"r");
                    let mut go = [0u8; 1];
                    let _ = (&wake_r).read(&mut go);
                    let mut left = fds * loops * MSG;
                    let mut buf = [0u8; 4096];
                    while left > 0 {
                        match me.read(&mut buf[..left.min(4096)]) {
                            Ok(0) | Err(_) => return 2,
                            Ok(n) => left -= n,
                        }
                    }
                    0
                });
                pids.push(pid);
            }
            // Senders: each writes loops messages to every receiver.
            for _ in 0..fds {
                let pid = spawn_child("hackbench", || {
                    readers.clear();
                    // SAFETY: closes this child's copy of the release pipe's
                    // write end (never used here) so that the parent's close
                    // is the last one.
                    unsafe { close(wake_w.as_raw_fd()) };
                    let mut ready = &ready_w;
                    let _ = ready.write_all(b"s");
                    let mut go = [0u8; 1];
                    let _ = (&wake_r).read(&mut go);
                    let msg = [0x5au8; MSG];
                    for _ in 0..loops {
                        for w in writers.iter_mut() {
                            if w.write_all(&msg).is_err() {
                                return 3;
                            }
                        }
                    }
                    0
                });
                pids.push(pid);
            }
        }
        drop(ready_w);
        drop(wake_r);
        let mut got = 0;
        let mut buf = [0u8; 256];
        while got < pids.len() {
            match ready_r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        if got < pids.len() {
            fail(
                "hackbench",
                format!("only {got} of {} children ready", pids.len()),
            );
        }
        // Closing the last write end releases every child's read of `wake`.
        let t0 = Instant::now();
        drop(wake_w);
        let bad = reap(&pids);
        let secs = t0.elapsed().as_secs_f64();
        if bad > 0 {
            fail(
                "hackbench",
                format!("run {run}: {bad} of {} processes failed", pids.len()),
            );
        }
        println!(
            "SEEDBENCH hackbench run={run} groups={groups} fds={fds} loops={loops} procs={} messages={} seconds={secs:.6}",
            pids.len(),
            groups * fds * fds * loops
        );
        times.push(secs);
    }
    let total = t_all.elapsed().as_secs_f64();
    println!(
        "SEEDBENCH hackbench done runs={runs} median={:.6} total={total:.6}",
        median(&mut times)
    );
}

/// One FP burst: `k` terms of sum 1/n^2 and of the Leibniz series, in f64
/// (FP/SIMD registers, whatever the compiler picks).
fn fp_burst(k: u64) -> (f64, f64) {
    let (mut s, mut t, mut sign) = (0.0f64, 0.0f64, 1.0f64);
    let mut n = 1.0f64;
    for _ in 0..k {
        s += 1.0 / (n * n);
        t += sign * 4.0 / (2.0 * n - 1.0);
        sign = -sign;
        n += 1.0;
    }
    (std::hint::black_box(s), std::hint::black_box(t))
}

/// `procs` processes, each: an FP burst, then sleep `sleep_us`, for
/// `seconds`; each burst's result is checked against the parent's.
fn fp(a: &Args) {
    a.check(&["procs", "sleep_us", "seconds", "burst"]);
    let procs = a.get("procs", 12).clamp(1, 256) as usize;
    let sleep_us = a.get("sleep_us", 100_000);
    let seconds = a.get("seconds", 10);
    let burst = a.get("burst", 2000).max(1);
    let want = fp_burst(burst);
    let (counts_r, counts_w) = std::io::pipe().unwrap_or_else(|e| fail("fp", format!("pipe: {e}")));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(seconds);
    let mut pids = Vec::new();
    for _ in 0..procs {
        pids.push(spawn_child("fp", || {
            let (mut bursts, mut wrong) = (0u64, 0u64);
            loop {
                let got = fp_burst(burst);
                bursts += 1;
                if got.0.to_bits() != want.0.to_bits() || got.1.to_bits() != want.1.to_bits() {
                    wrong += 1;
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_micros(sleep_us));
            }
            let mut w = &counts_w;
            let _ = w.write_all(format!("{bursts} {wrong}\n").as_bytes());
            0
        }));
    }
    drop(counts_w);
    let bad = reap(&pids);
    let secs = t0.elapsed().as_secs_f64();
    let mut text = String::new();
    let _ = (&counts_r).read_to_string(&mut text);
    let (mut bursts, mut wrong, mut reported) = (0u64, 0u64, 0usize);
    for line in text.lines() {
        let mut it = line.split(' ').filter_map(|x| x.parse::<u64>().ok());
        if let (Some(b), Some(w)) = (it.next(), it.next()) {
            bursts += b;
            wrong += w;
            reported += 1;
        }
    }
    if bad > 0 || reported != procs || wrong > 0 {
        fail(
            "fp",
            format!(
                "{bad} processes failed, {reported} of {procs} reported, {wrong} wrong FP results"
            ),
        );
    }
    println!(
        "SEEDBENCH fp procs={procs} sleep_us={sleep_us} burst={burst} seconds={secs:.3} bursts={bursts} wrong=0"
    );
}

// The SVE round (arm64): loads Z0-Z31, P0-P15 and FFR from `z_in`/`p_in`,
// spins `spin` iterations without a system call (so only preemption can
// move the registers), stores them to `z_out`/`p_out`.
#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    r#"
    .text
    .arch_extension sve
    .balign 4
    .global seedbench_sve_round
seedbench_sve_round:
    ldr     p0, [x1, #16, mul vl]
    wrffr   p0.b
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    ldr     p\n, [x1, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ldr     z\n, [x0, #\n, mul vl]
    .endr
1:  subs    x4, x4, #1
    b.hi    1b
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str     z\n, [x2, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    str     p\n, [x3, #\n, mul vl]
    .endr
    rdffr   p0.b
    str     p0, [x3, #16, mul vl]
    ret
"#
);

/// The SVE vector length in bytes (`rdvl`).
#[cfg(target_arch = "aarch64")]
fn sve_vl() -> usize {
    let v: usize;
    // SAFETY: reads the vector length; the caller checked HWCAP_SVE.
    unsafe {
        core::arch::asm!(".arch_extension sve", "rdvl {}, #1", out(reg) v, options(nomem, nostack))
    };
    v
}

/// One round: fill, spin, store, compare; true when all came back.
#[cfg(target_arch = "aarch64")]
fn sve_round(vl: usize, seed: &mut u64, spin: u64) -> bool {
    let next = |s: &mut u64| {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    };
    let (zn, pl) = (32 * vl, vl / 8);
    let mut z_in = vec![0u8; zn];
    let mut p_in = vec![0u8; 17 * pl];
    let (mut z_out, mut p_out) = (vec![0u8; zn], vec![0u8; 17 * pl]);
    for w in z_in.chunks_exact_mut(8) {
        w.copy_from_slice(&next(seed).to_le_bytes());
    }
    for b in p_in[..16 * pl].iter_mut() {
        *b = next(seed) as u8;
    }
    // FFR: a monotonic predicate (the first k byte lanes true).
    let k = (next(seed) % (vl as u64 + 1)) as usize;
    for (j, b) in p_in[16 * pl..].iter_mut().enumerate() {
        *b = ((1u16 << k.saturating_sub(8 * j).min(8)) - 1) as u8;
    }
    // SAFETY: the buffers hold the 32 Z and 17 predicate registers at the
    // current length; the asm clobbers x4 and the vector registers (declared:
    // V0-V31 are the low bits of Z0-Z31; compiled code does not use P/FFR).
    unsafe {
        core::arch::asm!("bl seedbench_sve_round",
            in("x0") z_in.as_ptr(), in("x1") p_in.as_ptr(),
            in("x2") z_out.as_mut_ptr(), in("x3") p_out.as_mut_ptr(),
            inout("x4") spin => _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            clobber_abi("C"));
    }
    z_in == z_out && p_in == p_out
}

/// `procs` processes, each filling Z0-Z31, P0-P15 and FFR with a pattern
/// of its own, spinning `spin` iterations without a system call and
/// checking them, for `seconds`: across every preemption (of the process by
/// its kernel, of the vCPU by the hypervisor) the registers must come back.
#[cfg(target_arch = "aarch64")]
fn sve(a: &Args) {
    extern "C" {
        fn getauxval(kind: u64) -> u64;
    }
    const AT_HWCAP: u64 = 16;
    const HWCAP_SVE: u64 = 1 << 22;
    a.check(&["procs", "seconds", "spin"]);
    let procs = a.get("procs", 4).clamp(1, 256) as usize;
    let seconds = a.get("seconds", 2);
    let spin = a.get("spin", 2_000_000).max(1);
    // SAFETY: getauxval only reads the process's auxiliary vector.
    if unsafe { getauxval(AT_HWCAP) } & HWCAP_SVE == 0 {
        fail("sve", "the kernel reports no SVE (HWCAP_SVE clear)");
    }
    let vl = sve_vl();
    let (counts_r, counts_w) =
        std::io::pipe().unwrap_or_else(|e| fail("sve", format!("pipe: {e}")));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(seconds);
    let mut pids = Vec::new();
    for i in 0..procs {
        pids.push(spawn_child("sve", || {
            let mut seed = (t0.elapsed().as_nanos() as u64 ^ (i as u64) << 40) | 1;
            let (mut rounds, mut bad) = (0u64, 0u64);
            loop {
                if !sve_round(vl, &mut seed, spin) {
                    bad += 1;
                }
                rounds += 1;
                if Instant::now() >= deadline {
                    break;
                }
            }
            let mut w = &counts_w;
            let _ = w.write_all(format!("{rounds} {bad}\n").as_bytes());
            0
        }));
    }
    drop(counts_w);
    let failed = reap(&pids);
    let secs = t0.elapsed().as_secs_f64();
    let mut text = String::new();
    let _ = (&counts_r).read_to_string(&mut text);
    let (mut rounds, mut bad, mut reported) = (0u64, 0u64, 0usize);
    for line in text.lines() {
        let mut it = line.split(' ').filter_map(|x| x.parse::<u64>().ok());
        if let (Some(r), Some(b)) = (it.next(), it.next()) {
            rounds += r;
            bad += b;
            reported += 1;
        }
    }
    if failed > 0 || reported != procs || bad > 0 {
        fail(
            "sve",
            format!("{failed} processes failed, {reported} of {procs} reported, {bad} rounds with registers changed"),
        );
    }
    println!(
        "SEEDBENCH sve procs={procs} vl={vl} spin={spin} seconds={secs:.3} rounds={rounds} bad=0"
    );
}

#[cfg(not(target_arch = "aarch64"))]
fn sve(_: &Args) {
    fail("sve", "SVE is arm64's");
}

fn gettid() -> i64 {
    // SAFETY: gettid has no arguments and no side effect.
    unsafe { syscall(SYS_GETTID) }
}

/// Pins the calling thread to `cpu` (false if the kernel refused).
fn pin(cpu: usize) -> bool {
    let mut mask = [0u64; 16];
    mask[cpu / 64] |= 1 << (cpu % 64);
    // SAFETY: `mask` is a valid 1024-bit CPU set that outlives the call.
    unsafe { syscall(SYS_SCHED_SETAFFINITY, 0i64, 128i64, mask.as_ptr()) == 0 }
}

/// Whether thread `tid` of this process is asleep in `futex` (state `S`
/// and, where `/proc/.../syscall` exists, syscall 98).
fn asleep_in_futex(tid: i64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
    if state != Some('S') {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) {
        Ok(s) => s.split_whitespace().next() == Some("98"),
        Err(_) => true,
    }
}

/// `perf bench futex wake` in spirit: `threads` threads, thread i pinned
/// to CPU i mod CPUs, block in FUTEX_WAIT on one word; per round the waker
/// (unpinned) bumps the word and calls FUTEX_WAKE for one waiter at a time
/// until all are woken. The time of that loop is one wake-all.
fn futex(a: &Args) {
    a.check(&["threads", "rounds"]);
    let threads = a.get("threads", 16).clamp(1, 256) as usize;
    let rounds = a.get("rounds", 100).max(1) as usize;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let word = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let woke = Arc::new(AtomicU64::new(0));
    let tids: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let pinned = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for i in 0..threads {
        let (word, stop, woke, tids, pinned) = (
            word.clone(),
            stop.clone(),
            woke.clone(),
            tids.clone(),
            pinned.clone(),
        );
        handles.push(std::thread::spawn(move || {
            if pin(i % cpus) {
                pinned.fetch_add(1, Ordering::SeqCst);
            }
            tids[i].store(gettid() as u64, Ordering::SeqCst);
            let mut seen = word.load(Ordering::SeqCst);
            loop {
                while word.load(Ordering::SeqCst) == seen {
                    // SAFETY: waits on a live u32 while it holds `seen`.
                    unsafe {
                        syscall(
                            SYS_FUTEX,
                            word.as_ptr(),
                            FUTEX_WAIT_PRIVATE,
                            i64::from(seen),
                            0i64,
                        )
                    };
                }
                seen = word.load(Ordering::SeqCst);
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                woke.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let mut times = Vec::with_capacity(rounds);
    let mut calls = 0u64;
    for round in 0..rounds {
        // All threads back asleep in the futex before the clock starts.
        let t_wait = Instant::now();
        loop {
            let all = (0..threads).all(|i| {
                let tid = tids[i].load(Ordering::SeqCst);
                tid != 0 && asleep_in_futex(tid as i64)
            });
            if all && woke.load(Ordering::SeqCst) == (round * threads) as u64 {
                break;
            }
            if t_wait.elapsed() > Duration::from_secs(60) {
                fail(
                    "futex",
                    format!("round {round}: threads not asleep after 60 s"),
                );
            }
            std::thread::yield_now();
        }
        let t0 = Instant::now();
        word.fetch_add(1, Ordering::SeqCst);
        let mut n = 0usize;
        while n < threads {
            // SAFETY: wakes waiters of a live u32.
            let r = unsafe { syscall(SYS_FUTEX, word.as_ptr(), FUTEX_WAKE_PRIVATE, 1i64) };
            calls += 1;
            if r < 0 {
                fail(
                    "futex",
                    format!("FUTEX_WAKE: {}", std::io::Error::last_os_error()),
                );
            }
            n += r as usize;
            if t0.elapsed() > Duration::from_secs(60) {
                fail(
                    "futex",
                    format!("round {round}: woke {n} of {threads} in 60 s"),
                );
            }
        }
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    // Let them finish.
    stop.store(true, Ordering::SeqCst);
    word.fetch_add(1, Ordering::SeqCst);
    // SAFETY: wakes waiters of a live u32.
    unsafe {
        syscall(
            SYS_FUTEX,
            word.as_ptr(),
            FUTEX_WAKE_PRIVATE,
            i64::from(i32::MAX),
        )
    };
    for h in handles {
        let _ = h.join();
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let (min, max) = times
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let med = median(&mut times);
    println!(
        "SEEDBENCH futex threads={threads} cpus={cpus} pinned={} rounds={rounds} wake_calls={calls} median_us={med:.2} mean_us={mean:.2} min_us={min:.2} max_us={max:.2}",
        pinned.load(Ordering::SeqCst)
    );
}

fn main() {
    let mut argv = std::env::args().skip(1);
    let workload = argv.next().unwrap_or_default();
    let mut pairs = Vec::new();
    for a in argv {
        match a.split_once('=') {
            Some((k, v)) => pairs.push((k.to_string(), v.to_string())),
            None => fail(&workload, format!("option {a}: use key=value")),
        }
    }
    let args = Args {
        workload: workload.clone(),
        pairs,
    };
    match workload.as_str() {
        "hackbench" => hackbench(&args),
        "fp" => fp(&args),
        "futex" => futex(&args),
        "sve" => sve(&args),
        _ => fail(
            if workload.is_empty() {
                "usage"
            } else {
                &workload
            },
            "usage: kestrel-seedbench hackbench|fp|futex|sve [key=value ...]",
        ),
    }
}
