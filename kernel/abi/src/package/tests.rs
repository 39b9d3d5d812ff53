extern crate alloc;
extern crate std;

use super::*;
use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

const MB: u64 = 1 << 20;

fn kernel(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn vm<'a>(name: &'a str, k: &'a [u8]) -> VmInput<'a> {
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
        kernel: k,
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

/// Three VMs: one with an initrd and a DTB, one pinned, one plain.
fn sample() -> Vec<u8> {
    let (k0, k1, k2) = (kernel(10_000, 1), kernel(5000, 2), kernel(4096, 3));
    let initrd = kernel(3000, 9);
    let dtb = kernel(700, 7);
    let mut w = Writer::new(HypervisorSettings {
        fp_policy: FpPolicy::Lazy,
        max_cpus: 8,
        tick_hz: 250,
        ..Default::default()
    });
    w.vms.push(VmInput {
        initrd: Some(&initrd),
        dtb: Some(&dtb),
        ..vm("linux0", &k0)
    });
    w.vms.push(VmInput {
        affinity: Affinity {
            mask: 0b1100,
            pinned: true,
            shared: false,
        },
        kind: GuestKind::TestRaw,
        console: ConsoleKind::Ns16550,
        cmdline: "",
        entry_offset: 0x40,
        kernel_footprint: 0x10_0000,
        ..vm("test-1", &k1)
    });
    w.vms.push(vm("third_vm", &k2));
    w.finish()
}

#[test]
fn crc32_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32_update(crc32(b"1234"), b"56789"), 0xCBF4_3926);
}

#[test]
fn round_trip_preserves_every_field() {
    let bytes = sample();
    assert_eq!(&bytes[..8], b"KSTRLPKG");
    let pkg = Package::parse(&bytes).unwrap();
    assert_eq!(pkg.vm_count(), 3);
    assert_eq!(
        pkg.settings(),
        HypervisorSettings {
            fp_policy: FpPolicy::Lazy,
            max_cpus: 8,
            tick_hz: 250,
            ..Default::default()
        }
    );
    assert_eq!(pkg.bytes().len(), bytes.len());

    let v0 = pkg.vm(0).unwrap();
    assert_eq!(v0.index, 0);
    assert_eq!(v0.name, "linux0");
    assert_eq!(v0.memory, 64 * MB);
    assert_eq!(v0.vcpus, 2);
    assert_eq!(v0.kind, GuestKind::LinuxArm64Image);
    assert_eq!(v0.console, ConsoleKind::Pl011);
    assert_eq!(v0.kernel, &kernel(10_000, 1)[..]);
    assert_eq!(v0.initrd, Some(&kernel(3000, 9)[..]));
    assert_eq!(v0.dtb, Some(&kernel(700, 7)[..]));
    assert_eq!(v0.cmdline, "console=ttyAMA0");
    assert_eq!(v0.kernel_footprint, 10_000);
    assert_eq!(
        v0.affinity,
        Affinity {
            mask: 0,
            pinned: false,
            shared: false,
        }
    );
    for blob in [v0.kernel, v0.initrd.unwrap(), v0.dtb.unwrap()] {
        let off = blob.as_ptr() as usize - bytes.as_ptr() as usize;
        assert_eq!(off % BLOB_ALIGN as usize, 0, "blobs are 4 KiB aligned");
        assert!(off as u64 >= blob_area_start(3));
    }

    let v1 = pkg.vm(1).unwrap();
    assert_eq!(v1.name, "test-1");
    assert_eq!(
        v1.affinity,
        Affinity {
            mask: 0b1100,
            pinned: true,
            shared: false,
        }
    );
    assert_eq!(v1.affinity.pinned_cpu(0), Some(2));
    assert_eq!(v1.affinity.pinned_cpu(1), Some(3));
    assert_eq!(v1.affinity.pinned_cpu(2), None);
    assert_eq!(
        (v1.kind, v1.console),
        (GuestKind::TestRaw, ConsoleKind::Ns16550)
    );
    assert_eq!((v1.entry_offset, v1.kernel_footprint), (0x40, 0x10_0000));
    assert_eq!(v1.initrd, None);
    assert_eq!(v1.dtb, None);
    assert_eq!(v1.cmdline, "");

    let names: Vec<_> = pkg.vms().map(|v| v.unwrap().name).collect();
    assert_eq!(names, ["linux0", "test-1", "third_vm"]);
    assert_eq!(pkg.vm(3).unwrap_err().problem, Problem::RecordOutOfBounds);
}

