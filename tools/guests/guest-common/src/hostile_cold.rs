//! Device work whose size the attacker chooses (issue 28, items 4 and 5;
//! `docs/test-guest.md`, `docs/test-guest-loongarch.md`), shared by the
//! arm64 and LoongArch test guests and timed under -icount from both
//! sides:
//!
//! - [`cold_tx`] (`attack-cold-tx`, attacker): one console transmit chain
//!   of 1-byte buffers, each in its own 2 MiB block of the attacker's RAM
//!   that nothing else of the guest touches ([`cold`]), offered and
//!   notified with one store; every exit timed until the chain is used.
//! - [`arm_receivers`] (`attack-rx-armed`, attacker): two receive rings on
//!   the attacker's ports on the network it shares with the victim: port
//!   C, the hostile receiver (255 NEXT-linked zero-length buffers ending
//!   in a 256-entry indirect table, every avail slot naming head 0,
//!   refilled as it is used, [`Receivers::refill`]); port D, one chain
//!   over the other half of the blocks. [`Receivers::taken`]
//!   (`attack-rx-taken`) waits for the victim's frames to reach both.
//! - [`victim_sends`] (`victim-send-hostile-receiver`,
//!   `victim-send-cold-receiver`, victim): after its window the victim
//!   sends rounds of 32 frames to each port, one notify each, and times
//!   every notify exit as its own time (elapsed counter time less the
//!   stolen time its steal-time record gained meanwhile, so a time slice
//!   of the attacker inside the measurement does not count).
//!
//! What differs between the guests comes from [`ColdHost`], on top of
//! [`VirtioHost`] (register accesses, the barrier, guest physical
//! addresses): the counter and its rate, the steal-time record (arm64's
//! PV_TIME_ST; LoongArch's KVM steal-time record, which only the LVZ
//! backend keeps), the attacker's pause while it waits, and how a chain's
//! blocks are named in a message.
//! Which transports are the ports, where the guest's RAM is, and every
//! printed line stay with the guest: the functions here return what they
//! measured ([`ColdTx`], [`Armed`], [`Taken`], [`Sent`]) and each guest
//! prints its own `COLD-TX`, `RX-ARMED`, `RX-TAKEN`, `SEND` and
//! `PASS`/`FAIL` lines, which its judge in `tools/xtask` reads.
//!
//! Without a steal-time record (LoongArch under trap-and-emulate) a time
//! of [`PREEMPTED_NS`] or more is taken as a slice of the other VM inside
//! the measurement: the attacker counts such an exit apart (at most
//! [`MAX_PREEMPTED`]), the victim sends that round again (at most
//! [`RETAKES`] times). With a record (arm64 always, LoongArch under LVZ)
//! every time counts.

use crate::hostile_virtio::{
    reg, Drv, VirtioHost, ACK, DRIVER, DRIVER_OK, FEATURES_OK, F_INDIRECT, F_NEXT, F_WRITE,
    ID_CONSOLE, ID_NET, NEEDS_RESET, VERSION_1,
};

/// What the phases here need from the guest besides [`VirtioHost`].
pub trait ColdHost: VirtioHost {
    /// The counter now (what the guest's timers count).
    fn now() -> u64;
    /// Counter ticks as ns (under -icount shift=0 a ns is an
    /// instruction).
    fn ns(ticks: u64) -> u64;
    /// This vCPU's steal-time record, found or registered: its address
    /// (what [`ColdHost::stolen`] is given), `None` if the hypervisor
    /// keeps none.
    fn steal_record() -> Option<u64>;
    /// The stolen time (ns) in the record at `record` now.
    fn stolen(record: u64) -> u64;
    /// One step of the attacker's wait for the victim's frames
    /// ([`Receivers::taken`] takes 10,000 between looks at the rings).
    fn pause();
    /// The error when the attacker's RAM holds fewer than 16 blocks for a
    /// chain (the guests name the blocks as their docs do: untouched on
    /// arm64, where kestrel zeroes a block at its first touch; cold on
    /// LoongArch).
    const TOO_FEW_BLOCKS: &'static str;
}

