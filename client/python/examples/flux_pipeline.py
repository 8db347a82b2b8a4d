"""flux_pipeline.py — diffusers' FluxPipeline with its transformer served
by weftd: the text encoders, scheduler and VAE run here, each denoising
step's transformer forward runs in weftd (context- and tensor-parallel as
its mesh says).

    python client/python/examples/flux_pipeline.py \\
        --endpoint ipc:///run/weftd/weftd.sock --model-root /srv/models \\
        /srv/models/flux/dev "a tabby cat on a blue mat" --out cat.png

PIPELINE_DIR is a diffusers FluxPipeline folder (save_pretrained's, or a
hub snapshot) under weftd's model root (--model-root: the daemon's, as
seen from here; $WEFT_MODEL_ROOT when not given): weftd loads its
transformer/ subfolder by the path relative to that root (or attaches to
it when already resident), this process loads the other components.
Needs torch and diffusers (pip install "client/python[diffusers]").
"""
from __future__ import annotations

import argparse
import time

import torch
from diffusers import FluxPipeline

from weft.diffusers import WeftFluxTransformer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pipeline_dir")
    ap.add_argument("prompt", nargs="?", default="a tabby cat on a blue mat")
    ap.add_argument("--endpoint", help="weftd's endpoint (default: $WEFT_ENDPOINT, libweft's)")
    ap.add_argument("--model-root", help="weftd's --model-root as seen from here")
    ap.add_argument("--name", help="the resident model's name (default: from its path)")
    ap.add_argument("--steps", type=int, default=28)
    ap.add_argument("--guidance", type=float, default=3.5)
    ap.add_argument("--height", type=int, default=1024)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--max-sequence-length", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16",
                    help="the pipeline's dtype (weftd computes as its backend does)")
    ap.add_argument("--out", default="flux.png")
    a = ap.parse_args()

    dtype = getattr(torch, a.dtype)
    with WeftFluxTransformer.from_pretrained(a.pipeline_dir, subfolder="transformer",
                                             endpoint=a.endpoint, name=a.name,
                                             model_root=a.model_root,
                                             torch_dtype=dtype) as transformer:
        print(f"weftd at {transformer.client.endpoint} serves {transformer.model_name!r} "
              f"({transformer.model_info.path}, mesh {transformer.client.status().mesh})")
        pipe = FluxPipeline.from_pretrained(a.pipeline_dir, transformer=transformer,
                                            torch_dtype=dtype)
        t0 = time.monotonic()
        image = pipe(a.prompt, height=a.height, width=a.width, num_inference_steps=a.steps,
                     guidance_scale=a.guidance, max_sequence_length=a.max_sequence_length,
                     generator=torch.Generator().manual_seed(a.seed)).images[0]
        dt = time.monotonic() - t0
        image.save(a.out)
        last = transformer.last_result
        print(f"{a.steps} steps in {dt:.2f} s; last step {last.compute_us / 1000:.1f} ms on "
              f"{last.devices} devices; wrote {a.out}" if last else f"wrote {a.out}")


if __name__ == "__main__":
    main()
