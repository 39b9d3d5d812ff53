//! The console's output on its way to the physical UART. What kestrel and
//! each VM have to say waits in a bounded buffer of its own ([`Outbox`])
//! and is moved to the UART at the UART's pace ([`drain`]): as many bytes
//! as its transmit FIFO takes now ([`Platform::console_try_write`]), never
//! by waiting for it, and never with a lock held across a write that could
//! wait.
//!
//! - **Each VM's buffer** ([`VM_BUFFER`] bytes) holds what the console
//!   multiplexer (`vmm::console`) decided to write for it: tagged lines in
//!   log mode, filtered terminal output in raw mode. A VM that writes
//!   faster than the UART drains loses its own oldest output, in whole
//!   pieces as the multiplexer made them (a line, an escape sequence),
//!   never the piece already being written; the bytes are counted per VM
//!   ([`Outbox::counters`]).
//! - **kestrel's queue** comes first: its log lines (`klog`, at most
//!   [`LOG_BUFFER`] bytes waiting) and its console messages (notices,
//!   answers, scrollback replays, at most [`NOTICE_BUFFER`]). The drain
//!   takes it before any VM's buffer, so a kestrel line waits behind at
//!   most the piece of VM output already being written. In raw mode a
//!   message of kestrel's follows at most [`NOTICE_KEEP`] bytes of the
//!   VMs' waiting output (the rest is dropped and counted), so it is
//!   neither held up behind a flood nor followed by older VM output.
//! - **The drain** writes one piece at a time, to its end, and goes round
//!   the VMs' buffers a piece each, so one VM's flood does not hold up
//!   another VM's line. Whoever drains holds a token (`DRAINER`, taken
//!   with a try-lock: two pCPUs never wait for each other to drain) and
//!   takes the buffers' lock only to copy a few bytes out and to account
//!   for what the UART took.
//! - **When it runs**: after each console write, and at the time the UART
//!   has room again ([`wake_at`], [`Pacer::after`]): a drain that leaves
//!   output waiting says when the next is due (on a paced line when the
//!   modelled FIFO has room for [`WAKE_ROOM`] bytes, otherwise
//!   [`RETRY_NS`] later), and the boot CPU, which owns the timed drain,
//!   arms its timer for it without ending the time slice of the vCPU it
//!   runs. So the line is kept busy while output waits, whatever the
//!   guests do, and no one waits for it. How fast it went is measured
//!   ([`drain_rate`]).
//!
//! In log mode ([`Outbox::set_lines`]) the drain also keeps the lines
//! whole and tagged whatever it interleaves: a VM's output that starts a
//! terminal line starts with its tag (`[name] `), a piece that finds
//! another source's line open starts a new line, and where a VM's output
//! was dropped kestrel says so on a line of its own. So a VM cannot get an
//! untagged line out of a drop or of the round-robin.
//!
//! **A line slower than its UART** ([`set_baud`], `kestrel.baud=`): QEMU's
//! UARTs take bytes as fast as they come, a board's at its line rate. With
//! a rate set, the drain writes no more than a UART at that rate would
//! take by then: a [`LINE_FIFO`]-byte transmit FIFO emptying at one byte
//! per ten bit times ([`Line`]). It is how the tests give QEMU a board's
//! slow console, and on a board it changes nothing the UART's own flow
//! control does not. Only the asynchronous drain is paced: at boot and at
//! the end kestrel waits for the UART itself, and pacing QEMU's there
//! would only make the tests spin.
//!
//! kestrel writes synchronously while it boots and when it ends
//! ([`set_async`]): then every line is flushed before the call returns, as
//! the boot and the final status need. Crash dumps do not go through here
//! (`klog::print_unlocked`), but first write what is queued if they can
//! ([`crash_flush`]).
//!
//! [`Platform::console_try_write`]: crate::base::platform::Platform::console_try_write

use crate::base::lock::Mutex;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::clock;

