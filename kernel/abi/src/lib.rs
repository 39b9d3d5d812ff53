//! kestrel's guest-visible ABI, shared by the hypervisor, the test guests and the tools.
//!
//! Every number a guest can pass to, or get back from, kestrel lives here (and
//! is mirrored in `docs/hypercalls.md`). The crate is `no_std`, has no
//! dependencies and contains no code that touches hardware, so a test guest can
//! link it as is.
//!
//! # Return codes (both architectures)
//!
//! | value | meaning |
//! |-------|---------|
//! | `0` ([`ret::SUCCESS`]) | success |
//! | `-1` ([`ret::INVALID_CODE`]) | unknown service code or function (also "not supported") |
//! | `-2` ([`ret::INVALID_PARAMETER`]) | an argument was out of range; nothing was done |
//!
//! Queries that return a value (probe, features, statistics, SMCCC UID...)
//! return it in a0/x0 instead of `0`; such values are always below `2^63`, so
//! a negative value is always an error code.
//!
//! # LoongArch (`hvcl`), as Linux KVM
//!
//! `hvcl code` encodes as [`loongarch::HVCL_BASE`]` | code`. Service code
//! [`loongarch::SERVICE_KVM`] (`0x100`): function in a0, arguments in a1-a5,
//! result in a0; no other register is clobbered; the PC advances by 4.
//!
//! | a0 (function) | arguments | result |
//! |---------------|-----------|--------|
//! | [`loongarch::FN_IPI`] = 1 | a1 = bitmap bits 0-63, a2 = bits 64-127, a3 = `min` (CPU id of bit 0) | 0 / -2 |
//! | [`loongarch::FN_NOTIFY`] = 2 | steal time (a1 = [`loongarch::KVM_FEATURE_STEAL_TIME`], a2 = GPA of the 64-byte record \| 1, or 0 to stop) | 0 / -2 (LVZ backend); -1 (trap-and-emulate) |
//! | [`loongarch::FN_KESTREL_PROBE`] | none | [`KESTREL_MAGIC`] |
//! | [`loongarch::FN_KESTREL_FEATURES`] | none | [`features`] bitmap |
//! | [`loongarch::FN_KESTREL_STATS`] | a1 = counter index ([`stat`]) | counter value / -2 |
//!
//! Discovery: on LVZ hardware, `cpucfg` [`loongarch::CPUCFG_KVM_SIG`] returns
//! [`loongarch::KVM_SIGNATURE`] ("KVM\0") and [`loongarch::CPUCFG_KVM_FEATURE`]
//! returns [`loongarch::KVM_FEATURE_IPI`] (unless the VM has `pv_ipi = false`),
//! [`loongarch::KVM_FEATURE_STEAL_TIME`], [`loongarch::KVM_FEATURE_PREEMPT`]
//! and [`loongarch::KVM_FEATURE_VIRT_EXTIOI`] (kestrel's LVZ backend). On stock QEMU `cpucfg` never traps,
//! so kestrel's own guests probe with `hvcl 0x100` and a0 =
//! [`loongarch::FN_KESTREL_PROBE`]: kestrel answers [`KESTREL_MAGIC`], KVM
//! answers -1. (`hvcl` is undecoded there and raises INE, which kestrel
//! emulates: the same instruction works under both.)
//!
//! # arm64 (SMCCC vendor-specific hypervisor service, HVC or SMC)
//!
//! Function id in x0, arguments in x1-x5, results in x0 (x0-x3 for the UID).
//!
//! | x0 (function) | arguments | result |
//! |---------------|-----------|--------|
//! | [`arm64::CALL_COUNT`] `0x8600_FF00` / `0xC600_FF00` | none | number of kestrel functions |
//! | [`arm64::CALL_UID`] `0x8600_FF01` / `0xC600_FF01` | none | x0-x3 = [`arm64::KESTREL_UID`] |
//! | [`arm64::REVISION`] `0x8600_FF03` / `0xC600_FF03` | none | x0 = major, x1 = minor |
//! | [`arm64::FEATURES`] `0xC600_0001` | none | [`features`] bitmap |
//! | [`arm64::IPI_SEND`] `0xC600_0002` | x1 = bitmap low, x2 = high, x3 = `min` (vCPU linear id of bit 0) | 0 / -2 |
//! | [`arm64::STATS`] `0xC600_0003` | x1 = counter index ([`stat`]) | counter value / -2 |
//!
//! The SMCCC spec defines the generic queries (count, UID, revision) as SMC32
//! (`0x86..`); kestrel accepts both the SMC32 and the SMC64 spelling. Any other
//! id returns -1 (`NOT_SUPPORTED` in SMCCC terms).
//!
//! # The IPI window
//!
//! A send names up to 128 targets: bit `i` of the 128-bit bitmap (a1 = bits
//! 0-63, a2 = bits 64-127) names the vCPU with id `min + i`. The hypervisor
//! validates the whole window first: an all-zero bitmap, a `min` beyond the
//! VM's vCPUs, a bit naming a vCPU that does not exist, or `min + i`
//! overflowing all return -2 and deliver nothing. [`IpiWindows`] packs a list
//! of target ids into windows for the guest side.
#![no_std]

