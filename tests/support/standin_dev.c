/* standin_dev.c — the stand-in device backend of tests (see
 * standin_dev.h): "device" memory is a host arena (plus resident
 * blocks) whose bytes are stored XOR 0xA5, behind backend.h's device
 * entries; attention and the model ops are the CPU backend's on
 * unscrambled host copies.
 *
 * Device pointers are checked: an op given a range that is not inside the
 * context's allocated arena or a live resident block (a host pointer,
 * another context's buffer, a freed block, a buffer past the end) returns
 * WF_E_BAD_ARGUMENT and touches nothing, so a caller that mixes up host
 * and device pointers fails loudly, and a test can provoke a failing
 * copy.
 *
 * Not a performance model: every op is synchronous and allocates its host
 * scratch. Tests only.
 */
#include "support/standin_dev.h"

#include "ops_check.h"
#include "reference.h"
#include "tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STANDIN_KEY 0xA5u
#define STANDIN_ALIGN 256u
#define STANDIN_DEFAULT_ARENA ((uint64_t)256 << 20)
#define STANDIN_WS_ALIGN 64u

/* A resident block (mem_alloc): its own host allocation, so that a freed
 * block is no device memory any more (dev_range refuses it). */
typedef struct resident {
    unsigned char *p;              /* STANDIN_ALIGN-aligned */
    size_t bytes;                  /* bytes asked for: the valid range */
    size_t charged;                /* bytes charged to the budget (rounded up) */
} resident_t;

struct wf_backend_ctx {
    unsigned char *arena;          /* "device" memory, STANDIN_ALIGN-aligned */
    size_t size;                   /* arena bytes = the budget (dev_alloc + resident) */
    size_t used;                   /* bytes handed out by dev_alloc */
    resident_t *blocks;            /* live resident blocks, nblocks of cap */
    size_t nblocks, cap;
    size_t resident;               /* sum of the blocks' charged bytes */
    wf_backend_ctx_t *cpu;         /* the CPU backend's context (attention, model ops) */
    wf_standin_counters_t counters; /* see standin_dev.h */
    struct xfer_queue *xq;         /* the transfer stream, made at first use (xfer_*) */
};

static bool xfer_busy(const wf_backend_ctx_t *ctx, const void *p, size_t bytes);
static void xfer_drain(wf_backend_ctx_t *ctx);
static void xfer_queue_destroy(wf_backend_ctx_t *ctx);
static void xfer_counters(const wf_backend_ctx_t *ctx, wf_standin_counters_t *c);

void wf_standin_xor(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)(s[i] ^ STANDIN_KEY);
}

wf_standin_counters_t wf_standin_counters(const wf_backend_ctx_t *ctx)
{
    wf_standin_counters_t c;
    memset(&c, 0, sizeof c);
    if (ctx) {
        c = ctx->counters;
        xfer_counters(ctx, &c);
    }
    return c;
}

/* [p, p + bytes) lies in [base, base + size). */
static bool in_block(const void *base, size_t size, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)base;
    return p && base && a >= lo && a - lo <= size && bytes <= size - (a - lo);
}

/* The start of the device memory holding [p, p + bytes) (bytes > 0): the
 * arena when the range lies in its allocated part, or the live resident
 * block that holds it; NULL when neither does. */
static const unsigned char *segment_raw(const wf_backend_ctx_t *ctx,
                                        const void *p, size_t bytes)
{
    if (in_block(ctx->arena, ctx->used, p, bytes))
        return ctx->arena;
    for (size_t i = 0; i < ctx->nblocks; i++)
        if (in_block(ctx->blocks[i].p, ctx->blocks[i].bytes, p, bytes))
            return ctx->blocks[i].p;
    return NULL;
}

/* segment_raw, for a main-stream op: NULL also while a transfer into the
 * range is pending on the transfer stream (a missing xfer_wait), which
 * is counted in xfer_conflicts. */
static const unsigned char *segment_of(const wf_backend_ctx_t *ctx,
                                       const void *p, size_t bytes)
{
    const unsigned char *seg = segment_raw(ctx, p, bytes);
    return seg && !xfer_busy(ctx, p, bytes) ? seg : NULL;
}

/* [p, p + bytes) is device memory of the context: inside the allocated
 * part of the arena or inside one live resident block. An empty range is
 * always valid (nothing is touched). */
static bool dev_range(const wf_backend_ctx_t *ctx, const void *p, size_t bytes)
{
    return bytes == 0 || segment_of(ctx, p, bytes) != NULL;
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
    xfer_queue_destroy(x);
    wf_backend_cpu()->ctx_destroy(&x->cpu);
    for (size_t i = 0; i < x->nblocks; i++)
        free(x->blocks[i].p);
    free(x->blocks);
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
        *ret_free = ctx ? ctx->size - ctx->used - ctx->resident : 0;
}

