//! Host tests of the virtual GIC: register semantics for both versions, SGI
//! decoding, routing, the list-register round trip and hostile accesses.

use super::*;
use Width::{Byte, Dword, Half, Word};

fn gic(version: GicVersion, vcpus: usize, nr_spis: usize) -> Vgic {
    Vgic::new(VgicConfig {
        version,
        vcpus,
        nr_spis,
    })
    .unwrap()
}

fn rd(g: &mut Vgic, vcpu: usize, off: u64) -> u64 {
    g.dist_read(vcpu, off, Word).unwrap()
}

fn wr(g: &mut Vgic, vcpu: usize, off: u64, v: u64) -> VcpuSet {
    g.dist_write(vcpu, off, Word, v).unwrap()
}

fn rrd(g: &mut Vgic, off: u64) -> u64 {
    g.redist_read(off, Word).unwrap()
}

fn rwr(g: &mut Vgic, off: u64, v: u64) -> VcpuSet {
    g.redist_write(off, Word, v).unwrap()
}

/// SGI_base of vCPU `v`'s redistributor.
fn sgi_base(v: usize) -> u64 {
    v as u64 * 0x2_0000 + 0x1_0000
}

/// A GICv3 guest set up as Linux does: distributor on (both groups), all
/// group 1, redistributors awake.
fn linux_v3(vcpus: usize, nr_spis: usize) -> Vgic {
    let mut g = gic(GicVersion::V3, vcpus, nr_spis);
    wr(&mut g, 0, 0x0, 0x13);
    for n in 1..(32 + nr_spis as u64) / 32 {
        wr(&mut g, 0, 0x80 + 4 * n, 0xFFFF_FFFF);
    }
    for v in 0..vcpus {
        rwr(&mut g, v as u64 * 0x2_0000 + 0x14, 0);
        rwr(&mut g, sgi_base(v) + 0x80, 0xFFFF_FFFF);
    }
    g
}

fn lr(intid: u32, state: LrState) -> LrEntry {
    LrEntry {
        intid,
        priority: 0,
        group1: false,
        state,
        source_cpu: 0,
        hw: false,
        pintid: 0,
        eoi_maintenance: false,
    }
}

/// The LRs of `fill`, with the states the guest left them in.
fn back(fill: &LrFill, states: &[LrState]) -> Vec<LrEntry> {
    fill.lrs
        .iter()
        .zip(states)
        .map(|(e, &s)| LrEntry { state: s, ..*e })
        .collect()
}

// ---- configuration ----

#[test]
fn refuses_bad_configurations() {
    let cfg = |version, vcpus, nr_spis| {
        Vgic::new(VgicConfig {
            version,
            vcpus,
            nr_spis,
        })
        .err()
    };
    assert_eq!(
        cfg(GicVersion::V2, 9, 64),
        Some(VgicError::BadVcpuCount { max: 8 })
    );
    assert_eq!(cfg(GicVersion::V2, 8, 64), None);
    assert_eq!(
        cfg(GicVersion::V3, 17, 64),
        Some(VgicError::BadVcpuCount { max: 16 })
    );
    assert_eq!(cfg(GicVersion::V3, 16, 988 / 32 * 32), None);
    assert_eq!(
        cfg(GicVersion::V3, 0, 64),
        Some(VgicError::BadVcpuCount { max: 16 })
    );
    assert_eq!(cfg(GicVersion::V3, 4, 33), Some(VgicError::BadSpiCount));
    assert_eq!(cfg(GicVersion::V3, 4, 0), Some(VgicError::BadSpiCount));
    assert_eq!(cfg(GicVersion::V3, 4, 1024), Some(VgicError::BadSpiCount));
    let big = gic(GicVersion::V3, 1, 992);
    assert_eq!(big.nr_irqs(), 1020, "INTIDs 1020..1023 never exist");
}

// ---- GICv3 distributor ----

#[test]
fn v3_identification_registers() {
    let mut g = gic(GicVersion::V3, 4, 64);
    // ITLinesNumber = 96/32 - 1, CPUNumber = 3, IDbits = 9, no LPIs/MBIS/RSS.
    assert_eq!(rd(&mut g, 0, 0x4), 2 | (3 << 5) | (9 << 19));
    assert_eq!(rd(&mut g, 0, 0xC), 0, "GICD_TYPER2");
    assert_eq!(rd(&mut g, 0, 0x8), IIDR as u64);
    assert_ne!(IIDR, 0);
    assert_eq!(rd(&mut g, 0, 0xFFE8) & 0xF0, 0x30, "GICD_PIDR2.ArchRev = 3");
    assert_eq!(rd(&mut g, 0, 0x10), 0, "GICD_STATUSR");
    let mut g16 = gic(GicVersion::V3, 16, 992);
    assert_eq!(
        rd(&mut g16, 0, 0x4) & 0xFF,
        31 | (7 << 5),
        "CPUNumber saturates at 8"
    );
}

#[test]
fn v3_ctlr_forces_are_and_ds_and_has_no_rwp() {
    let mut g = gic(GicVersion::V3, 2, 32);
    assert_eq!(rd(&mut g, 0, 0), 0x50, "ARE and DS read as one after reset");
    wr(&mut g, 0, 0, 0);
    assert_eq!(rd(&mut g, 0, 0), 0x50, "ARE/DS cannot be cleared");
    // Linux: ARE_NS | EnableGrp1A | EnableGrp1 (bits 4, 1, 0).
    wr(&mut g, 0, 0, 0x13);
    assert_eq!(rd(&mut g, 0, 0), 0x53);
    assert_eq!(rd(&mut g, 0, 0) & (1 << 31), 0, "RWP never set");
    wr(&mut g, 0, 0, 0xFFFF_FFFF);
    assert_eq!(rd(&mut g, 0, 0), 0x53, "only the enables are writable");
}

#[test]
fn v3_set_clear_enable_pending_active_pairs() {
    let mut g = gic(GicVersion::V3, 2, 64);
    wr(&mut g, 0, 0x104, 0x0000_8001); // ISENABLER1: SPIs 32, 47
    wr(&mut g, 0, 0x104, 0x0000_0010); // 36: set-only, others stay
    assert_eq!(rd(&mut g, 0, 0x104), 0x8011);
    assert_eq!(
        rd(&mut g, 0, 0x184),
        0x8011,
        "ICENABLER reads the same state"
    );
    wr(&mut g, 0, 0x184, 0x0000_0001);
    assert_eq!(rd(&mut g, 0, 0x104), 0x8010);
    wr(&mut g, 0, 0x208, 0x1); // ISPENDR2: SPI 64
    assert_eq!(rd(&mut g, 0, 0x208), 1);
    assert_eq!(rd(&mut g, 0, 0x288), 1);
    wr(&mut g, 0, 0x288, 0x1);
    assert_eq!(rd(&mut g, 0, 0x208), 0);
    wr(&mut g, 0, 0x304, 0x4);
    assert_eq!(rd(&mut g, 0, 0x384), 0x4);
    wr(&mut g, 0, 0x384, 0x4);
    assert_eq!(rd(&mut g, 0, 0x304), 0);
    // Beyond the implemented SPIs: RAZ/WI.
    wr(&mut g, 0, 0x10C, 0xFFFF_FFFF);
    assert_eq!(rd(&mut g, 0, 0x10C), 0);
}

