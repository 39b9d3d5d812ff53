//! kestrel on LoongArch started by UEFI firmware, as a Loongson board
//! starts it, under QEMU (cases of `cargo xtask smoke`;
//! docs/boards/3c5000.md, docs/loongarch-boot.md "UEFI"): Debian trixie's
//! edk2 for QEMU (`qemu-efi-loongarch64`, fetched by
//! `assets::loong64::ensure_firmware`) as `-bios` on `-M virt -cpu la464`.
//!
//! - **-kernel** and **ESP**: two NUMA nodes of two cores (two sockets,
//!   distance 20); edk2 starts `kestrel.efi` through fw_cfg (with the
//!   `-append` string as load options) or as `\EFI\BOOT\BOOTLOONGARCH64.EFI`
//!   from a FAT partition of type 0xEF on a virtio-blk-pci disk (no
//!   options). kestrel reads the machine from ACPI (cores by physical ID
//!   from the MADT, nodes from the SRAT, distances from the SLIT, console
//!   from the SPCR), starts every core and runs one test-guest VM
//!   (`configs/test/la64-fwboot.toml`) whose every check must pass.
//! - **16 cores in 4 nodes** (the 3C5000's topology): kestrel alone from
//!   `-kernel`; every core must come online.
//!
//! Also: the boot paths `make image ARCH=loongarch64` prints, and the check
//! that `kestrel.efi` is a PE/COFF image for LoongArch64.

use std::path::Path as FsPath;
use std::process::Command;
use std::time::Duration;

use crate::fwboot::{
    attach_disk, disk_image, kernel_args, pe_header, private_copy, require, run, verdict_of,
};
use crate::qemu::Boot;
use crate::suite::{Test, Verdict};
use crate::vmtest::VmCase;
use crate::{root, Arch};

/// How edk2 finds kestrel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    UefiKernel,
    UefiEsp,
}

/// The cases, in `make test` order.
pub fn tests() -> Vec<Test<'static>> {
    [
        (
            "loongarch64 firmware UEFI -kernel: edk2 loads kestrel.efi through fw_cfg, ACPI with 2 nodes, runs a VM",
            Path::UefiKernel,
        ),
        (
            "loongarch64 firmware UEFI ESP: edk2 boots \\EFI\\BOOT\\BOOTLOONGARCH64.EFI, ACPI with 2 nodes, runs a VM",
            Path::UefiEsp,
        ),
    ]
    .into_iter()
    .map(|(name, path)| Test::new(name, move || verdict_la64(path)))
    .chain([Test::new(
        "loongarch64 firmware UEFI -kernel: 16 cores in 4 nodes (the 3C5000's topology), every core started by physical ID",
        verdict_la64_topology,
    )])
    .collect()
}

/// What kestrel alone must print on [`la16_command`]'s machine.
pub const LA16_MUST_SAY: &[&str] = &[
    "boot services exited",
    "ACPI: 16 core(s) on 4 node(s) (MADT core PIC, SRAT): cpu0=core0/node0 ",
    " cpu4=core4/node1 ",
    " cpu8=core8/node2 ",
    " cpu15=core15/node3",
    "ACPI: SLIT: 4 localities, distances [10 20 30 40] [20 10 20 30] [30 20 10 20] [40 30 20 10]",
    " cpus:     16 of 16 online",
    "kestrel: work done, powering off (status 0)",
];

/// 16 cores in 4 sockets and 4 NUMA nodes (as a 3C5000: 4 nodes of 4),
/// distances growing with the node number difference.
fn la16_command(firmware: &FsPath) -> Command {
    let mut c = Command::new("qemu-system-loongarch64");
    c.args(["-M", "virt", "-cpu", "la464"]).args([
        "-smp",
        "16,sockets=4,cores=4,threads=1",
        "-m",
        "4096",
    ]);
    for n in 0..4 {
        c.args(["-object", &format!("memory-backend-ram,id=ram{n},size=1G")])
            .args([
                "-numa",
                &format!("node,nodeid={n},cpus={}-{},memdev=ram{n}", n * 4, n * 4 + 3),
            ]);
    }
    for a in 0..4 {
        for b in a + 1..4 {
            c.args([
                "-numa",
                &format!("dist,src={a},dst={b},val={}", 10 + 10 * (b - a)),
            ]);
        }
    }
    c.args(["-nic", "none", "-display", "none", "-monitor", "none"])
        .args(["-serial", "stdio", "-no-reboot"])
        .arg("-bios")
        .arg(firmware);
    c
}

