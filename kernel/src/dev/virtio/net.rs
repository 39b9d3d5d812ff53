//! virtio network (device ID 1) and the switch that connects the VMs
//! naming the same network.
//!
//! Each VM's device is a port of a [`Network`]: an Ethernet switch with
//! port security ([`Switch`]). kestrel knows each port's MAC from the
//! config; a frame whose source is not its port's MAC is dropped and
//! counted (unless the port allows spoofing); unicast goes only to the port
//! that owns the destination (its configured MAC, or a MAC it learnt if it
//! opted into learning, within its quota); broadcast and multicast go to
//! every other port within the sender's rate budget. Frames are copied out
//! of the sender's ring into kestrel's memory and from there into each
//! receiver's ring: VMs never share a page. Each receiver holds frames per
//! sending port, at most its fair share of its queue per sender, and takes
//! them in turn, so a flooding neighbour cannot crowd out the others.
//! Everything is bounded: frame size (no offloads are offered, so at most
//! an MTU-sized frame), frames held per port, and work per exit
//! ([`super::Budget`]); excess frames are dropped and counted, as a switch
//! drops on a full queue.
//!
//! Locking: a device's transmit work runs under its transport lock and
//! only fills its outbox; the outbox is forwarded after that lock is
//! released ([`NetPort`]), so two VMs sending to each other never hold
//! both transport locks.

use crate::base::lock::{Mutex, RwLock};
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use super::mmio::Transport;
use super::queue::{Pop, Queue, QueueError};
use super::{id, Budget, Progress, VirtioDevice, Work};
use crate::dev::vdev::bus::{DeviceEnv, MmioDevice};
use crate::dev::vdev::{MmioError, Width};

pub const RX: usize = 0;
pub const TX: usize = 1;
/// Feature bits.
pub const F_MAC: u64 = 1 << 5;
pub const F_STATUS: u64 = 1 << 16;
/// Config `status`: the link is up.
pub const S_LINK_UP: u16 = 1;
/// The header in front of every frame (virtio 1.x: with num_buffers).
pub const HDR_LEN: usize = 12;
/// Largest frame: 1500-byte MTU + Ethernet header + one VLAN tag.
pub const MAX_FRAME: usize = 1518;
/// Frames held per port, each way.
pub const QUEUE_FRAMES: usize = 256;
/// Most MACs one port may have learnt (its `learn` quota's ceiling).
pub const MAX_LEARN: u16 = kestrel_abi::package::MAX_LEARN;
/// Broadcast and multicast frames a second a port may send by default.
pub const DEFAULT_BROADCAST_RATE: u32 = 1000;
/// The highest broadcast rate a config may give.
pub const MAX_BROADCAST_RATE: u32 = kestrel_abi::package::MAX_BROADCAST_RATE;

pub type Mac = [u8; 6];

/// Per-port counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames dropped: too large or small, a full queue, a receive buffer
    /// too small for the frame.
    pub dropped: u64,
}

/// Frames from the switch waiting for receive buffers: a queue per
/// sending port, taken in turn.
#[derive(Default)]
struct Inbox {
    /// (sending port, its frames).
    from: Vec<(usize, VecDeque<Vec<u8>>)>,
    /// The queue whose turn it is.
    next: usize,
    len: usize,
}

impl Inbox {
    /// Holds `frame` from `port` if that port has fewer than `share`
    /// frames held and the inbox has room.
    fn push(&mut self, port: usize, frame: &[u8], share: usize) -> bool {
        if self.len >= QUEUE_FRAMES {
            return false;
        }
        let i = match self.from.iter().position(|(p, _)| *p == port) {
            Some(i) => i,
            None => {
                self.from.push((port, VecDeque::new()));
                self.from.len() - 1
            }
        };
        let q = &mut self.from[i].1;
        if q.len() >= share.max(1) {
            return false;
        }
        q.push_back(frame.to_vec());
        self.len += 1;
        true
    }

    /// The queue whose frame goes next.
    fn turn(&self) -> Option<usize> {
        let n = self.from.len();
        (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| !self.from[i].1.is_empty())
    }

