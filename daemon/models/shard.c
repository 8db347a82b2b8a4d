/* shard.c — a rank's shard cut from the host copy by a family's walk
 * (shard.h): the pieces on the CPU or in one device block, and the size
 * of a shard without a host copy. */
#include "models/shard.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "tensor.h"

/* Device pieces are 256-byte aligned (dev_alloc's alignment). */
#define DEV_ALIGN 256u

/* What a walk does with each piece. */
typedef enum cut_mode {
    CUT_SIZE = 0,    /* count bytes only, no host copy */
    CUT_CPU = 1,     /* f32 host pieces */
    CUT_MEASURE = 2, /* device, first pass: the block and staging sizes */
    CUT_COPY = 3     /* device, second pass: copy into the block */
} cut_mode_t;

struct wf_shard_cut {
    cut_mode_t mode;
    const wf_model_host_t *host; /* the host copy (not CUT_SIZE) */
    const wf_tp_plan_t *plan;    /* the plan */
    int tp, rank;                /* ranks, this one */
    wf_shard_mem_t *mem;         /* the shard's memory (not CUT_SIZE) */
    size_t wes;                  /* CUT_SIZE on a device: weight element size */
    bool dev_size;               /* CUT_SIZE: the device figure */
    uint64_t bytes;              /* CUT_SIZE: so far */
    char *err;                   /* message buffer */
    size_t err_len;              /* its size */
    uint64_t off;                /* next free byte of the block */
    uint64_t stage_need;         /* largest staged piece (first pass) */
    unsigned char *stage;        /* host staging buffer (second pass) */
    bool stage_busy;             /* a copy from it may still run */
};

static uint64_t dev_round(uint64_t b) { return (b + DEV_ALIGN - 1) & ~(uint64_t)(DEV_ALIGN - 1); }

static bool on_rows(const wf_tp_place_t *p)
{
    return p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
}

static bool on_cols(const wf_tp_place_t *p)
{
    return p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
}

/* A bias is split with the rows it belongs to; otherwise whole. */
static uint64_t bias_elems(const wf_tp_place_t *p)
{
    return (uint64_t)(on_rows(p) ? p->local_out : p->out);
}

int wf_shard_cut_tp(const wf_shard_cut_t *c) { return c->tp; }

/* ---- host memory ----------------------------------------------------------- */

/* n floats, 64-byte aligned, owned by the shard; NULL with a message. */
static float *falloc(wf_shard_cut_t *c, uint64_t n)
{
    wf_shard_mem_t *m = c->mem;
    if (n > SIZE_MAX / 8)
        goto oom;
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, cap * sizeof *o);
        if (!o)
            goto oom;
        m->owned = o;
        m->cap_owned = cap;
    }
    uint64_t bytes = (n * sizeof(float) + 63u) & ~(uint64_t)63u;
    float *f = aligned_alloc(64, bytes ? (size_t)bytes : 64u);
    if (!f)
        goto oom;
    m->owned[m->n_owned++] = f;
    return f;
oom:
    wf_errf(c->err, c->err_len, "out of host memory for the shard");
    return NULL;
}

/* Host tensor `name`: its first dim d0 (or any when d0 < 0) and numel
 * elements; NULL with a message (*ret_st) unless optional and absent. */
static const wf_host_tensor_t *host_tensor(wf_shard_cut_t *c, const char *name, int64_t d0,
                                           uint64_t numel, bool optional, wf_status_t *ret_st)
{
    const wf_host_tensor_t *t = wf_model_host_find(c->host, name);
    *ret_st = WF_OK;
    if (!t) {
        if (!optional)
            *ret_st = wf_errf_status(WF_E_MALFORMED, c->err, c->err_len,
                                     "host copy lacks tensor '%s'", name);
        return NULL;
    }
    uint64_t have = 1;
    for (int d = 0; d < t->rank; d++)
        have *= (uint64_t)t->shape[d];
    if (t->rank < 1 || (d0 >= 0 && t->shape[0] != d0) || have != numel ||
        !wf_dtype_size(t->dtype) || !t->data) {
        *ret_st = wf_errf_status(WF_E_BAD_SHAPE, c->err, c->err_len,
                                 "host tensor '%s' has the wrong shape or dtype", name);
        return NULL;
    }
    return t;
}

/* ---- device pieces ----------------------------------------------------------- */

