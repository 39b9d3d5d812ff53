//! Secondary CPU start through the IOCSR mailbox.
//!
//! QEMU's boot ROM (and Loongson firmware) parks every secondary core in a
//! loop: IPIs enabled (ECFG.LIE[12], IOCSR IPI_EN), `idle`, and after each
//! wake-up it reads mailbox 0 (low word); once non-zero it clears the IPI
//! and jumps to the 64-bit mailbox 0 value in direct-address mode.
//!
//! kestrel writes the CPU's logical index into mailbox 1, then the physical
//! address of `kestrel_la_secondary_entry` into mailbox 0 (MAIL_SEND 0x1048),
//! then raises IPI vector 0 (IPI_SEND 0x1040).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::platform::StartError;

use super::iocsr;

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
    iocsr::mail_send(hw_id, 1, index as u64);
    iocsr::mail_send(hw_id, 0, entry);
    iocsr::ipi_send(hw_id, 0);
    Ok(())
}
