/* test_fp8.c — the host side of fp8 attention, without
 * a daemon:
 *  - kernels/fp8.h: every one of the 256 e4m3 codes decodes and encodes
 *    back (NaN codes to NaN); e4m3_from_f32 equals an independent
 *    brute-force rounding (nearest finite code by exact distance, ties to
 *    the even code, |x| >= 448 saturating, NaN / inf to NaN) on the edge
 *    values (zeros, subnormals, the ties between neighbouring codes and
 *    one f32 ulp either side, 448 and around it, the f32 extremes) and on
 *    2^20 random floats (random bit patterns and log-uniform magnitudes);
 *    the scales (amax 0: 1 and 1);
 *  - reference.h: wf_ref_fp8_qdq per (batch, head) (independent heads,
 *    the head's largest finite element exact up to the scale's rounding,
 *    relative error <= 2^-4 in e4m3's normal range, inf / NaN to NaN with
 *    the amax over finite elements, an all-zero head, bf16 input read in
 *    bf16) and wf_ref_attention_fp8 = wf_ref_attention on the
 *    dequantized values;
 *  - proto: args.precision of attention and forward (fp8 encoded only
 *    when set, decoded back; "default" and absent are false; another str
 *    or another type is WF_E_BAD_FIELD naming args.precision); the
 *    feature name "fp8"; the "fp8" keys of the cluster hello, job and
 *    fjob (absent when false).
 * usage: test_fp8
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_msg.h"
#include "fp8.h"
#include "proto.h"
#include "reference.h"
#include "support/check.h"
#include "tensor.h"

/* ---- fp8.h -------------------------------------------------------------- */

/* Value of code c (0..0x7E, no sign) computed from the format's
 * definition, not from fp8.h: subnormal m * 2^-9, normal (8 + m) * 2^(e-10). */
static double code_value(unsigned c)
{
    unsigned e = (c >> 3) & 15, m = c & 7;
    return e == 0 ? ldexp((double)m, -9) : ldexp((double)(8 + m), (int)e - 10);
}

/* The brute-force rounding: the nearest of the 127 finite magnitudes by
 * exact (double) distance, ties to the even code; saturating at 448;
 * NaN / inf to NaN (0x7F with the sign). */
static uint8_t brute_e4m3(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (!isfinite(x))
        return (uint8_t)(sign | 0x7F);
    double a = fabs((double)x);
    if (a >= 448.0)
        return (uint8_t)(sign | 0x7E);
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c <= 0x7E; c++) {
        double d = fabs(a - code_value(c));
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(sign | best);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int rounding_fails;
static void check_round(float x)
{
    uint8_t got = wf_fp8_e4m3_from_f32(x), want = brute_e4m3(x);
    if (got != want && rounding_fails++ < 10)
        CHECK(false, "e4m3_from_f32(%a) = 0x%02x, brute force 0x%02x", (double)x, got, want);
    else
        passed++;
}

static void test_codes(void)
{
    for (unsigned c = 0; c < 256; c++) {
        float v = wf_fp8_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7F) == 0x7F) {
            CHECK(isnan(v), "code 0x%02x decodes to %g, not NaN", c, (double)v);
            CHECK((wf_fp8_e4m3_from_f32(v) & 0x7F) == 0x7F, "NaN code 0x%02x", c);
            continue;
        }
        double want = code_value(c & 0x7F) * ((c & 0x80) ? -1.0 : 1.0);
        CHECK((double)v == want && !!signbit(v) == !!(c & 0x80),
              "code 0x%02x decodes to %a, want %a", c, (double)v, want);
        CHECK(wf_fp8_e4m3_from_f32(v) == c, "code 0x%02x: round trip gives 0x%02x", c,
              wf_fp8_e4m3_from_f32(v));
    }
    CHECK(wf_fp8_e4m3_to_f32(0x7E) == 448.0f && wf_fp8_e4m3_to_f32(0x01) == 0x1p-9f,
          "448 / 2^-9");
}

