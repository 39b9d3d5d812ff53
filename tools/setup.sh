#!/usr/bin/env bash
# Installs what kestrel needs to build and boot, if it is missing:
#   - the Rust toolchain pinned in rust-toolchain.toml, with its targets and components
#   - QEMU 10 (qemu-system-arm, qemu-system-misc) from Debian bookworm-backports
#   - cargo-fuzz (from crates.io) for the fuzz targets in tools/fuzz
#   - e2fsprogs and cpio (Debian) for the Linux guest's root filesystem image
#     and initramfs (`cargo xtask guest-assets`)
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

need_qemu_major=10
here=$(cd "$(dirname "$0")/.." && pwd)

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

qemu_ok() {
    local bin=$1 v
    command -v "$bin" >/dev/null 2>&1 || return 1
    v=$("$bin" --version | sed -n 's/^QEMU emulator version \([0-9]*\).*/\1/p')
    [ -n "$v" ] && [ "$v" -ge "$need_qemu_major" ]
}

install_qemu() {
    if qemu_ok qemu-system-aarch64 && qemu_ok qemu-system-loongarch64; then
        return 0
    fi
    local id="" codename=""
    if [ -r /etc/os-release ]; then
        # shellcheck disable=SC1091
        . /etc/os-release
        id=${ID:-}
        codename=${VERSION_CODENAME:-}
    fi
    if [ "$id" != debian ]; then
        die "QEMU >= $need_qemu_major (qemu-system-aarch64 and qemu-system-loongarch64) is missing. \
This script installs it only on Debian; on ${id:-this system} install QEMU $need_qemu_major or newer yourself and re-run."
    fi
    if [ "$(id -u)" -ne 0 ]; then
        die "QEMU >= $need_qemu_major is missing. Run as root (or: sudo $0), or install qemu-system-arm and qemu-system-misc >= $need_qemu_major yourself."
    fi
    export DEBIAN_FRONTEND=noninteractive
    local extra=()
    if [ "$codename" = bookworm ]; then
        local list=/etc/apt/sources.list.d/kestrel-bookworm-backports.list
        if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
            say "enabling bookworm-backports for QEMU $need_qemu_major ($list)"
            echo 'deb http://deb.debian.org/debian bookworm-backports main' >"$list"
        fi
        extra=(-t bookworm-backports)
    fi
    say "installing QEMU (apt-get ${extra[*]} install qemu-system-arm qemu-system-misc)"
    apt-get update -qq
    apt-get install -y -qq "${extra[@]}" --no-install-recommends qemu-system-arm qemu-system-misc >/dev/null
    qemu_ok qemu-system-aarch64 && qemu_ok qemu-system-loongarch64 ||
        die "installed QEMU is older than $need_qemu_major; install QEMU $need_qemu_major or newer"
}

install_rust() {
    command -v rustup >/dev/null 2>&1 ||
        die "rustup is missing: install it from your distribution or rustup.rs, then re-run"
    # Reading rust-toolchain.toml makes rustup install the pinned toolchain with its
    # listed targets and components.
    (cd "$here" && rustup show active-toolchain >/dev/null 2>&1) ||
        (cd "$here" && rustup toolchain install) ||
        die "could not install the toolchain pinned in rust-toolchain.toml"
    local tc
    tc=$(cd "$here" && rustup show active-toolchain | cut -d' ' -f1)
    # softfloat for the hypervisor (it must never touch FP), hard-float for
    # the arm64 test guest (it checks FP/SIMD registers survive switches),
    # musl for the Linux guest's workloads (tools/guests/seedbench).
    (cd "$here" && rustup target add --toolchain "$tc" aarch64-unknown-none-softfloat aarch64-unknown-none \
        aarch64-unknown-linux-musl >/dev/null 2>&1) ||
        die "rustup could not add the aarch64-unknown-none(-softfloat) and aarch64-unknown-linux-musl targets to $tc"
    (cd "$here" && rustup component add --toolchain "$tc" rust-src llvm-tools clippy rustfmt >/dev/null 2>&1) ||
        die "rustup could not add rust-src/llvm-tools/clippy/rustfmt to $tc"
}

install_fuzz() {
    # libfuzzer-sys compiles libFuzzer (C++).
    if ! command -v c++ >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            say "installing a C++ compiler for libFuzzer (apt-get install g++)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null ||
                die "could not install g++ (needed to build the fuzz targets)"
        else
            die "a C++ compiler (c++) is missing: install g++ (the fuzz targets build libFuzzer)"
        fi
    fi
    if (cd "$here" && cargo fuzz --version >/dev/null 2>&1); then
        return 0
    fi
    say "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    (cd "$here" && cargo install cargo-fuzz --locked >/dev/null 2>&1) ||
        die "could not install cargo-fuzz; run: cargo install cargo-fuzz --locked"
}

# A command in PATH or in /sbin, /usr/sbin (not in a user's PATH on Debian).
have_cmd() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/sbin/$1" ] || [ -x "/usr/sbin/$1" ]
}

install_guest_tools() {
    local missing=()
    have_cmd mke2fs && have_cmd debugfs && have_cmd e2fsck || missing+=(e2fsprogs)
    have_cmd cpio || missing+=(cpio)
    [ ${#missing[@]} -eq 0 ] && return 0
    # Only the Linux guest cases need them: without them those are skipped
    # (`cargo xtask guest-assets` says why), so this warns instead of failing.
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing ${missing[*]} for the Linux guest images (apt-get install ${missing[*]})"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
            say "warning: could not install ${missing[*]}: the Linux guest cases will be skipped"
    else
        say "warning: ${missing[*]} missing (install as root: apt-get install ${missing[*]}): the Linux guest cases will be skipped"
    fi
}

case "${1:-all}" in
    rust) install_rust ;;
    qemu) install_qemu ;;
    fuzz) install_rust; install_fuzz ;;
    guest) install_guest_tools ;;
    all) install_rust; install_qemu; install_fuzz; install_guest_tools ;;
    *) die "usage: $0 [all|rust|qemu|fuzz|guest]" ;;
esac
