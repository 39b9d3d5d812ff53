//! A vCPU's software CSR file: every CSR a LoongArch kernel touches, with
//! the architecture's per-register write masks and read-only fields, the
//! virtual constant timer, and the exception/interrupt delivery and `ertn`
//! state transitions (LoongArch Reference Manual vol. 1, ch. 6-7).
//!
//! Guest `csrrd`/`csrwr`/`csrxchg` go through [`CsrFile::read`] /
//! [`CsrFile::write`]. An unimplemented CSR number reads 0 and ignores
//! writes (as QEMU does for undefined CSRs), so no CSR number a guest
//! passes can hurt kestrel.

use bitflags::bitflags;

/// CSR numbers.
pub mod num {
    pub const CRMD: u16 = 0x0;
    pub const PRMD: u16 = 0x1;
    pub const EUEN: u16 = 0x2;
    pub const MISC: u16 = 0x3;
    pub const ECFG: u16 = 0x4;
    pub const ESTAT: u16 = 0x5;
    pub const ERA: u16 = 0x6;
    pub const BADV: u16 = 0x7;
    pub const BADI: u16 = 0x8;
    pub const EENTRY: u16 = 0xc;
    pub const TLBIDX: u16 = 0x10;
    pub const TLBEHI: u16 = 0x11;
    pub const TLBELO0: u16 = 0x12;
    pub const TLBELO1: u16 = 0x13;
    pub const ASID: u16 = 0x18;
    pub const PGDL: u16 = 0x19;
    pub const PGDH: u16 = 0x1a;
    pub const PGD: u16 = 0x1b;
    pub const PWCL: u16 = 0x1c;
    pub const PWCH: u16 = 0x1d;
    pub const STLBPS: u16 = 0x1e;
    pub const RVACFG: u16 = 0x1f;
    pub const CPUID: u16 = 0x20;
    pub const PRCFG1: u16 = 0x21;
    pub const PRCFG2: u16 = 0x22;
    pub const PRCFG3: u16 = 0x23;
    pub const SAVE0: u16 = 0x30;
    pub const TID: u16 = 0x40;
    pub const TCFG: u16 = 0x41;
    pub const TVAL: u16 = 0x42;
    pub const CNTC: u16 = 0x43;
    pub const TICLR: u16 = 0x44;
    pub const LLBCTL: u16 = 0x60;
    pub const IMPCTL1: u16 = 0x80;
    pub const IMPCTL2: u16 = 0x81;
    pub const TLBRENTRY: u16 = 0x88;
    pub const TLBRBADV: u16 = 0x89;
    pub const TLBRERA: u16 = 0x8a;
    pub const TLBRSAVE: u16 = 0x8b;
    pub const TLBRELO0: u16 = 0x8c;
    pub const TLBRELO1: u16 = 0x8d;
    pub const TLBREHI: u16 = 0x8e;
    pub const TLBRPRMD: u16 = 0x8f;
    pub const MERRCTL: u16 = 0x90;
    pub const MERRSAVE: u16 = 0x95;
    pub const CTAG: u16 = 0x98;
    pub const DMW0: u16 = 0x180;
    pub const PMCFG0: u16 = 0x200;
    pub const DBG: u16 = 0x500;
    pub const DERA: u16 = 0x501;
    pub const DSAVE: u16 = 0x502;
}

/// Exception codes (ESTAT.Ecode).
pub mod ecode {
    pub const INT: u8 = 0;
    pub const PIL: u8 = 1;
    pub const PIS: u8 = 2;
    pub const PIF: u8 = 3;
    pub const PME: u8 = 4;
    pub const PNR: u8 = 5;
    pub const PNX: u8 = 6;
    pub const PPI: u8 = 7;
    pub const ADE: u8 = 8;
    pub const ALE: u8 = 9;
    pub const BCE: u8 = 10;
    pub const SYS: u8 = 11;
    pub const BRK: u8 = 12;
    pub const INE: u8 = 13;
    pub const IPE: u8 = 14;
    pub const FPD: u8 = 15;
    pub const SXD: u8 = 16;
    pub const ASXD: u8 = 17;
    pub const FPE: u8 = 18;
    /// LVZ, to the root only: a guest privileged resource to emulate,
    /// a hypercall (`hvcl`), a guest CSR change trap.
    pub const GSPR: u8 = 22;
    pub const HVC: u8 = 23;
    pub const GCM: u8 = 24;
    /// EsubCode of ADE for an instruction fetch / a memory access.
    pub const ADEF: u16 = 0;
    pub const ADEM: u16 = 1;
}

