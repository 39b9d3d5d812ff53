//! Emulated devices a VM sees, as plain register models, and the per-VM
//! MMIO [`bus`] that routes a trapped access (address, width, value) to them.
//! [`uart`] and [`poweroff`] put the models on the bus, [`isaio`] is a
//! legacy I/O port window where no port answers; the vGIC's frames are
//! in `crate::dev::vgic::mmio`; [`env`] is the environment devices act through,
//! written once over the hypervisor, VM and vCPU.

pub mod bus;
pub mod isaio;
pub mod ns16550;
pub mod pl011;
pub mod poweroff;
#[cfg(test)]
pub(crate) mod testenv;
pub mod uart;

/// A trapped access the device refuses: the backend answers it with the
/// guest's architectural abort for that access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioError {
    /// A width or alignment the register at that offset does not support.
    BadAccess,
    /// Outside the device's registers (a backend mapping error).
    OutOfRange,
    /// The accessing vCPU does not exist.
    NoSuchVcpu,
}

/// The width of a trapped access: 1, 2, 4 or 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    Byte,
    Half,
    Word,
    Dword,
}

impl Width {
    /// `None` unless `bytes` is 1, 2, 4 or 8.
    pub const fn new(bytes: u8) -> Option<Width> {
        match bytes {
            1 => Some(Width::Byte),
            2 => Some(Width::Half),
            4 => Some(Width::Word),
            8 => Some(Width::Dword),
            _ => None,
        }
    }

    /// From a log2 size field (ESR_EL2 ISS.SAS: 0 = byte .. 3 = doubleword).
    pub const fn from_sas(sas: u64) -> Width {
        match sas & 3 {
            0 => Width::Byte,
            1 => Width::Half,
            2 => Width::Word,
            _ => Width::Dword,
        }
    }

    pub const fn bytes(self) -> u64 {
        match self {
            Width::Byte => 1,
            Width::Half => 2,
            Width::Word => 4,
            Width::Dword => 8,
        }
    }

    /// Keeps the bits of `value` this width carries.
    pub const fn mask(self, value: u64) -> u64 {
        match self {
            Width::Dword => value,
            w => value & ((1u64 << (w.bytes() * 8)) - 1),
        }
    }
}

/// What a UART register write asks the outside world to do (the PL011 and
/// the 16550 models both answer with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UartEffect {
    None,
    /// Send this byte to the VM's console.
    Transmit(u8),
}

impl UartEffect {
    /// The byte to transmit, if any.
    pub fn byte(self) -> Option<u8> {
        match self {
            UartEffect::Transmit(b) => Some(b),
            UartEffect::None => None,
        }
    }
}
