//! The 32-bit Linux guest's assets (AArch32 VMs on arm64, issue 29):
//! Debian's armhf LPAE kernel (`linux-image-armmp-lpae` resolved to the
//! versioned package it depends on; its `boot/vmlinuz-*` is a zImage) and
//! `busybox-static` for armhf, from the same suite and mirror as the arm64
//! assets, with their own apt state and cache (`<cache>/armhf`); written to
//! `build/guests/linux-armhf/{zImage,initramfs.cpio.gz,ASSETS.txt}`. The
//! initramfs has the same `/init` and Linux test as the arm64 one (the FP
//! check on every CPU, then power-off) and the kernel's virtio modules
//! ([`ARMHF_VIRTIO_MODULES`]: virtio-mmio, the disk, the console and the
//! network; the kernel has the virtio core built in), which `/init` loads
//! in their order. No ext4 root image: a 32-bit VM's disk is tested as a
//! raw device (`kestrel.disk=`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kestrel_abi::image::ZImage;

use super::apt::need_tools;
use super::apt::{
    candidate, check_cached_debs, deb_member, debian_mirror, debian_suite, dependency, download,
    drop_other_debs, extract_member, parse_manifest, record, render_manifest, sha256, show, update,
};
use super::initramfs::build_initramfs;
use super::modules::{extract_modules_of, kernel_release, ARMHF_VIRTIO_MODULES, EM_ARM};
use super::{mkdir, say};

/// The meta package naming the current LPAE kernel.
const KERNEL_META: &str = "linux-image-armmp-lpae";
/// The static busybox (armhf).
const BUSYBOX: &str = "busybox-static";
/// The manifest keys of the two packages.
const KEYS: &[&str] = &["kernel", "busybox"];

/// The built 32-bit guest files.
#[derive(Clone, Debug)]
pub struct ArmhfAssets {
    /// The armhf kernel, a zImage.
    pub zimage: PathBuf,
    /// gzip-compressed `newc` cpio archive.
    pub initramfs: PathBuf,
    /// Kernel package and version.
    pub kernel: String,
}

/// Where the files are written.
pub fn out_dir() -> PathBuf {
    crate::root().join("build/guests/linux-armhf")
}

/// A 32-bit little-endian ARM ELF executable (e_machine 40) without a
/// program interpreter.
fn check_static_arm_elf(path: &Path) -> Result<(), String> {
    let d = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: &str| Err(format!("{}: {why}", path.display()));
    if d.len() < 52 || !d.starts_with(b"\x7fELF\x01\x01") {
        return bad("not a 32-bit little-endian ELF");
    }
    let half = |o: usize| u16::from_le_bytes([d[o], d[o + 1]]);
    let word = |o: usize| u32::from_le_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]) as usize;
    if half(16) != 2 || half(18) != 40 {
        return bad("not an ARM executable (e_type 2, e_machine 40)");
    }
    let (phoff, phentsize, phnum) = (word(28), half(42) as usize, half(44) as usize);
    for i in 0..phnum {
        let o = phoff + i * phentsize;
        if o + 4 > d.len() {
            return bad("program headers outside the file");
        }
        if word(o) == 3 {
            return bad("dynamically linked (has PT_INTERP): need a static busybox");
        }
    }
    Ok(())
}