bitflags! {
    /// CRMD: the current mode.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Crmd: u64 {
        /// The privilege level (a 2-bit field).
        const PLV = 3;
        /// Interrupts enabled.
        const IE = 1 << 2;
        /// Direct address translation.
        const DA = 1 << 3;
        /// Paged translation.
        const PG = 1 << 4;
        /// Memory access types of fetches and loads/stores in DA mode
        /// (2-bit fields).
        const DATF = 3 << 5;
        const DATM = 3 << 7;
        /// Watchpoints enabled.
        const WE = 1 << 9;
    }
}

bitflags! {
    /// PRMD: the mode an exception was taken from (`ertn` returns to it).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Prmd: u64 {
        /// Previous privilege level (a 2-bit field).
        const PPLV = 3;
        /// Previous interrupt enable.
        const PIE = 1 << 2;
        /// Previous watchpoint enable.
        const PWE = 1 << 3;
    }
}

bitflags! {
    /// EUEN: the FP/SIMD units enabled for the guest.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Euen: u64 {
        /// Basic floating point.
        const FPE = 1 << 0;
        /// 128-bit SIMD (LSX).
        const SXE = 1 << 1;
        /// 256-bit SIMD (LASX).
        const ASXE = 1 << 2;
    }
}

bitflags! {
    /// Interrupt lines as bits: ESTAT.IS, ECFG.LIE (bit n = line n).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Irqs: u64 {
        /// The two software interrupts (the guest sets them in ESTAT).
        const SWI0 = 1 << 0;
        const SWI1 = 1 << 1;
        /// Hardware interrupt lines 0-7.
        const HWI = 0xff << 2;
        /// Performance counter overflow.
        const PMI = 1 << 10;
        /// The timer.
        const TI = 1 << 11;
        /// Inter-processor interrupt.
        const IPI = 1 << 12;
    }
}

impl Irqs {
    /// The bit of interrupt line `line` (none past the last line).
    pub const fn line(line: u32) -> Self {
        if line > 12 {
            return Self::empty();
        }
        Self::from_bits_retain(1 << line)
    }

    /// The highest line among these (the one the CPU takes first).
    pub fn highest(self) -> Option<u32> {
        let p = self.bits();
        (p != 0).then(|| 63 - p.leading_zeros())
    }
}

/// ECFG.VS: the vector spacing field.
const ECFG_VS: u64 = 7 << 16;

/// Interrupt lines (ESTAT.IS / ECFG.LIE bit numbers).
pub const IRQ_SWI0: u32 = 0;
pub const IRQ_TI: u32 = 11;
pub const IRQ_IPI: u32 = 12;
/// Valid bits of a TLBELO / TLBRELO value (V, D, PLV, MAT, G, PPN[47:12], NR, NX, RPLV).
pub const ELO_MASK: u64 = 0xe000_ffff_ffff_f07f;
/// VALEN of the guest (and of la464).
pub const VALEN: u32 = 48;
/// Guest-visible TLB geometry: an STLB of `STLB_WAYS` x `STLB_SETS` entries
/// followed by an MTLB of `MTLB_ENTRIES` (PRCFG3 says so).
pub const STLB_WAYS: usize = 8;
pub const STLB_SETS: usize = 32;
pub const MTLB_ENTRIES: usize = 64;
pub const TLB_ENTRIES: usize = STLB_WAYS * STLB_SETS + MTLB_ENTRIES;
/// Guest ASID width (ASID.ASIDBITS).
pub const ASID_BITS: u32 = 10;
/// PRCFG2: the page sizes the TLB supports, one bit per log2 size
/// (4 KiB .. 512 MiB pages, as QEMU's la464).
pub const PAGE_SIZES: u64 = 0x3fff_f000;

