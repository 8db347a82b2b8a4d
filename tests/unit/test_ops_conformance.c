/* test_ops_conformance.c — every op of wf_backend_op_t on every backend,
 * one table: a row per op (rows[] is indexed by the op, and a static
 * assert ties its length to WF_BACKEND_OP_COUNT, so an op added to
 * backend.h needs its row here before this compiles).
 *
 * Each row runs its op on deterministic inputs through a backend, on that
 * backend's memory (dev_alloc + copies where the backend has them), into
 * outputs pre-filled with NaN (an element the op does not write fails),
 * and the test compares:
 *   cpu      against the row's fp64 reference, element by element,
 *            |got - ref| <= tol (each row states its tolerance);
 *   standin  (tests/support/standin_dev.c, scrambled device memory)
 *            against the CPU's outputs bit for bit;
 *   cuda     against the fp64 reference with the row's tolerance times
 *            its dev_factor (f32 statistics on the device); only with
 *            --cuda (the cuda_ops_conformance test), which exits 77 where
 *            weft has no CUDA or no GPU answers.
 * Every comparison is also run on a copy of its outputs with one element
 * moved past the tolerance (or one bit flipped), which must fail: a check
 * that cannot fail fails.
 * The ops with a low-precision activation (linear's x / y, bias_act's,
 * modln's, rms_norm's, layer_norm's and head_norm_rope's dst) run a
 * second case in bf16 whose
 * outputs follow the f32 ones: the same fp64 reference (of the bf16
 * inputs), the f32 tolerance plus one bf16 rounding, 2^-8 (|ref| + tol)
 * (BF16_U below); the stand-in still gives the CPU's bits.
 * Besides the table: wf_backend_supports / wf_backend_op_name /
 * wf_backend_require on the backends and on a table missing an entry.
 */
#include "backend.h"
#include "reference.h"
#include "support/check.h"
#include "support/standin_dev.h"
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXOUT = 1 << 15, MAXBUF = 16 };

/* ---- a backend and its memory -------------------------------------------- */

typedef struct bk {
    const char *name;
    const wf_backend_ops_t *o;
    wf_backend_ctx_t *c;
    bool dev;                 /* device memory: dev_alloc, copy_h2d / d2h */
    void *host[MAXBUF];       /* host backend: the buffers of this row */
    int nhost;
    bool broken;              /* an allocation or a copy failed in this row */
} bk_t;

/* A buffer of `bytes` on the backend holding a copy of src, or NaN (all
 * bits set) when src is NULL. */
static void *put(bk_t *b, const void *src, size_t bytes)
{
    void *tmp = malloc(bytes);
    if (!tmp) {
        b->broken = true;
        return NULL;
    }
    if (src)
        memcpy(tmp, src, bytes);
    else
        memset(tmp, 0xFF, bytes);
    if (!b->dev) {
        if (b->nhost == MAXBUF) {
            free(tmp);
            b->broken = true;
            return NULL;
        }
        b->host[b->nhost++] = tmp;
        return tmp;
    }
    void *d = NULL;
    if (b->o->dev_alloc(b->c, bytes, &d) != WF_OK || b->o->copy_h2d(b->c, d, tmp, bytes) != WF_OK ||
        b->o->synchronize(b->c) != WF_OK)
        b->broken = true;
    free(tmp);
    return d;
}

/* Copy a backend buffer back to host memory dst. */
static void get(bk_t *b, void *dst, const void *src, size_t bytes)
{
    if (!b->dev) {
        memcpy(dst, src, bytes);
        return;
    }
    if (b->o->synchronize(b->c) != WF_OK || b->o->copy_d2h(b->c, dst, src, bytes) != WF_OK ||
        b->o->synchronize(b->c) != WF_OK)
        b->broken = true;
}

/* Release the row's buffers. */
static void reset(bk_t *b)
{
    if (b->dev) {
        (void)b->o->synchronize(b->c);
        b->o->dev_reset(b->c);
    }
    for (int i = 0; i < b->nhost; i++)
        free(b->host[i]);
    b->nhost = 0;
}

/* ---- inputs ----------------------------------------------------------------- */

static uint64_t rng_state;

static void seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }

