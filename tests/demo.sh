#!/usr/bin/env bash
# demo.sh — start weftd on the CPU backend, serve one demo attention job
# through weftctl (max error against an fp64 reference and the time), stop.
# Usage: tests/demo.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
sock=$(mktemp -u /tmp/weft-demo-XXXXXX.sock)
endpoint="ipc://$sock"

"$build/daemon/weftd" --devices cpu:2 --listen "$endpoint" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT

# hello waits for the daemon's answer (with a timeout): no sleep needed.
"$build/client/weftctl" --endpoint "$endpoint" --timeout 20000 hello
"$build/client/weftctl" --endpoint "$endpoint" status
"$build/client/weftctl" --endpoint "$endpoint" attention-demo \
    --batch 1 --seq 1024 --heads 8 --dim 64 --dtype bf16 --devices 2
