//! A VM's virtio devices as the core builds and connects them: a transport
//! on the VM's bus at each slot its spec gives ([`VmSpec::virtio_slots`]),
//! writable disks copied into memory the backend provides, network ports
//! attached to the named networks once the VM exists, and the console's
//! input buffer for the console multiplexer.

use alloc::format;
use alloc::string::String;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use spin::Mutex;

use kestrel_abi::package::Device;

use super::block::{Backing, Block};
use super::console::{Console, Input};
use super::mmio::{Transport, REGION_SIZE};
use super::net::{derived_mac, Net, NetPort, Network, PortConfig, PortSink};
use super::{Budget, Progress};
use crate::dev::vdev::bus::{Bus, DeviceEnv};
use crate::dev::vdev::env::{DeviceHost, VmDeviceEnv};
use crate::vm::{Hypervisor, Vm};
use crate::vmm::vmconfig::{VirtioSlotKind, VmSpec};

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
    /// Builds the devices of `spec` onto `bus`. `disk_memory(bytes)` gives
    /// a writable disk its private memory (chunks that belong to it alone,
    /// at least `bytes` long in all) or says why it cannot.
    pub fn build(
        spec: &VmSpec<'static>,
        bus: &mut Bus,
        disk_memory: &mut dyn FnMut(u64) -> Result<Vec<&'static mut [u8]>, String>,
    ) -> Result<VmVirtio, String> {
        Self::build_at(spec, &spec.virtio_slots(), bus, disk_memory)
    }

    /// [`VmVirtio::build`] at `slots` (an architecture's own window).
    pub fn build_at(
        spec: &VmSpec<'static>,
        slots: &[crate::vmm::vmconfig::VirtioSlot],
        bus: &mut Bus,
        disk_memory: &mut dyn FnMut(u64) -> Result<Vec<&'static mut [u8]>, String>,
    ) -> Result<VmVirtio, String> {
        let mut v = VmVirtio::default();
        let devices: Vec<Device<'static>> = spec.devices.iter().collect();
        for &slot in slots {
            debug_assert_eq!(slot.size, REGION_SIZE);
            let err = |e| format!("virtio at {:#x}: {e:?}", slot.base);
            match slot.kind {
                VirtioSlotKind::Console => {
                    let c = Console::new();
                    v.console_input = Some(c.input());
                    let t = Arc::new(Transport::new("virtio-console", slot.spi, c));
                    bus.add(slot.base, slot.size, t.clone()).map_err(err)?;
                    v.console = Some(t);
                }
                VirtioSlotKind::Device(i) => match devices.get(i) {
                    Some(&Device::Disk { image, read_only }) => {
                        let backing = if read_only {
                            Backing::ReadOnly(image)
                        } else {
                            let mut chunks = disk_memory(image.len() as u64)
                                .map_err(|e| format!("disk {i}: {e}"))?;
                            fill(&mut chunks, image);
                            Backing::Chunks(chunks)
                        };
                        let serial = format!("kestrel-disk{}", v.disks.len());
                        let t = Arc::new(Transport::new(
                            "virtio-blk",
                            slot.spi,
                            Block::new(backing, &serial),
                        ));
                        bus.add(slot.base, slot.size, t.clone()).map_err(err)?;
                        v.disks.push(t);
                    }
                    Some(&Device::Net {
                        network: name,
                        mac,
                        allow_mac_spoofing,
                        learn,
                        broadcast_rate,
                    }) => {
                        let net = network(name);
                        // A second port of this VM on the same network
                        // gets a MAC of its own.
                        let earlier = v
                            .nets
                            .iter()
                            .filter(|n| Arc::ptr_eq(&n.network, &net))
                            .count();
                        let mac = mac.unwrap_or_else(|| match earlier {
                            0 => derived_mac(name, spec.name),
                            k => derived_mac(name, &format!("{}#{k}", spec.name)),
                        });
                        let port = net.add_port(PortConfig {
                            mac,
                            allow_mac_spoofing,
                            learn,
                            broadcast_rate,
                        });
                        let port = Arc::new(NetPort::new(
                            Arc::new(Transport::new("virtio-net", slot.spi, Net::new(mac))),
                            net,
                            port,
                        ));
                        bus.add(slot.base, slot.size, port.clone()).map_err(err)?;
                        v.nets.push(port);
                    }
                    None => return Err(format!("virtio slot for missing device {i}")),
                },
            }
        }
        Ok(v)
    }

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
    fn transports(&self) -> impl Iterator<Item = &dyn Fresh> + '_ {
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
trait Fresh {
    fn take_fresh(&self) -> bool;
}

