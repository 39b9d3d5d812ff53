//! The console multiplexer: many VMs, one physical UART.
//!
//! Output: each VM's bytes are collected into lines and written with a tag
//! naming the VM (`[linux0] ...`), so interleaved guests stay readable and
//! tests can tell who printed what. A partial line is flushed when it grows
//! past [`LINE_MAX`] or when the VM ends. Once someone types (the console
//! is interactive), the VM with the input focus is the exception: its bytes
//! go out as they come (a shell prompt and the echo of typed keys must show
//! before the newline); when another VM's line interrupts its partial line,
//! that line is ended and the partial line is printed again, tagged, at the
//! focused VM's next byte. Logs nobody types into stay whole tagged lines.
//! Callers must write what [`ConsoleMux::output`] returns before releasing
//! the multiplexer's lock, so the terminal sees the order decided here.
//!
//! Input goes to the VM with the focus. The escape key **Ctrl-]** (0x1d)
//! followed by:
//!
//! | key      | effect                                  |
//! |----------|-----------------------------------------|
//! | `0`-`9`  | focus VM number N (in config order)     |
//! | `n`/Tab  | focus the next VM                       |
//! | `?`      | list the VMs and who has the focus      |
//! | Ctrl-]   | send one Ctrl-] to the focused VM       |
//!
//! Anything else after the escape is dropped. (Ctrl-A is QEMU's own escape
//! under `-nographic`, so kestrel uses another.)

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

/// The escape byte: Ctrl-].
pub const ESCAPE: u8 = 0x1d;
/// Longest line kept before it is flushed anyway.
pub const LINE_MAX: usize = 256;

struct VmConsole {
    name: String,
    line: Vec<u8>,
    /// Typed bytes the VM's UART had no room for yet, oldest first.
    held: VecDeque<u8>,
}

/// Most typed bytes held for one VM whose UART is full (a paste); beyond
/// it input is dropped and counted.
pub const HELD_MAX: usize = 4096;

/// Where input bytes go, as decided by [`ConsoleMux::input`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputAction {
    /// Give this byte to VM `vm`.
    Deliver { vm: usize, byte: u8 },
    /// Print this message for the user (focus change, VM list).
    Say(String),
    /// Nothing (escape pending, or dropped).
    None,
}

/// The multiplexer. Output is returned as text for the caller to write to
/// the physical UART, so this stays free of hardware.
pub struct ConsoleMux {
    vms: Vec<VmConsole>,
    focus: usize,
    escape: bool,
    /// The VM whose partial line stands on the terminal (streamed, no newline yet).
    open: Option<usize>,
    dropped: u64,
    /// Someone has typed: the focused VM's output streams.
    interactive: bool,
}

impl ConsoleMux {
    pub fn new() -> Self {
        ConsoleMux {
            vms: Vec::new(),
            focus: 0,
            escape: false,
            open: None,
            dropped: 0,
            interactive: false,
        }
    }

    /// Adds a VM; returns its console number.
    pub fn add_vm(&mut self, name: &str) -> usize {
        self.vms.push(VmConsole {
            name: name.into(),
            line: Vec::new(),
            held: VecDeque::new(),
        });
        self.vms.len() - 1
    }

