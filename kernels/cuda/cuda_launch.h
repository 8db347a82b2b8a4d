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

/* The same with the warp-specialized kernel (g->kernel ==
 * WF_CUDA_KERNEL_WS; attention_ws.cu). */
wf_status_t wf_cuda_attention_ws_launch(const wf_attn_params_t *p,
                                        const wf_cuda_attn_geom_t *g,
                                        cudaStream_t stream);

/* fp8 attention (cuda_plan.h, "fp8 attention"), step 1: amax, scales and
 * the e4m3 copies of p's q / k / v into `workspace` (device, laid out as
 * *L from wf_cuda_attn_fp8_layout(p)) on `stream` (fp8_quant.cu). */
wf_status_t wf_cuda_fp8_quantize_launch(const wf_attn_params_t *p, const wf_cuda_fp8_ws_t *L,
                                        void *workspace, cudaStream_t stream);

/* Step 2: the fp8 kernel (g->kernel == WF_CUDA_KERNEL_FP8, from
 * wf_cuda_attn_fp8_geometry) on the copies step 1 wrote
 * (attention_fp8.cu). */
wf_status_t wf_cuda_attention_fp8_launch(const wf_attn_params_t *p,
                                         const wf_cuda_attn_geom_t *g,
                                         const wf_cuda_fp8_ws_t *L, void *workspace,
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

/* ---- model ops (model_ops.cu) ---- params checked by the caller. */

/* dst = act(src + bias) for (rows, n): src rows ld_src apart in src_dt,
 * dst rows ld_dst apart in dst_dt (dst may be src with the same dtype
 * and ld: in place); bias (n) f32 or NULL. */
wf_status_t wf_cuda_bias_act_launch(const void *src, wf_dtype_t src_dt, int64_t ld_src,
                                    void *dst, wf_dtype_t dst_dt, int64_t ld_dst, int64_t rows,
                                    int64_t n, const float *bias, wf_act_t act,
                                    cudaStream_t stream);

/* dst[i] = act(src[i]), n elements. */
wf_status_t wf_cuda_act_launch(float *dst, const float *src, int64_t n, wf_act_t act,
                               const wf_cuda_limits_t *lim, cudaStream_t stream);

/* dst[i] += src[i], n elements. */
wf_status_t wf_cuda_add_launch(float *dst, const float *src, int64_t n,
                               const wf_cuda_limits_t *lim, cudaStream_t stream);

/* y[i] += alpha * x[i], n elements. */
wf_status_t wf_cuda_axpy_launch(float *y, float alpha, const float *x, int64_t n,
                                const wf_cuda_limits_t *lim, cudaStream_t stream);

/* sums[0] = sum |a - b|, sums[1] = sum |b| (device doubles, zeroed here
 * first), n elements. */
wf_status_t wf_cuda_change_sums_launch(const float *a, const float *b, int64_t n,
                                       double *sums, const wf_cuda_limits_t *lim,
                                       cudaStream_t stream);

/* xw (rows, in) contiguous in dt (bf16 / f16) = x (rows, in) rows ldx
 * apart, rounded to nearest even (a linear's B operand). */
wf_status_t wf_cuda_round_rows_launch(void *xw, wf_dtype_t dt, const float *x, int64_t rows,
                                      int64_t in, int64_t ldx, cudaStream_t stream);

/* AdaLN LayerNorm + modulate (wf_modln_params_t, checked). */
wf_status_t wf_cuda_modln_launch(const wf_modln_params_t *p, const wf_cuda_limits_t *lim,
                                 cudaStream_t stream);

/* S row (b, r) += gate[b] * y row (b, r). */
wf_status_t wf_cuda_gate_residual_launch(float *S, int64_t ld_s, const float *y, int64_t ld_y,
                                         const float *gate, int64_t ld_gate, int64_t nbatch,
                                         int64_t per, int64_t C, cudaStream_t stream);

/* Per-head RMSNorm + RoPE into joint order (wf_headrope_params_t, checked). */
wf_status_t wf_cuda_head_norm_rope_launch(const wf_headrope_params_t *p,
                                          const wf_cuda_limits_t *lim, cudaStream_t stream);

/* RoPE tables cos, sin (L, D) from ids (L, n_axes) with the frequencies
 * of wf_cuda_rope_freqs (host arrays of D / 2). */
wf_status_t wf_cuda_rope_table_launch(const float *ids, int64_t L, uint32_t n_axes,
                                      const double *freq, const uint8_t *axis, int64_t D,
                                      float *cs, float *sn, const wf_cuda_limits_t *lim,
                                      cudaStream_t stream);

/* Timestep projection dst (B, dim) of t (B) (backend.h timestep_proj). */
wf_status_t wf_cuda_timestep_proj_launch(const float *t, int64_t B, int64_t dim,
                                         wf_dtype_t round_dtype, float *dst,
                                         const wf_cuda_limits_t *lim, cudaStream_t stream);

/* Sums of squares sumsq (rows) of src (rows, n) rows ld_src apart. */
wf_status_t wf_cuda_rms_sumsq_launch(const float *src, int64_t rows, int64_t n,
                                     int64_t ld_src, float *sumsq, const wf_cuda_limits_t *lim,
                                     cudaStream_t stream);

/* RMSNorm over rows (wf_rmsnorm_params_t, checked). */
wf_status_t wf_cuda_rms_norm_launch(const wf_rmsnorm_params_t *p, const wf_cuda_limits_t *lim,
                                    cudaStream_t stream);

/* LayerNorm with an optional affine (wf_layernorm_params_t, checked). */
wf_status_t wf_cuda_layer_norm_launch(const wf_layernorm_params_t *p,
                                      const wf_cuda_limits_t *lim, cudaStream_t stream);

/* RoPE tables of a token grid (wf_rope_grid_params_t, checked) with the
 * frequencies of wf_cuda_rope_freqs (host arrays of D / 2). */
wf_status_t wf_cuda_rope_grid_launch(const wf_rope_grid_params_t *p, const double *freq,
                                     const uint8_t *axis, const wf_cuda_limits_t *lim,
                                     cudaStream_t stream);

/* Sinusoidal timestep embedding (wf_timestep_params_t, checked). */
wf_status_t wf_cuda_timestep_embed_launch(const wf_timestep_params_t *p,
                                          const wf_cuda_limits_t *lim, cudaStream_t stream);

/* ---- cuBLASLt (gemm_lt.cu) ---- */

/* A cuBLASLt handle, a workspace of ws_bytes device bytes and the
 * descriptor cache of one context. Caller owns *ret_lt. */
typedef struct wf_cuda_lt wf_cuda_lt_t;
wf_status_t wf_cuda_lt_new(size_t ws_bytes, wf_cuda_lt_t **ret_lt);

/* Free it (after the stream is idle); sets *lt to NULL; accepts NULL. */
void wf_cuda_lt_destroy(wf_cuda_lt_t **lt);

/* One matmul of a linear plan on `stream`: B operand at b (the block's
 * first column), y = C = D, bias used when g's epilogue has one.
 * *ret_fused = 0 when cuBLASLt had no algorithm with that epilogue and
 * ran the plain matmul: the caller applies the epilogue's bias and GELU.
 * WF_E_INTERNAL when no algorithm exists or the launch fails. */
wf_status_t wf_cuda_lt_matmul(wf_cuda_lt_t *lt, const wf_cuda_gemm_t *g, const void *b,
                              void *y, const float *bias, int *ret_fused, cudaStream_t stream);

#endif /* WF_CUDA_LAUNCH_H */
