//! Device work whose size the attacker chooses (issue 28, items 4 and 5;
//! `docs/test-guest-loongarch.md`), timed under -icount from both sides:
//! the LoongArch counterparts of the arm64 guest's `hostile/cold.rs`.
//!
//! - `attack-cold-tx` (attacker, phase `cold`): one console transmit
//!   chain of 1-byte buffers, each in its own 2 MiB block of the
//!   attacker's RAM that nothing else of the guest touches ([`cold`]),
//!   offered and notified with one store; every exit timed until the
//!   chain is used. LoongArch kestrel zeroes a VM's RAM when it builds
//!   (and restarts) it, so no block costs a first-touch zeroing here: the
//!   chain checks that its descriptor walk and 1-byte copies stay within
//!   one budget per exit.
//! - Two receive rings on the attacker's ports on the network it shares
//!   with the victim ([`arm_receivers`]): port C, the hostile receiver
//!   (255 NEXT-linked zero-length buffers ending in a 256-entry indirect
//!   table, every avail slot naming head 0, refilled as it is used); port
//!   D, one chain over the other half of the blocks.
//! - `victim-send-hostile-receiver` and `victim-send-cold-receiver`
//!   (victim, [`victim_sends`]): after its window the victim sends rounds
//!   of 32 frames to each port, one notify each, and times every notify
//!   exit as its own time (elapsed counter time less the stolen time its
//!   steal-time record, KVM's ABI, gained meanwhile, so a time slice of
//!   the attacker inside the measurement does not count). Frames for a VM
//!   are only held in the sender's exit and the receiver's ring is walked
//!   in the receiver's own time (`docs/virtio.md`), so the median notify
//!   stays under 1 ms and the worst under 2 ([`VICTIM_WORST_NS`]).
//!
//! Times are counter time converted to ns (the counter runs at
//! `COUNTER_HZ`, 100 MHz on QEMU): under -icount shift=0 a ns is an
//! instruction, and the attacker's exits are judged against 1,000,000.

use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;

use guest_common::hostile_virtio::{
    self as shared, reg, VirtioHost, ACK, DRIVER, DRIVER_OK, FEATURES_OK, F_INDIRECT, F_NEXT,
    F_WRITE, ID_CONSOLE, ID_NET, NEEDS_RESET, VERSION_1,
};
use kestrel_abi::loongarch::{FN_NOTIFY, KVM_FEATURE_STEAL_TIME};

use super::virtio::{transports, La64};
use crate::console::{fail, pass, println, report, Msg};
use crate::{cpu, trap, COUNTER_HZ, RAM_TOP};

type Drv = shared::Drv<La64<'static>>;

/// A 2 MiB block of guest RAM (kestrel's frame on LoongArch).
const BLOCK: u64 = 2 << 20;
/// Exits slower than this fail: 1 ms, 1,000,000 instructions under
/// -icount shift=0.
pub const LIMIT_NS: u64 = 1_000_000;
/// The victim's notifies: the median must be under [`LIMIT_NS`], the
/// worst under this (as on arm64).
pub const VICTIM_WORST_NS: u64 = 2_000_000;
/// Without a steal-time record (trap-and-emulate keeps none: KVM's NOTIFY
/// is the LVZ backend's), a time this long is taken as a slice of the
/// other VM inside the measurement (kestrel's slices are 10 ms; a notify
/// costs about 0.1 ms): the victim sends that round again, at most
/// [`RETAKES`] times (a notify this slow every time is kept and fails);
/// the attacker counts such an exit apart (at most [`MAX_PREEMPTED`]).
const PREEMPTED_NS: u64 = 5_000_000;
const RETAKES: u32 = 3;
const MAX_PREEMPTED: u32 = 2;
/// Queue size of every ring here.
const Q: u16 = 256;
/// Rounds the victim sends to each receiver, and frames per round.
const ROUNDS: usize = 16;
const PER_ROUND: u16 = 32;
/// Frame length (after the 12-byte virtio-net header).
const FRAME_LEN: usize = 60;
/// The MACs `configs/test/la64-*hostile.toml` give the attacker's ports on
/// the network `victim-lan`: C (the hostile receiver) and D (the chain
/// over the cold blocks). The same as arm64's.
pub const MAC_C: [u8; 6] = [0x02, 0x6b, 0x65, 0x73, 0x00, 0x0c];
pub const MAC_D: [u8; 6] = [0x02, 0x6b, 0x65, 0x73, 0x00, 0x0d];

