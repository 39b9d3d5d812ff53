//! The extended I/O interrupt controller (EIOINTC, "extioi") of a Loongson
//! 3A5000-class node, as Linux's `irq-loongson-eiointc` driver programs it:
//! 256 vectors, reached in IOCSR space.
//!
//! | IOCSR            | what                                                   |
//! |------------------|--------------------------------------------------------|
//! | 0x420 MISC_FUNC  | bit 48 EXT_IOI_EN: the controller routes at all         |
//! | 0x14a0..0x14c0   | node map (8 x 32-bit; kept, no effect with one node)   |
//! | 0x14c0..0x14c8   | IP map: one byte per 32 vectors, bits 3:0 pick HWI0..3 |
//! | 0x1600..0x1620   | enable, one bit per vector                             |
//! | 0x1680..0x16a0   | bounce (kept; delivery goes to the first core named)   |
//! | 0x1700..0x1720   | the input levels (read only)                           |
//! | 0x1800..0x1820   | this vCPU's ISR: read, write 1 to clear                |
//! | 0x1c00..0x1d00   | route: one byte per vector                             |
//! | 0x4000_0000      | virtual-extension features (read only)                 |
//! | 0x4000_0004      | virtual-extension config: bit 3 = CPU-number routes    |
//!
//! A route byte names a node in bits 7:4 and a core bitmap in bits 3:0 (the
//! first core set is the target; none set means core 0, as QEMU and KVM do),
//! so vCPU = node * 4 + core; with the virtual extension's CPU encoding the
//! byte is the vCPU number itself (Linux uses it for more than 4 vCPUs).
//!
//! An input that rises (or is enabled, or the controller switched on, while
//! high) latches its vector into the ISR of the vCPU its route names; the
//! vCPU's HWI line (IP map) is up while an ISR bit of that group is set.
//! Clearing the ISR bit does not latch it again while the input stays high:
//! a new edge (the PCH-PIC's mask/unmask of a level interrupt) does. An
//! input that falls, or a vector disabled, leaves every ISR. A route that
//! changes while a vector is latched moves it to the new vCPU. A route to a
//! vCPU the VM does not have delivers nothing.
//!
//! Every register takes 1-, 2-, 4- and 8-byte naturally aligned accesses
//! (the hardware's 4 and 8; the narrower ones read or merge their bytes);
//! addresses in the block with no register read 0 and ignore writes.

use alloc::vec;
use alloc::vec::Vec;

pub const VECTORS: usize = 256;
const WORDS: usize = VECTORS / 32;

pub const MISC_FUNC: u64 = 0x420;
pub const MISC_EXT_IOI_EN: u64 = 1 << 48;
pub const NODEMAP: u64 = 0x14a0;
pub const IPMAP: u64 = 0x14c0;
pub const ENABLE: u64 = 0x1600;
pub const BOUNCE: u64 = 0x1680;
pub const INPUT: u64 = 0x1700;
pub const ISR: u64 = 0x1800;
pub const ROUTE: u64 = 0x1c00;
/// The register block (as the device tree's `reg` gives it).
pub const BASE: u64 = 0x1400;
pub const SIZE: u64 = 0x900;
pub const VIRT_FEATURES: u64 = 0x4000_0000;
pub const VIRT_CONFIG: u64 = 0x4000_0004;
/// VIRT_FEATURES: the extension exists (bit 0), CPU-number routes (bit 3).
pub const VIRT_HAS_EXTENSION: u32 = 1 << 0;
pub const VIRT_HAS_CPU_ENCODE: u32 = 1 << 3;
/// VIRT_CONFIG: route bytes are vCPU numbers.
pub const VIRT_CPU_ENCODE: u32 = 1 << 3;
/// HWI lines the IP map can select (HWI0..3).
pub const IP_LINES: usize = 4;

/// Whether IOCSR address `addr` (any byte of an access) is the EIOINTC's.
pub fn owns(addr: u64) -> bool {
    (MISC_FUNC..MISC_FUNC + 8).contains(&addr)
        || (BASE..BASE + SIZE).contains(&addr)
        || (VIRT_FEATURES..VIRT_FEATURES + 8).contains(&addr)
}

