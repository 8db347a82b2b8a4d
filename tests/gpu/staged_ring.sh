#!/usr/bin/env bash
# tests/gpu/staged_ring.sh — the ring with alltoall rotation on device
# buffers, measured: bench_staged_ring in the mixed mode
# (R ranks on GPU 0 over the host comm behind comm_staged.h) with each
# step's transfers overlapped with its kernels (the transfer stream)
# against the synchronous staging (WF_COMM_STAGED_SYNC)
# and the allgather rotation; over NCCL (one rank per GPU) alltoall
# against allgather where R GPUs exist. Median, min and max of the rounds
# and the ratios. The mixed mode's correctness on the GPU is run.sh's
# weftd step (cuda:0,0,0,0, ring=2 ulysses=2, --rotate alltoall: PASS
# against the fp64 check), which runs the same overlapped path.
#
# Sourced by tests/gpu/run.sh after attention_variants.sh (one line there),
# so it uses run.sh's say / note / left / elapsed, $bd and $logs; alone
# (bash tests/gpu/staged_ring.sh) it needs a build in WEFT_GPU_BUILD_DIR
# (default build-gpu) with bench/bench_staged_ring.
#
# Then bench_ring_fuse cuda (the ring's merge in the kernel's epilogue
# against the separate merge and conversion passes, mixed mode, S 16384,
# H 24, D 128) when 15 s of the budget are left.
#
# Knobs: WEFT_STAGED_RING=0 skips it; WEFT_STAGED_RING_S=45 its budget in
# seconds; WEFT_STAGED_RING_SHAPES="R S H D causal ..." (default: R 2 and
# 4, S 16384, H 24, D 128, causal 0 and 1).

# alone: stand-ins for run.sh's helpers (lib.sh)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sr_main() {
  step_begin "staged ring: alltoall rotation, overlapped transfers vs synchronous staging" \
    "${WEFT_STAGED_RING_S:-45}"
  step_skip WEFT_STAGED_RING "staged ring" bench/bench_staged_ring && return 0
  local shapes=()
  read -ra shapes <<<"${WEFT_STAGED_RING_SHAPES:-2 16384 24 128 0 2 16384 24 128 1 4 16384 24 128 0 4 16384 24 128 1}"
  local i R S H D c be out rc ratio
  for ((i = 0; i + 4 < ${#shapes[@]}; i += 5)); do
    R=${shapes[i]}; S=${shapes[i+1]}; H=${shapes[i+2]}; D=${shapes[i+3]}; c=${shapes[i+4]}
    for be in cuda nccl; do
      if [ "$(step_left)" -lt 12 ]; then say "stopped before $be R=$R S=$S causal=$c ($(step_left)s left)"; break 2; fi
      out=$logs/staged-ring-$be-R$R-S$S-c$c.log
      timeout $(( $(step_left) - 5 )) "$bd"/bench/bench_staged_ring "$be" "$R" "$S" "$H" "$D" "$c" 5 \
        > "$out" 2>&1
      rc=$?
      case $rc in
        0) grep -E "^ring |^ratio" "$out" | tee -a "${report:-/dev/null}"
           ratio=$(grep -m1 "^ratio" "$out")
           note "staged ring $be R=$R S=$S causal=$c: $ratio" ;;
        77) say "$be R=$R: $(tail -1 "$out")" ;;
        *) say "$be R=$R S=$S causal=$c: exit $rc"; tail -4 "$out" | tee -a "${report:-/dev/null}"
           note "staged ring $be R=$R S=$S causal=$c: FAILED (exit $rc)" ;;
      esac
    done
  done
  # the ring's merge in the kernel's epilogue: fused against partial
  # buffers + lse_merge + convert, mixed mode
  local fo=$logs/ring-fuse-cuda.log
  if [ ! -x "$bd/bench/bench_ring_fuse" ]; then
    say "ring fuse: skipped (no $bd/bench/bench_ring_fuse)"
  elif [ "$(step_left)" -lt 15 ]; then
    say "ring fuse: skipped ($(step_left)s left)"; note "ring fuse: skipped (time)"
  else
    timeout $(( $(step_left) - 3 )) "$bd"/bench/bench_ring_fuse cuda 16384 24 128 5 > "$fo" 2>&1
    rc=$?
    case $rc in
      0) tail -6 "$fo" | tee -a "${report:-/dev/null}"
         note "ring fuse cuda: $(grep -m1 -i "ratio\|ring R 2" "$fo" | tail -1)" ;;
      77) say "ring fuse: $(tail -1 "$fo")" ;;
      *) say "ring fuse: exit $rc"; tail -4 "$fo" | tee -a "${report:-/dev/null}"
         note "ring fuse cuda: FAILED (exit $rc)" ;;
    esac
  fi
  return 0
}

sr_main
