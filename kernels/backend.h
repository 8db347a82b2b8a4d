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
 *   (out's query rows may lie ld_out elements apart: wf_attn_params_t)
 * Query head h reads K/V head h / (Hq / Hkv) (GQA), unless an explicit
 * mapping is given (gqa_group > 0, for a rank holding a slice of the
 * heads of a larger problem on local buffers): local query head h reads
 * local K/V head (q_head_base + h) / gqa_group - kv_head_base, which must
 * lie in [0, Hkv) for every computed head; Hkv then need not divide Hq.
 * Causal masking uses global positions: query row i (global position
 * q_offset + i) sees key j (global position kv_offset + j) iff
 * kv_offset + j <= q_offset + i. A row that sees no key gets out = 0 and
 * lse = -inf, which the log-sum-exp merge of ring steps treats as empty.
 * Non-finite inputs as kernels/reference.h (NaN rows; a row whose visible
 * scores are all -inf: out NaN, lse -inf); scale in (0, 2^64].
 *
 * Where the tensors live: for the CPU backend every pointer of
 * wf_attn_params_t (q, k, v, out, lse, workspace) is host memory. For the
 * CUDA backend they are DEVICE pointers of the context's device (16-byte
 * aligned; buffers from dev_alloc are), and attention() is asynchronous
 * on the context's stream: the daemon stages the frames with copy_h2d,
 * runs attention, copies back with copy_d2h and calls synchronize.
 * Entries marked "(optional)" may be NULL (ggml style: the caller checks
 * before use): the CPU backend fills only attention_merge_ok of them;
 * the CUDA backend fills them all.
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
/* A ticket of a transfer on the context's second stream (xfer_* below). */
typedef struct wf_xfer wf_xfer_t;

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
    /* Elements between consecutive query rows (b, s) of out; 0: Hq * D
     * (dense). Otherwise >= Hq * D and a multiple of 8, without merge:
     * the rows of another tensor (a single block's attention output
     * written into its concatenation); a batch of out spans Sq ld_out
     * elements. lse and final_out stay dense. */
    int64_t ld_out;
    float *lse;                      /* full (B, Sq, Hq) or NULL; only the head range is written */
    /* Explicit GQA mapping; all zero = the default h / (Hq / Hkv). */
    int64_t gqa_group;               /* query heads per K/V head of the global problem; 0 = Hq / Hkv */
    int64_t q_head_base;             /* global index of local query head 0 (with gqa_group > 0) */
    int64_t kv_head_base;            /* global index of local K/V head 0 (with gqa_group > 0) */
    /* fp8 (e4m3) tensor-core inputs, off by default: q, k and
     * v are quantized per (batch, head) of this call as kernels/fp8.h
     * says (scale = amax / 448 over the head's finite elements, an
     * infinite element becomes NaN), both products accumulate in f32 and
     * P is rounded to e4m3 for the second; out, lse and every other rule
     * as without. Only a backend whose attention_fp8_ok answers true for
     * the device takes it; attention() of any other refuses it with
     * WF_E_UNSUPPORTED (the daemon refuses such a job before it runs). */
    bool fp8;
    /* Merge mode (the LSE merge of ring steps in the kernel's epilogue),
     * off by default. With merge, out_dtype must be F32 and
     * lse non-NULL: out (B, Sq, Hq, D) holds the running output of
     * earlier ring steps and lse their lse, and the call merges its own
     * result (out_p, lse_p) into them row by row (only the head range)
     * instead of overwriting, exactly as lse_merge below with round_dtype
     * = merge_round (lse_p = -inf: the row unchanged, lse = -inf: the
     * row takes out_p, and so on). Only a backend whose
     * attention_merge_ok answers true takes it; attention() of another
     * refuses it with WF_E_BAD_ARGUMENT. */
    bool merge;
    wf_dtype_t merge_round;          /* F32 (no rounding), F16 or BF16 */
    /* With merge: also write the merged rows converted to final_dtype
     * (round-to-nearest-even, as tensor.h) into final_out (B, Sq, Hq, D),
     * same head range (the last ring step's conversion of the
     * accumulator); NULL: not. Never overlapping out or lse. Ignored
     * without merge. */
    void *final_out;
    wf_dtype_t final_dtype;
} wf_attn_params_t;

/* out's row stride in elements: ld_out, or Hq * D when it is 0. */
static inline int64_t wf_attn_ld_out(const wf_attn_params_t *p)
{
    return p->ld_out ? p->ld_out : p->Hq * p->D;
}

/* Whether ld_out is one backend.h allows: 0, or at least Hq * D, a
 * multiple of 8, and not in merge mode. */
static inline bool wf_attn_ld_out_ok(const wf_attn_params_t *p)
{
    return p->ld_out == 0 ||
           (p->ld_out >= p->Hq * p->D && p->ld_out % 8 == 0 && !p->merge);
}