    /// The VM with the input focus.
    pub fn focus(&self) -> usize {
        self.focus
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

    /// VM `vm` wrote `byte`. Returns the text to write to the terminal, if
    /// any: a complete tagged line, or (for the focused VM) the byte itself.
    pub fn output(&mut self, vm: usize, byte: u8) -> Option<String> {
        if vm >= self.vms.len() || byte == b'\r' {
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

    /// The focused VM's byte, written at once.
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

    /// Flushes VM `vm`'s partial line (when it ends).
    pub fn flush(&mut self, vm: usize) -> Option<String> {
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

    /// A byte typed on the physical console.
    pub fn input(&mut self, byte: u8) -> InputAction {
        if self.vms.is_empty() {
            return InputAction::None;
        }
        self.interactive = true;
        if !self.escape {
            if byte == ESCAPE {
                self.escape = true;
                return InputAction::None;
            }
            return InputAction::Deliver {
                vm: self.focus,
                byte,
            };
        }
        self.escape = false;
        let action = self.escape_key(byte);
        match action {
            // A message starts on its own line, after a streamed partial one.
            InputAction::Say(text) if self.open.take().is_some() => {
                InputAction::Say(String::from("\n") + &text)
            }
            other => other,
        }
    }

    /// What the key after the escape does.
    fn escape_key(&mut self, byte: u8) -> InputAction {
        match byte {
            ESCAPE => InputAction::Deliver {
                vm: self.focus,
                byte: ESCAPE,
            },
            b'0'..=b'9' => {
                let n = (byte - b'0') as usize;
                if n < self.vms.len() {
                    self.focus = n;
                    InputAction::Say(self.focus_message())
                } else {
                    InputAction::Say(alloc::format!(
                        "kestrel: no VM {n}; {} VMs\n",
                        self.vms.len()
                    ))
                }
            }
            b'n' | b'\t' => {
                self.focus = (self.focus + 1) % self.vms.len();
                InputAction::Say(self.focus_message())
            }
            b'?' => {
                let mut s = String::from("kestrel: consoles (Ctrl-] N to switch):\n");
                for (i, vm) in self.vms.iter().enumerate() {
                    let mark = if i == self.focus { '*' } else { ' ' };
                    s.push_str(&alloc::format!("  {mark}{i} {}\n", vm.name));
                }
                InputAction::Say(s)
            }
            _ => InputAction::None,
        }
    }

    fn focus_message(&self) -> String {
        alloc::format!(
            "kestrel: console input now goes to VM {} ({})\n",
            self.focus,
            self.vms[self.focus].name
        )
    }
}

/// A guest console's receive side (a UART's FIFO, a virtio console's
/// input buffer), as the console feeds it.
pub trait RxPort {
    /// Whether the receive FIFO has room for another byte.
    fn can_receive(&self) -> bool;
    /// Adds a byte; false if there was no room.
    fn receive(&mut self, byte: u8) -> bool;
    /// The level of the interrupt line it drives (false: none).
    fn irq_level(&self) -> bool {
        false
    }
}

impl RxPort for crate::vdev::pl011::Pl011 {
    fn can_receive(&self) -> bool {
        crate::vdev::pl011::Pl011::can_receive(self)
    }
    fn receive(&mut self, byte: u8) -> bool {
        crate::vdev::pl011::Pl011::receive(self, byte)
    }
    fn irq_level(&self) -> bool {
        crate::vdev::pl011::Pl011::irq_level(self)
    }
}

impl RxPort for crate::vdev::ns16550::Ns16550 {
    fn can_receive(&self) -> bool {
        crate::vdev::ns16550::Ns16550::can_receive(self)
    }
    fn receive(&mut self, byte: u8) -> bool {
        crate::vdev::ns16550::Ns16550::receive(self, byte)
    }
    fn irq_level(&self) -> bool {
        crate::vdev::ns16550::Ns16550::irq_level(self)
    }
}

/// Moves typed input into the VMs' UARTs: first the bytes held for a UART
/// that was full, in order, then every byte `read` yields from the physical
/// UART (escapes act at once; a byte for a full UART is held). `uart_of(i)`
/// is the UART of console `i`; `received(i, uart)` runs, under that UART's
/// lock, after bytes went in (the backend updates the interrupt line).
/// Lock order: a UART, then the multiplexer.
pub fn pump_input<'a, U: RxPort + ?Sized + 'a>(
    mux: &spin::Mutex<ConsoleMux>,
    uart_of: impl Fn(usize) -> Option<&'a spin::Mutex<U>>,
    mut read: impl FnMut() -> Option<u8>,
    mut received: impl FnMut(usize, &U),
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
    while let Some(b) = read() {
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
            InputAction::Say(text) => crate::klog::print(format_args!("{text}")),
            InputAction::None => {}
        }
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

    fn mux() -> ConsoleMux {
        let mut m = ConsoleMux::new();
        m.add_vm("alpha");
        m.add_vm("beta");
        m
    }

    fn write(m: &mut ConsoleMux, vm: usize, s: &str) -> Vec<String> {
        s.bytes().filter_map(|b| m.output(vm, b)).collect()
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
        // A focus message after a streamed prompt starts on a new line.
        write(&mut m, 0, "$ ");
        m.input(ESCAPE);
        assert!(
            matches!(m.input(b'?'), InputAction::Say(s) if s.starts_with("\nkestrel: consoles"))
        );
        // Ending a VM with an open line closes it.
        write(&mut m, 0, "x");
        assert_eq!(m.flush(0).as_deref(), Some("\n"));
        assert_eq!(m.flush(0), None);
    }

    #[test]
    fn long_lines_and_control_bytes() {
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
    fn input_follows_focus_and_escape_switches_it() {
        let mut m = mux();
        assert_eq!(m.input(b'a'), InputAction::Deliver { vm: 0, byte: b'a' });
        assert_eq!(m.input(ESCAPE), InputAction::None);
        assert!(matches!(m.input(b'1'), InputAction::Say(s) if s.contains("VM 1 (beta)")));
        assert_eq!(m.input(b'b'), InputAction::Deliver { vm: 1, byte: b'b' });
        m.input(ESCAPE);
        assert!(matches!(m.input(b'n'), InputAction::Say(_)));
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
        assert!(matches!(m.input(b'7'), InputAction::Say(s) if s.contains("no VM 7")));
        assert_eq!(m.focus(), 0);
        m.input(ESCAPE);
        assert!(
            matches!(m.input(b'?'), InputAction::Say(s) if s.contains("*0 alpha") && s.contains(" 1 beta"))
        );
        m.input(ESCAPE);
        assert_eq!(m.input(b'z'), InputAction::None);
        assert_eq!(m.input(b'z'), InputAction::Deliver { vm: 0, byte: b'z' });
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
        pump_input(&mux, |i| uarts.get(i), || typed.next(), |i, _| woke.push(i));
        assert_eq!(uarts[0].lock().0, b"he");
        assert!(mux.lock().has_held(0));
        assert_eq!(woke, [0, 0]);
        // The guest reads its FIFO; the next pump moves held bytes first.
        uarts[0].lock().0.clear();
        let mut more = [ESCAPE, b'1', b'!'].into_iter();
        pump_input(&mux, |i| uarts.get(i), || more.next(), |_, _| {});
        assert_eq!(uarts[0].lock().0, b"ll", "held bytes, in order");
        assert_eq!(
            uarts[1].lock().0,
            b"!",
            "the escape switched the focus at once"
        );
        uarts[0].lock().0.clear();
        pump_input(&mux, |i| uarts.get(i), || None, |_, _| {});
        assert_eq!(uarts[0].lock().0, b"o");
        assert!(!mux.lock().has_held(0));
    }

    #[test]
    fn no_vms_means_input_is_dropped() {
        let mut m = ConsoleMux::new();
        assert_eq!(m.input(b'a'), InputAction::None);
    }
}
