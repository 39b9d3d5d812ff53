//! loom model of the lazy FP ownership hand-off between pCPUs
//! (`kernel::vcpu::fpu`, `kernel::vcpu::fpu::pcpu`). Built only with
//! `RUSTFLAGS="--cfg loom"` (`make test-loom`, docs/concurrency.md); the
//! real `FpEngine`, `PcpuFp` and `load_waiting` run on loom's atomics and
//! mutexes.
//!
//! vCPU V used FP on pCPU 1 (lazy policy: its registers, 7, are still in
//! pCPU 1's unit). pCPU 0 loads V (`load_waiting`: asks pCPU 1, kicks it,
//! waits, serving its own requests), traps, and must find 7 in its unit;
//! it writes 8. Meanwhile pCPU 1 runs vCPU W, which uses FP too (its trap
//! saves V's registers on pCPU 1's own initiative), and serves write-back
//! requests at its exits. At the end V's registers are 8 and W's are W's,
//! wherever they live, and neither vCPU ever saw the other's. A second
//! model leaves W out, so only pCPU 1's answer to the request frees V's
//! registers; a third has each pCPU load the vCPU whose registers the
//! other holds, at the same time.
//!
//! Shown to fail when the protocol is broken (each change made by hand in
//! `fpu.rs` / `fpu/pcpu.rs`, the model run, the change reverted):
//! - `FpEngine::save_owner` publishing `live_on = NOWHERE` before saving
//!   the registers (the two steps swapped): "pCPU 0 loaded V's registers
//!   [0, 0], not the 7 pCPU 1 held" (pCPU 0 saw V's state written back
//!   and restored the memory copy before pCPU 1 had saved into it).
//! - `PcpuFp::ask` setting `asked` before pushing the request (the two
//!   steps swapped): in `a_write_back_request_is_always_answered` (W does
//!   not use FP, so only the answer frees V's registers) pCPU 1's
//!   `service` takes the flag, finds no request and returns; the request
//!   stays unanswered and pCPU 0 waits forever:
//!   "Model exceeded maximum number of branches. This is often caused by
//!   an algorithm requiring the processor to make progress, e.g. spin
//!   locks."
//! - `load_waiting` not serving its own pCPU's requests while it waits
//!   (`me.service()` removed from its wait loop):
//!   `two_pcpus_loading_each_others_vcpus_both_go_on` (each pCPU loads the
//!   vCPU whose registers the other holds) deadlocks, the same "Model
//!   exceeded maximum number of branches".
#![cfg(loom)]

mod common;
use common::check;

use kernel::vcpu::fpu::pcpu::{load_waiting, PcpuFp};
use kernel::vcpu::fpu::{FpHw, FpLoad, FpPolicy, VcpuFp};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::cell::Cell;

type Regs = [u64; 2];

/// One pCPU's FP unit: only its own pCPU touches it (under its engine's
/// lock), so plain cells.
#[derive(Default)]
struct Unit {
    regs: Cell<Regs>,
    trapping: Cell<bool>,
}

impl FpHw for Unit {
    type State = Regs;
    fn save(&mut self, into: &mut Regs) {
        *into = self.regs.get();
    }
    fn restore(&mut self, from: &Regs) {
        self.regs.set(*from);
    }
    fn trap_on(&mut self) {
        self.trapping.set(true);
    }
    fn trap_off(&mut self) {
        self.trapping.set(false);
    }
}

/// The vCPUs' FP states are shared the way the kernel shares them
/// (`alloc::sync::Arc`: its count is not part of the protocol).
type Shared = std::sync::Arc<VcpuFp<Regs>>;

struct World {
    pcpus: Vec<PcpuFp<Unit>>,
    v: Shared,
    w: Shared,
    /// pCPU 0 is done with V.
    done: AtomicBool,
}

impl World {
    /// `vcpu` runs on `cpu` (already able to load there), uses FP and
    /// checks it finds `expect`, writes `new`, and is put.
    fn run(&self, cpu: usize, vcpu: &Shared, expect: Regs, new: Regs, who: &str) {
        let mut e = self.pcpus[cpu].lock();
        let e = e.as_mut().unwrap();
        assert_eq!(e.vcpu_load(vcpu), FpLoad::Ready);
        if e.hw().trapping.get() {
            e.fp_trap();
        }
        assert_eq!(
            e.hw().regs.get(),
            expect,
            "pCPU {cpu} loaded {who}'s registers {:?}, not the {:?} it last had",
            e.hw().regs.get(),
            expect
        );
        e.hw().regs.set(new);
        e.vcpu_put();
    }

    /// `vcpu`'s registers now: in memory, or in the unit holding them.
    fn regs_of(&self, vcpu: &VcpuFp<Regs>) -> Regs {
        match vcpu.live_on() {
            Some(p) => self.pcpus[p].lock().as_ref().unwrap().hw().regs.get(),
            None => vcpu.with_saved(|s| *s).unwrap(),
        }
    }
}

