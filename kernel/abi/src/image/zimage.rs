//! The 32-bit ARM Linux `zImage` (a self-decompressing kernel) and the
//! 32-bit boot protocol's pure part: where the zImage, the DTB and the
//! initrd go in a VM's RAM, and the registers the kernel is entered with.
//!
//! # Header (little-endian words; Linux arch/arm/boot/compressed/head.S)
//!
//! | off | field |
//! |-----|-------|
//! | 0x00 | 9 words of code (NOPs and a branch) |
//! | 0x24 | magic [`ZIMAGE_MAGIC`] `0x016F2818` |
//! | 0x28 | `start`: the link address, 0 for a position-independent zImage |
//! | 0x2C | `end`: `start` + the image size (the file may be longer: an appended DTB) |
//! | 0x30 | endianness flag: [`ZIMAGE_LE`] `0x04030201` (read as `0x01020304` in a big-endian kernel; before Linux 3.17 an instruction) |
//! | 0x34 | [`ZIMAGE_TABLE_MAGIC`] `0x45454545` when a tag table follows (Linux 4.14+) |
//! | 0x38 | the table's offset from `start` |
//!
//! The table holds tags (`size` in words including the 2-word header,
//! `tag`), ended by a zero size; tag [`ZIMAGE_TAG_KRNL_SIZE`] ("KLSZ")
//! gives the offset of the decompressed kernel's size (a little-endian
//! word in the file) and the kernel's BSS size: what the decompressed
//! kernel will occupy.
//!
//! # Boot protocol (Linux Documentation/arch/arm/booting.rst)
//!
//! The kernel is entered at the zImage's first byte in SVC mode with IRQs,
//! FIQs and asynchronous aborts masked, ARM state, MMU and data cache off,
//! with r0 = 0, r1 = the machine type (`~0` for a device-tree-only
//! platform) and r2 = the DTB's physical address ([`Arm32Layout::entry`]).
//!
//! Placement rules ([`arm32_layout`]):
//!
//! - RAM starts 128 MiB-aligned: a multi-platform zImage
//!   (`CONFIG_AUTO_ZRELADDR`) takes the start of RAM to be its own address
//!   rounded down to 128 MiB, so it must also lie in the first 128 MiB.
//! - The zImage goes 32 MiB into RAM (2 MiB-aligned), which booting.rst
//!   recommends so that the kernel, decompressed to RAM + 0x8000, does not
//!   overwrite it and it need not move itself first; further up when the
//!   KLSZ tag says the decompressed kernel is larger.
//! - The DTB (at most 1 MiB: the early kernel maps it with two sections)
//!   goes 2 MiB-aligned at the top of the *reachable window*, the initrd
//!   (4 KiB-aligned) just below it, above the zImage and the decompressor's
//!   working space. The window is the first 512 MiB of RAM, a conservative
//!   share of the kernel's low memory (about 760 MiB with the default
//!   3G/1G split), and never beyond 4 GiB: the kernel must reach both
//!   through its linear map before it sets up high memory.

use core::fmt;

use super::{u32_at, ARM64_MAGIC, ARM64_MAGIC_OFFSET};

/// The zImage magic, at [`ZIMAGE_MAGIC_OFFSET`].
pub const ZIMAGE_MAGIC: u32 = 0x016f_2818;
/// Where [`ZIMAGE_MAGIC`] stands (after 9 words of code).
pub const ZIMAGE_MAGIC_OFFSET: usize = 0x24;
/// The endianness flag of a little-endian kernel, at 0x30.
pub const ZIMAGE_LE: u32 = 0x0403_0201;
/// The endianness flag of a big-endian (BE8) kernel as read little-endian.
pub const ZIMAGE_BE: u32 = 0x0102_0304;
/// At 0x34 when the word at 0x38 is the tag table's offset.
pub const ZIMAGE_TABLE_MAGIC: u32 = 0x4545_4545;
/// The tag of the decompressed kernel's size ("KLSZ").
pub const ZIMAGE_TAG_KRNL_SIZE: u32 = 0x5a53_4c4b;
/// Bytes of the header this parser needs (through `end`).
pub const ZIMAGE_HEADER_LEN: usize = 0x30;
/// Tags read at most before the table is judged malformed.
const MAX_TAGS: usize = 16;

