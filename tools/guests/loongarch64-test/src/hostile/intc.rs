//! The attacker's interrupt-controller phase (`attack-intc`): kestrel's
//! EIOINTC (IOCSR) and PCH-PIC (MMIO) models under garbage, then the
//! semantics a guest can see, then its own interrupts back.
//!
//! 1. Every EIOINTC register (MISC_FUNC, the 0x1400-0x1d00 block, the
//!    virtual-extension words) read and written with garbage at every
//!    width, aligned and one byte up: every access completes (IOCSR has no
//!    fault to give).
//! 2. Every PCH-PIC offset (0x000-0x3ff) the same way, as loads and
//!    stores: an aligned access completes; a misaligned one completes or
//!    raises ALE/ADE; past the window (0x400-0x4ff, nothing there) ADE.
//!    The ID registers read as before.
//! 3. With sane settings again, on the 16550's line (level while IER.THRI
//!    is set and the transmitter is empty), checked through the EIOINTC's
//!    ISR and the HWI bits of ESTAT with interrupts masked:
//!    - routes to vCPUs and nodes this 1-vCPU VM does not have (core
//!      bitmaps 2/4/8, nodes 1-15, CPU-encoded 1-255) latch nothing, and a
//!      route back to vCPU 0 delivers the still-high line;
//!    - huge and zero vectors (0, 31, 32, 128, 254, 255) latch there, a
//!      disabled one nowhere; IP-map bytes pick HWI0-3 (garbage in the
//!      high nibble ignored);
//!    - edge and level storms (thousands of IER toggles, polarity flips):
//!      an edge line keeps its request until CLEAR, a level one follows its
//!      input;
//!    - masking games (PCH-PIC mask, HT-MSI enable, EIOINTC enable,
//!      EXT_IOI_EN) drop the vector while off and bring it back while on.
//! 4. Sane settings restored as the normal checks program them: the
//!    16550's interrupt must arrive through the handler on vector 29.
//!
//! Only on kestrel (its models; QEMU virt's own controllers are not the
//! subject, and garbage vectors beyond 31 crash QEMU 10).

use core::sync::atomic::Ordering;

use super::{iocsrrd, iocsrwr, load, run, Rng, Tally, A0, A1};
use crate::cpu::{self, csr, csr_read};
use crate::devirq;
use crate::trap::ecode;

const PCH: u64 = devirq::PCH_PIC as u64;
const PCH_SIZE: u64 = 0x400;

mod eio {
    pub const MISC_FUNC: u64 = 0x420;
    pub const EXT_IOI_EN: u64 = 1 << 48;
    pub const BLOCK: u64 = 0x1400;
    pub const BLOCK_END: u64 = 0x1d00;
    pub const NODEMAP: u64 = 0x14a0;
    pub const IPMAP: u64 = 0x14c0;
    pub const ENABLE: u64 = 0x1600;
    pub const BOUNCE: u64 = 0x1680;
    pub const ISR: u64 = 0x1800;
    pub const ROUTE: u64 = 0x1c00;
    pub const VIRT_FEATURES: u64 = 0x4000_0000;
    pub const VIRT_CONFIG: u64 = 0x4000_0004;
    pub const CPU_ENCODE: u64 = 1 << 3;
}

mod pch {
    pub const ID: u64 = 0x000;
    pub const MASK: u64 = 0x020;
    pub const HTMSI_EN: u64 = 0x040;
    pub const EDGE: u64 = 0x060;
    pub const CLEAR: u64 = 0x080;
    pub const ROUTE: u64 = 0x100;
    pub const HTVEC: u64 = 0x200;
    pub const IRR: u64 = 0x380;
    pub const POL: u64 = 0x3e0;
}

/// The 16550's PCH-PIC line.
const LINE: u64 = 2;
const ALE: u64 = 9;

