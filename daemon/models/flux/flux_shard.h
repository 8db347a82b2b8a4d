/* flux_shard.h — a rank's shard of a FLUX transformer: what each tp rank
 * holds of the weights, and the plan check that says whether a tp plan
 * can cut this model (flux_shard.c). The forward (flux_forward.h) runs on
 * a shard; the registry (models.h) builds and frees them.
 *
 * A rank's shard (wf_flux_shard_t) is cut from the read-only host
 * copy (model_host.h) for (tp, tp_rank) by the plan (tp_plan.h), on the
 * memory of the backend it is built for (backend.h):
 *   - the CPU backend (host memory; ops NULL or without mem_alloc): every
 *     piece in f32 (the CPU backend computes in f32). Where the host
 *     tensor is already f32 and the rank's piece is contiguous or a
 *     strided view (replicated, colwise with one block, rowwise pieces,
 *     their biases) the shard points into the host copy instead of
 *     copying it: cutting, and so re-sharding, copies only the rest. The
 *     host copy must then outlive the shard (models.h frees it only after
 *     a regroup has dropped the shards).
 *   - a backend with resident memory (mem_alloc): one mem_alloc block
 *     per shard, sub-allocated (256-byte aligned pieces); each linear's
 *     weight in the checkpoint tensor's own dtype (bf16 stays bf16),
 *     contiguous (local_out, local_in) (rowwise / packed pieces gathered
 *     on the host first), biases and norm weights in f32. The shard
 *     keeps the backend's ops and context: freeing it synchronizes and
 *     returns the block at once.
 * Norm weights, embedders, AdaLN linears and the final projection follow
 * the plan too (the default replicates them).
 * Projections on one input are one fused weight where their placements
 * allow (shard.h's wf_shard_linear_fused; a copy on the CPU, never a
 * view): each double block's q / k / v of either stream, each single
 * block's q / k / v / proj_mlp; and every AdaLN linear (all on
 * silu(temb)) is one batched weight, its members' placements kept.
  */
#ifndef WF_FLUX_SHARD_H
#define WF_FLUX_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "flux_config.h"
#include "model_host.h"
#include "models/linear.h"
#include "models/shard.h"
#include "tp_plan.h"
#include "weft.h"

/* A double-stream block (diffusers' FluxTransformerBlock). */
typedef struct wf_flux_double {
    wf_linear_t norm1, norm1_context;          /* AdaLN-Zero: 6 * dim (weights
                                                  only when the modulation is
                                                  not batched) */
    int64_t mod_off, mod_off_ctx;              /* their columns in the batched
                                                  modulation's output */
    wf_linear_group_t qkv;                     /* to_q, to_k, to_v */
    wf_linear_group_t add_qkv;                 /* add_q_proj, add_k_proj, add_v_proj */
    wf_linear_t to_out, to_add_out;
    wf_linear_t ff0, ff2, ffc0, ffc2;          /* ff.net.0.proj, ff.net.2, ff_context.* */
    float *norm_q, *norm_k, *norm_added_q, *norm_added_k; /* RMSNorm [D] f32, backend memory */
} wf_flux_double_t;

/* A single-stream block (diffusers' FluxSingleTransformerBlock). */
typedef struct wf_flux_single {
    wf_linear_t norm;                          /* AdaLN-Zero single: 3 * dim
                                                  (as norm1 above) */
    int64_t mod_off;                           /* its columns in the batched
                                                  modulation's output */
    wf_linear_group_t qkvm;                    /* to_q, to_k, to_v, proj_mlp:
                                                  one normalised input */
    wf_linear_t proj_out;
    float *norm_q, *norm_k;
} wf_flux_single_t;

/* One rank's shard of a model. */
typedef struct wf_flux_shard {
    wf_flux_config_t cfg;
    int tp, tp_rank;
    wf_linear_t x_embedder, context_embedder;
    wf_linear_t time_l1, time_l2;     /* time_text_embed.timestep_embedder */
    wf_linear_t guid_l1, guid_l2;     /* .guidance_embedder (guidance models) */
    wf_linear_t text_l1, text_l2;     /* .text_embedder */
    wf_flux_double_t *dbl;                 /* cfg.num_layers */
    wf_flux_single_t *sgl;                 /* cfg.num_single_layers */
    wf_linear_t norm_out, proj_out;
    /* Every AdaLN linear (each double block's norm1 and norm1_context,
     * each single block's norm, norm_out) takes silu(temb): batched as
     * one linear of their outputs in that order when they fuse
     * (wf_shard_linear_fused), computed once per forward. */
    wf_linear_t mod;                       /* the batched linear (mod_fused) */
    bool mod_fused;                        /* else each block runs its own */
    int64_t mod_width;                     /* its full output width */
    int64_t norm_out_off;                  /* norm_out's columns in it */
    wf_shard_mem_t mem;                    /* where the pieces live, what
                                              the shard owns (shard.h) */
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

/* Bytes of one rank's shard for (cfg, plan, tp) on the CPU backend (f32
 * pieces, views counted as copies), before any weight is read (memory
 * admission). 0 when the plan check fails. */
uint64_t wf_flux_shard_bytes(const wf_flux_config_t *cfg,
                             const wf_tp_plan_t *plan, int tp);

/* The same on a backend with resident memory (mem_alloc): weights of
 * `weight_dtype` (the checkpoint's; exact when every weight has it),
 * biases and norm weights f32, each piece rounded up to 256 bytes, as
 * wf_flux_shard_build sub-allocates them. 0 when the plan check fails. */
uint64_t wf_flux_shard_bytes_dev(const wf_flux_config_t *cfg,
                                 const wf_tp_plan_t *plan, int tp,
                                 wf_dtype_t weight_dtype);

/* Cut rank `tp_rank`'s shard from the host copy (plan checked by the
 * caller) on backend `ops` with context `ctx` (borrowed until the shard
 * is freed): ops NULL or without mem_alloc builds the CPU shard (host
 * memory), else the device shard (file comment), copied with copy_h2d
 * and complete when this returns. Worker thread of ctx, outside a job.
 * Caller owns *ret (wf_flux_shard_free). WF_E_NO_MEMORY (on a device:
 * the block does not fit, with the figures, before a byte is copied),
 * WF_E_MALFORMED / WF_E_BAD_SHAPE for a host copy that does not match,
 * or the backend's error. */
wf_status_t wf_flux_shard_build(const wf_model_host_t *host,
                                const wf_tp_plan_t *plan, int tp, int tp_rank,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_flux_shard_t **ret,
                                char *err, size_t err_len);

/* Free a shard (a device shard: synchronize, then its block goes back at
 * once); sets *s to NULL; accepts NULL. The thread of its context. */
void wf_flux_shard_free(wf_flux_shard_t **s);

#endif /* WF_FLUX_SHARD_H */
