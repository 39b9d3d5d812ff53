//! Split virtqueues (virtio 1.x, section "Split Virtqueues"), read and
//! written in guest RAM through [`GuestMemory`] only.
//!
//! Everything here treats the ring as hostile: a descriptor index out of
//! the table, a chain longer than the queue (a loop), an indirect table
//! that is empty, nested, misaligned or too long, a buffer whose address
//! plus length overflows, a readable buffer after a writable one, an avail
//! index that runs more than a queue ahead: each is a [`QueueError`], which
//! the transport answers by putting the device in DEVICE_NEEDS_RESET. No
//! guest value is used as an allocation size before it is bounded.

use alloc::vec::Vec;
use core::sync::atomic::{fence, Ordering};

use crate::dev::vdev::bus::{GuestMemory, MemError};

/// Largest queue size kestrel offers (QueueNumMax).
pub const MAX_QUEUE_SIZE: u16 = 256;
/// Longest indirect table kestrel follows (entries).
pub const MAX_INDIRECT: u32 = 256;

const DESC_SIZE: u64 = 16;
pub(crate) const F_NEXT: u16 = 1;
pub(crate) const F_WRITE: u16 = 2;
pub(crate) const F_INDIRECT: u16 = 4;
/// VIRTQ_AVAIL_F_NO_INTERRUPT: the driver does not want used-buffer
/// interrupts (a hint, without EVENT_IDX).
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// What is wrong with a ring the guest handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueError {
    /// Ring or buffer memory outside the VM's RAM.
    Memory(MemError),
    /// The avail index is more than a queue size ahead of what was used.
    AvailOverrun { avail: u16, last: u16 },
    /// A descriptor index beyond the table.
    BadIndex(u16),
    /// A chain with more descriptors than the table has: a loop.
    ChainTooLong,
    /// An indirect table of a bad length, nested, or with NEXT on the
    /// head descriptor.
    BadIndirect,
    /// A readable buffer after a writable one.
    ReadAfterWrite,
    /// address + length overflows.
    Overflow,
    /// The request does not have the shape the device needs.
    Malformed,
}

impl From<MemError> for QueueError {
    fn from(e: MemError) -> Self {
        QueueError::Memory(e)
    }
}

/// One buffer of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buf {
    pub addr: u64,
    pub len: u32,
    /// Device-writable (else device-readable).
    pub write: bool,
}

/// A descriptor chain taken from the avail ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The head index, handed back in the used ring.
    pub head: u16,
    /// Readable buffers first, then writable ones.
    pub bufs: Vec<Buf>,
    /// Descriptors read to take it (direct and indirect; at most
    /// [`MAX_QUEUE_SIZE`] + [`MAX_INDIRECT`]).
    pub descs: u32,
}

impl Chain {
    /// What taking it and handing it back cost, in budget bytes
    /// ([`crate::dev::virtio::Budget`]): the descriptors read and the avail and
    /// used ring entries, with [`crate::dev::virtio::CALL_COST`] for each
    /// guest-memory call.
    pub fn cost(&self) -> u64 {
        descs_cost(self.descs)
    }

    /// Total bytes of the readable (`write == false`) or writable buffers.
    pub fn len(&self, write: bool) -> u64 {
        self.bufs
            .iter()
            .filter(|b| b.write == write)
            .map(|b| u64::from(b.len))
            .sum()
    }

    /// A cursor over the readable bytes.
    pub fn reader(&self) -> Cursor<'_> {
        Cursor::new(self, false)
    }

    /// A cursor over the writable bytes.
    pub fn writer(&self) -> Cursor<'_> {
        Cursor::new(self, true)
    }
}

/// Sequential access to one direction of a chain, across its buffers.
pub struct Cursor<'a> {
    bufs: Vec<&'a Buf>,
    /// Buffer index and offset within it.
    at: usize,
    off: u32,
    /// Bytes moved so far.
    pub done: u64,
    /// Guest-memory calls made so far (one per buffer piece).
    pub calls: u64,
}

