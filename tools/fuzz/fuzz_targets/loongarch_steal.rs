//! KVM's LoongArch steal-time record (`guest::loongarch::steal`) under a
//! hostile guest: NOTIFYs with arbitrary features and addresses (inside,
//! at the edges of and far outside a RAM of arbitrary base and size),
//! interleaved with puts (runnable or not), loads (with stolen time or
//! not), resets and the guest scribbling over its record. Invariants after
//! each step: no panic; NOTIFY answers 0 or -2, and -2 changes nothing;
//! every write lies inside RAM and inside the record registered before or
//! after the step; a registered record is 64-byte aligned and wholly RAM;
//! once a vCPU is loaded its record's `preempted` byte reads 0 and its
//! version is even; a runnable put sets the byte; a published record holds
//! the stolen time so far.
#![no_main]

use std::cell::RefCell;

use arbitrary::Arbitrary;
use kernel::dev::vdev::bus::{GuestMemory, MemError};
use kernel::guest::loongarch::steal::{StealTime, PREEMPTED, SIZE, STEAL, VERSION};
use kestrel_abi::loongarch::{KVM_FEATURE_STEAL_TIME, KVM_VCPU_PREEMPTED};
use kestrel_abi::ret;
use libfuzzer_sys::fuzz_target;

const PAGE: u64 = 4096;

#[derive(Arbitrary, Debug)]
enum Arg {
    /// An offset into RAM (| 1 unless `stop`).
    InRam {
        off: u32,
        stop: bool,
    },
    /// Near RAM's start or end (signed bytes from it).
    NearEnd {
        delta: i16,
    },
    NearStart {
        delta: i16,
    },
    Raw(u64),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Notify {
        feature_ok: bool,
        feature: u64,
        arg: Arg,
    },
    Put {
        runnable: bool,
    },
    Load {
        stolen: Option<u32>,
    },
    Reset,
    /// The guest writes its own RAM (its record included).
    Scribble {
        off: u32,
        data: [u8; 8],
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    base_pages: u16,
    size_pages: u8,
    ops: Vec<Op>,
}

struct Ram {
    base: u64,
    bytes: RefCell<Vec<u8>>,
    writes: RefCell<Vec<(u64, usize)>>,
}

impl Ram {
    fn range(&self, gpa: u64, len: usize) -> Result<std::ops::Range<usize>, MemError> {
        let err = MemError {
            gpa,
            len: len as u64,
        };
        let off = gpa.checked_sub(self.base).ok_or(err)?;
        let end = off.checked_add(len as u64).ok_or(err)?;
        if end > self.bytes.borrow().len() as u64 {
            return Err(err);
        }
        Ok(off as usize..end as usize)
    }
    fn end(&self) -> u64 {
        self.base + self.bytes.borrow().len() as u64
    }
    fn byte(&self, gpa: u64) -> u8 {
        let mut b = [0];
        self.read(gpa, &mut b).unwrap();
        b[0]
    }
    fn u32_at(&self, gpa: u64) -> u32 {
        let mut b = [0; 4];
        self.read(gpa, &mut b).unwrap();
        u32::from_le_bytes(b)
    }
    fn u64_at(&self, gpa: u64) -> u64 {
        let mut b = [0; 8];
        self.read(gpa, &mut b).unwrap();
        u64::from_le_bytes(b)
    }
}

impl GuestMemory for Ram {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.range(gpa, buf.len())?;
        buf.copy_from_slice(&self.bytes.borrow()[r]);
        Ok(())
    }
    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.range(gpa, data.len())?;
        self.bytes.borrow_mut()[r].copy_from_slice(data);
        self.writes.borrow_mut().push((gpa, data.len()));
        Ok(())
    }
}

fuzz_target!(|input: Input| {
    let size = (u64::from(input.size_pages) + 1) * PAGE;
    let ram = Ram {
        base: u64::from(input.base_pages) * PAGE,
        bytes: RefCell::new(vec![0xAA; size as usize]),
        writes: RefCell::new(Vec::new()),
    };
    let mut s = StealTime::new();
    let mut stolen_total = 0u64;
    for op in input.ops.iter().take(256) {
        let before = s.gpa();
        match op {
            Op::Notify {
                feature_ok,
                feature,
                arg,
            } => {
                let feature = if *feature_ok {
                    u64::from(KVM_FEATURE_STEAL_TIME)
                } else {
                    *feature
                };
                let arg = match *arg {
                    Arg::InRam { off, stop } => {
                        (ram.base + u64::from(off) % size) | u64::from(!stop)
                    }
                    Arg::NearEnd { delta } => ram.end().wrapping_add(delta as i64 as u64) | 1,
                    Arg::NearStart { delta } => ram.base.wrapping_add(delta as i64 as u64) | 1,
                    Arg::Raw(v) => v,
                };
                let r = s.notify(&ram, feature, arg);
                assert!(r == ret::SUCCESS || r == ret::INVALID_PARAMETER, "{r}");
                if r == ret::INVALID_PARAMETER {
                    assert_eq!(s.gpa(), before, "a refused NOTIFY changed the record");
                } else if arg & 1 == 0 {
                    assert_eq!(s.gpa(), None);
                } else {
                    assert_eq!(s.gpa(), Some(arg & !(SIZE - 1)));
                }
            }
            Op::Put { runnable } => {
                s.put(&ram, *runnable);
                if let (Some(rec), true) = (s.gpa(), *runnable) {
                    assert_eq!(ram.byte(rec + PREEMPTED), KVM_VCPU_PREEMPTED);
                    assert!(s.preempted());
                }
            }
            Op::Load { stolen } => {
                let ns = stolen.map(u64::from);
                stolen_total = stolen_total.wrapping_add(ns.unwrap_or(0));
                let published = s.gpa().is_some() && (ns.is_some() || s.preempted());
                s.load(&ram, ns);
                assert!(!s.preempted() || s.gpa().is_none());
                if let (Some(rec), true) = (s.gpa(), published) {
                    assert_eq!(ram.byte(rec + PREEMPTED), 0);
                    assert_eq!(ram.u32_at(rec + VERSION) % 2, 0);
                    assert_eq!(ram.u64_at(rec + STEAL), stolen_total);
                }
            }
            Op::Reset => {
                s.reset();
                assert_eq!(s.gpa(), None);
            }
            Op::Scribble { off, data } => {
                let at = ram.base + u64::from(*off) % (size - 8);
                ram.bytes.borrow_mut()[(at - ram.base) as usize..][..8].copy_from_slice(data);
            }
        }
        assert_eq!(s.steal_ns(), stolen_total);
        if let Some(rec) = s.gpa() {
            assert_eq!(rec % SIZE, 0);
            assert!(rec >= ram.base && rec + SIZE <= ram.end());
        }
        for (gpa, len) in ram.writes.borrow_mut().drain(..) {
            let inside =
                |r: Option<u64>| r.is_some_and(|r| gpa >= r && gpa + len as u64 <= r + SIZE);
            assert!(
                inside(before) || inside(s.gpa()),
                "a write at {gpa:#x} ({len} bytes) outside the record"
            );
            assert!(gpa >= ram.base && gpa + len as u64 <= ram.end());
        }
    }
});
