//! What every backend shares around running VMs, written once: creating
//! the VMs from the image's specs (FP policy, online pCPUs, affinity and
//! pinning, the console, the "created"/"refused" lines), guest RAM, the
//! console multiplexer, the log observer, and each pCPU's way into its run
//! loop. A backend adds to [`Backend`] only what is architectural
//! ([`Machine::build_vm`]: mapping RAM, loading images, its register
//! state). Which backend runs is chosen in `crate::runtime::backend`.

pub mod console;

pub mod devices;
pub mod fdt_build;
pub mod passthrough;
pub mod termfilter;
pub mod terminal;
pub mod virtio;
pub mod vmconfig;

use crate::base::lock::{Mutex, Once};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use kestrel_abi::package::{self, Package};

use crate::base::conout;
use crate::base::platform::ExitStatus;
use crate::host::board::BoardInfo;
use crate::mem::frames::FramePool;
use crate::vcpu::fpu::FpPolicy;
use crate::vcpu::sched::CpuMask;
use crate::vcpu::stats::{what, Stats, Worst};
use crate::vm::{Backend, Hypervisor, Observer, Vm, VmEnd, VmParts};
use crate::vmm::console::{ConsoleMux, RxPort};
use crate::vmm::devices::{DeviceHost, VmDeviceEnv};
use crate::vmm::terminal::console;
use crate::vmm::vmconfig::VmSpec;
use crate::MAX_CPUS;

/// A VM's architectural parts, as [`Machine::build_vm`] made them.
pub struct Built<B: Backend> {
    pub arch: B::VmState,
    /// Register files of the vCPUs, index order (vCPU 0 reset to boot).
    pub vcpus: Vec<B::VcpuState>,
    /// Guest physical addresses of the boot vCPU's entry and of its DTB
    /// (for the log).
    pub entry: u64,
    pub dtb: u64,
    /// The VM's MMIO bus with its devices.
    pub bus: crate::dev::vdev::bus::Bus,
    /// Its virtio devices (on `bus` too).
    pub virtio: crate::dev::virtio::set::VmVirtio,
    /// Where its vCPUs' stolen-time records are (arm64 PV time), at the
    /// addresses the VM was built at (identity RAM moves them).
    pub pv_time: Option<crate::vcpu::steal::PvTimeRegion>,
}

/// What creating and running VMs needs from a backend beyond [`Backend`].
pub trait Machine: Backend {
    /// The host RAM guests may have on `board` (kestrel's own ranges left out).
    fn guest_memory(&self, board: &BoardInfo) -> FramePool;
    /// Builds the VM of `spec`: checks it suits this machine, takes its RAM
    /// from `ram`, maps it and loads its images. `stats` is the VM's block
    /// (for per-vCPU state that counts into it). An error says why the VM
    /// is refused.
    fn build_vm(
        &self,
        board: &BoardInfo,
        spec: &VmSpec<'static>,
        ram: &mut FramePool,
        stats: &Arc<Stats>,
    ) -> Result<Built<Self>, String>;
    /// Per-pCPU set-up before its run loop.
    fn init_cpu(&self, hv: &Hypervisor<Self>, cpu: usize);
    /// After the run loop, back to the boot flow (which idles with
    /// interrupts on).
    fn leave_cpu(&self, cpu: usize);
    /// A VM has ended (its VMID may be reused: drop what the hardware
    /// caches for it).
    fn vm_ended(&self) {}
}

/// `worst exit N ns (what), worst restart step M ns` for a VM's
/// [`Worst`], in nanoseconds of the counter (guest instructions under
/// `-icount shift=0`); `what` is the arch's exit code (arm64 `EC 0x..`,
/// LoongArch `Ecode 0x..`), `irq`, `devices` or `tlb-refill`
/// (`vcpu::stats::what`).
pub fn worst_line(w: &Worst) -> String {
    let hz = u128::from(crate::base::clock::counter_hz().max(1));
    let ns = |t: u64| (u128::from(t) * 1_000_000_000 / hz) as u64;
    let what = match w.exit_what {
        what::IRQ => String::from("irq"),
        what::DEVICES => String::from("devices"),
        what::TLB_REFILL => String::from("tlb-refill"),
        c if cfg!(target_arch = "loongarch64") => format!("Ecode {c:#x}"),
        c => format!("EC {c:#x}"),
    };
    format!(
        "worst exit {} ns ({what}), worst restart step {} ns",
        ns(w.exit_ticks),
        ns(w.step_ticks)
    )
}

