//! Links the firmware with the linker script of the target architecture, and
//! stages the VM package it embeds (`src/package.rs`).
use std::path::PathBuf;

fn main() {
    embed_package();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap();
    if os != "none" {
        return;
    }
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
    let script = root.join("linker").join(format!("{arch}.ld"));
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rustc-link-arg-bins=-T{}", script.display());
}

/// Copies the package named by `KESTREL_PACKAGE` (written by
/// `cargo xtask image --config FILE`) to `OUT_DIR/package.bin`, or writes an
/// empty package when the variable is unset or empty.
fn embed_package() {
    println!("cargo:rerun-if-env-changed=KESTREL_PACKAGE");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("package.bin");
    let bytes = match std::env::var_os("KESTREL_PACKAGE").filter(|p| !p.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            println!("cargo:rerun-if-changed={}", path.display());
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("KESTREL_PACKAGE={}: {e}", path.display()));
            if let Err(e) = kestrel_abi::package::Package::parse(&bytes) {
                panic!("KESTREL_PACKAGE={}: {e}", path.display());
            }
            bytes
        }
        None => kestrel_abi::package::Writer::new(Default::default()).finish(),
    };
    // Rewrite only on change, so an unchanged package does not relink.
    if std::fs::read(&out).ok().as_deref() != Some(&bytes[..]) {
        std::fs::write(&out, &bytes).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    }
}
