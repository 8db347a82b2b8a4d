#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check, from the repository root, on the lent
# H200 (nvcc, cmake, PyTorch, driver; no package registry). Fits 8 minutes
# (WEFT_GPU_BUDGET_S, default 470 s: each step below checks what is left
# and the optional ones are skipped, said so, rather than overrun).
#
# Needs, from tests/gpu/prepare.sh run beforehand on a machine with apt and
# PyPI, carried with the working tree: tests/gpu/debs (the Debian packages
# weft links against, packed) and tests/gpu/wheels (diffusers and what a
# torch install lacks for it). With the device tool:
#   run(command="bash tests/gpu/run.sh", carry=["tests/gpu/debs", "tests/gpu/wheels"],
#       timeout_s=540)
#
# Steps (each prints a "== " header), with the seconds budgeted for each
# (estimates for 16 cores; the guards use the clock, not these figures):
#   1. environment: GPU, nvcc, the carried prefix unpacked, diffusers
#      installed from the wheels into /tmp/weft-site (only what python3
#      lacks: pip --no-index --no-deps --target)                   ~10 s
#   2. configure + build with CUDA (and NCCL from the toolkit or torch's
#      nvidia-nccl wheel) against the carried Debian prefix       ~120 s
#   3. test_cuda_host; test_ops_conformance --cuda (every model op
#      against fp64); test_cuda_gpu — the wgmma building blocks by name,
#      the model ops (linear, bias_act, act, add, modln, gate_residual,
#      head_norm_rope, rope_table, timestep_proj, copy_rows) against the
#      CPU backend in every dtype they take, CUDA attention vs the CPU
#      backend (dtypes, causal, GQA, uneven shapes, D 64 / 128), LSE merge,
#      conversions, NCCL worlds — for each attention kernel: wgmma (the
#      default on Hopper), wgmma-pipe, mma (WEFT_CUDA_ATTN)          ~40 s
#  3b. tests/gpu/attention_variants.sh: the opt-in ws attention
#      variants' tests (+mc included), compute-sanitizer and TFLOP/s beside
#      SDPA / FA3 (its own budget WEFT_ATTN_VARIANTS_S=180), then the fp8
#      path's tests, sanitizers and TFLOP/s beside SDPA bf16 / FA3 fp8
#      (WEFT_ATTN_FP8_S=100); WEFT_ATTN_VARIANTS=0 skips it,
#      WEFT_ATTN_VARIANTS_ONLY=1 ends run.sh after it (then steps 1-3b
#      fit 8 minutes: ~450 s)                                       ~280 s
#  3c. tests/gpu/staged_ring.sh: bench_staged_ring, the
#      ring with alltoall rotation in the mixed mode with overlapped
#      transfers vs the synchronous staging (and NCCL where R GPUs exist),
#      then bench_ring_fuse cuda (the ring's merge in the kernel's
#      epilogue vs separate passes); WEFT_STAGED_RING=0 skips it      ~45 s
#   4. weftd on the GPU serving the repository's head-dim-64 FLUX
#      fixtures (tests/fixtures: flux-small-d64 f32, flux-small-d64-bf16;
#      the flux-tiny ones have head dim 12, which the CUDA attention
#      kernels do not take) through weftctl load / forward, each checked
#      against diffusers' output in its io file (weftctl's tolerances: f32
#      1e-4 x max |ref| against diffusers' float64 run, bf16 3e-2 x
#      max |ref| against its bf16 run; the error / max |ref| is printed
#      too): --devices cuda (tp 1), then the mixed mode on the one GPU,
#      --devices cuda:0,0 --mesh tp=2 and cuda:0,0,0,0 --mesh
#      tp=2,ulysses=2                                                ~30 s
#   4b. a cluster of one GPU node (tests/gpu/nccl_cluster.sh): weftd
#      --coordinator --nodes 1 --devices cuda: the coordinator draws the
#      ncclUniqueId, the world message carries it, the rank joins NCCL
#      from it ("data plane nccl" in the log); attention (bf16 / f16,
#      fp64 reference) and the two FLUX fixtures' forwards (diffusers'
#      outputs; needs resident models in a cluster)
#      through it (>= 40 s left)                                     ~15 s
#   5. the FLUX benchmark (tests/gpu/flux_bench.py): FLUX.1-dev's
#      configuration (24 x 128 heads, 19 + 38 blocks, 22 GiB of bf16
#      weights written once), 4096 + 512 tokens, weft through weftd beside
#      diffusers eager (and torch.compile when the time left allows);
#      when less than WEFT_FLUX_FULL_S (200 s) is left at its start it
#      runs the same width with 5 + 10 blocks and says so; under 100 s it
#      is skipped. It ends 40 s before the budget; torch.compile runs only
#      if 200 s are left after the eager alternation           ~150-250 s
#  5b. the Wan benchmark (tests/gpu/wan_bench.py): Wan 2.1 T2V 1.3B's
#      configuration (12 x 128 heads, 30 layers, 2.6 GiB of bf16 weights
#      saved by diffusers), 480p x 81 frames (32,760 video + 512 text
#      tokens), diffusers eager (SDPA) beside weft on --devices cuda and on
#      cuda:0,0 with ulysses = 2; a weftd whose Wan forward runs on the
#      CPU backend only refuses the model on the GPU (said so, per mesh)
#      and diffusers' figures stand alone. Runs when
#      >= 90 s are left (WEFT_WAN_BENCH_NEED_S); WEFT_WAN_BENCH=0 skips it,
#      WEFT_WAN_BENCH_ONLY=1 runs steps 1-2 and then only it        ~60-90 s
#   6. attention TFLOP/s of the three kernels against torch SDPA (bf16,
#      B=1, H=24, D=128, S 4096 / 16384, non-causal / causal), ratios
#      (target >= 0.60): BENCHMARKS.md already holds figures, so it runs
#      after the benchmark and only with >= 60 s left                ~50 s
#   7. weftd attention-demo on the GPU: --devices cuda (an NCCL world of
#      one GPU: "comm: NCCL") bf16 / f16, causal, GQA, against the fp64
#      reference; the mixed mode --devices cuda:0,0,0,0 --mesh
#      ring=2,ulysses=2 (>= 30 s left)                               ~15 s
#   8. test_kernels (the CPU backend with the carried OpenBLAS; CI runs it
#      too), if >= 40 s are left; then a summary table.
# Sum of the estimates: ~690 s without steps 6-8, more than one call: run
# it twice, WEFT_ATTN_VARIANTS_ONLY=1 (steps 1-3b, ~450 s: the ws and fp8
# figures) and then WEFT_ATTN_VARIANTS=0 (steps 1-3 and 3c-8, ~400 s; the
# build is redone on a fresh machine); steps 6-8 run on what the benchmark
# leaves (raise WEFT_GPU_BUDGET_S towards the tool's 600 s).
#
# A plumbing run without a GPU (what was checked before any H200 ran it):
#   WEFT_GPU_BUILD_DIR=DIR   an existing build (a CPU one): no configure / build
#   WEFT_GPU_DEV1 / _DEV2 / _DEV4   weftd --devices of the three fixture
#                            daemons (default cuda, cuda:0,0, cuda:0,0,0,0;
#                            e.g. cpu:1, cpu:2, cpu:4)
#   WEFT_PYTHON=PATH         the python with torch (default python3)
#   WEFT_FLUX_ARGS="..."     appended to flux_bench.py's arguments (e.g.
#                            "--tiny --device cpu --devices cpu:2 --grid 8 --txt 16")
#   WEFT_WAN_ARGS="..."      appended to wan_bench.py's arguments (e.g.
#                            "--tiny --device cpu --meshes cpu:1 cpu:2/ulysses=2")
#
# Output: stdout, and under $OUT when set (the device tool returns at most
# 8 files): gpu-report.txt (what stdout shows), flux-bench.txt and
# flux-bench.json, wan-bench.txt and wan-bench.json (the benchmarks'
# figures), gpu-logs.tar.gz (the build log, every test and weftd log).
# Without $OUT they go to /tmp.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
start=$(date +%s)
budget=${WEFT_GPU_BUDGET_S:-470}
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
finish() {
  say "== summary ($(elapsed) of ${budget}s)"
  local s
  for s in "${summary[@]}"; do say "  $s"; done
  tar -C /tmp -czf "$out/gpu-logs.tar.gz" weft-gpu-logs 2>/dev/null
}
trap finish EXIT

