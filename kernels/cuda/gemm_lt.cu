/* gemm_lt.cu — the cuBLASLt matmuls of linear(): a handle, a fixed
 * workspace allocated once, and a small cache of matmul descriptors,
 * layouts and heuristic results per shape (wf_cuda_gemm_key_t), so that
 * a layer run again allocates nothing and asks no heuristic. The
 * descriptors live inside the cache entries (cublasLt*Init on the
 * semi-opaque structs: no cuBLASLt allocation at all).
 *
 * One matmul, column-major (the mapping from row-major y = x W^T is in
 * cuda_plan.h, "linear"):
 *   D (m x n, ldc) = epilogue(alpha op(A) B + beta C), C = D = y in y's
 *   dtype (f32, or bf16 / f16: the epilogue's f32 result rounded once),
 *   A (k x m, lda) in the weight dtype, op(A) = A^T (CUBLAS_OP_T),
 *   B (k x n, ldb) in the weight dtype (bf16 / f16: x as its producer
 *   wrote it, or rounded into the linear's workspace) or f32, CUBLAS_OP_N,
 *   compute CUBLAS_COMPUTE_32F, scale type f32 (alpha 1, beta 0 / 1).
 * The epilogue: CUBLASLT_EPILOGUE_BIAS (an f32 bias of m, broadcast over
 * the n columns, added before the activation), _GELU, _GELU_BIAS. The
 * cuBLASLt documentation names the transform "GELU" without a formula;
 * weft's contract is the tanh form, so tests/gpu/test_cuda_gpu.c checks the
 * fused result against the CPU's tanh GELU within the error a hardware
 * tanh allows and names the form it is nearer, and weftd's
 * cuda_gelu_epilogue = false (ctx_tune) keeps GELU out of the epilogue. When the
 * heuristic offers no algorithm for an epilogue, the entry falls back to
 * the plain matmul and the caller applies bias and activation with a
 * kernel (*ret_fused = 0).
 *
 * Alignment: the heuristic is told each pointer's actual alignment
 * (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES; the default assumes 256),
 * which is part of the cache key, so a weight block starting inside a
 * row never gets an algorithm that needs more.
 */
#include "cuda_launch.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

/* Entries of the descriptor cache: a FLUX forward has about a dozen
 * distinct linear shapes per rank. */
#define WF_CUDA_LT_CACHE 64