#[test]
fn v3_distributor_sgi_ppi_banks_are_raz_wi() {
    let mut g = gic(GicVersion::V3, 2, 32);
    for off in [
        0x080, 0x100, 0x200, 0x300, 0x400, 0x41C, 0xC00, 0xC04, 0x800, 0xD00,
    ] {
        wr(&mut g, 0, off, 0xFFFF_FFFF);
        assert_eq!(rd(&mut g, 0, off), 0, "offset {off:#x}");
    }
    // ... they live in the redistributor.
    assert_eq!(rrd(&mut g, sgi_base(0) + 0x100), 0);
    assert_eq!(
        g.stats().raz_wi,
        0,
        "architected RAZ/WI is not counted as unimplemented"
    );
}

#[test]
fn priority_byte_and_word_access() {
    for version in [GicVersion::V3, GicVersion::V2] {
        let mut g = gic(version, 2, 64);
        g.dist_write(0, 0x400 + 41, Byte, 0xA0).unwrap();
        g.dist_write(0, 0x400 + 42, Byte, 0xFF).unwrap();
        assert_eq!(
            rd(&mut g, 0, 0x428),
            0x00F8_A000,
            "{version:?}: bytes land in the word, top 5 bits kept"
        );
        assert_eq!(g.dist_read(0, 0x400 + 41, Byte).unwrap(), 0xA0);
        wr(&mut g, 0, 0x42C, 0x1020_3040);
        assert_eq!(g.dist_read(0, 0x42F, Byte).unwrap(), 0x10);
        assert_eq!(g.dist_read(0, 0x42C, Byte).unwrap(), 0x40);
    }
    let mut g = gic(GicVersion::V3, 2, 32);
    g.redist_write(sgi_base(1) + 0x400 + 27, Byte, 0x80)
        .unwrap();
    assert_eq!(rrd(&mut g, sgi_base(1) + 0x418), 0x8000_0000);
    assert_eq!(rrd(&mut g, sgi_base(0) + 0x418), 0, "per-vCPU bank");
}

#[test]
fn irouter_64_bit_and_halves() {
    let mut g = linux_v3(4, 64);
    let off = 0x6000 + 8 * 40;
    g.dist_write(0, off, Dword, 0x0000_00AB_0000_0002).unwrap();
    assert_eq!(g.dist_read(0, off, Dword).unwrap(), 0xAB_0000_0002);
    assert_eq!(g.dist_read(0, off, Word).unwrap(), 0x2);
    assert_eq!(g.dist_read(0, off + 4, Word).unwrap(), 0xAB);
    g.dist_write(0, off + 4, Word, 0).unwrap();
    assert_eq!(g.dist_read(0, off, Dword).unwrap(), 0x2);
    // Reserved bits are RES0; IRM (31) sticks.
    g.dist_write(0, off, Dword, u64::MAX).unwrap();
    assert_eq!(g.dist_read(0, off, Dword).unwrap(), 0xFF_80FF_FFFF);
    // IROUTER0..31 do not exist.
    assert_eq!(g.dist_read(0, 0x6000 + 8 * 5, Dword).unwrap(), 0);
    assert_eq!(g.dist_read(0, off + 4, Byte), Err(MmioError::BadAccess));
}

#[test]
fn v3_spi_routing_by_irouter() {
    let mut g = linux_v3(4, 64);
    let spi = 45u32;
    wr(&mut g, 0, 0x104, 1 << (spi - 32));
    g.dist_write(0, 0x6000 + 8 * spi as u64, Dword, 2).unwrap(); // Aff0 = 2
    assert_eq!(g.set_level(0, spi, true), VcpuSet::single(2));
    assert!(g.has_pending(2));
    assert!(!g.has_pending(0) && !g.has_pending(1));
    let fill = g.fill_lrs(2, 4);
    assert_eq!(fill.lrs.len(), 1);
    assert_eq!(fill.lrs[0].intid, spi);
    assert!(
        g.fill_lrs(0, 4).lrs.is_empty(),
        "not delivered to another vCPU"
    );
    g.sync_lrs(2, &back(&fill, &[LrState::Invalid]));
    g.set_level(0, spi, false);
    // Re-route to an affinity that does not exist: stays pending, goes nowhere.
    g.dist_write(0, 0x6000 + 8 * spi as u64, Dword, 0x100)
        .unwrap();
    assert!(g.inject(0, spi).is_empty());
    assert!((0..4).all(|v| !g.has_pending(v)));
    assert_eq!(rd(&mut g, 0, 0x204) >> (spi - 32) & 1, 1);
    // IRM = 1: the lowest vCPU whose redistributor is awake.
    rwr(&mut g, 0x14, 0x2); // vCPU 0 sleeps
    let kicks = g
        .dist_write(0, 0x6000 + 8 * spi as u64, Dword, 1 << 31)
        .unwrap();
    assert_eq!(kicks, VcpuSet::single(1));
    assert!(g.has_pending(1));
}

// ---- GICv3 redistributors ----

#[test]
fn redistributor_typer_affinity_and_last() {
    let mut g = gic(GicVersion::V3, 4, 32);
    for v in 0..4u64 {
        let typer = g.redist_read(v * 0x2_0000 + 8, Dword).unwrap();
        assert_eq!(typer >> 32, v, "Affinity = Aff0 {v}");
        assert_eq!((typer >> 8) & 0xFFFF, v, "Processor_Number");
        assert_eq!(typer & 0x10 != 0, v == 3, "Last only on the last frame");
        assert_eq!(typer & 0xF, 0, "no PLPIS/VLPIS/DirectLPI");
        assert_eq!(rrd(&mut g, v * 0x2_0000 + 8), typer & 0xFFFF_FFFF);
        assert_eq!(rrd(&mut g, v * 0x2_0000 + 12), typer >> 32);
    }
    let mut g = gic(GicVersion::V3, 16, 32);
    let typer = g.redist_read(15 * 0x2_0000 + 8, Dword).unwrap();
    assert_eq!(typer >> 32, crate::vcpu::psci::vcpu_mpidr(15));
    assert_ne!(typer & 0x10, 0);
    assert_eq!(
        g.redist_read(16 * 0x2_0000 + 8, Dword),
        Err(MmioError::OutOfRange)
    );
}