/* Uniform in [lo, hi), f32. */
static float uni(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

static void fill(float *v, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = uni(lo, hi);
}

/* ---- rows ----------------------------------------------------------------------
 * run(b, got, ref, tol): the op on backend b, its outputs into got (host,
 * concatenated); when ref is non-NULL also the fp64 reference and the
 * tolerance of each element. Returns the number of outputs. Inputs come
 * from seed(op), so every backend sees the same. */

typedef size_t (*row_fn)(bk_t *b, float *got, double *ref, double *tol);

static const double U = 5.9604644775390625e-08; /* 2^-24, f32 unit roundoff */
static const double BF16_U = 0.00390625;        /* 2^-8, bf16 unit roundoff */

/* The tolerance of a value within t of ref in f32, then rounded to bf16. */
static double bf16_tol(double r, double t) { return t + BF16_U * (fabs(r) + t); }

/* n bf16 values of a backend buffer, widened to f32 into dst. */
static void get_bf16(bk_t *b, float *dst, const void *src, size_t n)
{
    uint16_t *h = malloc(n * 2 + 2);
    if (!h) {
        b->broken = true;
        return;
    }
    get(b, h, src, n * 2);
    wf_convert_to_f32(dst, h, WF_DTYPE_BF16, n);
    free(h);
}

/* v rounded to bf16 and back, n values in place (inputs a bf16 op reads). */
static void round_bf16(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = wf_bf16_to_f32(wf_f32_to_bf16(v[i]));
}

/* attention: B 1, Sq 9, Skv 11, Hq 4, Hkv 2, D 64 (a CUDA head dim),
 * causal with offsets; tol 2e-5 + 2e-5 |ref| (out), 2e-5 (lse). Then
 * out again in bf16, rows ld_out apart: tol + 2^-8 (|ref| + tol). */
static size_t row_attention(bk_t *b, float *got, double *ref, double *tol)
{
    const int64_t B = 1, Sq = 9, Skv = 11, Hq = 4, Hkv = 2, D = 64;
    const size_t nq = (size_t)(B * Sq * Hq * D), nk = (size_t)(B * Skv * Hkv * D);
    float q[9 * 4 * 64], k[11 * 2 * 64], v[11 * 2 * 64];
    seed(WF_BACKEND_OP_ATTENTION);
    fill(q, nq, -1, 1);
    fill(k, nk, -1, 1);
    fill(v, nk, -1, 1);
    wf_attn_params_t p = {.B = B, .Sq = Sq, .Skv = Skv, .Hq = Hq, .Hkv = Hkv, .D = D,
                          .h_begin = 0, .h_end = Hq, .scale = 0.25f, .causal = true,
                          .q_offset = 4, .kv_offset = 0, .q_dtype = WF_DTYPE_F32,
                          .k_dtype = WF_DTYPE_F32, .v_dtype = WF_DTYPE_F32,
                          .out_dtype = WF_DTYPE_F32};
    p.q = put(b, q, nq * 4);
    p.k = put(b, k, nk * 4);
    p.v = put(b, v, nk * 4);
    p.out = put(b, NULL, nq * 4);
    p.lse = put(b, NULL, (size_t)(B * Sq * Hq) * 4);
    size_t wsb = b->o->attention_workspace(&p);
    void *ws = wsb ? put(b, NULL, wsb + 64) : NULL;
    if (ws)
        ws = (void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    CHECK(b->broken || b->o->attention(b->c, &p, ws) == WF_OK, "%s attention", b->name);
    get(b, got, p.out, nq * 4);
    get(b, got + nq, p.lse, (size_t)(B * Sq * Hq) * 4);
    /* the same into bf16 rows ld_out = Hq D + 8 apart (the rows of a
     * wider tensor): the 8 elements between rows keep what they held */
    enum { LDO = 4 * 64 + 8 };
    const size_t no = (size_t)(B * Sq * LDO), nl = (size_t)(B * Sq * Hq);
    uint16_t held[9 * LDO], hs[9 * LDO];
    for (size_t i = 0; i < no; i++)
        held[i] = (uint16_t)(0x3f00 + i % 97); /* finite bf16 values */
    memset(hs, 0, sizeof hs);
    wf_attn_params_t ps = p;
    ps.out_dtype = WF_DTYPE_BF16;
    ps.ld_out = LDO;
    ps.lse = NULL;
    ps.out = put(b, held, no * 2);
    CHECK(b->broken || b->o->attention(b->c, &ps, ws) == WF_OK, "%s attention, ld_out",
          b->name);
    get(b, hs, ps.out, no * 2);
    size_t kept = 0;
    for (int64_t r = 0; r < B * Sq; r++) {
        for (int64_t c = 0; c < Hq * D; c++)
            got[nq + nl + (size_t)(r * Hq * D + c)] = wf_bf16_to_f32(hs[r * LDO + c]);
        for (int64_t c = Hq * D; c < LDO; c++)
            kept += hs[r * LDO + c] == held[r * LDO + c];
    }
    CHECK(b->broken || kept == (size_t)(B * Sq * (LDO - Hq * D)),
          "%s attention, ld_out: %zu of %lld elements between rows kept", b->name, kept,
          (long long)(B * Sq * (LDO - Hq * D)));
    if (ref) {
        wf_ref_attn_t a = {.B = B, .Sq = Sq, .Skv = Skv, .Hq = Hq, .Hkv = Hkv, .D = D,
                           .scale = 0.25, .causal = true, .q_offset = 4, .kv_offset = 0};
        CHECK(wf_ref_attention(&a, q, k, v, ref, ref + nq) == WF_OK);
        for (size_t i = 0; i < nq + nl; i++)
            tol[i] = 2e-5 + (i < nq ? 2e-5 * fabs(ref[i]) : 0.0);
        /* the strided bf16 copy: the f32 tolerance plus one bf16 rounding */
        for (size_t i = 0; i < nq; i++) {
            ref[nq + nl + i] = ref[i];
            tol[nq + nl + i] = tol[i] + 0x1p-8 * (fabs(ref[i]) + tol[i]);
        }
    }
    return nq + nl + nq;
}

/* linear: rows 5, in 48 (two weight blocks 32 + 16), out 24, f32
 * weights, bias, SiLU; tol 4 in u sum|x w| + 4u |ref| + 1e-7. Then bf16
 * weights with a bf16 x (ld 50) and a bf16 y (ld 26), one block, bias,
 * GELU(tanh): the reference of the bf16 values, the tolerance of the
 * tanh GELU's (4e-6 |ref|, and a GPU epilogue's 2^-11 |v|) on top, plus
 * a bf16 rounding. */
static size_t row_linear(bk_t *b, float *got, double *ref, double *tol)
{
    enum { R = 5, IN = 48, OUT = 24, LDX = 50, LDY = 26 };
    float x[R * LDX], w[OUT * IN], bias[OUT];
    seed(WF_BACKEND_OP_LINEAR);
    fill(x, R * LDX, -1, 1);
    fill(w, OUT * IN, -0.5f, 0.5f);
    fill(bias, OUT, -0.5f, 0.5f);
    /* W is (out, in) rows IN apart; the blocks are its columns 0..32, 32..48 */
    float *dx = put(b, x, sizeof x), *dw = put(b, w, sizeof w), *db = put(b, bias, sizeof bias);
    float *dy = put(b, NULL, R * LDY * 4);
    wf_linear_params_t p = {.rows = R, .in = IN, .out = OUT, .x = dx, .ldx = LDX,
                            .w_dtype = WF_DTYPE_F32, .ldw = IN, .nwb = 2,
                            .wb = {dw, dw ? dw + 32 : NULL}, .wbw = {32, 16},
                            .bias = db, .act = WF_ACT_SILU, .y = dy, .ldy = LDY};
    size_t wsb = b->o->linear_workspace(&p);
    void *ws = wsb ? put(b, NULL, wsb) : NULL;
    CHECK(b->broken || b->o->linear(b->c, &p, ws) == WF_OK, "%s linear", b->name);
    float y[R * LDY];
    get(b, y, dy, sizeof y);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < OUT; o++) {
            got[r * OUT + o] = y[r * LDY + o];
            if (!ref)
                continue;
            double s = bias[o], mag = fabs(bias[o]);
            for (int i = 0; i < IN; i++) {
                s += (double)x[r * LDX + i] * w[o * IN + i];
                mag += fabs((double)x[r * LDX + i] * w[o * IN + i]);
            }
            ref[r * OUT + o] = s / (1.0 + exp(-s));
            tol[r * OUT + o] = 4.0 * IN * U * mag + 4.0 * U * fabs(ref[r * OUT + o]) + 1e-7;
        }
    /* the bf16 case: x, W as bf16 (the reference takes those values) */
    round_bf16(x, R * LDX);
    round_bf16(w, OUT * IN);
    uint16_t xh[R * LDX], wh[OUT * IN];
    wf_convert_from_f32(xh, WF_DTYPE_BF16, x, R * LDX);
    wf_convert_from_f32(wh, WF_DTYPE_BF16, w, OUT * IN);
    void *hx = put(b, xh, sizeof xh), *hw = put(b, wh, sizeof wh);
    void *hy = put(b, NULL, R * LDY * 2);
    wf_linear_params_t q = {.rows = R, .in = IN, .out = OUT, .x = hx, .ldx = LDX,
                            .x_dtype = WF_DTYPE_BF16, .w_dtype = WF_DTYPE_BF16, .ldw = IN,
                            .nwb = 1, .wb = {hw}, .wbw = {IN}, .bias = db,
                            .act = WF_ACT_GELU_TANH, .y = hy, .ldy = LDY,
                            .y_dtype = WF_DTYPE_BF16};
    wsb = b->o->linear_workspace(&q);
    CHECK(wsb == 0 || !b->dev || strcmp(b->name, "cuda") != 0,
          "%s linear: a bf16 x needs no rounding workspace", b->name);
    ws = wsb ? put(b, NULL, wsb) : NULL;
    CHECK(b->broken || b->o->linear(b->c, &q, ws) == WF_OK, "%s linear bf16", b->name);
    float yb[R * LDY];
    get_bf16(b, yb, hy, R * LDY);
    const size_t o0 = R * OUT;
    for (int r = 0; r < R; r++)
        for (int o = 0; o < OUT; o++) {
            got[o0 + r * OUT + o] = yb[r * LDY + o];
            if (!ref)
                continue;
            double v = bias[o], mag = fabs(bias[o]);
            for (int i = 0; i < IN; i++) {
                v += (double)x[r * LDX + i] * w[o * IN + i];
                mag += fabs((double)x[r * LDX + i] * w[o * IN + i]);
            }
            double g = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            ref[o0 + r * OUT + o] = g;
            /* the sum's error passes through GELU' (|.| < 1.13); a GPU
             * applies GELU in cuBLASLt's epilogue, whose accuracy NVIDIA
             * does not state: the hardware tanh's bound, 0.5 2^-10 |v|
             * (tests/gpu/test_cuda_gpu.c, GELU_EPI_SLACK) */
            double t = 1.13 * (4.0 * IN * U * mag + 1e-7) + 4e-6 * fabs(g) + 1e-7 +
                       0.5 * 0x1p-10 * fabs(v);
            tol[o0 + r * OUT + o] = bf16_tol(g, t);
        }
    return 2 * R * OUT;
}

/* bias_act: (6, 40) rows 43 apart, bias, GELU(tanh); tol 4e-6 |ref| + 1e-7.
 * Then the same from the untouched input into a bf16 dst (rows 41 apart). */
static size_t row_bias_act(bk_t *b, float *got, double *ref, double *tol)
{
    enum { R = 6, N = 40, LD = 43 };
    float y[R * LD], bias[N];
    seed(WF_BACKEND_OP_BIAS_ACT);
    fill(y, R * LD, -4, 4);
    fill(bias, N, -1, 1);
    float *dy = put(b, y, sizeof y), *db = put(b, bias, sizeof bias);
    void *dh = put(b, NULL, R * 41 * 2);
    CHECK(b->broken || b->o->bias_act(b->c, dy, WF_DTYPE_F32, R, N, LD, db, WF_ACT_GELU_TANH, dh,
                                      41,
                                      WF_DTYPE_BF16) == WF_OK,
          "%s bias_act into bf16", b->name);
    float hb[R * 41];
    get_bf16(b, hb, dh, R * 41);
    CHECK(b->broken || b->o->bias_act(b->c, dy, WF_DTYPE_F32, R, N, LD, db, WF_ACT_GELU_TANH,
                                      NULL, 0,
                                      WF_DTYPE_F32) == WF_OK,
          "%s bias_act", b->name);
    float out[R * LD];
    get(b, out, dy, sizeof out);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < N; c++) {
            got[r * N + c] = out[r * LD + c];
            if (ref) {
                double v = (double)y[r * LD + c] + bias[c];
                double g = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                ref[r * N + c] = g;
                tol[r * N + c] = 4e-6 * fabs(g) + 1e-7;
            }
        }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < N; c++) {
            got[R * N + r * N + c] = hb[r * 41 + c];
            if (ref) {
                ref[R * N + r * N + c] = ref[r * N + c];
                tol[R * N + r * N + c] = bf16_tol(ref[r * N + c], tol[r * N + c]);
            }
        }
    /* a bf16 y (a GEMM's bf16 output): into a bf16 dst, then in place;
     * the reference of the rounded y */
    round_bf16(y, R * LD);
    uint16_t yh[R * LD];
    wf_convert_from_f32(yh, WF_DTYPE_BF16, y, R * LD);
    void *dyh = put(b, yh, sizeof yh);
    CHECK(b->broken || b->o->bias_act(b->c, dyh, WF_DTYPE_BF16, R, N, LD, db, WF_ACT_GELU_TANH,
                                      dh, 41, WF_DTYPE_BF16) == WF_OK,
          "%s bias_act bf16 -> bf16", b->name);
    float hc[R * 41], hi[R * LD];
    get_bf16(b, hc, dh, R * 41);
    CHECK(b->broken || b->o->bias_act(b->c, dyh, WF_DTYPE_BF16, R, N, LD, db, WF_ACT_GELU_TANH,
                                      NULL, 0, WF_DTYPE_BF16) == WF_OK,
          "%s bias_act bf16 in place", b->name);
    get_bf16(b, hi, dyh, R * LD);
    const size_t o2 = 2 * R * N, o3 = 3 * R * N;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < N; c++) {
            got[o2 + r * N + c] = hc[r * 41 + c];
            got[o3 + r * N + c] = hi[r * LD + c];
            if (ref) {
                double v = (double)y[r * LD + c] + bias[c];
                double g = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                ref[o2 + r * N + c] = ref[o3 + r * N + c] = g;
                tol[o2 + r * N + c] = tol[o3 + r * N + c] = bf16_tol(g, 4e-6 * fabs(g) + 1e-7);
            }
        }
    return 4 * R * N;
}