    fn front(&self) -> Option<&[u8]> {
        let i = self.turn()?;
        self.from[i].1.front().map(Vec::as_slice)
    }

    fn pop(&mut self) {
        if let Some(i) = self.turn() {
            self.from[i].1.pop_front();
            self.len -= 1;
            self.next = (i + 1) % self.from.len();
        }
    }

    fn clear(&mut self) {
        *self = Inbox::default();
    }
}

/// The device of one VM.
pub struct Net {
    mac: Mac,
    inbox: Inbox,
    outbox: VecDeque<Vec<u8>>,
    pub stats: NetStats,
}

impl Net {
    pub fn new(mac: Mac) -> Net {
        Net {
            mac,
            inbox: Inbox::default(),
            outbox: VecDeque::new(),
            stats: NetStats::default(),
        }
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// A frame from the switch, sent by port `from`: held until a receive
    /// buffer takes it. `share` is how many frames one sender may have held
    /// here (its fair share of the queue); beyond it, or with the queue
    /// full, the frame is dropped and counted.
    pub fn receive(&mut self, frame: &[u8], from: usize, share: usize) -> bool {
        if !self.inbox.push(from, frame, share) {
            self.stats.dropped += 1;
            return false;
        }
        true
    }

    /// Frames held for the guest.
    pub fn held(&self) -> usize {
        self.inbox.len
    }

    /// The oldest frame this VM sent that the switch has not taken yet.
    pub fn take_frame(&mut self) -> Option<Vec<u8>> {
        self.outbox.pop_front()
    }

    /// Whether sent frames wait for the switch.
    pub fn has_outbox(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Whether the device is as at power-on (nothing held either way).
    pub fn is_idle(&self) -> bool {
        self.inbox.len == 0 && self.outbox.is_empty()
    }

    /// Moves held frames into the receive buffers the driver offered,
    /// within `budget`.
    pub fn deliver(
        &mut self,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        let q = &mut queues[RX];
        let mem = env.memory();
        loop {
            let Some(frame) = self.inbox.front() else {
                return Ok(Progress::Done);
            };
            if !budget.chain() {
                return Ok(Progress::More);
            }
            let c = match q.pop_within(mem, budget)? {
                Pop::Chain(c) => c,
                Pop::Empty => return Ok(Progress::Done),
                Pop::Later => return Ok(Progress::More),
            };
            budget.spend(c.cost());
            let mut hdr = [0u8; HDR_LEN];
            // num_buffers = 1: the frame is in this one chain.
            hdr[10] = 1;
            let used = if c.len(true) < (HDR_LEN + frame.len()) as u64 {
                self.stats.dropped += 1;
                0
            } else {
                let mut w = c.writer();
                w.write(mem, &hdr)?;
                w.write(mem, frame)?;
                budget.spend(w.cost());
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += frame.len() as u64;
                (HDR_LEN + frame.len()) as u32
            };
            self.inbox.pop();
            work.interrupt |= q.push_used(mem, c.head, used)?;
        }
    }

    fn transmit(
        &mut self,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        let q = &mut queues[TX];
        let mem = env.memory();
        loop {
            if !budget.chain() {
                return Ok(Progress::More);
            }
            let c = match q.pop_within(mem, budget)? {
                Pop::Chain(c) => c,
                Pop::Empty => return Ok(Progress::Done),
                Pop::Later => return Ok(Progress::More),
            };
            budget.spend(c.cost());
            let len = c.len(false);
            let frame_len = len.saturating_sub(HDR_LEN as u64) as usize;
            if len < (HDR_LEN + 14) as u64
                || frame_len > MAX_FRAME
                || self.outbox.len() >= QUEUE_FRAMES
            {
                self.stats.dropped += 1;
            } else {
                let mut r = c.reader();
                r.skip(HDR_LEN);
                let mut frame = alloc::vec![0u8; frame_len];
                r.read(mem, &mut frame)?;
                budget.spend(r.cost());
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += frame_len as u64;
                self.outbox.push_back(frame);
            }
            work.interrupt |= q.push_used(mem, c.head, 0)?;
        }
    }
}

impl VirtioDevice for Net {
    fn device_id(&self) -> u32 {
        id::NET
    }

    fn features(&self) -> u64 {
        F_MAC | F_STATUS
    }

    fn queues(&self) -> usize {
        2
    }

    /// mac[6], then status (le16): link up.
    fn read_config(&self, offset: u64, out: &mut [u8]) {
        let mut c = [0u8; 8];
        c[..6].copy_from_slice(&self.mac);
        c[6..8].copy_from_slice(&S_LINK_UP.to_le_bytes());
        super::read_config_bytes(&c, offset, out);
    }

    fn notify(
        &mut self,
        index: usize,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        match index {
            RX => self.deliver(queues, env, budget, work),
            TX => self.transmit(queues, env, budget, work),
            _ => Ok(Progress::Done),
        }
    }

    /// A reset drops what was in flight.
    fn reset(&mut self) {
        self.inbox.clear();
        self.outbox.clear();
    }

    fn at_power_on(&self) -> bool {
        self.is_idle()
    }
}

/// Where a frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Every port but the sender's (broadcast, multicast).
    Flood,
    To(usize),
    Drop,
}

/// What the config says about one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// The VM's MAC (configured or derived).
    pub mac: Mac,
    /// Frames with another source MAC are forwarded (else dropped).
    pub allow_mac_spoofing: bool,
    /// MACs the switch learns from this port's traffic at most (0: none).
    pub learn: u16,
    /// Broadcast and multicast frames a second it may send (0: the
    /// default, [`DEFAULT_BROADCAST_RATE`]).
    pub broadcast_rate: u32,
}

