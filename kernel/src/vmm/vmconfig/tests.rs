use super::*;
use alloc::string::ToString;
use alloc::vec;
use kestrel_abi::package::{HypervisorSettings, VmInput, Writer, MEMORY_ALIGN};

const MB: u64 = 1 << 20;

fn input<'a>(name: &'a str, kernel: &'a [u8]) -> VmInput<'a> {
    VmInput {
        name,
        memory: 64 * MB,
        vcpus: 2,
        affinity: Affinity {
            mask: 0,
            pinned: false,
            shared: false,
        },
        kind: GuestKind::LinuxArm64Image,
        console: ConsoleKind::Pl011,
        kernel,
        initrd: None,
        dtb: None,
        cmdline: "console=ttyAMA0",
        load_offset: 0,
        entry_offset: 0,
        kernel_footprint: 0,
        virtio_console: false,
        reboot_stop: false,
        devices: &[],
        passthrough: &[],
        identity: false,
        pv_ipi_hidden: false,
        pv_time_hidden: false,
        sve_vl: 0,
    }
}

fn host(cpus: u32, mem: u64) -> HostLimits {
    HostLimits {
        arch: Arch::Aarch64,
        online_cpus: cpus,
        guest_memory: mem,
    }
}

#[test]
fn record_becomes_spec_with_guest_addresses() {
    let k = vec![0xAAu8; 3 * MB as usize];
    let initrd = vec![0x55u8; 5000];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        initrd: Some(&initrd),
        entry_offset: 0x40,
        affinity: Affinity {
            mask: 0b11,
            pinned: true,
            shared: false,
        },
        ..input("linux0", &k)
    });
    let pkg = w.finish();
    let plan = plan(&pkg, host(4, 1 << 30)).unwrap();
    let s = plan[0].unwrap();
    assert_eq!(s.name, "linux0");
    assert_eq!(s.on_reboot, OnReboot::Restart);
    assert_eq!(
        (s.vcpus, s.ram_base, s.ram_size),
        (2, ARM64_GUEST_RAM_BASE, 64 * MB)
    );
    assert_eq!(s.kernel_gpa, ARM64_GUEST_RAM_BASE);
    assert_eq!(s.entry_gpa, ARM64_GUEST_RAM_BASE + 0x40);
    assert_eq!(s.dtb_gpa, ARM64_GUEST_RAM_BASE + 62 * MB);
    assert_eq!(
        s.initrd_range(),
        Some((
            ARM64_GUEST_RAM_BASE + 62 * MB - 8192,
            ARM64_GUEST_RAM_BASE + 62 * MB - 8192 + 5000
        ))
    );
    assert_eq!(s.kernel.len(), k.len());
    assert_eq!(s.dtb, DtbSource::Generate);

    // The generated DTB describes exactly this VM.
    let dtb = s.guest_dtb(true);
    let fdt = fdt::Fdt::new(&dtb).unwrap();
    assert_eq!(fdt.cpus().count(), 2);
    let mem = fdt.memory().regions().next().unwrap();
    assert_eq!(
        (mem.starting_address as u64, mem.size),
        (ARM64_GUEST_RAM_BASE, Some(64 * MB as usize))
    );
    assert_eq!(fdt.chosen().bootargs(), Some("console=ttyAMA0"));
    let c = fdt.find_node("/chosen").unwrap();
    let start = c.property("linux,initrd-start").unwrap().value;
    assert_eq!(u64::from_be_bytes(start.try_into().unwrap()), s.initrd_gpa);
}

#[test]
fn provided_dtb_is_used_as_is() {
    let k = vec![1u8; 4096];
    let my_dtb = b"\xd0\x0d\xfe\xedmy own tree".to_vec();
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        dtb: Some(&my_dtb),
        ..input("a", &k)
    });
    let pkg = w.finish();
    let s = plan(&pkg, host(1, 1 << 30)).unwrap()[0].unwrap();
    assert_eq!(s.dtb, DtbSource::Provided(&my_dtb[..]));
    assert_eq!(&*s.guest_dtb(false), &my_dtb[..]);
}

