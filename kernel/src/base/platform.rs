//! The contract between the portable boot flow (`runtime`) and one
//! architecture's boot code. The arch implements [`Platform`] once, as a
//! `static`, and hands it to [`crate::runtime::primary_main`].

/// How kestrel's run ended, reported when it powers the machine off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Success,
    Failure,
}

impl ExitStatus {
    pub const fn code(self) -> u32 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
        }
    }
}

/// Why a secondary CPU could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartError {
    /// The firmware refused (PSCI error code, or mailbox failure).
    Firmware(i64),
    /// The CPU is already on.
    AlreadyOn,
    /// Not enough memory for the CPU's stack or per-CPU data.
    NoMemory,
}

/// What one architecture provides to the portable boot flow.
pub trait Platform: Sync {
    /// Writes raw bytes to the boot console, waiting for the UART as long
    /// as it takes (the boot, kestrel's end, crash dumps). Callers
    /// serialise (see `conout`).
    fn console_write(&self, bytes: &[u8]);

    /// Writes as many of `bytes` as the UART's transmit FIFO takes now,
    /// without waiting, and returns how many (0 when it is full). What VM
    /// output and kestrel's log lines go through while VMs run
    /// (`base::conout`). A console that cannot tell (none at all) takes
    /// everything.
    fn console_try_write(&self, bytes: &[u8]) -> usize;

    /// The logical index (position in `BoardInfo::cpus`) of the calling CPU.
    fn cpu_index(&self) -> usize;

    /// Starts secondary CPU `index`. Once it runs Rust code on its own stack
    /// the CPU calls [`crate::runtime::secondary_main`] with `index`.
    fn start_cpu(&self, index: usize) -> Result<(), StartError>;

    /// Sends the start of secondary CPU `index` again: called by the boot
    /// CPU, every [`crate::runtime::CPU_START_RESEND_MS`], while a CPU that
    /// [`Self::start_cpu`] accepted is not online yet. Returns whether
    /// anything was sent. A platform that resends must make a repeat
    /// harmless to a CPU that did start and is only slow to come online.
    ///
    /// The default sends nothing: a one-shot start call such as PSCI
    /// `CPU_ON` (arm64) would answer `ON_PENDING` or `ALREADY_ON`, and the
    /// firmware, not kestrel, owns the CPU until it enters. LoongArch's
    /// start is a mailbox write and an IPI, which can be lost when the
    /// target's boot ROM runs late (`arch::loongarch64::smp`).
    fn resend_start(&self, _index: usize) -> bool {
        false
    }

    /// A free-running counter shared by all CPUs, and its frequency.
    fn counter(&self) -> u64;
    fn counter_hz(&self) -> u64;

    /// Arms a periodic tick of `hz` on the calling CPU and unmasks
    /// interrupts; each tick's handler calls [`crate::base::cpu::tick`].
    fn start_tick(&self, hz: u32);

    /// Idles the calling CPU until an interrupt arrives.
    fn wait_for_interrupt(&self);

    /// Powers the machine off, reporting `status` where the board can.
    fn power_off(&self, status: ExitStatus) -> !;

    /// Stops the calling CPU for good (interrupts masked).
    fn halt(&self) -> !;
}
