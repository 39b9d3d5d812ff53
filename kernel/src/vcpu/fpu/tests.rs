//! FP engine tests: unit tests per policy and a property test over random
//! schedules on simulated pCPUs whose "FP unit" is a plain array.

use super::*;
use alloc::vec::Vec;

/// A simulated FP unit: four registers and a trap bit.
#[derive(Default)]
pub(super) struct FakeUnit {
    pub(super) regs: [u64; 4],
    trapping: bool,
}

impl FpHw for FakeUnit {
    type State = [u64; 4];
    fn save(&mut self, into: &mut [u64; 4]) {
        *into = self.regs;
    }
    fn restore(&mut self, from: &[u64; 4]) {
        self.regs = *from;
    }
    fn trap_on(&mut self) {
        self.trapping = true;
    }
    fn trap_off(&mut self) {
        self.trapping = false;
    }
}

/// xorshift64*: deterministic, good enough for schedules.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const POLICIES: [FpPolicy; 3] = [FpPolicy::Eager, FpPolicy::SaveOnPut, FpPolicy::Lazy];

fn vcpu(tag: u64) -> Arc<VcpuFp<[u64; 4]>> {
    Arc::new(VcpuFp::new([tag; 4]))
}

/// Guest `fp` on the engine's pCPU uses FP: trap if needed, check it sees its
/// own registers, then write `new`.
fn use_fp(e: &mut FpEngine<FakeUnit>, expect: [u64; 4], new: [u64; 4]) {
    if e.hw.trapping {
        e.fp_trap();
    }
    assert!(!e.hw.trapping, "traps still on after fp_trap");
    assert_eq!(
        e.hw.regs, expect,
        "vCPU sees registers that are not its own"
    );
    e.hw.regs = new;
}

#[test]
fn policy_parse() {
    assert_eq!(FpPolicy::parse("eager"), Some(FpPolicy::Eager));
    assert_eq!(FpPolicy::parse("save-on-put"), Some(FpPolicy::SaveOnPut));
    assert_eq!(FpPolicy::parse("lazy"), Some(FpPolicy::Lazy));
    assert_eq!(FpPolicy::parse("fast"), None);
    assert_eq!(FpPolicy::default(), FpPolicy::Lazy);
}

#[test]
fn eager_switches_every_time_and_never_traps() {
    let mut e = FpEngine::new(0, FpPolicy::Eager, FakeUnit::default());
    let (a, b) = (vcpu(1), vcpu(2));
    for _ in 0..3 {
        assert_eq!(e.vcpu_load(&a), FpLoad::Ready);
        assert!(!e.hw.trapping);
        assert_eq!(e.hw.regs, [1; 4]);
        e.vcpu_put();
        assert_eq!(e.vcpu_load(&b), FpLoad::Ready);
        assert_eq!(e.hw.regs, [2; 4]);
        e.vcpu_put();
    }
    assert_eq!(
        e.counters(),
        FpCounters {
            saves: 6,
            restores: 6,
            traps: 0,
            ..FpCounters::default()
        }
    );
}

#[test]
fn save_on_put_switches_only_after_use() {
    let mut e = FpEngine::new(0, FpPolicy::SaveOnPut, FakeUnit::default());
    let (a, b) = (vcpu(1), vcpu(2));
    let _ = e.vcpu_load(&a);
    assert!(e.hw.trapping);
    e.vcpu_put(); // never used FP: nothing to save
    let _ = e.vcpu_load(&b);
    use_fp(&mut e, [2; 4], [20; 4]);
    e.vcpu_put();
    assert_eq!(
        e.counters(),
        FpCounters {
            saves: 1,
            restores: 1,
            traps: 1,
            ..FpCounters::default()
        }
    );
    assert_eq!(b.with_saved(|s| *s), Some([20; 4]));
    // Load again: trap again even on the same pCPU (state was saved, not kept).
    let _ = e.vcpu_load(&b);
    assert!(e.hw.trapping);
}

