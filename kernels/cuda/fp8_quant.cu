/* fp8_quant.cu — the quantizer of fp8 attention (cuda_plan.h, "fp8
 * attention"): per (batch, head) of the call, amax over the head's finite
 * elements, then kernels/fp8.h's e4m3(x * 448 / amax) into the
 * workspace: q8 and k8 in the inputs' (B, S, H, D) layout, V transposed
 * to v8t (B, Hkv, D, skv_pad) with its keys in the fp8 kernel's order
 * (fp8_key_slot) and zeros past Skv, and the scales amax / 448.
 *
 * Compiled WITHOUT fast math: 448 / amax and amax / 448 are IEEE
 * divisions, as fp8.h computes them on the host, so the copies are the
 * bytes the host reference quantizes to. Any GPU (the kernels use no
 * Hopper feature; the fp8 kernel that reads them is sm_90a).
 */
#include "attention_common.cuh"

#include "fp8.h"

#include <cuda_fp8.h> /* before fp8_ops.cuh, which is included in the namespace */

namespace {

using namespace wf_attn;

#include "fp8_ops.cuh"

constexpr int QROWS = WF_CUDA_FP8_QUANT_ROWS;
constexpr int QTHREADS = WF_CUDA_FP8_QUANT_THREADS;
static_assert(QROWS == 64, "v8t's blocks are two 32-key chunks");

/* Grid (ceil(S / QROWS), heads, B): the largest finite |x| of rows
 * [x0, x0 + QROWS) of head h0 + y of batch z into amax[b * H + h] (u32
 * bits of a non-negative float order as its value; 0 = all zero). */
__global__ void __launch_bounds__(QTHREADS)
fp8_amax_kernel(const char *x, int dt, int S, int H, int D, int h0, unsigned *amax)
{
    const int b = blockIdx.z, h = h0 + blockIdx.y, r0 = blockIdx.x * QROWS;
    const int rows = min(QROWS, S - r0), cpr = D / 8;
    float m = 0.f;
    for (int c = threadIdx.x; c < rows * cpr; c += QTHREADS) {
        const int r = c / cpr, j = c % cpr;
        float f[8];
        load8(x, dt, (((long long)b * S + r0 + r) * H + h) * D + j * 8, f);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float a = fabsf(f[i]);
            if (a <= 3.402823466e38f) /* finite: inf and NaN fail */
                m = fmaxf(m, a);
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x % 32 == 0 && m > 0.f)
        atomicMax(&amax[(long long)b * H + h], __float_as_uint(m));
}

/* Four e4m3 bytes of x * factor, first in the low byte. */
__device__ __forceinline__ uint32_t quant4(const float *f, float factor)
{
    return fp8_e4m3(f[0] * factor) | (fp8_e4m3(f[1] * factor) << 8) |
           (fp8_e4m3(f[2] * factor) << 16) | (fp8_e4m3(f[3] * factor) << 24);
}

/* Grid as fp8_amax_kernel: x8 (same layout as x, one byte per element)
 * = e4m3(x * 448 / amax) for the rows of the block; the first block of a
 * head writes its scale. */
__global__ void __launch_bounds__(QTHREADS)
fp8_quant_rows_kernel(const char *x, int dt, int S, int H, int D, int h0,
                      const unsigned *amax, uint8_t *x8, float *scale)
{
    const int b = blockIdx.z, h = h0 + blockIdx.y, r0 = blockIdx.x * QROWS;
    const int rows = min(QROWS, S - r0), cpr = D / 8;
    const float am = __uint_as_float(amax[(long long)b * H + h]);
    const float factor = wf_fp8_quant_factor(am);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        scale[(long long)b * H + h] = wf_fp8_scale(am);
    for (int c = threadIdx.x; c < rows * cpr; c += QTHREADS) {
        const int r = c / cpr, j = c % cpr;
        const long long e = (((long long)b * S + r0 + r) * H + h) * D + j * 8;
        float f[8];
        load8(x, dt, e, f);
        *reinterpret_cast<uint2 *>(x8 + e) = make_uint2(quant4(f, factor), quant4(f + 4, factor));
    }
}

/* Grid (skv_pad / 64, heads, B): keys [k0, k0 + 64) of V head h0 + y of
 * batch z, quantized, transposed through shared memory (tile[d][slot])
 * into v8t (B, H, D, skv_pad) with each 32-key chunk in fp8_key_slot's
 * order; keys >= Skv are 0 (the padding P V multiplies by 0). */
__global__ void __launch_bounds__(QTHREADS)
fp8_quant_vt_kernel(const char *v, int dt, int Skv, int H, int D, int h0, int skv_pad,
                    const unsigned *amax, uint8_t *v8t, float *scale)
{
    __shared__ __align__(16) uint8_t tile[128 * QROWS];
    const int b = blockIdx.z, h = h0 + blockIdx.y, k0 = blockIdx.x * QROWS, cpr = D / 8;
    const float am = __uint_as_float(amax[(long long)b * H + h]);
    const float factor = wf_fp8_quant_factor(am);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        scale[(long long)b * H + h] = wf_fp8_scale(am);
    for (int c = threadIdx.x; c < QROWS * cpr; c += QTHREADS) {
        const int r = c / cpr, j = c % cpr;
        const int slot = (r & ~31) | fp8_key_slot(r & 31);
        float f[8];
        if (k0 + r < Skv) {
            load8(v, dt, (((long long)b * Skv + k0 + r) * H + h) * D + j * 8, f);
#pragma unroll
            for (int i = 0; i < 8; i++)
                tile[(j * 8 + i) * QROWS + slot] = (uint8_t)fp8_e4m3(f[i] * factor);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                tile[(j * 8 + i) * QROWS + slot] = 0;
        }
    }
    __syncthreads();
    uint8_t *dst = v8t + ((long long)b * H + h) * D * (long long)skv_pad + k0;
    for (int c = threadIdx.x; c < D * (QROWS / 16); c += QTHREADS) {
        const int d = c / (QROWS / 16), q = c % (QROWS / 16);
        *reinterpret_cast<uint4 *>(dst + (long long)d * skv_pad + q * 16) =
            *reinterpret_cast<const uint4 *>(&tile[d * QROWS + q * 16]);
    }
}

} /* namespace */

