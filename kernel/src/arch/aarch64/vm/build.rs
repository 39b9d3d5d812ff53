//! Building an arm64 VM: its virtual GIC, stage 2 over RAM from the frame
//! pool (and the GICv2 virtual CPU interface), its images and DTB copied
//! in, its vCPUs; and the rest of [`Machine`].

use crate::base::lock::{Mutex, MutexGuard};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use kestrel_abi::package::ConsoleKind;

use crate::dev::vgic::{GicVersion, Vgic, VgicConfig};
use crate::guest::arm64::idregs::IdConfig;
use crate::host::board::{BoardInfo, IrqChip};
use crate::mem::frames::{FramePool, FRAME};
use crate::mem::imageload::{ImageLoad, Piece, LOAD_STEP};
use crate::vcpu::stats::Stats;
use crate::vm::{Hypervisor, RunExit, Vm, VmEnd};
use crate::vmm::passthrough::SpiRoute;
use crate::vmm::vmconfig::{VmSpec, GUEST_GICC};
use crate::vmm::{Built, Machine};

use super::super::{mmu, platform, timer};
use super::mem::{self, VmRam};
use super::passthrough::{VmPassthrough, CLAIMS};
use super::stage2::{self, Stage2};
use super::vcpu::{VcpuShared, VcpuState};
use super::{Arm64Backend, VmState, NR_SPIS, VTIMER_PPI};
use crate::vmm::passthrough as pt;

/// `spec`'s kernel and initrd and the guest DTB `dtb`, as pieces to copy
/// into the VM's RAM (their blocks zeroed and mapped first, cleaned to the
/// point of coherency by [`VmRam::copy_in`]).
fn images(spec: &VmSpec<'static>, dtb: &[u8]) -> ImageLoad {
    let mut pieces = Vec::from([Piece::new(spec.kernel_gpa, spec.kernel, "kernel")]);
    if let Some(initrd) = spec.initrd {
        pieces.push(Piece::new(spec.initrd_gpa, initrd, "initrd"));
    }
    pieces.push(Piece::new(spec.dtb_gpa, dtb.to_vec(), "dtb"));
    ImageLoad::new(pieces)
}

/// The images are in: stale instructions go.
fn images_in() {
    // SAFETY: invalidates the instruction cache so the copied kernel is
    // fetched from memory.
    unsafe { core::arch::asm!("dsb ish", "ic ialluis", "dsb ish", "isb", options(nostack)) };
}

impl Arm64Backend {
    /// A VM's virtual GIC as at power-on: more SPIs for a VM with
    /// passthrough; its virtual timer and its `forwarded` SPIs linked to
    /// the physical interrupts, so that the guest's deactivation
    /// deactivates them (HW = 1 in the list register, no maintenance exit).
    fn new_vgic(
        &self,
        vcpus: usize,
        passthrough: bool,
        forwarded: &[SpiRoute],
    ) -> Result<Vgic, String> {
        let mut vgic = Vgic::new(VgicConfig {
            version: self.version,
            vcpus,
            nr_spis: if passthrough {
                pt::GUEST_NR_SPIS
            } else {
                NR_SPIS
            },
        })
        .map_err(|e| format!("vcpus: {e:?} for this GIC"))?;
        for v in 0..vcpus {
            vgic.set_hw_mapping(v, VTIMER_PPI, Some(VTIMER_PPI as u16));
        }
        for f in forwarded {
            if !vgic.set_hw_mapping(0, f.guest + 32, Some((f.host + 32) as u16)) {
                return Err(format!(
                    "passthrough: guest SPI {} cannot be linked",
                    f.guest
                ));
            }
        }
        Ok(vgic)
    }

