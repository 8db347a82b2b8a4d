/* cpu_backend.c — the CPU reference backend: flash-style attention on
 * OpenBLAS (see backend.h for the layout and masking contract).
 *
 * For each batch b and query head h in [h_begin, h_end):
 *   K_h, V_h  (Skv, D)  f32 copies of the KV head (converted once per group
 *                       of consecutive query heads that share it, GQA)
 *   for each query tile Q_t (tq, D), scaled by nothing (the scale goes into
 *   the sgemm alpha):
 *     for each key tile (tk keys) that any row of the tile can see:
 *       S = alpha * Q_t K_tile^T            (tq, tk)   cblas_sgemm
 *       online softmax in base 2: m = running max, l = running sum,
 *       P = 2^(S - m), O *= 2^(m_old - m)
 *       O += P V_tile                        (tq, D)    cblas_sgemm
 *     out = O / l, lse = (m + log2 l) * ln 2  (natural log, as diffusers)
 * Working in base 2 (alpha = scale * log2 e) turns every exp into exp2,
 * which is a cheap polynomial plus an exponent shift.
 *
 * Two paths run that loop. With D a multiple of 16 on an AVX-512 build,
 * tiles run attn_tile.c: its own register-blocked products with K packed
 * once per KV head (each cblas_sgemm call packs both of its operands
 * again), the row max taken on the score accumulators, exp2 and the row
 * sum in one pass, the score block in L1 (BENCHMARKS.md has its speed
 * beside the cblas path's and torch's SDPA). Every other tile runs the
 * cblas path below (other head dims, builds without AVX-512), and so does
 * a tile the tile path gives up on (a non-finite row max: safe mode,
 * below; a non-finite v in a key tile that crosses the causal diagonal).
 *
 * Threading: the backend has no shared mutable state; each context belongs
 * to one worker thread. ctx_new sets OpenBLAS to one thread, which is
 * process-wide: weft parallelises across devices (one worker per device),
 * not inside a BLAS call.
 *
 * The model ops (linear, norms, activations, ...) are in cpu_model_ops.c.
 *
 * Not here: memory accounting of jobs (the daemon reserves against
 * memory_info's total), logging, allocation inside attention().
 */
#include "backend.h"
#include "attn_tile.h"
#include "cpu_model_ops.h"
#include "tensor.h"
#include "softmax.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Tile sizes. A (TQ x TK) f32 score tile is 256 KiB: it stays in L2 next
 * to the K/V tiles it multiplies, and both sgemms are large enough for
 * OpenBLAS to run near its peak even at D = 64. */
enum { TQ = 128, TK = 512 };

/* Query tile of the tile path (attn_tile.h): ten row blocks. Its Q and O
 * (FQ x D each) stay in L2 beside the K and V tiles; at most TQ so that a
 * tile it gives up on reruns on the cblas path in the same workspace. */
enum { FQ = 10 * WF_ATTN_RB };
_Static_assert((int)FQ <= (int)TQ, "the cblas path reruns tile-path tiles");

/* OpenBLAS exports this; Debian's cblas.h declares it, other cblas.h
 * headers may not. */
void openblas_set_num_threads(int num_threads);

static wf_status_t cpu_ctx_new(int index, uint64_t memory_budget,
                               wf_backend_ctx_t **ret_ctx)
{
    if (!ret_ctx || index < 0)
        return WF_E_BAD_ARGUMENT;
    wf_backend_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return WF_E_NO_MEMORY;
    ctx->index = index;
    if (memory_budget == 0) {
        long pages = sysconf(_SC_PHYS_PAGES);
        long page = sysconf(_SC_PAGESIZE);
        memory_budget = (pages > 0 && page > 0)
                            ? (uint64_t)pages * (uint64_t)page / 2u
                            : (uint64_t)1 << 30;
    }
    ctx->memory_total = memory_budget;
    /* Process-wide: every BLAS call of the process runs on its caller's
     * thread. Each device has its own worker thread; a BLAS thread pool on
     * top would oversubscribe the cores. Idempotent. */
    openblas_set_num_threads(1);
    *ret_ctx = ctx;
    return WF_OK;
}

