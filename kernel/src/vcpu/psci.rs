//! PSCI 1.1 and SMCCC 1.1 as kestrel offers them to arm64 guests (over HVC,
//! and over SMC trapped by HCR_EL2.TSC).
//!
//! Decoding and policy live here, free of registers: the arch hands in the
//! function id and arguments, [`handle`] answers through a [`PsciVm`]
//! ([`crate::vm::exitctx::ExitCtx`] for the calling vCPU), and returns the value
//! for x0 plus what must happen to the calling vCPU or its VM
//! ([`crate::vm::exitctx::ExitCtx::psci`] turns that into the run loop's next step).
//!
//! Function ids and return codes: Arm DEN0022 (PSCI) and DEN0028 (SMCCC).

use super::steal;

/// PSCI return codes (DEN0022 table 5.2).
pub mod ret {
    pub const SUCCESS: i64 = 0;
    pub const NOT_SUPPORTED: i64 = -1;
    pub const INVALID_PARAMETERS: i64 = -2;
    pub const DENIED: i64 = -3;
    pub const ALREADY_ON: i64 = -4;
    pub const ON_PENDING: i64 = -5;
    pub const INTERNAL_FAILURE: i64 = -6;
    pub const NOT_PRESENT: i64 = -7;
    pub const DISABLED: i64 = -8;
    pub const INVALID_ADDRESS: i64 = -9;
}

/// Function ids (SMC32 spellings; the SMC64 ones set bit 30).
pub mod fid {
    pub const PSCI_VERSION: u32 = 0x8400_0000;
    pub const CPU_SUSPEND: u32 = 0x8400_0001;
    pub const CPU_OFF: u32 = 0x8400_0002;
    pub const CPU_ON: u32 = 0x8400_0003;
    pub const AFFINITY_INFO: u32 = 0x8400_0004;
    pub const MIGRATE: u32 = 0x8400_0005;
    pub const MIGRATE_INFO_TYPE: u32 = 0x8400_0006;
    pub const MIGRATE_INFO_UP_CPU: u32 = 0x8400_0007;
    pub const SYSTEM_OFF: u32 = 0x8400_0008;
    pub const SYSTEM_RESET: u32 = 0x8400_0009;
    pub const PSCI_FEATURES: u32 = 0x8400_000A;
    pub const SMCCC_VERSION: u32 = 0x8000_0000;
    pub const SMCCC_ARCH_FEATURES: u32 = 0x8000_0001;
    /// Bit 30: the SMC64 calling convention.
    pub const SMC64: u32 = 0x4000_0000;
}

/// PSCI 1.1.
pub const PSCI_VERSION_1_1: i64 = 0x0001_0001;
/// SMCCC 1.1.
pub const SMCCC_VERSION_1_1: i64 = 0x0001_0001;
/// MIGRATE_INFO_TYPE: no trusted OS that needs migration.
pub const MIGRATE_INFO_NOT_PRESENT: i64 = 2;

/// AFFINITY_INFO answers.
pub mod affinity {
    pub const ON: i64 = 0;
    pub const OFF: i64 = 1;
    pub const ON_PENDING: i64 = 2;
}

/// What the VM can tell and do for PSCI.
pub trait PsciVm {
    /// The vCPU whose MPIDR affinity (Aff3..Aff0, as in MPIDR_EL1 bits
    /// [39:32] and [23:0]) is `mpidr`, if any.
    fn vcpu_by_mpidr(&self, mpidr: u64) -> Option<usize>;
    /// Whether vCPU `index` is on (started and not turned off).
    fn vcpu_is_on(&self, index: usize) -> bool;
    /// Whether `addr` lies in the guest's RAM (an entry point must).
    fn is_guest_ram(&self, addr: u64) -> bool;
    /// Starts vCPU `index` at `entry` with x0 = `context`, EL1h, MMU off.
    /// Returns false if it is already on.
    fn start_vcpu(&mut self, index: usize, entry: u64, context: u64) -> bool;
    /// Whether the VM is offered paravirtual stolen time
    /// ([`crate::vcpu::steal`]): `SMCCC_ARCH_FEATURES` says so.
    fn pv_time_offered(&self) -> bool;
}

