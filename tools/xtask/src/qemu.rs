//! QEMU command lines for the boards kestrel supports under emulation.

use std::path::Path;
use std::process::Command;

use crate::{Arch, Opts};

/// The QEMU invocation for `opts`, booting `image`. `headless` sends the
/// serial port to stdout with no monitor (tests); otherwise `-nographic`
/// (serial and monitor on the terminal: Ctrl-A X quits).
pub fn command(opts: &Opts, image: &Path, headless: bool) -> Command {
    let mut cmd = match opts.arch {
        Arch::Aarch64 => {
            let mut c = Command::new("qemu-system-aarch64");
            c.args([
                "-M",
                &format!("virt,virtualization=on,gic-version={}", opts.gic),
                "-cpu",
                "max",
            ]);
            c
        }
        Arch::LoongArch64 => {
            let mut c = Command::new("qemu-system-loongarch64");
            c.args(["-M", "virt", "-cpu", "la464"]);
            c
        }
    };
    cmd.args([
        "-smp",
        &opts.smp.to_string(),
        "-m",
        &opts.mem_mib.to_string(),
        "-nic",
        "none",
    ]);
    if headless {
        cmd.args([
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ]);
    } else {
        cmd.arg("-nographic");
    }
    cmd.arg("-kernel").arg(image);
    if !opts.append.is_empty() {
        cmd.args(["-append", &opts.append]);
    }
    cmd
}

/// Boots `image` on the terminal, or (with `debug`) stopped at the first
/// instruction with a gdb server on :1234.
pub fn run_interactive(opts: &Opts, image: &Path, debug: bool) -> Result<(), String> {
    let mut cmd = command(opts, image, false);
    if debug {
        cmd.args(["-s", "-S"]);
        let elf = crate::elf_path(opts.arch);
        eprintln!("QEMU is waiting for gdb on localhost:1234. In another terminal:");
        eprintln!(
            "    gdb-multiarch {} -ex 'target remote :1234'",
            elf.display()
        );
        eprintln!("(docs/debugging.md: symbols of the relocated arm64 image, useful breakpoints)");
    }
    eprintln!("running: {}", render(&cmd));
    eprintln!("(Ctrl-A X quits QEMU)");
    let status = cmd.status().map_err(|e| {
        format!(
            "cannot start {}: {e} (run `make setup`)",
            cmd.get_program().to_string_lossy()
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("QEMU exited with {status}"))
    }
}

/// A command line as a user would type it.
pub fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        if a.contains(' ') || a.is_empty() {
            s.push_str(&format!(" '{a}'"));
        } else {
            s.push(' ');
            s.push_str(&a);
        }
    }
    s
}
