/* test_kernels.c — kernels/: dtype conversions and the CPU attention
 * backend, checked against plain fp64 references: the conversions'
 * written here, the attention's in kernels/reference.c (one reference
 * for every attention check).
 *
 * Conversions: every f16 and bf16 bit pattern (to f32 and back), round to
 * nearest even checked by its definition (no representable neighbour is
 * closer; ties land on an even pattern) over random and edge f32 values,
 * NaN / inf / subnormals / overflow, and the bulk (F16C) paths against the
 * scalar ones bit for bit at odd addresses.
 *
 * Attention: a grid over B, Sq, Skv (Sq != Skv included), GQA head pairs,
 * D, causal with and without position offsets (fully masked rows
 * included), head sub-ranges, the 9 input x output dtype pairs and inputs
 * and outputs at odd addresses. Tolerances (relative to max |ref| of the
 * case, plus the output dtype's rounding):
 *   out: |out - ref| <= 2e-5 * max|ref| + eps_out * |ref|
 *        2e-5: fp32 accumulation over <= ~1100 keys with a ~1e-7 exp2
 *        (observed errors are ~1e-6); eps_out (2^-24 f32, 2^-11 f16, 2^-8
 *        bf16, i.e. twice the unit roundoff) covers rounding the result to
 *        the output dtype.
 *   lse: |lse - ref| <= 5e-5 + 2e-6 |ref|: log of an fp32 sum of <= ~1100
 *        terms (relative error of the sum <= n * 2^-24 bounds it).
 * Low-precision inputs are compared against the reference computed on the
 * rounded inputs, so only the kernel's own error is measured.
 */
#include "backend.h"
#include "reference.h"
#include "softmax.h"
#include "tensor.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WF_TEST_RNG_SEED 12345u
#include "support/check.h"
#include "support/rng.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- conversions ----------------------------------------------------------- */

/* Exact value of an f16 pattern by its definition. */
static double f16_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

static void test_f16_exhaustive(void)
{
    unsigned char *src = malloc(2 * 65536 + 1);
    float *bulk = malloc(65536 * sizeof(float));
    unsigned char *back = malloc(2 * 65536 + 1);
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        memcpy(src + 1 + 2 * i, &h, 2);
    }
    /* odd address on purpose: F16C loads and the scalar tail */
    wf_convert_to_f32(bulk, src + 1, WF_DTYPE_F16, 65536);
    wf_convert_from_f32(back + 1, WF_DTYPE_F16, bulk, 65536);

    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = wf_f16_to_f32(h);
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        CHECK(fbits(f) == fbits(bulk[i]), "f16 %04x: scalar %08x bulk %08x", h,
              fbits(f), fbits(bulk[i]));
        uint16_t r = wf_f32_to_f16(f), rb;
        memcpy(&rb, back + 1 + 2 * i, 2);
        CHECK(r == rb, "f16 %04x: back scalar %04x bulk %04x", h, r, rb);
        if (is_nan) {
            CHECK(isnan(f) && !!signbit(f) == !!(h & 0x8000), "f16 %04x: not NaN", h);
            /* NaN stays NaN, quieted, sign and payload kept */
            CHECK(r == (h | 0x200), "f16 NaN %04x -> %04x", h, r);
        } else if ((h & 0x7c00) == 0x7c00) {
            CHECK(isinf(f) && !!signbit(f) == !!(h & 0x8000), "f16 %04x: not inf", h);
            CHECK(r == h, "f16 inf %04x -> %04x", h, r);
        } else {
            CHECK((double)f == f16_value(h), "f16 %04x: %.9g != %.9g", h, f,
                  f16_value(h));
            CHECK(r == h, "f16 round trip %04x -> %04x", h, r);
        }
    }
    free(src);
    free(bulk);
    free(back);
}

/* Is h the round-to-nearest-even f16 (or bf16, via `val`) of x? Checks
 * that no adjacent pattern of the same sign is closer, and that a tie
 * landed on an even pattern. */
static bool is_rne(double x, uint16_t h, double (*val)(uint16_t), uint16_t inf)
{
    uint16_t mag = h & 0x7fff;
    double y = val(h), d = fabs(y - x);
    if (mag < inf) {
        uint16_t up = (uint16_t)(h + 1);
        if ((up & 0x7fff) < inf) {
            double du = fabs(val(up) - x);
            if (du < d || (du == d && (h & 1)))
                return false;
        }
    }
    if (mag > 0 && mag <= inf) {
        uint16_t dn = (uint16_t)(h - 1);
        double dd = fabs(val(dn) - x);
        if (dd < d || (dd == d && (h & 1)))
            return false;
    }
    return true;
}

static double bf16_value(uint16_t h)
{
    return (double)bitsf((uint32_t)h << 16);
}

static void check_f32_to_f16(float x)
{
    uint16_t h = wf_f32_to_f16(x);
    if (isnan(x)) {
        CHECK((h & 0x7c00) == 0x7c00 && (h & 0x3ff), "f32 NaN %08x -> %04x", fbits(x), h);
        return;
    }
    double ax = fabs((double)x);
    CHECK(!!(h & 0x8000) == !!signbit(x), "f32 %a: sign lost", (double)x);
    if (ax >= 65520.0) { /* halfway to 2^16 and above: infinity */
        CHECK((h & 0x7fff) == 0x7c00, "f32 %a -> %04x, want inf", (double)x, h);
        return;
    }
    CHECK((h & 0x7fff) < 0x7c00, "f32 %a -> %04x, not finite", (double)x, h);
    CHECK(is_rne((double)x, h, f16_value, 0x7c00), "f32 %a -> f16 %04x not RNE",
          (double)x, h);
}

static void check_f32_to_bf16(float x)
{
    uint16_t h = wf_f32_to_bf16(x);
    if (isnan(x)) {
        CHECK((h & 0x7f80) == 0x7f80 && (h & 0x7f), "f32 NaN %08x -> bf16 %04x", fbits(x), h);
        return;
    }
    CHECK(!!(h & 0x8000) == !!signbit(x), "bf16 %a: sign lost", (double)x);
    if (isinf(x)) {
        CHECK((h & 0x7fff) == 0x7f80, "bf16 inf -> %04x", h);
        return;
    }
    /* the largest bf16 is 0x7f7f; halfway to 2^128 and above -> inf */
    double lim = ldexp(2.0 - ldexp(1.0, -8), 127);
    if (fabs((double)x) >= lim) {
        CHECK((h & 0x7fff) == 0x7f80, "bf16 %a -> %04x, want inf", (double)x, h);
        return;
    }
    CHECK(is_rne((double)x, h, bf16_value, 0x7f80), "f32 %a -> bf16 %04x not RNE",
          (double)x, h);
}

