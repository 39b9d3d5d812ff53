//! `cargo xtask firmware`: the boot firmware of real arm64 boards, as
//! Debian builds it for QEMU `virt`: U-Boot (`u-boot-qemu`,
//! `qemu_arm64/u-boot.bin`) and edk2 (`qemu-efi-aarch64`, `QEMU_EFI.fd`).
//! The firmware boot cases of `cargo xtask smoke` start kestrel through
//! them (docs/boards/juno.md).
//!
//! Fetched like the guest assets: apt with a private state under
//! `~/.cache/kestrel/firmware/` (or `$KESTREL_FIRMWARE_CACHE`), each `.deb`
//! checked against the SHA256 and size of the signed apt metadata and with
//! `dpkg-deb`; the extracted files are recorded with their SHA256 in
//! `manifest.txt` and reused while they still match.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::apt::{
    candidate, check_deb_fields, debian_suite, extract_member, need_tools, parse_manifest,
    render_manifest, sha256, update_lists, verify_deb,
};
use super::{mkdir, say};

/// One firmware file and the Debian package that holds it.
struct Blob {
    /// Manifest key and the file's name in the cache.
    key: &'static str,
    package: &'static str,
    /// Path inside the package's data archive.
    member: &'static str,
    /// Least plausible size (a truncated or wrong file is refused).
    min_size: u64,
}

const BLOBS: [Blob; 2] = [
    Blob {
        key: "u-boot.bin",
        package: "u-boot-qemu",
        member: "./usr/lib/u-boot/qemu_arm64/u-boot.bin",
        min_size: 256 << 10,
    },
    Blob {
        key: "QEMU_EFI.fd",
        package: "qemu-efi-aarch64",
        member: "./usr/share/qemu-efi-aarch64/QEMU_EFI.fd",
        min_size: 1 << 20,
    },
];

/// The fetched firmware files.
#[derive(Clone, Debug)]
pub struct Firmware {
    /// U-Boot for QEMU `virt` arm64 (`-bios`).
    pub u_boot: PathBuf,
    /// edk2 for QEMU `virt` arm64 (`-bios`).
    pub edk2: PathBuf,
    /// "u-boot-qemu 2023.01+dfsg-2+deb12u3, qemu-efi-aarch64 ..."
    pub versions: String,
}

/// Where the firmware is kept (not in git).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KESTREL_FIRMWARE_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| crate::root().join("build/cache"));
    base.join("kestrel/firmware")
}