/// A 2 MiB block of guest RAM (kestrel's first-touch unit on arm64, its
/// frame on LoongArch).
pub const BLOCK: u64 = 2 << 20;
/// Exits slower than this fail: 1 ms, 1,000,000 instructions under
/// -icount shift=0.
pub const LIMIT_NS: u64 = 1_000_000;
/// Without a steal-time record, a time this long is taken as a slice of
/// the other VM inside the measurement (kestrel's slices are 10 ms; a
/// notify costs about 0.1 ms).
pub const PREEMPTED_NS: u64 = 5_000_000;
/// Rounds the victim sends again at most, one after the other, when their
/// notify took [`PREEMPTED_NS`] or more without a record (a notify this
/// slow every time is kept and fails).
pub const RETAKES: u32 = 3;
/// The attacker's exits of [`PREEMPTED_NS`] or more allowed without a
/// record.
pub const MAX_PREEMPTED: u32 = 2;
/// Queue size of every ring here.
pub const Q: u16 = 256;
/// Rounds the victim sends to each receiver, and frames per round.
pub const ROUNDS: usize = 16;
pub const PER_ROUND: u16 = 32;
/// Frame length (after the 12-byte virtio-net header).
const FRAME_LEN: usize = 60;
/// The MACs the test configs give the attacker's ports on the network
/// `victim-lan`: C (the hostile receiver) and D (the chain over the
/// blocks).
pub const MAC_C: [u8; 6] = [0x02, 0x6b, 0x65, 0x73, 0x00, 0x0c];
pub const MAC_D: [u8; 6] = [0x02, 0x6b, 0x65, 0x73, 0x00, 0x0d];

/// The attacker's blocks for the chains, for RAM at `ram_base..ram_end`:
/// from 16 MiB into its RAM (above its image, stacks and rings) to 4 MiB
/// before its end (below the DTB, and on LoongArch the steal-time record
/// of its `hvcl` phase). The first half is the transmit chain's, the
/// second port D's; the chains use the middle of each block.
pub fn cold(ram_base: u64, ram_end: u64) -> core::ops::Range<u64> {
    let lo = (ram_base + (16 << 20) + BLOCK - 1) & !(BLOCK - 1);
    let hi = ram_end.saturating_sub(4 << 20) & !(BLOCK - 1);
    lo..hi.max(lo)
}

/// The first and second half of `cold`, at most `Q - 1` blocks each.
fn halves(cold: core::ops::Range<u64>) -> (core::ops::Range<u64>, core::ops::Range<u64>) {
    let n = ((cold.end - cold.start) / BLOCK / 2).min(u64::from(Q) - 1);
    let mid = cold.start + n * BLOCK;
    (cold.start..mid, mid..mid + n * BLOCK)
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

/// The address of offset `off` of ring area `r` in the guest.
fn va(r: usize, off: usize) -> usize {
    assert!(r < 4 && off < AREA);
    // SAFETY: only the address of the static is taken.
    (unsafe { core::ptr::addr_of_mut!(RINGS[r]) }) as usize + off
}

/// The guest physical address of offset `off` of ring area `r` (what a
/// device is given).
fn at<H: VirtioHost>(r: usize, off: usize) -> u64 {
    H::gpa(va(r, off))
}

fn put<T: Copy>(r: usize, off: usize, v: T) {
    assert!(off + core::mem::size_of::<T>() <= AREA);
    // SAFETY: inside ring area `r` (checked), aligned for T at every
    // offset used; only this vCPU and its VM's devices touch it.
    unsafe { (va(r, off) as *mut T).write_volatile(v) }
}

fn get<T: Copy>(r: usize, off: usize) -> T {
    assert!(off + core::mem::size_of::<T>() <= AREA);
    // SAFETY: as in `put`.
    unsafe { (va(r, off) as *const T).read_volatile() }
}

/// Writes descriptor `i` of the table at offset `base` of ring area `r`.
fn desc(r: usize, base: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
    let o = base + 16 * usize::from(i);
    put(r, o, addr);
    put(r, o + 8, len);
    put(r, o + 12, flags);
    put(r, o + 14, next);
}

/// Publishes avail index `idx` of ring area `r`, between barriers.
fn publish<H: VirtioHost>(r: usize, idx: u16) {
    H::barrier();
    put(r, AVAIL + 2, idx);
    H::barrier();
}

/// Resets the device, zeroes ring area `r`, and brings queue `q` up on it
/// with [`Q`] entries, DRIVER_OK.
fn up<H: VirtioHost>(d: &mut Drv<H>, r: usize, q: u32) -> Result<(), &'static str> {
    if !d.reset() {
        return Err("Status/InterruptStatus not 0 after reset");
    }
    for off in (0..AREA).step_by(8) {
        put(r, off, 0u64);
    }
    if !d.negotiate(VERSION_1) {
        return Err("FEATURES_OK refused");
    }
    let (desc, avail, used) = (at::<H>(r, DESC), at::<H>(r, AVAIL), at::<H>(r, USED));
    if d.queue(q, u32::from(Q), desc, avail, used) != 1 {
        return Err("QueueReady 0 for a valid 256-entry queue");
    }
    d.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
    Ok(())
}

