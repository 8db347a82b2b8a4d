/* flux_forward.h — diffusers' FluxTransformer2DModel forward on one rank
 * of a mesh, with tensor parallelism (tp ranks hold shards of the linear
 * weights, cut by a tp plan) and context parallelism (ring x ulysses ranks
 * hold shards of the sequences), together.
 *
 * Shards. A rank's shard (wf_flux_shard_t) is cut from the read-only host
 * copy (flux_host.h) for (tp, tp_rank) by the plan (tp_plan.h), converted
 * to f32 (the CPU backend computes in f32 with OpenBLAS sgemm). Where the
 * host tensor is already f32 and the rank's piece is contiguous
 * (replicated, colwise with one block, their biases) the shard points
 * into the host copy instead of copying it (the CPU backend's device
 * memory is host memory): cutting, and so re-sharding, copies only the
 * rest. The host copy must then outlive the shard (models.h frees it only
 * after a regroup has dropped the shards); bytes still counts every
 * piece, as a device that copies would hold it. Norm
 * weights, embedders, AdaLN linears and the final projection follow the
 * plan too (the default replicates them).
 *
 * Activations between linear layers carry a layout: full, or split over
 * tp by the producing linear's placement (colwise: one block; packed: the
 * rank's pieces of each block). A consumer that needs another layout gets
 * it converted (all-gather over tp, or a local slice), so any plan that
 * passes wf_flux_plan_check computes the same function; the default plan
 * needs only the all-reduces of its rowwise layers.
 *
 * Sequences. With ring x ulysses = P > 1 ranks in the seq group, the
 * split / gather plan of diffusers' FLUX: hidden_states, img_ids split on
 * the sequence (tensor_split into P contiguous pieces, seq rank i holding
 * piece i), encoder_hidden_states and txt_ids likewise; each rank runs the
 * token-wise layers on its tokens ([txt piece, img piece] joint order) and
 * the attention with wf_cp_attention_run in its local mode over the seq /
 * ring / ulysses communicators; the output is gathered on the sequence
 * dim. S_img and S_txt must each be divisible by P (diffusers' message).
 *
 * Roots. The rank with tp rank 0 and seq index 0 (the replica's rank 0)
 * reads the inputs and writes the output; it sends every other rank what
 * it needs (tp group broadcast, then seq group scatter). Other ranks'
 * input and output pointers may be NULL.
 *
 * Precision. Everything runs in f32 from inputs and weights of any dtype,
 * except what diffusers' function itself rounds: the timestep and guidance
 * are scaled as `t.to(hidden_states.dtype) * 1000`, so with bf16 / f16
 * hidden_states they are rounded to that dtype first (0.875 * 1000 is 876
 * in bf16).
 *
 * Errors after validation abort the world (wf_comm_abort), as
 * cp_attention.h, so no peer waits in a collective. Nothing here logs.
 */
#ifndef WF_FLUX_FORWARD_H
#define WF_FLUX_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm/comm.h"
#include "flux_config.h"
#include "flux_host.h"
#include "tp_plan.h"
#include "weft.h"

/* One linear layer on this rank. */
typedef struct wf_flux_linear {
    wf_tp_place_t place;   /* its placement (full and local shapes) */
    float *w;              /* [local_out, local_in] f32, read-only; an
                              owned copy, or (w_view) a view of the host
                              copy: rows ldw floats apart, and for split
                              columns one view per block (wb[] below) */
    float *b;              /* bias: colwise / packed_colwise [local_out],
                              otherwise [out]; NULL when the module has none */
    bool w_view, b_view;   /* w / b point into the host copy (an f32
                              tensor) instead of an owned copy */
    int64_t ldw;           /* floats between rows of w (local_in when owned) */
    uint32_t nwb;          /* column blocks of w: 1, or the rank's pieces of
                              a rowwise / packed_rowwise view */
    const float *wb[WF_TP_MAX_BLOCKS]; /* first element of each (wb[0] = w) */
    int64_t wbw[WF_TP_MAX_BLOCKS];     /* their widths (sum = local_in) */
} wf_flux_linear_t;

/* A double-stream block (diffusers' FluxTransformerBlock). */
typedef struct wf_flux_double {
    wf_flux_linear_t norm1, norm1_context;          /* AdaLN-Zero: 6 * dim */
    wf_flux_linear_t to_q, to_k, to_v, add_q, add_k, add_v;
    wf_flux_linear_t to_out, to_add_out;
    wf_flux_linear_t ff0, ff2, ffc0, ffc2;          /* ff.net.0.proj, ff.net.2, ff_context.* */
    float *norm_q, *norm_k, *norm_added_q, *norm_added_k; /* RMSNorm [D] */
} wf_flux_double_t;

/* A single-stream block (diffusers' FluxSingleTransformerBlock). */
typedef struct wf_flux_single {
    wf_flux_linear_t norm;                          /* AdaLN-Zero single: 3 * dim */
    wf_flux_linear_t to_q, to_k, to_v, proj_mlp, proj_out;
    float *norm_q, *norm_k;
} wf_flux_single_t;

/* One rank's shard of a model. */
typedef struct wf_flux_shard {
    wf_flux_config_t cfg;
    int tp, tp_rank;
    wf_flux_linear_t x_embedder, context_embedder;
    wf_flux_linear_t time_l1, time_l2;     /* time_text_embed.timestep_embedder */
    wf_flux_linear_t guid_l1, guid_l2;     /* .guidance_embedder (guidance models) */
    wf_flux_linear_t text_l1, text_l2;     /* .text_embedder */
    wf_flux_double_t *dbl;                 /* cfg.num_layers */
    wf_flux_single_t *sgl;                 /* cfg.num_single_layers */
    wf_flux_linear_t norm_out, proj_out;
    uint64_t bytes;                        /* f32 bytes held */
} wf_flux_shard_t;

