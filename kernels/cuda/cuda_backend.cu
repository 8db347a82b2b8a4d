/* cuda_backend.cu — the CUDA backend of backend.h: the context of one GPU
 * (device index, a non-blocking stream, a cuBLAS handle, one device arena
 * allocated at ctx_new) and the exported ops, the top of the three layers
 * (kernel -> launcher -> op).
 *
 * Memory: ctx_new makes the context's cudaMallocs: the arena (the
 * budget, or 90% of the free memory less 1 GiB for NCCL, cuBLAS and the
 * CUDA context itself when the budget is 0) and the cuBLASLt workspace. dev_alloc takes per-job
 * buffers from it, dev_reset releases them; memory_info reports the
 * arena (total = capacity, free = what is not taken). Nothing allocates
 * on the hot path.
 *
 * All ops are asynchronous on the context's stream; synchronize reports
 * the first asynchronous error. One context belongs to one worker thread
 * (cudaSetDevice is per thread: ctx_new sets it on the calling thread and
 * every op sets it again, which is cheap, so a context survives a thread
 * that touched another device meanwhile).
 *
 * cuBLAS: the handle is made here for the matrix products of resident
 * models (tensor parallelism); attention does not use it (its two
 * products are fused on tensor cores, attention.cu). linear() runs on
 * cuBLASLt (gemm_lt.cu: a handle, a 32 MiB workspace allocated here
 * beside the arena, and a descriptor cache per shape).
 *
 * Resident memory (mem_alloc / mem_free): blocks from the top of the
 * same arena, first fit (cuda_plan.h, "the device arena"); dev_alloc
 * stops below the lowest one. memory_info: total = the arena, free =
 * what dev_alloc can still take.
 *
 * Model ops: params checked by the checks every backend shares
 * (ops_check.h), then the CUDA limits (cuda_plan.c), launched by
 * model_ops.cu / gemm_lt.cu. A linear with bf16 / f16 weights reads an
 * x already in that dtype in place, and rounds an f32 x into its
 * workspace first; the last column block's matmul carries the bias and
 * GELU as cuBLASLt epilogue and stores y in its dtype; SiLU (and whatever
 * the epilogue could not take) is one bias_act kernel after.
 *
 * Transfers (xfer_*): a second non-blocking stream per context, made at
 * the first call, ordered after the main stream by events from a pool
 * (see the section near the end); the staged comm's ring exchanges run
 * there beside the kernels.
 *
 * Graphs (graph_begin / graph_end, with ctx_tune's graphs = BLOCKS): the
 * cache of graph_cache.h keeps instantiated graphs per caller key; a
 * capture runs in thread-local mode on the context's stream; a graph let
 * go (evicted, its anchor freed) waits in a list until the stream is
 * idle (synchronize, dev_reset, ctx_destroy), since a launch of it may
 * still be queued.
 *
 * Not here: logging (backends return statuses), staging policy (the
 * daemon decides what to copy when).
 */
#include "cuda_launch.h"
#include "graph_cache.h"

#include <cublas_v2.h>

#include <atomic>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct wf_cuda_xfer; /* the transfer stream and its tickets (xfer_* below) */

struct wf_backend_ctx {
    int device;               /* CUDA device index */
    cudaStream_t stream;      /* the worker's stream (non-blocking) */
    cublasHandle_t cublas;    /* bound to stream */
    unsigned char *arena_base; /* the one device allocation */
    wf_cuda_arena_t arena;    /* offsets into arena_base */
    wf_cuda_limits_t limits;  /* from cudaDeviceProp */
    wf_cuda_lt_t *lt;         /* cuBLASLt handle, workspace, descriptor cache */
    int fuse_gelu;            /* 1: GELU in the cuBLASLt epilogue (ctx_tune's gelu_kernel: 0) */
    int cc;                   /* compute capability, 10 * major + minor */
    int fp8;                  /* 1: the fp8 kernel runs here (attention_fp8_ok) */
    wf_cuda_xfer *xfer;       /* transfer stream, made at the first xfer_* call */
    wf_graph_cache_t *graphs; /* captured graphs (ctx_tune's graphs = BLOCKS), or NULL */
    bool capturing;           /* between graph_begin's CAPTURE and graph_end */
    cudaGraphExec_t *dead;    /* graphs let go, destroyed when the stream is idle */
    size_t n_dead, cap_dead;  /* entries of dead, its capacity */
};

