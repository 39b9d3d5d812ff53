//! The hostile-guest modes (`mode=attack`, `mode=victim` on the command
//! line), run by the `la64-hostile` VM test: an attacker VM and a victim VM
//! share one pCPU.
//!
//! The attacker runs at (virtual) PLV0 and throws every trap class at the
//! hypervisor with garbage: all 16384 CSR numbers, TLB instructions with
//! garbage TLBIDX/TLBEHI/TLBELO/STLBPS, `invtlb` ops 0-31, IOCSR accesses of
//! every width across the address space (IPIs and mail to missing CPUs),
//! every `hvcl` code and garbage functions, privileged and undefined
//! instructions, `ertn` with garbage PRMD/ERA, loads from every 2 MiB of
//! the first 16 GiB of guest physical space (direct, through a DMW window and
//! through TLB entries it writes), loads and stores of every width across
//! kestrel's legacy I/O window, and interrupt/exception storms. Each probe
//! must get an architectural answer: a value, or the exception the manual
//! names with the right ECODE; anything else is counted as bad. One
//! `ATTACK <phase>: ...` line and one `PASS`/`FAIL attack-<phase>` line per
//! phase, then it spins with interrupts masked until its window ends.
//! Its last phase, `cold` (when named, `hostile/cold.rs`), arms hostile
//! receive rings the victim sends frames to after its window, and times
//! a transmit chain over many blocks.
//!
//! Probes run as single instructions written into a code buffer (`STUBS`):
//! stub i is `<instruction>; jr ra`, called with a0-a5 from an array. An
//! exception raised by the instruction (or by where an `ertn` went) is
//! caught by [`catch`] (called by the trap handler), recorded, and the
//! stub's `jr ra` resumes at PLV0 with interrupts masked.
//!
//! The victim fills its RAM with an address-derived pattern, puts patterns
//! in the CSRs a guest owns, its FP/LSX registers and its GPRs, runs a 10 ms
//! periodic timer and, for a fixed window of counter time, measures how long
//! it ran (sum of short deltas between consecutive counter reads), counts
//! its ticks and the largest gap between them, and keeps checking its
//! memory and registers. It prints one `VICTIM:` line and the results;
//! with a network port it first sends frames to the attacker's hostile
//! rings, timing every notify (`hostile/cold.rs`).

use core::arch::global_asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use kestrel_abi::loongarch::{
    CPUCFG_KVM_SIG, FN_IPI, FN_KESTREL_FEATURES, FN_KESTREL_PROBE, FN_KESTREL_STATS, FN_NOTIFY,
    KVM_FEATURE_STEAL_TIME, KVM_SIGNATURE,
};
use kestrel_abi::{features, ret, KESTREL_MAGIC};

use crate::asm::{self, FpState};
use crate::console::{fail, pass, println, report, Msg, Outcome};
use crate::cpu::{self, csr, csr_read, csr_write, iocsr};
use crate::trap::{self, ecode_of, Frame};
use crate::{us, COUNTER_HZ, LSX, RAM_TOP};

mod cold;
mod intc;
mod virtio;

/// 0 = normal checks, 1 = attacker, 2 = victim, 3 = reset storm.
static MODE: AtomicU8 = AtomicU8::new(0);

/// The attack phases, in order.
/// `memory` comes early, inside the victim's window (see
/// [`MEMORY_NOT_BEFORE_S`]), so its probes meet the victim's pattern.
/// `intc` and `virtio` attack kestrel's device models and come last;
/// `virtio` needs the VM's virtio disk, console and two network ports on
/// one network and runs only when named (`mode=attack:...,virtio`).
/// `nx` and `tlb-garbage` (after it) run only when named too: they are
/// the reproducers of two emulator bugs (tools/qemu-lvz, patches 0008 and
/// 0009), which hung or crashed the LVZ emulator before those patches.
/// `cold` (named only, last) needs a virtio console and two network ports
/// on the victim's network: it arms the hostile receive rings the victim
/// sends to after its window and times a transmit chain over many blocks
/// (`hostile/cold.rs`); the attacker then stays until the victim's frames
/// reached both rings.
const PHASES: [&str; 15] = [
    "iocsr",
    "insn",
    "user",
    "console",
    "memory",
    "csr",
    "tlb",
    "hvcl",
    "storm",
    "timer0",
    "intc",
    "virtio",
    "nx",
    "tlb-garbage",
    "cold",
];
/// Bit of `cold` in the mask.
const COLD: u64 = 1 << 14;
/// Counter time (ms) until which the attacker waits for the victim's
/// frames (its window of 8 s starts on the second after its fill; it
/// sends right after).
const RX_UNTIL_MS: u64 = 20_000;
/// Every phase but `virtio`: what `mode=attack` runs.
const DEFAULT_MASK: u64 = (1 << 11) - 1;
/// Bit i: run phase `PHASES[i]`.
static PHASE_MASK: AtomicU64 = AtomicU64::new(DEFAULT_MASK);

/// `mode=attack`, `mode=attack:PHASE,PHASE...` (only those phases, e.g. to
/// check the architectural ones on bare QEMU), `mode=victim`,
/// `mode=victim:MS` (a window of MS ms), `mode=resetstorm`,
/// `mode=resetstorm:S` (the storm ends at counter second S; default
/// [`RESETSTORM_UNTIL_S`]) (from the command line).
pub fn set_mode(m: &str) {
    if let Some(list) = m.strip_prefix("attack:") {
        let mut mask = 0;
        for name in list.split(',') {
            if let Some(i) = PHASES.iter().position(|p| *p == name) {
                mask |= 1 << i;
            }
        }
        PHASE_MASK.store(mask, Ordering::Relaxed);
    }
    if let Some(ms) = m.strip_prefix("victim:").and_then(|w| w.parse().ok()) {
        VICTIM_WINDOW.store(ms, Ordering::Relaxed);
    }
    if let Some(s) = m.strip_prefix("resetstorm:").and_then(|w| w.parse().ok()) {
        RESETSTORM_UNTIL.store(s, Ordering::Relaxed);
    }
    match m.split(':').next() {
        Some("attack") => MODE.store(1, Ordering::Relaxed),
        Some("victim") => MODE.store(2, Ordering::Relaxed),
        Some("resetstorm") => MODE.store(3, Ordering::Relaxed),
        _ => {}
    }
}

/// Runs the selected hostile mode (never returns), or returns for the
/// normal checks.
pub fn run_mode() {
    match MODE.load(Ordering::Relaxed) {
        1 => attack(),
        2 => victim(),
        3 => reset_storm(),
        _ => {}
    }
}

/// The upper half of every word of the victim's pattern ("VCTM").
pub const VICTIM_TAG: u64 = 0x5643_544d;
/// The upper half of the attacker's own markers ("ATCK").
const ATTACK_TAG: u64 = 0x4154_434b;

/// The victim's pattern for the word at guest physical `a`.
fn victim_word(a: usize) -> u64 {
    VICTIM_TAG << 32 | ((a as u64 >> 3) ^ 0x1357_9bdf) & 0xffff_ffff
}

// ---- stubs: one instruction + `jr ra`, run with a0-a5 from memory -------

/// `jr ra` (jirl zero, ra, 0).
const JR_RA: u32 = 0x4c00_0020;
/// `csrrd a0, CRMD`: where `ertn` probes return to.
const CSRRD_A0_CRMD: u32 = 0x0400_0004;
const STUB_CAP: usize = 40 * 1024;
/// The stub `ertn` probes point ERA at (after the table).
const CONT: usize = STUB_CAP;

#[repr(C, align(4096))]
struct Stubs(UnsafeCell<[u32; 2 * STUB_CAP + 4]>);
// SAFETY: the attacker is one vCPU; the buffer is written and run by it only.
unsafe impl Sync for Stubs {}
static STUBS: Stubs = Stubs(UnsafeCell::new([0; 2 * STUB_CAP + 4]));

fn stub_addr(i: usize) -> usize {
    STUBS.0.get() as usize + 8 * i
}

/// Writes `words` as stubs 0.. and makes them executable (`ibar`).
fn load(words: impl Iterator<Item = u32>) -> usize {
    let base = STUBS.0.get() as *mut u32;
    let mut n = 0;
    for w in words.take(STUB_CAP) {
        // SAFETY: 2n + 1 < 2 * STUB_CAP, inside the buffer.
        unsafe {
            base.add(2 * n).write_volatile(w);
            base.add(2 * n + 1).write_volatile(JR_RA);
        }
        n += 1;
        if n % 256 == 0 {
            // Rewriting code pages is slow under QEMU: count it as running.
            note_ran();
        }
    }
    // SAFETY: the continuation stub at the end, then the barriers that make
    // the new code visible to instruction fetch.
    unsafe {
        base.add(2 * CONT).write_volatile(CSRRD_A0_CRMD);
        base.add(2 * CONT + 1).write_volatile(JR_RA);
        core::arch::asm!("dbar 0", "ibar 0", options(nostack));
    }
    n
}

/// Where [`catch`] resumes (a stub's `jr ra`); 0 when no probe is armed.
#[export_name = "HOSTILE_RESUME"]
static RESUME: AtomicU64 = AtomicU64::new(0);
#[export_name = "HOSTILE_CAUGHT_ESTAT"]
static CAUGHT_ESTAT: AtomicU64 = AtomicU64::new(0);
static CAUGHT_ERA: AtomicU64 = AtomicU64::new(0);
static CAUGHT_PRMD: AtomicU64 = AtomicU64::new(0);
#[export_name = "HOSTILE_CAUGHT_BADV"]
static CAUGHT_BADV: AtomicU64 = AtomicU64::new(0);

/// An exception a probe raised.
#[derive(Clone, Copy)]
struct Caught {
    estat: u64,
    era: u64,
    prmd: u64,
    badv: u64,
}

impl Caught {
    fn ecode(&self) -> u64 {
        ecode_of(self.estat)
    }
    fn subcode(&self) -> u64 {
        (self.estat >> 22) & 0x1ff
    }
}

/// Called by the trap handler for every exception (not interrupts): takes
/// the one an armed probe raised, resumes at the stub's `jr ra` at PLV0
/// with interrupts masked. Returns whether it took it.
pub fn catch(f: &mut Frame) -> bool {
    let resume = RESUME.swap(0, Ordering::AcqRel);
    if resume == 0 {
        return false;
    }
    CAUGHT_ESTAT.store(f.estat, Ordering::Relaxed);
    CAUGHT_ERA.store(f.era, Ordering::Relaxed);
    CAUGHT_PRMD.store(f.prmd, Ordering::Relaxed);
    CAUGHT_BADV.store(csr_read!(csr::BADV), Ordering::Relaxed);
    f.era = resume;
    f.prmd = 0;
    true
}

global_asm!(
    r#"
    .text
    // fn hostile_call(regs: *mut [u64; 6], stub: usize): a0-a5 from regs,
    // jump to the stub, a0-a5 back into regs.
    .global hostile_call
hostile_call:
    addi.d  $sp, $sp, -16
    st.d    $ra, $sp, 0
    st.d    $a0, $sp, 8
    move    $t8, $a1
    move    $t7, $a0
    ld.d    $a0, $t7, 0
    ld.d    $a1, $t7, 8
    ld.d    $a2, $t7, 16
    ld.d    $a3, $t7, 24
    ld.d    $a4, $t7, 32
    ld.d    $a5, $t7, 40
    jirl    $ra, $t8, 0
    ld.d    $t7, $sp, 8
    st.d    $a0, $t7, 0
    st.d    $a1, $t7, 8
    st.d    $a2, $t7, 16
    st.d    $a3, $t7, 24
    st.d    $a4, $t7, 32
    st.d    $a5, $t7, 40
    ld.d    $ra, $sp, 0
    addi.d  $sp, $sp, 16
    jr      $ra

    // The attacker's TLB-refill entry (TLBRENTRY, DA mode): records the
    // refill and returns to the armed probe's `jr ra` at PLV0.
    .balign 4096
    .global hostile_tlbr
hostile_tlbr:
    csrwr   $t0, 0x8b
    csrwr   $t1, 0x32
    la.pcrel $t0, HOSTILE_RESUME
    ld.d    $t1, $t0, 0
    beqz    $t1, 1f
    st.d    $zero, $t0, 0
    ori     $t1, $t1, 1
    csrwr   $t1, 0x8a
    la.pcrel $t0, HOSTILE_CAUGHT_ESTAT
    li.d    $t1, {refill}
    st.d    $t1, $t0, 0
    csrrd   $t0, 0x89
    la.pcrel $t1, HOSTILE_CAUGHT_BADV
    st.d    $t0, $t1, 0
1:  csrrd   $t1, 0x32
    csrrd   $t0, 0x8b
    ertn

    // fn victim_regs(seed, ticks) -> number of registers that changed:
    // loads r5-r31 (but sp, tp, t0, t1) with seed + n, spins `ticks`
    // counter ticks, compares.
    .global victim_regs
victim_regs:
    addi.d  $sp, $sp, -96
    st.d    $ra, $sp, 0
    st.d    $fp, $sp, 8
    .irp n, 23,24,25,26,27,28,29,30,31
    st.d    $r\n, $sp, (\n - 21) * 8
    .endr
    st.d    $r21, $sp, 88
    rdtime.d $t0, $zero
    add.d   $t0, $t0, $a1
    addi.d  $r1, $a0, 1
    .irp n, 5,6,7,8,9,10,11,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    addi.d  $r\n, $a0, \n
    .endr
1:  rdtime.d $t1, $zero
    bltu    $t1, $t0, 1b
    move    $t0, $zero
    addi.d  $t1, $a0, 1
    xor     $t1, $t1, $r1
    sltu    $t1, $zero, $t1
    add.d   $t0, $t0, $t1
    .irp n, 5,6,7,8,9,10,11,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    addi.d  $t1, $a0, \n
    xor     $t1, $t1, $r\n
    sltu    $t1, $zero, $t1
    add.d   $t0, $t0, $t1
    .endr
    move    $a0, $t0
    ld.d    $ra, $sp, 0
    ld.d    $fp, $sp, 8
    .irp n, 23,24,25,26,27,28,29,30,31
    ld.d    $r\n, $sp, (\n - 21) * 8
    .endr
    ld.d    $r21, $sp, 88
    addi.d  $sp, $sp, 96
    jr      $ra
"#,
    refill = const REFILL_ESTAT,
);

