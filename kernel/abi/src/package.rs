//! The kestrel package: the VM configuration and guest images packed into the
//! firmware by `make image CONFIG=file`, read by the hypervisor at boot.
//!
//! The host tool (`cargo xtask image --config FILE`) turns a TOML config into
//! a package with [`Writer`] (feature `alloc`); the firmware embeds it and the
//! hypervisor reads it in place with [`Package`], which never panics and
//! never trusts a number it has not checked against the buffer.
//!
//! # Format (version 4, all integers little-endian)
//!
//! ```text
//! offset  size                 what
//! 0       64                   header
//! 64      256 * vm_count       VM records, one per VM, in config order
//! ...     padding to 4 KiB     zeros
//! ...                          blobs (kernels, initrds, DTBs, command lines),
//!                              each starting on a 4 KiB boundary
//! ```
//!
//! Header (64 bytes):
//!
//! | off | type | field |
//! |-----|------|-------|
//! | 0 | `[u8; 8]` | magic `b"KSTRLPKG"` |
//! | 8 | u16 | format version ([`VERSION`]) |
//! | 10 | u16 | header size (64) |
//! | 12 | u16 | record size (256) |
//! | 14 | u16 | number of VMs (at most [`MAX_VMS`]) |
//! | 16 | u64 | total size of the package in bytes |
//! | 24 | u32 | flags (none defined: must be 0) |
//! | 28 | u32 | CRC-32 of the 64 header bytes with this field taken as 0 |
//! | 32 | u8 | FP/SIMD policy ([`FpPolicy`]) |
//! | 33 | u8 | maximum pCPU count the config was checked against (1..=64) |
//! | 34 | u8 | console mode ([`ConsoleMode`]) |
//! | 35 | u8 | reserved, 0 |
//! | 36 | u32 | hypervisor tick in Hz (0 = kestrel's default) |
//! | 40 | u32 | console scrollback per VM in bytes (0 = kestrel's default, at most [`MAX_SCROLLBACK`]) |
//! | 44 | 20 bytes | reserved, 0 |
//!
//! VM record (256 bytes):
//!
//! | off | type | field |
//! |-----|------|-------|
//! | 0 | `[u8; 32]` | name: `[a-z0-9_-]{1,32}`, NUL-padded |
//! | 32 | u64 | guest RAM in bytes, a multiple of 2 MiB |
//! | 40 | u64 | pCPU affinity mask (bit i = pCPU i; 0 = any pCPU) |
//! | 48 | u16 | vCPU count, 1..=[`MAX_VCPUS`] |
//! | 50 | u8 | guest kind ([`GuestKind`]) |
//! | 51 | u8 | console device ([`ConsoleKind`]) |
//! | 52 | u32 | flags: bit 0 = [`FLAG_PINNED`] (vCPU i owns the i-th CPU of the mask), bit 1 = [`FLAG_VIRTIO_CONSOLE`], bit 2 = [`FLAG_REBOOT_STOP`], bit 3 = [`FLAG_IDENTITY`] (RAM at IPA == PA), bit 4 = [`FLAG_PV_IPI_HIDDEN`] (the PV IPI feature hidden from the guest), bit 5 = [`FLAG_PV_TIME_HIDDEN`] (arm64 stolen time not offered), bit 6 = [`FLAG_PINNED_SHARED`] (with bit 0: vCPU i runs only on the i-th CPU of the mask, which other VMs may share) |
//! | 56 | 2 x u64 | kernel blob (offset, length); length > 0 |
//! | 72 | 2 x u64 | initrd blob (offset, length); (0, 0) = none |
//! | 88 | 2 x u64 | DTB blob (offset, length); (0, 0) = kestrel generates one |
//! | 104 | 2 x u64 | command line blob (offset, length), UTF-8, no NUL |
//! | 120 | u64 | kernel load offset from the start of guest RAM (2 MiB-aligned + text_offset) |
//! | 128 | u64 | entry point, offset from the kernel load address |
//! | 136 | u64 | kernel footprint: bytes the kernel occupies once running (>= its length) |
//! | 144 | u32 | CRC-32 of this VM's blobs (kernel, initrd, DTB, command line, device table, in that order) |
//! | 148 | u32 | CRC-32 of the 256 record bytes with this field taken as 0 |
//! | 152 | 2 x u64 | device table blob (offset, length); (0, 0) = no devices |
//! | 168 | u16 | arm64 SVE: the VM's maximum vector length in bits, a multiple of [`SVE_VL_STEP`] up to [`SVE_VL_MAX`]; 0 = SVE hidden (config `sve`, `sve_max_vl`) |
//! | 170 | 86 bytes | reserved, 0 |
//!
//! Device table: [`DEVICE_SIZE`]-byte entries, at most [`MAX_DEVICES`]:
//!
//! | off | type | field |
//! |-----|------|-------|
//! | 0 | u8 | kind: [`DEV_DISK`], [`DEV_NET`] or [`DEV_PASSTHROUGH`] |
//! | 1 | u8 | flags: disk [`DISK_READ_ONLY`]; net [`NET_MAC`] (the MAC field is set), [`NET_ALLOW_SPOOFING`]; passthrough 0 |
//! | 2 | `[u8; 6]` | net: MAC address (unicast); passthrough: byte 2 = number of SPIs (0..=[`MAX_PT_SPIS`]), the rest 0; disk: 0 |
//! | 8 | 2 x u64 | disk: image blob (offset, length), 4 KiB-aligned, whole 512-byte sectors; passthrough: host physical (base, size) of the MMIO region, both 4 KiB-aligned, size > 0; net: u32 broadcast budget in frames a second (0 = kestrel's default, at most [`MAX_BROADCAST_RATE`]), u16 learning quota in MACs (0 = no learning, at most [`MAX_LEARN`]), then 10 bytes 0 |
//! | 24 | `[u8; 32]` | net: network name (`[a-z0-9_-]{1,32}`, NUL-padded); passthrough: 8 x u32 SPI numbers (0..=987, INTID - 32), the unused ones 0; disk: 0 |
//! | 56 | u32 | disk: CRC-32 of the image; others: 0 |
//! | 60 | 4 bytes | reserved, 0 |
//!
//! Version 4 added the network ports' security settings (spoofing,
//! learning, broadcast budget); version 3 added the passthrough entries and
//! [`FLAG_IDENTITY`]. An older package is refused as a whole (rebuild it
//! with `make image`).
//!
//! Offsets are from the start of the package. Blobs lie after the record
//! table and inside the package; kernel, initrd and DTB start on a 4 KiB
//! boundary.
//!
//! # Failure granularity
//!
//! A bad header (magic, version, sizes, header CRC) refuses the whole package
//! ([`PackageError`]). Everything about one VM — its record CRC, its fields,
//! its blobs' bounds and CRC, whether its images fit its memory — is checked
//! per VM ([`VmError`]), so the hypervisor refuses that VM with a message
//! naming it, the field and the problem, and still starts the others.
//!
//! # Guest memory layout
//!
//! [`GuestLayout::compute`] is the one rule both the host tool (to reject a
//! config before writing anything) and the hypervisor (to place the images)
//! use: the kernel at its load offset, the DTB in the last 2 MiB of guest RAM,
//! the initrd right below the DTB, 4 KiB-aligned, and above the kernel's
//! footprint rounded up to 2 MiB.

use core::fmt;

