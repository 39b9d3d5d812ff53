//! The kernel files VM configs name: the arm64 Linux `Image` header,
//! 64-bit little-endian ELF executables, the LoongArch Linux image header
//! ([`LoongArchImage`]) and the EFI zboot wrapper ([`ZbootImage`]) that
//! Debian ships it in, and the 32-bit ARM `zImage` ([`ZImage`], with the
//! 32-bit boot protocol's placement and entry state: [`arm32_layout`]).
//!
//! Shared by the host tool (which checks a config's kernels before packing
//! them) and the hypervisor (which loads them). Both parsers read a byte
//! slice, check every offset and size against it with checked arithmetic,
//! and return a typed error; they never panic and never index out of bounds.
//!
//! # arm64 `Image` header (64 bytes, little-endian)
//!
//! | off | type | field |
//! |-----|------|-------|
//! | 0x00 | u32 | `code0` (branch to the kernel entry) |
//! | 0x04 | u32 | `code1` |
//! | 0x08 | u64 | `text_offset`: load offset from a 2 MiB-aligned base |
//! | 0x10 | u64 | `image_size`: bytes the kernel occupies once running (0: a kernel older than 3.17) |
//! | 0x18 | u64 | `flags` (bit 0: big-endian kernel) |
//! | 0x20 | 3 x u64 | reserved |
//! | 0x38 | `[u8; 4]` | magic `ARM\x64` |
//! | 0x3c | u32 | offset of the PE header (EFI stub) |
//!
//! # ELF
//!
//! [`Elf::parse`] accepts a 64-bit little-endian ELF file whose program
//! header table and every `PT_LOAD` segment's file bytes lie inside the
//! file, with at least one `PT_LOAD`; it does not judge the machine or the
//! file type (the caller does, with [`Elf::machine`] and [`Elf::kind`]).

use core::fmt;

mod zimage;
pub use zimage::{
    arm32_layout, Arm32Entry, Arm32Layout, KernelSize, LayoutError, ZEndian, ZImage, ZImageError,
    ARM32_DTB_MAX, ARM32_ENTRY_CPSR, ARM32_LOWMEM, ARM32_MACH_DT, ARM32_RAM_ALIGN,
    ARM32_TEXT_OFFSET, ZIMAGE_BE, ZIMAGE_HEADER_LEN, ZIMAGE_LE, ZIMAGE_LOAD_OFFSET, ZIMAGE_MAGIC,
    ZIMAGE_MAGIC_OFFSET, ZIMAGE_SLACK, ZIMAGE_TABLE_MAGIC, ZIMAGE_TAG_KRNL_SIZE, ZIMAGE_WINDOW,
};

fn u16_at(data: &[u8], off: usize) -> Option<u16> {
    let b = data.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    let b = data.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(data: &[u8], off: usize) -> Option<u64> {
    let b = data.get(off..off.checked_add(8)?)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

// ---------------------------------------------------------------------------
// arm64 Image
// ---------------------------------------------------------------------------

/// The magic of an arm64 `Image`, at [`ARM64_MAGIC_OFFSET`].
pub const ARM64_MAGIC: [u8; 4] = *b"ARM\x64";
/// Where [`ARM64_MAGIC`] stands in the header.
pub const ARM64_MAGIC_OFFSET: usize = 0x38;
/// Size of the arm64 `Image` header.
pub const ARM64_HEADER_LEN: usize = 64;
/// The load offset the boot protocol implies when `image_size` is 0.
pub const ARM64_LEGACY_TEXT_OFFSET: u64 = 0x8_0000;

/// The fields of an arm64 Linux `Image` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm64Image {
    /// Load offset from a 2 MiB-aligned base.
    pub text_offset: u64,
    /// Bytes the kernel occupies once running (0 for kernels before 3.17).
    pub image_size: u64,
    /// Header flags (bit 0: big-endian; bits 1-2: page size; bit 3: placement).
    pub flags: u64,
}

/// Why a file is not an arm64 `Image`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm64ImageError {
    /// Shorter than the 64-byte header.
    TooShort { len: usize },
    /// No [`ARM64_MAGIC`] at 0x38; `gzip` when the file starts with the gzip
    /// magic (a compressed `Image`, which must be gunzipped first).
    BadMagic { gzip: bool },
}

