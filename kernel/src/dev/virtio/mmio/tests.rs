//! Host tests of the virtio-mmio transport: a driver's bring-up sequence,
//! feature negotiation, queue setup rules, interrupts and broken rings.

use super::*;
use crate::dev::vdev::bus::GuestMemory;
use crate::dev::virtio::queue::tests::{Driver, TestRam, AVAIL, DATA, DESC, RAM, USED};
use alloc::vec::Vec;

/// Copies every readable byte of each chain, reversed, into its writable side.
pub(crate) struct Echo {
    pub resets: usize,
    pub accepted: u64,
}

impl VirtioDevice for Echo {
    fn device_id(&self) -> u32 {
        42
    }
    fn features(&self) -> u64 {
        1 << 3
    }
    fn set_features(&mut self, f: u64) {
        self.accepted = f;
    }
    fn queues(&self) -> usize {
        2
    }
    fn read_config(&self, offset: u64, out: &mut [u8]) {
        crate::dev::virtio::read_config_bytes(&[1, 2, 3, 4, 5, 6, 7, 8], offset, out);
    }
    fn notify(
        &mut self,
        index: usize,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        let q = &mut queues[index];
        loop {
            if !budget.chain() {
                return Ok(Progress::More);
            }
            let Some(c) = q.pop(env.memory())? else {
                return Ok(Progress::Done);
            };
            let mut data = vec![0u8; c.len(false) as usize];
            c.reader().read(env.memory(), &mut data)?;
            data.reverse();
            let n = c.writer().write(env.memory(), &data)?;
            budget.spend(c.cost() + 2 * n as u64);
            work.interrupt |= q.push_used(env.memory(), c.head, n as u32)?;
        }
    }
    fn reset(&mut self) {
        self.resets += 1;
    }
}

pub(crate) struct Env {
    pub ram: TestRam,
    pub irqs: Vec<(u32, bool)>,
    pub out: Vec<u8>,
    pub now: u64,
}

impl Env {
    pub fn new() -> Env {
        Env {
            ram: TestRam::new(RAM, 0x20000),
            irqs: Vec::new(),
            out: Vec::new(),
            now: 0,
        }
    }
}

impl DeviceEnv for Env {
    fn vcpu(&self) -> usize {
        0
    }
    fn wake(&mut self, _: usize) {}
    fn set_irq(&mut self, line: u32, level: bool) {
        self.irqs.push((line, level));
    }
    fn console_out(&mut self, byte: u8) {
        self.out.push(byte);
    }
    fn power_off(&mut self) {}
    fn reset(&mut self) {}
    fn memory(&self) -> &dyn GuestMemory {
        &self.ram
    }
    fn now_ns(&self) -> u64 {
        self.now
    }
}

pub(crate) fn rd<D: VirtioDevice>(t: &Transport<D>, env: &mut Env, off: u64) -> u32 {
    t.read(env, off, Width::Word).unwrap() as u32
}

pub(crate) fn wr<D: VirtioDevice>(t: &Transport<D>, env: &mut Env, off: u64, v: u32) {
    t.write(env, off, Width::Word, u64::from(v)).unwrap();
}

