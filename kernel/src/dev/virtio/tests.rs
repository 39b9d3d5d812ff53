//! Host tests across the devices: the per-exit work budget and its
//! continuation, resets back to power-on for every device kind on a bus,
//! and the virtio 1.x details (used lengths, interrupts on a ring error).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::block::{Backing, Block, T_GET_ID, T_IN, T_OUT};
use super::console::Console;
use super::mmio::tests::{bring_up, rd, wr, Env};
use super::mmio::{reg, Transport, INT_CONFIG, INT_USED};
use super::net::{Net, NetPort, Network, PortConfig, PortSink, QUEUE_FRAMES};
use super::queue::tests::{Driver, DATA, RAM};
use super::queue::{F_INDIRECT, F_NEXT, F_WRITE};
use super::*;
use crate::dev::vdev::bus::{Bus, MmioDevice};
use crate::dev::vdev::{MmioError, Width};

const HDR: u64 = RAM + 0x8000;
const STATUS: u64 = RAM + 0x8100;
const TABLE: u64 = RAM + 0x1a000;

fn disk(bytes: usize) -> Backing {
    let v: Vec<u8> = (0..bytes).map(|i| (i / 512) as u8 ^ (i as u8)).collect();
    Backing::Chunks(
        v.chunks(64 << 10)
            .map(|c| &mut *Box::leak(c.to_vec().into_boxed_slice()))
            .collect(),
    )
}

/// A block request whose data is `n` buffers of 4 KiB, all the same 4 KiB
/// of guest RAM, through one indirect table: header, data, status.
fn huge_request(env: &Env, d: &mut Driver, head: u16, kind: u32, n: u16) {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    env.ram.put(HDR, &h);
    let w = if kind == T_IN { F_WRITE } else { 0 };
    d.desc(&env.ram, TABLE, 0, HDR, 16, F_NEXT, 1);
    for i in 1..=n {
        d.desc(&env.ram, TABLE, i, DATA, 4096, w | F_NEXT, i + 1);
    }
    d.desc(&env.ram, TABLE, n + 1, STATUS, 1, F_WRITE, 0);
    d.desc(
        &env.ram,
        super::queue::tests::DESC + d.off,
        head,
        TABLE,
        u32::from(n + 2) * 16,
        F_INDIRECT,
        0,
    );
    d.offer(&env.ram, head);
}

/// Guest memory touched by `f` (one exit's work).
fn touched(env: &mut Env, f: impl FnOnce(&mut Env)) -> u64 {
    let before = env.ram.touched.get();
    f(env);
    env.ram.touched.get() - before
}

/// The bound every exit keeps: the budget, one step beyond it.
const EXIT_BOUND: u64 = BUDGET_BYTES + MAX_STEP;

#[test]
fn one_notify_copies_at_most_the_budget_and_the_rest_follows_in_order() {
    // A 1 MiB disk; two reads of 254 x 4 KiB into the same 4 KiB (~1 MiB
    // each), then a small read: 2 MiB + of copying named by one store.
    let t = Transport::new("virtio-blk", 3, Block::new(disk(2 << 20), "d"));
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut d = Driver::new(8);
    huge_request(&env, &mut d, 0, T_IN, 254);
    huge_request(&env, &mut d, 1, T_IN, 254);
    let n = touched(&mut env, |env| wr(&t, env, reg::QUEUE_NOTIFY, 0));
    assert!(n <= EXIT_BOUND, "one notify touched {n} bytes");
    assert!(n >= BUDGET_BYTES / 2, "and did real work: {n}");
    assert!(t.has_pending());
    assert_eq!(d.used(&env.ram).0, 0, "nothing complete yet");
    let mut exits = 1;
    while t.has_pending() {
        let n = touched(&mut env, |env| {
            t.resume(env, &mut Budget::exit());
        });
        assert!(n <= EXIT_BOUND, "exit {exits} touched {n} bytes");
        exits += 1;
        assert!(exits < 100);
    }
    // In order, with the full used lengths, and the interrupt raised.
    assert_eq!(
        d.used(&env.ram),
        (2, vec![(0, 254 * 4096 + 1), (1, 254 * 4096 + 1)])
    );
    assert!(exits >= 2 * 254 * 4096 / BUDGET_BYTES as usize);
    assert_eq!(rd(&t, &mut env, reg::INTERRUPT_STATUS), INT_USED);
    let st = t.with_device(|b| b.stats);
    assert_eq!((st.reads, st.read_bytes), (2, 2 * 254 * 4096));
}

