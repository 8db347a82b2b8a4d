/* softmax.c — row max and exp2 of the online softmax, written as plain
 * loops over 16 independent lanes so GCC vectorises them at -O3 without
 * -ffast-math (a float reduction in one accumulator would not vectorise,
 * and glibc's exp2f in a loop is a call per element).
 *
 * exp2(x): x = n + f with n = round(x), f in [-0.5, 0.5]; 2^f by its
 * degree-7 Taylor polynomial (truncation error < 5e-9 relative, so the
 * result is within a few f32 ulps); 2^n by building the exponent bits.
 * Inputs below -126 give exactly 0 (a select, not a branch), which is what
 * masked or -inf scores need; inputs here are <= 0 (x - row max). A NaN
 * input gives NaN (a NaN score makes its row NaN, as the fp64 reference):
 * the exponent n is read from the shifter's bits as an unsigned integer,
 * not converted from float, so a NaN never reaches a float -> int
 * conversion (undefined) and no signed value is shifted; its garbage
 * exponent multiplies a NaN polynomial, which stays NaN.
 */
#include "softmax.h"

#include <math.h>
#include <string.h>

enum { LANES = 16 };

/* fmaf is one instruction with FMA hardware and a slow library call
 * without it (the portable build), which would also stop vectorisation. */
#if defined(__FMA__) || defined(__aarch64__)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* 2^x for x <= 0 (x > 0 is clamped to at most 2^127; NaN gives NaN). */
static inline float exp2_poly(float x)
{
    float xc = x < -126.0f ? -126.0f : x; /* NaN stays NaN */
    xc = xc > 127.0f ? 127.0f : xc;
    /* round to nearest with the 1.5 * 2^23 shifter: exact for |x| < 2^22 */
    float t = xc + 12582912.0f;
    float n = t - 12582912.0f;
    float f = xc - n;
    /* Taylor coefficients ln2^k / k! */
    float p = 1.5252734e-05f;
    p = MADD(p, f, 1.5403530e-04f);
    p = MADD(p, f, 1.3333558e-03f);
    p = MADD(p, f, 9.6181291e-03f);
    p = MADD(p, f, 5.5504109e-02f);
    p = MADD(p, f, 2.4022651e-01f);
    p = MADD(p, f, 6.9314718e-01f);
    p = MADD(p, f, 1.0f);
    /* t's bits are those of 1.5 * 2^23 (0x4b400000) plus n, |n| < 2^22:
     * the biased exponent n + 127 in 1..254 for every non-NaN x */
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint32_t bits = (tb - 0x4b400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float r = p * scale;
    return x < -126.0f ? 0.0f : r;
}

float wf_cpu_exp2(float x)
{
    return exp2_poly(x);
}

float wf_cpu_row_max(const float *row, int64_t n)
{
    float acc[LANES];
    for (int t = 0; t < LANES; t++)
        acc[t] = -INFINITY;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int t = 0; t < LANES; t++)
            acc[t] = row[j + t] > acc[t] ? row[j + t] : acc[t];
    float mx = -INFINITY;
    for (int t = 0; t < LANES; t++)
        mx = acc[t] > mx ? acc[t] : mx;
    for (; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    return mx;
}

float wf_cpu_row_exp2_scaled(float *row, int64_t n, float m, float b1, float b2)
{
    float acc[LANES];
    for (int t = 0; t < LANES; t++)
        acc[t] = 0.0f;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int t = 0; t < LANES; t++) {
            float e = exp2_poly((row[j + t] - m) * b1 * b2);
            row[j + t] = e;
            acc[t] += e;
        }
    float sum = 0.0f;
    for (int t = 0; t < LANES; t++)
        sum += acc[t];
    for (; j < n; j++) {
        float e = exp2_poly((row[j] - m) * b1 * b2);
        row[j] = e;
        sum += e;
    }
    return sum;
}

float wf_cpu_row_exp2(float *row, int64_t n, float m)
{
    float acc[LANES];
    for (int t = 0; t < LANES; t++)
        acc[t] = 0.0f;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int t = 0; t < LANES; t++) {
            float e = exp2_poly(row[j + t] - m);
            row[j + t] = e;
            acc[t] += e;
        }
    float sum = 0.0f;
    for (int t = 0; t < LANES; t++)
        sum += acc[t];
    for (; j < n; j++) {
        float e = exp2_poly(row[j] - m);
        row[j] = e;
        sum += e;
    }
    return sum;
}
