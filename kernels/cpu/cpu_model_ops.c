/* cpu_model_ops.c — the CPU backend's model ops (backend.h "model ops"):
 * linear on OpenBLAS, and the elementwise / row ops of a transformer
 * forward written as simple loops that GCC vectorises at -O3 without
 * -ffast-math.
 *
 * Each op computes its backend.h formula (the FLUX and Wan blocks of
 * daemon/models are made of them) as a plain scalar loop would, with two
 * deliberate differences:
 *   - GELU(tanh) and SiLU go through one vectorisable exp (exp_poly below)
 *     instead of a libm tanhf / expf call per element (such a call keeps
 *     the loop from vectorising and costs about a third of the CPU
 *     forward). GELU uses 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), which
 *     has no cancellation for u < 0; SiLU is x / (1 + e^(-x)).
 *   - norm statistics (in double) are summed in 8 double lanes, then the
 *     lanes in order, so the loops vectorise; the sums differ from a
 *     sequential double sum in the last bits of the double only.
 * RoPE frequencies and the timestep embeddings are plain scalar code
 * (libm in double / f32; once per job, not hot).
 *
 * Aliasing: each row kernel takes restrict pointers, and the ops that
 * allow dst == src call an in-place variant with a single pointer, so the
 * compiler needs no runtime overlap checks.
 *
 * Low-precision activations (backend.h: linear's x / y, modln's,
 * rms_norm's, layer_norm's, bias_act's and head_norm_rope's dst in
 * bf16 / f16) are the device path's reference: the op computes in f32
 * exactly as for an f32 activation, an input is widened exactly, an
 * output rounded once to nearest even as it is stored. The CPU forward
 * itself keeps every activation f32; those paths allocate an f32 copy
 * per call (tests and the stand-in device only).
 *
 * Not here: attention (cpu_backend.c), logging, allocation except the f32
 * tile of a bf16 / f16 weight (kept in the context, grown once) and the
 * f32 copies of low-precision activations above.
 */
#include "cpu_model_ops.h"
#include "ops_check.h"
#include "tensor.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* fmaf is one instruction with FMA hardware and a slow library call
 * without it (the portable build), which would also stop vectorisation. */
#if defined(__FMA__) || defined(__aarch64__)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

enum {
    DLANES = 8,              /* double accumulators of a norm statistic */
    ACT_CHUNK = 1024,        /* floats copied then activated in place (act, dst != src) */
    TILE_FLOATS = 1 << 20    /* f32 tile of a bf16 / f16 weight: 4 MiB */
};

/* ---- exp, GELU, SiLU ------------------------------------------------------ */

/* c ? x : y on the bits. GCC's if-conversion refuses a float ?: under
 * the default -ftrapping-math unless the target has masked vector ops
 * (AVX-512), so a plain ?: would keep these loops scalar with SSE / AVX2;
 * an integer mask from the comparison vectorises everywhere. NaN
 * compares false. */
static inline float select_f(int c, float x, float y)
{
    uint32_t m = (uint32_t)0 - (uint32_t)c, bx, by;
    memcpy(&bx, &x, sizeof bx);
    memcpy(&by, &y, sizeof by);
    uint32_t r = (bx & m) | (by & ~m);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}

/* e^a in f32 for the activations: a below -87 gives ~1.6e-38 (1 + that
 * is 1, all x / (1 + e^a) needs), a above 88 gives +inf (x / inf = 0 even
 * for the largest x). a = n ln2 + r with n = round(a log2 e), r in
 * about [-0.347, 0.347] by a two-part ln 2 (n ln2_hi exact); e^r by its
 * degree-7 Taylor polynomial (truncation < 5.2e-9 relative, under 0.1
 * ulp); 2^n from the exponent bits of the rounding shifter. About 1 ulp
 * in all. NaN stays NaN. No branch, no call: vectorises. */
