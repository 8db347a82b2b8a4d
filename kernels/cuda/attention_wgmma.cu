/* attention_wgmma.cu — attention forward with Hopper's warpgroup MMA
 * (wgmma, sm_90a), the kernel and its launcher. Same contract as
 * attention.cu (backend.h: shapes, masking, GQA, out + lse); taken for
 * jobs whose q, k and v all have the compute dtype (bf16 or f16) on a
 * compute capability 9.0 device (cuda_plan.c chooses).
 *
 * One block: BR = 128 query rows of one (b, query head h), two
 * warpgroups (256 threads) of 64 rows. Per key tile (BC = 128 keys):
 *   S (64, 128) = Q_wg (64, D) K_tile^T    wgmma m64n128k16, Q and K from
 *                                          shared memory, fp32 acc
 *   online softmax in base 2 on S in registers (as attention.cu)
 *   O (64, D)  += P (64, 128) V_tile        wgmma m64nDk16, P from
 *                                          registers, V from shared memory
 * Shared tiles use the 128-byte swizzle the wgmma descriptors name: a
 * tile of R rows x D elements is D / 64 column blocks of R rows x 128
 * bytes, whose 16-byte chunk j of row r sits at chunk (j ^ (r % 8)).
 * Q and K are "K-major" operands (head dim contiguous); V, read as the B
 * operand of P V with its keys along K, is "MN-major" in the same layout
 * (the transpose flag of wgmma), so all three tiles are loaded the same
 * way: by TMA, whose 128-byte swizzle is that layout, zero-filled past
 * the tensor's end (see the kernel for the stages and their barriers).
 *
 * Causal: a warpgroup skips the tiles whose keys all follow its rows
 * (wgmma is issued by the whole warpgroup, so the test is per
 * warpgroup); the heavy query tiles go first (as attention.cu).
 *
 * Built only for sm_90a (the `a` features: wgmma, TMA); other
 * architectures get a body that traps, and the launcher is never asked
 * for them (wf_cuda_limits_t.wgmma is 0).
 */
#include "attention_common.cuh"

#include "tensor_map.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

using namespace wf_attn;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WF_WGMMA_BODY 1
#endif

constexpr int BR = WF_CUDA_BR;    /* query rows per block */
constexpr int BC = WF_CUDA_WG_BC; /* keys per tile */
constexpr int NTHREADS = WF_CUDA_WG_THREADS;
constexpr int WG_ROWS = 64;       /* query rows per warpgroup */
static_assert(BR == WG_ROWS * NTHREADS / 128, "two warpgroups of 64 rows");
static_assert(BC == 128, "S is one m64n128 accumulator");
/* V as the N-major B operand of P V (desc_v): its 64-column blocks along N
 * are a whole column block of the tile apart (LBO), its 8-key groups along
 * K 1024 bytes (SBO). */
constexpr uint32_t V_LBO = BC * 128, V_SBO = 1024;

#ifdef WF_WGMMA_BODY /* device helpers: sm_90a only */
#include "wgmma_ops.cuh" /* descriptors, wgmma, mbarriers, TMA, swizzle */

/* cp.async R rows of D elements (row r at element row0 + r * stride of
 * g) into the swizzled tile at shared address s; rows >= valid are zero. */
template <int D, int R>
__device__ __forceinline__ void load_tile_sw(uint32_t s, const char *g, long long row0,
                                             long long stride, int valid)
{
    constexpr int CPR = D / 8; /* chunks per row */
    static_assert((R * CPR) % NTHREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < R * CPR / NTHREADS; i++) {
        const int c = threadIdx.x + i * NTHREADS;
        const int r = c / CPR, j = c % CPR;
        const bool ok = r < valid;
        const char *src = ok ? g + (row0 + (long long)r * stride + j * 8) * 2 : g;
        cp_async16_zfill(s + sw_offset<R>(r, j), src, ok ? 16 : 0);
    }
}