impl PortConfig {
    /// A port with the defaults: no spoofing, no learning, the default
    /// broadcast budget.
    pub fn new(mac: Mac) -> PortConfig {
        PortConfig {
            mac,
            allow_mac_spoofing: false,
            learn: 0,
            broadcast_rate: 0,
        }
    }
}

/// What the switch dropped from one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Source MAC not the port's (spoofing not allowed).
    pub spoofed: u64,
    /// Unicast to a MAC no (other) port owns; runts.
    pub unknown: u64,
    /// Broadcast or multicast over the port's budget.
    pub rate_limited: u64,
}

/// One port's state in the switch.
struct Port {
    cfg: PortConfig,
    /// Broadcast tokens in frame-nanoseconds (one frame costs 10^9).
    tokens: u64,
    /// When the tokens were last refilled (ns; `None`: never).
    refilled: Option<u64>,
    stats: SwitchStats,
}

const NS: u64 = 1_000_000_000;

impl Port {
    /// Bucket size: a tenth of a second's frames, at least one.
    fn burst(&self) -> u64 {
        (u64::from(self.rate()) / 10).max(1) * NS
    }

    fn rate(&self) -> u32 {
        match self.cfg.broadcast_rate {
            0 => DEFAULT_BROADCAST_RATE,
            r => r.min(MAX_BROADCAST_RATE),
        }
    }

    /// Takes a broadcast token at `now` (ns), if one is left.
    fn take_token(&mut self, now: u64) -> bool {
        let burst = self.burst();
        self.tokens = match self.refilled {
            None => burst,
            Some(t) => {
                let add = now.saturating_sub(t).saturating_mul(u64::from(self.rate()));
                self.tokens.saturating_add(add).min(burst)
            }
        };
        self.refilled = Some(now);
        if self.tokens < NS {
            return false;
        }
        self.tokens -= NS;
        true
    }
}

fn multicast(mac: &[u8]) -> bool {
    mac[0] & 1 != 0
}

/// The switch's forwarding decisions: ports with their configured MACs,
/// the MACs learnt by ports that opted in, broadcast budgets. Pure (time
/// comes in): host-tested.
#[derive(Default)]
pub struct Switch {
    ports: Vec<Port>,
    /// (MAC, port) learnt, oldest first.
    learnt: VecDeque<(Mac, usize)>,
}