/// The attacker's cold blocks: from 16 MiB into its RAM (above its image,
/// stacks and rings; RAM starts at 0) to 4 MiB before its end (below the
/// DTB and the steal-time record of its `hvcl` phase). Only the memory
/// phase's markers (at 0x1f_f000 in each block) touch them before the
/// phase here; the chains use the middle of each block. The first half is
/// the transmit chain's, the second port D's.
pub fn cold() -> core::ops::Range<u64> {
    let top = RAM_TOP.load(Ordering::Relaxed);
    let lo = 16 << 20;
    let hi = top.saturating_sub(4 << 20) & !(BLOCK - 1);
    lo..hi.max(lo)
}

/// The first and second half of [`cold`], at most `Q - 1` blocks each.
fn halves() -> (core::ops::Range<u64>, core::ops::Range<u64>) {
    let c = cold();
    let n = ((c.end - c.start) / BLOCK / 2).min(u64::from(Q) - 1);
    let mid = c.start + n * BLOCK;
    (c.start..mid, mid..mid + n * BLOCK)
}

/// Ring areas, one per queue: descriptors at 0, the driver ring at 0x1000,
/// the device ring at 0x2000, an indirect table at 0x3000, buffers from
/// 0x4000.
#[repr(C, align(4096))]
struct Area([u8; AREA]);
const AREA: usize = 0x6000;
const DESC: usize = 0;
const AVAIL: usize = 0x1000;
const USED: usize = 0x2000;
const TABLE: usize = 0x3000;
const BUFS: usize = 0x4000;
/// The attacker's console ring, port C's, port D's; the victim's transmit
/// ring.
static mut RINGS: [Area; 4] = [const { Area([0; AREA]) }; 4];
const R_TX: usize = 0;
const R_C: usize = 1;
const R_D: usize = 2;
const R_VICTIM: usize = 3;

/// The address of offset `off` of ring area `r` (direct-address mode: also
/// its guest physical address).
fn at(r: usize, off: usize) -> u64 {
    assert!(r < 4 && off < AREA);
    // SAFETY: only the address of the static is taken.
    (unsafe { core::ptr::addr_of_mut!(RINGS[r]) }) as u64 + off as u64
}

fn put<T: Copy>(r: usize, off: usize, v: T) {
    assert!(off + core::mem::size_of::<T>() <= AREA);
    // SAFETY: inside ring area `r` (checked), aligned for T at every
    // offset used; only this vCPU and its VM's devices touch it.
    unsafe { (at(r, off) as *mut T).write_volatile(v) }
}

fn get<T: Copy>(r: usize, off: usize) -> T {
    assert!(off + core::mem::size_of::<T>() <= AREA);
    // SAFETY: as in `put`.
    unsafe { (at(r, off) as *const T).read_volatile() }
}

fn desc(r: usize, base: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
    let o = base + 16 * usize::from(i);
    put(r, o, addr);
    put(r, o + 8, len);
    put(r, o + 12, flags);
    put(r, o + 14, next);
}

/// Resets the device, zeroes ring area `r`, and brings queue `q` up on it
/// with [`Q`] entries, DRIVER_OK.
fn up(d: &mut Drv, r: usize, q: u32) -> Result<(), &'static str> {
    if !d.reset() {
        return Err("Status/InterruptStatus not 0 after reset");
    }
    for off in (0..AREA).step_by(8) {
        put(r, off, 0u64);
    }
    if !d.negotiate(VERSION_1) {
        return Err("FEATURES_OK refused");
    }
    if d.queue(q, u32::from(Q), at(r, DESC), at(r, AVAIL), at(r, USED)) != 1 {
        return Err("QueueReady 0 for a valid 256-entry queue");
    }
    d.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
    Ok(())
}

