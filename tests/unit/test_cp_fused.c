/* test_cp_fused.c — the LSE merge of ring steps in the kernel's epilogue
 * (backend.h merge mode):
 *   - the CPU backend's merge mode against a plain call + tensor.h's
 *     wf_lse_merge_rows, bit for bit: two steps into one accumulator,
 *     causal offsets that leave rows with no key (lse -inf), a NaN row,
 *     several query tiles, GQA, a head range, every merge rounding and
 *     final dtype; final_out against wf_convert_from_f32; bytes outside
 *     the head range untouched; bad merge params refused;
 *   - cp_attention ring runs (R = 2, 3; U 1 / 2; allgather / alltoall;
 *     causal with load balance; uneven lengths; return_lse and
 *     convert_to_fp32 on and off; chunked query rows under a boundary)
 *     through the fused path on the CPU backend and on the stand-in
 *     device, each against the same run with attention_merge_ok removed
 *     (part buffers + merge + convert), bit for bit, and against the
 *     fp64 reference; counters show the fused runs called no lse_merge,
 *     converted only rows the last ring step does not reach, and merged
 *     in the kernel (the stand-in counts each op; a wrapper of the CPU
 *     backend counts merge-mode calls and final_out writes);
 *   - the fused workspace is no larger than the unfused one;
 *   - the CUDA backend's host side of merge mode (cuda_plan.h, plain C:
 *     every build): which params it takes, and that the kernel choice
 *     does not change with it.
 * WF_TEST_QUICK=1 thins the ring cases (for the sanitizers). */
#include "parallel/cp_attention.h"
#include "comm/comm_host.h"
#include "comm/comm_staged.h"
#include "support/standin_dev.h"
#include "base/mesh.h"
#include "cuda_plan.h"
#include "reference.h"
#include "tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/check.h"
#include "support/cp_groups.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float rnd_unit(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 23)) - 1.0f;
}

static size_t dsize(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4 : 2; }

