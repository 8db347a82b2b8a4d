#!/usr/bin/env bash
# test_staged_ring.sh — the mixed mode end to end: a real weftd_standin
# whose virtual devices (cpu:N on the stand-in device backend) form one
# ring, its world comm staged through host mirrors (comm_staged.h) with
# the stand-in's transfer stream, so that the ring's alltoall rotation
# overlaps each step's copies with its kernels. attention-demo jobs with
# --rotate alltoall, causal with and without load balance, uneven
# sequences and GQA, on ring = 4, 2 (reconfigured) and 3 (a second
# daemon): every one PASS against weftctl's fp64 check. At exit the
# daemon prints the stand-in's totals (WEFT_STANDIN_REPORT): transfers
# were made, kernels ran while they were pending, and no kernel or copy
# touched a range being copied (conflicts 0).
#
# usage: test_staged_ring.sh PATH_TO_WEFTD_STANDIN PATH_TO_WEFTCTL
# Readiness is a `weftctl hello` with a long timeout (no sleeps).
set -u
weftd=$1
weftctl=$2
fails=0
tmp=$(mktemp -d)
pids=()
unset WEFT_ENDPOINT
export WEFT_STANDIN_REPORT=1
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

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
expect() {
    cat "$tmp/$1.out" "$tmp/$1.err" | grep -Eq -- "$2" || fail "$1: no match for '$2'"
}

# demos EP TAG: the alltoall ring jobs on the daemon at EP
demos() {
    local ep=$1 tag=$2
    run "$tag-lb" 0 "$weftctl" --endpoint "$ep" attention-demo --dtype bf16 \
        --batch 2 --seq 96 --heads 4 --kv-heads 2 --dim 16 --causal \
        --rotate alltoall --iters 2
    expect "$tag-lb" 'rotate alltoall'
    expect "$tag-lb" '^PASS$'
    run "$tag-uneven" 0 "$weftctl" --endpoint "$ep" attention-demo --dtype f16 \
        --seq 77 --kv-seq 61 --heads 4 --dim 16 --causal --rotate alltoall \
        --ring-anything --no-load-balance
    expect "$tag-uneven" '^PASS$'
    run "$tag-f32" 0 "$weftctl" --endpoint "$ep" attention-demo --dtype f32 \
        --seq 96 --heads 2 --dim 16 --rotate alltoall --no-fp32-merge
    expect "$tag-f32" '^PASS$'
}

# stop NAME PID: SIGTERM, exit 0, the stand-in's totals on stderr
stop() {
    local name=$1 pid=$2
    kill -TERM "$pid"
    wait "$pid"
    local rc=$?
    [ "$rc" -eq 0 ] || fail "$name: daemon exit $rc"
    local line
    line=$(grep -E '^standin: transfers' "$tmp/$name.log")
    echo "$name: $line"
    [[ $line =~ transfers\ ([0-9]+),\ overlapped\ accesses\ ([0-9]+),\ conflicts\ ([0-9]+) ]] ||
        { fail "$name: no stand-in totals"; return; }
    [ "${BASH_REMATCH[1]}" -gt 0 ] || fail "$name: no transfers on the second stream"
    [ "${BASH_REMATCH[2]}" -gt 0 ] || fail "$name: no kernel ran during a transfer"
    [ "${BASH_REMATCH[3]}" -eq 0 ] || fail "$name: ${BASH_REMATCH[3]} accesses to a range being copied"
}

ep4="ipc:///tmp/weft-test-$$-staged4.sock"
"$weftd" --devices cpu:4 --mesh ring=4 --listen "$ep4" --log-level warning \
    2>"$tmp/d4.log" &
pids+=($!)
pid4=$!
run ready4 0 "$weftctl" --endpoint "$ep4" --timeout 20000 hello
expect ready4 'backend standin, 4 devices'
run status4 0 "$weftctl" --endpoint "$ep4" status
expect status4 '^mesh dp=1 ring=4 ulysses=1 tp=1'
demos "$ep4" r4
run reconf2 0 "$weftctl" --endpoint "$ep4" reconfigure --dp 2 --ring 2
expect reconf2 '-> dp=2 ring=2 ulysses=1 tp=1'
demos "$ep4" r2
stop d4 "$pid4"

ep3="ipc:///tmp/weft-test-$$-staged3.sock"
"$weftd" --devices cpu:3 --mesh ring=3 --listen "$ep3" --log-level warning \
    2>"$tmp/d3.log" &
pids+=($!)
pid3=$!
run ready3 0 "$weftctl" --endpoint "$ep3" --timeout 20000 hello
demos "$ep3" r3
stop d3 "$pid3"

if [ "$fails" -ne 0 ]; then
    echo "test_staged_ring: $fails failure(s)"
    exit 1
fi
echo "test_staged_ring: ok"
