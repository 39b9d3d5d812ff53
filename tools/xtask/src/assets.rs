//! `cargo xtask guest-assets`: Debian's arm64 cloud kernel and a busybox
//! initramfs whose `/init` is the Linux guest test (docs/linux-guests.md).
//!
//! Nothing on the system changes: apt runs with its own package lists,
//! sources list and archive cache under the asset cache
//! (`~/.cache/kestrel/guest-assets/`, or `$KESTREL_GUEST_CACHE`), and only
//! downloads (`apt-get download`); nothing is installed, except Debian's
//! `cpio` package when the `cpio` command is missing (as `tools/setup.sh`
//! does for QEMU: on Debian as root, otherwise it stops and says so).
//!
//! Steps: `apt-get update` (arm64 lists of Debian `bookworm`, `-updates` and
//! `-security`), resolve `linux-image-cloud-arm64` to the versioned package
//! it depends on, download it and `busybox-static`, check each `.deb`
//! against the SHA256 and size in the signed apt metadata and with
//! `dpkg-deb`, extract `boot/vmlinuz-*` (an arm64 `Image`: magic `ARM\x64` at
//! 0x38) and `bin/busybox` (a static aarch64 ELF), and write
//! `build/guests/linux/{Image,initramfs.cpio.gz,ASSETS.txt}`.
//!
//! The cache is reused as long as its `.deb` files still match the recorded
//! checksums; `--refresh` resolves the current versions again.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kestrel_abi::image::{Arm64Image, Elf, EM_AARCH64, ET_EXEC};

/// The meta package that names the current cloud kernel.
const KERNEL_META: &str = "linux-image-cloud-arm64";
/// The static busybox.
const BUSYBOX: &str = "busybox-static";
/// Default Debian suite (override with `KESTREL_DEBIAN_SUITE`).
const DEFAULT_SUITE: &str = "bookworm";
/// Debian mirror (override with `KESTREL_DEBIAN_MIRROR`).
const DEFAULT_MIRROR: &str = "http://deb.debian.org";

/// The floating-point test: CPU slot `j` (the j-th online CPU) sums
/// `FP_BASE + j * FP_STEP` terms of two series (see [`fp_expected`]).
pub const FP_BASE: u64 = 20_000;
pub const FP_STEP: u64 = 1_000;
/// Slots with a known answer in the init script (the most CPUs it checks).
pub const FP_SLOTS: usize = 16;

