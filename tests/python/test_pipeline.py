"""test_pipeline.py — diffusers' FluxPipeline with its transformer served
by weftd, against the same pipeline with diffusers' own transformer.

A complete FluxPipeline is built from tiny configurations with seeded
random weights (tiny_flux.py: transformer, VAE, CLIP and T5 text encoders,
tokenizers made here; no model hub) and saved with save_pretrained. The
reference run uses diffusers' FluxTransformer2DModel in this process
(float32, CPU). Then weftd --devices cpu:4 loads the saved transformer
(tiny-flux/transformer under its model root) and FluxPipeline.from_pretrained
takes a WeftFluxTransformer in its place; the same generation (prompt,
seed, 4 steps, guidance 3.5, 32 x 32) runs on three meshes, re-sharded
live by reconfigure: tp = 2 (dp = 2), ulysses = 2 (dp = 2), ring = 2 x
tp = 2.

Tolerance (float32 throughout): the final latents within 1e-4 x max|ref|
(max abs difference over all elements), the decoded images within 1e-4
(pixels in [0, 1]). Also: one transformer call against diffusers'
forward (tuple and Transformer2DModelOutput), the refusals
(joint_attention_kwargs with a LoRA scale, through the pipeline;
controlnet residuals, save_pretrained, from_pretrained), attaching to the resident model,
a WeftFluxTransformer without a config, and one with precision="fp8"
(UnsupportedError from the CPU daemon at its forward).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Dict

import torch

import tiny_flux as tf
import weft
from common import Weftd

torch.set_num_threads(1)
LATENT_TOL = 1e-4       # x max|ref latents|
IMAGE_TOL = 1e-4        # absolute, pixels in [0, 1]
MESHES = [("tp=2", dict(dp=2, tp=2)), ("ulysses=2", dict(dp=2, ulysses=2)),
          ("ring=2 x tp=2", dict(ring=2, tp=2))]


class Pipeline(unittest.TestCase):
    work: Path
    built: Dict[str, Any]
    ref: Dict[str, Any]
    d: Weftd

    @classmethod
    def setUpClass(cls) -> None:
        cls.work = Path(tempfile.mkdtemp(prefix="weft-py-pipe-"))
        cls.built = tf.build(cls.work)
        cls.ref = tf.run(cls.built["pipe"])
        cls.d = Weftd("cpu:4", mesh="dp=2,tp=2", model_root=cls.built["root"])

    @classmethod
    def tearDownClass(cls) -> None:
        rc = cls.d.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        assert rc == 0, f"weftd exit status {rc}"

    def transformer(self, **kw: Any) -> Any:
        from weft.diffusers import WeftFluxTransformer
        return WeftFluxTransformer(self.d.endpoint, "tiny-flux", path=self.built["transformer_path"],
                                   model_root=self.built["root"], **kw)

    def test_1_pipeline_on_three_meshes(self) -> None:
        from diffusers import FluxPipeline
        wt = self.transformer()
        self.assertEqual(wt.model_info.state, "ready")
        self.assertEqual(wt.config.in_channels, 16)
        self.assertTrue(wt.config.guidance_embeds)
        pipe = FluxPipeline.from_pretrained(str(self.built["root"] / "tiny-flux"), transformer=wt)
        pipe.set_progress_bar_config(disable=True)
        self.assertIs(pipe.transformer, wt)
        ref_lat, ref_img = self.ref["latents"], self.ref["image"]
        scale = float(ref_lat.abs().max())
        print(f"reference: latents {tuple(ref_lat.shape)} max|.| {scale:.3f}, "
              f"image {ref_img.shape}")
        for label, mesh in MESHES:
            epoch = wt.client.reconfigure(**mesh)
            t0 = time.monotonic()
            got = tf.run(pipe)
            dt = time.monotonic() - t0
            self.assertEqual(wt.last_result.epoch if wt.last_result else -1, epoch)
            dl = float((got["latents"] - ref_lat).abs().max())
            di = float(abs(got["image"] - ref_img).max())
            print(f"mesh {label:14s}: latents max|diff| {dl:.3e} ({dl / scale:.2e} of "
                  f"max|ref|), image max|diff| {di:.3e}, 4 steps in {dt:.2f} s")
            self.assertLess(dl, LATENT_TOL * scale, label)
            self.assertLess(di, IMAGE_TOL, label)
        wt.close()

    def test_2_one_call_and_refusals(self) -> None:
        from diffusers.models.modeling_outputs import Transformer2DModelOutput
        from weft.diffusers import NotServedError, WeftFluxTransformer
        wt = self.transformer()           # attaches: already resident
        ref_t = self.built["transformer"]
        g = torch.Generator().manual_seed(3)
        args = dict(hidden_states=torch.randn(2, 64, 16, generator=g),
                    encoder_hidden_states=torch.randn(2, 8, 32, generator=g),
                    pooled_projections=torch.randn(2, 16, generator=g),
                    timestep=torch.tensor([0.3, 0.9]), img_ids=torch.randn(64, 3, generator=g),
                    txt_ids=torch.zeros(8, 3), guidance=torch.tensor([3.5, 3.5]))
        with torch.no_grad():
            want = ref_t(**args, return_dict=False)[0]
        got = wt(**args, return_dict=False)
        self.assertIsInstance(got, tuple)
        self.assertLess(float((got[0] - want).abs().max()), 1e-5 * float(want.abs().max()))
        out = wt(**args, joint_attention_kwargs={})
        self.assertIsInstance(out, Transformer2DModelOutput)
        self.assertTrue(torch.equal(out.sample, got[0]))
        # guidance as a 0-d tensor, 3-D ids (diffusers' deprecated forms)
        a3 = dict(args, img_ids=args["img_ids"][None], txt_ids=args["txt_ids"][None],
                  guidance=torch.tensor(3.5))
        self.assertTrue(torch.equal(wt(**a3, return_dict=False)[0], got[0]))

        with self.assertRaises(NotServedError) as cm:
            wt(**args, joint_attention_kwargs={"scale": 0.5})
        self.assertIn("scale", str(cm.exception))
        with self.assertRaises(NotServedError):
            wt(**args, controlnet_block_samples=[torch.zeros(2, 64, 64)])
        with self.assertRaises(NotServedError):
            wt(**args, controlnet_single_block_samples=[torch.zeros(2, 64, 64)])
        with self.assertRaises(ValueError):
            wt(**dict(args, guidance=None))
        with self.assertRaises(NotServedError):
            wt.save_pretrained(str(self.work / "nowhere"))
        with self.assertRaises(NotServedError):
            WeftFluxTransformer.from_pretrained(str(self.built["root"] / "tiny-flux"),
                                                subfolder="transformer")
        # the pipeline passes joint_attention_kwargs through: refused, not ignored
        from diffusers import FluxPipeline
        b = self.built["pipe"]
        pipe = FluxPipeline(scheduler=b.scheduler, vae=b.vae, text_encoder=b.text_encoder,
                            tokenizer=b.tokenizer, text_encoder_2=b.text_encoder_2,
                            tokenizer_2=b.tokenizer_2, transformer=wt)
        pipe.set_progress_bar_config(disable=True)
        with self.assertRaises(NotServedError):
            tf.run(pipe, steps=1, joint_attention_kwargs={"scale": 0.5})
        # what the daemon refuses comes back as its error
        with self.assertRaises(weft.BadArgumentError):
            wt(**dict(args, hidden_states=torch.randn(2, 63, 16), img_ids=torch.randn(63, 3)))
        # attach by name alone: the config comes from weftd (list_models' config)
        by_name = WeftFluxTransformer(self.d.endpoint, "tiny-flux")
        self.assertEqual(dict(by_name.config), dict(wt.config))
        self.assertEqual(by_name.model_info.config["in_channels"], 16)
        by_name.close()
        # precision="fp8" reaches the forward: a CPU daemon refuses it (29)
        fp8 = WeftFluxTransformer(self.d.endpoint, "tiny-flux", precision="fp8")
        with self.assertRaises(weft.UnsupportedError) as cm3:
            fp8(**args, return_dict=False)
        self.assertIn("precision fp8: device cpu:", cm3.exception.message)
        fp8.close()
        with self.assertRaises(ValueError):
            WeftFluxTransformer(self.d.endpoint, "tiny-flux", precision="fp16")
        # a config that differs from the daemon's is refused, naming the key
        with self.assertRaises(ValueError) as cm2:
            WeftFluxTransformer(self.d.endpoint, "tiny-flux",
                                config=dict(ref_t.config, num_layers=7))
        self.assertIn("num_layers", str(cm2.exception))
        # a model that is not there
        with self.assertRaises(ValueError) as cm2:
            WeftFluxTransformer(self.d.endpoint, "absent", config=ref_t.config)
        self.assertIn("holds no model", str(cm2.exception))
        with self.assertRaises(ValueError):     # the name is taken by another path
            WeftFluxTransformer(self.d.endpoint, "tiny-flux", path="elsewhere",
                                config=ref_t.config)
        wt.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2)
    print(f"test_pipeline: {time.monotonic() - t0:.1f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)
