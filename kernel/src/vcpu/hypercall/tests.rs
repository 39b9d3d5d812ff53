//! Hypercall tests: every guest-controlled value, good and bad, on both ABIs.

use super::*;
use crate::vcpu::ipi::tests::FakeVm;
use crate::vcpu::stats::{Snapshot, Stats};
use kestrel_abi::stat;

struct Env {
    vm: FakeVm,
    sender: usize,
    stats: Stats,
    pv_ipi: bool,
}

impl Env {
    fn new(vcpus: usize) -> Self {
        Self {
            vm: FakeVm::new(vcpus),
            sender: 0,
            stats: Stats::new(),
            pv_ipi: true,
        }
    }

    fn pending(&self) -> Vec<usize> {
        (0..self.vm.pending.len())
            .filter(|&i| self.vm.pending[i].get())
            .collect()
    }
}

impl HypercallEnv for Env {
    fn send_ipi(&mut self, w: &IpiWindow) -> Result<IpiOutcome, IpiError> {
        let out = crate::vcpu::ipi::send(&self.vm, self.sender, w)?;
        self.stats.record_ipi(&out);
        Ok(out)
    }
    fn read_stat(&self, index: u64) -> Option<u64> {
        self.stats.read_index(index)
    }
    fn pv_ipi_offered(&self) -> bool {
        self.pv_ipi
    }
}

fn la(function: u64, args: [u64; 5]) -> HypercallArgs {
    HypercallArgs {
        code: loongarch::SERVICE_KVM,
        function,
        args,
    }
}

fn arm(function: u64, args: [u64; 5]) -> HypercallArgs {
    HypercallArgs {
        code: 0,
        function,
        args,
    }
}

const IPI_ARM: u64 = arm64::IPI_SEND as u64;

#[test]
fn loongarch_ipi_as_kvm() {
    let mut env = Env::new(130);
    let r = dispatch(
        Abi::LoongArch,
        &la(1, [0b110, 1, 0, 0xdead, 0xbeef]),
        &mut env,
    );
    assert_eq!(r.regs(), [0], "success, and only a0 is written");
    assert_eq!(env.pending(), [1, 2, 64]);
    assert_eq!(env.stats.get(crate::vcpu::stats::Counter::IpiSent), 1);
    assert_eq!(env.stats.read_index(stat::IPI_DELIVERED), Some(3));
}

#[test]
fn arm64_ipi_send() {
    let mut env = Env::new(20);
    let r = dispatch(Abi::Arm64, &arm(IPI_ARM, [1, 0, 19, 0, 0]), &mut env);
    assert_eq!(r.code(), 0);
    assert_eq!(env.pending(), [19]);
}

/// A VM with `pv_ipi = false`: the send is refused on both ABIs as KVM
/// refuses a function it lacks (-1), nothing is delivered or counted, the
/// features query leaves the bit out; the other calls still work.
#[test]
fn hidden_pv_ipi_is_refused_and_not_advertised() {
    let mut env = Env::new(8);
    env.pv_ipi = false;
    let r = dispatch(
        Abi::LoongArch,
        &la(loongarch::FN_IPI, [0b110, 0, 0, 0, 0]),
        &mut env,
    );
    assert_eq!(r.regs(), [ret::INVALID_CODE as u64]);
    let r = dispatch(Abi::Arm64, &arm(IPI_ARM, [1, 0, 3, 0, 0]), &mut env);
    assert_eq!(r.code(), ret::INVALID_CODE);
    assert!(env.pending().is_empty());
    assert_eq!(env.stats.get(crate::vcpu::stats::Counter::IpiSent), 0);
    for (abi, args) in [
        (Abi::LoongArch, la(loongarch::FN_KESTREL_FEATURES, [0; 5])),
        (Abi::Arm64, arm(arm64::FEATURES.into(), [0; 5])),
    ] {
        let r = dispatch(abi, &args, &mut env);
        assert_eq!(r.x0(), features::ALL & !features::PV_IPI);
        assert_eq!(r.x0() & features::STATS, features::STATS);
    }
    let r = dispatch(
        Abi::LoongArch,
        &la(loongarch::FN_KESTREL_PROBE, [0; 5]),
        &mut env,
    );
    assert_eq!(r.regs(), [KESTREL_MAGIC]);
    // Offered again: the same send goes through.
    env.pv_ipi = true;
    let r = dispatch(
        Abi::LoongArch,
        &la(loongarch::FN_IPI, [0b110, 0, 0, 0, 0]),
        &mut env,
    );
    assert_eq!(r.regs(), [0]);
    assert_eq!(env.pending(), [1, 2]);
}