/// What must happen after the call, besides writing x0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Resume the caller.
    None,
    /// The caller waits for an interrupt (CPU_SUSPEND, treated as standby).
    Block,
    /// The caller turns itself off; it does not return.
    CpuOff,
    /// The VM ends.
    SystemOff,
    /// The VM asks to be restarted; kestrel ends it (no reset support yet) and says so.
    SystemReset,
}

/// The answer to one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The value for x0.
    pub x0: i64,
    pub effect: Effect,
}

impl Outcome {
    const fn ret(x0: i64) -> Self {
        Outcome {
            x0,
            effect: Effect::None,
        }
    }
}

/// Whether `function` is a PSCI or SMCCC architecture call kestrel answers
/// here (the rest, e.g. vendor hypervisor calls, go elsewhere).
pub fn is_psci_or_arch(function: u64) -> bool {
    let f = (function as u32) & !fid::SMC64;
    function >> 32 == 0 && (f & 0xFFFF_0000 == 0x8400_0000 || f & 0xFFFF_0000 == 0x8000_0000)
}

/// The execution state of a caller (and so of the vCPUs its CPU_ON starts:
/// they start at its EL, in its state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    Aarch64,
    /// An AArch32 EL1: bit 0 of a CPU_ON entry point selects T32 (DEN0022
    /// 5.6: "for AArch32 callers", the vCPU starts with CPSR.T set at the
    /// address with bit 0 cleared).
    Aarch32,
}

impl Caller {
    /// Whether `entry` is an entry point this caller may give CPU_ON, as
    /// far as alignment goes: AArch64 and A32 code on a word, T32 code
    /// (bit 0 set, AArch32 only) on a halfword.
    pub const fn entry_aligned(self, entry: u64) -> bool {
        match self {
            Caller::Aarch64 => entry & 3 == 0,
            Caller::Aarch32 => entry & 1 != 0 || entry & 3 == 0,
        }
    }
}

/// Answers one PSCI/SMCCC call from an AArch64 caller with `args = [x0,
/// x1, x2, x3]`. Never panics: unknown ids get NOT_SUPPORTED.
pub fn handle(vm: &mut impl PsciVm, args: [u64; 4]) -> Outcome {
    handle_from(vm, Caller::Aarch64, args)
}

/// [`handle`] for a caller in execution state `caller` (an AArch32 one
/// passes r0-r3).
pub fn handle_from(vm: &mut impl PsciVm, caller: Caller, args: [u64; 4]) -> Outcome {
    let function = args[0];
    if function >> 32 != 0 {
        return Outcome::ret(ret::NOT_SUPPORTED);
    }
    let f = function as u32;
    let smc64 = f & fid::SMC64 != 0;
    // SMC32 calls pass 32-bit arguments: the upper halves are not theirs.
    let arg = |i: usize| {
        if smc64 {
            args[i]
        } else {
            args[i] & 0xFFFF_FFFF
        }
    };
    match (f & !fid::SMC64, smc64) {
        (fid::PSCI_VERSION, false) => Outcome::ret(PSCI_VERSION_1_1),
        (fid::CPU_SUSPEND, _) => Outcome {
            x0: ret::SUCCESS,
            effect: Effect::Block,
        },
        (fid::CPU_OFF, false) => Outcome {
            x0: ret::SUCCESS,
            effect: Effect::CpuOff,
        },
        (fid::CPU_ON, _) => Outcome::ret(cpu_on(vm, caller, arg(1), arg(2), arg(3))),
        (fid::AFFINITY_INFO, _) => Outcome::ret(affinity_info(vm, arg(1), arg(2))),
        (fid::MIGRATE_INFO_TYPE, false) => Outcome::ret(MIGRATE_INFO_NOT_PRESENT),
        (fid::SYSTEM_OFF, false) => Outcome {
            x0: ret::SUCCESS,
            effect: Effect::SystemOff,
        },
        (fid::SYSTEM_RESET, false) => Outcome {
            x0: ret::SUCCESS,
            effect: Effect::SystemReset,
        },
        (fid::PSCI_FEATURES, false) => Outcome::ret(features(args[1] as u32)),
        (fid::SMCCC_VERSION, false) => Outcome::ret(SMCCC_VERSION_1_1),
        // No SMCCC_ARCH_WORKAROUND_* is offered: NOT_SUPPORTED tells Linux
        // so. PV_TIME_FEATURES exists when the VM is offered stolen time.
        (fid::SMCCC_ARCH_FEATURES, false) => Outcome::ret(match args[1] as u32 {
            fid::SMCCC_VERSION | fid::SMCCC_ARCH_FEATURES => ret::SUCCESS,
            q => steal::arch_features(q, vm.pv_time_offered()).unwrap_or(ret::NOT_SUPPORTED),
        }),
        _ => Outcome::ret(ret::NOT_SUPPORTED),
    }
}

