//! The three workloads, as in `tools/guests/seedbench` (same options, same
//! result lines), on the syscall layer `sys`.

use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sys;

/// One output line, written with a single `write` (lines of concurrent
/// processes do not mix).
pub struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    pub fn new() -> Self {
        Line {
            buf: [0; 512],
            len: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Prints the line and a newline.
    pub fn print(mut self) {
        let _ = self.write_str("\n");
        sys::write_all(1, self.bytes());
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // Truncates rather than fails: a long line loses its tail.
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Prints `SEEDBENCH <workload> FAIL <why>` and exits with status 1.
pub fn fail(workload: &str, why: core::fmt::Arguments) -> ! {
    let mut l = Line::new();
    let _ = write!(l, "SEEDBENCH {workload} FAIL {why}");
    l.print();
    sys::exit_group(1)
}

/// `key=value` options with defaults; an unknown key or a bad number fails.
struct Args<'a> {
    workload: &'a str,
    pairs: &'a [(&'a str, &'a str)],
}

impl Args<'_> {
    fn get(&self, key: &str, default: u64) -> u64 {
        match self.pairs.iter().find(|(k, _)| *k == key) {
            Some((_, v)) => v
                .parse()
                .unwrap_or_else(|_| fail(self.workload, format_args!("{key}={v}: not a number"))),
            None => default,
        }
    }

    fn check(&self, known: &[&str]) {
        for (k, _) in self.pairs {
            if !known.contains(k) {
                fail(
                    self.workload,
                    format_args!("unknown option {k} (known: {known:?})"),
                );
            }
        }
    }
}

/// The program: `argv[1]` names the workload, the rest are `key=value`.
pub fn main(argv: &[&'static [u8]]) -> i32 {
    let text = |b: &'static [u8]| core::str::from_utf8(b).unwrap_or("?");
    let workload = argv.get(1).map_or("", |w| text(w));
    let mut pairs = [("", ""); 16];
    let mut n = 0;
    for &a in argv.iter().skip(2) {
        match text(a).split_once('=') {
            Some(kv) if n < pairs.len() => {
                pairs[n] = kv;
                n += 1;
            }
            Some(_) => fail(workload, format_args!("too many options")),
            None => fail(workload, format_args!("option {}: use key=value", text(a))),
        }
    }
    let args = Args {
        workload,
        pairs: &pairs[..n],
    };
    match workload {
        "hackbench" => hackbench(&args),
        "fp" => fp(&args),
        "futex" => futex(&args),
        _ => fail(
            if workload.is_empty() {
                "usage"
            } else {
                workload
            },
            format_args!("usage: kestrel-seedbench hackbench|fp|futex [key=value ...]"),
        ),
    }
    0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

/// `n` f64s of fresh memory (the program has no heap).
fn floats(workload: &str, n: usize) -> &'static mut [f64] {
    let Some(m) = sys::map((n * 8).max(8)) else {
        fail(workload, format_args!("mmap of {n} values failed"));
    };
    // SAFETY: a fresh mapping, page-aligned, zeroed (0.0), of n * 8 bytes.
    unsafe { core::slice::from_raw_parts_mut(m.as_mut_ptr().cast::<f64>(), n) }
}

/// Runs `f` in a forked child that exits with its status; the child's pid.
fn spawn_child(workload: &str, f: impl FnOnce() -> i32) -> isize {
    let pid = sys::fork();
    if pid < 0 {
        fail(workload, format_args!("fork: errno {}", -pid));
    }
    if pid == 0 {
        sys::exit_group(f());
    }
    pid
}

/// Waits for every pid; the number that did not exit with status 0.
fn reap(pids: &[isize]) -> usize {
    pids.iter().filter(|&&pid| sys::wait(pid) != Ok(0)).count()
}

fn secs_since(t0: u64) -> f64 {
    sys::now_ns().saturating_sub(t0) as f64 / 1e9
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
    let pipe =
        || sys::pipe().unwrap_or_else(|e| fail("hackbench", format_args!("pipe: errno {}", -e)));
    let times = floats("hackbench", runs);
    let Some(pid_mem) = sys::map(groups * fds * 2 * 8) else {
        fail("hackbench", format_args!("mmap failed"));
    };
    // SAFETY: fresh, 8-aligned, room for groups * fds * 2 pids.
    let pids: &mut [isize] =
        unsafe { core::slice::from_raw_parts_mut(pid_mem.as_mut_ptr().cast(), groups * fds * 2) };
    let t_all = sys::now_ns();
    for run in 1..=runs {
        let (ready_r, ready_w) = pipe();
        let (wake_r, wake_w) = pipe();
        let mut np = 0;
        for _ in 0..groups {
            let mut readers = [0i32; 64];
            let mut writers = [0i32; 64];
            for i in 0..fds {
                (readers[i], writers[i]) = pipe();
            }
            let (readers, writers) = (&readers[..fds], &writers[..fds]);
            // Receivers: each reads fds * loops messages from its pipe.
            for r in 0..fds {
                pids[np] = spawn_child("hackbench", || {
                    for (i, (&rd, &wr)) in readers.iter().zip(writers).enumerate() {
                        sys::close(wr);
                        if i != r {
                            sys::close(rd);
                        }
                    }
                    sys::close(wake_w);
                    sys::close(ready_r);
                    sys::write_all(ready_w, b"r");
                    let mut go = [0u8; 1];
                    sys::read(wake_r, &mut go);
                    let mut left = fds * loops * MSG;
                    let mut buf = [0u8; 4096];
                    while left > 0 {
                        let n = sys::read(readers[r], &mut buf[..left.min(4096)]);
                        if n <= 0 {
                            return 2;
                        }
                        left -= n as usize;
                    }
                    0
                });
                np += 1;
            }
            // Senders: each writes loops messages to every receiver.
            for _ in 0..fds {
                pids[np] = spawn_child("hackbench", || {
                    for &rd in readers {
                        sys::close(rd);
                    }
                    sys::close(wake_w);
                    sys::close(ready_r);
                    sys::write_all(ready_w, b"s");
                    let mut go = [0u8; 1];
                    sys::read(wake_r, &mut go);
                    let msg = [0x5au8; MSG];
                    for _ in 0..loops {
                        for &w in writers {
                            if !sys::write_all(w, &msg) {
                                return 3;
                            }
                        }
                    }
                    0
                });
                np += 1;
            }
            for (&rd, &wr) in readers.iter().zip(writers) {
                sys::close(rd);
                sys::close(wr);
            }
        }
        sys::close(ready_w);
        sys::close(wake_r);
        let mut got = 0;
        let mut buf = [0u8; 256];
        while got < np {
            let n = sys::read(ready_r, &mut buf);
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        sys::close(ready_r);
        if got < np {
            fail(
                "hackbench",
                format_args!("only {got} of {np} children ready"),
            );
        }
        // Closing the last write end releases every child's read of `wake`.
        let t0 = sys::now_ns();
        sys::close(wake_w);
        let bad = reap(&pids[..np]);
        let secs = secs_since(t0);
        if bad > 0 {
            fail(
                "hackbench",
                format_args!("run {run}: {bad} of {np} processes failed"),
            );
        }
        let mut l = Line::new();
        let _ = write!(
            l,
            "SEEDBENCH hackbench run={run} groups={groups} fds={fds} loops={loops} procs={np} messages={} seconds={secs:.6}",
            groups * fds * fds * loops
        );
        l.print();
        times[run - 1] = secs;
    }
    let total = secs_since(t_all);
    let mut l = Line::new();
    let _ = write!(
        l,
        "SEEDBENCH hackbench done runs={runs} median={:.6} total={total:.6}",
        median(times)
    );
    l.print();
}

/// One FP burst: `k` terms of sum 1/n^2 and of the Leibniz series, in f64
/// (the FP registers).
fn fp_burst(k: u64) -> (f64, f64) {
    let (mut s, mut t, mut sign) = (0.0f64, 0.0f64, 1.0f64);
    let mut n = 1.0f64;
    for _ in 0..k {
        s += 1.0 / (n * n);
        t += sign * 4.0 / (2.0 * n - 1.0);
        sign = -sign;
        n += 1.0;
    }
    (core::hint::black_box(s), core::hint::black_box(t))
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
    let (counts_r, counts_w) =
        sys::pipe().unwrap_or_else(|e| fail("fp", format_args!("pipe: errno {}", -e)));
    let t0 = sys::now_ns();
    let deadline = t0 + seconds * 1_000_000_000;
    let mut pids = [0isize; 256];
    for pid in pids.iter_mut().take(procs) {
        *pid = spawn_child("fp", || {
            sys::close(counts_r);
            let (mut bursts, mut wrong) = (0u64, 0u64);
            loop {
                let got = fp_burst(burst);
                bursts += 1;
                if got.0.to_bits() != want.0.to_bits() || got.1.to_bits() != want.1.to_bits() {
                    wrong += 1;
                }
                if sys::now_ns() >= deadline {
                    break;
                }
                sys::sleep_us(sleep_us);
            }
            let mut l = Line::new();
            let _ = writeln!(l, "{bursts} {wrong}");
            sys::write_all(counts_w, l.bytes());
            0
        });
    }
    sys::close(counts_w);
    let bad = reap(&pids[..procs]);
    let secs = secs_since(t0);
    let Some(text) = sys::map(64 * 1024) else {
        fail("fp", format_args!("mmap failed"));
    };
    let mut len = 0;
    while len < text.len() {
        let n = sys::read(counts_r, &mut text[len..]);
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    let text = core::str::from_utf8(&text[..len]).unwrap_or("");
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
            format_args!(
                "{bad} processes failed, {reported} of {procs} reported, {wrong} wrong FP results"
            ),
        );
    }
    let mut l = Line::new();
    let _ = write!(
        l,
        "SEEDBENCH fp procs={procs} sleep_us={sleep_us} burst={burst} seconds={secs:.3} bursts={bursts} wrong=0"
    );
    l.print();
}

/// Most waiter threads.
const MAX_THREADS: usize = 256;
/// Each waiter's stack.
const THREAD_STACK: usize = 64 * 1024;

/// The futex workload's shared state (the waiters are threads of this
/// process: they see the same statics).
static WORD: AtomicU32 = AtomicU32::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static WOKE: AtomicU64 = AtomicU64::new(0);
static PINNED: AtomicU64 = AtomicU64::new(0);
static EXITED: AtomicUsize = AtomicUsize::new(0);
static CPUS: AtomicUsize = AtomicUsize::new(1);
static TIDS: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];

/// Waiter `i`: pinned to CPU i mod CPUs, asleep in FUTEX_WAIT until the
/// word changes, counting each wake, until told to stop.
extern "C" fn waiter(i: usize) -> ! {
    if sys::pin(i % CPUS.load(Ordering::SeqCst)) {
        PINNED.fetch_add(1, Ordering::SeqCst);
    }
    TIDS[i].store(sys::gettid() as u64, Ordering::SeqCst);
    let mut seen = WORD.load(Ordering::SeqCst);
    loop {
        while WORD.load(Ordering::SeqCst) == seen {
            sys::futex_wait(&WORD, seen);
        }
        seen = WORD.load(Ordering::SeqCst);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        WOKE.fetch_add(1, Ordering::SeqCst);
    }
    EXITED.fetch_add(1, Ordering::SeqCst);
    sys::exit_thread()
}

/// Reads the file at the NUL-terminated `path` into `buf`: the bytes read,
/// or None if it cannot be opened.
fn read_file<'b>(path: &[u8], buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let fd = sys::open_read(path);
    if fd < 0 {
        return None;
    }
    let n = sys::read(fd as i32, buf);
    sys::close(fd as i32);
    Some(&buf[..n.max(0) as usize])
}

