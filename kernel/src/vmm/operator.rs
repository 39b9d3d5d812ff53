//! The console's commands that need the VMs ([`crate::vmm::console::Command`]):
//! the VM list, the live statistics view (refreshed each second, like
//! `xl top`), and stop / restart / start, which the run loop carries out
//! ([`Hypervisor::request`]). Everything here runs on the boot CPU's console
//! service ([`super::poll_console`]) and does a bounded amount of work: one
//! row per VM, at most one refresh per second.

use crate::base::lock::Mutex;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use crate::base::conout;
use crate::dev::virtio::set::VirtioCounters;
use crate::vcpu::stats::{Counter, Snapshot, HOST};
use crate::vm::{Hypervisor, Vm};
use crate::vmm::console::{Command, ConsoleMux, Op};
use crate::vmm::devices::DeviceHost;

/// Memory of each created VM, by slot (the VM does not keep its spec).
static MEMORY: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// When each created VM was created (its counters count from there).
static CREATED_AT: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// The VMs refused at boot: name and reason.
static REFUSED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
/// The live view: which VMs, and the last sample the rates start from.
static TOP: Mutex<Option<Top>> = Mutex::new(None);
/// The last sample of each VM's counters (rates in the list).
static LAST: Mutex<Vec<Sample>> = Mutex::new(Vec::new());

/// The next created VM has `bytes` of RAM and was created at `at`.
pub fn note_created(bytes: u64, at: u64) {
    MEMORY.lock().push(bytes);
    CREATED_AT.lock().push(at);
}

/// A VM was refused at boot (the package check or creation).
pub fn note_refused(name: &str, why: &str) {
    REFUSED.lock().push((String::from(name), String::from(why)));
}

/// How many VMs were refused at boot.
pub fn refused() -> usize {
    REFUSED.lock().len()
}

/// One VM's counters at one time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Platform counter when taken.
    pub at: u64,
    pub stats: Snapshot,
    pub virtio: VirtioCounters,
    /// Its console output: bytes queued for the UART, and dropped.
    pub console: conout::Counters,
}

struct Top {
    vm: Option<usize>,
    last: Vec<Sample>,
    /// The host counters' last sample ([`HOST`]).
    host: Sample,
}

/// A VM as the list and the view show it.
pub struct Row<'a> {
    pub slot: usize,
    pub name: &'a str,
    pub state: &'static str,
    pub vcpus: usize,
    pub memory: u64,
    /// Platform counter ticks since it was (re)started.
    pub up: u64,
    pub focused: bool,
}

fn sample<B: DeviceHost>(vm: &Vm<B>, now: u64) -> Sample {
    let stats = vm.counters();
    Sample {
        at: now,
        stats,
        virtio: vm.virtio.counters(),
        console: conout::outbox().lock().counters(usize::from(vm.slot)),
    }
}

/// The host counters now ([`HOST`]: what belongs to no one VM).
fn host_sample(now: u64) -> Sample {
    Sample {
        at: now,
        stats: HOST.snapshot(),
        virtio: VirtioCounters::default(),
        console: conout::Counters::default(),
    }
}

/// Per second: `delta` over `ticks` of a `hz` counter (`None`: no time).
pub fn per_second(delta: u64, ticks: u64, hz: u64) -> Option<u64> {
    (ticks > 0 && hz > 0).then(|| {
        u64::try_from(u128::from(delta) * u128::from(hz) / u128::from(ticks)).unwrap_or(u64::MAX)
    })
}