/* act: SiLU, then the exact GELU, of 300 values in [-20, 20] into other
 * buffers; tol 4e-6 |ref| + 1e-9. */
static size_t row_act(bk_t *b, float *got, double *ref, double *tol)
{
    enum { N = 300 };
    float x[N];
    seed(WF_BACKEND_OP_ACT);
    fill(x, N, -20, 20);
    float *dx = put(b, x, sizeof x), *ds = put(b, NULL, sizeof x), *dg = put(b, NULL, sizeof x);
    CHECK(b->broken || b->o->act(b->c, ds, dx, N, WF_ACT_SILU) == WF_OK, "%s act", b->name);
    CHECK(b->broken || b->o->act(b->c, dg, dx, N, WF_ACT_GELU) == WF_OK, "%s act gelu",
          b->name);
    get(b, got, ds, sizeof x);
    get(b, got + N, dg, sizeof x);
    for (int i = 0; ref && i < N; i++) {
        double v = x[i];
        ref[i] = v / (1.0 + exp(-v));
        ref[N + i] = 0.5 * v * erfc(-v / sqrt(2.0));
        tol[i] = 4e-6 * fabs(ref[i]) + 1e-9;
        tol[N + i] = 4e-6 * fabs(ref[N + i]) + 1e-9;
    }
    return 2 * N;
}

/* add: 257 values; tol u |ref| (one rounding). */
static size_t row_add(bk_t *b, float *got, double *ref, double *tol)
{
    enum { N = 257 };
    float x[N], y[N];
    seed(WF_BACKEND_OP_ADD);
    fill(x, N, -3, 3);
    fill(y, N, -3, 3);
    float *dx = put(b, x, sizeof x), *dy = put(b, y, sizeof y);
    CHECK(b->broken || b->o->add(b->c, dy, dx, N) == WF_OK, "%s add", b->name);
    get(b, got, dy, sizeof y);
    for (int i = 0; ref && i < N; i++) {
        ref[i] = (double)x[i] + y[i];
        tol[i] = U * fabs(ref[i]);
    }
    return N;
}

/* axpy: 257 values, alpha -0.75; tol u(|ax| + |ref|) (a product and a sum). */
static size_t row_axpy(bk_t *b, float *got, double *ref, double *tol)
{
    enum { N = 257 };
    float x[N], y[N];
    seed(WF_BACKEND_OP_AXPY);
    fill(x, N, -3, 3);
    fill(y, N, -3, 3);
    float *dx = put(b, x, sizeof x), *dy = put(b, y, sizeof y);
    CHECK(b->broken || b->o->axpy(b->c, dy, -0.75f, dx, N) == WF_OK, "%s axpy", b->name);
    get(b, got, dy, sizeof y);
    for (int i = 0; ref && i < N; i++) {
        ref[i] = (double)y[i] - 0.75 * x[i];
        tol[i] = U * (fabs(0.75 * x[i]) + fabs(ref[i]));
    }
    return N;
}

/* change_sums: 5000 values (more than one block of the device's
 * reduction), then a against itself (0 change); the sums in double of f32
 * values: tol 1e-12 |ref| (the order of the additions). */
static size_t row_change_sums(bk_t *b, float *got, double *ref, double *tol)
{
    enum { N = 5000 };
    static float x[N], y[N];
    seed(WF_BACKEND_OP_CHANGE_SUMS);
    fill(x, N, -3, 3);
    fill(y, N, -3, 3);
    float *dx = put(b, x, sizeof x), *dy = put(b, y, sizeof y);
    double *scr = put(b, NULL, 2 * sizeof(double)), s[2] = {NAN, NAN}, t[2] = {NAN, NAN};
    CHECK(b->broken || b->o->change_sums(b->c, dx, dy, N, scr, s) == WF_OK, "%s change_sums",
          b->name);
    CHECK(b->broken || b->o->change_sums(b->c, dx, dx, N, scr, t) == WF_OK,
          "%s change_sums of a with itself", b->name);
    got[0] = (float)s[0];
    got[1] = (float)s[1];
    got[2] = (float)t[0];
    if (ref) {
        double d = 0, m = 0, mx = 0;
        for (int i = 0; i < N; i++) {
            d += fabs((double)x[i] - (double)y[i]);
            m += fabs((double)y[i]);
            mx += fabs((double)x[i]);
        }
        ref[0] = d;
        ref[1] = m;
        ref[2] = 0;
        CHECK(b->broken || (fabs(s[0] - d) <= 1e-12 * d && fabs(s[1] - m) <= 1e-12 * m &&
                            t[0] == 0 && fabs(t[1] - mx) <= 1e-12 * mx),
              "%s change_sums in double: %.17g %.17g %.17g %.17g", b->name, s[0], s[1], t[0],
              t[1]);
        for (int i = 0; i < 3; i++)
            tol[i] = U * fabs(ref[i]);
    }
    return 3;
}

/* Mean and 1 / sqrt(var + eps) of n values in double. */
static void stats(const float *x, int n, double eps, double *ret_mean, double *ret_inv)
{
    double m = 0, v = 0;
    for (int i = 0; i < n; i++)
        m += x[i];
    m /= n;
    for (int i = 0; i < n; i++)
        v += (x[i] - m) * (x[i] - m);
    *ret_mean = m;
    *ret_inv = 1.0 / sqrt(v / n + eps);
}

/* modln: nbatch 2 x per 3 rows of 37, in place, shift / scale chunks of
 * one (2, 4 C) buffer; tol 4u (|n (1 + sc)| + |sh|) + 1e-7. */
static size_t row_modln(bk_t *b, float *got, double *ref, double *tol)
{
    enum { NB = 2, PER = 3, C = 37, LD = 40, LDM = 4 * C };
    float x[NB * PER * LD], mod[NB * LDM];
    seed(WF_BACKEND_OP_MODLN);
    fill(x, sizeof x / 4, -2, 5);
    fill(mod, sizeof mod / 4, -1, 1);
    float *dx = put(b, x, sizeof x), *dm = put(b, mod, sizeof mod);
    void *dh = put(b, NULL, NB * PER * 39 * 2);
    wf_modln_params_t p = {.nbatch = NB, .per = PER, .C = C, .src = dx, .ld_src = LD, .dst = dh,
                           .ld_dst = 39, .shift = dm ? dm + C : NULL,
                           .scale = dm ? dm + 2 * C : NULL, .ld_mod = LDM, .eps = 1e-6f,
                           .dst_dtype = WF_DTYPE_BF16};
    /* first into a bf16 dst (rows 39 apart), then in place in f32 */
    CHECK(b->broken || b->o->modln(b->c, &p) == WF_OK, "%s modln into bf16", b->name);
    float hb[NB * PER * 39];
    get_bf16(b, hb, dh, NB * PER * 39);
    p.dst = dx;
    p.ld_dst = LD;
    p.dst_dtype = WF_DTYPE_F32;
    CHECK(b->broken || b->o->modln(b->c, &p) == WF_OK, "%s modln", b->name);
    float y[NB * PER * LD];
    get(b, y, dx, sizeof y);
    for (int r = 0; r < NB * PER; r++) {
        double m, inv;
        stats(x + r * LD, C, (double)1e-6f, &m, &inv);
        for (int c = 0; c < C; c++) {
            got[r * C + c] = y[r * LD + c];
            if (!ref)
                continue;
            double sh = mod[(r / PER) * LDM + C + c], sc = mod[(r / PER) * LDM + 2 * C + c];
            double n = (x[r * LD + c] - m) * inv;
            ref[r * C + c] = n * (1.0 + sc) + sh;
            tol[r * C + c] = 4.0 * U * (fabs(n * (1.0 + sc)) + fabs(sh)) + 1e-7;
        }
    }
    const size_t o0 = NB * PER * C;
    for (int r = 0; r < NB * PER; r++)
        for (int c = 0; c < C; c++) {
            got[o0 + r * C + c] = hb[r * 39 + c];
            if (ref) {
                ref[o0 + r * C + c] = ref[r * C + c];
                tol[o0 + r * C + c] = bf16_tol(ref[r * C + c], tol[r * C + c]);
            }
        }
    return 2 * o0;
}

