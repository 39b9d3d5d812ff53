//! The boot flow both architectures share, once the arch has a console, a
//! heap and a [`BoardInfo`]: start the secondary CPUs, start the tick, print
//! the banner, then idle or power off.

pub mod backend;
pub mod banner;

use core::sync::atomic::{AtomicBool, Ordering};
use log::{error, info, warn};

use crate::base::platform::{ExitStatus, Platform};
use crate::host::board::BoardInfo;
use crate::host::cmdline::{BootOptions, OnExit};
use crate::MAX_CPUS;
use banner::BootReport;

use crate::base::clock;
use crate::base::cpu::{self as percpu, set_online, PerCpu};

/// CPU `index`'s boot state; `index` is below `MAX_CPUS` (a board lists
/// no more CPUs).
fn state(index: usize) -> &'static PerCpu {
    percpu::cpu(index).expect("CPU index below MAX_CPUS")
}

/// How long a secondary CPU gets to come online. A real core answers in
/// microseconds; an emulated one on a busy host may not be scheduled for
/// seconds (seen here: 1 s was not enough for a 4-CPU QEMU beside other
/// emulators on 2 host cores, and 5 s not for the LVZ emulator at a load
/// average of about 12), and only a dead core ever costs the wait.
const CPU_START_TIMEOUT_MS: u64 = 30_000;
/// How often the boot CPU sends a start again while the CPU is not online
/// ([`Platform::resend_start`]; only LoongArch resends). A start can be
/// lost outright: an emulated core whose boot ROM runs only after the boot
/// CPU's mailbox write and IPI clears the mailbox and never sees the IPI
/// (`arch::loongarch64::smp`), so waiting longer would not help.
pub const CPU_START_RESEND_MS: u64 = 250;
/// How long the boot CPU waits for every online CPU's tick (as long, for
/// the same reason).
const TICK_TIMEOUT_MS: u64 = 30_000;
/// Ticks each CPU must take before the tick counts as working.
const TICKS_REQUIRED: u64 = 3;

fn wait_until(p: &dyn Platform, timeout_ms: u64, done: impl FnMut() -> bool) -> bool {
    wait_until_every(p, timeout_ms, timeout_ms, done, || {})
}

/// Waits up to `timeout_ms` of counter time for `done`, calling `every`
/// each `period_ms` while it is not (never once `done` holds or the time is
/// up).
fn wait_until_every(
    p: &dyn Platform,
    timeout_ms: u64,
    period_ms: u64,
    mut done: impl FnMut() -> bool,
    mut every: impl FnMut(),
) -> bool {
    let hz = p.counter_hz().max(1);
    let ticks = |ms: u64| hz.saturating_mul(ms) / 1000;
    let start = p.counter();
    let deadline = start.saturating_add(ticks(timeout_ms));
    let period = ticks(period_ms).max(1);
    let mut next = start.saturating_add(period);
    loop {
        if done() {
            return true;
        }
        let now = p.counter();
        if now >= deadline {
            return done();
        }
        if now >= next {
            every();
            next = now.saturating_add(period);
        }
        core::hint::spin_loop();
    }
}

/// Waits for CPU `index`, which `start_cpu` accepted, to come online,
/// sending its start again every [`CPU_START_RESEND_MS`] where the platform
/// can. Returns whether it came online and how often the start was resent.
fn await_cpu(p: &dyn Platform, index: usize) -> (bool, u32) {
    let mut resent = 0u32;
    let online = wait_until_every(
        p,
        CPU_START_TIMEOUT_MS,
        CPU_START_RESEND_MS,
        || state(index).is_online(),
        || {
            if p.resend_start(index) {
                resent += 1;
                // 1, 2, 4, ...: a CPU that never starts logs a few lines, not 120.
                if resent.is_power_of_two() {
                    warn!(
                        "cpu{index}: start IPI sent again ({resent}): not online after {} ms",
                        u64::from(resent) * CPU_START_RESEND_MS
                    );
                }
            }
        },
    );
    (online, resent)
}

