//! The ACPI reader (`acpi`, `acpi::arm64`): arbitrary memory behind an
//! RSDP is read or refused, never a panic, and what is read is sane (every
//! table listed lies in the memory, those it reads add up to 0, CPUs are unique,
//! sorted affinity values, the GIC frames do not overlap, a console has an
//! address). Tables written from fuzzed boards (by this file's own writer)
//! and then patched and resealed read back what was written when left
//! intact: the CPUs (the lowest `MAX_CPUS` enabled MPIDRs), the GIC, the
//! UART and the PSCI conduit.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::host::acpi::{self, arm64::Ppis, PhysMem};
use kernel::host::board::{IrqChip, PsciConduit, UartKind};
use libfuzzer_sys::fuzz_target;

const PPIS: Ppis = Ppis {
    el2_timer: 26,
    vtimer: 27,
    maintenance: 25,
};

/// Byte blocks at chosen physical addresses.
struct Mem(Vec<(u64, Vec<u8>)>);

impl PhysMem for Mem {
    fn read(&self, pa: u64, len: usize) -> Option<&[u8]> {
        self.0.iter().find_map(|(base, b)| {
            let off = usize::try_from(pa.checked_sub(*base)?).ok()?;
            b.get(off..off.checked_add(len)?)
        })
    }
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// Reads the board at 0x1000 and checks what was read.
fn read(mem: &Mem) -> Option<acpi::arm64::Arm64Acpi> {
    let a = match acpi::arm64::parse(mem, 0x1000, PPIS) {
        Ok(a) => a,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return None;
        }
    };
    // Everything listed lies in the memory; the RSDP, the XSDT and the
    // tables kestrel reads add up to 0 (others may not: they are ignored).
    for (i, (pa, len)) in a.ranges().enumerate() {
        let b = mem.read(pa, len as usize).expect("a range the reader read");
        let used = [b"APIC", b"GTDT", b"SPCR", b"FACP"]
            .iter()
            .any(|s| b[..4] == s[..]);
        if i < 2 || used {
            assert_eq!(sum(b), 0, "table at {pa:#x} does not add up");
        }
    }
    assert!(!a.cpus.is_empty());
    for w in a.cpus.windows(2) {
        assert!(w[0].hw_id < w[1].hw_id);
    }
    for c in &a.cpus {
        assert_eq!(c.hw_id & !0xff_00ff_ffff, 0);
    }
    match a.irqchip {
        IrqChip::GicV3 {
            gicd,
            gicr,
            gicr_size,
        } => {
            assert!(gicd != 0 && gicr != 0 && gicr_size != 0);
            assert!(!overlap((gicd, 0x1_0000), (gicr, gicr_size)));
        }
        IrqChip::GicV2 { gicd, gicc, .. } => {
            assert!(gicd != 0 && gicc != 0);
            assert!(!overlap((gicd, 0x1000), (gicc, 0x2000)));
        }
        IrqChip::LoongArchEiointc => panic!("not an arm GIC"),
    }
    if let Some(u) = a.uart {
        assert_ne!(u.base, 0);
    }
    assert!(a.maintenance == 0 || a.maintenance == PPIS.maintenance);
    assert!(a.timers.el2.gsiv == 0 || a.timers.el2.gsiv == PPIS.el2_timer);
    let b = a.board(&[], "x");
    assert_eq!(b.cpus, a.cpus);
    assert_eq!(b.cmdline.as_str(), "x");
    Some(a)
}

#[derive(Arbitrary, Debug)]
struct Board {
    /// MPIDR affinity (masked to the valid bits) and enabled flag.
    cpus: Vec<(u64, bool)>,
    v3: bool,
    /// Redistributors from a GICR entry (else per GICC).
    gicr_entry: bool,
    uart: u8,
    hvc: bool,
    /// Byte patches (table index, offset, value) and whether to reseal.
    patches: Vec<(u8, u16, u8)>,
    reseal: bool,
}

const GICD_BASE: u64 = 0x800_0000;
const GICC_BASE: u64 = 0x801_0000;
const GICR_BASE: u64 = 0x80a_0000;

fn table(sig: &[u8; 4], rev: u8, body: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 36];
    t[0..4].copy_from_slice(sig);
    t[8] = rev;
    t.extend_from_slice(body);
    let len = t.len() as u32;
    t[4..8].copy_from_slice(&len.to_le_bytes());
    seal(&mut t);
    t
}

fn seal(t: &mut [u8]) {
    if t.len() > 9 {
        t[9] = 0;
        t[9] = 0u8.wrapping_sub(sum(t));
    }
}