/// What [`run`] reports for a TLB refill (not an ECODE: 63).
const REFILL_ESTAT: u64 = 63 << 16;

extern "C" {
    fn hostile_call(regs: *mut [u64; 6], stub: usize);
    fn victim_regs(seed: u64, ticks: u64) -> u64;
    fn hostile_tlbr();
}

/// Runs stub `i` with `r` as a0-a5; `Err` if it raised an exception.
fn run(i: usize, r: &mut [u64; 6]) -> Result<(), Caught> {
    note_ran();
    RESUME.store(stub_addr(i) as u64 + 4, Ordering::Release);
    // SAFETY: stub i is `<probe>; jr ra` (or the probe leaves through an
    // exception that `catch` turns into a return to its `jr ra`); the probe
    // touches a0-a5 only.
    unsafe { hostile_call(r, stub_addr(i)) };
    if RESUME.swap(0, Ordering::AcqRel) != 0 {
        return Ok(());
    }
    Err(Caught {
        estat: CAUGHT_ESTAT.load(Ordering::Relaxed),
        era: CAUGHT_ERA.load(Ordering::Relaxed),
        prmd: CAUGHT_PRMD.load(Ordering::Relaxed),
        badv: CAUGHT_BADV.load(Ordering::Relaxed),
    })
}

/// Loads one instruction and runs it.
fn one(word: u32, r: &mut [u64; 6]) -> Result<(), Caught> {
    load(core::iter::once(word));
    run(0, r)
}

/// The attacker's run time per second of the counter (counter ticks; the
/// same "short delta" rule as the victim's), so the test can compare the
/// two over the victim's window.
#[allow(clippy::declare_interior_mutable_const)] // array initialiser only
const ZERO: AtomicU64 = AtomicU64::new(0);
static RAN: [AtomicU64; 64] = [ZERO; 64];
static RAN_LAST: AtomicU64 = AtomicU64::new(0);

/// Adds the time since the last call to this second's run time, if short.
fn note_ran() {
    let now = cpu::now();
    let last = RAN_LAST.swap(now, Ordering::Relaxed);
    let d = now.wrapping_sub(last);
    if last != 0 && d < us(RAN_THRESHOLD_US) {
        let s = (now / COUNTER_HZ.load(Ordering::Relaxed).max(1)) as usize;
        if let Some(b) = RAN.get(s) {
            b.fetch_add(d, Ordering::Relaxed);
        }
    }
}

// ---- encodings (rd = a0, rj = a1, rk = a2) ------------------------------

const A0: u32 = 4;
const A1: u32 = 5;
const A2: u32 = 6;
fn csrrd(n: u32) -> u32 {
    0x0400_0000 | (n & 0x3fff) << 10 | A0
}
fn csrwr(n: u32) -> u32 {
    0x0400_0000 | (n & 0x3fff) << 10 | 1 << 5 | A0
}
fn csrxchg(n: u32) -> u32 {
    0x0400_0000 | (n & 0x3fff) << 10 | A1 << 5 | A0
}
/// width 0-3 = b, h, w, d.
fn iocsrrd(width: u32) -> u32 {
    0x0648_0000 | width << 10 | A1 << 5 | A0
}
fn iocsrwr(width: u32) -> u32 {
    0x0648_1000 | width << 10 | A1 << 5 | A0
}
const TLBCLR: u32 = 0x0648_2000;
const TLBFLUSH: u32 = 0x0648_2400;
const TLBSRCH: u32 = 0x0648_2800;
const TLBRD: u32 = 0x0648_2c00;
const TLBWR: u32 = 0x0648_3000;
const TLBFILL: u32 = 0x0648_3400;
const ERTN: u32 = 0x0648_3800;
fn idle(level: u32) -> u32 {
    0x0648_8000 | (level & 0x7fff)
}
fn invtlb(op: u32) -> u32 {
    0x0649_8000 | A2 << 10 | A1 << 5 | (op & 0x1f)
}
fn hvcl(code: u32) -> u32 {
    0x002b_8000 | (code & 0x7fff)
}
fn cacop(code: u32) -> u32 {
    0x0600_0000 | A1 << 5 | (code & 0x1f)
}
fn lddir(level: u32) -> u32 {
    0x0640_0000 | (level & 0xff) << 10 | A1 << 5 | A0
}
fn ldpte(seq: u32) -> u32 {
    0x0644_0000 | (seq & 0xff) << 10 | A1 << 5
}
const CPUCFG: u32 = 0x0000_6c00 | A1 << 5 | A0;
const RDTIME_D: u32 = 0x0000_6800 | A1 << 5 | A0;
/// `ld.d a0, a1, 0`.
const LD_D: u32 = 0x28c0_0000 | A1 << 5 | A0;
/// `st.d a0, a1, 0`.
const ST_D: u32 = 0x29c0_0000 | A1 << 5 | A0;
/// `syscall 0`: ends a stub run at PLV3.
const SYSCALL0: u32 = 0x002b_0000;
/// LVZ's `gcsrrd a0, 5`: undefined on a CPU without LVZ.
const GCSRRD: u32 = 0x0500_1404;

// ---- bookkeeping ---------------------------------------------------------

/// A small xorshift generator (deterministic garbage).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// What one phase saw.
struct Tally {
    probes: u64,
    exceptions: u64,
    bad: u64,
    first_bad: Option<Msg>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            probes: 0,
            exceptions: 0,
            bad: 0,
            first_bad: None,
        }
    }

    /// Counts a probe that must not raise anything.
    fn quiet(&mut self, what: &str, arg: u64, r: Result<(), Caught>) -> bool {
        self.probes += 1;
        match r {
            Ok(()) => true,
            Err(c) => {
                self.exceptions += 1;
                self.bad(format_args!(
                    "{what} {arg:#x}: exception {} (ESTAT {:#x}) at {:#x}",
                    trap::ecode::name(c.ecode()),
                    c.estat,
                    c.era
                ));
                false
            }
        }
    }

    /// Counts a probe that must raise exactly `ecode`.
    fn raises(&mut self, what: &str, arg: u64, want: u64, r: Result<(), Caught>) {
        self.probes += 1;
        match r {
            Err(c) if c.ecode() == want => self.exceptions += 1,
            Err(c) => {
                self.exceptions += 1;
                self.bad(format_args!(
                    "{what} {arg:#x}: {} instead of {}",
                    trap::ecode::name(c.ecode()),
                    trap::ecode::name(want)
                ))
            }
            Ok(()) => self.bad(format_args!(
                "{what} {arg:#x}: no exception (wanted {})",
                trap::ecode::name(want)
            )),
        }
    }

    fn bad(&mut self, args: core::fmt::Arguments) {
        self.bad += 1;
        if self.first_bad.is_none() {
            self.first_bad = Some(Msg::new(args));
        }
    }

    fn outcome(&self, name: &str) -> Outcome {
        match &self.first_bad {
            None => pass!(
                "{} probes, {} exceptions, all architectural",
                self.probes,
                self.exceptions
            ),
            Some(m) => fail!(
                "{name}: {} of {} probes wrong, first: {}",
                self.bad,
                self.probes,
                m.as_str()
            ),
        }
    }
}

fn rd(n: u32) -> u64 {
    let mut r = [0u64; 6];
    let _ = one(csrrd(n), &mut r);
    r[0]
}

fn wr(n: u32, v: u64) {
    let mut r = [v, 0, 0, 0, 0, 0];
    let _ = one(csrwr(n), &mut r);
}

fn ms(ticks: u64) -> u64 {
    ticks * 1000 / COUNTER_HZ.load(Ordering::Relaxed).max(1)
}

fn on_kestrel() -> bool {
    trap::hvcl(FN_KESTREL_PROBE, 0, 0, 0) == KESTREL_MAGIC
}

/// Whether this vCPU runs in LVZ guest mode (kestrel's LVZ backend), not
/// at PLV3 under trap-and-emulate or on bare QEMU: set by [`attack`].
static LVZ: AtomicBool = AtomicBool::new(false);

fn lvz() -> bool {
    LVZ.load(Ordering::Relaxed)
}

/// `cpucfg` is unprivileged and never traps but in LVZ guest mode, where
/// every `cpucfg` goes to the hypervisor: only there does word 0x4000_0000
/// (KVM's range, beyond the CPU's words) read KVM's signature. On bare
/// QEMU and under trap-and-emulate it reads 0 (an undefined word).
fn detect_lvz() -> bool {
    cpu::cpucfg(u64::from(CPUCFG_KVM_SIG)) == u64::from(KVM_SIGNATURE)
}

/// How many TLB entries the CPU has (PRCFG3: MTLB entries - 1 in bits
/// 11:4, STLB ways - 1 in 19:12, log2 of the STLB sets in 25:20); 2112 on
/// the LA464.
fn tlb_entries() -> u64 {
    let p = rd(0x23);
    let n = ((p >> 4) & 0xff) + 1 + (((p >> 12) & 0xff) + 1) * (1 << ((p >> 20) & 0x3f));
    if (64..=4096).contains(&n) {
        n
    } else {
        2112
    }
}

/// A garbage page size for the guest's own TLB. Trap-and-emulate keeps
/// every size (kestrel emulates the TLB and must answer all of them).
/// Under LVZ the guest's TLB is the CPU's, and a size PRCFG2 does not
/// list is one the architecture leaves undefined for that guest's own
/// TLB; the LVZ emulator (tools/qemu-lvz) computes its page masks and
/// flush ranges from it unchecked (shifts by 64 and more), and with PS 63
/// it stopped running this vCPU now and then (the case hung in this phase
/// in about one run of three). So under LVZ an unsupported size becomes
/// the nearest one PRCFG2 lists: the garbage stays in the index, the
/// addresses, the PPNs and the bits, which is what reaches kestrel.
fn garbage_ps(ps: u64) -> u64 {
    if !lvz() {
        return ps;
    }
    let sizes = csr_read!(0x22);
    if ps < 64 && sizes >> ps & 1 != 0 {
        return ps;
    }
    (0..64u64)
        .filter(|p| sizes >> p & 1 != 0)
        .min_by_key(|p| p.abs_diff(ps))
        .unwrap_or(12)
}

/// A garbage TLBIDX for `tlbwr`/`tlbrd`. Under LVZ these run on the guest
/// TLB of the CPU, so the index is kept below the number of entries: the
/// architecture defines nothing for an index beyond the TLB, and the LVZ
/// emulator (tools/qemu-lvz, QEMU's `helper_tlbwr`/`helper_tlbrd`) uses
/// TLBIDX.INDEX (12 bits, up to 4095) unchecked on its array of 2112 guest
/// entries, overwriting its own memory past it (it then deadlocked or
/// crashed; fixed by its patch 0009, which `tlb-garbage` checks).
/// Trap-and-emulate keeps the whole garbage: kestrel emulates the TLB.
fn tlbidx(v: u64, entries: u64) -> u64 {
    if lvz() {
        (v & !0xffff) | ((v & 0xffff) % entries)
    } else {
        v
    }
}

// ---- the attacker --------------------------------------------------------

/// Counter ticks the attacker keeps the pCPU busy (phases + final spin).
const ATTACK_WINDOW_MS: u64 = 11_000;

/// One attack phase (its argument: whether kestrel answered the probe).
type Phase = fn(bool) -> Tally;

fn attack() -> ! {
    let start = cpu::now();
    let kestrel = on_kestrel();
    LVZ.store(detect_lvz(), Ordering::Relaxed);
    println!(
        "ATTACK start: {} , RAM top {:#x}, {}",
        if kestrel {
            "on kestrel"
        } else {
            "not on kestrel"
        },
        RAM_TOP.load(Ordering::Relaxed),
        if lvz() {
            "LVZ guest mode (PLV0, own CSRs and TLB)"
        } else {
            "no LVZ guest mode"
        }
    );
    cpu::set_irqs(false);
    let phases: [Phase; 15] = [
        attack_iocsr,
        attack_insn,
        attack_user,
        attack_console,
        attack_memory,
        attack_csr,
        attack_tlb,
        attack_hvcl,
        attack_storm,
        attack_timer0,
        intc::attack_intc,
        virtio::attack_virtio,
        attack_nx,
        attack_tlb_garbage,
        |_| Tally::new(),
    ];
    let mask = PHASE_MASK.load(Ordering::Relaxed);
    let mut rx = None;
    for (i, (name, phase)) in PHASES.into_iter().zip(phases).enumerate() {
        if mask & 1 << i == 0 {
            continue;
        }
        if 1 << i == COLD {
            // Its own lines (`hostile/cold.rs`).
            rx = Some(cold::arm_receivers());
            cold::cold_tx();
            continue;
        }
        let t0 = cpu::now();
        let t = phase(kestrel);
        println!(
            "ATTACK {name}: {} probes, {} exceptions, {} wrong answers, {} ms",
            t.probes,
            t.exceptions,
            t.bad,
            ms(cpu::now() - t0)
        );
        let label = Msg::new(format_args!("attack-{name}"));
        report(label.as_str(), t.outcome(name));
    }
    // The rest of the window: busy with interrupts masked (only kestrel's
    // tick can take the pCPU back).
    cpu::set_irqs(false);
    // (Only beside a victim, i.e. on kestrel with every phase.)
    let window = if kestrel && mask & !COLD == DEFAULT_MASK {
        ATTACK_WINDOW_MS
    } else {
        0
    };
    let end = start + us(window * 1000);
    let spun = cpu::now();
    while cpu::now() < end {
        note_ran();
        if let Some(rx) = rx.as_mut() {
            rx.refill();
        }
        cpu::relax();
    }
    note_ran();
    if let Some(rx) = rx.as_mut() {
        rx.report(RX_UNTIL_MS);
    }
    note_ran();
    println!(
        "ATTACK spin: {} ms with interrupts masked, total {} ms",
        ms(cpu::now().saturating_sub(spun)),
        ms(cpu::now() - start)
    );
    let last = ((cpu::now() / COUNTER_HZ.load(Ordering::Relaxed).max(1)) as usize).min(63);
    crate::console::print(format_args!(
        "ATTACK ran (ms in each second of the counter from 0):"
    ));
    for b in RAN.iter().take(last + 1) {
        crate::console::print(format_args!(" {}", ms(b.load(Ordering::Relaxed))));
    }
    println!();
    crate::finish()
}