/* gate_residual: nbatch 2 x per 4 rows of 33; tol 2u (|g y| + |ref|). */
static size_t row_gate_residual(bk_t *b, float *got, double *ref, double *tol)
{
    enum { NB = 2, PER = 4, C = 33, LDS = 35, LDY = 36, LDG = 99 };
    float s[NB * PER * LDS], y[NB * PER * LDY], g[NB * LDG];
    seed(WF_BACKEND_OP_GATE_RESIDUAL);
    fill(s, sizeof s / 4, -3, 3);
    fill(y, sizeof y / 4, -3, 3);
    fill(g, sizeof g / 4, -1, 1);
    float *ds = put(b, s, sizeof s), *dy = put(b, y, sizeof y), *dg = put(b, g, sizeof g);
    CHECK(b->broken || b->o->gate_residual(b->c, ds, LDS, dy, LDY, dg, LDG, NB, PER, C) == WF_OK,
          "%s gate_residual", b->name);
    float out[NB * PER * LDS];
    get(b, out, ds, sizeof out);
    for (int r = 0; r < NB * PER; r++)
        for (int c = 0; c < C; c++) {
            got[r * C + c] = out[r * LDS + c];
            if (ref) {
                double gy = (double)g[(r / PER) * LDG + c] * y[r * LDY + c];
                ref[r * C + c] = s[r * LDS + c] + gy;
                tol[r * C + c] = 2.0 * U * (fabs(gy) + fabs(ref[r * C + c]));
            }
        }
    return NB * PER * C;
}

/* A (L, D) cos / sin table as rope_table makes it for positions pos
 * (L, n_axes) and axes dims, in double. */
static void ref_table(const double *pos, int L, const uint32_t *dims, int n_axes, double theta,
                      int D, double *cs, double *sn)
{
    for (int l = 0; l < L; l++) {
        int d = 0;
        for (int a = 0; a < n_axes; a++)
            for (uint32_t j = 0; j < dims[a] / 2; j++, d += 2) {
                double ang = pos[l * n_axes + a] / pow(theta, (double)(2 * j) / dims[a]);
                cs[l * D + d] = cs[l * D + d + 1] = cos(ang);
                sn[l * D + d] = sn[l * D + d + 1] = sin(ang);
            }
    }
}

/* head_norm_rope's case below: nbatch 2 x per 3 rows of H 3 x D 8 into
 * rows 2..5 of L 6, source row stride 26. */
enum { RP_NB = 2, RP_PER = 3, RP_L = 6, RP_ROW0 = 2, RP_H = 3, RP_D = 8, RP_LD = 26 };
typedef struct rope_case {
    const float *x, *w, *cs, *sn;  /* source rows, norm weight, tables */
} rope_case_t;

/* The fp64 reference of head_norm_rope for the written rows of o (the
 * (nbatch, L, H, D) result read back as f32): got / ref / tol from n
 * on, tol 8u (|x0 c| + |x1 s|) + 1e-7, widened for a bf16 result
 * (bf16_tol of each value). Returns the new n. */
static size_t rope_check(const rope_case_t *k, const float *o, bool bf16, float *got,
                         double *ref, double *tol, size_t n)
{
    for (int bb = 0; bb < RP_NB; bb++)
        for (int s = 0; s < RP_PER; s++)
            for (int h = 0; h < RP_H; h++) {
                const float *xr = k->x + (bb * RP_PER + s) * RP_LD + h * RP_D;
                const float *orow = o + ((bb * RP_L + RP_ROW0 + s) * RP_H + h) * RP_D;
                double ss = 0;
                for (int d = 0; d < RP_D; d++)
                    ss += (double)xr[d] * xr[d];
                double inv = 1.0 / sqrt(ss / RP_D + (double)1e-6f);
                for (int d = 0; d < RP_D; d += 2, n += 2) {
                    got[n] = orow[d];
                    got[n + 1] = orow[d + 1];
                    if (!ref)
                        continue;
                    double x0 = xr[d] * inv * k->w[d], x1 = xr[d + 1] * inv * k->w[d + 1];
                    double c = k->cs[(RP_ROW0 + s) * RP_D + d];
                    double sv = k->sn[(RP_ROW0 + s) * RP_D + d];
                    ref[n] = x0 * c - x1 * sv;
                    ref[n + 1] = x1 * c + x0 * sv;
                    double t = 8.0 * U * (fabs(x0 * c) + fabs(x1 * sv)) + 1e-7;
                    tol[n] = bf16 ? bf16_tol(ref[n], t) : t;
                    tol[n + 1] = bf16 ? bf16_tol(ref[n + 1], t) : t;
                }
            }
    return n;
}

/* head_norm_rope: nbatch 2 x per 3 rows of H 3 x D 8 into rows 2..5 of L
 * 6, norm weight, tables from ref_table (f32); tol 8u (|x0 c| + |x1 s|)
 * + 1e-7 on the written rows (the rest stays NaN and is not compared). */
static size_t row_head_norm_rope(bk_t *b, float *got, double *ref, double *tol)
{
    enum { NB = RP_NB, PER = RP_PER, L = RP_L, ROW0 = RP_ROW0, H = RP_H, D = RP_D,
           LD = RP_LD };
    float x[NB * PER * LD], w[D], cs[L * D], sn[L * D];
    double pos[L], rc[L * D], rs[L * D];
    const uint32_t dims[1] = {D};
    seed(WF_BACKEND_OP_HEAD_NORM_ROPE);
    fill(x, sizeof x / 4, -2, 2);
    fill(w, D, 0.5f, 1.5f);
    for (int l = 0; l < L; l++)
        pos[l] = 3 * l + 1;
    ref_table(pos, L, dims, 1, 10000.0, D, rc, rs);
    for (int i = 0; i < L * D; i++) {
        cs[i] = (float)rc[i];
        sn[i] = (float)rs[i];
    }
    float *dx = put(b, x, sizeof x), *dw = put(b, w, sizeof w), *dc = put(b, cs, sizeof cs);
    float *dsn = put(b, sn, sizeof sn), *dd = put(b, NULL, NB * L * H * D * 4);
    wf_headrope_params_t p = {.nbatch = NB, .per = PER, .L = L, .row0 = ROW0, .H = H, .D = D,
                              .src = dx, .ld_src = LD, .dst = dd, .norm = dw, .cos = dc,
                              .sin = dsn, .eps = 1e-6f};
    CHECK(b->broken || b->o->head_norm_rope(b->c, &p) == WF_OK, "%s head_norm_rope", b->name);
    float out[NB * L * H * D];
    get(b, out, dd, sizeof out);
    /* the same into bf16 q / k / v (attention's operands) */
    void *dh = put(b, NULL, NB * L * H * D * 2);
    p.dst = dh;
    p.dst_dtype = WF_DTYPE_BF16;
    CHECK(b->broken || b->o->head_norm_rope(b->c, &p) == WF_OK, "%s head_norm_rope bf16",
          b->name);
    float hb[NB * L * H * D];
    get_bf16(b, hb, dh, NB * L * H * D);
    size_t n = rope_check(&(rope_case_t){x, w, cs, sn}, out, false, got, ref, tol, 0);
    const size_t n0 = n;
    for (int bb = 0; bb < NB; bb++)
        for (int s = 0; s < PER; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++, n++) {
                    size_t f = n - n0; /* its f32 twin */
                    got[n] = hb[((bb * L + ROW0 + s) * H + h) * D + d];
                    if (ref) {
                        ref[n] = ref[f];
                        tol[n] = bf16_tol(ref[f], tol[f]);
                    }
                }
    /* a bf16 src (a projection's bf16 output) into bf16: the reference of
     * the rounded inputs */
    round_bf16(x, sizeof x / 4);
    uint16_t xh[NB * PER * LD];
    wf_convert_from_f32(xh, WF_DTYPE_BF16, x, NB * PER * LD);
    p.src = put(b, xh, sizeof xh);
    p.src_dtype = WF_DTYPE_BF16;
    CHECK(b->broken || b->o->head_norm_rope(b->c, &p) == WF_OK,
          "%s head_norm_rope bf16 -> bf16", b->name);
    get_bf16(b, hb, dh, NB * L * H * D);
    n = rope_check(&(rope_case_t){x, w, cs, sn}, hb, true, got, ref, tol, n);
    return n;
}

/* rope_table: L 10 tokens, axes (4, 6, 6) (FLUX-like), theta 10000,
 * positions up to 60; tol u (cos / sin of the double angle rounded to
 * f32: half an ulp of a value below 1). */
static size_t row_rope_table(bk_t *b, float *got, double *ref, double *tol)
{
    enum { L = 10, NA = 3, D = 16 };
    const uint32_t dims[NA] = {4, 6, 6};
    float ids[L * NA];
    double pos[L * NA];
    seed(WF_BACKEND_OP_ROPE_TABLE);
    for (int i = 0; i < L * NA; i++)
        pos[i] = ids[i] = (float)(int)uni(0, 60);
    float *di = put(b, ids, sizeof ids), *dc = put(b, NULL, L * D * 4), *ds = put(b, NULL, L * D * 4);
    CHECK(b->broken || b->o->rope_table(b->c, di, L, dims, NA, 10000.0, D, dc, ds) == WF_OK,
          "%s rope_table", b->name);
    get(b, got, dc, L * D * 4);
    get(b, got + L * D, ds, L * D * 4);
    if (ref) {
        ref_table(pos, L, dims, NA, 10000.0, D, ref, ref + L * D);
        for (int i = 0; i < 2 * L * D; i++)
            tol[i] = U;
    }
    return 2 * L * D;
}