#[test]
fn redistributor_waker_handshake_and_fixed_registers() {
    let mut g = gic(GicVersion::V3, 2, 32);
    let waker = 0x2_0000 + 0x14;
    assert_eq!(
        rrd(&mut g, waker),
        0x6,
        "ProcessorSleep and ChildrenAsleep at reset"
    );
    rwr(&mut g, waker, 0x0);
    assert_eq!(rrd(&mut g, waker), 0, "ChildrenAsleep follows at once");
    assert_eq!(rrd(&mut g, 0x14), 0x6, "per frame");
    rwr(&mut g, waker, 0x2);
    assert_eq!(rrd(&mut g, waker), 0x6);
    assert_eq!(rrd(&mut g, 0x0), 0, "GICR_CTLR: no LPIs, RWP clear");
    assert_eq!(rrd(&mut g, 0x4), IIDR as u64);
    assert_eq!(rrd(&mut g, 0xFFE8) & 0xF0, 0x30);
    for off in [0x70, 0x78] {
        g.redist_write(off, Dword, u64::MAX).unwrap();
        assert_eq!(
            g.redist_read(off, Dword).unwrap(),
            0,
            "PROPBASER/PENDBASER RAZ"
        );
    }
}

#[test]
fn redistributor_sgi_base_registers() {
    let mut g = gic(GicVersion::V3, 2, 32);
    let s = sgi_base(1);
    rwr(&mut g, s + 0x80, 0xFFFF_FFFF);
    assert_eq!(rrd(&mut g, s + 0x80), 0xFFFF_FFFF);
    rwr(&mut g, s + 0x100, 1 << 27 | 1 << 3);
    rwr(&mut g, s + 0x180, 1 << 3);
    assert_eq!(rrd(&mut g, s + 0x100), 1 << 27);
    assert_eq!(rrd(&mut g, sgi_base(0) + 0x100), 0, "banked per vCPU");
    assert_eq!(rrd(&mut g, s + 0xC00), 0xAAAA_AAAA, "SGIs are edge");
    rwr(&mut g, s + 0xC00, 0);
    assert_eq!(rrd(&mut g, s + 0xC00), 0xAAAA_AAAA, "ICFGR0 is read-only");
    rwr(&mut g, s + 0xC04, 2 << 22);
    assert_eq!(rrd(&mut g, s + 0xC04), 2 << 22, "PPI 27 edge");
    rwr(&mut g, s + 0xD00, 0xFFFF_FFFF);
    assert_eq!(rrd(&mut g, s + 0xD00), 0, "IGRPMODR0 RAZ/WI with DS = 1");
    rwr(&mut g, s + 0x200, 1 << 5);
    assert_eq!(
        rrd(&mut g, s + 0x280),
        1 << 5,
        "SGI 5 pending through GICR_ISPENDR0"
    );
}

// ---- GICv2 distributor ----

#[test]
fn v2_identification_and_ctlr() {
    let mut g = gic(GicVersion::V2, 4, 64);
    assert_eq!(rd(&mut g, 0, 0x4), 2 | (3 << 5));
    assert_eq!(rd(&mut g, 0, 0xFE8) & 0xF0, 0x20);
    assert_eq!(rd(&mut g, 0, 0x8), IIDR as u64);
    wr(&mut g, 0, 0, 1);
    assert_eq!(rd(&mut g, 0, 0), 1, "no ARE/DS on GICv2");
    assert_eq!(g.dist_read(0, 0x1000, Word), Err(MmioError::OutOfRange));
    assert_eq!(g.dist_read(0, 0x6100, Word), Err(MmioError::OutOfRange));
}

#[test]
fn v2_banked_private_registers() {
    let mut g = gic(GicVersion::V2, 4, 32);
    wr(&mut g, 1, 0x100, 0x0800_0002);
    assert_eq!(rd(&mut g, 1, 0x100), 0x0800_0002);
    assert_eq!(rd(&mut g, 0, 0x100), 0, "vCPU 0 sees its own bank");
    wr(&mut g, 1, 0x180, 0x2);
    assert_eq!(rd(&mut g, 1, 0x100), 0x0800_0000);
    assert_eq!(rd(&mut g, 2, 0xC00), 0xAAAA_AAAA);
    // SGI bits of ISPENDR0 are read-only on GICv2.
    wr(&mut g, 1, 0x200, 0xFFFF);
    assert_eq!(rd(&mut g, 1, 0x200), 0);
}

#[test]
fn v2_itargetsr() {
    let mut g = gic(GicVersion::V2, 4, 64);
    assert_eq!(
        rd(&mut g, 2, 0x800),
        0x0404_0404,
        "SGIs read the caller's bit"
    );
    assert_eq!(g.dist_read(3, 0x81F, Byte).unwrap(), 0x08);
    g.dist_write(2, 0x800, Byte, 0xFF).unwrap();
    assert_eq!(g.dist_read(2, 0x800, Byte).unwrap(), 0x04, "read-only");
    assert_eq!(
        g.dist_read(0, 0x820, Byte).unwrap(),
        0x01,
        "SPIs reset to CPU 0"
    );
    g.dist_write(0, 0x821, Byte, 0xF4).unwrap();
    assert_eq!(
        g.dist_read(0, 0x821, Byte).unwrap(),
        0x04,
        "targets beyond 4 vCPUs dropped"
    );
    wr(&mut g, 0, 0x824, 0x0102_0408);
    assert_eq!(rd(&mut g, 0, 0x824), 0x0102_0408);
    // Routing: lowest set bit. SPI 33 -> vCPU 2.
    wr(&mut g, 0, 0, 1);
    wr(&mut g, 0, 0x104, 1 << 1);
    g.dist_write(0, 0x821, Byte, 0x0C).unwrap();
    assert_eq!(g.inject(0, 33), VcpuSet::single(2));
    assert!(g.has_pending(2) && !g.has_pending(3));
    // A zero mask routes nowhere.
    g.dist_write(0, 0x821, Byte, 0).unwrap();
    assert!((0..4).all(|v| !g.has_pending(v)));
}

#[test]
fn v2_sgir_filters() {
    let decode = |v, sender| decode_gicd_sgir(v, sender, 4);
    assert_eq!(
        decode(0x00A0_0003, 0),
        Some((3, VcpuSet(0b0000))),
        "CPUs 5 and 7 do not exist"
    );
    assert_eq!(decode(0x0006_0003, 0), Some((3, VcpuSet(0b0110))));
    assert_eq!(
        decode(0x0100_0001, 2),
        Some((1, VcpuSet(0b1011))),
        "all but self"
    );
    assert_eq!(
        decode(0x02FF_0009, 2),
        Some((9, VcpuSet(0b0100))),
        "self only"
    );
    assert_eq!(decode(0x0300_0001, 2), None, "reserved filter");
}

#[test]
fn v2_sgir_marks_only_its_targets_for_a_fill() {
    let mut g = gic(GicVersion::V2, 4, 32);
    wr(&mut g, 0, 0, 1);
    wr(&mut g, 1, 0x100, 0xFFFF);
    for v in 0..4 {
        g.fill_lrs(v, 4);
        assert!(!g.fill_needed(v), "vCPU {v} fresh after its fill");
    }
    // vCPU 0 sends SGI 1 to vCPU 1 only.
    assert_eq!(wr(&mut g, 0, 0xF00, 0x0002_0001), VcpuSet::single(1));
    assert!(g.fill_needed(1), "the target must refill to see its SGI");
    assert!(
        !g.fill_needed(0) && !g.fill_needed(2) && !g.fill_needed(3),
        "the sender and the others keep their list registers"
    );
    let fill = g.fill_lrs(1, 4);
    assert!(fill.lrs.iter().any(|e| e.intid == 1 && e.source_cpu == 0));
    // Any other distributor write still marks every vCPU.
    wr(&mut g, 0, 0x100, 0xFFFF);
    assert!((0..4).all(|v| g.fill_needed(v)));
}

