extern crate alloc;
extern crate std;

use super::*;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

const MB: u64 = 1 << 20;

fn arm64_image(text_offset: u64, image_size: u64, flags: u64, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    d[8..16].copy_from_slice(&text_offset.to_le_bytes());
    d[16..24].copy_from_slice(&image_size.to_le_bytes());
    d[24..32].copy_from_slice(&flags.to_le_bytes());
    d[0x38..0x3c].copy_from_slice(b"ARM\x64");
    d
}

#[test]
fn arm64_header_fields_are_read() {
    let d = arm64_image(0x1_0000, 3 * MB, 0xa, 4096);
    let h = Arm64Image::parse(&d).unwrap();
    assert_eq!(
        h,
        Arm64Image {
            text_offset: 0x1_0000,
            image_size: 3 * MB,
            flags: 0xa
        }
    );
    assert_eq!(h.placement(4096), (0x1_0000, 3 * MB));
    // The file is larger than image_size: the footprint is the file.
    assert_eq!(h.placement(5 * MB), (0x1_0000, 5 * MB));
}

#[test]
fn arm64_header_of_exactly_64_bytes_is_enough() {
    let d = arm64_image(0, MB, 0, 64);
    assert!(Arm64Image::parse(&d).is_ok());
}

#[test]
fn arm64_image_size_zero_means_legacy_placement() {
    let d = arm64_image(0x1234, 0, 0, 4096);
    let h = Arm64Image::parse(&d).unwrap();
    assert_eq!(h.placement(4096), (0x8_0000, 4096));
}

#[test]
fn arm64_short_file_is_refused() {
    for len in [0, 1, 0x3c, 63] {
        let d = vec![0u8; len];
        assert_eq!(
            Arm64Image::parse(&d),
            Err(Arm64ImageError::TooShort { len })
        );
    }
    // Even with the magic in place, 63 bytes are not a header.
    let d = arm64_image(0, MB, 0, 64);
    assert_eq!(
        Arm64Image::parse(&d[..63]),
        Err(Arm64ImageError::TooShort { len: 63 })
    );
}

#[test]
fn arm64_bad_magic_is_refused_and_gzip_named() {
    let mut d = arm64_image(0, MB, 0, 4096);
    d[0x3b] = 0x65;
    assert_eq!(
        Arm64Image::parse(&d),
        Err(Arm64ImageError::BadMagic { gzip: false })
    );
    d[0] = 0x1f;
    d[1] = 0x8b;
    let e = Arm64Image::parse(&d).unwrap_err();
    assert_eq!(e, Arm64ImageError::BadMagic { gzip: true });
    assert!(e.to_string().contains("gunzip"), "{e}");
    assert!(e.to_string().contains("ARM\\x64 at 0x38"), "{e}");
}

/// One program header for [`elf`].
#[derive(Clone, Copy)]
struct Ph {
    p_type: u32,
    offset: u64,
    paddr: u64,
    filesz: u64,
    memsz: u64,
}

fn load(offset: u64, paddr: u64, filesz: u64, memsz: u64) -> Ph {
    Ph {
        p_type: PT_LOAD,
        offset,
        paddr,
        filesz,
        memsz,
    }
}