/// Whether the kernel says it is little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZEndian {
    /// The flag says so.
    Little,
    /// No flag (a kernel before Linux 3.17): taken as little-endian.
    Unmarked,
}

/// What the decompressed kernel occupies (from the KLSZ tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSize {
    /// The decompressed image's bytes.
    pub image: u32,
    /// Its BSS, after the image.
    pub bss: u32,
}

/// A checked zImage header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZImage {
    /// Bytes to load (`end - start`): no more than the file.
    pub size: u32,
    pub endian: ZEndian,
    /// The decompressed kernel's footprint, when the tag table gives it.
    pub kernel: Option<KernelSize>,
}

/// Why a file is not a zImage kestrel can boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZImageError {
    /// Shorter than the header.
    TooShort { len: usize },
    /// No [`ZIMAGE_MAGIC`] at 0x24; `arm64` when it is an arm64 `Image`,
    /// `gzip` when the file is gzip-compressed.
    BadMagic { arm64: bool, gzip: bool },
    /// A big-endian (BE8) kernel.
    BigEndian,
    /// `start` is not 0: the zImage is linked to run at a fixed address
    /// (`CONFIG_ZBOOT_ROM`), not anywhere in RAM.
    Linked { start: u32 },
    /// `end` is not above `start`, or the image is longer than the file.
    BadSize { start: u32, end: u32, len: usize },
    /// The tag table (offset from 0x38) or one of its tags lies outside
    /// the image, or it has more than 16 tags.
    TableOutside { offset: u32 },
    /// The KLSZ tag's size word lies outside the image.
    SizeOutside { offset: u32 },
}

impl fmt::Display for ZImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ZImageError::TooShort { len } => {
                write!(f, "{len} bytes, shorter than a zImage header (0x30 bytes)")
            }
            ZImageError::BadMagic { arm64: true, .. } => {
                f.write_str("an arm64 Image, not a 32-bit zImage (no magic 0x016f2818 at 0x24)")
            }
            ZImageError::BadMagic { gzip: true, .. } => f.write_str(
                "no zImage magic 0x016f2818 at 0x24; the file is gzip-compressed: gunzip it",
            ),
            ZImageError::BadMagic { .. } => f.write_str("no zImage magic 0x016f2818 at 0x24"),
            ZImageError::BigEndian => f.write_str("a big-endian zImage (only little-endian boots)"),
            ZImageError::Linked { start } => write!(
                f,
                "zImage linked to run at {start:#x} (CONFIG_ZBOOT_ROM), not position independent"
            ),
            ZImageError::BadSize { start, end, len } => write!(
                f,
                "zImage start {start:#x} and end {end:#x} do not describe an image inside the {len:#x}-byte file"
            ),
            ZImageError::TableOutside { offset } => {
                write!(f, "zImage tag table at {offset:#x} runs outside the image")
            }
            ZImageError::SizeOutside { offset } => write!(
                f,
                "zImage KLSZ tag names the kernel size at {offset:#x}, outside the image"
            ),
        }
    }
}

impl ZImage {
    /// Whether `data` carries the zImage magic at 0x24.
    pub fn is_zimage(data: &[u8]) -> bool {
        u32_at(data, ZIMAGE_MAGIC_OFFSET) == Some(ZIMAGE_MAGIC)
    }

    /// Reads and checks the header of `data` (the whole file).
    pub fn parse(data: &[u8]) -> Result<ZImage, ZImageError> {
        let len = data.len();
        if len < ZIMAGE_HEADER_LEN {
            return Err(ZImageError::TooShort { len });
        }
        if !Self::is_zimage(data) {
            return Err(ZImageError::BadMagic {
                arm64: data.get(ARM64_MAGIC_OFFSET..ARM64_MAGIC_OFFSET + 4)
                    == Some(&ARM64_MAGIC[..]),
                gzip: data.starts_with(&[0x1f, 0x8b]),
            });
        }
        let short = ZImageError::TooShort { len };
        let start = u32_at(data, 0x28).ok_or(short)?;
        let end = u32_at(data, 0x2c).ok_or(short)?;
        let endian = match u32_at(data, 0x30) {
            Some(ZIMAGE_LE) => ZEndian::Little,
            Some(ZIMAGE_BE) => return Err(ZImageError::BigEndian),
            // Before Linux 3.17 an instruction stood there.
            _ => ZEndian::Unmarked,
        };
        if start != 0 {
            return Err(ZImageError::Linked { start });
        }
        let size = end.wrapping_sub(start);
        if end <= start || size as usize > len {
            return Err(ZImageError::BadSize { start, end, len });
        }
        let image = &data[..size as usize];
        let kernel = if u32_at(image, 0x34) == Some(ZIMAGE_TABLE_MAGIC) {
            let offset = u32_at(image, 0x38).ok_or(ZImageError::TableOutside { offset: 0 })?;
            kernel_size(image, offset)?
        } else {
            None
        };
        Ok(ZImage {
            size,
            endian,
            kernel,
        })
    }
}

