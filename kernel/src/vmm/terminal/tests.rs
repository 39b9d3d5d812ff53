//! The multiplexer and the output buffers together, against a UART that
//! takes a few bytes per look (115,200 baud seen from a busy pCPU).

use super::*;
use crate::base::conout::tests::Uart;
use crate::base::conout::{self, Outbox, Source};
use crate::vmm::console::{InputAction, Out, ESCAPE};
use alloc::string::String;

struct Console {
    mux: Mutex<ConsoleMux>,
    outbox: Mutex<Outbox>,
    drainer: Mutex<()>,
}

impl Console {
    fn new(mode: Mode, scrollback: usize) -> Console {
        let c = Console {
            mux: Mutex::new(ConsoleMux::with_mode(mode, scrollback)),
            outbox: Mutex::new(Outbox::new()),
            drainer: Mutex::new(()),
        };
        c.outbox.lock().set_lines(mode == Mode::Log);
        for name in ["alpha", "beta"] {
            let i = c.mux.lock().add_vm(name);
            c.outbox.lock().add_vm(i, name);
        }
        c
    }

    /// A guest's console write, as the exit makes it: queue, then a
    /// bounded drain. Returns the UART bytes that drain wrote.
    fn exit_write(&self, vm: usize, bytes: &[u8], u: &mut Uart) -> usize {
        let queued = write_vm(&self.mux, &self.outbox, vm, false, bytes);
        conout::drain_with(
            &self.outbox,
            &self.drainer,
            |b| u.write(b),
            queued + conout::DRAIN_EXTRA,
        )
    }

    /// kestrel's answer to a typed byte, queued as `pump_input` does.
    fn key(&self, byte: u8) {
        let mut m = self.mux.lock();
        if let InputAction::Say(out) | InputAction::Resume { out, .. } = m.input(byte) {
            crate::vmm::console::queue(&mut self.outbox.lock(), Source::Kestrel, &out);
        }
    }

    fn log(&self, line: &str) {
        self.outbox.lock().push_log(line.as_bytes());
    }

    fn tick(&self, u: &mut Uart) -> usize {
        conout::drain_with(
            &self.outbox,
            &self.drainer,
            |b| u.write(b),
            conout::DRAIN_MAX,
        )
    }

    fn drain_all(&self, u: &mut Uart) {
        for _ in 0..100_000 {
            if self.outbox.lock().is_empty() {
                return;
            }
            self.tick(u);
        }
        panic!("never drained");
    }
}

#[test]
fn a_guests_console_write_never_waits_for_the_uart() {
    let c = Console::new(Mode::Log, 1024);
    // A UART held off by flow control: it takes nothing, ever.
    let mut stuck = Uart::new(0);
    let flood = alloc::format!("{}\n", "z".repeat(200)).repeat(100);
    for chunk in flood.as_bytes().chunks(128) {
        assert_eq!(c.exit_write(0, chunk, &mut stuck), 0);
    }
    // One look at the FIFO per exit that had something to say, no more.
    assert!(
        stuck.calls <= flood.len() / 128 + 1,
        "{} looks",
        stuck.calls
    );
    // The VM's buffer is bounded; what did not fit is counted.
    let o = c.outbox.lock();
    assert!(o.waiting() <= conout::VM_BUFFER + conout::CHUNK_MAX);
    let counters = o.counters(0);
    assert_eq!(
        counters.queued,
        100 * "[alpha] \r\n".len() as u64 + 100 * 200
    );
    assert!(counters.dropped > 0 || o.waiting() as u64 == counters.queued);
}

