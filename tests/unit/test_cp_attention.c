/* test_cp_attention.c — multi-threaded test of cp_attention: N threads =
 * N ranks of a host-comm world laid out as (dp 1, ring R, ulysses U, tp T),
 * split into seq / ring / ulysses groups with wf_mesh_color; each tp slice
 * is a context-parallel group serving its heads, whose root alone reads the
 * full inputs and writes its heads of the full outputs. Results are checked
 * against an fp64 reference over a grid of meshes, rotate methods, merge
 * precision, dtypes, even and uneven sequences and heads, causal with and
 * without zigzag, GQA (with replication), cross-attention. Also: check()
 * verdicts and messages, the load balance of the zigzag plan (visible score
 * elements per ring rank), workspace guards, and an error on one rank
 * reaching the others as an abort instead of a hang; local mode (every
 * rank its own shard) bit-identical to the root mode;
 * device mode (wf_cp_attention_run_dev): every buffer on a stand-in device
 * whose memory is scrambled (support/standin_dev.h), the host comm behind
 * comm_staged.h, so a byte that skips the backend's copies shows.
 * WF_TEST_QUICK=1 thins the grid (for the sanitizers). */
#include "parallel/cp_attention.h"
#include "comm/comm_host.h"
#include "comm/comm_staged.h"
#include "support/check.h"
#include "support/cp_groups.h"
#include "support/standin_dev.h"
#include "base/mesh.h"
#include "reference.h"
#include "tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static float rnd_unit(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static size_t dsize(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4 : 2; }