    /// [`crate::vm::Backend::restart_vm`]: the VM keeps its frames and
    /// stage 2 (and its passthrough regions); its RAM blocks are unmapped
    /// and untouched again (zeroed at their next first touch; identity RAM
    /// is zeroed whole), no translation of its old life survives in any TLB,
    /// its kernel, initrd and DTB are to be copied in again by its vCPU 0
    /// before it enters ([`Arm64Backend::reload_step`]), its vGIC, devices and
    /// vCPUs are as at creation (a disk keeps its data), and its forwarded
    /// SPIs are disabled and deactivated until its first vCPU runs again.
    pub(super) fn restart(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [MutexGuard<'_, VcpuState>],
    ) -> Result<(), String> {
        let st = &vm.arch;
        super::passthrough::quiesce(vm);
        // Devices first: a device still running (a network port another
        // VM's frame reaches) would write into the freshly loaded RAM.
        vm.bus
            .reset_all()
            .map_err(|d| format!("{d} is not at power-on after the reset"))?;
        // Unmaps the blocks and flushes every TLB (the VM may keep its
        // VMID: the core drops it, but it can come back before a rollover).
        let cpu = super::super::percpu::index();
        st.ram.reset(|| self.service_fp(cpu));
        // The images go in while vCPU 0 runs, a step at a time
        // (`reload_step`): the restarting pCPU copies nothing.
        *st.reload.lock() = Some(images(&st.spec, &st.dtb));
        st.reloading.store(true, Ordering::Release);
        let pt = &st.passthrough;
        let mut vgic = self.new_vgic(vcpus.len(), !st.spec.passthrough.is_empty(), &pt.routes)?;
        // The entries read the flags the VM holds: the new model takes them.
        vgic.use_fill_hints(st.fill_hints.clone());
        *st.vgic.lock() = vgic;
        for sh in &st.shared {
            *sh.boot.lock() = None;
        }
        for (i, ctx) in vcpus.iter_mut().enumerate() {
            // A new FP state too: the old one may still be live in some
            // pCPU's unit, which writes it back there, not here.
            **ctx = VcpuState::new(
                i,
                &vm.stats,
                self.dbg_points,
                st.sve_vq,
                st.spec.kind.is_aarch32(),
            );
        }
        if let Some(boot) = vcpus.first_mut() {
            boot.reset_boot(st.spec.entry_gpa, st.spec.dtb_gpa);
        }
        if !st.ram.is_lazy() {
            // Identity RAM stayed mapped: its old translations go now.
            stage2::flush_all_vmids();
        }
        Ok(())
    }
}

impl Arm64Backend {
    /// One step of a restart's image reload, on vCPU 0 before it enters
    /// the guest: at most [`LOAD_STEP`] bytes copied and one block zeroed
    /// ([`ImageLoad::step`]). Each step is one [`crate::vm::Backend::run`]
    /// of vCPU 0, which the run loop preempts at the end of its slice like
    /// any vCPU: a 64 MiB initrd costs the restarting VM its own time and
    /// nobody else's. The other vCPUs are parked until vCPU 0 starts them.
    pub(super) fn reload_step(&self, vm: &Vm<Self>) -> RunExit {
        let st = &vm.arch;
        let mut reload = st.reload.lock();
        let done = match reload.as_mut() {
            Some(load) => load.step(LOAD_STEP, FRAME, |gpa, d| st.ram.copy_in(gpa, d)),
            None => Ok(true),
        };
        match done {
            Ok(false) => RunExit::Continue,
            Ok(true) => {
                *reload = None;
                images_in();
                st.reloading.store(false, Ordering::Release);
                RunExit::Continue
            }
            Err(e) => {
                *reload = None;
                RunExit::VmEnd(VmEnd::Fatal(format!("restart failed: {e}")))
            }
        }
    }

