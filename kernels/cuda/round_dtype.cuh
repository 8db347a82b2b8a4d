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

#endif /* WF_CUDA_ROUND_DTYPE_CUH */
