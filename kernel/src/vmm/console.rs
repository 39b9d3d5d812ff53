//! The console multiplexer: many VMs, one physical UART.
//!
//! Two modes ([`Mode`]):
//!
//! - **Raw** (the default): the VM with the keyboard (the *focus*) owns the
//!   terminal. Its bytes go out through its terminal filter
//!   ([`crate::vmm::termfilter`]): text, CR, Backspace, UTF-8, colours, cursor
//!   movement and the modes of full-screen programs pass, so shells, `vi`
//!   and `top` work; what could reach beyond the screen (clipboard, title,
//!   queries answered as typed input, mouse reporting, terminal strings)
//!   and concealed or blinking text do not. Every VM's output also goes
//!   into its own scrollback ring (its size set by `kestrel.scrollback=`);
//!   the other VMs' output goes only there, and a VM's ring is replayed,
//!   through a fresh filter, when it gets the focus.
//! - **Log** (`kestrel.console=log`, what the tests use): each VM's bytes
//!   are collected into lines and written with a tag naming the VM
//!   (`[linux0] ...`), control bytes made visible as `.`, so interleaved
//!   guests stay readable and tests can tell who printed what. A partial
//!   line is flushed when it grows past [`LINE_MAX`] or when the VM ends.
//!   Once someone types, the focused VM's bytes go out as they come (a
//!   prompt and the echo of typed keys must show before the newline); when
//!   another VM's line interrupts its partial line, that line is ended and
//!   printed again, tagged, at the focused VM's next byte.
//!
//! Callers must queue what [`ConsoleMux::output`] returns before releasing
//! the multiplexer's lock, so the terminal sees the order decided here
//! (`crate::vmm::terminal`: each VM's output into its own buffer, kestrel's
//! into its queue, drained to the UART at its pace by `crate::base::conout`).
//!
//! Input goes to the focused VM. The escape key **Ctrl-]** (0x1d) followed
//! by a command key ([`KEYS`], also printed by `?`) switches the focus or
//! asks kestrel something; keys naming a VM operation (stop, restart, start)
//! then take the VM's number, or Enter for the focused VM. The live
//! statistics view lasts until the next key. Every key gets an answer; a key
//! kestrel does not know says so. (Ctrl-A is QEMU's own escape under
//! `-nographic`, so kestrel uses another.)
//!
//! # kestrel's notices in raw mode
//!
//! A VM owning the terminal must not be able to pass for kestrel (a fake
//! "the keyboard moved" and a fake login prompt would collect what the
//! operator types). So:
//!
//! - **The keyboard moves only by the operator's keys** (Ctrl-] and a VM
//!   number, `n` or Tab). When the focused VM stops, it keeps the
//!   keyboard; what is typed to it goes nowhere (the first key is answered).
//!   A message saying the keyboard moved by itself is a fake.
//! - Before kestrel says anything, and before another VM's output, it
//!   writes the terminal reset ([`crate::vmm::termfilter::RESET`], after undoing
//!   what the VM turned on: alternate screen, scroll region, cursor shape),
//!   which a VM cannot send through its filter.
//! - Each notice's `kestrel:` tag is written in blinking reverse video
//!   ([`MARK_ON`]): the filter removes blink from every VM's output, so no
//!   VM can write that tag. The terminal's title names the VM with the
//!   keyboard, and only kestrel can set a title.
//! - **A notice is the last thing on the screen until the operator types**:
//!   from a notice (and from Ctrl-]) the focused VM's output is held, kept
//!   in its ring and not written, until a key goes to the VM; then what was
//!   held is written, the VM's modes set again, and the key delivered. The
//!   operator reads kestrel's words with nothing drawn over them. After a
//!   focus change the replayed scrollback comes first and the notice after
//!   it. (The one exception is the line printed at boot, before any VM
//!   output.)
//!
//! `docs/console.md` describes this for the operator.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

use crate::base::conout::{Outbox, Source};
use crate::vmm::termfilter::TermFilter;

/// The escape byte: Ctrl-].
pub const ESCAPE: u8 = 0x1d;
/// Longest line kept before it is flushed anyway (log mode).
pub const LINE_MAX: usize = 256;
/// The scrollback ring's default size per VM, in bytes.
pub const SCROLLBACK_DEFAULT: usize = 16 * 1024;
pub use crate::host::cmdline::SCROLLBACK_MAX;

/// The tag that starts kestrel's notices.
pub const TAG: &str = "kestrel:";
/// Raw mode: the rendition of [`TAG`] in kestrel's notices, blinking
/// reverse video. The terminal filter removes blink (SGR 5 and 6) from
/// every VM's output, so only kestrel writes this.
pub const MARK_ON: &str = "\x1b[0;5;7m";
/// The rendition after the tag.
pub const MARK_OFF: &str = "\x1b[0m";
/// Most boot marks kept per VM's scrollback.
const BOOT_MARKS_MAX: usize = 16;

/// The command keys after Ctrl-], as `?` lists them.
pub const KEYS: &[(&str, &str)] = &[
    ("0-9", "give the keyboard to VM N"),
    ("n / Tab", "give the keyboard to the next running VM"),
    ("l", "list the VMs: state, vCPUs, memory, exit rate, uptime"),
    (
        "t",
        "live statistics of every VM, refreshed each second (any key ends)",
    ),
    ("i", "live statistics of the focused VM (any key ends)"),
    (
        "d N",
        "stop VM N (as a power-off); Enter for the focused VM",
    ),
    ("r N", "restart VM N (as a reset)"),
    ("c N", "start a stopped VM N again from its packed image"),
    ("?", "this list"),
    ("Ctrl-]", "send one Ctrl-] to the focused VM"),
];

pub use crate::host::cmdline::ConsoleMode as Mode;

/// Something to write on the terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// Text: each `\n` becomes CRLF on the way out.
    Text(String),
    /// Bytes written exactly as they are.
    Raw(Vec<u8>),
    /// One byte, as it is.
    Byte(u8),
}

pub use crate::vm::Op;

/// A command for the VM manager ([`crate::vmm`]), which knows the VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// List the VMs.
    List,
    /// Start the live statistics view: of VM `Some(n)`, or of every VM.
    Top(Option<usize>),
    /// Operate on VM `vm`.
    Vm { op: Op, vm: usize },
}

struct VmConsole {
    name: String,
    /// Log mode: the line being collected (from the VM's UART).
    line: Vec<u8>,
    /// Log mode: the line being collected from its virtio console, apart,
    /// so the two devices' lines never mix (a guest writing to both at
    /// once).
    line_virtio: Vec<u8>,
    /// Typed bytes the VM's UART had no room for yet, oldest first.
    held: VecDeque<u8>,
    /// Raw mode: the last bytes the VM wrote.
    ring: VecDeque<u8>,
    /// How many bytes the VM wrote before the ring's first (the ring
    /// dropped them: its start may be inside a line).
    ring_start: u64,
    /// Where in its output (counted as `ring_start`) the VM booted again.
    boots: VecDeque<u64>,
    /// The VM runs (not stopped).
    alive: bool,
}

/// Most typed bytes held for one VM whose UART is full (a paste); beyond
/// it input is dropped and counted.
pub const HELD_MAX: usize = 4096;

/// Where input bytes go, as decided by [`ConsoleMux::input`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputAction {
    /// Give this byte to VM `vm`.
    Deliver { vm: usize, byte: u8 },
    /// Write `out` (the VM's output held since kestrel's last notice),
    /// then give this byte to VM `vm`.
    Resume { out: Out, vm: usize, byte: u8 },
    /// Write this for the user (focus change, help, an answer).
    Say(Out),
    /// The VM manager must carry this out (and answer).
    Command(Command),
    /// Nothing (escape pending, or a key for a stopped VM).
    None,
}

/// What the keys typed after the escape are building.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    /// Plain input for the focused VM.
    Normal,
    /// Ctrl-] was typed: a command key comes next.
    Escape,
    /// A VM operation waits for its VM number.
    Target(Op),
    /// The live statistics view is on the screen.
    View,
}

/// The multiplexer. Output is returned for the caller to write to the
/// physical UART, so this stays free of hardware.
pub struct ConsoleMux {
    vms: Vec<VmConsole>,
    mode: Mode,
    scrollback: usize,
    focus: usize,
    keys: Keys,
    /// Log mode: the VM whose partial line stands on the terminal
    /// (streamed, no newline yet).
    open: Option<usize>,
    /// Raw mode: the terminal's cursor is at the start of a line (as far
    /// as the focused VM's bytes tell).
    at_line_start: bool,
    dropped: u64,
    /// Someone has typed: in log mode the focused VM's output streams.
    interactive: bool,
    /// Raw mode: the focused VM's terminal filter (its state continues
    /// from its replay).
    filter: TermFilter,
    /// Raw mode: the focused VM's output is held from this point of it
    /// (kestrel spoke, or Ctrl-] was typed) until a key goes to it.
    held_from: Option<u64>,
    /// Raw mode: kestrel's reset was written since the focused VM's last
    /// byte: the modes its filter remembers are not on the terminal.
    clean: bool,
    /// The focused VM is stopped and a key for it was answered.
    told_stopped: bool,
    /// Raw mode: what the filter made of one byte (reused).
    scratch: Vec<u8>,
}

