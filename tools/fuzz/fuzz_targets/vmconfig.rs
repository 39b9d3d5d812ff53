//! Package -> `vmconfig::plan`: the boot-time reader of the packed VMs.
//! Every VM it accepts fits the host (memory granted in total no more than
//! the host has, pinned pCPUs online and, pinned exclusively, owned once, images inside the VM's
//! RAM, entry inside the kernel), and its generated guest DTB reads back.
#![no_main]

use arbitrary::Unstructured;
use kernel::host::board::Arch;
use kernel::vmm::vmconfig::{plan, DtbSource, HostLimits};
use kestrel_abi::package::*;
use libfuzzer_sys::fuzz_target;

fn check(pkg: &[u8], host: HostLimits) {
    let Ok(vms) = plan(pkg, host) else { return };
    let mut granted = 0u64;
    let mut owned = 0u64;
    for s in vms.into_iter().flatten() {
        granted = granted
            .checked_add(s.ram_size)
            .expect("granted memory overflows");
        assert!(
            granted <= host.guest_memory,
            "more memory granted than the host has"
        );
        let end = s
            .ram_base
            .checked_add(s.ram_size)
            .expect("RAM end overflows");
        let within = |gpa: u64, len: u64| {
            gpa >= s.ram_base && gpa.checked_add(len).is_some_and(|e| e <= end)
        };
        assert!(within(s.kernel_gpa, s.kernel.len() as u64));
        assert!(s.entry_gpa >= s.kernel_gpa);
        assert!(within(s.dtb_gpa, DTB_SLOT));
        if let Some(i) = s.initrd {
            assert!(within(s.initrd_gpa, i.len() as u64));
            assert!(s.initrd_gpa >= s.kernel_gpa + s.kernel.len() as u64);
            assert!(s.initrd_gpa + i.len() as u64 <= s.dtb_gpa);
        }
        for v in 0..s.vcpus {
            if let Some(cpu) = s.affinity.pinned_cpu(v) {
                assert!(cpu < host.online_cpus, "pinned to an offline pCPU");
                // Only exclusive pinning owns a pCPU (`exclusive = false`
                // shares it).
                if !s.affinity.shared {
                    assert!(owned & 1 << cpu == 0, "pCPU {cpu} pinned twice");
                    owned |= 1 << cpu;
                }
            }
        }
        if host.arch == Arch::Aarch64 && s.dtb == DtbSource::Generate && s.vcpus > 0 {
            for v3 in [true, false] {
                let dtb = s.guest_dtb(v3);
                let t = fdt::Fdt::new(&dtb).expect("generated DTB reads back");
                let m = t.memory().regions().next().expect("memory");
                assert_eq!(m.starting_address as u64, s.ram_base);
                assert_eq!(m.size.map(|x| x as u64), Some(s.ram_size));
                assert_eq!(t.chosen().bootargs().unwrap_or(""), s.cmdline);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(arch), Ok(online), Ok(mem), Ok(mode)) = (
        u.arbitrary::<bool>(),
        u.int_in_range(1u32..=16),
        u.arbitrary::<u64>(),
        u.arbitrary::<u8>(),
    ) else {
        return;
    };
    let host = HostLimits {
        arch: if arch {
            Arch::Aarch64
        } else {
            Arch::LoongArch64
        },
        online_cpus: online,
        guest_memory: mem,
    };
    if mode % 2 == 0 {
        check(u.take_rest(), host);
        return;
    }
    // A well-formed package of fuzzed VMs (the writer lays them out).
    let kernel = [0x5au8; 3000];
    let mut w = Writer::new(HypervisorSettings::default());
    let names = ["a", "b", "c", "d", "e", "f"];
    for name in names {
        let Ok(more) = u.arbitrary::<bool>() else {
            break;
        };
        if !more {
            break;
        }
        let (Ok(memory), Ok(vcpus), Ok(mask), Ok(pinned), Ok(kind), Ok(initrd), Ok(load)) = (
            u.arbitrary::<u64>(),
            u.int_in_range(0u16..=17),
            u.arbitrary::<u64>(),
            u.arbitrary::<bool>(),
            u.int_in_range(1u8..=4),
            u.int_in_range(0usize..=3000),
            u.arbitrary::<u64>(),
        ) else {
            break;
        };
        w.vms.push(VmInput {
            name,
            memory: memory & !(MEMORY_ALIGN - 1),
            vcpus,
            affinity: Affinity {
                mask,
                pinned,
                // Shared when the mask names an odd number of pCPUs: some
                // pinned VMs of each kind.
                shared: pinned && mask.count_ones() % 2 == 1,
            },
            kind: GuestKind::from_u8(kind).unwrap(),
            console: ConsoleKind::Pl011,
            kernel: &kernel,
            initrd: (initrd > 0).then(|| &kernel[..initrd]),
            dtb: None,
            cmdline: "console=ttyAMA0",
            load_offset: load & !0xfff,
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
        });
    }
    check(&w.finish(), host);
});
