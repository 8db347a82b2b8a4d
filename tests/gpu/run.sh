#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check, from the repository root, on the lent
# H200 (nvcc, cmake, PyTorch, driver; no package registry). The key
# figures come first, then correctness, then what time is left; it fits
# 8 minutes from a bare machine (WEFT_GPU_BUDGET_S, default 480 s: each
# step reads the clock and a step that would overrun is skipped, said so).
#
# Needs, from tests/gpu/prepare.sh run beforehand on a machine with apt and
# PyPI, carried with the working tree: tests/gpu/debs (the Debian packages
# weft links against, packed) and tests/gpu/wheels (diffusers and what a
# torch install lacks for it). With the device tool:
#   run(command="bash tests/gpu/run.sh", carry=["tests/gpu/debs", "tests/gpu/wheels"],
#       timeout_s=560)
#
# Steps, in this order (each prints a "== " header), with estimates for
# the 16-core H200 machine (the guards use the clock, not these figures):
#   1. environment: GPU, nvcc, nsys, the carried prefix unpacked, the
#      wheels python3 lacks installed into /tmp/weft-site     ~10 s
#   2. configure + build, Release, CUDA sm_90a, WEFT_WERROR=OFF (a new
#      warning of the device's compiler must not end the only run), NCCL
#      from the toolkit or torch's nvidia-nccl wheel, against the carried
#      Debian prefix                                           ~120 s
#   3. the FLUX.1-dev forward beside diffusers eager (flux_bench.py:
#      24 x 128 heads, 19 + 38 blocks, 22 GiB of bf16 weights written once,
#      4096 + 512 tokens): ms per forward, the ratio, the share of the bf16
#      matrix rate measured in the same run, the max difference (and
#      against diffusers' f32 run); weftd's arena --gpu-memory 0.45. Under
#      WEFT_FLUX_FULL_S (200 s) left: 5 + 10 blocks, said so; under 100 s:
#      skipped. torch.compile only with WEFT_FLUX_COMPILE=1. The same
#      forward with cuda_graphs = blocks, from a second weftd (arena 0.22)
#      loaded beside the first and timed after it in each repeat: the
#      ratio without / with graphs (WEFT_FLUX_GRAPHS=0 skips it: ~25 s
#      of load). The checkpoint is kept for step 6              ~115 s
#   4. attention at the FLUX forward's own shape (S = 4,608, 24 heads x
#      128, bf16, non-causal): bench_cuda_attention (the default kernel)
#      beside torch SDPA (sdpa_bench.py), TFLOP/s and ratio     ~20 s
#   5. the Wan benchmark (wan_bench.py: Wan 2.1 T2V 1.3B's configuration,
#      480p x 81 frames, 32,760 + 512 tokens; --devices cuda and cuda:0,0
#      with ulysses = 2) when >= WEFT_WAN_BENCH_NEED_S (90) are left;
#      WEFT_WAN_BENCH=0 skips it                                ~80 s
#   6. nsys: one FLUX forward's per-kernel breakdown (weftd under `nsys
#      profile --trace=cuda`, weftctl load + one forward, the daemon
#      stopped, `nsys stats --report cuda_gpu_kern_sum`'s top 20 into the
#      report and nsys-kernels.txt); skipped when nsys is absent or under
#      60 s are left                                            ~60 s
#   7. correctness: test_cuda_host; test_ops_conformance --cuda (every
#      model op against fp64); test_cuda_gpu ONCE with the default kernel
#      (the wgmma building blocks, the model ops against the CPU backend,
#      attention, LSE merge, cuBLASLt's GELU form, NCCL worlds). The
#      daemons' kernel (--cuda-attention) is chosen from its attention
#      cases alone: the default when they pass, else mma when
#      `test_cuda_gpu --attention-variants mma` passes; a failing model op
#      or GELU case does not change it. Then weftd serving the
#      head-dim-64 FLUX fixtures (flux-small-d64 f32 / bf16) against
#      diffusers' outputs on --devices cuda, cuda:0,0 --mesh tp=2 and
#      cuda:0,0,0,0 --mesh tp=2,ulysses=2 (weftctl's tolerances: f32
#      1e-4, bf16 3e-2 x max |ref|), and a cluster of one GPU node whose
#      data plane is NCCL (nccl_cluster.sh)                     ~90 s
#   8. only with time left (each checks the clock): the ws / fp8
#      attention variants (attention_variants.sh, own budget), the staged
#      ring (staged_ring.sh), the three kernels (wgmma, wgmma-pipe, mma)
#      beside SDPA at S 4096 / 16384, causal or not, weftd attention-demo,
#      test_kernels (the CPU backend)
# Steps 1-7: ~470 s. WEFT_ATTN_VARIANTS_ONLY=1 runs steps 1-2 and then
# the variants (their figures need a call of their own); WEFT_WAN_BENCH_ONLY=1
# steps 1-2 and then the Wan benchmark.
#
# A run cut short keeps what it measured: the report is written line by
# line, and each step copies its files under $OUT when it ends. Every wait
# has a bound: the tests and tools run under `timeout`, every daemon is
# stopped by stop_pid (SIGTERM, a bounded wait, then SIGKILL).
#
# A plumbing run without a GPU (the script's logic on a CPU build; the
# missing pieces, nvidia-smi, nvcc, nsys, the carried prefix, say so and
# are skipped):
#   WEFT_GPU_BUILD_DIR=DIR   an existing build (a CPU one): no configure / build
#   WEFT_GPU_DEV1 / _DEV2 / _DEV4   weftd --devices of the three fixture
#                            daemons (default cuda, cuda:0,0, cuda:0,0,0,0;
#                            e.g. cpu:1, cpu:2, cpu:4)
#   WEFT_PYTHON=PATH         the python with torch (default python3)
#   WEFT_FLUX_ARGS="..."     appended to flux_bench.py's arguments (e.g.
#                            "--tiny --device cpu --devices cpu:2 --grid 8 --txt 16")
#   WEFT_WAN_ARGS="..."      appended to wan_bench.py's arguments (e.g.
#                            "--tiny --device cpu --meshes cpu:1 cpu:2/ulysses=2")
#   WEFT_NC_WEFTD, WEFT_NC_DEVICES, WEFT_NC_API, WEFT_NC_FLAGS
#                            nccl_cluster.sh's daemon on the NCCL stand-in
#                            (BUILD/tests/weftd_ncclsi, cpu:1, nccl-standin,
#                            "--cpu-memory 1G")
#
# Output: stdout, and under $OUT when set (the device tool returns at most
# 8 files): gpu-report.txt (what stdout shows), flux-bench.txt and
# flux-bench.json, wan-bench.txt and wan-bench.json (the benchmarks'
# figures), nsys-kernels.txt, gpu-logs.tar.gz (the build log, every test
# and weftd log). Without $OUT they go to /tmp.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
start=$(date +%s)
budget=${WEFT_GPU_BUDGET_S:-480}
out=${OUT:-/tmp}
logs=/tmp/weft-gpu-logs
rm -rf "$logs"
mkdir -p "$logs" "$out"
report=$out/gpu-report.txt
: > "$report"
say() { echo "$*" | tee -a "$report"; }
elapsed() { echo "$(( $(date +%s) - start ))s"; }
left() { echo $(( budget - ($(date +%s) - start) )); }
summary=()
note() { summary+=("$*"); }
# save_out: the files of the steps done so far under $OUT (a run killed
# later still returns them).
save_out() {
  local f
  for f in flux-bench.txt flux-bench.json wan-bench.txt wan-bench.json nsys-kernels.txt; do
    [ -f "$logs/$f" ] && cp -f "$logs/$f" "$out/"
  done
  tar -C /tmp -czf "$out/gpu-logs.tar.gz.part" weft-gpu-logs 2>/dev/null &&
    mv -f "$out/gpu-logs.tar.gz.part" "$out/gpu-logs.tar.gz"
}
flux_dir=
finish() {
  say "== summary ($(elapsed) of ${budget}s)"
  local s
  for s in "${summary[@]}"; do say "  $s"; done
  [ -n "$flux_dir" ] && rm -rf "$flux_dir"
  save_out
}
trap finish EXIT

