/* bench_ring_fuse.c — the pass that merging ring steps in the attention
 * kernel saves (backend.h merge mode), fused against unfused,
 * measured in the same run, alternated, median and spread.
 *
 * Two measurements, each on the CPU backend (host memory) or the CUDA
 * backend (device memory; built with CUDA, a GPU present):
 *   step: one ring rank's two steps (R = 2) on one context: q (1, S/2, H,
 *     D) bf16 against two K/V holdings of S/2, causal with the zigzag-free
 *     offsets of rank 1; unfused = attention into a partial f32 buffer +
 *     lse_merge per step + convert of the accumulator to bf16 at the end
 *     (the CPU: tensor.h's wf_lse_merge_rows / wf_convert_from_f32, as
 *     cp_attention does on host memory); fused = attention in merge mode,
 *     final_out on the second step.
 *   ring: wf_cp_attention_run (CPU) / wf_cp_attention_run_dev (CUDA: the
 *     mixed mode, two ranks = two contexts of GPU 0 behind a staged host
 *     comm) with R = 2, U = 1, causal with load balance, alltoall
 *     rotation, bf16 in / out, convert_to_fp32; fused = the backend as it
 *     is, unfused = the same ops table with attention_merge_ok removed.
 *     The time of a run is the slower rank's wf_cp_attention_run call.
 * Prints per measurement: median, min and max of each, and the ratio of
 * the medians unfused / fused (> 1: the fused path is faster); and the
 * passes fusing removes timed alone (the step's two merges and its
 * conversion), the upper bound of what it can save.
 * Usage: bench_ring_fuse [cpu|cuda] [S] [H] [D] [reps]
 * (defaults: cpu 2048 8 64 9; cuda 16384 24 128 15).
 */
#include "backend.h"
#include "comm/comm_host.h"
#include "comm/comm_staged.h"
#include "parallel/cp_attention.h"
#include "tensor.h"

#include "bench_util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what)
{
    fprintf(stderr, "bench_ring_fuse: %s\n", what);
    exit(1);
}

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(256, (bytes + 255u) & ~(size_t)255u);
    if (!p)
        die("out of memory");
    return p;
}