#include "wgmma_tile.cuh" /* operand descriptors, softmax step, O rescale, P packing */
#endif /* WF_WGMMA_BODY */

/* PIPE: the key tile loop of FlashAttention-3 within a warpgroup: S of
 * tile j + 1 is issued with P V of tile j and its softmax runs while P V
 * is on the tensor cores (O is rescaled after P V lands). Without PIPE:
 * S, softmax, P V in turn per tile.
 *
 * Loads: TMA (tensor maps tq / tk / tv of the (B, S, H, D) tensors, boxes
 * of 64 elements x 128 rows, 128-byte swizzle: the tile layout above; rows
 * past the tensor's end arrive as zeros). Thread 0 issues them. K and V
 * each have WF_CUDA_WG_STAGES stages with a "full" mbarrier (the TMA's
 * bytes landed) and an "empty" one (every thread of the warpgroups using
 * the tile is done reading it). The two warpgroups never wait for each
 * other except through those, so they drift apart and one's softmax
 * overlaps the other's products. Thread 0, after step j of warpgroup 0,
 * issues K of tile j + 3 into tile j's stage (free once both warpgroups'
 * S of tile j landed) and V of tile j + 2 into tile j - 1's (free once
 * both P V of tile j - 1 landed): a warpgroup may run about a tile ahead
 * of the other before thread 0 waits, and every load is issued a step
 * before it is needed.
 *
 * Which warpgroups use a tile: the second (later rows) uses every tile
 * unless it has no rows (a last query tile of <= 64 rows: it does
 * nothing); the first uses every tile or all but the last (causal), whose
 * stage is never reused. The empty barriers count the threads of the
 * warpgroups with rows. */
