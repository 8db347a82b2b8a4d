/* test_model_ops.c — the CPU backend's model ops (backend.h "model ops")
 * through the ops table, each against an fp64 reference computed here.
 *
 * Tolerances (f32 unit roundoff u = 2^-24 ~ 6e-8):
 *   act (GELU tanh, SiLU): |got - ref| <= 2e-6 |ref| + 1e-9 over a dense
 *     sweep of [-30, 30], specials and random values, and the worst
 *     relative error where |ref| > 1e-3 (printed) below 1.5e-6 (GELU) /
 *     3e-7 (SiLU). GELU's outputs at x < -3 carry the f32 rounding of its
 *     argument u (a few ulps of u), amplified by |2u| through the exp:
 *     about 1e-6 relative there, inherent to evaluating u in f32 (the old
 *     1 + tanhf(u) lost far more to cancellation).
 *   linear: |y - ref| <= 1.2 (3 in u sum_j |x_j w_j| + u |b|) + 1e-6 |ref|
 *     + 1e-12 (f32 dot products of length `in`, then the activation,
 *     whose slope is below 1.2), against the reference on the weights as
 *     stored (bf16 / f16 values exactly).
 *   add: exact (one f32 rounding of the double sum).
 *   bias_act: as act, on the f32 sum y + b (one rounding, as the kernel).
 *   modln: |y - ref| <= 4u (|n (1 + sc)| + |sh|) + 1e-12, ref all double.
 *   gate_residual: |S - ref| <= 3u (|S| + |g y|).
 *   head_norm_rope: |o - ref| <= 6u (|x0 c| + |x1 s|) (norm rounded to f32,
 *     then the rotation in f32), ref all double.
 *   rope_table: bit-exact against the formula in double (cos / sin of
 *     the same double angle, rounded to f32), and within 1e-6 of
 *     cos / sin at the angle recomputed independently with exp / log.
 *   timestep_proj: within 4e-7 |arg| + 2e-7 of cos / sin of the f32 tv
 *     times fp64 frequencies (the f32 argument's rounding), and the dtype
 *     rounding of t * 1000 by its value (0.875 -> 876 in bf16).
 *   copy_rows: bytes equal; gaps untouched.
 * Every op: strided rows (ld > width) with the padding checked untouched,
 * in-place where the contract allows it, and its refusals
 * (WF_E_BAD_ARGUMENT with every buffer unchanged).
 */
#include "backend.h"
#include "tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/check.h"
#define WF_TEST_RNG_SEED 2463534242u
#include "support/rng.h"

static const double U32 = 5.9604644775390625e-08; /* 2^-24 */
#define SENTINEL 12345.678f

static const wf_backend_ops_t *ops;
static wf_backend_ctx_t *ctx;

static float *falloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void fill(float *v, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        v[i] = a * rnd_unit();
}

static void fill_const(float *v, size_t n, float c)
{
    for (size_t i = 0; i < n; i++)
        v[i] = c;
}

static double gelu_ref(double x)
{
    const double k0 = sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + tanh(k0 * (x + 0.044715 * x * x * x)));
}

static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

static double act_ref(double x, wf_act_t a)
{
    return a == WF_ACT_GELU_TANH ? gelu_ref(x)
           : a == WF_ACT_SILU    ? silu_ref(x)
           : a == WF_ACT_GELU    ? 0.5 * x * (1.0 + erf(x / sqrt(2.0)))
                                 : x;
}

static bool act_ok(float got, double ref) { return fabs(got - ref) <= 2e-6 * fabs(ref) + 1e-9; }

/* ---- act ---------------------------------------------------------------------- */

static void test_act_accuracy(wf_act_t a, const char *name)
{
    /* dense sweep, specials, random */
    const int64_t nsw = 600001;
    int64_t n = nsw + 16 + 4096;
    float *x = falloc((size_t)n), *y = falloc((size_t)n);
    for (int64_t i = 0; i < nsw; i++)
        x[i] = (float)(-30.0 + 60.0 * (double)i / (double)(nsw - 1));
    const float sp[16] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 100.0f, -100.0f,
                          1e6f, -1e6f, 88.0f, -88.0f, 1e-40f, 3.4e38f, -1e30f, -3.4e38f};
    memcpy(x + nsw, sp, sizeof sp);
    fill(x + nsw + 16, 4096, 8.0f);
    CHECK(ops->act(ctx, y, x, n, a) == WF_OK, "%s: act failed", name);
    double max_rel = 0, max_abs = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = act_ref(x[i], a);
        double e = fabs(y[i] - r);
        if (fabs(r) > 1e-3 && e / fabs(r) > max_rel)
            max_rel = e / fabs(r);
        if (e > max_abs && isfinite(e))
            max_abs = e;
        if (!act_ok(y[i], r) && bad++ < 5)
            CHECK(false, "%s(%.9g) = %.9g, ref %.17g", name, (double)x[i], (double)y[i], r);
    }
    CHECK(bad == 0, "%s: %d values off", name, bad);
    CHECK(max_rel < (a == WF_ACT_SILU ? 3e-7 : 1.5e-6), "%s: max rel err %.3g", name,
          max_rel);
    printf("%s vs fp64: max rel err %.3g (|ref| > 1e-3), max abs err %.3g (|ref| up to 3.4e38)\n",
           name, max_rel, max_abs);
    /* NaN stays NaN */
    float nan_in = NAN, nan_out = 0;
    CHECK(ops->act(ctx, &nan_out, &nan_in, 1, a) == WF_OK && isnan(nan_out), "%s(NaN)", name);
    free(x);
    free(y);
}

