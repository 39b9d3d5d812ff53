//! A reader for the ACPI tables firmware hands over (UEFI's configuration
//! table names the RSDP): the RSDP (ACPI 2.0 and later), the XSDT and the
//! system description tables it lists, each checked before anything in it
//! is trusted. The arm64 board (MADT, GTDT, SPCR, FADT) is read by
//! [`arm64`], the LoongArch one (MADT core PICs, SRAT, SLIT, SPCR, FADT)
//! by [`loongarch`]. Safe Rust, host-tested; see docs/arm64-boot.md and
//! docs/loongarch-boot.md, "ACPI".
//!
//! Physical memory is reached through [`PhysMem`], which the arch
//! implements over the RAM the firmware described (and tests over a
//! buffer), so a pointer in a table that leads outside that RAM is an
//! error naming the table and field, never a fault.
//!
//! Checks on every table: its signature, its length (at least the 36-byte
//! header and the table's own fixed part, at most [`MAX_TABLE`]), its
//! checksum (all bytes add up to 0 modulo 256), its revision. Entries of a
//! table with entries (MADT) must have a length of at least 2 and lie
//! inside the table; only the entry types kestrel knows are read, each
//! with its minimum length. Every problem is an [`AcpiError`].

use core::fmt;

use heapless::Vec;

pub mod arm64;
pub mod loongarch;

/// Largest table read (bytes): far beyond any MADT, GTDT, SPCR or FADT.
pub const MAX_TABLE: u32 = 1 << 20;
/// Most tables of an XSDT that kestrel reads; those listed beyond are
/// counted and left alone.
pub const MAX_TABLES: usize = 64;
/// The system description table header.
pub const HEADER_LEN: usize = 36;

/// Reads physical memory for the ACPI reader.
pub trait PhysMem {
    /// The `len` bytes at physical address `pa`, or `None` if any of them
    /// is not memory the reader may read.
    fn read(&self, pa: u64, len: usize) -> Option<&[u8]>;
}

/// A table signature ("APIC", "GTDT", ...). The RSDP is named "RSDP".
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sig(pub [u8; 4]);

impl Sig {
    pub const RSDP: Sig = Sig(*b"RSDP");
    pub const XSDT: Sig = Sig(*b"XSDT");
    pub const MADT: Sig = Sig(*b"APIC");
    pub const GTDT: Sig = Sig(*b"GTDT");
    pub const SPCR: Sig = Sig(*b"SPCR");
    pub const FADT: Sig = Sig(*b"FACP");
    pub const SRAT: Sig = Sig(*b"SRAT");
    pub const SLIT: Sig = Sig(*b"SLIT");
}

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0 {
            let c = if b.is_ascii_graphic() { b as char } else { '?' };
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sig({self})")
    }
}

/// What is wrong (see [`AcpiError`] for where).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// `len` bytes at `pa` are not in the RAM the firmware described.
    Unreadable { pa: u64, len: u64 },
    /// The bytes do not add up to 0 modulo 256.
    Checksum,
    /// The signature is not the one the pointer promised.
    Signature([u8; 8]),
    /// A revision kestrel does not read.
    Revision(u8),
    /// Shorter than the `min` bytes the table or entry needs.
    TooShort { len: u64, min: u64 },
    /// Longer than what holds it (`max`).
    TooLong { len: u64, max: u64 },
    /// A value kestrel cannot use.
    Unsupported(u64),
    /// A required table or entry is absent.
    Missing,
    /// A value that must be unique appears twice.
    Duplicate(u64),
    /// Entries that must agree differ (`first`, then `other`).
    Mismatch { first: u64, other: u64 },
    /// Not the value kestrel relies on (`want`).
    Unexpected { got: u64, want: u64 },
}

/// A problem with the ACPI tables, naming the table, the field (and the
/// entry, for tables with entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcpiError {
    pub table: Sig,
    pub field: &'static str,
    /// The entry's index in its table (MADT entries, XSDT pointers).
    pub entry: Option<usize>,
    pub problem: Problem,
}

