//! kestrel started by the firmware real arm64 boards run, under QEMU
//! `virt,virtualization=on` (cases of `cargo xtask smoke`;
//! docs/boards/juno.md):
//!
//! - **U-Boot `booti`**: Debian's `qemu_arm64/u-boot.bin` as `-bios`; its
//!   distro boot finds `boot.scr` (a legacy uImage script made here, see
//!   [`boot_script`]) on the first partition of a virtio disk, which loads
//!   `kestrel.bin` and runs `booti` with U-Boot's own device tree.
//! - **UEFI from `-kernel`**: Debian's `QEMU_EFI.fd` as `-bios`; edk2 loads
//!   the image (a PE/COFF EFI application as well as an arm64 `Image`)
//!   through fw_cfg and starts it with the `-append` string as its load
//!   options.
//! - **UEFI from the EFI system partition**: the same firmware boots
//!   `\EFI\BOOT\BOOTAA64.EFI` from a FAT partition of type 0xEF on a
//!   virtio disk (the removable-media path: no boot entry, no options).
//!
//! edk2 hands over QEMU's device tree with `acpi=off`, and ACPI tables
//! and no device tree with `acpi=on`: both are cases, the ACPI ones
//! (GICv3 from `-kernel` and from the ESP, GICv2 from `-kernel`) must
//! say the board came from ACPI. One more DTB case runs edk2 on a GICv2.
//!
//! Each boot runs one test-guest VM (`configs/test/arm64-fwboot.toml`) whose
//! every check must pass, and kestrel must say which firmware started it.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::assets::firmware::{self, Firmware};
use crate::qemu::{Boot, Runner};
use crate::suite::{Test, Verdict};
use crate::vmtest::VmCase;
use crate::{root, Arch};

/// The VM config every firmware case runs.
const CONFIG: &str = "configs/test/arm64-fwboot.toml";

/// How the firmware finds and starts kestrel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootPath {
    UBoot,
    UefiKernel,
    UefiEsp,
}

/// One firmware case: how kestrel is found, what describes the board,
/// the GIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwCase {
    pub path: BootPath,
    /// edk2 with `acpi=on`: ACPI tables and no device tree.
    pub acpi: bool,
    pub gic: u32,
}

impl FwCase {
    const fn new(path: BootPath, acpi: bool, gic: u32) -> FwCase {
        FwCase { path, acpi, gic }
    }

    /// The file names of its image, disk and log.
    fn slug(self) -> String {
        let base = match self.path {
            BootPath::UBoot => "u-boot",
            BootPath::UefiKernel => "uefi-kernel",
            BootPath::UefiEsp => "uefi-esp",
        };
        let acpi = if self.acpi { "-acpi" } else { "" };
        let gic = if self.gic == 2 { "-gicv2" } else { "" };
        format!("{base}{acpi}{gic}")
    }
}

/// The cases, in `make test` order.
pub fn tests() -> Vec<Test<'static>> {
    [
        (
            "arm64 firmware U-Boot: booti from a virtio disk (boot.scr, U-Boot's DTB) runs a VM",
            FwCase::new(BootPath::UBoot, false, 3),
        ),
        (
            "arm64 firmware UEFI -kernel: edk2 loads it through fw_cfg, DTB from the configuration table, runs a VM",
            FwCase::new(BootPath::UefiKernel, false, 3),
        ),
        (
            "arm64 firmware UEFI ESP: edk2 boots (\\EFI\\BOOT\\BOOTAA64.EFI) runs a VM",
            FwCase::new(BootPath::UefiEsp, false, 3),
        ),
        (
            "arm64 firmware UEFI -kernel GICv2: edk2 on a GICv2 machine, DTB, runs a VM",
            FwCase::new(BootPath::UefiKernel, false, 2),
        ),
        (
            "arm64 firmware UEFI ACPI -kernel: edk2 with acpi=on (no DTB), board from the MADT/GTDT/SPCR/FADT, GICv3, runs a VM",
            FwCase::new(BootPath::UefiKernel, true, 3),
        ),
        (
            "arm64 firmware UEFI ACPI ESP: edk2 with acpi=on boots \\EFI\\BOOT\\BOOTAA64.EFI, board from ACPI, GICv3, runs a VM",
            FwCase::new(BootPath::UefiEsp, true, 3),
        ),
        (
            "arm64 firmware UEFI ACPI -kernel GICv2: edk2 with acpi=on, GICv2 from the MADT (GICC, GICH, GICV), runs a VM",
            FwCase::new(BootPath::UefiKernel, true, 2),
        ),
    ]
    .into_iter()
    .map(|(name, case)| Test::new(name, move || verdict(case)))
    .collect()
}