/// Walks the tag table at `offset` of `image` for the KLSZ tag.
fn kernel_size(image: &[u8], offset: u32) -> Result<Option<KernelSize>, ZImageError> {
    let outside = ZImageError::TableOutside { offset };
    let mut at = offset as usize;
    for _ in 0..MAX_TAGS {
        let words = u32_at(image, at).ok_or(outside)? as usize;
        if words == 0 {
            return Ok(None);
        }
        let tag = u32_at(image, at.checked_add(4).ok_or(outside)?).ok_or(outside)?;
        let bytes = words.checked_mul(4).ok_or(outside)?;
        let next = at.checked_add(bytes).ok_or(outside)?;
        if words < 2 || next > image.len() {
            return Err(outside);
        }
        if tag == ZIMAGE_TAG_KRNL_SIZE && words >= 4 {
            let size_ptr = u32_at(image, at + 8).ok_or(outside)?;
            let bss = u32_at(image, at + 12).ok_or(outside)?;
            let image_size = u32_at(image, size_ptr as usize)
                .ok_or(ZImageError::SizeOutside { offset: size_ptr })?;
            return Ok(Some(KernelSize {
                image: image_size,
                bss,
            }));
        }
        at = next;
    }
    Err(outside)
}

const MIB: u64 = 1 << 20;

/// RAM must start at a multiple of this (`CONFIG_AUTO_ZRELADDR`).
pub const ARM32_RAM_ALIGN: u64 = 128 * MIB;
/// The zImage's offset into RAM (booting.rst: above 32 MiB), at least.
pub const ZIMAGE_LOAD_OFFSET: u64 = 32 * MIB;
/// The zImage must start within this much of the start of RAM.
pub const ZIMAGE_WINDOW: u64 = 128 * MIB;
/// Where the kernel decompresses itself, from the start of RAM
/// (`TEXT_OFFSET`; the initial page tables sit in the 16 KiB below).
pub const ARM32_TEXT_OFFSET: u64 = 0x8000;
/// Room kept after the zImage for the decompressor's BSS, stack and heap.
pub const ZIMAGE_SLACK: u64 = MIB;
/// The DTB and initrd stay within this much of the start of RAM.
pub const ARM32_LOWMEM: u64 = 512 * MIB;
/// The largest DTB the early kernel maps.
pub const ARM32_DTB_MAX: u64 = MIB;
/// Alignment of the zImage and the DTB.
const ALIGN_2M: u64 = 2 * MIB;
/// Alignment of the initrd.
const ALIGN_4K: u64 = 4096;

/// r1 for a device-tree platform: no machine number.
pub const ARM32_MACH_DT: u32 = 0xffff_ffff;
/// The entry CPSR: SVC mode (0x13), A, I and F masked, ARM state, little
/// endian (arm64 KVM's `VCPU_RESET_PSTATE_SVC`).
pub const ARM32_ENTRY_CPSR: u32 = 0x1d3;

/// Where a 32-bit kernel's pieces go in RAM (guest-physical addresses, all
/// below 4 GiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm32Layout {
    /// The zImage (and the entry point).
    pub kernel: u64,
    pub dtb: u64,
    /// The initrd's start and end (equal when there is none).
    pub initrd: u64,
    pub initrd_end: u64,
}

/// The registers a 32-bit kernel is entered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm32Entry {
    pub pc: u32,
    pub r0: u32,
    pub r1: u32,
    pub r2: u32,
    pub cpsr: u32,
}

