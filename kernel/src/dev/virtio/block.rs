//! virtio block (device ID 2): a disk image in memory.
//!
//! A read-write disk is a private copy the VM reads and writes; its state
//! lives as long as the VM does and is never written back anywhere. A
//! read-only disk serves the packed image itself and refuses writes with
//! an I/O error (and offers VIRTIO_BLK_F_RO, so drivers mount it
//! read-only). Every request is checked: its sector range against the
//! capacity (with overflow), its data length against the 512-byte sector
//! size, its shape (header, data, status byte); a request that is wrong
//! but has a status byte gets IOERR or UNSUPP, one without any writable
//! byte breaks the queue (the device needs reset).

use alloc::vec::Vec;

use super::queue::{Chain, Pop, Queue, QueueError};
use super::{id, Budget, Progress, VirtioDevice, Work};
use crate::dev::vdev::bus::{DeviceEnv, GuestMemory};

pub const SECTOR: u64 = 512;
/// Feature bits (device-specific).
pub const F_RO: u64 = 1 << 5;
pub const F_FLUSH: u64 = 1 << 9;
/// Request types.
pub const T_IN: u32 = 0;
pub const T_OUT: u32 = 1;
pub const T_FLUSH: u32 = 4;
pub const T_GET_ID: u32 = 8;
/// Request status.
pub const S_OK: u8 = 0;
pub const S_IOERR: u8 = 1;
pub const S_UNSUPP: u8 = 2;
/// Length of the device ID string GET_ID returns.
pub const ID_LEN: usize = 20;

/// Where a disk's bytes are.
pub enum Backing {
    /// The packed image itself, never written.
    ReadOnly(&'static [u8]),
    /// A private copy the VM may write, in memory chunks that belong to
    /// this disk alone (host frames; the last chunk may be shorter), in
    /// disk order.
    Chunks(Vec<&'static mut [u8]>),
}

impl Backing {
    fn len(&self) -> u64 {
        match self {
            Backing::ReadOnly(b) => b.len() as u64,
            Backing::Chunks(c) => c.iter().map(|c| c.len() as u64).sum(),
        }
    }

    /// Calls `f` on the pieces of `[start, start + len)` in order.
    fn pieces(
        &self,
        start: u64,
        len: u64,
        mut f: impl FnMut(&[u8]) -> Result<(), QueueError>,
    ) -> Result<(), QueueError> {
        match self {
            Backing::ReadOnly(b) => f(&b[start as usize..(start + len) as usize]),
            Backing::Chunks(chunks) => {
                let mut at = 0u64;
                for c in chunks {
                    let (lo, hi) = (at, at + c.len() as u64);
                    at = hi;
                    let (s, e) = (start.max(lo), (start + len).min(hi));
                    if s < e {
                        f(&c[(s - lo) as usize..(e - lo) as usize])?;
                    }
                }
                Ok(())
            }
        }
    }

    /// As [`Backing::pieces`], writable; `None` for a read-only disk.
    fn pieces_mut(
        &mut self,
        start: u64,
        len: u64,
        mut f: impl FnMut(&mut [u8]) -> Result<(), QueueError>,
    ) -> Option<Result<(), QueueError>> {
        let Backing::Chunks(chunks) = self else {
            return None;
        };
        let mut at = 0u64;
        for c in chunks.iter_mut() {
            let (lo, hi) = (at, at + c.len() as u64);
            at = hi;
            let (s, e) = (start.max(lo), (start + len).min(hi));
            if s < e {
                if let Err(err) = f(&mut c[(s - lo) as usize..(e - lo) as usize]) {
                    return Some(Err(err));
                }
            }
        }
        Some(Ok(()))
    }
}

/// Counters, for the VM's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub errors: u64,
}

pub struct Block {
    disk: Backing,
    /// The data request under way, if one is.
    inflight: Option<InFlight>,
    /// GET_ID's answer, NUL padded.
    serial: [u8; ID_LEN],
    pub stats: BlockStats,
}

impl Block {
    /// A disk of `disk` (its length is rounded down to whole sectors) whose
    /// GET_ID answers `serial` (truncated to 20 bytes).
    pub fn new(disk: Backing, serial: &str) -> Block {
        let mut s = [0u8; ID_LEN];
        let n = serial.len().min(ID_LEN);
        s[..n].copy_from_slice(&serial.as_bytes()[..n]);
        Block {
            disk,
            inflight: None,
            serial: s,
            stats: BlockStats::default(),
        }
    }

