//! Secondary CPU start through the IOCSR mailbox.
//!
//! QEMU's boot ROM (and Loongson firmware) parks every secondary core in a
//! loop: IPIs enabled (ECFG.LIE[12], IOCSR IPI_EN), `idle`, and after each
//! wake-up it reads mailbox 0 (low word); once non-zero it clears the IPI
//! and jumps to the 64-bit mailbox 0 value in direct-address mode.
//!
//! edk2 parks them the same way, except that its IPI handler clears all
//! four mailboxes before it jumps: a secondary cannot read anything from
//! them. So kestrel records the CPU's logical index in [`HW_TO_INDEX`]
//! (by physical core ID, read from CSR.CPUID by the entry code), then
//! writes the physical address of `kestrel_la_secondary_entry` into the
//! target's mailbox 0 (MAIL_SEND 0x1048) and raises IPI vector 0 (IPI_SEND
//! 0x1040). Both carry the physical core ID in their cpu field [25:16],
//! which addresses cores on every node (IOCSR IPI sends are routed by the
//! interconnect).
//!
//! A start can be lost. Under QEMU `-kernel` every secondary runs the ROM
//! from reset at the same time as the boot CPU, and an emulated core's
//! thread can be scheduled so late (a loaded host) that the ROM's first
//! steps run only after kestrel's start: its "clear mailbox 0" wipes the
//! entry kestrel wrote, and its IPI_EN write comes after the IPI, which
//! QEMU's IPI block raises the line for only when the IPI is set, not when
//! IPI_EN is written later. The core then idles in the ROM for good (seen
//! in the IPI block's trace: the target's mailbox clear and IPI_EN after
//! the MAIL_SEND and IPI_SEND). So the boot CPU calls [`resend`] while the
//! CPU is not online: the same mailbox write and IPI again, which a core
//! that is still parked takes, and which is harmless to one that did
//! start: its entry clears mailboxes 0/1 and pending IPIs, and a later
//! repeat only leaves mailbox 0 set (nothing reads it again) and an IPI
//! that kestrel's interrupt entry acknowledges.

use core::sync::atomic::{fence, AtomicU16, AtomicU64, Ordering};

use crate::base::platform::StartError;

use super::iocsr;

/// Logical index + 1 of the CPU being started, by physical core ID (0:
/// not started by kestrel; the entry code parks such a CPU). Read by
/// `kestrel_la_secondary_entry` (boot crate) with the core's own CSR.CPUID.
pub static HW_TO_INDEX: [AtomicU16; HW_IDS] = [const { AtomicU16::new(0) }; HW_IDS];
/// Physical core IDs the IPI block addresses (10 bits).
pub const HW_IDS: usize = iocsr::MAX_HW_CPU as usize + 1;

/// Physical address of the secondary entry (set by the boot crate).
static SECONDARY_ENTRY_PA: AtomicU64 = AtomicU64::new(0);

/// Records where secondaries enter (a physical address in low memory).
pub fn set_secondary_entry(pa: u64) {
    SECONDARY_ENTRY_PA.store(pa, Ordering::Release);
}

/// Starts physical cpu `hw_id` as logical CPU `index`.
pub fn start(hw_id: u64, index: usize) -> Result<(), StartError> {
    let entry = SECONDARY_ENTRY_PA.load(Ordering::Acquire);
    if entry == 0 || entry & 0xffff_ffff == 0 {
        // The ROM polls the low word: an entry with a zero low word would never be taken.
        return Err(StartError::Firmware(-1));
    }
    if hw_id > iocsr::MAX_HW_CPU || index >= crate::MAX_CPUS {
        return Err(StartError::Firmware(-2));
    }
    if hw_id == super::csr::hw_cpu_id() {
        return Err(StartError::AlreadyOn);
    }
    HW_TO_INDEX[hw_id as usize].store(index as u16 + 1, Ordering::Release);
    // The index must be visible before the core can wake and read it.
    fence(Ordering::SeqCst);
    send(hw_id, entry);
    Ok(())
}

/// Sends the start of physical cpu `hw_id` again (it was given to [`start`]
/// and is not online yet); false if [`start`] never accepted it.
pub fn resend(hw_id: u64) -> bool {
    let entry = SECONDARY_ENTRY_PA.load(Ordering::Acquire);
    let started = HW_TO_INDEX
        .get(hw_id as usize)
        .is_some_and(|i| i.load(Ordering::Acquire) != 0);
    if !started || entry & 0xffff_ffff == 0 || hw_id == super::csr::hw_cpu_id() {
        return false;
    }
    send(hw_id, entry);
    true
}

/// Mailbox 0 = the entry (high half first: the ROM polls the low word), then IPI vector 0.
fn send(hw_id: u64, entry: u64) {
    iocsr::mail_send(hw_id, 0, entry);
    iocsr::ipi_send(hw_id, 0);
}
