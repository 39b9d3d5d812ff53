//! The per-pCPU side of lazy FP, the same for every backend: this pCPU's
//! [`FpEngine`], and the requests of other pCPUs that want a vCPU's
//! registers, still live in this pCPU's FP unit, written back (the vCPU is
//! about to run there). The requester kicks this pCPU and waits
//! ([`load_waiting`]); this pCPU answers after the kick's interrupt exit
//! or in its idle loop ([`PcpuFp::service`]).

use crate::base::sync::{AtomicBool, Mutex, MutexGuard, Ordering};
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::{FpEngine, FpHw, FpLoad, FpPolicy, VcpuFp};

/// One pCPU's FP engine and the write-back requests addressed to it.
pub struct PcpuFp<H: FpHw> {
    engine: Mutex<Option<FpEngine<H>>>,
    requests: Mutex<Vec<Arc<VcpuFp<H::State>>>>,
    /// Set after a push to `requests`: the exit path looks at this flag,
    /// not the lock, when nobody asked.
    asked: AtomicBool,
}

impl<H: FpHw> PcpuFp<H> {
    crate::base::sync::const_fn! {
        pub fn new() -> Self {
            PcpuFp {
                engine: Mutex::new(None),
                requests: Mutex::new(Vec::new()),
                asked: AtomicBool::new(false),
            }
        }
    }

    /// Gives this pCPU its engine (before its run loop).
    pub fn init(&self, cpu: usize, policy: FpPolicy, hw: H) {
        *self.engine.lock() = Some(FpEngine::new(cpu, policy, hw));
    }

    /// The engine (`None` before [`PcpuFp::init`]).
    pub fn lock(&self) -> MutexGuard<'_, Option<FpEngine<H>>> {
        self.engine.lock()
    }

    /// Asks this pCPU to write `fp`'s registers back (the caller kicks it).
    pub fn ask(&self, fp: &Arc<VcpuFp<H::State>>) {
        self.requests.lock().push(Arc::clone(fp));
        self.asked.store(true, Ordering::Release);
    }

    /// Writes back the FP registers other pCPUs asked for. Called after
    /// interrupt exits (a request comes with a kick) and in idle: the look
    /// at the flag is inlined, the work (and the register saves of a bigger
    /// function) only when something was asked.
    #[inline]
    pub fn service(&self) {
        if self.asked.load(Ordering::Acquire) {
            self.serve_requests();
        }
    }

    #[inline(never)]
    fn serve_requests(&self) {
        // A request pushed after this swap sets the flag again and is
        // served at the next call (its requester kicks and waits).
        if !self.asked.swap(false, Ordering::AcqRel) {
            return;
        }
        let reqs = core::mem::take(&mut *self.requests.lock());
        if reqs.is_empty() {
            return;
        }
        if let Some(engine) = self.lock().as_mut() {
            for r in reqs {
                engine.vcpu_migrate(&r);
            }
        }
    }
}

impl<H: FpHw> Default for PcpuFp<H> {
    fn default() -> Self {
        Self::new()
    }
}

/// Loads `fp` on pCPU `cpu` (`pcpus` gives each pCPU's [`PcpuFp`]): when its registers are live on
/// another pCPU, asks that one to write them back, `kick`s it and waits
/// (serving requests addressed to `cpu` meanwhile, so two pCPUs waiting for
/// each other both go on). Returns `false` when `ended` says the vCPU's VM
/// ended during the wait (the other pCPU may have left its run loop and
/// will never answer; the caller drops the vCPU).
pub fn load_waiting<'a, H: FpHw + 'a>(
    pcpus: impl Fn(usize) -> Option<&'a PcpuFp<H>>,
    cpu: usize,
    fp: &Arc<VcpuFp<H::State>>,
    kick: impl Fn(usize),
    ended: impl Fn() -> bool,
) -> bool {
    let Some(me) = pcpus(cpu) else {
        return true;
    };
    loop {
        // (Register moves count themselves in their own VM's stats.)
        let r = me.lock().as_mut().map(|e| e.vcpu_load(fp));
        match r {
            Some(FpLoad::LiveOn(p)) => {
                let Some(other) = pcpus(p) else {
                    return true;
                };
                other.ask(fp);
                kick(p);
                while fp.live_on() == Some(p) {
                    if ended() {
                        return false;
                    }
                    me.service();
                    crate::base::sync::spin_loop();
                }
            }
            _ => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::FakeUnit;
    use super::*;
    use core::cell::Cell;

    fn pcpus() -> Vec<PcpuFp<FakeUnit>> {
        let v: Vec<PcpuFp<FakeUnit>> = (0..2).map(|_| PcpuFp::new()).collect();
        for (i, p) in v.iter().enumerate() {
            p.init(i, FpPolicy::Lazy, FakeUnit::default());
        }
        v
    }

    /// vCPU `fp` runs on `cpu` and uses FP (its registers become live there).
    fn run_there(p: &PcpuFp<FakeUnit>, fp: &Arc<VcpuFp<[u64; 4]>>, value: u64) {
        let mut e = p.lock();
        let e = e.as_mut().unwrap();
        assert!(!matches!(e.vcpu_load(fp), FpLoad::LiveOn(_)));
        e.fp_trap();
        e.hw.regs = [value; 4];
        e.vcpu_put();
    }

    #[test]
    fn nothing_asked_nothing_done() {
        let p = pcpus();
        p[0].service();
        let fp = Arc::new(VcpuFp::new([1; 4]));
        assert!(load_waiting(
            |c| p.get(c),
            0,
            &fp,
            |_| panic!("no kick"),
            || false
        ));
    }

    #[test]
    fn a_load_elsewhere_asks_kicks_and_gets_the_registers() {
        let p = pcpus();
        let fp = Arc::new(VcpuFp::new([0; 4]));
        run_there(&p[1], &fp, 7);
        assert_eq!(fp.live_on(), Some(1), "lazy: still in pCPU 1's unit");
        let kicks = Cell::new(0);
        // pCPU 1 answers when kicked (here: at once, on this thread).
        let ok = load_waiting(
            |c| p.get(c),
            0,
            &fp,
            |c| {
                assert_eq!(c, 1);
                kicks.set(kicks.get() + 1);
                p[1].service();
            },
            || false,
        );
        assert!(ok);
        assert_eq!(kicks.get(), 1);
        assert_ne!(fp.live_on(), Some(1));
        assert_eq!(fp.with_saved(|s| *s), Some([7; 4]));
        // The request list was emptied: a second service does nothing.
        p[1].service();
    }

    #[test]
    fn an_ended_vm_stops_the_wait() {
        let p = pcpus();
        let fp = Arc::new(VcpuFp::new([0; 4]));
        run_there(&p[1], &fp, 3);
        // pCPU 1 never answers; the VM ends.
        assert!(!load_waiting(|c| p.get(c), 0, &fp, |_| {}, || true));
        assert_eq!(fp.live_on(), Some(1));
    }
}
