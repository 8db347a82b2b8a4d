/* test_flux_forward.c — the FLUX forward (flux_forward.h) against
 * diffusers, on real threads: N threads = N ranks of a host-comm world
 * laid out as (dp 1, ring R, ulysses U, tp T), split into tp / seq / ring
 * / ulysses groups with wf_mesh_color, each rank with its own shard cut
 * from one host copy. The host copies are built here from the committed
 * diffusers checkpoints (safetensors.h + flux_config.h), the inputs and
 * diffusers' outputs come from the io-*.safetensors fixtures written by
 * tests/parity/make_fixtures.py.
 *
 * Checked: every mesh of the grid on the five fixtures (flux-tiny,
 * flux-tiny-guidance, flux-tiny-bf16: head dim 12; flux-small-d64 and
 * its bf16 copy: head dim 64; f32 against diffusers' float64 run and its
 * float32 run, bf16 against diffusers' bf16 run), the grid including
 * uneven meshes (16 image and 8 text tokens over 3, 5, 6, 7 seq ranks;
 * heads over ulysses 3); fewer tokens than seq ranks (empty pieces)
 * against one rank; a non-default plan (colwise to_out, replicated feed-
 * forwards, packed_colwise AdaLN linears, mixed q / k / v layouts, a
 * rowwise single-block proj_out whose pieces straddle the attention / MLP
 * boundary, split embedders) equal to the default plan at tp 2 and 4;
 * shard sizes; the plan check's and the job check's refusals with
 * diffusers' messages, the job check's acceptance of any S_img / S_txt on
 * any ring x ulysses of up to 8; an error on one rank reaching the others as an
 * abort instead of a hang.
 *
 * The device path on the stand-in device backend (tests/support/
 * standin_dev.h: scrambled "device" memory, so any byte read or written
 * past the backend's copies and ops spoils the result): each rank makes
 * its own stand-in context, wraps its host-comm world with comm_staged
 * before the split (the daemon's mixed mode), builds its shard in
 * resident memory in the checkpoint's dtype, takes its workspace with
 * dev_alloc and runs every mesh of the grid on every fixture with the
 * CPU path's tolerances; the copies and kernels are counted, the shard's
 * memory comes back when it is freed, a shard that does not fit is
 * refused before a byte is copied.
 *
 * Usage: test_flux_forward FIXTURES_DIR. */
#include "comm/comm_host.h"
#include "comm/comm_staged.h"
#include "support/comm_count.h"
#include "flux_config.h"
#include "support/check.h"
#include "support/standin_dev.h"
#include "models/flux/flux_forward.h"
#include "models/models.h"
#include "model_host.h"
#include "base/mesh.h"
#include "model_root.h"
#include "safetensors.h"
#include "tensor.h"
#include "tp_plan.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- fixtures ---------------------------------------------------------------- */

/* The host copy of model directory `dir` beneath root_fd, as flux_host.c's
 * reader would leave it (tensors in name order, checkpoint dtypes). */
static wf_model_host_t *load_host(int root_fd, const char *dir)
{
    char err[512], rel[256];
    snprintf(rel, sizeof rel, "%s/config.json", dir);
    wf_model_host_t *h = calloc(1, sizeof *h);
    wf_checkpoint_t *ck = NULL;
    if (wf_model_cfg_load(root_fd, rel, WF_RESOLVE_AUTO, 0, &h->cfg, err, sizeof err) != WF_OK ||
        wf_checkpoint_open_dir(root_fd, dir, NULL, &ck, err, sizeof err) != WF_OK ||
        wf_model_check_checkpoint(&h->cfg, ck, err, sizeof err) != WF_OK) {
        CHECK(0, "%s: %s", dir, err);
        wf_checkpoint_close(&ck);
        free(h);
        return NULL;
    }
    h->n = wf_checkpoint_count(ck);
    h->t = calloc(h->n, sizeof *h->t);
    size_t by[3] = {0, 0, 0};
    for (size_t i = 0; i < h->n; i++) {
        wf_ckpt_ref_t r = wf_checkpoint_at(ck, i);
        wf_host_tensor_t *t = &h->t[i];
        snprintf(t->name, sizeof t->name, "%s", r.tensor->name);
        t->dtype = r.tensor->dtype;
        t->rank = r.tensor->rank;
        t->shape[0] = r.tensor->shape[0];
        t->shape[1] = r.tensor->rank > 1 ? r.tensor->shape[1] : 0;
        t->nbytes = r.tensor->nbytes;
        t->data = aligned_alloc(64, (t->nbytes + 63) & ~(uint64_t)63);
        memcpy(t->data, wf_safetensors_data(r.file, r.index), t->nbytes);
        h->params += r.tensor->numel;
        h->bytes += t->nbytes;
        by[t->dtype] += t->nbytes;
    }
    h->dtype = by[WF_DTYPE_BF16] > by[WF_DTYPE_F32] ? WF_DTYPE_BF16 : WF_DTYPE_F32;
    wf_checkpoint_close(&ck);
    return h;
}

/* A tensor of an io file: its data (any alignment) and shape. */
typedef struct io_t {
    const void *data;
    wf_dtype_t dtype;
    int rank;
    int64_t shape[3];
    size_t numel;
} io_t;

static io_t io_get(const wf_safetensors_t *st, const char *name)
{
    io_t r;
    memset(&r, 0, sizeof r);
    ptrdiff_t i = wf_safetensors_find(st, name);
    if (i < 0)
        return r;
    const wf_st_tensor_t *t = wf_safetensors_tensor(st, (size_t)i);
    r.data = wf_safetensors_data(st, (size_t)i);
    r.dtype = t->dtype;
    r.rank = t->rank;
    for (int k = 0; k < t->rank && k < 3; k++)
        r.shape[k] = t->shape[k];
    r.numel = (size_t)t->numel;
    return r;
}

/* One fixture: model, inputs, references. */
typedef struct fixture {
    const char *name;           /* for messages */
    wf_model_host_t *host;       /* host copy */
    wf_safetensors_t *io;       /* io file */
    wf_flux_job_t job;          /* the job with the root's input pointers */
    float *ref, *ref64;         /* diffusers' output / float64 output, f32 */
    size_t nout;                /* output elements */
    bool bf16;                  /* the bf16 model */
} fixture_t;

static bool fixture_open(int root_fd, const char *model, const char *io, bool bf16,
                         fixture_t *f)
{
    char err[512];
    memset(f, 0, sizeof *f);
    f->name = model;
    f->bf16 = bf16;
    f->host = load_host(root_fd, model);
    if (!f->host || wf_safetensors_open(root_fd, io, NULL, &f->io, err, sizeof err) != WF_OK) {
        CHECK(0, "%s: %s", io, err);
        return false;
    }
    io_t hs = io_get(f->io, "hidden_states"), eh = io_get(f->io, "encoder_hidden_states");
    io_t pp = io_get(f->io, "pooled_projections"), ts = io_get(f->io, "timestep");
    io_t ii = io_get(f->io, "img_ids"), ti = io_get(f->io, "txt_ids");
    io_t gd = io_get(f->io, "guidance"), out = io_get(f->io, "output");
    io_t o64 = io_get(f->io, "output_f64");
    if (!hs.data || !eh.data || !pp.data || !ts.data || !ii.data || !ti.data || !out.data) {
        CHECK(0, "%s: an input is missing", io);
        return false;
    }
    wf_flux_job_t *j = &f->job;
    j->B = hs.shape[0];
    j->S_img = hs.shape[1];
    j->S_txt = eh.shape[1];
    j->hidden_ch = hs.shape[2];
    j->encoder_ch = eh.shape[2];
    j->pooled_ch = pp.shape[1];
    j->img_ids_axes = ii.shape[1];
    j->txt_ids_axes = ti.shape[1];
    j->hidden_states = hs.data;
    j->hidden_dtype = hs.dtype;
    j->encoder_hidden_states = eh.data;
    j->encoder_dtype = eh.dtype;
    j->pooled_projections = pp.data;
    j->pooled_dtype = pp.dtype;
    j->timestep = ts.data;
    j->timestep_dtype = ts.dtype;
    j->img_ids = ii.data;
    j->img_ids_dtype = ii.dtype;
    j->txt_ids = ti.data;
    j->txt_ids_dtype = ti.dtype;
    j->has_guidance = gd.data != NULL;
    j->guidance = gd.data;
    j->guidance_dtype = gd.dtype;
    j->out_dtype = WF_DTYPE_F32;
    f->nout = out.numel;
    f->ref = malloc(f->nout * sizeof(float));
    wf_convert_to_f32(f->ref, out.data, out.dtype, f->nout);
    if (o64.data) {
        f->ref64 = malloc(f->nout * sizeof(float));
        wf_convert_to_f32(f->ref64, o64.data, o64.dtype, f->nout);
    }
    return true;
}

