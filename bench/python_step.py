#!/usr/bin/env python3
"""python_step.py — a FluxPipeline step with its transformer served by
weftd (weft.diffusers.WeftFluxTransformer) beside the same step with
diffusers' FluxTransformer2DModel in this process, and the per-call
overhead of the Python binding and the IPC. Driven by
bench/python_step.sh (the venv, the core pinning); not run by CI.

1. Pipeline step. A FluxPipeline built by tests/python/tiny_flux.py at
   size "a": the transformer is bench/flux_cpu_torch.py's size a (4 heads
   x 128, 2 double + 4 single blocks, in_channels 64; seeded random f32
   weights), 256 image tokens (64 x 64 pixels) + 64 text tokens, tiny
   CLIP / T5 / VAE. Both pipelines share every component but the
   transformer; weftd loads the very checkpoint the torch side holds
   (save_pretrained). torch runs with torch.set_num_threads(N); weftd with
   --devices cpu:N (one OpenBLAS thread a device) on the mesh given. A
   step is the time between two consecutive callback_on_step_end calls
   of one pipeline call of --steps steps (transformer + scheduler step):
   the first step is left out (it follows the text encoders). Each round
   runs one pipeline call on each side, the order flipped every round,
   and keeps the median of its steps.

2. Overhead. tests/fixtures/flux-tiny (4 heads x 12, B 2, 16 + 8 tokens:
   compute is tiny, so the round trip is mostly overhead), loaded in the
   same daemon. Per round, --iters calls of each: diffusers' forward in
   this process; Client.forward (the binding: numpy/torch -> wf_tensor_t,
   libweft's send, the daemon, the reply written into a preallocated
   output); WeftFluxTransformer (the diffusers adapter on top: input
   casts, output allocation, Transformer2DModelOutput; overlap_forwards
   off, so that the call waits for its reply); `weftctl forward
   --iters` (the C client's round trip, another process: the same wire
   and daemon without Python); and the daemon's own compute time
   (JobResult.compute_us). binding + IPC overhead = Client.forward round
   trip - compute; the binding's own share ~ Client.forward - weftctl.

Prints markdown tables (median and min-max over the rounds, ratios) and
writes them with the raw figures to --out (JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent
sys.path.insert(0, str(SOURCE / "tests" / "python"))
sys.path.insert(0, str(SOURCE / "client" / "python" / "src"))


def med_range(xs: List[float], fmt: str = ".2f") -> str:
    """The median (min–max) of xs, each in format fmt (bench/python_cfg.py
    and python_cache.py print theirs with it too)."""
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="cmake build dir (weftd, weftctl, libweft)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mesh", default=None, help="weftd --mesh (default: tp=N, or none for 1)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    build = Path(a.build).resolve()
    os.environ.setdefault("WEFT_LIB", str(build / "client"))
    os.environ["WEFTD"] = str(build / "daemon" / "weftd")

    import torch
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    import diffusers
    import diffusers.utils.logging
    import transformers
    from diffusers import FluxTransformer2DModel
    from safetensors.torch import load_file
    diffusers.utils.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()

    import tiny_flux as tf
    import weft
    from common import FIXTURES, Weftd
    from weft.diffusers import WeftFluxTransformer

    work = Path(a.work).resolve()
    shutil.rmtree(work / "pipe", ignore_errors=True)
    built = tf.build(work / "pipe", size="a")
    spec = built["spec"]
    root = built["root"]
    shutil.rmtree(root / "flux-tiny", ignore_errors=True)
    shutil.copytree(FIXTURES / "flux-tiny", root / "flux-tiny")

    n = a.threads
    mesh = a.mesh or (f"tp={n}" if n > 1 else None)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_VERBOSE"] = "2"
    d = Weftd(f"cpu:{n}", mesh=mesh, model_root=root)
    res: Dict[str, Any] = {"threads": n, "mesh": mesh or "single", "rounds": a.rounds,
                           "steps": a.steps, "iters": a.iters,
                           "torch": torch.__version__, "diffusers": diffusers.__version__,
                           "affinity": sorted(os.sched_getaffinity(0)),
                           "cpu": _cpu_model(), "blas_core": _blas_core(d.log())}
    try:
        wt = WeftFluxTransformer(d.endpoint, "bench-a", path=built["transformer_path"],
                                 model_root=root)
        p = built["pipe"]
        pipe_w = tf.with_transformer(p, wt)
        sides: Dict[str, Any] = {"torch": p, "weft": pipe_w}

        def steps_of(pipe: Any) -> Dict[str, Any]:
            with torch.inference_mode():
                r = tf.run(pipe, steps=a.steps, spec=spec)
            e = r["step_ends"]
            return {"steps_ms": [(y - x) * 1e3 for x, y in zip(e, e[1:])],
                    "latents": r["latents"]}

        for s in sides.values():        # warm-up
            steps_of(s)
        step_rounds: Dict[str, List[float]] = {"torch": [], "weft": []}
        ratio_rounds: List[float] = []
        lat: Dict[str, Any] = {}
        for i in range(a.rounds):
            order = ["torch", "weft"] if i % 2 == 0 else ["weft", "torch"]
            got = {}
            for name in order:
                r = steps_of(sides[name])
                got[name] = statistics.median(r["steps_ms"])
                lat[name] = r["latents"]
                step_rounds[name].append(got[name])
            ratio_rounds.append(got["torch"] / got["weft"])
        res["step"] = {"torch_ms": step_rounds["torch"], "weft_ms": step_rounds["weft"],
                       "ratio_rounds": ratio_rounds,
                       "latents_max_abs_diff": float((lat["torch"] - lat["weft"]).abs().max()),
                       "latents_max_abs": float(lat["torch"].abs().max())}

        # -- overhead on the tiny fixture
        c = weft.connect(d.endpoint, 60000)
        c.load_model("overhead", "flux-tiny")
        x = load_file(str(FIXTURES / "io-flux-tiny-f32.safetensors"))
        names = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep",
                 "img_ids", "txt_ids")
        ins = [x[k].contiguous() for k in names]
        model = FluxTransformer2DModel.from_pretrained(str(root / "flux-tiny")).eval()
        # waited for inside each call, so that a call's time is its round
        # trip (an overlapped forward would return before its reply)
        wt_tiny = WeftFluxTransformer(d.endpoint, "overhead",
                                      config=str(root / "flux-tiny"), overlap_forwards=False)
        out = torch.empty_like(x["hidden_states"])
        kw = dict(zip(names, ins))
        computes: List[float] = []

        def torch_call() -> None:
            with torch.inference_mode():
                model(**kw, return_dict=False)

        def binding_call() -> None:
            r = c.forward("overhead", *ins, out=out)
            computes.append(r.result.compute_us / 1e3)

        def adapter_call() -> None:
            with torch.inference_mode():
                wt_tiny(**kw, return_dict=False)

        def weftctl_block() -> float:
            r = subprocess.run([str(build / "client" / "weftctl"), "--endpoint", d.endpoint,
                                "forward", "--model", "overhead", "--inputs",
                                str(FIXTURES / "io-flux-tiny-f32.safetensors"), "--iters",
                                str(a.iters)], capture_output=True, text=True)
            m = re.search(r"time ([0-9.]+) ms median", r.stdout)
            if not m:
                raise SystemExit(f"weftctl forward: {r.stdout}{r.stderr}")
            return float(m.group(1))

        calls: Dict[str, Callable[[], None]] = {"torch in-process": torch_call,
                                                "Client.forward": binding_call,
                                                "WeftFluxTransformer": adapter_call}
        for f in calls.values():
            f()
        ov: Dict[str, List[float]] = {k: [] for k in list(calls) + ["weftctl forward",
                                                                    "daemon compute"]}
        for i in range(a.rounds):
            keys = list(calls) if i % 2 == 0 else list(reversed(list(calls)))
            for k in keys:
                ts = []
                for _ in range(a.iters):
                    t0 = time.perf_counter()
                    calls[k]()
                    ts.append((time.perf_counter() - t0) * 1e3)
                ov[k].append(statistics.median(ts))
            ov["weftctl forward"].append(weftctl_block())
            ov["daemon compute"].append(statistics.median(computes[-a.iters:]))
        res["overhead"] = ov
        res["overhead_output_max_abs_diff"] = float(
            (out - x["output"]).abs().max())
        c.close()
        wt.close()
        wt_tiny.close()
    finally:
        rc = d.stop()
    res["weftd_exit"] = rc
    table = render(res)
    print(table)
    res["table"] = table
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


def render(res: Dict[str, Any]) -> str:
    st = res["step"]
    t_med = statistics.median(st["torch_ms"])
    w_med = statistics.median(st["weft_ms"])
    lines = [
        f"Threads {res['threads']} (weftd --devices cpu:{res['threads']}, mesh "
        f"{res['mesh']}; torch.set_num_threads({res['threads']})), cores "
        f"{res['affinity']}, {res['rounds']} rounds, {res['cpu']}, OpenBLAS core "
        f"{res['blas_core']}, torch {res['torch']}, diffusers {res['diffusers']}.",
        "",
        "| pipeline step (size a: 256 + 64 tokens) | median ms (min–max of rounds) |",
        "|---|---|",
        f"| diffusers' transformer, in-process | {med_range(st['torch_ms'])} |",
        f"| WeftFluxTransformer (weftd) | {med_range(st['weft_ms'])} |",
        f"| torch / weft: of the medians | {t_med / w_med:.2f} |",
        f"| torch / weft: per round, median (min–max) | {med_range(st['ratio_rounds'])} |",
        "",
        f"Final latents ({res['steps']} steps), torch vs weft: max abs diff "
        f"{st['latents_max_abs_diff']:.2e} (max |latents| {st['latents_max_abs']:.2f}).",
        "",
        "| one forward of flux-tiny (B 2, 16 + 8 tokens) | median ms (min–max of rounds) |",
        "|---|---|",
    ]
    ov = res["overhead"]
    for k, v in ov.items():
        lines.append(f"| {k} | {med_range(v)} |")
    bt = statistics.median(ov["Client.forward"])
    comp = statistics.median(ov["daemon compute"])
    ctl = statistics.median(ov["weftctl forward"])
    ad = statistics.median(ov["WeftFluxTransformer"])
    tin = statistics.median(ov["torch in-process"])
    lines += [
        "",
        f"binding + IPC overhead per call (Client.forward - daemon compute): "
        f"{bt - comp:.3f} ms; Python binding's share (Client.forward - weftctl): "
        f"{bt - ctl:.3f} ms; diffusers adapter's share (WeftFluxTransformer - "
        f"Client.forward): {ad - bt:.3f} ms; weft round trip / in-process call: "
        f"{bt / tin:.2f}; overhead / size-a step: {(bt - comp) / w_med * 100:.2f} %.",
        f"(flux-tiny output vs diffusers' f32 output: max abs diff "
        f"{res['overhead_output_max_abs_diff']:.1e}.)",
    ]
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _blas_core(log: str) -> str:
    m = re.search(r"Core: (\S+)", log)
    return m.group(1) if m else "unknown"


if __name__ == "__main__":
    main()
