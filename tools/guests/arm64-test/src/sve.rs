//! The SVE check (`sve-switches`).
//!
//! With SVE (ID_AA64PFR0_EL1.SVE != 0): every vCPU asks for the longest
//! vector length (ZCR_EL1.LEN = 15), which `sve_vl=BITS` on the command
//! line says the hypervisor caps to. At its first SVE use (only FP ran
//! before) every bit beyond the V registers must read zero: Z above 128
//! bits, P0-P15, FFR (nothing of another VM). Then, round after round, it loads a
//! pattern of its own into Z0-Z31, P0-P15 and FFR (`sve_round`), yields
//! (WFI on a 200 µs timer, or a spin; IRQs stay masked so no handler of
//! this guest touches the registers), stores them back and compares. Every
//! fourth round it also shrinks its length to 128 bits across the yield
//! and grows it back: the bits beyond 128 then come back UNKNOWN in the
//! architecture's words, which may be its own old bits or zeros but never
//! anyone else's.
//!
//! Without SVE: the VM is configured without it, so `rdvl` must be UNDEF
//! (EC 0x0) even with CPACR_EL1.ZEN open, and ID_AA64ZFR0_EL1 reads 0.

use crate::cpu::{self, sysreg_read, MAX_CPUS};
use core::cell::UnsafeCell;

/// Bytes of Z0-Z31 at the architecture's longest length (2048 bits).
const Z_MAX: usize = 32 * 256;
/// Bytes of P0-P15 and FFR at that length.
const P_MAX: usize = 17 * 32;

#[repr(C, align(16))]
struct Bufs {
    z_in: [u8; Z_MAX],
    p_in: [u8; P_MAX],
    z_out: [u8; Z_MAX],
    p_out: [u8; P_MAX],
}

/// One set of buffers per vCPU, each touched only by its own vCPU.
struct PerCpu(UnsafeCell<[Bufs; MAX_CPUS]>);

// SAFETY: vCPU `i` only ever uses element `i` (`soak` runs on the vCPU
// whose index it takes), so no two CPUs share an element.
unsafe impl Sync for PerCpu {}

static BUFS: PerCpu = PerCpu(UnsafeCell::new(
    [const {
        Bufs {
            z_in: [0; Z_MAX],
            p_in: [0; P_MAX],
            z_out: [0; Z_MAX],
            p_out: [0; P_MAX],
        }
    }; MAX_CPUS],
));