static void fixture_close(fixture_t *f)
{
    wf_model_host_free(&f->host);
    wf_safetensors_close(&f->io);
    free(f->ref);
    free(f->ref64);
}

/* max |a - b| / max |b|. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e))
            e = d; /* NaN sticks */
        m = fmax(m, fabs((double)b[i]));
    }
    return e / (m > 0 ? m : 1);
}

/* ---- one forward over a mesh ----------------------------------------------------- */

typedef struct mrun {
    int T, R, U;                     /* mesh */
    wf_flux_shard_t **shards;        /* per tp rank (CPU path) */
    const wf_model_host_t *host;      /* device path: each rank cuts its own */
    const wf_tp_plan_t *plan;        /* ... with this plan */
    const wf_flux_job_t *job;        /* the root's job */
    wf_comm_host_world_t *w;         /* the world */
    int short_rank;                  /* rank given a short workspace, or -1 */
    bool count;                      /* device path: count comm calls and synchronizes */
} mrun_t;

typedef struct mrank {
    pthread_t tid;     /* thread */
    mrun_t *m;         /* the run */
    int rank;          /* world rank */
    wf_status_t st;    /* result */
    bool setup_ok;     /* comm / mesh setup worked */
    bool guard_ok;     /* workspace guard intact */
    wf_standin_counters_t cnt; /* device path: counters after the run */
    bool mem_back;     /* device path: memory_info full again after freeing */
    bool shard_ok;     /* device path: shard built, its bytes as figured */
    uint64_t n[WF_CNT_N + 1]; /* m->count: the forward's comm calls by op, then
                               * its backend synchronizes */
} mrank_t;

#define GUARD 256

/* The set-up both paths' ranks share: rank's coordinates on the (T, R, U)
 * mesh and its tp, seq, ring, ulysses sub-comms of world in sub[] (every
 * rank splits alike; those made stay for the caller to destroy). */
static bool rank_split(const mrun_t *m, int rank, wf_comm_t *world, wf_comm_t *sub[4],
                       wf_mesh_coords_t *co)
{
    wf_mesh_t mesh;
    wf_mesh_degrees_t deg = {.dp = 1, .ring = (uint32_t)m->R, .ulysses = (uint32_t)m->U,
                             .tp = (uint32_t)m->T};
    if (wf_mesh_init(&mesh, &deg, m->R * m->U * m->T, NULL, 0) != WF_OK ||
        wf_mesh_coords(&mesh, rank, co) != WF_OK)
        return false;
    const wf_mesh_dim_t dims[4] = {WF_MESH_DIM_TP, WF_MESH_DIM_SEQ, WF_MESH_DIM_RING,
                                   WF_MESH_DIM_ULYSSES};
    for (int i = 0; i < 4; i++) {
        int col, key;
        if (wf_mesh_color(&mesh, dims[i], rank, &col, &key) != WF_OK ||
            wf_comm_split(world, col, key, &sub[i]) != WF_OK)
            return false;
    }
    return true;
}

/* The flux group over the sub-comms of rank_split (NULL for degree 1). */
static wf_fwd_group_t rank_group(const mrun_t *m, wf_comm_t *const sub[4])
{
    wf_fwd_group_t grp = {
        .tp = m->T > 1 ? sub[0] : NULL,
        .seq = m->R * m->U > 1 ? sub[1] : NULL,
        .ring = m->R > 1 ? sub[2] : NULL,
        .ulysses = m->U > 1 ? sub[3] : NULL,
        .tp_degree = m->T, .ring_degree = m->R, .ulysses_degree = m->U,
    };
    return grp;
}

/* The job as rank sees it: only the replica's rank 0 has the tensors. */
static wf_flux_job_t rank_job(const mrun_t *m, int rank)
{
    wf_flux_job_t job = *m->job;
    if (rank != 0) {
        job.hidden_states = job.encoder_hidden_states = job.pooled_projections = NULL;
        job.timestep = job.img_ids = job.txt_ids = job.guidance = NULL;
        job.output = NULL;
    }
    return job;
}

static void *rank_main(void *arg)
{
    mrank_t *t = arg;
    mrun_t *m = t->m;
    t->st = WF_E_INTERNAL;
    t->guard_ok = true;
    wf_comm_t *world = NULL, *sub[4] = {NULL, NULL, NULL, NULL};
    wf_backend_ctx_t *ctx = NULL;
    const wf_backend_ops_t *ops = wf_backend_cpu();
    if (wf_comm_host_init(m->w, t->rank, &world) != WF_OK)
        return NULL;
    wf_mesh_coords_t co;
    if (!rank_split(m, t->rank, world, sub, &co))
        goto out;
    if (ops->ctx_new(t->rank, 0, &ctx) != WF_OK)
        goto out;
    t->setup_ok = true;
    wf_fwd_group_t grp = rank_group(m, sub);
    wf_flux_job_t job = rank_job(m, t->rank);
    size_t bytes = wf_flux_forward_workspace(&m->shards[co.tp]->cfg, &job, m->T, m->R, m->U,
                                             ops, NULL);
    if (bytes == 0 || bytes == SIZE_MAX) {
        t->st = WF_E_BAD_ARGUMENT;
        goto out;
    }
    size_t alloc = (bytes + GUARD + 63) & ~(size_t)63;
    unsigned char *ws = aligned_alloc(64, alloc);
    memset(ws, 0xff, bytes); /* NaN everywhere: reading stale bytes shows */
    memset(ws + bytes, 0xa5, alloc - bytes);
    size_t give = t->rank == m->short_rank ? 64 : bytes;
    t->st = wf_flux_forward_run(m->shards[co.tp], &job, &grp, ops, ctx, ws, give, NULL, 0);
    for (size_t i = bytes; i < alloc; i++)
        t->guard_ok &= ws[i] == 0xa5;
    free(ws);
out:
    ops->ctx_destroy(&ctx);
    for (int i = 0; i < 4; i++)
        wf_comm_destroy(&sub[i]);
    wf_comm_destroy(&world);
    return NULL;
}

/* The backend synchronizes the forward itself makes (m->count): its ops
 * table's synchronize, counted per rank thread; the staging's own
 * synchronizes go to the plain table and are not counted. */
static _Thread_local uint64_t t_syncs;

static wf_status_t counting_sync(wf_backend_ctx_t *c)
{
    t_syncs++;
    return wf_standin_dev_backend()->synchronize(c);
}

/* A rank of the device path: its own stand-in context, the host comm
 * behind comm_staged, a resident shard, the workspace from the arena. */
static void *rank_main_dev(void *arg)
{
    mrank_t *t = arg;
    mrun_t *m = t->m;
    t->st = WF_E_INTERNAL;
    const wf_backend_ops_t *ops = wf_standin_dev_backend();
    wf_comm_t *world = NULL, *sub[4] = {NULL, NULL, NULL, NULL};
    wf_backend_ctx_t *ctx = NULL;
    wf_flux_shard_t *shard = NULL;
    void *hws = NULL;
    char err[512] = "";
    if (ops->ctx_new(t->rank, 0, &ctx) != WF_OK)
        return NULL;
    uint64_t total = 0, free0 = 0, free1 = 0;
    ops->memory_info(ctx, &total, &free0);
    wf_comm_t *inner = NULL;
    if (wf_comm_host_init(m->w, t->rank, &inner) != WF_OK ||
        wf_comm_staged_wrap(inner, ops, ctx, &world) != WF_OK)
        goto out;
    wf_mesh_coords_t co;
    if (!rank_split(m, t->rank, world, sub, &co))
        goto out;
    for (int i = 0; i < 4 && m->count; i++)
        if (sub[i] && wf_comm_count_wrap(sub[i], t->n, &sub[i]) != WF_OK)
            goto out;
    t->setup_ok = true;
    wf_status_t bst = wf_flux_shard_build(m->host, m->plan, m->T, co.tp, ops, ctx, &shard, err,
                                          sizeof err);
    uint64_t want = wf_flux_shard_bytes_dev(wf_flux_cfg(&m->host->cfg), m->plan, m->T, m->host->dtype);
    t->shard_ok = bst == WF_OK && shard->mem.bytes == want && shard->mem.dev != NULL;
    if (!t->shard_ok) {
        fprintf(stderr, "rank %d: device shard: %s (bytes %llu, figure %llu)\n", t->rank, err,
                shard ? (unsigned long long)shard->mem.bytes : 0ull, (unsigned long long)want);
        wf_comm_abort(world);
        goto out;
    }
    wf_fwd_group_t grp = rank_group(m, sub);
    wf_flux_job_t job = rank_job(m, t->rank);
    size_t hbytes = 0;
    size_t bytes = wf_flux_forward_workspace(&shard->cfg, &job, m->T, m->R, m->U, ops, &hbytes);
    void *ws = NULL;
    if (bytes == SIZE_MAX || hbytes == SIZE_MAX ||
        !(hws = aligned_alloc(64, (hbytes + 63) & ~(size_t)63 ? (hbytes + 63) & ~(size_t)63
                                                               : 64)) ||
        ops->dev_alloc(ctx, bytes, &ws) != WF_OK ||
        ops->fill_f32(ctx, ws, NAN, bytes / sizeof(float)) != WF_OK) { /* stale reads show */
        wf_comm_abort(world);
        goto out;
    }
    memset(hws, 0xff, hbytes);
    wf_backend_ops_t cops = *ops;
    cops.synchronize = counting_sync;
    t_syncs = 0;
    t->st = wf_flux_forward_run(shard, &job, &grp, m->count ? &cops : ops, ctx, ws, bytes, hws,
                                hbytes);
    t->n[WF_CNT_N] = t_syncs;
    wf_status_t ss = ops->synchronize(ctx);
    ops->dev_reset(ctx);
    if (t->st == WF_OK)
        t->st = ss;
    t->cnt = wf_standin_counters(ctx);
out:
    wf_flux_shard_free(&shard);
    if (ctx) {
        ops->memory_info(ctx, &total, &free1);
        t->mem_back = free1 == free0 && free0 == total;
    }
    free(hws);
    for (int i = 0; i < 4; i++)
        wf_comm_destroy(&sub[i]);
    wf_comm_destroy(&world);
    ops->ctx_destroy(&ctx);
    return NULL;
}

