//! Device passthrough (arm64), the portable half: which host device a
//! `[[vm.passthrough]]` region names (read from the host's device tree),
//! which regions and SPIs each VM owns (one owner each), the guest SPIs
//! the host SPIs become, and the guest DTB nodes that describe them. The
//! arm64 backend maps the region in stage 2 and forwards the SPIs
//! (`arch::aarch64::vm::passthrough`); docs/passthrough.md.
//!
//! Rules for the host tree: a device is a direct child of the root whose
//! `reg` entries all lie inside the region. Its interrupts must be GIC
//! SPIs (3-cell specifiers of type 0 under the GIC, the node's or the
//! root's `interrupt-parent`). A device whose SPIs are all passed through
//! is described to the guest; one whose SPIs are all outside the list is
//! left out (QEMU's virtio-mmio page holds eight transports, one of which
//! is the device); one with some of each, a device reaching past the
//! region, a region with no device, or an SPI no described device has, is
//! an error.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use kestrel_abi::package::Passthrough;

use crate::host::board::{BoardInfo, IrqChip};
use crate::host::dtb::Tree;
use crate::vmm::fdt_build::GuestPtNode;

/// The first guest SPI number passed-through interrupts get (INTID 64):
/// above kestrel's own (UART SPI 1, virtio SPIs 16..=24). The k-th
/// interrupt of a VM's passthrough regions, in config order, is guest SPI
/// `GUEST_FIRST_SPI + k`.
pub const GUEST_FIRST_SPI: u32 = 32;
/// Most forwarded SPIs one VM can have (8 regions of 8 SPIs).
pub const MAX_ROUTES: usize = kestrel_abi::package::MAX_DEVICES * kestrel_abi::package::MAX_PT_SPIS;
/// SPIs a VM's virtual GIC has when it owns a passthrough region (else 32):
/// room for [`MAX_ROUTES`] from [`GUEST_FIRST_SPI`].
pub const GUEST_NR_SPIS: usize = 96;
/// GIC interrupt specifier type of an SPI.
const GIC_SPI: u32 = 0;

/// One host SPI forwarded to a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpiRoute {
    /// Host SPI number (INTID - 32).
    pub host: u32,
    /// Guest SPI number (INTID - 32).
    pub guest: u32,
    /// Edge-triggered on the host (device tree flags 1 or 2), else level.
    pub edge: bool,
}

/// The SPIs of `regions` in config order, each with its guest SPI.
pub fn routes(regions: impl Iterator<Item = Passthrough>) -> Vec<(u32, u32)> {
    regions
        .flat_map(|p| p.spis().to_vec())
        .enumerate()
        .map(|(k, host)| (host, GUEST_FIRST_SPI + k as u32))
        .collect()
}

/// Host devices and SPIs already given to a VM (and checked against the
/// host): a region or SPI has one owner.
#[derive(Debug, Default)]
pub struct Claims {
    regions: Vec<(usize, u64, u64)>,
    spis: Vec<(usize, u32)>,
}

impl Claims {
    pub const fn new() -> Claims {
        Claims {
            regions: Vec::new(),
            spis: Vec::new(),
        }
    }

    /// Claims all of `regions` for VM `vm`, or nothing with the reason.
    pub fn claim(&mut self, vm: usize, regions: &[Passthrough]) -> Result<(), String> {
        let mut mine: Vec<(usize, u64, u64)> = Vec::new();
        let mut my_spis: Vec<(usize, u32)> = Vec::new();
        for (k, p) in regions.iter().enumerate() {
            let (base, end) = (p.base, p.end());
            if let Some(&(o, ..)) = self
                .regions
                .iter()
                .chain(&mine)
                .find(|&&(_, s, e)| base < e && s < end)
            {
                return Err(format!(
                    "passthrough[{k}]: [{base:#x}, {end:#x}) is already given to vm[{o}]"
                ));
            }
            for &s in p.spis() {
                if let Some(&(o, _)) = self.spis.iter().chain(&my_spis).find(|c| c.1 == s) {
                    return Err(format!(
                        "passthrough[{k}]: SPI {s} is already given to vm[{o}]"
                    ));
                }
                my_spis.push((vm, s));
            }
            mine.push((vm, base, end));
        }
        self.regions.extend(mine);
        self.spis.extend(my_spis);
        Ok(())
    }
}