/// This vCPU's steal-time record (KVM's `struct kvm_steal_time`: `steal`
/// in ns at 0, `version` at 8, odd while it changes).
#[repr(C, align(64))]
struct Record(UnsafeCell<[u64; 8]>);
// SAFETY: written by the hypervisor, read with volatile loads; the guest
// writes it only before registering it.
unsafe impl Sync for Record {}
static RECORD: Record = Record(UnsafeCell::new([0; 8]));

/// Registers [`RECORD`] with KVM's NOTIFY; whether kestrel took it.
fn register() -> bool {
    let a = RECORD.0.get() as u64;
    trap::hvcl(FN_NOTIFY, u64::from(KVM_FEATURE_STEAL_TIME), a | 1, 0) == 0
}

/// The stolen time (ns) in the record now (0 if none was registered).
fn stolen(registered: bool) -> u64 {
    if !registered {
        return 0;
    }
    let p = RECORD.0.get() as *const u64;
    loop {
        // SAFETY: words of the static record; the hypervisor writes them
        // (a seqcount in `version`).
        let (v0, s, v1) = unsafe {
            let v0 = p.add(1).read_volatile() as u32;
            let s = p.read_volatile();
            let v1 = p.add(1).read_volatile() as u32;
            (v0, s, v1)
        };
        if v0 == v1 && v0 % 2 == 0 {
            return s;
        }
    }
}

/// Counter ticks as ns (guest instructions under -icount shift=0).
fn ns(ticks: u64) -> u64 {
    let hz = COUNTER_HZ.load(Ordering::Relaxed).max(1);
    (u128::from(ticks) * 1_000_000_000 / u128::from(hz)) as u64
}

/// One exit timed as this vCPU's own time: elapsed counter time less the
/// stolen time gained meanwhile (a time slice of the other VM inside it).
fn own_time(rec: bool, f: impl FnOnce()) -> u64 {
    let s0 = stolen(rec);
    let t0 = cpu::now();
    f();
    let t1 = cpu::now();
    let s1 = stolen(rec);
    ns(t1.wrapping_sub(t0)).saturating_sub(s1.saturating_sub(s0))
}

/// The `n`th transport of device `id`.
fn nth(id: u32, n: usize) -> Option<usize> {
    let (bases, count) = transports();
    bases[..count]
        .iter()
        .copied()
        .filter(|&b| La64::read32(b + reg::DEVICE_ID) == id)
        .nth(n)
}

// ---------------------------------------------------------------------------
// The attacker.

/// `attack-cold-tx`: a console transmit chain of 1-byte buffers, one in
/// each block of the first half of [`cold`], every exit timed until it is
/// used. Prints `COLD-TX ...` and the PASS/FAIL line.
pub fn cold_tx() {
    let name = "attack-cold-tx";
    let Some(base) = nth(ID_CONSOLE, 0) else {
        report(name, fail!("no virtio console"));
        return;
    };
    let (blocks, _) = halves();
    let n = ((blocks.end - blocks.start) / BLOCK) as u16;
    let rec = register();
    let mut d = Drv::new(base, ID_CONSOLE);
    let (mut worst, mut exits, mut preempted) = (0u64, 0u32, 0u32);
    let r = (|| {
        if n < 16 {
            return Err("fewer than 16 cold blocks (too little RAM)");
        }
        up(&mut d, R_TX, 1)?;
        for i in 0..n {
            // One byte in the middle of block i.
            let addr = blocks.start + u64::from(i) * BLOCK + BLOCK / 2;
            let last = i + 1 == n;
            desc(R_TX, DESC, i, addr, 1, if last { 0 } else { F_NEXT }, i + 1);
        }
        put(R_TX, AVAIL + 4, 0u16);
        La64::barrier();
        put(R_TX, AVAIL + 2, 1u16);
        La64::barrier();
        // The notify, then reads of InterruptStatus until the chain is
        // used (each exit continues the chain).
        while exits == 0 || (get::<u16>(R_TX, USED + 2) != 1 && exits < 100_000) {
            let t = if exits == 0 {
                own_time(rec, || d.wr(reg::QUEUE_NOTIFY, 1))
            } else {
                own_time(rec, || {
                    d.rd(reg::INTERRUPT_STATUS);
                })
            };
            exits += 1;
            if !rec && t >= PREEMPTED_NS {
                preempted += 1;
            } else {
                worst = worst.max(t);
            }
        }
        if get::<u16>(R_TX, USED + 2) != 1 {
            return Err("the chain was never used");
        }
        if d.rd(reg::STATUS) & NEEDS_RESET != 0 {
            return Err("the device needs reset");
        }
        if worst >= LIMIT_NS {
            return Err("an exit took 1 ms or more");
        }
        if preempted > MAX_PREEMPTED || preempted >= exits {
            return Err("too many exits took 5 ms or more");
        }
        Ok(())
    })();
    println!(
        "COLD-TX worst exit {} us over {exits} exits for a chain of {n} 1-byte buffers in separate 2 MiB blocks (under -icount shift=0 about {worst} instructions; {})",
        worst / 1000,
        if rec {
            Msg::new(format_args!("less stolen time"))
        } else {
            Msg::new(format_args!("no steal-time record, {preempted} exits of 5 ms or more taken as preempted"))
        }
        .as_str()
    );
    report(
        name,
        match r {
            Ok(()) => pass!("the chain used, every exit under 1 ms"),
            Err(why) => fail!("{why}"),
        },
    );
}

