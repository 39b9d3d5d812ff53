//! The guest's exception and interrupt handler.
//!
//! Interrupts: timer (TI: TICLR), IOCSR IPI (read STATUS, write CLEAR),
//! SWI0 (the PV IPI: clear ESTAT.IS bit 0). Each is counted per CPU.
//!
//! Exceptions the guest provokes on purpose are recognised by where they
//! happen and resumed: the fault probes (`guest_probe_*`), `hvcl` where it
//! is undecoded (INE), `break`, and anything taken at PLV3 during a user-mode
//! test. Anything else is a failure: the guest prints a dump, a `FAIL`
//! line and the result, and powers off.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::asm;
use crate::console::println;
use crate::cpu::{self, csr, csr_read, csr_write, csr_xchg, iocsr};
use crate::MAX_CPUS;

/// Trap frame, as `asm.rs` lays it out.
#[repr(C)]
pub struct Frame {
    pub r: [u64; 32],
    pub era: u64,
    pub prmd: u64,
    pub estat: u64,
    pub badv: u64,
    pub badi: u64,
    pub pad: u64,
}

/// Exception codes (ESTAT.Ecode).
pub mod ecode {
    pub const INT: u64 = 0;
    pub const PIL: u64 = 1;
    pub const PPI: u64 = 7;
    pub const ADE: u64 = 8;
    pub const SYS: u64 = 11;
    pub const BRK: u64 = 12;
    pub const INE: u64 = 13;
    pub const IPE: u64 = 14;

    /// A short name for messages.
    pub fn name(e: u64) -> &'static str {
        const N: [&str; 25] = [
            "INT", "PIL", "PIS", "PIF", "PME", "PNR", "PNX", "PPI", "ADE", "ALE", "BCE", "SYS",
            "BRK", "INE", "IPE", "FPD", "SXD", "ASXD", "FPE", "WPE", "BTD", "BTE", "GSPR", "HVC",
            "GCM",
        ];
        N.get(e as usize).copied().unwrap_or("?")
    }
}

/// ESTAT.Ecode.
pub fn ecode_of(estat: u64) -> u64 {
    (estat >> 16) & 0x3f
}

/// What `guest_hvcl` returns when `hvcl` raised INE (no hypervisor decoded it).
pub const HVCL_TRAPPED: u64 = 0x7fff_0000_dead_1e00;

#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const ZERO: AtomicU64 = AtomicU64::new(0);
/// Timer interrupts taken, per CPU.
pub static TICKS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// IOCSR IPI interrupts taken, per CPU.
pub static IPIS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// SWI0 interrupts taken (PV IPIs), per CPU.
pub static SWIS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// PV IPI message word per CPU (the sender ORs, the receiver swaps to 0).
pub static MESSAGES: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// Last BADV seen by a fault probe or a user-mode exception, per CPU.
pub static LAST_BADV: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// a1 at the user-mode exception (what the user code loaded), per CPU.
pub static USER_A1: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// Number of INE traps on `hvcl`.
pub static HVCL_INE: AtomicU64 = AtomicU64::new(0);
/// TLB refills taken (counted by the refill handler in `asm.rs`).
#[no_mangle]
pub static GUEST_TLB_REFILLS: AtomicU64 = AtomicU64::new(0);

#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const FALSE: AtomicBool = AtomicBool::new(false);
/// Set while the CPU runs the user-mode test.
pub static IN_USER: [AtomicBool; MAX_CPUS] = [FALSE; MAX_CPUS];
/// Set while a `break` is expected.
pub static EXPECT_BRK: [AtomicBool; MAX_CPUS] = [FALSE; MAX_CPUS];
/// Number of `break` exceptions taken while expected.
pub static BRKS: AtomicU64 = AtomicU64::new(0);

/// Installs this CPU's exception entry and enables the interrupt lines the
/// guest uses (not yet CRMD.IE).
pub fn init_cpu() {
    // SAFETY: __exc_entry is the 4 KiB-aligned entry in asm.rs; ECFG.VS = 0
    // (one entry) and LIE = SWI0 | HWI1 | TI | IPI, all handled below
    // (nothing drives HWI1 until `devirq` programs the EIOINTC).
    unsafe {
        csr_write!(csr::EENTRY, asm::__exc_entry as *const () as u64);
        csr_write!(
            csr::ECFG,
            cpu::INT_SWI0 | cpu::INT_HWI1 | cpu::INT_TI | cpu::INT_IPI
        );
        // Every IPI vector may interrupt.
        cpu::iocsr_write32(iocsr::IPI_EN, 0xffff_ffff);
    }
}

