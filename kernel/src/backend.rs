//! Which VM backend runs the image's VMs: chosen here, from the board
//! (`BoardInfo::backend`), above `arch`. Each backend's hypervisor lives in
//! one static of this module; `runtime` creates the VMs and runs them
//! through [`create_vms`] and [`run_vms`], and the shared steps are
//! `crate::vmm`'s. An LVZ backend would get its own slot beside the
//! trap-and-emulate one and be picked in the LoongArch match below.

use alloc::vec::Vec;

use crate::board::BoardInfo;
use crate::platform::ExitStatus;
use crate::vmconfig::VmSpec;

#[cfg(all(target_os = "none", target_arch = "aarch64"))]
mod chosen {
    use super::*;
    use crate::arch::aarch64::vm::{self, Arm64Backend};
    use crate::vmm::{self, Slot};

    static EL2: Slot<Arm64Backend> = Slot::new();

    pub fn create(board: &BoardInfo, specs: &[VmSpec<'static>]) -> usize {
        let online = super::online(board);
        match vm::probe(board, vmm::fp_policy(crate::vmconfig::package())) {
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
    use crate::arch::loongarch64::vm::{self, LaBackend};
    use crate::board::Backend;
    use crate::vmm::{self, Slot};

    static TRAP_EMULATE: Slot<LaBackend> = Slot::new();

    pub fn create(board: &BoardInfo, specs: &[VmSpec<'static>]) -> usize {
        let online = super::online(board);
        if board.backend == Backend::LoongArchLvz {
            // The LVZ backend would be chosen here (its own slot); until it
            // exists, trap-and-emulate runs on LVZ hardware too.
            log::warn!("LVZ present, but kestrel has no LVZ backend yet: using trap-and-emulate");
        }
        let backend = vm::probe(board, vmm::fp_policy(crate::vmconfig::package()));
        vmm::start(&TRAP_EMULATE, backend, board, specs, online)
    }

    pub fn run(cpu: usize) -> ExitStatus {
        vmm::run_vms(&TRAP_EMULATE, cpu)
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
fn online(board: &BoardInfo) -> crate::sched::CpuMask {
    crate::vmm::online_cpus(board.cpus.len(), |i| {
        crate::runtime::cpu(i).is_some_and(|c| c.is_online())
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