/// Bytes of output each VM may have waiting for the UART; beyond it the
/// VM's oldest waiting output is dropped.
pub const VM_BUFFER: usize = 16 * 1024;
/// Bytes of kestrel's log lines that may wait; beyond it the oldest lines
/// waiting are dropped (and kestrel says how many bytes).
pub const LOG_BUFFER: usize = 64 * 1024;
/// Bytes of kestrel's console messages that may wait: one scrollback
/// replay of the largest size (1 MiB) and its notice; an older replay
/// still waiting when a new one comes is dropped.
pub const NOTICE_BUFFER: usize = (1 << 20) + 64 * 1024;
/// Pieces of output each VM may have waiting (its consecutive writes
/// share a piece up to [`CHUNK_MAX`] bytes, so only a pathological mix
/// of pieces reaches this before [`VM_BUFFER`]); beyond it the VM's oldest
/// piece is dropped.
pub const VM_CHUNKS: usize = 2 * VM_BUFFER / CHUNK_MAX;
/// Pieces of kestrel's own output that may wait (a log line is one);
/// beyond it the oldest piece of the same kind is dropped.
pub const KESTREL_CHUNKS: usize = 1024;
/// Bytes of kestrel's queue held from its first use: the log lines and a
/// few notices. Only a scrollback replay (asked for by the operator) makes
/// the queue allocate more, up to [`NOTICE_BUFFER`].
const KESTREL_RESERVE: usize = LOG_BUFFER + 2 * NOTICE_KEEP;
/// Bytes held for what goes before a piece (a line end, a tag, a note on
/// drops).
const PREFIX_RESERVE: usize = 256;
/// Bytes a drain copies out of the buffers at a time (the buffers' lock
/// is taken once to copy them, once to account for what the UART took).
const PIECE: usize = 256;
/// A VM's consecutive outputs are kept together up to this many bytes: the
/// piece the drain writes before it looks at other buffers, and the unit
/// the VM's drops take.
pub const CHUNK_MAX: usize = 512;
/// Raw mode: when kestrel speaks, the newest bytes of VM output still
/// waiting that go out before its message (the rest is dropped: the
/// message is not held up behind a flood, and nothing a VM wrote comes
/// after it).
pub const NOTICE_KEEP: usize = 1024;
/// Most bytes one drain moves to the UART (the boot CPU's tick and idle
/// drains).
pub const DRAIN_MAX: usize = 2048;
/// What a drain after a write moves beyond that write's own bytes.
pub const DRAIN_EXTRA: usize = 256;
/// Bytes the modelled UART's transmit FIFO holds ([`Line`]): a PL011's.
pub const LINE_FIFO: u64 = 32;
/// Line rates `kestrel.baud=` accepts, in bits per second.
pub const BAUD_RANGE: core::ops::RangeInclusive<u32> = 1200..=4_000_000;
/// How long a synchronous flush waits for a UART that takes nothing.
pub const STALL_NS: u64 = 1_000_000_000;
/// How long the final flush ([`set_async`] `false`) takes at most.
pub const FLUSH_MAX_NS: u64 = 30_000_000_000;

/// Who wrote a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Kestrel,
    /// The VM with this console number (its slot).
    Vm(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// kestrel's log lines (`klog`).
    Log,
    /// kestrel's console messages: notices, answers, replays.
    Notice,
    /// A VM's output.
    Vm,
}

#[derive(Clone, Copy, Debug)]
struct Chunk {
    len: usize,
    kind: Kind,
}

/// One source's waiting output: its bytes, cut into the pieces the drain
/// writes whole.
struct Queue {
    /// The bytes not yet written, oldest first.
    bytes: VecDeque<u8>,
    chunks: VecDeque<Chunk>,
    /// Bytes of the first chunk already written (or skipped).
    head_done: usize,
    /// Bytes dropped, in all.
    dropped: u64,
    /// Bytes dropped since kestrel last said so (log mode).
    unreported: u64,
    /// Bytes queued, in all.
    queued: u64,
    /// The VM's name.
    name: String,
    /// Its tag in log mode: `[name] `.
    tag: Vec<u8>,
}

/// A VM's console output counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes its output put in its buffer.
    pub queued: u64,
    /// Bytes of it dropped because its buffer was full.
    pub dropped: u64,
}

