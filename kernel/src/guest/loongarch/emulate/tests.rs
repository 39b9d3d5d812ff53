use super::*;
use crate::guest::loongarch::csr::num;
use crate::guest::loongarch::csr::tests::Rng;
use crate::guest::loongarch::insn::{self, Size};
use crate::guest::loongarch::intc::{eiointc, Intc};
use crate::guest::loongarch::iocsr::{self, VIpi, IPI_EN, IPI_SEND};

struct State {
    regs: [u64; 32],
    pc: u64,
    csr: CsrFile,
    tlb: SoftTlb,
    ipi: [VIpi; 2],
    intc: Intc,
}

impl State {
    fn new() -> Self {
        State {
            regs: [0; 32],
            pc: 0x1000,
            csr: CsrFile::new(0),
            tlb: SoftTlb::new(),
            ipi: Default::default(),
            intc: Intc::new(2),
        }
    }

    fn run(&mut self, i: Insn) -> Effect {
        let mut cpu = GuestCpu {
            regs: &mut self.regs,
            pc: &mut self.pc,
            csr: &mut self.csr,
            tlb: &mut self.tlb,
        };
        let io = iocsr::Space {
            ipi: &self.ipi,
            intc: Some(&self.intc),
        };
        emulate(i, &mut cpu, 0, &io, 0, |pa| pa ^ 0xf0)
    }
}

#[test]
fn csr_accesses_swap_and_say_when_translation_changed() {
    let mut s = State::new();
    s.regs[4] = 0x7;
    assert_eq!(
        s.run(Insn::CsrWr {
            rd: 4,
            csr: num::EUEN
        }),
        Effect::None
    );
    assert_eq!(s.regs[4], 0, "the old EUEN");
    assert_eq!(s.csr.get(num::EUEN), 0x7);
    assert_eq!(s.pc, 0x1004);
    assert_eq!(
        s.run(Insn::CsrRd {
            rd: 5,
            csr: num::EUEN
        }),
        Effect::None
    );
    assert_eq!(s.regs[5], 0x7);
    // DA -> PG: a new translation regime.
    s.regs[4] = 1 << 4;
    assert_eq!(
        s.run(Insn::CsrWr {
            rd: 4,
            csr: num::CRMD
        }),
        Effect::Retranslate
    );
    s.regs[6] = 1 << 4;
    s.regs[4] = 0;
    assert_eq!(
        s.run(Insn::CsrXchg {
            rd: 4,
            rj: 6,
            csr: num::CRMD
        }),
        Effect::Retranslate
    );
    // $r0 is never written.
    assert_eq!(
        s.run(Insn::CsrRd {
            rd: 0,
            csr: num::EUEN
        }),
        Effect::None
    );
    assert_eq!(s.regs[0], 0);
    assert_eq!(s.pc, 0x1014);
}

#[test]
fn not_emulated_leaves_the_pc_for_the_guests_exception() {
    let mut s = State::new();
    // An invtlb op the architecture does not define: the guest's INE.
    let e = s.run(Insn::Invtlb {
        op: 0x1f,
        rj: 0,
        rk: 0,
    });
    assert_eq!(e, Effect::Deliver(ecode::INE));
    // A non-privileged instruction handed in anyway: the guest's IPE.
    let e = s.run(Insn::Syscall { code: 0 });
    assert_eq!(e, Effect::Deliver(ecode::IPE));
    assert_eq!(s.pc, 0x1000);
}

#[test]
fn tlb_changes_are_returned_for_the_shadows() {
    let mut s = State::new();
    assert_eq!(s.run(Insn::TlbFlush), Effect::Inval(s.tlb.clone().flush()));
    assert!(matches!(
        s.run(Insn::Invtlb {
            op: 0,
            rj: 0,
            rk: 0
        }),
        Effect::Inval(_)
    ));
    assert_eq!(s.pc, 0x1008);
}

