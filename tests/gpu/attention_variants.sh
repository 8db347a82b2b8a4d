#!/usr/bin/env bash
# tests/gpu/attention_variants.sh — the warp-specialized attention kernel's
# GPU step: each variant checked, sanitized and timed beside
# torch SDPA (and FlashAttention-3 when torch has it) in the same run.
#
# Sourced by tests/gpu/run.sh after its correctness steps, when time is
# left (or right after the build with WEFT_ATTN_VARIANTS_ONLY=1), so it uses
# run.sh's say / note / left / elapsed, $bd (the build), $logs, $py; run
# alone (bash tests/gpu/attention_variants.sh) it needs an existing build
# in WEFT_GPU_BUILD_DIR (default build-gpu) with test_cuda_gpu and
# bench_cuda_attention, and writes to stdout and /tmp/weft-gpu-logs.
#
# Knobs (environment):
#   WEFT_ATTN_VARIANTS=0        skip this step
#   WEFT_ATTN_VARIANTS_S=180    its own budget in seconds (each part below
#                               checks what is left of it, and of run.sh's;
#                               150 before +mc's tests and sanitizer runs)
#   WEFT_ATTN_VARIANTS_LIST="ws ws-pipe ws-pp ws-pp-store ws-full ws-pp-mc"
#                               the variants (cuda_attention values); the
#                               tests also run ws+store, ws+persist, ws+mc
#                               and ws-full-mc alone (+mc: clusters of 2
#                               CTAs with TMA multicast of K / V)
#   WEFT_ATTN_VARIANTS_ONLY=1   (from run.sh) stop run.sh after this step:
#                               its summary still prints (the EXIT trap)
#
# Parts, in order (~150 s on the H200 with a warm build):
#   1. test_cuda_gpu --attention-variants V for each variant, one process
#      each under `timeout 40` (a deadlock in a named barrier cannot trap:
#      a hung variant is reported as such and left out of the timings);
#      the ws self-test line (mbarrier ring, setmaxnreg, TMA store,
#      ping-pong) and the ws mc line (2-CTA cluster, TMA multicast, remote
#      arrive) by name
#   2. compute-sanitizer --tool memcheck and --tool racecheck (when the
#      toolkit has it) on bench_cuda_attention's small grid (S 300, H 2,
#      D 64 and 128, causal and not) for the fullest variant that passed;
#      then racecheck (both shapes) and memcheck (D 128 causal) for the
#      fullest +mc variant that passed (S 300: 3 query tiles per head, so
#      every head's last cluster has a tile without rows)
#   3. TFLOP/s for S = 4096 and 16384, causal and not (bf16, B 1, H 24,
#      D 128): sdpa_bench.py --fa3 (SDPA, FA3 if importable), then
#      bench_cuda_attention --variants wgmma,<passing variants> (the
#      default kernel first: every variant's maxdiff is against it), and
#      a table of TFLOP/s and the ratio to SDPA per shape
# Nothing here changes what runs by default: the variants are opt-in.
#
# Then the fp8 path (av_fp8, its own budget WEFT_ATTN_FP8_S=100,
# WEFT_ATTN_FP8=0 skips it), ~70 s on a warm build:
#   1. test_cuda_gpu --fp8 under `timeout 90`: the fp8 self-test line (e4m3
#      wgmma, the P fragment against v8t's key order, the quantizer) and
#      every fp8 case against fp64 on its quantized inputs, each printing
#      its error against the unquantized fp64 reference beside bf16's
#   2. compute-sanitizer memcheck and racecheck on bench_cuda_attention
#      --variants fp8 (S 300, H 2; D 64 non-causal, D 128 causal)
#   3. TFLOP/s for S = 4096 and 16384, causal and not (B 1, H 24, D 128):
#      sdpa_bench.py --fa3-fp8 (SDPA bf16; FA3 fp8 when importable), then
#      bench_cuda_attention --variants wgmma,fp8,fp8-kernel (bf16 default
#      kernel, fp8 with the quantization, the fp8 kernel alone; maxdiff
#      against bf16's output), a line per shape with the ratio to SDPA
#      (target: fp8 above SDPA's bf16)

