//! The device tree kestrel generates for a LoongArch guest (unless the
//! config gives one): memory from 0, one `cpu@N` per vCPU (reg = CPUID),
//! the console 16550 and the power-off register, `/chosen` with the command
//! line. Enough for kestrel's test guest and a description for others.

use alloc::format;
use alloc::vec::Vec;

use crate::fdt_build::FdtWriter;
use crate::vmconfig::VmSpec;

use crate::guest::loongarch::layout;

use super::{GUEST_POWEROFF, GUEST_UART};

/// The guest DTB for `spec` (empty if the writer fails, which it cannot
/// for these sizes).
pub fn generate(spec: &VmSpec) -> Vec<u8> {
    let mut w = FdtWriter::new();
    w.begin_node("")
        .prop_strs(
            "compatible",
            &["kestrel,guest-loongarch64", "linux,dummy-loongson3"],
        )
        .prop_str("model", "kestrel guest")
        .prop_u32("#address-cells", 2)
        .prop_u32("#size-cells", 2);
    let serial = format!("serial@{GUEST_UART:x}");
    w.begin_node("chosen")
        .prop_str("bootargs", spec.cmdline)
        .prop_str("stdout-path", &format!("/{serial}"));
    if let Some((s, e)) = spec.initrd_range() {
        // RAM offsets to guest physical. An initrd that straddles offset
        // LOW_RAM is not contiguous in guest physical memory: such a VM
        // needs its initrd wholly above or below 256 MiB of RAM.
        w.prop_u64("linux,initrd-start", layout::gpa_of(s))
            .prop_u64("linux,initrd-end", layout::gpa_of(e - 1) + 1);
    }
    w.end_node();
    w.begin_node("memory@0")
        .prop_str("device_type", "memory")
        .prop_reg("reg", &layout::ram_ranges(spec.ram_size))
        .end_node();
    w.begin_node("cpus")
        .prop_u32("#address-cells", 1)
        .prop_u32("#size-cells", 0);
    for i in 0..u32::from(spec.vcpus) {
        w.begin_node(&format!("cpu@{i}"))
            .prop_str("device_type", "cpu")
            .prop_str("compatible", "loongson,la464")
            .prop_u32("reg", i)
            .end_node();
    }
    w.end_node();
    w.begin_node(&serial)
        .prop_str("compatible", "ns16550a")
        .prop_reg("reg", &[(GUEST_UART, 0x100)])
        .prop_u32("clock-frequency", 100_000_000)
        .end_node();
    w.begin_node("poweroff")
        .prop_str("compatible", "kestrel,poweroff-byte")
        .prop_reg("reg", &[(GUEST_POWEROFF, 1)])
        .prop_u32("value", 0x34)
        .end_node();
    w.end_node();
    w.finish().unwrap_or_default()
}
