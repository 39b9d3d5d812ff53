//! arm64 guests: exception-syndrome decoding and the ID-register view, and
//! the AArch32 (32-bit) guest facts in `aarch32`.

pub mod aarch32;
pub mod debug;
pub mod esr;
pub mod idregs;
pub mod ptimer;