/// The magic at offset 0.
pub const MAGIC: [u8; 8] = *b"KSTRLPKG";
/// The format version this module reads and writes.
pub const VERSION: u16 = 4;
/// Size of the header in bytes.
pub const HEADER_SIZE: usize = 64;
/// Size of one VM record in bytes.
pub const RECORD_SIZE: usize = 256;
/// Alignment of kernel, initrd and DTB blobs (and of the blob area).
pub const BLOB_ALIGN: u64 = 4096;
/// Most VMs in one package.
pub const MAX_VMS: usize = 64;
/// Most vCPUs in one VM.
pub const MAX_VCPUS: u16 = 16;
/// Most pCPUs an affinity mask can name.
pub const MAX_PCPUS: u8 = 64;
/// Length of the name field.
pub const NAME_LEN: usize = 32;
/// Guest RAM is a multiple of this (stage-2 block size, kernel alignment).
pub const MEMORY_ALIGN: u64 = 2 << 20;
/// The DTB lives in the last `DTB_SLOT` bytes of guest RAM; also its size limit
/// (Linux arm64 refuses a DTB over 2 MiB).
pub const DTB_SLOT: u64 = 2 << 20;
/// SVE vector lengths are multiples of this many bits (one quadword).
pub const SVE_VL_STEP: u16 = 128;
/// The architecture's largest SVE vector length in bits.
pub const SVE_VL_MAX: u16 = 2048;
/// Record flag: pinned affinity.
pub const FLAG_PINNED: u32 = 1 << 0;
/// Record flag: the VM also gets a virtio console (`hvc0`) beside its UART.
pub const FLAG_VIRTIO_CONSOLE: u32 = 1 << 1;
/// Record flag: a reset request from the guest ends the VM instead of
/// restarting it (config `on_reboot = "stop"`).
pub const FLAG_REBOOT_STOP: u32 = 1 << 2;
/// Record flag: guest RAM at IPA == PA (for a passed-through device that
/// does DMA without an SMMU).
pub const FLAG_IDENTITY: u32 = 1 << 3;
/// Record flag: the PV IPI feature is hidden from the guest (config
/// `pv_ipi = false`): not advertised, and its hypercall refused, so the
/// guest sends IPIs the architectural way.
pub const FLAG_PV_IPI_HIDDEN: u32 = 1 << 4;
/// The VM is not offered arm64 paravirtual stolen time (config
/// `pv_time = false`): SMCCC says the PV time calls do not exist.
pub const FLAG_PV_TIME_HIDDEN: u32 = 1 << 5;
/// Record flag, with [`FLAG_PINNED`] only: the pinned vCPUs do not own
/// their pCPUs (config `exclusive = false`): other VMs may list them, and
/// their vCPUs share them with the pinned ones, which still never move.
pub const FLAG_PINNED_SHARED: u32 = 1 << 6;
/// Every record flag this version defines.
pub const FLAGS_KNOWN: u32 = FLAG_PINNED
    | FLAG_VIRTIO_CONSOLE
    | FLAG_REBOOT_STOP
    | FLAG_IDENTITY
    | FLAG_PV_IPI_HIDDEN
    | FLAG_PV_TIME_HIDDEN
    | FLAG_PINNED_SHARED;
/// Size of one device table entry.
pub const DEVICE_SIZE: usize = 64;
/// Most devices (disks, network ports and passthrough regions together)
/// one VM may have.
pub const MAX_DEVICES: usize = 8;
/// Disk images are whole sectors of this size.
pub const SECTOR_SIZE: u64 = 512;
/// Device kinds.
pub const DEV_DISK: u8 = 1;
pub const DEV_NET: u8 = 2;
pub const DEV_PASSTHROUGH: u8 = 3;
/// Most SPIs one passthrough region may bring.
pub const MAX_PT_SPIS: usize = 8;
/// The highest SPI number (INTID 1019).
pub const MAX_SPI: u32 = 987;
/// Passthrough regions are whole pages of this size.
pub const PT_PAGE: u64 = 4096;
/// Disk flag: the VM may not write it.
pub const DISK_READ_ONLY: u8 = 1 << 0;
/// Net flag: the entry names a MAC (else kestrel derives one).
pub const NET_MAC: u8 = 1 << 0;
/// Net flag: the switch forwards this port's frames whatever their source
/// MAC (config `allow_mac_spoofing = true`).
pub const NET_ALLOW_SPOOFING: u8 = 1 << 1;
/// Most MACs the switch learns for one port.
pub const MAX_LEARN: u16 = 256;
/// Highest broadcast budget of a port, frames a second.
pub const MAX_BROADCAST_RATE: u32 = 1_000_000;

/// FP/SIMD switching policy for the whole hypervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FpPolicy {
    /// kestrel's default (lazy).
    Default = 0,
    /// Save and restore on every vCPU switch.
    Eager = 1,
    /// Restore lazily on first use, save on vcpu_put.
    SaveOnPut = 2,
    /// Switch on first guest access, save only when another context needs the registers.
    Lazy = 3,
}

/// How kestrel's console shows the VMs' output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum ConsoleMode {
    /// kestrel's default (raw).
    #[default]
    Default = 0,
    /// The focused VM owns the terminal; its bytes pass untouched.
    Raw = 1,
    /// Every VM's output as tagged lines.
    Log = 2,
}

impl ConsoleMode {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => ConsoleMode::Default,
            1 => ConsoleMode::Raw,
            2 => ConsoleMode::Log,
            _ => return None,
        })
    }
    /// The config spelling.
    pub const fn name(self) -> &'static str {
        match self {
            ConsoleMode::Default => "default",
            ConsoleMode::Raw => "raw",
            ConsoleMode::Log => "log",
        }
    }
}

/// The largest console scrollback per VM a package may ask for.
pub const MAX_SCROLLBACK: u32 = 1 << 20;

impl FpPolicy {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => FpPolicy::Default,
            1 => FpPolicy::Eager,
            2 => FpPolicy::SaveOnPut,
            3 => FpPolicy::Lazy,
            _ => return None,
        })
    }
    /// The config spelling.
    pub const fn name(self) -> &'static str {
        match self {
            FpPolicy::Default => "default",
            FpPolicy::Eager => "eager",
            FpPolicy::SaveOnPut => "save-on-put",
            FpPolicy::Lazy => "lazy",
        }
    }
}

/// What the kernel blob is and how it boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GuestKind {
    /// arm64 Linux `Image` (header magic `ARM\x64` at 0x38): x0 = DTB, EL1h, MMU off.
    LinuxArm64Image = 1,
    /// LoongArch Linux ELF (`vmlinux`/`vmlinux.efi`'s ELF): loaded by program headers.
    LinuxLoongArchElf = 2,
    /// A raw binary test guest: copied to the load offset, entered at the entry offset.
    TestRaw = 3,
    /// An ELF test guest: loaded by program headers.
    TestElf = 4,
    /// LoongArch Linux image (`vmlinux.efi`, `image::LoongArchImage`; the
    /// tool unpacks a zboot `vmlinuz` to it): copied to its `text_offset`,
    /// entered at `kernel_entry` with the EFI boot protocol.
    LinuxLoongArchImage = 5,
    /// 32-bit ARM Linux `zImage` (magic `0x016F2818` at 0x24,
    /// `image::ZImage`) for an arm64 VM whose EL1 is AArch32: r0 = 0,
    /// r1 = `0xFFFF_FFFF`, r2 = DTB, SVC mode, MMU off.
    LinuxArm32ZImage = 6,
    /// A raw AArch32 test guest on arm64 (EL1 in AArch32): copied to the
    /// load offset, entered in SVC mode (A32) at the entry offset with the
    /// registers of [`GuestKind::LinuxArm32ZImage`].
    TestRaw32 = 7,
}

impl GuestKind {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => GuestKind::LinuxArm64Image,
            2 => GuestKind::LinuxLoongArchElf,
            3 => GuestKind::TestRaw,
            4 => GuestKind::TestElf,
            5 => GuestKind::LinuxLoongArchImage,
            6 => GuestKind::LinuxArm32ZImage,
            7 => GuestKind::TestRaw32,
            _ => return None,
        })
    }
    pub const fn name(self) -> &'static str {
        match self {
            GuestKind::LinuxArm64Image => "linux (arm64 Image)",
            GuestKind::LinuxLoongArchElf => "linux (LoongArch ELF)",
            GuestKind::TestRaw => "test-guest (raw binary)",
            GuestKind::TestElf => "test-guest (ELF)",
            GuestKind::LinuxLoongArchImage => "linux (LoongArch EFI image)",
            GuestKind::LinuxArm32ZImage => "linux (32-bit ARM zImage, AArch32)",
            GuestKind::TestRaw32 => "test-guest (raw binary, AArch32)",
        }
    }
    /// Whether the guest's EL1 runs in AArch32 state (an arm64 VM with
    /// HCR_EL2.RW clear).
    pub const fn is_aarch32(self) -> bool {
        matches!(self, GuestKind::LinuxArm32ZImage | GuestKind::TestRaw32)
    }
    /// Whether the guest is Linux (wants a DTB and the Linux boot protocol).
    pub const fn is_linux(self) -> bool {
        matches!(
            self,
            GuestKind::LinuxArm64Image
                | GuestKind::LinuxLoongArchElf
                | GuestKind::LinuxLoongArchImage
                | GuestKind::LinuxArm32ZImage
        )
    }
}

/// The console device the guest is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ConsoleKind {
    /// Arm PL011.
    Pl011 = 1,
    /// NS16550-compatible.
    Ns16550 = 2,
}

