"""test_wan_pipeline.py — diffusers' WanPipeline with its transformer served
by weftd, against the same pipeline with diffusers' own transformer.

A complete WanPipeline is built from tiny configurations with seeded
random weights (tiny_wan.py: the wan-tiny fixture as transformer, a
second expert for Wan 2.2, AutoencoderKLWan, UMT5 text encoder and
tokenizer made here; no model hub) and saved with save_pretrained. The
reference runs use diffusers' WanTransformer3DModel in this process
(float32, CPU). Then weftd --devices cpu:2 loads the saved transformer
(tiny-wan/transformer under its model root) and WanPipeline.from_pretrained
takes a WeftWanTransformer in its place; the same generation (prompt and
negative prompt, seed, 4 UniPC steps, guidance 5, 5 frames of 32 x 48)
runs on the meshes below, re-sharded live by reconfigure, each as final
latents (output_type="latent") and decoded video (output_type="np").

Wan 2.2: a second model (tiny-wan-2, other weights) as transformer_2 with
boundary_ratio 0.8 (two steps each), two WeftWanTransformers against the
pipeline with diffusers' two experts. Image-to-video in Wan 2.2's form
(WanImageToVideoPipeline without an image encoder: a transformer of
in_channels 12 takes the image's latents beside the video's) likewise,
on ulysses = 2; Wan 2.2 TI2V's form (expand_timesteps: the first frame's
tokens at timestep 0, sent as the schema's timestep_tokens) likewise.

Tolerance (float32 throughout): the final latents within 1e-4 x max|ref|
(max abs difference over all elements), the decoded video within 1e-4
(pixels in [0, 1]). weftd's forward matches diffusers' to about 3e-7 of
max|out| per call (test_wan_forward's bound is 1e-5 against float64); 8
calls with classifier-free guidance 5 (which amplifies a difference of
the two calls 5 x) and UniPC's multistep update carry that to 4e-7 ..
7e-7 of max|latents| and 2e-7 in the video here (2026-12-02); 1e-4
leaves room for other BLAS builds and thread counts and still fails any
real error (a wrong token order, timestep or expert moves the latents by
O(1): the two experts' latents differ by 0.4 of max|latents|).

Also: one transformer call against diffusers' forward on the fixture's
inputs (tuple and Transformer2DModelOutput; timestep as int64, as a 0-d
tensor, as a per-token (B, S) of equal values), the config the pipeline
reads (in_channels, patch_size, image_dim, qk_norm, eps), a per-token
timestep that varies against diffusers' forward with it, the refusals
(attention_kwargs other than scale 1.0 through the pipeline,
encoder_hidden_states_image to a text-to-video model, save_pretrained,
a config that differs, a model of another family), what is sent for
each timestep form and for FLF2V's image tokens; num_videos_per_prompt
with CFG and batch-1 text embeddings and timestep against diffusers,
from_pretrained taken by WanPipeline.from_pretrained without diffusers'
"Expected types" warning, a bf16 move; the image-to-video,
first-last-frame and per-token-timestep fixtures served through the
adapter with diffusers' own argument forms.
"""
from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Dict

import torch
from safetensors.torch import load_file

import tiny_wan as tw
import weft
from common import FIXTURES, Weftd

torch.set_num_threads(1)
LATENT_TOL = 1e-4       # x max|ref latents|
VIDEO_TOL = 1e-4        # absolute, pixels in [0, 1]
ONE_CALL_TOL = 1e-5     # x max|ref|, one forward (test_wan_forward's bound)
# (label, reconfigure's degrees); cpu:2: dp = 2 is one device per job
MESHES = [("tp=1", dict(dp=2)), ("ulysses=2", dict(ulysses=2)), ("ring=2", dict(ring=2)),
          ("tp=2", dict(tp=2))]


