//! A static, non-PIE Linux executable when built for bare metal
//! (`loongarch64-unknown-none`): linked at a user address with `_start` as
//! its entry. A host build (workspace `cargo check`) gets an empty `main`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=--image-base=0x10000000");
        println!("cargo:rustc-link-arg-bins=--entry=_start");
        println!("cargo:rustc-link-arg-bins=-znoexecstack");
    }
}
