//! The attacker's virtio phase on arm64 (`docs/test-guest.md`): the phase
//! itself is the one both test guests share
//! (`guest_common::hostile_virtio`, tools/guests/guest-common); this file
//! supplies what is arm64's: register accesses on the DTB's transports
//! (Device memory), `dsb sy` as the barrier, the register sweep's loads and
//! stores of every width with any exception caught (a data abort is an
//! answer, anything else is not), the PASS/FAIL lines. On top of the
//! shared phase, the timed oversized notify (`attack-virtio-budget`), which
//! needs -icount to be judged by time: the arm64 cases run under it.
//!
//! The disk is `configs/test/arm64-hostile-disk.img`: 8 sectors whose bytes
//! `guest_common::hostile_virtio::disk_byte` computes.

use super::{verdict, Rng, EC_DABT_SAME};
use crate::cpu;
use crate::exceptions::probe_any;
use crate::platform::Platform;
use crate::println;
use guest_common::hostile_virtio::{
    self as shared, ok_if, reg, Answer, Outcome, VirtioHost, ACK, DRIVER, DRIVER_OK, FEATURES_OK,
    F_INDIRECT, F_NEXT, F_WRITE, ID_BLOCK, ID_CONSOLE, NEEDS_RESET, S_OK, T_IN, VERSION_1,
};

/// The shared phase's driver, on this guest.
pub(crate) type Drv = shared::Drv<Arm64>;

/// What the shared phase needs from this guest. It holds the register
/// sweep's garbage source and whether the sweep saw a wrong answer yet.
pub(crate) struct Arm64 {
    rng: Rng,
    wrong_seen: bool,
}

impl VirtioHost for Arm64 {
    fn read32(addr: usize) -> u32 {
        // SAFETY: a register of this VM's virtio-mmio transport (from the
        // DTB), mapped as Device memory; reads have no side effect.
        unsafe { cpu::mmio_read32(addr) }
    }

    fn write32(addr: usize, v: u32) {
        // SAFETY: as in `read32`; what a write does is the device's
        // business, which is what the phase tests.
        unsafe { cpu::mmio_write32(addr, v) }
    }

    fn read8(addr: usize) -> u8 {
        // SAFETY: the configuration space of this VM's virtio-mmio
        // transport (Device memory); byte reads have no side effect.
        unsafe { core::ptr::read_volatile(addr as *const u8) }
    }

    fn barrier() {
        // SAFETY: a barrier only: ring memory written before it is visible
        // to the device before the register write after it.
        unsafe { core::arch::asm!("dsb sy", options(nostack)) };
    }

    /// The guest's RAM is identity mapped (start.S).
    fn gpa(addr: usize) -> u64 {
        addr as u64
    }

    /// An address below this VM's RAM, where it has neither RAM nor a
    /// device.
    const DATA_ELSEWHERE: &'static [(&'static str, u64)] = &[("data below RAM", 0x1000)];

    fn report(name: &str, ok: u32, first: Option<(&str, &str, &str)>, what: core::fmt::Arguments) {
        if let Some((dev, case, why)) = first {
            println!("{name}: first failure: {dev}, {case}: {why}");
        }
        verdict(
            name,
            first.is_none(),
            format_args!(
                "{what}: {ok} answered as expected{}",
                if first.is_some() {
                    ", SOME NOT (see above)"
                } else {
                    ""
                }
            ),
        );
    }

    fn random(&mut self) -> u64 {
        self.rng.next()
    }

    /// Any exception is caught; a data abort is an answer for any access.
    fn garbage(&mut self, _dev: &str, addr: u64, width: u64, store: bool, v: u64) -> Answer {
        let (_, esr, _) = if store {
            probe_any(|| {
                write(addr, width, v);
                0
            })
        } else {
            probe_any(|| read(addr, width))
        };
        if esr == 0 {
            Answer::Done
        } else if super::ec(esr) == EC_DABT_SAME {
            Answer::Fault
        } else {
            if !core::mem::replace(&mut self.wrong_seen, true) {
                println!(
                    "attack-virtio-registers: unexpected answer ESR {esr:#x} (EC {:#x})",
                    super::ec(esr)
                );
            }
            Answer::Wrong
        }
    }

    const ACCESSES: &'static str = "reads and writes";
    const FAULTS: &'static str = "data aborts";
    const WRONG: &'static str = "an exception other than a data abort";
}

