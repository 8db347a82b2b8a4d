/* flux_forward.c — diffusers' FluxTransformer2DModel forward on one rank
 * of a tp x ring x ulysses mesh: the plan check, shards cut from the host
 * copy, the workspace layout, the layers (f32, OpenBLAS sgemm), the
 * activation layouts over tp and the sequence split over ring x ulysses.
 * See flux_forward.h for the contract.
 *
 * Names (one rank): T tp ranks (this one t), P = R * U seq ranks (this one
 * i), C = inner_dim, H heads of D, M = mlp_hidden_dim, OC = p^2 *
 * out_channels. Lt = S_txt / P and Li = S_img / P tokens of each stream on
 * this rank, L = Lt + Li; Nt = B * Lt, Ni = B * Li, N = Nt + Ni rows.
 *
 * Stream order. The residual stream is one (N, C) buffer S: the text rows
 * of every batch (b-major), then the image rows. Double blocks work on its
 * two halves with their own weights, single blocks on all of it; only the
 * attention sees the joint order (B, L) — each batch's [text piece, image
 * piece], which is what diffusers' cat([encoder, hidden]) is on one rank —
 * and pack() / unpack() move rows between the two orders. The RoPE table
 * is built from this rank's ids pieces in that joint order.
 *
 * Layouts over tp (lay_t). An activation's columns are either full on
 * every rank, or split: the full width cut into blocks, each block split
 * evenly, rank r holding piece r of every block in block order (what a
 * colwise / packed_colwise linear emits, and what a rowwise /
 * packed_rowwise linear takes). convert() turns any layout into any
 * other: a local slice from full, a copy when every rank's pieces already
 * agree, else an all-gather over tp and a column reorder. The decision
 * depends on the layouts only, never on the rank, so every tp rank enters
 * the same collectives. The attention runs on the heads of the q / k / v
 * projections' common split layout, or on every head when they differ.
 *
 * Workspace. One fixed list of regions (ws_layout), computed alike by
 * wf_flux_forward_workspace and the run. Its widths are the full ones, so
 * that one figure serves every plan (the workspace call has no plan).
 *
 * Not here: logging, allocation during a run, device memory (the daemon
 * runs forward jobs on the CPU backend; a backend on device memory gets
 * its attention through cp_attention's staging).
 */
#include "flux_forward.h"
#include "base/szcheck.h"

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/cp_attention.h"
#include "errf.h"
#include "tensor.h"

/* Epsilon of every LayerNorm and RMSNorm of FLUX (diffusers' eps=1e-6). */
#define NORM_EPS 1e-6
/* RoPE base (FluxPosEmbed(theta=10000)). */
#define ROPE_THETA 10000.0
/* Largest mesh the forward accepts along one dim (comm_host's world). */
#define MAX_DEGREE 65536
/* Largest rows of one GEMM (cblas takes int). */
#define MAX_ROWS ((int64_t)INT32_MAX)

/* ---- small helpers ------------------------------------------------------ */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static bool dtype_ok(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 || dt == WF_DTYPE_F16 || dt == WF_DTYPE_BF16;
}

static size_t es_of(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4u : 2u; }

/* ---- the modules of a config ------------------------------------------- */

/* What a visited module is. */
typedef enum tkind {
    K_LINEAR = 0, /* a linear layer */
    K_QKV = 1,    /* a query / key / value projection (its heads must stay whole) */
    K_NORM = 2    /* an RMSNorm weight [D] (never sharded) */
} tkind_t;

/* Called once per module, in state_dict order. `module` is diffusers'
 * module name (the tensor names are module + ".weight" / ".bias"). With a
 * shard, `lin` (linear) or `norm` (norm weight) point at its slot. */
typedef wf_status_t (*visit_fn)(void *arg, const char *module, tkind_t kind,
                                int64_t out, int64_t in, wf_flux_linear_t *lin,
                                float **norm);

/* Every module of a model with config cfg; s may be NULL (names only).
 * Stops at the first error. */
static wf_status_t walk(const wf_flux_config_t *cfg, wf_flux_shard_t *s,
                        visit_fn fn, void *arg)
{
    const int64_t C = cfg->inner_dim, D = cfg->attention_head_dim;
    const int64_t M = cfg->mlp_hidden_dim, TC = WF_FLUX_TIMESTEP_CHANNELS;
    const int64_t OC = (int64_t)cfg->patch_size * cfg->patch_size * cfg->out_channels;
    char n[WF_FLUX_TENSOR_NAME_MAX];
    wf_status_t st;
#define LIN(field, kind, out, in, ...)                                        \
    do {                                                                      \
        snprintf(n, sizeof n, __VA_ARGS__);                                   \
        st = fn(arg, n, kind, out, in, s ? &s->field : NULL, NULL);           \
        if (st != WF_OK)                                                      \
            return st;                                                        \
    } while (0)
#define NORM(field, ...)                                                      \
    do {                                                                      \
        snprintf(n, sizeof n, __VA_ARGS__);                                   \
        st = fn(arg, n, K_NORM, D, 0, NULL, s ? &s->field : NULL);            \
        if (st != WF_OK)                                                      \
            return st;                                                        \
    } while (0)
    LIN(time_l1, K_LINEAR, C, TC, "time_text_embed.timestep_embedder.linear_1");
    LIN(time_l2, K_LINEAR, C, C, "time_text_embed.timestep_embedder.linear_2");
    if (cfg->guidance_embeds) {
        LIN(guid_l1, K_LINEAR, C, TC, "time_text_embed.guidance_embedder.linear_1");
        LIN(guid_l2, K_LINEAR, C, C, "time_text_embed.guidance_embedder.linear_2");
    }
    LIN(text_l1, K_LINEAR, C, cfg->pooled_projection_dim, "time_text_embed.text_embedder.linear_1");
    LIN(text_l2, K_LINEAR, C, C, "time_text_embed.text_embedder.linear_2");
    LIN(context_embedder, K_LINEAR, C, cfg->joint_attention_dim, "context_embedder");
    LIN(x_embedder, K_LINEAR, C, cfg->in_channels, "x_embedder");
    for (uint32_t b = 0; b < cfg->num_layers; b++) {
        const char *p = "transformer_blocks";
        LIN(dbl[b].norm1, K_LINEAR, 6 * C, C, "%s.%" PRIu32 ".norm1.linear", p, b);
        LIN(dbl[b].norm1_context, K_LINEAR, 6 * C, C, "%s.%" PRIu32 ".norm1_context.linear", p, b);
        NORM(dbl[b].norm_q, "%s.%" PRIu32 ".attn.norm_q", p, b);
        NORM(dbl[b].norm_k, "%s.%" PRIu32 ".attn.norm_k", p, b);
        LIN(dbl[b].to_q, K_QKV, C, C, "%s.%" PRIu32 ".attn.to_q", p, b);
        LIN(dbl[b].to_k, K_QKV, C, C, "%s.%" PRIu32 ".attn.to_k", p, b);
        LIN(dbl[b].to_v, K_QKV, C, C, "%s.%" PRIu32 ".attn.to_v", p, b);
        LIN(dbl[b].to_out, K_LINEAR, C, C, "%s.%" PRIu32 ".attn.to_out.0", p, b);
        NORM(dbl[b].norm_added_q, "%s.%" PRIu32 ".attn.norm_added_q", p, b);
        NORM(dbl[b].norm_added_k, "%s.%" PRIu32 ".attn.norm_added_k", p, b);
        LIN(dbl[b].add_q, K_QKV, C, C, "%s.%" PRIu32 ".attn.add_q_proj", p, b);
        LIN(dbl[b].add_k, K_QKV, C, C, "%s.%" PRIu32 ".attn.add_k_proj", p, b);
        LIN(dbl[b].add_v, K_QKV, C, C, "%s.%" PRIu32 ".attn.add_v_proj", p, b);
        LIN(dbl[b].to_add_out, K_LINEAR, C, C, "%s.%" PRIu32 ".attn.to_add_out", p, b);
        LIN(dbl[b].ff0, K_LINEAR, M, C, "%s.%" PRIu32 ".ff.net.0.proj", p, b);
        LIN(dbl[b].ff2, K_LINEAR, C, M, "%s.%" PRIu32 ".ff.net.2", p, b);
        LIN(dbl[b].ffc0, K_LINEAR, M, C, "%s.%" PRIu32 ".ff_context.net.0.proj", p, b);
        LIN(dbl[b].ffc2, K_LINEAR, C, M, "%s.%" PRIu32 ".ff_context.net.2", p, b);
    }
    for (uint32_t b = 0; b < cfg->num_single_layers; b++) {
        const char *p = "single_transformer_blocks";
        LIN(sgl[b].norm, K_LINEAR, 3 * C, C, "%s.%" PRIu32 ".norm.linear", p, b);
        LIN(sgl[b].proj_mlp, K_LINEAR, M, C, "%s.%" PRIu32 ".proj_mlp", p, b);
        LIN(sgl[b].proj_out, K_LINEAR, C, C + M, "%s.%" PRIu32 ".proj_out", p, b);
        NORM(sgl[b].norm_q, "%s.%" PRIu32 ".attn.norm_q", p, b);
        NORM(sgl[b].norm_k, "%s.%" PRIu32 ".attn.norm_k", p, b);
        LIN(sgl[b].to_q, K_QKV, C, C, "%s.%" PRIu32 ".attn.to_q", p, b);
        LIN(sgl[b].to_k, K_QKV, C, C, "%s.%" PRIu32 ".attn.to_k", p, b);
        LIN(sgl[b].to_v, K_QKV, C, C, "%s.%" PRIu32 ".attn.to_v", p, b);
    }
    LIN(norm_out, K_LINEAR, 2 * C, C, "norm_out.linear");
    LIN(proj_out, K_LINEAR, OC, C, "proj_out");
#undef LIN
#undef NORM
    return WF_OK;
}

/* ---- plan check ----------------------------------------------------------- */

/* State of a plan check walk. */
typedef struct pcheck {
    const wf_flux_config_t *cfg; /* the model */
    const wf_tp_plan_t *plan;    /* the plan */
    int tp;                      /* ranks */
    bool matched[WF_TP_MAX_RULES]; /* rule matched a linear module */
    char *err;                   /* message buffer */
    size_t err_len;              /* its size */
} pcheck_t;