namespace {

struct lt_entry {
    wf_cuda_gemm_key_t key;           /* the shape; valid when used */
    int used;                         /* 1: this entry holds a plan */
    int fused;                        /* 1: key.epilogue in the desc, 0: plain */
    cublasLtMatmulDescOpaque_t desc;  /* operation, epilogue */
    cublasLtMatrixLayoutOpaque_t la;  /* A (k x m) */
    cublasLtMatrixLayoutOpaque_t lb;  /* B (k x n) */
    cublasLtMatrixLayoutOpaque_t lc;  /* C = D (m x n) in key.c_dtype */
    cublasLtMatmulAlgo_t algo;        /* the heuristic's first answer */
};

cudaDataType_t cuda_type(int64_t dt)
{
    return dt == WF_DTYPE_BF16 ? CUDA_R_16BF : dt == WF_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

cublasLtEpilogue_t lt_epilogue(int64_t e)
{
    switch (e) {
    case WF_CUDA_EPI_BIAS:
        return CUBLASLT_EPILOGUE_BIAS;
    case WF_CUDA_EPI_GELU:
        return CUBLASLT_EPILOGUE_GELU;
    case WF_CUDA_EPI_GELU_BIAS:
        return CUBLASLT_EPILOGUE_GELU_BIAS;
    default:
        return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

bool ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

} /* namespace */

struct wf_cuda_lt {
    cublasLtHandle_t handle;       /* the context's cuBLASLt handle */
    void *ws;                      /* cuBLASLt workspace (device) */
    size_t ws_bytes;               /* its size */
    uint32_t next;                 /* next entry to replace when full */
    lt_entry e[WF_CUDA_LT_CACHE];  /* the cache */
};

namespace {

/* Build the descriptors of e->key with epilogue `epi` and ask the
 * heuristic (one algorithm). false when cuBLASLt offers none. */
bool plan_entry(wf_cuda_lt *lt, lt_entry *e, int64_t epi, const float *bias)
{
    const wf_cuda_gemm_key_t *k = &e->key;
    const cudaDataType_t ab = cuda_type(k->dtype);
    if (!ok(cublasLtMatmulDescInit(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)))
        return false;
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint32_t ep = lt_epilogue(epi);
    if (!ok(cublasLtMatmulDescSetAttribute(&e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
        !ok(cublasLtMatmulDescSetAttribute(&e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
        !ok(cublasLtMatmulDescSetAttribute(&e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep)))
        return false;
    if (epi & WF_CUDA_EPI_BIAS) {
        const int32_t bt = CUDA_R_32F;
        if (!ok(cublasLtMatmulDescSetAttribute(&e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                               sizeof bt)) ||
            !ok(cublasLtMatmulDescSetAttribute(&e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof bias)))
            return false;
    }
    if (!ok(cublasLtMatrixLayoutInit(&e->la, ab, (uint64_t)k->k, (uint64_t)k->m, k->lda)) ||
        !ok(cublasLtMatrixLayoutInit(&e->lb, ab, (uint64_t)k->k, (uint64_t)k->n, k->ldb)) ||
        !ok(cublasLtMatrixLayoutInit(&e->lc, cuda_type(k->c_dtype), (uint64_t)k->m,
                                     (uint64_t)k->n, k->ldc)))
        return false;
    cublasLtMatmulPreferenceOpaque_t pref;
    if (!ok(cublasLtMatmulPreferenceInit(&pref)))
        return false;
    const uint64_t wsb = lt->ws_bytes;
    const uint32_t aa = (uint32_t)k->align_a, abb = (uint32_t)k->align_b,
                   ac = (uint32_t)k->align_c;
    if (!ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &wsb, sizeof wsb)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                 &aa, sizeof aa)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                 &abb, sizeof abb)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 &ac, sizeof ac)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                 &ac, sizeof ac)))
        return false;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (!ok(cublasLtMatmulAlgoGetHeuristic(lt->handle, &e->desc, &e->la, &e->lb, &e->lc, &e->lc,
                                           &pref, 1, &res, &found)) ||
        found < 1 || !ok(res.state) || res.workspaceSize > lt->ws_bytes)
        return false;
    e->algo = res.algo;
    return true;
}

/* The cache entry of key (planned on a miss; NULL when cuBLASLt has no
 * algorithm even without the epilogue). */
lt_entry *lookup(wf_cuda_lt *lt, const wf_cuda_gemm_key_t *key, const float *bias)
{
    for (uint32_t i = 0; i < WF_CUDA_LT_CACHE; i++)
        if (lt->e[i].used && memcmp(&lt->e[i].key, key, sizeof *key) == 0)
            return &lt->e[i];
    uint32_t slot = WF_CUDA_LT_CACHE;
    for (uint32_t i = 0; i < WF_CUDA_LT_CACHE && slot == WF_CUDA_LT_CACHE; i++)
        if (!lt->e[i].used)
            slot = i;
    if (slot == WF_CUDA_LT_CACHE) { /* full: replace in turn */
        slot = lt->next;
        lt->next = (lt->next + 1) % WF_CUDA_LT_CACHE;
    }
    lt_entry *e = &lt->e[slot];
    e->used = 0;
    e->key = *key;
    if (plan_entry(lt, e, key->epilogue, bias)) {
        e->fused = 1;
    } else if (key->epilogue != WF_CUDA_EPI_NONE && plan_entry(lt, e, WF_CUDA_EPI_NONE, bias)) {
        e->fused = 0;
    } else {
        return nullptr;
    }
    e->used = 1;
    return e;
}

} /* namespace */

wf_status_t wf_cuda_lt_new(size_t ws_bytes, wf_cuda_lt_t **ret_lt)
{
    wf_cuda_lt *lt = static_cast<wf_cuda_lt *>(calloc(1, sizeof *lt));
    if (!lt)
        return WF_E_NO_MEMORY;
    if (!ok(cublasLtCreate(&lt->handle))) {
        free(lt);
        return WF_E_INTERNAL;
    }
    if (ws_bytes && cudaMalloc(&lt->ws, ws_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        cublasLtDestroy(lt->handle);
        free(lt);
        return WF_E_NO_MEMORY;
    }
    lt->ws_bytes = ws_bytes;
    *ret_lt = lt;
    return WF_OK;
}

void wf_cuda_lt_destroy(wf_cuda_lt_t **plt)
{
    if (!plt || !*plt)
        return;
    wf_cuda_lt *lt = *plt;
    *plt = nullptr;
    if (lt->ws)
        cudaFree(lt->ws);
    cublasLtDestroy(lt->handle);
    free(lt);
}

wf_status_t wf_cuda_lt_matmul(wf_cuda_lt_t *lt, const wf_cuda_gemm_t *g, const void *b,
                              void *y, const float *bias, int *ret_fused, cudaStream_t stream)
{
    lt_entry *e = lookup(lt, &g->key, bias);
    if (!e)
        return WF_E_INTERNAL;
    if (e->fused && (g->key.epilogue & WF_CUDA_EPI_BIAS) &&
        !ok(cublasLtMatmulDescSetAttribute(&e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias)))
        return WF_E_INTERNAL;
    const float alpha = 1.0f, beta = g->beta;
    cublasStatus_t s = cublasLtMatmul(lt->handle, &e->desc, &alpha, g->a, &e->la, b, &e->lb,
                                      &beta, y, &e->lc, y, &e->lc, &e->algo, lt->ws, lt->ws_bytes,
                                      stream);
    if (!ok(s)) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    *ret_fused = e->fused;
    return WF_OK;
}