#[test]
fn lazy_keeps_state_live_across_put_and_saves_on_contention() {
    let mut e = FpEngine::new(0, FpPolicy::Lazy, FakeUnit::default());
    let (a, b, idle) = (vcpu(1), vcpu(2), vcpu(3));
    let _ = e.vcpu_load(&a);
    use_fp(&mut e, [1; 4], [10; 4]);
    e.vcpu_put();
    assert_eq!(a.live_on(), Some(0));
    assert_eq!(
        a.with_saved(|_| ()),
        None,
        "memory copy is stale while live"
    );
    // A non-FP vCPU runs in between: nothing happens.
    let _ = e.vcpu_load(&idle);
    e.vcpu_put();
    // a comes back: no trap at all.
    let _ = e.vcpu_load(&a);
    assert!(!e.hw.trapping);
    use_fp(&mut e, [10; 4], [11; 4]);
    e.vcpu_put();
    assert_eq!(
        e.counters(),
        FpCounters {
            saves: 0,
            restores: 1,
            traps: 1,
            ..FpCounters::default()
        }
    );
    // b uses FP: a's registers are saved first.
    let _ = e.vcpu_load(&b);
    use_fp(&mut e, [2; 4], [20; 4]);
    assert_eq!(a.with_saved(|s| *s), Some([11; 4]));
    assert_eq!(a.live_on(), None);
    assert_eq!(b.live_on(), Some(0));
    assert_eq!(
        e.counters(),
        FpCounters {
            saves: 1,
            restores: 2,
            traps: 2,
            ..FpCounters::default()
        }
    );
}

#[test]
fn lazy_migration_requires_the_source_pcpu_to_save() {
    let mut p0 = FpEngine::new(0, FpPolicy::Lazy, FakeUnit::default());
    let mut p1 = FpEngine::new(1, FpPolicy::Lazy, FakeUnit::default());
    let a = vcpu(1);
    let _ = p0.vcpu_load(&a);
    use_fp(&mut p0, [1; 4], [5; 4]);
    p0.vcpu_put();
    assert_eq!(p1.vcpu_load(&a), FpLoad::LiveOn(0));
    assert!(p1.current.is_none(), "a refused load must not load");
    assert!(!p1.vcpu_migrate(&a), "p1 does not hold a's registers");
    assert!(p0.vcpu_migrate(&a));
    assert!(!p0.vcpu_migrate(&a), "second migrate is a no-op");
    assert_eq!(p1.vcpu_load(&a), FpLoad::Ready);
    use_fp(&mut p1, [5; 4], [6; 4]);
    assert_eq!(p0.counters().saves, 1);
}

#[test]
fn trap_without_a_vcpu_keeps_trapping() {
    let mut e = FpEngine::new(0, FpPolicy::Lazy, FakeUnit::default());
    e.fp_trap();
    assert!(e.hw.trapping);
    assert_eq!(e.counters().restores, 0);
}

/// The property: over random schedules with random migrations and random FP
/// use, under every policy, each vCPU always reads exactly what it last wrote
/// and its final state is never lost.
#[test]
fn random_schedules_never_leak_or_lose_fp_state() {
    for policy in POLICIES {
        for seed in 1..=20u64 {
            run_schedule(policy, seed, 4, 9, 4000);
        }
    }
}