static wf_status_t pcheck_visit(void *arg, const char *module, tkind_t kind,
                                int64_t out, int64_t in, wf_flux_linear_t *lin,
                                float **norm)
{
    (void)lin;
    (void)norm;
    pcheck_t *pc = arg;
    const wf_tp_plan_t *plan = pc->plan;
    for (uint32_t r = 0; r < plan->n; r++) {
        if (!wf_tp_glob_match(plan->rules[r].glob, module))
            continue;
        if (kind == K_NORM)
            return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                                  "tp_plan rule '%s' matches '%s', a norm weight: only linear "
                                  "layers can be sharded (norm weights stay replicated)",
                                  plan->rules[r].glob, module);
        pc->matched[r] = true;
    }
    if (kind == K_NORM)
        return WF_OK;
    const int64_t D = pc->cfg->attention_head_dim, H = pc->cfg->num_attention_heads;
    int ri = wf_tp_plan_find(plan, module);
    wf_tp_style_t style = ri >= 0 ? plan->rules[ri].style : WF_TP_REPLICATED;
    bool splits_out = style == WF_TP_COLWISE || style == WF_TP_PACKED_COLWISE;
    /* diffusers checks the heads before it shards anything */
    if (kind == K_QKV && splits_out && H % pc->tp != 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                              "`tp_degree` (%d) must divide the number of attention heads "
                              "(%" PRId64 ").", pc->tp, H);
    wf_tp_place_t pl;
    if (wf_tp_place(plan, module, out, in, pc->tp, &pl, pc->err, pc->err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (kind == K_QKV && splits_out && pc->tp > 1) {
        int64_t start = 0;
        for (uint32_t b = 0; b < pl.n_blocks; b++) {
            int64_t piece = pl.block[b] / pc->tp;
            if (start % D != 0 || piece % D != 0)
                return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                                      "tp_plan cuts attention heads: '%s' would give each of "
                                      "%d tensor-parallel ranks pieces of %" PRId64 " rows, not "
                                      "whole heads of attention_head_dim %" PRId64,
                                      module, pc->tp, piece, D);
            start += pl.block[b];
        }
    }
    return WF_OK;
}

wf_status_t wf_flux_plan_check(const wf_flux_config_t *cfg,
                               const wf_tp_plan_t *plan, int tp,
                               bool allow_unmatched, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!cfg || !plan)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or plan");
    if (tp < 1 || tp > MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "tensor-parallel degree %d invalid (1..%d)", tp, MAX_DEGREE);
    if (wf_tp_plan_check(plan, err, err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    pcheck_t pc;
    memset(&pc, 0, sizeof pc);
    pc.cfg = cfg;
    pc.plan = plan;
    pc.tp = tp;
    pc.err = err;
    pc.err_len = err_len;
    wf_status_t st = walk(cfg, NULL, pcheck_visit, &pc);
    if (st != WF_OK)
        return st;
    if (!allow_unmatched)
        for (uint32_t r = 0; r < plan->n; r++)
            if (!pc.matched[r])
                return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                      "tp_plan rule '%s' matches no linear layer of this model",
                                      plan->rules[r].glob);
    if (err && err_len)
        err[0] = '\0';
    return WF_OK;
}

/* ---- shards ---------------------------------------------------------------- */

/* Sum of a shard's f32 elements, by walk. */
typedef struct pbytes {
    const wf_tp_plan_t *plan; /* the plan */
    int tp;                   /* ranks */
    uint64_t elems;           /* elements so far */
} pbytes_t;

static uint64_t bias_elems(const wf_tp_place_t *p)
{
    bool split = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    return (uint64_t)(split ? p->local_out : p->out);
}

static wf_status_t pbytes_visit(void *arg, const char *module, tkind_t kind,
                                int64_t out, int64_t in, wf_flux_linear_t *lin,
                                float **norm)
{
    (void)lin;
    (void)norm;
    pbytes_t *pb = arg;
    if (kind == K_NORM) {
        pb->elems += (uint64_t)out;
        return WF_OK;
    }
    wf_tp_place_t pl;
    if (wf_tp_place(pb->plan, module, out, in, pb->tp, &pl, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    pb->elems += (uint64_t)pl.local_out * (uint64_t)pl.local_in + bias_elems(&pl);
    return WF_OK;
}

uint64_t wf_flux_shard_bytes(const wf_flux_config_t *cfg,
                             const wf_tp_plan_t *plan, int tp)
{
    if (wf_flux_plan_check(cfg, plan, tp, true, NULL, 0) != WF_OK)
        return 0;
    pbytes_t pb = {plan, tp, 0};
    if (walk(cfg, NULL, pbytes_visit, &pb) != WF_OK)
        return 0;
    /* every rank's shard has the same size: all splits are even */
    return pb.elems * sizeof(float);
}

/* State of a shard build walk. */
typedef struct build {
    const wf_flux_host_t *host; /* the host copy */
    const wf_tp_plan_t *plan;   /* the plan */
    int tp, rank;               /* ranks, this one */
    wf_flux_shard_t *s;         /* the shard being cut */
    char *err;                  /* message buffer */
    size_t err_len;             /* its size */
} build_t;

/* n floats, 64-byte aligned; NULL when out of memory. */
static float *falloc(uint64_t n)
{
    if (n > SIZE_MAX / 8)
        return NULL;
    uint64_t bytes = (n * sizeof(float) + 63u) & ~(uint64_t)63u;
    return aligned_alloc(64, bytes ? (size_t)bytes : 64u);
}

/* Host tensor `name` with the given rank and shape, or NULL with a message. */
static const wf_flux_host_tensor_t *host_tensor(build_t *bd, const char *name, int rank,
                                                int64_t d0, int64_t d1, bool optional,
                                                wf_status_t *ret_st)
{
    const wf_flux_host_tensor_t *t = wf_flux_host_find(bd->host, name);
    *ret_st = WF_OK;
    if (!t) {
        if (!optional) {
            wf_errf_status(WF_E_MALFORMED, bd->err, bd->err_len,
                           "host copy lacks tensor '%s'", name);
            *ret_st = WF_E_MALFORMED;
        }
        return NULL;
    }
    if (t->rank != rank || t->shape[0] != d0 || (rank == 2 && t->shape[1] != d1) ||
        !dtype_ok(t->dtype) || !t->data) {
        wf_errf_status(WF_E_BAD_SHAPE, bd->err, bd->err_len,
                       "host tensor '%s' has the wrong shape or dtype", name);
        *ret_st = WF_E_BAD_SHAPE;
        return NULL;
    }
    return t;
}

static wf_status_t build_visit(void *arg, const char *module, tkind_t kind,
                               int64_t out, int64_t in, wf_flux_linear_t *lin,
                               float **norm)
{
    build_t *bd = arg;
    char name[WF_FLUX_TENSOR_NAME_MAX + 8];
    wf_status_t st;
    snprintf(name, sizeof name, "%s.weight", module);
    if (kind == K_NORM) {
        const wf_flux_host_tensor_t *t = host_tensor(bd, name, 1, out, 0, false, &st);
        if (!t)
            return st;
        if (!(*norm = falloc((uint64_t)out)))
            return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "out of memory");
        wf_convert_to_f32(*norm, t->data, t->dtype, (size_t)out);
        bd->s->bytes += (uint64_t)out * sizeof(float);
        return WF_OK;
    }
    const wf_flux_host_tensor_t *w = host_tensor(bd, name, 2, out, in, false, &st);
    if (!w)
        return st;
    snprintf(name, sizeof name, "%s.bias", module);
    const wf_flux_host_tensor_t *b = host_tensor(bd, name, 1, out, 0, true, &st);
    if (st != WF_OK)
        return st;
    wf_tp_place_t *p = &lin->place;
    if (wf_tp_place(bd->plan, module, out, in, bd->tp, p, bd->err, bd->err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    int64_t ps[WF_TP_MAX_BLOCKS], pl[WF_TP_MAX_BLOCKS];
    wf_tp_pieces(p, bd->rank, bd->tp, ps, pl);
    const unsigned char *wd = w->data;
    const size_t es = es_of(w->dtype);
    bool on_rows = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    bool on_cols = p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
    /* f32: point into the host copy where the pieces allow it */
    bool whole = (!on_rows && !on_cols) || bd->tp == 1; /* tp 1: every piece is all */
    bool view_w = w->dtype == WF_DTYPE_F32 &&
                  (whole || on_cols || (on_rows && p->n_blocks == 1));
    bool view_b = b && b->dtype == WF_DTYPE_F32 &&
                  (!on_rows || p->n_blocks == 1 || bd->tp == 1);
    lin->ldw = p->local_in;
    lin->nwb = 1;
    if (view_w && on_cols && !whole) {
        /* one strided view per column block, rows `in` floats apart */
        lin->w_view = true;
        lin->ldw = in;
        lin->nwb = p->n_blocks;
        for (uint32_t k = 0; k < p->n_blocks; k++) {
            lin->wb[k] = (const float *)(const void *)(wd + (size_t)ps[k] * es);
            lin->wbw[k] = pl[k];
        }
        lin->w = (float *)(void *)(uintptr_t)lin->wb[0];
    } else if (view_w) {
        lin->w = (float *)(void *)(uintptr_t)(wd + (whole ? 0 : (size_t)(ps[0] * in) * es));
        lin->w_view = true;
        lin->ldw = in;          /* == local_in: whole rows */
    } else {
        lin->w = falloc((uint64_t)p->local_out * (uint64_t)p->local_in);
        if (!lin->w)
            return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "out of memory");
    }
    if (lin->nwb == 1) {
        lin->wb[0] = lin->w;
        lin->wbw[0] = p->local_in;
    }
    float *dst = lin->w;
    if (view_w) {
        /* nothing to copy */
    } else if (on_rows) {
        /* the rank's row pieces, whole rows each */
        for (uint32_t k = 0; k < p->n_blocks; k++) {
            wf_convert_to_f32(dst, wd + (size_t)(ps[k] * in) * es, w->dtype,
                              (size_t)(pl[k] * in));
            dst += pl[k] * in;
        }
    } else if (on_cols) {
        /* every row, the rank's column pieces */
        for (int64_t r = 0; r < out; r++)
            for (uint32_t k = 0; k < p->n_blocks; k++) {
                wf_convert_to_f32(dst, wd + (size_t)(r * in + ps[k]) * es, w->dtype,
                                  (size_t)pl[k]);
                dst += pl[k];
            }
    } else {
        wf_convert_to_f32(dst, wd, w->dtype, (size_t)(out * in));
    }
    bd->s->bytes += (uint64_t)p->local_out * (uint64_t)p->local_in * sizeof(float);
    if (b) {
        uint64_t nb = bias_elems(p);
        const unsigned char *bdat = b->data;
        const size_t bes = es_of(b->dtype);
        if (view_b) {
            lin->b = (float *)(void *)(uintptr_t)(bdat + (on_rows ? (size_t)ps[0] * bes : 0));
            lin->b_view = true;
            bd->s->bytes += nb * sizeof(float);
            return WF_OK;
        }
        if (!(lin->b = falloc(nb)))
            return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "out of memory");
        if (on_rows) {
            float *bd2 = lin->b;
            for (uint32_t k = 0; k < p->n_blocks; k++) {
                wf_convert_to_f32(bd2, bdat + (size_t)ps[k] * bes, b->dtype, (size_t)pl[k]);
                bd2 += pl[k];
            }
        } else {
            wf_convert_to_f32(lin->b, bdat, b->dtype, (size_t)out);
        }
        bd->s->bytes += nb * sizeof(float);
    }
    return WF_OK;
}

static void linear_free(wf_flux_linear_t *l)
{
    if (!l->w_view)
        free(l->w);
    if (!l->b_view)
        free(l->b);
    l->w = NULL;
    l->b = NULL;
    l->w_view = l->b_view = false;
    l->nwb = 0;
}

/* Frees every buffer of the shard a walk reaches. */
static wf_status_t free_visit(void *arg, const char *module, tkind_t kind,
                              int64_t out, int64_t in, wf_flux_linear_t *lin,
                              float **norm)
{
    (void)arg;
    (void)module;
    (void)kind;
    (void)out;
    (void)in;
    if (lin)
        linear_free(lin);
    if (norm) {
        free(*norm);
        *norm = NULL;
    }
    return WF_OK;
}

void wf_flux_shard_free(wf_flux_shard_t **s)
{
    if (!s || !*s)
        return;
    wf_flux_shard_t *x = *s;
    if (x->dbl && x->sgl)
        walk(&x->cfg, x, free_visit, NULL);
    free(x->dbl);
    free(x->sgl);
    free(x);
    *s = NULL;
}

wf_status_t wf_flux_shard_build(const wf_flux_host_t *host,
                                const wf_tp_plan_t *plan, int tp, int tp_rank,
                                wf_flux_shard_t **ret, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!host || !plan || !ret || tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "bad shard arguments (tp %d, rank %d)",
                              tp, tp_rank);
    wf_flux_shard_t *s = calloc(1, sizeof *s);
    if (!s)
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    s->cfg = host->cfg;
    s->tp = tp;
    s->tp_rank = tp_rank;
    /* one spare element so that a model without a block kind still gets
     * a non-NULL array (free_visit then knows the shard is whole) */
    s->dbl = calloc((size_t)s->cfg.num_layers + 1, sizeof *s->dbl);
    s->sgl = calloc((size_t)s->cfg.num_single_layers + 1, sizeof *s->sgl);
    if (!s->dbl || !s->sgl) {
        wf_flux_shard_free(&s);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    }
    build_t bd = {host, plan, tp, tp_rank, s, err, err_len};
    wf_status_t st = walk(&s->cfg, s, build_visit, &bd);
    if (st != WF_OK) {
        wf_flux_shard_free(&s);
        return st;
    }
    *ret = s;
    return WF_OK;
}