/// Whether the TLB supports pages of 2^`ps` bytes (a PS field value).
pub const fn page_size_supported(ps: u64) -> bool {
    ps < 64 && (PAGE_SIZES >> ps) & 1 != 0
}

const TCFG_EN: u64 = 1;
const TCFG_PERIODIC: u64 = 2;
const TCFG_MASK: u64 = (1 << 48) - 1;
const TIMER_INIT_MASK: u64 = TCFG_MASK & !3;

/// Sign-extends a VALEN-bit virtual address field.
const fn sext_va(v: u64) -> u64 {
    (((v << (64 - VALEN)) as i64) >> (64 - VALEN)) as u64
}

/// The plainly stored CSRs: number and write mask.
const PLAIN: &[(u16, u64)] = &[
    (num::PRMD, Prmd::all().bits()),
    (num::EUEN, Euen::all().bits()),
    (num::MISC, 0xffff_ffff),
    (num::ECFG, ECFG_VS | Irqs::all().bits()),
    (num::ERA, u64::MAX),
    (num::BADV, u64::MAX),
    (num::EENTRY, !0xfff),
    (num::TLBELO0, ELO_MASK),
    (num::TLBELO1, ELO_MASK),
    (num::PGDL, !0xfff),
    (num::PGDH, !0xfff),
    (num::PWCL, 0xffff_ffff),
    (num::PWCH, 0xff_ffff),
    (num::STLBPS, 0x3f),
    (num::RVACFG, 0xf),
    (num::TID, 0xffff_ffff),
    (num::CNTC, u64::MAX),
    (num::IMPCTL1, u64::MAX),
    (num::IMPCTL2, u64::MAX),
    (num::TLBRENTRY, !0xfff),
    (num::TLBRBADV, u64::MAX),
    (num::TLBRERA, !0x2),
    (num::TLBRSAVE, u64::MAX),
    (num::TLBRELO0, ELO_MASK),
    (num::TLBRELO1, ELO_MASK),
    (num::TLBRPRMD, 0x17),
    (num::CTAG, u64::MAX),
    (num::DBG, 0),
    (num::DERA, u64::MAX),
    (num::DSAVE, u64::MAX),
];
const N_PLAIN: usize = PLAIN.len();
const N_SAVE: usize = 16;
const N_MERR: usize = 6;
const N_DMW: usize = 4;
const N_PMU: usize = 8;
/// DMW valid bits: PLV0-3, MAT, VSEG.
pub const DMW_MASK: u64 = 0xf000_0000_0000_003f;

fn plain_slot(csr: u16) -> Option<(usize, u64)> {
    PLAIN
        .iter()
        .position(|&(n, _)| n == csr)
        .map(|i| (i, PLAIN[i].1))
}

/// What a CSR write changed that the arch must act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteEffect {
    /// Translation changed (CRMD.DA/PG/PLV, ASID, DMW, STLBPS): drop shadow TLB entries.
    pub translation: bool,
    /// The timer was reprogrammed.
    pub timer: bool,
    /// Interrupt state changed (CRMD.IE, ECFG, ESTAT.SWI, TICLR): re-check pending.
    pub irq: bool,
    /// EUEN changed.
    pub euen: bool,
}

/// One vCPU's privileged state.
#[derive(Clone, Debug)]
pub struct CsrFile {
    pub crmd: u64,
    pub estat: u64,
    pub badi: u64,
    pub tlbidx: u64,
    pub tlbehi: u64,
    pub asid: u64,
    pub tlbrehi: u64,
    pub llbctl: u64,
    /// TCFG as written.
    pub tcfg: u64,
    plain: [u64; N_PLAIN],
    save: [u64; N_SAVE],
    merr: [u64; N_MERR],
    dmw: [u64; N_DMW],
    pmu: [u64; N_PMU],
    cpuid: u64,
    /// Counter value at which the timer fires next (when enabled).
    deadline: u64,
    /// Whether the timer is counting (a one-shot timer stops after firing).
    counting: bool,
    /// The guest's LLbit, cleared by `ertn` unless LLBCTL.KLO.
    pub llbit_cleared: bool,
    /// The vCPU executed `idle` and no interrupt has woken it yet.
    idling: bool,
}