static double eps_of(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 0x1p-24 : dt == WF_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

static const char *dt_name(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? "f32" : dt == WF_DTYPE_F16 ? "f16" : "bf16";
}

/* n random values in dtype dt (amplitude amp); *ret_f32 gets them
 * widened (the reference's inputs). Caller owns both. */
static unsigned char *make_input(size_t n, wf_dtype_t dt, float amp, float **ret_f32)
{
    float *f = malloc(n * sizeof(float) + 4);
    unsigned char *buf = malloc(n * dsize(dt) + 4);
    for (size_t i = 0; i < n; i++)
        f[i] = amp * rnd_unit();
    wf_convert_from_f32(buf, dt, f, n);
    wf_convert_to_f32(f, buf, dt, n);
    *ret_f32 = f;
    return buf;
}

/* ---- the CPU backend's merge mode -------------------------------------------- */

/* Two ring steps of a (B, Sq, Hq, D) query block against two K/V blocks
 * into one accumulator, merge mode against plain calls + per-row
 * wf_lse_merge_rows; final_out on the second step. */
static void merge_unit_case(wf_dtype_t in, wf_dtype_t rdt, wf_dtype_t fdt, int64_t D)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    wf_backend_ctx_t *ctx = NULL;
    CHECK(cpu->ctx_new(0, 0, &ctx) == WF_OK, "ctx");
    const int64_t B = 2, Sq = 200, Hq = 4, Hkv = 2, h0 = 1, h1 = 4;
    const int64_t Skv[2] = {70, 90};
    const int64_t kvoff[2] = {0, 150}; /* step 2: rows before position 150 see nothing */
    const size_t nq = (size_t)(B * Sq * Hq * D), nl = (size_t)(B * Sq * Hq);
    float *qf, *kf[2], *vf[2];
    unsigned char *q = make_input(nq, in, 2.0f, &qf);
    unsigned char *k[2], *v[2];
    for (int s = 0; s < 2; s++) {
        size_t nkv = (size_t)(B * Skv[s] * Hkv * D);
        k[s] = make_input(nkv, in, 1.0f, &kf[s]);
        v[s] = make_input(nkv, in, 1.0f, &vf[s]);
    }
    /* a NaN query row (b 1, row 7, head 2): NaN out and lse through both */
    {
        float nan = NAN;
        size_t at = (size_t)(((1 * Sq + 7) * Hq + 2) * D) * dsize(in);
        wf_convert_from_f32(q + at, in, &nan, 1);
    }
    float *acc_ref = malloc(nq * 4), *lse_ref = malloc(nl * 4);
    float *acc = malloc(nq * 4), *lse = malloc(nl * 4);
    float *part = malloc(nq * 4), *partl = malloc(nl * 4);
    unsigned char *fin = malloc(nq * dsize(fdt)), *fin_ref = malloc(nq * dsize(fdt));
    /* start as a ring does (0 / -inf) in the head range, sentinels outside */
    for (size_t r = 0; r < nl; r++) {
        bool mine = (int64_t)(r % (size_t)Hq) >= h0;
        lse_ref[r] = mine ? -INFINITY : 777.0f;
        for (int64_t d = 0; d < D; d++)
            acc_ref[r * (size_t)D + (size_t)d] = mine ? 0.0f : 555.0f;
    }
    memcpy(acc, acc_ref, nq * 4);
    memcpy(lse, lse_ref, nl * 4);
    memset(fin, 0x5a, nq * dsize(fdt));
    memset(fin_ref, 0x5a, nq * dsize(fdt));

    int64_t maxkv = Skv[1];
    wf_attn_params_t w = {.B = B, .Sq = Sq, .Skv = maxkv, .Hq = Hq, .Hkv = Hkv, .D = D};
    void *ws = aligned_alloc(64, (cpu->attention_workspace(&w) + 63) / 64 * 64);
    for (int s = 0; s < 2; s++) {
        wf_attn_params_t p = {
            .B = B, .Sq = Sq, .Skv = Skv[s], .Hq = Hq, .Hkv = Hkv, .D = D,
            .h_begin = h0, .h_end = h1, .scale = 0.25f, .causal = true,
            .q_offset = 100, .kv_offset = kvoff[s], .q = q, .q_dtype = in,
            .k = k[s], .k_dtype = in, .v = v[s], .v_dtype = in,
            .out = part, .out_dtype = WF_DTYPE_F32, .lse = partl,
        };
        CHECK(cpu->attention(ctx, &p, ws) == WF_OK, "plain call");
        for (size_t r = 0; r < nl; r++)
            if ((int64_t)(r % (size_t)Hq) >= h0)
                wf_lse_merge_rows(acc_ref + r * (size_t)D, lse_ref + r,
                                  part + r * (size_t)D, partl + r, 1, D, rdt);
        p.out = acc;
        p.lse = lse;
        p.merge = true;
        p.merge_round = rdt;
        p.final_out = s == 1 ? fin : NULL;
        p.final_dtype = fdt;
        CHECK(cpu->attention_merge_ok(&p), "merge_ok");
        CHECK(cpu->attention(ctx, &p, ws) == WF_OK, "merge call");
    }
    for (size_t r = 0; r < nl; r++)
        if ((int64_t)(r % (size_t)Hq) >= h0)
            wf_convert_from_f32(fin_ref + r * (size_t)D * dsize(fdt), fdt,
                                acc_ref + r * (size_t)D, (size_t)D);
    CHECK(memcmp(acc, acc_ref, nq * 4) == 0, "in %s round %s D %lld: merged out differs",
          dt_name(in), dt_name(rdt), (long long)D);
    CHECK(memcmp(lse, lse_ref, nl * 4) == 0, "merged lse differs");
    CHECK(memcmp(fin, fin_ref, nq * dsize(fdt)) == 0, "final_out (%s) differs", dt_name(fdt));
    /* the case covers what it says: empty rows, a NaN row, merged rows */
    size_t empty = 0, nan_rows = 0, both = 0;
    for (size_t r = 0; r < nl; r++) {
        if ((int64_t)(r % (size_t)Hq) < h0)
            continue;
        empty += lse[r] == -INFINITY;
        nan_rows += lse[r] != lse[r];
        size_t row = (r / (size_t)Hq) % (size_t)Sq;
        both += 100 + row >= 150 && lse[r] == lse[r];
    }
    CHECK(nan_rows == 1 && both > 0, "NaN rows %zu, rows merged from two steps %zu",
          nan_rows, both);
    (void)empty;

    /* refusals: merge with a non-f32 out, or without lse */
    wf_attn_params_t bad = {
        .B = B, .Sq = Sq, .Skv = Skv[0], .Hq = Hq, .Hkv = Hkv, .D = D, .h_begin = 0,
        .h_end = Hq, .scale = 0.25f, .q = q, .q_dtype = in, .k = k[0], .k_dtype = in,
        .v = v[0], .v_dtype = in, .out = fin, .out_dtype = WF_DTYPE_BF16, .lse = lse,
        .merge = true, .merge_round = WF_DTYPE_F32,
    };
    CHECK(!cpu->attention_merge_ok(&bad), "merge_ok with a bf16 out");
    CHECK(cpu->attention(ctx, &bad, ws) == WF_E_BAD_ARGUMENT, "merge into bf16 out");
    bad.out = acc;
    bad.out_dtype = WF_DTYPE_F32;
    bad.lse = NULL;
    CHECK(cpu->attention(ctx, &bad, ws) == WF_E_BAD_ARGUMENT, "merge without lse");
    bad.lse = lse;
    bad.merge_round = (wf_dtype_t)99;
    CHECK(cpu->attention(ctx, &bad, ws) == WF_E_BAD_ARGUMENT, "merge_round out of range");

    free(ws);
    free(q);
    free(qf);
    for (int s = 0; s < 2; s++) {
        free(k[s]);
        free(v[s]);
        free(kf[s]);
        free(vf[s]);
    }
    free(acc_ref);
    free(lse_ref);
    free(acc);
    free(lse);
    free(part);
    free(partl);
    free(fin);
    free(fin_ref);
    cpu->ctx_destroy(&ctx);
}

