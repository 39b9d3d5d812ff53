//! The VM package: arbitrary bytes never panic the reader and every record
//! it accepts lies inside the package; VMs written by the writer read back
//! field for field, and the reader accepts exactly the VMs the format's
//! rules allow.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kestrel_abi::package::*;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Vm {
    name_len: u8,
    name_seed: u64,
    memory_2m: u16,
    memory_odd: bool,
    vcpus: u16,
    mask: u64,
    pinned: bool,
    kind: u8,
    console: u8,
    kernel_len: u16,
    initrd_len: u16,
    dtb_len: u8,
    cmdline: Vec<u8>,
    load_offset: u64,
    entry_offset: u64,
    footprint: u32,
    /// Bit 0: virtio console, 1: stop on reboot, 2: PV IPI hidden, 3: PV
    /// time hidden, 4: SVE, 5: pinned but shared (only with `pinned`).
    flags: u8,
}

fn name(len: u8, seed: u64) -> String {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_-";
    let len = 1 + len as usize % NAME_LEN;
    (0..len)
        .map(|i| A[(seed.rotate_left(i as u32 * 5) as usize).wrapping_add(i) % A.len()] as char)
        .collect()
}

/// What the format's rules say of one VM (independent of the reader).
fn valid(vm: &VmInput, settings: &HypervisorSettings) -> bool {
    let memory_ok = vm.memory != 0 && vm.memory.is_multiple_of(MEMORY_ALIGN);
    let cpus_ok = settings.max_cpus >= 64 || vm.affinity.mask >> settings.max_cpus == 0;
    let pinned_ok = !vm.affinity.pinned || vm.affinity.mask.count_ones() == u32::from(vm.vcpus);
    let footprint = if vm.kernel_footprint == 0 {
        vm.kernel.len() as u64
    } else {
        vm.kernel_footprint
    };
    let layout_ok = GuestLayout::compute(
        vm.memory,
        vm.load_offset,
        footprint,
        vm.initrd.map_or(0, |i| i.len() as u64),
    )
    .is_ok();
    (1..=MAX_VCPUS).contains(&vm.vcpus)
        && memory_ok
        && cpus_ok
        && pinned_ok
        && !vm.kernel.is_empty()
        && vm.dtb.is_none_or(|d| d.len() as u64 <= DTB_SLOT)
        && !vm.cmdline.contains('\0')
        && vm.load_offset < vm.memory
        && footprint >= vm.kernel.len() as u64
        && vm.entry_offset < footprint
        && layout_ok
}