py=${WEFT_PYTHON:-python3}
bd=${WEFT_GPU_BUILD_DIR:-build-gpu}
dev1=${WEFT_GPU_DEV1:-cuda}
dev2=${WEFT_GPU_DEV2:-cuda:0,0}
dev4=${WEFT_GPU_DEV4:-cuda:0,0,0,0}
gpu=$PWD/tests/gpu
# stop_pid, av_tflops / av_ratio, step_begin / step_left / step_skip
# (run.sh's say, note, left and elapsed stay: lib.sh defines stand-ins
# only when they are absent)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$gpu/lib.sh"

# wait_socket SOCK PID SECONDS: true once the daemon PID answers hello on
# SOCK (each try waits up to 1 s for the reply); false as soon as it
# exits, or after SECONDS.
wait_socket() {
  local end=$((SECONDS + $3))
  while [ "$SECONDS" -lt "$end" ]; do
    kill -0 "$2" 2>/dev/null || return 1
    "$bd"/client/weftctl --endpoint "ipc://$1" --timeout 1000 hello >/dev/null 2>&1 && return 0
  done
  return 1
}

# The carried prefix: tests/gpu/debs/root.tar.xz (prepare.sh), unpacked
# outside the tree (so that a later call does not carry it twice); an
# unpacked tests/gpu/debs/root from an older prepare.sh is used as it is.
root=$gpu/debs/root
if [ ! -d "$root/usr/lib/x86_64-linux-gnu" ] && [ -f "$gpu/debs/root.tar.xz" ]; then
  root=/tmp/weft-gpu-prefix/root
  if [ ! -d "$root/usr/lib/x86_64-linux-gnu" ]; then
    rm -rf /tmp/weft-gpu-prefix && mkdir -p /tmp/weft-gpu-prefix
    # python3 unpacks where xz is absent
    if command -v xz >/dev/null; then
      tar -C /tmp/weft-gpu-prefix -xJf "$gpu/debs/root.tar.xz"
    else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
        "$gpu/debs/root.tar.xz" /tmp/weft-gpu-prefix
    fi
  fi
