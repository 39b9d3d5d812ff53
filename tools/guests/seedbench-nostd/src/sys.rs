//! The syscall layer: Linux's generic syscall table (the same numbers on
//! LoongArch and arm64), `syscall 0` with the number in a7 and the
//! arguments in a0-a5, the result (or -errno) in a0. Everything the
//! workloads need from the kernel goes through here.

use core::arch::asm;

pub const SYS_OPENAT: usize = 56;
pub const SYS_CLOSE: usize = 57;
pub const SYS_PIPE2: usize = 59;
pub const SYS_READ: usize = 63;
pub const SYS_WRITE: usize = 64;
pub const SYS_EXIT: usize = 93;
pub const SYS_EXIT_GROUP: usize = 94;
pub const SYS_FUTEX: usize = 98;
pub const SYS_NANOSLEEP: usize = 101;
pub const SYS_CLOCK_GETTIME: usize = 113;
pub const SYS_SCHED_SETAFFINITY: usize = 122;
pub const SYS_SCHED_GETAFFINITY: usize = 123;
pub const SYS_SCHED_YIELD: usize = 124;
pub const SYS_GETTID: usize = 178;
pub const SYS_CLONE: usize = 220;
pub const SYS_MMAP: usize = 222;
pub const SYS_WAIT4: usize = 260;

pub const FUTEX_WAIT_PRIVATE: usize = 128;
pub const FUTEX_WAKE_PRIVATE: usize = 129;

/// One syscall with up to six arguments; the raw result (-errno on error).
///
/// # Safety
/// The arguments must be valid for the call `nr` (pointers to live memory
/// of the sizes the call reads or writes).
#[inline(always)]
pub unsafe fn syscall(nr: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the arguments; the kernel may clobber
    // t0-t8 (LoongArch Linux's syscall ABI) and memory the call names.
    unsafe {
        asm!(
            "syscall 0",
            inlateout("$a0") a[0] => ret,
            in("$a1") a[1],
            in("$a2") a[2],
            in("$a3") a[3],
            in("$a4") a[4],
            in("$a5") a[5],
            in("$a7") nr,
            out("$t0") _, out("$t1") _, out("$t2") _, out("$t3") _, out("$t4") _,
            out("$t5") _, out("$t6") _, out("$t7") _, out("$t8") _,
            options(nostack),
        );
    }
    ret
}

/// A syscall without pointer arguments (or with pointers the caller has
/// checked): a safe wrapper for the common cases below.
fn call(nr: usize, a: [usize; 6]) -> isize {
    // SAFETY: used only for calls whose arguments are plain values or
    // pointers the wrapper took from live Rust references.
    unsafe { syscall(nr, a) }
}

