/* test_wan_forward.c — the Wan family (modelfiles/wan, daemon/models/wan)
 * against diffusers' WanTransformer3DModel, through the generic path only:
 * the family table (wf_model_cfg_load, family.h), the checkpoint source and
 * host copy (model_host.h), and the daemon half (family_run.h: plan check,
 * shard, forward check, workspace, run), on real threads with the host
 * comm for the sequence-parallel meshes.
 *
 * Checked: the config of tests/fixtures/wan-tiny and the refusals of
 * other classes and bad values (the image-conditioned and per-token
 * timestep variants: test_wan_config); the expected
 * tensors against the checkpoint (a rank-5 Conv3d weight and rank-3
 * modulation tables through the generic reader); the schema, the default
 * plan and the public config; the plan check (tp must divide the heads,
 * rules on non-linear tensors refused); the forward check's refusals;
 * the forward on tp x ring x ulysses meshes, each rank cutting its own
 * shard (its size as shard_bytes figures it), on the CPU and on the
 * stand-in device (every byte of device memory scrambled, given back at
 * the end), including uneven token shards and head counts ulysses does
 * not divide (the anything modes), for every fixture of
 * tests/parity/make_wan_fixtures.py (text-, image- and first-last-frame-
 * to-video, per-token timesteps, a bf16 checkpoint) against diffusers'
 * float64 and float32 runs; the per-token timestep's checks; a bf16
 * output; the image fixture's weights rounded to bf16 on the device
 * against the CPU path of the same weights.
 *
 * Usage: test_wan_forward FIXTURES_DIR. */
#include "base/mesh.h"
#include "comm/comm_host.h"
#include "comm/comm_staged.h"
#include "family.h"
#include "model_host.h"
#include "model_root.h"
#include "models/family_run.h"
#include "safetensors.h"
#include "support/check.h"
#include "support/standin_dev.h"
#include "tensor.h"
#include "wan/wan_config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the pure half -------------------------------------------------------- */

static const char *const good_json =
    "{\"_class_name\": \"WanTransformer3DModel\", \"_diffusers_version\": \"0.42.1\","
    " \"added_kv_proj_dim\": null, \"attention_head_dim\": 16, \"cross_attn_norm\": true,"
    " \"eps\": 1e-06, \"ffn_dim\": 64, \"freq_dim\": 32, \"image_dim\": null,"
    " \"in_channels\": 4, \"num_attention_heads\": 2, \"num_layers\": 2, \"out_channels\": 4,"
    " \"patch_size\": [1, 2, 2], \"pos_embed_seq_len\": null,"
    " \"qk_norm\": \"rms_norm_across_heads\", \"rope_max_seq_len\": 1024, \"text_dim\": 32}";

/* good_json with `from` replaced by `to`; parsed; the status, message in err. */
static wf_status_t parse_edit(const char *from, const char *to, unsigned flags, char *err,
                              size_t len, wf_model_cfg_t *cfg)
{
    char buf[2048];
    const char *at = strstr(good_json, from);
    if (!at) {
        CHECK(0, "edit '%s' not found", from);
        return WF_E_INTERNAL;
    }
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - good_json), good_json, to,
             at + strlen(from));
    return wf_model_cfg_parse(buf, strlen(buf), flags, "config.json", cfg, err, len);
}