impl Queue {
    const fn new() -> Queue {
        Queue {
            bytes: VecDeque::new(),
            chunks: VecDeque::new(),
            head_done: 0,
            dropped: 0,
            unreported: 0,
            queued: 0,
            name: String::new(),
            tag: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Holds room for `bytes` bytes in `chunks` pieces from now on, so the
    /// queue does not allocate while it stays within its bounds (its
    /// memory is the same whatever the traffic was: a restart's heap
    /// figure does not move with the console's backlog).
    fn hold(&mut self, bytes: usize, chunks: usize) {
        if self.bytes.capacity() < bytes {
            self.bytes.reserve_exact(bytes - self.bytes.len());
        }
        if self.chunks.capacity() < chunks {
            self.chunks.reserve_exact(chunks - self.chunks.len());
        }
    }

    /// Bytes of `kind` (any kind: `None`) waiting.
    fn waiting(&self, kind: Option<Kind>) -> usize {
        match kind {
            None => self.bytes.len(),
            Some(k) => {
                let all: usize = self
                    .chunks
                    .iter()
                    .filter(|c| c.kind == k)
                    .map(|c| c.len)
                    .sum();
                let head = self.chunks.front().filter(|c| c.kind == k);
                all - head.map_or(0, |_| self.head_done)
            }
        }
    }

    /// Appends `bytes` as a chunk of `kind`, or to the last chunk when
    /// `coalesce` allows and that chunk is not being written (`busy`: the
    /// first chunk is).
    fn push(&mut self, bytes: &[u8], kind: Kind, coalesce: bool, busy: bool) {
        if bytes.is_empty() {
            return;
        }
        self.bytes.extend(bytes.iter().copied());
        self.queued += bytes.len() as u64;
        let last_busy = busy && self.chunks.len() == 1;
        if let Some(last) = self.chunks.back_mut() {
            if coalesce && !last_busy && last.kind == kind && last.len + bytes.len() <= CHUNK_MAX {
                last.len += bytes.len();
                return;
            }
        }
        self.chunks.push_back(Chunk {
            len: bytes.len(),
            kind,
        });
    }

    /// Removes the oldest chunk of `kind` (any: `None`) that is not being
    /// written (`busy`: the first is); returns its length.
    fn remove_oldest(&mut self, kind: Option<Kind>, busy: bool) -> Option<usize> {
        let mut offset = 0;
        for (i, c) in self.chunks.iter().enumerate() {
            let left = if i == 0 {
                c.len - self.head_done
            } else {
                c.len
            };
            if (i > 0 || !busy) && kind.is_none_or(|k| k == c.kind) {
                let len = c.len;
                self.bytes.drain(offset..offset + left);
                self.chunks.remove(i);
                if i == 0 {
                    self.head_done = 0;
                }
                return Some(len);
            }
            offset += left;
        }
        None
    }

    /// [`Queue::remove_oldest`], counted as dropped.
    fn drop_oldest(&mut self, kind: Option<Kind>, busy: bool) -> bool {
        match self.remove_oldest(kind, busy) {
            Some(n) => {
                self.dropped += n as u64;
                self.unreported += n as u64;
                true
            }
            None => false,
        }
    }

    /// kestrel's queue: makes room for one more piece within
    /// [`KESTREL_CHUNKS`], dropping its oldest log line, or failing one its
    /// oldest piece of any kind (never the one being written).
    fn room_for_a_chunk(&mut self, busy: bool) {
        while self.chunks.len() >= KESTREL_CHUNKS
            && (self.drop_oldest(Some(Kind::Log), busy) || self.drop_oldest(None, busy))
        {}
    }

    /// Whether the first chunk's bytes still waiting start with `prefix`.
    fn head_starts_with(&self, prefix: &[u8]) -> bool {
        let left = self.chunks.front().map_or(0, |c| c.len - self.head_done);
        left >= prefix.len() && self.bytes.iter().zip(prefix).all(|(a, b)| a == b)
    }

    /// Skips the first chunk's leading CR and LF bytes.
    fn skip_line_ends(&mut self) {
        let Some(c) = self.chunks.front() else { return };
        while self.head_done < c.len && matches!(self.bytes.front(), Some(b'\r' | b'\n')) {
            self.bytes.pop_front();
            self.head_done += 1;
        }
    }
}

/// Every source's waiting output and the drain's place in it. Free of
/// hardware: the drain writes through a function it is given.
pub struct Outbox {
    kestrel: Queue,
    vms: Vec<Queue>,
    /// Log mode: keep lines whole and tagged (see the module doc).
    lines: bool,
    /// The source whose first chunk is being written.
    current: Option<Source>,
    /// What goes before the current chunk (a line end, a tag, a note).
    prefix: Vec<u8>,
    prefix_done: usize,
    /// The last byte written (a line end at first).
    last: u8,
    /// Who wrote the terminal's current line, while it is not ended.
    owner: Option<Source>,
    /// The VM whose buffer the round-robin took last.
    rr: usize,
    vm_buffer: usize,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    pub const fn new() -> Outbox {
        Outbox {
            kestrel: Queue::new(),
            vms: Vec::new(),
            lines: false,
            current: None,
            prefix: Vec::new(),
            prefix_done: 0,
            last: b'\n',
            owner: None,
            rr: 0,
            vm_buffer: VM_BUFFER,
        }
    }

    /// Log mode (`true`): VM output is tagged lines, kept whole and tagged.
    pub fn set_lines(&mut self, lines: bool) {
        self.lines = lines;
    }

    /// Each VM's buffer size (tests use small ones).
    pub fn set_vm_buffer(&mut self, bytes: usize) {
        self.vm_buffer = bytes;
    }

    /// VM `vm` (its console number) is called `name`.
    /// Its buffer's memory is taken now, and kestrel's queue's if it was
    /// not yet: output within the bounds never allocates.
    pub fn add_vm(&mut self, vm: usize, name: &str) {
        let cap = self.vm_buffer;
        if self.prefix.capacity() < PREFIX_RESERVE {
            self.prefix.reserve_exact(PREFIX_RESERVE);
        }
        self.kestrel.hold(KESTREL_RESERVE, KESTREL_CHUNKS);
        let q = self.queue_mut(vm);
        q.hold(cap, VM_CHUNKS);
        q.name = String::from(name);
        q.tag.clear();
        let _ = write!(Bytes(&mut q.tag), "[{name}] ");
    }

    fn queue_mut(&mut self, vm: usize) -> &mut Queue {
        if self.vms.len() <= vm {
            self.vms.resize_with(vm + 1, Queue::new);
        }
        &mut self.vms[vm]
    }

    fn queue(&mut self, src: Source) -> &mut Queue {
        match src {
            Source::Kestrel => &mut self.kestrel,
            Source::Vm(i) => self.queue_mut(i),
        }
    }

    /// VM `vm`'s output counters.
    pub fn counters(&self, vm: usize) -> Counters {
        self.vms.get(vm).map_or(Counters::default(), |q| Counters {
            queued: q.queued,
            dropped: q.dropped,
        })
    }

    /// Bytes of kestrel's own output dropped.
    pub fn kestrel_dropped(&self) -> u64 {
        self.kestrel.dropped
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.current.is_none() && self.kestrel.is_empty() && self.vms.iter().all(Queue::is_empty)
    }

    /// Bytes waiting, every source's.
    pub fn waiting(&self) -> usize {
        self.kestrel.bytes.len() + self.vms.iter().map(|q| q.bytes.len()).sum::<usize>()
    }

    /// VM `vm` wrote `bytes` (whole pieces of its output as the multiplexer
    /// made them). Its oldest waiting output makes room if it must.
    pub fn push_vm(&mut self, vm: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let busy = self.current == Some(Source::Vm(vm));
        let cap = self.vm_buffer;
        let q = self.queue_mut(vm);
        q.hold(cap, VM_CHUNKS);
        while (q.bytes.len() + bytes.len() > cap || q.chunks.len() >= VM_CHUNKS)
            && q.drop_oldest(None, busy)
        {}
        q.push(bytes, Kind::Vm, true, busy);
    }

    /// A line (or lines) of kestrel's log.
    pub fn push_log(&mut self, bytes: &[u8]) {
        let busy = self.current == Some(Source::Kestrel);
        let q = &mut self.kestrel;
        q.hold(KESTREL_RESERVE, KESTREL_CHUNKS);
        while q.waiting(Some(Kind::Log)) + bytes.len() > LOG_BUFFER
            && q.drop_oldest(Some(Kind::Log), busy)
        {}
        q.room_for_a_chunk(busy);
        q.push(bytes, Kind::Log, false, busy);
    }

    /// A console message of kestrel's (a notice, an answer, a replay). In
    /// raw mode it follows at most [`NOTICE_KEEP`] bytes of the VMs'
    /// waiting output, the newest, and the rest is dropped.
    pub fn push_notice(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if !self.lines {
            self.before_notice();
        }
        let busy = self.current == Some(Source::Kestrel);
        let q = &mut self.kestrel;
        q.hold(KESTREL_RESERVE, KESTREL_CHUNKS);
        while q.waiting(Some(Kind::Notice)) + bytes.len() > NOTICE_BUFFER
            && q.drop_oldest(Some(Kind::Notice), busy)
        {}
        q.room_for_a_chunk(busy);
        q.push(bytes, Kind::Notice, false, busy);
    }

    /// Raw mode, before kestrel's message: the VMs' waiting output goes
    /// ahead of it in kestrel's queue, [`NOTICE_KEEP`] bytes at most.
    fn before_notice(&mut self) {
        let current = self.current;
        let mut keep = NOTICE_KEEP;
        for (i, q) in self.vms.iter_mut().enumerate() {
            let busy = current == Some(Source::Vm(i));
            let first = usize::from(busy);
            // The newest chunks that fit.
            let mut kept = 0;
            let mut bytes = 0;
            for c in q.chunks.iter().skip(first).rev() {
                if bytes + c.len > keep {
                    break;
                }
                bytes += c.len;
                kept += 1;
            }
            keep -= bytes;
            while q.chunks.len() > first + kept {
                q.drop_oldest(None, busy);
            }
            while q.chunks.len() > first {
                let c = q.chunks[first];
                let skip = if first == 1 {
                    q.chunks[0].len - q.head_done
                } else {
                    0
                };
                let moved: Vec<u8> = q.bytes.range(skip..skip + c.len).copied().collect();
                q.remove_oldest(None, busy);
                let busy_k = current == Some(Source::Kestrel);
                self.kestrel.room_for_a_chunk(busy_k);
                self.kestrel.push(&moved, Kind::Vm, false, busy_k);
            }
        }
    }

    /// Picks the next chunk to write if none is under way. False: nothing
    /// waits.
    fn select(&mut self) -> bool {
        if self.current.is_some() {
            return true;
        }
        let src = if !self.kestrel.is_empty() {
            Source::Kestrel
        } else {
            let n = self.vms.len();
            let Some(i) = (1..=n)
                .map(|k| (self.rr + k) % n)
                .find(|&i| !self.vms[i].is_empty())
            else {
                return false;
            };
            self.rr = i;
            Source::Vm(i)
        };
        self.current = Some(src);
        self.prefix.clear();
        self.prefix_done = 0;
        self.prepare(src);
        true
    }

    /// What goes before `src`'s next chunk: a word on its drops, and in
    /// log mode a line end and its tag where the terminal needs them.
    fn prepare(&mut self, src: Source) {
        let lines = self.lines;
        let mut mid = self.last != b'\n';
        let mut owner = self.owner;
        let mut prefix = core::mem::take(&mut self.prefix);
        let q = self.queue(src);
        if q.unreported > 0 && (lines || src == Source::Kestrel) {
            if mid {
                prefix.extend_from_slice(b"\r\n");
            }
            let _ = match src {
                Source::Kestrel => write!(
                    Bytes(&mut prefix),
                    "kestrel: {} bytes of kestrel's own messages dropped: the console is \
                     slower than they came\r\n",
                    q.unreported
                ),
                Source::Vm(i) => write!(
                    Bytes(&mut prefix),
                    "kestrel: VM {i} ({}): {} bytes of its output dropped: the console is \
                     slower than it writes\r\n",
                    q.name,
                    q.unreported
                ),
            };
            q.unreported = 0;
            mid = false;
            owner = None;
        }
        if lines {
            let kind = q.chunks.front().map(|c| c.kind);
            let line_end = q.head_starts_with(b"\r") || q.head_starts_with(b"\n");
            match src {
                Source::Kestrel => {
                    if mid && owner != Some(Source::Kestrel) && !line_end {
                        prefix.extend_from_slice(b"\r\n");
                    } else if !mid && kind == Some(Kind::Notice) {
                        q.skip_line_ends();
                    }
                }
                Source::Vm(_) => {
                    if !mid || owner != Some(src) {
                        // The VM starts a terminal line: with its tag.
                        if mid {
                            prefix.extend_from_slice(b"\r\n");
                        }
                        q.skip_line_ends();
                        let left = q.chunks.front().map_or(0, |c| c.len - q.head_done);
                        if left > 0 && !q.head_starts_with(&q.tag) {
                            prefix.extend_from_slice(&q.tag);
                        }
                    }
                }
            }
        }
        self.prefix = prefix;
    }

    /// Copies the next bytes to write into `buf` (not taken until
    /// [`Outbox::advance`]). 0: nothing waits.
    pub fn peek(&mut self, buf: &mut [u8]) -> usize {
        if buf.is_empty() {
            return 0;
        }
        loop {
            if !self.select() {
                return 0;
            }
            let n = self.peek_current(buf);
            if n > 0 {
                return n;
            }
            self.finish_chunk();
        }
    }

    /// The next bytes of the chunk under way (0: it is done, or none is).
    fn peek_current(&mut self, buf: &mut [u8]) -> usize {
        let Some(src) = self.current else { return 0 };
        let p = &self.prefix[self.prefix_done..];
        if !p.is_empty() {
            let n = p.len().min(buf.len());
            buf[..n].copy_from_slice(&p[..n]);
            return n;
        }
        let q = self.queue(src);
        let left = q.chunks.front().map_or(0, |c| c.len - q.head_done);
        let n = left.min(buf.len());
        let (a, b) = q.bytes.as_slices();
        let k = a.len().min(n);
        buf[..k].copy_from_slice(&a[..k]);
        buf[k..n].copy_from_slice(&b[..n - k]);
        n
    }

    /// The UART took `n` of the bytes [`Outbox::peek`] gave.
    pub fn advance(&mut self, mut n: usize) {
        let Some(src) = self.current else { return };
        let p = (self.prefix.len() - self.prefix_done).min(n);
        if p > 0 {
            self.prefix_done += p;
            self.last = self.prefix[self.prefix_done - 1];
            n -= p;
        }
        if n > 0 {
            let q = self.queue(src);
            let left = q.chunks.front().map_or(0, |c| c.len - q.head_done);
            let n = n.min(left);
            let last = q.bytes.get(n.wrapping_sub(1)).copied();
            q.bytes.drain(..n);
            q.head_done += n;
            if let Some(b) = last {
                self.last = b;
            }
        }
        self.owner = (self.last != b'\n').then_some(src);
        let q = self.queue(src);
        let done = q.chunks.front().is_none_or(|c| q.head_done >= c.len);
        if done && self.prefix_done == self.prefix.len() {
            self.finish_chunk();
        }
    }

    fn finish_chunk(&mut self) {
        if let Some(src) = self.current.take() {
            let q = self.queue(src);
            if q.chunks.pop_front().is_some() {
                q.head_done = 0;
            }
        }
        self.prefix.clear();
        self.prefix_done = 0;
    }

    /// Writes up to `cap` bytes through `write`, which takes what the UART
    /// accepts now and says how many; stops when the UART takes less.
    /// Returns the bytes written.
    pub fn drain(&mut self, mut write: impl FnMut(&[u8]) -> usize, cap: usize) -> usize {
        let mut buf = [0u8; PIECE];
        let mut moved = 0;
        while moved < cap {
            let want = (cap - moved).min(buf.len());
            let n = self.peek(&mut buf[..want]);
            if n == 0 {
                break;
            }
            let w = write(&buf[..n]).min(n);
            self.advance(w);
            moved += w;
            if w < n {
                break;
            }
        }
        moved
    }

    /// A crash: the chunk under way to its end, then kestrel's log lines,
    /// through `write`, which may wait. No allocation.
    pub fn crash_drain(&mut self, mut write: impl FnMut(&[u8])) {
        let mut buf = [0u8; 64];
        loop {
            let n = self.peek_current(&mut buf);
            if n == 0 {
                break;
            }
            write(&buf[..n]);
            self.advance(n);
        }
        self.finish_chunk();
        let q = &mut self.kestrel;
        let mut offset = 0;
        let mut i = 0;
        while i < q.chunks.len() {
            let c = q.chunks[i];
            if c.kind != Kind::Log {
                offset += c.len;
                i += 1;
                continue;
            }
            let mut n = 0;
            for b in q.bytes.range(offset..offset + c.len) {
                buf[n] = *b;
                n += 1;
                if n == buf.len() {
                    write(&buf);
                    n = 0;
                }
            }
            write(&buf[..n]);
            q.bytes.drain(offset..offset + c.len);
            q.chunks.remove(i);
        }
    }
}

/// `fmt::Write` into a byte vector.
struct Bytes<'a>(&'a mut Vec<u8>);

impl Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The console's output buffers.
/// The pace of a serial line ([`set_baud`]): when the last byte written
/// so far will have left the wire. A byte takes ten bit times (a start
/// bit, eight data bits, a stop bit); the UART holds [`LINE_FIFO`] bytes
/// that have not left yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Nanoseconds one byte takes on the wire.
    pub byte_ns: u64,
    /// When everything written so far has left (counter nanoseconds).
    pub idle_at: u64,
}

