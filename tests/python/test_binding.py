"""test_binding.py — the weft package against real weftd daemons.

  - ABI: every ctypes struct has weft.h's size and field offsets (a C
    program compiled here prints them).
  - hello / has_feature / status; attention f32 / f16 (numpy), bf16 (torch
    and raw uint16 bits), GQA, causal, lse, against a float64 numpy
    reference; inputs passed without a copy; eight jobs in flight on one
    connection, waited in reverse order; four threads sharing one Client;
    reconfigure (ring 2 x ulysses 2 with rotate alltoall and ring_anything,
    back to tp 4).
  - models: load (progress), list, forward (numpy, torch, guidance, bf16;
    synchronous and asynchronous) against diffusers' outputs in
    tests/fixtures, unload; load refusals (config not JSON, a safetensors
    header that is not JSON, a shape against the config, an F64
    checkpoint, a `..` path, a bad name, a name in use, no model root).
  - jobs stopped and refused, on daemons that hold every job part at its
    start until the test lets it go (WEFT_TEST_HOLD_JOBS: "running" and
    "queue full" are states the test makes, however fast the machine): a
    deadline (DeadlineError), cancel and cancel by id (CancelledError), a
    reconfigure while another drains (BusyError), waiting past a timeout
    (ReplyTimeoutError), a queue of one (QueueFullError), a stop that
    never runs a queued job (ShuttingDownError); the flops bound
    (LimitError), device memory
    (NoMemoryError), CURVE (keys as arguments and from WEFT_SERVER_KEY /
    WEFT_CLIENT_KEY): a stranger's key or none (AuthError), a submit key's
    reconfigure (DeniedError), a bad endpoint (ConnectError), a call after
    the daemon stopped (ConnectionClosedError at once, not after the
    client's timeout).
  - the generic forward: list_models' config (ints, flags, lists) and
    schema (names, fixed sizes from the config, named sizes); forward by
    name bitwise equal to FLUX's call; refusals made before sending
    (unknown name, rank, B that disagrees, a fixed size, a missing input,
    an output's name or shape), each naming the tensor, the daemon's
    counters unchanged; a schema refreshed after a reload. weftctl
    models prints config and schema; weftctl forward reads inputs by the
    schema, checks and writes every output (bitwise the binding's).
  - precision="fp8" on the CPU daemon: UnsupportedError (29) naming the
    option and the device, for attention (sync and async) and forward; a
    bad precision is a ValueError; the next jobs are served.
  - every wire and library code of weft.h maps to its class and name.
  - packaging: a wheel of client/python built offline from the tree
    itself, nothing written into it; a fresh venv installs it offline
    (with and without build isolation); the README example runs from the
    installed package.
  - a connect timeout apart from the reply timeout: ConnectError naming
    the endpoint where no daemon listens.

Codes no libweft call can provoke (2 VERSION, 4 UNKNOWN_OP, 8
FRAME_MISMATCH, 24 NOT_COORDINATOR, 25 UNAVAILABLE, 40..42, 103 IO, 104
PROTOCOL, 106 PENDING) are checked through the mapping only.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

import weft
from weft import _lib, _tensors
from common import (FIXTURES, SOURCE, WAIT_EVENT_S, WEFTCTL, JobHold, Weftd, attention_ref,
                    free_port, wait_for)

torch.set_num_threads(1)
RNG = np.random.default_rng(20261201)
# a client's timeout: a reply it waits out reads ReplyTimeoutError, never
# the error the test expects
EVENT_MS = int(WAIT_EVENT_S * 1000)


def randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


class Abi(unittest.TestCase):
    def test_struct_layout(self) -> None:
        """sizeof / offsetof of each mirrored struct, from a C compiler."""
        lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "weft.h"',
                 'int main(void) {']
        for name, cls in _lib.STRUCTS.items():
            lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
            for f in cls._fields_:
                lines.append(f'printf("{name}.{f[0]} %zu\\n", offsetof({name}, {f[0]}));')
        lines.append("return 0; }")
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "abi.c"
            src.write_text("\n".join(lines))
            inc = os.environ.get("WEFT_INCLUDE", str(SOURCE / "include"))
            subprocess.run(["cc", "-std=c11", "-I", inc, "-o", f"{d}/abi", str(src)], check=True)
            out = subprocess.run([f"{d}/abi"], check=True, capture_output=True,
                                 text=True).stdout
        c = dict(line.rsplit(" ", 1) for line in out.splitlines())
        n = 0
        for name, cls in _lib.STRUCTS.items():
            self.assertEqual(int(c[name]), ctypes.sizeof(cls), f"sizeof({name})")
            for f in cls._fields_:
                self.assertEqual(int(c[f"{name}.{f[0]}"]), getattr(cls, f[0]).offset,
                                 f"offsetof({name}, {f[0]})")
                n += 1
        print(f"abi: {len(_lib.STRUCTS)} structs, {n} fields match weft.h")


class Codes(unittest.TestCase):
    def test_every_code_maps(self) -> None:
        """Each WF_E_* of weft.h: its class (with that code) and its name."""
        text = (SOURCE / "include" / "weft.h").read_text()
        codes = {m.group(1): int(m.group(2))
                 for m in re.finditer(r"\b(WF_E_[A-Z_]+) = (\d+)", text)}
        self.assertGreater(len(codes), 25)
        for name, code in codes.items():
            e = weft.error_for(code, "msg")
            self.assertIs(type(e), weft.errors.BY_CODE[code], name)
            self.assertEqual((e.code, e.name, e.message), (code, name, "msg"))
            self.assertIn(name, str(e))
        families = {1: weft.RequestError, 9: ValueError, 10: weft.DeniedError,
                    20: weft.RetryableError, 26: TimeoutError, 27: weft.JobStoppedError,
                    40: weft.DaemonFailure, 101: TimeoutError, 102: ConnectionError,
                    107: weft.ClientError, 108: ConnectionError}
        for code, fam in families.items():
            self.assertIsInstance(weft.error_for(code), fam)
        self.assertIs(type(weft.error_for(77)), weft.WeftError)
        print(f"codes: {len(codes)} codes of weft.h map to their classes")


class Tensors(unittest.TestCase):
    def test_zero_copy(self) -> None:
        a = randn(2, 3, 4, 5)
        d = _tensors.as_input(a, "a")
        self.assertIs(d.holder, a)
        self.assertEqual(d.struct.data, a.ctypes.data)
        t = torch.randn(2, 3, 4, 5, dtype=torch.bfloat16)
        d = _tensors.as_input(t, "t")
        self.assertEqual(d.struct.data, t.data_ptr())
        self.assertEqual(d.dtype, "bf16")
        raw = np.zeros((4, 4), np.uint16)
        d = _tensors.as_input(weft.Tensor(raw, "bf16"), "raw")
        self.assertEqual(d.struct.data, raw.ctypes.data)
        nc = a.transpose(0, 2, 1, 3)            # non-contiguous: one copy
        d = _tensors.as_input(nc, "nc")
        self.assertIsNot(d.holder, nc)
        self.assertEqual(d.shape, nc.shape)
        with self.assertRaises(TypeError):
            _tensors.as_input(np.zeros(3, np.float64), "f64")
        with self.assertRaises(TypeError):
            _tensors.as_input(np.zeros(3, np.uint16), "u16")   # bf16 must be named
        with self.assertRaises(ValueError):
            _tensors.as_output(np.zeros((4, 4), np.float32).T, "out")

    def test_bf16_bits(self) -> None:
        x = randn(1000)
        bits = weft.f32_to_bf16(x)
        self.assertTrue(np.array_equal(
            bits, torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy()
            .view(np.uint16)))
        self.assertTrue(np.array_equal(weft.bf16_to_f32(bits),
                                       torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
                                       .float().numpy()))


def copy_fixtures(root: Path) -> None:
    for m in ("flux-tiny", "flux-tiny-guidance", "flux-tiny-bf16"):
        shutil.copytree(FIXTURES / m, root / m)
    # refusals: a config that is not JSON, a shape the config contradicts,
    # an F64 checkpoint
    shutil.copytree(FIXTURES / "flux-tiny", root / "not-json")
    (root / "not-json" / "config.json").write_text("{ not json")
    shutil.copytree(FIXTURES / "flux-tiny", root / "not-safetensors")
    st = root / "not-safetensors" / "diffusion_pytorch_model.safetensors"
    st.write_bytes((10).to_bytes(8, "little") + b"{not json}")
    shutil.copytree(FIXTURES / "flux-tiny", root / "bad-shape")
    cfg = json.loads((root / "bad-shape" / "config.json").read_text())
    cfg["in_channels"] = 8
    (root / "bad-shape" / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import load_file, save_file
    (root / "f64").mkdir()
    shutil.copy(FIXTURES / "flux-tiny" / "config.json", root / "f64" / "config.json")
    w = load_file(str(FIXTURES / "flux-tiny" / "diffusion_pytorch_model.safetensors"))
    save_file({k: v.double() for k, v in w.items()},
              str(root / "f64" / "diffusion_pytorch_model.safetensors"))


def io(name: str) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(str(FIXTURES / f"io-{name}.safetensors"))


INPUTS = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep",
          "img_ids", "txt_ids")


class Daemon(unittest.TestCase):
    """One weftd cpu:4 (tp=4) with a model root of the fixtures."""

    d: Weftd
    c: weft.Client
    root: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = Path(tempfile.mkdtemp(prefix="weft-py-root-"))
        cls.root = cls.tmp / "root"
        cls.root.mkdir()
        copy_fixtures(cls.root)
        cls.d = Weftd("cpu:4", mesh="tp=4", model_root=cls.root,
                      extra=["--client-queue-jobs", "64"])
        cls.c = cls.d.connect()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.close()
        rc = cls.d.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"weftd exit status {rc}"

    # -- handshake, status, attention

    def test_hello_status(self) -> None:
        h = self.c.hello()
        self.assertEqual((h.protocol, h.backend, h.devices), (2, "cpu", 4))
        self.assertEqual(weft.library_version, h.weft_version)   # one build
        for f in ("reconfigure", "cp_options", "models"):
            self.assertTrue(self.c.has_feature(f), f)
        self.assertFalse(self.c.has_feature("no-such-feature"))
        s = self.c.status()
        self.assertEqual(len(s.devices), 4)
        self.assertEqual(s.devices[3].name, "cpu:3")
        self.assertIn(s.role, ("", "single"))
        self.assertTrue(s.counters.present)
        self.assertGreater(s.queue_capacity, 0)

    def test_attention_numpy_f32_f16(self) -> None:
        for (B, S, Skv, H, Hkv, D), causal in [((2, 64, 64, 4, 4, 32), False),
                                               ((1, 48, 80, 8, 2, 16), False),
                                               ((1, 96, 96, 4, 1, 64), True)]:
            q, k, v = randn(B, S, H, D), randn(B, Skv, Hkv, D), randn(B, Skv, Hkv, D)
            ref, lse_ref = attention_ref(q, k, v, causal)
            r = self.c.attention(q, k, v, causal=causal, lse=True)
            self.assertEqual(r.out.dtype, np.float32)
            self.assertLess(rel_err(r.out, ref), 2e-5, (B, S, H, D, causal))
            self.assertLess(np.abs(r.lse - lse_ref).max(), 1e-4)
            self.assertEqual(r.result.devices, 4 if H >= 4 else r.result.devices)
            q16, k16, v16 = q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)
            r = self.c.attention(q16, k16, v16, causal=causal)
            self.assertEqual(r.out.dtype, np.float16)
            ref16, _ = attention_ref(q16, k16, v16, causal)
            self.assertLess(rel_err(r.out, ref16), 2e-3)
        # scale, out_dtype, caller's output
        q = randn(1, 32, 4, 16)
        out = np.empty_like(q)
        r = self.c.attention(q, q, q, out=out, scale=0.5)
        self.assertIs(r.out, out)
        self.assertLess(rel_err(out, attention_ref(q, q, q, scale=0.5)[0]), 2e-5)
        r = self.c.attention(q, q, q, out_dtype="f16")
        self.assertEqual(r.out.dtype, np.float16)

    def test_attention_bf16(self) -> None:
        q, k, v = (torch.randn(1, 64, 4, 32, dtype=torch.bfloat16) for _ in range(3))
        r = self.c.attention(q, k, v)
        self.assertEqual(r.out.dtype, torch.bfloat16)
        ref, _ = attention_ref(q.float().numpy(), k.float().numpy(), v.float().numpy())
        self.assertLess(rel_err(r.out.float().numpy(), ref), 2e-2)
        # numpy uint16 bits named bf16: the output comes back as bits
        bits = [weft.f32_to_bf16(x.float().numpy()) for x in (q, k, v)]
        r2 = self.c.attention(*(weft.Tensor(b, "bf16") for b in bits))
        self.assertEqual(r2.out.dtype, np.uint16)
        self.assertTrue(np.array_equal(weft.bf16_to_f32(r2.out), r.out.float().numpy()))
        # inputs untouched
        self.assertTrue(np.array_equal(bits[0], weft.f32_to_bf16(q.float().numpy())))

    def test_async_in_flight(self) -> None:
        qs = [randn(1, 64, 4, 32) for _ in range(8)]
        jobs = [self.c.submit_attention(q, q, q, lse=True) for q in qs]
        self.assertEqual(len({j.id for j in jobs}), 8)
        for q, j in reversed(list(zip(qs, jobs))):
            with j:
                r = j.wait()
                self.assertTrue(j.poll())
                ref, lse_ref = attention_ref(q, q, q)
                self.assertLess(rel_err(r.out, ref), 2e-5)
                self.assertLess(np.abs(r.lse - lse_ref).max(), 1e-4)
        with self.assertRaises(ValueError):
            jobs[0].wait()          # closed

    def test_threads_share_a_client(self) -> None:
        """Four threads on one Client: its lock serialises libweft's calls."""
        errors: List[str] = []

        def work(seed: int) -> None:
            rng = np.random.default_rng(seed)
            for _ in range(5):
                q = rng.standard_normal((1, 32, 4, 16)).astype(np.float32)
                if rel_err(self.c.attention(q, q, q).out, attention_ref(q, q, q)[0]) > 2e-5:
                    errors.append(f"thread {seed}: wrong output")
        ths = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        self.assertEqual(errors, [])

    def test_reconfigure(self) -> None:
        c = self.c
        e0 = c.status().epoch
        with self.assertRaises(weft.BadArgumentError) as cm:
            c.reconfigure(dp=3)
        self.assertEqual(cm.exception.code, 9)
        self.assertIn("world size", cm.exception.message)
        e1 = c.reconfigure(ring=2, ulysses=2)
        self.assertGreater(e1, e0)
        self.assertEqual(c.status().mesh, weft.Mesh(1, 2, 2, 1))
        q, k, v = randn(1, 102, 4, 32), randn(1, 102, 4, 32), randn(1, 102, 4, 32)
        r = c.attention(q, k, v, causal=True, rotate_method="alltoall", ring_anything=True,
                        load_balance=False)
        self.assertEqual(r.result.epoch, e1)
        self.assertLess(rel_err(r.out, attention_ref(q, k, v, True)[0]), 2e-5)
        with self.assertRaises(weft.BadArgumentError):   # 102 tokens do not split in 4
            c.attention(q, k, v, ring_anything=False)
        self.assertGreater(c.reconfigure(tp=4), e1)

    # -- models

    def test_fp8_refused(self) -> None:
        """precision="fp8" on CPU devices: UnsupportedError (29) naming the
        option and the device, for attention and forward, synchronous and
        not; a bad precision is a ValueError, nothing sent; the daemon
        serves the next job."""
        c = self.c
        c.hello()
        self.assertTrue(c.has_feature("fp8"))
        q = randn(1, 32, 4, 16)
        with self.assertRaises(weft.UnsupportedError) as cm:
            c.attention(q, q, q, precision="fp8")
        self.assertEqual(cm.exception.code, 29)
        self.assertIn("precision fp8: device cpu:0 has no fp8 tensor cores",
                      cm.exception.message)
        with self.assertRaises(weft.UnsupportedError):
            c.submit_attention(q, q, q, precision="fp8").wait()
        for bad in ("fp16", "FP8", 1, None):
            with self.assertRaises(ValueError):
                c.attention(q, q, q, precision=bad)  # type: ignore[arg-type]
        r = c.attention(q, q, q, precision="default")
        self.assertLess(rel_err(r.out, attention_ref(q, q, q)[0]), 2e-5)
        c.load_model("tiny-fp8", "flux-tiny")
        try:
            x = io("flux-tiny-f32")
            with self.assertRaises(weft.UnsupportedError) as cm:
                c.forward("tiny-fp8", *(x[n] for n in INPUTS), precision="fp8")
            self.assertIn("precision fp8", cm.exception.message)
            r = c.forward("tiny-fp8", *(x[n] for n in INPUTS))
            self.assertLess(rel_err(r.output.numpy(), x["output_f64"].double().numpy()), 1e-5)
        finally:
            c.unload_model("tiny-fp8")
        print("fp8: refused with UnsupportedError on cpu; the next jobs served")

    def test_models(self) -> None:
        c = self.c
        seen: List[weft.ModelInfo] = []
        info = c.load_model("tiny", "flux-tiny", progress=seen.append,
                            progress_interval_s=0.01)
        self.assertEqual((info.name, info.state, info.family, info.tp), ("tiny", "ready",
                                                                         "flux", 4))
        self.assertEqual(info.bytes_loaded, info.bytes_total)
        self.assertTrue(seen and seen[-1] == info)
        c.load_model("tiny-g", "flux-tiny-guidance",
                     tp_plan={"single_transformer_blocks.*.proj_out":
                              {"style": "packed_rowwise", "blocks": [1, 4]},
                              "transformer_blocks.*.attn.to_q": "colwise"})
        c.load_model("tiny-bf16", "flux-tiny-bf16")
        names = {m.name: m for m in c.list_models()}
        self.assertEqual(set(names), {"tiny", "tiny-g", "tiny-bf16"})
        self.assertEqual(names["tiny-bf16"].dtype, "bf16")

        x = io("flux-tiny-f32")
        ref = x["output_f64"].double().numpy()
        tol = 1e-5
        # torch tensors
        r = c.forward("tiny", *(x[n] for n in INPUTS))
        self.assertIsInstance(r.output, torch.Tensor)
        self.assertLess(rel_err(r.output.numpy(), ref), tol)
        # numpy, asynchronous, a deadline that is not reached
        job = c.submit_forward("tiny", *(x[n].numpy() for n in INPUTS), deadline_ms=60000)
        with job:
            out = job.wait().output
        self.assertIsInstance(out, np.ndarray)
        self.assertLess(rel_err(out, ref), tol)
        xg = io("flux-tiny-guidance-f32")
        r = c.forward("tiny-g", *(xg[n] for n in INPUTS), xg["guidance"])
        self.assertLess(rel_err(r.output.numpy(), xg["output_f64"].double().numpy()), tol)
        xb = io("flux-tiny-bf16")
        r = c.forward("tiny-bf16", *(xb[n] for n in INPUTS))
        self.assertEqual(r.output.dtype, torch.bfloat16)
        self.assertLess(rel_err(r.output.float().numpy(), xb["output"].double().numpy()), 2e-2)
        r = c.forward("tiny-bf16", *(xb[n] for n in INPUTS), out_dtype="f32")
        self.assertEqual(r.output.dtype, torch.float32)

        # refusals, each with its code and the daemon's words
        with self.assertRaises(weft.BadFieldError) as cm:        # guidance missing
            c.forward("tiny-g", *(xg[n] for n in INPUTS))
        self.assertIn("guidance", cm.exception.message)
        with self.assertRaises(weft.BadArgumentError) as cm:     # in_channels
            c.forward("tiny", *(xb[n] for n in INPUTS[:0]), torch.zeros(2, 16, 8),
                      *(x[n] for n in INPUTS[1:]))
        self.assertIn("in_channels", cm.exception.message)
        with self.assertRaises(weft.BadArgumentError):
            c.load_model("tiny", "flux-tiny")                     # name in use
        with self.assertRaises(weft.MalformedError) as cm:
            c.load_model("m1", "not-safetensors")
        self.assertIn("header JSON invalid", cm.exception.message)
        with self.assertRaises(weft.MalformedError) as cm:
            c.load_model("m1", "not-json")
        self.assertIn("config.json", cm.exception.message)
        with self.assertRaises(weft.BadShapeError):
            c.load_model("m2", "bad-shape")
        with self.assertRaises(weft.BadDtypeError) as cm:
            c.load_model("m3", "f64")
        self.assertEqual(cm.exception.code, 6)
        with self.assertRaises(weft.BadFieldError):
            c.load_model("m4", "../flux-tiny")
        with self.assertRaises(weft.BadFieldError):
            c.load_model("bad name", "flux-tiny")
        self.assertEqual({m.name for m in c.list_models()}, {"tiny", "tiny-g", "tiny-bf16"})

        for n in ("tiny", "tiny-g", "tiny-bf16"):
            c.unload_model(n)
        self.assertEqual(c.list_models(), [])
        with self.assertRaises(weft.BadArgumentError) as cm:
            c.forward("tiny", *(x[n] for n in INPUTS))
        self.assertIn("not loaded", cm.exception.message)
        with self.assertRaises(weft.BadArgumentError):
            c.unload_model("tiny")

    def forward_counts(self) -> tuple:
        """What the daemon counts of requests: refused ones, and forward
        jobs served and failed. Unchanged: no forward reached it."""
        s = self.c.status()
        fwd = [(o.served, o.failed) for o in s.counters.ops if o.op == "forward"]
        return s.requests_rejected, fwd

    def test_schema_and_named_forward(self) -> None:
        """list_models' config and schema; forward by name (any family's
        call) against FLUX's, bitwise; the client-side refusals, each
        naming the tensor, with nothing sent; a schema refreshed after
        the model was reloaded with another config."""
        c = self.c
        c.load_model("s-tiny", "flux-tiny")
        c.load_model("s-g", "flux-tiny-guidance")
        try:
            m = {x.name: x for x in c.list_models()}["s-tiny"]
            cfg = m.config
            assert cfg is not None and m.schema is not None
            self.assertIsInstance(cfg["num_layers"], int)
            self.assertIs(cfg["guidance_embeds"], False)
            self.assertIsInstance(cfg["axes_dims_rope"], list)
            self.assertEqual(cfg.in_channels, cfg["in_channels"])     # attribute access
            n_axes = len(cfg["axes_dims_rope"])
            out_c = cfg["patch_size"] ** 2 * cfg["out_channels"]
            self.assertEqual([t.name for t in m.schema.inputs], list(INPUTS))
            shapes = {t.name: t.shape for t in m.schema.inputs + m.schema.outputs}
            self.assertEqual(shapes, {
                "hidden_states": ("B", "S_img", cfg["in_channels"]),
                "encoder_hidden_states": ("B", "S_txt", cfg["joint_attention_dim"]),
                "pooled_projections": ("B", cfg["pooled_projection_dim"]),
                "timestep": ("B",), "img_ids": ("S_img", n_axes), "txt_ids": ("S_txt", n_axes),
                "output": ("B", "S_img", out_c)})
            hs = m.schema.input("hidden_states")
            assert hs is not None
            self.assertEqual(hs.labels, ("B", "S_img", "in_channels"))
            self.assertEqual(hs.dtypes, ("f32", "f16", "bf16"))
            self.assertFalse(hs.optional)
            self.assertEqual([t.name for t in m.schema.outputs], ["output"])
            g = c.model_schema("s-g")
            self.assertEqual([t.name for t in g.inputs], list(INPUTS) + ["guidance"])
            self.assertEqual(g.input("guidance").shape, ("B",))  # type: ignore[union-attr]

            # the named call and FLUX's give the same bits (numpy and torch,
            # synchronous and not)
            x = io("flux-tiny-f32")
            named = {n: x[n].numpy() for n in INPUTS}
            flux = c.forward("s-tiny", *named.values())
            r = c.forward_named("s-tiny", named)
            self.assertIsInstance(r.output, np.ndarray)
            self.assertEqual(list(r.outputs), ["output"])
            self.assertIs(r.outputs["output"], r.output)
            self.assertTrue(np.array_equal(r.output, flux.output))
            self.assertTrue(np.array_equal(c.forward("s-tiny", named).output, flux.output))
            with c.submit_forward_named("s-tiny", named) as job:
                self.assertTrue(np.array_equal(job.wait().output, flux.output))
            rt = c.forward_named("s-tiny", {n: x[n] for n in INPUTS}, out_dtype="f16")
            self.assertEqual(rt.output.dtype, torch.float16)
            self.assertTrue(torch.equal(
                rt.output, c.forward("s-tiny", *(x[n] for n in INPUTS), out_dtype="f16").output))
            mine = {"output": np.empty_like(flux.output)}
            self.assertIs(c.forward_named("s-tiny", named, out=mine).output, mine["output"])
            self.assertTrue(np.array_equal(mine["output"], flux.output))
            xg = io("flux-tiny-guidance-f32")
            rg = c.forward_named("s-g", {n: xg[n] for n in list(INPUTS) + ["guidance"]})
            self.assertTrue(torch.equal(
                rg.output, c.forward("s-g", *(xg[n] for n in INPUTS), xg["guidance"]).output))

            # refusals before sending: each names the tensor, and the daemon
            # counts no request and no forward
            before = self.forward_counts()
            B, S_img = x["hidden_states"].shape[:2]
            bad: List[Any] = [
                (weft.BadArgumentError, "unknown input", dict(named, latents=named["timestep"]),
                 {}, 'unexpected tensor "latents"'),
                (weft.BadArgumentError, "wrong rank", dict(named, timestep=named["timestep"][:, None]),
                 {}, "timestep: rank must be 1 (B), got 2"),
                (weft.BadArgumentError, "B mismatch",
                 dict(named, pooled_projections=np.concatenate([named["pooled_projections"]] * 2)),
                 {}, f"pooled_projections: dim 0 (B) is {2 * B}, but hidden_states gave B = {B}"),
                (weft.BadArgumentError, "fixed size",
                 dict(named, encoder_hidden_states=named["encoder_hidden_states"][..., :-1]), {},
                 f"encoder_hidden_states: dim 2 (joint_attention_dim) must be "
                 f"{cfg['joint_attention_dim']}"),
                (weft.BadArgumentError, "S_img mismatch",
                 dict(named, img_ids=named["img_ids"][:-1]), {},
                 f"img_ids: dim 0 (S_img) is {S_img - 1}, but hidden_states gave S_img"),
                (weft.BadFieldError, "missing input",
                 {k: v for k, v in named.items() if k != "txt_ids"}, {}, 'no tensor named "txt_ids"'),
                (weft.BadArgumentError, "unknown output", named,
                 {"lse": np.empty(3, np.float32)}, 'unexpected output "lse"'),
                (weft.BadArgumentError, "output shape", named,
                 {"output": np.empty((B, S_img, out_c + 1), np.float32)},
                 f"output output: dim 2 (out_channels) must be {out_c}"),
            ]
            for cls, what, ins, outs, words in bad:
                with self.assertRaises(cls, msg=what) as cm:
                    c.forward_named("s-tiny", ins, out=outs)
                self.assertIn(words, cm.exception.message, what)
                with self.assertRaises(cls, msg=what):
                    c.submit_forward_named("s-tiny", ins, out=outs)
            with self.assertRaises(weft.BadArgumentError) as cm:  # FLUX's form, out_channels
                c.forward("s-tiny", *named.values(), out_channels=out_c + 2)
            self.assertIn("output output: dim 2 (out_channels)", cm.exception.message)
            self.assertEqual(self.forward_counts(), before, "a refused forward was sent")
            with self.assertRaises(TypeError):
                c.forward("s-tiny", named, named["timestep"])
            with self.assertRaises(weft.BadArgumentError) as cm:
                c.forward_named("absent", named)
            self.assertIn("model 'absent' is not loaded", cm.exception.message)

            # another connection reloads "s-tiny" with guidance: the cached
            # schema refuses guidance, the fresh one takes it
            with self.d.connect() as other:
                other.unload_model("s-tiny")
                other.load_model("s-tiny", "flux-tiny-guidance")
            ins_g = {n: xg[n].numpy() for n in list(INPUTS) + ["guidance"]}
            self.assertTrue(np.array_equal(c.forward_named("s-tiny", ins_g).output,
                                           rg.output.numpy()))
            self.assertEqual(len(c.model_schema("s-tiny").inputs), 7)
        finally:
            for n in ("s-tiny", "s-g"):
                c.unload_model(n)
        print("schema: FLUX's inputs and output with the config's sizes; named forward "
              f"bitwise equal to FLUX's; {len(bad) + 1} refusals sent nothing")

    def test_weftctl_models_and_forward(self) -> None:
        """weftctl models prints each model's config and schema under its
        row; weftctl forward reads the inputs by the schema's names, checks
        the output against the file's reference and writes every output
        (--out), bitwise what the binding's forward gives."""
        c = self.c
        c.load_model("ctl-g", "flux-tiny-guidance")
        try:
            def ctl(*args: str) -> subprocess.CompletedProcess:
                return subprocess.run([WEFTCTL, "--endpoint", self.d.endpoint, *args],
                                      capture_output=True, text=True, timeout=EVENT_MS / 1000)

            p = ctl("models")
            self.assertEqual(p.returncode, 0, p.stderr)
            rows = p.stdout.splitlines()
            i = next(k for k, line in enumerate(rows) if line.startswith("ctl-g "))
            self.assertRegex(rows[i], r"^ctl-g +ready +flux +f32 ")
            cfg = c.model_schema("ctl-g")
            block = rows[i + 1:i + 2 + len(cfg.inputs) + len(cfg.outputs)]
            self.assertRegex(block[0], r"^    config patch_size=1 in_channels=16 .*"
                                       r"guidance_embeds=true axes_dims_rope=\[\d+(,\d+)*\]$")
            self.assertEqual(block[1], "    input  hidden_states (B, S_img, in_channels=16) "
                                       "f32/f16/bf16")
            self.assertEqual(block[7], "    input  guidance (B) f32/f16/bf16")
            self.assertRegex(block[8], r"^    output output \(B, S_img, out_channels=\d+\) ")
            with tempfile.TemporaryDirectory() as d:
                out = Path(d) / "out.safetensors"
                p = ctl("forward", "--model", "ctl-g", "--inputs",
                        str(FIXTURES / "io-flux-tiny-guidance-f32.safetensors"),
                        "--out", str(out))
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertRegex(p.stdout, r"(?m)^forward ctl-g  B=2 S_img=\d+ S_txt=\d+  "
                                           r"f32 -> f32  devices 4 ")
                self.assertRegex(p.stdout, r"(?m)^max abs error \S+ \(tolerance \S+\) PASS$")
                self.assertIn(f"wrote 1 output to {out}", p.stdout)
                from safetensors.numpy import load_file
                got = load_file(str(out))
            xg = io("flux-tiny-guidance-f32")
            want = c.forward("ctl-g", *(xg[n] for n in INPUTS), xg["guidance"]).output
            self.assertEqual(list(got), ["output"])
            self.assertTrue(np.array_equal(got["output"], want.numpy()))
            # a file without the guidance this model needs: the daemon's words
            p = ctl("forward", "--model", "ctl-g", "--inputs",
                    str(FIXTURES / "io-flux-tiny-f32.safetensors"))
            self.assertEqual(p.returncode, 1)
            self.assertIn('no tensor named "guidance"', p.stderr)
        finally:
            c.unload_model("ctl-g")

    # -- stopped jobs

    def test_deadline_cancel_busy_timeout(self) -> None:
        """A daemon of its own (cpu:4, tp=4: a job has a part on each
        device) holds every job part until the test opens the gate: the
        first job runs held, the others queue behind it."""
        hold = JobHold()
        d = Weftd("cpu:4", mesh="tp=4", env=hold.env,
                  extra=["--client-queue-jobs", "64", "--reconfigure-timeout-ms", "0"])
        try:
            with d.connect() as c, d.connect() as other, d.connect() as watcher:
                held = randn(1, 256, 16, 64)
                small = randn(1, 64, 4, 32)
                long_job = c.submit_attention(held, held, held)
                self.assertTrue(wait_for(lambda: sum(x.busy for x in watcher.status().devices)
                                         == 4), "the held job never showed on 4 devices")
                late = c.submit_attention(small, small, small, deadline_ms=1)
                x = c.submit_attention(small, small, small)
                y = c.submit_attention(small, small, small)
                with self.assertRaises(weft.ReplyTimeoutError):
                    long_job.wait(timeout_ms=1)                   # held: still running
                self.assertFalse(long_job.poll())
                self.assertTrue(x.cancel())
                c.cancel_id(y.id)
                # the client's own timeout, on a job that is queued behind
                with self.assertRaises(weft.ReplyTimeoutError):
                    with weft.connect(d.endpoint, 1) as quick:
                        quick.attention(small, small, small)
                # a reconfigure waits for the held job; a second one meanwhile is busy
                box: Dict[str, Any] = {}
                th = threading.Thread(
                    target=lambda: box.setdefault("epoch", other.reconfigure(tp=4)))
                th.start()
                try:
                    self.assertTrue(wait_for(lambda: watcher.status().reconfiguring),
                                    "the reconfigure never showed draining")
                    with self.assertRaises(weft.BusyError) as cm:
                        watcher.reconfigure(tp=4)
                    self.assertEqual(cm.exception.code, 23)
                finally:
                    hold.open_gate(4)
                    th.join()
                self.assertIn("epoch", box)
                r = long_job.wait()
                self.assertLess(rel_err(r.out, attention_ref(held, held, held)[0]), 2e-5)
                with self.assertRaises(weft.DeadlineError) as cm2:
                    late.wait()
                self.assertEqual(cm2.exception.code, 26)
                for j in (x, y):
                    with self.assertRaises(weft.CancelledError):
                        j.wait()
                    self.assertFalse(j.cancel())                  # finished already
                for j in (long_job, late, x, y):
                    j.close()
                with self.assertRaises(weft.BadArgumentError):
                    c.cancel_id(y.id)
        finally:
            self.assertEqual(d.stop(), 0)
            hold.close()

    def test_packaging_and_example(self) -> None:
        """client/python builds a wheel offline from the source tree itself
        (pip wheel --no-build-isolation: its build backend needs nothing
        installed) and writes nothing into it; a fresh venv (pip from
        ensurepip, nothing else) installs it offline, with and without
        build isolation, `weft` command included; the README example runs
        from the installed package."""
        pkg = SOURCE / "client" / "python"

        def tree() -> List[str]:
            return sorted(str(Path(r, n).relative_to(pkg)) for r, ds, fs in os.walk(pkg)
                          for n in ds + fs)

        before = tree()
        with tempfile.TemporaryDirectory() as d:
            pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
            wheels = Path(d) / "wheels"
            subprocess.run(pip + ["wheel", "--quiet", "--no-deps", "--no-build-isolation",
                                  "--no-index", "-w", str(wheels), str(pkg)], check=True)
            wheel, = wheels.glob("weft-*.whl")
            venv = Path(d) / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            vpip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
            for isolation in (["--no-build-isolation"], []):
                subprocess.run(vpip + ["install", "--quiet", "--no-deps", "--no-index",
                                       "--force-reinstall"] + isolation + [str(pkg)],
                               check=True)
            self.assertTrue((venv / "bin" / "weft").is_file())
            self.assertEqual(tree(), before, "building and installing wrote into client/python")
            target = Path(d) / "site"
            subprocess.run(pip + ["install", "--quiet", "--no-deps", "--no-index", "--target",
                                  str(target), str(wheel)], check=True)
            for f in ("__init__.py", "client.py", "diffusers.py", "py.typed"):
                self.assertTrue((target / "weft" / f).is_file(), f)
            env = dict(os.environ, PYTHONPATH=str(target))
            p = subprocess.run([sys.executable, str(pkg / "examples" / "attention.py"),
                                self.d.endpoint], env=env, cwd=d, capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            print(p.stdout.strip())
            self.assertIn("max |out - fp64 reference|", p.stdout)
            self.assertIn("refused as expected: WF_E_BAD_ARGUMENT", p.stdout)
            # the library found without WEFT_LIB: through WEFT_BUILD_DIR
            lib = Path(os.environ["WEFT_LIB"])
            env2 = {k: v for k, v in env.items() if k != "WEFT_LIB"}
            env2["WEFT_BUILD_DIR"] = str((lib if lib.is_dir() else lib.parent).parent)
            p = subprocess.run([sys.executable, "-c", "import weft; print(weft.library_path)"],
                               env=env2, cwd=d, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            env2["WEFT_LIB"] = str(Path(d) / "nothing.so")
            p = subprocess.run([sys.executable, "-c", "import weft"], env=env2, cwd=d,
                               capture_output=True, text=True)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("cannot load libweft from WEFT_LIB", p.stderr)
            # a library planted in ./build/client of the working directory is
            # never loaded: its constructor would run as the user
            planted = Path(d) / "build" / "client"
            planted.mkdir(parents=True)
            marker = Path(d) / "planted-ran"
            (Path(d) / "evil.c").write_text(
                "#include <stdio.h>\n"
                "__attribute__((constructor)) static void run(void) {\n"
                f"    FILE *f = fopen(\"{marker}\", \"w\"); if (f) fclose(f);\n"
                "}\n")
            subprocess.run(["cc", "-shared", "-fPIC", "-o", str(planted / "libweft.so.0"),
                            str(Path(d) / "evil.c")], check=True)
            env3 = {k: v for k, v in env.items() if k not in ("WEFT_LIB", "WEFT_BUILD_DIR")}
            p = subprocess.run([sys.executable, "-c", "import weft; print(weft.library_path)"],
                               env=env3, cwd=d, capture_output=True, text=True)
            self.assertFalse(marker.exists(), "the planted library's constructor ran")
            self.assertNotIn(str(planted), p.stdout + p.stderr)


class Refusals(unittest.TestCase):
    """Daemons set up to refuse: limits, a queue of one, a stop, CURVE."""

    def test_limit_and_memory(self) -> None:
        d = Weftd("cpu:2", extra=["--max-job-flops", "10000000000",
                                  "--cpu-memory", "1048576"])
        try:
            with d.connect() as c:
                q = randn(1, 4096, 4, 64)                 # 1.7e10 flops > 1e10
                with self.assertRaises(weft.LimitError) as cm:
                    c.attention(q, q, q)
                self.assertEqual(cm.exception.code, 3)
                q = randn(256, 16, 4, 64)                 # 4 MiB a tensor > 1 MiB a device
                with self.assertRaises(weft.NoMemoryError) as cm:
                    c.attention(q, q, q)
                self.assertEqual(cm.exception.code, 21)
                with self.assertRaises(weft.BadArgumentError):   # no model root
                    c.load_model("m", "flux-tiny")
        finally:
            self.assertEqual(d.stop(), 0)

    def test_queue_full_and_shutting_down(self) -> None:
        """The first job is held on the one device (WEFT_TEST_HOLD_JOBS):
        the next fills the queue of one, the two after it are refused."""
        hold = JobHold()
        d = Weftd("cpu:1", env=hold.env,
                  extra=["--queue-capacity", "1", "--client-queue-jobs", "1",
                         "--drain-timeout-ms", "0"])
        with d.connect() as c:
            small = randn(1, 64, 4, 32)
            jobs = [c.submit_attention(small, small, small)]
            self.assertTrue(wait_for(lambda: c.status().in_flight == 1),
                            "the held job never showed running")
            jobs += [c.submit_attention(small, small, small) for _ in range(3)]
            c.status()          # a round trip: every job above was received
            d.terminate()       # drain_timeout_ms 0: queued jobs never run
            codes = []
            for j in jobs:
                try:
                    j.wait()
                    codes.append(0)
                except weft.WeftError as e:
                    codes.append(e.code)
                j.close()
        rc = d.stop()
        hold.close()
        self.assertEqual(codes[1:], [22, 20, 20], codes)  # queued, then the queue full
        self.assertEqual(rc, 0)

    def test_curve(self) -> None:
        tmp = Path(tempfile.mkdtemp(prefix="weft-py-keys-"))
        try:
            for k in ("daemon", "admin", "submit", "stranger"):
                subprocess.run([WEFTCTL, "keygen", str(tmp / k)], check=True,
                               capture_output=True)

            def pub(k: str) -> str:
                m = re.search(r"^public-key = (\S+)", (tmp / f"{k}.pub").read_text(), re.M)
                assert m
                return m.group(1)

            (tmp / "clients").write_text(f"admin {pub('admin')} ops\n"
                                         f"submit {pub('submit')} runner\n")
            ep = f"tcp://127.0.0.1:{free_port()}"
            # readiness is a hello with the admin's keys
            d = Weftd("cpu:2", endpoint=ep,
                      extra=["--key-file", str(tmp / "daemon"),
                             "--client-keys", str(tmp / "clients")],
                      ready_keys=dict(server_key=str(tmp / "daemon.pub"),
                                      client_key_file=str(tmp / "admin")))
            try:
                srv = str(tmp / "daemon.pub")
                with weft.connect(ep, EVENT_MS, server_key=srv,
                                  client_key_file=str(tmp / "admin")) as c:
                    self.assertEqual(c.hello().devices, 2)
                    c.reconfigure(tp=2)
                with weft.connect(ep, EVENT_MS, server_key=pub("daemon"),
                                  client_key_file=str(tmp / "submit")) as c:
                    q = randn(1, 32, 2, 16)
                    self.assertLess(rel_err(c.attention(q, q, q).out,
                                            attention_ref(q, q, q)[0]), 2e-5)
                    with self.assertRaises(weft.DeniedError) as cm:
                        c.reconfigure(tp=2)
                    self.assertEqual(cm.exception.code, 10)
                with weft.connect(ep, EVENT_MS, server_key=srv,
                                  client_key_file=str(tmp / "stranger")) as c:
                    with self.assertRaises(weft.AuthError) as cm:
                        c.hello()
                    self.assertEqual(cm.exception.code, 107)
                # the keys from the environment (libweft reads them at connect)
                os.environ["WEFT_SERVER_KEY"] = srv
                os.environ["WEFT_CLIENT_KEY"] = str(tmp / "admin")
                try:
                    with weft.connect(ep, EVENT_MS) as c:
                        self.assertGreater(c.reconfigure(tp=2), 0)
                finally:
                    del os.environ["WEFT_SERVER_KEY"], os.environ["WEFT_CLIENT_KEY"]
                with self.assertRaises(weft.AuthError):           # no keys at all
                    with weft.connect(ep, EVENT_MS) as c:
                        c.hello()
                with self.assertRaises(weft.BadArgumentError):   # keys on ipc://
                    weft.connect("ipc:///tmp/x.sock", 1000, server_key=srv,
                                 client_key_file=str(tmp / "admin"))
            finally:
                self.assertEqual(d.stop(), 0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_connect_error(self) -> None:
        with self.assertRaises(weft.ConnectError) as cm:
            weft.connect("bogus://nowhere", 1000)
        self.assertEqual(cm.exception.code, 102)
        self.assertTrue(cm.exception.message)

    def test_connect_timeout(self) -> None:
        """No daemon at the endpoint: with connect_timeout_ms the first call
        raises ConnectError (102) naming the endpoint, bounded by that
        timeout and not by the reply timeout (10 min, above ctest's bound);
        without it, the reply timeout bounds the wait (ReplyTimeoutError)."""
        for ep in (f"tcp://127.0.0.1:{free_port()}", f"ipc://{tempfile.gettempdir()}/"
                   f"weft-py-nobody-{os.getpid()}.sock"):
            with weft.connect(ep, 600000, connect_timeout_ms=300) as c:
                self.assertEqual(c.reopen().connect_timeout_ms, 300)
                with self.assertRaises(weft.ConnectError) as cm:
                    c.hello()
                self.assertEqual(cm.exception.code, 102)
                self.assertIn(f"'{ep}' within the connect timeout (300 ms)",
                              cm.exception.message)
            with weft.connect(ep, 300) as c, self.assertRaises(weft.ReplyTimeoutError):
                c.status()

    def test_daemon_gone(self) -> None:
        """The daemon closes the connection at the end of its drain: the
        next call raises ConnectionClosedError (108) as soon as reconnecting
        fails; the client's timeout (10 min, above ctest's bound) is never
        waited for."""
        d = Weftd("cpu:1")
        with d.connect(600000) as c:
            c.hello()                          # a connection is up
            self.assertEqual(d.stop(), 0)      # SIGTERM, drained, exited
            with self.assertRaises(weft.ConnectionClosedError) as cm:
                c.hello()
            self.assertEqual(cm.exception.code, 108)
            self.assertIsInstance(cm.exception, ConnectionError)
            self.assertIn("closed", cm.exception.message)


if __name__ == "__main__":
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2)
    print(f"test_binding: {time.monotonic() - t0:.1f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)