#[test]
fn vms_of_one_kernel_and_initrd_share_their_blobs() {
    let (k, other) = (kernel(10_000, 1), kernel(10_000, 2));
    let (k_copy, initrd, initrd_copy) = (k.clone(), kernel(3000, 9), kernel(3000, 9));
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        initrd: Some(&initrd),
        ..vm("a", &k)
    });
    w.vms.push(VmInput {
        initrd: Some(&initrd_copy),
        cmdline: "console=ttyAMA0 other",
        ..vm("b", &k_copy)
    });
    w.vms.push(vm("c", &other));
    let bytes = w.finish();
    let pkg = Package::parse(&bytes).unwrap();
    let (a, b, c) = (pkg.vm(0).unwrap(), pkg.vm(1).unwrap(), pkg.vm(2).unwrap());
    assert_eq!(a.kernel.as_ptr(), b.kernel.as_ptr(), "one kernel blob");
    assert_eq!(a.initrd.unwrap().as_ptr(), b.initrd.unwrap().as_ptr());
    assert_ne!(a.kernel.as_ptr(), c.kernel.as_ptr());
    assert_eq!((a.kernel, b.kernel, c.kernel), (&k[..], &k[..], &other[..]));
    assert_eq!(
        (a.cmdline, b.cmdline),
        ("console=ttyAMA0", "console=ttyAMA0 other")
    );
    // One copy of each distinct image (plus alignment), not two.
    assert!(bytes.len() < 2 * 10_000 + 3000 + 6 * BLOB_ALIGN as usize + 4096);
}

#[test]
fn empty_package_is_valid() {
    let bytes = Writer::new(HypervisorSettings::default()).finish();
    assert_eq!(bytes.len(), HEADER_SIZE);
    let pkg = Package::parse(&bytes).unwrap();
    assert_eq!(pkg.vm_count(), 0);
    assert_eq!(pkg.vms().count(), 0);
    assert_eq!(pkg.settings().fp_policy, FpPolicy::Default);
}

#[test]
fn layout_places_dtb_at_top_and_initrd_below_it() {
    let l = GuestLayout::compute(64 * MB, 0, 10 * MB + 5, 3 * MB + 1).unwrap();
    assert_eq!(l.dtb, 62 * MB);
    assert_eq!(l.initrd, 62 * MB - (3 * MB + 4096));
    assert_eq!(l.initrd_size, 3 * MB + 1);
    assert!(
        l.initrd >= 12 * MB,
        "above the kernel footprint rounded to 2 MiB"
    );
    // Exactly fits: kernel 2 MiB + initrd 2 MiB + DTB slot 2 MiB = 6 MiB.
    assert!(GuestLayout::compute(6 * MB, 0, 2 * MB, 2 * MB).is_ok());
    assert_eq!(
        GuestLayout::compute(6 * MB, 0, 2 * MB, 2 * MB + 1),
        Err(Problem::DoesNotFit {
            need: 6 * MB + 4096,
            have: 6 * MB
        })
    );
    assert!(matches!(
        GuestLayout::compute(8 * MB, u64::MAX - 1, 10, 0),
        Err(Problem::DoesNotFit { .. })
    ));
}

fn header_err(bytes: &[u8]) -> PackageError {
    Package::parse(bytes).unwrap_err()
}

