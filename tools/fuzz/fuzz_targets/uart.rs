//! Both emulated UARTs under guest register sequences and host input: the
//! receive FIFO behaves as a queue (bytes come out of the data register in
//! the order they were accepted, the status registers say whether it is
//! empty, `receive` refuses exactly when `can_receive` says no), and every
//! byte written to the data register goes out (or, in 16550 loopback,
//! comes back in).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::dev::vdev::{ns16550, pl011, Width};
use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;

#[derive(Arbitrary, Debug)]
enum Op {
    Receive(u8),
    Read { offset: u16, width: u8 },
    Write { offset: u16, width: u8, value: u64 },
}

fn width(w: u8) -> Option<Width> {
    Width::new(1 << (w % 4))
}

fn pl011(ops: &[Op]) {
    let mut u = pl011::Pl011::new();
    let mut q: VecDeque<u8> = VecDeque::new();
    for op in ops {
        match *op {
            Op::Receive(b) => {
                let can = u.can_receive();
                assert_eq!(u.receive(b), can);
                if can {
                    q.push_back(b);
                }
            }
            Op::Read { offset, width: w } => {
                let offset = u64::from(offset % 0x1010);
                let Some(w) = width(w) else { continue };
                let Ok(v) = u.read(offset, w) else {
                    continue;
                };
                let shift = (offset & 3) * 8;
                match offset & !3 {
                    0 => {
                        let b = q.pop_front();
                        if shift == 0 {
                            assert_eq!(v & 0xff, u64::from(b.unwrap_or(0)), "DR out of order");
                        }
                    }
                    0x18 if shift == 0 => {
                        assert_eq!(v & 0x10 != 0, q.is_empty(), "FR.RXFE");
                    }
                    _ => {}
                }
            }
            Op::Write {
                offset,
                width: w,
                value,
            } => {
                let offset = u64::from(offset % 0x1010);
                let Some(w) = width(w) else { continue };
                let Ok(e) = u.write(offset, w, value) else {
                    continue;
                };
                if offset == 0 {
                    assert_eq!(e, pl011::Effect::Transmit(value as u8));
                } else {
                    assert_eq!(e, pl011::Effect::None);
                }
            }
        }
        let _ = u.irq_level();
    }
}

fn ns16550(ops: &[Op]) {
    let mut u = ns16550::Ns16550::new();
    let mut q: VecDeque<u8> = VecDeque::new();
    let b1 = Width::new(1).unwrap();
    let (mut lcr, mut mcr) = (u.read(3, b1).unwrap() as u8, u.read(4, b1).unwrap() as u8);
    for op in ops {
        match *op {
            Op::Receive(b) => {
                let can = u.can_receive();
                assert_eq!(u.receive(b), can);
                if can {
                    q.push_back(b);
                }
            }
            Op::Read { offset, width: w } => {
                let offset = u64::from(offset % 0x10);
                let Some(w) = width(w) else { continue };
                let Ok(v) = u.read(offset, w) else {
                    continue;
                };
                match offset {
                    0 if lcr & 0x80 == 0 => {
                        assert_eq!(v, u64::from(q.pop_front().unwrap_or(0)), "RBR out of order");
                    }
                    3 => assert_eq!(v, u64::from(lcr)),
                    5 => assert_eq!(v & 1 != 0, !q.is_empty(), "LSR.DR"),
                    _ => {}
                }
            }
            Op::Write {
                offset,
                width: w,
                value,
            } => {
                let offset = u64::from(offset % 0x10);
                let Some(w) = width(w) else { continue };
                let can = u.can_receive();
                let Ok(e) = u.write(offset, w, value) else {
                    continue;
                };
                let v = value as u8;
                match offset {
                    0 if lcr & 0x80 == 0 => {
                        if mcr & 0x10 != 0 {
                            assert_eq!(e, ns16550::Effect::None);
                            if can {
                                q.push_back(v);
                            }
                        } else {
                            assert_eq!(e, ns16550::Effect::Transmit(v));
                        }
                    }
                    2 if v & 2 != 0 => q.clear(),
                    3 => lcr = v,
                    4 => mcr = v & 0x1f,
                    _ => {}
                }
                if offset != 0 || lcr & 0x80 != 0 {
                    assert_eq!(e, ns16550::Effect::None);
                }
            }
        }
        let _ = u.irq_level();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(which) = u.arbitrary::<bool>() else {
        return;
    };
    let Ok(ops) = u.arbitrary::<Vec<Op>>() else {
        return;
    };
    if which {
        pl011(&ops);
    } else {
        ns16550(&ops);
    }
});