/* ---- model ops -----------------------------------------------------------
 *
 * The primitives a transformer forward is made of (daemon/models: each
 * model family composes its blocks from them), on the backend's memory:
 * host memory for the CPU backend, device memory of the context for a
 * device backend (asynchronous on its stream, like attention).
 *
 * Common rules, unless an op says otherwise:
 *   - activations, norm weights, tables and statistics are f32, row-major,
 *     rows `ld` elements apart (ld >= the row's width); linear's weights
 *     may be f32, bf16 or f16;
 *   - the activations a device keeps in a low-precision dtype between
 *     ops (a GEMM's input and output, attention's q / k / v) have a
 *     dtype field beside their pointer: linear's x and y, modln's,
 *     rms_norm's and layer_norm's dst, bias_act's y and dst,
 *     head_norm_rope's src and dst. F32 (0, a zeroed struct) is the f32
 *     form; BF16 / F16 hold the value the op computes in f32, rounded to
 *     nearest even once as it is stored (an input in such a dtype is
 *     read exactly). Statistics, biases, modulation and the residual
 *     stream stay f32;
 *   - an output never overlaps an input, except where an op allows
 *     dst == src (then with the same ld): in place;
 *   - a count of rows 0 is a no-op and needs no pointers;
 *   - every op returns WF_OK, or WF_E_BAD_ARGUMENT for inconsistent params
 *     (nothing is touched then; all backends refuse the same params:
 *     ops_check.h), WF_E_INTERNAL for a failed launch, and linear
 *     WF_E_NO_MEMORY when the CPU backend cannot allocate its one-time
 *     conversion tile (bf16 / f16 weights; once per context).
 * The CPU backend is the reference: it computes statistics (norm means,
 * variances, sums of squares) in double, as the fp64 diffusers parity
 * needs; a device backend in f32 with the same formulas.
 *
 * Whether a backend has an op: wf_backend_supports() below (a model family
 * asks at load time for every op it calls). */

/* Most column blocks of one linear's weight (tp_plan.h's WF_TP_MAX_BLOCKS
 * fits: a rowwise packed shard is one view per block). */
#define WF_LINEAR_MAX_BLOCKS 8

/* Activation applied after the bias. */
typedef enum wf_act {
    WF_ACT_NONE = 0,
    WF_ACT_GELU_TANH = 1, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    WF_ACT_SILU = 2,      /* x / (1 + exp(-x)) */
    WF_ACT_GELU = 3       /* 0.5 x (1 + erf(x / sqrt(2))): exact GELU */
} wf_act_t;

/* y = act(x W^T + bias), one linear layer on one rank:
 *   x     (rows, in)  x_dtype, rows ldx elements apart: F32, or the
 *                     weight's dtype when that is BF16 / F16 (the GEMM's
 *                     operand as its producer wrote it: a device backend
 *                     reads it as it is; an f32 x with a bf16 / f16
 *                     weight is rounded to the weight's dtype first)
 *   W     (out, in)   w_dtype, as nwb column blocks: block k is
 *                     (out, wbw[k]) starting at wb[k], rows ldw elements
 *                     apart; sum of wbw = in, and x's columns are the
 *                     blocks' columns in block order (a rowwise tp shard
 *                     viewed in place in the host copy)
 *   bias  (out)       f32 or NULL
 *   y     (rows, out) y_dtype, rows ldy elements apart, never overlapping
 *                     x: F32, or BF16 / F16 (act(x W^T + bias) summed and
 *                     activated in f32, rounded once as stored; only with
 *                     one weight block, nwb = 1: blocks accumulate in y)
 * rows = 0 is a no-op. */
typedef struct wf_linear_params {
    int64_t rows, in, out;
    const void *x;    int64_t ldx;
    wf_dtype_t w_dtype; int64_t ldw;
    uint32_t nwb;
    const void *wb[WF_LINEAR_MAX_BLOCKS];
    int64_t wbw[WF_LINEAR_MAX_BLOCKS];
    const float *bias;
    wf_act_t act;
    void *y;          int64_t ldy;
    wf_dtype_t x_dtype;              /* F32 (0) or w_dtype (BF16 / F16) */
    wf_dtype_t y_dtype;              /* F32 (0), BF16 or F16 */
} wf_linear_params_t;

/* Modulated LayerNorm (AdaLN), rows in nbatch groups of per:
 *   dst row (b, r) = LN(src row (b, r)) * (1 + scale[b]) + shift[b],
 *   LN(x) = (x - mean(x)) / sqrt(var(x) + eps), no affine, biased var
 *   src, dst  nbatch x per rows of C (row stride ld_src / ld_dst; dst may
 *             be src when dst_dtype is F32); src f32, dst dst_dtype (the
 *             following linear's bf16 x, written by the norm itself)
 *   shift, scale  (nbatch, C), rows ld_mod elements apart (the chunks of
 *             an AdaLN linear's output: shift = mod + k C, ...), apart
 *             from dst
 * A modulation per sequence, per batch row (per = tokens), or per token
 * (nbatch = tokens, per = 1). */
