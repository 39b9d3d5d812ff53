//! The virtio driver modules the guest's `/init` loads: Debian's cloud
//! kernel builds virtio, virtio-mmio and the block, console and net drivers
//! as modules (`CONFIG_VIRTIO_MMIO=m` ...), so the initramfs carries them,
//! taken from the same kernel `.deb` and checked against that kernel.
//! Debian's loong64 kernel has virtio, virtio_ring, virtio-pci and the
//! virtio console built in, and builds virtio-mmio, the block and net
//! drivers and ext4 as modules (xz-compressed, in its `linux-modules-*`
//! package): [`LA64_VIRTIO_MODULES`], unpacked into the initramfs.

use std::path::Path;

use super::apt::extract_members;

/// The modules in load order (each one's dependencies before it), as paths
/// below `lib/modules/<release>/kernel/`.
pub const VIRTIO_MODULES: [&str; 8] = [
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_mmio.ko",
    "drivers/block/virtio_blk.ko",
    "drivers/char/virtio_console.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

/// Debian's loong64 kernel's modules for virtio-mmio, disks, the network
/// and an ext4 root, in load order (its virtio core and console are built
/// in), as paths below `lib/modules/<release>/kernel/` once unpacked (the
/// package has each as `<path>.xz`).
pub const LA64_VIRTIO_MODULES: [&str; 9] = [
    "drivers/virtio/virtio_mmio.ko",
    "drivers/block/virtio_blk.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
    "lib/crc/crc16.ko",
    "fs/mbcache.ko",
    "fs/jbd2/jbd2.ko",
    "fs/ext4/ext4.ko",
];

/// Debian's armhf LPAE kernel's modules for virtio-mmio, the disk, the
/// console and the network, in load order (its virtio core and ring are
/// built in; it has no ext4 here: the 32-bit guest stays in its
/// initramfs), as paths below `lib/modules/<release>/kernel/`.
pub const ARMHF_VIRTIO_MODULES: [&str; 6] = [
    "drivers/virtio/virtio_mmio.ko",
    "drivers/block/virtio_blk.ko",
    "drivers/char/virtio_console.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

/// `e_machine` of 32-bit Arm (EM_ARM).
pub const EM_ARM: u16 = 40;

/// The file `/init` reads the load order from, below `lib/modules/<release>/`
/// (one path below `kernel/` per line).
pub const LOAD_ORDER: &str = "kestrel-load-order";

/// The kernel release of a `./boot/vmlinuz-<release>` member
/// (`6.1.0-57-cloud-arm64`): the modules' directory and `vermagic`.
pub fn kernel_release(vmlinuz_member: &str) -> Option<&str> {
    vmlinuz_member
        .rsplit('/')
        .next()?
        .strip_prefix("vmlinuz-")
        .filter(|r| !r.is_empty() && !r.contains(char::is_whitespace))
}

/// The module name of a path (`drivers/net/virtio_net.ko` -> `virtio_net`).
pub fn module_name(path: &str) -> &str {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.strip_suffix(".ko").unwrap_or(file)
}

/// The text of [`LOAD_ORDER`] for `modules`.
pub fn load_order(modules: &[&str]) -> String {
    modules.iter().map(|m| format!("{m}\n")).collect()
}

fn u16_at(d: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(d: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(d: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(off..off + 8)?.try_into().ok()?))
}

/// The bytes of the section called `name` of a little-endian ELF, 64-bit
/// (ELFCLASS64) or 32-bit (ELFCLASS32).
fn section<'a>(d: &'a [u8], name: &str) -> Result<&'a [u8], String> {
    let bad = || "section header table outside the file".to_string();
    let wide = d.get(4) == Some(&2);
    // e_shoff, e_shentsize, e_shnum, e_shstrndx; the section header's
    // sh_offset and sh_size, and the smallest header size.
    let (shoff, at_shentsize, min_entsize, sh_offset, sh_size) = if wide {
        (
            usize::try_from(u64_at(d, 0x28).ok_or_else(bad)?).map_err(|_| bad())?,
            0x3a,
            0x40,
            0x18,
            0x20,
        )
    } else {
        (
            u32_at(d, 0x20).ok_or_else(bad)? as usize,
            0x2e,
            0x28,
            0x10,
            0x14,
        )
    };
    let shentsize = u16_at(d, at_shentsize).ok_or_else(bad)? as usize;
    let shnum = u16_at(d, at_shentsize + 2).ok_or_else(bad)? as usize;
    let shstrndx = u16_at(d, at_shentsize + 4).ok_or_else(bad)? as usize;
    if shentsize < min_entsize {
        return Err(format!("section header size {shentsize} < {min_entsize}"));
    }
    let word = |at: usize| -> Option<u64> {
        if wide {
            u64_at(d, at)
        } else {
            u32_at(d, at).map(u64::from)
        }
    };
    let header = |i: usize| -> Result<(u32, &'a [u8]), String> {
        let h = shoff
            .checked_add(i.checked_mul(shentsize).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        let name = u32_at(d, h).ok_or_else(bad)?;
        let off = word(h + sh_offset).ok_or_else(bad)?;
        let size = word(h + sh_size).ok_or_else(bad)?;
        let bytes = usize::try_from(off)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| d.get(o..o.checked_add(s)?))
            .ok_or_else(|| format!("section {i} outside the file"))?;
        Ok((name, bytes))
    };
    if shstrndx >= shnum {
        return Err(format!(
            "no section name table (index {shstrndx} of {shnum})"
        ));
    }
    let (_, names) = header(shstrndx)?;
    for i in 0..shnum {
        let (n, bytes) = header(i)?;
        let n = names.get(n as usize..).unwrap_or_default();
        if n.split(|&b| b == 0).next() == Some(name.as_bytes()) {
            return Ok(bytes);
        }
    }
    Err(format!("no {name} section"))
}

