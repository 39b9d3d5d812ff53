//! The output buffers against a slow UART: one that takes a few bytes per
//! call, as a transmit FIFO at 115,200 baud does between two looks.

use super::*;
use alloc::string::ToString;
use alloc::vec;

/// A UART whose FIFO takes `per_call` bytes each time it is written (also
/// the fake of the terminal's tests, `vmm::terminal`).
pub(crate) struct Uart {
    pub out: Vec<u8>,
    per_call: usize,
    pub calls: usize,
}

impl Uart {
    pub fn new(per_call: usize) -> Uart {
        Uart {
            out: Vec::new(),
            per_call,
            calls: 0,
        }
    }

    pub fn write(&mut self, b: &[u8]) -> usize {
        self.calls += 1;
        let n = self.per_call.min(b.len());
        self.out.extend_from_slice(&b[..n]);
        n
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }
}

fn outbox(lines: bool, names: &[&str]) -> Outbox {
    let mut o = Outbox::new();
    o.set_lines(lines);
    for (i, n) in names.iter().enumerate() {
        o.add_vm(i, n);
    }
    o
}

/// Drains until nothing waits (a UART that keeps taking bytes).
fn drain_all(o: &mut Outbox, u: &mut Uart) {
    for _ in 0..1_000_000 {
        if o.drain(|b| u.write(b), DRAIN_MAX) == 0 {
            return;
        }
    }
    panic!("the drain never ended");
}

#[test]
fn a_write_only_queues_and_each_drain_takes_what_the_fifo_takes() {
    let mut o = outbox(false, &["a"]);
    o.push_vm(0, b"hello, world");
    assert_eq!(o.waiting(), 12);
    // A full FIFO: nothing moves, and the drain returns at once.
    let mut full = Uart::new(0);
    assert_eq!(o.drain(|b| full.write(b), DRAIN_MAX), 0);
    assert_eq!(full.calls, 1);
    // Three bytes of room: three bytes, one look.
    let mut u = Uart::new(3);
    assert_eq!(o.drain(|b| u.write(b), DRAIN_MAX), 3);
    assert_eq!(u.calls, 1);
    drain_all(&mut o, &mut u);
    assert_eq!(u.out, b"hello, world");
    assert!(o.is_empty());
    // The cap bounds a call even when the UART takes everything.
    o.push_vm(0, &[b'x'; 400]);
    let mut fast = Uart::new(usize::MAX);
    assert_eq!(o.drain(|b| fast.write(b), 100), 100);
}

#[test]
fn a_flood_loses_only_its_own_oldest_output_and_it_is_counted() {
    let mut o = outbox(true, &["flood", "quiet"]);
    o.set_vm_buffer(1024);
    let mut pushed = 0;
    for i in 0..200 {
        let line = alloc::format!("[flood] line {i:03} {}\r\n", "x".repeat(40));
        pushed += line.len() as u64;
        o.push_vm(0, line.as_bytes());
    }
    o.push_vm(1, b"[quiet] still here\r\n");
    o.push_log(b"[cpu0] INFO  kestrel's line\r\n");
    let c = o.counters(0);
    assert_eq!(c.queued, pushed);
    assert!(c.dropped > 0 && c.dropped < pushed, "{c:?}");
    assert!(
        o.waiting() <= 1024 + 20 + 40,
        "bounded: {} bytes wait",
        o.waiting()
    );
    assert_eq!(o.counters(1).dropped, 0, "the quiet VM lost nothing");
    let mut u = Uart::new(7);
    drain_all(&mut o, &mut u);
    let text = u.text();
    let lines: Vec<&str> = text.split("\r\n").collect();
    assert_eq!(lines[0], "[cpu0] INFO  kestrel's line", "kestrel's first");
    assert!(lines.contains(&"[quiet] still here"));
    // The flood kept its newest lines, and kestrel says what it lost.
    assert!(text.contains("[flood] line 199"));
    assert!(!text.contains("[flood] line 000"));
    let note = alloc::format!(
        "kestrel: VM 0 (flood): {} bytes of its output dropped",
        c.dropped
    );
    assert!(text.contains(&note), "{text}");
    // Whole lines only: every line is tagged or kestrel's.
    for l in lines.iter().filter(|l| !l.is_empty()) {
        assert!(
            l.starts_with("[flood] line ")
                || l.starts_with("[quiet] ")
                || l.starts_with("[cpu0] ")
                || l.starts_with("kestrel: "),
            "{l:?}"
        );
    }
}