/// The FP switching policy the image's package asks for (lazy by default).
pub fn fp_policy(pkg: &[u8]) -> FpPolicy {
    Package::parse(pkg)
        .map(|p| match p.settings().fp_policy {
            package::FpPolicy::Eager => FpPolicy::Eager,
            package::FpPolicy::SaveOnPut => FpPolicy::SaveOnPut,
            _ => FpPolicy::Lazy,
        })
        .unwrap_or_default()
}

/// The pCPUs (of `cpus`) that came online.
pub fn online_cpus(cpus: usize, online: impl Fn(usize) -> bool) -> CpuMask {
    let mut m = CpuMask::default();
    for i in (0..cpus.min(MAX_CPUS)).filter(|&i| online(i)) {
        m.0 |= 1 << i;
    }
    m
}

/// The pCPUs a VM's vCPUs may run on: its configured mask cut to the online
/// pCPUs, or (no mask) every online pCPU no earlier VM pinned.
pub fn affinity(
    spec: &VmSpec,
    online: CpuMask,
    pinned_elsewhere: CpuMask,
) -> Result<CpuMask, String> {
    let a = if spec.affinity.mask != 0 {
        CpuMask(spec.affinity.mask).and(online)
    } else {
        CpuMask(online.0 & !pinned_elsewhere.0)
    };
    if a.is_empty() {
        return Err(String::from("cpus: no online pCPU left for this VM"));
    }
    Ok(a)
}

/// Creates the VMs of `specs` in `hv`, in order, each on the pCPUs its
/// affinity allows (pinned VMs own theirs), registers each with the console
/// and logs it, or logs why it is refused; then publishes them. Returns how
/// many were created.
pub fn create_vms<B: Machine>(
    hv: &Hypervisor<B>,
    board: &BoardInfo,
    specs: &[VmSpec<'static>],
    online: CpuMask,
    ram: &mut FramePool,
    console: &Mutex<ConsoleMux>,
) -> usize {
    let mut pinned = CpuMask::default();
    let mut created = 0;
    for spec in specs {
        let stats = Arc::new(Stats::new());
        let made = hv.backend.build_vm(board, spec, ram, &stats).and_then(|b| {
            let affinity = affinity(spec, online, pinned)?;
            let (entry, dtb) = (b.entry, b.dtb);
            let vm = hv
                .add_vm(VmParts {
                    name: String::from(spec.name),
                    arch: b.arch,
                    stats,
                    vcpus: b.vcpus,
                    affinity,
                    pinned: spec.affinity.pinned,
                    started: 1,
                    on_reboot: spec.on_reboot,
                    pv_ipi: spec.pv_ipi,
                    pv_time: b.pv_time,
                    bus: b.bus,
                    virtio: b.virtio,
                })
                .map_err(|e| format!("scheduler: {e:?}"))?;
            Ok((vm, affinity, entry, dtb))
        });
        match made {
            Ok((vm, affinity, entry, dtb)) => {
                if spec.affinity.pinned && !spec.affinity.shared {
                    pinned.0 |= affinity.0;
                }
                crate::vmm::terminal::add_vm(console, &vm.name);
                operator::note_created(spec.ram_size, vm.started_at());
                log::info!(
                    "vm[{}] \"{}\" created: {} vCPU(s), {} MiB at {:#x}, entry {entry:#x}, DTB at {dtb:#x}",
                    spec.index,
                    spec.name,
                    spec.vcpus,
                    spec.ram_size >> 20,
                    spec.ram_base,
                );
                created += 1;
            }
            Err(e) => {
                log::error!("VM refused: vm[{}] \"{}\": {e}", spec.index, spec.name);
                operator::note_refused(spec.name, &e);
            }
        }
    }
    hv.publish();
    created
}

/// The console's service, on the boot CPU's tick and idle path (a no-op
/// elsewhere): bytes typed on the physical console
/// ([`DeviceHost::console_read`]) go to the VM with the focus: into its
/// virtio console once the guest's driver has it up, else into its console
/// UART ([`DeviceHost::console_uart`]), whose interrupt line then follows
/// the UART's level; then the console's output buffers are drained
/// ([`crate::vmm::terminal::drain`]: what the UART's FIFO takes now,
/// unless another pCPU is draining). The other pCPUs drain after their
/// VMs' console writes only: a pCPU of an emulator can be descheduled
/// while it holds the buffers' lock, and one more drainer looking now and
/// then would make the others wait for it.
#[inline]
pub fn poll_console<B: DeviceHost>(hv: &Hypervisor<B>, cpu: usize) {
    // The test is inline: on the other pCPUs (which look at every
    // interrupt exit on LoongArch) it costs no call and no register saves.
    if cpu == 0 {
        poll_console_here(hv, cpu);
    }
}

#[inline(never)]
fn poll_console_here<B: DeviceHost>(hv: &Hypervisor<B>, cpu: usize) {
    pump_console(hv, cpu, console());
    operator::refresh(hv, console());
    crate::vmm::terminal::drain();
}

/// [`poll_console`] through the multiplexer `mux`.
pub(crate) fn pump_console<'a, B: DeviceHost>(
    hv: &'a Hypervisor<B>,
    cpu: usize,
    mux: &Mutex<ConsoleMux>,
) {
    let vms = hv.created();
    // Which VM's input the pump last looked up went to its UART (the pump
    // calls its `received` callback for the port it just looked up).
    let to_uart = core::cell::Cell::new(None::<usize>);
    let port_of = |i: usize, vm: &'a Vm<B>| -> &'a Mutex<dyn RxPort> {
        match vm.virtio.live_console_input() {
            Some(input) => {
                to_uart.set(None);
                &**input
            }
            None => {
                to_uart.set(Some(i));
                B::console_uart(vm).regs()
            }
        }
    };
    crate::vmm::console::pump_input(
        mux,
        |i| vms.get(i).map(|vm| port_of(i, vm)),
        || hv.backend.console_read(),
        |i, u| {
            // Only a UART has a line to update (a 16550 without a wired
            // receive interrupt drives nothing: kept for its bookkeeping).
            if let (Some(vm), Some(_)) = (vms.get(i), to_uart.get().filter(|&u| u == i)) {
                let mut env = VmDeviceEnv::host(hv, vm, cpu);
                B::console_uart(vm).update_level(u.irq_level(), &mut env);
            }
        },
        |command| operator::command(hv, mux, command),
    );
    for vm in vms {
        crate::vmm::virtio::deliver_console_input(hv, vm, cpu);
    }
}

