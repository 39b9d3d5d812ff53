//! Entering a guest and getting back: the world switch (both modes; LVZ
//! enters guest mode through [`enter_raw`], `super::super::lvz::switch`).
//!
//! [`enter`] saves kestrel's callee-saved registers on its stack, records
//! the stack pointer and the frame in CSR SAVE2 (0x32), loads the guest's
//! ERA (its PC), PRMD (PPLV = 3, PIE = 1: the guest runs at PLV3 with
//! physical interrupts on) and all 31 GPRs, and `ertn`s. Every exception the
//! guest takes enters kestrel's general entry or TLB-refill entry
//! (`exceptions.rs`), which see PPLV != 0, store the guest GPRs and the
//! exception CSRs into the frame and return from [`enter`] as if it were a
//! normal call. A TLB-refill exit also leaves the refill state (TLBRERA.IsTLBR
//! = 0) so the next `ertn` uses ERA/PRMD.

use core::arch::global_asm;

use crate::guest::loongarch::csr::Prmd;

/// The guest's registers and the exit information, shared with the assembly.
#[repr(C)]
#[derive(Clone, Debug, Default)]
pub struct GuestFrame {
    /// $r0..$r31 ($r0 ignored).
    pub regs: [u64; 32],
    /// Guest PC (ERA on entry; on a TLB-refill exit TLBRERA with IsTLBR).
    pub pc: u64,
    /// Real PRMD for the entry.
    pub prmd: u64,
    /// Exit: ESTAT, BADV (TLBRBADV after a refill), BADI.
    pub estat: u64,
    pub badv: u64,
    pub badi: u64,
    /// Exit: 0 = general exception/interrupt, 1 = TLB refill.
    pub kind: u64,
    /// kestrel's stack pointer while the guest runs.
    pub host_sp: u64,
    _pad: u64,
}

pub const OFF_PC: usize = 256;
pub const OFF_PRMD: usize = 264;
pub const OFF_ESTAT: usize = 272;
pub const OFF_BADV: usize = 280;
pub const OFF_BADI: usize = 288;
pub const OFF_KIND: usize = 296;
pub const OFF_HOST_SP: usize = 304;
const _: () = assert!(core::mem::size_of::<GuestFrame>() == 320);
const _: () = assert!(core::mem::offset_of!(GuestFrame, host_sp) == OFF_HOST_SP);
const _: () = assert!(core::mem::offset_of!(GuestFrame, kind) == OFF_KIND);

/// Real PRMD of a running guest: PPLV 3, PIE.
pub const GUEST_PRMD: u64 = Prmd::PPLV.union(Prmd::PIE).bits();

impl GuestFrame {
    /// Reads GPR `r` ($r0 reads 0).
    pub fn reg(&self, r: u8) -> u64 {
        if r == 0 {
            0
        } else {
            self.regs[(r & 31) as usize]
        }
    }

    /// Writes GPR `r` (writes to $r0 are dropped).
    pub fn set_reg(&mut self, r: u8, v: u64) {
        if r != 0 {
            self.regs[(r & 31) as usize] = v;
        }
    }
}