static void test_rounding(void)
{
    /* the edges: zeros, the ties between neighbouring codes (and one f32
     * ulp either side), around 448, non-finite, f32 extremes */
    const float fixed[] = { 0.0f, -0.0f, 0x1p-10f, 0x1.8p-9f, 0x1p-11f, 0x1.0p-149f,
                            -0x1p-10f, 3 * 0x1p-10f, 0x1p-6f, 0x1.ep-7f, 448.0f, 449.0f,
                            464.0f, 447.99f, 432.0f, 431.99f, 432.01f, 1e30f, -1e30f,
                            INFINITY, -INFINITY, NAN, -NAN, 0x1.fffffep127f,
                            -0x1.fffffep127f, 1.0f, 1.0625f, 1.0625001f, 1.1875f };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_round(fixed[i]);
    for (unsigned c = 0; c < 0x7E; c++) {
        double lo = code_value(c), hi = code_value(c + 1);
        float mid = (float)((lo + hi) / 2); /* exact in f32 */
        CHECK((double)mid == (lo + hi) / 2, "midpoint of 0x%02x not exact", c);
        check_round(mid);
        check_round(nextafterf(mid, 0.0f));
        check_round(nextafterf(mid, INFINITY));
        check_round(-mid);
        check_round((float)lo);
    }
    /* every f32 exponent near e4m3's range, random mantissas */
    for (int n = 0; n < (1 << 19); n++) {
        uint32_t u = (uint32_t)next_u64();
        float x;
        memcpy(&x, &u, sizeof x);
        check_round(x);
        double mag = ldexp(1.0, -14 + (int)(next_u64() % 25)) *
                     (1.0 + (double)(next_u64() >> 11) * 0x1p-53);
        x = (float)((next_u64() & 1) ? -mag : mag);
        check_round(x);
    }
    CHECK(rounding_fails == 0, "%d roundings differ from the brute force", rounding_fails);
}

static void test_scales(void)
{
    CHECK(wf_fp8_quant_factor(0.0f) == 1.0f && wf_fp8_scale(0.0f) == 1.0f, "amax 0");
    CHECK(wf_fp8_quant_factor(448.0f) == 1.0f && wf_fp8_scale(448.0f) == 1.0f, "amax 448");
    CHECK(wf_fp8_quant_factor(1.0f) == 448.0f && wf_fp8_scale(1.0f) == 1.0f / 448.0f,
          "amax 1");
    CHECK(fabsf(wf_fp8_quant_factor(3.5f) * wf_fp8_scale(3.5f) - 1.0f) < 1e-6f,
          "factor * scale = 1");
}

/* ---- reference.h ------------------------------------------------------- */

