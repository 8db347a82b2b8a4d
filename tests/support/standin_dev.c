/* standin_dev.c — the stand-in device backend of tests (see
 * standin_dev.h): "device" memory is a host arena whose bytes are stored
 * XOR 0xA5, behind backend.h's device entries; attention is the CPU
 * backend's on unscrambled host copies.
 *
 * Device pointers are checked: an op given a range that is not inside the
 * context's allocated arena (a host pointer, another context's buffer, a
 * buffer past the end) returns WF_E_BAD_ARGUMENT and touches nothing, so a
 * caller that mixes up host and device pointers fails loudly, and a test
 * can provoke a failing copy.
 *
 * Not a performance model: every op is synchronous and allocates its host
 * scratch. Tests only.
 */
#include "support/standin_dev.h"

#include "tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define STANDIN_KEY 0xA5u
#define STANDIN_ALIGN 256u
#define STANDIN_DEFAULT_ARENA ((uint64_t)256 << 20)
#define STANDIN_WS_ALIGN 64u

struct wf_backend_ctx {
    unsigned char *arena;          /* "device" memory, STANDIN_ALIGN-aligned */
    size_t size;                   /* arena bytes */
    size_t used;                   /* bytes handed out by dev_alloc */
    wf_backend_ctx_t *cpu;         /* the CPU backend's context (attention) */
    wf_standin_counters_t counters; /* see standin_dev.h */
};

void wf_standin_xor(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)(s[i] ^ STANDIN_KEY);
}

wf_standin_counters_t wf_standin_counters(const wf_backend_ctx_t *ctx)
{
    wf_standin_counters_t none = {0, 0, 0, 0, 0};
    return ctx ? ctx->counters : none;
}

/* [p, p + bytes) lies in the allocated part of the arena. An empty range
 * is always valid (nothing is touched). */
static bool dev_range(const wf_backend_ctx_t *ctx, const void *p, size_t bytes)
{
    if (bytes == 0)
        return true;
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)ctx->arena;
    return p && a >= lo && a - lo <= ctx->used && bytes <= ctx->used - (a - lo);
}

/* a * b, or false on overflow. */
static bool mul_ok(size_t a, size_t b, size_t *ret)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *ret = a * b;
    return true;
}

static size_t dt_size(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4u : 2u; }

static bool dt_valid(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 || dt == WF_DTYPE_F16 || dt == WF_DTYPE_BF16;
}

/* A host copy of n device bytes, unscrambled; NULL on failure (bad range
 * or no memory). Caller owns it (free). */
static void *pull(const wf_backend_ctx_t *ctx, const void *dev, size_t n)
{
    if (!dev_range(ctx, dev, n))
        return NULL;
    void *h = malloc(n ? n : 1);
    if (h && n)
        wf_standin_xor(h, dev, n);
    return h;
}

/* ---------------------------------------------------------------------- */
/* context and memory                                                      */

static void standin_ctx_destroy(wf_backend_ctx_t **ctx)
{
    if (!ctx || !*ctx)
        return;
    wf_backend_ctx_t *x = *ctx;
    *ctx = NULL;
    wf_backend_cpu()->ctx_destroy(&x->cpu);
    free(x->arena);
    free(x);
}

static wf_status_t standin_ctx_new(int index, uint64_t memory_budget,
                                   wf_backend_ctx_t **ret_ctx)
{
    if (!ret_ctx || index < 0)
        return WF_E_BAD_ARGUMENT;
    uint64_t budget = memory_budget ? memory_budget : STANDIN_DEFAULT_ARENA;
    if (budget > SIZE_MAX - STANDIN_ALIGN)
        return WF_E_NO_MEMORY;
    size_t size = ((size_t)budget + STANDIN_ALIGN - 1) / STANDIN_ALIGN *
                  STANDIN_ALIGN;
    wf_backend_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return WF_E_NO_MEMORY;
    ctx->arena = aligned_alloc(STANDIN_ALIGN, size);
    ctx->size = size;
    wf_status_t st = ctx->arena ? wf_backend_cpu()->ctx_new(index, budget,
                                                            &ctx->cpu)
                                : WF_E_NO_MEMORY;
    if (st != WF_OK) {
        standin_ctx_destroy(&ctx);
        return st;
    }
    *ret_ctx = ctx;
    return WF_OK;
}

static void standin_memory_info(const wf_backend_ctx_t *ctx,
                                uint64_t *ret_total, uint64_t *ret_free)
{
    if (ret_total)
        *ret_total = ctx ? ctx->size : 0;
    if (ret_free)
        *ret_free = ctx ? ctx->size - ctx->used : 0;
}

