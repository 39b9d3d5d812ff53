use super::*;
use crate::dev::vdev::bus::MmioDevice;
use crate::dev::virtio::mmio::tests::{bring_up, wr, Env};
use crate::dev::virtio::mmio::{reg, Transport};
use crate::dev::virtio::queue::tests::{Driver, DATA, RAM};
use crate::dev::virtio::{status, F_VERSION_1};

const HDR: u64 = RAM + 0x8000;
const STATUS: u64 = RAM + 0x8100;

fn disk(sectors: usize) -> Vec<u8> {
    (0..sectors * 512)
        .map(|i| (i / 512) as u8 ^ (i as u8))
        .collect()
}

fn up(backing: Backing) -> (Transport<Block>, Env, Driver) {
    let t = Transport::new("virtio-blk", 3, Block::new(backing, "kestrel-disk-0"));
    let mut env = Env::new();
    let ro = t.with_device(|b| b.read_only());
    bring_up(
        &t,
        &mut env,
        F_VERSION_1 | if ro { F_RO } else { 0 },
        &[0],
        8,
    );
    (t, env, Driver::new(8))
}

/// Submits one request; returns (status byte, used length).
fn submit(
    t: &Transport<Block>,
    env: &mut Env,
    d: &mut Driver,
    kind: u32,
    sector: u64,
    data: &[(u64, u32, bool)],
) -> (u8, u32) {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    env.ram.put(HDR, &h);
    env.ram.put(STATUS, &[0xee]);
    let mut bufs = vec![(HDR, 16, false)];
    bufs.extend_from_slice(data);
    bufs.push((STATUS, 1, true));
    d.chain(&env.ram, 0, &bufs);
    d.offer(&env.ram, 0);
    wr(t, env, reg::QUEUE_NOTIFY, 0);
    let (_, used) = d.used(&env.ram);
    (env.ram.get(STATUS, 1)[0], used.last().unwrap().1)
}

#[test]
fn capacity_and_features() {
    let t = Transport::new("b", 3, Block::new(chunks(disk(9), 4096), "x"));
    let mut env = Env::new();
    assert_eq!(
        t.read(&mut env, reg::CONFIG, crate::dev::vdev::Width::Dword),
        Ok(9)
    );
    wr(&t, &mut env, reg::DEVICE_FEATURES_SEL, 0);
    assert_eq!(
        crate::dev::virtio::mmio::tests::rd(&t, &mut env, reg::DEVICE_FEATURES),
        F_FLUSH as u32
    );
    static RO: [u8; 1024] = [0; 1024];
    let t = Transport::new("b", 3, Block::new(Backing::ReadOnly(&RO), "x"));
    assert_eq!(
        crate::dev::virtio::mmio::tests::rd(&t, &mut env, reg::DEVICE_FEATURES),
        (F_FLUSH | F_RO) as u32
    );
}

#[test]
fn read_write_round_trip() {
    let (t, mut env, mut d) = up(chunks(disk(16), 1536));
    // Read sectors 2..4 into two buffers.
    let (s, used) = submit(
        &t,
        &mut env,
        &mut d,
        T_IN,
        2,
        &[(DATA, 512, true), (DATA + 0x1000, 512, true)],
    );
    assert_eq!((s, used), (S_OK, 1025));
    let want = disk(16);
    assert_eq!(env.ram.get(DATA, 512), &want[1024..1536]);
    assert_eq!(env.ram.get(DATA + 0x1000, 512), &want[1536..2048]);
    // Write sector 15, read it back.
    env.ram.put(DATA + 0x2000, &[0x5a; 512]);
    assert_eq!(
        submit(
            &t,
            &mut env,
            &mut d,
            T_OUT,
            15,
            &[(DATA + 0x2000, 512, false)]
        )
        .0,
        S_OK
    );
    assert_eq!(
        t.with_device(|b| b.to_vec()[15 * 512..].to_vec()),
        vec![0x5a; 512]
    );
    assert_eq!(
        submit(
            &t,
            &mut env,
            &mut d,
            T_IN,
            15,
            &[(DATA + 0x3000, 512, true)]
        )
        .0,
        S_OK
    );
    assert_eq!(env.ram.get(DATA + 0x3000, 512), vec![0x5a; 512]);
    assert_eq!(submit(&t, &mut env, &mut d, T_FLUSH, 0, &[]).0, S_OK);
    let st = t.with_device(|b| b.stats);
    assert_eq!(
        (
            st.reads,
            st.writes,
            st.read_bytes,
            st.written_bytes,
            st.errors
        ),
        (2, 1, 1536, 512, 0)
    );
}

