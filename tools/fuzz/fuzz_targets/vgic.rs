//! The virtual GIC under guest MMIO sequences (distributor,
//! redistributors, SGI registers), device lines and list-register
//! fill/sync as the world switch does them. A fill never exceeds the list
//! registers it is given, never holds an interrupt twice, never hands an
//! SPI to one vCPU while another vCPU's list registers hold it, only names
//! interrupts that exist, reports overflow only when full; a fill, a sync
//! of it unchanged and a new fill give the same list registers; the LR
//! encodings round-trip.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::dev::vgic::Vgic;
use kernel::dev::vgic::{GicVersion, LrEntry, LrState, SgiRegister, VgicConfig, Width, MAX_LRS};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    DistWrite {
        vcpu: u8,
        offset: u16,
        width: u8,
        value: u64,
        high: bool,
    },
    DistRead {
        vcpu: u8,
        offset: u16,
        width: u8,
    },
    RedistWrite {
        frame: u8,
        offset: u32,
        width: u8,
        value: u64,
    },
    RedistRead {
        frame: u8,
        offset: u32,
        width: u8,
    },
    Level {
        vcpu: u8,
        intid: u16,
        level: bool,
    },
    Inject {
        vcpu: u8,
        intid: u16,
    },
    Sgi {
        sender: u8,
        reg: u8,
        value: u64,
    },
    Fill {
        vcpu: u8,
        nr: u8,
    },
    /// The guest acts on the LRs, then the exit syncs them.
    Sync {
        vcpu: u8,
        actions: Vec<u8>,
    },
    FillSyncFill {
        vcpu: u8,
        nr: u8,
    },
}

fn width(w: u8) -> Width {
    Width::from_sas(u64::from(w))
}

fn check_fill(
    g: &Vgic,
    vcpu: usize,
    nr: usize,
    lrs: &[LrEntry],
    overflow: bool,
    held: &[Vec<LrEntry>],
) {
    assert!(
        lrs.len() <= nr.min(MAX_LRS),
        "fill of {} into {nr} LRs",
        lrs.len()
    );
    if overflow {
        assert_eq!(lrs.len(), nr.min(MAX_LRS), "overflow with free LRs");
    }
    for (i, a) in lrs.iter().enumerate() {
        assert!(
            a.intid < g.nr_irqs(),
            "LR names INTID {} of {}",
            a.intid,
            g.nr_irqs()
        );
        assert_ne!(a.state, LrState::Invalid, "an invalid LR handed out");
        for b in &lrs[i + 1..] {
            assert!(
                !(a.intid == b.intid && a.source_cpu == b.source_cpu),
                "INTID {} twice in vCPU {vcpu}'s LRs",
                a.intid
            );
        }
        if a.intid >= 32 {
            for (other, h) in held.iter().enumerate() {
                if other != vcpu {
                    assert!(
                        h.iter().all(|b| b.intid != a.intid),
                        "SPI {} in the LRs of vCPUs {vcpu} and {other}",
                        a.intid
                    );
                }
            }
        }
        if g.version() == GicVersion::V3 {
            assert_eq!(
                LrEntry::from_ich_lr(a.to_ich_lr()),
                LrEntry {
                    source_cpu: 0,
                    ..*a
                }
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(v3), Ok(vcpus), Ok(spis)) = (
        u.arbitrary::<bool>(),
        u.int_in_range(1usize..=8),
        u.int_in_range(1usize..=3),
    ) else {
        return;
    };
    let Ok(ops) = u.arbitrary::<Vec<Op>>() else {
        return;
    };
    let version = if v3 { GicVersion::V3 } else { GicVersion::V2 };
    let mut g = Vgic::new(VgicConfig {
        version,
        vcpus,
        nr_spis: spis * 32,
    })
    .unwrap();
    let mut held: Vec<Vec<LrEntry>> = vec![Vec::new(); vcpus];
    for op in ops {
        match op {
            Op::DistWrite {
                vcpu,
                offset,
                width: w,
                value,
                high,
            } => {
                let off = u64::from(offset) + if high { 0x6000 } else { 0 };
                let _ = g.dist_write(vcpu as usize % (vcpus + 1), off, width(w), value);
            }
            Op::DistRead {
                vcpu,
                offset,
                width: w,
            } => {
                let _ = g.dist_read(vcpu as usize % (vcpus + 1), u64::from(offset), width(w));
            }
            Op::RedistWrite {
                frame,
                offset,
                width: w,
                value,
            } => {
                let off =
                    u64::from(frame % (vcpus as u8 + 1)) * 0x2_0000 + u64::from(offset % 0x2_0000);
                let _ = g.redist_write(off, width(w), value);
            }
            Op::RedistRead {
                frame,
                offset,
                width: w,
            } => {
                let off =
                    u64::from(frame % (vcpus as u8 + 1)) * 0x2_0000 + u64::from(offset % 0x2_0000);
                let _ = g.redist_read(off, width(w));
            }
            Op::Level { vcpu, intid, level } => {
                let _ = g.set_level(vcpu as usize % (vcpus + 1), u32::from(intid % 1100), level);
            }
            Op::Inject { vcpu, intid } => {
                let _ = g.inject(vcpu as usize % (vcpus + 1), u32::from(intid % 1100));
            }
            Op::Sgi { sender, reg, value } => {
                let reg =
                    [SgiRegister::Sgi1r, SgiRegister::Asgi1r, SgiRegister::Sgi0r][reg as usize % 3];
                let _ = g.write_icc_sgi(sender as usize % (vcpus + 1), reg, value);
            }
            Op::Fill { vcpu, nr } => {
                let vcpu = vcpu as usize % vcpus;
                let nr = nr as usize % 18;
                // An unsynced fill is taken back by the next fill.
                held[vcpu].clear();
                let f = g.fill_lrs(vcpu, nr);
                check_fill(&g, vcpu, nr, &f.lrs, f.overflow, &held);
                held[vcpu] = f.lrs.to_vec();
            }
            Op::Sync { vcpu, actions } => {
                let vcpu = vcpu as usize % vcpus;
                let mut lrs = std::mem::take(&mut held[vcpu]);
                for (lr, a) in lrs
                    .iter_mut()
                    .zip(actions.iter().chain(std::iter::repeat(&0)))
                {
                    lr.state = match (a % 4, lr.state) {
                        (0, s) => s,
                        // Acknowledge.
                        (1, LrState::Pending) => LrState::Active,
                        (1, LrState::PendingActive) => LrState::Active,
                        (1, s) => s,
                        // EOI / deactivate.
                        (2, _) => LrState::Invalid,
                        (_, s) => s,
                    };
                }
                let keep: Vec<LrEntry> = lrs
                    .into_iter()
                    .zip(actions.iter().chain(std::iter::repeat(&0)))
                    .filter(|(_, a)| *a % 4 != 3)
                    .map(|(l, _)| l)
                    .collect();
                g.sync_lrs(vcpu, &keep);
            }
            Op::FillSyncFill { vcpu, nr } => {
                let vcpu = vcpu as usize % vcpus;
                let nr = nr as usize % 18;
                held[vcpu].clear();
                let a = g.fill_lrs(vcpu, nr);
                check_fill(&g, vcpu, nr, &a.lrs, a.overflow, &held);
                g.sync_lrs(vcpu, &a.lrs);
                let b = g.fill_lrs(vcpu, nr);
                assert_eq!(a, b, "fill, unchanged sync, fill differ");
                held[vcpu] = b.lrs.to_vec();
            }
        }
    }
});