/* The device path of job0 on mesh (T, R, U), shards cut by each rank
 * from host h with plan p; the root's output (f32 copy) into out;
 * counts (optional, WF_CNT_N + 1): rank 0's comm calls and synchronizes
 * in the forward (mrank_t.n). */
static bool run_mesh_dev_n(const wf_model_host_t *h, const wf_tp_plan_t *p,
                           const wf_flux_job_t *job0, int T, int R, int U, float *out,
                           size_t nout, uint64_t *counts, uint64_t *kernels)
{
    const int N = T * R * U;
    size_t es = wf_dtype_size(job0->out_dtype);
    unsigned char *ob = malloc(nout * es + 1);
    memset(ob, 0x5a, nout * es + 1);
    wf_flux_job_t job = *job0;
    job.output = ob + 1; /* odd address: the copies down take any alignment */
    mrun_t m = {.T = T, .R = R, .U = U, .host = h, .plan = p, .job = &job, .short_rank = -1,
                .count = counts != NULL};
    CHECK(wf_comm_host_world_new(N, &m.w) == WF_OK, "world");
    mrank_t *t = calloc((size_t)N, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i] = (mrank_t){.m = &m, .rank = i};
        CHECK(pthread_create(&t[i].tid, NULL, rank_main_dev, &t[i]) == 0, "thread");
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i].tid, NULL);
    wf_comm_host_world_unref(&m.w);
    bool ok = true;
    for (int i = 0; i < N; i++) {
        CHECK(t[i].setup_ok, "device rank %d: setup", i);
        CHECK(t[i].shard_ok, "device mesh (tp %d, ring %d, ulysses %d) rank %d: shard", T, R, U,
              i);
        CHECK(t[i].st == WF_OK, "device mesh (tp %d, ring %d, ulysses %d) rank %d: run returned %d",
              T, R, U, i, (int)t[i].st);
        /* every rank copies its shard up and runs kernels; the root also
         * copies inputs up and the output down */
        CHECK(t[i].cnt.h2d > 0 && t[i].cnt.kernels > 0 && t[i].cnt.mem_allocs == 1,
              "device rank %d: h2d %llu, kernels %llu, resident blocks %llu", i,
              (unsigned long long)t[i].cnt.h2d, (unsigned long long)t[i].cnt.kernels,
              (unsigned long long)t[i].cnt.mem_allocs);
        if (i == 0)
            CHECK(t[i].cnt.d2h > 0, "device root: no copy down");
        CHECK(t[i].mem_back, "device rank %d: memory not back to full after the shard's free", i);
        ok &= t[i].st == WF_OK;
    }
    if (ok && out)
        wf_convert_to_f32(out, ob + 1, job.out_dtype, nout);
    if (counts)
        memcpy(counts, t[0].n, sizeof t[0].n);
    if (kernels)
        *kernels = t[0].cnt.kernels;
    CHECK(ob[0] == 0x5a, "wrote before the output");
    free(t);
    free(ob);
    return ok;
}

static bool run_mesh_dev(const wf_model_host_t *h, const wf_tp_plan_t *p,
                         const wf_flux_job_t *job0, int T, int R, int U, float *out, size_t nout)
{
    return run_mesh_dev_n(h, p, job0, T, R, U, out, nout, NULL, NULL);
}

/* The fixture's host with its layer counts cut down to nd double and ns
 * single blocks (shallow: the same tensors, the first blocks'). */
static wf_model_host_t with_layers(const fixture_t *f, uint32_t nd, uint32_t ns)
{
    wf_model_host_t h = *f->host;
    wf_flux_config_t *cfg = (wf_flux_config_t *)(void *)h.cfg.b;
    cfg->num_layers = nd;
    cfg->num_single_layers = ns;
    return h;
}

/* The comm calls of one forward, counted on the device path (the calls
 * the forward makes through comm.h, whatever the backend) with the layer
 * counts cut down to (1, 0), (0, 1) and (1, 1) blocks, so that the calls
 * outside the blocks, per double block and per single block come apart;
 * FLUX.1-dev (19 double, 38 single blocks) then issues outside + 19 x
 * double + 38 x single. The figures depend on the default tp plan and
 * the mesh, not on the widths (linear.c decides collectives on layouts
 * alone). Printed for daemon/comm/README.md "Host waits per forward":
 * on NCCL every collective, send, recv and group end waited on the host
 * before the stream-ordered comm; now only wait, barrier and sync do,
 * besides the forward's own backend synchronizes. */
static void test_comm_counts(const fixture_t *f)
{
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    static const int mesh[][4] = {{2, 1, 1, 0}, {1, 1, 2, 0}, {1, 2, 1, 0}, {1, 2, 1, 1}};
    static const uint32_t layers[3][2] = {{1, 0}, {0, 1}, {1, 1}};
    printf("%s: comm calls per forward on rank 0 (outside blocks + per double block + per "
           "single block; FLUX.1-dev 19 + 38 blocks):\n", f->name);
    for (size_t mi = 0; mi < sizeof mesh / sizeof mesh[0]; mi++) {
        int T = mesh[mi][0], R = mesh[mi][1], U = mesh[mi][2];
        uint64_t n[3][WF_CNT_N + 1];
        bool ok = true;
        for (int k = 0; k < 3 && ok; k++) {
            wf_model_host_t h = with_layers(f, layers[k][0], layers[k][1]);
            wf_flux_job_t job = f->job;
            job.alltoall = mesh[mi][3] != 0;
            ok = run_mesh_dev_n(&h, &def, &job, T, R, U, NULL, f->nout, n[k], NULL);
        }
        CHECK(ok, "counting run tp %d ring %d ulysses %d", T, R, U);
        if (!ok)
            continue;
        uint64_t waited = 0, waits = 0, dev = 0;
        printf("  tp %d ring %d ulysses %d%s:", T, R, U, mesh[mi][3] ? " (alltoall rotation)" : "");
        for (int op = 0; op <= WF_CNT_N; op++) {
            int64_t dbl = (int64_t)n[2][op] - (int64_t)n[1][op];
            int64_t sgl = (int64_t)n[2][op] - (int64_t)n[0][op];
            int64_t out = (int64_t)n[2][op] - dbl - sgl;
            CHECK(dbl >= 0 && sgl >= 0 && out >= 0, "counts add up (op %d)", op);
            uint64_t dev1 = (uint64_t)(out + 19 * dbl + 38 * sgl);
            if (op == WF_CNT_N) {
                printf(" | backend synchronizes %lld + %lld + %lld = %llu", (long long)out,
                       (long long)dbl, (long long)sgl, (unsigned long long)dev1);
                dev = dev1;
                continue;
            }
            if (dev1 == 0)
                continue;
            printf(" %s %lld + %lld + %lld = %llu;", wf_cnt_op_name((wf_cnt_op_t)op),
                   (long long)out, (long long)dbl, (long long)sgl, (unsigned long long)dev1);
            bool host_now = op == WF_CNT_WAIT || op == WF_CNT_BARRIER || op == WF_CNT_SYNC;
            bool host_before = host_now || (op != WF_CNT_ISEND && op != WF_CNT_IRECV &&
                                            op != WF_CNT_TEST && op != WF_CNT_SPLIT);
            waited += host_before ? dev1 : 0;
            waits += host_now ? dev1 : 0;
        }
        printf("\n    FLUX.1-dev on NCCL: %llu host waits in the comm before, %llu now; plus %llu "
               "backend synchronizes either way\n", (unsigned long long)waited,
               (unsigned long long)waits, (unsigned long long)dev);
    }
}