impl fmt::Display for Arm64ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Arm64ImageError::TooShort { len } => write!(
                f,
                "{len} bytes, shorter than an arm64 Image header (no magic ARM\\x64 at 0x38)"
            ),
            Arm64ImageError::BadMagic { gzip: false } => f.write_str("no magic ARM\\x64 at 0x38"),
            Arm64ImageError::BadMagic { gzip: true } => {
                f.write_str("no magic ARM\\x64 at 0x38; it is gzip-compressed: gunzip it")
            }
        }
    }
}

impl Arm64Image {
    /// Reads the header of `data`.
    pub fn parse(data: &[u8]) -> Result<Arm64Image, Arm64ImageError> {
        let magic_end = ARM64_MAGIC_OFFSET + ARM64_MAGIC.len();
        if data.len() < ARM64_HEADER_LEN {
            return Err(Arm64ImageError::TooShort { len: data.len() });
        }
        if data.get(ARM64_MAGIC_OFFSET..magic_end) != Some(&ARM64_MAGIC[..]) {
            return Err(Arm64ImageError::BadMagic {
                gzip: data.starts_with(&[0x1f, 0x8b]),
            });
        }
        let field = |off| u64_at(data, off).ok_or(Arm64ImageError::TooShort { len: data.len() });
        Ok(Arm64Image {
            text_offset: field(0x08)?,
            image_size: field(0x10)?,
            flags: field(0x18)?,
        })
    }

    /// Where the kernel goes and how much it occupies, for a file of
    /// `file_len` bytes: `(load offset from a 2 MiB-aligned base, footprint)`.
    /// With `image_size` 0 (a kernel older than 3.17) the offset is 0x80000
    /// and the footprint the file; otherwise `text_offset` and the larger of
    /// `image_size` and the file.
    pub fn placement(&self, file_len: u64) -> (u64, u64) {
        if self.image_size == 0 {
            (ARM64_LEGACY_TEXT_OFFSET, file_len)
        } else {
            (self.text_offset, self.image_size.max(file_len))
        }
    }
}

// ---------------------------------------------------------------------------
// ELF
// ---------------------------------------------------------------------------

/// `e_machine` of arm64.
pub const EM_AARCH64: u16 = 183;
/// `e_machine` of LoongArch.
pub const EM_LOONGARCH: u16 = 258;
/// `e_type` of an executable.
pub const ET_EXEC: u16 = 2;
/// `p_type` of a loadable segment.
pub const PT_LOAD: u32 = 1;
/// `p_type` of a program interpreter (a dynamically linked executable).
pub const PT_INTERP: u32 = 3;

const ELF_HEADER_LEN: usize = 64;
const PHDR_LEN: usize = 56;

/// Why a file is not a loadable 64-bit little-endian ELF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfError {
    /// No `\x7fELF` magic.
    NotElf,
    /// Not ELFCLASS64.
    Not64Bit,
    /// Not ELFDATA2LSB.
    NotLittleEndian,
    /// Shorter than the 64-byte ELF header.
    TruncatedHeader { len: usize },
    /// `e_phentsize` smaller than a 64-bit program header (56 bytes).
    BadProgramHeaderSize { size: u16 },
    /// The program header table does not lie inside the file.
    ProgramHeadersOutside,
    /// Program header `index` is `PT_LOAD` and its file bytes
    /// (`p_offset`, `p_filesz`) do not lie inside the file.
    SegmentOutside { index: usize },
    /// Program header `index` is `PT_LOAD` with more file bytes than memory.
    SegmentFileOverMemory { index: usize },
    /// Program header `index` is `PT_LOAD` and `p_paddr + p_memsz` or
    /// `p_vaddr + p_memsz` overflows.
    SegmentAddressOverflow { index: usize },
    /// No `PT_LOAD` program header.
    NoLoadSegment,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ElfError::NotElf => f.write_str("not an ELF file"),
            ElfError::Not64Bit => f.write_str("not a 64-bit ELF"),
            ElfError::NotLittleEndian => f.write_str("not a little-endian ELF"),
            ElfError::TruncatedHeader { len } => {
                write!(f, "truncated ELF header ({len} bytes)")
            }
            ElfError::BadProgramHeaderSize { size } => {
                write!(f, "bad program header size {size}")
            }
            ElfError::ProgramHeadersOutside => f.write_str("program headers outside the file"),
            ElfError::SegmentOutside { index } => write!(f, "segment {index} outside the file"),
            ElfError::SegmentFileOverMemory { index } => {
                write!(f, "segment {index} has more file bytes than memory")
            }
            ElfError::SegmentAddressOverflow { index } => {
                write!(f, "segment {index} ends beyond the 64-bit address space")
            }
            ElfError::NoLoadSegment => f.write_str("no loadable segment"),
        }
    }
}

