//! The LoongArch guest's assets (`cargo xtask guest-assets --arch
//! loongarch64`): Debian sid's loong64 kernel, its virtio-mmio, block, net
//! and ext4 modules, and busybox; the same test initramfs as arm64 (with
//! those modules) and the same ext4 root filesystem image of it; and Debian
//! trixie's edk2 firmware for `qemu-system-loongarch64 -M virt` (the
//! bare-QEMU case boots the kernel under it: UEFI and ACPI, as on a real
//! machine).
//!
//! Two private apt states under the asset cache: `loong64/` (sid, loong64:
//! `linux-image-loong64` -> `linux-image-<v>-loong64` ->
//! `linux-binary-<v>-loong64`, whose `vmlinuz` is an EFI zboot image, and
//! `linux-modules-<v>-loong64`; `busybox-static`) and `edk2-loongarch64/`
//! (trixie, `qemu-efi-loongarch64`, an `all` package: the lists of one
//! architecture name it). Each `.deb` is checked against the signed apt
//! metadata as for arm64. Output in `build/guests/linux-loong64/`:
//! `vmlinuz` (as Debian ships it), `vmlinux.efi` (its unpacked zstd
//! payload, checked as a LoongArch Linux image), `initramfs.cpio.gz`,
//! `rootfs.ext4`, `QEMU_EFI.fd`, `ASSETS.txt`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kestrel_abi::image::{Elf, EM_LOONGARCH, ET_EXEC};

use super::apt::{
    candidate, check_cached_debs, deb_member_where, debian_mirror, dependency, download,
    drop_other_debs, extract_member, need_tools, parse_manifest, record, render_manifest, sha256,
    show, update,
};
use super::initramfs::build_initramfs;
use super::modules::{extract_modules_la64, module_name, LA64_VIRTIO_MODULES};
use super::rootfs::ensure_rootfs;
use super::{cache_dir, mkdir, say};

/// The meta package naming the current loong64 kernel.
const KERNEL_META: &str = "linux-image-loong64";
/// The static busybox.
const BUSYBOX: &str = "busybox-static";
/// The edk2 firmware for QEMU's LoongArch `virt` machine.
const FIRMWARE: &str = "qemu-efi-loongarch64";
/// The firmware file in that package.
const FIRMWARE_MEMBER: &str = "./usr/share/qemu-efi-loongarch64/QEMU_EFI.fd";
/// Debian suite of the kernel and busybox (loong64 is in sid only).
const SUITE: &str = "sid";
/// Debian suite of the firmware.
const FIRMWARE_SUITE: &str = "trixie";

/// The built LoongArch guest files.
#[derive(Clone, Debug)]
pub struct Loong64Assets {
    /// Debian's `vmlinuz` as shipped (EFI zboot, zstd).
    pub vmlinuz: PathBuf,
    /// Its unpacked payload (the kernel image proper).
    pub image: PathBuf,
    /// gzip-compressed `newc` cpio archive with the Linux test as `/init`
    /// and the virtio modules.
    pub initramfs: PathBuf,
    /// ext4 image of the same tree (a root disk).
    pub rootfs: PathBuf,
    /// edk2 for `qemu-system-loongarch64 -M virt` (`-bios`).
    pub firmware: PathBuf,
    /// Kernel package and version.
    pub kernel: String,
}

/// Where the LoongArch guest files are written.
pub fn out_dir() -> PathBuf {
    crate::root().join("build/guests/linux-loong64")
}

/// The built files, if they all exist.
pub fn built() -> Option<Loong64Assets> {
    let dir = out_dir();
    let m = std::fs::read_to_string(dir.join("ASSETS.txt"))
        .map(|t| parse_manifest(&t))
        .unwrap_or_default();
    let a = Loong64Assets {
        vmlinuz: dir.join("vmlinuz"),
        image: dir.join("vmlinux.efi"),
        initramfs: dir.join("initramfs.cpio.gz"),
        rootfs: dir.join("rootfs.ext4"),
        firmware: dir.join("QEMU_EFI.fd"),
        kernel: match (m.get("kernel_package"), m.get("kernel_version")) {
            (Some(p), Some(v)) => format!("{p} {v}"),
            _ => "unknown kernel".into(),
        },
    };
    [&a.vmlinuz, &a.image, &a.initramfs, &a.rootfs, &a.firmware]
        .iter()
        .all(|p| p.is_file())
        .then_some(a)
}