static void test_config(int root)
{
    char err[512] = "";
    wf_model_cfg_t cfg;
    wf_status_t st = wf_model_cfg_load(root, "wan-tiny/config.json", WF_RESOLVE_AUTO, 0, &cfg,
                                       err, sizeof err);
    CHECK(st == WF_OK, "wan-tiny config: %s", err);
    if (st != WF_OK)
        return;
    CHECK(cfg.fam == &wf_wan_family && wf_family_by_name("wan") == &wf_wan_family &&
          wf_family_by_class("WanTransformer3DModel") == &wf_wan_family);
    const wf_wan_config_t *c = wf_wan_cfg(&cfg);
    CHECK(c->patch_size[0] == 1 && c->patch_size[1] == 2 && c->patch_size[2] == 2);
    CHECK(c->num_attention_heads == 2 && c->attention_head_dim == 16 && c->inner_dim == 32);
    CHECK(c->in_channels == 4 && c->out_channels == 4 && c->text_dim == 32);
    CHECK(c->freq_dim == 32 && c->ffn_dim == 64 && c->num_layers == 2);
    CHECK(c->cross_attn_norm && c->qk_norm && c->rope_max_seq_len == 1024);
    CHECK(fabsf(c->eps - 1e-6f) < 1e-12f);
    CHECK(c->patch_elems == 4 && c->rope_dims[0] == 8 && c->rope_dims[1] == 4 &&
          c->rope_dims[2] == 4, "rope dims %u %u %u", c->rope_dims[0], c->rope_dims[1],
          c->rope_dims[2]);
    char classes[256];
    wf_family_classes(classes, sizeof classes);
    CHECK(strstr(classes, "\"WanTransformer3DModel\"") != NULL, "classes: %s", classes);

    /* refusals, naming the field or the class */
    static const struct {
        const char *from, *to, *want;
    } bad[] = {
        { "WanTransformer3DModel", "WanVACETransformer3DModel", "not supported" },
        { "WanTransformer3DModel", "WanAnimateTransformer3DModel", "not supported" },
        { "\"eps\": 1e-06,", "\"eps\": 1e-06, \"window_size\": [-1, -1],", "unknown field" },
        { "\"attention_head_dim\": 16", "\"attention_head_dim\": 15", "even" },
        { "\"patch_size\": [1, 2, 2]", "\"patch_size\": [2, 2]", "'patch_size'" },
        { "\"qk_norm\": \"rms_norm_across_heads\"", "\"qk_norm\": \"rms_norm\"", "'qk_norm'" },
        { "\"freq_dim\": 32", "\"freq_dim\": 33", "freq_dim" },
        { ", \"text_dim\": 32", "", "missing field 'text_dim'" },
        { "\"eps\": 1e-06", "\"eps\": \"small\"", "'eps'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wf_model_cfg_t x;
        err[0] = '\0';
        st = parse_edit(bad[i].from, bad[i].to, 0, err, sizeof err, &x);
        CHECK(st == WF_E_BAD_FIELD && strstr(err, bad[i].want) != NULL,
              "edit %zu (%s): status %d, message '%s', wanted '%s'", i, bad[i].to, (int)st,
              err, bad[i].want);
    }
    /* qk_norm null, out_channels null and a missing field with diffusers' defaults */
    wf_model_cfg_t x;
    st = parse_edit("\"qk_norm\": \"rms_norm_across_heads\"", "\"qk_norm\": null", 0, err,
                    sizeof err, &x);
    CHECK(st == WF_OK && !wf_wan_cfg(&x)->qk_norm, "qk_norm null: %s", err);
    st = parse_edit("\"out_channels\": 4", "\"out_channels\": null", 0, err, sizeof err, &x);
    CHECK(st == WF_OK && wf_wan_cfg(&x)->out_channels == 4, "out_channels null: %s", err);
    st = parse_edit("\"text_dim\": 32", "\"freq_dim_unused\": 1", WF_CONFIG_DIFFUSERS_DEFAULTS,
                    err, sizeof err, &x);
    CHECK(st == WF_E_BAD_FIELD, "unknown field with defaults");
    st = parse_edit(", \"text_dim\": 32", "", WF_CONFIG_DIFFUSERS_DEFAULTS, err, sizeof err, &x);
    CHECK(st == WF_OK && wf_wan_cfg(&x)->text_dim == 4096, "text_dim default: %s", err);

    /* schema, plan, public config */
    wf_model_schema_t sc;
    wf_wan_family.schema(c, &sc);
    CHECK(sc.n_inputs == 4 && sc.n_outputs == 1);
    CHECK(strcmp(sc.inputs[0].name, "hidden_states") == 0 && sc.inputs[0].rank == 5 &&
          sc.inputs[0].dim[1].size == 4 && strcmp(sc.inputs[0].dim[2].sym, "F") == 0);
    CHECK(strcmp(sc.inputs[1].name, "timestep") == 0 && sc.inputs[1].rank == 1 &&
          sc.inputs[1].optional);
    CHECK(strcmp(sc.inputs[3].name, "timestep_tokens") == 0 && sc.inputs[3].rank == 2 &&
          sc.inputs[3].optional);
    CHECK(strcmp(sc.inputs[2].name, "encoder_hidden_states") == 0 &&
          sc.inputs[2].dim[2].size == 32);
    CHECK(strcmp(sc.outputs[0].name, "output") == 0 && sc.outputs[0].rank == 5 &&
          sc.outputs[0].dim[1].size == 4);
    wf_tp_plan_t plan;
    wf_wan_family.default_plan(c, &plan);
    CHECK(plan.n == 10 && wf_tp_plan_check(&plan, err, sizeof err) == WF_OK, "%s", err);
    wf_model_config_t pc;
    wf_wan_family.public_config(c, &pc);
    CHECK(pc.present && wf_model_config_get(&pc, "patch_size", 2, -1) == 2 &&
          wf_model_config_get(&pc, "num_layers", 0, -1) == 2 &&
          wf_model_config_get(&pc, "cross_attn_norm", 0, -1) == 1);
}

/* The checkpoint through the generic source: the tensor list (rank 5
 * and 3 tensors included), the host copy in f32. */
static wf_model_host_t *test_source(int root)
{
    char err[512] = "";
    wf_model_source_t *src = NULL;
    wf_model_host_t *h = NULL;
    uint32_t tp = 0;
    wf_status_t st = wf_model_source_open(root, "wan-tiny", false, NULL, &src, &tp, err,
                                          sizeof err);
    CHECK(st == WF_OK, "source: %s", err);
    if (st != WF_OK)
        return NULL;
    const wf_wan_config_t *c = wf_wan_cfg(wf_model_source_config(src));
    wf_tensor_spec_t *specs = NULL;
    size_t n = 0;
    CHECK(wf_wan_expected_tensors(c, &specs, &n, err, sizeof err) == WF_OK);
    uint64_t params = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t e = 1;
        for (int d = 0; d < specs[i].rank; d++)
            e *= (uint64_t)specs[i].shape[d];
        params += e;
    }
    /* scale_shift_table, patch_embedding (2), the condition embedder's 5
     * linears; per block its table, 8 linears, 4 q / k norms, norm2 (2)
     * and the feed-forward's 2 linears; proj_out */
    CHECK(n == 3 + 10 + 2 * (1 + 16 + 4 + 2 + 4) + 2, "tensors %zu", n);
    CHECK(wf_model_source_params(src) == params, "params %llu vs %llu",
          (unsigned long long)wf_model_source_params(src), (unsigned long long)params);
    free(specs);
    st = wf_model_source_read(src, NULL, NULL, &h, err, sizeof err);
    CHECK(st == WF_OK, "read: %s", err);
    wf_model_source_close(&src);
    if (st != WF_OK)
        return NULL;
    const wf_host_tensor_t *pe = wf_model_host_find(h, "patch_embedding.weight");
    CHECK(pe && pe->rank == 5 && pe->shape[0] == 32 && pe->shape[1] == 4 &&
          pe->shape[2] == 1 && pe->shape[3] == 2 && pe->shape[4] == 2);
    const wf_host_tensor_t *sst = wf_model_host_find(h, "blocks.1.scale_shift_table");
    CHECK(sst && sst->rank == 3 && sst->shape[1] == 6 && sst->shape[2] == 32);
    CHECK(wf_model_host_to_f32(h, err, sizeof err) == WF_OK, "%s", err);
    return h;
}