#[test]
fn a_split_write_lands_whole_and_a_reset_drops_it() {
    let t = Transport::new("virtio-blk", 3, Block::new(disk(2 << 20), "d"));
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut d = Driver::new(8);
    env.ram.put(DATA, &[0x5a; 4096]);
    huge_request(&env, &mut d, 0, T_OUT, 100);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    while t.resume(&mut env, &mut Budget::exit()) {}
    assert_eq!(d.used(&env.ram), (1, vec![(0, 1)]));
    let bytes = t.with_device(|b| b.to_vec());
    assert!(bytes[..100 * 4096].iter().all(|&b| b == 0x5a));
    assert_ne!(bytes[100 * 4096], 0x5a);
    // A reset (Status = 0) with a request under way: dropped, nothing pending.
    huge_request(&env, &mut d, 1, T_IN, 200);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert!(t.has_pending());
    wr(&t, &mut env, reg::STATUS, 0);
    assert!(!t.has_pending());
    assert!(t.at_power_on());
}

#[test]
fn many_small_chains_are_bounded_by_count() {
    // The console transmit queue full of one-byte chains: at most
    // BUDGET_CHAINS per exit.
    let t = Transport::new("virtio-console", 1, Console::new());
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0, 1], 256);
    let mut d = Driver::at(256, 0x4000);
    env.ram.put(DATA, b"x");
    for i in 0..256u16 {
        d.desc(
            &env.ram,
            super::queue::tests::DESC + 0x4000,
            i,
            DATA,
            1,
            0,
            0,
        );
        d.offer(&env.ram, i);
    }
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 1);
    assert_eq!(d.used(&env.ram).0 as u32, BUDGET_CHAINS);
    while t.resume(&mut env, &mut Budget::exit()) {}
    assert_eq!(d.used(&env.ram).0, 256);
    assert_eq!(env.out.len(), 256);
}

#[test]
fn get_id_reports_the_bytes_it_wrote() {
    let t = Transport::new("virtio-blk", 3, Block::new(disk(4096), "kestrel-disk0"));
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut d = Driver::new(8);
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&T_GET_ID.to_le_bytes());
    env.ram.put(HDR, &h);
    // A 64-byte buffer: 20 bytes of ID and the status byte are written.
    d.chain(
        &env.ram,
        0,
        &[(HDR, 16, false), (DATA, 64, true), (STATUS, 1, true)],
    );
    d.offer(&env.ram, 0);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(d.used(&env.ram), (1, vec![(0, 21)]));
    assert_eq!(env.ram.get(STATUS, 1), [0]);
}

#[test]
fn a_ring_error_after_completed_chains_raises_both_interrupts() {
    let t = Transport::new("virtio-blk", 3, Block::new(disk(4096), "d"));
    let mut env = Env::new();
    bring_up(&t, &mut env, F_VERSION_1, &[0], 8);
    let mut d = Driver::new(8);
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&T_IN.to_le_bytes());
    env.ram.put(HDR, &h);
    d.chain(
        &env.ram,
        0,
        &[(HDR, 16, false), (DATA, 512, true), (STATUS, 1, true)],
    );
    d.offer(&env.ram, 0);
    // The second chain's head is out of the table.
    d.offer(&env.ram, 200);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(d.used(&env.ram).0, 1, "the first chain completed");
    assert_eq!(
        rd(&t, &mut env, reg::INTERRUPT_STATUS),
        INT_USED | INT_CONFIG
    );
    assert_ne!(
        rd(&t, &mut env, reg::STATUS) & status::DEVICE_NEEDS_RESET,
        0
    );
}

#[derive(Default)]
struct Sink;
impl PortSink for Sink {
    fn receive(&self, _: &[u8], _: usize, _: usize, _: usize) -> u64 {
        0
    }
}