impl ConsoleMux {
    /// A multiplexer in raw mode.
    pub fn new() -> Self {
        Self::with_mode(Mode::Raw, SCROLLBACK_DEFAULT)
    }

    /// A multiplexer in `mode` keeping `scrollback` bytes per VM (raw mode).
    pub fn with_mode(mode: Mode, scrollback: usize) -> Self {
        ConsoleMux {
            vms: Vec::new(),
            mode,
            scrollback: scrollback.min(SCROLLBACK_MAX),
            focus: 0,
            keys: Keys::Normal,
            open: None,
            at_line_start: true,
            dropped: 0,
            interactive: false,
            filter: TermFilter::new(),
            held_from: None,
            clean: false,
            told_stopped: false,
            scratch: Vec::new(),
        }
    }

    /// Sets the mode and ring size (before VMs are added).
    pub fn configure(&mut self, mode: Mode, scrollback: usize) {
        self.mode = mode;
        self.scrollback = scrollback.min(SCROLLBACK_MAX);
    }

    /// The output mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Adds a VM; returns its console number.
    pub fn add_vm(&mut self, name: &str) -> usize {
        self.vms.push(VmConsole {
            name: name.into(),
            line: Vec::new(),
            line_virtio: Vec::new(),
            held: VecDeque::new(),
            ring: VecDeque::new(),
            ring_start: 0,
            boots: VecDeque::new(),
            alive: true,
        });
        self.vms.len() - 1
    }

    /// How many VMs have a console.
    pub fn len(&self) -> usize {
        self.vms.len()
    }

    /// Whether no VM has a console.
    pub fn is_empty(&self) -> bool {
        self.vms.is_empty()
    }

    /// The VM with the input focus.
    pub fn focus(&self) -> usize {
        self.focus
    }

    /// Whether the live statistics view is on the screen.
    pub fn viewing(&self) -> bool {
        self.keys == Keys::View
    }

    /// Raw mode: whether the focused VM's output is held until the
    /// operator types.
    pub fn holding(&self) -> bool {
        self.held_from.is_some()
    }

    /// The line printed once the VMs run: who has the keyboard, how to
    /// switch, how to quit. Raw mode: with the terminal title set and a
    /// second line showing what kestrel's tag looks like.
    pub fn hint(&self) -> Option<String> {
        let c = self.vms.get(self.focus)?;
        let text = alloc::format!(
            "the keyboard goes to VM {} ({}) of {}. Ctrl-] then 0-{} or n switches VM, \
             Ctrl-] ? lists the commands; under QEMU -nographic Ctrl-A X quits.\n",
            self.focus,
            c.name,
            self.vms.len(),
            self.vms.len().saturating_sub(1).min(9),
        );
        if self.mode == Mode::Log {
            return Some(alloc::format!("{TAG} {text}"));
        }
        let mut out = Vec::new();
        self.title(&mut out);
        out.extend_from_slice(crate::vmm::termfilter::RESET);
        for line in [
            text.as_str(),
            "kestrel's own messages start with this blinking tag, which no VM can print; \
             the keyboard moves only when you switch it.\n",
        ] {
            out.extend_from_slice(MARK_ON.as_bytes());
            out.extend_from_slice(TAG.as_bytes());
            out.extend_from_slice(MARK_OFF.as_bytes());
            out.push(b' ');
            out.extend_from_slice(line.as_bytes());
        }
        Some(String::from_utf8_lossy(&out).into_owned())
    }

    /// Keeps `byte` for VM `vm` whose UART is full (or already has bytes
    /// waiting, to keep their order). Returns false when it had to be dropped.
    pub fn hold(&mut self, vm: usize, byte: u8) -> bool {
        match self.vms.get_mut(vm) {
            Some(c) if c.held.len() < HELD_MAX => {
                c.held.push_back(byte);
                true
            }
            _ => {
                self.dropped += 1;
                false
            }
        }
    }

    /// Whether VM `vm` has typed bytes waiting.
    pub fn has_held(&self, vm: usize) -> bool {
        self.vms.get(vm).is_some_and(|c| !c.held.is_empty())
    }

    /// The oldest byte waiting for VM `vm`.
    pub fn next_held(&mut self, vm: usize) -> Option<u8> {
        self.vms.get_mut(vm)?.held.pop_front()
    }

    /// Typed bytes dropped because a VM's hold queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// VM `vm` wrote `byte`. Returns what to write to the terminal, if
    /// anything: raw mode, for the focused VM (unless its output is held),
    /// what its filter lets through; log mode, a complete tagged line, or
    /// (for the focused VM) the byte itself.
    pub fn output(&mut self, vm: usize, byte: u8) -> Option<Out> {
        self.output_from(vm, false, byte)
    }

    /// [`ConsoleMux::output`] of a byte from VM `vm`'s virtio console
    /// (`virtio`) or its UART: in log mode each device's lines are
    /// collected apart.
    pub fn output_from(&mut self, vm: usize, virtio: bool, byte: u8) -> Option<Out> {
        if vm >= self.vms.len() {
            return None;
        }
        match self.mode {
            Mode::Raw => self.output_raw(vm, byte),
            Mode::Log if virtio && !(vm == self.focus && self.interactive) => {
                self.output_log_virtio(vm, byte).map(Out::Text)
            }
            Mode::Log => self.output_log(vm, byte).map(Out::Text),
        }
    }

    /// Log mode, a byte of a virtio console: its own line buffer.
    fn output_log_virtio(&mut self, vm: usize, byte: u8) -> Option<String> {
        if byte == b'\r' {
            return None;
        }
        let c = &mut self.vms[vm];
        if byte != b'\n' {
            c.line_virtio.push(byte);
            if c.line_virtio.len() < LINE_MAX {
                return None;
            }
        }
        core::mem::swap(&mut c.line, &mut c.line_virtio);
        let line = Self::take_line(c);
        core::mem::swap(&mut c.line, &mut c.line_virtio);
        Some(match self.open.take() {
            Some(_) => String::from("\n") + &line,
            None => line,
        })
    }

    fn output_raw(&mut self, vm: usize, byte: u8) -> Option<Out> {
        let limit = self.scrollback;
        let c = &mut self.vms[vm];
        if limit > 0 {
            if c.ring.len() >= limit {
                c.ring.pop_front();
                c.ring_start += 1;
            }
            c.ring.push_back(byte);
        } else {
            c.ring_start += 1;
        }
        while c.boots.front().is_some_and(|&m| m < c.ring_start) {
            c.boots.pop_front();
        }
        if vm != self.focus || self.keys == Keys::View || self.held_from.is_some() {
            return None;
        }
        self.scratch.clear();
        if self.clean {
            self.filter.write_restore(&mut self.scratch);
            self.clean = false;
        }
        let before = self.scratch.len();
        self.filter.push(byte, &mut self.scratch);
        if self.scratch.len() > before {
            self.at_line_start = self.scratch.last() == Some(&b'\n');
        }
        match self.scratch.as_slice() {
            [] => None,
            [b] => Some(Out::Byte(*b)),
            bytes => Some(Out::Raw(bytes.to_vec())),
        }
    }

    fn output_log(&mut self, vm: usize, byte: u8) -> Option<String> {
        if byte == b'\r' {
            return None;
        }
        if vm == self.focus && self.interactive {
            return Some(self.stream(vm, byte));
        }
        let c = &mut self.vms[vm];
        let line = match byte {
            b'\n' => Self::take_line(c),
            _ => {
                c.line.push(byte);
                if c.line.len() < LINE_MAX {
                    return None;
                }
                Self::take_line(c)
            }
        };
        // A streamed partial line of the focused VM is ended first.
        Some(match self.open.take() {
            Some(_) => String::from("\n") + &line,
            None => line,
        })
    }

    /// Log mode: the focused VM's byte, written at once.
    fn stream(&mut self, vm: usize, byte: u8) -> String {
        let mut out = String::new();
        if self.open != Some(vm) {
            if self.open.take().is_some() {
                out.push('\n');
            }
            // (Re)print the tag and what of the line was already written.
            let c = &self.vms[vm];
            out.push('[');
            out.push_str(&c.name);
            out.push_str("] ");
            out.extend(String::from_utf8_lossy(&c.line).chars().map(printable));
            self.open = Some(vm);
        }
        let c = &mut self.vms[vm];
        if byte == b'\n' {
            c.line.clear();
            self.open = None;
            out.push('\n');
        } else {
            if c.line.len() >= LINE_MAX {
                // Wrap a very long line, as buffered VMs do.
                c.line.clear();
                out.push_str("\n[");
                out.push_str(&c.name);
                out.push_str("] ");
            }
            c.line.push(byte);
            out.push(printable(byte as char));
        }
        out
    }

