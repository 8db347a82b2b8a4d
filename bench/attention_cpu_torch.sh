#!/usr/bin/env bash
# bench/attention_cpu_torch.sh — weft's CPU attention kernel beside torch's
# scaled_dot_product_attention on the same machine and cores, in the same
# run. Not run by CI: it needs torch from PyPI.
#
# Usage: bench/attention_cpu_torch.sh BUILD_DIR [LABEL]
#   BUILD_DIR: a Release build (cmake -DCMAKE_BUILD_TYPE=Release) with
#   bench/bench_attention; LABEL names the result files.
#
# What it does:
#  1. makes (once) the virtual environment $WEFT_TORCH_VENV (default
#     ~/.cache/weft/venv-torch) with the versions pinned in
#     bench/requirements-torch.txt (as bench/model_cpu_torch.sh; only
#     torch is used here).
#  2. for each thread count n in $THREADS (default "1 2"): one python
#     process pinned to cores 0..n-1 (taskset) holds torch with
#     torch.set_num_threads(n) and starts `bench_attention --time` (n
#     backend contexts, OpenBLAS at 1 thread each) pinned the same; for
#     each shape of $SHAPES (S:D:H,..., default in attention_cpu_torch.py:
#     S 1024-8192, D 64 and 128, B 1, f32, non-causal) $ROUNDS (default
#     5) rounds alternate the sides, each timing $ITERS (default 3)
#     calls and keeping their median.
#     With BASELINE_BUILD set (another build's directory, e.g. the code
#     before a change with this bench_attention.c), its bench_attention
#     runs in the same rounds as a third side, labelled "before", and
#     the build under test is labelled "after".
#  3. prints a markdown table (also $WORK/table-LABEL.md, $WORK default
#     /var/tmp/weft-attention-cpu-torch): medians and min-max over the
#     rounds, weft speed / torch speed of the medians and per round.
# Set NO_PIN=1 to skip taskset. Other load on the machine shows as spread.
# torch runs with OMP_WAIT_POLICY=PASSIVE unless it is set (see
# flux_cpu_torch.sh: libgomp's spinning is torch's worse setting on a
# shared machine). OPENBLAS_CORETYPE passes through to weft's side: the
# tile path (non-causal f32, D a multiple of 16 on an AVX-512 build) does
# not use OpenBLAS, the cblas path of an older build does.
set -euo pipefail
build=$(cd "${1:?usage: bench/attention_cpu_torch.sh BUILD_DIR [LABEL]}" && pwd)
label=${2:-$(basename "$build")}
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/var/tmp/weft-attention-cpu-torch}
threads=${THREADS:-1 2}
rounds=${ROUNDS:-5}
iters=${ITERS:-3}
bench="$build/bench/bench_attention"

[ -x "$bench" ] || { echo "attention_cpu_torch.sh: no $bench" >&2; exit 1; }
sides=(--bench "weft=$bench")
if [ -n "${BASELINE_BUILD:-}" ]; then
    base="$(cd "$BASELINE_BUILD" && pwd)/bench/bench_attention"
    [ -x "$base" ] || { echo "attention_cpu_torch.sh: no $base" >&2; exit 1; }
    sides=(--bench "after=$bench" --bench "before=$base")
fi

. "$here/torch_venv.sh"
mkdir -p "$work"

shapes=()
[ -n "${SHAPES:-}" ] && shapes=(--shapes "$SHAPES")
results=()
for n in $threads; do
    pin=(taskset -c "0-$((n - 1))")
    [ "${NO_PIN:-0}" = 1 ] && pin=()
    out="$work/result-$label-n$n.json"
    OMP_NUM_THREADS=$n MKL_NUM_THREADS=$n OPENBLAS_NUM_THREADS=1 \
        OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
        "${pin[@]}" "$py" "$here/attention_cpu_torch.py" run "${sides[@]}" \
        --threads "$n" --rounds "$rounds" --iters "$iters" "${shapes[@]}" --out "$out"
    results+=("$out")
done
echo
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo
"$py" "$here/attention_cpu_torch.py" table "${results[@]}" | tee "$work/table-$label.md"
