//! virtio console (device ID 3): one port, `hvc0` in a Linux guest.
//!
//! Transmit chains go to the VM's console as many bytes per exit as the
//! exit's budget covers (not a byte per exit as a UART costs); a chain
//! longer than that continues at the VM's next exits, in order. Host
//! keystrokes wait in a bounded input buffer until the driver offers
//! receive buffers; while it is full the console mux holds further input,
//! as it does for a full UART FIFO.

use crate::base::lock::Mutex;
use alloc::collections::VecDeque;
use alloc::sync::Arc;

use super::queue::{Chain, Pop, Queue, QueueError};
use super::{id, Budget, Progress, VirtioDevice, Work};
use crate::dev::vdev::bus::DeviceEnv;

/// Receive queue (host -> guest) and transmit queue (guest -> host).
pub const RX: usize = 0;
pub const TX: usize = 1;
/// Input bytes held for the guest at most.
pub const INPUT_MAX: usize = 4096;
/// Output bytes printed from one transmit chain at most; the rest of a
/// longer chain is dropped (and counted). A driver writes a page at most
/// at a time (Linux's hvc does); the cap bounds the work of one exit, whose
/// chains could otherwise name the VM's whole RAM many times over.
pub const TX_CHAIN_MAX: usize = 4096;
/// What printing one byte costs in budget bytes ([`crate::dev::virtio::Budget`]):
/// the console multiplexer's work on it (line assembly or the terminal
/// filter, the scrollback ring) and its copy into the VM's output buffer,
/// far dearer than copying it; never the UART's time (the exit does not
/// wait for the UART: `base::conout`). Measured under `-icount`
/// (`attack-console-budget`), about 30 times what a byte of guest memory
/// moved costs.
pub const TX_COST: u64 = 32;
/// Bytes of a transmit chain read at a time (the indivisible step: a
/// chain goes on within later budgets from where it stopped).
pub const TX_PIECE: usize = 128;

/// Host input waiting for the guest's receive buffers (bounded). Shared
/// between the console multiplexer, which fills it, and the device, which
/// empties it into the ring. Lock order: the transport, then this.
#[derive(Default)]
pub struct Input {
    bytes: VecDeque<u8>,
}

impl Input {
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl crate::dev::vdev::uart::RxPort for Input {
    fn can_receive(&self) -> bool {
        self.bytes.len() < INPUT_MAX
    }

    fn receive(&mut self, byte: u8) -> bool {
        if !self.can_receive() {
            return false;
        }
        self.bytes.push_back(byte);
        true
    }
}

/// The console device state.
#[derive(Default)]
pub struct Console {
    input: Arc<Mutex<Input>>,
    /// Bytes the guest wrote, for statistics.
    pub tx_bytes: u64,
    /// Bytes beyond [`TX_CHAIN_MAX`] in a chain, not printed.
    pub tx_dropped: u64,
    /// The transmit chain under way and how many of its bytes went out.
    tx: Option<(Chain, usize)>,
}

impl Console {
    pub fn new() -> Console {
        Console::default()
    }

    /// The input buffer, for the console multiplexer.
    pub fn input(&self) -> Arc<Mutex<Input>> {
        self.input.clone()
    }

    /// Moves held input into the receive buffers the driver offered,
    /// within `budget`.
    pub fn deliver(
        &mut self,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        let q = &mut queues[RX];
        let mem = env.memory();
        let mut input = self.input.lock();
        loop {
            if input.bytes.is_empty() {
                return Ok(Progress::Done);
            }
            if !budget.chain() {
                return Ok(Progress::More);
            }
            let c = match q.pop_within(mem, budget)? {
                Pop::Chain(c) => c,
                Pop::Empty => return Ok(Progress::Done),
                Pop::Later => return Ok(Progress::More),
            };
            budget.spend(c.cost());
            let mut w = c.writer();
            let (a, b) = input.bytes.as_slices();
            let mut n = w.write(mem, a)?;
            if n == a.len() {
                n += w.write(mem, b)?;
            }
            budget.spend(w.cost());
            input.bytes.drain(..n);
            work.interrupt |= q.push_used(mem, c.head, n as u32)?;
        }
    }