#[test]
fn machine_limits_refuse_single_vms_and_keep_the_rest() {
    let k = vec![1u8; 4096];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        affinity: Affinity {
            mask: 0b0011,
            pinned: true,
            shared: false,
        },
        ..input("p0", &k)
    });
    // Pinned on CPU 1, which p0 owns.
    w.vms.push(VmInput {
        affinity: Affinity {
            mask: 0b0110,
            pinned: true,
            shared: false,
        },
        ..input("p1", &k)
    });
    // CPU 5 is not online on a 4-CPU machine.
    w.vms.push(VmInput {
        affinity: Affinity {
            mask: 1 << 5,
            pinned: false,
            shared: false,
        },
        vcpus: 1,
        ..input("off", &k)
    });
    // LoongArch Linux on arm64.
    w.vms.push(VmInput {
        kind: GuestKind::LinuxLoongArchElf,
        ..input("la", &k)
    });
    // Too big for what is left (64 MiB for p0, 100 MiB total).
    w.vms.push(VmInput {
        memory: 64 * MB,
        ..input("big", &k)
    });
    w.vms.push(VmInput {
        memory: 36 * MB,
        kind: GuestKind::TestRaw,
        ..input("fits", &k)
    });
    let pkg = w.finish();
    let r = plan(&pkg, host(4, 100 * MB)).unwrap();
    assert_eq!(r.len(), 6);
    assert_eq!(r[0].unwrap().name, "p0");
    assert_eq!(
        r[1],
        Err(VmConfigError::PinnedConflict {
            index: 1,
            cpu: 1,
            owner: 0
        })
    );
    assert_eq!(
        r[2],
        Err(VmConfigError::CpuOffline {
            index: 2,
            cpu: 5,
            online: 4
        })
    );
    assert_eq!(
        r[3],
        Err(VmConfigError::WrongArch {
            index: 3,
            kind: GuestKind::LinuxLoongArchElf,
            arch: Arch::Aarch64
        })
    );
    assert_eq!(
        r[4],
        Err(VmConfigError::OutOfMemory {
            index: 4,
            need: 64 * MB,
            left: 36 * MB
        })
    );
    assert_eq!(r[5].unwrap().name, "fits");
    assert_eq!(
        r[4].unwrap_err().to_string(),
        "vm[4]: memory: 64 MiB needed, only 36 MiB of host memory left"
    );
    assert_eq!(report(&pkg, host(4, 100 * MB)).specs.len(), 2);
}

#[test]
fn corrupt_vm_is_refused_with_its_record_error() {
    let (k0, k1) = (vec![1u8; 8192], vec![2u8; 8192]);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(input("good", &k0));
    w.vms.push(input("bad", &k1));
    let mut pkg = w.finish();
    let last = pkg.len() - 100; // inside vm[1]'s kernel (the last kernel blob, before its cmdline)
    pkg[last - 4096] ^= 1;
    let r = plan(&pkg, host(4, 1 << 30)).unwrap();
    assert!(r[0].is_ok());
    let e = r[1].unwrap_err();
    assert!(is_field(&e, Field::Data), "{e}");
    assert!(
        e.to_string().starts_with("vm[1] \"bad\": data: corrupt"),
        "{e}"
    );
}

#[test]
fn vm_whose_images_exceed_its_memory_is_refused() {
    let k = vec![1u8; 4096];
    let mut w = Writer::new(HypervisorSettings::default());
    // 4 MiB: kernel rounded to 2 MiB + DTB slot 2 MiB = full, no room for a 1-byte initrd.
    w.vms.push(VmInput {
        memory: 4 * MB,
        initrd: Some(&[7]),
        ..input("tiny", &k)
    });
    let pkg = w.finish();
    let e = plan(&pkg, host(1, 1 << 30)).unwrap()[0].unwrap_err();
    assert!(is_too_small(&e), "{e}");
    assert!(is_field(&e, Field::Memory));
}