/// A checked 64-bit little-endian ELF file.
#[derive(Debug, Clone, Copy)]
pub struct Elf<'a> {
    data: &'a [u8],
    kind: u16,
    machine: u16,
    entry: u64,
    phoff: usize,
    phentsize: usize,
    phnum: usize,
}

/// One program header, as read (any type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHeader {
    pub p_type: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub paddr: u64,
    pub filesz: u64,
    pub memsz: u64,
}

/// One `PT_LOAD` segment: `memsz` bytes at `paddr` (and `vaddr`), the first
/// of which are `data` (the rest zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Index of its program header.
    pub index: usize,
    pub paddr: u64,
    pub vaddr: u64,
    pub memsz: u64,
    /// The file bytes (`p_filesz` of them, at most `memsz`).
    pub data: &'a [u8],
}

impl<'a> Elf<'a> {
    /// Checks `data`: the ELF identification, the header, the program header
    /// table and every `PT_LOAD` segment (file bytes inside the file, no
    /// more of them than memory, addresses without overflow), and that there
    /// is at least one `PT_LOAD`.
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>, ElfError> {
        if data.get(..4) != Some(b"\x7fELF") {
            return Err(ElfError::NotElf);
        }
        if data.get(4) != Some(&2) {
            return Err(ElfError::Not64Bit);
        }
        if data.get(5) != Some(&1) {
            return Err(ElfError::NotLittleEndian);
        }
        if data.len() < ELF_HEADER_LEN {
            return Err(ElfError::TruncatedHeader { len: data.len() });
        }
        let short = ElfError::TruncatedHeader { len: data.len() };
        let kind = u16_at(data, 0x10).ok_or(short)?;
        let machine = u16_at(data, 0x12).ok_or(short)?;
        let entry = u64_at(data, 0x18).ok_or(short)?;
        let phoff = u64_at(data, 0x20).ok_or(short)?;
        let phentsize = u16_at(data, 0x36).ok_or(short)?;
        let phnum = u16_at(data, 0x38).ok_or(short)?;
        if (phentsize as usize) < PHDR_LEN {
            return Err(ElfError::BadProgramHeaderSize { size: phentsize });
        }
        let table_end = usize::try_from(phoff).ok().and_then(|off| {
            (phentsize as usize)
                .checked_mul(phnum as usize)
                .and_then(|len| off.checked_add(len))
        });
        match table_end {
            Some(end) if end <= data.len() => {}
            _ => return Err(ElfError::ProgramHeadersOutside),
        }
        let elf = Elf {
            data,
            kind,
            machine,
            entry,
            phoff: phoff as usize,
            phentsize: phentsize as usize,
            phnum: phnum as usize,
        };
        let mut loads = 0;
        for index in 0..elf.phnum {
            let ph = elf
                .program_header(index)
                .ok_or(ElfError::ProgramHeadersOutside)?;
            if ph.p_type != PT_LOAD {
                continue;
            }
            elf.segment_bytes(&ph)
                .ok_or(ElfError::SegmentOutside { index })?;
            if ph.filesz > ph.memsz {
                return Err(ElfError::SegmentFileOverMemory { index });
            }
            if ph.paddr.checked_add(ph.memsz).is_none() || ph.vaddr.checked_add(ph.memsz).is_none()
            {
                return Err(ElfError::SegmentAddressOverflow { index });
            }
            loads += 1;
        }
        if loads == 0 {
            return Err(ElfError::NoLoadSegment);
        }
        Ok(elf)
    }