#[test]
fn header_corruption_refuses_the_whole_package() {
    let good = sample();
    assert_eq!(header_err(&good[..10]), PackageError::Truncated { len: 10 });

    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(header_err(&b), PackageError::BadMagic);

    let mut b = good.clone();
    b[8] = 1;
    assert_eq!(
        header_err(&b),
        PackageError::UnsupportedVersion { found: 1 }
    );

    let mut b = good.clone();
    b[12] = 128; // record size 256 -> 128
    b[13] = 0;
    assert_eq!(
        header_err(&b),
        PackageError::BadLayout {
            header_size: 64,
            record_size: 128
        }
    );

    // A flipped bit in the tick field: the header CRC catches it.
    let mut b = good.clone();
    b[36] ^= 1;
    assert!(matches!(
        header_err(&b),
        PackageError::HeaderChecksum { .. }
    ));

    // Truncated buffer: total size larger than what we have.
    let short = &good[..good.len() - 1];
    assert_eq!(
        header_err(short),
        PackageError::BadTotalSize {
            total: good.len() as u64,
            buffer: good.len() - 1
        }
    );

    // Count that needs more records than the total size holds (resealed so only the count is wrong).
    let mut b = good[..blob_area_start(3) as usize].to_vec();
    let total = b.len() as u64;
    b[offsets::H_TOTAL..offsets::H_TOTAL + 8].copy_from_slice(&total.to_le_bytes());
    b[offsets::H_COUNT..offsets::H_COUNT + 2].copy_from_slice(&64u16.to_le_bytes());
    reseal(&mut b);
    assert!(matches!(header_err(&b), PackageError::BadTotalSize { .. }));

    let mut b = good.clone();
    b[offsets::H_COUNT..offsets::H_COUNT + 2].copy_from_slice(&65u16.to_le_bytes());
    reseal(&mut b);
    assert_eq!(header_err(&b), PackageError::TooManyVms { count: 65 });

    let mut b = good.clone();
    b[32] = 9;
    reseal(&mut b);
    assert_eq!(
        header_err(&b),
        PackageError::BadField {
            field: "fp_policy",
            value: 9
        }
    );
    assert!(header_err(&b).to_string().contains("fp_policy"));
}

#[test]
fn console_settings_round_trip_and_bad_ones_are_refused() {
    let w = Writer::new(HypervisorSettings {
        console: ConsoleMode::Log,
        scrollback: 4096,
        ..Default::default()
    });
    let bytes = w.finish();
    let s = Package::parse(&bytes).unwrap().settings();
    assert_eq!((s.console, s.scrollback), (ConsoleMode::Log, 4096));
    let mut b = bytes.clone();
    b[34] = 3;
    reseal(&mut b);
    assert_eq!(
        header_err(&b),
        PackageError::BadField {
            field: "console",
            value: 3
        }
    );
    let mut b = bytes.clone();
    b[40..44].copy_from_slice(&(MAX_SCROLLBACK + 1).to_le_bytes());
    reseal(&mut b);
    assert!(matches!(
        header_err(&b),
        PackageError::BadField {
            field: "scrollback",
            ..
        }
    ));
    let mut b = bytes;
    b[35] = 1;
    reseal(&mut b);
    assert!(matches!(
        header_err(&b),
        PackageError::BadField {
            field: "reserved",
            ..
        }
    ));
}

/// Patches record `i` of `bytes` with `f` and reseals the CRCs.
fn patched(i: usize, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut b = sample();
    let s = HEADER_SIZE + i * RECORD_SIZE;
    f(&mut b[s..s + RECORD_SIZE]);
    reseal(&mut b);
    b
}