static void cpu_ctx_destroy(wf_backend_ctx_t **ctx)
{
    if (!ctx || !*ctx)
        return;
    free((*ctx)->scratch);
    free(*ctx);
    *ctx = NULL;
}

/* free = total: the backend tracks no allocation of its own; the daemon
 * accounts the reservations of the jobs it admits against total. */
static void cpu_memory_info(const wf_backend_ctx_t *ctx, uint64_t *ret_total,
                            uint64_t *ret_free)
{
    uint64_t total = ctx ? ctx->memory_total : 0;
    if (ret_total)
        *ret_total = total;
    if (ret_free)
        *ret_free = total;
}

/* ---- workspace ----------------------------------------------------------- */

/* Layout of the workspace, every region 64-byte aligned. */
typedef struct ws_layout {
    size_t k, v;      /* K_h, V_h: (Skv, D) f32 each */
    size_t kp;        /* K_h packed for the tile path (attn_tile.h), or SIZE_MAX when unused */
    size_t q;         /* Q tile: (tq, D) */
    size_t o;         /* accumulator: (tq, D) */
    size_t s;         /* scores / probabilities: (tq, tk) */
    size_t m, l;      /* running max and sum: (tq) each */
    size_t total;     /* bytes */
} ws_layout_t;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Adds `count` floats to *off, rounded up to 64 bytes; returns the region's
 * start, or SIZE_MAX on overflow (also left in *off). */
static size_t ws_take(size_t *off, int64_t count)
{
    if (*off == SIZE_MAX || count < 0 ||
        (uint64_t)count > (SIZE_MAX - 128u) / sizeof(float) / 2u) {
        *off = SIZE_MAX;
        return SIZE_MAX;
    }
    size_t bytes = ((size_t)count * sizeof(float) + 63u) & ~(size_t)63u;
    size_t start = *off;
    if (bytes > SIZE_MAX / 2u - start) {
        *off = SIZE_MAX;
        return SIZE_MAX;
    }
    *off = start + bytes;
    return start;
}

static int64_t mul_or_neg(int64_t a, int64_t b)
{
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a))
        return -1;
    return a * b;
}

/* Whether the query tiles of p run on the tile path (attn_tile.h) when
 * their scores allow (tile_mode_t): a head dim it takes, a scale whose
 * alpha is a normal f32. */
static bool use_tile_path(const wf_attn_params_t *p)
{
    double a = (double)p->scale * M_LOG2E;
    return wf_cpu_attn_tile_ok(p->D) && a >= FLT_MIN && a <= FLT_MAX;
}

/* The workspace is a function of the shapes alone (backend.h; callers
 * size it before they know the scale or the mask), so it has the tile
 * path's regions whenever the head dim may take it. */
static ws_layout_t ws_layout(const wf_attn_params_t *p)
{
    ws_layout_t w;
    size_t off = 0;
    bool tile = wf_cpu_attn_tile_ok(p->D);
    int64_t tq = min64(p->Sq, TQ), tk = min64(p->Skv, TK);
    /* the tile path's query tile, padded to whole row blocks, and its
     * score block; a tile it gives up on reruns on the cblas path in the
     * same regions (FQ <= TQ) */
    int64_t rows = tq, sc = mul_or_neg(tq, tk);
    if (tile) {
        rows = max64(tq, (min64(p->Sq, FQ) + WF_ATTN_RB - 1) / WF_ATTN_RB * WF_ATTN_RB);
        sc = max64(sc, (int64_t)WF_ATTN_RB * WF_ATTN_FK);
    }
    int64_t kv = mul_or_neg(p->Skv, p->D);
    w.k = ws_take(&off, kv);
    w.v = ws_take(&off, kv);
    /* K packed in panels of WF_ATTN_KP keys, the last one padded */
    int64_t skp = p->Skv > INT64_MAX - WF_ATTN_KP
                      ? -1 : (p->Skv + WF_ATTN_KP - 1) / WF_ATTN_KP * WF_ATTN_KP;
    w.kp = tile ? ws_take(&off, mul_or_neg(skp, p->D)) : SIZE_MAX;
    w.q = ws_take(&off, mul_or_neg(rows, p->D));
    w.o = ws_take(&off, mul_or_neg(rows, p->D));
    w.s = ws_take(&off, sc);
    w.m = ws_take(&off, rows);
    w.l = ws_take(&off, rows);
    w.total = off;
    return w;
}

