//! [`Platform`] for arm64 at EL2.

use crate::base::lock::Once;
use heapless::Vec;

use crate::base::platform::{ExitStatus, Platform, StartError};
use crate::host::board::{BoardInfo, PsciConduit, UartKind};
use crate::host::reserve::Ranges;
use crate::MAX_CPUS;

use super::gic::{self, Gic};
use super::pl011::{self, Pl011};
use super::{percpu, psci, smp, timer};

struct State {
    uart: Option<Pl011>,
    gic: Gic,
    psci: Option<PsciConduit>,
    hw_ids: Vec<u64, MAX_CPUS>,
    counter_hz: u64,
    secondary_entry: usize,
    /// Physical ranges guests must not get: the image (with .bss, heap and
    /// stacks), the boot DTB, what it reserves and what UEFI firmware keeps.
    reserved: Ranges,
}

static STATE: Once<State> = Once::new();

/// kestrel's arm64 platform: all state is set once by [`init`].
pub struct Arm64;

pub static PLATFORM: Arm64 = Arm64;

/// Records what the platform needs from the board. Boot CPU, MMU on.
pub fn init(board: &BoardInfo, gic: Gic, secondary_entry: usize, reserved: Ranges) {
    STATE.call_once(|| State {
        uart: board
            .uart
            .filter(|u| u.kind == UartKind::Pl011)
            .map(|u| Pl011::new(u.base as usize)),
        gic,
        psci: board.psci,
        hw_ids: board.cpus.iter().map(|c| c.hw_id).collect(),
        counter_hz: board.timer_hz,
        secondary_entry,
        reserved,
    });
}

/// The boot device tree (the host's), kept (reserved) for the VMs'
/// passthrough checks.
static HOST_DTB: crate::base::lock::Once<&'static [u8]> = crate::base::lock::Once::new();

/// Records the host device tree (boot CPU, once).
pub fn set_host_dtb(blob: &'static [u8]) {
    HOST_DTB.call_once(|| blob);
}

/// The host device tree (empty if none was recorded).
pub fn host_dtb() -> &'static [u8] {
    HOST_DTB.get().copied().unwrap_or(&[])
}

/// The GIC, once the platform is initialised.
pub fn gic() -> Option<&'static Gic> {
    STATE.get().map(|s| &s.gic)
}

/// Physical ranges guests must not get: the image (with .bss, heap and
/// stacks), the boot DTB, what it reserves and what UEFI firmware keeps.
pub fn reserved() -> &'static [(u64, u64)] {
    STATE.get().map_or(&[], |s| s.reserved.as_slice())
}

/// A byte typed on the console UART, if any.
pub fn console_read() -> Option<u8> {
    STATE.get()?.uart?.read_byte()
}

/// Whether `klog` can print (the platform is initialised).
pub fn console_ready() -> bool {
    STATE.get().is_some()
}

/// Masks interrupts and stops the calling CPU.
pub fn halt_cpu() -> ! {
    // SAFETY: masking all exceptions on the calling CPU only.
    unsafe { core::arch::asm!("msr daifset, #0xf", options(nomem, nostack)) };
    loop {
        aarch64_cpu::asm::wfi();
    }
}

impl Platform for Arm64 {
    fn console_write(&self, bytes: &[u8]) {
        match STATE.get() {
            Some(s) => {
                if let Some(u) = s.uart {
                    u.write_bytes(bytes)
                }
            }
            None => pl011::early().write_bytes(bytes),
        }
    }

    fn console_try_write(&self, bytes: &[u8]) -> usize {
        match STATE.get() {
            Some(s) => s.uart.map_or(bytes.len(), |u| u.try_write(bytes)),
            None => pl011::early().try_write(bytes),
        }
    }

    fn cpu_index(&self) -> usize {
        percpu::index()
    }

    fn start_cpu(&self, index: usize) -> Result<(), StartError> {
        let s = STATE.get().ok_or(StartError::Firmware(-1))?;
        let hw_id = *s.hw_ids.get(index).ok_or(StartError::Firmware(-2))?;
        smp::start_cpu(s.psci, s.secondary_entry, index, hw_id)
    }

    fn counter(&self) -> u64 {
        timer::counter()
    }

    fn counter_hz(&self) -> u64 {
        STATE.get().map_or(0, |s| s.counter_hz).max(1)
    }

    fn start_tick(&self, hz: u32) {
        if let Some(s) = STATE.get() {
            s.gic.enable_ppi(timer::PPI, gic::Priority::Tick);
        }
        timer::start(hz);
        // SAFETY: unmasking IRQs: the vectors and GIC are set up on this CPU.
        unsafe { core::arch::asm!("msr daifclr, #2", options(nomem, nostack)) };
    }

    fn wait_for_interrupt(&self) {
        aarch64_cpu::asm::wfi();
    }

    fn power_off(&self, status: ExitStatus) -> ! {
        match STATE.get().and_then(|s| s.psci) {
            Some(conduit) => {
                psci::system_off(conduit);
                crate::base::klog::print_unlocked(format_args!(
                    "kestrel: PSCI SYSTEM_OFF failed (status {}); halting\n",
                    status.code()
                ));
            }
            None => crate::base::klog::print_unlocked(format_args!(
                "kestrel: no PSCI to power off with (status {}); halting\n",
                status.code()
            )),
        }
        halt_cpu()
    }

    fn halt(&self) -> ! {
        halt_cpu()
    }
}
