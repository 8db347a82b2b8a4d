#!/usr/bin/env python3
"""wan_bench.py — weft's Wan forward beside diffusers' on the same GPU: one
WanTransformer3DModel of Wan 2.1 T2V 1.3B's configuration (12 heads x
128, 30 layers, ffn 8960, text_dim 4096, in / out 16 channels, patch (1,
2, 2)) with seeded random bf16 weights saved by diffusers, one forward at
480p x 81 frames (latent 21 x 60 x 104: 21 x 30 x 52 = 32,760 video
tokens) with 512 text tokens, B = 1, the same weights and inputs for both.

  1. the bf16 matrix rate of this GPU, measured here (torch.matmul, bf16,
     M = N = K = --matmul, median of 10 after warm-up);
  2. the model: diffusers' WanTransformer3DModel built on the device in
     bf16 (every parameter, the fp32-kept modules of a diffusers load
     included: one dtype on both sides), every parameter drawn anew from
     a seeded generator (matrices std 1/sqrt(fan_in), the time
     modulation's 0.25 of that so that 30 gated residual updates stay
     moderate, scale_shift_tables 1/sqrt(inner dim) as diffusers draws
     them, norm weights 1 + 0.05 N(0, 1), biases 0.02), written once
     with diffusers' save_pretrained (one safetensors file, 2.8 GB);
  3. diffusers' forward on seeded inputs (timestep 500: exact in bf16):
     eager, its default attention (torch SDPA); its bf16 output is the
     reference in the inputs file (io-wan-bench.safetensors), so
     `weftctl forward` prints max |weft - diffusers| against the
     tolerance derived as in flux_bench.py (bench_lib's
     derived_tolerance). Diffusers also runs the same weights in f32
     (TF32 off; --no-f32-ref skips it): the yardstick of the bf16
     difference, as in flux_bench.py;
  4. for each mesh of --meshes (default: cuda, tp 1 on the GPU; then
     cuda:0,0 with ulysses = 2, two ranks on the one GPU, the mixed
     mode: 12 heads split 6 + 6): weftd loads the directory through
     `weftctl load`, then REPEATS alternations of diffusers eager (ITERS
     forwards timed with CUDA events) and `weftctl forward --iters ITERS`
     (median wall time per forward, the socket round trip of the 4 MB
     input and output included; the daemon's compute time beside it).
     A mesh whose weft side fails (a refusal at load, an error) is
     reported with the daemon's message; diffusers' figures still stand;
  5. the summary: ms per forward (median of the per-repeat medians, min
     - max), the ratio diffusers / weft per mesh (> 1: weft is faster),
     model FLOP/s as a share of step 1's rate, max |weft - diffusers|.
     The FLOPs are counted from the configuration (flop_count), not
     measured; torch's FlopCounterMode is printed beside them.

Written to --out (default $OUT, else /tmp/wan-bench): wan-bench.txt (what
stdout shows) and wan-bench.json (every figure). Exit 0 when diffusers
ran and each mesh's weft ran within tolerance; 1 when weft failed or
was out of tolerance; 2 on a usage or environment error. --dry-run prints the
configuration and the FLOP count without torch; --tiny runs the whole
path on a small configuration and size (the plumbing check of this
script; on a CPU weftd the Wan forward runs, so every figure is there):

    python3 tests/gpu/wan_bench.py --weftd build-gpu/daemon/weftd \\
        --weftctl build-gpu/client/weftctl [--meshes cuda cuda:0,0/ulysses=2]
    python3 tests/gpu/wan_bench.py --tiny --device cpu --meshes cpu:1 cpu:2/ulysses=2 \\
        --weftd build/daemon/weftd --weftctl build/client/weftctl
"""
import argparse
import copy
import json
import math
import os
import re
import shutil
import statistics
import sys
import time

from bench_lib import (OUT_DIR, Timer, Weft, add_weftd_args, derived_tolerance, elapsed, fmt,
                       reference, versions_and_rate,
                       parse_weftctl_forward, say, spread, start, torch_setup, weftd_flags,
                       write_log)