pub mod image;
pub mod package;

/// Return codes, in a0 / x0 (sign-extended to 64 bits).
pub mod ret {
    /// Success.
    pub const SUCCESS: i64 = 0;
    /// Unknown service code or function, or a function kestrel does not support.
    pub const INVALID_CODE: i64 = -1;
    /// An argument was out of range; the call had no effect.
    pub const INVALID_PARAMETER: i64 = -2;
}

/// "kestrel\0" as a little-endian u64 with the top bit clear: the answer to a probe.
pub const KESTREL_MAGIC: u64 = u64::from_le_bytes(*b"kestrel\0");

/// Bits of the feature bitmap returned by the kestrel features query.
pub mod features {
    /// PV IPI send (128-wide windows).
    pub const PV_IPI: u64 = 1 << 0;
    /// Statistics query.
    pub const STATS: u64 = 1 << 1;
    /// Everything this version implements.
    pub const ALL: u64 = PV_IPI | STATS;
}

/// LoongArch: `hvcl` service codes, KVM-compatible functions, `cpucfg` discovery.
pub mod loongarch {
    /// `hvcl code` = `HVCL_BASE | code` (code is 15 bits).
    pub const HVCL_BASE: u32 = 0x002B_8000;
    /// Mask of the code field of `hvcl`.
    pub const HVCL_CODE_MASK: u32 = 0x7FFF;
    /// The KVM service code: `hvcl 0x100`.
    pub const SERVICE_KVM: u32 = 0x100;
    /// KVM's software-debug code (`hvcl 0x101`): not a hypercall, kestrel returns -1.
    pub const SERVICE_SWDBG: u32 = 0x101;

    /// Function 1: send an IPI to a 128-wide window of vCPUs.
    pub const FN_IPI: u64 = 1;
    /// Function 2: steal-time notification (KVM's NOTIFY): a1 =
    /// [`KVM_FEATURE_STEAL_TIME`], a2 = the record's guest physical address
    /// | 1, or 0 to stop. The LVZ backend implements it; trap-and-emulate
    /// returns -1.
    pub const FN_NOTIFY: u64 = 2;
    /// kestrel probe: returns [`crate::KESTREL_MAGIC`] ("kst" in the top bytes).
    pub const FN_KESTREL_PROBE: u64 = 0x6B73_7400;
    /// kestrel features: returns the [`crate::features`] bitmap.
    pub const FN_KESTREL_FEATURES: u64 = 0x6B73_7401;
    /// kestrel statistics: a1 = counter index, returns the value.
    pub const FN_KESTREL_STATS: u64 = 0x6B73_7402;

