//! The IOCSR space a guest sees: identification and feature words (with
//! the "running in a VM" bit), and per vCPU the Loongson IPI block (STATUS,
//! EN, SET, CLEAR, four 64-bit mailboxes, IPI_SEND, MAIL_SEND) used for
//! IPIs and for SMP bring-up through the mailbox, as on Loongson 3A5000 /
//! QEMU `loongson_ipi`.
//!
//! With the VM's interrupt controllers ([`Space`]), the EIOINTC's
//! registers (`super::intc`), MISC_FUNC and ANY_SEND (a write into
//! another vCPU's IOCSR view, which Linux uses to program the EIOINTC)
//! are part of the same space.
//!
//! State lives in atomics ([`VIpi`], one per vCPU) because any vCPU of the
//! VM may send to any other while it runs on another pCPU. Accesses:
//! 4- and 8-byte, naturally aligned, to the IPI registers; the feature and
//! identification words also read with 1/2 bytes. Anything else reads 0 and
//! ignores writes (no side effect, never an error): a hostile address or
//! width costs the guest nothing and kestrel nothing.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::insn::Size;
use super::intc::Intc;
use crate::vcpu::cpuset::VcpuSet;

pub const VERSION: u64 = 0x0;
pub const FEATURES: u64 = 0x8;
pub const VENDOR: u64 = 0x10;
pub const CPUNAME: u64 = 0x20;
pub const IPI_STATUS: u64 = 0x1000;
pub const IPI_EN: u64 = 0x1004;
pub const IPI_SET: u64 = 0x1008;
pub const IPI_CLEAR: u64 = 0x100c;
pub const MBUF0: u64 = 0x1020;
pub const IPI_SEND: u64 = 0x1040;
pub const MAIL_SEND: u64 = 0x1048;
/// A 32-bit write to another vCPU's IOCSR space: address 15:0, vCPU
/// 25:16, bytes to keep 30:27, data 63:32.
pub const ANY_SEND: u64 = 0x1158;

/// FEATURES bits: CSR-based IPI (4) and "running on a hypervisor" (11).
pub const FEATURE_CSRIPI: u64 = 1 << 4;
/// FEATURES bit 3: the EIOINTC is there (VMs with interrupt controllers).
pub const FEATURE_EXTIOI: u64 = 1 << 3;
pub const FEATURE_VM: u64 = 1 << 11;
/// What kestrel's guests read at FEATURES.
pub const GUEST_FEATURES: u64 = FEATURE_CSRIPI | FEATURE_VM;

/// One vCPU's IPI block.
#[derive(Debug, Default)]
pub struct VIpi {
    pub status: AtomicU32,
    pub en: AtomicU32,
    pub mbuf: [AtomicU64; 4],
}

impl VIpi {
    pub const fn new() -> Self {
        VIpi {
            status: AtomicU32::new(0),
            en: AtomicU32::new(0),
            mbuf: [const { AtomicU64::new(0) }; 4],
        }
    }

    /// Back to the power-on state (nothing pending or enabled, empty
    /// mailboxes): the VM restarts.
    pub fn reset(&self) {
        self.status.store(0, Ordering::Release);
        self.en.store(0, Ordering::Release);
        for m in &self.mbuf {
            m.store(0, Ordering::Release);
        }
    }

    /// The IPI interrupt line (ESTAT.IS[12]): some enabled vector pending.
    pub fn line(&self) -> bool {
        self.status.load(Ordering::Acquire) & self.en.load(Ordering::Acquire) != 0
    }

    /// Raises `vector` (what IPI_SEND from another vCPU does); returns
    /// whether the line went up.
    pub fn raise(&self, vector: u32) -> bool {
        let bit = 1u32 << (vector & 31);
        let old = self.status.fetch_or(bit, Ordering::AcqRel);
        old & self.en.load(Ordering::Acquire) == 0 && bit & self.en.load(Ordering::Acquire) != 0
    }

    /// Writes 32 bits of mailbox word `word` (0..8: box * 2 + high half).
    pub fn mail_word(&self, word: u64, data: u32) {
        let slot = &self.mbuf[((word >> 1) & 3) as usize];
        let (shift, keep) = if word & 1 != 0 {
            (32, 0x0000_0000_ffff_ffffu64)
        } else {
            (0, 0xffff_ffff_0000_0000u64)
        };
        let _ = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
            Some((old & keep) | u64::from(data) << shift)
        });
    }
}