/// CSRs whose garbage would break the attacker before it can restore them:
/// CRMD (PLV, IE, DA/PG) gets garbage only in DATF/DATM.
const CRMD_SAFE_MASK: u64 = 0xf << 5;
const CPUID: u32 = 0x20;
const READ_ONLY: [u32; 4] = [CPUID, 0x21, 0x22, 0x23];
/// Under LVZ the CSRs the guest's copy has read-only: MISC, BADI, PGD,
/// CPUID, PRCFG1-3, TVAL. A `csrwr`/`csrxchg` of them is the CPU's own
/// answer, not kestrel's: the LVZ emulator raises INE (as stock QEMU does
/// for read-only CSRs at PLV0); a CPU that ignores the write is as right.
/// Either way the value must stay (checked for CPUID and PRCFG1-3).
const LVZ_GUEST_READ_ONLY: [u32; 8] = [0x3, 0x8, 0x1b, CPUID, 0x21, 0x22, 0x23, 0x42];
/// The LVZ root CSR numbers (GTLBC, TRGP, GSTAT, GCFG, GINTC, GCNTC): from
/// the guest they are undefined CSRs (read 0, writes ignored), whatever
/// garbage it writes there must never reach the root's.
const LVZ_ROOT_CSRS: [u32; 6] = [0x15, 0x16, 0x50, 0x51, 0x52, 0x53];

/// Every CSR number: `csrrd`; garbage by `csrwr` and `csrxchg`, read back,
/// restored. Read-only CSRs (CPUID, PRCFG1-3) must keep their value.
fn attack_csr(_kestrel: bool) -> Tally {
    let mut t = Tally::new();
    // A write the CPU may refuse (see `LVZ_GUEST_READ_ONLY`).
    let write = |t: &mut Tally, what: &str, n: u32, r: Result<(), Caught>| {
        if lvz() && LVZ_GUEST_READ_ONLY.contains(&n) {
            t.probes += 1;
            if let Err(c) = r {
                t.exceptions += 1;
                if c.ecode() != trap::ecode::INE {
                    t.bad(format_args!(
                        "{what} of read-only CSR {n:#x}: {}",
                        trap::ecode::name(c.ecode())
                    ));
                }
            }
        } else {
            t.quiet(what, n as u64, r);
        }
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    const N: u32 = 0x4000;
    // Stub i: csrrd i; 0x4000 + i: csrwr i; 0x8000 + i: csrxchg i (STUB_CAP
    // is 40 Ki, so xchg only for the first 8 Ki numbers, past which no CSR
    // is defined).
    load(
        (0..N)
            .map(csrrd)
            .chain((0..N).map(csrwr))
            .chain((0..0x2000).map(csrxchg)),
    );
    let mut nonzero = 0u64;
    for n in 0..N {
        let mut r = [0xdead_beef, 0, 0, 0, 0, 0];
        if t.quiet("csrrd", n as u64, run(n as usize, &mut r)) && r[0] != 0 {
            nonzero += 1;
        }
        if n == CPUID && r[0] & 0x1ff != 0 {
            t.bad(format_args!("CPUID of vCPU 0 reads {:#x}", r[0]));
        }
    }
    for n in 0..N {
        let mut r = [0u64; 6];
        if !t.quiet("csrrd", n as u64, run(n as usize, &mut r)) {
            continue;
        }
        let old = r[0];
        let g = match n % 4 {
            0 => u64::MAX,
            1 => 0x5555_5555_5555_5555,
            2 => 0xaaaa_aaaa_aaaa_aaaa,
            _ => rng.next(),
        };
        if n == 0 {
            // CRMD: garbage in DATF/DATM only.
            let mut r = [g, CRMD_SAFE_MASK, 0, 0, 0, 0];
            t.quiet("csrxchg CRMD", g, run(0x8000, &mut r));
            let mut r = [old, 0, 0, 0, 0, 0];
            t.quiet("csrwr CRMD", old, run(0x4000, &mut r));
            continue;
        }
        let mut r = [g, 0, 0, 0, 0, 0];
        write(&mut t, "csrwr", n, run(0x4000 + n as usize, &mut r));
        let mut back = [0u64; 6];
        t.quiet("csrrd", n as u64, run(n as usize, &mut back));
        if READ_ONLY.contains(&n) && back[0] != old {
            t.bad(format_args!(
                "read-only CSR {n:#x} changed from {old:#x} to {:#x}",
                back[0]
            ));
        }
        if n < 0x2000 {
            let mut r = [rng.next(), rng.next(), 0, 0, 0, 0];
            write(&mut t, "csrxchg", n, run(0x8000 + n as usize, &mut r));
        }
        if lvz() && LVZ_ROOT_CSRS.contains(&n) && back[0] != 0 {
            t.bad(format_args!(
                "LVZ root CSR number {n:#x} reads {:#x} after garbage",
                back[0]
            ));
        }
        let mut r = [old, 0, 0, 0, 0, 0];
        write(
            &mut t,
            "csrwr (restore)",
            n,
            run(0x4000 + n as usize, &mut r),
        );
        if READ_ONLY.contains(&n) {
            let mut back = [0u64; 6];
            let _ = run(n as usize, &mut back);
            if back[0] != old {
                t.bad(format_args!("read-only CSR {n:#x} changed by csrxchg"));
            }
        }
    }
    // A timer garbage may have started is stopped; its interrupt cleared.
    wr(0x41, 0);
    wr(0x44, 1);
    println!("ATTACK csr: {nonzero} of {N} CSR numbers read non-zero");
    t
}

/// TLB instructions with garbage TLBIDX/TLBEHI/TLBELO0/1/STLBPS (PS 63
/// included) and ASID; `invtlb` with every op (0-6 valid, others INE).
fn attack_tlb(_kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let entries = tlb_entries();
    let ops = [TLBSRCH, TLBRD, TLBWR, TLBFILL, TLBCLR, TLBFLUSH];
    // 0-5: ops; 6-11: csrwr TLBIDX, TLBEHI, TLBELO0, TLBELO1, STLBPS, ASID;
    // 12: csrrd TLBIDX; 13..45: invtlb 0-31.
    let csrs = [0x10u32, 0x11, 0x12, 0x13, 0x1e, 0x18];
    load(
        ops.iter()
            .copied()
            .chain(csrs.iter().map(|&c| csrwr(c)))
            .chain(core::iter::once(csrrd(0x10)))
            .chain((0..32).map(invtlb)),
    );
    for k in 0..3000u64 {
        for (i, _) in csrs.iter().enumerate() {
            let mut v = rng.next();
            // TLBIDX.PS and STLBPS from the same odd sizes (so tlbfill
            // often meets PS = STLBPS = 63), index anywhere, NE either way.
            let ps = garbage_ps([63u64, 0, 12, 13, 21, 29, 30, 47, 48, 62][(v >> 8) as usize % 10]);
            if i == 0 && k % 2 == 0 {
                v = (v & !(0x3f << 24)) | ps << 24;
            }
            if i == 0 {
                v = tlbidx(v, entries);
            }
            if i == 4 {
                v = (v & !0x3f) | ps;
            }
            let mut r = [v, 0, 0, 0, 0, 0];
            t.quiet("csrwr TLB CSR", v, run(6 + i, &mut r));
        }
        let op = (rng.next() % 6) as usize;
        let mut r = [0u64; 6];
        t.quiet("TLB op", op as u64, run(op, &mut r));
        if op == 0 {
            let mut r = [0u64; 6];
            let _ = run(12, &mut r);
            let idx = r[0];
            if idx >> 31 & 1 == 0 && idx & 0xffff >= 2112 {
                t.bad(format_args!("tlbsrch hit at index {idx:#x}"));
            }
        }
    }
    // Each odd size for certain: PS = STLBPS (tlbfill into the STLB), then
    // tlbwr, tlbsrch and tlbrd of it.
    for ps in [63u64, 0, 1, 62, 48, 47, 31].map(garbage_ps) {
        for (i, v) in [
            tlbidx(rng.next() & 0xffff, entries) | ps << 24,
            rng.next(),
            rng.next(),
            rng.next(),
            ps,
            rng.next() & 0x3ff,
        ]
        .into_iter()
        .enumerate()
        {
            t.quiet("csrwr TLB CSR", v, run(6 + i, &mut [v, 0, 0, 0, 0, 0]));
        }
        for op in [3usize, 2, 0, 1] {
            t.quiet("TLB op with odd PS", ps, run(op, &mut [0; 6]));
        }
    }
    for op in 0..32u32 {
        for _ in 0..4 {
            let mut r = [0, rng.next(), rng.next(), 0, 0, 0];
            let res = run(13 + op as usize, &mut r);
            if op <= 6 {
                t.quiet("invtlb op", op as u64, res);
            } else if lvz() {
                // LVZ's root-only ops (0x9-0xe, 0x10-0x16 on the emulator:
                // by GID, of guest or second-stage entries) are IPE from
                // the guest, the undefined ones INE; nothing is
                // invalidated (the victim's memory and TLB stay).
                t.probes += 1;
                match res {
                    Err(c) if [trap::ecode::INE, trap::ecode::IPE].contains(&c.ecode()) => {
                        t.exceptions += 1
                    }
                    Err(c) => {
                        t.exceptions += 1;
                        t.bad(format_args!(
                            "invtlb op {op:#x}: {}",
                            trap::ecode::name(c.ecode())
                        ))
                    }
                    Ok(()) => t.bad(format_args!("invtlb op {op:#x}: no exception")),
                }
            } else {
                t.raises("invtlb op", op as u64, trap::ecode::INE, res);
            }
        }
    }
    // Back to a sane TLB: everything invalid, 4 KiB pages, ASID 0.
    let mut r = [0u64; 6];
    let _ = run(13, &mut r);
    wr(0x1e, 12);
    wr(0x18, 0);
    wr(0x10, 0);
    t
}

/// `nx`: instruction fetches from pages its own TLB maps no-execute (NX)
/// and, with RPLV set, for PLV3 only: each must raise PNX, or PPI, taken
/// by the guest itself with BADV at the fetched address. (The LVZ emulator
/// refetched the instruction for BADI while taking the exception, faulted
/// again and never got out: the vCPU stopped for good, patch 0008.)
fn attack_nx(_kestrel: bool) -> Tally {
    let mut t = Tally::new();
    // Stub 0: a `nop` and its `jr ra`, run through an upper-half VA that
    // the TLB maps onto the stubs' page; DMW0 keeps everything else
    // reachable at its physical address in paged mode (as in `memory`).
    const NOP: u32 = 0x0340_0000;
    const VA: u64 = 0xffff_ff80_0000_0000;
    const NX: u64 = 1 << 62;
    const RPLV: u64 = 1 << 63;
    let tlbr = hostile_tlbr as *const () as u64;
    wr(0x88, tlbr);
    wr(0x180, 1 | 1 << 4);
    wr(0x1e, 12);
    wr(0x18, 0);
    let crmd = rd(0);
    wr(0, (crmd & !(0x3 | 1 << 3 | 1 << 2)) | 1 << 4);
    // Stubs 1-4: csrwr TLBIDX, TLBEHI, TLBELO0, TLBELO1; 5: tlbwr; 6: invtlb 0.
    load(
        core::iter::once(NOP)
            .chain([0x10u32, 0x11, 0x12, 0x13].into_iter().map(csrwr))
            .chain([TLBWR, invtlb(0)]),
    );
    let page = stub_addr(0) as u64 & !0x1fff;
    // V, D, MAT = cached, G, PLV0: executable; then with NX; then PLV3
    // with RPLV (PLV0 may not use it); then both.
    let base = |p: u64| p | 1 | 1 << 1 | 1 << 4 | 1 << 6;
    let kinds = [
        (0, None),
        (NX, Some(6u64)),
        (3 << 2 | RPLV, Some(trap::ecode::PPI)),
        (NX | 3 << 2 | RPLV, None),
    ];
    for k in 0..64u64 {
        let (bits, want) = kinds[(k % 4) as usize];
        // STLB (one of the 8 ways of the set VA[20:13] selects, set 0
        // here) or MTLB (2048-2111), 4 KiB pages.
        let idx = if k % 2 == 0 {
            (k / 2 % 8) * 256
        } else {
            2048 + k % 64
        };
        let off = stub_addr(0) as u64 & 0x1fff;
        for (i, v) in [
            idx | 12 << 24,
            VA,
            base(page) | bits,
            base(page + 0x1000) | bits,
        ]
        .into_iter()
        .enumerate()
        {
            let _ = run(1 + i, &mut [v, 0, 0, 0, 0, 0]);
        }
        t.quiet("tlbwr", idx, run(5, &mut [0; 6]));
        let target = VA + off;
        note_ran();
        RESUME.store(stub_addr(0) as u64 + 4, Ordering::Release);
        let mut r = [0u64; 6];
        // SAFETY: `target` is stub 0 (`nop; jr ra`) through the entry above;
        // a fetch exception resumes at the real stub's `jr ra`.
        unsafe { hostile_call(&mut r, target as usize) };
        let caught = RESUME.swap(0, Ordering::AcqRel) == 0;
        t.probes += 1;
        let ecode = ecode_of(CAUGHT_ESTAT.load(Ordering::Relaxed));
        let badv = CAUGHT_BADV.load(Ordering::Relaxed);
        match (want, caught) {
            (None, false) => {}
            (Some(e), true) if ecode == e && badv == target => t.exceptions += 1,
            // NX and RPLV together: either exception is architectural.
            (None, true) if bits & NX != 0 && (ecode == 6 || ecode == trap::ecode::PPI) => {
                t.exceptions += 1
            }
            (_, true) => {
                t.exceptions += 1;
                t.bad(format_args!(
                    "fetch at {target:#x} (TLBELO bits {bits:#x}): {} (ESTAT {:#x}), BADV {badv:#x}",
                    trap::ecode::name(ecode),
                    CAUGHT_ESTAT.load(Ordering::Relaxed)
                ))
            }
            (Some(e), false) => t.bad(format_args!(
                "fetch at {target:#x} (TLBELO bits {bits:#x}): no exception (wanted {})",
                trap::ecode::name(e)
            )),
        }
        // Next round: a fresh entry.
        t.quiet("invtlb", 0, run(6, &mut [0; 6]));
    }
    wr(0, crmd);
    wr(0x180, 0);
    let _ = one(invtlb(0), &mut [0; 6]);
    t
}

/// `tlb-garbage`: the TLB instructions with whole garbage in TLBIDX (any
/// index up to 4095, beyond the 2112 entries; any PS), TLBEHI, TLBELO0/1,
/// STLBPS and ASID, from seed 0xfeed5eed12349876; no exception expected.
/// Unlike `tlb` the index is not kept inside the TLB under LVZ: on the LVZ
/// emulator a `tlbwr` past the end wrote past its array of guest entries
/// into its own memory (SIGSEGV after about 1,600 rounds, patch 0009).
/// Under LVZ PS still takes only the sizes PRCFG2 lists ([`garbage_ps`]).
fn attack_tlb_garbage(_kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0xfeed_5eed_1234_9876);
    let ops = [TLBSRCH, TLBRD, TLBWR, TLBFILL, TLBCLR, TLBFLUSH];
    let csrs = [0x10u32, 0x11, 0x12, 0x13, 0x1e, 0x18];
    load(
        ops.iter()
            .copied()
            .chain(csrs.iter().map(|&c| csrwr(c)))
            .chain(core::iter::once(csrrd(0x10))),
    );
    const ROUNDS: u64 = 4000;
    for k in 0..ROUNDS {
        for (i, _) in csrs.iter().enumerate() {
            let mut v = rng.next();
            let ps = garbage_ps([63u64, 0, 12, 13, 21, 29, 30, 47, 48, 62][(v >> 8) as usize % 10]);
            if i == 0 && k % 2 == 0 {
                v = (v & !(0x3f << 24)) | ps << 24;
            }
            if i == 4 {
                v = (v & !0x3f) | ps;
            }
            let mut r = [v, 0, 0, 0, 0, 0];
            t.quiet("csrwr TLB CSR", v, run(6 + i, &mut r));
        }
        // Mostly tlbwr and tlbrd, the ones that take the index.
        let op = [0usize, 1, 1, 2, 2, 2, 2, 3, 4, 5][(rng.next() % 10) as usize];
        t.quiet("TLB op", op as u64, run(op, &mut [0; 6]));
        if k % 500 == 499 {
            println!("ATTACK tlb-garbage: {} rounds", k + 1);
        }
    }
    let mut r = [0u64; 6];
    let _ = one(invtlb(0), &mut r);
    wr(0x1e, 12);
    wr(0x18, 0);
    wr(0x10, 0);
    t
}

