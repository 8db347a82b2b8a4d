/* family_run.h — the daemon's half of a model family (the pure half:
 * modelfiles/family.h): its shards on a worker's backend and its forward
 * on one rank of a replica. The generic code (models.c, jobs/forward.c,
 * the cluster) reaches a family only through this table, found from the
 * model's config (wf_family_run_of). modelfiles/FAMILIES.md: what a
 * family supplies and the checklist of a new one. */
#ifndef WF_FAMILY_RUN_H
#define WF_FAMILY_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm/comm.h"
#include "family.h"
#include "model_host.h"
#include "models/shard.h"
#include "parallel/cp_attention.h"
#include "proto.h"
#include "tp_plan.h"
#include "weft.h"

/* This rank's communicators for a forward (NULL where the degree is 1). */
typedef struct wf_fwd_group {
    wf_comm_t *tp;        /* same dp, ring, ulysses; index = tp coordinate */
    wf_comm_t *seq;       /* same dp, tp; index ring_c * U + ulysses_c */
    wf_comm_t *ring;      /* same dp, ulysses, tp */
    wf_comm_t *ulysses;   /* same dp, ring, tp */
    int tp_degree, ring_degree, ulysses_degree;
} wf_fwd_group_t;

/* The first-block cache of one rank (diffusers' apply_first_block_cache)
 * across the steps of a denoising session: after the head block (the
 * first) the relative L1 change of its output residual on the image /
 * video rows since the session's last computed step, summed over the seq
 * ranks so every rank decides alike, decides whether the other blocks run
 * (change > threshold, or nothing held, or threshold 0) or are replaced by
 * the residual they added at that step (the stream after the last block
 * minus the stream after the head, text rows included). Buffers on the
 * backend's memory, held by the worker between steps (the session's
 * state); residuals are kept negated (input - output: one axpy), which
 * changes no sum of absolute values. */
typedef struct wf_fbc {
    float *res[2];       /* head residuals: res[cur] the last computed step's */
    float *head;         /* the stream after the head block, that step */
    float *tail;         /* the stream after the last block minus head, that step */
    double *scratch;     /* 16 bytes for change_sums and the sums' reduction */
    size_t cap;          /* floats of each of the four */
    size_t res_n, state_n; /* floats in use (the shapes of the steps held) */
    int cur;
    bool held;           /* res[cur], head and tail hold a computed step */
    double threshold;    /* this step's (0: compute) */
    bool reused;         /* out: the blocks after the head were not run */
    double change;       /* out: the change measured (NAN: none) */
} wf_fbc_t;

/* Bytes of a cache state of `floats` per buffer (four buffers and the
 * scratch, each 256-byte aligned from a 256-byte aligned block). */
size_t wf_fbc_bytes(size_t floats);

/* Lay a state out on `block` (wf_fbc_bytes(floats) bytes); nothing held. */
void wf_fbc_init(wf_fbc_t *f, void *block, size_t floats);

/* Before the head block: res_rows (res_n floats, the image / video rows of
 * the stream) copied aside; a step whose sizes differ from those held
 * drops what is held. WF_E_INTERNAL when the sizes exceed the state's. */
wf_status_t wf_fbc_head_begin(wf_fbc_t *f, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                              const float *res_rows, size_t res_n, size_t state_n);

/* After the head block: the residual, the change (reduced over seq when
 * not NULL), the decision into *skip. Skipping, stream (state_n floats)
 * gets the held tail added: it is the output of the last block then. */
wf_status_t wf_fbc_head_end(wf_fbc_t *f, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                            wf_comm_t *seq, const float *res_rows, float *stream, bool *skip);

/* After the last block of a computed step: the tail residual held. */
wf_status_t wf_fbc_tail_end(wf_fbc_t *f, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                            const float *stream);

/* One forward as every rank sees it: the inputs in the model's schema
 * order (bound by wf_schema_bind), the outputs' descriptors, the data
 * on the root only (NULL elsewhere). */
typedef struct wf_fwd_io {
    const wf_schema_binding_t *bind;
    uint32_t n_in;        /* the schema's inputs */
    const wf_tensor_desc_t *in[WF_SCHEMA_MAX_INPUTS];  /* NULL: an optional
                                                          input absent */
    const void *in_data[WF_SCHEMA_MAX_INPUTS];
    uint32_t n_out;
    const wf_tensor_desc_t *out[WF_SCHEMA_MAX_OUTPUTS];
    void *out_data[WF_SCHEMA_MAX_OUTPUTS];
    bool fp8;             /* attention in fp8 (the caller checked the backend) */
    bool alltoall;        /* the ring passes one K/V shard per step
                             (rotate_method alltoall); else it gathers them */
    /* Layer boundaries (NULL: none), as wf_cp_job_t.boundary: every rank
     * calls boundary(arg, i) before block i with nothing in flight; the
     * same answer on every rank; not WF_OK stops the run there. */
    wf_status_t (*boundary)(void *arg, int64_t step, bool ahead);
    void *boundary_arg;
    wf_fbc_t *fbc;        /* this rank's first-block cache (NULL: none) */
} wf_fwd_io_t;

