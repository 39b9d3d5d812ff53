//! Host tests of the split virtqueue, with a driver written here that lays
//! rings out in a fake guest RAM.

use super::*;
use core::cell::{Cell, RefCell};

/// Guest RAM for tests: `size` bytes at guest physical `base`.
pub(crate) struct TestRam {
    pub base: u64,
    pub bytes: RefCell<Vec<u8>>,
    /// Bytes read and written through [`GuestMemory`] so far.
    pub touched: Cell<u64>,
}

impl TestRam {
    pub fn new(base: u64, size: usize) -> TestRam {
        TestRam {
            base,
            bytes: RefCell::new(vec![0; size]),
            touched: Cell::new(0),
        }
    }

    fn range(&self, gpa: u64, len: usize) -> Result<core::ops::Range<usize>, MemError> {
        let err = MemError {
            gpa,
            len: len as u64,
        };
        let off = gpa.checked_sub(self.base).ok_or(err)? as usize;
        let end = off.checked_add(len).ok_or(err)?;
        if end > self.bytes.borrow().len() {
            return Err(err);
        }
        Ok(off..end)
    }

    pub fn put(&self, gpa: u64, data: &[u8]) {
        self.write(gpa, data).unwrap();
    }

    pub fn get(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(gpa, &mut v).unwrap();
        v
    }
}

impl GuestMemory for TestRam {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.range(gpa, buf.len())?;
        buf.copy_from_slice(&self.bytes.borrow()[r]);
        self.touched.set(self.touched.get() + buf.len() as u64);
        Ok(())
    }

    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.range(gpa, data.len())?;
        self.bytes.borrow_mut()[r].copy_from_slice(data);
        self.touched.set(self.touched.get() + data.len() as u64);
        Ok(())
    }
}

pub(crate) const RAM: u64 = 0x4000_0000;
pub(crate) const DESC: u64 = RAM;
pub(crate) const AVAIL: u64 = RAM + 0x1000;
pub(crate) const USED: u64 = RAM + 0x2000;
pub(crate) const DATA: u64 = RAM + 0x10000;

/// The driver side of one queue in a [`TestRam`].
pub(crate) struct Driver {
    pub size: u16,
    pub avail_idx: u16,
    /// Added to DESC, AVAIL and USED: where this queue's rings are.
    pub off: u64,
}

impl Driver {
    pub fn new(size: u16) -> Driver {
        Driver::at(size, 0)
    }

    /// A queue whose rings are `off` bytes above the default ones.
    pub fn at(size: u16, off: u64) -> Driver {
        Driver {
            size,
            avail_idx: 0,
            off,
        }
    }

    pub fn queue(&self) -> Queue {
        Queue {
            size: self.size,
            ready: true,
            desc: DESC + self.off,
            avail: AVAIL + self.off,
            used: USED + self.off,
            ..Queue::default()
        }
    }

    /// Writes descriptor `i` of the table at `table` (a test helper: the
    /// arguments are the descriptor's fields).
    #[allow(clippy::too_many_arguments)]
    pub fn desc(
        &self,
        ram: &TestRam,
        table: u64,
        i: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) {
        let mut d = Vec::new();
        d.extend_from_slice(&addr.to_le_bytes());
        d.extend_from_slice(&len.to_le_bytes());
        d.extend_from_slice(&flags.to_le_bytes());
        d.extend_from_slice(&next.to_le_bytes());
        ram.put(table + u64::from(i) * 16, &d);
    }

    /// Publishes `head` in the avail ring.
    pub fn offer(&mut self, ram: &TestRam, head: u16) {
        let slot = u64::from(self.avail_idx % self.size);
        ram.put(AVAIL + self.off + 4 + 2 * slot, &head.to_le_bytes());
        self.avail_idx = self.avail_idx.wrapping_add(1);
        ram.put(AVAIL + self.off + 2, &self.avail_idx.to_le_bytes());
    }

