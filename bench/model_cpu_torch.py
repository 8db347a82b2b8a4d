#!/usr/bin/env python3
"""model_cpu_torch.py — weft's CPU forward of a model family beside
diffusers' in torch. Driven by bench/model_cpu_torch.sh, which makes the
pinned virtual environment (bench/requirements-torch.txt) and pins the
cores; run that, not this. Not run by CI.

Subcommands:
  make  --work DIR --size SIZE
        writes DIR/bench-SIZE/ (diffusers' save_pretrained of the size's
        model class with seeded random f32 weights) and
        DIR/io-bench-SIZE.safetensors: the inputs in the layout
        `weftctl forward --inputs` reads, and `output` (diffusers' f32
        forward of them) as the reference weftctl compares with.
        Skipped when both exist with the same config and seeds.
  run   --work DIR --build BUILD --threads N --size SIZE --rounds R
        --iters K [--mesh M ...] --out FILE.json
        torch: torch.set_num_threads(N) in this process. weft: a weftd
        started here with --devices cpu:N and the model loaded through
        weftctl load; each mesh set with weftctl reconfigure and timed
        with weftctl forward --iters K (the time of wf_forward round
        trips as a user sees them). Per mesh: one warm-up forward on each
        side, then R rounds; each round times K forwards on each side
        (the order flips every round) and keeps their median. Prints and
        writes the round medians.
  table FILE.json ...
        the markdown table of one or more run files.

Sizes (B = 1, f32 everywhere):
  a, b: FluxTransformer2DModel (guidance_embeds False, patch 1,
     in_channels 64, axes_dims_rope (16, 56, 56))
     a: 4 heads x 128 (hidden 512), 2 double + 4 single blocks,
        joint_attention_dim 512, pooled 256, 256 image (16 x 16) + 64 text
     b: 8 heads x 128 (hidden 1024), 4 double + 8 single blocks,
        joint_attention_dim 1024, pooled 768, 1024 image (32 x 32) + 256 text
  wan: WanTransformer3DModel, 12 heads x 64 (hidden 768), 4 layers, ffn
     3072, patch (1, 2, 2), in / out channels 16, text_dim 512: a latent
     of 8 x 64 x 64 = 8,192 video tokens, 64 text tokens
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

SIZES = {
    "a": dict(family="flux", config=dict(patch_size=1, in_channels=64, out_channels=None,
                          num_layers=2, num_single_layers=4, attention_head_dim=128,
                          num_attention_heads=4, joint_attention_dim=512,
                          pooled_projection_dim=256, guidance_embeds=False,
                          axes_dims_rope=(16, 56, 56)),
              grid=(16, 16), txt=64,
              label="hidden 512 (4 x 128), 2 + 4 blocks, 256 + 64 tokens"),
    "b": dict(family="flux", config=dict(patch_size=1, in_channels=64, out_channels=None,
                          num_layers=4, num_single_layers=8, attention_head_dim=128,
                          num_attention_heads=8, joint_attention_dim=1024,
                          pooled_projection_dim=768, guidance_embeds=False,
                          axes_dims_rope=(16, 56, 56)),
              grid=(32, 32), txt=256,
              label="hidden 1024 (8 x 128), 4 + 8 blocks, 1024 + 256 tokens"),
    "wan": dict(family="wan",
                config=dict(patch_size=(1, 2, 2), num_attention_heads=12,
                            attention_head_dim=64, in_channels=16, out_channels=16,
                            text_dim=512, freq_dim=256, ffn_dim=3072, num_layers=4,
                            cross_attn_norm=True, eps=1e-6, rope_max_seq_len=1024),
                grid=(8, 64, 64), txt=64,
                label="Wan: hidden 768 (12 x 64), 4 layers, 8192 video + 64 text tokens"),
}
WEIGHT_SEED = 1212
INPUT_SEED = 3434
TIMESTEP = 0.5                 # t / 1000, as FluxPipeline passes it (WanPipeline: t)


def model_dir(work, size):
    return os.path.join(work, f"bench-{size}")


def io_path(work, size):
    return os.path.join(work, f"io-bench-{size}.safetensors")


def model_class(family):
    import diffusers
    return {"flux": diffusers.FluxTransformer2DModel,
            "wan": diffusers.WanTransformer3DModel}[family]


def make_inputs(spec, g):
    """The forward's inputs (B = 1) of a size, drawn from generator g."""
    import torch
    cfg = spec["config"]
    if spec["family"] == "wan":
        f, h, w = spec["grid"]
        return {
            "hidden_states": torch.randn(1, cfg["in_channels"], f, h, w, generator=g),
            "timestep": torch.tensor([TIMESTEP * 1000.0]),
            "encoder_hidden_states": torch.randn(1, spec["txt"], cfg["text_dim"], generator=g),
        }
    gh, gw = spec["grid"]
    s_img, s_txt = gh * gw, spec["txt"]
    inputs = {
        "hidden_states": torch.randn(1, s_img, cfg["in_channels"], generator=g),
        "encoder_hidden_states": torch.randn(1, s_txt, cfg["joint_attention_dim"],
                                             generator=g),
        "pooled_projections": torch.randn(1, cfg["pooled_projection_dim"], generator=g),
        "timestep": torch.tensor([TIMESTEP]),
    }
    img_ids = torch.zeros(gh, gw, 3)
    img_ids[..., 1] = torch.arange(gh)[:, None]
    img_ids[..., 2] = torch.arange(gw)[None, :]
    inputs["img_ids"] = img_ids.reshape(s_img, 3)
    inputs["txt_ids"] = torch.zeros(s_txt, 3)
    return inputs


