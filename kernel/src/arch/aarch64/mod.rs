//! arm64 (EL2) support: the boot sequence after the entry assembly, the
//! drivers kestrel itself uses (PL011, GICv2/v3, EL2 physical timer, PSCI),
//! the EL2 stage-1 MMU, exception vectors, SMP bring-up and the
//! [`crate::base::platform::Platform`] implementation. See docs/arm64-boot.md.

pub mod boot;
pub mod el2;
pub mod exceptions;
pub mod gic;
pub mod mmu;
pub mod percpu;
pub mod pl011;
pub mod platform;
pub mod psci;
pub mod smp;
pub mod timer;
pub mod vm;

/// kestrel's spin-wait hint on arm64 (`base::lock::Relax`): `YIELD`, which
/// says this CPU is waiting for another. On hardware it is a hint that
/// changes no state (a core with hardware threads may run another).
/// QEMU's TCG, when it runs its vCPUs in turn on one host thread (always
/// under `-icount`), ends the yielding vCPU's turn there, so the vCPU
/// holding the lock runs next instead of the waiter spinning out the rest
/// of its turn. `core::hint::spin_loop` emits `ISB`, which does not.
#[inline]
pub fn relax() {
    // SAFETY: YIELD is a hint: it reads and writes no register or memory.
    unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
}