core::arch::global_asm!(
    r#"
    .text
    .arch_extension sve
    .balign 4
// u64 sve_round(x0 = Z in, x1 = P in (P0-P15, FFR), x2 = Z out, x3 = P out,
//               x4 = spin loops (0: WFI), x5 = shrink to 128 bits across it)
    .global sve_round
sve_round:
    msr     daifset, #2
    ldr     p0, [x1, #16, mul vl]
    wrffr   p0.b
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    ldr     p\n, [x1, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ldr     z\n, [x0, #\n, mul vl]
    .endr
    cbz     x5, 1f
    msr     s3_0_c1_c2_0, xzr
    isb
1:  cbnz    x4, 8f
    dsb     sy
    wfi
    b       9f
8:  subs    x4, x4, #1
    b.ne    8b
9:  cbz     x5, 2f
    mov     x6, #15
    msr     s3_0_c1_c2_0, x6
    isb
2:  .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str     z\n, [x2, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    str     p\n, [x3, #\n, mul vl]
    .endr
    rdffr   p0.b
    str     p0, [x3, #16, mul vl]
    ret

// void sve_flush(void): every bit beyond the V registers zero (writing each
// V register to itself zeroes the rest of its Z register), P0-P15 and FFR
// cleared: the state an FP-only vCPU has.
    .global sve_flush
sve_flush:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    mov     v\n\().16b, v\n\().16b
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    pfalse  p\n\().b
    .endr
    wrffr   p0.b
    ret

// void sve_dump(x0 = Z out, x1 = P out): stores what the registers hold.
    .global sve_dump
sve_dump:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    str     z\n, [x0, #\n, mul vl]
    .endr
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    str     p\n, [x1, #\n, mul vl]
    .endr
    rdffr   p0.b
    str     p0, [x1, #16, mul vl]
    ret
"#
);

/// Whether the CPU (as the hypervisor shows it) has SVE.
pub fn present() -> bool {
    (sysreg_read!("id_aa64pfr0_el1") >> 32) & 0xf != 0
}

/// ID_AA64ZFR0_EL1.
pub fn zfr0() -> u64 {
    sysreg_read!("s3_0_c0_c4_4")
}

/// Opens CPACR_EL1.ZEN on this CPU (SVE at EL1 and EL0 without traps).
pub fn open_zen() {
    let v = sysreg_read!("cpacr_el1") | 3 << 16;
    crate::cpu::sysreg_write!("cpacr_el1", v);
}

/// Opens ZEN and asks for the longest vector length (ZCR_EL1.LEN = 15).
pub fn enable() {
    open_zen();
    crate::cpu::sysreg_write!("s3_0_c1_c2_0", 15);
}

/// The vector length in bytes (`rdvl`).
pub fn vl_bytes() -> u64 {
    let v: u64;
    // SAFETY: reads the vector length into a general register; no vector
    // register or memory is touched. Traps (UNDEF) if SVE is hidden: callers
    // probe it with `probe_any` then.
    unsafe {
        core::arch::asm!(".arch_extension sve", "rdvl {}, #1", out(reg) v, options(nomem, nostack))
    };
    v
}

/// xorshift64*.
fn next(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Bits of the result of [`soak`]'s detail: Zn (0-31), Pn (32-47), FFR (48),
/// and 49 when the bad round was one that shrank the length.
pub const BAD_FFR: u64 = 1 << 48;
pub const BAD_AFTER_SHRINK: u64 = 1 << 49;
/// Set with round 1 when the registers were not clean at the first SVE use.
pub const BAD_FRESH: u64 = 1 << 50;

/// `rounds` rounds on this vCPU: (0, 0) or (failing round + 1, bitmap of
/// the bad registers), and the vector length in bytes in the top 16 bits
/// of the first value when all went well (for the report).
pub fn soak(rounds: u64) -> (u64, u64) {
    const SPIN_EVERY: u64 = 8;
    const SHRINK_EVERY: u64 = 4;
    const SPIN_LOOPS: u64 = 20_000;
    enable();
    let vl = vl_bytes() as usize;
    if vl == 0 || vl > 256 || !vl.is_multiple_of(16) {
        return (1, u64::MAX);
    }
    let me = cpu::index();
    // SAFETY: element `me` is this vCPU's alone (see `PerCpu`).
    let b = unsafe { &mut (*BUFS.0.get())[me] };
    let (zn, pl) = (32 * vl, vl / 8);
    // First SVE use of this vCPU: only FP/SIMD ran before, so everything
    // beyond the V registers is as at reset (zero: QEMU resets it so, and
    // kestrel's vCPUs start so) and nothing of another VM shows.
    dump(b);
    let fresh = (0..32).fold(0u64, |bad, n| {
        let high = &b.z_out[n * vl + 16..(n + 1) * vl];
        bad | u64::from(high.iter().any(|&x| x != 0)) << n
    }) | (0..17).fold(0u64, |bad, n| {
        let p = &b.p_out[n * pl..(n + 1) * pl];
        bad | u64::from(p.iter().any(|&x| x != 0)) << (32 + n)
    });
    if fresh != 0 {
        return (1, fresh | BAD_FRESH);
    }
    let mut seed =
        cpu::now().wrapping_mul(0x2545_F491_4F6C_DD1D) ^ cpu::mpidr().rotate_left(40) | 1;
    for i in 0..rounds {
        for w in b.z_in[..zn].chunks_exact_mut(8) {
            w.copy_from_slice(&next(&mut seed).to_le_bytes());
        }
        for w in b.p_in[..16 * pl].iter_mut() {
            *w = next(&mut seed) as u8;
        }
        // FFR: a monotonic predicate (the first k byte lanes true).
        let k = (next(&mut seed) % (vl as u64 + 1)) as usize;
        for (j, byte) in b.p_in[16 * pl..17 * pl].iter_mut().enumerate() {
            let lanes = k.saturating_sub(8 * j).min(8);
            *byte = ((1u16 << lanes) - 1) as u8;
        }
        let spin = if i % SPIN_EVERY == SPIN_EVERY - 1 {
            SPIN_LOOPS
        } else {
            cpu::irq_disable();
            cpu::timer_arm(cpu::us_to_ticks(200));
            0
        };
        let shrink = i % SHRINK_EVERY == SHRINK_EVERY - 2;
        round(b, spin, shrink);
        cpu::irq_enable();
        let bad = compare(b, vl, shrink);
        if bad != 0 {
            cpu::timer_stop();
            return (i + 1, bad | if shrink { BAD_AFTER_SHRINK } else { 0 });
        }
    }
    cpu::timer_stop();
    (0, vl as u64)
}

/// Clears everything beyond the V registers on this vCPU (`sve_flush`), so
/// that a hypervisor can go back to FP-sized switches for it.
pub fn flush() {
    if !present() {
        return;
    }
    // SAFETY: `sve_flush` only rewrites the vector registers with their own
    // low 128 bits (V0-V31 keep their values; declared clobbered anyway)
    // and clears P0-P15 and FFR, which compiled code does not use.
    unsafe {
        core::arch::asm!("bl sve_flush",
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            clobber_abi("C"));
    }
}

fn dump(b: &mut Bufs) {
    // SAFETY: `sve_dump` writes `z_out`/`p_out` at the current vector
    // length (at most 256 bytes a register: the buffers' size), reads the
    // vector registers without changing them and clobbers nothing else.
    unsafe {
        core::arch::asm!("bl sve_dump",
            in("x0") b.z_out.as_mut_ptr(), in("x1") b.p_out.as_mut_ptr(),
            clobber_abi("C"));
    }
}

fn round(b: &mut Bufs, spin: u64, shrink: bool) {
    // SAFETY: `sve_round` reads `z_in`/`p_in` and writes `z_out`/`p_out`
    // at the current vector length (at most 256 bytes: the buffers' size),
    // clobbers x4-x6 and every vector register (declared: V0-V31 are the
    // low bits of Z0-Z31; P and FFR are not used by compiled code), masks
    // IRQs (the caller unmasks them after).
    unsafe {
        core::arch::asm!("bl sve_round",
            in("x0") b.z_in.as_ptr(), in("x1") b.p_in.as_ptr(),
            in("x2") b.z_out.as_mut_ptr(), in("x3") b.p_out.as_mut_ptr(),
            inout("x4") spin => _, inout("x5") u64::from(shrink) => _,
            out("x6") _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            clobber_abi("C"));
    }
}

/// Which registers came back different. After a shrink, each chunk beyond
/// the first 128 bits (16 bytes of Z, 2 of P) may also read zero.
fn compare(b: &Bufs, vl: usize, shrink: bool) -> u64 {
    let pl = vl / 8;
    let mut bad = 0u64;
    let ok = |got: &[u8], want: &[u8], chunk: usize| -> bool {
        got.chunks(chunk)
            .zip(want.chunks(chunk))
            .enumerate()
            .all(|(c, (g, w))| g == w || (shrink && c > 0 && g.iter().all(|&x| x == 0)))
    };
    for n in 0..32 {
        let r = n * vl..(n + 1) * vl;
        if !ok(&b.z_out[r.clone()], &b.z_in[r], 16) {
            bad |= 1 << n;
        }
    }
    for n in 0..17 {
        let r = n * pl..(n + 1) * pl;
        if !ok(&b.p_out[r.clone()], &b.p_in[r], 2) {
            bad |= 1 << (32 + n);
        }
    }
    bad
}