const IPI_STATUS: u64 = iocsr::IPI_STATUS;
const IPI_EN: u64 = iocsr::IPI_EN;
const IPI_CLEAR: u64 = iocsr::IPI_CLEAR;
const IPI_SEND: u64 = iocsr::IPI_SEND;
const MAIL_SEND: u64 = iocsr::MAIL_SEND;
const MBUF0: u64 = 0x1020;

/// IOCSR reads of every width across the space, garbage writes (the IPI
/// block, MISC_FUNC, the EIOINTC, ANY_SEND), IPIs and mail to CPUs that do
/// not exist.
fn attack_iocsr(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    // 0-3 iocsrrd.{b,h,w,d}; 4-7 iocsrwr.{b,h,w,d}
    load((0..4).map(iocsrrd).chain((0..4).map(iocsrwr)));
    let rd = |t: &mut Tally, w: usize, a: u64| -> u64 {
        let mut r = [0, a, 0, 0, 0, 0];
        t.quiet("iocsrrd", a, run(w, &mut r));
        r[0]
    };
    let wrio = |t: &mut Tally, w: usize, a: u64, v: u64| {
        let mut r = [v, a, 0, 0, 0, 0];
        t.quiet("iocsrwr", a, run(4 + w, &mut r));
    };
    for a in 0..0x1100u64 {
        for w in 0..4 {
            rd(&mut t, w, a);
        }
    }
    for _ in 0..256 {
        let a = rng.next();
        for w in 0..4 {
            rd(&mut t, w, a);
            rd(&mut t, w, a & 0xffff_ffff);
        }
    }
    for a in [u64::MAX, u64::MAX - 7, 1 << 63, 0xffff_ffff, 0x1_0000_1000] {
        for w in 0..4 {
            rd(&mut t, w, a);
        }
    }
    if kestrel && rd(&mut t, 2, iocsr::FEATURES) & iocsr::FEATURE_VM == 0 {
        t.bad(format_args!("IOCSR features lost the VM bit"));
    }
    let features = rd(&mut t, 3, iocsr::FEATURES);
    // Garbage writes everywhere but the send registers (below).
    for a in (0..0x1100u64).step_by(2) {
        if a & !7 == IPI_SEND || a & !7 == MAIL_SEND {
            continue;
        }
        wrio(&mut t, (a as usize / 2) % 4, a, rng.next());
    }
    for _ in 0..256 {
        let a = rng.next();
        if (0x1000..0x1100).contains(&(a & 0xffff_ffff)) {
            continue;
        }
        wrio(&mut t, (a % 4) as usize, a, rng.next());
    }
    // The interrupt controllers' space (EIOINTC block, ANY_SEND, the
    // virtual-extension words): every width read, garbage written.
    for a in (0x1100..0x1d00u64)
        .step_by(2)
        .chain(0x4000_0000..0x4000_0008)
    {
        rd(&mut t, (a as usize / 2) % 4, a);
        wrio(&mut t, (a as usize / 2 + 1) % 4, a, rng.next());
    }
    if rd(&mut t, 3, iocsr::FEATURES) != features {
        t.bad(format_args!("IOCSR features changed by writes"));
    }
    // Back to a known IPI state.
    wrio(&mut t, 2, IPI_EN, 0xffff_ffff);
    wrio(&mut t, 2, IPI_CLEAR, 0xffff_ffff);
    if rd(&mut t, 2, IPI_STATUS) != 0 {
        t.bad(format_args!("IPI STATUS not cleared by CLEAR"));
    }
    for m in 0..4u64 {
        wrio(&mut t, 3, MBUF0 + 8 * m, 0x1111 * (m + 1));
    }
    // IPIs and mail to every other CPU id: none exists in this VM, so
    // nothing may arrive here.
    for id in 1..0x400u64 {
        let v = (id % 32) | id << 16 | (id & 1) << 31;
        wrio(&mut t, 2, IPI_SEND, v);
        wrio(&mut t, 3, IPI_SEND, v | rng.next() << 32);
        let m = (id & 3) << 3 | (id & 4) | id << 16 | rng.next() << 32;
        wrio(&mut t, 3, MAIL_SEND, m);
    }
    let st = rd(&mut t, 2, IPI_STATUS);
    if st != 0 {
        t.bad(format_args!("IPIs to missing CPUs set STATUS {st:#x} here"));
    }
    for m in 0..4u64 {
        let v = rd(&mut t, 3, MBUF0 + 8 * m);
        if v != 0x1111 * (m + 1) {
            t.bad(format_args!(
                "mail to missing CPUs changed mailbox {m}: {v:#x}"
            ));
        }
    }
    // To itself: STATUS gets the vector, the mailbox the data.
    wrio(&mut t, 2, IPI_SEND, 9);
    let st = rd(&mut t, 2, IPI_STATUS);
    if st != 1 << 9 {
        t.bad(format_args!("IPI vector 9 to self: STATUS {st:#x}"));
    }
    wrio(&mut t, 2, IPI_CLEAR, 0xffff_ffff);
    wrio(&mut t, 3, MAIL_SEND, 2 << 3 | 0x1234_5678 << 32);
    let v = rd(&mut t, 2, MBUF0 + 16);
    if v != 0x1234_5678 {
        t.bad(format_args!("MAIL_SEND to self, mailbox 2 reads {v:#x}"));
    }
    t
}

/// KVM's steal-time record at the edges of RAM and beyond (LVZ backend):
/// the last 64 bytes of RAM are a record (0), RAM's end, the 16550's
/// registers and the top of the address space are not (-2, the record
/// kept). Then this vCPU spins a while (the pCPU is shared with the
/// victim, so it may be put while runnable and its `preempted` byte set):
/// the byte must read 0 whenever it runs.
fn steal_time_edges(t: &mut Tally) {
    let top = RAM_TOP.load(Ordering::Relaxed);
    if top < 4096 {
        return;
    }
    let rec = top - 64;
    let invalid = ret::INVALID_PARAMETER as u64;
    load(core::iter::once(hvcl(0x100)));
    for (arg, want) in [
        (rec | 1, 0),
        (top | 1, invalid),
        (0x1fe0_01c0 | 1, invalid),
        (u64::MAX, invalid),
    ] {
        let mut r = [FN_NOTIFY, u64::from(KVM_FEATURE_STEAL_TIME), arg, 0, 0, 0];
        if t.quiet("steal-time record", arg, run(0, &mut r)) && r[0] != want {
            t.bad(format_args!(
                "steal-time record {arg:#x}: a0 {:#x}, not {want:#x}",
                r[0]
            ));
        }
    }
    // SAFETY: the last bytes of this VM's RAM (beyond the image and the
    // DTB), which the hypervisor writes as the record; read as bytes.
    let byte = || unsafe { ((rec + 16) as *const u8).read_volatile() };
    let (end, mut reads, mut set) = (cpu::now() + us(20_000), 0u64, 0u64);
    while cpu::now() < end {
        reads += 1;
        if byte() != 0 {
            set += 1;
        }
    }
    if set != 0 {
        t.bad(format_args!(
            "the steal-time record at the end of RAM read preempted in {set} of {reads} reads while this vCPU ran"
        ));
    }
}

/// Every `hvcl` code; garbage functions and arguments to the KVM service;
/// PV IPIs naming vCPUs that do not exist.
fn attack_hvcl(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let n = load((0..0x8000u32).map(hvcl));
    let ine = trap::ecode::INE;
    for code in 0..n {
        let s = [FN_KESTREL_PROBE, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5];
        let mut r = s;
        let res = run(code, &mut r);
        if !kestrel {
            t.raises("hvcl code", code as u64, ine, res);
            continue;
        }
        if !t.quiet("hvcl code", code as u64, res) {
            continue;
        }
        let want = if code == 0x100 {
            KESTREL_MAGIC
        } else {
            ret::INVALID_CODE as u64
        };
        if r[0] != want || r[1..] != s[1..] {
            t.bad(format_args!(
                "hvcl {code:#x}: a0 {:#x}, a1-a5 {:?}",
                r[0],
                &r[1..]
            ));
        }
    }
    if !kestrel {
        return t;
    }
    // The KVM service with garbage function ids and arguments.
    let mut funcs = [0u64; 700];
    for (i, f) in funcs.iter_mut().enumerate() {
        *f = match i {
            0..=0x1ff => i as u64,
            0x200..=0x21f => FN_KESTREL_PROBE - 0x10 + (i as u64 - 0x200),
            _ => rng.next() >> (i % 64),
        };
    }
    let stats_count = 17u64;
    for &f in &funcs {
        let s = [
            f,
            rng.next() % 40,
            rng.next(),
            rng.next() % 4,
            rng.next(),
            rng.next(),
        ];
        let mut r = s;
        if !t.quiet("hvcl 0x100 function", f, run(0x100, &mut r)) {
            continue;
        }
        let ok = match f {
            FN_IPI => {
                let valid = s[1] == 1 && s[2] == 0 && s[3] == 0;
                r[0] == if valid {
                    0
                } else {
                    ret::INVALID_PARAMETER as u64
                }
            }
            FN_KESTREL_PROBE => r[0] == KESTREL_MAGIC,
            // KVM's steal time, offered by the LVZ backend alone: feature
            // BIT(2) with a record address | 1 (valid: -2 unless the
            // 64 bytes are its RAM in one page, which garbage never
            // names... but may), or 0 to stop (0).
            FN_NOTIFY if lvz() => {
                let invalid = ret::INVALID_PARAMETER as u64;
                if s[1] != u64::from(KVM_FEATURE_STEAL_TIME) {
                    r[0] == invalid
                } else if s[2] & 1 == 0 {
                    r[0] == 0
                } else {
                    r[0] == invalid || r[0] == 0
                }
            }
            FN_KESTREL_FEATURES => r[0] == features::ALL,
            FN_KESTREL_STATS => {
                if s[1] < stats_count {
                    (r[0] as i64) >= 0
                } else {
                    r[0] == ret::INVALID_PARAMETER as u64
                }
            }
            _ => r[0] == ret::INVALID_CODE as u64,
        };
        if !ok || r[1..] != s[1..] {
            t.bad(format_args!(
                "hvcl 0x100 function {f:#x} ({:#x}, {:#x}, {:#x}): a0 {:#x}",
                s[1], s[2], s[3], r[0]
            ));
        }
    }
    if lvz() {
        steal_time_edges(&mut t);
        // Steal time off again (garbage may have registered a record).
        let mut r = [FN_NOTIFY, u64::from(KVM_FEATURE_STEAL_TIME), 0, 0, 0, 0];
        load(core::iter::once(hvcl(0x100)));
        if t.quiet("steal time off", 0, run(0, &mut r)) && r[0] != 0 {
            t.bad(format_args!("steal time off returned {:#x}", r[0]));
        }
    }
    // PV IPIs: empty, missing vCPUs, min huge or wrapping; only (1, 0, 0)
    // names this VM's single vCPU.
    let windows = [
        (0u64, 0u64, 0u64),
        (1, 0, u64::MAX),
        (1, 0, 1 << 63),
        (1, 0, 1),
        (1, 0, 0x3ff),
        (2, 0, 0),
        (1 << 63, 0, 0),
        (0, 1, 0),
        (0, 1 << 63, 0),
        (u64::MAX, u64::MAX, 0),
        (u64::MAX, u64::MAX, u64::MAX),
        (1, 0, u64::MAX - 1),
        (3, 0, u64::MAX),
    ];
    let swi = || rd(5) & 1;
    for (lo, hi, min) in windows {
        let mut r = [FN_IPI, lo, hi, min, 0, 0];
        load(core::iter::once(hvcl(0x100)));
        if t.quiet("PV IPI", lo, run(0, &mut r)) && r[0] != ret::INVALID_PARAMETER as u64 {
            t.bad(format_args!(
                "PV IPI ({lo:#x}, {hi:#x}, {min:#x}) returned {:#x}",
                r[0]
            ));
        }
    }
    if swi() != 0 {
        t.bad(format_args!("a refused PV IPI set SWI0"));
    }
    let before = trap::SWIS[0].load(Ordering::Relaxed);
    let mut r = [FN_IPI, 1, 0, 0, 0, 0];
    load(core::iter::once(hvcl(0x100)));
    if t.quiet("PV IPI to self", 1, run(0, &mut r)) && r[0] != 0 {
        t.bad(format_args!("PV IPI to self returned {:#x}", r[0]));
    }
    if swi() != 1 {
        t.bad(format_args!("PV IPI to self did not set SWI0"));
    }
    cpu::set_irqs(true);
    crate::wait_for(10_000, || trap::SWIS[0].load(Ordering::Relaxed) > before);
    cpu::set_irqs(false);
    if trap::SWIS[0].load(Ordering::Relaxed) != before + 1 {
        t.bad(format_args!("PV IPI to self: SWI0 not taken once"));
    }
    t
}

