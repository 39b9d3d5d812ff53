//! The virtio-mmio transport with its split virtqueues and each device
//! behind it (block read-only and writable, console, network) under random
//! register traffic of every width, driver bring-ups, queue setups,
//! descriptors and ring contents the input writes into a Vec-backed guest
//! RAM, host console input and network frames.
//!
//! Invariants, after every step: no panic; the guest RAM is reached only
//! through the checked `GuestMemory`, and a device that is not live
//! (before DRIVER_OK, or in DEVICE_NEEDS_RESET) writes nothing into it;
//! the work one register access does is bounded (memory calls and bytes
//! moved, by the queue and indirect-table limits and the RAM size);
//! DEVICE_NEEDS_RESET comes with the configuration interrupt; a queue
//! reads back ready only for a valid configuration whose rings are all in
//! RAM; the interrupt line follows InterruptStatus; a reset clears Status
//! and InterruptStatus and lowers the line.
//!
//! A fifth mode puts two VMs' network ports on one switch (each with its
//! own RAM, MAC and spoofing setting) and drives both, with the
//! continuation of pending work and VM restarts between accesses. There
//! no exit (an access or a continuation) moves more than one exit's budget
//! in both VMs' RAM together; no frame reaches a port that does not own
//! its destination (unicast to another MAC, a forged source from a port
//! that may not spoof); every device is at power-on after a restart.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::dev::vdev::bus::{DeviceEnv, GuestMemory, MemError, MmioDevice};
use kernel::dev::vdev::Width;
use kernel::dev::virtio::block::{Backing, Block};
use kernel::dev::virtio::console::Console;
use kernel::dev::virtio::mmio::{reg, Transport, REGION_SIZE};
use kernel::dev::virtio::net::{
    Mac, Net, NetPort, Network, PortConfig, PortSink, HDR_LEN, MAX_FRAME,
};
use kernel::dev::virtio::queue::MAX_QUEUE_SIZE;
use kernel::dev::virtio::{status, Budget, VirtioDevice, BUDGET_BYTES, BUDGET_CHAINS, MAX_STEP};
use libfuzzer_sys::fuzz_target;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: usize = 0x8000;
const LINE: u32 = 5;
/// The disk: 4 sectors.
static DISK: [u8; 2048] = {
    let mut d = [0u8; 2048];
    let mut i = 0;
    while i < d.len() {
        d[i] = (i * 7 + i / 512) as u8;
        i += 1;
    }
    d
};

/// Guest RAM that records what the device does with it.
struct Ram {
    bytes: RefCell<Vec<u8>>,
    calls: Cell<u64>,
    moved: Cell<u64>,
    writes: Cell<u64>,
}