/* The next piece of `bytes` of the device block (first pass: counted). */
static unsigned char *dev_take(wf_shard_cut_t *c, uint64_t bytes)
{
    unsigned char *p = c->mode == CUT_MEASURE ? NULL : (unsigned char *)c->mem->dev + c->off;
    c->off += dev_round(bytes);
    return p;
}

/* The host staging buffer for `bytes`, once the copy from it queued last
 * has finished (first pass: its size is recorded, NULL). */
static unsigned char *stage_get(wf_shard_cut_t *c, uint64_t bytes, wf_status_t *ret_st)
{
    *ret_st = WF_OK;
    if (c->mode == CUT_MEASURE) {
        if (bytes > c->stage_need)
            c->stage_need = bytes;
        return NULL;
    }
    if (c->stage_busy) {
        *ret_st = c->mem->ops->synchronize(c->mem->ctx);
        c->stage_busy = false;
    }
    return c->stage;
}

/* Copy `bytes` host -> the device piece (second pass only). */
static wf_status_t dev_put(wf_shard_cut_t *c, void *dst, const void *src, uint64_t bytes,
                           bool staged)
{
    if (c->mode == CUT_MEASURE || bytes == 0)
        return WF_OK;
    wf_status_t st = c->mem->ops->copy_h2d(c->mem->ctx, dst, src, (size_t)bytes);
    if (st == WF_OK && staged)
        c->stage_busy = true;
    if (st != WF_OK)
        wf_errf_status(st, c->err, c->err_len, "copying the shard to the %s device failed",
                       c->mem->ops->name);
    return st;
}

/* n f32 values converted from `src` parts (dtype dt) into a new device
 * piece. */
static wf_status_t dev_f32(wf_shard_cut_t *c, const void *const *src, const uint64_t *n,
                           int parts, wf_dtype_t dt, float **ret)
{
    uint64_t total = 0;
    for (int k = 0; k < parts; k++)
        total += n[k];
    unsigned char *d = dev_take(c, total * sizeof(float));
    wf_status_t st;
    float *h = (float *)(void *)stage_get(c, total * sizeof(float), &st);
    *ret = (float *)(void *)d;
    if (st != WF_OK || c->mode == CUT_MEASURE)
        return st;
    float *o = h;
    for (int k = 0; k < parts; k++) {
        wf_convert_to_f32(o, src[k], dt, (size_t)n[k]);
        o += n[k];
    }
    return dev_put(c, d, h, total * sizeof(float), true);
}

/* A linear's weight (contiguous local_out x local_in, its dtype) and
 * bias on the device. */