    /// Transmit chains in ring order, the one under way first: each byte
    /// goes to the VM's console within the budget, [`TX_PIECE`] bytes at a
    /// time, so a chain longer than one budget spans several exits.
    fn transmit(
        &mut self,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        loop {
            let (c, mut done) = match self.tx.take() {
                Some(t) => t,
                None => {
                    if !budget.chain() {
                        return Ok(Progress::More);
                    }
                    let c = match queues[TX].pop_within(env.memory(), budget)? {
                        Pop::Chain(c) => c,
                        Pop::Empty => return Ok(Progress::Done),
                        Pop::Later => return Ok(Progress::More),
                    };
                    budget.spend(c.cost());
                    (c, 0)
                }
            };
            let mut r = c.reader();
            r.skip(done);
            let mut buf = [0u8; TX_PIECE];
            let mut finished = false;
            while budget.bytes() > 0 {
                let want = (TX_CHAIN_MAX - done).min(buf.len());
                let n = if want == 0 {
                    0
                } else {
                    r.read(env.memory(), &mut buf[..want])?
                };
                if n == 0 {
                    finished = true;
                    break;
                }
                env.console_write_virtio(&buf[..n]);
                budget.spend(n as u64 * TX_COST);
                budget.spend(core::mem::take(&mut r.calls) * super::CALL_COST);
                self.tx_bytes += n as u64;
                done += n;
            }
            if !finished {
                self.tx = Some((c, done));
                return Ok(Progress::More);
            }
            // Not read: the chain's buffers were checked when it was taken
            // (bounds, overflow); whether the rest is RAM does not matter.
            self.tx_dropped += c.len(false).saturating_sub(TX_CHAIN_MAX as u64);
            work.interrupt |= queues[TX].push_used(env.memory(), c.head, 0)?;
        }
    }
}

impl VirtioDevice for Console {
    fn device_id(&self) -> u32 {
        id::CONSOLE
    }

    fn features(&self) -> u64 {
        0
    }

    fn queues(&self) -> usize {
        2
    }

    /// No optional fields offered: cols, rows, max_nr_ports read as zero.
    fn read_config(&self, offset: u64, out: &mut [u8]) {
        super::read_config_bytes(&[0; 12], offset, out);
    }

    fn notify(
        &mut self,
        index: usize,
        queues: &mut [Queue],
        env: &mut dyn DeviceEnv,
        budget: &mut Budget,
        work: &mut Work,
    ) -> Result<Progress, QueueError> {
        match index {
            RX => self.deliver(queues, env, budget, work),
            TX => self.transmit(queues, env, budget, work),
            _ => Ok(Progress::Done),
        }
    }

    /// Input typed before the driver came up stays for it; a transmit
    /// chain under way is dropped.
    fn reset(&mut self) {
        self.tx = None;
    }

    fn at_power_on(&self) -> bool {
        self.tx.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::virtio::mmio::tests::{bring_up, wr, Env};
    use crate::dev::virtio::mmio::{reg, Transport};
    use crate::dev::virtio::queue::tests::{Driver, DATA};
    use crate::dev::virtio::{BUDGET_BYTES, F_VERSION_1};

    /// Queue `q`'s driver, at the ring addresses `bring_up` gave it.
    fn driver(q: u64, size: u16) -> Driver {
        Driver::at(size, q * 0x4000)
    }

    #[test]
    fn a_transmit_chain_prints_at_most_its_cap() {
        let t = Transport::new("console", 1, Console::new());
        let mut env = Env::new();
        bring_up(&t, &mut env, F_VERSION_1, &[0, 1], 8);
        let mut d = driver(1, 8);
        env.ram.put(DATA, &[b'x'; 0x2000]);
        // Two buffers of 6 KiB over the same bytes: 12 KiB in one chain.
        d.chain(&env.ram, 0, &[(DATA, 0x1800, false), (DATA, 0x1800, false)]);
        d.offer(&env.ram, 0);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 1);
        // One exit prints what its budget covers; the chain goes on at the
        // next exits.
        let first = env.out.len();
        assert!(first < TX_CHAIN_MAX, "{first}");
        assert!(first as u64 * TX_COST <= BUDGET_BYTES + TX_PIECE as u64 * TX_COST);
        assert_eq!(d.used(&env.ram).0, 0, "not done yet");
        while t.resume(&mut env, &mut Budget::exit()) {}
        assert_eq!(env.out.len(), TX_CHAIN_MAX);
        let (sent, dropped) = t.with_device(|c| (c.tx_bytes, c.tx_dropped));
        assert_eq!(
            (sent, dropped),
            (TX_CHAIN_MAX as u64, 0x3000 - TX_CHAIN_MAX as u64)
        );
        assert_eq!(d.used(&env.ram), (1, vec![(0, 0)]));
    }