/// A network port whose bus reset does not reach its transport (the
/// defect a restart used to have): for the check below.
struct NoReset(NetPort);
impl MmioDevice for NoReset {
    fn name(&self) -> &'static str {
        "virtio-net"
    }
    fn read(&self, env: &mut dyn DeviceEnv, off: u64, w: Width) -> Result<u64, MmioError> {
        self.0.read(env, off, w)
    }
    fn write(&self, env: &mut dyn DeviceEnv, off: u64, w: Width, v: u64) -> Result<(), MmioError> {
        self.0.write(env, off, w, v)
    }
    fn at_power_on(&self) -> bool {
        self.0.at_power_on()
    }
}

/// Every virtio device kind on one bus, each brought up and left with
/// state (queues live, work pending, frames held, interrupts raised).
fn dirty_bus(env: &mut Env, net_no_reset: bool) -> (Bus, Vec<Arc<dyn MmioDevice>>) {
    let console = Arc::new(Transport::new("virtio-console", 1, Console::new()));
    let blk = Arc::new(Transport::new(
        "virtio-blk",
        2,
        Block::new(disk(2 << 20), "d"),
    ));
    let network = Arc::new(Network::new());
    let mac = [2, 0, 0, 0, 0, 1];
    let port = network.add_port(PortConfig::new(mac));
    let peer = network.add_port(PortConfig::new([2, 0, 0, 0, 0, 2]));
    network.attach(peer, Arc::new(Sink));
    let net_t = Arc::new(Transport::new("virtio-net", 3, Net::new(mac)));
    let net = NetPort::new(net_t.clone(), network, port);
    let net: Arc<dyn MmioDevice> = if net_no_reset {
        Arc::new(NoReset(net))
    } else {
        Arc::new(net)
    };
    let devs: Vec<Arc<dyn MmioDevice>> = vec![console.clone(), blk.clone(), net.clone()];
    let mut bus = Bus::new();
    for (i, d) in devs.iter().enumerate() {
        bus.add(0x1000 * i as u64, 0x200, d.clone()).unwrap();
    }
    // Console: up, a transmit chain served (interrupt raised).
    bring_up(&*console, env, F_VERSION_1, &[0, 1], 8);
    let mut d = Driver::at(8, 0x4000);
    env.ram.put(DATA, b"hi");
    d.chain(&env.ram, 0, &[(DATA, 2, false)]);
    d.offer(&env.ram, 0);
    wr(&*console, env, reg::QUEUE_NOTIFY, 1);
    // Block: up, a huge read under way.
    bring_up(&*blk, env, F_VERSION_1, &[0], 8);
    let mut d = Driver::new(8);
    huge_request(env, &mut d, 0, T_IN, 254);
    wr(&*blk, env, reg::QUEUE_NOTIFY, 0);
    assert!(blk.has_pending());
    // Net: up, frames held for the guest (no receive buffers).
    bring_up(&*net_t, env, F_VERSION_1, &[0, 1], 8);
    net_t.with_live(env, |n, _, _, _| {
        n.receive(&[0u8; 60], peer, QUEUE_FRAMES);
        Ok(())
    });
    (bus, devs)
}

#[test]
fn a_bus_reset_returns_every_device_kind_to_power_on() {
    let mut env = Env::new();
    let (bus, devs) = dirty_bus(&mut env, false);
    assert_eq!(bus.not_at_power_on().count(), 3, "all dirty first");
    assert_eq!(bus.reset_all(), Ok(()));
    for d in &devs {
        assert!(d.at_power_on(), "{}", d.name());
        assert_eq!(d.read(&mut env, reg::STATUS, Width::Word), Ok(0));
        assert_eq!(d.read(&mut env, reg::INTERRUPT_STATUS, Width::Word), Ok(0));
        for q in 0..2 {
            d.write(&mut env, reg::QUEUE_SEL, Width::Word, q).unwrap();
            assert_eq!(d.read(&mut env, reg::QUEUE_READY, Width::Word), Ok(0));
            assert_eq!(d.read(&mut env, reg::QUEUE_DESC_LOW, Width::Word), Ok(0));
        }
    }
}

#[test]
fn a_device_the_reset_misses_fails_the_check() {
    let mut env = Env::new();
    let (bus, _) = dirty_bus(&mut env, true);
    assert_eq!(bus.reset_all(), Err("virtio-net"));
}
