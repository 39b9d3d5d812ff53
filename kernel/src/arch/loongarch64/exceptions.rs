//! Exception entries: the general entry (EENTRY, all exceptions and
//! interrupts, ECFG.VS = 0), the TLB-refill entry (TLBRENTRY) and the
//! machine-error entry (MERRENTRY). The last two run in direct-address mode,
//! so their CSRs hold physical addresses; their stubs jump to the cached
//! window and re-enable paging before saving state.
//!
//! kestrel itself never maps anything through the TLB, so a TLB refill or a
//! machine error taken by kestrel is fatal: the CPU prints a crash dump and
//! stops. Exceptions taken by a guest (previous privilege level non-zero:
//! guests run at PLV3) go to the VM exit path instead (`vm/switch.rs`).

use core::arch::global_asm;
use core::fmt::Write;

use super::{csr, dmw, iocsr, timer};

/// The registers saved by every entry, in the order the stubs store them.
#[repr(C)]
pub struct TrapFrame {
    /// $r0..$r31 ($r0 stored as 0; $r3 = sp before the exception).
    pub regs: [u64; 32],
    pub era: u64,
    pub prmd: u64,
    pub estat: u64,
    pub badv: u64,
    pub badi: u64,
    pub crmd: u64,
    /// Which entry: 0 general, 1 TLB refill, 2 machine error.
    pub kind: u64,
    _pad: u64,
}

const FRAME_SIZE: usize = core::mem::size_of::<TrapFrame>();
const _: () = assert!(FRAME_SIZE == 320 && FRAME_SIZE.is_multiple_of(16));

// The three entry stubs. Each entry is 4 KiB aligned (EENTRY, TLBRENTRY and
// MERRENTRY ignore bits [11:0]). They use no FP register.
global_asm!(
    r#"
    .macro KESTREL_SAVE_GPRS
        addi.d  $sp, $sp, -{frame}
        st.d    $zero, $sp, 0
        st.d    $r1, $sp, 8
        st.d    $r2, $sp, 16
        .irp n, 4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        st.d    $r\n, $sp, \n * 8
        .endr
        addi.d  $t0, $sp, {frame}
        st.d    $t0, $sp, 24
    .endm

    .macro KESTREL_RESTORE_GPRS
        ld.d    $r1, $sp, 8
        ld.d    $r2, $sp, 16
        .irp n, 4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        ld.d    $r\n, $sp, \n * 8
        .endr
        addi.d  $sp, $sp, {frame}
    .endm

    // Saves ERA, PRMD, ESTAT, BADV, BADI, CRMD and the entry kind.
    .macro KESTREL_SAVE_CSRS era, prmd, badv, kind
        csrrd   $t0, \era
        st.d    $t0, $sp, 256
        csrrd   $t0, \prmd
        st.d    $t0, $sp, 264
        csrrd   $t0, 0x5
        st.d    $t0, $sp, 272
        csrrd   $t0, \badv
        st.d    $t0, $sp, 280
        csrrd   $t0, 0x8
        st.d    $t0, $sp, 288
        csrrd   $t0, 0x0
        st.d    $t0, $sp, 296
        li.d    $t0, \kind
        st.d    $t0, $sp, 304
    .endm

    .section .text.kestrel_vectors, "ax"

    // General exceptions and interrupts (paging on, at the link address).
    .balign 4096
    .global kestrel_la_exception_entry
kestrel_la_exception_entry:
    // From a guest (PRMD.PPLV != 0): the VM exit path (vm/switch.rs).
    csrwr   $t0, 0x30
    csrrd   $t0, 0x1
    andi    $t0, $t0, 3
    bnez    $t0, kestrel_la_guest_exit
    csrrd   $t0, 0x30
    KESTREL_SAVE_GPRS
    KESTREL_SAVE_CSRS 0x6, 0x1, 0x7, 0
    move    $a0, $sp
    bl      {trap}
    ld.d    $t0, $sp, 256
    csrwr   $t0, 0x6
    KESTREL_RESTORE_GPRS
    ertn

    // TLB refill: entered in DA mode at the physical address.
    .balign 4096
    .global kestrel_la_tlbr_entry
kestrel_la_tlbr_entry:
    csrwr   $t0, 0x8b
    // From a guest (TLBRPRMD.PPLV != 0): paged mode, then the VM exit path.
    csrrd   $t0, 0x8f
    andi    $t0, $t0, 3
    bnez    $t0, 3f
    la.abs  $t0, 1f
    jirl    $zero, $t0, 0
3:
    la.abs  $t0, 4f
    jirl    $zero, $t0, 0
4:
    li.w    $t0, 0xb0
    csrwr   $t0, 0x0
    la.abs  $t0, kestrel_la_guest_exit_tlbr
    jirl    $zero, $t0, 0
1:
    li.w    $t0, 0xb0
    csrwr   $t0, 0x0
    csrrd   $t0, 0x8b
    KESTREL_SAVE_GPRS
    KESTREL_SAVE_CSRS 0x8a, 0x8f, 0x89, 1
    move    $a0, $sp
    bl      {fatal}
2:
    idle    0
    b       2b

    // Machine error: entered in DA mode at the physical address.
    .balign 4096
    .global kestrel_la_merr_entry
kestrel_la_merr_entry:
    csrwr   $t0, 0x95
    la.abs  $t0, 1f
    jirl    $zero, $t0, 0
1:
    li.w    $t0, 0xb0
    csrwr   $t0, 0x0
    csrrd   $t0, 0x95
    KESTREL_SAVE_GPRS
    KESTREL_SAVE_CSRS 0x94, 0x90, 0x7, 2
    move    $a0, $sp
    bl      {fatal}
2:
    idle    0
    b       2b
    "#,
    frame = const FRAME_SIZE,
    trap = sym handle_exception,
    fatal = sym handle_fatal,
);