impl ConsoleKind {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => ConsoleKind::Pl011,
            2 => ConsoleKind::Ns16550,
            _ => return None,
        })
    }
    pub const fn name(self) -> &'static str {
        match self {
            ConsoleKind::Pl011 => "pl011",
            ConsoleKind::Ns16550 => "ns16550",
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib's `crc32`.
pub fn crc32(data: &[u8]) -> u32 {
    crc32_update(0, data)
}

/// Continues a CRC-32: `crc32_update(crc32(a), b) == crc32(a ++ b)`.
///
/// Slicing by 8 (eight bytes per step through eight tables): the
/// hypervisor checks every VM's images at boot, tens of MiB, so this is on
/// the path from power-on to the first guest instruction.
pub fn crc32_update(crc: u32, data: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut c = !crc;
    let mut chunks = data.chunks_exact(8);
    for ch in &mut chunks {
        let lo = u32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]) ^ c;
        let hi = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]);
        c = t[7][(lo & 0xFF) as usize]
            ^ t[6][((lo >> 8) & 0xFF) as usize]
            ^ t[5][((lo >> 16) & 0xFF) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xFF) as usize]
            ^ t[2][((hi >> 8) & 0xFF) as usize]
            ^ t[1][((hi >> 16) & 0xFF) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        c = t[0][((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// `CRC_TABLES[0]` is the byte-at-a-time table of the reflected polynomial
/// 0xEDB88320; `CRC_TABLES[k][i]` is the CRC of byte `i` followed by `k`
/// zero bytes.
static CRC_TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let p = t[k - 1][i];
            t[k][i] = (p >> 8) ^ t[0][(p & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// Why the whole package was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackageError {
    /// Shorter than a header.
    Truncated { len: usize },
    /// The first 8 bytes are not [`MAGIC`].
    BadMagic,
    /// A version this reader does not know.
    UnsupportedVersion { found: u16 },
    /// Header or record size differs from this version's.
    BadLayout { header_size: u16, record_size: u16 },
    /// More VMs than [`MAX_VMS`].
    TooManyVms { count: u16 },
    /// The header's total size is smaller than the header and records, or
    /// larger than the buffer.
    BadTotalSize { total: u64, buffer: usize },
    /// The header CRC does not match.
    HeaderChecksum { stored: u32, computed: u32 },
    /// A header field out of range.
    BadField { field: &'static str, value: u64 },
}

impl fmt::Display for PackageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PackageError::Truncated { len } => {
                write!(f, "package truncated: {len} bytes, the header alone is {HEADER_SIZE}")
            }
            PackageError::BadMagic => f.write_str("not a kestrel package (bad magic, want \"KSTRLPKG\")"),
            PackageError::UnsupportedVersion { found } => {
                write!(
                    f,
                    "package version {found} is not supported (this kestrel reads version {VERSION}): \
                     rebuild the image from its config with this kestrel (`make image`)"
                )
            }
            PackageError::BadLayout { header_size, record_size } => write!(
                f,
                "package header says header {header_size} / record {record_size} bytes, \
                 version {VERSION} has {HEADER_SIZE} / {RECORD_SIZE}"
            ),
            PackageError::TooManyVms { count } => write!(f, "package lists {count} VMs, at most {MAX_VMS} allowed"),
            PackageError::BadTotalSize { total, buffer } => write!(
                f,
                "package total size {total} is inconsistent (buffer {buffer} bytes, header + records need more)"
            ),
            PackageError::HeaderChecksum { stored, computed } => write!(
                f,
                "package header is corrupt: checksum {stored:#010x} stored, {computed:#010x} computed"
            ),
            PackageError::BadField { field, value } => {
                write!(f, "package header field {field} has an invalid value {value:#x}")
            }
        }
    }
}

/// A field of a VM record, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Record,
    Name,
    Memory,
    Cpus,
    Vcpus,
    Kind,
    Console,
    Flags,
    Kernel,
    Initrd,
    Dtb,
    Cmdline,
    LoadOffset,
    EntryOffset,
    KernelFootprint,
    Data,
    Reserved,
    /// The SVE vector length.
    Sve,
    /// The device table, or a disk / network entry in it.
    Devices,
    Disk,
    Net,
    Passthrough,
}

impl Field {
    /// The name used in error messages (matches the config key where there is one).
    pub const fn name(self) -> &'static str {
        match self {
            Field::Record => "record",
            Field::Name => "name",
            Field::Memory => "memory",
            Field::Cpus => "cpus",
            Field::Vcpus => "vcpus",
            Field::Kind => "kind",
            Field::Console => "console",
            Field::Flags => "flags",
            Field::Kernel => "kernel",
            Field::Initrd => "initrd",
            Field::Dtb => "dtb",
            Field::Cmdline => "cmdline",
            Field::LoadOffset => "load offset",
            Field::EntryOffset => "entry offset",
            Field::KernelFootprint => "kernel footprint",
            Field::Data => "data",
            Field::Reserved => "reserved bytes",
            Field::Sve => "SVE vector length",
            Field::Devices => "devices",
            Field::Disk => "disk",
            Field::Net => "net",
            Field::Passthrough => "passthrough",
        }
    }
}

/// What is wrong with a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The record lies outside the package (a bad record count).
    RecordOutOfBounds,
    /// A CRC mismatch.
    Checksum { stored: u32, computed: u32 },
    /// Must not be zero / empty.
    Zero,
    /// Above the allowed maximum.
    TooLarge { value: u64, max: u64 },
    /// Not a multiple of `align`.
    Misaligned { value: u64, align: u64 },
    /// A value this version does not define.
    Unknown { value: u64 },
    /// Not UTF-8, or bytes outside the allowed set.
    BadText,
    /// A blob (offset, length) outside the package or over the record table.
    OutOfBounds { offset: u64, len: u64, limit: u64 },
    /// Bits set that must be clear.
    NonZero,
    /// The images do not fit the guest RAM: `need` bytes, `have` bytes.
    DoesNotFit { need: u64, have: u64 },
    /// Pinned with a mask whose CPU count differs from the vCPU count.
    PinnedMismatch { vcpus: u16, cpus: u32 },
    /// The entry point lies outside the kernel image.
    EntryOutsideKernel { entry: u64, len: u64 },
    /// A value listed twice.
    Duplicate { value: u64 },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Problem::RecordOutOfBounds => f.write_str("record lies outside the package"),
            Problem::Checksum { stored, computed } => {
                write!(f, "corrupt: checksum {stored:#010x} stored, {computed:#010x} computed")
            }
            Problem::Zero => f.write_str("must not be zero or empty"),
            Problem::TooLarge { value, max } => write!(f, "{value} is above the maximum {max}"),
            Problem::Misaligned { value, align } => write!(f, "{value:#x} is not a multiple of {align:#x}"),
            Problem::Unknown { value } => write!(f, "unknown value {value}"),
            Problem::BadText => f.write_str("not valid text (name: [a-z0-9_-], NUL-padded; command line: UTF-8 without NUL)"),
            Problem::OutOfBounds { offset, len, limit } => write!(
                f,
                "blob at {offset:#x}, {len:#x} bytes, lies outside the blob area (package is {limit:#x} bytes)"
            ),
            Problem::NonZero => f.write_str("reserved bits or bytes are set"),
            Problem::DoesNotFit { need, have } => write!(
                f,
                "images do not fit guest memory: {need:#x} bytes needed, {have:#x} available"
            ),
            Problem::PinnedMismatch { vcpus, cpus } => {
                write!(f, "pinned VM with {vcpus} vCPUs names {cpus} pCPUs (need one per vCPU)")
            }
            Problem::EntryOutsideKernel { entry, len } => {
                write!(f, "entry offset {entry:#x} is outside the {len:#x}-byte kernel")
            }
            Problem::Duplicate { value } => write!(f, "{value} is listed twice"),
        }
    }
}

/// Why one VM record was refused; the other VMs are unaffected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmError {
    /// Index of the record in the package.
    pub index: usize,
    /// The record's name bytes as stored (may be garbage: printed escaped).
    pub name: [u8; NAME_LEN],
    pub field: Field,
    pub problem: Problem,
}

impl VmError {
    /// The name, when it is valid.
    pub fn name_str(&self) -> Option<&str> {
        parse_name(&self.name)
    }
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vm[{}]", self.index)?;
        match self.name_str() {
            Some(n) => write!(f, " \"{n}\"")?,
            None => {
                // Unknown bytes: print them escaped so a corrupt name cannot
                // inject control characters into the console.
                f.write_str(" (name ")?;
                let end = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
                for &b in &self.name[..end] {
                    if b.is_ascii_graphic() {
                        write!(f, "{}", b as char)?;
                    } else {
                        write!(f, "\\x{b:02x}")?;
                    }
                }
                f.write_str(")")?;
            }
        }
        write!(f, ": {}: {}", self.field.name(), self.problem)
    }
}

/// Settings for the hypervisor itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HypervisorSettings {
    pub fp_policy: FpPolicy,
    /// Highest pCPU count the config was checked against.
    pub max_cpus: u8,
    /// Tick in Hz; 0 = kestrel's default.
    pub tick_hz: u32,
    /// How the console shows the VMs' output.
    pub console: ConsoleMode,
    /// Console scrollback per VM in bytes; 0 = kestrel's default.
    pub scrollback: u32,
}

