//! The console multiplexer: many VMs, one physical UART.
//!
//! Two modes ([`Mode`]):
//!
//! - **Raw** (the default): the VM with the keyboard (the *focus*) owns the
//!   terminal. Its bytes go out untouched (escape sequences, CR, Backspace,
//!   UTF-8), so shells, `vi` and `top` work. Every VM's output also goes
//!   into its own scrollback ring (its size set by `kestrel.scrollback=`);
//!   the other VMs' output goes only there, and a VM's ring is replayed when
//!   it gets the focus.
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
//! Callers must write what [`ConsoleMux::output`] returns before releasing
//! the multiplexer's lock, so the terminal sees the order decided here.
//!
//! Input goes to the focused VM. The escape key **Ctrl-]** (0x1d) followed
//! by a command key ([`KEYS`], also printed by `?`) switches the focus or
//! asks kestrel something; keys naming a VM operation (stop, restart, start)
//! then take the VM's number, or Enter for the focused VM. The live
//! statistics view lasts until the next key. Every key gets an answer; a key
//! kestrel does not know says so. (Ctrl-A is QEMU's own escape under
//! `-nographic`, so kestrel uses another.)

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

/// The escape byte: Ctrl-].
pub const ESCAPE: u8 = 0x1d;
/// Longest line kept before it is flushed anyway (log mode).
pub const LINE_MAX: usize = 256;
/// The scrollback ring's default size per VM, in bytes.
pub const SCROLLBACK_DEFAULT: usize = 16 * 1024;
pub use crate::host::cmdline::SCROLLBACK_MAX;

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
    /// One guest byte, untouched.
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
    /// The ring dropped old bytes (its start may be inside a line).
    ring_wrapped: bool,
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
    /// Write this for the user (focus change, help, an answer).
    Say(Out),
    /// The VM manager must carry this out (and answer).
    Command(Command),
    /// Nothing (escape pending).
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
            ring_wrapped: false,
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

    /// The line printed once the VMs run: who has the keyboard, how to
    /// switch, how to quit.
    pub fn hint(&self) -> Option<String> {
        let c = self.vms.get(self.focus)?;
        Some(alloc::format!(
            "kestrel: the keyboard goes to VM {} ({}) of {}. Ctrl-] then 0-{} or n switches VM, \
             Ctrl-] ? lists the commands; under QEMU -nographic Ctrl-A X quits.\n",
            self.focus,
            c.name,
            self.vms.len(),
            self.vms.len().saturating_sub(1).min(9),
        ))
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
    /// anything: raw mode, the byte itself for the focused VM; log mode, a
    /// complete tagged line, or (for the focused VM) the byte itself.
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
                c.ring_wrapped = true;
            }
            c.ring.push_back(byte);
        }
        if vm != self.focus || self.keys == Keys::View {
            return None;
        }
        self.at_line_start = byte == b'\n';
        Some(Out::Byte(byte))
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

    /// A message for the user, on a line of its own.
    pub fn say(&mut self, text: &str) -> Out {
        let mut s = String::new();
        match self.mode {
            Mode::Log => {
                if self.open.take().is_some() {
                    s.push('\n');
                }
            }
            Mode::Raw => {
                if !self.at_line_start {
                    s.push('\n');
                }
                self.at_line_start = true;
            }
        }
        s.push_str(text);
        if !s.ends_with('\n') {
            s.push('\n');
        }
        Out::Text(s)
    }

    /// `text`, then (raw mode) the focused VM's scrollback replayed.
    fn say_and_replay(&mut self, text: &str) -> Out {
        let Out::Text(msg) = self.say(text) else {
            unreachable!("say gives text")
        };
        if self.mode == Mode::Log {
            return Out::Text(msg);
        }
        let mut bytes = Vec::with_capacity(msg.len() + 16);
        for b in msg.bytes() {
            if b == b'\n' {
                bytes.push(b'\r');
            }
            bytes.push(b);
        }
        if let Some(c) = self.vms.get(self.focus) {
            let mut ring = c.ring.iter().copied();
            if c.ring_wrapped {
                // Start at a line: the oldest bytes may end a sequence.
                for b in ring.by_ref() {
                    if b == b'\n' {
                        break;
                    }
                }
            }
            bytes.extend(without_queries(ring));
            self.at_line_start = bytes.last().is_none_or(|&b| b == b'\n');
        }
        Out::Raw(bytes)
    }

    /// VM `vm` stopped (`why`): the keyboard moves to the next running VM,
    /// if it had it. `stays_up`: kestrel keeps running with no VM (a VM
    /// stopped from the console may be started again). Returns the message
    /// to write.
    pub fn vm_stopped(&mut self, vm: usize, why: &str, stays_up: bool) -> Option<Out> {
        let name = self.vms.get(vm)?.name.clone();
        self.vms[vm].alive = false;
        if self.focus != vm {
            return None;
        }
        match self.next_alive(vm) {
            Some(next) => {
                self.focus = next;
                let text = alloc::format!(
                    "kestrel: VM {vm} ({name}) {why}; the keyboard goes to VM {next} ({})",
                    self.vms[next].name
                );
                Some(self.say_and_replay(&text))
            }
            None if stays_up => {
                let text = alloc::format!(
                    "kestrel: VM {vm} ({name}) {why}; no VM runs (Ctrl-] c N starts VM N)"
                );
                Some(self.say(&text))
            }
            None => None,
        }
    }

    /// VM `vm` boots again (restarted, or started after it stopped): raw
    /// mode marks it in its scrollback, and on the screen if it has the
    /// keyboard, so what follows is told apart from the previous run.
    pub fn vm_rebooted(&mut self, vm: usize) -> Option<Out> {
        if self.mode != Mode::Raw {
            return None;
        }
        let c = self.vms.get(vm)?;
        let mut mark = Vec::new();
        if c.ring.back().is_some_and(|&b| b != b'\n') {
            mark.extend_from_slice(b"\r\n");
        }
        mark.extend_from_slice(
            alloc::format!("kestrel: ---- VM {vm} ({}) boots again ----\r\n", c.name).as_bytes(),
        );
        let shown = vm == self.focus && self.keys != Keys::View;
        let mut out = Vec::new();
        if shown && !self.at_line_start {
            out.extend_from_slice(b"\r\n");
        }
        for &b in &mark {
            if let Some(Out::Byte(b)) = self.output_raw(vm, b) {
                out.push(b);
            }
        }
        (!out.is_empty()).then_some(Out::Raw(out))
    }

    /// VM `vm` runs again (started or restarted). It gets the keyboard if
    /// the focused VM is stopped.
    pub fn vm_started(&mut self, vm: usize) -> Option<Out> {
        self.vms.get_mut(vm)?.alive = true;
        if vm != self.focus && self.vms[self.focus].alive {
            return None;
        }
        self.focus = vm;
        let text = self.focus_message();
        Some(self.say(&text))
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
                InputAction::None
            }
            Keys::Normal => InputAction::Deliver {
                vm: self.focus,
                byte,
            },
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
                InputAction::Say(self.say_and_replay("kestrel: live statistics closed"))
            }
        }
    }

    /// What the key after the escape does.
    fn escape_key(&mut self, byte: u8) -> InputAction {
        let text = match byte {
            ESCAPE => {
                return InputAction::Deliver {
                    vm: self.focus,
                    byte: ESCAPE,
                }
            }
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
                let text = self.focus_message();
                return InputAction::Say(self.say_and_replay(&text));
            }
        };
        InputAction::Say(self.say(&text))
    }

    fn focus_message(&self) -> String {
        alloc::format!(
            "kestrel: console input now goes to VM {} ({})",
            self.focus,
            self.vms[self.focus].name
        )
    }
}