unsafe extern "C" {
    fn kestrel_la_exception_entry();
    fn kestrel_la_tlbr_entry();
    fn kestrel_la_merr_entry();
}

/// Installs the exception entries on the calling CPU, with every interrupt
/// line masked (ECFG.LIE = 0, VS = 0). Call first thing on every CPU.
pub fn init_cpu() {
    let general = kestrel_la_exception_entry as *const () as usize as u64;
    let tlbr = dmw::to_phys(kestrel_la_tlbr_entry as *const () as usize as u64);
    let merr = dmw::to_phys(kestrel_la_merr_entry as *const () as usize as u64);
    // SAFETY: the entries are 4 KiB-aligned stubs above; the general entry
    // runs with paging on (virtual address), the other two in DA mode
    // (physical address). Interrupts stay masked.
    unsafe {
        csr::write_ecfg(0);
        csr::write_eentry(general);
        csr::write_tlbrentry(tlbr);
        csr::write_merrentry(merr);
    }
}

extern "C" fn handle_exception(frame: &mut TrapFrame) {
    let ecode = (frame.estat >> 16) & 0x3f;
    if ecode != 0 {
        crash(frame)
    }
    host_interrupts(frame.estat);
}

/// Handles the physical interrupts pending in `estat` (kestrel's tick and
/// IPIs), from kestrel's own entry or from a guest exit. What else they mean
/// (a guest's deadline, the end of a time slice, a kick) the VM backend
/// reads from the platform counter and the tick count afterwards.
pub fn host_interrupts(estat: u64) {
    let pending = csr::Irqs::from_bits_truncate(estat & csr::ecfg());
    if pending.contains(csr::Irqs::TI) {
        let cpu = super::platform::current_cpu();
        timer::ack(cpu);
        // While VMs run the timer is one-shot and also serves guest timers:
        // only some of its interrupts are kestrel's tick.
        if super::platform::tick_due(cpu) {
            crate::base::cpu::tick(cpu);
        }
    }
    if pending.contains(csr::Irqs::IPI) {
        iocsr::ipi_ack();
    }
}

extern "C" fn handle_fatal(frame: &mut TrapFrame) -> ! {
    crash(frame)
}

const ECODE_NAMES: [&str; 25] = [
    "INT", "PIL", "PIS", "PIF", "PME", "PNR", "PNX", "PPI", "ADE", "ALE", "BCE", "SYS", "BRK",
    "INE", "IPE", "FPD", "SXD", "ASXD", "FPE", "WPE", "BTD", "BTE", "GSPR", "HVC", "GCM",
];

