//! The one physical terminal: the console multiplexer every VM's output
//! and the operator's input go through ([`crate::vmm::console`]), as one
//! global instance, and the way VM bytes take through it: the
//! multiplexer decides what goes out, in its order, into the VM's own
//! bounded buffer ([`crate::base::conout`]), which is drained to the UART
//! at the UART's pace. A VM's console write never waits for the UART.

use crate::base::lock::{Mutex, Once};

use super::console::{queue, ConsoleMux, Mode};
use crate::base::conout::{self, Outbox, Source};

/// The console multiplexer of the running VMs (console number = VM slot).
pub fn console() -> &'static Mutex<ConsoleMux> {
    static CONSOLE: Once<Mutex<ConsoleMux>> = Once::new();
    CONSOLE.call_once(|| Mutex::new(ConsoleMux::new()))
}

/// Sets the console's mode and scrollback size (before VMs exist).
pub fn configure_console(mode: Mode, scrollback: usize) {
    console().lock().configure(mode, scrollback);
    conout::outbox().lock().set_lines(mode == Mode::Log);
}

/// Adds VM `name` to the multiplexer `mux` and its output buffer to the
/// console's; returns its console number.
pub fn add_vm(mux: &Mutex<ConsoleMux>, name: &str) -> usize {
    let i = mux.lock().add_vm(name);
    conout::outbox().lock().add_vm(i, name);
    i
}

/// A guest byte for the console: passed through (raw mode) or in tagged
/// lines (log mode), into the VM's output buffer.
pub fn console_out(slot: u16, byte: u8) {
    console_write_from(slot, false, &[byte]);
}

/// [`console_out`] of bytes from the VM's virtio console (`virtio`) or its
/// UART (log mode keeps their lines apart). Then drains what that output
/// costs the UART and a little more ([`conout::DRAIN_EXTRA`]): at most what
/// the UART's FIFO takes now, never waiting for it.
pub fn console_write_from(slot: u16, virtio: bool, bytes: &[u8]) {
    let queued = write_vm(
        console(),
        conout::outbox(),
        usize::from(slot),
        virtio,
        bytes,
    );
    conout::drain(queued + conout::DRAIN_EXTRA);
}

/// What the multiplexer `mux` makes of VM `vm`'s `bytes`, put in its
/// buffer in `outbox`. Returns the bytes queued. Both locks are held
/// together (the multiplexer's first), so the buffer gets the order the
/// multiplexer decided; neither is held across a wait for the UART.
pub fn write_vm(
    mux: &Mutex<ConsoleMux>,
    outbox: &Mutex<Outbox>,
    vm: usize,
    virtio: bool,
    bytes: &[u8],
) -> usize {
    let mut m = mux.lock();
    let mut o = outbox.lock();
    let mut queued = 0;
    for &b in bytes {
        if let Some(out) = m.output_from(vm, virtio, b) {
            queued += queue(&mut o, Source::Vm(vm), &out);
        }
    }
    queued
}

/// Moves what waits to the UART, [`conout::DRAIN_MAX`] bytes at most and
/// only what its FIFO takes now; nothing if another pCPU is draining. For
/// the boot CPU's tick and idle path and after kestrel's messages.
pub fn drain() {
    conout::drain(conout::DRAIN_MAX);
}

#[cfg(test)]
mod tests;
