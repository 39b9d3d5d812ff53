//! The console case of `cargo xtask smoke`: `cargo xtask run` (what
//! `make run` calls) in a real terminal (a tmux session), driven as a
//! person would: two small Linux VMs (`configs/test/arm64-console.toml`)
//! with busybox shells on their UARTs, in kestrel's raw console mode.
//!
//! It types into VM 0's shell with Backspace and the history, runs an
//! escape-sequence program, checks the screen (no `.[6n`, the edits took
//! effect, the screen was cleared), switches to VM 1 and sees its
//! scrollback replayed, lists the VMs, stops VM 0 and starts it again,
//! restarts VM 1, reads the live statistics, sees VM 0's new boot replayed.
//! Then VM 0 plays the attacker: it sets the title and the clipboard,
//! hides text and prints kestrel's tag, and none of it may reach the
//! terminal (tmux lets programs set its clipboard here, so a write would
//! show as a paste buffer; kestrel's tag blinks, the fake's must not).
//! Then VM 0 is stopped while it has the keyboard: the keyboard stays,
//! what is typed is answered and goes nowhere, and only Ctrl-] 1 moves it.
//! After each notice kestrel holds the VM's output until a key, so the
//! test presses Enter where it waits for a prompt. Last it quits QEMU. A
//! third VM, refused at boot (too much memory), must be in the list, and
//! `cargo xtask run` must end with status 1 naming it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::suite::{Test, Verdict};
use crate::vmtests_linux::INIT_LINE;
use crate::{root, Arch};

const CONFIG: &str = "configs/test/arm64-console.toml";
pub const CASE: &str =
    "linux on kestrel console: make run's terminal (tmux): raw shell with Backspace, history, an escape program; switch and replay; list, stop, start, restart, live statistics; a VM cannot set the title or clipboard or fake kestrel's tag; the keyboard stays with a stopped VM; a refused VM fails make run";

/// A Linux boot under TCG, generous for a loaded machine.
const BOOT: Duration = Duration::from_secs(600);
/// A console answer.
const ANSWER: Duration = Duration::from_secs(60);
/// kestrel's notices of a focus change.
const FOCUS_C0: &str = "kestrel: console input now goes to VM 0 (c0)";
const FOCUS_C1: &str = "kestrel: console input now goes to VM 1 (c1)";

/// A detached tmux session running one command, on a tmux server of its
/// own (`-L`), which it ends when dropped.
struct Tmux {
    name: String,
}

fn tmux(name: &str) -> Command {
    let mut c = Command::new("tmux");
    c.args(["-L", name]);
    c
}

impl Tmux {
    fn start(command: &str) -> Result<Tmux, String> {
        let name = format!("kestrel-console-{}", std::process::id());
        let ok = tmux(&name)
            .args(["new-session", "-d", "-s", &name, "-x", "160", "-y", "48"])
            .arg(command)
            .status()
            .map_err(|e| format!("cannot run tmux: {e} (apt-get install tmux)"))?
            .success();
        if !ok {
            return Err("tmux new-session failed".into());
        }
        // Programs may set tmux's clipboard (a paste buffer): a VM's
        // OSC 52 getting through would show.
        let _ = tmux(&name)
            .args(["set-option", "-s", "set-clipboard", "on"])
            .status();
        Ok(Tmux { name })
    }

    /// Sends tmux key names (`Enter`, `BSpace`, `Up`, `C-]`).
    fn keys(&self, keys: &[&str]) {
        let _ = tmux(&self.name)
            .args(["send-keys", "-t", &self.name])
            .args(keys)
            .status();
    }

    /// Types `text` literally.
    fn type_text(&self, text: &str) {
        let _ = tmux(&self.name)
            .args(["send-keys", "-t", &self.name, "-l", text])
            .status();
    }

    /// Ctrl-] then `keys` (each typed literally).
    fn command(&self, keys: &str) {
        self.keys(&["C-]"]);
        for k in keys.chars() {
            self.type_text(&k.to_string());
        }
    }