py=${WEFT_PYTHON:-python3}
bd=${WEFT_GPU_BUILD_DIR:-build-gpu}
dev1=${WEFT_GPU_DEV1:-cuda}
dev2=${WEFT_GPU_DEV2:-cuda:0,0}
dev4=${WEFT_GPU_DEV4:-cuda:0,0,0,0}
gpu=$PWD/tests/gpu
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

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$report"
nvcc --version | tail -1 | tee -a "$report"
"$py" -c 'import sys, torch; print(f"python {sys.version.split()[0]}, torch {torch.__version__}")' 2>&1 \
  | tail -1 | tee -a "$report"
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

# diffusers for flux_bench.py: each carried wheel whose distribution
# python3 lacks (or has older, for diffusers' pinned needs) goes into
# /tmp/weft-site, put on PYTHONPATH for the benchmark only.
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
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
      "${need[@]}" > "$logs/pip.log" 2>&1 || say "pip install of the wheels FAILED (gpu-logs: pip.log)"
  fi
  say "wheels installed into $site: ${#need[@]} ($(for w in "${need[@]}"; do basename "$w" | cut -d- -f1-2; done | tr '\n' ' '))"
fi
if PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} "$py" -c \
    'import diffusers; from diffusers import FluxTransformer2DModel; print("diffusers", diffusers.__version__)' \
    2>"$logs/diffusers-import.log" | tee -a "$report"; then
  have_diffusers=1