impl AcpiError {
    pub const fn new(table: Sig, field: &'static str, problem: Problem) -> AcpiError {
        AcpiError {
            table,
            field,
            entry: None,
            problem,
        }
    }

    pub const fn at(mut self, entry: usize) -> AcpiError {
        self.entry = Some(entry);
        self
    }
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ACPI {}", self.table)?;
        if let Some(i) = self.entry {
            write!(f, " entry {i}")?;
        }
        write!(f, ": {}: ", self.field)?;
        match self.problem {
            Problem::Unreadable { pa, len } => write!(
                f,
                "{len} bytes at {pa:#x} are not in the RAM of the UEFI memory map"
            ),
            Problem::Checksum => f.write_str("bad checksum (the bytes do not add up to 0)"),
            Problem::Signature(s) => {
                f.write_str("wrong signature \"")?;
                for b in s.iter().take_while(|&&b| b != 0) {
                    let c = if b.is_ascii_graphic() || *b == b' ' {
                        *b as char
                    } else {
                        '?'
                    };
                    write!(f, "{c}")?;
                }
                f.write_str("\"")
            }
            Problem::Revision(r) => write!(f, "revision {r} is not supported"),
            Problem::TooShort { len, min } => {
                write!(f, "length {len} is below the {min} bytes needed")
            }
            Problem::TooLong { len, max } => write!(f, "length {len} is beyond {max}"),
            Problem::Unsupported(v) => write!(f, "value {v:#x} is not supported"),
            Problem::Missing => f.write_str("missing"),
            Problem::Duplicate(v) => write!(f, "{v:#x} is listed twice"),
            Problem::Mismatch { first, other } => {
                write!(f, "{other:#x} differs from {first:#x} in an earlier entry")
            }
            Problem::Unexpected { got, want } => {
                write!(f, "{got:#x}, but kestrel relies on {want:#x}")
            }
        }
    }
}

/// Little-endian field readers over a slice already checked to be long
/// enough (they return 0 past the end rather than panic).
pub(crate) fn u8_at(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut w = [0u8; 2];
    if let Some(s) = b.get(off..off + 2) {
        w.copy_from_slice(s);
    }
    u16::from_le_bytes(w)
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// The 8-bit sum of `b`.
pub fn checksum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
}

fn read<'m>(
    mem: &'m impl PhysMem,
    pa: u64,
    len: usize,
    table: Sig,
    field: &'static str,
) -> Result<&'m [u8], AcpiError> {
    let unreadable = AcpiError::new(
        table,
        field,
        Problem::Unreadable {
            pa,
            len: len as u64,
        },
    );
    if pa == 0 || pa.checked_add(len as u64).is_none() {
        return Err(unreadable);
    }
    match mem.read(pa, len) {
        Some(b) if b.len() == len => Ok(b),
        _ => Err(unreadable),
    }
}

/// The RSDP: where the XSDT is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rsdp {
    pub pa: u64,
    pub revision: u8,
    pub length: u32,
    pub oem_id: [u8; 6],
    pub xsdt: u64,
}

/// RSDP fields (ACPI 6.5, 5.2.5.3).
const RSDP_V1_LEN: usize = 20;
const RSDP_LEN: usize = 36;