/* The device's kernel calls of one forward (the stand-in counts every
 * attention, model op, conversion and fill it runs: on CUDA each is one
 * launch call) of a bf16 fixture at one batch row on one rank, with the
 * layer counts cut down to (1, 0), (0, 1) and (1, 1) blocks as
 * test_comm_counts does: per double block and per single block they
 * must be the figures bench/flux_traffic.py counts from the op sequence
 * and daemon/models/README.md gives (23 and 12: no rounding pass, no
 * unpack, the single block's GELU in its MLP-in GEMM and its attention
 * written into cat, one norm and one gate over both streams). */
static void test_launch_counts(const fixture_t *f)
{
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    static const uint32_t layers[3][2] = {{1, 0}, {0, 1}, {1, 1}};
    uint64_t n[3] = {0, 0, 0};
    bool ok = true;
    for (int k = 0; k < 3 && ok; k++) {
        wf_model_host_t h = with_layers(f, layers[k][0], layers[k][1]);
        wf_flux_job_t job = f->job;
        job.B = 1;
        ok = run_mesh_dev_n(&h, &def, &job, 1, 1, 1, NULL, f->nout / (size_t)f->job.B, NULL,
                            &n[k]);
    }
    CHECK(ok, "%s: counting runs", f->name);
    if (!ok)
        return;
    int64_t dbl = (int64_t)n[2] - (int64_t)n[1], sgl = (int64_t)n[2] - (int64_t)n[0];
    int64_t out = (int64_t)n[2] - dbl - sgl;
    CHECK(dbl == 23 && sgl == 12 && out > 0,
          "%s: device kernel calls per double block %lld (want 23), per single block %lld "
          "(want 12), outside %lld", f->name, (long long)dbl, (long long)sgl, (long long)out);
    printf("%s: device kernel calls at one batch row, one rank: %lld outside + %lld per double "
           "block + %lld per single block (FLUX.1-dev's 19 + 38 blocks: %lld in the blocks)\n",
           f->name, (long long)out, (long long)dbl, (long long)sgl,
           (long long)(19 * dbl + 38 * sgl));
}

/* Shards of host h for tp ranks with plan p; NULL on failure. */
static wf_flux_shard_t **make_shards(const wf_model_host_t *h, const wf_tp_plan_t *p, int T)
{
    char err[512];
    wf_flux_shard_t **s = calloc((size_t)T, sizeof *s);
    uint64_t want = wf_flux_shard_bytes(wf_flux_cfg(&h->cfg), p, T);
    for (int t = 0; t < T; t++) {
        wf_status_t st = wf_flux_shard_build(h, p, T, t, NULL, NULL, &s[t], err, sizeof err);
        CHECK(st == WF_OK, "shard %d of %d: %s", t, T, err);
        if (st != WF_OK) {
            for (int k = 0; k < t; k++)
                wf_flux_shard_free(&s[k]);
            free(s);
            return NULL;
        }
        CHECK(s[t]->mem.bytes == want, "shard %d of %d holds %llu bytes, shard_bytes says %llu",
              t, T, (unsigned long long)s[t]->mem.bytes, (unsigned long long)want);
    }
    return s;
}

static void free_shards(wf_flux_shard_t ***s, int T)
{
    if (!*s)
        return;
    for (int t = 0; t < T; t++)
        wf_flux_shard_free(&(*s)[t]);
    free(*s);
    *s = NULL;
}

/* Run job on mesh (T, R, U) with the given shards; the root's output
 * (f32 copy) into out. Returns true when every rank returned WF_OK. */
static bool run_mesh(wf_flux_shard_t **shards, const wf_flux_job_t *job0, int T, int R, int U,
                     float *out, size_t nout, int short_rank, wf_status_t *ret_st)
{
    const int N = T * R * U;
    size_t es = job0->out_dtype == WF_DTYPE_F32 ? 4 : 2;
    unsigned char *ob = malloc(nout * es + 1);
    memset(ob, 0x5a, nout * es + 1);
    wf_flux_job_t job = *job0;
    job.output = ob + 1; /* odd address: output of any alignment */
    mrun_t m = {.T = T, .R = R, .U = U, .shards = shards, .job = &job, .short_rank = short_rank};
    CHECK(wf_comm_host_world_new(N, &m.w) == WF_OK, "world");
    mrank_t *t = calloc((size_t)N, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i] = (mrank_t){.m = &m, .rank = i};
        CHECK(pthread_create(&t[i].tid, NULL, rank_main, &t[i]) == 0, "thread");
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i].tid, NULL);
    wf_comm_host_world_unref(&m.w);
    bool ok = true;
    for (int i = 0; i < N; i++) {
        CHECK(t[i].setup_ok, "rank %d: setup", i);
        CHECK(t[i].guard_ok, "rank %d: wrote past its workspace", i);
        if (ret_st)
            ret_st[i] = t[i].st;
        if (short_rank < 0)
            CHECK(t[i].st == WF_OK, "mesh (tp %d, ring %d, ulysses %d) rank %d: run returned %d",
                  T, R, U, i, (int)t[i].st);
        ok &= t[i].st == WF_OK;
    }
    if (ok && out)
        wf_convert_to_f32(out, ob + 1, job.out_dtype, nout);
    free(t);
    free(ob);
    return ok;
}

/* ---- the grid ---------------------------------------------------------------------- */

/* The even meshes, then uneven ones: 16 image and 8 text tokens over 3,
 * 5, 6 or 7 seq ranks (the ring's anything mode), 4 heads (2 at tp 2; 2
 * and 1 on flux-small-d64) over ulysses 3 (ulysses_anything; at tp 2 a
 * rank without heads) */
static const int meshes[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 1, 2}, {1, 2, 1},
                                {2, 1, 2}, {1, 2, 2}, {2, 2, 1}, {4, 1, 2}, {1, 3, 1},
                                {1, 1, 3}, {1, 5, 1}, {1, 3, 2}, {2, 3, 1}, {2, 1, 3},
                                {1, 7, 1}};
#define NMESH (int)(sizeof meshes / sizeof meshes[0])

/* Tolerances, max abs error / max |ref| (see main's comment). */
#define TOL_F64 1e-5   /* f32 forward vs diffusers in float64 */
#define TOL_F32 2e-5   /* f32 forward vs diffusers in float32 */
#define TOL_BF16 2e-2  /* f32 forward of bf16 weights vs diffusers in bf16 */
#define TOL_PLAN 1e-5  /* a non-default plan vs the default, same mesh */
#define BF16_U 0.00390625 /* 2^-8: bf16's unit roundoff */

/* The device path of a bf16 model rounds to bf16 the activations a GEMM
 * or the attention reads and the projections' outputs
 * (daemon/models/flux/flux_blocks.c; the stand-in where a GPU does), the
 * CPU path keeps them f32; its tolerance against the CPU path is K u, u =
 * 2^-8, K the tensors rounded on the way to the output: the embedders' x
 * (hidden, encoder: 2), the time path's linears' x (time_l1, time_l2,
 * text_l1, text_l2, the batched AdaLN: 5; the guidance embedder's 2
 * more), per double block nx, the q / k / v projection, q / k / v after
 * norm and RoPE, the attention's P (rounded before P V) and output, the
 * feed-forward's nx and hidden (7), per single block nx, the q / k / v /
 * MLP-in projection, q / k / v, the attention's P and cat (5), the final
 * norm's nx (1). First order:
 * each rounding moves its tensor by at most u relative, and the ops after
 * it (norms renormalise, gates and residual adds) are taken not to
 * amplify it, so the output moves by at most K u of its largest value. */
static double tol_dev_bf16(const fixture_t *f)
{
    const wf_flux_config_t *c = wf_flux_cfg(&f->host->cfg);
    double K = 8.0 + 7.0 * (double)c->num_layers + 5.0 * (double)c->num_single_layers +
               (c->guidance_embeds ? 2.0 : 0.0);
    return K * BF16_U;
}

/* One output against the fixture's references; worst errors kept. */
static void check_out(const fixture_t *f, const float *out, const char *path, int T, int R,
                      int U, double *worst64, double *worst32)
{
    /* the device path of a bf16 model: its own bf16 roundings on top */
    const bool dev = path[0] == 'd';
    const double tol_bf16 = TOL_BF16 + (dev && f->bf16 ? tol_dev_bf16(f) : 0.0);
    double e32 = rel_err(out, f->ref, f->nout);
    *worst32 = fmax(*worst32, e32);
    if (f->ref64) {
        double e64 = rel_err(out, f->ref64, f->nout);
        *worst64 = fmax(*worst64, e64);
        printf("  %s mesh tp %d ring %d ulysses %d: vs float64 %.3g, vs float32 %.3g\n", path, T,
               R, U, e64, e32);
        CHECK(e64 <= TOL_F64, "%s %s mesh (%d,%d,%d): error vs float64 %.3g > %.3g", f->name,
              path, T, R, U, e64, TOL_F64);
        CHECK(e32 <= TOL_F32, "%s %s mesh (%d,%d,%d): error vs float32 %.3g > %.3g", f->name,
              path, T, R, U, e32, TOL_F32);
    } else {
        printf("  %s mesh tp %d ring %d ulysses %d: vs diffusers bf16 %.3g\n", path, T, R, U,
               e32);
        CHECK(e32 <= tol_bf16, "%s %s mesh (%d,%d,%d): error vs bf16 %.3g > %.3g", f->name,
              path, T, R, U, e32, tol_bf16);
    }
}