/* ---- job check -------------------------------------------------------------- */

wf_status_t wf_flux_forward_check(const wf_flux_config_t *cfg,
                                  const wf_flux_job_t *job, int tp, int R, int U,
                                  char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!cfg || !job)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or job");
    if (tp < 1 || R < 1 || U < 1 || tp > MAX_DEGREE || R > MAX_DEGREE || U > MAX_DEGREE ||
        (int64_t)R * U > MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "mesh degrees tp %d, ring %d, ulysses %d invalid", tp, R, U);
    if (job->B < 1 || job->S_img < 1 || job->S_txt < 1)
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                              "batch (%" PRId64 "), image tokens (%" PRId64 ") and text tokens "
                              "(%" PRId64 ") must be positive", job->B, job->S_img, job->S_txt);
    struct {
        const char *name;
        wf_dtype_t dt;
        bool used;
    } dts[] = {
        {"hidden_states", job->hidden_dtype, true},
        {"encoder_hidden_states", job->encoder_dtype, true},
        {"pooled_projections", job->pooled_dtype, true},
        {"timestep", job->timestep_dtype, true},
        {"img_ids", job->img_ids_dtype, true},
        {"txt_ids", job->txt_ids_dtype, true},
        {"guidance", job->guidance_dtype, job->has_guidance},
        {"output", job->out_dtype, true},
    };
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
        if (dts[k].used && !dtype_ok(dts[k].dt))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                  "%s: dtype %d is not f32, f16 or bf16", dts[k].name,
                                  (int)dts[k].dt);
    struct {
        const char *name, *field;
        int64_t got, want;
        const char *what;
    } sh[] = {
        {"hidden_states", "in_channels", job->hidden_ch, cfg->in_channels, "channels"},
        {"encoder_hidden_states", "joint_attention_dim", job->encoder_ch,
         cfg->joint_attention_dim, "channels"},
        {"pooled_projections", "pooled_projection_dim", job->pooled_ch,
         cfg->pooled_projection_dim, "channels"},
        {"img_ids", "axes_dims_rope", job->img_ids_axes, cfg->n_axes, "axes"},
        {"txt_ids", "axes_dims_rope", job->txt_ids_axes, cfg->n_axes, "axes"},
    };
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++)
        if (sh[k].got != sh[k].want)
            return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                                  "%s has %" PRId64 " %s in its last dim; the model's %s wants "
                                  "%" PRId64, sh[k].name, sh[k].got, sh[k].what, sh[k].field,
                                  sh[k].want);
    if (cfg->guidance_embeds && !job->has_guidance)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "guidance is required: the model has guidance_embeds (a "
                              "guidance-distilled FLUX)");
    if (!cfg->guidance_embeds && job->has_guidance)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "guidance given, but the model has no guidance embedder "
                              "(guidance_embeds is false)");
    int64_t P = (int64_t)R * U;
    if (job->S_img % P != 0 || job->S_txt % P != 0) {
        bool img = job->S_img % P != 0;
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                              "Tensor size along dimension to be sharded must be divisible by mesh "
                              "size (%s: %s = %" PRId64 ", ring x ulysses = %" PRId64 ")",
                              img ? "hidden_states / img_ids" : "encoder_hidden_states / txt_ids",
                              img ? "S_img" : "S_txt", img ? job->S_img : job->S_txt, P);
    }
    /* rows of one GEMM and every product of the workspace in range */
    int64_t S = job->S_img + job->S_txt;
    if (job->S_img > INT32_MAX || job->S_txt > INT32_MAX || S > INT32_MAX ||
        job->B > MAX_ROWS / S)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "job too large: B %" PRId64 " x %" PRId64 " tokens", job->B, S);
    return WF_OK;
}

/* ---- sizes and the workspace layout ------------------------------------------ */

/* Sizes of a job on one rank (identical on every rank). */
typedef struct geo {
    int64_t B, S_img, S_txt, S;  /* job; S = S_img + S_txt (the joint length) */
    int64_t Lt, Li, L;           /* tokens per rank */
    int64_t Nt, Ni, N;           /* rows per rank */
    int64_t C, H, D, M, OC;      /* model widths */
    int64_t IN, J, PD, NA;       /* input widths */
    int T, R, U, P;              /* degrees */
} geo_t;

static geo_t geo_of(const wf_flux_config_t *cfg, const wf_flux_job_t *job, int T, int R,
                    int U)
{
    geo_t g;
    memset(&g, 0, sizeof g);
    g.T = T;
    g.R = R;
    g.U = U;
    g.P = R * U;
    g.B = job->B;
    g.S_img = job->S_img;
    g.S_txt = job->S_txt;
    g.S = g.S_img + g.S_txt;
    g.Lt = g.S_txt / g.P;
    g.Li = g.S_img / g.P;
    g.L = g.Lt + g.Li;
    g.Nt = g.B * g.Lt;
    g.Ni = g.B * g.Li;
    g.N = g.Nt + g.Ni;
    g.C = cfg->inner_dim;
    g.H = cfg->num_attention_heads;
    g.D = cfg->attention_head_dim;
    g.M = cfg->mlp_hidden_dim;
    g.OC = (int64_t)cfg->patch_size * cfg->patch_size * cfg->out_channels;
    g.IN = cfg->in_channels;
    g.J = cfg->joint_attention_dim;
    g.PD = cfg->pooled_projection_dim;
    g.NA = cfg->n_axes;
    return g;
}

/* One input record: what one seq rank needs of the inputs, f32, floats
 * from the record's start. */
typedef struct recl {
    size_t hid;    /* hidden_states piece (B, Li, IN) */
    size_t enc;    /* encoder_hidden_states piece (B, Lt, J) */
    size_t iid;    /* img_ids piece (Li, NA) */
    size_t tid;    /* txt_ids piece (Lt, NA) */
    size_t pooled; /* pooled_projections (B, PD) */
    size_t ts;     /* timestep (B) */
    size_t gd;     /* guidance (B) */
    size_t n;      /* floats of the record, a multiple of 16 (64 bytes) */
} recl_t;