/// Entry of the phase: the transports the DTB describes.
pub fn phase(p: &Platform) {
    let mut host = Arm64 {
        rng: Rng(0x7669_7274_696f_0001),
        wrong_seen: false,
    };
    let outside = p.ram_base + p.ram_size + 0x10_0000;
    if let Err(found) = shared::phase(&mut host, &p.virtio[..p.nvirtio], outside) {
        verdict(
            "attack-virtio-setup",
            false,
            format_args!(
                "{} virtio-mmio transports in the DTB, {found} of a disk, a console and a network port",
                p.nvirtio
            ),
        );
    }
}

/// The oversized-notify phase ([`budget`]) on the VM's disk, run once the
/// victim's window is over (so that the exits it times are not stretched
/// by the victim's time slices on the shared pCPU); the disk is left
/// broken again afterwards, as `attack-virtio-left-broken` left it.
pub fn budget_phase(p: &Platform) {
    let Some(&base) = p.virtio[..p.nvirtio]
        .iter()
        .find(|&&b| Arm64::read32(b + reg::DEVICE_ID) == ID_BLOCK)
    else {
        verdict(
            "attack-virtio-budget",
            false,
            format_args!("no virtio disk"),
        );
        return;
    };
    let mut d = Drv::new(base, ID_BLOCK);
    budget(&mut d);
    if d.up().is_ok() {
        d.offer(200);
    }
}

/// The console flood (`attack-console-budget`), after the hold like the
/// disk's: [`FLOOD_CHAINS`] transmit chains of 4 KiB of text lines offered
/// with one store, every exit timed until all are used. kestrel puts the
/// console's output in the VM's buffer and never waits for the UART in
/// the exit, so the worst must be under 1 ms (1,000,000 instructions
/// under -icount shift=0) like any exit. The console is left broken
/// again, as `attack-virtio-left-broken` left it.
pub fn console_phase(p: &Platform) {
    let Some(&base) = p.virtio[..p.nvirtio]
        .iter()
        .find(|&&b| Arm64::read32(b + reg::DEVICE_ID) == ID_CONSOLE)
    else {
        verdict(
            "attack-console-budget",
            false,
            format_args!("no virtio console"),
        );
        return;
    };
    let mut d = Drv::new(base, ID_CONSOLE);
    console_flood(&mut d);
    if d.up().is_ok() {
        d.break_console();
    }
}

/// Transmit chains of the console flood, 4 KiB each.
const FLOOD_CHAINS: u16 = 16;
/// The console flood's text: lines of 63 characters and a newline.
#[repr(C, align(4096))]
struct Text([u8; 4096]);
static mut TEXT: Text = Text([0; 4096]);

fn console_flood(d: &mut Drv) {
    let mut o = Outcome::default();
    let dev = d.name();
    let mut worst = 0u64;
    let mut exits = 0u32;
    let r = (|| {
        if !d.reset() {
            return Err("Status/InterruptStatus not 0 after reset");
        }
        for off in (0..BTABLE).step_by(8) {
            bput(off, 0u64);
        }
        let text = core::ptr::addr_of_mut!(TEXT) as *mut u8;
        for i in 0..4096usize {
            let b = match i % 64 {
                63 => b'\n',
                k if k < 6 => b"flood "[k],
                k => b'a' + ((i / 64 + k) % 26) as u8,
            };
            // SAFETY: inside TEXT; only this vCPU writes it, kestrel's
            // device reads it during the exits below.
            unsafe { text.add(i).write_volatile(b) };
        }
        if !d.negotiate(VERSION_1) {
            return Err("FEATURES_OK refused");
        }
        if d.queue(1, u32::from(BQ), bgpa(BDESC), bgpa(BAVAIL), bgpa(BUSED)) != 1 {
            return Err("QueueReady 0 for a valid 256-entry queue");
        }
        d.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
        for i in 0..FLOOD_CHAINS {
            let at = BDESC + 16 * usize::from(i);
            bput(at, text as u64);
            bput(at + 8, 4096u32);
            bput(at + 12, 0u16);
            bput(at + 14, 0u16);
            bput(BAVAIL + 4 + 2 * usize::from(i), i);
        }
        Arm64::barrier();
        bput(BAVAIL + 2, FLOOD_CHAINS);
        Arm64::barrier();
        let (_, t) = timed(|| {
            d.wr(reg::QUEUE_NOTIFY, 1);
            0
        });
        worst = worst.max(t);
        exits += 1;
        while bget::<u16>(BUSED + 2) != FLOOD_CHAINS && exits < 100_000 {
            let (_, t) = timed(|| d.rd(reg::INTERRUPT_STATUS));
            worst = worst.max(t);
            exits += 1;
        }
        ok_if(
            bget::<u16>(BUSED + 2) == FLOOD_CHAINS,
            "not every chain used",
        )?;
        ok_if(
            d.rd(reg::STATUS) & NEEDS_RESET == 0,
            "the device needs reset",
        )
    })();
    o.add(dev, "console flood", r);
    if worst >= 1_000_000 {
        o.add(dev, "worst exit", Err("an exit took 1 ms or more"));
    }
    o.report::<Arm64>(
        "attack-console-budget",
        format_args!(
            "CONSOLE-BUDGET worst exit {} us over {exits} exits for {} KiB of text (under -icount shift=0 about {} instructions)",
            worst / 1000,
            usize::from(FLOOD_CHAINS) * 4,
            worst
        ),
    );
}