#[test]
fn v2_sgi_sources_are_tracked_per_sender() {
    let mut g = gic(GicVersion::V2, 4, 32);
    wr(&mut g, 0, 0, 1);
    wr(&mut g, 1, 0x100, 0xFFFF);
    // vCPUs 0 and 2 both send SGI 1 to vCPU 1.
    assert_eq!(wr(&mut g, 0, 0xF00, 0x0002_0001), VcpuSet::single(1));
    assert_eq!(wr(&mut g, 2, 0xF00, 0x0002_0001), VcpuSet::single(1));
    assert_eq!(
        g.dist_read(1, 0xF21, Byte).unwrap(),
        0b101,
        "SPENDSGIR: both sources"
    );
    assert_eq!(
        rd(&mut g, 1, 0xF10),
        0x0000_0500,
        "CPENDSGIR reads the same"
    );
    assert_eq!(
        rd(&mut g, 1, 0x200) & 0xFFFF,
        1 << 1,
        "ISPENDR0 shows SGI 1 pending"
    );
    assert_eq!(rd(&mut g, 0, 0xF20), 0, "nothing pending on the senders");
    // One instance at a time, lowest source first.
    let fill = g.fill_lrs(1, 4);
    assert_eq!(fill.lrs.len(), 1);
    assert_eq!((fill.lrs[0].intid, fill.lrs[0].source_cpu), (1, 0));
    assert!(
        fill.lrs[0].eoi_maintenance,
        "the other source waits for this one's end"
    );
    assert_eq!(
        LrEntry::from_gich_lr(fill.lrs[0].to_gich_lr()).source_cpu,
        0
    );
    g.sync_lrs(1, &back(&fill, &[LrState::Active]));
    let fill = g.fill_lrs(1, 4);
    assert_eq!(fill.lrs.len(), 1);
    assert_eq!(
        (fill.lrs[0].state, fill.lrs[0].source_cpu),
        (LrState::Active, 0)
    );
    g.sync_lrs(1, &back(&fill, &[LrState::Invalid]));
    let fill = g.fill_lrs(1, 4);
    assert_eq!(
        (fill.lrs[0].state, fill.lrs[0].source_cpu),
        (LrState::Pending, 2)
    );
    assert!(!fill.lrs[0].eoi_maintenance);
    g.sync_lrs(1, &back(&fill, &[LrState::Invalid]));
    assert!(!g.has_pending(1));
    // CPENDSGIR clears one source only.
    wr(&mut g, 0, 0xF00, 0x0002_0004);
    wr(&mut g, 3, 0xF00, 0x0002_0004);
    g.dist_write(1, 0xF14, Byte, 0b1).unwrap();
    assert_eq!(g.dist_read(1, 0xF24, Byte).unwrap(), 0b1000);
    // Filter 1 from vCPU 3: everyone but 3.
    assert_eq!(
        wr(&mut g, 3, 0xF00, 0x0100_0002),
        VcpuSet(0b0010),
        "only vCPU 1 has SGIs enabled"
    );
    assert_eq!(g.dist_read(0, 0xF22, Byte).unwrap(), 0b1000);
    assert_eq!(g.dist_read(2, 0xF22, Byte).unwrap(), 0b1000);
    assert_eq!(g.dist_read(3, 0xF22, Byte).unwrap(), 0);
}

// ---- GICv3 SGIs ----

#[test]
fn sgi1r_target_lists_in_several_clusters() {
    let v = |aff1: u64, tl: u64| (5 << 24) | (aff1 << 16) | tl;
    assert_eq!(decode_icc_sgi1r(v(0, 0b1001), 0, 40), (5, VcpuSet(0b1001)));
    assert_eq!(
        decode_icc_sgi1r(v(1, 0b101), 0, 40).1,
        VcpuSet(1 << 16 | 1 << 18)
    );
    assert_eq!(decode_icc_sgi1r(v(2, 1 << 7), 0, 40).1, VcpuSet(1 << 39));
    assert_eq!(
        decode_icc_sgi1r(v(2, 1 << 8), 0, 40).1,
        VcpuSet::EMPTY,
        "vCPU 40 does not exist"
    );
    assert_eq!(decode_icc_sgi1r(v(3, 0xFFFF), 0, 40).1, VcpuSet::EMPTY);
    assert_eq!(
        decode_icc_sgi1r(v(0, 0xFFFF), 0, 4).1,
        VcpuSet(0xF),
        "absent targets dropped"
    );
    // RS = 1 names Aff0 16..31: no kestrel vCPU has those.
    assert_eq!(decode_icc_sgi1r((1 << 44) | 1, 0, 40).1, VcpuSet::EMPTY);
    // RS = 0 with Aff2 or Aff3 set: another cluster, absent.
    assert_eq!(decode_icc_sgi1r((1 << 32) | 1, 0, 40).1, VcpuSet::EMPTY);
    assert_eq!(decode_icc_sgi1r((1 << 48) | 1, 0, 40).1, VcpuSet::EMPTY);
}

#[test]
fn sgi1r_irm_broadcasts_to_all_but_self() {
    let irm = 1u64 << 40;
    assert_eq!(
        decode_icc_sgi1r(irm | (3 << 24) | 0xFFFF, 2, 5),
        (3, VcpuSet(0b11011))
    );
    assert_eq!(decode_icc_sgi1r(irm, 0, 1).1, VcpuSet::EMPTY);
    assert_eq!(
        decode_icc_sgi1r(irm, 17, 20).1,
        VcpuSet(0xF_FFFF & !(1 << 17))
    );
    // Through the model: every other vCPU gets it pending and is kicked.
    let mut g = linux_v3(4, 32);
    for v in 0..4 {
        rwr(&mut g, sgi_base(v) + 0x100, 0xFFFF);
    }
    let kicks = g.write_icc_sgi(1, SgiRegister::Sgi1r, irm | (7 << 24));
    assert_eq!(kicks, VcpuSet(0b1101));
    for v in [0, 2, 3] {
        assert_eq!(rrd(&mut g, sgi_base(v) + 0x200), 1 << 7, "vCPU {v}");
        let fill = g.fill_lrs(v, 4);
        assert_eq!(fill.lrs[0].intid, 7);
        assert_eq!(fill.lrs[0].source_cpu, 0, "GICv3 has no SGI source");
        assert!(fill.lrs[0].group1);
    }
    assert_eq!(rrd(&mut g, sgi_base(1) + 0x200), 0, "not the sender");
}

