//! `kestrel-seedbench` for LoongArch Linux guests: the seeds' workloads
//! (docs/performance.md, "The seeds' experiments"; `cargo xtask
//! bench-seeds --arch loongarch64`) as a freestanding static program on
//! raw syscalls (there is no Rust std for loong64 Linux to build with
//! here). Its command line and its output lines are those of
//! `tools/guests/seedbench` (the arm64 build, on std), so xtask parses both
//! alike:
//!
//! ```text
//! kestrel-seedbench hackbench [groups=G] [fds=F] [loops=L] [runs=N]
//! kestrel-seedbench fp [procs=P] [sleep_us=S] [seconds=T] [burst=K]
//! kestrel-seedbench futex [threads=N] [rounds=R]
//! ```
//!
//! Every result is one line `SEEDBENCH <workload> ...` of `key=value`
//! fields; a failure prints `SEEDBENCH <workload> FAIL <reason>` and the
//! program exits with status 1. The workloads sit on `sys` (the generic
//! syscall table: `clone`, `futex`, `pipe2`, `nanosleep`, `wait4`, ...);
//! threads are `clone(CLONE_VM | CLONE_THREAD | ...)` on stacks of their
//! own, processes `clone(SIGCHLD)`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(all(target_os = "none", target_arch = "loongarch64"))]
mod sys;
#[cfg(all(target_os = "none", target_arch = "loongarch64"))]
mod workloads;

/// A host build (the workspace's `cargo check`/clippy) has nothing to run.
#[cfg(not(target_os = "none"))]
fn main() {}

#[cfg(all(target_os = "none", target_arch = "loongarch64"))]
mod entry {
    use crate::sys;
    use crate::workloads::Line;
    use core::fmt::Write as _;

    // The process entry: Linux starts it with sp at argc, then the argv
    // pointers. The stack pointer is passed as is and the stack aligned.
    core::arch::global_asm!(
        ".globl _start",
        ".type _start, @function",
        "_start:",
        "move $a0, $sp",
        "bstrins.d $sp, $zero, 3, 0",
        "move $fp, $zero",
        "move $ra, $zero",
        "bl {start}",
        "break 0",
        start = sym start,
    );

    /// C string at `p` as bytes (without its NUL).
    ///
    /// # Safety
    /// `p` points to a NUL-terminated string that lives as long as the
    /// process (argv strings do).
    unsafe fn cstr(p: *const u8) -> &'static [u8] {
        let mut n = 0;
        // SAFETY: reads up to the NUL the caller vouches for.
        unsafe {
            while *p.add(n) != 0 {
                n += 1;
            }
            core::slice::from_raw_parts(p, n)
        }
    }

    extern "C" fn start(sp: *const usize) -> ! {
        // SAFETY: Linux's initial stack: argc, then argc pointers to
        // NUL-terminated strings, then NULL.
        let args: &[usize] = unsafe { core::slice::from_raw_parts(sp.add(1), *sp) };
        let mut argv = [&b""[..]; 16];
        let n = args.len().min(argv.len());
        for (i, &a) in args[..n].iter().enumerate() {
            // SAFETY: as above, each argv entry is a C string.
            argv[i] = unsafe { cstr(a as *const u8) };
        }
        let code = crate::workloads::main(&argv[..n]);
        sys::exit_group(code)
    }

    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo) -> ! {
        let mut l = Line::new();
        let _ = write!(l, "SEEDBENCH panic FAIL {info}");
        l.print();
        sys::exit_group(101)
    }
}
