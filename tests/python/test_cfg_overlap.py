"""test_cfg_overlap.py — the diffusers transformers' overlapped forwards
(overlap_forwards=True, the default): a forward sends its job and returns
a tensor whose first use waits for the reply, so that a pipeline's two
classifier-free-guidance branches are in weftd at once, each on its own
replica of a dp = 2 mesh (weftd --devices cpu:2 --mesh dp=2).

- WanPipeline with guidance_scale 5 (tiny_wan.py) and FluxPipeline with
  true_cfg_scale 2 and a negative prompt (tiny_flux.py), overlapped,
  against diffusers' own transformer (the tolerances of
  test_wan_pipeline.py / test_pipeline.py: final latents within 1e-4 x
  max|ref|, decoded pixels within 1e-4) and against the same pipeline
  with overlap_forwards=False (bitwise equal: the same jobs, the same
  conversion of the output); the same pipelines without CFG (one call a
  step, whose result is read right after the call).
- The branches really run at once: on a daemon holding every job part at
  its start (WEFT_TEST_HOLD_JOBS), an overlapped WanPipeline step gets
  both devices busy at the same time, each with one of the step's two
  jobs (status: both devices busy, two jobs in flight); one after the
  other, the second is never sent while the first is held, and that
  state could not arise. Waited for as an event (common.wait_for's
  failure bound), never a time window.
- A job's error surfaces where its result is first used, as the
  synchronous forward's exception type: DeadlineError (a forward queued
  behind two held jobs past its forward_timeout_ms), and again at a
  second use; a daemon killed while both branches are in flight and
  started again: the first use reconnects, loads the model again (one
  warning) and sends both again, the values the synchronous path's; a
  daemon killed and not back: ConnectError ("went away") at the first
  use.
- Each kind of use of a result (arithmetic, .to, indexing, in-place
  ops, numpy(), printing, being sent by another forward) waits for it
  and gives the synchronous values; metadata is read without waiting.
"""
from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List

import torch

import tiny_flux as tf
import tiny_wan as tw
import weft
from common import JobHold, Weftd, wait_for

torch.set_num_threads(1)
LATENT_TOL = 1e-4       # x max|ref latents| (test_wan_pipeline.py, test_pipeline.py)
PIXEL_TOL = 1e-4        # absolute, pixels in [0, 1]
FLUX_CFG = dict(negative_prompt="blurry", true_cfg_scale=2.0)