/* Local K/V head read by local query head h (see backend.h, GQA). */
static int64_t kv_head_of(const wf_attn_params_t *p, int64_t h)
{
    if (p->gqa_group == 0)
        return h / (p->Hq / p->Hkv);
    return (p->q_head_base + h) / p->gqa_group - p->kv_head_base;
}

static bool params_valid(const wf_attn_params_t *p)
{
    if (!p)
        return false;
    if (p->B < 1 || p->Sq < 1 || p->Skv < 1 || p->Hq < 1 || p->Hkv < 1 ||
        p->D < 1)
        return false;
    if (p->h_begin < 0 || p->h_end < p->h_begin || p->h_end > p->Hq)
        return false;
    if (p->gqa_group == 0) {
        if (p->Hq % p->Hkv != 0 || p->q_head_base != 0 || p->kv_head_base != 0)
            return false;
    } else {
        /* Explicit mapping: the K/V heads of the first and last computed
         * query heads (the map is monotone) must be local. */
        if (p->gqa_group < 0 || p->q_head_base < 0 || p->kv_head_base < 0 ||
            p->q_head_base > INT64_MAX - p->Hq)
            return false;
        if (p->h_end > p->h_begin &&
            (kv_head_of(p, p->h_begin) < 0 || kv_head_of(p, p->h_end - 1) >= p->Hkv))
            return false;
    }
    if (p->Sq > INT32_MAX || p->Skv > INT32_MAX || p->D > INT32_MAX)
        return false; /* BLAS dimensions are int */
    wf_dtype_t dts[4] = {p->q_dtype, p->k_dtype, p->v_dtype, p->out_dtype};
    for (int i = 0; i < 4; i++)
        if (dts[i] != WF_DTYPE_F32 && dts[i] != WF_DTYPE_F16 &&
            dts[i] != WF_DTYPE_BF16)
            return false;
    if (!p->q || !p->k || !p->v || !p->out || !wf_attn_ld_out_ok(p))
        return false;
    /* merge mode: an f32 accumulator with its lse; final_out any dtype */
    if (p->merge && (p->out_dtype != WF_DTYPE_F32 || !p->lse ||
                     (p->merge_round != WF_DTYPE_F32 && p->merge_round != WF_DTYPE_F16 &&
                      p->merge_round != WF_DTYPE_BF16) ||
                     (p->final_out && p->final_dtype != WF_DTYPE_F32 &&
                      p->final_dtype != WF_DTYPE_F16 && p->final_dtype != WF_DTYPE_BF16)))
        return false;
    return true;
}

/* Merge mode needs nothing but an f32 out (backend.h); fp8 is not taken
 * at all here. */
static bool cpu_attention_merge_ok(const wf_attn_params_t *p)
{
    return p && !p->fp8 && p->out_dtype == WF_DTYPE_F32;
}

static size_t cpu_attention_workspace(const wf_attn_params_t *p)
{
    if (!p || p->Sq < 1 || p->Skv < 1 || p->D < 1)
        return 0;
    return ws_layout(p).total;
}

/* ---- attention ----------------------------------------------------------- */

static size_t dt_size(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4u : 2u; }

