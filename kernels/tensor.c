/* tensor.c — f32 <-> f16 / bf16 element conversions (see tensor.h).
 *
 * Scalar conversions are written out by hand with round-to-nearest-even,
 * NaN (kept NaN, quieted, sign and top payload bits kept), infinities,
 * subnormals and overflow (to infinity). Bulk conversions use F16C when
 * the compiler targets it (its rounding and NaN handling match the scalar
 * code bit for bit, which the test checks) and the scalar code otherwise.
 * Every load from a source buffer goes through memcpy: sources come from
 * ZeroMQ frames at arbitrary alignment.
 *
 * Not here: any allocation, logging, or knowledge of tensor shapes.
 */
#include "tensor.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float wf_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t wf_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    /* NaN: truncating could turn a NaN whose payload sits in the low 16
     * bits into infinity, so keep the top bits and force the quiet bit. */
    uint32_t nan = (uint32_t)((u >> 16) | 0x0040u);
    /* Round to nearest even: add 0x7fff plus the lowest kept bit; a carry
     * into the exponent is the correct rounding, up to infinity. */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* Branch-free select so the bulk loop vectorises. */
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : rounded);
}

float wf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in f32 */
        float mag = (float)mant * 0x1p-24f;
        return bits_f32(f32_bits(mag) | sign);
    }
    if (exp == 31) {
        /* inf, or NaN quieted (as F16C does) with its payload kept */
        uint32_t quiet = mant ? 0x00400000u : 0u;
        return bits_f32(sign | 0x7f800000u | (mant << 13) | quiet);
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t wf_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity (or is inf) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        /* normal f16: rebias the exponent (127 -> 15) and round the 13
         * dropped bits to nearest even; a carry into the exponent is the
         * correct result. */
        uint32_t r = (a >> 13) - (112u << 10);
        uint32_t rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 is a tie to 0) */
        return (uint16_t)sign;
    /* subnormal f16: units of 2^-24; value = m * 2^(e - 150) */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

/* ---- bulk conversions ---------------------------------------------------- */

static void f16_to_f32_n(float *dst, const unsigned char *src, size_t n)
{
    size_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = wf_f16_to_f32(h);
    }
}

static void f32_to_f16_n(unsigned char *dst, const float *src, size_t n)
{
    size_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), h);
    }
#endif
    for (; i < n; i++) {
        uint16_t h = wf_f32_to_f16(src[i]);
        memcpy(dst + 2 * i, &h, sizeof h);
    }
}

/* bf16 loops work on 16-element blocks of integers and move them with one
 * memcpy each way: written per element (through wf_f32_to_bf16), GCC does
 * not vectorise them. */
enum { BLOCK = 16 };

static void bf16_to_f32_n(float *dst, const unsigned char *src, size_t n)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint16_t h[BLOCK];
        uint32_t u[BLOCK];
        memcpy(h, src + 2 * i, sizeof h);
        for (int t = 0; t < BLOCK; t++)
            u[t] = (uint32_t)h[t] << 16;
        memcpy(dst + i, u, sizeof u);
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = wf_bf16_to_f32(h);
    }
}

static void f32_to_bf16_n(unsigned char *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t u[BLOCK];
        uint16_t h[BLOCK];
        memcpy(u, src + i, sizeof u);
        for (int t = 0; t < BLOCK; t++) {
            /* same arithmetic as wf_f32_to_bf16 */
            uint32_t nan = (u[t] >> 16) | 0x0040u;
            uint32_t rounded = (u[t] + 0x7fffu + ((u[t] >> 16) & 1u)) >> 16;
            h[t] = (uint16_t)(((u[t] & 0x7fffffffu) > 0x7f800000u) ? nan : rounded);
        }
        memcpy(dst + 2 * i, h, sizeof h);
    }
    for (; i < n; i++) {
        uint16_t h = wf_f32_to_bf16(src[i]);
        memcpy(dst + 2 * i, &h, sizeof h);
    }
}

void wf_convert_to_f32(float *dst, const void *src, wf_dtype_t dt, size_t n)
{
    const unsigned char *s = src;
    switch (dt) {
    case WF_DTYPE_F32:
        memcpy(dst, s, n * sizeof(float));
        break;
    case WF_DTYPE_F16:
        f16_to_f32_n(dst, s, n);
        break;
    case WF_DTYPE_BF16:
        bf16_to_f32_n(dst, s, n);
        break;
    }
}