pub fn write(fd: i32, buf: &[u8]) -> isize {
    call(
        SYS_WRITE,
        [fd as usize, buf.as_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

/// Writes all of `buf` (false on an error).
pub fn write_all(fd: i32, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        let n = write(fd, buf);
        if n <= 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

pub fn read(fd: i32, buf: &mut [u8]) -> isize {
    call(
        SYS_READ,
        [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

pub fn close(fd: i32) {
    call(SYS_CLOSE, [fd as usize, 0, 0, 0, 0, 0]);
}

/// `pipe2(fds, 0)`: (read end, write end).
pub fn pipe() -> Result<(i32, i32), isize> {
    let mut fds = [0i32; 2];
    let r = call(SYS_PIPE2, [fds.as_mut_ptr() as usize, 0, 0, 0, 0, 0]);
    if r < 0 {
        Err(r)
    } else {
        Ok((fds[0], fds[1]))
    }
}

/// Opens `path` (NUL-terminated) read-only.
pub fn open_read(path: &[u8]) -> isize {
    if path.last() != Some(&0) {
        return -22;
    }
    const AT_FDCWD: isize = -100;
    call(
        SYS_OPENAT,
        [AT_FDCWD as usize, path.as_ptr() as usize, 0, 0, 0, 0],
    )
}

pub fn exit_group(code: i32) -> ! {
    call(SYS_EXIT_GROUP, [code as usize, 0, 0, 0, 0, 0]);
    loop {
        core::hint::spin_loop();
    }
}

/// Ends the calling thread only.
pub fn exit_thread() -> ! {
    call(SYS_EXIT, [0; 6]);
    loop {
        core::hint::spin_loop();
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = [0i64; 2];
    call(SYS_CLOCK_GETTIME, [1, ts.as_mut_ptr() as usize, 0, 0, 0, 0]);
    ts[0] as u64 * 1_000_000_000 + ts[1] as u64
}

pub fn sleep_us(us: u64) {
    let ts = [(us / 1_000_000) as i64, ((us % 1_000_000) * 1000) as i64];
    call(SYS_NANOSLEEP, [ts.as_ptr() as usize, 0, 0, 0, 0, 0]);
}

pub fn sched_yield() {
    call(SYS_SCHED_YIELD, [0; 6]);
}

pub fn gettid() -> i64 {
    call(SYS_GETTID, [0; 6]) as i64
}

/// CPUs the calling thread may run on (what std's `available_parallelism`
/// reads): at least 1.
pub fn cpus() -> usize {
    let mut mask = [0u64; 16];
    let r = call(
        SYS_SCHED_GETAFFINITY,
        [0, 128, mask.as_mut_ptr() as usize, 0, 0, 0],
    );
    if r <= 0 {
        return 1;
    }
    (mask.iter().map(|w| w.count_ones() as usize).sum::<usize>()).max(1)
}

/// Pins the calling thread to `cpu` (false if the kernel refused).
pub fn pin(cpu: usize) -> bool {
    let mut mask = [0u64; 16];
    mask[(cpu / 64) % 16] |= 1 << (cpu % 64);
    call(
        SYS_SCHED_SETAFFINITY,
        [0, 128, mask.as_ptr() as usize, 0, 0, 0],
    ) == 0
}

/// Anonymous private read-write memory of `len` bytes (zeroed), or None.
pub fn map(len: usize) -> Option<&'static mut [u8]> {
    const PROT_RW: usize = 3;
    const MAP_PRIVATE_ANON: usize = 0x22;
    let r = call(SYS_MMAP, [0, len, PROT_RW, MAP_PRIVATE_ANON, usize::MAX, 0]);
    if r < 0 {
        return None;
    }
    // SAFETY: the kernel gave `len` fresh bytes at `r`, mapped until the
    // process ends (never unmapped), owned by nobody else.
    Some(unsafe { core::slice::from_raw_parts_mut(r as *mut u8, len) })
}

/// `FUTEX_WAIT_PRIVATE` on `word` while it holds `seen`.
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, seen: u32) -> isize {
    call(
        SYS_FUTEX,
        [
            word.as_ptr() as usize,
            FUTEX_WAIT_PRIVATE,
            seen as usize,
            0,
            0,
            0,
        ],
    )
}

/// `FUTEX_WAKE_PRIVATE` of up to `n` waiters of `word`: how many woke.
pub fn futex_wake(word: &core::sync::atomic::AtomicU32, n: usize) -> isize {
    call(
        SYS_FUTEX,
        [word.as_ptr() as usize, FUTEX_WAKE_PRIVATE, n, 0, 0, 0],
    )
}

/// `fork()` as `clone(SIGCHLD)`: the child's pid, 0 in the child, -errno.
pub fn fork() -> isize {
    const SIGCHLD: usize = 17;
    call(SYS_CLONE, [SIGCHLD, 0, 0, 0, 0, 0])
}

/// Waits for child `pid`: its wait status, or -errno.
pub fn wait(pid: isize) -> Result<i32, isize> {
    let mut status = 0i32;
    let r = call(
        SYS_WAIT4,
        [pid as usize, &mut status as *mut i32 as usize, 0, 0, 0, 0],
    );
    if r < 0 {
        Err(r)
    } else {
        Ok(status)
    }
}

/// Starts a thread of this process running `f(arg)` on the stack `stack`
/// (which it keeps until the process ends): its tid or -errno. `f` must end
/// the thread with [`exit_thread`].
pub fn spawn_thread(stack: &'static mut [u8], f: extern "C" fn(usize) -> !, arg: usize) -> isize {
    const CLONE_VM: usize = 0x100;
    const CLONE_FS: usize = 0x200;
    const CLONE_FILES: usize = 0x400;
    const CLONE_SIGHAND: usize = 0x800;
    const CLONE_THREAD: usize = 0x10000;
    const CLONE_SYSVSEM: usize = 0x40000;
    let flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
    // The new thread finds f and arg at the top of its stack (16-aligned).
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    let sp = top - 16;
    // SAFETY: sp..top lies inside `stack`, 16-aligned.
    unsafe {
        (sp as *mut usize).write(f as usize);
        ((sp + 8) as *mut usize).write(arg);
    }
    let ret: isize;
    // SAFETY: clone with CLONE_VM runs the child on `stack`, which nothing
    // else uses; the child never returns into this function: it loads f
    // and arg from its own stack and calls f, which ends the thread. The
    // parent sees an ordinary syscall.
    unsafe {
        asm!(
            "syscall 0",
            "bnez $a0, 1f",
            "ld.d $a0, $sp, 8",
            "ld.d $t0, $sp, 0",
            "jirl $ra, $t0, 0",
            "break 0",
            "1:",
            inlateout("$a0") flags => ret,
            in("$a1") sp,
            in("$a2") 0usize,
            in("$a3") 0usize,
            in("$a4") 0usize,
            in("$a7") SYS_CLONE,
            out("$t0") _, out("$t1") _, out("$t2") _, out("$t3") _, out("$t4") _,
            out("$t5") _, out("$t6") _, out("$t7") _, out("$t8") _, out("$ra") _,
        );
    }
    ret
}
