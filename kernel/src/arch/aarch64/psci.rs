//! PSCI calls (CPU_ON, SYSTEM_OFF) over the conduit the DTB's `/psci` names.

use crate::host::board::PsciConduit;

pub const CPU_ON: u64 = 0xC400_0003;
pub const SYSTEM_OFF: u64 = 0x8400_0008;
pub const VERSION: u64 = 0x8400_0000;

pub const SUCCESS: i64 = 0;
pub const ALREADY_ON: i64 = -4;

/// One SMCCC call: function id and three arguments, result in x0.
pub fn call(conduit: PsciConduit, fid: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    let mut x0 = fid;
    // SAFETY: an SMCCC call to the firmware (EL3 or QEMU's built-in PSCI);
    // it may clobber x0-x17 (SMCCC 1.0), declared below, and returns.
    unsafe {
        match conduit {
            PsciConduit::Smc => core::arch::asm!(
                "smc #0",
                inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _, inout("x3") a3 => _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _,
                out("x10") _, out("x11") _, out("x12") _, out("x13") _, out("x14") _,
                out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            ),
            PsciConduit::Hvc => core::arch::asm!(
                "hvc #0",
                inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _, inout("x3") a3 => _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _,
                out("x10") _, out("x11") _, out("x12") _, out("x13") _, out("x14") _,
                out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            ),
        }
    }
    x0 as i64
}

/// CPU_ON: starts the CPU with MPIDR affinity `mpidr` at physical address
/// `entry` with x0 = `context`.
pub fn cpu_on(conduit: PsciConduit, mpidr: u64, entry: u64, context: u64) -> Result<(), i64> {
    match call(conduit, CPU_ON, mpidr, entry, context) {
        SUCCESS => Ok(()),
        e => Err(e),
    }
}

/// SYSTEM_OFF. Returns only if the firmware refused.
pub fn system_off(conduit: PsciConduit) {
    call(conduit, SYSTEM_OFF, 0, 0, 0);
}