/* ---- the forward ------------------------------------------------------------ */

typedef struct io_t {
    const void *data;
    wf_tensor_desc_t d;
} io_t;

static bool io_get(const wf_safetensors_t *st, const char *name, uint32_t frame, io_t *r)
{
    memset(r, 0, sizeof *r);
    ptrdiff_t i = wf_safetensors_find(st, name);
    if (i < 0)
        return false;
    const wf_st_tensor_t *t = wf_safetensors_tensor(st, (size_t)i);
    r->data = wf_safetensors_data(st, (size_t)i);
    snprintf(r->d.name, sizeof r->d.name, "%s", name);
    r->d.dtype = t->dtype;
    r->d.rank = t->rank;
    for (int k = 0; k < t->rank; k++)
        r->d.shape[k] = t->shape[k];
    r->d.frame = frame;
    return wf_tensor_desc_finish(&r->d) == WF_OK;
}

/* One bound forward: the inputs of an io file under the schema's names,
 * bound to the model's schema, and diffusers' outputs. */
typedef struct fwd {
    wf_model_schema_t schema;
    uint32_t n;                       /* tensors found in the io file */
    wf_tensor_desc_t in[WF_SCHEMA_MAX_INPUTS];
    const void *in_data[WF_SCHEMA_MAX_INPUTS];
    wf_schema_binding_t bind;
    wf_tensor_desc_t out;
    float *ref, *ref64;               /* diffusers' f32 (or upcast) / f64 outputs */
    size_t nout;
} fwd_t;

/* The io file's inputs for h's schema; ref32 names diffusers' f32 output
 * ("output", or "output_f32" beside a bf16 one). */
static bool fwd_open(const wf_model_host_t *h, const wf_safetensors_t *io, const char *ref32,
                     fwd_t *f)
{
    char err[512];
    memset(f, 0, sizeof *f);
    h->cfg.fam->schema(h->cfg.b, &f->schema);
    for (uint32_t i = 0; i < f->schema.n_inputs; i++) {
        io_t t;
        if (!io_get(io, f->schema.inputs[i].name, f->n, &t))
            continue; /* an optional input the file does not give */
        f->in[f->n] = t.d;
        f->in_data[f->n++] = t.data;
    }
    io_t o, o64;
    if (!io_get(io, ref32, 0, &o) || !io_get(io, "output_f64", 0, &o64))
        return false;
    if (wf_schema_bind(&f->schema, "wan", f->in, f->n, &f->bind, err, sizeof err) != WF_OK ||
        wf_schema_output(&f->schema, 0, &f->bind, WF_DTYPE_F32, 0, &f->out, err, sizeof err) !=
            WF_OK) {
        CHECK(0, "bind: %s", err);
        return false;
    }
    CHECK(f->out.numel == o.d.numel && f->out.rank == 5, "output shape");
    f->nout = (size_t)o.d.numel;
    f->ref = malloc(f->nout * sizeof(float));
    f->ref64 = malloc(f->nout * sizeof(float));
    wf_convert_to_f32(f->ref, o.data, o.d.dtype, f->nout);
    wf_convert_to_f32(f->ref64, o64.data, o64.d.dtype, f->nout);
    return true;
}

/* The io as a rank sees it: the schema's inputs in order (NULL: an
 * optional one absent), data on the root only. */
static wf_fwd_io_t io_of(const fwd_t *f, const wf_tensor_desc_t *out, void *out_data, bool root)
{
    wf_fwd_io_t io;
    memset(&io, 0, sizeof io);
    io.bind = &f->bind;
    io.n_in = f->schema.n_inputs;
    for (uint32_t i = 0; i < io.n_in; i++) {
        int k = f->bind.in[i];
        io.in[i] = k >= 0 ? &f->in[k] : NULL;
        io.in_data[i] = k >= 0 && root ? f->in_data[k] : NULL;
    }
    io.n_out = 1;
    io.out[0] = out;
    io.out_data[0] = root ? out_data : NULL;
    return io;
}

typedef struct mrun {
    int T, R, U;
    bool dev;                    /* the stand-in device backend */
    bool alltoall;               /* the ring rotates one shard per step */
    const wf_family_run_t *run;
    const wf_model_host_t *host; /* each rank cuts its shard from it */
    const wf_tp_plan_t *plan;
    const fwd_t *f;
    wf_tensor_desc_t out;        /* the output's descriptor (its dtype) */
    void *out_data;              /* root's output */
    wf_comm_host_world_t *w;
} mrun_t;

typedef struct mrank {
    pthread_t tid;
    mrun_t *m;
    int rank;
    wf_status_t st;
    bool shard_ok;               /* shard built, its size as figured */
    bool guard_ok;               /* nothing written past the workspace */
    bool mem_back;               /* device: every byte given back */
} mrank_t;

#define GUARD 256

