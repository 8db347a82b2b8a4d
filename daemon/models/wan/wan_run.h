/* wan_run.h — private to daemon/models/wan: the Wan family's daemon half
 * (family_run.h) in three files sharing this header:
 *   wan_shard.c       the plan check and a rank's shard, cut from the
 *                     host copy
 *   wan_forward.c     the job check, the workspace and the forward on one
 *                     rank
 *   wan_family_run.c  the family_run table entry over them
 * Nothing outside this folder includes it; family_run.h is the contract.
 *
 * What is served: diffusers' WanTransformer3DModel (Wan 2.1 text-to-video,
 * modelfiles/wan/wan_config.h) on a tp x ring x ulysses mesh, on the CPU
 * backend or a backend with device memory: tensor parallelism by the tp
 * plan (the default: modelfiles/wan/wan_family.c), sequence parallelism
 * over the video tokens (cp_attention's local mode, its anything modes
 * for token and head counts the degrees do not divide).
 */
#ifndef WF_WAN_RUN_H
#define WF_WAN_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "models/family_run.h"
#include "models/linear.h"
#include "models/shard.h"
#include "model_host.h"
#include "tp_plan.h"
#include "wan/wan_config.h"
#include "weft.h"

/* One WanTransformerBlock (linears as models/linear.h, vectors f32 on
 * the backend's memory). */
typedef struct wan_block {
    float *sst;                    /* scale_shift_table (6, C): shift, scale,
                                      gate of the self-attention, then of
                                      the feed-forward */
    wf_linear_group_t qkv1;        /* attn1 (self): to_q, to_k, to_v on one
                                      input, fused where the plan allows */
    wf_linear_t o1;                /* attn1.to_out.0 */
    float *nq1, *nk1;              /* attn1 norm_q / norm_k (C): RMSNorm
                                      across all heads */
    wf_linear_t q2, o2;            /* attn2 (cross): to_q (from the video),
                                      to_out.0 */
    wf_linear_group_t kv2;         /* attn2 to_k, to_v (from the text) */
    float *nq2, *nk2;              /* attn2 norm_q / norm_k (C) */
    wf_linear_group_t akv;         /* attn2.add_k_proj / add_v_proj: K / V of
                                      the image tokens (where added_kv_proj_dim) */
    float *nak;                    /* attn2.norm_added_k (C), or NULL */
    float *n2w, *n2b;              /* norm2 LayerNorm affine (C), NULL
                                      without cross_attn_norm */
    wf_linear_t ff0, ff2;          /* ffn.net.0.proj (GELU tanh), ffn.net.2 */
} wan_block_t;

/* One tp rank's shard (models/shard.h: f32 host pieces on the CPU, one
 * resident block on a device). */
typedef struct wf_wan_shard {
    wf_wan_config_t cfg;           /* the model */
    int tp, tp_rank;               /* cut for */
    float *sst_out;                /* scale_shift_table (2, C): shift, scale */
    wf_linear_t patch;             /* patch_embedding as a linear: [C, in_channels
                                      * pt * ph * pw], columns in the Conv3d
                                      weight's (c, kt, kh, kw) order */
    wf_linear_t t1, t2;            /* condition_embedder.time_embedder.linear_1 / _2 */
    wf_linear_t tproj;             /* condition_embedder.time_proj: C -> 6C */
    wf_linear_t x1, x2;            /* condition_embedder.text_embedder.linear_1 / _2 */
    /* condition_embedder.image_embedder (where image_dim): (pos_embed +)
     * LayerNorm, linear GELU linear, LayerNorm, both norms with affine */
    float *ie_pos;                 /* pos_embed (pos_embed_seq_len, image_dim), or NULL */
    float *ie_n1w, *ie_n1b;        /* norm1 (image_dim) */
    wf_linear_t ie_ff0, ie_ff2;    /* ff.net.0.proj (exact GELU), ff.net.2 */
    float *ie_n2w, *ie_n2b;        /* norm2 (C) */
    wan_block_t *blk;              /* cfg.num_layers */
    wf_linear_t proj_out;          /* C -> out_channels * pt * ph * pw */
    wf_shard_mem_t mem;            /* where the pieces live (shard.h) */
} wf_wan_shard_t;

/* Largest degree accepted along one mesh dim (the host comm's world). */
#define WAN_MAX_DEGREE 65536

/* family_run.h's plan_check, shard_bytes, shard_build and shard_free. */
wf_status_t wan_plan_check(const wf_wan_config_t *cfg, const wf_tp_plan_t *plan, int tp,
                           bool allow_unmatched, char *err, size_t err_len);
uint64_t wan_shard_bytes(const wf_wan_config_t *cfg, const wf_tp_plan_t *plan, int tp,
                         bool device, wf_dtype_t weight_dtype);
wf_status_t wan_shard_build(const wf_model_host_t *host, const wf_tp_plan_t *plan, int tp,
                            int tp_rank, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                            wf_wan_shard_t **ret, char *err, size_t err_len);
void wan_shard_free(wf_wan_shard_t **s);

/* family_run.h's backend_check, forward_check, workspace and run. */
wf_status_t wan_backend_check(const wf_wan_config_t *cfg, const wf_backend_ops_t *ops,
                              char *err, size_t err_len);
wf_status_t wan_forward_check(const wf_wan_config_t *cfg, const wf_fwd_io_t *io, int tp,
                              int R, int U, char *err, size_t err_len);
size_t wan_cache_floats(const wf_wan_config_t *cfg, const wf_fwd_io_t *io, int tp, int R,
                        int U);
size_t wan_forward_workspace(const wf_wan_config_t *cfg, const wf_fwd_io_t *io, int tp,
                             int R, int U, const wf_backend_ops_t *ops, size_t *ret_host);
wf_status_t wan_forward_run(const wf_wan_shard_t *shard, const wf_fwd_io_t *io,
                            const wf_fwd_group_t *group, const wf_backend_ops_t *ops,
                            wf_backend_ctx_t *ctx, void *workspace, size_t bytes,
                            void *host_ws, size_t host_bytes);

#endif /* WF_WAN_RUN_H */
