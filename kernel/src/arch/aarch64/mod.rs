//! arm64 (EL2) support.
