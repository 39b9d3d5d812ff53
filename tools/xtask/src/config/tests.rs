use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

const MB: u64 = 1 << 20;

/// A fresh directory holding a fake arm64 Image (`Image`, image_size 3 MiB),
/// an initrd (`initrd.cpio`), a DTB (`guest.dtb`), a LoongArch ELF and a
/// non-Image file.
fn fixture() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kestrel-config-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut image = vec![0u8; 8192];
    image[16..24].copy_from_slice(&(3 * MB).to_le_bytes());
    image[0x38..0x3c].copy_from_slice(b"ARM\x64");
    std::fs::write(dir.join("Image"), &image).unwrap();
    std::fs::write(dir.join("initrd.cpio"), vec![7u8; 5000]).unwrap();
    let mut dtb = vec![0u8; 64];
    dtb[..4].copy_from_slice(&[0xd0, 0x0d, 0xfe, 0xed]);
    std::fs::write(dir.join("guest.dtb"), &dtb).unwrap();
    // A LoongArch ELF: header, one PT_LOAD program header at 64 for the
    // bytes from 0x100.
    let mut elf = vec![0u8; 256];
    elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
    elf[18..20].copy_from_slice(&258u16.to_le_bytes());
    elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
    elf[64..68].copy_from_slice(&1u32.to_le_bytes());
    elf[64 + 8..64 + 16].copy_from_slice(&0x80u64.to_le_bytes());
    elf[64 + 32..64 + 40].copy_from_slice(&0x80u64.to_le_bytes());
    elf[64 + 40..64 + 48].copy_from_slice(&0x80u64.to_le_bytes());
    std::fs::write(dir.join("vmlinux"), &elf).unwrap();
    std::fs::write(dir.join("notanimage"), vec![1u8; 4096]).unwrap();
    std::fs::write(dir.join("disk.img"), vec![3u8; 2048]).unwrap();
    std::fs::write(dir.join("odd.img"), vec![3u8; 1000]).unwrap();
    dir
}

fn check(text: &str) -> Result<Config, ConfigError> {
    let dir = fixture();
    let file = dir.join("vms.toml");
    std::fs::write(&file, text).unwrap();
    load(&file, Arch::Aarch64)
}

fn error(text: &str) -> ConfigError {
    let e = check(text).expect_err("config must be refused");
    assert!(e.file.ends_with("vms.toml"), "error names the file: {e}");
    e
}

/// `error(text)` with the expected field and a problem containing `needle`.
fn expect(text: &str, field: &str, needle: &str) {
    let e = error(text);
    assert_eq!(e.field, field, "{e}");
    assert!(e.problem.contains(needle), "`{needle}` not in: {e}");
    assert!(e.to_string().contains("vms.toml"), "{e}");
}

const GOOD: &str = r#"
[hypervisor]
fp_policy = "lazy"
tick_hz = 250

[[vm]]
name = "linux0"
vcpus = 2
memory = "64M"
cpus = [0, 1]
pinned = true
kernel = "Image"
initrd = "initrd.cpio"
cmdline = "console=ttyAMA0 earlycon"

[[vm]]
name = "linux-1"
vcpus = 4
memory = 33554432
cpus = [2, 3]
kernel = "Image"
dtb = "guest.dtb"
console = "pl011"

[[vm]]
name = "test_guest"
vcpus = 1
memory = "8M"
kernel = "notanimage"
kind = "test-guest"
"#;

/// Replaces the first occurrence of `from` in the good config.
fn bad(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    GOOD.replacen(from, to, 1)
}

#[test]
fn good_config_is_read_and_packed() {
    let cfg = check(GOOD).unwrap();
    assert_eq!(
        cfg.settings,
        HypervisorSettings {
            fp_policy: FpPolicy::Lazy,
            max_cpus: 16,
            tick_hz: 250,
            ..Default::default()
        }
    );
    assert_eq!(cfg.vms.len(), 3);
    let v = &cfg.vms[0];
    assert_eq!((v.name.as_str(), v.vcpus, v.memory), ("linux0", 2, 64 * MB));
    assert_eq!(
        v.affinity,
        Affinity {
            mask: 0b11,
            pinned: true,
            shared: false,
        }
    );
    assert_eq!(
        (v.kind, v.console),
        (GuestKind::LinuxArm64Image, ConsoleKind::Pl011)
    );
    assert_eq!((v.load_offset, v.kernel_footprint), (0, 3 * MB));
    assert_eq!(v.initrd.as_ref().map(Vec::len), Some(5000));
    assert_eq!(v.cmdline, "console=ttyAMA0 earlycon");
    let v = &cfg.vms[1];
    assert_eq!(
        (v.memory, v.console, v.affinity.pinned),
        (32 * MB, ConsoleKind::Pl011, false)
    );
    assert!(v.dtb.is_some());
    assert_eq!(cfg.vms[2].kind, GuestKind::TestRaw);

    let bytes = pack(&cfg);
    let pkg = Package::parse(&bytes).unwrap();
    let names: Vec<_> = pkg.vms().map(|v| v.unwrap().name).collect();
    assert_eq!(names, ["linux0", "linux-1", "test_guest"]);
    assert_eq!(pkg.settings().tick_hz, 250);
}