#[test]
fn sgi_registers_respect_groups() {
    let mut g = linux_v3(2, 32); // all group 1
    rwr(&mut g, sgi_base(1) + 0x100, 0xFFFF);
    assert!(g
        .write_icc_sgi(0, SgiRegister::Sgi0r, 1 << 1 | 2 << 24)
        .is_empty());
    assert!(g
        .write_icc_sgi(0, SgiRegister::Asgi1r, 1 << 1 | 2 << 24)
        .is_empty());
    assert_eq!(
        rrd(&mut g, sgi_base(1) + 0x200),
        0,
        "group 1 SGI not made pending by SGI0R/ASGI1R"
    );
    rwr(&mut g, sgi_base(1) + 0x80, 0xFFFF_FFFF & !(1 << 2)); // SGI 2 -> group 0
    assert_eq!(
        g.write_icc_sgi(0, SgiRegister::Sgi0r, 1 << 1 | 2 << 24),
        VcpuSet::single(1)
    );
    let fill = g.fill_lrs(1, 4);
    assert!(!fill.lrs[0].group1);
    // A disabled SGI is made pending but nobody is kicked.
    rwr(&mut g, sgi_base(1) + 0x180, 1 << 9);
    assert!(g
        .write_icc_sgi(0, SgiRegister::Sgi1r, 1 << 1 | 9 << 24)
        .is_empty());
    assert_eq!(rrd(&mut g, sgi_base(1) + 0x200) & (1 << 9), 1 << 9);
    // GICv2 VMs ignore the system register path.
    let mut g2 = gic(GicVersion::V2, 2, 32);
    assert!(g2.write_icc_sgi(0, SgiRegister::Sgi1r, 1 << 40).is_empty());
}

// ---- list registers ----

#[test]
fn fill_picks_highest_priority_and_reports_overflow() {
    let mut g = linux_v3(1, 64);
    wr(&mut g, 0, 0x104, 0xFFFF_FFFF);
    for (intid, prio) in [
        (40u32, 0xA0u64),
        (41, 0x20),
        (42, 0x80),
        (43, 0x20),
        (44, 0xF0),
    ] {
        g.dist_write(0, 0x400 + intid as u64, Byte, prio).unwrap();
        g.inject(0, intid);
    }
    let fill = g.fill_lrs(0, 3);
    let got: Vec<u32> = fill.lrs.iter().map(|e| e.intid).collect();
    assert_eq!(got, [41, 43, 42], "by priority, ties by INTID");
    assert!(fill.overflow && fill.npie);
    assert_eq!(fill.lrs[0].priority, 0x20);
    // The guest takes 41 (active) and is done with 43; 42 stays pending.
    g.sync_lrs(
        0,
        &back(
            &fill,
            &[LrState::Active, LrState::Invalid, LrState::Pending],
        ),
    );
    let fill = g.fill_lrs(0, 3);
    let got: Vec<(u32, LrState)> = fill.lrs.iter().map(|e| (e.intid, e.state)).collect();
    assert_eq!(
        got,
        [
            (41, LrState::Active),
            (42, LrState::Pending),
            (40, LrState::Pending)
        ]
    );
    assert!(fill.overflow, "44 still waits");
    // All LRs active with more waiting: they ask for EOI maintenance instead of NPIE.
    g.sync_lrs(
        0,
        &back(&fill, &[LrState::Active, LrState::Active, LrState::Active]),
    );
    let fill = g.fill_lrs(0, 3);
    assert!(fill.overflow && !fill.npie);
    assert!(fill
        .lrs
        .iter()
        .all(|e| e.state == LrState::Active && e.eoi_maintenance));
}

/// A hostile guest with interrupts masked makes more interrupts pending and
/// active than there are list registers (GICv3: SGIs through its
/// redistributor; GICv2: PPIs through the banked distributor registers).
/// Every entry is then pending+active: NPIE would assert the maintenance
/// interrupt at once on every entry (no LR is in the Pending state) and
/// hold the pCPU in an entry/maintenance loop. The fill must ask for EOI
/// maintenance instead, and stay stable over exits the guest makes no
/// progress in.
#[test]
fn pending_active_overflow_never_sets_npie() {
    for version in [GicVersion::V3, GicVersion::V2] {
        let mut g = gic(version, 2, 32);
        wr(&mut g, 0, 0x0, 3);
        // GICv3: SGIs 0-4 in the redistributor's SGI_base frame; GICv2:
        // PPIs 16-20 in the banked distributor registers.
        let v3 = version == GicVersion::V3;
        if v3 {
            rwr(&mut g, 0x14, 0); // wake the redistributor
        }
        for off in [0x100, 0x200, 0x300] {
            if v3 {
                rwr(&mut g, sgi_base(0) + off, 0x1f);
            } else {
                wr(&mut g, 0, off, 0x1f << 16);
            }
        }
        for round in 0..3 {
            let fill = g.fill_lrs(0, 4);
            assert_eq!(fill.lrs.len(), 4, "{version:?} round {round}");
            assert!(fill.overflow, "{version:?}: the fifth one waits");
            assert!(
                fill.lrs.iter().all(|e| e.state == LrState::PendingActive),
                "{version:?}: {:?}",
                fill.lrs
            );
            assert!(!fill.npie, "{version:?}: NPIE with no Pending entry");
            assert!(fill.lrs.iter().all(|e| e.eoi_maintenance));
            // The guest (masked) changes nothing; the exit syncs it back.
            g.sync_lrs(0, &back(&fill, &[LrState::PendingActive; 4]));
        }
        // Progress is the guest's: once it has handled one of them for good
        // (taken its pending part and deactivated it), the fifth gets in.
        let fill = g.fill_lrs(0, 4);
        let mut states = [LrState::PendingActive; 4];
        states[0] = LrState::Invalid;
        g.sync_lrs(0, &back(&fill, &states));
        let fill = g.fill_lrs(0, 4);
        assert_eq!(fill.lrs.len(), 4);
        assert!(!fill.overflow && !fill.npie, "{version:?}");
    }
}

#[test]
fn lr_round_trip_edge() {
    let mut g = linux_v3(2, 32);
    wr(&mut g, 0, 0x104, 1 << 3);
    g.dist_write(0, 0x6000 + 8 * 35, Dword, 1).unwrap();
    wr(&mut g, 0, 0xC08, 2 << 6); // SPI 35 edge
    assert_eq!(g.inject(0, 35), VcpuSet::single(1));
    let fill = g.fill_lrs(1, 4);
    assert_eq!(fill.lrs.len(), 1);
    assert_eq!(fill.lrs[0].state, LrState::Pending);
    assert!(
        !fill.lrs[0].eoi_maintenance,
        "edge: no need to hear of the EOI"
    );
    assert!(!g.has_pending(1), "in flight: not handed out twice");
    assert_eq!(rd(&mut g, 0, 0x204), 1 << 3, "reads still show it pending");
    // Guest acks; a new edge arrives meanwhile.
    g.inject(0, 35);
    g.sync_lrs(1, &back(&fill, &[LrState::Active]));
    let fill = g.fill_lrs(1, 4);
    assert_eq!(fill.lrs[0].state, LrState::PendingActive);
    g.sync_lrs(1, &back(&fill, &[LrState::Active])); // EOI'd the first, took the second
    let fill = g.fill_lrs(1, 4);
    assert_eq!(fill.lrs[0].state, LrState::Active);
    g.sync_lrs(1, &back(&fill, &[LrState::Invalid]));
    assert!(g.fill_lrs(1, 4).lrs.is_empty(), "done: gone");
    g.sync_lrs(1, &[]);
    assert_eq!(rd(&mut g, 0, 0x204) | rd(&mut g, 0, 0x304), 0);
}

