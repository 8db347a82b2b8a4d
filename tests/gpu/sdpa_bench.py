# sdpa_bench.py — TFLOP/s of torch.nn.functional.scaled_dot_product_attention
# on the shapes of bench_cuda_attention (bf16, B=1, H, D), FLOPs counted
# the same way (4 * B * H * D * visible scores; causal: S (S + 1) / 2).
# Usage: python3 sdpa_bench.py [--fa3] [--fa3-fp8] S H D causal [S H D causal ...]
# (several shapes in one process: torch starts once). One line per shape:
#   "sdpa S=.. H=.. D=.. causal=.. ms=.. tflops=.."
# --fa3: also FlashAttention-3 (its Hopper package, flash_attn_interface or
# flash_attn_3) on the same shapes when it imports: "fa3 S=... tflops=..";
# otherwise one line "fa3: not importable (...)".
# --fa3-fp8 (with or without --fa3): FA3's fp8 forward (e4m3 q / k / v,
# descale factors 1) on the same shapes: "fa3-fp8 S=... tflops=..", for
# weft's fp8 path beside it.
import sys
import torch
import torch.nn.functional as F


def timed(fn, iters):
    for _ in range(3):
        fn()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0.record()
    for _ in range(iters):
        fn()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / iters


def flops(S, H, D, causal):
    visible = S * (S + 1) / 2 if causal else S * S
    return 4.0 * H * D * visible


def bench(S, H, D, causal):
    B = 1
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    iters = 10 if S >= 16384 else 50
    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), iters)
    tf = B * flops(S, H, D, causal) / (ms * 1e-3) / 1e12
    print(f"sdpa S={S} H={H} D={D} causal={causal} ms={ms:.3f} tflops={tf:.1f}", flush=True)


def fa3_func():
    """FlashAttention-3's forward, or the reason it is not there."""
    errors = []
    for mod in ("flash_attn_interface", "flash_attn_3.flash_attn_interface"):
        try:
            m = __import__(mod, fromlist=["flash_attn_func"])
            return m.flash_attn_func, None
        except Exception as e:  # noqa: BLE001 - any import failure means "absent"
            errors.append(f"{mod}: {type(e).__name__}: {e}")
    return None, "; ".join(errors)


def bench_fa3(fn, S, H, D, causal):
    B = 1
    # FA3 takes (B, S, H, D)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    iters = 10 if S >= 16384 else 50
    ms = timed(lambda: fn(q, k, v, causal=bool(causal)), iters)
    tf = B * flops(S, H, D, causal) / (ms * 1e-3) / 1e12
    print(f"fa3 S={S} H={H} D={D} causal={causal} ms={ms:.3f} tflops={tf:.1f}", flush=True)


def bench_fa3_fp8(fn, S, H, D, causal):
    B = 1
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
               .to(torch.float8_e4m3fn) for _ in range(3))
    one = torch.ones(B, H, device="cuda", dtype=torch.float32)
    iters = 10 if S >= 16384 else 50
    ms = timed(lambda: fn(q, k, v, causal=bool(causal), q_descale=one, k_descale=one,
                          v_descale=one), iters)
    tf = B * flops(S, H, D, causal) / (ms * 1e-3) / 1e12
    print(f"fa3-fp8 S={S} H={H} D={D} causal={causal} ms={ms:.3f} tflops={tf:.1f}", flush=True)


argv = sys.argv[1:]
with_fa3 = with_fa3_fp8 = False
while argv and argv[0] in ("--fa3", "--fa3-fp8"):
    with_fa3 |= argv[0] == "--fa3"
    with_fa3_fp8 |= argv[0] == "--fa3-fp8"
    argv = argv[1:]
args = [int(x) for x in argv]
if not args or len(args) % 4:
    sys.exit("usage: sdpa_bench.py [--fa3] [--fa3-fp8] S H D causal [S H D causal ...]")
for i in range(0, len(args), 4):
    bench(*args[i:i + 4])
if with_fa3:
    fn, why = fa3_func()
    if fn is None:
        print(f"fa3: not importable ({why})", flush=True)
    else:
        for i in range(0, len(args), 4):
            try:
                bench_fa3(fn, *args[i:i + 4])
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"fa3 S={args[i]} causal={args[i + 3]}: failed ({type(e).__name__}: {e})",
                      flush=True)
if with_fa3_fp8:
    fn, why = fa3_func()
    if fn is None:
        print(f"fa3-fp8: not importable ({why})", flush=True)
    else:
        for i in range(0, len(args), 4):
            try:
                bench_fa3_fp8(fn, *args[i:i + 4])
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"fa3-fp8 S={args[i]} causal={args[i + 3]}: failed "
                      f"({type(e).__name__}: {e})", flush=True)