/// One VM's EIOINTC (plain state; [`super::Intc`] locks it).
#[derive(Clone, Debug)]
pub struct Eiointc {
    nvcpus: usize,
    ext_en: bool,
    virt_config: u32,
    nodemap: [u32; 8],
    ipmap: [u8; 8],
    enable: [u32; WORDS],
    bounce: [u32; WORDS],
    route: [u8; VECTORS],
    input: [u32; WORDS],
    coreisr: Vec<[u32; WORDS]>,
}

fn bit(v: usize) -> (usize, u32) {
    (v / 32 % WORDS, 1 << (v % 32))
}

impl Eiointc {
    pub fn new(nvcpus: usize) -> Eiointc {
        Eiointc {
            nvcpus,
            ext_en: false,
            virt_config: 0,
            nodemap: [0; 8],
            ipmap: [0; 8],
            enable: [0; WORDS],
            bounce: [0; WORDS],
            route: [0; VECTORS],
            input: [0; WORDS],
            coreisr: vec![[0; WORDS]; nvcpus],
        }
    }

    /// Back to the power-on state, every input low.
    pub fn reset(&mut self) {
        *self = Eiointc::new(self.nvcpus);
    }

    pub fn nvcpus(&self) -> usize {
        self.nvcpus
    }

    /// The vCPU vector `v` is routed to, if the VM has it.
    pub fn target(&self, v: usize) -> Option<usize> {
        let b = self.route[v % VECTORS];
        let cpu = if self.virt_config & VIRT_CPU_ENCODE != 0 {
            usize::from(b)
        } else {
            let core = (b & 0xf).trailing_zeros();
            let core = if core >= 4 { 0 } else { core as usize };
            usize::from(b >> 4) * 4 + core
        };
        (cpu < self.nvcpus).then_some(cpu)
    }

    /// The HWI line (0..[`IP_LINES`]) vector `v` raises.
    pub fn ip(&self, v: usize) -> usize {
        let m = self.ipmap[v / 32 % 8] & 0xf;
        if m == 0 {
            0
        } else {
            m.trailing_zeros() as usize
        }
    }

    /// HWI lines up for `cpu`: bit n = HWIn (ESTAT.IS[2 + n]).
    pub fn lines(&self, cpu: usize) -> u8 {
        let Some(isr) = self.coreisr.get(cpu) else {
            return 0;
        };
        let mut l = 0u8;
        for (g, w) in isr.iter().enumerate() {
            if *w != 0 {
                l |= 1 << self.ip(g * 32);
            }
        }
        l
    }

    /// The input level of vector `v`.
    pub fn input(&self, v: usize) -> bool {
        let (w, m) = bit(v);
        self.input[w] & m != 0
    }

    /// Whether `v` is latched in `cpu`'s ISR.
    pub fn latched(&self, cpu: usize, v: usize) -> bool {
        let (w, m) = bit(v);
        self.coreisr.get(cpu).is_some_and(|i| i[w] & m != 0)
    }

    pub fn enabled(&self, v: usize) -> bool {
        let (w, m) = bit(v);
        self.enable[w] & m != 0
    }

    /// Whether the controller routes at all (MISC_FUNC.EXT_IOI_EN).
    pub fn routing_on(&self) -> bool {
        self.ext_en
    }

    fn latch(&mut self, v: usize) {
        if !self.ext_en || !self.enabled(v) {
            return;
        }
        let (w, m) = bit(v);
        if let Some(cpu) = self.target(v) {
            self.coreisr[cpu][w] |= m;
        }
    }

    fn unlatch(&mut self, v: usize) {
        let (w, m) = bit(v);
        for isr in &mut self.coreisr {
            isr[w] &= !m;
        }
    }

    /// Drives input vector `v` to `level`.
    pub fn set_input(&mut self, v: usize, level: bool) {
        let (w, m) = bit(v);
        let old = self.input[w] & m != 0;
        if level {
            self.input[w] |= m;
            if !old {
                self.latch(v);
            }
        } else {
            self.input[w] &= !m;
            if old {
                self.unlatch(v);
            }
        }
    }

    /// Latches every enabled input that is high (the controller switched on).
    fn latch_all_high(&mut self) {
        for v in 0..VECTORS {
            if self.input(v) {
                self.latch(v);
            }
        }
    }