/// The built guest files.
#[derive(Clone, Debug)]
pub struct LinuxAssets {
    /// Uncompressed arm64 `Image`.
    pub image: PathBuf,
    /// gzip-compressed `newc` cpio archive.
    pub initramfs: PathBuf,
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

/// `cargo xtask guest-assets [--refresh]` and `cargo xtask bench-linux`.
pub fn command(cmd: &str, args: &[String]) -> Result<(), String> {
    if cmd == "bench-linux" {
        return crate::vmtests_linux::bench(args);
    }
    let (mut refresh, mut test) = (false, false);
    for a in args {
        match a.as_str() {
            "--refresh" => refresh = true,
            "--test" => test = true,
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask guest-assets [--refresh] [--test]\n\
                     Fetches Debian's arm64 cloud kernel and busybox-static with apt (cache: {}),\n\
                     checks them and builds {}/{{Image,initramfs.cpio.gz}}.\n\
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
    let a = ensure(refresh)?;
    println!("{}", a.image.display());
    println!("{}", a.initramfs.display());
    if test {
        crate::vmtests_linux::run_bare(a)?;
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

    say("[3/4] extracting the kernel Image and busybox");
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
    let busybox_deb = debs.join(&manifest["busybox_deb"]);
    let busybox = out.join("busybox");
    extract_member(&busybox_deb, "./bin/busybox", &busybox)?;
    check_static_aarch64_elf(&busybox)?;

    say("[4/4] building the initramfs (cpio -H newc, gzip)");
    let initramfs = out.join("initramfs.cpio.gz");
    build_initramfs(&busybox, &out.join("initramfs.d"), &initramfs)?;
    let mut info = manifest.clone();
    info.insert("kernel_member".into(), kernel_member.clone());
    info.insert("image_sha256".into(), sha256(&image)?);
    info.insert("initramfs_sha256".into(), sha256(&initramfs)?);
    std::fs::write(out.join("ASSETS.txt"), render_manifest(&info))
        .map_err(|e| format!("{}: {e}", out.join("ASSETS.txt").display()))?;
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    say(&format!(
        "done in {:.1} s: {} ({:.1} MiB, {} from {} {}), {} ({:.1} MiB)",
        t0.elapsed().as_secs_f64(),
        image.display(),
        size(&image) as f64 / 1048576.0,
        kernel_member.trim_start_matches("./"),
        manifest["kernel_package"],
        manifest["kernel_version"],
        initramfs.display(),
        size(&initramfs) as f64 / 1048576.0
    ));
    Ok(LinuxAssets {
        image,
        initramfs,
        kernel: format!(
            "{} {}",
            manifest["kernel_package"], manifest["kernel_version"]
        ),
    })
}

/// Runs `cargo xtask guest-assets` as a child with a time limit (for the
/// tests: a slow or absent network must not hang them).
/// Err with the reason when it could not be done in time or failed.
pub fn ensure_within(limit: Duration) -> Result<LinuxAssets, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find xtask itself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("guest-assets").stdout(Stdio::null());
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run xtask guest-assets: {e}"))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            if !status.success() {
                return Err(format!("`cargo xtask guest-assets` failed ({status})"));
            }
            return built().ok_or_else(|| "guest-assets ran but wrote no files".to_string());
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
                "`cargo xtask guest-assets` took longer than {} s (slow or no network?)",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------
// apt
// ---------------------------------------------------------------------------

/// The `-o` options that give apt a private state: its own lists, cache,
/// sources and an empty dpkg status, for arm64 only.
fn apt_opts(cache: &Path) -> Vec<String> {
    let apt = cache.join("apt");
    vec![
        "-oAPT::Architecture=arm64".into(),
        "-oAPT::Architectures=arm64".into(),
        format!("-oDir::State::Lists={}", apt.join("lists").display()),
        format!("-oDir::Cache={}", apt.join("cache").display()),
        format!("-oDir::State::status={}", apt.join("status").display()),
        format!(
            "-oDir::Etc::SourceList={}",
            apt.join("sources.list").display()
        ),
        format!(
            "-oDir::Etc::SourceParts={}",
            apt.join("sources.list.d").display()
        ),
        // Only package lists: no translations, no AppStream metadata.
        "-oAcquire::Languages=none".into(),
        "-oAcquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".into(),
        "-oAcquire::http::Timeout=30".into(),
        "-oAcquire::Retries=2".into(),
        // Downloads go to a directory of our own; no privilege drop needed.
        "-oAPT::Sandbox::User=root".into(),
    ]
}

fn fetch(cache: &Path, debs: &Path) -> Result<BTreeMap<String, String>, String> {
    let apt = cache.join("apt");
    for d in [
        apt.join("lists/partial"),
        apt.join("cache/archives/partial"),
        apt.join("sources.list.d"),
    ] {
        mkdir(&d)?;
    }
    let status = apt.join("status");
    if !status.exists() {
        std::fs::write(&status, "").map_err(|e| format!("{}: {e}", status.display()))?;
    }
    let suite = std::env::var("KESTREL_DEBIAN_SUITE").unwrap_or_else(|_| DEFAULT_SUITE.into());
    let mirror = std::env::var("KESTREL_DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.into());
    let sources = format!(
        "# written by `cargo xtask guest-assets`\n\
         deb {mirror}/debian {suite} main\n\
         deb {mirror}/debian {suite}-updates main\n\
         deb {mirror}/debian-security {suite}-security main\n"
    );
    let sources_path = apt.join("sources.list");
    std::fs::write(&sources_path, sources)
        .map_err(|e| format!("{}: {e}", sources_path.display()))?;
    let opts = apt_opts(cache);

    say(&format!(
        "[1/4] apt-get update: Debian {suite} arm64 package lists (about 10 MB, into {})",
        apt.display()
    ));
    let t = Instant::now();
    let out = Command::new("apt-get")
        .args(&opts)
        .args(["-q", "update"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text
        .lines()
        .filter(|l| l.starts_with("Get:") || l.starts_with("Hit:"))
    {
        say(&format!("      {line}"));
    }
    // apt-get update exits 0 with "W: Failed to fetch" when offline: judge by what it says.
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:") || l.starts_with("Err:"))
        .collect();
    if !out.status.success() || text.contains("Failed to fetch") || text.contains("Err:") {
        return Err(format!(
            "apt-get update of the arm64 lists ({}) failed (no network or mirror unreachable?):\n    {}",
            sources_path.display(),
            failed.join("\n    ")
        ));
    }
    say(&format!(
        "      lists updated in {:.1} s",
        t.elapsed().as_secs_f64()
    ));

    say(&format!("[2/4] resolving {KERNEL_META} and {BUSYBOX}"));
    let meta = candidate(&opts, KERNEL_META)?;
    let kernel_pkg = kernel_dependency(&meta)
        .ok_or_else(|| format!("{KERNEL_META} {}: no linux-image-* dependency in its Depends: {:?} (Debian changed the meta package?)", meta.version, meta.fields.get("Depends")))?;
    let (kname, kver) = kernel_pkg;
    let kernel = show(&opts, &kname, kver.as_deref())?;
    let busybox = candidate(&opts, BUSYBOX)?;
    say(&format!(
        "      {KERNEL_META} {} -> {} {}; {BUSYBOX} {}",
        meta.version, kernel.name, kernel.version, busybox.version
    ));

    let t = Instant::now();
    say(&format!(
        "      apt-get download {}={} ({:.1} MB) {}:arm64={} ({:.1} MB) into {}",
        kernel.name,
        kernel.version,
        kernel.size as f64 / 1e6,
        busybox.name,
        busybox.version,
        busybox.size as f64 / 1e6,
        debs.display()
    ));
    let status = Command::new("apt-get")
        .args(&opts)
        .args(["-q", "download"])
        .arg(format!("{}:arm64={}", kernel.name, kernel.version))
        .arg(format!("{}:arm64={}", busybox.name, busybox.version))
        .current_dir(debs)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run apt-get download: {e}"))?;
    if !status.success() {
        return Err(format!(
            "apt-get download {} {} failed ({status})",
            kernel.name, busybox.name
        ));
    }
    say(&format!(
        "      downloaded in {:.1} s; checking",
        t.elapsed().as_secs_f64()
    ));
    let mut m = BTreeMap::new();
    for (key, pkg) in [("kernel", &kernel), ("busybox", &busybox)] {
        let file = verify_deb(debs, pkg)?;
        m.insert(format!("{key}_package"), pkg.name.clone());
        m.insert(format!("{key}_version"), pkg.version.clone());
        m.insert(format!("{key}_deb"), file);
        m.insert(format!("{key}_sha256"), pkg.sha256.clone());
        m.insert(format!("{key}_size"), pkg.size.to_string());
    }
    m.insert("kernel_meta_version".into(), meta.version.clone());
    m.insert("suite".into(), suite);
    m.insert("mirror".into(), mirror);
    // Drop older downloads.
    if let Ok(rd) = std::fs::read_dir(debs) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".deb") && name != m["kernel_deb"] && name != m["busybox_deb"] {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(m)
}

/// One package version as `apt-cache show` describes it.
#[derive(Debug)]
struct PkgInfo {
    name: String,
    version: String,
    size: u64,
    sha256: String,
    fields: BTreeMap<String, String>,
}

/// The candidate version of `name` (what `apt-get download name` would fetch).
fn candidate(opts: &[String], name: &str) -> Result<PkgInfo, String> {
    let out = Command::new("apt-cache")
        .args(opts)
        .args(["policy", name])
        .output()
        .map_err(|e| format!("cannot run apt-cache: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let ver = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:").map(|v| v.trim().to_string()))
        .filter(|v| v != "(none)")
        .ok_or_else(|| {
            format!("package {name} (arm64) not found in the apt lists: `apt-cache policy {name}` names no candidate")
        })?;
    show(opts, name, Some(&ver))
}

/// `apt-cache show name[=version]`: the first (highest) record.
fn show(opts: &[String], name: &str, version: Option<&str>) -> Result<PkgInfo, String> {
    let spec = match version {
        Some(v) => format!("{name}={v}"),
        None => name.to_string(),
    };
    let out = Command::new("apt-cache")
        .args(opts)
        .args(["show", &spec])
        .output()
        .map_err(|e| format!("cannot run apt-cache: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "apt-cache show {spec} (arm64) failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let record = text.split("\n\n").next().unwrap_or("");
    let fields = parse_control(record);
    let get = |k: &str| {
        fields
            .get(k)
            .cloned()
            .ok_or_else(|| format!("apt-cache show {spec}: no {k} field"))
    };
    let size = get("Size")?
        .parse()
        .map_err(|_| format!("apt-cache show {spec}: bad Size"))?;
    let sha256 = get("SHA256")?;
    if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("apt-cache show {spec}: bad SHA256 {sha256:?}"));
    }
    Ok(PkgInfo {
        name: get("Package")?,
        version: get("Version")?,
        size,
        sha256,
        fields,
    })
}

/// Debian control fields (continuation lines appended).
fn parse_control(record: &str) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in record.lines() {
        if line.starts_with(' ') || line.starts_with('\t') {
            if let Some(k) = &last {
                let v = m.get_mut(k).unwrap();
                v.push('\n');
                v.push_str(line.trim());
            }
        } else if let Some((k, v)) = line.split_once(':') {
            m.insert(k.to_string(), v.trim().to_string());
            last = Some(k.to_string());
        }
    }
    m
}

/// The `linux-image-<version>-cloud-arm64` package (and exact version, if
/// given) that the meta package depends on.
fn kernel_dependency(meta: &PkgInfo) -> Option<(String, Option<String>)> {
    let depends = meta.fields.get("Depends")?;
    depends
        .split(',')
        .flat_map(|alt| alt.split('|'))
        .map(str::trim)
        .find_map(|dep| {
            let (name, rest) = match dep.split_once(' ') {
                Some((n, r)) => (n.trim(), r.trim()),
                None => (dep, ""),
            };
            let name = name.split(':').next().unwrap_or(name);
            if !(name.starts_with("linux-image-") && name != KERNEL_META) {
                return None;
            }
            let version = rest
                .strip_prefix("(=")
                .and_then(|v| v.strip_suffix(')'))
                .map(|v| v.trim().to_string());
            Some((name.to_string(), version))
        })
}

/// Finds the downloaded `.deb` of `pkg` in `dir` and checks it against the
/// apt metadata: size, SHA256, and `dpkg-deb`'s idea of name, version and
/// architecture. Returns the file name.
fn verify_deb(dir: &Path, pkg: &PkgInfo) -> Result<String, String> {
    // apt names it NAME_VERSION_ARCH.deb with ':' in the version escaped as %3a.
    let file = format!("{}_{}_arm64.deb", pkg.name, pkg.version.replace(':', "%3a"));
    let path = dir.join(&file);
    let len = std::fs::metadata(&path)
        .map_err(|e| format!("{}: not downloaded ({e})", path.display()))?
        .len();
    if len != pkg.size {
        return Err(format!(
            "{}: {len} bytes, but the apt metadata says {}",
            path.display(),
            pkg.size
        ));
    }
    let sum = sha256(&path)?;
    if sum != pkg.sha256 {
        return Err(format!(
            "{}: SHA256 {sum} does not match the apt metadata {} (corrupt download: run again)",
            path.display(),
            pkg.sha256
        ));
    }
    check_deb_fields(&path, &pkg.name, &pkg.version)?;
    say(&format!(
        "      ok: {file} ({len} bytes, SHA256 {}…, {} {} arm64)",
        &sum[..16],
        pkg.name,
        pkg.version
    ));
    Ok(file)
}

fn check_deb_fields(path: &Path, name: &str, version: &str) -> Result<(), String> {
    let out = Command::new("dpkg-deb")
        .args(["--field"])
        .arg(path)
        .args(["Package", "Version", "Architecture"])
        .output()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{}: not a valid .deb: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let f = parse_control(&String::from_utf8_lossy(&out.stdout));
    let want = [
        ("Package", name),
        ("Version", version),
        ("Architecture", "arm64"),
    ];
    for (k, v) in want {
        if f.get(k).map(String::as_str) != Some(v) {
            return Err(format!(
                "{}: dpkg-deb says {k} = {:?}, expected {v:?}",
                path.display(),
                f.get(k)
            ));
        }
    }
    Ok(())
}

/// Is the cache complete and intact?
fn check_cached(m: &BTreeMap<String, String>, debs: &Path) -> Result<(), String> {
    let suite = std::env::var("KESTREL_DEBIAN_SUITE").unwrap_or_else(|_| DEFAULT_SUITE.into());
    if m.get("suite") != Some(&suite) {
        return Err(format!(
            "it holds Debian {:?}, {suite:?} is wanted",
            m.get("suite").map(String::as_str).unwrap_or("?")
        ));
    }
    for key in ["kernel", "busybox"] {
        let field = |f: &str| {
            m.get(&format!("{key}_{f}"))
                .ok_or_else(|| format!("manifest lacks {key}_{f}"))
        };
        let path = debs.join(field("deb")?);
        if !path.is_file() {
            return Err(format!("{} is missing", path.display()));
        }
        if sha256(&path)? != *field("sha256")? {
            return Err(format!("{} does not match its SHA256", path.display()));
        }
        check_deb_fields(&path, field("package")?, field("version")?)?;
    }
    Ok(())
}

fn parse_manifest(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn render_manifest(m: &BTreeMap<String, String>) -> String {
    let mut s = String::from("# written by `cargo xtask guest-assets` (docs/linux-guests.md)\n");
    for (k, v) in m {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// apt, dpkg-deb, tar, gzip and sha256sum must be there (they are on
/// Debian); `cpio` is installed from Debian if missing.
fn need_tools() -> Result<(), String> {
    for t in [
        "apt-get",
        "apt-cache",
        "dpkg-deb",
        "tar",
        "gzip",
        "sha256sum",
    ] {
        if !have(t) {
            return Err(format!(
                "`{t}` is missing: guest-assets needs Debian's apt and dpkg (it fetches Debian packages); \
                 on another system, get a Linux arm64 Image and a busybox initramfs yourself (docs/linux-guests.md)"
            ));
        }
    }
    if have("cpio") {
        return Ok(());
    }
    let debian = std::fs::read_to_string("/etc/os-release")
        .map(|t| t.lines().any(|l| l == "ID=debian"))
        .unwrap_or(false);
    if !debian {
        return Err("`cpio` is missing: install GNU cpio and re-run".into());
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Err(
            "`cpio` is missing: run as root (or: sudo apt-get install cpio) and re-run".into(),
        );
    }
    say("installing Debian's cpio package (apt-get install cpio)");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends", "cpio"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdout(Stdio::null())
            .status();
        if !install() {
            return Err("apt-get install cpio failed: install the cpio package and re-run".into());
        }
    }
    if have("cpio") {
        Ok(())
    } else {
        Err("cpio still missing after apt-get install cpio".into())
    }
}

fn mkdir(d: &Path) -> Result<(), String> {
    std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))
}

pub fn sha256(path: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run sha256sum: {e}"))?;
    if !out.status.success() {
        return Err(format!("sha256sum {} failed", path.display()));
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| format!("sha256sum {}: no output", path.display()))
}

/// The data member of `deb` whose path starts with `prefix`.
fn deb_member(deb: &Path, prefix: &str) -> Result<String, String> {
    let out = Command::new("dpkg-deb")
        .arg("--contents")
        .arg(deb)
        .output()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dpkg-deb --contents {}: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|n| n.starts_with(prefix))
        .collect();
    match names.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(format!("{}: has no {prefix}*", deb.display())),
        many => Err(format!("{}: several {prefix}*: {many:?}", deb.display())),
    }
}

/// Extracts one member of a `.deb` to `dest` (without unpacking the rest).
fn extract_member(deb: &Path, member: &str, dest: &Path) -> Result<(), String> {
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    let tmp = dest.with_extension("tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let tar = Command::new("tar")
        .args(["-xO", member])
        .stdin(dpkg.stdout.take().unwrap())
        .stdout(file)
        .status()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    let dpkg_ok = dpkg.wait().is_ok_and(|s| s.success());
    if !tar.success() || !dpkg_ok {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "cannot extract {member} from {} (dpkg-deb --fsys-tarfile | tar)",
            deb.display()
        ));
    }
    std::fs::rename(&tmp, dest).map_err(|e| format!("{}: {e}", dest.display()))
}

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

// ---------------------------------------------------------------------------
// initramfs
// ---------------------------------------------------------------------------

/// The known answers of the FP test for CPU slot `slot`: the number of
/// terms and the two sums as the guest's `awk` prints them (`%.12f`).
/// Both sides use IEEE doubles with the same operations in the same order,
/// so the digits match exactly: sum 1/k^2 (-> pi^2/6) and the Leibniz
/// series 4 * sum (-1)^(k+1)/(2k-1) (-> pi).
pub fn fp_expected(slot: usize) -> (u64, String) {
    let n = FP_BASE + slot as u64 * FP_STEP;
    let (mut s, mut t, mut p) = (0.0f64, 0.0f64, 1.0f64);
    let mut k = 1.0f64;
    while k <= n as f64 {
        s += 1.0 / (k * k);
        t += p * 4.0 / (2.0 * k - 1.0);
        p = -p;
        k += 1.0;
    }
    (n, format!("{s:.12} {t:.12}"))
}

/// The `/init` script: mounts, reads the kestrel.* options, then either
/// runs the test and powers off or starts a shell.
const INIT: &str = r#"#!/bin/sh
# /init of kestrel's Linux guest initramfs (written by `cargo xtask guest-assets`,
# docs/linux-guests.md). Kernel command line options:
#   kestrel.test_cpus=N   the test expects N CPUs online
#   kestrel.shell=1       interactive busybox shell instead of the test
#   kestrel.name=NAME     host name / prompt
echo "LINUX-INIT: started"
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
/bin/busybox mkdir -p /proc /sys /dev /tmp /root /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
read up rest < /proc/uptime
shell=0 cpus= name=linux
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        kestrel.shell=1) shell=1 ;;
        kestrel.test_cpus=*) cpus=${arg#*=} ;;
        kestrel.name=*) name=${arg#*=} ;;
    esac
done
hostname "$name"
echo "LINUX-INIT: $name: kernel $(uname -r), up ${up} s, $(grep -c ^processor /proc/cpuinfo) CPUs"
if [ "$shell" = 1 ]; then
    echo "LINUX-INIT: $name: busybox shell ('kestrel-linux-test N' runs the test, 'poweroff -f' powers off)"
    export PS1="$name:\w# "
    setsid cttyhack sh
else
    /bin/kestrel-linux-test "$cpus"
fi
poweroff -f
sleep 5
echo "LINUX-INIT: poweroff -f returned"
"#;

/// `/bin/kestrel-linux-test [N]`: CPUs online (= N if given), then FP work
/// with known answers on every online CPU in parallel.
const TEST: &str = r#"#!/bin/sh
# kestrel's Linux guest test (written by `cargo xtask guest-assets`).
# Usage: kestrel-linux-test [EXPECTED_CPUS]
want=$1
online=$(cat /sys/devices/system/cpu/online)
list=$(echo "$online" | awk -F, '{ for (i = 1; i <= NF; i++) { if (split($i, r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) printf "%d ", c } else printf "%d ", $i } }')
n=$(echo $list | wc -w)
echo "LINUX-TEST: $n CPUs online ($online), expected ${want:-any}"
fail=""
if [ -n "$want" ] && [ "$n" != "$want" ]; then fail="$fail cpus=$n/$want"; fi
pin=taskset
command -v taskset >/dev/null 2>&1 || { pin=; echo "LINUX-TEST: no taskset: jobs not pinned"; }
read t0 rest < /proc/uptime
slot=0
for c in $list; do
    nterms=$(terms $slot)
    if [ -z "$nterms" ]; then echo "LINUX-TEST: cpu $c: no known answer for slot $slot"; break; fi
    ${pin:+taskset -c $c} awk -v n="$nterms" 'BEGIN {
        s = 0; t = 0; p = 1
        for (k = 1; k <= n; k++) { s += 1 / (k * k); t += p * 4 / (2 * k - 1); p = -p }
        getline st < "/proc/self/stat"; split(st, f, " ")
        printf "%.12f %.12f %s\n", s, t, f[39]
    }' > /tmp/fp.$slot 2>&1 &
    slot=$((slot + 1))