# alone: stand-ins for run.sh's helpers (lib.sh)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# av_sanitize CS TOOL VARIANT D CAUSAL: compute-sanitizer (at CS) --tool
# TOOL on bench_cuda_attention --variants VARIANT's small grid (S 300, H 2,
# head dim D): two launches (warm-up + one timed) on a grid of 3 x 2
# tiles; says and notes its exit and summary line.
av_sanitize() {
  local cs=$1 tool=$2 v=$3 d=$4 c=$5 slog rc
  slog=$logs/sanitizer-$tool-$v-d$d-c$c.log
  WEFT_BENCH_ITERS=1 WEFT_BENCH_ROUNDS=1 timeout 60 "$cs" --tool "$tool" \
    --error-exitcode 9 "$bd"/bench/bench_cuda_attention --variants "$v" 300 2 "$d" "$c" \
    > "$slog" 2>&1
  rc=$?
  say "compute-sanitizer --tool $tool, $v, S 300 H 2 D $d causal $c: exit $rc," \
      "$(grep -m1 -E "ERROR SUMMARY|RACECHECK SUMMARY" "$slog" || echo "no summary")"
  note "sanitizer $tool $v D$d causal$c: exit $rc"
}

av_main() {
  step_begin "attention kernel variants (ws)" "${WEFT_ATTN_VARIANTS_S:-180}"
  step_skip WEFT_ATTN_VARIANTS "attention variants" tests/test_cuda_gpu \
    bench/bench_cuda_attention && return 0
  local list=()
  read -ra list <<<"${WEFT_ATTN_VARIANTS_LIST:-ws ws-pipe ws-pp ws-pp-store ws-full ws-pp-mc}"
  local tests=("${list[@]}" ws+store ws+persist ws+mc ws-full-mc)
  local passed=() v rc tlog
  declare -A av_rc=()

  # 1. correctness, one process per variant
  for v in "${tests[@]}"; do
    if [ "$(step_left)" -lt 50 ]; then say "tests: stopped before $v ($(step_left)s left)"; break; fi
    tlog=$logs/test_cuda_gpu-variant-$v.log
    timeout 40 "$bd"/tests/test_cuda_gpu --attention-variants "$v" > "$tlog" 2>&1
    rc=$?
    av_rc[$v]=$rc
    if [ "$v" = "${tests[0]}" ]; then
      grep -E "^  ws |^  wgmma|attention kernel" "$tlog" | head -4 | tee -a "${report:-/dev/null}"
      grep -q "^  ws mbarrier ring.*: ok.*TMA store.*: ok.*ping-pong.*: ok" "$tlog" &&
        note "ws self-test (mbarrier ring, setmaxnreg, TMA store, ping-pong): ok" ||
        note "ws self-test: $(grep -m1 "^  ws " "$tlog" | cut -c1-160)"
      grep -q "^  ws mc cluster of 2.*: ok .*remote arrive.*: ok" "$tlog" &&
        note "ws mc self-test (2-CTA cluster, TMA multicast, remote arrive): ok" ||
        note "ws mc self-test: $(grep -m1 "^  ws mc " "$tlog" | cut -c1-160)"
    fi
    local ncase nfail
    ncase=$(grep -c "attn B" "$tlog")
    nfail=$(grep "attn B" "$tlog" | grep -c FAIL)
    case $rc in
      0) say "variant $v: $ncase attention cases, all ok"; passed+=("$v") ;;
      124) say "variant $v: HUNG (timeout 40 s) after $ncase cases" ;;
      77) say "variant $v: skipped (no GPU)" ;;
      *) say "variant $v: exit $rc, $ncase cases, $nfail failing"
         grep -E "FAIL|CHECK failed|error" "$tlog" | head -6 | tee -a "${report:-/dev/null}" ;;
    esac
    local verdict="FAIL ($nfail of $ncase cases)"
    case $rc in 0) verdict=ok ;; 124) verdict=HUNG ;; 77) verdict="skipped (no GPU)" ;; esac
    note "variant $v: $verdict"
  done

  # 2. compute-sanitizer on a small grid
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  local sv="" tool dc d c
  for v in ws-full ws-pp-store ws-pp ws-pipe ws; do
    [ "${av_rc[$v]:-1}" = 0 ] && { sv=$v; break; }
  done
  if [ -z "$cs" ]; then
    say "compute-sanitizer: not in the toolkit, skipped"
    note "compute-sanitizer: absent"
  elif [ -z "$sv" ]; then
    say "compute-sanitizer: no variant passed its tests, skipped"
  else
    for tool in memcheck racecheck; do
      for dc in "64 0" "128 1"; do
        read -r d c <<<"$dc"
        if [ "$(step_left)" -lt 45 ]; then say "sanitizer: stopped ($(step_left)s left)"; break 2; fi
        av_sanitize "$cs" "$tool" "$sv" "$d" "$c"
      done
    done
  fi
  # +mc: shared memory written by the peer's multicast, barriers arrived
  # on from the peer (S 300: every head's last cluster has an empty tile)
  local mv="" tdc
  for v in ws-full-mc ws-pp-mc ws+mc; do
    [ "${av_rc[$v]:-1}" = 0 ] && { mv=$v; break; }
  done
  if [ -n "$cs" ] && [ -z "$mv" ]; then
    say "compute-sanitizer +mc: no +mc variant passed its tests, skipped"
    note "sanitizer +mc: skipped (no passing +mc variant)"
  elif [ -n "$cs" ]; then
    for tdc in "racecheck 64 0" "racecheck 128 1" "memcheck 128 1"; do
      read -r tool d c <<<"$tdc"
      if [ "$(step_left)" -lt 45 ]; then say "sanitizer +mc: stopped ($(step_left)s left)"; break; fi
      av_sanitize "$cs" "$tool" "$mv" "$d" "$c"
    done
  fi

  # 3. TFLOP/s beside SDPA (and FA3)
  if [ "$(step_left)" -lt 40 ]; then
    say "timings: skipped ($(step_left)s left)"
    note "attention variants timings: skipped (time)"
    return 0
  fi
  local shapes=(4096 0 4096 1 16384 0 16384 1) sargs=() i
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do sargs+=("${shapes[i]}" 24 128 "${shapes[i+1]}"); done
  timeout $(( $(step_left) > 100 ? 90 : $(step_left) / 2 )) "$py" tests/gpu/sdpa_bench.py --fa3 \
    "${sargs[@]}" > "$logs/sdpa-variants.log" 2>&1
  grep -E "^fa3:" "$logs/sdpa-variants.log" | cut -c1-200 | tee -a "${report:-/dev/null}"
  local kl=wgmma
  for v in "${list[@]}"; do [ "${av_rc[$v]:-1}" = 0 ] && kl+=",$v"; done
  timeout $(( $(step_left) - 5 )) "$bd"/bench/bench_cuda_attention --variants "$kl" "${sargs[@]}" \
    > "$logs/bench-variants.log" 2>&1
  say "kernels timed: $kl (maxdiff: largest |out - wgmma's out| on the same inputs)"
  local S c sd fa line k wt ratio
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do
    S=${shapes[i]}; c=${shapes[i+1]}
    sd=$(av_tflops "$logs/sdpa-variants.log" sdpa "$S" "$c")
    fa=$(av_tflops "$logs/sdpa-variants.log" fa3 "$S" "$c")
    say "S=$S causal=$c: sdpa ${sd:-?} TFLOP/s, fa3 ${fa:-n/a}"
    for k in ${kl//,/ }; do
      line=$(grep "^weft kernel=$k S=$S .*causal=$c " "$logs/bench-variants.log" | tail -1)
      wt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$line")
      ratio=$(av_ratio "$wt" "$sd")
      say "  $k: ${wt:-FAILED} TFLOP/s, ratio to sdpa $ratio (target >= 0.90)," \
          "maxdiff $(sed -n 's/.*maxdiff=\([^ ]*\).*/\1/p' <<<"$line")"
      note "attention S=$S causal=$c $k: ${wt:-?} TFLOP/s, / sdpa $ratio"
    done
  done
  return 0
}

