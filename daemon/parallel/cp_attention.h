/* cp_attention.h — context-parallel attention (ring, ulysses, unified /
 * USP) over the comm data plane, as the per-rank step of an attention job.
 *
 * Layout as in diffusers: q (B, Sq, Hq, D), k, v (B, Skv, Hkv, D),
 * out (B, Sq, Hq, D), lse (B, Sq, Hq) f32, natural log. One context-
 * parallel group serves the query heads [hq_begin, hq_end) of the job
 * (tensor-parallel ranks split the heads: each tp slice is its own group);
 * with GQA (Hkv < Hq, query head h reads K/V head h / (Hq / Hkv)) the
 * slice's K/V heads follow from that mapping.
 *
 * The group's root (seq index 0) alone reads the full inputs and writes
 * the full outputs (only the slice's heads); it scatters the shards over
 * the seq communicator and gathers the results back. Other ranks never
 * touch the tensor pointers of the job (across processes they have none).
 *
 * Local mode (job.local): every rank passes its OWN sequence shard instead
 * — q (B, Lq_s, Hq, D), k, v (B, Lkv_s, Hkv, D), out (B, Lq_s, Hq, D), lse
 * (B, Lq_s, Hq) — whose rows are exactly the rank's seq shard of
 * wf_cp_attention_segments(seq_index, ring_holding = false), in segment
 * order; the slice must be every head (hq_begin 0, hq_end Hq). Nothing is
 * scattered from or gathered to the root; the all-to-alls, the ring and
 * the merge are the same, so each rank's rows come out exactly as the root
 * mode writes them. For a model whose token-wise layers already run on
 * sequence shards (models/flux/flux_forward.h).
 *
 * Sequence plan (the same pure function on every rank): the ring group
 * holds the sequence in R ring holdings — without load balancing the
 * tensor_split of S into R*U shards, ring rank r holding shards
 * r*U .. r*U+U-1 (one contiguous range); with load balancing (zigzag) the
 * tensor_split of S into 2R chunks, ring rank r holding chunks r and
 * 2R-1-r. Seq rank (r, u) holds piece u of the tensor_split of ring
 * holding r into U. Queries and keys are planned alike (Sq and Skv
 * separately). Ulysses splits the slice's heads into U contiguous ranges
 * as even as possible (first ones one more); K/V heads travel with the
 * query heads that read them (replicated when several ranges need one).
 *
 * Device mode (wf_cp_attention_run_dev): the communicators move device
 * memory of the backend (NCCL, or a host comm behind comm_staged.h) and
 * every buffer of the run lives on the device: the workspace is device
 * memory (dev_alloc), kernels read and write it in place, the merge,
 * the accumulator fill and the final conversion are the backend's
 * lse_merge / fill_f32 / convert (or, where the backend's
 * attention_merge_ok answers true, the kernel's merge mode, below). A small host workspace holds the counts
 * of the collectives and, on the root, the staging of its scatter and
 * gather (the job's tensors are host memory: the root packs a shard on
 * the host, copies it up and sends it; it receives a result on the
 * device, copies it down and unpacks it). In local mode the caller's
 * shards are device buffers too, moved by the backend's copy_rows (the
 * host workspace then holds only the counts).
 *
 * Merge in the kernel: where ops->attention_merge_ok answers
 * true (the CPU and CUDA backends), each ring step's kernel merges its
 * rows into the accumulator itself (backend.h merge mode) instead of
 * writing a partial result that lse_merge reads back, and the last step
 * also writes the out holding in out_dtype (final_out), so neither the
 * partial buffers nor the merge pass nor the final conversion exist; the
 * rows the last step does not reach (a fully masked piece) are converted
 * apart. The results are the same bits as without (the merge is the same
 * formula; on the CPU the same code). With R = 1 the kernel writes the
 * out holding and the lse directly on every backend.
 *
 * No logging, no globals, no allocation: all memory is the caller's
 * workspace, whose size wf_cp_attention_workspace computes in advance.
 */
#ifndef WF_CP_ATTENTION_H
#define WF_CP_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm/comm.h"
#include "weft.h"

/* How K/V shards move round the ring. */
typedef enum wf_cp_rotate {
    WF_CP_ROTATE_ALLGATHER = 0, /* gather every K/V shard first (memory x R) */
    WF_CP_ROTATE_ALLTOALL = 1   /* pass one shard per step, overlapped (memory 2/R) */
} wf_cp_rotate_t;

/* One attention job as every rank of the group sees it. Shapes, options
 * and dtypes must be identical on every rank; the tensor pointers are
 * read on the root only (may be NULL elsewhere). */
