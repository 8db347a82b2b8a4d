#!/usr/bin/env python3
"""make_fixtures.py — the truth for weft's FLUX forward, from diffusers.

Builds tiny FluxTransformer2DModel configurations with seeded random
weights, saves them with diffusers' save_pretrained (one single-file
checkpoint, one sharded with its index.json, one in bf16), runs diffusers'
forward on fixed seeded inputs, and writes the inputs and the outputs as
small safetensors files. weft's parity tests load the checkpoints as they
are and compare their forward with these outputs.

Not run by CI: it needs torch + diffusers + safetensors from PyPI
(`pip install torch diffusers safetensors`). The files it writes are
committed; rerun it only to change the fixtures, and commit the result.

    python3 tests/parity/make_fixtures.py [--only NAME[,NAME...]] [OUT_DIR]
                                              # default: tests/fixtures, all
  --only writes only the named checkpoints' files (the model directory and
  its io file; NAME among flux-tiny, flux-tiny-guidance, flux-tiny-bf16,
  flux-small-d64, flux-small-d64-bf16, st-dtypes), leaving the others'
  bytes as they are: e.g. --only flux-small-d64,flux-small-d64-bf16.

Layout of OUT_DIR (every checkpoint is a diffusers model directory):
  flux-tiny/              guidance_embeds=False, f32, one safetensors file
  flux-tiny-guidance/     guidance_embeds=True, f32, sharded + index.json
  flux-tiny-bf16/         flux-tiny's weights rounded to bf16, one file
  io-flux-tiny-f32.safetensors
  io-flux-tiny-guidance-f32.safetensors
  io-flux-tiny-bf16.safetensors
  flux-small-d64/         head dim 64 (the CUDA attention kernels' size),
                          guidance_embeds=False, f32, one file
  flux-small-d64-bf16/    flux-small-d64's weights rounded to bf16
  io-flux-small-d64-f32.safetensors
  io-flux-small-d64-bf16.safetensors
  st-dtypes.safetensors   the safetensors reader's cross-check: f32, f16
                          and bf16 copies of k / 4 - 3 (k = 0..23, shape
                          (2, 3, 4), exact in all three), a scalar, an
                          empty (0, 4) tensor, and __metadata__
Each io file holds the inputs exactly as passed to the model
(hidden_states, encoder_hidden_states, pooled_projections, timestep,
img_ids, txt_ids and, with guidance, guidance), `output` (diffusers'
forward in the checkpoint's dtype) and, for the f32 ones, `output_f64`
(the same weights and inputs run in float64: a tighter reference for the
C forward, which accumulates in f32). Its __metadata__ names the model
directory, the dtype, the seeds and the library versions.

Sizes: flux-tiny*: hidden 48 = 4 heads x 12, MLP 192, RoPE axes
(4, 4, 4); flux-small-d64*: hidden 128 = 2 heads x 64, MLP 512, RoPE
axes (16, 24, 24) (head dim 12 is below what the CUDA attention kernels
take: 64 and 128; two heads keep the files small, 3.6 + 1.8 MB). Heads
and MLP widths divide tp = 1, 2 and 4 (flux-small-d64: tp = 1 and 2). Sequences
(all): 16 image tokens (a 4x4 latent grid), 8 text tokens, batch 2; they
divide ring / ulysses degrees 2 and 4.
"""
import json
import os
import sys

import torch
import diffusers
import diffusers.utils.logging
import safetensors
from diffusers import FluxTransformer2DModel
from safetensors.torch import save_file

CONFIG = dict(
    patch_size=1,
    in_channels=16,
    out_channels=None,
    num_layers=1,
    num_single_layers=1,
    attention_head_dim=12,
    num_attention_heads=4,
    joint_attention_dim=32,
    pooled_projection_dim=16,
    axes_dims_rope=(4, 4, 4),
)
BATCH = 2
GRID_H, GRID_W = 4, 4          # image tokens = GRID_H * GRID_W
TXT_TOKENS = 8
# flux-small-d64: the CUDA attention kernels' head dim; everything else
# as small as flux-tiny's
CONFIG_D64 = dict(CONFIG, attention_head_dim=64, num_attention_heads=2,
                  axes_dims_rope=(16, 24, 24))