else
  say "diffusers does not import: the FLUX benchmark is skipped ($(tail -1 "$logs/diffusers-import.log"))"
fi

# Step 5b, the Wan benchmark (called after the FLUX benchmark, or right
# after the build with WEFT_WAN_BENCH_ONLY=1).
wan_bench_step() {
  say "== Wan forward beside diffusers ($(elapsed))"
  local l rc bench_dir shm_kib wargs
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
  # the checkpoint (2.6 GiB) in memory when /dev/shm has room for it
  bench_dir=/tmp/weft-wan-bench
  shm_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "${shm_kib:-0}" -gt $((8 * 1024 * 1024)) ]; then bench_dir=/dev/shm/weft-wan-bench; fi
  say "checkpoint directory: $bench_dir"
  PYTHONUNBUFFERED=1 PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout $((l - 10)) \
    "$py" tests/gpu/wan_bench.py --weftd "$bd"/daemon/weftd --weftctl "$bd"/client/weftctl \
      --dir "$bench_dir" --out "$logs" --deadline-s $((l - 25)) "${wargs[@]}" 2>&1 \
      | tee "$logs/wan-bench.out" | tee -a "$report"
  rc=${PIPESTATUS[0]}
  cp "$logs/wan-bench.txt" "$logs/wan-bench.json" "$out/" 2>/dev/null
  rm -rf "$bench_dir"
  note "wan_bench: exit $rc"
  while IFS= read -r line; do note "  $line"; done < <(awk '/^== summary/ { b = ""; next } { b = b $0 "\n" } END { printf "%s", b }' "$logs/wan-bench.txt" 2>/dev/null)
}

log=$logs/build-gpu.log
say "== build ($(elapsed))"
if [ -n "${WEFT_GPU_BUILD_DIR:-}" ]; then
  say "using the build in $bd (WEFT_GPU_BUILD_DIR): not configured or built here"
  note "build: $bd as given"