/// What kestrel must print about how it was started.
fn started_by(case: FwCase) -> &'static [&'static str] {
    match (case.path, case.acpi) {
        (BootPath::UBoot, _) => &["arm64: EL2, image at"],
        (_, false) => &["memory map entries stay the firmware's", "DTB at 0x"],
        (_, true) => &[
            "memory map entries stay the firmware's",
            "arm64: board from ACPI (no device tree)",
            "no DTB (board from ACPI)",
        ],
    }
}

fn verdict(case: FwCase) -> Verdict {
    verdict_of(boot(case), |log, timed_out| judge(case, log, timed_out))
}

/// The verdict of a firmware boot (`boot`: the run and the firmware's
/// version, or why it could not run): `judge` reads the log and whether
/// it timed out; the firmware version is echoed.
pub fn verdict_of(
    boot: Result<(Boot, String), String>,
    judge: impl FnOnce(&str, bool) -> Vec<String>,
) -> Verdict {
    let (boot, firmware) = match boot {
        Ok(b) => b,
        Err(e) => return Verdict::error(e),
    };
    let log = boot.text();
    Verdict {
        echo: vec![format!("firmware: {firmware}")],
        problems: judge(&log, boot.timed_out),
        log,
        saved: boot.saved,
        ..Verdict::default()
    }
}

/// Adds a problem to `problems` for each of `wants` the log lacks.
pub fn require<'a>(
    problems: &mut Vec<String>,
    log: &str,
    wants: impl IntoIterator<Item = &'a str>,
) {
    for want in wants {
        if !log.contains(want) {
            problems.push(format!("the log lacks {want:?}"));
        }
    }
}

/// The case's judge: the VM's checks (as the arm64 VM suite judges them),
/// the firmware's own banner, and kestrel's word on how it was started.
fn judge(case: FwCase, log: &str, timed_out: bool) -> Vec<String> {
    let vm = vm_case(case.gic);
    let mut problems = crate::vmtests_arm64::judge_vm(&vm, log, timed_out);
    let firmware = match case.path {
        BootPath::UBoot => "U-Boot 20",
        BootPath::UefiKernel | BootPath::UefiEsp => "UEFI firmware",
    };
    // The GIC kestrel drives, as the banner says it.
    let irqchip = if case.gic == 2 {
        " irqchip:  GICv2"
    } else {
        " irqchip:  GICv3"
    };
    require(
        &mut problems,
        log,
        [firmware, irqchip]
            .into_iter()
            .chain(started_by(case).iter().copied()),
    );
    if case.path == BootPath::UBoot && !log.contains("kestrel: loading kestrel.bin from boot.scr") {
        problems.push("U-Boot did not run kestrel's boot.scr".into());
    }
    if case.acpi {
        // Every CPU from the MADT, the console from the SPCR.
        require(
            &mut problems,
            log,
            [
                "ACPI MADT: 4 CPU(s) enabled",
                "ACPI SPCR: interface type 0x3 (Pl011) at 0x9000000",
                "ACPI FADT: PSCI over SMC",
                "cpus:     4 of 4 online",
            ],
        );
    }
    problems
}

fn vm_case(gic: u32) -> VmCase {
    VmCase {
        name: "arm64-fwboot",
        config: CONFIG,
        features: &[],
        gic,
        mem_mib: 1024,
        vms: vec!["fw0".into()],
        must_pass: crate::vmtests_arm64::ALL,
        check: None,
        timeout: Duration::from_secs(240),
        qemu_args: &[],
        stop_after: None,
        lvz: false,
        append: "",
        smp: 4,
    }
}

/// Builds kestrel with the case's VM, makes the disk and boots it through
/// the firmware.
fn boot(case: FwCase) -> Result<(Boot, String), String> {
    let path = case.path;
    let fw = firmware::ensure(false)?;
    crate::guests::build_guest_arm64()?;
    let built = crate::build_image_with(Arch::Aarch64, &[], Some(&root().join(CONFIG)))?;
    let dir = root().join("build/aarch64");
    let slug = case.slug();
    let (image, kestrel) = private_copy(&built, &dir, &slug, "bin")?;
    let mut cmd = command(&fw, case);
    match path {
        BootPath::UBoot => {
            let script = boot_script(U_BOOT_SCRIPT.as_bytes(), "kestrel boot script");
            let disk = disk_image(&[("boot.scr", &script), ("kestrel.bin", &kestrel)], 0x0c)?;
            attach_disk(&mut cmd, &dir.join(format!("fwboot-{slug}.img")), &disk)?;
        }
        BootPath::UefiKernel => kernel_args(&mut cmd, &image),
        BootPath::UefiEsp => {
            let disk = disk_image(&[("EFI/BOOT/BOOTAA64.EFI", &kestrel)], 0xef)?;
            attach_disk(&mut cmd, &dir.join(format!("fwboot-{slug}.img")), &disk)?;
        }
    }
    let boot = run(
        cmd,
        vm_case(case.gic).timeout,
        &dir,
        &slug,
        path == BootPath::UefiEsp,
    )?;
    Ok((boot, fw.versions))
}