namespace {

const uint64_t RESERVE = (uint64_t)1 << 30; /* left to NCCL / cuBLAS / context */
const size_t LT_WORKSPACE = (size_t)32 << 20; /* cuBLASLt workspace (Hopper: 32 MiB) */

/* The attention kernel of c: the wgmma kernel, built for sm_90a, on a 9.0
 * device by default (sel NULL, "" or "auto"); sel picks another form for
 * comparison or as a fallback: wgmma-pipe (S of the next tile beside P V:
 * slower on the H200, see BENCHMARKS.md), mma (the mma.sync kernel), or
 * the warp-specialized kernel with its features (ws, ws+pipe+pp, ...,
 * ws-full: wf_cuda_attn_kernel_parse; opt-in while it is measured, the
 * default where it is not built). Anything else: WF_E_BAD_ARGUMENT, c
 * unchanged. A device other than 9.0, or a build without sm_90a, runs
 * mma.sync whatever sel says. */
wf_status_t select_attention(wf_backend_ctx_t *c, const char *sel)
{
    int kern = WF_CUDA_KERNEL_WGMMA;
    unsigned feat = 0;
    if (sel && *sel && strcmp(sel, "auto") != 0 &&
        wf_cuda_attn_kernel_parse(sel, &kern, &feat) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (kern == WF_CUDA_KERNEL_WS && !wf_cuda_ws_built())
        kern = WF_CUDA_KERNEL_WGMMA, feat = 0;
    c->limits.wgmma = 0;
    c->limits.ws_features = 0;
    if (c->cc == 90 && wf_cuda_wgmma_built()) {
        c->limits.wgmma = kern;
        c->limits.ws_features = feat;
    }
    return WF_OK;
}

/* Graphs let go (graph_cache.h's free_fn): kept until the stream is
 * idle; destroyed at once when the list cannot grow (after waiting for
 * the stream). */
void graph_let_go(void *user, void *graph)
{
    wf_backend_ctx_t *c = static_cast<wf_backend_ctx_t *>(user);
    cudaGraphExec_t x = static_cast<cudaGraphExec_t>(graph);
    if (c->n_dead == c->cap_dead) {
        size_t cap = c->cap_dead ? 2 * c->cap_dead : 64;
        void *p = realloc(c->dead, cap * sizeof *c->dead);
        if (!p) {
            if (!c->capturing)
                (void)cudaStreamSynchronize(c->stream);
            (void)cudaGraphExecDestroy(x);
            (void)cudaGetLastError();
            return;
        }
        c->dead = static_cast<cudaGraphExec_t *>(p);
        c->cap_dead = cap;
    }
    c->dead[c->n_dead++] = x;
}

/* Destroy the graphs let go; the stream is idle. */
void graph_bury(wf_backend_ctx_t *c)
{
    for (size_t i = 0; i < c->n_dead; i++)
        (void)cudaGraphExecDestroy(c->dead[i]);
    c->n_dead = 0;
}

wf_status_t ctx_tune(wf_backend_ctx_t *c, const wf_backend_tuning_t *t)
{
    if (!c || !t || (t->graphs != WF_GRAPHS_OFF && t->graphs != WF_GRAPHS_BLOCKS) ||
        t->graphs_max > WF_GRAPH_CACHE_MAX)
        return WF_E_BAD_ARGUMENT;
    wf_status_t st = select_attention(c, t->attention);
    if (st != WF_OK)
        return st;
    c->fuse_gelu = !t->gelu_kernel;
    /* before any op: nothing of an earlier cache can be queued */
    wf_graph_cache_destroy(&c->graphs);
    graph_bury(c);
    if (t->graphs == WF_GRAPHS_BLOCKS)
        return wf_graph_cache_new(t->graphs_max ? t->graphs_max : 512, graph_let_go, c,
                                  &c->graphs);
    return WF_OK;
}

wf_status_t ctx_new(int index, uint64_t budget, wf_backend_ctx_t **ret_ctx)
{
    if (!ret_ctx || index < 0)
        return WF_E_BAD_ARGUMENT;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || index >= n) {
        (void)cudaGetLastError();
        return WF_E_BAD_ARGUMENT;
    }
    wf_backend_ctx_t *c = static_cast<wf_backend_ctx_t *>(calloc(1, sizeof *c));
    if (!c)
        return WF_E_NO_MEMORY;
    wf_status_t st = WF_E_INTERNAL;
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    c->device = index;
    if (cudaSetDevice(index) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, index) != cudaSuccess)
        goto fail;
    c->limits.smem_optin = prop.sharedMemPerBlockOptin;
    c->limits.max_grid_x = prop.maxGridSize[0];
    c->limits.max_grid_y = prop.maxGridSize[1];
    c->limits.max_grid_z = prop.maxGridSize[2];
    c->limits.sm_count = prop.multiProcessorCount;
    c->cc = 10 * prop.major + prop.minor;
    (void)select_attention(c, NULL);
    c->fp8 = wf_cuda_fp8_device_ok(prop.major, prop.minor, wf_cuda_fp8_built());
    if (cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess)
        goto fail;
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS) {
        c->cublas = nullptr;
        goto fail;
    }
    if (cublasSetStream(c->cublas, c->stream) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    c->fuse_gelu = 1;
    if ((st = wf_cuda_lt_new(LT_WORKSPACE, &c->lt)) != WF_OK)
        goto fail;
    st = WF_E_INTERNAL;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        goto fail;
    if (budget == 0)
        budget = free_b > RESERVE ? (uint64_t)((double)(free_b - RESERVE) * 0.9) : 0;
    if (budget > free_b || budget < WF_CUDA_ALIGN) {
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    if (wf_cuda_arena_init(&c->arena, budget, WF_CUDA_ALIGN) != WF_OK)
        goto fail;
    if (cudaMalloc(&c->arena_base, c->arena.capacity) != cudaSuccess) {
        c->arena_base = nullptr;
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    *ret_ctx = c;
    return WF_OK;
fail:
    (void)cudaGetLastError();
    wf_cuda_lt_destroy(&c->lt);
    if (c->cublas)
        cublasDestroy(c->cublas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    return st;
}

void xfer_destroy(wf_backend_ctx_t *c);

void ctx_destroy(wf_backend_ctx_t **pc)
{
    if (!pc || !*pc)
        return;
    wf_backend_ctx_t *c = *pc;
    *pc = nullptr;
    /* Teardown goes on past errors: release everything that exists. */
    cudaSetDevice(c->device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    xfer_destroy(c);
    if (c->capturing) {
        cudaGraph_t g = nullptr;
        if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g)
            cudaGraphDestroy(g);
        cudaStreamSynchronize(c->stream);
    }
    c->capturing = false;
    wf_graph_cache_destroy(&c->graphs);
    graph_bury(c);
    free(c->dead);
    if (c->arena_base)
        cudaFree(c->arena_base);
    wf_cuda_lt_destroy(&c->lt);
    if (c->cublas)
        cublasDestroy(c->cublas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

void memory_info(const wf_backend_ctx_t *c, uint64_t *ret_total, uint64_t *ret_free)
{
    if (ret_total)
        *ret_total = c ? c->arena.capacity : 0;
    if (ret_free)
        *ret_free = c ? wf_cuda_arena_free(&c->arena) : 0;
}

size_t attention_workspace(const wf_attn_params_t *p)
{
    return wf_cuda_attn_workspace(p);
}

/* c present (else WF_E_BAD_ARGUMENT) and its device current on this
 * thread (else WF_E_INTERNAL). */
wf_status_t enter(wf_backend_ctx_t *c)
{
    if (!c)
        return WF_E_BAD_ARGUMENT;
    return cudaSetDevice(c->device) == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* fp8 jobs (backend.h attention_fp8_ok): a device of compute capability
 * 9.0 in a build with sm_90a. The answer of each device is cached (it
 * cannot change while the process runs): 0 unknown, 1 no, 2 yes. */
const int FP8_CACHE = 64;
std::atomic<int> fp8_cache[FP8_CACHE];

bool attention_fp8_ok(int index)
{
    if (index < 0)
        return false;
    if (index < FP8_CACHE) {
        const int v = fp8_cache[index].load(std::memory_order_relaxed);
        if (v != 0)
            return v == 2;
    }
    int n = 0, major = 0, minor = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || index >= n ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
        (void)cudaGetLastError();
        return false; /* not cached: no such device now */
    }
    const bool ok = wf_cuda_fp8_device_ok(major, minor, wf_cuda_fp8_built()) != 0;
    if (index < FP8_CACHE)
        fp8_cache[index].store(ok ? 2 : 1, std::memory_order_relaxed);
    return ok;
}

} /* namespace */

/* p->fp8: quantize q / k / v into the workspace (fp8_quant.cu, step 1),
 * then the fp8 kernel (attention_fp8.cu, step 2). WF_E_UNSUPPORTED on a
 * device without fp8; the workspace (attention_workspace(p) bytes) is
 * required. Steps alone for benchmarks (cuda_plan.h). */
wf_status_t wf_cuda_attention_fp8_steps(wf_backend_ctx_t *c, const wf_attn_params_t *p,
                                        void *workspace, int steps)
{
    if (!c || !p || !p->q || !p->k || !p->v || !p->out || steps < 1 || steps > 3)
        return WF_E_BAD_ARGUMENT;
    if (!aligned16(p->q) || !aligned16(p->k) || !aligned16(p->v) || !aligned16(p->out))
        return WF_E_BAD_ARGUMENT;
    if (!c->fp8)
        return WF_E_UNSUPPORTED;
    wf_cuda_attn_geom_t g;
    wf_cuda_fp8_ws_t L;
    wf_status_t st = wf_cuda_attn_fp8_geometry(p, &c->limits, c->fp8, &g);
    if (st != WF_OK)
        return st;
    if ((st = wf_cuda_attn_fp8_layout(p, &L)) != WF_OK)
        return st;
    if (!workspace || !aligned16(workspace))
        return WF_E_BAD_ARGUMENT;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return WF_E_INTERNAL;
    if ((steps & 1) && (st = wf_cuda_fp8_quantize_launch(p, &L, workspace, c->stream)) != WF_OK)
        return st;
    if (steps & 2)
        st = wf_cuda_attention_fp8_launch(p, &g, &L, workspace, c->stream);
    return st;
}

namespace {

wf_status_t attention(wf_backend_ctx_t *c, const wf_attn_params_t *p, void *workspace)
{
    if (!c || !p || !p->q || !p->k || !p->v || !p->out)
        return WF_E_BAD_ARGUMENT;
    if (!aligned16(p->q) || !aligned16(p->k) || !aligned16(p->v) || !aligned16(p->out))
        return WF_E_BAD_ARGUMENT;
    /* merge mode: the accumulator's lse is read and written */
    if (p->merge && (!p->lse || (p->final_out && !aligned16(p->final_out))))
        return WF_E_BAD_ARGUMENT;
    if (p->fp8)
        return wf_cuda_attention_fp8_steps(c, p, workspace, 3);
    wf_cuda_attn_geom_t g;
    wf_status_t st = wf_cuda_attn_geometry(p, &c->limits, &g);
    if (st != WF_OK)
        return st;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return WF_E_INTERNAL;
    if (g.kernel == WF_CUDA_KERNEL_WS)
        return wf_cuda_attention_ws_launch(p, &g, c->stream);
    return wf_cuda_attention_launch(p, &g, c->stream);
}

/* backend.h attention_merge_ok: every kernel merges in its epilogue
 * (cuda_plan.h wf_cuda_attn_merge_ok). */
bool attention_merge_ok(const wf_attn_params_t *p)
{
    return wf_cuda_attn_merge_ok(p) != 0;
}

/* A block of the arena from `take` (per-job or resident), as a pointer. */
wf_status_t arena_alloc(wf_backend_ctx_t *c, size_t bytes, void **ret_ptr,
                        wf_status_t (*take)(wf_cuda_arena_t *, uint64_t, uint64_t *))
{
    if (!c || !ret_ptr)
        return WF_E_BAD_ARGUMENT;
    uint64_t off;
    wf_status_t st = take(&c->arena, bytes, &off);
    if (st != WF_OK)
        return st;
    *ret_ptr = c->arena_base + off;
    return WF_OK;
}

wf_status_t dev_alloc(wf_backend_ctx_t *c, size_t bytes, void **ret_ptr)
{
    return arena_alloc(c, bytes, ret_ptr, wf_cuda_arena_take);
}

void dev_reset(wf_backend_ctx_t *c)
{
    if (!c)
        return;
    wf_cuda_arena_reset(&c->arena);
    if (!c->capturing)
        graph_bury(c); /* after synchronize (backend.h) */
}

wf_status_t copy(wf_backend_ctx_t *c, void *dst, const void *src, size_t bytes,
                 cudaMemcpyKind kind)
{
    if (!c || ((!dst || !src) && bytes))
        return WF_E_BAD_ARGUMENT;
    if (bytes == 0)
        return WF_OK;
    if (cudaSetDevice(c->device) != cudaSuccess ||
        cudaMemcpyAsync(dst, src, bytes, kind, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    return WF_OK;
}

wf_status_t copy_h2d(wf_backend_ctx_t *c, void *dst, const void *src, size_t bytes)
{
    return copy(c, dst, src, bytes, cudaMemcpyHostToDevice);
}

wf_status_t copy_d2h(wf_backend_ctx_t *c, void *dst, const void *src, size_t bytes)
{
    return copy(c, dst, src, bytes, cudaMemcpyDeviceToHost);
}

wf_status_t synchronize(wf_backend_ctx_t *c)
{
    if (!c)
        return WF_E_BAD_ARGUMENT;
    if (cudaSetDevice(c->device) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    graph_bury(c);
    return WF_OK;
}

void *native_stream(wf_backend_ctx_t *c)
{
    return c ? static_cast<void *>(c->stream) : nullptr;
}

wf_status_t lse_merge(wf_backend_ctx_t *c, float *acc_out, float *acc_lse,
                      const float *part_out, const float *part_lse, int64_t rows,
                      int64_t D, wf_dtype_t round_dtype)
{
    wf_status_t st = enter(c);
    if (st != WF_OK)
        return st;
    return wf_cuda_lse_merge_launch(acc_out, acc_lse, part_out, part_lse, rows, D,
                                    round_dtype, c->stream);
}

wf_status_t convert(wf_backend_ctx_t *c, void *dst, wf_dtype_t dst_dtype, const void *src,
                    wf_dtype_t src_dtype, size_t n)
{
    wf_status_t st = enter(c);
    if (st != WF_OK)
        return st;
    return wf_cuda_convert_launch(dst, dst_dtype, src, src_dtype, n, &c->limits, c->stream);
}

wf_status_t fill_f32(wf_backend_ctx_t *c, float *dst, float value, size_t n)
{
    wf_status_t st = enter(c);
    if (st != WF_OK)
        return st;
    return wf_cuda_fill_f32_launch(dst, value, n, &c->limits, c->stream);
}

/* ---- model ops --------------------------------------------------------------- */

/* The device of c current on this thread; false (and WF_E_INTERNAL for
 * the op) when that fails. */
bool on_device(wf_backend_ctx_t *c)
{
    if (cudaSetDevice(c->device) == cudaSuccess)
        return true;
    (void)cudaGetLastError();
    return false;
}

size_t linear_workspace(const wf_linear_params_t *p)
{
    return wf_cuda_linear_workspace(p);
}

wf_status_t linear(wf_backend_ctx_t *c, const wf_linear_params_t *p, void *workspace)
{
    if (!c)
        return WF_E_BAD_ARGUMENT;
    wf_cuda_linear_plan_t pl;
    wf_status_t st = wf_cuda_linear_plan(p, workspace, c->fuse_gelu, &pl);
    if (st != WF_OK || pl.nwb == 0)
        return st;
    if (!on_device(c))
        return WF_E_INTERNAL;
    const unsigned char *bbase = static_cast<const unsigned char *>(p->x);
    size_t esz = p->x_dtype == WF_DTYPE_F32 ? 4 : 2;
    if (pl.convert_x) {
        if ((st = wf_cuda_round_rows_launch(workspace, p->w_dtype,
                                            static_cast<const float *>(p->x), p->rows, p->in,
                                            p->ldx, c->stream)) != WF_OK)
            return st;
        bbase = static_cast<const unsigned char *>(workspace);
        esz = 2;
    }
    int post_bias = pl.post_bias;
    wf_act_t post_act = (wf_act_t)pl.post_act;
    for (uint32_t i = 0; i < pl.nwb; i++) {
        const wf_cuda_gemm_t *g = &pl.g[i];
        int fused = 1;
        st = wf_cuda_lt_matmul(c->lt, g, bbase + (size_t)g->b_col * esz, p->y, p->bias, &fused,
                               c->stream);
        if (st != WF_OK)
            return st;
        if (!fused) { /* the epilogue falls to the kernel */
            post_bias |= (g->key.epilogue & WF_CUDA_EPI_BIAS) != 0;
            if (g->key.epilogue & WF_CUDA_EPI_GELU)
                post_act = WF_ACT_GELU_TANH;
        }
    }
    if (post_bias || post_act != WF_ACT_NONE)
        return wf_cuda_bias_act_launch(p->y, p->y_dtype, p->ldy, p->y, p->y_dtype, p->ldy,
                                       p->rows, p->out, post_bias ? p->bias : nullptr, post_act,
                                       c->stream);
    return WF_OK;
}

wf_status_t bias_act(wf_backend_ctx_t *c, void *y, wf_dtype_t y_dtype, int64_t rows,
                     int64_t n, int64_t ldy, const float *bias, wf_act_t act, void *dst,
                     int64_t ld_dst, wf_dtype_t dst_dtype)
{
    if (!c ||
        !wf_ops_bias_act_ok(y, y_dtype, rows, n, ldy, bias, act, dst, ld_dst, dst_dtype) ||
        rows > INT32_MAX || n > INT32_MAX || ldy > INT32_MAX || ld_dst > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (rows == 0 || n == 0)
        return WF_OK;
    if (!dst && !bias && act == WF_ACT_NONE)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    if (!dst)
        return wf_cuda_bias_act_launch(y, y_dtype, ldy, y, y_dtype, ldy, rows, n, bias, act,
                                       c->stream);
    return wf_cuda_bias_act_launch(y, y_dtype, ldy, dst, dst_dtype, ld_dst, rows, n, bias, act,
                                   c->stream);
}

wf_status_t act(wf_backend_ctx_t *c, float *dst, const float *src, int64_t n, wf_act_t a)
{
    if (!c || !wf_ops_act_ok(dst, src, n, a))
        return WF_E_BAD_ARGUMENT;
    if (n == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_act_launch(dst, src, n, a, &c->limits, c->stream);
}

wf_status_t add(wf_backend_ctx_t *c, float *dst, const float *src, int64_t n)
{
    if (!c || !wf_ops_add_ok(dst, src, n))
        return WF_E_BAD_ARGUMENT;
    if (n == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_add_launch(dst, src, n, &c->limits, c->stream);
}

wf_status_t axpy(wf_backend_ctx_t *c, float *y, float alpha, const float *x, int64_t n)
{
    if (!c || !wf_ops_axpy_ok(y, alpha, x, n))
        return WF_E_BAD_ARGUMENT;
    if (n == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_axpy_launch(y, alpha, x, n, &c->limits, c->stream);
}

/* The sums into scratch on the stream, then to the host: the stream is
 * waited for (the host decides on them). */
wf_status_t change_sums(wf_backend_ctx_t *c, const float *a, const float *b, int64_t n,
                        double *scratch, double ret[2])
{
    if (!c || !wf_ops_change_sums_ok(a, b, n, scratch, ret))
        return WF_E_BAD_ARGUMENT;
    if (!on_device(c))
        return WF_E_INTERNAL;
    wf_status_t st = wf_cuda_change_sums_launch(a, b, n, scratch, &c->limits, c->stream);
    if (st != WF_OK)
        return st;
    if (cudaMemcpyAsync(ret, scratch, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                        c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    return WF_OK;
}

wf_status_t modln(wf_backend_ctx_t *c, const wf_modln_params_t *p)
{
    if (!c || !wf_cuda_modln_ok(p))
        return WF_E_BAD_ARGUMENT;
    if (p->nbatch * p->per == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_modln_launch(p, &c->limits, c->stream);
}

wf_status_t gate_residual(wf_backend_ctx_t *c, float *S, int64_t ld_s, const float *y,
                          int64_t ld_y, const float *gate, int64_t ld_gate, int64_t nbatch,
                          int64_t per, int64_t C)
{
    if (!c || !wf_ops_gate_residual_ok(S, ld_s, y, ld_y, gate, ld_gate, nbatch, per, C))
        return WF_E_BAD_ARGUMENT;
    if (nbatch > INT32_MAX || per > INT32_MAX || C > INT32_MAX || nbatch * per > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (nbatch * per == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_gate_residual_launch(S, ld_s, y, ld_y, gate, ld_gate, nbatch, per, C,
                                        c->stream);
}

wf_status_t head_norm_rope(wf_backend_ctx_t *c, const wf_headrope_params_t *p)
{
    if (!c || !wf_cuda_headrope_ok(p))
        return WF_E_BAD_ARGUMENT;
    if (p->nbatch * p->per == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_head_norm_rope_launch(p, &c->limits, c->stream);
}

wf_status_t rope_table(wf_backend_ctx_t *c, const float *ids, int64_t L,
                       const uint32_t *axes_dims, uint32_t n_axes, double theta, int64_t D,
                       float *cs, float *sn)
{
    double freq[WF_CUDA_ROPE_MAX_PAIRS];
    uint8_t axis[WF_CUDA_ROPE_MAX_PAIRS];
    if (!c || !wf_ops_rope_table_ok(ids, L, axes_dims, n_axes, theta, D, cs, sn) ||
        L > INT32_MAX || wf_cuda_rope_freqs(axes_dims, n_axes, theta, D, freq, axis) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (L == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_rope_table_launch(ids, L, n_axes, freq, axis, D, cs, sn, &c->limits,
                                     c->stream);
}

wf_status_t timestep_proj(wf_backend_ctx_t *c, const float *t, int64_t B, int64_t dim,
                          wf_dtype_t round_dtype, float *dst)
{
    if (!c || !wf_ops_timestep_ok(t, B, dim, round_dtype, dst) || B > INT32_MAX ||
        B * dim > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (B == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_timestep_proj_launch(t, B, dim, round_dtype, dst, &c->limits, c->stream);
}

wf_status_t rms_sumsq(wf_backend_ctx_t *c, const float *src, int64_t rows, int64_t n,
                      int64_t ld_src, float *sumsq)
{
    if (!c || !wf_ops_rms_sumsq_ok(src, rows, n, ld_src, sumsq) || rows > INT32_MAX ||
        n > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (rows == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_rms_sumsq_launch(src, rows, n, ld_src, sumsq, &c->limits, c->stream);
}

wf_status_t rms_norm(wf_backend_ctx_t *c, const wf_rmsnorm_params_t *p)
{
    if (!c || !wf_ops_rms_norm_ok(p) || p->rows > INT32_MAX || p->n > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (p->rows == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_rms_norm_launch(p, &c->limits, c->stream);
}

wf_status_t layer_norm(wf_backend_ctx_t *c, const wf_layernorm_params_t *p)
{
    if (!c || !wf_ops_layer_norm_ok(p) || p->rows > INT32_MAX || p->C > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (p->rows == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_layer_norm_launch(p, &c->limits, c->stream);
}

wf_status_t rope_grid(wf_backend_ctx_t *c, const wf_rope_grid_params_t *p)
{
    double freq[WF_CUDA_ROPE_MAX_PAIRS];
    uint8_t axis[WF_CUDA_ROPE_MAX_PAIRS];
    if (!c || !wf_ops_rope_grid_ok(p) ||
        wf_cuda_rope_freqs(p->axes_dims, p->n_axes, p->theta, p->D, freq, axis) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (p->L == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_rope_grid_launch(p, freq, axis, &c->limits, c->stream);
}

wf_status_t timestep_embed(wf_backend_ctx_t *c, const wf_timestep_params_t *p)
{
    if (!c || !wf_ops_timestep_embed_ok(p) || p->B > INT32_MAX || p->B * p->dim > INT32_MAX)
        return WF_E_BAD_ARGUMENT;
    if (p->B == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    return wf_cuda_timestep_embed_launch(p, &c->limits, c->stream);
}

wf_status_t copy_rows(wf_backend_ctx_t *c, void *dst, size_t ld_dst, const void *src,
                      size_t ld_src, int64_t rows, size_t row_bytes)
{
    if (!c || !wf_cuda_copy_rows_ok(dst, ld_dst, src, ld_src, rows, row_bytes))
        return WF_E_BAD_ARGUMENT;
    if (rows == 0 || row_bytes == 0)
        return WF_OK;
    if (!on_device(c))
        return WF_E_INTERNAL;
    if (cudaMemcpy2DAsync(dst, ld_dst, src, ld_src, row_bytes, (size_t)rows,
                          cudaMemcpyDeviceToDevice, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    return WF_OK;
}

/* ---- resident memory ------------------------------------------------------------ */

wf_status_t mem_alloc(wf_backend_ctx_t *c, size_t bytes, void **ret_ptr)
{
    return arena_alloc(c, bytes, ret_ptr, wf_cuda_arena_res_alloc);
}

void mem_free(wf_backend_ctx_t *c, void *ptr)
{
    if (!c || !ptr)
        return;
    unsigned char *p = static_cast<unsigned char *>(ptr);
    if (p < c->arena_base || p >= c->arena_base + c->arena.capacity)
        return; /* not ours: nothing to free */
    /* no graph outlives the weights it reads */
    wf_graph_cache_drop_anchor(c->graphs, ptr);
    (void)wf_cuda_arena_res_free(&c->arena, (uint64_t)(p - c->arena_base));
}

wf_status_t host_register(void *ptr, size_t bytes)
{
    if (!ptr || bytes == 0)
        return WF_E_BAD_ARGUMENT;
    if (cudaHostRegister(ptr, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_UNAVAILABLE;
    }
    return WF_OK;
}

void host_unregister(void *ptr)
{
    if (ptr && cudaHostUnregister(ptr) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ---- transfers on a second stream (backend.h xfer_*) ----------------
 *
 * One non-blocking stream per context beside the main one, made at the
 * first call, and a pool of tickets: each ticket is an event (timing
 * off) recorded where its work ends; released tickets are kept on a free
 * list and reused, so nothing is allocated once the pool holds as many
 * as are live at once (a staged ring: a handful). A copy is ordered after
 * the main stream by cudaStreamWaitEvent on the transfer stream: on a
 * mark's event, or on `order`, recorded on the main stream at the call.
 * Reusing an event right after a wait on it is safe: the wait binds the
 * record made before it. Later main-stream work does not wait for the
 * transfer stream; the host does (xfer_wait), as backend.h says. */

} /* namespace */

struct wf_xfer {
    wf_xfer *next;            /* the free list */
    wf_xfer *all;             /* every ticket of the context */
    cudaEvent_t ev;           /* recorded where the ticket's work ends */
};

struct wf_cuda_xfer {
    cudaStream_t stream;      /* the transfer stream (non-blocking) */
    cudaEvent_t order;        /* main-stream point of a copy without a mark */
    wf_xfer *free_list;       /* released tickets */
    wf_xfer *all;             /* every ticket (destroyed with the context) */
};

namespace {

/* The context's transfer state, made on first use; its device current. */
wf_status_t xfer_state(wf_backend_ctx_t *c, wf_cuda_xfer **ret_x)
{
    if (cudaSetDevice(c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    if (c->xfer) {
        *ret_x = c->xfer;
        return WF_OK;
    }
    wf_cuda_xfer *x = static_cast<wf_cuda_xfer *>(calloc(1, sizeof *x));
    if (!x)
        return WF_E_NO_MEMORY;
    if (cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        free(x);
        return WF_E_INTERNAL;
    }
    if (cudaEventCreateWithFlags(&x->order, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaStreamDestroy(x->stream);
        free(x);
        return WF_E_INTERNAL;
    }
    c->xfer = *ret_x = x;
    return WF_OK;
}

/* Teardown (ctx_destroy, main stream idle): waits for the transfer
 * stream, destroys every ticket's event whether released or not. */
void xfer_destroy(wf_backend_ctx_t *c)
{
    wf_cuda_xfer *x = c->xfer;
    if (!x)
        return;
    c->xfer = nullptr;
    cudaStreamSynchronize(x->stream);
    while (x->all) {
        wf_xfer *t = x->all;
        x->all = t->all;
        cudaEventDestroy(t->ev);
        free(t);
    }
    cudaEventDestroy(x->order);
    cudaStreamDestroy(x->stream);
    (void)cudaGetLastError();
    free(x);
}

/* The context's transfer state (xfer_state) and a ticket of its pool:
 * from the free list, or a new one (the pool grows). */
wf_status_t xfer_take(wf_backend_ctx_t *c, wf_cuda_xfer **ret_x, wf_xfer **ret_t)
{
    wf_cuda_xfer *x;
    wf_status_t st = xfer_state(c, &x);
    if (st != WF_OK)
        return st;
    wf_xfer *t = x->free_list;
    if (t) {
        x->free_list = t->next;
    } else {
        t = static_cast<wf_xfer *>(calloc(1, sizeof *t));
        if (!t)
            return WF_E_NO_MEMORY;
        if (cudaEventCreateWithFlags(&t->ev, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            free(t);
            return WF_E_INTERNAL;
        }
        t->all = x->all;
        x->all = t;
    }
    t->next = nullptr;
    *ret_x = x;
    *ret_t = t;
    return WF_OK;
}

void xfer_give(wf_cuda_xfer *x, wf_xfer *t)
{
    t->next = x->free_list;
    x->free_list = t;
}

wf_status_t xfer_mark(wf_backend_ctx_t *c, wf_xfer_t **ret_t)
{
    if (!c || !ret_t)
        return WF_E_BAD_ARGUMENT;
    wf_cuda_xfer *x;
    wf_xfer *t;
    wf_status_t st = xfer_take(c, &x, &t);
    if (st != WF_OK)
        return st;
    if (cudaEventRecord(t->ev, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        xfer_give(x, t);
        return WF_E_INTERNAL;
    }
    *ret_t = t;
    return WF_OK;
}

/* A copy on the transfer stream after `after` (taken over) or after the
 * main stream as it is now. */
wf_status_t xfer_copy(wf_backend_ctx_t *c, void *dst, const void *src, size_t bytes,
                      cudaMemcpyKind kind, wf_xfer_t *after, wf_xfer_t **ret_t)
{
    if (c && after && c->xfer)
        xfer_give(c->xfer, after);
    if (!c || !ret_t || (bytes && (!dst || !src)))
        return WF_E_BAD_ARGUMENT;
    wf_cuda_xfer *x;
    wf_xfer *t;
    wf_status_t st = xfer_take(c, &x, &t);
    if (st != WF_OK)
        return st;
    /* `after` went back to the pool above: its last record is what the
     * wait binds, and nothing records it again before this call ends */
    cudaError_t e = after ? cudaSuccess : cudaEventRecord(x->order, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(x->stream, after ? after->ev : x->order, 0);
    if (e == cudaSuccess && bytes)
        e = cudaMemcpyAsync(dst, src, bytes, kind, x->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(t->ev, x->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        xfer_give(x, t);
        return e == cudaErrorInvalidValue ? WF_E_BAD_ARGUMENT : WF_E_INTERNAL;
    }
    *ret_t = t;
    return WF_OK;
}

wf_status_t xfer_d2h(wf_backend_ctx_t *c, void *dst, const void *src, size_t bytes,
                     wf_xfer_t *after, wf_xfer_t **ret_t)
{
    return xfer_copy(c, dst, src, bytes, cudaMemcpyDeviceToHost, after, ret_t);
}

wf_status_t xfer_h2d(wf_backend_ctx_t *c, void *dst, const void *src, size_t bytes,
                     wf_xfer_t *after, wf_xfer_t **ret_t)
{
    return xfer_copy(c, dst, src, bytes, cudaMemcpyHostToDevice, after, ret_t);
}

wf_status_t xfer_wait(wf_backend_ctx_t *c, wf_xfer_t *t)
{
    if (!t)
        return WF_OK;
    if (!c || !c->xfer)
        return WF_E_BAD_ARGUMENT;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(t->ev);
    xfer_give(c->xfer, t);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    return WF_OK;
}

/* ---- graphs (backend.h graph_begin / graph_end) ---------------------------- */

wf_status_t graph_end(wf_backend_ctx_t *c, bool keep);

wf_status_t graph_begin(wf_backend_ctx_t *c, const void *key, size_t key_bytes,
                        const void *anchor, wf_graph_step_t *ret_step)
{
    if (ret_step)
        *ret_step = WF_GRAPH_RUN;
    if (!c || !ret_step)
        return WF_E_BAD_ARGUMENT;
    if (!c->graphs || !on_device(c))
        return WF_OK;
    if (c->capturing) /* a capture never ended: drop it */
        (void)graph_end(c, false);
    void *graph = nullptr;
    wf_graph_step_t step = wf_graph_cache_step(c->graphs, key, key_bytes, anchor, &graph);
    if (step == WF_GRAPH_REPLAYED) {
        if (cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), c->stream) != cudaSuccess) {
            (void)cudaGetLastError();
            wf_graph_cache_forget_last(c->graphs);
            step = WF_GRAPH_RUN;
        }
    } else if (step == WF_GRAPH_CAPTURE) {
        if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            (void)cudaGetLastError();
            wf_graph_cache_set(c->graphs, nullptr);
            step = WF_GRAPH_RUN;
        } else {
            c->capturing = true;
        }
    }
    *ret_step = step;
    return WF_OK;
}

wf_status_t graph_end(wf_backend_ctx_t *c, bool keep)
{
    if (!c)
        return WF_E_BAD_ARGUMENT;
    if (!c->capturing)
        return WF_E_UNAVAILABLE;
    c->capturing = false;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t x = nullptr;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess)
        e = cudaStreamEndCapture(c->stream, &g);
    if (e == cudaSuccess && keep && g)
        e = cudaGraphInstantiateWithFlags(&x, g, 0);
    if (g)
        (void)cudaGraphDestroy(g);
    if (e == cudaSuccess && keep && x)
        e = cudaGraphLaunch(x, c->stream);
    if (e != cudaSuccess || !keep || !x) {
        (void)cudaGetLastError();
        if (x)
            (void)cudaGraphExecDestroy(x); /* never launched */
        wf_graph_cache_set(c->graphs, nullptr);
        return WF_E_UNAVAILABLE;
    }
    wf_graph_cache_set(c->graphs, x);
    return WF_OK;
}

wf_backend_ops_t make_ops()
{
    wf_backend_ops_t o = {};
    o.name = "cuda";
    o.ctx_new = ctx_new;
    o.ctx_tune = ctx_tune;
    o.ctx_destroy = ctx_destroy;
    o.memory_info = memory_info;
    o.attention_workspace = attention_workspace;
    o.attention = attention;
    o.attention_head_dim_ok = wf_cuda_attn_head_dim_ok;
    o.attention_fp8_ok = attention_fp8_ok;
    o.attention_merge_ok = attention_merge_ok;
    o.dev_alloc = dev_alloc;
    o.dev_reset = dev_reset;
    o.copy_h2d = copy_h2d;
    o.copy_d2h = copy_d2h;
    o.synchronize = synchronize;
    o.native_stream = native_stream;
    o.lse_merge = lse_merge;
    o.convert = convert;
    o.fill_f32 = fill_f32;
    o.linear_workspace = linear_workspace;
    o.linear = linear;
    o.bias_act = bias_act;
    o.act = act;
    o.add = add;
    o.axpy = axpy;
    o.change_sums = change_sums;
    o.modln = modln;
    o.gate_residual = gate_residual;
    o.head_norm_rope = head_norm_rope;
    o.rope_table = rope_table;
    o.timestep_proj = timestep_proj;
    o.copy_rows = copy_rows;
    o.rms_sumsq = rms_sumsq;
    o.rms_norm = rms_norm;
    o.layer_norm = layer_norm;
    o.rope_grid = rope_grid;
    o.timestep_embed = timestep_embed;
    o.mem_alloc = mem_alloc;
    o.mem_free = mem_free;
    o.host_register = host_register;
    o.host_unregister = host_unregister;
    o.xfer_mark = xfer_mark;
    o.xfer_d2h = xfer_d2h;
    o.xfer_h2d = xfer_h2d;
    o.xfer_wait = xfer_wait;
    o.graph_begin = graph_begin;
    o.graph_end = graph_end;
    return o;
}

const wf_backend_ops_t cuda_ops = make_ops();

} /* namespace */

extern "C" const wf_backend_ops_t *wf_backend_cuda(void)
{
    return &cuda_ops;
}