/// The driver's bring-up, as the spec orders it, for queues `qs` of size
/// `size` at the test ring addresses (queue q's rings offset by q * 0x4000).
pub(crate) fn bring_up<D: VirtioDevice>(
    t: &Transport<D>,
    env: &mut Env,
    features: u64,
    qs: &[u32],
    size: u16,
) {
    wr(t, env, reg::STATUS, 0);
    wr(t, env, reg::STATUS, status::ACKNOWLEDGE);
    wr(t, env, reg::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    wr(t, env, reg::DRIVER_FEATURES_SEL, 0);
    wr(t, env, reg::DRIVER_FEATURES, features as u32);
    wr(t, env, reg::DRIVER_FEATURES_SEL, 1);
    wr(t, env, reg::DRIVER_FEATURES, (features >> 32) as u32);
    let s = status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK;
    wr(t, env, reg::STATUS, s);
    assert_eq!(
        rd(t, env, reg::STATUS) & status::FEATURES_OK,
        status::FEATURES_OK
    );
    for &q in qs {
        let off = u64::from(q) * 0x4000;
        wr(t, env, reg::QUEUE_SEL, q);
        assert!(rd(t, env, reg::QUEUE_NUM_MAX) >= u32::from(size));
        wr(t, env, reg::QUEUE_NUM, u32::from(size));
        wr(t, env, reg::QUEUE_DESC_LOW, (DESC + off) as u32);
        wr(t, env, reg::QUEUE_DESC_HIGH, ((DESC + off) >> 32) as u32);
        wr(t, env, reg::QUEUE_DRIVER_LOW, (AVAIL + off) as u32);
        wr(t, env, reg::QUEUE_DRIVER_HIGH, 0);
        wr(t, env, reg::QUEUE_DEVICE_LOW, (USED + off) as u32);
        wr(t, env, reg::QUEUE_DEVICE_HIGH, 0);
        wr(t, env, reg::QUEUE_READY, 1);
        assert_eq!(rd(t, env, reg::QUEUE_READY), 1);
    }
    wr(t, env, reg::STATUS, s | status::DRIVER_OK);
}

fn echo() -> Transport<Echo> {
    Transport::new(
        "echo",
        5,
        Echo {
            resets: 0,
            accepted: 0,
        },
    )
}

#[test]
fn identity_registers() {
    let t = echo();
    let mut env = Env::new();
    assert_eq!(rd(&t, &mut env, reg::MAGIC), MAGIC);
    assert_eq!(rd(&t, &mut env, reg::VERSION), 2);
    assert_eq!(rd(&t, &mut env, reg::DEVICE_ID), 42);
    wr(&t, &mut env, reg::DEVICE_FEATURES_SEL, 0);
    assert_eq!(rd(&t, &mut env, reg::DEVICE_FEATURES), 1 << 3);
    wr(&t, &mut env, reg::DEVICE_FEATURES_SEL, 1);
    assert_eq!(rd(&t, &mut env, reg::DEVICE_FEATURES), 1, "VERSION_1");
    wr(&t, &mut env, reg::DEVICE_FEATURES_SEL, 7);
    assert_eq!(rd(&t, &mut env, reg::DEVICE_FEATURES), 0);
    assert_eq!(t.read(&mut env, reg::CONFIG + 2, Width::Half), Ok(0x0403));
    assert_eq!(
        t.read(&mut env, reg::CONFIG, Width::Dword),
        Ok(0x0807_0605_0403_0201)
    );
    assert_eq!(
        t.read(&mut env, reg::CONFIG + 6, Width::Dword),
        Err(MmioError::BadAccess)
    );
    assert_eq!(
        t.read(&mut env, 0x1fc, Width::Word),
        Ok(0),
        "config beyond its fields"
    );
}

#[test]
fn echo_through_a_queue_with_interrupt_and_ack() {
    let t = echo();
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1 | 1 << 3, &[0], 8);
    assert_eq!(t.with_device(|d| d.accepted), F_VERSION_1 | 1 << 3);
    let mut drv = Driver::new(8);
    env.ram.put(DATA, b"abc");
    drv.chain(&env.ram, 0, &[(DATA, 3, false), (DATA + 0x100, 3, true)]);
    drv.offer(&env.ram, 0);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(env.ram.get(DATA + 0x100, 3), b"cba");
    assert_eq!(drv.used(&env.ram), (1, vec![(0, 3)]));
    assert_eq!(rd(&t, &mut env, reg::INTERRUPT_STATUS), INT_USED);
    assert_eq!(env.irqs, [(5, true)]);
    wr(&t, &mut env, reg::INTERRUPT_ACK, INT_USED);
    assert_eq!(env.irqs, [(5, true), (5, false)]);
    assert_eq!(rd(&t, &mut env, reg::INTERRUPT_STATUS), 0);
}