#[test]
fn iocsr_ipis_and_idle() {
    let mut s = State::new();
    // vCPU 0 sends vector 3 to vCPU 1: the backend must start or wake it.
    s.regs[5] = IPI_SEND;
    s.regs[4] = 3 | 1 << 16;
    let e = s.run(Insn::IocsrWr {
        rd: 4,
        rj: 5,
        size: Size::W,
    });
    assert_eq!(e, Effect::Iocsr(iocsr::Effect::Ipi(1)));
    assert!(s.ipi[1].status.load(core::sync::atomic::Ordering::Relaxed) & 8 != 0);
    // Its own line: enabled and raised, `idle` sees it in ESTAT.
    s.regs[5] = IPI_EN;
    s.regs[4] = u64::MAX;
    s.run(Insn::IocsrWr {
        rd: 4,
        rj: 5,
        size: Size::W,
    });
    s.ipi[0].raise(0);
    let pc = s.pc;
    assert_eq!(s.run(Insn::Idle { level: 0 }), Effect::Idle);
    assert_eq!(s.pc, pc + 4);
    assert!(s.csr.estat & (1 << IRQ_IPI) != 0);
}

#[test]
fn ertn_returns_to_era() {
    let mut s = State::new();
    s.csr.set(num::ERA, 0x8000);
    assert_eq!(s.run(Insn::Ertn), Effect::None);
    assert_eq!(s.pc, 0x8000);
}

/// Every word that decodes to a privileged instruction, with random
/// registers and CSRs, emulates without a panic.
#[test]
fn garbage_never_panics() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    let mut s = State::new();
    let mut n = 0;
    for _ in 0..300_000 {
        // Mostly the privileged major opcode space, sometimes anything.
        let w = r.next() as u32;
        let w = if w & 1 == 0 {
            0x0400_0000 | (w & 0x03ff_ffff)
        } else {
            w
        };
        let Some(i) = insn::decode(w).filter(Insn::is_privileged) else {
            continue;
        };
        n += 1;
        for reg in s.regs.iter_mut() {
            *reg = r.next();
        }
        let _ = s.run(i);
        if n % 64 == 0 {
            s = State::new();
        }
    }
    assert!(n > 10_000, "only {n} privileged words");
}

#[test]
fn iocsr_reaches_the_eiointc_and_idle_sees_its_lines() {
    let mut s = State::new();
    let wr = |s: &mut State, addr: u64, v: u64, size: Size| {
        s.regs[5] = addr;
        s.regs[4] = v;
        s.run(Insn::IocsrWr { rd: 4, rj: 5, size })
    };
    wr(
        &mut s,
        eiointc::MISC_FUNC,
        eiointc::MISC_EXT_IOI_EN,
        Size::D,
    );
    wr(&mut s, eiointc::ENABLE, 1 << 4, Size::W);
    // Vector 4 to core 1 (bitmap), then its input rises.
    let fx = wr(&mut s, eiointc::ROUTE + 4, 2, Size::B);
    assert_eq!(
        fx,
        Effect::Iocsr(iocsr::Effect::Irq(crate::vcpu::cpuset::VcpuSet::EMPTY))
    );
    s.intc.mmio_write(0x40, 8, u64::MAX).unwrap();
    s.intc.mmio_write(0x204, 1, 4).unwrap();
    s.intc.mmio_write(0x20, 8, !(1u64 << 4)).unwrap();
    assert!(s.intc.set_level(4, true).contains(1));
    // Route it to vCPU 0 (this one): the write reports it.
    let fx = wr(&mut s, eiointc::ROUTE + 4, 1, Size::B);
    assert_eq!(
        fx,
        Effect::Iocsr(iocsr::Effect::Irq(crate::vcpu::cpuset::VcpuSet::single(0)))
    );
    s.csr.write(num::ECFG, 1 << IRQ_HWI0, 0);
    assert_eq!(s.run(Insn::Idle { level: 0 }), Effect::Idle);
    assert_eq!(s.csr.wake_pending(), Some(IRQ_HWI0));
    // The handler reads and clears its ISR; FEATURES says EXTIOI.
    s.regs[5] = eiointc::ISR;
    s.run(Insn::IocsrRd {
        rd: 6,
        rj: 5,
        size: Size::D,
    });
    assert_eq!(s.regs[6], 1 << 4);
    s.regs[5] = iocsr::FEATURES;
    s.run(Insn::IocsrRd {
        rd: 6,
        rj: 5,
        size: Size::W,
    });
    assert_ne!(s.regs[6] & iocsr::FEATURE_EXTIOI, 0);
}