typedef struct wf_modln_params {
    int64_t nbatch, per, C;
    const float *src; int64_t ld_src;
    void *dst;        int64_t ld_dst;
    const float *shift, *scale; int64_t ld_mod;
    float eps;
    wf_dtype_t dst_dtype;            /* F32 (0), BF16 or F16 */
} wf_modln_params_t;

/* Per-head RMSNorm and rotary embedding, writing attention's (B, L, H, D)
 * order from a projection's rows (a stream of a joint sequence: rows
 * row0 .. row0 + per of each batch's L):
 *   src   nbatch x per rows of H * D (row stride ld_src) in src_dtype (a
 *         projection's output as its GEMM stored it): row (b, s)
 *   dst   row (b, s) goes to dst + (b * L + row0 + s) * H * D elements
 *         of dst_dtype (F32, or BF16 / F16: attention's q / k / v as the
 *         device's tensor-core kernels read them); never overlapping src
 *   norm  (D) RMSNorm weight of every head, or NULL: no norm
 *         (x / sqrt(mean over the head's D of x^2 + eps) * w)
 *   cos, sin  (L, D) tables (rope_table, rope_grid), or NULL: no
 *         rotation; row row0 + s is the token's; pairs (2j, 2j+1) rotate
 *         as (x0 c - x1 s, x1 c + x0 s) (diffusers' use_real, repeat-
 *         interleaved tables: the complex / interleaved RoPE of FLUX and
 *         Wan alike)
 * A norm over the whole row (all heads) is rms_norm, then this op with
 * norm NULL for the rotation and the reorder. */
typedef struct wf_headrope_params {
    int64_t nbatch, per, L, row0, H, D;
    const void *src;  int64_t ld_src;
    void *dst;
    const float *norm;
    const float *cos, *sin;
    float eps;
    wf_dtype_t dst_dtype;            /* F32 (0), BF16 or F16 */
    wf_dtype_t src_dtype;            /* F32 (0), BF16 or F16 */
} wf_headrope_params_t;

/* RMSNorm over whole rows, with an optional elementwise weight:
 *   dst row r = src row r / sqrt(ss_r / width + eps) * weight
 *   src, dst  (rows, n), rows ld_src / ld_dst apart; src f32, dst
 *             dst_dtype (attention's q / k, written by the norm itself);
 *             dst may be src when dst_dtype is F32
 *   weight    (n) or NULL (no affine)
 *   sumsq     NULL: ss_r is the sum of src row r's squares over its n
 *             elements and width must be 0 (meaning n);
 *             else (rows): ss_r = sumsq[r], the sum of squares over the
 *             whole row of width elements (width >= n), of which src
 *             holds n
 * Split over tensor parallelism (each rank holds n = width / tp columns
 * of a row, e.g. its heads of a q projection normed across all heads):
 * every rank calls rms_sumsq on its columns, the caller all-reduces the
 * (rows) sums (f32, a sum) over the tp group, and every rank calls
 * rms_norm with those sums, width = the full width and weight = its
 * columns of the full weight. The result is the unsplit norm's up to the
 * sums' f32 rounding (the CPU without sumsq keeps them in double). */
typedef struct wf_rmsnorm_params {
    int64_t rows, n;
    const float *src; int64_t ld_src;
    void *dst;        int64_t ld_dst;
    const float *weight;             /* (n) or NULL */
    float eps;                       /* finite, >= 0 */
    const float *sumsq;              /* (rows) reduced sums, or NULL */
    int64_t width;                   /* with sumsq: the full row width; else 0 */
    wf_dtype_t dst_dtype;            /* F32 (0), BF16 or F16 */
} wf_rmsnorm_params_t;

/* LayerNorm over whole rows with an optional elementwise affine (no
 * modulation; modln is the modulated one):
 *   dst row r = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias,
 *   x = src row r, biased var over C
 *   src, dst  (rows, C), rows ld_src / ld_dst apart; src f32, dst
 *             dst_dtype (the following linear's x, written by the norm
 *             itself); dst may be src when dst_dtype is F32
 *   weight, bias  (C) each, or NULL (1, 0), apart from dst */
typedef struct wf_layernorm_params {
    int64_t rows, C;
    const float *src; int64_t ld_src;
    void *dst;        int64_t ld_dst;
    const float *weight, *bias;
    float eps;                       /* finite, >= 0 */
    wf_dtype_t dst_dtype;            /* F32 (0), BF16 or F16 */
} wf_layernorm_params_t;

/* Most axes of a rope_grid. */
#define WF_ROPE_MAX_AXES 4

