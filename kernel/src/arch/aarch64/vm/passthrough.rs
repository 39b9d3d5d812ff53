//! Device passthrough, the arm64 half (docs/passthrough.md): a VM's host
//! SPIs are forwarded as hardware interrupts.
//!
//! A forwarded SPI is routed to pCPU 0. Whichever pCPU takes it (a guest
//! exit or the idle wait) only drops its priority (split EOI: it stays
//! active, so it cannot fire again) and marks it fired here; the backend
//! then, with the hypervisor at hand ([`drain`]), makes the guest SPI
//! pending in the owning VM's virtual GIC, which wakes or kicks the vCPU it
//! targets. The guest SPI is linked to the host INTID
//! (`Vgic::set_hw_mapping`): its list register carries HW = 1 and the
//! pINTID, so the guest's deactivation deactivates the host interrupt,
//! with no maintenance exit. A level-sensitive device still asserting then
//! fires again.
//!
//! The table is armed when the VM's first vCPU is loaded (the VM's slot is
//! known then) and disarmed when it ends: its SPIs are disabled and
//! deactivated (the device itself is not reset).

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::base::lock::Mutex;

use crate::vcpu::sched::VcpuKey;
use crate::vm::{Hypervisor, Vm};
use crate::vmm::passthrough::{Claims, SpiRoute};

use super::super::platform;
use super::Arm64Backend;

/// INTIDs the GIC can have.
const INTIDS: usize = 1024;
/// Per host INTID: 0 = not forwarded, else `(VM slot + 1) << 16 | guest INTID`.
static FORWARD: [AtomicU32; INTIDS] = [const { AtomicU32::new(0) }; INTIDS];
/// Per host INTID (bit): taken and priority-dropped, not yet injected.
static FIRED: [AtomicU32; INTIDS / 32] = [const { AtomicU32::new(0) }; INTIDS / 32];
/// Some bit of [`FIRED`] may be set (the one check on every exit).
static ANY_FIRED: AtomicBool = AtomicBool::new(false);

/// The regions and SPIs given to VMs so far (one owner each).
pub static CLAIMS: Mutex<Claims> = Mutex::new(Claims::new());

/// A VM's forwarded SPIs (in its arch state).
#[derive(Debug, Default)]
pub struct VmPassthrough {
    pub routes: alloc::vec::Vec<SpiRoute>,
    /// [`arm`] ran.
    armed: AtomicBool,
    /// [`disarm`] ran.
    disarmed: AtomicBool,
}

impl VmPassthrough {
    pub fn new(routes: alloc::vec::Vec<SpiRoute>) -> Self {
        VmPassthrough {
            routes,
            armed: AtomicBool::new(false),
            disarmed: AtomicBool::new(false),
        }
    }
}

/// Called for every physical interrupt kestrel acknowledges: whether it is
/// a forwarded SPI (then the caller only drops its priority), marking it
/// fired for [`drain`].
pub fn on_irq(intid: u32) -> bool {
    let i = intid as usize;
    if !(32..INTIDS).contains(&i) || FORWARD[i].load(Ordering::Acquire) == 0 {
        return false;
    }
    FIRED[i / 32].fetch_or(1 << (i % 32), Ordering::AcqRel);
    ANY_FIRED.store(true, Ordering::Release);
    true
}

/// Injects what [`on_irq`] marked into the owning VMs' virtual GICs and
/// wakes (or kicks) the vCPUs that can take them. A VM that has ended gets
/// nothing: its SPI is disabled and deactivated.
#[inline]
pub fn drain(hv: &Hypervisor<Arm64Backend>, cpu: usize) {
    if ANY_FIRED.swap(false, Ordering::AcqRel) {
        drain_slow(hv, cpu);
    }
}

fn drain_slow(hv: &Hypervisor<Arm64Backend>, cpu: usize) {
    for (w, word) in FIRED.iter().enumerate() {
        let mut bits = word.swap(0, Ordering::AcqRel);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let intid = (w * 32 + b) as u32;
            let f = FORWARD[w * 32 + b].load(Ordering::Acquire);
            let vm = (f != 0)
                .then(|| hv.vm(((f >> 16) - 1) as u16))
                .flatten()
                .filter(|vm| !vm.has_ended());
            let Some(vm) = vm else {
                if let Some(gic) = platform::gic() {
                    gic.disable_spi(intid);
                }
                continue;
            };
            let woken = vm.arch.vgic.lock().inject(0, f & 0xffff);
            for v in woken.iter() {
                hv.wake(
                    VcpuKey {
                        vm: vm.slot,
                        vcpu: v as u16,
                    },
                    cpu,
                );
            }
        }
    }
}

/// Enables `vm`'s forwarded SPIs (once, at its first vCPU load), routed to
/// pCPU 0.
pub fn arm(vm: &Vm<Arm64Backend>, boot_mpidr: u64) {
    let pt = &vm.arch.passthrough;
    if pt.routes.is_empty() || pt.armed.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(gic) = platform::gic() else { return };
    for r in &pt.routes {
        let (host, guest) = (r.host + 32, r.guest + 32);
        FORWARD[host as usize].store((u32::from(vm.slot) + 1) << 16 | guest, Ordering::Release);
        gic.enable_spi(host, r.edge, 0, boot_mpidr);
    }
}

/// A restart of `vm`: its SPIs are disabled and deactivated (an interrupt
/// the old guest never deactivated must not stay active) and enabled again
/// at its next first vCPU load ([`arm`]); they stay its own.
pub fn quiesce(vm: &Vm<Arm64Backend>) {
    let pt = &vm.arch.passthrough;
    if pt.routes.is_empty() || pt.disarmed.load(Ordering::Acquire) {
        return;
    }
    if let Some(gic) = platform::gic() {
        for r in &pt.routes {
            gic.disable_spi(r.host + 32);
        }
    }
    pt.armed.store(false, Ordering::Release);
}

/// Disables and deactivates an ended `vm`'s SPIs (once); the device keeps
/// whatever state the guest left it in.
pub fn disarm(vm: &Vm<Arm64Backend>) {
    let pt = &vm.arch.passthrough;
    if pt.routes.is_empty() || pt.disarmed.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(gic) = platform::gic() else { return };
    for r in &pt.routes {
        let host = r.host + 32;
        gic.disable_spi(host);
        FORWARD[host as usize].store(0, Ordering::Release);
    }
}