/// What a guest IOCSR write asks the arch to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    None,
    /// This vCPU's own IPI line may have changed.
    SelfLine,
    /// An IPI vector was raised on vCPU n: wake or kick it.
    Ipi(usize),
    /// A mailbox of vCPU n was written (the firmware-style start protocol
    /// watches mailbox 0).
    Mail(usize),
    /// The interrupt controllers raised HWI lines of these vCPUs: wake or
    /// kick them (the writer itself looks at its lines before re-entry).
    Irq(VcpuSet),
}

/// A VM's IOCSR space: the IPI blocks and, where the VM has them, its
/// interrupt controllers.
#[derive(Clone, Copy)]
pub struct Space<'a> {
    pub ipi: &'a [VIpi],
    pub intc: Option<&'a Intc>,
}

impl Space<'_> {
    /// `iocsrrd` by vCPU `me`.
    pub fn read(&self, me: usize, addr: u64, size: Size) -> u64 {
        if let Some(intc) = self.intc {
            if let Some(v) = intc.iocsr_read(me, addr, size.bytes()) {
                return v;
            }
            if addr & !7 == FEATURES && addr.is_multiple_of(size.bytes()) {
                return read(self.ipi, me, addr, size)
                    | (FEATURE_EXTIOI >> (8 * (addr & 7))) & size.mask();
            }
        }
        read(self.ipi, me, addr, size)
    }

    /// `iocsrwr` of `value` by vCPU `me`.
    pub fn write(&self, me: usize, addr: u64, size: Size, value: u64) -> Effect {
        if let Some(intc) = self.intc {
            if let Some(rose) = intc.iocsr_write(me, addr, size.bytes(), value) {
                return Effect::Irq(rose);
            }
            if addr == ANY_SEND && size == Size::D {
                return self.any_send(intc, me, value);
            }
        }
        write(self.ipi, me, addr, size, value)
    }

    fn any_send(&self, intc: &Intc, me: usize, value: u64) -> Effect {
        let addr = value & 0xffff;
        let target = ((value >> 16) & 0x3ff) as usize;
        let keep = ((value >> 27) & 0xf) as u8;
        let data = (value >> 32) as u32;
        if Intc::owns_iocsr(addr) {
            return Effect::Irq(intc.any_send(target, addr, data, keep));
        }
        // The IPI block of the target, whole words only.
        if keep != 0 || target >= self.ipi.len() {
            return Effect::None;
        }
        match write(self.ipi, target, addr, Size::W, u64::from(data)) {
            Effect::SelfLine if target != me => Effect::Ipi(target),
            fx => fx,
        }
    }
}

fn id_word(addr: u64) -> Option<u64> {
    Some(match addr {
        VERSION => 0x0000_0000_0000_0011,
        FEATURES => GUEST_FEATURES,
        VENDOR => u64::from_le_bytes(*b"Loongson"),
        CPUNAME => u64::from_le_bytes(*b"3A5000\0\0"),
        _ => return None,
    })
}

/// `iocsrrd` by vCPU `me` of `vcpus`.
pub fn read(vcpus: &[VIpi], me: usize, addr: u64, size: Size) -> u64 {
    let n = size.bytes();
    if !addr.is_multiple_of(n) {
        return 0;
    }
    // Identification words: any width inside the 8-byte word.
    if let Some(v) = id_word(addr & !7) {
        return (v >> (8 * (addr & 7))) & size.mask();
    }
    let Some(ipi) = vcpus.get(me) else { return 0 };
    if n < 4 {
        return 0;
    }
    let word = |a: u64| -> u64 {
        match a {
            IPI_STATUS => u64::from(ipi.status.load(Ordering::Acquire)),
            IPI_EN => u64::from(ipi.en.load(Ordering::Acquire)),
            a if (MBUF0..MBUF0 + 32).contains(&a) => {
                let v = ipi.mbuf[((a - MBUF0) / 8) as usize].load(Ordering::Acquire);
                if a & 4 != 0 {
                    v >> 32
                } else {
                    v & 0xffff_ffff
                }
            }
            _ => 0,
        }
    };
    match size {
        Size::D => word(addr) | word(addr + 4) << 32,
        _ => word(addr),
    }
}

