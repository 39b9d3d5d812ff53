//! Software-generated interrupts: decoding GICv3 `ICC_SGI1R_EL1`-format
//! values and GICv2 `GICD_SGIR` writes into target vCPUs, and making the
//! SGIs pending (GICv2: per source vCPU).

use super::{GicVersion, VcpuSet, Vgic};
use crate::vcpu::psci::vcpu_index_of_mpidr;

/// The system register a GICv3 guest wrote (all share one format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgiRegister {
    /// `ICC_SGI1R_EL1`: with a single security state, SGIs of either group.
    Sgi1r,
    /// `ICC_ASGI1R_EL1`: with a single security state, group 0 SGIs only.
    Asgi1r,
    /// `ICC_SGI0R_EL1`: group 0 SGIs only.
    Sgi0r,
}

const SGI1R_IRM: u64 = 1 << 40;

/// Decodes an `ICC_SGI1R_EL1`-format value written by vCPU `sender` of a VM
/// of `vcpus` vCPUs into (SGI INTID, targets).
///
/// TargetList [15:0] names Aff0 = RS [47:44] * 16 + bit within the cluster
/// Aff3 [55:48].Aff2 [39:32].Aff1 [23:16]; IRM [40] = every vCPU but the
/// sender. Targets that do not exist are dropped, as hardware does.
pub fn decode_icc_sgi1r(value: u64, sender: usize, vcpus: usize) -> (u8, VcpuSet) {
    let intid = ((value >> 24) & 0xF) as u8;
    let all = VcpuSet::first(vcpus.min(64));
    if value & SGI1R_IRM != 0 {
        let mut targets = all;
        targets.remove(sender);
        return (intid, targets);
    }
    let aff1 = (value >> 16) & 0xFF;
    let aff2 = (value >> 32) & 0xFF;
    let rs = (value >> 44) & 0xF;
    let aff3 = (value >> 48) & 0xFF;
    let cluster = (aff3 << 32) | (aff2 << 16) | (aff1 << 8);
    let mut targets = VcpuSet::EMPTY;
    for bit in crate::vcpu::cpuset::set_bits(value & 0xFFFF) {
        let aff0 = rs * 16 + bit as u64;
        if let Some(v) = vcpu_index_of_mpidr(cluster | aff0, vcpus.min(64)) {
            targets.insert(v);
        }
    }
    (intid, targets)
}

/// Decodes a `GICD_SGIR` write by vCPU `sender` into (SGI INTID, targets):
/// TargetListFilter [25:24] 0 = CPUTargetList [23:16], 1 = all but the
/// sender, 2 = the sender only, 3 = reserved (None: nothing is sent).
pub fn decode_gicd_sgir(value: u32, sender: usize, vcpus: usize) -> Option<(u8, VcpuSet)> {
    let intid = (value & 0xF) as u8;
    let all = VcpuSet::first(vcpus.min(8));
    let targets = match (value >> 24) & 3 {
        0 => VcpuSet(u64::from((value >> 16) & 0xFF) & all.0),
        1 => {
            let mut t = all;
            t.remove(sender);
            t
        }
        2 => VcpuSet(VcpuSet::single(sender).0 & all.0),
        _ => return None,
    };
    Some((intid, targets))
}

impl Vgic {
    /// A GICv3 guest's trapped write of `value` to `reg` by vCPU `sender`:
    /// makes the SGI pending on its targets. Returns the vCPUs to kick (the
    /// targets for which it is deliverable). Ignored on GICv2.
    pub fn write_icc_sgi(&mut self, sender: usize, reg: SgiRegister, value: u64) -> VcpuSet {
        if self.version != GicVersion::V3 || sender >= self.vcpus {
            return VcpuSet::EMPTY;
        }
        let (sgi, targets) = decode_icc_sgi1r(value, sender, self.vcpus);
        for t in targets.iter() {
            self.touch(t);
        }
        let any_group = reg == SgiRegister::Sgi1r;
        let mut kicks = VcpuSet::EMPTY;
        for t in targets.iter() {
            let irq = self.private[t].irq_mut(sgi as usize);
            if any_group || !irq.group1 {
                irq.set_pending();
                kicks = kicks.union(self.kicks(t, sgi as u32, 1));
            }
        }
        kicks
    }

    /// A backend-generated SGI (kestrel's PV IPI): SGI `sgi` from vCPU
    /// `source` becomes pending on vCPU `target`, on either GIC version.
    /// Returns whether it was already pending (nothing new: coalesced) and
    /// the vCPUs to kick; `None` for an unknown vCPU.
    pub fn raise_sgi(&mut self, source: usize, target: usize, sgi: u8) -> Option<(bool, VcpuSet)> {
        if source >= self.vcpus || target >= self.vcpus {
            return None;
        }
        self.touch(target);
        let s = (sgi & 15) as usize;
        if self.version == GicVersion::V2 {
            let was = self.private[target].sgi_sources[s] & (1 << source) != 0;
            if was {
                return Some((true, VcpuSet::EMPTY));
            }
            return Some((
                false,
                self.send_sgi_v2(source, s as u8, VcpuSet::single(target)),
            ));
        }
        let irq = self.private[target].irq_mut(s);
        if irq.pending() {
            return Some((true, VcpuSet::EMPTY));
        }
        irq.set_pending();
        Some((false, self.kicks(target, s as u32, 1)))
    }

    /// GICv2: SGI `sgi` from `source` becomes pending on each target.
    pub(super) fn send_sgi_v2(&mut self, source: usize, sgi: u8, targets: VcpuSet) -> VcpuSet {
        let mut kicks = VcpuSet::EMPTY;
        for t in targets.iter().filter(|&t| t < self.vcpus) {
            // `touch(t)`, on the field: the loop's filter holds `self.vcpus`.
            self.stale.0.set(t, true);
            let p = &mut self.private[t];
            p.sgi_sources[sgi as usize & 15] |= 1 << source;
            p.irq_mut(sgi as usize & 15).set_pending();
            kicks = kicks.union(self.kicks(t, sgi as u32, 1));
        }
        kicks
    }

    /// GICv2 GICD_SPENDSGIR (`set`) / GICD_CPENDSGIR byte for SGI `sgi` of `vcpu`.
    pub(super) fn write_sgi_sources(&mut self, vcpu: usize, sgi: u32, sources: u8, set: bool) {
        let valid = VcpuSet::first(self.vcpus).0 as u8;
        let Some(p) = self.private.get_mut(vcpu) else {
            return;
        };
        let s = (sgi & 15) as usize;
        if set {
            p.sgi_sources[s] |= sources & valid;
        } else {
            p.sgi_sources[s] &= !sources;
            // The instance in flight in an LR, if its source is cleared, is withdrawn.
            let in_flight = p.in_lr.iter().find(|e| e.0 == sgi).map(|e| e.1);
            if in_flight.is_some_and(|src| sources & (1 << src) != 0) {
                p.irq_mut(s).lr_pend_cleared = true;
            }
        }
        let latch = p.sgi_sources[s] != 0;
        p.irq_mut(s).latch = latch;
    }
}