    /// Capacity in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        self.disk.len() / SECTOR
    }

    pub fn read_only(&self) -> bool {
        matches!(self.disk, Backing::ReadOnly(_))
    }

    /// A copy of the disk's bytes (tests and diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        let _ = self.disk.pieces(0, self.disk.len(), |p| {
            v.extend_from_slice(p);
            Ok(())
        });
        v
    }

    /// The byte offset of `len` bytes from `sector`, if inside the disk.
    fn range(&self, sector: u64, len: u64) -> Option<u64> {
        if !len.is_multiple_of(SECTOR) {
            return None;
        }
        let start = sector.checked_mul(SECTOR)?;
        let end = start.checked_add(len)?;
        (end <= self.sectors() * SECTOR).then_some(start)
    }

    /// Starts one request chain: a data request within the disk becomes
    /// the request under way (its bytes move within later budgets); any
    /// other is answered at once (returns the used length).
    fn start(
        &mut self,
        c: Chain,
        env: &dyn DeviceEnv,
        budget: &mut Budget,
    ) -> Result<Result<InFlight, (Chain, u32)>, QueueError> {
        let mem = env.memory();
        let writable = c.len(true);
        if writable == 0 {
            // Nowhere to put the status: the driver broke the protocol.
            return Err(QueueError::Malformed);
        }
        let data_in = writable - 1;
        let mut r = c.reader();
        let mut hdr = [0u8; 16];
        let got = r.read(mem, &mut hdr)?;
        budget.spend(r.cost());
        let status = if got < hdr.len() {
            S_IOERR
        } else {
            let kind = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let sector = u64::from_le_bytes(hdr[8..16].try_into().unwrap_or_default());
            match kind {
                T_IN => match self.range(sector, data_in) {
                    Some(start) => {
                        return Ok(Ok(InFlight {
                            chain: c,
                            write: false,
                            start,
                            len: data_in,
                            done: 0,
                        }))
                    }
                    None => S_IOERR,
                },
                T_OUT => {
                    let len = r.remaining();
                    match self.range(sector, len) {
                        Some(start) if !self.read_only() => {
                            return Ok(Ok(InFlight {
                                chain: c,
                                write: true,
                                start,
                                len,
                                done: 0,
                            }))
                        }
                        _ => S_IOERR,
                    }
                }
                T_FLUSH => S_OK,
                T_GET_ID => {
                    if data_in < ID_LEN as u64 {
                        S_IOERR
                    } else {
                        let mut w = c.writer();
                        w.write(mem, &self.serial)?;
                        budget.spend(w.cost());
                        let used = self.finish(&c, env, data_in, ID_LEN as u64, S_OK)?;
                        return Ok(Err((c, used)));
                    }
                }
                _ => S_UNSUPP,
            }
        };
        let used = self.finish(&c, env, data_in, 0, status)?;
        Ok(Err((c, used)))
    }

    /// Moves as much of request `f` as `budget` allows, a sector at most
    /// at a time (each step charges its bytes and its guest-memory calls).
    fn copy(
        &mut self,
        f: &mut InFlight,
        mem: &dyn GuestMemory,
        budget: &mut Budget,
    ) -> Result<(), QueueError> {
        let (mut r, mut w) = (f.chain.reader(), f.chain.writer());
        if f.write {
            r.skip(16 + f.done as usize);
        } else {
            w.skip(f.done as usize);
        }
        while f.done < f.len && budget.bytes() > 0 {
            let n = (f.len - f.done).min(SECTOR);
            let at = f.start + f.done;
            let before = r.cost() + w.cost();
            if f.write {
                if let Some(res) = self.disk.pieces_mut(at, n, |p| r.read(mem, p).map(|_| ())) {
                    res?;
                }
            } else {
                self.disk.pieces(at, n, |p| w.write(mem, p).map(|_| ()))?;
            }
            f.done += n;
            budget.spend(r.cost() + w.cost() - before);
        }
        Ok(())
    }

    /// Writes the status byte, the last writable byte of the chain, and
    /// returns the used length: the bytes written (`written` of data, then
    /// the status).
    fn finish(
        &mut self,
        c: &Chain,
        env: &dyn DeviceEnv,
        data_in: u64,
        written: u64,
        status: u8,
    ) -> Result<u32, QueueError> {
        if status != S_OK {
            self.stats.errors += 1;
        }
        let mut w = c.writer();
        w.skip(data_in as usize);
        w.write(env.memory(), &[status])?;
        let used = if status == S_OK { written + 1 } else { 1 };
        Ok(u32::try_from(used).unwrap_or(u32::MAX))
    }
}