/* Check `plan` against the model for `tp` ranks: every rule must match at
 * least one linear module of this config unless `allow_unmatched` (the
 * default plan on a model without some block kind); a rule may not match
 * a non-linear tensor (norm weights); every placement must divide
 * (wf_tp_place); query / key / value projections split over tp must keep
 * whole heads (local width a multiple of attention_head_dim: diffusers'
 * "`tp_degree` (<T>) must divide the number of attention heads (<H>).";
 * packed pieces must not cut a head either). WF_E_BAD_ARGUMENT with a
 * message. */
wf_status_t wf_flux_plan_check(const wf_flux_config_t *cfg,
                               const wf_tp_plan_t *plan, int tp,
                               bool allow_unmatched, char *err, size_t err_len);

/* Largest f32 bytes of one rank's shard for (cfg, plan, tp), before any
 * weight is read (memory admission). 0 when the plan check fails. */
uint64_t wf_flux_shard_bytes(const wf_flux_config_t *cfg,
                             const wf_tp_plan_t *plan, int tp);

/* Cut rank `tp_rank`'s shard from the host copy (plan checked by the
 * caller). Caller owns *ret (wf_flux_shard_free). WF_E_NO_MEMORY. */
wf_status_t wf_flux_shard_build(const wf_flux_host_t *host,
                                const wf_tp_plan_t *plan, int tp, int tp_rank,
                                wf_flux_shard_t **ret, char *err, size_t err_len);

/* Free a shard; sets *s to NULL; accepts NULL. */
void wf_flux_shard_free(wf_flux_shard_t **s);

/* One forward job as every rank sees it (pointers: root only). */
typedef struct wf_flux_job {
    int64_t B, S_img, S_txt;
    int64_t hidden_ch;                  /* last dim of hidden_states (in_channels) */
    int64_t encoder_ch;                 /* of encoder_hidden_states (joint_attention_dim) */
    int64_t pooled_ch;                  /* of pooled_projections (pooled_projection_dim) */
    int64_t img_ids_axes, txt_ids_axes; /* of img_ids / txt_ids (n_axes) */
    const void *hidden_states;          wf_dtype_t hidden_dtype;   /* (B, S_img, in_channels) */
    const void *encoder_hidden_states;  wf_dtype_t encoder_dtype;  /* (B, S_txt, joint_dim) */
    const void *pooled_projections;     wf_dtype_t pooled_dtype;   /* (B, pooled_dim) */
    const void *timestep;               wf_dtype_t timestep_dtype; /* (B) */
    const void *img_ids;                wf_dtype_t img_ids_dtype;  /* (S_img, n_axes) */
    const void *txt_ids;                wf_dtype_t txt_ids_dtype;  /* (S_txt, n_axes) */
    const void *guidance;               wf_dtype_t guidance_dtype; /* (B) or NULL */
    bool has_guidance;                  /* same on every rank */
    void *output;                       wf_dtype_t out_dtype;      /* (B, S_img, p^2 * out_ch) */
} wf_flux_job_t;

/* This rank's communicators (NULL where the degree is 1). */
typedef struct wf_flux_group {
    wf_comm_t *tp;        /* same dp, ring, ulysses; index = tp coordinate */
    wf_comm_t *seq;       /* same dp, tp; index ring_c * U + ulysses_c */
    wf_comm_t *ring;      /* same dp, ulysses, tp */
    wf_comm_t *ulysses;   /* same dp, ring, tp */
    int tp_degree, ring_degree, ulysses_degree;
} wf_flux_group_t;

/* Validate a job against the model's config and the degrees before it is
 * admitted (pure; every rank would compute the same): dtypes, shapes
 * (the *_ch / *_axes fields against in_channels, joint_attention_dim,
 * pooled_projection_dim, n_axes), guidance present iff
 * cfg.guidance_embeds, S_img and S_txt
 * divisible by ring x ulysses. WF_E_BAD_SHAPE / WF_E_BAD_ARGUMENT with a
 * message naming the tensor and the config field. */
wf_status_t wf_flux_forward_check(const wf_flux_config_t *cfg,
                                  const wf_flux_job_t *job, int tp, int R, int U,
                                  char *err, size_t err_len);

/* Workspace bytes any rank needs for this job (max over ranks), so the
 * daemon can admit one figure per device; valid for any plan (activation
 * buffers have their full widths). SIZE_MAX on overflow, and for a job
 * wf_flux_forward_check refuses. */
size_t wf_flux_forward_workspace(const wf_flux_config_t *cfg,
                                 const wf_flux_job_t *job, int tp, int R, int U,
                                 const wf_backend_ops_t *ops);

/* Run the forward on this rank with its shard (every rank of the replica
 * calls it with the same job and its own group). `workspace` 64-byte
 * aligned, `bytes` >= wf_flux_forward_workspace(...). WF_OK, or a comm /
 * backend error (the world aborted), or WF_E_BAD_ARGUMENT for a short
 * workspace, a shard cut for another tp, or missing root pointers. */
wf_status_t wf_flux_forward_run(const wf_flux_shard_t *shard,
                                const wf_flux_job_t *job,
                                const wf_flux_group_t *group,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, void *workspace,
                                size_t bytes);

#endif /* WF_FLUX_FORWARD_H */
