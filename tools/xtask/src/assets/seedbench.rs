//! `/bin/kestrel-seedbench` of the test initramfs: the seeds' workloads
//! (`tools/guests/seedbench`, hackbench-style pipes, FP burst+sleep, futex
//! wake-all), a static Linux program built here for
//! `aarch64-unknown-linux-musl` (rustup ships its std; the pinned toolchain
//! lists the target) and linked with the toolchain's `rust-lld`. The
//! LoongArch initramfs gets `tools/guests/seedbench-nostd` instead, the same
//! workloads on raw syscalls, built for `loongarch64-unknown-none` (hard
//! float) with `-Zbuild-std=core` and linked as a static non-PIE executable
//! ([`build_la64`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{llvm_tool, root};

/// The Rust target of the guest program.
pub const TARGET: &str = "aarch64-unknown-linux-musl";

/// Builds the program and returns a stripped copy in `build/guests/`.
pub fn build() -> Result<PathBuf, String> {
    let root = root();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER", "rust-lld")
        .env("RUSTC_BOOTSTRAP", crate::RELEASE_BOOTSTRAP)
        .args(["build", "--release", "-q", "-p", "kestrel-seedbench"])
        .args(["--target", TARGET])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building kestrel-seedbench for {TARGET} failed (is the target installed? \
             `rustup target add {TARGET}` or `make setup`)"
        ));
    }
    let built = root
        .join("target")
        .join(TARGET)
        .join("release/kestrel-seedbench");
    let out = root.join("build/guests/kestrel-seedbench-aarch64");
    strip(&built, &out)?;
    super::arm64::check_static_aarch64_elf(&out)?;
    Ok(out)
}

/// The target of the LoongArch build (hard float: the FP workload).
pub const TARGET_LA64: &str = "loongarch64-unknown-none";

/// Builds the LoongArch program and returns a stripped copy in
/// `build/guests/`.
pub fn build_la64() -> Result<PathBuf, String> {
    let root = root();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .env("RUSTC_BOOTSTRAP", crate::RELEASE_BOOTSTRAP)
        .args(["build", "--release", "-q", "-p", "kestrel-seedbench-nostd"])
        .args(["--target", TARGET_LA64])
        .args([
            "-Zbuild-std=core",
            "-Zbuild-std-features=compiler-builtins-mem",
        ])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building kestrel-seedbench-nostd for {TARGET_LA64} failed"
        ));
    }
    let built = root
        .join("target")
        .join(TARGET_LA64)
        .join("release/kestrel-seedbench-nostd");
    let out = root.join("build/guests/kestrel-seedbench-loongarch64");
    strip(&built, &out)?;
    Ok(out)
}

fn strip(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(d) = to.parent() {
        super::mkdir(d)?;
    }
    let status = Command::new(llvm_tool("llvm-objcopy")?)
        .arg("--strip-all")
        .arg(from)
        .arg(to)
        .status()
        .map_err(|e| format!("cannot run llvm-objcopy: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "llvm-objcopy --strip-all {} failed",
            from.display()
        ))
    }
}

/// Puts the program into an initramfs tree as `/bin/kestrel-seedbench`.
pub fn install(program: &Path, tree: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dest = tree.join("bin/kestrel-seedbench");
    std::fs::copy(program, &dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", dest.display()))
}
