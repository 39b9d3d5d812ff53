use super::*;
use crate::host::board::{Arch, IrqChip, PsciConduit, UartKind};
use kestrel_abi::package::ConsoleKind;

const MB: u64 = 1 << 20;

fn spec_v3() -> GuestDtbSpec<'static> {
    GuestDtbSpec {
        ram_base: 0x4000_0000,
        ram_size: 512 * MB,
        vcpus: 4,
        gic: GuestGic::V3 {
            dist: (0x0800_0000, 0x1_0000),
            redist: (0x080A_0000, 0xF6_0000),
        },
        uart: GuestUart {
            kind: ConsoleKind::Pl011,
            base: 0x0900_0000,
            size: 0x1000,
            spi: 1,
        },
        bootargs: "console=ttyAMA0 earlycon",
        initrd: Some((0x5000_0000, 0x5012_3456)),
        virtio: Vec::new(),
        passthrough: Vec::new(),
        reserved: Vec::new(),
    }
}

fn spec_v2() -> GuestDtbSpec<'static> {
    GuestDtbSpec {
        gic: GuestGic::V2 {
            dist: (0x0800_0000, 0x1_0000),
            cpu: (0x0801_0000, 0x1_0000),
        },
        uart: GuestUart {
            kind: ConsoleKind::Ns16550,
            base: 0x0900_0000,
            size: 0x1000,
            spi: 2,
        },
        vcpus: 2,
        initrd: None,
        ..spec_v3()
    }
}

