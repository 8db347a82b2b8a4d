/* fp8_ops.cuh — the e4m3 pieces the fp8 attention shares between its
 * quantizer (fp8_quant.cu) and its kernel (attention_fp8.cu): kernels/fp8.h's
 * rounding on the device with the hardware conversion, and the order of
 * the keys within each 32 of V's transposed copy (the P fragment).
 * Device code; included inside each file's anonymous namespace. */
#ifndef WF_FP8_OPS_CUH
#define WF_FP8_OPS_CUH

#include <cuda_fp8.h> /* the including file has it already, outside its namespace */

/* fp8.h's wf_fp8_e4m3_from_f32 (round to nearest even, saturating to
 * +-448; NaN and +-inf -> NaN with the sign) with the hardware conversion
 * (cvt.rn.satfinite.e4m3x2.f32 on sm_89+), which rounds and saturates the
 * same way for finite values but maps +-inf to +-448: non-finite values
 * are taken first. tests/unit/test_fp8_nv.cu checks cuda_fp8.h's conversion
 * against fp8.h for every e4m3 code and ~1e6 floats on the host. */
__device__ __forceinline__ uint32_t fp8_e4m3(float y)
{
    if (!isfinite(y))
        return ((__float_as_uint(y) >> 24) & 0x80u) | WF_FP8_E4M3_NAN;
    return (uint32_t)__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
}

/* Two values to e4m3 (lo in the low byte), NaN stays NaN, +-inf
 * saturates: P of the attention (never infinite). */
__device__ __forceinline__ uint32_t fp8_e4m3x2(float lo, float hi)
{
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

/* The slot of key k (0..31) of a 32-key chunk in v8t (cuda_plan.h's
 * wf_cuda_fp8_key_slot; the derivation is in attention_fp8.cu): k =
 * 16 h + 8 a + 2 t + e -> 16 h + 4 t + 2 a + e. */
__host__ __device__ __forceinline__ int fp8_key_slot(int k)
{
    return (k & 16) | (((k >> 1) & 3) << 2) | (((k >> 3) & 1) << 1) | (k & 1);
}

#endif /* WF_FP8_OPS_CUH */