fi
lib=$root/usr/lib/x86_64-linux-gnu

say "== environment ($(elapsed))"
if [ -d "$lib" ]; then
  export PATH=$root/usr/bin:$PATH
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$root
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # pkg-config drops -L for the system libdir, which the carried prefix
  # mirrors: name both folders explicitly for the linker.
  export PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  export LDFLAGS="-L$lib -L$lib/openblas-pthread -Wl,-rpath-link,$lib -Wl,-rpath-link,$lib/openblas-pthread"
elif [ -n "${WEFT_GPU_BUILD_DIR:-}" ]; then
  say "no carried prefix (tests/gpu/debs): the build in $bd runs on this machine's libraries"
else
  say "run.sh: tests/gpu/debs missing: run tests/gpu/prepare.sh first and carry tests/gpu/debs"
  note "environment: no tests/gpu/debs (prepare.sh)"
  exit 2
fi
export PATH=$PATH:/usr/local/cuda/bin
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$report"
else
  say "no nvidia-smi: no GPU driver here"
fi
if command -v nvcc >/dev/null; then
  nvcc --version | tail -1 | tee -a "$report"
else
  say "no nvcc"
fi
nsys=$(command -v nsys)
for f in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
  [ -z "$nsys" ] && [ -x "$f" ] && nsys=$f
done
say "nsys: ${nsys:-absent (the per-kernel breakdown is skipped)}"
"$py" -c 'import sys, torch; print(f"python {sys.version.split()[0]}, torch {torch.__version__}")' 2>&1 \
  | tail -1 | tee -a "$report"
nccl_args=()
if ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  ncclroot=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [ -n "$ncclroot" ] && [ -f "$ncclroot/include/nccl.h" ]; then
    nccl_args=(-DNCCL_ROOT="$ncclroot")
    export LD_LIBRARY_PATH=$ncclroot/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "NCCL from torch's wheel: $ncclroot"
  else
    say "no NCCL in the toolkit or torch's wheel: CMake looks in the system paths"
  fi
fi

# diffusers for the benchmarks: each carried wheel whose distribution
# python3 lacks (or has older, for diffusers' pinned needs) goes into
# /tmp/weft-site, put on PYTHONPATH for the benchmarks only.
site=/tmp/weft-site
have_diffusers=0
if [ -d "$gpu/wheels" ]; then
  mapfile -t need < <("$py" - "$gpu/wheels" <<'EOF'
import glob, importlib.metadata as md, os, re, sys
def key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])
for w in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    name, ver = os.path.basename(w).split("-")[:2]
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        print(w)
        continue
    if name.lower() in ("diffusers", "huggingface_hub", "safetensors") and key(have) < key(ver):
        print(w)
