//! The attacker's virtio phase (docs/test-guest.md), shared by the arm64
//! and LoongArch test guests: it drives the VM's virtio-mmio transports
//! itself, with no OS, and hands them everything a broken or malicious
//! driver could: refused features, impossible queue setups, hostile
//! descriptor tables (loops, chains longer than the queue, bad indirect
//! tables, addresses outside RAM, lengths that overflow), huge and
//! malformed block requests, notifications of queues that do not exist,
//! garbage in every register of every width, a flood of forged frames at
//! the switch; and leaves every device broken.
//!
//! What the virtio 1.x spec makes visible is checked from here: a queue
//! that cannot work reads back QueueReady 0; after each broken ring the
//! device shows DEVICE_NEEDS_RESET in Status and the configuration bit in
//! InterruptStatus; after a reset (Status = 0) it works again: a block read
//! returns the disk's data, a console write is a line on the console
//! (`VIRTIO-CONSOLE ok ...`, which the judges count), a network frame is
//! taken. The phase ends with each device broken once more, so that
//! kestrel's end-of-VM line names all three as needing reset.
//!
//! Each sub-phase is one `PASS`/`FAIL attack-virtio-<name>` line:
//! `setup`, `rings`, `block`, `switch`, `registers`, `left-broken`
//! ([`phase`]). What differs between the guests comes from
//! [`VirtioHost`]: register accesses, the barrier, how a faulting access
//! of the register sweep is caught and judged, where else in the guest
//! physical space a device must not take data from, and how a line is
//! printed. The arm64 guest adds a timed oversized notify of its own
//! (`attack-virtio-budget`, which needs -icount) on top of [`Drv`].
//!
//! The disk is `configs/test/arm64-hostile-disk.img`: 8 sectors whose bytes
//! [`disk_byte`] computes.

use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use crate::virtio_mmio::{
    reg, ACK, DRIVER, DRIVER_OK, FEATURES_OK, ID_BLOCK, ID_CONSOLE, ID_NET, INT_CONFIG, MAGIC,
    NEEDS_RESET, REGION, VERSION_1,
};

/// What the phase needs from the guest it runs in. The guest runs with
/// one vCPU and its RAM identity mapped (a static's address is what
/// [`VirtioHost::gpa`] turns into a guest physical address); the
/// transports' windows are mapped as device memory.
pub trait VirtioHost {
    /// Reads the 32-bit register at `addr` of one of the VM's transports.
    fn read32(addr: usize) -> u32;
    /// Writes the 32-bit register at `addr`.
    fn write32(addr: usize, v: u32);
    /// Reads the byte at `addr` of a transport's configuration space.
    fn read8(addr: usize) -> u8;
    /// Orders the ring memory written before it before the register
    /// access after it, and a register access before the ring reads after
    /// it.
    fn barrier();
    /// The guest physical address the device must be given for the byte
    /// of this guest's RAM at `addr`.
    fn gpa(addr: usize) -> u64;
    /// Guest physical addresses besides "past the end of RAM" a device
    /// must not take data from (one hostile ring each, named
    /// `data ...`): where this architecture's VM has holes, other
    /// devices, host-sized addresses.
    const DATA_ELSEWHERE: &'static [(&'static str, u64)];

    /// Prints the `PASS`/`FAIL` line of sub-phase `name`: `ok` checks
    /// answered as expected, `first` the first that did not (device, case,
    /// why), `what` what the sub-phase did.
    fn report(name: &str, ok: u32, first: Option<(&str, &str, &str)>, what: fmt::Arguments);

    /// The register sweep's next garbage value (one per access, load or
    /// store).
    fn random(&mut self) -> u64;
    /// One access of the register sweep: a load or (`store`) a store of
    /// `width` bytes at `addr`, of device `dev`, caught whatever it
    /// raises; `v` is what a store writes (a load's destination register
    /// starts with it). How it was answered.
    fn garbage(&mut self, dev: &str, addr: u64, width: u64, store: bool, v: u64) -> Answer;
    /// How this architecture names the sweep's accesses ("reads and
    /// writes"), the faults it accepts ("data aborts") and any other
    /// answer, for the `attack-virtio-registers` line.
    const ACCESSES: &'static str;
    const FAULTS: &'static str;
    const WRONG: &'static str;
}

/// How one access of the register sweep was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It completed.
    Done,
    /// It raised the fault the architecture allows for it.
    Fault,
    /// Anything else.
    Wrong,
}

/// Descriptor flags: another descriptor follows, device-writable,
/// an indirect table.
pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;

/// Queue size the phase uses.
const QSIZE: u16 = 8;

/// Block request types and status.
pub const T_IN: u32 = 0;
pub const T_OUT: u32 = 1;
pub const S_OK: u8 = 0;
pub const S_IOERR: u8 = 1;
pub const S_UNSUPP: u8 = 2;
/// Sectors of the hostile disk image.
pub const SECTORS: u64 = 8;

/// One queue's rings and buffers, in this VM's RAM (identity mapped,
/// normal memory). Offsets below.
#[repr(C, align(4096))]
struct Area([u8; AREA_SIZE]);
const AREA_SIZE: usize = 0x4000;
static mut AREA: Area = Area([0; AREA_SIZE]);

const DESC: usize = 0x0;
const AVAIL: usize = 0x400;
const USED: usize = 0x800;
/// An indirect table (up to 64 entries).
const INDIRECT: usize = 0x1000;
const HDR: usize = 0x2000;
/// Where [`Drv::blk`] puts a block request's data.
pub const DATA: usize = 0x2200;
const STATUS_BYTE: usize = 0x2800;
/// Transmit data of the console and network devices.
const BUF: usize = 0x3000;

/// Console lines written through the virtio console (the judge counts
/// them on the console).
static CONSOLE_LINES: AtomicU32 = AtomicU32::new(0);

/// A guest physical address past the end of this VM's RAM (set at start).
static OUTSIDE: AtomicU64 = AtomicU64::new(0);

/// Lines written through the virtio console so far.
pub fn console_lines() -> u32 {
    CONSOLE_LINES.load(Ordering::Relaxed)
}