static void test_merge_unit(void)
{
    const wf_dtype_t dts[3] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    int n = 0;
    for (int i = 0; i < 3; i++)
        for (int r = 0; r < 3; r++) {
            merge_unit_case(dts[i], dts[r], dts[(i + r) % 3], r == 1 ? 64 : 16);
            n++;
        }
    printf("merge mode (CPU): %d cases bit-identical to attention + wf_lse_merge_rows\n", n);
}

/* ---- ring runs ------------------------------------------------------------------ */

/* Counts of the CPU wrapper below (every rank thread calls it). */
static atomic_long cpu_calls, cpu_merge_calls, cpu_final_calls;

static wf_status_t counting_attention(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                                      void *ws)
{
    atomic_fetch_add(&cpu_calls, 1);
    if (p->merge)
        atomic_fetch_add(&cpu_merge_calls, 1);
    if (p->merge && p->final_out)
        atomic_fetch_add(&cpu_final_calls, 1);
    return wf_backend_cpu()->attention(ctx, p, ws);
}

typedef struct rcase {
    int R, U;
    int64_t B, Sq, Skv, Hq, Hkv, D;
    bool causal, lb, fp32, lse, bounded;
    bool fp8;                 /* fp8 job: the stand-in only (it emulates it) */
    wf_cp_rotate_t rot;
    wf_dtype_t in, out;
} rcase_t;

typedef struct rdata {
    const rcase_t *c;
    const wf_backend_ops_t *ops;
    bool dev;
    const unsigned char *q, *k, *v;
    unsigned char *out;
    float *lse;
    wf_comm_host_world_t *w;
} rdata_t;

typedef struct rrank {
    pthread_t tid;
    rdata_t *d;
    int rank;
    wf_status_t st;
    wf_standin_counters_t cnt; /* device mode: the context's counters */
} rrank_t;

/* Every boundary passes: the run cuts its query rows into chunks. */
static wf_status_t pass_boundary(void *arg, int64_t step, bool ahead)
{
    (void)arg;
    (void)step;
    (void)ahead;
    return WF_OK;
}

