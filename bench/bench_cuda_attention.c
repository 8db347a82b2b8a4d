/* bench_cuda_attention.c — TFLOP/s of the CUDA attention kernel on one
 * shape (bf16, device-resident tensors, output + lse), for
 * tests/gpu/run.sh to compare with torch's scaled_dot_product_attention
 * on the same shape. Usage: bench_cuda_attention S H D causal [B]
 * Prints one line: "weft S=.. H=.. D=.. causal=.. ms=.. tflops=..".
 * FLOPs: wf_attention_flops (visible score elements only when causal).
 * Exits 77 without a GPU. Uses the ops table only. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s S H D causal [B]\n", argv[0]);
        return 2;
    }
    int64_t S = atoll(argv[1]), H = atoll(argv[2]), D = atoll(argv[3]);
    int causal = atoi(argv[4]);
    int64_t B = argc > 5 ? atoll(argv[5]) : 1;
    const wf_backend_ops_t *G = wf_backend_cuda();
    wf_backend_ctx_t *ctx = NULL;
    if (!G || G->ctx_new(0, 0, &ctx) != WF_OK) {
        printf("bench_cuda_attention: no GPU, skipped\n");
        return 77;
    }
    size_t n = (size_t)(B * S * H * D);
    wf_attn_params_t p = {0};
    p.B = B; p.Sq = p.Skv = S; p.Hq = p.Hkv = H; p.D = D; p.h_end = H;
    p.scale = 1.0f / 11.3137085f;
    p.causal = causal;
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = WF_DTYPE_BF16;
    void *q, *k, *v, *o, *l, *f;
    if (G->dev_alloc(ctx, n * 2, &q) || G->dev_alloc(ctx, n * 2, &k) ||
        G->dev_alloc(ctx, n * 2, &v) || G->dev_alloc(ctx, n * 2, &o) ||
        G->dev_alloc(ctx, (size_t)(B * S * H) * 4, &l) || G->dev_alloc(ctx, n * 4, &f)) {
        fprintf(stderr, "bench_cuda_attention: arena too small\n");
        return 1;
    }
    /* Inputs: a ramp converted on the device (values in [-1, 1)). */
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((i * 2654435761u) % 2000u) / 1000.0f - 1.0f;
    G->copy_h2d(ctx, f, h, n * 4);
    G->convert(ctx, q, WF_DTYPE_BF16, f, WF_DTYPE_F32, n);
    G->convert(ctx, k, WF_DTYPE_BF16, f, WF_DTYPE_F32, n);
    G->convert(ctx, v, WF_DTYPE_BF16, f, WF_DTYPE_F32, n);
    p.q = q; p.k = k; p.v = v; p.out = o; p.lse = l;
    if (G->attention(ctx, &p, NULL) != WF_OK || G->synchronize(ctx) != WF_OK) {
        fprintf(stderr, "bench_cuda_attention: attention failed\n");
        return 1;
    }
    int iters = S >= 16384 ? 10 : 50;
    double t0 = now();
    for (int i = 0; i < iters; i++)
        G->attention(ctx, &p, NULL);
    if (G->synchronize(ctx) != WF_OK) {
        fprintf(stderr, "bench_cuda_attention: attention failed\n");
        return 1;
    }
    double ms = (now() - t0) * 1e3 / iters;
    double tf = wf_attention_flops(&p) / (ms * 1e-3) / 1e12;
    printf("weft S=%lld H=%lld D=%lld causal=%d ms=%.3f tflops=%.1f\n", (long long)S,
           (long long)H, (long long)D, causal, ms, tf);
    free(h);
    G->ctx_destroy(&ctx);
    return 0;
}
