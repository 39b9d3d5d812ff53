//! The arm64 boot sequence in Rust, called by the boot crate's entry code.
//!
//! [`primary_early`] runs with the MMU off (so: no atomic read-modify-write,
//! no locks, no heap): it checks the exception level and the DTB, reads the
//! board, builds the identity map and turns the MMU on. The boot crate then
//! initialises the heap and calls [`primary_run`], which sets up the
//! platform and the GIC and enters `runtime::primary_main`.

use core::fmt;

use crate::base::platform::Platform;
use crate::host::acpi::{self, arm64::Ppis, PhysMem};
use crate::host::board::{Arch, BoardInfo, MemRegion, UartKind};
use crate::host::dtb;
use crate::host::efiboot::EfiBoot;

use super::gic::Gic;
use super::{exceptions, mmu, percpu, pl011, platform, timer};

/// What the entry assembly hands over.
#[derive(Clone, Copy, Debug)]
pub struct BootArgs {
    /// x0 at entry: the DTB's physical address (Linux boot protocol).
    pub dtb: usize,
    /// CurrentEL.EL at entry.
    pub current_el: u64,
    /// Relocations of a type other than R_AARCH64_RELATIVE (not applied).
    pub bad_relocs: u64,
    /// Where the loader put the image (the relocation offset).
    pub load_addr: usize,
    /// The image in memory, .bss included.
    pub image_start: usize,
    pub image_end: usize,
    /// Physical address of the secondary CPUs' entry (PSCI CPU_ON).
    pub secondary_entry: usize,
    /// The heap's (used, free) bytes, for the boot log.
    pub heap_usage: fn() -> (usize, usize),
    /// What the UEFI stage found, when UEFI firmware started the image.
    pub efi: Option<&'static EfiBoot>,
}

/// The interrupts kestrel uses at fixed numbers, which ACPI tables must
/// agree with.
pub const ACPI_PPIS: Ppis = Ppis {
    el2_timer: timer::PPI,
    vtimer: super::vm::VTIMER_PPI,
    maintenance: super::vm::MAINTENANCE_PPI,
};

/// Physical memory for the ACPI reader: the RAM runs of the UEFI memory
/// map, read through an identity map (the firmware's, or none: MMU off).
pub struct AcpiRam<'a>(pub &'a [MemRegion]);

impl PhysMem for AcpiRam<'_> {
    fn read(&self, pa: u64, len: usize) -> Option<&[u8]> {
        let end = pa.checked_add(len as u64)?;
        if !self.0.iter().any(|r| r.base <= pa && end <= r.end()) {
            return None;
        }
        // SAFETY: `[pa, pa + len)` lies inside one RAM run of the UEFI
        // memory map, identity mapped (the firmware's map, or kestrel's,
        // or the MMU is off), so it is readable. The reader is used on the
        // boot CPU alone while nothing else runs, and only reads: the
        // bytes do not change while borrowed (the ACPI tables themselves
        // are in firmware-kept memory, never given to guests).
        Some(unsafe { core::slice::from_raw_parts(pa as usize as *const u8, len) })
    }
}

/// The RSDP to read the board from: UEFI firmware gave ACPI tables and
/// no device tree.
fn acpi_rsdp(args: &BootArgs) -> Option<(&'static EfiBoot, u64)> {
    let efi = args.efi?;
    (args.dtb == 0 && efi.rsdp != 0).then_some((efi, efi.rsdp))
}

/// Least RAM kestrel boots with.
pub const MIN_MEMORY: u64 = 64 << 20;
/// Largest device tree accepted (the Linux boot protocol's limit).
const MAX_DTB: usize = 2 << 20;

/// Prints a fatal boot error on the early console and halts, for errors
/// before the platform (and `klog`) exist.
fn die(args: fmt::Arguments) -> ! {
    pl011::early_print(format_args!("\nkestrel: FATAL: {args}\nkestrel: halting\n"));
    loop {
        // SAFETY: masking interrupts and waiting; valid at any EL.
        unsafe { core::arch::asm!("msr daifset, #0xf", "wfi", options(nomem, nostack)) };
    }
}

/// The DTB the loader passed, as a slice of its header's total size.
fn dtb_blob(pa: usize) -> Result<&'static [u8], &'static str> {
    if pa == 0 {
        return Err(
            "no device tree: x0 was 0 at entry (boot with a loader that passes one, \
                    e.g. QEMU -kernel with the raw Image, U-Boot booti)",
        );
    }
    if !pa.is_multiple_of(8) {
        return Err("device tree address in x0 is not 8-byte aligned");
    }
    // SAFETY: the loader passes the DTB's address in x0 (Linux boot
    // protocol); with the MMU off any physical address may be read, and the
    // 8 header bytes are read before the length they give is trusted.
    let header: [u8; 8] = unsafe { core::ptr::read_volatile(pa as *const [u8; 8]) };
    let size = dtb::total_size(&header).ok_or("x0 does not point at a device tree (bad magic)")?;
    if size > MAX_DTB {
        return Err("device tree claims to be larger than 2 MiB");
    }
    // SAFETY: `size` bytes from `pa` are the blob the header describes; the
    // loader keeps it in RAM and nothing in kestrel writes there.
    Ok(unsafe { core::slice::from_raw_parts(pa as *const u8, size) })
}