/* RoPE tables of tokens on a regular grid (video: frame, height, width;
 * image: height, width), positions implied instead of given:
 *   grid     tokens per axis (>= 1 each); token t of the grid, in
 *            row-major order (the last axis fastest), sits at position
 *            p_a = (t / prod(grid[a+1 ..])) % grid[a] on axis a
 *   axes_dims, theta, D  as rope_table: axis a has axes_dims[a] columns
 *            (even; they sum to D), frequency j = 1 / theta^(2j / d_a)
 *   row0, L  the tokens [row0, row0 + L) of the grid's prod(grid) (a
 *            rank's slice of a context-parallel sequence)
 *   cos, sin (L, D), row i the token row0 + i's, each value twice
 *            (repeat-interleaved), apart from each other
 * Exactly rope_table's output for ids row i = (p_0, p_1, ...) of token
 * row0 + i (diffusers' WanRotaryPosEmbed: axes (t, h, w) with dims
 * (D - 4 (D / 6), 2 (D / 6), 2 (D / 6)), theta 10000). */
typedef struct wf_rope_grid_params {
    uint32_t n_axes;                        /* 1 .. WF_ROPE_MAX_AXES */
    int64_t grid[WF_ROPE_MAX_AXES];
    uint32_t axes_dims[WF_ROPE_MAX_AXES];
    double theta;                           /* finite, > 0 */
    int64_t D;
    int64_t row0, L;
    float *cos, *sin;
} wf_rope_grid_params_t;

/* Sinusoidal timestep embedding, diffusers' get_timestep_embedding
 * (Timesteps(dim, flip_sin_to_cos, downscale_freq_shift, scale)) in its
 * f32 steps, half = dim / 2, k < half:
 *   f_k = exp(f32(-ln(max_period)) k / f32(half - downscale_freq_shift))
 *   a_k = scale * (t[b] f_k)
 *   dst row b = [sin a_k | cos a_k], or [cos a_k | sin a_k] with
 *   flip_sin_to_cos; dim odd: a last column of 0
 *   t    (B) on the backend's memory, used as given (no rounding)
 *   dst  (B, dim), apart from t
 * FLUX: flip, shift 0 of round(t * 1000) (timestep_proj); Wan: flip,
 * shift 0 of t itself. A zeroed struct is refused (max_period 0). */
typedef struct wf_timestep_params {
    const float *t;  int64_t B;
    int64_t dim;                     /* >= 2 */
    bool flip_sin_to_cos;
    float downscale_freq_shift;      /* finite, < half (diffusers' default 1) */
    float scale;                     /* finite (diffusers' default 1) */
    float max_period;                /* finite, > 0 (diffusers' default 10000) */
    float *dst;
} wf_timestep_params_t;

/* Whether a backend context captures CUDA graphs (the cuda_graphs
 * setting, wf_backend_tuning_t.graphs). */
typedef enum wf_graph_mode {
    WF_GRAPHS_OFF = 0,    /* never: every op launched as it comes */
    WF_GRAPHS_BLOCKS = 1  /* a model forward's blocks (graph_begin) */
} wf_graph_mode_t;

/* graph_begin's answer: what the caller does with the ops it was about
 * to queue. */
typedef enum wf_graph_step {
    WF_GRAPH_RUN = 0,      /* queue them as usual (no graph) */
    WF_GRAPH_CAPTURE = 1,  /* queue them, then graph_end: they are
                              recorded, not run, until graph_end */
    WF_GRAPH_REPLAYED = 2  /* nothing: their graph is queued already */
} wf_graph_step_t;

/* The daemon's settings a backend context takes after ctx_new
 * (ctx_tune): choices between equivalent implementations, for
 * comparisons and as fallbacks. A zeroed struct is every default. */
typedef struct wf_backend_tuning {
    const char *attention;  /* the CUDA attention kernel: NULL, "" or
                               "auto" the default (wgmma on a 9.0 device
                               built for sm_90a, else mma.sync), else a
                               name wf_cuda_attention_kernel_ok takes */
    bool gelu_kernel;       /* true: GELU after a linear as a kernel of its
                               own, never in cuBLASLt's epilogue */
    wf_graph_mode_t graphs; /* graph_begin's answer: OFF (the default)
                               always WF_GRAPH_RUN; BLOCKS: the cache */
    uint32_t graphs_max;    /* most graphs a context keeps (0: 512) */
} wf_backend_tuning_t;