static void test_rounding(void)
{
    /* edge values: ties, overflow, f16 subnormal boundaries */
    const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
        0xffffffff, 0x477fe000 /* 65504 */, 0x477fefff, 0x477ff000 /* 65520 */,
        0x7f7fffff, 0x7f7f7fff, 0x7f7f8000, 0x33000000 /* 2^-25 */, 0x33000001,
        0x33400000, 0x33c00000 /* 1.5 * 2^-24: tie */, 0x38800000, 0x387fffff,
        0x387fe000, 0x387ff000 /* tie to min normal */, 0x3f808000 /* bf16 tie */,
        0x3f818000, 0x3f801000 /* f16 tie */, 0x3f803000, 0x00000001, 0x00800000,
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        check_f32_to_f16(bitsf(edges[i]));
        check_f32_to_f16(-bitsf(edges[i]));
        check_f32_to_bf16(bitsf(edges[i]));
        check_f32_to_bf16(-bitsf(edges[i]));
    }
    /* explicit ties-to-even */
    CHECK(wf_f32_to_bf16(bitsf(0x3f808000)) == 0x3f80, "bf16 tie down");
    CHECK(wf_f32_to_bf16(bitsf(0x3f818000)) == 0x3f82, "bf16 tie up");
    CHECK(wf_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "f16 tie down");
    CHECK(wf_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02, "f16 tie up");
    CHECK(wf_f32_to_bf16(bitsf(0x7f800001)) != 0x7f80, "bf16 NaN became inf");
    CHECK(wf_f32_to_f16(65536.0f) == 0x7c00 && wf_f32_to_f16(-1e30f) == 0xfc00,
          "f16 overflow");

    /* random patterns over every exponent, and the bulk paths bit for bit */
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float));
    unsigned char *h16 = malloc(2 * N + 1), *hb16 = malloc(2 * N + 1);
    for (size_t i = 0; i < N; i++) {
        uint32_t u = rnd_u32();
        if (i % 2) /* concentrate on the f16 range */
            u = (u & 0x807fffffu) | ((uint32_t)(100 + u % 44) << 23);
        x[i] = bitsf(u);
    }
    wf_convert_from_f32(h16 + 1, WF_DTYPE_F16, x, N);
    wf_convert_from_f32(hb16 + 1, WF_DTYPE_BF16, x, N);
    for (size_t i = 0; i < N; i++) {
        check_f32_to_f16(x[i]);
        check_f32_to_bf16(x[i]);
        uint16_t a, b;
        memcpy(&a, h16 + 1 + 2 * i, 2);
        memcpy(&b, hb16 + 1 + 2 * i, 2);
        CHECK(a == wf_f32_to_f16(x[i]), "bulk f16 of %08x: %04x", fbits(x[i]), a);
        CHECK(b == wf_f32_to_bf16(x[i]), "bulk bf16 of %08x: %04x", fbits(x[i]), b);
    }
    free(x);
    free(h16);
    free(hb16);

    /* every bf16 pattern to f32 (scalar and bulk at an odd address) and back */
    unsigned char *b16 = malloc(2 * 65536 + 1);
    float *bf = malloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        memcpy(b16 + 1 + 2 * i, &h, 2);
    }
    wf_convert_to_f32(bf, b16 + 1, WF_DTYPE_BF16, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float f = wf_bf16_to_f32((uint16_t)i);
        CHECK(fbits(f) == i << 16, "bf16 %04x -> %08x", i, fbits(f));
        CHECK(fbits(bf[i]) == i << 16, "bulk bf16 %04x -> %08x", i, fbits(bf[i]));
        uint16_t r = wf_f32_to_bf16(f);
        bool nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
        CHECK(nan ? r == (i | 0x40) : r == i, "bf16 round trip %04x -> %04x", i, r);
    }
    free(b16);
    free(bf);
}

static void test_exp2(void)
{
    double worst = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -126.0f * (float)i / 2000000.0f;
        double want = exp2((double)x);
        double rel = fabs((double)wf_cpu_exp2(x) - want) / want;
        if (rel > worst)
            worst = rel;
    }
    /* 2^-23 ~ 1.2e-7: the polynomial plus a few f32 roundings */
    CHECK(worst <= 2.5e-7, "exp2 worst relative error %.3g", worst);
    /* NaN in, NaN out (and no float -> int conversion of NaN: UBSan) */
    CHECK(isnan(wf_cpu_exp2(NAN)) && isnan(wf_cpu_exp2(-NAN)), "exp2(NaN) not NaN");
    CHECK(wf_cpu_exp2(-INFINITY) == 0.0f && wf_cpu_exp2(-127.5f) == 0.0f &&
              wf_cpu_exp2(0.0f) == 1.0f,
          "exp2 limits");
    printf("exp2: worst relative error %.3g\n", worst);
}

/* ---- attention ------------------------------------------------------------- */

typedef struct acase {
    int64_t B, Sq, Skv, Hq, Hkv, D;
    int64_t h_begin, h_end;
    bool causal;
    int64_t q_offset, kv_offset;
    wf_dtype_t qt, kt, vt, ot;
    float q_amp; /* query magnitude: larger makes the softmax peaky */
    bool lse;
} acase_t;

static size_t dsize(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4 : 2; }

