//! The virtio-mmio transport, version 2 (virtio 1.x "modern" only): the
//! register block a guest driver programs, one interrupt line, and the
//! queues, in front of a [`VirtioDevice`].
//!
//! The transport is an [`MmioDevice`] on the VM's bus. A notification runs
//! the device's queue work at once, in the trapping vCPU's exit, within one
//! exit's [`Budget`]; what the budget did not cover stays pending (a bit
//! per queue) and continues at the VM's next exits ([`Transport::resume`]),
//! in ring order, the transport lock held for one budget at a time. A ring
//! the device finds malformed puts the device in DEVICE_NEEDS_RESET with a
//! configuration-change interrupt, as the spec asks (and a used-buffer
//! interrupt for the chains completed before it); the device does no more
//! work until the driver resets it.

use crate::base::lock::Mutex;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use super::queue::{Queue, QueueError, MAX_QUEUE_SIZE};
use super::{status, Budget, Progress, VirtioDevice, Work, F_VERSION_1};
use crate::dev::vdev::bus::{DeviceEnv, MmioDevice};
use crate::dev::vdev::{MmioError, Width};

/// "virt", little endian.
pub const MAGIC: u32 = 0x7472_6976;
/// The modern register layout.
pub const VERSION: u32 = 2;
/// The vendor ID kestrel's devices report ("kstl" in ASCII, little endian).
pub const VENDOR: u32 = 0x6c74_736b;
/// Size of one transport's MMIO region.
pub const REGION_SIZE: u64 = 0x200;

/// Register offsets.
pub mod reg {
    pub const MAGIC: u64 = 0x000;
    pub const VERSION: u64 = 0x004;
    pub const DEVICE_ID: u64 = 0x008;
    pub const VENDOR_ID: u64 = 0x00c;
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    pub const QUEUE_NOTIFY: u64 = 0x050;
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    pub const SHM_SEL: u64 = 0x0ac;
    pub const SHM_LEN_LOW: u64 = 0x0b0;
    pub const SHM_LEN_HIGH: u64 = 0x0b4;
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    pub const CONFIG: u64 = 0x100;
}

/// InterruptStatus bits.
pub const INT_USED: u32 = 1;
pub const INT_CONFIG: u32 = 2;

struct State<D> {
    dev: D,
    status: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    queue_sel: u32,
    queues: Vec<Queue>,
    interrupt: u32,
    config_generation: u32,
    /// The last level driven on the line.
    line_level: bool,
    /// Why the device stopped (DEVICE_NEEDS_RESET), for diagnostics.
    broken: Option<QueueError>,
    /// Malformed rings so far (across resets): the log says the 1st, 2nd,
    /// 4th, 8th, ... so a guest cannot flood it.
    breaks: u64,
    /// Queues with work a budget did not cover (bit i = queue i).
    pending: u32,
    /// The queue pending work starts with next (turns rotate).
    next: usize,
}

/// One virtio-mmio transport. See the module documentation.
pub struct Transport<D> {
    name: &'static str,
    /// The interrupt line the guest's device description names.
    line: u32,
    state: Mutex<State<D>>,
    /// `state.pending != 0`, readable without the lock.
    pending: AtomicBool,
    /// A notification did work in the current exit: the continuation
    /// before the next guest entry skips this round (one budget per exit).
    fresh: AtomicBool,
}

impl<D: VirtioDevice> Transport<D> {
    pub fn new(name: &'static str, line: u32, dev: D) -> Transport<D> {
        let queues = (0..dev.queues()).map(|_| Queue::default()).collect();
        Transport {
            name,
            line,
            state: Mutex::new(State {
                dev,
                status: 0,
                device_features_sel: 0,
                driver_features_sel: 0,
                driver_features: 0,
                queue_sel: 0,
                queues,
                interrupt: 0,
                config_generation: 0,
                line_level: false,
                broken: None,
                breaks: 0,
                pending: 0,
                next: 0,
            }),
            pending: AtomicBool::new(false),
            fresh: AtomicBool::new(false),
        }
    }

