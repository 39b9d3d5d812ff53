//! Guest instruction-set facts, decoded without touching hardware: what a
//! trap syndrome means, what an ID register should say. Portable so that
//! every decoder is tested on the host with hostile inputs.

pub mod arm64;
pub mod loongarch;