fn set64(rec: &mut [u8], off: usize, v: u64) {
    rec[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// The error of VM `i`, checking that the other two VMs still validate.
fn vm_err(bytes: &[u8], i: usize) -> VmError {
    let pkg = Package::parse(bytes).expect("header stays valid");
    for j in 0..3 {
        if j != i {
            assert!(
                pkg.vm(j).is_ok(),
                "vm[{j}] must still start when vm[{i}] is bad"
            );
        }
    }
    pkg.vm(i).unwrap_err()
}

#[test]
fn corrupt_kernel_data_refuses_only_that_vm() {
    let mut b = sample();
    let pkg = Package::parse(&b).unwrap();
    let off = pkg.vm(1).unwrap().kernel.as_ptr() as usize - b.as_ptr() as usize;
    b[off + 100] ^= 0x40;
    let e = vm_err(&b, 1);
    assert_eq!((e.index, e.field), (1, Field::Data));
    assert!(matches!(e.problem, Problem::Checksum { .. }));
    let msg = e.to_string();
    assert!(
        msg.starts_with("vm[1] \"test-1\": data: corrupt: checksum"),
        "{msg}"
    );
}

#[test]
fn corrupt_record_refuses_only_that_vm() {
    let mut b = sample();
    b[HEADER_SIZE + 2 * RECORD_SIZE + offsets::MEMORY] ^= 0x80; // not resealed
    let e = vm_err(&b, 2);
    assert_eq!(e.field, Field::Record);
    assert!(matches!(e.problem, Problem::Checksum { .. }));
}

#[test]
fn kernel_blob_out_of_bounds() {
    let b = patched(0, |r| set64(r, offsets::KERNEL, !(BLOB_ALIGN - 1)));
    let e = vm_err(&b, 0);
    assert_eq!(e.field, Field::Kernel);
    assert!(matches!(e.problem, Problem::OutOfBounds { .. }), "{e}");
    assert!(e.to_string().contains("vm[0] \"linux0\": kernel: blob at"));

    // Pointing into the record table is refused too.
    let b = patched(0, |r| set64(r, offsets::KERNEL, 0));
    assert!(matches!(
        vm_err(&b, 0).problem,
        Problem::OutOfBounds { offset: 0, .. }
    ));

    // Length running past the end.
    let total = sample().len() as u64;
    let b = patched(2, |r| set64(r, offsets::KERNEL + 8, total));
    assert!(matches!(vm_err(&b, 2).problem, Problem::OutOfBounds { .. }));
}

#[test]
fn per_field_checks() {
    let cases: Vec<(usize, Vec<u8>, Field)> = vec![
        (0, patched(0, |r| r[offsets::NAME] = b'A'), Field::Name),
        (
            0,
            patched(0, |r| r[offsets::NAME..offsets::NAME + 32].fill(0)),
            Field::Name,
        ),
        (
            1,
            patched(1, |r| r[offsets::VCPUS..offsets::VCPUS + 2].fill(0)),
            Field::Vcpus,
        ),
        (1, patched(1, |r| r[offsets::VCPUS] = 17), Field::Vcpus),
        (
            2,
            patched(2, |r| set64(r, offsets::MEMORY, 0)),
            Field::Memory,
        ),
        (
            2,
            patched(2, |r| set64(r, offsets::MEMORY, 3 * MB)),
            Field::Memory,
        ),
        (
            2,
            patched(2, |r| set64(r, offsets::MEMORY, 2 * MB)),
            Field::Memory,
        ),
        (0, patched(0, |r| r[offsets::KIND] = 0), Field::Kind),
        (0, patched(0, |r| r[offsets::CONSOLE] = 7), Field::Console),
        (0, patched(0, |r| r[offsets::FLAGS] = 0x80), Field::Flags),
        // Shared pinning without pinning.
        (
            0,
            patched(0, |r| r[offsets::FLAGS] = FLAG_PINNED_SHARED as u8),
            Field::Flags,
        ),
        (
            0,
            patched(0, |r| set64(r, offsets::MASK, 1 << 8)),
            Field::Cpus,
        ),
        (
            1,
            patched(1, |r| set64(r, offsets::MASK, 0b111)),
            Field::Cpus,
        ),
        (
            0,
            patched(0, |r| set64(r, offsets::INITRD, 4097)),
            Field::Initrd,
        ),
        (0, patched(0, |r| set64(r, offsets::DTB + 8, 0)), Field::Dtb),
        (
            2,
            patched(2, |r| set64(r, offsets::LOAD, 64 * MB)),
            Field::LoadOffset,
        ),
        (
            2,
            patched(2, |r| set64(r, offsets::FOOTPRINT, 10)),
            Field::KernelFootprint,
        ),
        (
            1,
            patched(1, |r| set64(r, offsets::ENTRY, 0x10_0000)),
            Field::EntryOffset,
        ),
        (0, patched(0, |r| r[200] = 1), Field::Reserved),
        (
            2,
            patched(2, |r| {
                r[offsets::SVE_VL..offsets::SVE_VL + 2].copy_from_slice(&200u16.to_le_bytes())
            }),
            Field::Sve,
        ),
        (
            0,
            patched(0, |r| {
                r[offsets::SVE_VL..offsets::SVE_VL + 2].copy_from_slice(&4096u16.to_le_bytes())
            }),
            Field::Sve,
        ),
    ];
    for (i, bytes, field) in cases {
        let e = vm_err(&bytes, i);
        assert_eq!(e.field, field, "vm[{i}]: {e}");
        assert!(
            e.to_string().contains(&format!(": {}: ", field.name())),
            "{e}"
        );
    }
}

#[test]
fn bad_name_is_printed_escaped() {
    let b = patched(0, |r| {
        r[offsets::NAME..offsets::NAME + 3].copy_from_slice(b"a\x1bZ")
    });
    let e = vm_err(&b, 0);
    assert_eq!(e.field, Field::Name);
    assert_eq!(e.name_str(), None);
    assert!(
        e.to_string().starts_with("vm[0] (name a\\x1bZux0): name:"),
        "{e}"
    );
}

#[test]
fn cmdline_must_be_utf8_without_nul() {
    let k = kernel(100, 0);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        cmdline: "a\0b",
        ..vm("x", &k)
    });
    let b = w.finish();
    let e = Package::parse(&b).unwrap().vm(0).unwrap_err();
    assert_eq!((e.field, e.problem), (Field::Cmdline, Problem::BadText));
}

