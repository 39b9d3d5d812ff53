//! Which VM backend runs the image's VMs: chosen here, from the board
//! (`BoardInfo::backend`), above `arch`. Each backend's hypervisor lives in
//! one static of this module; `runtime` creates the VMs and runs them
//! through [`create_vms`] and [`run_vms`], and the shared steps are
//! `crate::vmm`'s. On LoongArch the LVZ backend and the trap-and-emulate
//! one each have a slot; the boot path chose one (`BoardInfo::backend`,
//! from CPUCFG2.LVZ and `kestrel.backend=`).

use alloc::vec::Vec;

use crate::base::platform::ExitStatus;
use crate::host::board::BoardInfo;
use crate::vmm::vmconfig::VmSpec;

#[cfg(all(target_os = "none", target_arch = "aarch64"))]
mod chosen {
    use super::*;
    use crate::arch::aarch64::vm::{self, Arm64Backend};
    use crate::vmm::{self, Slot};

    static EL2: Slot<Arm64Backend> = Slot::new();

    pub fn create(board: &BoardInfo, specs: &[VmSpec<'static>]) -> usize {
        let online = super::online(board);
        match vm::probe(board, vmm::fp_policy(crate::vmm::vmconfig::package())) {
            Ok(backend) => vmm::start(&EL2, backend, board, specs, online),
            Err(e) => {
                log::error!("{e}: no VM can run");
                0
            }
        }
    }

    pub fn run(cpu: usize) -> ExitStatus {
        vmm::run_vms(&EL2, cpu)
    }
}

#[cfg(all(target_os = "none", target_arch = "loongarch64"))]
mod chosen {
    use super::*;
    use crate::arch::loongarch64::lvz::{self, LvzBackend};
    use crate::arch::loongarch64::vm::{self, TneBackend};
    use crate::host::board::Backend;
    use crate::host::cmdline::{BackendChoice, BootOptions};
    use crate::vmm::{self, Slot};
    use core::sync::atomic::{AtomicBool, Ordering};

    static TRAP_EMULATE: Slot<TneBackend> = Slot::new();
    static LVZ: Slot<LvzBackend> = Slot::new();
    /// Which of the two runs the VMs (set before any secondary runs them).
    static USE_LVZ: AtomicBool = AtomicBool::new(false);

    pub fn create(board: &BoardInfo, specs: &[VmSpec<'static>]) -> usize {
        let online = super::online(board);
        let policy = vmm::fp_policy(crate::vmm::vmconfig::package());
        let want = BootOptions::parse(board.cmdline.as_str()).backend;
        if want == BackendChoice::Lvz && board.backend != Backend::LoongArchLvz {
            log::error!(
                "kestrel.backend=lvz: this CPU has no LVZ (CPUCFG2 bit 10 is 0): no VM can run \
                 (use kestrel.backend=tne, or leave the option out)"
            );
            return 0;
        }
        if board.backend == Backend::LoongArchLvz {
            match lvz::probe(board, policy) {
                Ok(backend) => {
                    USE_LVZ.store(true, Ordering::Release);
                    return vmm::start(&LVZ, backend, board, specs, online);
                }
                Err(e) => {
                    log::error!("LVZ backend: {e}: no VM can run");
                    return 0;
                }
            }
        }
        let backend = vm::probe(board, policy);
        vmm::start(&TRAP_EMULATE, backend, board, specs, online)
    }

    pub fn run(cpu: usize) -> ExitStatus {
        if USE_LVZ.load(Ordering::Acquire) {
            vmm::run_vms(&LVZ, cpu)
        } else {
            vmm::run_vms(&TRAP_EMULATE, cpu)
        }
    }
}

/// No backend (a host build): nothing to run.
#[cfg(not(all(
    target_os = "none",
    any(target_arch = "aarch64", target_arch = "loongarch64")
)))]
mod chosen {
    use super::*;

    pub fn create(_: &BoardInfo, _: &[VmSpec<'static>]) -> usize {
        0
    }

    pub fn run(_: usize) -> ExitStatus {
        ExitStatus::Success
    }
}

/// The pCPUs that came online during boot.
#[allow(dead_code)]
fn online(board: &BoardInfo) -> crate::vcpu::sched::CpuMask {
    crate::vmm::online_cpus(board.cpus.len(), |i| {
        crate::base::cpu::cpu(i).is_some_and(|c| c.is_online())
    })
}

/// Creates the VMs the image carries (boot CPU, after the banner), from the
/// specs `vmconfig::plan` accepted. Returns how many were created.
pub fn create_vms(board: &BoardInfo, specs: Vec<VmSpec<'static>>) -> usize {
    chosen::create(board, &specs)
}

/// Runs vCPUs on the calling CPU until every VM has ended (called on every
/// online CPU once [`create_vms`] created some). Returns `Success` when
/// every VM ended by powering itself off.
pub fn run_vms(cpu: usize) -> ExitStatus {
    chosen::run(cpu)
}
