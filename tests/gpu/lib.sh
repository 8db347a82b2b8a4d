# tests/gpu/lib.sh — what run.sh and the GPU steps share
# (attention_variants.sh, staged_ring.sh, nccl_cluster.sh): stand-ins for
# run.sh's helpers when a step runs alone, a step's header and own budget
# (step_begin, step_left), its skip checks (step_skip), waiting for and
# stopping a process with a bound (wait_pid, stop_pid) and the TFLOP/s of a benchmark line
# (av_tflops, av_ratio). Sourced, never run.
#
# Alone (run.sh's say is not defined): cd to the repository root and
# define say / note / elapsed / left, $start, $budget (WEFT_GPU_BUDGET_S,
# default 480), $bd (WEFT_GPU_BUILD_DIR, default build-gpu), $py
# (WEFT_PYTHON, default python3) and $logs (/tmp/weft-gpu-logs). Under
# run.sh its own definitions stay.
# shellcheck shell=bash disable=SC2034 # the variables are the sourcing step's

if ! declare -F say >/dev/null; then
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
  start=$(date +%s)
  budget=${WEFT_GPU_BUDGET_S:-480}
  bd=${WEFT_GPU_BUILD_DIR:-build-gpu}
  py=${WEFT_PYTHON:-python3}
  logs=/tmp/weft-gpu-logs
  mkdir -p "$logs"
  say() { echo "$*"; }
  note() { echo "  summary: $*"; }
  elapsed() { echo "$(( $(date +%s) - start ))s"; }
  left() { echo $(( budget - ($(date +%s) - start) )); }
fi

# step_begin TITLE BUDGET: start a step: its "== TITLE" header, and the
# clock (step_start) and budget (step_budget, seconds) step_left reads.
step_begin() {
  step_start=$(date +%s)
  step_budget=$2
  say "== $1 ($(elapsed), ${step_budget}s budget)"
}

# step_left: the seconds the step begun last has left: the smaller of its
# own budget's and run.sh's.
step_left() {
  local a=$(( step_budget - ($(date +%s) - step_start) )) b
  b=$(left)
  echo $(( a < b ? a : b ))
}

# wait_pid PID SECONDS: true once PID has exited (tail --pid waits on the
# event), false after SECONDS.
wait_pid() {
  timeout "$2" tail --pid="$1" -f /dev/null 2>/dev/null
}

# stop_pid PID SECONDS [NAME]: stop a process this shell started (a
# daemon): SIGTERM, then up to SECONDS for it to exit, then SIGKILL, said
# so. Returns its exit status (137 when it was killed). Never a bare
# `wait` on a daemon that may hang.
stop_pid() {
  local pid=$1 s=$2 name=${3:-process $1}
  if kill -TERM "$pid" 2>/dev/null && ! wait_pid "$pid" "$s"; then
    say "$name (pid $pid): still running ${s}s after SIGTERM: killed"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
}

# av_tflops FILE LABEL S CAUSAL: the TFLOP/s of FILE's last line
# "LABEL S=S ... causal=CAUSAL ... tflops=X" (sdpa_bench.py's; empty when
# there is none).
av_tflops() {
  sed -n "s/^$2 S=$3 .*causal=$4 .*tflops=\([0-9.]*\).*/\1/p" "$1" | tail -1
}

# av_ratio W S: W / S with two decimals; "?" when either is missing or S is 0.
av_ratio() {
  awk -v w="$1" -v s="$2" 'BEGIN { if (w == "" || s == "" || s == 0) print "?"; else printf "%.2f", w / s }'
}

# step_skip KNOB WHAT FILE...: true when the step is skipped, having said
# why and noted "WHAT: skipped": the variable KNOB is 0, or one of the
# FILEs (paths in the build $bd) is not built.
step_skip() {
  local knob=$1 what=$2 f files
  shift 2
  if [ "${!knob:-1}" = 0 ]; then
    say "skipped ($knob=0)"
    note "$what: skipped"
    return 0
  fi
  for f; do
    if [ ! -x "$bd/$f" ]; then
      printf -v files '%s or ' "${@/#/$bd/}"
      say "skipped: no ${files% or }"
      note "$what: skipped (not built)"
      return 0
    fi
  done
  return 1
}
