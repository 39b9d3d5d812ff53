//! Sets of CPUs as bitmasks: [`CpuMask`] of physical CPUs (the scheduler's
//! affinities and online set) and [`VcpuSet`] of one VM's vCPUs (interrupt
//! targets, wake-ups, PV IPI destinations).

/// A set of physical CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuMask(pub u64);

impl CpuMask {
    pub const fn single(cpu: usize) -> Self {
        CpuMask(1 << cpu)
    }

    /// CPUs `0..n`.
    pub const fn first(n: usize) -> Self {
        if n >= 64 {
            CpuMask(u64::MAX)
        } else {
            CpuMask((1u64 << n) - 1)
        }
    }

    pub const fn contains(self, cpu: usize) -> bool {
        cpu < 64 && self.0 & (1 << cpu) != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub const fn and(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 & other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..64).filter(move |&c| self.contains(c))
    }
}

/// A set of vCPUs of one VM, by index (bit `i` = vCPU `i`).
///
/// 64 bits wide so the pure SGI decoders can be exercised with several
/// affinity clusters; a virtual GIC never has more than
/// [`crate::MAX_CPUS`] vCPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuSet(pub u64);

impl VcpuSet {
    pub const EMPTY: VcpuSet = VcpuSet(0);

    /// vCPUs `0..n`.
    pub const fn first(n: usize) -> Self {
        if n >= 64 {
            VcpuSet(u64::MAX)
        } else {
            VcpuSet((1u64 << n) - 1)
        }
    }

    pub const fn single(vcpu: usize) -> Self {
        if vcpu < 64 {
            VcpuSet(1 << vcpu)
        } else {
            VcpuSet(0)
        }
    }

    pub fn insert(&mut self, vcpu: usize) {
        self.0 |= VcpuSet::single(vcpu).0;
    }

    pub fn remove(&mut self, vcpu: usize) {
        self.0 &= !VcpuSet::single(vcpu).0;
    }

    pub const fn contains(self, vcpu: usize) -> bool {
        vcpu < 64 && self.0 & (1 << vcpu) != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub const fn union(self, other: VcpuSet) -> VcpuSet {
        VcpuSet(self.0 | other.0)
    }

    /// The members, lowest first (one step per member, not per possible one).
    pub fn iter(self) -> impl Iterator<Item = usize> {
        set_bits(self.0)
    }
}

/// The indices of the bits set in `bits`, lowest first.
pub fn set_bits(mut bits: u64) -> impl Iterator<Item = usize> {
    core::iter::from_fn(move || {
        if bits == 0 {
            return None;
        }
        let i = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        Some(i)
    })
}
