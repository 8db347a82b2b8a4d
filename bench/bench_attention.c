/* bench_attention.c — throughput of the CPU attention kernel against the
 * OpenBLAS sgemm of the same machine, measured in the same run.
 *
 * For S = 4096, H = 8, D in {64, 128}, f32, B = 1: attention GFLOP/s
 * (4 B H S^2 D / time; causal counts only visible score elements) with 1
 * thread (all heads on one context) and 2 threads (two contexts, each
 * running attention() on half the heads, as the daemon's workers do),
 * beside sgemm GFLOP/s of a large square product with the same thread
 * count (openblas_set_num_threads). Best of a few runs. Prints a markdown
 * table. Usage: bench_attention [S] [reps]
 *
 * With D a multiple of 16 on an AVX-512 build, attention runs the tile
 * path (kernels/cpu/attn_tile.c), causal or not, which does not call
 * OpenBLAS: the sgemm column is then the BLAS rate of the machine as
 * OpenBLAS picks its kernels (OPENBLAS_CORETYPE), a reference and no
 * bound; a ratio above 1 is possible.
 *
 * Timing mode, for bench/attention_cpu_torch.sh (weft beside torch's SDPA):
 *   bench_attention --time S D H THREADS ITERS
 * B = 1, Sq = Skv = S, H heads (Hq = Hkv), f32, non-causal, scale
 * 1 / sqrt(D), out and lse; THREADS contexts each run attention() on
 * their share of the heads (as the daemon's workers do). One warm-up call,
 * then ITERS timed calls, one line "t SECONDS" each.
 */
#include "backend.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int num_threads);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xaligned(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63u) & ~(size_t)63u);
    if (!p) {
        fprintf(stderr, "bench_attention: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* sgemm GFLOP/s of an n x n x n product with `threads` OpenBLAS threads. */
static double sgemm_gflops(int n, int threads, int reps)
{
    openblas_set_num_threads(threads);
    size_t nn = (size_t)n * (size_t)n;
    float *a = xaligned(nn * 4), *b = xaligned(nn * 4), *c = xaligned(nn * 4);
    fill(a, nn, 1);
    fill(b, nn, 2);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                    a, n, b, n, 0.0f, c, n);
        t = now_s() - t;
        if (r > 0 && t < best) /* the first run warms up */
            best = t;
    }
    free(a);
    free(b);
    free(c);
    openblas_set_num_threads(1);
    return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

typedef struct worker {
    const wf_backend_ops_t *ops;
    wf_backend_ctx_t *ctx;
    wf_attn_params_t p;
    void *ws;
    wf_status_t st;
} worker_t;

static void *worker_run(void *arg)
{
    worker_t *w = arg;
    w->st = w->ops->attention(w->ctx, &w->p, w->ws);
    return NULL;
}

/* Seconds of one attention over all heads, split over `threads` contexts. */
static double attention_time(const wf_backend_ops_t *ops, wf_backend_ctx_t **ctx,
                             const wf_attn_params_t *p, int threads, void **ws)
{
    worker_t w[2];
    pthread_t tid[2];
    int64_t per = (p->Hq + threads - 1) / threads;
    double t = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (worker_t){ops, ctx[i], *p, ws[i], WF_OK};
        w[i].p.h_begin = i * per;
        w[i].p.h_end = (i + 1) * per < p->Hq ? (i + 1) * per : p->Hq;
        if (threads == 1)
            worker_run(&w[i]);
        else
            pthread_create(&tid[i], NULL, worker_run, &w[i]);
    }
    if (threads > 1)
        for (int i = 0; i < threads; i++)
            pthread_join(tid[i], NULL);
    t = now_s() - t;
    for (int i = 0; i < threads; i++)
        if (w[i].st != WF_OK) {
            fprintf(stderr, "bench_attention: attention failed (%d)\n", (int)w[i].st);
            exit(1);
        }
    return t;
}

