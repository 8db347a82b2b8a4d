#!/usr/bin/env python3
"""flux_traffic.py — device kernel launches and activation bytes of one
FLUX forward on one GPU, counted from the op sequence of
daemon/models/flux/flux_blocks.c and flux_forward.c (tp 1, one seq rank,
bf16 weights, the batched AdaLN), before and after the forward's bf16 activations:

  before  every activation between ops f32; each bf16 linear first rounds
          its f32 x into the workspace (one more kernel, x read in f32 and
          written in bf16, then read in bf16 by the GEMM); the attention's
          output unpacked to stream order by two copy_rows
  after   the activations a GEMM or the attention reads written in bf16 by
          the op that makes them (modln's nx, head_norm_rope's q / k / v,
          the attention's output, the MLP hidden, cat), and the projection
          groups' outputs in bf16 too; the GEMM reads them in place;
          residual stream, modulation and the linears' f32 outputs the
          gates read stay f32; with one batch row the attention's output
          read in place (joint order = stream order; a single block's
          written by the attention into cat's rows), and a single
          block's norm and gate one call each over both streams; a
          single block's MLP-in its own GEMM with the GELU in its
          epilogue, written into cat (no pass over the hidden)

Counted: every device launch call of the blocks and of the model around
them (a kernel or a cuBLASLt matmul; not the inputs' copies up and
conversions, nor the output's conversion and copy down), and the
activation bytes each of those reads and writes once (the residual
stream, the normalised stream, projections, q / k / v, attention output,
MLP hidden, cat, linear outputs). Not counted: weights, biases, norm
weights, modulation vectors and RoPE tables (per block independent of the
activation dtype, or O(C) per row of B), and the re-reads of K / V by the
attention's tiles (the same factor in both). Usage:

    bench/flux_traffic.py            FLUX.1-dev at 1024 x 1024
    bench/flux_traffic.py S_IMG S_TXT NUM_LAYERS NUM_SINGLE
"""
import sys


def forward(lowp, Ni=4096, Nt=512, C=3072, M=12288, nd=19, ns=38, IN=64, J=4096, OC=64,
            PD=768, B=1):
    N = Ni + Nt
    a = 2 if lowp else 4          # bytes of an activation a GEMM / the attention reads
    f = 4                         # f32
    ops = []                      # (name, launches, bytes read, bytes written)

    def op(name, rd, wr, n=1):
        ops.append((name, n, rd, wr))

    def linear(name, rows, k, n_out, x_bytes, y_bytes=f):
        """A bf16 linear on x (rows, k) in x_bytes per element."""
        if x_bytes == 4:          # the rounding pass, then the GEMM on the copy
            op(name + " round x", rows * k * 4, rows * k * 2)
        op(name, rows * k * 2, rows * n_out * y_bytes)

    def modln(rows):
        op("modln", rows * C * f, rows * C * a)

    def hnr(rows):               # one of q, k, v of one stream part
        op("head_norm_rope", rows * C * a, rows * C * a)

    def gate(rows):
        op("gate_residual", 2 * rows * C * f, rows * C * f)

    def unpack():               # joint order -> stream order
        if not (lowp and B == 1):
            op("copy_rows unpack", N * C * a, N * C * a, 2)

    def double():
        modln(Nt); modln(Ni)
        linear("add_qkv", Nt, C, 3 * C, a, a)
        for _ in range(3): hnr(Nt)
        linear("qkv", Ni, C, 3 * C, a, a)
        for _ in range(3): hnr(Ni)
        op("attention", 3 * N * C * a, N * C * a)
        unpack()
        linear("to_out", Ni, C, C, a)
        linear("to_add_out", Nt, C, C, a)
        gate(Ni); gate(Nt)
        for rows in (Ni, Nt):
            modln(rows)
            linear("ff0 (GELU)", rows, C, M, a, a)
            linear("ff2", rows, M, C, a)
            gate(rows)

    def single():
        if lowp and B == 1:      # one batch row: both streams one run of rows
            modln(N)
        else:
            modln(Nt); modln(Ni)
        if lowp:                 # q / k / v, then the MLP-in with the GELU in
            # its epilogue, written into cat's MLP columns
            linear("qkv", N, C, 3 * C, a, a)
            linear("MLP-in (GELU) -> cat", N, C, M, a, a)
        else:                    # one group GEMM, GELU in place, copied into cat
            linear("qkv + MLP-in", N, C, 3 * C + M, a, a)
            op("bias_act GELU", N * M * f, N * M * f)
            op("copy_rows MLP -> cat", N * M * f, N * M * f)
        for _ in range(3): hnr(Nt); hnr(Ni)
        op("attention", 3 * N * C * a, N * C * a)
        if not (lowp and B == 1):   # one batch row: written into cat's rows
            unpack()
            op("copy_rows attn -> cat", N * C * a, N * C * a)
        linear("proj_out", N, C + M, C, a)
        if lowp and B == 1:
            gate(N)
        else:
            gate(Nt); gate(Ni)

    # outside the blocks (flux_embed.c, flux_forward.c): embedders on f32
    # inputs in both layouts, rope_table, the batched AdaLN, norm_out, proj_out
    linear("x_embedder", Ni, IN, C, f)
    linear("context_embedder", Nt, J, C, f)
    op("rope_table", 0, 0)
    op("timestep_proj x2", 0, 0, 2)
    for k, kin in (("time_l1", 256), ("time_l2", C), ("guid_l1", 256), ("guid_l2", C),
                   ("text_l1", PD), ("text_l2", C)):
        linear(k, B, kin, C, f)
    op("add, add, act (embedders)", 0, 0, 3)
    linear("batched AdaLN", B, C, 344 * C, f)
    outside = list(ops)
    ops.clear()
    double()
    dbl = list(ops)
    ops.clear()
    single()
    sgl = list(ops)
    ops.clear()
    modln(Ni)
    linear("proj_out (final)", Ni, C, OC, a)
    outside += ops

    def tot(lst):
        return (sum(o[1] for o in lst), sum(o[1] * (o[2] + o[3]) for o in lst))

    ld, bd = tot(dbl)
    ls, bs = tot(sgl)
    lo, bo = tot(outside)
    return {"double": (ld, bd), "single": (ls, bs), "outside": (lo, bo),
            "forward": (nd * ld + ns * ls + lo, nd * bd + ns * bs + bo)}


def main():
    args = [int(v) for v in sys.argv[1:]]
    kw = {}
    if len(args) == 4:
        kw = {"Ni": args[0], "Nt": args[1], "nd": args[2], "ns": args[3]}
    for name, lowp in (("before (f32 activations)", False), ("after (bf16 activations)", True)):
        r = forward(lowp, **kw)
        print(name)
        for k in ("double", "single", "outside", "forward"):
            n, b = r[k]
            print(f"  {k:8s} launches {n:5d}  activation bytes {b:16,d}")


if __name__ == "__main__":
    main()
