#!/usr/bin/env bash
# tests/gpu/prepare.sh — run HERE (a Debian 12 machine with apt), before a
# session lends the H200: downloads the Debian packages weft links against
# that the GPU machine lacks (ZeroMQ, msgpack-c, libsystemd, OpenBLAS,
# pkg-config and their runtime libraries) into tests/gpu/debs (ignored by
# git) and extracts them into tests/gpu/debs/root, the prefix run.sh
# points CMake, pkg-config and LD_LIBRARY_PATH at. The device tool copies
# the working tree, so the folder travels with it: carry "tests/gpu/debs"
# (it must stay well under the 64 MiB limit; this prints its size).
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
echo "prepare.sh: prefix $root"
du -sh "$debs"