/* unit roundoff of a dtype */
static double eps_of(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 0x1p-24 : dt == WF_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

static const char *dt_name(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? "f32" : dt == WF_DTYPE_F16 ? "f16" : "bf16";
}

static void hsplit(int64_t n, int64_t parts, int64_t i, int64_t *s, int64_t *l)
{
    int64_t q = n / parts, rem = n % parts;
    *s = i * q + (i < rem ? i : rem);
    *l = q + (i < rem ? 1 : 0);
}

/* ---- one case ------------------------------------------------------------------ */

typedef struct tcase {
    int R, U, T;                        /* mesh */
    int64_t B, Sq, Skv, Hq, Hkv, D;     /* problem */
    bool causal, lb;                    /* mask, zigzag */
    wf_cp_rotate_t rot;                 /* ring K/V movement */
    bool fp32;                          /* convert_to_fp32 */
    wf_dtype_t in, out;                 /* dtypes of q/k/v and out */
    bool ring_any, uly_any;             /* anything flags */
    bool lse;                           /* return_lse */
    int64_t h_begin, h_end;             /* T = 1 only: slice served (0,0 = all) */
} tcase_t;

/* Buffers of a case, shared by the rank threads (roots only touch them). */
typedef struct tdata {
    const tcase_t *c;          /* the case */
    unsigned char *q, *k, *v;  /* inputs in c->in, at odd addresses */
    unsigned char *out;        /* output in c->out, odd address */
    float *lse;                /* (B, Sq, Hq) */
    wf_comm_host_world_t *w;   /* the world */
    int short_rank;            /* rank given a short workspace, or -1 */
    bool local;                /* local mode: the per-rank buffers below */
    bool dev;                  /* device mode: case_ops is the stand-in device */
    unsigned char **lq, **lk, **lv, **lout; /* per world rank: own shards */
    float **llse;              /* per world rank: own lse rows */
} tdata_t;

typedef struct trank {
    pthread_t tid;       /* thread */
    tdata_t *d;          /* case */
    int rank;            /* world rank */
    wf_status_t st;      /* result of run */
    bool guard_ok;       /* workspace guard untouched */
    bool setup_ok;       /* comm / mesh setup worked */
} trank_t;

#define GUARD 256

/* The stand-in's transfer counters, summed over the device-mode ranks
 * (test_device, test_device_ring). */
static _Atomic uint64_t dev_xfers, dev_overlaps, dev_conflicts;

/* The backend of the case being run (the CPU one, or the stand-in device). */
static const wf_backend_ops_t *case_ops;

static void *rank_main(void *arg)
{
    trank_t *t = arg;
    const tcase_t *c = t->d->c;
    t->st = WF_E_INTERNAL;
    t->guard_ok = true;
    t->setup_ok = false;
    wf_comm_t *world = NULL, *seq = NULL, *ring = NULL, *uly = NULL;
    wf_backend_ctx_t *ctx = NULL;
    const wf_backend_ops_t *ops = case_ops ? case_ops : wf_backend_cpu();
    if (wf_comm_host_init(t->d->w, t->rank, &world) != WF_OK)
        return NULL;
    if (t->d->dev) {
        /* device mode: the context first, the world behind the staging */
        if (ops->ctx_new(t->rank, 0, &ctx) != WF_OK ||
            wf_comm_staged_wrap(world, ops, ctx, &world) != WF_OK) {
            wf_comm_destroy(&world);
            ops->ctx_destroy(&ctx);
            return NULL;
        }
    }
    wf_mesh_coords_t co;
    if (cp_groups_split(world, t->rank, c->R, c->U, c->T, &co, &seq, &ring, &uly) != WF_OK)
        goto out;
    if (!ctx && ops->ctx_new(t->rank, 0, &ctx) != WF_OK)
        goto out;
    t->setup_ok = true;

    wf_cp_job_t job = {
        .B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
        .scale = (float)(1.0 / sqrt((double)c->D)), .causal = c->causal,
        .q_dtype = c->in, .k_dtype = c->in, .v_dtype = c->in, .out_dtype = c->out,
        .return_lse = c->lse, .rotate_method = c->rot, .convert_to_fp32 = c->fp32,
        .ring_anything = c->ring_any, .ulysses_anything = c->uly_any,
        .load_balance = c->lb,
    };
    if (c->h_end > 0) {
        job.hq_begin = c->h_begin;
        job.hq_end = c->h_end;
    } else {
        int64_t hb, hl;
        hsplit(c->Hq, c->T, co.tp, &hb, &hl);
        job.hq_begin = hb;
        job.hq_end = hb + hl;
    }
    if (t->d->local) { /* every rank: its own shard */
        job.local = true;
        job.q = t->d->lq[t->rank];
        job.k = t->d->lk[t->rank];
        job.v = t->d->lv[t->rank];
        job.out = t->d->lout[t->rank];
        job.lse = c->lse ? t->d->llse[t->rank] : NULL;
    } else if (co.ring == 0 && co.ulysses == 0) { /* the slice's root */
        job.q = t->d->q;
        job.k = t->d->k;
        job.v = t->d->v;
        job.out = t->d->out;
        job.lse = c->lse ? t->d->lse : NULL;
    }
    wf_cp_group_t grp = {.seq = seq, .ring = ring, .ulysses = uly,
                         .ring_degree = c->R, .ulysses_degree = c->U};
    if (t->d->dev) {
        size_t db = 0, hb = 0;
        void *dws = NULL;
        if (wf_cp_attention_workspace_dev(&job, c->R, c->U, ops, &db, &hb) != WF_OK ||
            ops->dev_alloc(ctx, db, &dws) != WF_OK) {
            t->st = WF_E_BAD_ARGUMENT;
            goto out;
        }
        size_t halloc = (hb + GUARD + 63) & ~(size_t)63;
        unsigned char *hws = aligned_alloc(64, halloc);
        memset(hws, 0xff, hb);
        memset(hws + hb, 0xa5, halloc - hb);
        size_t give = t->rank == t->d->short_rank ? 64 : db;
        t->st = wf_cp_attention_run_dev(&job, &grp, ops, ctx, dws, give, hws, hb);
        for (size_t i = hb; i < halloc; i++)
            t->guard_ok &= hws[i] == 0xa5;
        free(hws);
        ops->dev_reset(ctx);
        goto out;
    }
    size_t bytes = wf_cp_attention_workspace(&job, c->R, c->U, ops);
    if (bytes == 0 || bytes == SIZE_MAX) {
        t->st = WF_E_BAD_ARGUMENT;
        goto out;
    }
    size_t alloc = (bytes + GUARD + 63) & ~(size_t)63;
    unsigned char *ws = aligned_alloc(64, alloc);
    memset(ws, 0xff, bytes); /* NaN everywhere: reading stale bytes shows */
    memset(ws + bytes, 0xa5, alloc - bytes);
    size_t give = t->rank == t->d->short_rank ? 64 : bytes;
    t->st = wf_cp_attention_run(&job, &grp, ops, ctx, ws, give);
    for (size_t i = bytes; i < alloc; i++)
        t->guard_ok &= ws[i] == 0xa5;
    free(ws);
out:
    if (t->d->dev && ctx) {
        /* before the handles go: a staged handle still holding a transfer
         * would show as a conflict */
        wf_standin_counters_t k = wf_standin_counters(ctx);
        atomic_fetch_add(&dev_xfers, k.xfer_d2h + k.xfer_h2d);
        atomic_fetch_add(&dev_overlaps, k.xfer_overlaps);
        atomic_fetch_add(&dev_conflicts, k.xfer_conflicts);
    }
    ops->ctx_destroy(&ctx);
    wf_comm_destroy(&uly);
    wf_comm_destroy(&ring);
    wf_comm_destroy(&seq);
    wf_comm_destroy(&world);
    return NULL;
}

static unsigned char *make_input(size_t n, wf_dtype_t dt, float amp, float **ret_f32)
{
    float *f = malloc(n * sizeof(float) + 4);
    unsigned char *buf = malloc(n * dsize(dt) + 1);
    for (size_t i = 0; i < n; i++)
        f[i] = amp * rnd_unit();
    wf_convert_from_f32(buf + 1, dt, f, n);
    wf_convert_to_f32(f, buf + 1, dt, n);
    *ret_f32 = f;
    return buf;
}

/* Worst errors, relative to max |ref| for out and absolute for lse, by
 * [input dtype][output dtype][merge in dtype], over cases with R > 1
 * (where ring steps are merged) and over all cases. */
static double worst_out[3][3][2], worst_lse[3][3][2];
static double worst_out_all[3][3][2];
static long ncases, ncases_ring;

/* Tolerances, out relative to max |ref|, lse absolute. fp32 merge: the
 * f32 kernel and merges (4e-6; the kernel test allows 2e-5 for longer
 * rows) plus two roundings to the output dtype. Merge in the input dtype
 * (u = its unit roundoff): a row is merged from at most m = 2R partial
 * results (R ring steps, two zigzag pieces each), each partial and each
 * merged value rounded to the dtype: (m + 2) u on out. lse stays f32 in
 * both modes; the rounded partial outputs shift it by no more than the
 * out error does (it is computed from f32 partial lse values). A single
 * step (R = 1) merges nothing and is not rounded. */
static void tolerances(const tcase_t *c, double max_lse, double *tol_out,
                       double *tol_lse)
{
    bool in_dtype = !c->fp32 && c->in != WF_DTYPE_F32 && c->R > 1;
    double m = 2.0 * c->R;
    *tol_out = 4e-6 + 2.0 * eps_of(c->out);
    *tol_lse = 2e-6 * (1.0 + max_lse);
    if (in_dtype) {
        double u = eps_of(c->in);
        *tol_out += (m + 2.0) * u;
    }
}

/* Largest error / tolerance seen (how much margin the tolerances leave). */
static double worst_ratio_out, worst_ratio_lse;

static bool dev_mode; /* run_case in device mode (test_device) */

static int run_case(const tcase_t *c, int short_rank)
{
    const int N = c->R * c->U * c->T;
    size_t nq = (size_t)(c->B * c->Sq * c->Hq * c->D);
    size_t nkv = (size_t)(c->B * c->Skv * c->Hkv * c->D);
    size_t nl = (size_t)(c->B * c->Sq * c->Hq);
    float *qf, *kf, *vf;
    tdata_t d = {.c = c, .short_rank = short_rank, .dev = dev_mode};
    unsigned char *qb = make_input(nq, c->in, 2.0f, &qf);
    unsigned char *kb = make_input(nkv, c->in, 1.0f, &kf);
    unsigned char *vb = make_input(nkv, c->in, 1.0f, &vf);
    size_t ob = nq * dsize(c->out);
    unsigned char *outb = malloc(ob + 1);
    memset(outb, 0x5a, ob + 1);
    d.q = qb + 1;
    d.k = kb + 1;
    d.v = vb + 1;
    d.out = outb + 1;
    d.lse = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++)
        d.lse[i] = 12345.0f;
    int fails_before = failed;

    CHECK(wf_comm_host_world_new(N, &d.w) == WF_OK, "world");
    trank_t *t = calloc((size_t)N, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i] = (trank_t){.d = &d, .rank = i};
        CHECK(pthread_create(&t[i].tid, NULL, rank_main, &t[i]) == 0, "thread");
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i].tid, NULL);
    wf_comm_host_world_unref(&d.w);

    bool ran = true;
    for (int i = 0; i < N; i++) {
        CHECK(t[i].setup_ok, "rank %d: setup", i);
        CHECK(t[i].guard_ok, "rank %d: wrote past its workspace", i);
        if (short_rank >= 0) {
            wf_status_t want = i == short_rank ? WF_E_BAD_ARGUMENT : WF_E_ABORTED;
            CHECK(t[i].st == want, "rank %d: short workspace on rank %d gave %d, want %d",
                  i, short_rank, (int)t[i].st, (int)want);
        } else {
            CHECK(t[i].st == WF_OK, "rank %d: run returned %d", i, (int)t[i].st);
        }
        ran &= t[i].st == WF_OK;
    }
    free(t);

    if (short_rank < 0 && ran) {
        double *ro = malloc(nq * sizeof(double)), *rl = malloc(nl * sizeof(double));
        /* over all heads; causal is top-left (query i sees j <= i); the
         * scale is the f32 one the ranks use */
        const wf_ref_attn_t ra = {
            .B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv,
            .D = c->D, .scale = (double)(float)(1.0 / sqrt((double)c->D)),
            .causal = c->causal,
        };
        CHECK(wf_ref_attention(&ra, qf, kf, vf, ro, rl) == WF_OK, "reference attention failed");
        float *of = malloc(nq * sizeof(float));
        wf_convert_to_f32(of, d.out, c->out, nq);
        int64_t hb = c->h_end > 0 ? c->h_begin : 0, he = c->h_end > 0 ? c->h_end : c->Hq;
        double maxref = 0, eo = 0, el = 0;
        for (size_t i = 0; i < nq; i++) {
            int64_t h = (int64_t)(i / (size_t)c->D) % c->Hq;
            if (h >= hb && h < he)
                maxref = fabs(ro[i]) > maxref ? fabs(ro[i]) : maxref;
        }
        double max_lse = 0;
        for (size_t i = 0; i < nl; i++)
            if (!isinf(rl[i]))
                max_lse = fmax(max_lse, fabs(rl[i]));
        double tol_out, tol_lse;
        tolerances(c, max_lse, &tol_out, &tol_lse);
        if (d.dev && c->in != WF_DTYPE_F32) {
            /* the stand-in device rounds P to the input dtype before P V
             * (as a GPU kernel does): each output moves by at most u
             * sum_j P_j |v_j| / l <= u max |v| */
            double vmax = 0;
            for (size_t i = 0; i < nkv; i++)
                vmax = fmax(vmax, fabs(vf[i]));
            tol_out += eps_of(c->in) * vmax / (maxref > 0 ? maxref : 1);
        }
        int bad = 0;
        for (size_t row = 0; row < nl; row++) {
            int64_t h = (int64_t)row % c->Hq;
            if (h < hb || h >= he) {
                bool untouched = true;
                size_t rb = (size_t)c->D * dsize(c->out);
                for (size_t x = 0; x < rb; x++)
                    untouched &= d.out[row * rb + x] == 0x5a;
                CHECK(untouched && d.lse[row] == 12345.0f,
                      "head %lld outside the slice written", (long long)h);
                continue;
            }
            for (int64_t x = 0; x < c->D; x++) {
                size_t i = row * (size_t)c->D + (size_t)x;
                double e = fabs((double)of[i] - ro[i]) / (maxref > 0 ? maxref : 1);
                if (!(e <= eo))
                    eo = e; /* NaN sticks */
            }
            if (c->lse) {
                if (isinf(rl[row])) {
                    CHECK(isinf(d.lse[row]) && d.lse[row] < 0, "lse %g, want -inf",
                          (double)d.lse[row]);
                } else {
                    double e = fabs((double)d.lse[row] - rl[row]);
                    if (!(e <= el))
                        el = e;
                }
            } else {
                bad += d.lse[row] != 12345.0f;
            }
        }
        CHECK(bad == 0, "lse written although not requested");
        CHECK(eo <= tol_out, "out error %.3g > tol %.3g", eo, tol_out);
        CHECK(el <= tol_lse, "lse error %.3g > tol %.3g", el, tol_lse);
        worst_ratio_out = fmax(worst_ratio_out, eo / tol_out);
        worst_ratio_lse = fmax(worst_ratio_lse, el / tol_lse);
        int md = !c->fp32 && c->in != WF_DTYPE_F32;
        if (c->R > 1) {
            worst_out[c->in][c->out][md] = fmax(worst_out[c->in][c->out][md], eo);
            worst_lse[c->in][c->out][md] = fmax(worst_lse[c->in][c->out][md], el);
            ncases_ring++;
        }
        worst_out_all[c->in][c->out][md] = fmax(worst_out_all[c->in][c->out][md], eo);
        ncases++;
        free(ro);
        free(rl);
        free(of);
    }
    if (failed != fails_before)
        fprintf(stderr,
                "  in case mesh (R%d,U%d,T%d) B%lld Sq%lld Skv%lld Hq%lld Hkv%lld D%lld "
                "causal=%d lb=%d rot=%s fp32=%d %s->%s ring_any=%d uly_any=%d lse=%d "
                "slice [%lld,%lld)\n",
                c->R, c->U, c->T, (long long)c->B, (long long)c->Sq, (long long)c->Skv,
                (long long)c->Hq, (long long)c->Hkv, (long long)c->D, c->causal, c->lb,
                c->rot == WF_CP_ROTATE_ALLGATHER ? "allgather" : "alltoall", c->fp32,
                dt_name(c->in), dt_name(c->out), c->ring_any, c->uly_any, c->lse,
                (long long)c->h_begin, (long long)c->h_end);
    free(qb);
    free(kb);
    free(vb);
    free(qf);
    free(kf);
    free(vf);
    free(outb);
    free(d.lse);
    return failed - fails_before;
}

