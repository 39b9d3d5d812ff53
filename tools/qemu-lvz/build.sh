#!/usr/bin/env bash
# Builds qemu-system-loongarch64 with the LoongArch virtualization extension
# (LVZ) from its pinned source, with kestrel's patches (patches/*.patch, in
# order) and any given on the command line.
#
#   build.sh OUTDIR [PATCH...]
#
# The source is the QEMU-LVZ fork (github.com/Hengyu-Yu/QEMU-LVZ) at the
# commit below and QEMU's keycodemapdb subproject. They are taken from
# $KESTREL_QEMU_LVZ_SRC (a folder with qemu-lvz-42b4d34.tar.xz and
# keycodemapdb-f5772a6.tar.xz) when set, else cloned from GitHub.
# Needs (Debian 12): build-essential ninja-build pkg-config python3-venv
# flex bison libglib2.0-dev libpixman-1-dev libfdt-dev libslirp-dev
# zlib1g-dev git. About 25 minutes on 2 cores.
set -euo pipefail
commit=42b4d3477a73b9511ef22ae9b81fe82a328b9b69
kcm_commit=f5772a62ec52591ff6870b7e8ef32482371f22c6
here=$(dirname "$(readlink -f "$0")")
out=$(readlink -f "${1:?usage: build.sh OUTDIR [PATCH...]}"); shift
patches=("$here"/patches/*.patch)
for p in "$@"; do patches+=("$(readlink -f "$p")"); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=${KESTREL_QEMU_LVZ_SRC:-}
if [ -n "$src" ] && [ -f "$src/qemu-lvz-${commit:0:7}.tar.xz" ]; then
    tar -C "$work" -xJf "$src/qemu-lvz-${commit:0:7}.tar.xz"
    tar -C "$work/qemu-lvz/subprojects" -xJf "$src/keycodemapdb-${kcm_commit:0:7}.tar.xz"
else
    git clone -q https://github.com/Hengyu-Yu/QEMU-LVZ "$work/qemu-lvz"
    git -C "$work/qemu-lvz" checkout -q "$commit"
    git clone -q https://gitlab.com/qemu-project/keycodemapdb.git "$work/qemu-lvz/subprojects/keycodemapdb"
    git -C "$work/qemu-lvz/subprojects/keycodemapdb" checkout -q "$kcm_commit"
fi
cd "$work/qemu-lvz"
for p in "${patches[@]}"; do
    [ -f "$p" ] || continue
    echo "applying $(basename "$p")"
    patch -s -p1 <"$p"
done
# The floating-point test programs need subprojects the emulator does not.
sed -i '1i subdir_done()' tests/fp/meson.build
mkdir build && cd build
../configure --target-list=loongarch64-softmmu --disable-docs --disable-download \
    --enable-fdt=system --without-default-features --enable-slirp --disable-werror >/dev/null
ninja -j"$(nproc)" qemu-system-loongarch64
mkdir -p "$out"
cp qemu-system-loongarch64 "$out/" && strip "$out/qemu-system-loongarch64"
echo "$out/qemu-system-loongarch64"