impl Arm32Layout {
    /// The entry state: PC at the zImage, r0 = 0, r1 = [`ARM32_MACH_DT`],
    /// r2 = the DTB, CPSR = [`ARM32_ENTRY_CPSR`].
    pub fn entry(&self) -> Arm32Entry {
        Arm32Entry {
            pc: self.kernel as u32,
            r0: 0,
            r1: ARM32_MACH_DT,
            r2: self.dtb as u32,
            cpsr: ARM32_ENTRY_CPSR,
        }
    }
}

/// Why a 32-bit kernel cannot be placed in a VM's RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// RAM does not start at a multiple of 128 MiB.
    RamMisaligned { base: u64 },
    /// RAM starts at or beyond 4 GiB.
    RamAbove4G { base: u64 },
    /// The zImage (at `offset` into RAM, with its working space) does not
    /// fit in RAM, or does not start within its first 128 MiB.
    KernelDoesNotFit { offset: u64, size: u64 },
    /// The DTB is larger than [`ARM32_DTB_MAX`].
    DtbTooLarge { len: u64 },
    /// The DTB and initrd do not fit between the zImage and the top of the
    /// reachable window.
    NoRoom { need: u64, room: u64 },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::RamMisaligned { base } => {
                write!(f, "RAM at {base:#x} is not 128 MiB-aligned, as a zImage needs")
            }
            LayoutError::RamAbove4G { base } => {
                write!(f, "RAM at {base:#x} is beyond what a 32-bit kernel reaches at boot")
            }
            LayoutError::KernelDoesNotFit { offset, size } => write!(
                f,
                "the zImage ({size:#x} bytes with its working space) does not fit at RAM + {offset:#x} (it must start in the first 128 MiB)"
            ),
            LayoutError::DtbTooLarge { len } => {
                write!(f, "the DTB is {len:#x} bytes; a 32-bit kernel maps at most 1 MiB")
            }
            LayoutError::NoRoom { need, room } => write!(
                f,
                "the DTB and initrd need {need:#x} bytes above the zImage; only {room:#x} are in the kernel's reach"
            ),
        }
    }
}

const fn align_up(v: u64, a: u64) -> Option<u64> {
    match v.checked_add(a - 1) {
        Some(x) => Some(x & !(a - 1)),
        None => None,
    }
}

/// Places zImage `z`, a DTB of `dtb_len` bytes and an initrd of
/// `initrd_len` bytes (0: none) in RAM at `ram_base` of `ram_size` bytes,
/// following the rules in the module documentation.
pub fn arm32_layout(
    ram_base: u64,
    ram_size: u64,
    z: &ZImage,
    dtb_len: u64,
    initrd_len: u64,
) -> Result<Arm32Layout, LayoutError> {
    if !ram_base.is_multiple_of(ARM32_RAM_ALIGN) {
        return Err(LayoutError::RamMisaligned { base: ram_base });
    }
    const FOUR_GIB: u64 = 1 << 32;
    if ram_base >= FOUR_GIB {
        return Err(LayoutError::RamAbove4G { base: ram_base });
    }
    if dtb_len > ARM32_DTB_MAX {
        return Err(LayoutError::DtbTooLarge { len: dtb_len });
    }
    let ram_end = ram_base.saturating_add(ram_size);
    let window_end = ram_end.min(ram_base + ARM32_LOWMEM).min(FOUR_GIB);

    // The decompressed kernel's end (from RAM's start) when the zImage says.
    let decompressed = z.kernel.map_or(0, |k| {
        ARM32_TEXT_OFFSET + u64::from(k.image) + u64::from(k.bss)
    });
    let footprint = u64::from(z.size) + ZIMAGE_SLACK;
    let offset = align_up(decompressed, ALIGN_2M)
        .unwrap_or(u64::MAX)
        .max(ZIMAGE_LOAD_OFFSET);
    let kernel = ram_base + offset.min(ZIMAGE_WINDOW);
    let zend = kernel + footprint;
    if offset >= ZIMAGE_WINDOW || zend > window_end {
        return Err(LayoutError::KernelDoesNotFit {
            offset,
            size: footprint,
        });
    }

    // The DTB at the top of the window (2 MiB-aligned), the initrd below.
    let room = window_end - zend;
    let no_room = LayoutError::NoRoom {
        need: dtb_len.max(1) + initrd_len,
        room,
    };
    let dtb = window_end
        .checked_sub(dtb_len.max(1))
        .map(|a| a & !(ALIGN_2M - 1))
        .ok_or(no_room)?;
    let initrd = dtb.checked_sub(initrd_len).ok_or(no_room)? & !(ALIGN_4K - 1);
    if dtb < zend || initrd < zend {
        return Err(no_room);
    }
    Ok(Arm32Layout {
        kernel,
        dtb,
        initrd,
        initrd_end: initrd + initrd_len,
    })
}

