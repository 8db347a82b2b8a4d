#!/usr/bin/env python3
"""flux_bench.py — weft's FLUX forward beside diffusers' on the same GPU:
one transformer of FLUX.1-dev's configuration with
seeded random bf16 weights, one forward at 1024 x 1024 (4096 image + 512
text tokens, B = 1), the same weights and inputs for both, in one run.

  1. the bf16 matrix rate of this GPU, measured here (torch.matmul, bf16,
     M = N = K = --matmul, random data, median of 10 after warm-up);
  2. the model: diffusers' FluxTransformer2DModel built on the device in
     bf16, every parameter drawn anew from a seeded generator (matrices
     std 1/sqrt(fan_in), the AdaLN modulation matrices 0.25 of that so
     that the 57 residual updates stay moderate, biases 0.02, q / k RMS
     norm weights 1 + 0.05 N(0, 1)), written ONCE as a diffusers model
     directory (config.json from the model's own config, one
     diffusion_pytorch_model.safetensors written tensor by tensor:
     no second copy of the weights in host memory);
  3. diffusers' forward on seeded inputs: its bf16 output is the
     reference put into the inputs file (io.safetensors: the inputs as
     passed, plus `output`), so `weftctl forward` prints the max
     difference between the two outputs against the tolerance this
     script derives and passes as --tolerance (bench_lib's
     derived_tolerance). Then diffusers runs the same bf16 weights
     in f32 (TF32 off; --no-f32-ref skips it): both bf16 outputs are
     compared with that result (weft's through a second inputs file), the
     yardstick for the weft - diffusers difference: weft must be within
     2x diffusers' own bf16 error of it, and so within 3x of diffusers'
     output (the tolerance; without the f32 run, the probabilistic bound
     4.5 sqrt(2 K) u over roundings()'s K). The timestep (0.5) and
     guidance (4.0) are chosen so that diffusers' bf16 rounding of
     t * 1000 changes nothing: 500 and 4000 are exact in bf16 (0.625 would
     become 624 there and 625 in f32, a difference of the embedding that
     is not arithmetic error);
  4. weftd (--devices, default cuda) loads the directory through
     `weftctl load`; then REPEATS alternations of: diffusers eager, ITERS
     forwards timed each with CUDA events after warm-up; weft,
     `weftctl forward --iters ITERS` (its median wall time per forward,
     client round trip included: the inputs (4.5 MB) and the output
     (0.5 MB) cross the daemon's socket each time; the daemon's own
     compute time of the last iteration is printed beside it);
     A second weftd with --cuda-graphs blocks (its arena
     --graphs-gpu-memory) serves the same directory beside the first, and
     each repeat times it after the first (`weftctl forward --iters ITERS`
     again): the ratio without / with graphs, round trip and daemon
     compute, is the graphs' figure (on CPU devices the setting does
     nothing: the figure then only checks the plumbing). --no-graphs, or
     under --graphs-need-s left before the load, skips it;
  5. with --compile, torch.compile(model) (default mode) likewise,
     alternating with weft again, if the deadline leaves room for it;
  6. the summary: ms per forward (median of the per-repeat medians, and
     min-max), the ratio diffusers / weft (> 1: weft is faster), model
     FLOP/s as a share of the matrix rate of step 1, the max |weft -
     diffusers|. The FLOPs are counted from the configuration below
     (flop_count), not measured.

Written to --out (default $OUT, else /tmp/flux-bench): flux-bench.txt (what
stdout shows) and flux-bench.json (every figure). Exit 0 when every step
ran and weft's output is within tolerance, 1 when weft failed or was out
of tolerance, 2 on a usage or environment error. --dry-run prints the
configuration and the FLOP count without torch; --tiny runs the whole
path on a small configuration (any device, CPU included: the plumbing
check of this script against a CPU weftd).

    python3 tests/gpu/flux_bench.py --weftd build-gpu/daemon/weftd \
        --weftctl build-gpu/client/weftctl [--devices cuda] [--compile]
"""
import argparse
import json
import math
import os
import shutil
import statistics
import struct
import sys
import time

from bench_lib import (OUT_DIR, Timer, Weft, add_weftd_args, derived_tolerance, elapsed,
                       fmt, reference, versions_and_rate,
                       parse_weftctl_forward, say, spread, start, torch_setup, weftd_flags,
                       write_log)