/* Every mesh of the grid, the CPU path and the device path (stand-in),
 * each against diffusers, and the two against each other. */
static void test_fixture(fixture_t *f)
{
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    float *out = malloc(f->nout * sizeof(float)), *dout = malloc(f->nout * sizeof(float));
    double worst64 = 0, worst32 = 0, dworst64 = 0, dworst32 = 0, vs = 0;
    printf("%s (B %lld, S_img %lld, S_txt %lld, %s):\n", f->name, (long long)f->job.B,
           (long long)f->job.S_img, (long long)f->job.S_txt, f->bf16 ? "bf16" : "f32");
    wf_flux_shard_t **shards[5] = {NULL};
    for (int mi = 0; mi < NMESH; mi++) {
        int T = meshes[mi][0], R = meshes[mi][1], U = meshes[mi][2];
        if (wf_flux_cfg(&f->host->cfg)->num_attention_heads % (uint32_t)T != 0) {
            /* the default plan splits heads (flux-small-d64 has 2): the
             * plan check's refusal is test_plan_check's */
            printf("  mesh tp %d ring %d ulysses %d: skipped (%u heads)\n", T, R, U,
                   wf_flux_cfg(&f->host->cfg)->num_attention_heads);
            continue;
        }
        if (!shards[T] && !(shards[T] = make_shards(f->host, &def, T)))
            continue;
        memset(out, 0, f->nout * sizeof(float));
        bool cok = run_mesh(shards[T], &f->job, T, R, U, out, f->nout, -1, NULL);
        if (cok)
            check_out(f, out, "cpu   ", T, R, U, &worst64, &worst32);
        memset(dout, 0, f->nout * sizeof(float));
        if (!run_mesh_dev(f->host, &def, &f->job, T, R, U, dout, f->nout))
            continue;
        check_out(f, dout, "device", T, R, U, &dworst64, &dworst32);
        if (cok) {
            /* f32 weights: the same ops on the same values; only where the
             * CPU shard views rowwise pieces in place and the device holds
             * them gathered may a sum's order differ. bf16 weights: the
             * device keeps the GEMMs' and the attention's inputs in bf16
             * (the device's numerics), the CPU in f32: tol_dev_bf16 */
            double e = rel_err(dout, out, f->nout), tol = f->bf16 ? tol_dev_bf16(f) : TOL_PLAN;
            vs = fmax(vs, e);
            CHECK(e <= tol, "%s mesh (%d,%d,%d): device vs cpu %.3g > %.3g", f->name, T, R,
                  U, e, tol);
        }
        if (R > 1) {
            /* the ring's other rotation: one K / V shard per step */
            wf_flux_job_t ja = f->job;
            ja.alltoall = true;
            memset(out, 0, f->nout * sizeof(float));
            if (run_mesh(shards[T], &ja, T, R, U, out, f->nout, -1, NULL))
                check_out(f, out, "cpu a2a", T, R, U, &worst64, &worst32);
            memset(dout, 0, f->nout * sizeof(float));
            if (run_mesh_dev(f->host, &def, &ja, T, R, U, dout, f->nout))
                check_out(f, dout, "dev a2a", T, R, U, &dworst64, &dworst32);
        }
    }
    if (f->ref64)
        printf("  worst: vs float64 %.3g / device %.3g (tol %.0e), vs float32 %.3g / device "
               "%.3g (tol %.0e); device vs cpu %.3g\n", worst64, dworst64, TOL_F64, worst32,
               dworst32, TOL_F32, vs);
    else
        printf("  worst: vs diffusers bf16 %.3g (tol %.0e) / device %.3g (tol %.3g); device vs "
               "cpu %.3g (tol %.3g)\n",
               worst32, TOL_BF16, dworst32, TOL_BF16 + tol_dev_bf16(f), vs, tol_dev_bf16(f));
    for (int T = 0; T < 5; T++)
        free_shards(&shards[T], T);
    free(out);
    free(dout);
}

/* Fewer tokens than seq ranks, so that some ranks hold no text or no
 * image token, or no token at all: the first batch's first S_img image
 * and S_txt text tokens of the fixture (a prefix of each input), on
 * meshes against one rank, on the CPU and on the stand-in device. */
static void test_short_seqs(fixture_t *f)
{
    static const int64_t sizes[][2] = {{3, 2}, {1, 6}, {5, 1}}; /* S_img, S_txt */
    static const int sm[][3] = {{1, 8, 1}, {1, 2, 4}, {2, 3, 1}, {1, 3, 2}, {2, 1, 3}};
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    wf_flux_shard_t **s1 = make_shards(f->host, &def, 1), **s2 = make_shards(f->host, &def, 2);
    double worst = 0;
    int runs = 0;
    for (size_t k = 0; s1 && s2 && k < sizeof sizes / sizeof sizes[0]; k++) {
        wf_flux_job_t j = f->job;
        j.B = 1;
        j.S_img = sizes[k][0];
        j.S_txt = sizes[k][1];
        size_t n = (size_t)(j.S_img * f->nout / (size_t)(f->job.B * f->job.S_img));
        float *ref = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
        if (run_mesh(s1, &j, 1, 1, 1, ref, n, -1, NULL))
            for (size_t m = 0; m < sizeof sm / sizeof sm[0]; m++) {
                int T = sm[m][0], R = sm[m][1], U = sm[m][2];
                for (int dev = 0; dev < 2; dev++) {
                    memset(out, 0, n * sizeof(float));
                    bool ok = dev ? run_mesh_dev(f->host, &def, &j, T, R, U, out, n)
                                  : run_mesh(T == 1 ? s1 : s2, &j, T, R, U, out, n, -1, NULL);
                    if (!ok)
                        continue;
                    double e = rel_err(out, ref, n);
                    worst = fmax(worst, e);
                    runs++;
                    CHECK(e <= TOL_PLAN, "S_img %lld, S_txt %lld, %s mesh (%d,%d,%d) vs one "
                          "rank: %.3g > %.3g", (long long)j.S_img, (long long)j.S_txt,
                          dev ? "device" : "cpu", T, R, U, e, TOL_PLAN);
                }
            }
        free(ref);
        free(out);
    }
    free_shards(&s1, 1);
    free_shards(&s2, 2);
    printf("%s: S_img / S_txt of 3 / 2, 1 / 6, 5 / 1 (empty pieces) on ring 8, ring 2 x ulysses "
           "4, tp 2 x ring 3, ring 3 x ulysses 2, tp 2 x ulysses 3 (CPU and device) vs one rank: "
           "%d runs, worst %.3g (tol %.0e)\n", f->name, runs, worst, TOL_PLAN);
}

/* One batch row, where the joint order of the attention is the stream
 * order (flux_blocks.c reads the attention's output in place, no
 * unpack): the fixture's first sample (a prefix of every batched input;
 * diffusers computes the samples independently) against the first
 * sample of diffusers' outputs, on the CPU and on the stand-in device,
 * with the fixture's tolerances (check_out). */
static void test_batch1(fixture_t *f)
{
    static const int bm[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1},
                                {1, 3, 1}};
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    wf_flux_shard_t **s1 = make_shards(f->host, &def, 1), **s2 = make_shards(f->host, &def, 2);
    fixture_t g = *f; /* the first sample's references */
    wf_flux_job_t j = f->job;
    j.B = 1;
    g.nout = f->nout / (size_t)f->job.B;
    g.job = j;
    float *out = malloc(g.nout * sizeof(float));
    double w64 = 0, w32 = 0, d64 = 0, d32 = 0;
    for (size_t m = 0; s1 && s2 && out && m < sizeof bm / sizeof bm[0]; m++) {
        int T = bm[m][0], R = bm[m][1], U = bm[m][2];
        if (wf_flux_cfg(&f->host->cfg)->num_attention_heads % (uint32_t)T != 0)
            continue;
        memset(out, 0, g.nout * sizeof(float));
        if (run_mesh(T == 1 ? s1 : s2, &j, T, R, U, out, g.nout, -1, NULL))
            check_out(&g, out, "cpu B1", T, R, U, &w64, &w32);
        memset(out, 0, g.nout * sizeof(float));
        if (run_mesh_dev(f->host, &def, &j, T, R, U, out, g.nout))
            check_out(&g, out, "dev B1", T, R, U, &d64, &d32);
    }
    printf("%s, one batch row (no unpack): worst vs %s %.3g / device %.3g\n", f->name,
           f->ref64 ? "float64" : "diffusers bf16", f->ref64 ? w64 : w32, f->ref64 ? d64 : d32);
    free(out);
    free_shards(&s1, 1);
    free_shards(&s2, 2);
}

