#!/usr/bin/env bash
# bench/model_cpu_torch.sh — weft's CPU forward of a model family beside
# diffusers' forward of the same model in torch on the same machine and
# cores (FluxTransformer2DModel: sizes a, b; WanTransformer3DModel: wan)
# Not run by CI: it needs torch from PyPI.
#
# Usage: bench/model_cpu_torch.sh BUILD_DIR [LABEL]
#   BUILD_DIR: a Release build (cmake -DCMAKE_BUILD_TYPE=Release) with
#   daemon/weftd and client/weftctl; LABEL names the result files.
#
# What it does:
#  1. makes (once) the virtual environment $WEFT_TORCH_VENV (default
#     ~/.cache/weft/venv-torch) with the versions pinned in
#     bench/requirements-torch.txt. torch comes from plain PyPI: the
#     download is large (the CUDA build with its nvidia-* wheels, several
#     GB); only its CPU side is used.
#  2. writes (once) a checkpoint per size with seeded random f32 weights
#     (diffusers' save_pretrained) and their inputs + diffusers' output
#     under $WORK (default /var/tmp/weft-model-cpu-torch); see
#     model_cpu_torch.py for the sizes.
#  3. for each thread count n in $THREADS (default "1 2") and size in
#     $SIZES (default "a b"): one process pinned to cores 0..n-1 (taskset)
#     holds torch with torch.set_num_threads(n) (OMP / MKL threads n) and
#     starts weftd --devices cpu:n (OpenBLAS 1 thread per virtual device),
#     loads the model with weftctl load, and times weftctl forward on the
#     same inputs. n = 1: one device; n = 2: each mesh of $MESHES2 (default
#     "tp=2 ulysses=2 ring=2"). $ROUNDS (default 7; $ROUNDS_B for sizes b
#     and wan, default $ROUNDS) rounds alternate the two sides; each round
#     times $ITERS_A (size a) / $ITERS_B (the others) (default 3 / 1)
#     forwards per side and keeps their median.
#  4. prints a markdown table (also in $WORK/table-LABEL.md): medians and
#     min-max over the rounds, torch_ms / weft_ms (> 1: weft is faster) of
#     the medians and per round (each torch block beside the weft block
#     next to it in time, which cancels slow drifts of the machine's load),
#     and weftctl's max abs difference from diffusers' output.
# Set NO_PIN=1 to skip taskset. Other load on the machine shows as spread;
# NICE=-10 (root) runs both sides at that niceness, so that other work
# on the machine may take less of their cores (on the 2-core development
# machine it did not visibly reduce the noise).
# torch runs with OMP_WAIT_POLICY=PASSIVE unless it is set: with libgomp's
# default spin-waiting, a 2-thread torch forward on this 2-core machine
# while other work ran took 5-10x as long (1.8 s against 0.2 s for size
# a); passive waiting is torch's better setting on a shared machine.
# OpenBLAS (weftd's GEMMs) picks its kernels from the CPU model; one it
# does not know gets the generic PRESCOTT (SSE3) set, which the run warns
# of and the table names: then set OPENBLAS_CORETYPE (e.g. SkylakeX on an
# AVX-512 CPU, Haswell on AVX2) for the run; weftctl's difference from
# diffusers' output checks the result either way.
set -euo pipefail
build=$(cd "${1:?usage: bench/model_cpu_torch.sh BUILD_DIR [LABEL]}" && pwd)
label=${2:-$(basename "$build")}
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/var/tmp/weft-model-cpu-torch}
threads=${THREADS:-1 2}
sizes=${SIZES:-a b}
meshes2=${MESHES2:-tp=2 ulysses=2 ring=2}
rounds=${ROUNDS:-7}
rounds_b=${ROUNDS_B:-$rounds}
iters_a=${ITERS_A:-3}
iters_b=${ITERS_B:-1}

for x in "$build/daemon/weftd" "$build/client/weftctl"; do
    [ -x "$x" ] || { echo "model_cpu_torch.sh: no $x" >&2; exit 1; }
done

. "$here/torch_venv.sh"
mkdir -p "$work"
for s in $sizes; do
    "$py" "$here/model_cpu_torch.py" make --work "$work" --size "$s"
done

results=()
for n in $threads; do
    cores="0-$((n - 1))"
    pin=(taskset -c "$cores")
    [ "${NO_PIN:-0}" = 1 ] && pin=()
    [ -n "${NICE:-}" ] && pin=(nice -n "$NICE" "${pin[@]}")
    if [ "$n" = 1 ]; then
        mesh=(--mesh single)
    else
        mesh=()
        for m in $meshes2; do mesh+=(--mesh "$m"); done
    fi
    for s in $sizes; do
        iters=$iters_a r=$rounds
        [ "$s" != a ] && iters=$iters_b r=$rounds_b
        out="$work/result-$label-$s-n$n.json"
        OMP_NUM_THREADS=$n MKL_NUM_THREADS=$n OPENBLAS_NUM_THREADS=1 \
            OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
            "${pin[@]}" "$py" "$here/model_cpu_torch.py" run --work "$work" \
            --build "$build" --size "$s" --threads "$n" --rounds "$r" \
            --iters "$iters" "${mesh[@]}" --label "$label" \
            --log "$work/weftd-$label.log" --out "$out"
        results+=("$out")
    done
done
echo
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo
"$py" "$here/model_cpu_torch.py" table "${results[@]}" | tee "$work/table-$label.md"