impl Switch {
    /// A new port; its number.
    pub fn add_port(&mut self, cfg: PortConfig) -> usize {
        self.ports.push(Port {
            cfg,
            tokens: 0,
            refilled: None,
            stats: SwitchStats::default(),
        });
        self.ports.len() - 1
    }

    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// Port `port`'s drop counters.
    pub fn stats(&self, port: usize) -> SwitchStats {
        self.ports
            .get(port)
            .map_or_else(SwitchStats::default, |p| p.stats)
    }

    /// How many MACs port `port` has learnt.
    pub fn learnt(&self, port: usize) -> usize {
        self.learnt.iter().filter(|e| e.1 == port).count()
    }

    /// The port owning `mac`: its configured MAC first, then learnt ones.
    fn owner(&self, mac: &Mac) -> Option<usize> {
        self.ports
            .iter()
            .position(|p| p.cfg.mac == *mac)
            .or_else(|| self.learnt.iter().find(|e| e.0 == *mac).map(|e| e.1))
    }

    fn learn(&mut self, port: usize, src: Mac) {
        let quota = usize::from(self.ports[port].cfg.learn.min(MAX_LEARN));
        if quota == 0 || multicast(&src) || self.ports.iter().any(|p| p.cfg.mac == src) {
            // A configured MAC belongs to its port alone.
            return;
        }
        self.learnt.retain(|e| e.0 != src);
        if self.learnt(port) >= quota {
            if let Some(i) = self.learnt.iter().position(|e| e.1 == port) {
                self.learnt.remove(i);
            }
        }
        self.learnt.push_back((src, port));
    }

    /// Where `frame` from `port` goes at `now` (ns), counting what it drops.
    pub fn route(&mut self, port: usize, frame: &[u8], now: u64) -> Route {
        let Some(p) = self.ports.get_mut(port) else {
            return Route::Drop;
        };
        if frame.len() < 14 {
            p.stats.unknown += 1;
            return Route::Drop;
        }
        let dst: Mac = frame[0..6].try_into().unwrap_or_default();
        let src: Mac = frame[6..12].try_into().unwrap_or_default();
        if src != p.cfg.mac {
            if !p.cfg.allow_mac_spoofing {
                p.stats.spoofed += 1;
                return Route::Drop;
            }
            self.learn(port, src);
        }
        let p = &mut self.ports[port];
        if multicast(&dst) {
            if !p.take_token(now) {
                p.stats.rate_limited += 1;
                return Route::Drop;
            }
            return Route::Flood;
        }
        match self.owner(&dst) {
            Some(o) if o != port => Route::To(o),
            _ => {
                self.ports[port].stats.unknown += 1;
                Route::Drop
            }
        }
    }
}

/// How the switch reaches a port's VM: holds a frame for it and moves what
/// it can into its ring (implemented over the VM by the core; by tests
/// directly). `from` is the sending port, `share` the frames one sender
/// may have held there, `cpu` the pCPU forwarding it (`usize::MAX` if not
/// known). Returns the bytes it copied, for the sender's budget.
pub trait PortSink: Send + Sync {
    fn receive(&self, frame: &[u8], from: usize, share: usize, cpu: usize) -> u64;
}

/// One network: the switch and its ports.
#[derive(Default)]
pub struct Network {
    switch: Mutex<Switch>,
    ports: RwLock<Vec<Option<Arc<dyn PortSink>>>>,
}

impl Network {
    pub fn new() -> Network {
        Network::default()
    }

    /// A new port number; connect it with [`Network::attach`] once its VM exists.
    pub fn add_port(&self, cfg: PortConfig) -> usize {
        let mut p = self.ports.write();
        let n = self.switch.lock().add_port(cfg);
        p.push(None);
        debug_assert_eq!(n, p.len() - 1);
        n
    }

    pub fn attach(&self, port: usize, sink: Arc<dyn PortSink>) {
        if let Some(p) = self.ports.write().get_mut(port) {
            *p = Some(sink);
        }
    }

    /// The port no longer receives (its VM ended).
    pub fn detach(&self, port: usize) {
        if let Some(p) = self.ports.write().get_mut(port) {
            *p = None;
        }
    }