impl<D: super::VirtioDevice> Fresh for Transport<D> {
    fn take_fresh(&self) -> bool {
        Transport::take_fresh(self)
    }
}

/// Copies `image` into the start of `chunks` (which hold at least as much).
fn fill(chunks: &mut [&'static mut [u8]], image: &[u8]) {
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

/// Connects `vm`'s network ports to their networks (once the VM exists).
pub fn connect<B: DeviceHost + 'static>(hv: &'static Hypervisor<B>, vm: &Arc<Vm<B>>) {
    for n in &vm.virtio.nets {
        n.network.attach(
            n.port,
            Arc::new(VmPort {
                hv,
                vm: Arc::downgrade(vm),
                transport: n.transport.clone(),
            }),
        );
    }
}

/// Moves typed input held for `vm`'s virtio console into its receive
/// buffers (after the multiplexer filled the input buffer).
pub fn deliver_console_input<B: DeviceHost>(hv: &Hypervisor<B>, vm: &Vm<B>, cpu: usize) {
    let (Some(t), Some(input)) = (&vm.virtio.console, &vm.virtio.console_input) else {
        return;
    };
    if input.lock().is_empty() {
        return;
    }
    let mut env = VmDeviceEnv::host(hv, vm, cpu);
    let r = t.with_live(&mut env, |c, q, env, w| {
        c.deliver(q, env, &mut Budget::exit(), w)
    });
    if r == Some(Progress::More) {
        // Continued by the VM's own exits.
        t.mark_pending(super::console::RX);
    }
}

/// Continues `vm`'s pending device work on pCPU `cpu` within one exit's
/// budget ([`crate::vm::Backend::device_work`]): called before a guest
/// entry of one of its vCPUs. A round right after a notification that did
/// its own budget's work is skipped, so an exit does one budget at most.
pub fn resume<B: DeviceHost>(hv: &Hypervisor<B>, vm: &Vm<B>, cpu: usize) {
    let v = &vm.virtio;
    let fresh = v.transports().fold(false, |f, t| t.take_fresh() | f);
    if fresh {
        return;
    }
    let mut env = VmDeviceEnv::host(hv, vm, cpu);
    let mut budget = Budget::exit();
    if let Some(c) = &v.console {
        c.resume(&mut env, &mut budget);
    }
    for d in &v.disks {
        d.resume(&mut env, &mut budget);
    }
    for n in &v.nets {
        n.resume(&mut env, &mut budget);
    }
}

/// A VM's port as the switch sees it: a frame goes into the VM's receive
/// ring (held if the ring is full; dropped if the VM has ended or its
/// driver is not up).
struct VmPort<B: DeviceHost + 'static> {
    hv: &'static Hypervisor<B>,
    vm: Weak<Vm<B>>,
    transport: Arc<Transport<Net>>,
}

impl<B: DeviceHost + 'static> PortSink for VmPort<B> {
    /// Holds the frame and moves at most one frame into the ring at once;
    /// more held frames are the receiving VM's own work (its vCPUs are
    /// woken to do it).
    fn receive(&self, frame: &[u8], from: usize, share: usize, cpu: usize) -> u64 {
        let Some(vm) = self.vm.upgrade() else {
            return 0;
        };
        if vm.has_ended() {
            return 0;
        }
        let mut env = VmDeviceEnv::host(self.hv, &vm, cpu);
        let r = self.transport.with_live(&mut env, |n, q, env, w| {
            if !n.receive(frame, from, share) {
                return Ok(Progress::Done);
            }
            let mut one = Budget::new((super::net::HDR_LEN + super::net::MAX_FRAME) as u64, 1);
            n.deliver(q, env, &mut one, w)
        });
        if r == Some(Progress::More) {
            self.transport.mark_pending(super::net::RX);
            for i in 0..vm.vcpus.len() {
                env.wake(i);
            }
        }
        2 * frame.len() as u64
    }
}