#[test]
fn write_package_writes_only_good_configs() {
    let dir = fixture();
    let cfg = dir.join("ok.toml");
    std::fs::write(&cfg, GOOD).unwrap();
    let out = dir.join("out/package.bin");
    let summary = write_package(&cfg, Arch::Aarch64, &out).unwrap();
    assert_eq!(summary.len(), 3);
    assert!(
        summary[0].starts_with("vm[0] linux0: 2 vCPU(s), 64 MiB"),
        "{}",
        summary[0]
    );
    assert!(Package::parse(&std::fs::read(&out).unwrap()).is_ok());

    let badcfg = dir.join("bad.toml");
    std::fs::write(&badcfg, bad("vcpus = 2", "vcpus = 0")).unwrap();
    let out2 = dir.join("out2/package.bin");
    let e = write_package(&badcfg, Arch::Aarch64, &out2).unwrap_err();
    assert!(
        e.contains("bad.toml:8:1: vm[0].vcpus: 0 is out of range"),
        "{e}"
    );
    assert!(!out2.exists(), "nothing is written for a bad config");
}

#[test]
fn syntax_error_has_line_and_column() {
    let e = error("[[vm]]\nname = \"a\"\nvcpus = = 2\n");
    assert_eq!(e.line_col.map(|l| l.0), Some(3), "{e}");
    assert!(e.to_string().contains("vms.toml:3:"), "{e}");
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let e = error(&bad("vcpus = 4", "vcpus = 4\nmemroy = \"1G\""));
    assert!(e.field.starts_with("vm[1]"), "{e}");
    assert!(e.problem.contains("unknown field `memroy`"), "{e}");
    let e = error(&bad("tick_hz = 250", "tick_hz = 250\nturbo = true"));
    assert!(e.field.starts_with("hypervisor"), "{e}");
    assert!(e.problem.contains("unknown field `turbo`"), "{e}");
    let e = error(&format!("{GOOD}\n[network]\nx = 1\n"));
    assert!(e.problem.contains("unknown field `network`"), "{e}");
}

#[test]
fn wrong_types_name_the_field() {
    let e = error(&bad("vcpus = 2", "vcpus = \"two\""));
    assert_eq!(e.field, "vm[0].vcpus", "{e}");
    let e = error(&bad("pinned = true", "pinned = 1"));
    assert_eq!(e.field, "vm[0].pinned", "{e}");
    let e = error(&bad("name = \"linux0\"\n", ""));
    assert!(e.problem.contains("missing field `name`"), "{e}");
}

#[test]
fn hypervisor_section_checks() {
    expect(
        &bad("\"lazy\"", "\"sometimes\""),
        "hypervisor.fp_policy",
        "unknown policy \"sometimes\"",
    );
    expect(
        &bad("tick_hz = 250", "tick_hz = 0"),
        "hypervisor.tick_hz",
        "out of range",
    );
    expect(
        &bad("tick_hz = 250", "tick_hz = 250\nmax_cpus = 65"),
        "hypervisor.max_cpus",
        "out of range",
    );
    expect("[hypervisor]\ntick_hz = 100\n", "vm", "no VM");
}

#[test]
fn name_checks() {
    expect(&bad("\"linux0\"", "\"Linux0\""), "vm[0].name", "a-z, 0-9");
    expect(&bad("\"linux0\"", "\"\""), "vm[0].name", "1 to 32");
    expect(
        &bad("\"linux0\"", &format!("\"{}\"", "a".repeat(33))),
        "vm[0].name",
        "1 to 32",
    );
    expect(
        &bad("\"linux-1\"", "\"linux0\""),
        "vm[1].name",
        "already the name of vm[0]",
    );
}

#[test]
fn vcpu_checks() {
    expect(
        &bad("vcpus = 2", "vcpus = 0"),
        "vm[0].vcpus",
        "out of range 1..=16",
    );
    expect(
        &bad("vcpus = 4", "vcpus = 17"),
        "vm[1].vcpus",
        "out of range 1..=16",
    );
}

#[test]
fn memory_checks() {
    expect(
        &bad("\"64M\"", "\"64Q\""),
        "vm[0].memory",
        "bad size \"64Q\"",
    );
    expect(&bad("\"64M\"", "\"M\""), "vm[0].memory", "bad size");
    expect(
        &bad("\"64M\"", "\"3M\""),
        "vm[0].memory",
        "multiple of 2 MiB",
    );
    expect(&bad("\"64M\"", "-5"), "vm[0].memory", "positive");
    expect(&bad("\"64M\"", "\"2T\""), "vm[0].memory", "1 TiB");
    // Kernel footprint 3 MiB -> 4 MiB, initrd 8 KiB, DTB slot 2 MiB: 6 MiB is too small.
    expect(
        &bad("\"64M\"", "\"6M\""),
        "vm[0].memory",
        "too small for the kernel + initrd",
    );
    assert!(check(&bad("\"64M\"", "\"8M\"")).is_ok());
    assert_eq!(parse_size("512M"), Ok(512 * MB));
    assert_eq!(parse_size("1G"), Ok(1 << 30));
    assert_eq!(parse_size("65536K"), Ok(64 * MB));
    assert_eq!(parse_size("2MiB"), Ok(2 * MB));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("99999999999999999999G").is_err());
}

