//! Device work whose size the attacker chooses (issue 28, items 4 and 5;
//! `docs/test-guest.md`), timed under -icount from both sides. The rings,
//! the chains and the timing are the ones both test guests share
//! (`guest_common::hostile_cold`, tools/guests/guest-common); this file
//! supplies what is arm64's ([`ColdHost`]: the virtual counter, the PV
//! time record of PV_TIME_ST) and prints the lines:
//!
//! - `attack-cold-tx` (attacker): one console transmit chain of 1-byte
//!   buffers, each in its own untouched 2 MiB block of the attacker's RAM
//!   ([`cold`]), offered and notified with one store; every exit timed
//!   until the chain is used. kestrel zeroes a block at its first touch,
//!   one zeroing per budget (`virtio::ZEROINGS_PER_BUDGET`), so each exit
//!   stays under 1 ms; zeroing the whole chain's blocks in the notify took
//!   tens of ms.
//! - Two receive rings on the attacker's third and fourth network ports,
//!   on the network it shares with the victim ([`arm_receivers`]): port
//!   C, the hostile receiver (255 NEXT-linked zero-length buffers ending
//!   in a 256-entry indirect table, every avail slot naming head 0,
//!   refilled as it is used); port D, one chain over the other half of
//!   the untouched blocks.
//! - `victim-send-hostile-receiver` and `victim-send-cold-receiver`
//!   (victim, [`victim_sends`]): after its window the victim sends rounds
//!   of 32 frames to each port, one notify each, and times every notify
//!   exit as its own time (elapsed counter time less the stolen time its
//!   PV time record gained meanwhile, so a time slice of the attacker
//!   inside the measurement does not count). Frames for a VM are only held
//!   in the sender's exit and the receiver's ring is walked in the
//!   receiver's own time (`docs/virtio.md`), so every notify stays under
//!   1 ms ([`VICTIM_WORST_NS`]).
//!
//! The attacker's exits are judged against 1,000,000 instructions (1 ms
//! of counter time under `-icount shift=0`).

use super::verdict;
use super::virtio::Arm64;
use crate::cpu;
use crate::platform::Platform;
use crate::smccc::{self, call};
use guest_common::hostile_cold::{self as shared, ColdHost, LIMIT_NS, PER_ROUND, ROUNDS};

/// The victim's notifies: every one under this, as every exit. (It was
/// 2 ms while the case ran on four QEMU CPUs: under -icount QEMU's round
/// robin then put idle pCPUs' slices, and their spins on a lock held
/// across a slice's end, inside a notify now and then: about 1 ms more on
/// GICv2. The case runs on one QEMU CPU now, and the worst is ~106 us.)
const VICTIM_WORST_NS: u64 = LIMIT_NS;

/// What the shared chains need from this guest besides [`VirtioHost`]
/// (`super::virtio`).
///
/// [`VirtioHost`]: guest_common::hostile_virtio::VirtioHost
impl ColdHost for Arm64 {
    fn now() -> u64 {
        cpu::now()
    }

    /// Counter ticks as ns (guest instructions under -icount shift=0).
    fn ns(ticks: u64) -> u64 {
        (u128::from(ticks) * 1_000_000_000 / u128::from(cpu::freq())) as u64
    }

    /// This vCPU's PV time record (PV_TIME_ST: the same record at every
    /// call). Always taken as kept: without one, [`ColdHost::stolen`]
    /// reads 0.
    fn steal_record() -> Option<u64> {
        Some(call(u64::from(smccc::pv_time::ST), [0; 3])[0])
    }

    /// The stolen time (ns) in the PV time record at `record` (0 if
    /// kestrel gave none).
    fn stolen(record: u64) -> u64 {
        smccc::pv_time::stolen(record).unwrap_or(0)
    }

    fn pause() {
        core::hint::spin_loop();
    }

    const TOO_FEW_BLOCKS: &'static str = "fewer than 16 untouched blocks (too little RAM)";
}

/// This VM's virtio-mmio transports, from the DTB.
fn bases(p: &Platform) -> &[usize] {
    &p.virtio[..p.nvirtio]
}

/// The attacker's untouched blocks: from 16 MiB into its RAM (above its
/// image, stacks and rings) to 4 MiB before its end (below the DTB).
/// Nothing touches them before the phases here: `attack-isolation` skips
/// them. The first half is the transmit chain's, the second port D's.
pub fn cold(p: &Platform) -> core::ops::Range<u64> {
    shared::cold(p.ram_base, p.ram_base + p.ram_size)
}

// ---------------------------------------------------------------------------
// The attacker.