static double eps_of(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 0x1p-24 : dt == WF_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

/* Random tensor stored in dt at an odd address; f32 copy of the stored
 * (rounded) values in *ret_f32. Returns the allocation (data at +1). */
static unsigned char *make_input(size_t n, wf_dtype_t dt, float amp, float **ret_f32)
{
    float *f = malloc(n * sizeof(float) + 1);
    unsigned char *buf = malloc(n * dsize(dt) + 1);
    for (size_t i = 0; i < n; i++)
        f[i] = amp * rnd_unit();
    wf_convert_from_f32(buf + 1, dt, f, n);
    wf_convert_to_f32(f, buf + 1, dt, n);
    *ret_f32 = f;
    return buf;
}

static double worst_out_err[3], worst_lse_err;

static void run_case(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx, const acase_t *c)
{
    size_t nq = (size_t)(c->B * c->Sq * c->Hq * c->D);
    size_t nkv = (size_t)(c->B * c->Skv * c->Hkv * c->D);
    size_t nl = (size_t)(c->B * c->Sq * c->Hq);
    float *qf, *kf, *vf;
    unsigned char *qb = make_input(nq, c->qt, c->q_amp, &qf);
    unsigned char *kb = make_input(nkv, c->kt, 1.0f, &kf);
    unsigned char *vb = make_input(nkv, c->vt, 1.0f, &vf);
    size_t out_bytes = nq * dsize(c->ot);
    unsigned char *ob = malloc(out_bytes + 1);
    memset(ob, 0xa5, out_bytes + 1); /* sentinel outside the head range */
    float *lse = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++)
        lse[i] = 12345.0f;

    wf_attn_params_t p = {
        .B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
        .h_begin = c->h_begin, .h_end = c->h_end,
        .scale = (float)(1.0 / sqrt((double)c->D)), .causal = c->causal,
        .q_offset = c->q_offset, .kv_offset = c->kv_offset,
        .q = qb + 1, .q_dtype = c->qt, .k = kb + 1, .k_dtype = c->kt,
        .v = vb + 1, .v_dtype = c->vt, .out = ob + 1, .out_dtype = c->ot,
        .lse = c->lse ? lse : NULL,
    };
    size_t ws_bytes = ops->attention_workspace(&p);
    CHECK(ws_bytes > 0 && ws_bytes % 64 == 0, "workspace %zu", ws_bytes);
    /* exactly the advertised size: ASan catches any overrun */
    void *ws = aligned_alloc(64, ws_bytes);
    wf_status_t st = ops->attention(ctx, &p, ws);
    CHECK(st == WF_OK, "attention returned %d", (int)st);

    double *ro = malloc(nq * sizeof(double)), *rl = malloc(nl * sizeof(double));
    const wf_ref_attn_t ra = {
        .B = c->B, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
        .scale = 1.0 / sqrt((double)c->D), .causal = c->causal,
        .q_offset = c->q_offset, .kv_offset = c->kv_offset,
    };
    CHECK(wf_ref_attention(&ra, qf, kf, vf, ro, rl) == WF_OK, "reference attention failed");
    double maxref = 0;
    for (size_t i = 0; i < nq; i++)
        maxref = fabs(ro[i]) > maxref ? fabs(ro[i]) : maxref;

    float *of = malloc(nq * sizeof(float));
    wf_convert_to_f32(of, ob + 1, c->ot, nq);
    double eps = eps_of(c->ot);
    int case_fail = 0;
    size_t osz = dsize(c->ot);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t i = 0; i < c->Sq; i++)
            for (int64_t h = 0; h < c->Hq; h++) {
                size_t row = (size_t)((b * c->Sq + i) * c->Hq + h);
                bool in_range = h >= c->h_begin && h < c->h_end;
                if (!in_range) {
                    bool untouched = true;
                    for (size_t x = 0; x < (size_t)c->D * osz; x++)
                        untouched &= ob[1 + row * (size_t)c->D * osz + x] == 0xa5;
                    CHECK(untouched, "head %lld outside [%lld,%lld) written",
                          (long long)h, (long long)c->h_begin, (long long)c->h_end);
                    CHECK(lse[row] == 12345.0f, "lse outside range written");
                    continue;
                }
                for (int64_t d = 0; d < c->D; d++) {
                    double r = ro[row * (size_t)c->D + (size_t)d];
                    double got = of[row * (size_t)c->D + (size_t)d];
                    double err = fabs(got - r);
                    double tol = 2e-5 * maxref + eps * fabs(r);
                    if (maxref > 0 && err / maxref > worst_out_err[c->ot])
                        worst_out_err[c->ot] = err / maxref;
                    if (!(err <= tol) && case_fail++ < 3)
                        CHECK(false, "out[b%lld i%lld h%lld d%lld] = %.8g, ref %.8g (tol %.3g)",
                              (long long)b, (long long)i, (long long)h, (long long)d,
                              got, r, tol);
                }
                if (c->lse) {
                    double r = rl[row];
                    if (isinf(r)) {
                        CHECK(isinf(lse[row]) && lse[row] < 0, "lse %g, want -inf",
                              (double)lse[row]);
                        for (int64_t d = 0; d < c->D; d++)
                            CHECK(of[row * (size_t)c->D + (size_t)d] == 0.0f,
                                  "masked row not zero");
                    } else {
                        double err = fabs((double)lse[row] - r);
                        if (err > worst_lse_err)
                            worst_lse_err = err;
                        if (!(err <= 5e-5 + 2e-6 * fabs(r)) && case_fail++ < 3)
                            CHECK(false, "lse[b%lld i%lld h%lld] = %.8g, ref %.8g",
                                  (long long)b, (long long)i, (long long)h,
                                  (double)lse[row], r);
                    }
                }
            }
    if (case_fail)
        fprintf(stderr,
                "  in case B=%lld Sq=%lld Skv=%lld Hq=%lld Hkv=%lld D=%lld heads "
                "[%lld,%lld) causal=%d off=(%lld,%lld) dtypes q%d k%d v%d out%d\n",
                (long long)c->B, (long long)c->Sq, (long long)c->Skv,
                (long long)c->Hq, (long long)c->Hkv, (long long)c->D,
                (long long)c->h_begin, (long long)c->h_end, c->causal,
                (long long)c->q_offset, (long long)c->kv_offset, c->qt, c->kt,
                c->vt, c->ot);
    free(ws);
    free(qb);
    free(kb);
    free(vb);
    free(qf);
    free(kf);
    free(vf);
    free(ob);
    free(of);
    free(lse);
    free(ro);
    free(rl);
}