void wf_convert_from_f32(void *dst, wf_dtype_t dt, const float *src, size_t n)
{
    unsigned char *d = dst;
    switch (dt) {
    case WF_DTYPE_F32:
        memcpy(d, src, n * sizeof(float));
        break;
    case WF_DTYPE_F16:
        f32_to_f16_n(d, src, n);
        break;
    case WF_DTYPE_BF16:
        f32_to_bf16_n(d, src, n);
        break;
    }
}

/* Bytes per element; kernels/ does not link the proto library that owns
 * wf_dtype_size, so it keeps this three-line copy. */
static size_t elem_size(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 4u : 2u;
}

void wf_convert_rows_to_f32(float *dst, const void *src, wf_dtype_t dt,
                            size_t rows, size_t n, size_t src_stride)
{
    const unsigned char *s = src;
    size_t row_bytes = src_stride * elem_size(dt);
    for (size_t r = 0; r < rows; r++)
        wf_convert_to_f32(dst + r * n, s + r * row_bytes, dt, n);
}

void wf_convert_rows_from_f32(void *dst, wf_dtype_t dt, size_t dst_stride,
                              const float *src, size_t rows, size_t n)
{
    unsigned char *d = dst;
    size_t row_bytes = dst_stride * elem_size(dt);
    for (size_t r = 0; r < rows; r++)
        wf_convert_from_f32(d + r * row_bytes, dt, src + r * n, n);
}

float wf_elem_load(const void *buf, wf_dtype_t dt, size_t i)
{
    float x;
    wf_convert_to_f32(&x, (const unsigned char *)buf + i * elem_size(dt), dt, 1);
    return x;
}

void wf_elem_store(void *buf, wf_dtype_t dt, size_t i, float x)
{
    wf_convert_from_f32((unsigned char *)buf + i * elem_size(dt), dt, &x, 1);
}

float wf_round_to_dtype(float x, wf_dtype_t dt)
{
    if (dt == WF_DTYPE_BF16)
        return wf_bf16_to_f32(wf_f32_to_bf16(x));
    if (dt == WF_DTYPE_F16)
        return wf_f16_to_f32(wf_f32_to_f16(x));
    return x;
}

void wf_lse_merge_rows(float *ao, float *al, const float *po, const float *pl,
                       int64_t rows, int64_t D, wf_dtype_t rdt)
{
    const bool rnd = rdt != WF_DTYPE_F32;
    for (int64_t i = 0; i < rows; i++) {
        float lp = pl[i];
        float la = al[i];
        const float *p = po + i * D;
        float *a = ao + i * D;
        if (lp == -INFINITY) {
            /* both -inf: a NaN out_p (keys whose scores were all -inf,
             * 0/0) is kept until a finite partial replaces it */
            if (la == -INFINITY)
                for (int64_t d = 0; d < D; d++)
                    if (p[d] != p[d])
                        a[d] = p[d];
            continue;
        }
        if (la == -INFINITY) {
            for (int64_t d = 0; d < D; d++)
                a[d] = rnd ? wf_round_to_dtype(p[d], rdt) : p[d];
            al[i] = lp;
            continue;
        }
        float diff = la - lp;
        float w = 1.0f / (1.0f + expf(diff));   /* sigmoid(lp - la): the partial's weight */
        float wa = 1.0f / (1.0f + expf(-diff)); /* sigmoid(la - lp): the accumulator's */
        for (int64_t d = 0; d < D; d++) {
            float pd = rnd ? wf_round_to_dtype(p[d], rdt) : p[d];
            /* a non-finite a or p: a - w (a - p) would be inf - inf, the
             * weighted sum gives the infinity (NaN for +inf with -inf, or
             * where the infinity's weight is 0) */
            float x = isfinite(a[d]) && isfinite(pd) ? a[d] - w * (a[d] - pd)
                                                     : wa * a[d] + w * pd;
            a[d] = rnd ? wf_round_to_dtype(x, rdt) : x;
        }
        al[i] = fmaxf(la, lp) + log1pf(expf(-fabsf(diff)));
    }
}