#[cfg(test)]
mod tests {
    extern crate alloc;
    extern crate std;

    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const RAM: u64 = 0x4000_0000;

    /// A zImage of `len` bytes as Linux 4.14+ builds one: 8 NOPs and a
    /// branch, the magic, start 0, end `len`, the LE flag, the table magic
    /// and a table with the KLSZ tag (6 words) naming a size word.
    fn zimage(len: usize, kernel: Option<(u32, u32)>) -> Vec<u8> {
        let mut d = vec![0u8; len];
        let mut put = |off: usize, w: u32| d[off..off + 4].copy_from_slice(&w.to_le_bytes());
        for i in 0..8 {
            put(i * 4, 0xe1a0_0000); // mov r0, r0
        }
        put(0x20, 0xea00_000f); // b 1f
        put(0x24, ZIMAGE_MAGIC);
        put(0x28, 0);
        put(0x2c, len as u32);
        put(0x30, ZIMAGE_LE);
        if let Some((image, bss)) = kernel {
            put(0x34, ZIMAGE_TABLE_MAGIC);
            put(0x38, 0x100);
            let table = [6, ZIMAGE_TAG_KRNL_SIZE, 0x200, bss, 0x8000, 0x10000, 0];
            for (i, w) in table.into_iter().enumerate() {
                put(0x100 + i * 4, w);
            }
            put(0x200, image);
        }
        d
    }

    #[test]
    fn header_fields_are_read() {
        let d = zimage(0x1000, Some((0x80_0000, 0x4_0000)));
        // The magic bytes as a loader sees them (18 28 6f 01 at 0x24).
        assert_eq!(&d[0x24..0x28], &[0x18, 0x28, 0x6f, 0x01]);
        assert_eq!(&d[0x30..0x34], &[0x01, 0x02, 0x03, 0x04]);
        let z = ZImage::parse(&d).unwrap();
        assert_eq!(
            z,
            ZImage {
                size: 0x1000,
                endian: ZEndian::Little,
                kernel: Some(KernelSize {
                    image: 0x80_0000,
                    bss: 0x4_0000
                })
            }
        );
        // A longer file (an appended DTB): the image is `end - start`.
        let mut long = zimage(0x1000, None);
        long.extend_from_slice(&[0xd0, 0x0d, 0xfe, 0xed]);
        assert_eq!(ZImage::parse(&long).unwrap().size, 0x1000);
        assert_eq!(ZImage::parse(&long).unwrap().kernel, None);
    }

    #[test]
    fn old_kernel_without_flag_is_taken_as_little_endian() {
        // Linux before 3.17: `mov r7, r1` followed the header.
        let mut d = zimage(0x100, None);
        d[0x30..0x34].copy_from_slice(&0xe1a0_7001u32.to_le_bytes());
        assert_eq!(ZImage::parse(&d).unwrap().endian, ZEndian::Unmarked);
    }

