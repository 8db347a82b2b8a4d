# sdpa_bench.py — TFLOP/s of torch.nn.functional.scaled_dot_product_attention
# on the shapes of bench_cuda_attention (bf16, B=1, H, D), FLOPs counted
# the same way (4 * B * H * D * visible scores; causal: S (S + 1) / 2).
# Usage: python3 sdpa_bench.py S H D causal [S H D causal ...]
# (several shapes in one process: torch starts once). One line per shape.
import sys
import torch
import torch.nn.functional as F


def bench(S, H, D, causal):
    B = 1
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    iters = 10 if S >= 16384 else 50
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0.record()
    for _ in range(iters):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    t1.record()
    torch.cuda.synchronize()
    ms = t0.elapsed_time(t1) / iters
    visible = S * (S + 1) / 2 if causal else S * S
    tf = 4.0 * B * H * D * visible / (ms * 1e-3) / 1e12
    print(f"sdpa S={S} H={H} D={D} causal={causal} ms={ms:.3f} tflops={tf:.1f}", flush=True)


args = [int(x) for x in sys.argv[1:]]
if not args or len(args) % 4:
    sys.exit("usage: sdpa_bench.py S H D causal [S H D causal ...]")
for i in range(0, len(args), 4):
    bench(*args[i:i + 4])