#[test]
fn another_vms_line_and_kestrels_are_not_delayed_behind_a_flood() {
    let mut o = outbox(true, &["flood", "victim"]);
    // The flood fills its buffer before the victim says anything.
    for _ in 0..100 {
        o.push_vm(
            0,
            alloc::format!("[flood] {}\r\n", "y".repeat(100)).as_bytes(),
        );
    }
    let mut u = Uart::new(16);
    // The drain is in the middle of a flood line when the others write.
    o.drain(|b| u.write(b), DRAIN_MAX);
    assert!(!u.out.is_empty());
    o.push_vm(1, b"[victim] tick\r\n");
    o.push_log(b"[cpu1] INFO  a line of kestrel's\r\n");
    let before = u.out.len();
    let mut rounds = 0;
    while !u.text().contains("[victim] tick\r\n") {
        o.drain(|b| u.write(b), DRAIN_MAX);
        rounds += 1;
        assert!(rounds < 1000);
    }
    let taken = u.out.len() - before;
    // At most: the rest of the flood's piece under way, kestrel's line, and
    // one more piece of the flood (round-robin), then the victim's line.
    assert!(
        taken <= 2 * CHUNK_MAX + 64,
        "{taken} bytes went out before the victim's line"
    );
    let text = u.text();
    let k = text.find("a line of kestrel's").unwrap();
    let v = text.find("[victim] tick").unwrap();
    assert!(k < v, "kestrel's line first");
    assert!(
        k - before <= CHUNK_MAX + 2,
        "kestrel waited for {} bytes",
        k - before
    );
    // The flood's lines before and after stay whole.
    drain_all(&mut o, &mut u);
    for l in u.text().split("\r\n").filter(|l| !l.is_empty()) {
        assert!(
            l == "[victim] tick"
                || l == "[cpu1] INFO  a line of kestrel's"
                || *l == alloc::format!("[flood] {}", "y".repeat(100)),
            "{l:?}"
        );
    }
}

#[test]
fn log_mode_lines_stay_whole_and_tagged_across_sources() {
    let mut o = outbox(true, &["a", "b"]);
    let mut u = Uart::new(usize::MAX);
    // a's prompt stands, b's line ends it, a's next byte continues tagged.
    o.push_vm(0, b"[a] $ ");
    o.drain(|b| u.write(b), DRAIN_MAX);
    o.push_vm(1, b"\r\n[b] log\r\n");
    o.drain(|b| u.write(b), DRAIN_MAX);
    o.push_vm(0, b"l");
    o.push_vm(0, b"s\r\n");
    drain_all(&mut o, &mut u);
    assert_eq!(u.text(), "[a] $ \r\n[b] log\r\n[a] ls\r\n");
    // A line of b's that finds a's line open starts a new line.
    let mut u = Uart::new(usize::MAX);
    o.push_vm(0, b"[a] half");
    o.drain(|b| u.write(b), DRAIN_MAX);
    o.push_vm(1, b"[b] whole\r\n");
    o.push_log(b"[cpu0] INFO  log\r\n");
    drain_all(&mut o, &mut u);
    o.push_vm(0, b"\r\n");
    drain_all(&mut o, &mut u);
    assert_eq!(
        u.text(),
        "[a] half\r\n[cpu0] INFO  log\r\n[b] whole\r\n",
        "a's line end is dropped at a line start"
    );
    // A VM's bytes at a line start without its tag get it (a drop took
    // the piece with the tag): no untagged line.
    let mut u = Uart::new(usize::MAX);
    o.push_vm(0, b"kestrel: VM 1 powered off\r\n");
    drain_all(&mut o, &mut u);
    assert_eq!(u.text(), "[a] kestrel: VM 1 powered off\r\n");
    // kestrel's messages start a line of their own; their line-ending
    // lead is not an empty line.
    let mut u = Uart::new(usize::MAX);
    o.push_vm(1, b"[b] prompt ");
    drain_all(&mut o, &mut u);
    o.push_notice(b"kestrel: a notice\r\n");
    o.push_notice(b"\r\nkestrel: another\r\n");
    drain_all(&mut o, &mut u);
    assert_eq!(
        u.text(),
        "[b] prompt \r\nkestrel: a notice\r\nkestrel: another\r\n"
    );
}