#[test]
fn cpu_affinity_checks() {
    expect(
        &bad("cpus = [0, 1]", "cpus = [0, 16]"),
        "vm[0].cpus",
        "pCPU 16 is out of range 0..16",
    );
    expect(
        &bad("tick_hz = 250", "tick_hz = 250\nmax_cpus = 2").replacen(
            "cpus = [2, 3]",
            "cpus = [1, 2]",
            1,
        ),
        "vm[1].cpus",
        "out of range 0..2",
    );
    expect(
        &bad("cpus = [0, 1]", "cpus = [1, 1]"),
        "vm[0].cpus",
        "listed twice",
    );
    expect(
        &bad("cpus = [0, 1]", "cpus = []"),
        "vm[0].cpus",
        "empty list",
    );
    expect(
        &bad("cpus = [0, 1]", "cpus = [0]"),
        "vm[0].cpus",
        "2 vCPUs but lists 1",
    );
    expect(&bad("cpus = [0, 1]\n", ""), "vm[0].pinned", "needs `cpus`");
    expect(
        &bad("cpus = [2, 3]", "cpus = [1, 3]"),
        "vm[1].cpus",
        "pCPU 1 is pinned to vm[0]",
    );
}

#[test]
fn a_pinned_vm_that_is_not_exclusive_shares_its_pcpus() {
    // vm[1] lists vm[0]'s pinned pCPU 1: refused while vm[0] owns it.
    let shared = bad("cpus = [2, 3]", "cpus = [1, 3]");
    expect(&shared, "vm[1].cpus", "pCPU 1 is pinned to vm[0]");
    let text = shared.replacen("pinned = true", "pinned = true\nexclusive = false", 1);
    let cfg = check(&text).unwrap();
    assert_eq!(
        cfg.vms[0].affinity,
        Affinity {
            mask: 0b11,
            pinned: true,
            shared: true,
        }
    );
    assert_eq!(cfg.vms[1].affinity.mask, 0b1010);
    // `exclusive = true` is the default; the key needs a pinned VM.
    let own = shared.replacen("pinned = true", "pinned = true\nexclusive = true", 1);
    expect(&own, "vm[1].cpus", "pCPU 1 is pinned to vm[0]");
    expect(
        &bad("pinned = true", "exclusive = false"),
        "vm[0].exclusive",
        "only a pinned VM",
    );
}

#[test]
fn file_checks() {
    expect(
        &bad("kernel = \"Image\"", "kernel = \"nope/Image\""),
        "vm[0].kernel",
        "cannot read",
    );
    expect(
        &bad("initrd = \"initrd.cpio\"", "initrd = \"missing.cpio\""),
        "vm[0].initrd",
        "cannot read",
    );
    expect(
        &bad("dtb = \"guest.dtb\"", "dtb = \"missing.dtb\""),
        "vm[1].dtb",
        "cannot read",
    );
    expect(
        &bad("dtb = \"guest.dtb\"", "dtb = \"initrd.cpio\""),
        "vm[1].dtb",
        "not a device tree",
    );
    expect(
        &bad("kernel = \"Image\"", "kernel = \"notanimage\""),
        "vm[0].kernel",
        "not an arm64 Linux Image",
    );
    expect(
        &bad("kernel = \"notanimage\"", "kernel = \"vmlinux\""),
        "vm[2].kernel",
        "ELF for machine 258",
    );
    // A directory is unreadable as a file.
    expect(
        &bad("kernel = \"Image\"", "kernel = \".\""),
        "vm[0].kernel",
        "cannot read",
    );
}

#[test]
fn console_kind_and_cmdline_checks() {
    expect(
        &bad("\"pl011\"", "\"vga\""),
        "vm[1].console",
        "unknown console",
    );
    // Each architecture's VMs have one UART model: the other is refused.
    expect(
        &bad("console = \"pl011\"", "console = \"ns16550\""),
        "vm[1].console",
        "aarch64 VMs have no ns16550: use \"pl011\"",
    );
    expect(
        &bad("kind = \"test-guest\"", "kind = \"windows\""),
        "vm[2].kind",
        "unknown kind",
    );
    expect(
        &bad(
            "cmdline = \"console=ttyAMA0 earlycon\"",
            &format!("cmdline = \"{}\"", "x".repeat(3000)),
        ),
        "vm[0].cmdline",
        "at most 2047",
    );
}

#[test]
fn pv_ipi_is_offered_unless_switched_off() {
    let cfg = check(GOOD).unwrap();
    assert!(cfg.vms.iter().all(|v| v.pv_ipi), "default: offered");
    let bytes = pack(&cfg);
    let p = Package::parse(&bytes).unwrap();
    assert!(!p.vm(0).unwrap().pv_ipi_hidden);
    let text = bad(
        "cmdline = \"console=ttyAMA0 earlycon\"",
        "cmdline = \"console=ttyAMA0 earlycon\"\npv_ipi = false",
    );
    let cfg = check(&text).unwrap();
    assert!(!cfg.vms[0].pv_ipi);
    assert!(cfg.vms[1].pv_ipi);
    let bytes = pack(&cfg);
    let p = Package::parse(&bytes).unwrap();
    assert!(p.vm(0).unwrap().pv_ipi_hidden);
    assert!(!p.vm(1).unwrap().pv_ipi_hidden);
    let text = bad("cmdline = \"console=ttyAMA0 earlycon\"", "pv_ipi = true");
    assert!(check(&text).unwrap().vms[0].pv_ipi);
    // Not a boolean: refused, naming the key.
    let text = bad("cmdline = \"console=ttyAMA0 earlycon\"", "pv_ipi = \"no\"");
    assert!(check(&text).is_err());
}