/* Rank `rank`'s tp / seq / ring / ulysses groups (NULL for degree 1). */
static bool rank_split(const mrun_t *m, int rank, wf_comm_t *world, wf_comm_t *sub[4],
                       wf_mesh_coords_t *co, wf_fwd_group_t *grp)
{
    wf_mesh_t mesh;
    wf_mesh_degrees_t deg = { .dp = 1, .ring = (uint32_t)m->R, .ulysses = (uint32_t)m->U,
                              .tp = (uint32_t)m->T };
    const wf_mesh_dim_t dims[4] = { WF_MESH_DIM_TP, WF_MESH_DIM_SEQ, WF_MESH_DIM_RING,
                                    WF_MESH_DIM_ULYSSES };
    if (wf_mesh_init(&mesh, &deg, m->T * m->R * m->U, NULL, 0) != WF_OK ||
        wf_mesh_coords(&mesh, rank, co) != WF_OK)
        return false;
    for (int i = 0; i < 4; i++) {
        int col, key;
        if (wf_mesh_color(&mesh, dims[i], rank, &col, &key) != WF_OK ||
            wf_comm_split(world, col, key, &sub[i]) != WF_OK)
            return false;
    }
    *grp = (wf_fwd_group_t){
        .tp = m->T > 1 ? sub[0] : NULL, .seq = m->R * m->U > 1 ? sub[1] : NULL,
        .ring = m->R > 1 ? sub[2] : NULL, .ulysses = m->U > 1 ? sub[3] : NULL,
        .tp_degree = m->T, .ring_degree = m->R, .ulysses_degree = m->U,
    };
    return true;
}

/* One rank: its backend context (the stand-in device's, with the host
 * comm behind comm_staged, or the CPU's), its own shard, a workspace full
 * of NaN (stale reads show) with a guard after it (CPU), the run. */
static void *rank_main(void *arg)
{
    mrank_t *t = arg;
    mrun_t *m = t->m;
    t->st = WF_E_INTERNAL;
    t->guard_ok = true;
    const wf_backend_ops_t *ops = m->dev ? wf_standin_dev_backend() : wf_backend_cpu();
    wf_comm_t *world = NULL, *inner = NULL, *sub[4] = { NULL, NULL, NULL, NULL };
    wf_backend_ctx_t *ctx = NULL;
    void *shard = NULL, *dws = NULL;
    unsigned char *ws = NULL, *hws = NULL;
    char err[512] = "";
    uint64_t total = 0, free0 = 0, free1 = 0;
    if (ops->ctx_new(t->rank, 0, &ctx) != WF_OK)
        return NULL;
    if (m->dev)
        ops->memory_info(ctx, &total, &free0);
    if (wf_comm_host_init(m->w, t->rank, m->dev ? &inner : &world) != WF_OK ||
        (m->dev && wf_comm_staged_wrap(inner, ops, ctx, &world) != WF_OK))
        goto out;
    wf_mesh_coords_t co;
    wf_fwd_group_t grp;
    if (!rank_split(m, t->rank, world, sub, &co, &grp))
        goto out;
    const void *cfg = m->host->cfg.b;
    wf_status_t bst = m->run->shard_build(m->host, m->plan, m->T, (int)co.tp, ops, ctx, &shard,
                                          err, sizeof err);
    uint64_t want = m->run->shard_bytes(cfg, m->plan, m->T, m->dev, m->host->dtype);
    const wf_shard_mem_t *mem = shard ? m->run->shard_mem(shard) : NULL;
    t->shard_ok = bst == WF_OK && mem && mem->bytes == want && (mem->dev != NULL) == m->dev;
    if (!t->shard_ok) {
        fprintf(stderr, "rank %d: shard: %s (figure %llu)\n", t->rank, err,
                (unsigned long long)want);
        wf_comm_abort(world);
        goto out;
    }
    wf_fwd_io_t io = io_of(m->f, &m->out, m->out_data, t->rank == 0);
    io.alltoall = m->alltoall;
    size_t host = 1;
    size_t bytes = m->run->workspace(cfg, &io, m->T, m->R, m->U, ops, &host);
    if (bytes == 0 || bytes == SIZE_MAX || (m->dev ? host == SIZE_MAX : host != 0)) {
        t->st = WF_E_BAD_ARGUMENT;
        wf_comm_abort(world);
        goto out;
    }
    if (m->dev) {
        if (!(hws = aligned_alloc(64, (host + 63) & ~(size_t)63 ? (host + 63) & ~(size_t)63
                                                                : 64)) ||
            ops->dev_alloc(ctx, bytes, &dws) != WF_OK ||
            ops->fill_f32(ctx, dws, NAN, bytes / sizeof(float)) != WF_OK) {
            wf_comm_abort(world);
            goto out;
        }
        memset(hws, 0xff, host);
        t->st = m->run->run(shard, &io, &grp, ops, ctx, dws, bytes, hws, host);
        wf_status_t ss = ops->synchronize(ctx);
        ops->dev_reset(ctx);
        if (t->st == WF_OK)
            t->st = ss;
    } else {
        size_t alloc = (bytes + GUARD + 63) & ~(size_t)63;
        ws = aligned_alloc(64, alloc);
        memset(ws, 0xff, bytes);
        memset(ws + bytes, 0xa5, alloc - bytes);
        t->st = m->run->run(shard, &io, &grp, ops, ctx, ws, bytes, NULL, 0);
        for (size_t i = bytes; i < alloc; i++)
            t->guard_ok &= ws[i] == 0xa5;
    }
out:
    if (shard)
        m->run->shard_free(&shard);
    if (m->dev && ctx) {
        ops->memory_info(ctx, &total, &free1);
        t->mem_back = free1 == free0 && free0 == total;
    }
    free(ws);
    free(hws);
    for (int i = 0; i < 4; i++)
        wf_comm_destroy(&sub[i]);
    wf_comm_destroy(&world);
    ops->ctx_destroy(&ctx);
    return NULL;
}

