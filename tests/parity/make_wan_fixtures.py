#!/usr/bin/env python3
"""make_wan_fixtures.py — the truth for weft's Wan forward, from diffusers.

Builds a tiny WanTransformer3DModel (Wan 2.1 text-to-video) with seeded
random weights, saves it with diffusers' save_pretrained (one
single-file f32 checkpoint), runs diffusers' forward on fixed seeded
inputs in float32 and in float64, and writes the inputs and the outputs
as a small safetensors file. weft's Wan tests load the checkpoint as it is
and compare their forward with these outputs.

Not run by CI: it needs torch + diffusers + safetensors (the project's
venv, ~/.cache/weft/venv-python, has them). The files it writes are
committed; rerun it only to change the fixtures, and commit the result.

    python3 tests/parity/make_wan_fixtures.py [OUT_DIR]   # default: tests/fixtures

Writes, under OUT_DIR:
  wan-tiny/                    config.json + diffusion_pytorch_model.safetensors
  io-wan-tiny-f32.safetensors  hidden_states (B, C_in, F, H, W), timestep (B),
                               encoder_hidden_states (B, S_txt, text_dim),
                               output (B, C_out, F, H, W): diffusers in f32,
                               output_f64: the same weights and inputs in
                               float64, stored rounded to f32
Sizes: 2 heads x 16 (inner 32), 2 layers, in / out 4 channels, text_dim
32, freq_dim 32, ffn 64, patch (1, 2, 2), cross_attn_norm true; inputs
B = 2, F = 2, H = 4, W = 6 (a 2 x 2 x 3 grid of 12 video tokens: H and W
differ so that a swapped axis shows), S_txt = 8.
"""
import os
import sys

import torch
import diffusers
import diffusers.utils.logging
import safetensors
from diffusers import WanTransformer3DModel
from safetensors.torch import save_file

CONFIG = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=16,
    in_channels=4,
    out_channels=4,
    text_dim=32,
    freq_dim=32,
    ffn_dim=64,
    num_layers=2,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    image_dim=None,
    added_kv_proj_dim=None,
    rope_max_seq_len=1024,
)
BATCH, FRAMES, HEIGHT, WIDTH = 2, 2, 4, 6
TXT_TOKENS = 8
WEIGHT_SEED = 2468
INPUT_SEED = 1357


def build_model(seed: int = WEIGHT_SEED, **overrides) -> WanTransformer3DModel:
    """CONFIG (with `overrides`) and every weight drawn from `seed` (the
    fixture's: WEIGHT_SEED and no overrides; tests/python/tiny_wan.py
    draws a second expert and an image-to-video one this way)."""
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**{**CONFIG, **overrides})
    # draw every parameter anew (scale 1 / sqrt(fan in)) so that every
    # weight moves the output; norm weights near 1
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() >= 2 and "scale_shift_table" not in name:
                fan_in = p[0].numel()
                p.copy_(torch.randn_like(p) / fan_in ** 0.5)
            elif "scale_shift_table" in name:
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def make_inputs() -> dict:
    g = torch.Generator().manual_seed(INPUT_SEED)
    return {
        "hidden_states": torch.randn(BATCH, CONFIG["in_channels"], FRAMES, HEIGHT, WIDTH,
                                     generator=g),
        # the pipeline passes the scheduler's timesteps (0..1000) as they are
        "timestep": torch.tensor([999.0, 421.5])[:BATCH],
        "encoder_hidden_states": torch.randn(BATCH, TXT_TOKENS, CONFIG["text_dim"],
                                             generator=g),
    }


def forward(model, inputs, dtype):
    cast = {k: v.to(dtype) if k != "timestep" else v for k, v in inputs.items()}
    with torch.no_grad():
        out = model.to(dtype)(**cast, return_dict=False)[0]
    return out


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    diffusers.utils.logging.set_verbosity_error()
    model = build_model()
    model.save_pretrained(os.path.join(out_dir, "wan-tiny"), safe_serialization=True,
                          max_shard_size="10GB")
    inputs = make_inputs()
    out = forward(model, inputs, torch.float32)
    out64 = forward(model, {k: v.double() for k, v in inputs.items()}, torch.float64)
    err = (out.double() - out64).abs().max().item()
    meta = {"model": "wan-tiny", "dtype": "f32", "weight_seed": WEIGHT_SEED,
            "input_seed": INPUT_SEED, "diffusers": diffusers.__version__,
            "torch": torch.__version__, "safetensors": safetensors.__version__}
    tensors = {**inputs, "output": out, "output_f64": out64.float()}
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, "io-wan-tiny-f32.safetensors"),
              metadata={k: str(v) for k, v in meta.items()})
    print(f"wan-tiny: output {tuple(out.shape)}, |f32 - f64| max {err:.3g}, "
          f"max |out| {out64.abs().max().item():.3g}")
    for k, v in model.state_dict().items():
        print(f"  {k} {tuple(v.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