typedef struct wf_backend_ops {
    const char *name;   /* "cpu", "cuda" */

    /* Create the context of device `index` (its memory budget in bytes:
     * 0 = the backend decides). Called on the worker thread that will use
     * it. Caller owns *ret_ctx. */
    wf_status_t (*ctx_new)(int index, uint64_t memory_budget,
                           wf_backend_ctx_t **ret_ctx);

    /* (optional) Apply the daemon's tuning t to a fresh context, before
     * any op runs on it. WF_E_BAD_ARGUMENT for a name the backend does
     * not know (the context keeps its defaults). NULL: nothing to tune
     * (the CPU backend). */
    wf_status_t (*ctx_tune)(wf_backend_ctx_t *ctx, const wf_backend_tuning_t *t);

    /* Free a context; sets *ctx to NULL; accepts NULL. */
    void (*ctx_destroy)(wf_backend_ctx_t **ctx);

    /* Device memory for jobs: total bytes and bytes free now. */
    void (*memory_info)(const wf_backend_ctx_t *ctx, uint64_t *ret_total,
                        uint64_t *ret_free);

    /* Bytes of workspace that attention() needs for these params. Pure
     * function of the shapes; used for memory admission before a job is
     * accepted. */
    size_t (*attention_workspace)(const wf_attn_params_t *p);

    /* (optional) Whether attention() takes head dim D; NULL: any D >= 1.
     * Jobs and models with another head dim are refused before any rank
     * runs (the CUDA kernels: 64 and 128). */
    bool (*attention_head_dim_ok)(int64_t D);

    /* (optional) Whether attention() takes fp8 jobs (p->fp8) on device
     * `index` of this backend: a pure query (no context needed) that the
     * daemon asks for every device of a job before admitting it. NULL:
     * never (the CPU backend). The CUDA backend: a device of compute
     * capability 9.0 in a build with sm_90a. */
    bool (*attention_fp8_ok)(int index);

    /* (optional) Whether attention() takes p in merge mode (p->merge,
     * p->final_out above). A pure function of the shapes, dtypes and
     * flags that does not depend on Sq, Skv, the offsets or the pointers
     * (merge mode needs lse non-NULL: attention() refuses it without),
     * so a caller asks once per job. NULL: never; the caller keeps
     * partial buffers, lse_merge and convert. The CPU backend: every
     * params with out_dtype F32 but fp8 (which it never takes); the CUDA
     * backend: every params with out_dtype F32, fp8 included. */
    bool (*attention_merge_ok)(const wf_attn_params_t *p);

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
     *   lse_p = -inf: unchanged (lse_a = -inf too: NaNs of out_p copied);
     *   lse_a = -inf: (out_a, lse_a) = (out_p, lse_p);
     *   else w = sigmoid(lse_p - lse_a), out_a -= w * (out_a - out_p)
     *        (an element of out_a or out_p not finite: out_a =
     *        sigmoid(lse_a - lse_p) * out_a + w * out_p, so an infinity
     *        stays one), lse_a = max + log1p(exp(-|lse_a - lse_p|)).
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

    /* ---- model ops (see "model ops" above) -------------------------------
     * The CPU, CUDA and the tests' stand-in backend fill every one; a
     * caller asks wf_backend_supports() before it relies on one. */

    /* Bytes of workspace linear() needs for these params (a device
     * backend's operand conversion; 0 for the CPU). Pure function of the
     * shapes and dtypes. */
    size_t (*linear_workspace)(const wf_linear_params_t *p);

    /* y = act(x W^T + bias); workspace of linear_workspace(p) bytes,
     * 256-byte aligned (NULL when 0). */
    wf_status_t (*linear)(wf_backend_ctx_t *ctx, const wf_linear_params_t *p,
                          void *workspace);

    /* act(y + bias) for (rows, n) rows ldy apart in y_dtype (F32, BF16,
     * F16); bias (n) f32 or NULL, apart from y (the bias of a tp rowwise
     * linear, added once after its all-reduce; with act NONE: a vector
     * added to every row, or a strided dtype conversion). dst NULL: in
     * place into y in its dtype (dst_dtype equal to y_dtype, ld_dst
     * ignored); else into dst (rows, n) rows ld_dst apart in dst_dtype,
     * apart from y and bias, y untouched (an activation written as the
     * next linear's x). */
    wf_status_t (*bias_act)(wf_backend_ctx_t *ctx, void *y, wf_dtype_t y_dtype,
                            int64_t rows, int64_t n, int64_t ldy,
                            const float *bias, wf_act_t act, void *dst,
                            int64_t ld_dst, wf_dtype_t dst_dtype);

    /* dst[i] = act(src[i]) for n elements (dst may be src); act != NONE. */
    wf_status_t (*act)(wf_backend_ctx_t *ctx, float *dst, const float *src,
                       int64_t n, wf_act_t act);

    /* dst[i] += src[i] for n elements (dst may be src: doubled). */
    wf_status_t (*add)(wf_backend_ctx_t *ctx, float *dst, const float *src,
                       int64_t n);

    /* Modulated LayerNorm (wf_modln_params_t). */
    wf_status_t (*modln)(wf_backend_ctx_t *ctx, const wf_modln_params_t *p);

    /* Gated residual: S row (b, r) += gate[b] * y row (b, r), elementwise,
     * for nbatch x per rows of C; S rows ld_s apart, y rows ld_y apart,
     * gate (nbatch, C) rows ld_gate apart; S apart from y and gate. A
     * gate per batch row (per = tokens) or per token (nbatch = tokens,
     * per = 1). */
    wf_status_t (*gate_residual)(wf_backend_ctx_t *ctx, float *S, int64_t ld_s,
                                 const float *y, int64_t ld_y,
                                 const float *gate, int64_t ld_gate,
                                 int64_t nbatch, int64_t per, int64_t C);

    /* Per-head RMSNorm + RoPE into joint order (wf_headrope_params_t). */
    wf_status_t (*head_norm_rope)(wf_backend_ctx_t *ctx,
                                  const wf_headrope_params_t *p);

    /* RoPE tables of L tokens at given positions (diffusers'
     * get_1d_rotary_pos_embed per axis, use_real, repeat-interleaved;
     * FluxPosEmbed): ids (L, n_axes) positions on the backend's memory;
     * axes_dims (n_axes, host memory, each even, sum D); per axis a of
     * width d, frequency j = 1 / theta^(2j / d) and angle position * freq
     * in double, cos / sin rounded to f32 and each written twice:
     * cos, sin (L, D), apart. Positions on a grid: rope_grid. */
    wf_status_t (*rope_table)(wf_backend_ctx_t *ctx, const float *ids,
                              int64_t L, const uint32_t *axes_dims,
                              uint32_t n_axes, double theta, int64_t D,
                              float *cos, float *sin);

    /* timestep_embed (flip, shift 0, scale 1, max_period 10000) of
     * t * 1000 rounded as FLUX's pipeline does, for B values t (f32,
     * backend memory): tv = round(round(t) * 1000) in round_dtype (F32: no
     * rounding; the dtype of the activations diffusers scales in), then
     * dst (B, dim) = [cos(tv f_k), sin(tv f_k)], f_k = exp(-ln(10000) k /
     * (dim / 2)) in f32, k < dim / 2; dim even. */
    wf_status_t (*timestep_proj)(wf_backend_ctx_t *ctx, const float *t,
                                 int64_t B, int64_t dim, wf_dtype_t round_dtype,
                                 float *dst);

    /* Strided copy on the backend's memory: rows of row_bytes bytes from
     * src (rows ld_src bytes apart) to dst (ld_dst bytes apart); the
     * ranges must not overlap. */
    wf_status_t (*copy_rows)(wf_backend_ctx_t *ctx, void *dst, size_t ld_dst,
                             const void *src, size_t ld_src, int64_t rows,
                             size_t row_bytes);

    /* Sums of squares of rows: sumsq[r] = sum over c < n of src[r][c]^2
     * for (rows, n) rows ld_src apart; sumsq (rows), apart from src. The
     * first step of a row norm split over tp (wf_rmsnorm_params_t). */
    wf_status_t (*rms_sumsq)(wf_backend_ctx_t *ctx, const float *src, int64_t rows,
                             int64_t n, int64_t ld_src, float *sumsq);

    /* RMSNorm over whole rows, optionally from reduced sums
     * (wf_rmsnorm_params_t). */
    wf_status_t (*rms_norm)(wf_backend_ctx_t *ctx, const wf_rmsnorm_params_t *p);

    /* LayerNorm with an optional affine (wf_layernorm_params_t). */
    wf_status_t (*layer_norm)(wf_backend_ctx_t *ctx, const wf_layernorm_params_t *p);

    /* RoPE tables of a token grid (wf_rope_grid_params_t). */
    wf_status_t (*rope_grid)(wf_backend_ctx_t *ctx, const wf_rope_grid_params_t *p);

    /* Sinusoidal timestep embedding (wf_timestep_params_t). */
    wf_status_t (*timestep_embed)(wf_backend_ctx_t *ctx, const wf_timestep_params_t *p);

    /* y[i] += alpha * x[i] for n elements, y apart from x (the first-block
     * cache's residuals: a difference, a cached residual added). */
    wf_status_t (*axpy)(wf_backend_ctx_t *ctx, float *y, float alpha, const float *x,
                        int64_t n);

    /* The sums a change test needs, in double: ret[0] = sum |a[i] - b[i]|,
     * ret[1] = sum |b[i]| over n elements (a, b apart or the same); ret is
     * host memory, written once everything queued before has run (the
     * call waits for it: the host decides on the sums). scratch: 16 bytes
     * of the backend's memory, 8-byte aligned, the call's own. */
    wf_status_t (*change_sums)(wf_backend_ctx_t *ctx, const float *a, const float *b,
                               int64_t n, double *scratch, double ret[2]);

    /* ---- resident memory (optional, with dev_alloc) ------------------ */

    /* (optional) `bytes` of the context's memory that live until mem_free
     * (model shards), 256-byte aligned, taken from the same memory as the
     * per-job dev_alloc buffers (memory_info's total covers both; the
     * daemon accounts resident bytes against it) but never handed out by
     * dev_alloc while allocated, and untouched by dev_reset.
     * WF_E_NO_MEMORY when it cannot hold them (nothing changes). Not
     * during a job (between dev_alloc and dev_reset). */
    wf_status_t (*mem_alloc)(wf_backend_ctx_t *ctx, size_t bytes, void **ret_ptr);

    /* (optional) Return a mem_alloc block at once; accepts NULL. Call
     * after synchronize when kernels may still read it. */
    void (*mem_free)(wf_backend_ctx_t *ctx, void *ptr);

    /* (optional) Pin `bytes` of host memory at ptr for fast, overlapped
     * copies (cudaHostRegister) / unpin it; any thread, no context.
     * host_register failing is not an error for the caller (the copies
     * still work, slower): it returns WF_E_UNAVAILABLE then. */
    wf_status_t (*host_register)(void *ptr, size_t bytes);
    void (*host_unregister)(void *ptr);

    /* ---- transfers on a second stream (optional: all four or none) ----
     *
     * A device context may own a transfer stream beside its main stream
     * (the one every op above runs on), so that a copy runs while kernels
     * run: comm_staged.h moves ring exchanges that way. A transfer is
     * ordered AFTER a point of the main stream (an event recorded there)
     * and before nothing: later main-stream work does not wait for it, so
     * the host waits for its ticket (xfer_wait) before it reads or reuses
     * the host buffer, or queues main-stream work that touches the device
     * range. Transfers of one context run in the order they were queued.
     * A ticket (wf_xfer_t) comes from a small pool of the context (nothing
     * is allocated per call once the pool holds as many as are live at
     * once) and is released exactly once: by xfer_wait, or by being passed
     * as `after`. Host memory should be pinned (host_register) for the
     * copies to overlap at all; any host memory works. NULL for the CPU
     * backend; the CUDA backend: a non-blocking stream and a pool of
     * events per context, made at first use. */

    /* (optional) A mark: a ticket that completes when everything queued
     * on the main stream so far has completed (the order point of a later
     * transfer, e.g. "after the kernels that still read this buffer"). */
    wf_status_t (*xfer_mark)(wf_backend_ctx_t *ctx, wf_xfer_t **ret_t);

    /* (optional) Copy `bytes` device -> host (xfer_d2h: src device, dst
     * host) or host -> device (xfer_h2d) on the transfer stream, after
     * `after` (a mark; taken over: released here whatever the outcome) or,
     * when after is NULL, after everything queued on the main stream so
     * far; *ret_t its ticket (also for bytes == 0). The host buffer is
     * borrowed until xfer_wait returns: xfer_d2h writes it, xfer_h2d reads
     * it, at any time before. WF_E_BAD_ARGUMENT (NULL pointers with bytes
     * > 0, a range the backend refuses), WF_E_INTERNAL (the queueing
     * failed), WF_E_NO_MEMORY (a new ticket); nothing is queued then. */
    wf_status_t (*xfer_d2h)(wf_backend_ctx_t *ctx, void *dst, const void *src,
                            size_t bytes, wf_xfer_t *after, wf_xfer_t **ret_t);
    wf_status_t (*xfer_h2d)(wf_backend_ctx_t *ctx, void *dst, const void *src,
                            size_t bytes, wf_xfer_t *after, wf_xfer_t **ret_t);

    /* (optional) Block the host until t's work is complete, then release
     * t (also on error). WF_E_INTERNAL when the copy failed (for a mark:
     * the main-stream work it waited for). Accepts NULL (WF_OK). There is
     * no device-side wait: a caller that waited here may queue anything. */
    wf_status_t (*xfer_wait)(wf_backend_ctx_t *ctx, wf_xfer_t *t);

    /* ---- graphs (optional: both or none) -------------------------------
     *
     * A run of ops on the context's stream recorded once and replayed as
     * one launch (CUDA graphs: a FLUX block is 20 to 33 launches). NULL
     * for the CPU and the stand-in; the CUDA backend answers WF_GRAPH_RUN
     * unless ctx_tune set graphs to WF_GRAPHS_BLOCKS.
     *
     * The caller's promise, which makes a replay right: key (key_bytes
     * bytes, compared whole, at most 4096) determines every argument of
     * every op between graph_begin and graph_end (shapes, scalars and
     * every pointer: the workspace base and layout, the weights' block),
     * so the same key queues the same ops with the same arguments; every
     * resident pointer those ops read lies in the block `anchor`
     * (mem_alloc's; NULL: none), and mem_free(anchor) drops its graphs;
     * nothing between the two calls waits for the device, reads a
     * result on the host, synchronizes, or calls a comm (a capture
     * records without running). The backend's own state that changes an
     * op's arguments is fixed once ctx_tune has run. */

    /* (optional) What to do with the ops keyed `key` (wf_graph_step_t):
     * the first time a key is seen WF_GRAPH_RUN (every lazy load and
     * first-call allocation happens outside a capture), the second
     * WF_GRAPH_CAPTURE (capture begun on the stream, in thread-local
     * mode), then WF_GRAPH_REPLAYED (the graph launched on the stream).
     * WF_GRAPH_RUN also for a key whose capture failed, with graphs off,
     * and whenever a replay could not be launched (nothing queued).
     * *ret_step is always set; WF_OK, or WF_E_BAD_ARGUMENT (NULL ctx or
     * ret_step). */
    wf_status_t (*graph_begin)(wf_backend_ctx_t *ctx, const void *key, size_t key_bytes,
                               const void *anchor, wf_graph_step_t *ret_step);

    /* (optional) End the capture of graph_begin's WF_GRAPH_CAPTURE. keep
     * (every op between returned WF_OK): instantiate the graph, keep it
     * under the key and launch it: WF_OK, the ops queued. Otherwise, or
     * when the capture, instantiation or launch failed: WF_E_UNAVAILABLE,
     * nothing queued, and the key is never captured again: the caller
     * queues the same ops again without a capture. */
    wf_status_t (*graph_end)(wf_backend_ctx_t *ctx, bool keep);
} wf_backend_ops_t;

