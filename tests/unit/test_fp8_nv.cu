/* test_fp8_nv.cu — kernels/fp8.h's e4m3 conversions against NVIDIA's own
 * (cuda_fp8.h: __nv_cvt_float_to_fp8 with __NV_SATFINITE, and
 * __nv_cvt_fp8_to_halfraw), both run on the CPU: compiled by nvcc as host
 * code, so no GPU is needed (a CUDA build's ctest `fp8_nv`).
 *
 * Decoding: every one of the 256 codes. Encoding: every e4m3 value, every
 * midpoint between neighbours (ties to even) and the floats one ulp on
 * each side, the saturation boundary, signed zeros, f32 subnormals, and
 * ~1e6 random floats over 2^-24 .. 2^12 (both signs), plus random bit
 * patterns. Expected: equal bytes, except fp8.h's documented rule that
 * +-inf gives NaN where __NV_SATFINITE gives +-448, and NaN compared as
 * NaN (NVIDIA's NaN code may lose the sign). The device quantizer
 * (fp8_quant.cu) uses the hardware form of NVIDIA's conversion for finite
 * values, so this is the check that it rounds as fp8.h says. */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fp8.h"

static long checked, failures, inf_cases;

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static bool is_nan8(uint8_t b) { return (b & 0x7Fu) == 0x7Fu; }

static void check_encode(float x)
{
    const uint8_t mine = wf_fp8_e4m3_from_f32(x);
    const uint8_t nv = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    checked++;
    if (isinf(x)) {
        /* fp8.h: NaN with the sign; NVIDIA: +-448 */
        inf_cases++;
        if (mine != (uint8_t)((x < 0 ? 0x80u : 0u) | 0x7Fu) ||
            nv != (uint8_t)((x < 0 ? 0x80u : 0u) | 0x7Eu)) {
            failures++;
            fprintf(stderr, "inf %g: fp8.h 0x%02x nv 0x%02x\n", x, mine, nv);
        }
        return;
    }
    if (isnan(x) ? !(is_nan8(mine) && is_nan8(nv)) : mine != nv) {
        if (failures < 20) {
            uint32_t u;
            memcpy(&u, &x, 4);
            fprintf(stderr, "x = %.9g (0x%08x): fp8.h 0x%02x, cuda_fp8.h 0x%02x\n", x, u, mine,
                    nv);
        }
        failures++;
    }
}

static uint32_t rng = 12345u;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

int main(void)
{
    /* decoding: all 256 codes */
    long dec_bad = 0;
    for (int c = 0; c < 256; c++) {
        const __half_raw hr = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3);
        const __half h(hr);
        const float nv = __half2float(h), mine = wf_fp8_e4m3_to_f32((uint8_t)c);
        if (isnan(nv) ? !isnan(mine) : (nv != mine || signbit(nv) != signbit(mine))) {
            fprintf(stderr, "code 0x%02x: fp8.h %g, cuda_fp8.h %g\n", c, mine, nv);
            dec_bad++;
        }
    }
    /* encoding: every value, midpoints and their neighbours */
    for (int c = 0; c < 256; c++) {
        const float v = wf_fp8_e4m3_to_f32((uint8_t)c);
        if (isnan(v))
            continue;
        check_encode(v);
        check_encode(nextafterf(v, INFINITY));
        check_encode(nextafterf(v, -INFINITY));
        if ((c & 0x7F) < 0x7E) {
            const float w = wf_fp8_e4m3_to_f32((uint8_t)(c + 1));
            const float mid = (v + w) * 0.5f; /* exact in f32 */
            check_encode(mid);
            check_encode(nextafterf(mid, INFINITY));
            check_encode(nextafterf(mid, -INFINITY));
        }
    }
    /* saturation: 448 .. 480 (the midpoint to the next binade's 480) and far */
    const float sat[] = {448.f, 463.99f, 464.f, 464.01f, 479.f, 480.f, 500.f, 1e6f, 3.4e38f,
                         2.0f * 448.f};
    for (size_t i = 0; i < sizeof sat / sizeof sat[0]; i++) {
        check_encode(sat[i]);
        check_encode(-sat[i]);
    }
    /* zeros, infinities, NaNs, f32 subnormals, the smallest e4m3 halves */
    const float sp[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, -NAN, bits_f(1), bits_f(0x80000001u),
                        bits_f(0x007FFFFFu), 1.0f / 1024.0f, 1.0f / 1024.0f * 1.0000001f,
                        3.0f / 1024.0f, 1.0f / 512.0f};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
        check_encode(sp[i]);
    /* random magnitudes 2^-24 .. 2^12, both signs */
    for (int i = 0; i < 1000000; i++) {
        const uint32_t r = next();
        const int e = (int)(r % 37) - 24;
        const float m = 1.0f + (float)(next() & 0xFFFFFF) / 16777216.0f;
        check_encode(ldexpf((r & 0x80000000u) ? -m : m, e));
    }
    /* random bit patterns (every exponent, NaN payloads included) */
    for (int i = 0; i < 200000; i++)
        check_encode(bits_f(next()));
    printf("fp8_nv: %ld encodings checked (%ld infinities: fp8.h NaN, cuda_fp8.h +-448 as "
           "documented), %ld differ; 256 codes decoded, %ld differ\n",
           checked, inf_cases, failures, dec_bad);
    return failures || dec_bad ? 1 : 0;
}