/* Median of n values (sorts them). */
static double median(double *t, int n)
{
    bench_sort(t, n);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* A table row: "what (s_name S, H H, D D)", the unfused and fused
 * medians (ranges) in ms and their ratio. */
static void report(const char *what, const char *s_name, int64_t S, int64_t H, int64_t D,
                   double *fused, double *unfused, int n)
{
    double mf = median(fused, n), mu = median(unfused, n);
    printf("| %s (%s %lld, H %lld, D %lld) | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.3f |\n",
           what, s_name, (long long)S, (long long)H, (long long)D, mu * 1e3,
           unfused[0] * 1e3, unfused[n - 1] * 1e3, mf * 1e3, fused[0] * 1e3,
           fused[n - 1] * 1e3, mu / mf);
}

/* bf16 random values (host). */
static void *bf16_rand(size_t n, unsigned seed)
{
    float *f = xalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    void *b = xalloc(n * 2);
    wf_convert_from_f32(b, WF_DTYPE_BF16, f, n);
    free(f);
    return b;
}

/* ---- step ------------------------------------------------------------------ */

typedef struct env {
    const wf_backend_ops_t *ops;
    wf_backend_ctx_t *ctx;
    bool dev; /* device memory (dev_alloc) */
} env_t;

/* A buffer of the backend's memory holding `host` (or uninitialised). */
static void *buf(env_t *e, size_t bytes, const void *host)
{
    if (!e->dev) {
        void *p = xalloc(bytes);
        if (host)
            memcpy(p, host, bytes);
        return p;
    }
    void *d = NULL;
    if (e->ops->dev_alloc(e->ctx, bytes, &d) != WF_OK)
        die("dev_alloc failed (arena too small)");
    if (host && (e->ops->copy_h2d(e->ctx, d, host, bytes) != WF_OK ||
                 e->ops->synchronize(e->ctx) != WF_OK))
        die("copy_h2d failed");
    return d;
}

static void fill_acc(env_t *e, float *acc, float *lse, size_t rows, int64_t D)
{
    if (e->dev) {
        if (e->ops->fill_f32(e->ctx, acc, 0.0f, rows * (size_t)D) != WF_OK ||
            e->ops->fill_f32(e->ctx, lse, -INFINITY, rows) != WF_OK)
            die("fill_f32");
        return;
    }
    memset(acc, 0, rows * (size_t)D * 4);
    for (size_t i = 0; i < rows; i++)
        lse[i] = -INFINITY;
}

/* The unfused step's merge of part / partl into acc / lse (rows of D). */
static void merge_part(env_t *e, float *acc, float *lse, const float *part,
                       const float *partl, size_t rows, int64_t D)
{
    if (e->dev) {
        if (e->ops->lse_merge(e->ctx, acc, lse, part, partl, (int64_t)rows, D,
                              WF_DTYPE_F32) != WF_OK)
            die("lse_merge");
    } else {
        wf_lse_merge_rows(acc, lse, part, partl, (int64_t)rows, D, WF_DTYPE_F32);
    }
}

/* The unfused run's last pass: acc (n f32) converted into out (bf16). */
static void convert_out(env_t *e, void *out, const float *acc, size_t n)
{
    if (e->dev) {
        if (e->ops->convert(e->ctx, out, WF_DTYPE_BF16, acc, WF_DTYPE_F32, n) != WF_OK)
            die("convert");
    } else {
        wf_convert_from_f32(out, WF_DTYPE_BF16, acc, n);
    }
}

static void bench_step(env_t *e, int64_t S, int64_t H, int64_t D, int reps)
{
    const int64_t L = S / 2;
    const size_t rows = (size_t)(L * H), n = rows * (size_t)D;
    void *hq = bf16_rand(n, 1), *hk[2] = {bf16_rand(n, 2), bf16_rand(n, 3)},
         *hv[2] = {bf16_rand(n, 4), bf16_rand(n, 5)};
    void *q = buf(e, n * 2, hq), *k[2] = {buf(e, n * 2, hk[0]), buf(e, n * 2, hk[1])},
         *v[2] = {buf(e, n * 2, hv[0]), buf(e, n * 2, hv[1])};
    float *acc = buf(e, n * 4, NULL), *lse = buf(e, rows * 4, NULL);
    float *part = buf(e, n * 4, NULL), *partl = buf(e, rows * 4, NULL);
    void *out = buf(e, n * 2, NULL);
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = 1; p.Sq = L; p.Skv = L; p.Hq = H; p.Hkv = H; p.D = D; p.h_end = H;
    p.scale = 1.0f / sqrtf((float)D); p.causal = true;
    p.q_dtype = p.k_dtype = p.v_dtype = WF_DTYPE_BF16; p.out_dtype = WF_DTYPE_F32;
    p.q = q; p.q_offset = L; /* rank 1 of 2 without zigzag: sees both holdings */
    size_t wsb = e->ops->attention_workspace(&p);
    void *ws = wsb ? xalloc(wsb) : NULL;
    double *tf = calloc((size_t)reps, sizeof *tf), *tu = calloc((size_t)reps, sizeof *tu);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        for (int fused = 0; fused < 2; fused++) {
            fill_acc(e, acc, lse, rows, D);
            if (e->dev && e->ops->synchronize(e->ctx) != WF_OK)
                die("synchronize");
            double t0 = bench_now_s();
            for (int s = 0; s < 2; s++) {
                p.k = k[s];
                p.v = v[s];
                p.kv_offset = s * L;
                if (fused) {
                    p.out = acc; p.lse = lse; p.merge = true; p.merge_round = WF_DTYPE_F32;
                    p.final_out = s == 1 ? out : NULL; p.final_dtype = WF_DTYPE_BF16;
                } else {
                    p.out = part; p.lse = partl; p.merge = false; p.final_out = NULL;
                }
                if (e->ops->attention(e->ctx, &p, ws) != WF_OK)
                    die("attention failed");
                if (!fused)
                    merge_part(e, acc, lse, part, partl, rows, D);
            }
            if (!fused)
                convert_out(e, out, acc, n);
            if (e->dev && e->ops->synchronize(e->ctx) != WF_OK)
                die("synchronize (a kernel failed)");
            double t = bench_now_s() - t0;
            if (r >= 0)
                (fused ? tf : tu)[r] = t;
        }
    }
    report("step x2", "S/2", L, H, D, tf, tu, reps);
    /* What fusing removes, alone: the unfused run's two merges and its
     * conversion on the buffers as they are (median of reps). */
    for (int r = 0; r < reps; r++) {
        if (e->dev && e->ops->synchronize(e->ctx) != WF_OK)
            die("synchronize");
        double t0 = bench_now_s();
        for (int s = 0; s < 2; s++)
            merge_part(e, acc, lse, part, partl, rows, D);
        convert_out(e, out, acc, n);
        if (e->dev && e->ops->synchronize(e->ctx) != WF_OK)
            die("convert");
        tu[r] = bench_now_s() - t0;
    }
    double mp = median(tu, reps);
    printf("| the passes alone (2 lse_merge + convert) | %.3f (%.3f-%.3f) | - | - |\n",
           mp * 1e3, tu[0] * 1e3, tu[reps - 1] * 1e3);
    free(tf);
    free(tu);
    free(ws);
    free(hq);
    for (int s = 0; s < 2; s++) {
        free(hk[s]);
        free(hv[s]);
    }
    if (e->dev) {
        e->ops->dev_reset(e->ctx);
    } else {
        free(q); free(k[0]); free(k[1]); free(v[0]); free(v[1]);
        free(acc); free(lse); free(part); free(partl); free(out);
    }
}

