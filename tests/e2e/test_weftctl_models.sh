#!/usr/bin/env bash
# test_weftctl_models.sh — weftctl's model commands against a real weftd
# (cpu:4, dp=4) with a temporary model root holding copies of the
# diffusers-made fixtures: load (exit 0, progress lines, the model info),
# models (all ready), forward against diffusers' outputs (f32, sharded
# f32 with guidance, bf16: PASS), reconfigure to dp=2 tp=2 and forward
# again (live re-shard), shard --tp 2 and load --sharded, load --tp-plan
# with a custom plan, refusals (a '..' path, a name in use, an unknown
# style, a glob matching nothing, a hard-linked config.json and an invalid
# one holding a secret: never echoed; shard --out a symlink to a victim
# directory, symlinks at the names shard writes), unload (gone from
# models, forward on it fails), then SIGTERM makes the daemon exit 0.
#
# Then a mesh with context and tensor parallelism together (dp=1,
# ulysses=2, tp=2) serves the three fixtures again.
#
# flux-small-d64-bf16 (head dim 64, the CUDA attention kernels' size) is
# loaded with the others and forwarded on the first mesh and on the
# ulysses=2 x tp=2 one.
#
# usage: test_weftctl_models.sh PATH_TO_WEFTD PATH_TO_WEFTCTL FIXTURES_DIR [BACKEND]
# BACKEND (default cpu) is the backend name the daemon reports: the tests'
# weftd_standin runs the same script on the stand-in device backend
# (device memory, shards resident on the "device", staged comm), with a
# 384 MiB arena per device (WEFT_CPU_MEMORY).
# Readiness is a `weftctl hello` with a long timeout: it returns as soon as
# the daemon answers (no sleeps). Loads block until the model is resident.
set -u
weftd=$1
weftctl=$2
fixtures=$3
backend=${4:-cpu}
ep="ipc:///tmp/weft-test-$$-models.sock"
fails=0
tmp=$(mktemp -d)
root="$tmp/root"
unset WEFT_ENDPOINT

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

mkdir -p "$root" || { echo "cannot create $root" >&2; exit 1; }
for m in flux-tiny flux-tiny-guidance flux-tiny-bf16 flux-small-d64-bf16; do
    cp -R "$fixtures/$m" "$root/$m" || { echo "cannot copy $m" >&2; exit 1; }
done

"$weftd" --devices cpu:4 --mesh dp=4 --model-root "$root" --listen "$ep" \
    --log-level warning &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT

# run NAME EXPECTED_RC CMD...: output in $tmp/NAME.out / .err
run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    echo "== $name (exit $rc)"
    cat "$tmp/$name.out" "$tmp/$name.err"
    [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want"
}
ctl() { "$weftctl" --endpoint "$ep" "$@"; }

# expect NAME REGEX: stdout + stderr of NAME match
expect() {
    cat "$tmp/$1.out" "$tmp/$1.err" | grep -Eq -- "$2" || fail "$1: no match for '$2'"
}
# expect_err NAME REGEX: stderr of NAME matches (the daemon's message)
expect_err() {
    grep -Eq -- "$2" "$tmp/$1.err" || fail "$1: stderr has no match for '$2'"
}
# expect_not NAME REGEX: stdout + stderr of NAME do not match
expect_not() {
    if cat "$tmp/$1.out" "$tmp/$1.err" | grep -Eq -- "$2"; then
        fail "$1: unexpected match for '$2'"
    fi
}
# expect_count NAME REGEX N: exactly N lines of stdout + stderr match
expect_count() {
    local n
    n=$(cat "$tmp/$1.out" "$tmp/$1.err" | grep -Ec -- "$2")
    [ "$n" -eq "$3" ] || fail "$1: $n lines match '$2', expected $3"
}

# load_ok NAME PATH DTYPE TP [ARGS...]: a load that succeeds, with its
# ten progress lines (stderr is a file here, not a tty) and the model.
load_ok() {
    local name=$1 path=$2 dtype=$3 tp=$4
    shift 4
    run "load_$name" 0 ctl load "$name" "$path" "$@"
    expect_count "load_$name" "^loading $name: +[0-9]+%  \(.+ of .+\)$" 10
    expect "load_$name" "^loading $name: 100%  \((.+) of \1\)$"
    expect "load_$name" "^model $name  path $path  family flux  dtype $dtype  state ready$"
    expect "load_$name" "^params [0-9.]+( [MG])?  checkpoint .+  tp $tp"
    expect "load_$name" '^loaded in [0-9]+\.[0-9]{3} s$'
    expect "load_$name" "^device $backend  weights as (f32|bf16|f16)"
}

