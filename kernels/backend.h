/* backend.h — the ops table every compute backend implements.
 *
 * A backend is a table of function pointers (wf_backend_ops_t) plus an
 * opaque per-device context (wf_backend_ctx_t) that the worker thread of
 * that device creates, owns and uses alone. The CPU backend is the
 * reference; the CUDA backend sits beside it with the same entries.
 *
 * Layout of attention tensors, as in diffusers:
 *   q    (B, Sq,  Hq,  D)      k, v (B, Skv, Hkv, D), Hkv divides Hq
 *   out  (B, Sq,  Hq,  D)      lse  (B, Sq, Hq) f32, natural log
 * Query head h reads K/V head h / (Hq / Hkv) (GQA), unless an explicit
 * mapping is given (gqa_group > 0, for a rank holding a slice of the
 * heads of a larger problem on local buffers): local query head h reads
 * local K/V head (q_head_base + h) / gqa_group - kv_head_base, which must
 * lie in [0, Hkv) for every computed head; Hkv then need not divide Hq.
 * Causal masking uses global positions: query row i (global position
 * q_offset + i) sees key j (global position kv_offset + j) iff
 * kv_offset + j <= q_offset + i. A row that sees no key gets out = 0 and
 * lse = -inf, which the log-sum-exp merge of ring steps treats as empty.
 *
 * Where the tensors live: for the CPU backend every pointer of
 * wf_attn_params_t (q, k, v, out, lse, workspace) is host memory. For the
 * CUDA backend they are DEVICE pointers of the context's device (16-byte
 * aligned; buffers from dev_alloc are), and attention() is asynchronous
 * on the context's stream: the daemon stages the frames with copy_h2d,
 * runs attention, copies back with copy_d2h and calls synchronize.
 * Entries marked "(optional)" are NULL for the CPU backend (ggml style:
 * the caller checks before use); the CUDA backend fills them all.
 *
 * Backends never log above debug; they return a status.
 */
