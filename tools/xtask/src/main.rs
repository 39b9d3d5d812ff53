//! kestrel's build driver, called by the Makefile:
//!
//! ```text
//! cargo xtask image   [--arch A] [--features F]          build the bootable image, print its path
//!                     [--config FILE]                    ... with the VMs of FILE packed in (docs/config.md)
//! cargo xtask run     [--arch A] [--smp N] [--gic 2|3] [--append ARGS]   boot it under QEMU
//! cargo xtask debug   [--arch A] [--smp N] [--gic 2|3]   QEMU waiting for gdb on :1234
//! cargo xtask smoke   [--case NAME] [--list]             QEMU smoke tests on both architectures
//! cargo xtask vmtest  [--arch A] [--case NAME] [--list]  the test guests as VMs under kestrel (docs/test-guest*.md)
//! cargo xtask check-fp                                   prove no FP/SIMD register is used
//! cargo xtask bench-seeds [--quick] [--only vmid,fp,ipi]  the seeds' experiments with Linux guests
//! ```

mod assets;
mod bench_exits;
mod bench_seeds;
mod bench_vm;
mod config;
mod fwboot;
mod fwboot_la64;
mod qemu;
mod share;
mod smoke;
mod suite;
mod vmtest;
mod vmtests_arm64;
mod vmtests_la64;
mod vmtests_linux;
mod zboot;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    Aarch64,
    LoongArch64,
}

impl Arch {
    pub fn parse(s: &str) -> Result<Arch, String> {
        match s {
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            "loongarch64" | "loongarch" | "la64" => Ok(Arch::LoongArch64),
            _ => Err(format!("unknown ARCH '{s}': use aarch64 or loongarch64")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64",
            Arch::LoongArch64 => "loongarch64",
        }
    }

    pub fn target(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64-unknown-none-softfloat",
            Arch::LoongArch64 => "loongarch64-unknown-none-softfloat",
        }
    }
}

/// The workspace root (two levels above this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A tool shipped with the pinned toolchain's `llvm-tools` component.
pub fn llvm_tool(name: &str) -> Result<PathBuf, String> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run rustc: {e}"))?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let host = host_triple()?;
    let path = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: run `rustup component add llvm-tools` (or `make setup`)",
            path.display()
        ))
    }
}

fn host_triple() -> Result<String, String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run rustc: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| "rustc -vV printed no host".to_string())
}

/// Options shared by the commands.
#[derive(Clone, Debug)]
pub struct Opts {
    pub arch: Arch,
    pub smp: u32,
    pub gic: u32,
    pub mem_mib: u32,
    pub features: Vec<String>,
    pub append: String,
    /// VM config to pack into the image (docs/config.md).
    pub config: Option<PathBuf>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            arch: Arch::Aarch64,
            smp: 4,
            gic: 3,
            mem_mib: 1024,
            features: Vec::new(),
            append: String::new(),
            config: None,
        }
    }
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--arch" => o.arch = Arch::parse(&val("--arch")?)?,
            "--smp" => {
                o.smp = val("--smp")?
                    .parse()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or("SMP must be a number from 1 to 16")?
            }
            "--gic" => {
                o.gic = match val("--gic")?.as_str() {
                    "2" => 2,
                    "3" => 3,
                    other => return Err(format!("GIC must be 2 or 3, not '{other}'")),
                }
            }
            "--mem" => {
                o.mem_mib = val("--mem")?
                    .parse()
                    .ok()
                    .filter(|&m| m >= 128)
                    .ok_or("MEM must be a number of MiB, at least 128")?
            }
            "--features" => {
                let f = val("--features")?;
                o.features.extend(
                    f.split([',', ' '])
                        .filter(|s| !s.is_empty())
                        .map(String::from),
                );
            }
            "--append" => o.append = val("--append")?,
            "--config" => o.config = Some(PathBuf::from(val("--config")?)),
            other => return Err(format!("unknown option '{other}'")),
        }
    }
    Ok(o)
}

/// Builds the firmware for `arch` and returns the bootable file:
/// the raw arm64 `Image`, or the LoongArch ELF.
pub fn build_image(arch: Arch, features: &[String]) -> Result<PathBuf, String> {
    build_image_with(arch, features, None)
}

