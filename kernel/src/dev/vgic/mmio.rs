//! The vGIC's guest-visible frames as bus devices: the distributor and
//! (GICv3) the redistributors are two [`MmioDevice`]s over the one
//! [`Vgic`] of the VM, behind its one lock. What a write made pending for
//! other vCPUs (an SGI, an SPI routed or enabled) is woken through
//! [`DeviceEnv::wake`] once the lock is dropped.

use alloc::sync::Arc;

use crate::base::lock::Mutex;

use super::{MmioError, VcpuSet, Vgic, Width};
use crate::dev::vdev::bus::{DeviceEnv, MmioDevice};

/// The VM's vGIC, shared by its frames and the backend.
pub type SharedVgic = Arc<Mutex<Vgic>>;

fn wake(env: &mut dyn DeviceEnv, set: VcpuSet) {
    for v in set.iter() {
        env.wake(v);
    }
}

/// The distributor frame (GICD), [`Vgic::dist_size`] bytes.
pub struct DistFrame(pub SharedVgic);

impl MmioDevice for DistFrame {
    fn name(&self) -> &'static str {
        "gicd"
    }

    fn read(&self, env: &mut dyn DeviceEnv, offset: u64, width: Width) -> Result<u64, MmioError> {
        let vcpu = env.vcpu();
        self.0.lock().dist_read(vcpu, offset, width)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        let vcpu = env.vcpu();
        let set = self.0.lock().dist_write(vcpu, offset, width, value)?;
        wake(env, set);
        Ok(())
    }
}

/// The redistributor frames (GICR, GICv3 only), [`Vgic::redist_size`] bytes.
pub struct RedistFrame(pub SharedVgic);

impl MmioDevice for RedistFrame {
    fn name(&self) -> &'static str {
        "gicr"
    }

    fn read(&self, _: &mut dyn DeviceEnv, offset: u64, width: Width) -> Result<u64, MmioError> {
        self.0.lock().redist_read(offset, width)
    }

    fn write(
        &self,
        env: &mut dyn DeviceEnv,
        offset: u64,
        width: Width,
        value: u64,
    ) -> Result<(), MmioError> {
        let set = self.0.lock().redist_write(offset, width, value)?;
        wake(env, set);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::vdev::bus::{Bus, BusFault};
    use crate::dev::vdev::testenv::Recorder;
    use crate::dev::vgic::{GicVersion, VgicConfig};

    const GICD: u64 = 0x0800_0000;
    const GICR: u64 = 0x080A_0000;

    fn bus(version: GicVersion, vcpus: usize) -> (Bus, SharedVgic) {
        let g = Vgic::new(VgicConfig {
            version,
            vcpus,
            nr_spis: 32,
        })
        .unwrap();
        let (dist, redist) = (g.dist_size(), g.redist_size());
        let g = Arc::new(Mutex::new(g));
        let mut bus = Bus::new();
        bus.add(GICD, dist, Arc::new(DistFrame(g.clone()))).unwrap();
        if version == GicVersion::V3 {
            bus.add(GICR, redist, Arc::new(RedistFrame(g.clone())))
                .unwrap();
        }
        (bus, g)
    }

    #[test]
    fn a_gicv2_sgi_written_through_the_bus_wakes_its_target() {
        let (bus, g) = bus(GicVersion::V2, 4);
        let mut v0 = Recorder::new(0);
        let mut v1 = Recorder::new(1);
        bus.write(&mut v0, GICD, Width::Word, 1).unwrap(); // CTLR
        bus.write(&mut v1, GICD + 0x100, Width::Word, 0xFFFF)
            .unwrap(); // vCPU 1 enables its SGIs (banked)
                       // GICD_SGIR: SGI 1 to the CPU list {1}.
        bus.write(&mut v0, GICD + 0xF00, Width::Word, 0x0002_0001)
            .unwrap();
        assert_eq!(v0.wakes, [1]);
        assert!(g.lock().has_pending(1));
        // The banked SPENDSGIR as vCPU 1 reads it: source vCPU 0.
        assert_eq!(bus.read(&mut v1, GICD + 0xF21, Width::Byte), Ok(1));
        assert!(v0.irqs.is_empty() && v0.out.is_empty());
    }

    #[test]
    fn gicv3_frames_share_one_model_and_refuse_what_it_refuses() {
        let (bus, g) = bus(GicVersion::V3, 2);
        let mut env = Recorder::new(0);
        let dist = g.lock().dist_size();
        let redist = g.lock().redist_size();
        // GICR_TYPER of vCPU 1's frame: its processor number, Last.
        let typer = bus
            .read(&mut env, GICR + 0x2_0000 + 8, Width::Dword)
            .unwrap();
        assert_eq!((typer >> 8) & 0xffff, 1);
        assert_ne!(typer & (1 << 4), 0, "Last");
        assert_eq!(
            bus.read(&mut env, GICD + 1, Width::Word),
            Err(BusFault::Device(MmioError::BadAccess))
        );
        assert_eq!(
            bus.read(&mut env, GICD + dist, Width::Word),
            Err(BusFault::NoDevice)
        );
        assert_eq!(
            bus.read(&mut env, GICR + redist, Width::Word),
            Err(BusFault::NoDevice),
            "only the VM's own redistributors are mapped"
        );
        assert!(env.wakes.is_empty());
    }
}
