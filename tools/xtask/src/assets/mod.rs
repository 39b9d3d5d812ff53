//! `cargo xtask guest-assets`: Debian's arm64 cloud kernel, a busybox
//! initramfs whose `/init` is the Linux guest test (with the kernel's
//! virtio modules), and an ext4 root filesystem image of the same tree
//! (docs/linux-guests.md).
//!
//! Nothing on the system changes: apt runs with its own package lists,
//! sources list and archive cache under the asset cache
//! (`~/.cache/kestrel/guest-assets/`, or `$KESTREL_GUEST_CACHE`), and only
//! downloads (`apt-get download`); nothing is installed, except Debian's
//! `cpio` and `e2fsprogs` packages when their commands are missing (as
//! `tools/setup.sh` does: on Debian as root, otherwise it stops and says so).
//!
//! Steps: `apt-get update` (arm64 lists of Debian `bookworm`, `-updates` and
//! `-security`), resolve `linux-image-cloud-arm64` to the versioned package
//! it depends on, download it and `busybox-static`, check each `.deb`
//! against the SHA256 and size in the signed apt metadata and with
//! `dpkg-deb`, extract `boot/vmlinuz-*` (an arm64 `Image`: magic `ARM\x64` at
//! 0x38), the virtio modules of that kernel (aarch64 relocatable ELFs with
//! its `vermagic`) and `bin/busybox` (a static aarch64 ELF), and write
//! `build/guests/linux/{Image,initramfs.cpio.gz,rootfs.ext4,ASSETS.txt}`.
//!
//! The cache is reused as long as its `.deb` files still match the recorded
//! checksums; `--refresh` resolves the current versions again.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod apt;
mod arm64;
pub mod armhf;
pub mod firmware;
mod initramfs;
pub mod loong64;
mod modules;
mod rootfs;
pub mod seedbench;

use apt::{
    check_cached, deb_member, extract_member, fetch, need_tools, parse_manifest, render_manifest,
    sha256, DEFAULT_MIRROR, DEFAULT_SUITE,
};
pub use arm64::check_arm64_image;
use arm64::{check_static_aarch64_elf, BUSYBOX};
use initramfs::build_initramfs;
use modules::{extract_modules, kernel_release};
pub use modules::{module_name, LA64_VIRTIO_MODULES, VIRTIO_MODULES};
use rootfs::{ensure_rootfs, ROOTFS_LABEL};
pub use rootfs::{find_tool, ROOTFS_MIB};

/// The built guest files.
#[derive(Clone, Debug)]
pub struct LinuxAssets {
    /// Uncompressed arm64 `Image`.
    pub image: PathBuf,
    /// gzip-compressed `newc` cpio archive.
    pub initramfs: PathBuf,
    /// ext4 image of the same tree (may be missing in a build made before
    /// it existed; [`ensure`] makes it).
    pub rootfs: PathBuf,
    /// Kernel package and version, e.g. `linux-image-6.1.0-57-cloud-arm64 6.1.192-3`.
    pub kernel: String,
}

/// Where the downloads are kept (not in git).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KESTREL_GUEST_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| crate::root().join("build/cache"));
    base.join("kestrel/guest-assets")
}

/// Where the guest files are written: `build/guests/linux/`.
pub fn out_dir() -> PathBuf {
    crate::root().join("build/guests/linux")
}

/// The built files, if both exist (no network, no checks beyond that).
pub fn built() -> Option<LinuxAssets> {
    let dir = out_dir();
    let a = LinuxAssets {
        image: dir.join("Image"),
        initramfs: dir.join("initramfs.cpio.gz"),
        rootfs: dir.join("rootfs.ext4"),
        kernel: std::fs::read_to_string(dir.join("ASSETS.txt"))
            .ok()
            .and_then(|t| {
                let m = parse_manifest(&t);
                Some(format!(
                    "{} {}",
                    m.get("kernel_package")?,
                    m.get("kernel_version")?
                ))
            })
            .unwrap_or_else(|| "unknown kernel".into()),
    };
    (a.image.is_file() && a.initramfs.is_file()).then_some(a)
}

fn say(msg: &str) {
    eprintln!("guest-assets: {msg}");
}

/// What `cargo xtask guest-assets --test` runs on the files just built:
/// the bare-QEMU Linux cases of each architecture, handed in by the caller
/// (they are test cases, which build on the assets, not the other way).
pub struct BareTests {
    pub arm64: fn(LinuxAssets) -> Result<(), String>,
    pub la64: fn(loong64::Loong64Assets) -> Result<(), String>,
}

