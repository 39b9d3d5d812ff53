//! PV IPI routing: one hypercall sends a software interrupt to up to 128
//! vCPUs of the calling VM.
//!
//! The guest names its targets with a 128-bit window ([`IpiWindow`]: bitmap
//! low in a1/x1, high in a2/x2, `min` in a3/x3 = the vCPU id of bit 0). vCPU
//! ids are the dense indices `0..vcpu_count` of the VM (LoongArch CPUID,
//! arm64 linear MPIDR order), so a window never reaches another VM.
//!
//! # Validation first
//!
//! The whole window is checked before anything is delivered: an all-zero
//! bitmap (a guest bug: the Linux sender never makes an empty call), a `min`
//! at or beyond the VM's vCPU count, `min + bit` overflowing, or any bit
//! naming a vCPU that does not exist all return [`IpiError`] (-2 to the
//! guest) and deliver nothing. Since bits are ascending, checking the highest
//! set bit checks them all.
//!
//! # Delivery
//!
//! For each target the VM marks the software interrupt pending (LoongArch
//! SWI0 in the guest ESTAT, arm64 an SGI in the vGIC) through
//! [`IpiTarget::deliver`]. A target that was already pending costs
//! nothing more (coalesced: the guest handler drains its message word anyway).
//! A newly pending target that is running a guest on some pCPU is kicked so
//! it exits and sees the interrupt; one that is not running picks it up on
//! its next entry (`deliver` must also wake it if it is blocked). The
//! sender is never kicked: it is in the hypervisor already and re-enters
//! with the interrupt injected.
//!
//! Ordering the implementation must provide: a vCPU publishes "running on
//! p" before it samples its pending interrupts on entry, and `deliver`
//! publishes the bit before it reads where the target runs, so a target is
//! either kicked or sees the bit. [`crate::vm::exitctx::ExitCtx`] is the
//! implementation for every backend: the scheduler's view, read once under
//! its lock for both the wake and the pCPU to kick; a kick is a physical
//! IPI, and [`IpiOutcome::kicked`] counts exactly those IPIs.

pub use kestrel_abi::IpiWindow;

/// The calling VM, as the IPI router needs it.
pub trait IpiTarget {
    /// Number of vCPUs (ids `0..vcpu_count`).
    fn vcpu_count(&self) -> usize;
    /// Mark the IPI software interrupt pending on `vcpu` (and wake it if it
    /// is blocked), then say where it runs: published before that look.
    fn deliver(&self, vcpu: usize) -> Delivery;
    /// Make `pcpu` leave the guest (physical IPI).
    fn kick(&self, pcpu: usize);
}

/// What [`IpiTarget::deliver`] did to one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// It was pending already: nothing changed.
    Coalesced,
    /// Newly pending; it takes the interrupt at its next entry (not
    /// running a guest, or it is the caller).
    Pending,
    /// Newly pending, and it runs a guest on this pCPU (never the
    /// caller's): kick it.
    Running(usize),
}

/// What one send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpiOutcome {
    /// Targets newly marked pending.
    pub delivered: u32,
    /// Targets that were already pending.
    pub coalesced: u32,
    /// pCPUs kicked.
    pub kicked: u32,
}

/// Why a window was refused. All map to `INVALID_PARAMETER` (-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpiError {
    /// No bit set.
    EmptyBitmap,
    /// `min` is not a vCPU of this VM.
    MinOutOfRange,
    /// A bit names a vCPU id that does not exist (or overflows).
    TargetOutOfRange,
}

impl IpiError {
    /// The guest-visible return code.
    pub const fn code(self) -> i64 {
        kestrel_abi::ret::INVALID_PARAMETER
    }
}

/// The vCPU ids of a validated window, ascending. The bitmap is kept as
/// its two 64-bit halves: a 128-bit scan costs several instructions per
/// step on a 64-bit CPU, and a send's bits are usually in the low half.
#[derive(Debug, Clone)]
pub struct Targets {
    low: u64,
    high: u64,
    min: usize,
}

impl Iterator for Targets {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let (word, base) = if self.low != 0 {
            (&mut self.low, 0)
        } else if self.high != 0 {
            (&mut self.high, 64)
        } else {
            return None;
        };
        let bit = word.trailing_zeros() as usize;
        *word &= *word - 1;
        // Cannot overflow: checked in `validate`.
        Some(self.min + base + bit)
    }
}

/// Check `w` against a VM of `vcpus` vCPUs; returns the targets.
pub fn validate(w: &IpiWindow, vcpus: usize) -> Result<Targets, IpiError> {
    let highest = if w.high != 0 {
        127 - w.high.leading_zeros() as usize
    } else if w.low != 0 {
        63 - w.low.leading_zeros() as usize
    } else {
        return Err(IpiError::EmptyBitmap);
    };
    let min = usize::try_from(w.min)
        .ok()
        .filter(|&m| m < vcpus)
        .ok_or(IpiError::MinOutOfRange)?;
    match min.checked_add(highest) {
        Some(last) if last < vcpus => Ok(Targets {
            low: w.low,
            high: w.high,
            min,
        }),
        _ => Err(IpiError::TargetOutOfRange),
    }
}