#[test]
fn a_flood_delays_neither_another_vms_line_nor_kestrels() {
    let c = Console::new(Mode::Log, 1024);
    // 16 bytes per look: a FIFO at 115,200 baud looked at every 1.4 ms.
    let mut u = Uart::new(16);
    let line = alloc::format!("{}\n", "f".repeat(120));
    for _ in 0..300 {
        c.exit_write(0, line.as_bytes(), &mut u);
    }
    assert!(
        c.outbox.lock().counters(0).dropped > 0,
        "the flood overflowed"
    );
    let before = u.out.len();
    c.exit_write(1, b"tick 1\n", &mut u);
    c.log("[cpu1] INFO  kestrel's line\r\n");
    while !u.text().contains("[beta] tick 1\r\n") {
        c.tick(&mut u);
    }
    let after = u.text()[before..].to_string();
    assert!(
        after.len() <= 2 * conout::CHUNK_MAX + 64,
        "{} bytes before beta's line",
        after.len()
    );
    let k = after
        .find("[cpu1] INFO  kestrel's line")
        .expect("kestrel's line");
    assert!(k <= conout::CHUNK_MAX, "kestrel's line after {k} bytes");
    // Every line on the terminal is tagged, kestrel's, or kestrel's word
    // on the flood's drops.
    c.drain_all(&mut u);
    for l in u.text().split("\r\n").filter(|l| !l.is_empty()) {
        assert!(
            l.starts_with("[alpha] ffff")
                || l == "[beta] tick 1"
                || l.starts_with("[cpu1] ")
                || l.starts_with("kestrel: VM 0 (alpha): "),
            "{l:?}"
        );
    }
}

#[test]
fn a_focus_switch_replays_a_bounded_amount_per_drain_and_the_notice_is_last() {
    let c = Console::new(Mode::Raw, 16 * 1024);
    let mut u = Uart::new(usize::MAX);
    // beta fills its scrollback while alpha has the keyboard; alpha's own
    // output is still on its way when the operator switches.
    for i in 0..1100 {
        c.exit_write(1, alloc::format!("beta line {i:04}\r\n").as_bytes(), &mut u);
    }
    let mut slow = Uart::new(8);
    for _ in 0..50 {
        c.exit_write(0, b"alpha's screen output\r\n", &mut slow);
    }
    c.key(ESCAPE);
    c.key(b'1');
    let mut u = Uart::new(usize::MAX);
    let mut calls = 0;
    while !c.outbox.lock().is_empty() {
        let n = c.tick(&mut u);
        assert!(n <= conout::DRAIN_MAX, "{n} bytes in one drain");
        calls += 1;
    }
    assert!(calls >= 16 * 1024 / conout::DRAIN_MAX, "{calls} drains");
    let text = u.text();
    assert!(text.contains("beta line 1099\r\n"), "the replay went out");
    let notice = text.rfind("console input now goes to VM 1 (beta)").unwrap();
    assert!(
        !text[notice..].contains("alpha's") && !text[notice..].contains("beta line"),
        "nothing of a VM's after the notice"
    );
    // alpha's output that was waiting went out before the replay, or was
    // dropped and counted.
    let c0 = c.outbox.lock().counters(0);
    let shown = (slow.text() + &text)
        .matches("alpha's screen output")
        .count();
    assert_eq!(
        c0.dropped + (shown * "alpha's screen output\r\n".len()) as u64,
        c0.queued,
        "{c0:?}, {shown} shown"
    );
}

#[test]
fn the_notice_answering_a_key_is_not_held_up_behind_the_focused_vms_flood() {
    let c = Console::new(Mode::Raw, 4096);
    let mut slow = Uart::new(8);
    for _ in 0..2000 {
        c.exit_write(0, b"flooding the terminal ", &mut slow);
    }
    c.key(ESCAPE);
    c.key(b'?');
    let mut u = Uart::new(16);
    let mut looks = 0;
    while !u.text().contains("Ctrl-] then:") {
        c.tick(&mut u);
        looks += 1;
        assert!(looks < 10_000);
    }
    assert!(
        u.out.len() <= conout::NOTICE_KEEP + conout::CHUNK_MAX + 512,
        "{} bytes before the answer",
        u.out.len()
    );
}

#[test]
fn kestrels_messages_queue_without_writing() {
    let c = Console::new(Mode::Log, 1024);
    let out = c.mux.lock().say("kestrel: hello");
    let n = crate::vmm::console::queue(&mut c.outbox.lock(), Source::Kestrel, &out);
    assert_eq!(n, "kestrel: hello\r\n".len());
    assert_eq!(out, Out::Text(String::from("kestrel: hello\n")));
    let mut u = Uart::new(usize::MAX);
    c.drain_all(&mut u);
    assert_eq!(u.text(), "kestrel: hello\r\n");
}