    /// Whether queue work is pending ([`Transport::resume`] continues it).
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Whether a notification did work since the last call (and clears it).
    pub fn take_fresh(&self) -> bool {
        self.fresh.swap(false, Ordering::AcqRel)
    }

    /// Continues pending queue work within `budget`, raising the interrupt
    /// for what completes. Returns whether work is still pending.
    pub fn resume(&self, env: &mut dyn DeviceEnv, budget: &mut Budget) -> bool {
        if !self.has_pending() {
            return false;
        }
        let mut st = self.state.lock();
        self.run(&mut st, env, budget);
        st.pending != 0
    }

    /// Marks queue `index` as having work (host side: frames held for the
    /// receive queue) without doing it; [`Transport::resume`] does it.
    /// Nothing if the device is not live.
    pub fn mark_pending(&self, index: usize) {
        let mut st = self.state.lock();
        if st.live() && index < st.queues.len() {
            st.pending |= 1 << index;
            self.pending.store(true, Ordering::Release);
        }
    }

    /// Runs `f` on the live device under the transport's lock and, when it
    /// says it took work for later (frames held for the receive queue),
    /// marks queue `index` pending without doing it: [`Transport::resume`]
    /// does it, on the time of the VM the device belongs to. Returns what
    /// `f` said and whether work was pending already (`None`: the device
    /// is not live, `f` did not run).
    pub fn hold(&self, index: usize, f: impl FnOnce(&mut D) -> bool) -> Option<(bool, bool)> {
        let mut st = self.state.lock();
        if !st.live() || index >= st.queues.len() {
            return None;
        }
        let was_pending = st.pending != 0;
        let took = f(&mut st.dev);
        if took {
            st.pending |= 1 << index;
            self.pending.store(true, Ordering::Release);
        }
        Some((took, was_pending))
    }

    /// Serves the pending queues in turn within `budget`.
    fn run(&self, st: &mut State<D>, env: &mut dyn DeviceEnv, budget: &mut Budget) {
        let n = st.queues.len();
        let mut work = Work::default();
        let mut err = None;
        if st.live() {
            for k in 0..n {
                let i = (st.next + k) % n;
                if st.pending & (1 << i) == 0 {
                    continue;
                }
                if budget.exhausted() {
                    break;
                }
                match st.dev.notify(i, &mut st.queues, env, budget, &mut work) {
                    Ok(Progress::Done) => st.pending &= !(1 << i),
                    Ok(Progress::More) => {}
                    Err(e) => {
                        err = Some(e);
                        break;
                    }
                }
            }
            st.next = (st.next + 1) % n.max(1);
        } else {
            st.pending = 0;
        }
        self.finish(st, env, work, err);
    }

    pub fn line(&self) -> u32 {
        self.line
    }

    /// Runs `f` on the device with its queues live (status DRIVER_OK and not
    /// broken), from outside a guest access: host console input, frames from
    /// another VM. Raises the interrupt if `f` used buffers. Returns `None`
    /// if the driver has not brought the device up.
    /// `f` records in its `Work` what it did, also when it fails.
    pub fn with_live<R>(
        &self,
        env: &mut dyn DeviceEnv,
        f: impl FnOnce(&mut D, &mut [Queue], &mut dyn DeviceEnv, &mut Work) -> Result<R, QueueError>,
    ) -> Option<R> {
        let mut st = self.state.lock();
        if !st.live() {
            return None;
        }
        let st = &mut *st;
        let mut work = Work::default();
        let r = f(&mut st.dev, &mut st.queues, env, &mut work);
        match r {
            Ok(r) => {
                self.finish(st, env, work, None);
                Some(r)
            }
            Err(e) => {
                self.finish(st, env, work, Some(e));
                None
            }
        }
    }