/// `cargo xtask guest-assets [--arch A] [--refresh] [--test]`; `--test`
/// runs `tests`.
pub fn command(args: &[String], tests: &BareTests) -> Result<(), String> {
    let (mut refresh, mut test, mut la, mut armhf_only) = (false, false, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--refresh" => refresh = true,
            "--test" => test = true,
            "--arch" => match it.next().map(String::as_str) {
                Some("aarch64" | "arm64") => la = false,
                Some("loongarch64" | "loong64") => la = true,
                Some("armhf" | "aarch32") => armhf_only = true,
                other => {
                    return Err(format!(
                        "guest-assets: --arch takes aarch64 or loongarch64, not {other:?}"
                    ))
                }
            },
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask guest-assets [--arch aarch64|armhf|loongarch64] [--refresh] [--test]\n\
                     Fetches Debian's arm64 cloud kernel and busybox-static with apt (cache: {}),\n\
                     checks them and builds {}/{{Image,initramfs.cpio.gz,rootfs.ext4}};\n\
                     also Debian's armhf LPAE kernel (a zImage) and busybox-static for 32-bit VMs:\n\
                     build/guests/linux-armhf/{{zImage,initramfs.cpio.gz}} (--arch armhf: only those).\n\
                     --arch loongarch64: Debian sid's loong64 kernel (its zboot vmlinuz unpacked) and busybox,\n\
                     trixie's edk2 for QEMU (QEMU_EFI.fd), the test initramfs, in build/guests/linux-loong64/\n\
                     --refresh  resolve and download the current versions even if the cache is valid\n\
                     --test     then boot them on bare QEMU (GICv3, GICv3 at EL1, GICv2) and run the init test\n\
                     Environment: KESTREL_GUEST_CACHE (cache dir), KESTREL_DEBIAN_SUITE (default {DEFAULT_SUITE}),\n\
                     KESTREL_DEBIAN_MIRROR (default {DEFAULT_MIRROR}). See docs/linux-guests.md.",
                    cache_dir().display(),
                    out_dir().display()
                );
                return Ok(());
            }
            other => {
                return Err(format!(
                    "guest-assets: unknown option '{other}' (try --help)"
                ))
            }
        }
    }
    if la {
        let a = loong64::ensure(refresh)?;
        for p in [&a.vmlinuz, &a.image, &a.initramfs, &a.firmware] {
            println!("{}", p.display());
        }
        if test {
            (tests.la64)(a)?;
        }
        return Ok(());
    }
    // The 32-bit guest's kernel and busybox come with the arm64 assets.
    let h = armhf::ensure(refresh)?;
    say(&format!("32-bit guest kernel: {}", h.kernel));
    // The Juno mix's raw disks (configs/linux-juno-mix.toml names them).
    armhf::write_mix_disks()?;
    if armhf_only {
        println!("{}", h.zimage.display());
        println!("{}", h.initramfs.display());
        return Ok(());
    }
    let a = ensure(refresh)?;
    println!("{}", h.zimage.display());
    println!("{}", h.initramfs.display());
    println!("{}", a.image.display());
    println!("{}", a.initramfs.display());
    println!("{}", a.rootfs.display());
    if test {
        (tests.arm64)(a)?;
    }
    Ok(())
}