#[test]
fn pv_time_is_offered_unless_switched_off() {
    let cfg = check(GOOD).unwrap();
    assert!(cfg.vms.iter().all(|v| v.pv_time), "default: offered");
    let bytes = pack(&cfg);
    let p = Package::parse(&bytes).unwrap();
    assert!(!p.vm(0).unwrap().pv_time_hidden);
    let text = bad(
        "cmdline = \"console=ttyAMA0 earlycon\"",
        "cmdline = \"console=ttyAMA0 earlycon\"\npv_time = false",
    );
    let cfg = check(&text).unwrap();
    assert!(!cfg.vms[0].pv_time);
    assert!(cfg.vms[1].pv_time);
    let bytes = pack(&cfg);
    let p = Package::parse(&bytes).unwrap();
    assert!(p.vm(0).unwrap().pv_time_hidden);
    assert!(!p.vm(0).unwrap().pv_ipi_hidden);
    assert!(!p.vm(1).unwrap().pv_time_hidden);
    let text = bad("cmdline = \"console=ttyAMA0 earlycon\"", "pv_time = 0");
    assert!(check(&text).is_err());
}

#[test]
fn sve_is_hidden_unless_asked_for_and_its_length_is_checked() {
    let cfg = check(GOOD).unwrap();
    assert!(cfg.vms.iter().all(|v| v.sve_vl == 0), "default: hidden");
    let on = "cmdline = \"console=ttyAMA0 earlycon\"\nsve = true";
    let cfg = check(&bad("cmdline = \"console=ttyAMA0 earlycon\"", on)).unwrap();
    assert_eq!(cfg.vms[0].sve_vl, 2048, "sve alone: the CPU's longest");
    assert_eq!(cfg.vms[1].sve_vl, 0);
    let capped = format!("{on}\nsve_max_vl = 256");
    let cfg = check(&bad("cmdline = \"console=ttyAMA0 earlycon\"", &capped)).unwrap();
    assert_eq!(cfg.vms[0].sve_vl, 256);
    let p = pack(&cfg);
    let p = Package::parse(&p).unwrap();
    assert_eq!(p.vm(0).unwrap().sve_vl, 256);
    assert_eq!(p.vm(1).unwrap().sve_vl, 0);
    for (vl, needle) in [
        (
            "0",
            "0 bits: an SVE vector length is a multiple of 128 bits from 128 to 2048",
        ),
        ("200", "200 bits"),
        ("4096", "4096 bits"),
        ("-128", "-128 bits"),
    ] {
        expect(
            &bad(
                "cmdline = \"console=ttyAMA0 earlycon\"",
                &format!("{on}\nsve_max_vl = {vl}"),
            ),
            "vm[0].sve_max_vl",
            needle,
        );
    }
    expect(
        &bad("cmdline = \"console=ttyAMA0 earlycon\"", "sve_max_vl = 512"),
        "vm[0].sve_max_vl",
        "needs sve = true",
    );
    // Not a boolean: refused, naming the key.
    let e = error(&bad(
        "cmdline = \"console=ttyAMA0 earlycon\"",
        "sve = \"yes\"",
    ));
    assert_eq!(e.field, "vm[0].sve", "{e}");
    // LoongArch has no SVE.
    let dir = fixture();
    let file = dir.join("la.toml");
    let text =
        "[[vm]]\nname = \"la\"\nvcpus = 1\nmemory = \"64M\"\nkernel = \"vmlinux\"\nsve = true\n";
    std::fs::write(&file, text).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert_eq!(e.field, "vm[0].sve", "{e}");
    assert!(e.problem.contains("SVE is arm64's"), "{e}");
    assert!(e.to_string().contains("la.toml"), "{e}");
}

#[test]
fn on_reboot_is_restart_or_stop() {
    let cfg = check(GOOD).unwrap();
    assert!(cfg.vms.iter().all(|v| !v.reboot_stop), "default: restart");
    let text = bad(
        "cmdline = \"console=ttyAMA0 earlycon\"",
        "cmdline = \"console=ttyAMA0 earlycon\"\non_reboot = \"stop\"",
    );
    let cfg = check(&text).unwrap();
    assert!(cfg.vms[0].reboot_stop);
    assert!(!cfg.vms[1].reboot_stop);
    let pkg = pack(&cfg);
    let p = Package::parse(&pkg).unwrap();
    assert!(p.vm(0).unwrap().reboot_stop);
    assert!(!p.vm(1).unwrap().reboot_stop);
    let text = bad(
        "cmdline = \"console=ttyAMA0 earlycon\"",
        "on_reboot = \"restart\"",
    );
    assert!(!check(&text).unwrap().vms[0].reboot_stop);
    expect(
        &bad(
            "cmdline = \"console=ttyAMA0 earlycon\"",
            "on_reboot = \"halt\"",
        ),
        "vm[0].on_reboot",
        "unknown on_reboot \"halt\"",
    );
}