fn be32(v: &[u8]) -> Vec<u32> {
    v.chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn be64(v: &[u8]) -> u64 {
    u64::from_be_bytes(v.try_into().expect("8 bytes"))
}

#[test]
fn writer_rejects_misuse() {
    let mut w = FdtWriter::new();
    w.begin_node("");
    assert_eq!(w.finish(), Err(FdtBuildError::Unclosed(1)));

    let mut w = FdtWriter::new();
    w.begin_node("").end_node().end_node();
    assert_eq!(w.finish(), Err(FdtBuildError::UnbalancedEnd));

    let mut w = FdtWriter::new();
    w.prop_u32("x", 1);
    assert_eq!(w.finish(), Err(FdtBuildError::OutsideRoot));

    let mut w = FdtWriter::new();
    w.begin_node("").end_node().begin_node("").end_node();
    assert_eq!(w.finish(), Err(FdtBuildError::OutsideRoot));

    let mut w = FdtWriter::new();
    w.begin_node("").prop_u32("a\0b", 1).end_node();
    assert_eq!(w.finish(), Err(FdtBuildError::BadName));
}

#[test]
fn writer_layout_dedups_strings_and_writes_reservations() {
    let mut w = FdtWriter::new();
    w.reserve(0x1000, 0x2000).boot_cpuid(3);
    w.begin_node("")
        .prop_u32("x", 1)
        .begin_node("a")
        .prop_u32("x", 2)
        .prop_str("y", "z")
        .end_node()
        .end_node();
    let blob = w.finish().unwrap();
    let hdr = be32(&blob[..40]);
    assert_eq!(hdr[0], 0xd00d_feed);
    assert_eq!(hdr[1] as usize, blob.len());
    assert_eq!((hdr[5], hdr[6], hdr[7]), (17, 16, 3));
    // Strings: "x\0y\0", "x" stored once.
    let (off_strings, size_strings) = (hdr[3] as usize, hdr[8] as usize);
    assert_eq!(&blob[off_strings..off_strings + size_strings], b"x\0y\0");
    assert_eq!(off_strings + size_strings, blob.len());
    // Reservation map: one entry then the terminator.
    let rsv = hdr[4] as usize;
    assert_eq!(rsv % 8, 0);
    assert_eq!(be64(&blob[rsv..rsv + 8]), 0x1000);
    assert_eq!(be64(&blob[rsv + 8..rsv + 16]), 0x2000);
    assert_eq!(&blob[rsv + 16..rsv + 32], &[0u8; 16]);
    // Structure ends with FDT_END.
    let (off_struct, size_struct) = (hdr[2] as usize, hdr[9] as usize);
    assert_eq!(
        be32(&blob[off_struct + size_struct - 4..off_struct + size_struct]),
        [9]
    );

    let fdt = fdt::Fdt::new(&blob).unwrap();
    let a = fdt.find_node("/a").unwrap();
    assert_eq!(a.property("x").unwrap().as_usize(), Some(2));
    assert_eq!(a.property("y").unwrap().as_str(), Some("z"));
    let rsv: Vec<_> = fdt
        .memory_reservations()
        .map(|r| (r.address() as usize, r.size()))
        .collect();
    assert_eq!(rsv, [(0x1000, 0x2000)]);
    // The kernel's own header check accepts it.
    assert_eq!(
        crate::host::dtb::total_size(&blob[..8].try_into().unwrap()),
        Some(blob.len())
    );
}

#[test]
fn gicv3_guest_tree_round_trips_through_fdt_crate() {
    let spec = spec_v3();
    let blob = guest_dtb_arm64(&spec);
    let fdt = fdt::Fdt::new(&blob).expect("valid FDT");
    let root = fdt.find_node("/").unwrap();
    assert_eq!(root.property("#address-cells").unwrap().as_usize(), Some(2));
    assert_eq!(root.property("#size-cells").unwrap().as_usize(), Some(2));
    assert_eq!(
        root.property("interrupt-parent").unwrap().as_usize(),
        Some(phandle::GIC as usize)
    );

    // Memory.
    let mem = fdt.find_node("/memory@40000000").unwrap();
    assert_eq!(
        mem.property("device_type").unwrap().as_str(),
        Some("memory")
    );
    let r: Vec<_> = mem
        .reg()
        .unwrap()
        .map(|r| (r.starting_address as u64, r.size.unwrap() as u64))
        .collect();
    assert_eq!(r, [(0x4000_0000, 512 * MB)]);

    // CPUs: reg = MPIDR, PSCI enable method.
    let cpus: Vec<_> = fdt.cpus().collect();
    assert_eq!(cpus.len(), 4);
    for (i, cpu) in cpus.iter().enumerate() {
        assert_eq!(cpu.ids().first(), i);
        assert_eq!(
            cpu.property("enable-method").unwrap().as_str(),
            Some("psci")
        );
        assert_eq!(cpu.property("device_type").unwrap().as_str(), Some("cpu"));
    }

    // PSCI over HVC.
    let psci = fdt.find_node("/psci").unwrap();
    let compat: Vec<_> = psci.compatible().unwrap().all().collect();
    assert_eq!(compat, ["arm,psci-1.0", "arm,psci-0.2"]);
    assert_eq!(psci.property("method").unwrap().as_str(), Some("hvc"));

    // GICv3.
    let gic = fdt.find_compatible(&["arm,gic-v3"]).unwrap();
    assert_eq!(gic.name, "intc@8000000");
    let r: Vec<_> = gic
        .reg()
        .unwrap()
        .map(|r| (r.starting_address as u64, r.size.unwrap() as u64))
        .collect();
    assert_eq!(r, [(0x0800_0000, 0x1_0000), (0x080A_0000, 0xF6_0000)]);
    assert!(gic.property("interrupt-controller").is_some());
    assert_eq!(
        gic.property("#interrupt-cells").unwrap().as_usize(),
        Some(3)
    );
    assert_eq!(
        gic.property("phandle").unwrap().as_usize(),
        Some(phandle::GIC as usize)
    );

    // Timer: four PPIs, level high, no CPU mask on GICv3.
    let timer = fdt.find_compatible(&["arm,armv8-timer"]).unwrap();
    assert_eq!(
        be32(timer.property("interrupts").unwrap().value),
        [1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4]
    );

    // PL011 and its clock.
    let uart = fdt.find_node("/pl011@9000000").unwrap();
    let compat: Vec<_> = uart.compatible().unwrap().all().collect();
    assert_eq!(compat, ["arm,pl011", "arm,primecell"]);
    assert_eq!(be32(uart.property("interrupts").unwrap().value), [0, 1, 4]);
    assert_eq!(
        be32(uart.property("clocks").unwrap().value),
        [phandle::APB_PCLK; 2]
    );
    assert_eq!(
        uart.property("clock-names").unwrap().value,
        b"uartclk\0apb_pclk\0"
    );
    let clk = fdt.find_phandle(phandle::APB_PCLK).unwrap();
    assert_eq!(
        clk.property("clock-frequency").unwrap().as_usize(),
        Some(APB_PCLK_HZ as usize)
    );
    assert_eq!(clk.property("#clock-cells").unwrap().as_usize(), Some(0));

    // Chosen.
    let chosen = fdt.chosen();
    assert_eq!(chosen.bootargs(), Some("console=ttyAMA0 earlycon"));
    assert_eq!(chosen.stdout().map(|n| n.name), Some("pl011@9000000"));
    let c = fdt.find_node("/chosen").unwrap();
    assert_eq!(
        be64(c.property("linux,initrd-start").unwrap().value),
        0x5000_0000
    );
    assert_eq!(
        be64(c.property("linux,initrd-end").unwrap().value),
        0x5012_3456
    );
}

#[test]
fn gicv2_guest_tree_round_trips_through_fdt_crate() {
    let blob = guest_dtb_arm64(&spec_v2());
    let fdt = fdt::Fdt::new(&blob).unwrap();
    let gic = fdt.find_compatible(&["arm,cortex-a15-gic"]).unwrap();
    let r: Vec<_> = gic
        .reg()
        .unwrap()
        .map(|r| r.starting_address as u64)
        .collect();
    assert_eq!(r, [0x0800_0000, 0x0801_0000]);
    assert!(fdt.find_compatible(&["arm,gic-v3"]).is_none());
    // Two vCPUs: CPU mask 0b11 in bits [15:8].
    let timer = fdt.find_compatible(&["arm,armv8-timer"]).unwrap();
    assert_eq!(be32(timer.property("interrupts").unwrap().value)[2], 0x304);
    assert_eq!(fdt.cpus().count(), 2);
    let uart = fdt.find_node("/serial@9000000").unwrap();
    assert_eq!(
        uart.property("compatible").unwrap().as_str(),
        Some("ns16550a")
    );
    assert_eq!(be32(uart.property("interrupts").unwrap().value), [0, 2, 4]);
    assert!(fdt.find_node("/apb-pclk").is_none());
    let c = fdt.find_node("/chosen").unwrap();
    assert!(c.property("linux,initrd-start").is_none());
    assert_eq!(
        fdt.chosen().stdout().map(|n| n.name),
        Some("serial@9000000")
    );
}

#[test]
fn kestrel_own_dtb_parser_reads_the_guest_tree() {
    // The generated tree must satisfy the same parser kestrel uses for its
    // own boot DTB (a guest kestrel, nested, would read it).
    let b = crate::host::dtb::parse(&guest_dtb_arm64(&spec_v3()), Arch::Aarch64).unwrap();
    assert_eq!(b.memory_bytes(), 512 * MB);
    assert_eq!(b.cpus.len(), 4);
    assert_eq!(b.cpus[3].hw_id, 3);
    assert_eq!(
        b.irqchip,
        IrqChip::GicV3 {
            gicd: 0x0800_0000,
            gicr: 0x080A_0000,
            gicr_size: 0xF6_0000
        }
    );
    assert_eq!(b.psci, Some(PsciConduit::Hvc));
    assert_eq!(
        b.uart.map(|u| (u.kind, u.base)),
        Some((UartKind::Pl011, 0x0900_0000))
    );
    assert_eq!(b.cmdline.as_str(), "console=ttyAMA0 earlycon");

    let b = crate::host::dtb::parse(&guest_dtb_arm64(&spec_v2()), Arch::Aarch64).unwrap();
    assert!(matches!(
        b.irqchip,
        IrqChip::GicV2 {
            gicd: 0x0800_0000,
            gicc: 0x0801_0000,
            ..
        }
    ));
}

#[test]
fn mpidr_of_vcpus_beyond_16_moves_to_aff1() {
    assert_eq!(vcpu_mpidr(0), 0);
    assert_eq!(vcpu_mpidr(15), 15);
    assert_eq!(vcpu_mpidr(16), 0x100);
    assert_eq!(vcpu_mpidr(17), 0x101);
}

/// Decompiles with `dtc` when it is installed (device-tree-compiler); a
/// missing dtc skips the test with a note.
#[test]
fn dtc_decompiles_the_guest_tree_without_warnings() {
    use std::process::Command;
    if Command::new("dtc").arg("--version").output().is_err() {
        std::eprintln!("note: dtc not installed (apt-get install device-tree-compiler): skipping");
        return;
    }
    for (name, spec) in [("v3", spec_v3()), ("v2", spec_v2())] {
        let path =
            std::env::temp_dir().join(format!("kestrel-guest-{name}-{}.dtb", std::process::id()));
        std::fs::write(&path, guest_dtb_arm64(&spec)).unwrap();
        let out = Command::new("dtc")
            .args(["-I", "dtb", "-O", "dts", "-o", "-"])
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let dts = String::from_utf8_lossy(&out.stdout);
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "dtc failed: {warnings}");
        assert!(
            warnings.trim().is_empty(),
            "dtc warnings for {name}:\n{warnings}\n{dts}"
        );
        for needle in [
            "method = \"hvc\";",
            "enable-method = \"psci\";",
            "bootargs = \"console=ttyAMA0 earlycon\";",
            "device_type = \"memory\";",
            "reg = <0x00 0x40000000 0x00 0x20000000>;",
            "compatible = \"arm,armv8-timer\";",
            "#address-cells = <0x02>;",
        ] {
            assert!(dts.contains(needle), "{name}: missing `{needle}` in\n{dts}");
        }
        match name {
            "v3" => {
                assert!(dts.contains("compatible = \"arm,gic-v3\";"), "{dts}");
                assert!(dts.contains("stdout-path = \"/pl011@9000000\";"), "{dts}");
                assert!(
                    dts.contains("linux,initrd-start = <0x00 0x50000000>;"),
                    "{dts}"
                );
            }
            _ => {
                assert!(
                    dts.contains("compatible = \"arm,cortex-a15-gic\";"),
                    "{dts}"
                );
                assert!(dts.contains("compatible = \"ns16550a\";"), "{dts}");
            }
        }
    }
}

