"""attention.py — weft from Python by example: hello, one attention job
checked against numpy, four jobs in flight, status.

usage: python attention.py [ENDPOINT]   (default: $WEFT_ENDPOINT, else
                                          ipc:///run/weftd/weftd.sock)
Start a daemon first, e.g. `weftd --devices cpu:2 --listen ipc:///tmp/weft.sock`.
"""
import sys

import numpy as np

import weft


def reference(q, k, v):
    """softmax(q k^T / sqrt(D)) v in float64, per batch and head."""
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v)


rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 256, 4, 64), dtype=np.float32) for _ in range(3))

with weft.connect(sys.argv[1] if len(sys.argv) > 1 else None, timeout_ms=10000) as c:
    hello = c.hello()
    print(f"weftd {hello.weft_version}, {hello.backend} backend, {hello.devices} devices")

    r = c.attention(q, k, v)                     # q, k, v are sent without a copy
    err = np.abs(r.out - reference(q.astype(np.float64), k, v)).max()
    print(f"attention: max |out - fp64 reference| = {err:.2e}, "
          f"{r.result.compute_us} us on {r.result.devices} devices")

    jobs = [c.submit_attention(q, k, v, causal=True) for _ in range(4)]   # in flight
    for j in jobs:
        with j:
            j.wait()
    try:
        c.reconfigure(dp=c.status().mesh.dp + 1000)
    except weft.BadArgumentError as e:           # the daemon's code and message
        print(f"refused as expected: {e.name} ({e.code}): {e.message}")
    print(f"served {c.status().jobs_served} jobs")