/// Ports C and D (the attacker's two network ports, on `victim-lan`), set
/// up by [`arm_receivers`].
pub struct Receivers {
    c: Option<Drv>,
    d: Option<Drv>,
    /// Port C's used index last seen (its ring is refilled from there).
    c_used: u16,
    /// Blocks port D's chain spans.
    d_blocks: u16,
}

/// Port C: the hostile receiver. Descriptors 0..254 are zero-length
/// writable buffers, each NEXT to the following one; descriptor 255 is an
/// indirect table of 256 entries, 255 of them zero-length and the last a
/// buffer a frame fits in (so the chain is valid and every frame is taken
/// through 511 descriptors). Every avail slot names head 0, and the ring
/// is offered full.
fn arm_c(d: &mut Drv) -> Result<(), &'static str> {
    up(d, R_C, 0)?;
    let scratch = at(R_C, BUFS);
    for i in 0..Q - 1 {
        desc(R_C, DESC, i, scratch, 0, F_WRITE | F_NEXT, i + 1);
    }
    desc(
        R_C,
        DESC,
        Q - 1,
        at(R_C, TABLE),
        u32::from(Q) * 16,
        F_INDIRECT,
        0,
    );
    for j in 0..Q - 1 {
        desc(R_C, TABLE, j, scratch, 0, F_WRITE | F_NEXT, j + 1);
    }
    desc(R_C, TABLE, Q - 1, scratch, 2048, F_WRITE, 0);
    for s in 0..usize::from(Q) {
        put(R_C, AVAIL + 4 + 2 * s, 0u16);
    }
    La64::barrier();
    put(R_C, AVAIL + 2, Q);
    La64::barrier();
    d.wr(reg::QUEUE_NOTIFY, 0);
    Ok(())
}

/// Port D: one receive chain of 1-byte buffers, one in each block of the
/// second half of [`cold`], then a buffer a frame fits in.
fn arm_d(d: &mut Drv, blocks: core::ops::Range<u64>) -> Result<u16, &'static str> {
    let n = ((blocks.end - blocks.start) / BLOCK) as u16;
    if n < 16 {
        return Err("fewer than 16 cold blocks (too little RAM)");
    }
    up(d, R_D, 0)?;
    for i in 0..n {
        let addr = blocks.start + u64::from(i) * BLOCK + BLOCK / 2;
        desc(R_D, DESC, i, addr, 1, F_WRITE | F_NEXT, i + 1);
    }
    desc(R_D, DESC, n, at(R_D, BUFS), 2048, F_WRITE, 0);
    put(R_D, AVAIL + 4, 0u16);
    La64::barrier();
    put(R_D, AVAIL + 2, 1u16);
    La64::barrier();
    d.wr(reg::QUEUE_NOTIFY, 0);
    Ok(n)
}