/// Fetches (or reuses) the packages and builds the guest files.
pub fn ensure(refresh: bool) -> Result<LinuxAssets, String> {
    let t0 = Instant::now();
    need_tools()?;
    let cache = cache_dir();
    let debs = cache.join("debs");
    mkdir(&debs)?;
    let manifest_path = cache.join("manifest.txt");
    let cached = if refresh {
        None
    } else {
        match std::fs::read_to_string(&manifest_path) {
            Ok(text) => {
                let m = parse_manifest(&text);
                match check_cached(&m, &debs) {
                    Ok(()) => Some(m),
                    Err(why) => {
                        say(&format!("cache not usable ({why}): fetching again"));
                        None
                    }
                }
            }
            Err(_) => None,
        }
    };
    let manifest = match cached {
        Some(m) => {
            say(&format!(
                "[1/4] using the cache in {} ({} {}, {} {}; `--refresh` looks for newer)",
                cache.display(),
                m["kernel_package"],
                m["kernel_version"],
                BUSYBOX,
                m["busybox_version"]
            ));
            m
        }
        None => {
            let m = fetch(&cache, &debs)?;
            std::fs::write(&manifest_path, render_manifest(&m))
                .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
            m
        }
    };
    let out = out_dir();
    mkdir(&out)?;

    say("[3/4] extracting the kernel Image, its virtio modules and busybox");
    let kernel_deb = debs.join(&manifest["kernel_deb"]);
    let image = out.join("Image");
    // Reuse the Image extracted last time if it is still the same file.
    let last = std::fs::read_to_string(out.join("ASSETS.txt"))
        .map(|t| parse_manifest(&t))
        .unwrap_or_default();
    let kernel_member = match last.get("kernel_member") {
        Some(m)
            if last.get("kernel_sha256") == manifest.get("kernel_sha256")
                && last.contains_key("image_sha256")
                && image.is_file()
                && sha256(&image).ok().as_ref() == last.get("image_sha256") =>
        {
            m.clone()
        }
        _ => {
            let m = deb_member(&kernel_deb, "./boot/vmlinuz-")?;
            extract_member(&kernel_deb, &m, &image)?;
            m
        }
    };
    check_arm64_image(&image)?;
    let release = kernel_release(&kernel_member)
        .ok_or_else(|| format!("{kernel_member}: no kernel release in its name"))?
        .to_string();
    let busybox_deb = debs.join(&manifest["busybox_deb"]);
    let busybox = out.join("busybox");
    extract_member(&busybox_deb, "./bin/busybox", &busybox)?;
    check_static_aarch64_elf(&busybox)?;

    say(&format!(
        "[4/4] building the initramfs (cpio -H newc, gzip; with {} virtio modules of {release}) and {ROOTFS_MIB} MiB rootfs.ext4",
        VIRTIO_MODULES.len()
    ));
    let initramfs = out.join("initramfs.cpio.gz");
    let tree = out.join("initramfs.d");
    let seedbench = seedbench::build()?;
    build_initramfs(
        &busybox,
        |staging| {
            extract_modules(&kernel_deb, &release, staging)?;
            seedbench::install(&seedbench, staging)
        },
        &tree,
        &initramfs,
    )?;
    let rootfs = out.join("rootfs.ext4");
    let (rootfs_inputs, rootfs_sha, built_now) = ensure_rootfs(
        &tree,
        &rootfs,
        last.get("rootfs_inputs_sha256"),
        last.get("rootfs_sha256"),
    )?;
    say(&format!(
        "      {}: {}",
        rootfs.display(),
        if built_now {
            format!("built (ext4 \"{ROOTFS_LABEL}\", /dev/console 5,1, owner root)")
        } else {
            "unchanged inputs: kept".to_string()
        }
    ));
    let mut info = manifest.clone();
    info.insert("kernel_member".into(), kernel_member.clone());
    info.insert("kernel_release".into(), release.clone());
    info.insert("modules".into(), VIRTIO_MODULES.map(module_name).join(","));
    info.insert("image_sha256".into(), sha256(&image)?);
    info.insert("initramfs_sha256".into(), sha256(&initramfs)?);
    info.insert("rootfs_sha256".into(), rootfs_sha);
    info.insert("rootfs_inputs_sha256".into(), rootfs_inputs);
    std::fs::write(out.join("ASSETS.txt"), render_manifest(&info))
        .map_err(|e| format!("{}: {e}", out.join("ASSETS.txt").display()))?;
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    say(&format!(
        "done in {:.1} s: {} ({:.1} MiB, {} from {} {}), {} ({:.1} MiB), {}",
        t0.elapsed().as_secs_f64(),
        image.display(),
        size(&image) as f64 / 1048576.0,
        kernel_member.trim_start_matches("./"),
        manifest["kernel_package"],
        manifest["kernel_version"],
        initramfs.display(),
        size(&initramfs) as f64 / 1048576.0,
        rootfs.display()
    ));
    Ok(LinuxAssets {
        image,
        initramfs,
        rootfs,
        kernel: format!(
            "{} {}",
            manifest["kernel_package"], manifest["kernel_version"]
        ),
    })
}

/// How long `make test` may spend fetching the assets ([`ensure_within`]
/// and [`ensure_within_la64`] in the smoke suite's cases that need them).
pub const FETCH_LIMIT: Duration = Duration::from_secs(120);

/// Runs `cargo xtask guest-assets` as a child with a time limit (for the
/// tests: a slow or absent network must not hang them).
/// Err with the reason when it could not be done in time or failed.
pub fn ensure_within(limit: Duration) -> Result<LinuxAssets, String> {
    run_within(&[], limit)?;
    built().ok_or_else(|| "guest-assets ran but wrote no files".to_string())
}

/// [`ensure_within`] for the LoongArch assets (`--arch loongarch64`).
pub fn ensure_within_la64(limit: Duration) -> Result<loong64::Loong64Assets, String> {
    run_within(&["--arch", "loongarch64"], limit)?;
    loong64::built().ok_or_else(|| "guest-assets ran but wrote no files".to_string())
}

fn run_within(args: &[&str], limit: Duration) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find xtask itself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("guest-assets").args(args).stdout(Stdio::null());
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run xtask guest-assets: {e}"))?;
    let start = Instant::now();
    let what = format!(
        "`{}`",
        format!("cargo xtask guest-assets {}", args.join(" ")).trim_end()
    );
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            if !status.success() {
                return Err(format!("{what} failed ({status})"));
            }
            return Ok(());
        }
        if start.elapsed() > limit {
            // Stop the whole group (apt's download methods included).
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
            std::thread::sleep(Duration::from_millis(500));
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{what} took longer than {} s (slow or no network?)",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mkdir(d: &Path) -> Result<(), String> {
    std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))
}