    fn set_enable(&mut self, w: usize, new: u32) {
        let old = self.enable[w];
        self.enable[w] = new;
        for b in 0..32 {
            let v = w * 32 + b;
            let m = 1u32 << b;
            if old & m == 0 && new & m != 0 && self.input[w] & m != 0 {
                self.latch(v);
            } else if old & m != 0 && new & m == 0 {
                self.unlatch(v);
            }
        }
    }

    /// Routes changed: latched vectors follow them.
    fn reroute(&mut self, before: &[Option<usize>; 4], first: usize) {
        for (i, old) in before.iter().enumerate() {
            let v = first + i;
            let new = self.target(v);
            if *old == new {
                continue;
            }
            let (w, m) = bit(v);
            let was = old.is_some_and(|c| self.coreisr[c][w] & m != 0);
            if was {
                self.unlatch(v);
                if let Some(c) = new {
                    self.coreisr[c][w] |= m;
                }
            } else if self.input[w] & m != 0 {
                // High but delivered nowhere (routed to no vCPU, or its
                // edge not yet latched): deliver it where it now goes.
                if old.is_none() {
                    self.latch(v);
                }
            }
        }
    }

    /// 32-bit register at `off` (4-aligned) as `cpu` reads it.
    fn read32(&self, cpu: usize, off: u64) -> u32 {
        let idx = |base: u64| ((off - base) / 4) as usize;
        match off {
            MISC_FUNC => 0,
            o if o == MISC_FUNC + 4 && self.ext_en => (MISC_EXT_IOI_EN >> 32) as u32,
            o if (NODEMAP..NODEMAP + 32).contains(&o) => self.nodemap[idx(NODEMAP)],
            o if (IPMAP..IPMAP + 8).contains(&o) => {
                let i = idx(IPMAP) * 4;
                u32::from_le_bytes(self.ipmap[i..i + 4].try_into().unwrap_or([0; 4]))
            }
            o if (ENABLE..ENABLE + 32).contains(&o) => self.enable[idx(ENABLE)],
            o if (BOUNCE..BOUNCE + 32).contains(&o) => self.bounce[idx(BOUNCE)],
            o if (INPUT..INPUT + 32).contains(&o) => self.input[idx(INPUT)],
            o if (ISR..ISR + 32).contains(&o) => self.coreisr.get(cpu).map_or(0, |i| i[idx(ISR)]),
            o if (ROUTE..ROUTE + VECTORS as u64).contains(&o) => {
                let i = (o - ROUTE) as usize;
                u32::from_le_bytes(self.route[i..i + 4].try_into().unwrap_or([0; 4]))
            }
            VIRT_FEATURES => VIRT_HAS_EXTENSION | VIRT_HAS_CPU_ENCODE,
            VIRT_CONFIG => self.virt_config,
            _ => 0,
        }
    }