def stamp(size):
    return json.dumps({"config": SIZES[size]["config"], "grid": SIZES[size]["grid"],
                       "txt": SIZES[size]["txt"], "weight_seed": WEIGHT_SEED,
                       "input_seed": INPUT_SEED, "timestep": TIMESTEP}, sort_keys=True)


# ---------------------------------------------------------------- make

def cmd_make(a):
    import torch
    import diffusers
    import diffusers.utils.logging
    import safetensors
    from safetensors.torch import save_file

    size, work = a.size, a.work
    done = os.path.join(model_dir(work, size), "bench-stamp.json")
    if os.path.exists(done) and os.path.exists(io_path(work, size)):
        with open(done) as f:
            if f.read() == stamp(size):
                print(f"size {size}: {model_dir(work, size)} is up to date")
                return 0
    diffusers.utils.logging.set_verbosity_error()
    spec = SIZES[size]
    cfg = spec["config"]
    torch.manual_seed(WEIGHT_SEED)
    model = model_class(spec["family"])(**cfg)
    # every parameter drawn anew (std 1/sqrt(fan_in) for matrices, 0.1 for
    # vectors; q/k RMS-norm weights 1 + 0.1 noise), as the fixtures are
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm_q.weight") or name.endswith("norm_k.weight") \
                    or "norm_added_" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() > 1:
                p.copy_(torch.randn_like(p) / (p.shape[-1] ** 0.5))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    model = model.eval()
    model.save_pretrained(model_dir(work, size), safe_serialization=True,
                          max_shard_size="10GB")

    g = torch.Generator().manual_seed(INPUT_SEED)
    inputs = make_inputs(spec, g)
    with torch.inference_mode():
        out = model(**inputs, return_dict=False)[0]
    meta = {"model": f"bench-{size}", "dtype": "f32", "weight_seed": WEIGHT_SEED,
            "input_seed": INPUT_SEED, "torch": torch.__version__,
            "diffusers": diffusers.__version__, "safetensors": safetensors.__version__,
            "writer": "bench/model_cpu_torch.py"}
    tensors = {k: v.contiguous() for k, v in inputs.items()}
    tensors["output"] = out.contiguous()
    save_file(tensors, io_path(work, size), metadata={k: str(v) for k, v in meta.items()})
    with open(done, "w") as f:
        f.write(stamp(size))
    nparams = sum(p.numel() for p in model.parameters())
    print(f"size {size}: wrote {model_dir(work, size)} ({nparams / 1e6:.1f} M params) "
          f"and {io_path(work, size)}: output {tuple(out.shape)}, "
          f"max |output| {out.abs().max().item():.3g}")
    return 0


# ---------------------------------------------------------------- run

def mesh_args(mesh):
    """'tp=2' / 'ulysses=2' / 'ring=2,ulysses=2' / 'single' -> weftctl
    reconfigure's options (absent degrees are 1)."""
    args = []
    if mesh in ("", "single"):
        return args
    for part in mesh.split(","):
        k, v = part.split("=")
        if k not in ("dp", "ring", "ulysses", "tp"):
            raise SystemExit(f"bad mesh degree {k}")
        args += [f"--{k}", v]
    return args