impl<'a> Cursor<'a> {
    fn new(chain: &'a Chain, write: bool) -> Cursor<'a> {
        Cursor {
            bufs: chain.bufs.iter().filter(|b| b.write == write).collect(),
            at: 0,
            off: 0,
            done: 0,
            calls: 0,
        }
    }

    /// What the copies so far cost in budget bytes
    /// ([`crate::dev::virtio::Budget`]): the bytes and
    /// [`crate::dev::virtio::CALL_COST`] a call.
    pub fn cost(&self) -> u64 {
        self.done + self.calls * crate::dev::virtio::CALL_COST
    }

    /// Bytes left.
    pub fn remaining(&self) -> u64 {
        let rest: u64 = self.bufs[self.at.min(self.bufs.len())..]
            .iter()
            .map(|b| u64::from(b.len))
            .sum();
        rest - u64::from(self.off)
    }

    /// Fills `out` from the chain (readable side); returns how many bytes
    /// were there (fewer than `out.len()` at the end of the chain).
    pub fn read(&mut self, mem: &dyn GuestMemory, out: &mut [u8]) -> Result<usize, QueueError> {
        self.step(out.len(), true, |gpa, range| mem.read(gpa, &mut out[range]))
    }

    /// Copies `data` into the chain (writable side); returns how many bytes
    /// fitted.
    pub fn write(&mut self, mem: &dyn GuestMemory, data: &[u8]) -> Result<usize, QueueError> {
        self.step(data.len(), true, |gpa, range| mem.write(gpa, &data[range]))
    }

    /// Skips `n` bytes; returns how many there were.
    pub fn skip(&mut self, n: usize) -> usize {
        let moved = self.step(n, false, |_, _| Ok(())).unwrap_or(0);
        self.done -= moved as u64;
        moved
    }

    fn step(
        &mut self,
        want: usize,
        count: bool,
        mut copy: impl FnMut(u64, core::ops::Range<usize>) -> Result<(), MemError>,
    ) -> Result<usize, QueueError> {
        let mut moved = 0usize;
        while moved < want {
            let Some(b) = self.bufs.get(self.at) else {
                break;
            };
            let left = (b.len - self.off) as usize;
            if left == 0 {
                self.at += 1;
                self.off = 0;
                continue;
            }
            let n = left.min(want - moved);
            // Cannot overflow: checked when the chain was taken.
            if count {
                self.calls += 1;
            }
            copy(b.addr + u64::from(self.off), moved..moved + n)?;
            moved += n;
            self.off += n as u32;
        }
        self.done += moved as u64;
        Ok(moved)
    }
}

/// What [`Queue::pop_within`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pop {
    /// The next chain, its memory ready.
    Chain(Chain),
    /// The ring has no chain (or the queue is not live).
    Empty,
    /// A chain is there, but a block of its memory waits for a first-touch
    /// zeroing the budget did not cover: try again with a new budget.
    Later,
}

/// The result of walking a chain: the chain, or where it stopped for a
/// zeroing the allowance did not cover.
enum Walk {
    Chain(Chain),
    Later { descs: u32 },
}

/// The first-touch zeroings one chain may still cause, and those it did.
struct Zeroing {
    allowance: u32,
    done: u32,
}

impl Zeroing {
    /// Prepares `[gpa, gpa + len)` within the allowance left; whether it
    /// is all ready.
    fn prepare(&mut self, mem: &dyn GuestMemory, gpa: u64, len: u64) -> bool {
        let p = mem.prepare(gpa, len, self.allowance - self.done);
        self.done += p.zeroed.min(self.allowance - self.done);
        p.ready
    }
}

/// What reading `descs` descriptors cost in budget bytes (as in
/// [`Chain::cost`]).
fn descs_cost(descs: u32) -> u64 {
    let calls = u64::from(descs) + 5;
    u64::from(descs) * DESC_SIZE + 16 + calls * crate::dev::virtio::CALL_COST
}

/// One split virtqueue as the driver configured it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    /// QueueNum: entries (a power of two, at most [`MAX_QUEUE_SIZE`]).
    pub size: u16,
    pub ready: bool,
    /// Guest physical addresses of the descriptor table, the driver (avail)
    /// ring and the device (used) ring.
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    /// The next avail ring slot to take.
    last_avail: u16,
    /// The next used ring slot to fill.
    used_idx: u16,
}

impl Queue {
    /// Whether the configuration may go live (QueueReady = 1): a power-of-two
    /// size within the maximum, rings aligned as the spec requires, and no
    /// ring address whose end overflows.
    pub fn valid(&self) -> bool {
        let n = u64::from(self.size);
        self.size != 0
            && self.size <= MAX_QUEUE_SIZE
            && self.size.is_power_of_two()
            && self.desc.is_multiple_of(16)
            && self.avail.is_multiple_of(2)
            && self.used.is_multiple_of(4)
            && self.desc.checked_add(n * DESC_SIZE).is_some()
            && self.avail.checked_add(6 + 2 * n).is_some()
            && self.used.checked_add(6 + 8 * n).is_some()
    }