/// Reads and checks the RSDP at `pa`: signature "RSD PTR ", the checksum
/// of its first 20 bytes, revision 2 or later (ACPI 2.0: the XSDT; an
/// ACPI 1.0 RSDP has only the 32-bit RSDT), its length (36 bytes up to
/// 4 KiB), the extended checksum over that length, a non-zero XSDT.
pub fn rsdp(mem: &impl PhysMem, pa: u64) -> Result<Rsdp, AcpiError> {
    let t = Sig::RSDP;
    let v1 = read(mem, pa, RSDP_V1_LEN, t, "the RSDP")?;
    if &v1[0..8] != b"RSD PTR " {
        let mut s = [0u8; 8];
        s.copy_from_slice(&v1[0..8]);
        return Err(AcpiError::new(t, "Signature", Problem::Signature(s)));
    }
    if checksum(v1) != 0 {
        return Err(AcpiError::new(t, "Checksum", Problem::Checksum));
    }
    let revision = v1[15];
    if revision < 2 {
        return Err(AcpiError::new(t, "Revision", Problem::Revision(revision)));
    }
    let head = read(mem, pa, RSDP_LEN, t, "the ACPI 2.0 RSDP")?;
    let length = u32_at(head, 20);
    if (length as usize) < RSDP_LEN {
        return Err(AcpiError::new(
            t,
            "Length",
            Problem::TooShort {
                len: length.into(),
                min: RSDP_LEN as u64,
            },
        ));
    }
    if length > 4096 {
        return Err(AcpiError::new(
            t,
            "Length",
            Problem::TooLong {
                len: length.into(),
                max: 4096,
            },
        ));
    }
    let all = read(mem, pa, length as usize, t, "Length")?;
    if checksum(all) != 0 {
        return Err(AcpiError::new(t, "Extended Checksum", Problem::Checksum));
    }
    let xsdt = u64_at(all, 24);
    if xsdt == 0 {
        return Err(AcpiError::new(t, "XsdtAddress", Problem::Missing));
    }
    let mut oem_id = [0u8; 6];
    oem_id.copy_from_slice(&all[9..15]);
    Ok(Rsdp {
        pa,
        revision,
        length,
        oem_id,
        xsdt,
    })
}

/// One system description table, its header checked: signature, length
/// (36 bytes up to [`MAX_TABLE`]), checksum.
#[derive(Clone, Copy, Debug)]
pub struct Sdt<'m> {
    pa: u64,
    /// At least [`HEADER_LEN`] bytes (only [`sdt`] and tests make one).
    bytes: &'m [u8],
}

impl<'m> Sdt<'m> {
    pub fn pa(&self) -> u64 {
        self.pa
    }

    /// The whole table, header included.
    pub fn bytes(&self) -> &'m [u8] {
        self.bytes
    }

    pub fn signature(&self) -> Sig {
        let mut s = [0u8; 4];
        s.copy_from_slice(&self.bytes[0..4]);
        Sig(s)
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn revision(&self) -> u8 {
        self.bytes[8]
    }

    pub fn oem_id(&self) -> &'m [u8] {
        &self.bytes[10..16]
    }

    pub fn oem_table_id(&self) -> &'m [u8] {
        &self.bytes[16..24]
    }

    /// Fails with [`Problem::TooShort`] unless the table has `min` bytes.
    pub fn need(&self, min: usize, field: &'static str) -> Result<(), AcpiError> {
        if self.len() < min {
            return Err(AcpiError::new(
                self.signature(),
                field,
                Problem::TooShort {
                    len: self.len() as u64,
                    min: min as u64,
                },
            ));
        }
        Ok(())
    }
}

/// Reads the table at `pa` and checks its header; `want` is the signature
/// the pointer promises (`None`: any), `table`/`field` name the pointer
/// for errors about reaching it.
pub fn sdt<'m>(
    mem: &'m impl PhysMem,
    pa: u64,
    want: Option<Sig>,
    table: Sig,
    field: &'static str,
) -> Result<Sdt<'m>, AcpiError> {
    let t = sdt_unsummed(mem, pa, want, table, field)?;
    if checksum(t.bytes) != 0 {
        return Err(AcpiError::new(t.signature(), "Checksum", Problem::Checksum));
    }
    Ok(t)
}