/* Element (b, s, h, 0) of a (B, S, H, D) tensor of dtype dt, as bytes. */
static const unsigned char *at4(const void *base, wf_dtype_t dt, int64_t b,
                                int64_t s, int64_t h, int64_t S, int64_t H,
                                int64_t D)
{
    size_t idx = (size_t)(((b * S + s) * H + h) * D);
    return (const unsigned char *)base + idx * dt_size(dt);
}

/* Whether every one of x[0..n) is finite: x * 0 is NaN exactly for inf
 * and NaN, and NaN survives the sums. 16 lanes so that it vectorises. */
static bool all_finite(const float *x, size_t n)
{
    float acc[16] = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int t = 0; t < 16; t++)
            acc[t] += x[j + t] * 0.0f;
    float z = 0.0f;
    for (int t = 0; t < 16; t++)
        z += acc[t];
    for (; j < n; j++)
        z += x[j] * 0.0f;
    return z == 0.0f;
}

/* Non-finite values and extreme scales (the fp64 reference's semantics,
 * reference.h): scores s_j = scale * q . k_j, m = the largest non-NaN
 * score, p_j = exp(s_j - m), out = sum p_j v_j / sum p_j. So a NaN score
 * (a NaN in q or in a visible key) makes its row NaN, out and lse; a
 * score of +inf makes it NaN too (inf - inf); -inf scores weigh 0, and
 * when every visible score is -inf the sum is 0: out NaN, lse -inf; a NaN
 * or inf in v reaches only the rows that see that key, in its column d.
 *
 * Two ways to run a tile. Fast: S = alpha * Q K^T with alpha = scale *
 * log2 e folded into the sgemm, the online softmax on S. It is exact as
 * long as every row max is finite; the first row whose max is not
 * (a score overflowed f32, or an inf / all-NaN row) abandons the tile.
 * Safe: S = Q K^T unscaled, the running max taken on it (scale > 0 keeps
 * the order) and the scale applied to the differences s - m as two f32
 * factors b1 * b2 = scale * log2 e, so a scale whose alpha does not fit
 * f32 (or would overflow the scores) still gives the reference's
 * weights: 1 for the max, 0 for the scores far below it; the lse is
 * m * scale + ln l in double. The tile is rerun safe when the fast run
 * gives up, and every tile runs safe when alpha is not a normal f32. */
typedef struct tile_mode {
    bool safe;
    bool can_retry; /* fast: give up on a non-finite max (scale > 0) */
    float alpha;  /* fast: the sgemm's alpha */
    float b1, b2; /* safe: b1 * b2 = scale * log2 e */
    double scale; /* safe: the lse */
    wf_dtype_t p_round; /* F32: P as computed; BF16 / F16: P rounded to it
                           before P V, the row sums of the f32 P */
} tile_mode_t;

static tile_mode_t mode_of(const wf_attn_params_t *p, bool safe)
{
    tile_mode_t md = { .safe = safe, .scale = (double)p->scale };
    double a = (double)p->scale * M_LOG2E;
    md.alpha = (float)a;
    /* scale <= 0 (the wire refuses it): fast only, NaN where a max is
     * not finite, never a wrong finite value */
    md.can_retry = p->scale > 0.0f;
    if (!md.can_retry) {
        md.safe = false;
        return md;
    }
    if (!(a >= FLT_MIN && a <= FLT_MAX))
        md.safe = true;
    if (md.safe) {
        md.alpha = 1.0f;
        md.b1 = (float)sqrt(a);
        md.b2 = (float)(a / (double)md.b1);
    }
    return md;
}

/* The epilogue of one query tile (either path): o (tq, D) = o / l, and m
 * (tq) = the rows' lse (natural log) from the running max m and sum l;
 * rows without a finite positive sum as the fp64 reference has them. */