    /// Whether every byte of the three rings is RAM of the VM: checked when
    /// the driver makes the queue live (with [`Queue::valid`]), so that a
    /// queue whose rings lie outside RAM reads back QueueReady 0 instead of
    /// breaking at its first use.
    pub fn in_memory(&self, mem: &dyn GuestMemory) -> bool {
        let n = u64::from(self.size);
        let mut buf = [0u8; 64];
        [
            (self.desc, n * DESC_SIZE),
            (self.avail, 6 + 2 * n),
            (self.used, 6 + 8 * n),
        ]
        .into_iter()
        .all(|(start, len)| {
            (0..len).step_by(buf.len()).all(|off| {
                let k = (len - off).min(buf.len() as u64) as usize;
                start
                    .checked_add(off)
                    .is_some_and(|a| mem.read(a, &mut buf[..k]).is_ok())
            })
        })
    }

    /// Back to the reset state (QueueReady 0, nothing configured).
    pub fn reset(&mut self) {
        *self = Queue::default();
    }

    fn read_u16(mem: &dyn GuestMemory, gpa: u64) -> Result<u16, QueueError> {
        let mut b = [0u8; 2];
        mem.read(gpa, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Whether the driver has made chains available that were not taken.
    pub fn has_avail(&self, mem: &dyn GuestMemory) -> Result<bool, QueueError> {
        Ok(Self::read_u16(mem, self.avail + 2)? != self.last_avail)
    }

    /// Takes the next available chain, `None` if the ring is empty, with
    /// as many first-touch zeroings of its memory as it needs (tests).
    #[cfg(test)]
    pub fn pop(&mut self, mem: &dyn GuestMemory) -> Result<Option<Chain>, QueueError> {
        let mut budget = crate::dev::virtio::Budget::new(u64::MAX, u32::MAX);
        loop {
            match self.pop_within(mem, &mut budget)? {
                Pop::Chain(c) => return Ok(Some(c)),
                Pop::Empty => return Ok(None),
                Pop::Later => {}
            }
        }
    }

    /// Takes the next available chain once every byte it names (its
    /// buffers and its indirect table) is ready guest RAM, zeroing
    /// untouched blocks only as far as `budget` affords
    /// ([`crate::dev::virtio::ZERO_COST`] each, charged here; the chain's
    /// own cost is the caller's to charge). [`Pop::Later`]: a block still
    /// waits for its zeroing; the chain stays in the ring and is taken
    /// again on a later budget, and the descriptors read meanwhile are
    /// charged here.
    pub fn pop_within(
        &mut self,
        mem: &dyn GuestMemory,
        budget: &mut crate::dev::virtio::Budget,
    ) -> Result<Pop, QueueError> {
        if !self.ready {
            return Ok(Pop::Empty);
        }
        let avail_idx = Self::read_u16(mem, self.avail + 2)?;
        if avail_idx == self.last_avail {
            return Ok(Pop::Empty);
        }
        if avail_idx.wrapping_sub(self.last_avail) > self.size {
            return Err(QueueError::AvailOverrun {
                avail: avail_idx,
                last: self.last_avail,
            });
        }
        // The ring entry is read after the index that published it.
        fence(Ordering::Acquire);
        let slot = u64::from(self.last_avail % self.size);
        let head = Self::read_u16(mem, self.avail + 4 + 2 * slot)?;
        let mut zero = Zeroing {
            allowance: budget.zero_allowance(),
            done: 0,
        };
        let walked = self.walk(mem, head, &mut zero);
        budget.spend_zeroed(zero.done);
        let chain = match walked? {
            Walk::Chain(c) => c,
            Walk::Later { descs } => {
                budget.spend(descs_cost(descs));
                return Ok(Pop::Later);
            }
        };
        let ready = chain
            .bufs
            .iter()
            .all(|b| zero.prepare(mem, b.addr, u64::from(b.len)));
        budget.spend_zeroed(core::mem::take(&mut zero.done));
        if !ready {
            budget.spend(chain.cost());
            return Ok(Pop::Later);
        }
        self.last_avail = self.last_avail.wrapping_add(1);
        Ok(Pop::Chain(chain))
    }

    fn read_desc(mem: &dyn GuestMemory, table: u64, i: u16) -> Result<(Buf, u16, u16), QueueError> {
        let mut d = [0u8; 16];
        mem.read(table + u64::from(i) * DESC_SIZE, &mut d)?;
        let addr = u64::from_le_bytes(d[0..8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(d[8..12].try_into().unwrap_or_default());
        let flags = u16::from_le_bytes([d[12], d[13]]);
        let next = u16::from_le_bytes([d[14], d[15]]);
        if addr.checked_add(u64::from(len)).is_none() {
            return Err(QueueError::Overflow);
        }
        let buf = Buf {
            addr,
            len,
            write: flags & F_WRITE != 0,
        };
        Ok((buf, flags, next))
    }

    fn walk(
        &self,
        mem: &dyn GuestMemory,
        head: u16,
        zero: &mut Zeroing,
    ) -> Result<Walk, QueueError> {
        if head >= self.size {
            return Err(QueueError::BadIndex(head));
        }
        let mut bufs = Vec::new();
        let push = |b: Buf, bufs: &mut Vec<Buf>| {
            if !b.write && bufs.last().is_some_and(|l: &Buf| l.write) {
                return Err(QueueError::ReadAfterWrite);
            }
            if b.len != 0 {
                bufs.push(b);
            }
            Ok(())
        };
        let (mut buf, mut flags, mut next) = Self::read_desc(mem, self.desc, head)?;
        let mut seen = 1u32;
        loop {
            if flags & F_INDIRECT != 0 {
                // An indirect table: the only descriptor of a direct chain
                // that may carry it is one without NEXT (the spec forbids
                // both); its entries follow their own NEXT links.
                if flags & F_NEXT != 0 || buf.len % DESC_SIZE as u32 != 0 || buf.len == 0 {
                    return Err(QueueError::BadIndirect);
                }
                let n = buf.len / DESC_SIZE as u32;
                if n > MAX_INDIRECT {
                    return Err(QueueError::BadIndirect);
                }
                let table = buf.addr;
                if !zero.prepare(mem, table, u64::from(buf.len)) {
                    return Ok(Walk::Later { descs: seen });
                }
                let mut i = 0u16;
                let mut count = 0u32;
                loop {
                    count += 1;
                    seen += 1;
                    if count > n {
                        return Err(QueueError::ChainTooLong);
                    }
                    let (b, f, nx) = Self::read_desc(mem, table, i)?;
                    if f & F_INDIRECT != 0 {
                        return Err(QueueError::BadIndirect);
                    }
                    push(b, &mut bufs)?;
                    if f & F_NEXT == 0 {
                        break;
                    }
                    if u32::from(nx) >= n {
                        return Err(QueueError::BadIndex(nx));
                    }
                    i = nx;
                }
                break;
            }
            push(buf, &mut bufs)?;
            if flags & F_NEXT == 0 {
                break;
            }
            if next >= self.size {
                return Err(QueueError::BadIndex(next));
            }
            seen += 1;
            if seen > u32::from(self.size) {
                return Err(QueueError::ChainTooLong);
            }
            (buf, flags, next) = Self::read_desc(mem, self.desc, next)?;
        }
        Ok(Walk::Chain(Chain {
            head,
            bufs,
            descs: seen,
        }))
    }

    /// Returns a chain to the driver with `written` bytes written into its
    /// writable buffers. Returns whether the driver wants an interrupt.
    pub fn push_used(
        &mut self,
        mem: &dyn GuestMemory,
        head: u16,
        written: u32,
    ) -> Result<bool, QueueError> {
        if !self.ready || self.size == 0 {
            // Reset meanwhile: nothing to hand back to.
            return Ok(false);
        }
        let slot = u64::from(self.used_idx % self.size);
        let mut e = [0u8; 8];
        e[0..4].copy_from_slice(&u32::from(head).to_le_bytes());
        e[4..8].copy_from_slice(&written.to_le_bytes());
        mem.write(self.used + 4 + 8 * slot, &e)?;
        // The entry is visible before the index that publishes it.
        fence(Ordering::Release);
        self.used_idx = self.used_idx.wrapping_add(1);
        mem.write(self.used + 2, &self.used_idx.to_le_bytes())?;
        fence(Ordering::SeqCst);
        let flags = Self::read_u16(mem, self.avail)?;
        Ok(flags & AVAIL_F_NO_INTERRUPT == 0)
    }
}

#[cfg(test)]
pub(crate) mod tests;
