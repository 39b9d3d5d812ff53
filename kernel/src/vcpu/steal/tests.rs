use super::*;
use crate::vcpu::sched::{CpuMask, PutReason, Scheduler, VcpuKey};

fn key(vcpu: u16) -> VcpuKey {
    VcpuKey { vm: 0, vcpu }
}

#[test]
fn run_delay_counts_from_queueing_to_pick() {
    let mut d = RunDelay::new();
    assert_eq!(d.picked(100), 0, "never queued with a time: nothing");
    d.queued(Some(100));
    assert_eq!(d.picked(130), 30);
    // Picked again without a queueing in between: nothing more.
    assert_eq!(d.picked(500), 30);
    d.queued(None);
    assert_eq!(
        d.picked(900),
        30,
        "a queueing of unknown time counts nothing"
    );
    // A counter that went backwards adds nothing.
    d.queued(Some(1000));
    assert_eq!(d.picked(999), 30);
    assert_eq!(d.total(), 30);
}

/// The scheduler accounts every wait of a runnable vCPU: after a
/// preemption, a yield, a wake from a block, and nothing while it ran,
/// blocked or was off.
#[test]
fn the_scheduler_accounts_waits_in_run_queues() {
    let s = Scheduler::new(CpuMask::first(1));
    let (a, b) = (key(0), key(1));
    s.add(a, CpuMask::first(1), true).unwrap();
    s.add(b, CpuMask::first(1), false).unwrap();
    let p = s.pick_run(0, 10).unwrap();
    assert_eq!((p.key, p.run_delay), (a, 0), "creation is no wait");
    s.power_on(b, 0).unwrap();
    // a runs 10..50 and is preempted; b runs 50..80.
    s.put(0, a, PutReason::Preempted, 50).unwrap();
    let p = s.pick_run(0, 50).unwrap();
    assert_eq!((p.key, p.run_delay), (b, 0), "a power-on is no wait");
    s.put(0, b, PutReason::Yield, 80).unwrap();
    let p = s.pick_run(0, 80).unwrap();
    assert_eq!((p.key, p.run_delay), (a, 30), "a waited 50..80");
    // a blocks at 100 (no wait while blocked), woken at 150.
    s.put(0, a, PutReason::Blocked, 100).unwrap();
    let p = s.pick_run(0, 100).unwrap();
    assert_eq!((p.key, p.run_delay), (b, 20), "b waited 80..100");
    s.wake(a, 0, 150).unwrap();
    s.put(0, b, PutReason::Blocked, 170).unwrap();
    let p = s.pick_run(0, 170).unwrap();
    assert_eq!(
        (p.key, p.run_delay),
        (a, 50),
        "30 + woken at 150, run at 170"
    );
    // A wake while it runs changes nothing.
    s.wake(a, 0, 180).unwrap();
    s.put(0, a, PutReason::Preempted, 200).unwrap();
    let p = s.pick_run(0, 260).unwrap();
    assert_eq!(
        (p.key, p.run_delay),
        (a, 110),
        "alone, but picked only at 260"
    );
}

#[test]
fn a_put_blocked_with_a_wake_pending_waits_from_the_put() {
    let s = Scheduler::new(CpuMask::first(2));
    let a = key(0);
    s.add(a, CpuMask::first(2), true).unwrap();
    s.pick_run(0, 0).unwrap();
    s.wake(a, 1, 5).unwrap();
    s.put(0, a, PutReason::Blocked, 10).unwrap();
    assert_eq!(s.pick_run(1, 25).unwrap().run_delay, 15);
}

#[test]
fn the_guest_counts_from_its_registration() {
    let v = VcpuSteal::new();
    v.set_delay(1000);
    assert_eq!(v.stolen(), None);
    assert_eq!(v.take_update(), None, "nothing to write before it asks");
    v.register();
    assert!(v.registered());
    assert_eq!(v.take_update(), Some(0), "the first write after it asked");
    assert_eq!(v.take_update(), None, "unchanged: no write");
    v.set_delay(1250);
    assert_eq!(v.take_update(), Some(250));
    // A second call (CPU online again) keeps counting where it was.
    v.register();
    v.set_delay(1300);
    assert_eq!(v.take_update(), Some(300));
    v.write_failed();
    assert_eq!(v.take_update(), Some(300), "tried again after a failure");
    v.reset();
    assert_eq!(v.stolen(), None);
    v.register();
    assert_eq!(v.stolen(), Some(0), "a restarted guest starts from 0");
}