/// The cached manifest of `cache` if its `.deb` files are intact.
fn cached(cache: &Path, suite: &str, keys: &[&str]) -> Option<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(cache.join("manifest.txt")).ok()?;
    let m = parse_manifest(&text);
    match check_cached_debs(&m, &cache.join("debs"), suite, keys) {
        Ok(()) => Some(m),
        Err(why) => {
            say(&format!(
                "cache {} not usable ({why}): fetching again",
                cache.display()
            ));
            None
        }
    }
}

fn save_manifest(cache: &Path, m: &BTreeMap<String, String>) -> Result<(), String> {
    let p = cache.join("manifest.txt");
    std::fs::write(&p, render_manifest(m)).map_err(|e| format!("{}: {e}", p.display()))
}

/// sid loong64: the kernel binary and modules packages and busybox-static.
fn fetch_guest(cache: &Path) -> Result<BTreeMap<String, String>, String> {
    let debs = cache.join("debs");
    mkdir(&debs)?;
    let mirror = debian_mirror();
    let sources = format!(
        "# written by `cargo xtask guest-assets --arch loongarch64`\n\
         deb {mirror}/debian {SUITE} main\n"
    );
    let opts = update(cache, "loong64", &sources, "[1/4]", "Debian sid loong64")?;
    say(&format!("[2/4] resolving {KERNEL_META} and {BUSYBOX}"));
    let meta = candidate(&opts, KERNEL_META)?;
    let (iname, iver) = dependency(&meta, |n| n.starts_with("linux-image-") && n != KERNEL_META)
        .ok_or_else(|| {
            format!(
                "{KERNEL_META} {}: no linux-image-* dependency (Debian changed the meta package?)",
                meta.version
            )
        })?;
    let image_pkg = show(&opts, &iname, iver.as_deref())?;
    let (bname, bver) =
        dependency(&image_pkg, |n| n.starts_with("linux-binary-")).ok_or_else(|| {
            format!(
                "{iname}: no linux-binary-* dependency (the kernel is expected there since 7.x)"
            )
        })?;
    let kernel = show(&opts, &bname, bver.as_deref())?;
    let (mname, mver) =
        dependency(&image_pkg, |n| n.starts_with("linux-modules-")).ok_or_else(|| {
            format!("{iname}: no linux-modules-* dependency (the virtio-mmio, block and net modules are expected there)")
        })?;
    let modules = show(&opts, &mname, mver.as_deref())?;
    let busybox = candidate(&opts, BUSYBOX)?;
    say(&format!(
        "      {KERNEL_META} {} -> {iname} -> {} {}, {} {}; {BUSYBOX} {}",
        meta.version, kernel.name, kernel.version, modules.name, modules.version, busybox.version
    ));
    download(&opts, &debs, &[&kernel, &modules, &busybox])?;
    let mut m = BTreeMap::new();
    record(&mut m, "kernel", &debs, &kernel)?;
    record(&mut m, "modules", &debs, &modules)?;
    record(&mut m, "busybox", &debs, &busybox)?;
    m.insert("kernel_meta_version".into(), meta.version.clone());
    m.insert("suite".into(), SUITE.into());
    m.insert("mirror".into(), mirror);
    drop_other_debs(&debs, &m, &["kernel", "modules", "busybox"]);
    Ok(m)
}

/// trixie: the edk2 firmware package (architecture `all`; the arm64 lists
/// name it).
fn fetch_firmware(cache: &Path) -> Result<BTreeMap<String, String>, String> {
    let debs = cache.join("debs");
    mkdir(&debs)?;
    let mirror = debian_mirror();
    let sources = format!(
        "# written by `cargo xtask guest-assets --arch loongarch64`\n\
         deb {mirror}/debian {FIRMWARE_SUITE} main\n"
    );
    let opts = update(
        cache,
        "arm64",
        &sources,
        "[1/4]",
        "Debian trixie (for edk2)",
    )?;
    let fw = candidate(&opts, FIRMWARE)?;
    if fw.arch() != "all" {
        return Err(format!(
            "{FIRMWARE} {} is for {}, expected an `all` package",
            fw.version,
            fw.arch()
        ));
    }
    download(&opts, &debs, &[&fw])?;
    let mut m = BTreeMap::new();
    record(&mut m, "firmware", &debs, &fw)?;
    m.insert("suite".into(), FIRMWARE_SUITE.into());
    m.insert("mirror".into(), mirror);
    drop_other_debs(&debs, &m, &["firmware"]);
    Ok(m)
}

