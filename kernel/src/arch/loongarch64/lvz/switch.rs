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
//!   trap-and-emulate test). While a guest runs, EENTRY and TLBRENTRY
//!   point at the two stubs below, which go straight to the exit path;
//!   [`enter`] puts kestrel's own entries back as soon as the guest exits.

use core::arch::global_asm;

use super::super::backend::switch::{self as tne, GuestFrame};
use super::super::csr;
use super::super::dmw;
use super::gcsr;

/// PRMD for the entry: PPLV 0 (root stays at PLV0), PIE.
const ENTRY_PRMD: u64 = 1 << 2;

// SAFETY (for the whole block): the stubs are installed in EENTRY and
// TLBRENTRY only by `enter`, for the time a guest runs; every exception
// taken then comes from the guest, after `kestrel_la_vm_enter` stored the
// frame in SAVE2 and kestrel's stack pointer in it, which is what the
// shared exit paths rely on.
global_asm!(
    r#"
    .section .text.kestrel_vectors, "ax"

    // General exceptions and interrupts taken in guest mode.
    .balign 4096
    .global kestrel_lvz_exception_entry
kestrel_lvz_exception_entry:
    csrwr   $t0, 0x30
    b       kestrel_la_guest_exit

    // A second-stage TLB refill (the GPA in TLBRBADV): entered in DA mode
    // at the physical address; on to the link address with paging on.
    .balign 4096
    .global kestrel_lvz_tlbr_entry
kestrel_lvz_tlbr_entry:
    csrwr   $t0, 0x8b
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

/// Runs the loaded vCPU in guest mode until its next exit; the exit is in
/// `frame` afterwards (kind 1: a second-stage refill, GPA in `badv`).
///
/// # Safety
/// Interrupts masked (CRMD.IE = 0); this vCPU's guest CSRs and GID loaded;
/// the second-stage entries on this CPU map only this VM's memory under
/// its GID; EUEN exposes FP registers only if the vCPU owns them.
pub unsafe fn enter(frame: &mut GuestFrame) {
    let eentry = csr::eentry();
    let tlbrentry = csr::tlbrentry();
    frame.prmd = ENTRY_PRMD;
    // SAFETY: interrupts are masked until the `ertn`; the stubs are
    // 4 KiB aligned (EENTRY and TLBRENTRY ignore bits [11:0]); TLBRENTRY
    // takes a physical address.
    unsafe {
        csr::write_eentry(kestrel_lvz_exception_entry as *const () as usize as u64);
        csr::write_tlbrentry(dmw::to_phys(
            kestrel_lvz_tlbr_entry as *const () as usize as u64,
        ));
        gcsr::xchg_gstat(gcsr::GSTAT_PVM, gcsr::GSTAT_PVM);
        tne::enter_raw(frame);
        // Back in root mode with interrupts masked: kestrel's own entries
        // again, and the next `ertn` stays in root mode.
        gcsr::xchg_gstat(0, gcsr::GSTAT_PVM);
        csr::write_eentry(eentry);
        csr::write_tlbrentry(tlbrentry);
    }
}
