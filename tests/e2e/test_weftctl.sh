#!/usr/bin/env bash
# test_weftctl.sh — weftctl against a real weftd: hello, status (mesh,
# epoch, ranks and coordinates), attention-demo (PASS and its figures),
# reconfigure (old -> new mesh and epoch, a refused mesh, usage errors),
# the demo's context-parallel options on a ring mesh, WEFT_ENDPOINT and
# --endpoint, exit codes 0 / 1 / 2, then SIGTERM makes the daemon exit 0;
# keygen (modes, .pub, never overwrites) and a tcp:// daemon with those
# keys: --server-key / --client-key and the environment, WF_E_AUTH without
# keys or with a wrong server key, WF_E_DENIED for a submit key.
#
# usage: test_weftctl.sh PATH_TO_WEFTD PATH_TO_WEFTCTL
# Readiness is a `weftctl hello` with a long timeout: it returns as soon as
# the daemon answers (no sleeps).
set -u
weftd=$1
weftctl=$2
ep="ipc:///tmp/weft-test-$$-ctl.sock"
dead="ipc:///tmp/weft-test-$$-none.sock"
fails=0
tmp=$(mktemp -d)
unset WEFT_ENDPOINT

"$weftd" --devices cpu:2 --listen "$ep" --log-level warning \
    --max-tensor-bytes 1M &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

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

# expect NAME REGEX: the output of NAME (stdout + stderr) matches
expect() {
    cat "$tmp/$1.out" "$tmp/$1.err" | grep -Eq -- "$2" || fail "$1: no match for '$2'"
}

run ready 0 "$weftctl" --endpoint "$ep" --timeout 20000 hello
expect ready 'protocol 2, backend cpu, 2 devices'
expect ready 'tensor 1\.0 MiB'

run status 0 "$weftctl" --endpoint "$ep" status
expect status '^weftd .* \(cpu\)  epoch [0-9]+'
expect status '^queue [0-9]+/[0-9]+'
expect status '^mesh dp=1 ring=1 ulysses=1 tp=2  epoch 0$'
expect status '^1 +cpu:1 +1 +\[0,0,0,1\] '
expect status '^0 +cpu:0 '
expect status '^1 +cpu:1 '

run demo_f32 0 "$weftctl" --endpoint "$ep" attention-demo --iters 3
expect demo_f32 'max abs error +[0-9.e+-]+ \(relative [0-9.e+-]+\), tolerance 1\.0e-04'
expect demo_f32 'GFLOP/s'
expect demo_f32 '^PASS$'

run demo_f16 0 "$weftctl" --endpoint "$ep" attention-demo --dtype f16 \
    --batch 1 --seq 96 --kv-seq 64 --heads 4 --kv-heads 2 --dim 32 --causal \
    --devices 2
expect demo_f16 'Sq=96 Skv=64 Hq=4 Hkv=2 D=32 f16 causal devices=2'
expect demo_f16 '^PASS$'

run demo_bf16 0 "$weftctl" --endpoint "$ep" attention-demo --dtype bf16 \
    --seq 40 --heads 3 --dim 16 --devices 1
expect demo_bf16 '^PASS$'

# The status counters saw the demo jobs.
run status2 0 "$weftctl" --endpoint "$ep" status
grep -Eq 'served ([5-9]|[1-9][0-9]+) ' "$tmp/status2.out" \
    || fail "status2: expected at least 5 jobs served"

# Endpoint from the environment, and --endpoint wins over it.
run env_status 0 env WEFT_ENDPOINT="$ep" "$weftctl" status
expect env_status 'cpu:1'
run env_override 0 env WEFT_ENDPOINT="$dead" "$weftctl" --endpoint "$ep" hello
run env_dead 1 env WEFT_ENDPOINT="$dead" "$weftctl" --timeout 300 hello
expect env_dead 'WF_E_TIMEOUT'

# A daemon error: 1.5 MiB of q against --max-tensor-bytes 1M.
run too_big 1 "$weftctl" --endpoint "$ep" attention-demo --batch 1 \
    --seq 768 --heads 8 --dim 64
expect too_big 'WF_E_LIMIT: .+'

# Usage errors.
run no_command 2 "$weftctl"
run bad_command 2 "$weftctl" --endpoint "$ep" frobnicate
run bad_dtype 2 "$weftctl" --endpoint "$ep" attention-demo --dtype f64
run bad_heads 2 "$weftctl" --endpoint "$ep" attention-demo --heads 4 --kv-heads 3
run bad_value 2 "$weftctl" --endpoint "$ep" attention-demo --seq x
run extra_arg 2 "$weftctl" --endpoint "$ep" status now

# Reconfiguration: tp=2 -> ring=2, then context-parallel demos on it.
run reconf_ring 0 "$weftctl" --endpoint "$ep" reconfigure --ring 2
expect reconf_ring '^mesh dp=1 ring=1 ulysses=1 tp=2 \(epoch 0\) -> dp=1 ring=2 ulysses=1 tp=1 \(epoch 1\)$'
run status3 0 "$weftctl" --endpoint "$ep" status
expect status3 '^mesh dp=1 ring=2 ulysses=1 tp=1  epoch 1$'
expect status3 '^1 +cpu:1 +1 +\[0,1,0,0\] '
run demo_ring 0 "$weftctl" --endpoint "$ep" attention-demo --dtype bf16 \
    --seq 45 --kv-seq 38 --heads 4 --dim 16 --causal --rotate alltoall \
    --no-fp32-merge --ring-anything --no-load-balance