impl Line {
    /// A line at `baud` bits per second, idle.
    pub fn new(baud: u32) -> Line {
        Line {
            byte_ns: 10_000_000_000 / u64::from(baud.max(1)),
            idle_at: 0,
        }
    }

    /// Bytes the UART's FIFO has room for at `now`.
    pub fn room(&self, now: u64) -> usize {
        let left = self.idle_at.saturating_sub(now);
        let queued = left.div_ceil(self.byte_ns.max(1));
        LINE_FIFO.saturating_sub(queued) as usize
    }

    /// `n` bytes went into the FIFO at `now`.
    pub fn wrote(&mut self, now: u64, n: usize) {
        self.idle_at = self.idle_at.max(now) + n as u64 * self.byte_ns;
    }
}

impl Line {
    /// When the FIFO will have room for `want` bytes (at most
    /// [`LINE_FIFO`]): `want` bytes' time before the line goes idle, less
    /// the FIFO's size.
    pub fn room_at(&self, want: usize) -> u64 {
        let keep = LINE_FIFO.saturating_sub(want as u64);
        self.idle_at.saturating_sub(keep * self.byte_ns)
    }
}

/// Room in the modelled FIFO a timed drain waits for ([`Pacer::after`]):
/// three quarters of it. The quarter still queued (8 bytes, 694 µs at
/// 115,200 baud) keeps the line busy while the drain's pCPU comes round
/// to it (a timer interrupt, then at most one exit's work).
pub const WAKE_ROOM: usize = (LINE_FIFO as usize) * 3 / 4;
/// How long a drain waits for a UART that is not modelled and took less
/// than it was offered (its own FIFO is full), or for the rest of a
/// backlog beyond one drain's [`DRAIN_MAX`]: 1 ms, the time 11.5 bytes take
/// at 115,200 baud, so a 16-byte FIFO at that rate does not run dry.
pub const RETRY_NS: u64 = 1_000_000;

