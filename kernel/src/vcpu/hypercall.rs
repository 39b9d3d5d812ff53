//! Hypercall decode and dispatch, for both architectures.
//!
//! The arch copies the guest's registers into [`HypercallArgs`], calls
//! [`dispatch`] with the calling vCPU as [`HypercallEnv`]
//! ([`crate::vm::exitctx::ExitCtx`]), writes
//! [`HypercallRet::regs`] back (a0 only on LoongArch; x0-x3 at most on
//! arm64) and advances the PC. All numbers are in `kestrel_abi` (and
//! `docs/hypercalls.md`).
//!
//! Guest input is never trusted: an unknown service code or function id
//! returns `INVALID_CODE` (-1), an out-of-range argument `INVALID_PARAMETER`
//! (-2), and in both cases nothing happens. Nothing here panics.
//!
//! LoongArch `cpucfg` discovery (KVM's 0x4000_0000 range) is answered by
//! [`cpucfg`] when the hardware traps it (LVZ); under trap-and-emulate the
//! guest probes with `hvcl 0x100`, a0 = `FN_KESTREL_PROBE` instead.

use crate::vcpu::ipi::{IpiError, IpiOutcome, IpiWindow};
use kestrel_abi::{arm64, features, loongarch, ret, KESTREL_MAGIC};

/// Which calling convention the registers follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// LoongArch `hvcl code`, function in a0 (Linux KVM compatible).
    LoongArch,
    /// arm64 SMCCC (HVC or SMC), function id in w0.
    Arm64,
}

/// The guest registers of a hypercall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HypercallArgs {
    /// LoongArch: the 15-bit `hvcl` code. arm64: unused (0).
    pub code: u32,
    /// a0 / x0.
    pub function: u64,
    /// a1-a5 / x1-x5.
    pub args: [u64; 5],
}

/// A decoded hypercall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hypercall {
    /// Send a PV IPI to a window of the caller's vCPUs.
    SendIpi(IpiWindow),
    /// LoongArch steal-time notification (not supported: -1).
    StealTime,
    /// LoongArch kestrel probe.
    Probe,
    /// kestrel feature bitmap.
    Features,
    /// Read statistics counter `index`.
    Stats {
        /// Counter index (`kestrel_abi::stat`).
        index: u64,
    },
    /// SMCCC vendor call count.
    CallCount,
    /// SMCCC vendor UID.
    CallUid,
    /// SMCCC vendor revision.
    Revision,
}

impl Hypercall {
    /// Decode; `None` means unknown code or function (-1).
    pub fn decode(abi: Abi, a: &HypercallArgs) -> Option<Self> {
        match abi {
            Abi::LoongArch => Self::decode_loongarch(a),
            Abi::Arm64 => Self::decode_arm64(a),
        }
    }

    fn decode_loongarch(a: &HypercallArgs) -> Option<Self> {
        if a.code != loongarch::SERVICE_KVM {
            return None;
        }
        Some(match a.function {
            loongarch::FN_IPI => Self::SendIpi(window(&a.args)),
            loongarch::FN_NOTIFY => Self::StealTime,
            loongarch::FN_KESTREL_PROBE => Self::Probe,
            loongarch::FN_KESTREL_FEATURES => Self::Features,
            loongarch::FN_KESTREL_STATS => Self::Stats { index: a.args[0] },
            _ => return None,
        })
    }

    fn decode_arm64(a: &HypercallArgs) -> Option<Self> {
        // SMCCC: the function id is w0; the upper half of x0 is ignored.
        let id = a.function as u32;
        // The generic queries are SMC32 in the spec; accept the SMC64 spelling too.
        let smc32 = id & !0x4000_0000;
        Some(match (id, smc32) {
            (_, arm64::CALL_COUNT) => Self::CallCount,
            (_, arm64::CALL_UID) => Self::CallUid,
            (_, arm64::REVISION) => Self::Revision,
            (arm64::FEATURES, _) => Self::Features,
            (arm64::IPI_SEND, _) => Self::SendIpi(window(&a.args)),
            (arm64::STATS, _) => Self::Stats { index: a.args[0] },
            _ => return None,
        })
    }
}