static void finish_tile(const wf_attn_params_t *p, const tile_mode_t *md, int64_t q0,
                        int64_t tq, float *o, float *m, const float *l)
{
    const int64_t D = p->D, Skv = p->Skv;
    for (int64_t i = 0; i < tq; i++) {
        float *orow = o + i * D;
        int64_t vis = Skv; /* keys this row sees */
        if (p->causal)
            vis = min64(Skv, max64(0, p->q_offset + q0 + i - p->kv_offset + 1));
        if (l[i] > 0.0f) {
            float inv = 1.0f / l[i];
            for (int64_t d = 0; d < D; d++)
                orow[d] *= inv;
            if (md->safe)
                m[i] = (float)((double)m[i] * md->scale + log((double)l[i]));
            else
                m[i] = (m[i] + log2f(l[i])) * (float)M_LN2;
        } else if (l[i] == 0.0f) {
            /* no visible key: empty row for the log-sum-exp merge (out
             * 0); visible keys whose scores are all -inf: out 0/0 = NaN,
             * lse log 0 = -inf, which the merge lets a finite partial
             * replace (tensor.h) */
            float fill = vis == 0 ? 0.0f : NAN;
            for (int64_t d = 0; d < D; d++)
                orow[d] = fill;
            m[i] = -INFINITY;
        } else {
            /* a NaN weight: the row is NaN */
            for (int64_t d = 0; d < D; d++)
                orow[d] = NAN;
            m[i] = NAN;
        }
    }
}

/* One query tile of one head against the keys it can see.
 * q: (tq, D) f32; k, v: (Skv, D) f32; o: (tq, D); s: (tq, TK);
 * m, l: (tq). Writes o (normalised) and m (lse, natural log). Returns
 * false (o, m, l undefined) when a fast run gives up (above). */
static bool attend_tile(const wf_attn_params_t *p, const tile_mode_t *md,
                        int64_t q0, int64_t tq, const float *q, const float *k,
                        const float *v, float *o, float *s, float *m, float *l)
{
    const int64_t D = p->D, Skv = p->Skv;

    /* Keys the tile can see at all: row i sees key j iff
     * kv_offset + j <= q_offset + q0 + i. */
    int64_t k_end = Skv;
    if (p->causal)
        k_end = min64(Skv, max64(0, p->q_offset + q0 + tq - p->kv_offset));

    for (int64_t i = 0; i < tq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, (size_t)(tq * D) * sizeof(float));

    for (int64_t k0 = 0; k0 < k_end; k0 += TK) {
        int64_t tk = min64(TK, k_end - k0);
        /* S = alpha * Q K^T: (tq, D) x (D, tk) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)tq, (int)tk,
                    (int)D, md->alpha, q, (int)D, k + k0 * D, (int)D, 0.0f, s,
                    (int)tk);

        /* Only tiles that cross the diagonal need a mask: the first row
         * sees keys up to j_first (relative to k0). */
        bool diag = p->causal &&
                    k0 + tk - 1 > p->q_offset + q0 - p->kv_offset;
        for (int64_t i = 0; i < tq; i++) {
            float *row = s + i * tk;
            int64_t n = tk;
            if (diag) {
                /* Visible keys of this row: [0, n); the rest contribute 0. */
                n = min64(tk, max64(0, p->q_offset + q0 + i - p->kv_offset - k0 + 1));
                for (int64_t j = n; j < tk; j++)
                    row[j] = 0.0f;
                if (n == 0)
                    continue; /* nothing visible yet: m, l, o unchanged */
            }
            float m_new = fmaxf(m[i], wf_cpu_row_max(row, n));
            float sum, corr;
            if (!md->safe) {
                if (!isfinite(m_new) && md->can_retry)
                    return false;
                /* P = 2^(S - m_new); rowsum = sum P. */
                sum = wf_cpu_row_exp2(row, n, m_new);
                corr = exp2f(m[i] - m_new); /* 0 when m[i] was -inf */
            } else {
                /* m_new = -inf: every visible score so far is -inf or
                 * NaN; subtracting 0 keeps -inf (weight 0) and NaN */
                float ms = m_new == -INFINITY ? 0.0f : m_new;
                sum = wf_cpu_row_exp2_scaled(row, n, ms, md->b1, md->b2);
                corr = m[i] == m_new ? 1.0f
                                     : exp2f((m[i] - m_new) * md->b1 * md->b2);
            }
            if (md->p_round != WF_DTYPE_F32)
                for (int64_t j = 0; j < n; j++)
                    row[j] = wf_round_to_dtype(row[j], md->p_round);
            l[i] = l[i] * corr + sum;
            m[i] = m_new;
            if (corr != 1.0f) {
                float *orow = o + i * D;
                for (int64_t d = 0; d < D; d++)
                    orow[d] *= corr;
            }
        }
        /* O += P V: (tq, tk) x (tk, D). A masked key has weight 0, and
         * 0 * NaN (or inf) in its v row would still reach the rows that
         * do not see it: then each row takes only its visible keys. */
        if (diag && !all_finite(v + k0 * D, (size_t)(tk * D))) {
            for (int64_t i = 0; i < tq; i++) {
                int64_t n = min64(tk, max64(0, p->q_offset + q0 + i - p->kv_offset - k0 + 1));
                if (n > 0)
                    cblas_sgemv(CblasRowMajor, CblasTrans, (int)n, (int)D, 1.0f,
                                v + k0 * D, (int)D, s + i * tk, 1, 1.0f, o + i * D, 1);
            }
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)tq, (int)D,
                        (int)tk, 1.0f, s, (int)tk, v + k0 * D, (int)D, 1.0f, o,
                        (int)D);
        }
    }

    finish_tile(p, md, q0, tq, o, m, l);
    return true;
}