    /// `cpucfg` index of the hypervisor signature.
    pub const CPUCFG_KVM_SIG: u32 = 0x4000_0000;
    /// `cpucfg` index of the PV feature bits.
    pub const CPUCFG_KVM_FEATURE: u32 = 0x4000_0004;
    /// Last index of the range reserved for the hypervisor.
    pub const CPUCFG_KVM_LAST: u32 = 0x4000_00FF;
    /// "KVM\0": kestrel speaks KVM's PV ABI, so it answers with KVM's signature.
    pub const KVM_SIGNATURE: u32 = 0x004D_564B;
    /// Feature bit: PV IPI (function 1).
    pub const KVM_FEATURE_IPI: u32 = 1 << 1;
    /// Feature bit: steal time (function 2; KVM's `struct kvm_steal_time`).
    pub const KVM_FEATURE_STEAL_TIME: u32 = 1 << 2;
    /// Feature bit: the steal-time record's `preempted` byte (offset 16)
    /// is [`KVM_VCPU_PREEMPTED`] while the vCPU is descheduled although
    /// runnable, 0 while it runs (Linux's `vcpu_is_preempted()`).
    pub const KVM_FEATURE_PREEMPT: u32 = 1 << 3;
    /// Feature bit: the EIOINTC's virtual extension (its registers at IOCSR
    /// `0x4000_0000`/`0x4000_0004`): route bytes may be CPU numbers, so a
    /// device interrupt reaches any of 256 vCPUs.
    pub const KVM_FEATURE_VIRT_EXTIOI: u32 = 1 << 24;
    /// The `preempted` byte's value for a preempted vCPU.
    pub const KVM_VCPU_PREEMPTED: u8 = 1;

    /// Encode `hvcl code`.
    pub const fn hvcl(code: u32) -> u32 {
        HVCL_BASE | (code & HVCL_CODE_MASK)
    }
}

/// arm64: SMCCC vendor-specific hypervisor service function ids.
pub mod arm64 {
    /// First id of the SMC64 fast-call vendor hypervisor range.
    pub const VENDOR_HYP_BASE: u32 = 0xC600_0000;
    /// Last id of the SMC64 fast-call vendor hypervisor range.
    pub const VENDOR_HYP_LAST: u32 = 0xC600_FFFF;
    /// Call count query (SMC32 spelling; `| 0x4000_0000` is accepted too).
    pub const CALL_COUNT: u32 = 0x8600_FF00;
    /// UID query (SMC32 spelling).
    pub const CALL_UID: u32 = 0x8600_FF01;
    /// Revision query (SMC32 spelling).
    pub const REVISION: u32 = 0x8600_FF03;
    /// Feature bitmap query.
    pub const FEATURES: u32 = 0xC600_0001;
    /// PV IPI send: x1 = bitmap low, x2 = high, x3 = `min`.
    pub const IPI_SEND: u32 = 0xC600_0002;
    /// Statistics query: x1 = counter index.
    pub const STATS: u32 = 0xC600_0003;
    /// The virtual SGI a PV IPI (`IPI_SEND`) delivers on arm64. SGIs 0-7
    /// are the guest's own (Linux uses them for its IPIs); kestrel's is the
    /// last one. The guest enables it like any SGI (GICv3: group 1 in
    /// GICR_IGROUPR0, GICR_ISENABLER0; GICv2: GICD_ISENABLER0) and takes it
    /// from its CPU interface with no exit (on GICv2 the source CPU field
    /// names the sender).
    pub const PV_IPI_SGI: u32 = 15;
    /// Number of functions in the kestrel range (FEATURES, IPI_SEND, STATS).
    pub const FUNCTION_COUNT: u64 = 3;
    /// Paravirtual stolen time (Arm DEN0057A, SMCCC standard hypervisor
    /// service, SMC64 only): PV_TIME_FEATURES, w1 = the id to query.
    pub const PV_TIME_FEATURES: u32 = 0xC500_0020;
    /// PV_TIME_ST: the IPA of the calling vCPU's stolen-time record.
    pub const PV_TIME_ST: u32 = 0xC500_0021;
    /// Revision returned by [`REVISION`]: major.
    pub const REVISION_MAJOR: u64 = 1;
    /// Revision returned by [`REVISION`]: minor.
    pub const REVISION_MINOR: u64 = 0;
    /// kestrel's UUID `4b455354-524c-4e8a-9c1f-6b6573747265`, byte by byte.
    pub const KESTREL_UUID: [u8; 16] = [
        0x4b, 0x45, 0x53, 0x54, 0x52, 0x4c, 0x4e, 0x8a, 0x9c, 0x1f, 0x6b, 0x65, 0x73, 0x74, 0x72,
        0x65,
    ];
    /// [`KESTREL_UUID`] as the four 32-bit words SMCCC returns in x0-x3
    /// (word `i` = bytes `4i..4i+4`, little-endian).
    pub const KESTREL_UID: [u32; 4] = [uid_word(0), uid_word(1), uid_word(2), uid_word(3)];