#[no_mangle]
extern "C" fn guest_trap_handler(f: &mut Frame) -> u64 {
    let cpu = cpu::cpu().min(MAX_CPUS - 1);
    let ec = ecode_of(f.estat);
    if ec == ecode::INT {
        interrupt(cpu, f.estat);
        return 0;
    }
    f.era = csr_read!(csr::ERA);
    f.prmd = csr_read!(csr::PRMD);
    if crate::hostile::catch(f) {
        return 1;
    }
    let era = f.era as usize;
    if IN_USER[cpu].load(Ordering::Relaxed) && f.prmd & 3 == 3 {
        // Back to the kernel context saved by guest_enter_user.
        IN_USER[cpu].store(false, Ordering::Relaxed);
        LAST_BADV[cpu].store(csr_read!(csr::BADV), Ordering::Relaxed);
        USER_A1[cpu].store(f.r[5], Ordering::Relaxed);
        f.r[4] = f.estat;
        f.era = asm::guest_user_return as *const () as u64;
        f.prmd = 0;
        return 1;
    }
    if era == asm::guest_hvcl_insn as *const () as usize && ec == ecode::INE {
        HVCL_INE.fetch_add(1, Ordering::Relaxed);
        f.r[4] = HVCL_TRAPPED;
        f.era += 4;
        return 1;
    }
    if era == asm::guest_probe_load_insn as *const () as usize
        || era == asm::guest_probe_load32_insn as *const () as usize
        || era == asm::guest_probe_store_insn as *const () as usize
    {
        LAST_BADV[cpu].store(csr_read!(csr::BADV), Ordering::Relaxed);
        f.r[4] = f.estat;
        f.era += 4;
        return 1;
    }
    if ec == ecode::BRK && EXPECT_BRK[cpu].swap(false, Ordering::Relaxed) {
        BRKS.fetch_add(1, Ordering::Relaxed);
        f.era += 4;
        return 1;
    }
    f.badv = csr_read!(csr::BADV);
    f.badi = csr_read!(csr::BADI);
    println!(
        "guest: unexpected exception {} (ESTAT {:#x}) on cpu {cpu}: ERA {:#x} BADV {:#x} BADI {:#x} PRMD {:#x} ra {:#x} sp {:#x}",
        ecode::name(ec),
        f.estat,
        f.era,
        f.badv,
        f.badi,
        f.prmd,
        f.r[1],
        f.r[3]
    );
    crate::console::report(
        "no-unexpected-exception",
        crate::console::fail!("{} at {:#x}", ecode::name(ec), f.era),
    );
    crate::finish();
}

fn interrupt(cpu: usize, estat: u64) {
    if estat & cpu::INT_TI != 0 {
        // SAFETY: TICLR bit 0 clears the timer interrupt.
        unsafe { csr_write!(csr::TICLR, 1) };
        TICKS[cpu].fetch_add(1, Ordering::Relaxed);
    }
    if estat & cpu::INT_IPI != 0 {
        let s = cpu::iocsr_read32(iocsr::IPI_STATUS);
        // SAFETY: clears the IPI bits just read.
        unsafe { cpu::iocsr_write32(iocsr::IPI_CLEAR, s) };
        // A kick (new command for a secondary) is not a test IPI.
        if s & !(1 << crate::smp::KICK_VECTOR) != 0 {
            IPIS[cpu].fetch_add(1, Ordering::Relaxed);
        }
    }
    if estat & cpu::INT_HWI0_3 != 0 {
        crate::devirq::interrupt(cpu);
    }
    if estat & cpu::INT_SWI0 != 0 {
        // SAFETY: clears ESTAT.IS bit 0 (SWI0), the PV IPI.
        unsafe { csr_xchg!(csr::ESTAT, 0u64, cpu::INT_SWI0) };
        MESSAGES[cpu].swap(0, Ordering::AcqRel);
        SWIS[cpu].fetch_add(1, Ordering::Relaxed);
    }
}

/// Loads the u64 at `addr`; `Err(estat)` when the load faults.
pub fn probe(addr: usize) -> Result<u64, u64> {
    // SAFETY: guest_probe_load loads through a pointer; a fault on it is
    // caught by the handler above and returned.
    let r = unsafe { asm::guest_probe_load(addr) };
    if r.estat == 0 {
        Ok(r.value)
    } else {
        Err(r.estat)
    }
}

/// A 32-bit load of the register at `addr` (4-aligned); `None` when it
/// faults.
pub fn probe_reg32(addr: usize) -> Option<u32> {
    if !addr.is_multiple_of(4) {
        return None;
    }
    // SAFETY: as `probe`, with one 32-bit load.
    let r = unsafe { asm::guest_probe_load32(addr) };
    (r.estat == 0).then_some(r.value as u32)
}

pub fn probe_u64(addr: usize) -> Option<u64> {
    if !addr.is_multiple_of(8) {
        return None;
    }
    probe(addr).ok()
}

pub fn probe_u32(addr: usize) -> Option<u32> {
    let w = probe_u64(addr & !7)?;
    Some((w >> ((addr & 4) * 8)) as u32)
}

/// `hvcl 0x100` with the KVM ABI: function in a0, arguments a1-a3.
pub fn hvcl(func: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    // SAFETY: a hypercall (or an INE the handler absorbs); no memory is touched.
    unsafe { asm::guest_hvcl(func, a1, a2, a3) }
}