else
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON -DWEFT_WERROR=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a "${nccl_args[@]}" > "$log" 2>&1 || {
  tail -30 "$log"; say "configure FAILED"; note "build: configure FAILED"; exit 1; }
grep "weft:" "$log" | tee -a "$report"
targets=(test_cuda_host test_ops_conformance test_cuda_gpu bench_cuda_attention bench_staged_ring bench_ring_fuse test_kernels weftd weftctl)
cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >> "$log" 2>&1 || {
  grep -E "error|Error" -A3 "$log" | head -40; say "build FAILED"; note "build: FAILED"; exit 1; }
say "built in $(elapsed)"
note "build: ok at $(elapsed)"
fi

if [ "${WEFT_WAN_BENCH_ONLY:-0}" = 1 ]; then
  wan_bench_step
  say "== WEFT_WAN_BENCH_ONLY=1: the rest of run.sh skipped"
  exit 0
fi

say "== tests ($(elapsed))"
timeout 60 "$bd"/tests/test_cuda_host 2>&1 | tail -1 | tee -a "$report"
note "test_cuda_host: exit ${PIPESTATUS[0]}"
# every model op on CUDA against fp64 (tests/unit/test_ops_conformance.c:
# the rows that never ran before a GPU did)
timeout 60 "$bd"/tests/test_ops_conformance --cuda > "$logs/ops_conformance.log" 2>&1
rc=$?
grep -E "FAIL|cuda|passed" "$logs/ops_conformance.log" | head -24 | tee -a "$report"
note "test_ops_conformance --cuda: exit $rc, $(grep -c FAIL "$logs/ops_conformance.log") FAIL lines"
# Each kernel's test; a kernel whose test hangs (timeout) is not benched.
# The daemon runs on the first kernel whose test passed.
declare -A test_rc
daemon_kern=none
for kern in "" wgmma-pipe mma; do
  name=${kern:-wgmma}
  say "-- test_cuda_gpu, WEFT_CUDA_ATTN=${kern:-(default: wgmma)}"
  tlog=$logs/test_cuda_gpu-$name.log
  WEFT_CUDA_ATTN=$kern timeout 60 "$bd"/tests/test_cuda_gpu > "$tlog" 2>&1
  rc=$?
  test_rc[$name]=$rc
  # the kernel lines, the model ops (first run only: they do not depend on
  # the attention kernel), failing cases (the full log is in gpu-logs)
  ops='linear|bias_act|act|add|modln|gate_residual|head_norm_rope|rope_table|timestep|copy_rows|op '
  if [ -z "$kern" ]; then
    grep -E "wgmma|kernel:|FAIL|failure|nccl|$ops" "$tlog" | grep -v "attn B.*ok" | head -48 | tee -a "$report"
  else
    grep -E "wgmma|kernel:|FAIL|failure|nccl" "$tlog" | head -24 | tee -a "$report"
  fi
  say "attention cases: $(grep -c "attn B" "$tlog"), failing: $(grep "attn B" "$tlog" | grep -c FAIL)"
  say "test_cuda_gpu exit $rc"
  note "test_cuda_gpu ($name): exit $rc, $(grep -c FAIL "$tlog") FAIL lines"
  if [ $rc -eq 0 ] && [ "$daemon_kern" = none ]; then daemon_kern=$name; fi
done

