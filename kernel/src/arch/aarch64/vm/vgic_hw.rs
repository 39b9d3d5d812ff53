//! The hardware half of the virtual GIC: the virtual CPU interface and its
//! list registers. GICv3: `ICH_*_EL2` system registers. GICv2: the GICH
//! frame (banked per CPU at one address); the guest's GICC accesses go to
//! the GICV frame, which stage 2 maps at the guest's GICC address.
//!
//! Around each guest entry the backend asks the portable model
//! (`crate::dev::vgic`) what to load ([`crate::dev::vgic::Vgic::fill_lrs`]), writes it
//! with [`VgicHw::write_lrs`], and after the exit reads the same registers
//! back ([`VgicHw::read_lrs`]) for [`crate::dev::vgic::Vgic::sync_lrs`]. The
//! guest's own CPU-interface state (VMCR: priority mask, group enables,
//! binary points; the active-priority registers) is switched on load/put.

use bitflags::bitflags;
use volatile::access::ReadOnly;

use crate::arch::mmio::{at, Block, VolatileFieldAccess};
use crate::dev::vgic::{LrEntry, LrFill, MAX_LRS};

use super::regs::{mrs, msr};

bitflags! {
    /// ICH_HCR_EL2 / GICH_HCR bits kestrel sets.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct IchHcr: u32 {
        /// The virtual CPU interface is enabled.
        const EN = 1 << 0;
        /// Maintenance interrupt when no list register is pending.
        const NPIE = 1 << 3;
    }
}

/// The GICv2 virtual interface control frame (GICH), banked per CPU.
#[repr(C)]
#[derive(VolatileFieldAccess)]
pub struct GichRegs {
    hcr: u32,
    #[access(ReadOnly)]
    vtr: u32,
    vmcr: u32,
    _reserved0: [u32; 57],
    /// GICH_APR0 (active priorities).
    apr: u32,
    _reserved1: [u32; 3],
    lr: [u32; 64],
}
const _: () = assert!(core::mem::offset_of!(GichRegs, apr) == 0xf0);
const _: () = assert!(core::mem::offset_of!(GichRegs, lr) == 0x100);

/// A vCPU's virtual CPU interface state while it is not loaded.
#[derive(Clone, Copy, Debug, Default)]
pub struct VgicCpu {
    pub vmcr: u64,
    /// GICv3: ICH_AP0R0-3 then ICH_AP1R0-3. GICv2: GICH_APR in [0].
    pub apr: [u64; 8],
}

/// The virtual CPU interface of this machine's GIC.
#[derive(Clone, Copy, Debug)]
pub enum VgicHw {
    V3 {
        nr_lrs: usize,
        nr_apr: usize,
    },
    V2 {
        gich: Block<GichRegs>,
        nr_lrs: usize,
    },
}

macro_rules! lr_access {
    ($n:expr, read) => {
        match $n {
            0 => mrs!("ich_lr0_el2"),
            1 => mrs!("ich_lr1_el2"),
            2 => mrs!("ich_lr2_el2"),
            3 => mrs!("ich_lr3_el2"),
            4 => mrs!("ich_lr4_el2"),
            5 => mrs!("ich_lr5_el2"),
            6 => mrs!("ich_lr6_el2"),
            7 => mrs!("ich_lr7_el2"),
            8 => mrs!("ich_lr8_el2"),
            9 => mrs!("ich_lr9_el2"),
            10 => mrs!("ich_lr10_el2"),
            11 => mrs!("ich_lr11_el2"),
            12 => mrs!("ich_lr12_el2"),
            13 => mrs!("ich_lr13_el2"),
            14 => mrs!("ich_lr14_el2"),
            _ => mrs!("ich_lr15_el2"),
        }
    };
    ($n:expr, write, $v:expr) => {
        match $n {
            0 => msr!("ich_lr0_el2", $v),
            1 => msr!("ich_lr1_el2", $v),
            2 => msr!("ich_lr2_el2", $v),
            3 => msr!("ich_lr3_el2", $v),
            4 => msr!("ich_lr4_el2", $v),
            5 => msr!("ich_lr5_el2", $v),
            6 => msr!("ich_lr6_el2", $v),
            7 => msr!("ich_lr7_el2", $v),
            8 => msr!("ich_lr8_el2", $v),
            9 => msr!("ich_lr9_el2", $v),
            10 => msr!("ich_lr10_el2", $v),
            11 => msr!("ich_lr11_el2", $v),
            12 => msr!("ich_lr12_el2", $v),
            13 => msr!("ich_lr13_el2", $v),
            14 => msr!("ich_lr14_el2", $v),
            _ => msr!("ich_lr15_el2", $v),
        }
    };
}

fn read_ich_lr(n: usize) -> u64 {
    lr_access!(n, read)
}

fn write_ich_lr(n: usize, v: u64) {
    lr_access!(n, write, v)
}

impl VgicHw {
    /// Probes the virtual interface (GICv3: ICH_VTR_EL2; GICv2: GICH_VTR).
    pub fn probe_v3() -> VgicHw {
        let vtr = mrs!("ich_vtr_el2");
        let nr_lrs = ((vtr & 0xf) as usize + 1).min(MAX_LRS);
        // PREbits [28:26] + 1 preemption bits: 5 -> 1 APR, 6 -> 2, 7 -> 4.
        let nr_apr = match ((vtr >> 26) & 7) + 1 {
            7 => 4,
            6 => 2,
            _ => 1,
        };
        VgicHw::V3 { nr_lrs, nr_apr }
    }