#ifndef WF_BACKEND_H
#define WF_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#ifdef __cplusplus /* the CUDA backend (.cu) is compiled as C++ */
extern "C" {
#endif

typedef struct wf_backend_ctx wf_backend_ctx_t;

/* One attention call: a contiguous range of query heads of one job. */
typedef struct wf_attn_params {
    int64_t B, Sq, Skv, Hq, Hkv, D;  /* shapes, see the file comment */
    int64_t h_begin, h_end;          /* query heads computed: [h_begin, h_end) */
    float scale;                     /* softmax scale (already resolved) */
    bool causal;                     /* apply the causal mask */
    int64_t q_offset, kv_offset;     /* global positions for the mask */
    const void *q;  wf_dtype_t q_dtype;  /* any alignment */
    const void *k;  wf_dtype_t k_dtype;  /* any alignment */
    const void *v;  wf_dtype_t v_dtype;  /* any alignment */
    void *out;      wf_dtype_t out_dtype; /* full (B, Sq, Hq, D); only the head range is written */
    float *lse;                      /* full (B, Sq, Hq) or NULL; only the head range is written */
    /* Explicit GQA mapping; all zero = the default h / (Hq / Hkv). */
    int64_t gqa_group;               /* query heads per K/V head of the global problem; 0 = Hq / Hkv */
    int64_t q_head_base;             /* global index of local query head 0 (with gqa_group > 0) */
    int64_t kv_head_base;            /* global index of local K/V head 0 (with gqa_group > 0) */
} wf_attn_params_t;

typedef struct wf_backend_ops {
    const char *name;   /* "cpu", "cuda" */

    /* Create the context of device `index` (its memory budget in bytes:
     * 0 = the backend decides). Called on the worker thread that will use
     * it. Caller owns *ret_ctx. */
    wf_status_t (*ctx_new)(int index, uint64_t memory_budget,
                           wf_backend_ctx_t **ret_ctx);

    /* Free a context; sets *ctx to NULL; accepts NULL. */
    void (*ctx_destroy)(wf_backend_ctx_t **ctx);

    /* Device memory for jobs: total bytes and bytes free now. */
    void (*memory_info)(const wf_backend_ctx_t *ctx, uint64_t *ret_total,
                        uint64_t *ret_free);

    /* Bytes of workspace that attention() needs for these params. Pure
     * function of the shapes; used for memory admission before a job is
     * accepted. */
    size_t (*attention_workspace)(const wf_attn_params_t *p);

    /* Flash-style attention forward (tiled, online softmax, fp32
     * accumulation) for the heads [p->h_begin, p->h_end). `workspace` holds
     * attention_workspace(p) bytes, 64-byte aligned, owned by the caller.
     * Returns WF_OK or WF_E_BAD_ARGUMENT for inconsistent params. */
    wf_status_t (*attention)(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                             void *workspace);

    /* ---- device memory (all optional: NULL where host memory is used) -- */

    /* (optional) Per-job device scratch of `bytes` bytes, 256-byte aligned,
     * taken from the context's arena (allocated once at ctx_new; nothing
     * is allocated here). WF_E_NO_MEMORY when the arena cannot hold it
     * (nothing changes). Borrowed until dev_reset. */
    wf_status_t (*dev_alloc)(wf_backend_ctx_t *ctx, size_t bytes,
                             void **ret_ptr);

    /* (optional) Release every dev_alloc buffer of the context at once
     * (end of a job). Call after synchronize. */
    void (*dev_reset)(wf_backend_ctx_t *ctx);

    /* (optional) Copy host -> device / device -> host, asynchronous on the
     * context's stream (host memory should be pinned for overlap; any host
     * memory works). Complete after synchronize. */
    wf_status_t (*copy_h2d)(wf_backend_ctx_t *ctx, void *dst, const void *src,
                            size_t bytes);
    wf_status_t (*copy_d2h)(wf_backend_ctx_t *ctx, void *dst, const void *src,
                            size_t bytes);

    /* (optional) Wait for everything queued on the context's stream; the
     * first asynchronous error (a failed kernel) comes back here as
     * WF_E_INTERNAL. */
    wf_status_t (*synchronize)(wf_backend_ctx_t *ctx);

    /* (optional) The context's native stream (cudaStream_t as void *), for
     * a comm backend that must order its operations with the kernels
     * (comm_nccl). Borrowed until ctx_destroy. */
    void *(*native_stream)(wf_backend_ctx_t *ctx);

    /* (optional) Fused log-sum-exp merge of a ring step into accumulators,
     * one pass, on the backend's memory: for each of `rows` rows,
     *   lse_p = -inf: unchanged;  lse_a = -inf: (out_a, lse_a) = (out_p, lse_p);
     *   else w = sigmoid(lse_p - lse_a), out_a -= w * (out_a - out_p),
     *        lse_a = max + log1p(exp(-|lse_a - lse_p|)).
     * acc_out, part_out (rows, D) f32; acc_lse, part_lse (rows) f32.
     * round_dtype F16 / BF16 rounds out_p and the new out_a to that dtype
     * after each step (convert_to_fp32 off), F32 keeps fp32. Exactly
     * tensor.h's wf_lse_merge_rows, the host reference. */
    wf_status_t (*lse_merge)(wf_backend_ctx_t *ctx, float *acc_out,
                             float *acc_lse, const float *part_out,
                             const float *part_lse, int64_t rows, int64_t D,
                             wf_dtype_t round_dtype);

    /* (optional) dst[i] = (dst_dtype)src[i] for n elements, on the
     * backend's memory (round-to-nearest-even, as tensor.h). */
    wf_status_t (*convert)(wf_backend_ctx_t *ctx, void *dst,
                           wf_dtype_t dst_dtype, const void *src,
                           wf_dtype_t src_dtype, size_t n);

    /* (optional) dst[i] = value for n f32 elements of the backend's
     * memory (accumulators: 0, lse: -inf), asynchronous like the rest. */
    wf_status_t (*fill_f32)(wf_backend_ctx_t *ctx, float *dst, float value,
                            size_t n);
} wf_backend_ops_t;

/* The CPU reference backend (OpenBLAS). Always available. Its ctx_new
 * calls openblas_set_num_threads(1), which is process-wide: every BLAS call
 * then runs on its caller's thread (one worker thread per virtual device).
 * Contexts share no mutable state, so workers run attention() concurrently.
 * memory_info reports free == total (the budget given to ctx_new, or half
 * the physical RAM when 0): the daemon accounts its reservations itself.
 * Tiles: 128 query rows x 512 keys; attention_workspace() is
 * 4 * (2 * Skv * D + 2 * tq * D + tq * tk + 2 * tq) bytes, each region
 * rounded up to 64 bytes (tq = min(Sq, 128), tk = min(Skv, 512)). */
const wf_backend_ops_t *wf_backend_cpu(void);

/* The CUDA backend (kernels/cuda): NULL when weft was built without CUDA,
 * so callers need no #ifdef. Pointers are device pointers (see above);
 * head dims 64 and 128. */
const wf_backend_ops_t *wf_backend_cuda(void);

/* CUDA devices the process sees (cudaGetDeviceCount), for the daemon's
 * settings: WF_OK with *ret_count (0 when there is no GPU);
 * WF_E_UNAVAILABLE when weft was built without CUDA or the runtime fails
 * (no driver, a driver too old). *ret_why (may be NULL) gets a static
 * sentence on failure ("built without CUDA", the CUDA error string). */
wf_status_t wf_cuda_device_count(int *ret_count, const char **ret_why);

/* Free and total memory of CUDA device `index` (cudaMemGetInfo on the
 * calling thread, which then has that device current), for splitting one
 * GPU between several workers. WF_E_UNAVAILABLE as above, WF_E_BAD_ARGUMENT
 * for an index out of range. */
wf_status_t wf_cuda_device_memory(int index, uint64_t *ret_free,
                                  uint64_t *ret_total);

/* Floating-point operations of the attention of params p over all heads
 * (4 * B * Hq * Sq * Skv * D, halved-ish by the mask when causal: counts
 * only the visible score elements). For benchmarks and reports. */
double wf_attention_flops(const wf_attn_params_t *p);

#ifdef __cplusplus
}
#endif

#endif /* WF_BACKEND_H */
