use super::*;
use crate::dev::virtio::mmio::reg;
use crate::dev::virtio::mmio::tests::{bring_up, rd, wr, Env};
use crate::dev::virtio::queue::tests::{Driver, DATA};
use crate::dev::virtio::F_VERSION_1;

const A: Mac = [0x02, 0, 0, 0, 0, 0xa];
const B: Mac = [0x02, 0, 0, 0, 0, 0xb];
const C: Mac = [0x02, 0, 0, 0, 0, 0xc];
const BCAST: Mac = [0xff; 6];

fn frame(dst: Mac, src: Mac, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(payload);
    f
}

fn cfg(mac: Mac) -> PortConfig {
    PortConfig::new(mac)
}

/// A switch with ports owning A, B and C (ports 0, 1, 2).
fn abc() -> Switch {
    let mut s = Switch::default();
    for m in [A, B, C] {
        s.add_port(cfg(m));
    }
    s
}

#[test]
fn unicast_goes_only_to_the_owner() {
    let mut s = abc();
    assert_eq!(s.route(0, &frame(B, A, b""), 0), Route::To(1));
    assert_eq!(s.route(1, &frame(C, B, b""), 0), Route::To(2));
    // Unknown destination: dropped, not flooded.
    let d: Mac = [0x02, 9, 9, 9, 9, 9];
    assert_eq!(s.route(0, &frame(d, A, b""), 0), Route::Drop);
    // To itself and runts: dropped.
    assert_eq!(s.route(0, &frame(A, A, b""), 0), Route::Drop);
    assert_eq!(s.route(0, &[0; 13], 0), Route::Drop);
    assert_eq!(s.stats(0).unknown, 3);
    assert_eq!(s.route(2, &frame(BCAST, C, b""), 0), Route::Flood);
}

#[test]
fn a_forged_source_is_dropped_and_counted() {
    let mut s = abc();
    // Port 2 claims to be B: dropped, counted, and B's traffic still goes to B.
    for _ in 0..5 {
        assert_eq!(s.route(2, &frame(A, B, b""), 0), Route::Drop);
        assert_eq!(s.route(2, &frame(BCAST, B, b""), 0), Route::Drop);
    }
    assert_eq!(s.stats(2).spoofed, 10);
    assert_eq!(s.route(0, &frame(B, A, b""), 0), Route::To(1));
    assert_eq!(s.learnt(2), 0);
}

#[test]
fn spoofing_without_learning_learns_nothing() {
    let mut s = Switch::default();
    s.add_port(cfg(A));
    s.add_port(cfg(B));
    s.add_port(PortConfig {
        allow_mac_spoofing: true,
        ..cfg(C)
    });
    let x: Mac = [0x02, 7, 7, 7, 7, 7];
    // Forwarded with any source, but nothing learnt: neither a configured
    // MAC (B) nor another one (x) reaches port 2.
    assert_eq!(s.route(2, &frame(A, B, b""), 0), Route::To(0));
    assert_eq!(s.route(2, &frame(A, x, b""), 0), Route::To(0));
    assert_eq!(s.route(0, &frame(B, A, b""), 0), Route::To(1));
    assert_eq!(s.route(0, &frame(x, A, b""), 0), Route::Drop);
    assert_eq!(s.stats(2).spoofed, 0);
}

#[test]
fn learning_is_opt_in_within_a_quota_and_never_steals_a_configured_mac() {
    let mut s = Switch::default();
    s.add_port(cfg(A));
    s.add_port(cfg(B));
    s.add_port(PortConfig {
        allow_mac_spoofing: true,
        learn: 4,
        ..cfg(C)
    });
    let m = |i: u8| -> Mac { [0x02, 0, 0, 0, 1, i] };
    // A configured MAC is not learnt.
    s.route(2, &frame(A, B, b""), 0);
    assert_eq!(s.route(0, &frame(B, A, b""), 0), Route::To(1));
    // Others are, at most 4 (the oldest goes).
    for i in 0..10 {
        s.route(2, &frame(A, m(i), b""), 0);
    }
    assert_eq!(s.learnt(2), 4);
    assert_eq!(s.route(0, &frame(m(9), A, b""), 0), Route::To(2));
    assert_eq!(s.route(0, &frame(m(6), A, b""), 0), Route::To(2));
    assert_eq!(s.route(0, &frame(m(5), A, b""), 0), Route::Drop);
    // Multicast sources are not learnt.
    s.route(2, &frame(A, [0x03, 0, 0, 0, 0, 1], b""), 0);
    assert_eq!(s.learnt(2), 4);
}

