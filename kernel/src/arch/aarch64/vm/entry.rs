//! Around each entry and exit: the timers' levels into the vGIC model, the
//! list registers filled from it and synced back (with the fast path that
//! leaves them live), and the halt polling of WFI.

use core::sync::atomic::Ordering;

use crate::base::haltpoll::PollEnd;
use crate::dev::vgic::{LrEntry, LrFill, MAX_LRS};
use crate::guest::arm64::ptimer::PhysTimer;
use crate::vm::exitctx::ExitCtx;
use crate::vm::{Vcpu, Vm};

use super::super::gic::{Gic, Priority};
use super::super::timer;
use super::regs::{mrs, msr};
use super::{Arm64Backend, VcpuState, PCPU, PTIMER_PPI, VTIMER_PPI};

/// Enables or disables the physical virtual-timer PPI on `cpu` (a no-op
/// when it is so already).
pub fn set_vtimer_phys(gic: &Gic, cpu: usize, enable: bool) {
    let p = &PCPU[cpu];
    if p.vtimer_enabled.load(Ordering::Relaxed) != enable {
        if enable {
            gic.enable_ppi(VTIMER_PPI, Priority::Normal);
        } else {
            gic.disable_ppi(VTIMER_PPI);
        }
        p.vtimer_enabled.store(enable, Ordering::Relaxed);
    }
}

/// Programs the hardware EL1 physical timer (free for kestrel: guest
/// accesses trap) to force an exit when the loaded vCPU's emulated timer
/// output rises; off when it cannot rise or is high already (the model then
/// drives PPI 30 directly).
pub fn ptimer_backing(t: &PhysTimer, now: u64) {
    match t.backing_deadline(now) {
        Some(at) => {
            msr!("cntp_cval_el0", at);
            msr!("cntp_ctl_el0", 1);
        }
        _ => msr!("cntp_ctl_el0", 0),
    }
}

/// Whether the loaded vCPU's virtual timer asserts its interrupt now
/// (CNTV_CTL_EL0: ENABLE, not IMASK, ISTATUS).
fn vtimer_level() -> bool {
    mrs!("cntv_ctl_el0") & 0b111 == 0b101
}

impl Arm64Backend {
    /// Before an entry: the virtual timer's level into the model, the list
    /// registers from the model, the physical timer PPI as the level needs.
    pub fn prepare_entry(&self, cpu: usize, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) {
        let level = vtimer_level();
        let now = timer::counter();
        // Fastest path: neither timer level moved and the model has nothing
        // new for this vCPU (its flag, read without the lock: a change made
        // after this look comes with a kick), so the live list registers
        // stand and the model's lock is not taken.
        if ctx.lrs_live
            && ctx.vtimer_level == Some(level)
            && ctx.ptimer_level == Some(ctx.ptimer.level(now))
            && !vm.arch.fill_hints.stale(vcpu.index)
        {
            ptimer_backing(&ctx.ptimer, now);
            return;
        }
        let mut g = vm.arch.vgic.lock();
        if ctx.vtimer_level != Some(level) {
            g.set_level(vcpu.index, VTIMER_PPI, level);
            ctx.vtimer_level = Some(level);
        }
        let plevel = ctx.ptimer.level(now);
        if ctx.ptimer_level != Some(plevel) {
            g.set_level(vcpu.index, PTIMER_PPI, plevel);
            ctx.ptimer_level = Some(plevel);
        }
        // Fast path: nothing changed since the last fill and the list
        // registers still hold it: enter as they are.
        if ctx.lrs_live && !g.fill_needed(vcpu.index) {
            drop(g);
            ptimer_backing(&ctx.ptimer, now);
            return;
        }
        let mut fill = LrFill::default();
        g.fill_lrs_into(vcpu.index, self.hw.nr_lrs(), &mut fill);
        drop(g);
        ptimer_backing(&ctx.ptimer, now);
        // The physical timer PPI: left active for the guest while the
        // virtual one is in a list register (HW bit); otherwise deactivated,
        // and disabled while its level is high but the guest cannot take it
        // (so it does not fire again and again).
        let in_lr = fill.lrs.iter().any(|e| e.intid == VTIMER_PPI);
        let p = &PCPU[cpu];
        if !in_lr && p.vtimer_forwarded.swap(false, Ordering::AcqRel) {
            self.gic.clear_active_ppi(VTIMER_PPI);
        }
        set_vtimer_phys(&self.gic, cpu, in_lr || !level);
        self.hw.write_lrs(&fill, ctx.lrs_used);
        ctx.lrs_used = fill.lrs.len();
        // The entries only: assigning the whole fixed-capacity vector
        // copied all of it (a memcpy of about 100 instructions).
        ctx.filled.clear();
        let _ = ctx.filled.extend_from_slice(&fill.lrs);
        ctx.lrs_live = true;
    }