/* ---- the grid ------------------------------------------------------------------- */

typedef struct shape {
    const char *name;
    int64_t B, Sq, Skv, Hq, Hkv, D;
    bool anything; /* needs the anything flags on some meshes */
} shape_t;

static void test_grid(bool quick)
{
    static const int meshes[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 2, 1},
                                    {1, 4, 1}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2},
                                    {3, 1, 1}, {1, 3, 1}};
    static const shape_t shapes[] = {
        {"divisible", 2, 24, 24, 12, 12, 16, false},
        {"uneven S, H", 2, 23, 23, 7, 7, 16, true},
        {"GQA 8/2", 2, 24, 24, 8, 2, 16, false},
        {"GQA 6/2 uneven", 2, 19, 19, 6, 2, 8, true},
        {"GQA 4/1", 1, 24, 24, 4, 1, 16, false},
        {"cross Sq<Skv", 2, 17, 29, 6, 3, 16, true},
        {"cross Sq>Skv", 1, 30, 12, 4, 2, 16, true},
        {"tiny S<P, H<U", 2, 3, 3, 3, 1, 8, true},
    };
    static const wf_dtype_t dts[][2] = {{WF_DTYPE_F32, WF_DTYPE_F32},
                                        {WF_DTYPE_F16, WF_DTYPE_F16},
                                        {WF_DTYPE_BF16, WF_DTYPE_BF16},
                                        {WF_DTYPE_BF16, WF_DTYPE_F32},
                                        {WF_DTYPE_F16, WF_DTYPE_F32}};
    long n = 0, run = 0;
    double t0 = now_s();
    for (size_t mi = 0; mi < sizeof meshes / sizeof meshes[0]; mi++) {
        int R = meshes[mi][0], U = meshes[mi][1], T = meshes[mi][2];
        int fails = 0;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const shape_t *s = &shapes[si];
            for (int cm = 0; cm < 3; cm++)          /* none, causal, causal + zigzag */
                for (int rot = 0; rot < (R > 1 ? 2 : 1); rot++)
                    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
                        for (int fp = 1; fp >= (dts[di][0] == WF_DTYPE_F32 ? 1 : 0); fp--) {
                            n++;
                            /* quick: every 6th, rotating through the grid */
                            if (quick && (n % 6) != (long)(mi % 6))
                                continue;
                            tcase_t c = {
                                .R = R, .U = U, .T = T, .B = s->B, .Sq = s->Sq,
                                .Skv = s->Skv, .Hq = s->Hq, .Hkv = s->Hkv, .D = s->D,
                                .causal = cm > 0, .lb = cm == 2,
                                .rot = rot ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER,
                                .fp32 = fp == 1, .in = dts[di][0], .out = dts[di][1],
                                .ring_any = s->anything, .uly_any = s->anything,
                                .lse = (n % 4) != 3,
                            };
                            /* a shape that does not divide over this mesh
                             * is refused without the flags, then runs with
                             * them */
                            if (!s->anything) {
                                wf_cp_job_t j = {.B = c.B, .Sq = c.Sq, .Skv = c.Skv,
                                                 .Hq = c.Hq, .Hkv = c.Hkv, .D = c.D,
                                                 .hq_end = c.Hq / T, .scale = 1.0f};
                                wf_status_t st = wf_cp_attention_check(&j, R, U, NULL, 0);
                                bool divides = c.Sq % (R * U) == 0 &&
                                               c.Skv % (R * U) == 0 &&
                                               (c.Hq / T) % U == 0;
                                CHECK(st == (divides ? WF_OK : WF_E_BAD_SHAPE),
                                      "check() of %s on (%d,%d,%d): %d", s->name, R, U,
                                      T, (int)st);
                                c.ring_any = c.uly_any = !divides;
                            }
                            fails += run_case(&c, -1);
                            run++;
                        }
        }
        printf("  mesh ring=%d ulysses=%d tp=%d: %s\n", R, U, T, fails ? "FAILED" : "ok");
    }
    printf("grid: %ld cases run (%ld in the grid), %.1f s\n", run, n, now_s() - t0);
}