/// A 64-bit little-endian ELF: header, program headers at 64, then `body`
/// bytes of payload (0x5a) from offset 0x100.
fn elf(machine: u16, entry: u64, phs: &[Ph], body: usize) -> Vec<u8> {
    let mut d = vec![0u8; 0x100 + body];
    d[..4].copy_from_slice(b"\x7fELF");
    d[4] = 2;
    d[5] = 1;
    d[6] = 1;
    d[0x10..0x12].copy_from_slice(&ET_EXEC.to_le_bytes());
    d[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
    d[0x18..0x20].copy_from_slice(&entry.to_le_bytes());
    d[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    d[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
    d[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    d[0x38..0x3a].copy_from_slice(&(phs.len() as u16).to_le_bytes());
    for (i, ph) in phs.iter().enumerate() {
        let o = 64 + i * 56;
        if o + 56 > d.len() {
            d.resize(o + 56, 0);
        }
        d[o..o + 4].copy_from_slice(&ph.p_type.to_le_bytes());
        d[o + 8..o + 16].copy_from_slice(&ph.offset.to_le_bytes());
        d[o + 16..o + 24].copy_from_slice(&ph.paddr.to_le_bytes());
        d[o + 24..o + 32].copy_from_slice(&ph.paddr.to_le_bytes());
        d[o + 32..o + 40].copy_from_slice(&ph.filesz.to_le_bytes());
        d[o + 40..o + 48].copy_from_slice(&ph.memsz.to_le_bytes());
    }
    for b in d.iter_mut().skip(0x100) {
        *b = 0x5a;
    }
    d
}

#[test]
fn elf_segments_are_read() {
    let note = Ph {
        p_type: 4,
        offset: 0,
        paddr: 0,
        filesz: u64::MAX,
        memsz: 0,
    };
    let d = elf(
        EM_LOONGARCH,
        0x9000_0000_0020_0000,
        &[
            load(0x100, 0x20_0000, 0x10, 0x1000),
            note,
            load(0x110, 0x30_0000, 0, 8),
        ],
        0x10,
    );
    let e = Elf::parse(&d).unwrap();
    assert_eq!(e.machine(), EM_LOONGARCH);
    assert_eq!(e.kind(), ET_EXEC);
    assert_eq!(e.entry(), 0x9000_0000_0020_0000);
    assert_eq!(e.program_header_count(), 3);
    assert!(!e.has_interpreter());
    let segs: Vec<_> = e.segments().collect();
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].index, 0);
    assert_eq!(segs[0].paddr, 0x20_0000);
    assert_eq!(segs[0].memsz, 0x1000);
    assert_eq!(segs[0].data, &[0x5a; 0x10][..]);
    assert_eq!(segs[1].index, 2);
    assert_eq!(segs[1].data, &[][..]);
    // A non-PT_LOAD header is not judged (its sizes may be anything).
    assert_eq!(e.program_header(1).unwrap().p_type, 4);
    assert_eq!(e.program_header(3), None);
}

#[test]
fn elf_interpreter_is_seen() {
    let interp = Ph {
        p_type: PT_INTERP,
        offset: 0x100,
        paddr: 0,
        filesz: 4,
        memsz: 4,
    };
    let d = elf(EM_AARCH64, 0, &[interp, load(0, 0, 0x100, 0x100)], 4);
    assert!(Elf::parse(&d).unwrap().has_interpreter());
}

#[test]
fn elf_identification_errors() {
    let good = elf(EM_AARCH64, 0, &[load(0x100, 0, 1, 1)], 1);
    assert!(Elf::parse(&good).is_ok());
    assert_eq!(Elf::parse(b"").unwrap_err(), ElfError::NotElf);
    assert_eq!(Elf::parse(b"\x7fEL").unwrap_err(), ElfError::NotElf);
    assert_eq!(Elf::parse(&vec![1u8; 4096]).unwrap_err(), ElfError::NotElf);
    let mut d = good.clone();
    d[4] = 1;
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::Not64Bit);
    assert_eq!(Elf::parse(&good[..4]).unwrap_err(), ElfError::Not64Bit);
    let mut d = good.clone();
    d[5] = 2;
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::NotLittleEndian);
}

#[test]
fn elf_truncated_header_is_refused() {
    let good = elf(EM_AARCH64, 0, &[load(0x100, 0, 1, 1)], 1);
    for len in [6, 20, 0x38, 63] {
        assert_eq!(
            Elf::parse(&good[..len]).unwrap_err(),
            ElfError::TruncatedHeader { len }
        );
    }
}

#[test]
fn elf_program_header_table_is_checked() {
    let good = elf(EM_AARCH64, 0, &[load(0x100, 0, 1, 1)], 1);
    // Entry size below 56.
    let mut d = good.clone();
    d[0x36..0x38].copy_from_slice(&55u16.to_le_bytes());
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::BadProgramHeaderSize { size: 55 }
    );
    // The table runs past the end of the file.
    let mut d = good.clone();
    d[0x38..0x3a].copy_from_slice(&5u16.to_le_bytes());
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::ProgramHeadersOutside);
    let mut d = good.clone();
    d[0x20..0x28].copy_from_slice(&(good.len() as u64).to_le_bytes());
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::ProgramHeadersOutside);
    // phoff + size overflows.
    let mut d = good.clone();
    d[0x20..0x28].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::ProgramHeadersOutside);
    // The file ends inside the table.
    assert_eq!(
        Elf::parse(&good[..64 + 30]).unwrap_err(),
        ElfError::ProgramHeadersOutside
    );
    // Big entries that still fit are fine (the extra bytes are skipped).
    let mut d = good.clone();
    d[0x36..0x38].copy_from_slice(&64u16.to_le_bytes());
    // Move the table so 64-byte entries fit: table at 0x100 - 64 = 0xc0.
    d[0x20..0x28].copy_from_slice(&0xc0u64.to_le_bytes());
    let ph: Vec<u8> = good[64..120].to_vec();
    d[0xc0..0xc0 + 56].copy_from_slice(&ph);
    assert_eq!(Elf::parse(&d).unwrap().segments().count(), 1);
}

