//! Just enough of a flattened device tree reader: the CPU count, the RAM
//! regions' top and the 16550's address. Every read goes through
//! `probe_load`, so a bad pointer from the loader is a fault the guest
//! survives, not a crash.

use crate::trap::probe_u32;

/// What the guest learns from the FDT.
#[derive(Clone, Copy, Default)]
pub struct Info {
    pub cpus: usize,
    /// Highest end address of the `/memory` regions (0 if none).
    pub ram_top: u64,
    /// Lowest start of a `/memory` region.
    pub ram_base: u64,
    pub uart: Option<usize>,
}

const MAGIC: u32 = 0xd00d_feed;

fn be32(addr: usize) -> Option<u32> {
    probe_u32(addr).map(u32::from_be)
}

/// Whether `addr` holds an FDT header.
pub fn is_fdt(addr: usize) -> bool {
    addr != 0 && addr.is_multiple_of(4) && be32(addr) == Some(MAGIC)
}

fn str_at(addr: usize, out: &mut [u8; 64]) -> usize {
    let mut n = 0;
    while n < out.len() {
        let w = match probe_u32((addr + n) & !3) {
            Some(w) => w.to_le_bytes(),
            None => return n,
        };
        let b = w[(addr + n) & 3];
        if b == 0 {
            break;
        }
        out[n] = b;
        n += 1;
    }
    n
}

/// Parses the FDT at `base` (assumes `#address-cells` = `#size-cells` = 2,
/// as QEMU and kestrel write it).
pub fn parse(base: usize) -> Option<Info> {
    if !is_fdt(base) {
        return None;
    }
    let total = be32(base + 4)? as usize;
    let off_struct = be32(base + 8)? as usize;
    let off_strings = be32(base + 12)? as usize;
    if total > (2 << 20) || off_struct >= total || off_strings >= total {
        return None;
    }
    let mut info = Info::default();
    let mut p = base + off_struct;
    let end = base + total;
    let mut depth = 0usize;
    // Which kind of node we are in at depth 1 / 2.
    let (mut in_cpus, mut in_memory, mut in_serial, mut in_cpu) = (false, false, false, false);
    let mut serial_reg: Option<usize> = None;
    let mut name = [0u8; 64];
    while p < end {
        let tok = be32(p)?;
        p += 4;
        match tok {
            1 => {
                let n = str_at(p, &mut name);
                p = (p + n + 1 + 3) & !3;
                depth += 1;
                let nm = &name[..n];
                if depth == 2 {
                    in_cpus = nm == b"cpus";
                    in_memory = nm.starts_with(b"memory");
                    in_serial = nm.starts_with(b"serial");
                    serial_reg = None;
                } else if depth == 3 && in_cpus {
                    in_cpu = nm.starts_with(b"cpu@");
                    if in_cpu {
                        info.cpus += 1;
                    }
                }
            }
            2 => {
                if depth == 2 {
                    if in_serial && info.uart.is_none() {
                        info.uart = serial_reg;
                    }
                    in_cpus = false;
                    in_memory = false;
                    in_serial = false;
                }
                if depth == 3 {
                    in_cpu = false;
                }
                depth = depth.saturating_sub(1);
            }
            3 => {
                let len = be32(p)? as usize;
                let nameoff = be32(p + 4)? as usize;
                let val = p + 8;
                p = (val + len + 3) & !3;
                let n = str_at(base + off_strings + nameoff, &mut name);
                let prop = &name[..n];
                if depth == 2 && prop == b"reg" && len >= 16 {
                    let addr = (be32(val)? as u64) << 32 | be32(val + 4)? as u64;
                    if in_memory {
                        // Every (address, size) pair: kestrel lists the low
                        // and the high RAM of a VM in one node.
                        for e in (0..len / 16).map(|i| val + 16 * i) {
                            let addr = (be32(e)? as u64) << 32 | be32(e + 4)? as u64;
                            let size = (be32(e + 8)? as u64) << 32 | be32(e + 12)? as u64;
                            // (ram_top is 0 until the first region.)
                            if info.ram_top == 0 || addr < info.ram_base {
                                info.ram_base = addr;
                            }
                            info.ram_top = info.ram_top.max(addr + size);
                        }
                    }
                    if in_serial {
                        serial_reg = Some(addr as usize);
                    }
                }
                let _ = in_cpu;
            }
            4 => {}
            9 => break,
            _ => return None,
        }
    }
    Some(info)
}

/// Finds the FDT: through the EFI system table in a2 (QEMU's LoongArch
/// direct boot), a register holding the FDT address itself, or QEMU's fixed
/// `0x10_0000`.
pub fn find(a0: u64, a1: u64, a2: u64) -> Option<usize> {
    if let Some(f) = from_efi(a2 as usize) {
        return Some(f);
    }
    for r in [a0, a1, a2] {
        if (0x1000..(1 << 40)).contains(&r) && is_fdt(r as usize) {
            return Some(r as usize);
        }
    }
    if is_fdt(0x10_0000) {
        return Some(0x10_0000);
    }
    None
}

/// EFI system table (`IBI SYST`): configuration tables at +104 (count) and
/// +112 (pointer), 24-byte entries (GUID, pointer); the device tree GUID is
/// b1b621d5-f19c-41a5-830b-d9152c69aae0.
fn from_efi(st: usize) -> Option<usize> {
    if st == 0 || !st.is_multiple_of(8) {
        return None;
    }
    let sig = crate::trap::probe_u64(st)?;
    if sig != u64::from_le_bytes(*b"IBI SYST") {
        return None;
    }
    let count = crate::trap::probe_u64(st + 104)? as usize;
    let tables = crate::trap::probe_u64(st + 112)? as usize;
    const GUID: [u32; 4] = [0xb1b6_21d5, 0x41a5_f19c, 0x15d9_0b83, 0xe0aa_692c];
    for i in 0..count.min(64) {
        let e = tables + 24 * i;
        let mut ok = true;
        for (k, w) in GUID.iter().enumerate() {
            if probe_u32(e + 4 * k) != Some(*w) {
                ok = false;
            }
        }
        if ok {
            let p = crate::trap::probe_u64(e + 16)? as usize;
            if is_fdt(p) {
                return Some(p);
            }
        }
    }
    None
}