/* A group serving a slice of the heads writes exactly those heads. */
static void test_slices(void)
{
    static const int meshes[][2] = {{2, 2}, {4, 1}, {1, 3}};
    for (size_t i = 0; i < 3; i++) {
        tcase_t c = {.R = meshes[i][0], .U = meshes[i][1], .T = 1, .B = 2, .Sq = 21,
                     .Skv = 26, .Hq = 8, .Hkv = 4, .D = 8, .causal = true, .lb = true,
                     .rot = WF_CP_ROTATE_ALLTOALL, .fp32 = true, .in = WF_DTYPE_BF16,
                     .out = WF_DTYPE_F16, .ring_any = true, .uly_any = true, .lse = true,
                     .h_begin = 3, .h_end = 8};
        run_case(&c, -1);
    }
    printf("head slices: 3 groups wrote only heads [3, 8)\n");
}

/* Sequences longer than the kernel's tiles (128 query rows, 512 keys), so
 * that pieces cross tile boundaries and zigzag pieces straddle the
 * diagonal inside a tile. */
static void test_long(bool quick)
{
    static const int meshes[][3] = {{2, 2, 1}, {4, 1, 1}, {1, 4, 1}};
    int n = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int rot = 0; rot < 2; rot++) {
            if (quick && rot != mi % 2)
                continue;
            tcase_t c = {.R = meshes[mi][0], .U = meshes[mi][1], .T = meshes[mi][2],
                         .B = 1, .Sq = 1100, .Skv = 1100, .Hq = 4, .Hkv = 2, .D = 32,
                         .causal = true, .lb = mi != 2,
                         .rot = rot ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER,
                         .fp32 = rot == 0, .in = WF_DTYPE_BF16, .out = WF_DTYPE_F32,
                         .ring_any = true, .uly_any = true, .lse = true};
            run_case(&c, -1);
            n++;
        }
    printf("long: %d cases of S = 1100 (tiles crossed)\n", n);
}

/* The mixed mode (a device-memory backend with the host comm): every
 * kernel call staged through the backend's arena, results as on the CPU. */
/* ---- device mode ---------------------------------------------------------------- */

/* Device mode on the stand-in device: meshes x rotations x dtypes x
 * causal / load balance / uneven / GQA / lse, against the fp64 reference
 * (run_case), and a short device workspace on one rank failing there and
 * aborting the others. */
