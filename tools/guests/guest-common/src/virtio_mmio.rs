//! The virtio-mmio transport (version 2, virtio 1.x section 4.2.2): its
//! register offsets, device status bits and the device IDs the test guests
//! drive.

/// What the MagicValue register reads: "virt" in little-endian.
pub const MAGIC: u32 = 0x7472_6976;

/// Device IDs.
pub const ID_NET: u32 = 1;
pub const ID_BLOCK: u32 = 2;
pub const ID_CONSOLE: u32 = 3;

/// Register offsets from a transport's base.
pub mod reg {
    pub const MAGIC: usize = 0x000;
    pub const VERSION: usize = 0x004;
    pub const DEVICE_ID: usize = 0x008;
    pub const DEVICE_FEATURES: usize = 0x010;
    pub const DEVICE_FEATURES_SEL: usize = 0x014;
    pub const DRIVER_FEATURES: usize = 0x020;
    pub const DRIVER_FEATURES_SEL: usize = 0x024;
    pub const QUEUE_SEL: usize = 0x030;
    pub const QUEUE_NUM_MAX: usize = 0x034;
    pub const QUEUE_NUM: usize = 0x038;
    pub const QUEUE_READY: usize = 0x044;
    pub const QUEUE_NOTIFY: usize = 0x050;
    pub const INTERRUPT_STATUS: usize = 0x060;
    pub const INTERRUPT_ACK: usize = 0x064;
    pub const STATUS: usize = 0x070;
    pub const QUEUE_DESC_LOW: usize = 0x080;
    pub const QUEUE_DESC_HIGH: usize = 0x084;
    pub const QUEUE_DRIVER_LOW: usize = 0x090;
    pub const QUEUE_DRIVER_HIGH: usize = 0x094;
    pub const QUEUE_DEVICE_LOW: usize = 0x0a0;
    pub const QUEUE_DEVICE_HIGH: usize = 0x0a4;
    /// Where the device's configuration space starts.
    pub const CONFIG: usize = 0x100;
}

/// Bytes of one transport's window: registers and configuration space.
pub const REGION: usize = 0x200;

/// Device status bits.
pub const ACK: u32 = 1;
pub const DRIVER: u32 = 2;
pub const DRIVER_OK: u32 = 4;
pub const FEATURES_OK: u32 = 8;
pub const NEEDS_RESET: u32 = 64;

/// InterruptStatus bits: used buffer, configuration change.
pub const INT_VRING: u32 = 1;
pub const INT_CONFIG: u32 = 2;

/// The feature bit every virtio 1.x driver must accept (bit 32).
pub const VERSION_1: u64 = 1 << 32;