static recl_t rec_layout(szc_t *c, const geo_t *g)
{
    recl_t r;
    size_t o = 0;
    r.hid = o;
    o = szc_add(c, o, szc_mul3(c, g->B, g->Li, g->IN));
    r.enc = o;
    o = szc_add(c, o, szc_mul3(c, g->B, g->Lt, g->J));
    r.iid = o;
    o = szc_add(c, o, szc_mul3(c, g->Li, g->NA, 1));
    r.tid = o;
    o = szc_add(c, o, szc_mul3(c, g->Lt, g->NA, 1));
    r.pooled = o;
    o = szc_add(c, o, szc_mul3(c, g->B, g->PD, 1));
    r.ts = o;
    o = szc_add(c, o, (size_t)g->B);
    r.gd = o;
    o = szc_add(c, o, (size_t)g->B);
    r.n = szc_add(c, o, 15u) & ~(size_t)15u;
    return r;
}

/* Byte offsets of the regions of one rank's workspace (64-byte aligned).
 * Float counts in comments; widths are the full ones (any plan). */
typedef struct wsl {
    size_t meta;   /* 2 * max(P, T) size_t: scatter / gather counts */
    size_t in;     /* input records: P on seq index 0, else 1; own first */
    size_t rcos, rsin; /* RoPE tables (L, D) */
    size_t tproj;  /* sinusoidal projection (B, 256) */
    size_t v1, v2, temb, semb; /* (B, C): embedder scratch, temb, silu(temb) */
    size_t modA, modB; /* (B, 6C): AdaLN outputs */
    size_t S;      /* residual stream (N, C), stream order */
    size_t nx;     /* normalized + modulated stream (N, C) */
    size_t q, k, v; /* projections (N, C), stream order; attention out / unpacked out */
    size_t qj, kj, vj; /* attention inputs (B, L, H, D), joint order */
    size_t lo;     /* a linear's full output before the gate (N, C) */
    size_t hid;    /* MLP hidden (N, M) */
    size_t cat;    /* single blocks' proj_out input (N, C + M) */
    size_t Y;      /* split output of a linear before it is made full */
    size_t Xc;     /* a linear's input converted to its layout */
    size_t G;      /* tp all-gather landing */
    size_t aws;    /* attention workspace */
    size_t out;    /* final output (Ni, OC) */
    size_t outg;   /* root, P > 1: every seq rank's output (P, Ni, OC) */
    size_t total;  /* bytes */
    /* sizes the run checks against */
    size_t aws_bytes;            /* bytes of aws */
    size_t Y_n, Xc_n, G_n;       /* floats of Y, Xc, G */
    recl_t rec;                  /* the input record */
} wsl_t;

static size_t take(szc_t *c, size_t *off, size_t bytes)
{
    size_t start = *off;
    *off = szc_add(c, start, szc_add(c, bytes, 63u) & ~(size_t)63u);
    return start;
}

static size_t ftake(szc_t *c, size_t *off, size_t floats)
{
    return take(c, off, szc_mul(c, floats, sizeof(float)));
}

/* The cp job of this forward's attention, Hl heads per tp rank, without
 * pointers. */
static wf_cp_job_t cp_job_of(const geo_t *g, int64_t Hl)
{
    wf_cp_job_t j;
    memset(&j, 0, sizeof j);
    j.B = g->B;
    j.Sq = g->S;
    j.Skv = g->S;
    j.Hq = Hl;
    j.Hkv = Hl;
    j.D = g->D;
    j.hq_begin = 0;
    j.hq_end = Hl;
    j.scale = (float)(1.0 / sqrt((double)g->D));
    j.q_dtype = j.k_dtype = j.v_dtype = j.out_dtype = WF_DTYPE_F32;
    j.rotate_method = WF_CP_ROTATE_ALLGATHER;
    j.convert_to_fp32 = true;
    /* S divides over P (checked); uneven heads (tp * ulysses above the
     * head count) split as cp_attention's ulysses_anything does */
    j.ulysses_anything = Hl % g->U != 0;
    j.local = true;
    return j;
}

/* Kernel params of the single-rank attention (P = 1), without pointers. */
static wf_attn_params_t attn_params_of(const geo_t *g, int64_t Hl)
{
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = g->B;
    p.Sq = g->L;
    p.Skv = g->L;
    p.Hq = Hl;
    p.Hkv = Hl;
    p.D = g->D;
    p.h_begin = 0;
    p.h_end = Hl;
    p.scale = (float)(1.0 / sqrt((double)g->D));
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = WF_DTYPE_F32;
    return p;
}

/* The attention goes through cp_attention (local mode) for P > 1, and
 * for a backend on device memory, whose kernels it stages. */
static bool via_cp(const geo_t *g, const wf_backend_ops_t *ops)
{
    return g->P > 1 || ops->copy_h2d != NULL;
}

/* Attention workspace for any plan: heads per rank are H (attention on
 * every head) or H / T (split heads). */
static size_t attn_ws(szc_t *c, const geo_t *g, const wf_backend_ops_t *ops)
{
    int64_t opts[2] = {g->H, g->H % g->T == 0 ? g->H / g->T : g->H};
    size_t most = 0;
    for (int k = 0; k < 2; k++) {
        size_t n;
        if (via_cp(g, ops)) {
            wf_cp_job_t j = cp_job_of(g, opts[k]);
            n = wf_cp_attention_workspace(&j, g->R, g->U, ops);
            if (n == 0)
                c->overflow = true; /* refused: cannot happen after the check */
        } else {
            wf_attn_params_t p = attn_params_of(g, opts[k]);
            n = ops->attention_workspace ? ops->attention_workspace(&p) : 0;
        }
        if (n == SIZE_MAX)
            c->overflow = true;
        most = n > most ? n : most;
    }
    return most;
}

/* The regions of a rank with seq index 0 (seq0) and / or the root. */
static wsl_t ws_layout(szc_t *c, const geo_t *g, bool seq0, bool root, size_t aws_bytes)
{
    wsl_t w;
    memset(&w, 0, sizeof w);
    size_t off = 0;
    const int64_t B = g->B, N = g->N, C = g->C, M = g->M;
    w.rec = rec_layout(c, g);
    w.meta = take(c, &off, szc_mul(c, 2u * (size_t)max64(g->P, g->T), sizeof(size_t)));
    w.in = ftake(c, &off, szc_mul(c, w.rec.n, seq0 ? (size_t)g->P : 1u));
    w.rcos = ftake(c, &off, szc_mul3(c, g->L, g->D, 1));
    w.rsin = ftake(c, &off, szc_mul3(c, g->L, g->D, 1));
    w.tproj = ftake(c, &off, szc_mul3(c, B, WF_FLUX_TIMESTEP_CHANNELS, 1));
    w.v1 = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.v2 = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.temb = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.semb = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.modA = ftake(c, &off, szc_mul3(c, B, 6, C));
    w.modB = ftake(c, &off, szc_mul3(c, B, 6, C));
    w.S = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.nx = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.q = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.k = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.v = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.qj = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.kj = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.vj = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.lo = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.hid = ftake(c, &off, szc_mul3(c, N, M, 1));
    w.cat = ftake(c, &off, szc_mul3(c, N, C + M, 1));
    /* Y: any linear's split output (rows x out) before it is made full */
    w.Y_n = maxz(maxz(szc_mul3(c, B, 6, C), szc_mul3(c, N, C, 1)), szc_mul3(c, g->Ni, g->OC, 1));
    w.Y = ftake(c, &off, w.Y_n);
    /* Xc: any linear's input (rows x in), or a q / k / v part (N x C) */
    w.Xc_n = maxz(maxz(szc_mul3(c, N, M, 1), szc_mul3(c, g->Ni, g->IN, 1)),
                  maxz(szc_mul3(c, g->Nt, g->J, 1),
                       szc_mul3(c, B, max64(g->PD, WF_FLUX_TIMESTEP_CHANNELS), 1)));
    w.Xc = ftake(c, &off, w.Xc_n);
    /* G: rows x full width of anything converted: an input (Xc's bound)
     * or an output (Y's bound) */
    w.G_n = maxz(w.Xc_n, w.Y_n);
    w.G = ftake(c, &off, w.G_n);
    w.aws_bytes = aws_bytes;
    w.aws = take(c, &off, aws_bytes);
    w.out = ftake(c, &off, szc_mul3(c, g->Ni, g->OC, 1));
    w.outg = ftake(c, &off, root && g->P > 1 ? szc_mul3(c, g->P, g->Ni, g->OC) : 0);
    w.total = off;
    return w;
}

size_t wf_flux_forward_workspace(const wf_flux_config_t *cfg,
                                 const wf_flux_job_t *job, int tp, int R, int U,
                                 const wf_backend_ops_t *ops)
{
    /* a refused job has no size: SIZE_MAX, which admission refuses too */
    if (!ops || wf_flux_forward_check(cfg, job, tp, R, U, NULL, 0) != WF_OK)
        return SIZE_MAX;
    geo_t g = geo_of(cfg, job, tp, R, U);
    szc_t c = {false};
    size_t aws = attn_ws(&c, &g, ops);
    size_t most = 0;
    for (int role = 0; role < 3; role++) { /* other, seq index 0, the root */
        wsl_t w = ws_layout(&c, &g, role >= 1, role == 2, aws);
        most = w.total > most ? w.total : most;
    }
    return c.overflow ? SIZE_MAX : most;
}

/* ---- layouts over tp ----------------------------------------------------------- */

/* Layout of an activation's columns over the tp ranks. */
typedef struct lay {
    int64_t n;                       /* full width */
    uint32_t nb;                     /* 0: full on every rank; else blocks */
    int64_t block[WF_TP_MAX_BLOCKS]; /* full sizes of the blocks (sum n) */
} lay_t;

static lay_t lay_full(int64_t n)
{
    lay_t l;
    memset(&l, 0, sizeof l);
    l.n = n;
    return l;
}

/* The layout a linear takes (`input`) or emits with placement p. With one
 * rank everything is full. */
static lay_t lay_of(const wf_tp_place_t *p, bool input, int T)
{
    bool cols = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    bool rows = p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
    lay_t l = lay_full(input ? p->in : p->out);
    if (T == 1 || !(input ? rows : cols))
        return l;
    l.nb = p->n_blocks;
    for (uint32_t b = 0; b < p->n_blocks; b++)
        l.block[b] = p->block[b];
    return l;
}

static int64_t lay_width(const lay_t *l, int T) { return l->nb ? l->n / T : l->n; }