/* Merge mode's epilogue of one query tile of head h: rows (b, q0 + i, h)
 * of out / lse take the tile's (o, m) through tensor.h's
 * wf_lse_merge_rows, one row at a time (the rows are Hq * D apart in
 * out), the same code as the ring's separate merge, so the two paths
 * agree bit for bit; then final_out gets the merged row converted. */
static void merge_tile(const wf_attn_params_t *p, int64_t b, int64_t q0, int64_t h,
                       int64_t tq, const float *o, const float *m)
{
    const int64_t Sq = p->Sq, Hq = p->Hq, D = p->D;
    for (int64_t i = 0; i < tq; i++) {
        size_t row = (size_t)((b * Sq + q0 + i) * Hq + h);
        float *acc = (float *)p->out + row * (size_t)D;
        wf_lse_merge_rows(acc, p->lse + row, o + i * D, m + i, 1, D, p->merge_round);
        if (p->final_out)
            wf_convert_from_f32((unsigned char *)p->final_out +
                                    row * (size_t)D * dt_size(p->final_dtype),
                                p->final_dtype, acc, (size_t)D);
    }
}

/* attention() with P rounded to p_round (F32: not) before P V; a
 * rounding run takes the cblas path. */
static wf_status_t attention_impl(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                                  void *workspace, wf_dtype_t p_round)
{
    (void)ctx;
    /* no fp8 here (attention_fp8_ok is NULL): the daemon refuses such a
     * job before it runs, this is the backstop */
    if (p && p->fp8)
        return WF_E_UNSUPPORTED;
    if (!params_valid(p) || !workspace)
        return WF_E_BAD_ARGUMENT;
    const int64_t B = p->B, Sq = p->Sq, Skv = p->Skv, Hq = p->Hq,
                  Hkv = p->Hkv, D = p->D;
    ws_layout_t w = ws_layout(p);
    if (w.total == SIZE_MAX)
        return WF_E_BAD_ARGUMENT;
    unsigned char *base = workspace;
    float *kf = (float *)(void *)(base + w.k);
    float *vf = (float *)(void *)(base + w.v);
    float *qf = (float *)(void *)(base + w.q);
    float *of = (float *)(void *)(base + w.o);
    float *sf = (float *)(void *)(base + w.s);
    float *mf = (float *)(void *)(base + w.m);
    float *lf = (float *)(void *)(base + w.l);
    tile_mode_t fast = mode_of(p, false), safe = mode_of(p, true);
    fast.p_round = safe.p_round = p_round;
    /* use_tile_path implies fast mode with a retry (scale > 0, normal
     * alpha): a tile it gives up on reruns in safe mode below */
    const bool tile = use_tile_path(p) && p_round == WF_DTYPE_F32;
    float *kp = tile ? (float *)(void *)(base + w.kp) : NULL;
    const int64_t tq_max = tile ? FQ : TQ;

    for (int64_t b = 0; b < B; b++) {
        int64_t kv_loaded = -1;
        for (int64_t h = p->h_begin; h < p->h_end; h++) {
            int64_t hk = kv_head_of(p, h);
            /* Consecutive query heads share a KV head: convert it once. */
            if (hk != kv_loaded) {
                wf_convert_rows_to_f32(kf, at4(p->k, p->k_dtype, b, 0, hk, Skv, Hkv, D),
                                       p->k_dtype, (size_t)Skv, (size_t)D,
                                       (size_t)(Hkv * D));
                wf_convert_rows_to_f32(vf, at4(p->v, p->v_dtype, b, 0, hk, Skv, Hkv, D),
                                       p->v_dtype, (size_t)Skv, (size_t)D,
                                       (size_t)(Hkv * D));
                if (tile)
                    wf_cpu_attn_kpack(kp, kf, Skv, D);
                kv_loaded = hk;
            }
            for (int64_t q0 = 0; q0 < Sq; q0 += tq_max) {
                int64_t tq = min64(tq_max, Sq - q0);
                wf_convert_rows_to_f32(qf, at4(p->q, p->q_dtype, b, q0, h, Sq, Hq, D),
                                       p->q_dtype, (size_t)tq, (size_t)D,
                                       (size_t)(Hq * D));
                bool done = false;
                if (tile) {
                    /* whole row blocks; the padding rows are zero queries
                     * whose results are dropped */
                    int64_t tqp = (tq + WF_ATTN_RB - 1) / WF_ATTN_RB * WF_ATTN_RB;
                    memset(qf + tq * D, 0, (size_t)((tqp - tq) * D) * sizeof(float));
                    done = wf_cpu_attn_tile(tqp, tq, D, Skv, p->causal,
                                            p->q_offset + q0 - p->kv_offset, fast.alpha,
                                            qf, kp, vf, of, mf, lf, sf);
                    if (done)
                        finish_tile(p, &fast, q0, tq, of, mf, lf);
                } else {
                    done = attend_tile(p, &fast, q0, tq, qf, kf, vf, of, sf, mf, lf);
                }
                if (!done)
                    (void)attend_tile(p, &safe, q0, tq, qf, kf, vf, of, sf, mf, lf);
                if (p->merge) {
                    merge_tile(p, b, q0, h, tq, of, mf);
                    continue;
                }
                const int64_t ldo = wf_attn_ld_out(p);
                wf_convert_rows_from_f32((unsigned char *)p->out +
                                             (size_t)((b * Sq + q0) * ldo + h * D) *
                                                 dt_size(p->out_dtype),
                                         p->out_dtype, (size_t)ldo, of, (size_t)tq, (size_t)D);
                if (p->lse)
                    for (int64_t i = 0; i < tq; i++)
                        p->lse[(b * Sq + q0 + i) * Hq + h] = mf[i];
            }
        }
    }
    return WF_OK;
}