#[test]
fn elf_segment_outside_the_file_is_refused() {
    // File bytes past the end.
    let d = elf(EM_AARCH64, 0, &[load(0x100, 0, 2, 2)], 1);
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::SegmentOutside { index: 0 }
    );
    // Offset past the end.
    let d = elf(EM_AARCH64, 0, &[load(0x1000, 0, 0, 0)], 1);
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::SegmentOutside { index: 0 }
    );
    // offset + filesz overflows.
    let d = elf(
        EM_AARCH64,
        0,
        &[load(0x100, 0, 1, 1), load(8, 0, u64::MAX, u64::MAX)],
        1,
    );
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::SegmentOutside { index: 1 }
    );
    let d = elf(EM_AARCH64, 0, &[load(u64::MAX, 0, 1, 1)], 1);
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::SegmentOutside { index: 0 }
    );
}

#[test]
fn elf_segment_sizes_and_addresses_are_checked() {
    let d = elf(EM_AARCH64, 0, &[load(0x100, 0, 4, 2)], 4);
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::SegmentFileOverMemory { index: 0 }
    );
    let d = elf(EM_AARCH64, 0, &[load(0x100, u64::MAX - 1, 1, 2)], 1);
    assert_eq!(
        Elf::parse(&d).unwrap_err(),
        ElfError::SegmentAddressOverflow { index: 0 }
    );
    // Ending exactly at the top of the address space is fine.
    let d = elf(EM_AARCH64, 0, &[load(0x100, u64::MAX - 1, 1, 1)], 1);
    assert!(Elf::parse(&d).is_ok());
}

#[test]
fn elf_without_load_segment_is_refused() {
    let d = elf(EM_AARCH64, 0, &[], 0);
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::NoLoadSegment);
    let note = Ph {
        p_type: 4,
        offset: 0,
        paddr: 0,
        filesz: 0,
        memsz: 0,
    };
    let d = elf(EM_AARCH64, 0, &[note], 0);
    assert_eq!(Elf::parse(&d).unwrap_err(), ElfError::NoLoadSegment);
}

#[test]
fn errors_have_messages() {
    for e in [
        ElfError::NotElf,
        ElfError::Not64Bit,
        ElfError::NotLittleEndian,
        ElfError::TruncatedHeader { len: 3 },
        ElfError::BadProgramHeaderSize { size: 3 },
        ElfError::ProgramHeadersOutside,
        ElfError::SegmentOutside { index: 3 },
        ElfError::SegmentFileOverMemory { index: 3 },
        ElfError::SegmentAddressOverflow { index: 3 },
        ElfError::NoLoadSegment,
    ] {
        assert!(!e.to_string().is_empty());
    }
    assert!(Arm64ImageError::TooShort { len: 3 }
        .to_string()
        .starts_with("3 bytes"));
}