#[test]
fn get_id() {
    let (t, mut env, mut d) = up(chunks(disk(1), 512));
    assert_eq!(
        submit(&t, &mut env, &mut d, T_GET_ID, 0, &[(DATA, 20, true)]).0,
        S_OK
    );
    assert_eq!(&env.ram.get(DATA, 20)[..14], b"kestrel-disk-0");
    assert_eq!(
        submit(&t, &mut env, &mut d, T_GET_ID, 0, &[(DATA, 8, true)]).0,
        S_IOERR
    );
}

/// (name, type, sector, data buffers, expected status)
type Case = (&'static str, u32, u64, &'static [(u64, u32, bool)], u8);

#[test]
fn bad_requests_get_an_error_status() {
    let (t, mut env, mut d) = up(chunks(disk(4), 1000));
    let cases: &[Case] = &[
        ("read past the end", T_IN, 3, &[(DATA, 1024, true)], S_IOERR),
        (
            "sector overflow",
            T_IN,
            u64::MAX / 256,
            &[(DATA, 512, true)],
            S_IOERR,
        ),
        (
            "huge sector",
            T_OUT,
            u64::MAX,
            &[(DATA, 512, false)],
            S_IOERR,
        ),
        ("partial sector", T_IN, 0, &[(DATA, 100, true)], S_IOERR),
        (
            "write past the end",
            T_OUT,
            4,
            &[(DATA, 512, false)],
            S_IOERR,
        ),
        ("unknown type", 77, 0, &[], S_UNSUPP),
        ("discard (not offered)", 11, 0, &[], S_UNSUPP),
    ];
    for (name, kind, sector, data, want) in cases {
        let (s, used) = submit(&t, &mut env, &mut d, *kind, *sector, data);
        assert_eq!((s, used), (*want, 1), "{name}");
    }
    assert_eq!(t.with_device(|b| b.stats.errors), cases.len() as u64);
    assert_eq!(t.with_device(|b| b.to_vec()), disk(4), "disk untouched");
}

#[test]
fn read_only_disks_refuse_writes() {
    static IMG: [u8; 2048] = [7; 2048];
    let (t, mut env, mut d) = up(Backing::ReadOnly(&IMG));
    env.ram.put(DATA, &[1; 512]);
    assert_eq!(
        submit(&t, &mut env, &mut d, T_OUT, 0, &[(DATA, 512, false)]).0,
        S_IOERR
    );
    assert_eq!(
        submit(&t, &mut env, &mut d, T_IN, 0, &[(DATA, 512, true)]).0,
        S_OK
    );
    assert_eq!(env.ram.get(DATA, 512), vec![7; 512]);
}

#[test]
fn requests_without_a_status_byte_break_the_queue() {
    let (t, mut env, mut d) = up(chunks(disk(1), 512));
    d.chain(&env.ram, 0, &[(HDR, 16, false)]);
    d.offer(&env.ram, 0);
    wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
    assert_eq!(t.broken(), Some(QueueError::Malformed));
    let s = crate::dev::virtio::mmio::tests::rd(&t, &mut env, reg::STATUS);
    assert_ne!(s & status::DEVICE_NEEDS_RESET, 0);
}

#[test]
fn data_buffers_outside_ram_break_the_queue_not_the_disk() {
    let (t, mut env, mut d) = up(chunks(disk(2), 4096));
    // The data buffer lies outside the VM's RAM.
    let (_, _) = {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&T_OUT.to_le_bytes());
        env.ram.put(HDR, &h);
        d.chain(
            &env.ram,
            0,
            &[(HDR, 16, false), (0x1000, 512, false), (STATUS, 1, true)],
        );
        d.offer(&env.ram, 0);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
        (0, 0)
    };
    assert!(matches!(t.broken(), Some(QueueError::Memory(_))));
    assert_eq!(t.with_device(|b| b.to_vec()), disk(2));
}

/// A writable backing of `bytes` in chunks of `chunk` bytes.
fn chunks(bytes: Vec<u8>, chunk: usize) -> Backing {
    Backing::Chunks(
        bytes
            .chunks(chunk)
            .map(|c| &mut *Box::leak(c.to_vec().into_boxed_slice()))
            .collect(),
    )
}
