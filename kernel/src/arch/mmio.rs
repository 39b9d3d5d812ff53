//! Typed device register blocks, for both architectures.
//!
//! A device's registers are a `#[repr(C)]` struct whose fields are the
//! registers at their offsets (reserved gaps as padding arrays, each offset
//! checked at compile time) and whose field types are the registers'
//! widths; `#[derive(VolatileFieldAccess)]` gives each register an accessor
//! method. A [`Block`] is the address of one such block: created once by an
//! `unsafe` constructor whose caller says why the address is a valid
//! mapping, then read and written through [`Block::regs`], so every access
//! names the register and its width (`gicd.regs().ctlr().write(..)`) and
//! compiles to the one volatile load or store it replaces.

use core::marker::PhantomData;
use core::ptr::NonNull;

use volatile::access::Access;
pub use volatile::{VolatileFieldAccess, VolatilePtr};

/// The address of a register block of layout `T`.
pub struct Block<T> {
    base: usize,
    /// `fn() -> T`: a plain address, `Send` and `Sync` whatever `T` is (the
    /// registers are device state, not Rust data).
    _regs: PhantomData<fn() -> T>,
}

impl<T> Clone for Block<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Block<T> {}

impl<T> core::fmt::Debug for Block<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.base)
    }
}

impl<T> Block<T> {
    /// The block at `base`.
    ///
    /// # Safety
    /// `base` is non-zero, aligned for `T`, and the address of a device
    /// register block laid out as `T`, mapped as Device (or uncached)
    /// memory on every CPU that uses the `Block`, for as long as it (or a
    /// copy) is used; no Rust reference points into it.
    pub const unsafe fn new(base: usize) -> Self {
        Block {
            base,
            _regs: PhantomData,
        }
    }

    /// The block's address.
    pub const fn base(self) -> usize {
        self.base
    }

    /// Volatile access to the registers.
    #[inline(always)]
    pub fn regs(self) -> VolatilePtr<'static, T> {
        // SAFETY: `new`'s contract: a non-zero, aligned address of a mapped
        // register block of layout `T` that nothing else borrows.
        unsafe { VolatilePtr::new(NonNull::new_unchecked(self.base as *mut T)) }
    }
}

/// Register `i` of a register array. An index past the end wraps (`i % N`,
/// one mask for the power-of-two arrays of the blocks here): callers pass
/// in-range indices, and no access can leave the array.
#[inline(always)]
pub fn at<'a, T, A: Access, const N: usize>(
    array: VolatilePtr<'a, [T; N], A>,
    i: usize,
) -> VolatilePtr<'a, T, A> {
    debug_assert!(i < N);
    // SAFETY: `i % N < N`, so the element lies inside the array `array`
    // points to, with the same validity.
    unsafe { array.map(|p| p.cast::<T>().add(i % N)) }
}