/// The tick frequency: `kestrel.tick_hz=` if the command line gives it,
/// else the package's `[hypervisor] tick_hz`, else 100 Hz.
fn tick_hz(opts: &BootOptions<'_>) -> u32 {
    if opts.tick_hz_given {
        return opts.tick_hz;
    }
    crate::vmm::vmconfig::tick_hz(crate::vmm::vmconfig::package()).unwrap_or(opts.tick_hz)
}

/// The boot CPU's path, entered by the arch with a console, MMU, heap and
/// exception vectors already set up.
pub fn primary_main(board: BoardInfo, platform: &'static dyn Platform) -> ! {
    let platform = clock::register(platform);
    crate::base::klog::init(platform, log::LevelFilter::Info);
    let board = crate::host::board::publish(board);
    let opts = BootOptions::parse(board.cmdline.as_str());
    crate::base::fatal::set_ready(opts.on_exit == OnExit::PowerOff);
    crate::base::conout::set_baud(opts.baud);
    info!(
        "kestrel {} on {} ({}), command line \"{}\"",
        crate::VERSION,
        board.arch.name(),
        board.model,
        board.cmdline
    );
    for word in &opts.unknown {
        warn!("ignoring unknown or malformed boot option '{word}'");
    }
    if let Some(baud) = opts.baud {
        info!(
            "console paced to a {baud} baud line ({} bytes/s)",
            baud / 10
        );
    }
    for w in &board.warnings {
        warn!("{w}");
    }
    if board.cpus_ignored > 0 {
        warn!(
            "firmware lists {} more CPUs than kestrel's limit of {MAX_CPUS}; they stay offline",
            board.cpus_ignored
        );
    }

    let me = platform.cpu_index();
    set_online(me, true);
    clock::set_tick_hz(tick_hz(&opts));
    platform.start_tick(tick_hz(&opts));

    for (index, desc) in board.cpus.iter().enumerate() {
        if index == me {
            continue;
        }
        match platform.start_cpu(index) {
            Ok(()) => match await_cpu(platform, index) {
                (true, 0) => {}
                (true, resent) => info!("cpu{index}: online after {resent} repeated start(s)"),
                (false, resent) => warn!(
                    "cpu{index} (hw id {:#x}) did not come online within {CPU_START_TIMEOUT_MS} ms \
                     (start sent {} time(s)); left offline",
                    desc.hw_id,
                    resent + 1
                ),
            },
            Err(e) => warn!(
                "cpu{index} (hw id {:#x}) could not be started ({e:?}); left offline",
                desc.hw_id
            ),
        }
    }

    let online = || (0..board.cpus.len()).filter(|&i| state(i).is_online());
    let ticking = || {
        online()
            .filter(|&i| state(i).ticks() >= TICKS_REQUIRED)
            .count()
    };
    let cpus_online = online().count();
    if !wait_until(platform, TICK_TIMEOUT_MS, || ticking() == cpus_online) {
        for i in online().filter(|&i| state(i).ticks() < TICKS_REQUIRED) {
            warn!("cpu{i}: timer tick not seen ({} ticks)", state(i).ticks());
        }
    }
    let report = BootReport {
        cpus_online,
        tick_hz: tick_hz(&opts),
        cpus_ticking: ticking(),
    };
    let mut text = alloc::string::String::new();
    // Writing to a String cannot fail.
    let _ = banner::render(&mut text, board, &report);
    crate::base::klog::print(format_args!("{text}"));

    // The VMs packed into the image (`make image CONFIG=file`): each is
    // checked and listed, or refused with the reason; creating them comes next.
    let host = crate::vmm::vmconfig::HostLimits {
        arch: board.arch,
        online_cpus: cpus_online as u32,
        guest_memory: board
            .memory_bytes()
            .saturating_sub(crate::vmm::vmconfig::HYPERVISOR_RESERVE),
    };
    let plan = crate::vmm::vmconfig::report(crate::vmm::vmconfig::package(), host);
    for (name, why) in &plan.refused {
        crate::vmm::operator::note_refused(name, why);
    }
    let specs = plan.specs;

    let ok = cpus_online == board.cpus.len() && report.cpus_ticking == cpus_online;
    if !ok {
        error!(
            "boot incomplete: {cpus_online}/{} CPUs online, {} ticking",
            board.cpus.len(),
            report.cpus_ticking
        );
    }
    let boot_status = if ok {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    };
    let packed = crate::vmm::operator::refused() + specs.len();
    if specs.is_empty() {
        let status = if packed > 0 {
            error!("no VM could be created: every VM was refused (the errors above say why)");
            ExitStatus::Failure
        } else {
            boot_status
        };
        finish(status, opts.on_exit)
    }
    let (mode, scrollback) =
        crate::vmm::vmconfig::console_settings(crate::vmm::vmconfig::package());
    crate::vmm::terminal::configure_console(
        opts.console.unwrap_or(mode),
        opts.scrollback.unwrap_or(scrollback),
    );
    let created = crate::runtime::backend::create_vms(board, specs);
    if created == 0 {
        error!("no VM could be created: every VM was refused (the errors above say why)");
        finish(ExitStatus::Failure, opts.on_exit)
    }
    let refused = crate::vmm::operator::refused();
    if refused > 0 {
        error!(
            "{refused} of {packed} VM(s) refused at boot (the errors above say why): \
             kestrel's final status will be a failure"
        );
    }
    info!("running {created} VM(s) on {cpus_online} CPU(s)");
    // From now on the console's output waits in its buffers for the UART
    // (never a guest's exit for the UART); `finish` flushes it.
    crate::base::conout::set_async(true);
    VMS_GO.store(true, Ordering::Release);
    let vm_status = crate::runtime::backend::run_vms(me);
    info!("kestrel: all VMs have ended (status {})", vm_status.code());
    let rate = crate::base::conout::drain_rate();
    if rate.ns > 0 {
        info!(
            "console drain: {} bytes in {} us with output waiting: {} bytes/s",
            rate.bytes,
            rate.ns / 1000,
            rate.per_second()
        );
    }
    let status = if boot_status == ExitStatus::Success && refused == 0 {
        vm_status
    } else {
        ExitStatus::Failure
    };
    finish(status, opts.on_exit)
}