fn window(args: &[u64; 5]) -> IpiWindow {
    IpiWindow {
        low: args[0],
        high: args[1],
        min: args[2],
    }
}

/// What a hypercall needs from the calling VM.
pub trait HypercallEnv {
    /// Route a PV IPI from the calling vCPU (usually [`crate::vcpu::ipi::send`]
    /// plus [`crate::vcpu::stats::Stats::record_ipi`]).
    fn send_ipi(&mut self, window: &IpiWindow) -> Result<IpiOutcome, IpiError>;
    /// Statistics counter `index` of the calling VM; `None` if out of range.
    fn read_stat(&self, index: u64) -> Option<u64>;
    /// Whether the calling VM is offered the PV IPI (config `pv_ipi`): when
    /// not, the features query leaves it out and the send is refused with
    /// `INVALID_CODE`, what KVM answers a function it does not have.
    fn pv_ipi_offered(&self) -> bool;
}

/// Registers to write back: a0/x0 always, x1-x3 for some arm64 queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HypercallRet {
    regs: [u64; 4],
    len: usize,
}

impl HypercallRet {
    fn one(v: i64) -> Self {
        Self::value(v as u64)
    }

    fn value(v: u64) -> Self {
        Self {
            regs: [v, 0, 0, 0],
            len: 1,
        }
    }

    /// a0 / x0.
    pub fn x0(&self) -> u64 {
        self.regs[0]
    }

    /// a0 / x0 as a signed return code.
    pub fn code(&self) -> i64 {
        self.regs[0] as i64
    }

    /// Every register to write back, from x0 up.
    pub fn regs(&self) -> &[u64] {
        &self.regs[..self.len]
    }
}

/// Decode and run one hypercall for the calling VM.
pub fn dispatch(abi: Abi, args: &HypercallArgs, env: &mut impl HypercallEnv) -> HypercallRet {
    let Some(call) = Hypercall::decode(abi, args) else {
        return HypercallRet::one(ret::INVALID_CODE);
    };
    match call {
        Hypercall::SendIpi(_) if !env.pv_ipi_offered() => HypercallRet::one(ret::INVALID_CODE),
        Hypercall::SendIpi(w) => match env.send_ipi(&w) {
            Ok(_) => HypercallRet::one(ret::SUCCESS),
            Err(e) => HypercallRet::one(e.code()),
        },
        Hypercall::StealTime => HypercallRet::one(ret::INVALID_CODE),
        Hypercall::Probe => HypercallRet::value(KESTREL_MAGIC),
        Hypercall::Features if !env.pv_ipi_offered() => {
            HypercallRet::value(features::ALL & !features::PV_IPI)
        }
        Hypercall::Features => HypercallRet::value(features::ALL),
        Hypercall::Stats { index } => match env.read_stat(index) {
            // Keep values below 2^63 so they never read as an error code.
            Some(v) => HypercallRet::value(v & (u64::MAX >> 1)),
            None => HypercallRet::one(ret::INVALID_PARAMETER),
        },
        Hypercall::CallCount => HypercallRet::value(arm64::FUNCTION_COUNT),
        Hypercall::CallUid => {
            let u = arm64::KESTREL_UID.map(u64::from);
            HypercallRet { regs: u, len: 4 }
        }
        Hypercall::Revision => HypercallRet {
            regs: [arm64::REVISION_MAJOR, arm64::REVISION_MINOR, 0, 0],
            len: 2,
        },
    }
}

/// LoongArch `cpucfg` in KVM's hypervisor range (trapped on LVZ hardware):
/// the signature, the PV feature bits (the IPI bit only when `pv_ipi`, the
/// VM's config), 0 for the rest of the range; `None` outside it (the arch
/// emulates or passes those through).
pub fn cpucfg(index: u32, pv_ipi: bool) -> Option<u32> {
    if !(loongarch::CPUCFG_KVM_SIG..=loongarch::CPUCFG_KVM_LAST).contains(&index) {
        return None;
    }
    Some(match index {
        loongarch::CPUCFG_KVM_SIG => loongarch::KVM_SIGNATURE,
        loongarch::CPUCFG_KVM_FEATURE if pv_ipi => loongarch::KVM_FEATURE_IPI,
        _ => 0,
    })
}

#[cfg(test)]
mod tests;