/// `w_uses_fp`: pCPU 1 runs W, which takes the unit (saving V's registers
/// on its own); otherwise only pCPU 1's answer to the request frees them.
fn model(w_uses_fp: bool) -> usize {
    check(10, move || {
        let pcpus: Vec<PcpuFp<Unit>> = (0..2).map(|_| PcpuFp::new()).collect();
        for (i, p) in pcpus.iter().enumerate() {
            p.init(i, FpPolicy::Lazy, Unit::default());
        }
        let world = Arc::new(World {
            pcpus,
            v: Shared::new(VcpuFp::new([0; 2])),
            w: Shared::new(VcpuFp::new([5; 2])),
            done: AtomicBool::new(false),
        });
        // V used FP on pCPU 1 and left: its 7s are live there.
        world.run(1, &world.v.clone(), [0; 2], [7; 2], "V");
        assert_eq!(world.v.live_on(), Some(1));

        let pcpu1 = {
            let world = world.clone();
            thread::spawn(move || {
                world.pcpus[1].service();
                if w_uses_fp {
                    // W runs here and uses FP: V's registers are saved first.
                    world.run(1, &world.w.clone(), [5; 2], [6; 2], "W");
                }
                // Its exits and idle loop serve requests until pCPU 0 is done.
                while !world.done.load(Ordering::Acquire) {
                    world.pcpus[1].service();
                    thread::yield_now();
                }
            })
        };
        let loaded = load_waiting(
            |c| world.pcpus.get(c),
            0,
            &world.v,
            |_| {}, // the kick: pCPU 1 looks at its requests at its next exit anyway
            || false,
        );
        assert!(loaded);
        // load_waiting loaded V here (traps on: its registers come at the trap).
        {
            let mut e = world.pcpus[0].lock();
            let e = e.as_mut().unwrap();
            e.fp_trap();
            assert_eq!(
                e.hw().regs.get(),
                [7; 2],
                "pCPU 0 loaded V's registers {:?}, not the 7 pCPU 1 held",
                e.hw().regs.get()
            );
            e.hw().regs.set([8; 2]);
            e.vcpu_put();
        }
        world.done.swap(true, Ordering::AcqRel);
        pcpu1.join().unwrap();
        assert_eq!(world.regs_of(&world.v), [8; 2], "V lost a write");
        let w = if w_uses_fp { [6; 2] } else { [5; 2] };
        assert_eq!(world.regs_of(&world.w), w, "W lost a write");
    })
}

#[test]
fn registers_follow_their_vcpu_between_pcpus() {
    let runs = model(true);
    println!("fpu hand-off: {runs} interleavings");
    assert!(runs > 100, "only {runs} interleavings explored");
}

#[test]
fn a_write_back_request_is_always_answered() {
    let runs = model(false);
    println!("fpu request: {runs} interleavings");
    assert!(runs > 20, "only {runs} interleavings explored");
}

/// Cross loads: V's registers are live on pCPU 1 and U's on pCPU 0, and
/// each pCPU loads the other's vCPU at the same time. Each asks the other
/// and waits, serving the requests addressed to itself meanwhile, so both
/// go on; each finds the registers the other pCPU held.
#[test]
fn two_pcpus_loading_each_others_vcpus_both_go_on() {
    let runs = check(10, || {
        let pcpus: Vec<PcpuFp<Unit>> = (0..2).map(|_| PcpuFp::new()).collect();
        for (i, p) in pcpus.iter().enumerate() {
            p.init(i, FpPolicy::Lazy, Unit::default());
        }
        let world = Arc::new(World {
            pcpus,
            v: Shared::new(VcpuFp::new([0; 2])),
            w: Shared::new(VcpuFp::new([0; 2])),
            done: AtomicBool::new(false),
        });
        // V (7s) is live on pCPU 1, U (here `w`: 3s) on pCPU 0.
        world.run(1, &world.v.clone(), [0; 2], [7; 2], "V");
        world.run(0, &world.w.clone(), [0; 2], [3; 2], "U");
        let take = |world: &World, cpu: usize, vcpu: &Shared, expect: Regs, new: Regs| {
            assert!(load_waiting(
                |c| world.pcpus.get(c),
                cpu,
                vcpu,
                |_| {},
                || false
            ));
            let mut e = world.pcpus[cpu].lock();
            let e = e.as_mut().unwrap();
            e.fp_trap();
            assert_eq!(
                e.hw().regs.get(),
                expect,
                "pCPU {cpu} loaded {:?}, not the {expect:?} the other pCPU held",
                e.hw().regs.get()
            );
            e.hw().regs.set(new);
            e.vcpu_put();
        };
        let done1 = Arc::new(AtomicBool::new(false));
        let pcpu1 = {
            let world = world.clone();
            let done1 = done1.clone();
            thread::spawn(move || {
                take(&world, 1, &world.w.clone(), [3; 2], [4; 2]);
                done1.swap(true, Ordering::AcqRel);
                // Serve requests until pCPU 0 is done.
                while !world.done.load(Ordering::Acquire) {
                    world.pcpus[1].service();
                    thread::yield_now();
                }
            })
        };
        take(&world, 0, &world.v.clone(), [7; 2], [8; 2]);
        world.done.swap(true, Ordering::AcqRel);
        // pCPU 1 may still wait for U: answer it until it is done.
        while !done1.load(Ordering::Acquire) {
            world.pcpus[0].service();
            thread::yield_now();
        }
        pcpu1.join().unwrap();
        assert_eq!(world.regs_of(&world.v), [8; 2], "V lost a write");
        assert_eq!(world.regs_of(&world.w), [4; 2], "U lost a write");
    });
    println!("fpu cross loads: {runs} interleavings");
    assert!(runs > 100, "only {runs} interleavings explored");
}