static wf_status_t standin_dev_alloc(wf_backend_ctx_t *ctx, size_t bytes,
                                     void **ret_ptr)
{
    if (!ctx || !ret_ptr)
        return WF_E_BAD_ARGUMENT;
    size_t off = (ctx->used + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN;
    size_t limit = ctx->size - ctx->resident; /* resident bytes are taken */
    if (off > limit || bytes > limit - off)
        return WF_E_NO_MEMORY;
    ctx->used = off + bytes;
    *ret_ptr = ctx->arena + off;
    return WF_OK;
}

static void standin_dev_reset(wf_backend_ctx_t *ctx)
{
    if (ctx) {
        xfer_drain(ctx); /* a transfer still pending here is a caller's bug */
        ctx->used = 0;
    }
}

/* Resident blocks: charged to the budget rounded up to STANDIN_ALIGN (as
 * a device allocator would), so dev_alloc and memory_info see them; a
 * zero-byte block is a unique pointer charged nothing. */
static wf_status_t standin_mem_alloc(wf_backend_ctx_t *ctx, size_t bytes,
                                     void **ret_ptr)
{
    /* backend.h: not during a job; the stand-in refuses it, so a caller
     * that mixes the two shows here rather than on a real device. */
    if (!ctx || !ret_ptr || ctx->used != 0 || bytes > SIZE_MAX - STANDIN_ALIGN)
        return WF_E_BAD_ARGUMENT;
    size_t charged = (bytes + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN;
    if (charged > ctx->size - ctx->resident)
        return WF_E_NO_MEMORY;
    if (ctx->nblocks == ctx->cap) {
        size_t cap = ctx->cap ? 2 * ctx->cap : 16;
        resident_t *b = realloc(ctx->blocks, cap * sizeof *b);
        if (!b)
            return WF_E_NO_MEMORY;
        ctx->blocks = b;
        ctx->cap = cap;
    }
    unsigned char *p = aligned_alloc(STANDIN_ALIGN, charged ? charged : STANDIN_ALIGN);
    if (!p)
        return WF_E_NO_MEMORY;
    ctx->blocks[ctx->nblocks++] = (resident_t){.p = p, .bytes = bytes, .charged = charged};
    ctx->resident += charged;
    ctx->counters.mem_allocs++;
    *ret_ptr = p;
    return WF_OK;
}

/* A pointer that is not a live block (freed twice, from dev_alloc, from
 * another context) changes nothing and is counted in bad_frees. */
static void standin_mem_free(wf_backend_ctx_t *ctx, void *ptr)
{
    if (!ctx || !ptr)
        return;
    for (size_t i = 0; i < ctx->nblocks; i++)
        if (ctx->blocks[i].p == ptr) {
            ctx->resident -= ctx->blocks[i].charged;
            free(ctx->blocks[i].p);
            ctx->blocks[i] = ctx->blocks[--ctx->nblocks];
            ctx->counters.mem_frees++;
            return;
        }
    ctx->counters.bad_frees++;
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
 * CPU attention's own is allocated per call), except for fp8, where a
 * device backend keeps its e4m3 copies there: q (B, Sq, Hq, D), k and v
 * (B, Skv, Hkv, D) one byte each plus f32 scales per (batch, head),
 * rounded up to 256 bytes. attention() checks that the caller passes it
 * (device memory, aligned, clear of every operand) and fills it with
 * junk, so a path that sizes or passes none fails in CI. SIZE_MAX on
 * overflow. */
static size_t standin_attention_workspace(const wf_attn_params_t *p)
{
    if (!p || !p->fp8)
        return 0;
    if (p->B < 1 || p->Sq < 1 || p->Skv < 1 || p->Hq < 1 || p->Hkv < 1 || p->D < 1)
        return 0;
    size_t q, kv, sc, t;
    if (!mul_ok((size_t)p->B, (size_t)p->Sq, &q) || !mul_ok(q, (size_t)p->Hq, &q) ||
        !mul_ok(q, (size_t)p->D, &q) || !mul_ok((size_t)p->B, (size_t)p->Skv, &kv) ||
        !mul_ok(kv, (size_t)p->Hkv, &kv) || !mul_ok(kv, (size_t)p->D * 2u, &kv) ||
        !mul_ok((size_t)p->B, (size_t)(p->Hq + 2 * p->Hkv) * sizeof(float), &sc))
        return SIZE_MAX;
    t = q + kv;
    if (t < q || t + sc < t || t + sc > SIZE_MAX - STANDIN_ALIGN)
        return SIZE_MAX;
    t += sc;
    return (t + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN;
}

static bool overlaps(const unsigned char *a, size_t an, const unsigned char *b,
                     size_t bn);

/* fp8: the caller's workspace of standin_attention_workspace(p) bytes is
 * device memory of ctx, 64-byte aligned (backend.h) and clear of q, k,
 * v, out and lse. */
static bool fp8_workspace_ok(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                             const void *workspace, size_t wsb, const size_t bytes[5])
{
    const unsigned char *w = workspace;
    if (wsb == SIZE_MAX || !w || (uintptr_t)w % 64u || !dev_range(ctx, w, wsb))
        return false;
    const void *ops[5] = {p->q, p->k, p->v, p->out, p->lse};
    for (int i = 0; i < 5; i++)
        if (overlaps(w, wsb, ops[i], bytes[i]))
            return false;
    return true;
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

/* Bytes of attention's out: B Sq rows ld_out apart, the last one Hq D
 * elements long. */
static bool out_bytes(const wf_attn_params_t *p, size_t *ret)
{
    size_t rows, row, span;
    if (p->B < 1 || p->Sq < 1 || p->Hq < 1 || p->D < 1 ||
        !mul_ok((size_t)p->B, (size_t)p->Sq, &rows) ||
        !mul_ok((size_t)p->Hq, (size_t)p->D, &row) ||
        !mul_ok(rows - 1, (size_t)wf_attn_ld_out(p), &span) || span + row < span)
        return false;
    return mul_ok(span + row, dt_size(p->out_dtype), ret);
}

/* Scramble the head range [h0, h1) of every (b, s) row of a host tensor
 * (rows ld elements of esize bytes apart, H heads of D) into the device
 * tensor of the same layout. */
static void push_heads(void *dev, const void *host, size_t rows, int64_t ld, int64_t D,
                       int64_t h0, int64_t h1, size_t esize)
{
    size_t row = (size_t)ld * esize;
    size_t off = (size_t)(h0 * D) * esize, len = (size_t)((h1 - h0) * D) * esize;
    for (size_t r = 0; r < rows; r++)
        wf_standin_xor((char *)dev + r * row + off,
                       (const char *)host + r * row + off, len);
}

/* Merge mode (backend.h): the CPU backend's answer for the params the
 * CPU op gets (fp8 is emulated before it, below). */
static bool standin_attention_merge_ok(const wf_attn_params_t *p)
{
    if (!p)
        return false;
    wf_attn_params_t hp = *p;
    hp.fp8 = false;
    return wf_backend_cpu()->attention_merge_ok(&hp);
}

/* Merge mode's final_out: its range checked and pulled (so that the
 * bytes between head ranges survive the push), or NULL without; *ret_ok
 * false on a bad range or no memory. */
static void *pull_final(const wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                        size_t *ret_bytes, bool *ret_ok)
{
    *ret_bytes = 0;
    *ret_ok = true;
    if (!p->merge || !p->final_out)
        return NULL;
    void *h = NULL;
    *ret_ok = dt_valid(p->final_dtype) &&
              tensor_bytes(p->B, p->Sq, p->Hq, p->D, p->final_dtype, ret_bytes) &&
              (h = pull(ctx, p->final_out, *ret_bytes)) != NULL;
    return h;
}

/* ---- fp8 emulation (p->fp8) -------------------------------------------
 * The stand-in takes fp8 jobs on every device (attention_fp8_ok), so the
 * daemon's fp8 paths run end to end without a GPU: the host copy of each
 * of q, k and v is quantized-dequantized per (batch, head) of the call
 * with kernels/fp8.h (reference.h wf_ref_fp8_qdq) into f32, and the CPU
 * attention runs on those. Unlike a GPU kernel it does not round P to
 * e4m3 (reference.h). */

static bool standin_attention_fp8_ok(int index)
{
    (void)index;
    return true;
}

/* Replace the host copy *x, (B, S, H, D) of *dt, by its f32
 * quantized-dequantized values; *dt becomes f32. */
static wf_status_t fp8_emulate(void **x, wf_dtype_t *dt, int64_t B, int64_t S,
                               int64_t H, int64_t D)
{
    size_t n = (size_t)(B * S * H * D);
    double *d = malloc(n * sizeof *d);
    float *f = malloc(n * sizeof *f);
    wf_status_t st = d && f ? wf_ref_fp8_qdq(*x, *dt, B, S, H, D, d, NULL)
                            : WF_E_NO_MEMORY;
    if (st == WF_OK) {
        for (size_t i = 0; i < n; i++)
            f[i] = (float)d[i];
        free(*x);
        *x = f;
        *dt = WF_DTYPE_F32;
        f = NULL;
    }
    free(d);
    free(f);
    return st;
}

/* The host params of an fp8 call: q, k, v emulated, hp->fp8 off. */
static wf_status_t fp8_host_inputs(wf_attn_params_t *hp, void **q, void **k, void **v)
{
    wf_status_t st = fp8_emulate(q, &hp->q_dtype, hp->B, hp->Sq, hp->Hq, hp->D);
    if (st == WF_OK)
        st = fp8_emulate(k, &hp->k_dtype, hp->B, hp->Skv, hp->Hkv, hp->D);
    if (st == WF_OK)
        st = fp8_emulate(v, &hp->v_dtype, hp->B, hp->Skv, hp->Hkv, hp->D);
    hp->fp8 = false;
    return st;
}

static wf_status_t standin_attention(wf_backend_ctx_t *ctx,
                                     const wf_attn_params_t *p,
                                     void *workspace)
{
    if (!ctx || !p || !dt_valid(p->q_dtype) || !dt_valid(p->k_dtype) ||
        !dt_valid(p->v_dtype) || !dt_valid(p->out_dtype) || p->h_begin < 0 ||
        p->h_end < p->h_begin || p->h_end > p->Hq || !wf_attn_ld_out_ok(p))
        return WF_E_BAD_ARGUMENT;
    size_t qb, kb, vb, ob, lb = 0;
    if (!tensor_bytes(p->B, p->Sq, p->Hq, p->D, p->q_dtype, &qb) ||
        !tensor_bytes(p->B, p->Skv, p->Hkv, p->D, p->k_dtype, &kb) ||
        !tensor_bytes(p->B, p->Skv, p->Hkv, p->D, p->v_dtype, &vb) ||
        !out_bytes(p, &ob) ||
        (p->lse && !tensor_bytes(p->B, p->Sq, p->Hq, 1, WF_DTYPE_F32, &lb)))
        return WF_E_BAD_ARGUMENT;
    if (!dev_range(ctx, p->out, ob) || !dev_range(ctx, p->lse, lb))
        return WF_E_BAD_ARGUMENT;
    const size_t dwsb = standin_attention_workspace(p); /* fp8 only */
    const size_t opb[5] = {qb, kb, vb, ob, lb};
    if (dwsb && !fp8_workspace_ok(ctx, p, workspace, dwsb, opb))
        return WF_E_BAD_ARGUMENT;
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    wf_attn_params_t hp = *p;
    void *q = pull(ctx, p->q, qb), *k = pull(ctx, p->k, kb);
    void *v = pull(ctx, p->v, vb), *out = pull(ctx, p->out, ob);
    float *lse = p->lse ? pull(ctx, p->lse, lb) : NULL;
    size_t fb;
    bool final_ok;
    void *fin = pull_final(ctx, p, &fb, &final_ok); /* merge mode (NULL: none) */
    wf_status_t st = WF_E_BAD_ARGUMENT;
    bool ok = !p->fp8 || (q && k && v && fp8_host_inputs(&hp, &q, &k, &v) == WF_OK);
    size_t wsb = cpu->attention_workspace(&hp);
    wsb = (wsb + STANDIN_WS_ALIGN - 1) / STANDIN_WS_ALIGN * STANDIN_WS_ALIGN;
    void *ws = aligned_alloc(STANDIN_WS_ALIGN, wsb ? wsb : STANDIN_WS_ALIGN);
    if (ok && q && k && v && out && (lse || !p->lse) && final_ok && ws) {
        hp.q = q;
        hp.k = k;
        hp.v = v;
        hp.out = out;
        hp.lse = lse;
        hp.final_out = fin;
        /* 16-bit q / k / v: P rounded to their dtype before P V, as the
         * GPU kernels' tensor-core products take it (fp8: emulated
         * without its e4m3 P, above) */
        wf_dtype_t pr = !p->fp8 && (p->q_dtype == WF_DTYPE_BF16 || p->q_dtype == WF_DTYPE_F16)
                            ? p->q_dtype
                            : WF_DTYPE_F32;
        st = wf_cpu_attention_round_p(ctx->cpu, &hp, ws, pr);
    }
    if (st == WF_OK) {
        size_t rows = (size_t)(p->B * p->Sq);
        push_heads(p->out, out, rows, wf_attn_ld_out(p), p->D, p->h_begin, p->h_end,
                   dt_size(p->out_dtype));
        if (p->lse)
            push_heads(p->lse, lse, rows, p->Hq, 1, p->h_begin, p->h_end,
                       sizeof(float));
        if (fin)
            push_heads(p->final_out, fin, rows, p->Hq * p->D, p->D, p->h_begin, p->h_end,
                       dt_size(p->final_dtype));
        ctx->counters.kernels++;
        ctx->counters.merged_attentions += p->merge;
        if (dwsb)
            memset(workspace, 0x5A, dwsb); /* junk, as the e4m3 copies leave it */
    }
    free(fin);
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
        ctx->counters.lse_merges++;
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
        ctx->counters.converts++;
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

/* ---------------------------------------------------------------------- */
/* model ops                                                               */

/* Every model op runs the CPU backend's op on host shadows of the device
 * memory it touches: the op's regions (each the extent of a strided
 * (rows, width, ld) block: (rows - 1) * ld + width elements) are checked
 * with dev_range; regions whose extents meet (in one segment: the arena
 * or one resident block) share one unscrambled host copy of the span that
 * covers them, starting on a 256-byte boundary, and each pointer is moved
 * to its place in its copy. So in-place calls (dst == src) and
 * interleaved strided operands alias on the host exactly as on the
 * device, alignment is kept, the CPU op's own argument checks see the
 * same overlaps, and the cost is the operands' extents, not the distance
 * between them. After the CPU op succeeds, the written regions are
 * scrambled back whole (the bytes between strided rows come back as they
 * were); on any failure nothing of the device memory is touched. */

#define STAGE_MAX (WF_LINEAR_MAX_BLOCKS + 4)

typedef struct stage_region {
    const unsigned char *dev;      /* device address */
    size_t bytes;                  /* extent; 0: passed through untouched */
    const unsigned char *seg;      /* its segment (segment_of), once pulled */
    bool out;                      /* written by the op */
    void *host;                    /* its address in the shadow */
} stage_region_t;

typedef struct stage_shadow {
    const unsigned char *seg;      /* the segment (segment_of) */
    const unsigned char *lo, *hi;  /* span covered, lo STANDIN_ALIGN-aligned */
    unsigned char *buf;            /* unscrambled copy of [lo, hi) */
} stage_shadow_t;

typedef struct stage {
    stage_region_t r[STAGE_MAX];
    int n;
    stage_shadow_t s[STAGE_MAX];
    int ns;
    bool bad;                      /* an extent was invalid: WF_E_BAD_ARGUMENT */
} stage_t;

/* Bytes of a strided block: rows rows of width elements of esize bytes,
 * ld elements apart, the last row only up to its width; false for a
 * negative count or an overflow. 0 rows or 0 width is 0 bytes. */
static bool strided_bytes(int64_t rows, int64_t width, int64_t ld, size_t esize,
                          size_t *ret)
{
    if (rows < 0 || width < 0 || ld < 0)
        return false;
    if (rows == 0 || width == 0) {
        *ret = 0;
        return true;
    }
    size_t n;
    if (!mul_ok((size_t)(rows - 1), (size_t)ld, &n) || n > SIZE_MAX - (size_t)width)
        return false;
    return mul_ok(n + (size_t)width, esize, ret);
}

/* a * b for counts, false on a negative or an overflow. */
static bool rows_of(int64_t a, int64_t b, int64_t *ret)
{
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a))
        return false;
    *ret = a * b;
    return true;
}

/* Add a region of the op; returns its index. A NULL pointer is passed
 * through as NULL (the CPU op decides whether it may be: bias, norm...). */
static int stage_add(stage_t *st, const void *dev, int64_t rows, int64_t width,
                     int64_t ld, size_t esize, bool out)
{
    int i = st->n++;
    stage_region_t *r = &st->r[i];
    r->dev = dev;
    r->out = out;
    r->host = (void *)(uintptr_t)dev;
    r->bytes = 0;
    if (!strided_bytes(rows, width, ld, esize, &r->bytes))
        st->bad = true;
    if (!dev)
        r->bytes = 0;
    return i;
}

/* Check every region and make the host shadows; WF_E_BAD_ARGUMENT when an
 * extent is invalid or a region is not device memory of ctx. */
static wf_status_t stage_pull(const wf_backend_ctx_t *ctx, stage_t *st)
{
    if (st->bad)
        return WF_E_BAD_ARGUMENT;
    for (int i = 0; i < st->n; i++) {
        stage_region_t *r = &st->r[i];
        if (r->bytes == 0)
            continue;
        const unsigned char *seg = r->seg = segment_of(ctx, r->dev, r->bytes);
        if (!seg)
            return WF_E_BAD_ARGUMENT;
        const unsigned char *lo = seg + (size_t)(r->dev - seg) / STANDIN_ALIGN *
                                            STANDIN_ALIGN;
        stage_shadow_t m = {.seg = seg, .lo = lo, .hi = r->dev + r->bytes};
        /* absorb every shadow of the segment that m meets, then add m */
        for (int k = 0; k < st->ns;) {
            stage_shadow_t *o = &st->s[k];
            if (o->seg == seg && o->lo < m.hi && m.lo < o->hi) {
                if (o->lo < m.lo)
                    m.lo = o->lo;
                if (o->hi > m.hi)
                    m.hi = o->hi;
                *o = st->s[--st->ns];
            } else {
                k++;
            }
        }
        st->s[st->ns++] = m;
    }
    for (int k = 0; k < st->ns; k++) {
        stage_shadow_t *s = &st->s[k];
        size_t n = (size_t)(s->hi - s->lo);
        s->buf = aligned_alloc(STANDIN_ALIGN, (n + STANDIN_ALIGN - 1) /
                                                  STANDIN_ALIGN * STANDIN_ALIGN);
        if (!s->buf)
            return WF_E_NO_MEMORY;
        wf_standin_xor(s->buf, s->lo, n);
    }
    for (int i = 0; i < st->n; i++) {
        stage_region_t *r = &st->r[i];
        for (int k = 0; r->bytes && k < st->ns; k++)
            if (st->s[k].seg == r->seg && r->dev >= st->s[k].lo &&
                r->dev + r->bytes <= st->s[k].hi) {
                r->host = st->s[k].buf + (r->dev - st->s[k].lo);
                break;
            }
    }
    return WF_OK;
}

/* After the CPU op: on WF_OK scramble the written regions back and count
 * the kernel; free the shadows either way. Returns st. */
static wf_status_t stage_finish(wf_backend_ctx_t *ctx, stage_t *stg,
                                wf_status_t st)
{
    if (st == WF_OK) {
        for (int i = 0; i < stg->n; i++)
            if (stg->r[i].out && stg->r[i].bytes)
                wf_standin_xor((void *)(uintptr_t)stg->r[i].dev, stg->r[i].host,
                               stg->r[i].bytes);
        ctx->counters.kernels++;
    }
    for (int k = 0; k < stg->ns; k++)
        free(stg->s[k].buf);
    stg->ns = 0;
    return st;
}

/* The stand-in asks for a workspace as a device backend converting its
 * operands would: a contiguous f32 copy of x. It is checked (device
 * memory, aligned, clear of every operand) and filled with junk, so a
 * caller that hands out too little or shares it with live data fails. */
static size_t standin_linear_workspace(const wf_linear_params_t *p)
{
    size_t n;
    if (!p || !strided_bytes(p->rows, p->in, p->in, sizeof(float), &n) ||
        n > SIZE_MAX - STANDIN_ALIGN)
        return 0;
    return (n + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN;
}

static bool overlaps(const unsigned char *a, size_t an, const unsigned char *b,
                     size_t bn)
{
    return an && bn && a < b + bn && b < a + an;
}

static wf_status_t standin_linear(wf_backend_ctx_t *ctx,
                                  const wf_linear_params_t *p, void *workspace)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || !p || p->nwb > WF_LINEAR_MAX_BLOCKS || !dt_valid(p->w_dtype))
        return WF_E_BAD_ARGUMENT;
    if (!dt_valid(p->x_dtype) || !dt_valid(p->y_dtype))
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int ix = stage_add(&stg, p->x, p->rows, p->in, p->ldx, dt_size(p->x_dtype), false);
    int iw[WF_LINEAR_MAX_BLOCKS];
    for (uint32_t k = 0; k < p->nwb; k++)
        iw[k] = stage_add(&stg, p->wb[k], p->out, p->wbw[k], p->ldw,
                          dt_size(p->w_dtype), false);
    int ib = stage_add(&stg, p->bias, 1, p->out, 0, sizeof(float), false);
    int iy = stage_add(&stg, p->y, p->rows, p->out, p->ldy, dt_size(p->y_dtype), true);
    size_t wsb = standin_linear_workspace(p);
    if (wsb) {
        const unsigned char *w = workspace;
        if (!w || (uintptr_t)w % STANDIN_ALIGN || !dev_range(ctx, w, wsb))
            return WF_E_BAD_ARGUMENT;
        for (int i = 0; i < stg.n; i++)
            if (overlaps(w, wsb, stg.r[i].dev, stg.r[i].bytes))
                return WF_E_BAD_ARGUMENT;
    }
    wf_status_t st = stage_pull(ctx, &stg);
    size_t cwsb = cpu->linear_workspace(p);
    void *cws = NULL;
    if (st == WF_OK && cwsb) {
        cws = aligned_alloc(STANDIN_ALIGN, (cwsb + STANDIN_ALIGN - 1) /
                                               STANDIN_ALIGN * STANDIN_ALIGN);
        st = cws ? WF_OK : WF_E_NO_MEMORY;
    }
    /* a bf16 / f16 weight and an f32 x: the input rounded to the
     * weight's dtype first, as the CUDA backend's GEMM takes it (an x
     * already in that dtype is read as it is; a bf16 / f16 y is the CPU
     * op's f32 result rounded once, as cuBLASLt's epilogue stores it) */
    float *xr = NULL;
    wf_linear_params_t chk = *p;
    if (st == WF_OK) {
        /* the CPU op's own checks on the staged layout (operands that
         * overlap are refused there), before x is copied apart */
        chk.x = stg.r[ix].host;
        for (uint32_t k = 0; k < p->nwb; k++)
            chk.wb[k] = stg.r[iw[k]].host;
        chk.bias = stg.r[ib].host;
        chk.y = stg.r[iy].host;
    }
    if (st == WF_OK && p->w_dtype != WF_DTYPE_F32 && p->x_dtype == WF_DTYPE_F32 &&
        p->rows > 0 && p->in > 0 && wf_ops_linear_ok(&chk)) {
        size_t esz = dt_size(p->w_dtype);
        xr = malloc((size_t)(p->rows * p->in) * sizeof(float));
        unsigned char *row = malloc((size_t)p->in * esz);
        if (!xr || !row) {
            st = WF_E_NO_MEMORY;
        } else {
            const float *x = stg.r[ix].host;
            for (int64_t r = 0; r < p->rows; r++) {
                wf_convert_from_f32(row, p->w_dtype, x + r * p->ldx, (size_t)p->in);
                wf_convert_to_f32(xr + r * p->in, row, p->w_dtype, (size_t)p->in);
            }
        }
        free(row);
    }
    if (st == WF_OK) {
        wf_linear_params_t hp = *p;
        hp.x = stg.r[ix].host;
        if (xr) {
            hp.x = xr;
            hp.ldx = p->in;
        }
        for (uint32_t k = 0; k < p->nwb; k++)
            hp.wb[k] = stg.r[iw[k]].host;
        hp.bias = stg.r[ib].host;
        hp.y = stg.r[iy].host;
        st = cpu->linear(ctx->cpu, &hp, cws);
    }
    if (st == WF_OK && wsb)
        memset(workspace, 0x5A, wsb); /* junk (scrambled: 0xFF bytes, NaNs) */
    free(cws);
    free(xr);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_bias_act(wf_backend_ctx_t *ctx, void *y, wf_dtype_t y_dtype,
                                    int64_t rows, int64_t n, int64_t ldy,
                                    const float *bias, wf_act_t act, void *dst,
                                    int64_t ld_dst, wf_dtype_t dst_dtype)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || !dt_valid(dst_dtype) || !dt_valid(y_dtype))
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int iy = stage_add(&stg, y, rows, n, ldy, dt_size(y_dtype), !dst);
    int ib = stage_add(&stg, bias, 1, n, 0, sizeof(float), false);
    int id = stage_add(&stg, dst, rows, n, ld_dst, dt_size(dst_dtype), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->bias_act(ctx->cpu, stg.r[iy].host, y_dtype, rows, n, ldy,
                           stg.r[ib].host, act, stg.r[id].host, ld_dst, dst_dtype);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_act(wf_backend_ctx_t *ctx, float *dst, const float *src,
                               int64_t n, wf_act_t act)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int id = stage_add(&stg, dst, 1, n, 0, sizeof(float), true);
    int is = stage_add(&stg, src, 1, n, 0, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->act(ctx->cpu, stg.r[id].host, stg.r[is].host, n, act);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_add(wf_backend_ctx_t *ctx, float *dst, const float *src,
                               int64_t n)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int id = stage_add(&stg, dst, 1, n, 0, sizeof(float), true);
    int is = stage_add(&stg, src, 1, n, 0, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->add(ctx->cpu, stg.r[id].host, stg.r[is].host, n);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_axpy(wf_backend_ctx_t *ctx, float *y, float alpha, const float *x,
                                int64_t n)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int iy = stage_add(&stg, y, 1, n, 0, sizeof(float), true);
    int ix = stage_add(&stg, x, 1, n, 0, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->axpy(ctx->cpu, stg.r[iy].host, alpha, stg.r[ix].host, n);
    return stage_finish(ctx, &stg, st);
}

/* The sums go to host memory, as the device's do; scratch must be the
 * context's memory (it holds them on the way on a device). */
static wf_status_t standin_change_sums(wf_backend_ctx_t *ctx, const float *a, const float *b,
                                       int64_t n, double *scratch, double ret[2])
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int ia = stage_add(&stg, a, 1, n, 0, sizeof(float), false);
    int ib = stage_add(&stg, b, 1, n, 0, sizeof(float), false);
    int is = stage_add(&stg, scratch, 1, 2, 0, sizeof(double), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->change_sums(ctx->cpu, stg.r[ia].host, stg.r[ib].host, n,
                              stg.r[is].host, ret);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_modln(wf_backend_ctx_t *ctx, const wf_modln_params_t *p)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    int64_t rows;
    if (!ctx || !p || !rows_of(p->nbatch, p->per, &rows) || !dt_valid(p->dst_dtype))
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int is = stage_add(&stg, p->src, rows, p->C, p->ld_src, sizeof(float), false);
    int id = stage_add(&stg, p->dst, rows, p->C, p->ld_dst, dt_size(p->dst_dtype), true);
    int ish = stage_add(&stg, p->shift, p->nbatch, p->C, p->ld_mod, sizeof(float), false);
    int isc = stage_add(&stg, p->scale, p->nbatch, p->C, p->ld_mod, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK) {
        wf_modln_params_t hp = *p;
        hp.src = stg.r[is].host;
        hp.dst = stg.r[id].host;
        hp.shift = stg.r[ish].host;
        hp.scale = stg.r[isc].host;
        st = cpu->modln(ctx->cpu, &hp);
    }
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_gate_residual(wf_backend_ctx_t *ctx, float *S,
                                         int64_t ld_s, const float *y, int64_t ld_y,
                                         const float *gate, int64_t ld_gate,
                                         int64_t nbatch, int64_t per, int64_t C)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    int64_t rows;
    if (!ctx || !rows_of(nbatch, per, &rows))
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int iS = stage_add(&stg, S, rows, C, ld_s, sizeof(float), true);
    int iy = stage_add(&stg, y, rows, C, ld_y, sizeof(float), false);
    int ig = stage_add(&stg, gate, nbatch, C, ld_gate, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->gate_residual(ctx->cpu, stg.r[iS].host, ld_s, stg.r[iy].host, ld_y,
                                stg.r[ig].host, ld_gate, nbatch, per, C);
    return stage_finish(ctx, &stg, st);
}

/* dst: the whole (nbatch, L, H, D) joint buffer from dst itself; cos /
 * sin: rows [0, row0 + per) of the table (from the pointer given, which
 * the op indexes). */
static wf_status_t standin_head_norm_rope(wf_backend_ctx_t *ctx,
                                          const wf_headrope_params_t *p)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    int64_t rows, hd, last = 0, tab = 0; /* last: rows of dst staged */
    if (!ctx || !p || !rows_of(p->nbatch, p->per, &rows) || !rows_of(p->H, p->D, &hd) ||
        p->row0 < 0 || p->L < 0 || p->per > INT64_MAX - p->row0 || !dt_valid(p->dst_dtype) ||
        !dt_valid(p->src_dtype))
        return WF_E_BAD_ARGUMENT;
    if (rows > 0) {
        /* dst: the whole (nbatch, L) joint buffer, the extent the CPU op
         * checks overlaps against (staging only up to the last row
         * written let the next shadow's host copy fall inside it: a
         * false overlap, depending on where malloc put them) */
        tab = p->row0 + p->per; /* rows of the table read */
        if (tab > p->L || !rows_of(p->nbatch, p->L, &last))
            return WF_E_BAD_ARGUMENT;
    }
    stage_t stg = {.n = 0};
    int is = stage_add(&stg, p->src, rows, hd, p->ld_src, dt_size(p->src_dtype), false);
    int id = stage_add(&stg, p->dst, last, hd, hd, dt_size(p->dst_dtype), true);
    int in = stage_add(&stg, p->norm, 1, p->D, 0, sizeof(float), false);
    int ic = stage_add(&stg, p->cos, tab, p->D, p->D, sizeof(float), false);
    int isn = stage_add(&stg, p->sin, tab, p->D, p->D, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK) {
        wf_headrope_params_t hp = *p;
        hp.src = stg.r[is].host;
        hp.dst = stg.r[id].host;
        hp.norm = stg.r[in].host;
        hp.cos = stg.r[ic].host;
        hp.sin = stg.r[isn].host;
        st = cpu->head_norm_rope(ctx->cpu, &hp);
    }
    return stage_finish(ctx, &stg, st);
}

/* axes_dims is host memory (backend.h): passed as given. */
static wf_status_t standin_rope_table(wf_backend_ctx_t *ctx, const float *ids,
                                      int64_t L, const uint32_t *axes_dims,
                                      uint32_t n_axes, double theta, int64_t D,
                                      float *cos, float *sin)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int ii = stage_add(&stg, ids, L, n_axes, n_axes, sizeof(float), false);
    int ic = stage_add(&stg, cos, L, D, D, sizeof(float), true);
    int is = stage_add(&stg, sin, L, D, D, sizeof(float), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->rope_table(ctx->cpu, stg.r[ii].host, L, axes_dims, n_axes, theta,
                             D, stg.r[ic].host, stg.r[is].host);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_timestep_proj(wf_backend_ctx_t *ctx, const float *t,
                                         int64_t B, int64_t dim,
                                         wf_dtype_t round_dtype, float *dst)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int it = stage_add(&stg, t, 1, B, 0, sizeof(float), false);
    int id = stage_add(&stg, dst, B, dim, dim, sizeof(float), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->timestep_proj(ctx->cpu, stg.r[it].host, B, dim, round_dtype,
                                stg.r[id].host);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_copy_rows(wf_backend_ctx_t *ctx, void *dst, size_t ld_dst,
                                     const void *src, size_t ld_src, int64_t rows,
                                     size_t row_bytes)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || ld_dst > INT64_MAX || ld_src > INT64_MAX || row_bytes > INT64_MAX)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int id = stage_add(&stg, dst, rows, (int64_t)row_bytes, (int64_t)ld_dst, 1, true);
    int is = stage_add(&stg, src, rows, (int64_t)row_bytes, (int64_t)ld_src, 1, false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->copy_rows(ctx->cpu, stg.r[id].host, ld_dst, stg.r[is].host, ld_src,
                            rows, row_bytes);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_rms_sumsq(wf_backend_ctx_t *ctx, const float *src, int64_t rows,
                                     int64_t n, int64_t ld_src, float *sumsq)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int is = stage_add(&stg, src, rows, n, ld_src, sizeof(float), false);
    int iq = stage_add(&stg, sumsq, 1, rows, 0, sizeof(float), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK)
        st = cpu->rms_sumsq(ctx->cpu, stg.r[is].host, rows, n, ld_src, stg.r[iq].host);
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_rms_norm(wf_backend_ctx_t *ctx, const wf_rmsnorm_params_t *p)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || !p || !dt_valid(p->dst_dtype))
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int is = stage_add(&stg, p->src, p->rows, p->n, p->ld_src, sizeof(float), false);
    int id = stage_add(&stg, p->dst, p->rows, p->n, p->ld_dst, dt_size(p->dst_dtype), true);
    int iw = stage_add(&stg, p->weight, 1, p->n, 0, sizeof(float), false);
    int iq = stage_add(&stg, p->sumsq, 1, p->rows, 0, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK) {
        wf_rmsnorm_params_t hp = *p;
        hp.src = stg.r[is].host;
        hp.dst = stg.r[id].host;
        hp.weight = stg.r[iw].host;
        hp.sumsq = stg.r[iq].host;
        st = cpu->rms_norm(ctx->cpu, &hp);
    }
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_layer_norm(wf_backend_ctx_t *ctx, const wf_layernorm_params_t *p)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || !p || !dt_valid(p->dst_dtype))
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int is = stage_add(&stg, p->src, p->rows, p->C, p->ld_src, sizeof(float), false);
    int id = stage_add(&stg, p->dst, p->rows, p->C, p->ld_dst, dt_size(p->dst_dtype), true);
    int iw = stage_add(&stg, p->weight, 1, p->C, 0, sizeof(float), false);
    int ib = stage_add(&stg, p->bias, 1, p->C, 0, sizeof(float), false);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK) {
        wf_layernorm_params_t hp = *p;
        hp.src = stg.r[is].host;
        hp.dst = stg.r[id].host;
        hp.weight = stg.r[iw].host;
        hp.bias = stg.r[ib].host;
        st = cpu->layer_norm(ctx->cpu, &hp);
    }
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_rope_grid(wf_backend_ctx_t *ctx, const wf_rope_grid_params_t *p)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || !p)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int ic = stage_add(&stg, p->cos, p->L, p->D, p->D, sizeof(float), true);
    int is = stage_add(&stg, p->sin, p->L, p->D, p->D, sizeof(float), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK) {
        wf_rope_grid_params_t hp = *p;
        hp.cos = stg.r[ic].host;
        hp.sin = stg.r[is].host;
        st = cpu->rope_grid(ctx->cpu, &hp);
    }
    return stage_finish(ctx, &stg, st);
}

static wf_status_t standin_timestep_embed(wf_backend_ctx_t *ctx, const wf_timestep_params_t *p)
{
    const wf_backend_ops_t *cpu = wf_backend_cpu();
    if (!ctx || !p)
        return WF_E_BAD_ARGUMENT;
    stage_t stg = {.n = 0};
    int it = stage_add(&stg, p->t, 1, p->B, 0, sizeof(float), false);
    int id = stage_add(&stg, p->dst, p->B, p->dim, p->dim, sizeof(float), true);
    wf_status_t st = stage_pull(ctx, &stg);
    if (st == WF_OK) {
        wf_timestep_params_t hp = *p;
        hp.t = stg.r[it].host;
        hp.dst = stg.r[id].host;
        st = cpu->timestep_embed(ctx->cpu, &hp);
    }
    return stage_finish(ctx, &stg, st);
}

/* ---------------------------------------------------------------------- */
/* transfers on a second stream (backend.h xfer_*)                         */

/* The stand-in's transfer stream is a real second thread, so that the
 * ordering mistakes backend.h's contract forbids fail here instead of on
 * a GPU: every transfer is carried out by that thread, in queue order,
 * after a random delay of up to XFER_DELAY_US, while the main stream's
 * ops stay synchronous on the caller's thread.
 *   - xfer_d2h reads the device range when it is queued (everything the
 *     main stream held is done by then: its ops are synchronous) and
 *     writes the host buffer only later on the thread: a caller that uses
 *     the host copy before xfer_wait reads stale bytes;
 *   - xfer_h2d reads the host buffer and writes the device range only
 *     later on the thread: until xfer_wait, every main-stream op touching
 *     that range (a kernel, a copy, a model op) is refused with
 *     WF_E_BAD_ARGUMENT and counted in xfer_conflicts, as is a dev_reset
 *     (which then waits for the transfers); a caller that changes the
 *     host buffer before xfer_wait sends the changed bytes.
 * Marks complete at once (the main stream is synchronous).
 * Thread safety: the queue, the tickets' states and the xfer counters are
 * under the queue's mutex; the device bytes of a pending h2d are written
 * by the thread alone (the main stream may not touch them, see above),
 * the host bytes of a pending transfer by the thread alone unless the
 * caller breaks the contract. */

#define XFER_DELAY_US 300

typedef enum { XF_MARK, XF_D2H, XF_H2D } xfer_kind_t;

struct wf_xfer {
    struct wf_xfer *next;           /* the free list, or the queue */
    struct wf_xfer *all;            /* every ticket of the context (freed at destroy) */
    xfer_kind_t kind;               /* what it is */
    bool done;                      /* carried out (under the mutex) */
    bool failed;                    /* injected failure: xfer_wait says WF_E_INTERNAL */
    unsigned char *dev;             /* h2d: device destination (pending until done) */
    unsigned char *host;            /* d2h: host destination; h2d: host source */
    unsigned char *snap;            /* d2h: the device bytes, unscrambled at queue time */
    size_t snap_cap;                /* room in snap (kept across uses) */
    size_t bytes;                   /* size of the copy */
};

typedef struct xfer_queue {
    pthread_mutex_t mu;             /* guards everything below */
    pthread_cond_t cv;              /* work queued / a transfer done / stop */
    pthread_t thread;               /* the transfer stream */
    struct wf_xfer *head, *tail;    /* queued, not started */
    struct wf_xfer *running;        /* taken by the thread, not done */
    struct wf_xfer *free_list;      /* released tickets */
    struct wf_xfer *all;            /* every ticket */
    bool stop;                      /* ctx_destroy: the thread ends */
    bool hold;                      /* wf_standin_xfer_hold: start nothing */
    uint64_t rng;                   /* the thread's delays */
    uint64_t fail_at;               /* 1-based index of the transfer to fail (0: none) */
    uint64_t queued;                /* transfers queued so far */
    uint64_t overlaps, conflicts;   /* see wf_standin_counters_t */
} xfer_queue_t;

/* Process-wide sums of every destroyed context's counters (weftd_standin
 * reports them at exit). */
static _Atomic uint64_t tot_xfers, tot_overlaps, tot_conflicts;

/* [a, a + an) and [b, b + bn) meet. */
static bool meets(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    return an && bn && a < b + bn && b < a + an;
}

/* Called by every main-stream access (segment_of): a pending h2d into the
 * range is a conflict; any pending transfer makes the access an overlap. */
static bool xfer_busy(const wf_backend_ctx_t *ctx, const void *p, size_t bytes)
{
    xfer_queue_t *q = ctx->xq;
    if (!q)
        return false;
    bool busy = false;
    pthread_mutex_lock(&q->mu);
    const struct wf_xfer *lists[2] = {q->running, q->head};
    if (q->running || q->head)
        q->overlaps++;
    for (int l = 0; l < 2; l++)
        for (const struct wf_xfer *t = lists[l]; t; t = l ? t->next : NULL)
            if (t->kind == XF_H2D && meets(t->dev, t->bytes, p, bytes))
                busy = true;
    if (busy)
        q->conflicts++;
    pthread_mutex_unlock(&q->mu);
    return busy;
}

/* The counters the transfer queue keeps (under its mutex). */
static void xfer_counters(const wf_backend_ctx_t *ctx, wf_standin_counters_t *c)
{
    xfer_queue_t *q = ctx->xq;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    c->xfer_overlaps = q->overlaps;
    c->xfer_conflicts = q->conflicts;
    pthread_mutex_unlock(&q->mu);
}

static void *xfer_thread(void *arg)
{
    xfer_queue_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while ((!q->head || q->hold) && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head)
            break; /* stop, and nothing left */
        struct wf_xfer *t = q->head;
        q->head = t->next;
        if (!q->head)
            q->tail = NULL;
        t->next = NULL;
        q->running = t;
        q->rng ^= q->rng << 13;
        q->rng ^= q->rng >> 7;
        q->rng ^= q->rng << 17;
        long us = (long)(q->rng % (XFER_DELAY_US + 1));
        pthread_mutex_unlock(&q->mu);
        struct timespec ts = {0, us * 1000};
        nanosleep(&ts, NULL);
        if (!t->failed && t->bytes) {
            if (t->kind == XF_D2H)
                memcpy(t->host, t->snap, t->bytes);
            else if (t->kind == XF_H2D)
                wf_standin_xor(t->dev, t->host, t->bytes);
        }
        pthread_mutex_lock(&q->mu);
        t->done = true;
        q->running = NULL;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* The context's queue and thread, made at the first transfer. */
static wf_status_t xfer_queue(wf_backend_ctx_t *ctx, xfer_queue_t **ret_q)
{
    if (ctx->xq) {
        *ret_q = ctx->xq;
        return WF_OK;
    }
    xfer_queue_t *q = calloc(1, sizeof *q);
    if (!q)
        return WF_E_NO_MEMORY;
    q->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)ctx;
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        free(q);
        return WF_E_INTERNAL;
    }
    if (pthread_cond_init(&q->cv, NULL) != 0) {
        pthread_mutex_destroy(&q->mu);
        free(q);
        return WF_E_INTERNAL;
    }
    if (pthread_create(&q->thread, NULL, xfer_thread, q) != 0) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return WF_E_INTERNAL;
    }
    ctx->xq = *ret_q = q;
    return WF_OK;
}

/* Wait (mutex held) until nothing is queued or running. */
static void xfer_idle_locked(xfer_queue_t *q)
{
    while (q->head || q->running)
        pthread_cond_wait(&q->cv, &q->mu);
}

/* dev_reset: transfers must be waited for before; one still pending is
 * counted as a conflict and waited for here. */
static void xfer_drain(wf_backend_ctx_t *ctx)
{
    xfer_queue_t *q = ctx->xq;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    if (q->head || q->running)
        q->conflicts++;
    q->hold = false;
    pthread_cond_broadcast(&q->cv);
    xfer_idle_locked(q);
    pthread_mutex_unlock(&q->mu);
}

static void xfer_queue_destroy(wf_backend_ctx_t *ctx)
{
    xfer_queue_t *q = ctx->xq;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->hold = false;
    pthread_cond_broadcast(&q->cv);
    xfer_idle_locked(q);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    atomic_fetch_add(&tot_xfers, q->queued);
    atomic_fetch_add(&tot_overlaps, q->overlaps);
    atomic_fetch_add(&tot_conflicts, q->conflicts);
    while (q->all) {
        struct wf_xfer *t = q->all;
        q->all = t->all;
        free(t->snap);
        free(t);
    }
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
    ctx->xq = NULL;
}

/* A ticket from the free list (or a new one), reset; mutex not held (the
 * free list is the caller's thread's: only xfer_wait puts tickets back). */
static wf_status_t xfer_take(xfer_queue_t *q, xfer_kind_t kind, struct wf_xfer **ret_t)
{
    pthread_mutex_lock(&q->mu);
    struct wf_xfer *t = q->free_list;
    if (t)
        q->free_list = t->next;
    pthread_mutex_unlock(&q->mu);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t)
            return WF_E_NO_MEMORY;
        pthread_mutex_lock(&q->mu);
        t->all = q->all;
        q->all = t;
        pthread_mutex_unlock(&q->mu);
    }
    t->next = NULL;
    t->kind = kind;
    t->done = kind == XF_MARK;
    t->failed = false;
    t->dev = t->host = NULL;
    t->bytes = 0;
    *ret_t = t;
    return WF_OK;
}

