//! A VM's rebuild (a restart, or a start after it ended) waits for its
//! vCPUs to leave their pCPUs, and no pCPU waits for that.
//!
//! A rebuild may only begin once no pCPU holds a vCPU of the VM (the
//! backend rewrites their register files, RAM and devices). The pCPU that
//! asks for it has stopped the VM's vCPUs ([`Scheduler::stop_vm`]) and
//! kicked the pCPUs running one; each of those puts its vCPU at its next
//! exit. Rather than poll the scheduler until the last put (every poll
//! takes the scheduler's lock, which the putting pCPUs need: one restart
//! stalled every pCPU for most of a second), the asker posts the rebuild
//! here and asks the scheduler to report the last put
//! ([`Scheduler::await_release`]). Exactly one pCPU then completes it:
//!
//! - the asker, at once, if no pCPU held a vCPU of the VM when the
//!   scheduler looked (`post` returns `Ok(true)`);
//! - otherwise the pCPU whose put let go of the VM's last vCPU
//!   ([`crate::vcpu::sched::Put::released`]), right after that put, between
//!   two vCPUs of its own run loop.
//!
//! Both are decided under the scheduler's lock, so exactly one of them
//! goes on; the asker goes on with other work either way. The completer
//! reads what to do here ([`PendingRebuild::pending`]) and ends the rebuild
//! ([`PendingRebuild::done`]) before any vCPU of the VM may run again, so
//! the next rebuild can be posted then and not before. `kernel/tests/
//! loom_rebuild.rs` checks this protocol over the real scheduler.

use crate::base::sync::{AtomicU8, Ordering};
use crate::vcpu::sched::{SchedError, Scheduler};

/// What a VM does once none of its vCPUs is on a pCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebuild {
    /// A restart: a reset request, or the operator's restart.
    Restart,
    /// A start of a VM that has ended (the operator's start).
    Start,
}

/// Why [`PendingRebuild::post`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// Another rebuild of the VM is under way.
    Busy,
    /// The scheduler refused the wait (a vCPU of the VM is not stopped).
    Sched(SchedError),
}

const NONE: u8 = 0;
const RESTART: u8 = 1;
const START: u8 = 2;

/// The rebuild a VM waits for, if any (one per VM).
#[derive(Debug, Default)]
pub struct PendingRebuild {
    op: AtomicU8,
}

impl PendingRebuild {
    pub fn new() -> Self {
        PendingRebuild {
            op: AtomicU8::new(NONE),
        }
    }

    /// Posts `op` for VM `vm`, whose vCPUs the caller has stopped, and
    /// asks the scheduler to report the put of the last one still on a
    /// pCPU. `Ok(true)`: none is, the caller completes the rebuild now
    /// (holding no vCPU of the VM); `Ok(false)`: the pCPU that puts the
    /// last one will. Refused (nothing posted) while another rebuild is
    /// under way, or if a vCPU of `vm` is not stopped.
    pub fn post(&self, sched: &Scheduler, vm: u16, op: Rebuild) -> Result<bool, PostError> {
        let code = match op {
            Rebuild::Restart => RESTART,
            Rebuild::Start => START,
        };
        // Before the scheduler's lock: a put that reports the release
        // takes that lock after `await_release` did, so it sees `op`.
        if self
            .op
            .compare_exchange(NONE, code, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(PostError::Busy);
        }
        sched.await_release(vm).map_err(|e| {
            self.op.store(NONE, Ordering::Release);
            PostError::Sched(e)
        })
    }

    /// The rebuild posted and not yet done, if any: what the pCPU told to
    /// complete it (by `post` or by its put) does.
    pub fn pending(&self) -> Option<Rebuild> {
        match self.op.load(Ordering::Acquire) {
            RESTART => Some(Rebuild::Restart),
            START => Some(Rebuild::Start),
            _ => None,
        }
    }

    /// The rebuild is complete (or failed): another may be posted. Called
    /// by its completer before any vCPU of the VM may run again.
    pub fn done(&self) {
        self.op.store(NONE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcpu::sched::{CpuMask, PutReason, RunState, VcpuKey};

    fn key(vcpu: u16) -> VcpuKey {
        VcpuKey { vm: 0, vcpu }
    }

    #[test]
    fn the_asker_completes_when_no_pcpu_holds_a_vcpu() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0), CpuMask::first(2), true).unwrap();
        let p = PendingRebuild::new();
        assert_eq!(
            p.post(&s, 0, Rebuild::Restart),
            Err(PostError::Sched(SchedError::WrongState(RunState::Runnable))),
            "not stopped"
        );
        assert_eq!(p.pending(), None, "a refused post leaves nothing");
        s.stop_vm(0);
        assert_eq!(p.post(&s, 0, Rebuild::Restart), Ok(true));
        assert_eq!(p.pending(), Some(Rebuild::Restart));
        assert_eq!(p.post(&s, 0, Rebuild::Start), Err(PostError::Busy));
        p.done();
        assert_eq!(p.pending(), None);
        assert_eq!(
            p.post(&s, 1, Rebuild::Start),
            Err(PostError::Sched(SchedError::NoSuchVcpu))
        );
    }

    #[test]
    fn the_last_put_is_told_once() {
        let s = Scheduler::new(CpuMask::first(2));
        s.add(key(0), CpuMask::first(2), true).unwrap();
        s.add(key(1), CpuMask::first(2), true).unwrap();
        let a = s.pick(0, 0).unwrap();
        let b = s.pick(1, 0).unwrap();
        s.stop_vm(0);
        let p = PendingRebuild::new();
        assert_eq!(p.post(&s, 0, Rebuild::Restart), Ok(false));
        let first = s.put_vcpu(0, a, PutReason::Preempted, 5).unwrap();
        assert_eq!((first.state, first.released), (RunState::Stopped, false));
        let last = s.put_vcpu(1, b, PutReason::Blocked, 5).unwrap();
        assert_eq!((last.state, last.released), (RunState::Stopped, true));
        assert_eq!(p.pending(), Some(Rebuild::Restart));
        // A put that held nothing releases nothing again.
        assert!(!s.put_vcpu(1, b, PutReason::Preempted, 6).unwrap().released);
        s.restart_vm(0, 1, 0).unwrap();
        p.done();
        // An end's stop (nobody waits): the last put releases nothing.
        let a = s.pick(0, 7).unwrap();
        s.stop_vm(0);
        assert!(!s.put_vcpu(0, a, PutReason::Preempted, 8).unwrap().released);
        assert_eq!(p.post(&s, 0, Rebuild::Start), Ok(true));
    }
}