// SAFETY (for the whole block): `kestrel_la_vm_enter` is called only by
// `enter` below with a valid, exclusively borrowed frame and interrupts
// masked; `kestrel_la_guest_exit` is only reached from the exception entries
// when the interrupted context was a guest (PPLV != 0), i.e. after
// `kestrel_la_vm_enter` stored the frame in SAVE2 and kestrel's SP in it.
global_asm!(
    r#"
    .section .text.kestrel_vm, "ax"
    .global kestrel_la_vm_enter
    .p2align 4
kestrel_la_vm_enter:
    addi.d  $sp, $sp, -96
    st.d    $ra, $sp, 0
    st.d    $tp, $sp, 8
    st.d    $fp, $sp, 16
    .irp n, 23,24,25,26,27,28,29,30,31
    st.d    $r\n, $sp, (\n - 20) * 8
    .endr
    st.d    $sp, $a0, {host_sp}
    move    $t0, $a0
    csrwr   $t0, 0x32
    ld.d    $t0, $a0, {pc}
    csrwr   $t0, 0x6
    ld.d    $t0, $a0, {prmd}
    csrwr   $t0, 0x1
    .irp n, 1,2,3,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ld.d    $r\n, $a0, \n * 8
    .endr
    ld.d    $a0, $a0, 32
    ertn

    // From the general entry: t0 (r12) is in SAVE0, PLV0, IE = 0.
    .global kestrel_la_guest_exit
kestrel_la_guest_exit:
    csrrd   $t0, 0x32
    .irp n, 1,2,3,4,5,6,7,8,9,10,11,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    st.d    $r\n, $t0, \n * 8
    .endr
    csrrd   $t1, 0x30
    st.d    $t1, $t0, 96
    csrrd   $t1, 0x6
    st.d    $t1, $t0, {pc}
    csrrd   $t1, 0x5
    st.d    $t1, $t0, {estat}
    csrrd   $t1, 0x7
    st.d    $t1, $t0, {badv}
    csrrd   $t1, 0x8
    st.d    $t1, $t0, {badi}
    st.d    $zero, $t0, {kind}
    b       kestrel_la_guest_return

    // From the TLB-refill entry, already in paged mode: t0 is in TLBRSAVE.
    .global kestrel_la_guest_exit_tlbr
kestrel_la_guest_exit_tlbr:
    csrrd   $t0, 0x32
    .irp n, 1,2,3,4,5,6,7,8,9,10,11,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    st.d    $r\n, $t0, \n * 8
    .endr
    csrrd   $t1, 0x8b
    st.d    $t1, $t0, 96
    csrrd   $t1, 0x8a
    st.d    $t1, $t0, {pc}
    st.d    $zero, $t0, {estat}
    csrrd   $t1, 0x89
    st.d    $t1, $t0, {badv}
    st.d    $zero, $t0, {badi}
    li.d    $t1, 1
    st.d    $t1, $t0, {kind}
    csrwr   $zero, 0x8a
    b       kestrel_la_guest_return

kestrel_la_guest_return:
    ld.d    $sp, $t0, {host_sp}
    ld.d    $ra, $sp, 0
    ld.d    $tp, $sp, 8
    ld.d    $fp, $sp, 16
    .irp n, 23,24,25,26,27,28,29,30,31
    ld.d    $r\n, $sp, (\n - 20) * 8
    .endr
    addi.d  $sp, $sp, 96
    jr      $ra
    "#,
    pc = const OFF_PC,
    prmd = const OFF_PRMD,
    estat = const OFF_ESTAT,
    badv = const OFF_BADV,
    badi = const OFF_BADI,
    kind = const OFF_KIND,
    host_sp = const OFF_HOST_SP,
);

unsafe extern "C" {
    fn kestrel_la_vm_enter(frame: *mut GuestFrame);
}

/// Runs the guest described by `frame` until its next exception; the exit
/// information is in `frame` afterwards.
///
/// # Safety
/// Interrupts must be masked (CRMD.IE = 0); the real TLB may only hold
/// entries this VM may use under the current ASID; EUEN must not expose
/// another vCPU's FP registers.
pub unsafe fn enter(frame: &mut GuestFrame) {
    frame.prmd = GUEST_PRMD;
    // SAFETY: forwarded to the caller; the frame outlives the call.
    unsafe { kestrel_la_vm_enter(frame) }
}

/// Runs the guest of `frame` with the PRMD the frame already holds (the
/// LVZ backend enters guest mode through this world switch too).
///
/// # Safety
/// As for [`enter`], and `frame.prmd` must be a PRMD that returns to the
/// guest (the caller sets up whatever else that needs).
pub unsafe fn enter_raw(frame: &mut GuestFrame) {
    // SAFETY: forwarded to the caller; the frame outlives the call.
    unsafe { kestrel_la_vm_enter(frame) }
}