/* timestep_embed's reference row: [sin | cos] of scale t f_k or flipped,
 * f_k = exp(-ln(max_period) k / (half - shift)) in double; tol 4e-7 |a|
 * + 2e-7 (the f32 steps of the argument). */
static void ref_timestep(double t, int dim, bool flip, double shift, double scale,
                         double max_period, double *ref, double *tol)
{
    int half = dim / 2;
    for (int k = 0; k < half; k++) {
        double a = scale * t * exp(-log(max_period) * k / (half - shift));
        ref[flip ? k : half + k] = cos(a);
        ref[flip ? half + k : k] = sin(a);
        tol[k] = tol[half + k] = 4e-7 * fabs(a) + 2e-7;
    }
    if (dim % 2) {
        ref[dim - 1] = 0;
        tol[dim - 1] = 0;
    }
}

/* timestep_proj: 3 values t in [0, 1], dim 64, round_dtype F32; the
 * reference of t * 1000 (f32 product) as ref_timestep (flip). */
static size_t row_timestep_proj(bk_t *b, float *got, double *ref, double *tol)
{
    enum { B = 3, DIM = 64 };
    float t[B] = {0.0f, 0.4375f, 0.9731f};
    float *dt = put(b, t, sizeof t), *dd = put(b, NULL, B * DIM * 4);
    CHECK(b->broken || b->o->timestep_proj(b->c, dt, B, DIM, WF_DTYPE_F32, dd) == WF_OK,
          "%s timestep_proj", b->name);
    get(b, got, dd, B * DIM * 4);
    for (int i = 0; ref && i < B; i++)
        ref_timestep((double)(t[i] * 1000.0f), DIM, true, 0, 1, 10000, ref + i * DIM,
                     tol + i * DIM);
    return B * DIM;
}

/* copy_rows: 7 rows of 44 bytes, 52 -> 60 bytes apart; exact (tol 0). */
static size_t row_copy_rows(bk_t *b, float *got, double *ref, double *tol)
{
    enum { R = 7, W = 11, LS = 13, LD = 15 };
    float src[R * LS];
    seed(WF_BACKEND_OP_COPY_ROWS);
    fill(src, sizeof src / 4, -9, 9);
    float *ds = put(b, src, sizeof src), *dd = put(b, NULL, R * LD * 4);
    CHECK(b->broken || b->o->copy_rows(b->c, dd, LD * 4, ds, LS * 4, R, W * 4) == WF_OK,
          "%s copy_rows", b->name);
    float out[R * LD];
    get(b, out, dd, sizeof out);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < W; c++) {
            got[r * W + c] = out[r * LD + c];
            if (ref) {
                ref[r * W + c] = src[r * LS + c];
                tol[r * W + c] = 0;
            }
        }
    return R * W;
}

/* rms_sumsq: 5 rows of 70 (ld 72); tol u |ref| (the double sum rounded). */
static size_t row_rms_sumsq(bk_t *b, float *got, double *ref, double *tol)
{
    enum { R = 5, N = 70, LD = 72 };
    float x[R * LD];
    seed(WF_BACKEND_OP_RMS_SUMSQ);
    fill(x, sizeof x / 4, -3, 3);
    float *dx = put(b, x, sizeof x), *dq = put(b, NULL, R * 4);
    CHECK(b->broken || b->o->rms_sumsq(b->c, dx, R, N, LD, dq) == WF_OK, "%s rms_sumsq", b->name);
    get(b, got, dq, R * 4);
    for (int r = 0; ref && r < R; r++) {
        double s = 0;
        for (int c = 0; c < N; c++)
            s += (double)x[r * LD + c] * x[r * LD + c];
        ref[r] = s;
        tol[r] = U * s;
    }
    return R;
}

/* rms_norm: rows of W = 48 (Wan's q norm across all heads: H 4 x D 12),
 * weight (48), eps 1e-6, five ways into one output each:
 *   whole   one call on the full rows (sumsq NULL);
 *   split   two "tp ranks" of 24 columns: rms_sumsq on each, the sums
 *           added on the host in f32 (the all-reduce), rms_norm with them,
 *           width 48 and each rank's half of the weight;
 *   inplace one call without weight, dst = src;
 *   whole and split again into bf16 rows 49 apart (attention's q / k).
 * tol 4u |ref| + 1e-7 (the split's f32 sums add about 2u); bf16 that
 * plus one rounding (bf16_tol). */
static size_t row_rms_norm(bk_t *b, float *got, double *ref, double *tol)
{
    enum { R = 4, W = 48, HALF = 24, LD = 50, LDH = 49 };
    float x[R * LD], w[W];
    seed(WF_BACKEND_OP_RMS_NORM);
    fill(x, sizeof x / 4, -2, 2);
    fill(w, W, 0.5f, 1.5f);
    float *dx = put(b, x, sizeof x), *dw = put(b, w, sizeof w);
    float *d1 = put(b, NULL, R * W * 4), *d2 = put(b, NULL, R * W * 4);
    float *d3 = put(b, x, sizeof x), *dq0 = put(b, NULL, R * 4), *dq1 = put(b, NULL, R * 4);
    uint16_t *dh[2] = {put(b, NULL, R * LDH * 2), put(b, NULL, R * LDH * 2)};
    wf_rmsnorm_params_t p = {.rows = R, .n = W, .src = dx, .ld_src = LD, .dst = d1, .ld_dst = W,
                             .weight = dw, .eps = 1e-6f};
    CHECK(b->broken || b->o->rms_norm(b->c, &p) == WF_OK, "%s rms_norm whole", b->name);
    p.dst = dh[0];
    p.ld_dst = LDH;
    p.dst_dtype = WF_DTYPE_BF16;
    CHECK(b->broken || b->o->rms_norm(b->c, &p) == WF_OK, "%s rms_norm whole into bf16",
          b->name);
    /* the split: ranks 0 and 1 hold columns [0, 24) and [24, 48) */
    float q0[R], q1[R], qs[R];
    CHECK(b->broken || b->o->rms_sumsq(b->c, dx, R, HALF, LD, dq0) == WF_OK);
    CHECK(b->broken || b->o->rms_sumsq(b->c, dx ? dx + HALF : NULL, R, HALF, LD, dq1) == WF_OK);
    get(b, q0, dq0, sizeof q0);
    get(b, q1, dq1, sizeof q1);
    for (int r = 0; r < R; r++)
        qs[r] = q0[r] + q1[r];
    float *dqs = put(b, qs, sizeof qs);
    for (int k = 0; k < 2; k++) {
        wf_rmsnorm_params_t s = {.rows = R, .n = HALF, .src = dx ? dx + k * HALF : NULL,
                                 .ld_src = LD, .dst = d2 ? d2 + k * HALF : NULL, .ld_dst = W,
                                 .weight = dw ? dw + k * HALF : NULL, .eps = 1e-6f, .sumsq = dqs,
                                 .width = W};
        CHECK(b->broken || b->o->rms_norm(b->c, &s) == WF_OK, "%s rms_norm split %d", b->name, k);
        s.dst = dh[1] ? dh[1] + k * HALF : NULL;
        s.ld_dst = LDH;
        s.dst_dtype = WF_DTYPE_BF16;
        CHECK(b->broken || b->o->rms_norm(b->c, &s) == WF_OK, "%s rms_norm split %d into bf16",
              b->name, k);
    }
    wf_rmsnorm_params_t ip = {.rows = R, .n = W, .src = d3, .ld_src = LD, .dst = d3, .ld_dst = LD,
                              .eps = 1e-6f};
    CHECK(b->broken || b->o->rms_norm(b->c, &ip) == WF_OK, "%s rms_norm in place", b->name);
    float o3[R * LD], hb[2][R * LDH];
    get(b, got, d1, R * W * 4);
    get(b, got + R * W, d2, R * W * 4);
    get(b, o3, d3, sizeof o3);
    get_bf16(b, hb[0], dh[0], R * LDH);
    get_bf16(b, hb[1], dh[1], R * LDH);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < W; c++) {
            got[2 * R * W + r * W + c] = o3[r * LD + c];
            got[3 * R * W + r * W + c] = hb[0][r * LDH + c];
            got[4 * R * W + r * W + c] = hb[1][r * LDH + c];
        }
    for (int r = 0; ref && r < R; r++) {
        double ss = 0;
        for (int c = 0; c < W; c++)
            ss += (double)x[r * LD + c] * x[r * LD + c];
        double inv = 1.0 / sqrt(ss / W + (double)1e-6f);
        for (int c = 0; c < W; c++) {
            double v = x[r * LD + c] * inv, t = 4.0 * U * fabs(v * w[c]) + 1e-7;
            ref[r * W + c] = ref[R * W + r * W + c] = v * w[c];
            ref[2 * R * W + r * W + c] = v;
            tol[r * W + c] = tol[R * W + r * W + c] = t;
            tol[2 * R * W + r * W + c] = 4.0 * U * fabs(v) + 1e-7;
            ref[3 * R * W + r * W + c] = ref[4 * R * W + r * W + c] = v * w[c];
            tol[3 * R * W + r * W + c] = tol[4 * R * W + r * W + c] = bf16_tol(v * w[c], t);
        }
    }
    return 5 * R * W;
}

