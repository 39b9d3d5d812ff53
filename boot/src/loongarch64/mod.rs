//! LoongArch64 entry: the assembly entry points (entry.S), then the boot
//! CPU's and the secondaries' first Rust code. What QEMU passes and how the
//! CPUs are brought up is described in docs/loongarch-boot.md.

use core::arch::global_asm;

use alloc::string::String;
use core::fmt::Write;
use kernel::arch::loongarch64::{
    bootinfo, csr, dmw, exceptions, platform, platform::PLATFORM, smp,
};
use kernel::host::board::{Arch, Backend, BoardInfo, UartKind};
use kernel::host::efiboot::EfiBoot;
use log::{info, warn};

mod efi;

extern crate alloc;

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
    pa_mask = const dmw::PA_MASK,
    hw_to_index = sym smp::HW_TO_INDEX,
    efi_main = sym efi::kestrel_la_efi_main,
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
    kernel::base::klog::init(&PLATFORM, log::LevelFilter::Info);
    let uefi = efi::handoff();
    // The command line (the a1 string, or UEFI load options), read now so
    // early failures know whether to power off.
    let loader_cmdline = match uefi {
        Some(h) => h.has_cmdline.then_some(h.cmdline.as_str()),
        None if a0 == 1 => bootinfo::cmdline_at(a1),
        None => None,
    };
    if let Some(s) = loader_cmdline {
        let on_exit = kernel::host::cmdline::BootOptions::parse(s).on_exit;
        PLATFORM.set_early_poweroff(on_exit == kernel::host::cmdline::OnExit::PowerOff);
    }

    let mut board = match uefi {
        Some(h) => board_from_uefi(h),
        None => board_from_fdt(a2),
    };
    // QEMU's direct boot names an `-initrd` in its EFI table, not in
    // /chosen (which other loaders use).
    if uefi.is_none() && board.module.is_none() {
        board.module = bootinfo::initrd_from_efi(a2);
    }

    // Command line: the a1 string (QEMU does not fill /chosen/bootargs on
    // LoongArch); /chosen/bootargs if a1 gave nothing.
    match loader_cmdline {
        Some(s) if !s.is_empty() => board.cmdline = kernel::host::board::bounded(s),
        Some(_) => {}
        None if a0 == 1 && uefi.is_none() => {
            warn!("command line at {a1:#x} is not text; using /chosen/bootargs")
        }
        None => {}
    }
    let on_exit = kernel::host::cmdline::BootOptions::parse(board.cmdline.as_str()).on_exit;
    PLATFORM.set_early_poweroff(on_exit == kernel::host::cmdline::OnExit::PowerOff);

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

    // Memory: enough of it, and the image inside it.
    let image = (
        dmw::to_phys(core::ptr::addr_of!(__image_start) as u64),
        dmw::to_phys(core::ptr::addr_of!(__image_end) as u64),
    );
    if board.memory_bytes() < MIN_MEMORY {
        early_halt(format_args!(
            "only {} MiB of RAM found; kestrel needs at least {} MiB",
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
            "kestrel's image [{:#x}-{:#x}) is not inside any RAM region the firmware lists",
            image.0, image.1
        ));
    }

    if let Some(m) = board.module {
        match kernel::host::board::check_module(m, &board.memory, image) {
            Ok(m) => {
                platform::set_boot_module(m);
                // SAFETY: check_module put [base, end) inside a RAM region
                // of the board, above kestrel's image; the cached window
                // maps all of it. `set_boot_module` keeps it from guests
                // (platform::reserved), and kestrel never writes it, so the
                // bytes stay as the loader left them.
                let bytes = unsafe {
                    core::slice::from_raw_parts(dmw::cached(m.base) as *const u8, m.size as usize)
                };
                kernel::vmm::vmconfig::log_module(m, kernel::vmm::vmconfig::set_module(bytes));
            }
            Err(why) => kernel::vmm::vmconfig::log_module_refused(m, why),
        }
    }

    // This CPU's logical index (CPUs are numbered by hardware id).
    let hw = csr::hw_cpu_id();
    let Some(me) = board.cpu_index(hw) else {
        early_halt(format_args!(
            "boot CPU (hw id {hw}) is not among the CPUs the firmware lists (device tree /cpus, ACPI MADT)"
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
    board.backend = kernel::arch::loongarch64::lvz::select(board.cmdline.as_str());
    kernel::runtime::primary_main(board, &PLATFORM)
}

/// The board from the device tree QEMU's direct boot passes (a2 = its
/// minimal EFI system table), with the power-off register it names.
fn board_from_fdt(a2: u64) -> BoardInfo {
    let Some((blob, fdt_pa, found_by)) = bootinfo::find_fdt(a2) else {
        early_halt(format_args!(
            "no device tree: none in the EFI system table (a2 = {a2:#x}) and no FDT magic at {:#x}; \
             boot kestrel with QEMU -M virt, UEFI firmware, or a loader that passes one",
            bootinfo::QEMU_VIRT_FDT_PA
        ))
    };
    let board = match kernel::host::dtb::parse(blob, Arch::LoongArch64) {
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
    board
}

/// The board UEFI firmware describes: RAM from the memory map taken at
/// ExitBootServices (free ranges only; what the firmware keeps is kept from
/// guests), cores, nodes, console and power-off from ACPI.
fn board_from_uefi(h: &EfiBoot) -> BoardInfo {
    info!(
        "started by UEFI firmware \"{}\" (image at {:#x}), boot services exited; \
         {} of {} memory map entries stay the firmware's ({} KiB, kept from guests)",
        h.vendor,
        h.load_addr,
        h.descriptors,
        h.map_entries,
        h.firmware.bytes() >> 10
    );
    if let Some(e) = h.map_error {
        early_halt(format_args!("{e}"));
    }
    let (regions, gaps) = h.memory_regions();
    let mut reserved = h.firmware.clone();
    for &(s, e) in gaps.as_slice() {
        reserved.add(s, e);
    }
    platform::set_firmware_reserved(reserved);
    let mut line = String::new();
    for r in &regions {
        let _ = write!(line, " [{:#x}-{:#x})", r.base, r.end());
    }
    info!("UEFI memory map: free RAM{line}");
    if h.dtb != 0 {
        info!(
            "UEFI configuration table also names a device tree at {:#x} (not used: ACPI describes the board)",
            h.dtb
        );
    }
    if h.rsdp == 0 {
        early_halt(format_args!(
            "UEFI firmware gave no ACPI 2.0 RSDP in its configuration table (device tree at {:#x}); \
             kestrel reads the machine from ACPI when UEFI starts it",
            h.dtb
        ));
    }
    let mem = bootinfo::FirmwareMemory::new(&h.described);
    let info = match kernel::host::acpi::loongarch::parse(&mem, h.rsdp) {
        Ok(i) => i,
        Err(e) => early_halt(format_args!("{e} (RSDP at {:#x})", h.rsdp)),
    };
    let mut tables = String::new();
    for t in &info.tables {
        let _ = write!(tables, " {t}");
    }
    info!(
        "ACPI: RSDP at {:#x} (revision {}), tables:{tables}",
        h.rsdp, info.revision
    );
    let board = kernel::host::acpi::loongarch::loongarch_board(&info, &regions);
    let mut cores = String::new();
    for (i, c) in info.cores.iter().enumerate() {
        let _ = write!(cores, " cpu{i}=core{}/node{}", c.hw_id, c.node);
    }
    info!(
        "ACPI: {} core(s) on {} node(s) (MADT core PIC, SRAT):{cores}",
        info.cores.len(),
        info.core_nodes()
    );
    if !info.memory.is_empty() {
        let mut m = String::new();
        for r in &info.memory {
            let _ = write!(
                m,
                " node{}=[{:#x}-{:#x}){}",
                r.node,
                r.base,
                r.base + r.size,
                if r.hotplug { "(hot-plug)" } else { "" }
            );
        }
        info!("ACPI: SRAT memory:{m}");
    }
    if info.cores_disabled > 0 {
        info!(
            "ACPI: {} core(s) listed as disabled, left alone",
            info.cores_disabled
        );
    }
    if info.localities > 1 {
        let mut d = String::new();
        for a in 0..info
            .localities
            .min(kernel::host::acpi::loongarch::MAX_NODES as u64) as u32
        {
            let _ = write!(d, " [");
            for b in 0..info
                .localities
                .min(kernel::host::acpi::loongarch::MAX_NODES as u64) as u32
            {
                let _ = write!(
                    d,
                    "{}{}",
                    if b > 0 { " " } else { "" },
                    info.distance(a, b).unwrap_or(0)
                );
            }
            let _ = write!(d, "]");
        }
        info!("ACPI: SLIT: {} localities, distances{d}", info.localities);
    }
    if board.cpus.is_empty() {
        early_halt(format_args!(
            "ACPI MADT lists no enabled core (Core PIC structures, type 0x11)"
        ));
    }
    match board.uart {
        Some(u) => {
            PLATFORM.set_console(u.base);
            info!("console: 16550 at {:#x} (ACPI SPCR)", u.base);
        }
        None => {
            warn!("no 16550 console in the ACPI SPCR; keeping the console at {EARLY_UART_PA:#x}")
        }
    }
    match info.sleep_control {
        Some(r) => {
            // Hardware-reduced ACPI: S5 is SLP_TYP 5 | SLP_EN in the sleep
            // control register (QEMU's \_S5; the DSDT is not read).
            let reg = bootinfo::PowerOffReg {
                pa: r.pa,
                value: 0x34,
                width: r.width.min(4),
            };
            info!(
                "power-off: ACPI FADT sleep control register {:#x} <- {:#x}",
                reg.pa, reg.value
            );
            PLATFORM.set_poweroff(reg);
        }
        None => warn!(
            "no sleep control register in the ACPI FADT; using QEMU virt's GED register {:#x}",
            bootinfo::QEMU_VIRT_POWEROFF.pa
        ),
    }
    board
}

extern "C" fn secondary_entry(index: u64) -> ! {
    exceptions::init_cpu();
    kernel::arch::loongarch64::iocsr::clear_boot_mailboxes();
    // A repeated start IPI may still be pending (the boot CPU resends while
    // this CPU is not online): drop it before the tick unmasks IPIs. One
    // arriving later is acknowledged by the interrupt entry.
    kernel::arch::loongarch64::iocsr::ipi_ack();
    kernel::runtime::secondary_main(index as usize)
}
