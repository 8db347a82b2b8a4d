/* bench_cuda_attention.c — TFLOP/s of the CUDA attention kernel on one
 * shape (bf16, device-resident tensors, output + lse), for
 * tests/gpu/run.sh to compare with torch's scaled_dot_product_attention
 * on the same shape. Usage: bench_cuda_attention S H D causal [B]
 * Prints one line: "weft S=.. H=.. D=.. causal=.. ms=.. tflops=..".
 *
 * Second form, for tests/gpu/attention_variants.sh:
 *   bench_cuda_attention --variants V1,V2,... S H D causal [S H D causal ...]
 * every kernel Vi (a cuda_attention value; "wgmma" the default) on every
 * shape in one process, one line each:
 *   "weft kernel=V S=.. H=.. D=.. causal=.. ms=.. tflops=.. maxdiff=.."
 * ms is the median of 5 timed rounds; maxdiff is the largest |out - out
 * of V1| on the same inputs (V1's own line says 0): a fast variant that
 * computes something else shows here, beside test_cuda_gpu's cases.
 * Two more names select the fp8 path (p->fp8 on the same bf16
 * inputs, in the default context): "fp8" times attention() whole (the
 * quantization of q / k / v included), "fp8-kernel" the fp8 kernel alone
 * on copies quantized once (wf_cuda_attention_fp8_steps); their maxdiff
 * against a bf16 V1 is the fp8 error on these inputs.
 *
 * WEFT_BENCH_ITERS and WEFT_BENCH_ROUNDS (environment) set the launches
 * per round and the rounds (compute-sanitizer runs use 1 and 1);
 * WEFT_CUDA_ATTENTION (the variable of weftd's cuda_attention setting)
 * the kernel of the first form.
 *
 * FLOPs: wf_attention_flops (visible score elements only when causal).
 * Exits 77 without a GPU. Uses the ops table only. */
#include "backend.h"
#include "cuda_plan.h" /* wf_cuda_attention_fp8_steps */
#include "tensor.h"

#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One shape on ctx: inputs from the ramp, `rounds` timed rounds of iters
 * launches; *ret_ms the median per launch. The output stays in *ret_out
 * (device, n bf16 elements) until dev_reset. 0 on success. */
/* fp8: 0 bf16, 1 attention() with p->fp8 (quantization included), 2 the
 * fp8 kernel alone (step 2) on copies quantized by the first call. */