/// A private copy of the built image `built` in `dir`, as
/// `fwboot-{slug}.{ext}` (another build may replace the original
/// meanwhile): its path and its bytes.
pub fn private_copy(
    built: &Path,
    dir: &Path,
    slug: &str,
    ext: &str,
) -> Result<(PathBuf, Vec<u8>), String> {
    let image = dir.join(format!("fwboot-{slug}.{ext}"));
    std::fs::copy(built, &image).map_err(|e| format!("{}: {e}", image.display()))?;
    let bytes = std::fs::read(&image).map_err(|e| format!("{}: {e}", image.display()))?;
    Ok((image, bytes))
}

/// The firmware loads `image` from `-kernel` (fw_cfg) and passes the
/// `-append` string as its load options.
pub fn kernel_args(cmd: &mut Command, image: &Path) {
    cmd.arg("-kernel")
        .arg(image)
        .args(["-append", crate::TEST_APPEND]);
}

/// Runs a firmware boot within `timeout`, the log kept as
/// `fwboot-{slug}.log` in `dir`. `esp`: kestrel was started from the EFI
/// system partition with no options, so it idles once its VMs are done,
/// and the run stops there.
pub fn run(
    cmd: Command,
    timeout: Duration,
    dir: &Path,
    slug: &str,
    esp: bool,
) -> Result<Boot, String> {
    let mut runner = Runner::new(cmd, timeout);
    if esp {
        runner = runner
            .stop_after("all VMs have ended", 1)
            .grace(Duration::from_secs(1));
    }
    runner.log_to(dir.join(format!("fwboot-{slug}.log"))).run()
}

/// The boot script U-Boot's distro boot runs: it loads kestrel from the
/// partition the script came from (`devtype`, `devnum`, `distro_bootpart`
/// are set by distro boot) and starts it with U-Boot's own device tree.
const U_BOOT_SCRIPT: &str = "\
echo kestrel: loading kestrel.bin from boot.scr on ${devtype} ${devnum}:${distro_bootpart}
setenv bootargs kestrel.exit=poweroff kestrel.console=log
load ${devtype} ${devnum}:${distro_bootpart} ${kernel_addr_r} kestrel.bin
booti ${kernel_addr_r} - ${fdtcontroladdr}
echo kestrel: booti returned
";

/// QEMU with the board firmware and the machine kestrel's tests use
/// (4 CPUs, 1 GiB, the case's GIC), no `-kernel` yet.
fn command(fw: &Firmware, case: FwCase) -> Command {
    let path = case.path;
    // With ACPI on (QEMU's default when firmware runs) edk2 hands over ACPI
    // tables and no device tree; with it off, QEMU's device tree.
    let acpi = match path {
        BootPath::UBoot => "",
        BootPath::UefiKernel | BootPath::UefiEsp if case.acpi => ",acpi=on",
        BootPath::UefiKernel | BootPath::UefiEsp => ",acpi=off",
    };
    let machine = format!("virt,virtualization=on,gic-version={}{acpi}", case.gic);
    let mut c = Command::new("qemu-system-aarch64");
    c.args(["-M", &machine, "-cpu", "max"])
        .args(["-smp", "4", "-m", "1024", "-nic", "none"])
        .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
        .arg("-no-reboot")
        .arg("-bios")
        .arg(match path {
            BootPath::UBoot => &fw.u_boot,
            BootPath::UefiKernel | BootPath::UefiEsp => &fw.edk2,
        });
    c
}

/// Writes `disk` to `file` and attaches it as a virtio block device (PCI:
/// U-Boot and edk2 on both architectures drive it), writes discarded.
pub fn attach_disk(cmd: &mut Command, file: &Path, disk: &[u8]) -> Result<(), String> {
    std::fs::write(file, disk).map_err(|e| format!("{}: {e}", file.display()))?;
    cmd.arg("-drive")
        .arg(format!(
            "if=none,id=fwdisk,format=raw,snapshot=on,file={}",
            file.display()
        ))
        .args(["-device", "virtio-blk-pci,drive=fwdisk"]);
    Ok(())
}