#[test]
fn a_drop_never_cuts_a_vm_line_into_an_untagged_one() {
    let mut o = outbox(true, &["a"]);
    o.set_vm_buffer(64);
    let mut u = Uart::new(5);
    // A streamed line: the tag went in its own piece, the rest follows.
    o.push_vm(0, b"\r\n");
    o.drain(|b| u.write(b), DRAIN_MAX);
    o.push_vm(0, b"[a] k");
    for b in b"estrel: VM 1 (victim) powered off, the keyboard goes to it" {
        o.push_vm(0, &[*b]);
    }
    o.push_vm(0, b"\r\n");
    drain_all(&mut o, &mut u);
    assert!(o.counters(0).dropped > 0);
    for l in u.text().split("\r\n").filter(|l| !l.is_empty()) {
        assert!(
            l.starts_with("[a] ") || l.starts_with("kestrel: VM 0 (a): "),
            "{l:?} in {:?}",
            u.text()
        );
    }
}

#[test]
fn raw_mode_kestrel_speaks_after_a_bounded_part_of_the_vms_output() {
    let mut o = outbox(false, &["a", "b"]);
    // 10 KiB of screen output, in pieces, one of them under way.
    for i in 0..100u8 {
        o.push_vm(0, &[b'0' + i % 10; 100]);
    }
    let mut u = Uart::new(50);
    o.drain(|b| u.write(b), DRAIN_MAX);
    assert_eq!(u.out.len(), 50, "half of the first piece");
    o.push_notice(b"<notice>");
    let c = o.counters(0);
    assert!(c.dropped > 0);
    let mut u2 = Uart::new(usize::MAX);
    drain_all(&mut o, &mut u2);
    let text = u2.text();
    let (vm_part, notice) = text.split_at(text.len() - 8);
    assert_eq!(notice, "<notice>", "the notice is last");
    // The piece under way (five writes of 100 bytes) went out whole, then
    // at most NOTICE_KEEP bytes, the newest.
    let under_way = "0".repeat(50) + &"1".repeat(100) + &"2".repeat(100) + &"3".repeat(100);
    let under_way = under_way + &"4".repeat(100);
    assert!(vm_part.starts_with(&under_way), "{vm_part:?}");
    let kept = vm_part.len() - under_way.len();
    assert!(kept > 0 && kept <= NOTICE_KEEP, "{kept}");
    assert!(vm_part.ends_with(&"9".repeat(100)), "the newest kept");
    assert_eq!(
        c.dropped + (vm_part.len() + u.out.len()) as u64,
        100 * 100,
        "every byte written or counted"
    );
    // Nothing of the VM's comes after the notice: its later output does.
    o.push_vm(1, b"after");
    drain_all(&mut o, &mut u2);
    assert!(u2.text().ends_with("<notice>after"));
}

#[test]
fn a_replay_is_written_a_bounded_amount_per_call() {
    let mut o = outbox(false, &["a"]);
    let replay = vec![b'r'; 64 * 1024];
    o.push_notice(&replay);
    let mut u = Uart::new(usize::MAX);
    let mut calls = 0;
    loop {
        let n = o.drain(|b| u.write(b), DRAIN_MAX);
        assert!(n <= DRAIN_MAX);
        if n == 0 {
            break;
        }
        calls += 1;
    }
    assert_eq!(u.out, replay);
    assert_eq!(calls, replay.len().div_ceil(DRAIN_MAX));
    // A newer replay replaces one that has not started.
    let big = vec![b'1'; NOTICE_BUFFER - 10];
    o.push_notice(&big);
    o.push_notice(&[b'2'; 100]);
    assert_eq!(o.kestrel_dropped(), big.len() as u64);
    let mut u = Uart::new(usize::MAX);
    drain_all(&mut o, &mut u);
    assert!(u.text().starts_with("\r\nkestrel: "), "it says so");
    assert!(u.text().ends_with(&"2".repeat(100)));
}