fn la_spec(ram_size: u64, initrd: Option<(u64, u64)>) -> LoongArchDtbSpec<'static> {
    LoongArchDtbSpec {
        ram_size,
        vcpus: 3,
        bootargs: "console=ttyS0 earlycon",
        initrd,
        virtio: &[(0x1600_0000, 0x200, 16)],
    }
}

fn regs(node: &fdt::node::FdtNode) -> Vec<(u64, u64)> {
    node.reg()
        .unwrap()
        .map(|r| (r.starting_address as u64, r.size.unwrap() as u64))
        .collect()
}

#[test]
fn loongarch_guest_tree_round_trips_through_fdt_crate() {
    let blob = guest_dtb_loongarch(&la_spec(128 * MB, Some((0x20_0000, 0x30_0000))));
    let fdt = fdt::Fdt::new(&blob).expect("valid FDT");
    let root = fdt.find_node("/").unwrap();
    let compat: Vec<_> = root.compatible().unwrap().all().collect();
    assert_eq!(
        compat,
        ["kestrel,guest-loongarch64", "linux,dummy-loongson3"]
    );
    assert_eq!(root.property("#address-cells").unwrap().as_usize(), Some(2));
    assert_eq!(root.property("#size-cells").unwrap().as_usize(), Some(2));

    // 128 MiB: all of it below the device window.
    let mem = fdt.find_node("/memory@0").unwrap();
    assert_eq!(
        mem.property("device_type").unwrap().as_str(),
        Some("memory")
    );
    assert_eq!(regs(&mem), [(0, 128 * MB)]);

    let cpus: Vec<_> = fdt.cpus().collect();
    assert_eq!(cpus.len(), 3);
    for (i, cpu) in cpus.iter().enumerate() {
        assert_eq!(cpu.ids().first(), i);
        assert_eq!(cpu.property("device_type").unwrap().as_str(), Some("cpu"));
        assert_eq!(
            cpu.property("compatible").unwrap().as_str(),
            Some("loongson,la464")
        );
    }

    let serial = fdt.find_node("/serial@1fe001e0").unwrap();
    assert_eq!(
        serial.property("compatible").unwrap().as_str(),
        Some("ns16550a")
    );
    assert_eq!(regs(&serial), [(0x1fe0_01e0, 0x100)]);

    // The serial's interrupt: PCH-PIC line 2, level high; the chain up to
    // the CPU's controller, as Linux's bindings describe it.
    let u32p = |n: &fdt::node::FdtNode, p: &str| n.property(p).unwrap().as_usize().unwrap() as u32;
    let cells = |n: &fdt::node::FdtNode, p: &str| -> Vec<u32> {
        n.property(p)
            .unwrap()
            .value
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    };
    let pch = fdt.find_node("/platic@10000000").unwrap();
    let eio = fdt.find_node("/eiointc@1400").unwrap();
    let cpuic = fdt.find_node("/cpuic").unwrap();
    assert_eq!(u32p(&serial, "interrupt-parent"), u32p(&pch, "phandle"));
    assert_eq!(cells(&serial, "interrupts"), [2, 4]);
    assert_eq!(
        pch.property("compatible").unwrap().as_str(),
        Some("loongson,pch-pic-1.0")
    );
    assert_eq!(regs(&pch), [(0x1000_0000, 0x400)]);
    assert_eq!(u32p(&pch, "#interrupt-cells"), 2);
    assert_eq!(u32p(&pch, "loongson,pic-base-vec"), 0);
    assert_eq!(u32p(&pch, "interrupt-parent"), u32p(&eio, "phandle"));
    assert!(pch.property("interrupt-controller").is_some());
    assert_eq!(
        eio.property("compatible").unwrap().as_str(),
        Some("loongson,ls2k2000-eiointc")
    );
    assert_eq!(u32p(&eio, "#interrupt-cells"), 1);
    assert_eq!(u32p(&eio, "interrupt-parent"), u32p(&cpuic, "phandle"));
    assert_eq!(cells(&eio, "interrupts"), [3]);
    assert_eq!(
        cpuic.property("compatible").unwrap().as_str(),
        Some("loongson,cpu-interrupt-controller")
    );
    assert_eq!(u32p(&cpuic, "#interrupt-cells"), 1);
    assert!(cpuic.property("interrupt-parent").is_none());
    assert!(cpuic.property("interrupt-controller").is_some());
    let phandles = [&cpuic, &eio, &pch].map(|n| u32p(n, "phandle"));
    assert!(phandles[0] != phandles[1] && phandles[1] != phandles[2] && phandles[0] != phandles[2]);

    let vio = fdt.find_node("/virtio_mmio@16000000").unwrap();
    assert_eq!(regs(&vio), [(0x1600_0000, 0x200)]);
    assert_eq!(u32p(&vio, "interrupt-parent"), u32p(&pch, "phandle"));
    assert_eq!(cells(&vio, "interrupts"), [16, 4]);

    // The legacy I/O ports: an ISA bridge (named `isa`, as Linux's
    // address translation knows the bus) whose I/O space (first cell bit
    // 0) from port 0 is 16 KiB at 0x1800_0000.
    let isa = fdt.find_node("/isa@18000000").unwrap();
    assert_eq!(isa.property("compatible").unwrap().as_str(), Some("isa"));
    assert_eq!(u32p(&isa, "#address-cells"), 2);
    assert_eq!(u32p(&isa, "#size-cells"), 1);
    assert_eq!(cells(&isa, "ranges"), [1, 0, 0, 0x1800_0000, 0x4000]);
    assert!(isa.property("reg").is_none());

    let off = fdt.find_node("/poweroff").unwrap();
    assert_eq!(regs(&off), [(0x100e_001c, 1)]);
    assert_eq!(off.property("value").unwrap().as_usize(), Some(0x34));

    let chosen = fdt.find_node("/chosen").unwrap();
    assert_eq!(
        chosen.property("bootargs").unwrap().as_str(),
        Some("console=ttyS0 earlycon")
    );
    assert_eq!(
        chosen.property("stdout-path").unwrap().as_str(),
        Some("/serial@1fe001e0")
    );
    let start = chosen.property("linux,initrd-start").unwrap().value;
    let end = chosen.property("linux,initrd-end").unwrap().value;
    assert_eq!((be64(start), be64(end)), (0x20_0000, 0x30_0000));
}