    /// Probes the GICv2 virtual interface whose GICH frame the DTB puts at
    /// `gich` (an address of 0 names no frame and is refused).
    pub fn probe_v2(gich: usize) -> VgicHw {
        assert!(gich != 0, "GICH frame at 0");
        // SAFETY: `gich` is the GICH frame the DTB names (non-zero, 4 KiB
        // aligned), which the boot code identity-maps as Device memory on
        // every CPU; each CPU sees its own banked copy.
        let gich = unsafe { Block::<GichRegs>::new(gich) };
        let nr_lrs = ((gich.regs().vtr().read() & 0x3f) as usize + 1).min(MAX_LRS);
        VgicHw::V2 { gich, nr_lrs }
    }

    pub fn nr_lrs(&self) -> usize {
        match *self {
            VgicHw::V3 { nr_lrs, .. } | VgicHw::V2 { nr_lrs, .. } => nr_lrs,
        }
    }

    /// Puts the vCPU's interface state into the hardware and enables it.
    pub fn load(&self, s: &VgicCpu) {
        match *self {
            VgicHw::V3 { nr_lrs, nr_apr } => {
                for n in 0..nr_lrs {
                    write_ich_lr(n, 0);
                }
                msr!("ich_vmcr_el2", s.vmcr);
                msr!("ich_ap0r0_el2", s.apr[0]);
                msr!("ich_ap1r0_el2", s.apr[4]);
                if nr_apr >= 2 {
                    msr!("ich_ap0r1_el2", s.apr[1]);
                    msr!("ich_ap1r1_el2", s.apr[5]);
                }
                if nr_apr >= 4 {
                    msr!("ich_ap0r2_el2", s.apr[2]);
                    msr!("ich_ap0r3_el2", s.apr[3]);
                    msr!("ich_ap1r2_el2", s.apr[6]);
                    msr!("ich_ap1r3_el2", s.apr[7]);
                }
                msr!("ich_hcr_el2", u64::from(IchHcr::EN.bits()));
            }
            VgicHw::V2 { gich, nr_lrs } => {
                let h = gich.regs();
                for n in 0..nr_lrs {
                    at(h.lr(), n).write(0);
                }
                h.vmcr().write(s.vmcr as u32);
                h.apr().write(s.apr[0] as u32);
                h.hcr().write(IchHcr::EN.bits());
            }
        }
    }

    /// Saves the vCPU's interface state and disables the interface (the
    /// list registers were synced by the last exit; they are cleared).
    pub fn put(&self, s: &mut VgicCpu) {
        match *self {
            VgicHw::V3 { nr_lrs, nr_apr } => {
                s.vmcr = mrs!("ich_vmcr_el2");
                s.apr[0] = mrs!("ich_ap0r0_el2");
                s.apr[4] = mrs!("ich_ap1r0_el2");
                if nr_apr >= 2 {
                    s.apr[1] = mrs!("ich_ap0r1_el2");
                    s.apr[5] = mrs!("ich_ap1r1_el2");
                }
                if nr_apr >= 4 {
                    s.apr[2] = mrs!("ich_ap0r2_el2");
                    s.apr[3] = mrs!("ich_ap0r3_el2");
                    s.apr[6] = mrs!("ich_ap1r2_el2");
                    s.apr[7] = mrs!("ich_ap1r3_el2");
                }
                msr!("ich_hcr_el2", 0);
                for n in 0..nr_lrs {
                    write_ich_lr(n, 0);
                }
            }
            VgicHw::V2 { gich, nr_lrs } => {
                let h = gich.regs();
                s.vmcr = u64::from(h.vmcr().read());
                s.apr[0] = u64::from(h.apr().read());
                h.hcr().write(0);
                for n in 0..nr_lrs {
                    at(h.lr(), n).write(0);
                }
            }
        }
    }

    /// Loads `fill` into the list registers (the rest invalid) and sets
    /// NPIE as the model asks. `prev` = how many were in use before.
    pub fn write_lrs(&self, fill: &LrFill, prev: usize) {
        let used = fill.lrs.len();
        let mut hcr = IchHcr::EN;
        hcr.set(IchHcr::NPIE, fill.npie);
        match *self {
            VgicHw::V3 { nr_lrs, .. } => {
                for (n, e) in fill.lrs.iter().enumerate().take(nr_lrs) {
                    write_ich_lr(n, e.to_ich_lr());
                }
                for n in used..prev.min(nr_lrs) {
                    write_ich_lr(n, 0);
                }
                msr!("ich_hcr_el2", u64::from(hcr.bits()));
            }
            VgicHw::V2 { gich, nr_lrs } => {
                let h = gich.regs();
                for (n, e) in fill.lrs.iter().enumerate().take(nr_lrs) {
                    at(h.lr(), n).write(e.to_gich_lr());
                }
                for n in used..prev.min(nr_lrs) {
                    at(h.lr(), n).write(0);
                }
                h.hcr().write(hcr.bits());
            }
        }
    }

    /// Reads back the first `count` list registers.
    pub fn read_lrs(&self, count: usize, out: &mut heapless::Vec<LrEntry, MAX_LRS>) {
        out.clear();
        match *self {
            VgicHw::V3 { nr_lrs, .. } => {
                for n in 0..count.min(nr_lrs) {
                    let _ = out.push(LrEntry::from_ich_lr(read_ich_lr(n)));
                }
            }
            VgicHw::V2 { gich, nr_lrs } => {
                let h = gich.regs();
                for n in 0..count.min(nr_lrs) {
                    let _ = out.push(LrEntry::from_gich_lr(at(h.lr(), n).read()));
                }
            }
        }
    }
}