/* max |a - b| / max |b|. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e))
            e = d;
        m = fmax(m, fabs((double)b[i]));
    }
    return e / (m > 0 ? m : 1);
}

/* The forward on mesh (T, R, U) on the CPU or the stand-in device (dev)
 * with out dtype dt, each rank cutting its shard from h with plan p; the
 * root's output in f32 into got. */
static bool run_mesh(const wf_family_run_t *run, const wf_model_host_t *h,
                         const wf_tp_plan_t *p, const fwd_t *f, int T, int R, int U, bool dev,
                         bool alltoall, wf_dtype_t dt, float *got)
{
    const int N = T * R * U;
    size_t es = wf_dtype_size(dt);
    unsigned char *ob = malloc(f->nout * es + 1);
    memset(ob, 0x5a, f->nout * es + 1);
    mrun_t m = { .T = T, .R = R, .U = U, .dev = dev, .alltoall = alltoall, .run = run,
                 .host = h, .plan = p, .f = f, .out = f->out,
                 .out_data = ob + 1 /* any alignment */ };
    m.out.dtype = dt;
    CHECK(wf_comm_host_world_new(N, &m.w) == WF_OK, "world");
    mrank_t *t = calloc((size_t)N, sizeof *t);
    for (int i = 0; i < N; i++) {
        t[i] = (mrank_t){ .m = &m, .rank = i };
        CHECK(pthread_create(&t[i].tid, NULL, rank_main, &t[i]) == 0, "thread");
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i].tid, NULL);
    wf_comm_host_world_unref(&m.w);
    bool ok = true;
    for (int i = 0; i < N; i++) {
        CHECK(t[i].shard_ok, "mesh (tp %d, ring %d, ulysses %d%s) rank %d: shard", T, R, U,
              dev ? ", device" : "", i);
        CHECK(t[i].st == WF_OK, "mesh (tp %d, ring %d, ulysses %d%s) rank %d: run returned %d",
              T, R, U, dev ? ", device" : "", i, (int)t[i].st);
        CHECK(t[i].guard_ok, "rank %d wrote past its workspace", i);
        CHECK(!dev || t[i].mem_back, "rank %d: device memory not all given back", i);
        ok &= t[i].st == WF_OK;
    }
    CHECK(ob[0] == 0x5a, "wrote before the output");
    if (ok)
        wf_convert_to_f32(got, ob + 1, dt, f->nout);
    free(t);
    free(ob);
    return ok;
}

static void test_forward(const wf_model_host_t *h, const wf_safetensors_t *io)
{
    char err[512] = "";
    const wf_family_run_t *run = wf_family_run_of(h->cfg.fam);
    CHECK(run != NULL, "no daemon half for wan");
    if (!run)
        return;
    const void *cfg = h->cfg.b;
    wf_tp_plan_t plan;
    h->cfg.fam->default_plan(cfg, &plan);

    /* plan check: tp 1 and 2 pass; tp 4 does not divide the 2 heads */
    CHECK(run->plan_check(cfg, &plan, 1, false, err, sizeof err) == WF_OK, "plan: %s", err);
    CHECK(run->plan_check(cfg, &plan, 2, false, err, sizeof err) == WF_OK, "tp 2: %s", err);
    CHECK(run->plan_check(cfg, &plan, 4, true, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "must divide the number of attention heads"), "tp 4: %s", err);
    wf_tp_plan_t bad = plan;
    snprintf(bad.rules[bad.n].glob, sizeof bad.rules[0].glob, "blocks.*.attn1.norm_q");
    bad.rules[bad.n++].style = WF_TP_COLWISE;
    CHECK(run->plan_check(cfg, &bad, 1, true, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "not a linear layer"), "norm rule: %s", err);
    bad = plan;
    snprintf(bad.rules[bad.n].glob, sizeof bad.rules[0].glob, "blocks.*.attn3.to_q");
    bad.rules[bad.n++].style = WF_TP_COLWISE;
    CHECK(run->plan_check(cfg, &bad, 1, false, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "matches no linear layer"), "unmatched rule: %s", err);
    CHECK(run->backend_check(cfg, wf_backend_cpu(), err, sizeof err) == WF_OK, "%s", err);

    CHECK(run->shard_bytes(cfg, &plan, 1, false, WF_DTYPE_F32) == h->params * 4, "shard bytes");
    CHECK(run->shard_bytes(cfg, &plan, 2, false, WF_DTYPE_F32) < h->params * 4,
          "a tp 2 shard holds less than the model");

    fwd_t f;
    if (!fwd_open(h, io, "output", &f)) {
        CHECK(0, "io file");
        return;
    }
    /* forward check refusals */
    wf_fwd_io_t x = io_of(&f, &f.out, NULL, false);
    CHECK(run->forward_check(cfg, &x, 1, 1, 1, err, sizeof err) == WF_OK, "%s", err);
    CHECK(run->forward_check(cfg, &x, 2, 1, 1, err, sizeof err) == WF_OK, "tp 2: %s", err);
    CHECK(run->forward_check(cfg, &x, 4, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "must divide the number of attention heads"), "tp 4: %s", err);
    CHECK(run->forward_check(cfg, &x, 1, 5, 1, err, sizeof err) == WF_OK,
          "12 tokens over 5 (the ring's anything mode): %s", err);
    wf_tensor_desc_t odd = f.in[0];
    odd.shape[3] = 5;
    x.in[0] = &odd;
    CHECK(run->forward_check(cfg, &x, 1, 1, 1, err, sizeof err) == WF_E_BAD_SHAPE &&
          strstr(err, "patch_size[1]"), "odd height: %s", err);
    odd.shape[3] = 2 * 1025;
    CHECK(run->forward_check(cfg, &x, 1, 1, 1, err, sizeof err) == WF_E_BAD_SHAPE &&
          strstr(err, "rope_max_seq_len"), "tall: %s", err);
    /* bf16 output: the f32 result rounded once */
    float *got = malloc(f.nout * sizeof(float));
    if (got && run_mesh(run, h, &plan, &f, 1, 2, 1, false, false, WF_DTYPE_BF16, got)) {
        double e = rel_err(got, f.ref64, f.nout);
        CHECK(e <= 8e-3, "bf16 output: %.3g", e);
        printf("wan-tiny, bf16 output on ring 2: rel err vs diffusers f64 %.3g\n", e);
    }
    free(got);
    free(f.ref);
    free(f.ref64);
}

