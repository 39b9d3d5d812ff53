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
//! cargo xtask layers  [--tree kernel|xtask]              check the crate's imports against its layers.txt
//! ```

mod assets;
mod bench_exits;
mod bench_linux;
mod bench_seeds;
mod bench_vm;
mod boot_case;
mod config;
mod configs_test;
mod console_test;
mod counters;
mod fwboot;
mod fwboot_la64;
mod guest32_words;
mod guests;
mod layers;
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

/// kestrel's command line in every test and benchmark run: power off with
/// the status when the VMs are done, and tagged line-by-line console
/// output (`kestrel.console=log`), which the judges read.
pub const TEST_APPEND: &str = "kestrel.exit=poweroff kestrel.console=log";

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
    /// LoongArch: boot on the emulator with the virtualization extension
    /// (LVZ) that `tools/setup.sh` installs, instead of stock QEMU.
    pub lvz: bool,
    /// A VM package QEMU loads as the initrd: kestrel's boot module, which
    /// replaces the embedded package ([`build_with_module`]).
    pub module: Option<PathBuf>,
    /// `--module`: `image`, `run` and `debug` write `config`'s package to
    /// its own file and boot it as the boot module instead of embedding it.
    pub as_module: bool,
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
            lvz: false,
            module: None,
            as_module: false,
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
            "--lvz" => o.lvz = true,
            "--module" => o.as_module = true,
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