/// Set by the boot CPU once VMs exist: secondaries leave their idle loop
/// and run vCPUs.
static VMS_GO: AtomicBool = AtomicBool::new(false);

/// A secondary CPU's path, entered by the arch on the CPU's own stack with
/// its MMU and vectors set up.
pub fn secondary_main(index: usize) -> ! {
    let Some(platform) = clock::platform() else {
        // Cannot happen: secondaries are started from primary_main.
        loop {
            core::hint::spin_loop();
        }
    };
    let opts = crate::host::board::get()
        .map(|b| BootOptions::parse(b.cmdline.as_str()))
        .unwrap_or_default();
    platform.start_tick(tick_hz(&opts));
    set_online(index, true);
    info!("cpu{index} online");
    // Idle until the boot CPU has VMs to run (the tick wakes us to look).
    while !VMS_GO.load(Ordering::Acquire) {
        platform.wait_for_interrupt();
    }
    crate::runtime::backend::run_vms(index);
    idle(platform)
}

fn idle(platform: &dyn Platform) -> ! {
    loop {
        platform.wait_for_interrupt();
    }
}

/// Ends kestrel's work: writes what the console's buffers hold (for at
/// most [`crate::base::conout::FLUSH_MAX_NS`], less if the UART stops
/// taking bytes), then powers off (printing the status the tests read)
/// when the command line asked for it, otherwise idles.
pub fn finish(status: ExitStatus, on_exit: OnExit) -> ! {
    let platform = clock::platform().expect("finish before primary_main");
    crate::base::conout::set_async(false);
    match on_exit {
        OnExit::PowerOff => {
            crate::kprintln!(
                "kestrel: work done, powering off (status {})",
                status.code()
            );
            platform.power_off(status)
        }
        OnExit::Stay => {
            info!("kestrel: boot done (status {}); idling", status.code());
            idle(platform)
        }
    }
}

