#!/usr/bin/env bash
# tests/gpu/nccl_cluster.sh — a cluster world of ONE GPU node formed
# through the rendezvous (weftd --coordinator ... --nodes 1) whose data
# plane is NCCL: the coordinator draws the ncclUniqueId, the world message
# carries it (proto "ncclid"), the node's rank joins the communicator from
# it (daemon/comm/comm_nccl_boot.h); then attention and FLUX forwards
# through that daemon, each checked by weftctl (attention against the fp64
# reference, forwards against diffusers' outputs in the fixtures' io
# files). Called by tests/gpu/run.sh (step 4b); runs alone too:
#
#   bash tests/gpu/nccl_cluster.sh BUILD_DIR [LOG_DIR]
#
# A world of two GPU nodes on one GPU is not possible with NCCL (one GPU
# cannot hold two ranks of one communicator): that path has run only on
# the NCCL stand-in (tests/cluster/test_nccl_cluster.c).
#
# Environment (for a plumbing run without a GPU):
#   WEFT_NC_WEFTD    the daemon (default BUILD_DIR/daemon/weftd; the
#                    stand-in: BUILD_DIR/tests/weftd_ncclsi)
#   WEFT_NC_DEVICES  --devices (default cuda)
#   WEFT_NC_API      the NCCL the coordinator's log must name (default
#                    "nccl 2": NCCL itself; the stand-in: "nccl-standin")
#   WEFT_NC_FLAGS    extra weftd flags (e.g. "--cpu-memory 1G")
# Prints one line per check ("ok" / "FAIL"); exit status = failed checks.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
# stop_pid (and stand-ins for run.sh's say / note)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. tests/gpu/lib.sh
bd=${1:?usage: nccl_cluster.sh BUILD_DIR [LOG_DIR]}
logs=${2:-/tmp/weft-nccl-cluster}
mkdir -p "$logs"
weftd=${WEFT_NC_WEFTD:-$bd/daemon/weftd}
ctl=$bd/client/weftctl
devices=${WEFT_NC_DEVICES:-cuda}
api=${WEFT_NC_API:-nccl 2}
fx=$PWD/tests/fixtures
fails=0
check() {  # check NAME COMMAND...: run it, say ok / FAIL
  local name=$1; shift
  if "$@"; then echo "  ok    $name"; else echo "  FAIL  $name"; fails=$((fails + 1)); fi
}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sock=/tmp/weft-nccl-cluster-$$.sock
dlog=$logs/weftd-nccl-cluster.log
rm -f "$sock"
# shellcheck disable=SC2086
"$weftd" --devices "$devices" --coordinator "127.0.0.1:$port" --nodes 1 --node-name gpu0 \
    --data-address 127.0.0.1 --allow-anonymous true --model-root "$fx" --listen "ipc://$sock" --log-level info \
    ${WEFT_NC_FLAGS:-} > "$dlog" 2>&1 &
wpid=$!
served=0
for _ in $(seq 600); do
  if grep -q "cluster serving: epoch 1, 1 node(s)" "$dlog"; then served=1; break; fi
  kill -0 $wpid 2>/dev/null || break
  sleep 0.1
done
echo "weftd --devices $devices --coordinator 127.0.0.1:$port --nodes 1 (log $dlog)"
check "world of one node serving through the rendezvous" test $served = 1
grep -E "cluster: (world of epoch|rendezvous|communicators)|comm:|ERR" "$dlog" | head -8 | sed 's/^/  | /'
check "the coordinator drew the world's unique id from $api" \
  grep -q "world of epoch 1: data plane nccl ($api" "$dlog"
check "the node joined one NCCL communicator from the world message's id" \
  grep -q "cluster: world of epoch 1: data plane nccl (one communicator" "$dlog"
if [ $served = 1 ]; then
  run_ctl() {  # run_ctl NAME weftctl-args...: weftctl must exit 0
    local name=$1; shift
    local o
    o=$logs/weftctl-nc-$(echo "$name" | tr -c 'a-z0-9' '-').out
    timeout 120 "$ctl" --endpoint "ipc://$sock" "$@" > "$o" 2>&1
    local rc=$?
    grep -v "^loading .*%" "$o" | tail -3 | sed 's/^/  | /'
    return $rc
  }
  run_ctl status status >/dev/null
  check "attention bf16 causal GQA D128 over the NCCL world (fp64 reference)" \
    run_ctl attn-bf16 attention-demo --seq 2048 --heads 8 --kv-heads 2 --dim 128 --dtype bf16 --causal --iters 3
  check "attention f16 uneven D64 over the NCCL world (fp64 reference)" \
    run_ctl attn-f16 attention-demo --seq 1000 --kv-seq 1500 --heads 6 --kv-heads 3 --dim 64 --dtype f16 --causal --iters 3
  # resident models in a cluster: a load the cluster refuses
  # (WF_E_UNAVAILABLE) counts as a failure
  for m in flux-small-d64:io-flux-small-d64-f32 flux-small-d64-bf16:io-flux-small-d64-bf16; do
    name=${m%%:*}; io=${m##*:}
    if run_ctl "load-$name" load "$name" "$name"; then
      check "FLUX forward $name over the NCCL world against diffusers ($io)" \
        run_ctl "fwd-$name" forward --model "$name" --inputs "$fx/$io.safetensors" --iters 3
    else
      echo "  FAIL  load $name in a cluster (refused: see the coordinator's log)"
      fails=$((fails + 1))
    fi
  done
fi
stop_pid "$wpid" 30 weftd
rc=$?
check "weftd stopped cleanly (exit 0)" test $rc = 0
rm -f "$sock"
echo "nccl_cluster.sh: $fails failed check(s)"
exit $fails
