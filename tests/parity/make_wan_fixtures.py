#!/usr/bin/env python3
"""make_wan_fixtures.py — the truth for weft's Wan forward, from diffusers.

Builds tiny WanTransformer3DModels with seeded random weights, saves each
with diffusers' save_pretrained (one single-file checkpoint), runs
diffusers' forward on fixed seeded inputs, and writes the inputs and the
outputs as a small safetensors file per model. weft's Wan tests load the
checkpoints as they are and compare their forward with these outputs.

Not run by CI: it needs torch + diffusers + safetensors (the project's
venv, ~/.cache/weft/venv-python, has them). The files it writes are
committed; rerun it only to change the fixtures, and commit the result.
A rerun rewrites every fixture with the same tensors (fixed seeds,
deterministic algorithms, the versions recorded in each io file; the
order of the io files' __metadata__ keys may change).

    python3 tests/parity/make_wan_fixtures.py [OUT_DIR] [--only NAME,...]
    # OUT_DIR default: tests/fixtures; NAME among the models below

Models (tests/fixtures/README.md has every tensor's shape):
  wan-tiny        Wan 2.1 text-to-video: 2 heads x 16 (inner 32), 2
                  layers, in / out 4 channels, text_dim 32, freq_dim 32,
                  ffn 64, patch (1, 2, 2), cross_attn_norm true; f32.
  wan-tiny-i2v    Wan 2.1 image-to-video: wan-tiny's sizes with in_channels
                  8 (the latent and the conditioning frames' channels, as
                  I2V's 36 = 16 + 20), text_dim 16, image_dim 24 and
                  added_kv_proj_dim 32 (= inner); f32.
  wan-tiny-flf2v  Wan 2.1 first-last-frame: wan-tiny-i2v plus
                  pos_embed_seq_len 10 (2 images x 5 tokens); f32.
  wan-tiny-ti2v   Wan 2.2 TI2V-5B's shape: in / out 12 channels, per-token
                  timesteps; f32.
  wan-tiny-bf16   wan-tiny's config and sizes with its own weights saved in
                  bf16, run as diffusers runs a bf16 checkpoint.

io-NAME-DTYPE.safetensors: the forward's inputs under weft's names (the
Wan schema, modelfiles/wan/wan_family.c) and diffusers' outputs. Batch 2
everywhere; every model but wan-tiny has 3 x 2 x 3 = 18 video tokens
(F = 3, H = 4, W = 6): 18 is not a multiple of 4, so 4-way sequence
shards are uneven. The image models have S_txt = 512 text tokens:
diffusers' WanAttnProcessor takes the last 512 tokens of the cross-
attention context as text and the rest as the image's (its hard-coded
text length, which every Wan pipeline pads the prompt to), so a fixture
with fewer text tokens would not be the computation the models run.
"""
import argparse
import os
import sys

import torch
import diffusers
import diffusers.utils.logging
import safetensors
from diffusers import WanTransformer3DModel
from safetensors.torch import load_file, save_file

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
# wan-tiny's inputs: a 2 x 2 x 3 grid of 12 video tokens (H and W differ so
# that a swapped axis shows), 8 text tokens
BATCH, FRAMES, HEIGHT, WIDTH = 2, 2, 4, 6
TXT_TOKENS = 8
WEIGHT_SEED = 2468
INPUT_SEED = 1357
TIMESTEPS = [999.0, 421.5]   # the pipeline passes the scheduler's (0..1000) as they are

# the other models: 18 video tokens (3 x 2 x 3)
FRAMES_18 = 3
TEXT_LEN = 512               # diffusers' WanAttnProcessor's text length
IMG_TOKENS = 5               # per image (Wan 2.1's CLIP gives 257)

I2V = dict(CONFIG, in_channels=8, text_dim=16, image_dim=24, added_kv_proj_dim=32)
FLF2V = dict(I2V, pos_embed_seq_len=2 * IMG_TOKENS)
TI2V = dict(CONFIG, in_channels=12, out_channels=12)