static wf_status_t cpu_attention(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                                 void *workspace)
{
    return attention_impl(ctx, p, workspace, WF_DTYPE_F32);
}

wf_status_t wf_cpu_attention_round_p(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                                     void *workspace, wf_dtype_t p_round)
{
    if (p_round != WF_DTYPE_F32 && p_round != WF_DTYPE_BF16 && p_round != WF_DTYPE_F16)
        return WF_E_BAD_ARGUMENT;
    return attention_impl(ctx, p, workspace, p_round);
}

double wf_attention_flops(const wf_attn_params_t *p)
{
    if (!p)
        return 0.0;
    double visible; /* visible (query, key) pairs of one (b, head) */
    if (!p->causal) {
        visible = (double)p->Sq * (double)p->Skv;
    } else {
        visible = 0.0;
        for (int64_t i = 0; i < p->Sq; i++) {
            int64_t n = p->q_offset + i - p->kv_offset + 1;
            visible += (double)min64(p->Skv, max64(0, n));
        }
    }
    return 4.0 * (double)p->B * (double)p->Hq * visible * (double)p->D;
}

static const wf_backend_ops_t cpu_ops = {
    .name = "cpu",
    .ctx_new = cpu_ctx_new,
    .ctx_destroy = cpu_ctx_destroy,
    .memory_info = cpu_memory_info,
    .attention_workspace = cpu_attention_workspace,
    .attention_merge_ok = cpu_attention_merge_ok,
    .attention = cpu_attention,
    .linear_workspace = wf_cpu_linear_workspace,
    .linear = wf_cpu_linear,
    .bias_act = wf_cpu_bias_act,
    .act = wf_cpu_act,
    .add = wf_cpu_add,
    .axpy = wf_cpu_axpy,
    .change_sums = wf_cpu_change_sums,
    .modln = wf_cpu_modln,
    .gate_residual = wf_cpu_gate_residual,
    .head_norm_rope = wf_cpu_head_norm_rope,
    .rope_table = wf_cpu_rope_table,
    .timestep_proj = wf_cpu_timestep_proj,
    .copy_rows = wf_cpu_copy_rows,
    .rms_sumsq = wf_cpu_rms_sumsq,
    .rms_norm = wf_cpu_rms_norm,
    .layer_norm = wf_cpu_layer_norm,
    .rope_grid = wf_cpu_rope_grid,
    .timestep_embed = wf_cpu_timestep_embed,
};