# Wan 2.1 T2V 1.3B's transformer (Wan-AI/Wan2.1-T2V-1.3B-Diffusers'
# config.json).
WAN_1_3B = dict(
    patch_size=[1, 2, 2], num_attention_heads=12, attention_head_dim=128, in_channels=16,
    out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
    cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None,
    added_kv_proj_dim=None, rope_max_seq_len=1024,
)
# The plumbing check: same structure, small (runs on a CPU in seconds);
# with --tiny the default size is a latent 2 x 4 x 6 (12 tokens), 8 text tokens.
TINY = dict(WAN_1_3B, num_attention_heads=2, attention_head_dim=16, text_dim=32, freq_dim=32,
            ffn_dim=64, num_layers=2, in_channels=4, out_channels=4)
WEIGHT_SEED = 20261202
INPUT_SEED = 1202
# weftd's refusal of a Wan model on a device backend (daemon/models/wan)


# ---------------------------------------------------------------- FLOPs
def tokens(cfg, frames, height, width):
    pt, ph, pw = cfg["patch_size"]
    return (frames // pt) * (height // ph) * (width // pw)


def flop_count(cfg, frames, height, width, s_txt, batch=1):
    """Model FLOPs of one forward: every linear layer 2 * rows * in * out
    (the patch embedding as one), attention 4 * B * H * Sq * Skv * D per
    block (self: S x S, cross: S x S_txt). Elementwise work (norms, RoPE,
    GELU, softmax, modulation) is not counted. Returns {part: flops}."""
    H, Dh = cfg["num_attention_heads"], cfg["attention_head_dim"]
    D, F, B = H * Dh, cfg["ffn_dim"], batch
    S = tokens(cfg, frames, height, width)
    pe = math.prod(cfg["patch_size"])

    def lin(rows, fin, fout):
        return 2 * rows * fin * fout

    f = {}
    # patch embedding; text embedder (text_dim -> D -> D); time embedder
    # (freq -> D -> D) and its projection to the 6 modulations
    f["embed"] = (lin(B * S, cfg["in_channels"] * pe, D) + lin(B * s_txt, cfg["text_dim"], D)
                  + lin(B * s_txt, D, D) + lin(B, cfg["freq_dim"], D) + lin(B, D, D)
                  + lin(B, D, 6 * D))
    # a block: self-attention q, k, v, out; cross-attention q, out on the
    # video and k, v on the text; the feed-forward D -> F -> D
    blk = (4 * lin(B * S, D, D) + 2 * lin(B * S, D, D) + 2 * lin(B * s_txt, D, D)
           + lin(B * S, D, F) + lin(B * S, F, D))
    f["block_linear"] = cfg["num_layers"] * blk
    f["attention"] = cfg["num_layers"] * (4 * B * H * S * S * Dh + 4 * B * H * S * s_txt * Dh)
    f["out"] = lin(B * S, D, cfg["out_channels"] * pe)
    f["total"] = sum(f.values())
    return f


def param_count(cfg):
    """Parameters of the configuration (weights + biases), by the same
    enumeration as flop_count plus the norms and modulation tables."""
    D = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    F, pe = cfg["ffn_dim"], math.prod(cfg["patch_size"])
    lin = lambda fin, fout: fin * fout + fout
    emb = (lin(cfg["in_channels"] * pe, D) + lin(cfg["freq_dim"], D) + lin(D, D)
           + lin(D, 6 * D) + lin(cfg["text_dim"], D) + lin(D, D))
    # two attentions (4 linears and a q / k RMS norm across heads each),
    # the cross-attention's LayerNorm (weight + bias), the feed-forward,
    # the block's scale_shift_table (6 x D)
    blk = 2 * (4 * lin(D, D) + 2 * D) + 2 * D + lin(D, F) + lin(F, D) + 6 * D
    return emb + cfg["num_layers"] * blk + lin(D, cfg["out_channels"] * pe) + 2 * D


# ---------------------------------------------------------------- torch side
def build_model(torch, cfg, device):
    """WanTransformer3DModel in bf16 on DEVICE, parameters drawn anew from a
    seeded generator on that device (construction's own init is thrown
    away; construction happens in bf16 directly on the device)."""
    from diffusers import WanTransformer3DModel
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = WanTransformer3DModel(**cfg)
    finally:
        torch.set_default_dtype(prev)
    D = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    g = torch.Generator(device=device).manual_seed(WEIGHT_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # drawn in f32 on the device, rounded once to bf16
            r = torch.randn(p.shape, device=device, dtype=torch.float32, generator=g)
            if "scale_shift_table" in name:
                p.copy_(r / math.sqrt(D))
            elif p.dim() > 1:
                scale = 1.0 / math.sqrt(p[0].numel())
                if "time_proj" in name:
                    scale *= 0.25
                p.copy_(r * scale)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.05 * r)
            else:
                p.copy_(0.02 * r)
            del r
    return model.eval()


def make_inputs(torch, cfg, frames, height, width, s_txt, device):
    """Seeded inputs of one forward, as WanPipeline passes them: latents
    (1, in_channels, F, H, W), the UMT5 states (1, s_txt, text_dim) in
    bf16, timestep 500 (exact in bf16: diffusers' time embedder, bf16
    here, takes it in its dtype)."""
    g = torch.Generator(device="cpu").manual_seed(INPUT_SEED)
    bf = torch.bfloat16
    x = {
        "hidden_states": torch.randn(1, cfg["in_channels"], frames, height, width,
                                     generator=g).to(bf),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": torch.randn(1, s_txt, cfg["text_dim"], generator=g).to(bf),
    }
    return x, {k: v.to(device) for k, v in x.items()}


def parse_mesh(spec):
    """"DEVICES[/MESH]" -> (weftd --devices, --mesh or "")."""
    dev, _, mesh = spec.partition("/")
    return dev, mesh


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weftd"), ap.add_argument("--weftctl")
    ap.add_argument("--meshes", nargs="+", default=["cuda", "cuda:0,0/ulysses=2"],
                    help="weft runs, each DEVICES[/MESH] (weftd --devices, --mesh); default "
                         "cuda (tp 1), cuda:0,0/ulysses=2")
    ap.add_argument("--device", default="cuda", help="torch device of diffusers (default cuda)")
    add_weftd_args(ap)
    ap.add_argument("--dir", default="/tmp/weft-wan-bench",
                    help="model root; the checkpoint goes to DIR/wan-bench")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/wan-bench")
    ap.add_argument("--layers", type=int, help="blocks (default 30)")
    ap.add_argument("--frames", type=int, help="latent frames (default 21: 81 video frames)")
    ap.add_argument("--height", type=int, help="latent height (default 60: 480 pixels)")
    ap.add_argument("--width", type=int, help="latent width (default 104: 832 pixels)")
    ap.add_argument("--txt", type=int, help="text tokens (default 512)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3, help="forwards per repeat and side")
    ap.add_argument("--matmul", type=int, default=8192)
    ap.add_argument("--deadline-s", type=float, default=0.0,
                    help="seconds from start this script should end by (0: none); repeats "
                         "are cut to keep inside it")
    ap.add_argument("--no-f32-ref", action="store_true",
                    help="skip diffusers' f32 run of the same weights (the yardstick of the "
                         "bf16 comparison)")
    ap.add_argument("--tiny", action="store_true", help="a small configuration and size "
                    "(plumbing check)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the configuration and the FLOP count only (no torch)")
    a = ap.parse_args()

    cfg = dict(TINY if a.tiny else WAN_1_3B)
    size = dict(frames=2, height=4, width=6, txt=8) if a.tiny else \
        dict(frames=21, height=60, width=104, txt=512)
    for k in size:
        if getattr(a, k) is not None:
            size[k] = getattr(a, k)
    reduced = []
    if a.layers is not None and a.layers != cfg["num_layers"]:
        reduced.append(f"{a.layers} blocks instead of {cfg['num_layers']}")
        cfg["num_layers"] = a.layers
    fr, hh, ww, s_txt = size["frames"], size["height"], size["width"], size["txt"]
    for n, p in zip((fr, hh, ww), cfg["patch_size"]):
        if n % p:
            say(f"wan_bench: latent {fr} x {hh} x {ww} is not a multiple of patch "
                f"{cfg['patch_size']}")
            return 2
    s_vid = tokens(cfg, fr, hh, ww)
    os.makedirs(a.out, exist_ok=True)
    OUT_DIR.append(a.out)
    report = {"config": cfg, "tiny": a.tiny, "reduced": reduced, "latent": [fr, hh, ww],
              "s_video": s_vid, "s_txt": s_txt, "repeats": a.repeats, "iters": a.iters,
              "meshes": a.meshes}
    fl = flop_count(cfg, fr, hh, ww, s_txt)
    npar = param_count(cfg)
    report["flops"], report["params"] = fl, npar
    H, Dh = cfg["num_attention_heads"], cfg["attention_head_dim"]
    say("== Wan forward beside diffusers (tests/gpu/wan_bench.py)")
    say(f"model: {'TINY plumbing configuration' if a.tiny else 'Wan 2.1 T2V 1.3B configuration'}: "
        f"{H} heads x {Dh}, {cfg['num_layers']} layers, ffn {cfg['ffn_dim']}, text_dim "
        f"{cfg['text_dim']}, in / out {cfg['in_channels']} / {cfg['out_channels']}, patch "
        f"{tuple(cfg['patch_size'])}; {npar / 1e9:.3f} G parameters ({2 * npar / 2**30:.2f} GiB "
        "in bf16)")
    if reduced:
        say("REDUCED DEPTH (same width, fewer blocks): " + "; ".join(reduced))
    lin_total = fl["total"] - fl["attention"]
    say(f"forward: B = 1, latent {fr} x {hh} x {ww} = {s_vid} video tokens + {s_txt} text "
        f"tokens; model FLOPs (counted) {fl['total'] / 1e12:.2f} T = linear "
        f"{lin_total / 1e12:.2f} T + attention {fl['attention'] / 1e12:.2f} T")
    if a.dry_run:
        for k, v in fl.items():
            say(f"  {k:14s} {v:.6g} FLOP")
        for spec in a.meshes:
            dev, mesh = parse_mesh(spec)
            say(f"  weft run: weftd --devices {dev}" + (f" --mesh {mesh}" if mesh else ""))
        return 0

    torch = torch_setup(a.device)
    import diffusers
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer(torch, a.device)
    cuda = a.device.startswith("cuda")
    left = lambda: (a.deadline_s - elapsed()) if a.deadline_s > 0 else float("inf")

    # 1. the matrix rate
    rate = versions_and_rate(torch, diffusers, a, report, timer)

    # 2. the model, saved by diffusers
    t = time.monotonic()
    model = build_model(torch, cfg, a.device)
    if cuda:
        torch.cuda.synchronize()
    say(f"model built on {a.device} in {time.monotonic() - t:.1f} s")
    n_model = sum(p.numel() for p in model.parameters())
    report["params_model"] = n_model
    say(f"parameters: counted {npar}, the model has {n_model}"
        + ("" if n_model == npar else "  MISMATCH"))
    ckpt = os.path.join(a.dir, "wan-bench")
    if os.path.isdir(ckpt):
        shutil.rmtree(ckpt)
    t = time.monotonic()
    model.save_pretrained(ckpt, safe_serialization=True, max_shard_size="100GB")
    dt = time.monotonic() - t
    nbytes = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
    report["checkpoint"] = {"path": ckpt, "bytes": nbytes, "write_s": dt}
    say(f"checkpoint {ckpt} (save_pretrained): {nbytes / 2**30:.2f} GiB in {dt:.1f} s")

    # 3. inputs and diffusers' reference output
    host_in, dev_in = make_inputs(torch, cfg, fr, hh, ww, s_txt, a.device)

    def fwd(m, x=dev_in):
        with torch.no_grad():
            return m(**x, return_dict=False)[0]

    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc:
            fwd(model)
        tf_torch = fc.get_total_flops()
        report["flops_torch_counter"] = tf_torch
        say(f"FLOPs: counted {fl['total']:.6g} (linear {lin_total:.6g} + attention "
            f"{fl['attention']:.6g}), torch's FlopCounterMode {tf_torch:.6g}: ratio "
            f"{tf_torch / fl['total']:.4f} to the total, {tf_torch / lin_total:.4f} to the "
            "linear part (the counter may have no entry for SDPA's kernel)")
    except Exception as e:  # a counter that fails is reported, not fatal
        say(f"FlopCounterMode: {e!r}")
    meta = {"writer": "tests/gpu/wan_bench.py", "weight_seed": str(WEIGHT_SEED),
            "input_seed": str(INPUT_SEED), "diffusers": diffusers.__version__,
            "torch": torch.__version__}
    io_path, io32_path = reference(torch, model, dev_in, host_in, a.dir, "wan-bench", meta,
                                       report, not a.no_f32_ref, a.device)
    # the tensors weft's bf16 device path rounds (tests/fixtures/README.md):
    # 7 outside the blocks, 11 per block (the attentions' P among them);
    # with an image embedder 10 per block (an f32 cross-attention) and 2 more
    k = (7 + 10 * cfg["num_layers"] + 2 if cfg.get("image_dim")
         else 7 + 11 * cfg["num_layers"])
    tol, tol32, how = derived_tolerance(report, k)
    report["tolerance"] = {"weft_vs_diffusers": tol, "weft_vs_f32": tol32, "how": how}
    say(f"tolerance of max |weft - diffusers bf16| / max |diffusers|: {tol:.3e} = {how}")

    # 4. each mesh: weft beside diffusers. diffusers' forward runs first so
    # that torch holds its memory before weftd's CUDA arena (--gpu-memory)
    # is taken.
    fwd(model)
    runs = []
    d_all = []
    for spec in a.meshes:
        dev, mesh = parse_mesh(spec)
        label = dev + (f" {mesh}" if mesh else "")
        say(f"== weft on {label} ({elapsed():.0f} s)")
        run = {"label": label, "devices": dev, "mesh": mesh, "error": None}
        runs.append(run)
        weft = None
        if not (a.weftd and a.weftctl):
            run["error"] = "no --weftd / --weftctl"
            say("no --weftd / --weftctl: diffusers only")
        else:
            weft = Weft(a.weftd, a.weftctl, dev, os.path.abspath(a.dir), a.out,
                        weftd_flags(a) + (["--mesh", mesh] if mesh else []))
            if not weft.up():
                run["error"] = "weftd did not come up: " + " | ".join(weft.log_tail())
                say(run["error"])
                weft.stop()
                weft = None
        weft_ok = False
        if weft:
            weft_ok = weft_load_and_check(weft, run, io_path, io32_path, report, left)
        d_ms, w_ms, w_comp, w_err, verdicts = [], [], [], [], []
        for r in range(max(1, a.repeats)):
            if r and left() < 20:
                say(f"  ({label}: stopping after {r} repeats: deadline)")
                break
            ts = [timer.time(lambda: fwd(model)) for _ in range(a.iters)]
            d_ms.append(statistics.median(ts))
            line = f"  repeat {r + 1}: diffusers {d_ms[-1]:.2f} ms"
            if weft_ok:
                rc, out = weft.ctl("forward", "--model", "wan-bench", "--inputs", io_path,
                                   "--iters", str(a.iters), "--tolerance", f"{tol:.6g}",
                                   timeout=600)
                w = parse_weftctl_forward(out)
                if w["median_ms"] is None:
                    run["error"] = f"forward failed (exit {rc}): {out.strip()[-300:]}"
                    line += f"; weft FAILED (exit {rc}): {out.strip()[-300:]}"
                    weft_ok = False
                else:
                    w_ms.append(w["median_ms"])
                    w_comp.append(w["compute_ms"])
                    w_err.append(w["max_err"])
                    verdicts.append(w["verdict"])
                    run["tol"] = w["tol"]
                    line += (f"; weft {w['median_ms']:.2f} ms (daemon compute "
                             f"{w['compute_ms']:.2f} ms), max |weft - diffusers| "
                             f"{w['max_err']:.3e} {w['verdict']}")
            say(line)
        d_all += d_ms
        run.update(diffusers_ms=spread(d_ms), weft_ms=spread(w_ms), weft_compute_ms=spread(w_comp),
                   max_err=max((e for e in w_err if e is not None), default=None),
                   verdicts=verdicts,
                   raw={"diffusers": d_ms, "weft": w_ms, "weft_compute": w_comp, "err": w_err})
        if weft:
            say(f"weftd exit {weft.stop()}")
            for line in weft.log_tail(3):
                say("  weftd: " + line)
    report["runs"] = runs
    report["diffusers_ms"] = spread(d_all)

    # 5. the summary
    tf = fl["total"]
    say("== summary")
    cfgtxt = ("TINY configuration (plumbing check, not a measurement)" if a.tiny else
              "Wan 2.1 T2V 1.3B configuration" + (" REDUCED: " + "; ".join(reduced)
                                                  if reduced else ""))
    say(f"{cfgtxt}, B = 1, {s_vid} + {s_txt} tokens, bf16, {tf / 1e12:.2f} TFLOP per forward; "
        f"matmul ceiling {rate / 1e12:.1f} TFLOP/s")

    def row(name, sp):
        if not sp:
            say(f"  {name:36s} n/a")
            return
        share = tf / (sp["median"] * 1e-3) / rate
        say(f"  {name:36s} {fmt(sp)}  {tf / (sp['median'] * 1e-3) / 1e12:7.1f} TFLOP/s "
            f"= {100 * share:5.1f}% of matmul")

    row(f"diffusers eager (SDPA) on {a.device}", report["diffusers_ms"])
    ok = True
    for run in runs:
        if run["error"] or not run["weft_ms"]:
            say(f"  weft {run['label']:31s} FAILED: {run['error'] or 'no timings'}")
            ok = False
            continue
        row(f"weft {run['label']} (round trip)", run["weft_ms"])
        row(f"weft {run['label']} (daemon compute)", run["weft_compute_ms"])
        ratio = run["diffusers_ms"]["median"] / run["weft_ms"]["median"]
        run["ratio_eager_over_weft"] = ratio
        run["weft_share_of_matmul"] = tf / (run["weft_ms"]["median"] * 1e-3) / rate
        passed = bool(run["verdicts"]) and all(v == "PASS" for v in run["verdicts"])
        if "vs_f32" in run:
            passed = passed and run["vs_f32"]["verdict"] == "PASS"
        ok = ok and passed
        say(f"    speed: weft / diffusers eager = {ratio:.2f}x; weft "
            f"{100 * run['weft_share_of_matmul']:.1f}% of the measured bf16 matmul rate")
        say(f"    max |weft - diffusers| {run['max_err']:.3e} (tolerance {run['tol']:.3e} = "
            f"{report['tolerance']['how']}, times max |diffusers|)")
        if "vs_f32" in run:
            say(f"    against diffusers' f32 run: weft {run['vs_f32']['rel']:.2e} (bound "
                f"{report['tolerance']['weft_vs_f32']:.2e}: {run['vs_f32']['verdict']}), "
                f"diffusers bf16 {report['diffusers_bf16_vs_f32']['rel']:.2e} (max error / "
                f"max |f32|)")
        say(f"    outputs: {'PASS' if passed else 'FAIL'}")
    say(f"wan_bench done in {elapsed():.0f} s")
    report["ok"] = ok
    with open(os.path.join(a.out, "wan-bench.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    write_log(a.out)
    return 0 if ok else 1


def weft_load_and_check(weft, run, io_path, io32_path, report, left):
    """Load the checkpoint in `weft`, one warm-up forward, and one against
    diffusers' f32 output when there is one. True when the forward ran;
    else run["error"] holds why."""
    t = time.monotonic()
    rc, out = weft.ctl("load", "wan-bench", "wan-bench", timeout=max(60, min(900, left())))
    run["load"] = {"rc": rc, "s": time.monotonic() - t, "out": out.strip()[-2000:]}
    lines = [x for x in out.strip().splitlines() if not x.startswith("loading ")]
    for line in lines[-4:]:
        say("  " + line)
    say(f"weftctl load: exit {rc} in {time.monotonic() - t:.1f} s")
    tol = report["tolerance"]
    if rc == 0:
        rc, out = weft.ctl("forward", "--model", "wan-bench", "--inputs", io_path,
                           "--iters", "2", "--tolerance", f"{tol['weft_vs_diffusers']:.6g}",
                           timeout=600)
        for line in out.strip().splitlines()[-3:]:
            say("  " + line)
        if parse_weftctl_forward(out)["median_ms"] is not None:
            if io32_path:
                rc, out32 = weft.ctl("forward", "--model", "wan-bench", "--inputs", io32_path,
                                     "--iters", "1", "--tolerance",
                                     f"{tol['weft_vs_f32']:.6g}", timeout=600)
                w = parse_weftctl_forward(out32)
                if w["max_err"] is not None and "diffusers_bf16_vs_f32" in report:
                    d = report["diffusers_bf16_vs_f32"]
                    run["vs_f32"] = {"max_err": w["max_err"], "rel": w["max_err"] / d["max_ref"],
                                     "verdict": w["verdict"]}
                    say(f"|weft - diffusers f32| max {w['max_err']:.3e} = "
                        f"{run['vs_f32']['rel']:.2e} of max |f32| (diffusers bf16: "
                        f"{d['rel']:.2e})")
            return True
    run["error"] = f"exit {rc}: {out.strip()[-300:]}"
    say(f"weft FAILED on {run['label']}: {run['error']} | " + " | ".join(weft.log_tail()))
    return False


if __name__ == "__main__":
    start("wan-bench")
    sys.exit(main())
