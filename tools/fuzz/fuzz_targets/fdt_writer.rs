//! The generated arm64 guest device tree, read back by the `fdt` crate
//! (what a guest's parser sees) and by kestrel's own reader: the RAM
//! range, one CPU per vCPU with its MPIDR, the GIC frames, the console
//! UART, the virtio-mmio transports, /chosen bootargs and initrd, for any
//! spec.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::host::board::{Arch, IrqChip};
use kernel::vmm::fdt_build::{guest_dtb_arm64, vcpu_mpidr, GuestDtbSpec, GuestGic, GuestUart};
use kestrel_abi::package::ConsoleKind;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Spec {
    ram_base: u64,
    ram_size: u64,
    vcpus: u8,
    v3: bool,
    dist: (u64, u64),
    other: (u64, u64),
    uart_base: u64,
    uart_spi: u16,
    bootargs: String,
    initrd: Option<(u64, u64)>,
    virtio: Vec<(u64, u64, u16)>,
}

fn run(s: &Spec) {
    let bootargs: String = s.bootargs.chars().filter(|&c| c != '\0').collect();
    let gic = if s.v3 {
        GuestGic::V3 {
            dist: s.dist,
            redist: s.other,
        }
    } else {
        GuestGic::V2 {
            dist: s.dist,
            cpu: s.other,
        }
    };
    let spec = GuestDtbSpec {
        ram_base: s.ram_base,
        ram_size: s.ram_size,
        vcpus: u16::from(s.vcpus % 65).max(1),
        gic,
        uart: GuestUart {
            kind: ConsoleKind::Pl011,
            base: s.uart_base,
            size: 0x1000,
            spi: u32::from(s.uart_spi % 988),
        },
        bootargs: &bootargs,
        initrd: s.initrd,
        virtio: s
            .virtio
            .iter()
            .take(16)
            .map(|&(b, l, spi)| (b, l, u32::from(spi % 988)))
            .collect(),
        passthrough: Vec::new(),
        reserved: Vec::new(),
    };
    let blob = guest_dtb_arm64(&spec);
    let f = fdt::Fdt::new(&blob).expect("the fdt crate reads the generated tree");
    let m = f.memory().regions().next().expect("a memory range");
    assert_eq!(m.starting_address as u64, spec.ram_base);
    assert_eq!(m.size.map(|x| x as u64), Some(spec.ram_size));
    let cpus: Vec<u64> = f.cpus().map(|c| c.ids().first() as u64).collect();
    let want: Vec<u64> = (0..spec.vcpus).map(vcpu_mpidr).collect();
    assert_eq!(cpus, want);
    let virtio = f.find_all_nodes("/virtio_mmio").count();
    assert_eq!(virtio, spec.virtio.len());
    let chosen = f.chosen();
    assert_eq!(chosen.bootargs().unwrap_or(""), bootargs);
    let prop = |n: &str| {
        f.find_node("/chosen")
            .and_then(|c| c.property(n))
            .and_then(|p| p.as_usize())
            .map(|v| v as u64)
    };
    match spec.initrd {
        Some((start, end)) => {
            assert_eq!(prop("linux,initrd-start"), Some(start));
            assert_eq!(prop("linux,initrd-end"), Some(end));
        }
        None => assert_eq!(prop("linux,initrd-start"), None),
    }
    let uart = f.find_compatible(&["arm,pl011"]).expect("the console");
    assert_eq!(
        uart.reg().unwrap().next().unwrap().starting_address as u64,
        spec.uart.base
    );

    // kestrel's own reader agrees.
    let b = kernel::host::dtb::parse(&blob, Arch::Aarch64).expect("kestrel reads its own tree");
    assert_eq!(b.memory_bytes(), spec.ram_size);
    assert_eq!(b.cpus.len(), usize::from(spec.vcpus).min(kernel::MAX_CPUS));
    assert_eq!(
        b.cmdline.as_str(),
        kernel::host::board::bounded::<256>(&bootargs).as_str()
    );
    assert_eq!(b.uart.map(|u| u.base), Some(spec.uart.base));
    match (b.irqchip, gic) {
        (
            IrqChip::GicV3 {
                gicd,
                gicr,
                gicr_size,
            },
            GuestGic::V3 { dist, redist },
        ) => {
            assert_eq!((gicd, gicr, gicr_size), (dist.0, redist.0, redist.1));
        }
        (IrqChip::GicV2 { gicd, gicc, .. }, GuestGic::V2 { dist, cpu }) => {
            assert_eq!((gicd, gicc), (dist.0, cpu.0));
        }
        (got, want) => panic!("GIC {got:?} for {want:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = Unstructured::new(data).arbitrary::<Spec>() {
        // A VM's RAM never wraps the address space (vmconfig refuses it).
        if s.ram_size > 0 && s.ram_base.checked_add(s.ram_size).is_some() {
            run(&s);
        }
    }
});