/* The output in bf16 is the f32 output rounded (round-to-nearest-even),
 * on the CPU and on the device (converted there, copied down). */
static void test_out_dtype(fixture_t *f)
{
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    wf_flux_shard_t **s = make_shards(f->host, &def, 2);
    if (!s)
        return;
    float *a = malloc(f->nout * sizeof(float)), *b = malloc(f->nout * sizeof(float));
    wf_flux_job_t j = f->job;
    for (int dev = 0; dev < 2; dev++) {
        j.out_dtype = WF_DTYPE_F32;
        bool ok = dev ? run_mesh_dev(f->host, &def, &j, 2, 1, 2, a, f->nout)
                      : run_mesh(s, &j, 2, 1, 2, a, f->nout, -1, NULL);
        j.out_dtype = WF_DTYPE_BF16;
        ok &= dev ? run_mesh_dev(f->host, &def, &j, 2, 1, 2, b, f->nout)
                  : run_mesh(s, &j, 2, 1, 2, b, f->nout, -1, NULL);
        size_t bad = 0;
        for (size_t i = 0; ok && i < f->nout; i++)
            bad += wf_bf16_to_f32(wf_f32_to_bf16(a[i])) != b[i];
        CHECK(ok && bad == 0, "%s bf16 output: %zu elements differ from the rounded f32 output",
              dev ? "device" : "cpu", bad);
    }
    printf("out_dtype bf16: the f32 output rounded, element for element (cpu and device)\n");
    free(a);
    free(b);
    free_shards(&s, 2);
}

/* A device shard that does not fit (a budget 256 bytes, one resident
 * granule, short) is refused before a byte is copied,
 * with the figures; one that fits is exactly the figure, and its memory
 * returns at once when it is freed. */
static void test_dev_shard(const fixture_t *f)
{
    const wf_backend_ops_t *ops = wf_standin_dev_backend();
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    uint64_t need = wf_flux_shard_bytes_dev(wf_flux_cfg(&f->host->cfg), &def, 2, f->host->dtype);
    uint64_t cpu = wf_flux_shard_bytes(wf_flux_cfg(&f->host->cfg), &def, 2);
    CHECK(need > 0 && (f->bf16 ? need < cpu : need >= cpu),
          "%s: device figure %llu, cpu figure %llu", f->name, (unsigned long long)need,
          (unsigned long long)cpu);
    wf_backend_ctx_t *ctx = NULL;
    char err[512] = "";
    CHECK(ops->ctx_new(0, need - 256, &ctx) == WF_OK, "stand-in context");
    wf_flux_shard_t *s = NULL;
    wf_status_t st = wf_flux_shard_build(f->host, &def, 2, 1, ops, ctx, &s, err, sizeof err);
    wf_standin_counters_t c = wf_standin_counters(ctx);
    CHECK(st == WF_E_NO_MEMORY && !s && c.h2d == 0 && strstr(err, "nothing was copied"),
          "%s: shard over the budget: %d, %llu copies, '%s'", f->name, (int)st,
          (unsigned long long)c.h2d, err);
    ops->ctx_destroy(&ctx);
    CHECK(ops->ctx_new(0, need, &ctx) == WF_OK, "stand-in context");
    st = wf_flux_shard_build(f->host, &def, 2, 1, ops, ctx, &s, err, sizeof err);
    uint64_t total = 0, avail = 0;
    ops->memory_info(ctx, &total, &avail);
    CHECK(st == WF_OK && s && s->mem.bytes == need && avail == 0,
          "%s: shard at exactly its figure: %d '%s', free %llu", f->name, (int)st, err,
          (unsigned long long)avail);
    wf_flux_shard_free(&s);
    ops->memory_info(ctx, &total, &avail);
    c = wf_standin_counters(ctx);
    CHECK(!s && avail == total && c.mem_frees == 1 && c.bad_frees == 0,
          "%s: freed shard: free %llu of %llu", f->name, (unsigned long long)avail,
          (unsigned long long)total);
    ops->ctx_destroy(&ctx);
    /* the registry's admission figure follows its workers' backend */
    wf_registry_t reg;
    memset(&reg, 0, sizeof reg);
    wf_model_t *m = calloc(1, sizeof *m);
    m->cfg = f->host->cfg;
    m->run = wf_family_run_of(m->cfg.fam);
    m->plan = def;
    m->dtype = f->host->dtype;
    uint64_t on_cpu = wf_model_rank_bytes(&reg, m, 2);
    reg.ops = wf_backend_cpu();
    uint64_t on_cpu2 = wf_model_rank_bytes(&reg, m, 2);
    reg.ops = ops;
    uint64_t on_dev = wf_model_rank_bytes(&reg, m, 2);
    CHECK(on_cpu == cpu && on_cpu2 == cpu && on_dev == need,
          "%s: registry figures %llu / %llu / %llu, want %llu / %llu", f->name,
          (unsigned long long)on_cpu, (unsigned long long)on_cpu2, (unsigned long long)on_dev,
          (unsigned long long)cpu, (unsigned long long)need);
    free(m);
    printf("%s: device shard %llu bytes (cpu %llu); a budget 256 bytes short of it is "
           "refused before a copy; freeing returns it\n", f->name, (unsigned long long)need,
           (unsigned long long)cpu);
}

/* ---- plans ------------------------------------------------------------------------- */

static void rule(wf_tp_plan_t *p, const char *glob, wf_tp_style_t st, int nb, const uint32_t *b)
{
    wf_tp_rule_t *r = &p->rules[p->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->glob, sizeof r->glob, "%s", glob);
    r->style = st;
    r->n_blocks = (uint32_t)nb;
    for (int k = 0; k < nb; k++)
        r->blocks[k] = b[k];
}

/* A plan far from the default: to_out colwise (the attention output
 * gathered, the output gathered), feed-forwards replicated (no rule),
 * AdaLN linears packed_colwise by chunk, single-block q / k / v in two
 * layouts (the attention then runs on every head), proj_mlp colwise into
 * a rowwise proj_out (pieces straddling the attention / MLP boundary),
 * embedders and the final layers split both ways. */
static void odd_plan(wf_tp_plan_t *p, bool guidance)
{
    static const uint32_t six[6] = {1, 1, 1, 1, 1, 1}, three[3] = {1, 1, 1};
    memset(p, 0, sizeof *p);
    rule(p, "transformer_blocks.*.attn.to_q", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.to_k", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.to_v", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.add_q_proj", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.add_k_proj", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.add_v_proj", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.to_out.0", WF_TP_COLWISE, 0, NULL);
    rule(p, "transformer_blocks.*.attn.to_add_out", WF_TP_ROWWISE, 0, NULL);
    rule(p, "transformer_blocks.*.norm1.linear", WF_TP_PACKED_COLWISE, 6, six);
    rule(p, "transformer_blocks.*.norm1_context.linear", WF_TP_COLWISE, 0, NULL);
    rule(p, "single_transformer_blocks.*.norm.linear", WF_TP_PACKED_COLWISE, 3, three);
    rule(p, "single_transformer_blocks.*.attn.to_q", WF_TP_COLWISE, 0, NULL);
    rule(p, "single_transformer_blocks.*.attn.to_k", WF_TP_ROWWISE, 0, NULL);
    rule(p, "single_transformer_blocks.*.attn.to_v", WF_TP_COLWISE, 0, NULL);
    rule(p, "single_transformer_blocks.*.proj_mlp", WF_TP_COLWISE, 0, NULL);
    rule(p, "single_transformer_blocks.*.proj_out", WF_TP_ROWWISE, 0, NULL);
    rule(p, "x_embedder", WF_TP_ROWWISE, 0, NULL);
    rule(p, "context_embedder", WF_TP_COLWISE, 0, NULL);
    rule(p, "time_text_embed.timestep_embedder.linear_1", WF_TP_ROWWISE, 0, NULL);
    rule(p, "time_text_embed.text_embedder.linear_2", WF_TP_COLWISE, 0, NULL);
    if (guidance)
        rule(p, "time_text_embed.guidance_embedder.linear_2", WF_TP_ROWWISE, 0, NULL);
    rule(p, "norm_out.linear", WF_TP_COLWISE, 0, NULL);
    rule(p, "proj_out", WF_TP_ROWWISE, 0, NULL);
}