const ECODE_TEXT: [&str; 25] = [
    "interrupt",
    "page invalid (load)",
    "page invalid (store)",
    "page invalid (fetch)",
    "page modification",
    "page not readable",
    "page not executable",
    "page privilege",
    "address error",
    "unaligned access",
    "bound check",
    "syscall",
    "breakpoint",
    "instruction not exist",
    "instruction privilege",
    "FP disabled",
    "LSX disabled",
    "LASX disabled",
    "FP exception",
    "watchpoint",
    "binary translation disabled",
    "binary translation",
    "guest sensitive privileged resource",
    "hypercall",
    "guest CSR modified",
];

const REG_NAMES: [&str; 32] = [
    "zero", "ra", "tp", "sp", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "t0", "t1", "t2",
    "t3", "t4", "t5", "t6", "t7", "t8", "u0", "fp", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
    "s8",
];

struct Unlocked;

impl Write for Unlocked {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        crate::base::klog::print_unlocked(format_args!("{s}"));
        Ok(())
    }
}

/// Describes ESTAT's Ecode/EsubCode.
fn describe(ecode: u64, esub: u64) -> (&'static str, &'static str, &'static str) {
    let name = ECODE_NAMES.get(ecode as usize).copied().unwrap_or("?");
    let text = ECODE_TEXT
        .get(ecode as usize)
        .copied()
        .unwrap_or("unknown exception");
    let sub = match (ecode, esub) {
        (8, 0) => " (ADEF: instruction fetch)",
        (8, 1) => " (ADEM: memory access)",
        (19, 0) => " (WPEF: fetch watchpoint)",
        (19, 1) => " (WPEM: memory watchpoint)",
        _ => "",
    };
    (name, text, sub)
}

/// Prints the crash dump of `frame`, then ends kestrel's run through
/// `runtime::fatal` (power off when asked to, else halt this CPU).
fn crash(frame: &TrapFrame) -> ! {
    let cpu = super::platform::current_cpu();
    let hw = csr::hw_cpu_id();
    let ecode = (frame.estat >> 16) & 0x3f;
    let esub = (frame.estat >> 22) & 0x1ff;
    let (name, text, sub) = match frame.kind {
        // TLB refill and machine errors leave ESTAT alone.
        1 => ("TLBR", "TLB refill", ""),
        2 => ("MERR", "machine error", ""),
        _ => describe(ecode, esub),
    };
    let what = match frame.kind {
        1 => "TLB refill (kestrel maps nothing through the TLB: address outside the DMW windows)",
        2 => "machine error",
        _ => "exception",
    };
    let era = if frame.kind == 1 {
        frame.era & !3
    } else {
        frame.era
    };
    let mut w = Unlocked;
    let _ = writeln!(w, "\n*** kestrel crash on cpu{cpu} (hw id {hw}): {what}");
    let _ = writeln!(w, "  cause {name} ({text}){sub}");
    let _ = writeln!(
        w,
        "  ESTAT {:#018x}: Ecode {ecode:#x}, EsubCode {esub:#x}, IS {:#x}",
        frame.estat,
        frame.estat & 0x1fff
    );
    let _ = writeln!(
        w,
        "  ERA   {era:#018x}  BADV {:#018x}  BADI {:#010x}",
        frame.badv, frame.badi
    );
    let _ = writeln!(w, "  CRMD  {:#018x}  PRMD {:#018x}", frame.crmd, frame.prmd);
    for row in 0..8 {
        let _ = write!(w, " ");
        for col in 0..4 {
            let i = row * 4 + col;
            let _ = write!(w, " {:>4}/r{:<2} {:#018x}", REG_NAMES[i], i, frame.regs[i]);
        }
        let _ = writeln!(w);
    }
    let args = format_args!(
        "cpu{cpu}: unhandled {name} ({text}) at ERA {era:#x}, BADV {:#x}",
        frame.badv
    );
    if !crate::base::fatal::is_ready() {
        // Before the boot flow has the board, runtime::fatal cannot tell
        // whether to power off: the platform knows from the early command line.
        super::platform::PLATFORM.early_fatal(args)
    }
    crate::base::fatal::fatal(args)
}
