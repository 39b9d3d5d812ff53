//! The one physical terminal: the console multiplexer every VM's output
//! and the operator's input go through ([`crate::vmm::console`]), as one
//! global instance, and the writes of VM bytes into it.

use spin::{Mutex, Once};

use super::console::{ConsoleMux, Mode};

/// The console multiplexer of the running VMs (console number = VM slot).
pub fn console() -> &'static Mutex<ConsoleMux> {
    static CONSOLE: Once<Mutex<ConsoleMux>> = Once::new();
    CONSOLE.call_once(|| Mutex::new(ConsoleMux::new()))
}

/// Sets the console's mode and scrollback size (before VMs exist).
pub fn configure_console(mode: Mode, scrollback: usize) {
    console().lock().configure(mode, scrollback);
}

/// A guest byte for the console: passed through (raw mode) or in tagged
/// lines (log mode) on the physical UART.
pub fn console_out(slot: u16, byte: u8) {
    console_out_from(slot, false, byte);
}

/// [`console_out`] of a byte from the VM's virtio console (`virtio`) or its
/// UART (log mode keeps their lines apart).
pub fn console_out_from(slot: u16, virtio: bool, byte: u8) {
    // Written under the multiplexer's lock: the terminal must see the
    // order the multiplexer decided (streamed partial lines).
    let mut mux = console().lock();
    if let Some(out) = mux.output_from(usize::from(slot), virtio, byte) {
        super::console::write(&out);
    }
}
