//! The test guests' builds: the arm64 test guest (`tools/guests/arm64-test`,
//! docs/test-guest.md) and the LoongArch one
//! (`tools/guests/loongarch64-test`, docs/test-guest-loongarch.md), which
//! the bare-QEMU smoke cases, the VM suites, the firmware boot cases, the
//! configs case and the benchmarks boot.

use std::path::PathBuf;
use std::process::Command;

use crate::root;

/// Builds test guest `package` (binary `bin`) for `target` with cargo, the
/// core library too when `build_std` (no prebuilt one for the target);
/// returns the ELF (`target/<target>/release/<bin>`).
pub fn build_guest(
    package: &str,
    bin: &str,
    target: &str,
    build_std: bool,
) -> Result<PathBuf, String> {
    let root = root();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&root)
        .args(["build", "--release", "-p", package, "--target", target])
        .env("RUSTC_BOOTSTRAP", crate::RELEASE_BOOTSTRAP);
    if build_std {
        cmd.args([
            "-Zbuild-std=core",
            "-Zbuild-std-features=compiler-builtins-mem",
        ]);
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building the test guest {package} failed"));
    }
    let elf = root.join("target").join(target).join("release").join(bin);
    if !elf.exists() {
        return Err(format!("{}: missing after the build", elf.display()));
    }
    Ok(elf)
}

/// The arm64 guest's target: hard float, so it may use the FP/SIMD registers.
const ARM64_TARGET: &str = "aarch64-unknown-none";
const ARM64_PACKAGE: &str = "kestrel-guest-arm64-test";
const ARM64_BIN: &str = "arm64-test";

/// Builds the arm64 guest for `aarch64-unknown-none` and flattens it into
/// `build/guests/arm64-test.bin` (an arm64 `Image`, which QEMU `-kernel`
/// loads and which the configs name with `kind = "test-guest"`); returns
/// that file.
pub fn build_guest_arm64() -> Result<PathBuf, String> {
    let elf = build_guest(ARM64_PACKAGE, ARM64_BIN, ARM64_TARGET, false)?;
    let out_dir = root().join("build/guests");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let bin = out_dir.join("arm64-test.bin");
    let status = Command::new(crate::llvm_tool("llvm-objcopy")?)
        .args(["-O", "binary"])
        .arg(&elf)
        .arg(&bin)
        .status()
        .map_err(|e| format!("cannot run llvm-objcopy: {e}"))?;
    if !status.success() {
        return Err("llvm-objcopy of the arm64 test guest failed".into());
    }
    write_ballast(&out_dir.join(BALLAST))?;
    write_guest_aarch32(&out_dir.join(AARCH32_BIN))?;
    Ok(bin)
}

/// The AArch32 test guest (`tools/guests/aarch32-test/guest.S`, assembled
/// into [`crate::guest32_words::WORDS`] by its `assemble.sh`), written next
/// to the arm64 one; configs name it with `arch = "aarch32"` and
/// `kind = "test-guest"`.
pub const AARCH32_BIN: &str = "aarch32-test.bin";

/// The AArch32 attacker of the hostile case (`tools/guests/aarch32-test/attack.S`,
/// [`crate::guest32_words::ATTACK_WORDS`]), written next to it.
pub const AARCH32_ATTACK_BIN: &str = "aarch32-attack.bin";

/// Writes the AArch32 test guest alone (for its bare-QEMU case); returns
/// `build/guests/aarch32-test.bin`.
pub fn build_guest_aarch32() -> Result<PathBuf, String> {
    let out_dir = root().join("build/guests");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let bin = out_dir.join(AARCH32_BIN);
    write_guest_aarch32(&bin)?;
    Ok(bin)
}

/// Writes the AArch32 test guest to `path` and the attacker beside it.
fn write_guest_aarch32(path: &std::path::Path) -> Result<(), String> {
    write_words(path, crate::guest32_words::WORDS)?;
    write_words(
        &path.with_file_name(AARCH32_ATTACK_BIN),
        crate::guest32_words::ATTACK_WORDS,
    )
}

fn write_words(path: &std::path::Path, words: &[u32]) -> Result<(), String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if std::fs::read(path).is_ok_and(|b| b == bytes) {
        return Ok(());
    }
    std::fs::write(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// An initrd of [`BALLAST_BYTES`] that no guest reads, for cases where a
/// VM's images must be big (`configs/test/arm64-resetrace.toml`: every
/// restart copies it in again).
pub const BALLAST: &str = "ballast-64m.bin";
pub const BALLAST_BYTES: usize = 64 << 20;

/// Writes the ballast (pseudo-random bytes, the same each time) unless it
/// is there with its size.
fn write_ballast(path: &std::path::Path) -> Result<(), String> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == BALLAST_BYTES as u64) {
        return Ok(());
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut data = Vec::with_capacity(BALLAST_BYTES);
    while data.len() < BALLAST_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, &data).map_err(|e| format!("{}: {e}", path.display()))
}

/// The LoongArch guest's target: hard float, so it may use FP and LSX
/// registers.
const LA64_TARGET: &str = "loongarch64-unknown-none";
/// The LoongArch guest's crate and binary.
const LA64_PACKAGE: &str = "kestrel-guest-loongarch64-test";
const LA64_BIN: &str = "loongarch64-test";

/// Builds the LoongArch guest (with `-Zbuild-std`); returns its ELF
/// (`target/loongarch64-unknown-none/release/loongarch64-test`), which QEMU
/// `-kernel` and kestrel's `kind = "test-guest"` both load.
pub fn build_guest_la64() -> Result<PathBuf, String> {
    build_guest(LA64_PACKAGE, LA64_BIN, LA64_TARGET, true)
}