static void test_device(bool quick)
{
    static const int meshes[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1},
                                    {4, 1, 1}, {1, 4, 1}, {2, 2, 2}, {3, 2, 1}};
    const wf_backend_ops_t *ops = wf_standin_dev_backend();
    case_ops = ops;
    dev_mode = true;
    int n = 0, nm = quick ? 4 : 8;
    for (int mi = 0; mi < nm; mi++)
        for (int v = 0; v < 4; v++) {
            tcase_t c = {.R = meshes[mi][0], .U = meshes[mi][1], .T = meshes[mi][2],
                         .B = 2, .Sq = v & 1 ? 45 : 48, .Skv = v & 1 ? 45 : 48, .Hq = 8,
                         .Hkv = v < 2 ? 2 : 8, .D = 16, .causal = v != 1, .lb = v == 2,
                         .rot = v & 1 ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER,
                         .fp32 = v != 3,
                         .in = v == 0 ? WF_DTYPE_F32 : v == 1 ? WF_DTYPE_F16 : WF_DTYPE_BF16,
                         .out = v == 2 ? WF_DTYPE_F32 : v == 1 ? WF_DTYPE_F16 : WF_DTYPE_BF16,
                         .ring_any = true, .uly_any = true, .lse = v != 1};
            run_case(&c, -1);
            n++;
        }
    /* cross attention, Sq != Skv */
    tcase_t x = {.R = 2, .U = 2, .T = 1, .B = 1, .Sq = 40, .Skv = 72, .Hq = 4, .Hkv = 4,
                 .D = 16, .rot = WF_CP_ROTATE_ALLTOALL, .fp32 = true, .in = WF_DTYPE_F32,
                 .out = WF_DTYPE_F32, .ring_any = true, .uly_any = true, .lse = true};
    run_case(&x, -1);
    n++;
    /* a short device workspace on rank 1: WF_E_BAD_ARGUMENT there, aborted elsewhere */
    tcase_t s2 = x;
    s2.R = 2;
    s2.U = 1;
    run_case(&s2, 1);
    case_ops = NULL;
    dev_mode = false;
    /* A backend on device memory in host mode (and device mode without
     * the device entries) is refused before anything. */
    wf_cp_job_t j = {.B = 1, .Sq = 4, .Skv = 4, .Hq = 1, .Hkv = 1, .D = 16, .hq_end = 1,
                     .scale = 0.25f, .q_dtype = WF_DTYPE_F32, .k_dtype = WF_DTYPE_F32,
                     .v_dtype = WF_DTYPE_F32, .out_dtype = WF_DTYPE_F32};
    wf_cp_group_t g1 = {.ring_degree = 1, .ulysses_degree = 1};
    static _Alignas(64) unsigned char ws[1 << 16];
    size_t db = 0, hb = 0;
    CHECK(wf_cp_attention_run(&j, &g1, ops, NULL, ws, sizeof ws) == WF_E_BAD_ARGUMENT,
          "host mode on a device backend");
    CHECK(wf_cp_attention_workspace_dev(&j, 1, 1, wf_backend_cpu(), &db, &hb) ==
              WF_E_BAD_ARGUMENT, "device mode on the CPU backend");
    CHECK(wf_cp_attention_run_dev(&j, &g1, wf_backend_cpu(), NULL, ws, sizeof ws, ws,
                                  sizeof ws) == WF_E_BAD_ARGUMENT,
          "device mode run on the CPU backend");
    /* local mode on device buffers moves the shards with copy_rows: a
     * backend without it is refused */
    j.local = true;
    wf_backend_ops_t no_rows = *ops;
    no_rows.copy_rows = NULL;
    CHECK(wf_cp_attention_workspace_dev(&j, 1, 1, &no_rows, &db, &hb) == WF_E_BAD_ARGUMENT,
          "device mode in local mode without copy_rows");
    CHECK(atomic_load(&dev_conflicts) == 0, "device mode: accesses to a range being copied");
    printf("device mode (stand-in device, staged host comm): %d cases\n", n);
}

/* The ring with alltoall rotation in device mode, where the staged comm
 * overlaps each step's copies with its kernels (comm_staged.h; the
 * stand-in's transfer thread delays every copy and refuses a kernel on a
 * range still being copied): R = 2, 3, 4, causal with and without load
 * balance, even and uneven sequences, GQA, against the fp64 reference.
 * The transfers must have run while kernels ran, and never under one. */
static void test_device_ring(bool quick)
{
    const wf_backend_ops_t *ops = wf_standin_dev_backend();
    case_ops = ops;
    dev_mode = true;
    atomic_store(&dev_xfers, 0);
    atomic_store(&dev_overlaps, 0);
    atomic_store(&dev_conflicts, 0);
    int n = 0;
    for (int R = 2; R <= 4; R++)
        for (int v = 0; v < (quick ? 2 : 4); v++) {
            bool uneven = v & 1;
            tcase_t c = {.R = R, .U = 1, .T = 1, .B = 2,
                         .Sq = uneven ? 47 + 16 * R : 16 * R * 2,
                         .Skv = uneven ? 47 + 16 * R : 16 * R * 2, .Hq = 4,
                         .Hkv = v < 2 ? 2 : 4, .D = 16, .causal = true, .lb = v < 2,
                         .rot = WF_CP_ROTATE_ALLTOALL, .fp32 = v != 2,
                         .in = v == 3 ? WF_DTYPE_F32 : WF_DTYPE_BF16,
                         .out = v == 3 ? WF_DTYPE_F32 : WF_DTYPE_BF16,
                         .ring_any = true, .uly_any = true, .lse = true};
            run_case(&c, -1);
            n++;
        }
    /* R = 3 with U = 2 (the ring group a split of the world) */
    tcase_t u = {.R = 3, .U = 2, .T = 1, .B = 1, .Sq = 61, .Skv = 61, .Hq = 4, .Hkv = 2,
                 .D = 16, .causal = true, .lb = true, .rot = WF_CP_ROTATE_ALLTOALL,
                 .fp32 = true, .in = WF_DTYPE_F16, .out = WF_DTYPE_F16, .ring_any = true,
                 .uly_any = true, .lse = true};
    run_case(&u, -1);
    n++;
    case_ops = NULL;
    dev_mode = false;
    uint64_t x = atomic_load(&dev_xfers), o = atomic_load(&dev_overlaps),
             k = atomic_load(&dev_conflicts);
    CHECK(x > 0 && o > 0, "device ring: %llu transfers, %llu kernel accesses during them",
          (unsigned long long)x, (unsigned long long)o);
    CHECK(k == 0, "device ring: %llu accesses to a range being copied", (unsigned long long)k);
    printf("device ring, alltoall rotation, overlapped staging: %d cases, %llu transfers, "
           "%llu device accesses while one was pending, %llu conflicts\n",
           n, (unsigned long long)x, (unsigned long long)o, (unsigned long long)k);
}

/* ---- local mode ------------------------------------------------------------------ */

/* Run case c in local mode (T = 1: world rank = seq index) and check each
 * rank's out / lse rows bit for bit against the root mode's full outputs
 * at the rows of its seq shard (wf_cp_attention_segments). */