fn result(dir: &Path, m: &BTreeMap<String, String>) -> Firmware {
    Firmware {
        u_boot: dir.join("u-boot.bin"),
        edk2: dir.join("QEMU_EFI.fd"),
        versions: BLOBS
            .iter()
            .map(|b| {
                format!(
                    "{} {}",
                    b.package,
                    m.get(&format!("{}_version", b.package))
                        .map_or("?", String::as_str)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Is the cache complete and intact: every package of the suite wanted,
/// its `.deb` matching the recorded SHA256, each file extracted from it
/// matching its own.
fn check_cached(m: &BTreeMap<String, String>, dir: &Path) -> Result<(), String> {
    let suite = debian_suite();
    if m.get("suite") != Some(&suite) {
        return Err(format!(
            "it holds Debian {:?}, {suite:?} is wanted",
            m.get("suite").map_or("?", String::as_str)
        ));
    }
    for b in &BLOBS {
        let field = |f: &str| {
            m.get(&format!("{}_{f}", b.package))
                .ok_or_else(|| format!("manifest lacks {}_{f}", b.package))
        };
        let deb = dir.join("debs").join(field("deb")?);
        if !deb.is_file() {
            return Err(format!("{} is missing", deb.display()));
        }
        if sha256(&deb)? != *field("sha256")? {
            return Err(format!("{} does not match its SHA256", deb.display()));
        }
        check_deb_fields(&deb, b.package, field("version")?, "all")?;
        let file = dir.join(b.key);
        let want = m
            .get(&format!("{}_sha256", b.key))
            .ok_or_else(|| format!("manifest lacks {}_sha256", b.key))?;
        if !file.is_file() || sha256(&file)? != *want {
            return Err(format!("{} is missing or changed", file.display()));
        }
    }
    Ok(())
}

/// Fetches (or reuses) U-Boot and edk2 for QEMU `virt` arm64.
pub fn ensure(refresh: bool) -> Result<Firmware, String> {
    need_tools()?;
    let dir = cache_dir();
    let debs = dir.join("debs");
    mkdir(&debs)?;
    let manifest_path = dir.join("manifest.txt");
    if !refresh {
        if let Ok(text) = std::fs::read_to_string(&manifest_path) {
            let m = parse_manifest(&text);
            match check_cached(&m, &dir) {
                Ok(()) => return Ok(result(&dir, &m)),
                Err(why) => say(&format!(
                    "firmware cache not usable ({why}): fetching again"
                )),
            }
        }
    }
    let (opts, suite) = update_lists(&dir, "[firmware 1/3]")?;
    say("[firmware 2/3] resolving and downloading u-boot-qemu and qemu-efi-aarch64");
    let mut pkgs = Vec::new();
    for b in &BLOBS {
        let pkg = candidate(&opts, b.package).map_err(|e| {
            format!(
                "{e}\n    firmware package {} is needed for the U-Boot/UEFI boot cases; \
                 Debian {suite} has it (KESTREL_DEBIAN_SUITE changes the suite)",
                b.package
            )
        })?;
        pkgs.push(pkg);
    }
    let status = std::process::Command::new("apt-get")
        .args(&opts)
        .args(["-q", "download"])
        .args(pkgs.iter().map(|p| format!("{}={}", p.name, p.version)))
        .current_dir(&debs)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run apt-get download: {e}"))?;
    if !status.success() {
        return Err(format!(
            "apt-get download {} failed ({status})",
            pkgs.iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    say("[firmware 3/3] checking the packages and extracting the firmware");
    let mut m = BTreeMap::new();
    m.insert("suite".to_string(), suite);
    for (b, pkg) in BLOBS.iter().zip(&pkgs) {
        let file = verify_deb(&debs, pkg)?;
        let deb = debs.join(&file);
        let out = dir.join(b.key);
        extract_member(&deb, b.member, &out).map_err(|e| {
            format!(
                "{e}: {} {} does not hold {} (Debian moved it?)",
                pkg.name, pkg.version, b.member
            )
        })?;
        let len = std::fs::metadata(&out)
            .map_err(|e| format!("{}: {e}", out.display()))?
            .len();
        if len < b.min_size {
            return Err(format!(
                "{}: {len} bytes from {} {}: too small for firmware (a symlink or stub?)",
                out.display(),
                pkg.name,
                pkg.version
            ));
        }
        m.insert(format!("{}_version", b.package), pkg.version.clone());
        m.insert(format!("{}_deb", b.package), file);
        m.insert(format!("{}_sha256", b.package), pkg.sha256.clone());
        m.insert(format!("{}_sha256", b.key), sha256(&out)?);
        say(&format!(
            "      {} ({len} bytes) from {} {}",
            out.display(),
            pkg.name,
            pkg.version
        ));
    }
    // Drop older downloads.
    if let Ok(rd) = std::fs::read_dir(&debs) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !m.values().any(|v| *v == name) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    std::fs::write(&manifest_path, render_manifest(&m))
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    Ok(result(&dir, &m))
}

/// `cargo xtask firmware [--refresh]`.
pub fn command(args: &[String]) -> Result<(), String> {
    let mut refresh = false;
    for a in args {
        match a.as_str() {
            "--refresh" => refresh = true,
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask firmware [--refresh]\n\
                     Fetches Debian's u-boot-qemu and qemu-efi-aarch64 with apt (cache: {}),\n\
                     checks them and prints the paths of u-boot.bin and QEMU_EFI.fd.\n\
                     --refresh  resolve and download the current versions even if the cache is valid",
                    cache_dir().display()
                );
                return Ok(());
            }
            other => return Err(format!("firmware: unknown option '{other}' (try --help)")),
        }
    }
    let fw = ensure(refresh)?;
    println!("{}", fw.u_boot.display());
    println!("{}", fw.edk2.display());
    Ok(())
}