fn put(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

/// The board's tables: FADT, MADT, GTDT, SPCR (in that order).
fn tables(b: &Board) -> Vec<Vec<u8>> {
    let mut madt = vec![0u8; 8];
    let mut gicd = vec![0u8; 24];
    gicd[0] = 0x0c;
    gicd[1] = 24;
    put(&mut gicd, 8, &GICD_BASE.to_le_bytes());
    gicd[20] = if b.v3 { 3 } else { 2 };
    madt.extend(gicd);
    for (i, &(m, en)) in b.cpus.iter().enumerate() {
        let mut e = vec![0u8; 80];
        e[0] = 0x0b;
        e[1] = 80;
        put(&mut e, 12, &u32::from(en).to_le_bytes());
        if !b.v3 {
            put(&mut e, 32, &GICC_BASE.to_le_bytes());
        } else if !b.gicr_entry {
            put(&mut e, 60, &(GICR_BASE + i as u64 * 0x2_0000).to_le_bytes());
        }
        put(&mut e, 56, &25u32.to_le_bytes());
        put(&mut e, 68, &(m & 0xff_00ff_ffff).to_le_bytes());
        madt.extend(e);
    }
    if b.v3 && b.gicr_entry {
        let mut e = vec![0u8; 16];
        e[0] = 0x0e;
        e[1] = 16;
        put(&mut e, 4, &GICR_BASE.to_le_bytes());
        put(&mut e, 12, &0x100_0000u32.to_le_bytes());
        madt.extend(e);
    }
    let mut fadt = vec![0u8; 240];
    put(
        &mut fadt,
        129 - 36,
        &(1u16 | (u16::from(b.hvc) << 1)).to_le_bytes(),
    );
    fadt[131 - 36] = 1;
    let mut gtdt = vec![0u8; 68];
    put(&mut gtdt, 64 - 36, &27u32.to_le_bytes());
    put(&mut gtdt, 72 - 36, &26u32.to_le_bytes());
    let mut spcr = vec![0u8; 44];
    spcr[0] = b.uart;
    put(&mut spcr, 8, &0x900_0000u64.to_le_bytes());
    vec![
        table(b"FACP", 6, &fadt),
        table(b"APIC", 5, &madt),
        table(b"GTDT", 3, &gtdt),
        table(b"SPCR", 2, &spcr),
    ]
}

fn memory(tables: &[Vec<u8>]) -> Mem {
    let mut rsdp = vec![0u8; 36];
    rsdp[0..8].copy_from_slice(b"RSD PTR ");
    rsdp[15] = 2;
    put(&mut rsdp, 20, &36u32.to_le_bytes());
    put(&mut rsdp, 24, &0x2000u64.to_le_bytes());
    rsdp[8] = 0u8.wrapping_sub(sum(&rsdp[..20]));
    rsdp[32] = 0u8.wrapping_sub(sum(&rsdp));
    let addrs: Vec<u64> = (0..tables.len() as u64)
        .map(|i| 0x10_0000 * (i + 1))
        .collect();
    let body: Vec<u8> = addrs.iter().flat_map(|a| a.to_le_bytes()).collect();
    let mut blocks = vec![(0x1000, rsdp), (0x2000, table(b"XSDT", 1, &body))];
    for (a, t) in addrs.iter().zip(tables) {
        blocks.push((*a, t.clone()));
    }
    Mem(blocks)
}

fn structured(b: &Board) {
    let mut ts = tables(b);
    let patched = !b.patches.is_empty();
    for &(t, off, v) in b.patches.iter().take(8) {
        let t = &mut ts[usize::from(t) % 4];
        let n = t.len();
        t[usize::from(off) % n] = v;
        if b.reseal {
            seal(t);
        }
    }
    let got = read(&memory(&ts));
    if patched {
        return;
    }
    // Intact tables: read back exactly what was written.
    let mut want: Vec<u64> = b
        .cpus
        .iter()
        .filter(|c| c.1)
        .map(|c| c.0 & 0xff_00ff_ffff)
        .collect();
    want.sort_unstable();
    let dup = want.windows(2).any(|w| w[0] == w[1]);
    let Some(a) = got else {
        // Refused only for a reason the writer made: no enabled CPU, a
        // duplicate MPIDR, per-CPU redistributors over the distributor
        // window (not with these bases), an unknown console type is no
        // error.
        assert!(want.is_empty() || dup, "intact tables refused: {b:?}");
        return;
    };
    assert!(!dup);
    want.truncate(kernel::MAX_CPUS);
    let ids: Vec<u64> = a.cpus.iter().map(|c| c.hw_id).collect();
    assert_eq!(ids, want);
    match (b.v3, a.irqchip) {
        (true, IrqChip::GicV3 { gicd, gicr, .. }) => {
            // Per-CPU redistributors: the region starts at the first
            // enabled CPU's.
            let first = b.cpus.iter().position(|c| c.1).unwrap_or(0) as u64;
            let want = if b.gicr_entry {
                GICR_BASE
            } else {
                GICR_BASE + first * 0x2_0000
            };
            assert_eq!((gicd, gicr), (GICD_BASE, want));
        }
        (false, IrqChip::GicV2 { gicd, gicc, .. }) => {
            assert_eq!((gicd, gicc), (GICD_BASE, GICC_BASE));
        }
        other => panic!("wrong GIC {other:?}"),
    }
    let kind = match b.uart {
        0x03 | 0x0d | 0x0e => Some(UartKind::Pl011),
        0x00 | 0x01 | 0x12 => Some(UartKind::Ns16550),
        _ => None,
    };
    assert_eq!(a.uart.map(|u| u.kind), kind);
    assert_eq!(
        a.psci,
        Some(if b.hvc {
            PsciConduit::Hvc
        } else {
            PsciConduit::Smc
        })
    );
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    match u.arbitrary::<u8>().unwrap_or(0) % 3 {
        // Raw bytes behind the RSDP pointer and the XSDT.
        0 => {
            let split = data.len() / 2;
            let mem = Mem(vec![
                (0x1000, data[..split].to_vec()),
                (0x2000, data[split..].to_vec()),
            ]);
            let _ = read(&mem);
        }
        // A valid RSDP and XSDT leading to arbitrary tables.
        1 => {
            let raw: Vec<Vec<u8>> = (0..4)
                .map(|_| u.arbitrary::<Vec<u8>>().unwrap_or_default())
                .collect();
            let sealed: Vec<Vec<u8>> = raw
                .into_iter()
                .map(|mut t| {
                    if t.len() >= 36 {
                        let len = t.len() as u32;
                        t[4..8].copy_from_slice(&len.to_le_bytes());
                        seal(&mut t);
                    }
                    t
                })
                .collect();
            let _ = read(&memory(&sealed));
        }
        _ => {
            if let Ok(b) = Board::arbitrary(&mut u) {
                structured(&b);
            }
        }
    }
});