/* Every mesh: (tp, ring, ulysses). Uneven token shards (12 or 18 tokens
 * over 5, 4, or 3 x 2 with tp) and head counts ulysses does not divide
 * (2 heads, 1 per tp rank, over 3 or 2) take the anything modes. */
static const struct {
    int T, R, U;
} meshes[] = {
    { 1, 1, 1 }, { 1, 2, 1 }, { 1, 1, 2 }, { 1, 2, 2 }, { 1, 3, 1 }, { 1, 4, 1 },
    { 1, 5, 1 }, { 1, 1, 3 }, { 2, 1, 1 }, { 2, 2, 1 }, { 2, 1, 2 }, { 2, 3, 2 },
};

/* Fixture `name` on every mesh, on the CPU (host copy h, f32) and on the
 * stand-in device (host copy hd, the checkpoint's dtype, as a device
 * registry keeps it: bf16 weights stay bf16 there), against diffusers'
 * float64 and float32 runs (a bf16 checkpoint's: upcast to f32).
 * Tolerances (max abs error / max |ref|): 1e-5 vs float64 (f32 GEMMs and
 * attention, norm statistics in double, 2 blocks) and 2e-5 vs float32
 * (both sides' f32 errors). bf16 weights on the device: those plus K u
 * (dev_bf16_tol). */
/* The device path of a bf16 model rounds to bf16 the activations its
 * GEMMs and its attentions read (daemon/models/wan/wan_forward.c; the
 * stand-in where a GPU does); the tolerance of those roundings is K u, u
 * = 2^-8, K the tensors rounded on the way to the output: the patch
 * embedding's x (1), the time path's linears' x (3), the text embedder's
 * (2), the final nx (1), and per block the self-attention's nx, q / k / v,
 * P (rounded before P V) and output (4), the feed-forward's nx and hidden
 * (2), and the cross-attention's: without an image, norm2's nx (to_q's
 * x), the text (to_k / to_v's x), q / k / v after the norms, P and the
 * attention's output (to_out's x): 5; with an image it stays f32 and its
 * linears round their x (to_q, to_k / to_v, add_k / add_v, to_out: 4),
 * plus the image embedder's 2 linears' x. First order: each rounding moves its
 * tensor by at most u relative and the ops after it are taken not to
 * amplify it (tests/fixtures/README.md). */
static double dev_bf16_tol(const wf_wan_config_t *c)
{
    double L = (double)c->num_layers,
           K = c->image_dim ? 7.0 + 10.0 * L + 2.0 : 7.0 + 11.0 * L;
    return K * 0x1p-8;
}