WEIGHT_SEED = 1234             # flux-tiny (+1 with guidance)
WEIGHT_SEED_D64 = 4321         # flux-small-d64
INPUT_SEED = 5678
SHARD_BYTES = 200_000          # max_shard_size of the sharded checkpoint


def build_model(guidance: bool, config=CONFIG, seed=None) -> FluxTransformer2DModel:
    torch.manual_seed(WEIGHT_SEED + (1 if guidance else 0) if seed is None else seed)
    model = FluxTransformer2DModel(guidance_embeds=guidance, **config)
    # diffusers initialises some layers to zero (nothing in Flux today, but
    # AdaLN-Zero models often do) and the defaults are too small to move the
    # output much: draw every parameter anew so every weight matters.
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            scale = 1.0 / (fan_in ** 0.5) if p.dim() > 1 else 0.1
            if name.endswith("norm_q.weight") or name.endswith("norm_k.weight") \
                    or "norm_added_" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(scale * torch.randn_like(p))
    return model.eval()


def make_inputs(guidance: bool, config=CONFIG) -> dict:
    g = torch.Generator().manual_seed(INPUT_SEED)
    d = config["in_channels"]
    s_img = GRID_H * GRID_W
    inputs = {
        "hidden_states": torch.randn(BATCH, s_img, d, generator=g),
        "encoder_hidden_states": torch.randn(
            BATCH, TXT_TOKENS, config["joint_attention_dim"], generator=g),
        "pooled_projections": torch.randn(
            BATCH, config["pooled_projection_dim"], generator=g),
        # the pipeline passes t / 1000; the model multiplies by 1000
        "timestep": torch.tensor([0.25, 0.875])[:BATCH],
    }
    # FLUX's ids: image token (r, c) -> (0, r, c); text tokens -> 0
    img_ids = torch.zeros(GRID_H, GRID_W, 3)
    img_ids[..., 1] = torch.arange(GRID_H)[:, None]
    img_ids[..., 2] = torch.arange(GRID_W)[None, :]
    inputs["img_ids"] = img_ids.reshape(s_img, 3)
    inputs["txt_ids"] = torch.zeros(TXT_TOKENS, 3)
    if guidance:
        inputs["guidance"] = torch.tensor([3.5, 4.0])[:BATCH]
    return inputs


def forward(model, inputs, dtype):
    cast = {}
    for k, v in inputs.items():
        # activations in the model's dtype; timestep / guidance / ids as
        # given (the model casts timestep and guidance itself, and RoPE
        # runs in float64 from the ids)
        if k in ("hidden_states", "encoder_hidden_states", "pooled_projections"):
            cast[k] = v.to(dtype)
        else:
            cast[k] = v
    with torch.no_grad():
        out = model.to(dtype)(**cast, return_dict=False)[0]
    return cast, out


def write_io(path, inputs, outputs, meta):
    tensors = {k: v.contiguous() for k, v in {**inputs, **outputs}.items()}
    save_file(tensors, path, metadata={k: str(v) for k, v in meta.items()})


ALL = ("flux-tiny", "flux-tiny-guidance", "flux-tiny-bf16",
       "flux-small-d64", "flux-small-d64-bf16", "st-dtypes")


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir, only = os.path.join(here, "..", "fixtures"), set(ALL)
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--only" and args:
            only = set(args.pop(0).split(","))
        elif a.startswith("--only="):
            only = set(a[len("--only="):].split(","))
        elif not a.startswith("-"):
            out_dir = a
        else:
            sys.exit(f"usage: make_fixtures.py [--only NAME[,NAME...]] [OUT_DIR]; "
                     f"unknown option {a}")
    bad = only - set(ALL)
    if bad:
        sys.exit(f"--only: unknown fixture(s) {sorted(bad)}; known: {', '.join(ALL)}")
    return out_dir, only


