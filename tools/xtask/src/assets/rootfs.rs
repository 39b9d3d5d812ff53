//! The Linux guest's ext4 root filesystem image (`rootfs.ext4`): the
//! initramfs tree (busybox, `/init`, the test, the virtio modules) in a
//! 16 MiB ext4 image made without root privileges: `mke2fs -d` copies the
//! tree, `debugfs -w` adds `/dev/console` and makes every file root's.
//! It is rebuilt only when its inputs (the tree's paths, modes, link
//! targets and file contents, and the format below) change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::apt::sha256;

/// The image size in MiB.
pub const ROOTFS_MIB: u32 = 16;

/// Its ext4 volume label.
pub const ROOTFS_LABEL: &str = "kestrel-root";

/// Bump when the way the image is made changes (forces a rebuild).
const FORMAT: &str = "rootfs-v1";

/// The e2fsprogs commands used, found in `PATH` or `/sbin`, `/usr/sbin`
/// (not in a user's `PATH` on Debian).
pub const E2FS_TOOLS: [&str; 3] = ["mke2fs", "debugfs", "e2fsck"];

/// Where `tool` is, if anywhere.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn tool(name: &str) -> Result<PathBuf, String> {
    find_tool(name).ok_or_else(|| {
        format!("`{name}` is missing: install Debian's e2fsprogs (tools/setup.sh does) and re-run")
    })
}

/// One entry of a tree, as the image records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir { mode: u32 },
    File { mode: u32, sha256: String },
    Symlink { target: String },
}

/// Every path below `tree` (relative, `/`-separated, sorted) with what the
/// image keeps of it.
pub fn walk(tree: &Path) -> Result<BTreeMap<String, Entry>, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let dir = tree.join(&rel);
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for e in rd {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            let r = rel.join(e.file_name());
            let name = r
                .to_str()
                .ok_or_else(|| format!("{}: not UTF-8", r.display()))?
                .to_string();
            let p = e.path();
            let meta =
                std::fs::symlink_metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            let mode = meta.permissions().mode() & 0o7777;
            let entry = if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                Entry::Symlink {
                    target: t.to_string_lossy().into_owned(),
                }
            } else if meta.is_dir() {
                todo.push(r);
                Entry::Dir { mode }
            } else if meta.is_file() {
                Entry::File {
                    mode,
                    sha256: sha256(&p)?,
                }
            } else {
                return Err(format!("{}: not a file, directory or symlink", p.display()));
            };
            out.insert(name, entry);
        }
    }
    Ok(out)
}

/// The inputs of the image as text: the format, the size, then one line per
/// path. Equal texts make equal images (up to UUID and time stamps).
pub fn inputs(entries: &BTreeMap<String, Entry>) -> String {
    let mut s = format!("{FORMAT} {ROOTFS_MIB}MiB {ROOTFS_LABEL}\n");
    for (path, e) in entries {
        match e {
            Entry::Dir { mode } => s.push_str(&format!("d {mode:04o} /{path}\n")),
            Entry::File { mode, sha256 } => s.push_str(&format!("f {mode:04o} /{path} {sha256}\n")),
            Entry::Symlink { target } => s.push_str(&format!("l /{path} -> {target}\n")),
        }
    }
    s
}

/// The `debugfs -w -f` script run on the fresh image: `/dev/console`
/// (char 5,1, mode 0600) and every path owned by root.
pub fn debugfs_script(entries: &BTreeMap<String, Entry>) -> String {
    // mknod links its name into the current directory as given.
    let mut s = String::from("cd /dev\nmknod console c 5 1\ncd /\nsif /dev/console mode 020600\n");
    for path in std::iter::once("").chain(
        entries
            .keys()
            .map(String::as_str)
            .chain(std::iter::once("dev/console")),
    ) {
        s.push_str(&format!("sif /{path} uid 0\nsif /{path} gid 0\n"));
    }
    s
}

fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("{what} failed ({}): {}", out.status, text.trim()));
    }
    Ok(text)
}