#[test]
fn lr_level_interrupt_repends_while_line_high() {
    let mut g = linux_v3(1, 32);
    rwr(&mut g, sgi_base(0) + 0x100, 1 << VTIMER_PPI);
    g.set_level(0, VTIMER_PPI, true);
    let fill = g.fill_lrs(0, 4);
    assert_eq!(fill.lrs[0].intid, VTIMER_PPI);
    assert!(fill.lrs[0].eoi_maintenance, "level: the EOI must be heard");
    g.sync_lrs(0, &back(&fill, &[LrState::Active]));
    let fill = g.fill_lrs(0, 4);
    assert_eq!(
        fill.lrs[0].state,
        LrState::Active,
        "the line alone does not make an active one pending"
    );
    g.sync_lrs(0, &back(&fill, &[LrState::Invalid]));
    let fill = g.fill_lrs(0, 4);
    assert_eq!(
        fill.lrs[0].state,
        LrState::Pending,
        "EOI with the line high re-pends"
    );
    g.set_level(0, VTIMER_PPI, false);
    g.sync_lrs(0, &back(&fill, &[LrState::Pending]));
    assert!(
        g.fill_lrs(0, 4).lrs.is_empty(),
        "line dropped before the guest took it"
    );
    g.sync_lrs(0, &[]);
    assert!(!g.has_pending(0));
}

#[test]
fn clearing_state_withdraws_an_lr() {
    let mut g = linux_v3(2, 32);
    wr(&mut g, 0, 0x104, 1 << 4);
    g.dist_write(0, 0x6000 + 8 * 36, Dword, 1).unwrap();
    g.inject(1, 36);
    let fill = g.fill_lrs(1, 4);
    assert_eq!(
        wr(&mut g, 0, 0x284, 1 << 4),
        VcpuSet::single(1),
        "the holder is kicked"
    );
    g.sync_lrs(1, &back(&fill, &[LrState::Pending]));
    assert!(!g.has_pending(1));
    assert_eq!(rd(&mut g, 0, 0x204), 0);
    // ICACTIVER while in flight active.
    g.inject(1, 36);
    let fill = g.fill_lrs(1, 4);
    g.sync_lrs(1, &back(&fill, &[LrState::Active]));
    let fill = g.fill_lrs(1, 4);
    wr(&mut g, 0, 0x384, 1 << 4);
    g.sync_lrs(1, &back(&fill, &[LrState::Active]));
    assert_eq!(rd(&mut g, 0, 0x304), 0);
    assert!(g.fill_lrs(1, 4).lrs.is_empty());
}

#[test]
fn has_pending_needs_enable_group_and_distributor() {
    let mut g = gic(GicVersion::V3, 1, 32);
    rwr(&mut g, 0x14, 0);
    assert!(g.inject(0, 20).is_empty());
    assert!(!g.has_pending(0), "PPI disabled");
    assert!(
        rwr(&mut g, sgi_base(0) + 0x100, 1 << 20).is_empty(),
        "group 0 not enabled"
    );
    assert!(!g.has_pending(0));
    rwr(&mut g, sgi_base(0) + 0x80, 1 << 20);
    wr(&mut g, 0, 0, 0x1);
    assert!(!g.has_pending(0), "group 1 interrupt, only group 0 enabled");
    assert_eq!(
        wr(&mut g, 0, 0, 0x2),
        VcpuSet::single(0),
        "enabling the distributor kicks"
    );
    assert!(g.has_pending(0));
    assert!(!g.has_pending(5), "unknown vCPU");
    rwr(&mut g, sgi_base(0) + 0x180, 1 << 20);
    assert!(!g.has_pending(0));
}

#[test]
fn hw_mapped_interrupts() {
    let mut g = linux_v3(1, 32);
    assert!(!g.set_hw_mapping(0, 3, Some(3)), "SGIs cannot be linked");
    assert!(!g.set_hw_mapping(0, 27, Some(1 << 13)));
    assert!(g.set_hw_mapping(0, VTIMER_PPI, Some(27)));
    rwr(&mut g, sgi_base(0) + 0x100, 1 << VTIMER_PPI);
    g.set_level(0, VTIMER_PPI, true);
    let fill = g.fill_lrs(0, 4);
    let e = fill.lrs[0];
    assert!(e.hw && e.pintid == 27 && !e.eoi_maintenance);
    assert_eq!(e.to_ich_lr(), 27 | 27 << 32 | 1 << 60 | 1 << 61 | 1 << 62);
}

#[test]
fn ich_lr_encoding() {
    let e = LrEntry {
        intid: 0x2A,
        priority: 0xA0,
        group1: true,
        state: LrState::PendingActive,
        source_cpu: 0,
        hw: false,
        pintid: 0,
        eoi_maintenance: true,
    };
    let v = e.to_ich_lr();
    assert_eq!(v, 0x2A | 0xA0 << 48 | 1 << 60 | 3 << 62 | 1 << 41);
    assert_eq!(LrEntry::from_ich_lr(v), e);
    let hw = LrEntry {
        hw: true,
        pintid: 0x1FFF,
        eoi_maintenance: false,
        state: LrState::Active,
        ..e
    };
    assert_eq!(
        hw.to_ich_lr(),
        0x2A | 0x1FFF << 32 | 0xA0 << 48 | 1 << 60 | 1 << 61 | 2 << 62
    );
    assert_eq!(LrEntry::from_ich_lr(hw.to_ich_lr()), hw);
    assert_eq!(LrEntry::from_ich_lr(1 << 62 | 1023).state, LrState::Pending);
    assert_eq!(LrEntry::from_ich_lr(0).state, LrState::Invalid);
}

#[test]
fn gich_lr_encoding() {
    let e = LrEntry {
        intid: 5,
        priority: 0xA8,
        group1: false,
        state: LrState::Pending,
        source_cpu: 6,
        hw: false,
        pintid: 0,
        eoi_maintenance: true,
    };
    let v = e.to_gich_lr();
    assert_eq!(v, 5 | 6 << 10 | 1 << 19 | (0xA8 >> 3) << 23 | 1 << 28);
    assert_eq!(LrEntry::from_gich_lr(v), e);
    let hw = LrEntry {
        intid: 0x3FF,
        hw: true,
        pintid: 0x3FF,
        source_cpu: 0,
        eoi_maintenance: false,
        group1: true,
        state: LrState::Active,
        ..e
    };
    assert_eq!(
        hw.to_gich_lr(),
        0x3FF | 0x3FF << 10 | 0x15 << 23 | 2 << 28 | 1 << 30 | 1 << 31
    );
    assert_eq!(LrEntry::from_gich_lr(hw.to_gich_lr()), hw);
    let low_bits = LrEntry {
        priority: 0x07,
        ..lr(40, LrState::Pending)
    };
    assert_eq!(
        LrEntry::from_gich_lr(low_bits.to_gich_lr()).priority,
        0,
        "5 priority bits"
    );
}