static int run_local_case(const tcase_t *c)
{
    const int N = c->R * c->U;
    const int64_t row = c->Hq * c->D, rowkv = c->Hkv * c->D;
    const size_t ei = dsize(c->in), eo = dsize(c->out);
    size_t nq = (size_t)(c->B * c->Sq * row), nkv = (size_t)(c->B * c->Skv * rowkv);
    size_t nl = (size_t)(c->B * c->Sq * c->Hq);
    int fails_before = failed;
    float *qf, *kf, *vf;
    unsigned char *qb = make_input(nq, c->in, 2.0f, &qf);
    unsigned char *kb = make_input(nkv, c->in, 1.0f, &kf);
    unsigned char *vb = make_input(nkv, c->in, 1.0f, &vf);
    unsigned char *outb = calloc(nq * eo + 1, 1);
    float *lse = calloc(nl, sizeof(float));
    tdata_t d = {.c = c, .q = qb + 1, .k = kb + 1, .v = vb + 1, .out = outb + 1, .lse = lse,
                 .short_rank = -1};
    wf_cp_job_t j = {.B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv,
                     .D = c->D, .hq_begin = 0, .hq_end = c->Hq, .scale = 1.0f,
                     .causal = c->causal, .ring_anything = c->ring_any,
                     .ulysses_anything = c->uly_any, .load_balance = c->lb, .local = true};
    wf_cp_seg_t qs[WF_CP_MAX_SEGS * 64], ks[WF_CP_MAX_SEGS * 64];
    int nqs[64], nks[64];
    unsigned char *lq[64], *lk[64], *lv[64], *lo[64];
    float *ll[64];
    int64_t lqn[64], lkn[64];
    for (int phase = 0; phase < 2; phase++) {
        d.local = phase == 1;
        if (d.local) {
            /* each rank's rows of q and k / v, in segment order */
            for (int i = 0; i < N; i++) {
                CHECK(wf_cp_attention_segments(&j, c->R, c->U, i, false, false,
                                               qs + i * WF_CP_MAX_SEGS, &nqs[i]) == WF_OK &&
                          wf_cp_attention_segments(&j, c->R, c->U, i, false, true,
                                                   ks + i * WF_CP_MAX_SEGS, &nks[i]) == WF_OK,
                      "segments of rank %d", i);
                lqn[i] = lkn[i] = 0;
                for (int k = 0; k < nqs[i]; k++)
                    lqn[i] += qs[i * WF_CP_MAX_SEGS + k].len;
                for (int k = 0; k < nks[i]; k++)
                    lkn[i] += ks[i * WF_CP_MAX_SEGS + k].len;
                lq[i] = malloc((size_t)(c->B * lqn[i] * row) * ei + 1);
                lk[i] = malloc((size_t)(c->B * lkn[i] * rowkv) * ei + 1);
                lv[i] = malloc((size_t)(c->B * lkn[i] * rowkv) * ei + 1);
                lo[i] = malloc((size_t)(c->B * lqn[i] * row) * eo + 1);
                ll[i] = malloc((size_t)(c->B * lqn[i] * c->Hq) * sizeof(float) + 4);
                memset(lo[i], 0x5a, (size_t)(c->B * lqn[i] * row) * eo + 1);
                for (int64_t b = 0; b < c->B; b++) {
                    for (int k = 0; k < nqs[i]; k++) {
                        const wf_cp_seg_t *g = &qs[i * WF_CP_MAX_SEGS + k];
                        memcpy(lq[i] + 1 + (size_t)((b * lqn[i] + g->local) * row) * ei,
                               d.q + (size_t)((b * c->Sq + g->start) * row) * ei,
                               (size_t)(g->len * row) * ei);
                    }
                    for (int k = 0; k < nks[i]; k++) {
                        const wf_cp_seg_t *g = &ks[i * WF_CP_MAX_SEGS + k];
                        size_t at = (size_t)((b * c->Skv + g->start) * rowkv) * ei;
                        size_t to = (size_t)((b * lkn[i] + g->local) * rowkv) * ei;
                        memcpy(lk[i] + 1 + to, d.k + at, (size_t)(g->len * rowkv) * ei);
                        memcpy(lv[i] + 1 + to, d.v + at, (size_t)(g->len * rowkv) * ei);
                    }
                }
                lq[i]++; lk[i]++; lv[i]++; lo[i]++; /* odd addresses */
            }
            d.lq = lq;
            d.lk = lk;
            d.lv = lv;
            d.lout = lo;
            d.llse = ll;
        }
        CHECK(wf_comm_host_world_new(N, &d.w) == WF_OK, "world");
        trank_t *t = calloc((size_t)N, sizeof *t);
        for (int i = 0; i < N; i++) {
            t[i] = (trank_t){.d = &d, .rank = i};
            CHECK(pthread_create(&t[i].tid, NULL, rank_main, &t[i]) == 0, "thread");
        }
        for (int i = 0; i < N; i++)
            pthread_join(t[i].tid, NULL);
        wf_comm_host_world_unref(&d.w);
        for (int i = 0; i < N; i++)
            CHECK(t[i].setup_ok && t[i].guard_ok && t[i].st == WF_OK,
                  "%s mode rank %d: %d", d.local ? "local" : "root", i, (int)t[i].st);
        free(t);
    }
    /* every rank's rows equal the root mode's, bit for bit */
    long bad = 0;
    for (int i = 0; i < N; i++) {
        for (int64_t b = 0; b < c->B; b++)
            for (int k = 0; k < nqs[i]; k++) {
                const wf_cp_seg_t *g = &qs[i * WF_CP_MAX_SEGS + k];
                bad += memcmp(lo[i] + (size_t)((b * lqn[i] + g->local) * row) * eo,
                              d.out + (size_t)((b * c->Sq + g->start) * row) * eo,
                              (size_t)(g->len * row) * eo) != 0;
                if (c->lse)
                    bad += memcmp(ll[i] + (b * lqn[i] + g->local) * c->Hq,
                                  lse + (b * c->Sq + g->start) * c->Hq,
                                  (size_t)(g->len * c->Hq) * sizeof(float)) != 0;
            }
        free(lq[i] - 1);
        free(lk[i] - 1);
        free(lv[i] - 1);
        free(lo[i] - 1);
        free(ll[i]);
    }
    CHECK(bad == 0, "local mode (R%d,U%d) causal=%d lb=%d %s: %ld pieces differ from the "
          "root mode", c->R, c->U, c->causal, c->lb, dt_name(c->in), bad);
    free(qb);
    free(kb);
    free(vb);
    free(qf);
    free(kf);
    free(vf);
    free(outb);
    free(lse);
    return failed - fails_before;
}

