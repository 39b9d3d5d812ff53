//! Fetching Debian packages with apt under a private state (its own lists,
//! sources, archive cache and an empty dpkg status below the asset cache:
//! nothing on the system changes), checked against the SHA256 and size in
//! the signed apt metadata and with `dpkg-deb`; the manifest that records
//! what the cache holds; extracting files from a `.deb`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::arm64::{BUSYBOX, KERNEL_META};
use super::rootfs::{find_tool, E2FS_TOOLS};
use super::{mkdir, say};

/// Default Debian suite (override with `KESTREL_DEBIAN_SUITE`).
pub(super) const DEFAULT_SUITE: &str = "bookworm";

/// Debian mirror (override with `KESTREL_DEBIAN_MIRROR`).
pub(super) const DEFAULT_MIRROR: &str = "http://deb.debian.org";

/// The `-o` options that give apt a private state: its own lists, cache,
/// sources and an empty dpkg status (under `cache/apt`), for Debian
/// architecture `arch` only.
fn apt_opts(cache: &Path, arch: &str) -> Vec<String> {
    let apt = cache.join("apt");
    vec![
        format!("-oAPT::Architecture={arch}"),
        format!("-oAPT::Architectures={arch}"),
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

/// The Debian suite the arm64 assets and firmware come from
/// (`KESTREL_DEBIAN_SUITE`).
pub(super) fn debian_suite() -> String {
    std::env::var("KESTREL_DEBIAN_SUITE").unwrap_or_else(|_| DEFAULT_SUITE.into())
}

/// The Debian mirror (`KESTREL_DEBIAN_MIRROR`).
pub(super) fn debian_mirror() -> String {
    std::env::var("KESTREL_DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.into())
}

/// The private apt state under `cache` with the lists of [`debian_suite`]
/// (`-updates` and `-security` too) for arm64, which include the `all`
/// packages. Returns the apt options and the suite; `step` prefixes the
/// progress message.
pub(super) fn update_lists(cache: &Path, step: &str) -> Result<(Vec<String>, String), String> {
    let suite = debian_suite();
    let mirror = debian_mirror();
    let sources = format!(
        "# written by `cargo xtask`\n\
         deb {mirror}/debian {suite} main\n\
         deb {mirror}/debian {suite}-updates main\n\
         deb {mirror}/debian-security {suite}-security main\n"
    );
    let opts = update(
        cache,
        "arm64",
        &sources,
        step,
        &format!("Debian {suite} arm64"),
    )?;
    Ok((opts, suite))
}

pub(super) fn fetch(cache: &Path, debs: &Path) -> Result<BTreeMap<String, String>, String> {
    let (opts, suite) = update_lists(cache, "[1/4]")?;
    let mirror = debian_mirror();

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
    download(&opts, debs, &[&kernel, &busybox])?;
    let mut m = BTreeMap::new();
    for (key, pkg) in [("kernel", &kernel), ("busybox", &busybox)] {
        record(&mut m, key, debs, pkg)?;
    }
    m.insert("kernel_meta_version".into(), meta.version.clone());
    m.insert("suite".into(), suite);
    m.insert("mirror".into(), mirror);
    drop_other_debs(debs, &m, &["kernel", "busybox"]);
    Ok(m)
}

/// Makes the private apt directories under `cache/apt`, writes `sources`
/// as its sources list and runs `apt-get update` for `arch`; returns the
/// apt options of that state. `what` names the lists in messages, after
/// the progress `step`.
pub(super) fn update(
    cache: &Path,
    arch: &str,
    sources: &str,
    step: &str,
    what: &str,
) -> Result<Vec<String>, String> {
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
    let sources_path = apt.join("sources.list");
    std::fs::write(&sources_path, sources)
        .map_err(|e| format!("{}: {e}", sources_path.display()))?;
    let opts = apt_opts(cache, arch);
    say(&format!(
        "{step} apt-get update: {what} package lists (about 10 MB, into {})",
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
            "apt-get update of the {what} lists ({}) failed (no network or mirror unreachable?):\n    {}",
            sources_path.display(),
            failed.join("\n    ")
        ));
    }
    say(&format!(
        "      lists updated in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(opts)
}

/// `apt-get download` of `pkgs` (exact versions) into `debs`.
pub(super) fn download(opts: &[String], debs: &Path, pkgs: &[&PkgInfo]) -> Result<(), String> {
    let t = Instant::now();
    let names: Vec<String> = pkgs
        .iter()
        .map(|p| format!("{}:{}={}", p.name, p.arch(), p.version))
        .collect();
    let mb: f64 = pkgs.iter().map(|p| p.size as f64 / 1e6).sum();
    say(&format!(
        "      apt-get download {} ({mb:.1} MB) into {}",
        names.join(" "),
        debs.display()
    ));
    let status = Command::new("apt-get")
        .args(opts)
        .args(["-q", "download"])
        .args(&names)
        .current_dir(debs)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run apt-get download: {e}"))?;
    if !status.success() {
        return Err(format!(
            "apt-get download {} failed ({status})",
            names.join(" ")
        ));
    }
    say(&format!(
        "      downloaded in {:.1} s; checking",
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Checks the downloaded `pkg` and records it in the manifest under `key`
/// (`key_package`, `_version`, `_deb`, `_sha256`, `_size`, `_arch`).
pub(super) fn record(
    m: &mut BTreeMap<String, String>,
    key: &str,
    debs: &Path,
    pkg: &PkgInfo,
) -> Result<(), String> {
    let file = verify_deb(debs, pkg)?;
    m.insert(format!("{key}_package"), pkg.name.clone());
    m.insert(format!("{key}_version"), pkg.version.clone());
    m.insert(format!("{key}_deb"), file);
    m.insert(format!("{key}_sha256"), pkg.sha256.clone());
    m.insert(format!("{key}_size"), pkg.size.to_string());
    m.insert(format!("{key}_arch"), pkg.arch().to_string());
    Ok(())
}

/// Removes the `.deb` files in `debs` that the manifest's `keys` do not name.
pub(super) fn drop_other_debs(debs: &Path, m: &BTreeMap<String, String>, keys: &[&str]) {
    let keep: Vec<&String> = keys
        .iter()
        .filter_map(|k| m.get(&format!("{k}_deb")))
        .collect();
    if let Ok(rd) = std::fs::read_dir(debs) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".deb") && !keep.contains(&&name) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// One package version as `apt-cache show` describes it.
#[derive(Debug)]
pub(super) struct PkgInfo {
    pub(super) name: String,
    pub(super) version: String,
    size: u64,
    pub(super) sha256: String,
    fields: BTreeMap<String, String>,
}

impl PkgInfo {
    /// Its Debian architecture (`arm64`, `loong64`, `all`).
    pub(super) fn arch(&self) -> &str {
        self.fields
            .get("Architecture")
            .map(String::as_str)
            .unwrap_or("arm64")
    }
}

/// The candidate version of `name` (what `apt-get download name` would fetch).
pub(super) fn candidate(opts: &[String], name: &str) -> Result<PkgInfo, String> {
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
            format!("package {name} not found in the apt lists: `apt-cache policy {name}` names no candidate")
        })?;
    show(opts, name, Some(&ver))
}

/// `apt-cache show name[=version]`: the first (highest) record.
pub(super) fn show(opts: &[String], name: &str, version: Option<&str>) -> Result<PkgInfo, String> {
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
            "apt-cache show {spec} failed: {}",
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
    dependency(meta, |name| {
        name.starts_with("linux-image-") && name != KERNEL_META
    })
}

/// The first package `pkg` depends on whose name `wanted` accepts, with
/// its exact version if the dependency names one (`(= v)`).
pub(super) fn dependency(
    pkg: &PkgInfo,
    wanted: impl Fn(&str) -> bool,
) -> Option<(String, Option<String>)> {
    let depends = pkg.fields.get("Depends")?;
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
            if !wanted(name) {
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
pub(super) fn verify_deb(dir: &Path, pkg: &PkgInfo) -> Result<String, String> {
    // apt names it NAME_VERSION_ARCH.deb with ':' in the version escaped as %3a.
    let file = format!(
        "{}_{}_{}.deb",
        pkg.name,
        pkg.version.replace(':', "%3a"),
        pkg.arch()
    );
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
    check_deb_fields(&path, &pkg.name, &pkg.version, pkg.arch())?;
    say(&format!(
        "      ok: {file} ({len} bytes, SHA256 {}…, {} {} {})",
        &sum[..16],
        pkg.name,
        pkg.version,
        pkg.arch()
    ));
    Ok(file)
}

pub(super) fn check_deb_fields(
    path: &Path,
    name: &str,
    version: &str,
    arch: &str,
) -> Result<(), String> {
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
        ("Architecture", arch),
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
pub(super) fn check_cached(m: &BTreeMap<String, String>, debs: &Path) -> Result<(), String> {
    let suite = std::env::var("KESTREL_DEBIAN_SUITE").unwrap_or_else(|_| DEFAULT_SUITE.into());
    check_cached_debs(m, debs, &suite, &["kernel", "busybox"])
}

/// Is the cache of Debian `suite` with the packages `keys` of the manifest
/// complete and intact?
pub(super) fn check_cached_debs(
    m: &BTreeMap<String, String>,
    debs: &Path,
    suite: &str,
    keys: &[&str],
) -> Result<(), String> {
    if m.get("suite").map(String::as_str) != Some(suite) {
        return Err(format!(
            "it holds Debian {:?}, {suite:?} is wanted",
            m.get("suite").map(String::as_str).unwrap_or("?")
        ));
    }
    for &key in keys {
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
        let arch = m
            .get(&format!("{key}_arch"))
            .map(String::as_str)
            .unwrap_or("arm64");
        check_deb_fields(&path, field("package")?, field("version")?, arch)?;
    }
    Ok(())
}

pub(super) fn parse_manifest(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

pub(super) fn render_manifest(m: &BTreeMap<String, String>) -> String {
    let mut s = String::from("# written by `cargo xtask guest-assets` (docs/linux-guests.md)\n");
    for (k, v) in m {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// apt, dpkg-deb, tar, gzip and sha256sum must be there (they are on
/// Debian); `cpio` and e2fsprogs (`mke2fs`, `debugfs`, `e2fsck`, for the
/// root filesystem image) are installed from Debian if missing.
pub(super) fn need_tools() -> Result<(), String> {
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
    install_if_missing("cpio", &["cpio"], || have("cpio"))?;
    // The loong64 kernel's modules are xz-compressed.
    install_if_missing("xz-utils", &["xz"], || have("xz"))?;
    install_if_missing("e2fsprogs", &E2FS_TOOLS, || {
        E2FS_TOOLS.iter().all(|t| find_tool(t).is_some())
    })
}

/// Installs Debian package `pkg` when `present` says its `commands` are
/// missing: on Debian as root, otherwise an error saying what to install.
fn install_if_missing(
    pkg: &str,
    commands: &[&str],
    present: impl Fn() -> bool,
) -> Result<(), String> {
    if present() {
        return Ok(());
    }
    let what = commands.join("`, `");
    let debian = std::fs::read_to_string("/etc/os-release")
        .map(|t| t.lines().any(|l| l == "ID=debian"))
        .unwrap_or(false);
    if !debian {
        return Err(format!("`{what}` missing: install {pkg} and re-run"));
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Err(format!(
            "`{what}` missing: run as root (or: sudo apt-get install {pkg}) and re-run"
        ));
    }
    say(&format!(
        "installing Debian's {pkg} package (apt-get install {pkg})"
    ));
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends", pkg])
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
            return Err(format!(
                "apt-get install {pkg} failed: install the {pkg} package and re-run"
            ));
        }
    }
    if present() {
        Ok(())
    } else {
        Err(format!(
            "`{what}` still missing after apt-get install {pkg}"
        ))
    }
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
pub(super) fn deb_member(deb: &Path, prefix: &str) -> Result<String, String> {
    deb_member_where(deb, prefix, |n| n.starts_with(prefix))
}

/// The one data member of `deb` that `wanted` accepts (`what` names it in
/// errors).
pub(super) fn deb_member_where(
    deb: &Path,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> Result<String, String> {
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
        .filter(|n| wanted(n))
        .collect();
    match names.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(format!("{}: has no {what}*", deb.display())),
        many => Err(format!("{}: several {what}*: {many:?}", deb.display())),
    }
}

/// Extracts one member of a `.deb` to `dest` (without unpacking the rest).
pub(super) fn extract_member(deb: &Path, member: &str, dest: &Path) -> Result<(), String> {
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

/// Extracts `members` of a `.deb` below `dest` with their paths (one pass
/// over the archive); each must be there.
pub(super) fn extract_members(deb: &Path, members: &[String], dest: &Path) -> Result<(), String> {
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    let tar = Command::new("tar")
        .args(["-x", "--no-same-owner", "-C"])
        .arg(dest)
        .args(members)
        .stdin(dpkg.stdout.take().unwrap())
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    let dpkg_ok = dpkg.wait().is_ok_and(|s| s.success());
    if !tar.status.success() || !dpkg_ok {
        return Err(format!(
            "cannot extract {} from {} (dpkg-deb --fsys-tarfile | tar): {}",
            members.join(" "),
            deb.display(),
            String::from_utf8_lossy(&tar.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