/// The first PL011 in a tree that `dtb::parse` refused (for the message).
fn find_pl011(blob: &[u8]) -> Option<usize> {
    let fdt = dtb::Tree::new(blob).ok()?;
    let node = fdt.find_compatible(&["arm,pl011"])?;
    Some(node.reg()?.next()?.0 as usize)
}

/// Boot CPU, MMU off: checks, board, identity map, MMU on. Never returns on
/// error: prints why and halts.
pub fn primary_early(args: &BootArgs) -> BoardInfo {
    if let Some((efi, rsdp)) = acpi_rsdp(args) {
        // The UEFI stage checked the tables; read them again here (MMU
        // off: they were cleaned to the point of coherency).
        let from = acpi::arm64::parse(&AcpiRam(&efi.ram.regions), rsdp, ACPI_PPIS)
            .map(|a| a.board(&efi.ram.regions, ""));
        if let Ok(board) = &from {
            if let Some(u) = board.uart.filter(|u| u.kind == UartKind::Pl011) {
                pl011::set_early(u.base as usize);
            }
        }
        return early_checks(args, from.map_err(EarlyError::Acpi));
    }
    let blob = dtb_blob(args.dtb);
    let parsed = blob.map(|b| dtb::parse(b, Arch::Aarch64));
    // The console: the DTB's UART if the tree says, else the guess.
    match (&blob, &parsed) {
        (_, Ok(Ok(board))) => {
            if let Some(u) = board.uart.filter(|u| u.kind == UartKind::Pl011) {
                pl011::set_early(u.base as usize);
            }
        }
        // A well-formed tree that lacks something kestrel needs.
        (Ok(b), Ok(Err(e))) if !matches!(e, dtb::DtbError::Malformed(_)) => {
            if let Some(base) = find_pl011(b) {
                pl011::set_early(base);
            }
        }
        _ => {}
    }
    early_checks(
        args,
        match parsed {
            Err(why) => Err(EarlyError::Text(why)),
            Ok(Err(e)) => Err(EarlyError::Dtb(e)),
            Ok(Ok(board)) => Ok(board),
        },
    )
}

/// Why the board could not be read.
enum EarlyError {
    Text(&'static str),
    Dtb(dtb::DtbError),
    Acpi(acpi::AcpiError),
}

impl fmt::Display for EarlyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EarlyError::Text(s) => f.write_str(s),
            EarlyError::Dtb(e) => write!(f, "{e}"),
            EarlyError::Acpi(e) => write!(f, "{e}"),
        }
    }
}

/// The rest of [`primary_early`], whatever described the board.
fn early_checks(args: &BootArgs, board: Result<BoardInfo, EarlyError>) -> BoardInfo {
    let from = if acpi_rsdp(args).is_some() {
        "the ACPI tables and UEFI memory map"
    } else {
        "the device tree"
    };
    if args.current_el != 2 {
        die(format_args!(
            "kestrel is a hypervisor and must be entered at EL2, but the loader entered it \
             at EL{}; configure the firmware/loader to start the kernel at EL2 \
             (QEMU: -M virt,virtualization=on)",
            args.current_el
        ));
    }
    percpu::set_index(0);
    exceptions::install();
    if args.bad_relocs != 0 {
        die(format_args!(
            "{} relocations of unsupported type in the image (only R_AARCH64_RELATIVE is handled)",
            args.bad_relocs
        ));
    }
    if !args.image_start.is_multiple_of(4096) {
        die(format_args!(
            "image loaded at {:#x}: not 4 KiB aligned",
            args.image_start
        ));
    }
    let mut board = match board {
        Err(e) => die(format_args!("{e}")),
        Ok(board) => board,
    };
    if board.timer_hz == 0 {
        board.timer_hz = timer::frequency();
    }
    if let Some(efi) = args.efi {
        if let Some(e) = efi.map_error {
            die(format_args!("{e}"));
        }
        // The load options are the command line (a DTB from UEFI firmware
        // has no bootargs of kestrel's).
        if efi.has_cmdline {
            board.cmdline = crate::host::board::bounded(&efi.cmdline);
        }
    }
    let total = board.memory_bytes();
    if total < MIN_MEMORY {
        die(format_args!(
            "only {} MiB of RAM in {from}; kestrel needs at least {} MiB",
            total >> 20,
            MIN_MEMORY >> 20
        ));
    }
    let (start, end) = (args.image_start as u64, args.image_end as u64);
    if !board
        .memory
        .iter()
        .any(|r| r.base <= start && end <= r.end())
    {
        die(format_args!(
            "the image [{start:#x}-{end:#x}) does not lie inside a RAM region of {from}"
        ));
    }
    let mpidr = percpu::mpidr_affinity();
    let Some(me) = board.cpu_index(mpidr) else {
        die(format_args!(
            "the boot CPU (MPIDR {mpidr:#x}) is not among the CPUs of {from}"
        ));
    };
    percpu::set_index(me);

    let map = match mmu::build(&board.memory) {
        Ok(map) => map,
        Err(e) => die(format_args!("cannot build the EL2 page tables: {e:?}")),
    };
    mmu::invalidate_dcache_range(args.image_start, args.image_end);
    // SAFETY: `map` is an identity map of all RAM (which holds the image,
    // its stack and page tables) as Normal memory and of the devices as
    // Device memory; stale lines over the image were just invalidated.
    unsafe { mmu::enable(&map.config) };
    mmu::publish(map.config);
    // From here on (atomics are safe with the MMU on) `klog`, and so panics
    // and `runtime::fatal`, print on the early console.
    crate::base::klog::init(&platform::PLATFORM, log::LevelFilter::Info);
    if map.ram_unmapped != 0 {
        pl011::early_print(format_args!(
            "kestrel: warning: {} MiB of RAM above 512 GiB is not mapped\n",
            map.ram_unmapped >> 20
        ));
    }
    board
}