. "$gpu/attention_variants.sh" # ws variants and fp8 (tests, sanitizer, TFLOP/s)
. "$gpu/staged_ring.sh" # staged ring, overlapped vs synchronous transfers
case $daemon_kern in wgmma) export WEFT_CUDA_ATTN= ;; wgmma-pipe) export WEFT_CUDA_ATTN=wgmma-pipe ;; *) export WEFT_CUDA_ATTN=mma ;; esac

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
  "$bd"/daemon/weftd --devices "$devices" $flags --listen "ipc://$sock" \
      > "$dlog" 2>&1 &
  local wpid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; kill -0 $wpid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $wpid 2>/dev/null && [ -S "$sock" ]; then
    say "weftd --devices $devices $flags"
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
    kill -TERM $wpid; wait $wpid
    say "weftd exit $?"
    grep -E "comm:|NCCL|ERR|error|failed" "$dlog" | head -6 | tee -a "$report"
  else
    say "weftd --devices $devices $flags refused: skipped"
    head -3 "$dlog" | tee -a "$report"
    note "weftd --devices $label: refused ($(head -1 "$dlog"))"
    kill $wpid 2>/dev/null; wait $wpid 2>/dev/null
  fi
}

say "== FLUX fixtures through weftd on the GPU, kernel $daemon_kern ($(elapsed))"
fx=$PWD/tests/fixtures
# flux-small-d64 (f32) and flux-small-d64-bf16: 2 heads x 64, made by
# tests/parity/make_fixtures.py with diffusers. Not the flux-tiny ones:
# their head dim is 12 and the CUDA attention kernels take D = 64 and 128
# only, so they cannot pass on CUDA (the CPU tests serve them).
fixture_cmds=(
  "load flux-small-d64 flux-small-d64"
  "forward --model flux-small-d64 --inputs $fx/io-flux-small-d64-f32.safetensors --iters 3"
  "load flux-small-d64-bf16 flux-small-d64-bf16"
  "forward --model flux-small-d64-bf16 --inputs $fx/io-flux-small-d64-bf16.safetensors --iters 3"
  "models"
)
serve "$dev1" "--model-root $fx" "${fixture_cmds[@]}"
serve "$dev2" "--model-root $fx --mesh tp=2" "${fixture_cmds[@]}"
serve "$dev4" "--model-root $fx --mesh tp=2,ulysses=2" "${fixture_cmds[@]}"

say "== a cluster of one GPU node, NCCL bootstrapped by the rendezvous ($(elapsed))"
if [ "$(left)" -lt 40 ]; then
  say "skipped: $(left)s left"
  note "nccl cluster world: skipped (time)"
else
  timeout 120 bash tests/gpu/nccl_cluster.sh "$bd" "$logs" 2>&1 | tee -a "$report"
  rc=${PIPESTATUS[0]}
  note "nccl cluster world (1 GPU node, id through the world message): $rc failed check(s)"
fi

say "== FLUX forward beside diffusers ($(elapsed))"
full_s=${WEFT_FLUX_FULL_S:-200}
l=$(left)
if [ $have_diffusers -eq 0 ]; then
  say "skipped: no diffusers"
  note "flux_bench: skipped (no diffusers)"
elif [ "$l" -lt 100 ]; then
  say "skipped: ${l}s left (it needs 100)"
  note "flux_bench: skipped (${l}s left)"
else
  depth=()
  read -ra fargs <<<"${WEFT_FLUX_ARGS:-}"
  if [ "$l" -lt "$full_s" ]; then
    depth=(--layers 5 --single-layers 10)
    say "${l}s left (< ${full_s}s): the same width with 5 + 10 blocks instead of 19 + 38"
  fi
  # the checkpoint (22 GiB) goes to memory (/dev/shm) when it has room
  # for it: writing and reading it back then costs no disk
  bench_dir=/tmp/weft-flux-bench
  shm_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "${shm_kib:-0}" -gt $((30 * 1024 * 1024)) ]; then bench_dir=/dev/shm/weft-flux-bench; fi
  say "checkpoint directory: $bench_dir"
  # it ends 40 s before the budget so that the summary and packing fit;
  # --compile runs only if 150 s remain after the eager alternation
  PYTHONUNBUFFERED=1 PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout $((l - 20)) \
    "$py" tests/gpu/flux_bench.py --weftd "$bd"/daemon/weftd --weftctl "$bd"/client/weftctl \
      --devices cuda --dir "$bench_dir" --out "$logs" --compile \
      --deadline-s $((l - 40)) "${depth[@]}" "${fargs[@]}" 2>&1 | tee "$logs/flux-bench.out" | tee -a "$report"
  rc=${PIPESTATUS[0]}
  cp "$logs/flux-bench.txt" "$logs/flux-bench.json" "$out/" 2>/dev/null
  rm -rf "$bench_dir"
  note "flux_bench: exit $rc"
  # the last summary it wrote (eager, then with torch.compile)
  while IFS= read -r line; do note "  $line"; done < <(awk '/^== summary/ { b = ""; next } { b = b $0 "\n" } END { printf "%s", b }' "$logs/flux-bench.txt" 2>/dev/null)