static void test_qdq(void)
{
    enum { B = 2, S = 9, H = 3, D = 16 };
    const size_t n = (size_t)B * S * H * D;
    float *x = malloc(n * sizeof *x);
    double *q = malloc(n * sizeof *q), sc[B * H];
    uint16_t *xb = malloc(n * sizeof *xb);
    if (!x || !q || !xb) {
        CHECK(false, "out of memory");
        goto out;
    }
    /* head (b, h) has magnitude 10^(h - 1) * (b + 1); head (1, 2) is all
     * zero; head (0, 1) holds an inf and a NaN */
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    size_t i = (size_t)(((b * S + s) * H + h) * D + d);
                    float u = (float)((double)(next_u64() >> 11) * 0x1p-53 * 2 - 1);
                    x[i] = (b == 1 && h == 2) ? 0.0f : u * powf(10.0f, (float)h - 1) * (float)(b + 1);
                }
    size_t i_inf = (size_t)(((0 * S + 3) * H + 1) * D + 5);
    size_t i_nan = (size_t)(((0 * S + 4) * H + 1) * D + 7);
    x[i_inf] = INFINITY;
    x[i_nan] = NAN;
    CHECK(wf_ref_fp8_qdq(x, WF_DTYPE_F32, B, S, H, D, q, sc) == WF_OK, "qdq f32");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            float amax = 0;
            for (int s = 0; s < S; s++)
                for (int d = 0; d < D; d++) {
                    float a = fabsf(x[(((b * S + s) * H + h) * D + d)]);
                    if (isfinite(a) && a > amax)
                        amax = a;
                }
            CHECK(sc[b * H + h] == (double)wf_fp8_scale(amax), "scale (%d, %d)", b, h);
            int bad = 0, hit_amax = 0;
            for (int s = 0; s < S; s++)
                for (int d = 0; d < D; d++) {
                    size_t i = (size_t)(((b * S + s) * H + h) * D + d);
                    if (i == i_inf || i == i_nan) {
                        bad += !isnan(q[i]);
                        continue;
                    }
                    double e = fabs(q[i] - (double)x[i]);
                    if (fabsf(x[i]) == amax && amax > 0) {
                        hit_amax = 1;
                        bad += e > (double)amax * 0x1p-20;
                    }
                    /* e4m3's normal range: x * factor >= 2^-6 */
                    if (fabsf(x[i]) * wf_fp8_quant_factor(amax) >= 0x1p-6f)
                        bad += e > fabs((double)x[i]) * 0x1p-4 * (1 + 1e-6);
                    else
                        bad += e > (double)wf_fp8_scale(amax) * 0x1p-10 * (1 + 1e-6);
                }
            CHECK(bad == 0, "head (%d, %d): %d elements off", b, h, bad);
            CHECK(amax == 0 || hit_amax, "head (%d, %d): amax not seen", b, h);
            if (amax == 0)
                CHECK(sc[b * H + h] == 1.0, "zero head scale %g", sc[b * H + h]);
        }
    /* bf16 input: the bf16 values are quantized */
    wf_convert_from_f32(xb, WF_DTYPE_BF16, x, n);
    double *qb = malloc(n * sizeof *qb);
    float *xr = malloc(n * sizeof *xr);
    double *qr = malloc(n * sizeof *qr);
    if (qb && xr && qr) {
        wf_convert_to_f32(xr, xb, WF_DTYPE_BF16, n);
        CHECK(wf_ref_fp8_qdq(xb, WF_DTYPE_BF16, B, S, H, D, qb, NULL) == WF_OK, "qdq bf16");
        CHECK(wf_ref_fp8_qdq(xr, WF_DTYPE_F32, B, S, H, D, qr, NULL) == WF_OK, "qdq f32");
        int diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += !(qb[i] == qr[i] || (isnan(qb[i]) && isnan(qr[i])));
        CHECK(diff == 0, "bf16 qdq differs from the f32 qdq of its values (%d)", diff);
    }
    free(qb);
    free(xr);
    free(qr);
    CHECK(wf_ref_fp8_qdq(x, WF_DTYPE_F32, 0, S, H, D, q, NULL) == WF_E_BAD_ARGUMENT, "B 0");
out:
    free(x);
    free(q);
    free(xb);
}