static void test_act_inplace(void)
{
    /* in place, lengths around the copy chunk and the vector width */
    const int64_t lens[] = {0, 1, 7, 17, 1023, 1024, 1025, 2500};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int64_t n = lens[li];
        float *x = falloc((size_t)n + 1), *y = falloc((size_t)n + 1), *v = falloc((size_t)n + 1);
        fill(x, (size_t)n, 6.0f);
        memcpy(v, x, (size_t)n * sizeof(float));
        y[n] = SENTINEL;
        for (int a = 1; a <= 2; a++) {
            CHECK(ops->act(ctx, y, x, n, (wf_act_t)a) == WF_OK, "act n=%lld", (long long)n);
            memcpy(v, x, (size_t)n * sizeof(float));
            CHECK(ops->act(ctx, v, v, n, (wf_act_t)a) == WF_OK, "act in place n=%lld",
                  (long long)n);
            bool same = true, close = true;
            for (int64_t i = 0; i < n; i++) {
                same = same && y[i] == v[i];
                close = close && act_ok(y[i], act_ref(x[i], (wf_act_t)a));
            }
            CHECK(same, "act %d n=%lld: in place differs", a, (long long)n);
            CHECK(close, "act %d n=%lld: off the reference", a, (long long)n);
            CHECK(y[n] == SENTINEL, "act wrote past n");
        }
        free(x);
        free(y);
        free(v);
    }
}

/* ---- linear ---------------------------------------------------------------- */

typedef struct lin_case {
    int64_t rows, out;
    uint32_t nwb;
    int64_t wbw[4];
    int64_t gap;      /* elements between the blocks in the host weight row */
    int64_t ldx_pad, ldy_pad;
    bool bias;
    wf_act_t act;
} lin_case_t;

static void run_linear(const lin_case_t *c, wf_dtype_t dt)
{
    int64_t in = 0;
    for (uint32_t k = 0; k < c->nwb; k++)
        in += c->wbw[k];
    const int64_t out = c->out, rows = c->rows;
    /* host weight (out, ldw): block k at column off[k], gaps in between */
    int64_t off[4], ldw = 0;
    for (uint32_t k = 0; k < c->nwb; k++) {
        off[k] = ldw + c->gap;
        ldw = off[k] + c->wbw[k];
    }
    ldw += c->gap;
    const size_t es = (dt == WF_DTYPE_F32 ? 4u : 2u);
    unsigned char *W = malloc((size_t)(out * ldw) * es + 1);
    for (int64_t i = 0; i < out * ldw; i++)
        wf_elem_store(W, dt, (size_t)i, 0.5f * rnd_unit());
    const int64_t ldx = in + c->ldx_pad, ldy = out + c->ldy_pad;
    float *x = falloc((size_t)(rows * ldx)), *y = falloc((size_t)(rows * ldy + 1));
    float *b = falloc((size_t)out);
    fill(x, (size_t)(rows * ldx), 2.0f);
    fill(b, (size_t)out, 1.0f);
    fill_const(y, (size_t)(rows * ldy + 1), SENTINEL);

    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = rows;
    p.in = in;
    p.out = out;
    p.x = x;
    p.ldx = ldx;
    p.w_dtype = dt;
    p.ldw = ldw;
    p.nwb = c->nwb;
    for (uint32_t k = 0; k < c->nwb; k++) {
        p.wb[k] = W + (size_t)off[k] * es;
        p.wbw[k] = c->wbw[k];
    }
    p.bias = c->bias ? b : NULL;
    p.act = c->act;
    p.y = y;
    p.ldy = ldy;
    CHECK(ops->linear_workspace(&p) == 0, "cpu linear workspace is 0");
    wf_status_t st = ops->linear(ctx, &p, NULL);
    CHECK(st == WF_OK, "linear dt %d rows %lld in %lld out %lld: %d", (int)dt,
          (long long)rows, (long long)in, (long long)out, (int)st);
    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t o = 0; o < out; o++) {
            double acc = 0, mag = 0;
            int64_t xc = 0;
            for (uint32_t k = 0; k < c->nwb; k++)
                for (int64_t j = 0; j < c->wbw[k]; j++, xc++) {
                    double w = wf_elem_load(W, dt, (size_t)(o * ldw + off[k] + j));
                    acc += (double)x[r * ldx + xc] * w;
                    mag += fabs((double)x[r * ldx + xc] * w);
                }
            if (c->bias) {
                acc += b[o];
                mag += fabs(b[o]) / (3.0 * (double)in);
            }
            double ref = act_ref(acc, c->act);
            double tol = 1.2 * 3.0 * (double)in * U32 * mag + 1e-6 * fabs(ref) + 1e-12;
            double e = fabs(y[r * ldy + o] - ref);
            if (e / tol > worst)
                worst = e / tol;
            if (!(e <= tol) && bad++ < 3)
                CHECK(false, "linear dt %d (%lld, %lld): %.9g ref %.9g tol %.3g", (int)dt,
                      (long long)r, (long long)o, (double)y[r * ldy + o], ref, tol);
        }
        for (int64_t o = out; o < ldy; o++)
            if (y[r * ldy + o] != SENTINEL && bad++ < 3)
                CHECK(false, "linear wrote y padding (%lld, %lld)", (long long)r, (long long)o);
    }
    CHECK(bad == 0, "linear dt %d rows %lld in %lld out %lld nwb %u act %d bias %d: %d bad",
          (int)dt, (long long)rows, (long long)in, (long long)out, c->nwb, (int)c->act,
          (int)c->bias, bad);
    CHECK(y[rows * ldy] == SENTINEL, "linear wrote past y");
    free(W);
    free(x);
    free(y);
    free(b);
}

