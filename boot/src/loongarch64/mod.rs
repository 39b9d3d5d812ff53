//! LoongArch64 entry: the assembly entry points (entry.S), then the boot
//! CPU's and the secondaries' first Rust code. What QEMU passes and how the
//! CPUs are brought up is described in docs/loongarch-boot.md.

use core::arch::global_asm;

use kernel::arch::loongarch64::{bootinfo, csr, dmw, exceptions, platform::PLATFORM, smp};
use kernel::board::{Arch, Backend, UartKind};
use log::{info, warn};

/// Stack of each CPU; slot 0 is the boot CPU's, slot i + 1 logical CPU i's.
const STACK_SIZE: usize = 64 << 10;
const STACK_SLOTS: usize = kernel::MAX_CPUS + 1;

/// The UART assumed before the device tree is read: QEMU virt's first
/// NS16550A (also the Loongson 3A5000 / LS7A console address).
const EARLY_UART_PA: u64 = 0x1fe0_01e0;

/// Least RAM kestrel boots with (image, heap and room for guests).
const MIN_MEMORY: u64 = 64 << 20;

#[repr(C, align(16))]
struct Stacks([[u8; STACK_SIZE]; STACK_SLOTS]);

static mut STACKS: Stacks = Stacks([[0; STACK_SIZE]; STACK_SLOTS]);

unsafe extern "C" {
    fn kestrel_la_secondary_entry();
    static __image_start: u8;
    static __image_end: u8;
}

// SAFETY: the entry code runs before any Rust code, on a stack carved from
// STACKS per CPU (slot 0 for the boot CPU, index + 1 for the others, bounds
// checked against MAX_CPUS), and calls the two functions below with the
// C ABI.
global_asm!(
    include_str!("entry.S"),
    stacks = sym STACKS,
    stack_size = const STACK_SIZE,
    max_cpus = const kernel::MAX_CPUS,
    dmw0 = const dmw::DMW0_VALUE,
    dmw1 = const dmw::DMW1_VALUE,
    primary = sym primary_entry,
    secondary = sym secondary_entry,
);

/// Prints `msg` on the console and stops: the boot cannot go on. Halts this
/// CPU, or powers off when the command line says `kestrel.exit=poweroff`.
fn early_halt(msg: core::fmt::Arguments) -> ! {
    PLATFORM.early_fatal(msg)
}

extern "C" fn primary_entry(a0: u64, a1: u64, a2: u64) -> ! {
    exceptions::init_cpu();
    crate::heap::init();
    PLATFORM.set_console(EARLY_UART_PA);
    PLATFORM.set_counter_hz(csr::counter_hz());
    kernel::klog::init(&PLATFORM, log::LevelFilter::Info);
    // The a1 string, read now so early failures know whether to power off.
    let loader_cmdline = if a0 == 1 {
        bootinfo::cmdline_at(a1)
    } else {
        None
    };
    if let Some(s) = loader_cmdline {
        let on_exit = kernel::cmdline::BootOptions::parse(s).on_exit;
        PLATFORM.set_early_poweroff(on_exit == kernel::cmdline::OnExit::PowerOff);
    }

    let Some((blob, fdt_pa, found_by)) = bootinfo::find_fdt(a2) else {
        early_halt(format_args!(
            "no device tree: none in the EFI system table (a2 = {a2:#x}) and no FDT magic at {:#x}; \
             boot kestrel with QEMU -M virt or a loader that passes one",
            bootinfo::QEMU_VIRT_FDT_PA
        ))
    };
    let mut board = match kernel::dtb::parse(blob, Arch::LoongArch64) {
        Ok(b) => b,
        Err(e) => early_halt(format_args!("{e} (FDT at {fdt_pa:#x})")),
    };
    if let Some(uart) = board.uart.filter(|u| u.kind == UartKind::Ns16550) {
        PLATFORM.set_console(uart.base);
    }
    info!(
        "device tree at {fdt_pa:#x} ({} bytes, from the {found_by})",
        blob.len()
    );

    // Command line: the a1 string (QEMU does not fill /chosen/bootargs on
    // LoongArch); /chosen/bootargs if a1 gave nothing.
    match loader_cmdline {
        Some(s) if !s.is_empty() => board.cmdline = kernel::board::bounded(s),
        Some(_) => {}
        None if a0 == 1 => warn!("command line at {a1:#x} is not text; using /chosen/bootargs"),
        None => {}
    }
    let on_exit = kernel::cmdline::BootOptions::parse(board.cmdline.as_str()).on_exit;
    PLATFORM.set_early_poweroff(on_exit == kernel::cmdline::OnExit::PowerOff);

    // The counter: CPUCFG4/5 say it, the device tree does not.
    board.timer_hz = csr::counter_hz();
    if board.timer_hz == 0 {
        early_halt(format_args!("CPUCFG4/5 report no stable-counter frequency"));
    }

    board.backend = if csr::has_lvz() {
        info!("LVZ present (CPUCFG2.LVZP): guests will run with hardware virtualization");
        Backend::LoongArchLvz
    } else {
        info!("LVZ absent: guests will run deprivileged at PLV3 (trap-and-emulate)");
        Backend::LoongArchTrapEmulate
    };

    match bootinfo::fdt_poweroff(blob) {
        Some(reg) => {
            info!(
                "power-off: syscon register {:#x} <- {:#x} (device tree)",
                reg.pa, reg.value
            );
            PLATFORM.set_poweroff(reg);
        }
        None => warn!(
            "no syscon-poweroff in the device tree; using QEMU virt's GED register {:#x}",
            bootinfo::QEMU_VIRT_POWEROFF.pa
        ),
    }

    // Memory: enough of it, and the image inside it.
    let image = (
        dmw::to_phys(core::ptr::addr_of!(__image_start) as u64),
        dmw::to_phys(core::ptr::addr_of!(__image_end) as u64),
    );
    if board.memory_bytes() < MIN_MEMORY {
        early_halt(format_args!(
            "only {} MiB of RAM in the device tree; kestrel needs at least {} MiB",
            board.memory_bytes() >> 20,
            MIN_MEMORY >> 20
        ));
    }
    if !board
        .memory
        .iter()
        .any(|r| r.base <= image.0 && image.1 <= r.end())
    {
        early_halt(format_args!(
            "kestrel's image [{:#x}-{:#x}) is not inside any RAM region of the device tree",
            image.0, image.1
        ));
    }

    // This CPU's logical index (CPUs are numbered by hardware id).
    let hw = csr::hw_cpu_id();
    let Some(me) = board.cpu_index(hw) else {
        early_halt(format_args!(
            "boot CPU (hw id {hw}) is not in the device tree's /cpus"
        ))
    };
    // SAFETY: SAVE1 is kestrel's per-CPU index word; nothing else uses it.
    unsafe { csr::write_save1(me as u64) };

    smp::set_secondary_entry(dmw::to_phys(
        kestrel_la_secondary_entry as *const () as usize as u64,
    ));
    let (used, free) = crate::heap::usage();
    info!(
        "image [{:#x}-{:#x}), heap {} KiB used / {} KiB free, console 16550 at {:#x}",
        image.0,
        image.1,
        used >> 10,
        free >> 10,
        PLATFORM.console_pa()
    );
    kernel::runtime::primary_main(board, &PLATFORM)
}

extern "C" fn secondary_entry(index: u64) -> ! {
    exceptions::init_cpu();
    kernel::arch::loongarch64::iocsr::clear_boot_mailboxes();
    kernel::runtime::secondary_main(index as usize)
}