static void test_ref_attention(void)
{
    const wf_ref_attn_t a = { .B = 1, .Sq = 7, .Skv = 11, .Hq = 4, .Hkv = 2, .D = 8,
                              .scale = 0.35, .causal = true };
    size_t nq = 7 * 4 * 8, nk = 11 * 2 * 8;
    float q[7 * 4 * 8], k[11 * 2 * 8], v[11 * 2 * 8], fq[7 * 4 * 8], fk[11 * 2 * 8],
        fv[11 * 2 * 8];
    double dq[7 * 4 * 8], dk[11 * 2 * 8], dv[11 * 2 * 8];
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)((double)(next_u64() >> 11) * 0x1p-53 * 4 - 2);
    for (size_t i = 0; i < nk; i++) {
        k[i] = (float)((double)(next_u64() >> 11) * 0x1p-53 * 4 - 2);
        v[i] = (float)((double)(next_u64() >> 11) * 0x1p-53 * 2 - 1);
    }
    wf_ref_fp8_qdq(q, WF_DTYPE_F32, 1, 7, 4, 8, dq, NULL);
    wf_ref_fp8_qdq(k, WF_DTYPE_F32, 1, 11, 2, 8, dk, NULL);
    wf_ref_fp8_qdq(v, WF_DTYPE_F32, 1, 11, 2, 8, dv, NULL);
    /* the dequantized values are e4m3 times an f32 scale: f32 exact? not
     * always (4 + 24 significant bits); compare with a f32-rounding slack */
    for (size_t i = 0; i < nq; i++)
        fq[i] = (float)dq[i];
    for (size_t i = 0; i < nk; i++) {
        fk[i] = (float)dk[i];
        fv[i] = (float)dv[i];
    }
    double o8[7 * 4 * 8], l8[7 * 4], o[7 * 4 * 8], l[7 * 4], o0[7 * 4 * 8];
    CHECK(wf_ref_attention_fp8(&a, q, WF_DTYPE_F32, k, WF_DTYPE_F32, v, WF_DTYPE_F32, o8,
                               l8) == WF_OK, "fp8 reference");
    CHECK(wf_ref_attention(&a, fq, fk, fv, o, l) == WF_OK, "reference on qdq values");
    CHECK(wf_ref_attention(&a, q, k, v, o0, NULL) == WF_OK, "reference");
    double e = 0, e0 = 0, el = 0;
    for (size_t i = 0; i < nq; i++) {
        e = fmax(e, fabs(o8[i] - o[i]));
        e0 = fmax(e0, fabs(o8[i] - o0[i]));
    }
    for (size_t i = 0; i < 7 * 4; i++)
        el = fmax(el, fabs(l8[i] - l[i]));
    CHECK(e < 1e-6 && el < 1e-6, "fp8 reference vs reference on dequantized: %g %g", e, el);
    CHECK(e0 > 1e-3, "fp8 reference equals the exact one (%g): nothing quantized?", e0);
    printf("fp8 reference: vs exact inputs max |d out| %.3g\n", e0);
}

/* ---- proto -------------------------------------------------------------- */

static void desc(wf_tensor_desc_t *d, const char *name, int rank, const int64_t *shape,
                 uint32_t frame)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->dtype = WF_DTYPE_F32;
    d->rank = rank;
    memcpy(d->shape, shape, (size_t)rank * sizeof *shape);
    d->frame = frame;
    d->numel = 1;
    for (int i = 0; i < rank; i++)
        d->numel *= (uint64_t)shape[i];
    d->nbytes = d->numel * 4;
}

static wf_request_t req_attention(bool fp8)
{
    wf_request_t r;
    memset(&r, 0, sizeof r);
    r.id = 7;
    r.op = WF_OP_ATTENTION;
    r.n_tensors = 3;
    const int64_t s[4] = { 1, 4, 2, 8 };
    desc(&r.tensors[0], "q", 4, s, 0);
    desc(&r.tensors[1], "k", 4, s, 1);
    desc(&r.tensors[2], "v", 4, s, 2);
    r.args.attention = (wf_attention_args_t){ .q = 0, .k = 1, .v = 2, .fp8 = fp8 };
    return r;
}

static wf_request_t req_forward(bool fp8)
{
    wf_request_t r;
    memset(&r, 0, sizeof r);
    r.id = 8;
    r.op = WF_OP_FORWARD;
    r.n_tensors = 6;
    const int64_t hs[3] = { 1, 4, 16 }, enc[3] = { 1, 2, 8 }, pool[2] = { 1, 8 },
                  t[1] = { 1 }, img[2] = { 4, 3 }, txt[2] = { 2, 3 };
    desc(&r.tensors[0], "hidden_states", 3, hs, 0);
    desc(&r.tensors[1], "encoder_hidden_states", 3, enc, 1);
    desc(&r.tensors[2], "pooled_projections", 2, pool, 2);
    desc(&r.tensors[3], "timestep", 1, t, 3);
    desc(&r.tensors[4], "img_ids", 2, img, 4);
    desc(&r.tensors[5], "txt_ids", 2, txt, 5);
    wf_forward_args_t *a = &r.args.forward;
    snprintf(a->model, sizeof a->model, "flux");
    a->fp8 = fp8;
    return r;
}