fi

wan_bench_step

say "== attention vs torch SDPA, bf16, B=1, H=24, D=128 ($(elapsed))"
if [ "$(left)" -lt 60 ]; then
  say "skipped: $(left)s left (recorded before in BENCHMARKS.md)"
  note "attention vs SDPA: skipped (time)"
else
  shapes=(4096 0 4096 1 16384 0 16384 1)
  sdpa_args=()
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do sdpa_args+=("${shapes[i]}" 24 128 "${shapes[i+1]}"); done
  timeout 150 "$py" tests/gpu/sdpa_bench.py "${sdpa_args[@]}" > "$logs/sdpa.log" 2>&1
  tail -4 "$logs/sdpa.log" | tee -a "$report"
  for ((i = 0; i < ${#shapes[@]}; i += 2)); do
    S=${shapes[i]}; causal=${shapes[i+1]}
    t=$(grep "sdpa S=$S .*causal=$causal " "$logs/sdpa.log" | tail -1)
    tt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$t")
    for kern in "" wgmma-pipe mma; do
      if [ "${test_rc[${kern:-wgmma}]}" = 124 ]; then say "S=$S causal=$causal kernel=${kern:-wgmma}: skipped (its test hung)"; continue; fi
      w=$(WEFT_CUDA_ATTN=$kern timeout 30 "$bd"/bench/bench_cuda_attention "$S" 24 128 "$causal" 2>&1 | tail -1)
      wt=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$w")
      ratio=$(python3 -c "print(f'{float(\"$wt\")/float(\"$tt\"):.2f}')" 2>/dev/null || echo "?")
      say "S=$S causal=$causal kernel=${kern:-wgmma} | $w | sdpa tflops=$tt | ratio $ratio (target >= 0.60)"
      [ -z "$kern" ] && note "attention S=$S causal=$causal wgmma / SDPA: $ratio"
    done
  done
fi

say "== weftd attention-demo on the GPU, kernel $daemon_kern ($(elapsed))"
if [ "$(left)" -lt 30 ]; then
  say "skipped: $(left)s left"
  note "attention-demo: skipped (time)"
else
  # one GPU per rank (head split), bf16 and f16, causal, GQA, D 128 and 64
  serve cuda "" \
    "attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --iters 3" \
    "attention-demo --seq 1000 --kv-seq 1500 --heads 6 --kv-heads 3 --dim 64 --dtype f16 --causal --iters 3"
  # the mixed mode: four ranks on GPU 0, CUDA kernels, host comm, USP
  serve cuda:0,0,0,0 "--mesh ring=2,ulysses=2" \
    "attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --rotate alltoall --iters 2" \
    "attention-demo --seq 1001 --heads 8 --kv-heads 4 --dim 64 --dtype f16 --causal --ring-anything --rotate allgather --iters 2"
fi

say "== test_kernels, the CPU backend ($(elapsed))"
if [ "$(left)" -lt 40 ]; then
  say "skipped: $(left)s left (CI runs it)"
  note "test_kernels: skipped (time)"
else
  timeout $(( $(left) - 10 )) "$bd"/tests/test_kernels > "$logs/test_kernels.log" 2>&1
  rc=$?
  say "test_kernels (CPU reference) exit $rc"
  note "test_kernels: exit $rc"
fi
say "== done in $(elapsed)"
