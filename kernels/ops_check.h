/* ops_check.h — the params checks of backend.h's model ops, one per op,
 * shared by every backend (CPU, CUDA, the tests' stand-in device) so
 * that all refuse exactly the same params with WF_E_BAD_ARGUMENT.
 *
 * Plain C, pure: pointers are compared, never dereferenced (device
 * pointers are fine). Each returns true when the params are valid:
 * shapes, strides and enums as backend.h states them, the pointers
 * present when there is something to touch (a count of rows 0 needs
 * none), and the byte ranges an op writes apart from those it reads
 * (except the in-place forms backend.h allows). A backend adds its own
 * limits after these (the CUDA backend: int32 indexing, rotary pairs,
 * alignment). */
#ifndef WF_OPS_CHECK_H
#define WF_OPS_CHECK_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* linear's shapes, dtypes, act and strides, no pointer looked at: rows >= 0,
 * in, out >= 1, every dim and ld within int32, ldx >= in, ldy >= out,
 * 1..WF_LINEAR_MAX_BLOCKS blocks of width >= 1 summing to in, ldw >= each;
 * x_dtype F32 or w_dtype (a bf16 / f16 weight), y_dtype F32 / BF16 / F16
 * with one block unless F32. */
bool wf_ops_linear_shape_ok(const wf_linear_params_t *p);

/* The shapes as above and, when rows > 0, x, y and every wb[k] present,
 * y apart from x and from bias. */
bool wf_ops_linear_ok(const wf_linear_params_t *p);

/* bias_act: y (rows, n) of y_dtype rows ldy apart, bias (n) or NULL
 * apart from y; dst NULL (in place, dst_dtype = y_dtype) or (rows, n) of
 * dst_dtype rows ld_dst >= n apart, apart from y and bias. */
bool wf_ops_bias_act_ok(const void *y, wf_dtype_t y_dtype, int64_t rows, int64_t n,
                        int64_t ldy, const float *bias, wf_act_t act, const void *dst,
                        int64_t ld_dst, wf_dtype_t dst_dtype);

/* act: dst, src (n); dst is src or apart from it; act GELU_TANH or SILU. */
bool wf_ops_act_ok(const float *dst, const float *src, int64_t n, wf_act_t act);

/* add: dst, src (n); dst is src or apart from it. */
bool wf_ops_add_ok(const float *dst, const float *src, int64_t n);

/* axpy: alpha finite; y, x (n) present and apart. */
bool wf_ops_axpy_ok(const float *y, float alpha, const float *x, int64_t n);

/* change_sums: a, b (n) present, apart or the same; scratch 8-byte
 * aligned; ret present. */
bool wf_ops_change_sums_ok(const float *a, const float *b, int64_t n, const double *scratch,
                           const double *ret);

/* modln: eps finite >= 0, dst_dtype F32 / BF16 / F16; dst is src (same
 * ld, F32) or apart from it; shift,
 * scale (nbatch, C) apart from dst; pointers when nbatch * per > 0. */
bool wf_ops_modln_ok(const wf_modln_params_t *p);

/* gate_residual: S (nbatch per, C) apart from y and gate. */
bool wf_ops_gate_residual_ok(const float *S, int64_t ld_s, const float *y, int64_t ld_y,
                             const float *gate, int64_t ld_gate, int64_t nbatch,
                             int64_t per, int64_t C);

/* head_norm_rope: rows row0..row0 + per of L, ld_src >= H D, cos and sin
 * both or neither (D even with them), eps finite >= 0, src_dtype and
 * dst_dtype F32 / BF16 / F16, dst's (nbatch L, H D) apart from src. */
bool wf_ops_headrope_ok(const wf_headrope_params_t *p);

/* rope_table's axes: n_axes >= 1, each width even and >= 2, summing to
 * D >= 2; theta finite > 0. */
bool wf_ops_rope_axes_ok(const uint32_t *axes_dims, uint32_t n_axes, double theta,
                         int64_t D);

/* rope_table: the axes as above, L >= 0, ids, cos, sin present when L > 0,
 * the (L, D) tables apart. */
bool wf_ops_rope_table_ok(const float *ids, int64_t L, const uint32_t *axes_dims,
                          uint32_t n_axes, double theta, int64_t D, const float *cos_t,
                          const float *sin_t);

/* timestep_proj: B >= 0, dim even in 2..INT32_MAX, round_dtype f32 / f16 /
 * bf16, dst (B, dim) apart from t (B). */
bool wf_ops_timestep_ok(const float *t, int64_t B, int64_t dim, wf_dtype_t round_dtype,
                        const float *dst);

/* copy_rows: rows >= 0, ld_dst, ld_src >= row_bytes (all below 2^62), the
 * byte ranges of dst and src apart. */
bool wf_ops_copy_rows_ok(const void *dst, size_t ld_dst, const void *src, size_t ld_src,
                         int64_t rows, size_t row_bytes);

/* rms_sumsq: rows >= 0, n >= 1, ld_src >= n, sumsq (rows) apart from src. */
bool wf_ops_rms_sumsq_ok(const float *src, int64_t rows, int64_t n, int64_t ld_src,
                         const float *sumsq);

/* rms_norm: rows >= 0, n >= 1, ld_src, ld_dst >= n, eps finite >= 0,
 * dst_dtype F32 / BF16 / F16; dst is src (same ld, F32) or apart from
 * it; weight (n) and sumsq (rows) apart from dst; width 0 without
 * sumsq, >= n with it. */
bool wf_ops_rms_norm_ok(const wf_rmsnorm_params_t *p);

/* layer_norm: rows >= 0, C >= 1, ld_src, ld_dst >= C, eps finite >= 0,
 * dst_dtype F32 / BF16 / F16; dst is src (same ld, F32) or apart from
 * it; weight, bias (C) apart from dst. */
bool wf_ops_layer_norm_ok(const wf_layernorm_params_t *p);

/* rope_grid: 1..WF_ROPE_MAX_AXES axes, each grid >= 1 with a product
 * below 2^31 (positions exact in f32), axes as wf_ops_rope_axes_ok,
 * row0 >= 0, L >= 0, row0 + L <= the product, cos and sin present when
 * L > 0 and apart. */
bool wf_ops_rope_grid_ok(const wf_rope_grid_params_t *p);

/* timestep_embed: B >= 0, dim in 2..INT32_MAX, max_period finite > 0,
 * scale finite, downscale_freq_shift finite and below dim / 2, dst (B,
 * dim) apart from t (B). */
bool wf_ops_timestep_embed_ok(const wf_timestep_params_t *p);

#ifdef __cplusplus
}
#endif

#endif /* WF_OPS_CHECK_H */