/// Whether thread `tid` of this process is asleep in `futex` (state `S`
/// and, where `/proc/.../syscall` exists, syscall 98).
fn asleep_in_futex(tid: u64) -> bool {
    let mut path = Line::new();
    let _ = write!(path, "/proc/self/task/{tid}/stat\0");
    let mut buf = [0u8; 512];
    let stat = read_file(path.bytes(), &mut buf).unwrap_or(&[]);
    let state = stat
        .windows(2)
        .rposition(|w| w == b") ")
        .and_then(|at| stat.get(at + 2));
    if state != Some(&b'S') {
        return false;
    }
    let mut path = Line::new();
    let _ = write!(path, "/proc/self/task/{tid}/syscall\0");
    let mut buf = [0u8; 256];
    match read_file(path.bytes(), &mut buf) {
        Some(s) => s.split(|&c| c == b' ' || c == b'\n').next() == Some(b"98"),
        None => true,
    }
}

/// `perf bench futex wake` in spirit: `threads` threads, thread i pinned
/// to CPU i mod CPUs, block in FUTEX_WAIT on one word; per round the waker
/// (unpinned) bumps the word and calls FUTEX_WAKE for one waiter at a time
/// until all are woken. The time of that loop is one wake-all.
fn futex(a: &Args) {
    a.check(&["threads", "rounds"]);
    let threads = a.get("threads", 16).clamp(1, MAX_THREADS as u64) as usize;
    let rounds = a.get("rounds", 100).max(1) as usize;
    let cpus = sys::cpus();
    CPUS.store(cpus, Ordering::SeqCst);
    for i in 0..threads {
        let Some(stack) = sys::map(THREAD_STACK) else {
            fail("futex", format_args!("mmap of a thread stack failed"));
        };
        let tid = sys::spawn_thread(stack, waiter, i);
        if tid < 0 {
            fail("futex", format_args!("clone: errno {}", -tid));
        }
    }
    let times = floats("futex", rounds);
    let mut calls = 0u64;
    let sec = 1_000_000_000u64;
    for (round, time) in times.iter_mut().enumerate() {
        // All threads back asleep in the futex before the clock starts.
        let t_wait = sys::now_ns();
        loop {
            let all = TIDS[..threads].iter().all(|t| {
                let tid = t.load(Ordering::SeqCst);
                tid != 0 && asleep_in_futex(tid)
            });
            if all && WOKE.load(Ordering::SeqCst) == (round * threads) as u64 {
                break;
            }
            if sys::now_ns() - t_wait > 60 * sec {
                fail(
                    "futex",
                    format_args!("round {round}: threads not asleep after 60 s"),
                );
            }
            sys::sched_yield();
        }
        let t0 = sys::now_ns();
        WORD.fetch_add(1, Ordering::SeqCst);
        let mut n = 0usize;
        while n < threads {
            let r = sys::futex_wake(&WORD, 1);
            calls += 1;
            if r < 0 {
                fail("futex", format_args!("FUTEX_WAKE: errno {}", -r));
            }
            n += r as usize;
            if sys::now_ns() - t0 > 60 * sec {
                fail(
                    "futex",
                    format_args!("round {round}: woke {n} of {threads} in 60 s"),
                );
            }
        }
        *time = (sys::now_ns() - t0) as f64 / 1e3;
    }
    // Let them finish.
    STOP.store(true, Ordering::SeqCst);
    WORD.fetch_add(1, Ordering::SeqCst);
    let t_end = sys::now_ns();
    while EXITED.load(Ordering::SeqCst) < threads && sys::now_ns() - t_end < 60 * sec {
        sys::futex_wake(&WORD, i32::MAX as usize);
        sys::sched_yield();
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let (min, max) = times
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let med = median(times);
    let mut l = Line::new();
    let _ = write!(
        l,
        "SEEDBENCH futex threads={threads} cpus={cpus} pinned={} rounds={rounds} wake_calls={calls} median_us={med:.2} mean_us={mean:.2} min_us={min:.2} max_us={max:.2}",
        PINNED.load(Ordering::SeqCst)
    );
    l.print();
}