#[test]
fn loongarch_ram_beyond_the_device_window_and_high_initrd() {
    // 512 MiB: 256 MiB at 0, the rest at 0x8000_0000; an initrd in the
    // high part is given at its guest physical address.
    let lo = crate::guest::loongarch::layout::LOW_RAM;
    let blob = guest_dtb_loongarch(&la_spec(512 * MB, Some((lo + MB, lo + 3 * MB))));
    let fdt = fdt::Fdt::new(&blob).expect("valid FDT");
    let mem = fdt.find_node("/memory@0").unwrap();
    assert_eq!(regs(&mem), [(0, 256 * MB), (0x8000_0000, 256 * MB)]);
    let chosen = fdt.find_node("/chosen").unwrap();
    let start = chosen.property("linux,initrd-start").unwrap().value;
    let end = chosen.property("linux,initrd-end").unwrap().value;
    assert_eq!(
        (be64(start), be64(end)),
        (0x8000_0000 + MB, 0x8000_0000 + 3 * MB)
    );
    // No initrd: no initrd properties.
    let blob = guest_dtb_loongarch(&la_spec(64 * MB, None));
    let fdt = fdt::Fdt::new(&blob).unwrap();
    let chosen = fdt.find_node("/chosen").unwrap();
    assert!(chosen.property("linux,initrd-start").is_none());
}