static inline float exp_poly(float a)
{
    float ac = select_f(a < -87.0f, -87.0f, a);
    ac = select_f(ac > 88.0f, 88.0f, ac);
    /* 1.5 * 2^23: t's low mantissa bits hold n = round(ac log2 e) */
    const float shifter = 12582912.0f;
    float t = MADD(ac, 1.44269504088896341f, shifter);
    float n = t - shifter;
    float r = MADD(n, -0.693359375f, ac);       /* ln2_hi: 9 bits, n ln2_hi exact */
    r = MADD(n, 2.12194440e-4f, r);             /* ln2_lo = ln2 - ln2_hi (negative) */
    float p = 1.98412698e-4f;                   /* 1/7! */
    p = MADD(p, r, 1.38888889e-3f);             /* 1/6! */
    p = MADD(p, r, 8.33333333e-3f);             /* 1/5! */
    p = MADD(p, r, 4.16666667e-2f);             /* 1/4! */
    p = MADD(p, r, 1.66666667e-1f);             /* 1/3! */
    p = MADD(p, r, 0.5f);
    p = MADD(p, r, 1.0f);
    p = MADD(p, r, 1.0f);
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    /* n + 127 in [1, 254] after the clamp */
    uint32_t sb = (tb - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    return select_f(a > 88.0f, INFINITY, p * scale);
}

/* GELU(tanh) = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)),
 * u = sqrt(2/pi) (x + 0.044715 x^3) (u as the reference computes it). */
static inline float gelu1(float x)
{
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    float u = k0 * (x + k1 * x * x * x);
    return x / (1.0f + exp_poly(-2.0f * u));
}

static inline float silu1(float x) { return x / (1.0f + exp_poly(-x)); }

static void gelu_inplace(float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = gelu1(v[i]);
}

static void silu_inplace(float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = silu1(v[i]);
}

/* Exact GELU through libm (its callers are small: an image embedder's
 * hidden layer): 0.5 x erfc(-x / sqrt 2), which keeps its relative
 * accuracy for negative x where 1 + erf(x / sqrt 2) cancels. */
static void gelu_erf_inplace(float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = 0.5f * v[i] * erfcf(-v[i] * 0.70710678118654752f);
}

static void act_inplace(float *v, int64_t n, wf_act_t act)
{
    if (act == WF_ACT_GELU_TANH)
        gelu_inplace(v, n);
    else if (act == WF_ACT_SILU)
        silu_inplace(v, n);
    else if (act == WF_ACT_GELU)
        gelu_erf_inplace(v, n);
}

/* Bytes of an element of a weight dtype (f32, bf16, f16). */
static size_t esize(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4u : 2u; }

/* ---- linear ---------------------------------------------------------------- */

size_t wf_cpu_linear_workspace(const wf_linear_params_t *p)
{
    (void)p;
    return 0;
}

/* y rows += bias, then act, row by row (each row stays in L1). */
static void bias_act_rows(float *y, int64_t rows, int64_t n, int64_t ldy,
                          const float *bias, wf_act_t act);

/* A bf16 / f16 weight: each block converted to f32 `to` output rows at a
 * time (the tile), one sgemm per tile into its columns of y; the blocks
 * accumulate in block order as with f32 weights. p's x and y are f32
 * here (wf_cpu_linear widens / narrows around it). */
static wf_status_t linear_lowp(wf_backend_ctx_t *ctx, const wf_linear_params_t *p)
{
    const float *px = p->x;
    float *py = p->y;
    int64_t maxw = 0;
    for (uint32_t k = 0; k < p->nwb; k++)
        maxw = p->wbw[k] > maxw ? p->wbw[k] : maxw;
    int64_t to = TILE_FLOATS / maxw;
    to = to < 1 ? 1 : to > p->out ? p->out : to;
    size_t need = (size_t)(to * maxw);
    float *tile, *owned = NULL;
    if (ctx) {
        if (ctx->scratch_n < need) {
            float *nt = malloc(need * sizeof(float));
            if (!nt)
                return WF_E_NO_MEMORY;
            free(ctx->scratch);
            ctx->scratch = nt;
            ctx->scratch_n = need;
        }
        tile = ctx->scratch;
    } else {
        owned = malloc(need * sizeof(float));
        if (!owned)
            return WF_E_NO_MEMORY;
        tile = owned;
    }
    const size_t es = esize(p->w_dtype);
    int64_t acol = 0;
    for (uint32_t k = 0; k < p->nwb; k++) {
        const int64_t w = p->wbw[k];
        const unsigned char *wb = p->wb[k];
        for (int64_t o0 = 0; o0 < p->out; o0 += to) {
            int64_t tn = p->out - o0 < to ? p->out - o0 : to;
            wf_convert_rows_to_f32(tile, wb + (size_t)(o0 * p->ldw) * es, p->w_dtype,
                                   (size_t)tn, (size_t)w, (size_t)p->ldw);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p->rows, (int)tn,
                        (int)w, 1.0f, px + acol, (int)p->ldx, tile, (int)w,
                        k == 0 ? 0.0f : 1.0f, py + o0, (int)p->ldy);
        }
        acol += w;
    }
    free(owned);
    return WF_OK;
}