#[test]
fn features_not_offered_or_without_version_1_are_refused() {
    for bad in [1u64 << 3, F_VERSION_1 | 1 << 4, F_VERSION_1 | 1 << 40] {
        let t = echo();
        let mut env = Env::new();
        wr(
            &t,
            &mut env,
            reg::STATUS,
            status::ACKNOWLEDGE | status::DRIVER,
        );
        wr(&t, &mut env, reg::DRIVER_FEATURES_SEL, 0);
        wr(&t, &mut env, reg::DRIVER_FEATURES, bad as u32);
        wr(&t, &mut env, reg::DRIVER_FEATURES_SEL, 1);
        wr(&t, &mut env, reg::DRIVER_FEATURES, (bad >> 32) as u32);
        wr(
            &t,
            &mut env,
            reg::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
        );
        assert_eq!(
            rd(&t, &mut env, reg::STATUS) & status::FEATURES_OK,
            0,
            "{bad:#x}"
        );
    }
}

#[test]
fn notify_before_driver_ok_or_of_a_bad_queue_does_nothing() {
    let t = echo();
    let mut env = Env::new();
    let mut drv = Driver::new(8);
    drv.chain(&env.ram, 0, &[(DATA, 3, false), (DATA + 0x100, 3, true)]);
    drv.offer(&env.ram, 0);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    for q in [1, 2, 99, u32::MAX] {
        wr(&t, &mut env, reg::QUEUE_NOTIFY, q);
    }
    assert_eq!(drv.used(&env.ram).0, 0);
    assert!(env.irqs.is_empty());
}

#[test]
fn queue_setup_rules() {
    let t = echo();
    let mut env = Env::new();
    wr(&t, &mut env, reg::QUEUE_SEL, 0);
    wr(&t, &mut env, reg::QUEUE_NUM, 3);
    wr(&t, &mut env, reg::QUEUE_DESC_LOW, DESC as u32);
    wr(&t, &mut env, reg::QUEUE_DRIVER_LOW, AVAIL as u32);
    wr(&t, &mut env, reg::QUEUE_DEVICE_LOW, USED as u32);
    wr(&t, &mut env, reg::QUEUE_READY, 1);
    assert_eq!(
        rd(&t, &mut env, reg::QUEUE_READY),
        0,
        "size 3 is not a power of two"
    );
    wr(&t, &mut env, reg::QUEUE_NUM, 4);
    wr(&t, &mut env, reg::QUEUE_READY, 1);
    assert_eq!(rd(&t, &mut env, reg::QUEUE_READY), 1);
    // A live queue's configuration cannot change under the device.
    wr(&t, &mut env, reg::QUEUE_NUM, 8);
    wr(&t, &mut env, reg::QUEUE_DESC_LOW, 0);
    assert_eq!(rd(&t, &mut env, reg::QUEUE_NUM), 4);
    assert_eq!(rd(&t, &mut env, reg::QUEUE_DESC_LOW), DESC as u32);
    // Rings outside RAM, wholly or in part, cannot go live either.
    wr(&t, &mut env, reg::QUEUE_SEL, 1);
    wr(&t, &mut env, reg::QUEUE_NUM, 4);
    let end = RAM + env.ram.bytes.borrow().len() as u64;
    for (desc, avail, used) in [
        (end, AVAIL, USED),
        (DESC, end, USED),
        (DESC, AVAIL, end - 16),
        (DESC, AVAIL, 0x1000),
        (DESC | 1 << 40, AVAIL, USED),
    ] {
        wr(&t, &mut env, reg::QUEUE_DESC_LOW, desc as u32);
        wr(&t, &mut env, reg::QUEUE_DESC_HIGH, (desc >> 32) as u32);
        wr(&t, &mut env, reg::QUEUE_DRIVER_LOW, avail as u32);
        wr(&t, &mut env, reg::QUEUE_DEVICE_LOW, used as u32);
        wr(&t, &mut env, reg::QUEUE_READY, 1);
        assert_eq!(
            rd(&t, &mut env, reg::QUEUE_READY),
            0,
            "rings {desc:#x} {avail:#x} {used:#x}"
        );
    }
    // Queues that do not exist read as absent and ignore writes.
    wr(&t, &mut env, reg::QUEUE_SEL, 9);
    assert_eq!(rd(&t, &mut env, reg::QUEUE_NUM_MAX), 0);
    wr(&t, &mut env, reg::QUEUE_READY, 1);
    assert_eq!(rd(&t, &mut env, reg::QUEUE_READY), 0);
}