# forward_ok TAG NAME IO_FILE: a forward that matches diffusers' output
forward_ok() {
    run "fwd_$1" 0 ctl forward --model "$2" --inputs "$fixtures/$3"
    expect "fwd_$1" "^forward $2  B=[0-9]+ "
    expect "fwd_$1" '^max abs error [0-9.e+-]+ \(tolerance [0-9.e+-]+\) PASS$'
    expect_not "fwd_$1" 'FAIL|nan'
}

run ready 0 ctl --timeout 20000 hello
expect ready "backend $backend, 4 devices"

run models_empty 0 ctl models
expect models_empty '^\(no models\)$'

# -- load the four fixtures at dp=4 (tp=1) ---------------------------------
load_ok tiny flux-tiny f32 1
load_ok guid flux-tiny-guidance f32 1
load_ok bf16 flux-tiny-bf16 bf16 1
load_ok d64 flux-small-d64-bf16 bf16 1

run models 0 ctl models
expect models '^NAME +STATE +FAMILY +DTYPE '
expect models '^tiny +ready +flux +f32 +[0-9.]+( [MG])? +1 .* 100\.0% .* flux-tiny$'
expect models '^guid +ready +flux +f32 +[0-9.]+( [MG])? +1 .* 100\.0% .* flux-tiny-guidance$'
expect models '^bf16 +ready +flux +bf16 +[0-9.]+( [MG])? +1 .* 100\.0% .* flux-tiny-bf16$'
expect models '^d64 +ready +flux +bf16 +[0-9.]+( [MG])? +1 .* 100\.0% .* flux-small-d64-bf16$'
expect_count models ' ready ' 4
expect_count models " $backend +flux-tiny" 3

forward_ok tiny tiny io-flux-tiny-f32.safetensors
forward_ok guid guid io-flux-tiny-guidance-f32.safetensors
forward_ok bf16 bf16 io-flux-tiny-bf16.safetensors
expect fwd_bf16 ' bf16 -> bf16 '
forward_ok d64 d64 io-flux-small-d64-bf16.safetensors
expect fwd_d64 ' bf16 -> bf16 '
# --tolerance replaces the dtype's bound: one below any error fails (exit
# 1), a loose one passes
run tol_tight 1 ctl forward --model bf16 --inputs "$fixtures/io-flux-tiny-bf16.safetensors" \
    --tolerance 1e-12
expect tol_tight '^max abs error [0-9.e+-]+ \(tolerance [0-9.e+-]+\) FAIL$'
run tol_loose 0 ctl forward --model bf16 --inputs "$fixtures/io-flux-tiny-bf16.safetensors" \
    --tolerance 0.5
expect tol_loose '^max abs error [0-9.e+-]+ \(tolerance [0-9.e+-]+\) PASS$'
run tol_bad 2 ctl forward --model bf16 --inputs "$fixtures/io-flux-tiny-bf16.safetensors" \
    --tolerance 0
expect tol_bad "--tolerance: bad value '0'"

# -- live re-shard: dp=2 tp=2 ----------------------------------------------
run reconf 0 ctl reconfigure --dp 2 --tp 2
expect reconf '^mesh dp=4 ring=1 ulysses=1 tp=1 \(epoch [0-9]+\) -> dp=2 ring=1 ulysses=1 tp=2 \(epoch [0-9]+\)$'
run models_tp2 0 ctl models
expect_count models_tp2 '^(tiny|guid|bf16|d64) +ready +flux +[a-z0-9]+ +[0-9.]+( [MG])? +2 ' 4

forward_ok tiny2 tiny io-flux-tiny-f32.safetensors
forward_ok guid2 guid io-flux-tiny-guidance-f32.safetensors
forward_ok bf162 bf16 io-flux-tiny-bf16.safetensors
# a tp=2 replica: each job runs on the two ranks of its group
expect fwd_tiny ' devices 1 '
expect fwd_tiny2 ' devices 2 '
expect fwd_bf162 ' devices 2 '

# -- pre-sharded checkpoint: shard locally, load --sharded at tp=2 ----------
run shard 0 "$weftctl" shard --model-root "$root" --path flux-tiny --tp 2 \
    --out "$root/flux-tiny-tp2"
expect shard 'config\.json and 2 rank files tp-rank-RRRRR-of-00002\.safetensors'
[ -f "$root/flux-tiny-tp2/tp-rank-00000-of-00002.safetensors" ] &&
    [ -f "$root/flux-tiny-tp2/tp-rank-00001-of-00002.safetensors" ] &&
    [ -f "$root/flux-tiny-tp2/config.json" ] || fail "shard: rank files missing"