/// Kestrel alone (no VM) started by edk2 from `-kernel` on [`la16_command`].
fn verdict_la64_topology() -> Verdict {
    let boot = || -> Result<(Boot, String), String> {
        let (firmware, version) = crate::assets::loong64::ensure_firmware(false)?;
        crate::build_image_with(Arch::LoongArch64, &[], None)?;
        let dir = root().join("build/loongarch64");
        let (image, _) = private_copy(&dir.join("kestrel.efi"), &dir, "uefi-16", "efi")?;
        let mut cmd = la16_command(&firmware);
        kernel_args(&mut cmd, &image);
        let boot = run(cmd, Duration::from_secs(120), &dir, "uefi-16", false)?;
        Ok((boot, version))
    };
    verdict_of(boot(), |log, timed_out| {
        let mut problems = Vec::new();
        if timed_out {
            problems.push("timed out".to_string());
        }
        require(&mut problems, log, LA16_MUST_SAY.iter().copied());
        problems
    })
}

/// The LoongArch VM config every firmware case runs.
const LA_CONFIG: &str = "configs/test/la64-fwboot.toml";

fn la_vm_case() -> VmCase {
    VmCase {
        name: "la64-fwboot",
        config: LA_CONFIG,
        features: &[],
        gic: 3,
        mem_mib: 2048,
        vms: vec!["fw0".into()],
        must_pass: crate::vmtests_la64::ALL_CHECKS_4,
        check: None,
        timeout: Duration::from_secs(300),
        qemu_args: &[],
        stop_after: None,
        lvz: false,
        append: "",
        smp: 4,
    }
}

/// What kestrel must print when edk2 started it on the 2-node machine of
/// [`la_command`]: the UEFI hand-over, ACPI's cores (physical IDs, nodes),
/// the SLIT, every core online.
pub const LA_MUST_SAY: &[&str] = &[
    "kestrel: started by UEFI firmware",
    "boot services exited",
    "ACPI: 4 core(s) on 2 node(s) (MADT core PIC, SRAT): cpu0=core0/node0 cpu1=core1/node0 cpu2=core2/node1 cpu3=core3/node1",
    "ACPI: SLIT: 2 localities, distances [10 20] [20 10]",
    "console: 16550 at 0x1fe001e0 (ACPI SPCR)",
    " cpus:     4 of 4 online",
];

/// The judge of a LoongArch case: the VM's checks (as the LoongArch VM
/// suite judges them) and what kestrel must say.
pub fn judge_la64(log: &str, timed_out: bool) -> Vec<String> {
    let mut problems = crate::vmtests_la64::judge_vm(&la_vm_case(), log, timed_out);
    require(&mut problems, log, LA_MUST_SAY.iter().copied());
    problems
}

fn verdict_la64(path: Path) -> Verdict {
    verdict_of(boot_la64(path), judge_la64)
}

/// QEMU LoongArch `virt` with edk2 and two NUMA nodes: 2 sockets of 2
/// cores, 1 GiB each, distance 20 between them.
fn la_command(firmware: &FsPath) -> Command {
    let mut c = Command::new("qemu-system-loongarch64");
    c.args(["-M", "virt", "-cpu", "la464"])
        .args(["-smp", "4,sockets=2,cores=2,threads=1", "-m", "2048"])
        .args(["-object", "memory-backend-ram,id=ram0,size=1G"])
        .args(["-object", "memory-backend-ram,id=ram1,size=1G"])
        .args(["-numa", "node,nodeid=0,cpus=0-1,memdev=ram0"])
        .args(["-numa", "node,nodeid=1,cpus=2-3,memdev=ram1"])
        .args(["-numa", "dist,src=0,dst=1,val=20"])
        .args(["-nic", "none", "-display", "none", "-monitor", "none"])
        .args(["-serial", "stdio", "-no-reboot"])
        .arg("-bios")
        .arg(firmware);
    c
}