static void test_meshes(const char *name, const wf_model_host_t *h, const wf_model_host_t *hd,
                        const fwd_t *f)
{
    const wf_family_run_t *run = wf_family_run_of(h->cfg.fam);
    wf_tp_plan_t plan;
    h->cfg.fam->default_plan(h->cfg.b, &plan);
    const double tdev = dev_bf16_tol(wf_wan_cfg(&h->cfg));
    float *got = malloc(f->nout * sizeof(float));
    double worst[2] = { 0, 0 };
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        /* a ring runs with both rotations: gathering K / V, and one
         * shard per step (rotate_method alltoall) */
        for (int d = 0; d < (meshes[i].R > 1 ? 4 : 2); d++) {
            int T = meshes[i].T, R = meshes[i].R, U = meshes[i].U;
            bool dev = d & 1, a2a = d >= 2;
            if (!run_mesh(run, dev ? hd : h, &plan, f, T, R, U, dev, a2a, WF_DTYPE_F32, got))
                continue;
            const char *how = dev ? (a2a ? " (device, alltoall)" : " (device)")
                                  : (a2a ? " (alltoall)" : "");
            bool bf16 = dev && hd != h;
            double e64 = rel_err(got, f->ref64, f->nout), e32 = rel_err(got, f->ref, f->nout);
            CHECK(e64 <= 1e-5 + (bf16 ? tdev : 0), "%s tp %d ring %d ulysses %d%s: %.3g vs "
                  "diffusers f64", name, T, R, U, how, e64);
            CHECK(e32 <= 2e-5 + (bf16 ? tdev : 0), "%s tp %d ring %d ulysses %d%s: %.3g vs "
                  "diffusers f32", name, T, R, U, how, e32);
            worst[dev] = e64 > worst[dev] ? e64 : worst[dev];
        }
    }
    /* projection groups that do not fuse (a rowwise attn1.to_k and
     * attn2.to_k, a replicated attn1.to_v and attn2.to_v, a rowwise
     * add_v_proj: each member on its own, converted to the head split;
     * on a bf16 device the self-attention's v and the cross-attention's
     * normed k and v converted to bf16 on the way), the cross-attention's
     * to_q rowwise and to_out colwise (their inputs, bf16 on a bf16
     * device, converted to the layouts they take), and the stand-in's
     * fused shards checked against their figure: tp 2, with and without
     * a seq dim */
    wf_tp_plan_t odd = plan;
    static const struct {
        const char *glob;
        wf_tp_style_t style;
    } over[] = {
        { "blocks.*.attn1.to_k", WF_TP_ROWWISE },
        { "blocks.*.attn2.to_k", WF_TP_ROWWISE },
        { "blocks.*.attn2.to_q", WF_TP_ROWWISE },
        { "blocks.*.attn2.to_out.0", WF_TP_COLWISE },
        { "blocks.*.attn1.to_v", WF_TP_REPLICATED },
        { "blocks.*.attn2.to_v", WF_TP_REPLICATED },
        { "blocks.*.attn2.add_v_proj", WF_TP_ROWWISE },
    };
    for (size_t k = 0; k < sizeof over / sizeof over[0]; k++)
        for (uint32_t r = 0; r < odd.n; r++)
            if (strcmp(odd.rules[r].glob, over[k].glob) == 0)
                odd.rules[r].style = over[k].style;
    for (int d = 0; d < 4; d++) {
        bool dev = d & 1;
        int U = d >= 2 ? 2 : 1;
        if (!run_mesh(run, dev ? hd : h, &odd, f, 2, 1, U, dev, false, WF_DTYPE_F32, got))
            continue;
        bool bf16 = dev && hd != h;
        double e64 = rel_err(got, f->ref64, f->nout);
        CHECK(e64 <= 1e-5 + (bf16 ? tdev : 0), "%s unfused groups, tp 2 ulysses %d%s: %.3g vs "
              "diffusers f64", name, U, dev ? " (device)" : "", e64);
        worst[dev] = e64 > worst[dev] ? e64 : worst[dev];
    }
    printf("%s: %zu meshes (rings with both rotations), worst rel err vs diffusers f64 "
           "%.3g on the CPU, %.3g on the stand-in device%s\n", name,
           sizeof meshes / sizeof meshes[0], worst[0], worst[1],
           hd != h ? " (bf16 weights and activations there)" : "");
    if (hd != h)
        printf("%s: the device path's tolerance K u = %.3g (1e-5 + that vs f64)\n", name, tdev);
    free(got);
}

/* A fixture's checkpoint read through the generic source; f32: the host
 * copy converted to f32, as the CPU registry does. */
static wf_model_host_t *read_host(int root, const char *dir, bool f32)
{
    char err[512] = "";
    wf_model_source_t *src = NULL;
    wf_model_host_t *h = NULL;
    uint32_t tp = 0;
    wf_status_t st = wf_model_source_open(root, dir, false, NULL, &src, &tp, err, sizeof err);
    if (st == WF_OK)
        st = wf_model_source_read(src, NULL, NULL, &h, err, sizeof err);
    wf_model_source_close(&src);
    if (st == WF_OK && f32)
        st = wf_model_host_to_f32(h, err, sizeof err);
    CHECK(st == WF_OK, "%s: %s", dir, err);
    if (st != WF_OK)
        wf_model_host_free(&h);
    return h;
}

/* h's f32 tensors rounded to bf16 (round to nearest even), each into a
 * buffer of its own, as a bf16 checkpoint's host copy holds them; the
 * slab's bytes stay where they are (freed with it). */
static bool host_to_bf16(wf_model_host_t *h)
{
    const unsigned char *lo = h->slab, *hi = lo ? lo + h->slab_bytes : NULL;
    uint64_t bytes = 0;
    for (size_t i = 0; i < h->n; i++) {
        wf_host_tensor_t *t = &h->t[i];
        if (t->dtype != WF_DTYPE_F32)
            return false;
        size_t n = (size_t)(t->nbytes / sizeof(float));
        void *b = aligned_alloc(64, (n * 2 + 63) / 64 * 64 + 64);
        if (!b)
            return false;
        wf_convert_from_f32(b, WF_DTYPE_BF16, t->data, n);
        const unsigned char *d = t->data;
        if (!lo || d < lo || d >= hi)
            free(t->data);
        t->data = b;
        t->nbytes = n * 2;
        t->dtype = WF_DTYPE_BF16;
        bytes += t->nbytes;
    }
    h->dtype = WF_DTYPE_BF16;
    h->bytes = bytes;
    return true;
}

/* An image-conditioned model with bf16 weights on the device, which no
 * diffusers fixture holds: the image fixture's weights rounded to bf16.
 * There the cross-attention stays f32 (wan_forward.c xattn_dtype) beside
 * bf16 self-attention and feed-forward activations. Reference: the CPU
 * path of the same rounded weights (f32 activations), which the device
 * path must meet within K u (dev_bf16_tol), on meshes with tp, ring and
 * ulysses. */