fn run_schedule(policy: FpPolicy, seed: u64, pcpus: usize, vcpus: usize, steps: usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut engines: Vec<_> = (0..pcpus)
        .map(|p| FpEngine::new(p, policy, FakeUnit::default()))
        .collect();
    let fps: Vec<_> = (0..vcpus as u64).map(|v| vcpu(v << 32)).collect();
    let mut shadow: Vec<[u64; 4]> = (0..vcpus as u64).map(|v| [v << 32; 4]).collect();
    let mut running: Vec<Option<usize>> = vec![None; pcpus];
    let mut fp_user: Vec<bool> = (0..vcpus).map(|_| rng.below(3) != 0).collect();
    for step in 0..steps {
        let p = rng.below(pcpus);
        match rng.below(10) {
            // Switch pCPU p to some vCPU not running elsewhere (maybe none).
            0..=3 => {
                if running[p].take().is_some() {
                    engines[p].vcpu_put();
                }
                let v = rng.below(vcpus);
                if running.contains(&Some(v)) || rng.below(8) == 0 {
                    continue;
                }
                let mut load = engines[p].vcpu_load(&fps[v]);
                if let FpLoad::LiveOn(q) = load {
                    assert_ne!(q, p);
                    assert!(
                        engines[q].vcpu_migrate(&fps[v]),
                        "LiveOn named a pCPU that does not own it"
                    );
                    load = engines[p].vcpu_load(&fps[v]);
                }
                assert_eq!(load, FpLoad::Ready);
                running[p] = Some(v);
            }
            // The running vCPU uses FP (if it is an FP user this phase).
            4..=8 => {
                if let Some(v) = running[p] {
                    // Non-FP guests never touch the unit, so never trap.
                    if fp_user[v] {
                        let new = [rng.next(), rng.next(), step as u64, v as u64];
                        use_fp(&mut engines[p], shadow[v], new);
                        shadow[v] = new;
                    }
                }
            }
            // Proactive migration of a random idle vCPU's registers, or a
            // phase change of who uses FP.
            _ => {
                let v = rng.below(vcpus);
                if !running.contains(&Some(v)) {
                    let owner = fps[v].live_on();
                    let saved = engines[p].vcpu_migrate(&fps[v]);
                    assert_eq!(saved, owner == Some(p));
                }
                fp_user[v] = !fp_user[v];
            }
        }
        // Cross-check the ownership invariant on every step.
        for (v, fp) in fps.iter().enumerate() {
            if let Some(q) = fp.live_on() {
                assert!(
                    engines[q].owns(fp),
                    "vCPU {v} live on pCPU {q} that does not own it"
                );
                assert_eq!(
                    engines[q].hw.regs, shadow[v],
                    "live registers of vCPU {v} drifted"
                );
            }
        }
    }
    // Drain: everything back to memory, nothing lost.
    for (p, e) in engines.iter_mut().enumerate() {
        if running[p].take().is_some() {
            e.vcpu_put();
        }
        for fp in &fps {
            e.vcpu_migrate(fp);
        }
    }
    for (v, fp) in fps.iter().enumerate() {
        assert_eq!(
            fp.with_saved(|s| *s),
            Some(shadow[v]),
            "vCPU {v} lost writes ({policy:?}, seed {seed})"
        );
    }
    let total = engines.iter().fold(FpCounters::default(), |t, e| {
        let c = e.counters();
        FpCounters {
            saves: t.saves + c.saves,
            restores: t.restores + c.restores,
            traps: t.traps + c.traps,
            ..FpCounters::default()
        }
    });
    match policy {
        FpPolicy::Eager => assert_eq!(total.traps, 0),
        _ => assert!(
            total.restores <= total.traps,
            "{policy:?} restored without a trap"
        ),
    }
}