    /// Port `port`'s drop counters.
    pub fn stats(&self, port: usize) -> SwitchStats {
        self.switch.lock().stats(port)
    }

    /// Forwards `frame` sent by `port` at `now` (ns) on pCPU `cpu`; returns
    /// the bytes copied (for the sender's budget).
    pub fn send(&self, port: usize, frame: &[u8], now: u64, cpu: usize) -> u64 {
        let route = self.switch.lock().route(port, frame, now);
        let ports = self.ports.read();
        // Each sender's fair share of a receiver's queue.
        let share = QUEUE_FRAMES / ports.len().saturating_sub(1).max(1);
        let deliver = |i: usize| match ports.get(i) {
            Some(Some(s)) => s.receive(frame, port, share, cpu),
            _ => 0,
        };
        match route {
            Route::Flood => (0..ports.len()).filter(|&i| i != port).map(deliver).sum(),
            Route::To(i) => deliver(i),
            Route::Drop => 0,
        }
    }
}

/// A VM's network device as it sits on the VM's bus: the transport, and
/// after each access the frames it sent forwarded by the switch (with the
/// transport lock released), all within one exit's budget.
pub struct NetPort {
    pub transport: Arc<Transport<Net>>,
    pub network: Arc<Network>,
    pub port: usize,
    /// Sent frames wait for the switch (the budget ran out).
    outbox: AtomicBool,
}

impl NetPort {
    pub fn new(transport: Arc<Transport<Net>>, network: Arc<Network>, port: usize) -> NetPort {
        NetPort {
            transport,
            network,
            port,
            outbox: AtomicBool::new(false),
        }
    }

    /// Forwards sent frames in order while `budget` lasts.
    fn forward(&self, env: &mut dyn DeviceEnv, budget: &mut Budget) {
        loop {
            if budget.exhausted() {
                let left = self.transport.with_device(|n| n.has_outbox());
                self.outbox.store(left, Ordering::Release);
                return;
            }
            let Some(frame) = self.transport.with_device(Net::take_frame) else {
                self.outbox.store(false, Ordering::Release);
                return;
            };
            budget.spend(frame.len() as u64);
            let copied = self
                .network
                .send(self.port, &frame, env.now_ns(), env.pcpu());
            budget.spend(copied);
        }
    }

    /// Whether work waits: queue work or frames for the switch.
    pub fn has_pending(&self) -> bool {
        self.transport.has_pending() || self.outbox.load(Ordering::Acquire)
    }

    /// Continues pending work within `budget` ([`Transport::resume`], then
    /// forwarding).
    pub fn resume(&self, env: &mut dyn DeviceEnv, budget: &mut Budget) {
        self.forward(env, budget);
        self.transport.resume(env, budget);
        self.forward(env, budget);
    }
}

impl MmioDevice for NetPort {
    fn name(&self) -> &'static str {
        self.transport.name()
    }

    fn read(&self, env: &mut dyn DeviceEnv, off: u64, width: Width) -> Result<u64, MmioError> {
        self.transport.read(env, off, width)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        off: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        let mut budget = Budget::exit();
        let r = self
            .transport
            .write_within(env, off, width, value, &mut budget);
        // Only a notification sends frames (the transmit queue's work).
        if off == super::mmio::reg::QUEUE_NOTIFY {
            self.forward(env, &mut budget);
        }
        r
    }

    /// A VM restart: the transport back to power-on, nothing held.
    fn reset(&self) {
        self.transport.reset();
        self.outbox.store(false, Ordering::Release);
    }

    fn at_power_on(&self) -> bool {
        self.transport.at_power_on() && !self.outbox.load(Ordering::Acquire)
    }
}

/// A MAC for a VM that names none: locally administered, unicast, from the
/// network's and VM's names (stable across boots).
pub fn derived_mac(network: &str, vm: &str) -> Mac {
    // FNV-1a over "network/vm".
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in network.bytes().chain(*b"/").chain(vm.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    let b = h.to_le_bytes();
    [0x02, b[0], b[1], b[2], b[3], b[4]]
}

#[cfg(test)]
mod tests;
