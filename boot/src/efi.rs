//! The UEFI services the EFI entries of both architectures use, with boot
//! services still running (`aarch64/efi.rs`, `loongarch64/efi.rs`): the
//! system table, the configuration table, the image's load options, the
//! firmware console, and the memory map taken at `ExitBootServices`
//! (retried while the map key is stale). Only the few
//! UEFI structures used are described here, by their offsets in the UEFI
//! 2.10 specification. Runs with the firmware's MMU, caches and stack; no
//! heap, no `klog`.

// Firmware functions are called with the C calling convention: it is the
// UEFI one on LoongArch64 (LP64, integer arguments only here) and on
// arm64 (AAPCS64).

use kernel::host::efiboot::{EfiBoot, EfiText};
use kernel::host::reserve;

pub type Status = usize;
pub const SUCCESS: Status = 0;
pub const ERROR_BIT: usize = 1 << 63;
const BUFFER_TOO_SMALL: Status = ERROR_BIT | 5;

/// An EFI_GUID as its 16 bytes in memory (the first three fields little
/// endian).
pub type Guid = [u8; 16];

const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> Guid {
    let a = a.to_le_bytes();
    let b = b.to_le_bytes();
    let c = c.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The flattened device tree in the configuration table.
pub const DEVICE_TREE_GUID: Guid = guid(
    0xb1b6_21d5,
    0xf19c,
    0x41a5,
    [0x83, 0x0b, 0xd9, 0x15, 0x2c, 0x69, 0xaa, 0xe0],
);
/// ACPI 2.0+ RSDP in the configuration table.
pub const ACPI_20_GUID: Guid = guid(
    0x8868_e871,
    0xe4f1,
    0x11d3,
    [0xbc, 0x22, 0x00, 0x80, 0xc7, 0x3c, 0x88, 0x81],
);
/// EFI_LOADED_IMAGE_PROTOCOL.
const LOADED_IMAGE_GUID: Guid = guid(
    0x5b1b_31a1,
    0x9562,
    0x11d2,
    [0x8e, 0x3f, 0x00, 0xa0, 0xc9, 0x69, 0x72, 0x3b],
);

// EFI_SYSTEM_TABLE offsets.
const ST_SIGNATURE: u64 = 0x5453_5953_2049_4249; // "IBI SYST"
const ST_VENDOR: usize = 24;
const ST_CON_OUT: usize = 64;
const ST_BOOT_SERVICES: usize = 96;
const ST_N_TABLES: usize = 104;
const ST_TABLES: usize = 112;
// EFI_BOOT_SERVICES offsets (24-byte header, then one pointer each).
const BS_GET_MEMORY_MAP: usize = 56;
const BS_HANDLE_PROTOCOL: usize = 152;
const BS_EXIT_BOOT_SERVICES: usize = 232;
type GetMemoryMap = extern "C" fn(*mut usize, *mut u8, *mut usize, *mut usize, *mut u32) -> Status;
type ExitBootServices = extern "C" fn(usize, usize) -> Status;
// EFI_LOADED_IMAGE_PROTOCOL offsets.
const LI_OPTIONS_SIZE: usize = 48;
const LI_OPTIONS: usize = 56;

/// Largest memory map taken (bytes, on the firmware's stack, which UEFI
/// makes at least 128 KiB): 340 descriptors of 48 bytes.
const MAP_BUF: usize = 16 << 10;

/// The system table, read through raw pointers the firmware handed over.
pub struct Uefi {
    pub st: usize,
    pub image: usize,
}

impl Uefi {
    /// The pointer-sized field at `off` of the structure at `base`.
    ///
    /// # Safety
    /// `base + off` must be a readable, 8-aligned field of a firmware table.
    pub unsafe fn field(base: usize, off: usize) -> usize {
        // SAFETY: the caller names a field of a table the firmware owns;
        // firmware tables are identity mapped while boot services run.
        unsafe { core::ptr::read_volatile((base + off) as *const usize) }
    }

    pub fn boot_services(&self) -> usize {
        // SAFETY: the system table's BootServices pointer (UEFI 2.10 4.3).
        unsafe { Self::field(self.st, ST_BOOT_SERVICES) }
    }

    /// Prints `s` on the firmware console (ConOut), `\n` as CR LF.
    pub fn print(&self, s: &str) {
        // SAFETY: the system table's ConOut pointer.
        let con = unsafe { Self::field(self.st, ST_CON_OUT) };
        if con == 0 {
            return;
        }
        // SAFETY: OutputString is the second member of
        // EFI_SIMPLE_TEXT_OUTPUT_PROTOCOL.
        let output: extern "C" fn(usize, *const u16) -> Status =
            unsafe { core::mem::transmute(Self::field(con, 8)) };
        let mut buf = [0u16; 65];
        let mut n = 0;
        let flush = |buf: &mut [u16; 65], n: &mut usize| {
            buf[*n] = 0;
            output(con, buf.as_ptr());
            *n = 0;
        };
        for c in s.chars() {
            if c == '\n' {
                buf[n] = u16::from(b'\r');
                n += 1;
            }
            buf[n] = if c.is_ascii() {
                c as u16
            } else {
                u16::from(b'?')
            };
            n += 1;
            if n >= 63 {
                flush(&mut buf, &mut n);
            }
        }
        if n > 0 {
            flush(&mut buf, &mut n);
        }
    }

    /// The configuration table entry with `g`, if any.
    pub fn config_table(&self, g: &Guid) -> Option<usize> {
        // SAFETY: NumberOfTableEntries and ConfigurationTable of the
        // system table; each entry is a GUID and a pointer (24 bytes).
        let (n, tables) = unsafe {
            (
                Self::field(self.st, ST_N_TABLES),
                Self::field(self.st, ST_TABLES),
            )
        };
        (0..n.min(1024)).find_map(|i| {
            let e = tables + i * 24;
            // SAFETY: entry i of the table the firmware sized with n.
            let id: Guid = unsafe { core::ptr::read_volatile(e as *const Guid) };
            // SAFETY: the entry's VendorTable pointer.
            (id == *g).then(|| unsafe { Self::field(e, 16) })
        })
    }

    /// The image's load options as ASCII (the command line: `-append` of
    /// QEMU's `-kernel`, a boot entry's or the UEFI shell's arguments).
    /// Options that are not printable UCS-2 text (some boot managers pass
    /// binary data) are ignored.
    pub fn load_options(&self, out: &mut EfiText<256>) -> bool {
        let bs = self.boot_services();
        // SAFETY: HandleProtocol(handle, guid, *interface) of the boot
        // services table, called with boot services running.
        let handle_protocol: extern "C" fn(usize, *const Guid, *mut usize) -> Status =
            unsafe { core::mem::transmute(Self::field(bs, BS_HANDLE_PROTOCOL)) };
        let mut li = 0usize;
        if handle_protocol(self.image, &LOADED_IMAGE_GUID, &mut li) != SUCCESS || li == 0 {
            return false;
        }
        // SAFETY: LoadOptionsSize (u32) and LoadOptions of the loaded
        // image protocol the firmware just returned.
        let (size, opts) = unsafe {
            (
                core::ptr::read_volatile((li + LI_OPTIONS_SIZE) as *const u32) as usize,
                Self::field(li, LI_OPTIONS),
            )
        };
        if opts == 0 || size < 2 || !size.is_multiple_of(2) || !opts.is_multiple_of(2) {
            return false;
        }
        for i in 0..(size / 2).min(1024) {
            // SAFETY: within the LoadOptionsSize bytes at LoadOptions.
            let c = unsafe { core::ptr::read_volatile((opts as *const u16).add(i)) };
            match c {
                0 => break,
                0x20..=0x7e => {
                    if out.push(c as u8 as char).is_err() {
                        break;
                    }
                }
                _ => {
                    out.clear();
                    return false;
                }
            }
        }
        true
    }

    /// The firmware vendor string, ASCII.
    pub fn vendor(&self, out: &mut EfiText<64>) {
        // SAFETY: the system table's FirmwareVendor (a NUL-terminated
        // UCS-2 string).
        let p = unsafe { Self::field(self.st, ST_VENDOR) };
        if p == 0 || !p.is_multiple_of(2) {
            return;
        }
        for i in 0..64 {
            // SAFETY: characters of that string up to its NUL.
            let c = unsafe { core::ptr::read_volatile((p as *const u16).add(i)) };
            if c == 0 {
                break;
            }
            let ch = if (0x20..0x7f).contains(&c) {
                c as u8 as char
            } else {
                '?'
            };
            if out.push(ch).is_err() {
                break;
            }
        }
    }
}

impl Uefi {
    /// Whether `st` points at an EFI system table.
    pub fn is_system_table(st: usize) -> bool {
        // SAFETY: the first 8 bytes of the table the firmware passed (it
        // passes a valid pointer; 0 is checked first).
        st != 0
            && st.is_multiple_of(8)
            && unsafe { core::ptr::read_volatile(st as *const u64) } == ST_SIGNATURE
    }

    /// Takes the memory map and exits boot services with its key, taking
    /// the map again while the key is stale (up to 8 times). `before_exit`
    /// sees each map taken (its bytes and descriptor size) just before
    /// `ExitBootServices` is called with its key; it must neither print nor
    /// allocate (that would make the key stale), and an error from it
    /// stops here. On success the map is sorted into `h` (`firmware`,
    /// `free`, `described`, `ram`; a malformed map is kept in `map_error`
    /// for the boot path to report). On failure (reason printed on the
    /// firmware console) boot services still run.
    pub fn exit_boot_services(
        &self,
        h: &mut EfiBoot,
        mut before_exit: impl FnMut(&[u8], usize) -> Result<(), ()>,
    ) -> Result<(), ()> {
        let bs = self.boot_services();
        // SAFETY: GetMemoryMap and ExitBootServices of the boot services
        // table, with the signatures of UEFI 2.10 7.2 and 7.4.
        let (get_map, exit_bs) = unsafe {
            (
                core::mem::transmute::<usize, GetMemoryMap>(Uefi::field(bs, BS_GET_MEMORY_MAP)),
                core::mem::transmute::<usize, ExitBootServices>(Uefi::field(
                    bs,
                    BS_EXIT_BOOT_SERVICES,
                )),
            )
        };
        let mut buf = [0u64; MAP_BUF / 8];
        let (mut size, mut desc_size) = (0usize, 0usize);
        let mut exited = false;
        for _ in 0..8 {
            size = MAP_BUF;
            let (mut key, mut version) = (0usize, 0u32);
            let s = get_map(
                &mut size,
                buf.as_mut_ptr().cast(),
                &mut key,
                &mut desc_size,
                &mut version,
            );
            if s == BUFFER_TOO_SMALL {
                self.print("kestrel: FATAL: the UEFI memory map is larger than 16 KiB\n");
                return Err(());
            }
            if s != SUCCESS {
                self.print("kestrel: FATAL: GetMemoryMap failed\n");
                return Err(());
            }
            // SAFETY: `size` bytes of `buf` were written by GetMemoryMap
            // (at most MAP_BUF, the size passed in).
            let map = unsafe {
                core::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), size.min(MAP_BUF))
            };
            before_exit(map, desc_size)?;
            if exit_bs(self.image, key) == SUCCESS {
                exited = true;
                break;
            }
        }
        if !exited {
            self.print(
                "kestrel: FATAL: ExitBootServices failed 8 times (the memory map keeps changing)\n",
            );
            return Err(());
        }
        // Boot services are gone: no more firmware calls, no console.
        // Errors are kept for kestrel to report on its own console.
        // SAFETY: as above, for the map ExitBootServices accepted.
        let map =
            unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), size.min(MAP_BUF)) };
        match reserve::split_uefi_map(
            map,
            desc_size,
            &mut h.firmware,
            &mut h.free,
            &mut h.described,
        ) {
            Ok(n) => h.descriptors = n,
            Err(e) => h.map_error = Some(e),
        }
        // The same checks as the split: an error is already kept.
        if let Ok(ram) = reserve::ram_from_uefi_map(map, desc_size) {
            h.ram = ram;
        }
        h.map_entries = size.checked_div(desc_size).unwrap_or(0);
        Ok(())
    }
}