#[test]
fn broadcast_is_rate_limited_per_port() {
    let mut s = Switch::default();
    s.add_port(PortConfig {
        broadcast_rate: 100,
        ..cfg(A)
    });
    s.add_port(cfg(B));
    let ms = 1_000_000;
    // A burst of a tenth of a second's budget, then nothing...
    let sent = (0..50)
        .filter(|_| s.route(0, &frame(BCAST, A, b""), 0) == Route::Flood)
        .count();
    assert_eq!(sent, 10);
    assert_eq!(s.stats(0).rate_limited, 40);
    // ... until time refills it: 100 a second.
    let mut t = 0;
    let mut more = 0;
    for _ in 0..1000 {
        t += ms;
        if s.route(0, &frame([0x01, 0, 0x5e, 0, 0, 1], A, b""), t) == Route::Flood {
            more += 1;
        }
    }
    assert!((99..=101).contains(&more), "{more} in one second");
    // The other port's budget is its own (the default).
    let b = (0..200)
        .filter(|_| s.route(1, &frame(BCAST, B, b""), t) == Route::Flood)
        .count();
    assert_eq!(b, (DEFAULT_BROADCAST_RATE / 10) as usize);
}

#[derive(Default)]
struct Rec(Mutex<Vec<(usize, Vec<u8>)>>);
impl PortSink for Rec {
    fn receive(&self, f: &[u8], from: usize, _: usize, _: usize) -> u64 {
        self.0.lock().push((from, f.to_vec()));
        f.len() as u64
    }
}

#[test]
fn network_forwards_by_owner_and_floods_broadcast() {
    let n = Network::new();
    let sinks: Vec<Arc<Rec>> = (0..3).map(|_| Arc::new(Rec::default())).collect();
    for (s, m) in sinks.iter().zip([A, B, C]) {
        let p = n.add_port(cfg(m));
        n.attach(p, s.clone());
    }
    n.send(0, &frame(B, A, b"1"), 0, 0);
    n.send(1, &frame(BCAST, B, b"2"), 0, 0);
    let got: Vec<usize> = sinks.iter().map(|s| s.0.lock().len()).collect();
    assert_eq!(got, [1, 1, 1], "A -> B only, then B's broadcast to A and C");
    n.detach(0);
    n.send(1, &frame(A, B, b"3"), 0, 0);
    assert_eq!(sinks[0].0.lock().len(), 1);
}

#[test]
fn a_flooding_sender_gets_only_its_share_of_a_receivers_queue() {
    let mut v = Net::new(A);
    let share = QUEUE_FRAMES / 2;
    // Port 2 floods: it holds at most its share.
    let held = (0..QUEUE_FRAMES)
        .filter(|_| v.receive(&frame(A, C, b"x"), 2, share))
        .count();
    assert_eq!(held, share);
    // Port 1's frames still find room, and come out in turn with port 2's.
    for i in 0..4u8 {
        assert!(v.receive(&frame(A, B, &[i]), 1, share));
    }
    let mut order = Vec::new();
    for _ in 0..8 {
        order.push(v.inbox.front().unwrap()[6..12] == B);
        v.inbox.pop();
    }
    assert_eq!(order.iter().filter(|&&b| b).count(), 4, "{order:?}");
    assert!(
        order.windows(2).all(|w| w[0] != w[1]),
        "alternating: {order:?}"
    );
}

/// The TX queue at `bring_up`'s queue-1 rings.
fn tx_driver() -> Driver {
    Driver::at(8, 0x4000)
}