/* layer_norm: 5 rows of 45, weight and bias (Wan's norm2), out of place,
 * the same into bf16 rows 46 apart (the next linear's x), then the same
 * rows without affine in place; tol 4u (|n w| + |b|) + 1e-7, bf16 that
 * plus one rounding (bf16_tol). */
static size_t row_layer_norm(bk_t *b, float *got, double *ref, double *tol)
{
    enum { R = 5, C = 45, LD = 47, LDH = 46 };
    float x[R * LD], w[C], bi[C];
    seed(WF_BACKEND_OP_LAYER_NORM);
    fill(x, sizeof x / 4, -1, 6);
    fill(w, C, -1.5f, 1.5f);
    fill(bi, C, -1, 1);
    float *dx = put(b, x, sizeof x), *dw = put(b, w, sizeof w), *db = put(b, bi, sizeof bi);
    float *dd = put(b, NULL, R * C * 4), *dx2 = put(b, x, sizeof x);
    void *dh = put(b, NULL, R * LDH * 2);
    wf_layernorm_params_t p = {.rows = R, .C = C, .src = dx, .ld_src = LD, .dst = dd, .ld_dst = C,
                               .weight = dw, .bias = db, .eps = 1e-6f};
    CHECK(b->broken || b->o->layer_norm(b->c, &p) == WF_OK, "%s layer_norm", b->name);
    p.dst = dh;
    p.ld_dst = LDH;
    p.dst_dtype = WF_DTYPE_BF16;
    CHECK(b->broken || b->o->layer_norm(b->c, &p) == WF_OK, "%s layer_norm into bf16", b->name);
    wf_layernorm_params_t q = {.rows = R, .C = C, .src = dx2, .ld_src = LD, .dst = dx2,
                               .ld_dst = LD, .eps = 1e-6f};
    CHECK(b->broken || b->o->layer_norm(b->c, &q) == WF_OK, "%s layer_norm in place", b->name);
    float o2[R * LD], hb[R * LDH];
    get(b, got, dd, R * C * 4);
    get(b, o2, dx2, sizeof o2);
    get_bf16(b, hb, dh, R * LDH);
    for (int r = 0; r < R; r++) {
        double m, inv;
        stats(x + r * LD, C, (double)1e-6f, &m, &inv);
        for (int c = 0; c < C; c++) {
            got[R * C + r * C + c] = o2[r * LD + c];
            got[2 * R * C + r * C + c] = hb[r * LDH + c];
            if (!ref)
                continue;
            double n = (x[r * LD + c] - m) * inv;
            ref[r * C + c] = n * w[c] + bi[c];
            tol[r * C + c] = 4.0 * U * (fabs(n * w[c]) + fabs(bi[c])) + 1e-7;
            ref[R * C + r * C + c] = n;
            tol[R * C + r * C + c] = 2.0 * U * fabs(n) + 1e-7;
            ref[2 * R * C + r * C + c] = ref[r * C + c];
            tol[2 * R * C + r * C + c] = bf16_tol(ref[r * C + c], tol[r * C + c]);
        }
    }
    return 3 * R * C;
}

/* rope_grid: Wan's axes for D 24 ((t, h, w) = (8, 8, 8)), grid (3, 4,
 * 5), tokens 7..47 (a cp rank's slice); tol u as rope_table. */
static size_t row_rope_grid(bk_t *b, float *got, double *ref, double *tol)
{
    enum { D = 24, ROW0 = 7, L = 40 };
    const int64_t g[3] = {3, 4, 5};
    wf_rope_grid_params_t p = {.n_axes = 3, .grid = {3, 4, 5},
                               .axes_dims = {D - 4 * (D / 6), 2 * (D / 6), 2 * (D / 6)},
                               .theta = 10000.0, .D = D, .row0 = ROW0, .L = L};
    p.cos = put(b, NULL, L * D * 4);
    p.sin = put(b, NULL, L * D * 4);
    CHECK(b->broken || b->o->rope_grid(b->c, &p) == WF_OK, "%s rope_grid", b->name);
    get(b, got, p.cos, L * D * 4);
    get(b, got + L * D, p.sin, L * D * 4);
    if (ref) {
        double pos[L * 3];
        for (int l = 0; l < L; l++) {
            int t = ROW0 + l;
            pos[l * 3 + 0] = t / (int)(g[1] * g[2]);
            pos[l * 3 + 1] = (t / (int)g[2]) % (int)g[1];
            pos[l * 3 + 2] = t % (int)g[2];
        }
        ref_table(pos, L, p.axes_dims, 3, 10000.0, D, ref, ref + L * D);
        for (int i = 0; i < 2 * L * D; i++)
            tol[i] = U;
    }
    return 2 * L * D;
}

/* timestep_embed: Wan's Timesteps(256, flip_sin_to_cos, shift 0) of 3
 * timesteps in [0, 1000], then diffusers' defaults (no flip, shift 1,
 * scale 1) with scale 2 and an odd dim 33; tol as ref_timestep. */
static size_t row_timestep_embed(bk_t *b, float *got, double *ref, double *tol)
{
    enum { B = 3, DW = 256, DO = 33 };
    const float t[B] = {999.0f, 500.5f, 1.0f};
    float *dt = put(b, t, sizeof t), *d1 = put(b, NULL, B * DW * 4), *d2 = put(b, NULL, B * DO * 4);
    wf_timestep_params_t p = {.t = dt, .B = B, .dim = DW, .flip_sin_to_cos = true,
                              .downscale_freq_shift = 0, .scale = 1, .max_period = 10000,
                              .dst = d1};
    CHECK(b->broken || b->o->timestep_embed(b->c, &p) == WF_OK, "%s timestep_embed", b->name);
    wf_timestep_params_t q = {.t = dt, .B = B, .dim = DO, .flip_sin_to_cos = false,
                              .downscale_freq_shift = 1, .scale = 2, .max_period = 10000,
                              .dst = d2};
    CHECK(b->broken || b->o->timestep_embed(b->c, &q) == WF_OK, "%s timestep_embed 2", b->name);
    get(b, got, d1, B * DW * 4);
    get(b, got + B * DW, d2, B * DO * 4);
    for (int i = 0; ref && i < B; i++) {
        ref_timestep(t[i], DW, true, 0, 1, 10000, ref + i * DW, tol + i * DW);
        ref_timestep(t[i], DO, false, 1, 2, 10000, ref + B * DW + i * DO, tol + B * DW + i * DO);
    }
    return B * (DW + DO);
}

/* ---- the table ------------------------------------------------------------------ */

typedef struct row {
    wf_backend_op_t op;
    row_fn run;
    const char *tol;      /* the tolerance, for the printout */
    double dev_factor;    /* a device backend's tolerance: the row's times this */
} row_t;

