"""bench_lib.py — what the GPU benchmarks beside diffusers share
(flux_bench.py, wan_bench.py): the log that becomes NAME.txt, a weftd
driven by weftctl (Weft), CUDA-event timing, the measured bf16 matrix
rate, weftctl forward's figures, medians and their spread, and the
SIGTERM of run.sh's deadline (start() installs it). Imported, never run.
"""
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

T0 = time.monotonic()
LOG = []
DAEMONS = []   # weftd processes this script started: stopped on SIGTERM too
OUT_DIR = []   # --out, for the signal handler
NAME = ["bench"]  # the benchmark's name: NAME.txt, NAME.json, its socket and log


def say(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    LOG.append(line)


def elapsed():
    return time.monotonic() - T0


def start(name):
    """A benchmark called `name` begins: its files are name.txt / name.json,
    and run.sh's SIGTERM stops the daemons it started (on_term)."""
    NAME[0] = name
    signal.signal(signal.SIGTERM, on_term)


def write_log(out_dir):
    """What stdout showed, as OUT_DIR/NAME.txt."""
    with open(os.path.join(out_dir, f"{NAME[0]}.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")


# ---------------------------------------------------------------- weft side
WEFTCTL_TIME = re.compile(r"time ([0-9.]+) ms median, ([0-9.]+) ms best over (\d+) iteration"
                          r".*compute (\d+) us")
WEFTCTL_ERR = re.compile(r"max abs error ([0-9.eE+-]+|nan|inf|-nan) \(tolerance ([0-9.eE+-]+)\) "
                         r"(PASS|FAIL)")


def parse_weftctl_forward(text):
    """weftctl forward's lines (client/weftctl_models.c): 'time X ms median,
    Y ms best over N iterations (daemon: queue Q us, compute C us)' and
    'max abs error E (tolerance T) PASS|FAIL'. Returns a dict (None where
    a line is missing)."""
    r = {"median_ms": None, "best_ms": None, "iters": None, "compute_ms": None,
         "max_err": None, "tol": None, "verdict": None}
    m = WEFTCTL_TIME.search(text)
    if m:
        r.update(median_ms=float(m.group(1)), best_ms=float(m.group(2)),
                 iters=int(m.group(3)), compute_ms=int(m.group(4)) / 1000.0)
    m = WEFTCTL_ERR.search(text)
    if m:
        r.update(max_err=float(m.group(1)), tol=float(m.group(2)), verdict=m.group(3))
    return r


def add_weftd_args(ap):
    """The weftd flags of both benchmarks: its CUDA arena, which must
    leave diffusers' PyTorch side room (by default weftd takes 90% of what
    is free at its start), and any others."""
    ap.add_argument("--gpu-memory", default="0.45",
                    help="weftd --gpu-memory: its CUDA arena, bytes or a fraction of the GPU's "
                         "memory (default 0.45: the rest stays for diffusers)")
    ap.add_argument("--weftd-args", default="",
                    help="more weftd flags, one string (e.g. \"--cuda-attention mma\")")


def weftd_flags(a):
    """The flags add_weftd_args took, as weftd's argument list."""
    return ["--gpu-memory", a.gpu_memory, *shlex.split(a.weftd_args)]


class Weft:
    """weftd on --devices serving one model directory, driven by weftctl
    (its socket and log named after the benchmark, and `tag` when one
    benchmark runs two daemons)."""

    def __init__(self, weftd, weftctl, devices, model_root, logdir, extra=(), tag=""):
        self.weftctl = weftctl
        name = NAME[0] + (f"-{tag}" if tag else "")
        self.sock = f"/tmp/weft-{name}-{os.getpid()}.sock"
        self.endpoint = "ipc://" + self.sock
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.log_path = os.path.join(logdir, f"weftd-{name}.log")
        self.log = open(self.log_path, "w")
        cmd = [weftd, "--devices", devices, "--listen", self.endpoint,
               "--model-root", model_root, *extra]
        say("weftd:", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        DAEMONS.append(self.proc)

    def ctl(self, *args, timeout=120):
        cmd = [self.weftctl, "--endpoint", self.endpoint, *args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            return p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
                else (e.stdout or "")
            return 124, out + f"\n(weftctl timed out after {timeout} s)"

    def up(self, wait_s=30.0):
        """True once weftd answers hello (each try waits up to 1 s for the
        reply); False as soon as it exits, or after wait_s."""
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            rc, _ = self.ctl("--timeout", "1000", "hello", timeout=10)
            if rc == 0:
                return True
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def log_tail(self, n=8):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().splitlines()[-n:]
        except OSError:
            return []


# ---------------------------------------------------------------- torch side
def torch_setup(device):
    import torch
    if device.startswith("cuda") and not torch.cuda.is_available():
        say(f"{NAME[0]}: torch sees no CUDA device")
        sys.exit(2)
    return torch


class Timer:
    """Milliseconds of one call: CUDA events on a GPU, else perf_counter."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.startswith("cuda")

    def time(self, fn):
        torch = self.torch
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b)
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3


def matmul_rate(torch, device, n, timer):
    """bf16 FLOP/s of torch.matmul n x n x n on random data: median of 10."""
    g = torch.Generator(device=device).manual_seed(7)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    ts = [timer.time(lambda: torch.matmul(a, b, out=c)) for _ in range(10)]
    ms = statistics.median(ts)
    return 2.0 * n ** 3 / (ms * 1e-3), ms


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s, unit="ms"):
    if not s:
        return "n/a"
    return f"{s['median']:.2f} {unit} (min {s['min']:.2f}, max {s['max']:.2f}, n {s['n']})"


def versions_and_rate(torch, diffusers, a, report, timer):
    """Say the versions and the device, and measure the bf16 matrix rate
    (a --matmul cube, at most 1024 with --tiny): this run's ceiling, in
    report["matmul"]. -> FLOP/s."""
    cuda = a.device.startswith("cuda")
    say(f"torch {torch.__version__}, diffusers {diffusers.__version__}, device {a.device}"
        + (f" ({torch.cuda.get_device_name()})" if cuda else ""))
    report["versions"] = {"torch": torch.__version__, "diffusers": diffusers.__version__}
    n = a.matmul if not a.tiny else min(a.matmul, 1024)
    rate, mm_ms = matmul_rate(torch, a.device, n, timer)
    report["matmul"] = {"n": n, "ms": mm_ms, "flops_per_s": rate}
    say(f"bf16 matmul {n}^3: {mm_ms:.3f} ms, {rate / 1e12:.1f} TFLOP/s (this run's ceiling)")
    return rate


BF16_U = 2.0 ** -8   # bf16's unit roundoff (half its relative step)


def derived_tolerance(report, k_roundings):
    """The bound on max |weft - diffusers bf16| / max |diffusers bf16| a
    benchmark holds weft to, derived, not picked. -> (tol, weft_vs_f32
    bound or None, how).

    With diffusers' f32 run of the same weights (the yardstick in
    report["diffusers_bf16_vs_f32"], its error e_d = max |diffusers bf16 -
    f32| / max |f32|): weft must be no further from the f32 result than
    2 e_d (it rounds fewer tensors than diffusers' bf16 run, whose
    residual stream is bf16 too; 2 leaves room for the max over the
    output being noisy), and then |weft - diffusers| <= |weft - f32| +
    |diffusers - f32| <= 3 e_d by the triangle inequality. At least 2 u.

    Without it, the probabilistic model of rounding errors: each path
    rounds about K tensors of relative error up to u, of both signs, so
    each element of each output is off by about sqrt(K) u, the difference
    of the two (independent roundings) by sqrt(2 K) u, and the largest
    of some 10^5 - 10^6 elements lies within 4.5 of those: 4.5 sqrt(2 K)
    u, a sanity bound (at FLUX.1-dev's K = 276, 0.41)."""
    d = report.get("diffusers_bf16_vs_f32")
    if d:
        e = d["rel"]
        tol = max(3.0 * e, 2.0 * BF16_U)
        return tol, max(2.0 * e, BF16_U), (
            f"3 x diffusers' own bf16 error {e:.2e} against its f32 run "
            f"(weft within 2 x that of the f32 run, triangle inequality)")
    tol = 4.5 * math.sqrt(2.0 * k_roundings) * BF16_U
    return tol, None, (f"4.5 sqrt(2 K) u with K = {k_roundings} roundings per path "
                       f"(no f32 yardstick: a sanity bound)")


def reference(torch, model, dev_in, host_in, path, stem, meta, report, f32_ref, device):
    """diffusers' forward of `model` on dev_in (its warm-up), saved with
    the inputs (host_in) as PATH/io-STEM.safetensors (`output`: the
    reference `weftctl forward` compares with); with f32_ref, the yardstick
    of the bf16 comparison too: the same weights and inputs run in f32
    (TF32 off), saved as io-STEM-f32ref.safetensors (weft's output is read
    against it beside diffusers' own bf16 error, in
    report["diffusers_bf16_vs_f32"]). -> (io path, f32 io path or None)."""
    import copy
    from safetensors.torch import save_file
    cuda = device.startswith("cuda")

    def fwd(m, x):
        with torch.no_grad():
            out = m(**x, return_dict=False)[0]
        if cuda:
            torch.cuda.synchronize()
        return out

    t = time.monotonic()
    ref = fwd(model, dev_in)
    say(f"diffusers first forward (warm-up) {time.monotonic() - t:.2f} s; output "
        f"{tuple(ref.shape)} {ref.dtype}, max |out| {ref.float().abs().max().item():.3g}, "
        f"finite {bool(torch.isfinite(ref).all().item())}")
    inputs = {k: v.contiguous() for k, v in host_in.items()}
    io_path = os.path.join(path, f"io-{stem}.safetensors")
    save_file({**inputs, "output": ref.cpu().contiguous()}, io_path, metadata=meta)
    say(f"inputs + diffusers' output: {io_path}")
    if not f32_ref:
        return io_path, None
    t = time.monotonic()
    m32 = copy.deepcopy(model).float()
    in32 = {k: (v.float() if v.is_floating_point() else v) for k, v in dev_in.items()}
    ref32 = fwd(m32, in32)
    del m32
    if cuda:
        torch.cuda.empty_cache()
    mx32 = ref32.abs().max().item()
    e = (ref.float() - ref32).abs().max().item()
    report["diffusers_bf16_vs_f32"] = {"max_err": e, "max_ref": mx32, "rel": e / mx32}
    say(f"diffusers f32 reference (same weights, f32 arithmetic) in "
        f"{time.monotonic() - t:.1f} s: |diffusers bf16 - f32| max {e:.3e} = "
        f"{e / mx32:.2e} of max |f32| {mx32:.3g}")
    io32_path = os.path.join(path, f"io-{stem}-f32ref.safetensors")
    save_file({**inputs, "output": ref32.cpu().contiguous()}, io32_path, metadata=meta)
    return io_path, io32_path


def on_term(signum, frame):
    """A deadline's SIGTERM (run.sh's timeout): stop the daemon this script
    started, keep what was written, exit 124."""
    for p in DAEMONS:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    say(f"{NAME[0]}: stopped by signal {signum} at {elapsed():.0f} s")
    for d in OUT_DIR:
        write_log(d)
    sys.exit(124)