load_ok tiny-sh flux-tiny-tp2 f32 2 --sharded
expect load_tiny-sh '\(loaded from per-rank files\)'
forward_ok sh tiny-sh io-flux-tiny-f32.safetensors
run models_sh 0 ctl models
expect models_sh '^tiny-sh +ready .* flux-tiny-tp2 \(sharded\)$'

# -- a custom tp plan: attention projections only --------------------------
cat >"$tmp/plan.json" <<'EOF'
{"transformer_blocks.*.attn.to_q": "colwise",
 "transformer_blocks.*.attn.to_k": "colwise",
 "transformer_blocks.*.attn.to_v": "colwise",
 "transformer_blocks.*.attn.to_out.0": "rowwise"}
EOF
load_ok tiny-plan flux-tiny f32 2 --tp-plan "$tmp/plan.json"
forward_ok plan tiny-plan io-flux-tiny-f32.safetensors
# fewer weights split than the default plan: a larger shard per rank
# (models' PER RANK column, "403.6 KiB": fields 7 and 8 with these params)
per_rank() { awk -v n="$1" '$1 == n { print $7, $8 }' "$tmp/$2.out"; }
run models_plan 0 ctl models
pr_plan=$(per_rank tiny-plan models_plan)
pr_default=$(per_rank tiny models_plan)
[[ "$pr_plan" =~ ^[0-9.]+\ [KMG]?i?B$ ]] || fail "models_plan: tiny-plan per rank '$pr_plan'"
[ "$pr_plan" != "$pr_default" ] ||
    fail "models_plan: tiny-plan's per-rank size $pr_plan equals the default plan's"

# -- refusals: non-zero exit, the daemon's code and message on stderr ------
run bad_dotdot 1 ctl load dotdot ../flux-tiny
expect_err bad_dotdot "^weftctl: load: WF_E_BAD_FIELD: .*'\.\.' component"
run bad_dotdot2 1 ctl load dotdot2 flux-tiny/../flux-tiny
expect_err bad_dotdot2 "^weftctl: load: WF_E_BAD_FIELD: .*'\.\.' component"
run bad_inuse 1 ctl load tiny flux-tiny-bf16
expect_err bad_inuse "^weftctl: load: WF_E_BAD_ARGUMENT: a model named 'tiny' is already loaded"

# an unknown style is refused by weftctl's own plan reader, before a
# request is sent; the wire form is the same, so the wording is shared
cat >"$tmp/plan_style.json" <<'EOF'
{"transformer_blocks.*.attn.to_q": "diagonal"}
EOF
run bad_style 1 ctl load tiny-style flux-tiny --tp-plan "$tmp/plan_style.json"
expect_err bad_style 'rule 0: unknown style'
expect_not bad_style 'diagonal'

cat >"$tmp/plan_nomatch.json" <<'EOF'
{"transformer_blocks.*.attn.to_q": "colwise",
 "transformer_blocks.*.attn.to_qq": "colwise"}
EOF
run bad_nomatch 1 ctl load tiny-nomatch flux-tiny --tp-plan "$tmp/plan_nomatch.json"
expect_err bad_nomatch "^weftctl: load: WF_E_BAD_ARGUMENT: .*'transformer_blocks\.\*\.attn\.to_qq' matches no linear layer"

# -- untrusted files ---------------------------------------------------------
# a hard link inside the model root to a file outside it (the daemon could
# read it, the client could not): refused, and its text never echoed; the
# same text in a regular config.json inside the root (invalid JSON) is
# refused without being echoed either
secret='hunter2-SECRET-e2e'
printf '{"password": %s}\n' "$secret" >"$tmp/secret.json"
mkdir -p "$root/hardlinked" "$root/badjson"
cp "$root/flux-tiny/diffusion_pytorch_model.safetensors" "$root/hardlinked/"
ln "$tmp/secret.json" "$root/hardlinked/config.json" || fail "ln"
run bad_hardlink 1 ctl load hl hardlinked
expect_err bad_hardlink "^weftctl: load: WF_E_BAD_FIELD: .*'hardlinked/config\.json' has 2 hard links: refused"
expect_not bad_hardlink "$secret"
cp "$tmp/secret.json" "$root/badjson/config.json"
cp "$root/flux-tiny/diffusion_pytorch_model.safetensors" "$root/badjson/"
run bad_json 1 ctl load bj badjson
expect_err bad_json "^weftctl: load: WF_E_MALFORMED: badjson/config\.json: JSON invalid at byte [0-9]+ \(line 1, column [0-9]+\)"
expect_not bad_json "$secret"

