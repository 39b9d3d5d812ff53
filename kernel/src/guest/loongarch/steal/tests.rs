use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::dev::vdev::bus::MemError;
use crate::dev::vdev::testenv::Ram;

const BASE: u64 = 0x1000_0000;
const LEN: usize = 16 * 1024;
const REC: u64 = BASE + 0x1040;
const ST: u64 = la::KVM_FEATURE_STEAL_TIME as u64;

/// RAM filled with 0xAA (garbage the guest left) that logs every write.
struct Logged {
    ram: Ram,
    writes: crate::base::lock::Mutex<Vec<(u64, Vec<u8>)>>,
}

impl Logged {
    fn new() -> Logged {
        Logged {
            ram: Ram {
                base: BASE,
                bytes: crate::base::lock::Mutex::new(vec![0xAA; LEN]),
            },
            writes: crate::base::lock::Mutex::new(Vec::new()),
        }
    }
    fn bytes(&self, gpa: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.ram.read(gpa, &mut b).unwrap();
        b
    }
    fn u64_at(&self, gpa: u64) -> u64 {
        u64::from_le_bytes(self.bytes(gpa, 8).try_into().unwrap())
    }
    fn u32_at(&self, gpa: u64) -> u32 {
        u32::from_le_bytes(self.bytes(gpa, 4).try_into().unwrap())
    }
    fn preempted(&self, rec: u64) -> u8 {
        self.bytes(rec + PREEMPTED, 1)[0]
    }
    fn take_writes(&self) -> Vec<(u64, Vec<u8>)> {
        core::mem::take(&mut *self.writes.lock())
    }
}

impl GuestMemory for Logged {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.ram.read(gpa, buf)
    }
    fn write(&self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        self.ram.write(gpa, data)?;
        self.writes.lock().push((gpa, data.to_vec()));
        Ok(())
    }
}

#[test]
fn notify_registers_the_record_and_writes_it_not_preempted() {
    let m = Logged::new();
    let mut s = StealTime::new();
    assert_eq!(s.notify(&m, ST, REC | 1), ret::SUCCESS);
    assert_eq!(s.gpa(), Some(REC));
    assert_eq!(m.u64_at(REC + STEAL), 0);
    // 0xAAAA_AAAA is even: + 2 once the update is done.
    assert_eq!(m.u32_at(REC + VERSION), 0xAAAA_AAAC);
    assert_eq!(m.preempted(REC), 0);
    // flags and padding are the guest's.
    assert_eq!(m.u32_at(REC + 12), 0xAAAA_AAAA);
    assert!(m.bytes(REC + 17, 47).iter().all(|&b| b == 0xAA));
    // Nothing outside the record.
    assert!(m
        .bytes(BASE, (REC - BASE) as usize)
        .iter()
        .all(|&b| b == 0xAA));
    assert!(m.bytes(REC + SIZE, 64).iter().all(|&b| b == 0xAA));
}

#[test]
fn notify_ignores_the_low_bits_of_the_address() {
    let m = Logged::new();
    let mut s = StealTime::new();
    assert_eq!(s.notify(&m, ST, REC | 0x3f), ret::SUCCESS);
    assert_eq!(s.gpa(), Some(REC));
}

#[test]
fn notify_refuses_other_features_and_records_that_are_not_ram() {
    let m = Logged::new();
    let end = BASE + LEN as u64;
    let mut s = StealTime::new();
    for (feature, arg) in [
        (0, REC | 1),
        (u64::from(la::KVM_FEATURE_PREEMPT), REC | 1),
        (ST | u64::from(la::KVM_FEATURE_PREEMPT), REC | 1),
        (u64::MAX, REC | 1),
        // Below RAM, past its end, a device's registers, the top of
        // the address space (no overflow), guest physical 0.
        (ST, (BASE - SIZE) | 1),
        (ST, end | 1),
        (ST, 0x1fe0_01c0 | 1),
        (ST, u64::MAX),
        (ST, 1),
    ] {
        assert_eq!(
            s.notify(&m, feature, arg),
            ret::INVALID_PARAMETER,
            "{feature:#x} {arg:#x}"
        );
        assert_eq!(s.gpa(), None);
    }
    assert!(m.take_writes().is_empty());
    // The last 64 bytes of RAM are a record; an address inside them
    // names them (the low bits are dropped), so a record never straddles
    // the end of RAM.
    assert_eq!(s.notify(&m, ST, (end - 32) | 1), ret::SUCCESS);
    assert_eq!(s.gpa(), Some(end - SIZE));
}

#[test]
fn a_refused_notify_keeps_the_record_registered_before() {
    let m = Logged::new();
    let mut s = StealTime::new();
    assert_eq!(s.notify(&m, ST, REC | 1), ret::SUCCESS);
    assert_eq!(s.notify(&m, ST, 0x1fe0_01c0 | 1), ret::INVALID_PARAMETER);
    assert_eq!(s.gpa(), Some(REC));
}

#[test]
fn put_while_runnable_sets_preempted_and_load_clears_it() {
    let m = Logged::new();
    let mut s = StealTime::new();
    s.notify(&m, ST, REC | 1);
    let v0 = m.u32_at(REC + VERSION);
    s.put(&m, true);
    assert!(s.preempted());
    assert_eq!(m.preempted(REC), la::KVM_VCPU_PREEMPTED);
    // Setting the byte alone does not touch the seqcount (KVM's neither).
    assert_eq!(m.u32_at(REC + VERSION), v0);
    s.load(&m, Some(1234));
    assert!(!s.preempted());
    assert_eq!(m.preempted(REC), 0);
    assert_eq!(m.u64_at(REC + STEAL), 1234);
    assert_eq!(m.u32_at(REC + VERSION), v0 + 2);
    s.put(&m, true);
    s.load(&m, Some(766));
    assert_eq!(m.u64_at(REC + STEAL), 2000);
    assert_eq!(m.u32_at(REC + VERSION), v0 + 4);
    assert_eq!(m.preempted(REC), 0);
}