    /// A chain of direct descriptors starting at `first`: (addr, len, write).
    pub fn chain(&self, ram: &TestRam, first: u16, bufs: &[(u64, u32, bool)]) {
        for (k, &(addr, len, w)) in bufs.iter().enumerate() {
            let i = first + k as u16;
            let last = k + 1 == bufs.len();
            let flags = if w { F_WRITE } else { 0 } | if last { 0 } else { F_NEXT };
            self.desc(ram, DESC + self.off, i, addr, len, flags, i + 1);
        }
    }

    /// The used ring: (idx, entries).
    pub fn used(&self, ram: &TestRam) -> (u16, Vec<(u32, u32)>) {
        let used = USED + self.off;
        let idx = u16::from_le_bytes(ram.get(used + 2, 2).try_into().unwrap());
        let entries = (0..idx.min(self.size))
            .map(|s| {
                let e = ram.get(used + 4 + 8 * u64::from(s), 8);
                (
                    u32::from_le_bytes(e[0..4].try_into().unwrap()),
                    u32::from_le_bytes(e[4..8].try_into().unwrap()),
                )
            })
            .collect();
        (idx, entries)
    }
}

#[test]
fn direct_chain_round_trip() {
    let ram = TestRam::new(RAM, 0x20000);
    let mut drv = Driver::new(8);
    let mut q = drv.queue();
    assert!(q.valid());
    ram.put(DATA, b"hello, ");
    ram.put(DATA + 0x100, b"world");
    drv.chain(
        &ram,
        2,
        &[
            (DATA, 7, false),
            (DATA + 0x100, 5, false),
            (DATA + 0x200, 16, true),
        ],
    );
    drv.offer(&ram, 2);
    assert!(q.has_avail(&ram).unwrap());
    let c = q.pop(&ram).unwrap().unwrap();
    assert_eq!(c.head, 2);
    assert_eq!((c.len(false), c.len(true)), (12, 16));
    let mut r = c.reader();
    let mut got = [0u8; 20];
    assert_eq!(r.read(&ram, &mut got).unwrap(), 12);
    assert_eq!(&got[..12], b"hello, world");
    let mut w = c.writer();
    assert_eq!(w.write(&ram, b"0123456789abcdefXYZ").unwrap(), 16);
    assert_eq!(ram.get(DATA + 0x200, 16), b"0123456789abcdef");
    assert!(q.push_used(&ram, c.head, 16).unwrap());
    assert_eq!(drv.used(&ram), (1, vec![(2, 16)]));
    assert_eq!(q.pop(&ram).unwrap(), None);
}

#[test]
fn no_interrupt_flag_is_honoured() {
    let ram = TestRam::new(RAM, 0x20000);
    let mut drv = Driver::new(4);
    let mut q = drv.queue();
    drv.chain(&ram, 0, &[(DATA, 4, true)]);
    drv.offer(&ram, 0);
    ram.put(AVAIL, &1u16.to_le_bytes());
    let c = q.pop(&ram).unwrap().unwrap();
    assert!(!q.push_used(&ram, c.head, 0).unwrap());
}

#[test]
fn indirect_table() {
    let ram = TestRam::new(RAM, 0x20000);
    let mut drv = Driver::new(4);
    let mut q = drv.queue();
    let table = RAM + 0x3000;
    drv.desc(&ram, table, 0, DATA, 3, F_NEXT, 1);
    drv.desc(&ram, table, 1, DATA + 0x10, 9, F_WRITE, 0);
    drv.desc(&ram, DESC, 1, table, 32, F_INDIRECT, 0);
    drv.offer(&ram, 1);
    let c = q.pop(&ram).unwrap().unwrap();
    assert_eq!(
        c.bufs,
        vec![
            Buf {
                addr: DATA,
                len: 3,
                write: false
            },
            Buf {
                addr: DATA + 0x10,
                len: 9,
                write: true
            }
        ]
    );
}

