//! Adaptive halt polling, per vCPU (the scheme of Linux KVM's halt-poll).
//!
//! A vCPU that waits for an interrupt (WFI, `idle`) is not put away at
//! once: if nobody else wants its pCPU, the backend first polls, for up to
//! [`HaltPoll::window`] counter ticks, whether an interrupt has arrived,
//! and if one does the guest goes on without a block, a wake-up, a
//! `put` and a `load`. The window adapts to how long the vCPU's waits
//! really are: a wait that ended within the limit grows it (polling would
//! have caught it), one that took longer shrinks it (polling would only
//! have burnt the pCPU). A poll that found its interrupt leaves it alone.
//! A wait lasts from the block to the wake-up: the time a woken vCPU then
//! spends runnable, waiting for its pCPU (another vCPU runs there), is
//! the scheduler's, not the wait's ([`HaltPoll::blocking`],
//! [`HaltPoll::loaded`]). Counted in, it made two VMs whose timers tick
//! half a period apart on one pCPU see waits of about half the period and
//! poll for all of it at every halt.
//!
//! All times are counter ticks; the caller chooses the limit (kestrel: 100
//! us of its counter).

/// How a poll ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollEnd {
    /// The vCPU has something to take: no block.
    Work,
    /// A host interrupt waits (a kick, the tick): the backend decides.
    Interrupted,
    /// The window passed, or another vCPU wants the pCPU (or the window is
    /// 0): block.
    Expired,
}

/// One vCPU's polling state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HaltPoll {
    window: u64,
    limit: u64,
    /// The block under way: when it began, and the vCPU's run delay (its
    /// ticks spent runnable in run queues, the scheduler's running total)
    /// then.
    block: Option<(u64, u64)>,
}

impl HaltPoll {
    /// No polling yet, windows up to `limit` ticks (0: never poll).
    pub const fn new(limit: u64) -> Self {
        HaltPoll {
            window: 0,
            limit,
            block: None,
        }
    }

    /// The vCPU blocks at `now` (polling did not find its interrupt), with
    /// `run_delay` ticks of run-queue wait so far.
    pub fn blocking(&mut self, now: u64, run_delay: u64) {
        self.block = Some((now, run_delay));
    }

    /// The vCPU is loaded at `now` with `run_delay` ticks of run-queue wait
    /// so far. After a block, its wait adapts the window: the time since
    /// the block less the run-queue wait since then (the vCPU was woken,
    /// then waited for the pCPU).
    pub fn loaded(&mut self, now: u64, run_delay: u64) {
        if let Some((at, delay)) = self.block.take() {
            let queued = run_delay.saturating_sub(delay);
            self.blocked_for(now.saturating_sub(at).saturating_sub(queued));
        }
    }

    /// How long to poll before blocking, in ticks (0: block at once).
    pub const fn window(&self) -> u64 {
        self.window
    }

    /// Polls for up to [`HaltPoll::window`] ticks of `now`: each round asks
    /// `work` (the vCPU has an interrupt to take), then `interrupted` (a
    /// host interrupt is pending), then whether the window has passed or
    /// `wanted` (another vCPU waits for this pCPU).
    pub fn poll(
        &self,
        mut now: impl FnMut() -> u64,
        mut work: impl FnMut() -> bool,
        mut interrupted: impl FnMut() -> bool,
        mut wanted: impl FnMut() -> bool,
    ) -> PollEnd {
        if self.window == 0 {
            return PollEnd::Expired;
        }
        let until = now().saturating_add(self.window);
        loop {
            if work() {
                return PollEnd::Work;
            }
            if interrupted() {
                return PollEnd::Interrupted;
            }
            if now() >= until || wanted() {
                return PollEnd::Expired;
            }
            core::hint::spin_loop();
        }
    }

    /// The first window a growing one takes.
    const fn start(&self) -> u64 {
        let s = self.limit / 8;
        if s == 0 {
            self.limit
        } else {
            s
        }
    }