static void xfer_release(xfer_queue_t *q, struct wf_xfer *t)
{
    pthread_mutex_lock(&q->mu);
    t->next = q->free_list;
    q->free_list = t;
    pthread_mutex_unlock(&q->mu);
}

static wf_status_t standin_xfer_mark(wf_backend_ctx_t *ctx, wf_xfer_t **ret_t)
{
    xfer_queue_t *q;
    if (!ctx || !ret_t)
        return WF_E_BAD_ARGUMENT;
    wf_status_t st = xfer_queue(ctx, &q);
    return st == WF_OK ? xfer_take(q, XF_MARK, ret_t) : st;
}

/* Queue a d2h / h2d; `after` (a mark: complete, the main stream being
 * synchronous) is released whatever happens. */
static wf_status_t xfer_post(wf_backend_ctx_t *ctx, xfer_kind_t kind, void *dst,
                             const void *src, size_t bytes, wf_xfer_t *after,
                             wf_xfer_t **ret_t)
{
    if (ctx && after && ctx->xq)
        xfer_release(ctx->xq, after);
    const void *dev = kind == XF_D2H ? src : dst;
    const void *host = kind == XF_D2H ? dst : src;
    if (!ctx || !ret_t || (bytes && (!dev || !host)) ||
        (bytes && !segment_raw(ctx, dev, bytes)))
        return WF_E_BAD_ARGUMENT;
    xfer_queue_t *q;
    struct wf_xfer *t;
    wf_status_t st = xfer_queue(ctx, &q);
    if (st == WF_OK)
        st = xfer_take(q, kind, &t);
    if (st != WF_OK)
        return st;
    if (kind == XF_D2H && bytes > t->snap_cap) {
        unsigned char *s = realloc(t->snap, bytes);
        if (!s) {
            xfer_release(q, t);
            return WF_E_NO_MEMORY;
        }
        t->snap = s;
        t->snap_cap = bytes;
    }
    t->bytes = bytes;
    t->host = (unsigned char *)(uintptr_t)host;
    t->dev = (unsigned char *)(uintptr_t)dev;
    if (kind == XF_D2H && bytes) {
        /* the device bytes now: the main stream's work is done (synchronous),
         * and a pending h2d of this queue into the range comes first */
        pthread_mutex_lock(&q->mu);
        bool behind = false;
        for (const struct wf_xfer *o = q->running; o; o = NULL)
            behind |= o->kind == XF_H2D && meets(o->dev, o->bytes, t->dev, bytes);
        for (const struct wf_xfer *o = q->head; o; o = o->next)
            behind |= o->kind == XF_H2D && meets(o->dev, o->bytes, t->dev, bytes);
        if (behind)
            xfer_idle_locked(q); /* in-order stream: wait for those first */
        pthread_mutex_unlock(&q->mu);
        wf_standin_xor(t->snap, dev, bytes);
    }
    pthread_mutex_lock(&q->mu);
    q->queued++;
    t->failed = q->fail_at != 0 && q->queued == q->fail_at;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (kind == XF_D2H) {
        ctx->counters.xfer_d2h++;
    } else {
        ctx->counters.xfer_h2d++;
    }
    ctx->counters.xfer_bytes += bytes;
    *ret_t = t;
    return WF_OK;
}