EOF
  )
  rm -rf "$site"
  if [ ${#need[@]} -gt 0 ]; then
    timeout 120 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$site" "${need[@]}" > "$logs/pip.log" 2>&1 ||
      say "pip install of the wheels FAILED (gpu-logs: pip.log)"
  fi
  say "wheels installed into $site: ${#need[@]} ($(for w in "${need[@]}"; do basename "$w" | cut -d- -f1-2; done | tr '\n' ' '))"
else
  say "no tests/gpu/wheels: diffusers as $py has it"
fi
if PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout 120 "$py" -c \
    'import diffusers; from diffusers import FluxTransformer2DModel; print("diffusers", diffusers.__version__)' \
    2>"$logs/diffusers-import.log" | tee -a "$report"; then
  have_diffusers=1
else
  say "diffusers does not import: the benchmarks are skipped ($(tail -1 "$logs/diffusers-import.log"))"
fi

# bench_summary NAME: the last summary NAME.txt holds, into the summary.
bench_summary() {
  local line
  while IFS= read -r line; do note "  $line"; done < <(awk '/^== summary/ { b = ""; next } { b = b $0 "\n" } END { printf "%s", b }' "$logs/$1.txt" 2>/dev/null)
}

# shm_or_tmp NAME GIB: a directory for a checkpoint of GIB GiB: in memory
# (/dev/shm) when it has room for it (no disk to write and read back),
# else under /tmp.
shm_or_tmp() {
  local kib
  kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "${kib:-0}" -gt $(($2 * 1024 * 1024)) ]; then echo "/dev/shm/$1"; else echo "/tmp/$1"; fi
}

# ---- steps ------------------------------------------------------------------

build_step() {
  local log=$logs/build-gpu.log targets
  say "== build ($(elapsed))"
  if [ -n "${WEFT_GPU_BUILD_DIR:-}" ]; then
    say "using the build in $bd (WEFT_GPU_BUILD_DIR): not configured or built here"
    note "build: $bd as given"
    return 0
  fi
  # WEFT_WERROR=OFF: a warning that this machine's compiler adds must not
  # end the only run (CI builds with -Werror where the code is written).
  timeout 120 cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON -DWEFT_WERROR=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90a "${nccl_args[@]}" > "$log" 2>&1 || {
    tail -30 "$log" | tee -a "$report"; say "configure FAILED"; note "build: configure FAILED"; exit 1; }
  grep "weft:" "$log" | tee -a "$report"
  targets=(test_cuda_host test_ops_conformance test_cuda_gpu bench_cuda_attention bench_staged_ring
           bench_ring_fuse test_kernels weftd weftctl)
  timeout 360 cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >> "$log" 2>&1 || {
    grep -E "error|Error" -A3 "$log" | head -40 | tee -a "$report"
    say "build FAILED at $(elapsed)"; note "build: FAILED"; exit 1; }
  say "built in $(elapsed); $(grep -c -i "warning" "$log") warning line(s) (gpu-logs: build-gpu.log)"
  note "build: ok at $(elapsed)"
}

flux_step() {
  say "== FLUX forward beside diffusers eager ($(elapsed))"
  local l rc depth=() fargs=() comp=()
  l=$(left)
  if [ $have_diffusers -eq 0 ]; then
    say "skipped: no diffusers"; note "flux_bench: skipped (no diffusers)"; return
  elif [ "$l" -lt 100 ]; then
    say "skipped: ${l}s left (it needs 100)"; note "flux_bench: skipped (${l}s left)"; return
  fi
  read -ra fargs <<<"${WEFT_FLUX_ARGS:-}"
  if [ "$l" -lt "${WEFT_FLUX_FULL_S:-200}" ]; then
    depth=(--layers 5 --single-layers 10)
    say "${l}s left (< ${WEFT_FLUX_FULL_S:-200}s): the same width with 5 + 10 blocks instead of 19 + 38"
  fi
  [ "${WEFT_FLUX_COMPILE:-0}" = 1 ] && comp=(--compile)
  [ "${WEFT_FLUX_GRAPHS:-1}" = 0 ] && comp+=(--no-graphs)
  # its own share: what the steps after it need stays (they skip
  # themselves when it is not there)
  local cap=$(( l < 180 ? l : 180 ))
  flux_dir=$(shm_or_tmp weft-flux-bench 30)
  say "checkpoint directory: $flux_dir"
  PYTHONUNBUFFERED=1 PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout -k 10 $((cap - 5)) \
    "$py" tests/gpu/flux_bench.py --weftd "$bd"/daemon/weftd --weftctl "$bd"/client/weftctl \
      --devices cuda --dir "$flux_dir" --out "$logs" --deadline-s $((cap - 25)) \
      "${comp[@]}" "${depth[@]}" "${fargs[@]}" 2>&1 | tee "$logs/flux-bench.out" | tee -a "$report"
  rc=${PIPESTATUS[0]}
  note "flux_bench: exit $rc"
  bench_summary flux-bench
  save_out
}

attention_shape_step() {
  say "== attention at the FLUX forward's shape: bf16, B 1, S 4608, 24 heads x 128, non-causal ($(elapsed))"
  if [ "$(left)" -lt 30 ]; then
    say "skipped: $(left)s left"; note "attention at FLUX's shape: skipped (time)"; return
  fi
  local w s wt st ratio
  if [ -x "$bd/bench/bench_cuda_attention" ]; then
    w=$(timeout 30 "$bd"/bench/bench_cuda_attention 4608 24 128 0 2>&1 | tail -1)
  else
    w="no $bd/bench/bench_cuda_attention (a build without CUDA)"
  fi
  s=$(timeout 60 "$py" tests/gpu/sdpa_bench.py 4608 24 128 0 2>&1 | tail -1)
  wt=$(sed -n 's/^weft .*tflops=\([0-9.]*\).*/\1/p' <<<"$w")
  st=$(sed -n 's/^sdpa .*tflops=\([0-9.]*\).*/\1/p' <<<"$s")
  ratio=$(av_ratio "$wt" "$st")
  say "weft (default kernel): $w"
  say "torch SDPA: $s"
  say "weft / SDPA: $ratio"
  note "attention S 4608 H 24 D 128 bf16: weft ${wt:-?} TFLOP/s, SDPA ${st:-?}, ratio $ratio"
}

wan_step() {
  say "== Wan forward beside diffusers ($(elapsed))"
  local l rc wdir wargs=()
  l=$(left)
  if [ "${WEFT_WAN_BENCH:-1}" = 0 ]; then
    say "skipped (WEFT_WAN_BENCH=0)"; note "wan_bench: skipped"; return
  elif [ $have_diffusers -eq 0 ]; then
    say "skipped: no diffusers"; note "wan_bench: skipped (no diffusers)"; return
  elif [ "$l" -lt "${WEFT_WAN_BENCH_NEED_S:-90}" ]; then
    say "skipped: ${l}s left (it needs ${WEFT_WAN_BENCH_NEED_S:-90})"
    note "wan_bench: skipped (${l}s left)"; return
  fi
  read -ra wargs <<<"${WEFT_WAN_ARGS:-}"
  local cap=$(( l < 150 ? l : 150 ))
  wdir=$(shm_or_tmp weft-wan-bench 8)
  say "checkpoint directory: $wdir"
  PYTHONUNBUFFERED=1 PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout -k 10 $((cap - 5)) \
    "$py" tests/gpu/wan_bench.py --weftd "$bd"/daemon/weftd --weftctl "$bd"/client/weftctl \
      --dir "$wdir" --out "$logs" --deadline-s $((cap - 20)) "${wargs[@]}" 2>&1 \
      | tee "$logs/wan-bench.out" | tee -a "$report"
  rc=${PIPESTATUS[0]}
  rm -rf "$wdir"
  note "wan_bench: exit $rc"
  bench_summary wan-bench
  save_out
}

# daemon_pid SOCK: the pid of the weftd listening on SOCK (the one nsys
# started, which is not $!: nsys's own command line names SOCK too, so
# the program name must be weftd), or nothing.
daemon_pid() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    [[ $(head -z -n1 "$f" 2>/dev/null | tr -d '\0') == */weftd ]] || continue
    if tr '\0' ' ' < "$f" 2>/dev/null | grep -qF -- "ipc://$1 "; then
      f=${f#/proc/}; echo "${f%/cmdline}"; return
    fi
  done
}

nsys_step() {
  say "== nsys: the kernels of one FLUX forward ($(elapsed))"
  local io=$flux_dir/io-flux-bench.safetensors rep=/tmp/weft-nsys/flux sock=/tmp/weft-nsys-$$.sock
  local npid wpid rc f
  if [ -z "$nsys" ]; then
    say "skipped: no nsys on this machine"; note "nsys: skipped (absent)"; return
  elif [ -z "$flux_dir" ] || [ ! -f "$io" ]; then
    say "skipped: no FLUX checkpoint (step 3 wrote none)"; note "nsys: skipped (no checkpoint)"; return
  elif [ "$(left)" -lt 60 ]; then
    say "skipped: $(left)s left (it needs 60)"; note "nsys: skipped (time)"; return
  fi
  rm -rf /tmp/weft-nsys && mkdir -p /tmp/weft-nsys
  rm -f "$sock"
  "$nsys" profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true -o "$rep" \
    "$bd"/daemon/weftd --devices "$dev1" --model-root "$flux_dir" --listen "ipc://$sock" \
    > "$logs/nsys-weftd.log" 2>&1 &
  npid=$!
  if ! wait_socket "$sock" "$npid" 60; then
    say "weftd under nsys did not come up: $(tail -2 "$logs/nsys-weftd.log" | tr '\n' ' ')"
    note "nsys: weftd did not come up"
    stop_pid "$npid" 20 nsys
    return
  fi
  timeout 150 "$bd"/client/weftctl --endpoint "ipc://$sock" load flux-bench flux-bench \
    > "$logs/nsys-load.out" 2>&1
  rc=$?
  grep -v "^loading .*%" "$logs/nsys-load.out" | tail -2 | sed 's/^/  /' | tee -a "$report"
  if [ $rc -eq 0 ]; then
    timeout 60 "$bd"/client/weftctl --endpoint "ipc://$sock" forward --model flux-bench \
      --inputs "$io" --iters 1 2>&1 | tail -3 | sed 's/^/  /' | tee -a "$report"
  fi
  wpid=$(daemon_pid "$sock")
  if [ -n "$wpid" ]; then
    kill -TERM "$wpid" 2>/dev/null
  else
    say "weftd's pid under nsys not found: nsys is stopped instead"
  fi
  # nsys writes its report once the daemon has exited
  wait_pid "$npid" 120 || say "nsys still running 120 s after the daemon's SIGTERM"
  stop_pid "$npid" 20 nsys
  local file=
  for f in "$rep".nsys-rep "$rep".qdrep; do [ -f "$f" ] && file=$f && break; done
  if [ -z "$file" ]; then
    say "no report written ($(tail -2 "$logs/nsys-weftd.log" | tr '\n' ' '))"
    note "nsys: no report"; return
  fi
  # the report's name: cuda_gpu_kern_sum since nsys 2023, gpukernsum before
  timeout 90 "$nsys" stats --report cuda_gpu_kern_sum --format table "$file" \
    > "$logs/nsys-stats.txt" 2>&1 ||
    timeout 60 "$nsys" stats --report gpukernsum "$file" > "$logs/nsys-stats.txt" 2>&1
  {
    echo "weftd under nsys profile --trace=cuda: the load of the benchmark's FLUX checkpoint and"
    echo "one forward on its inputs; kernels by total time, the top 20:"
    sed -n '/Time (%)/,$p' "$logs/nsys-stats.txt" | head -n 22
  } > "$logs/nsys-kernels.txt"
  tee -a "$report" < "$logs/nsys-kernels.txt"
  note "nsys: $(($(wc -l < "$logs/nsys-kernels.txt") - 4)) kernel line(s) in nsys-kernels.txt"
  rm -rf /tmp/weft-nsys
  save_out
}

# weftd on DEVICES with extra flags; then each remaining argument is one
# weftctl command line run against it. Refused devices: a message, skipped.
# A `forward` line's verdict goes to the summary with its relative error
# (max abs error / max |ref|, from weftctl's tolerance and the io file's
# dtype factor: f32 1e-4, bf16 3e-2).
serve_n=0
serve() {
  local devices=$1; shift
  local flags=$1; shift
  local sock=/tmp/weft-gpu-$$.sock
  # the summary's name of this daemon: devices and flags, less the root
  local label="$devices $flags" r
  case $flags in
    --model-root*) r=${flags#--model-root }; label=$devices
                   case $r in *" "*) label="$devices ${r#* }" ;; esac ;;
  esac
  serve_n=$((serve_n + 1))
  local dlog=$logs/weftd-gpu-$serve_n.log
  rm -f "$sock"
  # shellcheck disable=SC2086
  "$bd"/daemon/weftd --devices "$devices" $flags --cuda-attention "$daemon_kern" \
      --listen "ipc://$sock" > "$dlog" 2>&1 &
  local wpid=$!
  if wait_socket "$sock" "$wpid" 10; then
    say "weftd --devices $devices $flags --cuda-attention $daemon_kern"
    timeout 60 "$bd"/client/weftctl --endpoint "ipc://$sock" status 2>&1 | tee -a "$report"
    local cmd cout rc
    for cmd in "$@"; do
      say "weftctl $cmd"
      cout=$logs/weftctl-$serve_n.out
      # shellcheck disable=SC2086
      timeout 60 "$bd"/client/weftctl --endpoint "ipc://$sock" $cmd > "$cout" 2>&1
      rc=$?
      # load's progress lines stay in the logs
      grep -v "^loading .*%" "$cout" | sed 's/^/  /' | tee -a "$report"
      say "weftctl exit $rc"
      case $cmd in
        forward*)
          local io f v
          io=$(sed -n 's/.*--inputs \([^ ]*\).*/\1/p' <<<"$cmd")
          case $io in *bf16*) f=3e-2 ;; *) f=1e-4 ;; esac
          v=$(sed -n 's/.*max abs error \([^ ]*\) (tolerance \([^)]*\)) \([A-Z]*\).*/\1 \2 \3/p' "$cout")
          if [ -n "$v" ]; then
            local e t p
            read -r e t p <<<"$v"
            note "forward $(basename "$io" .safetensors) on $label: $p, max err $e," \
                 "err / max|ref| $(awk -v e="$e" -v t="$t" -v f="$f" 'BEGIN { printf "%.2e", e / (t / f) }')" \
                 "(tolerance $f)"
          else
            note "forward $(basename "$io" .safetensors) on $label: FAILED (exit $rc: $(tail -1 "$cout"))"
          fi ;;
        load*) [ $rc -eq 0 ] || note "load on $label: FAILED (exit $rc: $(tail -1 "$cout"))" ;;
        attention-demo*) note "attention-demo on $label: exit $rc" ;;
      esac
    done
    stop_pid "$wpid" 30 weftd
    say "weftd exit $?"
    grep -E "comm:|NCCL|ERR|error|failed|attention kernel" "$dlog" | head -6 | tee -a "$report"
  else
    say "weftd --devices $devices $flags refused: skipped"
    head -3 "$dlog" | tee -a "$report"
    note "weftd --devices $label: refused ($(head -1 "$dlog"))"
    stop_pid "$wpid" 10 weftd >/dev/null
  fi
}