static void test_linear(void)
{
    static const lin_case_t cases[] = {
        {5, 7, 1, {9}, 0, 0, 0, false, WF_ACT_NONE},
        {3, 33, 1, {64}, 0, 3, 5, true, WF_ACT_GELU_TANH},
        {8, 40, 2, {24, 40}, 5, 1, 2, true, WF_ACT_SILU},
        {6, 19, 3, {16, 8, 13}, 4, 0, 3, false, WF_ACT_GELU_TANH},
        {4, 64, 4, {32, 32, 32, 32}, 32, 2, 0, true, WF_ACT_NONE},
        {1, 1, 1, {1}, 0, 0, 0, true, WF_ACT_SILU},
        {37, 130, 2, {200, 56}, 7, 0, 6, true, WF_ACT_GELU_TANH},
        {0, 12, 2, {8, 8}, 3, 1, 1, true, WF_ACT_GELU_TANH}, /* rows 0: no-op */
    };
    const wf_dtype_t dts[3] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_linear(&cases[i], dts[d]);

    /* a low-precision weight larger than one conversion tile (4 MiB of
     * f32): several tiles per block, ragged last tile */
    lin_case_t big = {3, 1200, 2, {700, 300}, 1, 0, 2, true, WF_ACT_SILU};
    run_linear(&big, WF_DTYPE_BF16);
    /* and without a context (the tile is allocated per call then) */
    wf_backend_ctx_t *saved = ctx;
    ctx = NULL;
    lin_case_t small = {4, 10, 2, {6, 5}, 2, 1, 1, true, WF_ACT_GELU_TANH};
    run_linear(&small, WF_DTYPE_F16);
    ctx = saved;
}

/* ---- bias_act, add -------------------------------------------------------------- */

static void test_bias_act(void)
{
    const int64_t rows = 5, n = 37, ldy = 41;
    float *y = falloc((size_t)(rows * ldy)), *y0 = falloc((size_t)(rows * ldy));
    float *b = falloc((size_t)n);
    for (int a = 0; a <= 2; a++)
        for (int hb = 0; hb < 2; hb++) {
            fill(y0, (size_t)(rows * ldy), 5.0f);
            fill(b, (size_t)n, 1.0f);
            memcpy(y, y0, (size_t)(rows * ldy) * sizeof(float));
            CHECK(ops->bias_act(ctx, y, WF_DTYPE_F32, rows, n, ldy, hb ? b : NULL, (wf_act_t)a,
                                NULL, 0, WF_DTYPE_F32) == WF_OK,
                  "bias_act");
            int bad = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < ldy; c++) {
                    float v = y0[r * ldy + c], got = y[r * ldy + c];
                    if (c >= n) {
                        bad += got != v; /* padding untouched */
                        continue;
                    }
                    float s = hb ? v + b[c] : v;
                    double ref = act_ref(s, (wf_act_t)a);
                    bad += a == 0 ? got != s : !act_ok(got, ref);
                }
            CHECK(bad == 0, "bias_act act %d bias %d: %d bad", a, hb, bad);
        }
    free(y);
    free(y0);
    free(b);
}

static void test_add(void)
{
    const int64_t n = 1003;
    float *d = falloc((size_t)n + 1), *s = falloc((size_t)n), *d0 = falloc((size_t)n);
    fill(d0, (size_t)n, 3.0f);
    fill(s, (size_t)n, 3.0f);
    memcpy(d, d0, (size_t)n * sizeof(float));
    d[n] = SENTINEL;
    CHECK(ops->add(ctx, d, s, n) == WF_OK, "add");
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += d[i] != (float)((double)d0[i] + (double)s[i]);
    CHECK(bad == 0 && d[n] == SENTINEL, "add: %d bad", bad);
    memcpy(d, d0, (size_t)n * sizeof(float));
    CHECK(ops->add(ctx, d, d, n) == WF_OK, "add in place");
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += d[i] != 2.0f * d0[i];
    CHECK(bad == 0, "add in place: %d bad", bad);
    free(d);
    free(s);
    free(d0);
}

/* ---- modln ----------------------------------------------------------------------- */

