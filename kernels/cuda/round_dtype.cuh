/* round_dtype.cuh — a device f32 value rounded to a dtype's precision
 * (nearest even) and back: the rounding of the merge (merge.cu) and of
 * timestep_proj (model_ops.cu), as tensor.h's wf_round_to_dtype on the
 * host. Device code only. */
#ifndef WF_CUDA_ROUND_DTYPE_CUH
#define WF_CUDA_ROUND_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "weft.h"

/* x in dtype dt (a wf_dtype_t): bf16 / f16 round, f32 unchanged. */
static __device__ __forceinline__ float wf_cuda_round_to(float x, int dt)
{
    if (dt == WF_DTYPE_BF16)
        return __bfloat162float(__float2bfloat16_rn(x));
    if (dt == WF_DTYPE_F16)
        return __half2float(__float2half_rn(x));
    return x;
}

/* Element i of buf (dtype dt: f32, bf16, f16) read as f32 / stored from v
 * rounded to nearest even: an activation whose dtype is a kernel
 * argument (backend.h's low-precision activations). */
static __device__ __forceinline__ float wf_cuda_load_dt(const void *buf, int dt, long long i)
{
    if (dt == WF_DTYPE_BF16)
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(buf)[i]);
    if (dt == WF_DTYPE_F16)
        return __half2float(static_cast<const __half *>(buf)[i]);
    return static_cast<const float *>(buf)[i];
}

static __device__ __forceinline__ void wf_cuda_store_dt(void *buf, int dt, long long i, float v)
{
    if (dt == WF_DTYPE_BF16)
        static_cast<__nv_bfloat16 *>(buf)[i] = __float2bfloat16_rn(v);
    else if (dt == WF_DTYPE_F16)
        static_cast<__half *>(buf)[i] = __float2half_rn(v);
    else
        static_cast<float *>(buf)[i] = v;
}

#endif /* WF_CUDA_ROUND_DTYPE_CUH */