/// A data request under way: its chain, which way its bytes go, and how
/// far they got.
struct InFlight {
    chain: Chain,
    /// Guest to disk (OUT); else disk to guest (IN).
    write: bool,
    /// Byte offset on the disk and length.
    start: u64,
    len: u64,
    done: u64,
}

impl VirtioDevice for Block {
    fn device_id(&self) -> u32 {
        id::BLOCK
    }

    fn features(&self) -> u64 {
        F_FLUSH | if self.read_only() { F_RO } else { 0 }
    }

    fn queues(&self) -> usize {
        1
    }

    /// capacity (le64) at offset 0; nothing else offered.
    fn read_config(&self, offset: u64, out: &mut [u8]) {
        super::read_config_bytes(&self.sectors().to_le_bytes(), offset, out);
    }

    /// Requests in ring order; the one under way first. A request's data
    /// moves within the budget, so a request larger than the budget spans
    /// several exits (and the queue waits behind it).
    fn notify(
        &mut self,
        index: usize,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        let Some(q) = queues.get_mut(index).filter(|q| q.ready) else {
            // Reset meanwhile: what was under way is dropped.
            self.inflight = None;
            return Ok(Progress::Done);
        };
        loop {
            if let Some(mut f) = self.inflight.take() {
                self.copy(&mut f, env.memory(), budget)?;
                if f.done < f.len {
                    self.inflight = Some(f);
                    return Ok(Progress::More);
                }
                if f.write {
                    self.stats.writes += 1;
                    self.stats.written_bytes += f.len;
                } else {
                    self.stats.reads += 1;
                    self.stats.read_bytes += f.len;
                }
                let data_in = f.chain.len(true) - 1;
                let written = if f.write { 0 } else { f.len };
                let used = self.finish(&f.chain, env, data_in, written, S_OK)?;
                work.interrupt |= q.push_used(env.memory(), f.chain.head, used)?;
                continue;
            }
            if !budget.chain() {
                return Ok(Progress::More);
            }
            let c = match q.pop_within(env.memory(), budget)? {
                Pop::Chain(c) => c,
                Pop::Empty => return Ok(Progress::Done),
                Pop::Later => return Ok(Progress::More),
            };
            budget.spend(c.cost());
            match self.start(c, env, budget)? {
                Ok(f) => self.inflight = Some(f),
                Err((c, used)) => work.interrupt |= q.push_used(env.memory(), c.head, used)?,
            }
        }
    }

    /// What was under way is dropped (a disk keeps its data).
    fn reset(&mut self) {
        self.inflight = None;
    }

    fn at_power_on(&self) -> bool {
        self.inflight.is_none()
    }
}

#[cfg(test)]
mod tests;