/// `ticks` of a `hz` counter as h:mm:ss.
pub fn duration(ticks: u64, hz: u64) -> String {
    if hz == 0 {
        return String::from("?");
    }
    let s = ticks / hz;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The VM list: one row per VM, then the refused ones. `rate(i)` is VM
/// i's exits per second, if known.
pub fn render_list(
    rows: &[Row],
    refused: &[(String, String)],
    hz: u64,
    rate: impl Fn(usize) -> Option<u64>,
) -> String {
    let mut s = String::from("kestrel: VMs (* has the keyboard; Ctrl-] N gives it to VM N)\n");
    let _ = writeln!(
        s,
        "   #  {:<16} {:<10} {:>5} {:>9} {:>9} {:>10}",
        "name", "state", "vCPUs", "memory", "exits/s", "uptime"
    );
    for r in rows {
        let mark = if r.focused { '*' } else { ' ' };
        let (rate, up) = if r.state == "stopped" {
            (String::from("-"), String::from("-"))
        } else {
            (
                rate(r.slot).map_or(String::from("?"), |n| format!("{n}")),
                duration(r.up, hz),
            )
        };
        let _ = writeln!(
            s,
            "  {mark}{:<2} {:<16} {:<10} {:>5} {:>5} MiB {rate:>9} {up:>10}",
            r.slot,
            r.name,
            r.state,
            r.vcpus,
            r.memory >> 20,
        );
    }
    for (name, why) in refused {
        let _ = writeln!(s, "   -  {name:<16} refused    {why}");
    }
    s
}

/// The live view of `rows` (one block each), rates from `then` to `now`,
/// after the host's line (`host`: its samples then and now).
pub fn render_top(rows: &[(Row, Sample, Sample)], host: (Sample, Sample), hz: u64) -> String {
    let mut s = String::from(
        "kestrel: live statistics, per second over the last interval (any key closes)\n",
    );
    let (then, now) = host;
    let dt = now.at.saturating_sub(then.at);
    let rate = |c: Counter| {
        per_second(now.stats.get(c).saturating_sub(then.stats.get(c)), dt, hz)
            .map_or(String::from("?"), |n| format!("{n}"))
    };
    // Events of no one VM: a VM's own counters never show them.
    let _ = writeln!(
        s,
        "host: VMID rollovers {}; TLB flushes {}; FP saves for another VM {}",
        rate(Counter::VmidRollovers),
        rate(Counter::TlbFlushes),
        rate(Counter::FpSaves),
    );
    for (r, then, now) in rows {
        let dt = now.at.saturating_sub(then.at);
        let rate = |c: Counter| {
            per_second(now.stats.get(c).saturating_sub(then.stats.get(c)), dt, hz)
                .map_or(String::from("?"), |n| format!("{n}"))
        };
        let vrate = |f: fn(&VirtioCounters) -> u64| {
            per_second(f(&now.virtio).saturating_sub(f(&then.virtio)), dt, hz)
                .map_or(String::from("?"), |n| format!("{n}"))
        };
        let exits = per_second(now.stats.exits().saturating_sub(then.stats.exits()), dt, hz)
            .map_or(String::from("?"), |n| format!("{n}"));
        let _ = writeln!(
            s,
            "VM {} {}: {}, {} vCPUs, {} MiB, up {}",
            r.slot,
            r.name,
            r.state,
            r.vcpus,
            r.memory >> 20,
            duration(r.up, hz)
        );
        let _ = write!(s, "  exits/s {exits:>7}:");
        for c in &Counter::ALL[..=Counter::ExitOther.index()] {
            let _ = write!(s, " {} {}", c.name(), rate(*c));
        }
        s.push('\n');
        let _ = writeln!(
            s,
            "  FP saves {} restores {} traps {}; IPIs sent {} delivered {} coalesced {}; first-touch zeroings {}",
            rate(Counter::FpSaves),
            rate(Counter::FpRestores),
            rate(Counter::FpTraps),
            rate(Counter::IpiSent),
            rate(Counter::IpiDelivered),
            rate(Counter::IpiCoalesced),
            rate(Counter::LazyZero),
        );
        let _ = writeln!(
            s,
            "  virtio: disk requests {} bytes {}; net frames out {} in {} dropped {}; console bytes {}",
            vrate(|v| v.disk_requests),
            vrate(|v| v.disk_bytes),
            vrate(|v| v.net_tx),
            vrate(|v| v.net_rx),
            vrate(|v| v.net_dropped),
            vrate(|v| v.console_bytes),
        );
        let conrate = |f: fn(&conout::Counters) -> u64| {
            per_second(f(&now.console).saturating_sub(f(&then.console)), dt, hz)
                .map_or(String::from("?"), |n| format!("{n}"))
        };
        let _ = writeln!(
            s,
            "  console: bytes out {}, dropped {} ({} dropped in all: the console is slower than its output)",
            conrate(|c| c.queued),
            conrate(|c| c.dropped),
            now.console.dropped,
        );
    }
    s
}

fn row<'a, B: DeviceHost>(
    hv: &Hypervisor<B>,
    vm: &'a Vm<B>,
    now: u64,
    focus: usize,
    memory: &[u64],
) -> Row<'a> {
    let slot = usize::from(vm.slot);
    Row {
        slot,
        name: &vm.name,
        state: hv.vm_state(vm).name(),
        vcpus: vm.vcpus.len(),
        memory: memory.get(slot).copied().unwrap_or(0),
        up: now.saturating_sub(vm.started_at()),
        focused: slot == focus,
    }
}

