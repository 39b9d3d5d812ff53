//! `mode=reboot cycles=N`: the VM reboot test (`docs/test-guest.md`).
//!
//! Each boot reads a boot counter from sector 0 of the VM's virtio disk,
//! writes it back incremented, checks that its RAM is fresh (a word in
//! each 2 MiB block that the previous boot set is zero again, seen by the
//! disk first for one block, then by the CPU for all) and prints one
//! `REBOOT` line; it then resets the VM with PSCI SYSTEM_RESET, until the
//! counter reaches `cycles`, when it prints `REBOOT done` and powers off.
//! So the test sees both halves of a reboot: memory starts over, the disk
//! does not.

use crate::hostile::virtio::Drv;
use crate::platform::Platform;
use crate::{cpu, println, smccc};
use guest_common::hostile_virtio::{get, put, reg, DATA, ID_BLOCK, MAGIC, S_OK, T_IN, T_OUT};

/// Sector 0 after the first boot: this tag, then the boots so far (u32 LE).
const TAG: [u8; 4] = *b"KRBT";
/// kestrel's RAM block (and the guest's stage-2 mapping granule).
const BLOCK: u64 = 2 << 20;
/// What each boot leaves in RAM for the next one to find gone.
const RAM_MARK: u64 = 0x5245_424f_4f54_4d4b;

/// Ends the run with a failure line (the judge looks for `REBOOT FAIL`).
fn fail(n: u64, why: &str) -> ! {
    println!("REBOOT FAIL at boot {n}: {why}");
    smccc::system_off()
}

pub fn run(p: &Platform) -> ! {
    let cycles = p.cycles.unwrap_or(100).max(1);
    // A word in the middle of every 2 MiB block but the first (the image
    // and its stack) and the last (the DTB). kestrel zeroes a block at its
    // first touch: the CPU's, or a device's on the guest's behalf.
    let blocks = p.ram_size / BLOCK;
    let marked = 1..blocks.saturating_sub(1);
    let mark = |k: u64| (p.ram_base + k * BLOCK + BLOCK / 2) as *mut u64;
    let Some(mut drv) = p.virtio[..p.nvirtio].iter().find_map(|&base| {
        // SAFETY: a virtio-mmio region the DTB describes (Device memory).
        let (magic, id) = unsafe {
            (
                cpu::mmio_read32(base + reg::MAGIC),
                cpu::mmio_read32(base + reg::DEVICE_ID),
            )
        };
        (magic == MAGIC && id == ID_BLOCK).then(|| Drv::new(base, id))
    }) else {
        fail(0, "no virtio disk in the DTB")
    };
    if let Err(e) = drv.up() {
        fail(0, e);
    }
    match drv.blk(T_IN, 0, 512) {
        Some((_, S_OK)) => {}
        _ => fail(0, "reading sector 0 failed"),
    }
    let tag: [u8; 4] = core::array::from_fn(|i| get(DATA + i));
    let n = if tag == TAG {
        u64::from(u32::from_le_bytes(core::array::from_fn(|i| {
            get(DATA + 4 + i)
        })))
    } else {
        0
    };
    // The disk reads the last marked block before this boot's CPU touches
    // it (into sector 1), and the CPU looks at what it got: zeroes.
    if let Some(k) = marked.clone().last() {
        match drv.blk_at(T_OUT, 1, mark(k) as u64, 512) {
            Some((_, S_OK)) => {}
            _ => fail(n, "writing sector 1 from an untouched block failed"),
        }
        match drv.blk(T_IN, 1, 512) {
            Some((_, S_OK)) => {}
            _ => fail(n, "reading sector 1 failed"),
        }
        if (0..512).any(|i| get::<u8>(DATA + i) != 0) {
            fail(n, "the disk read RAM the previous boot wrote");
        }
    }
    for k in marked.clone() {
        // SAFETY: inside this VM's RAM (from its DTB), identity mapped,
        // used by nothing else (not the image, its stack or the DTB).
        if unsafe { mark(k).read_volatile() } != 0 {
            fail(n, "RAM kept a word the previous boot wrote");
        }
        // SAFETY: as above.
        unsafe { mark(k).write_volatile(RAM_MARK) };
    }
    for (i, b) in TAG.iter().enumerate() {
        put(DATA + i, *b);
    }
    for (i, b) in ((n + 1) as u32).to_le_bytes().iter().enumerate() {
        put(DATA + 4 + i, *b);
    }
    match drv.blk(T_OUT, 0, 512) {
        Some((_, S_OK)) => {}
        _ => fail(n, "writing sector 0 failed"),
    }
    if n + 1 < cycles {
        println!(
            "REBOOT {n}: RAM fresh, disk counter {n} -> {}; resetting",
            n + 1
        );
        smccc::system_reset()
    }
    println!("REBOOT {n}: RAM fresh, disk counter {n} -> {}", n + 1);
    println!("REBOOT done: {cycles} boots");
    println!("RESULT: {cycles} passed, 0 failed");
    smccc::system_off()
}