static bool lay_same(const lay_t *a, const lay_t *b)
{
    if (a->n != b->n || a->nb != b->nb)
        return false;
    for (uint32_t k = 0; k < a->nb; k++)
        if (a->block[k] != b->block[k])
            return false;
    return true;
}

/* Pieces of rank r (ascending): count, starts and lengths in full columns. */
static int lay_pieces(const lay_t *l, int r, int T, int64_t *st, int64_t *ln)
{
    if (l->nb == 0) {
        st[0] = 0;
        ln[0] = l->n;
        return 1;
    }
    int64_t bs = 0;
    for (uint32_t b = 0; b < l->nb; b++) {
        int64_t q = l->block[b] / T;
        st[b] = bs + (int64_t)r * q;
        ln[b] = q;
        bs += l->block[b];
    }
    return (int)l->nb;
}

/* Rank r's pieces of l inside the window [a, a + w), shifted by -a. */
static int win_pieces(const lay_t *l, int r, int T, int64_t a, int64_t w, int64_t *st,
                      int64_t *ln)
{
    int64_t s0[WF_TP_MAX_BLOCKS], l0[WF_TP_MAX_BLOCKS];
    int n = lay_pieces(l, r, T, s0, l0), m = 0;
    for (int k = 0; k < n; k++) {
        int64_t lo = max64(s0[k], a), hi = min64(s0[k] + l0[k], a + w);
        if (hi <= lo)
            continue;
        st[m] = lo - a;
        ln[m] = hi - lo;
        m++;
    }
    return m;
}

/* ---- the run ------------------------------------------------------------------------ */

/* State of one forward on one rank. */
typedef struct run {
    const wf_flux_shard_t *s;    /* weights */
    const wf_flux_config_t *cfg; /* = &s->cfg */
    const wf_flux_job_t *job;    /* the job */
    const wf_flux_group_t *grp;  /* communicators */
    const wf_backend_ops_t *ops; /* backend */
    wf_backend_ctx_t *ctx;       /* its context */
    geo_t g;                     /* sizes */
    wsl_t W;                     /* workspace regions */
    unsigned char *ws;           /* workspace base */
    int t, i;                    /* tp rank, seq index */
    bool root;                   /* t == 0 and i == 0 */
} run_t;

static float *fp(const run_t *x, size_t off) { return (float *)(void *)(x->ws + off); }

/* Columns of an activation in layout sl (rows x its local width at src,
 * row stride ld_src) -> this rank's columns of target layout tl inside
 * the window [a, a + sl->n) of tl's dim, into dst (row stride ld_dst).
 * Collective over tp when sl is split and the pieces differ on some rank. */
static wf_status_t convert(run_t *x, const float *src, int64_t ld_src, const lay_t *sl,
                           int64_t rows, const lay_t *tl, int64_t a, float *dst,
                           int64_t ld_dst)
{
    const int T = x->g.T;
    int64_t ts[WF_TP_MAX_BLOCKS], tn[WF_TP_MAX_BLOCKS];
    int nt = win_pieces(tl, x->t, T, a, sl->n, ts, tn);
    if (sl->nb == 0) {
        /* full source: a local slice */
        for (int64_t r = 0; r < rows; r++) {
            float *d = dst + r * ld_dst;
            for (int k = 0; k < nt; k++) {
                memcpy(d, src + r * ld_src + ts[k], (size_t)tn[k] * sizeof(float));
                d += tn[k];
            }
        }
        return WF_OK;
    }
    /* split source: already what every rank wants? (the same answer on
     * every rank, so that all or none enter the all-gather) */
    bool same = true;
    for (int r = 0; r < T && same; r++) {
        int64_t as[WF_TP_MAX_BLOCKS], an[WF_TP_MAX_BLOCKS];
        int64_t bs[WF_TP_MAX_BLOCKS], bn[WF_TP_MAX_BLOCKS];
        int na = win_pieces(tl, r, T, a, sl->n, as, an);
        int nb = lay_pieces(sl, r, T, bs, bn);
        same = na == nb;
        for (int k = 0; k < na && same; k++)
            same = as[k] == bs[k] && an[k] == bn[k];
    }
    const int64_t wl = lay_width(sl, T);
    if (same) {
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + r * ld_dst, src + r * ld_src, (size_t)wl * sizeof(float));
        return WF_OK;
    }
    if (ld_src != wl || (size_t)(rows * sl->n) > x->W.G_n || !x->grp->tp)
        return WF_E_INTERNAL;
    float *G = fp(x, x->W.G);
    wf_status_t st = wf_comm_allgather(x->grp->tp, src, G,
                                       (size_t)(rows * wl) * sizeof(float));
    if (st != WF_OK)
        return st;
    /* full column c lies in block b at offset o: rank o / q holds it at
     * local column (q's of earlier blocks) + o % q */
    for (int64_t r = 0; r < rows; r++) {
        float *d = dst + r * ld_dst;
        for (int k = 0; k < nt; k++) {
            int64_t c = ts[k], end = ts[k] + tn[k];
            while (c < end) {
                int64_t bs = 0, pre = 0, q = 0, o = 0;
                for (uint32_t b = 0; b < sl->nb; b++) {
                    q = sl->block[b] / T;
                    if (c < bs + sl->block[b]) {
                        o = c - bs;
                        break;
                    }
                    bs += sl->block[b];
                    pre += q;
                }
                int64_t owner = o / q, lc = pre + o % q, run = min64(end - c, q - o % q);
                memcpy(d, G + (owner * rows + r) * wl + lc, (size_t)run * sizeof(float));
                d += run;
                c += run;
            }
        }
    }
    return WF_OK;
}

/* dst (rows x local_out, contiguous) = in W^T + b on this rank, in the
 * placement's output layout (*ret_lay); the input (layout il, row stride
 * ld_in) is converted to the layout the placement takes first. Rowwise
 * partial sums are all-reduced over tp, then the bias is added once. */
static wf_status_t lin_raw(run_t *x, const wf_flux_linear_t *L, const float *in,
                           int64_t ld_in, const lay_t *il, int64_t rows, float *dst,
                           lay_t *ret_lay)
{
    const wf_tp_place_t *p = &L->place;
    const int T = x->g.T;
    lay_t need = lay_of(p, true, T);
    const float *a = in;
    int64_t lda = ld_in;
    wf_status_t st;
    if (lay_width(&need, T) != p->local_in || il->n != p->in)
        return WF_E_INTERNAL;
    if (!lay_same(il, &need)) {
        if ((size_t)(rows * p->local_in) > x->W.Xc_n)
            return WF_E_INTERNAL;
        float *xc = fp(x, x->W.Xc);
        st = convert(x, in, ld_in, il, rows, &need, 0, xc, p->local_in);
        if (st != WF_OK)
            return st;
        a = xc;
        lda = p->local_in;
    }
    const int64_t lo = p->local_out;
    /* one GEMM per column block of the weight (one unless a strided view
     * of split columns), accumulating; the activation's local columns are
     * the blocks' pieces in the same order */
    int64_t acol = 0;
    for (uint32_t k = 0; rows > 0 && k < L->nwb; k++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)lo,
                    (int)L->wbw[k], 1.0f, a + acol, (int)lda, L->wb[k], (int)L->ldw,
                    k == 0 ? 0.0f : 1.0f, dst, (int)lo);
        acol += L->wbw[k];
    }
    bool reduce = T > 1 && (p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE);
    if (reduce) {
        if (!x->grp->tp)
            return WF_E_INTERNAL;
        st = wf_comm_allreduce(x->grp->tp, dst, dst, (size_t)(rows * lo), WF_COMM_F32,
                               WF_COMM_SUM);
        if (st != WF_OK)
            return st;
    }
    if (L->b)
        for (int64_t r = 0; r < rows; r++) {
            float *d = dst + r * lo;
            for (int64_t cc = 0; cc < lo; cc++)
                d[cc] += L->b[cc];
        }
    *ret_lay = lay_of(p, false, T);
    return WF_OK;
}

/* As lin_raw, but dst (rows x out, contiguous) always gets the full
 * output (a split one is gathered through Y). */
static wf_status_t lin_full(run_t *x, const wf_flux_linear_t *L, const float *in,
                            int64_t ld_in, const lay_t *il, int64_t rows, float *dst)
{
    const wf_tp_place_t *p = &L->place;
    lay_t ol = lay_of(p, false, x->g.T);
    if (ol.nb == 0)
        return lin_raw(x, L, in, ld_in, il, rows, dst, &ol);
    if ((size_t)(rows * p->local_out) > x->W.Y_n)
        return WF_E_INTERNAL;
    float *Y = fp(x, x->W.Y);
    wf_status_t st = lin_raw(x, L, in, ld_in, il, rows, Y, &ol);
    if (st != WF_OK)
        return st;
    lay_t full = lay_full(p->out);
    return convert(x, Y, p->local_out, &ol, rows, &full, 0, dst, p->out);
}

/* ---- elementwise pieces -------------------------------------------------------- */

static float silu(float v) { return v / (1.0f + expf(-v)); }

static void silu_n(float *v, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        v[k] = silu(v[k]);
}

/* GELU, tanh approximation (nn.GELU(approximate="tanh")). */
static void gelu_tanh_n(float *v, int64_t n)
{
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    for (int64_t k = 0; k < n; k++) {
        float a = v[k];
        v[k] = 0.5f * a * (1.0f + tanhf(k0 * (a + k1 * a * a * a)));
    }
}

/* dst rows = LayerNorm(src rows) * (1 + scale[b]) + shift[b]: nbatch
 * batches of `per` rows of width C; row b of mod (stride ld_mod) holds
 * shift at shift_off and scale at scale_off. LayerNorm without affine,
 * statistics in double. */