static void run_modln(int64_t nbatch, int64_t per, int64_t C, int64_t ld_src, int64_t ld_dst,
                      bool inplace, float offset)
{
    const int64_t rows = nbatch * per, ld_mod = 6 * C;
    float *src = falloc((size_t)(rows * ld_src)), *dst = falloc((size_t)(rows * ld_dst));
    float *mod = falloc((size_t)(nbatch * ld_mod)), *x0 = falloc((size_t)(rows * ld_src));
    fill(src, (size_t)(rows * ld_src), 2.0f);
    for (int64_t i = 0; i < rows * ld_src; i++)
        src[i] += offset;
    fill(mod, (size_t)(nbatch * ld_mod), 1.0f);
    memcpy(x0, src, (size_t)(rows * ld_src) * sizeof(float));
    fill_const(dst, (size_t)(rows * ld_dst), SENTINEL);
    float *out = inplace ? src : dst;
    int64_t ldo = inplace ? ld_src : ld_dst;
    wf_modln_params_t p = {.nbatch = nbatch, .per = per, .C = C, .src = src, .ld_src = ld_src,
                           .dst = out, .ld_dst = ldo, .shift = mod + 3 * C,
                           .scale = mod + 4 * C, .ld_mod = ld_mod, .eps = 1e-6f};
    CHECK(ops->modln(ctx, &p) == WF_OK, "modln");
    int bad = 0;
    for (int64_t b = 0; b < nbatch; b++)
        for (int64_t r = 0; r < per; r++) {
            const float *x = x0 + (b * per + r) * ld_src;
            const float *y = out + (b * per + r) * ldo;
            double mean = 0, var = 0;
            for (int64_t c = 0; c < C; c++)
                mean += x[c];
            mean /= (double)C;
            for (int64_t c = 0; c < C; c++)
                var += (x[c] - mean) * (x[c] - mean);
            var /= (double)C;
            double inv = 1.0 / sqrt(var + (double)1e-6f);
            for (int64_t c = 0; c < C; c++) {
                double sc = mod[b * ld_mod + 4 * C + c], sh = mod[b * ld_mod + 3 * C + c];
                double nv = (x[c] - mean) * inv;
                double ref = nv * (1.0 + sc) + sh;
                double tol = 4.0 * U32 * (fabs(nv * (1.0 + sc)) + fabs(sh)) + 1e-12;
                if (!(fabs(y[c] - ref) <= tol) && bad++ < 3)
                    CHECK(false, "modln (%lld, %lld, %lld): %.9g ref %.9g", (long long)b,
                          (long long)r, (long long)c, (double)y[c], ref);
            }
            for (int64_t c = C; c < ldo; c++) /* padding untouched */
                bad += inplace ? y[c] != x[c] : y[c] != SENTINEL;
        }
    CHECK(bad == 0, "modln C %lld ld %lld/%lld inplace %d offset %g: %d bad", (long long)C,
          (long long)ld_src, (long long)ld_dst, (int)inplace, (double)offset, bad);
    free(src);
    free(dst);
    free(mod);
    free(x0);
}

static void test_modln(void)
{
    run_modln(2, 3, 67, 70, 69, false, 0.0f);
    run_modln(2, 3, 67, 67, 67, true, 0.0f);
    run_modln(1, 4, 256, 260, 256, false, 300.0f); /* large mean: double statistics */
    run_modln(3, 2, 256, 256, 256, true, -50.0f);
    run_modln(1, 1, 1, 1, 1, false, 0.0f);         /* C = 1: var 0 */
    run_modln(0, 5, 8, 8, 8, false, 0.0f);         /* no rows */
}

/* ---- gate_residual ---------------------------------------------------------------- */

static void test_gate_residual(void)
{
    const int64_t nbatch = 2, per = 3, C = 45, ld_s = 47, ld_y = 50, ld_g = 3 * C;
    const int64_t rows = nbatch * per;
    float *S = falloc((size_t)(rows * ld_s)), *S0 = falloc((size_t)(rows * ld_s));
    float *y = falloc((size_t)(rows * ld_y)), *g = falloc((size_t)(nbatch * ld_g));
    fill(S0, (size_t)(rows * ld_s), 4.0f);
    fill(y, (size_t)(rows * ld_y), 4.0f);
    fill(g, (size_t)(nbatch * ld_g), 1.0f);
    memcpy(S, S0, (size_t)(rows * ld_s) * sizeof(float));
    const float *gate = g + 2 * C;
    CHECK(ops->gate_residual(ctx, S, ld_s, y, ld_y, gate, ld_g, nbatch, per, C) == WF_OK,
          "gate_residual");
    int bad = 0;
    for (int64_t b = 0; b < nbatch; b++)
        for (int64_t r = 0; r < per; r++)
            for (int64_t c = 0; c < ld_s; c++) {
                int64_t i = (b * per + r) * ld_s + c;
                if (c >= C) {
                    bad += S[i] != S0[i];
                    continue;
                }
                double gy = (double)gate[b * ld_g + c] * y[(b * per + r) * ld_y + c];
                double ref = S0[i] + gy;
                bad += !(fabs(S[i] - ref) <= 3.0 * U32 * (fabs(S0[i]) + fabs(gy)));
            }
    CHECK(bad == 0, "gate_residual: %d bad", bad);
    free(S);
    free(S0);
    free(y);
    free(g);
}

/* ---- head_norm_rope ----------------------------------------------------------------- */

