use super::*;
use crate::virtio::mmio::reg;
use crate::virtio::mmio::tests::{bring_up, rd, wr, Env};
use crate::virtio::queue::tests::{Driver, DATA};
use crate::virtio::F_VERSION_1;

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

#[test]
fn mac_learning() {
    let mut t = MacTable::default();
    assert_eq!(t.route(0, &frame(B, A, b"")), Route::Flood, "B unknown");
    assert_eq!(t.route(1, &frame(A, B, b"")), Route::To(0), "A learnt on 0");
    assert_eq!(t.route(0, &frame(B, A, b"")), Route::To(1));
    assert_eq!(t.route(2, &frame(BCAST, C, b"")), Route::Flood);
    assert_eq!(t.route(0, &frame(C, A, b"")), Route::To(2));
    // A moves to port 3.
    assert_eq!(t.route(3, &frame(B, A, b"")), Route::To(1));
    assert_eq!(t.route(1, &frame(A, B, b"")), Route::To(3));
    // To itself: dropped; runts dropped; multicast sources not learnt.
    assert_eq!(t.route(1, &frame(B, B, b"")), Route::Drop);
    assert_eq!(t.route(1, &[0; 13]), Route::Drop);
    assert_eq!(
        t.route(4, &frame(A, [0x03, 0, 0, 0, 0, 1], b"")),
        Route::To(3)
    );
    assert_eq!(
        t.route(0, &frame([0x03, 0, 0, 0, 0, 1], A, b"")),
        Route::Flood
    );
}

#[test]
fn mac_table_is_bounded() {
    let mut t = MacTable::default();
    for i in 0..(MAC_TABLE as u32 + 100) {
        let b = i.to_le_bytes();
        t.route(1, &frame(BCAST, [2, 0, b[0], b[1], b[2], b[3]], b""));
    }
    assert_eq!(t.entries.len(), MAC_TABLE);
}

#[derive(Default)]
struct Rec(Mutex<Vec<Vec<u8>>>);
impl PortSink for Rec {
    fn receive(&self, f: &[u8], _: usize) {
        self.0.lock().push(f.to_vec());
    }
}

#[test]
fn network_floods_and_forwards() {
    let n = Network::new();
    let sinks: Vec<Arc<Rec>> = (0..3).map(|_| Arc::new(Rec::default())).collect();
    for s in &sinks {
        let p = n.add_port();
        n.attach(p, s.clone());
    }
    n.send(0, &frame(B, A, b"1"), 0);
    n.send(1, &frame(A, B, b"2"), 0);
    let got: Vec<usize> = sinks.iter().map(|s| s.0.lock().len()).collect();
    assert_eq!(got, [1, 1, 1], "flood to 1 and 2, then 2 -> 0 only");
    n.detach(0);
    n.send(1, &frame(A, B, b"3"), 0);
    assert_eq!(sinks[0].0.lock().len(), 1);
}

/// The TX queue at `bring_up`'s queue-1 rings.
fn tx_driver() -> Driver {
    Driver::at(8, 0x4000)
}

#[test]
fn tx_to_switch_and_rx_into_the_ring() {
    let net = Arc::new(Network::new());
    let a = Arc::new(Transport::new("virtio-net", 2, Net::new(A)));
    let port = NetPort {
        transport: a.clone(),
        network: net.clone(),
        port: net.add_port(),
    };
    let sink = Arc::new(Rec::default());
    let p1 = net.add_port();
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
    assert_eq!(*sink.0.lock(), vec![f.clone()]);
    assert_eq!(d.used(&env.ram), (1, vec![(0, 0)]));
    // A frame for A arrives before any receive buffer: held, then delivered.
    let back = frame(A, B, b"pong");
    let r = a.with_live(&mut env, |n, q, env| {
        n.receive(&back);
        n.deliver(q, env).map(|w| ((), w))
    });
    assert_eq!(r, Some(()));
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
        a.with_device(|n| (n.stats.dropped, n.take_outbox().len())),
        (2, 0)
    );
    // A receive buffer too small for the frame: the frame is dropped.
    let mut rx = Driver::new(8);
    rx.chain(&env.ram, 0, &[(DATA + 0x1000, 20, true)]);
    rx.offer(&env.ram, 0);
    a.with_live(&mut env, |n, q, env| {
        n.receive(&frame(A, B, &[0; 64]));
        n.deliver(q, env).map(|w| ((), w))
    });
    assert_eq!(rx.used(&env.ram), (1, vec![(0, 0)]));
    // The inbox is bounded.
    a.with_device(|n| {
        for _ in 0..QUEUE_FRAMES + 10 {
            n.receive(&frame(A, B, b""));
        }
        assert_eq!(n.inbox.len(), QUEUE_FRAMES);
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