static void *ring_rank(void *arg)
{
    rrank_t *t = arg;
    const rcase_t *c = t->d->c;
    const wf_backend_ops_t *ops = t->d->ops;
    wf_comm_t *world = NULL, *seq = NULL, *ring = NULL, *uly = NULL;
    wf_backend_ctx_t *ctx = NULL;
    t->st = WF_E_INTERNAL;
    if (wf_comm_host_init(t->d->w, t->rank, &world) != WF_OK)
        return NULL;
    if (ops->ctx_new(t->rank, 0, &ctx) != WF_OK)
        goto out;
    if (t->d->dev && wf_comm_staged_wrap(world, ops, ctx, &world) != WF_OK)
        goto out;
    wf_mesh_coords_t co;
    if (cp_groups_split(world, t->rank, c->R, c->U, 1, &co, &seq, &ring, &uly) != WF_OK)
        goto out;
    wf_cp_job_t job = {
        .B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
        .hq_begin = 0, .hq_end = c->Hq, .scale = (float)(1.0 / sqrt((double)c->D)),
        .causal = c->causal, .q_dtype = c->in, .k_dtype = c->in, .v_dtype = c->in,
        .out_dtype = c->out, .return_lse = c->lse, .rotate_method = c->rot,
        .convert_to_fp32 = c->fp32, .ring_anything = true, .ulysses_anything = true,
        .load_balance = c->lb, .boundary = c->bounded ? pass_boundary : NULL,
        .fp8 = c->fp8,
    };
    if (t->rank == 0) {
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
            ops->dev_alloc(ctx, db, &dws) != WF_OK)
            goto out;
        void *hws = aligned_alloc(64, (hb + 64) / 64 * 64);
        t->st = wf_cp_attention_run_dev(&job, &grp, ops, ctx, dws, db, hws, hb);
        free(hws);
        t->cnt = wf_standin_counters(ctx);
        ops->dev_reset(ctx);
        goto out;
    }
    size_t bytes = wf_cp_attention_workspace(&job, c->R, c->U, ops);
    unsigned char *ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    memset(ws, 0xff, bytes); /* NaN everywhere: a stale read shows */
    t->st = wf_cp_attention_run(&job, &grp, ops, ctx, ws, bytes);
    free(ws);
out:
    ops->ctx_destroy(&ctx);
    wf_comm_destroy(&uly);
    wf_comm_destroy(&ring);
    wf_comm_destroy(&seq);
    wf_comm_destroy(&world);
    return NULL;
}

/* Sums over the ranks of one run. */
typedef struct rresult {
    bool ok;
    wf_standin_counters_t cnt;
} rresult_t;

static rresult_t ring_run(rdata_t *d)
{
    const int N = d->c->R * d->c->U;
    rresult_t res = {.ok = true};
    if (wf_comm_host_world_new(N, &d->w) != WF_OK) {
        res.ok = false;
        return res;
    }
    rrank_t *t = calloc((size_t)N, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i] = (rrank_t){.d = d, .rank = i};
        pthread_create(&t[i].tid, NULL, ring_rank, &t[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i].tid, NULL);
        res.ok &= t[i].st == WF_OK;
        res.cnt.lse_merges += t[i].cnt.lse_merges;
        res.cnt.converts += t[i].cnt.converts;
        res.cnt.merged_attentions += t[i].cnt.merged_attentions;
        res.cnt.kernels += t[i].cnt.kernels;
    }
    free(t);
    wf_comm_host_world_unref(&d->w);
    return res;
}

static void print_case(const rcase_t *c)
{
    fprintf(stderr,
            "  in case R%d U%d B%lld Sq%lld Skv%lld Hq%lld Hkv%lld D%lld causal=%d lb=%d "
            "%s fp32=%d %s->%s lse=%d bounded=%d fp8=%d\n",
            c->R, c->U, (long long)c->B, (long long)c->Sq, (long long)c->Skv,
            (long long)c->Hq, (long long)c->Hkv, (long long)c->D, c->causal, c->lb,
            c->rot == WF_CP_ROTATE_ALLGATHER ? "allgather" : "alltoall", c->fp32,
            dt_name(c->in), dt_name(c->out), c->lse, c->bounded, c->fp8);
}

/* The four runs of a case: CPU and stand-in, each fused and unfused. */
enum { RUN_CPU_OLD, RUN_CPU_FUSED, RUN_DEV_OLD, RUN_DEV_FUSED, NRUNS };