template <typename T, int D, bool PIPE>
__global__ void __launch_bounds__(NTHREADS, 1)
flash_fwd_wgmma_kernel(attn_args a, const __grid_constant__ CUtensorMap tq,
                       const __grid_constant__ CUtensorMap tk,
                       const __grid_constant__ CUtensorMap tv)
{
#ifdef WF_WGMMA_BODY
    constexpr int KS_QK = D / 16;  /* k-steps of Q K^T */
    constexpr int KS_PV = BC / 16; /* k-steps of P V */
    constexpr int NS = BC / 2;     /* S accumulators per thread */
    constexpr int NO = D / 2;      /* O accumulators per thread */
    constexpr int NST = WF_CUDA_WG_STAGES;
    constexpr uint32_t Q_BYTES = BR * D * 2, KV_BYTES = BC * D * 2;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    /* Swizzle atoms must start on 1024 bytes (the launch adds the slack). */
    const uint32_t sbase = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = sbase;
    auto sK = [&](int j) { return sbase + Q_BYTES + (uint32_t)(j % NST) * KV_BYTES; };
    auto sV = [&](int j) { return sbase + Q_BYTES + (uint32_t)(NST + j % NST) * KV_BYTES; };
    /* mbarriers after the tiles: Q, full K / V, empty K / V */
    const uint32_t bars = sbase + Q_BYTES + 2u * NST * KV_BYTES;
    const uint32_t bar_q = bars;
    auto full_k = [&](int j) { return bars + 8u * (1 + j % NST); };
    auto full_v = [&](int j) { return bars + 8u * (1 + NST + j % NST); };
    auto empty_k = [&](int j) { return bars + 8u * (1 + 2 * NST + j % NST); };
    auto empty_v = [&](int j) { return bars + 8u * (1 + 3 * NST + j % NST); };

    const int wg = threadIdx.x / 128;        /* warpgroup */
    const int wl = (threadIdx.x % 128) / 32; /* warp in the warpgroup */
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const block_plan bp = plan_block(a, BR);
    const int q0 = bp.q0, q_rows = bp.q_rows, b = bp.b, h = bp.h, hk = bp.hk;
    const int k_end = bp.k_end;
    const int ntiles = (k_end + BC - 1) / BC;

    const int wrow0 = wg * WG_ROWS; /* block-local first row of the warpgroup */
    const long long wq_first = a.q_offset + q0 + wrow0;
    /* Causal: key kj is masked for warpgroup row i when kj > rel + i (rel
     * clamped to [-WG_ROWS - 1, Skv]); non-causal: rel = Skv masks nothing. */
    const int rel = a.causal ? (int)max((long long)(-WG_ROWS - 1),
                                        min((long long)a.Skv, wq_first - a.kv_offset))
                             : a.Skv;
    /* Tiles this warpgroup computes: [0, nt_wg) (later ones are masked for
     * all its rows; wgmma is per warpgroup, so the skip is too). */
    int nt_wg = rel + WG_ROWS - 1 < 0 ? 0 : min(ntiles, (rel + WG_ROWS - 1) / BC + 1);
    if (wrow0 >= q_rows)
        nt_wg = 0; /* a short last query tile: this warpgroup has no rows */
    const int rel_row = rel + wl * 16 + g;

    const bool producer = threadIdx.x == 0;
    auto load_k = [&](int j) {
        mbar_expect_tx(full_k(j), KV_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; c++)
            tma_load_4d(sK(j) + (uint32_t)c * (BC * 128), &tk, full_k(j), c * 64, hk, j * BC, b);
    };
    auto load_v = [&](int j) {
        mbar_expect_tx(full_v(j), KV_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; c++)
            tma_load_4d(sV(j) + (uint32_t)c * (BC * 128), &tv, full_v(j), c * 64, hk, j * BC, b);
    };
    if (producer) {
        const uint32_t users = q_rows > WG_ROWS ? 256u : 128u; /* threads with rows */
        mbar_init(bar_q, 1);
        for (int s = 0; s < NST; s++) {
            mbar_init(full_k(s), 1);
            mbar_init(full_v(s), 1);
            mbar_init(empty_k(s), users);
            mbar_init(empty_v(s), users);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (producer && ntiles > 0) {
        /* ntiles > 0: some warpgroup computes (the second one, every tile,
         * or the first when the second has no rows) and waits on every
         * load issued, so none is in flight when the block exits. */
        mbar_expect_tx(bar_q, Q_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; c++)
            tma_load_4d(sQ + (uint32_t)c * (BR * 128), &tq, bar_q, c * 64, h, q0, b);
        for (int j = 0; j < ntiles && j < NST; j++)
            load_k(j);
        for (int j = 0; j < ntiles && j < NST - 1; j++)
            load_v(j);
    }
    /* After warpgroup 0's step j: K of j + 3 (tile j's K stage, free when
     * S of j landed everywhere), V of j + 2 (tile j - 1's V stage, free
     * when P V of j - 1 landed everywhere). */
    auto produce = [&](int j) {
        if (!producer)
            return;
        if (j + NST < ntiles) {
            mbar_wait(empty_k(j), (uint32_t)(j / NST) & 1u);
            load_k(j + NST);
        }
        if (j + NST - 1 < ntiles) {
            if (j >= 1)
                mbar_wait(empty_v(j - 1), (uint32_t)((j - 1) / NST) & 1u);
            load_v(j + NST - 1);
        }
    };
    auto wait_k = [&](int j) { mbar_wait(full_k(j), (uint32_t)(j / NST) & 1u); };
    auto wait_v = [&](int j) { mbar_wait(full_v(j), (uint32_t)(j / NST) & 1u); };

    auto issue_s = [&](float *s, int j) {
#pragma unroll
        for (int kk = 0; kk < KS_QK; kk++)
            wgmma_ss<T, BC>(s, desc_kmajor<BR>(sQ, wrow0, kk), desc_kmajor<BC>(sK(j), 0, kk),
                            kk > 0);
    };
    auto issue_pv = [&](float *o, uint32_t (*pa)[4], int j) {
#pragma unroll
        for (int kk = 0; kk < KS_PV; kk++)
            wgmma_rs<T, D>(o, pa[kk], desc_v(sV(j), kk, V_LBO, V_SBO), 1);
    };

    float o[NO], s[NS], corr[2];
    uint32_t pa[KS_PV][4];
    acc_zero<NO, NS>(o, s);
    /* This thread's rows: running max (base 2), its part of the row sums. */
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

    if (nt_wg > 0) {
        mbar_wait(bar_q, 0);
        if (PIPE) {
            /* Prologue: S and P of tile 0. */
            wait_k(0);
            s_tile<NS>(s, [&] { issue_s(s, 0); });
            mbar_arrive(empty_k(0));
            softmax_tile<NS>(s, 0, a.Skv, rel_row, t, a.alpha, m_r, l_r, corr);
            pack_p<T, KS_PV>(s, pa); /* O is 0: nothing to rescale */
        }
    }
    for (int j = 0; j < nt_wg; j++) {
        if (PIPE) {
            /* Two straight-line bodies (no branch between a wgmma and its
             * wait, which would make ptxas serialize them). */
            if (j + 1 < nt_wg) {
                wait_k(j + 1);
                wait_v(j);
                reg_fence<NO>(o); /* the rescale and P are written before the fence */
                reg_fence_u<KS_PV>(pa);
                wgmma_fence();
                issue_s(s, j + 1);
                wgmma_commit();
                issue_pv(o, pa, j);
                wgmma_commit();
                wgmma_wait<1>(); /* S of j + 1 done; P V of j may run on */
                reg_fence<NS>(s);
                mbar_arrive(empty_k(j + 1));
                softmax_tile<NS>(s, (j + 1) * BC, a.Skv, rel_row, t, a.alpha, m_r, l_r, corr);
                wgmma_wait<0>();
                reg_fence<NO>(o);
                reg_fence_u<KS_PV>(pa); /* P V read them until now */
                mbar_arrive(empty_v(j));
                rescale_o<NO>(o, corr);
                pack_p<T, KS_PV>(s, pa);
            } else {
                wait_v(j);
                pv_tile<NO, KS_PV>(o, pa, [&] { issue_pv(o, pa, j); });
                mbar_arrive(empty_v(j));
            }
        } else {
            wait_k(j);
            s_tile<NS>(s, [&] { issue_s(s, j); });
            mbar_arrive(empty_k(j));
            softmax_tile<NS>(s, j * BC, a.Skv, rel_row, t, a.alpha, m_r, l_r, corr);
            rescale_o<NO>(o, corr);
            pack_p<T, KS_PV>(s, pa);
            wait_v(j);
            pv_tile<NO, KS_PV>(o, pa, [&] { issue_pv(o, pa, j); });
            mbar_arrive(empty_v(j));
        }
        if (wg == 0)
            produce(j);
    }
    /* Thread 0's loads must all be issued even when warpgroup 0 computes
     * fewer tiles than the block has (none, or all but the last). */
    if (wg == 0)
        for (int j = nt_wg; j < ntiles; j++)
            produce(j);

    /* Epilogue: normalise, write out and lse (merge mode: merge them into
     * the accumulator, attention_common.cuh). */
    float inv_r[2];
    epilogue_rows<D>(a, o, m_r, l_r, inv_r, wrow0, wl, g, rel_row, q_rows, b, q0, h, t,
                     [](float l) { return 1.f / l; }, true);
#else
    (void)a, (void)tq, (void)tk, (void)tv;
#ifdef __CUDA_ARCH__
    __trap(); /* built without sm_90a: the geometry never launches this */
#endif
#endif
}

/* The building blocks alone, for wf_cuda_wgmma_selftest: warpgroup 0
 * computes S = A Bk^T (A 64 x 128, Bk 128 x 128, both K-major through
 * load_tile_sw / desc_kmajor / wgmma_ss) and O = P V (P 64 x 128 placed in
 * registers as the m16n8k16 A fragments, V 128 x 128 N-major through
 * desc_v / wgmma_rs with the given offsets), and writes both from the
 * accumulator layout the attention kernel assumes. bf16, row-major. */
__global__ void __launch_bounds__(NTHREADS, 1)
wgmma_probe_kernel(const __nv_bfloat16 *A, const __nv_bfloat16 *Bk, const uint16_t *P,
                   const __nv_bfloat16 *V, float *S, float *O, uint32_t v_lbo, uint32_t v_sbo)
{
#ifdef WF_WGMMA_BODY
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sA = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sB = sA + 64 * 128 * 2, sV = sB + 128 * 128 * 2;
    load_tile_sw<128, 64>(sA, reinterpret_cast<const char *>(A), 0, 128, 64);
    load_tile_sw<128, 128>(sB, reinterpret_cast<const char *>(Bk), 0, 128, 128);
    load_tile_sw<128, 128>(sV, reinterpret_cast<const char *>(V), 0, 128, 128);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (threadIdx.x >= 128)
        return;
    const int wl = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float s[64], o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wgmma_ss<__nv_bfloat16, 128>(s, desc_kmajor<64>(sA, 0, kk), desc_kmajor<128>(sB, 0, kk),
                                     kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence<64>(s);
    uint32_t pa[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
#pragma unroll
        for (int half = 0; half < 2; half++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = wl * 16 + g + 8 * r, col = 16 * kk + 8 * half + 2 * t;
                pa[kk][half * 2 + r] =
                    (uint32_t)P[row * 128 + col] | ((uint32_t)P[row * 128 + col + 1] << 16);
            }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wgmma_rs<__nv_bfloat16, 128>(o, pa[kk], desc_v(sV, kk, v_lbo, v_sbo), 1);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence<64>(o);
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int row = wl * 16 + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
        S[row * 128 + col] = s[i];
        O[row * 128 + col] = o[i];
    }
#else
    (void)A, (void)Bk, (void)P, (void)V, (void)S, (void)O, (void)v_lbo, (void)v_sbo;
#ifdef __CUDA_ARCH__
    __trap();
#endif
#endif
}

template <typename T, int D, bool PIPE>
wf_status_t launch(const wf_attn_params_t *p, const attn_args &a, const wf_cuda_attn_geom_t *g,
                   cudaStream_t stream)
{
    const bool bf16 = g->compute_bf16 != 0;
    CUtensorMap tq, tk, tv;
    if (!wf_cuda_tensor_map(&tq, p->q, bf16, p->B, p->Sq, p->Hq, D, BR) ||
        !wf_cuda_tensor_map(&tk, p->k, bf16, p->B, p->Skv, p->Hkv, D, BC) ||
        !wf_cuda_tensor_map(&tv, p->v, bf16, p->B, p->Skv, p->Hkv, D, BC))
        return WF_E_INTERNAL;
    auto kern = flash_fwd_wgmma_kernel<T, D, PIPE>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->smem_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    dim3 grid(g->grid[0], g->grid[1], g->grid[2]), block(g->block[0], g->block[1], g->block[2]);
    kern<<<grid, block, g->smem_bytes, stream>>>(a, tq, tk, tv);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

} /* namespace */

wf_status_t wf_cuda_attention_wgmma_launch(const wf_attn_params_t *p,
                                           const wf_cuda_attn_geom_t *g,
                                           cudaStream_t stream)
{
    if (!p || !g || g->block[0] != NTHREADS ||
        (g->kernel != WF_CUDA_KERNEL_WGMMA && g->kernel != WF_CUDA_KERNEL_WGMMA_PIPE))
        return WF_E_BAD_ARGUMENT;
    if (g->grid[0] == 0 || g->grid[1] == 0 || g->grid[2] == 0)
        return WF_OK;
    const attn_args a = make_args(p);
    const bool pipe = g->kernel == WF_CUDA_KERNEL_WGMMA_PIPE;
    if (g->compute_bf16) {
        if (g->d == 64)
            return pipe ? launch<__nv_bfloat16, 64, true>(p, a, g, stream)
                        : launch<__nv_bfloat16, 64, false>(p, a, g, stream);
        return pipe ? launch<__nv_bfloat16, 128, true>(p, a, g, stream)
                    : launch<__nv_bfloat16, 128, false>(p, a, g, stream);
    }
    if (g->d == 64)
        return pipe ? launch<__half, 64, true>(p, a, g, stream)
                    : launch<__half, 64, false>(p, a, g, stream);
    return pipe ? launch<__half, 128, true>(p, a, g, stream)
                : launch<__half, 128, false>(p, a, g, stream);
}

/* bf16 bits of a float that bf16 holds exactly. */
static uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* Max |got - want| over n, and the first index past tol (or -1). */
static double max_err(const float *got, const double *want, int n, double tol, int *first_bad)
{
    double m = 0;
    *first_bad = -1;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= tol) && *first_bad < 0)
            *first_bad = i;
        if (e > m || e != e)
            m = e;
    }
    return m;
}