/// The oversized-notify area: a 256-entry queue and one indirect table
/// all its chains share.
#[repr(C, align(4096))]
struct Big([u8; BIG_SIZE]);
const BIG_SIZE: usize = 0x4000;
static mut BIG: Big = Big([0; BIG_SIZE]);
const BDESC: usize = 0x0;
const BAVAIL: usize = 0x1000;
const BUSED: usize = 0x1400;
const BTABLE: usize = 0x2000;
const BHDR: usize = 0x3000;
const BDATA: usize = 0x3100;
/// Entries of the big queue and of its shared indirect table.
const BQ: u16 = 256;

fn bgpa(off: usize) -> u64 {
    core::ptr::addr_of_mut!(BIG) as u64 + off as u64
}

fn bput<T: Copy>(off: usize, v: T) {
    assert!(off + core::mem::size_of::<T>() <= BIG_SIZE);
    // SAFETY: inside BIG (checked), aligned for T at every offset used;
    // only this vCPU and kestrel's device (by DMA, during trapped accesses
    // and their continuations) touch it.
    unsafe { (bgpa(off) as *mut T).write_volatile(v) }
}

fn bget<T: Copy>(off: usize) -> T {
    assert!(off + core::mem::size_of::<T>() <= BIG_SIZE);
    // SAFETY: as in `bput`.
    unsafe { (bgpa(off) as *const T).read_volatile() }
}

/// Counter ticks as nanoseconds (under -icount shift=0, guest
/// instructions).
fn ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(cpu::freq())) as u64
}

/// Brings the disk up on the big queue with every slot holding the same
/// costly chain: through the shared indirect table, a header and 255
/// writable buffers of 16 bytes over the same 16 bytes (the last one 33:
/// 4096 bytes of data and the status byte), a read of the whole disk.
/// One notification names 256 chains of 256 descriptors and 255 copies.
fn big_queue(d: &mut Drv) -> Result<(), &'static str> {
    if !d.reset() {
        return Err("Status/InterruptStatus not 0 after reset");
    }
    for off in (0..BIG_SIZE).step_by(8) {
        bput(off, 0u64);
    }
    if !d.negotiate(VERSION_1) {
        return Err("FEATURES_OK refused");
    }
    if d.queue(0, u32::from(BQ), bgpa(BDESC), bgpa(BAVAIL), bgpa(BUSED)) != 1 {
        return Err("QueueReady 0 for a valid 256-entry queue");
    }
    d.wr(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
    bput(BHDR, T_IN);
    bput(BHDR + 8, 0u64);
    let e = |i: u16, addr: u64, len: u32, flags: u16, next: u16| {
        let at = BTABLE + 16 * usize::from(i);
        bput(at, addr);
        bput(at + 8, len);
        bput(at + 12, flags);
        bput(at + 14, next);
    };
    e(0, bgpa(BHDR), 16, F_NEXT, 1);
    for i in 1..BQ - 1 {
        e(i, bgpa(BDATA), 16, F_WRITE | F_NEXT, i + 1);
    }
    e(BQ - 1, bgpa(BDATA), 33, F_WRITE, 0);
    for i in 0..BQ {
        let at = BDESC + 16 * usize::from(i);
        bput(at, bgpa(BTABLE));
        bput(at + 8, u32::from(BQ) * 16);
        bput(at + 12, F_INDIRECT);
        bput(at + 14, 0u16);
        bput(BAVAIL + 4 + 2 * usize::from(i), i);
    }
    bput(BDATA + 32, 0xffu8);
    Arm64::barrier();
    bput(BAVAIL + 2, BQ);
    Arm64::barrier();
    Ok(())
}

