"""tiny_wan.py — complete Wan pipelines from tiny configurations with
seeded random weights, made here (no model hub): WanPipeline (Wan 2.1
text-to-video, and Wan 2.2's two experts with a boundary_ratio) and
WanImageToVideoPipeline (Wan 2.2's form: no image encoder, the image's
latents concatenated to the video's); the transformers, an
AutoencoderKLWan, a UMT5 text encoder and its tokenizer (tiny_flux.py's
T5TokenizerFast), and Wan's UniPC flow-matching scheduler settings.

Used by test_wan_pipeline.py. Sizes:
  transformer: tests/fixtures/wan-tiny as it is (2 heads x 16, 2 layers,
    in / out 4 channels, text_dim 32, patch (1, 2, 2): written by
    tests/parity/make_wan_fixtures.py); Wan 2.2's low-noise expert
    (transformer_2) the same configuration with weights from another
    seed (make_wan_fixtures.build_model); the image-to-video one the
    same with in_channels 2 x 4 + 4 = 12 (latents, the first frame's
    mask over the 4 frames a latent frame holds, the image's latents).
  VAE: AutoencoderKLWan with base_dim 3, four levels (spatial scale 8,
    temporal 4, as Wan's), z_dim 4 (= the transformer's in_channels).
  text: UMT5 d_model 32 (= text_dim), one layer; MAX_SEQ text tokens.
  video: HEIGHT x WIDTH x FRAMES = 32 x 48 x 5 pixels is a latent 2 x 4
    x 6, 2 x 2 x 3 = 12 video tokens (the fixture's grid: F, H, W
    differ so that a swapped axis shows); 12 divides the ring x ulysses
    degrees 2 and 4.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Dict

import torch

from common import FIXTURES, SOURCE
from tiny_flux import PROMPT, t5_tokenizer

HEIGHT, WIDTH, FRAMES = 32, 48, 5
MAX_SEQ = 8                      # UMT5 tokens (max_sequence_length)
NEGATIVE = "big dog"
GUIDANCE = 5.0                   # WanPipeline's default: two calls per step
STEPS = 4
# UniPC's 4 timesteps with flow_shift 3 are 999, 900, 750, 500: a boundary
# of 0.8 x 1000 gives two steps to each expert
BOUNDARY_RATIO = 0.8
EXPERT2_SEED = 8642
I2V_SEED = 9753


def build(work: Path, seed: int = 4321) -> Dict[str, Any]:
    """Every component, seeded; the Wan 2.1 pipeline saved under
    work/root/tiny-wan (WanPipeline.save_pretrained: its transformer in
    tiny-wan/transformer), Wan 2.2's second expert under
    work/root/tiny-wan-2/transformer_2, the image-to-video transformer
    under work/root/tiny-wan-i2v/transformer. Returns the pipelines
    (pipe: 2.1, pipe22: 2.2 with boundary_ratio, pipe_i2v), the image
    for image-to-video, and the model paths under root."""
    from diffusers import (AutoencoderKLWan, UniPCMultistepScheduler, WanImageToVideoPipeline,
                           WanPipeline, WanTransformer3DModel)
    from PIL import Image
    from safetensors.torch import load_file
    from transformers import UMT5Config, UMT5EncoderModel
    sys.path.insert(0, str(SOURCE / "tests" / "parity"))
    import make_wan_fixtures

    tok = t5_tokenizer(work / "umt5-tokenizer")
    # the fixture read as it is (from_pretrained would want `accelerate`
    # for this class's fp32-kept modules; the venv has none)
    fx = FIXTURES / "wan-tiny"
    transformer = WanTransformer3DModel.from_config(WanTransformer3DModel.load_config(str(fx)))
    transformer.load_state_dict(load_file(str(fx / "diffusion_pytorch_model.safetensors")))
    transformer.eval()
    transformer_2 = make_wan_fixtures.build_model(seed=EXPERT2_SEED)
    z = transformer.config.in_channels
    i2v = make_wan_fixtures.build_model(seed=I2V_SEED, in_channels=2 * z + 4, out_channels=z)
    torch.manual_seed(seed)
    text_encoder = UMT5EncoderModel(UMT5Config(
        vocab_size=len(tok), d_model=transformer.config.text_dim, d_kv=8,
        d_ff=2 * transformer.config.text_dim, num_layers=1, num_heads=4,
        relative_attention_num_buckets=8, dropout_rate=0.0, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id, decoder_start_token_id=0)).eval()
    torch.manual_seed(seed + 1)
    vae = AutoencoderKLWan(base_dim=3, z_dim=z, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True],
                           latents_mean=[0.1 * i for i in range(z)],
                           latents_std=[1.0 + 0.25 * i for i in range(z)]).eval()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    pipe = WanPipeline(tokenizer=tok, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer)
    pipe22 = WanPipeline(tokenizer=tok, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                         transformer=transformer, transformer_2=transformer_2,
                         boundary_ratio=BOUNDARY_RATIO)
    pipe_i2v = WanImageToVideoPipeline(tokenizer=tok, text_encoder=text_encoder, vae=vae,
                                       scheduler=scheduler, transformer=i2v)
    for p in (pipe, pipe22, pipe_i2v):
        p.set_progress_bar_config(disable=True)
    root = work / "root"
    pipe.save_pretrained(str(root / "tiny-wan"))
    transformer_2.save_pretrained(str(root / "tiny-wan-2" / "transformer_2"))
    i2v.save_pretrained(str(root / "tiny-wan-i2v" / "transformer"))
    g = torch.Generator().manual_seed(seed + 2)
    pixels = (torch.rand(HEIGHT, WIDTH, 3, generator=g) * 255).to(torch.uint8).numpy()
    # diffusers 0.42.1's WanImageToVideoPipeline cleans its prompts with
    # ftfy without checking that ftfy is installed (WanPipeline checks),
    # and the venv has none: image-to-video gets WanPipeline's embeddings
    # of the same prompts (same tokenizer and text encoder)
    with torch.no_grad():
        pe, npe = pipe.encode_prompt(prompt=PROMPT, negative_prompt=NEGATIVE,
                                     do_classifier_free_guidance=True,
                                     max_sequence_length=MAX_SEQ)
    i2v_kw = dict(image=Image.fromarray(pixels), prompt_embeds=pe, negative_prompt_embeds=npe)
    return dict(pipe=pipe, pipe22=pipe22, pipe_i2v=pipe_i2v, transformer=transformer,
                transformer_2=transformer_2, i2v=i2v, i2v_kw=i2v_kw,
                root=root, transformer_path="tiny-wan/transformer",
                transformer_2_path="tiny-wan-2/transformer_2",
                i2v_path="tiny-wan-i2v/transformer")


def run(pipe: Any, output_type: str = "np", steps: int = STEPS, seed: int = 7,
        guidance: float = GUIDANCE, **kw: Any) -> torch.Tensor:
    """One generation: its `frames` (output_type "latent": the final
    latents (1, C, F, H, W); "np": the decoded video (1, FRAMES, HEIGHT,
    WIDTH, 3) in [0, 1], as a tensor). The prompts PROMPT and NEGATIVE,
    unless kw has their embeddings (prompt_embeds, image-to-video's
    i2v_kw); guidance 1.0 is one transformer call per step (no CFG)."""
    if "prompt_embeds" not in kw:
        kw = dict(kw, prompt=PROMPT, negative_prompt=NEGATIVE)
    out = pipe(height=HEIGHT, width=WIDTH,
               num_frames=FRAMES, num_inference_steps=steps, guidance_scale=guidance,
               max_sequence_length=MAX_SEQ, generator=torch.Generator().manual_seed(seed),
               output_type=output_type, **kw)
    return torch.as_tensor(out.frames)


def run_both(pipe: Any, **kw: Any) -> Dict[str, Any]:
    """The final latents (output_type="latent") and the decoded video
    (output_type="np") of the same generation, and the seconds both took."""
    t0 = time.monotonic()
    lat = run(pipe, "latent", **kw)
    video = run(pipe, "np", **kw)
    return dict(latents=lat, video=video, s=time.monotonic() - t0)


if __name__ == "__main__":     # a look by hand: python tiny_wan.py DIR
    torch.set_num_threads(1)
    r = build(Path(sys.argv[1]))
    for name in ("pipe", "pipe22", "pipe_i2v"):
        res = run_both(r[name], **(r["i2v_kw"] if name == "pipe_i2v" else {}))
        print(name, {k: (tuple(v.shape), float(v.abs().max())) for k, v in res.items()
                     if k != "s"}, f"{res['s']:.2f} s")