fn round_trip(u: &mut Unstructured) -> arbitrary::Result<()> {
    let settings = HypervisorSettings {
        fp_policy: FpPolicy::from_u8(u.int_in_range(0..=3)?).unwrap(),
        max_cpus: u.int_in_range(1..=64)?,
        tick_hz: u.arbitrary()?,
        console: ConsoleMode::from_u8(u.int_in_range(0..=2)?).unwrap(),
        scrollback: u.int_in_range(0..=MAX_SCROLLBACK)?,
    };
    let vms: Vec<Vm> = (0..u.int_in_range(0..=4)?)
        .map(|_| u.arbitrary())
        .collect::<arbitrary::Result<_>>()?;
    static BLOB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let blob = BLOB.get_or_init(|| (0..=255u8).cycle().take(70_000).collect());
    let names: Vec<String> = vms.iter().map(|v| name(v.name_len, v.name_seed)).collect();
    let cmdlines: Vec<String> = vms
        .iter()
        .map(|v| String::from_utf8_lossy(&v.cmdline).into_owned())
        .collect();
    let inputs: Vec<VmInput> = vms
        .iter()
        .zip(&names)
        .zip(&cmdlines)
        .map(|((v, name), cmdline)| VmInput {
            name,
            memory: u64::from(v.memory_2m) * MEMORY_ALIGN + u64::from(v.memory_odd) * 4096,
            vcpus: v.vcpus % (MAX_VCPUS + 2),
            affinity: Affinity {
                mask: v.mask,
                pinned: v.pinned,
                shared: v.pinned && v.flags & 32 != 0,
            },
            kind: GuestKind::from_u8(1 + v.kind % 4).unwrap(),
            console: ConsoleKind::from_u8(1 + v.console % 2).unwrap(),
            kernel: &blob[..v.kernel_len as usize],
            initrd: (v.initrd_len > 0).then(|| &blob[3..3 + v.initrd_len as usize]),
            dtb: (v.dtb_len > 0).then(|| &blob[7..7 + v.dtb_len as usize]),
            cmdline,
            load_offset: v.load_offset % (64 << 20),
            entry_offset: v.entry_offset % (u64::from(v.kernel_len) + 2),
            kernel_footprint: u64::from(v.footprint % (8 << 20)),
            virtio_console: v.flags & 1 != 0,
            reboot_stop: v.flags & 2 != 0,
            devices: &[],
            passthrough: &[],
            identity: false,
            pv_ipi_hidden: v.flags & 4 != 0,
            pv_time_hidden: v.flags & 8 != 0,
            sve_vl: if v.flags & 16 != 0 { 256 } else { 0 },
        })
        .collect();
    let mut w = Writer::new(settings);
    w.vms = inputs.clone();
    let bytes = w.finish();
    let pkg = Package::parse(&bytes).expect("the writer's package parses");
    assert_eq!(pkg.settings(), settings);
    assert_eq!(pkg.vm_count(), inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let got = pkg.vm(i);
        assert_eq!(
            got.is_ok(),
            valid(input, &settings),
            "vm {i}: {got:?}\n{input:?}"
        );
        let Ok(r) = got else { continue };
        assert_eq!(r.index, i);
        assert_eq!(r.name, input.name);
        assert_eq!(r.memory, input.memory);
        assert_eq!(r.vcpus, input.vcpus);
        assert_eq!(r.affinity, input.affinity);
        assert_eq!(r.kind, input.kind);
        assert_eq!(r.console, input.console);
        assert_eq!(r.kernel, input.kernel);
        assert_eq!(r.initrd, input.initrd);
        assert_eq!(r.dtb, input.dtb);
        assert_eq!(r.cmdline, input.cmdline);
        assert_eq!(r.load_offset, input.load_offset);
        assert_eq!(r.entry_offset, input.entry_offset);
        let l = r.layout;
        assert!(l.kernel + l.kernel_size <= l.initrd || r.initrd.is_none());
        assert!(l.dtb + DTB_SLOT <= r.memory);
        assert!(l.initrd + l.initrd_size <= l.dtb);
    }
    Ok(())
}

fn hostile(data: &[u8]) {
    let Ok(pkg) = Package::parse(data) else {
        return;
    };
    let _ = pkg.settings();
    for r in pkg.vms().flatten() {
        for s in [Some(r.kernel), r.initrd, r.dtb].into_iter().flatten() {
            let p = s.as_ptr() as usize;
            let base = data.as_ptr() as usize;
            assert!(p >= base && p + s.len() <= base + data.len());
        }
        assert!((1..=MAX_VCPUS).contains(&r.vcpus));
        assert!(!r.affinity.shared || r.affinity.pinned);
        assert!(r.memory.is_multiple_of(MEMORY_ALIGN) && r.memory > 0);
        assert!(r.layout.dtb + DTB_SLOT <= r.memory);
        assert!(parse_name(&{
            let mut n = [0u8; NAME_LEN];
            n[..r.name.len()].copy_from_slice(r.name.as_bytes());
            n
        })
        .is_some());
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((0, rest)) => hostile(rest),
        Some((1, rest)) => {
            // A writer's package with fuzzed bytes patched in, resealed so
            // the checksums do not hide the fields from the reader.
            let mut u = Unstructured::new(rest);
            let Ok(n) = u.int_in_range(0..=3) else { return };
            let mut w = Writer::new(HypervisorSettings::default());
            let k = [1u8; 5000];
            for i in 0..n {
                w.vms.push(VmInput {
                    name: ["a", "b", "c", "d"][i],
                    memory: 64 << 20,
                    vcpus: 1,
                    affinity: Affinity {
                        mask: 0,
                        pinned: false,
                        shared: false,
                    },
                    kind: GuestKind::TestRaw,
                    console: ConsoleKind::Pl011,
                    kernel: &k,
                    initrd: Some(&k[..100]),
                    dtb: None,
                    cmdline: "x",
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
                });
            }
            let mut bytes = w.finish();
            for p in u.take_rest().chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([p[0], p[1]])) % bytes.len();
                bytes[at] = p[2];
            }
            reseal(&mut bytes);
            hostile(&bytes);
        }
        Some((_, rest)) => {
            let _ = round_trip(&mut Unstructured::new(rest));
        }
        None => {}
    }
});