wf_status_t wf_cpu_linear(wf_backend_ctx_t *ctx, const wf_linear_params_t *p,
                          void *workspace)
{
    (void)workspace;
    if (!wf_ops_linear_ok(p))
        return WF_E_BAD_ARGUMENT;
    if (p->rows == 0)
        return WF_OK;
    /* q: p with an f32 x and y (a low-precision one widened / computed in
     * an f32 copy) */
    wf_linear_params_t q = *p;
    float *xf = NULL, *yf = NULL;
    wf_status_t st = WF_OK;
    if (p->x_dtype != WF_DTYPE_F32) {
        xf = malloc((size_t)(p->rows * p->in) * sizeof(float));
        if (!xf)
            return WF_E_NO_MEMORY;
        wf_convert_rows_to_f32(xf, p->x, p->x_dtype, (size_t)p->rows, (size_t)p->in,
                               (size_t)p->ldx);
        q.x = xf;
        q.ldx = p->in;
    }
    if (p->y_dtype != WF_DTYPE_F32) {
        yf = malloc((size_t)(p->rows * p->out) * sizeof(float));
        if (!yf) {
            free(xf);
            return WF_E_NO_MEMORY;
        }
        q.y = yf;
        q.ldy = p->out;
    }
    if (q.w_dtype == WF_DTYPE_F32) {
        /* one sgemm per column block, accumulating (daemon/models/linear.c) */
        int64_t acol = 0;
        for (uint32_t k = 0; k < q.nwb; k++) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)q.rows,
                        (int)q.out, (int)q.wbw[k], 1.0f, (const float *)q.x + acol,
                        (int)q.ldx, (const float *)q.wb[k], (int)q.ldw,
                        k == 0 ? 0.0f : 1.0f, q.y, (int)q.ldy);
            acol += q.wbw[k];
        }
    } else {
        st = linear_lowp(ctx, &q);
    }
    if (st == WF_OK) {
        bias_act_rows(q.y, q.rows, q.out, q.ldy, q.bias, q.act);
        if (yf)
            wf_convert_rows_from_f32(p->y, p->y_dtype, (size_t)p->ldy, yf, (size_t)p->rows,
                                     (size_t)p->out);
    }
    free(xf);
    free(yf);
    return st;
}

/* ---- bias_act, act, add -------------------------------------------------------- */

static void add_row(float *restrict y, const float *restrict b, int64_t n)
{
    for (int64_t c = 0; c < n; c++)
        y[c] += b[c];
}

static void bias_act_rows(float *y, int64_t rows, int64_t n, int64_t ldy,
                          const float *bias, wf_act_t act)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * ldy;
        if (bias)
            add_row(row, bias, n);
        act_inplace(row, n, act);
    }
}

wf_status_t wf_cpu_bias_act(wf_backend_ctx_t *ctx, void *y, wf_dtype_t y_dtype,
                            int64_t rows, int64_t n, int64_t ldy, const float *bias,
                            wf_act_t act, void *dst, int64_t ld_dst,
                            wf_dtype_t dst_dtype)
{
    (void)ctx;
    if (!wf_ops_bias_act_ok(y, y_dtype, rows, n, ldy, bias, act, dst, ld_dst, dst_dtype))
        return WF_E_BAD_ARGUMENT;
    if (rows == 0 || n == 0)
        return WF_OK;
    if (!dst && y_dtype == WF_DTYPE_F32) {
        bias_act_rows(y, rows, n, ldy, bias, act);
        return WF_OK;
    }
    /* one f32 row at a time (y widened exactly), then stored in the
     * destination's dtype (dst, or y itself in place) */
    float *row = malloc((size_t)n * sizeof(float));
    if (!row)
        return WF_E_NO_MEMORY;
    void *out = dst ? dst : y;
    const wf_dtype_t odt = dst ? dst_dtype : y_dtype;
    const int64_t ldo = dst ? ld_dst : ldy;
    const size_t ys = esize(y_dtype), os = esize(odt);
    for (int64_t r = 0; r < rows; r++) {
        wf_convert_to_f32(row, (const unsigned char *)y + (size_t)(r * ldy) * ys, y_dtype,
                          (size_t)n);
        bias_act_rows(row, 1, n, n, bias, act);
        wf_convert_from_f32((unsigned char *)out + (size_t)(r * ldo) * os, odt, row, (size_t)n);
    }
    free(row);
    return WF_OK;
}

