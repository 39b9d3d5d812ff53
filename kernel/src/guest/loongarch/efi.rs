//! The EFI system table kestrel hands a LoongArch Linux guest (`a2` of its
//! boot protocol): no boot or runtime services, no console protocols, one
//! configuration table entry naming the device tree (`DEVICE_TREE_GUID`).
//! Linux LoongArch reads it with `fw_arg0` = 1 (an EFI boot), `fw_arg1` =
//! the command line and `fw_arg2` = this table's physical address, and
//! finds its FDT through the configuration table.
//!
//! The blob is position-dependent (its pointers are guest physical
//! addresses): [`system_table`] builds it for the address it will be
//! copied to.

use alloc::vec::Vec;

/// `EFI_SYSTEM_TABLE_SIGNATURE`, "IBI SYST".
pub const SYSTEM_TABLE_SIGNATURE: u64 = 0x5453_5953_2049_4249;
/// The revision kestrel reports: UEFI 2.70.
pub const REVISION: u32 = (2 << 16) | 70;
/// Size of the 64-bit EFI system table.
pub const SYSTEM_TABLE_SIZE: usize = 120;
/// Size of one configuration table entry (GUID + pointer).
pub const CONFIG_ENTRY_SIZE: usize = 24;
/// `DEVICE_TREE_GUID` b1b621d5-f19c-41a5-830b-d9152c69aae0, as stored.
pub const DEVICE_TREE_GUID: [u8; 16] = guid(
    0xb1b6_21d5,
    0xf19c,
    0x41a5,
    [0x83, 0x0b, 0xd9, 0x15, 0x2c, 0x69, 0xaa, 0xe0],
);

/// An EFI GUID in memory order (the first three fields little-endian).
pub const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let a = a.to_le_bytes();
    let b = b.to_le_bytes();
    let c = c.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The firmware vendor string, UTF-16, NUL-terminated.
const VENDOR: &str = "kestrel";

/// Offsets inside the blob.
const VENDOR_OFF: usize = SYSTEM_TABLE_SIZE;
const CONFIG_OFF: usize = 144;

/// The system table, its vendor string and its configuration table, for a
/// blob at guest physical `at`, naming the FDT at guest physical `fdt`.
pub fn system_table(at: u64, fdt: u64) -> Vec<u8> {
    let mut b = alloc::vec![0u8; CONFIG_OFF + CONFIG_ENTRY_SIZE];
    let put64 = |b: &mut Vec<u8>, off: usize, v: u64| {
        b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    };
    let put32 = |b: &mut Vec<u8>, off: usize, v: u32| {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    };
    put64(&mut b, 0, SYSTEM_TABLE_SIGNATURE);
    put32(&mut b, 8, REVISION);
    put32(&mut b, 12, SYSTEM_TABLE_SIZE as u32);
    // 16: CRC32 (below), 20: reserved.
    put64(&mut b, 24, at + VENDOR_OFF as u64);
    put32(&mut b, 32, 1); // firmware revision
                          // 40..104: console handles and protocols, runtime and boot services: none.
    put64(&mut b, 104, 1); // NumberOfTableEntries
    put64(&mut b, 112, at + CONFIG_OFF as u64);
    for (i, c) in VENDOR.encode_utf16().enumerate() {
        b[VENDOR_OFF + 2 * i..VENDOR_OFF + 2 * i + 2].copy_from_slice(&c.to_le_bytes());
    }
    b[CONFIG_OFF..CONFIG_OFF + 16].copy_from_slice(&DEVICE_TREE_GUID);
    put64(&mut b, CONFIG_OFF + 16, fdt);
    let crc = kestrel_abi::package::crc32(&b[..SYSTEM_TABLE_SIZE]);
    put32(&mut b, 16, crc);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    #[test]
    fn table_names_the_fdt_and_nothing_else() {
        let at = 0x0fe1_0000;
        let b = system_table(at, 0x0fe0_0000);
        assert_eq!(u64_at(&b, 0), SYSTEM_TABLE_SIGNATURE);
        assert_eq!(&b[0..8], b"IBI SYST");
        // Boot and runtime services, consoles: absent.
        for off in (40..104).step_by(8) {
            assert_eq!(u64_at(&b, off), 0, "{off}");
        }
        assert_eq!(u64_at(&b, 104), 1);
        let cfg = (u64_at(&b, 112) - at) as usize;
        assert_eq!(
            &b[cfg..cfg + 16],
            &[
                0xd5, 0x21, 0xb6, 0xb1, 0x9c, 0xf1, 0xa5, 0x41, 0x83, 0x0b, 0xd9, 0x15, 0x2c, 0x69,
                0xaa, 0xe0
            ]
        );
        assert_eq!(u64_at(&b, cfg + 16), 0x0fe0_0000);
        let vendor = (u64_at(&b, 24) - at) as usize;
        assert_eq!(&b[vendor..vendor + 4], &[b'k', 0, b'e', 0]);
        assert_eq!(&b[vendor + 14..vendor + 16], &[0, 0]);
        assert!(vendor + 16 <= cfg);
        // The CRC covers the header with its CRC field zero.
        let mut z = b[..SYSTEM_TABLE_SIZE].to_vec();
        let crc = u32::from_le_bytes(z[16..20].try_into().unwrap());
        z[16..20].fill(0);
        assert_eq!(kestrel_abi::package::crc32(&z), crc);
    }
}