    /// Runs `f` on the device whatever its state (configuration, stats).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        f(&mut self.state.lock().dev)
    }

    /// Whether the transport and its device are as at power-on: status 0,
    /// no queue configured, no interrupt, no work pending or held. A VM
    /// restart checks it for every transport ([`MmioDevice::reset`]).
    pub fn at_power_on(&self) -> bool {
        let st = self.state.lock();
        st.status == 0
            && st.interrupt == 0
            && !st.line_level
            && st.pending == 0
            && st.broken.is_none()
            && st.driver_features == 0
            && st.queue_sel == 0
            && st.queues.iter().all(|q| *q == Queue::default())
            && !self.has_pending()
            && st.dev.at_power_on()
    }

    /// Whether the driver has the device up (DRIVER_OK, not broken).
    pub fn live(&self) -> bool {
        self.state.lock().live()
    }

    /// Why the device is in DEVICE_NEEDS_RESET, if it is.
    pub fn broken(&self) -> Option<QueueError> {
        self.state.lock().broken
    }

    /// Raises what `w` did; `err` breaks the device (after the chains
    /// completed before it got their used-buffer interrupt).
    fn finish(&self, st: &mut State<D>, env: &mut dyn DeviceEnv, w: Work, err: Option<QueueError>) {
        if w.interrupt {
            st.interrupt |= INT_USED;
        }
        if w.config_changed {
            st.config_generation = st.config_generation.wrapping_add(1);
            st.interrupt |= INT_CONFIG;
        }
        match err {
            None => {}
            Some(e) => {
                st.breaks += 1;
                if st.breaks.is_power_of_two() {
                    log::warn!(
                        "{}: malformed virtqueue ({e:?}): device needs reset (malformed ring {})",
                        self.name,
                        st.breaks
                    );
                }
                st.broken = Some(e);
                st.status |= status::DEVICE_NEEDS_RESET;
                st.interrupt |= INT_CONFIG;
                st.pending = 0;
            }
        }
        self.pending.store(st.pending != 0, Ordering::Release);
        self.drive_line(st, env);
    }

    fn drive_line(&self, st: &mut State<D>, env: &mut dyn DeviceEnv) {
        let level = st.interrupt != 0;
        if level != st.line_level {
            st.line_level = level;
            env.set_irq(self.line, level);
        }
    }

    fn reset(&self, st: &mut State<D>, env: &mut dyn DeviceEnv) {
        Self::clear(st);
        self.pending.store(false, Ordering::Release);
        self.drive_line(st, env);
    }

    /// The device reset (Status = 0) without the interrupt line update.
    fn clear(st: &mut State<D>) {
        st.dev.reset();
        st.status = 0;
        st.device_features_sel = 0;
        st.driver_features_sel = 0;
        st.driver_features = 0;
        st.queue_sel = 0;
        st.queues.iter_mut().for_each(Queue::reset);
        st.interrupt = 0;
        st.broken = None;
        st.pending = 0;
        st.next = 0;
    }

    fn offered(st: &State<D>) -> u64 {
        st.dev.features() | F_VERSION_1
    }

    fn write_status(&self, st: &mut State<D>, env: &mut dyn DeviceEnv, v: u32) {
        if v == 0 {
            self.reset(st, env);
            return;
        }
        // DEVICE_NEEDS_RESET is the device's to set: a driver write of it
        // is ignored.
        let mut v = v & 0xff & !status::DEVICE_NEEDS_RESET;
        // FEATURES_OK only for a subset of what was offered that includes
        // VERSION_1 (no legacy interface); the driver reads it back.
        if v & status::FEATURES_OK != 0 && st.status & status::FEATURES_OK == 0 {
            let f = st.driver_features;
            if f & !Self::offered(st) != 0 || f & F_VERSION_1 == 0 {
                v &= !status::FEATURES_OK;
            } else {
                st.dev.set_features(f);
            }
        }
        // The device keeps DEVICE_NEEDS_RESET until reset.
        st.status = v | (st.status & status::DEVICE_NEEDS_RESET);
    }

    fn queue(st: &mut State<D>) -> Option<&mut Queue> {
        st.queues.get_mut(st.queue_sel as usize)
    }

    fn set_queue(st: &mut State<D>, f: impl FnOnce(&mut Queue)) {
        // Only while the queue is not live (the spec forbids the rest).
        if let Some(q) = Self::queue(st).filter(|q| !q.ready) {
            f(q);
        }
    }

    fn notify(&self, st: &mut State<D>, env: &mut dyn DeviceEnv, index: u32, budget: &mut Budget) {
        if !st.live() {
            return;
        }
        let i = index as usize;
        if st.queues.get(i).is_none_or(|q| !q.ready) {
            return;
        }
        st.pending |= 1 << i;
        self.fresh.store(true, Ordering::Release);
        self.run(st, env, budget);
    }
}

