# tests/gpu/lib.sh — what the GPU steps sourced by run.sh share
# (attention_variants.sh, staged_ring.sh): stand-ins for run.sh's helpers
# when a step runs alone, and a step's own budget. Sourced, never run.
#
# Alone (run.sh's say is not defined): cd to the repository root and
# define say / note / elapsed / left, $start, $budget (WEFT_GPU_BUDGET_S,
# default 470), $bd (WEFT_GPU_BUILD_DIR, default build-gpu), $py
# (WEFT_PYTHON, default python3) and $logs (/tmp/weft-gpu-logs). Under
# run.sh its own definitions stay.
# shellcheck shell=bash disable=SC2034 # the variables are the sourcing step's

if ! declare -F say >/dev/null; then
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
  start=$(date +%s)
  budget=${WEFT_GPU_BUDGET_S:-470}
  bd=${WEFT_GPU_BUILD_DIR:-build-gpu}
  py=${WEFT_PYTHON:-python3}
  logs=/tmp/weft-gpu-logs
  mkdir -p "$logs"
  say() { echo "$*"; }
  note() { echo "  summary: $*"; }
  elapsed() { echo "$(( $(date +%s) - start ))s"; }
  left() { echo $(( budget - ($(date +%s) - start) )); }
fi

# step_left START BUDGET: the seconds a step that started at START (date
# +%s) with BUDGET seconds has left: the smaller of that and run.sh's.
step_left() {
  local a=$(( $2 - ($(date +%s) - $1) )) b
  b=$(left)
  echo $(( a < b ? a : b ))
}