/// Boot CPU, MMU on, heap ready: platform and GIC. Returns what the portable
/// boot flow (`runtime::primary_main`, called by the boot crate) starts from.
pub fn primary_setup(board: BoardInfo, args: &BootArgs) -> (BoardInfo, &'static dyn Platform) {
    // Before any other CPU runs: every spin-wait from now on yields.
    crate::base::lock::set_relax_hint(super::relax);
    let Some(gic) = Gic::from_board(&board.irqchip) else {
        die(format_args!(
            "interrupt controller {} is not an arm GIC",
            board.irqchip
        ));
    };
    let blob = dtb_blob(args.dtb).unwrap_or(&[]);
    if !blob.is_empty() {
        platform::set_host_dtb(blob);
    }
    let dtb_size = blob.len() as u64;
    // RAM guests must not get: the image, the DTB, what the DTB reserves
    // and what UEFI firmware keeps after ExitBootServices (with ACPI, the
    // tables are among the latter).
    let mut reserved = crate::host::reserve::Ranges::new();
    reserved.add(args.image_start as u64, args.image_end as u64);
    if !blob.is_empty() {
        reserved.add(args.dtb as u64, args.dtb as u64 + dtb_size);
        if let Err(e) = crate::host::reserve::from_dtb(blob, &mut reserved) {
            die(format_args!("{e}"));
        }
    }
    // The boot module (the loader's initrd): a VM package kept from guests.
    let module = board.module.map(|m| {
        let image = (args.image_start as u64, args.image_end as u64);
        (m, crate::host::board::check_module(m, &board.memory, image))
    });
    if let Some((m, Ok(_))) = module {
        reserved.add(m.base, m.end());
    }
    let from_dtb = reserved.clone();
    if let Some(efi) = args.efi {
        for &(s, e) in efi.firmware.as_slice() {
            reserved.add(s, e);
        }
    }
    platform::init(&board, gic, args.secondary_entry, reserved);
    crate::base::klog::init(&platform::PLATFORM, log::LevelFilter::Info);
    if let Some(efi) = args.efi {
        log::info!(
            "arm64: started by UEFI firmware \"{}\" (image loaded at {:#x}), boot services exited; \
             {} of {} memory map entries stay the firmware's ({} KiB, kept from guests)",
            efi.vendor,
            efi.load_addr,
            efi.descriptors,
            efi.map_entries,
            efi.firmware.bytes() >> 10
        );
    }
    if from_dtb.len() > 2 {
        log::info!(
            "device tree reserves {} range(s) beside the image and itself",
            from_dtb.len() - 2
        );
    }
    if let Some((efi, rsdp)) = acpi_rsdp(args) {
        log_acpi(efi, rsdp);
        log::info!(
            "arm64: EL2, image at {:#x}-{:#x} (load offset {:#x}), no DTB (board from ACPI), \
             MMU and caches on",
            args.image_start,
            args.image_end,
            args.load_addr,
        );
    } else {
        log::info!(
            "arm64: EL2, image at {:#x}-{:#x} (load offset {:#x}), DTB at {:#x}, MMU and caches on",
            args.image_start,
            args.image_end,
            args.load_addr,
            args.dtb
        );
    }
    let (used, free) = (args.heap_usage)();
    log::info!("heap: {} KiB used, {} KiB free", used >> 10, free >> 10);
    match module {
        Some((m, Ok(_))) => {
            // SAFETY: check_module put [base, end) inside a RAM region of
            // the board, which the identity map covers as Normal memory;
            // the range was added to `reserved` above, so no guest frame
            // and nothing kestrel allocates overlaps it, and kestrel never
            // writes it: the bytes stay as the loader left them.
            let bytes =
                unsafe { core::slice::from_raw_parts(m.base as *const u8, m.size as usize) };
            crate::vmm::vmconfig::log_module(m, crate::vmm::vmconfig::set_module(bytes));
        }
        Some((m, Err(why))) => crate::vmm::vmconfig::log_module_refused(m, why),
        None => {}
    }
    if board.psci.is_none() {
        log::warn!(
            "no PSCI (device tree /psci, ACPI FADT): secondary CPUs cannot start, no power-off"
        );
    }
    if board.uart.is_some_and(|u| u.kind != UartKind::Pl011) {
        log::warn!("console UART is not a PL011: kestrel only drives the PL011");
    }
    gic.init_distributor();
    if let Err(why) = gic.init_cpu(percpu::index()) {
        crate::base::fatal::fatal(format_args!("GIC: {why}"));
    }
    (board, &platform::PLATFORM)
}

