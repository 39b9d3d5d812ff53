//! Hypercall and PSCI dispatch against a model VM. Every answer is one of
//! the documented codes; a PV IPI marks exactly the vCPUs of its window
//! (or, when refused, none: validated whole first) and kicks only running
//! targets other than the sender; PSCI CPU_ON starts a vCPU only when it is
//! off, names a vCPU and enters guest RAM, AFFINITY_INFO reports the model's
//! state, and MPIDRs map back to the vCPU they name. The PV time calls
//! (arm64 stolen time) answer -1 or 0, or the caller's own record.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use kernel::vcpu::hypercall::{dispatch, Abi, HypercallArgs, HypercallEnv};
use kernel::vcpu::ipi::{self, Delivery, IpiError, IpiOutcome, IpiTarget, IpiWindow};
use kernel::vcpu::psci::{self, fid, PsciVm};
use kernel::vcpu::steal::{self, PvTimeEffect, PvTimeRegion};
use kestrel_abi::ret;
use libfuzzer_sys::fuzz_target;
use std::cell::{Cell, RefCell};

struct Vm {
    sender: usize,
    pending: Vec<Cell<bool>>,
    running: Vec<Option<usize>>,
    kicked: RefCell<Vec<usize>>,
    on: Vec<bool>,
    ram: (u64, u64),
    stats: Vec<u64>,
    /// The VM's `pv_ipi`: when false no send may reach the router.
    pv_ipi: bool,
    /// Its stolen-time records, when offered.
    pv_time: Option<PvTimeRegion>,
}

impl IpiTarget for Vm {
    fn vcpu_count(&self) -> usize {
        self.pending.len()
    }
    fn deliver(&self, vcpu: usize) -> Delivery {
        if self.pending[vcpu].replace(true) {
            return Delivery::Coalesced;
        }
        match self.running[vcpu] {
            Some(pcpu) => Delivery::Running(pcpu),
            None => Delivery::Pending,
        }
    }
    fn kick(&self, pcpu: usize) {
        self.kicked.borrow_mut().push(pcpu);
    }
}

impl HypercallEnv for Vm {
    fn send_ipi(&mut self, w: &IpiWindow) -> Result<IpiOutcome, IpiError> {
        assert!(self.pv_ipi, "a PV IPI sent with the feature hidden");
        let before: Vec<bool> = self.pending.iter().map(Cell::get).collect();
        self.kicked.borrow_mut().clear();
        let r = ipi::send(&*self, self.sender, w);
        let bits = u128::from(w.low) | u128::from(w.high) << 64;
        let n = self.pending.len();
        let valid = bits != 0
            && w.min < n as u64
            && (w.min as u128 + 127 - u128::from(bits.leading_zeros())) < n as u128;
        assert_eq!(r.is_ok(), valid, "{w:?} with {n} vCPUs: {r:?}");
        let mut want_kicks = Vec::new();
        for (v, p) in self.pending.iter().enumerate() {
            let named = valid
                && v as u64 >= w.min
                && v as u64 - w.min < 128
                && bits >> (v as u64 - w.min) & 1 != 0;
            assert_eq!(p.get(), before[v] || named, "vCPU {v} pending wrong");
            if named && !before[v] && v != self.sender {
                want_kicks.extend(self.running[v]);
            }
        }
        assert_eq!(*self.kicked.borrow(), want_kicks);
        if let Ok(o) = r {
            assert_eq!(o.delivered + o.coalesced, bits.count_ones());
        }
        r
    }
    fn read_stat(&self, index: u64) -> Option<u64> {
        self.stats.get(index as usize).copied()
    }
    fn pv_ipi_offered(&self) -> bool {
        self.pv_ipi
    }
}

impl PsciVm for Vm {
    fn vcpu_by_mpidr(&self, mpidr: u64) -> Option<usize> {
        psci::vcpu_index_of_mpidr(mpidr, self.on.len())
    }
    fn vcpu_is_on(&self, index: usize) -> bool {
        self.on[index]
    }
    fn is_guest_ram(&self, addr: u64) -> bool {
        addr >= self.ram.0 && addr - self.ram.0 < self.ram.1
    }
    fn start_vcpu(&mut self, index: usize, entry: u64, _context: u64) -> bool {
        // A T32 entry (an AArch32 caller's, bit 0 set) keeps its bit 0.
        assert!(self.is_guest_ram(entry & !1) && psci::Caller::Aarch32.entry_aligned(entry));
        !std::mem::replace(&mut self.on[index], true)
    }
    fn pv_time_offered(&self) -> bool {
        self.pv_time.is_some()
    }
}