#[test]
fn the_driver_cannot_set_needs_reset() {
    let t = echo();
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0], 4);
    let s = rd(&t, &mut env, reg::STATUS);
    wr(&t, &mut env, reg::STATUS, s | status::DEVICE_NEEDS_RESET);
    assert_eq!(rd(&t, &mut env, reg::STATUS), s);
    assert!(t.live());
    assert_eq!(t.broken(), None);
}

#[test]
fn non_word_register_accesses_are_refused() {
    let t = echo();
    let mut env = Env::new();
    for (off, w) in [
        (reg::MAGIC, Width::Byte),
        (reg::STATUS, Width::Dword),
        (reg::STATUS + 2, Width::Word),
    ] {
        assert_eq!(t.read(&mut env, off, w), Err(MmioError::BadAccess));
        assert_eq!(t.write(&mut env, off, w, 0), Err(MmioError::BadAccess));
    }
}

#[test]
fn a_broken_ring_needs_reset_and_reset_recovers() {
    let t = echo();
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut drv = Driver::new(8);
    // A descriptor that loops on itself.
    drv.desc(&env.ram, DESC, 0, DATA, 4, 1, 0);
    drv.offer(&env.ram, 0);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_ne!(
        rd(&t, &mut env, reg::STATUS) & status::DEVICE_NEEDS_RESET,
        0
    );
    assert_eq!(rd(&t, &mut env, reg::INTERRUPT_STATUS), INT_CONFIG);
    assert!(t.broken().is_some());
    // No more work until reset, whatever the driver does.
    drv.chain(&env.ram, 0, &[(DATA, 3, false), (DATA + 0x100, 3, true)]);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(drv.used(&env.ram).0, 0);
    wr(&t, &mut env, reg::STATUS, 0);
    assert_eq!(rd(&t, &mut env, reg::STATUS), 0);
    assert_eq!(rd(&t, &mut env, reg::INTERRUPT_STATUS), 0);
    assert_eq!(env.irqs.last(), Some(&(5, false)));
    assert_eq!(t.with_device(|d| d.resets), 2);
    // Back up with fresh rings: it works again.
    let ram = &env.ram;
    ram.put(AVAIL, &[0; 4]);
    ram.put(USED, &[0; 4]);
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut drv = Driver::new(8);
    env.ram.put(DATA, b"xyz");
    drv.chain(&env.ram, 0, &[(DATA, 3, false), (DATA + 0x100, 3, true)]);
    drv.offer(&env.ram, 0);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(env.ram.get(DATA + 0x100, 3), b"zyx");
}

#[test]
fn garbage_register_traffic_never_panics() {
    let t = echo();
    let mut env = Env::new();
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x >> 8) % REGION_SIZE;
        let w = Width::from_sas(x >> 4);
        if x & 1 == 0 {
            let _ = t.read(&mut env, off, w);
        } else {
            let _ = t.write(&mut env, off & !3, Width::Word, x >> 20);
        }
    }
}

#[test]
fn held_work_is_marked_pending_and_done_by_resume_not_by_the_holder() {
    let t = echo();
    let mut env = Env::new();
    assert_eq!(t.hold(0, |_| true), None, "not live: nothing runs");
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut drv = Driver::new(8);
    env.ram.put(DATA, b"xyz");
    drv.chain(&env.ram, 0, &[(DATA, 3, false), (DATA + 0x100, 3, true)]);
    drv.offer(&env.ram, 0);
    let touched = env.ram.touched.get();
    assert_eq!(t.hold(0, |_| false), Some((false, false)), "nothing taken");
    assert!(!t.has_pending());
    assert_eq!(t.hold(0, |_| true), Some((true, false)));
    assert!(t.has_pending());
    assert_eq!(t.hold(0, |_| true), Some((true, true)), "already pending");
    assert_eq!(t.hold(7, |_| true), None, "no such queue");
    assert_eq!(
        env.ram.touched.get(),
        touched,
        "holding walks no ring: the device's owner does, later"
    );
    assert!(!t.resume(&mut env, &mut Budget::exit()));
    assert_eq!(env.ram.get(DATA + 0x100, 3), b"zyx");
    assert_eq!(drv.used(&env.ram), (1, vec![(0, 3)]));
}