static void test_attention_grid(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx)
{
    const int64_t S[] = {1, 7, 64, 130, 300};
    const int64_t HP[][2] = {{1, 1}, {4, 4}, {4, 2}, {6, 1}};
    const int64_t Ds[] = {8, 64, 128, 33};
    const wf_dtype_t DT[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    int idx = 0, ncases = 0;
    for (int64_t B = 1; B <= 2; B++)
        for (int a = 0; a < 5; a++)
            for (int bq = 0; bq < 5; bq++)
                for (int hp = 0; hp < 4; hp++)
                    for (int di = 0; di < 4; di++)
                    for (int causal = 0; causal < 2; causal++, idx++) {
                        acase_t c = {
                            .B = B, .Sq = S[a], .Skv = S[bq], .Hq = HP[hp][0],
                            .Hkv = HP[hp][1], .causal = causal, .q_amp = 1.0f,
                            .lse = idx % 7 != 3,
                        };
                        /* dtype pair, head range and offsets rotate with
                         * coprime periods so every combination occurs */
                        c.D = Ds[di];
                        int combo = idx % 9;
                        c.qt = c.kt = c.vt = DT[combo / 3];
                        c.ot = DT[combo % 3];
                        c.h_begin = 0;
                        c.h_end = c.Hq;
                        if (idx % 5 == 1 && c.Hq > 1)
                            c.h_begin = 1;
                        if (idx % 5 == 2 && c.Hq > 2)
                            c.h_end = c.Hq - 2;
                        if (causal) {
                            switch ((idx / 2) % 4) {
                            case 0: break; /* top-left aligned */
                            case 1: c.kv_offset = 5; break; /* first 5 rows see nothing */
                            case 2: c.q_offset = c.Skv > c.Sq ? c.Skv - c.Sq : 0; break;
                            case 3: c.q_offset = 100; c.kv_offset = 37; break;
                            }
                        }
                        if (idx % 11 == 0)
                            c.q_amp = 6.0f; /* peaky softmax */
                        run_case(ops, ctx, &c);
                        ncases++;
                    }

    /* several key tiles (online rescaling across tiles), mixed dtypes */
    const acase_t extra[] = {
        {1, 200, 1100, 2, 1, 64, 0, 2, false, 0, 0, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 4.0f, true},
        {1, 200, 1100, 2, 1, 64, 0, 2, true, 900, 0, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 4.0f, true},
        {1, 1100, 200, 2, 2, 40, 1, 2, true, 0, 300, WF_DTYPE_F16, WF_DTYPE_BF16, WF_DTYPE_F32, WF_DTYPE_BF16, 1.0f, true},
        {2, 130, 600, 4, 2, 128, 1, 3, true, 470, 0, WF_DTYPE_BF16, WF_DTYPE_F16, WF_DTYPE_F16, WF_DTYPE_F16, 1.0f, true},
        {1, 300, 1030, 3, 1, 17, 0, 3, false, 0, 0, WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16, WF_DTYPE_F32, 8.0f, true},
        /* the AVX-512 tile path (D a multiple of 16): query
         * tiles of 120 rows with a padded last one (250 = 120 + 120 +
         * 10), key tiles of 256 with a last panel of 24 keys (600) or of
         * 8 (520), P V column blocks of 48, 64 + 16, 16 and 128 */
        {1, 250, 600, 2, 1, 48, 0, 2, false, 0, 0, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 4.0f, true},
        {1, 131, 520, 3, 3, 80, 1, 3, false, 0, 0, WF_DTYPE_F16, WF_DTYPE_F16, WF_DTYPE_BF16, WF_DTYPE_BF16, 1.0f, true},
        {2, 37, 300, 4, 2, 16, 0, 4, false, 0, 0, WF_DTYPE_BF16, WF_DTYPE_BF16, WF_DTYPE_BF16, WF_DTYPE_F32, 6.0f, false},
        {1, 260, 777, 2, 2, 128, 0, 2, false, 0, 0, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 8.0f, true},
        /* the same causal: the first 30 rows see no key (blocks that skip
         * a key tile, rows without a key beside rows with some), the
         * diagonal crossing key tiles and a padded last query tile */
        {1, 250, 600, 2, 1, 48, 0, 2, true, 0, 30, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 4.0f, true},
        {1, 260, 777, 2, 2, 128, 0, 2, true, 517, 0, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 8.0f, true},
        {2, 131, 520, 3, 3, 80, 1, 3, true, 389, 0, WF_DTYPE_F16, WF_DTYPE_F16, WF_DTYPE_BF16, WF_DTYPE_BF16, 1.0f, true},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++, ncases++)
        run_case(ops, ctx, &extra[i]);
    printf("attention: %d cases; worst out error / max|ref|: f32 %.3g, f16 %.3g, "
           "bf16 %.3g; worst lse error %.3g\n",
           ncases, worst_out_err[WF_DTYPE_F32], worst_out_err[WF_DTYPE_F16],
           worst_out_err[WF_DTYPE_BF16], worst_lse_err);
}

/* Explicit GQA mapping (gqa_group, q_head_base, kv_head_base): a rank that
 * holds query heads [a, b) and K/V heads [c, d) of a larger problem in
 * local buffers must get, bit for bit, what the global call computes for
 * those heads; a mapping that leaves the local K/V heads is refused. */
static void test_gqa_mapping(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx)
{
    enum { B = 2, S = 37, HQ = 6, HKV = 2, D = 8, G = HQ / HKV };
    size_t nq = (size_t)B * S * HQ * D, nkv = (size_t)B * S * HKV * D;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4);
    float *og = malloc(nq * 4), *lg = malloc((size_t)B * S * HQ * 4);
    float *ql = malloc(nq * 4), *kl = malloc(nkv * 4), *vl = malloc(nkv * 4);
    float *ol = malloc(nq * 4), *ll = malloc((size_t)B * S * HQ * 4);
    for (size_t i = 0; i < nq; i++)
        q[i] = rnd_unit();
    for (size_t i = 0; i < nkv; i++) {
        k[i] = rnd_unit();
        v[i] = rnd_unit();
    }
    wf_attn_params_t p = {
        .B = B, .Sq = S, .Skv = S, .Hq = HQ, .Hkv = HKV, .D = D, .h_begin = 0,
        .h_end = HQ, .scale = 0.3f, .causal = true, .q = q, .k = k, .v = v,
        .out = og, .lse = lg,
    };
    size_t wsb = ops->attention_workspace(&p);
    void *ws = aligned_alloc(64, wsb);
    CHECK(ops->attention(ctx, &p, ws) == WF_OK, "global call");
    /* slices [a, b) of query heads: across a K/V boundary, inside one K/V
     * head (replication: one local K/V head), and all of them */
    static const int64_t slices[][2] = {{2, 5}, {4, 5}, {3, 6}, {0, 6}, {1, 2}};
    for (size_t c = 0; c < sizeof slices / sizeof slices[0]; c++) {
        int64_t a = slices[c][0], bq = slices[c][1];
        int64_t ka = a / G, kb = (bq - 1) / G + 1, nh = bq - a, nk = kb - ka;
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < S; s++) {
                memcpy(ql + ((b * S + s) * nh) * D, q + ((b * S + s) * HQ + a) * D,
                       (size_t)(nh * D) * 4);
                memcpy(kl + ((b * S + s) * nk) * D, k + ((b * S + s) * HKV + ka) * D,
                       (size_t)(nk * D) * 4);
                memcpy(vl + ((b * S + s) * nk) * D, v + ((b * S + s) * HKV + ka) * D,
                       (size_t)(nk * D) * 4);
            }
        wf_attn_params_t l = p;
        l.Hq = nh;
        l.Hkv = nk;
        l.h_begin = 0;
        l.h_end = nh;
        l.q = ql;
        l.k = kl;
        l.v = vl;
        l.out = ol;
        l.lse = ll;
        l.gqa_group = G;
        l.q_head_base = a;
        l.kv_head_base = ka;
        CHECK(ops->attention_workspace(&l) <= wsb, "workspace");
        CHECK(ops->attention(ctx, &l, ws) == WF_OK, "local call [%lld,%lld)",
              (long long)a, (long long)bq);
        bool same = true;
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < S; s++) {
                same &= memcmp(ol + ((b * S + s) * nh) * D, og + ((b * S + s) * HQ + a) * D,
                               (size_t)(nh * D) * 4) == 0;
                same &= memcmp(ll + (b * S + s) * nh, lg + (b * S + s) * HQ + a,
                               (size_t)nh * 4) == 0;
            }
        CHECK(same, "mapped slice [%lld,%lld) differs from the global call",
              (long long)a, (long long)bq);
        /* the K/V head of the first query head is below the local ones */
        l.kv_head_base = ka + 1;
        CHECK(ops->attention(ctx, &l, ws) == WF_E_BAD_ARGUMENT, "mapping below 0 accepted");
        l.kv_head_base = ka;
        l.Hkv = nk - 1;
        if (nk > 1)
            CHECK(ops->attention(ctx, &l, ws) == WF_E_BAD_ARGUMENT, "mapping past Hkv accepted");
        l.Hkv = nk;
        l.gqa_group = -1;
        CHECK(ops->attention(ctx, &l, ws) == WF_E_BAD_ARGUMENT, "negative group accepted");
    }
    /* bases without a group are refused (they would be silently ignored) */
    wf_attn_params_t bad = p;
    bad.q_head_base = 1;
    CHECK(ops->attention(ctx, &bad, ws) == WF_E_BAD_ARGUMENT, "base without group");
    printf("gqa mapping: %zu slices bit-identical to the global call\n",
           sizeof slices / sizeof slices[0]);
    free(ws);
    free(q);
    free(k);
    free(v);
    free(og);
    free(lg);
    free(ql);
    free(kl);
    free(vl);
    free(ol);
    free(ll);
}

