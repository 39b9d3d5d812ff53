//! LoongArch64 (root mode) support: CSR and IOCSR access, the 16550
//! console, the timer, exception entries, SMP start and the [`Platform`]
//! implementation. See docs/loongarch-boot.md for the boot protocol.
//!
//! [`Platform`]: crate::base::platform::Platform

pub mod backend;
pub mod bootinfo;
pub mod csr;
pub mod dmw;
pub mod exceptions;
pub mod fp;
pub mod iocsr;
pub mod lvz;
pub mod ns16550;
pub mod platform;
pub mod smp;
pub mod timer;
pub mod vm;