static wf_status_t standin_dev_alloc(wf_backend_ctx_t *ctx, size_t bytes,
                                     void **ret_ptr)
{
    if (!ctx || !ret_ptr)
        return WF_E_BAD_ARGUMENT;
    size_t off = (ctx->used + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN;
    if (off > ctx->size || bytes > ctx->size - off)
        return WF_E_NO_MEMORY;
    ctx->used = off + bytes;
    *ret_ptr = ctx->arena + off;
    return WF_OK;
}

static void standin_dev_reset(wf_backend_ctx_t *ctx)
{
    if (ctx)
        ctx->used = 0;
}

static wf_status_t standin_copy_h2d(wf_backend_ctx_t *ctx, void *dst,
                                    const void *src, size_t bytes)
{
    if (!ctx || !dev_range(ctx, dst, bytes) || (!src && bytes))
        return WF_E_BAD_ARGUMENT;
    wf_standin_xor(dst, src, bytes);
    ctx->counters.h2d++;
    ctx->counters.h2d_bytes += bytes;
    return WF_OK;
}

static wf_status_t standin_copy_d2h(wf_backend_ctx_t *ctx, void *dst,
                                    const void *src, size_t bytes)
{
    if (!ctx || !dev_range(ctx, src, bytes) || (!dst && bytes))
        return WF_E_BAD_ARGUMENT;
    wf_standin_xor(dst, src, bytes);
    ctx->counters.d2h++;
    ctx->counters.d2h_bytes += bytes;
    return WF_OK;
}

static wf_status_t standin_synchronize(wf_backend_ctx_t *ctx)
{
    return ctx ? WF_OK : WF_E_BAD_ARGUMENT;
}

/* ---------------------------------------------------------------------- */
/* attention                                                               */

/* The device-side answer, as the CUDA backend's: no caller workspace (the
 * CPU attention's own is allocated per call). */
static size_t standin_attention_workspace(const wf_attn_params_t *p)
{
    (void)p;
    return 0;
}

/* Bytes of a (B, S, H, D) tensor of dtype dt. */
static bool tensor_bytes(int64_t B, int64_t S, int64_t H, int64_t D,
                         wf_dtype_t dt, size_t *ret)
{
    if (B < 1 || S < 1 || H < 1 || D < 1)
        return false;
    size_t n;
    return mul_ok((size_t)B, (size_t)S, &n) && mul_ok(n, (size_t)H, &n) &&
           mul_ok(n, (size_t)D, &n) && mul_ok(n, dt_size(dt), ret);
}

/* Scramble the head range [h0, h1) of every (b, s) row of a host tensor
 * (rows of H * D elements of esize bytes) into the device tensor. */
static void push_heads(void *dev, const void *host, size_t rows, int64_t H,
                       int64_t D, int64_t h0, int64_t h1, size_t esize)
{
    size_t row = (size_t)(H * D) * esize;
    size_t off = (size_t)(h0 * D) * esize, len = (size_t)((h1 - h0) * D) * esize;
    for (size_t r = 0; r < rows; r++)
        wf_standin_xor((char *)dev + r * row + off,
                       (const char *)host + r * row + off, len);
}

static wf_status_t standin_attention(wf_backend_ctx_t *ctx,
                                     const wf_attn_params_t *p,
                                     void *workspace)
{
    (void)workspace; /* attention_workspace is 0 */
    if (!ctx || !p || !dt_valid(p->q_dtype) || !dt_valid(p->k_dtype) ||
        !dt_valid(p->v_dtype) || !dt_valid(p->out_dtype) || p->h_begin < 0 ||
        p->h_end < p->h_begin || p->h_end > p->Hq)
        return WF_E_BAD_ARGUMENT;
    size_t qb, kb, vb, ob, lb = 0;
    if (!tensor_bytes(p->B, p->Sq, p->Hq, p->D, p->q_dtype, &qb) ||
        !tensor_bytes(p->B, p->Skv, p->Hkv, p->D, p->k_dtype, &kb) ||
        !tensor_bytes(p->B, p->Skv, p->Hkv, p->D, p->v_dtype, &vb) ||
        !tensor_bytes(p->B, p->Sq, p->Hq, p->D, p->out_dtype, &ob) ||
        (p->lse && !tensor_bytes(p->B, p->Sq, p->Hq, 1, WF_DTYPE_F32, &lb)))
        return WF_E_BAD_ARGUMENT;
    if (!dev_range(ctx, p->out, ob) || !dev_range(ctx, p->lse, lb))
        return WF_E_BAD_ARGUMENT;
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    wf_attn_params_t hp = *p;
    void *q = pull(ctx, p->q, qb), *k = pull(ctx, p->k, kb);
    void *v = pull(ctx, p->v, vb), *out = pull(ctx, p->out, ob);
    float *lse = p->lse ? pull(ctx, p->lse, lb) : NULL;
    size_t wsb = cpu->attention_workspace(&hp);
    wsb = (wsb + STANDIN_WS_ALIGN - 1) / STANDIN_WS_ALIGN * STANDIN_WS_ALIGN;
    void *ws = aligned_alloc(STANDIN_WS_ALIGN, wsb ? wsb : STANDIN_WS_ALIGN);
    wf_status_t st = WF_E_BAD_ARGUMENT;
    if (q && k && v && out && (lse || !p->lse) && ws) {
        hp.q = q;
        hp.k = k;
        hp.v = v;
        hp.out = out;
        hp.lse = lse;
        st = cpu->attention(ctx->cpu, &hp, ws);
    }
    if (st == WF_OK) {
        size_t rows = (size_t)(p->B * p->Sq);
        push_heads(p->out, out, rows, p->Hq, p->D, p->h_begin, p->h_end,
                   dt_size(p->out_dtype));
        if (p->lse)
            push_heads(p->lse, lse, rows, p->Hq, 1, p->h_begin, p->h_end,
                       sizeof(float));
        ctx->counters.kernels++;
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(ws);
    return st;
}

/* ---------------------------------------------------------------------- */
/* merge, convert, fill                                                    */


static wf_status_t standin_lse_merge(wf_backend_ctx_t *ctx, float *acc_out,
                                     float *acc_lse, const float *part_out,
                                     const float *part_lse, int64_t rows,
                                     int64_t D, wf_dtype_t round_dtype)
{
    size_t ob, lb;
    if (!ctx || rows < 0 || D < 1 || !dt_valid(round_dtype) ||
        !mul_ok((size_t)rows, (size_t)D * sizeof(float), &ob) ||
        !mul_ok((size_t)rows, sizeof(float), &lb) ||
        !dev_range(ctx, acc_out, ob) || !dev_range(ctx, acc_lse, lb))
        return WF_E_BAD_ARGUMENT;
    float *ao = pull(ctx, acc_out, ob), *al = pull(ctx, acc_lse, lb);
    float *po = pull(ctx, part_out, ob), *pl = pull(ctx, part_lse, lb);
    wf_status_t st = WF_E_BAD_ARGUMENT;
    if (ao && al && po && pl) {
        wf_lse_merge_rows(ao, al, po, pl, rows, D, round_dtype);
        wf_standin_xor(acc_out, ao, ob);
        wf_standin_xor(acc_lse, al, lb);
        ctx->counters.kernels++;
        st = WF_OK;
    }
    free(ao);
    free(al);
    free(po);
    free(pl);
    return st;
}

static wf_status_t standin_convert(wf_backend_ctx_t *ctx, void *dst,
                                   wf_dtype_t dst_dtype, const void *src,
                                   wf_dtype_t src_dtype, size_t n)
{
    size_t sb, db, fb;
    if (!ctx || !dt_valid(dst_dtype) || !dt_valid(src_dtype) ||
        !mul_ok(n, dt_size(src_dtype), &sb) ||
        !mul_ok(n, dt_size(dst_dtype), &db) ||
        !mul_ok(n, sizeof(float), &fb) || !dev_range(ctx, dst, db))
        return WF_E_BAD_ARGUMENT;
    void *s = pull(ctx, src, sb);
    float *f = malloc(fb ? fb : 1);
    void *d = malloc(db ? db : 1);
    wf_status_t st = WF_E_BAD_ARGUMENT;
    if (s && f && d) {
        wf_convert_to_f32(f, s, src_dtype, n);
        wf_convert_from_f32(d, dst_dtype, f, n);
        wf_standin_xor(dst, d, db);
        ctx->counters.kernels++;
        st = WF_OK;
    }
    free(s);
    free(f);
    free(d);
    return st;
}

static wf_status_t standin_fill_f32(wf_backend_ctx_t *ctx, float *dst,
                                    float value, size_t n)
{
    size_t b;
    if (!ctx || !mul_ok(n, sizeof(float), &b) || !dev_range(ctx, dst, b))
        return WF_E_BAD_ARGUMENT;
    unsigned char v[sizeof(float)];
    wf_standin_xor(v, &value, sizeof v);
    for (size_t i = 0; i < n; i++)
        memcpy((unsigned char *)dst + i * sizeof v, v, sizeof v);
    ctx->counters.kernels++;
    return WF_OK;
}

static const wf_backend_ops_t standin_ops = {
    .name = "standin",
    .ctx_new = standin_ctx_new,
    .ctx_destroy = standin_ctx_destroy,
    .memory_info = standin_memory_info,
    .attention_workspace = standin_attention_workspace,
    .attention = standin_attention,
    .dev_alloc = standin_dev_alloc,
    .dev_reset = standin_dev_reset,
    .copy_h2d = standin_copy_h2d,
    .copy_d2h = standin_copy_d2h,
    .synchronize = standin_synchronize,
    .native_stream = NULL,
    .lse_merge = standin_lse_merge,
    .convert = standin_convert,
    .fill_f32 = standin_fill_f32,
};

const wf_backend_ops_t *wf_standin_dev_backend(void)
{
    return &standin_ops;
}
