//! kestrel's LoongArch test guest.
//!
//! A bare-metal program that believes it owns a LoongArch machine at PLV0
//! (as QEMU `-kernel` starts it) and checks, one `PASS`/`FAIL`/`SKIP` line
//! each, what a hypervisor running it deprivileged must get right: its own
//! paging and TLB refill, timer interrupts, SMP bring-up through the IOCSR
//! mailbox, kestrel discovery, PV and IOCSR IPIs, KVM's steal-time record
//! and its preempted byte (under LVZ), a device interrupt
//! through the PCH-PIC and EIOINTC, FP/LSX state across vCPU
//! switches, PLV3 isolation and memory outside the VM. It ends with
//! `RESULT: N passed, M failed` and powers the machine off.
//!
//! On bare QEMU every check except the kestrel-specific ones passes (those
//! say `SKIP ...: not on kestrel`): that proves the checks test something.
//! See `docs/test-guest-loongarch.md`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod asm;
#[cfg(target_os = "none")]
mod bench;
#[cfg(target_os = "none")]
mod checks;
#[cfg(target_os = "none")]
mod cmdline;
#[cfg(target_os = "none")]
mod console;
#[cfg(target_os = "none")]
mod cpu;
#[cfg(target_os = "none")]
mod devirq;
#[cfg(target_os = "none")]
mod exitbench;
#[cfg(target_os = "none")]
mod fdt;
#[cfg(target_os = "none")]
mod hostile;
#[cfg(target_os = "none")]
mod mmu;
#[cfg(target_os = "none")]
mod pvpreempt;
#[cfg(target_os = "none")]
mod reboot;
#[cfg(target_os = "none")]
mod smp;
#[cfg(target_os = "none")]
mod trap;
#[cfg(target_os = "none")]
mod virtio;

/// Most CPUs the guest handles (kestrel's `MAX_VCPUS`).
pub const MAX_CPUS: usize = 16;
/// Stack per CPU.
pub const STACK_SIZE: usize = 32 * 1024;

#[cfg(target_os = "none")]
pub use guest::*;

#[cfg(target_os = "none")]
mod guest {
    use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use crate::console::{println, report};
    use crate::{checks, cmdline, console, cpu, fdt, mmu, smp, trap, MAX_CPUS, STACK_SIZE};

    #[repr(C, align(4096))]
    pub struct Stacks(pub [[u8; STACK_SIZE]; MAX_CPUS]);

    /// CPU i's stack is `GUEST_STACKS[i]` (its top is where the entry code
    /// points `sp`). Used from assembly only.
    #[no_mangle]
    pub static mut GUEST_STACKS: Stacks = Stacks([[0; STACK_SIZE]; MAX_CPUS]);

    /// What the boot CPU learnt about the machine.
    pub static CPUS: AtomicUsize = AtomicUsize::new(1);
    pub static RAM_TOP: AtomicU64 = AtomicU64::new(0);
    pub static COUNTER_HZ: AtomicU64 = AtomicU64::new(100_000_000);
    /// Whether CPUCFG2 says LSX.
    pub static LSX: AtomicU64 = AtomicU64::new(0);

    /// The QEMU virt power-off register (GED sleep control): write 0x34.
    pub const POWEROFF_REG: usize = 0x100e_001c;

    /// Counter ticks in `us` microseconds.
    pub fn us(us: u64) -> u64 {
        COUNTER_HZ.load(Ordering::Relaxed) / 1000 * us / 1000
    }

    /// Waits until `cond` holds or `timeout_us` passes; returns whether it held.
    pub fn wait_for(timeout_us: u64, mut cond: impl FnMut() -> bool) -> bool {
        let end = cpu::now() + us(timeout_us);
        loop {
            if cond() {
                return true;
            }
            if cpu::now() > end {
                return cond();
            }
            cpu::relax();
        }
    }