class Weft:
    def __init__(self, build, work, n, size, log):
        self.weftd = os.path.join(build, "daemon", "weftd")
        self.weftctl = os.path.join(build, "client", "weftctl")
        self.endpoint = f"ipc://{work}/weftd-bench-{os.getpid()}.sock"
        self.work, self.size = work, size
        # OpenBLAS: one thread per virtual device (weftd sets it too);
        # OPENBLAS_VERBOSE=2 makes it name the kernel set it chose
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   OPENBLAS_VERBOSE="2")
        self.env = env
        self.log = open(log, "a")
        self.log.flush()
        start = self.log.tell()
        self.proc = subprocess.Popen(
            [self.weftd, "--devices", f"cpu:{n}", "--listen", self.endpoint,
             "--model-root", work, "--log-level", "warning"],
            env=env, stdout=self.log, stderr=self.log)
        for _ in range(200):
            if self.ctl("hello", check=False).returncode == 0:
                break
            if self.proc.poll() is not None:
                raise SystemExit(f"weftd exited ({self.proc.returncode}); see {log}")
            time.sleep(0.05)
        else:
            raise SystemExit("weftd did not answer hello")
        with open(log) as f:
            f.seek(start)
            core = re.search(r"Core: (\S+)", f.read())
        self.blas_core = core.group(1) if core else "unknown"
        if self.blas_core.lower() == "prescott":
            print("model_cpu_torch: OpenBLAS chose its generic PRESCOTT (SSE3) kernels "
                  "for weftd; on an AVX2 / AVX-512 CPU it does not know, set "
                  "OPENBLAS_CORETYPE=Haswell or SkylakeX", file=sys.stderr)
        self.ctl("load", "bench", f"bench-{size}")

    def ctl(self, *args, check=True):
        r = subprocess.run([self.weftctl, "--endpoint", self.endpoint, *args],
                           env=self.env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit(f"weftctl {' '.join(args)}: rc {r.returncode}\n"
                             f"{r.stdout}{r.stderr}")
        return r

    def reconfigure(self, mesh):
        self.ctl("reconfigure", *mesh_args(mesh))

    def forward(self, iters):
        """-> (median ms, max abs error, tolerance text, daemon compute ms)"""
        r = self.ctl("forward", "--model", "bench", "--inputs",
                     io_path(self.work, self.size), "--iters", str(iters), check=False)
        m = re.search(r"time ([0-9.]+) ms median.*compute ([0-9]+) us", r.stdout)
        e = re.search(r"max abs error (\S+) \(tolerance (\S+)\) (PASS|FAIL)", r.stdout)
        if not m or not e:
            raise SystemExit(f"weftctl forward: rc {r.returncode}\n{r.stdout}{r.stderr}")
        return float(m.group(1)), float(e.group(1)), e.group(3), int(m.group(2)) / 1e3

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def source_commit(build):
    """The commit (and whether the tree was dirty) of the source the build
    dir was configured from."""
    src = None
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    src = line.split("=", 1)[1].strip()
    except OSError:
        return "unknown", None
    if not src:
        return "unknown", None
    def git(*a):
        return subprocess.run(["git", "-C", src, *a], capture_output=True,
                              text=True).stdout.strip()
    # the last commit that changed weft's code (not bench/ or BENCHMARKS.md)
    notbench = ["--", ".", ":(exclude)bench", ":(exclude)BENCHMARKS.md"]
    code = git("log", "-1", "--format=%h", "--abbrev=10", *notbench) or "unknown"
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    if branch == "HEAD":                 # detached: the branches at that commit
        at = [b for b in git("branch", "--points-at", "HEAD",
                             "--format=%(refname:short)").splitlines()
              if b and "(" not in b]
        branch = "detached" + (", at " + " ".join(at) if at else "")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", *notbench))
    return code + ("-dirty" if dirty else ""), branch


def cmd_run(a):
    import torch
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    import diffusers
    import diffusers.utils.logging
    from safetensors.torch import load_file
    diffusers.utils.logging.set_verbosity_error()

    size, n = a.size, a.threads
    meshes = a.mesh or ["single"]
    model = model_class(SIZES[size]["family"]).from_pretrained(
        model_dir(a.work, size), torch_dtype=torch.float32).eval()
    io = load_file(io_path(a.work, size))
    ref = io.pop("output")
    inputs = {k: v for k, v in io.items() if k != "output_f64"}

    def torch_block(k):
        ts = []
        with torch.inference_mode():
            for _ in range(k):
                t0 = time.perf_counter()
                out = model(**inputs, return_dict=False)[0]
                ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts), (out - ref).abs().max().item()

    commit, branch = source_commit(a.build)
    weft = Weft(a.build, a.work, n, size, a.log)
    res = {"size": size, "size_label": SIZES[size]["label"], "threads": n,
           "commit": commit, "branch": branch, "label": a.label,
           "rounds": a.rounds, "iters": a.iters, "torch_version": torch.__version__,
           "diffusers_version": diffusers.__version__,
           "affinity": sorted(os.sched_getaffinity(0)), "nice": os.nice(0),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
           "max_ref": ref.abs().max().item(), "openblas_core": weft.blas_core,
           "meshes": []}
    try:
        for mesh in meshes:
            weft.reconfigure(mesh)
            weft.forward(1)                      # warm-up, untimed
            torch_block(1)
            tt, tw, errs, comp = [], [], [], []
            terr = 0.0
            for r in range(a.rounds):
                order = ("torch", "weft") if r % 2 == 0 else ("weft", "torch")
                for side in order:
                    time.sleep(a.pause)          # let the other side's threads sleep
                    if side == "torch":
                        ms, e = torch_block(a.iters)
                        tt.append(ms)
                        terr = max(terr, e)
                    else:
                        ms, e, verdict, c = weft.forward(a.iters)
                        tw.append(ms)
                        errs.append(e)
                        comp.append(c)
                print(f"size {size} n={n} {mesh:12s} round {r + 1}/{a.rounds}: "
                      f"torch {tt[-1]:9.2f} ms  weft {tw[-1]:9.2f} ms  "
                      f"ratio {tt[-1] / tw[-1]:.3f}", flush=True)
            res["meshes"].append({"mesh": mesh, "torch_ms": tt, "weft_ms": tw,
                                  "weft_max_abs_err": max(errs),
                                  "weft_compute_ms": comp, "torch_max_abs_err": terr})
    finally:
        weft.close()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


