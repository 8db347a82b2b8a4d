/* cuda_backend.cu — the CUDA backend of backend.h: the context of one GPU
 * (device index, a non-blocking stream, a cuBLAS handle, one device arena
 * allocated at ctx_new) and the exported ops, the top of the three layers
 * (kernel -> launcher -> op).
 *
 * Memory: ctx_new makes the only cudaMalloc of the context: the arena
 * (the budget, or 90% of the free memory less 1 GiB for NCCL, cuBLAS and
 * the CUDA context itself when the budget is 0). dev_alloc takes per-job
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
 * products are fused on tensor cores, attention.cu).
 *
 * Not here: logging (backends return statuses), staging policy (the
 * daemon decides what to copy when).
 */
#include "cuda_launch.h"

#include <cublas_v2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct wf_backend_ctx {
    int device;               /* CUDA device index */
    cudaStream_t stream;      /* the worker's stream (non-blocking) */
    cublasHandle_t cublas;    /* bound to stream */
    unsigned char *arena_base; /* the one device allocation */
    wf_cuda_arena_t arena;    /* offsets into arena_base */
    wf_cuda_limits_t limits;  /* from cudaDeviceProp */
};

namespace {

const uint64_t RESERVE = (uint64_t)1 << 30; /* left to NCCL / cuBLAS / context */

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
    /* The wgmma kernel: built for sm_90a and a 9.0 device. WEFT_CUDA_ATTN
     * picks another form for comparison or as a fallback: wgmma-pipe (S
     * of the next tile beside P V: slower on the H200, see BENCHMARKS.md)
     * or mma (the mma.sync kernel). */
    {
        const char *sel = getenv("WEFT_CUDA_ATTN");
        c->limits.wgmma = 0;
        if (prop.major == 9 && prop.minor == 0 && wf_cuda_wgmma_built())
            c->limits.wgmma = sel && strcmp(sel, "mma") == 0 ? 0
                              : sel && strcmp(sel, "wgmma-pipe") == 0
                                  ? WF_CUDA_KERNEL_WGMMA_PIPE
                                  : WF_CUDA_KERNEL_WGMMA;
    }
    if (cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess)
        goto fail;
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS) {
        c->cublas = nullptr;
        goto fail;
    }
    if (cublasSetStream(c->cublas, c->stream) != CUBLAS_STATUS_SUCCESS)
        goto fail;
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
    if (c->cublas)
        cublasDestroy(c->cublas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    return st;
}

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
    if (c->arena_base)
        cudaFree(c->arena_base);
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

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

wf_status_t attention(wf_backend_ctx_t *c, const wf_attn_params_t *p, void *workspace)
{
    (void)workspace; /* none needed */
    if (!c || !p || !p->q || !p->k || !p->v || !p->out)
        return WF_E_BAD_ARGUMENT;
    if (!aligned16(p->q) || !aligned16(p->k) || !aligned16(p->v) || !aligned16(p->out))
        return WF_E_BAD_ARGUMENT;
    wf_cuda_attn_geom_t g;
    wf_status_t st = wf_cuda_attn_geometry(p, &c->limits, &g);
    if (st != WF_OK)
        return st;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return WF_E_INTERNAL;
    return wf_cuda_attention_launch(p, &g, c->stream);
}

wf_status_t dev_alloc(wf_backend_ctx_t *c, size_t bytes, void **ret_ptr)
{
    if (!c || !ret_ptr)
        return WF_E_BAD_ARGUMENT;
    uint64_t off;
    wf_status_t st = wf_cuda_arena_take(&c->arena, bytes, &off);
    if (st != WF_OK)
        return st;
    *ret_ptr = c->arena_base + off;
    return WF_OK;
}

void dev_reset(wf_backend_ctx_t *c)
{
    if (c)
        wf_cuda_arena_reset(&c->arena);
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
    if (!c)
        return WF_E_BAD_ARGUMENT;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return WF_E_INTERNAL;
    return wf_cuda_lse_merge_launch(acc_out, acc_lse, part_out, part_lse, rows, D,
                                    round_dtype, c->stream);
}

wf_status_t convert(wf_backend_ctx_t *c, void *dst, wf_dtype_t dst_dtype, const void *src,
                    wf_dtype_t src_dtype, size_t n)
{
    if (!c)
        return WF_E_BAD_ARGUMENT;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return WF_E_INTERNAL;
    return wf_cuda_convert_launch(dst, dst_dtype, src, src_dtype, n, &c->limits, c->stream);
}

wf_status_t fill_f32(wf_backend_ctx_t *c, float *dst, float value, size_t n)
{
    if (!c)
        return WF_E_BAD_ARGUMENT;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return WF_E_INTERNAL;
    return wf_cuda_fill_f32_launch(dst, value, n, &c->limits, c->stream);
}

wf_backend_ops_t make_ops()
{
    wf_backend_ops_t o = {};
    o.name = "cuda";
    o.ctx_new = ctx_new;
    o.ctx_destroy = ctx_destroy;
    o.memory_info = memory_info;
    o.attention_workspace = attention_workspace;
    o.attention = attention;
    o.dev_alloc = dev_alloc;
    o.dev_reset = dev_reset;
    o.copy_h2d = copy_h2d;
    o.copy_d2h = copy_d2h;
    o.synchronize = synchronize;
    o.native_stream = native_stream;
    o.lse_merge = lse_merge;
    o.convert = convert;
    o.fill_f32 = fill_f32;
    return o;
}

const wf_backend_ops_t cuda_ops = make_ops();

} /* namespace */

extern "C" const wf_backend_ops_t *wf_backend_cuda(void)
{
    return &cuda_ops;
}