/// Writes `text` as a message (on its own line), under the console lock.
fn say(mux: &Mutex<ConsoleMux>, text: &str) {
    let mut m = mux.lock();
    let out = m.say(text);
    crate::vmm::console::write(&out);
}

/// Carries out a console command.
pub fn command<B: DeviceHost>(hv: &Hypervisor<B>, mux: &Mutex<ConsoleMux>, c: Command) {
    let hz = crate::base::clock::counter_hz();
    let now = hv.backend.now();
    let focus = mux.lock().focus();
    match c {
        Command::List => {
            let memory = MEMORY.lock().clone();
            let vms = hv.created();
            let rows: Vec<Row> = vms
                .iter()
                .map(|vm| row(hv, vm, now, focus, &memory))
                .collect();
            let samples: Vec<Sample> = vms.iter().map(|vm| sample(vm, now)).collect();
            let created = CREATED_AT.lock().clone();
            let mut last = LAST.lock();
            let text = render_list(&rows, &REFUSED.lock(), hz, |i| {
                let s = samples.get(i)?;
                let started = vms[i].started_at();
                // Since the last look in this run of the VM, or since its
                // creation; a VM (re)started since has no figure yet.
                match last.get(i).filter(|l| l.at < s.at && l.at >= started) {
                    Some(l) => per_second(
                        s.stats.exits().saturating_sub(l.stats.exits()),
                        s.at - l.at,
                        hz,
                    ),
                    None if created.get(i) == Some(&started) => {
                        per_second(s.stats.exits(), s.at.saturating_sub(started), hz)
                    }
                    None => None,
                }
            });
            *last = samples;
            drop(last);
            say(mux, &text);
        }
        Command::Top(vm) => {
            let last = hv.created().iter().map(|v| sample(v, now)).collect();
            *TOP.lock() = Some(Top {
                vm,
                last,
                host: host_sample(now),
            });
            let what = vm.map_or(String::from("every VM"), |i| format!("VM {i}"));
            say(
                mux,
                &format!("kestrel: live statistics of {what}: the first figures in a second (any key closes)"),
            );
        }
        Command::Vm { op, vm } => {
            let name = hv
                .created()
                .get(vm)
                .map_or(String::new(), |v| v.name.clone());
            let text = match hv.request(vm, op) {
                Ok(()) => format!(
                    "kestrel: {} VM {vm} ({name})",
                    match op {
                        Op::Stop => "stopping",
                        Op::Restart => "restarting",
                        Op::Start => "starting",
                    }
                ),
                Err(e) => format!(
                    "kestrel: cannot {} VM {vm} ({name}): {e}",
                    match op {
                        Op::Stop => "stop",
                        Op::Restart => "restart",
                        Op::Start => "start",
                    }
                ),
            };
            say(mux, &text);
        }
    }
}