done
wait
read t1 rest < /proc/uptime
bad=0
slot=0
for c in $list; do
    want_fp=$(answer $slot)
    [ -n "$want_fp" ] || break
    set -- $(cat /tmp/fp.$slot)
    if [ "$1 $2" = "$want_fp" ] && { [ -z "$pin" ] || [ "$3" = "$c" ]; }; then
        echo "LINUX-TEST: fp cpu $c: ok ($(terms $slot) terms: $1 $2, ran on cpu $3)"
    else
        echo "LINUX-TEST: fp cpu $c: WRONG: got '$*', expected '$want_fp' on cpu $c"
        bad=$((bad + 1))
    fi
    slot=$((slot + 1))
done
echo "LINUX-TEST: fp work on $slot CPUs in parallel took $(awk -v a=$t0 -v b=$t1 'BEGIN { printf "%.2f", b - a }') s"
if [ "$bad" != 0 ]; then fail="$fail fp=$bad-wrong"; fi
if [ -z "$fail" ]; then
    echo "LINUX-TEST: PASS cpus=$n fp=ok"
else
    echo "LINUX-TEST: FAIL$fail"
fi
"#;

/// The test script with its table of known answers.
pub fn test_script() -> String {
    let mut terms = String::from("terms() {\n    case $1 in\n");
    let mut answers = String::from("answer() {\n    case $1 in\n");
    for slot in 0..FP_SLOTS {
        let (n, a) = fp_expected(slot);
        terms.push_str(&format!("        {slot}) echo {n} ;;\n"));
        answers.push_str(&format!("        {slot}) echo \"{a}\" ;;\n"));
    }
    terms.push_str("    esac\n}\n");
    answers.push_str("    esac\n}\n");
    let (head, body) = TEST.split_once("want=$1\n").expect("test script layout");
    format!("{head}{terms}{answers}want=$1\n{body}")
}

