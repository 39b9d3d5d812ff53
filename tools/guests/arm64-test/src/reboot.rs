//! `mode=reboot cycles=N`: the VM reboot test (`docs/test-guest.md`).
//!
//! Each boot reads a boot counter from sector 0 of the VM's virtio disk,
//! writes it back incremented, checks that its RAM is fresh (a word that
//! the previous boot set is zero again) and prints one `REBOOT` line; it
//! then resets the VM with PSCI SYSTEM_RESET, until the counter reaches
//! `cycles`, when it prints `REBOOT done` and powers off. So the test sees
//! both halves of a reboot: memory starts over, the disk does not.

use crate::hostile::virtio::{get, put, reg, Drv, DATA, ID_BLOCK, MAGIC, S_OK, T_IN, T_OUT};
use crate::platform::Platform;
use crate::{cpu, println, smccc};

/// Sector 0 after the first boot: this tag, then the boots so far (u32 LE).
const TAG: [u8; 4] = *b"KRBT";
/// What each boot leaves in RAM for the next one to find gone.
const RAM_MARK: u64 = 0x5245_424f_4f54_4d4b;

/// Ends the run with a failure line (the judge looks for `REBOOT FAIL`).
fn fail(n: u64, why: &str) -> ! {
    println!("REBOOT FAIL at boot {n}: {why}");
    smccc::system_off()
}

pub fn run(p: &Platform) -> ! {
    let cycles = p.cycles.unwrap_or(100).max(1);
    // A word in the second quarter of RAM: not the image, its stack or
    // the DTB (in the first and last parts).
    let mark = (p.ram_base + p.ram_size / 4) as *mut u64;
    // SAFETY: inside this VM's RAM (from its DTB), identity mapped, used
    // by nothing else.
    let fresh = unsafe { mark.read_volatile() } == 0;
    // SAFETY: as above.
    unsafe { mark.write_volatile(RAM_MARK) };
    let Some(mut drv) = p.virtio[..p.nvirtio].iter().find_map(|&base| {
        // SAFETY: a virtio-mmio region the DTB describes (Device memory).
        let (magic, id) = unsafe {
            (
                cpu::mmio_read32(base + reg::MAGIC),
                cpu::mmio_read32(base + reg::DEVICE_ID),
            )
        };
        (magic == MAGIC && id == ID_BLOCK).then_some(Drv {
            base,
            id,
            q: 0,
            avail_idx: 0,
            used_seen: 0,
        })
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
    if !fresh {
        fail(n, "RAM kept a word the previous boot wrote");
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