impl<D: VirtioDevice> State<D> {
    fn live(&self) -> bool {
        self.status & status::DRIVER_OK != 0 && self.status & status::DEVICE_NEEDS_RESET == 0
    }
}

fn lo(v: u64) -> u64 {
    v & 0xffff_ffff
}

fn with_lo(old: u64, v: u64) -> u64 {
    (old & !0xffff_ffff) | lo(v)
}

fn with_hi(old: u64, v: u64) -> u64 {
    lo(old) | (lo(v) << 32)
}

impl<D: VirtioDevice> MmioDevice for Transport<D> {
    fn name(&self) -> &'static str {
        self.name
    }

    /// A VM restart: a device reset, and the line low without telling the
    /// interrupt controller (which is reset too). A disk keeps its data.
    fn reset(&self) {
        let mut st = self.state.lock();
        Self::clear(&mut st);
        st.line_level = false;
        self.pending.store(false, Ordering::Release);
        self.fresh.store(false, Ordering::Release);
    }

    fn at_power_on(&self) -> bool {
        Transport::at_power_on(self)
    }

    fn read(&self, _env: &mut dyn DeviceEnv, off: u64, width: Width) -> Result<u64, MmioError> {
        let st = self.state.lock();
        if off >= reg::CONFIG {
            return config_access(off, width).map(|o| {
                let mut b = [0u8; 8];
                let n = width.bytes() as usize;
                st.dev.read_config(o, &mut b[..n]);
                u64::from_le_bytes(b)
            });
        }
        if width != Width::Word || !off.is_multiple_of(4) {
            return Err(MmioError::BadAccess);
        }
        let q = st.queues.get(st.queue_sel as usize);
        let v: u64 = match off {
            reg::MAGIC => u64::from(MAGIC),
            reg::VERSION => u64::from(VERSION),
            reg::DEVICE_ID => u64::from(st.dev.device_id()),
            reg::VENDOR_ID => u64::from(VENDOR),
            reg::DEVICE_FEATURES => match st.device_features_sel {
                0 => lo(Self::offered(&st)),
                1 => Self::offered(&st) >> 32,
                _ => 0,
            },
            reg::QUEUE_NUM_MAX => q.map_or(0, |_| u64::from(MAX_QUEUE_SIZE)),
            reg::QUEUE_READY => q.map_or(0, |q| u64::from(q.ready)),
            reg::INTERRUPT_STATUS => u64::from(st.interrupt),
            reg::STATUS => u64::from(st.status),
            reg::QUEUE_NUM => q.map_or(0, |q| u64::from(q.size)),
            reg::QUEUE_DESC_LOW => q.map_or(0, |q| lo(q.desc)),
            reg::QUEUE_DESC_HIGH => q.map_or(0, |q| q.desc >> 32),
            reg::QUEUE_DRIVER_LOW => q.map_or(0, |q| lo(q.avail)),
            reg::QUEUE_DRIVER_HIGH => q.map_or(0, |q| q.avail >> 32),
            reg::QUEUE_DEVICE_LOW => q.map_or(0, |q| lo(q.used)),
            reg::QUEUE_DEVICE_HIGH => q.map_or(0, |q| q.used >> 32),
            // No shared memory regions: length all ones means "none".
            reg::SHM_LEN_LOW | reg::SHM_LEN_HIGH => 0xffff_ffff,
            reg::CONFIG_GENERATION => u64::from(st.config_generation),
            // Write-only and reserved registers read as zero.
            _ => 0,
        };
        Ok(v)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        off: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        self.write_within(env, off, width, value, &mut Budget::exit())
    }
}