/// `attack-rx-armed`: arms ports C and D, so they wait for the victim's
/// frames after its window.
pub fn arm_receivers() -> Receivers {
    let (_, d_half) = halves();
    let mut rx = Receivers {
        c: nth(ID_NET, 0).map(|b| Drv::new(b, ID_NET)),
        d: nth(ID_NET, 1).map(|b| Drv::new(b, ID_NET)),
        c_used: 0,
        d_blocks: 0,
    };
    let c = match rx.c.as_mut() {
        Some(c) => arm_c(c),
        None => Err("no first network port"),
    };
    let d = match rx.d.as_mut() {
        Some(d) => arm_d(d, d_half).map(|n| rx.d_blocks = n),
        None => Err("no second network port"),
    };
    let ok = c.is_ok() && d.is_ok();
    println!(
        "RX-ARMED port C: 255 NEXT-linked zero-length buffers and a 256-entry indirect table, head 0 in every slot ({}); port D: a chain over {} 2 MiB blocks ({})",
        c.err().unwrap_or("armed"),
        rx.d_blocks,
        d.err().unwrap_or("armed")
    );
    report(
        "attack-rx-armed",
        if ok {
            pass!("ports C and D armed")
        } else {
            fail!("a port could not be armed (RX-ARMED line)")
        },
    );
    if !ok {
        rx.c = None;
        rx.d = None;
    }
    rx
}

impl Receivers {
    /// Port C's ring offered full again once the device used some of it
    /// (called while the attacker spins).
    pub fn refill(&mut self) {
        let Some(c) = self.c.as_ref() else { return };
        let used = get::<u16>(R_C, USED + 2);
        if used != self.c_used {
            self.c_used = used;
            La64::barrier();
            put(R_C, AVAIL + 2, used.wrapping_add(Q));
            La64::barrier();
            c.wr(reg::QUEUE_NOTIFY, 0);
        }
    }