#[test]
fn bad_header_refuses_everything_and_empty_means_no_vms() {
    assert_eq!(plan(&[], host(1, 1 << 30)).unwrap().len(), 0);
    assert_eq!(
        plan(&[b'x'; 100], host(1, 1 << 30)).unwrap_err(),
        PackageError::BadMagic
    );
    let r = report(b"KSTRLPKG", host(1, 1 << 30));
    assert!(r.specs.is_empty());
    assert_eq!(
        r.refused.len(),
        1,
        "a package that cannot be read is one refusal"
    );
}

/// Found by the vmconfig fuzz target: a VM whose memory reaches past the
/// guest physical address space (here near 2^64) overflowed computing its
/// guest addresses (`ram_base + offset`). It is refused; RAM up to the
/// 48-bit limit is still admitted.
#[test]
fn ram_beyond_the_guest_physical_space_is_refused() {
    let k = vec![1u8; 4096];
    for (arch, kind, max) in [
        (
            Arch::Aarch64,
            GuestKind::LinuxArm64Image,
            (1u64 << 48) - ARM64_GUEST_RAM_BASE,
        ),
        (
            Arch::LoongArch64,
            GuestKind::LinuxLoongArchElf,
            (1u64 << 48)
                - (crate::guest::loongarch::layout::HIGH_RAM_BASE
                    - crate::guest::loongarch::layout::LOW_RAM),
        ),
    ] {
        let mut w = Writer::new(HypervisorSettings::default());
        let huge = !(MEMORY_ALIGN - 1);
        for (name, memory) in [("huge", huge), ("over", max + MEMORY_ALIGN), ("edge", max)] {
            w.vms.push(VmInput {
                memory,
                kind,
                load_offset: memory - 4 * MB,
                ..input(name, &k)
            });
        }
        let pkg = w.finish();
        let got = plan(
            &pkg,
            HostLimits {
                arch,
                online_cpus: 4,
                guest_memory: u64::MAX,
            },
        )
        .unwrap();
        assert!(
            matches!(got[0], Err(VmConfigError::RamTooLarge { index: 0, .. })),
            "{:?}",
            got[0]
        );
        assert!(matches!(
            got[1],
            Err(VmConfigError::RamTooLarge { index: 1, .. })
        ));
        let edge = got[2].as_ref().unwrap();
        assert_eq!(edge.ram_size, max);
        assert!(got[0].as_ref().unwrap_err().to_string().contains("48-bit"));
    }
}

#[test]
fn virtio_slots_put_the_console_first_then_the_devices() {
    use kestrel_abi::package::Device;
    let k = vec![0xAAu8; 3 * MB as usize];
    let disk = vec![0u8; 1024];
    let devices = [
        Device::Disk {
            image: &disk,
            read_only: false,
        },
        Device::Net {
            network: "lan",
            mac: None,
            allow_mac_spoofing: false,
            learn: 0,
            broadcast_rate: 0,
        },
    ];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        virtio_console: true,
        devices: &devices,
        ..input("v", &k)
    });
    w.vms.push(input("plain", &k));
    let pkg = w.finish();
    let specs = plan(&pkg, host(4, 1 << 30)).unwrap();
    let s = specs[0].unwrap();
    let slots = s.virtio_slots();
    assert_eq!(
        slots
            .iter()
            .map(|v| (v.base, v.spi, v.kind))
            .collect::<Vec<_>>(),
        [
            (0x0a00_0000, 16, VirtioSlotKind::Console),
            (0x0a00_0200, 17, VirtioSlotKind::Device(0)),
            (0x0a00_0400, 18, VirtioSlotKind::Device(1)),
        ]
    );
    assert_eq!(s.dtb_spec_arm64(true).virtio.len(), 3);
    assert!(specs[1].unwrap().virtio_slots().is_empty());
    // Every slot's SPI stays below the 32 SPIs a VM's vGIC has.
    assert!(GUEST_VIRTIO.2 as usize + 1 + kestrel_abi::package::MAX_DEVICES <= 32);
}

