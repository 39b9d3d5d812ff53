//! The attacker's virtio phase on LoongArch (`mode=attack:...,virtio`,
//! docs/test-guest.md): the phase itself is the one both test guests share
//! (`guest_common::hostile_virtio`, tools/guests/guest-common); this file
//! supplies what is LoongArch's: where kestrel puts a LoongArch VM's
//! transports (`0x1600_0000`, one per 0x200 bytes, found by their magic),
//! register accesses in direct-address mode (a static's address is its
//! guest physical address), `dbar 0` as the barrier, the register sweep's
//! `ld`/`st` stubs of every width with their exceptions caught (an aligned
//! access must complete; a misaligned one may raise ALE or ADE), the
//! places in a LoongArch VM's physical space a device must not take data
//! from, and the PASS/FAIL lines. The arm64 phase's timed oversized
//! notify (`attack-virtio-budget`) needs -icount, which the LVZ emulator's
//! runs do not use: not here.

use core::sync::atomic::{AtomicU32, Ordering};

use guest_common::hostile_virtio::{self as shared, reg, Answer, VirtioHost, MAGIC};

use super::{load, run, Rng, Tally, A0, A1};
use crate::console::{fail, pass, println, report};
use crate::trap::{self, ecode};

/// Where kestrel maps a LoongArch VM's virtio-mmio transports.
const TRANSPORTS: usize = 0x1600_0000;
const TRANSPORT_STRIDE: usize = 0x200;
const MAX_TRANSPORTS: usize = 16;

/// Sub-phases reported, their checks that passed, and those that failed.
static SUBPHASES: AtomicU32 = AtomicU32::new(0);
static CHECKS: AtomicU32 = AtomicU32::new(0);
static FAILED: AtomicU32 = AtomicU32::new(0);

/// What the shared phase needs from this guest: the register sweep's
/// garbage source, and the phase's tally, which counts the sweep's probes.
pub(super) struct La64<'a> {
    rng: Rng,
    t: &'a mut Tally,
}

impl VirtioHost for La64<'_> {
    fn read32(addr: usize) -> u32 {
        // SAFETY: a register of this VM's virtio-mmio transport (its magic
        // answered), reached in direct-address mode; reads have no side
        // effect.
        unsafe { core::ptr::read_volatile(addr as *const u32) }
    }

    fn write32(addr: usize, v: u32) {
        // SAFETY: as in `read32`; what a write does is the device's
        // business, which is what the phase tests.
        unsafe { core::ptr::write_volatile(addr as *mut u32, v) }
    }

    fn read8(addr: usize) -> u8 {
        // SAFETY: the configuration space of this VM's virtio-mmio
        // transport; byte reads have no side effect.
        unsafe { core::ptr::read_volatile(addr as *const u8) }
    }

    fn barrier() {
        // SAFETY: a barrier only: ring memory written before it is visible
        // to the device before the register write after it.
        unsafe { core::arch::asm!("dbar 0", options(nostack)) };
    }

    /// The attack runs in direct-address mode.
    fn gpa(addr: usize) -> u64 {
        addr as u64
    }

    const DATA_ELSEWHERE: &'static [(&'static str, u64)] = &[
        (
            "data in device space (the PCH-PIC's registers)",
            0x1000_0000,
        ),
        (
            "data in the high RAM window, beyond this VM's RAM",
            0x8000_0000,
        ),
        ("data at a host-sized address (2^47)", 1 << 47),
    ];

    fn report(name: &str, ok: u32, first: Option<(&str, &str, &str)>, what: core::fmt::Arguments) {
        SUBPHASES.fetch_add(1, Ordering::Relaxed);
        CHECKS.fetch_add(ok, Ordering::Relaxed);
        match first {
            None => report(name, pass!("{what}: {ok} answered as expected")),
            Some((dev, case, why)) => {
                FAILED.fetch_add(1, Ordering::Relaxed);
                println!("{name}: first failure: {dev}, {case}: {why}");
                report(
                    name,
                    fail!("{ok} answered as expected, not {dev}, {case}: {why}"),
                )
            }
        }
    }

    fn random(&mut self) -> u64 {
        self.rng.next()
    }

    /// Stub w (`ld.{b,h,w,d}`) or 4 + w (`st.{b,h,w,d}`) for 2^w bytes,
    /// loaded by [`attack_virtio`].
    fn garbage(&mut self, dev: &str, addr: u64, width: u64, store: bool, v: u64) -> Answer {
        let w = width.trailing_zeros() as usize;
        let mut r = [v, addr, 0, 0, 0, 0];
        let res = run(if store { 4 + w } else { w }, &mut r);
        let t = &mut *self.t;
        t.probes += 1;
        match res {
            Ok(()) => Answer::Done,
            Err(c)
                if !addr.is_multiple_of(width) && (c.ecode() == 9 || c.ecode() == ecode::ADE) =>
            {
                t.exceptions += 1;
                Answer::Fault
            }
            Err(c) => {
                t.exceptions += 1;
                t.bad(format_args!(
                    "{} {addr:#x} of {width} bytes at {dev} offset {:#x}: {}",
                    if store { "store" } else { "load" },
                    addr % shared::REGION as u64,
                    trap::ecode::name(c.ecode())
                ));
                Answer::Wrong
            }
        }
    }

    const ACCESSES: &'static str = "loads and stores";
    const FAULTS: &'static str = "misaligned faults";
    const WRONG: &'static str = "an exception other than ALE/ADE, or on an aligned access";
}

