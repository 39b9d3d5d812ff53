//! Per-CPU identity: TPIDR_EL2 holds the calling CPU's logical index (its
//! position in `BoardInfo::cpus`). The primary sets it once the DTB says
//! which CPU it is; secondaries get it from their `CpuBoot` block.

use aarch64_cpu::registers::*;

/// The calling CPU's logical index.
#[inline]
pub fn index() -> usize {
    TPIDR_EL2.get() as usize
}

/// Records the calling CPU's logical index.
pub fn set_index(index: usize) {
    TPIDR_EL2.set(index as u64);
}

/// The affinity fields of MPIDR_EL1 (Aff3 in bits 39:32, Aff2..Aff0 in
/// 23:0), as the DTB's `/cpus/cpu@*/reg` and PSCI CPU_ON name a CPU.
pub fn mpidr_affinity() -> u64 {
    MPIDR_EL1.get() & 0xff_00ff_ffff
}