/// Privileged and undefined instructions: `idle` at odd levels, `cacop`,
/// `lddir`/`ldpte` on garbage, `cpucfg` of garbage, `rdtime`, `break`,
/// `syscall`, undefined words, and `ertn` with garbage PRMD/ERA.
fn attack_insn(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0x0bad_5eed_1234_5678);
    // idle: a one-shot timer wakes it (interrupts masked: idle wakes on
    // ECFG.LIE alone); an enabled interrupt must be pending afterwards. Some
    // rounds first take an IPI to itself (PV or IOCSR) with interrupts on:
    // once handled, it must not wake a later idle.
    for (k, level) in [0u32, 1, 3, 0x7fff, 0x4000, 0x1234, 0x100, 0x7ffe]
        .into_iter()
        .cycle()
        .take(48)
        .enumerate()
    {
        if k % 3 != 0 {
            let before =
                trap::SWIS[0].load(Ordering::Relaxed) + trap::IPIS[0].load(Ordering::Relaxed);
            cpu::set_irqs(true);
            if k % 3 == 1 {
                trap::hvcl(FN_IPI, 1, 0, 0);
            } else {
                cpu::ipi_send(0, 3);
            }
            crate::wait_for(10_000, || {
                trap::SWIS[0].load(Ordering::Relaxed) + trap::IPIS[0].load(Ordering::Relaxed)
                    > before
            });
            cpu::set_irqs(false);
        }
        wr(0x44, 1);
        let ticks = us(2000) & !3;
        wr(0x41, ticks | 1);
        let t0 = cpu::now();
        let res = one(idle(level), &mut [0; 6]);
        let dt = cpu::now() - t0;
        t.quiet("idle level", level as u64, res);
        let estat = rd(5);
        if estat & rd(4) & 0x1fff == 0 {
            t.bad(format_args!(
                "idle {level:#x} (round {k}) returned after {} us with nothing pending (ESTAT {estat:#x}, timer {} us)",
                dt * 1_000_000 / COUNTER_HZ.load(Ordering::Relaxed),
                ticks * 1_000_000 / COUNTER_HZ.load(Ordering::Relaxed)
            ));
        }
        wr(0x41, 0);
        wr(0x44, 1);
    }
    // cacop: kestrel ignores it; an address-class exception would be
    // architectural for hit-type ops on garbage addresses.
    load((0..32).map(cacop));
    for code in 0..32u32 {
        for _ in 0..2 {
            let mut r = [0, rng.next() & 0xffff_ffff_ffff, 0, 0, 0, 0];
            t.probes += 1;
            if let Err(c) = run(code as usize, &mut r) {
                t.exceptions += 1;
                if !(1..=9).contains(&c.ecode()) {
                    t.bad(format_args!(
                        "cacop {code}: {}",
                        trap::ecode::name(c.ecode())
                    ));
                }
            }
        }
    }
    // lddir / ldpte with garbage bases and levels; cpucfg of garbage; rdtime.
    load(
        [0u32, 1, 2, 3, 4, 5, 0x80, 0xff]
            .into_iter()
            .map(lddir)
            .chain([0u32, 1].into_iter().map(ldpte))
            .chain([CPUCFG, RDTIME_D])
            .chain([0x1cu32, 0x1d, 0x89].into_iter().map(csrwr)),
    );
    for k in 0..1200u64 {
        if k % 12 == 0 {
            // Garbage walk geometry (PWCL, PWCH) and fault address.
            for i in 12..15 {
                let _ = run(i, &mut [rng.next(), 0, 0, 0, 0, 0]);
            }
        }
        let base = match k % 4 {
            0 => rng.next(),
            1 => rng.next() & 0xfff_ffff,
            2 => rng.next() & 0xffff_ffff_f000,
            _ => k * 8,
        };
        let i = (k % 12) as usize;
        let mut r = [0, base, 0, 0, 0, 0];
        let res = run(i, &mut r);
        if lvz() && i < 10 {
            // In LVZ guest mode `lddir`/`ldpte` walk the guest's own
            // tables natively: an entry at a guest physical address that
            // is not its RAM is an address error (ADE, kestrel's answer to
            // the second-stage fault), anything else runs.
            t.probes += 1;
            if let Err(c) = res {
                t.exceptions += 1;
                if c.ecode() != trap::ecode::ADE {
                    t.bad(format_args!(
                        "lddir/ldpte {base:#x}: {}",
                        trap::ecode::name(c.ecode())
                    ));
                }
            }
        } else {
            t.quiet("lddir/ldpte/cpucfg/rdtime", base, res);
        }
    }
    wr(0x1c, 0);
    wr(0x1d, 0);
    // Undefined and exception-raising words: exact ECODEs.
    let cases: [(u32, u64); 6] = [
        (0x0000_0000, trap::ecode::INE),
        (0xffff_ffff, trap::ecode::INE),
        (GCSRRD, trap::ecode::INE),
        (0x002a_0005, trap::ecode::BRK),
        (0x002b_0007, trap::ecode::SYS),
        (0x0648_3801, trap::ecode::INE), // ertn with a non-zero low field
    ];
    load(cases.iter().map(|c| c.0));
    for (i, (w, want)) in cases.iter().enumerate() {
        for _ in 0..50 {
            let r = run(i, &mut [0; 6]);
            t.raises("word", *w as u64, *want, r);
        }
    }
    // ertn with garbage PRMD and ERA.
    let cont = stub_addr(CONT) as u64;
    load([ERTN, csrwr(0x1), csrwr(0x6)].into_iter());
    for k in 0..400u64 {
        let g = rng.next();
        let pplv = k % 4;
        let prmd = (g & !0x7) | pplv; // PIE = 0: stay masked
        let era = match k % 8 {
            0..=3 => cont,
            4 => 0x7_0000_0000 + (g & 0xff_fff0),
            5 => 0x0000_7fff_0000_0000 | (g & 0xfff0),
            6 => 0xffff_8000_0000_0000 | (g & 0xffff_fff0),
            // Not a canonical VA; in DA mode PA = VA[47:0], no RAM there.
            _ => 0x9000_0000_f000_0000 | (g & 0xff_fff0),
        };
        let _ = run(1, &mut [prmd, 0, 0, 0, 0, 0]);
        let _ = run(2, &mut [era, 0, 0, 0, 0, 0]);
        let mut r = [0u64; 6];
        let res = run(0, &mut r);
        t.probes += 1;
        match (era == cont, pplv, res) {
            (true, 0, Ok(())) => {
                // Back at PLV0 with IE = PIE = 0: CONT read CRMD.
                if r[0] & 7 != 0 {
                    t.bad(format_args!("ertn to PLV0: CRMD {:#x}", r[0]));
                }
            }
            // QEMU traps privileged instructions at PLV3 only; the manual
            // (and kestrel) at PLV1 and PLV2 too. On bare QEMU, CONT then
            // reads CRMD: PLV as set, IE = 0.
            // So does the LVZ emulator in guest mode, where the CPU, not
            // kestrel, answers.
            (true, p @ (1 | 2), Ok(())) if !kestrel || lvz() => {
                if r[0] & 7 != p {
                    t.bad(format_args!("ertn to PLV{p}: CRMD {:#x}", r[0]));
                }
            }
            (true, p, Err(c)) if p != 0 => {
                t.exceptions += 1;
                if c.ecode() != trap::ecode::IPE || c.era != cont || c.prmd & 3 != p {
                    t.bad(format_args!(
                        "ertn to PLV{p}: {} at {:#x} PRMD {:#x}",
                        trap::ecode::name(c.ecode()),
                        c.era,
                        c.prmd
                    ));
                }
            }
            (false, _, Err(c)) => {
                t.exceptions += 1;
                // A fetch from nothing: ADE (ADEF), or a page fault class
                // at PLV1-3 is not possible in DA mode.
                if c.ecode() != 8 || c.subcode() != 0 || c.era != era {
                    t.bad(format_args!(
                        "ertn to {era:#x} (PLV{pplv}): {} sub {} at {:#x}",
                        trap::ecode::name(c.ecode()),
                        c.subcode(),
                        c.era
                    ));
                }
            }
            (_, _, res) => t.bad(format_args!(
                "ertn to {era:#x} PLV{pplv}: {}",
                if res.is_ok() {
                    "no exception"
                } else {
                    "wrong exception"
                }
            )),
        }
    }
    // ertn "from a TLB refill" (TLBRERA.IsTLBR = 1, garbage TLBRPRMD): back
    // to TLBRERA with TLBRPRMD's PLV and IE, and paging on (DA = 0, PG =
    // 1). DMW0 (VSEG 0, every PLV, cached) keeps the code reachable.
    let crmd = rd(0);
    wr(0x180, 0xf | 1 << 4);
    load([ERTN, csrwr(0x8a), csrwr(0x8f)].into_iter());
    for k in 0..64u64 {
        let pplv = k % 4;
        if (!kestrel || lvz()) && (pplv == 1 || pplv == 2) {
            // QEMU would run on at PLV1/2 (see above), in paged mode.
            continue;
        }
        let tlbrprmd = (rng.next() & 0x10) | pplv; // PWE garbage, PIE 0
        let _ = run(2, &mut [tlbrprmd, 0, 0, 0, 0, 0]);
        let _ = run(1, &mut [cont | 1, 0, 0, 0, 0, 0]);
        let mut r = [0u64; 6];
        let res = run(0, &mut r);
        t.probes += 1;
        match (pplv, res) {
            (0, Ok(())) => {
                if r[0] & 0x1f != 0x10 {
                    t.bad(format_args!(
                        "ertn from refill mode to PLV0: CRMD {:#x}",
                        r[0]
                    ));
                }
            }
            (p, Err(c)) if p != 0 => {
                t.exceptions += 1;
                if c.ecode() != trap::ecode::IPE || c.era != cont || c.prmd & 3 != p {
                    t.bad(format_args!(
                        "ertn from refill mode to PLV{p}: {} at {:#x} PRMD {:#x}",
                        trap::ecode::name(c.ecode()),
                        c.era,
                        c.prmd
                    ));
                }
            }
            (p, _) => t.bad(format_args!(
                "ertn from refill mode to PLV{p}: wrong answer"
            )),
        }
    }
    wr(0, crmd);
    wr(0x180, 0);
    cpu::set_irqs(false);
    t
}

/// The console 16550: garbage in every register (divisor latch, loopback,
/// FIFO control), every byte value as output (a 3 KiB line), then back to
/// 8N1 with a working scratch register and an empty receive FIFO.
fn attack_console(_kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0x1650_1650_abcd_ef01);
    let base = crate::console::base() as u64;
    // 0: ld.bu a0, a1, 0; 1: st.b a0, a1, 0
    load([0x2a00_0000 | A1 << 5 | A0, 0x2900_0000 | A1 << 5 | A0].into_iter());
    let rdb = |t: &mut Tally, off: u64| -> u64 {
        let mut r = [0, base + off, 0, 0, 0, 0];
        t.quiet("UART read", off, run(0, &mut r));
        r[0]
    };
    let wrb = |t: &mut Tally, off: u64, v: u64| {
        t.quiet("UART write", off, run(1, &mut [v, base + off, 0, 0, 0, 0]));
    };
    for _ in 0..500 {
        let off = rng.next() % 8;
        if rng.next().is_multiple_of(2) {
            rdb(&mut t, off);
        } else {
            wrb(&mut t, off, rng.next() & 0xff);
        }
    }
    // Loopback: what it sends comes back, nothing reaches the console.
    wrb(&mut t, 3, 0x03);
    wrb(&mut t, 2, 0x07);
    wrb(&mut t, 4, 0x10);
    for b in 0..64u64 {
        wrb(&mut t, 0, b);
    }
    wrb(&mut t, 4, 0x00);
    wrb(&mut t, 1, 0x00);
    wrb(&mut t, 2, 0x07);
    let mut drained = 0;
    while rdb(&mut t, 5) & 1 != 0 && drained < 1000 {
        rdb(&mut t, 0);
        drained += 1;
    }
    if drained == 1000 {
        t.bad(format_args!("the receive FIFO never drained"));
    }
    wrb(&mut t, 7, 0x5a);
    let scr = rdb(&mut t, 7);
    if scr != 0x5a || rdb(&mut t, 3) != 0x03 || rdb(&mut t, 5) & 0x20 == 0 {
        t.bad(format_args!(
            "UART not back to 8N1 with a scratch register ({scr:#x})"
        ));
    }
    // Every byte value, one long line.
    for i in 0..3072u64 {
        let b = i & 0xff;
        wrb(&mut t, 0, if b == b'\n' as u64 { b'.' as u64 } else { b });
    }
    wrb(&mut t, 0, b'\n' as u64);
    t
}

