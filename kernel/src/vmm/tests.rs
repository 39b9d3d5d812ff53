//! VM creation with a fake backend: affinity and pinning, refusals, the
//! console, RAM accounting, publishing.

use super::*;
use crate::host::board::{Arch, Backend as BoardBackend, CpuDesc, IrqChip, MemRegion};
use crate::mem::frames::FRAME;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{DeviceWork, RunExit, Vcpu};
use crate::vmm::vmconfig::DtbSource;
use kestrel_abi::package::{Affinity, ConsoleKind, GuestKind};
use std::sync::Mutex as StdMutex;

/// Builds VMs that hold their RAM frames; refuses a VM named "bad".
struct Fake {
    built: StdMutex<Vec<String>>,
}

impl DeviceWork for Fake {}

impl Backend for Fake {
    type VmState = Vec<u64>;
    type VcpuState = usize;
    fn load(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut usize) {}
    fn run(&self, _: &mut ExitCtx<'_, Self>, _: &mut usize) -> RunExit {
        RunExit::VmEnd(VmEnd::PowerOff)
    }
    fn put(&self, _: usize, _: &Vm<Self>, _: &Vcpu<Self>, _: &mut usize) {}
    fn kick(&self, _: usize) {}
    fn idle(&self, _: &Hypervisor<Self>, _: usize) {}
    fn slice_expired(&self, _: usize) -> bool {
        false
    }
    fn slice_start(&self, _: usize) {}
    fn now(&self) -> u64 {
        0
    }
}

impl Machine for Fake {
    fn guest_memory(&self, board: &BoardInfo) -> FramePool {
        FramePool::from_board(&board.memory, &[], u64::MAX)
    }
    fn build_vm(
        &self,
        _: &BoardInfo,
        spec: &VmSpec<'static>,
        ram: &mut FramePool,
        _: &Arc<Stats>,
    ) -> Result<Built<Self>, String> {
        if spec.name == "bad" {
            return Err(String::from("kind: not for this machine"));
        }
        let ram = ram.alloc_ram(spec.ram_size)?;
        self.built.lock().unwrap().push(spec.name.into());
        Ok(Built {
            arch: ram.frames,
            vcpus: (0..spec.vcpus as usize).collect(),
            entry: spec.entry_gpa,
            dtb: spec.dtb_gpa,
            bus: crate::dev::vdev::bus::Bus::new(),
            virtio: Default::default(),
            pv_time: None,
        })
    }
    fn init_cpu(&self, _: &Hypervisor<Self>, _: usize) {}
    fn leave_cpu(&self, _: usize) {}
}

fn board(mem_mb: u64) -> BoardInfo {
    BoardInfo {
        arch: Arch::Aarch64,
        model: crate::host::board::bounded("fake"),
        memory: [MemRegion {
            base: 0x4000_0000,
            size: mem_mb << 20,
        }]
        .into_iter()
        .collect(),
        cpus: (0..4).map(|i| CpuDesc { hw_id: i }).collect(),
        cpus_ignored: 0,
        irqchip: IrqChip::LoongArchEiointc,
        uart: None,
        timer_hz: 1,
        psci: None,
        backend: BoardBackend::El2,
        cmdline: crate::host::board::bounded(""),
        warnings: heapless::Vec::new(),
        module: None,
    }
}

