//! The one test-suite runner: the command line of a suite (`[--arch A]
//! [--case NAME] [--list]`), each selected test run by name, its PASS/FAIL
//! line, the summary and the exit status. Used by `cargo xtask smoke` and
//! both `cargo xtask vmtest` suites.
//!
//! Output of a suite, on stdout (CI and `make test` read it):
//!
//! ```text
//!     <echoed lines of the test>                  (optional)
//! PASS <name> (<detail>)                         or
//! FAIL <name>
//!     - <problem>
//!     serial log: <file>                          (when saved, pass or fail)
//! ---- serial log ----                            (on a failure, when not saved)
//! <log>
//! ---- end of serial log ----
//! <prefix><P> passed, <F> failed
//! ```
//!
//! and `<progress>: <name> ...` on stderr before each test.

use std::path::PathBuf;
use std::time::Instant;

use crate::Arch;

/// What one test found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Empty: the test passed.
    pub problems: Vec<String>,
    /// In parentheses after `PASS <name>`; the time the test took when `None`.
    pub detail: Option<String>,
    /// Lines printed (indented) before the verdict: what the guests measured.
    pub echo: Vec<String>,
    /// The serial log: printed after a failure unless it was saved.
    pub log: String,
    /// Where the serial log was saved (printed after the verdict).
    pub saved: Option<PathBuf>,
}

impl Verdict {
    /// A test that could not run: `why` is its one problem.
    pub fn error(why: String) -> Verdict {
        Verdict {
            problems: vec![why],
            ..Verdict::default()
        }
    }
}

/// One named test; `run` boots and judges it.
pub struct Test<'a> {
    pub name: String,
    pub run: Box<dyn FnOnce() -> Verdict + 'a>,
}

impl<'a> Test<'a> {
    pub fn new(name: impl Into<String>, run: impl FnOnce() -> Verdict + 'a) -> Test<'a> {
        Test {
            name: name.into(),
            run: Box::new(run),
        }
    }
}

/// A suite's wording.
pub struct Suite {
    /// The command, for errors and the progress lines (`smoke`, `vmtest`).
    pub command: &'static str,
    /// Before the `P passed, F failed` summary (`""` or `"vmtest: "`).
    pub summary_prefix: &'static str,
    /// What failed, in the error: "N <what> failed".
    pub what: &'static str,
    /// Run once before the first selected test (a guest build); its error
    /// ends the suite.
    pub prepare: Option<fn() -> Result<(), String>>,
}

/// The tests a suite's command line selects.
#[derive(Debug, PartialEq)]
pub struct Selection {
    /// `--list`: print the names, run nothing.
    pub list: bool,
    /// `--case NAME`: the tests whose name starts with NAME.
    pub only: Option<String>,
}

impl Selection {
    pub fn matches(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|o| name.starts_with(o))
    }
}

/// Parses `[--arch A] [--case NAME] [--list]`; `--arch`, when given, must
/// be `arch` (the suite's own).
pub fn parse_args(suite: &Suite, args: &[String], arch: Option<Arch>) -> Result<Selection, String> {
    let mut sel = Selection {
        list: false,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--arch" if arch.is_some() => {
                let given = Arch::parse(it.next().ok_or("--arch needs a value")?)?;
                if Some(given) != arch {
                    return Err(format!(
                        "{}: this runner has the {} cases",
                        suite.command,
                        arch.map_or("", Arch::name)
                    ));
                }
            }
            "--case" => sel.only = Some(it.next().ok_or("--case needs a value")?.clone()),
            "--list" => sel.list = true,
            other => return Err(format!("{}: unknown option '{other}'", suite.command)),
        }
    }
    Ok(sel)
}

/// Runs the selected tests (or lists them); Ok when every one passed.
pub fn run(suite: &Suite, sel: &Selection, tests: Vec<Test>) -> Result<(), String> {
    let tests: Vec<Test> = tests.into_iter().filter(|t| sel.matches(&t.name)).collect();
    if sel.list {
        for t in &tests {
            println!("{}", t.name);
        }
        return Ok(());
    }
    if tests.is_empty() {
        return Err(format!("{}: no case matches (see --list)", suite.command));
    }
    if let Some(prepare) = suite.prepare {
        prepare()?;
    }
    let (mut passed, mut failed) = (0u32, 0u32);
    for t in tests {
        eprintln!("{}: {} ...", suite.command, t.name);
        let start = Instant::now();
        let v = (t.run)();
        if report(&t.name, &v, start) {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!("{}{passed} passed, {failed} failed", suite.summary_prefix);
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} {} failed", suite.what))
    }
}

/// Prints one test's verdict; whether it passed.
fn report(name: &str, v: &Verdict, start: Instant) -> bool {
    for l in &v.echo {
        println!("    {}", l.trim());
    }
    let ok = v.problems.is_empty();
    if ok {
        let detail = v
            .detail
            .clone()
            .unwrap_or_else(|| format!("{:.1} s", start.elapsed().as_secs_f64()));
        println!("PASS {name} ({detail})");
    } else {
        println!("FAIL {name}");
        for p in &v.problems {
            println!("    - {p}");
        }
    }
    match &v.saved {
        Some(path) => println!("    serial log: {}", path.display()),
        None if !ok => println!(
            "---- serial log ----\n{}\n---- end of serial log ----",
            v.log
        ),
        None => {}
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE: Suite = Suite {
        command: "vmtest",
        summary_prefix: "",
        what: "test VM(s)",
        prepare: None,
    };

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let la = Some(Arch::LoongArch64);
        let s = parse_args(&SUITE, &args(&["--arch", "la64", "--case", "la64-1"]), la).unwrap();
        assert_eq!(
            s,
            Selection {
                list: false,
                only: Some("la64-1".into())
            }
        );
        assert!(s.matches("la64-1vm: one VM"));
        assert!(!s.matches("la64-share"));
        assert!(parse_args(&SUITE, &args(&["--list"]), la).unwrap().list);
        assert!(parse_args(&SUITE, &args(&["--arch", "aarch64"]), la).is_err());
        assert!(parse_args(&SUITE, &args(&["--arch", "aarch64"]), None).is_err());
        assert!(parse_args(&SUITE, &args(&["--case"]), la).is_err());
        assert!(parse_args(&SUITE, &args(&["--bogus"]), la).is_err());
    }

    #[test]
    fn runs_the_selected_tests_and_counts_failures() {
        let ran = std::cell::RefCell::new(Vec::new());
        let tests = || {
            vec![
                Test::new("a-1", || {
                    ran.borrow_mut().push("a-1");
                    Verdict::default()
                }),
                Test::new("a-2", || {
                    ran.borrow_mut().push("a-2");
                    Verdict::error("broken".into())
                }),
                Test::new("b", || {
                    ran.borrow_mut().push("b");
                    Verdict::default()
                }),
            ]
        };
        let only = |o: &str| Selection {
            list: false,
            only: Some(o.into()),
        };
        assert_eq!(run(&SUITE, &only("b"), tests()), Ok(()));
        assert_eq!(
            run(&SUITE, &only("a"), tests()),
            Err("1 test VM(s) failed".into())
        );
        assert!(run(&SUITE, &only("c"), tests()).is_err());
        let list = Selection {
            list: true,
            only: None,
        };
        assert_eq!(run(&SUITE, &list, tests()), Ok(()));
        assert_eq!(*ran.borrow(), ["b", "a-1", "a-2"]);
    }
}