/* ---- contexts, validation, threads ------------------------------------------ */

typedef struct job {
    const wf_backend_ops_t *ops;
    wf_backend_ctx_t *ctx;
    wf_attn_params_t p;
    void *ws;
    wf_status_t st;
} job_t;

static void *job_run(void *arg)
{
    job_t *j = arg;
    j->st = j->ops->attention(j->ctx, &j->p, j->ws);
    return NULL;
}

/* Two contexts on two threads, each on half the heads, must give the
 * single-thread result bit for bit (no shared mutable state). */
static void test_threads(const wf_backend_ops_t *ops)
{
    wf_backend_ctx_t *ctx[2] = {NULL, NULL};
    CHECK(ops->ctx_new(0, 0, &ctx[0]) == WF_OK && ops->ctx_new(1, 0, &ctx[1]) == WF_OK,
          "ctx_new");
    enum { S = 700, H = 4, D = 64 };
    size_t n = (size_t)S * H * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4);
    float *o1 = malloc(n * 4), *o2 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        q[i] = rnd_unit();
        k[i] = rnd_unit();
        v[i] = rnd_unit();
    }
    wf_attn_params_t p = {
        .B = 1, .Sq = S, .Skv = S, .Hq = H, .Hkv = H, .D = D, .h_begin = 0,
        .h_end = H, .scale = 0.125f, .causal = true, .q = q, .q_dtype = WF_DTYPE_F32,
        .k = k, .k_dtype = WF_DTYPE_F32, .v = v, .v_dtype = WF_DTYPE_F32,
        .out = o1, .out_dtype = WF_DTYPE_F32,
    };
    size_t wsb = ops->attention_workspace(&p);
    void *ws[2] = {aligned_alloc(64, wsb), aligned_alloc(64, wsb)};
    CHECK(ops->attention(ctx[0], &p, ws[0]) == WF_OK, "single");
    job_t j[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        j[i] = (job_t){ops, ctx[i], p, ws[i], WF_E_INTERNAL};
        j[i].p.out = o2;
        j[i].p.h_begin = i * H / 2;
        j[i].p.h_end = (i + 1) * H / 2;
        pthread_create(&t[i], NULL, job_run, &j[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK(j[i].st == WF_OK, "thread %d: %d", i, (int)j[i].st);
    }
    CHECK(memcmp(o1, o2, n * 4) == 0, "two threads differ from one");
    for (int i = 0; i < 2; i++) {
        ops->ctx_destroy(&ctx[i]);
        CHECK(ctx[i] == NULL, "ctx_destroy must null the pointer");
        free(ws[i]);
    }
    ops->ctx_destroy(NULL);
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
}

static void test_contexts_and_validation(const wf_backend_ops_t *ops)
{
    CHECK(strcmp(ops->name, "cpu") == 0, "name %s", ops->name);
    wf_backend_ctx_t *ctx = NULL;
    uint64_t total = 0, avail = 0;
    CHECK(ops->ctx_new(0, 1u << 30, &ctx) == WF_OK, "ctx_new budget");
    ops->memory_info(ctx, &total, &avail);
    CHECK(total == 1u << 30 && avail == total, "memory_info %llu %llu",
          (unsigned long long)total, (unsigned long long)avail);
    ops->ctx_destroy(&ctx);
    CHECK(ops->ctx_new(0, 0, &ctx) == WF_OK, "ctx_new default");
    ops->memory_info(ctx, &total, &avail);
    CHECK(total > 0 && avail == total, "default budget %llu", (unsigned long long)total);

    float buf[64] = {0}, lse[4];
    float ws_buf[4096] __attribute__((aligned(64)));
    wf_attn_params_t good = {
        .B = 1, .Sq = 2, .Skv = 2, .Hq = 2, .Hkv = 1, .D = 4, .h_begin = 0,
        .h_end = 2, .scale = 0.5f, .q = buf, .k = buf, .v = buf, .out = buf + 32,
        .lse = lse,
    };
    CHECK(ops->attention_workspace(&good) <= sizeof ws_buf, "small workspace");
    CHECK(ops->attention(ctx, &good, ws_buf) == WF_OK, "good params");
    wf_attn_params_t bad = good;
    bad.Hkv = 3;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "Hkv must divide Hq");
    bad = good;
    bad.h_end = 3;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "h_end > Hq");
    bad = good;
    bad.D = 0;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "D = 0");
    bad = good;
    bad.out_dtype = (wf_dtype_t)7;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "bad dtype");
    /* ld_out: at least Hq D (8 here), a multiple of 8, not in merge mode */
    bad = good;
    bad.ld_out = 16;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_OK, "ld_out 16");
    bad.ld_out = 12;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "ld_out not a multiple of 8");
    bad.ld_out = 0;
    bad.D = 8;
    bad.ld_out = 8;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "ld_out < Hq D");
    bad = good;
    bad.ld_out = 8;
    bad.merge = true;
    CHECK(ops->attention(ctx, &bad, ws_buf) == WF_E_BAD_ARGUMENT, "ld_out in merge mode");
    bad = good;
    bad.Skv = INT64_MAX / 2;
    CHECK(ops->attention_workspace(&bad) == SIZE_MAX, "overflowing workspace size");

    /* flops: full and causal (visible elements only) */
    wf_attn_params_t f = good;
    f.Sq = f.Skv = 4;
    CHECK(wf_attention_flops(&f) == 4.0 * 2 * 16 * 4, "flops");
    f.causal = true;
    CHECK(wf_attention_flops(&f) == 4.0 * 2 * 10 * 4, "causal flops");
    ops->ctx_destroy(&ctx);
}

/* ---- non-finite inputs and extreme scales ------------------------------------ */

/* One attention (B = 1, Hq = 2, Hkv = 1) on the given f32 values stored in
 * dtype dt, against the fp64 reference on the stored values: where the
 * reference is NaN the kernel must be NaN (out and lse), where it is +-inf
 * the same inf, where it is finite within the grid's tolerances (lse
 * relative 1e-5: a huge scale multiplies the f32 max score's rounding);
 * a finite reference lse beyond the f32 range must come back +inf (its f32
 * rounding). Returns the number of reference NaN rows (out) through
 * *ret_nan_rows and of finite rows through *ret_fin_rows. */