impl Default for HypervisorSettings {
    fn default() -> Self {
        HypervisorSettings {
            fp_policy: FpPolicy::Default,
            max_cpus: 16,
            tick_hz: 0,
            console: ConsoleMode::Default,
            scrollback: 0,
        }
    }
}

/// pCPU affinity of a VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Affinity {
    /// Bit i = pCPU i. 0 = any pCPU kestrel chooses.
    pub mask: u64,
    /// vCPU i is pinned to the i-th set bit of `mask` (counting from bit 0),
    /// and owns it (unless `shared`).
    pub pinned: bool,
    /// With `pinned`: the pCPUs are not owned; other VMs' vCPUs may share
    /// them ([`FLAG_PINNED_SHARED`]).
    pub shared: bool,
}

impl Affinity {
    /// The pCPU vCPU `vcpu` is pinned to, if pinned.
    pub fn pinned_cpu(&self, vcpu: u16) -> Option<u32> {
        if !self.pinned {
            return None;
        }
        let mut m = self.mask;
        for _ in 0..vcpu {
            m &= m.checked_sub(1)?;
        }
        (m != 0).then(|| m.trailing_zeros())
    }
}

/// Where a VM's images go, as offsets from the start of its guest RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestLayout {
    /// Kernel load offset.
    pub kernel: u64,
    /// Kernel footprint in bytes (file size, or the Image header's image_size).
    pub kernel_size: u64,
    /// Initrd offset (meaningful when `initrd_size > 0`).
    pub initrd: u64,
    pub initrd_size: u64,
    /// DTB offset: the start of the last 2 MiB of RAM.
    pub dtb: u64,
}

impl GuestLayout {
    /// Places a kernel (`kernel_footprint` bytes at `load_offset`), an initrd
    /// and the DTB slot in `memory` bytes of guest RAM; `Err` when they do not
    /// fit, with the bytes needed and available.
    pub fn compute(
        memory: u64,
        load_offset: u64,
        kernel_footprint: u64,
        initrd_len: u64,
    ) -> Result<GuestLayout, Problem> {
        const MB2: u64 = MEMORY_ALIGN;
        let too_big = Problem::DoesNotFit {
            need: u64::MAX,
            have: memory,
        };
        let kernel_end = load_offset.checked_add(kernel_footprint).ok_or(too_big)?;
        let kernel_end_2m = kernel_end.checked_add(MB2 - 1).ok_or(too_big)? & !(MB2 - 1);
        let initrd_aligned =
            initrd_len.checked_add(BLOB_ALIGN - 1).ok_or(too_big)? & !(BLOB_ALIGN - 1);
        let need = kernel_end_2m
            .checked_add(initrd_aligned)
            .and_then(|n| n.checked_add(DTB_SLOT))
            .ok_or(too_big)?;
        if need > memory {
            return Err(Problem::DoesNotFit { need, have: memory });
        }
        let dtb = (memory - DTB_SLOT) & !(BLOB_ALIGN - 1);
        Ok(GuestLayout {
            kernel: load_offset,
            kernel_size: kernel_footprint,
            initrd: dtb - initrd_aligned,
            initrd_size: initrd_len,
            dtb,
        })
    }
}

/// arm64 guest RAM base when it is not identity-mapped.
pub const ARM64_GUEST_RAM: u64 = 0x4000_0000;
/// The guest physical range kestrel's own emulated arm64 devices may use
/// (GIC distributor from `0x0800_0000`, redistributors / CPU interface,
/// the UART at `0x0900_0000`), below the virtio-mmio transports.
pub const ARM64_GUEST_DEVICES: (u64, u64) = (0x0800_0000, 0x0a00_0000);
/// The first virtio-mmio transport and the stride between them.
pub const ARM64_GUEST_VIRTIO: (u64, u64) = (0x0a00_0000, 0x200);

/// Why a passthrough region `[base, end)` (mapped at IPA == PA) cannot sit
/// in an arm64 guest's physical map with `virtio_slots` virtio transports
/// and RAM at `ram` (start, end): it overlaps one of kestrel's emulated
/// devices, a virtio transport or RAM. The one rule the config tool and
/// the hypervisor both apply.
pub fn arm64_guest_clash(
    base: u64,
    end: u64,
    virtio_slots: usize,
    ram: (u64, u64),
) -> Option<&'static str> {
    let overlaps = |(s, e): (u64, u64)| base < e && s < end;
    let virtio_end = ARM64_GUEST_VIRTIO.0 + virtio_slots as u64 * ARM64_GUEST_VIRTIO.1;
    if overlaps(ARM64_GUEST_DEVICES) {
        Some("overlaps the guest's GIC or UART (0x8000000-0xa000000)")
    } else if virtio_slots > 0 && overlaps((ARM64_GUEST_VIRTIO.0, virtio_end)) {
        Some("overlaps the guest's virtio-mmio transports (from 0xa000000, 0x200 each)")
    } else if overlaps(ram) {
        Some("overlaps the guest's RAM")
    } else {
        None
    }
}

/// One validated VM: every slice is inside the package and checksummed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmRecord<'a> {
    pub index: usize,
    pub name: &'a str,
    pub memory: u64,
    pub vcpus: u16,
    pub affinity: Affinity,
    pub kind: GuestKind,
    pub console: ConsoleKind,
    pub kernel: &'a [u8],
    pub initrd: Option<&'a [u8]>,
    /// A DTB from the config; `None` = kestrel generates one.
    pub dtb: Option<&'a [u8]>,
    pub cmdline: &'a str,
    pub load_offset: u64,
    pub entry_offset: u64,
    pub kernel_footprint: u64,
    /// Where the images go in guest RAM.
    pub layout: GuestLayout,
    /// A virtio console beside the UART.
    pub virtio_console: bool,
    /// A guest reset ends the VM (else it restarts).
    pub reboot_stop: bool,
    /// Disks and network ports, in config order.
    pub devices: Devices<'a>,
    /// Host devices passed through, in config order.
    pub passthrough: Passthroughs,
    /// RAM at IPA == PA ([`FLAG_IDENTITY`]).
    pub identity: bool,
    /// The PV IPI feature hidden from the guest ([`FLAG_PV_IPI_HIDDEN`]).
    pub pv_ipi_hidden: bool,
    /// arm64 stolen time not offered ([`FLAG_PV_TIME_HIDDEN`]).
    pub pv_time_hidden: bool,
    /// arm64 SVE: the VM's maximum vector length in bits (0: SVE hidden).
    pub sve_vl: u16,
}

/// A host MMIO region and its SPIs, given to one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passthrough {
    /// Host physical base (4 KiB-aligned).
    pub base: u64,
    /// Bytes (a positive multiple of 4 KiB; base + size does not wrap).
    pub size: u64,
    spis: [u32; MAX_PT_SPIS],
    nr_spis: u8,
}

impl Passthrough {
    /// A region with `spis` (at most [`MAX_PT_SPIS`]; more are cut).
    pub fn new(base: u64, size: u64, spis: &[u32]) -> Passthrough {
        let mut p = Passthrough {
            base,
            size,
            spis: [0; MAX_PT_SPIS],
            nr_spis: spis.len().min(MAX_PT_SPIS) as u8,
        };
        for (d, &s) in p.spis.iter_mut().zip(spis) {
            *d = s;
        }
        p
    }

    /// The SPI numbers (INTID - 32).
    pub fn spis(&self) -> &[u32] {
        &self.spis[..self.nr_spis as usize]
    }

    /// The region's end (exclusive).
    pub fn end(&self) -> u64 {
        self.base + self.size
    }
}

/// A VM's passthrough regions (at most [`MAX_DEVICES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passthroughs {
    list: [Option<Passthrough>; MAX_DEVICES],
}

impl Passthroughs {
    pub const NONE: Passthroughs = Passthroughs {
        list: [None; MAX_DEVICES],
    };

    pub fn iter(&self) -> impl Iterator<Item = Passthrough> + '_ {
        self.list.iter().flatten().copied()
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.list[0].is_none()
    }

    /// Adds `p`; false when full.
    pub fn push(&mut self, p: Passthrough) -> bool {
        match self.list.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(p);
                true
            }
            None => false,
        }
    }
}

/// One device of a VM, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device<'a> {
    Disk {
        image: &'a [u8],
        read_only: bool,
    },
    Net {
        network: &'a str,
        /// `None`: kestrel derives one from the network and VM names.
        mac: Option<[u8; 6]>,
        /// Frames with a source MAC not the port's are forwarded.
        allow_mac_spoofing: bool,
        /// MACs the switch learns from the port (0: none), at most
        /// [`MAX_LEARN`].
        learn: u16,
        /// Broadcast and multicast frames a second (0: kestrel's default),
        /// at most [`MAX_BROADCAST_RATE`].
        broadcast_rate: u32,
    },
}

