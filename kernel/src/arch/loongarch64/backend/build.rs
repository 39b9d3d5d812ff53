//! Building and restarting a LoongArch VM (both modes): RAM from the frame
//! pool, its kernel (an ELF's segments or a raw image), initrd, DTB and
//! command line copied in, its devices, interrupt controllers and IPI
//! blocks, its vCPUs; and the rest of [`Machine`].

use crate::base::lock::{Mutex, MutexGuard};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use kestrel_abi::package::{ConsoleKind, GuestKind};

use crate::guest::loongarch::efi;
use crate::guest::loongarch::iocsr::VIpi;
use crate::guest::loongarch::layout;
use crate::host::board::BoardInfo;
use crate::mem::frames::{FramePool, FRAME};
use crate::mem::imageload::{ImageLoad, Piece, LOAD_STEP};
use crate::vcpu::stats::Stats;
use crate::vm::{Hypervisor, RunExit, Vm, VmEnd};
use crate::vmm::fdt_build::{guest_dtb_loongarch, LoongArchDtbSpec};
use crate::vmm::vmconfig::VmSpec;
use crate::vmm::{Built, Machine};

use super::super::{csr, platform};
use super::{mem, LaBackend, LaVcpu, Mode, VcpuShared, VmState};

impl<M: Mode> Machine for LaBackend<M> {
    fn guest_memory(&self, board: &BoardInfo) -> FramePool {
        mem::pool(&board.memory, platform::reserved().as_slice())
    }

    /// The VM of `spec`: its RAM from `pool`, zeroed, with the images
    /// loaded; its devices, interrupt controllers and IPI blocks; its
    /// vCPUs, vCPU 0 at the entry.
    fn build_vm(
        &self,
        _board: &BoardInfo,
        spec: &VmSpec<'static>,
        pool: &mut FramePool,
        stats: &Arc<Stats>,
    ) -> Result<Built<Self>, String> {
        if spec.console != ConsoleKind::Ns16550 {
            return Err(String::from(
                "console: only the NS16550 is emulated on LoongArch (console = \"ns16550\")",
            ));
        }
        let n = spec.vcpus as usize;
        let ram = pool.alloc_ram(spec.ram_size)?;
        mem::clear(&ram);
        let devices = super::devices::build(n, spec, &mut |bytes| mem::disk_memory(pool, bytes))?;
        let st = VmState {
            ram_size: spec.ram_size,
            ram,
            spec: *spec,
            uart: devices.uart,
            ipi: (0..n).map(|_| VIpi::new()).collect(),
            intc: devices.intc,
            shared: (0..n)
                .map(|i| VcpuShared {
                    swi: AtomicU32::new(0),
                    running_on: AtomicUsize::new(usize::MAX),
                    parked: AtomicBool::new(i != 0),
                    boot: Mutex::new(None),
                })
                .collect(),
            rebuild: AtomicUsize::new(0),
            reload: Mutex::new(None),
        };
        let (mut load, boot) = images(&st, spec)?;
        load.run_all(FRAME, |off, d| st.copy_in(off, d))?;
        let created = csr::rdtime();
        let mut vcpus: Vec<M::Vcpu> = (0..n).map(|i| M::Vcpu::new(i, stats, created)).collect();
        vcpus[0].reset(0, boot.entry, boot.args);
        Ok(Built {
            arch: st,
            vcpus,
            entry: boot.entry,
            dtb: layout::gpa_of(spec.dtb_gpa),
            bus: devices.bus,
            virtio: devices.virtio,
            pv_time: None,
        })
    }

    fn init_cpu(&self, hv: &Hypervisor<Self>, cpu: usize) {
        self.init_cpu_state(hv, cpu);
    }

    fn leave_cpu(&self, _cpu: usize) {
        csr::irq_enable();
    }
}