static void nf_case(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx, const char *name,
                    int64_t Sq, int64_t Skv, int64_t D, float *q, float *k, float *v,
                    double scale, bool causal, wf_dtype_t dt, int *ret_nan_rows,
                    int *ret_fin_rows)
{
    const int64_t H = 2;
    size_t nq = (size_t)(Sq * H * D), nkv = (size_t)(Skv * D), nl = (size_t)(Sq * H);
    unsigned char *qb = malloc(nq * 4), *kb = malloc(nkv * 4), *vb = malloc(nkv * 4);
    wf_convert_from_f32(qb, dt, q, nq);
    wf_convert_from_f32(kb, dt, k, nkv);
    wf_convert_from_f32(vb, dt, v, nkv);
    wf_convert_to_f32(q, qb, dt, nq);
    wf_convert_to_f32(k, kb, dt, nkv);
    wf_convert_to_f32(v, vb, dt, nkv);
    float *o = malloc(nq * 4), *l = malloc(nl * 4);
    wf_attn_params_t p = {
        .B = 1, .Sq = Sq, .Skv = Skv, .Hq = H, .Hkv = 1, .D = D, .h_begin = 0, .h_end = H,
        .scale = (float)scale, .causal = causal, .q = qb, .q_dtype = dt, .k = kb,
        .k_dtype = dt, .v = vb, .v_dtype = dt, .out = o, .out_dtype = WF_DTYPE_F32, .lse = l,
    };
    void *ws = aligned_alloc(64, ops->attention_workspace(&p));
    CHECK(ops->attention(ctx, &p, ws) == WF_OK, "%s: attention failed", name);
    double *ro = malloc(nq * sizeof(double)), *rl = malloc(nl * sizeof(double));
    const wf_ref_attn_t ra = { .B = 1, .Sq = Sq, .Skv = Skv, .Hq = H, .Hkv = 1, .D = D,
                               .scale = (double)(float)scale, .causal = causal };
    CHECK(wf_ref_attention(&ra, q, k, v, ro, rl) == WF_OK, "%s: reference failed", name);
    int bad = 0, nan_rows = 0, fin_rows = 0;
    for (size_t r = 0; r < nl; r++) {
        double maxref = 0;
        bool any_nan = false, all_fin = true;
        for (int64_t d = 0; d < D; d++) {
            double x = ro[r * (size_t)D + (size_t)d];
            if (isfinite(x))
                maxref = fabs(x) > maxref ? fabs(x) : maxref;
            any_nan |= isnan(x);
            all_fin &= isfinite(x) != 0;
        }
        nan_rows += any_nan;
        fin_rows += all_fin;
        for (int64_t d = 0; d < D; d++) {
            double x = ro[r * (size_t)D + (size_t)d], g = o[r * (size_t)D + (size_t)d];
            bool ok = isnan(x)   ? isnan(g) != 0
                      : isinf(x) ? g == x
                                 : fabs(g - x) <= 2e-5 * maxref + 0x1p-24 * fabs(x) + 1e-30;
            if (!ok && bad++ < 4)
                CHECK(false, "%s: out[%zu][%lld] = %.9g, ref %.9g", name, r / (size_t)H,
                      (long long)d, g, x);
        }
        double x = rl[r], g = l[r];
        bool ok = isnan(x)           ? isnan(g) != 0
                  : isinf(x)         ? g == x
                  : fabs(x) > FLT_MAX ? g == (x > 0 ? INFINITY : -INFINITY)
                                     : fabs(g - x) <= 5e-5 + 1e-5 * fabs(x);
        if (!ok && bad++ < 4)
            CHECK(false, "%s: lse[%zu] = %.9g, ref %.9g", name, r, g, x);
    }
    if (ret_nan_rows)
        *ret_nan_rows = nan_rows;
    if (ret_fin_rows)
        *ret_fin_rows = fin_rows;
    free(ws);
    free(qb);
    free(kb);
    free(vb);
    free(o);
    free(l);
    free(ro);
    free(rl);
}

static void fill_rnd(float *x, size_t n, float amp)
{
    for (size_t i = 0; i < n; i++)
        x[i] = amp * rnd_unit();
}