    /// Writes the bytes of `val` that `bytes` (bit n = byte n) selects to
    /// the 32-bit register at `off` (4-aligned) as `cpu`.
    fn write32(&mut self, cpu: usize, off: u64, val: u32, bytes: u8) {
        let m = (0..4)
            .filter(|b| bytes & (1 << b) != 0)
            .fold(0u32, |a, b| a | 0xff << (8 * b));
        let merge = |old: u32| (old & !m) | (val & m);
        let idx = |base: u64| ((off - base) / 4) as usize;
        match off {
            o if o == MISC_FUNC + 4 => {
                let on = merge(if self.ext_en { 1 << 16 } else { 0 }) & (1 << 16) != 0;
                let was = self.ext_en;
                self.ext_en = on;
                if on && !was {
                    self.latch_all_high();
                } else if was && !on {
                    for isr in &mut self.coreisr {
                        *isr = [0; WORDS];
                    }
                }
            }
            o if (NODEMAP..NODEMAP + 32).contains(&o) => {
                let i = idx(NODEMAP);
                self.nodemap[i] = merge(self.nodemap[i]);
            }
            o if (IPMAP..IPMAP + 8).contains(&o) => {
                let i = idx(IPMAP) * 4;
                let old = u32::from_le_bytes(self.ipmap[i..i + 4].try_into().unwrap_or([0; 4]));
                self.ipmap[i..i + 4].copy_from_slice(&merge(old).to_le_bytes());
            }
            o if (ENABLE..ENABLE + 32).contains(&o) => {
                let i = idx(ENABLE);
                self.set_enable(i, merge(self.enable[i]));
            }
            o if (BOUNCE..BOUNCE + 32).contains(&o) => {
                let i = idx(BOUNCE);
                self.bounce[i] = merge(self.bounce[i]);
            }
            o if (ISR..ISR + 32).contains(&o) => {
                if let Some(isr) = self.coreisr.get_mut(cpu) {
                    isr[idx(ISR)] &= !(val & m);
                }
            }
            o if (ROUTE..ROUTE + VECTORS as u64).contains(&o) => {
                let i = (o - ROUTE) as usize;
                let before = core::array::from_fn(|k| self.target(i + k));
                let old = u32::from_le_bytes(self.route[i..i + 4].try_into().unwrap_or([0; 4]));
                self.route[i..i + 4].copy_from_slice(&merge(old).to_le_bytes());
                self.reroute(&before, i);
            }
            VIRT_CONFIG => {
                let before: Vec<Option<usize>> = (0..VECTORS).map(|v| self.target(v)).collect();
                self.virt_config = merge(self.virt_config) & VIRT_CPU_ENCODE;
                for g in 0..VECTORS / 4 {
                    let b = core::array::from_fn(|k| before[g * 4 + k]);
                    self.reroute(&b, g * 4);
                }
            }
            _ => {}
        }
    }

    /// `iocsrrd` of `size` bytes (1, 2, 4, 8) at `addr` by vCPU `cpu`.
    /// Misaligned: 0.
    pub fn read(&self, cpu: usize, addr: u64, size: u64) -> u64 {
        if !matches!(size, 1 | 2 | 4 | 8) || !addr.is_multiple_of(size) {
            return 0;
        }
        let word = addr & !3;
        let v = if size == 8 {
            u64::from(self.read32(cpu, word)) | u64::from(self.read32(cpu, word + 4)) << 32
        } else {
            u64::from(self.read32(cpu, word)) >> (8 * (addr & 3))
        };
        if size == 8 {
            v
        } else {
            v & ((1u64 << (8 * size)) - 1)
        }
    }

    /// `iocsrwr` of `size` bytes (1, 2, 4, 8) of `val` at `addr` by vCPU
    /// `cpu`. Misaligned: ignored.
    pub fn write(&mut self, cpu: usize, addr: u64, size: u64, val: u64) {
        if !matches!(size, 1 | 2 | 4 | 8) || !addr.is_multiple_of(size) {
            return;
        }
        let word = addr & !3;
        if size == 8 {
            self.write32(cpu, word, val as u32, 0xf);
            self.write32(cpu, word + 4, (val >> 32) as u32, 0xf);
        } else {
            let sh = addr & 3;
            let bytes = (((1u16 << size) - 1) << sh) as u8;
            self.write32(cpu, word, (val << (8 * sh)) as u32, bytes);
        }
    }

    /// A 32-bit write with a byte mask (bit n set: byte n kept), as the
    /// IPI block's ANY_SEND does it for `cpu`.
    pub fn write_masked(&mut self, cpu: usize, addr: u64, val: u32, keep: u8) {
        if addr.is_multiple_of(4) {
            self.write32(cpu, addr, val, !keep & 0xf);
        }
    }