static wf_status_t standin_xfer_d2h(wf_backend_ctx_t *ctx, void *dst, const void *src,
                                    size_t bytes, wf_xfer_t *after, wf_xfer_t **ret_t)
{
    return xfer_post(ctx, XF_D2H, dst, src, bytes, after, ret_t);
}

static wf_status_t standin_xfer_h2d(wf_backend_ctx_t *ctx, void *dst, const void *src,
                                    size_t bytes, wf_xfer_t *after, wf_xfer_t **ret_t)
{
    return xfer_post(ctx, XF_H2D, dst, src, bytes, after, ret_t);
}

static wf_status_t standin_xfer_wait(wf_backend_ctx_t *ctx, wf_xfer_t *t)
{
    if (!t)
        return WF_OK;
    if (!ctx || !ctx->xq)
        return WF_E_BAD_ARGUMENT;
    xfer_queue_t *q = ctx->xq;
    pthread_mutex_lock(&q->mu);
    while (!t->done)
        pthread_cond_wait(&q->cv, &q->mu);
    bool failed = t->failed;
    t->next = q->free_list;
    q->free_list = t;
    pthread_mutex_unlock(&q->mu);
    return failed ? WF_E_INTERNAL : WF_OK;
}

void wf_standin_xfer_fail(wf_backend_ctx_t *ctx, uint64_t nth)
{
    xfer_queue_t *q;
    if (!ctx || nth == 0 || xfer_queue(ctx, &q) != WF_OK)
        return;
    pthread_mutex_lock(&q->mu);
    q->fail_at = q->queued + nth;
    pthread_mutex_unlock(&q->mu);
}

