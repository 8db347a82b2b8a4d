/* merge.cu — the fused log-sum-exp merge of ring steps and the dtype
 * conversion kernels, with their launchers.
 *
 * Fill: dst[i] = value, grid-stride (accumulator initialisation).
 *
 * Merge: one warp per row; lane 0 reads both lse values and computes the
 * weight and the new lse, the lanes stride over D, lane 0 writes the lse
 * last (so no lane reads a half-updated row). One pass: reads out_a and
 * out_p once, writes out_a once. Formula and -inf handling are
 * tensor.h's wf_lse_merge_rows (see backend.h lse_merge), in
 * merge_epilogue.cuh, which the attention kernels' merge mode shares.
 */
#include "cuda_launch.h"
#include "merge_epilogue.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

namespace {

__global__ void lse_merge_kernel(float *ao, float *al, const float *po, const float *pl,
                                 long long rows, int D, int rdt)
{
    const int lane = threadIdx.x % 32;
    const long long i = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (i >= rows)
        return;
    /* every lane reads both lse values (cached, same values) and plans
     * the row alike */
    const wf_merge::row_plan m = wf_merge::plan_row(al[i], pl[i]);
    const float *p = po + i * D;
    float *acc = ao + i * D;
    if (m.how == wf_merge::KEEP)
        return;
    if (m.how == wf_merge::KEEP_NAN) {
        /* both -inf: only a NaN out_p is written (tensor.c) */
        for (int d = lane; d < D; d += 32)
            if (p[d] != p[d])
                acc[d] = p[d];
        return;
    }
    for (int d = lane; d < D; d += 32)
        acc[d] = wf_merge::merge_elem(m, acc[d], p[d], rdt);
    __syncwarp();
    if (lane == 0)
        al[i] = m.lse;
}

__device__ __forceinline__ float load_elem(const void *src, int dt, size_t i)
{
    if (dt == WF_DTYPE_F32)
        return static_cast<const float *>(src)[i];
    if (dt == WF_DTYPE_BF16)
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(src)[i]);
    return __half2float(static_cast<const __half *>(src)[i]);
}

__device__ __forceinline__ void store_elem(void *dst, int dt, size_t i, float x)
{
    if (dt == WF_DTYPE_F32)
        static_cast<float *>(dst)[i] = x;
    else if (dt == WF_DTYPE_BF16)
        static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(x);
    else
        static_cast<__half *>(dst)[i] = __float2half_rn(x);
}

__global__ void convert_kernel(void *dst, int ddt, const void *src, int sdt, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_elem(dst, ddt, i, load_elem(src, sdt, i));
}

__global__ void fill_kernel(float *dst, float value, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

bool dtype_ok(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 || dt == WF_DTYPE_F16 || dt == WF_DTYPE_BF16;
}

} /* namespace */

wf_status_t wf_cuda_lse_merge_launch(float *acc_out, float *acc_lse,
                                     const float *part_out,
                                     const float *part_lse, int64_t rows,
                                     int64_t D, wf_dtype_t round_dtype,
                                     cudaStream_t stream)
{
    if (rows < 0 || D < 1 || D > INT32_MAX || !dtype_ok(round_dtype))
        return WF_E_BAD_ARGUMENT;
    if (rows == 0)
        return WF_OK;
    if (!acc_out || !acc_lse || !part_out || !part_lse || rows > (int64_t)INT32_MAX * 8)
        return WF_E_BAD_ARGUMENT;
    unsigned grid[3], block[3];
    wf_cuda_merge_geometry(rows, grid, block);
    lse_merge_kernel<<<dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), 0,
                       stream>>>(acc_out, acc_lse, part_out, part_lse, (long long)rows,
                                 (int)D, (int)round_dtype);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

wf_status_t wf_cuda_convert_launch(void *dst, wf_dtype_t dst_dt,
                                   const void *src, wf_dtype_t src_dt,
                                   size_t n, const wf_cuda_limits_t *lim,
                                   cudaStream_t stream)
{
    if (!dtype_ok(dst_dt) || !dtype_ok(src_dt))
        return WF_E_BAD_ARGUMENT;
    if (n == 0)
        return WF_OK;
    if (!dst || !src)
        return WF_E_BAD_ARGUMENT;
    unsigned grid[3], block[3];
    wf_cuda_convert_geometry(n, lim, grid, block);
    convert_kernel<<<dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), 0,
                     stream>>>(dst, (int)dst_dt, src, (int)src_dt, n);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

wf_status_t wf_cuda_fill_f32_launch(float *dst, float value, size_t n,
                                    const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (n == 0)
        return WF_OK;
    if (!dst)
        return WF_E_BAD_ARGUMENT;
    unsigned grid[3], block[3];
    wf_cuda_convert_geometry(n, lim, grid, block); /* grid-stride, as convert */
    fill_kernel<<<dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), 0,
                  stream>>>(dst, value, n);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}