#[test]
fn hostile_bytes_never_panic() {
    // Deterministic xorshift fuzz: random bit flips and random garbage, with
    // and without resealing, over every record.
    let good = sample();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..3000 {
        let mut b = good.clone();
        let flips = 1 + next() % 8;
        for _ in 0..flips {
            let limit = if round % 2 == 0 {
                blob_area_start(3) as usize
            } else {
                b.len()
            };
            let i = (next() as usize) % limit;
            b[i] = next() as u8;
        }
        if round % 3 == 0 {
            reseal(&mut b);
        }
        let cut = if round % 5 == 0 {
            (next() as usize) % b.len()
        } else {
            b.len()
        };
        if let Ok(pkg) = Package::parse(&b[..cut]) {
            for r in pkg.vms() {
                let _ = r.map(|v| v.kernel.len()).map_err(|e| e.to_string());
            }
            let _ = pkg.vm(usize::MAX);
        }
    }
}

/// One VM with `devices`.
fn with_devices(devices: &[Device<'_>]) -> Vec<u8> {
    let k = kernel(4096, 5);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        devices,
        virtio_console: true,
        ..vm("dev", &k)
    });
    w.finish()
}

fn get64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// Applies `f` to VM 0's device table, then rewrites its data CRC and
/// reseals, so only the table's content is wrong.
fn patch_table(mut b: Vec<u8>, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let rec = HEADER_SIZE;
    let (t, n) = (
        get64(&b, rec + offsets::DEVICES) as usize,
        get64(&b, rec + offsets::DEVICES + 8) as usize,
    );
    f(&mut b[t..t + n]);
    let mut crc = 0;
    for field in [
        offsets::KERNEL,
        offsets::INITRD,
        offsets::DTB,
        offsets::CMDLINE,
        offsets::DEVICES,
    ] {
        let (o, l) = (
            get64(&b, rec + field) as usize,
            get64(&b, rec + field + 8) as usize,
        );
        crc = crc32_update(crc, &b[o..o + l]);
    }
    b[rec + offsets::DATA_CRC..rec + offsets::DATA_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    reseal(&mut b);
    b
}

#[test]
fn devices_round_trip() {
    let disk0: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let disk1 = vec![0xeeu8; 1024];
    let devs = [
        Device::Disk {
            image: &disk0,
            read_only: false,
        },
        Device::Net {
            network: "lan",
            mac: Some([0x02, 1, 2, 3, 4, 5]),
            allow_mac_spoofing: true,
            learn: 7,
            broadcast_rate: 250,
        },
        Device::Disk {
            image: &disk1,
            read_only: true,
        },
        Device::Net {
            network: "lan-2",
            mac: None,
            allow_mac_spoofing: false,
            learn: 0,
            broadcast_rate: 0,
        },
    ];
    let b = with_devices(&devs);
    let pkg = Package::parse(&b).unwrap();
    let r = pkg.vm(0).unwrap();
    assert!(r.virtio_console);
    let got: Vec<Device<'_>> = r.devices.iter().collect();
    assert_eq!(got, devs);
    assert_eq!(r.devices.len(), 4);
    // Disk images are 4 KiB-aligned in the package.
    for d in r.devices.iter() {
        if let Device::Disk { image, .. } = d {
            assert_eq!((image.as_ptr() as usize - b.as_ptr() as usize) % 4096, 0);
        }
    }
    let none = with_devices(&[]);
    let r = Package::parse(&none).unwrap().vm(0).unwrap();
    assert!(r.devices.is_empty());
    assert_eq!(get64(&none, HEADER_SIZE + offsets::DEVICES + 8), 0);
}

#[test]
fn bad_device_entries_name_the_device_field() {
    let disk = vec![1u8; 1024];
    let base = || {
        with_devices(&[
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
        ])
    };
    type Patch = fn(&mut [u8]);
    let cases: &[(&str, Patch, Field)] = &[
        ("unknown kind", |t| t[0] = 9, Field::Devices),
        ("reserved bytes", |t| t[63] = 1, Field::Devices),
        ("unknown disk flag", |t| t[1] = 0x80, Field::Disk),
        ("disk with a MAC", |t| t[2] = 1, Field::Disk),
        ("disk of no bytes", |t| t[16..24].fill(0), Field::Disk),
        ("disk not whole sectors", |t| t[16] = 0xff, Field::Disk),
        (
            "disk outside the package",
            |t| t[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes()),
            Field::Disk,
        ),
        ("disk misaligned", |t| t[8] = 8, Field::Disk),
        ("disk corrupt", |t| t[56] ^= 1, Field::Disk),
        ("network name bad", |t| t[64 + 24] = b'A', Field::Net),
        (
            "network name empty",
            |t| t[64 + 24..64 + 56].fill(0),
            Field::Net,
        ),
        ("MAC without its flag", |t| t[64 + 2] = 2, Field::Net),
        (
            "multicast MAC",
            |t| {
                t[64 + 1] = NET_MAC;
                t[64 + 2] = 1;
            },
            Field::Net,
        ),
        ("zero MAC", |t| t[64 + 1] = NET_MAC, Field::Net),
        ("net reserved bytes", |t| t[64 + 14] = 1, Field::Net),
        ("unknown net flag", |t| t[64 + 1] = 0x80, Field::Net),
        (
            "broadcast budget too high",
            |t| t[64 + 8..64 + 12].copy_from_slice(&(MAX_BROADCAST_RATE + 1).to_le_bytes()),
            Field::Net,
        ),
        (
            "learning quota too high",
            |t| t[64 + 12..64 + 14].copy_from_slice(&(MAX_LEARN + 1).to_le_bytes()),
            Field::Net,
        ),
    ];
    for (name, f, field) in cases {
        let b = patch_table(base(), *f);
        let e = Package::parse(&b).unwrap().vm(0).unwrap_err();
        assert_eq!(e.field, *field, "{name}: {e}");
        assert!(e.to_string().contains(field.name()), "{name}: {e}");
    }
    // The patching itself leaves a good package alone.
    assert!(Package::parse(&patch_table(base(), |_| {}))
        .unwrap()
        .vm(0)
        .is_ok());
    // A table whose bytes changed without the data CRC: refused as data.
    let mut b = base();
    let t = get64(&b, HEADER_SIZE + offsets::DEVICES) as usize;
    b[t + 64 + 25] = b'x';
    let e = Package::parse(&b).unwrap().vm(0).unwrap_err();
    assert_eq!(e.field, Field::Data);
}

#[test]
fn device_table_size_limits() {
    let disk = vec![0u8; 512];
    let nine: Vec<Device<'_>> = (0..MAX_DEVICES)
        .map(|_| Device::Disk {
            image: &disk,
            read_only: true,
        })
        .collect();
    assert!(Package::parse(&with_devices(&nine)).unwrap().vm(0).is_ok());
    // A table length that is not whole entries, or too many entries.
    for len in [
        (DEVICE_SIZE - 1) as u64,
        ((MAX_DEVICES + 1) * DEVICE_SIZE) as u64,
    ] {
        let mut b = with_devices(&nine);
        let rec = HEADER_SIZE;
        b[rec + offsets::DEVICES + 8..rec + offsets::DEVICES + 16]
            .copy_from_slice(&len.to_le_bytes());
        reseal(&mut b);
        let e = Package::parse(&b).unwrap().vm(0).unwrap_err();
        assert!(matches!(e.field, Field::Devices | Field::Data), "{e}");
    }
}

/// The sliced CRC equals the plain byte-at-a-time definition for every
/// length and alignment, and continues across pieces.
#[test]
fn sliced_crc_matches_the_bytewise_definition() {
    fn bytewise(crc: u32, data: &[u8]) -> u32 {
        let mut c = !crc;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    let data: Vec<u8> = (0..1000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    for start in 0..9 {
        for len in (0..200).chain([511, 512, 991]) {
            let d = &data[start..(start + len).min(data.len())];
            assert_eq!(crc32(d), bytewise(0, d), "start {start} len {len}");
        }
    }
    let (a, b) = data.split_at(333);
    assert_eq!(crc32_update(crc32(a), b), crc32(&data));
}

#[test]
fn the_pv_ipi_flag_round_trips() {
    let k = kernel(4096, 6);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        pv_ipi_hidden: true,
        ..vm("hidden", &k)
    });
    w.vms.push(vm("offered", &k));
    let b = w.finish();
    let pkg = Package::parse(&b).unwrap();
    assert!(pkg.vm(0).unwrap().pv_ipi_hidden);
    assert!(!pkg.vm(1).unwrap().pv_ipi_hidden);
    let rec = HEADER_SIZE;
    let flags = u32::from_le_bytes(
        b[rec + offsets::FLAGS..rec + offsets::FLAGS + 4]
            .try_into()
            .unwrap(),
    );
    assert_eq!(flags, FLAG_PV_IPI_HIDDEN);
    assert_eq!(FLAGS_KNOWN & FLAG_PV_IPI_HIDDEN, FLAG_PV_IPI_HIDDEN);
}

#[test]
fn the_pv_time_flag_round_trips() {
    let k = kernel(4096, 6);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        pv_time_hidden: true,
        ..vm("hidden", &k)
    });
    w.vms.push(vm("offered", &k));
    let b = w.finish();
    let pkg = Package::parse(&b).unwrap();
    assert!(pkg.vm(0).unwrap().pv_time_hidden);
    assert!(!pkg.vm(0).unwrap().pv_ipi_hidden);
    assert!(!pkg.vm(1).unwrap().pv_time_hidden);
    let rec = HEADER_SIZE;
    let flags = u32::from_le_bytes(
        b[rec + offsets::FLAGS..rec + offsets::FLAGS + 4]
            .try_into()
            .unwrap(),
    );
    assert_eq!(flags, FLAG_PV_TIME_HIDDEN);
    assert_eq!(FLAGS_KNOWN & FLAG_PV_TIME_HIDDEN, FLAG_PV_TIME_HIDDEN);
}