/// [`sdt`] without the checksum.
fn sdt_unsummed<'m>(
    mem: &'m impl PhysMem,
    pa: u64,
    want: Option<Sig>,
    table: Sig,
    field: &'static str,
) -> Result<Sdt<'m>, AcpiError> {
    let head = read(mem, pa, HEADER_LEN, table, field)?;
    let mut s = [0u8; 4];
    s.copy_from_slice(&head[0..4]);
    let sig = Sig(s);
    if let Some(w) = want.filter(|&w| w != sig) {
        let mut got = [0u8; 8];
        got[..4].copy_from_slice(&s);
        return Err(AcpiError::new(w, "Signature", Problem::Signature(got)));
    }
    let length = u32_at(head, 4);
    if (length as usize) < HEADER_LEN {
        return Err(AcpiError::new(
            sig,
            "Length",
            Problem::TooShort {
                len: length.into(),
                min: HEADER_LEN as u64,
            },
        ));
    }
    if length > MAX_TABLE {
        return Err(AcpiError::new(
            sig,
            "Length",
            Problem::TooLong {
                len: length.into(),
                max: MAX_TABLE.into(),
            },
        ));
    }
    let bytes = read(mem, pa, length as usize, sig, "Length")?;
    Ok(Sdt { pa, bytes })
}

/// A table the XSDT lists: signature, address, length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableRef {
    pub sig: Sig,
    pub pa: u64,
    pub len: u32,
}

/// The RSDP, the XSDT and every table it lists, all checked.
pub struct Tables<'m, M: PhysMem> {
    mem: &'m M,
    pub rsdp: Rsdp,
    pub xsdt: Sdt<'m>,
    /// The tables the XSDT lists, in its order (the first [`MAX_TABLES`]).
    pub list: Vec<TableRef, MAX_TABLES>,
    /// Tables listed beyond [`MAX_TABLES`] (not read).
    pub more: usize,
    /// Listed tables whose checksum is wrong (refused if needed, by
    /// [`Tables::find`]; the others are ignored).
    pub bad_checksums: usize,
}

/// Reads the RSDP at `rsdp_pa`, the XSDT it names and the header of every
/// table the XSDT lists, up to [`MAX_TABLES`]: each must lie in memory
/// with a sane length. A null pointer in the XSDT is an error. Checksums
/// are checked, but a bad one is only counted here: [`Tables::find`]
/// refuses the table when it is needed (firmware with a broken table
/// kestrel does not read still boots). The same signature twice is fine
/// here (SSDTs) and refused by [`Tables::find`].
pub fn tables<M: PhysMem>(mem: &M, rsdp_pa: u64) -> Result<Tables<'_, M>, AcpiError> {
    let rsdp = rsdp(mem, rsdp_pa)?;
    let xsdt = sdt(mem, rsdp.xsdt, Some(Sig::XSDT), Sig::RSDP, "XsdtAddress")?;
    if xsdt.revision() < 1 {
        return Err(AcpiError::new(
            Sig::XSDT,
            "Revision",
            Problem::Revision(xsdt.revision()),
        ));
    }
    let body = &xsdt.bytes[HEADER_LEN..];
    if !body.len().is_multiple_of(8) {
        return Err(AcpiError::new(
            Sig::XSDT,
            "Length",
            Problem::Unsupported(xsdt.len() as u64),
        ));
    }
    let mut list = Vec::new();
    let mut more = 0;
    let mut bad_checksums = 0;
    for (i, p) in body.chunks_exact(8).enumerate() {
        let pa = u64_at(p, 0);
        if pa == 0 {
            return Err(AcpiError::new(Sig::XSDT, "Entry", Problem::Missing).at(i));
        }
        if list.is_full() {
            more += 1;
            continue;
        }
        let t = sdt_unsummed(mem, pa, None, Sig::XSDT, "Entry").map_err(|e| {
            if e.table == Sig::XSDT {
                e.at(i)
            } else {
                e
            }
        })?;
        if checksum(t.bytes) != 0 {
            bad_checksums += 1;
        }
        let r = TableRef {
            sig: t.signature(),
            pa,
            len: t.len() as u32,
        };
        // Cannot fail: the list is not full.
        let _ = list.push(r);
    }
    Ok(Tables {
        mem,
        rsdp,
        xsdt,
        list,
        more,
        bad_checksums,
    })
}