/// Route one PV IPI send from vCPU `sender` of `vm`.
pub fn send(vm: &impl IpiTarget, sender: usize, w: &IpiWindow) -> Result<IpiOutcome, IpiError> {
    let targets = validate(w, vm.vcpu_count())?;
    let mut out = IpiOutcome::default();
    for vcpu in targets {
        match vm.deliver(vcpu) {
            Delivery::Coalesced => out.coalesced += 1,
            Delivery::Pending => out.delivered += 1,
            Delivery::Running(pcpu) => {
                out.delivered += 1;
                if vcpu != sender {
                    vm.kick(pcpu);
                    out.kicked += 1;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::cell::{Cell, RefCell};

    /// A VM of `n` vCPUs; vCPU `i` runs on pCPU `i` if `running[i]`.
    pub(crate) struct FakeVm {
        pub pending: Vec<Cell<bool>>,
        pub running: Vec<bool>,
        pub kicks: RefCell<Vec<usize>>,
    }

    impl FakeVm {
        pub fn new(n: usize) -> Self {
            Self {
                pending: (0..n).map(|_| Cell::new(false)).collect(),
                running: vec![false; n],
                kicks: RefCell::new(Vec::new()),
            }
        }
        fn pending_ids(&self) -> Vec<usize> {
            (0..self.pending.len())
                .filter(|&i| self.pending[i].get())
                .collect()
        }
    }

    impl IpiTarget for FakeVm {
        fn vcpu_count(&self) -> usize {
            self.pending.len()
        }
        fn deliver(&self, vcpu: usize) -> Delivery {
            if self.pending[vcpu].replace(true) {
                Delivery::Coalesced
            } else if self.running[vcpu] {
                Delivery::Running(vcpu)
            } else {
                Delivery::Pending
            }
        }
        fn kick(&self, pcpu: usize) {
            self.kicks.borrow_mut().push(pcpu);
        }
    }

    fn w(low: u64, high: u64, min: u64) -> IpiWindow {
        IpiWindow { low, high, min }
    }

    #[test]
    fn delivers_to_exactly_the_named_vcpus() {
        let vm = FakeVm::new(200);
        let out = send(&vm, 0, &w(0b101, 1 << 63, 10)).unwrap();
        assert_eq!(vm.pending_ids(), [10, 12, 137]);
        assert_eq!(
            out,
            IpiOutcome {
                delivered: 3,
                coalesced: 0,
                kicked: 0
            }
        );
    }

    #[test]
    fn a_window_with_only_its_high_half_set() {
        let vm = FakeVm::new(70);
        let out = send(&vm, 0, &w(0, 0b101, 2)).unwrap();
        assert_eq!(vm.pending_ids(), [66, 68]);
        assert_eq!(out.delivered, 2);
        // Its highest bit decides the range: vCPU 70 does not exist.
        assert_eq!(
            send(&vm, 0, &w(0, 1 << 4, 2)),
            Err(IpiError::TargetOutOfRange)
        );
    }

    #[test]
    fn coalesces_and_kicks_only_running_non_sender_targets() {
        let mut vm = FakeVm::new(8);
        vm.running[1] = true;
        vm.running[2] = true;
        vm.running[3] = true; // the sender
        vm.pending[2].set(true);
        let out = send(&vm, 3, &w(0b1111, 0, 0)).unwrap();
        assert_eq!(
            out,
            IpiOutcome {
                delivered: 3,
                coalesced: 1,
                kicked: 1
            }
        );
        assert_eq!(*vm.kicks.borrow(), [1]);
        // Again: everything already pending, no kicks.
        let out = send(&vm, 3, &w(0b1111, 0, 0)).unwrap();
        assert_eq!(
            out,
            IpiOutcome {
                delivered: 0,
                coalesced: 4,
                kicked: 0
            }
        );
        assert_eq!(vm.kicks.borrow().len(), 1);
    }

    #[test]
    fn bad_windows_deliver_nothing() {
        let vm = FakeVm::new(4);
        let cases = [
            (w(0, 0, 0), IpiError::EmptyBitmap),
            (w(1, 0, 4), IpiError::MinOutOfRange),
            (w(1, 0, u64::MAX), IpiError::MinOutOfRange),
            // Bits 0-3 are fine, bit 4 (vCPU 4) does not exist: nothing at all.
            (w(0b1_1111, 0, 0), IpiError::TargetOutOfRange),
            (w(1, 1, 0), IpiError::TargetOutOfRange),
            (w(0b11, 0, 3), IpiError::TargetOutOfRange),
        ];
        for (win, err) in cases {
            assert_eq!(send(&vm, 0, &win), Err(err), "{win:?}");
            assert_eq!(err.code(), -2);
        }
        assert!(vm.pending_ids().is_empty());
        assert!(vm.kicks.borrow().is_empty());
    }

    #[test]
    fn min_plus_bit_overflow_is_refused() {
        // A VM claiming usize::MAX vCPUs: only overflow can stop the window.
        struct Huge;
        impl IpiTarget for Huge {
            fn vcpu_count(&self) -> usize {
                usize::MAX
            }
            fn deliver(&self, _: usize) -> Delivery {
                panic!("must not deliver")
            }
            fn kick(&self, _: usize) {}
        }
        let min = (usize::MAX - 3) as u64;
        assert_eq!(
            send(&Huge, 0, &w(1 << 10, 0, min)).unwrap_err(),
            IpiError::TargetOutOfRange
        );
    }

    #[test]
    fn full_window_of_128() {
        let vm = FakeVm::new(128);
        let out = send(&vm, 0, &w(u64::MAX, u64::MAX, 0)).unwrap();
        assert_eq!(out.delivered, 128);
        assert_eq!(vm.pending_ids().len(), 128);
    }
}
