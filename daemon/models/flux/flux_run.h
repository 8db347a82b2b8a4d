/* flux_run.h — private to daemon/models/flux: what the files of the FLUX
 * forward share (flux_forward.c the job check, workspace and driver,
 * flux_shard.c the plan check and shards, flux_embed.c the inputs and
 * embeddings, flux_blocks.c the attention and the transformer blocks;
 * the linear layers and tp layouts are models/linear.h's). Nothing
 * outside those files includes it; flux_forward.h is the contract.
 *
 * Names as in flux_forward.c: T tp ranks, P = R * U seq ranks, C =
 * inner_dim, H heads of D, M = mlp_hidden_dim, OC = p^2 * out_channels;
 * Lt / Li text / image tokens on this rank, L = Lt + Li; Nt = B * Lt,
 * Ni = B * Li, N = Nt + Ni rows (flux_tokens: which tokens).
 */
#ifndef WF_FLUX_RUN_H
#define WF_FLUX_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flux_forward.h"
#include "base/szcheck.h"
#include "parallel/cp_attention.h"

/* Largest mesh the forward accepts along one dim (comm_host's world). */
#define MAX_DEGREE 65536


/* Sizes of a job: identical on every rank but for this rank's tokens and
 * rows (flux_geo_rank; the workspace is laid out with the most of any
 * rank, so that one figure serves every rank). */
typedef struct geo {
    int64_t B, S_img, S_txt, S;  /* job; S = S_img + S_txt (the joint length) */
    int64_t Lt, Li, L;           /* this rank's tokens */
    int64_t Nt, Ni, N;           /* this rank's rows */
    int64_t Ltm, Lim, Lm;        /* the most tokens of any seq rank (each
                                    its own maximum) */
    int64_t Ntm, Nim, Nm;        /* B times those: the most rows */
    int64_t C, H, D, M, OC;      /* model widths */
    int64_t nd, ns;              /* double and single blocks */
    int64_t IN, J, PD, NA;       /* input widths */
    int T, R, U, P;              /* degrees */
    bool fp8;                    /* the attention in fp8 (wf_flux_job_t.fp8) */
    wf_dtype_t adt;              /* the activations a GEMM or the attention
                                    reads (nx, q / k / v, the attention's
                                    output, the MLP hidden, cat): BF16 on a
                                    device whose linears are all bf16
                                    (flux_act_dtype), else F32; the
                                    residual stream, the modulation and
                                    the linears' outputs the gates read
                                    stay f32 */
    bool alltoall;               /* the ring's rotation (wf_flux_job_t.alltoall) */
} geo_t;

/* One input record: what one seq rank needs of the inputs, f32, floats
 * from the record's start, sized for the most tokens of any rank (Ltm,
 * Lim, Lm); rank j's pieces have its own Lt_j / Li_j rows, packed. */
typedef struct recl {
    size_t hid;    /* hidden_states piece (B, Li, IN) */
    size_t enc;    /* encoder_hidden_states piece (B, Lt, J) */
    size_t ids;    /* the ids of the joint rows (L, NA) in joint order: the
                      txt_ids piece (Lt, NA), then the img_ids piece (Li, NA) */
    size_t pooled; /* pooled_projections (B, PD) */
    size_t ts;     /* timestep (B) */
    size_t gd;     /* guidance (B) */
    size_t n;      /* floats of the record, a multiple of 16 (64 bytes) */
} recl_t;

/* Byte offsets of the regions of one rank's workspace (256 bytes apart)
 * on the backend's memory (device memory on a device backend), and of
 * its host workspace (a device backend only: what the comm and the CPU
 * read, the counts of the v-collectives and cp_attention's host part).
 * Float counts in comments; widths are the full ones (any plan). */
typedef struct wsl {
    size_t meta;   /* 2 * max(P, T) size_t: scatter / gather counts (host:
                      in the workspace on the CPU, the host workspace on a
                      device) */
    size_t in;     /* input records: P on seq index 0, else 1; own first */
    size_t rcos, rsin; /* RoPE tables (Lm, D) */
    size_t tproj;  /* sinusoidal projection (B, 256) */
    size_t v1, v2, temb, semb; /* (B, C): embedder scratch, temb, silu(temb) */
    size_t modA, modB; /* (B, 6C): one block's AdaLN outputs (not batched) */
    size_t mod;    /* (B, MW): the batched AdaLN outputs, MW = (12 num_layers
                      + 3 num_single_layers + 2) C */
    size_t S;      /* residual stream (N, C), stream order */
    size_t nx;     /* normalized + modulated stream (N, C) */
    size_t proj;   /* (N, 3C + M): a projection group's output (q | k | v
                      (| MLP-in) per row when fused); once they are
                      packed, the regions below live in it */
    size_t proj_n; /* its floats */
    size_t q, k;   /* in proj: attention out (joint order) at its start,
                      unpacked out (stream order) after it, (N, C) each */
    size_t qj, kj, vj; /* attention inputs (B, L, H, D), joint order */
    size_t lo;     /* a linear's full output before the gate (N, C) */
    size_t hid;    /* in proj: a double block's MLP hidden (N, M) */
    size_t cat;    /* single blocks' proj_out input (N, C + M) */
    size_t Y;      /* split output of a linear before it is made full */
    size_t Xc;     /* a linear's input converted to its layout */
    size_t G;      /* tp all-gather landing */
    size_t lws;    /* linear workspace (ops->linear_workspace, any layer) */
    size_t aws;    /* attention workspace */
    size_t out;    /* final output (Ni, OC) */
    size_t outg;   /* root, P > 1: every seq rank's output, rank j's (Ni_j,
                      OC) at j * Nim * OC */
    size_t stage;  /* root on a device: a raw input chunk copied up, and
                      the output converted to out_dtype */
    size_t total;  /* bytes */
    size_t haws;   /* host workspace: cp_attention's host part */
    size_t htotal; /* host workspace bytes (0 on the CPU) */
    /* sizes the run checks against */
    size_t aws_bytes, haws_bytes; /* bytes of aws / haws */
    size_t lws_bytes;             /* bytes of lws */
    size_t Y_n, Xc_n, G_n;       /* floats of Y, Xc, G */
    size_t stage_bytes;          /* bytes of stage */
    recl_t rec;                  /* the input record */
} wsl_t;