/// A VM's devices (at most [`MAX_DEVICES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Devices<'a> {
    list: [Option<Device<'a>>; MAX_DEVICES],
}

impl<'a> Devices<'a> {
    pub const NONE: Devices<'static> = Devices {
        list: [None; MAX_DEVICES],
    };

    pub fn iter(&self) -> impl Iterator<Item = Device<'a>> + '_ {
        self.list.iter().flatten().copied()
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.list[0].is_none()
    }
}

fn le16(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(off..off + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

fn le32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// CRC of `bytes` with the 4 bytes at `skip` read as zero.
fn crc_skipping(bytes: &[u8], skip: usize) -> u32 {
    let (a, rest) = bytes.split_at(skip.min(bytes.len()));
    let c = crc32_update(0, a);
    let c = crc32_update(c, &[0u8; 4][..rest.len().min(4)]);
    crc32_update(c, rest.get(4..).unwrap_or(&[]))
}

fn mac_u64(m: [u8; 6]) -> u64 {
    m.iter().fold(0, |a, &b| (a << 8) | u64::from(b))
}

/// `name` if it is 1..=32 bytes of `[a-z0-9_-]`, NUL-padded.
pub fn parse_name(raw: &[u8; NAME_LEN]) -> Option<&str> {
    let len = raw.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
    if len == 0 || raw[len..].iter().any(|&b| b != 0) {
        return None;
    }
    let name = &raw[..len];
    if !name.iter().all(|&b| is_name_byte(b)) {
        return None;
    }
    core::str::from_utf8(name).ok()
}

/// Bytes allowed in a VM name.
pub const fn is_name_byte(b: u8) -> bool {
    matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')
}

// Record field offsets.
const R_NAME: usize = 0;
const R_MEMORY: usize = 32;
const R_MASK: usize = 40;
const R_VCPUS: usize = 48;
const R_KIND: usize = 50;
const R_CONSOLE: usize = 51;
const R_FLAGS: usize = 52;
const R_KERNEL: usize = 56;
const R_INITRD: usize = 72;
const R_DTB: usize = 88;
const R_CMDLINE: usize = 104;
const R_LOAD: usize = 120;
const R_ENTRY: usize = 128;
const R_FOOTPRINT: usize = 136;
const R_DATA_CRC: usize = 144;
const R_RECORD_CRC: usize = 148;
const R_DEVICES: usize = 152;
const R_SVE_VL: usize = 168;
const R_RESERVED: usize = 170;

// Device entry field offsets.
const D_KIND: usize = 0;
const D_FLAGS: usize = 1;
const D_MAC: usize = 2;
const D_BLOB: usize = 8;
const D_NETWORK: usize = 24;
const D_CRC: usize = 56;
const D_RESERVED: usize = 60;

// Header field offsets.
const H_VERSION: usize = 8;
const H_HEADER_SIZE: usize = 10;
const H_RECORD_SIZE: usize = 12;
const H_COUNT: usize = 14;
const H_TOTAL: usize = 16;
const H_FLAGS: usize = 24;
const H_CRC: usize = 28;
const H_FP: usize = 32;
const H_MAX_CPUS: usize = 33;
const H_CONSOLE: usize = 34;
const H_RESERVED8: usize = 35;
const H_TICK: usize = 36;
const H_SCROLLBACK: usize = 40;
const H_RESERVED: usize = 44;

/// Offset of the first blob: header and records rounded up to [`BLOB_ALIGN`].
pub const fn blob_area_start(vm_count: usize) -> u64 {
    let end = (HEADER_SIZE + vm_count * RECORD_SIZE) as u64;
    (end + BLOB_ALIGN - 1) & !(BLOB_ALIGN - 1)
}

/// A package whose header has been checked, read in place.
#[derive(Clone, Copy, Debug)]
pub struct Package<'a> {
    buf: &'a [u8],
    vm_count: usize,
    settings: HypervisorSettings,
}

impl<'a> Package<'a> {
    /// Checks the header (magic, version, sizes, CRC). VM records are checked
    /// one at a time by [`Package::vm`].
    pub fn parse(buf: &'a [u8]) -> Result<Package<'a>, PackageError> {
        let header = buf
            .get(..HEADER_SIZE)
            .ok_or(PackageError::Truncated { len: buf.len() })?;
        if header[..8] != MAGIC {
            return Err(PackageError::BadMagic);
        }
        let version = le16(header, H_VERSION);
        if version != VERSION {
            return Err(PackageError::UnsupportedVersion { found: version });
        }
        let (header_size, record_size) = (le16(header, H_HEADER_SIZE), le16(header, H_RECORD_SIZE));
        if header_size as usize != HEADER_SIZE || record_size as usize != RECORD_SIZE {
            return Err(PackageError::BadLayout {
                header_size,
                record_size,
            });
        }
        let stored = le32(header, H_CRC);
        let computed = crc_skipping(header, H_CRC);
        if stored != computed {
            return Err(PackageError::HeaderChecksum { stored, computed });
        }
        let count = le16(header, H_COUNT);
        if count as usize > MAX_VMS {
            return Err(PackageError::TooManyVms { count });
        }
        let total = le64(header, H_TOTAL);
        let table_end = (HEADER_SIZE + count as usize * RECORD_SIZE) as u64;
        if total > buf.len() as u64 || total < table_end {
            return Err(PackageError::BadTotalSize {
                total,
                buffer: buf.len(),
            });
        }
        let flags = le32(header, H_FLAGS);
        if flags != 0 {
            return Err(PackageError::BadField {
                field: "flags",
                value: flags as u64,
            });
        }
        let fp = header[H_FP];
        let fp_policy = FpPolicy::from_u8(fp).ok_or(PackageError::BadField {
            field: "fp_policy",
            value: fp as u64,
        })?;
        let max_cpus = header[H_MAX_CPUS];
        if max_cpus == 0 || max_cpus > MAX_PCPUS {
            return Err(PackageError::BadField {
                field: "max_cpus",
                value: max_cpus as u64,
            });
        }
        let console = ConsoleMode::from_u8(header[H_CONSOLE]).ok_or(PackageError::BadField {
            field: "console",
            value: header[H_CONSOLE] as u64,
        })?;
        let scrollback = le32(header, H_SCROLLBACK);
        if scrollback > MAX_SCROLLBACK {
            return Err(PackageError::BadField {
                field: "scrollback",
                value: scrollback as u64,
            });
        }
        if header[H_RESERVED8] != 0 || header[H_RESERVED..].iter().any(|&b| b != 0) {
            return Err(PackageError::BadField {
                field: "reserved",
                value: 0,
            });
        }
        Ok(Package {
            // `total <= buf.len()` was checked above.
            buf: &buf[..total as usize],
            vm_count: count as usize,
            settings: HypervisorSettings {
                fp_policy,
                max_cpus,
                tick_hz: le32(header, H_TICK),
                console,
                scrollback,
            },
        })
    }

    /// The package bytes (`total size` long).
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Number of VM records (valid or not).
    pub fn vm_count(&self) -> usize {
        self.vm_count
    }

    /// The `[hypervisor]` settings.
    pub fn settings(&self) -> HypervisorSettings {
        self.settings
    }

    /// Validates and returns VM `index`. An `index` past the count gives
    /// [`Problem::RecordOutOfBounds`].
    pub fn vm(&self, index: usize) -> Result<VmRecord<'a>, VmError> {
        let start = index
            .checked_mul(RECORD_SIZE)
            .and_then(|o| o.checked_add(HEADER_SIZE))
            .filter(|_| index < self.vm_count);
        let rec = start.and_then(|s| self.buf.get(s..s + RECORD_SIZE));
        let mut name = [0u8; NAME_LEN];
        let Some(rec) = rec else {
            return Err(VmError {
                index,
                name,
                field: Field::Record,
                problem: Problem::RecordOutOfBounds,
            });
        };
        name.copy_from_slice(&rec[R_NAME..R_NAME + NAME_LEN]);
        let err = |field, problem| VmError {
            index,
            name,
            field,
            problem,
        };

        let stored = le32(rec, R_RECORD_CRC);
        let computed = crc_skipping(rec, R_RECORD_CRC);
        if stored != computed {
            return Err(err(Field::Record, Problem::Checksum { stored, computed }));
        }
        let name_bytes: &'a [u8; NAME_LEN] = rec[R_NAME..R_NAME + NAME_LEN]
            .try_into()
            .map_err(|_| err(Field::Name, Problem::BadText))?;
        let name_str = parse_name(name_bytes).ok_or(err(Field::Name, Problem::BadText))?;
        if rec[R_RESERVED..].iter().any(|&b| b != 0) {
            return Err(err(Field::Reserved, Problem::NonZero));
        }

        let sve_vl = le16(rec, R_SVE_VL);
        if sve_vl > SVE_VL_MAX {
            return Err(err(
                Field::Sve,
                Problem::TooLarge {
                    value: sve_vl.into(),
                    max: SVE_VL_MAX.into(),
                },
            ));
        }
        if !sve_vl.is_multiple_of(SVE_VL_STEP) {
            return Err(err(
                Field::Sve,
                Problem::Misaligned {
                    value: sve_vl.into(),
                    align: SVE_VL_STEP.into(),
                },
            ));
        }

        let vcpus = le16(rec, R_VCPUS);
        if vcpus == 0 {
            return Err(err(Field::Vcpus, Problem::Zero));
        }
        if vcpus > MAX_VCPUS {
            return Err(err(
                Field::Vcpus,
                Problem::TooLarge {
                    value: vcpus as u64,
                    max: MAX_VCPUS as u64,
                },
            ));
        }
        let memory = le64(rec, R_MEMORY);
        if memory == 0 {
            return Err(err(Field::Memory, Problem::Zero));
        }
        if !memory.is_multiple_of(MEMORY_ALIGN) {
            return Err(err(
                Field::Memory,
                Problem::Misaligned {
                    value: memory,
                    align: MEMORY_ALIGN,
                },
            ));
        }
        let kind = GuestKind::from_u8(rec[R_KIND]).ok_or(err(
            Field::Kind,
            Problem::Unknown {
                value: rec[R_KIND] as u64,
            },
        ))?;
        let console = ConsoleKind::from_u8(rec[R_CONSOLE]).ok_or(err(
            Field::Console,
            Problem::Unknown {
                value: rec[R_CONSOLE] as u64,
            },
        ))?;
        let flags = le32(rec, R_FLAGS);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(err(Field::Flags, Problem::NonZero));
        }
        let mask = le64(rec, R_MASK);
        let max_cpus = self.settings.max_cpus as u32;
        if max_cpus < 64 && mask >> max_cpus != 0 {
            return Err(err(
                Field::Cpus,
                Problem::TooLarge {
                    value: 63 - mask.leading_zeros() as u64,
                    max: max_cpus as u64 - 1,
                },
            ));
        }
        let pinned = flags & FLAG_PINNED != 0;
        let shared = flags & FLAG_PINNED_SHARED != 0;
        if shared && !pinned {
            return Err(err(
                Field::Flags,
                Problem::Unknown {
                    value: flags as u64,
                },
            ));
        }
        if pinned && mask.count_ones() != vcpus as u32 {
            return Err(err(
                Field::Cpus,
                Problem::PinnedMismatch {
                    vcpus,
                    cpus: mask.count_ones(),
                },
            ));
        }

        let blob = |field: Field, off: usize, aligned: bool| {
            self.blob_at(rec, off, aligned).map_err(|p| err(field, p))
        };
        let kernel =
            blob(Field::Kernel, R_KERNEL, true)?.ok_or(err(Field::Kernel, Problem::Zero))?;
        let initrd = blob(Field::Initrd, R_INITRD, true)?;
        let dtb = blob(Field::Dtb, R_DTB, true)?;
        let cmdline_bytes = blob(Field::Cmdline, R_CMDLINE, false)?.unwrap_or(&[]);
        let device_table = blob(Field::Devices, R_DEVICES, false)?;

        let stored = le32(rec, R_DATA_CRC);
        let mut computed = crc32_update(0, kernel);
        for b in [initrd, dtb, Some(cmdline_bytes), device_table]
            .into_iter()
            .flatten()
        {
            computed = crc32_update(computed, b);
        }
        if stored != computed {
            return Err(err(Field::Data, Problem::Checksum { stored, computed }));
        }
        let cmdline = core::str::from_utf8(cmdline_bytes)
            .ok()
            .filter(|s| !s.contains('\0'))
            .ok_or(err(Field::Cmdline, Problem::BadText))?;
        if let Some(d) = dtb {
            if d.len() as u64 > DTB_SLOT {
                return Err(err(
                    Field::Dtb,
                    Problem::TooLarge {
                        value: d.len() as u64,
                        max: DTB_SLOT,
                    },
                ));
            }
        }

        let load_offset = le64(rec, R_LOAD);
        if load_offset >= memory {
            return Err(err(
                Field::LoadOffset,
                Problem::TooLarge {
                    value: load_offset,
                    max: memory - 1,
                },
            ));
        }
        let kernel_footprint = le64(rec, R_FOOTPRINT);
        if kernel_footprint < kernel.len() as u64 {
            return Err(err(
                Field::KernelFootprint,
                Problem::DoesNotFit {
                    need: kernel.len() as u64,
                    have: kernel_footprint,
                },
            ));
        }
        let entry_offset = le64(rec, R_ENTRY);
        if entry_offset >= kernel_footprint {
            return Err(err(
                Field::EntryOffset,
                Problem::EntryOutsideKernel {
                    entry: entry_offset,
                    len: kernel_footprint,
                },
            ));
        }
        let layout = GuestLayout::compute(
            memory,
            load_offset,
            kernel_footprint,
            initrd.map_or(0, |i| i.len() as u64),
        )
        .map_err(|p| err(Field::Memory, p))?;
        let (devices, passthrough) = self.devices(device_table, &err)?;

        Ok(VmRecord {
            index,
            name: name_str,
            memory,
            vcpus,
            affinity: Affinity {
                mask,
                pinned,
                shared,
            },
            kind,
            console,
            kernel,
            initrd,
            dtb,
            cmdline,
            load_offset,
            entry_offset,
            kernel_footprint,
            layout,
            virtio_console: flags & FLAG_VIRTIO_CONSOLE != 0,
            reboot_stop: flags & FLAG_REBOOT_STOP != 0,
            devices,
            passthrough,
            identity: flags & FLAG_IDENTITY != 0,
            pv_ipi_hidden: flags & FLAG_PV_IPI_HIDDEN != 0,
            pv_time_hidden: flags & FLAG_PV_TIME_HIDDEN != 0,
            sve_vl,
        })
    }

    /// The blob `(offset, length)` stored at `at` in `bytes`, checked to lie
    /// in the blob area; `None` for (0, 0).
    fn blob_at(&self, bytes: &[u8], at: usize, aligned: bool) -> Result<Option<&'a [u8]>, Problem> {
        let (offset, len) = (le64(bytes, at), le64(bytes, at + 8));
        if len == 0 {
            return if offset == 0 {
                Ok(None)
            } else {
                Err(Problem::NonZero)
            };
        }
        if aligned && !offset.is_multiple_of(BLOB_ALIGN) {
            return Err(Problem::Misaligned {
                value: offset,
                align: BLOB_ALIGN,
            });
        }
        let limit = self.buf.len() as u64;
        let oob = Problem::OutOfBounds { offset, len, limit };
        let end = offset.checked_add(len).ok_or(oob)?;
        if offset < blob_area_start(self.vm_count) || end > limit {
            return Err(oob);
        }
        // Both bounds are <= buf.len(), so they fit usize.
        Ok(self.buf.get(offset as usize..end as usize))
    }

    /// The record's device table, every entry checked.
    fn devices(
        &self,
        table: Option<&'a [u8]>,
        err: &dyn Fn(Field, Problem) -> VmError,
    ) -> Result<(Devices<'a>, Passthroughs), VmError> {
        let mut out = Devices {
            list: [None; MAX_DEVICES],
        };
        let mut pt = Passthroughs::NONE;
        let Some(table) = table else {
            return Ok((out, pt));
        };
        if !table.len().is_multiple_of(DEVICE_SIZE) {
            return Err(err(
                Field::Devices,
                Problem::Misaligned {
                    value: table.len() as u64,
                    align: DEVICE_SIZE as u64,
                },
            ));
        }
        let n = table.len() / DEVICE_SIZE;
        if n > MAX_DEVICES {
            return Err(err(
                Field::Devices,
                Problem::TooLarge {
                    value: n as u64,
                    max: MAX_DEVICES as u64,
                },
            ));
        }
        let mut next = 0;
        for e in table.chunks_exact(DEVICE_SIZE) {
            if e[D_RESERVED..].iter().any(|&b| b != 0) {
                return Err(err(Field::Devices, Problem::NonZero));
            }
            let flags = e[D_FLAGS];
            let dev = match e[D_KIND] {
                DEV_PASSTHROUGH => {
                    pt.push(Self::passthrough(e, err)?);
                    continue;
                }
                DEV_DISK => {
                    let f = Field::Disk;
                    if flags & !DISK_READ_ONLY != 0
                        || e[D_MAC..D_BLOB].iter().any(|&b| b != 0)
                        || e[D_NETWORK..D_CRC].iter().any(|&b| b != 0)
                    {
                        return Err(err(f, Problem::NonZero));
                    }
                    let image = self
                        .blob_at(e, D_BLOB, true)
                        .map_err(|p| err(f, p))?
                        .ok_or(err(f, Problem::Zero))?;
                    if !(image.len() as u64).is_multiple_of(SECTOR_SIZE) {
                        return Err(err(
                            f,
                            Problem::Misaligned {
                                value: image.len() as u64,
                                align: SECTOR_SIZE,
                            },
                        ));
                    }
                    let (stored, computed) = (le32(e, D_CRC), crc32(image));
                    if stored != computed {
                        return Err(err(f, Problem::Checksum { stored, computed }));
                    }
                    Device::Disk {
                        image,
                        read_only: flags & DISK_READ_ONLY != 0,
                    }
                }
                DEV_NET => {
                    let f = Field::Net;
                    if flags & !(NET_MAC | NET_ALLOW_SPOOFING) != 0
                        || e[D_BLOB + 6..D_NETWORK].iter().any(|&b| b != 0)
                        || le32(e, D_CRC) != 0
                    {
                        return Err(err(f, Problem::NonZero));
                    }
                    let broadcast_rate = le32(e, D_BLOB);
                    if broadcast_rate > MAX_BROADCAST_RATE {
                        return Err(err(
                            f,
                            Problem::Unknown {
                                value: broadcast_rate.into(),
                            },
                        ));
                    }
                    let learn = le16(e, D_BLOB + 4);
                    if learn > MAX_LEARN {
                        return Err(err(
                            f,
                            Problem::Unknown {
                                value: learn.into(),
                            },
                        ));
                    }
                    let raw: &[u8; NAME_LEN] = e[D_NETWORK..D_CRC]
                        .try_into()
                        .map_err(|_| err(f, Problem::BadText))?;
                    let network = parse_name(raw).ok_or(err(f, Problem::BadText))?;
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&e[D_MAC..D_BLOB]);
                    let mac = if flags & NET_MAC != 0 {
                        if mac[0] & 1 != 0 || mac == [0; 6] {
                            return Err(err(
                                f,
                                Problem::Unknown {
                                    value: mac_u64(mac),
                                },
                            ));
                        }
                        Some(mac)
                    } else if mac != [0; 6] {
                        return Err(err(f, Problem::NonZero));
                    } else {
                        None
                    };
                    Device::Net {
                        network,
                        mac,
                        allow_mac_spoofing: flags & NET_ALLOW_SPOOFING != 0,
                        learn,
                        broadcast_rate,
                    }
                }
                k => return Err(err(Field::Devices, Problem::Unknown { value: k.into() })),
            };
            out.list[next] = Some(dev);
            next += 1;
        }
        Ok((out, pt))
    }

    /// One passthrough entry, checked.
    fn passthrough(
        e: &[u8],
        err: &dyn Fn(Field, Problem) -> VmError,
    ) -> Result<Passthrough, VmError> {
        let f = Field::Passthrough;
        let n = e[D_MAC] as usize;
        if e[D_FLAGS] != 0 || e[D_MAC + 1..D_BLOB].iter().any(|&b| b != 0) || le32(e, D_CRC) != 0 {
            return Err(err(f, Problem::NonZero));
        }
        if n > MAX_PT_SPIS {
            return Err(err(
                f,
                Problem::TooLarge {
                    value: n as u64,
                    max: MAX_PT_SPIS as u64,
                },
            ));
        }
        let (base, size) = (le64(e, D_BLOB), le64(e, D_BLOB + 8));
        if size == 0 {
            return Err(err(f, Problem::Zero));
        }
        for v in [base, size] {
            if !v.is_multiple_of(PT_PAGE) {
                return Err(err(
                    f,
                    Problem::Misaligned {
                        value: v,
                        align: PT_PAGE,
                    },
                ));
            }
        }
        if base.checked_add(size).is_none() {
            return Err(err(
                f,
                Problem::TooLarge {
                    value: size,
                    max: u64::MAX - base,
                },
            ));
        }
        let mut spis = [0u32; MAX_PT_SPIS];
        for (i, s) in spis.iter_mut().enumerate() {
            *s = le32(e, D_NETWORK + 4 * i);
            if i >= n && *s != 0 {
                return Err(err(f, Problem::NonZero));
            }
            if i < n && *s > MAX_SPI {
                return Err(err(
                    f,
                    Problem::TooLarge {
                        value: u64::from(*s),
                        max: u64::from(MAX_SPI),
                    },
                ));
            }
        }
        if let Some(i) = (0..n).find(|&i| spis[..i].contains(&spis[i])) {
            return Err(err(
                f,
                Problem::Duplicate {
                    value: u64::from(spis[i]),
                },
            ));
        }
        Ok(Passthrough::new(base, size, &spis[..n]))
    }

    /// Every VM in order, each validated on its own.
    pub fn vms(&self) -> impl Iterator<Item = Result<VmRecord<'a>, VmError>> + '_ {
        (0..self.vm_count).map(move |i| self.vm(i))
    }
}