    /// The VM's SVE vector length in quadwords: the longest the CPU
    /// supports up to the config's `sve_max_vl`; `None` without `sve`. A
    /// VM asking for SVE on a CPU without it is refused.
    fn sve_vq(&self, spec: &VmSpec<'static>) -> Result<Option<u8>, String> {
        if spec.sve_vl == 0 {
            return Ok(None);
        }
        let Some(vq) = crate::vcpu::fpu::sve_vq_for(self.sve_lengths, spec.sve_vl) else {
            return Err(String::from(
                "sve: this CPU has no SVE (ID_AA64PFR0_EL1.SVE = 0): remove sve = true \
                 from the VM's config",
            ));
        };
        if u16::from(vq) * 128 != spec.sve_vl {
            log::info!(
                "vm[{}] \"{}\": SVE vector length {} bits (asked for {}: the CPU's longest up to it)",
                spec.index,
                spec.name,
                u16::from(vq) * 128,
                spec.sve_vl
            );
        }
        Ok(Some(vq))
    }
}

impl Machine for Arm64Backend {
    fn guest_memory(&self, board: &BoardInfo) -> FramePool {
        mem::pool(&board.memory, platform::reserved(), mmu::VA_LIMIT)
    }

    fn build_vm(
        &self,
        board: &BoardInfo,
        spec: &VmSpec<'static>,
        pool: &mut FramePool,
        stats: &Arc<Stats>,
    ) -> Result<Built<Self>, String> {
        if spec.console != ConsoleKind::Pl011 {
            return Err(String::from(
                "console: only the PL011 is emulated on arm64 (console = \"pl011\")",
            ));
        }
        if spec.kind.is_aarch32() {
            if let Some(why) = super::aarch32::refuse_reason() {
                return Err(why);
            }
            if spec.identity {
                return Err(String::from(
                    "identity: an AArch32 VM's RAM stays at its guest address",
                ));
            }
        }
        let vcpus = spec.vcpus as usize;
        let sve_vq = self.sve_vq(spec)?;
        let regions: Vec<_> = spec.passthrough.iter().collect();
        let v3 = self.version == GicVersion::V3;
        let mut s2 = Stage2::new(self.vmids.bits() > 8);
        let ram_end = spec.ram_base + spec.ram_size;
        if ram_end > 1 << s2.ipa_bits() {
            return Err(format!(
                "memory: guest RAM ends at {ram_end:#x}, beyond the {}-bit stage-2 space",
                s2.ipa_bits()
            ));
        }
        // Identity RAM: one contiguous run, at IPA == PA.
        let (ram, spec) = if spec.identity {
            let ram = pool.alloc_contiguous(spec.ram_size)?;
            let spec = spec.rebased(ram.frames[0]);
            log::info!(
                "vm[{}] \"{}\": identity RAM at {:#x}-{:#x} (IPA == PA)",
                spec.index,
                spec.name,
                spec.ram_base,
                spec.ram_base + spec.ram_size
            );
            (ram, spec)
        } else {
            (pool.alloc_ram(spec.ram_size)?, *spec)
        };
        let spec = &spec;
        let ram_end = spec.ram_base + spec.ram_size;
        if ram_end > 1 << s2.ipa_bits() {
            return Err(format!(
                "memory: identity RAM ends at {ram_end:#x}, beyond the {}-bit stage-2 space",
                s2.ipa_bits()
            ));
        }
        let slots = spec.virtio_slots().len();
        if let Some(why) =
            kestrel_abi::package::arm64_guest_clash(spec.ram_base, ram_end, slots, (0, 0))
        {
            return Err(format!("identity: host RAM at {:#x} {why}", spec.ram_base));
        }
        // Passthrough: each region checked against the host and the guest
        // map, its device found in the host DTB, mapped at IPA == PA.
        let routes = pt::routes(regions.iter().copied());
        let mut pt_nodes = Vec::new();
        let mut forwarded = Vec::new();
        for (k, p) in regions.iter().enumerate() {
            let field = format!("passthrough[{k}] [{:#x}, {:#x})", p.base, p.end());
            if let Some(why) = pt::host_clash(board, p) {
                return Err(format!("{field}: {why}"));
            }
            let guest_ram = (spec.ram_base, ram_end);
            if let Some(why) =
                kestrel_abi::package::arm64_guest_clash(p.base, p.end(), slots, guest_ram)
            {
                return Err(format!("{field}: {why}"));
            }
            let (nodes, fwd) = pt::host_devices(platform::host_dtb(), p, &routes)
                .map_err(|e| format!("{field}: {e}"))?;
            let mut page = p.base;
            while page < p.end() {
                s2.map_device_page(page, page)
                    .map_err(|e| format!("{field}: stage 2: {e:?}"))?;
                page += 4096;
            }
            for n in &nodes {
                log::info!(
                    "vm[{}] \"{}\": passthrough of host device {} at {:#x}, SPIs {:?}",
                    spec.index,
                    spec.name,
                    n.name,
                    n.reg.first().map_or(0, |r| r.0),
                    fwd.iter().map(|f| (f.host, f.guest)).collect::<Vec<_>>()
                );
            }
            pt_nodes.extend(nodes);
            forwarded.extend(fwd);
        }
        let vgic = self.new_vgic(vcpus, !regions.is_empty(), &forwarded)?;
        let fill_hints = vgic.fill_hints();
        // Zeroed and mapped block by block at first touch, but identity
        // RAM, which a device may DMA into before the CPU touches it.
        let ram = VmRam::new(&mut s2, spec.ram_base, ram, !spec.identity, stats)?;
        if !v3 {
            let gicv = match board.irqchip {
                IrqChip::GicV2 { gicv: Some(v), .. } => v,
                _ => return Err(String::from("GICv2 host without a GICV frame in its DTB")),
            };
            for page in 0..2 {
                s2.map_device_page(GUEST_GICC.0 + page * 4096, gicv + page * 4096)
                    .map_err(|e| format!("stage 2 (GICV): {e:?}"))?;
            }
        }
        s2.publish();
        let ids = IdConfig {
            gic_v3: v3,
            ipa_bits: s2.ipa_bits(),
            sve: sve_vq.is_some(),
        };
        let dtb = spec.guest_dtb_with(v3, pt_nodes);
        images(spec, &dtb).run_all(FRAME, |gpa, d| ram.copy_in(gpa, d))?;
        images_in();
        let devices =
            super::devices::build(vgic, spec, &mut |bytes| mem::disk_memory(pool, bytes))?;
        // Last: nothing can refuse the VM after its devices are claimed.
        CLAIMS.lock().claim(spec.index, &regions)?;
        let st = VmState {
            stage2: s2,
            ram_base: spec.ram_base,
            ram_size: spec.ram_size,
            ram,
            spec: *spec,
            dtb,
            vgic: devices.vgic,
            fill_hints,
            uart: devices.uart,
            cntvoff: timer::counter(),
            ids,
            sve_vq,
            shared: (0..vcpus)
                .map(|_| VcpuShared {
                    boot: Mutex::new(None),
                })
                .collect(),
            passthrough: VmPassthrough::new(forwarded),
            reload: Mutex::new(None),
            reloading: AtomicBool::new(false),
        };
        let aarch32 = spec.kind.is_aarch32();
        let mut states: Vec<VcpuState> = (0..vcpus)
            .map(|i| VcpuState::new(i, stats, self.dbg_points, sve_vq, aarch32))
            .collect();
        states[0].reset_boot(spec.entry_gpa, spec.dtb_gpa);
        Ok(Built {
            arch: st,
            vcpus: states,
            entry: spec.entry_gpa,
            bus: devices.bus,
            virtio: devices.virtio,
            dtb: spec.dtb_gpa,
            pv_time: spec.pv_time_region(),
        })
    }

    fn init_cpu(&self, _hv: &Hypervisor<Self>, cpu: usize) {
        self.init_cpu_regs(cpu);
    }

    fn leave_cpu(&self, _cpu: usize) {
        // SAFETY: back to the boot flow, which idles with IRQs enabled.
        unsafe { core::arch::asm!("msr daifclr, #2", options(nomem, nostack)) };
    }

    fn vm_ended(&self) {
        // Its VMID may be recycled: no stale translation may survive.
        stage2::flush_all_vmids();
    }
}