fn spec(name: &'static str, vcpus: u16, mask: u64, pinned: bool) -> VmSpec<'static> {
    VmSpec {
        index: 0,
        name,
        vcpus,
        affinity: Affinity {
            mask,
            pinned,
            shared: false,
        },
        kind: GuestKind::TestRaw,
        console: ConsoleKind::Pl011,
        ram_base: 0x4000_0000,
        ram_size: 4 << 20,
        kernel: &[],
        kernel_gpa: 0x4000_0000,
        entry_gpa: 0x4000_0000,
        initrd: None,
        initrd_gpa: 0,
        dtb: DtbSource::Generate,
        dtb_gpa: 0x4010_0000,
        cmdline: "",
        virtio_console: false,
        on_reboot: crate::vmm::vmconfig::OnReboot::Restart,
        devices: kestrel_abi::package::Devices::NONE,
        passthrough: kestrel_abi::package::Passthroughs::NONE,
        identity: false,
        pv_ipi: true,
        pv_time: false,
        sve_vl: 0,
    }
}

fn masks(hv: &Hypervisor<Fake>, vm: usize) -> Vec<Option<CpuMask>> {
    hv.created()[vm]
        .vcpus
        .iter()
        .map(|v| hv.sched.affinity(v.key))
        .collect()
}

#[test]
fn fp_policy_defaults_to_lazy_without_a_package() {
    assert_eq!(fp_policy(&[]), FpPolicy::Lazy);
    assert_eq!(fp_policy(b"not a package"), FpPolicy::Lazy);
}

#[test]
fn online_mask_lists_online_cpus_up_to_the_limit() {
    assert_eq!(online_cpus(4, |i| i != 2), CpuMask(0b1011));
    assert_eq!(online_cpus(64, |_| true), CpuMask::first(MAX_CPUS));
}

#[test]
fn affinity_cuts_to_online_and_skips_pinned_cpus() {
    let online = CpuMask(0b0111);
    let s = spec("a", 1, 0b1100, false);
    assert_eq!(affinity(&s, online, CpuMask(0)), Ok(CpuMask(0b0100)));
    let any = spec("b", 1, 0, false);
    assert_eq!(affinity(&any, online, CpuMask(0b0011)), Ok(CpuMask(0b0100)));
    assert_eq!(
        affinity(&any, online, CpuMask(0b0111)),
        Err(String::from("cpus: no online pCPU left for this VM"))
    );
    let off = spec("c", 1, 0b1000, false);
    assert!(affinity(&off, online, CpuMask(0)).is_err());
}

#[test]
fn a_shared_pinned_vm_leaves_its_cpus_to_the_others() {
    let b = board(16);
    let backend = Fake {
        built: StdMutex::new(Vec::new()),
    };
    let online = CpuMask(0b1111);
    let hv = Hypervisor::new(backend, online);
    let mut ram = hv.backend.guest_memory(&b);
    let mux = Mutex::new(ConsoleMux::new());
    let mut specs = [spec("a32", 2, 0b0011, true), spec("a64", 2, 0, false)];
    specs[0].affinity.shared = true;
    specs[1].index = 1;
    assert_eq!(create_vms(&hv, &b, &specs, online, &mut ram, &mux), 2);
    // Pinned: vCPU i still never leaves the i-th CPU of the mask.
    assert_eq!(
        masks(&hv, 0),
        [Some(CpuMask(0b0001)), Some(CpuMask(0b0010))]
    );
    // But the VM without a mask gets every online CPU, those included.
    assert_eq!(masks(&hv, 1), [Some(CpuMask(0b1111)); 2]);
}

#[test]
fn vms_are_created_in_order_pinned_ones_own_their_cpus_and_refusals_are_skipped() {
    let b = board(16);
    let backend = Fake {
        built: StdMutex::new(Vec::new()),
    };
    let online = CpuMask(0b1111);
    let hv = Hypervisor::new(backend, online);
    let mut ram = hv.backend.guest_memory(&b);
    assert_eq!(ram.free_bytes(), 16 << 20);
    let mux = Mutex::new(ConsoleMux::new());
    let specs = [
        spec("pinned", 2, 0b0011, true),
        spec("bad", 1, 0, false),
        spec("shared", 2, 0, false),
        spec("huge", 1, 0, false),
        spec("last", 1, 0b0001, false),
    ];
    let mut specs = specs;
    specs[3].ram_size = 64 << 20;
    for (i, s) in specs.iter_mut().enumerate() {
        s.index = i;
    }
    let n = create_vms(&hv, &b, &specs, online, &mut ram, &mux);
    assert_eq!(n, 3);
    let names: Vec<_> = hv.created().iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["pinned", "shared", "last"]);
    // Slots follow creation, refused VMs leave no gap.
    assert_eq!(hv.created()[1].slot, 1);
    // Pinned: vCPU i on the i-th CPU of the mask.
    assert_eq!(
        masks(&hv, 0),
        [Some(CpuMask(0b0001)), Some(CpuMask(0b0010))]
    );
    // Unpinned without a mask: the online CPUs nobody pinned.
    assert_eq!(masks(&hv, 1), [Some(CpuMask(0b1100)); 2]);
    // An explicit mask may share a pinned CPU.
    assert_eq!(masks(&hv, 2), [Some(CpuMask(0b0001))]);
    // RAM: three VMs of 4 MiB; "huge" took nothing.
    assert_eq!(ram.free_bytes(), 4 << 20);
    assert_eq!(hv.created()[0].arch.len() as u64, (4 << 20) / FRAME);
    // Each created VM has a console, in slot order.
    assert_eq!(mux.lock().add_vm("next"), 3);
}

#[test]
fn the_observer_flushes_the_console_and_tells_the_backend() {
    let b = board(8);
    let online = CpuMask(0b1);
    let hv = Hypervisor::new(
        Fake {
            built: StdMutex::new(Vec::new()),
        },
        online,
    );
    let mut ram = hv.backend.guest_memory(&b);
    let mux = Mutex::new(ConsoleMux::new());
    assert_eq!(
        create_vms(&hv, &b, &[spec("a", 1, 0, false)], online, &mut ram, &mux),
        1
    );
    mux.lock().output(0, b'x');
    let obs = LogObserver {
        hv: &hv,
        console: &mux,
    };
    hv.run_cpu(0, &obs);
    assert!(hv.all_ended());
    assert_eq!(hv.exit_status(), ExitStatus::Success);
    // The partial line was flushed at the VM's end.
    assert_eq!(mux.lock().flush(0), None);
    obs.vm_ended("unknown", &VmEnd::PowerOff);
}