fn features(queried: u32) -> i64 {
    let base = queried & !fid::SMC64;
    let smc64 = queried & fid::SMC64 != 0;
    match (base, smc64) {
        // CPU_SUSPEND: original power-state format, no OS-initiated mode.
        (fid::CPU_SUSPEND, _) => 0,
        (fid::CPU_ON, _) | (fid::AFFINITY_INFO, _) => ret::SUCCESS,
        (
            fid::PSCI_VERSION
            | fid::CPU_OFF
            | fid::MIGRATE_INFO_TYPE
            | fid::SYSTEM_OFF
            | fid::SYSTEM_RESET
            | fid::PSCI_FEATURES
            | fid::SMCCC_VERSION,
            false,
        ) => ret::SUCCESS,
        _ => ret::NOT_SUPPORTED,
    }
}

/// MPIDR affinity fields a guest may name: Aff3 [39:32], Aff2..Aff0 [23:0].
const MPIDR_AFF_MASK: u64 = 0xFF_00FF_FFFF;

/// CPU_ON: `entry` keeps its bit 0 (T32) for the backend's
/// `start_vcpu`; the address it names is `entry` with bit 0 clear.
fn cpu_on(vm: &mut impl PsciVm, caller: Caller, target: u64, entry: u64, context: u64) -> i64 {
    if target & !MPIDR_AFF_MASK != 0 {
        return ret::INVALID_PARAMETERS;
    }
    let Some(index) = vm.vcpu_by_mpidr(target) else {
        return ret::INVALID_PARAMETERS;
    };
    if vm.vcpu_is_on(index) {
        return ret::ALREADY_ON;
    }
    if !caller.entry_aligned(entry) || !vm.is_guest_ram(entry & !1) {
        return ret::INVALID_ADDRESS;
    }
    if vm.start_vcpu(index, entry, context) {
        ret::SUCCESS
    } else {
        ret::ALREADY_ON
    }
}

fn affinity_info(vm: &impl PsciVm, target: u64, lowest_level: u64) -> i64 {
    // PSCI 1.1 allows only level 0 when the platform does not say otherwise.
    if lowest_level != 0 || target & !MPIDR_AFF_MASK != 0 {
        return ret::INVALID_PARAMETERS;
    }
    match vm.vcpu_by_mpidr(target) {
        None => ret::INVALID_PARAMETERS,
        Some(i) if vm.vcpu_is_on(i) => affinity::ON,
        Some(_) => affinity::OFF,
    }
}

/// The MPIDR affinity kestrel gives vCPU `index`: 16 per cluster (Aff0), like
/// GICv3's target lists, clusters in Aff1.
pub const fn vcpu_mpidr(index: usize) -> u64 {
    ((index as u64 / 16) << 8) | (index as u64 % 16)
}