/// A VM's counters move only with its own FP use: when VM B's trap saves
/// VM A's registers on the same pCPU, that save is a host event
/// (`stats::HOST`), counted in neither A's nor B's statistics, so neither
/// learns through its counters what the other does; a save that another
/// vCPU of the same VM caused is that VM's.
#[test]
fn a_vms_counters_move_only_with_its_own_fp_use() {
    use crate::vcpu::stats::HOST;
    for policy in POLICIES {
        let (sa, sb) = (Arc::new(Stats::new()), Arc::new(Stats::new()));
        let a = Arc::new(VcpuFp::counted([1; 4], Arc::clone(&sa)));
        let a2 = Arc::new(VcpuFp::counted([3; 4], Arc::clone(&sa)));
        let b = Arc::new(VcpuFp::counted([2; 4], Arc::clone(&sb)));
        let mut e = FpEngine::new(0, policy, FakeUnit::default());
        let read = |s: &Stats| {
            [Counter::FpSaves, Counter::FpRestores, Counter::FpTraps]
                .map(|c| s.read_index(c.index() as u64).unwrap())
        };
        // VM A uses FP; VM B runs on the same pCPU without touching it.
        assert_eq!(e.vcpu_load(&a), FpLoad::Ready);
        use_fp(&mut e, [1; 4], [11; 4]);
        e.vcpu_put();
        assert_eq!(e.vcpu_load(&b), FpLoad::Ready);
        e.vcpu_put();
        let (a_alone, b_quiet) = (read(&sa), read(&sb));
        let host = HOST.get(Counter::FpSaves);
        // Now B uses FP: under the lazy policy its trap saves A's registers.
        assert_eq!(e.vcpu_load(&b), FpLoad::Ready);
        use_fp(&mut e, [2; 4], [22; 4]);
        e.vcpu_put();
        let (ra, rb) = (read(&sa), read(&sb));
        assert_eq!(ra, a_alone, "{policy:?}: B's FP use moved A's counters");
        // B's counters are what B's own use costs, whatever A did.
        let own = match policy {
            FpPolicy::Eager => [b_quiet[0] + 1, b_quiet[1] + 1, 0],
            FpPolicy::SaveOnPut => [1, 1, 1],
            FpPolicy::Lazy => [0, 1, 1],
        };
        assert_eq!(rb, own, "{policy:?}: B's counters");
        let total = e.counters();
        let foreign = total.saves - ra[0] - rb[0];
        assert_eq!(foreign, u64::from(policy == FpPolicy::Lazy), "{policy:?}");
        // (Other tests may count host saves meanwhile: at least ours.)
        assert!(HOST.get(Counter::FpSaves) >= host + foreign, "{policy:?}");
        assert_eq!(ra[1] + rb[1], total.restores, "{policy:?}");
        assert_eq!(ra[2] + rb[2], total.traps, "{policy:?}");
        // A's second vCPU takes the unit from B, then A's first takes it
        // back: the save of A2's registers that A caused is A's.
        assert_eq!(e.vcpu_load(&a2), FpLoad::Ready);
        use_fp(&mut e, [3; 4], [33; 4]);
        e.vcpu_put();
        let before = read(&sa)[0];
        assert_eq!(e.vcpu_load(&a), FpLoad::Ready);
        use_fp(&mut e, [11; 4], [111; 4]);
        e.vcpu_put();
        if policy == FpPolicy::Lazy {
            assert_eq!(read(&sa)[0], before + 1, "A's own save");
        }
    }
}

