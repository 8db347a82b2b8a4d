"""tiny_flux.py — a complete FluxPipeline from tiny configurations with
seeded random weights, made here (no model hub): the FLUX transformer,
an AutoencoderKL, CLIP and T5 text encoders, and their tokenizers (a
CLIPTokenizer from a vocab.json / merges.txt written here, a
T5TokenizerFast from a tokenizer.json built with the `tokenizers`
library), and FLUX.1-dev's flow-matching scheduler settings.

Used by test_pipeline.py and bench/python_step.py. Sizes (SPECS):
  tiny (the test's): transformer 4 heads x 16 (hidden 64, MLP 256), one
    double and one single block, in_channels 16, guidance embeddings; T5
    d_model 32, CLIP hidden 16; VAE 2 levels (scale factor 2), 4 latent
    channels. A 32 x 32 image is 64 image tokens (36 x 36: 81, which no
    ring x ulysses degree divides); max_sequence_length 8 text tokens.
  a (bench/python_step.py): bench/model_cpu_torch.py's size a as the
    transformer (4 heads x 128, 2 + 4 blocks, in_channels 64, no guidance
    embeddings), a 64 x 64 image (256 image tokens), 64 text tokens, T5
    d_model 512, CLIP hidden 256, VAE with 16 latent channels.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Optional

import torch

HEIGHT = WIDTH = 32
MAX_SEQ = 8                      # T5 tokens (max_sequence_length)
CLIP_LEN = 16                    # CLIP tokenizer model_max_length
PROMPT = "a tiny red cat sits on a blue mat"
WORDS = ["a", "tiny", "red", "cat", "sits", "on", "blue", "mat", "dog", "big"]

TRANSFORMER = dict(patch_size=1, in_channels=16, out_channels=None, num_layers=1,
                   num_single_layers=1, attention_head_dim=16, num_attention_heads=4,
                   joint_attention_dim=32, pooled_projection_dim=16, guidance_embeds=True,
                   axes_dims_rope=(4, 6, 6))
SPECS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(transformer=TRANSFORMER, height=HEIGHT, width=WIDTH, max_seq=MAX_SEQ),
    "a": dict(transformer=dict(patch_size=1, in_channels=64, out_channels=None, num_layers=2,
                               num_single_layers=4, attention_head_dim=128,
                               num_attention_heads=4, joint_attention_dim=512,
                               pooled_projection_dim=256, guidance_embeds=False,
                               axes_dims_rope=(16, 56, 56)),
              height=64, width=64, max_seq=64),
}


def _clip_tokenizer(d: Path) -> Any:
    from transformers import CLIPTokenizer
    d.mkdir(parents=True, exist_ok=True)
    # byte-level BPE: every letter alone and word-final ("x</w>"), and the
    # merges that build the prompt's words
    vocab: Dict[str, int] = {}
    for tok in ["<|startoftext|>", "<|endoftext|>"]:
        vocab[tok] = len(vocab)
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    merges = []
    for w in WORDS:
        cur = w[0] if len(w) > 1 else w + "</w>"
        for i, c in enumerate(w[1:], start=1):
            nxt = c + "</w>" if i == len(w) - 1 else c
            merges.append(f"{cur} {nxt}")
            cur = cur + nxt
            vocab.setdefault(cur, len(vocab))
    merges = list(dict.fromkeys(merges))
    (d / "vocab.json").write_text(json.dumps(vocab))
    (d / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    tok = CLIPTokenizer(vocab=str(d / "vocab.json"), merges=str(d / "merges.txt"),
                        model_max_length=CLIP_LEN)
    return tok


def t5_tokenizer(d: Path) -> Any:
    """A T5TokenizerFast over WORDS (a Unigram model written to
    d/tokenizer.json), appending </s> as T5's does (also WanPipeline's
    UMT5 tokenizer, tiny_wan.py)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import T5TokenizerFast
    d.mkdir(parents=True, exist_ok=True)
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [("\u2581" + w, -1.0 - 0.1 * i) for i, w in enumerate(WORDS)]
    vocab += [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz"]
    tk = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)])
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tk.post_processor = processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"], special_tokens=[("</s>", 1)])
    tk.save(str(d / "tokenizer.json"))
    return T5TokenizerFast(tokenizer_file=str(d / "tokenizer.json"), eos_token="</s>",
                           unk_token="<unk>", pad_token="<pad>", extra_ids=0,
                           model_max_length=512)