/// Each bad input gets its documented code, delivers nothing and changes no
/// counter.
#[test]
fn bad_input_changes_nothing() {
    let n = 4u64;
    let cases: Vec<(Abi, HypercallArgs, i64)> = vec![
        // IPI windows, LoongArch.
        (Abi::LoongArch, la(1, [0, 0, 0, 0, 0]), -2), // all-zero bitmap
        (Abi::LoongArch, la(1, [1, 0, n, 0, 0]), -2), // min == vCPU count
        (Abi::LoongArch, la(1, [1, 0, u64::MAX, 0, 0]), -2), // huge min
        (Abi::LoongArch, la(1, [0b1_0001, 0, 0, 0, 0]), -2), // bit 4: no vCPU 4, bit 0 not delivered either
        (Abi::LoongArch, la(1, [1, 1 << 63, 0, 0, 0]), -2),  // bit 127
        (Abi::LoongArch, la(1, [0b11, 0, n - 1, 0, 0]), -2), // runs off the end
        (Abi::LoongArch, la(1, [1 << 5, 0, u64::MAX - 2, 0, 0]), -2), // min + bit overflows
        // Same on arm64.
        (Abi::Arm64, arm(IPI_ARM, [0, 0, 0, 0, 0]), -2),
        (Abi::Arm64, arm(IPI_ARM, [1, 0, n, 0, 0]), -2),
        (Abi::Arm64, arm(IPI_ARM, [u64::MAX, u64::MAX, 0, 0, 0]), -2),
        // Unknown codes and functions.
        (
            Abi::LoongArch,
            HypercallArgs {
                code: 0,
                function: 1,
                args: [1, 0, 0, 0, 0],
            },
            -1,
        ),
        (
            Abi::LoongArch,
            HypercallArgs {
                code: loongarch::SERVICE_SWDBG,
                function: 1,
                args: [1, 0, 0, 0, 0],
            },
            -1,
        ),
        (
            Abi::LoongArch,
            HypercallArgs {
                code: 0x7FFF,
                function: 1,
                args: [1, 0, 0, 0, 0],
            },
            -1,
        ),
        (
            Abi::LoongArch,
            HypercallArgs {
                code: u32::MAX,
                function: 1,
                args: [1, 0, 0, 0, 0],
            },
            -1,
        ),
        (Abi::LoongArch, la(0, [1, 0, 0, 0, 0]), -1),
        (Abi::LoongArch, la(3, [1, 0, 0, 0, 0]), -1),
        (Abi::LoongArch, la(u64::MAX, [1, 0, 0, 0, 0]), -1),
        (Abi::LoongArch, la(1 << 40 | 1, [1, 0, 0, 0, 0]), -1), // a0 is compared in full
        (
            Abi::LoongArch,
            la(loongarch::FN_KESTREL_STATS + 1, [0; 5]),
            -1,
        ),
        (
            Abi::LoongArch,
            la(loongarch::FN_NOTIFY, [2, 0x1000 | 1, 0, 0, 0]),
            -1,
        ), // steal time unsupported
        (Abi::Arm64, arm(0, [1, 0, 0, 0, 0]), -1),
        (Abi::Arm64, arm(0xC600_0004, [0; 5]), -1),
        (Abi::Arm64, arm(0xC600_FFFF, [0; 5]), -1),
        (Abi::Arm64, arm(0xC600_FF02, [0; 5]), -1),
        (Abi::Arm64, arm(0x8400_0000, [0; 5]), -1), // PSCI is not ours
        (Abi::Arm64, arm(u64::MAX, [0; 5]), -1),
        // Statistics index out of range.
        (
            Abi::LoongArch,
            la(loongarch::FN_KESTREL_STATS, [stat::COUNT, 0, 0, 0, 0]),
            -2,
        ),
        (
            Abi::LoongArch,
            la(loongarch::FN_KESTREL_STATS, [u64::MAX, 0, 0, 0, 0]),
            -2,
        ),
        (
            Abi::Arm64,
            arm(arm64::STATS.into(), [stat::COUNT, 0, 0, 0, 0]),
            -2,
        ),
        (
            Abi::Arm64,
            arm(arm64::STATS.into(), [1 << 32, 0, 0, 0, 0]),
            -2,
        ),
    ];
    for (abi, args, want) in cases {
        let mut env = Env::new(n as usize);
        let before: Snapshot = env.stats.snapshot();
        let r = dispatch(abi, &args, &mut env);
        assert_eq!(r.code(), want, "{abi:?} {args:x?}");
        assert_eq!(r.regs().len(), 1, "errors write a0/x0 only");
        assert!(env.pending().is_empty(), "{args:x?} delivered something");
        assert!(env.vm.kicks.borrow().is_empty());
        assert_eq!(env.stats.snapshot(), before, "{args:x?} changed a counter");
    }
}