#[test]
fn loongarch_linux_needs_a_loongarch_elf() {
    let dir = fixture();
    let file = dir.join("la.toml");
    let text = "[[vm]]\nname = \"la\"\nvcpus = 1\nmemory = \"64M\"\nkernel = \"vmlinux\"\n";
    std::fs::write(&file, text).unwrap();
    let cfg = load(&file, Arch::LoongArch64).unwrap();
    assert_eq!(
        (cfg.vms[0].kind, cfg.vms[0].console),
        (GuestKind::LinuxLoongArchElf, ConsoleKind::Ns16550)
    );
    std::fs::write(&file, format!("{text}console = \"pl011\"\n")).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert!(e.problem.contains("loongarch64 VMs have no pl011"), "{e}");
    std::fs::write(&file, text.replace("vmlinux", "Image")).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert_eq!(e.field, "vm[0].kernel");
    assert!(e.problem.contains("not a LoongArch Linux image"), "{e}");
    // An ELF whose segment lies outside the file is refused here, not at boot.
    let mut elf = std::fs::read(dir.join("vmlinux")).unwrap();
    elf[64 + 32..64 + 40].copy_from_slice(&0x1000u64.to_le_bytes());
    std::fs::write(dir.join("vmlinux"), &elf).unwrap();
    std::fs::write(&file, text).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert_eq!(e.field, "vm[0].kernel");
    assert!(
        e.problem
            .contains("not a loadable ELF: segment 0 outside the file"),
        "{e}"
    );
}

#[test]
fn loongarch_linux_zboot_is_unpacked_at_pack_time() {
    use crate::zboot::tests::{la_image, zboot};
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};
    let dir = fixture();
    let file = dir.join("la-efi.toml");
    let image = la_image(0x3000);
    let packed = zboot(
        &compress_to_vec(&image[..], CompressionLevel::Fastest),
        b"zstd",
    );
    std::fs::write(dir.join("vmlinuz-la"), &packed).unwrap();
    let text = "[[vm]]\nname = \"la\"\nvcpus = 1\nmemory = \"64M\"\nkernel = \"vmlinuz-la\"\n";
    std::fs::write(&file, text).unwrap();
    let cfg = load(&file, Arch::LoongArch64).unwrap();
    let vm = &cfg.vms[0];
    assert_eq!(vm.kind, GuestKind::LinuxLoongArchImage);
    assert_eq!(vm.kernel, image, "the package carries the unpacked image");
    assert_eq!(
        (vm.load_offset, vm.entry_offset, vm.kernel_footprint),
        (0x20_0000, 0x1000, 0x3000)
    );
    // The package reader agrees on the kind and places the kernel there.
    let pkg = pack(&cfg);
    let rec = kestrel_abi::package::Package::parse(&pkg)
        .unwrap()
        .vms()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(rec.kind, GuestKind::LinuxLoongArchImage);
    assert_eq!((rec.layout.kernel, rec.entry_offset), (0x20_0000, 0x1000));
    // An unsupported compression or a broken payload names the file.
    std::fs::write(dir.join("vmlinuz-la"), zboot(b"garbage", b"zstd")).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert_eq!(e.field, "vm[0].kernel");
    assert!(
        e.problem.contains("vmlinuz-la") && e.problem.contains("not a zstd frame"),
        "{e}"
    );
    std::fs::write(dir.join("vmlinuz-la"), zboot(b"garbage", b"lz4")).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert!(e.problem.contains("\"lz4\""), "{e}");
}

#[test]
fn example_configs_parse_up_to_missing_guest_images() {
    // The shipped examples reference guest images and disks built later:
    // everything else must already be valid.
    let dir = crate::root().join("configs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        seen += 1;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let arch = if name.contains("loongarch") || name.starts_with("la64") {
            Arch::LoongArch64
        } else {
            Arch::Aarch64
        };
        match load(&path, arch) {
            Ok(_) => {}
            // Disk images are written by `cargo xtask guest-assets` too.
            Err(e) => assert!(
                e.field.ends_with(".kernel")
                    || e.field.ends_with(".initrd")
                    || (e.field.contains(".disk[") && e.field.ends_with(".image")),
                "{}: only missing guest images may fail: {e}",
                path.display()
            ),
        }
    }
    assert!(seen >= 2, "configs/ holds the examples");
}

const DEVICES: &str = r#"
[[vm]]
name = "vm0"
vcpus = 1
memory = "64M"
kernel = "Image"
virtio_console = true

[[vm.disk]]
image = "disk.img"

[[vm.disk]]
image = "disk.img"
read_only = true

[[vm.net]]
network = "lan"
mac = "02:00:00:00:00:01"

[[vm.net]]
network = "lan"
allow_mac_spoofing = true
learn = 16
broadcast_rate = 50
"#;