void wf_standin_xfer_hold(wf_backend_ctx_t *ctx, bool hold)
{
    xfer_queue_t *q;
    if (!ctx || xfer_queue(ctx, &q) != WF_OK)
        return;
    pthread_mutex_lock(&q->mu);
    q->hold = hold;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

wf_standin_totals_t wf_standin_totals(void)
{
    wf_standin_totals_t t = {
        .xfers = atomic_load(&tot_xfers),
        .overlaps = atomic_load(&tot_overlaps),
        .conflicts = atomic_load(&tot_conflicts),
    };
    return t;
}

static const wf_backend_ops_t standin_ops = {
    .name = "standin",
    .ctx_new = standin_ctx_new,
    .ctx_destroy = standin_ctx_destroy,
    .memory_info = standin_memory_info,
    .attention_workspace = standin_attention_workspace,
    .attention_merge_ok = standin_attention_merge_ok,
    .attention = standin_attention,
    .attention_fp8_ok = standin_attention_fp8_ok,
    .dev_alloc = standin_dev_alloc,
    .dev_reset = standin_dev_reset,
    .copy_h2d = standin_copy_h2d,
    .copy_d2h = standin_copy_d2h,
    .synchronize = standin_synchronize,
    .native_stream = NULL,
    .lse_merge = standin_lse_merge,
    .convert = standin_convert,
    .fill_f32 = standin_fill_f32,
    .linear_workspace = standin_linear_workspace,
    .linear = standin_linear,
    .bias_act = standin_bias_act,
    .act = standin_act,
    .add = standin_add,
    .axpy = standin_axpy,
    .change_sums = standin_change_sums,
    .modln = standin_modln,
    .gate_residual = standin_gate_residual,
    .head_norm_rope = standin_head_norm_rope,
    .rope_table = standin_rope_table,
    .timestep_proj = standin_timestep_proj,
    .copy_rows = standin_copy_rows,
    .rms_sumsq = standin_rms_sumsq,
    .rms_norm = standin_rms_norm,
    .layer_norm = standin_layer_norm,
    .rope_grid = standin_rope_grid,
    .timestep_embed = standin_timestep_embed,
    .mem_alloc = standin_mem_alloc,
    .mem_free = standin_mem_free,
    .host_register = NULL, /* optional for callers; nothing to pin */
    .host_unregister = NULL,
    .xfer_mark = standin_xfer_mark,
    .xfer_d2h = standin_xfer_d2h,
    .xfer_h2d = standin_xfer_h2d,
    .xfer_wait = standin_xfer_wait,
};

const wf_backend_ops_t *wf_standin_dev_backend(void)
{
    return &standin_ops;
}