static int run_shape(const wf_backend_ops_t *G, wf_backend_ctx_t *ctx, int64_t B, int64_t S,
                     int64_t H, int64_t D, int causal, int fp8, int rounds, double *ret_ms,
                     wf_attn_params_t *ret_p, void **ret_out)
{
    size_t n = (size_t)(B * S * H * D);
    wf_attn_params_t p = {0};
    p.B = B; p.Sq = p.Skv = S; p.Hq = p.Hkv = H; p.D = D; p.h_end = H;
    p.scale = 1.0f / 11.3137085f; /* 1 / sqrt(128), for every D */
    p.causal = causal;
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = WF_DTYPE_BF16;
    void *q, *k, *v, *o, *l, *f;
    if (G->dev_alloc(ctx, n * 2, &q) || G->dev_alloc(ctx, n * 2, &k) ||
        G->dev_alloc(ctx, n * 2, &v) || G->dev_alloc(ctx, n * 2, &o) ||
        G->dev_alloc(ctx, (size_t)(B * S * H) * 4, &l) || G->dev_alloc(ctx, n * 4, &f)) {
        fprintf(stderr, "bench_cuda_attention: arena too small\n");
        return 1;
    }
    /* Inputs: a ramp converted on the device (values in [-1, 1)), the
     * same for q, k and v (as the figures in BENCHMARKS.md were taken). */
    float *h = malloc(n * 4);
    if (!h)
        return 1;
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((i * 2654435761u) % 2000u) / 1000.0f - 1.0f;
    G->copy_h2d(ctx, f, h, n * 4);
    G->convert(ctx, q, WF_DTYPE_BF16, f, WF_DTYPE_F32, n);
    G->convert(ctx, k, WF_DTYPE_BF16, f, WF_DTYPE_F32, n);
    G->convert(ctx, v, WF_DTYPE_BF16, f, WF_DTYPE_F32, n);
    free(h);
    p.q = q; p.k = k; p.v = v; p.out = o; p.lse = l;
    p.fp8 = fp8 != 0;
    void *ws = NULL;
    const size_t wsb = G->attention_workspace(&p);
    if (wsb && G->dev_alloc(ctx, wsb, &ws) != WF_OK) {
        fprintf(stderr, "bench_cuda_attention: arena too small\n");
        return 1;
    }
    wf_status_t st = G->attention(ctx, &p, ws);
    if (st != WF_OK || G->synchronize(ctx) != WF_OK) {
        fprintf(stderr, "bench_cuda_attention: attention failed (status %d)\n", (int)st);
        return 1;
    }
    int iters = S >= 16384 ? 10 : 50;
    /* WEFT_BENCH_ITERS / WEFT_BENCH_ROUNDS: fewer launches (a sanitizer run) */
    const char *e = getenv("WEFT_BENCH_ITERS");
    if (e && atoi(e) > 0)
        iters = atoi(e);
    e = getenv("WEFT_BENCH_ROUNDS");
    if (e && atoi(e) > 0)
        rounds = atoi(e);
    double ms[16];
    if (rounds > 16)
        rounds = 16;
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now_s();
        for (int i = 0; i < iters; i++) {
            if (fp8 == 2)
                wf_cuda_attention_fp8_steps(ctx, &p, ws, 2);
            else
                G->attention(ctx, &p, ws);
        }
        if (G->synchronize(ctx) != WF_OK) {
            fprintf(stderr, "bench_cuda_attention: attention failed\n");
            return 1;
        }
        ms[r] = (bench_now_s() - t0) * 1e3 / iters;
    }
    bench_sort(ms, rounds);
    *ret_ms = ms[rounds / 2];
    *ret_p = p;
    *ret_out = o;
    return 0;
}

/* A context of GPU 0 running attention kernel `kern` (NULL: the
 * default), as weftd's cuda_attention setting tunes its workers. */
static wf_status_t tuned_ctx(const wf_backend_ops_t *G, const char *kern, wf_backend_ctx_t **ret)
{
    wf_backend_ctx_t *c = NULL;
    wf_status_t st = G->ctx_new(0, 0, &c);
    if (st != WF_OK)
        return st;
    const wf_backend_tuning_t t = { kern, false, WF_GRAPHS_OFF, 0 };
    if ((st = G->ctx_tune(c, &t)) != WF_OK) {
        G->ctx_destroy(&c);
        return st;
    }
    *ret = c;
    return WF_OK;
}