/// Builds `out` from `tree` unless `last_inputs` (the SHA256 of the inputs
/// text the existing `out` was made from) and `last_image` (its SHA256)
/// show it is already that image. Returns (inputs SHA256, image SHA256,
/// whether it was built).
pub(super) fn ensure_rootfs(
    tree: &Path,
    out: &Path,
    last_inputs: Option<&String>,
    last_image: Option<&String>,
) -> Result<(String, String, bool), String> {
    let entries = walk(tree)?;
    let pid = std::process::id();
    let inputs_file = out.with_extension(format!("inputs.{pid}.tmp"));
    std::fs::write(&inputs_file, inputs(&entries))
        .map_err(|e| format!("{}: {e}", inputs_file.display()))?;
    let inputs_sha = sha256(&inputs_file);
    let _ = std::fs::remove_file(&inputs_file);
    let inputs_sha = inputs_sha?;
    if out.is_file() && last_inputs == Some(&inputs_sha) {
        let image_sha = sha256(out)?;
        if last_image == Some(&image_sha) {
            return Ok((inputs_sha, image_sha, false));
        }
    }
    let (mke2fs, debugfs, e2fsck) = (tool("mke2fs")?, tool("debugfs")?, tool("e2fsck")?);
    let tmp = out.with_extension(format!("ext4.{pid}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let fail = |e: String| {
        let _ = std::fs::remove_file(&tmp);
        e
    };
    run(
        Command::new(&mke2fs)
            .args(["-q", "-F", "-t", "ext4", "-L", ROOTFS_LABEL])
            .args(["-E", "root_owner=0:0", "-d"])
            .arg(tree)
            .arg(&tmp)
            .arg(format!("{ROOTFS_MIB}M")),
        "mke2fs -t ext4 -d",
    )
    .map_err(fail)?;
    let script = out.with_extension(format!("debugfs.{pid}.tmp"));
    std::fs::write(&script, debugfs_script(&entries))
        .map_err(|e| format!("{}: {e}", script.display()))
        .map_err(fail)?;
    let res = run(
        Command::new(&debugfs)
            .arg("-w")
            .arg("-f")
            .arg(&script)
            .arg(&tmp),
        "debugfs -w (mknod /dev/console, owners)",
    );
    let _ = std::fs::remove_file(&script);
    let text = res.map_err(fail)?;
    // debugfs exits 0 even when a command fails: it prints the error. It
    // echoes each command ("debugfs: ...") and mknod says "Allocated inode".
    if let Some(l) = text.lines().find(|l| {
        !l.starts_with("debugfs") && !l.starts_with("Allocated inode:") && !l.trim().is_empty()
    }) {
        return Err(fail(format!("debugfs on {}: {l}", tmp.display())));
    }
    check_rootfs(&debugfs, &e2fsck, &tmp).map_err(fail)?;
    std::fs::rename(&tmp, out)
        .map_err(|e| format!("{} -> {}: {e}", tmp.display(), out.display()))
        .map_err(fail)?;
    Ok((inputs_sha, sha256(out)?, true))
}

/// A clean ext4 (`e2fsck -fn`) with `/dev/console` char 5,1 and `/init`.
fn check_rootfs(debugfs: &Path, e2fsck: &Path, image: &Path) -> Result<(), String> {
    run(
        Command::new(e2fsck).arg("-fn").arg(image),
        &format!("e2fsck -fn {}", image.display()),
    )?;
    let stat = run(
        Command::new(debugfs)
            .args(["-R", "stat /dev/console"])
            .arg(image),
        "debugfs stat /dev/console",
    )?;
    if !stat.contains("Type: character special")
        || !stat.contains("Device major/minor number: 05:01")
    {
        return Err(format!(
            "{}: /dev/console is not char 5,1: {}",
            image.display(),
            stat.trim()
        ));
    }
    let init = run(
        Command::new(debugfs).args(["-R", "stat /init"]).arg(image),
        "debugfs stat /init",
    )?;
    if !init.contains("Type: regular") {
        return Err(format!("{}: no /init: {}", image.display(), init.trim()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> BTreeMap<String, Entry> {
        let mut m = BTreeMap::new();
        m.insert("bin".into(), Entry::Dir { mode: 0o755 });
        m.insert(
            "bin/busybox".into(),
            Entry::File {
                mode: 0o755,
                sha256: "ab".into(),
            },
        );
        m.insert(
            "bin/sh".into(),
            Entry::Symlink {
                target: "busybox".into(),
            },
        );
        m
    }

    #[test]
    fn inputs_name_every_path_and_change_with_content() {
        let a = inputs(&entries());
        assert!(a.starts_with(&format!("{FORMAT} {ROOTFS_MIB}MiB")));
        assert!(a.contains("d 0755 /bin\n"));
        assert!(a.contains("f 0755 /bin/busybox ab\n"));
        assert!(a.contains("l /bin/sh -> busybox\n"));
        let mut e = entries();
        e.insert(
            "bin/busybox".into(),
            Entry::File {
                mode: 0o755,
                sha256: "cd".into(),
            },
        );
        assert_ne!(inputs(&e), a);
    }

    #[test]
    fn debugfs_makes_the_console_and_root_owners() {
        let s = debugfs_script(&entries());
        assert!(s.starts_with("cd /dev\nmknod console c 5 1\ncd /\nsif /dev/console mode 020600\n"));
        for p in ["/", "/bin", "/bin/busybox", "/bin/sh", "/dev/console"] {
            assert!(
                s.contains(&format!("sif {p} uid 0\nsif {p} gid 0\n")),
                "{p}"
            );
        }
    }

    #[test]
    fn walk_reads_a_tree() {
        let dir = std::env::temp_dir().join(format!("kestrel-rootfs-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("bin/busybox"), "x").unwrap();
        std::os::unix::fs::symlink("busybox", dir.join("bin/sh")).unwrap();
        let w = walk(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            w.keys().collect::<Vec<_>>(),
            ["bin", "bin/busybox", "bin/sh"]
        );
        assert_eq!(
            w["bin/sh"],
            Entry::Symlink {
                target: "busybox".into()
            }
        );
        assert!(matches!(&w["bin/busybox"], Entry::File { sha256, .. } if sha256.len() == 64));
    }
}
