//! kestrel's arm64 test guest.
//!
//! A `no_std` program that runs at EL1 inside a kestrel VM (or on bare QEMU
//! for development) and checks, one numbered `PASS`/`FAIL`/`SKIP` line per
//! check on its PL011 console, what the hypervisor promises a guest:
//! hypercall discovery and errors, PSCI and SMP bring-up, PV IPIs, SGIs,
//! the virtual timer, FP/SIMD state across vCPU switches, and aborts for
//! accesses outside guest memory. It ends with `RESULT: N passed, M failed`
//! and PSCI SYSTEM_OFF. `docs/test-guest.md` describes every check.
//!
//! Boot: `src/start.S` (arm64 `Image` header, self-relocation, identity
//! map with the MMU on, vectors) calls [`primary_main`] with the DTB.
#![cfg_attr(target_os = "none", no_std, no_main)]
// Failure messages are fixed-size stack buffers (`console::Msg`): the guest
// has no heap to box them in.
#![allow(clippy::result_large_err)]

#[cfg(target_os = "none")]
mod checks;
#[cfg(target_os = "none")]
mod console;
#[cfg(target_os = "none")]
mod cpu;
#[cfg(target_os = "none")]
mod el1state;
#[cfg(target_os = "none")]
mod exceptions;
#[cfg(target_os = "none")]
mod exitbench;
#[cfg(target_os = "none")]
mod gic;
#[cfg(target_os = "none")]
mod hostile;
#[cfg(target_os = "none")]
mod platform;
#[cfg(target_os = "none")]
mod reboot;
#[cfg(target_os = "none")]
mod resetrace;
#[cfg(target_os = "none")]
mod smccc;
#[cfg(target_os = "none")]
mod smp;
mod sve;

#[cfg(target_os = "none")]
core::arch::global_asm!(include_str!("start.S"));

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let (n, name) = checks::current();
    println!("FAIL {n} {name}: panic on CPU {}: {info}", cpu::index());
    checks::finish_fatal()
}

/// Built for the host (e.g. `cargo test` of the workspace): nothing to run.
#[cfg(not(target_os = "none"))]
fn main() {}