impl<D: VirtioDevice> Transport<D> {
    /// A register write whose queue work (a notification) spends `budget`
    /// (shared with what the caller does in the same exit).
    pub fn write_within(
        &self,
        env: &mut dyn DeviceEnv,
        off: u64,
        width: Width,
        value: u64,
        budget: &mut Budget,
    ) -> Result<(), MmioError> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if off >= reg::CONFIG {
            let o = config_access(off, width)?;
            let n = width.bytes() as usize;
            st.dev.write_config(o, &value.to_le_bytes()[..n]);
            return Ok(());
        }
        if width != Width::Word || !off.is_multiple_of(4) {
            return Err(MmioError::BadAccess);
        }
        let v = lo(value);
        match off {
            reg::DEVICE_FEATURES_SEL => st.device_features_sel = v as u32,
            reg::DRIVER_FEATURES_SEL => st.driver_features_sel = v as u32,
            // Features are fixed once FEATURES_OK is set.
            reg::DRIVER_FEATURES if st.status & status::FEATURES_OK == 0 => {
                match st.driver_features_sel {
                    0 => st.driver_features = with_lo(st.driver_features, v),
                    1 => st.driver_features = with_hi(st.driver_features, v),
                    _ => {}
                }
            }
            reg::QUEUE_SEL => st.queue_sel = v as u32,
            reg::QUEUE_NUM => Self::set_queue(st, |q| q.size = v as u16),
            reg::QUEUE_DESC_LOW => Self::set_queue(st, |q| q.desc = with_lo(q.desc, v)),
            reg::QUEUE_DESC_HIGH => Self::set_queue(st, |q| q.desc = with_hi(q.desc, v)),
            reg::QUEUE_DRIVER_LOW => Self::set_queue(st, |q| q.avail = with_lo(q.avail, v)),
            reg::QUEUE_DRIVER_HIGH => Self::set_queue(st, |q| q.avail = with_hi(q.avail, v)),
            reg::QUEUE_DEVICE_LOW => Self::set_queue(st, |q| q.used = with_lo(q.used, v)),
            reg::QUEUE_DEVICE_HIGH => Self::set_queue(st, |q| q.used = with_hi(q.used, v)),
            reg::QUEUE_READY => {
                if let Some(q) = Self::queue(st) {
                    if v == 0 {
                        q.reset();
                    } else if v == 1 && q.valid() && q.in_memory(env.memory()) {
                        // A configuration that cannot work (rings outside
                        // RAM included) stays not ready; the driver reads
                        // QueueReady back.
                        q.ready = true;
                    }
                }
            }
            reg::QUEUE_NOTIFY => self.notify(st, env, v as u32, budget),
            reg::INTERRUPT_ACK => {
                st.interrupt &= !(v as u32);
                self.drive_line(st, env);
            }
            reg::STATUS => self.write_status(st, env, v as u32),
            reg::SHM_SEL => {}
            // Read-only and reserved registers ignore writes.
            _ => {}
        }
        Ok(())
    }
}

/// The offset into the device configuration space of an access at `off`,
/// if its width and alignment are allowed (1, 2, 4 or 8 bytes, naturally
/// aligned, within the region).
fn config_access(off: u64, width: Width) -> Result<u64, MmioError> {
    let n = width.bytes();
    if !off.is_multiple_of(n) || off + n > REGION_SIZE {
        return Err(MmioError::BadAccess);
    }
    Ok(off - reg::CONFIG)
}

#[cfg(test)]
pub(crate) mod tests;