/// `iocsrwr` of `value` by vCPU `me` of `vcpus`.
pub fn write(vcpus: &[VIpi], me: usize, addr: u64, size: Size, value: u64) -> Effect {
    let n = size.bytes();
    if !addr.is_multiple_of(n) || n < 4 {
        return Effect::None;
    }
    let Some(ipi) = vcpus.get(me) else {
        return Effect::None;
    };
    let v32 = value as u32;
    match addr {
        IPI_EN => {
            ipi.en.store(v32, Ordering::Release);
            Effect::SelfLine
        }
        IPI_SET => {
            ipi.status.fetch_or(v32, Ordering::AcqRel);
            Effect::SelfLine
        }
        IPI_CLEAR => {
            ipi.status.fetch_and(!v32, Ordering::AcqRel);
            Effect::SelfLine
        }
        a if (MBUF0..MBUF0 + 32).contains(&a) => {
            let word = (a - MBUF0) / 4;
            ipi.mail_word(word, v32);
            if size == Size::D {
                ipi.mail_word(word + 1, (value >> 32) as u32);
            }
            Effect::None
        }
        IPI_SEND => {
            let cpu = ((value >> 16) & 0x3ff) as usize;
            match vcpus.get(cpu) {
                Some(t) => {
                    t.raise((value & 31) as u32);
                    if cpu == me {
                        Effect::SelfLine
                    } else {
                        Effect::Ipi(cpu)
                    }
                }
                None => Effect::None,
            }
        }
        MAIL_SEND if size == Size::D => {
            let cpu = ((value >> 16) & 0x3ff) as usize;
            match vcpus.get(cpu) {
                Some(t) => {
                    t.mail_word((value >> 2) & 7, (value >> 32) as u32);
                    Effect::Mail(cpu)
                }
                None => Effect::None,
            }
        }
        _ => Effect::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::loongarch::csr::tests::Rng;

    fn vm(n: usize) -> std::vec::Vec<VIpi> {
        (0..n).map(|_| VIpi::new()).collect()
    }

    #[test]
    fn features_say_vm() {
        let v = vm(1);
        assert_eq!(read(&v, 0, FEATURES, Size::D) & FEATURE_VM, FEATURE_VM);
        assert_eq!(read(&v, 0, FEATURES, Size::W) & FEATURE_VM, FEATURE_VM);
        assert_eq!(
            read(&v, 0, FEATURES + 1, Size::B),
            GUEST_FEATURES >> 8 & 0xff
        );
        assert_eq!(
            read(&v, 0, VENDOR, Size::D),
            u64::from_le_bytes(*b"Loongson")
        );
    }

    #[test]
    fn ipi_send_status_clear() {
        let v = vm(4);
        write(&v, 2, IPI_EN, Size::W, u64::MAX);
        assert_eq!(
            write(&v, 0, IPI_SEND, Size::W, 2 << 16 | 3 | 1 << 31),
            Effect::Ipi(2)
        );
        assert!(v[2].line());
        assert_eq!(read(&v, 2, IPI_STATUS, Size::W), 1 << 3);
        assert_eq!(write(&v, 2, IPI_CLEAR, Size::W, 1 << 3), Effect::SelfLine);
        assert!(!v[2].line());
        // Disabled vectors are pending but do not raise the line.
        write(&v, 1, IPI_EN, Size::W, 0);
        write(&v, 0, IPI_SEND, Size::W, 1 << 16 | 5);
        assert!(!v[1].line());
        assert_eq!(read(&v, 1, IPI_STATUS, Size::W), 1 << 5);
        // A target beyond the VM is dropped.
        assert_eq!(write(&v, 0, IPI_SEND, Size::W, 9 << 16 | 1), Effect::None);
        // SET raises its own.
        write(&v, 3, IPI_EN, Size::W, 1);
        assert_eq!(write(&v, 3, IPI_SET, Size::W, 1), Effect::SelfLine);
        assert!(v[3].line());
    }

    #[test]
    fn mailboxes_and_mail_send() {
        let v = vm(2);
        let entry = 0x0000_0001_2345_6780u64;
        // As QEMU's boot code: high half, then low half of mailbox 0.
        let hi = 1 << 16 | 1 << 2 | (entry & 0xffff_ffff_0000_0000);
        let lo = 1 << 16 | (entry << 32);
        assert_eq!(write(&v, 0, MAIL_SEND, Size::D, hi), Effect::Mail(1));
        assert_eq!(write(&v, 0, MAIL_SEND, Size::D, lo), Effect::Mail(1));
        assert_eq!(read(&v, 1, MBUF0, Size::D), entry);
        assert_eq!(read(&v, 1, MBUF0 + 4, Size::W), 1);
        write(&v, 1, MBUF0 + 8, Size::D, 0xaaaa_bbbb_cccc_dddd);
        assert_eq!(read(&v, 1, MBUF0 + 8, Size::W), 0xcccc_dddd);
        assert_eq!(read(&v, 1, MBUF0 + 12, Size::W), 0xaaaa_bbbb);
        // 32-bit MAIL_SEND has no data half: ignored.
        assert_eq!(write(&v, 0, MAIL_SEND, Size::W, 1 << 16), Effect::None);
    }

    #[test]
    fn space_with_the_interrupt_controllers() {
        use crate::guest::loongarch::intc::{eiointc, Intc};
        let v = vm(4);
        let intc = Intc::new(4);
        let io = Space {
            ipi: &v,
            intc: Some(&intc),
        };
        assert_ne!(io.read(0, FEATURES, Size::D) & FEATURE_EXTIOI, 0);
        assert_eq!(read(&v, 0, FEATURES, Size::D) & FEATURE_EXTIOI, 0);
        // MISC_FUNC and the EIOINTC registers are the controller's.
        assert_eq!(
            io.write(1, eiointc::MISC_FUNC, Size::D, eiointc::MISC_EXT_IOI_EN),
            Effect::Irq(VcpuSet::EMPTY)
        );
        assert_eq!(
            io.read(2, eiointc::MISC_FUNC, Size::D),
            eiointc::MISC_EXT_IOI_EN
        );
        // ANY_SEND: byte 1 of route word 0 (vector 1) from vCPU 0 into
        // vCPU 2's view, the other bytes kept.
        io.write(0, eiointc::ROUTE, Size::W, 0x1111_1111);
        let send = |addr: u64, cpu: u64, keep: u64, data: u64| {
            addr | cpu << 16 | keep << 27 | 1 << 31 | data << 32
        };
        io.write(
            0,
            ANY_SEND,
            Size::D,
            send(eiointc::ROUTE, 2, 0b1101, 0x0000_0400),
        );
        assert_eq!(io.read(3, eiointc::ROUTE, Size::W), 0x1111_0411);
        // ANY_SEND to another vCPU's IPI block: its line changes, it is woken.
        io.write(2, IPI_EN, Size::W, 1);
        assert_eq!(
            io.write(0, ANY_SEND, Size::D, send(IPI_SET, 2, 0, 1)),
            Effect::Ipi(2)
        );
        assert!(v[2].line());
        // Masked writes to the IPI block, and targets beyond the VM: dropped.
        assert_eq!(
            io.write(0, ANY_SEND, Size::D, send(IPI_SET, 1, 1, 1)),
            Effect::None
        );
        assert_eq!(
            io.write(0, ANY_SEND, Size::D, send(eiointc::ENABLE, 9, 0, 1)),
            Effect::Irq(VcpuSet::EMPTY)
        );
        assert_eq!(io.read(0, eiointc::ENABLE, Size::W), 0);
        // Without the controllers the space is the IPI block's alone.
        let plain = Space {
            ipi: &v,
            intc: None,
        };
        assert_eq!(plain.read(0, eiointc::MISC_FUNC, Size::D), 0);
        assert_eq!(
            plain.write(0, ANY_SEND, Size::D, send(IPI_SET, 1, 0, 1)),
            Effect::None
        );
    }

    #[test]
    fn hostile_addresses_and_widths() {
        let v = vm(3);
        let mut r = Rng(0x0123_4567_89ab_cdef);
        for _ in 0..200_000 {
            let size = [Size::B, Size::H, Size::W, Size::D][(r.next() % 4) as usize];
            // Mostly near the IPI block, sometimes anywhere.
            let addr = if r.next().is_multiple_of(2) {
                0x1000 + (r.next() % 0x100)
            } else {
                r.next()
            };
            let me = (r.next() % 4) as usize; // 3 = not a vCPU
            if r.next().is_multiple_of(2) {
                let x = read(&v, me, addr, size);
                assert_eq!(x & !size.mask(), 0);
            } else {
                match write(&v, me, addr, size, r.next()) {
                    Effect::Ipi(t) | Effect::Mail(t) => assert!(t < 3),
                    _ => {}
                }
            }
        }
        assert_eq!(read(&v, 0, 0xdead_0000, Size::W), 0);
        assert_eq!(read(&v, 0, IPI_STATUS + 1, Size::W), 0, "misaligned");
    }
}