static void test_plans(fixture_t *f)
{
    static const int pm[][3] = {{2, 1, 1}, {2, 1, 2}, {4, 1, 1}, {4, 1, 2}};
    wf_tp_plan_t def, odd;
    char err[512];
    wf_flux_family.default_plan(NULL, &def);
    odd_plan(&odd, wf_flux_cfg(&f->host->cfg)->guidance_embeds);
    float *a = malloc(f->nout * sizeof(float)), *b = malloc(f->nout * sizeof(float));
    double worst = 0;
    for (size_t mi = 0; mi < sizeof pm / sizeof pm[0]; mi++) {
        int T = pm[mi][0], R = pm[mi][1], U = pm[mi][2];
        wf_status_t st = wf_flux_plan_check(wf_flux_cfg(&f->host->cfg), &odd, T, false, err, sizeof err);
        CHECK(st == WF_OK, "odd plan at tp %d: %s", T, err);
        wf_flux_shard_t **sd = make_shards(f->host, &def, T), **so = make_shards(f->host, &odd, T);
        /* the default plan fuses every projection group and batches the
         * modulation; the odd plan's rowwise single-block to_k and its
         * split AdaLN linears (more blocks than a packed layout holds)
         * run unfused, its colwise double-block groups fused */
        if (sd && so)
            CHECK(sd[0]->dbl[0].qkv.fused && sd[0]->dbl[0].add_qkv.fused &&
                      sd[0]->sgl[0].qkvm.fused && sd[0]->mod_fused &&
                      so[0]->dbl[0].qkv.fused && !so[0]->sgl[0].qkvm.fused &&
                      !so[0]->mod_fused,
                  "%s: fused groups at tp %d", f->name, T);
        CHECK(wf_flux_shard_bytes(wf_flux_cfg(&f->host->cfg), &odd, T) !=
                  wf_flux_shard_bytes(wf_flux_cfg(&f->host->cfg), &def, T),
              "the odd plan cuts other shards than the default");
        if (sd && so && run_mesh(sd, &f->job, T, R, U, a, f->nout, -1, NULL) &&
            run_mesh(so, &f->job, T, R, U, b, f->nout, -1, NULL)) {
            double e = rel_err(b, a, f->nout);
            worst = fmax(worst, e);
            CHECK(e <= TOL_PLAN, "%s: odd plan vs default at (%d,%d,%d): %.3g", f->name, T, R,
                  U, e);
            printf("  odd plan vs default, mesh tp %d ring %d ulysses %d: %.3g", T, R, U, e);
            /* the device shards of the odd plan: packed and rowwise pieces
             * gathered on the host before the copy up */
            if (run_mesh_dev(f->host, &odd, &f->job, T, R, U, b, f->nout)) {
                double ed = rel_err(b, a, f->nout);
                worst = fmax(worst, ed);
                CHECK(ed <= TOL_PLAN, "%s: device odd plan vs default at (%d,%d,%d): %.3g",
                      f->name, T, R, U, ed);
                printf(", on the device %.3g", ed);
            }
            printf("\n");
        }
        free_shards(&sd, T);
        free_shards(&so, T);
    }
    printf("%s: a non-default plan computes the default's function (worst %.3g, tol %.0e)\n",
           f->name, worst, TOL_PLAN);
    free(a);
    free(b);
}

static void test_plan_check(const wf_flux_config_t *cfg)
{
    char err[512];
    wf_tp_plan_t p;
    wf_flux_family.default_plan(NULL, &p);
    /* diffusers: "`tp_degree` (3) must divide the number of attention heads (4)." */
    wf_status_t st = wf_flux_plan_check(cfg, &p, 3, true, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT &&
              strcmp(err, "`tp_degree` (3) must divide the number of attention heads (4).") == 0,
          "tp=3 on 4 heads: %d '%s'", (int)st, err);
    CHECK(wf_flux_shard_bytes(cfg, &p, 3) == 0, "shard_bytes of a refused plan");
    for (int T = 1; T <= 4; T *= 2)
        CHECK(wf_flux_plan_check(cfg, &p, T, false, err, sizeof err) == WF_OK && err[0] == 0,
              "default plan at tp %d: %s", T, err);
    uint64_t b1 = wf_flux_shard_bytes(cfg, &p, 1), b2 = wf_flux_shard_bytes(cfg, &p, 2);
    CHECK(b1 > 0 && b2 < b1, "shard bytes tp 1 %llu, tp 2 %llu", (unsigned long long)b1,
          (unsigned long long)b2);
    /* a rule on a norm weight */
    memset(&p, 0, sizeof p);
    rule(&p, "transformer_blocks.*.attn.norm_q", WF_TP_COLWISE, 0, NULL);
    st = wf_flux_plan_check(cfg, &p, 2, true, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "norm weight") &&
              strstr(err, "transformer_blocks.0.attn.norm_q"),
          "rule on a norm weight: %d '%s'", (int)st, err);
    /* a rule that matches nothing */
    memset(&p, 0, sizeof p);
    rule(&p, "transformer_blocks.*.attn.to_qq", WF_TP_COLWISE, 0, NULL);
    st = wf_flux_plan_check(cfg, &p, 2, false, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "matches no linear layer"),
          "unmatched rule: %d '%s'", (int)st, err);
    CHECK(wf_flux_plan_check(cfg, &p, 2, true, err, sizeof err) == WF_OK,
          "unmatched rule allowed: %s", err);
    /* packed pieces that cut heads (blocks 12 | 36 over 2 ranks: 6 | 18) */
    static const uint32_t b13[2] = {1, 3};
    memset(&p, 0, sizeof p);
    rule(&p, "transformer_blocks.*.attn.to_q", WF_TP_PACKED_COLWISE, 2, b13);
    st = wf_flux_plan_check(cfg, &p, 2, false, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "cuts attention heads"),
          "packed pieces cutting heads: %d '%s'", (int)st, err);
    /* a placement that does not divide: wf_tp_place's message */
    memset(&p, 0, sizeof p);
    rule(&p, "proj_out", WF_TP_COLWISE, 0, NULL);
    st = wf_flux_plan_check(cfg, &p, 32, false, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "Cannot colwise-shard 'proj_out' weight rows"),
          "indivisible placement: %d '%s'", (int)st, err);
    CHECK(wf_flux_plan_check(cfg, &p, 0, false, err, sizeof err) == WF_E_BAD_ARGUMENT,
          "tp 0");
    printf("plan check: diffusers' head message, norm weights, unmatched rules, cut heads, "
           "indivisible placements\n");
}

/* The CUDA kernels' head dims (kernels/cuda: 64 and 128), for a backend
 * check without a GPU build. */
static bool head_dim_64_128(int64_t D) { return D == 64 || D == 128; }