static int ring_case(const rcase_t *c)
{
    int before = failed;
    const size_t nq = (size_t)(c->B * c->Sq * c->Hq * c->D);
    const size_t nkv = (size_t)(c->B * c->Skv * c->Hkv * c->D);
    const size_t nl = (size_t)(c->B * c->Sq * c->Hq);
    float *qf, *kf, *vf;
    unsigned char *q = make_input(nq, c->in, 2.0f, &qf);
    unsigned char *k = make_input(nkv, c->in, 1.0f, &kf);
    unsigned char *v = make_input(nkv, c->in, 1.0f, &vf);

    wf_backend_ops_t cpu_old = *wf_backend_cpu(), cpu_fused = *wf_backend_cpu();
    wf_backend_ops_t dev_old = *wf_standin_dev_backend();
    cpu_old.attention_merge_ok = NULL;
    dev_old.attention_merge_ok = NULL;
    cpu_fused.attention = counting_attention;
    const wf_backend_ops_t *ops[NRUNS] = {&cpu_old, &cpu_fused, &dev_old,
                                          wf_standin_dev_backend()};
    unsigned char *out[NRUNS];
    float *lse[NRUNS];
    rresult_t res[NRUNS];
    atomic_store(&cpu_calls, 0);
    atomic_store(&cpu_merge_calls, 0);
    atomic_store(&cpu_final_calls, 0);
    /* fp8: the CPU backend refuses it; the stand-in's two runs only */
    const int first = c->fp8 ? RUN_DEV_OLD : RUN_CPU_OLD;
    for (int i = 0; i < NRUNS; i++) {
        out[i] = malloc(nq * dsize(c->out));
        lse[i] = malloc(nl * sizeof(float));
        memset(out[i], 0x5a, nq * dsize(c->out));
        for (size_t j = 0; j < nl; j++)
            lse[i][j] = 12345.0f;
        memset(&res[i], 0, sizeof res[i]);
        if (i < first)
            continue;
        rdata_t d = {.c = c, .ops = ops[i], .dev = i >= RUN_DEV_OLD, .q = q, .k = k,
                     .v = v, .out = out[i], .lse = lse[i]};
        res[i] = ring_run(&d);
        CHECK(res[i].ok, "run %d failed", i);
    }
    /* bit for bit: the merge is the same code on every path; with 16-bit
     * inputs the stand-in device rounds P before P V (as a GPU kernel
     * does) and the CPU does not, so its runs agree among themselves */
    const bool p_rounds = !c->fp8 && c->in != WF_DTYPE_F32;
    for (int i = first + 1; i < NRUNS; i++) {
        int base = p_rounds && i > RUN_DEV_OLD ? RUN_DEV_OLD : first;
        if (p_rounds && i == RUN_DEV_OLD)
            continue;
        CHECK(memcmp(out[i], out[base], nq * dsize(c->out)) == 0,
              "run %d: out differs from the unfused run %d", i, base);
        CHECK(memcmp(lse[i], lse[base], nl * sizeof(float)) == 0,
              "run %d: lse differs from the unfused run %d", i, base);
    }
    /* what ran: the fused runs merged in the kernel, never in lse_merge */
    long calls = atomic_load(&cpu_calls), mcalls = atomic_load(&cpu_merge_calls),
         fcalls = atomic_load(&cpu_final_calls);
    const wf_standin_counters_t *fo = &res[RUN_DEV_FUSED].cnt, *uo = &res[RUN_DEV_OLD].cnt;
    if (c->R > 1) {
        CHECK(c->fp8 || (calls > 0 && mcalls == calls && fcalls > 0),
              "CPU fused: %ld calls, %ld in merge mode, %ld with final_out", calls, mcalls,
              fcalls);
        CHECK(fo->merged_attentions > 0 && fo->lse_merges == 0,
              "stand-in fused: %llu merged attentions, %llu lse_merge",
              (unsigned long long)fo->merged_attentions,
              (unsigned long long)fo->lse_merges);
        CHECK(uo->lse_merges > 0 && uo->merged_attentions == 0 && uo->converts > 0,
              "stand-in unfused: %llu lse_merge, %llu converts",
              (unsigned long long)uo->lse_merges, (unsigned long long)uo->converts);
        /* without a mask the last step reaches every row: no convert */
        if (!c->causal)
            CHECK(fo->converts == 0, "stand-in fused: %llu converts",
                  (unsigned long long)fo->converts);
    } else {
        /* R = 1 writes out directly: no merge, no convert, on any backend */
        CHECK(mcalls == 0 && fo->lse_merges == 0 && fo->converts == 0 &&
                  uo->lse_merges == 0 && uo->converts == 0,
              "R = 1: merges or converts ran");
    }

    /* against fp64: the tolerances of test_cp_attention (f32 kernel and
     * merges, two roundings to the output dtype; merging in the input
     * dtype adds (2R + 2) u); fp8 jobs: the unfused run is the reference */
    if (c->fp8)
        goto done;
    double *ro = malloc(nq * sizeof(double)), *rl = malloc(nl * sizeof(double));
    const wf_ref_attn_t ra = {.B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq,
                              .Hkv = c->Hkv, .D = c->D,
                              .scale = (double)(float)(1.0 / sqrt((double)c->D)),
                              .causal = c->causal};
    CHECK(wf_ref_attention(&ra, qf, kf, vf, ro, rl) == WF_OK, "reference");
    float *of = malloc(nq * sizeof(float));
    wf_convert_to_f32(of, out[RUN_DEV_FUSED], c->out, nq);
    double maxref = 0, eo = 0, el = 0, max_lse = 0;
    for (size_t i = 0; i < nq; i++)
        maxref = fmax(maxref, fabs(ro[i]));
    for (size_t i = 0; i < nq; i++) {
        double e = fabs((double)of[i] - ro[i]) / (maxref > 0 ? maxref : 1);
        if (!(e <= eo))
            eo = e;
    }
    for (size_t i = 0; i < nl; i++) {
        if (isinf(rl[i])) {
            if (c->lse)
                CHECK(lse[RUN_DEV_FUSED][i] == -INFINITY, "lse row %zu not -inf", i);
            continue;
        }
        max_lse = fmax(max_lse, fabs(rl[i]));
        double e = c->lse ? fabs((double)lse[RUN_DEV_FUSED][i] - rl[i]) : 0;
        if (!(e <= el))
            el = e;
    }
    if (!c->lse)
        for (size_t i = 0; i < nl; i++)
            CHECK(lse[RUN_DEV_FUSED][i] == 12345.0f, "lse written although not asked");
    double tol_out = 4e-6 + 2.0 * eps_of(c->out), tol_lse = 2e-6 * (1.0 + max_lse);
    if (!c->fp32 && c->in != WF_DTYPE_F32 && c->R > 1)
        tol_out += (2.0 * c->R + 2.0) * eps_of(c->in);
    if (p_rounds) {
        /* the stand-in's P rounding: at most u max |v| per output */
        double vmax = 0;
        for (size_t i = 0; i < nkv; i++)
            vmax = fmax(vmax, fabs(vf[i]));
        tol_out += eps_of(c->in) * vmax / (maxref > 0 ? maxref : 1);
    }
    CHECK(eo <= tol_out, "out error %.3g > %.3g", eo, tol_out);
    CHECK(el <= tol_lse, "lse error %.3g > %.3g", el, tol_lse);

    /* the fused workspace never needs more */
    wf_cp_job_t job = {
        .B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
        .hq_begin = 0, .hq_end = c->Hq, .scale = 0.25f, .causal = c->causal,
        .q_dtype = c->in, .k_dtype = c->in, .v_dtype = c->in, .out_dtype = c->out,
        .return_lse = c->lse, .rotate_method = c->rot, .convert_to_fp32 = c->fp32,
        .ring_anything = true, .ulysses_anything = true, .load_balance = c->lb,
    };
    size_t wf = wf_cp_attention_workspace(&job, c->R, c->U, wf_backend_cpu());
    size_t wo = wf_cp_attention_workspace(&job, c->R, c->U, &cpu_old);
    size_t df = 0, dhf = 0, dold = 0, dho = 0;
    CHECK(wf_cp_attention_workspace_dev(&job, c->R, c->U, wf_standin_dev_backend(), &df,
                                        &dhf) == WF_OK &&
              wf_cp_attention_workspace_dev(&job, c->R, c->U, &dev_old, &dold, &dho) == WF_OK,
          "device workspace");
    CHECK(wf <= wo && df <= dold && (c->R == 1 || (wf < wo && df < dold)),
          "workspace fused %zu / %zu (device), unfused %zu / %zu", wf, df, wo, dold);
    free(ro);
    free(rl);
    free(of);
done:
    if (failed != before)
        print_case(c);
    for (int i = 0; i < NRUNS; i++) {
        free(out[i]);
        free(lse[i]);
    }
    free(q);
    free(k);
    free(v);
    free(qf);
    free(kf);
    free(vf);
    return failed - before;
}

