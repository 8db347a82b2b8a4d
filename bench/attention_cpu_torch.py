#!/usr/bin/env python3
"""attention_cpu_torch.py — weft's CPU attention kernel beside torch's
scaled_dot_product_attention on the same cores. Driven by
bench/attention_cpu_torch.sh, which makes the pinned virtual environment
(bench/requirements-torch.txt) and pins the cores; run that, not this.
Not run by CI.

Subcommands:
  run   --bench [LABEL=]BUILD/bench/bench_attention [--bench ...]
        --threads N --rounds R --iters K [--shapes S:D:H,...] --out FILE.json
        torch: torch.set_num_threads(N) in this process, f32 q, k, v of
        (B = 1, H, S, D) (torch's contiguous layout), non-causal, the
        default scale 1 / sqrt(D). weft: `bench_attention --time S D H N
        K` of each --bench in a child process (the same shapes in weft's
        (B, S, H, D) layout, out and lse, N backend contexts each on its
        share of the heads, as weftd's workers; the child times only the
        attention calls); a second --bench (e.g. the code before a change)
        runs in the same rounds. Per shape: one warm-up on each side, then
        R rounds; each round times K calls on each side, the order of the
        sides reversed every other round, and keeps each side's median of
        the K.
  table FILE.json ...
        the markdown table of one or more run files: per shape and thread
        count the median and min-max over the rounds of each side's
        seconds per call and GFLOP/s (4 H S^2 D / time), for each weft
        binary the ratio of the medians (weft speed / torch speed, > 1:
        weft is faster) and the min-max of the per-round ratios (each
        weft block beside the torch block of the same round, which
        cancels slow drifts of the machine's load).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (S, D, H): about a second or less per torch call on one core
DEFAULT_SHAPES = ("1024:64:12,1024:128:12,2048:64:12,2048:128:12,"
                  "4096:64:8,4096:128:8,8192:64:4,8192:128:4")


def flops(S, D, H):
    return 4.0 * H * S * S * D


def time_torch(torch, F, q, k, v, iters):
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v)
        ts.append(time.perf_counter() - t)
    return ts


def time_weft(bench, S, D, H, n, iters):
    out = subprocess.run([bench, "--time", str(S), str(D), str(H), str(n), str(iters)],
                         check=True, capture_output=True, text=True).stdout
    ts = [float(line.split()[1]) for line in out.splitlines() if line.startswith("t ")]
    if len(ts) != iters:
        sys.exit(f"attention_cpu_torch.py: {bench} printed {len(ts)} times, want {iters}")
    return ts


def benches(specs):
    out = []
    for spec in specs:
        label, _, path = spec.rpartition("=")
        out.append((label or "weft", path))
    return out


def cmd_run(a):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    bs = benches(a.bench)
    res = {"threads": a.threads, "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "weft": [b[0] for b in bs],
           "shapes": []}
    for spec in a.shapes.split(","):
        S, D, H = (int(x) for x in spec.split(":"))
        q, k, v = (torch.randn(1, H, S, D, dtype=torch.float32) for _ in range(3))
        sides = [("torch", lambda n: time_torch(torch, F, q, k, v, n))]
        for label, path in bs:
            sides.append((label, lambda n, path=path: time_weft(path, S, D, H, a.threads, n)))
        for _, run in sides:
            run(1)
        rounds = []
        for r in range(a.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            rounds.append({label: statistics.median(run(a.iters)) for label, run in order})
            print(f"S {S} D {D} H {H} threads {a.threads} round {r}: " +
                  ", ".join(f"{label} {rounds[-1][label] * 1e3:.1f} ms" for label, _ in sides),
                  file=sys.stderr, flush=True)
        res["shapes"].append({"S": S, "D": D, "H": H, "rounds": rounds})
        del q, k, v
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


def cmd_table(a):
    runs = []
    for path in a.files:
        with open(path) as f:
            runs.append(json.load(f))
    labels = runs[0]["weft"]
    if any(r["weft"] != labels for r in runs):
        sys.exit("attention_cpu_torch.py: the files time different weft binaries")
    head = "| S | D | H | threads | torch ms (min-max) | torch GFLOP/s |"
    for lb in labels:
        head += f" {lb} ms (min-max) | {lb} GFLOP/s | {lb} / torch speed | per round (min-max) |"
    print(head)
    print("|---" * (6 + 4 * len(labels)) + "|")
    rows = []
    for res in runs:
        for sh in res["shapes"]:
            rows.append((res["threads"], sh["S"], sh["D"], sh))
    for n, S, D, sh in sorted(rows, key=lambda r: r[:3]):
        fl = flops(S, D, sh["H"])
        tt = [r["torch"] for r in sh["rounds"]]
        mt = statistics.median(tt)
        line = (f"| {S} | {D} | {sh['H']} | {n} | {mt * 1e3:.1f} ({min(tt) * 1e3:.1f}-"
                f"{max(tt) * 1e3:.1f}) | {fl / mt * 1e-9:.1f} |")
        for lb in labels:
            tw = [r[lb] for r in sh["rounds"]]
            per = [r["torch"] / r[lb] for r in sh["rounds"]]
            mw = statistics.median(tw)
            line += (f" {mw * 1e3:.1f} ({min(tw) * 1e3:.1f}-{max(tw) * 1e3:.1f}) | "
                     f"{fl / mw * 1e-9:.1f} | **{mt / mw:.2f}** | {min(per):.2f}-{max(per):.2f} |")
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bench", action="append", required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--iters", type=int, default=3)
    r.add_argument("--shapes", default=DEFAULT_SHAPES)
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.cmd == "run":
        for _, path in benches(a.bench):
            if not os.access(path, os.X_OK):
                sys.exit(f"attention_cpu_torch.py: no {path}")
        cmd_run(a)
    else:
        cmd_table(a)


if __name__ == "__main__":
    main()