impl<M: PhysMem> fmt::Debug for Tables<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tables")
            .field("rsdp", &self.rsdp)
            .field("xsdt", &self.xsdt.pa)
            .field("list", &self.list)
            .field("more", &self.more)
            .field("bad_checksums", &self.bad_checksums)
            .finish()
    }
}

impl<'m, M: PhysMem> Tables<'m, M> {
    /// The table with signature `sig`, if the XSDT lists one; listed twice
    /// is an error ([`Problem::Duplicate`] with the second address).
    pub fn find(&self, sig: Sig) -> Result<Option<Sdt<'m>>, AcpiError> {
        let mut it = self.list.iter().filter(|t| t.sig == sig);
        let Some(first) = it.next() else {
            return Ok(None);
        };
        if let Some(second) = it.next() {
            return Err(AcpiError::new(
                sig,
                "XSDT entries",
                Problem::Duplicate(second.pa),
            ));
        }
        sdt(self.mem, first.pa, Some(sig), Sig::XSDT, "Entry").map(Some)
    }

    /// Every range the reader looked at: the RSDP, the XSDT and each
    /// table listed (for cache maintenance before the MMU goes off).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        [
            (self.rsdp.pa, u64::from(self.rsdp.length)),
            (self.xsdt.pa, self.xsdt.len() as u64),
        ]
        .into_iter()
        .chain(self.list.iter().map(|t| (t.pa, u64::from(t.len))))
    }
}

/// One entry of a table made of type-length entries (the MADT's
/// interrupt controller structures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'m> {
    /// Its index among the table's entries.
    pub index: usize,
    pub kind: u8,
    /// The whole entry, type and length bytes included.
    pub bytes: &'m [u8],
}

/// The entries of `table` from byte `start` on: each at least 2 bytes
/// (type, length) and inside the table. An entry that breaks that ends
/// the walk with an error naming it.
pub fn entries<'m>(
    table: &Sdt<'m>,
    start: usize,
) -> impl Iterator<Item = Result<Entry<'m>, AcpiError>> + 'm {
    let bytes = table.bytes;
    let sig = table.signature();
    let mut off = start;
    let mut index = 0;
    let mut done = false;
    core::iter::from_fn(move || {
        if done || off >= bytes.len() {
            return None;
        }
        let left = bytes.len() - off;
        let len = if left >= 2 {
            bytes[off + 1] as usize
        } else {
            0
        };
        let item = if left < 2 || len < 2 {
            done = true;
            Err(AcpiError::new(
                sig,
                "entry Length",
                Problem::TooShort {
                    len: len as u64,
                    min: 2,
                },
            )
            .at(index))
        } else if len > left {
            done = true;
            Err(AcpiError::new(
                sig,
                "entry Length",
                Problem::TooLong {
                    len: len as u64,
                    max: left as u64,
                },
            )
            .at(index))
        } else {
            let e = Entry {
                index,
                kind: bytes[off],
                bytes: &bytes[off..off + len],
            };
            off += len;
            Ok(e)
        };
        index += 1;
        Some(item)
    })
}

/// Test helpers: tables built in memory, checksummed, at chosen addresses.
#[cfg(test)]
pub(crate) mod testmem {
    extern crate std;
    use super::*;
    use std::vec::Vec as StdVec;

    /// Physical memory made of byte buffers at chosen addresses.
    #[derive(Default)]
    pub struct Mem {
        pub blocks: StdVec<(u64, StdVec<u8>)>,
    }

    impl PhysMem for Mem {
        fn read(&self, pa: u64, len: usize) -> Option<&[u8]> {
            self.blocks.iter().find_map(|(base, b)| {
                let off = pa.checked_sub(*base)? as usize;
                b.get(off..off.checked_add(len)?)
            })
        }
    }

    impl Mem {
        pub fn put(&mut self, pa: u64, bytes: StdVec<u8>) {
            self.blocks.retain(|(b, _)| *b != pa);
            self.blocks.push((pa, bytes));
        }

