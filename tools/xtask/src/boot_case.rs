//! A boot case of `cargo xtask smoke`: one QEMU boot, of kestrel or of a
//! test guest on bare QEMU, and what its serial log must show ([`Case`]);
//! its boot and its judge, as a test of a suite ([`test`]). smoke.rs has
//! kestrel's own cases, `vmtests_arm64.rs` and `vmtests_la64.rs` the test
//! guests' bare-QEMU ones.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::qemu::{self, Boot, Runner};
use crate::suite::{Test, Verdict};
use crate::Opts;

/// How a case must end.
pub enum Ending {
    /// The image powers QEMU off by itself, and QEMU exits with status 0.
    PowerOff,
    /// The image halts: the last expected line appears, then QEMU is stopped
    /// by the test.
    Halt,
}

/// One QEMU boot and what its serial log must show. `opts.config` and
/// `opts.features` select the image (built once per distinct choice).
pub struct Case {
    pub name: &'static str,
    pub opts: Opts,
    pub ending: Ending,
    /// Lines (substrings) the serial log must contain.
    pub expect: Vec<&'static str>,
    /// Substrings it must not contain.
    pub reject: Vec<&'static str>,
    /// Extra QEMU arguments.
    pub extra: Vec<&'static str>,
    /// Override the machine option (arm64 only).
    pub machine: Option<&'static str>,
    /// Further checks on the log: each returned string is a problem.
    pub check: Option<fn(&str) -> Vec<String>>,
    /// How long the boot may take.
    pub timeout: Duration,
    /// A test guest QEMU boots instead of kestrel (bare-QEMU cases): its build.
    pub guest: Option<fn() -> Result<PathBuf, String>>,
}

/// The default boot time limit.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The checks a test guest skipped (`SKIP ...` lines, `check` finding the
/// check's name after `SKIP `) that are not in `allowed`: on bare QEMU only
/// the kestrel-specific checks may be skipped.
pub fn only_skipped(log: &str, allowed: &[&str], check: fn(&str) -> &str) -> Vec<String> {
    let mut problems = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.trim().strip_prefix("SKIP ") {
            let name = check(rest);
            if !allowed.contains(&name) {
                problems.push(format!("{name} was skipped on bare QEMU: {line}"));
            }
        }
    }
    problems
}

/// Boots the case's image (kestrel built with its options, or its test
/// guest) until it powers off, or (`Halt`) shows every expected line.
fn boot(case: &Case) -> Result<Boot, String> {
    let image = match case.guest {
        Some(build) => build()?,
        None => crate::build_image_with(
            case.opts.arch,
            &case.opts.features,
            case.opts.config.as_deref(),
        )?,
    };
    let mut cmd: Command = qemu::command(&case.opts, &image, true);
    if let Some(m) = case.machine {
        // Replace the "-M" value.
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut fixed = Command::new(cmd.get_program());
        let mut it = args.iter();
        while let Some(a) = it.next() {
            fixed.arg(a);
            if a == "-M" {
                it.next();
                fixed.arg(m);
            }
        }
        cmd = fixed;
    }
    cmd.args(&case.extra);
    let mut runner = Runner::new(cmd, case.timeout);
    if matches!(case.ending, Ending::Halt) {
        for e in &case.expect {
            runner = runner.stop_after(e, 1);
        }
        // Give a wrongly continuing boot a moment to show itself.
        runner = runner.grace(Duration::from_millis(500));
    }
    runner.run()
}

fn judge(case: &Case, out: &Boot) -> Vec<String> {
    let log = out.text();
    let mut problems = Vec::new();
    if out.timed_out {
        problems.push(format!("no ending within {} s", case.timeout.as_secs()));
    }
    for e in &case.expect {
        if !log.contains(e) {
            problems.push(format!("serial log lacks {e:?}"));
        }
    }
    for r in &case.reject {
        if log.contains(r) {
            problems.push(format!("serial log contains {r:?}"));
        }
    }
    if let Some(check) = case.check {
        problems.extend(check(&log));
    }
    if let Ending::PowerOff = case.ending {
        match out.exit {
            Some(s) if s.success() => {}
            Some(s) => problems.push(format!("QEMU exited with {s}")),
            None => {}
        }
    }
    problems
}

/// One smoke case as a test of the suite.
pub fn test(case: Case) -> Test<'static> {
    Test::new(case.name, move || match boot(&case) {
        Ok(out) => Verdict {
            problems: judge(&case, &out),
            log: out.text(),
            ..Verdict::default()
        },
        Err(e) => Verdict::error(e),
    })
}
