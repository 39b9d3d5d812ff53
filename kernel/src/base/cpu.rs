//! Per-CPU boot state: whether each physical CPU is online and how many
//! ticks of its periodic timer it has taken. The arch's timer interrupt
//! counts ticks here ([`tick`]); the boot flow (`runtime`) marks CPUs online
//! and waits for their ticks; the LoongArch backend reads a CPU's ticks.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::MAX_CPUS;

/// Per-CPU state the boot flow tracks.
pub struct PerCpu {
    online: AtomicBool,
    ticks: AtomicU64,
}

impl PerCpu {
    const fn new() -> Self {
        PerCpu {
            online: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
        }
    }

    pub fn is_online(&self) -> bool {
        self.online.load(Ordering::Acquire)
    }

    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

static CPUS: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];

/// Per-CPU boot state of CPU `index`.
pub fn cpu(index: usize) -> Option<&'static PerCpu> {
    CPUS.get(index)
}

/// Marks CPU `index` online (it runs kestrel's code with its tick armed),
/// or not.
pub fn set_online(index: usize, online: bool) {
    if let Some(c) = CPUS.get(index) {
        c.online.store(online, Ordering::Release);
    }
}

/// Called by the arch's timer interrupt handler on each tick.
pub fn tick(cpu_index: usize) {
    if let Some(c) = CPUS.get(cpu_index) {
        c.ticks.fetch_add(1, Ordering::Relaxed);
    }
}