wf_status_t wf_cpu_act(wf_backend_ctx_t *ctx, float *dst, const float *src,
                       int64_t n, wf_act_t act)
{
    (void)ctx;
    if (!wf_ops_act_ok(dst, src, n, act))
        return WF_E_BAD_ARGUMENT;
    if (n == 0)
        return WF_OK;
    if (dst == src) {
        act_inplace(dst, n, act);
        return WF_OK;
    }
    /* copy a chunk (L1-sized) and activate it in place there */
    for (int64_t j = 0; j < n; j += ACT_CHUNK) {
        int64_t m = n - j < ACT_CHUNK ? n - j : ACT_CHUNK;
        memcpy(dst + j, src + j, (size_t)m * sizeof(float));
        act_inplace(dst + j, m, act);
    }
    return WF_OK;
}

static void double_inplace(float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] += v[i];
}

wf_status_t wf_cpu_axpy(wf_backend_ctx_t *ctx, float *y, float alpha, const float *x,
                        int64_t n)
{
    (void)ctx;
    if (!wf_ops_axpy_ok(y, alpha, x, n))
        return WF_E_BAD_ARGUMENT;
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
    return WF_OK;
}

wf_status_t wf_cpu_change_sums(wf_backend_ctx_t *ctx, const float *a, const float *b,
                               int64_t n, double *scratch, double ret[2])
{
    (void)ctx;
    if (!wf_ops_change_sums_ok(a, b, n, scratch, ret))
        return WF_E_BAD_ARGUMENT;
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d += fabs((double)a[i] - (double)b[i]);
        m += fabs((double)b[i]);
    }
    ret[0] = d;
    ret[1] = m;
    return WF_OK;
}

wf_status_t wf_cpu_add(wf_backend_ctx_t *ctx, float *dst, const float *src,
                       int64_t n)
{
    (void)ctx;
    if (!wf_ops_add_ok(dst, src, n))
        return WF_E_BAD_ARGUMENT;
    if (n == 0)
        return WF_OK;
    if (dst == src)
        double_inplace(dst, n);
    else
        add_row(dst, src, n);
    return WF_OK;
}

/* ---- norms ------------------------------------------------------------------- */

/* sum of x[c] in double, in DLANES lanes then the lanes in order. */
static double sum_f64(const float *x, int64_t n)
{
    double acc[DLANES] = {0};
    int64_t j = 0;
    for (; j + DLANES <= n; j += DLANES)
        for (int t = 0; t < DLANES; t++)
            acc[t] += (double)x[j + t];
    double s = 0.0;
    for (int t = 0; t < DLANES; t++)
        s += acc[t];
    for (; j < n; j++)
        s += (double)x[j];
    return s;
}

/* sum of (x[c] - m)^2 in double, lanes as sum_f64. */
static double sqdev_f64(const float *x, int64_t n, double m)
{
    double acc[DLANES] = {0};
    int64_t j = 0;
    for (; j + DLANES <= n; j += DLANES)
        for (int t = 0; t < DLANES; t++) {
            double d = (double)x[j + t] - m;
            acc[t] += d * d;
        }
    double s = 0.0;
    for (int t = 0; t < DLANES; t++)
        s += acc[t];
    for (; j < n; j++) {
        double d = (double)x[j] - m;
        s += d * d;
    }
    return s;
}

/* y = ((x - mean) inv) (1 + sc) + sh over C; y may not be x (see below). */
static void modln_apply(const float *restrict x, float *restrict y,
                        const float *restrict sc, const float *restrict sh,
                        int64_t C, double mean, double inv)
{
    for (int64_t c = 0; c < C; c++) {
        float nv = (float)(((double)x[c] - mean) * inv);
        y[c] = nv * (1.0f + sc[c]) + sh[c];
    }
}