def max_diff(a: Any, b: Any) -> float:
    return float((torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max())


class CfgOverlapTest(unittest.TestCase):
    work: Path
    root: Path
    wan: Dict[str, Any]
    flux: Dict[str, Any]
    d: Weftd

    @classmethod
    def setUpClass(cls) -> None:
        cls.work = Path(tempfile.mkdtemp(prefix="weft-py-cfg-"))
        cls.wan = tw.build(cls.work / "wan")
        cls.flux = tf.build(cls.work / "flux")
        # one model root for both: the FLUX pipeline's folder beside Wan's
        cls.root = cls.wan["root"]
        shutil.copytree(cls.flux["root"] / "tiny-flux", cls.root / "tiny-flux")
        cls.d = Weftd("cpu:2", mesh="dp=2", model_root=cls.root)

    @classmethod
    def tearDownClass(cls) -> None:
        rc = cls.d.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        assert rc == 0, f"weftd exit status {rc}"

    def wan_transformer(self, endpoint: str, **kw: Any) -> Any:
        from weft.diffusers import WeftWanTransformer
        return WeftWanTransformer(endpoint, "tiny-wan", path=self.wan["transformer_path"],
                                  model_root=self.root, **kw)

    def wan_pipe(self, wt: Any) -> Any:
        from diffusers import WanPipeline
        b = self.wan["pipe"]
        pipe = WanPipeline(tokenizer=b.tokenizer, text_encoder=b.text_encoder, vae=b.vae,
                           scheduler=b.scheduler, transformer=wt)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def flux_pipe(self, wt: Any) -> Any:
        return tf.with_transformer(self.flux["pipe"], wt)

    def compare(self, label: str, ref: Dict[str, Any], over: Dict[str, Any],
                sync: Dict[str, Any]) -> None:
        """over (overlapped) against diffusers' ref within the tolerances
        and against sync (one call after the other) bitwise."""
        scale = float(ref["latents"].abs().max())
        dl = max_diff(over["latents"], ref["latents"])
        dp = max_diff(over["pixels"], ref["pixels"])
        ds = max(max_diff(over[k], sync[k]) for k in ("latents", "pixels"))
        print(f"{label:22s}: vs diffusers latents {dl:.3e} ({dl / scale:.2e} of max|ref|), "
              f"pixels {dp:.3e}; overlapped vs one after the other max|diff| {ds:.1e}")
        self.assertLess(dl, LATENT_TOL * scale, label)
        self.assertLess(dp, PIXEL_TOL, label)
        for k in ("latents", "pixels"):
            self.assertTrue(torch.equal(torch.as_tensor(over[k]), torch.as_tensor(sync[k])),
                            f"{label}: {k} differ between overlapped and synchronous")

    def served(self) -> List[int]:
        with self.d.connect() as c:
            return [x.jobs_served for x in c.status().devices]

    def test_1_wan_cfg(self) -> None:
        """WanPipeline with guidance 5 (two calls a step) and with
        guidance 1 (one call a step, read at once), overlapped and not."""
        over = self.wan_transformer(self.d.endpoint)
        sync = self.wan_transformer(self.d.endpoint, overlap_forwards=False)
        for label, guidance in (("wan cfg 5", tw.GUIDANCE), ("wan without cfg", 1.0)):
            res = {}
            for name, pipe in (("ref", self.wan["pipe"]), ("over", self.wan_pipe(over)),
                               ("sync", self.wan_pipe(sync))):
                before = self.served()
                res[name] = dict(latents=tw.run(pipe, "latent", guidance=guidance),
                                 pixels=tw.run(pipe, "np", guidance=guidance))
                after = self.served()
                if name != "ref":
                    print(f"{label} {name:4s}: jobs served per device "
                          f"{[a - b for a, b in zip(after, before)]}")
            self.compare(label, res["ref"], res["over"], res["sync"])
        over.close()
        sync.close()

    def test_2_flux_true_cfg(self) -> None:
        """FluxPipeline with true_cfg_scale 2 and a negative prompt (two
        calls a step), and without (one), overlapped and not."""
        over = self.flux_transformer(self.d.endpoint)
        sync = self.flux_transformer(self.d.endpoint, overlap_forwards=False)
        for label, kw in (("flux true cfg 2", FLUX_CFG), ("flux without true cfg", {})):
            res = {}
            for name, pipe in (("ref", self.flux["pipe"]), ("over", self.flux_pipe(over)),
                               ("sync", self.flux_pipe(sync))):
                r = tf.run(pipe, **kw)
                res[name] = dict(latents=r["latents"], pixels=r["image"])
            self.compare(label, res["ref"], res["over"], res["sync"])
        over.close()
        sync.close()

    def flux_transformer(self, endpoint: str, **kw: Any) -> Any:
        from weft.diffusers import WeftFluxTransformer
        return WeftFluxTransformer(endpoint, "tiny-flux", path=self.flux["transformer_path"],
                                   model_root=self.root, **kw)

    def test_3_branches_at_once_and_errors(self) -> None:
        """On a daemon that holds every job part at its start: a forward
        past its deadline (queued behind two held jobs) raises
        DeadlineError where its result is used; an overlapped CFG step has
        both branches held at once on the two devices; one after the
        other, the second branch is not sent while the first is held."""
        hold = JobHold()
        d = Weftd("cpu:2", mesh="dp=2", model_root=self.root, env=hold.env)
        try:
            with d.connect() as c:
                def busy() -> int:
                    return sum(x.busy for x in c.status().devices)

                # DeadlineError at the first use, and again at the next
                quick = self.wan_transformer(d.endpoint, forward_timeout_ms=1)
                quick_sync = self.wan_transformer(d.endpoint, forward_timeout_ms=1,
                                                  overlap_forwards=False)
                q = torch.randn(1, 16, 2, 8)
                blockers = [c.submit_attention(q, q, q) for _ in range(2)]
                self.assertTrue(wait_for(lambda: busy() == 2), "the blockers never showed busy")
                args = dict(hidden_states=torch.randn(1, 4, 2, 4, 6),
                            timestep=torch.tensor([999]),
                            encoder_hidden_states=torch.randn(1, 8, 32))
                late = quick(**args, return_dict=False)[0]      # sent; nothing raised yet
                with self.assertRaises(weft.DeadlineError):
                    late + 1
                with self.assertRaises(weft.DeadlineError):
                    late.numpy()
                with self.assertRaises(weft.DeadlineError):
                    quick_sync(**args)
                print("deadline: raised at the result's first use (and again at the next), "
                      "as the synchronous forward raises it at the call")
                hold.release(2)
                for b in blockers:
                    b.wait()
                    b.close()
                quick.close()
                quick_sync.close()

                # one step one after the other: while the first branch is
                # held, nothing else is in flight
                sync = self.wan_transformer(d.endpoint, overlap_forwards=False)
                box: Dict[str, Any] = {}

                def step(pipe: Any, key: str) -> None:
                    try:
                        box[key] = tw.run(pipe, "latent", steps=1)
                    except BaseException as e:      # reported by the main thread
                        box[key] = e

                t = threading.Thread(target=step, args=(self.wan_pipe(sync), "sync"))
                t.start()
                self.assertTrue(wait_for(lambda: busy() == 1), "the first branch never ran")
                st = c.status()
                print(f"one after the other, first branch held: busy "
                      f"{[x.busy for x in st.devices]}, in flight {st.in_flight}")
                self.assertEqual(st.in_flight, 1)
                hold.release(2)          # the two branches of the one step
                t.join()
                self.assertIsInstance(box["sync"], torch.Tensor, box["sync"])

                # overlapped: both branches held at once, one per device
                over = self.wan_transformer(d.endpoint)
                t = threading.Thread(target=step, args=(self.wan_pipe(over), "over"))
                t.start()
                both = wait_for(lambda: busy() == 2)
                st = c.status()
                print(f"overlapped, both branches held: busy {[x.busy for x in st.devices]}, "
                      f"in flight {st.in_flight}")
                hold.open_gate(2)
                t.join()
                self.assertTrue(both, "the two branches never ran at the same time")
                self.assertEqual(st.in_flight, 2)
                self.assertIsInstance(box["over"], torch.Tensor, box["over"])
                self.assertTrue(torch.equal(box["over"], box["sync"]))
                over.close()
                sync.close()
        finally:
            hold.open_gate(2)
            self.assertEqual(d.stop(), 0)
            hold.close()

    def test_4_daemon_lost_between_send_and_use(self) -> None:
        """Both branches in flight on a daemon that is killed: with a new
        daemon on the same endpoint, the first use reconnects, loads the
        model again (one warning) and sends both again, the results the
        synchronous path's; with none, the first use raises ConnectError
        naming the daemon's absence, as the synchronous forward does."""
        sock = Path(tempfile.mkdtemp(prefix="weft-py-cfg-lost-"))
        ep = f"ipc://{sock}/weftd.sock"
        hold = JobHold()
        d = Weftd("cpu:2", mesh="dp=2", model_root=self.root, endpoint=ep, env=hold.env)
        try:
            g = torch.Generator().manual_seed(5)
            args = dict(hidden_states=torch.randn(1, 4, 2, 4, 6, generator=g),
                        timestep=torch.tensor([750]))
            ehs = [torch.randn(1, 8, 32, generator=g) for _ in range(2)]
            with self.wan_transformer(self.d.endpoint, overlap_forwards=False) as sync:
                want = [sync(**args, encoder_hidden_states=e).sample for e in ehs]
            wt = self.wan_transformer(ep, connect_timeout_ms=1000)
            with d.connect() as c:
                pending = [wt(**args, encoder_hidden_states=e).sample for e in ehs]
                self.assertTrue(wait_for(lambda: sum(x.busy for x in c.status().devices) == 2),
                                "the two forwards never ran at the same time")
            d.proc.kill()
            d.proc.wait()
            d.stop()
            d = Weftd("cpu:2", mesh="dp=2", model_root=self.root, endpoint=ep, env=hold.env)
            hold.release(2)         # the two forwards sent again
            with self.assertLogs("weft.diffusers", logging.WARNING) as logs:
                got = [p.clone() for p in pending]
            self.assertEqual(len(logs.records), 1, logs.output)
            print(f"daemon killed with both in flight, restarted: {logs.output[0]}")
            for g_, w in zip(got, want):
                self.assertTrue(torch.equal(g_, w))
            # killed again, not restarted: ConnectError at the first use
            again = [wt(**args, encoder_hidden_states=e).sample for e in ehs]
            with d.connect() as c:
                self.assertTrue(wait_for(lambda: sum(x.busy for x in c.status().devices) == 2),
                                "the two forwards never ran at the same time")
            d.proc.kill()
            d.proc.wait()
            d.stop()
            with self.assertRaises(weft.ConnectError) as cm:
                again[0].sum()
            self.assertIn("went away", cm.exception.message)
            print(f"daemon killed, not back: {type(cm.exception).__name__} at the first use")
            wt.close()
        finally:
            hold.open_gate(2)
            if d.proc.poll() is None:
                self.assertEqual(d.stop(), 0)
            hold.close()
            shutil.rmtree(sock, ignore_errors=True)

    def test_5_uses_of_a_result(self) -> None:
        """Each use of an overlapped forward's result waits for its reply
        and gives the synchronous result's values: arithmetic, .to (same
        and other dtype), indexing, in-place ops, torch functions, numpy(),
        printing, a tuple result, being sent by another forward; metadata
        (shape, dtype, size()) is read without waiting; once used it is a
        plain torch.Tensor and what ops return is plain."""
        from weft.diffusers import _PendingTensor
        over = self.wan_transformer(self.d.endpoint)
        sync = self.wan_transformer(self.d.endpoint, overlap_forwards=False)
        g = torch.Generator().manual_seed(11)
        args = dict(hidden_states=torch.randn(2, 4, 2, 4, 6, generator=g),
                    timestep=torch.tensor([999, 500]),
                    encoder_hidden_states=torch.randn(2, 8, 32, generator=g))
        want = sync(**args).sample
        self.assertIs(type(want), torch.Tensor)
        uses = {
            "add": lambda t: t + 1, "rsub": lambda t: 2.0 - t, "mul": lambda t: t * t,
            "to same": lambda t: t.to(torch.float32) * 1, "to f64": lambda t: t.to(torch.float64),
            "index": lambda t: t[1, 2], "slice": lambda t: t[:, :, 1:],
            "add_": lambda t: t.add_(3) * 1, "cat": lambda t: torch.cat([t, t]),
            "numpy": lambda t: torch.from_numpy(t.numpy().copy()),
            "repr": lambda t: repr(t), "clone": lambda t: t.clone(),
            "send back": lambda t: sync(**dict(args, hidden_states=t)).sample}
        for name, use in uses.items():
            t = over(**args).sample
            self.assertIsInstance(t, _PendingTensor, name)
            self.assertEqual((t.shape, t.dtype, t.size(), t.ndim), (want.shape, want.dtype,
                             want.size(), want.ndim), name)
            self.assertIsInstance(t, _PendingTensor, f"{name}: metadata waited")
            got = use(t)
            ref = use(want.clone())
            self.assertIs(type(t), torch.Tensor, name)
            if isinstance(ref, str):
                self.assertEqual(got, ref, name)
            else:
                self.assertIs(type(got), torch.Tensor, name)
                self.assertTrue(torch.equal(got, ref), name)
        # a tuple result; a caller that changes its latents in place before
        # using the result (the forward sent its own copy); a bf16 latent's
        # result (copied in at the use)
        t = over(**args, return_dict=False)[0]
        self.assertTrue(torch.equal(t, want))
        hs = args["hidden_states"].clone()
        t = over(**dict(args, hidden_states=hs)).sample
        hs.add_(100.0)
        self.assertTrue(torch.equal(t, want))
        bf = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in args.items()}
        t = over(**bf).sample
        self.assertEqual(t.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(t, sync(**bf).sample))
        print(f"uses of an overlapped result, each equal to the synchronous one: "
              f"{', '.join(uses)}, tuple, latents changed before the use, bf16")
        over.close()
        sync.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2)
    print(f"test_cfg_overlap: {time.monotonic() - t0:.1f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)