/// Runs user stub `i` (loaded by [`load_user`]) at PLV3: `ertn` there with
/// PRMD.PPLV = 3; the stub's instruction, then `syscall 0`. Always ends in
/// an exception (the instruction's, or SYS), taken back at PLV0.
fn run_user(i: usize, r: &mut [u64; 6]) -> Caught {
    // SAFETY: PRMD/ERA are consumed by the `ertn` in stub 0 at once; the
    // probe's exception returns to stub 0's `jr ra` at PLV0.
    unsafe {
        csr_write!(csr::PRMD, 3);
        csr_write!(csr::ERA, stub_addr(i + 1) as u64);
    }
    match run(0, r) {
        Err(c) => c,
        // Not possible: ertn does not return to stub 0.
        Ok(()) => Caught {
            estat: 0,
            era: 0,
            prmd: 0,
            badv: 0,
        },
    }
}

/// Stub 0 = `ertn; jr ra`, stub i + 1 = `words[i]; syscall 0`.
fn load_user(words: &[u32]) {
    let base = STUBS.0.get() as *mut u32;
    // SAFETY: inside the buffer (words is short); then the barriers.
    unsafe {
        base.write_volatile(ERTN);
        base.add(1).write_volatile(JR_RA);
        for (i, &w) in words.iter().enumerate().take(STUB_CAP - 1) {
            base.add(2 * i + 2).write_volatile(w);
            base.add(2 * i + 3).write_volatile(SYSCALL0);
        }
        core::arch::asm!("dbar 0", "ibar 0", options(nostack));
    }
}

/// The same instructions from (virtual) PLV3: privileged ones raise IPE;
/// `hvcl` answers -1 (the services are the guest kernel's); `cpucfg`,
/// `rdtime`, loads run; `break`/`syscall` raise BRK/SYS.
fn attack_user(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(0x7777_1111_3333_5555);
    let ipe = trap::ecode::IPE;
    let mut privileged = [0u32; 64];
    let mut n = 0;
    for w in [
        csrrd(0),
        csrrd(0x30),
        csrwr(0x30),
        csrxchg(0),
        csrrd(0x3fff),
        iocsrrd(0),
        iocsrrd(2),
        iocsrwr(2),
        iocsrwr(3),
        TLBSRCH,
        TLBRD,
        TLBWR,
        TLBFILL,
        TLBCLR,
        TLBFLUSH,
        ERTN,
        idle(0),
        idle(0x7fff),
        invtlb(0),
        invtlb(5),
        invtlb(31),
        lddir(1),
        ldpte(0),
    ] {
        privileged[n] = w;
        n += 1;
    }
    let quiet = [CPUCFG, RDTIME_D, hvcl(0x100), hvcl(0x7fff), hvcl(0)];
    let mut all = [0u32; 64];
    all[..n].copy_from_slice(&privileged[..n]);
    all[n..n + quiet.len()].copy_from_slice(&quiet);
    load_user(&all[..n + quiet.len()]);
    for round in 0..40 {
        for (i, &w) in all[..n + quiet.len()].iter().enumerate() {
            let s = [
                if i >= n + 2 {
                    FN_KESTREL_PROBE
                } else {
                    rng.next()
                },
                if round % 2 == 0 { IPI_SEND } else { rng.next() },
                rng.next(),
                0,
                0,
                0,
            ];
            let mut r = s;
            let c = run_user(i, &mut r);
            t.probes += 1;
            t.exceptions += 1;
            let at = stub_addr(i + 1) as u64;
            let ok = if i < n {
                c.ecode() == ipe && c.era == at && c.prmd & 3 == 3
            } else if i >= n + 2 && !kestrel {
                c.ecode() == trap::ecode::INE && c.era == at
            } else if i >= n + 2 && lvz() && c.ecode() == ipe {
                // `hvcl` from the guest's PLV3: the LVZ emulator raises
                // IPE in the guest (it never reaches kestrel); kestrel
                // itself answers -1 (below) where the CPU sends it on.
                c.era == at && c.prmd & 3 == 3
            } else {
                let sys = c.ecode() == trap::ecode::SYS && c.era == at + 4 && c.prmd & 3 == 3;
                // hvcl at PLV3: "unknown code", nothing else changed.
                sys && (i < n + 2 || (r[0] == ret::INVALID_CODE as u64 && r[1..] == s[1..]))
            };
            if !ok {
                t.bad(format_args!(
                    "{w:#010x} at PLV3: {} at {:#x} (stub {at:#x}) PRMD {:#x} a0 {:#x}",
                    trap::ecode::name(c.ecode()),
                    c.era,
                    c.prmd,
                    r[0]
                ));
            }
        }
    }
    // Nothing privileged happened: no IPI reached itself, STATUS is clear.
    let mut r = [0, IPI_STATUS, 0, 0, 0, 0];
    let _ = one(iocsrrd(2), &mut r);
    if r[0] != 0 {
        t.bad(format_args!(
            "iocsrwr at PLV3 reached IPI STATUS: {:#x}",
            r[0]
        ));
    }
    t
}

/// Loads from every 2 MiB (+ 0x1f_f000) of the first 16 GiB of guest
/// physical space: in DA mode, through a DMW window (0x9000...) and through
/// TLB entries written for them. Own RAM must read its own markers; every
/// other address must raise ADE; nothing may read the victim's pattern.
/// The attacker's memory probes start no earlier than this second of the
/// counter (kestrel boots in about 1 s, the victim fills its memory in
/// under 1 s more and starts its window on the next whole second).
const MEMORY_NOT_BEFORE_S: u64 = 3;

/// The legacy I/O port window kestrel gives every LoongArch VM (the device
/// tree's `isa@18000000`: port N at `ISA_IO + N`), where no port answers.
const ISA_IO: u64 = 0x1800_0000;
const ISA_IO_SIZE: u64 = 0x4000;

/// Loads and stores of every width at ports across the legacy I/O window:
/// each load reads all-ones of its width (sign-extended by the signed
/// loads), no store changes what a load reads (the i8042's commands
/// included), nothing raises an exception; a load or store just below or
/// just past the window raises ADE with BADV = its address (nothing is
/// there). Expects direct-address mode; reloads the stubs.
fn attack_legacy_io(t: &mut Tally) {
    // (opcode, bytes, sign-extending) of ld.b ld.h ld.w ld.d ld.bu ld.hu
    // ld.wu; then st.b st.h st.w st.d; rd = a0, rj = a1, offset 0.
    const LOADS: [(u32, u64, bool); 7] = [
        (0x2800_0000, 1, true),
        (0x2840_0000, 2, true),
        (0x2880_0000, 4, true),
        (0x28c0_0000, 8, true),
        (0x2a00_0000, 1, false),
        (0x2a40_0000, 2, false),
        (0x2a80_0000, 4, false),
    ];
    const STORES: [(u32, u64); 4] = [
        (0x2900_0000, 1),
        (0x2940_0000, 2),
        (0x2980_0000, 4),
        (0x29c0_0000, 8),
    ];
    load(
        LOADS
            .iter()
            .map(|l| l.0)
            .chain(STORES.iter().map(|s| s.0))
            .map(|op| op | A1 << 5 | A0),
    );
    let ones = |bytes: u64, signed: bool| {
        if signed || bytes == 8 {
            u64::MAX
        } else {
            (1 << (8 * bytes)) - 1
        }
    };
    // Every load width at port `port` (rounded down to its alignment).
    let loads_at = |t: &mut Tally, port: u64| {
        for (i, &(_, bytes, signed)) in LOADS.iter().enumerate() {
            let a = ISA_IO + (port & !(bytes - 1));
            let mut r = [0x5a5a_0000_0000_1234, a, 0, 0, 0, 0];
            if t.quiet("legacy I/O load", a, run(i, &mut r)) && r[0] != ones(bytes, signed) {
                t.bad(format_args!(
                    "legacy I/O {bytes}-byte load at {a:#x} read {:#x}",
                    r[0]
                ));
            }
        }
    };
    let store_at = |t: &mut Tally, k: usize, port: u64, v: u64| {
        let a = ISA_IO + (port & !(STORES[k].1 - 1));
        t.quiet(
            "legacy I/O store",
            a,
            run(LOADS.len() + k, &mut [v, a, 0, 0, 0, 0]),
        );
    };
    // The i8042 as its driver probes it: flush (status, data), then the
    // controller self-test and read-CTR commands, then the data port.
    for port in [0x64, 0x60] {
        loads_at(t, port);
    }
    for cmd in [0xaa, 0x20, 0xa9, 0xd4] {
        store_at(t, 0, 0x64, cmd);
        loads_at(t, 0x64);
        loads_at(t, 0x60);
    }
    // The first and last ports, then garbage at random ports.
    for port in [0, 1, ISA_IO_SIZE - 8, ISA_IO_SIZE - 1] {
        loads_at(t, port);
    }
    let mut rng = Rng(0x0180_0000_6064_1f1f);
    for _ in 0..256 {
        let x = rng.next();
        let port = x % ISA_IO_SIZE;
        store_at(t, (x >> 20) as usize % STORES.len(), port, rng.next());
        loads_at(t, port);
    }
    // Both edges: nothing below or past the window.
    for (i, a) in [
        (3, ISA_IO - 8),
        (0, ISA_IO - 1),
        (0, ISA_IO + ISA_IO_SIZE),
        (3, ISA_IO + ISA_IO_SIZE),
        (LOADS.len(), ISA_IO + ISA_IO_SIZE),
        (LOADS.len() + 3, ISA_IO - 8),
    ] {
        let r = run(i, &mut [0, a, 0, 0, 0, 0]);
        if let Err(c) = r {
            if c.badv != a {
                t.bad(format_args!(
                    "legacy I/O edge {a:#x}: BADV {:#x}, not the address",
                    c.badv
                ));
            }
        }
        t.raises("legacy I/O edge", a, 8, r);
    }
}