#[test]
fn virtio_devices_are_read_and_packed() {
    let cfg = check(DEVICES).unwrap();
    let v = &cfg.vms[0];
    assert!(v.virtio_console);
    assert_eq!(
        v.devices,
        vec![
            DeviceConfig::Disk {
                image: vec![3; 2048],
                read_only: false
            },
            DeviceConfig::Disk {
                image: vec![3; 2048],
                read_only: true
            },
            DeviceConfig::Net {
                network: "lan".into(),
                mac: Some([2, 0, 0, 0, 0, 1]),
                allow_mac_spoofing: false,
                learn: 0,
                broadcast_rate: 0,
            },
            DeviceConfig::Net {
                network: "lan".into(),
                mac: None,
                allow_mac_spoofing: true,
                learn: 16,
                broadcast_rate: 50,
            },
        ]
    );
    let bytes = pack(&cfg);
    let rec = Package::parse(&bytes).unwrap().vm(0).unwrap();
    assert!(rec.virtio_console);
    assert_eq!(rec.devices.len(), 4);
    assert!(rec.devices.iter().any(|d| d
        == kestrel_abi::package::Device::Net {
            network: "lan",
            mac: None,
            allow_mac_spoofing: true,
            learn: 16,
            broadcast_rate: 50,
        }));
}

#[test]
fn virtio_device_checks() {
    let with = |from: &str, to: &str| {
        assert!(DEVICES.contains(from), "{from}");
        DEVICES.replacen(from, to, 1)
    };
    for (text, field, needle) in [
        (
            with("disk.img\"\n\n", "odd.img\"\n\n"),
            "vm[0].disk[0].image",
            "512-byte sectors",
        ),
        (
            with("disk.img\"\n\n", "nothere.img\"\n\n"),
            "vm[0].disk[0].image",
            "cannot read",
        ),
        (
            with("02:00:00:00:00:01", "01:00:00:00:00:01"),
            "vm[0].net[0].mac",
            "multicast",
        ),
        (
            with("02:00:00:00:00:01", "00:00:00:00:00:00"),
            "vm[0].net[0].mac",
            "all zero",
        ),
        (
            with("02:00:00:00:00:01", "02:00:00:00:01"),
            "vm[0].net[0].mac",
            "six hex pairs",
        ),
        (
            with("02:00:00:00:00:01", "02:00:00:00:00:0g"),
            "vm[0].net[0].mac",
            "six hex pairs",
        ),
        (
            with("network = \"lan\"\nmac", "network = \"LAN\"\nmac"),
            "vm[0].net[0].network",
            "a-z",
        ),
        (
            with("learn = 16", "learn = 257"),
            "vm[0].net[1].learn",
            "0..=256",
        ),
        (
            with("allow_mac_spoofing = true", "allow_mac_spoofing = false"),
            "vm[0].net[1].learn",
            "needs allow_mac_spoofing",
        ),
        (
            with("broadcast_rate = 50", "broadcast_rate = 0"),
            "vm[0].net[1].broadcast_rate",
            "1..=1000000",
        ),
        (
            with("broadcast_rate = 50", "broadcast_rate = 1000001"),
            "vm[0].net[1].broadcast_rate",
            "frames a second",
        ),
    ] {
        expect(&text, field, needle);
    }
    expect(
        &with(
            "network = \"lan\"\nallow",
            "network = \"lan\"\nmac = \"02:00:00:00:00:01\"\nallow",
        ),
        "vm[0].net[1].mac",
        "already vm[0].net[0].mac's",
    );
    let e = error(&with("[[vm.disk]]", "[[vm.disk]]\nsize = 1"));
    assert!(e.field.starts_with("vm[0].disk[0]"), "{e}");
    let many = format!("{DEVICES}{}", "\n[[vm.net]]\nnetwork = \"x\"\n".repeat(5));
    expect(&many, "vm[0].disk", "at most 8");
}

#[test]
fn loongarch_takes_virtio_disks_and_ports() {
    let dir = fixture();
    let file = dir.join("la.toml");
    let text = "[[vm]]\nname = \"la\"\nvcpus = 1\nmemory = \"64M\"\nkernel = \"vmlinux\"\nvirtio_console = true\n";
    std::fs::write(&file, text).unwrap();
    load(&file, Arch::LoongArch64).expect("the virtio console is attached on LoongArch");
    let extra = "[[vm.disk]]\nimage = \"disk.img\"\n[[vm.net]]\nnetwork = \"lan\"\n";
    std::fs::write(&file, format!("{text}{extra}")).unwrap();
    load(&file, Arch::LoongArch64).expect("disks and ports are attached on LoongArch");
    // The same checks as on arm64: a port needs a network name.
    std::fs::write(&file, format!("{text}[[vm.net]]\nnetwork = \"\"\n")).unwrap();
    let e = load(&file, Arch::LoongArch64).unwrap_err();
    assert_eq!(e.field, "vm[0].net[0].network", "{e}");
}

const PT: &str = r#"
[[vm]]
name = "owner"
vcpus = 1
memory = "64M"
kernel = "Image"
identity = true

[[vm.disk]]
image = "disk.img"

[[vm.passthrough]]
reg = [0x0a003000, 0x1000]
interrupts = [47]

[[vm]]
name = "other"
vcpus = 1
memory = "64M"
kernel = "Image"
"#;

#[test]
fn passthrough_is_read_and_packed() {
    let cfg = check(PT).unwrap();
    let v = &cfg.vms[0];
    assert!(v.identity && !cfg.vms[1].identity);
    assert_eq!(
        v.passthrough,
        vec![package::Passthrough::new(0x0a00_3000, 0x1000, &[47])]
    );
    let bytes = pack(&cfg);
    let rec = Package::parse(&bytes).unwrap().vm(0).unwrap();
    assert!(rec.identity);
    assert_eq!(rec.devices.len(), 1);
    assert_eq!(rec.passthrough.iter().next().unwrap().spis(), &[47]);
    assert!(Package::parse(&bytes)
        .unwrap()
        .vm(1)
        .unwrap()
        .passthrough
        .is_empty());
}

