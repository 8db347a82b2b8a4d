/* cuda_launch.h — launchers of the CUDA kernels (the middle of the three
 * layers: __global__ kernel -> launcher taking a stream -> exported op
 * taking the backend context in cuda_backend.cu). Internal to
 * kernels/cuda: the only headers that include cuda_runtime.h live here.
 * Every launcher checks its launch (cudaGetLastError) and returns a
 * status; none synchronizes.
 */
#ifndef WF_CUDA_LAUNCH_H
#define WF_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include "cuda_plan.h"

/* Attention forward of p (device pointers) with geometry *g (from
 * wf_cuda_attn_geometry on this device) on `stream`. */
wf_status_t wf_cuda_attention_launch(const wf_attn_params_t *p,
                                     const wf_cuda_attn_geom_t *g,
                                     cudaStream_t stream);

/* The same with the wgmma kernel (g->kernel == WF_CUDA_KERNEL_WGMMA;
 * attention_wgmma.cu). */
wf_status_t wf_cuda_attention_wgmma_launch(const wf_attn_params_t *p,
                                           const wf_cuda_attn_geom_t *g,
                                           cudaStream_t stream);

/* 1 when the wgmma kernel was compiled for sm_90a (a real body), 0 when
 * this build has none (the geometry must not choose it). */
int wf_cuda_wgmma_built(void);

/* LSE merge (backend.h lse_merge) on `stream`. */
wf_status_t wf_cuda_lse_merge_launch(float *acc_out, float *acc_lse,
                                     const float *part_out,
                                     const float *part_lse, int64_t rows,
                                     int64_t D, wf_dtype_t round_dtype,
                                     cudaStream_t stream);

/* dst = (dst_dt)src, n elements, on `stream`. */
wf_status_t wf_cuda_convert_launch(void *dst, wf_dtype_t dst_dt,
                                   const void *src, wf_dtype_t src_dt,
                                   size_t n, const wf_cuda_limits_t *lim,
                                   cudaStream_t stream);

/* dst[i] = value, n f32 elements, on `stream`. */
wf_status_t wf_cuda_fill_f32_launch(float *dst, float value, size_t n,
                                    const wf_cuda_limits_t *lim, cudaStream_t stream);

#endif /* WF_CUDA_LAUNCH_H */
