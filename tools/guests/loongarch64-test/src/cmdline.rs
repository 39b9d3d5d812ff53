//! Options from the command line (a NUL-terminated string whose physical
//! address is in a1, as QEMU's LoongArch direct boot passes it; QEMU puts it
//! at 0, so a1 = 0 is valid). Unknown words are ignored.
//!
//! | option | effect |
//! |--------|--------|
//! | `fp_iterations=N` | iterations of the FP/LSX check per CPU (default 2000, 1..=1000000) |
//! | `bench=off` | skip the benchmark |
//! | `share_ms=N` | after SMP bring-up, only the fairness window: every CPU spins N ms (1..=60000) and the guest prints its iteration counts |
//! | `share_delay_ms=N` | sleep N ms (0..=60000) before that window |
//! | `pv_preempt=shared` | after SMP bring-up, only the `pv-preempt` check, strict: the VM's vCPUs share one pCPU, so the others' records must read preempted (`pvpreempt.rs`) |
//! | `mode=attack` / `mode=victim` | run the hostile-guest attacker or victim instead of the checks (`hostile.rs`) |
//! | `mode=reboot` | check that RAM is fresh and reset through the GED, at every boot (`reboot.rs`) |
//! | `mode=bench-exits` / `mode=bench-switch` / `mode=bench-ipi` | after `exceptions` and `paging`, the exit-cost benchmark instead of the other checks (`exitbench.rs`) |

use core::sync::atomic::{AtomicU64, Ordering};

use crate::checks::FP_ITERATIONS;
use crate::console::println;
use crate::trap::probe_u64;

const MAX: usize = 512;

/// `share_ms=`: the fairness window in ms (0: off, run the checks).
pub static SHARE_MS: AtomicU64 = AtomicU64::new(0);
/// `share_delay_ms=`: sleep before the window, in ms.
pub static SHARE_DELAY_MS: AtomicU64 = AtomicU64::new(0);

/// Reads and applies the options; returns whether the benchmark should run.
pub fn apply(a1: u64) -> bool {
    if !a1.is_multiple_of(8) {
        return true;
    }
    let mut buf = [0u8; MAX];
    let mut len = 0;
    'read: while len < MAX {
        let Some(w) = probe_u64((a1 as usize + len) & !7) else {
            break;
        };
        for b in w.to_le_bytes() {
            if b == 0 || len == MAX {
                break 'read;
            }
            if !(0x20..0x7f).contains(&b) {
                return true; // not a command line
            }
            buf[len] = b;
            len += 1;
        }
    }
    let text = core::str::from_utf8(&buf[..len]).unwrap_or("");
    let mut bench = true;
    for word in text.split_ascii_whitespace() {
        if let Some(n) = word.strip_prefix("fp_iterations=") {
            if let Ok(n) = n.parse::<u64>() {
                FP_ITERATIONS.store(n.clamp(1, 1_000_000), Ordering::Relaxed);
            }
        } else if word == "pv_preempt=shared" {
            crate::pvpreempt::SHARED.store(true, Ordering::Relaxed);
        } else if word == "bench=off" {
            bench = false;
        } else if let Some(n) = word.strip_prefix("share_ms=") {
            if let Ok(n) = n.parse::<u64>() {
                SHARE_MS.store(n.clamp(1, 60_000), Ordering::Relaxed);
            }
        } else if let Some(n) = word.strip_prefix("share_delay_ms=") {
            if let Ok(n) = n.parse::<u64>() {
                SHARE_DELAY_MS.store(n.min(60_000), Ordering::Relaxed);
            }
        } else if let Some(m) = word.strip_prefix("mode=") {
            if !crate::exitbench::set_mode(m) && !crate::reboot::set_mode(m) {
                crate::hostile::set_mode(m);
            }
        }
    }
    if !text.is_empty() {
        println!("command line: {text}");
    }
    bench
}