#[test]
fn on_reboot_stop_comes_from_the_record_flag() {
    let k = vec![0xAAu8; 3 * MB as usize];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        reboot_stop: true,
        ..input("stops", &k)
    });
    let pkg = w.finish();
    let plan = plan(&pkg, host(4, 1 << 30)).unwrap();
    assert_eq!(plan[0].unwrap().on_reboot, OnReboot::Stop);
}

#[test]
fn pv_ipi_is_offered_unless_the_record_hides_it() {
    let k = vec![0xAAu8; 3 * MB as usize];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        pv_ipi_hidden: true,
        ..input("hidden", &k)
    });
    w.vms.push(input("offered", &k));
    let pkg = w.finish();
    let plan = plan(&pkg, host(4, 1 << 30)).unwrap();
    assert!(!plan[0].unwrap().pv_ipi);
    assert!(plan[1].unwrap().pv_ipi);
}

/// A LoongArch Linux EFI image runs on LoongArch only, at its text_offset,
/// entered at its kernel_entry.
#[test]
fn loongarch_efi_image_is_placed_at_its_text_offset() {
    let k = vec![1u8; 8192];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        kind: GuestKind::LinuxLoongArchImage,
        console: ConsoleKind::Ns16550,
        load_offset: 2 * MB,
        entry_offset: 0x1000,
        kernel_footprint: 8192,
        ..input("la", &k)
    });
    let pkg = w.finish();
    let la = HostLimits {
        arch: Arch::LoongArch64,
        ..host(4, 1 << 30)
    };
    let s = plan(&pkg, la).unwrap()[0].unwrap();
    assert_eq!((s.kernel_gpa, s.entry_gpa), (2 * MB, 2 * MB + 0x1000));
    assert!(s.kind.is_linux());
    assert_eq!(
        plan(&pkg, host(4, 1 << 30)).unwrap()[0],
        Err(VmConfigError::WrongArch {
            index: 0,
            kind: GuestKind::LinuxLoongArchImage,
            arch: Arch::Aarch64
        })
    );
}

#[test]
fn identity_spec_moves_its_images_with_its_ram_and_loongarch_refuses_it() {
    use kestrel_abi::package::Passthrough;
    let k = vec![0xAAu8; 3 * MB as usize];
    let initrd = vec![0x55u8; 5000];
    let pt = [Passthrough::new(0x0a00_3000, 0x1000, &[47])];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        initrd: Some(&initrd),
        entry_offset: 0x40,
        identity: true,
        passthrough: &pt,
        ..input("pt0", &k)
    });
    let pkg = w.finish();
    let s = plan(&pkg, host(4, 1 << 30)).unwrap()[0].unwrap();
    assert!(s.identity);
    assert_eq!(s.passthrough.iter().collect::<Vec<_>>(), pt);
    // The virtio slots do not count passthrough regions.
    assert!(s.virtio_slots().is_empty());
    let r = s.rebased(0x8000_0000);
    assert_eq!(r.ram_base, 0x8000_0000);
    for (a, b) in [
        (s.kernel_gpa, r.kernel_gpa),
        (s.entry_gpa, r.entry_gpa),
        (s.initrd_gpa, r.initrd_gpa),
        (s.dtb_gpa, r.dtb_gpa),
    ] {
        assert_eq!(b - r.ram_base, a - s.ram_base);
    }
    assert_eq!(r.dtb_spec_arm64(true).ram_base, 0x8000_0000);
    let la = HostLimits {
        arch: Arch::LoongArch64,
        ..host(4, 1 << 30)
    };
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        kind: GuestKind::TestRaw,
        identity: true,
        ..input("la", &k)
    });
    let pkg = w.finish();
    let e = plan(&pkg, la).unwrap()[0].unwrap_err();
    assert!(e.to_string().contains("arm64-only"), "{e}");
}

