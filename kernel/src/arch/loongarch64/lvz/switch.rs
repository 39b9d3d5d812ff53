//! Entering a guest in LVZ guest mode and getting back.
//!
//! The guest's GPRs are the real GPRs, so the shared world switch
//! (`backend::switch`, trap-and-emulate's) carries them both ways for
//! this mode too: its
//! `kestrel_la_vm_enter` loads the frame and `ertn`s, its
//! `kestrel_la_guest_exit` / `kestrel_la_guest_exit_tlbr` store them and
//! return. What differs is how the CPU gets there and back:
//!
//! - **In**: GSTAT.PVM = 1 makes the `ertn` enter guest mode at ERA; PRMD
//!   is PIE alone (root PLV0, physical interrupts on while the guest runs,
//!   so kestrel's tick and kicks exit it).
//! - **Out**: every exit lands in root mode at PLV0, so kestrel's own
//!   entries cannot tell it from one of their own exceptions by PPLV (the
//!   trap-and-emulate test). On a CPU the LVZ backend runs, EENTRY and
//!   TLBRENTRY point at the two entries below ([`install_entries`]), which
//!   tell them apart by GSTAT.PVM: kestrel sets it only for the `ertn`
//!   into the guest, with interrupts masked, and [`enter`] clears it as
//!   soon as the guest has exited, so an exception taken with PVM set was
//!   taken in guest mode (whether the CPU keeps PVM at the exception or
//!   copies the guest-mode bit into it). Those go to the exit path; the
//!   others to kestrel's own entries. The entries stay in place across
//!   exits: an exit handled in place and its re-entry write neither.

use core::arch::global_asm;

use super::super::backend::switch::{self as tne, GuestFrame};
use super::super::csr;
use super::super::dmw;
use super::gcsr;

/// PRMD for the entry: PPLV 0 (root stays at PLV0), PIE.
const ENTRY_PRMD: u64 = 1 << 2;

// SAFETY (for the whole block): the entries are installed in EENTRY and
// TLBRENTRY by `install_entries` on a CPU the LVZ backend runs; an
// exception with GSTAT.PVM set comes from the guest (the module
// documentation), after `kestrel_la_vm_enter` stored the frame in SAVE2
// and kestrel's stack pointer in it, which is what the shared exit paths
// rely on; any other goes to kestrel's own entry with $t0 as it was.
global_asm!(
    r#"
    .section .text.kestrel_vectors, "ax"

    // General exceptions and interrupts.
    .balign 4096
    .global kestrel_lvz_exception_entry
kestrel_lvz_exception_entry:
    csrwr   $t0, 0x30
    csrrd   $t0, 0x50
    andi    $t0, $t0, 2
    bnez    $t0, kestrel_la_guest_exit
    csrrd   $t0, 0x30
    b       kestrel_la_exception_entry

    // TLB refill, entered in DA mode at the physical address: from the
    // guest a second-stage refill (the GPA in TLBRBADV), on to the link
    // address with paging on; else kestrel's own refill entry (PC-relative,
    // so at its physical address too).
    .balign 4096
    .global kestrel_lvz_tlbr_entry
kestrel_lvz_tlbr_entry:
    csrwr   $t0, 0x8b
    csrrd   $t0, 0x50
    andi    $t0, $t0, 2
    bnez    $t0, 2f
    csrrd   $t0, 0x8b
    b       kestrel_la_tlbr_entry
2:
    la.abs  $t0, 1f
    jirl    $zero, $t0, 0
1:
    li.w    $t0, 0xb0
    csrwr   $t0, 0x0
    la.abs  $t0, kestrel_la_guest_exit_tlbr
    jirl    $zero, $t0, 0
    "#
);

unsafe extern "C" {
    fn kestrel_lvz_exception_entry();
    fn kestrel_lvz_tlbr_entry();
}

/// Points EENTRY and TLBRENTRY of the calling CPU at the entries above
/// (the LVZ backend's per-CPU set-up, after GSTAT is cleared).
pub fn install_entries() {
    // SAFETY: interrupts are masked (the backend's per-CPU set-up) and
    // GSTAT.PVM is clear, so every exception goes on to kestrel's own
    // entries until a guest runs; both are 4 KiB aligned (EENTRY and
    // TLBRENTRY ignore bits [11:0]); TLBRENTRY takes a physical address.
    unsafe {
        csr::write_eentry(kestrel_lvz_exception_entry as *const () as usize as u64);
        csr::write_tlbrentry(dmw::to_phys(
            kestrel_lvz_tlbr_entry as *const () as usize as u64,
        ));
    }
}

/// Runs the loaded vCPU in guest mode until its next exit; the exit is in
/// `frame` afterwards (kind 1: a second-stage refill, GPA in `badv`).
///
/// # Safety
/// Interrupts masked (CRMD.IE = 0); this vCPU's guest CSRs and GID loaded;
/// the second-stage entries on this CPU map only this VM's memory under
/// its GID; EUEN exposes FP registers only if the vCPU owns them;
/// [`install_entries`] ran on this CPU.
pub unsafe fn enter(frame: &mut GuestFrame) {
    frame.prmd = ENTRY_PRMD;
    // SAFETY: interrupts are masked until the `ertn`, so nothing but the
    // guest's exit is taken with PVM set; it is clear again before kestrel
    // can take an exception of its own.
    unsafe {
        gcsr::xchg_gstat(gcsr::GSTAT_PVM, gcsr::GSTAT_PVM);
        tne::enter_raw(frame);
        // Back in root mode with interrupts masked: the next `ertn` stays
        // in root mode, and exceptions are kestrel's again.
        gcsr::xchg_gstat(0, gcsr::GSTAT_PVM);
    }
}
