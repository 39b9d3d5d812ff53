//! Links the guest as a position-independent executable with its own linker
//! script: the same raw binary runs wherever it is loaded (kestrel puts a
//! test guest at the start of guest RAM, bare QEMU puts an `Image` 2 MiB in)
//! and relocates itself at entry (`src/start.S`).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=src/start.S");
    if target.starts_with("aarch64") && target.contains("-none") {
        for arg in [
            format!("-T{dir}/link.ld"),
            "-pie".into(),
            "--no-dynamic-linker".into(),
            "-znotext".into(),
        ] {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}