/* The timing mode (file comment). */
static int time_mode(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: bench_attention --time S D H THREADS ITERS\n");
        return 2;
    }
    int S = atoi(argv[2]), D = atoi(argv[3]), H = atoi(argv[4]);
    int threads = atoi(argv[5]), iters = atoi(argv[6]);
    if (S < 1 || D < 1 || H < 1 || threads < 1 || threads > 2 || iters < 1) {
        fprintf(stderr, "bench_attention: S, D, H, ITERS >= 1, THREADS 1 or 2\n");
        return 2;
    }
    const wf_backend_ops_t *ops = wf_backend_cpu();
    wf_backend_ctx_t *ctx[2] = {NULL, NULL};
    for (int i = 0; i < threads; i++)
        if (ops->ctx_new(i, 0, &ctx[i]) != WF_OK) {
            fprintf(stderr, "bench_attention: ctx_new failed\n");
            return 1;
        }
    size_t n = (size_t)S * (size_t)H * (size_t)D;
    float *q = xaligned(n * 4), *k = xaligned(n * 4), *v = xaligned(n * 4),
          *o = xaligned(n * 4), *lse = xaligned((size_t)S * H * 4);
    fill(q, n, 3);
    fill(k, n, 4);
    fill(v, n, 5);
    wf_attn_params_t p = {
        .B = 1, .Sq = S, .Skv = S, .Hq = H, .Hkv = H, .D = D,
        .h_begin = 0, .h_end = H, .scale = 1.0f / sqrtf((float)D),
        .q = q, .q_dtype = WF_DTYPE_F32, .k = k, .k_dtype = WF_DTYPE_F32,
        .v = v, .v_dtype = WF_DTYPE_F32, .out = o, .out_dtype = WF_DTYPE_F32, .lse = lse,
    };
    void *ws[2] = {xaligned(ops->attention_workspace(&p)),
                   threads > 1 ? xaligned(ops->attention_workspace(&p)) : NULL};
    (void)attention_time(ops, ctx, &p, threads, ws);
    for (int r = 0; r < iters; r++)
        printf("t %.9f\n", attention_time(ops, ctx, &p, threads, ws));
    free(ws[0]);
    free(ws[1]);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    for (int i = 0; i < threads; i++)
        ops->ctx_destroy(&ctx[i]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--time") == 0)
        return time_mode(argc, argv);
    int S = argc > 1 ? atoi(argv[1]) : 4096;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (S < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_attention [S >= 1] [reps >= 1]\n");
        return 2;
    }
    const int H = 8;
    const wf_backend_ops_t *ops = wf_backend_cpu();
    wf_backend_ctx_t *ctx[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        if (ops->ctx_new(i, 0, &ctx[i]) != WF_OK) {
            fprintf(stderr, "bench_attention: ctx_new failed\n");
            return 1;
        }

    /* The machine may be shared: sgemm is measured before and after the
     * attention runs and its best figure is the baseline, so contention
     * can only lower the printed ratio, never inflate it. */
    double gemm[3] = {0, sgemm_gflops(2048, 1, reps), sgemm_gflops(2048, 2, reps)};

    enum { ROWS = 8 };
    struct { int D, causal, threads; double gf; } row[ROWS];
    int nrows = 0;
    const int Ds[2] = {64, 128};
    for (int di = 0; di < 2; di++) {
        int D = Ds[di];
        size_t n = (size_t)S * (size_t)H * (size_t)D;
        float *q = xaligned(n * 4), *k = xaligned(n * 4), *v = xaligned(n * 4),
              *o = xaligned(n * 4), *lse = xaligned((size_t)S * H * 4);
        fill(q, n, 3);
        fill(k, n, 4);
        fill(v, n, 5);
        for (int causal = 0; causal < 2; causal++) {
            wf_attn_params_t p = {
                .B = 1, .Sq = S, .Skv = S, .Hq = H, .Hkv = H, .D = D,
                .h_begin = 0, .h_end = H, .scale = 1.0f / sqrtf((float)D),
                .causal = causal, .q = q, .q_dtype = WF_DTYPE_F32,
                .k = k, .k_dtype = WF_DTYPE_F32, .v = v, .v_dtype = WF_DTYPE_F32,
                .out = o, .out_dtype = WF_DTYPE_F32, .lse = lse,
            };
            void *ws[2] = {xaligned(ops->attention_workspace(&p)),
                           xaligned(ops->attention_workspace(&p))};
            for (int threads = 1; threads <= 2; threads++) {
                double best = 1e30;
                for (int r = 0; r < reps; r++) {
                    double t = attention_time(ops, ctx, &p, threads, ws);
                    if (t < best)
                        best = t;
                }
                row[nrows].D = D;
                row[nrows].causal = causal;
                row[nrows].threads = threads;
                row[nrows].gf = wf_attention_flops(&p) / best * 1e-9;
                nrows++;
            }
            free(ws[0]);
            free(ws[1]);
        }
        free(q);
        free(k);
        free(v);
        free(o);
        free(lse);
    }
    for (int t = 1; t <= 2; t++) {
        double again = sgemm_gflops(2048, t, reps);
        if (again > gemm[t])
            gemm[t] = again;
    }

    printf("| S | H | D | causal | threads | attention GFLOP/s | sgemm GFLOP/s | ratio |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nrows; i++)
        printf("| %d | %d | %d | %s | %d | %.1f | %.1f | %.2f |\n", S, H, row[i].D,
               row[i].causal ? "yes" : "no", row[i].threads, row[i].gf,
               gemm[row[i].threads], row[i].gf / gemm[row[i].threads]);
    for (int i = 0; i < 2; i++)
        ops->ctx_destroy(&ctx[i]);
    return 0;
}
