//! The device models a VM sees, independent of any VM: the MMIO bus and
//! UARTs (`vdev`), the virtual GIC (`vgic`) and virtio (`virtio`).

pub mod vdev;
pub mod vgic;
pub mod virtio;