/// The live view's refresh: at most once per second, while it is open.
pub fn refresh<B: DeviceHost>(hv: &Hypervisor<B>, mux: &Mutex<ConsoleMux>) {
    let mut top = TOP.lock();
    if !mux.lock().viewing() {
        *top = None;
        return;
    }
    let Some(t) = top.as_mut() else { return };
    let hz = crate::base::clock::counter_hz();
    let now = hv.backend.now();
    let Some(first) = t.last.first() else { return };
    if hz == 0 || now.saturating_sub(first.at) < hz {
        return;
    }
    let focus = mux.lock().focus();
    let memory = MEMORY.lock().clone();
    let vms = hv.created();
    let samples: Vec<Sample> = vms.iter().map(|vm| sample(vm, now)).collect();
    let rows: Vec<(Row, Sample, Sample)> = vms
        .iter()
        .zip(t.last.iter().zip(&samples))
        .filter(|(vm, _)| t.vm.is_none_or(|i| i == usize::from(vm.slot)))
        .map(|(vm, (then, now_s))| (row(hv, vm, now, focus, &memory), *then, *now_s))
        .collect();
    let host = host_sample(now);
    let text = render_top(&rows, (t.host, host), hz);
    t.last = samples;
    t.host = host;
    drop(top);
    // Like `xl top`: the same screen, redrawn (raw mode).
    let mut m = mux.lock();
    let out = m.view_frame(&text);
    crate::vmm::console::write(&out);
    drop(m);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(slot: usize, name: &'static str, state: &'static str) -> Row<'static> {
        Row {
            slot,
            name,
            state,
            vcpus: 2,
            memory: 256 << 20,
            up: 3_725 * 100,
            focused: slot == 0,
        }
    }

    #[test]
    fn rates_and_durations() {
        assert_eq!(per_second(50, 200, 100), Some(25));
        assert_eq!(per_second(50, 0, 100), None);
        assert_eq!(per_second(50, 10, 0), None);
        assert_eq!(per_second(u64::MAX, 1, u64::MAX), Some(u64::MAX));
        assert_eq!(duration(3_725 * 100, 100), "1:02:05");
        assert_eq!(duration(5, 0), "?");
    }

    #[test]
    fn the_list_names_every_vm_with_its_state_and_the_refused_ones() {
        let rows = [row(0, "linux0", "running"), row(1, "linux1", "stopped")];
        let refused = [(String::from("big"), String::from("memory: too much"))];
        let s = render_list(&rows, &refused, 100, |i| (i == 0).then_some(42));
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[2].starts_with("  *0  linux0"), "{s}");
        for word in ["running", "2", "256 MiB", "42", "1:02:05"] {
            assert!(lines[2].contains(word), "{word} in {}", lines[2]);
        }
        assert!(lines[3].contains("linux1") && lines[3].contains("stopped"));
        assert!(!lines[3].contains("1:02:05"), "a stopped VM has no uptime");
        assert!(
            lines[4].contains("big")
                && lines[4].contains("refused")
                && lines[4].contains("too much")
        );
    }

    #[test]
    fn the_view_shows_rates_per_second_of_every_kind() {
        let then = Sample {
            at: 1000,
            ..Default::default()
        };
        let mut now = then;
        now.at = 1200; // two seconds at 100 Hz
        now.stats.0[Counter::ExitMmio.index()] = 40;
        now.stats.0[Counter::ExitIdle.index()] = 60;
        now.stats.0[Counter::FpSaves.index()] = 8;
        now.stats.0[Counter::LazyZero.index()] = 2;
        now.stats.0[Counter::IpiCoalesced.index()] = 4;
        now.virtio.net_rx = 10;
        now.virtio.disk_bytes = 4096;
        now.console.queued = 600;
        now.console.dropped = 300;
        let mut host = now;
        host.stats = Snapshot::default();
        host.stats.0[Counter::VmidRollovers.index()] = 6;
        host.stats.0[Counter::FpSaves.index()] = 2;
        let s = render_top(
            &[(row(0, "linux0", "blocked"), then, now)],
            (then, host),
            100,
        );
        for want in [
            "host: VMID rollovers 3; TLB flushes 0; FP saves for another VM 1",
            "VM 0 linux0: blocked",
            "exits/s      50:",
            "mmio 20",
            "idle 30",
            "FP saves 4",
            "first-touch zeroings 1",
            "coalesced 2",
            "in 5",
            "disk requests 0 bytes 2048",
            "console: bytes out 300, dropped 150 (300 dropped in all",
        ] {
            assert!(s.contains(want), "{want} missing:\n{s}");
        }
        // Counters that went back (a restart reset a device) are no panic.
        let s = render_top(&[(row(0, "x", "running"), now, then)], (then, then), 100);
        assert!(s.contains("exits/s       ?"), "{s}");
    }
}