/// `bytes` without the terminal queries in them (cursor position and
/// status reports, device attributes: `ESC [ 6 n`, `ESC [ c`, ...): a
/// replay is for the eyes, and the terminal's answers would reach the VM
/// as typed text long after its program stopped waiting for them.
fn without_queries(bytes: impl Iterator<Item = u8>) -> Vec<u8> {
    let mut out = Vec::new();
    // A CSI sequence being collected (from its ESC).
    let mut csi: Vec<u8> = Vec::new();
    for b in bytes {
        if csi.is_empty() {
            if b == 0x1b {
                csi.push(b);
            } else {
                out.push(b);
            }
            continue;
        }
        csi.push(b);
        match (csi.len(), b) {
            (2, b'[') => {}
            (2, _) => out.append(&mut csi),
            // Parameters and intermediates.
            (_, 0x20..=0x3f) if csi.len() < 16 => {}
            // The final byte: a query ends in `n` or `c`, and is dropped.
            (_, b'n' | b'c') => csi.clear(),
            _ => out.append(&mut csi),
        }
    }
    out.append(&mut csi);
    out
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
/// `command` gets the commands the VM manager must carry out. Messages are
/// written as they come. At most [`INPUT_PER_PUMP`] typed bytes are taken
/// per call (the rest wait in the UART for the next tick).
/// Lock order: a UART, then the multiplexer.
pub fn pump_input<'a, U: RxPort + ?Sized + 'a>(
    mux: &spin::Mutex<ConsoleMux>,
    uart_of: impl Fn(usize) -> Option<&'a spin::Mutex<U>>,
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
        let action = mux.lock().input(b);
        match action {
            InputAction::Deliver { vm: i, byte } => {
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
            InputAction::Say(out) => write(&out),
            InputAction::Command(c) => command(c),
            InputAction::None => {}
        }
    }
}

/// Most typed bytes one [`pump_input`] takes (the console's service stays
/// bounded per tick).
pub const INPUT_PER_PUMP: usize = 256;

/// Writes `out` on the physical console.
pub fn write(out: &Out) {
    match out {
        Out::Text(text) => crate::base::klog::print(format_args!("{text}")),
        Out::Raw(bytes) => crate::base::klog::write_raw(bytes),
        Out::Byte(b) => crate::base::klog::write_raw(core::slice::from_ref(b)),
    }
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
    fn raw_mode_passes_the_focused_vms_bytes_untouched_and_keeps_the_others() {
        let mut m = mux_in(Mode::Raw);
        // A prompt with a cursor query, Backspace, CR, UTF-8: byte for byte,
        // before anyone typed.
        let prompt = "\x1b[6n~ # ab\x08\x1b[J\r\u{e9}";
        let out: Vec<u8> = prompt
            .bytes()
            .filter_map(|b| m.output(0, b))
            .map(|o| match o {
                Out::Byte(b) => b,
                other => panic!("raw output must be bytes, got {other:?}"),
            })
            .collect();
        assert_eq!(out, prompt.as_bytes());
        // beta's output is kept, not shown; no tags anywhere.
        assert!(write(&mut m, 1, "beta says\r\nhi\r\n").is_empty());
        assert_eq!(m.flush(1), None, "raw mode has no lines to flush");
        // Switching replays beta's scrollback after the message.
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        assert!(s.starts_with("\r\nkestrel: console input now goes to VM 1 (beta)\r\n"));
        assert!(s.ends_with("beta says\r\nhi\r\n"), "{s:?}");
        assert_eq!(write(&mut m, 1, "x"), ["x"]);
        assert!(write(&mut m, 0, "hidden").is_empty());
        // Back to alpha: its ring holds what it printed while focused too.
        m.input(ESCAPE);
        let s = said(m.input(b'0'));
        assert!(s.ends_with("\r\u{e9}hidden"), "{s:?}");
    }

    #[test]
    fn a_replay_leaves_out_terminal_queries_and_keeps_the_rest() {
        let q = |s: &str| String::from_utf8(without_queries(s.bytes())).unwrap();
        assert_eq!(q("a\x1b[6nb\x1b[5n\x1b[c\x1b[>0c\x1b[?6n"), "ab");
        let kept = "\x1b[1;32mgreen\x1b[0m\x1b[2J\x1b[H\x1bM\x1b[;H";
        assert_eq!(q(kept), kept);
        assert_eq!(
            q("tail\x1b["),
            "tail\x1b[",
            "a cut sequence is kept as it is"
        );
        let long = "\x1b[11111111111111111111n";
        assert_eq!(q(long), long, "too long to be a query");
    }

    #[test]
    fn the_scrollback_ring_is_bounded_and_replays_from_a_line_start() {
        let mut m = mux_in(Mode::Raw);
        for i in 0..40 {
            write(&mut m, 1, &alloc::format!("line {i:02}\n"));
        }
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        let replay = s.split_once("(beta)\r\n").unwrap().1;
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
                    InputAction::Deliver { vm, .. } => assert!(vm < 2),
                    InputAction::Command(Command::Vm { vm, .. }) => assert!(vm < 2),
                    InputAction::Command(Command::Top(Some(vm))) => assert!(vm < 2),
                    _ => {}
                }
                m.output((x & 1) as usize, b);
            }
        }
    }

    #[test]
    fn the_keyboard_leaves_a_stopped_vm() {
        let mut m = mux_in(Mode::Raw);
        write(&mut m, 1, "beta's screen\r\n");
        let s = shown(m.vm_stopped(0, "powered off", false).unwrap());
        assert!(s.contains("VM 0 (alpha) powered off; the keyboard goes to VM 1 (beta)"));
        assert!(s.ends_with("beta's screen\r\n"), "replayed: {s:?}");
        assert_eq!(m.focus(), 1);
        // A stopped VM cannot take the keyboard, and says how to start it.
        m.input(ESCAPE);
        assert!(said(m.input(b'0')).contains("is stopped; Ctrl-] c 0 starts it"));
        assert_eq!(
            m.vm_stopped(0, "again", true),
            None,
            "not focused: nothing to say"
        );
        assert_eq!(m.vm_stopped(1, "powered off", false), None, "kestrel ends");
        m.vm_started(1);
        let s = shown(m.vm_stopped(1, "stopped", true).unwrap());
        assert!(s.contains("no VM runs"));
        // The first VM to start again gets the keyboard.
        assert!(shown(m.vm_started(0).unwrap()).contains("VM 0 (alpha)"));
        assert_eq!(m.focus(), 0);
        assert_eq!(m.vm_started(1), None);
        assert!(m.is_alive(1));
        assert_eq!(m.vm_stopped(9, "x", true), None);
    }

    #[test]
    fn a_new_boot_is_marked_in_the_scrollback_and_on_the_screen() {
        let mut m = mux_in(Mode::Raw);
        write(&mut m, 1, "old run");
        assert_eq!(m.vm_rebooted(1), None, "not focused: only in the ring");
        write(&mut m, 1, "new run\r\n");
        m.input(ESCAPE);
        let s = said(m.input(b'1'));
        assert!(
            s.ends_with("old run\r\nkestrel: ---- VM 1 (beta) boots again ----\r\nnew run\r\n"),
            "{s:?}"
        );
        let s = shown(m.vm_rebooted(1).unwrap());
        assert_eq!(s, "kestrel: ---- VM 1 (beta) boots again ----\r\n");
        assert_eq!(mux().vm_rebooted(0), None, "log mode has its own lines");
    }

    #[test]
    fn the_hint_names_the_focus_and_the_keys() {
        assert_eq!(ConsoleMux::new().hint(), None);
        let h = mux().hint().unwrap();
        assert!(
            h.contains("VM 0 (alpha) of 2") && h.contains("Ctrl-] ?") && h.contains("Ctrl-A X")
        );
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
        let mux = spin::Mutex::new(mux());
        let uarts = [
            spin::Mutex::new(Fifo::default()),
            spin::Mutex::new(Fifo::default()),
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
    fn no_vms_means_input_is_dropped() {
        let mut m = ConsoleMux::new();
        assert_eq!(m.input(b'a'), InputAction::None);
    }
}