/// Fetches (or reuses) the packages and builds the files.
pub fn ensure(refresh: bool) -> Result<ArmhfAssets, String> {
    let t0 = Instant::now();
    need_tools()?;
    let cache = super::cache_dir().join("armhf");
    let debs = cache.join("debs");
    mkdir(&debs)?;
    let suite = debian_suite();
    let manifest_path = cache.join("manifest.txt");
    let cached = if refresh {
        None
    } else {
        std::fs::read_to_string(&manifest_path)
            .ok()
            .map(|t| parse_manifest(&t))
            .and_then(|m| match check_cached_debs(&m, &debs, &suite, KEYS) {
                Ok(()) => Some(m),
                Err(why) => {
                    say(&format!("armhf cache not usable ({why}): fetching again"));
                    None
                }
            })
    };
    let m = match cached {
        Some(m) => {
            say(&format!(
                "[armhf 1/3] using the cache in {} ({} {}, {BUSYBOX} {})",
                cache.display(),
                m["kernel_package"],
                m["kernel_version"],
                m["busybox_version"]
            ));
            m
        }
        None => {
            let m = fetch(&cache, &debs, &suite)?;
            std::fs::write(&manifest_path, render_manifest(&m))
                .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
            m
        }
    };
    let out = out_dir();
    mkdir(&out)?;
    say("[armhf 2/3] extracting the zImage and busybox");
    let kernel_deb = debs.join(&m["kernel_deb"]);
    let zimage = out.join("zImage");
    // The zImage extracted last time, if it is still that package's.
    let last = std::fs::read_to_string(out.join("ASSETS.txt"))
        .map(|t| parse_manifest(&t))
        .unwrap_or_default();
    let member = match last.get("kernel_member") {
        Some(member)
            if last.get("kernel_sha256") == m.get("kernel_sha256")
                && zimage.is_file()
                && sha256(&zimage).ok().as_ref() == last.get("zimage_sha256") =>
        {
            member.clone()
        }
        _ => {
            let member = deb_member(&kernel_deb, "./boot/vmlinuz-")?;
            extract_member(&kernel_deb, &member, &zimage)?;
            member
        }
    };
    let data = std::fs::read(&zimage).map_err(|e| format!("{}: {e}", zimage.display()))?;
    ZImage::parse(&data).map_err(|e| format!("{}: not a zImage: {e}", zimage.display()))?;
    let busybox = out.join("busybox");
    extract_member(&debs.join(&m["busybox_deb"]), "./bin/busybox", &busybox)?;
    check_static_arm_elf(&busybox)?;
    let release = kernel_release(&member)
        .ok_or_else(|| format!("{member}: no kernel release in the name"))?
        .to_string();
    say(&format!(
        "[armhf 3/3] building the initramfs (cpio -H newc, gzip) with {} virtio modules of {release}",
        ARMHF_VIRTIO_MODULES.len()
    ));
    let initramfs = out.join("initramfs.cpio.gz");
    build_initramfs(
        &busybox,
        |staging| {
            extract_modules_of(
                &kernel_deb,
                &release,
                staging,
                &ARMHF_VIRTIO_MODULES,
                EM_ARM,
            )
        },
        &out.join("initramfs.d"),
        &initramfs,
    )?;
    let mut info = m.clone();
    info.insert("kernel_member".into(), member.clone());
    info.insert("zimage_sha256".into(), sha256(&zimage)?);
    info.insert("initramfs_sha256".into(), sha256(&initramfs)?);
    std::fs::write(out.join("ASSETS.txt"), render_manifest(&info))
        .map_err(|e| format!("{}: {e}", out.join("ASSETS.txt").display()))?;
    say(&format!(
        "armhf done in {:.1} s: {} ({:.1} MiB, {} from {} {}), {}",
        t0.elapsed().as_secs_f64(),
        zimage.display(),
        data.len() as f64 / 1048576.0,
        member.trim_start_matches("./"),
        m["kernel_package"],
        m["kernel_version"],
        initramfs.display()
    ));
    Ok(ArmhfAssets {
        zimage,
        initramfs,
        kernel: format!("{} {}", m["kernel_package"], m["kernel_version"]),
    })
}

/// `apt-get update` of the armhf lists, the kernel behind the meta package
/// and busybox resolved, downloaded and checked against the signed apt
/// metadata.
fn fetch(cache: &Path, debs: &Path, suite: &str) -> Result<BTreeMap<String, String>, String> {
    let mirror = debian_mirror();
    let sources = format!(
        "# written by `cargo xtask guest-assets` (armhf)\n\
         deb {mirror}/debian {suite} main\n\
         deb {mirror}/debian {suite}-updates main\n\
         deb {mirror}/debian-security {suite}-security main\n"
    );
    let opts = update(
        cache,
        "armhf",
        &sources,
        "[armhf 1/3]",
        &format!("Debian {suite} armhf"),
    )?;
    let meta = candidate(&opts, KERNEL_META)?;
    let (kname, kver) = dependency(&meta, |n| n.starts_with("linux-image-") && n != KERNEL_META)
        .ok_or_else(|| {
            format!(
                "{KERNEL_META} {}: no linux-image-* dependency (Debian changed the meta package?)",
                meta.version
            )
        })?;
    let kernel = show(&opts, &kname, kver.as_deref())?;
    let busybox = candidate(&opts, BUSYBOX)?;
    say(&format!(
        "      {KERNEL_META} {} -> {} {}; {BUSYBOX} {}",
        meta.version, kernel.name, kernel.version, busybox.version
    ));
    download(&opts, debs, &[&kernel, &busybox])?;
    let mut m = BTreeMap::new();
    record(&mut m, "kernel", debs, &kernel)?;
    record(&mut m, "busybox", debs, &busybox)?;
    m.insert("kernel_meta_version".into(), meta.version.clone());
    m.insert("suite".into(), suite.to_string());
    m.insert("mirror".into(), mirror);
    drop_other_debs(debs, &m, KEYS);
    Ok(m)
}

/// The VMs of `configs/linux-juno-mix.toml`, each with a raw disk image.
pub const MIX_VMS: [&str; 4] = ["a32a", "a32b", "a64a", "a64b"];
/// Where their images go (`<vm>.img`), below the workspace.
pub const MIX_DISKS: &str = "build/guests/juno-mix";

/// The label on the first line of `vm`'s raw disk in the Juno mix.
pub fn mix_label(vm: &str) -> String {
    format!("kestrel juno-mix disk of {vm}")
}

/// Writes the Juno mix's raw disk images ([`MIX_VMS`]): each 1 MiB, its
/// label and a newline, then zeros. Every run starts from these (a VM's
/// writes stay in kestrel's copy), so the guest always finds its label.
pub fn write_mix_disks() -> Result<(), String> {
    let dir = crate::root().join(MIX_DISKS);
    mkdir(&dir)?;
    for vm in MIX_VMS {
        let mut img = format!("{}\n", mix_label(vm)).into_bytes();
        img.resize(1 << 20, 0);
        let path = dir.join(format!("{vm}.img"));
        if std::fs::read(&path).ok().as_deref() != Some(&img[..]) {
            std::fs::write(&path, img).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}
