//! The configs case of `cargo xtask smoke`: every config file in `configs/`
//! (and its subdirectories) is checked and packed, as `make image CONFIG=`
//! would, with the guest images it names built or fetched first. Packing
//! only: no boot.

use std::path::{Path, PathBuf};

use crate::suite::{Test, Verdict};
use crate::{root, Arch};

pub const CASE: &str = "configs: every config in configs/ checks and packs (no boot)";

/// The architecture a config is for, from its name (`la64-*`, `*loongarch*`).
pub fn arch_of(path: &Path) -> Arch {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("la64") || name.contains("loongarch") {
        Arch::LoongArch64
    } else {
        Arch::Aarch64
    }
}

/// Every `.toml` under `dir`, sorted.
pub fn config_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The case as a test of the smoke suite.
pub fn test() -> Test<'static> {
    Test::new(CASE, || {
        let t0 = std::time::Instant::now();
        // What the configs name: the test guests, the Linux assets.
        let built = crate::guests::build_guest_arm64()
            .and_then(|_| crate::guests::build_guest_la64())
            .and_then(|_| crate::assets::ensure_within(crate::assets::FETCH_LIMIT))
            .and_then(|_| crate::assets::ensure_within_la64(crate::assets::FETCH_LIMIT));
        if let Err(e) = built {
            return Verdict::error(format!("the guest images the configs name: {e}"));
        }
        let out = std::env::temp_dir().join(format!("kestrel-configs-{}.bin", std::process::id()));
        let files = config_files(&root().join("configs"));
        let mut problems = Vec::new();
        for f in &files {
            if let Err(e) = crate::config::write_package(f, arch_of(f), &out) {
                problems.push(e);
            }
        }
        let _ = std::fs::remove_file(&out);
        if files.len() < 10 {
            problems.push(format!("only {} configs found in configs/", files.len()));
        }
        Verdict {
            problems,
            detail: Some(format!(
                "{} configs, {:.1} s",
                files.len(),
                t0.elapsed().as_secs_f64()
            )),
            ..Verdict::default()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_found_with_their_arch() {
        let files = config_files(&root().join("configs"));
        assert!(files
            .iter()
            .any(|f| f.ends_with("configs/linux-shell.toml")));
        assert!(files
            .iter()
            .any(|f| f.ends_with("configs/test/la64-1vm.toml")));
        assert_eq!(
            arch_of(Path::new("configs/test/la64-1vm.toml")),
            Arch::LoongArch64
        );
        assert_eq!(
            arch_of(Path::new("configs/example-loongarch64.toml")),
            Arch::LoongArch64
        );
        assert_eq!(
            arch_of(Path::new("configs/linux-shell.toml")),
            Arch::Aarch64
        );
    }
}