static void run_headrope(int64_t D, bool norm, bool rope)
{
    const int64_t nbatch = 2, per = 3, L = 7, row0 = 2, H = 3, HD = H * D, ld_src = HD + 5;
    const int64_t rows = nbatch * per;
    float *src = falloc((size_t)(rows * ld_src)), *dst = falloc((size_t)(nbatch * L * HD));
    float *w = falloc((size_t)D), *cs = falloc((size_t)(L * D)), *sn = falloc((size_t)(L * D));
    fill(src, (size_t)(rows * ld_src), 3.0f);
    fill(w, (size_t)D, 2.0f);
    for (int64_t i = 0; i + 1 < L * D; i += 2) {
        double ang = 3.0 * rnd_unit();
        cs[i] = cs[i + 1] = (float)cos(ang);
        sn[i] = sn[i + 1] = (float)sin(ang);
    }
    fill_const(dst, (size_t)(nbatch * L * HD), SENTINEL);
    wf_headrope_params_t p = {.nbatch = nbatch, .per = per, .L = L, .row0 = row0, .H = H,
                              .D = D, .src = src, .ld_src = ld_src, .dst = dst,
                              .norm = norm ? w : NULL, .cos = rope ? cs : NULL,
                              .sin = rope ? sn : NULL, .eps = 1e-6f};
    CHECK(ops->head_norm_rope(ctx, &p) == WF_OK, "head_norm_rope");
    int bad = 0;
    double *nx = malloc((size_t)D * sizeof(double));
    for (int64_t b = 0; b < nbatch; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *o = dst + (b * L + l) * HD;
            int64_t s = l - row0;
            if (s < 0 || s >= per) { /* rows of other parts: untouched */
                for (int64_t i = 0; i < HD; i++)
                    bad += o[i] != SENTINEL;
                continue;
            }
            const float *row = src + (b * per + s) * ld_src;
            for (int64_t h = 0; h < H; h++) {
                const float *xh = row + h * D;
                double ss = 0;
                for (int64_t d = 0; d < D; d++)
                    ss += (double)xh[d] * xh[d];
                double inv = 1.0 / sqrt(ss / (double)D + (double)1e-6f);
                for (int64_t d = 0; d < D; d++)
                    nx[d] = norm ? xh[d] * inv * w[d] : xh[d];
                for (int64_t d = 0; d < D; d++) {
                    double ref = nx[d], mag = fabs(nx[d]);
                    if (rope) {
                        double c = cs[l * D + d], sv = sn[l * D + d];
                        if (d % 2 == 0) {
                            ref = nx[d] * c - nx[d + 1] * sv;
                            mag = fabs(nx[d] * c) + fabs(nx[d + 1] * sv);
                        } else {
                            ref = nx[d] * c + nx[d - 1] * sv;
                            mag = fabs(nx[d] * c) + fabs(nx[d - 1] * sv);
                        }
                    }
                    double got = o[h * D + d];
                    if (!(fabs(got - ref) <= 6.0 * U32 * mag) && bad++ < 3)
                        CHECK(false, "headrope D %lld norm %d rope %d (%lld,%lld,%lld,%lld): "
                              "%.9g ref %.9g", (long long)D, norm, rope, (long long)b,
                              (long long)l, (long long)h, (long long)d, got, ref);
                }
            }
        }
    CHECK(bad == 0, "head_norm_rope D %lld norm %d rope %d: %d bad", (long long)D, norm, rope,
          bad);
    free(nx);
    free(src);
    free(dst);
    free(w);
    free(cs);
    free(sn);
}

static void test_headrope(void)
{
    const int64_t Ds[3] = {16, 10, 128};
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 4; m++)
            run_headrope(Ds[i], m & 1, (m >> 1) & 1);
    run_headrope(7, true, false); /* odd D without rotation */
}

/* ---- rope_table, timestep_proj ------------------------------------------------------- */

static void test_rope_table(void)
{
    const uint32_t axes[3] = {4, 6, 6};
    const int64_t L = 9, D = 16, NA = 3;
    float ids[9 * 3];
    for (int64_t i = 0; i < L * NA; i++)
        ids[i] = (float)(rnd_u32() % 64) + (i % 5 == 0 ? 0.25f : 0.0f);
    float *cs = falloc((size_t)(L * D)), *sn = falloc((size_t)(L * D));
    CHECK(ops->rope_table(ctx, ids, L, axes, 3, 10000.0, D, cs, sn) == WF_OK, "rope_table");
    int bad = 0, off = 0;
    for (int64_t r = 0; r < L; r++) {
        int64_t d = 0;
        for (int64_t a = 0; a < NA; a++)
            for (int64_t j = 0; j < axes[a] / 2; j++, d += 2) {
                double freq = 1.0 / pow(10000.0, (double)(2 * j) / (double)axes[a]);
                double ang = (double)ids[r * NA + a] * freq;
                float c = (float)cos(ang), s = (float)sin(ang);
                bad += cs[r * D + d] != c || cs[r * D + d + 1] != c;
                bad += sn[r * D + d] != s || sn[r * D + d + 1] != s;
                /* independent: theta^(-2j/d) = exp(-2j/d ln theta) */
                double ang2 = ids[r * NA + a] * exp(-(double)(2 * j) / axes[a] * log(10000.0));
                off += fabs(cs[r * D + d] - cos(ang2)) > 1e-6 ||
                       fabs(sn[r * D + d] - sin(ang2)) > 1e-6;
            }
    }
    CHECK(bad == 0, "rope_table: %d values differ from the formula", bad);
    CHECK(off == 0, "rope_table: %d values off cos / sin", off);
    free(cs);
    free(sn);
}

static void test_timestep(void)
{
    const float t[4] = {0.875f, 0.5f, 1.0f, 0.0123f};
    const int64_t B = 4, dim = 256, half = 128;
    float *dst = falloc((size_t)(B * dim));
    const wf_dtype_t dts[3] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    for (int di = 0; di < 3; di++) {
        CHECK(ops->timestep_proj(ctx, t, B, dim, dts[di], dst) == WF_OK, "timestep_proj");
        int bad = 0;
        for (int64_t b = 0; b < B; b++) {
            /* tv by value: t and t * 1000 rounded to the dtype */
            double tv = wf_round_to_dtype(wf_round_to_dtype(t[b], dts[di]) * 1000.0f, dts[di]);
            for (int64_t k = 0; k < half; k++) {
                double arg = tv * exp(-log(10000.0) * (double)k / (double)half);
                double tol = 4e-7 * fabs(arg) + 2e-7;
                bad += !(fabs(dst[b * dim + k] - cos(arg)) <= tol);
                bad += !(fabs(dst[b * dim + half + k] - sin(arg)) <= tol);
            }
        }
        CHECK(bad == 0, "timestep_proj dtype %d: %d bad", (int)dts[di], bad);
    }
    /* 0.875 * 1000 is 876 in bf16: k = 0 gives cos(876), sin(876) */
    CHECK(ops->timestep_proj(ctx, t, 1, dim, WF_DTYPE_BF16, dst) == WF_OK, "timestep bf16");
    CHECK(fabs(dst[half] - sin(876.0)) < 1e-4 && fabs(dst[0] - cos(876.0)) < 1e-4,
          "timestep bf16: tv is not 876 (%g)", (double)dst[half]);
    CHECK(ops->timestep_proj(ctx, t, 1, dim, WF_DTYPE_F32, dst) == WF_OK, "timestep f32");
    CHECK(fabs(dst[half] - sin(875.0)) < 1e-4, "timestep f32: tv is not 875");
    free(dst);
}