impl Ram {
    fn range(&self, gpa: u64, len: usize) -> Result<std::ops::Range<usize>, MemError> {
        let err = MemError {
            gpa,
            len: len as u64,
        };
        self.calls.set(self.calls.get() + 1);
        let off = gpa.checked_sub(RAM_BASE).ok_or(err)?;
        let end = off.checked_add(len as u64).ok_or(err)?;
        if end > RAM_SIZE as u64 {
            return Err(err);
        }
        self.moved.set(self.moved.get() + len as u64);
        Ok(off as usize..end as usize)
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
        self.writes.set(self.writes.get() + 1);
        self.bytes.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
}

struct Env {
    ram: Ram,
    /// The last level driven on each line (only LINE exists).
    line: Option<bool>,
    now: u64,
}

impl Env {
    fn new(ram: &[u8]) -> Env {
        let mut bytes = vec![0u8; RAM_SIZE];
        let n = ram.len().min(RAM_SIZE);
        bytes[..n].copy_from_slice(&ram[..n]);
        Env {
            ram: Ram {
                bytes: RefCell::new(bytes),
                calls: Cell::new(0),
                moved: Cell::new(0),
                writes: Cell::new(0),
            },
            line: None,
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
        assert_eq!(line, LINE, "an interrupt line the device was not given");
        assert_ne!(
            self.line,
            Some(level),
            "the line driven to the level it has"
        );
        self.line = Some(level);
    }
    fn console_out(&mut self, _: u8) {}
    fn power_off(&mut self) {
        panic!("a virtio device powered the VM off");
    }
    fn reset(&mut self) {
        panic!("a virtio device reset the VM");
    }
    fn memory(&self) -> &dyn GuestMemory {
        &self.ram
    }
    fn now_ns(&self) -> u64 {
        self.now
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Read {
        off: u16,
        width: u8,
    },
    Write {
        off: u16,
        width: u8,
        value: u64,
    },
    /// Reset, ACK, DRIVER, features, FEATURES_OK.
    BringUp {
        features: u64,
    },
    /// Queue `q`: size, rings at offsets into RAM (or raw addresses), ready.
    Queue {
        q: u8,
        size: u16,
        desc: u32,
        avail: u32,
        used: u32,
        raw: bool,
    },
    DriverOk,
    /// Descriptor `i` of the table at RAM offset `table`.
    Desc {
        table: u16,
        i: u8,
        addr: u32,
        len: u32,
        flags: u8,
        next: u16,
        raw: u64,
    },
    /// Avail ring at RAM offset `avail`: ring slot and index.
    Avail {
        avail: u16,
        slot: u8,
        head: u16,
        idx: u16,
    },
    Ram {
        off: u16,
        bytes: Vec<u8>,
    },
    Notify(u16),
    /// Host input: console bytes or a network frame.
    Input(Vec<u8>),
    /// The continuation of pending work (before a guest entry).
    Resume,
}

fn width(w: u8) -> Width {
    Width::new(1 << (w % 4)).unwrap_or(Width::Word)
}

fn ram_addr(off: u32, raw: bool) -> u64 {
    if raw {
        u64::from(off).wrapping_mul(0x1_0001)
    } else {
        RAM_BASE + u64::from(off) % (RAM_SIZE as u64 + 0x100)
    }
}

/// Upper bound of memory bytes one exit (a register access, or one
/// continuation of pending work) may move: the budget, one step beyond it,
/// the ring words of each chain (avail and used entries, status bytes) and
/// a queue's ring check when the driver makes it ready.
fn bound() -> u64 {
    let n = u64::from(MAX_QUEUE_SIZE);
    BUDGET_BYTES + MAX_STEP + u64::from(BUDGET_CHAINS) * 32 + 16 * n + 6 + 2 * n + 6 + 8 * n + 64
}

fn run<D: VirtioDevice>(
    t: &Transport<D>,
    env: &mut Env,
    ops: &[Op],
    input: impl Fn(&Transport<D>, &mut Env, &[u8]),
    finally_reset: bool,
) {
    let rd = |env: &mut Env, off: u64| t.read(env, off, Width::Word).unwrap() as u32;
    let wr =
        |env: &mut Env, off: u64, v: u32| t.write(env, off, Width::Word, u64::from(v)).unwrap();
    for op in ops {
        let live = t.live();
        let (calls, moved, writes) = (
            env.ram.calls.get(),
            env.ram.moved.get(),
            env.ram.writes.get(),
        );
        let mut reset = false;
        let mut status0 = false;
        env.now += 1_000_000;
        match op {
            Op::Read { off, width: w } => {
                let _ = t.read(env, u64::from(*off) % REGION_SIZE, width(*w));
            }
            Op::Write {
                off,
                width: w,
                value,
            } => {
                let off = u64::from(*off) % REGION_SIZE;
                let w = width(*w);
                reset = off == reg::STATUS && w == Width::Word && *value as u32 == 0;
                status0 = reset;
                let _ = t.write(env, off, w, *value);
            }
            Op::BringUp { features } => {
                wr(env, reg::STATUS, 0);
                reset = true;
                wr(env, reg::STATUS, status::ACKNOWLEDGE);
                wr(env, reg::STATUS, status::ACKNOWLEDGE | status::DRIVER);
                wr(env, reg::DRIVER_FEATURES_SEL, 0);
                wr(env, reg::DRIVER_FEATURES, *features as u32);
                wr(env, reg::DRIVER_FEATURES_SEL, 1);
                wr(env, reg::DRIVER_FEATURES, (*features >> 32) as u32);
                wr(
                    env,
                    reg::STATUS,
                    status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
                );
            }
            Op::Queue {
                q,
                size,
                desc,
                avail,
                used,
                raw,
            } => {
                let (d, a, u) = (
                    ram_addr(*desc, *raw),
                    ram_addr(*avail, *raw),
                    ram_addr(*used, *raw),
                );
                wr(env, reg::QUEUE_SEL, u32::from(*q % 3));
                wr(env, reg::QUEUE_NUM, u32::from(*size));
                wr(env, reg::QUEUE_DESC_LOW, d as u32);
                wr(env, reg::QUEUE_DESC_HIGH, (d >> 32) as u32);
                wr(env, reg::QUEUE_DRIVER_LOW, a as u32);
                wr(env, reg::QUEUE_DRIVER_HIGH, (a >> 32) as u32);
                wr(env, reg::QUEUE_DEVICE_LOW, u as u32);
                wr(env, reg::QUEUE_DEVICE_HIGH, (u >> 32) as u32);
                wr(env, reg::QUEUE_READY, 1);
                if rd(env, reg::QUEUE_READY) == 1 {
                    // Ready: a valid configuration, every ring byte in RAM.
                    let n = u64::from(rd(env, reg::QUEUE_NUM));
                    assert!(n.is_power_of_two() && n <= u64::from(MAX_QUEUE_SIZE));
                    let in_ram = |lo: u64, hi: u64, len: u64| {
                        let a = lo | hi << 32;
                        a >= RAM_BASE && a + len <= RAM_BASE + RAM_SIZE as u64
                    };
                    let rdq = |env: &mut Env, o| u64::from(rd(env, o));
                    assert!(in_ram(
                        rdq(env, reg::QUEUE_DESC_LOW),
                        rdq(env, reg::QUEUE_DESC_HIGH),
                        16 * n
                    ));
                    assert!(in_ram(
                        rdq(env, reg::QUEUE_DRIVER_LOW),
                        rdq(env, reg::QUEUE_DRIVER_HIGH),
                        6 + 2 * n
                    ));
                    assert!(in_ram(
                        rdq(env, reg::QUEUE_DEVICE_LOW),
                        rdq(env, reg::QUEUE_DEVICE_HIGH),
                        6 + 8 * n
                    ));
                }
            }
            Op::DriverOk => {
                let s = rd(env, reg::STATUS);
                wr(env, reg::STATUS, s | status::DRIVER_OK);
            }
            Op::Desc {
                table,
                i,
                addr,
                len,
                flags,
                next,
                raw,
            } => {
                let at = usize::from(*table % 0x7000) & !15;
                let at = at + 16 * usize::from(*i % 64);
                let addr = if *raw & 1 == 0 {
                    ram_addr(*addr, false)
                } else {
                    *raw
                };
                let mut d = env.ram.bytes.borrow_mut();
                d[at..at + 8].copy_from_slice(&addr.to_le_bytes());
                d[at + 8..at + 12].copy_from_slice(&len.to_le_bytes());
                d[at + 12..at + 14].copy_from_slice(&u16::from(*flags & 7).to_le_bytes());
                d[at + 14..at + 16].copy_from_slice(&next.to_le_bytes());
            }
            Op::Avail {
                avail,
                slot,
                head,
                idx,
            } => {
                let at = usize::from(*avail % 0x7000) & !1;
                let mut d = env.ram.bytes.borrow_mut();
                let s = at + 4 + 2 * usize::from(*slot);
                d[s..s + 2].copy_from_slice(&head.to_le_bytes());
                d[at + 2..at + 4].copy_from_slice(&idx.to_le_bytes());
            }
            Op::Ram { off, bytes } => {
                let off = usize::from(*off) % RAM_SIZE;
                let n = bytes.len().min(RAM_SIZE - off);
                env.ram.bytes.borrow_mut()[off..off + n].copy_from_slice(&bytes[..n]);
            }
            Op::Notify(q) => wr(env, reg::QUEUE_NOTIFY, u32::from(*q % 4)),
            Op::Input(bytes) => input(t, env, bytes),
            Op::Resume => {
                t.resume(env, &mut Budget::exit());
            }
        }
        // Bounded work.
        let (dc, dm) = (env.ram.calls.get() - calls, env.ram.moved.get() - moved);
        assert!(dm <= bound(), "{dm} bytes moved by one access");
        assert!(dc <= bound(), "{dc} memory calls by one access");
        // Not live before and after: nothing written into guest RAM.
        if !live && !t.live() {
            assert_eq!(
                env.ram.writes.get(),
                writes,
                "a device that is not live wrote guest RAM"
            );
        }
        let st = rd(env, reg::STATUS);
        let isr = rd(env, reg::INTERRUPT_STATUS);
        if st & status::DEVICE_NEEDS_RESET != 0 {
            assert!(t.broken().is_some());
            assert!(!t.live());
        }
        if t.broken().is_some() {
            assert_ne!(st & status::DEVICE_NEEDS_RESET, 0);
        }
        if reset {
            assert_eq!(t.broken(), None);
        }
        if status0 {
            assert!(t.at_power_on(), "not at power-on after Status = 0");
        }
        assert_eq!(
            env.line.unwrap_or(false),
            isr != 0,
            "line level vs InterruptStatus {isr:#x}"
        );
    }
    if !finally_reset {
        return;
    }
    // A reset always recovers, to power-on.
    wr(env, reg::STATUS, 0);
    assert!(t.at_power_on(), "not at power-on after Status = 0");
    assert_eq!(
        (rd(env, reg::STATUS), rd(env, reg::INTERRUPT_STATUS)),
        (0, 0)
    );
    assert!(!env.line.unwrap_or(false));
    assert!(t.broken().is_none());
}

/// One step of the two-VM mode: VM `vm % 2` does `op`, continues its
/// pending work, or restarts.
#[derive(Arbitrary, Debug)]
enum Step {
    Op { vm: u8, op: Op },
    Restart(u8),
}

/// What a port received through the switch: (receiving port, frame).
type Seen = Arc<Mutex<Vec<(usize, Vec<u8>)>>>;

/// A port's VM as the switch sees it: the frame goes into its device (held,
/// one moved into the ring at once, as kestrel's port does).
struct FuzzPort {
    port: usize,
    transport: Arc<Transport<Net>>,
    env: Arc<Mutex<Env>>,
    seen: Seen,
}

impl PortSink for FuzzPort {
    fn receive(&self, frame: &[u8], from: usize, share: usize, _: usize) -> u64 {
        self.seen.lock().unwrap().push((self.port, frame.to_vec()));
        let mut env = self.env.lock().unwrap();
        let r = self.transport.with_live(&mut *env, |n, q, env, w| {
            if !n.receive(frame, from, share) {
                return Ok(kernel::dev::virtio::Progress::Done);
            }
            let mut one = Budget::new((HDR_LEN + MAX_FRAME) as u64, 1);
            n.deliver(q, env, &mut one, w)
        });
        if r == Some(kernel::dev::virtio::Progress::More) {
            self.transport.mark_pending(kernel::dev::virtio::net::RX);
        }
        2 * frame.len() as u64
    }
}

fn two_vms(u: &mut Unstructured) {
    let (Ok(ram0), Ok(ram1), Ok(spoof), Ok(steps)) = (
        u.arbitrary::<Vec<u8>>(),
        u.arbitrary::<Vec<u8>>(),
        u.arbitrary::<u8>(),
        u.arbitrary::<Vec<Step>>(),
    ) else {
        return;
    };
    let macs: [Mac; 2] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let net = Arc::new(Network::new());
    let seen: Seen = Arc::default();
    let mut vms = Vec::new();
    for (i, ram) in [ram0, ram1].iter().enumerate() {
        let cfg = PortConfig {
            allow_mac_spoofing: spoof >> i & 1 != 0,
            ..PortConfig::new(macs[i])
        };
        let port = net.add_port(cfg);
        let t = Arc::new(Transport::new("virtio-net", LINE, Net::new(macs[i])));
        let env = Arc::new(Mutex::new(Env::new(ram)));
        net.attach(
            port,
            Arc::new(FuzzPort {
                port,
                transport: t.clone(),
                env: env.clone(),
                seen: seen.clone(),
            }),
        );
        vms.push((NetPort::new(t, net.clone(), port), env, cfg));
    }
    let moved = |vms: &Vec<(NetPort, Arc<Mutex<Env>>, PortConfig)>| -> u64 {
        vms.iter()
            .map(|v| v.1.lock().unwrap().ram.moved.get())
            .sum()
    };
    for step in &steps {
        let before = moved(&vms);
        match step {
            Step::Restart(vm) => {
                let (p, _, _) = &vms[usize::from(*vm % 2)];
                MmioDevice::reset(p);
                assert!(
                    p.at_power_on(),
                    "a network port not at power-on after a reset"
                );
            }
            Step::Op { vm, op } => {
                let (p, env, _) = &vms[usize::from(*vm % 2)];
                // The access runs with the VM's env taken out of its lock,
                // as a vCPU's exit has it; frames to the other VM lock that
                // one's.
                let mut e = std::mem::replace(&mut *env.lock().unwrap(), Env::new(&[]));
                e.now += 1_000_000;
                match op {
                    Op::Write {
                        off,
                        width: w,
                        value,
                    } => {
                        let _ = p.write(&mut e, u64::from(*off) % REGION_SIZE, width(*w), *value);
                    }
                    Op::Read { off, width: w } => {
                        let _ = p.read(&mut e, u64::from(*off) % REGION_SIZE, width(*w));
                    }
                    Op::Notify(q) => {
                        let _ = p.write(&mut e, reg::QUEUE_NOTIFY, Width::Word, u64::from(*q % 2));
                    }
                    Op::Resume => p.resume(&mut e, &mut Budget::exit()),
                    other => {
                        // Set-up operations act on the transport as in the
                        // one-device mode.
                        run(
                            &p.transport,
                            &mut e,
                            std::slice::from_ref(other),
                            |_, _, _| {},
                            false,
                        );
                    }
                }
                *env.lock().unwrap() = e;
            }
        }
        let d = moved(&vms) - before;
        assert!(d <= bound(), "{d} bytes moved by one exit across both VMs");
        // Ownership: every unicast frame went to the owner of its
        // destination; a forged source only from a port that may spoof.
        for (port, f) in seen.lock().unwrap().drain(..) {
            let (dst, src) = (&f[0..6], &f[6..12]);
            if dst[0] & 1 == 0 {
                assert_eq!(dst, macs[port], "unicast to a port that does not own it");
            }
            let from = 1 - port;
            if src != macs[from] {
                assert!(vms[from].2.allow_mac_spoofing, "a forged source forwarded");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(which) = u.arbitrary::<u8>() else {
        return;
    };
    let Ok(ram) = u.arbitrary::<Vec<u8>>() else {
        return;
    };
    let Ok(ops) = u.arbitrary::<Vec<Op>>() else {
        return;
    };
    let mut env = Env::new(&ram);
    match which % 5 {
        0 => {
            let t = Transport::new(
                "virtio-blk",
                LINE,
                Block::new(Backing::ReadOnly(&DISK), "fuzz"),
            );
            run(&t, &mut env, &ops, |_, _, _| {}, true);
        }
        1 => {
            // A writable disk in memory of its own, taken back afterwards.
            let chunk: &'static mut [u8] = Box::leak(DISK.to_vec().into_boxed_slice());
            let ptr: *mut [u8] = chunk;
            let t = Transport::new(
                "virtio-blk",
                LINE,
                Block::new(Backing::Chunks(vec![chunk]), "fuzz"),
            );
            run(&t, &mut env, &ops, |_, _, _| {}, true);
            drop(t);
            // SAFETY: `ptr` came from `Box::leak` above and the only
            // reference made from it went with the transport, dropped.
            drop(unsafe { Box::from_raw(ptr) });
        }
        2 => {
            let t = Transport::new("virtio-console", LINE, Console::new());
            let input = t.with_device(|c| c.input());
            run(
                &t,
                &mut env,
                &ops,
                |t, env, bytes| {
                    use kernel::vmm::console::RxPort;
                    for &b in bytes {
                        input.lock().receive(b);
                    }
                    t.with_live(env, |c, q, env, w| {
                        c.deliver(q, env, &mut Budget::exit(), w)
                    });
                },
                true,
            );
        }
        3 => {
            let t = Transport::new("virtio-net", LINE, Net::new([2, 0, 0, 0, 0, 1]));
            run(
                &t,
                &mut env,
                &ops,
                |t, env, frame| {
                    t.with_live(env, |n, q, env, w| {
                        n.receive(frame, 1, 256);
                        n.deliver(q, env, &mut Budget::exit(), w)
                    });
                    while t.with_device(|n| n.take_frame()).is_some() {}
                },
                true,
            );
        }
        _ => two_vms(&mut u),
    }
});