/// Where the partition starts (LBA 2048: 1 MiB, as partitioning tools do).
const PART_START: u64 = 2048;
/// The FAT partition's size.
const PART_MIB: u64 = 32;

/// A disk image: an MBR with one bootable partition of `part_type` (0x0c
/// FAT32 LBA, 0xef EFI system partition) holding a FAT file system with
/// `files` (paths with `/`, directories created as needed).
pub fn disk_image(files: &[(&str, &[u8])], part_type: u8) -> Result<Vec<u8>, String> {
    let fat = fat_image(files, PART_MIB << 20)?;
    let mut disk = vec![0u8; (PART_START * 512) as usize];
    disk[..512].copy_from_slice(&mbr(part_type, PART_START, fat.len() as u64 / 512));
    disk.extend_from_slice(&fat);
    Ok(disk)
}

/// A master boot record with one bootable primary partition.
pub fn mbr(part_type: u8, start_lba: u64, sectors: u64) -> [u8; 512] {
    let mut m = [0u8; 512];
    let e = &mut m[446..462];
    // Bootable.
    e[0] = 0x80;
    // CHS fields: "use LBA" (0xfe 0xff 0xff), as tools write for big disks.
    e[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
    e[4] = part_type;
    e[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
    e[8..12].copy_from_slice(&(start_lba as u32).to_le_bytes());
    e[12..16].copy_from_slice(&(sectors as u32).to_le_bytes());
    m[510] = 0x55;
    m[511] = 0xaa;
    m
}

/// A FAT file system of `size` bytes holding `files`.
pub fn fat_image(files: &[(&str, &[u8])], size: u64) -> Result<Vec<u8>, String> {
    let io = |what: &str, e: std::io::Error| format!("FAT image: {what}: {e}");
    let mut buf = vec![0u8; size as usize];
    fatfs::format_volume(
        Cursor::new(&mut buf[..]),
        fatfs::FormatVolumeOptions::new().volume_label(*b"KESTREL    "),
    )
    .map_err(|e| io("format", e))?;
    {
        let fs = fatfs::FileSystem::new(Cursor::new(&mut buf[..]), fatfs::FsOptions::new())
            .map_err(|e| io("open", e))?;
        for (path, data) in files {
            let root_dir = fs.root_dir();
            let parts: Vec<&str> = path.split('/').collect();
            let (name, dirs) = parts.split_last().ok_or("FAT image: empty path")?;
            let mut dir = root_dir;
            for d in dirs {
                dir = match dir.open_dir(d) {
                    Ok(x) => x,
                    Err(_) => dir.create_dir(d).map_err(|e| io(d, e))?,
                };
            }
            let mut f = dir.create_file(name).map_err(|e| io(path, e))?;
            f.truncate().map_err(|e| io(path, e))?;
            f.write_all(data).map_err(|e| io(path, e))?;
        }
        fs.unmount().map_err(|e| io("unmount", e))?;
    }
    Ok(buf)
}

/// U-Boot's legacy image of type "script" (what `mkimage -T script -C none
/// -A arm64` makes): a 64-byte big-endian header (magic 0x27051956, CRC-32
/// of the header, time, data size, load and entry address, CRC-32 of the
/// data, OS, architecture, type, compression, 32-byte name), then the data:
/// a table of image lengths ending in 0 (one image here) and the script.
pub fn boot_script(script: &[u8], name: &str) -> Vec<u8> {
    const MAGIC: u32 = 0x2705_1956;
    const OS_LINUX: u8 = 5;
    const ARCH_ARM64: u8 = 22;
    const TYPE_SCRIPT: u8 = 6;
    const COMP_NONE: u8 = 0;
    let mut data = Vec::with_capacity(script.len() + 8);
    data.extend_from_slice(&(script.len() as u32).to_be_bytes());
    data.extend_from_slice(&0u32.to_be_bytes());
    data.extend_from_slice(script);
    let mut h = [0u8; 64];
    h[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    // 4..8 header CRC (below), 8..12 time 0 (reproducible), 16..24 load/entry 0
    h[12..16].copy_from_slice(&(data.len() as u32).to_be_bytes());
    h[24..28].copy_from_slice(&kestrel_abi::package::crc32(&data).to_be_bytes());
    h[28] = OS_LINUX;
    h[29] = ARCH_ARM64;
    h[30] = TYPE_SCRIPT;
    h[31] = COMP_NONE;
    let n = name.len().min(31);
    h[32..32 + n].copy_from_slice(&name.as_bytes()[..n]);
    let hcrc = kestrel_abi::package::crc32(&h);
    h[4..8].copy_from_slice(&hcrc.to_be_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(&data);
    out
}

/// The boot paths a built arm64 image supports, from its first bytes (for
/// `make image`).
pub fn boot_paths(image: &Path) -> Result<Vec<&'static str>, String> {
    let d = std::fs::read(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let mut paths = Vec::new();
    if kestrel_abi::image::Arm64Image::parse(&d).is_ok() {
        paths.push("arm64 Image with DTB in x0 (QEMU -kernel, U-Boot booti)");
    }
    if pe_header(&d, PE_AARCH64).is_some() {
        paths.push(
            "EFI application (UEFI with a device tree or ACPI tables: -kernel with edk2, \\EFI\\BOOT\\BOOTAA64.EFI, UEFI shell)",
        );
    }
    Ok(paths)
}

/// PE machine type of arm64.
pub const PE_AARCH64: u16 = 0xaa64;

/// The PE header offset of an image that starts with "MZ" and has
/// "PE\0\0" for `machine` where offset 0x3c points.
pub fn pe_header(d: &[u8], machine: u16) -> Option<usize> {
    if d.get(0..2)? != b"MZ" {
        return None;
    }
    let off = u32::from_le_bytes(d.get(0x3c..0x40)?.try_into().ok()?) as usize;
    (d.get(off..off + 4)? == b"PE\0\0" && d.get(off + 4..off + 6)? == machine.to_le_bytes())
        .then_some(off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_image_header() {
        let s = boot_script(b"echo hi\n", "t");
        assert_eq!(&s[0..4], &[0x27, 0x05, 0x19, 0x56]);
        assert_eq!(u32::from_be_bytes(s[12..16].try_into().unwrap()), 16);
        // Header CRC over the header with its CRC field zero.
        let mut h = s[..64].to_vec();
        let hcrc = u32::from_be_bytes(h[4..8].try_into().unwrap());
        h[4..8].fill(0);
        assert_eq!(kestrel_abi::package::crc32(&h), hcrc);
        assert_eq!(
            u32::from_be_bytes(s[24..28].try_into().unwrap()),
            kestrel_abi::package::crc32(&s[64..])
        );
        assert_eq!(&s[64..72], &[0, 0, 0, 8, 0, 0, 0, 0]);
        assert_eq!(&s[72..], b"echo hi\n");
        assert_eq!((s[29], s[30]), (22, 6));
    }

    #[test]
    fn mbr_entry() {
        let m = mbr(0xef, 2048, 65536);
        assert_eq!(&m[510..], &[0x55, 0xaa]);
        assert_eq!(m[446], 0x80);
        assert_eq!(m[450], 0xef);
        assert_eq!(u32::from_le_bytes(m[454..458].try_into().unwrap()), 2048);
        assert_eq!(u32::from_le_bytes(m[458..462].try_into().unwrap()), 65536);
    }

    #[test]
    fn fat_holds_the_files() {
        let img = fat_image(&[("EFI/BOOT/BOOTAA64.EFI", b"MZabc"), ("x", b"1")], 8 << 20).unwrap();
        let fs = fatfs::FileSystem::new(Cursor::new(img), fatfs::FsOptions::new()).unwrap();
        let mut f = fs.root_dir().open_file("EFI/BOOT/BOOTAA64.EFI").unwrap();
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut v).unwrap();
        assert_eq!(v, b"MZabc");
    }

    #[test]
    fn pe_detection() {
        let mut d = vec![0u8; 0x100];
        d[0..2].copy_from_slice(b"MZ");
        d[0x3c] = 0x40;
        d[0x40..0x44].copy_from_slice(b"PE\0\0");
        d[0x44..0x46].copy_from_slice(&[0x64, 0xaa]);
        assert_eq!(pe_header(&d, PE_AARCH64), Some(0x40));
        assert_eq!(pe_header(&d, crate::fwboot_la64::PE_LOONGARCH64), None);
        d[0x44..0x46].copy_from_slice(&[0x64, 0x62]);
        assert_eq!(
            pe_header(&d, crate::fwboot_la64::PE_LOONGARCH64),
            Some(0x40)
        );
        d[0x44] = 0x4c;
        assert_eq!(pe_header(&d, PE_AARCH64), None);
        d[0x3c] = 0xff;
        assert_eq!(pe_header(&d, PE_AARCH64), None);
        d[0x3c] = 0x40;
        d[0x44] = 0x64;
        assert_eq!(
            pe_header(&d, crate::fwboot_la64::PE_LOONGARCH64),
            Some(0x40)
        );
        d[0] = b'X';
        assert_eq!(pe_header(&d, crate::fwboot_la64::PE_LOONGARCH64), None);
    }
}