fn attack_memory(kestrel: bool) -> Tally {
    let mut t = Tally::new();
    const CHUNK: usize = 2 << 20;
    const OFF: usize = 0x1f_f000;
    const SPAN: usize = 16 << 30;
    let top = RAM_TOP.load(Ordering::Relaxed) as usize;
    // SAFETY: linker symbols, addresses only.
    let (img0, img1) = unsafe {
        (
            &asm::__image_start as *const u8 as usize,
            &asm::__image_end as *const u8 as usize,
        )
    };
    let own = |a: usize| a < top;
    let marker = |a: usize| ATTACK_TAG << 32 | (a as u64 >> 21);
    let in_image = |a: usize| (img0..img1).contains(&a);
    for k in 0..top / CHUNK {
        let a = k * CHUNK + OFF;
        if !in_image(a) && a + 8 <= top.saturating_sub(CHUNK) {
            // SAFETY: own RAM outside the image and the DTB's last 2 MiB.
            unsafe { (a as *mut u64).write_volatile(marker(a)) };
        }
    }
    let check = |t: &mut Tally, how: &str, pa: usize, va: u64, r: Result<(), Caught>, v: u64| {
        t.probes += 1;
        match r {
            Ok(()) => {
                if v >> 32 == VICTIM_TAG {
                    t.bad(format_args!(
                        "{how} PA {pa:#x} read the victim's pattern {v:#x}"
                    ));
                } else if !own(pa) {
                    t.bad(format_args!("{how} PA {pa:#x} outside RAM read {v:#x}"));
                } else if pa % CHUNK == OFF
                    && !in_image(pa)
                    && pa + 8 <= top - CHUNK
                    && v != marker(pa)
                {
                    t.bad(format_args!("{how} PA {pa:#x} read {v:#x}, not its marker"));
                }
            }
            Err(c) => {
                t.exceptions += 1;
                if own(pa) || c.ecode() != 8 || c.badv != va {
                    t.bad(format_args!(
                        "{how} PA {pa:#x}: {} (ESTAT {:#x}, BADV {:#x})",
                        trap::ecode::name(c.ecode()),
                        c.estat,
                        c.badv
                    ));
                }
            }
        }
    };
    load(core::iter::once(LD_D));
    // Beside a victim, not before it has filled its memory and started
    // its window (it starts on a whole second after its fill).
    let hz = COUNTER_HZ.load(Ordering::Relaxed);
    while kestrel && cpu::now() < MEMORY_NOT_BEFORE_S * hz {
        note_ran();
        cpu::relax();
    }
    let da_start = cpu::now();
    // 1. Direct-address mode.
    for k in 0..SPAN / CHUNK {
        let pa = k * CHUNK + OFF;
        let mut r = [0, pa as u64, 0, 0, 0, 0];
        let res = run(0, &mut r);
        check(&mut t, "DA", pa, pa as u64, res, r[0]);
    }
    // Stores: to its own markers (then read back and restored) and to
    // every 2 MiB outside its RAM (ADE; the victim checks its memory).
    load([LD_D, ST_D].into_iter());
    let is_marker = |pa: usize| own(pa) && !in_image(pa) && pa + 8 <= top - CHUNK;
    for k in 0..SPAN / CHUNK {
        let pa = k * CHUNK + OFF;
        if own(pa) && !is_marker(pa) {
            continue;
        }
        let v = if own(pa) {
            marker(pa) ^ 0x5a5a
        } else {
            0xbad0_0000_0000_0000 | k as u64
        };
        let res = run(1, &mut [v, pa as u64, 0, 0, 0, 0]);
        t.probes += 1;
        match res {
            Ok(()) if own(pa) => {
                let mut r = [0, pa as u64, 0, 0, 0, 0];
                let _ = run(0, &mut r);
                if r[0] != v {
                    t.bad(format_args!(
                        "DA store to own PA {pa:#x} reads back {:#x}",
                        r[0]
                    ));
                }
                let _ = run(1, &mut [marker(pa), pa as u64, 0, 0, 0, 0]);
            }
            Ok(()) => t.bad(format_args!(
                "DA store to PA {pa:#x} outside RAM went through"
            )),
            Err(c) => {
                t.exceptions += 1;
                if own(pa) || c.ecode() != 8 || c.badv != pa as u64 {
                    t.bad(format_args!(
                        "DA store to PA {pa:#x}: {} (BADV {:#x})",
                        trap::ecode::name(c.ecode()),
                        c.badv
                    ));
                }
            }
        }
    }
    // kestrel's own load address (physical 0x20_0000, linked at
    // 0x9000_0000_0020_0000) is guest physical here: this VM's own image.
    // SAFETY: the image's first word, read directly for comparison.
    let own_word = unsafe { (0x20_0000 as *const u64).read_volatile() };
    let mut r = [0, 0x20_0000, 0, 0, 0, 0];
    t.probes += 1;
    if run(0, &mut r).is_err() || r[0] != own_word {
        t.bad(format_args!(
            "PA 0x200000 (kestrel's load address) did not read this VM's image"
        ));
    }
    println!(
        "ATTACK memory: direct-address loads and stores at counter {}-{} ms",
        ms(da_start),
        ms(cpu::now())
    );
    // kestrel's legacy I/O window, in direct-address mode too.
    if kestrel {
        let (probes, bad) = (t.probes, t.bad);
        attack_legacy_io(&mut t);
        println!(
            "ATTACK memory: legacy I/O window {ISA_IO:#x}+{ISA_IO_SIZE:#x}: {} probes (every load and store width, i8042 commands, both edges), {} bad",
            t.probes - probes,
            t.bad - bad
        );
    }
    // 2. Paged mode: DMW0 = VSEG 0 identity (PLV0, cached) keeps this code
    // running; DMW1 = 0x9000... (PLV0, cached) as Linux has it.
    wr(0x180, 1 | 1 << 4);
    wr(0x181, 0x9000_0000_0000_0000 | 1 | 1 << 4);
    wr(0x1e, 12);
    wr(0x18, 0);
    let crmd = rd(0);
    wr(0, (crmd & !(0x3 | 1 << 3 | 1 << 2)) | 1 << 4);
    const VA: u64 = 0xffff_ff80_0000_0000;
    let mut rng = Rng(0x5151_7272_9393_a4a4);
    load(
        [LD_D, TLBWR]
            .into_iter()
            .chain([0x10u32, 0x11, 0x12, 0x13].into_iter().map(csrwr))
            .chain(core::iter::once(ST_D)),
    );
    let mut r = [0, 0x9000_0000_0020_0000, 0, 0, 0, 0];
    t.probes += 1;
    if run(0, &mut r).is_err() || r[0] != own_word {
        t.bad(format_args!(
            "0x9000_0000_0020_0000 (kestrel's link address) did not read this VM's image"
        ));
    }
    for k in 0..SPAN / CHUNK / 8 {
        let pa = k * CHUNK * 8 + OFF;
        let va = 0x9000_0000_0000_0000 | pa as u64;
        let mut r = [0, va, 0, 0, 0, 0];
        let res = run(0, &mut r);
        check(&mut t, "DMW", pa, va, res, r[0]);
        // A store through the window: its marker again (emulated by
        // kestrel), or ADE outside its RAM.
        if own(pa) && !is_marker(pa) {
            continue;
        }
        let v = if own(pa) {
            marker(pa)
        } else {
            0xbad1_0000_0000_0000 | k as u64
        };
        t.probes += 1;
        match run(6, &mut [v, va, 0, 0, 0, 0]) {
            Ok(()) if own(pa) => {}
            Ok(()) => t.bad(format_args!(
                "DMW store to PA {pa:#x} outside RAM went through"
            )),
            Err(c) => {
                t.exceptions += 1;
                if own(pa) || c.ecode() != 8 || c.badv != va {
                    t.bad(format_args!(
                        "DMW store to PA {pa:#x}: {} (BADV {:#x})",
                        trap::ecode::name(c.ecode()),
                        c.badv
                    ));
                }
            }
        }
    }
    // 3. TLB entries (MTLB index 256, 4 KiB pages, global) for a high VA.
    // Not under LVZ: there this rewrites the CPU's own guest TLB entry at
    // one upper-half VA 512 times, and the LVZ emulator (tools/qemu-lvz)
    // flushes a replaced entry's translations without sign extension; in
    // about one run of five its vCPU then never ran again (the emulator
    // deadlocked; kestrel and the victim went on). Step 4 still writes
    // garbage entries at random upper-half VAs under LVZ.
    let mut stale = 0u64;
    for k in 0..if lvz() { 0 } else { 512usize } {
        let pa = if k < 256 {
            k * (SPAN / 256) + OFF
        } else {
            (rng.next() as usize & 0xffff_ffff_f000) | OFF & 0xfff
        };
        let page = pa as u64 & !0x1fff;
        let elo = |p: u64| p | 1 | 1 << 1 | 1 << 4 | 1 << 6;
        for (i, v) in [256 | 12 << 24, VA, elo(page), elo(page + 0x1000)]
            .into_iter()
            .enumerate()
        {
            let _ = run(2 + i, &mut [v, 0, 0, 0, 0, 0]);
        }
        t.quiet("tlbwr", pa as u64, run(1, &mut [0; 6]));
        let va = VA + (pa as u64 & 0x1fff);
        let mut r = [0, va, 0, 0, 0, 0];
        let res = run(0, &mut r);
        if lvz() && res.is_ok() && !own(pa) && r[0] >> 32 == ATTACK_TAG {
            // The LVZ emulator drops a replaced guest TLB entry from its
            // translation cache at the VA without sign extension (VPPN <<
            // 13), so for this upper-half VA the first page stays cached
            // and later loads still reach it: its own RAM, its own marker
            // (the cache is flushed whenever kestrel switches VMs, so
            // nothing of another VM can stay there). An emulator bug,
            // counted apart; the victim's pattern stays a failure.
            t.probes += 1;
            stale += 1;
            continue;
        }
        check(&mut t, "TLB", pa, va, res, r[0]);
    }
    // 4. Garbage TLB entries (any PS, 63 included, random PPN and bits,
    // with or without G, random ASID) under paged mode, then loads from
    // them. A load's answer: a value that is not the victim's, or a
    // load-class exception (PIL, PNR, PPI, ADE, ALE) or a refill (taken by
    // `hostile_tlbr`). Code and data stay reachable through DMW0, which
    // the architecture checks before the TLB.
    // SAFETY: address only.
    let tlbr = hostile_tlbr as *const () as u64;
    wr(0x88, tlbr);
    load(
        [LD_D, TLBWR, TLBFILL].into_iter().chain(
            [0x10u32, 0x11, 0x12, 0x13, 0x1e, 0x18]
                .into_iter()
                .map(csrwr),
        ),
    );
    let (mut refills, mut values) = (0u64, 0u64);
    let entries = tlb_entries();
    for k in 0..1500u64 {
        let ps = garbage_ps([63u64, 12, 14, 21, 30, 47, 48, 62, 0, 13][(k % 10) as usize]);
        let va = (0xffff_0000_0000_0000 | rng.next()) & !7;
        let elo = |r: u64| (r & 0xe000_ffff_ffff_f05f) | 1;
        let csrs = [
            tlbidx(rng.next() & 0xffff, entries) | ps << 24 | (rng.next() & 1) << 31,
            va,
            elo(rng.next()),
            elo(rng.next()),
            // STLBPS = PS (so tlbfill uses the STLB) for half of each size.
            if (k / 20) % 2 == 0 { ps } else { 12 },
            rng.next() & 0x3ff,
        ];
        for (i, v) in csrs.into_iter().enumerate() {
            let _ = run(3 + i, &mut [v, 0, 0, 0, 0, 0]);
        }
        let op = 1 + ((k / 10) % 2) as usize;
        t.quiet("tlbwr/tlbfill", ps, run(op, &mut [0; 6]));
        let mut r = [0, va, 0, 0, 0, 0];
        t.probes += 1;
        match run(0, &mut r) {
            Ok(()) => {
                values += 1;
                if r[0] >> 32 == VICTIM_TAG {
                    t.bad(format_args!(
                        "garbage TLB (PS {ps}) at {va:#x} read the victim's pattern"
                    ));
                }
            }
            Err(c) if c.estat == REFILL_ESTAT => refills += 1,
            Err(c) => {
                t.exceptions += 1;
                if ![1, 5, 7, 8, 9].contains(&c.ecode()) {
                    t.bad(format_args!(
                        "garbage TLB (PS {ps}) load at {va:#x}: {} (ESTAT {:#x})",
                        trap::ecode::name(c.ecode()),
                        c.estat
                    ));
                }
            }
        }
    }
    println!("ATTACK memory: garbage TLB: {values} loads gave a value, {refills} refills");
    if lvz() {
        println!("ATTACK memory: {stale} loads through a replaced TLB entry read its own first page (LVZ emulator)");
    }
    // Back to direct-address mode, windows and TLB cleared.
    wr(0, crmd);
    wr(0x180, 0);
    wr(0x181, 0);
    wr(0x1e, 12);
    wr(0x18, 0);
    let _ = one(invtlb(0), &mut [0; 6]);
    t
}

/// Interrupt and exception storms: PV and IOCSR IPIs to itself, `break`s,
/// a timer at its shortest period.
fn attack_storm(_kestrel: bool) -> Tally {
    let mut t = Tally::new();
    const N: u64 = 3000;
    cpu::set_irqs(true);
    // PV IPIs to self (coalesced while pending).
    let before = trap::SWIS[0].load(Ordering::Relaxed);
    load(core::iter::once(hvcl(0x100)));
    for _ in 0..N {
        let mut r = [FN_IPI, 1, 0, 0, 0, 0];
        let res = run(0, &mut r);
        if t.quiet("PV IPI storm", 0, res) && r[0] != 0 {
            t.bad(format_args!("PV IPI to self returned {:#x}", r[0]));
        }
    }
    cpu::set_irqs(true);
    let pv = trap::SWIS[0].load(Ordering::Relaxed) - before;
    // IOCSR IPIs to self.
    let before = trap::IPIS[0].load(Ordering::Relaxed);
    load(core::iter::once(iocsrwr(2)));
    for i in 0..N {
        let mut r = [i % 31, IPI_SEND, 0, 0, 0, 0];
        t.quiet("IOCSR IPI storm", i, run(0, &mut r));
    }
    crate::wait_for(10_000, || trap::IPIS[0].load(Ordering::Relaxed) > before);
    let io = trap::IPIS[0].load(Ordering::Relaxed) - before;
    // Exceptions.
    load(core::iter::once(0x002a_0001));
    for i in 0..N {
        let r = run(0, &mut [0; 6]);
        t.raises("break storm", i, trap::ecode::BRK, r);
    }
    // The timer: one-shot at its shortest (4 ticks), re-armed as soon as it
    // fired, then periodic at 500 us for 300 ms. (A periodic timer faster
    // than the handler would hold the attacker itself forever, as on
    // hardware.)
    cpu::set_irqs(true);
    let ticks0 = trap::TICKS[0].load(Ordering::Relaxed);
    let mut missed = 0;
    for _ in 0..N {
        let seen = trap::TICKS[0].load(Ordering::Relaxed);
        wr(0x41, 4 | 1);
        if !crate::wait_for(10_000, || trap::TICKS[0].load(Ordering::Relaxed) != seen) {
            if missed < 3 {
                println!(
                    "ATTACK storm: one-shot timer lost: TCFG {:#x} TVAL {:#x} ESTAT {:#x} ECFG {:#x} CRMD {:#x}",
                    rd(0x41),
                    rd(0x42),
                    rd(5),
                    rd(4),
                    rd(0)
                );
            }
            missed += 1;
        }
    }
    wr(0x41, us(500) & !3 | 3);
    let end = cpu::now() + us(300_000);
    while cpu::now() < end {
        cpu::relax();
    }
    wr(0x41, 0);
    wr(0x44, 1);
    let tick_storm = trap::TICKS[0].load(Ordering::Relaxed) - ticks0;
    cpu::set_irqs(false);
    if pv == 0 || pv > N {
        t.bad(format_args!("{N} PV IPIs to self: {pv} SWI0 interrupts"));
    }
    if io == 0 || io > N {
        t.bad(format_args!("{N} IOCSR IPIs to self: {io} IPI interrupts"));
    }
    if missed != 0 || tick_storm < N {
        t.bad(format_args!(
            "{missed} of {N} one-shot timers never interrupted"
        ));
    }
    println!("ATTACK storm: {pv} SWI0, {io} IPI, {tick_storm} timer interrupts taken");
    t
}

/// Loops of counter reads each masked zero-period timer must let run.
const ZERO_TIMER_LOOPS: u64 = 20_000;
/// How long after them TI may take to show (microseconds).
const TI_WAIT_US: u64 = 100_000;

