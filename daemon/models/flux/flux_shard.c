/* flux_shard.c — the modules of a FLUX config (the module table,
 * modelfiles/flux/flux_modules.h) walked in state_dict order, each mapped
 * to its slot of a shard, and what is done with them: the tp plan check
 * (wf_flux_plan_check), a shard's size and the shards themselves, cut
 * from the host copy for one tp rank (flux_shard.h): f32 host memory for
 * the CPU backend, one resident block in the checkpoint's dtype for a
 * device backend (two walks: measure, then copy).
 *
 * Not here: running the model (flux_forward.c and its parts).
 */
#include "flux_shard.h"
#include "flux_run.h"
#include "flux_modules.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "tensor.h"

/* ---- the modules of a config ------------------------------------------- */

/* Where a module lives in a shard: byte offset + 1 of its slot (a
 * wf_linear_t, or a norm's float *) in wf_flux_shard_t (model
 * modules), wf_flux_double_t or wf_flux_single_t (by its scope); 0: no
 * slot (a table row the shard does not hold: a bug). */
#define MS(f) (offsetof(wf_flux_shard_t, f) + 1)
#define DS(f) (offsetof(wf_flux_double_t, f) + 1)
#define SS(f) (offsetof(wf_flux_single_t, f) + 1)
static const size_t slot_of[WF_FLUX_MODULE_COUNT] = {
    [WF_FLUX_TIME_L1] = MS(time_l1),
    [WF_FLUX_TIME_L2] = MS(time_l2),
    [WF_FLUX_GUIDANCE_L1] = MS(guid_l1),
    [WF_FLUX_GUIDANCE_L2] = MS(guid_l2),
    [WF_FLUX_TEXT_L1] = MS(text_l1),
    [WF_FLUX_TEXT_L2] = MS(text_l2),
    [WF_FLUX_CONTEXT_EMBEDDER] = MS(context_embedder),
    [WF_FLUX_X_EMBEDDER] = MS(x_embedder),
    [WF_FLUX_D_NORM1] = DS(norm1),
    [WF_FLUX_D_NORM1_CONTEXT] = DS(norm1_context),
    [WF_FLUX_D_NORM_Q] = DS(norm_q),
    [WF_FLUX_D_NORM_K] = DS(norm_k),
    [WF_FLUX_D_TO_Q] = DS(to_q),
    [WF_FLUX_D_TO_K] = DS(to_k),
    [WF_FLUX_D_TO_V] = DS(to_v),
    [WF_FLUX_D_TO_OUT] = DS(to_out),
    [WF_FLUX_D_NORM_ADDED_Q] = DS(norm_added_q),
    [WF_FLUX_D_NORM_ADDED_K] = DS(norm_added_k),
    [WF_FLUX_D_ADD_Q] = DS(add_q),
    [WF_FLUX_D_ADD_K] = DS(add_k),
    [WF_FLUX_D_ADD_V] = DS(add_v),
    [WF_FLUX_D_TO_ADD_OUT] = DS(to_add_out),
    [WF_FLUX_D_FF0] = DS(ff0),
    [WF_FLUX_D_FF2] = DS(ff2),
    [WF_FLUX_D_FFC0] = DS(ffc0),
    [WF_FLUX_D_FFC2] = DS(ffc2),
    [WF_FLUX_S_NORM] = SS(norm),
    [WF_FLUX_S_PROJ_MLP] = SS(proj_mlp),
    [WF_FLUX_S_PROJ_OUT] = SS(proj_out),
    [WF_FLUX_S_NORM_Q] = SS(norm_q),
    [WF_FLUX_S_NORM_K] = SS(norm_k),
    [WF_FLUX_S_TO_Q] = SS(to_q),
    [WF_FLUX_S_TO_K] = SS(to_k),
    [WF_FLUX_S_TO_V] = SS(to_v),
    [WF_FLUX_NORM_OUT] = MS(norm_out),
    [WF_FLUX_PROJ_OUT] = MS(proj_out),
};
#undef MS
#undef DS
#undef SS

/* Called once per module, in state_dict order (flux_modules.h). With a
 * shard, `lin` (a linear) or `norm` (a norm weight) point at its slot. */
typedef wf_status_t (*visit_fn)(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                                float **norm);

/* A walk: the visitor, its argument, the shard (or NULL). */
typedef struct walk_state {
    wf_flux_shard_t *s;
    visit_fn fn;
    void *arg;
} walk_state_t;

