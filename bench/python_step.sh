#!/usr/bin/env bash
# bench/python_step.sh — a FluxPipeline step through weftd (the weft
# package's WeftFluxTransformer) beside the same step with diffusers'
# transformer in-process, and the per-call overhead of the Python binding
# and the IPC (bench/python_step.py says what is timed).
# Not run by CI.
#
# Usage: bench/python_step.sh BUILD_DIR [LABEL]
#   BUILD_DIR: a Release build (cmake -DCMAKE_BUILD_TYPE=Release) with
#   daemon/weftd, client/weftctl and client/libweft.so.
# It makes (once) the Python tests' virtual environment
# (tests/python/make_venv.sh: torch, diffusers, transformers pinned in
# bench/requirements-python.txt), then for each n in $THREADS (default
# "1 2") runs python_step.py pinned to cores 0..n-1 (taskset; weftd, its
# child, inherits the pinning) with torch.set_num_threads(n) and weftd
# --devices cpu:n (mesh tp=n; $MESH overrides), $ROUNDS rounds (default
# 7), $STEPS steps a pipeline call (default 5), $ITERS calls a round for
# the overhead (default 50). Tables on stdout and in $WORK/table-LABEL.md
# (default WORK /var/tmp/weft-python-step).
# torch runs with OMP_WAIT_POLICY=PASSIVE unless set (libgomp's spinning
# collapses on a shared 2-core machine: see bench/model_cpu_torch.sh). Set
# OPENBLAS_CORETYPE for weftd where OpenBLAS does not know the CPU (the
# table names the kernel set it chose); NO_PIN=1 skips taskset.
set -euo pipefail
build=$(cd "${1:?usage: bench/python_step.sh BUILD_DIR [LABEL]}" && pwd)
label=${2:-$(basename "$build")}
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/var/tmp/weft-python-step}
venv=${WEFT_PY_VENV:-$HOME/.cache/weft/venv-python}
for x in "$build/daemon/weftd" "$build/client/weftctl" "$build/client/libweft.so"; do
    [ -e "$x" ] || { echo "python_step.sh: no $x" >&2; exit 1; }
done
WEFT_PY_VENV=$venv bash "$here/../tests/python/make_venv.sh"
mkdir -p "$work"
: > "$work/table-$label.md"
for n in ${THREADS:-1 2}; do
    pin=(taskset -c "0-$((n - 1))")
    [ "${NO_PIN:-0}" = 1 ] && pin=()
    mesh=()
    [ -n "${MESH:-}" ] && mesh=(--mesh "$MESH")
    OMP_NUM_THREADS=$n MKL_NUM_THREADS=$n OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WEFT_LIB="$build/client" \
        "${pin[@]}" "$venv/bin/python" "$here/python_step.py" --build "$build" \
        --work "$work/n$n" --threads "$n" --rounds "${ROUNDS:-7}" --steps "${STEPS:-5}" \
        --iters "${ITERS:-50}" "${mesh[@]}" --out "$work/result-$label-n$n.json" \
        | tee -a "$work/table-$label.md"
    echo | tee -a "$work/table-$label.md"
done
