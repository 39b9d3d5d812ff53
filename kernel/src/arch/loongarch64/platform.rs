//! kestrel's [`Platform`] on LoongArch64 root mode.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::base::platform::{ExitStatus, Platform, StartError};
use crate::host::board::MemRegion;
use crate::host::reserve::Ranges;
use crate::MAX_CPUS;

use super::super::mmio::Block;
use super::bootinfo::PowerOffReg;
use super::ns16550::Ns16550;
use super::{csr, dmw, iocsr, smp, timer};

/// The logical index of the calling CPU, kept in CSR SAVE1 (written by the
/// entry code of every CPU before any Rust code runs).
pub fn current_cpu() -> usize {
    csr::save1() as usize
}

/// Counter value of each CPU's next tick while its timer is one-shot (0:
/// the timer is still periodic, every timer interrupt is the tick).
static NEXT_TICK: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Makes the tick of `cpu` one-shot from now on: the timer also serves
/// guest deadlines ([`tick_due`] sorts its interrupts), the next tick is
/// one period away.
pub fn start_oneshot_tick(cpu: usize) {
    if let Some(n) = NEXT_TICK.get(cpu) {
        n.store(csr::rdtime() + timer::period().max(1), Ordering::Relaxed);
    }
}

/// Counter value of `cpu`'s next tick (0 while the timer is periodic).
pub fn next_tick(cpu: usize) -> u64 {
    NEXT_TICK.get(cpu).map_or(0, |n| n.load(Ordering::Relaxed))
}

/// A timer interrupt on `cpu` (interrupt context): whether it is kestrel's
/// tick. While the timer is periodic every interrupt is; once it is
/// one-shot ([`start_oneshot_tick`]) the tick is due when its deadline has
/// passed (the next one is then a whole number of periods later).
pub fn tick_due(cpu: usize) -> bool {
    let Some(n) = NEXT_TICK.get(cpu) else {
        return true;
    };
    let next = n.load(Ordering::Relaxed);
    if next == 0 {
        return true;
    }
    let now = csr::rdtime();
    if now < next {
        return false;
    }
    let period = timer::period().max(1);
    n.store(
        next + period * ((now - next) / period + 1),
        Ordering::Relaxed,
    );
    true
}

/// The physical end of kestrel's image: everything below it (loader data,
/// the image with its stacks and heap) stays kestrel's.
pub fn image_end() -> u64 {
    unsafe extern "C" {
        static __image_end: u8;
    }
    dmw::to_phys(core::ptr::addr_of!(__image_end) as u64)
}

/// RAM guests must not get beyond `[0, image_end)`: what UEFI firmware
/// keeps after ExitBootServices (set once by the boot CPU before any VM
/// is built; empty when QEMU started kestrel directly).
static FIRMWARE_RESERVED: crate::base::lock::Once<Ranges> = crate::base::lock::Once::new();

/// Records the ranges UEFI firmware keeps (see [`reserved`]).
pub fn set_firmware_reserved(r: Ranges) {
    FIRMWARE_RESERVED.call_once(|| r);
}

/// The boot module (the VM package the loader placed), kept from guests.
static BOOT_MODULE: crate::base::lock::Once<MemRegion> = crate::base::lock::Once::new();

/// Records the boot module's range (checked by the caller) so that
/// [`reserved`] keeps it from guests. Boot CPU, before any VM is built.
pub fn set_boot_module(m: MemRegion) {
    BOOT_MODULE.call_once(|| m);
}

/// Every range guests must not get: kestrel's image and everything below
/// it (loader data, the image with its stacks and heap), the boot module,
/// and what the firmware keeps.
pub fn reserved() -> Ranges {
    let mut r = FIRMWARE_RESERVED.get().cloned().unwrap_or_default();
    r.add(0, image_end());
    if let Some(m) = BOOT_MODULE.get() {
        r.add(m.base, m.end());
    }
    r
}

pub struct LoongArchPlatform {
    uart: Ns16550,
    /// Counter frequency in Hz (from CPUCFG4/5).
    counter_hz: AtomicU64,
    /// Power-off register: physical address, and value | width << 32.
    poweroff_pa: AtomicU64,
    poweroff_val: AtomicU64,
    /// The command line asked for power-off at exit (known before the
    /// board is published, for fatal errors during early boot).
    early_poweroff: AtomicBool,
}

