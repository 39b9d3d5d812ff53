//! Unpacking LoongArch kernels at pack time: Debian ships its loong64
//! `vmlinuz` as an EFI zboot image (`kestrel_abi::image::ZbootImage`) whose
//! zstd payload is the kernel image proper (`LoongArchImage`, a PE/COFF EFI
//! application). A VM config may name either; kestrel's package carries the
//! unpacked image. Any format this cannot take is an error naming the file.

use std::io::Read;
use std::path::Path;

use kestrel_abi::image::{LoongArchImage, ZbootImage};

/// The largest kernel image a payload may unpack to (Debian's is 26 MiB).
pub const MAX_UNPACKED: u64 = 256 << 20;

/// `data` (the contents of `path`) as a LoongArch Linux image: unpacked
/// from its zboot wrapper when it is one, checked either way. Returns the
/// image and its parsed header.
pub fn loongarch_kernel(path: &Path, data: Vec<u8>) -> Result<(Vec<u8>, LoongArchImage), String> {
    let file = path.display();
    let image = if ZbootImage::is_zboot(&data) {
        let z = ZbootImage::parse(&data).map_err(|e| format!("{file}: {e}"))?;
        if z.compression != "zstd" {
            return Err(format!(
                "{file}: EFI zboot image compressed with {:?}: only zstd payloads are unpacked \
                 (decompress it yourself and name the result)",
                z.compression
            ));
        }
        unzstd(z.payload).map_err(|e| format!("{file}: EFI zboot zstd payload: {e}"))?
    } else {
        data
    };
    let header = LoongArchImage::parse(&image).map_err(|e| {
        format!("{file}: not a LoongArch Linux image (vmlinux.efi or Debian's zboot vmlinuz): {e}")
    })?;
    Ok((image, header))
}

/// Decompresses one zstd frame (a trailing size word or padding after it,
/// as zboot payloads have, is ignored), at most [`MAX_UNPACKED`] bytes.
pub fn unzstd(payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut src = payload;
    let dec = ruzstd::decoding::StreamingDecoder::new(&mut src)
        .map_err(|e| format!("not a zstd frame ({e})"))?;
    let mut out = Vec::new();
    dec.take(MAX_UNPACKED + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("corrupt zstd data ({e})"))?;
    if out.len() as u64 > MAX_UNPACKED {
        return Err(format!("unpacks to more than {} MiB", MAX_UNPACKED >> 20));
    }
    if out.is_empty() {
        return Err("unpacks to nothing".into());
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kestrel_abi::image::{LINUX_PE_MAGIC, PE_MACHINE_LOONGARCH64};
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};

    pub(crate) fn la_image(len: usize) -> Vec<u8> {
        let mut d: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        d[..0x48].fill(0);
        d[0..2].copy_from_slice(b"MZ");
        d[8..16].copy_from_slice(&0x20_1000u64.to_le_bytes());
        d[16..24].copy_from_slice(&(len as u64).to_le_bytes());
        d[24..32].copy_from_slice(&0x20_0000u64.to_le_bytes());
        d[0x38..0x3c].copy_from_slice(&LINUX_PE_MAGIC.to_le_bytes());
        d[0x3c..0x40].copy_from_slice(&0x40u32.to_le_bytes());
        d[0x40..0x44].copy_from_slice(b"PE\0\0");
        d[0x44..0x46].copy_from_slice(&PE_MACHINE_LOONGARCH64.to_le_bytes());
        d
    }

    /// A zboot file around `payload` (plus the 4-byte size word zboot appends).
    pub(crate) fn zboot(payload: &[u8], name: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 0x200];
        d[0..2].copy_from_slice(b"MZ");
        d[4..8].copy_from_slice(b"zimg");
        d[8..12].copy_from_slice(&0x200u32.to_le_bytes());
        d[12..16].copy_from_slice(&(payload.len() as u32 + 4).to_le_bytes());
        d[0x18..0x18 + name.len()].copy_from_slice(name);
        d.extend_from_slice(payload);
        d.extend_from_slice(&0x1234u32.to_le_bytes());
        d
    }

    fn p() -> &'static Path {
        Path::new("k/vmlinuz")
    }

    #[test]
    fn zboot_zstd_is_unpacked() {
        let img = la_image(0x3000);
        let z = zboot(
            &compress_to_vec(&img[..], CompressionLevel::Fastest),
            b"zstd",
        );
        let (out, h) = loongarch_kernel(p(), z).unwrap();
        assert_eq!(out, img);
        assert_eq!((h.entry, h.text_offset), (0x20_1000, 0x20_0000));
    }

    #[test]
    fn an_unpacked_image_is_taken_as_it_is() {
        let img = la_image(0x3000);
        assert_eq!(loongarch_kernel(p(), img.clone()).unwrap().0, img);
    }

    #[test]
    fn bad_inputs_name_the_file_and_the_problem() {
        let img = la_image(0x3000);
        let packed = compress_to_vec(&img[..], CompressionLevel::Fastest);
        let err = |d: Vec<u8>| loongarch_kernel(p(), d).unwrap_err();
        let e = err(zboot(&packed, b"gzip"));
        assert!(
            e.starts_with("k/vmlinuz: ") && e.contains("\"gzip\""),
            "{e}"
        );
        let e = err(zboot(b"not zstd at all", b"zstd"));
        assert!(e.contains("not a zstd frame"), "{e}");
        let mut cut = packed.clone();
        cut.truncate(packed.len() / 2);
        let e = err(zboot(&cut, b"zstd"));
        assert!(e.contains("zstd"), "{e}");
        // A good zstd frame of something that is not a LoongArch kernel.
        let e = err(zboot(
            &compress_to_vec(&[0u8; 4096][..], CompressionLevel::Fastest),
            b"zstd",
        ));
        assert!(e.contains("not a LoongArch Linux image"), "{e}");
        let mut bad = zboot(&packed, b"zstd");
        bad[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = err(bad);
        assert!(e.contains("does not lie inside"), "{e}");
        let e = err(
            b"\x7fELF and more bytes than a header needs to be at least, 64 of them......".to_vec(),
        );
        assert!(e.contains("not a LoongArch Linux image"), "{e}");
        // Corrupted bytes in the frame: an error, never a panic.
        for i in (0..packed.len()).step_by(7) {
            let mut c = packed.clone();
            c[i] ^= 0xa5;
            let _ = loongarch_kernel(p(), zboot(&c, b"zstd"));
        }
    }
}