/// The inverse of [`vcpu_mpidr`], for a VM of `vcpus` vCPUs.
pub fn vcpu_index_of_mpidr(mpidr: u64, vcpus: usize) -> Option<usize> {
    if mpidr & !0xFFFF != 0 {
        return None;
    }
    let aff0 = (mpidr & 0xFF) as usize;
    let aff1 = ((mpidr >> 8) & 0xFF) as usize;
    if aff0 >= 16 {
        return None;
    }
    let index = aff1 * 16 + aff0;
    (index < vcpus).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeVm {
        on: Vec<bool>,
        started: Vec<(usize, u64, u64)>,
        pv_time: bool,
    }

    impl PsciVm for FakeVm {
        fn vcpu_by_mpidr(&self, mpidr: u64) -> Option<usize> {
            vcpu_index_of_mpidr(mpidr, self.on.len())
        }
        fn vcpu_is_on(&self, i: usize) -> bool {
            self.on[i]
        }
        fn is_guest_ram(&self, addr: u64) -> bool {
            (0x4000_0000..0x5000_0000).contains(&addr)
        }
        fn start_vcpu(&mut self, i: usize, entry: u64, ctx: u64) -> bool {
            if self.on[i] {
                return false;
            }
            self.on[i] = true;
            self.started.push((i, entry, ctx));
            true
        }
        fn pv_time_offered(&self) -> bool {
            self.pv_time
        }
    }

    fn vm(n: usize) -> FakeVm {
        let mut on = vec![false; n];
        on[0] = true;
        FakeVm {
            on,
            started: vec![],
            pv_time: false,
        }
    }

    #[test]
    fn versions_and_migrate_info() {
        let mut v = vm(2);
        assert_eq!(handle(&mut v, [0x8400_0000, 0, 0, 0]).x0, PSCI_VERSION_1_1);
        assert_eq!(handle(&mut v, [0x8000_0000, 0, 0, 0]).x0, SMCCC_VERSION_1_1);
        assert_eq!(handle(&mut v, [0x8400_0006, 0, 0, 0]).x0, 2);
    }

    #[test]
    fn cpu_on_starts_a_vcpu_once() {
        let mut v = vm(4);
        let out = handle(&mut v, [0xC400_0003, 2, 0x4008_0000, 0x1234]);
        assert_eq!(out, Outcome::ret(ret::SUCCESS));
        assert_eq!(v.started, [(2, 0x4008_0000, 0x1234)]);
        assert_eq!(
            handle(&mut v, [0xC400_0003, 2, 0x4008_0000, 0]).x0,
            ret::ALREADY_ON
        );
        assert_eq!(handle(&mut v, [0xC400_0004, 2, 0, 0]).x0, affinity::ON);
        assert_eq!(handle(&mut v, [0xC400_0004, 3, 0, 0]).x0, affinity::OFF);
    }

    #[test]
    fn cpu_on_refuses_bad_targets_and_entries() {
        let mut v = vm(4);
        assert_eq!(
            handle(&mut v, [0xC400_0003, 4, 0x4000_0000, 0]).x0,
            ret::INVALID_PARAMETERS
        );
        assert_eq!(
            handle(&mut v, [0xC400_0003, 1 << 40, 0x4000_0000, 0]).x0,
            ret::INVALID_PARAMETERS
        );
        assert_eq!(
            handle(&mut v, [0xC400_0003, 1, 0x1000, 0]).x0,
            ret::INVALID_ADDRESS
        );
        assert_eq!(
            handle(&mut v, [0xC400_0003, 1, 0x4000_0002, 0]).x0,
            ret::INVALID_ADDRESS
        );
        assert_eq!(
            handle(&mut v, [0xC400_0003, u64::MAX, u64::MAX, 0]).x0,
            ret::INVALID_PARAMETERS
        );
        assert!(v.started.is_empty(), "nothing may start on a bad call");
    }

    #[test]
    fn aarch32_cpu_on_takes_thumb_entries() {
        let mut v = vm(4);
        let a32 = |v: &mut FakeVm, t: u64, e: u64| {
            handle_from(v, Caller::Aarch32, [0x8400_0003, t, e, 9]).x0
        };
        // Bit 0: T32 at the halfword-aligned address; the entry keeps its
        // bit 0 for the backend.
        assert_eq!(a32(&mut v, 1, 0x4000_1003), ret::SUCCESS);
        assert_eq!(a32(&mut v, 2, 0x4000_1001), ret::SUCCESS);
        // A32 entries are words: bit 1 alone is misaligned.
        assert_eq!(a32(&mut v, 3, 0x4000_1002), ret::INVALID_ADDRESS);
        assert_eq!(v.started, [(1, 0x4000_1003, 9), (2, 0x4000_1001, 9)]);
        // Outside RAM, Thumb or not; and the RAM's last byte + 1.
        let mut v = vm(2);
        assert_eq!(a32(&mut v, 1, 0x1001), ret::INVALID_ADDRESS);
        assert_eq!(a32(&mut v, 1, 0x5000_0001), ret::INVALID_ADDRESS);
        assert_eq!(a32(&mut v, 1, 0x3fff_ffff), ret::INVALID_ADDRESS);
        // An AArch64 caller's entries are words, bit 0 included.
        assert_eq!(
            handle(&mut v, [0xC400_0003, 1, 0x4000_1001, 0]).x0,
            ret::INVALID_ADDRESS
        );
        assert!(v.started.is_empty());
        assert!(Caller::Aarch32.entry_aligned(0x4000_0000));
        assert!(!Caller::Aarch64.entry_aligned(0x4000_0001));
    }

    #[test]
    fn smc32_cpu_on_ignores_upper_halves() {
        let mut v = vm(2);
        let out = handle(
            &mut v,
            [0x8400_0003, 0xFFFF_FFFF_0000_0001, 0xAAAA_AAAA_4000_1000, 7],
        );
        assert_eq!(out.x0, ret::SUCCESS);
        assert_eq!(v.started, [(1, 0x4000_1000, 7)]);
    }

    #[test]
    fn effects() {
        let mut v = vm(1);
        assert_eq!(
            handle(&mut v, [0x8400_0002, 0, 0, 0]).effect,
            Effect::CpuOff
        );
        assert_eq!(
            handle(&mut v, [0x8400_0008, 0, 0, 0]).effect,
            Effect::SystemOff
        );
        assert_eq!(
            handle(&mut v, [0x8400_0009, 0, 0, 0]).effect,
            Effect::SystemReset
        );
        assert_eq!(handle(&mut v, [0xC400_0001, 0, 0, 0]).effect, Effect::Block);
    }

    #[test]
    fn features_and_unknown_ids() {
        let mut v = vm(1);
        assert_eq!(handle(&mut v, [0x8400_000A, 0xC400_0003, 0, 0]).x0, 0);
        assert_eq!(handle(&mut v, [0x8400_000A, 0x8400_0008, 0, 0]).x0, 0);
        assert_eq!(
            handle(&mut v, [0x8400_000A, 0x8400_0005, 0, 0]).x0,
            ret::NOT_SUPPORTED
        );
        assert_eq!(
            handle(&mut v, [0x8000_0001, 0x8000_8000, 0, 0]).x0,
            ret::NOT_SUPPORTED
        );
        for id in [
            0x8400_0005u64,
            0x8400_00FF,
            0xC400_0000,
            0x1_8400_0000,
            u64::MAX,
            0,
        ] {
            let out = handle(&mut v, [id, 1, 2, 3]);
            assert_eq!(out, Outcome::ret(ret::NOT_SUPPORTED), "id {id:#x}");
        }
    }

    #[test]
    fn arch_features_says_pv_time_exists_only_when_offered() {
        let mut v = vm(1);
        let q = |v: &mut FakeVm, id: u64| handle(v, [0x8000_0001, id, 0, 0]).x0;
        assert_eq!(q(&mut v, 0xC500_0020), ret::NOT_SUPPORTED);
        v.pv_time = true;
        assert_eq!(q(&mut v, 0xC500_0020), ret::SUCCESS);
        // The upper half of x1 is not the SMC32 call's: ignored.
        assert_eq!(q(&mut v, 0xFFFF_FFFF_C500_0020), ret::SUCCESS);
        // Only the features call is probed this way; the SMC32 spelling
        // does not exist.
        for id in [0xC500_0021u64, 0x8500_0020, 0xC500_0022, 0xC500_0000] {
            assert_eq!(q(&mut v, id), ret::NOT_SUPPORTED, "{id:#x}");
        }
        // The SMC64 spelling of ARCH_FEATURES is not a call.
        assert_eq!(
            handle(&mut v, [0xC000_0001, 0xC500_0020, 0, 0]).x0,
            ret::NOT_SUPPORTED
        );
    }

    #[test]
    fn classifies_function_ranges() {
        assert!(is_psci_or_arch(0x8400_0000));
        assert!(is_psci_or_arch(0xC400_0003));
        assert!(is_psci_or_arch(0x8000_0001));
        assert!(!is_psci_or_arch(0xC600_0002));
        assert!(!is_psci_or_arch(0x1_8400_0000));
    }

    #[test]
    fn mpidr_mapping_round_trips() {
        for i in 0..40 {
            assert_eq!(vcpu_index_of_mpidr(vcpu_mpidr(i), 40), Some(i));
        }
        assert_eq!(vcpu_index_of_mpidr(vcpu_mpidr(5), 5), None);
        assert_eq!(
            vcpu_index_of_mpidr(0x10, 40),
            None,
            "Aff0 >= 16 is never used"
        );
    }
}