# weftctl shard --out a symlink to a directory holding a victim file:
# refused, the victim unchanged, nothing written there
mkdir -p "$tmp/victim"
echo 'victim data' >"$tmp/victim/tp-rank-00000-of-00002.safetensors"
echo 'victim data' >"$tmp/victim/config.json"
echo 'victim data' >"$tmp/victim/tp-rank-00000-of-00004.safetensors"
ln -s "$tmp/victim" "$tmp/outlink"
run shard_symlink 1 "$weftctl" shard --model-root "$root" --path flux-tiny --tp 2 \
    --out "$tmp/outlink"
expect_err shard_symlink "^weftctl: shard: WF_E_BAD_ARGUMENT: output directory '.*/outlink' is a symlink: refused"
run shard_symlink_slash 1 "$weftctl" shard --model-root "$root" --path flux-tiny --tp 2 \
    --out "$tmp/outlink/"
expect_err shard_symlink_slash "is a symlink: refused"
for f in tp-rank-00000-of-00002.safetensors config.json tp-rank-00000-of-00004.safetensors; do
    [ "$(cat "$tmp/victim/$f")" = 'victim data' ] || fail "shard_symlink: victim $f changed"
done
[ "$(ls -A "$tmp/victim" | wc -l)" -eq 3 ] || fail "shard_symlink: files appeared in the victim dir"

# symlinks pre-created at the final names of a real output directory are
# replaced, not followed
mkdir -p -m 755 "$tmp/out-links"   # not o+w whatever the umask: shard refuses that
ln -s "$tmp/victim/tp-rank-00000-of-00002.safetensors" \
    "$tmp/out-links/tp-rank-00000-of-00002.safetensors"
ln -s "$tmp/victim/config.json" "$tmp/out-links/config.json"
run shard_links 0 "$weftctl" shard --model-root "$root" --path flux-tiny --tp 2 \
    --out "$tmp/out-links"
for f in tp-rank-00000-of-00002.safetensors config.json; do
    [ "$(cat "$tmp/victim/$f")" = 'victim data' ] || fail "shard_links: victim $f changed"
    [ -f "$tmp/out-links/$f" ] && [ ! -L "$tmp/out-links/$f" ] ||
        fail "shard_links: $f is not a new regular file"
done
[ -z "$(ls -A "$tmp/out-links" | grep '\.tmp$')" ] || fail "shard_links: temporary files left"

# none of the refused loads left anything behind
run models_after 0 ctl models
expect_count models_after '^[A-Za-z0-9._-]+ +ready ' 6
expect_not models_after '^(dotdot|dotdot2|tiny-style|tiny-nomatch|hl|bj) '
expect models_after '^tiny +ready +flux +f32 .* flux-tiny$'

# -- unload ----------------------------------------------------------------
run unload 0 ctl unload tiny-plan
expect unload '^unloaded tiny-plan$'
run models_unloaded 0 ctl models
expect_not models_unloaded '^tiny-plan '
expect_count models_unloaded '^[A-Za-z0-9._-]+ +ready ' 5
run fwd_unloaded 1 ctl forward --model tiny-plan --inputs "$fixtures/io-flux-tiny-f32.safetensors"
expect_err fwd_unloaded "^weftctl: forward: WF_E_BAD_ARGUMENT: model 'tiny-plan' is not loaded"
run unload_again 1 ctl unload tiny-plan
expect_err unload_again "not loaded"
# the others still serve
forward_ok after tiny io-flux-tiny-f32.safetensors

# -- context and tensor parallelism together: ulysses=2 x tp=2 ------------
run reconf_cp 0 ctl reconfigure --dp 1 --ulysses 2 --tp 2
expect reconf_cp ' -> dp=1 ring=1 ulysses=2 tp=2 \(epoch [0-9]+\)$'
forward_ok cp_tiny tiny io-flux-tiny-f32.safetensors
forward_ok cp_guid guid io-flux-tiny-guidance-f32.safetensors
forward_ok cp_bf16 bf16 io-flux-tiny-bf16.safetensors
forward_ok cp_d64 d64 io-flux-small-d64-bf16.safetensors
expect fwd_cp_tiny ' devices 4 '
expect fwd_cp_d64 ' devices 4 '

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "weftd exited $rc on SIGTERM"
trap 'rm -rf "$tmp"' EXIT

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "all weftctl model checks passed"
