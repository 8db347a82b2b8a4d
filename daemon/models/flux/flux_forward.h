/* flux_forward.h — diffusers' FluxTransformer2DModel forward on one rank
 * of a mesh, with tensor parallelism (tp ranks hold shards of the linear
 * weights, cut by a tp plan) and context parallelism (ring x ulysses ranks
 * hold shards of the sequences), together.
 *
 * Shards (wf_flux_shard_t, cut by a tp plan) are flux_shard.h's.
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
 * the sequence (contiguous pieces in rank order), encoder_hidden_states
 * and txt_ids likewise; each rank runs the token-wise layers on its
 * tokens ([txt piece, img piece] joint order) and the attention with
 * wf_cp_attention_run in its local mode over the seq / ring / ulysses
 * communicators; the output is gathered on the sequence dim. Any S_img
 * and S_txt on any P: rank i's joint rows are its seq shard of the joint
 * sequence S_txt + S_img (tensor_split's sizes, uneven where P does not
 * divide it), holding piece i of the tensor_split of S_txt into P and
 * the image tokens that fill the rest; when P divides both, S_txt / P
 * and S_img / P, diffusers' split. Heads that ulysses does not divide
 * split unevenly (cp_attention's ulysses_anything).
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
 * in bf16). (Activations are f32 between the ops; inside a linear a
 * device backend may round its operands to the weight's dtype, with f32
 * accumulation: backend.h's linear_workspace.)
 *
 * Memory. The arithmetic is the backend's (backend.h "model ops") on its
 * memory: host memory for the CPU backend; device memory for a backend
 * with copy_h2d, whose shards (flux_shard.h) and workspace are then
 * device memory, whose comms move device buffers (NCCL, or a host comm
 * behind comm_staged.h), and which also needs a small host workspace.
 * The job's inputs and output are host memory either way.
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
#include "flux_shard.h"
#include "models/family_run.h"
#include "weft.h"

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
    bool fp8;                           /* every attention in fp8 (backend.h
                                           wf_attn_params_t.fp8; the caller
                                           checked attention_fp8_ok) */
    bool alltoall;                      /* the ring passes one K/V shard per
                                           step (else it gathers them) */
    /* Layer boundaries (NULL: none), as wf_cp_job_t.boundary: every rank
     * calls boundary(arg, i) before block i (the double blocks, then the
     * single blocks, i = 0..num_layers + num_single_layers - 1) with
     * nothing in flight; the same answer on every rank (the caller
     * agrees); not WF_OK stops the run there on every rank, no abort. */
    wf_status_t (*boundary)(void *arg, int64_t step, bool ahead); /* ahead: false */
    void *boundary_arg;
    /* This rank's first-block cache (family_run.h; NULL: none): the head
     * block is the first block run (double block 0), the residual its
     * image rows', the stream the text and image rows. */
    struct wf_fbc *fbc;
} wf_flux_job_t;


/* Validate a job against the model's config and the degrees before it is
 * admitted (pure; every rank would compute the same): dtypes, shapes
 * (the *_ch / *_axes fields against in_channels, joint_attention_dim,
 * pooled_projection_dim, n_axes), guidance present iff
 * cfg.guidance_embeds, sizes in range; any S_img and S_txt on any ring x
 * ulysses. WF_E_BAD_SHAPE / WF_E_BAD_ARGUMENT with a message naming the
 * tensor and the config field. */
wf_status_t wf_flux_forward_check(const wf_flux_config_t *cfg,
                                  const wf_flux_job_t *job, int tp, int R, int U,
                                  char *err, size_t err_len);

/* Whether backend `ops` can run this model at all: it has every op the
 * forward calls (wf_backend_require; on a device backend also copy_d2h,
 * synchronize, convert, fill_f32) and its kernels take the model (the
 * attention's head dims). WF_E_BAD_ARGUMENT with a message naming the
 * backend and the missing op or the config field. Pure. */
wf_status_t wf_flux_backend_check(const wf_flux_config_t *cfg,
                                  const wf_backend_ops_t *ops, char *err,
                                  size_t err_len);

/* Workspace bytes any rank needs for this job (max over ranks) on the
 * backend's memory (device memory on a device backend), so the daemon
 * can admit one figure per device; valid for any plan (activation
 * buffers have their full widths). *ret_host (may be NULL) gets the host
 * workspace any rank needs besides, from the same layouts (0 on the CPU
 * backend, whose one workspace is host memory; on a device backend the
 * counts of the v-collectives and cp_attention's host part). SIZE_MAX
 * (both) on overflow, and for a job wf_flux_forward_check refuses. */
/* Floats of the residual stream on the rank holding most rows (a
 * first-block cache buffer, family_run.h); 0 for a job the check refuses. */
size_t wf_flux_cache_floats(const wf_flux_config_t *cfg, const wf_flux_job_t *job, int tp,
                            int R, int U);

size_t wf_flux_forward_workspace(const wf_flux_config_t *cfg,
                                 const wf_flux_job_t *job, int tp, int R, int U,
                                 const wf_backend_ops_t *ops, size_t *ret_host);

/* Run the forward on this rank with its shard (every rank of the replica
 * calls it with the same job and its own group; the shard built for this
 * backend and context). `workspace` 64-byte aligned (256 on a device),
 * `bytes` >=
 * wf_flux_forward_workspace(...), on the backend's memory (a device
 * backend: dev_alloc); `host_ws` 64-byte aligned host memory of
 * `host_bytes` >= its *ret_host (NULL, 0 on the
 * CPU). On a device backend everything queued is complete when it
 * returns (the output written). WF_OK, or a comm / backend error (the
 * world aborted), or WF_E_BAD_ARGUMENT for a short workspace, a shard
 * cut for another tp or another backend, a backend without the model
 * ops, or missing root pointers. */
wf_status_t wf_flux_forward_run(const wf_flux_shard_t *shard,
                                const wf_flux_job_t *job,
                                const wf_fwd_group_t *group,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, void *workspace,
                                size_t bytes, void *host_ws,
                                size_t host_bytes);

#endif /* WF_FLUX_FORWARD_H */