/* The ops of backend.h's table that a caller may ask a backend for (a model
 * family at load time, for every op its forward calls). Stable numbers;
 * WF_BACKEND_OP_COUNT is one past the last. */
typedef enum wf_backend_op {
    WF_BACKEND_OP_ATTENTION = 0, /* attention (+ attention_workspace) */
    WF_BACKEND_OP_LINEAR = 1,    /* linear (+ linear_workspace) */
    WF_BACKEND_OP_BIAS_ACT = 2,
    WF_BACKEND_OP_ACT = 3,
    WF_BACKEND_OP_ADD = 4,
    WF_BACKEND_OP_MODLN = 5,
    WF_BACKEND_OP_GATE_RESIDUAL = 6,
    WF_BACKEND_OP_HEAD_NORM_ROPE = 7,
    WF_BACKEND_OP_ROPE_TABLE = 8,
    WF_BACKEND_OP_TIMESTEP_PROJ = 9,
    WF_BACKEND_OP_COPY_ROWS = 10,
    WF_BACKEND_OP_RMS_SUMSQ = 11,
    WF_BACKEND_OP_RMS_NORM = 12,
    WF_BACKEND_OP_LAYER_NORM = 13,
    WF_BACKEND_OP_ROPE_GRID = 14,
    WF_BACKEND_OP_TIMESTEP_EMBED = 15,
    WF_BACKEND_OP_AXPY = 16,
    WF_BACKEND_OP_CHANGE_SUMS = 17,
    WF_BACKEND_OP_COUNT = 18
} wf_backend_op_t;