    /// `e_type` ([`ET_EXEC`] for an executable).
    pub fn kind(&self) -> u16 {
        self.kind
    }

    /// `e_machine` ([`EM_AARCH64`], [`EM_LOONGARCH`], ...).
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// `e_entry`.
    pub fn entry(&self) -> u64 {
        self.entry
    }

    /// Number of program headers.
    pub fn program_header_count(&self) -> usize {
        self.phnum
    }

    /// Program header `index` (any type), `None` past the last one.
    pub fn program_header(&self, index: usize) -> Option<ProgramHeader> {
        if index >= self.phnum {
            return None;
        }
        let o = self.phoff.checked_add(index.checked_mul(self.phentsize)?)?;
        Some(ProgramHeader {
            p_type: u32_at(self.data, o)?,
            flags: u32_at(self.data, o.checked_add(4)?)?,
            offset: u64_at(self.data, o.checked_add(8)?)?,
            vaddr: u64_at(self.data, o.checked_add(16)?)?,
            paddr: u64_at(self.data, o.checked_add(24)?)?,
            filesz: u64_at(self.data, o.checked_add(32)?)?,
            memsz: u64_at(self.data, o.checked_add(40)?)?,
        })
    }

    /// Every program header, in file order.
    pub fn program_headers(&self) -> impl Iterator<Item = ProgramHeader> + '_ {
        (0..self.phnum).filter_map(|i| self.program_header(i))
    }

    /// Whether the file names a program interpreter (`PT_INTERP`): a
    /// dynamically linked executable.
    pub fn has_interpreter(&self) -> bool {
        self.program_headers().any(|ph| ph.p_type == PT_INTERP)
    }

    /// The `PT_LOAD` segments, in file order (all checked by [`Elf::parse`]).
    pub fn segments(&self) -> impl Iterator<Item = Segment<'a>> + '_ {
        (0..self.phnum).filter_map(move |index| {
            let ph = self.program_header(index)?;
            if ph.p_type != PT_LOAD {
                return None;
            }
            Some(Segment {
                index,
                paddr: ph.paddr,
                vaddr: ph.vaddr,
                memsz: ph.memsz,
                data: self.segment_bytes(&ph)?,
            })
        })
    }

    fn segment_bytes(&self, ph: &ProgramHeader) -> Option<&'a [u8]> {
        let start = usize::try_from(ph.offset).ok()?;
        let len = usize::try_from(ph.filesz).ok()?;
        self.data.get(start..start.checked_add(len)?)
    }
}

// ---------------------------------------------------------------------------
// EFI zboot (a compressed kernel wrapped in a small EFI application)
// ---------------------------------------------------------------------------

/// `"zimg"` at [`ZBOOT_MAGIC_OFFSET`] marks an EFI zboot image.
pub const ZBOOT_MAGIC: [u8; 4] = *b"zimg";
/// Where [`ZBOOT_MAGIC`] stands (after the DOS `MZ`).
pub const ZBOOT_MAGIC_OFFSET: usize = 4;
/// The compression name field: NUL-terminated ASCII in 0x18..0x38.
const ZBOOT_COMP_NAME: core::ops::Range<usize> = 0x18..0x38;

/// The header of an EFI zboot image (Linux's `EFI_ZBOOT`, as Debian ships
/// its loong64 `vmlinuz`): `MZ`, `zimg` at 4, the compressed payload's file
/// offset (u32 at 0x08) and size (u32 at 0x0C), the compression name at 0x18
/// (`zstd`, `gzip`, ...). The payload, once decompressed, is the kernel image
/// proper (for LoongArch a [`LoongArchImage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZbootImage<'a> {
    /// The compressed payload (checked to lie inside the file).
    pub payload: &'a [u8],
    /// The compression name, e.g. `"zstd"`.
    pub compression: &'a str,
}

