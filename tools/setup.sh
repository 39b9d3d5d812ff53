#!/usr/bin/env bash
# Installs what kestrel needs to build and boot, if it is missing:
#   - the Rust toolchain pinned in rust-toolchain.toml, with its targets and components
#   - QEMU 10 (qemu-system-arm, qemu-system-misc) from Debian bookworm-backports
#   - cargo-fuzz (from crates.io) for the fuzz targets in tools/fuzz
#   - the LoongArch emulator with the virtualization extension (LVZ), which
#     stock QEMU lacks (tools/qemu-lvz/README.md): unpacked from a prebuilt
#     copy where one is present, else rebuilt from its pinned source
#   - e2fsprogs and cpio (Debian) for the Linux guest's root filesystem image
#     and initramfs (`cargo xtask guest-assets`), tmux for the console test
#     (it types into `cargo xtask run` in a terminal), gdb-multiarch for
#     `make debug` (docs/debugging.md)
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

# The LVZ emulator: `qemu_lvz_dir`/qemu-system-loongarch64 (xtask asks
# `setup.sh lvz-path`). It is the QEMU-LVZ fork with kestrel's patches
# (tools/qemu-lvz/patches); the folder is named after the patch set, so a
# new patch means a new build. A prebuilt copy is used when one is present
# ($KESTREL_QEMU_LVZ_SRC, else ../shared/qemu-lvz beside the checkout) and
# tools/qemu-lvz/prebuilt.sha256 lists its checksum for this patch set;
# otherwise tools/qemu-lvz/build.sh rebuilds it from the pinned source (the
# tarballs in that folder, or GitHub), about 25 minutes, once.
lvz_id() { cat "$here"/tools/qemu-lvz/patches/*.patch | sha256sum | cut -c1-12; }
qemu_lvz_dir() { printf '%s/kestrel/qemu-lvz-%s' "${XDG_CACHE_HOME:-$HOME/.cache}" "$(lvz_id)"; }

lvz_build_deps() {
    local pkgs=(build-essential ninja-build pkg-config python3-venv flex bison
        libglib2.0-dev libpixman-1-dev libfdt-dev libslirp-dev zlib1g-dev git)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing what the LVZ emulator builds with (apt-get install ${missing[*]})"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
            die "could not install ${missing[*]} (needed to build the LVZ emulator)"
    else
        die "the LVZ emulator must be built and needs: ${missing[*]} (install them as root, then re-run)"
    fi
}

install_qemu_lvz() {
    local dir bin src="" id
    dir=$(qemu_lvz_dir)
    bin=$dir/qemu-system-loongarch64
    id=$(lvz_id)
    if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
        return 0
    fi
    for d in "${KESTREL_QEMU_LVZ_SRC:-}" "$here/../shared/qemu-lvz" /work/shared/qemu-lvz; do
        if [ -n "$d" ] && [ -f "$d/qemu-system-loongarch64.xz" ]; then src=$(cd "$d" && pwd); break; fi
    done
    mkdir -p "$dir"
    if [ -n "$src" ]; then
        xz -dc "$src/qemu-system-loongarch64.xz" >"$bin.tmp"
        local sum
        sum=$(sha256sum "$bin.tmp" | cut -d' ' -f1)
        if grep -qs "^$sum $id\b" "$here/tools/qemu-lvz/prebuilt.sha256"; then
            say "installing the LVZ emulator from $src/qemu-system-loongarch64.xz into $dir"
            chmod +x "$bin.tmp" && mv "$bin.tmp" "$bin"
        else
            rm -f "$bin.tmp"
            say "the prebuilt LVZ emulator in $src lacks kestrel's patches (tools/qemu-lvz/patches, set $id): rebuilding it from the pinned source there (once, about 25 minutes)"
        fi
    fi
    if [ ! -x "$bin" ]; then
        lvz_build_deps
        KESTREL_QEMU_LVZ_SRC=$src bash "$here/tools/qemu-lvz/build.sh" "$dir" >"$dir/build.log" 2>&1 ||
            die "could not build the LVZ emulator (log: $dir/build.log; tools/qemu-lvz/README.md says what it needs)"
    fi
    "$bin" --version >/dev/null 2>&1 ||
        die "$bin does not run: it needs libglib2.0-0 libslirp0 libfdt1 zlib1g libpcre2-8-0 (QEMU 10 from bookworm-backports brings them)"
}

# A command in PATH or in /sbin, /usr/sbin (not in a user's PATH on Debian).
have_cmd() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/sbin/$1" ] || [ -x "/usr/sbin/$1" ]
}

install_guest_tools() {
    local missing=()
    have_cmd mke2fs && have_cmd debugfs && have_cmd e2fsck || missing+=(e2fsprogs)
    have_cmd cpio || missing+=(cpio)
    have_cmd tmux || missing+=(tmux)
    have_cmd gdb-multiarch || missing+=(gdb-multiarch)
    [ ${#missing[@]} -eq 0 ] && return 0
    # Only the Linux guest cases (and `make debug`) need them: without them
    # those are skipped or fail saying why, so this warns instead of failing.
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing ${missing[*]} (apt-get install ${missing[*]})"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
            say "warning: could not install ${missing[*]}: the Linux guest cases need e2fsprogs, cpio and tmux; make debug needs gdb-multiarch"
    else
        say "warning: ${missing[*]} missing (install as root: apt-get install ${missing[*]}): the Linux guest cases need e2fsprogs, cpio and tmux; make debug needs gdb-multiarch"
    fi
}

case "${1:-all}" in
    rust) install_rust ;;
    qemu) install_qemu; install_qemu_lvz ;;
    lvz) install_qemu_lvz ;;
    lvz-path) printf '%s/qemu-system-loongarch64\n' "$(qemu_lvz_dir)" ;;
    fuzz) install_rust; install_fuzz ;;
    guest) install_guest_tools ;;
    all) install_rust; install_qemu; install_qemu_lvz; install_fuzz; install_guest_tools ;;
    *) die "usage: $0 [all|rust|qemu|lvz|lvz-path|fuzz|guest]" ;;
esac