/// Each hostile ring gets its error, and the queue neither panics nor
/// moves past the bad entry.
#[test]
fn hostile_rings_are_refused() {
    type Setup = fn(&TestRam, &Driver);
    let cases: &[(&str, Setup, QueueError)] = &[
        (
            "head out of the table",
            |ram, _| {
                ram.put(AVAIL + 4, &9u16.to_le_bytes());
            },
            QueueError::BadIndex(9),
        ),
        (
            "next out of the table",
            |ram, d| {
                d.desc(ram, DESC, 0, DATA, 4, F_NEXT, 200);
            },
            QueueError::BadIndex(200),
        ),
        (
            "loop",
            |ram, d| {
                d.desc(ram, DESC, 0, DATA, 4, F_NEXT, 1);
                d.desc(ram, DESC, 1, DATA, 4, F_NEXT, 0);
            },
            QueueError::ChainTooLong,
        ),
        (
            "self loop",
            |ram, d| {
                d.desc(ram, DESC, 0, DATA, 4, F_NEXT, 0);
            },
            QueueError::ChainTooLong,
        ),
        (
            "address overflow",
            |ram, d| {
                d.desc(ram, DESC, 0, u64::MAX - 2, 16, 0, 0);
            },
            QueueError::Overflow,
        ),
        (
            "read after write",
            |ram, d| {
                d.desc(ram, DESC, 0, DATA, 4, F_NEXT | F_WRITE, 1);
                d.desc(ram, DESC, 1, DATA, 4, 0, 0);
            },
            QueueError::ReadAfterWrite,
        ),
        (
            "indirect with next",
            |ram, d| {
                d.desc(ram, DESC, 0, RAM + 0x3000, 32, F_INDIRECT | F_NEXT, 1);
            },
            QueueError::BadIndirect,
        ),
        (
            "indirect of odd length",
            |ram, d| {
                d.desc(ram, DESC, 0, RAM + 0x3000, 20, F_INDIRECT, 0);
            },
            QueueError::BadIndirect,
        ),
        (
            "empty indirect",
            |ram, d| {
                d.desc(ram, DESC, 0, RAM + 0x3000, 0, F_INDIRECT, 0);
            },
            QueueError::BadIndirect,
        ),
        (
            "huge indirect",
            |ram, d| {
                d.desc(ram, DESC, 0, RAM + 0x3000, 16 * 100_000, F_INDIRECT, 0);
            },
            QueueError::BadIndirect,
        ),
        (
            "nested indirect",
            |ram, d| {
                d.desc(ram, RAM + 0x3000, 0, RAM + 0x3000, 16, F_INDIRECT, 0);
                d.desc(ram, DESC, 0, RAM + 0x3000, 16, F_INDIRECT, 0);
            },
            QueueError::BadIndirect,
        ),
        (
            "indirect loop",
            |ram, d| {
                d.desc(ram, RAM + 0x3000, 0, DATA, 4, F_NEXT, 1);
                d.desc(ram, RAM + 0x3000, 1, DATA, 4, F_NEXT, 0);
                d.desc(ram, DESC, 0, RAM + 0x3000, 32, F_INDIRECT, 0);
            },
            QueueError::ChainTooLong,
        ),
        (
            "indirect next beyond its table",
            |ram, d| {
                d.desc(ram, RAM + 0x3000, 0, DATA, 4, F_NEXT, 5);
                d.desc(ram, DESC, 0, RAM + 0x3000, 32, F_INDIRECT, 0);
            },
            QueueError::BadIndex(5),
        ),
        (
            "indirect table outside RAM",
            |_, d| {
                let _ = d;
            },
            QueueError::Memory(MemError { gpa: 0, len: 0 }),
        ),
    ];
    for (name, setup, want) in cases {
        let ram = TestRam::new(RAM, 0x20000);
        let mut drv = Driver::new(4);
        let mut q = drv.queue();
        if name.starts_with("indirect table outside") {
            drv.desc(&ram, DESC, 0, 0x1000, 32, F_INDIRECT, 0);
        }
        drv.offer(&ram, 0);
        setup(&ram, &drv);
        let got = q.pop(&ram);
        match (want, got) {
            (QueueError::Memory(_), Err(QueueError::Memory(_))) => {}
            (w, g) => assert_eq!(g, Err(*w), "{name}"),
        }
        // Still stuck on the bad entry, no panic on retry.
        assert!(q.pop(&ram).is_err(), "{name}");
    }
}