    #[no_mangle]
    extern "C" fn guest_primary_main(a0: u64, a1: u64, a2: u64) -> ! {
        trap::init_cpu();
        COUNTER_HZ.store(cpu::counter_hz(), Ordering::Relaxed);
        LSX.store((cpu::cpucfg(2) >> 6) & 1, Ordering::Relaxed);
        let info = fdt::find(a0, a1, a2).and_then(fdt::parse);
        if let Some(i) = info {
            if let Some(u) = i.uart {
                console::set_base(u);
            }
            RAM_TOP.store(i.ram_top, Ordering::Relaxed);
        }
        println!(
            "kestrel loongarch64 test guest: a0={a0:#x} a1={a1:#x} a2={a2:#x}, FDT {}, counter {} Hz, LSX {}",
            if info.is_some() { "found" } else { "absent" },
            COUNTER_HZ.load(Ordering::Relaxed),
            if LSX.load(Ordering::Relaxed) != 0 { "yes" } else { "no" }
        );
        let fdt_cpus = info.map(|i| i.cpus).unwrap_or(0);
        let bench = cmdline::apply(a1);
        crate::hostile::run_mode();
        crate::reboot::run_mode();

        report("exceptions", checks::exceptions());
        report("paging", checks::paging());
        crate::exitbench::run_mode(fdt_cpus);
        report("timer", checks::timer());
        report("smp", smp::bring_up(fdt_cpus));
        let share_ms = cmdline::SHARE_MS.load(Ordering::Relaxed);
        if share_ms > 0 {
            let delay = cmdline::SHARE_DELAY_MS.load(Ordering::Relaxed);
            report("share", smp::share(share_ms, delay));
            finish()
        }
        if crate::pvpreempt::SHARED.load(Ordering::Relaxed) {
            report("pv-preempt", crate::pvpreempt::check());
            finish()
        }
        let on_kestrel = checks::probe_kestrel();
        report("swi0-self", checks::swi0_self());
        for t in checks::TARGET_SETS {
            let (name, o) = checks::ipi_iocsr(t);
            report(name, o);
        }
        for t in checks::TARGET_SETS {
            let (name, o) = checks::ipi_pv(t, on_kestrel);
            report(name, o);
        }
        report("ipi-pv-invalid", checks::ipi_pv_invalid(on_kestrel));
        report("pv-preempt", crate::pvpreempt::check());
        report("device-irq", crate::devirq::check());
        report("virtio-console", crate::virtio::check());
        report("fp-lsx", checks::fp_all_cpus());
        report("user-isolation", checks::user_isolation());
        report("outside-ram", checks::outside_ram());
        if bench {
            crate::bench::run(on_kestrel);
        } else {
            report("bench", console::skip!("bench=off on the command line"));
        }
        crate::bench::counters(on_kestrel);
        finish()
    }

    #[no_mangle]
    extern "C" fn guest_secondary_main(cpu: usize) -> ! {
        trap::init_cpu();
        mmu::enable_on_this_cpu();
        smp::secondary_loop(cpu)
    }

    /// Prints the result line and powers off.
    pub fn finish() -> ! {
        let failed = console::result();
        let _ = failed;
        poweroff()
    }

    /// QEMU virt power-off (the GED sleep register, one byte), then idle.
    pub fn poweroff() -> ! {
        // SAFETY: the GED page is identity mapped uncached (or we are in DA
        // mode); writing SLP_TYP 5 | SLP_EN powers the machine off.
        unsafe { core::ptr::write_volatile(POWEROFF_REG as *mut u8, 0x34) };
        loop {
            cpu::idle();
        }
    }

    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo) -> ! {
        println!("guest: panic on cpu {}: {info}", cpu::cpu());
        report("no-panic", console::fail!("{}", info.message()));
        finish()
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("loongarch64-test is a bare-metal guest: build it with cargo xtask (see docs/test-guest-loongarch.md)");
}