/// Logs each VM's end (its last console line, then its counters) and the
/// end of the last one.
pub struct LogObserver<'a, B: Machine> {
    pub hv: &'a Hypervisor<B>,
    pub console: &'a Mutex<ConsoleMux>,
}

impl<B: Machine> Observer for LogObserver<'_, B> {
    fn vm_ended(&self, vm: &str, why: &VmEnd) {
        if let Some(v) = self.hv.created().iter().find(|v| v.name == vm) {
            let slot = usize::from(v.slot);
            let mut mux = self.console.lock();
            {
                let mut o = conout::outbox().lock();
                if let Some(line) = mux.flush(slot) {
                    console::queue(&mut o, conout::Source::Vm(slot), &console::Out::Text(line));
                }
                if let Some(out) = mux.quiet(slot) {
                    console::queue(&mut o, conout::Source::Kestrel, &out);
                }
            }
            drop(mux);
            crate::vmm::terminal::drain();
            log::info!("VM \"{vm}\" {why}; stats: {}", v.counters());
            log::info!("VM \"{vm}\" {}", worst_line(&v.stats.worst()));
            if let Some(s) = v.virtio.summary() {
                log::info!("VM \"{vm}\" virtio: {s}");
            }
            let c = conout::outbox().lock().counters(slot);
            if c.dropped > 0 {
                log::info!(
                    "VM \"{vm}\" console: {} bytes of output, {} of them dropped (the console \
                     was slower)",
                    c.queued,
                    c.dropped
                );
            }
            let mut mux = self.console.lock();
            let stays_up = self
                .hv
                .created()
                .iter()
                .any(|v| v.end_reason() == Some(VmEnd::Stopped));
            if let Some(out) = mux.vm_stopped(slot, &format!("{why}"), stays_up) {
                crate::vmm::console::write(&out);
            }
            drop(mux);
            crate::vmm::terminal::drain();
        } else {
            log::info!("VM \"{vm}\" {why}");
        }
        self.hv.backend.vm_ended();
    }

    fn vm_restarted(&self, vm: &str, n: u64) {
        // The terminal reset before the log line (raw console).
        let slot = self
            .hv
            .created()
            .iter()
            .find(|v| v.name == vm)
            .map(|v| v.slot);
        if let Some(s) = slot {
            let mut mux = self.console.lock();
            if let Some(out) = mux.quiet(usize::from(s)) {
                crate::vmm::console::write(&out);
            }
        }
        crate::vmm::terminal::drain();
        // What a restart must leave as it was: the heap and the guest
        // frames (the reboot test compares these across restarts).
        let heap = crate::mem::heap::heap_usage().map_or(0, |(used, _)| used);
        let free = GUEST_FRAMES
            .lock()
            .as_ref()
            .map_or(0, FramePool::free_bytes);
        log::info!(
            "VM \"{vm}\" restarted ({n}): heap {heap} bytes used, guest memory {free} bytes free"
        );
        if let Some(v) = self.hv.created().iter().find(|v| v.name == vm) {
            let mut mux = self.console.lock();
            if let Some(out) = mux.vm_rebooted(usize::from(v.slot)) {
                crate::vmm::console::write(&out);
            }
        }
        crate::vmm::terminal::drain();
    }

    fn vm_started(&self, vm: &str) {
        log::info!("VM \"{vm}\" started again from its packed images");
        if let Some(v) = self.hv.created().iter().find(|v| v.name == vm) {
            let mut mux = self.console.lock();
            let slot = usize::from(v.slot);
            for out in [mux.vm_rebooted(slot), mux.vm_started(slot)]
                .into_iter()
                .flatten()
            {
                crate::vmm::console::write(&out);
            }
        }
        crate::vmm::terminal::drain();
    }

    fn all_ended(&self) {
        log::info!("the last VM has ended");
        let host = crate::vcpu::stats::HOST.snapshot();
        log::info!("host counters: {}", crate::vcpu::stats::host_summary(&host));
    }
}