/// The drain's timing, kept by whoever drains: the modelled line
/// ([`set_baud`]), when the next drain is due, and how fast output went
/// while some was waiting ([`DrainRate`]). Free of hardware: the times are
/// given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacer {
    pub line: Option<Line>,
    /// Output has been waiting since this drain ended (counter ns).
    waiting_since: Option<u64>,
    rate: DrainRate,
}

/// How fast the drain moved output while some was waiting: `bytes`
/// written by drains that found output left by the previous drain, over
/// `ns`, the time from a drain that left output waiting to the drain that
/// emptied the buffers (summed over such stretches). The first drain of
/// a stretch is left out (it fills an empty FIFO at once), so a drain
/// that keeps up with a paced line shows the line's rate and no more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainRate {
    pub bytes: u64,
    pub ns: u64,
}

impl DrainRate {
    /// Bytes per second (0 for no time).
    pub fn per_second(&self) -> u64 {
        if self.ns == 0 {
            0
        } else {
            (u128::from(self.bytes) * 1_000_000_000 / u128::from(self.ns)) as u64
        }
    }
}

impl Pacer {
    pub const fn new() -> Pacer {
        Pacer {
            line: None,
            waiting_since: None,
            rate: DrainRate { bytes: 0, ns: 0 },
        }
    }