/* ---- ring ------------------------------------------------------------------ */

typedef struct ring_run {
    const wf_backend_ops_t *ops;
    bool dev;
    wf_cp_job_t job;            /* pointers set on rank 0 by the rank */
    wf_comm_host_world_t *w;
    const void *q, *k, *v;
    void *out;
} ring_run_t;

typedef struct ring_rank {
    pthread_t tid;
    ring_run_t *run;
    int rank;
    double t;        /* seconds of wf_cp_attention_run(_dev) */
    wf_status_t st;
} ring_rank_t;

static void *ring_rank_main(void *arg)
{
    ring_rank_t *rk = arg;
    ring_run_t *x = rk->run;
    const wf_backend_ops_t *ops = x->ops;
    wf_comm_t *world = NULL, *seq = NULL, *ring = NULL;
    wf_backend_ctx_t *ctx = NULL;
    rk->st = WF_E_INTERNAL;
    /* CUDA: both ranks on GPU 0 (two contexts, 8 GiB arena each) */
    if (ops->ctx_new(x->dev ? 0 : rk->rank, x->dev ? (uint64_t)8 << 30 : 0, &ctx) != WF_OK ||
        wf_comm_host_init(x->w, rk->rank, &world) != WF_OK)
        goto out;
    if (x->dev && wf_comm_staged_wrap(world, ops, ctx, &world) != WF_OK)
        goto out;
    /* seq and ring: both every rank (R = 2, U = 1), as the mesh splits them */
    if (wf_comm_split(world, 0, rk->rank, &seq) != WF_OK ||
        wf_comm_split(world, 0, rk->rank, &ring) != WF_OK)
        goto out;
    wf_cp_job_t job = x->job;
    if (rk->rank == 0) {
        job.q = x->q;
        job.k = x->k;
        job.v = x->v;
        job.out = x->out;
    }
    wf_cp_group_t grp = {.seq = seq, .ring = ring, .ulysses = NULL, .ring_degree = 2,
                         .ulysses_degree = 1};
    if (x->dev) {
        size_t db, hb;
        void *dws = NULL;
        if (wf_cp_attention_workspace_dev(&job, 2, 1, ops, &db, &hb) != WF_OK ||
            ops->dev_alloc(ctx, db, &dws) != WF_OK)
            goto out;
        void *hws = xalloc(hb + 64);
        double t0 = bench_now_s();
        rk->st = wf_cp_attention_run_dev(&job, &grp, ops, ctx, dws, db, hws, hb);
        rk->t = bench_now_s() - t0;
        free(hws);
        ops->dev_reset(ctx);
    } else {
        size_t bytes = wf_cp_attention_workspace(&job, 2, 1, ops);
        void *ws = xalloc(bytes);
        double t0 = bench_now_s();
        rk->st = wf_cp_attention_run(&job, &grp, ops, ctx, ws, bytes);
        rk->t = bench_now_s() - t0;
        free(ws);
    }
out:
    wf_comm_destroy(&ring);
    wf_comm_destroy(&seq);
    wf_comm_destroy(&world);
    ops->ctx_destroy(&ctx);
    return NULL;
}

