#!/usr/bin/env bash
# demo.sh — start weftd on the CPU backend, serve one demo attention job
# through weftctl (max error against an fp64 reference and the time), then
# load the tiny FLUX transformer that diffusers wrote (tests/fixtures),
# run its forward on two devices with tensor parallelism (tp=2) and
# compare with diffusers' output; stop.
# Usage: tests/demo.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
sock=$(mktemp -u /tmp/weft-demo-XXXXXX.sock)
endpoint="ipc://$sock"
ctl() { "$build/client/weftctl" --endpoint "$endpoint" "$@"; }

"$build/daemon/weftd" --devices cpu:2 --listen "$endpoint" \
    --model-root "$here/fixtures" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT

# hello waits for the daemon's answer (with a timeout): no sleep needed.
ctl --timeout 20000 hello
ctl status
ctl attention-demo --batch 1 --seq 1024 --heads 8 --dim 64 --dtype bf16 --devices 2

# A resident model, sharded over both devices (mesh tp=2).
ctl load flux-tiny flux-tiny
ctl models
ctl forward --model flux-tiny --inputs "$here/fixtures/io-flux-tiny-f32.safetensors"