/// A simulated unit with a wide form (like arm64 SVE): `v` is the narrow
/// view, `high` the bits only the wide form has.
#[derive(Default)]
struct FakeWideUnit {
    v: u64,
    high: u64,
    wide: bool,
    trap_fp: bool,
    trap_wide: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct WideState {
    v: u64,
    high: u64,
    wide: bool,
}

impl FpHw for FakeWideUnit {
    type State = WideState;
    fn save(&mut self, into: &mut WideState) {
        into.v = self.v;
        if self.wide {
            // Narrow again when nothing beyond the narrow view is set.
            into.high = self.high;
            into.wide = self.high != 0;
        }
        self.wide = false;
    }
    fn restore(&mut self, from: &WideState) {
        self.v = from.v;
        // A narrow load zeroes the wide-only bits (arm64: a write to V
        // zeroes the rest of Z).
        self.high = if from.wide { from.high } else { 0 };
        self.wide = from.wide;
    }
    fn trap_on(&mut self) {
        self.trap_fp = true;
        self.trap_wide = true;
    }
    fn trap_off(&mut self) {
        self.trap_fp = false;
        self.trap_wide = !self.wide;
    }
    fn wide(&self) -> bool {
        self.wide
    }
    fn widen(&mut self, _state: &WideState) {
        self.high = 0;
        self.wide = true;
    }
}

fn wide_vcpu(v: u64) -> Arc<VcpuFp<WideState>> {
    Arc::new(VcpuFp::new(WideState {
        v,
        ..WideState::default()
    }))
}

/// The loaded vCPU runs a narrow (FP) instruction.
fn narrow_use(e: &mut FpEngine<FakeWideUnit>) {
    if e.hw.trap_fp {
        e.fp_trap();
    }
    assert!(!e.hw.trap_fp);
}

/// The loaded vCPU runs a wide (SVE) instruction.
fn wide_use(e: &mut FpEngine<FakeWideUnit>) {
    if e.hw.trap_wide {
        e.wide_trap();
    }
    assert!(!e.hw.trap_fp && !e.hw.trap_wide && e.hw.wide);
}

#[test]
fn fp_only_vcpus_cost_narrow_moves_and_wide_ones_wide() {
    for policy in POLICIES {
        let mut e = FpEngine::new(0, policy, FakeWideUnit::default());
        let (a, b) = (wide_vcpu(1), wide_vcpu(2));
        // Both use FP only: no wide move at all.
        for _ in 0..3 {
            for (x, v) in [(&a, 1), (&b, 2)] {
                let _ = e.vcpu_load(x);
                narrow_use(&mut e);
                assert_eq!(e.hw.v, v, "{policy:?}");
                assert_eq!(e.hw.high, 0);
                assert!(
                    e.hw.trap_wide,
                    "{policy:?}: SVE still traps after an FP load"
                );
                e.vcpu_put();
            }
        }
        let c = e.counters();
        assert_eq!((c.wide_saves, c.wide_restores, c.wide_traps), (0, 0, 0));
        assert!(c.saves > 0, "{policy:?}");
        // `a` uses SVE: its first wide instruction traps even though it
        // owns the unit narrow, and widens in place.
        let _ = e.vcpu_load(&a);
        narrow_use(&mut e);
        wide_use(&mut e);
        assert_eq!(e.hw.v, 1, "{policy:?}: the V view survives widening");
        assert_eq!(
            e.hw.high, 0,
            "{policy:?}: widening zeroes the wide-only bits"
        );
        e.hw.high = 0xAAAA;
        e.vcpu_put();
        // `b` runs: FP only, then SVE: never sees `a`'s wide bits.
        let _ = e.vcpu_load(&b);
        narrow_use(&mut e);
        assert_eq!(e.hw.high, 0, "{policy:?}: a's wide bits leaked to b");
        wide_use(&mut e);
        assert_eq!(e.hw.high, 0, "{policy:?}: a's wide bits leaked to b");
        e.vcpu_put();
        let _ = e.vcpu_load(&b);
        narrow_use(&mut e);
        e.vcpu_put();
        // `a` is back: even an FP instruction brings its whole wide state.
        let before = e.counters();
        let _ = e.vcpu_load(&a);
        narrow_use(&mut e);
        assert_eq!((e.hw.v, e.hw.high), (1, 0xAAAA), "{policy:?}");
        assert!(!e.hw.trap_wide, "{policy:?}: wide state loaded, SVE free");
        assert_eq!(e.counters().wide_restores, before.wide_restores + 1);
        // It clears its wide-only bits: its next save narrows it again.
        e.hw.high = 0;
        e.vcpu_put();
        let _ = e.vcpu_load(&b);
        narrow_use(&mut e);
        e.vcpu_put();
        let before = e.counters();
        let _ = e.vcpu_load(&a);
        narrow_use(&mut e);
        assert!(e.hw.trap_wide, "{policy:?}: narrow again");
        e.vcpu_put();
        let _ = e.vcpu_load(&b);
        narrow_use(&mut e);
        e.vcpu_put();
        assert_eq!(e.counters().wide_saves, before.wide_saves, "{policy:?}");
        assert_eq!(e.counters().wide_restores, before.wide_restores);
    }
}

#[test]
fn a_wide_trap_counts_as_an_fp_trap_too() {
    let stats = Arc::new(crate::vcpu::stats::Stats::new());
    let a = Arc::new(VcpuFp::counted(WideState::default(), stats.clone()));
    let b = wide_vcpu(2);
    let mut e = FpEngine::new(0, FpPolicy::Lazy, FakeWideUnit::default());
    let _ = e.vcpu_load(&a);
    wide_use(&mut e);
    e.hw.high = 1;
    e.vcpu_put();
    let _ = e.vcpu_load(&b);
    narrow_use(&mut e);
    e.vcpu_put();
    let _ = e.vcpu_load(&a);
    narrow_use(&mut e);
    e.vcpu_put();
    assert!(e.vcpu_migrate(&a));
    let s = stats.snapshot();
    assert_eq!(s.get(Counter::FpTraps), 2);
    assert_eq!(s.get(Counter::SveTraps), 1);
    assert_eq!(s.get(Counter::FpRestores), 2);
    assert_eq!(s.get(Counter::SveRestores), 1, "the second restore is wide");
    // b's trap saved a (another VM's cause: the host's), the move saved it again.
    assert_eq!(s.get(Counter::FpSaves), 1);
    assert_eq!(s.get(Counter::SveSaves), 1);
}

#[test]
fn sve_state_sizes_and_narrowing() {
    assert_eq!(Arm64SveState::z_bytes(16), 8192);
    assert_eq!(Arm64SveState::p_bytes(16), 544);
    assert_eq!(Arm64SveState::quads(1), 35);
    let mut s = Arm64SveState::new(4);
    assert_eq!(s.regs.len(), (2048 + 136usize).div_ceil(16));
    assert_eq!(s.zcr_el1, 3, "reset: the VM's whole length");
    assert!(!s.wide);
    s.wide = true;
    s.regs[5 * 4] = 55; // Z5's low quadword: the V view
    let mut v = [0u128; 32];
    assert!(s.narrow_if_clear(&mut v));
    assert_eq!(v[5], 55);
    assert!(!s.wide);
    assert!(s.regs.iter().all(|&w| w == 0));
    // A high quadword or a predicate bit keeps it wide.
    for at in [5 * 4 + 1, 32 * 4, s.regs.len() - 1] {
        let mut s = Arm64SveState::new(4);
        s.wide = true;
        s.regs[at] = 1;
        assert!(!s.narrow_if_clear(&mut v), "word {at}");
        assert!(s.wide);
    }
    assert_eq!(Arm64SveState::new(0).vq, 1);
    assert_eq!(Arm64SveState::new(99).vq, 16);
    let st = Arm64FpState::new(Some(2));
    assert_eq!(st.sve.as_ref().map(|s| s.vq), Some(2));
    assert!(Arm64FpState::new(None).sve.is_none());
}

#[test]
fn sve_length_is_the_longest_supported_up_to_the_cap() {
    // QEMU -cpu max: every length 128-2048.
    let all = 0xffff;
    assert_eq!(sve_vq_for(all, 256), Some(2));
    assert_eq!(sve_vq_for(all, 512), Some(4));
    assert_eq!(sve_vq_for(all, 2048), Some(16));
    assert_eq!(sve_vq_for(all, 384), Some(3));
    // Powers of two only (SVE2 CPUs): 384 gives 256.
    let pow2 = 0b1000_0000_1000_1011;
    assert_eq!(sve_vq_for(pow2, 384), Some(2));
    assert_eq!(sve_vq_for(pow2, 2048), Some(16));
    assert_eq!(sve_vq_for(pow2, 1920), Some(8));
    // A 256-bit CPU (Neoverse V1): a 512-bit cap gives 256.
    assert_eq!(sve_vq_for(0b11, 512), Some(2));
    assert_eq!(sve_vq_for(0b11, 128), Some(1));
    // No SVE, or a cap below 128 bits: none.
    assert_eq!(sve_vq_for(0, 512), None);
    assert_eq!(sve_vq_for(all, 0), None);
    assert_eq!(sve_vq_for(all, u16::MAX), Some(16));
}

/// Random schedules with FP and SVE-like use on simulated pCPUs: under
/// every policy each vCPU sees exactly its own narrow and wide registers
/// (never another's wide bits), and nothing is lost at the end.
#[test]
fn random_schedules_with_wide_use_never_leak_or_lose_state() {
    for policy in POLICIES {
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let pcpus = 3;
            let mut engines: Vec<_> = (0..pcpus)
                .map(|p| FpEngine::new(p, policy, FakeWideUnit::default()))
                .collect();
            let fps: Vec<_> = (0..7u64).map(|v| wide_vcpu(v << 32)).collect();
            // What each vCPU last wrote: (narrow view, wide-only bits).
            let mut shadow: Vec<(u64, u64)> = (0..7u64).map(|v| (v << 32, 0)).collect();
            let mut running: Vec<Option<usize>> = vec![None; pcpus];
            for step in 0..3000u64 {
                let p = rng.below(pcpus);
                match rng.below(10) {
                    0..=3 => {
                        if running[p].take().is_some() {
                            engines[p].vcpu_put();
                        }
                        let v = rng.below(fps.len());
                        if running.contains(&Some(v)) {
                            continue;
                        }
                        if let FpLoad::LiveOn(q) = engines[p].vcpu_load(&fps[v]) {
                            assert!(engines[q].vcpu_migrate(&fps[v]));
                            assert_eq!(engines[p].vcpu_load(&fps[v]), FpLoad::Ready);
                        }
                        running[p] = Some(v);
                    }
                    // A narrow (FP) write: as on arm64, writing V zeroes
                    // the rest of the register.
                    4..=6 => {
                        if let Some(v) = running[p] {
                            let e = &mut engines[p];
                            narrow_use(e);
                            assert_eq!(e.hw.v, shadow[v].0, "{policy:?} seed {seed}");
                            if e.hw.wide {
                                assert_eq!(e.hw.high, shadow[v].1, "{policy:?} seed {seed}");
                            } else {
                                assert_eq!(
                                    e.hw.high, 0,
                                    "{policy:?} seed {seed}: foreign wide bits"
                                );
                                assert_eq!(
                                    shadow[v].1, 0,
                                    "{policy:?} seed {seed}: own wide bits lost"
                                );
                            }
                            let new = rng.next() | 1;
                            e.hw.v = new;
                            e.hw.high = 0;
                            shadow[v] = (new, 0);
                        }
                    }
                    // A wide (SVE) use: sees all of its own, writes the wide
                    // bits (sometimes zero, so the state can narrow again).
                    7..=8 => {
                        if let Some(v) = running[p] {
                            let e = &mut engines[p];
                            wide_use(e);
                            assert_eq!(
                                (e.hw.v, e.hw.high),
                                shadow[v],
                                "{policy:?} seed {seed} step {step}"
                            );
                            let high = if rng.below(3) == 0 { 0 } else { rng.next() | 1 };
                            e.hw.high = high;
                            shadow[v].1 = high;
                        }
                    }
                    _ => {
                        let v = rng.below(fps.len());
                        if !running.contains(&Some(v)) {
                            engines[p].vcpu_migrate(&fps[v]);
                        }
                    }
                }
            }
            for (p, e) in engines.iter_mut().enumerate() {
                if running[p].take().is_some() {
                    e.vcpu_put();
                }
                for fp in &fps {
                    e.vcpu_migrate(fp);
                }
            }
            for (v, fp) in fps.iter().enumerate() {
                let s = fp.with_saved(|s| *s).unwrap();
                assert_eq!(
                    s.v, shadow[v].0,
                    "{policy:?} seed {seed}: vCPU {v} lost writes"
                );
                assert_eq!(if s.wide { s.high } else { 0 }, shadow[v].1);
            }
        }
    }
}
