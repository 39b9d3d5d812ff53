//! A virtio-mmio console (version 2) driven the way Linux's drivers do:
//! the transport at QEMU virt's platform-bus address, its interrupt on
//! PCH-PIC line 16 (the device tree's), taken through the EIOINTC on
//! CPU 0. One buffer goes out on the transmit queue; the check passes when
//! the device's used-buffer interrupt arrived and the used ring returned
//! the buffer. Where no transport answers (bare QEMU, a VM without
//! `virtio_console`) it skips.

use core::cell::UnsafeCell;
use core::sync::atomic::{fence, AtomicU64, Ordering};

use guest_common::virtio_mmio::{
    reg, ACK, DRIVER, DRIVER_OK, FEATURES_OK, ID_CONSOLE, INT_VRING, MAGIC,
};

use crate::console::{fail, pass, skip, Outcome};
use crate::devirq;
use crate::{trap, wait_for};

/// The first virtio-mmio transport kestrel gives a LoongArch VM.
pub const BASE: usize = 0x1600_0000;
pub const SIZE: usize = 0x200;
const LINE: u32 = 16;
/// The EIOINTC vector the check gives the transport's line.
pub const VECTOR: u64 = 28;
/// What the check sends; the VM's log must show it.
pub const MESSAGE: &[u8] = b"virtio-console: hello from the LoongArch test guest\n";

const TX: u32 = 1;
const QSIZE: u32 = 8;

/// The transmit queue: descriptors at 0, the driver ring at 0x100, the
/// device ring at 0x200, the buffer at 0x400 (guest physical = virtual:
/// the image is identity mapped).
#[repr(C, align(4096))]
struct Page(UnsafeCell<[u8; 4096]>);
// SAFETY: only the boot CPU touches the page (and the device, by DMA).
unsafe impl Sync for Page {}
static QUEUE: Page = Page(UnsafeCell::new([0; 4096]));

/// Interrupts taken for the transport, and the InterruptStatus bits seen.
pub static IRQS: AtomicU64 = AtomicU64::new(0);
pub static STATUS_SEEN: AtomicU64 = AtomicU64::new(0);

fn r(off: usize) -> u32 {
    // SAFETY: the transport's page is identity mapped uncached
    // (`checks::paging`) and answered the magic probe.
    unsafe { core::ptr::read_volatile((BASE + off) as *const u32) }
}

fn w(off: usize, v: u32) {
    // SAFETY: as `r`.
    unsafe { core::ptr::write_volatile((BASE + off) as *mut u32, v) };
}

fn qaddr(off: usize) -> usize {
    QUEUE.0.get() as usize + off
}

fn put<T>(off: usize, v: T) {
    // SAFETY: `off` is inside the queue page, aligned for `T` by the layout.
    unsafe { core::ptr::write_volatile(qaddr(off) as *mut T, v) };
}

fn get<T: Copy>(off: usize) -> T {
    // SAFETY: as `put`.
    unsafe { core::ptr::read_volatile(qaddr(off) as *const T) }
}

/// From the interrupt handler: acknowledges the transport's interrupt.
pub fn interrupt() {
    let s = r(reg::INTERRUPT_STATUS);
    w(reg::INTERRUPT_ACK, s);
    STATUS_SEEN.fetch_or(u64::from(s), Ordering::AcqRel);
    IRQS.fetch_add(1, Ordering::AcqRel);
}

fn set_addr(off: usize, a: usize) {
    w(off, a as u32);
    w(off + 4, (a as u64 >> 32) as u32);
}

pub fn check() -> Outcome {
    if trap::probe_reg32(BASE + reg::MAGIC) != Some(MAGIC) {
        return skip!("no virtio-mmio transport at {BASE:#x}");
    }
    if r(reg::VERSION) != 2 || r(reg::DEVICE_ID) != ID_CONSOLE {
        return fail!(
            "transport version {} device {} (want 2, console 3)",
            r(reg::VERSION),
            r(reg::DEVICE_ID)
        );
    }
    w(reg::STATUS, 0);
    w(reg::STATUS, ACK);
    w(reg::STATUS, ACK | DRIVER);
    w(reg::DEVICE_FEATURES_SEL, 1);
    if r(reg::DEVICE_FEATURES) & 1 == 0 {
        return fail!("VIRTIO_F_VERSION_1 not offered");
    }
    w(reg::DRIVER_FEATURES_SEL, 1);
    w(reg::DRIVER_FEATURES, 1);
    w(reg::DRIVER_FEATURES_SEL, 0);
    w(reg::DRIVER_FEATURES, 0);
    w(reg::STATUS, ACK | DRIVER | FEATURES_OK);
    if r(reg::STATUS) & FEATURES_OK == 0 {
        return fail!("FEATURES_OK refused");
    }
    w(reg::QUEUE_SEL, TX);
    if r(reg::QUEUE_NUM_MAX) < QSIZE {
        return fail!("transmit queue max {} < {QSIZE}", r(reg::QUEUE_NUM_MAX));
    }
    w(reg::QUEUE_NUM, QSIZE);
    set_addr(reg::QUEUE_DESC_LOW, qaddr(0));
    set_addr(reg::QUEUE_DRIVER_LOW, qaddr(0x100));
    set_addr(reg::QUEUE_DEVICE_LOW, qaddr(0x200));
    w(reg::QUEUE_READY, 1);
    w(reg::STATUS, ACK | DRIVER | FEATURES_OK | DRIVER_OK);
    // The line's path: PCH-PIC line 16 -> VECTOR -> CPU 0's HWI1.
    devirq::program_line(LINE, VECTOR, 0);
    // One buffer: descriptor 0, driver ring entry 0.
    for (i, b) in MESSAGE.iter().enumerate() {
        put(0x400 + i, *b);
    }
    put(0, qaddr(0x400) as u64);
    put(8, MESSAGE.len() as u32);
    put(12, 0u16);
    put(14, 0u16);
    put(0x100, 0u16); // flags: interrupts wanted
    put(0x104, 0u16); // ring[0] = descriptor 0
    fence(Ordering::SeqCst);
    put(0x102, 1u16); // idx
    fence(Ordering::SeqCst);
    let before = IRQS.load(Ordering::Acquire);
    crate::cpu::set_irqs(true);
    w(reg::QUEUE_NOTIFY, TX);
    let irq = wait_for(2_000_000, || IRQS.load(Ordering::Acquire) > before);
    let used_idx: u16 = get(0x202);
    let used_id: u32 = get(0x204);
    let used_len: u32 = get(0x208);
    devirq::release_line(LINE, VECTOR);
    w(reg::STATUS, 0);
    if used_idx != 1 || used_id != 0 {
        return fail!("used ring: idx {used_idx}, id {used_id} (want 1, 0)");
    }
    if !irq {
        return fail!("the buffer came back but no interrupt arrived");
    }
    if STATUS_SEEN.load(Ordering::Acquire) & u64::from(INT_VRING) == 0 {
        return fail!("InterruptStatus lacked the used-buffer bit");
    }
    pass!(
        "{} bytes out on the transmit queue (used len {used_len}), used-buffer interrupt on PCH-PIC line {LINE} -> vector {VECTOR} -> CPU 0",
        MESSAGE.len()
    )
}