#[test]
fn the_sve_vector_length_round_trips() {
    let k = kernel(4096, 6);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        sve_vl: 512,
        ..vm("sve", &k)
    });
    w.vms.push(vm("plain", &k));
    let b = w.finish();
    let pkg = Package::parse(&b).unwrap();
    assert_eq!(pkg.vm(0).unwrap().sve_vl, 512);
    assert_eq!(pkg.vm(1).unwrap().sve_vl, 0, "hidden unless asked for");
    let rec = HEADER_SIZE;
    assert_eq!(
        &b[rec + offsets::SVE_VL..rec + offsets::SVE_VL + 2],
        &512u16.to_le_bytes()
    );
}

#[test]
fn the_reboot_flag_round_trips() {
    let k = kernel(4096, 6);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        reboot_stop: true,
        ..vm("stops", &k)
    });
    w.vms.push(vm("restarts", &k));
    let b = w.finish();
    let pkg = Package::parse(&b).unwrap();
    assert!(pkg.vm(0).unwrap().reboot_stop);
    assert!(!pkg.vm(1).unwrap().reboot_stop);
    let rec = HEADER_SIZE;
    let flags = u32::from_le_bytes(
        b[rec + offsets::FLAGS..rec + offsets::FLAGS + 4]
            .try_into()
            .unwrap(),
    );
    assert_eq!(flags, FLAG_REBOOT_STOP);
    assert_eq!(FLAGS_KNOWN & FLAG_REBOOT_STOP, FLAG_REBOOT_STOP);
}