static wf_status_t walk_visit(void *arg, const wf_flux_module_t *m)
{
    walk_state_t *w = arg;
    if (!w->s)
        return w->fn(w->arg, m, NULL, NULL);
    if ((unsigned)m->id >= WF_FLUX_MODULE_COUNT || slot_of[m->id] == 0)
        return WF_E_INTERNAL;
    unsigned char *base = m->scope == WF_FLUX_SCOPE_DOUBLE   ? (unsigned char *)&w->s->dbl[m->block]
                          : m->scope == WF_FLUX_SCOPE_SINGLE ? (unsigned char *)&w->s->sgl[m->block]
                                                             : (unsigned char *)w->s;
    void *slot = base + slot_of[m->id] - 1;
    if (m->kind == WF_FLUX_NORM)
        return w->fn(w->arg, m, NULL, slot);
    return w->fn(w->arg, m, slot, NULL);
}

/* Every module of a model with config cfg; s may be NULL (no slots).
 * Stops at the first error. */
static wf_status_t walk(const wf_flux_config_t *cfg, wf_flux_shard_t *s, visit_fn fn,
                        void *arg)
{
    walk_state_t w = {s, fn, arg};
    return wf_flux_modules_walk(cfg, walk_visit, &w);
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

static wf_status_t pcheck_visit(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                                float **norm)
{
    (void)lin;
    (void)norm;
    pcheck_t *pc = arg;
    const wf_tp_plan_t *plan = pc->plan;
    const char *module = m->name;
    for (uint32_t r = 0; r < plan->n; r++) {
        if (!wf_tp_glob_match(plan->rules[r].glob, module))
            continue;
        if (m->kind == WF_FLUX_NORM)
            return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                                  "tp_plan rule '%s' matches '%s', a norm weight: only linear "
                                  "layers can be sharded (norm weights stay replicated)",
                                  plan->rules[r].glob, module);
        pc->matched[r] = true;
    }
    if (m->kind == WF_FLUX_NORM)
        return WF_OK;
    const int64_t D = pc->cfg->attention_head_dim, H = pc->cfg->num_attention_heads;
    int ri = wf_tp_plan_find(plan, module);
    wf_tp_style_t style = ri >= 0 ? plan->rules[ri].style : WF_TP_REPLICATED;
    bool splits_out = style == WF_TP_COLWISE || style == WF_TP_PACKED_COLWISE;
    /* diffusers checks the heads before it shards anything */
    if (m->heads && splits_out && H % pc->tp != 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                              "`tp_degree` (%d) must divide the number of attention heads "
                              "(%" PRId64 ").", pc->tp, H);
    wf_tp_place_t pl;
    if (wf_tp_place(plan, module, m->out, m->in, pc->tp, &pl, pc->err, pc->err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (m->heads && splits_out && pc->tp > 1) {
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

/* Device pieces are 256-byte aligned (dev_alloc's alignment). */
#define DEV_ALIGN 256u

static uint64_t dev_round(uint64_t b) { return (b + DEV_ALIGN - 1) & ~(uint64_t)(DEV_ALIGN - 1); }

/* Bytes of a shard, by walk: f32 elements (CPU) or rounded device
 * pieces with weights of weight_dtype (device). */
typedef struct pbytes {
    const wf_tp_plan_t *plan; /* the plan */
    int tp;                   /* ranks */
    bool dev;                 /* device figure */
    size_t wes;               /* weight element size (device) */
    uint64_t bytes;           /* so far */
} pbytes_t;

static uint64_t bias_elems(const wf_tp_place_t *p)
{
    bool split = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    return (uint64_t)(split ? p->local_out : p->out);
}

static wf_status_t pbytes_visit(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                                float **norm)
{
    (void)lin;
    (void)norm;
    pbytes_t *pb = arg;
    if (m->kind == WF_FLUX_NORM) {
        uint64_t b = (uint64_t)m->out * sizeof(float);
        pb->bytes += pb->dev ? dev_round(b) : b;
        return WF_OK;
    }
    wf_tp_place_t pl;
    if (wf_tp_place(pb->plan, m->name, m->out, m->in, pb->tp, &pl, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    uint64_t w = (uint64_t)pl.local_out * (uint64_t)pl.local_in;
    uint64_t b = m->kind == WF_FLUX_LINEAR ? bias_elems(&pl) * sizeof(float) : 0;
    if (pb->dev)
        pb->bytes += dev_round(w * pb->wes) + dev_round(b);
    else
        pb->bytes += w * sizeof(float) + b;
    return WF_OK;
}

static uint64_t shard_bytes(const wf_flux_config_t *cfg, const wf_tp_plan_t *plan, int tp,
                            bool dev, wf_dtype_t wdt)
{
    if (wf_flux_plan_check(cfg, plan, tp, true, NULL, 0) != WF_OK)
        return 0;
    pbytes_t pb = {plan, tp, dev, wf_dtype_size(wdt), 0};
    if (dev && pb.wes == 0)
        return 0;
    if (walk(cfg, NULL, pbytes_visit, &pb) != WF_OK)
        return 0;
    /* every rank's shard has the same size: all splits are even */
    return pb.bytes;
}

uint64_t wf_flux_shard_bytes(const wf_flux_config_t *cfg,
                             const wf_tp_plan_t *plan, int tp)
{
    return shard_bytes(cfg, plan, tp, false, WF_DTYPE_F32);
}

uint64_t wf_flux_shard_bytes_dev(const wf_flux_config_t *cfg,
                                 const wf_tp_plan_t *plan, int tp,
                                 wf_dtype_t weight_dtype)
{
    return shard_bytes(cfg, plan, tp, true, weight_dtype);
}

/* State of a shard build walk. */
typedef struct build {
    const wf_model_host_t *host; /* the host copy */
    const wf_tp_plan_t *plan;   /* the plan */
    int tp, rank;               /* ranks, this one */
    wf_flux_shard_t *s;         /* the shard being cut */
    char *err;                  /* message buffer */
    size_t err_len;             /* its size */
    /* device shards */
    bool dev;                   /* building on a device */
    bool measure;               /* first pass: sizes only */
    uint64_t off;               /* next free byte of the block */
    uint64_t stage_need;        /* largest staged piece (first pass) */
    unsigned char *stage;       /* host staging buffer (second pass) */
    bool stage_busy;            /* a copy from it may still run */
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
static const wf_host_tensor_t *host_tensor(build_t *bd, const char *name, int rank,
                                                int64_t d0, int64_t d1, bool optional,
                                                wf_status_t *ret_st)
{
    const wf_host_tensor_t *t = wf_model_host_find(bd->host, name);
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
        !wf_dtype_size(t->dtype) || !t->data) {
        wf_errf_status(WF_E_BAD_SHAPE, bd->err, bd->err_len,
                       "host tensor '%s' has the wrong shape or dtype", name);
        *ret_st = WF_E_BAD_SHAPE;
        return NULL;
    }
    return t;
}

/* ---- device pieces ---------------------------------------------------------- */

/* The next piece of `bytes` of the device block (first pass: counted). */
static unsigned char *dev_take(build_t *bd, uint64_t bytes)
{
    unsigned char *p = bd->measure ? NULL : (unsigned char *)bd->s->dev + bd->off;
    bd->off += dev_round(bytes);
    return p;
}

/* The host staging buffer for `bytes`, once the copy from it queued last
 * has finished (first pass: its size is recorded, NULL). */
static unsigned char *stage_get(build_t *bd, uint64_t bytes, wf_status_t *ret_st)
{
    *ret_st = WF_OK;
    if (bd->measure) {
        if (bytes > bd->stage_need)
            bd->stage_need = bytes;
        return NULL;
    }
    if (bd->stage_busy) {
        *ret_st = bd->s->ops->synchronize(bd->s->ctx);
        bd->stage_busy = false;
    }
    return bd->stage;
}

/* Copy `bytes` host -> the device piece (second pass only). */
static wf_status_t dev_put(build_t *bd, void *dst, const void *src, uint64_t bytes,
                           bool staged)
{
    if (bd->measure || bytes == 0)
        return WF_OK;
    wf_status_t st = bd->s->ops->copy_h2d(bd->s->ctx, dst, src, (size_t)bytes);
    if (st == WF_OK && staged)
        bd->stage_busy = true;
    if (st != WF_OK)
        wf_errf_status(st, bd->err, bd->err_len, "copying the shard to the %s device failed",
                       bd->s->ops->name);
    return st;
}

/* n f32 values converted from `src` (dtype dt) into a new device piece. */
static wf_status_t dev_f32(build_t *bd, const void *const *src, const uint64_t *n, int parts,
                           wf_dtype_t dt, float **ret)
{
    uint64_t total = 0;
    for (int k = 0; k < parts; k++)
        total += n[k];
    unsigned char *d = dev_take(bd, total * sizeof(float));
    wf_status_t st;
    float *h = (float *)(void *)stage_get(bd, total * sizeof(float), &st);
    if (st != WF_OK || bd->measure) {
        *ret = (float *)(void *)d;
        return st;
    }
    float *o = h;
    for (int k = 0; k < parts; k++) {
        wf_convert_to_f32(o, src[k], dt, (size_t)n[k]);
        o += n[k];
    }
    *ret = (float *)(void *)d;
    return dev_put(bd, d, h, total * sizeof(float), true);
}

/* A linear's weight (contiguous local_out x local_in, its dtype) and
 * bias on the device. */
static wf_status_t dev_linear(build_t *bd, const wf_host_tensor_t *w,
                              const wf_host_tensor_t *b, wf_linear_t *lin,
                              const int64_t *ps, const int64_t *pl)
{
    const wf_tp_place_t *p = &lin->place;
    const int64_t in = p->in;
    const size_t es = wf_dtype_size(w->dtype);
    const unsigned char *wd = w->data;
    bool on_rows = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    bool on_cols = p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
    bool whole = (!on_rows && !on_cols) || bd->tp == 1;
    uint64_t wbytes = (uint64_t)p->local_out * (uint64_t)p->local_in * es;
    unsigned char *d = dev_take(bd, wbytes);
    wf_status_t st = WF_OK;
    lin->w_dtype = w->dtype;
    lin->w = NULL;
    lin->w_view = true;
    lin->ldw = p->local_in;
    lin->nwb = 1;
    lin->wb[0] = d;
    lin->wbw[0] = p->local_in;
    if (whole) {
        st = dev_put(bd, d, wd, wbytes, false);
    } else if (on_rows) {
        /* whole rows of each piece: contiguous in the host copy */
        uint64_t o = 0;
        for (uint32_t k = 0; k < p->n_blocks && st == WF_OK; k++) {
            uint64_t n = (uint64_t)(pl[k] * in) * es;
            st = dev_put(bd, bd->measure ? NULL : d + o, wd + (size_t)(ps[k] * in) * es, n, false);
            o += n;
        }
    } else {
        /* every row, the rank's column pieces, gathered on the host */
        unsigned char *h = stage_get(bd, wbytes, &st);
        if (st == WF_OK && !bd->measure) {
            unsigned char *o = h;
            for (int64_t r = 0; r < p->out; r++)
                for (uint32_t k = 0; k < p->n_blocks; k++) {
                    memcpy(o, wd + (size_t)(r * in + ps[k]) * es, (size_t)pl[k] * es);
                    o += (size_t)pl[k] * es;
                }
            st = dev_put(bd, d, h, wbytes, true);
        }
    }
    if (st != WF_OK || !b)
        return st;
    const unsigned char *bdat = b->data;
    const size_t bes = wf_dtype_size(b->dtype);
    const void *src[WF_TP_MAX_BLOCKS];
    uint64_t n[WF_TP_MAX_BLOCKS];
    int parts = 1;
    if (on_rows && !whole) {
        for (uint32_t k = 0; k < p->n_blocks; k++) {
            src[k] = bdat + (size_t)ps[k] * bes;
            n[k] = (uint64_t)pl[k];
        }
        parts = (int)p->n_blocks;
    } else {
        src[0] = bdat;
        n[0] = (uint64_t)p->out;
    }
    lin->b_view = true;
    return dev_f32(bd, src, n, parts, b->dtype, &lin->b);
}

/* ---- host (CPU) pieces -------------------------------------------------------- */

/* A linear's weight and bias in f32 on the host: views of an f32 host
 * copy where the pieces allow it, else owned copies. */
static wf_status_t cpu_linear(build_t *bd, const wf_host_tensor_t *w,
                              const wf_host_tensor_t *b, wf_linear_t *lin,
                              const int64_t *ps, const int64_t *pl)
{
    const wf_tp_place_t *p = &lin->place;
    const int64_t out = p->out, in = p->in;
    const unsigned char *wd = w->data;
    const size_t es = wf_dtype_size(w->dtype);
    bool on_rows = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    bool on_cols = p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
    /* f32: point into the host copy where the pieces allow it */
    bool whole = (!on_rows && !on_cols) || bd->tp == 1; /* tp 1: every piece is all */
    bool view_w = w->dtype == WF_DTYPE_F32 &&
                  (whole || on_cols || (on_rows && p->n_blocks == 1));
    bool view_b = b && b->dtype == WF_DTYPE_F32 &&
                  (!on_rows || p->n_blocks == 1 || bd->tp == 1);
    lin->w_dtype = WF_DTYPE_F32;
    lin->ldw = p->local_in;
    lin->nwb = 1;
    if (view_w && on_cols && !whole) {
        /* one strided view per column block, rows `in` floats apart */
        lin->w_view = true;
        lin->ldw = in;
        lin->nwb = p->n_blocks;
        for (uint32_t k = 0; k < p->n_blocks; k++) {
            lin->wb[k] = wd + (size_t)ps[k] * es;
            lin->wbw[k] = pl[k];
        }
    } else if (view_w) {
        lin->w_view = true;
        lin->ldw = in;          /* == local_in: whole rows */
        lin->wb[0] = wd + (whole ? 0 : (size_t)(ps[0] * in) * es);
    } else {
        lin->w = falloc((uint64_t)p->local_out * (uint64_t)p->local_in);
        if (!lin->w)
            return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "out of memory");
        lin->wb[0] = lin->w;
    }
    if (lin->nwb == 1)
        lin->wbw[0] = p->local_in;
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
    if (!b)
        return WF_OK;
    uint64_t nb = bias_elems(p);
    const unsigned char *bdat = b->data;
    const size_t bes = wf_dtype_size(b->dtype);
    bd->s->bytes += nb * sizeof(float);
    if (view_b) {
        lin->b = (float *)(void *)(uintptr_t)(bdat + (on_rows ? (size_t)ps[0] * bes : 0));
        lin->b_view = true;
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
    return WF_OK;
}

static wf_status_t build_visit(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                               float **norm)
{
    build_t *bd = arg;
    const char *module = m->name;
    const int64_t out = m->out, in = m->in;
    char name[WF_TENSOR_SPEC_NAME_MAX + 8];
    wf_status_t st;
    snprintf(name, sizeof name, "%s.weight", module);
    if (m->kind == WF_FLUX_NORM) {
        const wf_host_tensor_t *t = host_tensor(bd, name, 1, out, 0, false, &st);
        if (!t)
            return st;
        if (bd->dev) {
            const void *src[1] = {t->data};
            uint64_t n[1] = {(uint64_t)out};
            return dev_f32(bd, src, n, 1, t->dtype, norm);
        }
        if (!(*norm = falloc((uint64_t)out)))
            return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "out of memory");
        wf_convert_to_f32(*norm, t->data, t->dtype, (size_t)out);
        bd->s->bytes += (uint64_t)out * sizeof(float);
        return WF_OK;
    }
    const wf_host_tensor_t *w = host_tensor(bd, name, 2, out, in, false, &st);
    if (!w)
        return st;
    snprintf(name, sizeof name, "%s.bias", module);
    const wf_host_tensor_t *b =
        m->kind == WF_FLUX_LINEAR ? host_tensor(bd, name, 1, out, 0, true, &st) : NULL;
    if (st != WF_OK)
        return st;
    wf_tp_place_t *p = &lin->place;
    if (wf_tp_place(bd->plan, module, out, in, bd->tp, p, bd->err, bd->err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    int64_t ps[WF_TP_MAX_BLOCKS], pl[WF_TP_MAX_BLOCKS];
    wf_tp_pieces(p, bd->rank, bd->tp, ps, pl);
    return bd->dev ? dev_linear(bd, w, b, lin, ps, pl) : cpu_linear(bd, w, b, lin, ps, pl);
}

/* Frees every host buffer of a CPU shard a walk reaches. */
static wf_status_t free_visit(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                              float **norm)
{
    (void)arg;
    (void)m;
    if (lin)
        wf_linear_free(lin);
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
    if (x->ops && x->ops->mem_alloc) {
        /* device shard: one block, nothing host-owned; kernels of a
         * failed job may still read it */
        if (x->dev) {
            if (x->ops->synchronize)
                (void)x->ops->synchronize(x->ctx);
            x->ops->mem_free(x->ctx, x->dev);
        }
    } else if (x->dbl && x->sgl) {
        walk(&x->cfg, x, free_visit, NULL);
    }
    free(x->dbl);
    free(x->sgl);
    free(x);
    *s = NULL;
}

static void human(uint64_t b, char *buf, size_t len)
{
    if (b >= (UINT64_C(1) << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (double)(UINT64_C(1) << 30));
    else
        snprintf(buf, len, "%.2f MiB", (double)b / (double)(UINT64_C(1) << 20));
}

/* The device shard: a first walk measures the block and the staging
 * buffer, then the block is allocated (refused before a byte is copied
 * when it does not fit), then a second walk copies. */
static wf_status_t build_dev(build_t *bd)
{
    wf_flux_shard_t *s = bd->s;
    const wf_backend_ops_t *ops = s->ops;
    if (!ops->copy_h2d || !ops->synchronize || !ops->mem_free)
        return wf_errf_status(WF_E_BAD_ARGUMENT, bd->err, bd->err_len,
                              "the %s backend has resident memory but not its copies", ops->name);
    bd->measure = true;
    bd->off = 0;
    wf_status_t st = walk(&s->cfg, s, build_visit, bd);
    if (st != WF_OK)
        return st;
    uint64_t need = bd->off;
    if (need > SIZE_MAX || bd->stage_need > SIZE_MAX / 2)
        return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "shard too large");
    st = ops->mem_alloc(s->ctx, (size_t)(need ? need : DEV_ALIGN), &s->dev);
    if (st != WF_OK) {
        uint64_t total = 0, avail = 0;
        ops->memory_info(s->ctx, &total, &avail);
        char a[32], b[32], c[32];
        human(need, a, sizeof a);
        human(avail, b, sizeof b);
        human(total, c, sizeof c);
        return wf_errf_status(st, bd->err, bd->err_len,
                              "tp rank %d's shard needs %s of %s device memory, %s free of %s; "
                              "nothing was copied", bd->rank, a, ops->name, b, c);
    }
    s->bytes = need;
    bd->stage = bd->stage_need ? aligned_alloc(64, (size_t)((bd->stage_need + 63) & ~(uint64_t)63))
                               : NULL;
    if (bd->stage_need && !bd->stage)
        return wf_errf_status(WF_E_NO_MEMORY, bd->err, bd->err_len, "out of host memory");
    if (ops->host_register && bd->stage)
        (void)ops->host_register(bd->stage, (size_t)bd->stage_need);
    bd->measure = false;
    bd->off = 0;
    st = walk(&s->cfg, s, build_visit, bd);
    /* every copy done before the staging buffer goes and the shard is used */
    wf_status_t ss = ops->synchronize(s->ctx);
    if (st == WF_OK && ss != WF_OK)
        st = wf_errf_status(ss, bd->err, bd->err_len, "copying the shard to the %s device failed",
                            ops->name);
    if (ops->host_register && bd->stage && ops->host_unregister)
        ops->host_unregister(bd->stage);
    free(bd->stage);
    bd->stage = NULL;
    return st;
}

wf_status_t wf_flux_shard_build(const wf_model_host_t *host,
                                const wf_tp_plan_t *plan, int tp, int tp_rank,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_flux_shard_t **ret,
                                char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!host || !plan || !ret || tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "bad shard arguments (tp %d, rank %d)",
                              tp, tp_rank);
    bool dev = ops && ops->mem_alloc;
    wf_flux_shard_t *s = calloc(1, sizeof *s);
    if (!s)
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    s->cfg = *wf_flux_cfg(&host->cfg);
    s->tp = tp;
    s->tp_rank = tp_rank;
    s->ops = dev ? ops : NULL;
    s->ctx = dev ? ctx : NULL;
    /* one spare element so that a model without a block kind still gets
     * a non-NULL array (free_visit then knows the shard is whole) */
    s->dbl = calloc((size_t)s->cfg.num_layers + 1, sizeof *s->dbl);
    s->sgl = calloc((size_t)s->cfg.num_single_layers + 1, sizeof *s->sgl);
    if (!s->dbl || !s->sgl) {
        wf_flux_shard_free(&s);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    }
    build_t bd = {host, plan, tp, tp_rank, s, err, err_len, dev, false, 0, 0, NULL, false};
    wf_status_t st = dev ? build_dev(&bd) : walk(&s->cfg, s, build_visit, &bd);
    if (st != WF_OK) {
        wf_flux_shard_free(&s);
        return st;
    }
    *ret = s;
    return WF_OK;
}