fn write_exec(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Builds `out` (gzip) and the uncompressed `.cpio` next to it, with the
/// tree in `tree`. Everything is written under temporary names and renamed
/// into place, so a test reading the files meanwhile never sees half of one.
fn build_initramfs(busybox: &Path, tree: &Path, out: &Path) -> Result<(), String> {
    let pid = std::process::id();
    let staging = &tree.with_file_name(format!(".initramfs.d.{pid}"));
    if staging.exists() {
        std::fs::remove_dir_all(staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    }
    for d in ["bin", "dev", "proc", "sys", "tmp", "root"] {
        mkdir(&staging.join(d))?;
    }
    let bb = staging.join("bin/busybox");
    std::fs::copy(busybox, &bb).map_err(|e| format!("{}: {e}", bb.display()))?;
    std::fs::set_permissions(&bb, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", bb.display()))?;
    std::os::unix::fs::symlink("busybox", staging.join("bin/sh"))
        .map_err(|e| format!("{}: {e}", staging.join("bin/sh").display()))?;
    write_exec(&staging.join("init"), INIT)?;
    write_exec(&staging.join("bin/kestrel-linux-test"), &test_script())?;
    // newc archive, files owned by root, sorted for a stable order. The
    // kernel's built-in initramfs provides /dev/console.
    let find = Command::new("find")
        .arg(".")
        .current_dir(staging)
        .output()
        .map_err(|e| format!("cannot run find: {e}"))?;
    let mut names: Vec<String> = String::from_utf8_lossy(&find.stdout)
        .lines()
        .filter(|l| *l != ".")
        .map(str::to_string)
        .collect();
    names.sort();
    let cpio_final = out.with_extension(""); // initramfs.cpio
    let cpio_path = cpio_final.with_extension(format!("cpio.{pid}.tmp"));
    let cpio_file =
        std::fs::File::create(&cpio_path).map_err(|e| format!("{}: {e}", cpio_path.display()))?;
    let mut cpio = Command::new("cpio")
        .args([
            "--quiet",
            "-o",
            "-H",
            "newc",
            "--owner=0:0",
            "--reproducible",
        ])
        .current_dir(staging)
        .stdin(Stdio::piped())
        .stdout(cpio_file)
        .spawn()
        .map_err(|e| format!("cannot run cpio: {e}"))?;
    cpio.stdin
        .take()
        .unwrap()
        .write_all((names.join("\n") + "\n").as_bytes())
        .map_err(|e| format!("writing to cpio: {e}"))?;
    let st = cpio.wait().map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!(
            "cpio -o -H newc failed ({st}) building {}",
            cpio_path.display()
        ));
    }
    let gz_path = out.with_extension(format!("gz.{pid}.tmp"));
    let gz = std::fs::File::create(&gz_path).map_err(|e| format!("{}: {e}", gz_path.display()))?;
    let st = Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .arg(&cpio_path)
        .stdout(gz)
        .status()
        .map_err(|e| format!("cannot run gzip: {e}"))?;
    if !st.success() {
        return Err(format!("gzip {} failed", cpio_path.display()));
    }
    let rename = |from: &Path, to: &Path| {
        std::fs::rename(from, to)
            .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))
    };
    rename(&cpio_path, &cpio_final)?;
    rename(&gz_path, out)?;
    if tree.exists() {
        std::fs::remove_dir_all(tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    }
    rename(staging, tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp_answers_are_the_series() {
        for slot in [0, 3, FP_SLOTS - 1] {
            let (n, a) = fp_expected(slot);
            let mut it = a.split(' ').map(|x| x.parse::<f64>().unwrap());
            let (s, t) = (it.next().unwrap(), it.next().unwrap());
            let pi = std::f64::consts::PI;
            // Tails: sum 1/k^2 for k > n is about 1/n; Leibniz alternates about pi within 1/n.
            assert!(
                (s - (pi * pi / 6.0 - 1.0 / n as f64)).abs() < 1.0 / (n * n) as f64,
                "{s}"
            );
            assert!((t - pi).abs() < 1.01 / n as f64, "{t}");
        }
    }

    #[test]
    fn test_script_has_every_slot() {
        let s = test_script();
        assert!(s.contains(&format!("        {}) echo", FP_SLOTS - 1)));
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("terms() {") && s.contains("answer() {"));
    }

    #[test]
    fn kernel_dependency_is_resolved() {
        let meta = PkgInfo {
            name: KERNEL_META.into(),
            version: "6.1.192-3".into(),
            size: 1,
            sha256: String::new(),
            fields: parse_control(
                "Package: linux-image-cloud-arm64\nDepends: linux-image-6.1.0-57-cloud-arm64 (= 6.1.192-3)\n",
            ),
        };
        assert_eq!(
            kernel_dependency(&meta),
            Some((
                "linux-image-6.1.0-57-cloud-arm64".into(),
                Some("6.1.192-3".into())
            ))
        );
    }

    #[test]
    fn manifest_round_trip() {
        let mut m = BTreeMap::new();
        m.insert("kernel_version".to_string(), "6.1.192-3".to_string());
        m.insert("busybox_version".to_string(), "1:1.35.0-4".to_string());
        assert_eq!(parse_manifest(&render_manifest(&m)), m);
    }
}