/// A static LoongArch ELF executable.
fn check_static_loongarch_elf(path: &Path) -> Result<(), String> {
    let d = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: String| Err(format!("{}: {why}", path.display()));
    let elf = match Elf::parse(&d) {
        Ok(e) => e,
        Err(e) => return bad(e.to_string()),
    };
    if elf.machine() != EM_LOONGARCH {
        return bad(format!("e_machine {} is not LoongArch", elf.machine()));
    }
    if elf.kind() != ET_EXEC || elf.has_interpreter() {
        return bad("not a static executable".into());
    }
    Ok(())
}

/// The cached edk2 package's manifest, fetched when missing or `refresh`.
fn firmware_manifest(refresh: bool) -> Result<(PathBuf, BTreeMap<String, String>), String> {
    let fcache = cache_dir().join("edk2-loongarch64");
    let fw = match (refresh, cached(&fcache, FIRMWARE_SUITE, &["firmware"])) {
        (false, Some(m)) => m,
        _ => {
            let m = fetch_firmware(&fcache)?;
            save_manifest(&fcache, &m)?;
            m
        }
    };
    Ok((fcache, fw))
}

/// Only the edk2 firmware for `qemu-system-loongarch64 -M virt` (the
/// firmware boot cases of `cargo xtask smoke`): fetched like the guest
/// assets (or reused from the cache) and extracted to
/// `build/guests/linux-loong64/QEMU_EFI.fd`. Returns its path and
/// "package version".
pub fn ensure_firmware(refresh: bool) -> Result<(PathBuf, String), String> {
    let why = |e: String| {
        format!(
            "the LoongArch edk2 firmware ({FIRMWARE} from Debian {FIRMWARE_SUITE}) is not cached \
             and could not be fetched: {e}"
        )
    };
    need_tools().map_err(why)?;
    let (fcache, fw) = firmware_manifest(refresh).map_err(why)?;
    let out = out_dir();
    mkdir(&out)?;
    let firmware = out.join("QEMU_EFI.fd");
    let fdeb = fcache.join("debs").join(&fw["firmware_deb"]);
    extract_member(&fdeb, FIRMWARE_MEMBER, &firmware).map_err(why)?;
    let version = format!(
        "{FIRMWARE} {}",
        fw.get("firmware_version").map_or("?", String::as_str)
    );
    Ok((firmware, version))
}