    const fn uid_word(i: usize) -> u32 {
        let b = &KESTREL_UUID;
        u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    }
}

/// Indices of the counters readable through the statistics query.
///
/// These are guest-visible and never renumbered; new counters are appended.
pub mod stat {
    /// Exits: hypercalls.
    pub const EXIT_HYPERCALL: u64 = 0;
    /// Exits: system register / CSR / IOCSR / cpucfg traps.
    pub const EXIT_SYSREG: u64 = 1;
    /// Exits: MMIO (stage-2 faults on emulated devices).
    pub const EXIT_MMIO: u64 = 2;
    /// Exits: WFI / WFE / `idle`.
    pub const EXIT_IDLE: u64 = 3;
    /// Exits: physical interrupts.
    pub const EXIT_IRQ: u64 = 4;
    /// Exits: FP/SIMD traps.
    pub const EXIT_FP: u64 = 5;
    /// Exits: emulated (non-PV) IPI sends and acks.
    pub const EXIT_IPI: u64 = 6;
    /// Exits: timer emulation.
    pub const EXIT_TIMER: u64 = 7;
    /// Exits: guest aborts that are not MMIO.
    pub const EXIT_ABORT: u64 = 8;
    /// Exits: anything else.
    pub const EXIT_OTHER: u64 = 9;
    /// FP/SIMD saves of the VM's registers caused by its own vCPUs (a save
    /// another VM's FP use causes is counted for the host, not here).
    pub const FP_SAVES: u64 = 10;
    /// FP/SIMD state restores.
    pub const FP_RESTORES: u64 = 11;
    /// FP/SIMD traps handled by the lazy engine.
    pub const FP_TRAPS: u64 = 12;
    /// VMID lookups satisfied by the lock-free fast path.
    pub const VMID_FAST: u64 = 13;
    /// VMID lookups that took the allocator lock.
    pub const VMID_SLOW: u64 = 14;
    /// VMID generation rollovers: always 0 for a VM (counted for the host,
    /// whichever VM's load met them; docs/hypercalls.md).
    pub const VMID_ROLLOVERS: u64 = 15;
    /// TLB invalidations of all VMIDs: always 0 for a VM (the host's, as
    /// rollovers).
    pub const TLB_FLUSHES: u64 = 16;
    /// PV IPI hypercalls accepted.
    pub const IPI_SENT: u64 = 17;
    /// IPI targets newly marked pending.
    pub const IPI_DELIVERED: u64 = 18;
    /// IPI targets that were already pending (no work).
    pub const IPI_COALESCED: u64 = 19;
    /// Guest RAM blocks (2 MiB) zeroed at their first touch (arm64).
    pub const LAZY_ZERO: u64 = 20;
    /// Emulated IPIs sent through the interrupt controller's registers
    /// (LoongArch IOCSR IPI_SEND), the path PV IPIs replace.
    pub const IPI_EMULATED: u64 = 21;
    /// Of the FP traps, those of SVE instructions (arm64, EC 0x19).
    pub const SVE_TRAPS: u64 = 22;
    /// Of the FP saves, those of the whole SVE state (Z, P, FFR at the
    /// VM's vector length) rather than V0-V31.
    pub const SVE_SAVES: u64 = 23;
    /// Of the FP restores, those of the whole SVE state.
    pub const SVE_RESTORES: u64 = 24;
    /// Number of counters.
    pub const COUNT: u64 = 25;
}