static void test_local(bool quick)
{
    static const int meshes[][2] = {{4, 1}, {1, 4}, {2, 2}, {3, 1}, {1, 3}, {1, 1}};
    int n = 0, fails = 0;
    for (int mi = 0; mi < 6; mi++)
        for (int v = 0; v < 4; v++) {
            if (quick && v != mi % 4)
                continue;
            int R = meshes[mi][0], U = meshes[mi][1];
            bool even = v < 2;
            tcase_t c = {.R = R, .U = U, .T = 1, .B = 2, .Sq = even ? 24 : 23,
                         .Skv = even ? 24 : 23, .Hq = v == 1 ? 8 : 6, .Hkv = v == 1 ? 2 : 6,
                         .D = 16, .causal = v >= 2, .lb = v == 3,
                         .rot = v % 2 ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER,
                         .fp32 = v != 2, .in = v == 0 ? WF_DTYPE_F32 : WF_DTYPE_BF16,
                         .out = v == 3 ? WF_DTYPE_F16 : WF_DTYPE_F32,
                         .ring_any = true, .uly_any = true, .lse = v != 1};
            fails += run_local_case(&c);
            n++;
        }
    /* local mode serves every head */
    char err[256];
    wf_cp_job_t j = {.B = 1, .Sq = 8, .Skv = 8, .Hq = 4, .Hkv = 4, .D = 8, .hq_begin = 1,
                     .hq_end = 4, .scale = 0.3f, .local = true};
    CHECK(wf_cp_attention_check(&j, 2, 1, err, sizeof err) == WF_E_BAD_ARGUMENT &&
              strstr(err, "local mode"),
          "local mode with a head slice: %s", err);
    j.hq_begin = 0;
    CHECK(wf_cp_attention_check(&j, 2, 1, err, sizeof err) == WF_OK, "local, all heads: %s",
          err);
    printf("local mode: %d cases (ring, ulysses, USP, uneven, GQA, causal, zigzag), every "
           "rank's rows bit-identical to the root mode's%s\n", n, fails ? " FAILED" : "");
}

/* One rank with a short workspace fails alone and aborts the world: the
 * others return WF_E_ABORTED instead of waiting forever. */
static void test_error_aborts(void)
{
    tcase_t c = {.R = 2, .U = 2, .T = 1, .B = 1, .Sq = 16, .Skv = 16, .Hq = 4,
                 .Hkv = 4, .D = 8, .rot = WF_CP_ROTATE_ALLTOALL, .fp32 = true,
                 .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .lse = true};
    run_case(&c, 3);
    run_case(&c, 0);
    printf("short workspace on one rank: it returns WF_E_BAD_ARGUMENT, the others WF_E_ABORTED\n");
}

/* ---- check() ---------------------------------------------------------------------- */