/* Whether backend `ops` has op `op` (its entries non-NULL). false for a
 * NULL ops or an op out of range. A pure query: no context. */
bool wf_backend_supports(const wf_backend_ops_t *ops, wf_backend_op_t op);

/* The op's entry name as in wf_backend_ops_t ("rms_norm"), for a message
 * such as "backend cuda lacks rms_norm"; "?" out of range. Static. */
const char *wf_backend_op_name(wf_backend_op_t op);

/* The first op of ops[0 .. n) that backend `ops` lacks (WF_OK with
 * *ret_missing untouched when it has them all), else WF_E_UNSUPPORTED
 * with *ret_missing that op (ret_missing may be NULL). For a model family
 * at load time: refuse the model with the op's name instead of calling a
 * NULL entry. */
wf_status_t wf_backend_require(const wf_backend_ops_t *ops, const wf_backend_op_t *need,
                               size_t n, wf_backend_op_t *ret_missing);

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

/* The CPU backend's attention() with P (the softmax numerators) rounded
 * to p_round (BF16, F16; F32: not) before P V, the row sums taken from
 * the unrounded P: what a GPU kernel's 16-bit tensor-core products do.
 * The tests' stand-in device runs its attention through it. */
wf_status_t wf_cpu_attention_round_p(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                                     void *workspace, wf_dtype_t p_round);