impl<M: Mode> LaBackend<M> {
    /// [`crate::vm::Backend::restart_vm`]: the VM keeps its frames (and
    /// so, under LVZ, its second-stage entries); its devices and IPI blocks
    /// are at power-on, its secondaries parked, its vCPUs as at creation,
    /// each with a new epoch (its old translations are dropped at its next
    /// load anywhere, and the core gives the VM a new VMID); and the
    /// rebuild is marked: vCPU 0, the only one started, zeroes the RAM and
    /// copies the images in its own time, a step per run before it enters
    /// ([`LaBackend::rebuild_step`]). (The restarting pCPU did it all at
    /// once, not serving the FP write-backs other pCPUs waited for: a reset
    /// storm from a second vCPU cost a victim VM 235 ms of its timer, issue
    /// 22 item 8; and a VM sharing only this pCPU waited for all of it.)
    pub(super) fn restart(
        &self,
        vm: &Vm<Self>,
        vcpus: &mut [MutexGuard<'_, M::Vcpu>],
    ) -> Result<(), String> {
        let st = &vm.arch;
        vm.bus
            .reset_all()
            .map_err(|d| format!("{d} is not at power-on after the reset"))?;
        for ipi in &st.ipi {
            ipi.reset();
        }
        for (i, sh) in st.shared.iter().enumerate() {
            sh.swi.store(0, Ordering::Release);
            sh.parked.store(i != 0, Ordering::Release);
            *sh.boot.lock() = None;
        }
        *st.reload.lock() = None;
        st.rebuild.store(1, Ordering::Release);
        let created = csr::rdtime();
        for (i, ctx) in vcpus.iter_mut().enumerate() {
            let epoch = *ctx.epoch();
            // A new FP state too: the old one may still be live in some
            // pCPU's unit, which writes it back there, not here.
            **ctx = M::Vcpu::new(i, &vm.stats, created);
            *ctx.epoch() = epoch + 1;
        }
        Ok(())
    }

    /// One step of a restart's rebuild (`rebuild` != 0), on vCPU 0
    /// (registers `ctx`) before it enters the guest: zeroes the next 2 MiB
    /// frame of the VM's RAM; after the last, copies the next piece of its
    /// images ([`ImageLoad::step`], at most [`LOAD_STEP`] bytes); after the
    /// last piece, points vCPU 0 at their entry. Each step is one
    /// [`crate::vm::Backend::run`] of vCPU 0, which takes the interrupts
    /// pending meanwhile (kestrel's tick among them): the run loop
    /// preempts it at the end of its slice like any vCPU, so the rebuild
    /// costs the restarting VM its own time and nobody else's.
    pub(super) fn rebuild_step(&self, vm: &Vm<Self>, ctx: &mut M::Vcpu) -> RunExit {
        let exit = self.rebuild_one(vm, ctx);
        // No entry and exit takes them for it (CRMD.IE is 0 here).
        csr::irq_enable();
        csr::irq_disable();
        exit
    }

    fn rebuild_one(&self, vm: &Vm<Self>, ctx: &mut M::Vcpu) -> RunExit {
        let st = &vm.arch;
        let next = st.rebuild.load(Ordering::Acquire);
        if let Some(&f) = st.ram.frames.get(next.wrapping_sub(1)) {
            mem::clear_frame(f);
            st.rebuild.store(next + 1, Ordering::Release);
            return RunExit::Continue;
        }
        let mut reload = st.reload.lock();
        if reload.is_none() {
            match images(st, &st.spec) {
                Ok(r) => *reload = Some(r),
                Err(e) => return RunExit::VmEnd(VmEnd::Fatal(format!("restart failed: {e}"))),
            }
        }
        let Some((load, boot)) = reload.as_mut() else {
            return RunExit::Continue;
        };
        match load.step(LOAD_STEP, FRAME, |off, d| st.copy_in(off, d)) {
            Ok(false) => RunExit::Continue,
            Ok(true) => {
                ctx.reset(0, boot.entry, boot.args);
                *reload = None;
                st.rebuild.store(0, Ordering::Release);
                RunExit::Continue
            }
            Err(e) => {
                *reload = None;
                RunExit::VmEnd(VmEnd::Fatal(format!("restart failed: {e}")))
            }
        }
    }
}

/// Where the boot vCPU starts: its PC and a0-a2.
pub(in crate::arch::loongarch64) struct BootRegs {
    entry: u64,
    args: [u64; 3],
}

/// `spec`'s kernel, initrd, DTB and command line as pieces to copy into
/// `st`'s RAM (zeroed; the pieces' addresses are RAM offsets), and where
/// vCPU 0 starts: at creation and at each restart.
fn images(st: &VmState, spec: &VmSpec<'static>) -> Result<(ImageLoad, BootRegs), String> {
    let mut pieces = Vec::new();
    let entry = match spec.kind {
        GuestKind::TestElf | GuestKind::LinuxLoongArchElf => {
            load_elf(st, spec.kernel, &mut pieces)?
        }
        GuestKind::TestRaw => {
            pieces.push(Piece::new(spec.kernel_gpa, spec.kernel, "kernel"));
            spec.entry_gpa
        }
        GuestKind::LinuxLoongArchImage => {
            // The image at its text_offset (a RAM offset), entered at
            // kernel_entry in DA mode (kestrel_abi::image::LoongArchImage).
            pieces.push(Piece::new(spec.kernel_gpa, spec.kernel, "kernel"));
            layout::gpa_of(spec.entry_gpa)
        }
        GuestKind::LinuxArm64Image | GuestKind::LinuxArm32ZImage | GuestKind::TestRaw32 => {
            return Err(String::from("kind: an arm64 guest cannot run on LoongArch"))
        }
    };
    if let Some(initrd) = spec.initrd {
        pieces.push(Piece::new(spec.initrd_gpa, initrd, "initrd"));
    }
    let blob = match spec.dtb {
        crate::vmm::vmconfig::DtbSource::Provided(d) => d.to_vec(),
        crate::vmm::vmconfig::DtbSource::Generate => guest_dtb_loongarch(&LoongArchDtbSpec {
            ram_size: spec.ram_size,
            vcpus: spec.vcpus,
            bootargs: spec.cmdline,
            initrd: spec.initrd_range(),
            virtio: &spec
                .virtio_slots_at(layout::VIRTIO)
                .iter()
                .map(|s| (s.base, s.size, s.spi))
                .collect::<Vec<_>>(),
        }),
    };
    // The command line, NUL-terminated, right after the DTB (the spec's
    // "guest physical" addresses are RAM offsets: its RAM base is 0).
    let cmdline_off = (spec.dtb_gpa + blob.len() as u64 + 8) & !7;
    let mut cl = Vec::from(spec.cmdline.as_bytes());
    cl.push(0);
    let cl_len = cl.len() as u64;
    pieces.push(Piece::new(spec.dtb_gpa, blob, "dtb"));
    pieces.push(Piece::new(cmdline_off, cl, "cmdline"));
    // A Linux image gets the EFI protocol: a0 = 1 (EFI boot), a2 = an EFI
    // system table whose one configuration table names the DTB
    // (guest::loongarch::efi), placed after the command line.
    let (a0, a2) = if spec.kind == GuestKind::LinuxLoongArchImage {
        let systab_off = (cmdline_off + cl_len + 63) & !63;
        let systab_gpa = layout::gpa_of(systab_off);
        let table = efi::system_table(systab_gpa, layout::gpa_of(spec.dtb_gpa));
        pieces.push(Piece::new(systab_off, table, "EFI system table"));
        (1, systab_gpa)
    } else {
        (0, layout::gpa_of(spec.dtb_gpa))
    };
    let boot = BootRegs {
        entry,
        args: [a0, layout::gpa_of(cmdline_off), a2],
    };
    Ok((ImageLoad::new(pieces), boot))
}

/// An ELF's PT_LOAD segments as pieces at their physical address (masked
/// to 48 bits, as QEMU does; the pieces' addresses are RAM offsets);
/// returns the entry (the raw `e_entry`).
fn load_elf(st: &VmState, elf: &'static [u8], pieces: &mut Vec<Piece>) -> Result<u64, String> {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) {
        return Err(String::from("kernel: not a 64-bit ELF"));
    }
    let bad = || String::from("kernel: truncated ELF header");
    let entry = u64_at(24).ok_or_else(bad)?;
    let phoff = u64_at(32).ok_or_else(bad)? as usize;
    let phentsize = u16_at(54).ok_or_else(bad)? as usize;
    let phnum = u16_at(56).ok_or_else(bad)? as usize;
    if phentsize < 56 {
        return Err(String::from("kernel: bad program header size"));
    }
    let mut loaded = 0;
    for i in 0..phnum {
        let ph = phoff.checked_add(i * phentsize).ok_or_else(bad)?;
        if u32_at(ph) != Some(1) {
            continue;
        }
        let off = u64_at(ph + 8).ok_or_else(bad)? as usize;
        let paddr = u64_at(ph + 24).ok_or_else(bad)? & ((1 << 48) - 1);
        let filesz = u64_at(ph + 32).ok_or_else(bad)? as usize;
        let memsz = u64_at(ph + 40).ok_or_else(bad)?;
        let data = off
            .checked_add(filesz)
            .and_then(|end| elf.get(off..end))
            .ok_or_else(|| format!("kernel: segment {i} outside the file"))?;
        // The segment must be RAM from end to end (not across the device window).
        let off = st.ram_offset(paddr);
        let last = paddr
            .checked_add(memsz.max(1) - 1)
            .and_then(|l| st.ram_offset(l));
        let (Some(off), Some(last)) = (off, last) else {
            return Err(format!(
                "kernel: segment {i} at {paddr:#x} (+{memsz:#x}) is outside guest RAM"
            ));
        };
        if last - off != memsz.max(1) - 1 {
            return Err(format!(
                "kernel: segment {i} at {paddr:#x} (+{memsz:#x}) spans the device window"
            ));
        }
        pieces.push(Piece::new(off, data, "kernel"));
        loaded += 1;
    }
    if loaded == 0 {
        return Err(String::from("kernel: no loadable segment"));
    }
    Ok(entry)
}