#[test]
fn kestrels_log_is_bounded_too_and_says_what_it_dropped() {
    let mut o = outbox(false, &[]);
    let line = [b'l'; 1000];
    for _ in 0..100 {
        o.push_log(&line);
    }
    assert!(o.waiting() <= LOG_BUFFER);
    let dropped = o.kestrel_dropped();
    assert_eq!(dropped, 100 * 1000 - (LOG_BUFFER / 1000 * 1000) as u64);
    let mut u = Uart::new(usize::MAX);
    drain_all(&mut o, &mut u);
    assert!(u.text().starts_with(&alloc::format!(
        "kestrel: {dropped} bytes of kestrel's own messages"
    )));
}

#[test]
fn flush_writes_everything_or_gives_up_on_a_stalled_uart() {
    let o = Mutex::new(outbox(true, &["a"]));
    let d = Mutex::new(());
    o.lock().push_vm(0, b"[a] last words\r\n");
    o.lock().push_log(b"kestrel: work done\r\n");
    let mut u = Uart::new(3);
    let mut t = 0u64;
    assert!(flush_with(
        &o,
        &d,
        |b| u.write(b),
        || {
            t += 1;
            t
        },
        10,
        1000
    ));
    assert_eq!(u.text(), "kestrel: work done\r\n[a] last words\r\n");
    // A UART that takes nothing: given up after the stall time.
    o.lock().push_vm(0, b"[a] more\r\n");
    let mut t = 0u64;
    let mut stuck = Uart::new(0);
    assert!(!flush_with(
        &o,
        &d,
        |b| stuck.write(b),
        || {
            t += 1;
            t
        },
        10,
        1000
    ));
    assert!(t > 10 && t < 20, "{t}");
    // One that trickles: given up at the overall bound.
    let mut t = 0u64;
    let mut slow = Uart::new(1);
    let mut toggle = false;
    o.lock().push_vm(0, &[b'z'; 4000]);
    assert!(!flush_with(
        &o,
        &d,
        |b| {
            toggle = !toggle;
            if toggle {
                slow.write(b)
            } else {
                0
            }
        },
        || {
            t += 1;
            t
        },
        10,
        100
    ));
    assert!(t <= 103, "{t}");
}

#[test]
fn a_second_drainer_never_waits() {
    let o = Mutex::new(outbox(false, &["a"]));
    let d = Mutex::new(());
    o.lock().push_vm(0, b"x");
    let held = d.lock();
    let mut u = Uart::new(usize::MAX);
    assert_eq!(drain_with(&o, &d, |b| u.write(b), DRAIN_MAX), 0);
    assert_eq!(u.calls, 0);
    drop(held);
    assert_eq!(drain_with(&o, &d, |b| u.write(b), DRAIN_MAX), 1);
    // Writers only queue: pushing while a drain is under way elsewhere
    // needs the buffers' lock alone.
    let held = d.lock();
    o.lock().push_vm(0, b"y");
    drop(held);
}

#[test]
fn the_piece_under_way_is_never_dropped_and_ends_whole() {
    let mut o = outbox(false, &["a"]);
    o.set_vm_buffer(300);
    o.push_vm(0, b"\x1b[38;2;10;20;30m");
    let mut u = Uart::new(4);
    o.drain(|b| u.write(b), DRAIN_MAX);
    assert_eq!(u.out, b"\x1b[38");
    // A flood now: the sequence under way still ends whole.
    for _ in 0..50 {
        o.push_vm(0, &[b'.'; 100]);
    }
    let mut u2 = Uart::new(usize::MAX);
    o.drain(|b| u2.write(b), 12);
    assert_eq!(u2.out, b";2;10;20;30m");
}