#[test]
fn avail_index_running_ahead_is_refused() {
    let ram = TestRam::new(RAM, 0x20000);
    let drv = Driver::new(4);
    let mut q = drv.queue();
    ram.put(AVAIL + 2, &5u16.to_le_bytes());
    assert_eq!(
        q.pop(&ram),
        Err(QueueError::AvailOverrun { avail: 5, last: 0 })
    );
}

#[test]
fn rings_outside_ram_are_errors_not_panics() {
    let ram = TestRam::new(RAM, 0x20000);
    let mut q = Queue {
        size: 4,
        ready: true,
        desc: 0x10,
        avail: 0x1000_0000_0000,
        used: u64::MAX - 3,
        ..Queue::default()
    };
    assert!(q.pop(&ram).is_err());
    assert!(q.has_avail(&ram).is_err());
    assert!(!q.valid(), "used ring end overflows");
}

#[test]
fn rings_must_lie_in_ram() {
    let ram = TestRam::new(RAM, 0x4000);
    let end = RAM + 0x4000;
    let q = Driver::new(256).queue();
    assert!(q.in_memory(&ram));
    for (name, q) in [
        (
            "descriptor table past the end",
            Queue {
                desc: end - 0x800,
                ..q.clone()
            },
        ),
        (
            "driver ring past the end",
            Queue {
                avail: end - 0x100,
                ..q.clone()
            },
        ),
        (
            "device ring past the end",
            Queue {
                used: end - 0x10,
                ..q.clone()
            },
        ),
        (
            "device ring below RAM",
            Queue {
                used: RAM - 0x1000,
                ..q.clone()
            },
        ),
        (
            "descriptor table at 2^64 - 16",
            Queue {
                desc: u64::MAX - 15,
                ..q.clone()
            },
        ),
    ] {
        assert!(!q.in_memory(&ram), "{name}");
    }
    // Exactly at the end still fits.
    let last = Queue {
        size: 1,
        used: end - 14,
        ..q
    };
    assert!(last.in_memory(&ram));
}

#[test]
fn configurations_that_cannot_go_live() {
    let base = Driver::new(8).queue();
    for (name, q) in [
        (
            "size 0",
            Queue {
                size: 0,
                ..base.clone()
            },
        ),
        (
            "size 3",
            Queue {
                size: 3,
                ..base.clone()
            },
        ),
        (
            "size too large",
            Queue {
                size: 512,
                ..base.clone()
            },
        ),
        (
            "desc misaligned",
            Queue {
                desc: DESC + 8,
                ..base.clone()
            },
        ),
        (
            "avail misaligned",
            Queue {
                avail: AVAIL + 1,
                ..base.clone()
            },
        ),
        (
            "used misaligned",
            Queue {
                used: USED + 2,
                ..base.clone()
            },
        ),
    ] {
        assert!(!q.valid(), "{name}");
    }
    assert!(base.valid());
}

#[test]
fn wraps_past_u16() {
    let ram = TestRam::new(RAM, 0x20000);
    let mut drv = Driver::new(2);
    let mut q = drv.queue();
    drv.chain(&ram, 0, &[(DATA, 1, true)]);
    for _ in 0..70_000u32 {
        drv.offer(&ram, 0);
        let c = q.pop(&ram).unwrap().unwrap();
        q.push_used(&ram, c.head, 1).unwrap();
    }
    assert_eq!(drv.used(&ram).0, (70_000u32 % 65536) as u16);
}

#[test]
fn zero_length_buffers_are_dropped_and_cursors_stop_at_the_end() {
    let ram = TestRam::new(RAM, 0x20000);
    let mut drv = Driver::new(4);
    let mut q = drv.queue();
    ram.put(DATA, b"ab");
    drv.chain(
        &ram,
        0,
        &[(DATA, 0, false), (DATA, 2, false), (DATA + 8, 0, true)],
    );
    drv.offer(&ram, 0);
    let c = q.pop(&ram).unwrap().unwrap();
    assert_eq!(c.bufs.len(), 1);
    let mut r = c.reader();
    assert_eq!(r.remaining(), 2);
    assert_eq!(r.skip(1), 1);
    let mut b = [0u8; 4];
    assert_eq!(r.read(&ram, &mut b).unwrap(), 1);
    assert_eq!(b[0], b'b');
    assert_eq!(r.remaining(), 0);
    assert_eq!(c.writer().write(&ram, b"x").unwrap(), 0);
}