/// Checks one module: a 64-bit little-endian aarch64 relocatable ELF whose
/// `.modinfo` says it was built for `release` (`vermagic=<release> ...`)
/// and depends only on modules in `loaded` (those before it in the load
/// order). Returns its `depends=` list.
#[cfg(test)]
pub fn check_module(d: &[u8], release: &str, loaded: &[&str]) -> Result<Vec<String>, String> {
    check_module_for(d, kestrel_abi::image::EM_AARCH64, release, loaded)
}

/// [`check_module`] for machine `em` (`EM_AARCH64`, `EM_LOONGARCH`: a
/// 64-bit ELF; [`EM_ARM`]: a 32-bit one).
pub fn check_module_for(
    d: &[u8],
    em: u16,
    release: &str,
    loaded: &[&str],
) -> Result<Vec<String>, String> {
    let (class, bits) = if em == EM_ARM { (1, 32) } else { (2, 64) };
    if d.get(..4) != Some(b"\x7fELF") || d.get(4) != Some(&class) || d.get(5) != Some(&1) {
        return Err(format!("not a {bits}-bit little-endian ELF file"));
    }
    if u16_at(d, 0x10) != Some(1) {
        return Err("not a relocatable object (ET_REL)".into());
    }
    let machine = u16_at(d, 0x12).unwrap_or_default();
    if machine != em {
        return Err(format!("e_machine {machine}, expected {em}"));
    }
    let info = section(d, ".modinfo")?;
    let field = |key: &str| {
        info.split(|&b| b == 0)
            .filter_map(|s| std::str::from_utf8(s).ok())
            .find_map(|s| s.strip_prefix(key)?.strip_prefix('='))
    };
    let vermagic = field("vermagic").ok_or("no vermagic in .modinfo")?;
    if vermagic.split_whitespace().next() != Some(release) {
        return Err(format!("built for {vermagic:?}, the kernel is {release}"));
    }
    let depends: Vec<String> = field("depends")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(missing) = depends.iter().find(|d| !loaded.contains(&d.as_str())) {
        return Err(format!(
            "depends on {missing}, which is not loaded before it"
        ));
    }
    Ok(depends)
}

/// Extracts [`VIRTIO_MODULES`] of kernel `release` from `kernel_deb` into
/// `dest/lib/modules/<release>/kernel/...`, checks each, and writes the
/// [`LOAD_ORDER`] file next to them.
pub(super) fn extract_modules(kernel_deb: &Path, release: &str, dest: &Path) -> Result<(), String> {
    extract_modules_of(
        kernel_deb,
        release,
        dest,
        &VIRTIO_MODULES,
        kestrel_abi::image::EM_AARCH64,
    )
}

/// [`extract_modules`] for `modules` of machine `em` (the armhf kernel's
/// [`ARMHF_VIRTIO_MODULES`], [`EM_ARM`]).
pub(super) fn extract_modules_of(
    kernel_deb: &Path,
    release: &str,
    dest: &Path,
    modules: &[&str],
    em: u16,
) -> Result<(), String> {
    let member = |m: &str| format!("./lib/modules/{release}/kernel/{m}");
    let members: Vec<String> = modules.iter().map(|m| member(m)).collect();
    extract_members(kernel_deb, &members, dest)?;
    let dir = dest.join("lib/modules").join(release);
    let mut loaded: Vec<&str> = Vec::new();
    for m in modules {
        let path = dir.join("kernel").join(m);
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        check_module_for(&data, em, release, &loaded)
            .map_err(|e| format!("{} of {}: {e}", member(m), kernel_deb.display()))?;
        loaded.push(module_name(m));
    }
    std::fs::write(dir.join(LOAD_ORDER), load_order(modules))
        .map_err(|e| format!("{}: {e}", dir.join(LOAD_ORDER).display()))
}