static void test_image_bf16(int root, const char *dir, const wf_safetensors_t *io)
{
    wf_model_host_t *hb = read_host(root, dir, false), *hr = read_host(root, dir, false);
    char err[512] = "";
    bool ok = hb && hr && host_to_bf16(hb) && host_to_bf16(hr) &&
              wf_model_host_to_f32(hr, err, sizeof err) == WF_OK;
    CHECK(ok, "%s rounded to bf16: %s", dir, err);
    fwd_t f;
    if (ok && fwd_open(hr, io, "output", &f)) {
        const wf_family_run_t *run = wf_family_run_of(hr->cfg.fam);
        wf_tp_plan_t plan;
        hr->cfg.fam->default_plan(hr->cfg.b, &plan);
        const double tdev = dev_bf16_tol(wf_wan_cfg(&hr->cfg));
        float *cpu = malloc(f.nout * sizeof(float)), *got = malloc(f.nout * sizeof(float));
        static const int mesh[][3] = { { 1, 1, 1 }, { 2, 1, 1 }, { 1, 2, 1 }, { 2, 1, 2 } };
        double worst = 0;
        if (run_mesh(run, hr, &plan, &f, 1, 1, 1, false, false, WF_DTYPE_F32, cpu)) {
            for (size_t i = 0; i < sizeof mesh / sizeof mesh[0]; i++) {
                const int T = mesh[i][0], R = mesh[i][1], U = mesh[i][2];
                if (!run_mesh(run, hb, &plan, &f, T, R, U, true, false, WF_DTYPE_F32, got))
                    continue;
                double e = rel_err(got, cpu, f.nout);
                CHECK(e <= tdev, "%s bf16 weights, tp %d ring %d ulysses %d (device): %.3g vs "
                      "the CPU path", dir, T, R, U, e);
                worst = e > worst ? e : worst;
            }
            printf("%s with bf16 weights: %zu device meshes, worst rel err vs the CPU path of "
                   "the same weights %.3g (K u = %.3g; f32 cross-attention)\n", dir,
                   sizeof mesh / sizeof mesh[0], worst, tdev);
        }
        free(cpu);
        free(got);
        free(f.ref);
        free(f.ref64);
    }
    wf_model_host_free(&hb);
    wf_model_host_free(&hr);
}

/* The per-token timestep's checks (TI2V): exactly one of timestep and
 * timestep_tokens, and one timestep per video token. */
static void test_timestep_inputs(const wf_model_host_t *h, const fwd_t *f)
{
    char err[512] = "";
    const wf_family_run_t *run = wf_family_run_of(h->cfg.fam);
    wf_fwd_io_t x = io_of(f, &f->out, NULL, false);
    CHECK(x.in[3] && !x.in[1], "the TI2V fixture gives timestep_tokens only");
    CHECK(run->forward_check(h->cfg.b, &x, 1, 2, 1, err, sizeof err) == WF_OK, "%s", err);
    wf_tensor_desc_t ts = *x.in[3];
    ts.rank = 1;
    x.in[1] = &ts;
    CHECK(run->forward_check(h->cfg.b, &x, 1, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "exactly one"), "both: %s", err);
    x.in[1] = NULL;
    const wf_tensor_desc_t *tt = x.in[3];
    x.in[3] = NULL;
    CHECK(run->forward_check(h->cfg.b, &x, 1, 1, 1, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "neither"), "neither: %s", err);
    wf_tensor_desc_t short_tt = *tt;
    short_tt.shape[1] -= 1;
    x.in[3] = &short_tt;
    CHECK(run->forward_check(h->cfg.b, &x, 1, 1, 1, err, sizeof err) == WF_E_BAD_SHAPE &&
          strstr(err, "timesteps per sample"), "17 timesteps: %s", err);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    wf_backend_ctx_t *ctx = NULL; /* sets OpenBLAS to one thread up front */
    wf_backend_cpu()->ctx_new(0, 0, &ctx);
    wf_backend_cpu()->ctx_destroy(&ctx);
    char err[512];
    int root = -1;
    if (wf_model_root_open(argv[1], &root, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_config(root);
    wf_model_host_t *h = test_source(root);
    wf_safetensors_t *io = NULL;
    if (wf_safetensors_open(root, "io-wan-tiny-f32.safetensors", NULL, &io, err, sizeof err) !=
        WF_OK)
        CHECK(0, "io: %s", err);
    if (h && io)
        test_forward(h, io);
    wf_safetensors_close(&io);
    wf_model_host_free(&h);

    /* every fixture on every mesh */
    static const struct {
        const char *dir, *io, *ref32;
    } fx[] = {
        { "wan-tiny", "io-wan-tiny-f32.safetensors", "output" },
        { "wan-tiny-i2v", "io-wan-tiny-i2v-f32.safetensors", "output" },
        { "wan-tiny-flf2v", "io-wan-tiny-flf2v-f32.safetensors", "output" },
        { "wan-tiny-ti2v", "io-wan-tiny-ti2v-f32.safetensors", "output" },
        { "wan-tiny-bf16", "io-wan-tiny-bf16.safetensors", "output_f32" },
    };
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        wf_model_host_t *hc = read_host(root, fx[i].dir, true);
        wf_model_host_t *hd = hc && hc->dtype != WF_DTYPE_F32 ? NULL : hc;
        wf_model_host_t *raw = read_host(root, fx[i].dir, false);
        if (raw && raw->dtype != WF_DTYPE_F32)
            hd = raw;
        fwd_t f;
        io = NULL;
        if (wf_safetensors_open(root, fx[i].io, NULL, &io, err, sizeof err) != WF_OK)
            CHECK(0, "%s: %s", fx[i].io, err);
        if (hc && hd && io && fwd_open(hc, io, fx[i].ref32, &f)) {
            test_meshes(fx[i].dir, hc, hd, &f);
            if (strcmp(fx[i].dir, "wan-tiny-ti2v") == 0)
                test_timestep_inputs(hc, &f);
            if (strcmp(fx[i].dir, "wan-tiny-i2v") == 0)
                test_image_bf16(root, fx[i].dir, io);
            free(f.ref);
            free(f.ref64);
        } else {
            CHECK(0, "%s: fixture", fx[i].dir);
        }
        wf_safetensors_close(&io);
        wf_model_host_free(&raw);
        wf_model_host_free(&hc);
    }
    close(root);
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