    /// Bytes of `len` the UART may be offered at `now`.
    pub fn room(&self, now: u64, len: usize) -> usize {
        self.line.map_or(len, |l| len.min(l.room(now)))
    }

    /// The UART took `n` bytes at `now`.
    pub fn wrote(&mut self, now: u64, n: usize) {
        if let Some(l) = self.line.as_mut() {
            l.wrote(now, n);
        }
    }

    /// A drain ended at `now` having written `moved` bytes; `left`: output
    /// still waits. Returns when the next drain is due (counter ns), `None`
    /// when nothing waits: on a modelled line when its FIFO has room for
    /// [`WAKE_ROOM`] bytes, otherwise [`RETRY_NS`] from now.
    pub fn after(&mut self, now: u64, moved: usize, left: bool) -> Option<u64> {
        if let Some(since) = self.waiting_since {
            self.rate.bytes += moved as u64;
            if !left {
                self.rate.ns += now.saturating_sub(since);
                self.waiting_since = None;
            }
        } else if left {
            self.waiting_since = Some(now);
        }
        if !left {
            return None;
        }
        Some(match self.line {
            Some(l) => l.room_at(WAKE_ROOM).max(now),
            None => now + RETRY_NS,
        })
    }

    /// The drain rate so far; a stretch still under way at `now` counts
    /// up to `now`.
    pub fn rate(&self, now: u64) -> DrainRate {
        let mut r = self.rate;
        if let Some(since) = self.waiting_since {
            r.ns += now.saturating_sub(since);
        }
        r
    }
}

