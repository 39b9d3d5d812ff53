//! A LoongArch VM's interrupt controllers (PCH-PIC on MMIO, EIOINTC in
//! IOCSR space, chained to the vCPUs' HWI lines) under random guest
//! accesses of every width to every register (and beyond), ANY_SEND
//! writes, device lines, pulses and resets. Invariants after each step:
//! no panic; reads fit their width; every latched vector is enabled,
//! routed to the vCPU holding it and held by one vCPU; the EIOINTC inputs
//! are what the PCH-PIC drives; the lines a backend reads are the model's;
//! a line raised on a fully programmed path lands in its target's ISR.
#![no_main]

use arbitrary::Arbitrary;
use kernel::guest::loongarch::intc::{eiointc as e, pchpic as p, Intc};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    IocsrRead {
        cpu: u8,
        addr: Addr,
        size: u8,
    },
    IocsrWrite {
        cpu: u8,
        addr: Addr,
        size: u8,
        value: u64,
    },
    AnySend {
        cpu: u8,
        addr: u16,
        value: u32,
        keep: u8,
    },
    MmioRead {
        off: u16,
        size: u8,
    },
    MmioWrite {
        off: u16,
        size: u8,
        value: u64,
    },
    Level {
        line: u8,
        level: bool,
    },
    Pulse {
        line: u8,
    },
    Reset,
}

/// IOCSR addresses: mostly the EIOINTC's, sometimes anywhere.
#[derive(Arbitrary, Debug)]
enum Addr {
    Block(u16),
    Misc(u8),
    Virt(u8),
    Any(u64),
}

impl Addr {
    fn get(&self) -> u64 {
        match *self {
            Addr::Block(o) => e::BASE + u64::from(o) % e::SIZE,
            Addr::Misc(o) => e::MISC_FUNC + u64::from(o % 8),
            Addr::Virt(o) => e::VIRT_FEATURES + u64::from(o % 8),
            Addr::Any(a) => a,
        }
    }
}

fn size(s: u8) -> u64 {
    1 << (s % 4)
}

/// Whether a rise of `line` now must land in some vCPU's ISR, and where.
fn must_deliver(i: &Intc, line: usize) -> Option<(usize, usize)> {
    let c = i.check().ok()?;
    let bit = 1u64 << line;
    let r = |o| i.mmio_read(o, 8).unwrap_or(0);
    if r(p::MASK) & bit != 0
        || r(p::HTMSI_EN) & bit == 0
        || r(p::EDGE) & bit != 0
        || r(p::POL) & bit != 0
        || c.pch.irr() & bit != 0
    {
        return None;
    }
    let v = i.mmio_read(p::HTVEC + line as u64, 1).ok()? as usize;
    // Another line may already drive the vector high.
    if c.eio.input(v) || !c.eio.enabled(v) || !c.eio.routing_on() {
        return None;
    }
    Some((c.eio.target(v)?, v))
}

fuzz_target!(|data: (u8, Vec<Op>)| {
    let (n, ops) = data;
    let n = usize::from(n % 8) + 1;
    let i = Intc::new(n);
    for op in &ops {
        match *op {
            Op::IocsrRead {
                cpu,
                ref addr,
                size: s,
            } => {
                let s = size(s);
                if let Some(v) = i.iocsr_read(usize::from(cpu % 10), addr.get(), s) {
                    if s < 8 {
                        assert_eq!(v >> (8 * s), 0, "read wider than its access");
                    }
                }
            }
            Op::IocsrWrite {
                cpu,
                ref addr,
                size: s,
                value,
            } => {
                let a = addr.get();
                let r = i.iocsr_write(usize::from(cpu % 10), a, size(s), value);
                assert_eq!(r.is_some(), Intc::owns_iocsr(a));
            }
            Op::AnySend {
                cpu,
                addr,
                value,
                keep,
            } => {
                let a = e::BASE + u64::from(addr) % e::SIZE;
                i.any_send(usize::from(cpu % 10), a & !3, value, keep);
            }
            Op::MmioRead { off, size: s } => {
                let s = size(s);
                if let Ok(v) = i.mmio_read(u64::from(off % 0x500), s) {
                    if s < 8 {
                        assert_eq!(v >> (8 * s), 0);
                    }
                }
            }
            Op::MmioWrite {
                off,
                size: s,
                value,
            } => {
                let _ = i.mmio_write(u64::from(off % 0x500), size(s), value);
            }
            Op::Level { line, level } => {
                let line = usize::from(line % 70);
                let want = if level && line < p::LINES {
                    must_deliver(&i, line)
                } else {
                    None
                };
                let rose = i.set_level(line as u32, level);
                if let Some((cpu, v)) = want {
                    let c = i.check().unwrap();
                    assert!(c.eio.latched(cpu, v), "line {line} not delivered");
                    assert_ne!(i.hwi(cpu) & (1 << c.eio.ip(v)), 0);
                }
                for v in rose.iter() {
                    assert!(v < n, "woke a vCPU the VM does not have");
                    assert_ne!(i.hwi(v), 0, "woken with no line up");
                }
            }
            Op::Pulse { line } => {
                i.pulse(u32::from(line % 70));
            }
            Op::Reset => {
                i.reset();
                assert!((0..n).all(|c| i.hwi(c) == 0));
            }
        }
        if let Err(m) = i.check() {
            panic!("{m}");
        }
    }
});