#[test]
fn virtio_transports_are_described() {
    let spec = GuestDtbSpec {
        virtio: vec![(0x0a00_0000, 0x200, 16), (0x0a00_0200, 0x200, 17)],
        ..spec_v3()
    };
    let blob = guest_dtb_arm64(&spec);
    let fdt = fdt::Fdt::new(&blob).expect("valid FDT");
    let nodes: Vec<_> = fdt.find_all_nodes("/virtio_mmio").collect();
    assert_eq!(nodes.len(), 2);
    for (n, (base, spi)) in nodes
        .iter()
        .zip([(0x0a00_0000u64, 16u32), (0x0a00_0200, 17)])
    {
        assert_eq!(n.compatible().unwrap().first(), "virtio,mmio");
        let r = n.reg().unwrap().next().unwrap();
        assert_eq!((r.starting_address as u64, r.size), (base, Some(0x200)));
        let irq = be32(n.property("interrupts").unwrap().value);
        assert_eq!(irq, [0, spi, 4]);
        assert!(n.property("dma-coherent").is_some());
    }
}

#[test]
fn reserved_ram_is_described_no_map() {
    let top = 0x4000_0000 + 512 * MB;
    let spec = GuestDtbSpec {
        reserved: vec![(top - 0x1_0000, 0x1_0000)],
        ..spec_v3()
    };
    let blob = guest_dtb_arm64(&spec);
    let fdt = fdt::Fdt::new(&blob).expect("valid FDT");
    let rm = fdt.find_node("/reserved-memory").unwrap();
    assert!(rm.property("ranges").is_some());
    let n = fdt
        .find_node(&format!("/reserved-memory/pv-time@{:x}", top - 0x1_0000))
        .unwrap();
    let r = n.reg().unwrap().next().unwrap();
    assert_eq!(
        (r.starting_address as u64, r.size),
        (top - 0x1_0000, Some(0x1_0000))
    );
    assert!(n.property("no-map").is_some());
    // Without reservations, no node.
    let blob = guest_dtb_arm64(&spec_v3());
    let fdt = fdt::Fdt::new(&blob).unwrap();
    assert!(fdt.find_node("/reserved-memory").is_none());
}