/* The bytes of `b` with the first `from` (len n) replaced by `to` (len m). */
static size_t splice(const wf_buf_t *b, const char *from, size_t n, const char *to,
                     size_t m, char *out, size_t cap)
{
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->data + i, from, n) == 0 && b->len - n + m <= cap) {
            memcpy(out, b->data, i);
            memcpy(out + i, to, m);
            memcpy(out + i + m, b->data + i + n, b->len - i - n);
            return b->len - n + m;
        }
    return 0;
}

static bool req_fp8(const wf_request_t *r)
{
    return r->op == WF_OP_FORWARD ? r->args.forward.fp8 : r->args.attention.fp8;
}

static void test_proto_precision(bool fwd)
{
    const char *op = fwd ? "forward" : "attention";
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t b0 = { 0 }, b1 = { 0 };
    wf_request_t r0 = fwd ? req_forward(false) : req_attention(false);
    wf_request_t r1 = fwd ? req_forward(true) : req_attention(true);
    CHECK(wf_request_encode(&r0, &b0) == WF_OK && wf_request_encode(&r1, &b1) == WF_OK,
          "%s: encode", op);
    CHECK(memmem(b0.data, b0.len, "precision", 9) == NULL,
          "%s: precision sent without fp8", op);
    CHECK(memmem(b1.data, b1.len, "\xa9precision\xa3" "fp8", 14) != NULL,
          "%s: precision \"fp8\" not sent", op);
    wf_request_t d;
    char err[WF_PROTO_ERROR_MAX];
    CHECK(wf_request_decode(b1.data, b1.len, &lim, &d, err, sizeof err) == WF_OK &&
          req_fp8(&d), "%s: fp8 decodes (%s)", op, err);
    CHECK(wf_request_decode(b0.data, b0.len, &lim, &d, err, sizeof err) == WF_OK &&
          !req_fp8(&d), "%s: absent decodes as default (%s)", op, err);
    static const struct {
        const char *to;
        size_t m;
        wf_status_t want;
        const char *msg;
    } cases[] = {
        { "\xa7" "default", 8, WF_OK, NULL },
        { "\xa3" "fp9", 4, WF_E_BAD_FIELD, "args.precision: unknown precision \"fp9\"" },
        { "\xa4" "FP8 ", 5, WF_E_BAD_FIELD, "args.precision: unknown precision" },
        { "\xa0", 1, WF_E_BAD_FIELD, "args.precision: unknown precision" },
        { "\x93\x01\x02\x03", 4, WF_E_BAD_FIELD, "args.precision: must be a str, got array" },
        { "\xc3", 1, WF_E_BAD_FIELD, "args.precision: must be a str, got bool" },
        { "\x08", 1, WF_E_BAD_FIELD, "args.precision: must be a str" },
        { "\xc0", 1, WF_E_BAD_FIELD, "args.precision: must be a str" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[4096];
        size_t n = splice(&b1, "\xa3" "fp8", 4, cases[i].to, cases[i].m, buf, sizeof buf);
        CHECK(n > 0, "%s: splice %zu", op, i);
        err[0] = '\0';
        wf_status_t st = wf_request_decode(buf, n, &lim, &d, err, sizeof err);
        CHECK(st == cases[i].want, "%s case %zu: %s (%s)", op, i, wf_status_name(st), err);
        if (cases[i].want == WF_OK)
            CHECK(!req_fp8(&d), "%s: \"default\" decodes as fp8", op);
        if (cases[i].msg)
            CHECK(strstr(err, cases[i].msg) != NULL, "%s case %zu: message \"%s\"", op, i,
                  err);
    }
    wf_buf_free(&b0);
    wf_buf_free(&b1);
}

static void test_features(void)
{
    CHECK(wf_feature_bit("fp8", 3) == WF_FEATURE_FP8, "feature bit of fp8");
    bool named = false;
    for (unsigned i = 0; i < WF_FEATURES_COUNT; i++)
        named |= strcmp(wf_feature_name(i), "fp8") == 0;
    CHECK(named && (WF_FEATURES_ALL & WF_FEATURE_FP8), "weftd announces fp8");
    CHECK(wf_status_on_wire(WF_E_UNSUPPORTED) == WF_E_UNSUPPORTED &&
          strcmp(wf_status_name(WF_E_UNSUPPORTED), "WF_E_UNSUPPORTED") == 0 &&
          WF_E_UNSUPPORTED == 29, "status 29 on the wire");
}

/* The cluster messages' fp8 keys: sent when true only, read back. */
static void test_cluster_keys(void)
{
    static wf_cmsg_t m, back;
    static wf_ctl_msg_t cm;
    char err[WF_PROTO_ERROR_MAX];
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        memset(&m, 0, sizeof m);
        m.type = WF_CMSG_HELLO;
        m.u.hello.proto = 1;
        snprintf(m.u.hello.name, sizeof m.u.hello.name, "n1");
        m.u.hello.devices = 2;
        snprintf(m.u.hello.data, sizeof m.u.hello.data, "tcp://127.0.0.1:5000,5001");
        m.u.hello.fp8 = fp8;
        wf_ctl_init(&cm);
        CHECK(wf_cmsg_put(&cm, &m) == WF_OK, "hello put");
        CHECK(wf_cmsg_get(&cm, &back, err, sizeof err) == WF_OK &&
              back.u.hello.fp8 == (bool)fp8, "hello fp8 %d read back (%s)", fp8, err);
        bool has = false;
        for (uint32_t i = 0; i < cm.n; i++)
            has |= strcmp(cm.f[i].key, "fp8") == 0;
        CHECK(has == (bool)fp8, "hello: key fp8 present %d with fp8 %d", has, fp8);

        memset(&m, 0, sizeof m);
        m.type = WF_CMSG_JOB;
        wf_cjob_t *j = &m.u.job;
        j->seq = 1;
        j->g = 1;
        j->B = j->Sq = j->Hq = j->D = j->Skv = j->Hkv = 1;
        j->scale = 1.0f;
        j->fp8 = fp8;
        wf_ctl_init(&cm);
        CHECK(wf_cmsg_put(&cm, &m) == WF_OK, "job put");
        CHECK(wf_cmsg_get(&cm, &back, err, sizeof err) == WF_OK &&
              back.u.job.fp8 == (bool)fp8, "job fp8 %d read back (%s)", fp8, err);

        memset(&m, 0, sizeof m);
        m.type = WF_CMSG_FJOB;
        wf_cfjob_t *f = &m.u.fjob;
        f->g = 1;
        f->lid = 1;
        snprintf(f->t[0].name, sizeof f->t[0].name, "hidden_states");
        f->t[0].shape[0] = 1;
        f->fp8 = fp8;
        wf_ctl_init(&cm);
        CHECK(wf_cmsg_put(&cm, &m) == WF_OK, "fjob put");
        CHECK(wf_cmsg_get(&cm, &back, err, sizeof err) == WF_OK &&
              back.u.fjob.fp8 == (bool)fp8, "fjob fp8 %d read back (%s)", fp8, err);
    }
}

int main(void)
{
    test_codes();
    test_rounding();
    test_scales();
    test_qdq();
    test_ref_attention();
    test_proto_precision(false);
    test_proto_precision(true);
    test_features();
    test_cluster_keys();
    printf("test_fp8: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