static void ln_mod(const float *src, float *dst, int64_t nbatch, int64_t per, int64_t C,
                   const float *mod, int64_t ld_mod, int64_t shift_off, int64_t scale_off)
{
    for (int64_t b = 0; b < nbatch; b++) {
        const float *sh = mod + b * ld_mod + shift_off;
        const float *sc = mod + b * ld_mod + scale_off;
        for (int64_t r = 0; r < per; r++) {
            const float *x = src + (b * per + r) * C;
            float *y = dst + (b * per + r) * C;
            double mean = 0, var = 0;
            for (int64_t c = 0; c < C; c++)
                mean += x[c];
            mean /= (double)C;
            for (int64_t c = 0; c < C; c++)
                var += ((double)x[c] - mean) * ((double)x[c] - mean);
            var /= (double)C;
            double inv = 1.0 / sqrt(var + NORM_EPS);
            for (int64_t c = 0; c < C; c++) {
                float nv = (float)(((double)x[c] - mean) * inv);
                y[c] = nv * (1.0f + sc[c]) + sh[c];
            }
        }
    }
}

/* S rows += gate[b] * lo rows, as ln_mod's batches. */
static void gate_add(float *S, const float *lo, int64_t nbatch, int64_t per, int64_t C,
                     const float *mod, int64_t ld_mod, int64_t gate_off)
{
    for (int64_t b = 0; b < nbatch; b++) {
        const float *gt = mod + b * ld_mod + gate_off;
        for (int64_t r = 0; r < per; r++) {
            float *s = S + (b * per + r) * C;
            const float *l = lo + (b * per + r) * C;
            for (int64_t c = 0; c < C; c++)
                s[c] += gt[c] * l[c];
        }
    }
}

/* ---- inputs ------------------------------------------------------------------------ */

/* The root writes every seq rank's record (rank-major) from the inputs. */
static void fill_records(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_flux_job_t *job = x->job;
    const recl_t *rl = &x->W.rec;
    for (int j = 0; j < g->P; j++) {
        float *rec = fp(x, x->W.in) + (size_t)j * rl->n;
        size_t eh = es_of(job->hidden_dtype), ee = es_of(job->encoder_dtype);
        for (int64_t b = 0; b < g->B; b++) {
            const unsigned char *h = job->hidden_states;
            wf_convert_to_f32(rec + rl->hid + (size_t)(b * g->Li * g->IN),
                              h + (size_t)((b * g->S_img + j * g->Li) * g->IN) * eh,
                              job->hidden_dtype, (size_t)(g->Li * g->IN));
            const unsigned char *e = job->encoder_hidden_states;
            wf_convert_to_f32(rec + rl->enc + (size_t)(b * g->Lt * g->J),
                              e + (size_t)((b * g->S_txt + j * g->Lt) * g->J) * ee,
                              job->encoder_dtype, (size_t)(g->Lt * g->J));
        }
        const unsigned char *ii = job->img_ids, *ti = job->txt_ids;
        size_t ei = es_of(job->img_ids_dtype), et = es_of(job->txt_ids_dtype);
        wf_convert_to_f32(rec + rl->iid, ii + (size_t)(j * g->Li * g->NA) * ei,
                          job->img_ids_dtype, (size_t)(g->Li * g->NA));
        wf_convert_to_f32(rec + rl->tid, ti + (size_t)(j * g->Lt * g->NA) * et,
                          job->txt_ids_dtype, (size_t)(g->Lt * g->NA));
        wf_convert_to_f32(rec + rl->pooled, job->pooled_projections, job->pooled_dtype,
                          (size_t)(g->B * g->PD));
        wf_convert_to_f32(rec + rl->ts, job->timestep, job->timestep_dtype, (size_t)g->B);
        if (job->has_guidance)
            wf_convert_to_f32(rec + rl->gd, job->guidance, job->guidance_dtype, (size_t)g->B);
        else
            memset(rec + rl->gd, 0, (size_t)g->B * sizeof(float));
    }
}

/* Inputs to every rank: the root's records over tp (seq index 0 ranks),
 * then each seq group's root scatters them. */
static wf_status_t distribute(run_t *x)
{
    const geo_t *g = &x->g;
    const size_t rb = x->W.rec.n * sizeof(float);
    float *in = fp(x, x->W.in);
    wf_status_t st = WF_OK;
    if (x->root)
        fill_records(x);
    if (g->T > 1 && x->i == 0)
        st = wf_comm_broadcast(x->grp->tp, in, (size_t)g->P * rb, 0);
    if (st == WF_OK && g->P > 1) {
        size_t *counts = (size_t *)(void *)(x->ws + x->W.meta), *displs = counts + g->P;
        for (int j = 0; j < g->P; j++) {
            counts[j] = rb;
            displs[j] = (size_t)j * rb;
        }
        /* in place on the seq root: its record is the first */
        st = wf_comm_scatterv(x->grp->seq, in, counts, displs, in, rb, 0);
    }
    return st;
}

/* RoPE tables (L, D) of this rank's joint rows [txt piece, img piece]:
 * diffusers' FluxPosEmbed — per axis a of width d_a, frequency j
 * 1 / theta^(2j / d_a) in float64 at the f32 position, cos / sin rounded
 * to f32, each repeated twice (repeat_interleave_real). */
static void rope_tables(run_t *x)
{
    const geo_t *g = &x->g;
    const float *rec = fp(x, x->W.in);
    float *cs = fp(x, x->W.rcos), *sn = fp(x, x->W.rsin);
    for (int64_t r = 0; r < g->L; r++) {
        const float *ids = r < g->Lt ? rec + x->W.rec.tid + r * g->NA
                                     : rec + x->W.rec.iid + (r - g->Lt) * g->NA;
        int64_t d = 0;
        for (uint32_t a = 0; a < x->cfg->n_axes; a++) {
            int64_t da = x->cfg->axes_dims_rope[a];
            for (int64_t j = 0; j < da / 2; j++) {
                double freq = 1.0 / pow(ROPE_THETA, (double)(2 * j) / (double)da);
                double ang = (double)ids[a] * freq;
                float c = (float)cos(ang), s = (float)sin(ang);
                cs[r * g->D + d] = cs[r * g->D + d + 1] = c;
                sn[r * g->D + d] = sn[r * g->D + d + 1] = s;
                d += 2;
            }
        }
    }
}

/* diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
 * of t * 1000 for each batch, in f32 as diffusers computes it:
 * [cos(t f_k), sin(t f_k)], f_k = exp(-ln(10000) k / 128).
 * diffusers scales with `timestep.to(hidden_states.dtype) * 1000`: with
 * bf16 / f16 activations t and the product are rounded to that dtype
 * (0.875 * 1000 becomes 876 in bf16, a 4 % change of a tiny model's
 * output). That is part of the function, so it is done here too, with
 * the dtype of the hidden_states given (`adt`); the rest stays f32.
 * (torch takes exp from MKL, which is off by one ulp for 2 of the 128
 * frequencies; here expf is correctly rounded. At guidance 4 * 1000 that
 * moves the output by about 4e-6 of its largest value.) */
static void timestep_proj(const float *t, int64_t B, wf_dtype_t adt, float *dst)
{
    const int half = WF_FLUX_TIMESTEP_CHANNELS / 2;
    const float nl = (float)-9.210340371976184; /* -ln(10000) */
    for (int64_t b = 0; b < B; b++) {
        float tv = wf_round_to_dtype(wf_round_to_dtype(t[b], adt) * 1000.0f, adt);
        for (int k = 0; k < half; k++) {
            float e = nl * (float)k;
            e = e / (float)half;
            float arg = tv * expf(e);
            dst[b * 2 * half + k] = cosf(arg);
            dst[b * 2 * half + half + k] = sinf(arg);
        }
    }
}

/* temb = timestep_embedder(proj(t)) [+ guidance_embedder(proj(g))] +
 * text_embedder(pooled); semb = silu(temb). */
static wf_status_t embed_time(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_flux_shard_t *s = x->s;
    const float *rec = fp(x, x->W.in);
    float *tp = fp(x, x->W.tproj), *v1 = fp(x, x->W.v1), *v2 = fp(x, x->W.v2);
    float *temb = fp(x, x->W.temb), *semb = fp(x, x->W.semb);
    const int64_t B = g->B, C = g->C, TC = WF_FLUX_TIMESTEP_CHANNELS;
    lay_t ltc = lay_full(TC), lc = lay_full(C), lpd = lay_full(g->PD);
    timestep_proj(rec + x->W.rec.ts, B, x->job->hidden_dtype, tp);
    wf_status_t st = lin_full(x, &s->time_l1, tp, TC, &ltc, B, v1);
    if (st != WF_OK)
        return st;
    silu_n(v1, B * C);
    if ((st = lin_full(x, &s->time_l2, v1, C, &lc, B, temb)) != WF_OK)
        return st;
    if (x->cfg->guidance_embeds) {
        timestep_proj(rec + x->W.rec.gd, B, x->job->hidden_dtype, tp);
        if ((st = lin_full(x, &s->guid_l1, tp, TC, &ltc, B, v1)) != WF_OK)
            return st;
        silu_n(v1, B * C);
        if ((st = lin_full(x, &s->guid_l2, v1, C, &lc, B, v2)) != WF_OK)
            return st;
        for (int64_t k = 0; k < B * C; k++)
            temb[k] += v2[k];
    }
    if ((st = lin_full(x, &s->text_l1, rec + x->W.rec.pooled, g->PD, &lpd, B, v1)) != WF_OK)
        return st;
    silu_n(v1, B * C);
    if ((st = lin_full(x, &s->text_l2, v1, C, &lc, B, v2)) != WF_OK)
        return st;
    for (int64_t k = 0; k < B * C; k++) {
        temb[k] += v2[k];
        semb[k] = silu(temb[k]);
    }
    return WF_OK;
}

/* ---- attention ------------------------------------------------------------------------ */

/* The layout the attention runs in: the common output layout of the n
 * projections when they agree and keep whole heads, else full (every
 * head on every tp rank). */
static lay_t attn_lay(const run_t *x, const wf_flux_linear_t *const *proj, int n)
{
    const int T = x->g.T;
    lay_t a = lay_of(&proj[0]->place, false, T);
    for (int k = 1; k < n; k++) {
        lay_t b = lay_of(&proj[k]->place, false, T);
        if (!lay_same(&a, &b))
            return lay_full(x->g.C);
    }
    int64_t st[WF_TP_MAX_BLOCKS], ln[WF_TP_MAX_BLOCKS];
    int np = lay_pieces(&a, 0, T, st, ln);
    for (int k = 0; k < np; k++)
        if (st[k] % x->g.D != 0 || ln[k] % x->g.D != 0)
            return lay_full(x->g.C);
    return a;
}