/// Why a file is not a usable EFI zboot image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZbootError {
    /// Shorter than the 64-byte header.
    TooShort { len: usize },
    /// No `MZ` at 0 or no `zimg` at 4.
    NotZboot,
    /// The payload (offset, size) does not lie inside the file, or is empty.
    PayloadOutside { offset: u32, size: u32, len: usize },
    /// The compression name is not NUL-terminated printable ASCII.
    BadCompressionName,
}

impl fmt::Display for ZbootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ZbootError::TooShort { len } => {
                write!(f, "{len} bytes, shorter than an EFI zboot header (64 bytes)")
            }
            ZbootError::NotZboot => f.write_str("not an EFI zboot image (no MZ ... zimg)"),
            ZbootError::PayloadOutside { offset, size, len } => write!(
                f,
                "EFI zboot payload at {offset:#x} of {size:#x} bytes does not lie inside the {len:#x}-byte file"
            ),
            ZbootError::BadCompressionName => {
                f.write_str("EFI zboot compression name at 0x18 is not NUL-terminated ASCII")
            }
        }
    }
}

impl<'a> ZbootImage<'a> {
    /// Whether `data` starts like an EFI zboot image (`MZ`, `zimg` at 4).
    pub fn is_zboot(data: &[u8]) -> bool {
        data.starts_with(b"MZ")
            && data.get(ZBOOT_MAGIC_OFFSET..ZBOOT_MAGIC_OFFSET + 4) == Some(&ZBOOT_MAGIC[..])
    }

    /// Reads and checks the header of `data`.
    pub fn parse(data: &'a [u8]) -> Result<ZbootImage<'a>, ZbootError> {
        if data.len() < 64 {
            return Err(ZbootError::TooShort { len: data.len() });
        }
        if !Self::is_zboot(data) {
            return Err(ZbootError::NotZboot);
        }
        let too_short = ZbootError::TooShort { len: data.len() };
        let offset = u32_at(data, 0x08).ok_or(too_short)?;
        let size = u32_at(data, 0x0C).ok_or(too_short)?;
        let outside = ZbootError::PayloadOutside {
            offset,
            size,
            len: data.len(),
        };
        let start = offset as usize;
        let payload = start
            .checked_add(size as usize)
            .and_then(|end| data.get(start..end))
            .filter(|p| !p.is_empty() && start >= 64)
            .ok_or(outside)?;
        let field = data.get(ZBOOT_COMP_NAME).ok_or(too_short)?;
        let nul = field
            .iter()
            .position(|&b| b == 0)
            .ok_or(ZbootError::BadCompressionName)?;
        let name = &field[..nul];
        if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic()) {
            return Err(ZbootError::BadCompressionName);
        }
        let compression = core::str::from_utf8(name).map_err(|_| ZbootError::BadCompressionName)?;
        Ok(ZbootImage {
            payload,
            compression,
        })
    }
}

// ---------------------------------------------------------------------------
// LoongArch Linux image (the EFI application `vmlinux.efi`)
// ---------------------------------------------------------------------------

/// The magic at 0x38 of Linux's EFI-capable kernel images (LoongArch, and
/// the zboot wrapper): `LINUX_PE_MAGIC`.
pub const LINUX_PE_MAGIC: u32 = 0x8182_23cd;
/// PE/COFF `Machine` of LoongArch64.
pub const PE_MACHINE_LOONGARCH64: u16 = 0x6264;

/// The header of a LoongArch Linux kernel image (`vmlinux.efi`, a PE/COFF EFI
/// application; also what a zboot image unpacks to), little-endian:
///
/// | off | type | field |
/// |-----|------|-------|
/// | 0x00 | `MZ` | DOS signature |
/// | 0x08 | u64 | `kernel_entry`: the entry's physical address when loaded at `text_offset` |
/// | 0x10 | u64 | `kernel_asize`: bytes the kernel occupies once running |
/// | 0x18 | u64 | `text_offset`: load offset from the start of RAM |
/// | 0x38 | u32 | [`LINUX_PE_MAGIC`] |
/// | 0x3c | u32 | offset of the PE header (`PE\0\0`, machine 0x6264) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoongArchImage {
    /// Physical address of the entry (inside the image when it is loaded at `text_offset`).
    pub entry: u64,
    /// Bytes the kernel occupies from `text_offset` once running (>= the file).
    pub image_size: u64,
    /// Physical load address (offset from RAM start, which is 0 on LoongArch).
    pub text_offset: u64,
}