#[test]
fn passthrough_checks() {
    let second = |extra: &str| format!("{PT}{extra}");
    for (text, field, needle) in [
        (
            PT.replace("0x0a003000, 0x1000]", "0x0a003000]"),
            "vm[0].passthrough[0].reg",
            "[base, size]",
        ),
        (
            PT.replace("0x0a003000, 0x1000", "0x0a003e00, 0x200"),
            "vm[0].passthrough[0].reg",
            "multiples of 4 KiB",
        ),
        (
            PT.replace("0x0a003000, 0x1000", "0x0a003000, 0"),
            "vm[0].passthrough[0].reg",
            "size not 0",
        ),
        (
            PT.replace("0x0a003000, 0x1000", "0x09000000, 0x1000"),
            "vm[0].passthrough[0].reg",
            "GIC or UART",
        ),
        (
            PT.replace("0x0a003000, 0x1000", "0x0a000000, 0x1000"),
            "vm[0].passthrough[0].reg",
            "virtio-mmio",
        ),
        (
            PT.replace("interrupts = [47]", "interrupts = [988]"),
            "vm[0].passthrough[0].interrupts",
            "out of range",
        ),
        (
            PT.replace("interrupts = [47]", "interrupts = [47, 47]"),
            "vm[0].passthrough[0].interrupts",
            "this VM already",
        ),
        (
            PT.replace(
                "interrupts = [47]",
                "interrupts = [1, 2, 3, 4, 5, 6, 7, 8, 9]",
            ),
            "vm[0].passthrough[0].interrupts",
            "at most 8",
        ),
        (
            PT.replace("interrupts = [47]", "interrupts = [47]\nirq = 1"),
            "vm[0].passthrough[0].irq",
            "unknown field",
        ),
        (
            second("\n[[vm.passthrough]]\nreg = [0x0a003000, 0x2000]\n"),
            "vm[1].passthrough[0].reg",
            "overlaps vm[0].passthrough[0]",
        ),
        (
            second("\n[[vm.passthrough]]\nreg = [0x0a005000, 0x1000]\ninterrupts = [47]\n"),
            "vm[1].passthrough[0].interrupts",
            "claimed by vm[0]",
        ),
        (
            // Without identity RAM the guest's RAM is at 0x40000000.
            second("\n[[vm.passthrough]]\nreg = [0x40001000, 0x1000]\n"),
            "vm[1].passthrough[0].reg",
            "RAM",
        ),
    ] {
        expect(&text, field, needle);
    }
    let dir = fixture();
    let file = dir.join("la.toml");
    let text = "[[vm]]\nname = \"la\"\nvcpus = 1\nmemory = \"64M\"\nkernel = \"vmlinux\"\n";
    for (extra, field) in [
        ("identity = true\n", "vm[0].identity"),
        (
            "[[vm.passthrough]]\nreg = [0x1000, 0x1000]\n",
            "vm[0].passthrough",
        ),
    ] {
        std::fs::write(&file, format!("{text}{extra}")).unwrap();
        let e = load(&file, Arch::LoongArch64).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.problem.contains("arm64"), "{e}");
    }
}

#[test]
fn every_field_error_names_its_line() {
    // A semantic error (no TOML span) still gets the line of its key.
    let e = error(&bad("memory = \"8M\"", "memory = \"12Q\""));
    let line = GOOD
        .lines()
        .position(|l| l.starts_with("memory = \"8M\""))
        .unwrap()
        + 1;
    assert_eq!(e.line_col, Some((line, 1)), "{e}");
    assert!(
        e.problem
            .contains("B, K (k, KiB), M (MiB), G (GiB) or T (TiB)"),
        "{e}"
    );
    let e = error(&bad("tick_hz = 250", "tick_hz = 0"));
    assert_eq!(e.line_col, Some((4, 1)), "{e}");
    // A key that is missing: the line of its table's header.
    let text = GOOD.replacen("kernel = \"notanimage\"\n", "", 1);
    let e = error(&text);
    let header = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == "[[vm]]")
        .nth(2)
        .unwrap()
        .0
        + 1;
    assert_eq!(e.line_col.map(|(l, _)| l), Some(header), "{e}");
}

#[test]
fn common_slips_say_what_to_write() {
    let e = error(&bad("vcpus = 2", "vcpus = \"2\""));
    assert_eq!(e.field, "vm[0].vcpus");
    assert!(e.problem.starts_with("vcpus must be a number"), "{e}");
    assert!(e.problem.contains("write vcpus = 2, without quotes"), "{e}");
    let e = error(&bad("pinned = true", "pinned = \"yes\""));
    assert!(e.problem.starts_with("pinned must be true or false"), "{e}");
    let text = format!("{GOOD}\n[vm.disk]\nimage = \"Image\"\n");
    let e = error(&text);
    assert!(e.problem.starts_with("write [[vm.disk]]"), "{e}");
    assert!(e.line_col.is_some(), "{e}");
}