    /// Flushes VM `vm`'s partial line (log mode, when it ends).
    pub fn flush(&mut self, vm: usize) -> Option<String> {
        if self.mode == Mode::Raw {
            return None;
        }
        if self.open == Some(vm) {
            self.open = None;
            self.vms[vm].line.clear();
            return Some(String::from("\n"));
        }
        let c = self.vms.get_mut(vm)?;
        (!c.line.is_empty()).then(|| Self::take_line(c))
    }

    fn take_line(c: &mut VmConsole) -> String {
        let text = String::from_utf8_lossy(&c.line).into_owned();
        c.line.clear();
        let mut s = String::with_capacity(text.len() + c.name.len() + 4);
        s.push('[');
        s.push_str(&c.name);
        s.push_str("] ");
        s.extend(text.chars().map(printable));
        s.push('\n');
        s
    }

    /// A message for the user, on a line of its own. Raw mode: a notice
    /// (see the module's documentation): the focused VM's held output, the
    /// reset, the title, `text` with its tag marked; then the focused VM's
    /// output is held until the operator types for it.
    pub fn say(&mut self, text: &str) -> Out {
        match self.mode {
            Mode::Log => {
                let mut s = String::new();
                if self.open.take().is_some() {
                    s.push('\n');
                }
                s.push_str(text);
                if !s.ends_with('\n') {
                    s.push('\n');
                }
                Out::Text(s)
            }
            Mode::Raw => Out::Raw(self.notice(text)),
        }
    }

    /// Raw mode: kestrel speaks ([`ConsoleMux::say`]).
    fn notice(&mut self, text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        self.flush_held(&mut out);
        self.reset(&mut out);
        self.title(&mut out);
        if !self.at_line_start {
            out.extend_from_slice(b"\r\n");
        }
        put_marked(text, &mut out);
        self.at_line_start = true;
        self.hold_output();
        out
    }

    /// Raw mode: the focused VM's output is held from now until a key
    /// goes to it (unless it already is).
    fn hold_output(&mut self) {
        if self.mode == Mode::Raw && self.held_from.is_none() && self.focus < self.vms.len() {
            self.held_from = Some(self.ring_end(self.focus));
        }
    }

    /// How many bytes VM `vm` has written (the offset past its ring's end).
    fn ring_end(&self, vm: usize) -> u64 {
        self.vms
            .get(vm)
            .map_or(0, |c| c.ring_start + c.ring.len() as u64)
    }

    /// Writes what the focused VM's output held (not while the live view
    /// is on: closing it replays everything).
    fn flush_held(&mut self, out: &mut Vec<u8>) {
        if self.keys == Keys::View {
            return;
        }
        if let Some(from) = self.held_from.take() {
            if from < self.ring_end(self.focus) {
                self.emit_ring(from, false, out);
            }
        }
    }

    /// The terminal reset: the focused VM's modes undone if they are on
    /// the terminal, then [`crate::vmm::termfilter::RESET`].
    fn reset(&mut self, out: &mut Vec<u8>) {
        self.filter.write_reset(!self.clean, out);
        self.clean = true;
    }

    /// Sets the terminal's title to who has the keyboard (raw mode; the
    /// filter lets no VM set a title).
    fn title(&self, out: &mut Vec<u8>) {
        let Some(c) = self.vms.get(self.focus) else {
            return;
        };
        let text = alloc::format!(
            "kestrel: keyboard to VM {} ({}){}",
            self.focus,
            c.name,
            if c.alive { "" } else { ", stopped" }
        );
        out.extend_from_slice(b"\x1b]2;");
        out.extend(
            text.bytes()
                .map(|b| if (0x20..0x7f).contains(&b) { b } else { b'?' }),
        );
        out.extend_from_slice(b"\x1b\\");
    }

    /// Writes the focused VM's output from offset `from` (of all it wrote)
    /// into `out` through its filter, kestrel's boot marks in their places
    /// (one at `from` itself only if `mark_at_from`), after setting the
    /// VM's modes again if a reset took them. What the ring no longer has
    /// is skipped, to the next line.
    fn emit_ring(&mut self, from: u64, mark_at_from: bool, out: &mut Vec<u8>) {
        if self.clean {
            self.filter.write_restore(out);
            self.clean = false;
        }
        let vm = self.focus;
        let ConsoleMux {
            vms,
            filter,
            at_line_start,
            ..
        } = self;
        let Some(c) = vms.get(vm) else {
            return;
        };
        let start = c.ring_start;
        let mut skipping = from < start;
        if skipping {
            filter.abort();
        }
        let mut marks = c
            .boots
            .iter()
            .copied()
            .filter(|&m| m > from || (mark_at_from && m == from))
            .peekable();
        let first = usize::try_from(from.saturating_sub(start)).unwrap_or(usize::MAX);
        for (i, &b) in c.ring.iter().enumerate().skip(first) {
            let at = start + i as u64;
            while marks.next_if(|&m| m <= at).is_some() {
                boot_mark(filter, vm, &c.name, at_line_start, out);
                skipping = false;
            }
            if skipping {
                skipping = b != b'\n';
                continue;
            }
            let before = out.len();
            filter.push(b, out);
            if out.len() > before {
                *at_line_start = out.last() == Some(&b'\n');
            }
        }
        for _ in marks {
            boot_mark(filter, vm, &c.name, at_line_start, out);
        }
    }

    /// Raw mode: the focused VM's scrollback replayed through a fresh
    /// filter, then `text` as a notice.
    fn replay_and_notice(&mut self, text: &str) -> Out {
        if self.mode == Mode::Log {
            return self.say(text);
        }
        let mut out = Vec::new();
        self.reset(&mut out);
        self.held_from = None;
        self.filter = TermFilter::new();
        self.clean = false;
        if !self.at_line_start {
            out.extend_from_slice(b"\r\n");
            self.at_line_start = true;
        }
        self.emit_ring(0, true, &mut out);
        out.extend(self.notice(text));
        Out::Raw(out)
    }

    /// Raw mode, before kestrel's log lines about VM `vm` if it has the
    /// keyboard: its held output and the reset, so the lines show on a
    /// terminal in its default state; the VM's output stays held.
    pub fn quiet(&mut self, vm: usize) -> Option<Out> {
        if self.mode != Mode::Raw || vm != self.focus || vm >= self.vms.len() {
            return None;
        }
        let mut out = Vec::new();
        self.flush_held(&mut out);
        self.reset(&mut out);
        if !self.at_line_start {
            out.extend_from_slice(b"\r\n");
            self.at_line_start = true;
        }
        self.hold_output();
        Some(Out::Raw(out))
    }

    /// A frame of the live statistics view: raw mode, on a cleared screen
    /// with its tag marked (the focused VM's output is held meanwhile).
    pub fn view_frame(&mut self, text: &str) -> Out {
        match self.mode {
            Mode::Log => Out::Text(String::from(text)),
            Mode::Raw => {
                let mut out = Vec::from(&b"\x1b[H\x1b[2J"[..]);
                put_marked(text, &mut out);
                self.at_line_start = true;
                Out::Raw(out)
            }
        }
    }

    /// VM `vm` stopped (`why`). If it has the keyboard, it keeps it (the
    /// keyboard moves only by the operator's keys) and this says so.
    /// `stays_up`: kestrel keeps running with no VM (a VM stopped from the
    /// console may be started again). Returns the message to write.
    pub fn vm_stopped(&mut self, vm: usize, why: &str, stays_up: bool) -> Option<Out> {
        let name = self.vms.get(vm)?.name.clone();
        self.vms[vm].alive = false;
        if self.focus != vm {
            return None;
        }
        self.told_stopped = false;
        let text = if self.next_alive(vm).is_some() {
            alloc::format!(
                "{TAG} VM {vm} ({name}) {why}. The keyboard stays with it: Ctrl-] c {vm} \
                 starts it again, Ctrl-] N gives the keyboard to VM N"
            )
        } else if stays_up {
            alloc::format!(
                "{TAG} VM {vm} ({name}) {why}; no VM runs. The keyboard stays with it: \
                 Ctrl-] c N starts VM N"
            )
        } else {
            alloc::format!("{TAG} VM {vm} ({name}) {why}")
        };
        Some(self.say(&text))
    }

    /// VM `vm` boots again (restarted, or started after it stopped): raw
    /// mode marks it in its scrollback, and on the screen if it has the
    /// keyboard, so what follows is told apart from the previous run.
    pub fn vm_rebooted(&mut self, vm: usize) -> Option<Out> {
        if self.mode != Mode::Raw || vm >= self.vms.len() {
            return None;
        }
        let shown = vm == self.focus && self.keys != Keys::View;
        let out = shown.then(|| {
            let text = boot_text(vm, &self.vms[vm].name);
            self.notice(&text)
        });
        if vm == self.focus {
            // A new run: the old one's modes went with the reset (or go
            // with the replay's).
            self.filter = TermFilter::new();
            self.clean = false;
        }
        let end = self.ring_end(vm);
        let c = &mut self.vms[vm];
        if c.boots.back() != Some(&end) {
            if c.boots.len() >= BOOT_MARKS_MAX {
                c.boots.pop_front();
            }
            c.boots.push_back(end);
        }
        out.map(Out::Raw)
    }