fn va(off: usize) -> usize {
    core::ptr::addr_of_mut!(AREA) as usize + off
}

fn gpa<H: VirtioHost>(off: usize) -> u64 {
    H::gpa(va(off))
}

/// Writes `v` at offset `off` of the phase's ring area.
pub fn put<T: Copy>(off: usize, v: T) {
    assert!(off + core::mem::size_of::<T>() <= AREA_SIZE);
    assert!(off.is_multiple_of(core::mem::align_of::<T>()));
    // SAFETY: inside AREA (checked), at an offset aligned for T (checked);
    // the attacker has one vCPU, nothing else uses AREA except kestrel's
    // device, which reads and writes it by DMA only during a trapped
    // register access.
    unsafe { (va(off) as *mut T).write_volatile(v) }
}

/// Reads the `T` at offset `off` of the phase's ring area.
pub fn get<T: Copy>(off: usize) -> T {
    assert!(off + core::mem::size_of::<T>() <= AREA_SIZE);
    assert!(off.is_multiple_of(core::mem::align_of::<T>()));
    // SAFETY: as in `put`.
    unsafe { (va(off) as *const T).read_volatile() }
}

/// Writes descriptor `i` of the table at `table`.
fn desc(table: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
    let at = table + 16 * usize::from(i);
    put(at, addr);
    put(at + 8, len);
    put(at + 12, flags);
    put(at + 14, next);
}

/// Byte `i` of sector `s` of the hostile disk image.
pub fn disk_byte(s: u64, i: usize) -> u8 {
    if i % 64 == 63 {
        b'\n'
    } else {
        b"0123456789abcdef"[((s * 31 + i as u64 * 7 + (i as u64 / 64) * 3) % 16) as usize]
    }
}

/// The driver of one transport.
pub struct Drv<H> {
    pub base: usize,
    pub id: u32,
    /// The queue the phase uses: block 0, console and network 1 (transmit).
    pub q: u32,
    pub avail_idx: u16,
    pub used_seen: u16,
    host: PhantomData<H>,
}

impl<H: VirtioHost> Drv<H> {
    /// The driver of the transport at `base`, device `id`.
    pub fn new(base: usize, id: u32) -> Self {
        Drv {
            base,
            id,
            q: if id == ID_BLOCK { 0 } else { 1 },
            avail_idx: 0,
            used_seen: 0,
            host: PhantomData,
        }
    }

    pub fn rd(&self, off: usize) -> u32 {
        H::read32(self.base + off)
    }

    pub fn wr(&self, off: usize, v: u32) {
        H::write32(self.base + off, v)
    }