    /// The visible screen (`history`: with what scrolled off).
    fn screen(&self, history: bool) -> String {
        let mut c = tmux(&self.name);
        c.args(["capture-pane", "-p", "-t", &self.name]);
        if history {
            c.args(["-S", "-"]);
        }
        c.output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The visible screen with its attributes as escape sequences.
    fn screen_attributes(&self) -> String {
        tmux(&self.name)
            .args(["capture-pane", "-e", "-p", "-t", &self.name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The pane's title (set by OSC 2).
    fn title(&self) -> String {
        tmux(&self.name)
            .args(["display-message", "-p", "-t", &self.name, "#{pane_title}"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_string())
            .unwrap_or_default()
    }

    /// tmux's paste buffers, one line each.
    fn buffers(&self) -> String {
        tmux(&self.name)
            .arg("list-buffers")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Waits until `ok(history)` holds; the history since `from` lines.
    fn wait(
        &self,
        what: &str,
        limit: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let t0 = Instant::now();
        loop {
            let s = self.screen(true);
            if ok(&s) {
                return Ok(s);
            }
            if t0.elapsed() > limit {
                return Err(format!("no {what} within {} s", limit.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = tmux(&self.name).arg("kill-server").status();
    }
}

/// The history after the last line containing `marker` (what came after
/// an action).
fn after<'a>(screen: &'a str, marker: &str) -> &'a str {
    screen.rfind(marker).map_or("", |i| &screen[i..])
}

/// Whether `s` shows the shell prompt of VM `vm` (tmux drops the
/// prompt's trailing blank).
fn has_prompt(s: &str, vm: &str) -> bool {
    let p = format!("{vm}:/#");
    s.lines().any(|l| l.starts_with(&p))
}

/// Whether a line of `s` is exactly `line` (trailing blanks ignored).
fn has_line(s: &str, line: &str) -> bool {
    s.lines().any(|l| l.trim_end() == line)
}

/// In a line of `capture-pane -e` output, whether the text at `at` blinks
/// (the SGR sequences before it, in order, leave blink on).
fn blinks_at(line: &str, at: usize) -> bool {
    let mut blink = false;
    let mut rest = &line[..at];
    while let Some(i) = rest.find("\x1b[") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(|c: char| c.is_ascii_alphabetic()) else {
            break;
        };
        if rest[end..].starts_with('m') {
            for p in rest[..end].split(';') {
                match p {
                    "" | "0" | "25" => blink = false,
                    "5" => blink = true,
                    _ => {}
                }
            }
        }
        rest = &rest[end..];
    }
    blink
}

/// `line` without its escape sequences.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // tmux writes only CSI sequences here.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// For each line of `capture-pane -e` output that reads `text` (which
/// starts with `kestrel:`), whether its `kestrel:` tag blinks.
fn tagged(screen: &str, text: &str) -> Vec<bool> {
    screen
        .lines()
        .filter(|l| plain(l).contains(text))
        .filter_map(|l| l.find("kestrel:").map(|at| blinks_at(l, at)))
        .collect()
}

/// The case as a test of the smoke suite.
pub fn test() -> Test<'static> {
    Test::new(CASE, || {
        let mut log = String::new();
        match run(&mut log) {
            Ok(()) => Verdict::default(),
            Err(e) => Verdict {
                problems: vec![e],
                log,
                ..Verdict::default()
            },
        }
    })
}

fn run(log: &mut String) -> Result<(), String> {
    let config = root().join(CONFIG);
    // Built first, so the session's own build is a no-op.
    crate::build_image_with(Arch::Aarch64, &[], Some(&config))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find xtask itself: {e}"))?;
    let command = format!(
        "cd {} && {} run --smp 2 --mem 512 --config {}; echo RUN-EXIT $?; sleep 600",
        shell_quote(&root()),
        shell_quote(&exe),
        shell_quote(&config)
    );
    let t = Tmux::start(&command)?;
    let result = steps(&t);
    if result.is_err() {
        *log = t.screen(true);
    }
    result
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

fn steps(t: &Tmux) -> Result<(), String> {
    t.wait("hint line", BOOT, |s| {
        s.contains("kestrel: the keyboard goes to VM 0 (c0) of 2. Ctrl-] then 0-1 or n switches VM")
    })?;
    t.wait("c0 prompt", BOOT, |s| has_prompt(s, "c0"))?;

    // Line editing: a typo erased with Backspace.
    t.type_text("echo hellx");
    t.keys(&["BSpace"]);
    t.type_text("o world");
    t.keys(&["Enter"]);
    t.wait("echo of the edited line", ANSWER, |s| {
        has_line(s, "c0:/# echo hello world") && has_line(s, "hello world")
    })?;
    // History: Up recalls the line, which is edited in place.
    t.keys(&["Up"]);
    for _ in 0..5 {
        t.keys(&["BSpace"]);
    }
    t.type_text("there");
    t.keys(&["Enter"]);
    t.wait("the recalled and edited line", ANSWER, |s| {
        has_line(s, "c0:/# echo hello there") && has_line(s, "hello there")
    })?;
    // A program that clears the screen with escape sequences.
    t.type_text("printf '\\033[2J\\033[HCLEARED\\n'");
    t.keys(&["Enter"]);
    let screen = {
        let t0 = Instant::now();
        loop {
            let s = t.screen(false);
            if s.lines().next().map(str::trim_end) == Some("CLEARED") {
                break s;
            }
            if t0.elapsed() > ANSWER {
                return Err(format!("the screen was not cleared:\n{s}"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    if screen.contains("hello") {
        return Err("the cleared screen still shows the earlier lines".into());
    }
    let all = t.screen(true);
    if all.contains("[6n") || all.contains("..[J") {
        return Err("the terminal shows escape sequences as text ([6n or ..[J)".into());
    }

    // Switch to c1: its boot, printed while c0 had the keyboard, is
    // replayed, then kestrel says so; its output waits for a key.
    t.command("1");
    t.wait("c1's replayed scrollback", ANSWER, |s| {
        // Between c0's cleared screen and the notice.
        s.rsplit_once(FOCUS_C1)
            .is_some_and(|(before, _)| after(before, "CLEARED").contains(INIT_LINE))
    })?;
    t.keys(&["Enter"]);
    t.wait("c1 prompt", BOOT, |s| {
        s.contains("LINUX-INIT: c1: busybox shell") && has_prompt(after(s, FOCUS_C1), "c1")
    })?;
    t.type_text("echo on-c1");
    t.keys(&["Enter"]);
    t.wait("c1's answer", ANSWER, |s| has_line(s, "on-c1"))?;

    // The list, then stop c0 and see it stopped.
    t.command("l");
    t.wait("the VM list", ANSWER, |s| {
        let a = after(s, "kestrel: VMs (* has the keyboard");
        a.lines()
            .any(|l| l.starts_with("   0  c0 ") && (l.contains("running") || l.contains("blocked")))
            && a.lines().any(|l| l.starts_with("  *1  c1 "))
            && a.lines().any(|l| {
                l.starts_with("   -  big ") && l.contains("refused") && l.contains("memory")
            })
    })?;
    t.command("d0");
    t.wait("c0's stop", ANSWER, |s| {
        s.contains("kestrel: stopping VM 0 (c0)")
            && s.contains("VM \"c0\" stopped from the console")
    })?;
    t.command("0");
    t.wait("the refusal to focus a stopped VM", ANSWER, |s| {
        s.contains("kestrel: VM 0 (c0) is stopped; Ctrl-] c 0 starts it")
    })?;
    t.command("l");
    t.wait("c0 listed as stopped", ANSWER, |s| {
        after(s, "kestrel: VMs (* has the keyboard")
            .lines()
            .any(|l| l.starts_with("   0  c0 ") && l.contains("stopped"))
    })?;
    // Start c0 again and restart c1 (the focused VM, by Enter).
    t.command("c0");
    t.command("r");
    t.keys(&["Enter"]);
    t.wait("c0's start and c1's restart", ANSWER, |s| {
        s.contains("VM \"c0\" started again from its packed images")
            && s.contains("VM \"c1\" restarted (1)")
    })?;
    // Live statistics while both boot: the view refreshes every second;
    // a VM's exits show once it runs its guest again (right after the
    // restart its vCPU 0 may still be copying its images in, without
    // entering: no exits in that interval).
    t.command("t");
    let busy = |view: &str| {
        view.lines().any(|l| {
            l.trim_start()
                .strip_prefix("exits/s")
                .and_then(|r| r.trim_start().split(':').next())
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > 0)
        })
    };
    let stats = t.wait("live statistics with figures", ANSWER, |s| {
        let a = after(s, "kestrel: live statistics, per second");
        a.contains("VM 0 c0:") && a.contains("VM 1 c1:") && a.contains("first-touch zeroings")
    })?;
    if !busy(after(&stats, "kestrel: live statistics, per second")) {
        let later = t.wait("a VM's exits per second while booting", ANSWER, |s| {
            busy(after(s, "kestrel: live statistics, per second"))
        });
        if later.is_err() {
            let view = after(&stats, "kestrel: live statistics, per second");
            return Err(format!("no VM has exits per second while booting:\n{view}"));
        }
    }
    t.type_text("q");
    t.wait("the view's end", ANSWER, |s| {
        s.contains("kestrel: live statistics closed")
    })?;
    // c1 boots again in front of us (after a key); c0's new boot is
    // replayed.
    t.keys(&["Enter"]);
    t.wait("c1's shell after the restart", BOOT, |s| {
        has_prompt(after(s, "kestrel: ---- VM 1 (c1) boots again ----"), "c1")
    })?;
    t.command("0");
    t.wait("the switch to c0", ANSWER, |s| s.contains(FOCUS_C0))?;
    t.keys(&["Enter"]);
    t.wait("c0's new boot, replayed", BOOT, |s| {
        let a = after(s, "kestrel: ---- VM 0 (c0) boots again ----");
        a.contains("LINUX-INIT: c0: busybox shell") && has_prompt(a, "c0")
    })?;
    t.keys(&["Enter"]);
    t.type_text("echo back-on-c0");
    t.keys(&["Enter"]);
    t.wait("c0's answer", ANSWER, |s| has_line(s, "back-on-c0"))?;

    // c0 turns attacker: a title, the clipboard set and read, hidden
    // text, kestrel's tag in its own rendition. Only the text arrives.
    t.type_text(
        "printf '\\033]2;pwned\\007\\033]52;c;cHduZWQ=\\007\\033]52;c;?\\007\\033[8mHID\\033[0mDEN \\033[0;5;7mkestrel:\\033[0m fake\\n'",
    );
    t.keys(&["Enter"]);
    t.wait("the attacker's line", ANSWER, |s| {
        has_line(s, "HIDDEN kestrel: fake")
    })?;
    let attrs = t.screen_attributes();
    if tagged(&attrs, "kestrel: console input now goes to VM 0 (c0)") != [true] {
        return Err(format!("kestrel's tag does not blink:\n{attrs}"));
    }
    if tagged(&attrs, "kestrel: fake").contains(&true) || attrs.contains("\x1b[8m") {
        return Err(format!("the VM made text blink or hid it:\n{attrs}"));
    }
    let title = t.title();
    if title != "kestrel: keyboard to VM 0 (c0)" {
        return Err(format!("the title is {title:?}, not kestrel's"));
    }
    let buffers = t.buffers();
    if !buffers.is_empty() {
        return Err(format!("the VM set the clipboard: {buffers}"));
    }

    // Stop c0 while it has the keyboard: the keyboard stays with it.
    t.command("d");
    t.keys(&["Enter"]);
    t.wait("c0's stop, the keyboard kept", ANSWER, |s| {
        s.contains("kestrel: VM 0 (c0) stopped from the console. The keyboard stays with it")
    })?;
    t.type_text("x");
    t.wait("the answer to a key for a stopped VM", ANSWER, |s| {
        s.contains("kestrel: VM 0 (c0) is stopped: what you type goes nowhere")
    })?;
    t.command("l");
    t.wait("c0 listed with the keyboard, stopped", ANSWER, |s| {
        after(s, "kestrel: VMs (* has the keyboard")
            .lines()
            .any(|l| l.starts_with("  *0  c0 ") && l.contains("stopped"))
    })?;
    let title = t.title();
    if title != "kestrel: keyboard to VM 0 (c0), stopped" {
        return Err(format!("the title is {title:?} with c0 stopped"));
    }
    // Only the operator moves it.
    t.command("1");
    t.wait("the switch to c1", ANSWER, |s| {
        after(s, "what you type goes nowhere").contains(FOCUS_C1)
    })?;
    t.keys(&["Enter"]);
    t.type_text("echo on-c1-again");
    t.keys(&["Enter"]);
    t.wait("c1's answer", ANSWER, |s| has_line(s, "on-c1-again"))?;
    // Quit QEMU: `make run` fails, naming the VM refused at boot.
    t.keys(&["C-a"]);
    t.type_text("x");
    t.wait("the end of `cargo xtask run`", ANSWER, |s| {
        s.contains("RUN-EXIT ")
    })?;
    let s = t.screen(true);
    let end = after(&s, "xtask: error: kestrel refused VMs at boot");
    if !(end.contains("VM refused: vm[2]") && end.contains("RUN-EXIT 1")) {
        return Err("`cargo xtask run` did not exit with 1 naming the refused VM".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blink_is_read_from_tmux_attributes() {
        // As `tmux capture-pane -e` writes them (tmux 3.3).
        let screen = "\x1b[5;7mkestrel:\x1b[0m\x1b[39m\x1b[49m real\n\
                      c0:/# printf kestrel: fake\n\
                      HIDDEN \x1b[7mkestrel:\x1b[0m fake\n\
                      \x1b[1m\x1b[5mkestrel:\x1b[25m kestrel:\n";
        assert_eq!(tagged(screen, "kestrel: real"), [true]);
        assert_eq!(tagged(screen, "kestrel:"), [true, false, false, true]);
        assert!(!blinks_at(screen.lines().nth(3).unwrap(), 27));
        assert_eq!(tagged(screen, "kestrel: fake"), [false, false]);
        assert_eq!(
            plain(screen.lines().nth(2).unwrap()),
            "HIDDEN kestrel: fake"
        );
    }
}