/// The guest RAM no VM took at creation, kept for the log (a restart
/// reuses its VM's frames: this must not change).
static GUEST_FRAMES: Mutex<Option<FramePool>> = Mutex::new(None);

/// The backend's hypervisor, once [`start`] made it.
pub type Slot<B> = Once<Hypervisor<B>>;

/// Makes the hypervisor of `backend` in `slot` and creates the VMs of
/// `specs` in it (boot CPU, after the banner). Returns how many were created.
pub fn start<B: Machine + DeviceHost>(
    slot: &'static Slot<B>,
    backend: B,
    board: &BoardInfo,
    specs: &[VmSpec<'static>],
    online: CpuMask,
) -> usize {
    let mut ram = backend.guest_memory(board);
    log::info!("guest memory: {} MiB free", ram.free_bytes() >> 20);
    let hv = slot.call_once(|| Hypervisor::new(backend, online));
    // The scheduler's slice estimate never exceeds a tick period.
    hv.sched.set_slice(crate::base::clock::slice_ticks());
    let n = create_vms(hv, board, specs, online, &mut ram, console());
    for vm in hv.created() {
        crate::vmm::virtio::connect(hv, vm);
    }
    log::info!(
        "guest memory: {} bytes free after creating the VMs",
        ram.free_bytes()
    );
    *GUEST_FRAMES.lock() = Some(ram);
    if let Some(hint) = console().lock().hint() {
        crate::base::klog::print(format_args!("{hint}"));
    }
    n
}

/// Runs vCPUs on `cpu` until every VM has ended (every online CPU, once
/// VMs exist). Returns `Success` when every VM powered itself off.
pub fn run_vms<B: Machine>(slot: &'static Slot<B>, cpu: usize) -> ExitStatus {
    let Some(hv) = slot.get() else {
        return ExitStatus::Success;
    };
    if cpu >= MAX_CPUS {
        return ExitStatus::Failure;
    }
    hv.backend.init_cpu(hv, cpu);
    hv.run_cpu(
        cpu,
        &LogObserver {
            hv,
            console: console(),
        },
    );
    hv.backend.leave_cpu(cpu);
    hv.exit_status()
}

pub mod operator;

#[cfg(test)]
mod tests;