# ---------------------------------------------------------------- table

def cmd_table(a):
    runs = []
    for p in a.files:
        with open(p) as f:
            runs.append(json.load(f))
    print("| size | threads | weft mesh | torch ms, median (min-max) | "
          "weft ms, median (min-max) | torch / weft (medians) | "
          "torch / weft per round, median (min-max) | max abs diff (max abs out) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        for m in r["meshes"]:
            t, w = m["torch_ms"], m["weft_ms"]
            mt, mw = statistics.median(t), statistics.median(w)
            pr = [x / y for x, y in zip(t, w)]
            mesh = "single device" if m["mesh"] == "single" else m["mesh"]
            print(f"| {r['size']} | {r['threads']} | {mesh} | "
                  f"{mt:.1f} ({min(t):.1f}-{max(t):.1f}) | "
                  f"{mw:.1f} ({min(w):.1f}-{max(w):.1f}) | **{mt / mw:.2f}** | "
                  f"{statistics.median(pr):.2f} ({min(pr):.2f}-{max(pr):.2f}) | "
                  f"{m['weft_max_abs_err']:.2e} ({r['max_ref']:.3g}) |")
    seen = sorted({(r["commit"], r["branch"] or "", r.get("openblas_core", "?"),
                    r["torch_version"], r["diffusers_version"]) for r in runs})
    print()
    for c, b, core, tv, dv in seen:
        print(f"weft code at {c} (branch {b}), OpenBLAS kernels {core}; torch {tv}, "
              f"diffusers {dv}.")
    for size, rounds, iters in sorted({(r["size"], r["rounds"], r["iters"]) for r in runs}):
        print(f"Size {size}: {SIZES[size]['label']}; {rounds} alternated rounds of "
              f"{iters} forward(s) per side, each round's median kept.")
    pins = sorted({(r["threads"], tuple(r["affinity"]), r.get("nice", 0),
                    r.get("omp_wait_policy") or "default") for r in runs})
    print("Cores: " + "; ".join(f"{n} thread(s) on cores {list(c)}, nice {k}, "
                                f"torch OMP_WAIT_POLICY {wp}"
                                for n, c, k, wp in pins) + ".")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--work", required=True)
    m.add_argument("--size", choices=SIZES, required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--build", required=True)
    r.add_argument("--size", choices=SIZES, required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--rounds", type=int, default=7)
    r.add_argument("--iters", type=int, default=3)
    r.add_argument("--pause", type=float, default=0.3)
    r.add_argument("--mesh", action="append")
    r.add_argument("--label", default="")
    r.add_argument("--log", default=os.devnull)
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    a = p.parse_args()
    return {"make": cmd_make, "run": cmd_run, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