/// The one instance handed to `runtime::primary_main`.
pub static PLATFORM: LoongArchPlatform = LoongArchPlatform {
    uart: Ns16550::new(),
    counter_hz: AtomicU64::new(0),
    poweroff_pa: AtomicU64::new(super::bootinfo::QEMU_VIRT_POWEROFF.pa),
    poweroff_val: AtomicU64::new(
        super::bootinfo::QEMU_VIRT_POWEROFF.value as u64
            | (super::bootinfo::QEMU_VIRT_POWEROFF.width as u64) << 32,
    ),
    early_poweroff: AtomicBool::new(false),
};

impl LoongArchPlatform {
    /// Sends console output to the 16550 at physical `pa`.
    pub fn set_console(&self, pa: u64) {
        self.uart.set_base(pa);
    }

    /// A byte typed on the console, if any.
    pub fn console_read(&self) -> Option<u8> {
        self.uart.read_byte()
    }

    pub fn console_pa(&self) -> u64 {
        self.uart.base_pa()
    }

    pub fn set_counter_hz(&self, hz: u64) {
        self.counter_hz.store(hz, Ordering::Release);
    }

    pub fn set_poweroff(&self, reg: PowerOffReg) {
        self.poweroff_val.store(
            reg.value as u64 | (reg.width as u64) << 32,
            Ordering::Release,
        );
        self.poweroff_pa.store(reg.pa, Ordering::Release);
    }

    /// Records whether the command line asked for power-off at exit.
    pub fn set_early_poweroff(&self, on: bool) {
        self.early_poweroff.store(on, Ordering::Release);
    }

    /// A fatal error before `runtime::primary_main` has the board: prints
    /// `args`, then powers off (failure) if the command line asked for
    /// power-off at exit, else halts this CPU.
    pub fn early_fatal(&self, args: core::fmt::Arguments) -> ! {
        crate::base::klog::print_unlocked(format_args!("\nkestrel: FATAL: {args}\n"));
        if self.early_poweroff.load(Ordering::Acquire) {
            crate::base::klog::print_unlocked(format_args!(
                "kestrel: powering off (status {})\n",
                ExitStatus::Failure.code()
            ));
            self.power_off(ExitStatus::Failure)
        }
        crate::base::klog::print_unlocked(format_args!("kestrel: halting\n"));
        self.halt()
    }

    fn poweroff_write(&self) {
        let va = dmw::uncached(self.poweroff_pa.load(Ordering::Acquire));
        let v = self.poweroff_val.load(Ordering::Acquire);
        let (value, width) = (v as u32, (v >> 32) as u8);
        let va = va as usize;
        // SAFETY: the address is the syscon power-off register the device
        // tree names (or QEMU virt's GED register), in the uncached window
        // (never 0); the block is one register of the syscon's width.
        unsafe {
            match width {
                1 => Block::<u8>::new(va).regs().write(value as u8),
                2 => Block::<u16>::new(va).regs().write(value as u16),
                _ => Block::<u32>::new(va).regs().write(value),
            }
        }
    }
}

impl Platform for LoongArchPlatform {
    fn console_write(&self, bytes: &[u8]) {
        self.uart.write_bytes(bytes);
    }

    fn console_try_write(&self, bytes: &[u8]) -> usize {
        self.uart.try_write(bytes)
    }

    fn cpu_index(&self) -> usize {
        current_cpu()
    }

    fn start_cpu(&self, index: usize) -> Result<(), StartError> {
        let hw_id = crate::host::board::get()
            .and_then(|b| b.cpus.get(index))
            .map(|c| c.hw_id)
            .ok_or(StartError::Firmware(-2))?;
        smp::start(hw_id, index)
    }

    fn resend_start(&self, index: usize) -> bool {
        crate::host::board::get()
            .and_then(|b| b.cpus.get(index))
            .is_some_and(|c| smp::resend(c.hw_id))
    }

    fn counter(&self) -> u64 {
        csr::rdtime()
    }

    fn counter_hz(&self) -> u64 {
        self.counter_hz.load(Ordering::Acquire)
    }

    fn start_tick(&self, hz: u32) {
        timer::start_periodic(self.counter_hz(), hz);
        iocsr::ipi_enable_all();
        // SAFETY: unmasks the IPI line; the exception entry acknowledges IPIs.
        unsafe { csr::xchg_ecfg(csr::Irqs::IPI.bits(), csr::Irqs::IPI.bits()) };
        csr::irq_enable();
    }

    fn wait_for_interrupt(&self) {
        csr::idle();
    }

    fn power_off(&self, _status: ExitStatus) -> ! {
        // The GED register cannot carry a status: runtime prints it first.
        csr::irq_disable();
        self.poweroff_write();
        self.halt()
    }

    fn halt(&self) -> ! {
        csr::irq_disable();
        loop {
            csr::idle();
        }
    }
}