/* The same in place. */
static void modln_apply_ip(float *restrict v, const float *restrict sc,
                           const float *restrict sh, int64_t C, double mean, double inv)
{
    for (int64_t c = 0; c < C; c++) {
        float nv = (float)(((double)v[c] - mean) * inv);
        v[c] = nv * (1.0f + sc[c]) + sh[c];
    }
}

wf_status_t wf_cpu_modln(wf_backend_ctx_t *ctx, const wf_modln_params_t *p)
{
    (void)ctx;
    if (!wf_ops_modln_ok(p))
        return WF_E_BAD_ARGUMENT;
    bool inplace = (const void *)p->dst == (const void *)p->src;
    const bool lowp = p->dst_dtype != WF_DTYPE_F32;
    const double C = (double)p->C, eps = (double)p->eps;
    float *row = NULL; /* a low-precision dst: each row in f32 first */
    if (lowp && p->nbatch * p->per > 0 && !(row = malloc((size_t)p->C * sizeof(float))))
        return WF_E_NO_MEMORY;
    for (int64_t b = 0; b < p->nbatch; b++) {
        const float *sh = p->shift + b * p->ld_mod, *sc = p->scale + b * p->ld_mod;
        for (int64_t r = 0; r < p->per; r++) {
            const float *x = p->src + (b * p->per + r) * p->ld_src;
            int64_t yo = (b * p->per + r) * p->ld_dst;
            float *y = lowp ? row : (float *)p->dst + yo;
            double mean = sum_f64(x, p->C) / C;
            double var = sqdev_f64(x, p->C, mean) / C;
            double inv = 1.0 / sqrt(var + eps);
            if (inplace)
                modln_apply_ip(y, sc, sh, p->C, mean, inv);
            else
                modln_apply(x, y, sc, sh, p->C, mean, inv);
            if (lowp)
                wf_convert_from_f32((uint16_t *)p->dst + yo, p->dst_dtype, row, (size_t)p->C);
        }
    }
    free(row);
    return WF_OK;
}

/* ---- gate_residual ------------------------------------------------------------ */

static void gate_row(float *restrict s, const float *restrict g,
                     const float *restrict y, int64_t C)
{
    for (int64_t c = 0; c < C; c++)
        s[c] += g[c] * y[c];
}

wf_status_t wf_cpu_gate_residual(wf_backend_ctx_t *ctx, float *S, int64_t ld_s,
                                 const float *y, int64_t ld_y,
                                 const float *gate, int64_t ld_gate,
                                 int64_t nbatch, int64_t per, int64_t C)
{
    (void)ctx;
    if (!wf_ops_gate_residual_ok(S, ld_s, y, ld_y, gate, ld_gate, nbatch, per, C))
        return WF_E_BAD_ARGUMENT;
    for (int64_t b = 0; b < nbatch; b++) {
        const float *g = gate + b * ld_gate;
        for (int64_t r = 0; r < per; r++)
            gate_row(S + (b * per + r) * ld_s, g, y + (b * per + r) * ld_y, C);
    }
    return WF_OK;
}

/* ---- head_norm_rope ------------------------------------------------------------- */

/* sum of x[c]^2 in double, lanes as sum_f64. */
static double sumsq_f64(const float *x, int64_t n)
{
    double acc[DLANES] = {0};
    int64_t j = 0;
    for (; j + DLANES <= n; j += DLANES)
        for (int t = 0; t < DLANES; t++)
            acc[t] += (double)x[j + t] * (double)x[j + t];
    double ss = 0.0;
    for (int t = 0; t < DLANES; t++)
        ss += acc[t];
    for (; j < n; j++)
        ss += (double)x[j] * (double)x[j];
    return ss;
}

/* o = (x / rms) w over D; statistics in double. */
static void rms_head(const float *restrict x, float *restrict o,
                     const float *restrict w, int64_t D, double eps)
{
    double inv = 1.0 / sqrt(sumsq_f64(x, D) / (double)D + eps);
    for (int64_t d = 0; d < D; d++)
        o[d] = (float)(x[d] * inv) * w[d];
}

/* Pairs (2j, 2j+1) of o rotate in place: (x0 c - x1 s, x1 c + x0 s). */
static void rope_head(float *restrict o, const float *restrict c,
                      const float *restrict s, int64_t D)
{
    for (int64_t d = 0; d < D; d += 2) {
        float x0 = o[d], x1 = o[d + 1];
        o[d] = x0 * c[d] - x1 * s[d];
        o[d + 1] = x1 * c[d + 1] + x0 * s[d + 1];
    }
}