/// The drain's timing. Only the drainer (who holds `DRAINER`) changes it.
static PACER: Mutex<Pacer> = Mutex::new(Pacer::new());
/// When the next drain is due, in platform counter ticks (`u64::MAX`:
/// nothing waits). The drain's owner, the boot CPU, arms its timer for
/// it ([`wake_at`]).
static WAKE_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Paces the console's output to a UART at `baud` bits per second (`None`:
/// as fast as the UART takes it). `kestrel.baud=`.
pub fn set_baud(baud: Option<u32>) {
    PACER.lock().line = baud.map(Line::new);
}

/// When the boot CPU must drain the console next, in platform counter
/// ticks (`u64::MAX`: nothing waits). Its timer fires then, without
/// ending a time slice; the drain it runs sets the next one. One load:
/// the boot CPU looks before each guest entry.
#[inline]
pub fn wake_at() -> u64 {
    WAKE_AT.load(Ordering::Relaxed)
}

/// How fast the drain moved output while some was waiting, so far.
pub fn drain_rate() -> DrainRate {
    PACER.lock().rate(clock::now_ns())
}

/// The UART's non-blocking write of `b`, no faster than the line's pace.
/// The pacer's lock is not held across the write.
fn paced_write(p: &dyn super::platform::Platform, b: &[u8]) -> usize {
    if PACER.lock().line.is_none() {
        return p.console_try_write(b);
    }
    let now = clock::now_ns();
    let n = PACER.lock().room(now, b.len());
    if n == 0 {
        return 0;
    }
    let w = p.console_try_write(&b[..n]);
    PACER.lock().wrote(now, w);
    w
}

static OUTBOX: Mutex<Outbox> = Mutex::new(Outbox::new());
/// Held by whoever drains (try-locked: nobody waits to drain).
static DRAINER: Mutex<()> = Mutex::new(());
/// kestrel runs VMs: writes are queued and drained, not waited for.
static ASYNC: AtomicBool = AtomicBool::new(false);

/// The console's output buffers.
pub fn outbox() -> &'static Mutex<Outbox> {
    &OUTBOX
}

/// Moves up to `cap` bytes from `outbox` to the UART through `write` (the
/// UART's non-blocking write), unless someone else is draining (`drainer`
/// is held): then nothing, at once. The buffers' lock is held only to copy
/// bytes out and to account for what the UART took. Returns the bytes
/// written.
pub fn drain_with(
    outbox: &Mutex<Outbox>,
    drainer: &Mutex<()>,
    mut write: impl FnMut(&[u8]) -> usize,
    cap: usize,
) -> usize {
    let Some(_token) = drainer.try_lock() else {
        return 0;
    };
    drain_held(outbox, &mut write, cap)
}

/// [`drain_with`] by whoever holds the drainer's token.
fn drain_held(outbox: &Mutex<Outbox>, mut write: impl FnMut(&[u8]) -> usize, cap: usize) -> usize {
    let mut buf = [0u8; PIECE];
    let mut moved = 0;
    while moved < cap {
        let want = (cap - moved).min(buf.len());
        let n = outbox.lock().peek(&mut buf[..want]);
        if n == 0 {
            break;
        }
        let w = write(&buf[..n]).min(n);
        outbox.lock().advance(w);
        moved += w;
        if w < n {
            break;
        }
    }
    moved
}