typedef struct wf_cp_job {
    int64_t B, Sq, Skv, Hq, Hkv, D;  /* full problem (see the file comment) */
    int64_t hq_begin, hq_end;        /* query heads this group serves */
    float scale;                     /* softmax scale (already resolved) */
    bool causal;                     /* top-left: query i sees keys j <= i */
    wf_dtype_t q_dtype, k_dtype, v_dtype; /* input dtypes (f32, f16, bf16) */
    wf_dtype_t out_dtype;            /* dtype of out */
    bool return_lse;                 /* write lse (then lse != NULL on the root) */
    wf_cp_rotate_t rotate_method;    /* ring K/V movement */
    bool convert_to_fp32;            /* merge ring steps in f32, else in q_dtype */
    bool ring_anything;              /* any Sq / Skv (tensor_split sharding) */
    bool ulysses_anything;           /* any head count per ulysses rank */
    bool load_balance;               /* zigzag ring holdings (for causal; R > 1) */
    bool fp8;                        /* every kernel call in fp8 (backend.h
                                        wf_attn_params_t.fp8); the caller checked
                                        attention_fp8_ok */
    bool local;                      /* local mode (file comment): every rank's
                                        pointers are its own shards, all heads */
    bool caller_syncs;               /* device mode: the caller keeps the
                                        workspaces and waits for the stream
                                        itself (a forward, once at its end), so
                                        the call returns with its work queued,
                                        not done; a kernel error surfaces at
                                        the caller's wait */
    const void *q;                   /* root: (B, Sq, Hq, D) q_dtype, any alignment
                                        (local: every rank, (B, Lq_s, Hq, D)) */
    const void *k;                   /* root: (B, Skv, Hkv, D) k_dtype, any alignment
                                        (local: (B, Lkv_s, Hkv, D)) */
    const void *v;                   /* root: (B, Skv, Hkv, D) v_dtype, any alignment
                                        (local: as k) */
    void *out;                       /* root: (B, Sq, Hq, D) out_dtype, any alignment
                                        (local: (B, Lq_s, Hq, D)) */
    float *lse;                      /* root: (B, Sq, Hq) f32, or NULL if !return_lse
                                        (local: (B, Lq_s, Hq)) */
    /* Step boundaries (NULL: none): every rank calls boundary(arg, i,
     * false) before ring step i and once after the last (i = 0..R, also
     * a rank whose ring group has no heads), with nothing of its own in
     * flight. It must return the same on every rank of the group at the
     * same i (the caller agrees: e.g. wf_djob_boundary); a status other
     * than WF_OK stops the run there: it returns that status on every
     * rank and aborts nothing (no peer is left in a collective). Inside a
     * ring step the attention runs in chunks of query rows, and before
     * each a rank asks boundary(arg, i + 1, true): not WF_OK means every
     * rank will stop at boundary i + 1 (the caller decided it ahead), so
     * the rest of the step's compute is skipped (its collectives still
     * run). For deadlines and cancels. */
    wf_status_t (*boundary)(void *arg, int64_t step, bool ahead);
    void *boundary_arg;
} wf_cp_job_t;

/* This rank's communicators. Borrowed for the duration of a call. */
typedef struct wf_cp_group {
    wf_comm_t *seq;      /* flattened ring x ulysses, index ring_c * U + ulysses_c;
                            may be NULL when R * U == 1 */
    wf_comm_t *ring;     /* same ulysses coordinate, index ring_c; NULL when R == 1 */
    wf_comm_t *ulysses;  /* same ring coordinate, index ulysses_c; NULL when U == 1 */
    int ring_degree;     /* R >= 1 */
    int ulysses_degree;  /* U >= 1 */
} wf_cp_group_t;

/* One piece of a rank's holding of the sequence: global positions
 * [start, start + len), stored at local rows [local, local + len). */
typedef struct wf_cp_seg {
    int64_t start; /* global position of the first token */
    int64_t len;   /* tokens (may be 0) */
    int64_t local; /* row of the first token in the holding */
} wf_cp_seg_t;

/* Largest number of segments of one holding (ring or seq shard). */
#define WF_CP_MAX_SEGS 2

/* Validate a job for ring degree R and ulysses degree U before anything
 * runs (a bad job must never reach a collective). Pure. Errors, with a
 * one-line message in err (errlen bytes; "" on success; err may be NULL):
 *   WF_E_BAD_ARGUMENT: degrees < 1 or R * U too large, bad head slice
 *     (in local mode: any slice but every head),
 *     Hkv not dividing Hq, a bad dtype or rotate method, non-positive or
 *     overflowing shapes;
 *   WF_E_BAD_SHAPE: without ring_anything, Sq or Skv not divisible by
 *     R * U ("Tensor size along dimension to be sharded must be divisible
 *     by mesh size", as diffusers); without ulysses_anything, the slice's
 *     head count not divisible by U.
 * With the anything flags every shape is accepted, also both at once and
 * with R > 1 and U > 1 (diffusers refuses those combinations). */