#[test]
fn a_crash_writes_the_piece_under_way_and_kestrels_lines() {
    let mut o = outbox(false, &["a"]);
    o.push_vm(0, b"vm bytes");
    let mut u = Uart::new(2);
    o.drain(|b| u.write(b), DRAIN_MAX);
    o.push_log(b"ERROR the cause\r\n");
    o.push_notice(b"a replay");
    o.push_log(b"more\r\n");
    let mut out = Vec::new();
    o.crash_drain(|b| out.extend_from_slice(b));
    assert_eq!(
        String::from_utf8(out).unwrap(),
        " bytesERROR the cause\r\nmore\r\n".to_string()
    );
}

/// The memory the buffers hold is taken when a VM is added and does not
/// move with the traffic, floods and drops included: a restart's heap
/// figure (the reboot cases judge leaks by it) does not depend on how far
/// behind the UART was.
#[test]
fn the_buffers_memory_is_fixed_whatever_the_traffic() {
    let capacities = |o: &Outbox| {
        let q = |q: &Queue| (q.bytes.capacity(), q.chunks.capacity());
        (
            q(&o.kestrel),
            o.vms.iter().map(q).collect::<Vec<_>>(),
            o.prefix.capacity(),
        )
    };
    for lines in [false, true] {
        let mut o = outbox(lines, &["a", "b"]);
        let before = capacities(&o);
        assert!(before
            .1
            .iter()
            .all(|&(b, c)| b >= VM_BUFFER && c >= VM_CHUNKS));
        assert!(before.0 .0 >= KESTREL_RESERVE && before.0 .1 >= KESTREL_CHUNKS);
        let mut u = Uart::new(3);
        for round in 0..3000 {
            // Pieces of every size, some that cannot share a chunk, a
            // flood past the buffer, kestrel's lines past its bound.
            let piece = vec![b'x'; 1 + round % 700];
            o.push_vm(round % 2, &piece);
            o.push_vm(0, b"\r\n");
            o.push_log(format!("[cpu0] INFO  line {round}\r\n").as_bytes());
            if round % 97 == 0 {
                o.push_notice(b"kestrel: a notice\r\n");
            }
            o.drain(|b| u.write(b), 16);
        }
        drain_all(&mut o, &mut u);
        assert_eq!(capacities(&o), before, "log mode {lines}");
        assert!(o.counters(0).dropped > 0, "the flood overran the buffer");
        assert!(u.text().contains("kestrel's own messages dropped"));
    }
}

/// The modelled line: a 32-byte FIFO that empties a byte per ten bit
/// times. At 115200 baud a byte takes 86,805 ns, so a full FIFO has room
/// again byte by byte at that pace, and a writer that asks for more only
/// gets what the line carried meanwhile.
#[test]
fn a_paced_line_takes_what_its_fifo_has_room_for() {
    let mut l = Line::new(115_200);
    assert_eq!(l.byte_ns, 86_805);
    assert_eq!(l.room(0), LINE_FIFO as usize);
    l.wrote(1_000, 32);
    assert_eq!(l.room(1_000), 0);
    // One byte's time later, one byte of room; the whole FIFO's, all.
    assert_eq!(l.room(1_000 + 86_805), 1);
    assert_eq!(l.room(1_000 + 86_805 * 10 + 1), 10);
    assert_eq!(l.room(1_000 + 86_805 * 32), 32);
    // Writing into a partly empty FIFO queues behind what is left.
    let t = 1_000 + 86_805 * 16;
    l.wrote(t, 16);
    assert_eq!(l.room(t), 0);
    // An idle line starts from now, not from when it went idle.
    let later = 10_000_000_000;
    l.wrote(later, 1);
    assert_eq!(l.idle_at, later + 86_805);
    // Over a second of writes as fast as it takes them: the line's rate.
    let mut l = Line::new(115_200);
    let (mut now, mut sent) = (0u64, 0usize);
    while now < 1_000_000_000 {
        let n = l.room(now);
        l.wrote(now, n);
        sent += n;
        now += 1_000_000;
    }
    assert!((11_500..=11_560).contains(&sent), "{sent} bytes in 1 s");
}