    #[test]
    fn malformed_headers_are_typed_errors() {
        for len in [0, 4, 0x2f] {
            assert_eq!(
                ZImage::parse(&vec![0; len]),
                Err(ZImageError::TooShort { len })
            );
        }
        let mut d = zimage(0x100, None);
        d[0x30..0x34].copy_from_slice(&ZIMAGE_BE.to_le_bytes());
        assert_eq!(ZImage::parse(&d), Err(ZImageError::BigEndian));
        let mut d = zimage(0x100, None);
        d[0x28..0x2c].copy_from_slice(&0x1000u32.to_le_bytes());
        assert_eq!(
            ZImage::parse(&d),
            Err(ZImageError::Linked { start: 0x1000 })
        );
        let mut d = zimage(0x100, None);
        d[0x2c..0x30].copy_from_slice(&0x101u32.to_le_bytes());
        assert_eq!(
            ZImage::parse(&d),
            Err(ZImageError::BadSize {
                start: 0,
                end: 0x101,
                len: 0x100
            })
        );
        d[0x2c..0x30].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            ZImage::parse(&d),
            Err(ZImageError::BadSize { .. })
        ));
        // An arm64 Image, a gzip file, garbage.
        let mut arm64 = vec![0u8; 64];
        arm64[0x38..0x3c].copy_from_slice(b"ARM\x64");
        assert_eq!(
            ZImage::parse(&arm64),
            Err(ZImageError::BadMagic {
                arm64: true,
                gzip: false
            })
        );
        let mut gz = vec![0u8; 64];
        gz[..2].copy_from_slice(&[0x1f, 0x8b]);
        assert_eq!(
            ZImage::parse(&gz),
            Err(ZImageError::BadMagic {
                arm64: false,
                gzip: true
            })
        );
        assert!(!ZImage::is_zimage(&[0; 0x40]));
    }

    #[test]
    fn broken_tag_tables_are_refused() {
        // Table offset beyond the image.
        let mut d = zimage(0x300, Some((1, 2)));
        d[0x38..0x3c].copy_from_slice(&0x2ffu32.to_le_bytes());
        assert_eq!(
            ZImage::parse(&d),
            Err(ZImageError::TableOutside { offset: 0x2ff })
        );
        // A size word outside the image.
        let mut d = zimage(0x300, Some((1, 2)));
        d[0x108..0x10c].copy_from_slice(&0x2fdu32.to_le_bytes());
        assert_eq!(
            ZImage::parse(&d),
            Err(ZImageError::SizeOutside { offset: 0x2fd })
        );
        // A tag of one word (shorter than its own header).
        let mut d = zimage(0x300, Some((1, 2)));
        d[0x100..0x104].copy_from_slice(&1u32.to_le_bytes());
        assert!(matches!(
            ZImage::parse(&d),
            Err(ZImageError::TableOutside { .. })
        ));
        // An unknown tag, then the end: no size, no error.
        let mut d = zimage(0x300, Some((1, 2)));
        d[0x104..0x108].copy_from_slice(&0x1234u32.to_le_bytes());
        assert_eq!(ZImage::parse(&d).unwrap().kernel, None);
        // Tags that loop without end (a 2-word tag forever) stop at 16.
        let mut d = zimage(0x400, Some((1, 2)));
        for i in 0..40 {
            let at = 0x100 + i * 8;
            d[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
            d[at + 4..at + 8].copy_from_slice(&7u32.to_le_bytes());
        }
        assert!(matches!(
            ZImage::parse(&d),
            Err(ZImageError::TableOutside { .. })
        ));
    }

    #[test]
    fn layout_of_a_typical_vm() {
        // 6 MiB zImage, 15 MiB kernel + 1 MiB BSS, 256 MiB RAM at 1 GiB.
        let mut z = ZImage::parse(&zimage(0x400, Some((15 << 20, 1 << 20)))).unwrap();
        z.size = 6 << 20;
        let l = arm32_layout(RAM, 256 << 20, &z, 0x2000, 0x30_1234).unwrap();
        assert_eq!(l.kernel, RAM + (32 << 20));
        assert_eq!(l.dtb, RAM + (254 << 20), "last 2 MiB");
        assert_eq!(l.initrd_end - l.initrd, 0x30_1234);
        assert_eq!(l.initrd % 4096, 0);
        assert!(l.initrd_end <= l.dtb);
        assert_eq!(
            l.entry(),
            Arm32Entry {
                pc: 0x4200_0000,
                r0: 0,
                r1: 0xffff_ffff,
                r2: 0x4fe0_0000,
                cpsr: 0x1d3
            }
        );
        // 2 GiB of RAM: the DTB stays in the first 512 MiB (lowmem).
        let l = arm32_layout(RAM, 2 << 30, &z, 0x2000, 0).unwrap();
        assert_eq!(l.dtb, RAM + (510 << 20));
        assert_eq!(l.initrd, l.initrd_end);
        // RAM at 3.75 GiB: the window stops at 4 GiB.
        let l = arm32_layout(0xf000_0000, 1 << 30, &z, 0x2000, 0).unwrap();
        assert_eq!(l.dtb, 0xffe0_0000);
    }

    #[test]
    fn a_large_kernel_moves_the_zimage_up() {
        // 40 MiB decompressed: the zImage goes above it, 2 MiB-aligned.
        let z = ZImage::parse(&zimage(0x400, Some((40 << 20, 0)))).unwrap();
        let l = arm32_layout(RAM, 256 << 20, &z, 0x1000, 0).unwrap();
        assert_eq!(l.kernel, RAM + (42 << 20));
        // 130 MiB decompressed: the zImage would leave the first 128 MiB.
        let z = ZImage::parse(&zimage(0x400, Some((130 << 20, 0)))).unwrap();
        assert!(matches!(
            arm32_layout(RAM, 1 << 30, &z, 0x1000, 0),
            Err(LayoutError::KernelDoesNotFit { .. })
        ));
        // Overflowing sizes are refused, not wrapped.
        let z = ZImage {
            size: u32::MAX,
            endian: ZEndian::Little,
            kernel: Some(KernelSize {
                image: u32::MAX,
                bss: u32::MAX,
            }),
        };
        assert!(arm32_layout(RAM, u64::MAX, &z, 0, 0).is_err());
    }

    #[test]
    fn layout_errors() {
        let z = ZImage::parse(&zimage(0x400, None)).unwrap();
        assert_eq!(
            arm32_layout(RAM + (2 << 20), 256 << 20, &z, 0x1000, 0),
            Err(LayoutError::RamMisaligned {
                base: RAM + (2 << 20)
            })
        );
        assert_eq!(
            arm32_layout(1 << 32, 256 << 20, &z, 0x1000, 0),
            Err(LayoutError::RamAbove4G { base: 1 << 32 })
        );
        assert_eq!(
            arm32_layout(RAM, 256 << 20, &z, (1 << 20) + 1, 0),
            Err(LayoutError::DtbTooLarge { len: (1 << 20) + 1 })
        );
        // 32 MiB of RAM: no room for the zImage at 32 MiB.
        assert!(matches!(
            arm32_layout(RAM, 32 << 20, &z, 0x1000, 0),
            Err(LayoutError::KernelDoesNotFit { .. })
        ));
        // 64 MiB: the zImage fits, a 40 MiB initrd does not.
        assert!(matches!(
            arm32_layout(RAM, 64 << 20, &z, 0x1000, 40 << 20),
            Err(LayoutError::NoRoom { .. })
        ));
        assert!(arm32_layout(RAM, 64 << 20, &z, 0x1000, 20 << 20).is_ok());
        assert!(arm32_layout(RAM, 0, &z, 0, 0).is_err());
    }

    /// Every accepted layout keeps its promises: inside RAM and the window,
    /// below 4 GiB, aligned, nothing overlapping the zImage.
    #[test]
    fn layouts_keep_their_rules() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ok = 0;
        for _ in 0..20_000 {
            let base = (next() % 40) * ARM32_RAM_ALIGN;
            let size = next() % (3 << 30);
            let z = ZImage {
                size: (next() % (64 << 20)) as u32 + 1,
                endian: ZEndian::Little,
                kernel: (next() % 2 == 0).then(|| KernelSize {
                    image: (next() % (200 << 20)) as u32,
                    bss: (next() % (8 << 20)) as u32,
                }),
            };
            let dtb = next() % (2 << 20);
            let initrd = if next() % 3 == 0 {
                0
            } else {
                next() % (300 << 20)
            };
            let Ok(l) = arm32_layout(base, size, &z, dtb, initrd) else {
                continue;
            };
            ok += 1;
            let zend = l.kernel + u64::from(z.size);
            assert!(l.kernel >= base + ZIMAGE_LOAD_OFFSET && l.kernel < base + ZIMAGE_WINDOW);
            assert_eq!(l.kernel % ALIGN_2M, 0);
            assert_eq!(l.dtb % ALIGN_2M, 0);
            assert_eq!(l.initrd % ALIGN_4K, 0);
            assert!(zend + ZIMAGE_SLACK <= l.initrd && l.initrd_end <= l.dtb);
            assert!(l.dtb + dtb <= (base + size).min(base + ARM32_LOWMEM).min(1 << 32));
            if let Some(k) = z.kernel {
                let decompressed = ARM32_TEXT_OFFSET + u64::from(k.image) + u64::from(k.bss);
                assert!(
                    base + decompressed <= l.kernel,
                    "kernel decompresses below the zImage"
                );
            }
        }
        assert!(ok > 1000, "{ok} layouts accepted");
    }
}