static void test_forward_check(const fixture_t *plain, const fixture_t *guid)
{
    char err[512];
    const wf_flux_config_t *cfg = wf_flux_cfg(&plain->host->cfg);
    wf_flux_job_t j = plain->job;
    const wf_backend_ops_t *ops = wf_backend_cpu();
    /* a model whose head dim the backend's attention does not take is
     * refused (at load and at plan) with the field and the backend named */
    wf_backend_ops_t limited = *wf_standin_dev_backend();
    limited.attention_head_dim_ok = head_dim_64_128;
    CHECK(wf_flux_backend_check(cfg, ops, err, sizeof err) == WF_OK, "cpu: %s", err);
    CHECK(wf_flux_backend_check(cfg, wf_standin_dev_backend(), err, sizeof err) == WF_OK,
          "stand-in: %s", err);
    wf_status_t bst = wf_flux_backend_check(cfg, &limited, err, sizeof err);
    CHECK(bst == WF_E_BAD_ARGUMENT && strstr(err, "attention_head_dim 12") &&
              strstr(err, "standin"), "head dim 12 on a 64 / 128 backend: %d '%s'", (int)bst,
          err);
    wf_flux_config_t c64 = *cfg;
    c64.attention_head_dim = 64;
    CHECK(wf_flux_backend_check(&c64, &limited, err, sizeof err) == WF_OK, "head dim 64: %s",
          err);
    /* a backend lacking an op the forward calls is refused with the op
     * named, and so is a device backend lacking a host <-> device entry */
    wf_backend_ops_t no_modln = *wf_standin_dev_backend();
    no_modln.modln = NULL;
    bst = wf_flux_backend_check(cfg, &no_modln, err, sizeof err);
    CHECK(bst == WF_E_BAD_ARGUMENT && strstr(err, "lacks modln") && strstr(err, "standin"),
          "a backend without modln: %d '%s'", (int)bst, err);
    wf_backend_ops_t no_ws = *ops;
    no_ws.attention_workspace = NULL;
    bst = wf_flux_backend_check(cfg, &no_ws, err, sizeof err);
    CHECK(bst == WF_E_BAD_ARGUMENT && strstr(err, "lacks attention"),
          "a backend without attention_workspace: %d '%s'", (int)bst, err);
    wf_backend_ops_t no_fill = *wf_standin_dev_backend();
    no_fill.fill_f32 = NULL;
    bst = wf_flux_backend_check(cfg, &no_fill, err, sizeof err);
    CHECK(bst == WF_E_BAD_ARGUMENT && strstr(err, "lacks fill_f32"),
          "a device backend without fill_f32: %d '%s'", (int)bst, err);
    CHECK(wf_flux_forward_check(cfg, &j, 2, 2, 2, err, sizeof err) == WF_OK, "valid: %s", err);
    j.hidden_ch = 17;
    wf_status_t st = wf_flux_forward_check(cfg, &j, 1, 1, 1, err, sizeof err);
    CHECK(st == WF_E_BAD_SHAPE && strstr(err, "hidden_states") && strstr(err, "in_channels"),
          "wrong channel count: %d '%s'", (int)st, err);
    CHECK(wf_flux_forward_workspace(cfg, &j, 1, 1, 1, ops, NULL) == SIZE_MAX,
          "workspace of a refused job");
    j = plain->job;
    j.encoder_ch = 31;
    st = wf_flux_forward_check(cfg, &j, 1, 1, 1, err, sizeof err);
    CHECK(st == WF_E_BAD_SHAPE && strstr(err, "joint_attention_dim"), "encoder width: '%s'", err);
    j = plain->job;
    j.txt_ids_axes = 2;
    st = wf_flux_forward_check(cfg, &j, 1, 1, 1, err, sizeof err);
    CHECK(st == WF_E_BAD_SHAPE && strstr(err, "txt_ids"), "ids axes: '%s'", err);
    /* any S_img and S_txt on any ring x ulysses of up to 8, also fewer
     * tokens than seq ranks: accepted, with a workspace */
    int n_seq = 0;
    for (int R = 1; R <= 8; R++)
        for (int U = 1; R * U <= 8; U++)
            for (int64_t si = 1; si <= 20; si++)
                for (int64_t stx = 1; stx <= 10; stx++) {
                    j = plain->job;
                    j.S_img = si;
                    j.S_txt = stx;
                    st = wf_flux_forward_check(cfg, &j, 1, R, U, err, sizeof err);
                    CHECK(st == WF_OK && err[0] == 0, "S_img %lld, S_txt %lld on ring %d x "
                          "ulysses %d: %d '%s'", (long long)si, (long long)stx, R, U, (int)st,
                          err);
                    CHECK(wf_flux_forward_workspace(cfg, &j, 1, R, U, ops, NULL) != SIZE_MAX,
                          "workspace of S_img %lld, S_txt %lld on ring %d x ulysses %d",
                          (long long)si, (long long)stx, R, U);
                    n_seq++;
                }
    /* guidance: required by the guidance model, refused by the other */
    j = guid->job;
    j.has_guidance = false;
    j.guidance = NULL;
    st = wf_flux_forward_check(wf_flux_cfg(&guid->host->cfg), &j, 1, 1, 1, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "guidance is required"),
          "missing guidance: %d '%s'", (int)st, err);
    j = plain->job;
    j.has_guidance = true;
    j.guidance_dtype = WF_DTYPE_F32;
    st = wf_flux_forward_check(cfg, &j, 1, 1, 1, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "no guidance embedder"),
          "guidance on a plain model: %d '%s'", (int)st, err);
    j = plain->job;
    j.out_dtype = (wf_dtype_t)7;
    CHECK(wf_flux_forward_check(cfg, &j, 1, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT,
          "bad dtype");
    j = plain->job;
    j.B = 0;
    CHECK(wf_flux_forward_check(cfg, &j, 1, 1, 1, err, sizeof err) == WF_E_BAD_SHAPE, "B 0");
    j = plain->job;
    CHECK(wf_flux_forward_check(cfg, &j, 0, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT,
          "tp 0");
    /* the workspace grows with the sequence, shrinks with P */
    size_t w1 = wf_flux_forward_workspace(cfg, &j, 1, 1, 1, ops, NULL);
    size_t w4 = wf_flux_forward_workspace(cfg, &j, 1, 2, 2, ops, NULL);
    CHECK(w1 > 0 && w1 != SIZE_MAX && w4 < w1, "workspace P 1 %zu, P 4 %zu", w1, w4);
    printf("forward check: channels, ids, guidance, dtypes; any S_img / S_txt on any ring x "
           "ulysses (%d cases); workspace %zu bytes (P 1), %zu (P 4)\n", n_seq, w1, w4);
}

/* One rank with a short workspace fails alone and aborts the world: the
 * others return WF_E_ABORTED instead of waiting forever. */
static void test_error_aborts(fixture_t *f)
{
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    wf_flux_shard_t **s = make_shards(f->host, &def, 2);
    if (!s)
        return;
    for (int bad = 0; bad < 8; bad += 3) {
        wf_status_t st[8];
        run_mesh(s, &f->job, 2, 2, 2, NULL, f->nout, bad, st);
        for (int i = 0; i < 8; i++) {
            wf_status_t want = i == bad ? WF_E_BAD_ARGUMENT : WF_E_ABORTED;
            CHECK(st[i] == want, "short workspace on rank %d: rank %d gave %d, want %d", bad, i,
                  (int)st[i], (int)want);
        }
    }
    /* a shard cut for another tp rank */
    wf_flux_shard_t *swap = s[0];
    s[0] = s[1];
    s[1] = swap;
    wf_status_t st[2];
    run_mesh(s, &f->job, 2, 1, 1, NULL, f->nout, 99, st);
    CHECK(st[0] == WF_E_BAD_ARGUMENT || st[1] == WF_E_BAD_ARGUMENT, "swapped shards: %d %d", (int)st[0],
          (int)st[1]);
    free_shards(&s, 2);
    printf("errors: a short workspace or a wrong shard on one rank aborts the others\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    double t0 = now_s();
    wf_backend_ctx_t *ctx = NULL; /* sets OpenBLAS to one thread up front */
    wf_backend_cpu()->ctx_new(0, 0, &ctx);
    wf_backend_cpu()->ctx_destroy(&ctx);
    char err[512];
    int root = -1;
    if (wf_model_root_open(argv[1], &root, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Tolerances (max abs error / max |ref|):
     *   f32 vs diffusers' float64 run: 1e-5. The forward accumulates in
     *     f32 (sgemm, attention) with norms' statistics in double; a few
     *     f32 roundings per layer over 2 blocks stay near 1e-6.
     *   f32 vs diffusers' float32 run: 2e-5 (both sides' f32 errors).
     *   bf16 vs diffusers' bf16 run: 2e-2. diffusers rounds every
     *     activation to bf16 (unit roundoff 2^-8 = 3.9e-3) and its
     *     timestep too (875 -> 876 in bf16); weft's CPU path computes in
     *     f32 from the same bf16 weights and inputs. Measured about 1e-2;
     *     the bf16 run against diffusers' float64 run with the f32
     *     weights is at the same level (make_fixtures.py prints it).
     *     weft's device path (the stand-in, rounding where a GPU does)
     *     adds its own bf16 roundings: 2e-2 + K 2^-8 (tol_dev_bf16: K =
     *     20 for one double and one single block, 7.8e-2), and K 2^-8
     *     against the CPU path.
     *   a non-default plan vs the default: 1e-5 (only the order of f32
     *     sums differs: rowwise partial sums, gathered columns). */
    /* flux-tiny*: head dim 12; flux-small-d64*: head dim 64 (the CUDA
     * attention kernels' size, served by tests/gpu/run.sh), same
     * tolerances */
    enum { NFIX = 5 };
    fixture_t fx[NFIX];
    bool ok = fixture_open(root, "flux-tiny", "io-flux-tiny-f32.safetensors", false, &fx[0]) &
              fixture_open(root, "flux-tiny-guidance", "io-flux-tiny-guidance-f32.safetensors",
                           false, &fx[1]) &
              fixture_open(root, "flux-tiny-bf16", "io-flux-tiny-bf16.safetensors", true, &fx[2]) &
              fixture_open(root, "flux-small-d64", "io-flux-small-d64-f32.safetensors", false,
                           &fx[3]) &
              fixture_open(root, "flux-small-d64-bf16", "io-flux-small-d64-bf16.safetensors",
                           true, &fx[4]);
    if (ok) {
        test_plan_check(wf_flux_cfg(&fx[0].host->cfg));
        test_forward_check(&fx[0], &fx[1]);
        for (int i = 0; i < NFIX; i++)
            test_fixture(&fx[i]);
        test_out_dtype(&fx[2]);
        test_short_seqs(&fx[0]);
        test_batch1(&fx[0]);
        test_batch1(&fx[2]);
        test_batch1(&fx[4]);
        for (int i = 0; i < NFIX; i++)
            test_dev_shard(&fx[i]);
        test_plans(&fx[0]);
        test_plans(&fx[1]);
        test_error_aborts(&fx[0]);
        test_comm_counts(&fx[1]);   /* guidance, as FLUX.1-dev */
        test_launch_counts(&fx[4]);
    }
    for (int i = 0; i < NFIX; i++)
        fixture_close(&fx[i]);
    close(root);
    printf("%d checks, %d failures, %.1f s\n", passed + failed, failed, now_s() - t0);
    return failed ? 1 : 0;
}
