#!/usr/bin/env bash
# test_install.sh — `cmake --install` into a temporary prefix gives a
# working package: weftd and weftctl run, weft.h and weft.pc let the
# example program build against the shared and the static library, and the
# example serves a job through the installed weftd.
# Usage: test_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in bin/weftd bin/weftctl include/weft.h share/doc/weft/weftd.conf.example \
         lib/systemd/system/weftd.service; do
    [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
pc=$(find "$prefix" -name weft.pc | head -n 1)
[ -n "$pc" ] || { echo "weft.pc not installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
ls "$libdir"/libweft.so* "$libdir"/libweft.a > /dev/null

export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
# pkg-config must point into the temporary prefix, wherever it is.
case "$(pkg-config --variable=includedir weft)" in
    "$prefix"/*|*/../*) ;;
    *) echo "weft.pc points outside the prefix: $(pkg-config --variable=includedir weft)"; exit 1 ;;
esac
[ -e "$(pkg-config --variable=includedir weft)/weft.h" ] || { echo "includedir of weft.pc has no weft.h"; exit 1; }

cc=${CC:-cc}
# extra flags, e.g. the sanitizers of a sanitized build
xcflags=${WEFT_TEST_CFLAGS:-}
# shared
$cc $xcflags -std=c11 -Wall -Werror "$src/client/examples/attention.c" \
    $(pkg-config --cflags --libs weft) -lm -o "$work/example_shared"
# static (Requires.private / Libs.private bring ZeroMQ and msgpack)
$cc $xcflags -std=c11 -Wall -Werror "$src/client/examples/attention.c" \
    $(pkg-config --static --cflags --libs weft) -lm -o "$work/example_static" \
    -Wl,-Bstatic -lweft -Wl,-Bdynamic 2>/dev/null \
  || $cc $xcflags -std=c11 -Wall -Werror "$src/client/examples/attention.c" \
    $(pkg-config --static --cflags weft) "$libdir/libweft.a" \
    $(pkg-config --static --libs-only-l --libs-only-L libzmq msgpack) -lpthread -lm \
    -o "$work/example_static"
if ldd "$work/example_static" | grep -q libweft; then
    echo "static example links libweft.so"; exit 1
fi

sock="ipc://$work/w.sock"
"$prefix/bin/weftd" --devices cpu:2 --listen "$sock" 2> "$work/weftd.log" &
pid=$!
"$prefix/bin/weftctl" --endpoint "$sock" --timeout 20000 hello
LD_LIBRARY_PATH="$libdir" "$work/example_shared" "$sock"
"$work/example_static" "$sock"
echo "install: package complete, examples (shared and static) served by the installed weftd"
