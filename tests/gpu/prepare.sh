#!/usr/bin/env bash
# tests/gpu/prepare.sh — run HERE (a Debian 12 machine with apt), before a
# session lends the H200: downloads the Debian packages weft links against
# that the GPU machine lacks (ZeroMQ, msgpack-c, libsystemd, OpenBLAS,
# pkg-config and their runtime libraries) into tests/gpu/debs (ignored by
# git) and extracts them into a prefix, tests/gpu/debs/root, the one run.sh
# points CMake, pkg-config and LD_LIBRARY_PATH at; the prefix is then packed
# as tests/gpu/debs/root.tar.xz (46 MiB unpacked, mostly OpenBLAS, about
# 8 MiB packed) and run.sh unpacks it there. Carry "tests/gpu/debs" and
# "tests/gpu/wheels" (together they must stay well under the device tool's
# 64 MiB, the tracked tree included: this prints the sizes).
# Also downloads into tests/gpu/wheels (ignored by git; carry it too) the
# wheels flux_bench.py needs for diffusers, for the H200's python3
# (CPython 3.12, manylinux x86_64; torch 2.11, numpy there already):
# diffusers and the pure-Python packages a torch install lacks, plus
# safetensors, PyYAML and Pillow as cp312 / abi3 binary wheels. The set is
# the minimal one found by installing --no-deps into a clean venv holding
# only torch + numpy until `from diffusers import FluxTransformer2DModel`,
# construction, save_pretrained and from_pretrained worked (2026-12-01).
# Versions are pinned; huggingface_hub and safetensors to the ones the
# H200 image lists (1.33.0, 0.8.0). run.sh installs only those the machine
# lacks (pip --no-index --no-deps --target), so most are unused there
# today; they are carried so the check does not depend on the image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
debs=$here/debs
root=$debs/root
pkgs=(
  # build: headers, .so links, .pc files
  libzmq3-dev libmsgpack-dev libsystemd-dev libopenblas-dev libopenblas-pthread-dev libjansson-dev
  pkgconf pkgconf-bin libpkgconf3
  # runtime of the above
  libzmq5 libmsgpackc2 libsystemd0 libopenblas0 libopenblas0-pthread libgfortran5 libjansson4
  libquadmath0 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0 libgssapi-krb5-2
  libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libcap2 libgcrypt20
  libgpg-error0 liblzma5 libzstd1 liblz4-1
)
wheels=(
  diffusers==0.42.1 huggingface_hub==1.33.0 safetensors==0.8.0 packaging==26.4
  requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 tqdm==4.70.1
  httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 pyyaml==6.0.4 pillow==13.0.0
)
rm -rf "$here/wheels"
mkdir -p "$here/wheels"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$here/wheels" "${wheels[@]}"
n=$(find "$here/wheels" -name '*.whl' | wc -l)
[ "$n" -eq "${#wheels[@]}" ] || { echo "prepare.sh: $n wheels for ${#wheels[@]} names" >&2; exit 1; }

rm -rf "$debs"
mkdir -p "$debs/pkg" "$root"
cd "$debs/pkg"
apt-get download "${pkgs[@]}" >/dev/null
for d in *.deb; do dpkg-deb -x "$d" "$root"; done
rm -rf "$debs/pkg" "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale"
# Keep only what links and runs: no static archives.
find "$root" -name '*.a' -delete
lib=$root/usr/lib/x86_64-linux-gnu
# weft links -lopenblas only: drop the reference BLAS / LAPACK interfaces.
rm -f "$lib"/openblas-pthread/liblapack* "$lib"/openblas-pthread/libblas*
# libzmq.pc names its static dependencies in Requires.private, whose .pc
# files pkg-config would demand even for --cflags: weft links the shared
# library only.
sed -i '/^Requires.private/d' "$lib/pkgconfig/libzmq.pc"
# Debian picks the OpenBLAS flavour with update-alternatives, which
# dpkg-deb -x does not run: link the pthread flavour's .pc into place.
ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$lib/pkgconfig/openblas.pc"
# Check: every .pc weft asks for resolves in the prefix alone.
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$root
for m in libzmq msgpack libsystemd openblas jansson; do
  "$root/usr/bin/pkgconf" --exists "$m" || { echo "prepare.sh: $m does not resolve" >&2; exit 1; }
done
# Pack the prefix (xz: the .so files shrink about 6x); run.sh unpacks it.
tar -C "$debs" -cf - root | xz -T0 -6 > "$debs/root.tar.xz"
rm -rf "$root"
echo "prepare.sh: prefix packed in $debs/root.tar.xz, wheels in $here/wheels"
du -sh "$debs" "$here/wheels"
du -sch "$debs" "$here/wheels" | tail -1