/* One stream part of a projection (txt: Nt rows, img: Ni rows; width
 * Hl * D, row stride ld, attention layout) -> its rows of the joint
 * buffer (B, L, Hl, D): RMSNorm over each head with `norm` (NULL: none),
 * then RoPE with the table rows when `rope`. */
static void pack(const run_t *x, const float *src, int64_t ld, bool txt, int64_t Hl,
                 const float *norm, bool rope, float *dst)
{
    const geo_t *g = &x->g;
    const int64_t D = g->D, per = txt ? g->Lt : g->Li, off = txt ? 0 : g->Lt;
    const float *cs = fp(x, x->W.rcos), *sn = fp(x, x->W.rsin);
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t s = 0; s < per; s++) {
            const float *row = src + (b * per + s) * ld;
            float *o = dst + (b * g->L + off + s) * Hl * D;
            const float *c = cs + (off + s) * D, *sv = sn + (off + s) * D;
            for (int64_t h = 0; h < Hl; h++) {
                const float *xh = row + h * D;
                float *oh = o + h * D;
                if (norm) {
                    double ss = 0;
                    for (int64_t d = 0; d < D; d++)
                        ss += (double)xh[d] * xh[d];
                    double inv = 1.0 / sqrt(ss / (double)D + NORM_EPS);
                    for (int64_t d = 0; d < D; d++)
                        oh[d] = (float)(xh[d] * inv) * norm[d];
                } else {
                    memcpy(oh, xh, (size_t)D * sizeof(float));
                }
                if (!rope)
                    continue;
                for (int64_t d = 0; d < D; d += 2) {
                    float x0 = oh[d], x1 = oh[d + 1];
                    oh[d] = x0 * c[d] - x1 * sv[d];
                    oh[d + 1] = x1 * c[d + 1] + x0 * sv[d + 1];
                }
            }
        }
}

/* Joint attention output (B, L, w) -> stream order (N, w): text rows of
 * every batch, then image rows. */
static void unpack(const run_t *x, const float *src, int64_t w, float *dst)
{
    const geo_t *g = &x->g;
    for (int64_t b = 0; b < g->B; b++) {
        memcpy(dst + b * g->Lt * w, src + b * g->L * w, (size_t)(g->Lt * w) * sizeof(float));
        memcpy(dst + (g->Nt + b * g->Li) * w, src + (b * g->L + g->Lt) * w,
               (size_t)(g->Li * w) * sizeof(float));
    }
}

/* A projection's part (raw output in layout pl, rows x its width) in the
 * attention layout: as is, or converted into Xc. */
static wf_status_t to_attn(run_t *x, const float *raw, const lay_t *pl, int64_t rows,
                           const lay_t *al, const float **ret, int64_t *ret_ld)
{
    const int T = x->g.T;
    if (lay_same(pl, al)) {
        *ret = raw;
        *ret_ld = lay_width(pl, T);
        return WF_OK;
    }
    int64_t w = lay_width(al, T);
    if ((size_t)(rows * w) > x->W.Xc_n)
        return WF_E_INTERNAL;
    float *xc = fp(x, x->W.Xc);
    wf_status_t st = convert(x, raw, lay_width(pl, T), pl, rows, al, 0, xc, w);
    *ret = xc;
    *ret_ld = w;
    return st;
}

/* Attention of the joint q / k / v buffers (Hl heads) into the q region
 * (joint order). */
static wf_status_t attend(run_t *x, int64_t Hl)
{
    const geo_t *g = &x->g;
    void *aws = x->ws + x->W.aws;
    if (!via_cp(g, x->ops)) {
        wf_attn_params_t p = attn_params_of(g, Hl);
        p.q = fp(x, x->W.qj);
        p.k = fp(x, x->W.kj);
        p.v = fp(x, x->W.vj);
        p.out = fp(x, x->W.q);
        return x->ops->attention(x->ctx, &p, aws);
    }
    wf_cp_job_t j = cp_job_of(g, Hl);
    j.q = fp(x, x->W.qj);
    j.k = fp(x, x->W.kj);
    j.v = fp(x, x->W.vj);
    j.out = fp(x, x->W.q);
    wf_cp_group_t cg = {.seq = x->grp->seq, .ring = x->grp->ring,
                        .ulysses = x->grp->ulysses, .ring_degree = g->R,
                        .ulysses_degree = g->U};
    return wf_cp_attention_run(&j, &cg, x->ops, x->ctx, aws, x->W.aws_bytes);
}

/* Projections q / k / v of one or two stream parts -> attention -> the
 * output in stream order in the k region, width Hl * D, layout *ret_al.
 * parts: 1 (single block: all N rows with proj[0..2]) or 2 (double
 * block: txt rows with proj[3..5], img rows with proj[0..2]); `in` is
 * the normalized stream (N, C) full. norms[0..1] for img / all q, k,
 * norms[2..3] for txt q, k. */
static wf_status_t attention(run_t *x, const wf_flux_linear_t *const *proj, int parts,
                             const float *const *norms, lay_t *ret_al)
{
    const geo_t *g = &x->g;
    const int64_t C = g->C;
    const float *nx = fp(x, x->W.nx);
    float *raw[3] = {fp(x, x->W.q), fp(x, x->W.k), fp(x, x->W.v)};
    float *joint[3] = {fp(x, x->W.qj), fp(x, x->W.kj), fp(x, x->W.vj)};
    lay_t full = lay_full(C);
    lay_t al = attn_lay(x, proj, parts == 2 ? 6 : 3);
    int64_t Hl = lay_width(&al, g->T) / g->D;
    wf_status_t st;
    for (int w = 0; w < 3; w++) {
        /* (part rows, first row, projection, its q/k norm) */
        struct {
            int64_t rows, row0;
            const wf_flux_linear_t *L;
            const float *norm;
            bool txt;
        } pp[2];
        int np;
        if (parts == 1) {
            pp[0].rows = g->N;
            pp[0].row0 = 0;
            pp[0].L = proj[w];
            pp[0].norm = w < 2 ? norms[w] : NULL;
            np = 1;
        } else {
            pp[0].rows = g->Nt;
            pp[0].row0 = 0;
            pp[0].L = proj[3 + w];
            pp[0].norm = w < 2 ? norms[2 + w] : NULL;
            pp[0].txt = true;
            pp[1].rows = g->Ni;
            pp[1].row0 = g->Nt;
            pp[1].L = proj[w];
            pp[1].norm = w < 2 ? norms[w] : NULL;
            pp[1].txt = false;
            np = 2;
        }
        for (int k = 0; k < np; k++) {
            float *dst = raw[w] + pp[k].row0 * C; /* room for rows x C */
            lay_t pl;
            st = lin_raw(x, pp[k].L, nx + pp[k].row0 * C, C, &full, pp[k].rows, dst, &pl);
            if (st != WF_OK)
                return st;
            const float *a;
            int64_t lda;
            if ((st = to_attn(x, dst, &pl, pp[k].rows, &al, &a, &lda)) != WF_OK)
                return st;
            if (parts == 1) {
                /* stream order: txt rows then img rows */
                pack(x, a, lda, true, Hl, pp[k].norm, w < 2, joint[w]);
                pack(x, a + g->Nt * lda, lda, false, Hl, pp[k].norm, w < 2, joint[w]);
            } else {
                pack(x, a, lda, pp[k].txt, Hl, pp[k].norm, w < 2, joint[w]);
            }
        }
    }
    if ((st = attend(x, Hl)) != WF_OK)
        return st;
    unpack(x, fp(x, x->W.q), Hl * g->D, fp(x, x->W.k));
    *ret_al = al;
    return WF_OK;
}

/* ---- blocks ------------------------------------------------------------------------------ */

/* diffusers' FluxTransformerBlock on the stream. AdaLN-Zero chunks:
 * shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp. */
static wf_status_t double_block(run_t *x, const wf_flux_double_t *d)
{
    const geo_t *g = &x->g;
    const int64_t B = g->B, C = g->C, Nt = g->Nt, Ni = g->Ni;
    float *S = fp(x, x->W.S), *nx = fp(x, x->W.nx), *lo = fp(x, x->W.lo);
    float *mi = fp(x, x->W.modA), *mt = fp(x, x->W.modB), *semb = fp(x, x->W.semb);
    float *hid = fp(x, x->W.hid), *o = fp(x, x->W.k);
    lay_t lc = lay_full(C);
    wf_status_t st;
    if ((st = lin_full(x, &d->norm1, semb, C, &lc, B, mi)) != WF_OK ||
        (st = lin_full(x, &d->norm1_context, semb, C, &lc, B, mt)) != WF_OK)
        return st;
    ln_mod(S, nx, B, g->Lt, C, mt, 6 * C, 0, C);
    ln_mod(S + Nt * C, nx + Nt * C, B, g->Li, C, mi, 6 * C, 0, C);
    const wf_flux_linear_t *proj[6] = {&d->to_q, &d->to_k, &d->to_v,
                                       &d->add_q, &d->add_k, &d->add_v};
    const float *norms[4] = {d->norm_q, d->norm_k, d->norm_added_q, d->norm_added_k};
    lay_t al;
    if ((st = attention(x, proj, 2, norms, &al)) != WF_OK)
        return st;
    int64_t wa = lay_width(&al, g->T);
    if ((st = lin_full(x, &d->to_out, o + Nt * wa, wa, &al, Ni, lo + Nt * C)) != WF_OK ||
        (st = lin_full(x, &d->to_add_out, o, wa, &al, Nt, lo)) != WF_OK)
        return st;
    gate_add(S + Nt * C, lo + Nt * C, B, g->Li, C, mi, 6 * C, 2 * C);
    gate_add(S, lo, B, g->Lt, C, mt, 6 * C, 2 * C);
    /* feed-forwards: image stream, then text stream */
    for (int part = 0; part < 2; part++) {
        bool img = part == 0;
        int64_t rows = img ? Ni : Nt, per = img ? g->Li : g->Lt, r0 = img ? Nt : 0;
        const float *mod = img ? mi : mt;
        const wf_flux_linear_t *f0 = img ? &d->ff0 : &d->ffc0, *f2 = img ? &d->ff2 : &d->ffc2;
        ln_mod(S + r0 * C, nx + r0 * C, B, per, C, mod, 6 * C, 3 * C, 4 * C);
        lay_t hl;
        if ((st = lin_raw(x, f0, nx + r0 * C, C, &lc, rows, hid, &hl)) != WF_OK)
            return st;
        int64_t hw = lay_width(&hl, g->T);
        gelu_tanh_n(hid, rows * hw);
        if ((st = lin_full(x, f2, hid, hw, &hl, rows, lo + r0 * C)) != WF_OK)
            return st;
        gate_add(S + r0 * C, lo + r0 * C, B, per, C, mod, 6 * C, 5 * C);
    }
    return WF_OK;
}