# FLUX.1-dev's transformer (diffusers' FluxTransformer2DModel defaults,
# guidance-distilled).
FLUX_DEV = dict(
    patch_size=1, in_channels=64, out_channels=None, num_layers=19,
    num_single_layers=38, attention_head_dim=128, num_attention_heads=24,
    joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
    axes_dims_rope=[16, 56, 56],
)
# The plumbing check: same structure, small (runs on a CPU in seconds).
TINY = dict(FLUX_DEV, num_layers=2, num_single_layers=2, attention_head_dim=16,
            num_attention_heads=4, joint_attention_dim=64, pooled_projection_dim=32,
            in_channels=16, axes_dims_rope=[4, 6, 6])
WEIGHT_SEED = 20261201
INPUT_SEED = 1201
# ---------------------------------------------------------------- FLOPs
def roundings(cfg):
    """The tensors weft's bf16 device path rounds on the way to the
    output (tests/fixtures/README.md, "Tolerances of the device path"):
    8 in the embedders and the time path, 7 per double block, 5 per
    single block (the attention's P among them), 2 more with a guidance
    embedder."""
    return (8 + 7 * cfg["num_layers"] + 5 * cfg["num_single_layers"]
            + (2 if cfg["guidance_embeds"] else 0))


def flop_count(cfg, s_img, s_txt, batch=1):
    """Model FLOPs of one forward: every linear layer 2 * rows * in * out,
    attention 4 * B * H * S^2 * D per block (Q K^T and P V, S = image +
    text tokens, non-causal). Elementwise work (norms, RoPE, GELU, softmax)
    is not counted. Returns {part: flops}."""
    H, Dh = cfg["num_attention_heads"], cfg["attention_head_dim"]
    D = H * Dh
    mlp = 4 * D
    S = s_img + s_txt
    B = batch
    out_ch = (cfg["out_channels"] or cfg["in_channels"]) * cfg["patch_size"] ** 2

    def lin(rows, fin, fout):
        return 2 * rows * fin * fout

    f = {}
    # embedders: x, context, time (256 -> D -> D), guidance, pooled text
    f["embed"] = (lin(B * s_img, cfg["in_channels"], D) + lin(B * s_txt, cfg["joint_attention_dim"], D)
                  + lin(B, 256, D) + lin(B, D, D)
                  + (lin(B, 256, D) + lin(B, D, D) if cfg["guidance_embeds"] else 0)
                  + lin(B, cfg["pooled_projection_dim"], D) + lin(B, D, D))
    # double block: AdaLN-Zero of each stream (D -> 6D on B rows), per
    # stream q, k, v, out (D -> D), ff (D -> 4D -> D)
    per_stream = lambda rows: 4 * lin(rows, D, D) + lin(rows, D, mlp) + lin(rows, mlp, D)
    dbl_lin = 2 * lin(B, D, 6 * D) + per_stream(B * s_img) + per_stream(B * s_txt)
    # single block: AdaLN-Zero-single (D -> 3D), q, k, v, proj_mlp, proj_out (5D -> D)
    sgl_lin = (lin(B, D, 3 * D) + 3 * lin(B * S, D, D) + lin(B * S, D, mlp)
               + lin(B * S, D + mlp, D))
    attn = 4 * B * H * S * S * Dh
    f["double_linear"] = cfg["num_layers"] * dbl_lin
    f["single_linear"] = cfg["num_single_layers"] * sgl_lin
    f["attention"] = (cfg["num_layers"] + cfg["num_single_layers"]) * attn
    f["out"] = lin(B, D, 2 * D) + lin(B * s_img, D, out_ch)
    f["total"] = sum(f.values())
    return f


def param_count(cfg):
    """Parameters of the configuration (weights + biases), by the same
    enumeration as flop_count: the checkpoint is 2 bytes each in bf16."""
    H, Dh = cfg["num_attention_heads"], cfg["attention_head_dim"]
    D = H * Dh
    mlp = 4 * D
    out_ch = (cfg["out_channels"] or cfg["in_channels"]) * cfg["patch_size"] ** 2
    lin = lambda fin, fout: fin * fout + fout
    emb = (lin(cfg["in_channels"], D) + lin(cfg["joint_attention_dim"], D) + lin(256, D) + lin(D, D)
           + (lin(256, D) + lin(D, D) if cfg["guidance_embeds"] else 0)
           + lin(cfg["pooled_projection_dim"], D) + lin(D, D))
    stream = 4 * lin(D, D) + lin(D, mlp) + lin(mlp, D)
    dbl = 2 * lin(D, 6 * D) + 2 * stream + 4 * Dh  # + norm_q/k, norm_added_q/k
    sgl = lin(D, 3 * D) + 3 * lin(D, D) + lin(D, mlp) + lin(D + mlp, D) + 2 * Dh
    return emb + cfg["num_layers"] * dbl + cfg["num_single_layers"] * sgl \
        + lin(D, 2 * D) + lin(D, out_ch)


