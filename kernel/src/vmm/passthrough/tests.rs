use super::*;
use crate::host::board::Arch;

/// QEMU 10 `virt,gic-version=3` with one `-device virtio-blk-device`
/// (slot 31: 0x0a003e00, SPI 47, edge).
const HOST: &[u8] = include_bytes!("../../../tests/fixtures/qemu-v3-virtio-blk.dtb");

fn pt(base: u64, size: u64, spis: &[u32]) -> Passthrough {
    Passthrough::new(base, size, spis)
}

#[test]
fn qemu_virtio_slot_31_is_found_and_its_spi_moved() {
    let p = pt(0x0a00_3000, 0x1000, &[47]);
    let r = routes([p].into_iter());
    assert_eq!(r, [(47, GUEST_FIRST_SPI)]);
    let (nodes, fwd) = host_devices(HOST, &p, &r).unwrap();
    // Only slot 31 is described: slots 24-30 share the page, their SPIs
    // are not passed.
    assert_eq!(nodes.len(), 1);
    let n = &nodes[0];
    assert_eq!(n.name, "virtio_mmio@a003e00");
    assert_eq!(n.compatible, b"virtio,mmio\0");
    assert_eq!(n.reg, [(0x0a00_3e00, 0x200)]);
    assert_eq!(n.interrupts, [(GUEST_FIRST_SPI, 1)]);
    assert!(n.dma_coherent);
    assert_eq!(
        fwd,
        [SpiRoute {
            host: 47,
            guest: GUEST_FIRST_SPI,
            edge: true
        }]
    );
    // The guest DTB carries it.
    let spec = crate::vmm::fdt_build::GuestDtbSpec {
        ram_base: 0x4000_0000,
        ram_size: 64 << 20,
        vcpus: 1,
        gic: crate::vmm::fdt_build::GuestGic::V3 {
            dist: (0x0800_0000, 0x1_0000),
            redist: (0x080A_0000, 0xF6_0000),
        },
        uart: crate::vmm::fdt_build::GuestUart {
            kind: kestrel_abi::package::ConsoleKind::Pl011,
            base: 0x0900_0000,
            size: 0x1000,
            spi: 1,
        },
        bootargs: "",
        initrd: None,
        virtio: Vec::new(),
        passthrough: nodes,
        reserved: Vec::new(),
    };
    let blob = crate::vmm::fdt_build::guest_dtb_arm64(&spec);
    let t = Tree::new(&blob).unwrap();
    let node = t.find("/virtio_mmio@a003e00").unwrap();
    assert_eq!(
        node.reg().unwrap().collect::<Vec<_>>(),
        [(0x0a00_3e00, 0x200)]
    );
    assert_eq!(
        node.prop("interrupts").unwrap(),
        [0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 1]
    );
}

#[test]
fn a_region_without_the_device_or_its_spi_is_refused() {
    let cases: &[(Passthrough, &str)] = &[
        // The page of slots 16-23: their SPIs are not the ones listed.
        (pt(0x0a00_2000, 0x1000, &[47]), "no device"),
        // No device at all there.
        (pt(0x2000_0000, 0x1000, &[]), "no device"),
        // Slot 31 and a second SPI no device in the page has.
        (pt(0x0a00_3000, 0x1000, &[47, 100]), "SPI 100 is not"),
        // Half of the PL011's page is not enough... (0x09000000, 4 KiB)
        (pt(0x0900_0000, 0x1000, &[]), "no device"),
    ];
    for (p, needle) in cases {
        let r = routes([*p].into_iter());
        let e = host_devices(HOST, p, &r).unwrap_err();
        assert!(e.contains(needle), "{p:?}: {e}");
    }
    // A region cutting a device in two.
    let p = pt(0x0900_0000, 0x1000, &[1]);
    assert!(host_devices(HOST, &p, &routes([p].into_iter())).is_ok());
    let p = pt(0x0a00_3000, 0x1000, &[46, 47]);
    let (nodes, fwd) = host_devices(HOST, &p, &routes([p].into_iter())).unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(fwd.len(), 2);
    let gic = pt(0x0800_0000, 0x1000, &[]);
    let e = host_devices(HOST, &gic, &[]).unwrap_err();
    assert!(e.contains("reaches outside"), "{e}");
    assert!(host_devices(&[0u8; 64], &p, &[])
        .unwrap_err()
        .contains("host device tree"));
}

#[test]
fn host_ram_gic_and_uart_are_never_passed() {
    let board = crate::host::dtb::parse(HOST, Arch::Aarch64).unwrap();
    assert!(host_clash(&board, &pt(0x4000_0000, 0x1000, &[]))
        .unwrap()
        .contains("RAM"));
    assert!(host_clash(&board, &pt(0x0800_0000, 0x1000, &[]))
        .unwrap()
        .contains("GIC"));
    assert!(host_clash(&board, &pt(0x080a_0000, 0x1000, &[]))
        .unwrap()
        .contains("GIC"));
    assert!(host_clash(&board, &pt(0x0900_0000, 0x1000, &[]))
        .unwrap()
        .contains("UART"));
    assert_eq!(host_clash(&board, &pt(0x0a00_3000, 0x1000, &[47])), None);
}

#[test]
fn a_region_or_spi_has_one_owner() {
    let mut c = Claims::new();
    c.claim(0, &[pt(0x0a00_3000, 0x1000, &[47])]).unwrap();
    let e = c.claim(1, &[pt(0x0a00_3000, 0x2000, &[])]).unwrap_err();
    assert!(e.contains("already given to vm[0]"), "{e}");
    let e = c.claim(1, &[pt(0x0a00_5000, 0x1000, &[47])]).unwrap_err();
    assert!(e.contains("SPI 47"), "{e}");
    // A refused claim takes nothing.
    let e = c
        .claim(
            2,
            &[pt(0x0a00_6000, 0x1000, &[50]), pt(0x0a00_6000, 0x1000, &[])],
        )
        .unwrap_err();
    assert!(e.contains("vm[2]"), "{e}");
    c.claim(3, &[pt(0x0a00_6000, 0x1000, &[50])]).unwrap();
}

#[test]
fn guest_spis_follow_config_order() {
    let r = routes([pt(0x1000, 0x1000, &[5, 9]), pt(0x3000, 0x1000, &[7])].into_iter());
    assert_eq!(r, [(5, 32), (9, 33), (7, 34)]);
    assert!(GUEST_FIRST_SPI as usize + MAX_ROUTES <= GUEST_NR_SPIS);
}