/// `attack-cold-tx`: a console transmit chain of 1-byte buffers, one in
/// each block of the first half of [`cold`], every exit timed until it is
/// used; the console is left broken again as `attack-virtio-left-broken`
/// left it.
pub fn cold_tx(p: &Platform) {
    let name = "attack-cold-tx";
    let Some(tx) = shared::cold_tx::<Arm64>(bases(p), cold(p)) else {
        verdict(name, false, format_args!("no virtio console"));
        return;
    };
    let (worst, exits, n) = (tx.worst, tx.exits, tx.n);
    verdict(
        name,
        tx.result.is_ok(),
        format_args!(
            "COLD-TX worst exit {} us over {exits} exits for a chain of {n} 1-byte buffers in untouched 2 MiB blocks (under -icount shift=0 about {worst} instructions){}{}",
            worst / 1000,
            if tx.result.is_err() { ": " } else { "" },
            tx.result.err().unwrap_or("")
        ),
    );
    let mut d = tx.drv;
    if d.up().is_ok() {
        d.break_console();
    }
}

/// Ports C and D (the attacker's third and fourth network ports, on
/// `victim-lan`), set up by [`arm_receivers`].
pub struct Receivers(shared::Receivers<Arm64>);

/// Arms ports C and D before the hold, so they wait for the victim's
/// frames after its window.
pub fn arm_receivers(p: &Platform) -> Receivers {
    let (rx, armed) = shared::arm_receivers::<Arm64>(
        bases(p),
        [(2, "no third network port"), (3, "no fourth network port")],
        cold(p),
    );
    verdict(
        "attack-rx-armed",
        armed.ok(),
        format_args!(
            "port C: 255 NEXT-linked zero-length buffers and a 256-entry indirect table, head 0 in every slot ({}); port D: a chain over {} untouched 2 MiB blocks ({})",
            armed.c.err().unwrap_or("armed"),
            armed.d_blocks,
            armed.d.err().unwrap_or("armed")
        ),
    );
    Receivers(rx)
}

impl Receivers {
    /// Port C's ring offered full again once the device used some of it
    /// (called between rounds of the hold).
    pub fn refill(&mut self) {
        self.0.refill();
    }

    /// `attack-rx-taken`: the victim's frames reached both hostile rings
    /// (so its judges measured something): waits up to `wait_ms` for port
    /// C to take a frame through its chain and port D its chain over the
    /// untouched blocks.
    pub fn report(&mut self, wait_ms: u64) {
        let t = self.0.taken(cpu::now() + cpu::us_to_ticks(wait_ms * 1000));
        let (c, d) = (t.c, t.d);
        verdict(
            "attack-rx-taken",
            t.ok,
            format_args!(
                "RX-TAKEN port C took {c} frames through chains of 511 descriptors, port D {d} through its chain over {} untouched blocks",
                t.d_blocks
            ),
        );
    }
}

// ---------------------------------------------------------------------------
// The victim.

/// Right after its window, before it prints anything (so that no console
/// output of its own waits to be drained meanwhile): [`ROUNDS`] rounds of
/// [`PER_ROUND`] frames to port C, then to port D, each round one notify,
/// timed as the victim's own time. `None` for a victim without a network
/// port; [`report`] prints the lines.
pub fn victim_sends(p: &Platform) -> Option<[shared::Sent; 2]> {
    shared::victim_sends::<Arm64>(bases(p))
}

/// The `victim-send-*` lines: every notify under 1 ms of the victim's own
/// time ([`VICTIM_WORST_NS`], the median too), every frame used, the port
/// live.
pub fn report(sends: Option<[shared::Sent; 2]>) {
    for s in sends.into_iter().flatten() {
        let v = match s.summary(VICTIM_WORST_NS) {
            Ok(v) => v,
            Err(why) => {
                verdict(s.name, false, format_args!("{why}"));
                continue;
            }
        };
        let (worst, mac) = (v.worst, s.mac);
        verdict(
            s.name,
            v.ok,
            format_args!(
                "SEND {ROUNDS} notifies of {PER_ROUND} frames to {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}: worst {} us, median {} us of its own time (under -icount shift=0 about {worst} instructions; {} us stolen over the rounds){}{}",
                mac[0],
                mac[1],
                mac[2],
                mac[3],
                mac[4],
                mac[5],
                worst / 1000,
                v.median / 1000,
                s.stolen / 1000,
                if s.lost { ", SOME FRAMES NEVER USED" } else { "" },
                if s.broken { ", THE DEVICE NEEDS RESET" } else { "" },
            ),
        );
    }
}