/// Every prefix and every single-byte corruption of a valid file parses or
/// fails without panicking.
#[test]
fn no_input_panics() {
    let good = elf(
        EM_LOONGARCH,
        0,
        &[load(0x100, 0, 0x10, 0x20), load(0x108, 0x1000, 8, 8)],
        0x10,
    );
    for len in 0..good.len() {
        let _ = Elf::parse(&good[..len]);
        let _ = Arm64Image::parse(&good[..len]);
    }
    for i in 0..0x100 {
        for v in [0u8, 1, 0x7f, 0x80, 0xff] {
            let mut d = good.clone();
            d[i] = v;
            if let Ok(e) = Elf::parse(&d) {
                let _ = e.segments().count();
                let _ = e.has_interpreter();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// EFI zboot and LoongArch images
// ---------------------------------------------------------------------------

fn zboot(offset: u32, size: u32, name: &[u8], len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    d[0..2].copy_from_slice(b"MZ");
    d[4..8].copy_from_slice(b"zimg");
    d[8..12].copy_from_slice(&offset.to_le_bytes());
    d[12..16].copy_from_slice(&size.to_le_bytes());
    d[0x18..0x18 + name.len()].copy_from_slice(name);
    d[0x38..0x3c].copy_from_slice(&LINUX_PE_MAGIC.to_le_bytes());
    d
}

#[test]
fn zboot_header_is_read() {
    let mut d = zboot(0x100, 0x20, b"zstd", 0x200);
    d[0x100] = 0x28;
    let z = ZbootImage::parse(&d).unwrap();
    assert_eq!(z.compression, "zstd");
    assert_eq!(z.payload.len(), 0x20);
    assert_eq!(z.payload[0], 0x28);
    assert!(ZbootImage::is_zboot(&d));
}

#[test]
fn malformed_zboot_headers_are_refused() {
    assert_eq!(
        ZbootImage::parse(&[0u8; 10]),
        Err(ZbootError::TooShort { len: 10 })
    );
    let mut d = zboot(0x100, 0x20, b"zstd", 0x200);
    d[4] = b'Z';
    assert_eq!(ZbootImage::parse(&d), Err(ZbootError::NotZboot));
    // Payload past the end, overflowing, empty, or over the header.
    for (off, size) in [
        (0x100, 0x101),
        (0x1ff, 2),
        (u32::MAX, u32::MAX),
        (0x100, 0),
        (0, 0x40),
    ] {
        let d = zboot(off, size, b"zstd", 0x200);
        assert_eq!(
            ZbootImage::parse(&d),
            Err(ZbootError::PayloadOutside {
                offset: off,
                size,
                len: 0x200
            }),
            "{off:#x} {size:#x}"
        );
    }
    // Compression names: empty, not terminated, not printable.
    for name in [&b""[..], &[b'a'; 32][..], b"zs\x01d"] {
        let d = zboot(0x100, 0x20, name, 0x200);
        assert_eq!(
            ZbootImage::parse(&d),
            Err(ZbootError::BadCompressionName),
            "{name:?}"
        );
    }
    // Every truncation of a good header is an error, never a panic.
    let d = zboot(0x40, 0x10, b"gzip", 0x50);
    for n in 0..d.len() {
        assert!(ZbootImage::parse(&d[..n]).is_err(), "{n}");
    }
    assert!(ZbootImage::parse(&d).is_ok());
}

fn la_image(entry: u64, asize: u64, text_offset: u64, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    d[0..2].copy_from_slice(b"MZ");
    d[8..16].copy_from_slice(&entry.to_le_bytes());
    d[16..24].copy_from_slice(&asize.to_le_bytes());
    d[24..32].copy_from_slice(&text_offset.to_le_bytes());
    d[0x38..0x3c].copy_from_slice(&LINUX_PE_MAGIC.to_le_bytes());
    d[0x3c..0x40].copy_from_slice(&0x40u32.to_le_bytes());
    d[0x40..0x44].copy_from_slice(b"PE\0\0");
    d[0x44..0x46].copy_from_slice(&PE_MACHINE_LOONGARCH64.to_le_bytes());
    d
}

#[test]
fn loongarch_header_is_read() {
    // As Debian's 7.2 kernel: entry 0x12e9000, 26 MiB, loaded at 2 MiB.
    let d = la_image(0x9000_0000_0020_1000, 0x10_000, 0x20_0000, 0x2000);
    assert_eq!(
        LoongArchImage::parse(&d),
        Ok(LoongArchImage {
            entry: 0x20_1000,
            image_size: 0x10_000,
            text_offset: 0x20_0000
        })
    );
}

#[test]
fn malformed_loongarch_images_are_refused() {
    use LoongArchImageError as E;
    let good = la_image(0x20_1000, 0x10_000, 0x20_0000, 0x2000);
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = good.clone();
        f(&mut d);
        LoongArchImage::parse(&d)
    };
    assert_eq!(
        LoongArchImage::parse(&zboot(0x100, 0x20, b"zstd", 0x200)),
        Err(E::Zboot)
    );
    assert_eq!(with(&|d| d[0x38] = 0), Err(E::BadMagic));
    assert_eq!(with(&|d| d[0] = b'X'), Err(E::BadMagic));
    assert_eq!(with(&|d| d[0x41] = b'X'), Err(E::NoPeHeader));
    assert_eq!(
        with(&|d| d[0x3c..0x40].copy_from_slice(&0xffff_fff0u32.to_le_bytes())),
        Err(E::NoPeHeader)
    );
    assert_eq!(
        with(&|d| d[0x44..0x46].copy_from_slice(&0x8664u16.to_le_bytes())),
        Err(E::WrongMachine { machine: 0x8664 })
    );
    // Unaligned load offset, size under the file, overflowing placement.
    assert_eq!(with(&|d| d[24] = 1), Err(E::BadPlacement));
    assert_eq!(
        with(&|d| d[16..24].copy_from_slice(&0x100u64.to_le_bytes())),
        Err(E::BadPlacement)
    );
    assert_eq!(
        with(&|d| d[16..24].copy_from_slice(&u64::MAX.to_le_bytes())),
        Err(E::BadPlacement)
    );
    // Entry before the image or past the file.
    for entry in [0x1f_ffffu64, 0x20_2000] {
        assert_eq!(
            with(&|d| d[8..16].copy_from_slice(&entry.to_le_bytes())),
            Err(E::EntryOutside { entry })
        );
    }
    for n in 0..0x48 {
        assert!(LoongArchImage::parse(&good[..n]).is_err(), "{n}");
    }
}
