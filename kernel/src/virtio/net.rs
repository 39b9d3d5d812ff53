//! virtio network (device ID 1) and the switch that connects the VMs
//! naming the same network.
//!
//! Each VM's device is a port of a [`Network`]: a learning Ethernet switch
//! (source MACs learnt per port, broadcast, multicast and unknown unicast
//! flooded to every other port). Frames are copied out of the sender's
//! ring into kestrel's memory and from there into each receiver's ring:
//! VMs never share a page. Everything is bounded: frame size (no offloads
//! are offered, so at most an MTU-sized frame), frames held per port
//! waiting for receive buffers, and chains handled per notification;
//! excess frames are dropped and counted, as a switch drops on a full queue.
//!
//! Locking: a device's transmit work runs under its transport lock and
//! only fills its outbox; the outbox is forwarded after that lock is
//! released ([`NetPort`]), so two VMs sending to each other never hold
//! both transport locks.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use spin::{Mutex, RwLock};

use super::mmio::Transport;
use super::queue::{Queue, QueueError};
use super::{id, VirtioDevice, Work};
use crate::vdev::bus::{DeviceEnv, MmioDevice};
use crate::vdev::{MmioError, Width};

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
/// MAC addresses a switch remembers.
pub const MAC_TABLE: usize = 256;

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

/// The device of one VM.
pub struct Net {
    mac: Mac,
    inbox: VecDeque<Vec<u8>>,
    outbox: VecDeque<Vec<u8>>,
    pub stats: NetStats,
}

impl Net {
    pub fn new(mac: Mac) -> Net {
        Net {
            mac,
            inbox: VecDeque::new(),
            outbox: VecDeque::new(),
            stats: NetStats::default(),
        }
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// A frame from the switch: held until a receive buffer takes it.
    pub fn receive(&mut self, frame: &[u8]) {
        if self.inbox.len() >= QUEUE_FRAMES {
            self.stats.dropped += 1;
            return;
        }
        self.inbox.push_back(frame.to_vec());
    }

    /// Frames this VM sent since the last call, for the switch.
    pub fn take_outbox(&mut self) -> VecDeque<Vec<u8>> {
        core::mem::take(&mut self.outbox)
    }

    /// Moves held frames into the receive buffers the driver offered.
    pub fn deliver(
        &mut self,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
    ) -> Result<Work, QueueError> {
        let mut work = Work::default();
        let q = &mut queues[RX];
        let mem = env.memory();
        for _ in 0..q.size {
            let Some(frame) = self.inbox.front() else {
                break;
            };
            let Some(c) = q.pop(mem)? else { break };
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
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += frame.len() as u64;
                (HDR_LEN + frame.len()) as u32
            };
            self.inbox.pop_front();
            work.interrupt |= q.push_used(mem, c.head, used)?;
        }
        Ok(work)
    }

    fn transmit(
        &mut self,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
    ) -> Result<Work, QueueError> {
        let mut work = Work::default();
        let q = &mut queues[TX];
        let mem = env.memory();
        for _ in 0..q.size {
            let Some(c) = q.pop(mem)? else { break };
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
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += frame_len as u64;
                self.outbox.push_back(frame);
            }
            work.interrupt |= q.push_used(mem, c.head, 0)?;
        }
        Ok(work)
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
    ) -> Result<Work, QueueError> {
        match index {
            RX => self.deliver(queues, env),
            TX => self.transmit(queues, env),
            _ => Ok(Work::default()),
        }
    }

    /// A reset drops what was in flight.
    fn reset(&mut self) {
        self.inbox.clear();
        self.outbox.clear();
    }
}

/// Where a frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Every port but the sender's.
    Flood,
    To(usize),
    Drop,
}

/// A learning switch's forwarding table. Pure: host-tested.
#[derive(Default)]
pub struct MacTable {
    /// (MAC, port), most recently learnt last.
    entries: VecDeque<(Mac, usize)>,
}

fn multicast(mac: &[u8]) -> bool {
    mac[0] & 1 != 0
}

impl MacTable {
    /// Learns the frame's source from `port` and says where it goes.
    pub fn route(&mut self, port: usize, frame: &[u8]) -> Route {
        if frame.len() < 14 {
            return Route::Drop;
        }
        let (dst, src) = (&frame[0..6], &frame[6..12]);
        if !multicast(src) {
            let src: Mac = src.try_into().unwrap_or_default();
            self.entries.retain(|e| e.0 != src);
            if self.entries.len() >= MAC_TABLE {
                self.entries.pop_front();
            }
            self.entries.push_back((src, port));
        }
        if multicast(dst) {
            return Route::Flood;
        }
        match self.entries.iter().find(|e| e.0 == dst) {
            Some(&(_, p)) if p == port => Route::Drop,
            Some(&(_, p)) => Route::To(p),
            None => Route::Flood,
        }
    }
}

/// How the switch reaches a port's VM: copies a frame into it and raises
/// its interrupt (implemented over the VM by the core; by tests directly).
/// `cpu` is the pCPU forwarding it (`usize::MAX` if not known).
pub trait PortSink: Send + Sync {
    fn receive(&self, frame: &[u8], cpu: usize);
}

/// One network: the switch and its ports.
#[derive(Default)]
pub struct Network {
    table: Mutex<MacTable>,
    ports: RwLock<Vec<Option<Arc<dyn PortSink>>>>,
}

impl Network {
    pub fn new() -> Network {
        Network::default()
    }

    /// A new port number; connect it with [`Network::attach`] once its VM exists.
    pub fn add_port(&self) -> usize {
        let mut p = self.ports.write();
        p.push(None);
        p.len() - 1
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

    /// Forwards `frame` sent by `port` on pCPU `cpu`.
    pub fn send(&self, port: usize, frame: &[u8], cpu: usize) {
        let route = self.table.lock().route(port, frame);
        let ports = self.ports.read();
        let deliver = |i: usize| {
            if let Some(Some(s)) = ports.get(i) {
                s.receive(frame, cpu);
            }
        };
        match route {
            Route::Flood => (0..ports.len()).filter(|&i| i != port).for_each(deliver),
            Route::To(i) => deliver(i),
            Route::Drop => {}
        }
    }
}

/// A VM's network device as it sits on the VM's bus: the transport, and
/// after each access the frames it sent forwarded by the switch (with the
/// transport lock released).
pub struct NetPort {
    pub transport: Arc<Transport<Net>>,
    pub network: Arc<Network>,
    pub port: usize,
}

impl NetPort {
    fn forward(&self, cpu: usize) {
        let out = self.transport.with_device(Net::take_outbox);
        for frame in &out {
            self.network.send(self.port, frame, cpu);
        }
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
        let r = self.transport.write(env, off, width, value);
        // Only a notification sends frames (the transmit queue's work).
        if off == super::mmio::reg::QUEUE_NOTIFY {
            self.forward(env.pcpu());
        }
        r
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