def build_model(torch, cfg, device):
    """FluxTransformer2DModel in bf16 on DEVICE, parameters drawn anew from
    a seeded generator on that device (module construction's own init is
    thrown away; construction happens in bf16 directly on the device)."""
    from diffusers import FluxTransformer2DModel
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = FluxTransformer2DModel(**cfg)
    finally:
        torch.set_default_dtype(prev)
    g = torch.Generator(device=device).manual_seed(WEIGHT_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # drawn in f32 on the device, rounded once to bf16
            r = torch.randn(p.shape, device=device, dtype=torch.float32, generator=g)
            if p.dim() > 1:
                scale = 1.0 / math.sqrt(p.shape[-1])
                if name.endswith("norm1.linear.weight") or name.endswith("norm1_context.linear.weight") \
                        or name.endswith("norm.linear.weight") or name.endswith("norm_out.linear.weight"):
                    scale *= 0.25
                p.copy_(r * scale)
            elif "norm_q" in name or "norm_k" in name or "norm_added_" in name:
                p.copy_(1.0 + 0.05 * r)
            else:
                p.copy_(0.02 * r)
            del r
    return model.eval()


ST_DTYPES = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32"}


def write_checkpoint(torch, model, path):
    """DIR/config.json (the model's config, as save_pretrained writes it)
    and DIR/diffusion_pytorch_model.safetensors: the safetensors header,
    then each tensor's bytes in name order, copied to the host one tensor
    at a time. Returns bytes written."""
    os.makedirs(path, exist_ok=True)
    model.save_config(path)
    sd = model.state_dict()
    names = sorted(sd)
    header, off = {"__metadata__": {"format": "pt", "writer": "tests/gpu/flux_bench.py"}}, 0
    for n in names:
        t = sd[n]
        nbytes = t.numel() * t.element_size()
        header[n] = {"dtype": ST_DTYPES[str(t.dtype)], "shape": list(t.shape),
                     "data_offsets": [off, off + nbytes]}
        off += nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    tmp = os.path.join(path, "diffusion_pytorch_model.safetensors.part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for n in names:
            t = sd[n].detach().contiguous()
            # bf16 has no numpy dtype: write its bits as int16
            view = t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)
            view.cpu().numpy().tofile(f)
    os.replace(tmp, os.path.join(path, "diffusion_pytorch_model.safetensors"))
    return 8 + len(hb) + off


def make_inputs(torch, cfg, grid, s_txt, device):
    """Seeded inputs of one forward, as the pipeline passes them: latents
    (1, grid^2, in_channels), T5 states (1, s_txt, joint), CLIP pooled,
    timestep t / 1000, guidance, FLUX ids ((0, r, c) per image token, 0
    for text). t = 0.5 and guidance 4.0: times 1000 exact in bf16."""
    g = torch.Generator(device="cpu").manual_seed(INPUT_SEED)
    bf = torch.bfloat16
    x = {
        "hidden_states": torch.randn(1, grid * grid, cfg["in_channels"], generator=g).to(bf),
        "encoder_hidden_states": torch.randn(1, s_txt, cfg["joint_attention_dim"], generator=g).to(bf),
        "pooled_projections": torch.randn(1, cfg["pooled_projection_dim"], generator=g).to(bf),
        "timestep": torch.tensor([0.5]),
    }
    ids = torch.zeros(grid, grid, 3)
    ids[..., 1] = torch.arange(grid)[:, None]
    ids[..., 2] = torch.arange(grid)[None, :]
    x["img_ids"] = ids.reshape(grid * grid, 3)
    x["txt_ids"] = torch.zeros(s_txt, 3)
    if cfg["guidance_embeds"]:
        x["guidance"] = torch.tensor([4.0])
    return x, {k: v.to(device) for k, v in x.items()}


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weftd"), ap.add_argument("--weftctl")
    ap.add_argument("--devices", default="cuda", help="weftd --devices (default cuda)")
    ap.add_argument("--mesh", default="", help="weftd --mesh (default: tp = devices)")
    add_weftd_args(ap)
    ap.add_argument("--device", default="cuda", help="torch device of diffusers (default cuda)")
    ap.add_argument("--dir", default="/tmp/weft-flux-bench",
                    help="model root; the checkpoint goes to DIR/flux-bench")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/flux-bench")
    ap.add_argument("--layers", type=int, help="double blocks (default 19)")
    ap.add_argument("--single-layers", type=int, help="single blocks (default 38)")
    ap.add_argument("--grid", type=int, default=64, help="latent grid side: grid^2 image tokens "
                    "(64: 1024 x 1024 pixels)")
    ap.add_argument("--txt", type=int, default=512, help="text tokens")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3, help="forwards per repeat and side")
    ap.add_argument("--matmul", type=int, default=8192)
    ap.add_argument("--compile", action="store_true", help="also torch.compile (if time allows)")
    ap.add_argument("--compile-need-s", type=float, default=200.0,
                    help="seconds before the deadline that --compile needs to start")
    ap.add_argument("--deadline-s", type=float, default=0.0,
                    help="seconds from start this script should end by (0: none); optional "
                         "steps are skipped and repeats cut to keep inside it")
    ap.add_argument("--no-f32-ref", action="store_true",
                    help="skip diffusers' f32 run of the same weights (the yardstick of the "
                         "bf16 comparison; 44 GiB more GPU memory for a moment at full size)")
    ap.add_argument("--tiny", action="store_true", help="a small configuration (plumbing check)")
    ap.add_argument("--no-graphs", action="store_true",
                    help="no second weftd with --cuda-graphs blocks")
    ap.add_argument("--graphs-gpu-memory", default="0.22",
                    help="the graphs weftd's --gpu-memory (default 0.22: both arenas and "
                         "diffusers fit one H200)")
    ap.add_argument("--graphs-need-s", type=float, default=60.0,
                    help="seconds that must be left to load the graphs weftd (default 60)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the configuration and the FLOP count only (no torch)")
    a = ap.parse_args()

    cfg = dict(TINY if a.tiny else FLUX_DEV)
    reduced = []
    if a.layers is not None and a.layers != cfg["num_layers"]:
        reduced.append(f"{a.layers} double blocks instead of {cfg['num_layers']}")
        cfg["num_layers"] = a.layers
    if a.single_layers is not None and a.single_layers != cfg["num_single_layers"]:
        reduced.append(f"{a.single_layers} single blocks instead of {cfg['num_single_layers']}")
        cfg["num_single_layers"] = a.single_layers
    s_img, s_txt = a.grid * a.grid, a.txt
    os.makedirs(a.out, exist_ok=True)
    OUT_DIR.append(a.out)
    report = {"config": cfg, "tiny": a.tiny, "reduced": reduced, "s_img": s_img, "s_txt": s_txt,
              "repeats": a.repeats, "iters": a.iters}

    fl = flop_count(cfg, s_img, s_txt)
    npar = param_count(cfg)
    report["flops"], report["params"] = fl, npar
    H, Dh = cfg["num_attention_heads"], cfg["attention_head_dim"]
    say("== FLUX forward beside diffusers (tests/gpu/flux_bench.py)")
    say(f"model: {'TINY plumbing configuration' if a.tiny else 'FLUX.1-dev configuration'}: "
        f"{H} heads x {Dh}, joint {cfg['joint_attention_dim']}, pooled "
        f"{cfg['pooled_projection_dim']}, in {cfg['in_channels']}, {cfg['num_layers']} double + "
        f"{cfg['num_single_layers']} single blocks, guidance {cfg['guidance_embeds']}; "
        f"{npar / 1e9:.3f} G parameters ({2 * npar / 2**30:.2f} GiB in bf16)")
    if reduced:
        say("REDUCED DEPTH (same width, fewer blocks, to fit the time budget): " + "; ".join(reduced))
    say(f"forward: B = 1, {s_img} image + {s_txt} text tokens; model FLOPs (counted) "
        f"{fl['total'] / 1e12:.2f} T = linear {(fl['double_linear'] + fl['single_linear'] + fl['embed'] + fl['out']) / 1e12:.2f} T"
        f" + attention {fl['attention'] / 1e12:.2f} T")
    if a.dry_run:
        for k, v in fl.items():
            say(f"  {k:14s} {v:.6g} FLOP")
        return 0

    torch = torch_setup(a.device)
    import diffusers
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer(torch, a.device)
    left = lambda: (a.deadline_s - elapsed()) if a.deadline_s > 0 else float("inf")

    # 1. the matrix rate
    rate = versions_and_rate(torch, diffusers, a, report, timer)

    # 2. the model, written once
    t = time.monotonic()
    model = build_model(torch, cfg, a.device)
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    say(f"model built on {a.device} in {time.monotonic() - t:.1f} s")
    ckpt = os.path.join(a.dir, "flux-bench")
    if os.path.isdir(ckpt):
        shutil.rmtree(ckpt)
    t = time.monotonic()
    nbytes = write_checkpoint(torch, model, ckpt)
    dt = time.monotonic() - t
    report["checkpoint"] = {"path": ckpt, "bytes": nbytes, "write_s": dt}
    say(f"checkpoint {ckpt}: {nbytes / 2**30:.2f} GiB written in {dt:.1f} s "
        f"({nbytes / 2**30 / max(dt, 1e-9):.2f} GiB/s)")

    # 3. inputs and diffusers' reference output
    host_in, dev_in = make_inputs(torch, cfg, a.grid, s_txt, a.device)

    def fwd(m):
        with torch.no_grad():
            return m(**dev_in, return_dict=False)[0]

    # the counts against the model itself: its parameters, and torch's own
    # FLOP counter over one forward (matrix products and SDPA)
    n_model = sum(p.numel() for p in model.parameters())
    report["params_model"] = n_model
    say(f"parameters: counted {npar}, the model has {n_model}"
        + ("" if n_model == npar else "  MISMATCH"))
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc:
            fwd(model)
        tf_torch = fc.get_total_flops()
        report["flops_torch_counter"] = tf_torch
        lin = fl["total"] - fl["attention"]
        say(f"FLOPs: counted {fl['total']:.6g} (linear {lin:.6g} + attention "
            f"{fl['attention']:.6g}), torch's FlopCounterMode {tf_torch:.6g}: ratio "
            f"{tf_torch / fl['total']:.4f} to the total, {tf_torch / lin:.4f} to the linear part "
            f"(the counter has no entry for SDPA's CPU kernel)")
    except Exception as e:  # a counter that fails is reported, not fatal
        say(f"FlopCounterMode: {e!r}")
    if a.tiny:
        # the checkpoint as diffusers reads it: every tensor bit-identical
        from diffusers import FluxTransformer2DModel
        back = FluxTransformer2DModel.from_pretrained(ckpt, torch_dtype=torch.bfloat16)
        sd, sd2 = model.state_dict(), back.state_dict()
        same = sd.keys() == sd2.keys() and all(torch.equal(sd[k].cpu(), sd2[k]) for k in sd)
        say(f"checkpoint read back by diffusers' from_pretrained: "
            f"{'identical' if same else 'DIFFERENT'} ({len(sd2)} tensors)")
        del back
        if not same:
            return 1
    meta = {"writer": "tests/gpu/flux_bench.py", "weight_seed": str(WEIGHT_SEED),
            "input_seed": str(INPUT_SEED), "diffusers": diffusers.__version__,
            "torch": torch.__version__}
    io_path, io32_path = reference(torch, model, dev_in, host_in, a.dir, "flux-bench", meta,
                                       report, not a.no_f32_ref, a.device)
    tol, tol32, how = derived_tolerance(report, roundings(cfg))
    report["tolerance"] = {"weft_vs_diffusers": tol, "weft_vs_f32": tol32, "how": how}
    say(f"tolerance of max |weft - diffusers bf16| / max |diffusers|: {tol:.3e} = {how}")
    tol_arg = ["--tolerance", f"{tol:.6g}"]

    # 4. weft. weftd's CUDA arena is --gpu-memory (a share of the GPU's
    # memory that leaves diffusers room); diffusers' model and the blocks
    # of its forward are taken first all the same (a forward now refills
    # torch's cache after the f32 run's empty_cache).
    fwd(model)
    weft = None
    weft_ok = False
    if a.weftd and a.weftctl:
        extra = weftd_flags(a) + (["--mesh", a.mesh] if a.mesh else [])
        weft = Weft(a.weftd, a.weftctl, a.devices, os.path.abspath(a.dir), a.out, extra)
        if not weft.up():
            say("weftd did not come up: " + " | ".join(weft.log_tail()))
            weft.stop()
            weft = None
    else:
        say("no --weftd / --weftctl: diffusers only")
    if weft:
        t = time.monotonic()
        rc, out = weft.ctl("load", "flux-bench", "flux-bench", timeout=max(60, min(900, left())))
        report["weft_load"] = {"rc": rc, "s": time.monotonic() - t, "out": out.strip()[-2000:]}
        lines = [x for x in out.strip().splitlines() if not x.startswith("loading ")]
        for line in lines[-4:]:
            say("  " + line)
        say(f"weftctl load: exit {rc} in {time.monotonic() - t:.1f} s")
        if rc != 0:
            say("weftd: " + " | ".join(weft.log_tail()))
        else:
            # warm-up (and the first check of the output)
            rc, out = weft.ctl("forward", "--model", "flux-bench", "--inputs", io_path,
                               "--iters", "2", *tol_arg, timeout=300)
            w = parse_weftctl_forward(out)
            report["weft_warmup"] = {"rc": rc, **w, "out": out.strip()[-2000:]}
            for line in out.strip().splitlines()[-3:]:
                say("  " + line)
            weft_ok = w["median_ms"] is not None
            if not weft_ok:
                say("weft warm-up forward failed: " + " | ".join(weft.log_tail()))
            elif io32_path:
                rc, out = weft.ctl("forward", "--model", "flux-bench", "--inputs", io32_path,
                                   "--iters", "1", "--tolerance", f"{tol32:.6g}", timeout=300)
                w = parse_weftctl_forward(out)
                if w["max_err"] is not None:
                    d = report["diffusers_bf16_vs_f32"]
                    report["weft_vs_f32"] = {"max_err": w["max_err"], "rel": w["max_err"] / d["max_ref"],
                                             "verdict": w["verdict"]}
                    say(f"|weft - diffusers f32| max {w['max_err']:.3e} = "
                        f"{w['max_err'] / d['max_ref']:.2e} of max |f32| (diffusers bf16: "
                        f"{d['rel']:.2e})")
                else:
                    say(f"weft against the f32 reference: no result (exit {rc}): {out.strip()[-300:]}")

    # the same forward with --cuda-graphs blocks: a second daemon (the
    # setting is not reloadable), loaded from the same directory
    wg, wg_ok = None, False
    if not weft_ok or a.no_graphs:
        say("cuda_graphs: skipped (" + ("--no-graphs" if a.no_graphs else "no weft timings") + ")")
    elif left() < a.graphs_need_s:
        say(f"cuda_graphs: skipped ({left():.0f} s left, the second load needs {a.graphs_need_s:.0f})")
    else:
        gextra = (["--gpu-memory", a.graphs_gpu_memory, "--cuda-graphs", "blocks",
                   *weftd_flags(a)[2:]] + (["--mesh", a.mesh] if a.mesh else []))
        wg = Weft(a.weftd, a.weftctl, a.devices, os.path.abspath(a.dir), a.out, gextra,
                  tag="graphs")
        if not a.devices.startswith("cuda"):
            say(f"cuda_graphs: --devices {a.devices} has no CUDA: the setting does nothing "
                "there (plumbing only, the ratio is not a measurement)")
        if not wg.up():
            say("graphs weftd did not come up: " + " | ".join(wg.log_tail()))
            wg.stop()
            wg = None
        else:
            t = time.monotonic()
            rc, out = wg.ctl("load", "flux-bench", "flux-bench",
                             timeout=max(60, min(900, left())))
            say(f"graphs weftd: weftctl load: exit {rc} in {time.monotonic() - t:.1f} s")
            # three forwards: a block's first sight runs uncaptured, its
            # second is captured, the third replays
            if rc == 0:
                rc, out = wg.ctl("forward", "--model", "flux-bench", "--inputs", io_path,
                                 "--iters", "3", *tol_arg, timeout=300)
                w = parse_weftctl_forward(out)
                report["graphs_warmup"] = {"rc": rc, **w, "out": out.strip()[-2000:]}
                wg_ok = w["median_ms"] is not None
            if not wg_ok:
                say("graphs weftd: warm-up failed: " + " | ".join(wg.log_tail()))

    def alternate(label, m, repeats):
        d_ms, w_ms, w_comp, w_err = [], [], [], []
        g_ms, g_comp, g_err, g_verdicts = [], [], [], []
        tol, verdicts = None, []
        for r in range(repeats):
            if r and left() < 20:
                say(f"  ({label}: stopping after {r} repeats: deadline)")
                break
            ts = [timer.time(lambda: fwd(m)) for _ in range(a.iters)]
            d_ms.append(statistics.median(ts))
            line = f"  {label} repeat {r + 1}: diffusers {d_ms[-1]:.2f} ms"
            if weft_ok:
                rc, out = weft.ctl("forward", "--model", "flux-bench", "--inputs", io_path,
                                   "--iters", str(a.iters), *tol_arg, timeout=300)
                w = parse_weftctl_forward(out)
                if w["median_ms"] is None:
                    line += f"; weft FAILED (exit {rc}): {out.strip()[-300:]}"
                else:
                    w_ms.append(w["median_ms"])
                    w_comp.append(w["compute_ms"])
                    w_err.append(w["max_err"])
                    tol = w["tol"]
                    verdicts.append(w["verdict"])
                    line += (f"; weft {w['median_ms']:.2f} ms (daemon compute {w['compute_ms']:.2f} ms)"
                             f", max |weft - diffusers| {w['max_err']:.3e} {w['verdict']}")
            if wg_ok and m is model:
                rc, out = wg.ctl("forward", "--model", "flux-bench", "--inputs", io_path,
                                 "--iters", str(a.iters), *tol_arg, timeout=300)
                w = parse_weftctl_forward(out)
                if w["median_ms"] is None:
                    line += f"; weft+graphs FAILED (exit {rc}): {out.strip()[-300:]}"
                else:
                    g_ms.append(w["median_ms"])
                    g_comp.append(w["compute_ms"])
                    g_err.append(w["max_err"])
                    g_verdicts.append(w["verdict"])
                    line += (f"; weft+graphs {w['median_ms']:.2f} ms (compute "
                             f"{w['compute_ms']:.2f} ms) {w['verdict']}")
            say(line)
        return {"diffusers_ms": spread(d_ms), "weft_ms": spread(w_ms),
                "weft_compute_ms": spread(w_comp),
                "graphs_ms": spread(g_ms), "graphs_compute_ms": spread(g_comp),
                "graphs_verdicts": g_verdicts,
                "graphs_max_err": max((e for e in g_err if e is not None), default=None),
                "max_err": max((e for e in w_err if e is not None), default=None) if w_err else None,
                "tol": tol, "verdicts": verdicts,
                "raw": {"diffusers": d_ms, "weft": w_ms, "weft_compute": w_comp, "err": w_err}}

    say(f"== eager: {a.repeats} alternations of {a.iters} forwards each ({elapsed():.0f} s)")
    eager = alternate("eager", model, a.repeats)
    report["eager"] = eager

    def summary(comp, final):
        """Print the figures and write flux-bench.json / .txt (after the
        eager alternation, and again at the end: a run cut short by its
        deadline keeps what it measured). Returns True when weft ran and
        every forward was within tolerance."""
        tf = fl["total"]
        say("== summary" + ("" if final else " (eager; torch.compile follows)"))
        cfgtxt = ("TINY configuration (plumbing check, not a measurement)" if a.tiny else
                  "FLUX.1-dev configuration" + (" REDUCED: " + "; ".join(reduced) if reduced else ""))
        say(f"{cfgtxt}, B = 1, {s_img} + {s_txt} tokens, bf16, {tf / 1e12:.2f} TFLOP per forward; "
            f"matmul ceiling {rate / 1e12:.1f} TFLOP/s")
        rows = [("diffusers eager", eager["diffusers_ms"])]
        if comp:
            rows.append(("diffusers torch.compile", comp["diffusers_ms"]))
        rows.append(("weft (weftctl round trip)", eager["weft_ms"]))
        rows.append(("weft (daemon compute)", eager["weft_compute_ms"]))
        if eager["graphs_ms"]:
            rows.append(("weft graphs (round trip)", eager["graphs_ms"]))
            rows.append(("weft graphs (compute)", eager["graphs_compute_ms"]))
        for name, sp in rows:
            if sp:
                share = tf / (sp["median"] * 1e-3) / rate
                say(f"  {name:28s} {fmt(sp)}  {tf / (sp['median'] * 1e-3) / 1e12:7.1f} TFLOP/s "
                    f"= {100 * share:5.1f}% of matmul")
            else:
                say(f"  {name:28s} n/a")
        ok = False
        if eager["weft_ms"] and eager["diffusers_ms"]:
            ratio = eager["diffusers_ms"]["median"] / eager["weft_ms"]["median"]
            report["ratio_eager_over_weft"] = ratio
            say(f"  speed: weft / diffusers eager = {ratio:.2f}x (floor 1.0, aim 1.3)")
            if comp and comp["diffusers_ms"]:
                r2 = comp["diffusers_ms"]["median"] / eager["weft_ms"]["median"]
                report["ratio_compiled_over_weft"] = r2
                say(f"  speed: weft / diffusers torch.compile = {r2:.2f}x")
            share = tf / (eager["weft_ms"]["median"] * 1e-3) / rate
            report["weft_share_of_matmul"] = share
            say(f"  weft model FLOP/s: {100 * share:.1f}% of the measured bf16 matmul rate (aim >= 60%)")
            ok = bool(eager["verdicts"]) and all(v == "PASS" for v in eager["verdicts"])
            v32 = report.get("weft_vs_f32", {}).get("verdict")
            if v32 is not None:
                ok = ok and v32 == "PASS"
            yn = lambda c: "met" if c else "NOT met"
            say(f"  targets: floor weft >= diffusers eager {yn(ratio >= 1.0)}; "
                f"aim 1.3x {yn(ratio >= 1.3)}; aim 60% of matmul {yn(share >= 0.6)}; "
                f"outputs within bf16 tolerance {yn(ok)}")
            say(f"  max |weft - diffusers| {eager['max_err']:.3e} (tolerance {eager['tol']:.3e} "
                f"= {report['tolerance']['how']}, times max |diffusers|)")
            if "weft_vs_f32" in report:
                say(f"  against diffusers' f32 run of the same weights: weft "
                    f"{report['weft_vs_f32']['rel']:.2e} (bound "
                    f"{report['tolerance']['weft_vs_f32']:.2e}: {v32}), diffusers bf16 "
                    f"{report['diffusers_bf16_vs_f32']['rel']:.2e} (max error / max |f32|)")
            say(f"  outputs: {'PASS' if ok else 'FAIL'}")
        else:
            say("  weft: no timings (see above); diffusers' figures stand alone")
        if eager["graphs_ms"] and eager["weft_ms"]:
            gr = eager["weft_ms"]["median"] / eager["graphs_ms"]["median"]
            gc = (eager["weft_compute_ms"]["median"] / eager["graphs_compute_ms"]["median"]
                  if eager["weft_compute_ms"] and eager["graphs_compute_ms"] else float("nan"))
            gok = bool(eager["graphs_verdicts"]) and all(v == "PASS" for v in eager["graphs_verdicts"])
            report["graphs_ratio"] = {"round_trip": gr, "compute": gc, "ok": gok,
                                      "cuda": a.devices.startswith("cuda")}
            say(f"  cuda_graphs: weft without / with = {gr:.3f}x round trip, {gc:.3f}x daemon "
                f"compute (> 1: graphs faster); outputs {'PASS' if gok else 'FAIL'}"
                + ("" if a.devices.startswith("cuda") else " (no CUDA: plumbing only)"))
        else:
            say("  cuda_graphs: no figure (skipped or failed, see above)")
        say(f"flux_bench {'done' if final else 'eager part done'} in {elapsed():.0f} s")
        report["ok"] = ok
        with open(os.path.join(a.out, "flux-bench.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
        write_log(a.out)
        return ok

    def cache_figures():
        """The first-block cache's cost and gain at this shape: a plain
        forward, a session's step with threshold 0 (the state kept, every
        block computed) and a reused step (a threshold no change reaches
        on the same inputs: after the first step, every one reuses), the
        three alternated, weftctl's median of --iters each (the first
        iteration of a reused run is its computed step)."""
        kinds = (("plain", []), ("session, threshold 0", ["--session", "1"]),
                 ("reused", ["--session", "2", "--cache-threshold", "1e30"]))
        ms = {k: [] for k, _ in kinds}
        for r in range(max(1, min(a.repeats, 3))):
            if left() < 20:
                break
            for k, extra in kinds:
                rc, out = weft.ctl("forward", "--model", "flux-bench", "--inputs", io_path,
                                   "--iters", str(max(3, a.iters)), *extra, timeout=300)
                w = parse_weftctl_forward(out)
                if w["compute_ms"] is not None:
                    ms[k].append(w["median_ms"])
        report["cache"] = {k: spread(v) for k, v in ms.items()}
        if ms["plain"] and ms["session, threshold 0"] and ms["reused"]:
            p = statistics.median(ms["plain"])
            s = statistics.median(ms["session, threshold 0"])
            u = statistics.median(ms["reused"])
            report["cache"]["session_over_plain"] = s / p
            report["cache"]["reused_over_plain"] = u / p
            say(f"== first-block cache: plain {p:.2f} ms, a session's step (threshold 0) "
                f"{s:.2f} ms = {s / p:.3f} of plain (target < 1.02), a reused step {u:.2f} ms "
                f"= {u / p:.3f} of plain (target < 0.10)")
        else:
            say("== first-block cache: no figures (a forward failed or no time left)")

    comp = None
    if a.compile:
        summary(None, False)
        if left() < a.compile_need_s:
            say(f"torch.compile: skipped ({left():.0f} s left, it needs {a.compile_need_s:.0f})")
            report["compile"] = "skipped: deadline"
        else:
            t = time.monotonic()
            cm = torch.compile(model)
            fwd(cm)
            fwd(cm)
            say(f"== torch.compile: compiled and warmed up in {time.monotonic() - t:.1f} s")
            comp = alternate("compiled", cm, max(1, min(a.repeats, 3)))
            report["compile"] = comp
    if weft and weft_ok and left() > 30:
        cache_figures()
    if wg:
        rc = wg.stop()
        say(f"graphs weftd exit {rc}")
        for line in wg.log_tail(2):
            say("  weftd (graphs): " + line)
    if weft:
        rc = weft.stop()
        say(f"weftd exit {rc}")
        for line in weft.log_tail(4):
            say("  weftd: " + line)
    ok = summary(comp, True)
    return 0 if ok else 1


if __name__ == "__main__":
    start("flux-bench")
    sys.exit(main())