impl CsrFile {
    /// Reset state of vCPU `cpuid`: DA mode, PLV0, interrupts off.
    pub fn new(cpuid: u64) -> Self {
        let mut c = CsrFile {
            // DA, with DATF = DATM = 1 (coherent cached).
            crmd: Crmd::DA.bits() | 1 << 5 | 1 << 7,
            estat: 0,
            badi: 0,
            tlbidx: 0,
            tlbehi: 0,
            asid: 0,
            tlbrehi: 0,
            llbctl: 0,
            tcfg: 0,
            plain: [0; N_PLAIN],
            save: [0; N_SAVE],
            merr: [0; N_MERR],
            dmw: [0; N_DMW],
            pmu: [0; N_PMU],
            cpuid,
            deadline: 0,
            counting: false,
            llbit_cleared: false,
            idling: false,
        };
        c.set(num::STLBPS, 12);
        c
    }

    /// A plain CSR's value (0 for others).
    pub fn get(&self, csr: u16) -> u64 {
        plain_slot(csr).map_or(0, |(i, _)| self.plain[i])
    }

    /// Sets a plain CSR, masked.
    pub fn set(&mut self, csr: u16, v: u64) {
        if let Some((i, m)) = plain_slot(csr) {
            self.plain[i] = v & m;
        }
    }

    /// CRMD as flags.
    pub fn crmd_flags(&self) -> Crmd {
        Crmd::from_bits_retain(self.crmd)
    }
    pub fn plv(&self) -> u64 {
        self.crmd & Crmd::PLV.bits()
    }
    pub fn da(&self) -> bool {
        self.crmd_flags().contains(Crmd::DA)
    }
    pub fn dmw(&self, i: usize) -> u64 {
        self.dmw[i & 3]
    }
    pub fn cpuid(&self) -> u64 {
        self.cpuid
    }
    /// Whether the vCPU is inside its TLB-refill handler (TLBRERA.IsTLBR).
    pub fn in_tlbr(&self) -> bool {
        self.get(num::TLBRERA) & 1 != 0
    }
    /// The current guest ASID.
    pub fn guest_asid(&self) -> u16 {
        (self.asid & ((1 << ASID_BITS) - 1)) as u16
    }

    /// TVAL at counter value `now`. A periodic timer whose deadline passed
    /// without [`CsrFile::update_timer`] counts on from its period.
    pub fn tval(&self, now: u64) -> u64 {
        if !self.counting {
            return 0;
        }
        if now >= self.deadline && self.tcfg & TCFG_PERIODIC != 0 {
            let period = self.period();
            return (period - (now - self.deadline) % period) & TCFG_MASK;
        }
        self.deadline.saturating_sub(now) & TCFG_MASK
    }

    /// The timer's period (or one-shot delay): TCFG.InitVal, at least 4.
    fn period(&self) -> u64 {
        (self.tcfg & TIMER_INIT_MASK).max(4)
    }

    /// When the timer fires next, if it is counting.
    pub fn timer_deadline(&self) -> Option<u64> {
        self.counting.then_some(self.deadline)
    }

    /// When the timer's firing next changes what the vCPU sees: its
    /// deadline while counting, but none while ESTAT.TI is pending (a
    /// firing only sets TI again, however short the period; the guest
    /// clears TI through TICLR, a trapped write). The host timer is armed
    /// for this, so a masked, pending timer interrupt never re-arms it in
    /// a loop: a periodic timer of 4 ticks would otherwise end every entry
    /// before the guest ran an instruction.
    pub fn timer_wake_deadline(&self) -> Option<u64> {
        if self.estat & Irqs::TI.bits() != 0 {
            return None;
        }
        self.timer_deadline()
    }