/// The stolen time (ns) in `record` now, 0 without one.
fn stolen<H: ColdHost>(record: Option<u64>) -> u64 {
    record.map_or(0, H::stolen)
}

/// One exit timed as this vCPU's own time: elapsed counter time less the
/// stolen time gained meanwhile (a time slice of the other VM inside it).
fn own_time<H: ColdHost>(record: Option<u64>, f: impl FnOnce()) -> u64 {
    let s0 = stolen::<H>(record);
    let t0 = H::now();
    f();
    let t1 = H::now();
    let s1 = stolen::<H>(record);
    H::ns(t1.wrapping_sub(t0)).saturating_sub(s1.saturating_sub(s0))
}

/// The `n`th of the transports at `bases` that is device `id`.
pub fn nth<H: VirtioHost>(bases: &[usize], id: u32, n: usize) -> Option<usize> {
    bases
        .iter()
        .copied()
        .filter(|&b| H::read32(b + reg::DEVICE_ID) == id)
        .nth(n)
}

// ---------------------------------------------------------------------------
// The attacker.

/// What `attack-cold-tx` measured.
pub struct ColdTx<H> {
    /// Blocks (1-byte buffers) in the chain.
    pub n: u16,
    /// The worst exit (ns of own time), but the preempted ones.
    pub worst: u64,
    /// Exits until the chain was used (or given up).
    pub exits: u32,
    /// Exits of [`PREEMPTED_NS`] or more counted apart (without a record).
    pub preempted: u32,
    /// Whether a steal-time record was kept.
    pub record: bool,
    /// The verdict: why it failed.
    pub result: Result<(), &'static str>,
    /// The console's driver (the console is left with its chain used).
    pub drv: Drv<H>,
}