    /// The vCPU blocked (polling did not find its interrupt, or did not
    /// run) and was woken `waited` ticks after it began to wait.
    pub fn blocked_for(&mut self, waited: u64) {
        if self.limit == 0 {
            return;
        }
        if waited <= self.limit {
            // A poll this long would have caught it.
            self.window = self
                .window
                .saturating_mul(2)
                .max(self.start())
                .max(waited.saturating_add(waited / 8))
                .min(self.limit);
        } else {
            self.window /= 2;
            if self.window < self.start() {
                self.window = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_runnable_after_the_wake_is_not_part_of_the_wait() {
        // Blocked at 1000, woken at 1300, loaded at 2500 after waiting
        // 1200 ticks for its pCPU: a 300-tick wait, which polling covers.
        let mut h = HaltPoll::new(1000);
        h.blocking(1000, 40);
        h.loaded(2500, 40 + 1200);
        assert!(h.window() >= 300 && h.window() <= 1000, "{h:?}");
        // Blocked 1500 ticks, loaded at once: the window closes again.
        for t in 0..20u64 {
            h.blocking(10_000 * t, 1240);
            h.loaded(10_000 * t + 1500, 1240);
        }
        assert_eq!(h.window(), 0, "{h:?}");
        // A load without a block (a preempted vCPU) changes nothing.
        let mut g = HaltPoll::new(1000);
        g.loaded(5000, 0);
        assert_eq!(g, HaltPoll::new(1000));
    }

    #[test]
    fn short_waits_grow_the_window_to_cover_them() {
        let mut h = HaltPoll::new(1000);
        assert_eq!(h.window(), 0, "no polling before a wait was seen");
        h.blocked_for(300);
        assert!(h.window() >= 300 && h.window() <= 1000, "{h:?}");
        h.blocked_for(300);
        assert!(h.window() >= 300);
        for _ in 0..10 {
            h.blocked_for(900);
        }
        assert_eq!(h.window(), 1000, "never beyond the limit");
    }

    #[test]
    fn long_waits_shrink_it_to_nothing() {
        let mut h = HaltPoll::new(1000);
        h.blocked_for(100);
        assert!(h.window() > 0);
        for _ in 0..20 {
            h.blocked_for(50_000);
        }
        assert_eq!(h.window(), 0, "a vCPU that sleeps long is not polled");
    }

    #[test]
    fn a_mix_settles_by_what_dominates() {
        // Mostly short waits with an occasional long one: polling stays on.
        let mut h = HaltPoll::new(1000);
        for i in 0..100 {
            h.blocked_for(if i % 10 == 9 { 1_000_000 } else { 200 });
        }
        assert!(h.window() >= 200, "{h:?}");
        // Mostly long waits with an occasional short one: polling stays off
        // or small.
        let mut h = HaltPoll::new(1000);
        for i in 0..100 {
            h.blocked_for(if i % 10 == 9 { 200 } else { 1_000_000 });
        }
        assert!(h.window() <= 250, "{h:?}");
    }

    #[test]
    fn poll_ends_on_work_interrupt_window_or_demand() {
        use core::cell::Cell;
        let mut h = HaltPoll::new(1000);
        let t = Cell::new(0u64);
        let clock = || {
            t.set(t.get() + 10);
            t.get()
        };
        // No window yet: no poll at all.
        assert_eq!(h.poll(clock, || true, || false, || false), PollEnd::Expired);
        h.blocked_for(500);
        let w = h.window();
        assert!(w >= 500);
        // Work after a while.
        t.set(0);
        let mut n = 0;
        let work = || {
            n += 1;
            n == 5
        };
        assert_eq!(h.poll(clock, work, || false, || false), PollEnd::Work);
        // Work wins over a pending interrupt; the interrupt over the window.
        assert_eq!(h.poll(clock, || true, || true, || true), PollEnd::Work);
        assert_eq!(
            h.poll(clock, || false, || true, || true),
            PollEnd::Interrupted
        );
        // Nothing arrives: the window runs out, never much later.
        t.set(0);
        assert_eq!(
            h.poll(clock, || false, || false, || false),
            PollEnd::Expired
        );
        assert!(t.get() >= w && t.get() <= w + 20, "{} vs {w}", t.get());
        // Someone else wants the pCPU: at once.
        t.set(0);
        assert_eq!(h.poll(clock, || false, || false, || true), PollEnd::Expired);
        assert!(t.get() <= 20);
    }

    #[test]
    fn limit_zero_disables_it() {
        let mut h = HaltPoll::new(0);
        h.blocked_for(1);
        assert_eq!(h.window(), 0);
    }
}
