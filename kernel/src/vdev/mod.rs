//! Emulated devices a VM sees, as plain register models: the arch decodes a
//! trapped access into (offset, width, value) and applies the result.

pub mod ns16550;
pub mod pl011;

/// A trapped access the device refuses: the arch injects a data abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioError {
    /// Width not supported at that offset (or misaligned).
    BadAccess,
}

/// Access width in bytes: 1, 2, 4 or 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Width(u8);

impl Width {
    /// `None` unless `bytes` is 1, 2, 4 or 8.
    pub const fn new(bytes: u8) -> Option<Width> {
        match bytes {
            1 | 2 | 4 | 8 => Some(Width(bytes)),
            _ => None,
        }
    }

    pub const fn bytes(self) -> u8 {
        self.0
    }
}