/* State of one forward on one rank. */
typedef struct flux_run {
    const wf_flux_shard_t *s;    /* weights */
    const wf_flux_config_t *cfg; /* = &s->cfg */
    const wf_flux_job_t *job;    /* the job */
    const wf_fwd_group_t *grp;  /* communicators */
    const wf_backend_ops_t *ops; /* backend */
    wf_backend_ctx_t *ctx;       /* its context */
    geo_t g;                     /* sizes */
    wsl_t W;                     /* workspace regions */
    unsigned char *ws;           /* workspace base (backend memory) */
    unsigned char *hws;          /* host workspace base (device backend) */
    bool dev;                    /* the backend computes on device memory */
    int t, i;                    /* tp rank, seq index */
    bool root;                   /* t == 0 and i == 0 */
    wf_linear_env_t lin;         /* the linear layers' backend, tp group
                                    and scratch (Xc, Y, G, lws of W) */
} run_t;

/* The floats at byte offset off of the run's workspace. */
static inline float *fp(const run_t *x, size_t off) { return (float *)(void *)(x->ws + off); }

/* Element i of an activation region (byte offset off) in the run's
 * activation dtype (geo_t.adt). */
static inline void *ap(const run_t *x, size_t off, int64_t i)
{
    return x->ws + off + (size_t)i * wf_dtype_size(x->g.adt);
}

/* The counts of the v-collectives: 2 * max(P, T) size_t of host memory. */
static inline size_t *flux_meta(const run_t *x)
{
    return (size_t *)(void *)((x->dev ? x->hws : x->ws) + x->W.meta);
}

/* Whether a backend computes on device memory (the forward's workspace
 * and the shards are then device memory). */
static inline bool flux_on_device(const wf_backend_ops_t *ops) { return ops->copy_h2d != NULL; }

/* ---- tokens (flux_forward.c) ------------------------------------------- */

/* Seq rank j's text tokens [*t0, *t0 + *lt) and image tokens [*i0, *i0 +
 * *li): its joint rows, cp_attention's seq shard of the joint sequence
 * (L_j tokens: tensor_split's sizes of S), hold piece j of the
 * tensor_split of S_txt into P, then L_j - lt image tokens, the image
 * pieces tiling S_img in rank order. The joint rows need not be the
 * shard's global positions: the attention has no mask, so only their
 * number must match. When P divides both, lt = S_txt / P and li = S_img
 * / P. WF_E_INTERNAL where li would be negative (cannot happen: L_j and
 * lt are tensor_split sizes of S >= S_txt) or the job is refused. */
wf_status_t flux_tokens(const geo_t *g, int j, int64_t *t0, int64_t *lt, int64_t *i0,
                        int64_t *li);

/* ---- inputs and embeddings (flux_embed.c) ------------------------------ */

/* Inputs to every rank's input record (the root fills them). */
wf_status_t flux_distribute(run_t *x);

/* RoPE tables (L, D) of this rank's joint rows (the record's ids). */
wf_status_t flux_rope_tables(run_t *x);

/* temb and semb = silu(temb) from the timestep, guidance and pooled
 * projections. */
wf_status_t flux_embed_time(run_t *x);

/* ---- blocks (flux_blocks.c) -------------------------------------------- */
/* The cp job of the forward's attention, Hl heads per tp rank, without
 * pointers. */
wf_cp_job_t flux_cp_job_of(const geo_t *g, int64_t Hl);

/* Kernel params of the single-rank attention (P = 1), without pointers. */
wf_attn_params_t flux_attn_params_of(const geo_t *g, int64_t Hl);

/* Whether the attention goes through cp_attention (P > 1; its device
 * mode on a device backend) rather than the backend's kernel. */
bool flux_via_cp(const geo_t *g, const wf_backend_ops_t *ops);

/* The activation dtype of a forward of shard s (geo_t.adt): BF16 on a
 * device backend when every linear whose input is such an activation
 * holds bf16 weights (the GEMM then reads it as it is), else F32. */
wf_dtype_t flux_act_dtype(const wf_flux_shard_t *s, bool dev);

/* dst rows = LayerNorm(src rows) * (1 + scale[b]) + shift[b] (AdaLN,
 * ops->modln): nbatch batches of `per` rows of width C (contiguous), dst
 * in the activation dtype (the next linear's x); row b of mod (stride
 * ld_mod) holds shift at shift_off and scale at scale_off. */
wf_status_t flux_ln_mod(run_t *x, const float *src, void *dst, int64_t nbatch, int64_t per,
                        const float *mod, int64_t ld_mod, int64_t shift_off,
                        int64_t scale_off);

/* diffusers' FluxTransformerBlock on the stream. */
wf_status_t flux_double_block(run_t *x, const wf_flux_double_t *d);

/* diffusers' FluxSingleTransformerBlock on the stream. */
wf_status_t flux_single_block(run_t *x, const wf_flux_single_t *sb);

#endif /* WF_FLUX_RUN_H */
