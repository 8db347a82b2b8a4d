#!/usr/bin/env bash
# bench/python_cfg.sh — the step time of a WanPipeline with classifier-free
# guidance on weftd --devices cpu:2: (a) dp=2 with overlapped forwards,
# (b) dp=2 one call after the other, (c) ulysses=2 one call after the
# other (bench/python_cfg.py says what is timed). Not run by CI.
#
# Usage: bench/python_cfg.sh BUILD_DIR [LABEL]
#   BUILD_DIR: a build with daemon/weftd and client/libweft.so (Release or
#   the default RelWithDebInfo).
# It makes (once) the Python tests' virtual environment
# (tests/python/make_venv.sh), then runs python_cfg.py pinned to cores 0-1
# (taskset; weftd, its child, inherits the pinning; NO_PIN=1 skips it),
# torch on one thread, $ROUNDS rounds (default 9) of $STEPS steps
# (default 6). Extra arguments for python_cfg.py in $ARGS (--heads,
# --layers, --frames, --height, --width). The table on stdout and in
# $WORK/table-LABEL.md (default WORK /var/tmp/weft-python-cfg), the raw
# figures in $WORK/result-LABEL.json.
set -euo pipefail
build=$(cd "${1:?usage: bench/python_cfg.sh BUILD_DIR [LABEL]}" && pwd)
label=${2:-$(basename "$build")}
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/var/tmp/weft-python-cfg}
venv=${WEFT_PY_VENV:-$HOME/.cache/weft/venv-python}
for x in "$build/daemon/weftd" "$build/client/libweft.so"; do
    [ -e "$x" ] || { echo "python_cfg.sh: no $x" >&2; exit 1; }
done
WEFT_PY_VENV=$venv bash "$here/../tests/python/make_venv.sh"
mkdir -p "$work"
pin=(taskset -c 0-1)
[ "${NO_PIN:-0}" = 1 ] && pin=()
# shellcheck disable=SC2086 # ARGS is a list of arguments
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 WEFT_LIB="$build/client" \
    "${pin[@]}" "$venv/bin/python" "$here/python_cfg.py" --build "$build" \
    --work "$work/run" --rounds "${ROUNDS:-9}" --steps "${STEPS:-6}" --label "$label" \
    ${ARGS:-} --out "$work/result-$label.json" | tee "$work/table-$label.md"