extern "C" wf_status_t wf_cuda_wgmma_selftest(int device, char *report, size_t n)
{
    if (report && n)
        report[0] = 0;
    cudaDeviceProp prop;
    if (!wf_cuda_wgmma_built() || cudaSetDevice(device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major != 9 ||
        prop.minor != 0) {
        (void)cudaGetLastError();
        if (report)
            snprintf(report, n, "wgmma: not available (needs sm_90a built and a 9.0 device)");
        return WF_E_UNAVAILABLE;
    }
    /* Inputs k / 16, |k| <= 8: every product and sum is exact in fp32. */
    const int NA = 64 * 128, NB = 128 * 128;
    uint16_t *hA = (uint16_t *)malloc(NA * 2), *hB = (uint16_t *)malloc(NB * 2),
             *hP = (uint16_t *)malloc(NA * 2), *hV = (uint16_t *)malloc(NB * 2);
    float *fA = (float *)malloc(NA * 4), *fB = (float *)malloc(NB * 4), *fP = (float *)malloc(NA * 4),
          *fV = (float *)malloc(NB * 4), *gS = (float *)malloc(NA * 4), *gO = (float *)malloc(NA * 4);
    double *rS = (double *)malloc(NA * 8), *rO = (double *)malloc(NA * 8);
    if (!hA || !hB || !hP || !hV || !fA || !fB || !fP || !fV || !gS || !gO || !rS || !rO) {
        free(hA); free(hB); free(hP); free(hV); free(fA); free(fB); free(fP); free(fV);
        free(gS); free(gO); free(rS); free(rO);
        return WF_E_NO_MEMORY;
    }
    unsigned x = 12345;
    auto val = [&]() {
        x = x * 1103515245u + 12345u;
        return (float)((int)((x >> 16) % 17) - 8) / 16.0f;
    };
    for (int i = 0; i < NA; i++) {
        fA[i] = val();
        fP[i] = val();
        hA[i] = bf16_bits(fA[i]);
        hP[i] = bf16_bits(fP[i]);
    }
    for (int i = 0; i < NB; i++) {
        fB[i] = val();
        fV[i] = val();
        hB[i] = bf16_bits(fB[i]);
        hV[i] = bf16_bits(fV[i]);
    }
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++) {
            double a = 0, o = 0;
            for (int k = 0; k < 128; k++) {
                a += (double)fA[i * 128 + k] * fB[j * 128 + k];
                o += (double)fP[i * 128 + k] * fV[k * 128 + j];
            }
            rS[i * 128 + j] = a;
            rO[i * 128 + j] = o;
        }
    void *dA = nullptr, *dB = nullptr, *dP = nullptr, *dV = nullptr, *dS = nullptr,
         *dO = nullptr;
    wf_status_t st = WF_E_INTERNAL;
    size_t len = 0;
    const size_t smem = 1024 + (64 + 128 + 128) * 128 * 2;
    const uint32_t variants[2][2] = {{V_LBO, V_SBO}, {V_SBO, V_LBO}};
    int s_bad = -1;
    double s_err = 0;
    if (cudaMalloc(&dA, NA * 2) || cudaMalloc(&dB, NB * 2) || cudaMalloc(&dP, NA * 2) ||
        cudaMalloc(&dV, NB * 2) || cudaMalloc(&dS, NA * 4) || cudaMalloc(&dO, NA * 4))
        goto done;
    cudaMemcpy(dA, hA, NA * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB, NB * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dP, hP, NA * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dV, hV, NB * 2, cudaMemcpyHostToDevice);
    if (cudaFuncSetAttribute(wgmma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        goto done;
    st = WF_OK;
    for (int v = 0; v < 2; v++) {
        cudaMemset(dS, 0xff, NA * 4);
        cudaMemset(dO, 0xff, NA * 4);
        wgmma_probe_kernel<<<1, NTHREADS, smem>>>(
            (const __nv_bfloat16 *)dA, (const __nv_bfloat16 *)dB, (const uint16_t *)dP,
            (const __nv_bfloat16 *)dV, (float *)dS, (float *)dO, variants[v][0],
            variants[v][1]);
        if (cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(gS, dS, NA * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(gO, dO, NA * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
            if (report && len < n)
                len += (size_t)snprintf(report + len, n - len, "probe failed: %s",
                                        cudaGetErrorString(cudaGetLastError()));
            st = WF_E_INTERNAL;
            goto done;
        }
        int o_bad;
        double o_err = max_err(gO, rO, NA, 1e-3, &o_bad);
        if (v == 0) {
            s_err = max_err(gS, rS, NA, 1e-3, &s_bad);
            if (report && len < n)
                len += (size_t)snprintf(
                    report + len, n - len, "wgmma S = A B^T (K-major, swizzle 128): %s (max err %.2e",
                    s_bad < 0 ? "ok" : "WRONG", s_err);
            if (s_bad >= 0 && report && len < n)
                len += (size_t)snprintf(report + len, n - len, "; first at [%d,%d] got %g want %g",
                                        s_bad / 128, s_bad % 128, gS[s_bad], rS[s_bad]);
            if (report && len < n)
                len += (size_t)snprintf(report + len, n - len, ")");
        }
        if (report && len < n)
            len += (size_t)snprintf(report + len, n - len,
                                    "; O = P V (regs x N-major, lbo %u sbo %u): %s (max err %.2e",
                                    variants[v][0], variants[v][1], o_bad < 0 ? "ok" : "WRONG",
                                    o_err);
        if (o_bad >= 0 && report && len < n)
            len += (size_t)snprintf(report + len, n - len, "; first at [%d,%d] got %g want %g",
                                    o_bad / 128, o_bad % 128, gO[o_bad], rO[o_bad]);
        if (report && len < n)
            len += (size_t)snprintf(report + len, n - len, ")");
        if (v == 0 && (s_bad >= 0 || o_bad >= 0))
            st = WF_E_INTERNAL;
    }
done:
    (void)cudaGetLastError();
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dP);
    cudaFree(dV);
    cudaFree(dS);
    cudaFree(dO);
    free(hA); free(hB); free(hP); free(hV); free(fA); free(fB); free(fP); free(fV);
    free(gS); free(gO); free(rS); free(rO);
    return st;
}

int wf_cuda_wgmma_built(void)
{
#ifdef WF_CUDA_SM90A
    return 1;
#else
    return 0;
#endif
}