static const row_t rows[] = {
    [WF_BACKEND_OP_ATTENTION] = {WF_BACKEND_OP_ATTENTION, row_attention,
                                 "2e-5 + 2e-5|ref|; bf16 ld_out +2^-8(|ref|+tol)", 4},
    [WF_BACKEND_OP_LINEAR] = {WF_BACKEND_OP_LINEAR, row_linear,
                                   "4 in u sum|xw| + 4u|ref|; bf16 +2^-8(|ref|+tol)", 4},
    [WF_BACKEND_OP_BIAS_ACT] = {WF_BACKEND_OP_BIAS_ACT, row_bias_act,
                                     "4e-6|ref| + 1e-7; bf16 +2^-8(|ref|+tol)", 4},
    [WF_BACKEND_OP_ACT] = {WF_BACKEND_OP_ACT, row_act, "4e-6|ref| + 1e-9", 4},
    [WF_BACKEND_OP_ADD] = {WF_BACKEND_OP_ADD, row_add, "u|ref|", 1},
    [WF_BACKEND_OP_MODLN] = {WF_BACKEND_OP_MODLN, row_modln,
                                  "4u(|n(1+sc)|+|sh|) + 1e-7; bf16 +2^-8(|ref|+tol)", 32},
    [WF_BACKEND_OP_GATE_RESIDUAL] = {WF_BACKEND_OP_GATE_RESIDUAL, row_gate_residual,
                                     "2u(|gy| + |ref|)", 1},
    [WF_BACKEND_OP_HEAD_NORM_ROPE] = {WF_BACKEND_OP_HEAD_NORM_ROPE, row_head_norm_rope,
                                      "8u(|x0c|+|x1s|) + 1e-7; bf16 +2^-8(|ref|+tol)", 16},
    [WF_BACKEND_OP_ROPE_TABLE] = {WF_BACKEND_OP_ROPE_TABLE, row_rope_table, "u", 2},
    [WF_BACKEND_OP_TIMESTEP_PROJ] = {WF_BACKEND_OP_TIMESTEP_PROJ, row_timestep_proj,
                                     "4e-7|arg| + 2e-7", 2},
    [WF_BACKEND_OP_COPY_ROWS] = {WF_BACKEND_OP_COPY_ROWS, row_copy_rows, "0 (exact)", 1},
    [WF_BACKEND_OP_RMS_SUMSQ] = {WF_BACKEND_OP_RMS_SUMSQ, row_rms_sumsq, "u|ref|", 96},
    [WF_BACKEND_OP_RMS_NORM] = {WF_BACKEND_OP_RMS_NORM, row_rms_norm,
                                "4u|ref| + 1e-7; bf16 +2^-8(|ref|+tol)", 32},
    [WF_BACKEND_OP_LAYER_NORM] = {WF_BACKEND_OP_LAYER_NORM, row_layer_norm,
                                  "4u(|nw|+|b|) + 1e-7; bf16 +2^-8(|ref|+tol)", 32},
    [WF_BACKEND_OP_ROPE_GRID] = {WF_BACKEND_OP_ROPE_GRID, row_rope_grid, "u", 2},
    [WF_BACKEND_OP_TIMESTEP_EMBED] = {WF_BACKEND_OP_TIMESTEP_EMBED, row_timestep_embed,
                                      "4e-7|arg| + 2e-7", 2},
    [WF_BACKEND_OP_AXPY] = {WF_BACKEND_OP_AXPY, row_axpy, "u(|ax|+|ref|)", 1},
    [WF_BACKEND_OP_CHANGE_SUMS] = {WF_BACKEND_OP_CHANGE_SUMS, row_change_sums,
                                   "u|ref| (as f32); 1e-12|ref| in double", 1},
};
_Static_assert(sizeof rows / sizeof rows[0] == WF_BACKEND_OP_COUNT,
               "every op of wf_backend_op_t needs its row in the conformance table");

/* ---- comparisons ------------------------------------------------------------------ */

/* Elements of got within factor * tol of ref (NaN never is); the largest
 * |got - ref| and |got - ref| / tol into *ret_abs, *ret_ratio. */
static bool within(const float *got, const double *ref, const double *tol, size_t n,
                   double factor, double *ret_abs, double *ret_ratio)
{
    bool ok = true;
    double ma = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        double t = tol[i] * factor;
        if (!(e <= t))
            ok = false;
        if (e > ma || e != e)
            ma = e;
        double r = t > 0 ? e / t : (e == 0 ? 0 : INFINITY);
        if (r > mr || r != r)
            mr = r;
    }
    *ret_abs = ma;
    *ret_ratio = mr;
    return ok;
}

static float *got_cpu, *got_b, *scratch;
static double *ref, *tol;

/* The moved copy of a passing output: element i pushed 2 tol (or one ulp
 * when tol is 0) past ref. */
static void perturb(float *v, const double *r, const double *t, size_t i)
{
    double off = t[i] > 0 ? 2.0 * t[i] + 1e-30 : 0.0;
    float moved = (float)(r[i] + (v[i] >= r[i] ? off : -off));
    if (moved == v[i] || fabs((double)moved - r[i]) <= t[i])
        moved = nextafterf(v[i], v[i] >= r[i] ? INFINITY : -INFINITY);
    v[i] = moved;
}

/* One cell of the table: backend b on row r. */
static void cell(bk_t *b, const row_t *r, size_t n, bool vs_cpu)
{
    memset(got_b, 0, MAXOUT * sizeof(float));
    size_t m = r->run(b, got_b, NULL, NULL);
    reset(b);
    CHECK(!b->broken, "%s %s: memory or copies failed", b->name, wf_backend_op_name(r->op));
    CHECK(m == n, "%s %s: %zu outputs, cpu %zu", b->name, wf_backend_op_name(r->op), m, n);
    const char *op = wf_backend_op_name(r->op);
    if (vs_cpu) {
        bool same = memcmp(got_b, got_cpu, n * sizeof(float)) == 0;
        CHECK(same, "%s %s: not the CPU's bits", b->name, op);
        printf("  %-16s %-8s bit-identical to cpu: %s\n", op, b->name, same ? "yes" : "NO");
        memcpy(scratch, got_b, n * sizeof(float));
        uint32_t u;
        memcpy(&u, &scratch[n / 2], 4);
        u ^= 1u;
        memcpy(&scratch[n / 2], &u, 4);
        CHECK(memcmp(scratch, got_cpu, n * sizeof(float)) != 0, "%s %s: control", b->name, op);
        return;
    }
    double ma, mr;
    bool ok = within(got_b, ref, tol, n, r->dev_factor, &ma, &mr);
    CHECK(ok, "%s %s: max err %.3g, %.3g x tol (x%g)", b->name, op, ma, mr, r->dev_factor);
    printf("  %-16s %-8s tol (%s) x %g: max abs err %.3g, max err/tol %.3f %s\n", op, b->name,
           r->tol, r->dev_factor, ma, mr, ok ? "ok" : "FAIL");
    memcpy(scratch, got_b, n * sizeof(float));
    perturb(scratch, ref, tol, n / 2);
    double a2, r2;
    CHECK(!within(scratch, ref, tol, n, r->dev_factor, &a2, &r2), "%s %s: control passed",
          b->name, op);
}

/* ---- supports ---------------------------------------------------------------------- */

static void check_supports(const bk_t *bks, int nb)
{
    for (int k = 0; k < nb; k++)
        for (int op = 0; op < WF_BACKEND_OP_COUNT; op++)
            CHECK(wf_backend_supports(bks[k].o, (wf_backend_op_t)op), "%s lacks %s",
                  bks[k].name, wf_backend_op_name((wf_backend_op_t)op));
    CHECK(!wf_backend_supports(NULL, WF_BACKEND_OP_LINEAR));
    CHECK(!wf_backend_supports(bks[0].o, WF_BACKEND_OP_COUNT));
    CHECK(!wf_backend_supports(bks[0].o, (wf_backend_op_t)-1));
    CHECK(strcmp(wf_backend_op_name(WF_BACKEND_OP_RMS_NORM), "rms_norm") == 0);
    CHECK(strcmp(wf_backend_op_name(WF_BACKEND_OP_COUNT), "?") == 0);
    for (int op = 0; op < WF_BACKEND_OP_COUNT; op++)
        CHECK(strcmp(wf_backend_op_name((wf_backend_op_t)op), "?") != 0);
    /* a table without rms_norm: require names it, the others pass */
    wf_backend_ops_t lack = *bks[0].o;
    lack.rms_norm = NULL;
    const wf_backend_op_t wan[] = {WF_BACKEND_OP_LINEAR, WF_BACKEND_OP_LAYER_NORM,
                                   WF_BACKEND_OP_RMS_NORM, WF_BACKEND_OP_ROPE_GRID};
    wf_backend_op_t miss = WF_BACKEND_OP_COUNT;
    CHECK(wf_backend_require(&lack, wan, 4, &miss) == WF_E_UNSUPPORTED &&
          miss == WF_BACKEND_OP_RMS_NORM);
    CHECK(!wf_backend_supports(&lack, WF_BACKEND_OP_RMS_NORM));
    miss = WF_BACKEND_OP_COUNT;
    CHECK(wf_backend_require(bks[0].o, wan, 4, &miss) == WF_OK && miss == WF_BACKEND_OP_COUNT);
    CHECK(wf_backend_require(&lack, wan, 2, NULL) == WF_OK);
}

/* The new primitives' params that every backend refuses (ops_check.h),
 * on backend b (host memory or its device memory). */