/// The transports kestrel gave this VM (those whose magic answers).
pub(super) fn transports() -> ([usize; MAX_TRANSPORTS], usize) {
    let mut found = [0; MAX_TRANSPORTS];
    let mut n = 0;
    for i in 0..MAX_TRANSPORTS {
        let base = TRANSPORTS + i * TRANSPORT_STRIDE;
        if trap::probe_reg32(base + reg::MAGIC) == Some(MAGIC) {
            found[n] = base;
            n += 1;
        }
    }
    (found, n)
}

/// The phase: `attack-virtio-setup`, `-rings`, `-block`, `-switch`,
/// `-registers`, `-left-broken`, each a PASS/FAIL line of its own; the
/// phase's tally counts their checks, and each sub-phase that failed as
/// one wrong answer.
pub(super) fn attack_virtio(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    if !kestrel {
        t.bad(format_args!(
            "this phase attacks kestrel's virtio devices: run it on kestrel"
        ));
        return t;
    }
    crate::cpu::set_irqs(false);
    let outside = crate::RAM_TOP.load(Ordering::Relaxed) + 0x10_0000;
    let (bases, n) = transports();
    // The register sweep's stubs 0-3: ld.{b,h,w,d} a0, a1, 0; 4-7:
    // st.{b,h,w,d} a0, a1, 0.
    load(
        (0..4u32)
            .map(|w| 0x2800_0000 | w << 22 | A1 << 5 | A0)
            .chain((0..4u32).map(|w| 0x2900_0000 | w << 22 | A1 << 5 | A0)),
    );
    let mut host = La64 {
        rng: Rng(0x7669_7274_696f_0001),
        t: &mut t,
    };
    if let Err(found) = shared::phase(&mut host, &bases[..n], outside) {
        t.bad(format_args!(
            "{n} virtio-mmio transports, {found} of a disk, a console and a network port"
        ));
        return t;
    }
    let checks = CHECKS.load(Ordering::Relaxed);
    let failed = FAILED.load(Ordering::Relaxed);
    t.probes += u64::from(checks);
    for _ in 0..failed {
        t.bad(format_args!(
            "a virtio sub-phase failed (its FAIL line above)"
        ));
    }
    println!(
        "ATTACK virtio: {} sub-phases, {checks} checks as expected, {failed} sub-phases failed, {} VIRTIO-CONSOLE lines",
        SUBPHASES.load(Ordering::Relaxed),
        shared::console_lines()
    );
    t
}