        pub fn get_mut(&mut self, pa: u64) -> &mut StdVec<u8> {
            &mut self.blocks.iter_mut().find(|(b, _)| *b == pa).unwrap().1
        }
    }

    /// Sets the checksum byte at `at` so `t` adds up to 0.
    pub fn seal(t: &mut [u8], at: usize) {
        t[at] = 0;
        t[at] = 0u8.wrapping_sub(checksum(t));
    }

    /// A table: header with `sig`, `revision`, OEM "KSTREL"/"TESTTBL ",
    /// then `body`; length and checksum filled in.
    pub fn table(sig: &[u8; 4], revision: u8, body: &[u8]) -> StdVec<u8> {
        let mut t = std::vec![0u8; HEADER_LEN];
        t[0..4].copy_from_slice(sig);
        t[8] = revision;
        t[10..16].copy_from_slice(b"KSTREL");
        t[16..24].copy_from_slice(b"TESTTBL ");
        t.extend_from_slice(body);
        let len = t.len() as u32;
        t[4..8].copy_from_slice(&len.to_le_bytes());
        seal(&mut t, 9);
        t
    }

    /// An ACPI 2.0 RSDP naming `xsdt`.
    pub fn rsdp_bytes(xsdt: u64) -> StdVec<u8> {
        let mut r = std::vec![0u8; RSDP_LEN];
        r[0..8].copy_from_slice(b"RSD PTR ");
        r[9..15].copy_from_slice(b"KSTREL");
        r[15] = 2;
        r[20..24].copy_from_slice(&(RSDP_LEN as u32).to_le_bytes());
        r[24..32].copy_from_slice(&xsdt.to_le_bytes());
        seal(&mut r[..RSDP_V1_LEN], 8);
        seal(&mut r, 32);
        r
    }

    /// An XSDT listing `pointers`.
    pub fn xsdt(pointers: &[u64]) -> StdVec<u8> {
        let body: StdVec<u8> = pointers.iter().flat_map(|p| p.to_le_bytes()).collect();
        table(b"XSDT", 1, &body)
    }