/// One MMIO access timed: its result and how long the exit took (ns).
fn timed(f: impl FnOnce() -> u32) -> (u32, u64) {
    let t0 = cpu::now();
    let v = f();
    let t1 = cpu::now();
    (v, ns(t1.wrapping_sub(t0)))
}

/// Oversized notify: 256 chains of 256 descriptors and 4 KiB each in one
/// store. kestrel does one budget of it per exit and the rest at later
/// exits: the phase times the notifying store and every later exit (an
/// InterruptStatus read each) until all 256 are used, and the worst must be
/// under 1 ms (1,000,000 instructions under -icount shift=0). Then the
/// same with a reset (Status = 0) while the work is pending: the reset is
/// as short, and the device writes nothing into the rings afterwards.
fn budget(d: &mut Drv) {
    let mut o = Outcome::default();
    let dev = d.name();
    let mut worst = 0u64;
    let mut exits = 0u32;
    let r = big_queue(d).and_then(|_| {
        let (_, t) = timed(|| {
            d.wr(reg::QUEUE_NOTIFY, 0);
            0
        });
        worst = worst.max(t);
        exits += 1;
        while bget::<u16>(BUSED + 2) != BQ && exits < 100_000 {
            let (_, t) = timed(|| d.rd(reg::INTERRUPT_STATUS));
            worst = worst.max(t);
            exits += 1;
        }
        ok_if(bget::<u16>(BUSED + 2) == BQ, "not all 256 chains used")?;
        ok_if(bget::<u8>(BDATA + 32) == S_OK, "status not OK")?;
        ok_if(
            (0..usize::from(BQ)).all(|i| {
                bget::<u32>(BUSED + 4 + 8 * i) == i as u32 && bget::<u32>(BUSED + 8 + 8 * i) == 4097
            }),
            "used entries out of order or of a wrong length",
        )?;
        ok_if(
            d.rd(reg::STATUS) & NEEDS_RESET == 0,
            "the device needs reset",
        )
    });
    o.add(dev, "oversized notify", r);
    let mut reset_t = 0u64;
    let r = big_queue(d).and_then(|_| {
        d.wr(reg::QUEUE_NOTIFY, 0);
        let (_, t) = timed(|| {
            d.wr(reg::STATUS, 0);
            0
        });
        reset_t = t;
        worst = worst.max(t);
        let used = bget::<u16>(BUSED + 2);
        ok_if(d.rd(reg::STATUS) == 0, "Status not 0 after the reset")?;
        for _ in 0..64 {
            let (_, t) = timed(|| d.rd(reg::INTERRUPT_STATUS));
            worst = worst.max(t);
        }
        ok_if(
            bget::<u16>(BUSED + 2) == used,
            "the device wrote the used ring after its reset",
        )
    });
    o.add(dev, "reset with the rings live", r);
    if worst >= 1_000_000 {
        o.add(dev, "worst exit", Err("an exit took 1 ms or more"));
    }
    o.report::<Arm64>(
        "attack-virtio-budget",
        format_args!(
            "VIRTIO-BUDGET worst exit {} us over {exits} exits (reset {} us; under -icount shift=0 about {} instructions)",
            worst / 1000,
            reset_t / 1000,
            worst
        ),
    );
}

fn read(a: u64, width: u64) -> u64 {
    // SAFETY: inside this VM's virtio-mmio window (Device memory); every
    // answer, an abort included, is caught by the caller's probe.
    unsafe {
        let v: u64;
        match width {
            1 => {
                core::arch::asm!("ldrb {v:w}, [{a}]", a = in(reg) a, v = out(reg) v, options(nostack))
            }
            2 => {
                core::arch::asm!("ldrh {v:w}, [{a}]", a = in(reg) a, v = out(reg) v, options(nostack))
            }
            4 => {
                core::arch::asm!("ldr {v:w}, [{a}]", a = in(reg) a, v = out(reg) v, options(nostack))
            }
            _ => {
                core::arch::asm!("ldr {v}, [{a}]", a = in(reg) a, v = out(reg) v, options(nostack))
            }
        }
        v
    }
}

fn write(a: u64, width: u64, v: u64) {
    // SAFETY: as in `read`.
    unsafe {
        match width {
            1 => {
                core::arch::asm!("strb {v:w}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
            }
            2 => {
                core::arch::asm!("strh {v:w}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
            }
            4 => {
                core::arch::asm!("str {v:w}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack))
            }
            _ => core::arch::asm!("str {v}, [{a}]", a = in(reg) a, v = in(reg) v, options(nostack)),
        }
    }
}