/// Extracts [`LA64_VIRTIO_MODULES`] of kernel `release` from the loong64
/// `modules_deb` (`./usr/lib/modules/<release>/kernel/<path>.xz`), unpacks
/// them (`xz -d`) into `dest/lib/modules/<release>/kernel/...`, checks
/// each, and writes the [`LOAD_ORDER`] file next to them.
pub(super) fn extract_modules_la64(
    modules_deb: &Path,
    release: &str,
    dest: &Path,
) -> Result<(), String> {
    let member = |m: &str| format!("./usr/lib/modules/{release}/kernel/{m}.xz");
    let members: Vec<String> = LA64_VIRTIO_MODULES.iter().map(|m| member(m)).collect();
    extract_members(modules_deb, &members, dest)?;
    let packed = dest.join("usr/lib/modules").join(release).join("kernel");
    let dir = dest.join("lib/modules").join(release);
    let mut loaded: Vec<&str> = Vec::new();
    for m in LA64_VIRTIO_MODULES {
        let xz = packed.join(format!("{m}.xz"));
        let out = std::process::Command::new("xz")
            .arg("-dc")
            .arg(&xz)
            .output()
            .map_err(|e| format!("cannot run xz (Debian's xz-utils): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "xz -d {}: {}",
                xz.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let path = dir.join("kernel").join(m);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        check_module_for(
            &out.stdout,
            kestrel_abi::image::EM_LOONGARCH,
            release,
            &loaded,
        )
        .map_err(|e| format!("{} of {}: {e}", member(m), modules_deb.display()))?;
        std::fs::write(&path, &out.stdout).map_err(|e| format!("{}: {e}", path.display()))?;
        loaded.push(module_name(m));
    }
    // Only the unpacked copies stay (the packed ones were all of usr/lib).
    std::fs::remove_dir_all(dest.join("usr/lib"))
        .map_err(|e| format!("{}: {e}", dest.join("usr/lib").display()))?;
    std::fs::write(dir.join(LOAD_ORDER), load_order(&LA64_VIRTIO_MODULES))
        .map_err(|e| format!("{}: {e}", dir.join(LOAD_ORDER).display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal aarch64 ET_REL with a section name table and a `.modinfo`.
    fn module(kind: u16, machine: u16, modinfo: &str) -> Vec<u8> {
        let names = b"\0.shstrtab\0.modinfo\0";
        let mut d = vec![0u8; 0x40];
        d[..6].copy_from_slice(b"\x7fELF\x02\x01");
        d[0x10..0x12].copy_from_slice(&kind.to_le_bytes());
        d[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        let names_off = d.len();
        d.extend_from_slice(names);
        let info_off = d.len();
        d.extend_from_slice(modinfo.as_bytes());
        let shoff = d.len();
        d[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        d[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
        d[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        d[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        for (name, off, size) in [
            (0u32, 0usize, 0usize),
            (1, names_off, names.len()),
            (11, info_off, modinfo.len()),
        ] {
            let mut h = [0u8; 0x40];
            h[..4].copy_from_slice(&name.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(off as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            d.extend_from_slice(&h);
        }
        d
    }

    const REL: &str = "6.1.0-57-cloud-arm64";

    #[test]
    fn release_of_the_kernel_member() {
        assert_eq!(
            kernel_release("./boot/vmlinuz-6.1.0-57-cloud-arm64"),
            Some(REL)
        );
        assert_eq!(kernel_release("./boot/vmlinuz-"), None);
        assert_eq!(kernel_release("./boot/System.map-6.1"), None);
    }

    #[test]
    fn a_good_module_passes_and_names_its_dependencies() {
        let info = format!("name=virtio_mmio\0depends=virtio,virtio_ring\0vermagic={REL} SMP mod_unload modversions aarch64\0");
        let d = module(1, 183, &info);
        assert_eq!(
            check_module(&d, REL, &["virtio_ring", "virtio"]),
            Ok(vec!["virtio".to_string(), "virtio_ring".to_string()])
        );
        let none = module(1, 183, &format!("depends=\0vermagic={REL} SMP\0"));
        assert_eq!(check_module(&none, REL, &[]), Ok(vec![]));
    }

    #[test]
    fn wrong_modules_are_refused() {
        let info = format!("depends=virtio\0vermagic={REL} SMP\0");
        // Dependency not loaded before it.
        let e = check_module(&module(1, 183, &info), REL, &[]).unwrap_err();
        assert!(e.contains("depends on virtio"), "{e}");
        // Another kernel.
        let e =
            check_module(&module(1, 183, &info), "6.1.0-58-cloud-arm64", &["virtio"]).unwrap_err();
        assert!(e.contains("built for"), "{e}");
        // Not relocatable, not aarch64, no modinfo, not ELF, truncated.
        assert!(check_module(&module(2, 183, &info), REL, &["virtio"]).is_err());
        assert!(check_module(&module(1, 62, &info), REL, &["virtio"]).is_err());
        assert!(check_module(&module(1, 183, "depends=\0"), REL, &[]).is_err());
        assert!(check_module(b"not an elf", REL, &[]).is_err());
        let d = module(1, 183, &info);
        assert!(check_module(&d[..d.len() - 0x30], REL, &["virtio"]).is_err());
    }

    /// A minimal 32-bit Arm ET_REL with a section name table and a
    /// `.modinfo`.
    fn module32(machine: u16, modinfo: &str) -> Vec<u8> {
        let names = b"\0.shstrtab\0.modinfo\0";
        let mut d = vec![0u8; 0x34];
        d[..6].copy_from_slice(b"\x7fELF\x01\x01");
        d[0x10..0x12].copy_from_slice(&1u16.to_le_bytes());
        d[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        let names_off = d.len();
        d.extend_from_slice(names);
        let info_off = d.len();
        d.extend_from_slice(modinfo.as_bytes());
        let shoff = d.len();
        d[0x20..0x24].copy_from_slice(&(shoff as u32).to_le_bytes());
        d[0x2e..0x30].copy_from_slice(&0x28u16.to_le_bytes());
        d[0x30..0x32].copy_from_slice(&3u16.to_le_bytes());
        d[0x32..0x34].copy_from_slice(&1u16.to_le_bytes());
        for (name, off, size) in [
            (0u32, 0usize, 0usize),
            (1, names_off, names.len()),
            (11, info_off, modinfo.len()),
        ] {
            let mut h = [0u8; 0x28];
            h[..4].copy_from_slice(&name.to_le_bytes());
            h[0x10..0x14].copy_from_slice(&(off as u32).to_le_bytes());
            h[0x14..0x18].copy_from_slice(&(size as u32).to_le_bytes());
            d.extend_from_slice(&h);
        }
        d
    }

    #[test]
    fn a_32_bit_arm_module_is_read_as_elf32() {
        const R32: &str = "6.1.0-57-armmp-lpae";
        let info = format!("depends=failover\0vermagic={R32} SMP mod_unload ARMv7 p2v8\0");
        assert_eq!(
            check_module_for(&module32(EM_ARM, &info), EM_ARM, R32, &["failover"]),
            Ok(vec!["failover".to_string()])
        );
        // Another kernel, a dependency not loaded, another machine.
        assert!(check_module_for(&module32(EM_ARM, &info), EM_ARM, REL, &["failover"]).is_err());
        assert!(check_module_for(&module32(EM_ARM, &info), EM_ARM, R32, &[]).is_err());
        assert!(check_module_for(&module32(183, &info), EM_ARM, R32, &["failover"]).is_err());
        // A 64-bit module is not an armhf one, nor a 32-bit one an arm64 one.
        let info64 = format!("depends=\0vermagic={R32} SMP\0");
        assert!(check_module_for(&module(1, EM_ARM, &info64), EM_ARM, R32, &[]).is_err());
        assert!(check_module(&module32(183, &info64), R32, &[]).is_err());
    }

    #[test]
    fn armhf_load_order_has_dependencies_first() {
        let names: Vec<&str> = ARMHF_VIRTIO_MODULES
            .iter()
            .map(|m| module_name(m))
            .collect();
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        assert!(at("failover") < at("net_failover"));
        assert!(at("net_failover") < at("virtio_net"));
        assert_eq!(names[0], "virtio_mmio");
    }

    #[test]
    fn load_order_lists_every_module_once() {
        let order = load_order(&VIRTIO_MODULES);
        assert_eq!(order.lines().count(), VIRTIO_MODULES.len());
        let names: Vec<&str> = order.lines().map(module_name).collect();
        assert_eq!(names[0], "virtio_ring");
        assert_eq!(names[names.len() - 1], "virtio_net");
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} twice");
        }
    }
}