# The daemons' attention kernel (--cuda-attention), from the attention
# cases of test_cuda_gpu's log $1 alone: auto when they ran and none
# failed (the run reached the merge checks after them, or ended), else
# mma when its attention cases pass by themselves, else auto, said so.
daemon_kern=auto
choose_kernel() {
  local tlog=$1 rc=$2 n nf mlog
  n=$(grep -c "^  attn" "$tlog")
  nf=$(grep "^  attn" "$tlog" | grep -c FAIL)
  if [ "$n" -gt 0 ] && [ "$nf" -eq 0 ] && { [ "$rc" != 124 ] || grep -q "^  lse_merge" "$tlog"; }; then
    daemon_kern=auto
    say "daemons' kernel: auto (the default kernel's $n attention cases passed)"
    return
  fi
  say "the default kernel's attention: $n cases, $nf failing, exit $rc: trying mma's cases alone"
  mlog=$logs/test_cuda_gpu-mma.log
  [ -x "$bd/tests/test_cuda_gpu" ] &&
    timeout 60 "$bd"/tests/test_cuda_gpu --attention-variants mma > "$mlog" 2>&1
  if grep -q "^variant mma (mma): 0 failing checks" "$mlog" 2>/dev/null; then
    daemon_kern=mma
    say "daemons' kernel: mma (its attention cases passed)"
  else
    daemon_kern=auto
    say "daemons' kernel: auto (mma's attention cases did not pass either)"
  fi
  note "daemons' attention kernel: $daemon_kern (the default kernel's cases: $nf of $n failing)"
}