/// `ld.{b,h,w,d} a0, a1, 0` / `st.{b,h,w,d} a0, a1, 0` (width 0-3).
fn ld(w: u32) -> u32 {
    0x2800_0000 | w << 22 | A1 << 5 | A0
}
fn st(w: u32) -> u32 {
    0x2900_0000 | w << 22 | A1 << 5 | A0
}

/// Stubs: 0-3 iocsrrd, 4-7 iocsrwr, 8-11 loads, 12-15 stores.
fn load_stubs() {
    load(
        (0..4)
            .map(iocsrrd)
            .chain((0..4).map(iocsrwr))
            .chain((0..4).map(ld))
            .chain((0..4).map(st)),
    );
}

struct Io<'a> {
    t: &'a mut Tally,
}

impl Io<'_> {
    fn rd(&mut self, w: usize, a: u64) -> u64 {
        let mut r = [0, a, 0, 0, 0, 0];
        self.t.quiet("EIOINTC iocsrrd", a, run(w, &mut r));
        r[0]
    }

    fn wr(&mut self, w: usize, a: u64, v: u64) {
        let mut r = [v, a, 0, 0, 0, 0];
        self.t.quiet("EIOINTC iocsrwr", a, run(4 + w, &mut r));
    }

    /// A PCH-PIC access at offset `off` (`store`: of `v`): aligned inside
    /// the window it must complete; misaligned it may raise ALE or ADE;
    /// past the window it must raise ADE.
    fn mmio(&mut self, w: usize, off: u64, store: Option<u64>) -> u64 {
        let mut r = [store.unwrap_or(0), PCH + off, 0, 0, 0, 0];
        let res = run(if store.is_some() { 12 + w } else { 8 + w }, &mut r);
        let what = if store.is_some() {
            "PCH-PIC store"
        } else {
            "PCH-PIC load"
        };
        let aligned = off.is_multiple_of(1 << w);
        if off >= PCH_SIZE {
            self.t.probes += 1;
            match res {
                Err(c) if c.ecode() == ecode::ADE || (!aligned && c.ecode() == ALE) => {
                    self.t.exceptions += 1
                }
                Err(c) => {
                    self.t.exceptions += 1;
                    self.t.bad(format_args!(
                        "{what} {off:#x} (width {}): {} instead of ADE",
                        1 << w,
                        crate::trap::ecode::name(c.ecode())
                    ))
                }
                Ok(()) => self.t.bad(format_args!(
                    "{what} {off:#x} past the window (width {}): no ADE",
                    1 << w
                )),
            }
        } else if aligned {
            self.t.quiet(what, off, res);
        } else {
            self.t.probes += 1;
            match res {
                Ok(()) => {}
                Err(c) if c.ecode() == ALE || c.ecode() == ecode::ADE => self.t.exceptions += 1,
                Err(c) => {
                    self.t.exceptions += 1;
                    self.t.bad(format_args!(
                        "misaligned {what} {off:#x} (width {}): {}",
                        1 << w,
                        crate::trap::ecode::name(c.ecode())
                    ))
                }
            }
        }
        r[0]
    }

    fn prd(&mut self, w: usize, off: u64) -> u64 {
        self.mmio(w, off, None)
    }

    fn pwr(&mut self, w: usize, off: u64, v: u64) {
        self.mmio(w, off, Some(v));
    }

    /// The EIOINTC ISR bit of vector `v` on this vCPU.
    fn latched(&mut self, v: u64) -> bool {
        self.rd(3, eio::ISR + v / 64 * 8) & 1 << (v % 64) != 0
    }

    fn clear_isr(&mut self) {
        for i in 0..4 {
            self.wr(3, eio::ISR + 8 * i, u64::MAX);
        }
    }

    /// Power-on-like settings: every PCH-PIC line masked, level, active
    /// high, no HT-MSI, vector 0; the EIOINTC on, plain routes to vCPU 0,
    /// every group on HWI1, every vector disabled, the ISR clear.
    fn sane(&mut self) {
        devirq::uart_ier(0);
        self.pwr(3, pch::MASK, u64::MAX);
        self.pwr(3, pch::HTMSI_EN, 0);
        self.pwr(3, pch::EDGE, 0);
        self.pwr(3, pch::POL, 0);
        self.pwr(3, pch::CLEAR, u64::MAX);
        for i in 0..8 {
            self.pwr(3, pch::HTVEC + 8 * i, 0);
            self.pwr(3, pch::ROUTE + 8 * i, 0x0101_0101_0101_0101);
        }
        let misc = self.rd(3, eio::MISC_FUNC);
        self.wr(3, eio::MISC_FUNC, misc | eio::EXT_IOI_EN);
        self.wr(2, eio::VIRT_CONFIG, 0);
        self.wr(3, eio::IPMAP, 0x0202_0202_0202_0202);
        for i in 0..4 {
            self.wr(3, eio::NODEMAP + 8 * i, 0);
            self.wr(3, eio::ENABLE + 8 * i, 0);
            self.wr(3, eio::BOUNCE + 8 * i, 0);
        }
        for i in 0..32 {
            self.wr(3, eio::ROUTE + 8 * i, 0x0101_0101_0101_0101);
        }
        self.clear_isr();
    }

    fn set_bit64(&mut self, reg: u64, bit: u64, on: bool) {
        let old = self.prd(3, reg);
        let new = if on {
            old | 1 << bit
        } else {
            old & !(1 << bit)
        };
        self.pwr(3, reg, new);
    }

    fn enable(&mut self, v: u64, on: bool) {
        let a = eio::ENABLE + v / 32 * 4;
        let old = self.rd(2, a);
        let new = if on {
            old | 1 << (v % 32)
        } else {
            old & !(1 << (v % 32))
        };
        self.wr(2, a, new);
    }

    /// The 16550's line on vector `v`, routed by `route`, enabled,
    /// unmasked (still low: IER is 0).
    fn line_to(&mut self, v: u64, route: u8) {
        self.pwr(0, pch::HTVEC + LINE, v);
        self.set_bit64(pch::HTMSI_EN, LINE, true);
        self.set_bit64(pch::MASK, LINE, false);
        self.wr(0, eio::ROUTE + v, u64::from(route));
        self.enable(v, true);
    }
}