typedef struct wf_family_run {
    const wf_family_t *fam;
    /* Whether backend ops can run this model at all (its kernels' limits). */
    wf_status_t (*backend_check)(const void *cfg, const wf_backend_ops_t *ops,
                                 char *err, size_t err_len);
    /* Whether plan cuts every module of cfg for tp (allow_unmatched: a
     * rule matching no module is no error, as with a default plan). */
    wf_status_t (*plan_check)(const void *cfg, const wf_tp_plan_t *plan, int tp,
                              bool allow_unmatched, char *err, size_t err_len);
    /* Bytes of one rank's shard: f32 on the CPU; on a device the weights
     * in weight_dtype (device = true). */
    uint64_t (*shard_bytes)(const void *cfg, const wf_tp_plan_t *plan, int tp,
                            bool device, wf_dtype_t weight_dtype);
    /* Cut rank tp_rank's shard from the host copy on backend ops / ctx. */
    wf_status_t (*shard_build)(const wf_model_host_t *host, const wf_tp_plan_t *plan,
                               int tp, int tp_rank, const wf_backend_ops_t *ops,
                               wf_backend_ctx_t *ctx, void **ret, char *err,
                               size_t err_len);
    void (*shard_free)(void **shard);
    /* Where a built shard's pieces live and the bytes it holds. */
    const wf_shard_mem_t *(*shard_mem)(const void *shard);
    /* Check a bound forward against the config and the degrees (what the
     * schema cannot say). */
    wf_status_t (*forward_check)(const void *cfg, const wf_fwd_io_t *io, int tp,
                                 int R, int U, char *err, size_t err_len);
    /* Workspace bytes any rank needs (device or host memory as ops has
     * it; *ret_host: a device backend's host part). SIZE_MAX: overflow. */
    size_t (*workspace)(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U,
                        const wf_backend_ops_t *ops, size_t *ret_host);
    /* Floats per buffer of a first-block cache state on any rank of this
     * forward (the residual stream's size on the rank that holds most).
     * 0: overflow, or a forward the check refuses. */
    size_t (*cache_floats)(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U);
    /* The forward on this rank with its shard. */
    wf_status_t (*run)(const void *shard, const wf_fwd_io_t *io,
                       const wf_fwd_group_t *group, const wf_backend_ops_t *ops,
                       wf_backend_ctx_t *ctx, void *workspace, size_t bytes,
                       void *host_ws, size_t host_bytes);
} wf_family_run_t;

/* Whether a forward's group matches its degrees: each communicator
 * present iff its degree (R * U for seq) is above 1, with that size. */
bool wf_fwd_group_ok(const wf_fwd_group_t *grp);

/* Abort the world of a forward's group (its first communicator), so that
 * no peer waits in a collective after this rank failed. */
void wf_fwd_group_abort(const wf_fwd_group_t *grp);

/* One transformer block of a forward, between two layer boundaries:
 * fn(arg) queues its ops. Through the backend's graphs (backend.h
 * graph_begin / graph_end) when the backend has them and the forward's
 * group has no communicator (tp 1, ring x ulysses 1: nothing in the block
 * calls a comm or waits on the host); otherwise, and whenever the
 * backend says so, fn runs as it is. key (key_bytes bytes) must
 * determine every argument of every op fn queues and anchor be the
 * resident block of the weights it reads (graph_begin's promise): a
 * family builds it from the block's identity, the job's sizes, the
 * workspace base and its layout. A capture that fails (an op refusing
 * inside it, the instantiation) runs fn again uncaptured: the capture
 * queued nothing. Returns fn's status or the backend's. */
wf_status_t wf_fwd_block_run(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                             const wf_fwd_group_t *grp, const void *key, size_t key_bytes,
                             const void *anchor, wf_status_t (*fn)(void *arg), void *arg);

/* The entry a backend with device memory (copy_h2d) lacks for a forward
 * whose inputs and output cross between host and device memory
 * ("copy_d2h", ...), or NULL (none lacking, or the CPU backend). */
const char *wf_fwd_device_entry_missing(const wf_backend_ops_t *ops);

/* The cp job of a model's self-attention over the seq group, without
 * pointers: local mode (each rank passes its own tokens), B batches of S
 * tokens, H heads of D on this tp rank (all of them: scale 1 / sqrt(D)),
 * f32 in and out, the ring rotating its K / V as `alltoall` says, and the
 * anything modes where ring x ulysses = P does not divide S or ulysses U
 * does not divide H (tensor_split's sizes). */
wf_cp_job_t wf_fwd_self_attention(int64_t B, int64_t S, int64_t H, int64_t D, int P, int U,
                                  bool alltoall);

/* The kernel params of an attention of Sq queries against Skv keys, B
 * batches, H heads of D (all of them; scale 1 / sqrt(D)), f32, without
 * pointers. */
wf_attn_params_t wf_fwd_attention_params(int64_t B, int64_t Sq, int64_t Skv, int64_t H,
                                         int64_t D);

/* Seq rank seq_index's tokens [*ret_row0, *ret_row0 + *ret_len) of the
 * query sequence of a local-mode cp job (job's pointers unused) on ring
 * R x ulysses U: its seq shard of wf_cp_attention_segments, one
 * contiguous piece without load balance (tensor_split's sizes where R * U
 * does not divide Sq; all of it when R * U = 1; an empty shard, where
 * Sq < R * U, at Sq). Pure. WF_E_INTERNAL for a
 * job the check refuses or a shard in more than one piece; the outputs
 * are written only on success. */
wf_status_t wf_fwd_seq_tokens(const wf_cp_job_t *job, int R, int U, int seq_index,
                              int64_t *ret_row0, int64_t *ret_len);

/* The daemon's half of family fam, or NULL (a family this daemon cannot
 * run). */
const wf_family_run_t *wf_family_run_of(const wf_family_t *fam);

#endif /* WF_FAMILY_RUN_H */
