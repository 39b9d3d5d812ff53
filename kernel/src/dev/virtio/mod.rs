//! virtio 1.x devices for VMs: the virtio-mmio transport ([`mmio`]), split
//! virtqueues checked against the VM's RAM ([`queue`]), and the devices
//! behind them.
//!
//! A device implements [`VirtioDevice`]: its ID, features, configuration
//! space and what it does when the driver notifies a queue. The transport
//! owns feature negotiation, the device status, queue setup and the
//! interrupt line, so a device only moves data.
//!
//! Work is bounded per exit ([`Budget`]): a notification does at most
//! [`BUDGET_BYTES`] of copying and serves at most [`BUDGET_CHAINS`] chains;
//! what is left stays pending in the transport and continues before the
//! VM's next guest entry ([`crate::vm::DeviceWork::device_work`]), in ring
//! order.

pub mod block;
pub mod console;
pub mod mmio;
pub mod net;
pub mod queue;
pub mod set;

use crate::dev::vdev::bus::DeviceEnv;
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

/// Bytes of guest memory one exit moves for a VM's devices at most
/// (descriptors walked count 16 bytes each). One step may overshoot by
/// less than [`MAX_STEP`].
pub const BUDGET_BYTES: u64 = 64 << 10;
/// Chains one exit serves at most.
pub const BUDGET_CHAINS: u32 = 64;
/// What one guest-memory call costs beyond its bytes, in budget bytes (the
/// range check and translation): a chain of many tiny buffers costs its
/// calls, not only its bytes.
pub const CALL_COST: u64 = 64;
/// The most one indivisible step of device work costs beyond what the
/// budget had left: a chain walk (a full direct chain and a full indirect
/// table: 512 descriptors of 16 bytes, a call each), or one step of
/// copying with its calls (a piece of a console transmit chain,
/// [`console::TX_PIECE`] bytes at their byte cost [`console::TX_COST`]; a
/// frame with its header; a sector of a block request), over buffers of a
/// byte each at worst; and the ring indices.
pub const MAX_STEP: u64 =
    512 * (16 + CALL_COST) + console::TX_PIECE as u64 * console::TX_COST + 4096 * CALL_COST + 1024;
/// What zeroing one untouched 2 MiB block of guest RAM costs, in budget
/// bytes, when a device is the first to reach it
/// ([`crate::dev::vdev::bus::GuestMemory::prepare`]): half a budget (a
/// zeroing is about two and a half times the work of a whole budget's
/// copying, measured under `-icount`). An exit does at most
/// [`ZEROINGS_PER_BUDGET`] of them, whatever else it does, so a chain over
/// many untouched blocks is taken one block per exit, whoever's exit it
/// is, while a request over one such block still completes in its notify.
pub const ZERO_COST: u64 = BUDGET_BYTES / 2;
/// First-touch zeroings one budget allows.
pub const ZEROINGS_PER_BUDGET: u32 = 1;

/// What one exit may still do on a VM's devices. See the module
/// documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    bytes: u64,
    chains: u32,
    /// First-touch zeroings left.
    zeroings: u32,
}

impl Budget {
    /// A whole exit's budget.
    pub const fn exit() -> Budget {
        Budget::new(BUDGET_BYTES, BUDGET_CHAINS)
    }

    pub const fn new(bytes: u64, chains: u32) -> Budget {
        Budget {
            bytes,
            chains,
            zeroings: ZEROINGS_PER_BUDGET,
        }
    }

    /// Takes one chain: `false` when no chain or no byte is left.
    pub fn chain(&mut self) -> bool {
        if self.chains == 0 || self.bytes == 0 {
            return false;
        }
        self.chains -= 1;
        true
    }

    /// Bytes left.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charges `n` bytes (saturating: the last step may overshoot).
    pub fn spend(&mut self, n: u64) {
        self.bytes = self.bytes.saturating_sub(n);
    }

    /// How many first-touch zeroings of guest RAM this budget still
    /// allows ([`ZEROINGS_PER_BUDGET`] in all, [`ZERO_COST`] each).
    pub fn zero_allowance(&self) -> u32 {
        self.zeroings
    }

    /// Charges `n` first-touch zeroings.
    pub fn spend_zeroed(&mut self, n: u32) {
        self.zeroings = self.zeroings.saturating_sub(n);
        self.spend(u64::from(n) * ZERO_COST);
    }

    /// Nothing left: further work waits for the next exit.
    pub fn exhausted(&self) -> bool {
        self.chains == 0 || self.bytes == 0
    }
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

/// Whether a round of queue work finished the queue or stopped on the
/// budget with work left ([`VirtioDevice::notify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing left that this notification asked for.
    Done,
    /// The budget ran out: call again (next exit) to continue.
    More,
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
    /// The driver notified queue `index` (live, in range), or work an
    /// earlier call left ([`Progress::More`]) continues. Does at most what
    /// `budget` allows (charging it), in ring order, and records in `work`
    /// what it did, also when it then fails on a malformed ring (the
    /// chains completed before the error still get their interrupt).
    fn notify(
        &mut self,
        index: usize,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError>;
    /// Back to the state before the driver found it.
    fn reset(&mut self);
    /// Whether the device holds nothing a reset must drop (work under way,
    /// frames held): what [`VirtioDevice::reset`] leaves. By default, yes.
    fn at_power_on(&self) -> bool {
        true
    }
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

#[cfg(test)]
mod tests;