#[test]
fn put_while_idle_does_not_set_preempted() {
    let m = Logged::new();
    let mut s = StealTime::new();
    s.notify(&m, ST, REC | 1);
    m.take_writes();
    s.put(&m, false);
    assert!(!s.preempted());
    assert_eq!(m.preempted(REC), 0);
    // Loaded again after waiting: no steal, nothing to write.
    s.load(&m, None);
    assert!(m.take_writes().is_empty());
    assert_eq!(s.steal_ns(), 0);
}

#[test]
fn the_update_is_version_odd_then_fields_then_version_even() {
    let m = Logged::new();
    let mut s = StealTime::new();
    s.notify(&m, ST, REC | 1);
    s.put(&m, true);
    m.take_writes();
    s.load(&m, Some(5));
    let w = m.take_writes();
    let at: Vec<u64> = w.iter().map(|(g, _)| *g).collect();
    assert_eq!(
        at,
        [REC + VERSION, REC + STEAL, REC + PREEMPTED, REC + VERSION]
    );
    let odd = u32::from_le_bytes(w[0].1.clone().try_into().unwrap());
    let even = u32::from_le_bytes(w[3].1.clone().try_into().unwrap());
    assert_eq!(odd % 2, 1);
    assert_eq!(even, odd + 1);
}

#[test]
fn an_odd_version_left_by_the_guest_ends_even_and_larger() {
    let m = Logged::new();
    m.ram.write(REC + VERSION, &5u32.to_le_bytes()).unwrap();
    let mut s = StealTime::new();
    s.notify(&m, ST, REC | 1);
    assert_eq!(m.u32_at(REC + VERSION), 8);
    m.ram.write(REC + VERSION, &u32::MAX.to_le_bytes()).unwrap();
    s.put(&m, true);
    s.load(&m, Some(1));
    assert_eq!(m.u32_at(REC + VERSION) % 2, 0);
}

#[test]
fn stopped_or_reset_records_are_not_written() {
    let m = Logged::new();
    let mut s = StealTime::new();
    s.notify(&m, ST, REC | 1);
    assert_eq!(s.notify(&m, ST, 0), ret::SUCCESS);
    assert_eq!(s.gpa(), None);
    m.take_writes();
    s.put(&m, true);
    s.load(&m, Some(10));
    assert!(m.take_writes().is_empty());
    // Time stolen meanwhile is published at the next registration.
    s.notify(&m, ST, REC | 1);
    assert_eq!(m.u64_at(REC + STEAL), 10);
    s.reset();
    m.take_writes();
    s.put(&m, true);
    s.load(&m, Some(1));
    assert!(m.take_writes().is_empty());
    assert!(!s.preempted());
}

#[test]
fn re_registering_clears_preempted() {
    let m = Logged::new();
    let mut s = StealTime::new();
    s.notify(&m, ST, REC | 1);
    s.put(&m, true);
    assert_eq!(m.preempted(REC), 1);
    let other = REC + 0x400;
    s.notify(&m, ST, other | 1);
    assert!(!s.preempted());
    assert_eq!(m.preempted(other), 0);
}

/// Random NOTIFYs, puts and loads: nothing panics, and every write lands
/// in the record registered at the time, within RAM.
#[test]
fn random_operations_write_only_the_registered_record() {
    let m = Logged::new();
    let mut s = StealTime::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let end = BASE + LEN as u64;
    for _ in 0..20_000 {
        let r = next();
        let before = s.gpa();
        match r % 4 {
            0 => {
                let arg = match next() % 4 {
                    0 => (BASE + next() % (LEN as u64)) | 1,
                    1 => end.wrapping_add(next() % 256).wrapping_sub(128) | (next() & 1),
                    2 => next(),
                    _ => 0,
                };
                let feature = if next() % 8 == 0 { next() } else { ST };
                let r = s.notify(&m, feature, arg);
                assert!(r == ret::SUCCESS || r == ret::INVALID_PARAMETER);
                if r == ret::INVALID_PARAMETER {
                    assert_eq!(s.gpa(), before);
                }
            }
            1 => s.put(&m, next() % 2 == 0),
            2 => s.load(&m, Some(next() % 1_000_000)),
            _ => s.load(&m, None),
        }
        let now = s.gpa();
        for (gpa, data) in m.take_writes() {
            let rec = now.or(before).expect("a write without a record");
            assert!(gpa >= rec && gpa + data.len() as u64 <= rec + SIZE);
            assert!(rec >= BASE && rec + SIZE <= end && rec.is_multiple_of(SIZE));
        }
    }
}

#[test]
fn ticks_become_nanoseconds() {
    assert_eq!(ticks_to_ns(100, 100_000_000), 1000);
    assert_eq!(ticks_to_ns(3, 1_000_000_000), 3);
    assert_eq!(ticks_to_ns(7, 0), 7);
    assert_eq!(ticks_to_ns(u64::MAX, 1), u64::MAX);
    assert_eq!(ticks_to_ns(u64::MAX, 100_000_000), u64::MAX);
    assert_eq!(ticks_to_ns(u64::MAX / 10, 100_000_000), u64::MAX / 10 * 10);
}