/// Fetches (or reuses) the packages and builds the LoongArch guest files.
pub fn ensure(refresh: bool) -> Result<Loong64Assets, String> {
    let t0 = Instant::now();
    need_tools()?;
    let gcache = cache_dir().join("loong64");
    let guest = match (
        refresh,
        cached(&gcache, SUITE, &["kernel", "modules", "busybox"]),
    ) {
        (false, Some(m)) => {
            say(&format!(
                "[1/4] using the cache in {} ({} {}, {BUSYBOX} {})",
                gcache.display(),
                m["kernel_package"],
                m["kernel_version"],
                m["busybox_version"]
            ));
            m
        }
        _ => {
            let m = fetch_guest(&gcache)?;
            save_manifest(&gcache, &m)?;
            m
        }
    };
    let (fcache, fw) = firmware_manifest(refresh)?;
    let out = out_dir();
    mkdir(&out)?;
    say("[3/4] extracting vmlinuz (unpacking its zboot payload), busybox and QEMU_EFI.fd");
    let kdeb = gcache.join("debs").join(&guest["kernel_deb"]);
    let member = deb_member_where(&kdeb, "./usr/lib/modules/*/vmlinuz", |n| {
        n.starts_with("./usr/lib/modules/") && n.ends_with("/vmlinuz")
    })?;
    let vmlinuz = out.join("vmlinuz");
    extract_member(&kdeb, &member, &vmlinuz)?;
    let data = std::fs::read(&vmlinuz).map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
    let (image_bytes, header) = crate::zboot::loongarch_kernel(&vmlinuz, data)?;
    let image = out.join("vmlinux.efi");
    std::fs::write(&image, &image_bytes).map_err(|e| format!("{}: {e}", image.display()))?;
    let busybox = out.join("busybox");
    let bdeb = gcache.join("debs").join(&guest["busybox_deb"]);
    // bookworm has ./bin/busybox, sid (merged /usr) ./usr/bin/busybox.
    let bmember = deb_member_where(&bdeb, "bin/busybox", |n| {
        n == "./bin/busybox" || n == "./usr/bin/busybox"
    })?;
    extract_member(&bdeb, &bmember, &busybox)?;
    check_static_loongarch_elf(&busybox)?;
    let firmware = out.join("QEMU_EFI.fd");
    let fdeb = fcache.join("debs").join(&fw["firmware_deb"]);
    extract_member(&fdeb, FIRMWARE_MEMBER, &firmware)?;
    // ./usr/lib/modules/<release>/vmlinuz
    let release = member
        .trim_end_matches("/vmlinuz")
        .rsplit('/')
        .next()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| format!("{member}: no kernel release in its path"))?
        .to_string();
    say(&format!(
        "[4/4] building the initramfs (cpio -H newc, gzip; the Linux test as /init, {} modules of {release}) and rootfs.ext4",
        LA64_VIRTIO_MODULES.len()
    ));
    let initramfs = out.join("initramfs.cpio.gz");
    let tree = out.join("initramfs.d");
    let mdeb = gcache.join("debs").join(&guest["modules_deb"]);
    let seedbench = super::seedbench::build_la64()?;
    check_static_loongarch_elf(&seedbench)?;
    build_initramfs(
        &busybox,
        |staging| {
            extract_modules_la64(&mdeb, &release, staging)?;
            super::seedbench::install(&seedbench, staging)
        },
        &tree,
        &initramfs,
    )?;
    let last = std::fs::read_to_string(out.join("ASSETS.txt"))
        .map(|t| parse_manifest(&t))
        .unwrap_or_default();
    let rootfs = out.join("rootfs.ext4");
    let (rootfs_inputs, rootfs_sha, _) = ensure_rootfs(
        &tree,
        &rootfs,
        last.get("rootfs_inputs_sha256"),
        last.get("rootfs_sha256"),
    )?;
    let mut info = guest.clone();
    info.insert("kernel_member".into(), member.clone());
    info.insert("kernel_release".into(), release.clone());
    info.insert(
        "modules".into(),
        LA64_VIRTIO_MODULES.map(module_name).join(","),
    );
    info.insert("rootfs_sha256".into(), rootfs_sha);
    info.insert("rootfs_inputs_sha256".into(), rootfs_inputs);
    info.insert("image_sha256".into(), sha256(&image)?);
    info.insert("image_entry".into(), format!("{:#x}", header.entry));
    info.insert(
        "image_text_offset".into(),
        format!("{:#x}", header.text_offset),
    );
    info.insert("image_size".into(), format!("{:#x}", header.image_size));
    info.insert("initramfs_sha256".into(), sha256(&initramfs)?);
    for (k, v) in &fw {
        if k.starts_with("firmware_") {
            info.insert(k.clone(), v.clone());
        }
    }
    info.insert("firmware_suite".into(), fw["suite"].clone());
    info.insert("firmware_sha256_file".into(), sha256(&firmware)?);
    std::fs::write(out.join("ASSETS.txt"), render_manifest(&info))
        .map_err(|e| format!("{}: {e}", out.join("ASSETS.txt").display()))?;
    say(&format!(
        "done in {:.1} s: {} ({} {}; unpacked {:.1} MiB, entry {:#x}, loaded at {:#x}), {}, {}, {}",
        t0.elapsed().as_secs_f64(),
        vmlinuz.display(),
        guest["kernel_package"],
        guest["kernel_version"],
        image_bytes.len() as f64 / 1048576.0,
        header.entry,
        header.text_offset,
        initramfs.display(),
        rootfs.display(),
        firmware.display()
    ));
    Ok(Loong64Assets {
        vmlinuz,
        image,
        initramfs,
        rootfs,
        firmware,
        kernel: format!("{} {}", guest["kernel_package"], guest["kernel_version"]),
    })
}