    pub fn name(&self) -> &'static str {
        match self.id {
            ID_BLOCK => "virtio-blk",
            ID_CONSOLE => "virtio-console",
            ID_NET => "virtio-net",
            _ => "virtio-?",
        }
    }

    /// Status = 0: whether Status and InterruptStatus read 0 afterwards.
    pub fn reset(&mut self) -> bool {
        self.wr(reg::STATUS, 0);
        self.avail_idx = 0;
        self.used_seen = 0;
        self.rd(reg::STATUS) == 0 && self.rd(reg::INTERRUPT_STATUS) == 0
    }

    /// ACK, DRIVER, driver features `f`, FEATURES_OK: whether it stuck.
    pub fn negotiate(&self, f: u64) -> bool {
        self.wr(reg::STATUS, ACK);
        self.wr(reg::STATUS, ACK | DRIVER);
        self.wr(reg::DRIVER_FEATURES_SEL, 0);
        self.wr(reg::DRIVER_FEATURES, f as u32);
        self.wr(reg::DRIVER_FEATURES_SEL, 1);
        self.wr(reg::DRIVER_FEATURES, (f >> 32) as u32);
        self.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK);
        self.rd(reg::STATUS) & FEATURES_OK != 0
    }

    /// Programs queue `q` and writes QueueReady = 1; returns QueueReady as
    /// read back.
    pub fn queue(&self, q: u32, num: u32, desc: u64, avail: u64, used: u64) -> u32 {
        self.wr(reg::QUEUE_SEL, q);
        self.wr(reg::QUEUE_NUM, num);
        self.wr(reg::QUEUE_DESC_LOW, desc as u32);
        self.wr(reg::QUEUE_DESC_HIGH, (desc >> 32) as u32);
        self.wr(reg::QUEUE_DRIVER_LOW, avail as u32);
        self.wr(reg::QUEUE_DRIVER_HIGH, (avail >> 32) as u32);
        self.wr(reg::QUEUE_DEVICE_LOW, used as u32);
        self.wr(reg::QUEUE_DEVICE_HIGH, (used >> 32) as u32);
        self.wr(reg::QUEUE_READY, 1);
        self.rd(reg::QUEUE_READY)
    }

    /// Reset, VERSION_1 only, the phase's queue live on zeroed rings,
    /// DRIVER_OK.
    pub fn up(&mut self) -> Result<(), &'static str> {
        if !self.reset() {
            return Err("Status/InterruptStatus not 0 after reset");
        }
        for off in (DESC..INDIRECT).step_by(8) {
            put(off, 0u64);
        }
        if !self.negotiate(VERSION_1) {
            return Err("FEATURES_OK refused for VERSION_1 alone");
        }
        let (d, a, u) = (gpa::<H>(DESC), gpa::<H>(AVAIL), gpa::<H>(USED));
        if self.queue(self.q, u32::from(QSIZE), d, a, u) != 1 {
            return Err("QueueReady 0 for a valid queue");
        }
        self.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
        if self.rd(reg::STATUS) != ACK | DRIVER | FEATURES_OK | DRIVER_OK {
            return Err("Status did not read back ACK|DRIVER|FEATURES_OK|DRIVER_OK");
        }
        Ok(())
    }

    /// Breaks a console (brought up by [`Drv::up`]) as
    /// `attack-virtio-left-broken` leaves it: a chain that loops on itself
    /// (kestrel's end-of-VM line says `ChainTooLong`).
    pub fn break_console(&mut self) {
        desc(DESC, 0, buf::<H>(), 16, F_NEXT, 0);
        self.offer(0)
    }

    /// Publishes avail index `idx` and notifies the phase's queue.
    pub fn publish(&mut self, idx: u16) {
        H::barrier();
        put(AVAIL + 2, idx);
        H::barrier();
        self.wr(reg::QUEUE_NOTIFY, self.q);
    }

    /// Offers the chain at `head` and notifies.
    pub fn offer(&mut self, head: u16) {
        put(AVAIL + 4 + 2 * usize::from(self.avail_idx % QSIZE), head);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.publish(self.avail_idx);
    }

    /// The next used entry (id, length), if the device returned one.
    fn used(&mut self) -> Option<(u32, u32)> {
        H::barrier();
        if get::<u16>(USED + 2) == self.used_seen {
            return None;
        }
        let slot = USED + 4 + 8 * usize::from(self.used_seen % QSIZE);
        self.used_seen = self.used_seen.wrapping_add(1);
        Some((get(slot), get(slot + 4)))
    }

    /// DEVICE_NEEDS_RESET in Status and the configuration bit in
    /// InterruptStatus: what the spec says a broken ring must show.
    fn shows_broken(&self) -> bool {
        self.rd(reg::STATUS) & NEEDS_RESET != 0 && self.rd(reg::INTERRUPT_STATUS) & INT_CONFIG != 0
    }

    /// A block request on descriptors 0..: header, `len` data bytes at
    /// DATA (device-writable for a read), status byte. Returns the used
    /// entry and the status byte.
    pub fn blk(&mut self, kind: u32, sector: u64, len: u32) -> Option<((u32, u32), u8)> {
        self.blk_at(kind, sector, gpa::<H>(DATA), len)
    }

    /// [`Drv::blk`] with the data at guest physical `data_gpa` instead.
    pub fn blk_at(
        &mut self,
        kind: u32,
        sector: u64,
        data_gpa: u64,
        len: u32,
    ) -> Option<((u32, u32), u8)> {
        put(HDR, kind);
        put(HDR + 4, 0u32);
        put(HDR + 8, sector);
        put(STATUS_BYTE, 0xffu8);
        let data = if kind == T_IN { F_WRITE } else { 0 };
        desc(DESC, 0, gpa::<H>(HDR), 16, F_NEXT, 1);
        desc(DESC, 1, data_gpa, len, data | F_NEXT, 2);
        desc(DESC, 2, gpa::<H>(STATUS_BYTE), 1, F_WRITE, 0);
        self.offer(0);
        let u = self.used()?;
        Some((u, get(STATUS_BYTE)))
    }

    /// The valid operation after a reset: a block read of `sector` with
    /// the image's data, a console line, a network frame taken.
    fn works(&mut self, n: u32, case: &str) -> Result<(), &'static str> {
        self.up()?;
        match self.id {
            ID_BLOCK => {
                let s = u64::from(n) % 6;
                for i in 0..512 {
                    put(DATA + i, 0u8);
                }
                match self.blk(T_IN, s, 512) {
                    Some(((0, 513), S_OK)) => {}
                    Some(_) => return Err("valid read: wrong used entry or status"),
                    None => return Err("valid read: no used entry"),
                }
                if (0..512).any(|i| get::<u8>(DATA + i) != disk_byte(s, i)) {
                    return Err("valid read: not the disk's data");
                }
            }
            ID_CONSOLE => {
                let mut line = LineBuf::new();
                let _ = fmt::write(
                    &mut line,
                    format_args!("VIRTIO-CONSOLE ok after {case} ({n})\n"),
                );
                for (i, &b) in line.bytes().iter().enumerate() {
                    put(BUF + i, b);
                }
                desc(DESC, 0, gpa::<H>(BUF), line.bytes().len() as u32, 0, 0);
                self.offer(0);
                if self.used() != Some((0, 0)) {
                    return Err("valid console write: no used entry");
                }
                CONSOLE_LINES.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                // A broadcast frame of the local experimental EtherType
                // behind a zeroed 12-byte header.
                for i in 0..12 + 60 {
                    put(BUF + i, 0u8);
                }
                for i in 0..6 {
                    put(BUF + 12 + i, 0xffu8);
                }
                put(BUF + 12 + 6, 0x02u8);
                put(BUF + 12 + 12, 0x88u8);
                put(BUF + 12 + 13, 0xb5u8);
                desc(DESC, 0, gpa::<H>(BUF), 12 + 60, 0, 0);
                self.offer(0);
                if self.used() != Some((0, 0)) {
                    return Err("valid frame: no used entry");
                }
            }
        }
        if self.rd(reg::STATUS) & NEEDS_RESET != 0 {
            return Err("valid operation broke the device");
        }
        Ok(())
    }
}

/// A console line built without a heap.
struct LineBuf {
    b: [u8; 96],
    n: usize,
}

impl LineBuf {
    fn new() -> Self {
        LineBuf { b: [0; 96], n: 0 }
    }
    fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

impl fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &c in s.as_bytes() {
            // The last byte is kept for the newline that ends every line.
            if self.n < self.b.len() - 1 || (c == b'\n' && self.n < self.b.len()) {
                self.b[self.n] = c;
                self.n += 1;
            }
        }
        Ok(())
    }
}

/// Outcome of a group of checks: how many passed and the first failure.
#[derive(Default)]
pub struct Outcome {
    ok: u32,
    first: Option<(&'static str, &'static str, &'static str)>,
}

impl Outcome {
    pub fn add(&mut self, dev: &'static str, case: &'static str, r: Result<(), &'static str>) {
        match r {
            Ok(()) => self.ok += 1,
            Err(why) => {
                if self.first.is_none() {
                    self.first = Some((dev, case, why));
                }
            }
        }
    }