/// [`TestRam`] whose blocks of [`LAZY_BLOCK`] bytes start untouched, as a
/// VM's lazily zeroed RAM does: `prepare` zeroes within its allowance;
/// `read`/`write` on an untouched block zero it themselves (counted apart,
/// as work nobody budgeted).
struct LazyTestRam {
    ram: TestRam,
    ready: RefCell<Vec<bool>>,
    prepared: Cell<u32>,
    unbudgeted: Cell<u32>,
}

const LAZY_BLOCK: u64 = 0x1000;

impl LazyTestRam {
    fn new(size: usize) -> LazyTestRam {
        let blocks = size / LAZY_BLOCK as usize;
        LazyTestRam {
            ram: TestRam::new(RAM, size),
            ready: RefCell::new(vec![false; blocks]),
            prepared: Cell::new(0),
            unbudgeted: Cell::new(0),
        }
    }

    fn blocks(&self, gpa: u64, len: u64) -> core::ops::RangeInclusive<usize> {
        let first = ((gpa - RAM) / LAZY_BLOCK) as usize;
        let last = ((gpa + len.max(1) - 1 - RAM) / LAZY_BLOCK) as usize;
        first..=last
    }

    fn touch(&self, gpa: u64, len: u64) {
        for i in self.blocks(gpa, len) {
            let mut ready = self.ready.borrow_mut();
            if !ready[i] {
                ready[i] = true;
                self.unbudgeted.set(self.unbudgeted.get() + 1);
            }
        }
    }

    /// Marks `[gpa, gpa + len)` touched by the guest (its rings).
    fn touched_by_guest(&self, gpa: u64, len: u64) {
        for i in self.blocks(gpa, len) {
            self.ready.borrow_mut()[i] = true;
        }
    }
}

impl GuestMemory for LazyTestRam {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.ram.range(gpa, buf.len())?;
        self.touch(gpa, buf.len() as u64);
        self.ram.read(gpa, buf)
    }

    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        self.ram.range(gpa, data.len())?;
        self.touch(gpa, data.len() as u64);
        self.ram.write(gpa, data)
    }

    fn prepare(&self, gpa: u64, len: u64, zero_allowance: u32) -> crate::dev::vdev::bus::Prepared {
        use crate::dev::vdev::bus::Prepared;
        if len == 0 || self.ram.range(gpa, len as usize).is_err() {
            return Prepared::READY;
        }
        let mut zeroed = 0;
        for i in self.blocks(gpa, len) {
            if self.ready.borrow()[i] {
                continue;
            }
            if zeroed == zero_allowance {
                return Prepared {
                    zeroed,
                    ready: false,
                };
            }
            self.ready.borrow_mut()[i] = true;
            self.prepared.set(self.prepared.get() + 1);
            zeroed += 1;
        }
        Prepared {
            zeroed,
            ready: true,
        }
    }
}

/// Takes the next chain as a device's exit would: one whole budget per
/// call. Returns the outcome and the zeroings that call did.
fn pop_in_one_exit(q: &mut Queue, mem: &LazyTestRam) -> (Pop, u32) {
    let before = mem.prepared.get();
    let mut budget = crate::dev::virtio::Budget::exit();
    assert!(budget.chain());
    let p = q.pop_within(mem, &mut budget).unwrap();
    (p, mem.prepared.get() - before)
}

