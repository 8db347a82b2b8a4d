#!/usr/bin/env bash
# bench/run.sh — run the CPU benchmarks from one build and write BENCHMARKS.md
# (the hand-kept sections from "## Reading these figures" on stay).
# Usage: bench/run.sh [BUILD_DIR]   (build with -DCMAKE_BUILD_TYPE=Release)
# The CPU FLUX forward beside diffusers in torch is separate (it installs
# torch from PyPI into a virtual environment): bench/flux_cpu_torch.sh
# BUILD_DIR prints its table, which goes into BENCHMARKS.md by hand; so
# does the CPU attention beside torch's SDPA (bench/attention_cpu_torch.sh).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/BENCHMARKS.md"
weftd="$build/daemon/weftd"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

{
    echo "# weft benchmarks"
    echo
    echo "Made by \`bench/run.sh $build\` on $(date -u +%Y-%m-%d) — $(nproc) cores,"
    echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),"
    echo "$(free -g | awk '/Mem:/ {print $2}') GiB. Every figure is a ratio against a baseline"
    echo "measured in the same run on the same machine."
    echo
    echo "## CPU attention beside OpenBLAS sgemm (target: ≥ 50%)"
    echo
    echo "Command: \`$build/bench/bench_attention\`"
    echo
    "$build/bench/bench_attention"
    echo
    echo "## Round trip of a tiny job beside raw ZeroMQ (target: ≤ 2×)"
    echo
    echo "Command: \`$build/bench/bench_roundtrip $weftd\`"
    echo
    "$build/bench/bench_roundtrip" "$weftd"
    echo
    echo "## Submitting a 256 MiB job beside memcpy (target: ≥ 25%)"
    echo
    echo "Command: \`$build/bench/bench_submit $weftd\`"
    echo
    "$build/bench/bench_submit" "$weftd"
    echo
    echo "The same with the environment units/weftd.service gives the daemon"
    echo "(\`GLIBC_TUNABLES=glibc.malloc.hugetlb=1 $build/bench/bench_submit $weftd\`):"
    echo
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$build/bench/bench_submit" "$weftd"
    echo
    echo "## Resident models: load, forward per mesh, live re-shard (target: re-shard ≥ 5× unload + load)"
    echo
    echo "Command: \`$build/bench/bench_models $weftd\`"
    echo
    "$build/bench/bench_models" "$weftd"
    echo
    # Sections written by hand (reading notes, GPU and cluster figures made
    # elsewhere) are kept as they are.
    if [ -f "$out" ]; then
        sed -n '/^## Reading these figures/,$p' "$out"
    fi
} > "$tmp"
mv "$tmp" "$out"
trap - EXIT
cat "$out"