/* One run of the job on two rank threads: the slower rank's time. */
static double ring_once(ring_run_t *x)
{
    if (wf_comm_host_world_new(2, &x->w) != WF_OK)
        die("host world");
    ring_rank_t rk[2];
    for (int i = 0; i < 2; i++) {
        rk[i] = (ring_rank_t){.run = x, .rank = i};
        if (pthread_create(&rk[i].tid, NULL, ring_rank_main, &rk[i]) != 0)
            die("thread");
    }
    for (int i = 0; i < 2; i++)
        pthread_join(rk[i].tid, NULL);
    wf_comm_host_world_unref(&x->w);
    if (rk[0].st != WF_OK || rk[1].st != WF_OK)
        die("cp attention run failed");
    return rk[0].t > rk[1].t ? rk[0].t : rk[1].t;
}

static void bench_ring(const wf_backend_ops_t *ops, bool dev, int64_t S, int64_t H, int64_t D,
                       int reps)
{
    const size_t n = (size_t)(S * H * D);
    wf_backend_ops_t unfused = *ops;
    unfused.attention_merge_ok = NULL;
    ring_run_t x;
    memset(&x, 0, sizeof x);
    x.dev = dev;
    x.job = (wf_cp_job_t){
        .B = 1, .Sq = S, .Skv = S, .Hq = H, .Hkv = H, .D = D, .hq_begin = 0, .hq_end = H,
        .scale = 1.0f / sqrtf((float)D), .causal = true, .q_dtype = WF_DTYPE_BF16,
        .k_dtype = WF_DTYPE_BF16, .v_dtype = WF_DTYPE_BF16, .out_dtype = WF_DTYPE_BF16,
        .rotate_method = WF_CP_ROTATE_ALLTOALL, .convert_to_fp32 = true,
        .ring_anything = true, .load_balance = true,
    };
    x.q = bf16_rand(n, 11);
    x.k = bf16_rand(n, 12);
    x.v = bf16_rand(n, 13);
    x.out = xalloc(n * 2);
    double *tf = calloc((size_t)reps, sizeof *tf), *tu = calloc((size_t)reps, sizeof *tu);
    for (int r = -1; r < reps; r++)
        for (int fused = 0; fused < 2; fused++) {
            x.ops = fused ? ops : &unfused;
            double t = ring_once(&x);
            if (r >= 0)
                (fused ? tf : tu)[r] = t;
        }
    report("ring R 2", "S", S, H, D, tf, tu, reps);
    free(tf);
    free(tu);
    free((void *)x.q);
    free((void *)x.k);
    free((void *)x.v);
    free(x.out);
}

int main(int argc, char **argv)
{
    const bool cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
    if (argc > 1 && !cuda && strcmp(argv[1], "cpu") != 0)
        die("usage: bench_ring_fuse [cpu|cuda] [S] [H] [D] [reps]");
    int64_t S = argc > 2 ? atoll(argv[2]) : cuda ? 16384 : 2048;
    int64_t H = argc > 3 ? atoll(argv[3]) : cuda ? 24 : 8;
    int64_t D = argc > 4 ? atoll(argv[4]) : cuda ? 128 : 64;
    int reps = argc > 5 ? atoi(argv[5]) : cuda ? 15 : 9;
    if (S < 4 || H < 1 || D < 1 || reps < 1 || S > (1 << 24) || H > 1024 || D > 1024)
        die("bad shape");
    const wf_backend_ops_t *ops = cuda ? wf_backend_cuda() : wf_backend_cpu();
    if (!ops) {
        printf("bench_ring_fuse: built without CUDA, skipped\n");
        return 77;
    }
    env_t e = {.ops = ops, .dev = cuda};
    if (ops->ctx_new(0, cuda ? (uint64_t)8 << 30 : 0, &e.ctx) != WF_OK) {
        printf("bench_ring_fuse: no %s device, skipped\n", ops->name);
        return 77;
    }
    if (!ops->attention_merge_ok)
        die("the backend has no merge mode");
    printf("bench_ring_fuse on %s: ring steps merged in the kernel (fused) against "
           "attention + lse_merge + convert (unfused), alternated, %d runs each\n\n",
           ops->name, reps);
    printf("| what | unfused ms median (min-max) | fused ms median (min-max) | "
           "unfused / fused |\n|---|---|---|---|\n");
    bench_step(&e, S, H, D, reps);
    ops->ctx_destroy(&e.ctx);
    bench_ring(ops, cuda, S, H, D, reps);
    return 0;
}