    /// `attack-rx-taken`: the victim's frames reached both hostile rings
    /// (so its judges measured something): waits (refilling port C) until
    /// counter time `until_ms` for port C to take a frame through its
    /// chain and port D its chain over the cold blocks. The victim sends
    /// to C first, so once D took its frame the victim is done.
    pub fn report(&mut self, until_ms: u64) {
        let end = crate::us(until_ms * 1000);
        loop {
            self.refill();
            let (c, d) = (get::<u16>(R_C, USED + 2), get::<u16>(R_D, USED + 2));
            if (c > 0 && d > 0) || cpu::now() >= end || self.c.is_none() {
                let ok = self.c.is_some() && c > 0 && d > 0;
                println!(
                    "RX-TAKEN port C took {c} frames through chains of 511 descriptors, port D {d} through its chain over {} blocks",
                    self.d_blocks
                );
                report(
                    "attack-rx-taken",
                    if ok {
                        pass!("both rings took the victim's frames")
                    } else {
                        fail!("a ring took no frame (RX-TAKEN line)")
                    },
                );
                return;
            }
            for _ in 0..10_000 {
                super::note_ran();
                cpu::relax();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The victim.

/// What one of the victim's send phases measured.
pub struct Sent {
    name: &'static str,
    mac: [u8; 6],
    /// Each notify's own time (ns), or why the phase did not run.
    times: Result<[u64; ROUNDS], &'static str>,
    /// Stolen time (ns) over the phase.
    stolen: u64,
    /// Whether a steal-time record was kept, and, without one, rounds
    /// sent again because their notify took [`PREEMPTED_NS`] or more.
    rec: bool,
    retaken: u32,
    lost: bool,
    broken: bool,
}

/// Right after its window, before it prints anything: [`ROUNDS`] rounds of
/// [`PER_ROUND`] frames to port C, then to port D, each round one notify,
/// timed as the victim's own time. `None` for a victim without a network
/// port; [`victim_report`] prints the lines.
pub fn victim_sends() -> Option<[Sent; 2]> {
    let base = nth(ID_NET, 0)?;
    let rec = register();
    let mut d = Drv::new(base, ID_NET);
    let mine: [u8; 6] = core::array::from_fn(|i| La64::read8(base + reg::CONFIG + i));
    let up_ok = up(&mut d, R_VICTIM, 1);
    let mut avail = 0u16;
    Some(
        [
            ("victim-send-hostile-receiver", MAC_C),
            ("victim-send-cold-receiver", MAC_D),
        ]
        .map(|(name, mac)| {
            let mut sent = Sent {
                name,
                mac,
                times: Err(""),
                stolen: 0,
                rec,
                retaken: 0,
                lost: false,
                broken: false,
            };
            if let Err(why) = up_ok {
                sent.times = Err(why);
                return sent;
            }
            // The frames: a zero header, then destination, source, type.
            for f in 0..usize::from(PER_ROUND) {
                let o = BUFS + f * 128;
                for i in 0..12 + FRAME_LEN {
                    put(R_VICTIM, o + i, 0u8);
                }
                for i in 0..6 {
                    put(R_VICTIM, o + 12 + i, mac[i]);
                    put(R_VICTIM, o + 18 + i, mine[i]);
                }
                put(R_VICTIM, o + 24, 0x88u8);
                put(R_VICTIM, o + 25, 0xb5u8);
                put(R_VICTIM, o + 26, f as u8);
            }
            let mut times = [0u64; ROUNDS];
            let s_before = stolen(rec);
            let mut attempts = 0;
            let mut i = 0;
            while i < ROUNDS {
                for f in 0..PER_ROUND {
                    let slot = avail.wrapping_add(f) % Q;
                    let o = BUFS + usize::from(f) * 128;
                    desc(
                        R_VICTIM,
                        DESC,
                        slot,
                        at(R_VICTIM, o),
                        (12 + FRAME_LEN) as u32,
                        0,
                        0,
                    );
                    put(R_VICTIM, AVAIL + 4 + 2 * usize::from(slot), slot);
                }
                avail = avail.wrapping_add(PER_ROUND);
                La64::barrier();
                put(R_VICTIM, AVAIL + 2, avail);
                La64::barrier();
                let t = own_time(rec, || d.wr(reg::QUEUE_NOTIFY, 1));
                let mut polls = 0;
                while get::<u16>(R_VICTIM, USED + 2) != avail && polls < 1000 {
                    d.rd(reg::INTERRUPT_STATUS);
                    polls += 1;
                }
                sent.lost |= get::<u16>(R_VICTIM, USED + 2) != avail;
                if !rec && t >= PREEMPTED_NS && attempts < RETAKES {
                    attempts += 1;
                    sent.retaken += 1;
                    continue;
                }
                times[i] = t;
                i += 1;
                attempts = 0;
            }
            sent.stolen = stolen(rec).saturating_sub(s_before);
            sent.broken = d.rd(reg::STATUS) & NEEDS_RESET != 0;
            sent.times = Ok(times);
            sent
        }),
    )
}

/// The `SEND` and `victim-send-*` lines: the median notify under 1 ms of
/// the victim's own time and the worst under 2 ms, every frame used, the
/// port live.
pub fn victim_report(sends: Option<[Sent; 2]>) {
    for s in sends.into_iter().flatten() {
        let times = match s.times {
            Ok(t) => t,
            Err(why) => {
                report(s.name, fail!("{why}"));
                continue;
            }
        };
        let worst = times.iter().copied().max().unwrap_or(0);
        let mut sorted = times;
        sorted.sort_unstable();
        let median = sorted[ROUNDS / 2];
        let mac = s.mac;
        println!(
            "SEND {ROUNDS} notifies of {PER_ROUND} frames to {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}: worst {} us, median {} us of its own time (under -icount shift=0 about {worst} instructions, median {median}; {}){}{}",
            mac[0],
            mac[1],
            mac[2],
            mac[3],
            mac[4],
            mac[5],
            worst / 1000,
            median / 1000,
            if s.rec {
                Msg::new(format_args!("{} us stolen over the rounds", s.stolen / 1000))
            } else {
                Msg::new(format_args!(
                    "no steal-time record, {} rounds of 5 ms or more sent again",
                    s.retaken
                ))
            }
            .as_str(),
            if s.lost { ", SOME FRAMES NEVER USED" } else { "" },
            if s.broken { ", THE DEVICE NEEDS RESET" } else { "" },
        );
        report(
            s.name,
            if worst < VICTIM_WORST_NS && median < LIMIT_NS && !s.lost && !s.broken {
                pass!("median under 1 ms, worst under 2 ms, every frame used")
            } else {
                fail!("see the SEND line above")
            },
        );
    }
}