#[cfg(any(feature = "alloc", test))]
pub use writer::{VmInput, Writer};

#[cfg(any(feature = "alloc", test))]
mod writer {
    extern crate alloc;
    use super::*;
    use alloc::vec::Vec;

    /// One VM to pack. The writer copies the slices.
    #[derive(Clone, Debug)]
    pub struct VmInput<'a> {
        pub name: &'a str,
        pub memory: u64,
        pub vcpus: u16,
        pub affinity: Affinity,
        pub kind: GuestKind,
        pub console: ConsoleKind,
        pub kernel: &'a [u8],
        pub initrd: Option<&'a [u8]>,
        pub dtb: Option<&'a [u8]>,
        pub cmdline: &'a str,
        pub load_offset: u64,
        pub entry_offset: u64,
        /// 0 = the kernel's length.
        pub kernel_footprint: u64,
        /// A virtio console beside the UART.
        pub virtio_console: bool,
        /// A guest reset ends the VM (config `on_reboot = "stop"`).
        pub reboot_stop: bool,
        /// Disks and network ports (at most [`MAX_DEVICES`] with the
        /// passthrough regions).
        pub devices: &'a [Device<'a>],
        /// Host devices passed through.
        pub passthrough: &'a [Passthrough],
        /// RAM at IPA == PA.
        pub identity: bool,
        /// The PV IPI feature hidden from the guest (config `pv_ipi = false`).
        pub pv_ipi_hidden: bool,
        /// arm64 stolen time not offered (config `pv_time = false`).
        pub pv_time_hidden: bool,
        /// arm64 SVE maximum vector length in bits (0: hidden; config
        /// `sve`, `sve_max_vl`).
        pub sve_vl: u16,
    }

    /// Builds a package. It does not validate VM contents beyond what it
    /// needs to lay them out: the config checker does that first, and the
    /// reader checks everything again at boot.
    #[derive(Clone, Debug, Default)]
    pub struct Writer<'a> {
        pub settings: HypervisorSettings,
        pub vms: Vec<VmInput<'a>>,
    }

    fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
        buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn align_vec(out: &mut Vec<u8>) {
        let pad = (BLOB_ALIGN as usize - out.len() % BLOB_ALIGN as usize) % BLOB_ALIGN as usize;
        out.resize(out.len() + pad, 0);
    }

    impl<'a> Writer<'a> {
        pub fn new(settings: HypervisorSettings) -> Self {
            Writer {
                settings,
                vms: Vec::new(),
            }
        }

        /// The package bytes. Panics if there are more than [`MAX_VMS`] VMs
        /// or a name is longer than [`NAME_LEN`] (host-side programming errors).
        pub fn finish(&self) -> Vec<u8> {
            assert!(self.vms.len() <= MAX_VMS, "too many VMs");
            let mut out = alloc::vec![0u8; HEADER_SIZE + self.vms.len() * RECORD_SIZE];
            align_vec(&mut out);
            if self.vms.is_empty() {
                out.truncate(HEADER_SIZE);
            }
            let mut records = Vec::new();
            // Kernel, initrd and DTB blobs already written (offset, bytes):
            // VMs booting the same file share one copy (40 VMs of one
            // kernel would otherwise pack it 40 times). Only these images
            // are shared: kestrel copies them into each VM's RAM and never
            // writes them. The reader accepts any blob inside the area.
            let mut written: Vec<(usize, &[u8])> = Vec::new();
            for vm in &self.vms {
                let mut rec = [0u8; RECORD_SIZE];
                assert!(vm.name.len() <= NAME_LEN, "name too long");
                put(&mut rec, R_NAME, vm.name.as_bytes());
                put(&mut rec, R_MEMORY, &vm.memory.to_le_bytes());
                put(&mut rec, R_MASK, &vm.affinity.mask.to_le_bytes());
                put(&mut rec, R_VCPUS, &vm.vcpus.to_le_bytes());
                rec[R_KIND] = vm.kind as u8;
                rec[R_CONSOLE] = vm.console as u8;
                let mut flags = if vm.affinity.pinned { FLAG_PINNED } else { 0 };
                if vm.affinity.pinned && vm.affinity.shared {
                    flags |= FLAG_PINNED_SHARED;
                }
                if vm.virtio_console {
                    flags |= FLAG_VIRTIO_CONSOLE;
                }
                if vm.reboot_stop {
                    flags |= FLAG_REBOOT_STOP;
                }
                if vm.identity {
                    flags |= FLAG_IDENTITY;
                }
                if vm.pv_ipi_hidden {
                    flags |= FLAG_PV_IPI_HIDDEN;
                }
                if vm.pv_time_hidden {
                    flags |= FLAG_PV_TIME_HIDDEN;
                }
                put(&mut rec, R_FLAGS, &flags.to_le_bytes());
                put(&mut rec, R_SVE_VL, &vm.sve_vl.to_le_bytes());
                let mut crc = 0;
                for (field, data, aligned) in [
                    (R_KERNEL, Some(vm.kernel), true),
                    (R_INITRD, vm.initrd, true),
                    (R_DTB, vm.dtb, true),
                    (R_CMDLINE, Some(vm.cmdline.as_bytes()), false),
                ] {
                    let Some(data) = data.filter(|d| !d.is_empty()) else {
                        continue;
                    };
                    let shared = written
                        .iter()
                        .find(|(_, d)| aligned && *d == data)
                        .map(|&(off, _)| off);
                    let off = match shared {
                        Some(off) => off,
                        None => {
                            if aligned {
                                align_vec(&mut out);
                                written.push((out.len(), data));
                            }
                            out.extend_from_slice(data);
                            out.len() - data.len()
                        }
                    };
                    put(&mut rec, field, &(off as u64).to_le_bytes());
                    put(&mut rec, field + 8, &(data.len() as u64).to_le_bytes());
                    crc = crc32_update(crc, data);
                }
                assert!(
                    vm.devices.len() + vm.passthrough.len() <= MAX_DEVICES,
                    "too many devices"
                );
                let mut table = Vec::new();
                for d in vm.devices {
                    let mut e = [0u8; DEVICE_SIZE];
                    match *d {
                        Device::Disk { image, read_only } => {
                            e[D_KIND] = DEV_DISK;
                            e[D_FLAGS] = if read_only { DISK_READ_ONLY } else { 0 };
                            align_vec(&mut out);
                            put(&mut e, D_BLOB, &(out.len() as u64).to_le_bytes());
                            put(&mut e, D_BLOB + 8, &(image.len() as u64).to_le_bytes());
                            put(&mut e, D_CRC, &crc32(image).to_le_bytes());
                            out.extend_from_slice(image);
                        }
                        Device::Net {
                            network,
                            mac,
                            allow_mac_spoofing,
                            learn,
                            broadcast_rate,
                        } => {
                            e[D_KIND] = DEV_NET;
                            assert!(network.len() <= NAME_LEN, "network name too long");
                            put(&mut e, D_NETWORK, network.as_bytes());
                            if let Some(m) = mac {
                                e[D_FLAGS] = NET_MAC;
                                put(&mut e, D_MAC, &m);
                            }
                            if allow_mac_spoofing {
                                e[D_FLAGS] |= NET_ALLOW_SPOOFING;
                            }
                            put(&mut e, D_BLOB, &broadcast_rate.to_le_bytes());
                            put(&mut e, D_BLOB + 4, &learn.to_le_bytes());
                        }
                    }
                    table.extend_from_slice(&e);
                }
                for p in vm.passthrough {
                    let mut e = [0u8; DEVICE_SIZE];
                    e[D_KIND] = DEV_PASSTHROUGH;
                    e[D_MAC] = p.spis().len() as u8;
                    put(&mut e, D_BLOB, &p.base.to_le_bytes());
                    put(&mut e, D_BLOB + 8, &p.size.to_le_bytes());
                    for (i, s) in p.spis().iter().enumerate() {
                        put(&mut e, D_NETWORK + 4 * i, &s.to_le_bytes());
                    }
                    table.extend_from_slice(&e);
                }
                if !table.is_empty() {
                    put(&mut rec, R_DEVICES, &(out.len() as u64).to_le_bytes());
                    put(&mut rec, R_DEVICES + 8, &(table.len() as u64).to_le_bytes());
                    out.extend_from_slice(&table);
                    crc = crc32_update(crc, &table);
                }
                put(&mut rec, R_LOAD, &vm.load_offset.to_le_bytes());
                put(&mut rec, R_ENTRY, &vm.entry_offset.to_le_bytes());
                let footprint = if vm.kernel_footprint == 0 {
                    vm.kernel.len() as u64
                } else {
                    vm.kernel_footprint
                };
                put(&mut rec, R_FOOTPRINT, &footprint.to_le_bytes());
                put(&mut rec, R_DATA_CRC, &crc.to_le_bytes());
                let rcrc = crc_skipping(&rec, R_RECORD_CRC);
                put(&mut rec, R_RECORD_CRC, &rcrc.to_le_bytes());
                records.push(rec);
            }
            for (i, rec) in records.iter().enumerate() {
                put(&mut out, HEADER_SIZE + i * RECORD_SIZE, rec);
            }
            put(&mut out, 0, &MAGIC);
            put(&mut out, H_VERSION, &VERSION.to_le_bytes());
            put(&mut out, H_HEADER_SIZE, &(HEADER_SIZE as u16).to_le_bytes());
            put(&mut out, H_RECORD_SIZE, &(RECORD_SIZE as u16).to_le_bytes());
            put(&mut out, H_COUNT, &(self.vms.len() as u16).to_le_bytes());
            let total = out.len() as u64;
            put(&mut out, H_TOTAL, &total.to_le_bytes());
            out[H_FP] = self.settings.fp_policy as u8;
            out[H_MAX_CPUS] = self.settings.max_cpus;
            put(&mut out, H_TICK, &self.settings.tick_hz.to_le_bytes());
            out[H_CONSOLE] = self.settings.console as u8;
            put(
                &mut out,
                H_SCROLLBACK,
                &self.settings.scrollback.to_le_bytes(),
            );
            let hcrc = crc_skipping(&out[..HEADER_SIZE], H_CRC);
            put(&mut out, H_CRC, &hcrc.to_le_bytes());
            out
        }
    }

    /// Rewrites the header and record CRCs after a test or tool changed
    /// fields in place (blob CRCs are left alone).
    pub fn reseal(pkg: &mut [u8]) {
        if pkg.len() < HEADER_SIZE {
            return;
        }
        let count = (le16(pkg, H_COUNT) as usize).min(MAX_VMS);
        for i in 0..count {
            let s = HEADER_SIZE + i * RECORD_SIZE;
            if let Some(rec) = pkg.get_mut(s..s + RECORD_SIZE) {
                let c = crc_skipping(rec, R_RECORD_CRC);
                put(rec, R_RECORD_CRC, &c.to_le_bytes());
            }
        }
        let c = crc_skipping(&pkg[..HEADER_SIZE], H_CRC);
        put(pkg, H_CRC, &c.to_le_bytes());
    }
}