    #[test]
    fn a_chain_longer_than_a_budget_keeps_its_order_and_a_reset_drops_it() {
        let t = Transport::new("console", 1, Console::new());
        let mut env = Env::new();
        bring_up(&t, &mut env, F_VERSION_1, &[0, 1], 8);
        let mut d = driver(1, 8);
        let text: Vec<u8> = (0..4096u32).map(|i| b'a' + (i % 26) as u8).collect();
        env.ram.put(DATA, &text);
        env.ram.put(DATA + 0x2000, b"after\n");
        d.chain(&env.ram, 0, &[(DATA, 4096, false)]);
        d.offer(&env.ram, 0);
        d.chain(&env.ram, 1, &[(DATA + 0x2000, 6, false)]);
        d.offer(&env.ram, 1);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 1);
        let mut exits = 1;
        while t.resume(&mut env, &mut Budget::exit()) {
            exits += 1;
        }
        assert!(exits >= 2, "{exits}");
        let mut want = text.clone();
        want.extend_from_slice(b"after\n");
        assert_eq!(env.out, want);
        assert_eq!(d.used(&env.ram), (2, vec![(0, 0), (1, 0)]));
        // A reset with a chain under way: dropped, nothing pending.
        d.chain(&env.ram, 2, &[(DATA, 4096, false)]);
        d.offer(&env.ram, 2);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 1);
        assert!(t.has_pending());
        assert!(!t.at_power_on());
        wr(&t, &mut env, reg::STATUS, 0);
        assert!(!t.has_pending());
        assert!(t.at_power_on());
    }

    #[test]
    fn transmit_prints_whole_chains() {
        let t = Transport::new("console", 1, Console::new());
        let mut env = Env::new();
        bring_up(&t, &mut env, F_VERSION_1, &[0, 1], 8);
        let mut d = driver(1, 8);
        env.ram.put(DATA, b"hello ");
        env.ram.put(DATA + 0x100, b"world\n");
        d.chain(&env.ram, 0, &[(DATA, 6, false)]);
        d.offer(&env.ram, 0);
        d.chain(&env.ram, 1, &[(DATA + 0x100, 6, false)]);
        d.offer(&env.ram, 1);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 1);
        assert_eq!(env.out, b"hello world\n");
        assert_eq!(t.with_device(|c| c.tx_bytes), 12);
        assert_eq!(env.irqs, [(1, true)]);
    }

    #[test]
    fn input_waits_for_buffers_and_is_bounded() {
        let t = Transport::new("console", 1, Console::new());
        let mut env = Env::new();
        use crate::dev::vdev::uart::RxPort;
        // Typed before the driver is up: held.
        let input = t.with_device(|c| c.input());
        for &b in b"ls\n" {
            assert!(input.lock().receive(b));
        }
        bring_up(&t, &mut env, F_VERSION_1, &[0, 1], 8);
        let mut d = driver(0, 8);
        d.chain(&env.ram, 0, &[(DATA, 2, true)]);
        d.offer(&env.ram, 0);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
        assert_eq!(env.ram.get(DATA, 2), b"ls");
        d.chain(&env.ram, 1, &[(DATA + 0x10, 16, true)]);
        d.offer(&env.ram, 1);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
        assert_eq!(d.used(&env.ram), (2, vec![(0, 2), (1, 1)]));
        assert_eq!(env.ram.get(DATA + 0x10, 1), b"\n");
        // A buffer offered with no input waits (not used empty).
        d.chain(&env.ram, 2, &[(DATA + 0x20, 16, true)]);
        d.offer(&env.ram, 2);
        wr(&t, &mut env, reg::QUEUE_NOTIFY, 0);
        assert_eq!(d.used(&env.ram).0, 2);
        // Input from the host side fills it.
        input.lock().receive(b'x');
        let r = t.with_live(&mut env, |c, q, env, w| {
            c.deliver(q, env, &mut Budget::exit(), w)
        });
        assert_eq!(r, Some(Progress::Done));
        assert_eq!(d.used(&env.ram).0, 3);
        // Bounded input.
        let mut i = input.lock();
        for _ in 0..INPUT_MAX {
            i.receive(b'y');
        }
        assert!(!i.can_receive());
        assert!(!i.receive(b'z'));
        assert_eq!(i.len(), INPUT_MAX);
    }
}