#[test]
fn smccc_upper_half_of_x0_is_ignored() {
    // SMCCC passes the function id in w0.
    let mut env = Env::new(2);
    let r = dispatch(
        Abi::Arm64,
        &arm(0xFFFF_FFFF_0000_0000 | IPI_ARM, [1, 0, 0, 0, 0]),
        &mut env,
    );
    assert_eq!(r.code(), 0);
    assert_eq!(env.pending(), [0]);
}

#[test]
fn discovery_and_queries() {
    let mut env = Env::new(1);
    let r = dispatch(
        Abi::LoongArch,
        &la(loongarch::FN_KESTREL_PROBE, [9; 5]),
        &mut env,
    );
    assert_eq!(r.regs(), [KESTREL_MAGIC]);
    let r = dispatch(
        Abi::LoongArch,
        &la(loongarch::FN_KESTREL_FEATURES, [0; 5]),
        &mut env,
    );
    assert_eq!(r.x0(), features::ALL);
    for id in [arm64::CALL_UID, arm64::CALL_UID | 0x4000_0000] {
        let r = dispatch(Abi::Arm64, &arm(id.into(), [0; 5]), &mut env);
        let want: Vec<u64> = arm64::KESTREL_UID.iter().map(|&w| u64::from(w)).collect();
        assert_eq!(r.regs(), want);
    }
    let r = dispatch(Abi::Arm64, &arm(arm64::CALL_COUNT.into(), [0; 5]), &mut env);
    assert_eq!(r.regs(), [arm64::FUNCTION_COUNT]);
    let r = dispatch(Abi::Arm64, &arm(arm64::REVISION.into(), [0; 5]), &mut env);
    assert_eq!(r.regs(), [1, 0]);
    let r = dispatch(Abi::Arm64, &arm(arm64::FEATURES.into(), [0; 5]), &mut env);
    assert_eq!(r.x0(), features::ALL);
}

#[test]
fn stats_query_reads_the_vm_counters() {
    let mut env = Env::new(2);
    env.stats.exit(crate::vcpu::stats::ExitReason::Mmio);
    env.stats.exit(crate::vcpu::stats::ExitReason::Mmio);
    let r = dispatch(
        Abi::LoongArch,
        &la(loongarch::FN_KESTREL_STATS, [stat::EXIT_MMIO, 0, 0, 0, 0]),
        &mut env,
    );
    assert_eq!(r.regs(), [2]);
    let r = dispatch(
        Abi::Arm64,
        &arm(arm64::STATS.into(), [stat::EXIT_MMIO, 0, 0, 0, 0]),
        &mut env,
    );
    assert_eq!(r.regs(), [2]);
}

#[test]
fn cpucfg_kvm_range() {
    for pv_ipi in [true, false] {
        assert_eq!(cpucfg(0x4000_0000, pv_ipi), Some(0x004D_564B));
        assert_eq!(cpucfg(0x4000_0008, pv_ipi), Some(0));
        assert_eq!(cpucfg(0x4000_0100, pv_ipi), None);
        assert_eq!(cpucfg(2, pv_ipi), None);
    }
    // The feature word: the IPI bit only when the VM is offered the PV IPI.
    assert_eq!(cpucfg(0x4000_0004, true), Some(1 << 1));
    assert_eq!(cpucfg(0x4000_0004, false), Some(0));
}

/// Random register contents: never a panic, always a documented answer, and
/// a failed IPI never delivers.
#[test]
fn random_registers_never_panic() {
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000 {
        let abi = if i % 2 == 0 {
            Abi::LoongArch
        } else {
            Abi::Arm64
        };
        // Bias towards valid codes and small function ids so every path runs.
        let code = if next() % 4 == 0 {
            next() as u32
        } else {
            loongarch::SERVICE_KVM
        };
        let function = match next() % 4 {
            0 => next(),
            1 => next() % 4,
            2 => IPI_ARM,
            _ => loongarch::FN_KESTREL_PROBE + next() % 4,
        };
        let mut args = [next(), next(), next() % 300, next(), next()];
        if next() % 2 == 0 {
            args[0] &= 0xFF;
            args[1] = 0;
        }
        let mut env = Env::new(1 + (next() % 200) as usize);
        let r = dispatch(
            abi,
            &HypercallArgs {
                code,
                function,
                args,
            },
            &mut env,
        );
        let c = r.code();
        assert!(c >= -2, "undocumented code {c}");
        if c < 0 {
            assert!(env.pending().is_empty());
        }
    }
}
