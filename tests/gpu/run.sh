#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check, from the repository root, on the lent
# H200 (nvcc, cmake, PyTorch, driver; no package registry). At most ~8
# minutes. Needs tests/gpu/debs from tests/gpu/prepare.sh, carried with
# the working tree. Steps (each prints a "== " header):
#   1. configure + build with CUDA (and NCCL from the toolkit or torch's
#      nvidia-nccl wheel) against the carried Debian prefix;
#   2. test_cuda_host, test_cuda_gpu (the wgmma building blocks by name,
#      then CUDA attention vs the CPU backend for every dtype / causal /
#      GQA / uneven shape / D 64, 128; LSE merge; conversions; NCCL world
#      of 1 and of N) for each attention kernel: wgmma (the default on
#      Hopper), wgmma pipelined (WEFT_CUDA_ATTN=wgmma-pipe), mma.sync
#      (WEFT_CUDA_ATTN=mma);
#   3. attention TFLOP/s of the three kernels against torch SDPA (bf16,
#      B=1, H=24, D=128, S 4096 / 16384, non-causal / causal) and the
#      ratios (target >= 0.60);
#   4. weftd on the GPU: --devices cuda (an NCCL world of one GPU: its log
#      says "comm: NCCL") serving weftctl attention-demo (bf16 and f16,
#      causal, GQA) checked against its fp64 reference, then the mixed
#      mode (--devices cuda:0,0,0,0 --mesh ring=2,ulysses=2: context
#      parallelism on device buffers, the host comm staged through copies).
# Output figures go to stdout and to $OUT/gpu-report.txt when $OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
report=${OUT:-/tmp}/gpu-report.txt
: > "$report"
say() { echo "$*" | tee -a "$report"; }
elapsed() { echo "$(( $(date +%s) - start ))s"; }

root=$PWD/tests/gpu/debs/root
lib=$root/usr/lib/x86_64-linux-gnu
if [ ! -d "$lib" ]; then
  say "run.sh: tests/gpu/debs missing: run tests/gpu/prepare.sh first and carry tests/gpu/debs"
  exit 2
fi
export PATH=$root/usr/bin:/usr/local/cuda/bin:$PATH
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$root
export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# pkg-config drops -L for the system libdir, which the carried prefix
# mirrors: name both folders explicitly for the linker.
export PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
export LDFLAGS="-L$lib -L$lib/openblas-pthread -Wl,-rpath-link,$lib -Wl,-rpath-link,$lib/openblas-pthread"

say "== environment ($(elapsed))"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$report"
nvcc --version | tail -1 | tee -a "$report"
nccl_args=()
if ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  ncclroot=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [ -n "$ncclroot" ] && [ -f "$ncclroot/include/nccl.h" ]; then
    nccl_args=(-DNCCL_ROOT="$ncclroot")
    export LD_LIBRARY_PATH=$ncclroot/lib:$LD_LIBRARY_PATH
    say "NCCL from torch's wheel: $ncclroot"
  else
    say "no NCCL in the toolkit or torch's wheel: CMake looks in the system paths"
  fi
fi

log=${OUT:-/tmp}/build-gpu.log
say "== build ($(elapsed))"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON -DWEFT_WERROR=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a "${nccl_args[@]}" > "$log" 2>&1 || {
  tail -30 "$log"; say "configure FAILED"; exit 1; }
grep "weft:" "$log" | tee -a "$report"
targets=(test_cuda_host test_cuda_gpu bench_cuda_attention test_kernels weftd weftctl)
cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >> "$log" 2>&1 || {
  grep -E "error|Error" -A3 "$log" | head -40; say "build FAILED"; exit 1; }
say "built in $(elapsed)"

say "== tests ($(elapsed))"
timeout 60 build-gpu/tests/test_cuda_host 2>&1 | tail -1 | tee -a "$report"
# Each kernel's test; a kernel whose test hangs (timeout) is not benched.
# The daemon runs on the first kernel whose test passed.
declare -A test_rc
daemon_kern=none
for kern in "" wgmma-pipe mma; do
  name=${kern:-wgmma}
  say "-- test_cuda_gpu, WEFT_CUDA_ATTN=${kern:-(default: wgmma)}"
  tlog=${OUT:-/tmp}/test_cuda_gpu-$name.log
  WEFT_CUDA_ATTN=$kern timeout 45 build-gpu/tests/test_cuda_gpu > "$tlog" 2>&1
  rc=$?
  test_rc[$name]=$rc
  # the kernel lines, failing cases (the full log comes back in $OUT)
  grep -E "wgmma|kernel:|FAIL|failure|nccl" "$tlog" | head -24 | tee -a "$report"
  say "attention cases: $(grep -c "attn B" "$tlog"), failing: $(grep "attn B" "$tlog" | grep -c FAIL)"
  say "test_cuda_gpu exit $rc"
  if [ $rc -eq 0 ] && [ "$daemon_kern" = none ]; then daemon_kern=$name; fi