/// One VM with `devices` and `pt`, identity RAM.
fn with_passthrough(devices: &[Device<'_>], pt: &[Passthrough]) -> Vec<u8> {
    let k = kernel(4096, 5);
    let mut w = Writer::new(HypervisorSettings::default());
    w.vms.push(VmInput {
        devices,
        passthrough: pt,
        identity: true,
        ..vm("pt", &k)
    });
    w.finish()
}

#[test]
fn passthrough_round_trip_beside_virtio_devices() {
    let disk = vec![7u8; 1024];
    let devs = [Device::Disk {
        image: &disk,
        read_only: false,
    }];
    let pt = [
        Passthrough::new(0x0a00_3000, 0x1000, &[47]),
        Passthrough::new(0x1000_0000, 0x2_0000, &[3, 4, 987]),
        Passthrough::new(0x2000_0000, 0x1000, &[]),
    ];
    let b = with_passthrough(&devs, &pt);
    let r = Package::parse(&b).unwrap().vm(0).unwrap();
    assert!(r.identity);
    // Virtio devices keep their slots: passthrough entries are not devices.
    assert_eq!(r.devices.iter().collect::<Vec<_>>(), devs);
    assert_eq!(r.passthrough.iter().collect::<Vec<_>>(), pt);
    assert_eq!(r.passthrough.iter().nth(1).unwrap().spis(), &[3, 4, 987]);
    let plain = with_devices(&devs);
    let r = Package::parse(&plain).unwrap().vm(0).unwrap();
    assert!(!r.identity && r.passthrough.is_empty());
}

#[test]
fn bad_passthrough_entries_are_refused_per_vm() {
    let base = || with_passthrough(&[], &[Passthrough::new(0x0a00_3000, 0x1000, &[47, 48])]);
    assert!(Package::parse(&base()).unwrap().vm(0).is_ok());
    type Patch = fn(&mut [u8]);
    let cases: &[(&str, Patch, Problem)] = &[
        ("a flag", |t| t[1] = 1, Problem::NonZero),
        ("bytes after the count", |t| t[3] = 1, Problem::NonZero),
        (
            "too many SPIs",
            |t| t[2] = 9,
            Problem::TooLarge { value: 9, max: 8 },
        ),
        ("size 0", |t| t[16..24].fill(0), Problem::Zero),
        (
            "base not page aligned",
            |t| t[8] = 0x10,
            Problem::Misaligned {
                value: 0x0a00_3010,
                align: 4096,
            },
        ),
        (
            "size not page aligned",
            |t| t[16] = 1,
            Problem::Misaligned {
                value: 0x1001,
                align: 4096,
            },
        ),
        (
            "region wraps",
            |t| t[8..16].copy_from_slice(&u64::MAX.wrapping_sub(0xfff).to_le_bytes()),
            Problem::TooLarge {
                value: 0x1000,
                max: 0xfff,
            },
        ),
        (
            "SPI above 987",
            |t| t[24..28].copy_from_slice(&988u32.to_le_bytes()),
            Problem::TooLarge {
                value: 988,
                max: 987,
            },
        ),
        ("an SPI past the count", |t| t[32] = 5, Problem::NonZero),
        (
            "an SPI twice",
            |t| t[28] = 47,
            Problem::Duplicate { value: 47 },
        ),
        ("a CRC", |t| t[56] = 1, Problem::NonZero),
    ];
    for (what, patch, problem) in cases {
        let b = patch_table(base(), patch);
        let e = Package::parse(&b).unwrap().vm(0).unwrap_err();
        assert_eq!(e.field, Field::Passthrough, "{what}");
        assert_eq!(e.problem, *problem, "{what}");
        assert!(e.to_string().contains("passthrough"), "{what}: {e}");
    }
}

#[test]
fn older_packages_are_refused_with_both_versions_named() {
    let k = kernel(4096, 5);
    for old in [2u16, 3] {
        let mut w = Writer::new(HypervisorSettings::default());
        w.vms.push(vm("old", &k));
        let mut b = w.finish();
        b[8..10].copy_from_slice(&old.to_le_bytes());
        reseal(&mut b);
        let e = Package::parse(&b).unwrap_err();
        assert_eq!(e, PackageError::UnsupportedVersion { found: old });
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("version {old}"))
                && msg.contains("version 4")
                && msg.contains("make image"),
            "{msg}"
        );
    }
}

