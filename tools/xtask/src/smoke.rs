//! QEMU smoke tests: boot each image, read what it printed on the serial
//! port, decide pass/fail from that and from how QEMU ended
//! (`cargo xtask smoke [--case NAME] [--list]`). Here: kestrel's own boot
//! cases and the suite's order of every case set (a boot case's boot and
//! judge are in boot_case.rs); and `cargo xtask check-fp`.

use std::process::Command;

use crate::boot_case::{self, Case, Ending, TIMEOUT};
use crate::suite::{self, Suite};
use crate::{build_image, Arch, Opts};

fn boot_ok(arch: Arch, gic: u32, irqchip: &'static str) -> Case {
    let mut expect = vec![
        " kestrel ",
        " cpus:     4 of 4 online",
        "ticking on 4 cpus",
        irqchip,
        "kestrel: work done, powering off (status 0)",
    ];
    match arch {
        Arch::Aarch64 => expect.extend([" arch:     arm64", " backend:  EL2"]),
        Arch::LoongArch64 => expect.extend([
            " arch:     loongarch64",
            " backend:  trap-and-emulate",
            "LVZ absent",
        ]),
    }
    Case {
        name: match (arch, gic) {
            (Arch::Aarch64, 3) => "arm64 GICv3 -smp 4 boot",
            (Arch::Aarch64, _) => "arm64 GICv2 -smp 4 boot",
            (Arch::LoongArch64, _) => "loongarch64 -smp 4 boot",
        },
        opts: Opts {
            arch,
            smp: 4,
            gic,
            append: crate::TEST_APPEND.into(),
            ..Opts::default()
        },
        ending: Ending::PowerOff,
        expect,
        reject: vec!["FATAL", "panic", "did not come online", "ERROR"],
        extra: vec![],
        machine: None,
        check: None,
        timeout: TIMEOUT,
        guest: None,
    }
}

/// Bad input: a boot module (QEMU `-initrd`) that is not a VM package, a
/// gzipped cpio as a Linux initrd would be. kestrel must name it, refuse
/// it and go on with its embedded package (none: no VMs, status 0).
fn module_refused(arch: Arch) -> Case {
    let mut case = boot_ok(arch, 3, " irqchip:  ");
    case.name = match arch {
        Arch::Aarch64 => "arm64 boot module that is not a VM package is refused",
        Arch::LoongArch64 => "loongarch64 boot module that is not a VM package is refused",
    };
    let file = crate::root()
        .join("build")
        .join(arch.name())
        .join("not-a-package.cpio.gz");
    // The gzip magic and a cpio "newc" header, then filler: 64 KiB.
    let mut bytes = vec![0x1f, 0x8b, 0x08, 0x00];
    bytes.extend_from_slice(b"070701");
    bytes.resize(64 << 10, 0x5a);
    let written = file
        .parent()
        .map(std::fs::create_dir_all)
        .transpose()
        .and_then(|_| std::fs::write(&file, &bytes));
    if let Err(e) = written {
        eprintln!("smoke: {}: {e}", file.display());
    }
    case.opts.module = Some(file);
    case.expect.extend([
        "ERROR boot module at [",
        "not a kestrel VM package",
        "ignored",
    ]);
    case.reject.retain(|r| *r != "ERROR");
    case.reject.push(" vm[0] ");
    case
}

fn cases() -> Vec<Case> {
    vec![
        boot_ok(Arch::Aarch64, 3, " irqchip:  GICv3"),
        boot_ok(Arch::Aarch64, 2, " irqchip:  GICv2"),
        boot_ok(Arch::LoongArch64, 0, " irqchip:  LoongArch"),
        module_refused(Arch::Aarch64),
        module_refused(Arch::LoongArch64),
        crate::vmtests_la64::bare_case(),
        crate::vmtests_la64::bare_attack_case(),
        crate::vmtests_arm64::bare_case(3),
        crate::vmtests_arm64::bare_case(2),
        crate::vmtests_arm64::bare_case_aarch32(),
        // Bad input: without virtualization=on the CPU starts at EL1, where a
        // hypervisor cannot run: kestrel must say so and halt.
        Case {
            name: "arm64 entered at EL1 is refused",
            opts: Opts {
                arch: Arch::Aarch64,
                smp: 1,
                append: crate::TEST_APPEND.into(),
                ..Opts::default()
            },
            ending: Ending::Halt,
            expect: vec!["entered it at EL1", "must be entered at EL2", "halting"],
            reject: vec![" cpus:"],
            extra: vec![],
            machine: Some("virt,gic-version=3"),
            check: None,
            timeout: TIMEOUT,
            guest: None,
        },
    ]
}

const SUITE: Suite = Suite {
    command: "smoke",
    summary_prefix: "",
    what: "QEMU smoke test(s)",
    prepare: None,
};