    /// VM `vm` runs again (started or restarted). If it has the keyboard,
    /// raw mode updates the terminal's title.
    pub fn vm_started(&mut self, vm: usize) -> Option<Out> {
        self.vms.get_mut(vm)?.alive = true;
        if vm != self.focus {
            return None;
        }
        self.told_stopped = false;
        (self.mode == Mode::Raw).then(|| {
            let mut out = Vec::new();
            self.title(&mut out);
            Out::Raw(out)
        })
    }

    /// Whether VM `vm` runs (as far as the console was told).
    pub fn is_alive(&self, vm: usize) -> bool {
        self.vms.get(vm).is_some_and(|c| c.alive)
    }

    /// The first running VM after `from`, wrapping (not `from` itself).
    fn next_alive(&self, from: usize) -> Option<usize> {
        let n = self.vms.len();
        (1..n).map(|k| (from + k) % n).find(|&i| self.vms[i].alive)
    }

    /// A byte typed on the physical console.
    pub fn input(&mut self, byte: u8) -> InputAction {
        if self.vms.is_empty() {
            return InputAction::None;
        }
        self.interactive = true;
        match self.keys {
            Keys::Normal if byte == ESCAPE => {
                self.keys = Keys::Escape;
                // Nothing the VM writes comes between the escape and
                // kestrel's answer.
                self.hold_output();
                InputAction::None
            }
            Keys::Normal => self.key_for_focus(byte),
            Keys::Escape => {
                self.keys = Keys::Normal;
                self.escape_key(byte)
            }
            Keys::Target(op) => {
                self.keys = Keys::Normal;
                self.target_key(op, byte)
            }
            Keys::View => {
                // Any key ends the view; it is not passed on.
                self.keys = Keys::Normal;
                InputAction::Say(self.replay_and_notice("kestrel: live statistics closed"))
            }
        }
    }

    /// A typed byte for the focused VM: delivered (after its held output),
    /// or, if it is stopped, answered once and dropped.
    fn key_for_focus(&mut self, byte: u8) -> InputAction {
        let vm = self.focus;
        if !self.vms[vm].alive {
            if self.told_stopped {
                return InputAction::None;
            }
            self.told_stopped = true;
            let text = alloc::format!(
                "{TAG} VM {vm} ({}) is stopped: what you type goes nowhere. Ctrl-] c {vm} \
                 starts it again, Ctrl-] N gives the keyboard to VM N",
                self.vms[vm].name
            );
            return InputAction::Say(self.say(&text));
        }
        if let Some(from) = self.held_from.take() {
            let mut out = Vec::new();
            self.emit_ring(from, false, &mut out);
            if !out.is_empty() {
                return InputAction::Resume {
                    out: Out::Raw(out),
                    vm,
                    byte,
                };
            }
        }
        InputAction::Deliver { vm, byte }
    }

    /// What the key after the escape does.
    fn escape_key(&mut self, byte: u8) -> InputAction {
        let text = match byte {
            ESCAPE => return self.key_for_focus(ESCAPE),
            b'0'..=b'9' => {
                let n = (byte - b'0') as usize;
                return self.focus_on(n);
            }
            b'n' | b'\t' => match self.next_alive(self.focus) {
                Some(n) => return self.focus_on(n),
                None => String::from("kestrel: no other VM runs"),
            },
            b'?' | b'h' => {
                let mut s = String::from("kestrel: Ctrl-] then:\n");
                for (key, what) in KEYS {
                    s.push_str(&alloc::format!("  {key:<8} {what}\n"));
                }
                s.push_str(&self.status());
                s
            }
            b'l' => return InputAction::Command(Command::List),
            b't' => {
                self.keys = Keys::View;
                return InputAction::Command(Command::Top(None));
            }
            b'i' => {
                self.keys = Keys::View;
                return InputAction::Command(Command::Top(Some(self.focus)));
            }
            b'd' | b'r' | b'c' => {
                let op = match byte {
                    b'd' => Op::Stop,
                    b'r' => Op::Restart,
                    _ => Op::Start,
                };
                self.keys = Keys::Target(op);
                alloc::format!(
                    "kestrel: {} which VM? 0-{}, Enter for VM {} ({}), any other key cancels",
                    op.verb(),
                    self.vms.len().min(10) - 1,
                    self.focus,
                    self.vms[self.focus].name
                )
            }
            other => alloc::format!(
                "kestrel: Ctrl-] {} is no command; Ctrl-] ? lists them",
                key_name(other)
            ),
        };
        InputAction::Say(self.say(&text))
    }

    /// Who has the keyboard, and whether that VM is stopped.
    fn status(&self) -> String {
        let c = &self.vms[self.focus];
        alloc::format!(
            "{TAG} the keyboard is with VM {} ({}){}; only Ctrl-] and a VM's number, n or Tab \
             move it\n",
            self.focus,
            c.name,
            if c.alive { "" } else { ", which is stopped" }
        )
    }

    /// The VM number (or Enter) after an operation key.
    fn target_key(&mut self, op: Op, byte: u8) -> InputAction {
        let vm = match byte {
            b'\r' | b'\n' => self.focus,
            b'0'..=b'9' => (byte - b'0') as usize,
            _ => return InputAction::Say(self.say("kestrel: cancelled")),
        };
        if vm >= self.vms.len() {
            let text = alloc::format!("kestrel: no VM {vm}; {} VMs", self.vms.len());
            return InputAction::Say(self.say(&text));
        }
        InputAction::Command(Command::Vm { op, vm })
    }

    /// Gives the keyboard to VM `n` if it exists and runs.
    fn focus_on(&mut self, n: usize) -> InputAction {
        let text = match self.vms.get(n) {
            None => alloc::format!("kestrel: no VM {n}; {} VMs", self.vms.len()),
            Some(c) if !c.alive => alloc::format!(
                "kestrel: VM {n} ({}) is stopped; Ctrl-] c {n} starts it",
                c.name
            ),
            Some(_) => {
                self.focus = n;
                self.told_stopped = false;
                let text = self.focus_message();
                return InputAction::Say(self.replay_and_notice(&text));
            }
        };
        InputAction::Say(self.say(&text))
    }

    fn focus_message(&self) -> String {
        let mut s = alloc::format!(
            "kestrel: console input now goes to VM {} ({})",
            self.focus,
            self.vms[self.focus].name
        );
        if self.mode == Mode::Raw {
            s.push_str(". Above: its recent output; what it writes next shows when you type");
        }
        s
    }
}

/// The line that marks a new boot of VM `vm` in its scrollback.
fn boot_text(vm: usize, name: &str) -> String {
    alloc::format!("{TAG} ---- VM {vm} ({name}) boots again ----")
}

/// A boot mark in a replay: the reset (the old run's modes undone), the
/// marked line, and a fresh filter for the new run.
fn boot_mark(
    filter: &mut TermFilter,
    vm: usize,
    name: &str,
    at_line_start: &mut bool,
    out: &mut Vec<u8>,
) {
    filter.write_reset(true, out);
    if !*at_line_start {
        out.extend_from_slice(b"\r\n");
    }
    put_marked(&boot_text(vm, name), out);
    *at_line_start = true;
    *filter = TermFilter::new();
}