#[cfg(any(feature = "alloc", test))]
pub use writer::reseal;

/// Record field offsets, for tools and tests that patch records.
pub mod offsets {
    pub const NAME: usize = super::R_NAME;
    pub const MEMORY: usize = super::R_MEMORY;
    pub const MASK: usize = super::R_MASK;
    pub const VCPUS: usize = super::R_VCPUS;
    pub const KIND: usize = super::R_KIND;
    pub const CONSOLE: usize = super::R_CONSOLE;
    pub const FLAGS: usize = super::R_FLAGS;
    pub const KERNEL: usize = super::R_KERNEL;
    pub const INITRD: usize = super::R_INITRD;
    pub const DTB: usize = super::R_DTB;
    pub const CMDLINE: usize = super::R_CMDLINE;
    pub const LOAD: usize = super::R_LOAD;
    pub const ENTRY: usize = super::R_ENTRY;
    pub const FOOTPRINT: usize = super::R_FOOTPRINT;
    pub const DATA_CRC: usize = super::R_DATA_CRC;
    pub const RECORD_CRC: usize = super::R_RECORD_CRC;
    pub const DEVICES: usize = super::R_DEVICES;
    pub const SVE_VL: usize = super::R_SVE_VL;
    /// Header: number of VMs (u16).
    pub const H_COUNT: usize = super::H_COUNT;
    /// Header: total size (u64).
    pub const H_TOTAL: usize = super::H_TOTAL;
    /// Header: CRC (u32).
    pub const H_CRC: usize = super::H_CRC;
}

#[cfg(test)]
mod tests;
