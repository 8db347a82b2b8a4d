#!/usr/bin/env python3
"""make_wan_long.py — the truth for weft's Wan forward on a long sequence.

A WanTransformer3DModel (Wan 2.1 text-to-video) with tiny widths and one
block, run by diffusers on 8,192 video tokens: the case where a
sequence-parallel forward (ring x ulysses) splits long attention rows
into blocks, and where an online softmax's running sums must hold over
thousands of keys. The weights are drawn as make_wan_fixtures.py draws
wan-tiny's (its build_model, on this script's config and seed); the
checkpoint is diffusers' save_pretrained, f32.

Not run by CI: it needs torch + diffusers + safetensors (the project's
venv, ~/.cache/weft/venv-python, has them). The files it writes are
committed; rerun it only to change the fixture, and commit the result.

    python3 tests/parity/make_wan_long.py [OUT_DIR]   # default: tests/fixtures

Writes, under OUT_DIR:
  wan-long/                    config.json + diffusion_pytorch_model.safetensors
  io-wan-long.safetensors      hidden_states (1, 4, 8, 64, 64) F16,
                               timestep (1) F32,
                               encoder_hidden_states (1, 4, 16) F16,
                               output_f64 (1, 4, 8, 64, 64) F32: diffusers'
                               forward in float64, rounded to f32
The inputs are drawn in f32 and rounded to f16; diffusers runs on those
rounded values, so the f16 inputs are exact and half the size. The
reference stays f32 (the tolerance of a test is far below f16's
rounding). diffusers' own f32 forward is not stored: its distance from
the float64 one is printed and kept in the file's metadata
(f32_vs_f64_rel).

Sizes: 2 heads x 16 (inner 32), 1 layer, in / out 4 channels, text_dim
16, freq_dim 16, ffn 32, patch (1, 2, 2); inputs B = 1, F = 8, H = 64,
W = 64 (an 8 x 32 x 32 grid of 8,192 video tokens, divisible by every
ring x ulysses up to 8 x 2), S_txt = 4.
"""
import os
import sys

import torch
import diffusers
import diffusers.utils.logging
import safetensors
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_wan_fixtures  # noqa: E402  (the weight draw and the forward)

# wan-tiny's config, narrower and with one layer
CONFIG = dict(make_wan_fixtures.CONFIG, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=1)
BATCH, FRAMES, HEIGHT, WIDTH = 1, 8, 64, 64
TXT_TOKENS = 4
WEIGHT_SEED = 8642
INPUT_SEED = 7531


def build_model():
    return make_wan_fixtures.build_model(CONFIG, WEIGHT_SEED)


def make_inputs() -> dict:
    g = torch.Generator().manual_seed(INPUT_SEED)
    hs = torch.randn(BATCH, CONFIG["in_channels"], FRAMES, HEIGHT, WIDTH, generator=g)
    enc = torch.randn(BATCH, TXT_TOKENS, CONFIG["text_dim"], generator=g)
    return {
        "hidden_states": hs.half(),
        "timestep": torch.tensor([700.0])[:BATCH],
        "encoder_hidden_states": enc.half(),
    }


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    diffusers.utils.logging.set_verbosity_error()
    model = build_model()
    model.save_pretrained(os.path.join(out_dir, "wan-long"), safe_serialization=True,
                          max_shard_size="10GB")
    inputs = make_inputs()
    # the f16 inputs upcast: exactly the values stored
    out = make_wan_fixtures.forward(model, {k: v.float() for k, v in inputs.items()},
                                    torch.float32)
    out64 = make_wan_fixtures.forward(model, {k: v.double() for k, v in inputs.items()},
                                      torch.float64)
    rel = ((out.double() - out64).abs().max() / out64.abs().max()).item()
    meta = {"model": "wan-long", "dtype": "f32", "weight_seed": WEIGHT_SEED,
            "input_seed": INPUT_SEED, "f32_vs_f64_rel": f"{rel:.3g}",
            "diffusers": diffusers.__version__, "torch": torch.__version__,
            "safetensors": safetensors.__version__}
    tensors = {**inputs, "output_f64": out64.float()}
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, "io-wan-long.safetensors"),
              metadata={k: str(v) for k, v in meta.items()})
    tokens = FRAMES * HEIGHT * WIDTH // 4
    print(f"wan-long: {tokens} video tokens, output {tuple(out.shape)}, diffusers f32 vs "
          f"f64: {rel:.3g} of max |out| {out64.abs().max().item():.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