    /// The sub-phase's line, through the guest's [`VirtioHost::report`].
    pub fn report<H: VirtioHost>(&self, name: &str, what: fmt::Arguments) {
        H::report(name, self.ok, self.first, what);
    }
}

pub fn ok_if(c: bool, why: &'static str) -> Result<(), &'static str> {
    if c {
        Ok(())
    } else {
        Err(why)
    }
}

/// The phase on the transports at `bases` (those the guest found), with
/// `outside` a guest physical address past the end of its RAM:
/// `attack-virtio-setup`, `-rings`, `-block`, `-switch`, `-registers`,
/// `-left-broken`, each a line through [`VirtioHost::report`]. `Err(n)`
/// (and nothing run) when only `n` of a disk, a console and a network port
/// answered.
pub fn phase<H: VirtioHost>(host: &mut H, bases: &[usize], outside: u64) -> Result<(), usize> {
    OUTSIDE.store(outside, Ordering::Relaxed);
    let mut drvs: [Option<Drv<H>>; 3] = [None, None, None];
    let mut found = 0;
    for &base in bases {
        let (magic, id) = (
            H::read32(base + reg::MAGIC),
            H::read32(base + reg::DEVICE_ID),
        );
        let slot = match id {
            ID_BLOCK => 0,
            ID_CONSOLE => 1,
            ID_NET => 2,
            _ => continue,
        };
        if magic == MAGIC && drvs[slot].is_none() {
            drvs[slot] = Some(Drv::new(base, id));
            found += 1;
        }
    }
    let [Some(blk), Some(con), Some(net)] = drvs else {
        return Err(found);
    };
    let mut drvs = [blk, con, net];
    setup(&mut drvs);
    rings(&mut drvs);
    block(&mut drvs[0]);
    switch::<H>(bases);
    registers(host, &mut drvs);
    leave_broken(&mut drvs);
    Ok(())
}

/// Identification, refused features and queue setups that cannot work.
fn setup<H: VirtioHost>(drvs: &mut [Drv<H>; 3]) {
    let mut o = Outcome::default();
    let outside = OUTSIDE.load(Ordering::Relaxed);
    for d in drvs.iter_mut() {
        let dev = d.name();
        let ident = d.rd(reg::MAGIC) == MAGIC && d.rd(reg::VERSION) == 2;
        o.add(dev, "identification", ok_if(ident, "magic/version wrong"));
        // Features: without VERSION_1, with a bit never offered (0,
        // 33 = ACCESS_PLATFORM, 63), all ones.
        for (case, f) in [
            ("features without VERSION_1", 0u64),
            ("feature bit 0 not offered", VERSION_1 | 1),
            ("feature bit 33 not offered", VERSION_1 | 1 << 33),
            ("feature bit 63 not offered", VERSION_1 | 1 << 63),
            ("all feature bits", u64::MAX),
        ] {
            d.reset();
            o.add(dev, case, ok_if(!d.negotiate(f), "FEATURES_OK stuck"));
            let st = d.rd(reg::STATUS);
            o.add(
                dev,
                case,
                ok_if(st & FEATURES_OK == 0, "Status shows FEATURES_OK"),
            );
        }
        // Queue setups that must not go live.
        let (ds, av, us) = (gpa::<H>(DESC), gpa::<H>(AVAIL), gpa::<H>(USED));
        let max = d.rd(reg::QUEUE_NUM_MAX);
        let cases: [(&'static str, u32, u64, u64, u64); 12] = [
            ("queue size 0", 0, ds, av, us),
            ("queue size 3", 3, ds, av, us),
            ("queue size above QueueNumMax", max * 2, ds, av, us),
            ("queue size 0xffff", 0xffff, ds, av, us),
            ("misaligned descriptor table", 8, ds + 8, av, us),
            ("odd driver ring", 8, ds, av + 1, us),
            ("misaligned device ring", 8, ds, av, us + 2),
            ("descriptor table at 2^64-16", 8, u64::MAX - 15, av, us),
            ("device ring overflowing 2^64", 8, ds, av, u64::MAX - 3),
            ("descriptor table outside RAM", 8, outside, av, us),
            ("driver ring outside RAM", 8, ds, outside, us),
            ("device ring outside RAM", 8, ds, av, outside),
        ];
        for (case, num, a, b, c) in cases {
            d.reset();
            d.negotiate(VERSION_1);
            let r = d.queue(d.q, num, a, b, c);
            o.add(dev, case, ok_if(r == 0, "QueueReady read back 1"));
        }
        // A queue the device does not have.
        d.reset();
        d.negotiate(VERSION_1);
        d.wr(reg::QUEUE_SEL, 77);
        let nmax = d.rd(reg::QUEUE_NUM_MAX);
        let r = d.queue(77, 8, ds, av, us);
        o.add(
            dev,
            "queue 77",
            ok_if(nmax == 0 && r == 0, "QueueNumMax or QueueReady not 0"),
        );
        // Notifications of queues that do not exist or are not live, on a
        // live device: nothing happens, the device still works.
        let r = d.up().and_then(|_| {
            for q in [2, 77, 0xffff, 0xffff_ffff, if d.q == 0 { 1 } else { 0 }] {
                d.wr(reg::QUEUE_NOTIFY, q);
            }
            ok_if(
                d.rd(reg::STATUS) & NEEDS_RESET == 0 && d.used().is_none(),
                "a notification of a missing queue did something",
            )
        });
        o.add(dev, "notify missing queues", r);
        o.add(dev, "after setup", d.works(0, "setup"));
    }
    o.report::<H>(
        "attack-virtio-setup",
        format_args!(
            "3 devices: identification, 5 refused feature sets, 12 impossible queues and a missing one (QueueReady 0), notifications of missing queues"
        ),
    );
}

/// A hostile ring: lays out descriptors for the driver `d` and offers them.
type Case<H> = (&'static str, fn(&mut Drv<H>));

/// Buffers the generic cases point at (readable, in RAM).
fn buf<H: VirtioHost>() -> u64 {
    gpa::<H>(BUF)
}

fn outside() -> u64 {
    OUTSIDE.load(Ordering::Relaxed)
}

/// Rings every device must refuse (walk-level errors).
fn generic<H: VirtioHost>() -> [Case<H>; 20] {
    [
        ("head index out of range", |d| d.offer(200)),
        ("head index 0xffff", |d| d.offer(0xffff)),
        ("NEXT out of range", |d| {
            desc(DESC, 0, buf::<H>(), 16, F_NEXT, QSIZE + 1);
            d.offer(0)
        }),
        ("NEXT to itself", |d| {
            desc(DESC, 3, buf::<H>(), 16, F_NEXT, 3);
            d.offer(3)
        }),
        ("NEXT 2-cycle", |d| {
            desc(DESC, 0, buf::<H>(), 16, F_NEXT, 1);
            desc(DESC, 1, buf::<H>(), 16, F_NEXT, 0);
            d.offer(0)
        }),
        ("chain longer than the queue", |d| {
            for i in 0..QSIZE {
                desc(DESC, i, buf::<H>(), 16, F_NEXT, (i + 1) % QSIZE);
            }
            d.offer(5)
        }),
        ("nested indirect table", |d| {
            desc(INDIRECT, 0, buf::<H>(), 16, F_NEXT, 1);
            desc(INDIRECT, 1, gpa::<H>(INDIRECT), 32, F_INDIRECT, 0);
            desc(DESC, 0, gpa::<H>(INDIRECT), 32, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("indirect table of length 0", |d| {
            desc(DESC, 0, gpa::<H>(INDIRECT), 0, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("indirect table of length 0xffffffff", |d| {
            desc(DESC, 0, gpa::<H>(INDIRECT), u32::MAX, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("indirect table of 0x10000 entries", |d| {
            desc(DESC, 0, gpa::<H>(INDIRECT), 0x10_0000, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("indirect table of length 24", |d| {
            desc(INDIRECT, 0, buf::<H>(), 16, 0, 0);
            desc(DESC, 0, gpa::<H>(INDIRECT), 24, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("indirect descriptor with NEXT", |d| {
            desc(INDIRECT, 0, buf::<H>(), 16, 0, 0);
            desc(DESC, 0, gpa::<H>(INDIRECT), 16, F_INDIRECT | F_NEXT, 1);
            desc(DESC, 1, buf::<H>(), 16, 0, 0);
            d.offer(0)
        }),
        ("NEXT to itself in an indirect table", |d| {
            desc(INDIRECT, 0, buf::<H>(), 16, F_NEXT, 0);
            desc(DESC, 0, gpa::<H>(INDIRECT), 64, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("2-cycle in an indirect table", |d| {
            desc(INDIRECT, 0, buf::<H>(), 16, F_NEXT, 1);
            desc(INDIRECT, 1, buf::<H>(), 16, F_NEXT, 0);
            desc(DESC, 0, gpa::<H>(INDIRECT), 32, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("NEXT beyond an indirect table", |d| {
            desc(INDIRECT, 0, buf::<H>(), 16, F_NEXT, 2);
            desc(INDIRECT, 1, buf::<H>(), 16, 0, 0);
            desc(INDIRECT, 2, buf::<H>(), 16, 0, 0);
            desc(DESC, 0, gpa::<H>(INDIRECT), 32, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("indirect table outside RAM", |d| {
            desc(DESC, 0, outside(), 32, F_INDIRECT, 0);
            d.offer(0)
        }),
        ("address + length overflowing 2^64", |d| {
            desc(DESC, 0, u64::MAX - 0xff, 0x200, 0, 0);
            d.offer(0)
        }),
        ("readable after writable", |d| {
            desc(DESC, 0, buf::<H>(), 16, F_WRITE | F_NEXT, 1);
            desc(DESC, 1, buf::<H>() + 16, 16, 0, 0);
            d.offer(0)
        }),
        ("avail index 100 ahead", |d| {
            desc(DESC, 0, buf::<H>(), 16, 0, 0);
            put(AVAIL + 4, 0u16);
            d.publish(100)
        }),
        ("avail index 0x8000 ahead", |d| {
            desc(DESC, 0, buf::<H>(), 16, 0, 0);
            put(AVAIL + 4, 0u16);
            d.publish(0x8000)
        }),
    ]
}

/// Block requests that break the queue.
fn block_broken<H: VirtioHost>() -> [Case<H>; 4] {
    [
        ("request without a writable byte", |d| {
            put(HDR, T_IN);
            desc(DESC, 0, gpa::<H>(HDR), 16, 0, 0);
            d.offer(0)
        }),
        ("status byte at the end of a 0xffffffff-byte buffer", |d| {
            put(HDR, T_IN);
            put(HDR + 8, 0u64);
            desc(DESC, 0, gpa::<H>(HDR), 16, F_NEXT, 1);
            desc(DESC, 1, gpa::<H>(DATA), u32::MAX, F_WRITE, 0);
            d.offer(0)
        }),
        ("read into RAM's end and beyond", |d| {
            put(HDR, T_IN);
            put(HDR + 8, 0u64);
            desc(DESC, 0, gpa::<H>(HDR), 16, F_NEXT, 1);
            desc(
                DESC,
                1,
                outside() - 0x10_0000 - 256,
                512,
                F_WRITE | F_NEXT,
                2,
            );
            desc(DESC, 2, gpa::<H>(STATUS_BYTE), 1, F_WRITE, 0);
            d.offer(0)
        }),
        ("write from outside RAM", |d| {
            put(HDR, T_OUT);
            put(HDR + 8, 7u64);
            desc(DESC, 0, gpa::<H>(HDR), 16, F_NEXT, 1);
            desc(DESC, 1, outside(), 512, F_NEXT, 2);
            desc(DESC, 2, gpa::<H>(STATUS_BYTE), 1, F_WRITE, 0);
            d.offer(0)
        }),
    ]
}

/// What one hostile ring does: a [`Case`], or 80 bytes of data to read at
/// a guest physical address where no RAM of this VM is.
#[derive(Clone, Copy)]
enum Ring<H> {
    Lay(fn(&mut Drv<H>)),
    DataAt(u64),
}

/// Every hostile ring on every device: DEVICE_NEEDS_RESET and the
/// configuration interrupt each time, the device back after a reset. The
/// rings are the generic ones, data outside RAM (past its end and
/// [`VirtioHost::DATA_ELSEWHERE`]), and for the disk the block requests
/// that break its queue.
fn rings<H: VirtioHost>(drvs: &mut [Drv<H>; 3]) {
    let mut o = Outcome::default();
    let mut n = 0u32;
    let generic = generic::<H>();
    let block_broken = block_broken::<H>();
    for d in drvs.iter_mut() {
        let dev = d.name();
        let extra: &[Case<H>] = if d.id == ID_BLOCK { &block_broken } else { &[] };
        let cases = generic
            .iter()
            .map(|&(case, f)| (case, Ring::Lay(f)))
            .chain([("data outside RAM", Ring::DataAt(outside()))])
            .chain(
                H::DATA_ELSEWHERE
                    .iter()
                    .map(|&(case, a)| (case, Ring::DataAt(a))),
            )
            .chain(extra.iter().map(|&(case, f)| (case, Ring::Lay(f))));
        for (case, ring) in cases {
            n += 1;
            let r = d.up().and_then(|_| {
                match ring {
                    Ring::Lay(f) => f(d),
                    Ring::DataAt(a) => {
                        desc(DESC, 0, a, 80, 0, 0);
                        d.offer(0)
                    }
                }
                ok_if(d.shows_broken(), "no DEVICE_NEEDS_RESET + config interrupt")
            });
            let r = r.and_then(|_| {
                // Broken: a further notification does no work.
                d.offer(0);
                ok_if(d.used().is_none(), "worked while it needs reset")
            });
            let r = r.and_then(|_| d.works(n, case));
            o.add(dev, case, r);
        }
    }
    o.report::<H>(
        "attack-virtio-rings",
        format_args!(
            "{n} hostile rings on 3 devices (bad indexes, NEXT loops, chains longer than the queue, bad indirect tables, memory outside RAM, overflows, avail overruns), each DEVICE_NEEDS_RESET + config interrupt, then a reset and a valid request"
        ),
    );
}

/// Block requests that are wrong but well formed: an error status, the
/// device stays live; and a write of the last sector read back.
fn block<H: VirtioHost>(d: &mut Drv<H>) {
    let mut o = Outcome::default();
    let dev = d.name();
    let cases: [(&'static str, u32, u64, u32, u8); 7] = [
        ("read of 0xffffffff bytes", T_IN, 0, u32::MAX, S_IOERR),
        ("read of 0xfffffe00 bytes", T_IN, 0, 0xffff_fe00, S_IOERR),
        ("write of 0xffffffff bytes", T_OUT, 0, u32::MAX, S_IOERR),
        ("read past the end", T_IN, SECTORS - 1, 1024, S_IOERR),
        ("read at sector 2^63", T_IN, 1 << 63, 512, S_IOERR),
        ("read of 100 bytes", T_IN, 0, 100, S_IOERR),
        ("request type 0x7777", 0x7777, 0, 512, S_UNSUPP),
    ];
    for (case, kind, sector, len, want) in cases {
        let r = d.up().and_then(|_| match d.blk(kind, sector, len) {
            Some(((0, 1), s)) if s == want => ok_if(
                d.rd(reg::STATUS) & NEEDS_RESET == 0,
                "the device needs reset",
            ),
            Some(_) => Err("wrong used entry or status"),
            None => Err("no used entry"),
        });
        o.add(dev, case, r);
    }
    // A write of the last sector (no other check reads it), read back.
    let r = d.up().and_then(|_| {
        for i in 0..512 {
            put(DATA + i, (i as u8) ^ 0x5a);
        }
        if d.blk(T_OUT, SECTORS - 1, 512) != Some(((0, 1), S_OK)) {
            return Err("valid write failed");
        }
        for i in 0..512 {
            put(DATA + i, 0u8);
        }
        if d.blk(T_IN, SECTORS - 1, 512) != Some(((0, 513), S_OK)) {
            return Err("read after write failed");
        }
        ok_if(
            (0..512).all(|i| get::<u8>(DATA + i) == (i as u8) ^ 0x5a),
            "read back other data than written",
        )
    });
    o.add(dev, "write and read back", r);
    o.report::<H>(
        "attack-virtio-block",
        format_args!(
            "huge (0xffffffff), short, out-of-range and unknown block requests answered IOERR/UNSUPP with the device live, a write read back"
        ),
    );
}

/// The switch phase's area: port A's transmit rings and frame, port B's
/// receive rings and buffers.
#[repr(C, align(4096))]
struct Sw([u8; SW_SIZE]);
const SW_SIZE: usize = 0x6000;
static mut SW: Sw = Sw([0; SW_SIZE]);
const SW_Q: u16 = 64;
const A_DESC: usize = 0x0;
const A_AVAIL: usize = 0x400;
const A_USED: usize = 0x600;
const B_DESC: usize = 0x1000;
const B_AVAIL: usize = 0x1400;
const B_USED: usize = 0x1600;
const A_FRAME: usize = 0x2000;
const B_BUFS: usize = 0x3000;
const B_BUF_LEN: usize = 128;
const FRAME_LEN: usize = 60;

fn sva(off: usize) -> usize {
    core::ptr::addr_of_mut!(SW) as usize + off
}

fn sgpa<H: VirtioHost>(off: usize) -> u64 {
    H::gpa(sva(off))
}

fn sput<T: Copy>(off: usize, v: T) {
    assert!(off + core::mem::size_of::<T>() <= SW_SIZE);
    assert!(off.is_multiple_of(core::mem::align_of::<T>()));
    // SAFETY: inside SW (checked), aligned for T (checked); only this vCPU
    // and kestrel's devices (by DMA) touch it.
    unsafe { (sva(off) as *mut T).write_volatile(v) }
}

fn sget<T: Copy>(off: usize) -> T {
    assert!(off + core::mem::size_of::<T>() <= SW_SIZE);
    assert!(off.is_multiple_of(core::mem::align_of::<T>()));
    // SAFETY: as in `sput`.
    unsafe { (sva(off) as *const T).read_volatile() }
}

/// Two ports of this VM on one network: A sends, B receives.
struct Ports<H> {
    a: Drv<H>,
    b: Drv<H>,
    b_mac: [u8; 6],
    /// Frames B has taken from its ring so far.
    b_seen: u16,
    /// Receive buffers posted to B so far.
    b_posted: u16,
}

impl<H: VirtioHost> Ports<H> {
    /// The MAC address in a network port's configuration space.
    fn mac(d: &Drv<H>) -> [u8; 6] {
        core::array::from_fn(|i| H::read8(d.base + reg::CONFIG + i))
    }

    /// Both ports up: A's transmit queue, B's receive queue with every
    /// buffer posted.
    fn up(&mut self) -> Result<(), &'static str> {
        for off in (0..B_BUFS).step_by(8) {
            sput(off, 0u64);
        }
        for (d, q, desc, avail, used) in [
            (&mut self.a, 1, A_DESC, A_AVAIL, A_USED),
            (&mut self.b, 0, B_DESC, B_AVAIL, B_USED),
        ] {
            if !d.reset() || !d.negotiate(VERSION_1) {
                return Err("bring-up refused");
            }
            let (ds, av, us) = (sgpa::<H>(desc), sgpa::<H>(avail), sgpa::<H>(used));
            if d.queue(q, u32::from(SW_Q), ds, av, us) != 1 {
                return Err("QueueReady 0 for a valid queue");
            }
            d.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
        }
        self.b_seen = 0;
        self.b_posted = 0;
        self.a.avail_idx = 0;
        self.post();
        Ok(())
    }

    /// Gives B back every receive buffer it used (one per descriptor).
    fn post(&mut self) {
        while self.b_posted.wrapping_sub(self.b_seen) < SW_Q {
            let i = self.b_posted % SW_Q;
            let at = B_DESC + 16 * usize::from(i);
            sput(at, sgpa::<H>(B_BUFS + B_BUF_LEN * usize::from(i)));
            sput(at + 8, B_BUF_LEN as u32);
            sput(at + 12, F_WRITE);
            sput(at + 14, 0u16);
            sput(B_AVAIL + 4 + 2 * usize::from(i), i);
            self.b_posted = self.b_posted.wrapping_add(1);
        }
        H::barrier();
        sput(B_AVAIL + 2, self.b_posted);
        H::barrier();
        self.b.wr(reg::QUEUE_NOTIFY, 0);
    }

    /// Sends one frame from A (after the zeroed 12-byte header).
    fn send(&mut self, dst: [u8; 6], src: [u8; 6]) {
        for i in 0..12 + FRAME_LEN {
            sput(A_FRAME + i, 0u8);
        }
        for i in 0..6 {
            sput(A_FRAME + 12 + i, dst[i]);
            sput(A_FRAME + 18 + i, src[i]);
        }
        sput(A_FRAME + 24, 0x88u8);
        sput(A_FRAME + 25, 0xb5u8);
        let i = self.a.avail_idx % SW_Q;
        let at = A_DESC + 16 * usize::from(i);
        sput(at, sgpa::<H>(A_FRAME));
        sput(at + 8, (12 + FRAME_LEN) as u32);
        sput(at + 12, 0u16);
        sput(at + 14, 0u16);
        sput(A_AVAIL + 4 + 2 * usize::from(i), i);
        self.a.avail_idx = self.a.avail_idx.wrapping_add(1);
        H::barrier();
        sput(A_AVAIL + 2, self.a.avail_idx);
        H::barrier();
        self.a.wr(reg::QUEUE_NOTIFY, 1);
    }

    /// Frames B received since the last call: (count, whether one of them
    /// was not addressed to B or to everyone, whether one had source
    /// `src`). Keeps giving buffers back until nothing more comes.
    fn received(&mut self, src: Option<[u8; 6]>) -> (u32, bool, bool) {
        let (mut n, mut foreign, mut from) = (0u32, false, false);
        let mut idle = 0;
        while idle < 4 {
            H::barrier();
            let used = sget::<u16>(B_USED + 2);
            if used == self.b_seen {
                idle += 1;
                // An exit: pending receive work continues.
                let _ = self.b.rd(reg::INTERRUPT_STATUS);
                self.post();
                continue;
            }
            idle = 0;
            while self.b_seen != used {
                let slot = B_USED + 4 + 8 * usize::from(self.b_seen % SW_Q);
                let id: u32 = sget(slot);
                let len: u32 = sget(slot + 4);
                let buf = B_BUFS + B_BUF_LEN * id as usize;
                if len as usize >= 12 + 12 {
                    let dst: [u8; 6] = core::array::from_fn(|k| sget(buf + 12 + k));
                    let s: [u8; 6] = core::array::from_fn(|k| sget(buf + 18 + k));
                    if dst != self.b_mac && dst != [0xff; 6] {
                        foreign = true;
                    }
                    if Some(s) == src {
                        from = true;
                    }
                }
                n += 1;
                self.b_seen = self.b_seen.wrapping_add(1);
            }
            self.post();
        }
        (n, foreign, from)
    }
}

/// The switch's port security from the attacker's side, with two of its
/// own ports on one network (A sends, B receives): a genuine unicast A to
/// B arrives; frames with a forged source MAC (unicast to B, broadcast) do
/// not; after a flood of frames from 64 invented source MACs, unicast to a
/// MAC no port owns is not flooded to B; of a burst of 300 broadcasts B
/// gets at most 150 (the port's budget, 1000 a second in bursts of 100).
fn switch<H: VirtioHost>(bases: &[usize]) {
    let mut o = Outcome::default();
    let mut nets = bases
        .iter()
        .filter(|&&b| H::read32(b + reg::DEVICE_ID) == ID_NET);
    let (Some(&a), Some(&b)) = (nets.next(), nets.next()) else {
        o.add(
            "virtio-net",
            "two ports",
            Err("fewer than two network ports"),
        );
        o.report::<H>("attack-virtio-switch", format_args!("VIRTIO-SWITCH"));
        return;
    };
    let (a, b) = (Drv::<H>::new(a, ID_NET), Drv::<H>::new(b, ID_NET));
    let (a_mac, b_mac) = (Ports::mac(&a), Ports::mac(&b));
    let mut ps = Ports {
        a,
        b,
        b_mac,
        b_seen: 0,
        b_posted: 0,
    };
    let dev = "virtio-net";
    let mut bcast = 0;
    let r = ps.up().and_then(|_| {
        ps.send(b_mac, a_mac);
        let (n, foreign, _) = ps.received(None);
        ok_if(
            n == 1 && !foreign,
            "a genuine unicast A -> B did not arrive once",
        )
    });
    o.add(dev, "genuine unicast", r);
    let forged = [0x02, 0x66, 0x66, 0x66, 0x66, 0x66];
    let r = ps.up().and_then(|_| {
        for _ in 0..5 {
            ps.send(b_mac, forged);
            ps.send([0xff; 6], forged);
        }
        let (n, _, from) = ps.received(Some(forged));
        ok_if(
            n == 0 && !from,
            "a frame with a forged source MAC reached B",
        )
    });
    o.add(dev, "forged source MAC", r);
    let unknown = [0x02, 0x77, 0x77, 0x77, 0x77, 0x77];
    let r = ps.up().and_then(|_| {
        for i in 0..64u8 {
            ps.send([0xff; 6], [0x02, 0x55, 0, 0, 1, i]);
        }
        ps.send(unknown, a_mac);
        let (n, foreign, _) = ps.received(None);
        ok_if(
            n == 0 && !foreign,
            "after a MAC flood, unicast to an unknown MAC reached B",
        )
    });
    o.add(dev, "MAC flood", r);
    let r = ps.up().and_then(|_| {
        for _ in 0..300 {
            ps.send([0xff; 6], a_mac);
        }
        let (n, foreign, _) = ps.received(None);
        bcast = n;
        ok_if(
            (1..=150).contains(&n) && !foreign,
            "a broadcast flood was not held to the port's budget",
        )
    });
    o.add(dev, "broadcast flood", r);
    o.report::<H>(
        "attack-virtio-switch",
        format_args!(
            "VIRTIO-SWITCH genuine unicast, forged source, MAC flood and broadcast flood ({bcast} of 300 broadcasts reached the other port)"
        ),
    );
}

/// Garbage at every offset of the 0x200 window (registers and
/// configuration space) with every width, loaded and stored: each access
/// completes or raises the fault the architecture allows
/// ([`VirtioHost::garbage`] decides); afterwards a reset brings the
/// device back.
fn registers<H: VirtioHost>(host: &mut H, drvs: &mut [Drv<H>; 3]) {
    let mut o = Outcome::default();
    let (mut done, mut faults, mut wrong) = (0u64, 0u64, 0u64);
    for d in drvs.iter_mut() {
        let base = d.base as u64;
        for store in [false, true] {
            for width in [1u64, 2, 4, 8] {
                // Every aligned offset and, for the wider accesses, the
                // misaligned ones one byte up.
                for off in (0..REGION as u64).step_by(width as usize) {
                    for a in [off, off + 1] {
                        if (a != off && width == 1) || a + width > REGION as u64 {
                            continue;
                        }
                        let v = host.random();
                        match host.garbage(d.name(), base + a, width, store, v) {
                            Answer::Done => done += 1,
                            Answer::Fault => faults += 1,
                            Answer::Wrong => wrong += 1,
                        }
                    }
                }
            }
        }
        o.add(d.name(), "after garbage", d.works(1, "garbage registers"));
    }
    if wrong != 0 {
        o.add("virtio", "garbage", Err(H::WRONG));
    }
    o.report::<H>(
        "attack-virtio-registers",
        format_args!(
            "{} {} of garbage across the 0x200 window of each device, every width ({done} completed, {faults} {}), each device back after a reset",
            done + faults + wrong,
            H::ACCESSES,
            H::FAULTS
        ),
    );
}

/// Breaks each device once more and leaves it so: kestrel's end-of-VM
/// line must name all three (the judge checks the reasons).
fn leave_broken<H: VirtioHost>(drvs: &mut [Drv<H>; 3]) {
    let mut o = Outcome::default();
    for d in drvs.iter_mut() {
        let dev = d.name();
        let r = d.up().and_then(|_| {
            match d.id {
                // BadIndex(200)
                ID_BLOCK => d.offer(200),
                // ChainTooLong
                ID_CONSOLE => d.break_console(),
                // AvailOverrun
                _ => d.publish(100),
            }
            ok_if(d.shows_broken(), "no DEVICE_NEEDS_RESET")
        });
        o.add(dev, "left broken", r);
    }
    o.report::<H>(
        "attack-virtio-left-broken",
        format_args!(
            "each device left in DEVICE_NEEDS_RESET for kestrel's end-of-VM line; {} VIRTIO-CONSOLE lines written",
            console_lines()
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    /// [`disk_byte`] is the image the hostile VMs get as their disk.
    #[test]
    fn disk_byte_is_the_hostile_disk_image() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../configs/test/arm64-hostile-disk.img"
        );
        let img = std::fs::read(path).unwrap();
        assert_eq!(img.len() as u64, SECTORS * 512);
        for (k, b) in img.iter().enumerate() {
            assert_eq!(*b, disk_byte(k as u64 / 512, k % 512), "byte {k}");
        }
    }

    /// A console line longer than the buffer is cut, its newline kept.
    #[test]
    fn line_buf_keeps_the_newline() {
        let mut l = LineBuf::new();
        let long = "x".repeat(200);
        writeln!(l, "VIRTIO-CONSOLE ok after {long} (3)").unwrap();
        assert_eq!(l.bytes().len(), 96);
        assert_eq!(l.bytes()[95], b'\n');
        let mut s = LineBuf::new();
        writeln!(s, "VIRTIO-CONSOLE ok after setup (0)").unwrap();
        assert_eq!(s.bytes(), b"VIRTIO-CONSOLE ok after setup (0)\n");
    }
}