const wf_backend_ops_t *wf_backend_cpu(void)
{
    return &cpu_ops;
}

/* ---- the BLAS kernel set ------------------------------------------------------- */

char *openblas_get_corename(void);

/* OpenBLAS kernel sets without AVX2 / FMA, by the names
 * openblas_get_corename() answers (x86-64). */
static bool core_pre_avx2(const char *c)
{
    static const char *const old[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                      "Nehalem", "Atom", "Opteron", "Barcelona",
                                      "Bobcat", "Sandybridge", "Bulldozer", "Piledriver",
                                      "Steamroller", "Excavator", "Katmai", "Coppermine",
                                      "Northwood", "Banias", "Yonah", "Athlon"};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
        if (strcasecmp(c, old[i]) == 0)
            return true;
    return false;
}

bool wf_cpu_blas_check(char *msg, size_t len)
{
    const char *core = openblas_get_corename();
    if (!core)
        core = "unknown";
    const char *want = NULL;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f");
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx512 && (core_pre_avx2(core) || strcasecmp(core, "Haswell") == 0 ||
                   strcasecmp(core, "Zen") == 0))
        want = "SkylakeX";
    else if (avx2 && core_pre_avx2(core))
        want = "Haswell";
#endif
    if (msg && len) {
        if (want)
            snprintf(msg, len, "OpenBLAS runs its %s kernels on a CPU with %s: matrix "
                     "products run several times slower than they could; set "
                     "OPENBLAS_CORETYPE=%s in weftd's environment (the unit's "
                     "Environment=)", core, strcmp(want, "SkylakeX") == 0 ? "AVX-512" : "AVX2",
                     want);
        else
            snprintf(msg, len, "OpenBLAS kernels: %s", core);
    }
    return want == NULL;
}