def max_diff(a: Any, b: Any) -> float:
    return float((torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max())


class WanPipelineTest(unittest.TestCase):
    work: Path
    built: Dict[str, Any]
    ref: Dict[str, Any]
    d: Weftd

    @classmethod
    def setUpClass(cls) -> None:
        cls.work = Path(tempfile.mkdtemp(prefix="weft-py-wan-"))
        cls.built = tw.build(cls.work)
        cls.ref = tw.run_both(cls.built["pipe"])
        cls.d = Weftd("cpu:2", mesh="dp=2", model_root=cls.built["root"])

    @classmethod
    def tearDownClass(cls) -> None:
        rc = cls.d.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        assert rc == 0, f"weftd exit status {rc}"

    def transformer(self, name: str = "tiny-wan", key: str = "transformer_path",
                    **kw: Any) -> Any:
        from weft.diffusers import WeftWanTransformer
        return WeftWanTransformer(self.d.endpoint, name, path=self.built[key],
                                  model_root=self.built["root"], **kw)

    def check(self, label: str, got: Dict[str, Any], ref: Dict[str, Any]) -> None:
        scale = float(ref["latents"].abs().max())
        dl = max_diff(got["latents"], ref["latents"])
        dv = max_diff(got["video"], ref["video"])
        print(f"{label:16s}: latents max|diff| {dl:.3e} ({dl / scale:.2e} of max|ref| "
              f"{scale:.3f}), video max|diff| {dv:.3e}; 2 x {tw.STEPS} steps in {got['s']:.2f} s")
        self.assertEqual(tuple(got["latents"].shape), tuple(ref["latents"].shape), label)
        self.assertEqual(tuple(got["video"].shape), tuple(ref["video"].shape), label)
        self.assertLess(dl, LATENT_TOL * scale, label)
        self.assertLess(dv, VIDEO_TOL, label)

    def test_1_pipeline_on_meshes(self) -> None:
        from diffusers import WanPipeline
        wt = self.transformer()
        self.assertEqual(wt.model_info.state, "ready")
        self.assertEqual(wt.model_info.family, "wan")
        pipe = WanPipeline.from_pretrained(str(self.built["root"] / "tiny-wan"), transformer=wt)
        pipe.set_progress_bar_config(disable=True)
        self.assertIs(pipe.transformer, wt)
        print(f"reference: latents {tuple(self.ref['latents'].shape)}, video "
              f"{tuple(self.ref['video'].shape)} in [{float(self.ref['video'].min()):.3f}, "
              f"{float(self.ref['video'].max()):.3f}]")
        ran = []
        for label, mesh in MESHES:
            epoch = wt.client.reconfigure(**mesh)
            got = tw.run_both(pipe)
            self.assertEqual(wt.last_result.epoch if wt.last_result else -1, epoch)
            self.check(label, got, self.ref)
            ran.append(label)
        self.assertEqual(ran, [m[0] for m in MESHES])
        wt.client.reconfigure(dp=2)
        wt.close()

    def test_2_wan22_two_experts(self) -> None:
        from diffusers import WanPipeline
        b = self.built
        ref = tw.run_both(b["pipe22"])
        w1 = self.transformer()
        w2 = self.transformer("tiny-wan-2", "transformer_2_path")
        w2.client.reconfigure(ulysses=2)
        pipe = WanPipeline(tokenizer=b["pipe"].tokenizer, text_encoder=b["pipe"].text_encoder,
                           vae=b["pipe"].vae, scheduler=b["pipe"].scheduler, transformer=w1,
                           transformer_2=w2, boundary_ratio=tw.BOUNDARY_RATIO)
        pipe.set_progress_bar_config(disable=True)
        got = tw.run_both(pipe)
        # each expert served its steps: both models ran jobs
        self.assertIsNotNone(w1.last_result)
        self.assertIsNotNone(w2.last_result)
        self.check("wan 2.2 experts", got, ref)
        # the experts differ: the 2.1 pipeline's latents are far from these
        self.assertGreater(max_diff(self.ref["latents"], ref["latents"]),
                           100 * LATENT_TOL * float(ref["latents"].abs().max()))
        w1.client.reconfigure(dp=2)
        w1.close()
        w2.close()

    def test_3_image_to_video(self) -> None:
        from diffusers import WanImageToVideoPipeline
        from weft.diffusers import NotServedError
        b = self.built
        ref = tw.run_both(b["pipe_i2v"], **b["i2v_kw"])
        wi = self.transformer("tiny-wan-i2v", "i2v_path")
        self.assertEqual((wi.config.in_channels, wi.config.out_channels), (12, 4))
        wi.client.reconfigure(ulysses=2)
        t = b["pipe"]
        pipe = WanImageToVideoPipeline(tokenizer=t.tokenizer, text_encoder=t.text_encoder,
                                       vae=t.vae, scheduler=t.scheduler, transformer=wi)
        pipe.set_progress_bar_config(disable=True)
        self.check("i2v ulysses=2", tw.run_both(pipe, **b["i2v_kw"]), ref)
        # TI2V: the latents' first frame is the image's, its tokens at t = 0
        # (per-token timesteps, sent as timestep_tokens)
        def ti2v_pipe(transformer: Any) -> Any:
            p = WanImageToVideoPipeline(tokenizer=t.tokenizer, text_encoder=t.text_encoder,
                                        vae=t.vae, scheduler=t.scheduler,
                                        transformer=transformer, expand_timesteps=True)
            p.set_progress_bar_config(disable=True)
            return p
        ref_ti2v = tw.run_both(ti2v_pipe(b["transformer"]), **b["i2v_kw"])
        wt = self.transformer()
        self.check("ti2v ulysses=2", tw.run_both(ti2v_pipe(wt), **b["i2v_kw"]), ref_ti2v)
        wi.client.reconfigure(dp=2)
        wi.close()
        wt.close()

    def test_4_one_call_config_and_refusals(self) -> None:
        from diffusers.models.modeling_outputs import Transformer2DModelOutput
        from weft.diffusers import NotServedError, WeftFluxTransformer, WeftWanTransformer
        wt = self.transformer()                 # attaches: already resident
        ref_t = self.built["transformer"]
        cfg = wt.config
        self.assertEqual((cfg.in_channels, cfg.out_channels, tuple(cfg.patch_size)),
                         (4, 4, (1, 2, 2)))
        self.assertIsNone(cfg.image_dim)
        self.assertEqual(cfg.qk_norm, "rms_norm_across_heads")
        self.assertEqual(cfg.eps, 1e-6)         # from config.json: weftd reports no eps
        self.assertEqual(wt.dtype, torch.float32)

        io = load_file(str(FIXTURES / "io-wan-tiny-f32.safetensors"))
        args = {k: io[k] for k in ("hidden_states", "timestep", "encoder_hidden_states")}
        with torch.no_grad():
            want = ref_t(**args, return_dict=False)[0]
        scale = float(want.abs().max())
        got = wt(**args, return_dict=False)
        self.assertIsInstance(got, tuple)
        d1 = max_diff(got[0], want)
        d64 = max_diff(got[0], io["output_f64"])
        print(f"one call: max|weft - diffusers f32| {d1:.3e}, max|weft - diffusers f64| "
              f"{d64:.3e} ({d64 / scale:.2e} of max|ref|)")
        self.assertLess(d64, ONE_CALL_TOL * scale)
        self.assertLess(d1, 2 * ONE_CALL_TOL * scale)
        out = wt(**args, attention_kwargs={})
        self.assertIsInstance(out, Transformer2DModelOutput)
        self.assertTrue(torch.equal(out.sample, got[0]))
        self.assertTrue(torch.equal(wt(**args, attention_kwargs={"scale": 1.0}).sample,
                                    got[0]))
        # the pipeline's UniPC timesteps are int64; one timestep for the
        # batch as a 0-d tensor; Wan 2.2 TI2V's per-token form with one
        # value per row (its text-to-video steps): the same forward
        a1 = dict(args, hidden_states=args["hidden_states"][:1],
                  encoder_hidden_states=args["encoder_hidden_states"][:1])
        t999 = wt(**dict(a1, timestep=torch.tensor([999])), return_dict=False)[0]
        # timestep[0] is 999.0; B = 1 against B = 2 is not bitwise the same
        # arithmetic (matrix products blocked differently)
        self.assertLess(max_diff(t999, want[:1]), ONE_CALL_TOL * scale)
        self.assertTrue(torch.equal(wt(**dict(a1, timestep=torch.tensor(999.0))).sample, t999))
        s = 2 * 2 * 3
        per_token = torch.full((1, s), 999.0)
        self.assertTrue(torch.equal(wt(**dict(a1, timestep=per_token)).sample, t999))

        with self.assertRaises(NotServedError) as cm:
            wt(**args, attention_kwargs={"scale": 0.5})
        self.assertIn("scale", str(cm.exception))
        with self.assertRaises(NotServedError):
            wt(**args, attention_kwargs={"ip_adapter_masks": None})
        with self.assertRaises(NotServedError) as cm:
            wt(**args, encoder_hidden_states_image=torch.zeros(2, 257, 16))
        self.assertIn("encoder_hidden_states_image", str(cm.exception))
        varying = per_token.clone()
        varying[0, :6] = 0.0                    # TI2V: the first frame's tokens at t = 0
        with torch.no_grad():
            want_v = ref_t(**dict(a1, timestep=varying), return_dict=False)[0]
        got_v = wt(**dict(a1, timestep=varying), return_dict=False)[0]
        self.assertGreater(max_diff(want_v, t999), 100 * ONE_CALL_TOL * scale)
        self.assertLess(max_diff(got_v, want_v), 2 * ONE_CALL_TOL * scale)
        with self.assertRaises(NotServedError):
            wt.save_pretrained(str(self.work / "nowhere"))
        # through the pipeline: attention_kwargs reach the transformer, refused
        b = self.built
        from diffusers import WanPipeline
        pipe = WanPipeline(tokenizer=b["pipe"].tokenizer, text_encoder=b["pipe"].text_encoder,
                           vae=b["pipe"].vae, scheduler=b["pipe"].scheduler, transformer=wt)
        pipe.set_progress_bar_config(disable=True)
        with self.assertRaises(NotServedError):
            tw.run(pipe, "latent", steps=1, attention_kwargs={"scale": 0.5})
        # what the daemon refuses comes back as its error, where the result
        # is first used (overlapped forwards): a height that is not a
        # multiple of the patch
        refused = wt(**dict(args, hidden_states=torch.randn(2, 4, 2, 5, 6))).sample
        with self.assertRaises(weft.RequestError) as cm3:
            refused.sum()
        self.assertIn("patch_size", cm3.exception.message)
        # attach by name alone: the config comes from weftd, eps as diffusers'
        # default (1e-6, the fixture's too)
        by_name = WeftWanTransformer(self.d.endpoint, "tiny-wan")
        self.assertEqual(dict(by_name.config), dict(wt.config))
        by_name.close()
        with self.assertRaises(ValueError) as cm2:
            WeftWanTransformer(self.d.endpoint, "tiny-wan",
                               config=dict(ref_t.config, num_layers=7))
        self.assertIn("num_layers", str(cm2.exception))
        with self.assertRaises(ValueError) as cm2:
            WeftFluxTransformer(self.d.endpoint, "tiny-wan")
        self.assertIn("family 'wan'", str(cm2.exception))
        wt.close()

    def test_5_inputs_for_each_timestep_form_and_image_tokens(self) -> None:
        """What _wan_inputs sends for the daemon's schema: a (B) timestep,
        a per-token one that is one value a row (as (B)) or varies
        (timestep_tokens); and FLF2V's (2 B, 5, D) image tokens to a schema
        of 10 fixed image tokens, viewed (B, 10, D) as diffusers' image
        embedder views them."""
        from weft.diffusers import _wan_inputs
        with weft.connect(self.d.endpoint) as c:
            schema = c.model_schema("tiny-wan")
        names = [t.name for t in schema.inputs]
        self.assertEqual(names, ["hidden_states", "timestep", "encoder_hidden_states",
                                 "timestep_tokens"])
        hs = torch.randn(2, 4, 2, 4, 6)
        ehs = torch.randn(2, 8, 32)
        sent = _wan_inputs(schema, (1, 2, 2), hs, torch.tensor([999, 500]), ehs, None)
        self.assertEqual(sorted(sent), ["encoder_hidden_states", "hidden_states", "timestep"])
        self.assertEqual(sent["timestep"].dtype, torch.float32)
        self.assertEqual(tuple(_wan_inputs(schema, (1, 2, 2), hs, torch.tensor(7.0), ehs, None)
                               ["timestep"].shape), (2,))
        rows = torch.tensor([[3.0] * 12, [9.0] * 12])
        self.assertTrue(torch.equal(_wan_inputs(schema, (1, 2, 2), hs, rows, ehs, None)
                                    ["timestep"], torch.tensor([3.0, 9.0])))
        varying = torch.rand(2, 12) * 1000
        sent = _wan_inputs(schema, (1, 2, 2), hs, varying, ehs, None)
        self.assertNotIn("timestep", sent)
        self.assertTrue(torch.equal(sent["timestep_tokens"], varying))
        image = weft.TensorSchema("encoder_hidden_states_image", ("f32", "f16", "bf16"), False,
                                  ("B", 10, 16), ("B", "pos_embed_seq_len", "image_dim"))
        flf2v = dataclasses.replace(schema, inputs=schema.inputs + (image,))
        img = torch.randn(4, 5, 16)
        sent = _wan_inputs(flf2v, (1, 2, 2), hs, torch.tensor([1.0, 2.0]), ehs, img)
        self.assertTrue(torch.equal(sent["encoder_hidden_states_image"], img.reshape(2, 10, 16)))


    def test_6_batches_and_loading(self) -> None:
        """WanPipeline's own call with num_videos_per_prompt=2 and CFG
        against diffusers'; text embeddings and timestep of batch 1 for
        latents of batch 2 in one call against diffusers' forward;
        from_pretrained of the pipeline folder under the model root, taken
        by WanPipeline.from_pretrained without diffusers' "Expected types"
        warning; a bf16 move the pipeline casts its latents to."""
        import logging

        from diffusers import WanPipeline, WanTransformer3DModel
        from weft.diffusers import WeftWanTransformer
        root = self.built["root"]
        wt = WeftWanTransformer.from_pretrained(root / "tiny-wan", subfolder="transformer",
                                                endpoint=self.d.endpoint, model_root=root,
                                                name="tiny-wan")
        self.assertIsInstance(wt, WanTransformer3DModel)
        seen: list = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda r: seen.append(r.getMessage())    # type: ignore[method-assign]
        dl = logging.getLogger("diffusers")
        dl.addHandler(handler)
        try:
            pipe = WanPipeline.from_pretrained(str(root / "tiny-wan"), transformer=wt)
        finally:
            dl.removeHandler(handler)
        self.assertFalse([m for m in seen if "Expected types" in m], seen)
        pipe.set_progress_bar_config(disable=True)
        want = tw.run(self.built["pipe"], "latent", steps=2, num_videos_per_prompt=2)
        got = tw.run(pipe, "latent", steps=2, num_videos_per_prompt=2)
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        self.assertEqual(got.shape[0], 2)
        d = max_diff(got, want)
        print(f"2 videos per prompt with CFG: latents {tuple(got.shape)}, max|diff| {d:.3e}")
        self.assertLess(d, LATENT_TOL * float(want.abs().max()))
        io = load_file(str(FIXTURES / "io-wan-tiny-f32.safetensors"))
        args = {k: io[k] for k in ("hidden_states", "timestep", "encoder_hidden_states")}
        ref_t = self.built["transformer"]
        for ones in (("encoder_hidden_states",), ("timestep",),
                     ("timestep", "encoder_hidden_states")):
            a = dict(args, **{k: args[k][:1] for k in ones})
            with torch.no_grad():
                w = ref_t(**a, return_dict=False)[0]
            g = wt(**a, return_dict=False)[0]
            self.assertEqual(tuple(g.shape), tuple(w.shape), ones)
            self.assertLess(max_diff(g, w), 2 * ONE_CALL_TOL * float(w.abs().max()), ones)
        # Wan's pipelines cast the transformer's inputs to transformer.dtype
        # (their scheduler keeps the latents float32): bf16 in, bf16 out
        wt.to(torch.bfloat16)
        self.assertEqual(wt.dtype, torch.bfloat16)
        lat = tw.run(pipe, "latent", steps=1)
        self.assertTrue(bool(torch.isfinite(lat).all()))
        out = wt(**{k: v.to(wt.dtype) for k, v in args.items()}).sample
        self.assertEqual(out.dtype, torch.bfloat16)
        wt.close()

    def test_7_image_and_token_inputs_in_diffusers_forms(self) -> None:
        """The image-conditioned and per-token-timestep fixtures
        (tests/fixtures: wan-tiny-i2v, -flf2v, -ti2v, written by diffusers)
        resident in weftd, each called through WeftWanTransformer with the
        arguments as diffusers' WanTransformer3DModel takes them: I2V's
        encoder_hidden_states_image (B, 5, 24); FLF2V's (2 B, 5, 24), the
        first and last frames' tokens of each sample (the adapter views it
        as the schema's (B, 10, 24)); TI2V's rank-2 timestep (sent as
        timestep_tokens). Each against diffusers' float64 output within
        ONE_CALL_TOL of max |ref|."""
        from weft.diffusers import WeftWanTransformer
        root = self.built["root"]
        for name in ("wan-tiny-i2v", "wan-tiny-flf2v", "wan-tiny-ti2v"):
            shutil.copytree(FIXTURES / name, root / name, dirs_exist_ok=True)
            io = load_file(str(FIXTURES / f"io-{name}-f32.safetensors"))
            args = {"hidden_states": io["hidden_states"],
                    "encoder_hidden_states": io["encoder_hidden_states"]}
            args["timestep"] = io["timestep_tokens"] if "timestep_tokens" in io \
                else io["timestep"]
            if "encoder_hidden_states_image" in io:
                img = io["encoder_hidden_states_image"]
                if name.endswith("flf2v"):
                    # diffusers' argument: two images of 5 tokens per sample
                    img = img.reshape(-1, img.shape[1] // 2, img.shape[2])
                args["encoder_hidden_states_image"] = img
            wt = WeftWanTransformer(self.d.endpoint, name, path=name, model_root=root)
            got = wt(**args, return_dict=False)[0]
            ref = io["output_f64"]
            e = max_diff(got, ref) / float(ref.abs().max())
            print(f"{name} through the adapter: {e:.2e} of max|ref| vs diffusers f64")
            self.assertLess(e, ONE_CALL_TOL)
            wt.client.unload_model(name)
            wt.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2)
    print(f"test_wan_pipeline: {time.monotonic() - t0:.1f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)