/// `cargo xtask smoke [--case NAME] [--list]`: the Linux cases, then every
/// boot case; prints the serial log of each failure.
pub fn run(args: &[String]) -> Result<(), String> {
    let sel = suite::parse_args(&SUITE, args, None)?;
    // The console and configs cases need the Linux guest assets too: they
    // run (or are skipped) with the Linux cases.
    let mut tests = crate::vmtests_linux::smoke_tests(
        &sel,
        &[
            (crate::console_test::CASE, crate::console_test::test),
            (crate::configs_test::CASE, crate::configs_test::test),
        ],
    );
    tests.extend(crate::vmtests_linux::smoke_tests_la64(&sel));
    tests.extend(cases().into_iter().map(boot_case::test));
    tests.extend(crate::fwboot::tests());
    tests.extend(crate::fwboot_la64::tests());
    suite::run(&SUITE, &sel, tests)
}

/// Disassembles the image and fails if any instruction names an FP/SIMD
/// register: lazy FP switching is unsound if the hypervisor uses them.
pub fn check_no_fp(arch: Arch) -> Result<(), String> {
    let elf = crate::elf_path(arch);
    if !elf.exists() {
        build_image(arch, &[])?;
    }
    let out = Command::new(crate::llvm_tool("llvm-objdump")?)
        .args(["-d", "--no-show-raw-insn"])
        .arg(&elf)
        .output()
        .map_err(|e| format!("cannot run llvm-objdump: {e}"))?;
    if !out.status.success() {
        return Err(format!("llvm-objdump failed on {}", elf.display()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut bad = Vec::new();
    let mut insns = 0usize;
    let mut symbol = String::new();
    for line in text.lines() {
        if let Some(sym) = symbol_of(line) {
            symbol = sym.to_string();
            continue;
        }
        // "  addr: \tmnemonic\toperands  // comment" or "<sym>" headers.
        let Some(insn) = instruction_of(line) else {
            continue;
        };
        insns += 1;
        if uses_fp(arch, &insn) && !FP_ALLOWED.contains(&symbol.as_str()) {
            bad.push(line.trim().to_string());
        }
    }
    if insns == 0 {
        return Err(format!(
            "{}: disassembly has no instructions",
            elf.display()
        ));
    }
    if bad.is_empty() {
        println!(
            "check-fp: {}: {insns} instructions, none uses an FP/SIMD register",
            arch.name()
        );
        Ok(())
    } else {
        for b in bad.iter().take(20) {
            eprintln!("    {b}");
        }
        Err(format!(
            "{}: {} instructions use FP/SIMD registers",
            arch.name(),
            bad.len()
        ))
    }
}

/// The only functions allowed to use FP/SIMD (and SVE) registers: the
/// hand-written save/restore of a guest's FP state for lazy switching
/// (kernel/src/arch/aarch64/vm/fp.rs, kernel/src/arch/loongarch64/fp.rs).
const FP_ALLOWED: &[&str] = &[
    "kestrel_fp_save",
    "kestrel_fp_restore",
    "kestrel_sve_save",
    "kestrel_sve_restore",
    "kestrel_sve_widen",
    "kestrel_sve_probe",
    "kestrel_la_fp_save",
    "kestrel_la_fp_restore",
];

/// The symbol a `llvm-objdump -d` label line opens ("0000000000001234 <name>:").
fn symbol_of(line: &str) -> Option<&str> {
    let (addr, rest) = line.trim_end().split_once(' ')?;
    if addr.is_empty() || !addr.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    rest.strip_prefix('<')?.strip_suffix(">:")
}

/// The instruction text (mnemonic and operands, no comment) of one
/// `llvm-objdump -d` line, or `None` for headers, blank lines and data words.
fn instruction_of(line: &str) -> Option<String> {
    // "   addr:   [raw bytes]\tmnemonic\toperands  // comment"
    let (addr, rest) = line.split_once(':')?;
    let addr = addr.trim();
    if addr.is_empty() || !addr.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut fields = rest
        .split('\t')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .peekable();
    // Raw bytes of data words ("00 b0 03 01") come first when present.
    let is_bytes = |f: &str| {
        f.split(' ')
            .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()))
    };
    if fields.peek().is_some_and(|f| is_bytes(f)) {
        fields.next();
    }
    let insn = fields.collect::<Vec<_>>().join("\t");
    // Data in the text section (the Image header) is not executed.
    if insn.is_empty() || insn.starts_with('.') {
        return None;
    }
    let insn = insn.split("//").next().unwrap_or("");
    let insn = insn.split('#').next().unwrap_or("");
    let insn = insn.split('<').next().unwrap_or("");
    Some(insn.trim().to_string())
}

/// SVE instructions that name no vector register.
const SVE_MNEMONICS: &[&str] = &[
    "rdvl", "addvl", "addpl", "setffr", "rdffr", "wrffr", "pfalse", "ptrue",
];

fn uses_fp(arch: Arch, insn: &str) -> bool {
    let mut parts = insn.split_whitespace();
    let mnemonic = parts.next().unwrap_or("");
    let tokens =
        insn.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.'));
    match arch {
        Arch::Aarch64 => {
            // No integer arm64 mnemonic starts with 'f'; vector registers
            // appear as q/v/d/s/h/b followed by 0-31, or as FPCR/FPSR; SVE's
            // as z0-z31, p0-p15, FFR, its length through rdvl/addvl/addpl
            // and ZCR_ELx.
            mnemonic.starts_with('f')
                || SVE_MNEMONICS.contains(&mnemonic)
                || tokens.skip(1).any(|t| {
                    let t = t.split('.').next().unwrap_or("");
                    let t = t.split('/').next().unwrap_or("");
                    let lower = t.to_ascii_lowercase();
                    let reg = |first: &[u8], below: u32| {
                        t.len() >= 2
                            && first.contains(&lower.as_bytes()[0])
                            && t[1..].parse::<u32>().is_ok_and(|n| n < below)
                    };
                    lower == "fpcr"
                        || lower == "fpsr"
                        || lower == "ffr"
                        || lower.starts_with("zcr_el")
                        || lower == "s3_0_c1_c2_0"
                        || lower == "s3_4_c1_c2_0"
                        || reg(b"qvdshbz", 32)
                        || reg(b"p", 16)
                })
        }
        Arch::LoongArch64 => tokens.skip(1).any(|t| {
            let Some(r) = t.strip_prefix('$') else {
                return false;
            };
            let num = |p: &str| {
                r.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.parse::<u32>().is_ok())
            };
            num("f")
                || num("fa")
                || num("ft")
                || num("fs")
                || num("fcc")
                || num("fcsr")
                || num("vr")
                || num("xr")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objdump_lines() {
        assert_eq!(
            instruction_of("target/x/kestrel:\tfile format elf64-littleaarch64"),
            None
        );
        assert_eq!(instruction_of("0000000000000000 <_start>:"), None);
        assert_eq!(
            instruction_of("      10: 00 b0 03 01  \t.word\t0x0103b000"),
            None
        );
        assert_eq!(
            instruction_of("       0:      \tb\t0x800 <kestrel_primary_entry>").as_deref(),
            Some("b\t0x800")
        );
        let line = "    1234:      \tstr\tq0, [sp, #16]";
        let insn = instruction_of(line).unwrap();
        assert!(uses_fp(Arch::Aarch64, &insn), "{insn}");
        let la = "9000000000200010:      \tfst.d\t$fa0, $sp, 8";
        assert!(uses_fp(Arch::LoongArch64, &instruction_of(la).unwrap()));
    }

    #[test]
    fn symbol_labels() {
        assert_eq!(
            symbol_of("0000000000012340 <kestrel_fp_save>:"),
            Some("kestrel_fp_save")
        );
        assert_eq!(symbol_of("   12340: \tstp\tq0, q1, [x0]"), None);
        assert_eq!(symbol_of("Disassembly of section .text:"), None);
        assert!(FP_ALLOWED.contains(&"kestrel_fp_restore"));
    }

    #[test]
    fn fp_detector_arm64() {
        assert!(uses_fp(Arch::Aarch64, "fmov\td0, x1"));
        assert!(uses_fp(Arch::Aarch64, "ldr\tq0, [x1]"));
        assert!(uses_fp(Arch::Aarch64, "stp\tq0, q1, [sp, #-32]!"));
        assert!(uses_fp(Arch::Aarch64, "movi\tv0.2d, #0000000000000000"));
        assert!(uses_fp(Arch::Aarch64, "msr\tFPCR, x0"));
        assert!(!uses_fp(Arch::Aarch64, "ldr\tx0, [x1, #8]"));
        for sve in [
            "str\tz3, [x0, #3, mul vl]",
            "ldr\tp15, [x1, #15, mul vl]",
            "rdffr\tp0.b",
            "wrffr\tp0.b",
            "rdvl\tx0, #1",
            "ld1d\t{ z0.d }, p0/z, [x0]",
            "msr\tZCR_EL2, x3",
            "mrs\tx0, s3_0_c1_c2_0",
        ] {
            assert!(uses_fp(Arch::Aarch64, sve), "{sve}");
        }
        assert!(!uses_fp(Arch::Aarch64, "add\tx15, x16, #1"));
        assert!(!uses_fp(Arch::Aarch64, "msr\ts3_0_c1_c0_0, x0"));
        assert!(!uses_fp(Arch::Aarch64, "stp\tx29, x30, [sp, #-16]!"));
        assert!(!uses_fp(Arch::Aarch64, "b.ne\t0x1234"));
    }

    #[test]
    fn fp_detector_loongarch() {
        assert!(uses_fp(Arch::LoongArch64, "fld.d\t$fa0, $a0, 0"));
        assert!(uses_fp(Arch::LoongArch64, "vld\t$vr0, $a0, 0"));
        assert!(uses_fp(Arch::LoongArch64, "movfcsr2gr\t$a0, $fcsr0"));
        assert!(uses_fp(Arch::LoongArch64, "xvld\t$xr1, $a0, 0"));
        assert!(!uses_fp(Arch::LoongArch64, "ld.d\t$fp, $sp, 16"));
        assert!(!uses_fp(Arch::LoongArch64, "addi.d\t$sp, $sp, -32"));
        assert!(!uses_fp(Arch::LoongArch64, "st.d\t$s0, $sp, 8"));
    }
}