// ---- access checking ----

#[test]
fn unsupported_widths_are_refused() {
    let mut g = gic(GicVersion::V3, 2, 32);
    assert_eq!(
        g.dist_read(0, 0x0, Byte),
        Err(MmioError::BadAccess),
        "CTLR is word-only"
    );
    assert_eq!(g.dist_read(0, 0x400, Half), Err(MmioError::BadAccess));
    assert_eq!(
        g.dist_read(0, 0x102, Word),
        Err(MmioError::BadAccess),
        "misaligned"
    );
    assert_eq!(g.dist_read(0, 0x100, Dword), Err(MmioError::BadAccess));
    assert_eq!(
        g.dist_read(0, 0x6104, Dword),
        Err(MmioError::BadAccess),
        "misaligned IROUTER"
    );
    assert_eq!(g.dist_read(2, 0x0, Word), Err(MmioError::NoSuchVcpu));
    assert_eq!(g.dist_read(0, 0xFFFC, Dword), Err(MmioError::OutOfRange));
    assert_eq!(g.dist_read(0, u64::MAX, Byte), Err(MmioError::OutOfRange));
    assert_eq!(g.redist_read(0x14, Byte), Err(MmioError::BadAccess));
    assert_eq!(g.stats().bad_access, 9);
    assert_eq!(g.dist_read(0, 0x20, Word), Ok(0), "reserved: RAZ");
    assert_eq!(
        g.redist_write(0x1_0F00, Word, 1),
        Ok(VcpuSet::EMPTY),
        "reserved: WI"
    );
    assert_eq!(g.stats().raz_wi, 2);
}

/// xorshift64*: deterministic randomness for the hostile test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Checks the model's invariants: nothing handed to two vCPUs at once, no
/// duplicate LR, no more LRs than asked for.
fn check_fill(fills: &[(usize, LrFill)], nr_lrs: usize) {
    let mut seen_spis = Vec::new();
    for (_, fill) in fills {
        assert!(fill.lrs.len() <= nr_lrs);
        // NPIE only with an entry in the Pending state, else its maintenance
        // interrupt would fire on entry with no guest progress.
        assert!(!fill.npie || fill.lrs.iter().any(|e| e.state == LrState::Pending));
        for (i, e) in fill.lrs.iter().enumerate() {
            assert!(e.state != LrState::Invalid);
            assert!(
                !fill.lrs[..i].iter().any(|o| o.intid == e.intid),
                "duplicate INTID {}",
                e.intid
            );
            if e.intid >= 32 {
                assert!(
                    !seen_spis.contains(&e.intid),
                    "SPI {} in two vCPUs' LRs",
                    e.intid
                );
                seen_spis.push(e.intid);
            }
        }
    }
}

#[test]
fn hostile_accesses_never_panic() {
    let states = [
        LrState::Invalid,
        LrState::Pending,
        LrState::Active,
        LrState::PendingActive,
    ];
    let widths = [Byte, Half, Word, Dword];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (version, vcpus) in [
        (GicVersion::V3, 4),
        (GicVersion::V2, 4),
        (GicVersion::V3, 16),
        (GicVersion::V2, 8),
    ] {
        let mut g = gic(version, vcpus, 96);
        let dist = g.dist_size();
        let redist = g.redist_size();
        // Every offset with every width, read and written, from random vCPUs.
        for off in 0..dist + 16 {
            for w in widths {
                let vcpu = (rng.next() % (vcpus as u64 + 1)) as usize;
                if let Ok(v) = g.dist_read(vcpu, off, w) {
                    assert_eq!(w.mask(v), v, "{version:?} read {off:#x} wider than {w:?}");
                    assert!(off.is_multiple_of(w.bytes()));
                }
                let value = rng.next();
                if g.dist_write(vcpu, off, w, value).is_ok() {
                    assert!(vcpu < vcpus);
                }
            }
        }
        for off in (0..redist + 0x100).step_by(1 + (rng.next() % 3) as usize) {
            for w in widths {
                if let Ok(v) = g.redist_read(off, w) {
                    assert_eq!(w.mask(v), v);
                }
                let _ = g.redist_write(off, w, rng.next());
            }
        }
        for _ in 0..2000 {
            let _ = g.dist_read(0, rng.next(), widths[(rng.next() % 4) as usize]);
            let _ = g.redist_write(rng.next(), widths[(rng.next() % 4) as usize], rng.next());
        }
        // Now interleave the rest of the API with random register traffic.
        let nr_lrs = 1 + (rng.next() % 6) as usize;
        for round in 0..3000 {
            let vcpu = (rng.next() % (vcpus as u64 + 2)) as usize;
            let intid = (rng.next() % 1100) as u32;
            match rng.next() % 8 {
                0 => {
                    g.set_level(vcpu, intid, rng.next() & 1 != 0);
                }
                1 => {
                    g.inject(vcpu, intid);
                }
                2 => {
                    let reg = [SgiRegister::Sgi1r, SgiRegister::Asgi1r, SgiRegister::Sgi0r]
                        [(rng.next() % 3) as usize];
                    g.write_icc_sgi(vcpu, reg, rng.next());
                }
                3 => {
                    // Bias towards real registers.
                    let off = [
                        0x0, 0x80, 0x100, 0x180, 0x200, 0x280, 0x300, 0x380, 0x400, 0x800, 0xC00,
                        0xF00, 0xF10, 0xF20, 0x6100,
                    ][(rng.next() % 15) as usize]
                        + (rng.next() % 0x40) * 4;
                    let _ = g.dist_write(vcpu, off.min(dist - 4), Word, rng.next());
                }
                4 => {
                    let _ = g.set_hw_mapping(
                        vcpu,
                        intid,
                        (rng.next() & 1 != 0).then_some(intid as u16),
                    );
                }
                _ => {
                    // Every vCPU enters, the guest changes LR states at random, every vCPU exits.
                    let fills: Vec<(usize, LrFill)> =
                        (0..vcpus).map(|v| (v, g.fill_lrs(v, nr_lrs))).collect();
                    check_fill(&fills, nr_lrs);
                    for (v, fill) in &fills {
                        let mut lrs: Vec<LrEntry> = fill
                            .lrs
                            .iter()
                            .map(|e| LrEntry {
                                state: states[(rng.next() % 4) as usize],
                                ..*e
                            })
                            .collect();
                        if round % 7 == 0 {
                            lrs.push(lr((rng.next() % 1100) as u32, LrState::Active)); // junk
                            lrs.truncate(lrs.len().saturating_sub(2)); // and omissions
                        }
                        g.sync_lrs(*v, &lrs);
                    }
                }
            }
            for v in 0..vcpus + 1 {
                let _ = g.has_pending(v);
            }
        }
        assert!(g.stats().raz_wi > 0 && g.stats().bad_access > 0);
    }
}