/// The shortest timers with their interrupt masked: periodic with InitVal
/// 0 (TCFG = 0x3, raised to 4 ticks) masked by ECFG, then by CRMD.IE
/// alone, and a one-shot one. Under each the vCPU runs `ZERO_TIMER_LOOPS`
/// counter reads and then finds TI pending (within `TI_WAIT_US`), as on
/// hardware; the interrupt is never taken. On kestrel the physical-interrupt exits meanwhile stay
/// at the rate of its tick (a host deadline re-armed in a loop ends every
/// entry at once; under `-icount` the vCPU then never runs another
/// instruction: issue 22, item 7; `la64-resetstorm` runs it under -icount).
fn attack_timer0(kestrel: bool) -> Tally {
    const ECFG: u32 = 0x4;
    const ESTAT: u32 = 0x5;
    const TCFG: u32 = 0x41;
    const TICLR: u32 = 0x44;
    const TI: u64 = 1 << 11;
    let mut t = Tally::new();
    let irq_exits = || {
        if kestrel {
            trap::hvcl(FN_KESTREL_STATS, kestrel_abi::stat::EXIT_IRQ, 0, 0)
        } else {
            0
        }
    };
    cpu::set_irqs(false);
    let ecfg = rd(ECFG);
    let ticks0 = trap::TICKS[0].load(Ordering::Relaxed);
    let mut loops = 0;
    let mut exits = 0;
    let t0 = cpu::now();
    for (tcfg, lie) in [(3, 0), (3, ecfg | TI), (1, 0)] {
        wr(ECFG, lie);
        let (e0, c0) = (irq_exits(), cpu::now());
        wr(TCFG, tcfg);
        for _ in 0..ZERO_TIMER_LOOPS {
            core::hint::black_box(cpu::now());
            loops += 1;
        }
        t.probes += 1;
        // TI shows as soon as the counter passes the deadline; allow it
        // up to 100 ms of counter time all the same.
        let pending = crate::wait_for(TI_WAIT_US, || rd(ESTAT) & TI != 0);
        if !pending {
            println!(
                "ATTACK timer0: no TI: TCFG {:#x} TVAL {:#x} ESTAT {:#x}",
                rd(TCFG),
                rd(0x42),
                rd(ESTAT)
            );
        }
        wr(TCFG, 0);
        wr(TICLR, 1);
        let (e, took) = (irq_exits().wrapping_sub(e0), ms(cpu::now() - c0));
        exits += e;
        if !pending {
            t.bad(format_args!(
                "TCFG {tcfg:#x}, ECFG {lie:#x}: no TI pending {TI_WAIT_US} us after {ZERO_TIMER_LOOPS} loops"
            ));
        }
        // kestrel's tick is 100 Hz: allow 40 times that, and some.
        if e > 10 + 4 * took {
            t.bad(format_args!(
                "TCFG {tcfg:#x}, ECFG {lie:#x}: {e} interrupt exits in {took} ms"
            ));
        }
    }
    wr(ECFG, ecfg);
    let taken = trap::TICKS[0].load(Ordering::Relaxed) - ticks0;
    if taken != 0 {
        t.bad(format_args!(
            "masked zero-period timers: {taken} timer interrupts taken with CRMD.IE = 0"
        ));
    }
    println!(
        "ATTACK timer0: {loops} loops under masked zero-period timers in {} ms, {exits} interrupt exits",
        ms(cpu::now() - t0)
    );
    t
}

// ---- the reset storm -----------------------------------------------------

/// `mode=resetstorm` (a VM of two vCPUs): vCPU 0 runs the masked
/// zero-period timers ([`attack_timer0`]), then vCPU 1 writes the GED
/// reset register in a loop while vCPU 0 holds FP/LSX registers live and
/// spins with interrupts masked; every restart boots into the same again. A
/// victim VM beside it must keep its timer (`la64-resetstorm`). The storm
/// stops once the counter passes [`RESETSTORM_UNTIL`] seconds, then the VM
/// reports and powers off.
const RESETSTORM_UNTIL_S: u64 = 30;
/// The storm's end in counter seconds (`mode=resetstorm:S`).
static RESETSTORM_UNTIL: AtomicU64 = AtomicU64::new(RESETSTORM_UNTIL_S);

fn reset_storm() -> ! {
    let hz = COUNTER_HZ.load(Ordering::Relaxed);
    let until = RESETSTORM_UNTIL.load(Ordering::Relaxed);
    if cpu::now() / hz.max(1) >= until {
        report("reset-storm", pass!("storm over at counter second {until}"));
        crate::finish()
    }
    // Every boot first runs the masked zero-period timers (a vCPU frozen
    // there never gets to the storm).
    report("attack-timer0", attack_timer0(true).outcome("timer0"));
    // The secondaries turn paging on: the tables first.
    report("paging", crate::checks::paging());
    report("smp", crate::smp::bring_up(2));
    // FP/LSX live in this vCPU's unit from here on.
    let mut fp = FpState::ZERO;
    for (i, r) in fp.regs.iter_mut().enumerate() {
        *r = [ATTACK_TAG << 32 | i as u64, !(i as u64)];
    }
    let lsx = LSX.load(Ordering::Relaxed);
    // SAFETY: loads this vCPU's own FP/LSX registers (EUEN has them on).
    unsafe { asm::guest_fp_load(&fp, lsx) };
    cpu::set_irqs(false);
    crate::smp::post(crate::smp::Cmd::ResetLoop);
    loop {
        cpu::relax();
    }
}

// ---- the victim ----------------------------------------------------------

/// The victim's window in ms (`mode=victim:MS`; whole seconds).
static VICTIM_WINDOW: AtomicU64 = AtomicU64::new(8_000);
const VICTIM_PERIOD_MS: u64 = 10;
/// A counter delta below this is time the victim ran (kestrel's slices are
/// 10 ms: a longer gap is another vCPU's turn, a shorter one host noise).
const RAN_THRESHOLD_US: u64 = 3_000;

/// CSRs the victim owns and does not use in direct-address mode: SAVE0-15,
/// PGDL, PGDH, PWCL, PWCH, TLBRSAVE, TLBRENTRY, TLBELO0/1, TID.
const VICTIM_CSRS: [u32; 25] = [
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f,
    0x19, 0x1a, 0x1c, 0x1d, 0x8b, 0x88, 0x12, 0x13, 0x40,
];

fn victim_csr_value(i: usize) -> u64 {
    let v = 0x7669_6374_0000_0000u64 ^ (i as u64).wrapping_mul(0x0101_0101_0001_1000);
    match VICTIM_CSRS[i] {
        0x19 | 0x1a | 0x88 => v & 0x0000_ffff_ffff_f000,
        0x1c => v & 0x3fff_ffff & !(3 << 30),
        0x1d => v & 0x3_ffff,
        0x12 | 0x13 => v & 0x0000_0fff_ffff_f05f,
        0x40 => v & 0xffff_ffff,
        _ => v,
    }
}

fn victim() -> ! {
    let hz = COUNTER_HZ.load(Ordering::Relaxed);
    let top = RAM_TOP.load(Ordering::Relaxed) as usize;
    let lsx = LSX.load(Ordering::Relaxed);
    // Memory: from 4 MiB (past the image) to the DTB's last 2 MiB.
    let (m0, m1) = (4usize << 20, top.saturating_sub(2 << 20));
    let words = m1.saturating_sub(m0) / 8;
    for i in 0..words {
        let a = m0 + 8 * i;
        // SAFETY: own RAM between the image and the DTB.
        unsafe { (a as *mut u64).write_volatile(victim_word(a)) };
    }
    // CSRs (what reads back after the write is the reference: masks).
    cpu::set_irqs(false);
    load(VICTIM_CSRS.iter().map(|&n| csrwr(n)));
    for (i, _) in VICTIM_CSRS.iter().enumerate() {
        let _ = run(i, &mut [victim_csr_value(i), 0, 0, 0, 0, 0]);
    }
    let mut want = [0u64; 25];
    for (i, &n) in VICTIM_CSRS.iter().enumerate() {
        want[i] = rd(n);
    }
    load(VICTIM_CSRS.iter().map(|&n| csrrd(n)));
    let check_csrs = |want: &[u64; 25]| -> Option<(u32, u64)> {
        for (i, &n) in VICTIM_CSRS.iter().enumerate() {
            let mut r = [0u64; 6];
            let _ = run(i, &mut r);
            if r[0] != want[i] {
                return Some((n, r[0]));
            }
        }
        None
    };
    // FP/LSX registers.
    let mut fp = FpState::ZERO;
    for (i, r) in fp.regs.iter_mut().enumerate() {
        *r = [
            0x6670_0000_0000_0000 | (i as u64 * 0x1_0001),
            !(i as u64) << 8,
        ];
    }
    fp.fcsr0 = 0x0300; // RM = 3 (round down)
    fp.fcc = 0xa5;
    // SAFETY: loads the guest's own FP/LSX registers (EUEN has FP/LSX on).
    unsafe { asm::guest_fp_load(&fp, lsx) };
    // Timer: periodic, 10 ms.
    let period = hz / 1000 * VICTIM_PERIOD_MS;
    // SAFETY: TCFG periodic at `period` (multiple of 4); TI is enabled in
    // ECFG and handled by the trap handler (TICLR).
    unsafe { csr_write!(csr::TCFG, (period & !3) | 3) };
    let ipis0 = trap::IPIS[0].load(Ordering::Relaxed);
    let swis0 = trap::SWIS[0].load(Ordering::Relaxed);
    cpu::set_irqs(true);

    let window_ms = VICTIM_WINDOW.load(Ordering::Relaxed).max(1000) / 1000 * 1000;
    let window = hz / 1000 * window_ms;
    let threshold = us(RAN_THRESHOLD_US);
    // The window starts on a whole second of the counter, so the test can
    // add up the attacker's run time over the same seconds.
    let first_second = cpu::now() / hz + 1;
    while cpu::now() < first_second * hz {
        cpu::relax();
    }
    let start = cpu::now();
    let end = start + window;
    let (mut ran, mut last) = (0u64, start);
    let mut ticks_seen = trap::TICKS[0].load(Ordering::Relaxed);
    let ticks0 = ticks_seen;
    let (mut last_tick, mut max_gap, mut gap_end) = (start, 0u64, start);
    let mut mem_bad: Option<(usize, u64)> = None;
    let mut reg_bad: Option<Msg> = None;
    let (mut chunk, mut passes, mut iters) = (0usize, 0u64, 0u64);
    let chunks = words / 512;
    let mut csr_checks = 0u64;
    loop {
        let now = cpu::now();
        let d = now - last;
        if d < threshold {
            ran += d;
        }
        last = now;
        let tk = trap::TICKS[0].load(Ordering::Relaxed);
        if tk != ticks_seen {
            ticks_seen = tk;
            if now - last_tick > max_gap {
                max_gap = now - last_tick;
                gap_end = now;
            }
            last_tick = now;
            // CSRs at every tick (each read is an exit).
            if reg_bad.is_none() {
                if let Some((n, v)) = check_csrs(&want) {
                    reg_bad = Some(Msg::new(format_args!("CSR {n:#x} reads {v:#x}")));
                }
                csr_checks += 1;
            }
        }
        if now >= end {
            break;
        }
        iters += 1;
        // One 4 KiB chunk of memory.
        if chunks > 0 && mem_bad.is_none() {
            let base = m0 + chunk * 4096;
            for k in 0..512 {
                let a = base + 8 * k;
                // SAFETY: own RAM written above.
                let v = unsafe { (a as *const u64).read_volatile() };
                if v != victim_word(a) {
                    mem_bad = Some((a, v));
                    break;
                }
            }
            chunk += 1;
            if chunk == chunks {
                chunk = 0;
                passes += 1;
            }
        }
        // FP registers every iteration, GPRs every 16th (a 100 us spin).
        if reg_bad.is_none() {
            let mut out = FpState::ZERO;
            // SAFETY: stores the FP/LSX registers into `out`.
            unsafe { asm::guest_fp_store(&mut out, lsx) };
            let same = if lsx != 0 {
                out == fp
            } else {
                out.fcsr0 == fp.fcsr0
                    && out.fcc == fp.fcc
                    && out
                        .regs
                        .iter()
                        .zip(fp.regs.iter())
                        .all(|(a, b)| a[0] == b[0])
            };
            if !same {
                reg_bad = Some(Msg::new(format_args!("FP/LSX registers changed")));
            }
            if iters % 16 == 0 {
                let seed = iters.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                // SAFETY: the routine restores every register it uses but
                // a0, t0, t1 (caller-saved).
                let n = unsafe { victim_regs(seed, us(100)) };
                if n != 0 {
                    reg_bad = Some(Msg::new(format_args!("{n} GPRs changed")));
                }
            }
        }
    }
    // SAFETY: stops the timer.
    unsafe { csr_write!(csr::TCFG, 0) };
    cpu::set_irqs(false);
    // Before it prints anything: frames to the attacker's hostile rings,
    // each notify timed (with a network port only).
    let sends = cold::victim_sends();
    let ticks = ticks_seen - ticks0;
    if end.saturating_sub(last_tick) > max_gap {
        max_gap = end - last_tick;
        gap_end = end;
    }
    let share_permille = ran * 1000 / window;
    // A last full pass over memory.
    if mem_bad.is_none() {
        for i in 0..words {
            let a = m0 + 8 * i;
            // SAFETY: own RAM written above.
            let v = unsafe { (a as *const u64).read_volatile() };
            if v != victim_word(a) {
                mem_bad = Some((a, v));
                break;
            }
        }
    }
    println!(
        "VICTIM: window {} ms, ran {} ms (share {}.{:03}), ticks {} (max gap {} ms), memory {}, registers {}",
        ms(window),
        ms(ran),
        share_permille / 1000,
        share_permille % 1000,
        ticks,
        ms(max_gap),
        if mem_bad.is_none() { "ok" } else { "BAD" },
        if reg_bad.is_none() { "ok" } else { "BAD" }
    );
    println!(
        "VICTIM: counter seconds {first_second}-{}",
        first_second + window_ms / 1000
    );
    println!(
        "VICTIM: the largest tick gap ended at counter {} ms",
        ms(gap_end)
    );
    println!(
        "VICTIM: {} loop iterations, {} memory passes over {} KiB, {} CSR checks",
        iters,
        passes,
        words * 8 / 1024,
        csr_checks
    );
    report(
        "victim-memory",
        match mem_bad {
            None => pass!("{} KiB of address-derived pattern intact", words * 8 / 1024),
            Some((a, v)) => fail!("word at {a:#x} reads {v:#x}, wrote {:#x}", victim_word(a)),
        },
    );
    report(
        "victim-registers",
        match reg_bad {
            None => pass!("25 CSRs, 32 FP/LSX registers + FCSR0 + FCC, 26 GPRs intact"),
            Some(m) => fail!("{}", m.as_str()),
        },
    );
    let (ipis, swis) = (
        trap::IPIS[0].load(Ordering::Relaxed) - ipis0,
        trap::SWIS[0].load(Ordering::Relaxed) - swis0,
    );
    report(
        "victim-no-interference",
        if ipis == 0 && swis == 0 {
            pass!("no IPI and no SWI0 arrived from outside")
        } else {
            fail!("{ipis} IPIs and {swis} SWI0 interrupts arrived")
        },
    );
    report(
        "victim-ticks",
        if ticks > 0 {
            pass!("{ticks} timer interrupts")
        } else {
            fail!("no timer interrupt in {} ms", ms(window))
        },
    );
    cold::victim_report(sends);
    crate::finish()
}
