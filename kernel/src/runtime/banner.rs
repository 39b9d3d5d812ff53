//! The boot banner: what a user (and the smoke tests) read to know what came up.

use core::fmt::{self, Write};

use crate::host::board::BoardInfo;

/// What the boot flow measured, beside what the board described.
pub struct BootReport {
    pub cpus_online: usize,
    pub tick_hz: u32,
    /// CPUs whose tick was seen firing.
    pub cpus_ticking: usize,
}

/// Renders the banner. Every line is `key: value` so tests and people can grep it.
pub fn render(w: &mut impl Write, board: &BoardInfo, report: &BootReport) -> fmt::Result {
    const RULE: &str = "================================================================";
    writeln!(w, "{RULE}")?;
    writeln!(w, " kestrel {} micro-hypervisor", crate::VERSION)?;
    writeln!(w, " arch:     {}", board.arch.name())?;
    writeln!(w, " board:    {}", board.model)?;
    write!(
        w,
        " cpus:     {} of {} online",
        report.cpus_online,
        board.cpus.len()
    )?;
    if board.cpus_ignored > 0 {
        write!(
            w,
            " ({} more beyond kestrel's limit of {})",
            board.cpus_ignored,
            crate::MAX_CPUS
        )?;
    }
    writeln!(w)?;
    write!(w, " memory:   {} MiB", board.memory_bytes() >> 20)?;
    for r in &board.memory {
        write!(w, " [{:#x}-{:#x})", r.base, r.end())?;
    }
    writeln!(w)?;
    writeln!(w, " irqchip:  {}", board.irqchip)?;
    writeln!(
        w,
        " timer:    {} Hz counter, {} Hz tick, ticking on {} cpus",
        board.timer_hz, report.tick_hz, report.cpus_ticking
    )?;
    writeln!(w, " backend:  {}", board.backend)?;
    writeln!(w, "{RULE}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::board::*;

    fn board() -> BoardInfo {
        let mut b = BoardInfo {
            arch: Arch::Aarch64,
            model: bounded("linux,dummy-virt"),
            memory: heapless::Vec::new(),
            cpus: heapless::Vec::new(),
            cpus_ignored: 0,
            irqchip: IrqChip::GicV3 {
                gicd: 0x800_0000,
                gicr: 0x80a_0000,
                gicr_size: 0xf6_0000,
            },
            uart: None,
            timer_hz: 62_500_000,
            psci: Some(PsciConduit::Smc),
            backend: Backend::El2,
            cmdline: bounded(""),
            warnings: heapless::Vec::new(),
            module: None,
        };
        b.memory
            .push(MemRegion {
                base: 0x4000_0000,
                size: 1 << 30,
            })
            .unwrap();
        for i in 0..4 {
            b.cpus.push(CpuDesc { hw_id: i }).unwrap();
        }
        b
    }

    #[test]
    fn banner_names_everything_the_user_needs() {
        let mut s = std::string::String::new();
        let report = BootReport {
            cpus_online: 3,
            tick_hz: 100,
            cpus_ticking: 3,
        };
        render(&mut s, &board(), &report).unwrap();
        assert!(
            s.contains(concat!(" kestrel ", env!("CARGO_PKG_VERSION"))),
            "{s}"
        );
        assert!(s.contains(" arch:     arm64\n"), "{s}");
        assert!(s.contains(" board:    linux,dummy-virt\n"), "{s}");
        assert!(s.contains(" cpus:     3 of 4 online\n"), "{s}");
        assert!(
            s.contains(" memory:   1024 MiB [0x40000000-0x80000000)\n"),
            "{s}"
        );
        assert!(
            s.contains(" irqchip:  GICv3 (dist 0x8000000, redist 0x80a0000)\n"),
            "{s}"
        );
        assert!(s.contains(" backend:  EL2"), "{s}");
    }
}