correctness_step() {
  say "== correctness: every op, attention, the fixtures ($(elapsed))"
  local rc tlog
  if [ -x "$bd/tests/test_cuda_host" ]; then
    timeout 60 "$bd"/tests/test_cuda_host 2>&1 | tail -1 | tee -a "$report"
    note "test_cuda_host: exit ${PIPESTATUS[0]}"
  else
    say "no $bd/tests/test_cuda_host"; note "test_cuda_host: not built"
  fi
  # every model op on CUDA against fp64 (tests/unit/test_ops_conformance.c)
  if [ -x "$bd/tests/test_ops_conformance" ]; then
    timeout 60 "$bd"/tests/test_ops_conformance --cuda > "$logs/ops_conformance.log" 2>&1
    rc=$?
    grep -E "FAIL|cuda|passed" "$logs/ops_conformance.log" | head -24 | tee -a "$report"
    note "test_ops_conformance --cuda: exit $rc, $(grep -c FAIL "$logs/ops_conformance.log") FAIL lines"
  else
    say "no $bd/tests/test_ops_conformance"; note "test_ops_conformance: not built"
  fi
  # test_cuda_gpu once, with the default kernel; the full log is in gpu-logs
  tlog=$logs/test_cuda_gpu.log
  if [ -x "$bd/tests/test_cuda_gpu" ] && [ "$(left)" -ge 60 ]; then
    say "-- test_cuda_gpu (the default kernel)"
    timeout 120 "$bd"/tests/test_cuda_gpu > "$tlog" 2>&1
    rc=$?
    local ops='linear|bias_act|act|add|modln|gate_residual|head_norm_rope|rope_table|timestep|copy_rows|op |GELU'
    grep -E "wgmma|kernel:|FAIL|failure|nccl|$ops" "$tlog" | grep -v "^  attn B.*ok" | head -48 | tee -a "$report"
    say "attention cases: $(grep -c "^  attn" "$tlog"), failing: $(grep "^  attn" "$tlog" | grep -c FAIL)"
    say "test_cuda_gpu exit $rc$( [ $rc = 124 ] && echo " (timed out after 120 s)")"
    note "test_cuda_gpu: exit $rc, $(grep -c FAIL "$tlog") FAIL lines"
    choose_kernel "$tlog" "$rc"
  elif [ -x "$bd/tests/test_cuda_gpu" ]; then
    say "test_cuda_gpu: skipped ($(left)s left); daemons' kernel: auto"
    note "test_cuda_gpu: skipped (time)"
  else
    say "no $bd/tests/test_cuda_gpu (a build without CUDA); daemons' kernel: auto"
    note "test_cuda_gpu: not built"
  fi
  save_out

  say "== FLUX fixtures through weftd, kernel $daemon_kern ($(elapsed))"
  local fx=$PWD/tests/fixtures
  # flux-small-d64 (f32) and flux-small-d64-bf16: 2 heads x 64, made by
  # tests/parity/make_fixtures.py with diffusers. Not the flux-tiny ones:
  # their head dim is 12 and the CUDA attention kernels take D = 64 and
  # 128 only, so they cannot pass on CUDA (the CPU tests serve them).
  local fixture_cmds=(
    "load flux-small-d64 flux-small-d64"
    "forward --model flux-small-d64 --inputs $fx/io-flux-small-d64-f32.safetensors --iters 3"
    "load flux-small-d64-bf16 flux-small-d64-bf16"
    "forward --model flux-small-d64-bf16 --inputs $fx/io-flux-small-d64-bf16.safetensors --iters 3"
    "models"
  )
  local d mesh
  for d in "$dev1|" "$dev2|--mesh tp=2" "$dev4|--mesh tp=2,ulysses=2"; do
    mesh=${d#*|}
    if [ "$(left)" -lt 20 ]; then
      say "weftd --devices ${d%%|*} $mesh: skipped ($(left)s left)"
      note "fixtures on ${d%%|*}: skipped (time)"
      continue
    fi
    serve "${d%%|*}" "--model-root $fx${mesh:+ $mesh}" "${fixture_cmds[@]}"
  done
  save_out

  say "== a cluster of one GPU node, NCCL bootstrapped by the rendezvous ($(elapsed))"
  if [ "$(left)" -lt 40 ]; then
    say "skipped: $(left)s left"
    note "nccl cluster world: skipped (time)"
  else
    WEFT_NC_FLAGS="--cuda-attention $daemon_kern ${WEFT_NC_FLAGS:-}" timeout 120 \
      bash tests/gpu/nccl_cluster.sh "$bd" "$logs" 2>&1 | tee -a "$report"
    rc=${PIPESTATUS[0]}
    note "nccl cluster world (1 GPU node, id through the world message): $rc failed check(s)"
  fi
  save_out
}

# The three kernels beside SDPA at 4096 / 16384, causal or not (one
# process each side).
kernels_step() {
  say "== the three kernels beside torch SDPA, bf16, B 1, H 24, D 128 ($(elapsed))"
  if [ "$(left)" -lt 60 ]; then
    say "skipped: $(left)s left (BENCHMARKS.md holds figures)"; note "kernels x3 vs SDPA: skipped (time)"; return
  elif [ ! -x "$bd/bench/bench_cuda_attention" ]; then
    say "skipped: no $bd/bench/bench_cuda_attention"; note "kernels x3 vs SDPA: not built"; return
  fi
  local shapes=(4096 0 4096 1 16384 0 16384 1) sargs=() i S c line sd k wt
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do sargs+=("${shapes[i]}" 24 128 "${shapes[i+1]}"); done
  timeout 90 "$py" tests/gpu/sdpa_bench.py "${sargs[@]}" > "$logs/sdpa.log" 2>&1
  timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) "$bd"/bench/bench_cuda_attention \
    --variants wgmma,wgmma-pipe,mma "${sargs[@]}" > "$logs/bench-kernels.log" 2>&1
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do
    S=${shapes[i]}; c=${shapes[i+1]}
    sd=$(av_tflops "$logs/sdpa.log" sdpa "$S" "$c")
    for k in wgmma wgmma-pipe mma; do
      line=$(grep "^weft kernel=$k S=$S .*causal=$c " "$logs/bench-kernels.log" | tail -1)
      wt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$line")
      say "S=$S causal=$c $k: ${wt:-FAILED} TFLOP/s, sdpa ${sd:-?}, ratio $(av_ratio "$wt" "$sd")"
      [ "$k" = wgmma ] && note "attention S=$S causal=$c wgmma / SDPA: $(av_ratio "$wt" "$sd")"
    done
  done
}