#[test]
fn tx_to_switch_and_rx_into_the_ring() {
    let net = Arc::new(Network::new());
    let a = Arc::new(Transport::new("virtio-net", 2, Net::new(A)));
    let port = NetPort::new(a.clone(), net.clone(), net.add_port(cfg(A)));
    let sink = Arc::new(Rec::default());
    let p1 = net.add_port(cfg(B));
    net.attach(p1, sink.clone());
    let mut env = Env::new();
    bring_up(&*a, &mut env, F_VERSION_1 | F_MAC | F_STATUS, &[0, 1], 8);
    assert_eq!(
        a.read(&mut env, reg::CONFIG, Width::Dword).unwrap() & 0xffff_ffff_ffff,
        0x0a00_0000_0002
    );
    assert_eq!(
        a.read(&mut env, reg::CONFIG + 6, Width::Half),
        Ok(1),
        "link up"
    );
    // The guest sends one frame: header + frame in two buffers.
    let f = frame(B, A, b"ping");
    env.ram.put(DATA, &[0; HDR_LEN]);
    env.ram.put(DATA + 0x100, &f);
    let mut d = tx_driver();
    d.chain(
        &env.ram,
        0,
        &[
            (DATA, HDR_LEN as u32, false),
            (DATA + 0x100, f.len() as u32, false),
        ],
    );
    d.offer(&env.ram, 0);
    port.write(&mut env, reg::QUEUE_NOTIFY, Width::Word, 1)
        .unwrap();
    assert_eq!(*sink.0.lock(), vec![(0, f.clone())]);
    assert_eq!(d.used(&env.ram), (1, vec![(0, 0)]));
    // A frame for A arrives before any receive buffer: held, then delivered.
    let back = frame(A, B, b"pong");
    let r = a.with_live(&mut env, |n, q, env, w| {
        n.receive(&back, 1, QUEUE_FRAMES);
        n.deliver(q, env, &mut Budget::exit(), w)
    });
    assert_eq!(r, Some(Progress::Done));
    let mut rx = Driver::new(8);
    rx.chain(&env.ram, 0, &[(DATA + 0x1000, 2048, true)]);
    rx.offer(&env.ram, 0);
    wr(&*a, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(
        rx.used(&env.ram),
        (1, vec![(0, (HDR_LEN + back.len()) as u32)])
    );
    assert_eq!(
        env.ram.get(DATA + 0x1000 + HDR_LEN as u64, back.len()),
        back
    );
    assert_eq!(env.ram.get(DATA + 0x1000 + 10, 2), [1, 0], "num_buffers");
    let s = a.with_device(|n| n.stats);
    assert_eq!((s.tx_frames, s.rx_frames, s.dropped), (1, 1, 0));
    assert_eq!(rd(&*a, &mut env, reg::INTERRUPT_STATUS), 1);
}

#[test]
fn oversized_runt_and_overflowing_traffic_is_dropped_and_counted() {
    let a = Transport::new("virtio-net", 2, Net::new(A));
    let mut env = Env::new();
    bring_up(&a, &mut env, F_VERSION_1, &[0, 1], 8);
    let mut d = tx_driver();
    // Too large, then too small.
    d.chain(
        &env.ram,
        0,
        &[(DATA, (HDR_LEN + MAX_FRAME + 1) as u32, false)],
    );
    d.offer(&env.ram, 0);
    d.chain(&env.ram, 1, &[(DATA, (HDR_LEN + 5) as u32, false)]);
    d.offer(&env.ram, 1);
    wr(&a, &mut env, reg::QUEUE_NOTIFY, 1);
    assert_eq!(
        a.with_device(|n| (n.stats.dropped, n.has_outbox())),
        (2, false)
    );
    // A receive buffer too small for the frame: the frame is dropped.
    let mut rx = Driver::new(8);
    rx.chain(&env.ram, 0, &[(DATA + 0x1000, 20, true)]);
    rx.offer(&env.ram, 0);
    a.with_live(&mut env, |n, q, env, w| {
        n.receive(&frame(A, B, &[0; 64]), 1, QUEUE_FRAMES);
        n.deliver(q, env, &mut Budget::exit(), w)
    });
    assert_eq!(rx.used(&env.ram), (1, vec![(0, 0)]));
    // The inbox is bounded.
    a.with_device(|n| {
        for _ in 0..QUEUE_FRAMES + 10 {
            n.receive(&frame(A, B, b""), 1, QUEUE_FRAMES);
        }
        assert_eq!(n.held(), QUEUE_FRAMES);
        assert_eq!(n.stats.dropped, 3 + 10);
    });
}

#[test]
fn derived_macs_are_local_unicast_and_distinct() {
    let a = derived_mac("lan", "vm0");
    let b = derived_mac("lan", "vm1");
    assert_ne!(a, b);
    assert_eq!(a, derived_mac("lan", "vm0"));
    assert_eq!(a[0] & 3, 2, "locally administered, unicast");
}
