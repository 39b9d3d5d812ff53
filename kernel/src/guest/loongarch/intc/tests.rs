use super::eiointc as e;
use super::pchpic as p;
use super::*;
use crate::guest::loongarch::csr::tests::Rng;

/// Programs the chain as Linux does on a VM (CPU-number routes, vectors
/// 0..63 on HWI0 and so on), then PCH-PIC line `line` level-high on vector
/// `vec`, routed to vCPU `cpu`, unmasked.
fn linux_like(n: usize, line: u64, vec: u64, cpu: u64) -> Intc {
    let i = Intc::new(n);
    i.iocsr_write(0, e::MISC_FUNC, 8, e::MISC_EXT_IOI_EN);
    i.iocsr_write(0, e::VIRT_CONFIG, 4, u64::from(e::VIRT_CPU_ENCODE));
    i.iocsr_write(0, e::IPMAP, 4, 0x0202_0101);
    i.iocsr_write(0, e::IPMAP + 4, 4, 0x0808_0404);
    for k in 0..64 {
        i.iocsr_write(0, e::ROUTE + 4 * k, 4, 0);
    }
    for k in 0..8 {
        i.iocsr_write(0, e::ENABLE + 4 * k, 4, 0xffff_ffff);
    }
    i.mmio_write(p::HTMSI_EN, 8, u64::MAX).unwrap();
    i.mmio_write(p::HTVEC + line, 1, vec).unwrap();
    i.iocsr_write(0, e::ROUTE + vec, 1, cpu);
    let mask = i.mmio_read(p::MASK, 8).unwrap();
    i.mmio_write(p::MASK, 8, mask & !(1 << line)).unwrap();
    i
}

#[test]
fn uart_line_reaches_the_chosen_vcpu() {
    let i = linux_like(4, 2, 70, 3);
    let rose = i.set_level(2, true);
    assert_eq!(rose.iter().collect::<std::vec::Vec<_>>(), [3]);
    assert_eq!(i.hwi(3), 1 << 1, "vector 70 is in the second 64: HWI1");
    assert_eq!(i.hwi(0), 0);
    // vCPU 3's handler: read ISR word 1, clear it; the PCH-PIC level line
    // is masked, serviced, unmasked (Linux's handle_level_irq).
    assert_eq!(i.iocsr_read(3, e::ISR + 8, 8), Some(1 << 6));
    assert_eq!(i.iocsr_read(0, e::ISR + 8, 8), Some(0));
    i.mmio_write(p::MASK, 4, 0xffff_ffff).unwrap();
    i.iocsr_write(3, e::ISR + 8, 8, 1 << 6);
    assert_eq!(i.hwi(3), 0);
    // Still asserted: the unmask sends it again.
    let rose = i
        .mmio_write(p::MASK, 4, !(1u64 << 2) & 0xffff_ffff)
        .unwrap();
    assert!(rose.contains(3));
    assert_eq!(i.hwi(3), 2);
    // The device drops it: gone everywhere.
    assert_eq!(i.set_level(2, false), VcpuSet::EMPTY);
    assert_eq!(i.hwi(3), 0);
    i.check().unwrap();
}

#[test]
fn affinity_moves_a_pending_interrupt() {
    let i = linux_like(4, 5, 3, 1);
    i.set_level(5, true);
    assert_eq!(i.hwi(1), 1);
    // Linux's set_affinity: disable, route, enable.
    i.iocsr_write(0, e::ENABLE, 4, 0xffff_fff7);
    assert_eq!(i.hwi(1), 0);
    i.iocsr_write(0, e::ROUTE, 4, 2 << 24);
    let rose = i.iocsr_write(0, e::ENABLE, 4, 0xffff_ffff).unwrap();
    assert!(rose.contains(2));
    assert_eq!((i.hwi(1), i.hwi(2)), (0, 1));
    i.check().unwrap();
}

#[test]
fn edge_pulse_and_reset() {
    let i = linux_like(2, 9, 1, 0);
    i.mmio_write(p::EDGE, 4, 1 << 9).unwrap();
    assert!(i.pulse(9).contains(0));
    assert_eq!(i.hwi(0), 1);
    assert_eq!(i.mmio_read(p::IRR, 4).unwrap(), 1 << 9);
    i.iocsr_write(0, e::ISR, 4, 1 << 1);
    i.mmio_write(p::CLEAR, 4, 1 << 9).unwrap();
    assert_eq!(i.mmio_read(p::IRR, 4).unwrap(), 0);
    i.pulse(9);
    i.reset();
    assert_eq!(i.hwi(0), 0);
    assert_eq!(i.mmio_read(p::MASK, 8).unwrap(), u64::MAX);
    i.check().unwrap();
}

/// Random accesses to every register of both controllers, random device
/// lines: no panic, invariants hold, published lines match the model, and
/// a vCPU's line is up exactly when one of its ISR groups is set.
#[test]
fn hostile_accesses_keep_the_chain_consistent() {
    let mut r = Rng(0x1357_9bdf_2468_ace0);
    let i = Intc::new(5);
    for step in 0..60_000 {
        let size = [1u64, 2, 4, 8][(r.next() % 4) as usize];
        let cpu = (r.next() % 6) as usize;
        match r.next() % 6 {
            0 => {
                let a = match r.next() % 4 {
                    0 => e::BASE + r.next() % e::SIZE,
                    1 => e::MISC_FUNC + r.next() % 8,
                    2 => e::VIRT_FEATURES + r.next() % 8,
                    _ => r.next() % 0x2000,
                };
                if let Some(v) = i.iocsr_read(cpu, a, size) {
                    if size < 8 {
                        assert_eq!(v >> (8 * size), 0);
                    }
                }
            }
            1 => {
                let a = e::BASE + r.next() % e::SIZE;
                let v = if r.next().is_multiple_of(3) {
                    u64::MAX
                } else {
                    r.next()
                };
                assert!(i.iocsr_write(cpu, a, size, v).is_some());
            }
            2 => {
                let _ = i.iocsr_write(cpu, e::MISC_FUNC + 4, 4, r.next() & (1 << 16));
                let _ = i.iocsr_write(cpu, e::VIRT_CONFIG, 4, r.next() & 8);
            }
            3 => {
                let _ = i.mmio_write(r.next() % 0x480, size, r.next());
            }
            4 => {
                let _ = i.mmio_read(r.next() % 0x480, size);
            }
            _ => {
                let line = (r.next() % 70) as u32;
                if r.next().is_multiple_of(4) {
                    i.pulse(line);
                } else {
                    i.set_level(line, r.next().is_multiple_of(2));
                }
            }
        }
        if step % 16 == 0 {
            let c = i.check().unwrap_or_else(|m| panic!("step {step}: {m}"));
            for v in 0..5 {
                let groups = (0..8)
                    .filter(|&g| c.eio.read(v, e::ISR + 4 * g, 4) != 0)
                    .fold(0u8, |l, g| l | 1 << c.eio.ip(g as usize * 32));
                assert_eq!(i.hwi(v), groups);
            }
        }
    }
    assert_eq!(i.hwi(99), 0);
}