wf_status_t wf_cpu_head_norm_rope(wf_backend_ctx_t *ctx, const wf_headrope_params_t *p)
{
    (void)ctx;
    if (!wf_ops_headrope_ok(p))
        return WF_E_BAD_ARGUMENT;
    const int64_t HD = p->H * p->D;
    const bool rope = p->cos != NULL;
    const int64_t D = p->D;
    const bool lowp = p->dst_dtype != WF_DTYPE_F32;
    float *tmp = NULL; /* a low-precision dst: each row in f32 first */
    if (lowp && p->nbatch * p->per > 0 && !(tmp = malloc((size_t)HD * sizeof(float))))
        return WF_E_NO_MEMORY;
    const bool lowsrc = p->src_dtype != WF_DTYPE_F32;
    float *wide = NULL; /* a low-precision src: each row widened first */
    if (lowsrc && p->nbatch * p->per > 0 && !(wide = malloc((size_t)HD * sizeof(float)))) {
        free(tmp);
        return WF_E_NO_MEMORY;
    }
    for (int64_t b = 0; b < p->nbatch; b++)
        for (int64_t s = 0; s < p->per; s++) {
            const int64_t so = (b * p->per + s) * p->ld_src;
            const float *row = (const float *)p->src + so;
            if (lowsrc) {
                wf_convert_to_f32(wide, (const uint16_t *)p->src + so, p->src_dtype,
                                  (size_t)HD);
                row = wide;
            }
            int64_t oo = (b * p->L + p->row0 + s) * HD;
            float *o = lowp ? tmp : (float *)p->dst + oo;
            const float *c = rope ? p->cos + (p->row0 + s) * D : NULL;
            const float *sn = rope ? p->sin + (p->row0 + s) * D : NULL;
            for (int64_t h = 0; h < p->H; h++) {
                if (p->norm)
                    rms_head(row + h * D, o + h * D, p->norm, D, (double)p->eps);
                else
                    memcpy(o + h * D, row + h * D, (size_t)D * sizeof(float));
                if (rope)
                    rope_head(o + h * D, c, sn, D);
            }
            if (lowp)
                wf_convert_from_f32((uint16_t *)p->dst + oo, p->dst_dtype, tmp, (size_t)HD);
        }
    free(tmp);
    free(wide);
    return WF_OK;
}

/* ---- rms_sumsq, rms_norm, layer_norm ------------------------------------------------ */

wf_status_t wf_cpu_rms_sumsq(wf_backend_ctx_t *ctx, const float *src, int64_t rows,
                             int64_t n, int64_t ld_src, float *sumsq)
{
    (void)ctx;
    if (!wf_ops_rms_sumsq_ok(src, rows, n, ld_src, sumsq))
        return WF_E_BAD_ARGUMENT;
    for (int64_t r = 0; r < rows; r++)
        sumsq[r] = (float)sumsq_f64(src + r * ld_src, n);
    return WF_OK;
}

/* y = (x inv) w over n (w NULL: 1), the product rounded to f32 first as
 * rms_head; y may not be x (see below). */
static void rms_apply(const float *restrict x, float *restrict y, const float *restrict w,
                      int64_t n, double inv)
{
    if (w)
        for (int64_t c = 0; c < n; c++)
            y[c] = (float)(x[c] * inv) * w[c];
    else
        for (int64_t c = 0; c < n; c++)
            y[c] = (float)(x[c] * inv);
}

/* The same in place. */
static void rms_apply_ip(float *restrict v, const float *restrict w, int64_t n, double inv)
{
    if (w)
        for (int64_t c = 0; c < n; c++)
            v[c] = (float)(v[c] * inv) * w[c];
    else
        for (int64_t c = 0; c < n; c++)
            v[c] = (float)(v[c] * inv);
}

