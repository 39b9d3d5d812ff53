//! One VM's set of virtio devices ([`VmVirtio`]: console, disks, network
//! ports), their counters and summary, and the named networks (switches)
//! ports join. The VM manager builds and connects a set
//! (`crate::vmm::virtio`).

use crate::base::lock::Mutex;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::block::Block;
use super::console::{Console, Input};
use super::mmio::Transport;
use super::net::{NetPort, Network};

/// The virtio devices of one VM (empty for a VM without any).
#[derive(Default)]
pub struct VmVirtio {
    pub console: Option<Arc<Transport<Console>>>,
    /// The console's input buffer (what the multiplexer fills).
    pub console_input: Option<Arc<Mutex<Input>>>,
    pub disks: Vec<Arc<Transport<Block>>>,
    pub nets: Vec<Arc<NetPort>>,
}

/// The networks VMs are connected to, by name (created on first use).
static NETWORKS: Mutex<Vec<(String, Arc<Network>)>> = Mutex::new(Vec::new());

/// A VM's virtio counters, added up over its devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioCounters {
    /// Bytes the virtio console wrote.
    pub console_bytes: u64,
    /// Disk read and write requests done.
    pub disk_requests: u64,
    /// Bytes the disks read and wrote.
    pub disk_bytes: u64,
    /// Network frames sent, received, dropped.
    pub net_tx: u64,
    pub net_rx: u64,
    pub net_dropped: u64,
}

/// The network called `name`.
pub fn network(name: &str) -> Arc<Network> {
    let mut nets = NETWORKS.lock();
    if let Some((_, n)) = nets.iter().find(|(n, _)| n == name) {
        return n.clone();
    }
    let n = Arc::new(Network::new());
    nets.push((String::from(name), n.clone()));
    n
}

impl VmVirtio {
    /// The counters of all its virtio devices added up (the console's
    /// live statistics).
    pub fn counters(&self) -> VirtioCounters {
        let mut c = VirtioCounters::default();
        if let Some(con) = &self.console {
            c.console_bytes = con.with_device(|d| d.tx_bytes);
        }
        for d in &self.disks {
            let st = d.with_device(|b| b.stats);
            c.disk_requests += st.reads + st.writes;
            c.disk_bytes += st.read_bytes + st.written_bytes;
        }
        for n in &self.nets {
            let st = n.transport.with_device(|n| n.stats);
            c.net_tx += st.tx_frames;
            c.net_rx += st.rx_frames;
            c.net_dropped += st.dropped;
        }
        c
    }

    /// One line of counters, `None` for a VM without virtio devices:
    /// console bytes written, per disk requests and bytes, per port frames.
    pub fn summary(&self) -> Option<String> {
        use core::fmt::Write;
        let mut s = String::new();
        if let Some(c) = &self.console {
            let _ = write!(s, " console: {} bytes out;", c.with_device(|c| c.tx_bytes));
        }
        for (i, d) in self.disks.iter().enumerate() {
            let st = d.with_device(|b| b.stats);
            let _ = write!(
                s,
                " disk{i}: {} reads ({} KiB), {} writes ({} KiB), {} errors;",
                st.reads,
                st.read_bytes >> 10,
                st.writes,
                st.written_bytes >> 10,
                st.errors
            );
        }
        for (i, n) in self.nets.iter().enumerate() {
            let st = n.transport.with_device(|n| n.stats);
            let sw = n.network.stats(n.port);
            let _ = write!(
                s,
                " net{i}: {} frames out, {} in, {} dropped, switch dropped {} spoofed, {} unknown, {} over the broadcast budget;",
                st.tx_frames, st.rx_frames, st.dropped, sw.spoofed, sw.unknown, sw.rate_limited
            );
        }
        for (name, broken) in self.broken() {
            let _ = write!(s, " {name} needs reset ({broken:?});");
        }
        (!s.is_empty()).then(|| String::from(s.trim_end_matches(';').trim_start()))
    }

    /// Whether any device has work a budget did not cover (asked before
    /// every entry).
    #[inline]
    pub fn pending(&self) -> bool {
        self.console.iter().any(|c| c.has_pending())
            || self.disks.iter().any(|d| d.has_pending())
            || self.nets.iter().any(|n| n.has_pending())
    }

    /// Every transport, for per-exit bookkeeping.
    pub fn transports(&self) -> impl Iterator<Item = &dyn Fresh> + '_ {
        let c = self.console.iter().map(|t| &**t as &dyn Fresh);
        let d = self.disks.iter().map(|t| &**t as &dyn Fresh);
        let n = self.nets.iter().map(|n| &*n.transport as &dyn Fresh);
        c.chain(d).chain(n)
    }

    /// The devices a malformed ring put in DEVICE_NEEDS_RESET, and why.
    fn broken(&self) -> Vec<(&'static str, super::queue::QueueError)> {
        let console = self
            .console
            .iter()
            .filter_map(|t| t.broken().map(|b| ("virtio-console", b)));
        let disks = self
            .disks
            .iter()
            .filter_map(|t| t.broken().map(|b| ("virtio-blk", b)));
        let nets = self
            .nets
            .iter()
            .filter_map(|n| n.transport.broken().map(|b| ("virtio-net", b)));
        console.chain(disks).chain(nets).collect()
    }

    /// The console's input buffer while its driver has the device live
    /// (before that, typed input goes to the UART).
    pub fn live_console_input(&self) -> Option<&Arc<Mutex<Input>>> {
        let t = self.console.as_ref()?;
        t.live().then_some(self.console_input.as_ref()?)
    }
}

/// A transport's "a notification did this exit's work" flag.
pub trait Fresh {
    fn take_fresh(&self) -> bool;
}

impl<D: super::VirtioDevice> Fresh for Transport<D> {
    fn take_fresh(&self) -> bool {
        Transport::take_fresh(self)
    }
}

/// Copies `image` into the start of `chunks` (which hold at least as much).
pub fn fill(chunks: &mut [&'static mut [u8]], image: &[u8]) {
    let mut at = 0;
    for c in chunks.iter_mut() {
        let n = c.len().min(image.len() - at);
        c[..n].copy_from_slice(&image[at..at + n]);
        at += n;
        if at == image.len() {
            break;
        }
    }
}