/* ---- copy_rows ------------------------------------------------------------------------ */

static void test_copy_rows(void)
{
    unsigned char src[7 * 20], dst[7 * 24];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)rnd_u32();
    memset(dst, 0xAB, sizeof dst);
    CHECK(ops->copy_rows(ctx, dst, 24, src, 20, 7, 13) == WF_OK, "copy_rows");
    int bad = 0;
    for (int r = 0; r < 7; r++)
        for (int c = 0; c < 24; c++)
            bad += c < 13 ? dst[r * 24 + c] != src[r * 20 + c] : dst[r * 24 + c] != 0xAB;
    CHECK(bad == 0, "copy_rows strided: %d bad", bad);
    memset(dst, 0, sizeof dst);
    CHECK(ops->copy_rows(ctx, dst, 20, src, 20, 7, 20) == WF_OK, "copy_rows contiguous");
    CHECK(memcmp(dst, src, sizeof src) == 0, "copy_rows contiguous: differs");
    CHECK(ops->copy_rows(ctx, dst, 20, src, 20, 0, 20) == WF_OK, "copy_rows 0 rows");
}

/* ---- refusals ---------------------------------------------------------------------------- */

#define BAD(call, what)                                                                       \
    CHECK((call) == WF_E_BAD_ARGUMENT, "%s: not refused", what)