wf_status_t wf_cpu_rms_norm(wf_backend_ctx_t *ctx, const wf_rmsnorm_params_t *p)
{
    (void)ctx;
    if (!wf_ops_rms_norm_ok(p))
        return WF_E_BAD_ARGUMENT;
    const bool inplace = (const void *)p->dst == (const void *)p->src;
    const bool lowp = p->dst_dtype != WF_DTYPE_F32;
    const double width = (double)(p->sumsq ? p->width : p->n), eps = (double)p->eps;
    float *row = NULL; /* a low-precision dst: each row in f32 first */
    if (lowp && p->rows > 0 && !(row = malloc((size_t)p->n * sizeof(float))))
        return WF_E_NO_MEMORY;
    for (int64_t r = 0; r < p->rows; r++) {
        const float *x = p->src + r * p->ld_src;
        int64_t yo = r * p->ld_dst;
        float *y = lowp ? row : (float *)p->dst + yo;
        double ss = p->sumsq ? (double)p->sumsq[r] : sumsq_f64(x, p->n);
        double inv = 1.0 / sqrt(ss / width + eps);
        if (inplace)
            rms_apply_ip(y, p->weight, p->n, inv);
        else
            rms_apply(x, y, p->weight, p->n, inv);
        if (lowp)
            wf_convert_from_f32((uint16_t *)p->dst + yo, p->dst_dtype, row, (size_t)p->n);
    }
    free(row);
    return WF_OK;
}

/* y = ((x - mean) inv) w + b over C (w, b NULL: 1, 0); y may be x: each
 * element is read before it is written, and the loop has no other
 * pointer it could alias. */
static void ln_apply(const float *x, float *y, const float *w, const float *b, int64_t C,
                     double mean, double inv)
{
    for (int64_t c = 0; c < C; c++) {
        float nv = (float)(((double)x[c] - mean) * inv);
        if (w)
            nv *= w[c];
        if (b)
            nv += b[c];
        y[c] = nv;
    }
}

wf_status_t wf_cpu_layer_norm(wf_backend_ctx_t *ctx, const wf_layernorm_params_t *p)
{
    (void)ctx;
    if (!wf_ops_layer_norm_ok(p))
        return WF_E_BAD_ARGUMENT;
    const bool lowp = p->dst_dtype != WF_DTYPE_F32;
    const double C = (double)p->C, eps = (double)p->eps;
    float *row = NULL; /* a low-precision dst: each row in f32 first */
    if (lowp && p->rows > 0 && !(row = malloc((size_t)p->C * sizeof(float))))
        return WF_E_NO_MEMORY;
    for (int64_t r = 0; r < p->rows; r++) {
        const float *x = p->src + r * p->ld_src;
        int64_t yo = r * p->ld_dst;
        double mean = sum_f64(x, p->C) / C;
        double var = sqdev_f64(x, p->C, mean) / C;
        ln_apply(x, lowp ? row : (float *)p->dst + yo, p->weight, p->bias, p->C, mean,
                 1.0 / sqrt(var + eps));
        if (lowp)
            wf_convert_from_f32((uint16_t *)p->dst + yo, p->dst_dtype, row, (size_t)p->C);
    }
    free(row);
    return WF_OK;
}

/* ---- rope_table, rope_grid, timestep_proj, timestep_embed ------------------------------ */

wf_status_t wf_cpu_rope_table(wf_backend_ctx_t *ctx, const float *ids,
                              int64_t L, const uint32_t *axes_dims,
                              uint32_t n_axes, double theta, int64_t D,
                              float *cos_t, float *sin_t)
{
    (void)ctx;
    if (!wf_ops_rope_table_ok(ids, L, axes_dims, n_axes, theta, D, cos_t, sin_t))
        return WF_E_BAD_ARGUMENT;
    /* column pair by column pair: one pow per frequency (flux_embed.c's
     * flux_rope_tables, bit for bit) */
    int64_t d = 0;
    for (uint32_t a = 0; a < n_axes; a++) {
        int64_t da = axes_dims[a];
        for (int64_t j = 0; j < da / 2; j++, d += 2) {
            double freq = 1.0 / pow(theta, (double)(2 * j) / (double)da);
            for (int64_t r = 0; r < L; r++) {
                double ang = (double)ids[r * n_axes + a] * freq;
                float c = (float)cos(ang), s = (float)sin(ang);
                cos_t[r * D + d] = cos_t[r * D + d + 1] = c;
                sin_t[r * D + d] = sin_t[r * D + d + 1] = s;
            }
        }
    }
    return WF_OK;
}