/* --variants LIST S H D causal [...] */
static int run_variants(const wf_backend_ops_t *G, char *list, int nshape, char **sh)
{
    char *vars[32];
    int nv = 0;
    for (char *tok = strtok(list, ","); tok && nv < 32; tok = strtok(NULL, ","))
        vars[nv++] = tok;
    /* the first variant's outputs, per shape, on the host (bf16) */
    uint16_t **ref = calloc((size_t)nshape, sizeof *ref);
    float *a = NULL, *b = NULL;
    int rc = 0;
    if (!ref)
        return 1;
    for (int vi = 0; vi < nv; vi++) {
        const int fp8 = strcmp(vars[vi], "fp8") == 0          ? 1
                        : strcmp(vars[vi], "fp8-kernel") == 0 ? 2
                                                              : 0;
        wf_backend_ctx_t *ctx = NULL;
        if (tuned_ctx(G, fp8 ? NULL : vars[vi], &ctx) != WF_OK) {
            printf("weft kernel=%s: ctx_new failed\n", vars[vi]);
            rc = 1;
            continue;
        }
        for (int si = 0; si < nshape; si++) {
            int64_t S = atoll(sh[4 * si]), H = atoll(sh[4 * si + 1]), D = atoll(sh[4 * si + 2]);
            int causal = atoi(sh[4 * si + 3]);
            size_t n = (size_t)(S * H * D);
            double ms;
            wf_attn_params_t p;
            void *o;
            if (run_shape(G, ctx, 1, S, H, D, causal, fp8, 5, &ms, &p, &o) != 0) {
                printf("weft kernel=%s S=%lld H=%lld D=%lld causal=%d: FAILED\n", vars[vi],
                       (long long)S, (long long)H, (long long)D, causal);
                rc = 1;
                G->dev_reset(ctx);
                continue;
            }
            uint16_t *got = malloc(n * 2);
            double maxdiff = -1;
            if (got && G->copy_d2h(ctx, got, o, n * 2) == WF_OK && G->synchronize(ctx) == WF_OK) {
                if (!ref[si]) {
                    ref[si] = got;
                    got = NULL;
                    maxdiff = 0;
                } else {
                    a = realloc(a, n * 4);
                    b = realloc(b, n * 4);
                    if (a && b) {
                        wf_convert_to_f32(a, ref[si], WF_DTYPE_BF16, n);
                        wf_convert_to_f32(b, got, WF_DTYPE_BF16, n);
                        maxdiff = 0;
                        for (size_t i = 0; i < n; i++) {
                            double d = fabs((double)a[i] - b[i]);
                            if (d > maxdiff || d != d)
                                maxdiff = d;
                        }
                    }
                }
            }
            free(got);
            double tf = wf_attention_flops(&p) / (ms * 1e-3) / 1e12;
            printf("weft kernel=%s S=%lld H=%lld D=%lld causal=%d ms=%.3f tflops=%.1f "
                   "maxdiff=%.3g\n",
                   vars[vi], (long long)S, (long long)H, (long long)D, causal, ms, tf, maxdiff);
            fflush(stdout);
            G->dev_reset(ctx);
        }
        G->ctx_destroy(&ctx);
    }
    for (int si = 0; si < nshape; si++)
        free(ref[si]);
    free(ref);
    free(a);
    free(b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && strcmp(argv[1], "--variants") == 0 && (argc - 3) % 4 == 0) {
        const wf_backend_ops_t *G = wf_backend_cuda();
        if (!G) {
            printf("bench_cuda_attention: no GPU, skipped\n");
            return 77;
        }
        return run_variants(G, argv[2], (argc - 3) / 4, argv + 3);
    }
    if (argc < 5) {
        fprintf(stderr,
                "usage: %s S H D causal [B]\n"
                "       %s --variants V1,V2,... S H D causal [S H D causal ...]\n",
                argv[0], argv[0]);
        return 2;
    }
    int64_t S = atoll(argv[1]), H = atoll(argv[2]), D = atoll(argv[3]);
    int causal = atoi(argv[4]);
    int64_t B = argc > 5 ? atoll(argv[5]) : 1;
    const wf_backend_ops_t *G = wf_backend_cuda();
    wf_backend_ctx_t *ctx = NULL;
    if (!G || tuned_ctx(G, getenv("WEFT_CUDA_ATTENTION"), &ctx) != WF_OK) {
        printf("bench_cuda_attention: no GPU, skipped\n");
        return 77;
    }
    double ms;
    wf_attn_params_t p;
    void *o;
    if (run_shape(G, ctx, B, S, H, D, causal, 0, 1, &ms, &p, &o) != 0)
        return 1;
    double tf = wf_attention_flops(&p) / (ms * 1e-3) / 1e12;
    printf("weft S=%lld H=%lld D=%lld causal=%d ms=%.3f tflops=%.1f\n", (long long)S,
           (long long)H, (long long)D, causal, ms, tf);
    G->ctx_destroy(&ctx);
    return 0;
}
