//! `mode=resetrace until_ms=N`: the restart race with CPU_ON
//! (`arm64-resetrace`, docs/test-guest.md).
//!
//! Every boot of this VM (3 vCPUs at least) starts vCPU 1, which calls
//! PSCI CPU_ON for vCPU 2 without pause (vCPU 2 turns itself off again at
//! once, so many of the calls start it), while vCPU 0 spins a moment and
//! then resets the VM with PSCI SYSTEM_RESET: each restart races the CPU_ON
//! calls of its own vCPU. Once the virtual counter (which goes on across
//! restarts) passes `until_ms`, the boot reports and powers the VM off. A
//! victim VM beside it must keep its timer: a restart may cost only the
//! restarting VM its time.

use crate::platform::Platform;
use crate::smccc::{self, psci};
use crate::{cpu, println, smp};
use core::sync::atomic::Ordering;

/// How long vCPU 0 lets vCPU 1 hammer before the reset (counter time).
const RACE_US: u64 = 1_000;

pub fn run(p: &Platform) -> ! {
    let until_ms = p.window_ms.unwrap_or(4_000);
    let now_ms = cpu::ticks_to_us(cpu::now()) / 1000;
    if now_ms >= until_ms {
        println!("PASS 1 resetrace: restarts raced CPU_ON until counter {until_ms} ms");
        println!("RESULT: 1 passed, 0 failed");
        smccc::system_off()
    }
    if p.ncpus < 3 {
        println!("FAIL 1 resetrace: {} vCPUs, at least 3 wanted", p.ncpus);
        println!("RESULT: 0 passed, 1 failed");
        smccc::system_off()
    }
    // vCPU 2 powers itself off as soon as it starts.
    smp::OFF_AT_START.store(1 << 2, Ordering::Release);
    let entry = crate::checks::secondary_entry_pa();
    let r = smccc::call0(psci::CPU_ON, [p.cpus[1], entry, 1]);
    if r != psci::SUCCESS {
        println!("FAIL 1 resetrace: CPU_ON(vCPU 1) = {r}");
        println!("RESULT: 0 passed, 1 failed");
        smccc::system_off()
    }
    let give_up = cpu::deadline(1_000_000);
    while !cpu::CPUS[1].online.load(Ordering::Acquire) && cpu::now() < give_up {
        core::hint::spin_loop();
    }
    smp::post(smp::Cmd::CpuOnLoop, smp::cpu_on_arg(1, 2, p.cpus[2]));
    let end = cpu::deadline(RACE_US);
    while cpu::now() < end {
        core::hint::spin_loop();
    }
    smccc::system_reset()
}