static void test_nonfinite(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx)
{
    /* Skv 1100: the online softmax across key tiles (3 of 512 keys on the
     * cblas path, 5 of 256 on the tile path, which D = 16 takes on an
     * AVX-512 build) */
    enum { SQ = 40, SKV = 40, SKL = 1100, D = 16, H = 2 };
    float *q = malloc((size_t)SKL * H * D * 4), *k = malloc((size_t)SKL * D * 4),
          *v = malloc((size_t)SKL * D * 4);
    int nanr, finr;
    const float s0 = 0.25f;
#define FRESH(sq, skv)                                                                   \
    do {                                                                                 \
        fill_rnd(q, (size_t)(sq) * H * D, 1.0f);                                         \
        fill_rnd(k, (size_t)(skv) * D, 1.0f);                                            \
        fill_rnd(v, (size_t)(skv) * D, 1.0f);                                            \
    } while (0)

    /* NaN in q (row 7, head 1): that row NaN, every other row exact */
    for (int c = 0; c < 2; c++) {
        FRESH(SQ, SKV);
        q[(7 * H + 1) * D + 3] = NAN;
        nf_case(ops, ctx, c ? "nan q causal" : "nan q", SQ, SKV, D, q, k, v, s0, c, WF_DTYPE_F32,
                &nanr, &finr);
        CHECK(nanr == 1 && finr == SQ * H - 1, "nan q: %d NaN rows, %d finite", nanr, finr);
    }
    /* NaN in k (key 11): non-causal every row; causal the rows i >= 11 */
    FRESH(SQ, SKV);
    k[11 * D + 5] = NAN;
    nf_case(ops, ctx, "nan k causal", SQ, SKV, D, q, k, v, s0, true, WF_DTYPE_F32, &nanr, &finr);
    CHECK(nanr == (SQ - 11) * H && finr == 11 * H, "nan k causal: %d / %d", nanr, finr);
    nf_case(ops, ctx, "nan k", SQ, SKV, D, q, k, v, s0, false, WF_DTYPE_F16, &nanr, &finr);
    CHECK(nanr == SQ * H, "nan k: %d NaN rows", nanr);
    /* NaN in v (key 11, column 2): causal rows i >= 11 get NaN in column 2
     * only, lse finite; the rows before must not see it (the mask's
     * weight 0 times NaN) */
    FRESH(SQ, SKV);
    v[11 * D + 2] = NAN;
    nf_case(ops, ctx, "nan v causal", SQ, SKV, D, q, k, v, s0, true, WF_DTYPE_F32, &nanr, &finr);
    CHECK(nanr == (SQ - 11) * H && finr == 11 * H, "nan v causal: %d / %d", nanr, finr);
    v[11 * D + 2] = INFINITY;
    nf_case(ops, ctx, "inf v causal", SQ, SKV, D, q, k, v, s0, true, WF_DTYPE_F32, &nanr, &finr);
    CHECK(finr == 11 * H, "inf v causal: %d finite rows", finr);
    /* +inf in q: +-inf scores, the reference's inf - inf NaN */
    FRESH(SQ, SKV);
    q[(3 * H) * D] = INFINITY;
    nf_case(ops, ctx, "inf q", SQ, SKV, D, q, k, v, s0, false, WF_DTYPE_F32, &nanr, &finr);
    CHECK(nanr == 1 && finr == SQ * H - 1, "inf q: %d NaN rows, %d finite", nanr, finr);
    nf_case(ops, ctx, "inf q f16 causal", SQ, SKV, D, q, k, v, s0, true, WF_DTYPE_F16, &nanr,
            &finr);
    CHECK(nanr == 1 && finr == SQ * H - 1, "inf q causal: %d NaN rows, %d finite", nanr, finr);
    /* -inf scores across key tiles: row 0 (q = e0) sees -inf in the first
     * key tile only (k[j][0] = -inf for j < 512), finite after: the
     * reference weighs them 0 and is finite; rows with q[0] < 0 get +inf
     * scores (NaN), with q[0] > 0 -inf ones (finite) */
    FRESH(SQ, SKL);
    for (int d = 0; d < D; d++)
        q[d] = d == 0 ? 1.0f : 0.0f;
    for (int j = 0; j < 512; j++)
        k[j * D] = -INFINITY;
    nf_case(ops, ctx, "-inf first tile", SQ, SKL, D, q, k, v, s0, false, WF_DTYPE_F32, &nanr,
            &finr);
    CHECK(nanr > 0 && finr > 0, "-inf first tile: %d NaN rows, %d finite", nanr, finr);
    /* every key -inf for row 0 (and rows with q[0] > 0): weights sum to 0,
     * out 0/0 = NaN, lse log 0 = -inf */
    for (int j = 0; j < SKL; j++)
        k[j * D] = -INFINITY;
    nf_case(ops, ctx, "all -inf", SQ, SKL, D, q, k, v, s0, false, WF_DTYPE_F32, &nanr, &finr);
    CHECK(nanr > 0, "all -inf: no NaN row");
    /* NaN in a later key tile of a long row (the cblas path's second,
     * the tile path's third) */
    FRESH(SQ, SKL);
    k[700 * D + 1] = NAN;
    nf_case(ops, ctx, "nan k tile 2", SQ, SKL, D, q, k, v, s0, false, WF_DTYPE_F32, &nanr,
            &finr);
    CHECK(nanr == SQ * H, "nan k tile 2: %d NaN rows", nanr);

    /* +inf in a later key tile (key 700 of 1100: the tile path's third
     * key tile, the cblas path's second): the rows with q[0] > 0 score
     * +inf there and the tile is rerun in safe mode after earlier key
     * tiles ran; those rows NaN (inf - inf), the rows with q[0] < 0 see
     * -inf (weight 0) and stay finite */
    FRESH(SQ, SKL);
    k[700 * D] = INFINITY;
    nf_case(ops, ctx, "inf k tile 3", SQ, SKL, D, q, k, v, s0, false, WF_DTYPE_F32, &nanr,
            &finr);
    CHECK(nanr > 0 && finr > 0, "inf k tile 3: %d NaN rows, %d finite", nanr, finr);

    /* extreme scales: 3e38 (alpha = scale log2 e beyond f32: every score
     * would overflow), 1e30 (the scores overflow f32), 1e-38 and 1e-40
     * (alpha subnormal); f32 and f16 inputs, causal and not. The
     * reference is finite; its lse beyond f32 comes back +inf. */
    static const double scales[] = { 3e38, 1e30, 1e-38, 1e-40 };
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
        for (int c = 0; c < 2; c++) {
            char nm[64];
            snprintf(nm, sizeof nm, "scale %g%s", scales[si], c ? " causal" : "");
            FRESH(SQ, SKL);
            nf_case(ops, ctx, nm, SQ, SKL, D, q, k, v, scales[si], c,
                    c ? WF_DTYPE_F16 : WF_DTYPE_F32, &nanr, &finr);
            CHECK(nanr == 0 && finr == SQ * H, "%s: %d NaN rows, %d finite", nm, nanr, finr);
        }
#undef FRESH
    free(q);
    free(k);
    free(v);
    printf("non-finite inputs and extreme scales: checked against the reference\n");
}

/* The lse merge (tensor.h) with non-finite rows, then the kernel on two
 * halves of the keys merged against the reference on all of them: a half
 * whose visible scores are all -inf (out NaN, lse -inf) must give way to
 * the finite half; a NaN in either half makes the row NaN. */