#[test]
fn ticks_become_nanoseconds_without_overflow() {
    assert_eq!(ticks_to_ns(62_500_000, 62_500_000), 1_000_000_000);
    assert_eq!(ticks_to_ns(1, 1_000_000_000), 1);
    assert_eq!(ticks_to_ns(3, 24_000_000), 125);
    assert_eq!(ticks_to_ns(u64::MAX, 1_000_000_000), u64::MAX);
    assert_eq!(ticks_to_ns(u64::MAX, 1), u64::MAX, "saturates");
    assert_eq!(ticks_to_ns(5, 0), 0, "no frequency known");
}

#[test]
fn records_sit_in_the_last_64k_of_ram() {
    let r = PvTimeRegion::at_top_of(0x4000_0000, 256 << 20, 4).unwrap();
    assert_eq!(r.base, 0x4000_0000 + (256 << 20) - 0x1_0000);
    assert_eq!(r.range(), (r.base, 0x1_0000));
    assert_eq!(r.record(0), Some(r.base));
    assert_eq!(r.record(3), Some(r.base + 192));
    assert_eq!(r.record(4), None);
    assert_eq!(r.record(usize::MAX), None);
    assert_eq!(
        PvTimeRegion::at_top_of(0x4000_0000, 256 << 20, 1024)
            .unwrap()
            .record(1023),
        Some(r.base + 1023 * 64)
    );
    assert_eq!(PvTimeRegion::at_top_of(0x4000_0000, 256 << 20, 1025), None);
    assert_eq!(PvTimeRegion::at_top_of(0x4000_0000, 256 << 20, 0), None);
    assert_eq!(PvTimeRegion::at_top_of(0x4000_0000, 1 << 20, 1), None);
    assert_eq!(
        PvTimeRegion::at_top_of(0x4000_0000, (2 << 20) + 4096, 1),
        None
    );
    assert_eq!(
        PvTimeRegion::at_top_of(u64::MAX - (4 << 20), 8 << 20, 1),
        None
    );
}

#[test]
fn a_record_is_revision_0_attributes_0_and_the_time_little_endian() {
    let b = record_bytes(0x0102_0304_0506_0708);
    assert_eq!(b[..8], [0; 8]);
    assert_eq!(b[8..], [8, 7, 6, 5, 4, 3, 2, 1]);
}

#[test]
fn pv_time_calls_have_a_defined_answer() {
    let r = PvTimeRegion::at_top_of(0x4000_0000, 64 << 20, 2).unwrap();
    let st = u64::from(fid::PV_TIME_ST);
    let features = u64::from(fid::PV_TIME_FEATURES);
    // Features: both calls exist, nothing else does; x1's upper half ignored.
    assert_eq!(call(features, st, Some(&r), 0), (0, PvTimeEffect::None));
    assert_eq!(
        call(features, features, Some(&r), 0),
        (0, PvTimeEffect::None)
    );
    assert_eq!(call(features, 0xFFFF_FFFF_0000_0000 | st, Some(&r), 0).0, 0);
    for q in [0, 0xC500_0022, 0x8500_0021, 0xC600_0001, u64::MAX] {
        assert_eq!(
            call(features, q, Some(&r), 0),
            (-1, PvTimeEffect::None),
            "{q:#x}"
        );
    }
    // ST: the caller's record, whatever is in x1.
    assert_eq!(
        call(st, 0, Some(&r), 0),
        (r.base as i64, PvTimeEffect::Register)
    );
    assert_eq!(
        call(st, u64::MAX, Some(&r), 1),
        ((r.base + 64) as i64, PvTimeEffect::Register)
    );
    assert_eq!(
        call(st, 0, Some(&r), 2),
        (-1, PvTimeEffect::None),
        "no such vCPU"
    );
    // Not offered: nothing exists.
    assert_eq!(call(features, st, None, 0), (-1, PvTimeEffect::None));
    assert_eq!(call(st, 0, None, 0), (-1, PvTimeEffect::None));
    // SMC32 spellings, other ids in the range, garbage upper halves.
    for f in [
        0x8500_0020u64,
        0x8500_0021,
        0xC500_0000,
        0xC500_0022,
        0xC500_FF00,
        0x1_C500_0021,
    ] {
        assert_eq!(call(f, st, Some(&r), 0), (-1, PvTimeEffect::None), "{f:#x}");
    }
}

#[test]
fn the_standard_hypervisor_range_is_recognised() {
    assert!(is_standard_hyp(0xC500_0020));
    assert!(is_standard_hyp(0x8500_0021));
    assert!(is_standard_hyp(0xC500_FFFF));
    assert!(!is_standard_hyp(0xC600_0001));
    assert!(!is_standard_hyp(0x8400_0000));
    assert!(!is_standard_hyp(0x1_C500_0020));
    assert!(!is_standard_hyp(0x0500_0020), "not a fast call");
}