    /// Advances the virtual timer to `now`: sets ESTAT.TI when it fired.
    /// Returns whether it fired.
    pub fn update_timer(&mut self, now: u64) -> bool {
        if !self.counting || now < self.deadline {
            return false;
        }
        self.estat |= Irqs::TI.bits();
        let period = self.period();
        if self.tcfg & TCFG_PERIODIC != 0 {
            let late = now - self.deadline;
            self.deadline = self
                .deadline
                .saturating_add(period.saturating_mul(late / period + 1));
        } else {
            self.counting = false;
        }
        true
    }

    /// Sets or clears a hardware interrupt line (HWI/IPI) in ESTAT.IS.
    pub fn set_line(&mut self, line: u32, level: bool) {
        let bit = Irqs::line(line).bits();
        if level {
            self.estat |= bit;
        } else {
            self.estat &= !bit;
        }
    }

    /// `csrrd` (at counter value `now`).
    pub fn read(&self, csr: u16, now: u64) -> u64 {
        match csr {
            num::CRMD => self.crmd,
            num::ESTAT => self.estat,
            num::BADI => self.badi,
            num::TLBIDX => self.tlbidx,
            num::TLBEHI => self.tlbehi,
            num::ASID => self.asid | u64::from(ASID_BITS) << 16,
            num::PGD => {
                let badv = if self.in_tlbr() {
                    self.get(num::TLBRBADV)
                } else {
                    self.get(num::BADV)
                };
                if badv >> 63 != 0 {
                    self.get(num::PGDH)
                } else {
                    self.get(num::PGDL)
                }
            }
            num::CPUID => self.cpuid,
            // SAVENum 8, TimerBits 48 - 1, VSMAX 7.
            num::PRCFG1 => 8 | 47 << 4 | 7 << 12,
            num::PRCFG2 => PAGE_SIZES,
            // TLBType 2 (MTLB + STLB), MTLB entries - 1, STLB ways - 1, log2 STLB sets.
            num::PRCFG3 => {
                2 | ((MTLB_ENTRIES as u64 - 1) << 4)
                    | ((STLB_WAYS as u64 - 1) << 12)
                    | ((STLB_SETS.trailing_zeros() as u64) << 20)
            }
            num::TCFG => self.tcfg,
            num::TVAL => self.tval(now),
            num::TICLR => 0,
            num::LLBCTL => self.llbctl,
            num::TLBREHI => self.tlbrehi,
            c if (num::SAVE0..num::SAVE0 + N_SAVE as u16).contains(&c) => {
                self.save[(c - num::SAVE0) as usize]
            }
            c if (num::MERRCTL..=num::MERRSAVE).contains(&c) => {
                self.merr[(c - num::MERRCTL) as usize]
            }
            c if (num::DMW0..num::DMW0 + N_DMW as u16).contains(&c) => {
                self.dmw[(c - num::DMW0) as usize]
            }
            c if (num::PMCFG0..num::PMCFG0 + N_PMU as u16).contains(&c) => {
                self.pmu[(c - num::PMCFG0) as usize]
            }
            c => self.get(c),
        }
    }