static void test_check(void)
{
    char err[256];
    wf_cp_job_t j = {.B = 1, .Sq = 10, .Skv = 12, .Hq = 6, .Hkv = 2, .D = 8,
                     .hq_begin = 0, .hq_end = 6, .scale = 0.3f};
    const char *msg = "Tensor size along dimension to be sharded must be divisible by mesh size";
    CHECK(wf_cp_attention_check(&j, 4, 1, err, sizeof err) == WF_E_BAD_SHAPE &&
              strstr(err, msg) && strstr(err, "Sq = 10"),
          "Sq 10 over 4 ring ranks: %s", err);
    CHECK(wf_cp_attention_check(&j, 1, 2, err, sizeof err) == WF_OK, "10 / 2: %s", err);
    j.Sq = 12;
    j.Skv = 10;
    CHECK(wf_cp_attention_check(&j, 2, 2, err, sizeof err) == WF_E_BAD_SHAPE &&
              strstr(err, msg) && strstr(err, "Skv = 10"),
          "Skv 10 over 2x2: %s", err);
    CHECK(wf_cp_attention_workspace(&j, 2, 2, wf_backend_cpu()) == 0,
          "workspace of a refused job");
    j.ring_anything = true;
    CHECK(wf_cp_attention_check(&j, 2, 2, err, sizeof err) == WF_OK && err[0] == 0,
          "ring_anything with USP accepted: %s", err);
    j.ring_anything = false;
    j.ulysses_anything = true; /* diffusers: also covers sequence lengths, R = 1 */
    CHECK(wf_cp_attention_check(&j, 1, 4, err, sizeof err) == WF_OK, "ulysses_anything S");
    CHECK(wf_cp_attention_check(&j, 3, 1, err, sizeof err) == WF_E_BAD_SHAPE,
          "ulysses_anything does not cover ring sharding");
    j.ulysses_anything = false;
    j.Skv = 12;
    CHECK(wf_cp_attention_check(&j, 1, 4, err, sizeof err) == WF_E_BAD_SHAPE &&
              strstr(err, "must be divisible by ulysses_degree"),
          "6 heads over 4: %s", err);
    j.ulysses_anything = true;
    j.ring_anything = true;
    CHECK(wf_cp_attention_check(&j, 3, 4, err, sizeof err) == WF_OK,
          "anything + USP with uneven heads (6 over 4, beyond the padding limit)");
    j.hq_begin = 2;
    j.hq_end = 3; /* one head over 4 ulysses ranks */
    CHECK(wf_cp_attention_check(&j, 2, 4, err, sizeof err) == WF_OK, "1 head over 4");
    j.hq_end = 2;
    CHECK(wf_cp_attention_check(&j, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT,
          "empty slice");
    j.hq_end = 6;
    CHECK(wf_cp_attention_check(&j, 0, 1, err, sizeof err) == WF_E_BAD_ARGUMENT &&
              strstr(err, "greater than or equal to 1"),
          "degree 0: %s", err);
    j.Hkv = 4;
    CHECK(wf_cp_attention_check(&j, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT,
          "Hkv must divide Hq");
    j.Hkv = 2;
    j.q_dtype = (wf_dtype_t)9;
    CHECK(wf_cp_attention_check(&j, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT, "dtype");
    j.q_dtype = WF_DTYPE_F32;
    j.rotate_method = (wf_cp_rotate_t)5;
    CHECK(wf_cp_attention_check(&j, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT, "rotate");
    j.rotate_method = WF_CP_ROTATE_ALLGATHER;
    j.B = INT64_MAX / 4;
    CHECK(wf_cp_attention_check(&j, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT,
          "overflowing sizes");
    j.B = 1;
    CHECK(wf_cp_attention_check(&j, 1, 1, NULL, 0) == WF_OK, "NULL err");
    /* run() refuses a refused job on every rank without touching a comm */
    wf_cp_group_t g = {.ring_degree = 2, .ulysses_degree = 2};
    j.ring_anything = j.ulysses_anything = false;
    j.Sq = 7;
    unsigned char ws[64] __attribute__((aligned(64)));
    CHECK(wf_cp_attention_run(&j, &g, wf_backend_cpu(), NULL, ws, sizeof ws) ==
              WF_E_BAD_ARGUMENT,
          "run of a refused job");
    printf("check: divisibility and head verdicts with diffusers' message\n");
}

/* ---- load balance ------------------------------------------------------------------ */

/* Visible (query, key) pairs of ring rank r's queries against every key
 * (top-left causal, Sq = Skv), from the plan's segments. */
static double visible_of(const wf_cp_job_t *j, int R, int U, int r)
{
    wf_cp_seg_t s[WF_CP_MAX_SEGS];
    int n = 0;
    if (wf_cp_attention_segments(j, R, U, r * U, true, false, s, &n) != WF_OK)
        return -1;
    double v = 0;
    for (int i = 0; i < n; i++)
        for (int64_t t = 0; t < s[i].len; t++)
            v += (double)(s[i].start + t + 1 < j->Skv ? s[i].start + t + 1 : j->Skv);
    return v;
}

static void test_balance(void)
{
    static const int cfg[][2] = {{2, 1}, {4, 1}, {8, 1}, {4, 2}, {3, 1}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        int R = cfg[c][0], U = cfg[c][1];
        double ratio[2];
        for (int lb = 0; lb < 2; lb++) {
            wf_cp_job_t j = {.B = 1, .Sq = 4800, .Skv = 4800, .Hq = 8, .Hkv = 8, .D = 64,
                             .hq_begin = 0, .hq_end = 8, .scale = 0.125f,
                             .causal = true, .load_balance = lb == 1};
            double mx = 0, mn = INFINITY, sum = 0;
            for (int r = 0; r < R; r++) {
                double v = visible_of(&j, R, U, r);
                mx = v > mx ? v : mx;
                mn = v < mn ? v : mn;
                sum += v;
            }
            CHECK(sum == 4800.0 * 4801.0 / 2.0, "plan covers every pair once");
            ratio[lb] = mx / mn;
            /* every token held exactly once across the seq ranks */
            int64_t covered = 0;
            for (int i = 0; i < R * U; i++) {
                wf_cp_seg_t s[WF_CP_MAX_SEGS];
                int n = 0;
                wf_cp_attention_segments(&j, R, U, i, false, true, s, &n);
                for (int k = 0; k < n; k++)
                    covered += s[k].len;
            }
            CHECK(covered == 4800, "shards cover the sequence");
        }
        CHECK(ratio[1] < 1.01, "zigzag R=%d: max/min %.4f", R, ratio[1]);
        CHECK(fabs(ratio[0] - (2.0 * R - 1.0)) < 0.05 * (2.0 * R - 1.0),
              "contiguous R=%d: max/min %.3f, want about %d", R, ratio[0], 2 * R - 1);
        printf("balance R=%d U=%d causal S=4800: visible scores max/min contiguous %.3f "
               "(2R-1 = %d), zigzag %.4f\n", R, U, ratio[0], 2 * R - 1, ratio[1]);
    }
}

/* Workspace of the two rotate methods for a long sequence (memory: all
 * K/V shards vs two). */
static void test_workspace_sizes(void)
{
    wf_cp_job_t j = {.B = 1, .Sq = 16384, .Skv = 16384, .Hq = 16, .Hkv = 16, .D = 64,
                     .hq_begin = 0, .hq_end = 16, .scale = 0.125f, .causal = true,
                     .load_balance = true, .q_dtype = WF_DTYPE_BF16,
                     .k_dtype = WF_DTYPE_BF16, .v_dtype = WF_DTYPE_BF16,
                     .out_dtype = WF_DTYPE_BF16, .return_lse = true};
    size_t ag = wf_cp_attention_workspace(&j, 8, 1, wf_backend_cpu());
    j.rotate_method = WF_CP_ROTATE_ALLTOALL;
    size_t a2a = wf_cp_attention_workspace(&j, 8, 1, wf_backend_cpu());
    CHECK(a2a < ag, "alltoall workspace %zu >= allgather %zu", a2a, ag);
    printf("workspace R=8, S=16384, 16 heads x 64, bf16: allgather %.1f MiB, "
           "alltoall %.1f MiB\n", (double)ag / 1048576.0, (double)a2a / 1048576.0);
}

int main(void)
{
    const char *q = getenv("WF_TEST_QUICK");
    bool quick = q && q[0] == '1';
    double t0 = now_s();
    wf_backend_ctx_t *ctx = NULL; /* sets OpenBLAS to one thread up front */
    wf_backend_cpu()->ctx_new(0, 0, &ctx);
    wf_backend_cpu()->ctx_destroy(&ctx);
    test_check();
    test_balance();
    test_workspace_sizes();
    test_slices();
    test_device(quick);
    test_device_ring(quick);
    test_error_aborts();
    test_local(quick);
    test_long(quick);
    test_grid(quick);
    printf("worst out error / max|ref| (R > 1 | all cases), lse abs error (R > 1):\n");
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 3; o++)
            for (int md = 0; md < 2; md++)
                if (worst_out_all[i][o][md] > 0)
                    printf("  %-4s -> %-4s merge %-5s: out %.3g | %.3g, lse %.3g\n",
                           dt_name((wf_dtype_t)i), dt_name((wf_dtype_t)o),
                           md ? dt_name((wf_dtype_t)i) : "f32", worst_out[i][o][md],
                           worst_out_all[i][o][md], worst_lse[i][o][md]);
    /* merging in the input dtype must make the output measurably worse
     * than merging in f32 (lse stays f32 in both modes, as in diffusers) */
    for (int i = WF_DTYPE_F16; i <= WF_DTYPE_BF16; i++)
        if (worst_out[i][WF_DTYPE_F32][1] > 0)
            CHECK(worst_out[i][WF_DTYPE_F32][1] > 4.0 * worst_out[i][WF_DTYPE_F32][0],
                  "%s merge not measurably worse than f32 merge", dt_name((wf_dtype_t)i));
    printf("largest error / tolerance: out %.3f, lse %.3f\n", worst_ratio_out,
           worst_ratio_lse);
    printf("%ld cases (%ld with ring merges), %d checks, %d failures, %.1f s\n", ncases,
           ncases_ring, passed + failed, failed, now_s() - t0);
    return failed ? 1 : 0;
}