/// `attack-cold-tx`: a console transmit chain of 1-byte buffers, one in
/// the middle of each block of the first half of `cold`, offered and
/// notified with one store, then InterruptStatus read until the chain is
/// used, every exit timed. `None` without a virtio console among `bases`.
pub fn cold_tx<H: ColdHost>(bases: &[usize], cold: core::ops::Range<u64>) -> Option<ColdTx<H>> {
    let base = nth::<H>(bases, ID_CONSOLE, 0)?;
    let (blocks, _) = halves(cold);
    let n = ((blocks.end - blocks.start) / BLOCK) as u16;
    let rec = H::steal_record();
    let mut d = Drv::new(base, ID_CONSOLE);
    let (mut worst, mut exits, mut preempted) = (0u64, 0u32, 0u32);
    let r = (|| {
        if n < 16 {
            return Err(H::TOO_FEW_BLOCKS);
        }
        up(&mut d, R_TX, 1)?;
        for i in 0..n {
            // One byte in the middle of block i, never touched before.
            let addr = blocks.start + u64::from(i) * BLOCK + BLOCK / 2;
            let last = i + 1 == n;
            desc(R_TX, DESC, i, addr, 1, if last { 0 } else { F_NEXT }, i + 1);
        }
        put(R_TX, AVAIL + 4, 0u16);
        publish::<H>(R_TX, 1);
        // The notify, then reads of InterruptStatus until the chain is
        // used (each exit continues the chain).
        while exits == 0 || (get::<u16>(R_TX, USED + 2) != 1 && exits < 100_000) {
            let t = if exits == 0 {
                own_time::<H>(rec, || d.wr(reg::QUEUE_NOTIFY, 1))
            } else {
                own_time::<H>(rec, || {
                    d.rd(reg::INTERRUPT_STATUS);
                })
            };
            exits += 1;
            if rec.is_none() && t >= PREEMPTED_NS {
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
    Some(ColdTx {
        n,
        worst,
        exits,
        preempted,
        record: rec.is_some(),
        result: r,
        drv: d,
    })
}

/// Ports C and D (two of the attacker's network ports, on `victim-lan`),
/// set up by [`arm_receivers`].
pub struct Receivers<H> {
    c: Option<Drv<H>>,
    d: Option<Drv<H>>,
    /// Port C's used index last seen (its ring is refilled from there).
    c_used: u16,
    /// Blocks port D's chain spans.
    d_blocks: u16,
}

/// How [`arm_receivers`] went.
pub struct Armed {
    pub c: Result<(), &'static str>,
    pub d: Result<(), &'static str>,
    /// Blocks port D's chain spans (0 if it was not armed).
    pub d_blocks: u16,
}

impl Armed {
    /// Both ports armed.
    pub fn ok(&self) -> bool {
        self.c.is_ok() && self.d.is_ok()
    }
}

/// Port C: the hostile receiver. Descriptors 0..254 are zero-length
/// writable buffers, each NEXT to the following one; descriptor 255 is an
/// indirect table of 256 entries, 255 of them zero-length and the last a
/// buffer a frame fits in (so the chain is valid and every frame is taken
/// through 511 descriptors). Every avail slot names head 0, and the ring
/// is offered full.
fn arm_c<H: VirtioHost>(d: &mut Drv<H>) -> Result<(), &'static str> {
    up(d, R_C, 0)?;
    let scratch = at::<H>(R_C, BUFS);
    for i in 0..Q - 1 {
        desc(R_C, DESC, i, scratch, 0, F_WRITE | F_NEXT, i + 1);
    }
    let table = at::<H>(R_C, TABLE);
    desc(R_C, DESC, Q - 1, table, u32::from(Q) * 16, F_INDIRECT, 0);
    for j in 0..Q - 1 {
        desc(R_C, TABLE, j, scratch, 0, F_WRITE | F_NEXT, j + 1);
    }
    desc(R_C, TABLE, Q - 1, scratch, 2048, F_WRITE, 0);
    for s in 0..usize::from(Q) {
        put(R_C, AVAIL + 4 + 2 * s, 0u16);
    }
    publish::<H>(R_C, Q);
    d.wr(reg::QUEUE_NOTIFY, 0);
    Ok(())
}

/// Port D: one receive chain of 1-byte buffers, one in the middle of each
/// block of `blocks`, then a buffer a frame fits in.
fn arm_d<H: ColdHost>(d: &mut Drv<H>, blocks: core::ops::Range<u64>) -> Result<u16, &'static str> {
    let n = ((blocks.end - blocks.start) / BLOCK) as u16;
    if n < 16 {
        return Err(H::TOO_FEW_BLOCKS);
    }
    up(d, R_D, 0)?;
    for i in 0..n {
        let addr = blocks.start + u64::from(i) * BLOCK + BLOCK / 2;
        desc(R_D, DESC, i, addr, 1, F_WRITE | F_NEXT, i + 1);
    }
    desc(R_D, DESC, n, at::<H>(R_D, BUFS), 2048, F_WRITE, 0);
    put(R_D, AVAIL + 4, 0u16);
    publish::<H>(R_D, 1);
    d.wr(reg::QUEUE_NOTIFY, 0);
    Ok(n)
}

/// `attack-rx-armed`: arms port C on network transport `ports[0].0` and
/// port D over the second half of `cold` on `ports[1].0` (counting the
/// network transports among `bases`; the second of each pair is the error
/// when there is no such transport), so they wait for the victim's frames
/// after its window. Neither port is used further unless both were armed.
pub fn arm_receivers<H: ColdHost>(
    bases: &[usize],
    ports: [(usize, &'static str); 2],
    cold: core::ops::Range<u64>,
) -> (Receivers<H>, Armed) {
    let (_, d_half) = halves(cold);
    let mut rx = Receivers {
        c: nth::<H>(bases, ID_NET, ports[0].0).map(|b| Drv::new(b, ID_NET)),
        d: nth::<H>(bases, ID_NET, ports[1].0).map(|b| Drv::new(b, ID_NET)),
        c_used: 0,
        d_blocks: 0,
    };
    let c = match rx.c.as_mut() {
        Some(c) => arm_c(c),
        None => Err(ports[0].1),
    };
    let d = match rx.d.as_mut() {
        Some(d) => arm_d(d, d_half).map(|n| rx.d_blocks = n),
        None => Err(ports[1].1),
    };
    let armed = Armed {
        c,
        d,
        d_blocks: rx.d_blocks,
    };
    if !armed.ok() {
        rx.c = None;
        rx.d = None;
    }
    (rx, armed)
}

/// What `attack-rx-taken` saw.
pub struct Taken {
    /// Frames port C took (through chains of 511 descriptors).
    pub c: u16,
    /// Frames port D took (through its chain over the blocks).
    pub d: u16,
    /// Blocks port D's chain spans.
    pub d_blocks: u16,
    /// Both ports armed and each took a frame.
    pub ok: bool,
}

impl<H: ColdHost> Receivers<H> {
    /// Port C's ring offered full again once the device used some of it
    /// (called while the attacker holds its pCPU).
    pub fn refill(&mut self) {
        let Some(c) = self.c.as_ref() else { return };
        let used = get::<u16>(R_C, USED + 2);
        if used != self.c_used {
            self.c_used = used;
            publish::<H>(R_C, used.wrapping_add(Q));
            c.wr(reg::QUEUE_NOTIFY, 0);
        }
    }

    /// `attack-rx-taken`: whether the victim's frames reached both hostile
    /// rings (so its judges measured something): waits (refilling port C)
    /// until counter time `end` for port C to take a frame through its
    /// chain and port D its chain over the blocks. The victim sends to C
    /// first, so once D took its frame the victim is done.
    pub fn taken(&mut self, end: u64) -> Taken {
        loop {
            self.refill();
            let (c, d) = (get::<u16>(R_C, USED + 2), get::<u16>(R_D, USED + 2));
            if (c > 0 && d > 0) || H::now() >= end || self.c.is_none() {
                return Taken {
                    c,
                    d,
                    d_blocks: self.d_blocks,
                    ok: self.c.is_some() && c > 0 && d > 0,
                };
            }
            for _ in 0..10_000 {
                H::pause();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The victim.

/// What one of the victim's send phases measured.
pub struct Sent {
    /// `victim-send-hostile-receiver` or `victim-send-cold-receiver`.
    pub name: &'static str,
    /// The port sent to.
    pub mac: [u8; 6],
    /// Each notify's own time (ns), or why the phase did not run.
    pub times: Result<[u64; ROUNDS], &'static str>,
    /// Stolen time (ns) over the phase.
    pub stolen: u64,
    /// Whether a steal-time record was kept, and, without one, rounds
    /// sent again because their notify took [`PREEMPTED_NS`] or more.
    pub record: bool,
    pub retaken: u32,
    /// Some frame never used; the device needs reset.
    pub lost: bool,
    pub broken: bool,
}

/// A send phase's verdict ([`Sent::summary`]).
pub struct Summary {
    /// The worst and the median notify (ns of own time).
    pub worst: u64,
    pub median: u64,
    /// The worst under the guest's bound, the median under [`LIMIT_NS`],
    /// every frame used, the port live.
    pub ok: bool,
}

impl Sent {
    /// The worst and median notify and the verdict with `worst_ns` the
    /// bound of the worst, or why the phase did not run.
    pub fn summary(&self, worst_ns: u64) -> Result<Summary, &'static str> {
        let times = self.times?;
        let worst = times.iter().copied().max().unwrap_or(0);
        let mut sorted = times;
        sorted.sort_unstable();
        let median = sorted[ROUNDS / 2];
        Ok(Summary {
            worst,
            median,
            ok: worst < worst_ns && median < LIMIT_NS && !self.lost && !self.broken,
        })
    }
}

/// Right after its window, before it prints anything (so that no console
/// output of its own waits to be drained meanwhile): [`ROUNDS`] rounds of
/// [`PER_ROUND`] frames to port C, then to port D, each round one notify
/// on the first network transport among `bases`, timed as the victim's
/// own time. `None` for a victim without a network port.
pub fn victim_sends<H: ColdHost>(bases: &[usize]) -> Option<[Sent; 2]> {
    let base = nth::<H>(bases, ID_NET, 0)?;
    let rec = H::steal_record();
    let mut d = Drv::<H>::new(base, ID_NET);
    let mine: [u8; 6] = core::array::from_fn(|i| H::read8(base + reg::CONFIG + i));
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
                record: rec.is_some(),
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
            let s_before = stolen::<H>(rec);
            let mut attempts = 0;
            let mut i = 0;
            while i < ROUNDS {
                for f in 0..PER_ROUND {
                    let slot = avail.wrapping_add(f) % Q;
                    let o = BUFS + usize::from(f) * 128;
                    let len = (12 + FRAME_LEN) as u32;
                    desc(R_VICTIM, DESC, slot, at::<H>(R_VICTIM, o), len, 0, 0);
                    put(R_VICTIM, AVAIL + 4 + 2 * usize::from(slot), slot);
                }
                avail = avail.wrapping_add(PER_ROUND);
                publish::<H>(R_VICTIM, avail);
                let t = own_time::<H>(rec, || d.wr(reg::QUEUE_NOTIFY, 1));
                let mut polls = 0;
                while get::<u16>(R_VICTIM, USED + 2) != avail && polls < 1000 {
                    d.rd(reg::INTERRUPT_STATUS);
                    polls += 1;
                }
                sent.lost |= get::<u16>(R_VICTIM, USED + 2) != avail;
                if rec.is_none() && t >= PREEMPTED_NS && attempts < RETAKES {
                    attempts += 1;
                    sent.retaken += 1;
                    continue;
                }
                times[i] = t;
                i += 1;
                attempts = 0;
            }
            sent.stolen = stolen::<H>(rec).saturating_sub(s_before);
            sent.broken = d.rd(reg::STATUS) & NEEDS_RESET != 0;
            sent.times = Ok(times);
            sent
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocks of the two guests' attackers: arm64's 512 MiB at 1 GiB,
    /// LoongArch's 256 MiB at 0 (59 blocks a half, as its docs say).
    #[test]
    fn cold_blocks_and_halves() {
        let a = cold(0x4000_0000, 0x4000_0000 + (512 << 20));
        assert_eq!(a, 0x4000_0000 + (16 << 20)..0x4000_0000 + (508 << 20));
        let (tx, d) = halves(a);
        assert_eq!((tx.end - tx.start) / BLOCK, 123);
        assert_eq!((d.start, d.end - d.start), (tx.end, tx.end - tx.start));
        let l = cold(0, 256 << 20);
        let (tx, d) = halves(l);
        assert_eq!(tx, 16 << 20..134 << 20);
        assert_eq!(d, 134 << 20..252 << 20);
        // An unaligned RAM base is rounded up to a block; too little RAM
        // leaves nothing.
        assert_eq!(cold(0x10_0000, 64 << 20).start, 18 << 20);
        let none = cold(0, 8 << 20);
        assert!(none.is_empty());
        let (tx, d) = halves(none);
        assert!(tx.is_empty() && d.is_empty());
    }

    /// The median is the ninth of the sixteen times sorted; a lost frame
    /// or a broken port fails whatever the times.
    #[test]
    fn send_summary() {
        let mut times = [0u64; ROUNDS];
        for (i, t) in times.iter_mut().enumerate() {
            *t = 100_000 + 1000 * ((i as u64 * 7) % 16);
        }
        let mut s = Sent {
            name: "victim-send-hostile-receiver",
            mac: MAC_C,
            times: Ok(times),
            stolen: 0,
            record: true,
            retaken: 0,
            lost: false,
            broken: false,
        };
        let v = s.summary(LIMIT_NS).unwrap();
        assert_eq!((v.worst, v.median, v.ok), (115_000, 108_000, true));
        assert!(!s.summary(100_000).unwrap().ok);
        s.lost = true;
        assert!(!s.summary(LIMIT_NS).unwrap().ok);
        s.times = Err("no port");
        assert_eq!(s.summary(LIMIT_NS).err(), Some("no port"));
    }
}