    /// `csrwr` of `v` (at counter value `now`); what changed.
    pub fn write(&mut self, csr: u16, v: u64, now: u64) -> WriteEffect {
        let mut fx = WriteEffect::default();
        match csr {
            num::CRMD => {
                let old = self.crmd;
                self.crmd = v & Crmd::all().bits();
                let changed = Crmd::from_bits_retain(old ^ self.crmd);
                fx.translation = changed.intersects(Crmd::PLV | Crmd::DA | Crmd::PG);
                fx.irq = changed.contains(Crmd::IE);
            }
            num::ESTAT => {
                let swi = (Irqs::SWI0 | Irqs::SWI1).bits();
                self.estat = (self.estat & !swi) | (v & swi);
                fx.irq = true;
            }
            num::BADI | num::CPUID | num::PGD | num::PRCFG1 | num::PRCFG2 | num::PRCFG3 => {}
            num::TVAL => {}
            num::TLBIDX => {
                let index = (v & 0xffff) % TLB_ENTRIES as u64;
                self.tlbidx = index | (v & (0x3f << 24 | 1 << 31));
            }
            num::TLBEHI => self.tlbehi = sext_va(v & 0xffff_ffff_e000),
            num::TLBREHI => self.tlbrehi = sext_va(v & 0xffff_ffff_e000) | (v & 0x3f),
            // A page size the STLB does not support leaves STLBPS as it
            // was (as QEMU does: it logs the write and ignores it).
            num::STLBPS => {
                if page_size_supported(v & 0x3f) && v & 0x3f != self.get(num::STLBPS) {
                    self.set(num::STLBPS, v);
                    fx.translation = true;
                }
            }
            num::ASID => {
                let old = self.asid;
                self.asid = v & ((1 << ASID_BITS) - 1);
                fx.translation = old != self.asid;
            }
            num::TCFG => {
                self.tcfg = v & TCFG_MASK;
                self.counting = self.tcfg & TCFG_EN != 0;
                self.deadline = now.saturating_add(self.period());
                fx.timer = true;
            }
            num::TICLR => {
                if v & 1 != 0 {
                    self.estat &= !Irqs::TI.bits();
                    fx.irq = true;
                }
            }
            num::LLBCTL => {
                if v & 2 != 0 {
                    self.llbit_cleared = true;
                }
                self.llbctl = v & 4;
            }
            c if (num::SAVE0..num::SAVE0 + N_SAVE as u16).contains(&c) => {
                self.save[(c - num::SAVE0) as usize] = v
            }
            c if (num::MERRCTL..=num::MERRSAVE).contains(&c) => {
                self.merr[(c - num::MERRCTL) as usize] = v
            }
            c if (num::DMW0..num::DMW0 + N_DMW as u16).contains(&c) => {
                let i = (c - num::DMW0) as usize;
                fx.translation = self.dmw[i] != v & DMW_MASK;
                self.dmw[i] = v & DMW_MASK;
            }
            c if (num::PMCFG0..num::PMCFG0 + N_PMU as u16).contains(&c) => {
                self.pmu[(c - num::PMCFG0) as usize] = v
            }
            c => {
                self.set(c, v);
                match c {
                    num::ECFG => fx.irq = true,
                    num::EUEN => fx.euen = true,
                    _ => {}
                }
            }
        }
        fx
    }

    /// `csrxchg`: replaces the bits of `mask` with those of `v`; returns the old value.
    pub fn xchg(&mut self, csr: u16, v: u64, mask: u64, now: u64) -> (u64, WriteEffect) {
        let old = self.read(csr, now);
        let fx = self.write(csr, (old & !mask) | (v & mask), now);
        (old, fx)
    }

    /// The highest pending interrupt the guest would take now (CRMD.IE and
    /// ECFG.LIE allow it), as its line number.
    pub fn pending_irq(&self) -> Option<u32> {
        if !self.crmd_flags().contains(Crmd::IE) {
            return None;
        }
        self.wake_pending()
    }

    /// The highest pending interrupt ECFG.LIE enables, whatever CRMD.IE says
    /// (what wakes an `idle`).
    pub fn wake_pending(&self) -> Option<u32> {
        (Irqs::from_bits_truncate(self.estat) & Irqs::from_bits_truncate(self.get(num::ECFG)))
            .highest()
    }

    /// `idle` found no interrupt to wake on: the vCPU waits.
    pub fn start_idle(&mut self) {
        self.idling = true;
    }

    /// Whether the vCPU may run: not waiting in `idle`, or an interrupt
    /// ECFG.LIE enables is pending now (then it stops waiting). A vCPU the
    /// scheduler woke for nothing (a wake-up that raced with an interrupt
    /// it has since taken, say) keeps waiting, as `idle` does on hardware.
    pub fn idle_over(&mut self) -> bool {
        if self.idling && self.wake_pending().is_none() {
            return false;
        }
        self.idling = false;
        true
    }

    fn vector(&self, code: u64) -> u64 {
        let vs = (self.get(num::ECFG) >> 16) & 7;
        let spacing = if vs == 0 { 0 } else { 4u64 << vs };
        self.get(num::EENTRY).wrapping_add(code * spacing)
    }

