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
controlnet residuals, save_pretrained), attaching to the resident model,
a WeftFluxTransformer without a config, and one with precision="fp8"
(UnsupportedError from the CPU daemon at its forward). Then the
pipeline's own calls whose batches differ (true CFG with a list of
prompts and one negative prompt, num_images_per_prompt with true CFG)
and each broadcast form of one call, against diffusers; model CPU
offload, LoRA and attention backends, dtype moves (bf16, float64), a
partial config; from_pretrained under the daemon's model root and
FluxPipeline.from_pretrained without diffusers' "Expected types"
warning, python -m weft and examples/flux_pipeline.py against the
daemon; a connect timeout where nobody listens, and a daemon stopped and
started again on the same endpoint and model root (its own weftd
--devices cpu:1). A 36 x 36 image (81 image tokens) on ulysses = 2 and
ring = 2 x ulysses = 2, which do not divide it, against diffusers.

Offload and LoRA through the pipeline need accelerate and peft, which
the tests' venv lacks: there the test checks that diffusers' own
pipeline refuses the same way, and the adapter's side (its one empty
parameter for accelerate's hooks; its refusing load_lora_adapter).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Dict

import torch

import tiny_flux as tf
import weft
from common import SOURCE, JobHold, Weftd, free_port, wait_for

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
        args = self.one_call_args()
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
        # the pipeline passes joint_attention_kwargs through: refused, not ignored
        pipe = tf.with_transformer(self.built["pipe"], wt)
        with self.assertRaises(NotServedError):
            tf.run(pipe, steps=1, joint_attention_kwargs={"scale": 0.5})
        # a size mismatch (S_img 63 against img_ids' 64 rows) is refused
        # with the daemon's code
        with self.assertRaises(weft.BadArgumentError):
            wt(**dict(args, hidden_states=torch.randn(2, 63, 16)))
        # 63 image tokens, which the mesh's seq ranks do not divide: served
        a63 = dict(args, hidden_states=torch.randn(2, 63, 16), img_ids=torch.randn(63, 3))
        with torch.no_grad():
            want63 = ref_t(**a63, return_dict=False)[0]
        got63 = wt(**a63, return_dict=False)[0]
        self.assertLess(float((got63 - want63).abs().max()), 1e-5 * float(want63.abs().max()))
        # attach by name alone: the config comes from weftd (list_models' config)
        by_name = WeftFluxTransformer(self.d.endpoint, "tiny-flux")
        self.assertEqual(dict(by_name.config), dict(wt.config))
        self.assertEqual(by_name.model_info.config["in_channels"], 16)
        by_name.close()
        # precision="fp8" reaches the forward: a CPU daemon refuses it (29),
        # raised where the result is first used (overlapped forwards)
        fp8 = WeftFluxTransformer(self.d.endpoint, "tiny-flux", precision="fp8")
        refused = fp8(**args, return_dict=False)[0]
        with self.assertRaises(weft.UnsupportedError) as cm3:
            refused.sum()
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


    def generate(self, pipe: Any, prompt: Any, steps: int = 2, **kw: Any) -> Any:
        """One generation of the tiny pipeline, its images as numpy."""
        kw = dict(dict(height=tf.HEIGHT, width=tf.WIDTH, num_inference_steps=steps,
                       guidance_scale=3.5, max_sequence_length=tf.MAX_SEQ, output_type="np",
                       generator=torch.Generator().manual_seed(7)), **kw)
        return pipe(prompt, **kw).images

    @staticmethod
    def one_call_args(seed: int = 3) -> Dict[str, torch.Tensor]:
        """One FLUX forward's arguments for the tiny transformer (batch 2)."""
        g = torch.Generator().manual_seed(seed)
        return dict(hidden_states=torch.randn(2, 64, 16, generator=g),
                    encoder_hidden_states=torch.randn(2, 8, 32, generator=g),
                    pooled_projections=torch.randn(2, 16, generator=g),
                    timestep=torch.tensor([0.3, 0.9]), img_ids=torch.randn(64, 3, generator=g),
                    txt_ids=torch.zeros(8, 3), guidance=torch.tensor([3.5, 3.5]))

    def weft_pipe(self, wt: Any) -> Any:
        from diffusers import FluxPipeline
        pipe = FluxPipeline.from_pretrained(str(self.built["root"] / "tiny-flux"), transformer=wt)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def test_3_batches_broadcast_as_diffusers(self) -> None:
        """The pipeline's own calls whose inputs differ in batch: true CFG
        with a list of prompts and one negative prompt (negative embeddings
        of batch 1 against latents of batch 2), num_images_per_prompt with
        true CFG; and one call of each broadcast form against diffusers'
        forward."""
        wt = self.transformer()
        pipe = self.weft_pipe(wt)
        ref_pipe = self.built["pipe"]
        for label, prompt, kw in (
                ("true CFG, 2 prompts, 1 negative", ["a cat", "a dog"],
                 dict(negative_prompt="blurry", true_cfg_scale=2.0)),
                ("true CFG, 2 images per prompt", "a red cat",
                 dict(negative_prompt="blurry", true_cfg_scale=2.0, num_images_per_prompt=2))):
            want = self.generate(ref_pipe, prompt, **kw)
            got = self.generate(pipe, prompt, **kw)
            d = float(abs(got - want).max())
            print(f"{label}: images {got.shape}, max|diff| {d:.3e}")
            self.assertEqual(got.shape, want.shape, label)
            self.assertEqual(got.shape[0], 2, label)
            self.assertLess(d, IMAGE_TOL, label)
        full = dict(self.one_call_args(5), guidance=torch.tensor([3.5, 2.0]))
        ref_t = self.built["transformer"]
        for ones in (("encoder_hidden_states", "pooled_projections"),
                     ("hidden_states",), ("timestep", "guidance"), ("pooled_projections",)):
            args = dict(full, **{k: full[k][:1] for k in ones})
            with torch.no_grad():
                want = ref_t(**args).sample
            got = wt(**args).sample
            self.assertEqual(got.shape, want.shape, ones)
            self.assertLess(float((got - want).abs().max()), 1e-5 * float(want.abs().max()),
                            ones)
        with self.assertRaises(ValueError) as cm:
            wt(**dict(full, encoder_hidden_states=torch.randn(3, 8, 32)))
        self.assertIn("encoder_hidden_states 3", str(cm.exception))
        wt.close()

    def test_4_pipeline_features(self) -> None:
        """Model CPU offload (a no-op for the adapter, the other components
        offloaded), LoRA and attention backends refused with
        NotServedError, dtype moves (a bf16 pipeline gets bf16 latents;
        float64 latents come back float64), a partial config checked in
        the keys it sets, joint_attention_kwargs scale 1.0."""
        from weft.diffusers import NotServedError, WeftFluxTransformer
        wt = self.transformer()
        pipe = self.weft_pipe(wt)
        want = self.generate(self.built["pipe"], tf.PROMPT)
        # accelerate's hooks read a model's first parameter: one empty one
        self.assertEqual(sum(p.numel() for p in wt.parameters()), 0)
        self.assertEqual(len(list(wt.parameters())), 1)
        self.assertIs(wt.to("cpu"), wt)
        try:
            import accelerate  # noqa: F401
        except ImportError:
            # diffusers' own pipeline needs accelerate too: the same refusal
            with self.assertRaises(ImportError) as cm:
                self.built["pipe"].enable_model_cpu_offload(device="cpu")
            with self.assertRaisesRegex(ImportError, "accelerate"):
                pipe.enable_model_cpu_offload(device="cpu")
            print(f"model CPU offload: no accelerate here, diffusers says {cm.exception}")
        else:
            pipe.enable_model_cpu_offload(device="cpu")
            got = self.generate(pipe, tf.PROMPT)
            print(f"model CPU offload: image max|diff| {float(abs(got - want).max()):.3e}")
            self.assertLess(float(abs(got - want).max()), IMAGE_TOL)
            pipe.remove_all_hooks()
        # LoRA: the transformer's methods that the pipeline's
        # load_lora_weights / set_adapters reach, and the pipeline's own
        for call in (lambda: wt.load_lora_adapter({}, adapter_name="x"),
                     lambda: wt.set_adapters(["x"]), lambda: wt.fuse_lora(),
                     lambda: wt.add_adapter(None), lambda: wt.enable_cache(None),
                     lambda: wt.set_attn_processor(None), lambda: wt.enable_parallelism()):
            with self.assertRaises(NotServedError) as cm2:
                call()
            self.assertIn("weftd", str(cm2.exception))
        with self.assertRaises(NotServedError) as cm2:
            wt.load_lora_adapter({})
        self.assertIn("fuse the LoRA into the weights", str(cm2.exception))
        lora = {"transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight":
                torch.zeros(4, 64),
                "transformer.single_transformer_blocks.0.attn.to_q.lora_B.weight":
                torch.zeros(64, 4)}
        try:
            import peft  # noqa: F401
        except ImportError:
            # diffusers' own pipeline refuses LoRA without peft the same way
            for p in (pipe, self.built["pipe"]):
                with self.assertRaisesRegex(ValueError, "PEFT backend is required"):
                    p.load_lora_weights(lora)
            print("LoRA: no peft here; diffusers refuses load_lora_weights without it")
        else:
            with self.assertRaises(NotServedError) as cm2:
                pipe.load_lora_weights(lora, adapter_name="x")
            print(f"LoRA: {cm2.exception}")
        # attention backends: diffusers' default changes nothing, others refused
        wt.set_attention_backend("native")
        wt.reset_attention_backend()
        with self.assertRaises(NotServedError) as cm2:
            wt.set_attention_backend("flash")
        self.assertIn("own attention kernels", str(cm2.exception))
        self.assertLess(float(abs(self.generate(pipe, tf.PROMPT) - want).max()), IMAGE_TOL)
        # dtype moves: the transformer reports what it was moved to; a
        # bf16 pipeline's latents stay bf16
        pipe.to(torch.bfloat16)
        self.assertEqual(wt.dtype, torch.bfloat16)
        lat = self.generate(pipe, tf.PROMPT, steps=1, output_type="latent")
        self.assertEqual(lat.dtype, torch.bfloat16)
        self.assertTrue(bool(torch.isfinite(lat.float()).all()))
        pipe.to(torch.float32)
        self.assertEqual(wt.dtype, torch.float32)
        self.assertIs(wt.double().dtype, torch.float64)
        wt.float()
        args = self.one_call_args()
        f32 = wt(**args).sample
        f64 = wt(**dict(args, hidden_states=args["hidden_states"].double())).sample
        self.assertEqual(f64.dtype, torch.float64)
        self.assertTrue(torch.equal(f64, f32.double()))
        self.assertTrue(torch.equal(wt(**args, joint_attention_kwargs={"scale": 1.0}).sample,
                                    f32))
        # a partial config: checked in the keys it sets, the rest from weftd
        part = WeftFluxTransformer(self.d.endpoint, "tiny-flux",
                                   config={"in_channels": 16, "num_layers": 1})
        self.assertEqual(dict(part.config), dict(wt.config))
        part.close()
        with self.assertRaises(ValueError) as cm3:
            WeftFluxTransformer(self.d.endpoint, "tiny-flux", config={"num_layers": 7})
        self.assertIn("num_layers 7 here, 1 in weftd", str(cm3.exception))
        self.assertNotIn("attention_head_dim", str(cm3.exception))
        wt.close()

    def test_5_loading_like_diffusers(self) -> None:
        """from_pretrained of the pipeline folder under the model root (the
        daemon loads it by its relative path), FluxPipeline.from_pretrained
        without diffusers' "Expected types" warning, folders outside the
        root refused, the pipeline example and python -m weft against the
        daemon, the transformer as a context manager."""
        import logging

        from diffusers import FluxPipeline, FluxTransformer2DModel
        from weft.diffusers import WeftFluxTransformer
        root = self.built["root"]
        wt = WeftFluxTransformer.from_pretrained(root / "tiny-flux", subfolder="transformer",
                                                 endpoint=self.d.endpoint, model_root=root)
        self.assertEqual((wt.model_name, wt.model_info.path),
                         ("tiny-flux-transformer", "tiny-flux/transformer"))
        self.assertIsInstance(wt, FluxTransformer2DModel)
        seen: list = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda r: seen.append(r.getMessage())    # type: ignore[method-assign]
        dl = logging.getLogger("diffusers")
        dl.addHandler(handler)
        try:
            pipe = FluxPipeline.from_pretrained(str(root / "tiny-flux"), transformer=wt)
        finally:
            dl.removeHandler(handler)
        self.assertFalse([m for m in seen if "Expected types" in m], seen)
        self.assertIs(pipe.transformer, wt)
        # a relative folder is taken under the model root; the same model
        # is attached, not loaded again
        again = WeftFluxTransformer.from_pretrained("tiny-flux", subfolder="transformer",
                                                    endpoint=self.d.endpoint, model_root=root)
        self.assertEqual(again.model_info.load_ms, wt.model_info.load_ms)
        again.close()
        outside = self.work / "outside"
        shutil.copytree(root / "tiny-flux" / "transformer", outside)
        with self.assertRaises(ValueError) as cm:
            WeftFluxTransformer.from_pretrained(outside, endpoint=self.d.endpoint,
                                                model_root=root)
        self.assertIn("not under weftd's model root", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            WeftFluxTransformer.from_pretrained(outside, endpoint=self.d.endpoint)
        self.assertIn("model_root", str(cm.exception))
        # the context manager closes the connection; the model stays resident
        with wt:
            pass
        with self.assertRaises(ValueError):
            wt.client.status()
        # python -m weft over the binding
        env = dict(os.environ, WEFT_ENDPOINT=self.d.endpoint)

        def cli(*args: str) -> str:
            p = subprocess.run([sys.executable, "-m", "weft", *args], env=env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            return p.stdout
        print(cli("status").strip())
        self.assertIn("tiny-flux-transformer", cli("models"))
        self.assertIn("unloaded", cli("unload", "tiny-flux-transformer"))
        self.assertNotIn("tiny-flux-transformer", cli("models"))
        self.assertIn("loaded in", cli("load", "tiny-flux-transformer", "tiny-flux/transformer"))
        self.assertEqual(json.loads(cli("--json", "models"))[-1]["name"],
                         "tiny-flux-transformer")
        p = subprocess.run([sys.executable, "-m", "weft", "unload", "absent"], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1)
        self.assertIn("WF_E_", p.stderr)
        # the pipeline example, run as a user would
        out = self.work / "example.png"
        p = subprocess.run([sys.executable, str(SOURCE / "client" / "python" / "examples" /
                                                "flux_pipeline.py"),
                            str(root / "tiny-flux"), "a cat", "--model-root", str(root),
                            "--steps", "1", "--height", "32", "--width", "32",
                            "--max-sequence-length", "8", "--dtype", "float32",
                            "--out", str(out)], env=env, capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        print(p.stdout.strip())
        self.assertTrue(out.is_file())
        with weft.connect(self.d.endpoint) as c:
            c.unload_model("tiny-flux-transformer")

    def test_6_connect_timeout_and_restart(self) -> None:
        """A daemon nobody listens for: ConnectError at construction, within
        the connect timeout (1 s here; 5 s by default), not the forward
        timeout. A daemon stopped and started again on the same endpoint
        and model root: the next step fails with ConnectError while it is
        down, then the transformer reconnects and loads the model again
        from its path, once (one warning over a whole generation); with
        reload=False it says what to do instead."""
        import logging

        from weft.diffusers import CONNECT_TIMEOUT_MS, WeftFluxTransformer
        self.assertEqual(CONNECT_TIMEOUT_MS, 5000)
        port = free_port()
        for ep in (f"tcp://127.0.0.1:{port}", f"ipc://{self.work}/nobody.sock"):
            with self.assertRaises(weft.ConnectError) as cm:
                WeftFluxTransformer(ep, "tiny-flux", connect_timeout_ms=1000)
            self.assertIsInstance(cm.exception, ConnectionError)
            self.assertIn(ep, cm.exception.message)
            self.assertIn("connect timeout (1000 ms)", cm.exception.message)
        sock = Path(tempfile.mkdtemp(prefix="weft-py-restart-"))
        ep = f"ipc://{sock}/weftd.sock"
        root = self.built["root"]
        hold = JobHold()
        d = Weftd("cpu:1", model_root=root, endpoint=ep, env=hold.env)
        try:
            wt = WeftFluxTransformer(ep, "tiny-flux", path=self.built["transformer_path"],
                                     connect_timeout_ms=1000)
            # forward_timeout_ms is the job's deadline: a forward queued
            # behind a held job past it gets the daemon's DeadlineError
            quick = WeftFluxTransformer(ep, "tiny-flux", forward_timeout_ms=1)
            with weft.connect(ep) as c:
                q = torch.randn(1, 16, 2, 8)
                blocker = c.submit_attention(q, q, q)
                self.assertTrue(wait_for(lambda: c.status().devices[0].busy),
                                "the held job never showed busy")
                late = quick(**self.one_call_args()).sample
                with self.assertRaises(weft.DeadlineError):
                    late.sum()          # raised at the result's first use
                hold.open_gate(1)
                blocker.wait()
                blocker.close()
            quick.close()
            strict = WeftFluxTransformer(ep, "tiny-flux", connect_timeout_ms=1000,
                                         reload=False)
            pipe = self.weft_pipe(wt)
            want = self.generate(pipe, tf.PROMPT)
            self.assertEqual(d.stop(), 0)
            with self.assertRaises(weft.ConnectError) as cm:
                self.generate(pipe, tf.PROMPT)
            self.assertIn("went away", cm.exception.message)
            d = Weftd("cpu:1", model_root=root, endpoint=ep)
            with self.assertLogs("weft.diffusers", logging.WARNING) as logs:
                got = self.generate(pipe, tf.PROMPT)
            self.assertEqual(len(logs.records), 1, logs.output)
            self.assertIn("loading it again from 'tiny-flux/transformer'", logs.output[0])
            self.assertLess(float(abs(got - want).max()), IMAGE_TOL)
            self.assertEqual([m.name for m in wt.client.list_models()], ["tiny-flux"])
            self.assertEqual(d.stop(), 0)
            d = Weftd("cpu:1", model_root=root, endpoint=ep)
            with self.assertRaises(RuntimeError) as cm2:
                self.generate(self.weft_pipe(strict), tf.PROMPT)
            self.assertIn("python -m weft load tiny-flux tiny-flux/transformer",
                          str(cm2.exception))
            wt.close()
            strict.close()
        finally:
            self.assertEqual(d.stop(), 0)
            hold.close()
            shutil.rmtree(sock, ignore_errors=True)

    def test_7_any_resolution(self) -> None:
        """A 36 x 36 image, 81 image tokens (8 text tokens), which neither
        ulysses = 2 nor ring = 2 x ulysses = 2 divides: served with uneven
        sequence shards, diffusers' image."""
        wt = self.transformer()
        pipe = self.weft_pipe(wt)
        want = self.generate(self.built["pipe"], tf.PROMPT, height=36, width=36)
        for label, mesh in (("ulysses=2", dict(dp=2, ulysses=2)),
                            ("ring=2 x ulysses=2", dict(ring=2, ulysses=2))):
            wt.client.reconfigure(**mesh)
            got = self.generate(pipe, tf.PROMPT, height=36, width=36)
            di = float(abs(got - want).max())
            print(f"36 x 36 (81 image tokens) on {label}: image max|diff| {di:.3e}")
            self.assertLess(di, IMAGE_TOL, label)
        wt.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2)
    print(f"test_pipeline: {time.monotonic() - t0:.1f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)