#[test]
fn locate_finds_keys_in_nested_tables() {
    let text = "[hypervisor]\nmax_cpus = 4\n\n[[vm]]\nname = \"a\"\n[[vm.disk]]\nimage = \"x\"\n[[vm.disk]]\n  image = \"y\"\n[[vm]]\nname = \"b\"\n";
    assert_eq!(locate(text, "hypervisor.max_cpus"), Some((2, 1)));
    assert_eq!(locate(text, "vm[0].name"), Some((5, 1)));
    assert_eq!(locate(text, "vm[0].disk[1].image"), Some((9, 3)));
    assert_eq!(locate(text, "vm[1].name"), Some((11, 1)));
    assert_eq!(
        locate(text, "vm[1].memory"),
        Some((10, 1)),
        "missing: the header"
    );
    assert_eq!(locate(text, "vm[5].name"), None);
    assert_eq!(locate(text, ""), None);
    // Garbage paths are no panic.
    for f in [
        "vm[",
        "vm[x].y",
        "....",
        "vm[0].disk[99].image",
        "hypervisor",
    ] {
        let _ = locate(text, f);
    }
}

#[test]
fn all_the_problems_of_a_config_are_reported_at_once() {
    let text = bad("vcpus = 2", "vcpus = 0")
        .replacen("tick_hz = 250", "tick_hz = 0", 1)
        .replacen("memory = \"8M\"", "memory = \"12Q\"", 1)
        .replacen("vcpus = 4", "vcpus = \"4\"", 1);
    let e = error(&text);
    let all: Vec<(String, Option<(usize, usize)>)> = std::iter::once(&e)
        .chain(e.more.iter())
        .map(|e| (e.field.clone(), e.line_col))
        .collect();
    let fields: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    for want in [
        "hypervisor.tick_hz",
        "vm[0].vcpus",
        "vm[1].vcpus",
        "vm[2].memory",
    ] {
        assert!(fields.contains(&want), "{want} missing from {fields:?}");
    }
    assert!(all.iter().all(|(_, l)| l.is_some()), "{all:?}");
    // The later VMs keep their own numbers and lines.
    let line_of = |needle: &str| text.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    let vm2 = all.iter().find(|(f, _)| f == "vm[2].memory").unwrap();
    assert_eq!(vm2.1.map(|(l, _)| l), Some(line_of("memory = \"12Q\"")));
    let shown = e.to_string();
    assert_eq!(shown.lines().count(), all.len(), "{shown}");
    // A good config has none, and a syntax error stops there.
    assert!(check(GOOD).is_ok());
    assert!(error("[[vm]\nname =").more.is_empty());
}

/// A zImage of `len` bytes (position-independent, little-endian, no tag
/// table) in the fixture directory `dir`.
fn write_zimage(dir: &Path, len: usize) {
    let mut z = vec![0u8; len];
    z[0x24..0x28].copy_from_slice(&0x016f_2818u32.to_le_bytes());
    z[0x2c..0x30].copy_from_slice(&(len as u32).to_le_bytes());
    z[0x30..0x34].copy_from_slice(&0x0403_0201u32.to_le_bytes());
    std::fs::write(dir.join("zImage"), &z).unwrap();
}

#[test]
fn aarch32_vms_from_the_arch_key_or_the_zimage() {
    let dir = fixture();
    write_zimage(&dir, 64 * 1024);
    let file = dir.join("vms.toml");
    let vm = |extra: &str, kernel: &str, memory: &str| {
        format!(
            "[[vm]]\nname = \"a\"\nvcpus = 1\nmemory = \"{memory}\"\nkernel = \"{kernel}\"\n{extra}"
        )
    };
    // A zImage is detected without the key and placed 32 MiB into RAM.
    std::fs::write(&file, vm("", "zImage", "128M")).unwrap();
    let cfg = load(&file, Arch::Aarch64).unwrap();
    assert_eq!(cfg.vms[0].kind, GuestKind::LinuxArm32ZImage);
    assert_eq!(cfg.vms[0].load_offset, 32 * MB);
    // The key makes a raw test guest AArch32.
    std::fs::write(
        &file,
        vm(
            "kind = \"test-guest\"\narch = \"aarch32\"",
            "notanimage",
            "16M",
        ),
    )
    .unwrap();
    assert_eq!(
        load(&file, Arch::Aarch64).unwrap().vms[0].kind,
        GuestKind::TestRaw32
    );
    // Refused: an unknown arch, a zImage said to be AArch64, too much RAM
    // for 32-bit Linux, the key on LoongArch.
    let refused = |text: String, arch: Arch, field: &str, needle: &str| {
        std::fs::write(&file, text).unwrap();
        let e = load(&file, arch).expect_err("refused");
        assert_eq!(e.field, field, "{e}");
        assert!(e.problem.contains(needle), "{e}");
    };
    refused(
        vm("arch = \"arm\"", "zImage", "128M"),
        Arch::Aarch64,
        "vm[0].arch",
        "unknown arch",
    );
    refused(
        vm("arch = \"aarch64\"", "zImage", "128M"),
        Arch::Aarch64,
        "vm[0].kernel",
        "not an arm64 Linux Image",
    );
    refused(
        vm("", "zImage", "1G"),
        Arch::Aarch64,
        "vm[0].memory",
        "at most 512 MiB",
    );
    refused(
        vm("arch = \"aarch32\"", "vmlinux", "128M"),
        Arch::LoongArch64,
        "vm[0].arch",
        "arm64 VMs only",
    );
}
