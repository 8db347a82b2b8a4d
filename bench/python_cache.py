#!/usr/bin/env python3
"""python_cache.py — what a denoising session and its first-block cache
cost and save, on bench/model_cpu_torch.py's CPU sizes (their
checkpoints: `model_cpu_torch.py make --size S` first). Not run by CI.

Three kinds of forward of the same inputs through weftd (Client.forward_
named), alternated within every round (the order rotated each round):
  plain     no session;
  session   a session's step with cache_threshold 0 (its state kept,
            every block computed): the mechanism's cost;
  reused    a session's step with a threshold no change reaches (after
            one computed step, every step reuses): what a skipped step
            costs.
Each round runs --iters forwards of each kind; per kind the daemon's
compute time (JobResult.compute_us: receipt of the job by the workers to
the last rank's end, so the IPC is left out) and the client's wall time.
Reported: the medians (min–max) over the rounds of each round's median,
and the ratios session / plain (target under 1.02) and reused / plain
(target under 0.10 for models as deep as the ones served: the head block
still runs, so the ratio is about 1 / blocks plus the embedders and the
final norm; these bench sizes have 6 to 12 blocks, FLUX.1-dev 57).

    python3 bench/python_cache.py --build BUILD --work /var/tmp/weft-model-cpu \
        --size a [--size b] [--devices cpu:1] [--rounds 9] [--iters 5]

Writes its table to stdout and JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SOURCE / "tests" / "python"))
sys.path.insert(0, str(SOURCE / "client" / "python" / "src"))
from python_step import med_range  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True, help="model_cpu_torch.py make's --work")
    ap.add_argument("--size", action="append", required=True)
    ap.add_argument("--devices", default="cpu:1")
    ap.add_argument("--mesh", default=None)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", default="/tmp/python-cache.json")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    os.environ.setdefault("WEFT_LIB", str(build / "client"))
    os.environ["WEFTD"] = str(build / "daemon" / "weftd")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

    import torch
    import model_cpu_torch as mct
    import weft
    from common import Weftd

    work = Path(a.work).resolve()
    d = Weftd(a.devices, mesh=a.mesh, model_root=work)
    res: Dict[str, Any] = {"devices": a.devices, "mesh": a.mesh or "single",
                           "rounds": a.rounds, "iters": a.iters, "sizes": {}}
    rows = []
    try:
        c = d.connect(600_000)
        for size in a.size:
            spec = mct.SIZES[size]
            name = f"bench-{size}"
            c.load_model(name, os.path.basename(mct.model_dir(str(work), size)))
            inputs = mct.make_inputs(spec, torch.Generator().manual_seed(mct.INPUT_SEED))
            blocks = spec["config"]["num_layers"] + spec["config"].get("num_single_layers", 0)
            sess_plain, sess_reuse = 11, 12
            step = {"session": 0, "reused": 0}
            # the reused session's computed step
            c.forward_named(name, inputs, session=sess_reuse, step=0, cache_threshold=1e30)
            step["reused"] = 1
            kinds = ["plain", "session", "reused"]
            comp: Dict[str, List[float]] = {k: [] for k in kinds}
            wall: Dict[str, List[float]] = {k: [] for k in kinds}
            uses: Dict[str, set] = {k: set() for k in kinds}
            for r in range(a.rounds):
                order = kinds[r % 3:] + kinds[:r % 3]
                for k in order:
                    cs, ws = [], []
                    for _ in range(a.iters):
                        kw: Dict[str, Any] = {}
                        if k == "session":
                            kw = dict(session=sess_plain, step=step["session"])
                            step["session"] += 1
                        elif k == "reused":
                            kw = dict(session=sess_reuse, step=step["reused"],
                                      cache_threshold=1e30)
                            step["reused"] += 1
                        t0 = time.perf_counter()
                        out = c.forward_named(name, inputs, **kw)
                        ws.append((time.perf_counter() - t0) * 1e3)
                        cs.append(out.result.compute_us / 1e3)
                        uses[k].add(out.result.cache)
                    comp[k].append(statistics.median(cs))
                    wall[k].append(statistics.median(ws))
            c.end_session(sess_plain)
            c.end_session(sess_reuse)
            c.unload_model(name)
            ratio_s = [s / p for s, p in zip(comp["session"], comp["plain"])]
            ratio_r = [s / p for s, p in zip(comp["reused"], comp["plain"])]
            res["sizes"][size] = dict(label=spec["label"], blocks=blocks, compute_ms=comp,
                                      wall_ms=wall, uses={k: sorted(v) for k, v in uses.items()},
                                      session_over_plain=ratio_s, reused_over_plain=ratio_r)
            rows.append(f"| {size} ({spec['label']}) | {blocks} | {med_range(comp['plain'])} | "
                        f"{med_range(comp['session'])} | {med_range(comp['reused'])} | "
                        f"{med_range(ratio_s, '.3f')} | {med_range(ratio_r, '.3f')} |")
            print(f"size {size}: cache uses {res['sizes'][size]['uses']}")
        c.close()
    finally:
        rc = d.stop()
    print(f"\nweftd --devices {a.devices}{' --mesh ' + a.mesh if a.mesh else ''}; "
          f"{a.rounds} rounds x {a.iters} forwards of each kind, alternated; compute ms "
          "(JobResult.compute_us), median of the per-round medians (min–max)\n")
    print("| size | blocks | plain | session, threshold 0 | reused | session / plain | "
          "reused / plain |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    sys.exit(rc)


if __name__ == "__main__":
    main()