def _reinit(model: torch.nn.Module) -> None:
    # every weight drawn anew (as tests/parity/make_fixtures.py does), so
    # that each one matters and none starts at zero
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() > 1:
                p.copy_(torch.randn_like(p) / (p.shape[-1] ** 0.5))
            else:
                p.copy_(0.1 * torch.randn_like(p))


def build(work: Path, seed: int = 1234, size: str = "tiny") -> Dict[str, Any]:
    """Every component of SPECS[size], seeded; the whole pipeline is saved
    under work/root/tiny-flux (FluxPipeline.save_pretrained), the
    transformer thus in work/root/tiny-flux/transformer."""
    from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline,
                           FluxTransformer2DModel)
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    spec = SPECS[size]
    tcfg = spec["transformer"]
    tok = _clip_tokenizer(work / "clip-tokenizer")
    tok2 = t5_tokenizer(work / "t5-tokenizer")
    torch.manual_seed(seed)
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tok), hidden_size=tcfg["pooled_projection_dim"],
        intermediate_size=2 * tcfg["pooled_projection_dim"], num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=CLIP_LEN, projection_dim=16,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id)).eval()
    torch.manual_seed(seed + 1)
    t5 = T5EncoderModel(T5Config(
        vocab_size=len(tok2), d_model=tcfg["joint_attention_dim"], d_kv=8,
        d_ff=2 * tcfg["joint_attention_dim"], num_layers=1, num_heads=4,
        relative_attention_num_buckets=8, dropout_rate=0.0, pad_token_id=tok2.pad_token_id,
        eos_token_id=tok2.eos_token_id, decoder_start_token_id=0)).eval()
    torch.manual_seed(seed + 2)
    vae = AutoencoderKL(in_channels=3, out_channels=3,
                        down_block_types=["DownEncoderBlock2D"] * 2,
                        up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[8, 16],
                        latent_channels=tcfg["in_channels"] // 4, layers_per_block=1,
                        norm_num_groups=4, sample_size=spec["height"], scaling_factor=0.3611,
                        shift_factor=0.1159,
                        use_quant_conv=False, use_post_quant_conv=False).eval()
    torch.manual_seed(seed + 3)
    transformer = FluxTransformer2DModel(**tcfg).eval()
    _reinit(transformer)
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
        max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)
    pipe = FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=clip, tokenizer=tok,
                        text_encoder_2=t5, tokenizer_2=tok2, transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    root = work / "root"
    pipe.save_pretrained(str(root / "tiny-flux"))
    return dict(pipe=pipe, transformer=transformer, root=root,
                transformer_path="tiny-flux/transformer", spec=spec)


def with_transformer(pipe: Any, transformer: Any) -> Any:
    """A FluxPipeline of pipe's components with another transformer (a
    weft drop-in beside diffusers' own), its progress bar off."""
    from diffusers import FluxPipeline
    out = FluxPipeline(scheduler=pipe.scheduler, vae=pipe.vae, text_encoder=pipe.text_encoder,
                       tokenizer=pipe.tokenizer, text_encoder_2=pipe.text_encoder_2,
                       tokenizer_2=pipe.tokenizer_2, transformer=transformer)
    out.set_progress_bar_config(disable=True)
    return out


def run(pipe: Any, steps: int = 4, seed: int = 7, spec: Optional[Dict[str, Any]] = None,
        **kw: Any) -> Dict[str, Any]:
    """One generation: the final (packed) latents, the decoded image
    (numpy, (1, H, W, 3) in [0, 1]) and the time.perf_counter() at the end
    of each step (step_ends)."""
    spec = spec or SPECS["tiny"]
    seen: Dict[str, Any] = {"step_ends": []}

    def keep(p: Any, i: int, t: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        seen["step_ends"].append(time.perf_counter())
        seen["latents"] = kwargs["latents"].clone()
        return {}

    out = pipe(PROMPT, height=spec["height"], width=spec["width"], num_inference_steps=steps,
               guidance_scale=3.5, max_sequence_length=spec["max_seq"],
               generator=torch.Generator().manual_seed(seed), output_type="np",
               callback_on_step_end=keep, callback_on_step_end_tensor_inputs=["latents"], **kw)
    return dict(latents=seen["latents"], image=out.images, step_ends=seen["step_ends"])


if __name__ == "__main__":     # a look by hand: python tiny_flux.py DIR
    import sys
    torch.set_num_threads(1)
    r = build(Path(sys.argv[1]))
    res = run(r["pipe"])
    print({k: (tuple(v.shape), float(abs(v).max())) for k, v in res.items()
           if k != "step_ends"})