    /// Memory holding an RSDP at 0x1000, an XSDT at 0x2000 and `tables`
    /// at 0x3000, 0x4000, ...
    pub fn with_tables(tables: &[StdVec<u8>]) -> Mem {
        let mut m = Mem::default();
        let addrs: StdVec<u64> = (0..tables.len() as u64)
            .map(|i| 0x3000 + i * 0x1000)
            .collect();
        m.put(0x1000, rsdp_bytes(0x2000));
        m.put(0x2000, xsdt(&addrs));
        for (a, t) in addrs.iter().zip(tables) {
            m.put(*a, t.clone());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::testmem::*;
    use super::*;
    use std::string::ToString;

    #[test]
    fn reads_rsdp_xsdt_and_lists_tables() {
        let m = with_tables(&[table(b"GTDT", 2, &[0; 60]), table(b"SSDT", 1, &[1, 2])]);
        let t = tables(&m, 0x1000).unwrap();
        assert_eq!(t.rsdp.revision, 2);
        assert_eq!(t.rsdp.xsdt, 0x2000);
        assert_eq!(&t.rsdp.oem_id, b"KSTREL");
        let sigs: std::vec::Vec<_> = t.list.iter().map(|r| r.sig).collect();
        assert_eq!(sigs, [Sig::GTDT, Sig(*b"SSDT")]);
        assert_eq!(t.list[0].pa, 0x3000);
        assert_eq!(t.list[0].len, 96);
        assert!(t.find(Sig::GTDT).unwrap().is_some());
        assert!(t.find(Sig::MADT).unwrap().is_none());
        assert_eq!(t.ranges().count(), 4);
    }

    #[test]
    fn rsdp_checks() {
        let mut m = with_tables(&[]);
        // Nothing at the address.
        let e = rsdp(&m, 0x9000).unwrap_err();
        assert!(matches!(e.problem, Problem::Unreadable { pa: 0x9000, .. }));
        assert!(rsdp(&m, 0).is_err());
        assert!(rsdp(&m, u64::MAX - 4).is_err());
        // Signature.
        m.get_mut(0x1000)[0] = b'X';
        let e = rsdp(&m, 0x1000).unwrap_err();
        assert_eq!((e.table, e.field), (Sig::RSDP, "Signature"));
        // First checksum.
        m.put(0x1000, testmem::rsdp_bytes(0x2000));
        m.get_mut(0x1000)[9] ^= 1;
        let e = rsdp(&m, 0x1000).unwrap_err();
        assert_eq!((e.field, e.problem), ("Checksum", Problem::Checksum));
        // Extended checksum only.
        m.put(0x1000, testmem::rsdp_bytes(0x2000));
        m.get_mut(0x1000)[33] ^= 1;
        assert_eq!(rsdp(&m, 0x1000).unwrap_err().field, "Extended Checksum");
        // ACPI 1.0.
        let mut r = testmem::rsdp_bytes(0x2000);
        r[15] = 0;
        seal(&mut r[..20], 8);
        m.put(0x1000, r);
        assert_eq!(rsdp(&m, 0x1000).unwrap_err().problem, Problem::Revision(0));
        // Length below 36, above 4 KiB, past the memory.
        for (len, want) in [(20u32, "TooShort"), (8192, "TooLong"), (100, "Unreadable")] {
            let mut r = testmem::rsdp_bytes(0x2000);
            r[20..24].copy_from_slice(&len.to_le_bytes());
            seal(&mut r[..20], 8);
            seal(&mut r, 32);
            m.put(0x1000, r);
            let e = rsdp(&m, 0x1000).unwrap_err();
            assert!(std::format!("{:?}", e.problem).starts_with(want), "{e:?}");
        }
        // No XSDT.
        m.put(0x1000, testmem::rsdp_bytes(0));
        assert_eq!(
            rsdp(&m, 0x1000).unwrap_err(),
            AcpiError::new(Sig::RSDP, "XsdtAddress", Problem::Missing)
        );
    }

    #[test]
    fn table_header_checks() {
        let gtdt = table(b"GTDT", 2, &[0; 60]);
        // Bad checksum: counted, refused when the table is needed.
        let mut bad = gtdt.clone();
        bad[40] ^= 0x55;
        let m = with_tables(&[bad]);
        let t = tables(&m, 0x1000).unwrap();
        assert_eq!(t.bad_checksums, 1);
        let e = t.find(Sig::GTDT).unwrap_err();
        assert_eq!((e.table, e.problem), (Sig::GTDT, Problem::Checksum));
        assert_eq!(
            e.to_string(),
            "ACPI GTDT: Checksum: bad checksum (the bytes do not add up to 0)"
        );
        // The XSDT's own checksum.
        let mut m = with_tables(std::slice::from_ref(&gtdt));
        m.get_mut(0x2000)[40] ^= 1;
        let e = tables(&m, 0x1000).unwrap_err();
        assert_eq!((e.table, e.problem), (Sig::XSDT, Problem::Checksum));
        // Length beyond the memory: truncated table.
        let m = with_tables(std::slice::from_ref(&gtdt));
        let mut m2 = m;
        m2.get_mut(0x3000).truncate(50);
        let e = tables(&m2, 0x1000).unwrap_err();
        assert!(
            matches!(
                e.problem,
                Problem::Unreadable {
                    pa: 0x3000,
                    len: 96
                }
            ),
            "{e:?}"
        );
        // Length below the header.
        let mut short = gtdt.clone();
        short[4..8].copy_from_slice(&10u32.to_le_bytes());
        let e = tables(&with_tables(&[short]), 0x1000).unwrap_err();
        assert_eq!(e.problem, Problem::TooShort { len: 10, min: 36 });
        // Huge length.
        let mut huge = gtdt.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = tables(&with_tables(&[huge]), 0x1000).unwrap_err();
        assert!(matches!(e.problem, Problem::TooLong { .. }));
        // The XSDT pointer leads to something else.
        let mut m = with_tables(std::slice::from_ref(&gtdt));
        m.get_mut(0x2000)[0] = b'R';
        let e = tables(&m, 0x1000).unwrap_err();
        assert_eq!((e.table, e.field), (Sig::XSDT, "Signature"));
        // A null entry; an XSDT whose body is not whole pointers.
        let mut m = with_tables(std::slice::from_ref(&gtdt));
        m.put(0x2000, xsdt(&[0x3000, 0]));
        assert_eq!(
            tables(&m, 0x1000).unwrap_err(),
            AcpiError::new(Sig::XSDT, "Entry", Problem::Missing).at(1)
        );
        m.put(0x2000, table(b"XSDT", 1, &[0, 0x30, 0, 0]));
        assert_eq!(tables(&m, 0x1000).unwrap_err().field, "Length");
        // An entry pointing outside memory names the XSDT entry.
        m.put(0x2000, xsdt(&[0x3000, 0xdead_0000]));
        let e = tables(&m, 0x1000).unwrap_err();
        assert_eq!((e.table, e.entry), (Sig::XSDT, Some(1)));
        assert!(e.to_string().contains("entry 1"), "{e}");
    }

    #[test]
    fn duplicate_tables_are_refused_when_needed() {
        let g = table(b"GTDT", 2, &[0; 60]);
        let m = with_tables(&[g.clone(), g]);
        let t = tables(&m, 0x1000).unwrap();
        assert_eq!(
            t.find(Sig::GTDT).unwrap_err().problem,
            Problem::Duplicate(0x4000)
        );
    }

    #[test]
    fn entry_walk() {
        let mut body = std::vec![0u8; 8];
        body.extend_from_slice(&[0x0b, 4, 0, 0, 0x0c, 3, 9]);
        let t = table(b"APIC", 5, &body);
        let s = Sdt { pa: 0, bytes: &t };
        let es: std::vec::Vec<_> = entries(&s, 44).collect();
        assert_eq!(es.len(), 2);
        assert_eq!(es[0].as_ref().unwrap().kind, 0x0b);
        assert_eq!(es[1].as_ref().unwrap().bytes, &[0x0c, 3, 9]);
        // Zero length: one error, then the walk ends (no endless loop).
        for bad in [&[0x0b, 0][..], &[0x0b, 1], &[0x0b]] {
            let mut body = std::vec![0u8; 8];
            body.extend_from_slice(bad);
            let t = table(b"APIC", 5, &body);
            let s = Sdt { pa: 0, bytes: &t };
            let es: std::vec::Vec<_> = entries(&s, 44).collect();
            assert_eq!(es.len(), 1);
            assert!(matches!(
                es[0].unwrap_err().problem,
                Problem::TooShort { min: 2, .. }
            ));
        }
        // Past the end.
        let mut body = std::vec![0u8; 8];
        body.extend_from_slice(&[0x0b, 40, 1, 2]);
        let t = table(b"APIC", 5, &body);
        let s = Sdt { pa: 0, bytes: &t };
        let e = entries(&s, 44).next().unwrap().unwrap_err();
        assert_eq!(e.problem, Problem::TooLong { len: 40, max: 4 });
        assert_eq!(e.entry, Some(0));
    }

    #[test]
    fn garbage_never_panics() {
        // Deterministic pseudo-random bytes everywhere the reader looks.
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let mut m = Mem::default();
            for base in [0x1000u64, 0x2000, 0x3000] {
                let mut b = std::vec![0u8; 0x1000];
                for v in b.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *v = x as u8;
                }
                m.put(base, b);
            }
            // Make some of them look like tables.
            let r = testmem::rsdp_bytes(0x2000);
            m.get_mut(0x1000)[..r.len()].copy_from_slice(&r);
            if x & 1 == 0 {
                m.get_mut(0x2000)[0..4].copy_from_slice(b"XSDT");
            }
            let _ = tables(&m, 0x1000).map(|t| {
                let _ = t.find(Sig::MADT);
            });
        }
    }
}