/// `RUSTC_BOOTSTRAP` for every release build of the images, the test
/// guests and the guest programs, whichever the target. LoongArch needs it (`-Zbuild-std`), and
/// the host's proc-macro crates, shared by both targets' builds, rebuild
/// whenever it changes (proc-macro2's build script watches it), and with
/// them every crate using a proc macro, the kernel included: one value for
/// all keeps switching between the architectures from costing a full
/// rebuild (about 20 s each time in `make test`).
pub const RELEASE_BOOTSTRAP: &str = "1";

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
    // The same for both targets (see [`RELEASE_BOOTSTRAP`]).
    cmd.env("RUSTC_BOOTSTRAP", RELEASE_BOOTSTRAP);
    if arch == Arch::LoongArch64 {
        // No prebuilt core for LoongArch: build it (nightly flags on the pinned stable).
        cmd.args([
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

/// Packs the VMs of `config` into the package file `package` and builds
/// kestrel for `arch` with nothing embedded; returns the image. The loader
/// hands kestrel the package as its boot module (QEMU `-initrd`, U-Boot
/// `booti`'s ramdisk: [`Opts::module`]). One image serves every config, so
/// cargo relinks it only when the code or `features` change, not once per
/// config as [`build_image_with`] must; the tests boot this way.
pub fn build_with_module(
    arch: Arch,
    features: &[String],
    config: &Path,
    package: &Path,
) -> Result<PathBuf, String> {
    if let Some(dir) = package.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for line in config::write_package(config, arch, package)? {
        eprintln!("package: {line}");
    }
    build_image_with(arch, features, None)
}

/// The image `o` asks for: its config embedded, or (`--module`) packed
/// into `build/<arch>/package.pkg`, which is then `o.module`.
fn build_for(o: &mut Opts) -> Result<PathBuf, String> {
    match (&o.config, o.as_module) {
        (Some(config), true) => {
            let package = root().join("build").join(o.arch.name()).join("package.pkg");
            let image = build_with_module(o.arch, &o.features, config, &package)?;
            o.module = Some(package);
            Ok(image)
        }
        (None, true) => Err("--module needs --config FILE (the VMs to pack)".into()),
        (config, false) => build_image_with(o.arch, &o.features, config.as_deref()),
    }
}

/// The ELF with symbols, for gdb and the FP check.
pub fn elf_path(arch: Arch) -> PathBuf {
    root()
        .join("target")
        .join(arch.target())
        .join("release/kestrel")
}

/// Before a boot: the pCPUs the config's VMs are placed on must exist
/// with `smp` QEMU CPUs, or kestrel would refuse those VMs. Says what to
/// change instead.
fn check_smp(file: &Path, arch: Arch, smp: u32) -> Result<(), String> {
    let Ok(cfg) = config::load(file, arch) else {
        // The build that follows reports every problem of the config.
        return Ok(());
    };
    let needs = cfg
        .vms
        .iter()
        .map(|v| 64 - v.affinity.mask.leading_zeros())
        .max()
        .unwrap_or(0);
    if needs > smp {
        let names: Vec<&str> = cfg
            .vms
            .iter()
            .filter(|v| 64 - v.affinity.mask.leading_zeros() > smp)
            .map(|v| v.name.as_str())
            .collect();
        return Err(format!(
            "{} places VM(s) {} on pCPUs up to {}, but SMP={smp} gives QEMU {smp} CPU(s): \
             use SMP={needs} or more (`make run SMP={needs}`), or change `cpus` in the config \
             (docs/config.md)",
            file.display(),
            names.join(", "),
            needs - 1
        ));
    }
    Ok(())
}

/// `--arch --smp --gic --mem --features --append --config`, as `image`,
/// `run` and `debug` take them.
const OPTS_HELP: &str = "  --arch aarch64|loongarch64   target (default aarch64)
  --smp N                      QEMU CPUs, 1..=16 (default 4)
  --gic 2|3                    arm64 interrupt controller (default 3)
  --mem MiB                    QEMU memory, at least 128 (default 1024)
  --features F                 kestrel cargo features (comma-separated)
  --append ARGS                kestrel's command line (kestrel.console=log, kestrel.exit=poweroff, ...)
  --config FILE                the VMs to pack into the image (docs/config.md)
  --module                     pack them into build/<arch>/package.pkg instead, which the
                               loader passes as the initrd (QEMU -initrd): kestrel's boot module";

/// Every subcommand: name, arguments, what it does.
const COMMANDS: &[(&str, &str, &str)] = &[
    (
        "image",
        "[OPTIONS]",
        "build the bootable image and print its path",
    ),
    (
        "run",
        "[OPTIONS]",
        "build and boot it under QEMU on this terminal (what `make run` calls)",
    ),
    (
        "debug",
        "[OPTIONS]",
        "boot it under QEMU stopped at the first instruction, gdb server on :1234",
    ),
    (
        "smoke",
        "[--case NAME] [--list]",
        "QEMU smoke tests on both architectures",
    ),
    (
        "vmtest",
        "[--arch A] [--case NAME] [--list]",
        "the test guests as VMs under kestrel",
    ),
    (
        "check-fp",
        "[--arch A]",
        "prove the images use no FP/SIMD register",
    ),
    (
        "guest-assets",
        "[--arch A] [--refresh] [--test]",
        "fetch Debian's kernel and busybox, build the Linux guest images",
    ),
    (
        "firmware",
        "[--refresh]",
        "fetch Debian's U-Boot and edk2 for QEMU (the firmware boot cases)",
    ),
    (
        "boot-scr",
        "[--dev auto|usb|mmc|virtio|scsi] [--part D:P] [--bootargs ARGS] [--out FILE]",
        "write a U-Boot boot.scr that loads and starts kestrel.bin (docs/boards/juno.md)",
    ),
    (
        "bench-vm",
        "[--arch A]",
        "benchmark VMs under kestrel (docs/performance.md)",
    ),
    (
        "bench-exits",
        "[--arch A] [--gic 2|3] [--lvz]",
        "exit round-trip costs by kind",
    ),
    (
        "bench-linux",
        "[--runs N] [--config FILE]",
        "Linux boot time on bare QEMU and under kestrel",
    ),
    (
        "bench-net",
        "",
        "VM-to-VM TCP throughput through kestrel's virtio switch",
    ),
    (
        "layers",
        "[--tree kernel|xtask]",
        "check that each module imports only its own and lower layers, without cycles (kernel/layers.txt, tools/xtask/layers.txt)",
    ),
    ("help", "", "this list (every command also takes --help)"),
];

/// The help of `cmd`, if it has none of its own.
fn command_help(cmd: &str) -> Option<String> {
    let (name, args, what) = COMMANDS.iter().find(|(n, _, _)| *n == cmd)?;
    let mut s = format!("usage: cargo xtask {name} {args}\n{what}\n");
    match *name {
        "image" | "run" | "debug" => {
            s.push_str("options:\n");
            s.push_str(OPTS_HELP);
            s.push('\n');
        }
        "smoke" | "vmtest" => s.push_str(
            "  --case NAME   only the cases whose name starts with NAME\n  --list        print the case names, run nothing\n",
        ),
        "boot-scr" => s.push_str(
            "  --dev DEV        where U-Boot loads kestrel.bin from: auto (default: the device and\n                   partition distro boot found the script on), usb, mmc, virtio (QEMU), scsi\n  \
             --part D:P       device and partition, as U-Boot numbers them (default 0:1)\n  \
             --bootargs ARGS  kestrel's command line (default none)\n  \
             --out FILE       where to write (default build/aarch64/boot.scr)\n",
        ),
        _ => {}
    }
    Some(s)
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args.split_first().ok_or_else(usage)?;
    // guest-assets and firmware print their own, longer help.
    if rest.iter().any(|a| a == "--help" || a == "-h")
        && !matches!(cmd.as_str(), "guest-assets" | "firmware")
    {
        return match command_help(cmd) {
            Some(h) => {
                print!("{h}");
                Ok(())
            }
            None => Err(format!("unknown command '{cmd}'\n{}", usage())),
        };
    }
    match cmd.as_str() {
        "image" => {
            let mut o = parse_opts(rest)?;
            let image = build_for(&mut o)?;
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
            if let Some(m) = &o.module {
                eprintln!(
                    "boot module: {} (QEMU -initrd, U-Boot booti's ramdisk)",
                    m.display()
                );
            }
            println!("{}", image.display());
            Ok(())
        }
        "run" => {
            let mut o = parse_opts(rest)?;
            if let Some(file) = &o.config {
                check_smp(file, o.arch, o.smp)?;
            }
            let image = build_for(&mut o)?;
            qemu::run_interactive(&o, &image, false)
        }
        "debug" => {
            let mut o = parse_opts(rest)?;
            let image = build_for(&mut o)?;
            qemu::run_interactive(&o, &image, true)
        }
        "smoke" => smoke::run(rest),
        "vmtest" if vmtests_arm64::selected(rest) => vmtest::run(&vmtests_arm64::VM_SUITE, rest),
        "vmtest" => vmtest::run(&vmtests_la64::VM_SUITE, rest),
        "guest-assets" => assets::command(
            rest,
            &assets::BareTests {
                arm64: vmtests_linux::run_bare,
                la64: vmtests_linux::run_bare_la64,
            },
        ),
        "bench-linux" => bench_linux::run(rest),
        "firmware" => assets::firmware::command(rest),
        "bench-vm" => bench_vm::run(rest),
        "bench-exits" => bench_exits::run(rest),
        "bench-seeds" => bench_seeds::run(rest),
        "bench-net" => bench_linux::bench_net(rest),
        "boot-scr" => boot_scr(rest),
        "layers" => layers::command(rest),
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
    let mut s = String::from("usage: cargo xtask <command> [args]   (`cargo xtask <command> --help` for each)\ncommands:\n");
    for (name, _, what) in COMMANDS {
        s.push_str(&format!("  {name:<13} {what}\n"));
    }
    s.push_str("OPTIONS of image, run and debug:\n");
    s.push_str(OPTS_HELP);
    s
}

/// `cargo xtask boot-scr`: a U-Boot `boot.scr` (legacy script image) that
/// loads `kestrel.bin` from DEV and starts it with U-Boot's device tree.
fn boot_scr(args: &[String]) -> Result<(), String> {
    let mut dev = String::from("auto");
    let mut part = String::from("0:1");
    let mut bootargs = String::new();
    let mut out = root().join("build/aarch64/boot.scr");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dev" => dev = val()?,
            "--part" => part = val()?,
            "--bootargs" => bootargs = val()?,
            "--out" => out = PathBuf::from(val()?),
            other => return Err(format!("boot-scr: unknown option '{other}' (try --help)")),
        }
    }
    if !matches!(
        dev.as_str(),
        "auto" | "usb" | "mmc" | "virtio" | "scsi" | "sata"
    ) {
        return Err(format!(
            "boot-scr: --dev {dev}: use auto, usb, mmc, virtio, scsi or sata"
        ));
    }
    let script = boot_scr_text(&dev, &part, &bootargs);
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    std::fs::write(&out, fwboot::boot_script(script.as_bytes(), "kestrel"))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("boot-scr: the script:\n{script}");
    println!("{}", out.display());
    Ok(())
}

/// The text of [`boot_scr`]'s script.
fn boot_scr_text(dev: &str, part: &str, bootargs: &str) -> String {
    // Distro boot sets these for the script it runs.
    let (dev, part) = match dev {
        "auto" => ("${devtype}", "${devnum}:${distro_bootpart}"),
        d => (d, part),
    };
    let scan = match dev {
        "usb" => "usb start\n",
        "virtio" => "virtio scan\n",
        "scsi" | "sata" => "scsi scan\n",
        _ => "",
    };
    format!(
        "echo kestrel: loading kestrel.bin from {dev} {part}\n\
         {scan}\
         setenv bootargs {bootargs}\n\
         load {dev} {part} ${{kernel_addr_r}} kestrel.bin\n\
         booti ${{kernel_addr_r}} - ${{fdtcontroladdr}}\n\
         echo kestrel: booti returned\n"
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_listed_and_has_help() {
        let u = usage();
        for (name, _, _) in COMMANDS {
            assert!(u.contains(name));
            if !matches!(*name, "guest-assets" | "firmware") {
                assert!(command_help(name)
                    .unwrap()
                    .starts_with("usage: cargo xtask"));
            }
        }
        // The dispatch in `run` knows each of them (a name missing there
        // would be "unknown command").
        let src = include_str!("main.rs");
        for (name, _, _) in COMMANDS {
            if *name != "help" {
                assert!(
                    src.contains(&format!("\"{name}\" =>"))
                        || src.contains(&format!("\"{name}\" |")),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn the_boot_script_loads_and_starts_kestrel() {
        let s = boot_scr_text("usb", "0:1", "kestrel.tick_hz=100");
        assert!(s.contains("usb start\nsetenv bootargs kestrel.tick_hz=100\nload usb 0:1 ${kernel_addr_r} kestrel.bin\nbooti ${kernel_addr_r} - ${fdtcontroladdr}"));
        assert!(!boot_scr_text("mmc", "0:1", "").contains("start"));
        assert!(boot_scr_text("virtio", "0:1", "").contains("virtio scan"));
        assert!(boot_scr_text("auto", "0:1", "")
            .contains("load ${devtype} ${devnum}:${distro_bootpart} ${kernel_addr_r} kestrel.bin"));
    }
}