demo_step() {
  say "== weftd attention-demo, kernel $daemon_kern ($(elapsed))"
  if [ "$(left)" -lt 30 ]; then
    say "skipped: $(left)s left"; note "attention-demo: skipped (time)"; return
  fi
  # one GPU per rank (head split), bf16 and f16, causal, GQA, D 128 and 64
  serve "$dev1" "" \
    "attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --iters 3" \
    "attention-demo --seq 1000 --kv-seq 1500 --heads 6 --kv-heads 3 --dim 64 --dtype f16 --causal --iters 3"
  # the mixed mode: four ranks on GPU 0, CUDA kernels, host comm, USP
  [ "$(left)" -ge 20 ] && serve "$dev4" "--mesh ring=2,ulysses=2" \
    "attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --rotate alltoall --iters 2" \
    "attention-demo --seq 1001 --heads 8 --kv-heads 4 --dim 64 --dtype f16 --causal --ring-anything --rotate allgather --iters 2"
}

test_kernels_step() {
  say "== test_kernels, the CPU backend ($(elapsed))"
  if [ "$(left)" -lt 40 ]; then
    say "skipped: $(left)s left (CI runs it)"; note "test_kernels: skipped (time)"; return
  fi
  timeout $(( $(left) - 10 )) "$bd"/tests/test_kernels > "$logs/test_kernels.log" 2>&1
  local rc=$?
  say "test_kernels (CPU reference) exit $rc"
  note "test_kernels: exit $rc"
}

# ---- the run ----------------------------------------------------------------

build_step
save_out
if [ "${WEFT_WAN_BENCH_ONLY:-0}" = 1 ]; then
  wan_step
  say "== WEFT_WAN_BENCH_ONLY=1: the rest of run.sh skipped"
  exit 0
fi
if [ "${WEFT_ATTN_VARIANTS_ONLY:-0}" = 1 ]; then
  . "$gpu/attention_variants.sh" # ends run.sh after the variants
fi
flux_step
attention_shape_step
wan_step
nsys_step
[ -n "$flux_dir" ] && rm -rf "$flux_dir"
flux_dir=
correctness_step
# optional: each checks the clock (and its own budget)
. "$gpu/attention_variants.sh" # ws variants and fp8 (tests, sanitizer, TFLOP/s)
save_out
. "$gpu/staged_ring.sh" # staged ring, overlapped vs synchronous transfers
save_out
kernels_step
demo_step
test_kernels_step
say "== done in $(elapsed)"
