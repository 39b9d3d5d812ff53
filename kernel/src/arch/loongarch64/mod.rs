//! LoongArch64 (root mode) support.