#[test]
fn passthrough_regions_must_not_clash_with_the_guest_map() {
    let ram = (ARM64_GUEST_RAM, ARM64_GUEST_RAM + (256 << 20));
    // QEMU virt's last virtio-mmio page beside 9 kestrel transports.
    assert_eq!(arm64_guest_clash(0x0a00_3000, 0x0a00_4000, 9, ram), None);
    assert!(arm64_guest_clash(0x0a00_1000, 0x0a00_2000, 9, ram)
        .unwrap()
        .contains("virtio"));
    assert_eq!(arm64_guest_clash(0x0a00_1000, 0x0a00_2000, 8, ram), None);
    assert!(arm64_guest_clash(0x0900_0000, 0x0900_1000, 0, ram)
        .unwrap()
        .contains("GIC or UART"));
    assert!(arm64_guest_clash(0x4fff_f000, 0x5000_1000, 0, ram)
        .unwrap()
        .contains("RAM"));
    assert_eq!(arm64_guest_clash(0x5000_0000, 0x5000_1000, 0, ram), None);
}

#[test]
fn shared_pinning_is_read_back() {
    let b = patched(1, |r| r[offsets::FLAGS] |= FLAG_PINNED_SHARED as u8);
    let v = Package::parse(&b).unwrap().vm(1).unwrap();
    assert_eq!(
        v.affinity,
        Affinity {
            mask: 0b1100,
            pinned: true,
            shared: true,
        }
    );
    assert_eq!(v.affinity.pinned_cpu(1), Some(3));
}