    /// Checks the model's invariants (tests and fuzzing): every latched
    /// vector is enabled, routed to the vCPU holding it, held by one vCPU
    /// only, and the controller is on.
    pub fn check(&self) -> Result<(), &'static str> {
        for v in 0..VECTORS {
            let holders = (0..self.nvcpus).filter(|&c| self.latched(c, v)).count();
            if holders > 1 {
                return Err("vector latched on two vCPUs");
            }
            if holders == 1 {
                if !self.ext_en {
                    return Err("latched while routing is off");
                }
                if !self.enabled(v) {
                    return Err("disabled vector latched");
                }
                match self.target(v) {
                    Some(c) if self.latched(c, v) => {}
                    _ => return Err("vector latched away from its route"),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(n: usize) -> Eiointc {
        let mut e = Eiointc::new(n);
        e.write(0, MISC_FUNC, 8, MISC_EXT_IOI_EN);
        e
    }

    #[test]
    fn linux_router_init_then_affinity() {
        let mut e = on(4);
        // What the driver's router init writes (single IP, node 0 core 0).
        for i in 0..2 {
            e.write(0, IPMAP + i * 4, 4, 0x0101_0101);
        }
        for i in 0..64 {
            e.write(0, ROUTE + i * 4, 4, 0x0101_0101);
        }
        for i in 0..8 {
            e.write(0, ENABLE + i * 4, 4, 0xffff_ffff);
            e.write(0, BOUNCE + i * 4, 4, 0xffff_ffff);
        }
        e.set_input(2, true);
        assert!(e.latched(0, 2));
        assert_eq!(e.lines(0), 1);
        assert_eq!(e.read(0, ISR, 8), 1 << 2);
        assert_eq!(e.read(1, ISR, 8), 0, "ISR is per vCPU");
        // The handler clears it; still high, no new latch.
        e.write(0, ISR, 8, 1 << 2);
        assert_eq!(e.lines(0), 0);
        e.set_input(2, false);
        // Affinity to core 2 (byte 2 of the first route word), then an edge.
        e.write(0, ROUTE, 1, 0x0);
        e.write(0, ROUTE + 2, 1, 1 << 2);
        assert_eq!(e.target(2), Some(2));
        e.set_input(2, true);
        assert!(e.latched(2, 2));
        assert_eq!(e.lines(2), 1);
        assert_eq!(e.lines(0), 0);
        e.check().unwrap();
    }

    #[test]
    fn cpu_encode_and_ip_map() {
        let mut e = on(8);
        assert_eq!(
            e.read(0, VIRT_FEATURES, 4) as u32 & VIRT_HAS_CPU_ENCODE,
            VIRT_HAS_CPU_ENCODE
        );
        e.write(0, VIRT_CONFIG, 4, u64::from(VIRT_CPU_ENCODE));
        // Vectors 64..127 to HWI1 (bytes 2, 3 of IPMAP word 0).
        e.write(0, IPMAP, 4, 0x0202_0101);
        e.write(0, ENABLE + 8, 4, 0xffff_ffff);
        e.write(0, ROUTE + 64, 1, 6);
        assert_eq!(e.target(64), Some(6));
        e.set_input(64, true);
        assert_eq!(e.lines(6), 1 << 1);
        // Route to a vCPU the VM does not have: delivered nowhere...
        e.write(0, ROUTE + 64, 1, 200);
        assert_eq!(e.lines(6), 0);
        e.check().unwrap();
        // ... and where it goes next, while still high.
        e.write(0, ROUTE + 64, 1, 3);
        assert_eq!(e.lines(3), 1 << 1);
        e.check().unwrap();
    }

    #[test]
    fn off_until_enabled() {
        let mut e = Eiointc::new(2);
        e.write(0, ENABLE, 4, 1);
        e.set_input(0, true);
        assert_eq!(e.lines(0), 0, "EXT_IOI_EN clear");
        e.write(0, MISC_FUNC, 8, MISC_EXT_IOI_EN);
        assert_eq!(e.read(0, MISC_FUNC, 8), MISC_EXT_IOI_EN);
        assert_eq!(e.lines(0), 1);
        // Disabling the vector drops it.
        e.write(0, ENABLE, 4, 0);
        assert_eq!(e.lines(0), 0);
        e.write(0, ENABLE, 4, 1);
        assert_eq!(e.lines(0), 1, "enabled again while high");
        e.check().unwrap();
    }

    #[test]
    fn narrow_and_masked_writes() {
        let mut e = on(4);
        e.write(0, ROUTE + 5, 1, 0x4);
        assert_eq!(e.read(0, ROUTE + 4, 4), 0x400);
        assert_eq!(e.read(0, ROUTE + 5, 1), 0x4);
        // ANY_SEND style: keep bytes 0, 1, 3; write byte 2.
        e.write_masked(0, ROUTE + 4, 0x00aa_0000 | 0xffff, 0b1011);
        assert_eq!(e.read(0, ROUTE + 4, 4), 0x00aa_0400);
        assert_eq!(e.read(0, ROUTE + 3, 4), 0, "misaligned");
    }
}
