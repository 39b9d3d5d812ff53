//! virtio 1.x devices for VMs: the virtio-mmio transport ([`mmio`]), split
//! virtqueues checked against the VM's RAM ([`queue`]), and the devices
//! behind them.
//!
//! A device implements [`VirtioDevice`]: its ID, features, configuration
//! space and what it does when the driver notifies a queue. The transport
//! owns feature negotiation, the device status, queue setup and the
//! interrupt line, so a device only moves data.

pub mod block;
pub mod console;
pub mod mmio;
pub mod net;
pub mod queue;
pub mod vm;

use crate::vdev::bus::DeviceEnv;
use queue::{Queue, QueueError};

/// Device IDs (virtio 1.x, "Device Types").
pub mod id {
    pub const NET: u32 = 1;
    pub const BLOCK: u32 = 2;
    pub const CONSOLE: u32 = 3;
}

/// VIRTIO_F_VERSION_1: the modern interface, which every kestrel device
/// offers and every driver must accept.
pub const F_VERSION_1: u64 = 1 << 32;

/// Device status bits.
pub mod status {
    pub const ACKNOWLEDGE: u32 = 1;
    pub const DRIVER: u32 = 2;
    pub const DRIVER_OK: u32 = 4;
    pub const FEATURES_OK: u32 = 8;
    pub const DEVICE_NEEDS_RESET: u32 = 64;
    pub const FAILED: u32 = 128;
}

/// What a round of queue work did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Used buffers the driver wants to hear about: raise the interrupt.
    pub interrupt: bool,
    /// The configuration space changed (bump the generation, interrupt).
    pub config_changed: bool,
}

impl Work {
    pub fn merge(self, o: Work) -> Work {
        Work {
            interrupt: self.interrupt || o.interrupt,
            config_changed: self.config_changed || o.config_changed,
        }
    }
}

/// A virtio device behind a [`mmio::Transport`].
pub trait VirtioDevice: Send {
    fn device_id(&self) -> u32;
    /// Device feature bits offered (VERSION_1 is added by the transport).
    fn features(&self) -> u64;
    /// The features the driver accepted (a subset of what was offered).
    fn set_features(&mut self, _features: u64) {}
    /// Number of virtqueues.
    fn queues(&self) -> usize;
    /// Reads `out.len()` bytes of the configuration space at `offset`;
    /// bytes beyond it read as zero.
    fn read_config(&self, offset: u64, out: &mut [u8]);
    /// A driver write to the configuration space (ignored by default).
    fn write_config(&mut self, _offset: u64, _data: &[u8]) {}
    /// The driver notified queue `index` (live, in range). Work is bounded
    /// by the queue size.
    fn notify(
        &mut self,
        index: usize,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
    ) -> Result<Work, QueueError>;
    /// Back to the state before the driver found it.
    fn reset(&mut self);
}

/// Reads a little-endian configuration field layout: copies the bytes of
/// `config` at `offset` into `out`, zeros beyond its end.
pub fn read_config_bytes(config: &[u8], offset: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(i))
            .and_then(|o| config.get(o))
            .copied()
            .unwrap_or(0);
    }
}