/// Guest side: packs ascending target ids into 128-wide IPI windows, the way
/// Linux's LoongArch PV IPI sender does.
///
/// ```
/// let mut w = kestrel_abi::IpiWindows::new();
/// assert_eq!(w.push(3), None);
/// assert_eq!(w.push(130), None);
/// let full = kestrel_abi::IpiWindow { low: 1, high: 1 << 63, min: 3 };
/// assert_eq!(w.push(131), Some(full));
/// assert_eq!(w.finish(), Some(kestrel_abi::IpiWindow { low: 1, high: 0, min: 131 }));
/// ```
#[derive(Debug, Default, Clone)]
pub struct IpiWindows {
    current: Option<IpiWindow>,
}

/// One PV IPI send: the three argument registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiWindow {
    /// Bitmap bits 0-63 (a1 / x1).
    pub low: u64,
    /// Bitmap bits 64-127 (a2 / x2).
    pub high: u64,
    /// Id of the target named by bit 0 (a3 / x3).
    pub min: u64,
}

impl IpiWindows {
    /// An empty packer.
    pub const fn new() -> Self {
        Self { current: None }
    }

    /// Add target `id`. Returns a full window to send first when `id` does not
    /// fit in the current one (it is then the start of the next window).
    pub fn push(&mut self, id: u64) -> Option<IpiWindow> {
        if let Some(w) = &mut self.current {
            if let Some(bit) = id.checked_sub(w.min).filter(|&b| b < 128) {
                if bit < 64 {
                    w.low |= 1 << bit;
                } else {
                    w.high |= 1 << (bit - 64);
                }
                return None;
            }
        }
        let done = self.current.take();
        self.current = Some(IpiWindow {
            low: 1,
            high: 0,
            min: id,
        });
        done
    }

    /// The last, partially filled window, if any.
    pub fn finish(self) -> Option<IpiWindow> {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_is_positive_and_not_an_error() {
        assert!((KESTREL_MAGIC as i64) > 0);
        assert_eq!(&KESTREL_MAGIC.to_le_bytes(), b"kestrel\0");
    }

    #[test]
    fn uid_words_are_little_endian_uuid_bytes() {
        assert_eq!(arm64::KESTREL_UID[0], 0x5453_454B);
        assert_eq!(arm64::KESTREL_UID[3], 0x6572_7473);
    }

    #[test]
    fn hvcl_encoding_matches_kvm() {
        assert_eq!(loongarch::hvcl(loongarch::SERVICE_KVM), 0x002B_8100);
        assert_eq!(loongarch::hvcl(0xFFFF), 0x002B_FFFF);
    }

    #[test]
    fn windows_pack_128_and_split_beyond() {
        let mut p = IpiWindows::new();
        let mut out = [None; 4];
        let mut n = 0;
        for id in [0u64, 63, 64, 127, 128, 300] {
            if let Some(w) = p.push(id) {
                out[n] = Some(w);
                n += 1;
            }
        }
        out[n] = p.finish();
        assert_eq!(
            out[0],
            Some(IpiWindow {
                low: 1 | 1 << 63,
                high: 1 | 1 << 63,
                min: 0
            })
        );
        assert_eq!(
            out[1],
            Some(IpiWindow {
                low: 1,
                high: 0,
                min: 128
            })
        );
        assert_eq!(
            out[2],
            Some(IpiWindow {
                low: 1,
                high: 0,
                min: 300
            })
        );
        assert_eq!(out[3], None);
    }

    #[test]
    fn descending_ids_start_new_windows() {
        let mut p = IpiWindows::new();
        assert_eq!(p.push(10), None);
        assert_eq!(
            p.push(5),
            Some(IpiWindow {
                low: 1,
                high: 0,
                min: 10
            })
        );
    }
}