/// A fatal error after the console is up ([`crate::base::fatal`]).
pub fn fatal(args: core::fmt::Arguments) -> ! {
    crate::base::fatal::fatal(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::platform::StartError;
    use std::sync::atomic::{AtomicU32, AtomicU64};

    /// A platform whose counter runs at 1 kHz and advances 1 ms per read;
    /// CPU `index` comes online after `online_after` resends (never if None).
    struct Fake {
        index: usize,
        now: AtomicU64,
        resends: AtomicU32,
        /// Counter value at each resend.
        resent_at: std::sync::Mutex<Vec<u64>>,
        can_resend: bool,
        online_after: Option<u32>,
    }

    impl Fake {
        fn new(index: usize, can_resend: bool, online_after: Option<u32>) -> Self {
            set_online(index, online_after == Some(0));
            Fake {
                index,
                now: AtomicU64::new(0),
                resends: AtomicU32::new(0),
                resent_at: std::sync::Mutex::new(Vec::new()),
                can_resend,
                online_after,
            }
        }
    }

    impl Platform for Fake {
        fn console_write(&self, _: &[u8]) {}
        fn console_try_write(&self, b: &[u8]) -> usize {
            b.len()
        }
        fn cpu_index(&self) -> usize {
            0
        }
        fn start_cpu(&self, _: usize) -> Result<(), StartError> {
            Ok(())
        }
        fn resend_start(&self, index: usize) -> bool {
            assert_eq!(index, self.index);
            if !self.can_resend {
                return false;
            }
            assert!(!state(index).is_online(), "resent to an online CPU");
            let n = self.resends.fetch_add(1, Ordering::Relaxed) + 1;
            let now = self.now.load(Ordering::Relaxed);
            self.resent_at.lock().unwrap().push(now);
            if self.online_after == Some(n) {
                set_online(index, true);
            }
            true
        }
        fn counter(&self) -> u64 {
            self.now.fetch_add(1, Ordering::Relaxed)
        }
        fn counter_hz(&self) -> u64 {
            1000
        }
        fn start_tick(&self, _: u32) {}
        fn wait_for_interrupt(&self) {}
        fn power_off(&self, _: ExitStatus) -> ! {
            unreachable!()
        }
        fn halt(&self) -> ! {
            unreachable!()
        }
    }

    // Each test uses its own CPU index: CPUS is shared by the test threads.

    #[test]
    fn online_at_once_sends_nothing_again() {
        let p = Fake::new(MAX_CPUS - 1, true, Some(0));
        assert_eq!(await_cpu(&p, MAX_CPUS - 1), (true, 0));
        assert_eq!(p.resends.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lost_start_is_resent_until_online() {
        let p = Fake::new(MAX_CPUS - 2, true, Some(3));
        assert_eq!(await_cpu(&p, MAX_CPUS - 2), (true, 3));
        let at = p.resent_at.lock().unwrap().clone();
        assert_eq!(at.len(), 3);
        // Every CPU_START_RESEND_MS of counter time (1 tick = 1 ms here).
        assert!(
            at[0] >= CPU_START_RESEND_MS && at[0] <= CPU_START_RESEND_MS + 2,
            "{at:?}"
        );
        for w in at.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                (CPU_START_RESEND_MS..=CPU_START_RESEND_MS + 2).contains(&gap),
                "{at:?}"
            );
        }
        // Nothing after the CPU came online.
        assert!(p.now.load(Ordering::Relaxed) < 4 * CPU_START_RESEND_MS);
    }

    #[test]
    fn dead_cpu_is_resent_until_the_timeout_then_given_up() {
        let p = Fake::new(MAX_CPUS - 3, true, None);
        let (online, resent) = await_cpu(&p, MAX_CPUS - 3);
        assert!(!online);
        let most = (CPU_START_TIMEOUT_MS / CPU_START_RESEND_MS) as u32;
        assert!(resent + 2 >= most && resent <= most, "{resent} resends");
        assert!(p.now.load(Ordering::Relaxed) >= CPU_START_TIMEOUT_MS);
        assert!(p.now.load(Ordering::Relaxed) <= CPU_START_TIMEOUT_MS + 2);
    }

    #[test]
    fn one_shot_start_is_not_repeated() {
        // A platform that cannot resend (arm64's PSCI CPU_ON): one start, the full wait.
        let p = Fake::new(MAX_CPUS - 4, false, None);
        assert_eq!(await_cpu(&p, MAX_CPUS - 4), (false, 0));
        assert!(p.now.load(Ordering::Relaxed) >= CPU_START_TIMEOUT_MS);
    }
}