/// Drains `outbox` until it is empty, or until the UART took nothing for
/// `stall_ns`, or `max_ns` passed (`now` is the clock). Returns whether
/// everything was written.
pub fn flush_with(
    outbox: &Mutex<Outbox>,
    drainer: &Mutex<()>,
    mut write: impl FnMut(&[u8]) -> usize,
    mut now: impl FnMut() -> u64,
    stall_ns: u64,
    max_ns: u64,
) -> bool {
    let start = now();
    let mut progress = start;
    loop {
        if outbox.lock().is_empty() {
            return true;
        }
        let n = drain_with(outbox, drainer, &mut write, DRAIN_MAX);
        let t = now();
        if n > 0 {
            progress = t;
        } else if t.saturating_sub(progress) > stall_ns || t.saturating_sub(start) > max_ns {
            return false;
        }
        core::hint::spin_loop();
    }
}

/// [`drain_with`] on the console's buffers and the platform's UART; then,
/// still holding the drainer's token, when the next drain is due
/// ([`wake_at`], [`Pacer::after`]). A drain that finds another pCPU
/// draining does nothing; what it queued is the other's to write, or, if
/// that one had already looked, waits for the boot CPU's next tick.
pub fn drain(cap: usize) -> usize {
    let Some(p) = clock::platform() else {
        return 0;
    };
    let Some(_token) = DRAINER.try_lock() else {
        // Someone else drains and sets the next drain's time. If it is
        // due now (this may be the timed drain itself), it moves on by
        // [`RETRY_NS`], so that a timer armed for it does not fire again
        // and again while the other pCPU writes.
        let now = p.counter();
        let at = WAKE_AT.load(Ordering::Relaxed);
        if at <= now {
            let later = now + ns_to_counter(RETRY_NS, p.counter_hz());
            let _ = WAKE_AT.compare_exchange(at, later, Ordering::Relaxed, Ordering::Relaxed);
        }
        return 0;
    };
    let moved = drain_held(&OUTBOX, |b| paced_write(p, b), cap);
    let left = !OUTBOX.lock().is_empty();
    let now = clock::now_ns();
    let next = PACER.lock().after(now, moved, left);
    let at = next.map_or(u64::MAX, |ns| ns_to_counter(ns, p.counter_hz()));
    WAKE_AT.store(at, Ordering::Relaxed);
    moved
}

/// Counter nanoseconds `ns` in ticks of a `hz` counter, rounded up (a
/// deadline is never early).
pub fn ns_to_counter(ns: u64, hz: u64) -> u64 {
    (u128::from(ns) * u128::from(hz)).div_ceil(1_000_000_000) as u64
}

/// Writes everything waiting (see [`flush_with`]).
pub fn flush(stall_ns: u64, max_ns: u64) -> bool {
    match clock::platform() {
        Some(p) => flush_with(
            &OUTBOX,
            &DRAINER,
            |b| p.console_try_write(b),
            clock::now_ns,
            stall_ns,
            max_ns,
        ),
        None => true,
    }
}

/// `true` once VMs run: writes are queued and drained as the UART takes
/// them. `false` (at boot, and when kestrel ends): every write is flushed
/// before it returns; switching to it flushes what waits, for at most
/// [`FLUSH_MAX_NS`] (and [`STALL_NS`] of a UART that takes nothing).
pub fn set_async(on: bool) {
    ASYNC.store(on, Ordering::Release);
    if !on {
        flush(STALL_NS, FLUSH_MAX_NS);
    }
}

/// Whether writes are queued ([`set_async`]).
pub fn is_async() -> bool {
    ASYNC.load(Ordering::Acquire)
}

/// After a write of `n` bytes: drain them and a little more, or (not
/// async) flush.
pub fn settle(n: usize) {
    if is_async() {
        drain(n + DRAIN_EXTRA);
    } else {
        flush(STALL_NS, FLUSH_MAX_NS);
    }
}

/// kestrel's log line(s) `bytes`, as the terminal takes them (CRLF).
pub fn log_line(bytes: &[u8]) {
    OUTBOX.lock().push_log(bytes);
    settle(bytes.len());
}

/// Before a crash dump: what waits is written (the piece under way, then
/// kestrel's log lines), if no one holds the buffers (the crashing CPU
/// may). `write` may wait for the UART.
pub fn crash_flush(write: impl FnMut(&[u8])) {
    let Some(_token) = DRAINER.try_lock() else {
        return;
    };
    if let Some(mut o) = OUTBOX.try_lock() {
        o.crash_drain(write);
    }
}

#[cfg(test)]
pub(crate) mod tests;
