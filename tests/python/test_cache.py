"""test_cache.py — the diffusers transformers' first-block cache against
diffusers' own (apply_first_block_cache), and batches split over dp.

A FluxPipeline of tiny_flux.py, 8 steps: diffusers' transformer with
FirstBlockCacheConfig(threshold=0.3) (its head block's decisions
recorded step by step), against WeftFluxTransformer(cache_threshold=0.3)
on weftd --devices cpu:4 on dp 4 (tp 1), ulysses 2, ring 2 x ulysses 2
and tp 2 x ring 2 (each step's result.cache recorded):
  - the same steps computed and reused (at 0.3 the tiny model's changes
    are 0.57, 0.22, 0.65, 0.49, 0.10, 0.21, 0.16: none within 0.07 of
    the threshold, so float rounding cannot flip one);
  - the final latents within 1e-4 x max|ref| and the pixels within 1e-4
    (test_pipeline.py's tolerances);
  - enable_cache(FirstBlockCacheConfig(threshold=0.3)) is the same as the
    constructor's argument; threshold 0 (no session) gives the uncached
    diffusers result; the pipeline call ends its sessions (end_session of
    one of their ids afterwards: not open).
Two images per prompt (B = 2) on dp 2 x ulysses 2, dp 2 x ring 2, dp 2 x
tp 2 and dp 4 are split over two replicas (result.devices: both
replicas' devices) and match diffusers.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, List

import torch

import tiny_flux as tf
import weft
from common import Weftd

torch.set_num_threads(1)
LATENT_TOL = 1e-4       # x max|ref latents| (test_pipeline.py)
PIXEL_TOL = 1e-4        # absolute, pixels in [0, 1]
THRESHOLD = 0.3
STEPS = 8


def max_diff(a: Any, b: Any) -> float:
    return float((torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max())


class CacheTest(unittest.TestCase):
    work: Path
    flux: Dict[str, Any]
    d: Weftd

    @classmethod
    def setUpClass(cls) -> None:
        cls.work = Path(tempfile.mkdtemp(prefix="weft-py-cache-"))
        cls.flux = tf.build(cls.work / "flux")
        cls.d = Weftd("cpu:4", mesh="dp=4", model_root=cls.flux["root"])

    @classmethod
    def tearDownClass(cls) -> None:
        rc = cls.d.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        assert rc == 0, f"weftd exit status {rc}"

    def transformer(self, **kw: Any) -> Any:
        from weft.diffusers import WeftFluxTransformer
        return WeftFluxTransformer(self.d.endpoint, "tiny-flux",
                                   path=self.flux["transformer_path"],
                                   model_root=self.flux["root"], overlap_forwards=False, **kw)

    def pipe(self, wt: Any) -> Any:
        return tf.with_transformer(self.flux["pipe"], wt)

    def diffusers_run(self, threshold: float, **kw: Any) -> Dict[str, Any]:
        """diffusers' transformer with its first-block cache (threshold >
        0); its head block's decision at each step in "computed"."""
        from diffusers.hooks import FirstBlockCacheConfig
        from diffusers.hooks.first_block_cache import FBCHeadBlockHook
        pipe = self.flux["pipe"]
        tr = pipe.transformer
        decisions: List[bool] = []
        orig = FBCHeadBlockHook._should_compute_remaining_blocks

        def spy(hook: Any, residual: torch.Tensor) -> bool:
            v = orig(hook, residual)
            decisions.append(bool(v))
            return v
        FBCHeadBlockHook._should_compute_remaining_blocks = spy   # type: ignore
        try:
            if threshold > 0:
                tr.enable_cache(FirstBlockCacheConfig(threshold=threshold))
            r = tf.run(pipe, steps=STEPS, **kw)
        finally:
            FBCHeadBlockHook._should_compute_remaining_blocks = orig   # type: ignore
            if tr.is_cache_enabled:
                tr.disable_cache()
        r["computed"] = decisions
        return r

    def weft_run(self, wt: Any, **kw: Any) -> Dict[str, Any]:
        """The pipeline on wt; each step's result.cache in "computed"."""
        uses: List[str] = []
        pipe = self.pipe(wt)
        orig = wt._forward_job

        def keep(*a: Any, **k: Any) -> Any:
            out = orig(*a, **k)
            uses.append(wt.last_result.cache)
            return out
        wt._forward_job = keep
        try:
            r = tf.run(pipe, steps=STEPS, **kw)
        finally:
            del wt._forward_job
        r["uses"] = uses
        r["computed"] = [u != "reused" for u in uses]
        return r

    def test_1_same_steps_as_diffusers(self) -> None:
        ref = self.diffusers_run(THRESHOLD)
        plain = self.diffusers_run(0)
        self.assertIn(False, ref["computed"], "diffusers reused no step: the test shows "
                      "nothing at this threshold")
        self.assertIn(True, ref["computed"][1:])
        scale = float(ref["latents"].abs().max())
        wt = self.transformer(cache_threshold=THRESHOLD)
        meshes = [dict(dp=4), dict(ulysses=2, dp=2), dict(ring=2, ulysses=2),
                  dict(tp=2, ring=2)]
        for mesh in meshes:
            wt.client.reconfigure(**mesh)
            got = self.weft_run(wt)
            dl = max_diff(got["latents"], ref["latents"])
            dp = max_diff(got["image"], ref["image"])
            print(f"{str(mesh):28s} weft {got['uses']}\n{'':28s} diffusers computed "
                  f"{ref['computed']}\n{'':28s} latents {dl:.2e} ({dl / scale:.2e} of "
                  f"max|ref|), pixels {dp:.2e}")
            self.assertEqual(got["computed"], ref["computed"], mesh)
            self.assertLess(dl, LATENT_TOL * scale, mesh)
            self.assertLess(dp, PIXEL_TOL, mesh)
            self.assertEqual(wt._sessions, {}, "the pipeline call ended its sessions")
        # enable_cache with diffusers' config: the same
        from diffusers.hooks import FirstBlockCacheConfig
        wt2 = self.transformer()
        self.assertFalse(wt2.is_cache_enabled)
        wt2.enable_cache(FirstBlockCacheConfig(threshold=THRESHOLD))
        got = self.weft_run(wt2)
        self.assertEqual(got["computed"], ref["computed"])
        # the session a call opened is ended by its end: a session of the
        # same client is no longer open
        sess = None
        orig_args = wt2._session_args

        def spy_args() -> Dict[str, Any]:
            nonlocal sess
            a = orig_args()
            sess = a.get("session", sess)
            return a
        wt2._session_args = spy_args
        self.weft_run(wt2)
        del wt2._session_args
        self.assertIsNotNone(sess)
        with self.assertRaises(weft.BadArgumentError):
            wt2.client.end_session(sess)
        # threshold 0: no session, every step computed, diffusers' uncached result
        wt2.disable_cache()
        got = self.weft_run(wt2)
        self.assertEqual(got["uses"], ["none"] * STEPS)
        dl = max_diff(got["latents"], plain["latents"])
        print(f"threshold 0: {got['uses'][:2]}..., latents vs uncached diffusers {dl:.2e}")
        self.assertLess(dl, LATENT_TOL * float(plain["latents"].abs().max()))
        wt.close()
        wt2.close()

    def test_2_batch_split_over_dp(self) -> None:
        """num_images_per_prompt 2 on dp 2 (x ulysses, ring, tp) and dp 4:
        each forward's two samples on two replicas at once (their devices
        all in result.devices), as diffusers."""
        ref = self.diffusers_run(0, num_images_per_prompt=2)
        scale = float(ref["latents"].abs().max())
        wt = self.transformer()
        for mesh, devices in ((dict(dp=2, ulysses=2), 4), (dict(dp=2, ring=2), 4),
                              (dict(dp=2, tp=2), 4), (dict(dp=4), 2)):
            wt.client.reconfigure(**mesh)
            got = self.weft_run(wt, num_images_per_prompt=2)
            dl = max_diff(got["latents"], ref["latents"])
            dp = max_diff(got["image"], ref["image"])
            print(f"2 images per prompt on {mesh}: {wt.last_result.devices} devices, "
                  f"latents {dl:.2e} of {scale:.2e}, pixels {dp:.2e}")
            self.assertEqual(wt.last_result.devices, devices, mesh)
            self.assertLess(dl, LATENT_TOL * scale, mesh)
            self.assertLess(dp, PIXEL_TOL, mesh)
        wt.close()


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
