//! The arm64 guest's assets: which Debian packages hold the kernel and the
//! busybox, and the checks of the extracted files.

use std::path::Path;

use kestrel_abi::image::{Arm64Image, Elf, EM_AARCH64, ET_EXEC};

/// The meta package that names the current cloud kernel.
pub(super) const KERNEL_META: &str = "linux-image-cloud-arm64";

/// The static busybox.
pub(super) const BUSYBOX: &str = "busybox-static";

/// An uncompressed arm64 Linux `Image`: magic `ARM\x64` at 0x38.
pub fn check_arm64_image(path: &Path) -> Result<(), String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Arm64Image::parse(&data)
        .map(|_| ())
        .map_err(|e| format!("{}: not an uncompressed arm64 Image ({e})", path.display()))
}

/// A 64-bit little-endian aarch64 ELF executable without a program
/// interpreter (static).
pub fn check_static_aarch64_elf(path: &Path) -> Result<(), String> {
    let d = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: &str| Err(format!("{}: {why}", path.display()));
    let elf = match Elf::parse(&d) {
        Ok(elf) => elf,
        Err(e) => return bad(&e.to_string()),
    };
    if elf.machine() != EM_AARCH64 {
        return bad(&format!(
            "e_machine {} is not aarch64 ({EM_AARCH64})",
            elf.machine()
        ));
    }
    if elf.kind() != ET_EXEC {
        return bad("not an executable (ET_EXEC)");
    }
    if elf.has_interpreter() {
        return bad("dynamically linked (has PT_INTERP): need a static busybox");
    }
    Ok(())
}