# The fp8 path: tests, sanitizers, TFLOP/s (the file comment).
av_fp8() {
  step_begin "fp8 attention" "${WEFT_ATTN_FP8_S:-100}"
  step_skip WEFT_ATTN_FP8 "fp8 attention" tests/test_cuda_gpu bench/bench_cuda_attention &&
    return 0
  # 1. self-test and cases
  local tlog=$logs/test_cuda_gpu-fp8.log rc ncase nfail
  timeout 90 "$bd"/tests/test_cuda_gpu --fp8 > "$tlog" 2>&1
  rc=$?
  grep -E "^  fp8: " "$tlog" | head -2 | cut -c1-400 | tee -a "${report:-/dev/null}"
  ncase=$(grep -c "^  fp8.* B[0-9]" "$tlog")
  nfail=$(grep "^  fp8.* B[0-9]" "$tlog" | grep -c FAIL)
  case $rc in
    0) say "fp8: $ncase cases, all ok (vs fp64 on quantized inputs; error vs fp64 beside bf16's:)"
       grep "^  fp8 B" "$tlog" | sed -n 's/.* B\([0-9]*\) Sq\([0-9]*\) .* D\([0-9]*\) .*causal\([01]\).* dt\([0-9]\) .*vs fp64: \(.*\)/  B\1 Sq\2 D\3 causal\4 dt\5: \6/p' |
         head -12 | tee -a "${report:-/dev/null}" ;;
    124) say "fp8: HUNG (timeout 90 s) after $ncase cases" ;;
    77) say "fp8: skipped (no GPU)" ;;
    *) say "fp8: exit $rc, $ncase cases, $nfail failing"
       grep -E "FAIL|CHECK failed|WRONG|error" "$tlog" | head -6 | tee -a "${report:-/dev/null}" ;;
  esac
  note "fp8 self-test: $(grep -m1 "^  fp8: " "$tlog" | grep -q WRONG && echo WRONG || echo "$(grep -c "^  fp8: .*ok" "$tlog") ok line")"
  note "fp8 cases: exit $rc ($nfail of $ncase failing)"

  # 2. compute-sanitizer on a small fp8 grid
  local cs tool dc d c
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -z "$cs" ]; then
    say "compute-sanitizer: not in the toolkit, skipped"
  elif [ "$rc" != 0 ]; then
    say "compute-sanitizer (fp8): skipped (the fp8 tests did not pass)"
  else
    for tool in memcheck racecheck; do
      for dc in "64 0" "128 1"; do
        read -r d c <<<"$dc"
        if [ "$(step_left)" -lt 40 ]; then say "sanitizer: stopped ($(step_left)s left)"; break 2; fi
        av_sanitize "$cs" "$tool" fp8 "$d" "$c"
      done
    done
  fi

  # 3. TFLOP/s beside SDPA bf16 (and FA3 fp8)
  if [ "$(step_left)" -lt 30 ]; then
    say "fp8 timings: skipped ($(step_left)s left)"
    note "fp8 timings: skipped (time)"
    return 0
  fi
  local shapes=(4096 0 4096 1 16384 0 16384 1) sargs=() i
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do sargs+=("${shapes[i]}" 24 128 "${shapes[i+1]}"); done
  timeout $(( $(step_left) / 2 )) "$py" tests/gpu/sdpa_bench.py --fa3-fp8 "${sargs[@]}" \
    > "$logs/sdpa-fp8.log" 2>&1
  grep -E "^fa3-fp8:" "$logs/sdpa-fp8.log" | cut -c1-200 | tee -a "${report:-/dev/null}"
  timeout $(( $(step_left) - 3 )) "$bd"/bench/bench_cuda_attention --variants wgmma,fp8,fp8-kernel \
    "${sargs[@]}" > "$logs/bench-fp8.log" 2>&1
  local S sd fa line k wt ratio
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do
    S=${shapes[i]}; c=${shapes[i+1]}
    sd=$(av_tflops "$logs/sdpa-fp8.log" sdpa "$S" "$c")
    fa=$(av_tflops "$logs/sdpa-fp8.log" fa3-fp8 "$S" "$c")
    say "S=$S causal=$c: sdpa bf16 ${sd:-?} TFLOP/s, fa3 fp8 ${fa:-n/a}"
    for k in wgmma fp8 fp8-kernel; do
      line=$(grep "^weft kernel=$k S=$S .*causal=$c " "$logs/bench-fp8.log" | tail -1)
      wt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$line")
      ratio=$(av_ratio "$wt" "$sd")
      say "  weft $k: ${wt:-FAILED} TFLOP/s, ratio to sdpa bf16 $ratio," \
          "maxdiff vs bf16 $(sed -n 's/.*maxdiff=\([^ ]*\).*/\1/p' <<<"$line")"
      note "fp8 timings S=$S causal=$c $k: ${wt:-?} TFLOP/s, / sdpa bf16 $ratio"
    done
  done
  return 0
}

av_main
av_fp8
if [ "${WEFT_ATTN_VARIANTS_ONLY:-0}" = 1 ] && declare -F finish >/dev/null; then
  say "== WEFT_ATTN_VARIANTS_ONLY=1: the rest of run.sh skipped"
  exit 0
fi