wf_status_t wf_cpu_rope_grid(wf_backend_ctx_t *ctx, const wf_rope_grid_params_t *p)
{
    (void)ctx;
    if (!wf_ops_rope_grid_ok(p))
        return WF_E_BAD_ARGUMENT;
    /* stride[a]: tokens per step of axis a (the axes after it) */
    int64_t stride[WF_ROPE_MAX_AXES];
    int64_t st = 1;
    for (uint32_t a = p->n_axes; a-- > 0;) {
        stride[a] = st;
        st *= p->grid[a];
    }
    const int64_t D = p->D;
    int64_t d = 0;
    for (uint32_t a = 0; a < p->n_axes; a++) {
        const int64_t da = p->axes_dims[a];
        for (int64_t j = 0; j < da / 2; j++, d += 2) {
            /* as rope_table: one pow per frequency, the angle in double */
            double freq = 1.0 / pow(p->theta, (double)(2 * j) / (double)da);
            for (int64_t r = 0; r < p->L; r++) {
                double pos = (double)((p->row0 + r) / stride[a] % p->grid[a]);
                double ang = pos * freq;
                float c = (float)cos(ang), s = (float)sin(ang);
                p->cos[r * D + d] = p->cos[r * D + d + 1] = c;
                p->sin[r * D + d] = p->sin[r * D + d + 1] = s;
            }
        }
    }
    return WF_OK;
}

/* One row of a sinusoidal embedding (get_timestep_embedding's f32 steps):
 * a_k = scale * (tv exp(nl k / div)), k < half; [sin | cos] or, flipped,
 * [cos | sin] into dst[0 .. 2 half). */
static void timestep_row(float tv, int half, float nl, float div, float scale, bool flip,
                         float *dst)
{
    float *cs = flip ? dst : dst + half, *sn = flip ? dst + half : dst;
    for (int k = 0; k < half; k++) {
        float e = nl * (float)k;
        e = e / div;
        float arg = scale * (tv * expf(e));
        cs[k] = cosf(arg);
        sn[k] = sinf(arg);
    }
}

wf_status_t wf_cpu_timestep_embed(wf_backend_ctx_t *ctx, const wf_timestep_params_t *p)
{
    (void)ctx;
    if (!wf_ops_timestep_embed_ok(p))
        return WF_E_BAD_ARGUMENT;
    const int half = (int)(p->dim / 2);
    const float nl = (float)-log((double)p->max_period);
    const float div = (float)((double)half - (double)p->downscale_freq_shift);
    for (int64_t b = 0; b < p->B; b++) {
        float *row = p->dst + b * p->dim;
        timestep_row(p->t[b], half, nl, div, p->scale, p->flip_sin_to_cos, row);
        if (p->dim % 2 != 0)
            row[p->dim - 1] = 0.0f;
    }
    return WF_OK;
}

wf_status_t wf_cpu_timestep_proj(wf_backend_ctx_t *ctx, const float *t,
                                 int64_t B, int64_t dim, wf_dtype_t round_dtype,
                                 float *dst)
{
    (void)ctx;
    if (!wf_ops_timestep_ok(t, B, dim, round_dtype, dst))
        return WF_E_BAD_ARGUMENT;
    /* timestep_embed's row (scale 1 multiplies exactly) of the rounded t */
    const int half = (int)(dim / 2);
    const float nl = (float)-9.210340371976184; /* -ln(10000) */
    for (int64_t b = 0; b < B; b++) {
        float tv = wf_round_to_dtype(wf_round_to_dtype(t[b], round_dtype) * 1000.0f,
                                     round_dtype);
        timestep_row(tv, half, nl, (float)half, 1.0f, true, dst + b * 2 * half);
    }
    return WF_OK;
}

/* ---- copy_rows --------------------------------------------------------------------- */

wf_status_t wf_cpu_copy_rows(wf_backend_ctx_t *ctx, void *dst, size_t ld_dst,
                             const void *src, size_t ld_src, int64_t rows,
                             size_t row_bytes)
{
    (void)ctx;
    if (!wf_ops_copy_rows_ok(dst, ld_dst, src, ld_src, rows, row_bytes))
        return WF_E_BAD_ARGUMENT;
    const int64_t n = row_bytes == 0 ? 0 : rows;
    if (n == 0)
        return WF_OK;
    if (ld_dst == row_bytes && ld_src == row_bytes) {
        memcpy(dst, src, (size_t)n * row_bytes);
        return WF_OK;
    }
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + (size_t)r * ld_dst, s + (size_t)r * ld_src, row_bytes);
    return WF_OK;
}
