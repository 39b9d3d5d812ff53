//! arm64 guests: exception-syndrome decoding and the ID-register view.

pub mod debug;
pub mod esr;
pub mod idregs;
pub mod ptimer;