static void test_merge_nonfinite(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx)
{
    enum { D2 = 3 };
    /* rows: acc (out, lse) + partial (out, lse) -> want */
    float ao[5][D2] = { {0, 0, 0}, {NAN, NAN, NAN}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3} };
    float al[5] = { -INFINITY, -INFINITY, 2.0f, 2.0f, 2.0f };
    float po[5][D2] = { {NAN, NAN, NAN}, {0, 0, 0}, {4, 5, 6}, {4, NAN, 6}, {NAN, NAN, NAN} };
    float pl[5] = { -INFINITY, -INFINITY, NAN, 1.0f, -INFINITY };
    wf_lse_merge_rows(&ao[0][0], al, &po[0][0], pl, 5, D2, WF_DTYPE_F32);
    CHECK(isnan(ao[0][0]) && al[0] == -INFINITY, "merge: 0,-inf + NaN,-inf: %g %g",
          (double)ao[0][0], (double)al[0]);
    CHECK(isnan(ao[1][2]) && al[1] == -INFINITY, "merge: NaN,-inf + 0,-inf lost the NaN");
    CHECK(isnan(ao[2][0]) && isnan(ao[2][2]) && isnan(al[2]), "merge: lse NaN not NaN");
    CHECK(isfinite(ao[3][0]) && isnan(ao[3][1]) && isfinite(ao[3][2]) && isfinite(al[3]),
          "merge: NaN column: %g %g %g lse %g", (double)ao[3][0], (double)ao[3][1],
          (double)ao[3][2], (double)al[3]);
    CHECK(ao[4][0] == 1 && ao[4][1] == 2 && ao[4][2] == 3 && al[4] == 2.0f,
          "merge: an all -inf partial changed a finite row");
    /* then a finite partial replaces the NaN of row 0 */
    float fo[D2] = { 7, 8, 9 }, fl = 0.5f;
    wf_lse_merge_rows(&ao[0][0], al, fo, &fl, 1, D2, WF_DTYPE_F32);
    CHECK(ao[0][0] == 7 && ao[0][2] == 9 && al[0] == 0.5f, "merge: finite after NaN,-inf");

    /* infinite elements, in each round dtype: a finite one merged with an
     * infinite one, or two equal infinities, give the infinity (inf in v
     * gives +-inf on every mesh, PROTOCOL.md section 8); +inf with -inf
     * is NaN; a finite pair merges as a - w (a - p), within the round
     * dtype's unit roundoff */
    static const wf_dtype_t rdts[] = { WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16 };
    for (int r = 0; r < 3; r++) {
        enum { DI = 6 };
        const float a0[DI] = { INFINITY, 0.5f, -INFINITY, INFINITY, INFINITY, 0.75f };
        const float ip[DI] = { 0.5f, INFINITY, -INFINITY, INFINITY, -INFINITY, -0.5f };
        const float want[DI - 1] = { INFINITY, INFINITY, -INFINITY, INFINITY, NAN };
        float ia[DI], ial = 1.0f, ipl = 0.5f;
        memcpy(ia, a0, sizeof ia);
        const float w = 1.0f / (1.0f + expf(ial - ipl));
        const float fin = wf_round_to_dtype(a0[DI - 1] - w * (a0[DI - 1] - ip[DI - 1]), rdts[r]);
        wf_lse_merge_rows(ia, &ial, ip, &ipl, 1, DI, rdts[r]);
        for (int d = 0; d < DI - 1; d++)
            CHECK(isnan(want[d]) ? isnan(ia[d]) != 0 : ia[d] == want[d],
                  "merge round %d: %g with %g gave %g, want %g", (int)rdts[r], (double)a0[d],
                  (double)ip[d], (double)ia[d], (double)want[d]);
        const double eps = rdts[r] == WF_DTYPE_BF16  ? 0x1p-8
                           : rdts[r] == WF_DTYPE_F16 ? 0x1p-11
                                                     : 0x1p-23;
        CHECK(fabs((double)ia[DI - 1] - fin) <= eps * fabs(fin) && isfinite(ial),
              "merge round %d: finite pair %.9g, want %.9g", (int)rdts[r], (double)ia[DI - 1],
              (double)fin);
    }

    /* kernel on halves, merged */
    enum { SQ = 24, SKV = 64, D = 8, H = 2, HALF = SKV / 2 };
    float *q = malloc((size_t)SQ * H * D * 4), *k = malloc((size_t)SKV * D * 4),
          *v = malloc((size_t)SKV * D * 4);
    float *o = malloc((size_t)SQ * H * D * 4), *l = malloc((size_t)SQ * H * 4);
    float *o2 = malloc((size_t)SQ * H * D * 4), *l2 = malloc((size_t)SQ * H * 4);
    double *ro = malloc((size_t)SQ * H * D * 8), *rl = malloc((size_t)SQ * H * 8);
    for (int c = 0; c < 3; c++) {
        fill_rnd(q, (size_t)SQ * H * D, 1.0f);
        fill_rnd(k, (size_t)SKV * D, 1.0f);
        fill_rnd(v, (size_t)SKV * D, 1.0f);
        for (int i = 0; i < SQ * H; i++)
            q[i * D] = i % 2 ? 1.0f : 0.5f; /* q[0] > 0 everywhere */
        if (c == 0) /* first half -inf: every row finite in the end */
            for (int j = 0; j < HALF; j++)
                k[j * D] = -INFINITY;
        if (c == 1) /* every key -inf: NaN, -inf */
            for (int j = 0; j < SKV; j++)
                k[j * D] = -INFINITY;
        if (c == 2) /* a NaN in the second half: every row NaN */
            k[(HALF + 3) * D + 2] = NAN;
        wf_attn_params_t p = {
            .B = 1, .Sq = SQ, .Skv = HALF, .Hq = H, .Hkv = 1, .D = D, .h_begin = 0,
            .h_end = H, .scale = 0.3f, .q = q, .k = k, .v = v, .out = o, .lse = l,
        };
        void *ws = aligned_alloc(64, ops->attention_workspace(&p));
        CHECK(ops->attention(ctx, &p, ws) == WF_OK, "half 1");
        p.k = k + HALF * D;
        p.v = v + HALF * D;
        p.out = o2;
        p.lse = l2;
        CHECK(ops->attention(ctx, &p, ws) == WF_OK, "half 2");
        free(ws);
        wf_lse_merge_rows(o, l, o2, l2, SQ * H, D, WF_DTYPE_F32);
        const wf_ref_attn_t ra = { .B = 1, .Sq = SQ, .Skv = SKV, .Hq = H, .Hkv = 1, .D = D,
                                   .scale = (double)0.3f };
        CHECK(wf_ref_attention(&ra, q, k, v, ro, rl) == WF_OK, "reference");
        int bad = 0;
        for (int r = 0; r < SQ * H; r++) {
            for (int d = 0; d < D; d++) {
                double x = ro[r * D + d], g = o[r * D + d];
                bool ok = isnan(x) ? isnan(g) != 0 : fabs(g - x) <= 1e-5;
                if (!ok && bad++ < 3)
                    CHECK(false, "merged halves case %d: out[%d][%d] = %g, ref %g", c, r, d, g,
                          x);
            }
            double x = rl[r], g = l[r];
            bool ok = isnan(x) ? isnan(g) != 0 : isinf(x) ? g == x : fabs(g - x) <= 1e-4;
            if (!ok && bad++ < 3)
                CHECK(false, "merged halves case %d: lse[%d] = %g, ref %g", c, r, g, x);
        }
        /* the cases mean what they say */
        CHECK(c == 0 ? isfinite(ro[0]) && isfinite(rl[0])
                     : c == 1 ? isnan(ro[0]) && rl[0] == -INFINITY : isnan(ro[0]) && isnan(rl[0]),
              "merged halves case %d: reference row 0 = %g, lse %g", c, ro[0], rl[0]);
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(l);
    free(o2);
    free(l2);
    free(ro);
    free(rl);
    printf("lse merge: non-finite rows, infinite elements and halves merged as the "
           "reference\n");
}

/* The BLAS kernel check: a sentence either way, naming the fix when it
 * finds the library below the CPU, and answering alike twice. */
static void test_blas_check(void)
{
    char a[320], b[320];
    bool ok = wf_cpu_blas_check(a, sizeof a);
    CHECK(a[0] != '\0', "blas check: empty message");
    CHECK(ok ? strstr(a, "OpenBLAS kernels: ") == a : strstr(a, "OPENBLAS_CORETYPE=") != NULL,
          "blas check (%d): '%s'", (int)ok, a);
    CHECK(wf_cpu_blas_check(b, sizeof b) == ok && strcmp(a, b) == 0, "blas check twice");
    CHECK(wf_cpu_blas_check(NULL, 0) == ok, "blas check without a message");
    printf("blas: %s\n", a);
}

int main(void)
{
    const wf_backend_ops_t *ops = wf_backend_cpu();
    test_blas_check();
    test_f16_exhaustive();
    test_rounding();
    test_exp2();
    test_contexts_and_validation(ops);
    wf_backend_ctx_t *ctx = NULL;
    if (ops->ctx_new(0, 0, &ctx) != WF_OK) {
        fprintf(stderr, "ctx_new failed\n");
        return 1;
    }
    test_attention_grid(ops, ctx);
    test_gqa_mapping(ops, ctx);
    test_nonfinite(ops, ctx);
    test_merge_nonfinite(ops, ctx);
    ops->ctx_destroy(&ctx);
    test_threads(ops);
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