static void test_ring(bool quick)
{
    int n = 0;
    static const int meshes[][2] = {{2, 1}, {3, 1}, {2, 2}, {3, 2}, {1, 2}};
    for (int mi = 0; mi < 5; mi++)
        for (int v = 0; v < 6; v++) {
            if (quick && (v & 1))
                continue;
            rcase_t c = {
                .R = meshes[mi][0], .U = meshes[mi][1], .B = 2,
                .Sq = v < 3 ? 48 : 45, .Skv = v < 3 ? 48 : 51, .Hq = 4,
                .Hkv = v & 1 ? 2 : 4, .D = 16,
                .causal = v != 2 && v != 5, .lb = v == 0 || v == 3 || v == 4,
                .fp32 = v != 1 && v != 4, .lse = v != 3,
                .rot = v & 1 ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER,
                .in = v == 2 ? WF_DTYPE_F32 : v == 5 ? WF_DTYPE_F16 : WF_DTYPE_BF16,
                .out = v == 0 ? WF_DTYPE_F32 : v == 4 ? WF_DTYPE_F16 : WF_DTYPE_BF16,
            };
            /* causal cross attention with Sq != Skv leaves whole pieces
             * masked; the 1-sequence-per-rank corner too */
            if (c.causal && !c.lb)
                c.Skv = c.Sq + 7;
            ring_case(&c);
            n++;
        }
    /* chunked query rows (a boundary asks for chunks of 512 rows): the
     * last step writes final_out from the last chunk's call of each row */
    rcase_t big = {.R = 2, .U = 1, .B = 1, .Sq = 1300, .Skv = 1300, .Hq = 2, .Hkv = 1,
                   .D = 16, .causal = true, .lb = true, .fp32 = false, .lse = true,
                   .bounded = true, .rot = WF_CP_ROTATE_ALLTOALL, .in = WF_DTYPE_BF16,
                   .out = WF_DTYPE_BF16};
    ring_case(&big);
    n++;
    /* an fp8 job on the stand-in (its fp8 emulation, then the CPU op's
     * merge mode): fused == unfused */
    rcase_t f8 = {.R = 3, .U = 1, .B = 1, .Sq = 61, .Skv = 61, .Hq = 4, .Hkv = 2, .D = 16,
                  .causal = true, .lb = true, .fp32 = true, .lse = true, .fp8 = true,
                  .rot = WF_CP_ROTATE_ALLTOALL, .in = WF_DTYPE_BF16, .out = WF_DTYPE_BF16};
    ring_case(&f8);
    n++;
    printf("ring runs: %d cases, fused == unfused bit for bit (CPU and stand-in), "
           "within fp64 tolerances, no lse_merge in the fused runs\n", n);
}