#[derive(Arbitrary, Debug)]
struct Call {
    loongarch: bool,
    psci: bool,
    code: u32,
    function: u64,
    args: [u64; 5],
    pick: u8,
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(n), Ok(sender), Ok(pv_ipi), Ok(pv_time), Ok(calls)) = (
        u.int_in_range(1usize..=40),
        u.arbitrary::<u8>(),
        u.arbitrary::<bool>(),
        u.arbitrary::<bool>(),
        u.arbitrary::<Vec<Call>>(),
    ) else {
        return;
    };
    let ram = (0x4000_0000u64, 64u64 << 20);
    let pv_time = pv_time
        .then(|| PvTimeRegion::at_top_of(ram.0, ram.1, n))
        .flatten();
    let mut vm = Vm {
        sender: sender as usize % n,
        pending: (0..n).map(|_| Cell::new(false)).collect(),
        running: (0..n).map(|v| (v % 3 == 0).then_some(v % 4)).collect(),
        kicked: RefCell::new(Vec::new()),
        on: (0..n).map(|v| v == 0).collect(),
        ram,
        stats: vec![1, 2, u64::MAX],
        pv_ipi,
        pv_time,
    };
    for v in 0..n {
        assert_eq!(psci::vcpu_index_of_mpidr(psci::vcpu_mpidr(v), n), Some(v));
    }
    for c in calls {
        if c.pick % 8 == 7 {
            // A PV time call from some vCPU index (the caller's or none).
            let f = match c.code % 3 {
                0 => u64::from(steal::fid::PV_TIME_FEATURES),
                1 => u64::from(steal::fid::PV_TIME_ST),
                _ => c.function,
            };
            let index = c.args[1] as usize % (n + 2);
            let (x0, effect) = steal::call(f, c.args[0], vm.pv_time.as_ref(), index);
            match (vm.pv_time, effect) {
                (Some(r), PvTimeEffect::Register) => {
                    assert_eq!(f, u64::from(steal::fid::PV_TIME_ST));
                    assert!(index < n);
                    assert_eq!(x0 as u64, r.base + 64 * index as u64);
                    assert!(x0 as u64 + 64 <= ram.0 + ram.1 && x0 as u64 >= ram.0);
                }
                (None, PvTimeEffect::Register) => panic!("a record without the feature"),
                (_, PvTimeEffect::None) => assert!(x0 == 0 || x0 == -1, "PV time code {x0}"),
            }
            continue;
        }
        if c.psci {
            // Steer some calls at the interesting ids and arguments.
            let f = match c.pick % 4 {
                0 => u64::from(fid::CPU_ON | fid::SMC64),
                1 => u64::from(fid::AFFINITY_INFO),
                2 => c.function & 0xffff_ffff,
                _ => c.function,
            };
            let target = psci::vcpu_mpidr(c.args[0] as usize % (n + 2))
                | ((c.args[3] & 0x100_0000) * u64::from(c.pick > 200));
            let entry = if c.pick % 4 == 1 && c.args[4] & 1 == 0 {
                0
            } else {
                vm.ram.0 + (c.args[1] % (vm.ram.1 + 8))
            };
            // Some entries odd (T32 for an AArch32 caller), from either state.
            let entry = entry | (c.args[4] >> 1 & u64::from(c.pick & 0x10 != 0));
            let caller = if c.code & 1 != 0 {
                psci::Caller::Aarch32
            } else {
                psci::Caller::Aarch64
            };
            let args = [f, target, entry, c.args[2]];
            let was_on = vm.on.clone();
            let o = psci::handle_from(&mut vm, caller, args);
            if f as u32 == fid::CPU_ON | fid::SMC64 && f >> 32 == 0 {
                let idx = psci::vcpu_index_of_mpidr(target, n);
                let expect = match idx {
                    None => psci::ret::INVALID_PARAMETERS,
                    Some(i) if was_on[i] => psci::ret::ALREADY_ON,
                    Some(_)
                        if !caller.entry_aligned(entry)
                            || (caller == psci::Caller::Aarch64 && entry & 3 != 0)
                            || entry & !1 >= vm.ram.0 + vm.ram.1 =>
                    {
                        psci::ret::INVALID_ADDRESS
                    }
                    Some(_) => psci::ret::SUCCESS,
                };
                assert_eq!(o.x0, expect, "CPU_ON {target:#x} {entry:#x}");
                if let Some(i) = idx.filter(|_| expect == psci::ret::SUCCESS) {
                    assert!(vm.on[i]);
                }
            } else if f == u64::from(fid::AFFINITY_INFO) {
                let expect = match psci::vcpu_index_of_mpidr(target, n) {
                    // args[2] is the lowest affinity level: only 0 exists.
                    _ if entry != 0 => psci::ret::INVALID_PARAMETERS,
                    None => psci::ret::INVALID_PARAMETERS,
                    Some(i) if vm.on[i] => psci::affinity::ON,
                    Some(_) => psci::affinity::OFF,
                };
                assert_eq!(o.x0, expect);
            }
            if o.x0 < 0 {
                assert!((-9..=-1).contains(&o.x0), "undocumented PSCI code {}", o.x0);
            }
            if o.x0 != psci::ret::SUCCESS || f as u32 & !fid::SMC64 != fid::CPU_ON {
                assert_eq!(vm.on, was_on, "a failed or other call turned a vCPU on");
            }
        } else {
            let abi = if c.loongarch {
                Abi::LoongArch
            } else {
                Abi::Arm64
            };
            let mut args = HypercallArgs {
                code: c.code & 0x7fff,
                function: c.function,
                args: c.args,
            };
            if c.pick % 2 == 0 {
                // A PV IPI through either ABI, window near the VM's size.
                args.code = kestrel_abi::loongarch::SERVICE_KVM;
                args.function = if c.loongarch {
                    kestrel_abi::loongarch::FN_IPI
                } else {
                    u64::from(kestrel_abi::arm64::IPI_SEND)
                };
                args.args[2] = c.args[2] % (n as u64 + 2);
            }
            let r = dispatch(abi, &args, &mut vm);
            assert!(!r.regs().is_empty() && r.regs().len() <= 4);
            let code = r.code();
            if c.pick % 2 == 0 && !vm.pv_ipi {
                assert_eq!(code, ret::INVALID_CODE, "a hidden PV IPI was not refused");
            }
            if code < 0 && r.regs().len() == 1 {
                assert!(
                    code == ret::INVALID_CODE || code == ret::INVALID_PARAMETER,
                    "undocumented hypercall code {code}"
                );
            }
        }
    }
});