/// [`build_image`] with the VMs of `config` packed in: the config is checked
/// and packed into `build/<arch>/package.bin` (nothing is written when it is
/// bad), which `boot/build.rs` embeds (env `KESTREL_PACKAGE`). Without a
/// config the firmware embeds an empty package.
pub fn build_image_with(
    arch: Arch,
    features: &[String],
    config: Option<&Path>,
) -> Result<PathBuf, String> {
    let root = root();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    match config {
        Some(file) => {
            let package = root.join("build").join(arch.name()).join("package.bin");
            for line in config::write_package(file, arch, &package)? {
                eprintln!("package: {line}");
            }
            cmd.env("KESTREL_PACKAGE", &package);
        }
        None => {
            cmd.env_remove("KESTREL_PACKAGE");
        }
    }
    cmd.current_dir(&root).args([
        "build",
        "--release",
        "-p",
        "kestrel-boot",
        "--target",
        arch.target(),
    ]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    if arch == Arch::LoongArch64 {
        // No prebuilt core for LoongArch: build it (nightly flags on the pinned stable).
        cmd.env("RUSTC_BOOTSTRAP", "1").args([
            "-Zbuild-std=core,alloc",
            "-Zbuild-std-features=compiler-builtins-mem",
        ]);
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building the {} image failed", arch.name()));
    }
    let elf = root
        .join("target")
        .join(arch.target())
        .join("release/kestrel");
    let out_dir = root.join("build").join(arch.name());
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    match arch {
        Arch::Aarch64 => {
            let image = out_dir.join("kestrel.bin");
            let status = Command::new(llvm_tool("llvm-objcopy")?)
                .args(["-O", "binary"])
                .arg(&elf)
                .arg(&image)
                .status()
                .map_err(|e| format!("cannot run llvm-objcopy: {e}"))?;
            if !status.success() {
                return Err("llvm-objcopy failed".into());
            }
            // Boot loaders refuse an image without a Linux `Image` header.
            assets::check_arm64_image(&image)?;
            std::fs::copy(&elf, out_dir.join("kestrel.elf")).map_err(|e| e.to_string())?;
            Ok(image)
        }
        Arch::LoongArch64 => {
            let out = out_dir.join("kestrel.elf");
            std::fs::copy(&elf, &out).map_err(|e| format!("{}: {e}", out.display()))?;
            // The raw image: a UEFI application (PE/COFF header first).
            let efi = out_dir.join("kestrel.efi");
            let status = Command::new(llvm_tool("llvm-objcopy")?)
                .args(["-O", "binary"])
                .arg(&elf)
                .arg(&efi)
                .status()
                .map_err(|e| format!("cannot run llvm-objcopy: {e}"))?;
            if !status.success() {
                return Err("llvm-objcopy failed".into());
            }
            fwboot_la64::check_efi_image(&efi, fwboot_la64::PE_LOONGARCH64)?;
            Ok(out)
        }
    }
}

/// The ELF with symbols, for gdb and the FP check.
pub fn elf_path(arch: Arch) -> PathBuf {
    root()
        .join("target")
        .join(arch.target())
        .join("release/kestrel")
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args.split_first().ok_or_else(usage)?;
    match cmd.as_str() {
        "image" => {
            let o = parse_opts(rest)?;
            let image = build_image_with(o.arch, &o.features, o.config.as_deref())?;
            let paths = match o.arch {
                Arch::Aarch64 => fwboot::boot_paths(&image)?
                    .into_iter()
                    .map(String::from)
                    .collect(),
                Arch::LoongArch64 => fwboot_la64::boot_paths(&image)?,
            };
            for p in paths {
                eprintln!("boots as: {p}");
            }
            println!("{}", image.display());
            Ok(())
        }
        "run" => {
            let o = parse_opts(rest)?;
            let image = build_image_with(o.arch, &o.features, o.config.as_deref())?;
            qemu::run_interactive(&o, &image, false)
        }
        "debug" => {
            let o = parse_opts(rest)?;
            let image = build_image_with(o.arch, &o.features, o.config.as_deref())?;
            qemu::run_interactive(&o, &image, true)
        }
        "smoke" => smoke::run(rest),
        "vmtest" if vmtests_arm64::selected(rest) => vmtest::run(&vmtests_arm64::VM_SUITE, rest),
        "vmtest" => vmtest::run(&vmtests_la64::VM_SUITE, rest),
        "guest-assets" | "bench-linux" => assets::command(cmd, rest),
        "firmware" => assets::firmware::command(rest),
        "bench-vm" => bench_vm::run(rest),
        "bench-exits" => bench_exits::run(rest),
        "bench-seeds" => bench_seeds::run(rest),
        "bench-net" => vmtests_linux::bench_net(rest),
        "check-fp" => {
            let o = parse_opts(rest)?;
            let mut arches = vec![o.arch];
            if rest.is_empty() {
                arches = vec![Arch::Aarch64, Arch::LoongArch64];
            }
            for arch in arches {
                smoke::check_no_fp(arch)?;
            }
            Ok(())
        }
        "help" | "--help" | "-h" => {
            println!("{}", usage());
            Ok(())
        }
        other => Err(format!("unknown command '{other}'\n{}", usage())),
    }
}

fn usage() -> String {
    "usage: cargo xtask <image|run|debug|smoke|check-fp> [--arch aarch64|loongarch64] \
     [--smp N] [--gic 2|3] [--mem MiB] [--features F] [--append ARGS] [--config FILE]"
        .to_string()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}