#[test]
fn the_package_names_the_tick_when_it_sets_one() {
    let k = vec![1u8; 4096];
    let with = |hz: u32| {
        let mut w = Writer::new(HypervisorSettings {
            tick_hz: hz,
            ..HypervisorSettings::default()
        });
        w.vms.push(input("a", &k));
        w.finish()
    };
    assert_eq!(super::tick_hz(&with(250)), Some(250));
    assert_eq!(super::tick_hz(&with(0)), None, "0: kestrel's default");
    assert_eq!(super::tick_hz(&[]), None, "no package");
    assert_eq!(super::tick_hz(b"garbage"), None);
}

/// arm64 stolen time: offered by default with its records in the last
/// 64 KiB of RAM, reserved in the generated DTB; not with `pv_time =
/// false`, nor with a DTB from the config (nothing would reserve it).
#[test]
fn pv_time_records_are_reserved_at_the_top_of_ram() {
    let k = vec![0xAAu8; 3 * MB as usize];
    let dtb = vec![0u8; 64];
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(input("offered", &k));
    w.vms.push(VmInput {
        pv_time_hidden: true,
        ..input("hidden", &k)
    });
    w.vms.push(VmInput {
        dtb: Some(&dtb),
        ..input("own-dtb", &k)
    });
    let pkg = w.finish();
    let plan = plan(&pkg, host(4, 1 << 30)).unwrap();
    let s = plan[0].unwrap();
    let r = s.pv_time_region().unwrap();
    assert_eq!(r.base, s.ram_base + s.ram_size - 0x1_0000);
    assert_eq!(r.vcpus, 2);
    assert!(r.base >= s.dtb_gpa + (1 << 20), "above the DTB");
    assert_eq!(s.dtb_spec_arm64(true).reserved, [(r.base, 0x1_0000)]);
    // Moved with the RAM of an identity VM.
    let moved = s.rebased(0x8000_0000).pv_time_region().unwrap();
    assert_eq!(moved.base, 0x8000_0000 + s.ram_size - 0x1_0000);
    for other in [plan[1].unwrap(), plan[2].unwrap()] {
        assert!(!other.pv_time);
        assert_eq!(other.pv_time_region(), None);
        assert!(other.dtb_spec_arm64(true).reserved.is_empty());
    }
}

#[test]
fn shared_pinned_vms_own_no_pcpu() {
    let k = vec![1u8; 4096];
    let pin = |mask, shared| Affinity {
        mask,
        pinned: true,
        shared,
    };
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        affinity: pin(0b0011, true),
        memory: 8 * MB,
        ..input("a32a", &k)
    });
    // Pinned on pCPU 1 too, shared: both stand.
    w.vms.push(VmInput {
        affinity: pin(0b0110, true),
        memory: 8 * MB,
        ..input("a32b", &k)
    });
    // An exclusive one on pCPU 2 is not refused by the shared ones...
    w.vms.push(VmInput {
        affinity: pin(0b1100, false),
        memory: 8 * MB,
        ..input("own", &k)
    });
    // ...but then owns it.
    w.vms.push(VmInput {
        affinity: pin(0b0100 | 0b10000, true),
        memory: 8 * MB,
        ..input("late", &k)
    });
    let pkg = w.finish();
    let r = plan(&pkg, host(8, 100 * MB)).unwrap();
    assert!(r[0].is_ok() && r[1].is_ok() && r[2].is_ok(), "{r:?}");
    assert_eq!(r[0].unwrap().affinity, pin(0b0011, true));
    assert!(r[3].is_ok(), "shared pinning never conflicts: {r:?}");
}
