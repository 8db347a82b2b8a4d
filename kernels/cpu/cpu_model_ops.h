/* cpu_model_ops.h — the CPU backend's context and its model ops
 * (backend.h "model ops"), shared by cpu_backend.c (the table) and
 * cpu_model_ops.c (the ops). Internal to kernels/cpu.
 */
#ifndef WF_CPU_MODEL_OPS_H
#define WF_CPU_MODEL_OPS_H

#include "backend.h"

struct wf_backend_ctx {
    int index;              /* device index (cpu:index) */
    uint64_t memory_total;  /* budget given to ctx_new, or RAM / 2 */
    float *scratch;         /* f32 tile of a bf16 / f16 weight (linear), grown on demand */
    size_t scratch_n;       /* floats at scratch */
};

/* The entries of backend.h, same contracts. linear may also return
 * WF_E_NO_MEMORY when the f32 tile of a bf16 / f16 weight cannot be
 * allocated (once per context; f32 weights need none). */
size_t wf_cpu_linear_workspace(const wf_linear_params_t *p);
wf_status_t wf_cpu_linear(wf_backend_ctx_t *ctx, const wf_linear_params_t *p,
                          void *workspace);
wf_status_t wf_cpu_bias_act(wf_backend_ctx_t *ctx, void *y, wf_dtype_t y_dtype,
                            int64_t rows, int64_t n, int64_t ldy, const float *bias,
                            wf_act_t act, void *dst, int64_t ld_dst,
                            wf_dtype_t dst_dtype);
wf_status_t wf_cpu_act(wf_backend_ctx_t *ctx, float *dst, const float *src,
                       int64_t n, wf_act_t act);
wf_status_t wf_cpu_axpy(wf_backend_ctx_t *ctx, float *y, float alpha, const float *x,
                        int64_t n);
wf_status_t wf_cpu_change_sums(wf_backend_ctx_t *ctx, const float *a, const float *b,
                               int64_t n, double *scratch, double ret[2]);
wf_status_t wf_cpu_add(wf_backend_ctx_t *ctx, float *dst, const float *src,
                       int64_t n);
wf_status_t wf_cpu_modln(wf_backend_ctx_t *ctx, const wf_modln_params_t *p);
wf_status_t wf_cpu_gate_residual(wf_backend_ctx_t *ctx, float *S, int64_t ld_s,
                                 const float *y, int64_t ld_y,
                                 const float *gate, int64_t ld_gate,
                                 int64_t nbatch, int64_t per, int64_t C);
wf_status_t wf_cpu_head_norm_rope(wf_backend_ctx_t *ctx,
                                  const wf_headrope_params_t *p);
wf_status_t wf_cpu_rope_table(wf_backend_ctx_t *ctx, const float *ids,
                              int64_t L, const uint32_t *axes_dims,
                              uint32_t n_axes, double theta, int64_t D,
                              float *cos, float *sin);
wf_status_t wf_cpu_timestep_proj(wf_backend_ctx_t *ctx, const float *t,
                                 int64_t B, int64_t dim, wf_dtype_t round_dtype,
                                 float *dst);
wf_status_t wf_cpu_copy_rows(wf_backend_ctx_t *ctx, void *dst, size_t ld_dst,
                             const void *src, size_t ld_src, int64_t rows,
                             size_t row_bytes);
wf_status_t wf_cpu_rms_sumsq(wf_backend_ctx_t *ctx, const float *src, int64_t rows,
                             int64_t n, int64_t ld_src, float *sumsq);
wf_status_t wf_cpu_rms_norm(wf_backend_ctx_t *ctx, const wf_rmsnorm_params_t *p);
wf_status_t wf_cpu_layer_norm(wf_backend_ctx_t *ctx, const wf_layernorm_params_t *p);
wf_status_t wf_cpu_rope_grid(wf_backend_ctx_t *ctx, const wf_rope_grid_params_t *p);
wf_status_t wf_cpu_timestep_embed(wf_backend_ctx_t *ctx, const wf_timestep_params_t *p);

#endif /* WF_CPU_MODEL_OPS_H */