wf_status_t wf_cp_attention_check(const wf_cp_job_t *job, int R, int U,
                                  char *err, size_t errlen);

/* Bytes of workspace that wf_cp_attention_run needs on any rank of a
 * group of degrees (R, U) with backend `ops` (the maximum over the ranks,
 * so the daemon can admit one figure per device). Pure. Returns 0 when
 * wf_cp_attention_check refuses the job, SIZE_MAX on overflow. */
size_t wf_cp_attention_workspace(const wf_cp_job_t *job, int R, int U,
                                 const wf_backend_ops_t *ops);

/* Segments of the sequence held by seq rank `seq_index` (= ring_c * U +
 * ulysses_c) after the scatter (`ring_holding` false), or by its whole
 * ring rank (`ring_holding` true: what its attention covers), for the
 * queries (`keys` false, length Sq) or the keys (`keys` true, Skv).
 * Writes up to WF_CP_MAX_SEGS entries into ret_segs and their number into
 * *ret_n. Pure; WF_E_BAD_ARGUMENT for a job check() refuses or an index
 * out of range. Used by the run and by tests of the load balance. */
wf_status_t wf_cp_attention_segments(const wf_cp_job_t *job, int R, int U,
                                     int seq_index, bool ring_holding,
                                     bool keys, wf_cp_seg_t *ret_segs,
                                     int *ret_n);

/* Run the job on this rank; every rank of the group calls it with the
 * same job (pointers: root only) and its own communicators. `workspace`
 * is 64-byte aligned, `bytes` >= wf_cp_attention_workspace(job, R, U,
 * ops), owned by the caller, contents unspecified before and after.
 * (In local mode every rank's tensor pointers are read and written, and
 * the scatter and gather below are local copies.)
 * Steps: the root scatters shards over seq; ulysses all-to-all (sequence
 * -> heads) over ulysses; ring attention over ring (all-gather or
 * rotation overlapped with compute; zigzag with load_balance; fully
 * masked (q, kv) pieces skipped; partial results merged with their lse);
 * reverse all-to-all; gather to the root, which writes its heads of out
 * and lse. A backend on device memory (dev_alloc set) takes
 * wf_cp_attention_run_dev instead. Returns WF_OK; WF_E_BAD_ARGUMENT when
 * check() refuses the job, the backend is on device memory, or the group
 * does not match (R, U); WF_E_BAD_ARGUMENT for a short workspace
 * or missing root tensors (local mode: this rank's); a comm error (WF_E_ABORTED) or a backend
 * error. On any error after validation this rank aborts the group's
 * world (wf_comm_abort) so that no peer waits forever in a collective;
 * validation that every rank computes alike fails on every rank at once
 * and aborts nothing. */
wf_status_t wf_cp_attention_run(const wf_cp_job_t *job,
                                const wf_cp_group_t *group,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, void *workspace,
                                size_t bytes);

/* Device mode (file comment): bytes of device workspace (*ret_dev) and of
 * host workspace (*ret_host) that wf_cp_attention_run_dev needs on any
 * rank (the maxima over the ranks). ops must have dev_alloc, copy_h2d,
 * copy_d2h, synchronize, lse_merge, convert and fill_f32, and copy_rows
 * for a local job. Pure. WF_OK; WF_E_BAD_ARGUMENT when check() refuses
 * the job or ops lacks an entry; WF_E_NO_MEMORY on overflow. */
wf_status_t wf_cp_attention_workspace_dev(const wf_cp_job_t *job, int R, int U,
                                          const wf_backend_ops_t *ops,
                                          size_t *ret_dev, size_t *ret_host);

/* wf_cp_attention_run in device mode: `group`'s communicators take
 * device pointers; dev_ws (256-byte aligned, dev_bytes) is device memory
 * of ctx, host_ws (64-byte aligned, host_bytes) host memory, sizes from
 * wf_cp_attention_workspace_dev. The job's tensors (root) are host
 * memory as in wf_cp_attention_run; in local mode they are every rank's
 * own device buffers of ctx. Everything queued on the backend's
 * stream is complete when it returns (a kernel error comes back as the
 * backend's synchronize reports it). Errors and aborts as
 * wf_cp_attention_run. */
wf_status_t wf_cp_attention_run_dev(const wf_cp_job_t *job,
                                    const wf_cp_group_t *group,
                                    const wf_backend_ops_t *ops,
                                    wf_backend_ctx_t *ctx, void *dev_ws,
                                    size_t dev_bytes, void *host_ws,
                                    size_t host_bytes);

#endif /* WF_CP_ATTENTION_H */