static wf_status_t dev_linear(wf_shard_cut_t *c, const wf_host_tensor_t *w,
                              const wf_host_tensor_t *b, wf_linear_t *lin, const int64_t *ps,
                              const int64_t *pl)
{
    const wf_tp_place_t *p = &lin->place;
    const int64_t in = p->in;
    const size_t es = wf_dtype_size(w->dtype);
    const unsigned char *wd = w->data;
    bool rows = on_rows(p), cols = on_cols(p);
    bool whole = (!rows && !cols) || c->tp == 1;
    uint64_t wbytes = (uint64_t)p->local_out * (uint64_t)p->local_in * es;
    unsigned char *d = dev_take(c, wbytes);
    wf_status_t st = WF_OK;
    lin->w_dtype = w->dtype;
    lin->w = NULL;
    lin->w_view = true;
    lin->ldw = p->local_in;
    lin->nwb = 1;
    lin->wb[0] = d;
    lin->wbw[0] = p->local_in;
    if (whole) {
        st = dev_put(c, d, wd, wbytes, false);
    } else if (rows) {
        /* whole rows of each piece: contiguous in the host copy */
        uint64_t o = 0;
        for (uint32_t k = 0; k < p->n_blocks && st == WF_OK; k++) {
            uint64_t n = (uint64_t)(pl[k] * in) * es;
            st = dev_put(c, c->mode == CUT_MEASURE ? NULL : d + o,
                         wd + (size_t)(ps[k] * in) * es, n, false);
            o += n;
        }
    } else {
        /* every row, the rank's column pieces, gathered on the host */
        unsigned char *h = stage_get(c, wbytes, &st);
        if (st == WF_OK && c->mode == CUT_COPY) {
            unsigned char *o = h;
            for (int64_t r = 0; r < p->out; r++)
                for (uint32_t k = 0; k < p->n_blocks; k++) {
                    memcpy(o, wd + (size_t)(r * in + ps[k]) * es, (size_t)pl[k] * es);
                    o += (size_t)pl[k] * es;
                }
            st = dev_put(c, d, h, wbytes, true);
        }
    }
    if (st != WF_OK || !b)
        return st;
    const unsigned char *bdat = b->data;
    const size_t bes = wf_dtype_size(b->dtype);
    const void *src[WF_TP_MAX_BLOCKS];
    uint64_t n[WF_TP_MAX_BLOCKS];
    int parts = 1;
    if (rows && !whole) {
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
    return dev_f32(c, src, n, parts, b->dtype, &lin->b);
}

/* ---- host (CPU) pieces --------------------------------------------------------- */

/* A linear's weight and bias in f32 on the host: views of an f32 host
 * copy where the pieces allow it, else the shard's own copies. */
static wf_status_t cpu_linear(wf_shard_cut_t *c, const wf_host_tensor_t *w,
                              const wf_host_tensor_t *b, wf_linear_t *lin, const int64_t *ps,
                              const int64_t *pl)
{
    const wf_tp_place_t *p = &lin->place;
    const int64_t out = p->out, in = p->in;
    const unsigned char *wd = w->data;
    const size_t es = wf_dtype_size(w->dtype);
    bool rows = on_rows(p), cols = on_cols(p);
    bool whole = (!rows && !cols) || c->tp == 1; /* tp 1: every piece is all */
    bool view_w = w->dtype == WF_DTYPE_F32 && (whole || cols || (rows && p->n_blocks == 1));
    bool view_b = b && b->dtype == WF_DTYPE_F32 && (!rows || p->n_blocks == 1 || c->tp == 1);
    lin->w_dtype = WF_DTYPE_F32;
    lin->ldw = p->local_in;
    lin->nwb = 1;
    if (view_w && cols && !whole) {
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
        lin->ldw = in; /* == local_in: whole rows */
        lin->wb[0] = wd + (whole ? 0 : (size_t)(ps[0] * in) * es);
    } else {
        lin->w = falloc(c, (uint64_t)p->local_out * (uint64_t)p->local_in);
        if (!lin->w)
            return WF_E_NO_MEMORY;
        lin->wb[0] = lin->w;
    }
    if (lin->nwb == 1)
        lin->wbw[0] = p->local_in;
    float *dst = lin->w;
    if (view_w) {
        /* nothing to copy */
    } else if (rows && !whole) {
        /* the rank's row pieces, whole rows each */
        for (uint32_t k = 0; k < p->n_blocks; k++) {
            wf_convert_to_f32(dst, wd + (size_t)(ps[k] * in) * es, w->dtype,
                              (size_t)(pl[k] * in));
            dst += pl[k] * in;
        }
    } else if (cols && !whole) {
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
    c->mem->bytes += (uint64_t)p->local_out * (uint64_t)p->local_in * sizeof(float);
    if (!b)
        return WF_OK;
    uint64_t nb = bias_elems(p);
    const unsigned char *bdat = b->data;
    const size_t bes = wf_dtype_size(b->dtype);
    c->mem->bytes += nb * sizeof(float);
    if (view_b) {
        lin->b = (float *)(void *)(uintptr_t)(bdat + (rows && !whole ? (size_t)ps[0] * bes : 0));
        lin->b_view = true;
        return WF_OK;
    }
    if (!(lin->b = falloc(c, nb)))
        return WF_E_NO_MEMORY;
    if (rows && !whole) {
        float *o = lin->b;
        for (uint32_t k = 0; k < p->n_blocks; k++) {
            wf_convert_to_f32(o, bdat + (size_t)ps[k] * bes, b->dtype, (size_t)pl[k]);
            o += pl[k];
        }
    } else {
        wf_convert_to_f32(lin->b, bdat, b->dtype, (size_t)out);
    }
    return WF_OK;
}

/* ---- the pieces a walk names ------------------------------------------------------ */

wf_status_t wf_shard_linear(wf_shard_cut_t *c, const char *module, int64_t out, int64_t in,
                            bool has_bias, wf_linear_t *lin)
{
    wf_tp_place_t pl;
    wf_tp_place_t *p = lin ? &lin->place : &pl;
    if (wf_tp_place(c->plan, module, out, in, c->tp, p, c->err, c->err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (c->mode == CUT_SIZE) {
        uint64_t w = (uint64_t)p->local_out * (uint64_t)p->local_in;
        uint64_t b = has_bias ? bias_elems(p) * sizeof(float) : 0;
        c->bytes += c->dev_size ? dev_round(w * c->wes) + dev_round(b) : w * sizeof(float) + b;
        return WF_OK;
    }
    char name[WF_TENSOR_SPEC_NAME_MAX + 8];
    wf_status_t st;
    snprintf(name, sizeof name, "%s.weight", module);
    const wf_host_tensor_t *w = host_tensor(c, name, out, (uint64_t)out * (uint64_t)in, false,
                                            &st);
    if (!w)
        return st;
    const wf_host_tensor_t *b = NULL;
    if (has_bias) {
        snprintf(name, sizeof name, "%s.bias", module);
        if (!(b = host_tensor(c, name, out, (uint64_t)out, false, &st)))
            return st;
    }
    int64_t ps[WF_TP_MAX_BLOCKS], pln[WF_TP_MAX_BLOCKS];
    wf_tp_pieces(p, c->rank, c->tp, ps, pln);
    return c->mode == CUT_CPU ? cpu_linear(c, w, b, lin, ps, pln)
                              : dev_linear(c, w, b, lin, ps, pln);
}

wf_status_t wf_shard_vector(wf_shard_cut_t *c, const char *name, int64_t n, float **ret)
{
    if (c->mode == CUT_SIZE) {
        uint64_t b = (uint64_t)n * sizeof(float);
        c->bytes += c->dev_size ? dev_round(b) : b;
        return WF_OK;
    }
    wf_status_t st;
    const wf_host_tensor_t *t = host_tensor(c, name, -1, (uint64_t)n, false, &st);
    if (!t)
        return st;
    if (c->mode != CUT_CPU) {
        const void *src[1] = { t->data };
        uint64_t cnt[1] = { (uint64_t)n };
        return dev_f32(c, src, cnt, 1, t->dtype, ret);
    }
    if (!(*ret = falloc(c, (uint64_t)n)))
        return WF_E_NO_MEMORY;
    wf_convert_to_f32(*ret, t->data, t->dtype, (size_t)n);
    c->mem->bytes += (uint64_t)n * sizeof(float);
    return WF_OK;
}

/* ---- linears on one input, fused ------------------------------------------------- */

/* Member k's rows on this rank: its pieces when its placement splits the
 * rows, else all of them (replicated, rowwise, or every style at tp 1 as
 * a fused member). */
static int member_rows(const wf_shard_cut_t *c, const wf_tp_place_t *p, int64_t *ps, int64_t *pl)
{
    if (!on_rows(p) || c->tp == 1) {
        ps[0] = 0;
        pl[0] = p->out;
        return 1;
    }
    wf_tp_pieces(p, c->rank, c->tp, ps, pl);
    return (int)p->n_blocks;
}

/* The fused placement of members with placements pl[0 .. n) when they
 * can be one weight (see shard.h), into *ret; false otherwise. */
static bool fused_place(const wf_shard_cut_t *c, uint32_t n, const wf_tp_place_t *pl,
                        wf_tp_place_t *ret)
{
    wf_tp_place_t f;
    memset(&f, 0, sizeof f);
    f.in = f.local_in = pl[0].in;
    bool rep = true, col = true;
    for (uint32_t k = 0; k < n; k++) {
        rep = rep && pl[k].style == WF_TP_REPLICATED;
        col = col && on_rows(&pl[k]);
        if (pl[k].in != f.in)
            return false;
        f.out += pl[k].out;
        f.local_out += c->tp == 1 ? pl[k].out : pl[k].local_out;
    }
    if (c->tp == 1 || rep) {
        f.style = WF_TP_REPLICATED;
        f.n_blocks = 1;
        f.block[0] = f.out;
        *ret = f;
        return true;
    }
    if (!col)
        return false;
    f.style = WF_TP_PACKED_COLWISE;
    for (uint32_t k = 0; k < n; k++)
        for (uint32_t b = 0; b < pl[k].n_blocks; b++) {
            if (f.n_blocks == WF_TP_MAX_BLOCKS)
                return false;
            f.block[f.n_blocks++] = pl[k].block[b];
        }
    *ret = f;
    return true;
}

/* The fused weight and bias of members w[k] / b[k] (host tensors) with
 * placements pl[k], into *lin (place set): each member's rows of this
 * rank in member order; on the CPU an f32 copy the shard owns, on a
 * device one piece in the members' dtype. */
static wf_status_t cut_fused(wf_shard_cut_t *c, uint32_t n, const wf_tp_place_t *pl,
                             const wf_host_tensor_t *const *w, const wf_host_tensor_t *const *b,
                             wf_linear_t *lin)
{
    const wf_tp_place_t *p = &lin->place;
    const int64_t in = p->in;
    const bool dev = c->mode != CUT_CPU;
    const wf_dtype_t wdt = w[0]->dtype;
    const size_t es = dev ? wf_dtype_size(wdt) : sizeof(float);
    uint64_t wbytes = (uint64_t)p->local_out * (uint64_t)in * es;
    unsigned char *d;
    wf_status_t st = WF_OK;
    if (dev) {
        d = dev_take(c, wbytes);
        lin->w = NULL;
        lin->w_dtype = wdt;
        lin->w_view = true;
    } else {
        if (!(lin->w = falloc(c, (uint64_t)p->local_out * (uint64_t)in)))
            return WF_E_NO_MEMORY;
        d = lin->w;
        lin->w_dtype = WF_DTYPE_F32;
        lin->w_view = false;
        c->mem->bytes += (uint64_t)p->local_out * (uint64_t)in * sizeof(float);
    }
    lin->ldw = in;
    lin->nwb = 1;
    lin->wb[0] = d;
    lin->wbw[0] = in;
    /* weight: whole rows of each piece, contiguous in the host copy */
    uint64_t o = 0;
    for (uint32_t k = 0; k < n && st == WF_OK; k++) {
        int64_t ps[WF_TP_MAX_BLOCKS], pn[WF_TP_MAX_BLOCKS];
        int np = member_rows(c, &pl[k], ps, pn);
        const unsigned char *wd = w[k]->data;
        const size_t hes = wf_dtype_size(w[k]->dtype);
        for (int j = 0; j < np && st == WF_OK; j++) {
            uint64_t cnt = (uint64_t)(pn[j] * in);
            if (dev)
                st = dev_put(c, c->mode == CUT_MEASURE ? NULL : d + o * es,
                             wd + (size_t)(ps[j] * in) * hes, cnt * es, false);
            else
                wf_convert_to_f32((float *)(void *)d + o, wd + (size_t)(ps[j] * in) * hes,
                                  w[k]->dtype, (size_t)cnt);
            o += cnt;
        }
    }
    if (st != WF_OK || !b[0])
        return st;
    /* bias: f32, the same pieces */
    float *h;
    if (dev) {
        lin->b = (float *)(void *)dev_take(c, (uint64_t)p->local_out * sizeof(float));
        lin->b_view = true;
        h = (float *)(void *)stage_get(c, (uint64_t)p->local_out * sizeof(float), &st);
        if (st != WF_OK || c->mode == CUT_MEASURE)
            return st;
    } else {
        if (!(lin->b = falloc(c, (uint64_t)p->local_out)))
            return WF_E_NO_MEMORY;
        lin->b_view = false;
        h = lin->b;
        c->mem->bytes += (uint64_t)p->local_out * sizeof(float);
    }
    float *bo = h;
    for (uint32_t k = 0; k < n; k++) {
        int64_t ps[WF_TP_MAX_BLOCKS], pn[WF_TP_MAX_BLOCKS];
        int np = member_rows(c, &pl[k], ps, pn);
        const size_t bes = wf_dtype_size(b[k]->dtype);
        for (int j = 0; j < np; j++) {
            wf_convert_to_f32(bo, (const unsigned char *)b[k]->data + (size_t)ps[j] * bes,
                              b[k]->dtype, (size_t)pn[j]);
            bo += pn[j];
        }
    }
    return dev ? dev_put(c, lin->b, h, (uint64_t)p->local_out * sizeof(float), true) : WF_OK;
}

wf_status_t wf_shard_linear_fused(wf_shard_cut_t *c, uint32_t n, const char *const *modules,
                                  const int64_t *outs, int64_t in, bool has_bias,
                                  wf_linear_t *const *members, wf_linear_t *fused,
                                  bool *ret_fused)
{
    wf_status_t st = WF_E_NO_MEMORY;
    wf_tp_place_t *pl = calloc(n ? n : 1, sizeof *pl);
    const wf_host_tensor_t **w = calloc(n ? n : 1, sizeof *w);
    const wf_host_tensor_t **b = calloc(n ? n : 1, sizeof *b);
    wf_tp_place_t fp;
    bool fuse = false;
    if (!pl || !w || !b) {
        wf_errf(c->err, c->err_len, "out of host memory for the shard");
        goto done;
    }
    st = WF_E_BAD_ARGUMENT;
    for (uint32_t k = 0; k < n; k++)
        if (wf_tp_place(c->plan, modules[k], outs[k], in, c->tp, &pl[k], c->err, c->err_len) !=
            WF_OK)
            goto done;
    fuse = n > 1 && fused_place(c, n, pl, &fp);
    /* one weight dtype: a device piece has one */
    char name[WF_TENSOR_SPEC_NAME_MAX + 8];
    for (uint32_t k = 0; fuse && c->mode != CUT_SIZE && k < n; k++) {
        snprintf(name, sizeof name, "%s.weight", modules[k]);
        if (!(w[k] = host_tensor(c, name, outs[k], (uint64_t)outs[k] * (uint64_t)in, false,
                                 &st)))
            goto done;
        if (has_bias) {
            snprintf(name, sizeof name, "%s.bias", modules[k]);
            if (!(b[k] = host_tensor(c, name, outs[k], (uint64_t)outs[k], false, &st)))
                goto done;
        }
        fuse = w[k]->dtype == w[0]->dtype;
    }
    st = WF_OK;
    if (!fuse) {
        for (uint32_t k = 0; k < n && st == WF_OK; k++)
            st = wf_shard_linear(c, modules[k], outs[k], in, has_bias,
                                 members ? members[k] : NULL);
        goto done;
    }
    for (uint32_t k = 0; members && k < n; k++) {
        memset(members[k], 0, sizeof *members[k]);
        members[k]->place = pl[k];
    }
    if (c->mode == CUT_SIZE) {
        uint64_t we = (uint64_t)fp.local_out * (uint64_t)fp.local_in;
        uint64_t be = has_bias ? (uint64_t)fp.local_out * sizeof(float) : 0;
        c->bytes += c->dev_size ? dev_round(we * c->wes) + dev_round(be)
                                : we * sizeof(float) + be;
        goto done;
    }
    memset(fused, 0, sizeof *fused);
    fused->place = fp;
    st = cut_fused(c, n, pl, w, b, fused);
done:
    if (st == WF_OK && ret_fused)
        *ret_fused = fuse;
    free(pl);
    free(w);
    free(b);
    return st;
}

wf_status_t wf_shard_linear_group(wf_shard_cut_t *c, const char *prefix, uint32_t n,
                                  const char *const *names, const int64_t *outs, int64_t in,
                                  bool has_bias, wf_linear_group_t *g)
{
    char buf[WF_LINEAR_GROUP_MAX][WF_TENSOR_SPEC_NAME_MAX];
    const char *mods[WF_LINEAR_GROUP_MAX];
    wf_linear_t *mem[WF_LINEAR_GROUP_MAX];
    if (n < 1 || n > WF_LINEAR_GROUP_MAX)
        return wf_errf_status(WF_E_INTERNAL, c->err, c->err_len, "a group of %u linears",
                              (unsigned)n);
    for (uint32_t k = 0; k < n; k++) {
        snprintf(buf[k], sizeof buf[k], "%s%s", prefix, names[k]);
        mods[k] = buf[k];
        mem[k] = g ? &g->m[k] : NULL;
    }
    bool fused = false;
    wf_status_t st = wf_shard_linear_fused(c, n, mods, outs, in, has_bias, g ? mem : NULL,
                                           g ? &g->all : NULL, &fused);
    if (st == WF_OK && g) {
        g->n = n;
        g->fused = fused;
    }
    return st;
}

/* ---- a whole cut ------------------------------------------------------------------ */

static void human(uint64_t b, char *buf, size_t len)
{
    if (b >= (UINT64_C(1) << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (double)(UINT64_C(1) << 30));
    else
        snprintf(buf, len, "%.2f MiB", (double)b / (double)(UINT64_C(1) << 20));
}

/* The device shard: measure, allocate the block, copy. */
static wf_status_t cut_dev(wf_shard_cut_t *c, wf_shard_walk_fn walk, void *arg)
{
    wf_shard_mem_t *m = c->mem;
    const wf_backend_ops_t *ops = m->ops;
    if (!ops->copy_h2d || !ops->synchronize || !ops->mem_free)
        return wf_errf_status(WF_E_BAD_ARGUMENT, c->err, c->err_len,
                              "the %s backend has resident memory but not its copies", ops->name);
    c->mode = CUT_MEASURE;
    c->off = 0;
    wf_status_t st = walk(c, arg);
    if (st != WF_OK)
        return st;
    uint64_t need = c->off;
    if (need > SIZE_MAX || c->stage_need > SIZE_MAX / 2)
        return wf_errf_status(WF_E_NO_MEMORY, c->err, c->err_len, "shard too large");
    st = ops->mem_alloc(m->ctx, (size_t)(need ? need : DEV_ALIGN), &m->dev);
    if (st != WF_OK) {
        uint64_t total = 0, avail = 0;
        ops->memory_info(m->ctx, &total, &avail);
        char a[32], b[32], t[32];
        human(need, a, sizeof a);
        human(avail, b, sizeof b);
        human(total, t, sizeof t);
        m->dev = NULL;
        return wf_errf_status(st, c->err, c->err_len,
                              "tp rank %d's shard needs %s of %s device memory, %s free of %s; "
                              "nothing was copied", c->rank, a, ops->name, b, t);
    }
    m->bytes = need;
    c->stage = c->stage_need
                   ? aligned_alloc(64, (size_t)((c->stage_need + 63) & ~(uint64_t)63))
                   : NULL;
    if (c->stage_need && !c->stage)
        return wf_errf_status(WF_E_NO_MEMORY, c->err, c->err_len, "out of host memory");
    if (ops->host_register && c->stage)
        (void)ops->host_register(c->stage, (size_t)c->stage_need);
    c->mode = CUT_COPY;
    c->off = 0;
    st = walk(c, arg);
    /* every copy done before the staging buffer goes and the shard is used */
    wf_status_t ss = ops->synchronize(m->ctx);
    if (st == WF_OK && ss != WF_OK)
        st = wf_errf_status(ss, c->err, c->err_len, "copying the shard to the %s device failed",
                            ops->name);
    if (ops->host_register && c->stage && ops->host_unregister)
        ops->host_unregister(c->stage);
    free(c->stage);
    c->stage = NULL;
    return st;
}

wf_status_t wf_shard_cut_run(const wf_model_host_t *host, const wf_tp_plan_t *plan, int tp,
                             int rank, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                             wf_shard_walk_fn walk, void *arg, wf_shard_mem_t *mem, char *err,
                             size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!host || !plan || !walk || !mem || tp < 1 || rank < 0 || rank >= tp)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "bad shard arguments (tp %d, rank %d)", tp, rank);
    bool dev = ops && ops->mem_alloc;
    mem->ops = dev ? ops : NULL;
    mem->ctx = dev ? ctx : NULL;
    wf_shard_cut_t c;
    memset(&c, 0, sizeof c);
    c.mode = CUT_CPU;
    c.host = host;
    c.plan = plan;
    c.tp = tp;
    c.rank = rank;
    c.mem = mem;
    c.err = err;
    c.err_len = err_len;
    wf_status_t st = dev ? cut_dev(&c, walk, arg) : walk(&c, arg);
    if (st != WF_OK)
        wf_shard_mem_free(mem);
    return st;
}

uint64_t wf_shard_size(const wf_tp_plan_t *plan, int tp, bool device, wf_dtype_t weight_dtype,
                       wf_shard_walk_fn walk, void *arg)
{
    wf_shard_cut_t c;
    memset(&c, 0, sizeof c);
    c.mode = CUT_SIZE;
    c.plan = plan;
    c.tp = tp;
    c.dev_size = device;
    c.wes = wf_dtype_size(weight_dtype);
    if (!plan || tp < 1 || (device && c.wes == 0))
        return 0;
    return walk(&c, arg) == WF_OK ? c.bytes : 0;
}

void wf_shard_mem_free(wf_shard_mem_t *m)
{
    if (!m)
        return;
    if (m->dev && m->ops) {
        if (m->ops->synchronize)
            (void)m->ops->synchronize(m->ctx);
        m->ops->mem_free(m->ctx, m->dev);
    }
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    memset(m, 0, sizeof *m);
}
