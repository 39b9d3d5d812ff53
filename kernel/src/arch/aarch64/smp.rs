//! Secondary CPU bring-up through PSCI CPU_ON. Each CPU gets a 64 KiB stack
//! and a [`CpuBoot`] block from the heap; CPU_ON's context argument is the
//! block's physical address, and `kestrel_secondary_entry` (boot crate,
//! entry.S) reads it with the MMU off: MMU registers, vectors, stack, index.

use alloc::alloc::{alloc_zeroed, Layout};
use alloc::boxed::Box;

use crate::base::platform::StartError;
use crate::host::board::PsciConduit;

use super::{exceptions, mmu, psci};

/// Stack of each secondary CPU.
pub const STACK_SIZE: usize = 64 << 10;

/// What a starting CPU reads before its MMU is on. The layout is shared
/// with entry.S (offsets 0, 8, ... 48).
#[repr(C, align(64))]
pub struct CpuBoot {
    pub mair: u64,
    pub tcr: u64,
    pub ttbr0: u64,
    pub sctlr: u64,
    pub vbar: u64,
    pub stack_top: u64,
    pub index: u64,
}

/// Starts CPU `index` (MPIDR affinity `hw_id`) at `entry`.
pub fn start_cpu(
    conduit: Option<PsciConduit>,
    entry: usize,
    index: usize,
    hw_id: u64,
) -> Result<(), StartError> {
    let conduit = conduit.ok_or(StartError::Firmware(-1))?;
    let cfg = mmu::config().ok_or(StartError::Firmware(-1))?;
    let layout = Layout::from_size_align(STACK_SIZE, 16).map_err(|_| StartError::NoMemory)?;
    // SAFETY: the layout has a non-zero size.
    let stack = unsafe { alloc_zeroed(layout) };
    if stack.is_null() {
        return Err(StartError::NoMemory);
    }
    // The stack and the block belong to the CPU from now on: never freed.
    let boot = Box::leak(Box::new(CpuBoot {
        mair: cfg.mair,
        tcr: cfg.tcr,
        ttbr0: cfg.ttbr0,
        sctlr: cfg.sctlr,
        vbar: exceptions::vectors_addr() as u64,
        stack_top: stack as u64 + STACK_SIZE as u64,
        index: index as u64,
    }));
    let start = boot as *const CpuBoot as usize;
    // The new CPU reads the block with its caches off.
    mmu::clean_dcache_range(start, start + core::mem::size_of::<CpuBoot>());
    match psci::cpu_on(conduit, hw_id, entry as u64, start as u64) {
        Ok(()) => Ok(()),
        Err(psci::ALREADY_ON) => Err(StartError::AlreadyOn),
        Err(e) => Err(StartError::Firmware(e)),
    }
}