/* Whether OpenBLAS runs the best kernels this CPU takes: false, with a
 * sentence for the log in msg, when it fell back to an older kernel set
 * than the CPU's vector units allow (a CPU model newer than the library:
 * Debian's OpenBLAS 0.3.21 runs its generic SSE3 "Prescott" kernels on
 * some AVX-512 Xeons, about 3x slower matrix products), naming the
 * OPENBLAS_CORETYPE that fixes it. true otherwise (msg: the kernel set). */
bool wf_cpu_blas_check(char *msg, size_t len);

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

/* Whether `name` names a CUDA attention kernel (the cuda_attention
 * setting, wf_backend_tuning_t.attention): "auto", "wgmma", "wgmma-pipe",
 * "mma" or a warp-specialized form ("ws", "ws-pp", "ws+pipe+mc", ...;
 * kernels/cuda/cuda_plan.h). Pure; in every build, so that a setting is
 * checked where CUDA is absent. */
bool wf_cuda_attention_kernel_ok(const char *name);

/* Floating-point operations of the attention of params p over all heads
 * (4 * B * Hq * Sq * Skv * D, halved-ish by the mask when causal: counts
 * only the visible score elements). For benchmarks and reports. */
double wf_attention_flops(const wf_attn_params_t *p);

#ifdef __cplusplus
}
#endif

#endif /* WF_BACKEND_H */