wf_status_t wf_cuda_fp8_quantize_launch(const wf_attn_params_t *p, const wf_cuda_fp8_ws_t *L,
                                        void *workspace, cudaStream_t stream)
{
    if (!p || !L || !workspace)
        return WF_E_BAD_ARGUMENT;
    const int64_t nq = p->h_end - p->h_begin, nkv = L->kv_end - L->kv_begin;
    if (nq <= 0)
        return WF_OK;
    char *ws = static_cast<char *>(workspace);
    unsigned *aq = reinterpret_cast<unsigned *>(ws + L->amax_q);
    unsigned *ak = reinterpret_cast<unsigned *>(ws + L->amax_k);
    unsigned *av = reinterpret_cast<unsigned *>(ws + L->amax_v);
    uint8_t *q8 = reinterpret_cast<uint8_t *>(ws + L->q8);
    uint8_t *k8 = reinterpret_cast<uint8_t *>(ws + L->k8);
    uint8_t *v8t = reinterpret_cast<uint8_t *>(ws + L->v8t);
    float *sq = reinterpret_cast<float *>(ws + L->sq);
    float *sk = reinterpret_cast<float *>(ws + L->sk);
    float *sv = reinterpret_cast<float *>(ws + L->sv);
    const char *q = static_cast<const char *>(p->q), *k = static_cast<const char *>(p->k),
               *v = static_cast<const char *>(p->v);
    const int D = (int)p->D, Sq = (int)p->Sq, Skv = (int)p->Skv, Hq = (int)p->Hq,
              Hkv = (int)p->Hkv, hq0 = (int)p->h_begin, hk0 = (int)L->kv_begin;
    if (cudaMemsetAsync(ws + L->amax_q, 0, (size_t)(L->sq - L->amax_q), stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    unsigned gq[3], gk[3], gv[3], blk[3];
    wf_cuda_fp8_quant_geometry(p->Sq, nq, p->B, gq, blk);
    wf_cuda_fp8_quant_geometry(p->Skv, nkv, p->B, gk, blk);
    wf_cuda_fp8_quant_geometry(L->skv_pad, nkv, p->B, gv, blk);
    const dim3 bq(gq[0], gq[1], gq[2]), bk(gk[0], gk[1], gk[2]), bv(gv[0], gv[1], gv[2]);
    fp8_amax_kernel<<<bq, QTHREADS, 0, stream>>>(q, p->q_dtype, Sq, Hq, D, hq0, aq);
    fp8_amax_kernel<<<bk, QTHREADS, 0, stream>>>(k, p->k_dtype, Skv, Hkv, D, hk0, ak);
    fp8_amax_kernel<<<bk, QTHREADS, 0, stream>>>(v, p->v_dtype, Skv, Hkv, D, hk0, av);
    fp8_quant_rows_kernel<<<bq, QTHREADS, 0, stream>>>(q, p->q_dtype, Sq, Hq, D, hq0, aq, q8, sq);
    fp8_quant_rows_kernel<<<bk, QTHREADS, 0, stream>>>(k, p->k_dtype, Skv, Hkv, D, hk0, ak, k8,
                                                       sk);
    fp8_quant_vt_kernel<<<bv, QTHREADS, 0, stream>>>(v, p->v_dtype, Skv, Hkv, D, hk0,
                                                     (int)L->skv_pad, av, v8t, sv);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}