/// Why `p` cannot be given to a guest on this board: it overlaps host RAM,
/// the GIC's frames or kestrel's UART.
pub fn host_clash(board: &BoardInfo, p: &Passthrough) -> Option<String> {
    let (base, end) = (p.base, p.end());
    let overlaps = |s: u64, len: u64| s != 0 && base < s.saturating_add(len) && s < end;
    if board.memory.iter().any(|r| overlaps(r.base, r.size)) {
        return Some(format!("[{base:#x}, {end:#x}) is host RAM"));
    }
    let gic: Vec<(u64, u64)> = match board.irqchip {
        IrqChip::GicV3 {
            gicd,
            gicr,
            gicr_size,
        } => alloc::vec![(gicd, 0x1_0000), (gicr, gicr_size.max(0x2_0000))],
        IrqChip::GicV2 {
            gicd,
            gicc,
            gich,
            gicv,
        } => {
            let mut v = alloc::vec![(gicd, 0x1000), (gicc, 0x2000)];
            v.extend(gich.map(|h| (h, 0x1000)));
            v.extend(gicv.map(|g| (g, 0x2000)));
            v
        }
        IrqChip::LoongArchEiointc => Vec::new(),
    };
    if gic.iter().any(|&(s, l)| overlaps(s, l)) {
        return Some(format!(
            "[{base:#x}, {end:#x}) overlaps the host's GIC, which kestrel drives"
        ));
    }
    if board.uart.is_some_and(|u| overlaps(u.base, 0x1000)) {
        return Some(format!(
            "[{base:#x}, {end:#x}) overlaps kestrel's console UART"
        ));
    }
    None
}

/// The host devices region `p` names in the host device tree `host_dtb`,
/// as guest DTB nodes whose interrupts are the guest SPIs of `routes`
/// (host SPI, guest SPI); and each forwarded SPI's trigger. See the
/// module documentation for the rules; an error says what the tree lacks.
pub fn host_devices(
    host_dtb: &[u8],
    p: &Passthrough,
    routes: &[(u32, u32)],
) -> Result<(Vec<GuestPtNode>, Vec<SpiRoute>), String> {
    let (base, end) = (p.base, p.end());
    let tree = Tree::new(host_dtb).map_err(|e| format!("host device tree: {e}"))?;
    let root = tree.root();
    let gic_phandle = tree
        .find_compatible(&[
            "arm,gic-v3",
            "arm,gic-400",
            "arm,cortex-a15-gic",
            "arm,cortex-a9-gic",
        ])
        .and_then(|g| g.prop_u32("phandle"));
    let root_parent = root.prop_u32("interrupt-parent");
    let mut nodes = Vec::new();
    let mut fwd = Vec::new();
    for node in root.children() {
        let Some(reg) = node.reg() else { continue };
        let reg: Vec<(u64, u64)> = reg.filter(|r| r.1 != 0).collect();
        let inside = |&(s, l): &(u64, u64)| s >= base && s.checked_add(l).is_some_and(|e| e <= end);
        let touches = |&(s, l): &(u64, u64)| s < end && base < s.saturating_add(l);
        let name = core::str::from_utf8(node.name()).unwrap_or("?");
        if !reg.iter().any(touches) {
            continue;
        }
        if !reg.iter().all(inside) {
            return Err(format!(
                "host device {name} reaches outside [{base:#x}, {end:#x}): pass its whole region"
            ));
        }
        // (host SPI, flags) of each interrupt.
        let mut irqs: Vec<(u32, u32)> = Vec::new();
        if let Some(v) = node.prop("interrupts") {
            let parent = node.prop_u32("interrupt-parent").or(root_parent);
            if gic_phandle.is_none() || parent != gic_phandle || v.len() % 12 != 0 {
                return Err(format!(
                    "host device {name}: its interrupts are not GIC SPIs \
                     (3-cell specifiers under the GIC)"
                ));
            }
            for c in v.chunks_exact(12) {
                let cell = |i: usize| u32::from_be_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                if cell(0) != GIC_SPI {
                    return Err(format!(
                        "host device {name}: interrupt type {} is not an SPI",
                        cell(0)
                    ));
                }
                irqs.push((cell(4), cell(8)));
            }
        }
        let passed = irqs.iter().filter(|i| p.spis().contains(&i.0)).count();
        if passed == 0 && !irqs.is_empty() {
            // Another device in the same page (its SPIs are not passed).
            continue;
        }
        if passed != irqs.len() {
            return Err(format!(
                "host device {name} has SPIs {:?}: pass all of them or none",
                irqs.iter().map(|i| i.0).collect::<Vec<_>>()
            ));
        }
        let mut interrupts = Vec::new();
        for &(spi, flags) in &irqs {
            let guest = routes
                .iter()
                .find(|r| r.0 == spi)
                .map(|r| r.1)
                .ok_or_else(|| format!("host SPI {spi} has no guest SPI"))?;
            interrupts.push((guest, flags));
            fwd.push(SpiRoute {
                host: spi,
                guest,
                edge: flags & 3 != 0,
            });
        }
        if name.is_empty() || name.contains('\0') {
            return Err(String::from("host device node without a name"));
        }
        nodes.push(GuestPtNode {
            name: String::from(name),
            compatible: node.prop("compatible").unwrap_or(b"\0").to_vec(),
            reg,
            interrupts,
            dma_coherent: node.prop("dma-coherent").is_some(),
        });
    }
    if nodes.is_empty() {
        return Err(format!(
            "no device in the host device tree lies in [{base:#x}, {end:#x}) with the SPIs {:?}",
            p.spis()
        ));
    }
    if let Some(s) = p.spis().iter().find(|&&s| !fwd.iter().any(|f| f.host == s)) {
        return Err(format!(
            "SPI {s} is not an interrupt of a host device in [{base:#x}, {end:#x})"
        ));
    }
    Ok((nodes, fwd))
}

#[cfg(test)]
mod tests;