/* A case where the last ring step cannot reach some rows: causal with
 * load balance, R = 2, rank 0 holds chunks 0 and 3 and its last step
 * sees chunks 1 and 2, which mask chunk 0 whole: those rows are converted
 * apart (the stand-in counts one convert per batch there), and the
 * results still match the unfused run bit for bit (ring_case). */
static void test_unreached_rows(void)
{
    rcase_t c = {.R = 2, .U = 1, .B = 2, .Sq = 40, .Skv = 40, .Hq = 2, .Hkv = 2, .D = 16,
                 .causal = true, .lb = true, .fp32 = true, .lse = true,
                 .rot = WF_CP_ROTATE_ALLGATHER, .in = WF_DTYPE_BF16, .out = WF_DTYPE_BF16};
    ring_case(&c);
    wf_backend_ops_t dev = *wf_standin_dev_backend();
    const size_t nq = (size_t)(c.B * c.Sq * c.Hq * c.D), nkv = nq;
    float *f;
    unsigned char *q = make_input(nq, c.in, 1.0f, &f);
    free(f);
    unsigned char *k = make_input(nkv, c.in, 1.0f, &f);
    free(f);
    unsigned char *out = malloc(nq * 2);
    float *lse = malloc((size_t)(c.B * c.Sq * c.Hq) * 4);
    rdata_t d = {.c = &c, .ops = &dev, .dev = true, .q = q, .k = k, .v = k, .out = out,
                 .lse = lse};
    rresult_t r = ring_run(&d);
    CHECK(r.ok && r.cnt.converts == (uint64_t)c.B && r.cnt.lse_merges == 0,
          "unreached rows: %llu converts (want %lld), %llu lse_merge",
          (unsigned long long)r.cnt.converts, (long long)c.B,
          (unsigned long long)r.cnt.lse_merges);
    printf("rows the last step does not reach: converted apart (%llu converts)\n",
           (unsigned long long)r.cnt.converts);
    free(q);
    free(k);
    free(out);
    free(lse);
}

