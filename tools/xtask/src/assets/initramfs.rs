//! The Linux guest's initramfs: busybox, the `/init` script, the test
//! script (`tools/guests/linux/*.sh`, the test completed with its table of
//! known FP answers) and the virtio modules (`modules.rs`), packed as a
//! reproducible `newc` cpio, gzipped. The same tree becomes the ext4 root
//! filesystem (`rootfs.rs`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use super::mkdir;

/// The floating-point test: CPU slot `j` (the j-th online CPU) sums
/// `FP_BASE + j * FP_STEP` terms of two series (see [`fp_expected`]).
pub const FP_BASE: u64 = 20_000;

pub const FP_STEP: u64 = 1_000;

/// Slots with a known answer in the init script (the most CPUs it checks).
pub const FP_SLOTS: usize = 16;

/// The known answers of the FP test for CPU slot `slot`: the number of
/// terms and the two sums as the guest's `awk` prints them (`%.12f`).
/// Both sides use IEEE doubles with the same operations in the same order,
/// so the digits match exactly: sum 1/k^2 (-> pi^2/6) and the Leibniz
/// series 4 * sum (-1)^(k+1)/(2k-1) (-> pi).
pub fn fp_expected(slot: usize) -> (u64, String) {
    let n = FP_BASE + slot as u64 * FP_STEP;
    (n, series(n))
}

/// The FP sleeper (`kestrel-fp-sleep`): CPU slot `j` sums
/// `FP_SLEEP_BASE + j * FP_SLEEP_STEP` terms each round.
pub const FP_SLEEP_BASE: u64 = 3_000;

pub const FP_SLEEP_STEP: u64 = 100;

/// The sleeper's known answer for CPU slot `slot`, as [`fp_expected`].
pub fn fp_sleep_expected(slot: usize) -> (u64, String) {
    let n = FP_SLEEP_BASE + slot as u64 * FP_SLEEP_STEP;
    (n, series(n))
}

/// The two series to `n` terms as the guest's `awk` prints them.
fn series(n: u64) -> String {
    let (mut s, mut t, mut p) = (0.0f64, 0.0f64, 1.0f64);
    let mut k = 1.0f64;
    while k <= n as f64 {
        s += 1.0 / (k * k);
        t += p * 4.0 / (2.0 * k - 1.0);
        p = -p;
        k += 1.0;
    }
    format!("{s:.12} {t:.12}")
}

/// The `/init` script: mounts, reads the kestrel.* options, then either
/// runs the test and powers off or starts a shell.
const INIT: &str = include_str!("../../../guests/linux/init.sh");

/// `/bin/kestrel-linux-test [N]`: CPUs online (= N if given), then FP work
/// with known answers on every online CPU in parallel.
const TEST: &str = include_str!("../../../guests/linux/kestrel-linux-test.sh");
/// `/bin/kestrel-net-test ROLE MIB PEER`: the VM-to-VM network test.
const NET_TEST: &str = include_str!("../../../guests/linux/kestrel-net-test.sh");
/// `/bin/kestrel-fp-sleep ROUNDS SLEEP_US`: FP rounds with known answers
/// and sleeps between them, on every online CPU.
const FP_SLEEP: &str = include_str!("../../../guests/linux/kestrel-fp-sleep.sh");

/// The FP sleeper with its table of known answers (`sleep_terms`,
/// `sleep_answer`).
pub fn fp_sleep_script() -> String {
    let mut terms = String::from("sleep_terms() {\n    case $1 in\n");
    let mut answers = String::from("sleep_answer() {\n    case $1 in\n");
    for slot in 0..FP_SLOTS {
        let (n, a) = fp_sleep_expected(slot);
        terms.push_str(&format!("        {slot}) echo {n} ;;\n"));
        answers.push_str(&format!("        {slot}) echo \"{a}\" ;;\n"));
    }
    terms.push_str("    esac\n}\n");
    answers.push_str("    esac\n}\n");
    let (head, body) = FP_SLEEP
        .split_once("rounds=${1:-10}")
        .expect("sleeper script layout");
    format!("{head}{terms}{answers}rounds=${{1:-10}}{body}")
}

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
/// tree in `tree`; `populate` adds to the tree (the modules) before it is
/// packed. Everything is written under temporary names and renamed into
/// place, so a test reading the files meanwhile never sees half of one.
pub(super) fn build_initramfs(
    busybox: &Path,
    populate: impl FnOnce(&Path) -> Result<(), String>,
    tree: &Path,
    out: &Path,
) -> Result<(), String> {
    let pid = std::process::id();
    let staging = &tree.with_file_name(format!(".initramfs.d.{pid}"));
    if staging.exists() {
        std::fs::remove_dir_all(staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    }
    for d in [
        "bin", "dev", "proc", "sys", "tmp", "root", "sbin", "usr/bin", "usr/sbin",
    ] {
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
    write_exec(&staging.join("bin/kestrel-net-test"), NET_TEST)?;
    write_exec(&staging.join("bin/kestrel-fp-sleep"), &fp_sleep_script())?;
    populate(staging)?;
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
    fn sleeper_script_has_its_own_table_before_use() {
        let s = fp_sleep_script();
        assert!(s.starts_with("#!/bin/sh\n"));
        let table = s.find("sleep_answer() {").unwrap();
        assert!(table < s.find("rounds=${1:-10}").unwrap());
        let (n, a) = fp_sleep_expected(2);
        assert_eq!(n, FP_SLEEP_BASE + 2 * FP_SLEEP_STEP);
        assert!(s.contains(&format!("        2) echo {n} ;;")));
        assert!(s.contains(&format!("        2) echo \"{a}\" ;;")));
        // The same series as the test's, to fewer terms.
        assert_eq!(series(FP_BASE), fp_expected(0).1);
    }
}