def main() -> int:
    out_dir, only = parse_args(sys.argv[1:])
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    diffusers.utils.logging.set_verbosity_error()
    versions = {"diffusers": diffusers.__version__, "torch": torch.__version__,
                "safetensors": safetensors.__version__}

    # name, guidance, sharded, config, weight seed, name of its bf16 copy
    for name, guidance, sharded, config, seed, bf_name in (
            ("flux-tiny", False, False, CONFIG, WEIGHT_SEED, "flux-tiny-bf16"),
            ("flux-tiny-guidance", True, True, CONFIG, WEIGHT_SEED + 1, None),
            ("flux-small-d64", False, False, CONFIG_D64, WEIGHT_SEED_D64,
             "flux-small-d64-bf16")):
        if name not in only and bf_name not in only:
            continue
        model = build_model(guidance, config, seed)
        kw = {"max_shard_size": SHARD_BYTES} if sharded else {"max_shard_size": "10GB"}
        if name in only:
            model.save_pretrained(os.path.join(out_dir, name), safe_serialization=True, **kw)
        inputs = make_inputs(guidance, config)
        passed, out = forward(model, inputs, torch.float32)
        _, out64 = forward(model, {k: v.double() if k in ("hidden_states",
                           "encoder_hidden_states", "pooled_projections",
                           "timestep", "guidance") else v for k, v in inputs.items()},
                           torch.float64)
        meta = {"model": name, "dtype": "f32", "weight_seed": seed,
                "input_seed": INPUT_SEED, **versions}
        err = (out.double() - out64).abs().max().item()
        if name in only:
            write_io(os.path.join(out_dir, f"io-{name}-f32.safetensors"), passed,
                     {"output": out, "output_f64": out64.float()}, meta)
            print(f"{name}: output {tuple(out.shape)}, |f32 - f64| max {err:.3g}")

        if bf_name in only:
            model = build_model(guidance, config, seed).to(torch.bfloat16)
            model.save_pretrained(os.path.join(out_dir, bf_name), safe_serialization=True,
                                  max_shard_size="10GB")
            passed, out = forward(model, inputs, torch.bfloat16)
            meta.update(model=bf_name, dtype="bf16")
            write_io(os.path.join(out_dir, f"io-{bf_name}.safetensors"), passed,
                     {"output": out}, meta)
            err = (out.double() - out64).abs().max().item()
            print(f"{bf_name}: output {tuple(out.shape)}, |bf16 - f64(f32 weights)| max {err:.3g}")

    if "st-dtypes" in only:
        vals = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 4 - 3
        save_file({"f32": vals, "f16": vals.half(), "bf16": vals.bfloat16(),
                   "scalar": torch.tensor(1.5), "empty": torch.zeros(0, 4)},
                  os.path.join(out_dir, "st-dtypes.safetensors"),
                  metadata={"writer": "make_fixtures.py", "format": "pt"})

    # sanity: the sharded checkpoint must really be sharded
    if "flux-tiny-guidance" in only:
        index = os.path.join(out_dir, "flux-tiny-guidance",
                             "diffusion_pytorch_model.safetensors.index.json")
        with open(index) as f:
            files = set(json.load(f)["weight_map"].values())
        assert len(files) >= 2, f"expected several shards, got {files}"

    total = 0
    for root, _, names in os.walk(out_dir):
        for n in sorted(names):
            p = os.path.join(root, n)
            total += os.path.getsize(p)
            print(f"{os.path.getsize(p):9d}  {os.path.relpath(p, out_dir)}")
    print(f"{total:9d}  total bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