/* diffusers' FluxSingleTransformerBlock on the whole stream. Chunks:
 * shift, scale, gate. proj_out takes cat([attention, mlp]). */
static wf_status_t single_block(run_t *x, const wf_flux_single_t *sb)
{
    const geo_t *g = &x->g;
    const int T = g->T;
    const int64_t B = g->B, C = g->C, M = g->M, N = g->N, Nt = g->Nt;
    float *S = fp(x, x->W.S), *nx = fp(x, x->W.nx), *lo = fp(x, x->W.lo);
    float *mod = fp(x, x->W.modA), *semb = fp(x, x->W.semb);
    float *hid = fp(x, x->W.hid), *o = fp(x, x->W.k), *cat = fp(x, x->W.cat);
    lay_t lc = lay_full(C);
    wf_status_t st;
    if ((st = lin_full(x, &sb->norm, semb, C, &lc, B, mod)) != WF_OK)
        return st;
    ln_mod(S, nx, B, g->Lt, C, mod, 3 * C, 0, C);
    ln_mod(S + Nt * C, nx + Nt * C, B, g->Li, C, mod, 3 * C, 0, C);
    lay_t ml;
    if ((st = lin_raw(x, &sb->proj_mlp, nx, C, &lc, N, hid, &ml)) != WF_OK)
        return st;
    gelu_tanh_n(hid, N * lay_width(&ml, T));
    const wf_flux_linear_t *proj[3] = {&sb->to_q, &sb->to_k, &sb->to_v};
    const float *norms[2] = {sb->norm_q, sb->norm_k};
    lay_t al;
    if ((st = attention(x, proj, 1, norms, &al)) != WF_OK)
        return st;
    /* cat([attn (C), mlp (M)]) in the layout proj_out takes: its pieces
     * ascend, so the attention columns come first in every row */
    lay_t need = lay_of(&sb->proj_out.place, true, T);
    int64_t ps[WF_TP_MAX_BLOCKS], pn[WF_TP_MAX_BLOCKS], wo = 0, wm = 0;
    int n = win_pieces(&need, x->t, T, 0, C, ps, pn);
    for (int k = 0; k < n; k++)
        wo += pn[k];
    n = win_pieces(&need, x->t, T, C, M, ps, pn);
    for (int k = 0; k < n; k++)
        wm += pn[k];
    int64_t ldc = wo + wm;
    if (ldc != sb->proj_out.place.local_in)
        return WF_E_INTERNAL;
    if ((st = convert(x, o, lay_width(&al, T), &al, N, &need, 0, cat, ldc)) != WF_OK ||
        (st = convert(x, hid, lay_width(&ml, T), &ml, N, &need, C, cat + wo, ldc)) != WF_OK)
        return st;
    if ((st = lin_full(x, &sb->proj_out, cat, ldc, &need, N, lo)) != WF_OK)
        return st;
    gate_add(S, lo, B, g->Lt, C, mod, 3 * C, 2 * C);
    gate_add(S + Nt * C, lo + Nt * C, B, g->Li, C, mod, 3 * C, 2 * C);
    return WF_OK;
}

/* ---- the forward ------------------------------------------------------------------------- */

/* norm_out (AdaLayerNormContinuous: scale, then shift) and proj_out of
 * the image rows, then every seq rank's output to the root, which writes
 * (B, S_img, OC) in out_dtype. Only the tp rank 0 ranks gather. */
static wf_status_t finish(run_t *x)
{
    const geo_t *g = &x->g;
    const int64_t B = g->B, C = g->C, Nt = g->Nt, OC = g->OC;
    float *S = fp(x, x->W.S), *nx = fp(x, x->W.nx), *mod = fp(x, x->W.modA);
    float *out = fp(x, x->W.out);
    lay_t lc = lay_full(C);
    wf_status_t st = lin_full(x, &x->s->norm_out, fp(x, x->W.semb), C, &lc, B, mod);
    if (st != WF_OK)
        return st;
    ln_mod(S + Nt * C, nx + Nt * C, B, g->Li, C, mod, 2 * C, C, 0);
    if ((st = lin_full(x, &x->s->proj_out, nx + Nt * C, C, &lc, g->Ni, out)) != WF_OK)
        return st;
    if (x->t != 0)
        return WF_OK;
    const float *src = out;
    size_t rb = (size_t)(g->Ni * OC) * sizeof(float);
    if (g->P > 1) {
        size_t *counts = (size_t *)(void *)(x->ws + x->W.meta), *displs = counts + g->P;
        for (int j = 0; j < g->P; j++) {
            counts[j] = rb;
            displs[j] = (size_t)j * rb;
        }
        float *outg = x->root ? fp(x, x->W.outg) : NULL;
        st = wf_comm_gatherv(x->grp->seq, out, rb, outg, counts, displs, 0);
        if (st != WF_OK)
            return st;
        src = outg;
    }
    if (!x->root)
        return WF_OK;
    const size_t eo = es_of(x->job->out_dtype);
    unsigned char *dst = x->job->output;
    for (int j = 0; j < g->P; j++)
        for (int64_t b = 0; b < B; b++)
            wf_convert_from_f32(dst + (size_t)((b * g->S_img + j * g->Li) * OC) * eo,
                                x->job->out_dtype, src + (j * g->Ni + b * g->Li) * OC,
                                (size_t)(g->Li * OC));
    return WF_OK;
}

static void abort_world(const wf_flux_group_t *grp)
{
    wf_comm_t *c = grp->tp      ? grp->tp
                   : grp->seq   ? grp->seq
                   : grp->ring  ? grp->ring
                                : grp->ulysses;
    if (c)
        wf_comm_abort(c);
}

/* A group matching the degrees: each communicator present iff its
 * degree (or R * U for seq) is above 1, with that size. */
static bool group_ok(const wf_flux_group_t *grp)
{
    int T = grp->tp_degree, R = grp->ring_degree, U = grp->ulysses_degree;
    const struct {
        wf_comm_t *c;
        int n;
    } cs[4] = {{grp->tp, T}, {grp->seq, R * U}, {grp->ring, R}, {grp->ulysses, U}};
    for (int k = 0; k < 4; k++) {
        if (cs[k].n > 1 ? (!cs[k].c || wf_comm_size(cs[k].c) != cs[k].n)
                        : (cs[k].c && wf_comm_size(cs[k].c) != 1))
            return false;
    }
    return true;
}

wf_status_t wf_flux_forward_run(const wf_flux_shard_t *shard,
                                const wf_flux_job_t *job,
                                const wf_flux_group_t *group,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, void *workspace,
                                size_t bytes)
{
    /* validation every rank computes alike: fails everywhere, no abort */
    if (!shard || !job || !group || !ops || !ops->attention)
        return WF_E_BAD_ARGUMENT;
    const int T = group->tp_degree, R = group->ring_degree, U = group->ulysses_degree;
    if (wf_flux_forward_check(&shard->cfg, job, T, R, U, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;

    /* this rank's own arguments: a failure aborts the world */
    run_t x;
    memset(&x, 0, sizeof x);
    x.s = shard;
    x.cfg = &shard->cfg;
    x.job = job;
    x.grp = group;
    x.ops = ops;
    x.ctx = ctx;
    x.g = geo_of(&shard->cfg, job, T, R, U);
    x.ws = workspace;
    wf_status_t st = WF_E_BAD_ARGUMENT;
    if (!group_ok(group))
        goto fail;
    x.t = T > 1 ? wf_comm_rank(group->tp) : 0;
    x.i = R * U > 1 ? wf_comm_rank(group->seq) : 0;
    x.root = x.t == 0 && x.i == 0;
    if (shard->tp != T || shard->tp_rank != x.t)
        goto fail;
    szc_t c = {false};
    size_t aws = attn_ws(&c, &x.g, ops);
    x.W = ws_layout(&c, &x.g, x.i == 0, x.root, aws);
    if (c.overflow || !workspace || ((uintptr_t)workspace & 63u) != 0 || bytes < x.W.total)
        goto fail;
    if (x.root && (!job->hidden_states || !job->encoder_hidden_states ||
                   !job->pooled_projections || !job->timestep || !job->img_ids ||
                   !job->txt_ids || (job->has_guidance && !job->guidance) || !job->output))
        goto fail;

    const geo_t *g = &x.g;
    const float *rec = fp(&x, x.W.in);
    float *S = fp(&x, x.W.S);
    lay_t lin_in = lay_full(g->IN), lj = lay_full(g->J);
    if ((st = distribute(&x)) != WF_OK)
        goto fail;
    rope_tables(&x);
    if ((st = lin_full(&x, &shard->x_embedder, rec + x.W.rec.hid, g->IN, &lin_in, g->Ni,
                       S + g->Nt * g->C)) != WF_OK ||
        (st = embed_time(&x)) != WF_OK ||
        (st = lin_full(&x, &shard->context_embedder, rec + x.W.rec.enc, g->J, &lj, g->Nt,
                       S)) != WF_OK)
        goto fail;
    for (uint32_t b = 0; b < x.cfg->num_layers; b++)
        if ((st = double_block(&x, &shard->dbl[b])) != WF_OK)
            goto fail;
    for (uint32_t b = 0; b < x.cfg->num_single_layers; b++)
        if ((st = single_block(&x, &shard->sgl[b])) != WF_OK)
            goto fail;
    if ((st = finish(&x)) != WF_OK)
        goto fail;
    return WF_OK;
fail:
    abort_world(group);
    return st;
}