    /// Delivers a synchronous exception taken at `pc`: returns the PC to
    /// continue at (the guest's handler). `badv` is set for address
    /// exceptions; `insn` is the faulting instruction word (BADI).
    pub fn raise(&mut self, pc: u64, code: u8, sub: u16, badv: Option<u64>, insn: u32) -> u64 {
        self.enter(pc);
        self.estat = (self.estat & Irqs::all().bits())
            | u64::from(code & 0x3f) << 16
            | u64::from(sub & 0x1ff) << 22;
        self.badi = u64::from(insn);
        if let Some(va) = badv {
            self.set(num::BADV, va);
            if (ecode::PIL..=ecode::PPI).contains(&code) {
                self.tlbehi = sext_va(va & 0xffff_ffff_e000);
            }
        }
        self.vector(u64::from(code))
    }

    /// Delivers the interrupt `line` at `pc` (call only when
    /// [`CsrFile::pending_irq`] said so): returns the handler's PC.
    pub fn raise_irq(&mut self, pc: u64, line: u32) -> u64 {
        self.enter(pc);
        self.estat &= Irqs::all().bits();
        self.vector(64 + u64::from(line & 0x1f))
    }

    /// PRMD for an exception taken in the current mode.
    pub fn saved_prmd(&self) -> Prmd {
        let crmd = self.crmd_flags();
        let mut prmd = Prmd::from_bits_retain((crmd & (Crmd::PLV | Crmd::IE)).bits());
        prmd.set(Prmd::PWE, crmd.contains(Crmd::WE));
        prmd
    }

    fn enter(&mut self, pc: u64) {
        self.set(num::PRMD, self.saved_prmd().bits());
        self.set(num::ERA, pc);
        self.crmd &= !(Crmd::PLV | Crmd::IE | Crmd::WE).bits();
    }

    /// Delivers a TLB refill for `va` taken at `pc`: DA mode, PLV0, IE off,
    /// state in the TLBR* CSRs. Returns TLBRENTRY.
    pub fn raise_tlbr(&mut self, pc: u64, va: u64) -> u64 {
        // TLBRPRMD: PPLV and PIE as in PRMD, PWE at bit 4.
        let prmd = (self.crmd & (Crmd::PLV | Crmd::IE).bits())
            | u64::from(self.crmd_flags().contains(Crmd::WE)) << 4;
        self.set(num::TLBRPRMD, prmd);
        self.set(num::TLBRERA, (pc & !3) | 1);
        self.set(num::TLBRBADV, va);
        self.tlbrehi = (self.tlbrehi & 0x3f) | sext_va(va & 0xffff_ffff_e000);
        self.crmd =
            (self.crmd & !(Crmd::PLV | Crmd::IE | Crmd::WE | Crmd::PG).bits()) | Crmd::DA.bits();
        self.get(num::TLBRENTRY)
    }

    /// `ertn`: returns the PC to continue at.
    pub fn ertn(&mut self) -> u64 {
        if !self.llbctl & 4 != 0 {
            self.llbit_cleared = true;
        } else {
            self.llbctl &= !4;
        }
        if self.in_tlbr() {
            let prmd = self.get(num::TLBRPRMD);
            let we = (prmd >> 4) & 1;
            self.crmd = (self.crmd & !(Crmd::PLV | Crmd::IE | Crmd::WE | Crmd::DA).bits())
                | (prmd & (Crmd::PLV | Crmd::IE).bits())
                | we << 9
                | Crmd::PG.bits();
            let era = self.get(num::TLBRERA);
            self.set(num::TLBRERA, era & !1);
            era & !3
        } else {
            // PRMD.PPLV/PIE go back to CRMD.PLV/IE (same bits), PWE to WE.
            let prmd = self.get(num::PRMD);
            let we = u64::from(Prmd::from_bits_retain(prmd).contains(Prmd::PWE));
            self.crmd = (self.crmd & !(Crmd::PLV | Crmd::IE | Crmd::WE).bits())
                | (prmd & (Prmd::PPLV | Prmd::PIE).bits())
                | we << 9;
            self.get(num::ERA)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