    /// Whether an exit that neither reads nor changes interrupt state (an
    /// HVC) may skip [`Self::sync_after_exit`]: no list register is in use
    /// and both timer levels were low at the last look, with the virtual
    /// timer's physical PPI enabled. A level can then only have risen,
    /// which raises a physical interrupt at EL2 (the virtual timer's PPI;
    /// the emulated physical timer's backing, armed for its deadline): the
    /// exit then does not re-enter in place, and the run loop's entry looks
    /// at both levels.
    #[inline(always)]
    pub fn nothing_to_sync(&self, cpu: usize, ctx: &VcpuState) -> bool {
        ctx.lrs_used == 0
            && ctx.lrs_live
            && ctx.filled.is_empty()
            && ctx.vtimer_level == Some(false)
            && ctx.ptimer_level == Some(false)
            && PCPU[cpu].vtimer_enabled.load(Ordering::Relaxed)
    }

    /// After an exit: the list registers back into the model, unless the
    /// guest changed none of them and none holds a pending interrupt (a
    /// WFI must find those in the model): then they stay live, handed out
    /// as filled (the model reads and writes them through its in-flight
    /// state), and the next entry keeps them if nothing else changed.
    ///
    /// `now` is the counter read at the exit (the emulated physical
    /// timer's level is taken at that instant).
    pub fn sync_after_exit(&self, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState, now: u64) {
        let level = vtimer_level();
        let plevel = ctx.ptimer.level(now);
        // No list register in use (a guest with nothing in flight): none
        // to read back, and nothing for the guest to have changed.
        if ctx.lrs_used == 0
            && ctx.lrs_live
            && ctx.filled.is_empty()
            && ctx.vtimer_level == Some(level)
            && ctx.ptimer_level == Some(plevel)
        {
            return;
        }
        let mut lrs: heapless::Vec<LrEntry, MAX_LRS> = heapless::Vec::new();
        self.hw.read_lrs(ctx.lrs_used, &mut lrs);
        let unchanged = ctx.lrs_live
            && lrs.len() == ctx.filled.len()
            && lrs
                .iter()
                .zip(&ctx.filled)
                .all(|(now, was)| now.intid == was.intid && now.state == was.state)
            && !lrs.iter().any(|e| e.state.is_pending());
        if unchanged && ctx.vtimer_level == Some(level) && ctx.ptimer_level == Some(plevel) {
            return;
        }
        let mut g = vm.arch.vgic.lock();
        if !unchanged {
            g.sync_lrs(vcpu.index, &lrs);
            ctx.lrs_live = false;
        }
        // Only a level that moved: the model holds the last one set (as
        // `prepare_entry` assumes), and a look at an unchanged one still
        // marked the PPI for the next fill's scan.
        if ctx.vtimer_level != Some(level) {
            g.set_level(vcpu.index, VTIMER_PPI, level);
            ctx.vtimer_level = Some(level);
        }
        if ctx.ptimer_level != Some(plevel) {
            g.set_level(vcpu.index, PTIMER_PPI, plevel);
            ctx.ptimer_level = Some(plevel);
        }
    }

    /// A WFI found nothing to take: poll for up to the vCPU's halt-poll
    /// window whether something arrives, while nobody else wants this pCPU
    /// and no physical interrupt waits (a kick, the tick: the guest goes
    /// back in and takes the exit for it, which a WFI may). Returns whether
    /// the vCPU (`env`'s, registers `ctx`) has work now (no block then).
    pub fn halt_poll(&self, env: &ExitCtx<'_, Self>, ctx: &mut VcpuState) -> bool {
        let (vm, vcpu) = (env.vm, env.vcpu);
        let halt = ctx.halt;
        let end = halt.poll(
            timer::counter,
            || self.has_work(vm, vcpu, ctx),
            // ISR_EL1 at EL2: a physical IRQ is pending.
            || mrs!("isr_el1") & (1 << 7) != 0,
            || env.should_preempt(),
        );
        end != PollEnd::Expired
    }

    /// Whether the loaded vCPU has an interrupt to take (WFI would wake).
    pub fn has_work(&self, vm: &Vm<Self>, vcpu: &Vcpu<Self>, ctx: &mut VcpuState) -> bool {
        let level = vtimer_level();
        let plevel = ctx.ptimer.level(timer::counter());
        let mut g = vm.arch.vgic.lock();
        g.set_level(vcpu.index, VTIMER_PPI, level);
        g.set_level(vcpu.index, PTIMER_PPI, plevel);
        ctx.vtimer_level = Some(level);
        ctx.ptimer_level = Some(plevel);
        g.has_pending(vcpu.index)
    }
}