/// The timed drain: after a drain that leaves output waiting, the next is
/// due when the modelled FIFO has room for [`WAKE_ROOM`] bytes; none is
/// due once nothing waits; an unmodelled UART is looked at again
/// [`RETRY_NS`] later.
#[test]
fn the_next_drain_is_due_when_the_fifo_has_room() {
    let mut p = Pacer::new();
    p.line = Some(Line::new(115_200));
    let byte = 86_805;
    assert_eq!(p.room(0, 100), 32);
    p.wrote(0, 32);
    assert_eq!(p.room(0, 100), 0);
    // 24 bytes' time later the FIFO has room for 24.
    let at = p.after(0, 32, true).expect("output waits");
    assert_eq!(at, 32 * byte - 8 * byte);
    assert_eq!(p.room(at, 100), WAKE_ROOM);
    assert_eq!(p.room(at - 1, 100), WAKE_ROOM - 1);
    // Nothing waits: no drain due.
    assert_eq!(p.after(at, 24, false), None);
    // A drain that is late is due at once.
    p.wrote(at, 24);
    assert_eq!(p.after(10 * at, 0, true), Some(10 * at));
    // No model: a UART that took less than offered is looked at again
    // RETRY_NS later.
    let mut q = Pacer::new();
    assert_eq!(q.room(5, 100), 100);
    assert_eq!(q.after(5, 16, true), Some(5 + RETRY_NS));
    assert_eq!(ns_to_counter(1_000_000_000, 62_500_000), 62_500_000);
    assert_eq!(ns_to_counter(1, 62_500_000), 1);
    assert_eq!(ns_to_counter(RETRY_NS, 1_000_000_000), RETRY_NS);
}

/// A drain run at each time it asks for keeps a 115200-baud line busy:
/// over a 64 KiB backlog the rate measured while output waits is the
/// line's (11,520 bytes/s) within a percent, though each drain comes
/// 100 µs late; a drain that only comes at a 100 Hz tick moves one FIFO
/// per tick (3,200 bytes/s).
#[test]
fn a_timed_drain_keeps_the_line_busy_and_its_rate_is_measured() {
    fn run(timed: bool) -> DrainRate {
        let mut p = Pacer::new();
        p.line = Some(Line::new(115_200));
        let mut backlog = 64 * 1024usize;
        let mut now = 1_000_000u64;
        let mut next = Some(now);
        while backlog > 0 {
            let at = match next {
                Some(at) if timed => at + 100_000,
                _ => now + 10_000_000,
            };
            now = at.max(now);
            let n = p.room(now, backlog.min(DRAIN_MAX));
            p.wrote(now, n);
            backlog -= n;
            next = p.after(now, n, backlog > 0);
        }
        p.rate(now)
    }
    let timed = run(true);
    let per_s = timed.per_second();
    assert!((11_400..=11_600).contains(&per_s), "{per_s} bytes/s");
    assert!(timed.bytes >= 64 * 1024 - 32);
    let ticked = run(false).per_second();
    assert!((3_150..=3_250).contains(&ticked), "{ticked} bytes/s");
}

/// The rate counts only stretches with output waiting: an idle console
/// between two bursts adds no time.
#[test]
fn the_drain_rate_leaves_idle_time_out() {
    let mut p = Pacer::new();
    assert_eq!(p.after(0, 10, false), None);
    assert_eq!(p.rate(1_000), DrainRate::default());
    p.after(1_000, 32, true);
    p.after(2_000, 32, true);
    p.after(3_000, 32, false);
    // Idle for a long time, then a second burst.
    p.after(1_000_000, 32, true);
    assert_eq!(p.rate(1_500_000).ns, 2_000 + 500_000);
    p.after(2_000_000, 100, false);
    let r = p.rate(5_000_000);
    assert_eq!(
        r,
        DrainRate {
            bytes: 164,
            ns: 1_002_000
        }
    );
    assert_eq!(r.per_second(), 163_672);
    assert_eq!(DrainRate::default().per_second(), 0);
}