/// Why a file is not a LoongArch Linux image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoongArchImageError {
    /// Shorter than the 64-byte header.
    TooShort { len: usize },
    /// An EFI zboot image: it must be unpacked first.
    Zboot,
    /// No `MZ` at 0 or no [`LINUX_PE_MAGIC`] at 0x38.
    BadMagic,
    /// The PE header offset at 0x3c names no `PE\0\0` inside the file.
    NoPeHeader,
    /// The PE machine is not LoongArch64.
    WrongMachine { machine: u16 },
    /// `text_offset` is not 64 KiB-aligned, or `image_size` is smaller than
    /// the file, or the sum overflows.
    BadPlacement,
    /// The entry does not lie inside the loaded file.
    EntryOutside { entry: u64 },
}

impl fmt::Display for LoongArchImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LoongArchImageError::TooShort { len } => write!(
                f,
                "{len} bytes, shorter than a LoongArch Linux image header (64 bytes)"
            ),
            LoongArchImageError::Zboot => {
                f.write_str("an EFI zboot image (compressed): unpack its payload first")
            }
            LoongArchImageError::BadMagic => {
                f.write_str("no MZ at 0 and LINUX_PE_MAGIC (0x818223cd) at 0x38")
            }
            LoongArchImageError::NoPeHeader => {
                f.write_str("the PE header offset at 0x3c names no PE header in the file")
            }
            LoongArchImageError::WrongMachine { machine } => write!(
                f,
                "PE machine {machine:#x}, not LoongArch64 ({PE_MACHINE_LOONGARCH64:#x})"
            ),
            LoongArchImageError::BadPlacement => {
                f.write_str("text_offset not 64 KiB-aligned, or kernel_asize smaller than the file")
            }
            LoongArchImageError::EntryOutside { entry } => {
                write!(f, "kernel_entry {entry:#x} is not inside the loaded image")
            }
        }
    }
}

impl LoongArchImage {
    /// Reads and checks the header of `data` (the whole file).
    pub fn parse(data: &[u8]) -> Result<LoongArchImage, LoongArchImageError> {
        let len = data.len();
        if len < 64 {
            return Err(LoongArchImageError::TooShort { len });
        }
        if ZbootImage::is_zboot(data) {
            return Err(LoongArchImageError::Zboot);
        }
        if !data.starts_with(b"MZ") || u32_at(data, 0x38) != Some(LINUX_PE_MAGIC) {
            return Err(LoongArchImageError::BadMagic);
        }
        let too_short = LoongArchImageError::TooShort { len };
        let pe = u32_at(data, 0x3c).ok_or(too_short)? as usize;
        if data.get(pe..pe.checked_add(4).ok_or(LoongArchImageError::NoPeHeader)?)
            != Some(&b"PE\0\0"[..])
        {
            return Err(LoongArchImageError::NoPeHeader);
        }
        let machine = u16_at(data, pe + 4).ok_or(LoongArchImageError::NoPeHeader)?;
        if machine != PE_MACHINE_LOONGARCH64 {
            return Err(LoongArchImageError::WrongMachine { machine });
        }
        let entry = u64_at(data, 0x08).ok_or(too_short)? & ((1 << 48) - 1);
        let image_size = u64_at(data, 0x10).ok_or(too_short)?;
        let text_offset = u64_at(data, 0x18).ok_or(too_short)?;
        let fits = text_offset % 0x1_0000 == 0
            && image_size >= len as u64
            && text_offset
                .checked_add(image_size)
                .is_some_and(|end| end <= 1 << 48);
        if !fits {
            return Err(LoongArchImageError::BadPlacement);
        }
        if entry < text_offset || entry - text_offset >= len as u64 {
            return Err(LoongArchImageError::EntryOutside { entry });
        }
        Ok(LoongArchImage {
            entry,
            image_size,
            text_offset,
        })
    }
}

#[cfg(test)]
mod tests;