/// `text` as kestrel's notice lines: each ended by CRLF, a leading
/// [`TAG`] written between [`MARK_ON`] and [`MARK_OFF`].
fn put_marked(text: &str, out: &mut Vec<u8>) {
    for line in text.lines() {
        match line.strip_prefix(TAG) {
            Some(rest) => {
                out.extend_from_slice(MARK_ON.as_bytes());
                out.extend_from_slice(TAG.as_bytes());
                out.extend_from_slice(MARK_OFF.as_bytes());
                out.extend_from_slice(rest.as_bytes());
            }
            None => out.extend_from_slice(line.as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A key as the user would name it.
fn key_name(b: u8) -> String {
    match b {
        0x20..=0x7e => alloc::format!("'{}'", b as char),
        0..=0x1f => alloc::format!("Ctrl-{}", (b + b'@') as char),
        _ => alloc::format!("byte {b:#04x}"),
    }
}
pub use crate::dev::vdev::uart::RxPort;

/// Moves typed input into the VMs' UARTs: first the bytes held for a UART
/// that was full, in order, then every byte `read` yields from the physical
/// UART (escapes act at once; a byte for a full UART is held). `uart_of(i)`
/// is the UART of console `i`; `received(i, uart)` runs, under that UART's
/// lock, after bytes went in (the backend updates the interrupt line);
/// `command` gets the commands the VM manager must carry out. Messages (and
/// a VM's output held until this key) are queued as they come, under the
/// multiplexer's lock (the caller drains them). At most [`INPUT_PER_PUMP`] typed bytes are taken
/// per call (the rest wait in the UART for the next tick).
/// Lock order: a UART, then the multiplexer.
pub fn pump_input<'a, U: RxPort + ?Sized + 'a>(
    mux: &crate::base::lock::Mutex<ConsoleMux>,
    uart_of: impl Fn(usize) -> Option<&'a crate::base::lock::Mutex<U>>,
    mut read: impl FnMut() -> Option<u8>,
    mut received: impl FnMut(usize, &U),
    mut command: impl FnMut(Command),
) {
    let consoles = mux.lock().vms.len();
    for i in 0..consoles {
        let Some(uart) = uart_of(i) else { continue };
        let mut u = uart.lock();
        let mut moved = false;
        while u.can_receive() {
            let Some(byte) = mux.lock().next_held(i) else {
                break;
            };
            moved |= u.receive(byte);
        }
        if moved {
            received(i, &u);
        }
    }
    for _ in 0..INPUT_PER_PUMP {
        let Some(b) = read() else { break };
        let action = {
            let mut m = mux.lock();
            let action = m.input(b);
            if let InputAction::Say(out) | InputAction::Resume { out, .. } = &action {
                // Before the VM's next byte can be written.
                write(out);
            }
            action
        };
        let (i, byte) = match action {
            InputAction::Deliver { vm, byte } | InputAction::Resume { vm, byte, .. } => (vm, byte),
            InputAction::Command(c) => {
                command(c);
                continue;
            }
            InputAction::Say(_) | InputAction::None => continue,
        };
        let Some(uart) = uart_of(i) else { continue };
        let mut u = uart.lock();
        let mut m = mux.lock();
        if u.can_receive() && !m.has_held(i) {
            drop(m);
            u.receive(byte);
            received(i, &u);
        } else {
            // A paste faster than the guest reads: keep it.
            m.hold(i, byte);
        }
    }
}

/// Most typed bytes one [`pump_input`] takes (the console's service stays
/// bounded per tick).
pub const INPUT_PER_PUMP: usize = 256;

/// Queues `out`, kestrel's (a message, a replay, a VM's held output), for
/// the physical console: ahead of every VM's waiting output, drained at
/// the UART's pace (`crate::vmm::terminal::drain`, which callers run once
/// they released the multiplexer's lock).
pub fn write(out: &Out) {
    let mut o = crate::base::conout::outbox().lock();
    queue(&mut o, Source::Kestrel, out);
}

/// Puts `out` in `src`'s buffer in `o`, as the terminal takes it (text
/// with CRLF line ends). Returns its length.
pub fn queue(o: &mut Outbox, src: Source, out: &Out) -> usize {
    let mut text = Vec::new();
    let bytes: &[u8] = match out {
        Out::Text(t) => {
            // Serial terminals want CRLF.
            text.reserve(t.len() + 8);
            for &b in t.as_bytes() {
                if b == b'\n' {
                    text.push(b'\r');
                }
                text.push(b);
            }
            &text
        }
        Out::Raw(b) => b,
        Out::Byte(b) => core::slice::from_ref(b),
    };
    match src {
        Source::Vm(vm) => o.push_vm(vm, bytes),
        Source::Kestrel => o.push_notice(bytes),
    }
    bytes.len()
}

/// Control characters other than tab would garble the shared terminal.
fn printable(ch: char) -> char {
    if ch.is_control() && ch != '\t' {
        '.'
    } else {
        ch
    }
}

impl Default for ConsoleMux {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mux_in(mode: Mode) -> ConsoleMux {
        let mut m = ConsoleMux::with_mode(mode, 64);
        m.add_vm("alpha");
        m.add_vm("beta");
        m
    }

    fn mux() -> ConsoleMux {
        mux_in(Mode::Log)
    }

    /// What an output or message puts on the terminal, as a string.
    fn shown(o: Out) -> String {
        match o {
            Out::Text(s) => s,
            Out::Raw(b) => String::from_utf8_lossy(&b).into_owned(),
            Out::Byte(b) => String::from_utf8_lossy(&[b]).into_owned(),
        }
    }

    fn write(m: &mut ConsoleMux, vm: usize, s: &str) -> Vec<String> {
        s.bytes()
            .filter_map(|b| m.output(vm, b))
            .map(shown)
            .collect()
    }

    fn said(a: InputAction) -> String {
        match a {
            InputAction::Say(o) => shown(o),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// `s` as the operator reads it: escape sequences, the title and SI
    /// left out.
    fn plain(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\x1b' => match chars.next() {
                    Some('[') => {
                        for c in chars.by_ref() {
                            if ('@'..='~').contains(&c) {
                                break;
                            }
                        }
                    }
                    Some(']') => {
                        while let Some(c) = chars.next() {
                            if c == '\x1b' && chars.next_if_eq(&'\\').is_some() {
                                break;
                            }
                        }
                    }
                    Some('(' | ')') => {
                        chars.next();
                    }
                    _ => {}
                },
                '\x0f' => {}
                c => out.push(c),
            }
        }
        out
    }

    const RESET: &str = match core::str::from_utf8(crate::vmm::termfilter::RESET) {
        Ok(s) => s,
        Err(_) => panic!(),
    };

    /// What a focus change replayed: between its first reset and the
    /// notice's.
    fn replayed(s: &str) -> &str {
        let (_, rest) = s.split_once(RESET).expect("a reset first");
        rest.rsplit_once(RESET)
            .expect("a reset before the notice")
            .0
    }

    /// The tag as only kestrel writes it.
    fn mark() -> String {
        alloc::format!("{MARK_ON}{TAG}{MARK_OFF}")
    }

    /// Everything VM `vm` gets written, as bytes.
    fn raw(m: &mut ConsoleMux, vm: usize, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in bytes {
            match m.output(vm, b) {
                Some(Out::Byte(b)) => out.push(b),
                Some(Out::Raw(r)) => out.extend(r),
                Some(Out::Text(t)) => panic!("raw output as text: {t:?}"),
                None => {}
            }
        }
        out
    }

    /// A guest writing to its UART and its virtio console at once (the
    /// serial line's bytes still in flight when hvc0's start): each
    /// device's line comes out whole.
    #[test]
    fn a_vms_uart_and_virtio_console_lines_do_not_mix() {
        let mut m = mux();
        let mut out = Vec::new();
        for (virtio, s) in [(false, "eth0 "), (true, "console on hvc0"), (false, "up\n")] {
            out.extend(
                s.bytes()
                    .filter_map(|b| m.output_from(0, virtio, b))
                    .map(shown),
            );
        }
        out.extend(m.output_from(0, true, b'\n').map(shown));
        assert_eq!(out, ["[alpha] eth0 up\n", "[alpha] console on hvc0\n"]);
    }

    #[test]
    fn interleaved_output_comes_out_as_tagged_lines() {
        let mut m = mux();
        // beta has no focus: its output waits for whole lines.
        let mut out = write(&mut m, 1, "oth");
        assert!(out.is_empty());
        out.extend(write(&mut m, 1, "er\r\n"));
        assert_eq!(out, ["[beta] other\n"]);
        let mut m = mux();
        m.input(ESCAPE);
        m.input(b'1');
        let mut out = write(&mut m, 0, "hel");
        out.extend(write(&mut m, 0, "lo\n"));
        assert_eq!(out.concat(), "[alpha] hello\n");
    }

    #[test]
    fn without_typing_every_vm_prints_whole_lines() {
        let mut m = mux();
        assert!(write(&mut m, 0, "$ ").is_empty());
        assert_eq!(write(&mut m, 0, "ok\n"), ["[alpha] $ ok\n"]);
    }

    #[test]
    fn the_focused_vm_streams_and_is_reprinted_after_an_interruption() {
        let mut m = mux();
        // A keystroke makes the console interactive.
        assert_eq!(m.input(b'l'), InputAction::Deliver { vm: 0, byte: b'l' });
        // alpha (focused) prints a prompt: it shows at once.
        assert_eq!(write(&mut m, 0, "$ ").concat(), "[alpha] $ ");
        // beta's line ends the prompt's terminal line first.
        assert_eq!(write(&mut m, 1, "log\n").concat(), "\n[beta] log\n");
        // alpha's next byte reprints the prompt, tagged.
        assert_eq!(write(&mut m, 0, "l").concat(), "[alpha] $ l");
        assert_eq!(write(&mut m, 0, "s\n").concat(), "s\n");
        // A message after a streamed prompt starts on a new line.
        write(&mut m, 0, "$ ");
        m.input(ESCAPE);
        assert!(said(m.input(b'?')).starts_with("\nkestrel: Ctrl-] then:"));
        // Ending a VM with an open line closes it.
        write(&mut m, 0, "x");
        assert_eq!(m.flush(0).as_deref(), Some("\n"));
        assert_eq!(m.flush(0), None);
    }

    #[test]
    fn long_lines_and_control_bytes_in_log_mode() {
        let mut m = mux();
        let long = "x".repeat(LINE_MAX + 3);
        let out = write(&mut m, 1, &long);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), "[beta] ".len() + LINE_MAX + 1);
        assert_eq!(m.flush(1).as_deref(), Some("[beta] xxx\n"));
        assert_eq!(m.flush(1), None);
        assert_eq!(write(&mut m, 1, "a\x1b[2Jb\n"), ["[beta] a.[2Jb\n"]);
        // The focused VM wraps long lines too (once interactive).
        m.input(b'\r');
        let streamed = write(&mut m, 0, &long).concat();
        assert_eq!(streamed.matches("[alpha] ").count(), 2);
        assert_eq!(m.output(7, b'x'), None, "unknown VM is ignored");
    }

    #[test]
    fn raw_mode_filters_the_focused_vms_bytes_and_keeps_the_others() {
        let mut m = mux_in(Mode::Raw);
        // A prompt with a cursor query, Backspace, CR, UTF-8, colours,
        // before anyone typed: all of it but the query.
        let prompt = "\x1b[6n~ # ab\x08\x1b[J\r\u{e9}\x1b[1;32m$\x1b[0m ";
        let out = raw(&mut m, 0, prompt.as_bytes());
        assert_eq!(out, prompt.replace("\x1b[6n", "").as_bytes());
        // beta's output is kept, not shown; no tags anywhere.
        assert!(write(&mut m, 1, "beta says\r\nhi\r\n").is_empty());
        assert_eq!(m.flush(1), None, "raw mode has no lines to flush");
        // Switching replays beta's scrollback, then says so.
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        assert_eq!(replayed(&s), "\r\nbeta says\r\nhi\r\n", "{s:?}");
        let after = s.split_once("hi\r\n").unwrap().1;
        assert!(
            plain(after).starts_with("kestrel: console input now goes to VM 1 (beta)"),
            "{after:?}"
        );
        assert!(after.contains("\x1b]2;kestrel: keyboard to VM 1 (beta)\x1b\\"));
        // beta's next output waits for a key, which brings it.
        assert!(write(&mut m, 1, "x").is_empty());
        assert_eq!(
            m.input(b'y'),
            InputAction::Resume {
                out: Out::Raw(b"x".to_vec()),
                vm: 1,
                byte: b'y'
            }
        );
        assert_eq!(write(&mut m, 1, "z"), ["z"]);
        assert!(write(&mut m, 0, "hidden").is_empty());
        // Back to alpha: its ring holds what it printed while focused too.
        m.input(ESCAPE);
        let s = said(m.input(b'0'));
        assert!(
            replayed(&s).ends_with("\r\u{e9}\x1b[1;32m$\x1b[0m hidden"),
            "{s:?}"
        );
    }

    #[test]
    fn a_replay_goes_through_the_filter() {
        let mut m = ConsoleMux::with_mode(Mode::Raw, 4096);
        m.add_vm("alpha");
        m.add_vm("beta");
        let hostile = "a\x1b[6nb\x1b[5n\x1b[c\x1b[>0c\x1b[?6n\x1b]52;c;aGk=\x07\x1b]0;x\x1b\\\
                       \x1b[1;8;31mc\x1b[11111111111111111111n\x1b[?1000h";
        let kept = "\x1b[1;32mgreen\x1b[0m\x1b[2J\x1b[H\x1bM\x1b[;H";
        write(&mut m, 1, hostile);
        write(&mut m, 1, kept);
        write(&mut m, 1, "tail\x1b[");
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        assert_eq!(
            replayed(&s),
            alloc::format!("ab\x1b[1;31mc{kept}tail"),
            "a cut sequence stays in the filter"
        );
        // The rest of the cut sequence comes after the next key.
        write(&mut m, 1, "1mX");
        match m.input(b'k') {
            InputAction::Resume { out, .. } => assert_eq!(shown(out), "\x1b[1mX"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_notice_is_the_last_thing_on_the_screen_until_the_operator_types() {
        let mut m = mux_in(Mode::Raw);
        assert_eq!(write(&mut m, 0, "$ "), ["$", " "]);
        // Ctrl-] alone already holds the output: nothing comes between the
        // escape and kestrel's answer.
        assert_eq!(m.input(ESCAPE), InputAction::None);
        assert!(m.holding());
        assert!(write(&mut m, 0, "one").is_empty());
        // The answer: what was held, the reset, the notice last.
        let s = said(m.input(b'z'));
        assert!(s.starts_with("one"), "{s:?}");
        assert!(
            s.ends_with("'z' is no command; Ctrl-] ? lists them\r\n"),
            "{s:?}"
        );
        assert!(s.contains(RESET) && s.contains(&mark()));
        // A VM drawing over it is held, however much it writes.
        assert!(write(&mut m, 0, "\x1b[2J\x1b[Hkestrel: fake\r\n").is_empty());
        let s = shown(m.say("kestrel: second"));
        assert!(s.starts_with("\x1b[2J\x1b[Hkestrel: fake\r\n"), "{s:?}");
        assert!(s.ends_with(&alloc::format!("{} second\r\n", mark())));
        // Commands do not release it; a key for the VM does, and is
        // delivered after what was held.
        m.input(ESCAPE);
        m.input(b'?');
        write(&mut m, 0, "two");
        match m.input(b'a') {
            InputAction::Resume {
                out,
                vm: 0,
                byte: b'a',
            } => assert_eq!(shown(out), "two"),
            other => panic!("{other:?}"),
        }
        assert!(!m.holding());
        assert_eq!(write(&mut m, 0, "3"), ["3"]);
        assert_eq!(m.input(b'b'), InputAction::Deliver { vm: 0, byte: b'b' });
        // Log mode holds nothing.
        let mut m = mux();
        m.input(ESCAPE);
        m.input(b'z');
        assert!(!m.holding());
    }

    #[test]
    fn kestrel_resets_the_terminal_before_it_speaks_and_restores_the_vm_after() {
        let mut m = mux_in(Mode::Raw);
        // vi-like: alternate screen, cursor keys, bracketed paste, a
        // scroll region; and mouse reporting, which the filter drops.
        let set = "\x1b[?1049h\x1b[?1h\x1b=\x1b[?2004h\x1b[1;20r\x1b[?1000h\x1b[1;31mx";
        let out = raw(&mut m, 0, set.as_bytes());
        assert_eq!(out, set.replace("\x1b[?1000h", "").as_bytes());
        let s = shown(m.say("kestrel: hello"));
        assert!(
            s.starts_with(&alloc::format!("\x1b[?1049l\x1b7\x1b[r\x1b8{RESET}")),
            "{s:?}"
        );
        // A second notice does not leave the alternate screen again.
        let s = shown(m.say("kestrel: again"));
        assert!(s.starts_with(RESET), "{s:?}");
        // The VM's modes come back with its output.
        write(&mut m, 0, "y");
        match m.input(b'j') {
            InputAction::Resume { out, .. } => assert_eq!(
                shown(out),
                "\x1b[?1049h\x1b7\x1b[1;20r\x1b8\x1b[?1h\x1b[?2004h\x1b=y"
            ),
            other => panic!("{other:?}"),
        }
        // A focus change resets too, and the next VM starts from defaults.
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        assert!(s.starts_with(&alloc::format!("\x1b[?1049l\x1b7\x1b[r\x1b8{RESET}")));
        match m.input(b'k') {
            InputAction::Deliver { vm: 1, .. } => {}
            other => panic!("nothing to restore for beta: {other:?}"),
        }
    }

    /// The attack of the issue: a focused VM prints kestrel's messages
    /// and a login prompt, sets the clipboard and the title, hides text.
    #[test]
    fn a_vm_cannot_pass_for_kestrel() {
        let mut m = mux_in(Mode::Raw);
        let fake = alloc::format!(
            "{mk} VM 0 (alpha) powered off; the keyboard goes to VM 1 (beta)\r\n\
             kestrel: console input now goes to VM 1 (beta)\r\n\
             \x1b]2;kestrel: keyboard to VM 1 (beta)\x07\x1b]52;c;aGk=\x07\x1b]52;c;?\x1b\\\
             \x1b[8mhidden\x1b[0m\x1b[5;7mkestrel:\x1b[0m\u{9b}5;7mkestrel:\u{9b}6n\
             \x1b[?1000h\x1b[>4;2m\x1b[3Jbeta login: ",
            mk = mark()
        );
        let out = raw(&mut m, 0, fake.as_bytes());
        crate::vmm::termfilter::checker::check(&out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains(&mark()) && !out.contains("\x1b[5") && !out.contains("\x1b]"));
        assert!(!out.contains(RESET));
        assert!(out.contains("\x1b[0;7mkestrel:\x1b[0m VM 0 (alpha) powered off"));
        assert!(out.ends_with("hidden\x1b[0m\x1b[7mkestrel:\x1b[0m\x1b[7mkestrel:beta login: "));
        // The keyboard did not move: the password goes where it went.
        for b in *b"root\rhunter2\r" {
            assert_eq!(m.input(b), InputAction::Deliver { vm: 0, byte: b });
        }
        assert_eq!(m.focus(), 0);
    }

    #[test]
    fn random_vm_output_never_reaches_the_terminal_unfiltered() {
        use crate::vmm::termfilter::checker::check;
        const HOT: &[u8] = b"\x1b\x1b[[]]P_\\;:?>0123456789mhlnc\x07\x9b\x9d\x9c\xc2\x0a\x0d";
        let mut m = ConsoleMux::with_mode(Mode::Raw, 512);
        m.add_vm("alpha");
        m.add_vm("beta");
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let (mut replays, mut resumes) = (0, 0);
        for step in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = if x & 3 == 0 {
                (x >> 8) as u8
            } else {
                HOT[(x >> 8) as usize % HOT.len()]
            };
            let vm = ((x >> 40) & 1) as usize;
            let out = raw(&mut m, vm, &[b]);
            if let Err(e) = check(&out) {
                panic!("{e} at step {step}");
            }
            // Now and then the operator acts or kestrel speaks.
            let action = match (x >> 48) % 256 {
                0 => {
                    m.input(ESCAPE);
                    m.input(b'0' + (step % 2) as u8)
                }
                1 | 2 => m.input(b'x'),
                3 => InputAction::Say(m.say("kestrel: hi")),
                4 => m
                    .vm_rebooted(vm)
                    .map_or(InputAction::None, InputAction::Say),
                _ => InputAction::None,
            };
            match action {
                InputAction::Say(o) => {
                    // A replay's (or held output's) VM bytes are what lies
                    // between kestrel's resets and marked lines.
                    let s = shown(o);
                    replays += usize::from(s.matches(RESET).count() > 1);
                    for part in s.split(RESET) {
                        let vm_part = match part.rsplit_once(&mark()) {
                            Some((_, rest)) => rest.split_once("\r\n").map_or("", |r| r.1),
                            None => part,
                        };
                        let vm_part = vm_part.split("\x1b]2;").next().unwrap();
                        if let Err(e) = check(vm_part.as_bytes()) {
                            panic!("{e} in {s:?} at step {step}");
                        }
                    }
                }
                InputAction::Resume { out, .. } => {
                    // The restored modes are among what VMs may send.
                    resumes += 1;
                    check(shown(out).as_bytes()).unwrap();
                }
                _ => {}
            }
        }
        assert!(
            replays > 50 && resumes > 50,
            "{replays} replays, {resumes} resumes"
        );
    }

    #[test]
    fn the_scrollback_ring_is_bounded_and_replays_from_a_line_start() {
        let mut m = mux_in(Mode::Raw);
        for i in 0..40 {
            write(&mut m, 1, &alloc::format!("line {i:02}\n"));
        }
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        let replay = replayed(&s);
        assert!(replay.len() <= 64, "ring of 64 bytes: {replay:?}");
        assert!(replay.starts_with("line "), "{replay:?}");
        assert!(replay.ends_with("line 39\n"));
        // A zero-size ring keeps nothing.
        let mut m = ConsoleMux::with_mode(Mode::Raw, 0);
        m.add_vm("a");
        m.add_vm("b");
        write(&mut m, 1, "lost\n");
        m.input(ESCAPE);
        assert!(!said(m.input(b'1')).contains("lost"));
    }

    #[test]
    fn input_follows_focus_and_escape_switches_it() {
        let mut m = mux();
        assert_eq!(m.input(b'a'), InputAction::Deliver { vm: 0, byte: b'a' });
        assert_eq!(m.input(ESCAPE), InputAction::None);
        assert!(said(m.input(b'1')).contains("VM 1 (beta)"));
        assert_eq!(m.input(b'b'), InputAction::Deliver { vm: 1, byte: b'b' });
        m.input(ESCAPE);
        said(m.input(b'n'));
        assert_eq!(m.focus(), 0, "next wraps around");
        m.input(ESCAPE);
        assert_eq!(
            m.input(ESCAPE),
            InputAction::Deliver {
                vm: 0,
                byte: ESCAPE
            }
        );
        m.input(ESCAPE);
        assert!(said(m.input(b'7')).contains("no VM 7"));
        assert_eq!(m.focus(), 0);
        m.input(ESCAPE);
        let help = said(m.input(b'?'));
        for (key, _) in KEYS {
            assert!(help.contains(key), "{key} missing from {help}");
        }
        m.input(ESCAPE);
        assert!(said(m.input(b'z')).contains("'z' is no command"));
        assert_eq!(m.input(b'z'), InputAction::Deliver { vm: 0, byte: b'z' });
    }

    #[test]
    fn command_keys_ask_the_vm_manager() {
        let mut m = mux();
        m.input(ESCAPE);
        assert_eq!(m.input(b'l'), InputAction::Command(Command::List));
        // An operation takes a VM number, or Enter for the focused VM.
        m.input(ESCAPE);
        assert!(said(m.input(b'd')).contains("stop (power off) which VM? 0-1"));
        assert_eq!(
            m.input(b'1'),
            InputAction::Command(Command::Vm {
                op: Op::Stop,
                vm: 1
            })
        );
        m.input(ESCAPE);
        said(m.input(b'r'));
        assert_eq!(
            m.input(b'\r'),
            InputAction::Command(Command::Vm {
                op: Op::Restart,
                vm: 0
            })
        );
        m.input(ESCAPE);
        said(m.input(b'c'));
        assert!(said(m.input(b'5')).contains("no VM 5"));
        m.input(ESCAPE);
        said(m.input(b'c'));
        assert!(said(m.input(b'x')).contains("cancelled"));
        assert_eq!(m.input(b'x'), InputAction::Deliver { vm: 0, byte: b'x' });
        // The live view holds the keyboard until the next key, which it eats.
        m.input(ESCAPE);
        assert_eq!(m.input(b't'), InputAction::Command(Command::Top(None)));
        assert!(m.viewing());
        assert!(said(m.input(b'q')).contains("live statistics closed"));
        assert!(!m.viewing());
        m.input(ESCAPE);
        assert_eq!(m.input(b'i'), InputAction::Command(Command::Top(Some(0))));
        said(m.input(b' '));
        assert_eq!(m.input(b' '), InputAction::Deliver { vm: 0, byte: b' ' });
    }

    #[test]
    fn garbage_input_always_gets_an_answer_and_never_panics() {
        for mode in [Mode::Raw, Mode::Log] {
            let mut m = mux_in(mode);
            // Every byte after the escape, and after each operation key.
            for b in 0..=255u8 {
                m.input(ESCAPE);
                let a = m.input(b);
                assert_ne!(a, InputAction::None, "Ctrl-] {b:#x} got no answer");
                // Close whatever the key opened.
                if m.viewing() || matches!(a, InputAction::Say(_)) {
                    m.input(b'\x7f');
                }
                for op in [b'd', b'r', b'c'] {
                    m.input(ESCAPE);
                    m.input(op);
                    assert_ne!(m.input(b), InputAction::None);
                }
            }
            // A pseudo-random stream: only well-formed answers.
            let mut x: u32 = 0x1234_5678;
            for _ in 0..20_000 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let b = (x >> 24) as u8;
                match m.input(b) {
                    InputAction::Deliver { vm, .. } | InputAction::Resume { vm, .. } => {
                        assert!(vm < 2)
                    }
                    InputAction::Command(Command::Vm { vm, .. }) => assert!(vm < 2),
                    InputAction::Command(Command::Top(Some(vm))) => assert!(vm < 2),
                    _ => {}
                }
                m.output((x & 1) as usize, b);
            }
        }
    }

    #[test]
    fn the_keyboard_stays_with_a_stopped_vm() {
        for mode in [Mode::Raw, Mode::Log] {
            let mut m = mux_in(mode);
            write(&mut m, 1, "beta's screen\r\n");
            let s = plain(&shown(m.vm_stopped(0, "powered off", false).unwrap()));
            assert!(
                s.contains("kestrel: VM 0 (alpha) powered off. The keyboard stays with it"),
                "{s:?}"
            );
            assert!(!s.contains("beta's screen"), "nothing replayed");
            assert_eq!(m.focus(), 0);
            // Typing to it is answered once, and goes nowhere.
            let s = plain(&said(m.input(b'r')));
            assert!(s.contains("VM 0 (alpha) is stopped: what you type goes nowhere"));
            for b in *b"oot\rhunter2\r" {
                assert_eq!(m.input(b), InputAction::None);
            }
            // The help and the hint say whose keyboard it is.
            m.input(ESCAPE);
            let help = plain(&said(m.input(b'?')));
            assert!(help.contains("the keyboard is with VM 0 (alpha), which is stopped"));
            // A stopped VM cannot take the keyboard, and says how to start it.
            m.input(ESCAPE);
            assert!(said(m.input(b'0')).contains("is stopped; Ctrl-] c 0 starts it"));
            assert_eq!(m.focus(), 0);
            // Only the operator moves it.
            m.input(ESCAPE);
            assert!(said(m.input(b'1')).contains("now goes to VM 1 (beta)"));
            assert_eq!(m.focus(), 1);
            assert_eq!(
                m.vm_stopped(0, "again", true),
                None,
                "not focused: nothing to say"
            );
            // The last VM: kestrel ends, the terminal reset first.
            let s = shown(m.vm_stopped(1, "powered off", false).unwrap());
            assert!(
                plain(&s).contains("kestrel: VM 1 (beta) powered off"),
                "{s:?}"
            );
            assert!(!s.contains("stays"));
            assert_eq!(s.contains(RESET), mode == Mode::Raw);
            m.vm_started(1);
            let s = plain(&shown(m.vm_stopped(1, "stopped", true).unwrap()));
            assert!(s.contains("no VM runs. The keyboard stays with it"));
            // A VM starting again does not take the keyboard.
            assert_eq!(m.vm_started(0), None);
            assert_eq!(m.focus(), 1);
            let title = m.vm_started(1).map(shown);
            assert_eq!(
                title.as_deref(),
                (mode == Mode::Raw).then_some("\x1b]2;kestrel: keyboard to VM 1 (beta)\x1b\\")
            );
            assert!(m.is_alive(1));
            assert_eq!(m.vm_stopped(9, "x", true), None);
        }
    }

    #[test]
    fn a_new_boot_is_marked_in_the_scrollback_and_on_the_screen() {
        let mut m = mux_in(Mode::Raw);
        write(&mut m, 1, "old run\x1b[?1049h");
        assert_eq!(m.vm_rebooted(1), None, "not focused: only in the ring");
        write(&mut m, 1, "new run\r\n");
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        let replay = replayed(&s);
        // The old run's alternate screen is left before the mark.
        let (old, new) = replay.split_once("\x1b[?1049l").unwrap();
        assert_eq!(old, "old run\x1b[?1049h");
        assert_eq!(
            new,
            alloc::format!(
                "{}\r\n{} ---- VM 1 (beta) boots again ----\r\nnew run\r\n",
                RESET,
                mark()
            )
        );
        // Live: a notice, and the new run is held until a key.
        let s = shown(m.vm_rebooted(1).unwrap());
        assert!(s.starts_with(RESET));
        assert!(s.ends_with(&alloc::format!(
            "{} ---- VM 1 (beta) boots again ----\r\n",
            mark()
        )));
        assert!(m.holding());
        assert!(write(&mut m, 1, "booting").is_empty());
        match m.input(b'\r') {
            InputAction::Resume { out, vm: 1, .. } => assert_eq!(shown(out), "booting"),
            other => panic!("{other:?}"),
        }
        // The replay shows the live mark once, in its place.
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        assert_eq!(replayed(&s).matches("boots again").count(), 2, "{s:?}");
        assert_eq!(mux().vm_rebooted(0), None, "log mode has its own lines");
    }

    #[test]
    fn the_hint_names_the_focus_and_the_keys() {
        assert_eq!(ConsoleMux::new().hint(), None);
        let h = mux().hint().unwrap();
        assert!(
            h.starts_with("kestrel: the keyboard goes to VM 0 (alpha) of 2")
                && h.contains("Ctrl-] ?")
                && h.contains("Ctrl-A X")
        );
        // Raw mode: the title, the reset, and the tag shown as kestrel
        // marks it.
        let h = mux_in(Mode::Raw).hint().unwrap();
        assert!(h.starts_with("\x1b]2;kestrel: keyboard to VM 0 (alpha)\x1b\\"));
        assert!(h.contains(RESET));
        assert!(h.contains(&alloc::format!(
            "{} the keyboard goes to VM 0 (alpha) of 2",
            mark()
        )));
        assert!(plain(&h).contains("this blinking tag, which no VM can print"));
    }

    #[test]
    fn held_input_keeps_its_order_and_is_bounded() {
        let mut m = mux();
        assert!(!m.has_held(0));
        for b in b"abc" {
            assert!(m.hold(0, *b));
        }
        assert!(m.has_held(0));
        assert!(!m.has_held(1));
        assert_eq!(m.next_held(0), Some(b'a'));
        assert_eq!(m.next_held(0), Some(b'b'));
        for _ in 0..HELD_MAX {
            m.hold(1, b'x');
        }
        assert!(!m.hold(1, b'y'), "a full queue drops");
        assert_eq!(m.dropped(), 1);
        assert!(!m.hold(9, b'z'), "unknown VM");
        assert_eq!(m.next_held(9), None);
    }

    /// A UART with a two-byte FIFO the test drains by hand.
    #[derive(Default)]
    struct Fifo(Vec<u8>);

    impl RxPort for Fifo {
        fn can_receive(&self) -> bool {
            self.0.len() < 2
        }
        fn receive(&mut self, byte: u8) -> bool {
            self.can_receive() && {
                self.0.push(byte);
                true
            }
        }
    }

    #[test]
    fn pump_holds_what_a_full_uart_cannot_take_and_keeps_the_order() {
        let mux = crate::base::lock::Mutex::new(mux());
        let uarts = [
            crate::base::lock::Mutex::new(Fifo::default()),
            crate::base::lock::Mutex::new(Fifo::default()),
        ];
        let mut typed = b"hello".iter().copied();
        let mut woke = Vec::new();
        pump_input(
            &mux,
            |i| uarts.get(i),
            || typed.next(),
            |i, _| woke.push(i),
            |_| {},
        );
        assert_eq!(uarts[0].lock().0, b"he");
        assert!(mux.lock().has_held(0));
        assert_eq!(woke, [0, 0]);
        // The guest reads its FIFO; the next pump moves held bytes first.
        uarts[0].lock().0.clear();
        let mut more = [ESCAPE, b'1', b'!', ESCAPE, b'l'].into_iter();
        let mut commands = Vec::new();
        pump_input(
            &mux,
            |i| uarts.get(i),
            || more.next(),
            |_, _| {},
            |c| commands.push(c),
        );
        assert_eq!(uarts[0].lock().0, b"ll", "held bytes, in order");
        assert_eq!(
            uarts[1].lock().0,
            b"!",
            "the escape switched the focus at once"
        );
        assert_eq!(commands, [Command::List]);
        uarts[0].lock().0.clear();
        pump_input(&mux, |i| uarts.get(i), || None, |_, _| {}, |_| {});
        assert_eq!(uarts[0].lock().0, b"o");
        assert!(!mux.lock().has_held(0));
        // A flood is taken a bounded amount at a time.
        let mut reads = 0;
        pump_input(
            &mux,
            |i| uarts.get(i),
            || {
                reads += 1;
                Some(b'x')
            },
            |_, _| {},
            |_| {},
        );
        assert_eq!(reads, INPUT_PER_PUMP);
    }

    #[test]
    fn pump_writes_the_held_output_then_delivers_the_key() {
        let mut m = mux_in(Mode::Raw);
        m.say("kestrel: a notice");
        write(&mut m, 0, "held");
        let mux = crate::base::lock::Mutex::new(m);
        let uarts = [
            crate::base::lock::Mutex::new(Fifo::default()),
            crate::base::lock::Mutex::new(Fifo::default()),
        ];
        let mut typed = b"x".iter().copied();
        pump_input(&mux, |i| uarts.get(i), || typed.next(), |_, _| {}, |_| {});
        assert_eq!(uarts[0].lock().0, b"x");
        assert!(!mux.lock().holding());
        assert_eq!(mux.lock().output(0, b'!'), Some(Out::Byte(b'!')));
    }

    #[test]
    fn the_live_view_holds_the_output_and_its_end_replays_it() {
        let mut m = mux_in(Mode::Raw);
        write(&mut m, 0, "before\r\n");
        m.input(ESCAPE);
        assert_eq!(m.input(b't'), InputAction::Command(Command::Top(None)));
        m.say("kestrel: live statistics of every VM");
        assert!(write(&mut m, 0, "during\r\n").is_empty());
        let frame = shown(m.view_frame("kestrel: live statistics\nVM 0 alpha\n"));
        assert_eq!(
            frame,
            alloc::format!("\x1b[H\x1b[2J{} live statistics\r\nVM 0 alpha\r\n", mark())
        );
        // A reboot under the view is only marked in the ring.
        assert_eq!(m.vm_rebooted(0), None);
        write(&mut m, 0, "again\r\n");
        let s = said(m.input(b'q'));
        let replay = replayed(&s);
        assert!(replay.starts_with("before\r\nduring\r\n"), "{replay:?}");
        assert!(
            replay.ends_with("boots again ----\r\nagain\r\n"),
            "{replay:?}"
        );
        assert!(plain(&s).ends_with("kestrel: live statistics closed\r\n"));
        assert!(m.holding());
        assert_eq!(mux().view_frame("x\n"), Out::Text(String::from("x\n")));
    }

    #[test]
    fn no_vms_means_input_is_dropped() {
        let mut m = ConsoleMux::new();
        assert_eq!(m.input(b'a'), InputAction::None);
    }
}