done
timeout 120 build-gpu/tests/test_kernels > /dev/null 2>&1; say "test_kernels (CPU reference) exit $?"

say "== attention vs torch SDPA, bf16, B=1, H=24, D=128 ($(elapsed))"
shapes=(4096 0 4096 1 16384 0 16384 1)
sdpa_args=()
for ((i = 0; i < ${#shapes[@]}; i += 2)); do sdpa_args+=("${shapes[i]}" 24 128 "${shapes[i+1]}"); done
timeout 150 python3 tests/gpu/sdpa_bench.py "${sdpa_args[@]}" > /tmp/sdpa.log 2>&1
tail -4 /tmp/sdpa.log | tee -a "$report"
for ((i = 0; i < ${#shapes[@]}; i += 2)); do
  S=${shapes[i]}; causal=${shapes[i+1]}
  t=$(grep "sdpa S=$S .*causal=$causal " /tmp/sdpa.log | tail -1)
  tt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$t")
  for kern in "" wgmma-pipe mma; do
    if [ "${test_rc[${kern:-wgmma}]}" = 124 ]; then say "S=$S causal=$causal kernel=${kern:-wgmma}: skipped (its test hung)"; continue; fi
    w=$(WEFT_CUDA_ATTN=$kern timeout 30 build-gpu/bench/bench_cuda_attention $S 24 128 $causal 2>&1 | tail -1)
    wt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$w")
    ratio=$(python3 -c "print(f'{float(\"$wt\")/float(\"$tt\"):.2f}')" 2>/dev/null || echo "?")
    say "S=$S causal=$causal kernel=${kern:-wgmma} | $w | sdpa tflops=$tt | ratio $ratio (target >= 0.60)"
  done
done

say "== weftd on the GPU, kernel $daemon_kern ($(elapsed))"
case $daemon_kern in wgmma) export WEFT_CUDA_ATTN= ;; wgmma-pipe) export WEFT_CUDA_ATTN=wgmma-pipe ;; *) export WEFT_CUDA_ATTN=mma ;; esac
# weftd on DEVICES with extra flags; then each remaining argument is one
# weftctl command line run against it. Refused devices: a message, skipped.
serve_n=0
serve() {
  local devices=$1; shift
  local flags=$1; shift
  local sock=/tmp/weft-gpu-$$.sock
  serve_n=$((serve_n + 1))
  local dlog=${OUT:-/tmp}/weftd-gpu-$serve_n.log
  rm -f "$sock"
  # shellcheck disable=SC2086
  build-gpu/daemon/weftd --devices "$devices" $flags --listen "ipc://$sock" \
      > "$dlog" 2>&1 &
  local wpid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; kill -0 $wpid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $wpid 2>/dev/null && [ -S "$sock" ]; then
    say "weftd --devices $devices $flags"
    timeout 60 build-gpu/client/weftctl --endpoint "ipc://$sock" status 2>&1 | tee -a "$report"
    local cmd
    for cmd in "$@"; do
      say "weftctl $cmd"
      # shellcheck disable=SC2086
      timeout 60 build-gpu/client/weftctl --endpoint "ipc://$sock" $cmd 2>&1 | tee -a "$report"
      say "weftctl exit ${PIPESTATUS[0]}"
    done
    kill -TERM $wpid; wait $wpid
    say "weftd exit $?"
    grep -E "comm:|NCCL|ERR|error|failed" "$dlog" | head -6 | tee -a "$report"
  else
    say "weftd --devices $devices $flags refused: skipped"
    head -3 "$dlog" | tee -a "$report"
    kill $wpid 2>/dev/null; wait $wpid 2>/dev/null
  fi
}
# one GPU per rank (head split), bf16 and f16, causal, GQA, D 128 and 64
serve cuda "" \
  "attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --iters 3" \
  "attention-demo --seq 1000 --kv-seq 1500 --heads 6 --kv-heads 3 --dim 64 --dtype f16 --causal --iters 3"
# the mixed mode: four ranks on GPU 0, CUDA kernels, host comm, USP
serve cuda:0,0,0,0 "--mesh ring=2,ulysses=2" \
  "attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --rotate alltoall --iters 2" \
  "attention-demo --seq 1001 --heads 8 --kv-heads 4 --dim 64 --dtype f16 --causal --ring-anything --rotate allgather --iters 2"

say "== done in $(elapsed)"