expect demo_ring 'Sq=45 Skv=38 .* epoch 1$'
expect demo_ring 'rotate alltoall, fp32 merge off, ring_anything on, ulysses_anything default, load_balance off'
expect demo_ring '^PASS$'
run demo_uneven 1 "$weftctl" --endpoint "$ep" attention-demo --seq 45 --heads 2 --dim 16
expect demo_uneven 'WF_E_BAD_ARGUMENT: .+'
run reconf_bad 1 "$weftctl" --endpoint "$ep" reconfigure --ring 3
expect reconf_bad 'WF_E_BAD_ARGUMENT: .+'
run reconf_usage 2 "$weftctl" --endpoint "$ep" reconfigure --ring 0
run reconf_usage2 2 "$weftctl" --endpoint "$ep" reconfigure --pp 2
run reconf_uly 0 "$weftctl" --endpoint "$ep" reconfigure --ulysses 2
expect reconf_uly '-> dp=1 ring=1 ulysses=2 tp=1 \(epoch 2\)$'
run demo_uly 0 "$weftctl" --endpoint "$ep" attention-demo --seq 33 --heads 3 \
    --kv-heads 1 --dim 16 --ulysses-anything --ring-anything
expect demo_uly 'epoch 2$'
expect demo_uly '^PASS$'
run bad_rotate 2 "$weftctl" --endpoint "$ep" attention-demo --rotate ring

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "weftd exited $rc on SIGTERM"
trap 'rm -rf "$tmp"' EXIT

# keygen: FILE 0600 with both keys, FILE.pub 0644 with the public one,
# never overwritten
run keygen 0 "$weftctl" keygen "$tmp/daemon.key"
expect keygen '^public key: .{40}$'
[ "$(stat -c %a "$tmp/daemon.key")" = 600 ] || fail "keygen: key file mode"
[ "$(stat -c %a "$tmp/daemon.key.pub")" = 644 ] || fail "keygen: .pub mode"
grep -q '^secret-key = ' "$tmp/daemon.key" || fail "keygen: no secret key"
grep -q '^secret-key' "$tmp/daemon.key.pub" && fail "keygen: secret in .pub"
grep -qxF "public-key = $(sed -n 's/^public key: //p' "$tmp/keygen.out")" \
    "$tmp/daemon.key.pub" || fail "keygen: .pub differs from the printed key"
cp "$tmp/daemon.key" "$tmp/daemon.key.before"
run keygen_again 1 "$weftctl" keygen "$tmp/daemon.key"
expect keygen_again 'exists'
cmp -s "$tmp/daemon.key" "$tmp/daemon.key.before" || fail "keygen overwrote"
run keygen_usage 2 "$weftctl" keygen
run keygen_admin 0 "$weftctl" keygen "$tmp/admin.key"
run keygen_submit 0 "$weftctl" keygen "$tmp/submit.key"
pubkey() { sed -n 's/^public-key = //p' "$1"; }
printf 'admin %s ops\nsubmit %s runner\n' "$(pubkey "$tmp/admin.key.pub")" \
    "$(pubkey "$tmp/submit.key.pub")" >"$tmp/clients"

# the keys in use: a daemon on tcp:// loopback with key_file and
# client_keys (a free port: retried when taken)
for try in 1 2 3 4 5; do
    tep="tcp://127.0.0.1:$((20000 + RANDOM % 30000))"
    "$weftd" --devices cpu:2 --listen "$tep" --log-level warning \
        --key-file "$tmp/daemon.key" --client-keys "$tmp/clients" &
    pid=$!
    trap 'kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
    "$weftctl" --endpoint "$tep" --timeout 20000 --server-key "$tmp/daemon.key.pub" \
        --client-key "$tmp/admin.key" hello >/dev/null 2>&1 && break
    kill -KILL $pid 2>/dev/null
    wait $pid 2>/dev/null
done
run curve_admin 0 "$weftctl" --endpoint "$tep" --server-key "$tmp/daemon.key.pub" \
    --client-key "$tmp/admin.key" reconfigure --dp 2
expect curve_admin '-> dp=2 ring=1 ulysses=1 tp=1'
run curve_nokeys 1 "$weftctl" --endpoint "$tep" --timeout 20000 hello
expect curve_nokeys 'WF_E_AUTH: .*CURVE keys'
run curve_denied 1 env WEFT_SERVER_KEY="$(pubkey "$tmp/daemon.key.pub")" \
    WEFT_CLIENT_KEY="$tmp/submit.key" "$weftctl" --endpoint "$tep" reconfigure --tp 2
expect curve_denied 'WF_E_DENIED: reconfigure needs the admin role.*runner'
run curve_submit 0 env WEFT_SERVER_KEY="$tmp/daemon.key.pub" \
    WEFT_CLIENT_KEY="$tmp/submit.key" "$weftctl" --endpoint "$tep" attention-demo
expect curve_submit '^PASS$'
run curve_wrong 1 "$weftctl" --endpoint "$tep" --timeout 20000 \
    --server-key "$tmp/admin.key.pub" --client-key "$tmp/admin.key" hello
expect curve_wrong 'WF_E_AUTH'
run curve_half 1 "$weftctl" --endpoint "$tep" --client-key "$tmp/admin.key" hello
expect curve_half 'WF_E_BAD_ARGUMENT: .*WEFT_SERVER_KEY'
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "weftd (tcp) exited $rc on SIGTERM"
trap 'rm -rf "$tmp"' EXIT

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "all weftctl checks passed"
