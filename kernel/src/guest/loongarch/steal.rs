//! Linux KVM's LoongArch steal-time record, `struct kvm_steal_time`: 64
//! bytes of guest RAM a vCPU registers with KVM's NOTIFY hypercall
//! (feature `KVM_FEATURE_STEAL_TIME`, the address | 1; 0 stops it).
//!
//! | offset | field | kestrel writes |
//! |--------|-------|----------------|
//! | 0 | `steal` (u64) | nanoseconds the vCPU was runnable but not running |
//! | 8 | `version` (u32) | odd while the record changes, even once it is done (the guest's seqcount) |
//! | 12 | `flags` (u32) | nothing |
//! | 16 | `preempted` (u8) | `KVM_VCPU_PREEMPTED` (1) when the vCPU is put while runnable (`KVM_FEATURE_PREEMPT`), 0 at its next load |
//! | 17-63 | padding | nothing |
//!
//! As Linux's KVM does, the `preempted` byte is set only for a vCPU taken
//! off its pCPU while it could run (its slice ended, it yielded), not for
//! one that waits in `idle`: a guest spinning on a lock held by a vCPU
//! with the byte set knows its holder is not running and stops spinning
//! (`vcpu_is_preempted()`). Every access goes through [`GuestMemory`]:
//! the record must be wholly this VM's RAM when registered (else -2,
//! nothing registered), and a write that finds it is not (cannot happen
//! while the RAM stays) writes nothing.

use core::sync::atomic::{fence, Ordering};

use kestrel_abi::loongarch as la;
use kestrel_abi::ret;

use crate::dev::vdev::bus::GuestMemory;

/// Size (and alignment) of the record.
pub const SIZE: u64 = 64;
/// Offsets of the fields kestrel writes.
pub const STEAL: u64 = 0;
pub const VERSION: u64 = 8;
pub const PREEMPTED: u64 = 16;
/// NOTIFY's argument: the record's address (64-byte aligned) | this bit.
const VALID: u64 = 1;

/// `ticks` of a counter running at `hz` in nanoseconds (`ticks` when the
/// frequency is unknown).
pub fn ticks_to_ns(ticks: u64, hz: u64) -> u64 {
    if hz == 0 {
        return ticks;
    }
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(hz);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// One vCPU's steal time: where its record is and what it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StealTime {
    /// The record's guest physical address (64-byte aligned, RAM).
    gpa: Option<u64>,
    /// Stolen time so far, in nanoseconds.
    steal_ns: u64,
    /// kestrel set the record's `preempted` byte at the last put.
    preempted: bool,
}

impl StealTime {
    pub const fn new() -> StealTime {
        StealTime {
            gpa: None,
            steal_ns: 0,
            preempted: false,
        }
    }

    /// The registered record's address.
    pub fn gpa(&self) -> Option<u64> {
        self.gpa
    }

    /// Stolen nanoseconds so far.
    pub fn steal_ns(&self) -> u64 {
        self.steal_ns
    }

    /// Whether the record says the vCPU is preempted.
    pub fn preempted(&self) -> bool {
        self.preempted
    }

    /// The vCPU was reset: it has no record until it registers one again.
    pub fn reset(&mut self) {
        self.gpa = None;
        self.preempted = false;
    }

    /// KVM's NOTIFY (a1 = `feature`, a2 = `arg`): registers the record at
    /// `arg & !63` if `arg` has bit 0 (and writes it: the stolen time so
    /// far, not preempted), else stops updating it. -2 (and no change)
    /// for another feature or a record that is not wholly this VM's RAM
    /// (outside RAM, a device's registers, past its end).
    pub fn notify(&mut self, mem: &dyn GuestMemory, feature: u64, arg: u64) -> i64 {
        if feature != u64::from(la::KVM_FEATURE_STEAL_TIME) {
            return ret::INVALID_PARAMETER;
        }
        if arg & VALID == 0 {
            self.reset();
            return ret::SUCCESS;
        }
        let gpa = arg & !(SIZE - 1);
        let mut probe = [0u8; SIZE as usize];
        if mem.read(gpa, &mut probe).is_err() {
            return ret::INVALID_PARAMETER;
        }
        self.gpa = Some(gpa);
        self.preempted = false;
        self.publish(mem);
        ret::SUCCESS
    }

    /// The vCPU is loaded, after `stolen_ns` runnable but not running
    /// (`None`: it was not runnable, e.g. waiting in `idle`): the stolen
    /// time is added, and the record updated if that or its `preempted`
    /// byte changes.
    pub fn load(&mut self, mem: &dyn GuestMemory, stolen_ns: Option<u64>) {
        if let Some(ns) = stolen_ns {
            self.steal_ns = self.steal_ns.wrapping_add(ns);
        }
        if self.gpa.is_some() && (stolen_ns.is_some() || self.preempted) {
            self.publish(mem);
        }
    }

    /// The vCPU is put; `runnable`: it could run on (it is not waiting
    /// in `idle`), so its record says it is preempted until it is loaded.
    pub fn put(&mut self, mem: &dyn GuestMemory, runnable: bool) {
        let Some(gpa) = self.gpa else {
            return;
        };
        if runnable
            && mem
                .write(gpa + PREEMPTED, &[la::KVM_VCPU_PREEMPTED])
                .is_ok()
        {
            self.preempted = true;
        }
    }

    /// Writes the stolen time under the seqcount and clears `preempted`
    /// (the vCPU runs): version made odd, the fields, version made even.
    fn publish(&mut self, mem: &dyn GuestMemory) {
        let Some(gpa) = self.gpa else {
            return;
        };
        let mut v = [0u8; 4];
        if mem.read(gpa + VERSION, &mut v).is_err() {
            return;
        }
        // An odd version left by the guest (garbage before its first
        // update) is skipped over, as KVM does.
        let v = u32::from_le_bytes(v);
        let odd = v.wrapping_add(1) | 1;
        let _ = mem.write(gpa + VERSION, &odd.to_le_bytes());
        fence(Ordering::SeqCst);
        let _ = mem.write(gpa + STEAL, &self.steal_ns.to_le_bytes());
        let _ = mem.write(gpa + PREEMPTED, &[0]);
        self.preempted = false;
        fence(Ordering::SeqCst);
        let _ = mem.write(gpa + VERSION, &odd.wrapping_add(1).to_le_bytes());
    }
}

#[cfg(test)]
mod tests;