// ---- backend-generated SGIs (kestrel PV IPI) ----

#[test]
fn raise_sgi_coalesces_and_kicks_on_both_versions() {
    let mut g = linux_v3(4, 32);
    rwr(&mut g, sgi_base(2) + 0x100, 1 << 15);
    assert_eq!(g.raise_sgi(0, 2, 15), Some((false, VcpuSet::single(2))));
    assert_eq!(
        g.raise_sgi(1, 2, 15),
        Some((true, VcpuSet::EMPTY)),
        "coalesced"
    );
    assert!(g.has_pending(2));
    let fill = g.fill_lrs(2, 4);
    assert_eq!(fill.lrs[0].intid, 15);
    assert_eq!(g.raise_sgi(0, 4, 15), None, "no vCPU 4");
    assert_eq!(g.raise_sgi(9, 0, 15), None, "no source 9");

    let mut g = gic(GicVersion::V2, 4, 32);
    wr(&mut g, 0, 0, 1);
    wr(&mut g, 1, 0x100, 1 << 15);
    assert_eq!(g.raise_sgi(3, 1, 15), Some((false, VcpuSet::single(1))));
    assert_eq!(g.raise_sgi(3, 1, 15), Some((true, VcpuSet::EMPTY)));
    assert_eq!(
        g.raise_sgi(0, 1, 15),
        Some((false, VcpuSet::single(1))),
        "another source"
    );
    let fill = g.fill_lrs(1, 4);
    assert_eq!((fill.lrs[0].intid, fill.lrs[0].source_cpu), (15, 0));
}

/// `fill_needed` is false only when a fill would choose exactly what the
/// last one did: random register traffic, injections, lines, SGIs and
/// guest-side LR changes, with refills skipped whenever it says so, must
/// never leave a vCPU with list registers that differ from a fresh fill.
#[test]
fn fill_needed_is_false_only_when_a_fill_would_not_change() {
    let states = [
        LrState::Invalid,
        LrState::Pending,
        LrState::Active,
        LrState::PendingActive,
    ];
    let mut rng = Rng(0x5EED_F111_0000_0001);
    for (version, vcpus) in [(GicVersion::V3, 4), (GicVersion::V2, 4)] {
        let mut g = gic(version, vcpus, 64);
        // Enabled distributor, everything enabled, so fills are not empty.
        wr(&mut g, 0, 0x0, 3);
        for n in 0..3u64 {
            let _ = g.dist_write(0, 0x100 + 4 * n, Word, 0xFFFF_FFFF);
        }
        if version == GicVersion::V3 {
            for v in 0..vcpus {
                rwr(&mut g, v as u64 * 0x2_0000 + 0x14, 0);
                rwr(&mut g, sgi_base(v) + 0x100, 0xFFFF_FFFF);
            }
        }
        let mut live: Vec<Option<LrFill>> = vec![None; vcpus];
        let (mut skipped, mut refilled) = (0, 0);
        for _ in 0..20_000 {
            let vcpu = (rng.next() % vcpus as u64) as usize;
            let intid = 16 + (rng.next() % 80) as u32;
            match rng.next() % 10 {
                0 => {
                    g.set_level(vcpu, intid, rng.next() & 1 != 0);
                }
                1 => {
                    g.inject(vcpu, intid);
                }
                2 if version == GicVersion::V3 => {
                    g.write_icc_sgi(vcpu, SgiRegister::Sgi1r, rng.next() & 0xF_00FF);
                }
                3 => {
                    let off = [0x100, 0x180, 0x200, 0x280, 0x300, 0x380, 0x400]
                        [(rng.next() % 7) as usize]
                        + 4 * (rng.next() % 3);
                    let _ = g.dist_write(vcpu, off, Word, rng.next());
                }
                4 => {
                    // Reads change nothing.
                    let _ = g.dist_read(vcpu, (rng.next() % 0x1000) & !3, Word);
                }
                5 => {
                    // The guest changes its LRs: the backend syncs them.
                    if let Some(fill) = live[vcpu].take() {
                        let lrs: Vec<LrEntry> = fill
                            .lrs
                            .iter()
                            .map(|e| LrEntry {
                                state: states[(rng.next() % 4) as usize],
                                ..*e
                            })
                            .collect();
                        g.sync_lrs(vcpu, &lrs);
                    }
                }
                _ => {
                    // An entry: skip the fill when allowed, else fill. A
                    // skipped fill must equal what a fill would give.
                    // The reference: a fill that scans every SPI.
                    let mut probe = g.clone();
                    probe.spis_quiet = false;
                    let fresh = probe.fill_lrs(vcpu, 4);
                    if !g.fill_needed(vcpu) && live[vcpu].is_some() {
                        assert_eq!(
                            Some(&fresh),
                            live[vcpu].as_ref(),
                            "{version:?} vCPU {vcpu}: skipped fill is stale"
                        );
                        skipped += 1;
                    } else {
                        let fill = g.fill_lrs(vcpu, 4);
                        assert_eq!(
                            fill, fresh,
                            "{version:?} vCPU {vcpu}: SPI scan skipped wrongly"
                        );
                        live[vcpu] = Some(fill);
                        assert!(!g.fill_needed(vcpu));
                        refilled += 1;
                    }
                }
            }
        }
        assert!(
            skipped > 100 && refilled > 100,
            "{skipped} skipped, {refilled} refilled"
        );
    }
}

/// The "fill needed" flags are shared with whoever holds [`Vgic::fill_hints`]
/// (the backend's entry reads them without the lock), a clone of the model
/// gets its own, and a restart's new model takes the old flags, all set.
#[test]
fn fill_hints_are_shared_with_the_backend_but_not_with_clones() {
    let mut g = gic(GicVersion::V3, 2, 64);
    let hints = g.fill_hints();
    assert!(hints.stale(0) && hints.stale(1) && hints.stale(7));
    g.fill_lrs(0, 4);
    assert!(!hints.stale(0) && hints.stale(1));
    // A what-if copy's fill does not clear the model's flag.
    g.fill_lrs(1, 4);
    let mut probe = g.clone();
    wr(&mut g, 0, 0x0, 3);
    assert!(
        hints.stale(0) && hints.stale(1),
        "distributor change marks all"
    );
    g.fill_lrs(0, 4);
    probe.fill_lrs(1, 4);
    assert!(hints.stale(1), "a clone's fill cleared the shared flag");
    // A new model (a restart) takes the flags, every vCPU stale.
    let mut fresh = gic(GicVersion::V3, 2, 64);
    assert!(fresh.use_fill_hints(hints.clone()));
    assert!(hints.stale(0) && hints.stale(1));
    fresh.fill_lrs(0, 4);
    assert!(!hints.stale(0));
    // Flags for another number of vCPUs are refused.
    let mut other = gic(GicVersion::V3, 3, 64);
    assert!(!other.use_fill_hints(hints.clone()));
}
