//! A VM's virtio devices as the VM manager builds and connects them: a
//! transport on the VM's bus at each slot its spec gives
//! ([`VmSpec::virtio_slots`]), writable disks copied into memory the
//! backend provides, network ports attached to the named networks once the
//! VM exists, typed input moved into the virtio console, and device work
//! resumed on a pCPU's own time. The device set itself is
//! [`crate::dev::virtio::set::VmVirtio`].

use alloc::format;
use alloc::string::String;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;

use kestrel_abi::package::Device;

use crate::dev::vdev::bus::Bus;
use crate::dev::virtio::block::{Backing, Block};
use crate::dev::virtio::console::Console;
use crate::dev::virtio::mmio::{Transport, REGION_SIZE};
use crate::dev::virtio::net::{derived_mac, Net, NetPort, PortConfig, PortSink};
use crate::dev::virtio::set::{fill, network, VmVirtio};
use crate::dev::virtio::{Budget, Progress};
use crate::vcpu::sched::VcpuKey;
use crate::vm::{DeviceWork, Hypervisor, Vm};
use crate::vmm::devices::{DeviceHost, VmDeviceEnv};
use crate::vmm::vmconfig::{VirtioSlot, VirtioSlotKind, VmSpec};

/// Builds the devices of `spec` onto `bus`. `disk_memory(bytes)` gives
/// a writable disk its private memory (chunks that belong to it alone,
/// at least `bytes` long in all) or says why it cannot.
pub fn build(
    spec: &VmSpec<'static>,
    bus: &mut Bus,
    disk_memory: &mut dyn FnMut(u64) -> Result<Vec<&'static mut [u8]>, String>,
) -> Result<VmVirtio, String> {
    build_at(spec, &spec.virtio_slots(), bus, disk_memory)
}

/// [`build`] at `slots` (an architecture's own window).
pub fn build_at(
    spec: &VmSpec<'static>,
    slots: &[VirtioSlot],
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
        t.mark_pending(crate::dev::virtio::console::RX);
    }
}

/// Continues `vm`'s pending device work on pCPU `cpu` within one exit's
/// budget ([`DeviceWork::device_work`] of every backend with devices):
/// called before a guest entry of one of its vCPUs. A round right after a
/// notification that did its own budget's work is skipped, so an exit
/// does one budget at most.
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

impl<B: DeviceHost> DeviceWork for B {
    fn device_work(hv: &Hypervisor<B>, vm: &Vm<B>, cpu: usize) {
        resume(hv, vm, cpu);
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
    /// A frame for this VM: held in its device's inbox (one copy, the
    /// sender's cost), and the receive queue marked pending. Walking the
    /// receiver's ring and copying the frame into its buffers is the
    /// receiver's own work, done by its device work before one of its
    /// vCPUs next enters the guest ([`resume`]), never in the sender's
    /// exit: a receiver whose ring is slow to walk (long or indirect
    /// chains, untouched memory) costs only itself. The first frame held
    /// wakes (or kicks) one of its vCPUs so that the work is done soon.
    fn receive(&self, frame: &[u8], from: usize, share: usize, cpu: usize) -> u64 {
        let Some(vm) = self.vm.upgrade() else {
            return 0;
        };
        if vm.has_ended() {
            return 0;
        }
        let held = self.transport.hold(crate::dev::virtio::net::RX, |n| {
            n.receive(frame, from, share)
        });
        if let Some((true, false)) = held {
            // Its first vCPU that is on (vCPU 0 unless the guest turned
            // it off) runs the device work at its next entry.
            if let Some(i) = (0..vm.vcpus.len()).find(|&i| self.hv.vcpu_is_on(&vm, i)) {
                self.hv.wake(
                    VcpuKey {
                        vm: vm.slot,
                        vcpu: i as u16,
                    },
                    cpu,
                );
            }
        }
        2 * frame.len() as u64
    }
}
