//! SMC Calling Convention calls (HVC or SMC, as the DTB's `/psci` says):
//! PSCI and kestrel's vendor hypervisor service.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

static USE_SMC: AtomicBool = AtomicBool::new(false);

/// Selects the conduit: `smc` when the DTB's `/psci` method says so.
pub fn set_conduit_smc(smc: bool) {
    USE_SMC.store(smc, Ordering::Relaxed);
}

/// The conduit's name, for the log.
pub fn conduit() -> &'static str {
    if USE_SMC.load(Ordering::Relaxed) {
        "smc"
    } else {
        "hvc"
    }
}

/// Makes one SMCCC call with x0 = `fid` (all 64 bits passed as given) and
/// x1-x3 = `args`; returns x0-x3.
pub fn call(fid: u64, args: [u64; 3]) -> [u64; 4] {
    let (mut x0, mut x1, mut x2, mut x3) = (fid, args[0], args[1], args[2]);
    // SAFETY: an SMCCC call hands control to the hypervisor (or QEMU's PSCI)
    // and returns with results in x0-x3; SMCCC 1.0 allows x4-x17 to be
    // clobbered, so they are declared as such. Memory is not touched by the
    // callee except through PSCI CPU_ON, which starts another CPU.
    unsafe {
        if USE_SMC.load(Ordering::Relaxed) {
            asm!("smc #0",
                inout("x0") x0, inout("x1") x1, inout("x2") x2, inout("x3") x3,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                options(nostack));
        } else {
            asm!("hvc #0",
                inout("x0") x0, inout("x1") x1, inout("x2") x2, inout("x3") x3,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                options(nostack));
        }
    }
    [x0, x1, x2, x3]
}

/// x0 of a call made with `smc` whatever the DTB says (a hypervisor that
/// traps SMC, HCR_EL2.TSC, must answer PSCI there too). Only on kestrel:
/// at EL1 with no EL3 below, `smc` is undefined.
pub fn call0_smc(fid: u32) -> i64 {
    let mut x0 = fid as u64;
    // SAFETY: as in `call`; arguments x1-x3 are zero.
    unsafe {
        asm!("smc #0",
            inout("x0") x0, inout("x1") 0u64 => _, inout("x2") 0u64 => _, inout("x3") 0u64 => _,
            out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
            out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
            out("x14") _, out("x15") _, out("x16") _, out("x17") _,
            options(nostack));
    }
    x0 as i64
}

/// x0 of a call, as the signed value SMCCC returns.
pub fn call0(fid: u32, args: [u64; 3]) -> i64 {
    call(fid as u64, args)[0] as i64
}

/// PSCI function ids (DEN0022) and return codes.
pub mod psci {
    pub const VERSION: u32 = 0x8400_0000;
    pub const CPU_OFF: u32 = 0x8400_0002;
    pub const CPU_ON: u32 = 0xC400_0003;
    pub const AFFINITY_INFO: u32 = 0xC400_0004;
    pub const MIGRATE_INFO_TYPE: u32 = 0x8400_0006;
    pub const SYSTEM_OFF: u32 = 0x8400_0008;
    pub const SYSTEM_RESET: u32 = 0x8400_0009;
    pub const FEATURES: u32 = 0x8400_000A;
    pub const SMCCC_VERSION: u32 = 0x8000_0000;

    pub const SUCCESS: i64 = 0;
    pub const NOT_SUPPORTED: i64 = -1;
    pub const INVALID_PARAMETERS: i64 = -2;
    pub const ALREADY_ON: i64 = -4;

    /// AFFINITY_INFO: on.
    pub const AFF_ON: i64 = 0;
    /// AFFINITY_INFO: off.
    pub const AFF_OFF: i64 = 1;
}

/// PSCI SYSTEM_RESET; spins if it returns.
pub fn system_reset() -> ! {
    call0(psci::SYSTEM_RESET, [0; 3]);
    loop {
        crate::cpu::wfi();
    }
}

/// PSCI SYSTEM_OFF; spins if it returns.
pub fn system_off() -> ! {
    call0(psci::SYSTEM_OFF, [0; 3]);
    loop {
        crate::cpu::wfi();
    }
}

/// Paravirtual stolen time (Arm DEN0057A, standard hypervisor service).
pub mod pv_time {
    pub use kestrel_abi::arm64::{PV_TIME_FEATURES as FEATURES, PV_TIME_ST as ST};
    /// SMCCC_ARCH_FEATURES.
    pub const ARCH_FEATURES: u32 = 0x8000_0001;

    /// Whether `ipa` (x0 of PV_TIME_ST) is an address, not an error: 64-byte
    /// aligned and non-zero.
    pub fn is_record(ipa: u64) -> bool {
        (ipa as i64) > 0 && ipa.is_multiple_of(64)
    }

    /// The stolen time (ns) in the record at `ipa` (`None` unless
    /// [`is_record`]).
    pub fn stolen(ipa: u64) -> Option<u64> {
        // SAFETY: kestrel answered PV_TIME_ST with `ipa`: a record in the
        // guest's RAM (inside the GiB the identity map makes normal
        // memory), 8-byte aligned; kestrel writes the word with one store.
        is_record(ipa).then(|| unsafe { core::ptr::read_volatile((ipa + 8) as *const u64) })
    }

    /// The record's revision and attributes words (both 0 in DEN0057A
    /// 1.0); `None` unless [`is_record`].
    pub fn header(ipa: u64) -> Option<(u32, u32)> {
        // SAFETY: as in `stolen`.
        is_record(ipa).then(|| unsafe {
            (
                core::ptr::read_volatile(ipa as *const u32),
                core::ptr::read_volatile((ipa + 4) as *const u32),
            )
        })
    }
}
