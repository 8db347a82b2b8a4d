/* fp8.h — the e4m3 number format of fp8 attention (backend.h, p->fp8),
 * the same code on the host (C, the reference and the stand-in device)
 * and on the device (CUDA kernels include it): one definition of the
 * rounding and of the scales, so a test can say what the kernel computes.
 *
 * e4m3 as NVIDIA's __nv_fp8_e4m3 (OCP "E4M3FN"): 1 sign bit, 4 exponent
 * bits (bias 7), 3 mantissa bits; no infinity; S.1111.111 is NaN; the
 * largest finite value is 448 (S.1111.110), the smallest subnormal 2^-9.
 * Conversion from f32 rounds to nearest, ties to even, and saturates:
 * |x| >= 448 gives +-448 (cuda_fp8.h's __NV_SATFINITE); NaN and +-inf give
 * NaN (0x7F with the sign: attention has no use for a saturated infinity,
 * and a NaN keeps reference.h's rule that a NaN poisons what it reaches).
 *
 * Scales: a tensor is quantized per (batch, head) of one attention call:
 * amax = the largest |x| over the head's finite elements, scale = amax /
 * 448 (1 when amax is 0: an all-zero head), x8 = e4m3(x * (448 / amax)).
 * Then q k^T = sq sk (q8 k8^T) and P v = sv (P v8): the kernel folds sq sk
 * into the softmax scale and sv into the output.
 */
#ifndef WF_FP8_H
#define WF_FP8_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define WF_FP8_FN static inline __host__ __device__
#else
#define WF_FP8_FN static inline
#endif

#define WF_FP8_E4M3_MAX 448.0f /* largest finite e4m3 */
#define WF_FP8_E4M3_NAN 0x7Fu  /* NaN (also with the sign bit) */

WF_FP8_FN uint32_t wf_fp8_bits_(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

WF_FP8_FN float wf_fp8_float_(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* f32 -> e4m3: round to nearest even, saturating to +-448; NaN and
 * +-inf -> NaN (the file comment). */
WF_FP8_FN uint8_t wf_fp8_e4m3_from_f32(float x)
{
    uint32_t u = wf_fp8_bits_(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u)                 /* inf or NaN */
        return (uint8_t)(sign | WF_FP8_E4M3_NAN);
    if (a >= 0x43E00000u)                 /* >= 448 */
        return (uint8_t)(sign | 0x7Eu);
    int e = (int)(a >> 23) - 127;         /* unbiased exponent */
    if (e < -6) {
        /* subnormal range: units of 2^-9, exact in f32; n = 8 is the
         * smallest normal, whose bits are 8 as well */
        float t = wf_fp8_float_(a) * 512.0f;
        uint32_t n = (uint32_t)t;
        float frac = t - (float)n;
        if (frac > 0.5f || (frac == 0.5f && (n & 1u)))
            n++;
        return (uint8_t)(sign | n);
    }
    uint32_t m = a & 0x7FFFFFu, r = m >> 20, rem = m & 0xFFFFFu;
    if (rem > 0x80000u || (rem == 0x80000u && (r & 1u)))
        r++;
    uint32_t be = (uint32_t)(e + 7);      /* 1..8 here: below 448 */
    if (r == 8) {
        r = 0;
        be++;
    }
    if (be > 15 || (be == 15 && r == 7))  /* rounded past 448 */
        return (uint8_t)(sign | 0x7Eu);
    return (uint8_t)(sign | (be << 3) | r);
}

/* e4m3 -> f32 (exact). */
WF_FP8_FN float wf_fp8_e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t e = (b >> 3) & 0xFu, m = b & 7u;
    if (e == 15 && m == 7)
        return wf_fp8_float_(sign | 0x7FC00000u);
    if (e == 0) {
        float v = (float)m * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return wf_fp8_float_(sign | ((e - 7 + 127) << 23) | (m << 20));
}

/* The factor a head's elements are multiplied by before rounding
 * (448 / amax; 1 for amax 0), and the scale that undoes it (amax / 448;
 * 1 for amax 0). amax: the largest |x| over the head's finite elements. */
WF_FP8_FN float wf_fp8_quant_factor(float amax)
{
    return amax > 0.0f ? WF_FP8_E4M3_MAX / amax : 1.0f;
}

WF_FP8_FN float wf_fp8_scale(float amax)
{
    return amax > 0.0f ? amax / WF_FP8_E4M3_MAX : 1.0f;
}

#endif /* WF_FP8_H */