/// A masking game: its name and how it turns the line's path off or on.
type Game = (&'static str, fn(&mut Io, bool));

/// ESTAT's HWI bits (IS[9:2]) as HWI0..7.
fn hwi() -> u64 {
    (csr_read!(csr::ESTAT) >> 2) & 0xff
}

fn line_high(on: bool) {
    devirq::uart_ier(if on { 0x02 } else { 0 });
}

pub(super) fn attack_intc(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    if !kestrel {
        t.bad(format_args!(
            "this phase attacks kestrel's EIOINTC and PCH-PIC models: run it on kestrel"
        ));
        return t;
    }
    cpu::set_irqs(false);
    load_stubs();
    let mut rng = Rng(0x1c1c_0e10_7a7a_5a5a);
    let mut io = Io { t: &mut t };
    let features = io.rd(2, eio::VIRT_FEATURES);
    let id = io.prd(3, pch::ID);

    // 1. EIOINTC garbage at every register, every width.
    let mut eio_n = 0u64;
    for w in 0..4usize {
        let n = 1u64 << w;
        let regs = (eio::MISC_FUNC..eio::MISC_FUNC + 8)
            .step_by(n as usize)
            .chain((eio::BLOCK..eio::BLOCK_END).step_by(n as usize))
            .chain((eio::VIRT_FEATURES..eio::VIRT_FEATURES + 8).step_by(n as usize));
        for a in regs {
            for at in [a, a + 1] {
                if at != a && w == 0 {
                    continue;
                }
                io.rd(w, at);
                io.wr(w, at, rng.next());
                eio_n += 2;
            }
        }
    }
    if io.rd(2, eio::VIRT_FEATURES) != features {
        io.t.bad(format_args!("EIOINTC VIRT_FEATURES changed by writes"));
    }

    // 2. PCH-PIC garbage at every offset, every width, and past it.
    let mut pch_n = 0u64;
    for w in 0..4usize {
        let n = 1u64 << w;
        for off in (0..PCH_SIZE + 0x100).step_by(n as usize) {
            for at in [off, off + 1] {
                if at != off && w == 0 {
                    continue;
                }
                io.prd(w, at);
                io.pwr(w, at, rng.next());
                pch_n += 2;
            }
        }
    }
    if io.prd(3, pch::ID) != id {
        io.t.bad(format_args!("PCH-PIC ID changed by writes"));
    }

    // 3. Semantics, interrupts masked, on the 16550's level line.
    io.sane();
    let v = devirq::VECTOR;
    io.line_to(v, 0x01);
    line_high(true);
    if !io.latched(v) || hwi() & 0b10 == 0 {
        io.t.bad(format_args!(
            "baseline: the 16550's line on vector {v} to vCPU 0 did not latch (HWI {:#x})",
            hwi()
        ));
    }
    // Routes to vCPUs and nodes that do not exist, then back.
    let mut routes = 0;
    for r in [0x02u8, 0x04, 0x08, 0x11, 0x21, 0xf1, 0x32, 0xff] {
        io.wr(0, eio::ROUTE + v, u64::from(r));
        routes += 1;
        if io.latched(v) || hwi() != 0 {
            io.t.bad(format_args!(
                "route byte {r:#x} (no such vCPU) left vector {v} latched here"
            ));
        }
        io.wr(0, eio::ROUTE + v, 1);
        if !io.latched(v) {
            io.t.bad(format_args!(
                "route back from {r:#x} to vCPU 0: the high line was not delivered"
            ));
        }
    }
    io.wr(2, eio::VIRT_CONFIG, eio::CPU_ENCODE);
    for r in [1u8, 2, 4, 63, 200, 255] {
        io.wr(0, eio::ROUTE + v, u64::from(r));
        routes += 1;
        if io.latched(v) {
            io.t.bad(format_args!(
                "CPU-encoded route {r} (no such vCPU) left vector {v} latched here"
            ));
        }
        io.wr(0, eio::ROUTE + v, 0);
        if !io.latched(v) {
            io.t.bad(format_args!(
                "CPU-encoded route back from {r} to vCPU 0: not delivered"
            ));
        }
    }
    io.wr(2, eio::VIRT_CONFIG, 0);
    io.wr(0, eio::ROUTE + v, 1);
    line_high(false);
    io.clear_isr();

    // Huge and zero vectors; a disabled one; the IP map's lines.
    for hv in [0u64, 31, 32, 128, 254, 255] {
        io.sane();
        io.line_to(hv, 0x01);
        line_high(true);
        if !io.latched(hv) || hwi() != 0b10 {
            io.t.bad(format_args!(
                "the line on vector {hv}: not latched on HWI1 (HWI {:#x})",
                hwi()
            ));
        }
        io.enable(hv, false);
        if io.latched(hv) || hwi() != 0 {
            io.t.bad(format_args!("vector {hv} disabled: still latched"));
        }
        io.enable(hv, true);
        for (byte, line) in [(0x01u64, 0u64), (0x04, 2), (0x08, 3), (0x00, 0), (0xf2, 1)] {
            io.wr(0, eio::IPMAP + hv / 32, byte);
            if hwi() != 1 << line {
                io.t.bad(format_args!(
                    "IP map byte {byte:#x} for vector {hv}: HWI {:#x}, want HWI{line}",
                    hwi()
                ));
            }
        }
        line_high(false);
        io.clear_isr();
    }

    // Storms: edge, level, polarity.
    const STORM: u64 = 2000;
    io.sane();
    io.line_to(v, 0x01);
    io.set_bit64(pch::EDGE, LINE, true);
    for _ in 0..STORM {
        line_high(true);
        line_high(false);
    }
    if io.prd(3, pch::IRR) & 1 << LINE == 0 || !io.latched(v) {
        io.t.bad(format_args!(
            "{STORM} edges: no request kept in IRR or no vector latched"
        ));
    }
    io.pwr(3, pch::CLEAR, 1 << LINE);
    io.clear_isr();
    if io.prd(3, pch::IRR) & 1 << LINE != 0 || io.latched(v) {
        io.t.bad(format_args!(
            "an edge request survived CLEAR with the line low"
        ));
    }
    io.set_bit64(pch::EDGE, LINE, false);
    for _ in 0..STORM {
        line_high(true);
        line_high(false);
    }
    if io.prd(3, pch::IRR) & 1 << LINE != 0 || io.latched(v) {
        io.t.bad(format_args!(
            "{STORM} level pulses: the low level line left a request"
        ));
    }
    for i in 0..STORM {
        io.set_bit64(pch::POL, LINE, i % 2 == 0);
    }
    // Polarity back to active high (STORM is even): the low line is idle.
    io.clear_isr();
    if io.prd(3, pch::IRR) & 1 << LINE != 0 {
        io.t.bad(format_args!(
            "after {STORM} polarity flips the idle line requests"
        ));
    }
    io.set_bit64(pch::POL, LINE, true);
    if io.prd(3, pch::IRR) & 1 << LINE == 0 || !io.latched(v) {
        io.t.bad(format_args!("active low with the line low: no request"));
    }
    io.set_bit64(pch::POL, LINE, false);
    io.clear_isr();

    // Masking games with the level line high.
    line_high(true);
    let games: [Game; 4] = [
        ("PCH-PIC mask", |io, on| io.set_bit64(pch::MASK, LINE, !on)),
        ("HT-MSI enable", |io, on| {
            io.set_bit64(pch::HTMSI_EN, LINE, on)
        }),
        ("EIOINTC enable", |io, on| io.enable(devirq::VECTOR, on)),
        ("EXT_IOI_EN", |io, on| {
            let m = io.rd(3, eio::MISC_FUNC);
            let m = if on {
                m | eio::EXT_IOI_EN
            } else {
                m & !eio::EXT_IOI_EN
            };
            io.wr(3, eio::MISC_FUNC, m)
        }),
    ];
    for (name, set) in games {
        for i in 0..200 {
            set(&mut io, i % 2 == 1);
        }
        // Ends on: latched again.
        if !io.latched(v) {
            io.t.bad(format_args!(
                "{name} off and on: the high line not delivered"
            ));
        }
        set(&mut io, false);
        if io.latched(v) || hwi() != 0 {
            io.t.bad(format_args!("{name} off: vector {v} still latched"));
        }
        set(&mut io, true);
        if !io.latched(v) {
            io.t.bad(format_args!("{name} on again: not delivered"));
        }
    }
    line_high(false);
    io.sane();

    // 4. Its own interrupts back, through the handler.
    let before = devirq::HITS[0].load(Ordering::Acquire);
    devirq::program_line(LINE as u32, v, 0);
    cpu::set_irqs(true);
    line_high(true);
    let got = crate::wait_for(2_000_000, || {
        devirq::HITS[0].load(Ordering::Acquire) > before
    });
    cpu::set_irqs(false);
    line_high(false);
    devirq::release_line(LINE as u32, v);
    let last = devirq::LAST[0].load(Ordering::Relaxed);
    if !got || last != v {
        io.t.bad(format_args!(
            "sane settings restored: the 16550's interrupt did not come back on vector {v} (got {got}, last vector {last})"
        ));
    }
    crate::console::println!(
        "ATTACK intc: {eio_n} EIOINTC and {pch_n} PCH-PIC garbage accesses, {routes} missing-vCPU routes, 6 huge/zero vectors, {STORM}-toggle storms, 4 masking games, own interrupt back: {}",
        if got { "yes" } else { "NO" }
    );
    t
}