static void check_refusals(bk_t *b)
{
    float *x = put(b, NULL, 64 * 4), *y = put(b, NULL, 64 * 4), *q = put(b, NULL, 8 * 4);
    CHECK(!b->broken, "%s refusals: buffers", b->name);
    const wf_status_t bad = WF_E_BAD_ARGUMENT;
    wf_rmsnorm_params_t r = {.rows = 2, .n = 8, .src = x, .ld_src = 8, .dst = y, .ld_dst = 8,
                             .eps = 1e-6f};
    r.width = 8; /* width without sumsq */
    CHECK(b->o->rms_norm(b->c, &r) == bad, "%s rms_norm width without sumsq", b->name);
    r.width = 4;
    r.sumsq = q; /* sums over fewer columns than src holds */
    CHECK(b->o->rms_norm(b->c, &r) == bad, "%s rms_norm width < n", b->name);
    r.width = 16;
    r.dst = x + 4; /* overlapping src, not in place */
    CHECK(b->o->rms_norm(b->c, &r) == bad, "%s rms_norm overlap", b->name);
    r.dst = x;
    r.dst_dtype = WF_DTYPE_BF16;
    CHECK(b->o->rms_norm(b->c, &r) == bad, "%s rms_norm in place into bf16", b->name);
    r.dst = y;
    r.dst_dtype = (wf_dtype_t)7;
    CHECK(b->o->rms_norm(b->c, &r) == bad, "%s rms_norm unknown dst dtype", b->name);
    CHECK(b->o->rms_sumsq(b->c, x, 2, 8, 8, x + 15) == bad, "%s rms_sumsq overlap", b->name);
    CHECK(b->o->rms_sumsq(b->c, x, 2, 8, 7, q) == bad, "%s rms_sumsq ld < n", b->name);
    wf_layernorm_params_t l = {.rows = 2, .C = 8, .src = x, .ld_src = 8, .dst = x, .ld_dst = 9,
                               .eps = 1e-6f};
    CHECK(b->o->layer_norm(b->c, &l) == bad, "%s layer_norm in place, ld differs", b->name);
    l.ld_dst = 8;
    l.dst_dtype = WF_DTYPE_BF16;
    CHECK(b->o->layer_norm(b->c, &l) == bad, "%s layer_norm in place into bf16", b->name);
    l.dst = y;
    l.dst_dtype = (wf_dtype_t)7;
    CHECK(b->o->layer_norm(b->c, &l) == bad, "%s layer_norm unknown dst dtype", b->name);
    l.dst = x;
    l.dst_dtype = WF_DTYPE_F32;
    l.eps = -1.0f;
    CHECK(b->o->layer_norm(b->c, &l) == bad, "%s layer_norm eps < 0", b->name);
    wf_rope_grid_params_t g = {.n_axes = 2, .grid = {2, 3}, .axes_dims = {2, 2}, .theta = 1e4,
                               .D = 4, .row0 = 4, .L = 3, .cos = x, .sin = y};
    CHECK(b->o->rope_grid(b->c, &g) == bad, "%s rope_grid past the grid", b->name);
    g.L = 2;
    g.axes_dims[1] = 3;
    CHECK(b->o->rope_grid(b->c, &g) == bad, "%s rope_grid odd axis", b->name);
    wf_timestep_params_t t = {.t = q, .B = 2, .dim = 8, .dst = x};
    CHECK(b->o->timestep_embed(b->c, &t) == bad, "%s timestep_embed zeroed", b->name);
    t.max_period = 10000;
    t.downscale_freq_shift = 4; /* half - shift = 0 */
    CHECK(b->o->timestep_embed(b->c, &t) == bad, "%s timestep_embed shift", b->name);
    t.downscale_freq_shift = 0;
    CHECK(b->o->timestep_embed(b->c, &t) == WF_OK, "%s timestep_embed valid", b->name);
    /* the low-precision activations' rules */
    wf_modln_params_t m = {.nbatch = 1, .per = 2, .C = 8, .src = x, .ld_src = 8, .dst = x,
                           .ld_dst = 8, .shift = q, .scale = q, .ld_mod = 8, .eps = 1e-6f,
                           .dst_dtype = WF_DTYPE_BF16};
    CHECK(b->o->modln(b->c, &m) == bad, "%s modln in place into bf16", b->name);
    m.dst = y;
    m.dst_dtype = (wf_dtype_t)7;
    CHECK(b->o->modln(b->c, &m) == bad, "%s modln unknown dst dtype", b->name);
    CHECK(b->o->bias_act(b->c, x, WF_DTYPE_F32, 2, 8, 8, NULL, WF_ACT_SILU, NULL, 0,
                         WF_DTYPE_BF16) == bad,
          "%s bias_act in place into bf16", b->name);
    CHECK(b->o->bias_act(b->c, x, (wf_dtype_t)9, 2, 8, 8, NULL, WF_ACT_SILU, y, 8, WF_DTYPE_BF16) ==
              bad, "%s bias_act unknown y dtype", b->name);
    CHECK(b->o->bias_act(b->c, x, WF_DTYPE_F32, 2, 8, 8, NULL, WF_ACT_SILU, x + 8, 8,
                         WF_DTYPE_BF16) == bad,
          "%s bias_act dst over y", b->name);
    CHECK(b->o->bias_act(b->c, x, WF_DTYPE_F32, 2, 8, 8, NULL, WF_ACT_SILU, y, 7,
                         WF_DTYPE_BF16) == bad,
          "%s bias_act ld_dst < n", b->name);
    wf_linear_params_t lp = {.rows = 2, .in = 8, .out = 4, .x = x, .ldx = 8,
                             .x_dtype = WF_DTYPE_BF16, .w_dtype = WF_DTYPE_F32, .ldw = 8,
                             .nwb = 1, .wb = {y}, .wbw = {8}, .y = q, .ldy = 4};
    CHECK(b->o->linear(b->c, &lp, NULL) == bad, "%s linear bf16 x, f32 weight", b->name);
    lp.x_dtype = WF_DTYPE_F32;
    lp.y_dtype = WF_DTYPE_BF16;
    lp.nwb = 2;
    lp.wb[1] = y + 4;
    lp.wbw[0] = lp.wbw[1] = 4;
    CHECK(b->o->linear(b->c, &lp, NULL) == bad, "%s linear bf16 y over two blocks", b->name);
    reset(b);
}

int main(int argc, char **argv)
{
    const bool cuda = argc > 1 && strcmp(argv[1], "--cuda") == 0;
    got_cpu = calloc(MAXOUT, sizeof(float));
    got_b = calloc(MAXOUT, sizeof(float));
    scratch = calloc(MAXOUT, sizeof(float));
    ref = calloc(MAXOUT, sizeof(double));
    tol = calloc(MAXOUT, sizeof(double));
    if (!got_cpu || !got_b || !scratch || !ref || !tol)
        return 1;

    bk_t cpu = {.name = "cpu", .o = wf_backend_cpu()};
    bk_t sd = {.name = "standin", .o = wf_standin_dev_backend(), .dev = true};
    bk_t cu = {.name = "cuda", .o = wf_backend_cuda(), .dev = true};
    if (cpu.o->ctx_new(0, 0, &cpu.c) != WF_OK || sd.o->ctx_new(0, 64 << 20, &sd.c) != WF_OK) {
        fprintf(stderr, "ctx_new failed\n");
        return 1;
    }
    bool have_cuda = false;
    int rc = 0;
    if (cuda) {
        if (!cu.o) {
            printf("test_ops_conformance: built without CUDA, skipped\n");
            rc = 77;
            goto out;
        }
        if (cu.o->ctx_new(0, (uint64_t)256 << 20, &cu.c) != WF_OK) {
            printf("test_ops_conformance: no usable GPU, skipped\n");
            rc = 77;
            goto out;
        }
        have_cuda = true;
    }

    bk_t both[2] = {cpu, sd};
    check_supports(both, 2);
    if (!cuda) {
        check_refusals(&cpu);
        check_refusals(&sd);
    }
    if (cu.o)
        for (int op = 0; op < WF_BACKEND_OP_COUNT; op++)
            CHECK(wf_backend_supports(cu.o, (wf_backend_op_t)op), "cuda lacks %s",
                  wf_backend_op_name((wf_backend_op_t)op));

    printf("op x backend (u = 2^-24; cpu vs fp64, standin vs cpu, cuda vs fp64):\n");
    for (int i = 0; i < WF_BACKEND_OP_COUNT; i++) {
        const row_t *r = &rows[i];
        CHECK(r->op == (wf_backend_op_t)i && r->run, "row %d", i);
        if (!r->run)
            continue;
        memset(got_cpu, 0, MAXOUT * sizeof(float));
        size_t n = r->run(&cpu, got_cpu, ref, tol);
        reset(&cpu);
        CHECK(n > 0 && n <= MAXOUT && !cpu.broken, "cpu %s", wf_backend_op_name(r->op));
        if (!cuda) {
            /* the CPU row (factor 1) and the stand-in against it */
            double ma, mr;
            bool ok = within(got_cpu, ref, tol, n, 1.0, &ma, &mr);
            CHECK(ok, "cpu %s: max err %.3g, %.3g x tol", wf_backend_op_name(r->op), ma, mr);
            printf("  %-16s %-8s tol (%s): max abs err %.3g, max err/tol %.3f %s\n",
                   wf_backend_op_name(r->op), "cpu", r->tol, ma, mr, ok ? "ok" : "FAIL");
            memcpy(scratch, got_cpu, n * sizeof(float));
            perturb(scratch, ref, tol, n / 2);
            CHECK(!within(scratch, ref, tol, n, 1.0, &ma, &mr), "cpu %s: control passed",
                  wf_backend_op_name(r->op));
            cell(&sd, r, n, true);
            printf("  %-16s %-8s %s\n", wf_backend_op_name(r->op), "cuda",
                   "skipped here (the cuda_ops_conformance test runs it on a GPU)");
        } else if (have_cuda) {
            cell(&cu, r, n, false);
        }
    }

    printf("test_ops_conformance: %d passed, %d failed\n", (int)passed, (int)failed);
    rc = failed ? 1 : 0;
out:
    if (cu.c)
        cu.o->ctx_destroy(&cu.c);
    sd.o->ctx_destroy(&sd.c);
    cpu.o->ctx_destroy(&cpu.c);
    free(got_cpu);
    free(got_b);
    free(scratch);
    free(ref);
    free(tol);
    return rc;
}