static void test_refusals(void)
{
    enum { N = 256 };
    float *buf = falloc(4 * N), *snap = falloc(4 * N);
    fill(buf, 4 * N, 1.0f);
    memcpy(snap, buf, 4 * N * sizeof(float));
    float *a = buf, *b = buf + N, *c = buf + 2 * N, *d = buf + 3 * N;

    /* linear: a good base, each field broken in turn */
    wf_linear_params_t g;
    memset(&g, 0, sizeof g);
    g.rows = 2;
    g.in = 8;
    g.out = 4;
    g.x = a;
    g.ldx = 8;
    g.w_dtype = WF_DTYPE_F32;
    g.ldw = 8;
    g.nwb = 2;
    g.wb[0] = b;
    g.wb[1] = b + 4;
    g.wbw[0] = 4;
    g.wbw[1] = 4;
    g.bias = c;
    g.act = WF_ACT_GELU_TANH;
    g.y = d;
    g.ldy = 4;
    wf_linear_params_t p;
    BAD(ops->linear(ctx, NULL, NULL), "linear NULL params");
    p = g; p.x = NULL; BAD(ops->linear(ctx, &p, NULL), "linear x NULL");
    p = g; p.y = NULL; BAD(ops->linear(ctx, &p, NULL), "linear y NULL");
    p = g; p.wb[1] = NULL; BAD(ops->linear(ctx, &p, NULL), "linear wb NULL");
    p = g; p.rows = -1; BAD(ops->linear(ctx, &p, NULL), "linear rows < 0");
    p = g; p.in = -8; BAD(ops->linear(ctx, &p, NULL), "linear in < 0");
    p = g; p.out = -1; BAD(ops->linear(ctx, &p, NULL), "linear out < 0");
    p = g; p.nwb = 0; BAD(ops->linear(ctx, &p, NULL), "linear nwb 0");
    p = g; p.nwb = WF_LINEAR_MAX_BLOCKS + 1; BAD(ops->linear(ctx, &p, NULL), "linear nwb > max");
    p = g; p.wbw[1] = 3; BAD(ops->linear(ctx, &p, NULL), "linear sum wbw != in");
    p = g; p.wbw[0] = 0; p.wbw[1] = 8; BAD(ops->linear(ctx, &p, NULL), "linear wbw 0");
    p = g; p.w_dtype = (wf_dtype_t)7; BAD(ops->linear(ctx, &p, NULL), "linear bad dtype");
    p = g; p.act = (wf_act_t)4; BAD(ops->linear(ctx, &p, NULL), "linear bad act");
    p = g; p.ldx = 7; BAD(ops->linear(ctx, &p, NULL), "linear ldx < in");
    p = g; p.ldy = 3; BAD(ops->linear(ctx, &p, NULL), "linear ldy < out");
    p = g; p.ldw = 3; BAD(ops->linear(ctx, &p, NULL), "linear ldw < block");
    p = g; p.y = a + 4; BAD(ops->linear(ctx, &p, NULL), "linear y overlaps x");
    p = g; p.bias = d + 2; BAD(ops->linear(ctx, &p, NULL), "linear bias inside y");
    p = g; p.w_dtype = WF_DTYPE_BF16; p.ldx = 7; BAD(ops->linear(ctx, &p, NULL), "linear bf16 ldx");

    BAD(ops->bias_act(ctx, NULL, WF_DTYPE_F32, 2, 4, 4, c, WF_ACT_SILU, NULL, 0, WF_DTYPE_F32),
                      "bias_act y NULL");
    BAD(ops->bias_act(ctx, d, WF_DTYPE_F32, -1, 4, 4, c, WF_ACT_SILU, NULL, 0, WF_DTYPE_F32),
                      "bias_act rows < 0");
    BAD(ops->bias_act(ctx, d, WF_DTYPE_F32, 2, -4, 4, c, WF_ACT_SILU, NULL, 0, WF_DTYPE_F32),
                      "bias_act n < 0");
    BAD(ops->bias_act(ctx, d, WF_DTYPE_F32, 2, 4, 3, c, WF_ACT_SILU, NULL, 0, WF_DTYPE_F32),
                      "bias_act ldy < n");
    BAD(ops->bias_act(ctx, d, WF_DTYPE_F32, 2, 4, 4, c, (wf_act_t)-1, NULL, 0, WF_DTYPE_F32),
                      "bias_act bad act");
    BAD(ops->bias_act(ctx, d, WF_DTYPE_F32, 2, 4, 4, d + 2, WF_ACT_SILU, NULL, 0, WF_DTYPE_F32),
                      "bias_act bias inside y");

    BAD(ops->act(ctx, NULL, a, 4, WF_ACT_SILU), "act dst NULL");
    BAD(ops->act(ctx, d, NULL, 4, WF_ACT_SILU), "act src NULL");
    BAD(ops->act(ctx, d, a, -1, WF_ACT_SILU), "act n < 0");
    BAD(ops->act(ctx, d, a, 4, WF_ACT_NONE), "act NONE");
    BAD(ops->act(ctx, d, a, 4, (wf_act_t)9), "act bad");
    BAD(ops->act(ctx, d + 1, d, 4, WF_ACT_SILU), "act partial overlap");

    BAD(ops->add(ctx, NULL, a, 4), "add dst NULL");
    BAD(ops->add(ctx, d, NULL, 4), "add src NULL");
    BAD(ops->add(ctx, d, a, -4), "add n < 0");
    BAD(ops->add(ctx, d + 1, d, 4), "add partial overlap");

    wf_modln_params_t mg = {.nbatch = 2, .per = 2, .C = 8, .src = a, .ld_src = 8, .dst = d,
                            .ld_dst = 8, .shift = c, .scale = c + 8, .ld_mod = 16,
                            .eps = 1e-6f};
    wf_modln_params_t m;
    BAD(ops->modln(ctx, NULL), "modln NULL");
    m = mg; m.src = NULL; BAD(ops->modln(ctx, &m), "modln src NULL");
    m = mg; m.dst = NULL; BAD(ops->modln(ctx, &m), "modln dst NULL");
    m = mg; m.shift = NULL; BAD(ops->modln(ctx, &m), "modln shift NULL");
    m = mg; m.scale = NULL; BAD(ops->modln(ctx, &m), "modln scale NULL");
    m = mg; m.nbatch = -1; BAD(ops->modln(ctx, &m), "modln nbatch < 0");
    m = mg; m.per = -1; BAD(ops->modln(ctx, &m), "modln per < 0");
    m = mg; m.C = 0; BAD(ops->modln(ctx, &m), "modln C 0");
    m = mg; m.ld_src = 7; BAD(ops->modln(ctx, &m), "modln ld_src < C");
    m = mg; m.ld_dst = 7; BAD(ops->modln(ctx, &m), "modln ld_dst < C");
    m = mg; m.ld_mod = 7; BAD(ops->modln(ctx, &m), "modln ld_mod < C");
    m = mg; m.eps = -1.0f; BAD(ops->modln(ctx, &m), "modln eps < 0");
    m = mg; m.dst = a; m.ld_dst = 9; BAD(ops->modln(ctx, &m), "modln in place, ld differs");
    m = mg; m.dst = a + 3; BAD(ops->modln(ctx, &m), "modln dst overlaps src");
    m = mg; m.shift = d + 4; BAD(ops->modln(ctx, &m), "modln shift inside dst");

    BAD(ops->gate_residual(ctx, NULL, 8, a, 8, c, 8, 2, 2, 8), "gate S NULL");
    BAD(ops->gate_residual(ctx, d, 8, NULL, 8, c, 8, 2, 2, 8), "gate y NULL");
    BAD(ops->gate_residual(ctx, d, 8, a, 8, NULL, 8, 2, 2, 8), "gate gate NULL");
    BAD(ops->gate_residual(ctx, d, 7, a, 8, c, 8, 2, 2, 8), "gate ld_s < C");
    BAD(ops->gate_residual(ctx, d, 8, a, 7, c, 8, 2, 2, 8), "gate ld_y < C");
    BAD(ops->gate_residual(ctx, d, 8, a, 8, c, 7, 2, 2, 8), "gate ld_gate < C");
    BAD(ops->gate_residual(ctx, d, 8, a, 8, c, 8, -2, 2, 8), "gate nbatch < 0");
    BAD(ops->gate_residual(ctx, d, 8, a, 8, c, 8, 2, -2, 8), "gate per < 0");
    BAD(ops->gate_residual(ctx, d, 8, a, 8, c, 8, 2, 2, -8), "gate C < 0");
    BAD(ops->gate_residual(ctx, d, 8, d + 8, 8, c, 8, 2, 2, 8), "gate y overlaps S");

    wf_headrope_params_t hg = {.nbatch = 2, .per = 2, .L = 5, .row0 = 1, .H = 2, .D = 8,
                               .src = a, .ld_src = 16, .dst = c, .norm = b, .cos = b + 64,
                               .sin = b + 128, .eps = 1e-6f};
    wf_headrope_params_t h;
    BAD(ops->head_norm_rope(ctx, NULL), "headrope NULL");
    h = hg; h.src = NULL; BAD(ops->head_norm_rope(ctx, &h), "headrope src NULL");
    h = hg; h.dst = NULL; BAD(ops->head_norm_rope(ctx, &h), "headrope dst NULL");
    h = hg; h.cos = NULL; BAD(ops->head_norm_rope(ctx, &h), "headrope cos NULL only");
    h = hg; h.sin = NULL; BAD(ops->head_norm_rope(ctx, &h), "headrope sin NULL only");
    h = hg; h.D = 7; h.ld_src = 14; BAD(ops->head_norm_rope(ctx, &h), "headrope odd D with rope");
    h = hg; h.ld_src = 15; BAD(ops->head_norm_rope(ctx, &h), "headrope ld_src < H D");
    h = hg; h.row0 = 4; BAD(ops->head_norm_rope(ctx, &h), "headrope row0 + per > L");
    h = hg; h.row0 = -1; BAD(ops->head_norm_rope(ctx, &h), "headrope row0 < 0");
    h = hg; h.H = 0; BAD(ops->head_norm_rope(ctx, &h), "headrope H 0");
    h = hg; h.nbatch = -1; BAD(ops->head_norm_rope(ctx, &h), "headrope nbatch < 0");
    h = hg; h.eps = NAN; BAD(ops->head_norm_rope(ctx, &h), "headrope eps NaN");
    h = hg; h.dst = a + 8; BAD(ops->head_norm_rope(ctx, &h), "headrope dst overlaps src");

    const uint32_t ax[3] = {2, 2, 4}, ax_odd[3] = {3, 1, 4};
    BAD(ops->rope_table(ctx, NULL, 2, ax, 3, 1e4, 8, c, d), "rope ids NULL");
    BAD(ops->rope_table(ctx, a, 2, NULL, 3, 1e4, 8, c, d), "rope axes NULL");
    BAD(ops->rope_table(ctx, a, 2, ax, 3, 1e4, 8, NULL, d), "rope cos NULL");
    BAD(ops->rope_table(ctx, a, 2, ax, 3, 1e4, 8, c, NULL), "rope sin NULL");
    BAD(ops->rope_table(ctx, a, -2, ax, 3, 1e4, 8, c, d), "rope L < 0");
    BAD(ops->rope_table(ctx, a, 2, ax, 3, 1e4, 10, c, d), "rope sum axes != D");
    BAD(ops->rope_table(ctx, a, 2, ax_odd, 3, 1e4, 8, c, d), "rope odd axis");
    BAD(ops->rope_table(ctx, a, 2, ax, 0, 1e4, 8, c, d), "rope no axes");
    BAD(ops->rope_table(ctx, a, 2, ax, 3, -1.0, 8, c, d), "rope theta < 0");
    BAD(ops->rope_table(ctx, a, 2, ax, 3, 1e4, 8, c, c + 4), "rope cos / sin overlap");

    BAD(ops->timestep_proj(ctx, NULL, 2, 8, WF_DTYPE_F32, d), "timestep t NULL");
    BAD(ops->timestep_proj(ctx, a, 2, 8, WF_DTYPE_F32, NULL), "timestep dst NULL");
    BAD(ops->timestep_proj(ctx, a, -2, 8, WF_DTYPE_F32, d), "timestep B < 0");
    BAD(ops->timestep_proj(ctx, a, 2, 7, WF_DTYPE_F32, d), "timestep odd dim");
    BAD(ops->timestep_proj(ctx, a, 2, -8, WF_DTYPE_F32, d), "timestep dim < 0");
    BAD(ops->timestep_proj(ctx, a, 2, 8, (wf_dtype_t)5, d), "timestep bad dtype");

    BAD(ops->copy_rows(ctx, NULL, 16, a, 16, 2, 16), "copy dst NULL");
    BAD(ops->copy_rows(ctx, d, 16, NULL, 16, 2, 16), "copy src NULL");
    BAD(ops->copy_rows(ctx, d, 16, a, 16, -2, 16), "copy rows < 0");
    BAD(ops->copy_rows(ctx, d, 15, a, 16, 2, 16), "copy ld_dst < row");
    BAD(ops->copy_rows(ctx, d, 16, a, 15, 2, 16), "copy ld_src < row");
    BAD(ops->copy_rows(ctx, a + 2, 16, a, 16, 2, 16), "copy overlap");

    CHECK(memcmp(buf, snap, 4 * N * sizeof(float)) == 0, "a refused op touched memory");
    free(buf);
    free(snap);
}

int main(void)
{
    ops = wf_backend_cpu();
    if (ops->ctx_new(0, (uint64_t)1 << 30, &ctx) != WF_OK) {
        fprintf(stderr, "ctx_new failed\n");
        return 1;
    }
    CHECK(ops->linear_workspace && ops->linear && ops->bias_act && ops->act && ops->add &&
              ops->modln && ops->gate_residual && ops->head_norm_rope && ops->rope_table &&
              ops->timestep_proj && ops->copy_rows,
          "cpu backend lacks a model op");
    test_act_accuracy(WF_ACT_GELU_TANH, "gelu_tanh");
    test_act_accuracy(WF_ACT_SILU, "silu");
    test_act_accuracy(WF_ACT_GELU, "gelu");
    test_act_inplace();
    test_linear();
    test_bias_act();
    test_add();
    test_modln();
    test_gate_residual();
    test_headrope();
    test_rope_table();
    test_timestep();
    test_copy_rows();
    test_refusals();
    ops->ctx_destroy(&ctx);
    printf("test_model_ops: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