/// Builds kestrel with the case's VM, makes the disk and boots it through
/// edk2.
fn boot_la64(path: Path) -> Result<(Boot, String), String> {
    let (firmware, version) = crate::assets::loong64::ensure_firmware(false)?;
    crate::guests::build_guest_la64()?;
    crate::build_image_with(Arch::LoongArch64, &[], Some(&root().join(LA_CONFIG)))?;
    let dir = root().join("build/loongarch64");
    let slug = match path {
        Path::UefiKernel => "uefi-kernel",
        Path::UefiEsp => "uefi-esp",
    };
    let (image, kestrel) = private_copy(&dir.join("kestrel.efi"), &dir, slug, "efi")?;
    let mut cmd = la_command(&firmware);
    if path == Path::UefiKernel {
        kernel_args(&mut cmd, &image);
    } else {
        let disk = disk_image(&[("EFI/BOOT/BOOTLOONGARCH64.EFI", &kestrel)], 0xef)?;
        attach_disk(&mut cmd, &dir.join(format!("fwboot-{slug}.img")), &disk)?;
    }
    let boot = run(cmd, la_vm_case().timeout, &dir, slug, path == Path::UefiEsp)?;
    Ok((boot, version))
}

/// PE machine type of LoongArch64.
pub const PE_LOONGARCH64: u16 = 0x6264;

/// The boot paths of the LoongArch image (for `make image`): `elf` and
/// the raw EFI image beside it (`kestrel.efi`).
pub fn boot_paths(elf: &FsPath) -> Result<Vec<String>, String> {
    let read = |p: &FsPath| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut paths = Vec::new();
    if read(elf)?.starts_with(b"\x7fELF") {
        paths.push(format!(
            "{}: ELF (QEMU -kernel, device tree from QEMU)",
            elf.display()
        ));
    }
    let efi = elf.with_file_name("kestrel.efi");
    if efi.is_file() && pe_header(&read(&efi)?, PE_LOONGARCH64).is_some() {
        paths.push(format!(
            "{}: EFI application (UEFI, ACPI: -kernel with edk2, \\EFI\\BOOT\\BOOTLOONGARCH64.EFI, \
             UEFI shell, boot entry, GRUB chainloader; loaded at its ImageBase 0x200000)",
            efi.display()
        ));
    }
    Ok(paths)
}

/// Checks that `file` is a PE/COFF image for `machine` (after objcopy).
pub fn check_efi_image(file: &FsPath, machine: u16) -> Result<(), String> {
    let d = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    pe_header(&d, machine).map(|_| ()).ok_or_else(|| {
        format!(
            "{}: not a PE/COFF image for machine {machine:#x} (\"MZ\", PE header at 0x3c)",
            file.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn la64_judge_wants_acpi_nodes_and_every_core() {
        // Nothing printed: every expectation is a problem.
        let p = judge_la64("", false);
        assert!(p.len() > LA_MUST_SAY.len(), "{p:?}");
        // What kestrel says, but a core missing: that line is the problem.
        let mut log: String = LA_MUST_SAY.iter().map(|l| format!("{l}\n")).collect();
        log = log.replace(" cpus:     4 of 4 online", " cpus:     3 of 4 online");
        let p = judge_la64(&log, false);
        assert!(p.iter().any(|x| x.contains("4 of 4 online")), "{p:?}");
        assert!(!p.iter().any(|x| x.contains("SLIT")), "{p:?}");
    }
}