# name: config, weight seed, input seed, frames, text tokens, image tokens,
# per-token timesteps, bf16
MODELS = {
    "wan-tiny": (CONFIG, WEIGHT_SEED, INPUT_SEED, FRAMES, TXT_TOKENS, 0, False, False),
    "wan-tiny-i2v": (I2V, 3579, 4680, FRAMES_18, TEXT_LEN, IMG_TOKENS, False, False),
    "wan-tiny-flf2v": (FLF2V, 5791, 6802, FRAMES_18, TEXT_LEN, 2 * IMG_TOKENS, False, False),
    "wan-tiny-ti2v": (TI2V, 7913, 8024, FRAMES_18, TXT_TOKENS, 0, True, False),
    "wan-tiny-bf16": (CONFIG, 9135, 1246, FRAMES_18, TXT_TOKENS, 0, False, True),
}


def build_model(config=CONFIG, seed: int = WEIGHT_SEED, **overrides) -> WanTransformer3DModel:
    """`config` (with `overrides`) and every weight drawn from `seed`
    (tests/python/tiny_wan.py draws a second expert and an image-to-video
    one this way)."""
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**{**config, **overrides})
    # draw every parameter anew (scale 1 / sqrt(fan in)) so that every
    # weight moves the output; norm weights near 1
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "scale_shift_table" in name or "pos_embed" in name:
                p.copy_(0.3 * torch.randn_like(p))
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn_like(p) / fan_in ** 0.5)
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def make_inputs(config, seed, frames, txt, img, per_token) -> dict:
    """The inputs under weft's names (the Wan schema)."""
    g = torch.Generator().manual_seed(seed)
    x = {
        "hidden_states": torch.randn(BATCH, config["in_channels"], frames, HEIGHT, WIDTH,
                                     generator=g),
        "timestep": torch.tensor(TIMESTEPS)[:BATCH],
        "encoder_hidden_states": torch.randn(BATCH, txt, config["text_dim"], generator=g),
    }
    if img:
        # FLF2V: weft's (B, 2 x 5, image_dim), diffusers' (2 B, 5, image_dim) viewed
        x["encoder_hidden_states_image"] = torch.randn(BATCH, img, config["image_dim"],
                                                       generator=g)
    if per_token:
        # WanImageToVideoPipeline with expand_timesteps (Wan 2.2 TI2V): the
        # first latent frame is the conditioning image, its tokens at t = 0:
        # (mask[:, :, ::2, ::2] * t).flatten() per sample, mask 0 on frame 0
        pt, ph, pw = config["patch_size"]
        mask = torch.ones(frames // pt, HEIGHT // ph, WIDTH // pw)
        mask[0] = 0
        t = x.pop("timestep")
        x["timestep_tokens"] = torch.stack([(mask * t[b]).flatten() for b in range(BATCH)])
    return x


def diffusers_args(config, inputs) -> dict:
    """weft's names and shapes to diffusers' forward arguments."""
    a = dict(inputs)
    if "timestep_tokens" in a:
        a["timestep"] = a.pop("timestep_tokens")
    img = a.get("encoder_hidden_states_image")
    if img is not None and config.get("pos_embed_seq_len"):
        b, s, d = img.shape
        a["encoder_hidden_states_image"] = img.reshape(2 * b, s // 2, d)
    return a


def forward(model, config, inputs, dtype):
    """diffusers' forward with the activations in dtype (timesteps as given)."""
    cast = {k: v.to(dtype) if not k.startswith("timestep") else v for k, v in inputs.items()}
    with torch.no_grad():
        return model(**diffusers_args(config, cast), return_dict=False)[0]


def versions(name, dtype, seed, input_seed) -> dict:
    return {"model": name, "dtype": dtype, "weight_seed": seed, "input_seed": input_seed,
            "diffusers": diffusers.__version__, "torch": torch.__version__,
            "safetensors": safetensors.__version__}


def write_io(path, tensors, meta):
    save_file({k: v.contiguous() for k, v in tensors.items()}, path,
              metadata={k: str(v) for k, v in meta.items()})


def make_f32(out_dir, name, config, seed, input_seed, frames, txt, img, per_token):
    model = build_model(config, seed)
    model.save_pretrained(os.path.join(out_dir, name), safe_serialization=True,
                          max_shard_size="10GB")
    inputs = make_inputs(config, input_seed, frames, txt, img, per_token)
    out = forward(model, config, inputs, torch.float32)
    out64 = forward(model.double(), config, {k: v.double() for k, v in inputs.items()},
                    torch.float64)
    err = (out.double() - out64).abs().max().item()
    write_io(os.path.join(out_dir, f"io-{name}-f32.safetensors"),
             {**inputs, "output": out, "output_f64": out64.float()},
             versions(name, "f32", seed, input_seed))
    print(f"{name}: output {tuple(out.shape)}, |f32 - f64| max {err:.3g}, "
          f"max |out| {out64.abs().max().item():.3g}")
    return model


def load_checkpoint(d, bf16):
    """The checkpoint in d as diffusers' from_pretrained(d, torch_dtype=...)
    holds it: with bf16, every parameter in bf16 except those of its
    _keep_in_fp32_modules (a module name equal to one of the parameter
    name's dot-separated parts, as its loader matches them), which are
    upcast to f32; without, every parameter upcast to f32. Done by hand:
    from_pretrained's keep-in-f32 path needs accelerate, which the venv
    lacks; the values are the same (bf16 to f32 is exact)."""
    model = WanTransformer3DModel.from_config(WanTransformer3DModel.load_config(d))
    model.load_state_dict(load_file(os.path.join(d, "diffusion_pytorch_model.safetensors")))
    keep = WanTransformer3DModel._keep_in_fp32_modules
    kept = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not bf16 or any(m in name.split(".") for m in keep):
                kept.append(name)
            else:
                p.data = p.data.to(torch.bfloat16)
    return model.eval(), kept


def make_bf16(out_dir, name, config, seed, input_seed, frames, txt, img, per_token):
    """Saved in bf16; diffusers' output as it runs a bf16 checkpoint loaded
    with torch_dtype=bf16 (load_checkpoint), and the same checkpoint upcast
    to f32 and to f64 (what weft's f32 host copy computes)."""
    d = os.path.join(out_dir, name)
    build_model(config, seed).to(torch.bfloat16).save_pretrained(
        d, safe_serialization=True, max_shard_size="10GB")
    model, kept = load_checkpoint(d, True)
    inputs = make_inputs(config, input_seed, frames, txt, img, per_token)
    inputs = {k: v.to(torch.bfloat16) if not k.startswith("timestep") else v
              for k, v in inputs.items()}
    out = forward(model, config, inputs, torch.bfloat16)
    up, _ = load_checkpoint(d, False)
    out32 = forward(up, config, inputs, torch.float32)
    out64 = forward(up.double(), config, inputs, torch.float64)
    err = (out.double() - out64).abs().max().item()
    err32 = (out32.double() - out64).abs().max().item()
    write_io(os.path.join(out_dir, f"io-{name}.safetensors"),
             {**inputs, "output": out, "output_f32": out32, "output_f64": out64.float()},
             versions(name, "bf16", seed, input_seed))
    print(f"{name}: output {tuple(out.shape)} {out.dtype}, |bf16 - f64| max {err:.3g}, "
          f"|f32 - f64| max {err32:.3g}, max |out| {out64.abs().max().item():.3g}")
    print(f"  kept in f32 at load: {', '.join(kept)}")
    return model


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?", default=os.path.join(here, "..", "fixtures"))
    ap.add_argument("--only", default=",".join(MODELS), help="comma-separated model names")
    ap.add_argument("--tensors", action="store_true", help="print each state_dict")
    args = ap.parse_args()
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in MODELS]
    if unknown:
        ap.error(f"unknown model {unknown[0]} (models: {', '.join(MODELS)})")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    diffusers.utils.logging.set_verbosity_error()
    for name in only:
        config, seed, input_seed, frames, txt, img, per_token, bf16 = MODELS[name]
        make = make_bf16 if bf16 else make_f32
        model = make(args.out_dir, name, config, seed, input_seed, frames, txt, img, per_token)
        if args.tensors:
            for k, v in model.state_dict().items():
                print(f"  {k} {tuple(v.shape)} {v.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