#[test]
fn a_chain_over_untouched_blocks_costs_one_zeroing_per_exit() {
    // 64 one-byte writable buffers, each in a block of its own that the
    // guest never touched (the attack: one exit zeroing 510 blocks).
    let mem = LazyTestRam::new(0x60000);
    mem.touched_by_guest(RAM, 0x3000);
    let mut drv = Driver::new(64);
    let mut q = drv.queue();
    let bufs: Vec<(u64, u32, bool)> = (0..64u64)
        .map(|k| (RAM + 0x10000 + k * LAZY_BLOCK, 1, true))
        .collect();
    drv.chain(&mem.ram, 0, &bufs);
    drv.offer(&mem.ram, 0);
    let mut exits = 0;
    let chain = loop {
        exits += 1;
        let (p, zeroed) = pop_in_one_exit(&mut q, &mem);
        assert!(zeroed <= 1, "exit {exits} zeroed {zeroed} blocks");
        match p {
            Pop::Chain(c) => break c,
            Pop::Later => assert_eq!(zeroed, 1, "a Later with a fresh budget makes progress"),
            Pop::Empty => panic!("the chain vanished"),
        }
        assert!(exits <= 64, "no progress");
    };
    // The exit that zeroes the last block takes the chain too (one step
    // more: what the budget allows after a zeroing).
    assert_eq!(exits, 64, "one zeroing per exit");
    assert_eq!(chain.bufs.len(), 64);
    // The device's copies then touch only ready memory.
    let mut w = chain.writer();
    assert_eq!(w.write(&mem, &[7u8; 64]).unwrap(), 64);
    assert_eq!(mem.unbudgeted.get(), 0, "no zeroing outside the budget");
    assert_eq!(q.pop(&mem).unwrap(), None);
}

#[test]
fn an_indirect_table_in_an_untouched_block_is_zeroed_within_the_budget() {
    let mem = LazyTestRam::new(0x40000);
    mem.touched_by_guest(RAM, 0x3000);
    mem.touched_by_guest(DATA, 0x100);
    let mut drv = Driver::new(4);
    let mut q = drv.queue();
    let table = RAM + 0x20000;
    // The table is written by the "guest" through the test RAM directly
    // (its block stays untouched for the device).
    // Its one buffer is in another untouched block.
    drv.desc(&mem.ram, table, 0, RAM + 0x30000, 16, F_WRITE, 0);
    drv.desc(&mem.ram, DESC, 0, table, 16, F_INDIRECT, 0);
    drv.offer(&mem.ram, 0);
    let (p, zeroed) = pop_in_one_exit(&mut q, &mem);
    assert_eq!((p, zeroed), (Pop::Later, 1), "the table's block first");
    let (p, zeroed) = pop_in_one_exit(&mut q, &mem);
    assert!(matches!(p, Pop::Chain(ref c) if c.bufs.len() == 1), "{p:?}");
    assert_eq!(zeroed, 1, "then the buffer's");
    assert_eq!(mem.unbudgeted.get(), 0);
}

#[test]
fn a_budget_that_zeroed_once_zeroes_nothing_more_and_leaves_the_chain() {
    let mem = LazyTestRam::new(0x40000);
    mem.touched_by_guest(RAM, 0x3000);
    let mut drv = Driver::new(4);
    let mut q = drv.queue();
    drv.chain(&mem.ram, 0, &[(RAM + 0x30000, 8, true)]);
    drv.chain(&mem.ram, 1, &[(RAM + 0x38000, 8, true)]);
    drv.offer(&mem.ram, 0);
    drv.offer(&mem.ram, 1);
    let mut budget = crate::dev::virtio::Budget::exit();
    // The first chain's block is zeroed within the budget and taken...
    assert!(matches!(
        q.pop_within(&mem, &mut budget).unwrap(),
        Pop::Chain(_)
    ));
    assert_eq!(mem.prepared.get(), 1);
    // ... the second's waits for another budget.
    assert_eq!(q.pop_within(&mem, &mut budget).unwrap(), Pop::Later);
    assert_eq!(mem.prepared.get(), 1);
    assert!(q.has_avail(&mem).unwrap(), "the chain stays in the ring");
    let (p, zeroed) = pop_in_one_exit(&mut q, &mem);
    assert!(matches!(p, Pop::Chain(_)));
    assert_eq!(zeroed, 1);
}
