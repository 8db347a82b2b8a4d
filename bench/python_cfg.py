#!/usr/bin/env python3
"""python_cfg.py — the step time of a WanPipeline with classifier-free
guidance (two transformer calls a step: the conditional branch, then the
unconditional one) whose transformer weftd serves on two CPU devices
(weftd --devices cpu:2), in three configurations:

  (a) dp = 2, overlapped forwards (WeftWanTransformer's default,
      overlap_forwards=True): the two branches are in weftd at once, one
      on each replica;
  (b) dp = 2, one call after the other (overlap_forwards=False): one
      replica idles while the other runs each branch;
  (c) ulysses = 2, one call after the other: both devices split each
      forward (sequence-parallel attention).

Driven by bench/python_cfg.sh (the venv, the core pinning); not run by CI.

The pipeline: tests/python/tiny_wan.py's components (UMT5 of d_model 32,
its tokenizer, the tiny AutoencoderKLWan, UniPC) around a transformer
made here big enough that it dominates a step: --heads x 64 (default 8:
inner 512), --layers blocks (default 4), ffn 4 x inner, patch (1, 2, 2),
in / out 4 channels, text_dim 32; seeded random f32 weights, saved with
save_pretrained under the daemon's model root. The video: --frames x
--height x --width pixels (default 9 x 128 x 192: latents 3 x 16 x 24,
3 x 8 x 12 = 288 video tokens), 8 text tokens, guidance 5,
output_type="latent" (no decode).

A step is the time between two consecutive callback_on_step_end calls
of one pipeline call of --steps steps (two transformer calls and the
scheduler step); the first step is left out (it follows the text
encoder). Each round runs one pipeline call in every configuration, the
order rotated every round (the mesh re-sharded by Client.reconfigure
before each, outside the timed steps), and keeps the median of its
steps; the table gives the median over the rounds with their min-max,
and the ratios (b)/(a) and (c)/(a) (how many times faster (a) is) of the
medians and per round. Also the single forward (JobResult.compute_us of
(b)'s jobs) and the final latents of (a) against (b) (bitwise) and (c).

Prints a markdown table and writes it with the raw figures to --out
(JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent
sys.path.insert(0, str(SOURCE / "tests" / "python"))
sys.path.insert(0, str(SOURCE / "client" / "python" / "src"))
sys.path.insert(0, str(HERE))
from python_step import _blas_core, _cpu_model, med_range  # noqa: E402

CONFIGS = {
    "a": ("dp=2, overlapped", dict(dp=2), True),
    "b": ("dp=2, one after the other", dict(dp=2), False),
    "c": ("ulysses=2, one after the other", dict(ulysses=2), False),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="cmake build dir (weftd, libweft)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--frames", type=int, default=9)
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--width", type=int, default=192)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    build = Path(a.build).resolve()
    os.environ.setdefault("WEFT_LIB", str(build / "client"))
    os.environ["WEFTD"] = str(build / "daemon" / "weftd")

    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import diffusers
    import diffusers.utils.logging
    import transformers
    from diffusers import WanPipeline, WanTransformer3DModel
    diffusers.utils.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()

    import tiny_wan as tw
    from common import Weftd
    from weft.diffusers import WeftWanTransformer

    work = Path(a.work).resolve()
    shutil.rmtree(work / "pipe", ignore_errors=True)
    built = tw.build(work / "pipe")
    base = built["pipe"]
    root = built["root"]
    inner = a.heads * 64
    torch.manual_seed(2468)
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=a.heads, attention_head_dim=64,
        in_channels=4, out_channels=4, text_dim=base.text_encoder.config.d_model,
        freq_dim=256, ffn_dim=4 * inner, num_layers=a.layers, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", eps=1e-6).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
    model.save_pretrained(str(root / "bench-wan" / "transformer"))
    del model

    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_VERBOSE"] = "2"
    d = Weftd("cpu:2", mesh="dp=2", model_root=root)
    tokens = ((a.frames - 1) // 4 + 1) * (a.height // 16) * (a.width // 16)
    res: Dict[str, Any] = {"rounds": a.rounds, "steps": a.steps, "heads": a.heads,
                           "layers": a.layers, "video": [a.frames, a.height, a.width],
                           "video_tokens": tokens, "label": a.label,
                           "torch": torch.__version__, "diffusers": diffusers.__version__,
                           "affinity": sorted(os.sched_getaffinity(0)),
                           "cpu": _cpu_model(), "blas_core": _blas_core(d.log()),
                           "loadavg_start": os.getloadavg()}
    try:
        wts = {k: WeftWanTransformer(d.endpoint, "bench-wan", path="bench-wan/transformer",
                                     model_root=root, overlap_forwards=over)
               for k, (_, _, over) in CONFIGS.items()}
        pipes = {}
        for k, wt in wts.items():
            p = WanPipeline(tokenizer=base.tokenizer, text_encoder=base.text_encoder,
                            vae=base.vae, scheduler=base.scheduler, transformer=wt)
            p.set_progress_bar_config(disable=True)
            pipes[k] = p
        client = wts["a"].client

        def run(k: str) -> Dict[str, Any]:
            client.reconfigure(**CONFIGS[k][1])
            ends: List[float] = []
            computes: List[float] = []

            def keep(p: Any, i: int, t: Any, kw: Dict[str, Any]) -> Dict[str, Any]:
                ends.append(time.perf_counter())
                if wts[k].last_result is not None:
                    computes.append(wts[k].last_result.compute_us / 1e3)
                return {}

            with torch.inference_mode():
                out = pipes[k](prompt=tw.PROMPT, negative_prompt=tw.NEGATIVE,
                               height=a.height, width=a.width, num_frames=a.frames,
                               num_inference_steps=a.steps, guidance_scale=tw.GUIDANCE,
                               max_sequence_length=tw.MAX_SEQ,
                               generator=torch.Generator().manual_seed(7),
                               output_type="latent", callback_on_step_end=keep)
            steps = [(y - x) * 1e3 for x, y in zip(ends, ends[1:])]
            return {"step_ms": statistics.median(steps), "latents": out.frames.clone(),
                    "compute_ms": statistics.median(computes)}

        for k in CONFIGS:       # warm-up
            run(k)
        step: Dict[str, List[float]] = {k: [] for k in CONFIGS}
        compute: Dict[str, List[float]] = {k: [] for k in CONFIGS}
        ratios: Dict[str, List[float]] = {"b/a": [], "c/a": []}
        lat: Dict[str, Any] = {}
        keys = list(CONFIGS)
        for i in range(a.rounds):
            got = {}
            for k in keys[i % 3:] + keys[:i % 3]:
                r = run(k)
                got[k] = r["step_ms"]
                step[k].append(r["step_ms"])
                compute[k].append(r["compute_ms"])
                lat[k] = r["latents"]
            ratios["b/a"].append(got["b"] / got["a"])
            ratios["c/a"].append(got["c"] / got["a"])
        res["step_ms"] = step
        res["compute_ms"] = compute
        res["ratio_rounds"] = ratios
        res["a_equals_b"] = bool(torch.equal(lat["a"], lat["b"]))
        res["a_vs_c_max_abs_diff"] = float((lat["a"] - lat["c"]).abs().max())
        res["latents_max_abs"] = float(lat["b"].abs().max())
        client.reconfigure(dp=2)
        client.unload_model("bench-wan")
        for wt in wts.values():
            wt.close()
    finally:
        rc = d.stop()
    res["weftd_exit"] = rc
    res["loadavg_end"] = os.getloadavg()
    table = render(res)
    print(table)
    res["table"] = table
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


def render(res: Dict[str, Any]) -> str:
    st = res["step_ms"]
    med = {k: statistics.median(v) for k, v in st.items()}
    f, h, w = res["video"]
    lines = [
        f"{res['label'] + ': ' if res['label'] else ''}weftd --devices cpu:2, WanPipeline "
        f"with guidance 5 (2 transformer calls a step), transformer {res['heads']} x 64 "
        f"heads, {res['layers']} layers, {f} x {h} x {w} video = {res['video_tokens']} video "
        f"tokens; {res['rounds']} rounds of {res['steps']} steps (first left out), cores "
        f"{res['affinity']}, load average {res['loadavg_start'][0]:.2f} at the start and "
        f"{res['loadavg_end'][0]:.2f} at the end; {res['cpu']}, OpenBLAS core "
        f"{res['blas_core']}, torch {res['torch']}, diffusers {res['diffusers']}.",
        "",
        "| configuration | step, median ms (min–max of rounds) | one forward's compute, "
        "median ms |",
        "|---|---|---|",
    ]
    for k, (label, _, _) in CONFIGS.items():
        lines.append(f"| ({k}) {label} | {med_range(st[k], '.1f')} | "
                     f"{statistics.median(res['compute_ms'][k]):.1f} |")
    rr = res["ratio_rounds"]
    lines += [
        f"| (b) / (a): of the medians; per round, median (min–max) | "
        f"{med['b'] / med['a']:.2f}; {med_range(rr['b/a'], '.2f')} | |",
        f"| (c) / (a): of the medians; per round, median (min–max) | "
        f"{med['c'] / med['a']:.2f}; {med_range(rr['c/a'], '.2f')} | |",
        "",
        f"Final latents: (a) and (b) {'bitwise equal' if res['a_equals_b'] else 'DIFFER'}; "
        f"(a) vs (c) max abs diff {res['a_vs_c_max_abs_diff']:.2e} (max |latents| "
        f"{res['latents_max_abs']:.2f}).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