/// Says what the ACPI tables gave (read again, now through the cached
/// identity map; `primary_early` read them before).
fn log_acpi(efi: &EfiBoot, rsdp: u64) {
    let a = match acpi::arm64::parse(&AcpiRam(&efi.ram.regions), rsdp, ACPI_PPIS) {
        Ok(a) => a,
        Err(e) => crate::base::fatal::fatal(format_args!("{e}")),
    };
    let mut sigs: heapless::String<128> = heapless::String::new();
    for t in &a.tables {
        let _ = core::fmt::Write::write_fmt(&mut sigs, format_args!(" {}", t.sig));
    }
    log::info!(
        "arm64: board from ACPI (no device tree): RSDP at {:#x} (revision {}), XSDT at {:#x} \
         lists{}{}",
        a.rsdp.pa,
        a.rsdp.revision,
        a.xsdt.pa,
        sigs,
        if a.more > 0 { " and more" } else { "" }
    );
    let mode = |t: acpi::arm64::Timer| match (t.edge(), t.active_low()) {
        (false, false) => "level, active high",
        (false, true) => "level, active low",
        (true, false) => "edge, rising",
        (true, true) => "edge, falling",
    };
    log::info!(
        "ACPI MADT: {} CPU(s) enabled ({} disabled, {} beyond the {} kept), GICD version {} -> {}, \
         VGIC maintenance GSIV {}",
        a.cpus.len() + a.cpus_ignored,
        a.cpus_disabled,
        a.cpus_ignored,
        crate::MAX_CPUS,
        a.gic_version,
        a.irqchip,
        a.maintenance
    );
    log::info!(
        "ACPI GTDT: EL2 timer GSIV {} ({}), virtual {} ({}), EL1 physical {} ({})",
        a.timers.el2.gsiv,
        mode(a.timers.el2),
        a.timers.virt.gsiv,
        mode(a.timers.virt),
        a.timers.el1_ns.gsiv,
        mode(a.timers.el1_ns)
    );
    match (a.uart, a.uart_type) {
        (Some(u), Some(ty)) => {
            log::info!(
                "ACPI SPCR: interface type {ty:#x} ({:?}) at {:#x}",
                u.kind,
                u.base
            )
        }
        (None, Some(ty)) => log::info!("ACPI SPCR: interface type {ty:#x}: not driven"),
        _ => {}
    }
    log::info!(
        "ACPI FADT: PSCI {}; RAM from the UEFI memory map: {} run(s), {} MiB{}",
        match a.psci {
            Some(crate::host::board::PsciConduit::Smc) => "over SMC",
            Some(crate::host::board::PsciConduit::Hvc) => "over HVC",
            None => "absent",
        },
        efi.ram.regions.len(),
        efi.ram.regions.iter().map(|r| r.size).sum::<u64>() >> 20,
        if efi.ram.dropped > 0 {
            " (smaller runs beyond 8 left out)"
        } else {
            ""
        }
    );
}

/// A secondary CPU, MMU and vectors on, on its own stack: its GIC CPU
/// interface. The boot crate then enters `runtime::secondary_main`.
pub fn secondary_setup(index: usize) {
    if let Some(gic) = platform::gic() {
        if let Err(why) = gic.init_cpu(index) {
            crate::base::fatal::fatal(format_args!("GIC on cpu{index}: {why}"));
        }
    }
}
