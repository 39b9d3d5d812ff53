//! The kestrel package embedded in the firmware: the VMs of the config given
//! to `make image CONFIG=file` (format: `kestrel_abi::package`).
//!
//! `build.rs` copies the package named by `KESTREL_PACKAGE` (set by
//! `cargo xtask image --config FILE`), or writes an empty one, to
//! `OUT_DIR/package.bin`; it is included here 4 KiB-aligned so the guest
//! images inside it (4 KiB-aligned within the package) stay page-aligned in
//! memory and can be mapped or copied by whole pages.

/// A 4 KiB-aligned wrapper; `T` is the byte array.
#[repr(C, align(4096))]
struct Aligned<T: ?Sized>(T);

static PACKAGE: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/package.bin")));

/// The package bytes.
pub fn bytes() -> &'static [u8] {
    &PACKAGE.0
}

/// Hands the package to the kernel (`kernel::vmm::vmconfig::package`). Called
/// once on the boot CPU during early init.
pub fn register() {
    kernel::vmm::vmconfig::set_package(bytes());
}