/* cuda_plan.h's answers for merge mode (the CUDA backend's
 * attention_merge_ok and its parameter check). */
static void test_cuda_plan_merge(void)
{
    static char dummy[64];
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = 2; p.Sq = 1000; p.Skv = 900; p.Hq = 8; p.Hkv = 2; p.D = 128;
    p.h_end = 8; p.scale = 0.1f;
    p.q_dtype = p.k_dtype = p.v_dtype = WF_DTYPE_BF16;
    p.out_dtype = WF_DTYPE_F32;
    p.q = p.k = p.v = p.out = dummy;
    p.merge = true;
    p.merge_round = WF_DTYPE_BF16;
    CHECK(wf_cuda_attn_merge_ok(&p) && wf_cuda_attn_params_ok(&p), "merge into f32");
    p.final_out = dummy;
    p.final_dtype = WF_DTYPE_F16;
    CHECK(wf_cuda_attn_merge_ok(&p), "final_out f16");
    p.final_dtype = (wf_dtype_t)77;
    CHECK(!wf_cuda_attn_merge_ok(&p) && !wf_cuda_attn_params_ok(&p), "final dtype 77");
    p.final_dtype = WF_DTYPE_BF16;
    p.merge_round = (wf_dtype_t)77;
    CHECK(!wf_cuda_attn_merge_ok(&p), "merge_round 77");
    p.merge_round = WF_DTYPE_F32;
    p.out_dtype = WF_DTYPE_BF16;
    CHECK(!wf_cuda_attn_merge_ok(&p) && !wf_cuda_attn_params_ok(&p), "merge into bf16");
    p.merge = false;
    CHECK(wf_cuda_attn_params_ok(&p), "bf16 out without merge");
    p.merge = true;
    p.out_dtype = WF_DTYPE_F32;
    p.fp8 = true;
    CHECK(wf_cuda_attn_merge_ok(&p), "fp8 merges too (its kernel has the merge epilogue)");
    p.fp8 = false;
    /* the same kernel and grid with and without merge, for every choice */
    static const int kernels[] = {0, WF_CUDA_KERNEL_WGMMA, WF_CUDA_KERNEL_WS};
    for (int i = 0; i < 3; i++) {
        wf_cuda_limits_t lim = {232448, 2147483647, 65535, 65535, 132, kernels[i],
                                kernels[i] == WF_CUDA_KERNEL_WS ? WF_CUDA_WS_ALL : 0u};
        wf_cuda_attn_geom_t a, b;
        p.merge = false;
        wf_status_t s1 = wf_cuda_attn_geometry(&p, &lim, &a);
        p.merge = true;
        wf_status_t s2 = wf_cuda_attn_geometry(&p, &lim, &b);
        CHECK(s1 == WF_OK && s2 == WF_OK && a.kernel == b.kernel && a.grid[0] == b.grid[0] &&
                  a.smem_bytes == b.smem_bytes && (i == 0 || a.kernel == kernels[i]),
              "kernel %d: geometry with merge differs", kernels[i]);
    }
    printf("cuda_plan: merge mode taken for f32 out (not fp8), same kernel choice\n");
}

int main(void)
{
    const char *qk = getenv("WF_TEST_QUICK");
    bool quick = qk && qk[0] == '1';
    test_merge_unit();
    test_cuda_plan_merge();
    test_unreached_rows();
    test_ring(quick);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
