/* attention.cu — flash-style attention forward on tensor cores (FA2
 * layout), the kernel and its launcher. Shapes and the masking / GQA
 * contract are backend.h's; the geometry is cuda_plan.h's.
 *
 * One block: BR = 128 query rows of one (b, query head h), 4 warps of 32
 * rows (two m16 tiles: each K / V fragment loaded from shared memory feeds
 * both). Per key tile (BC = 64 keys) each warp computes
 *   S (32, 64)  = Q_w (32, D) K_tile^T        mma.sync m16n8k16, fp32 acc
 *   online softmax in base 2 on S (rows live in quads of 4 lanes; O is
 *   rescaled only when a row maximum moved)
 *   O (32, D)  += P (32, 64) V_tile (64, D)    P reused from S's registers
 * Causal: a warp skips the tiles whose keys all follow its rows.
 * Fragments come from shared memory with ldmatrix (.trans for V, so V
 * stays row-major as it arrives). K/V tiles are double-buffered: tile j+1
 * is in flight (cp.async) while tile j is computed, when the input dtype
 * is the compute dtype; other dtypes are converted on the way in
 * (synchronous loads). Everything stays on chip: no workspace.
 *
 * A row that sees no key (causal, global offsets) ends with l = 0: it
 * writes out = 0 and lse = -inf (the empty row of the ring merge).
 * Non-finite values as kernels/reference.h: maxima ignore NaN (fmaxf), a
 * NaN or +inf score (inf - inf) makes the row's weights and l NaN: out and
 * lse NaN; a row that sees keys whose scores are all -inf ends with l = 0
 * and writes out NaN (0/0), lse -inf. Differs from the CPU backend in one
 * case: a NaN / inf in v of a key that the causal mask hides from some
 * rows of its 64-key tile reaches those rows' column (weight 0 x NaN in
 * the tensor-core product P V); the CPU backend keeps it out.
 * Scale: alpha = scale log2 e is folded into the exponent's FFMA on raw
 * scores, so raw score x alpha must stay in the f32 range; with the
 * wire's bound (scale <= 2^64) it does for f16 inputs of any D < 2^30.
 *
 * Not here: validation (cuda_plan.c), memory, streams (cuda_backend.cu).
 */
#include "attention_common.cuh"

namespace {

using namespace wf_attn;

constexpr int BR = WF_CUDA_BR;
constexpr int BC = WF_CUDA_BC;
constexpr int NWARPS = WF_CUDA_WARPS;
constexpr int PAD = WF_CUDA_PAD;
constexpr int NTHREADS = 32 * NWARPS;
constexpr int MT = WF_CUDA_MTILES;  /* m-tiles of 16 rows per warp */
constexpr int WROWS = 16 * MT;      /* query rows per warp */
static_assert(BR == WROWS * NWARPS, "one warp per WROWS query rows");
static_assert(BC % 16 == 0, "key tile in k-steps of 16");

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* d (16x8 f32) += a (16x16, row) * b (16x8, col). */
template <typename T>
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                        uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float d[4], const uint32_t a[4],
                                                 uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Copy `nrows` rows of D elements (source row r at element row0 + r *
 * stride, dtype dt) into shared rows of dpad elements of T. Rows at or
 * past `valid` are zero. Same dtype: cp.async (the caller commits and
 * waits); other dtypes: converted with plain loads. */
template <typename T, int D>
__device__ __forceinline__ void load_tile(T *sm, const char *g, int dt, long long row0,
                                          long long stride, int valid, int nrows)
{
    constexpr int CPR = D / 8; /* 16-byte chunks of T per row */
    constexpr int DP = D + PAD;
    for (int c = threadIdx.x; c < nrows * CPR; c += NTHREADS) {
        int r = c / CPR, col = (c % CPR) * 8;
        T *dst = sm + r * DP + col;
        if (r >= valid) {
            *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
            continue;
        }
        long long e = row0 + (long long)r * stride + col;
        if (dt == cvt<T>::dtype) {
            cp_async16(dst, g + e * 2);
        } else {
            float f[8];
            load8(g, dt, e, f);
            uint4 u;
            u.x = cvt<T>::pack(f[0], f[1]);
            u.y = cvt<T>::pack(f[2], f[3]);
            u.z = cvt<T>::pack(f[4], f[5]);
            u.w = cvt<T>::pack(f[6], f[7]);
            *reinterpret_cast<uint4 *>(dst) = u;
        }
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(NTHREADS, 2)
flash_fwd_kernel(attn_args a, int stages)
{
    constexpr int DP = D + PAD;
    constexpr int NT_S = BC / 8;  /* n-tiles of S per m-tile */
    constexpr int NT_O = D / 8;   /* n-tiles of O per m-tile */
    constexpr int KS_QK = D / 16; /* k-steps of Q K^T */
    constexpr int KS_PV = BC / 16;
    /* D = 64: Q fragments stay in registers; D = 128: reloaded from shared
     * memory per tile (the registers go to the 2 x 16 x 4 O accumulators). */
    constexpr bool QREG = D <= 64;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sKV = sQ + BR * DP; /* stage s: K at s * 2 * BC * DP, V after it */

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const block_plan bp = plan_block(a, BR);
    const int q0 = bp.q0, q_rows = bp.q_rows, b = bp.b, h = bp.h, hk = bp.hk;
    const int k_end = bp.k_end;
    const int wrow0 = warp * WROWS; /* block-local first row of this warp */
    const int ntiles = (k_end + BC - 1) / BC;

    const long long q_stride = (long long)a.Hq * D, kv_stride = (long long)a.Hkv * D;
    const long long q_row0 = (((long long)b * a.Sq + q0) * a.Hq + h) * D;
    const long long kv_row0 = ((long long)b * a.Skv * a.Hkv + hk) * D;

    auto issue_kv = [&](int j, int stage) {
        T *sK = sKV + stage * 2 * BC * DP;
        T *sV = sK + BC * DP;
        int k0 = j * BC, valid = min(BC, a.Skv - k0);
        load_tile<T, D>(sK, a.k, a.k_dt, kv_row0 + (long long)k0 * kv_stride, kv_stride,
                        valid, BC);
        load_tile<T, D>(sV, a.v, a.v_dt, kv_row0 + (long long)k0 * kv_stride, kv_stride,
                        valid, BC);
    };

    load_tile<T, D>(sQ, a.q, a.q_dt, q_row0, q_stride, q_rows, BR);
    if (ntiles > 0)
        issue_kv(0, 0);
    cp_async_commit();

    float o[MT][NT_O][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT_O; n++)
            o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
    /* Rows wrow0 + 16 mt + g + 8 r: running max (base 2), this lane's
     * part of the row sums. */
    float m_r[MT][2], l_r[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m_r[mt][0] = m_r[mt][1] = -INFINITY;
        l_r[mt][0] = l_r[mt][1] = 0.f;
    }
    uint32_t qf[QREG ? KS_QK : 1][MT][4];

    const long long wq_first = a.q_offset + q0 + wrow0; /* global pos of the warp's row 0 */
    /* Causal: key kj is masked for warp row i when kj > rel + i (int: rel
     * clamped to [-WROWS - 1, Skv], the masks are the same). Non-causal:
     * rel = Skv masks nothing. */
    const int rel = a.causal ? (int)max((long long)(-WROWS - 1),
                                        min((long long)a.Skv, wq_first - a.kv_offset))
                             : a.Skv;
    const int mi = lane >> 3;
    /* ldmatrix lane offsets (elements) */
    const int q_off = (wrow0 + (lane & 15)) * DP + (lane >> 4) * 8;
    const int k_off = ((mi >> 1) * 8 + (lane & 7)) * DP + (mi & 1) * 8;
    const int v_off = ((mi & 1) * 8 + (lane & 7)) * DP + (mi >> 1) * 8;

    for (int j = 0; j < ntiles; j++) {
        const int stage = stages == 2 ? (j & 1) : 0;
        /* Tile j (and Q) landed for every thread; with two stages, every
         * warp is past tile j - 1, so its stage takes tile j + 1 now (one
         * barrier per tile). */
        cp_async_wait<0>();
        __syncthreads();
        if (stages == 2 && j + 1 < ntiles) {
            issue_kv(j + 1, (j + 1) & 1);
            cp_async_commit();
        }
        if (QREG && j == 0) {
#pragma unroll
            for (int kk = 0; kk < (QREG ? KS_QK : 1); kk++)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    ldsm_x4(qf[kk][mt], sQ + q_off + mt * 16 * DP + kk * 16);
        }
        const T *sK = sKV + stage * 2 * BC * DP;
        const T *sV = sK + BC * DP;
        const int k0 = j * BC;

        /* Causal: a warp whose rows all precede the tile's keys skips it
         * (every score would be masked: nothing changes). */
        if (k0 <= rel + WROWS - 1) {
            /* S = Q K^T */
            float s[MT][NT_S][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT_S; n++)
                    s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
            /* Unrolled by 4 (all of D = 64, half of D = 128): the full
             * unroll of D = 128 spills. */
#pragma unroll 4
            for (int kk = 0; kk < KS_QK; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (QREG) {
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            qa[mt][i] = qf[QREG ? kk : 0][mt][i];
                    } else {
                        ldsm_x4(qa[mt], sQ + q_off + mt * 16 * DP + kk * 16);
                    }
                }
#pragma unroll
                for (int np = 0; np < NT_S / 2; np++) {
                    uint32_t r[4];
                    ldsm_x4(r, sK + k_off + np * 16 * DP + kk * 16);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816<T>(s[mt][2 * np], qa[mt], r[0], r[1]);
                        mma16816<T>(s[mt][2 * np + 1], qa[mt], r[2], r[3]);
                    }
                }
            }

            /* Scale, mask, online softmax. */
            const bool need_mask = k0 + BC > a.Skv || k0 + BC - 1 > rel;
            /* The scale is folded into the exponent's FFMA; maxima are
             * taken on raw scores (alpha > 0). A scale <= 0 (rare) scales
             * the scores first and runs with alpha 1. */
            float al = a.alpha;
            if (!(al > 0.f)) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < NT_S; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            s[mt][n][e] *= al;
                al = 1.f;
            }
            float corr[MT][2], m_use[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < NT_S; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][n][e];
                        if (need_mask) {
                            int kj = k0 + n * 8 + 2 * t + (e & 1);
                            if (kj >= a.Skv || kj > rel + mt * 16 + g + (e >> 1) * 8)
                                x = -INFINITY;
                        }
                        s[mt][n][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                    float m_new = fmaxf(m_r[mt][r], mx[r] * al);
                    m_use[mt][r] = m_new == -INFINITY ? 0.f : m_new; /* no NaN from -inf - -inf */
                    corr[mt][r] = exp2f(m_r[mt][r] - m_use[mt][r]);
                    m_r[mt][r] = m_new;
                    l_r[mt][r] *= corr[mt][r];
                }
            }
            /* Rescale O only when some row's max moved (warp-uniform). */
            const bool moved = corr[0][0] != 1.f || corr[0][1] != 1.f ||
                               corr[MT - 1][0] != 1.f || corr[MT - 1][1] != 1.f;
            if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < NT_O; n++) {
                        o[mt][n][0] *= corr[mt][0];
                        o[mt][n][1] *= corr[mt][0];
                        o[mt][n][2] *= corr[mt][1];
                        o[mt][n][3] *= corr[mt][1];
                    }
            }

            /* P (packed to T) and O += P V */
            uint32_t pa[MT][KS_PV][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int n = 0; n < NT_S; n++) {
                    float p0 = exp2f(fmaf(s[mt][n][0], al, -m_use[mt][0]));
                    float p1 = exp2f(fmaf(s[mt][n][1], al, -m_use[mt][0]));
                    float p2 = exp2f(fmaf(s[mt][n][2], al, -m_use[mt][1]));
                    float p3 = exp2f(fmaf(s[mt][n][3], al, -m_use[mt][1]));
                    l_r[mt][0] += p0 + p1;
                    l_r[mt][1] += p2 + p3;
                    pa[mt][n >> 1][(n & 1) * 2 + 0] = cvt<T>::pack(p0, p1);
                    pa[mt][n >> 1][(n & 1) * 2 + 1] = cvt<T>::pack(p2, p3);
                }
            }
#pragma unroll
            for (int kk = 0; kk < KS_PV; kk++) {
#pragma unroll
                for (int dp = 0; dp < NT_O / 2; dp++) {
                    uint32_t r[4];
                    ldsm_x4_trans(r, sV + v_off + kk * 16 * DP + dp * 16);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816<T>(o[mt][2 * dp], pa[mt][kk], r[0], r[1]);
                        mma16816<T>(o[mt][2 * dp + 1], pa[mt][kk], r[2], r[3]);
                    }
                }
            }
        }
        if (stages == 1) {
            __syncthreads(); /* the single stage is overwritten next */
            if (j + 1 < ntiles) {
                issue_kv(j + 1, 0);
                cp_async_commit();
            }
        }
    }
    cp_async_wait<0>();

    /* Epilogue: normalise, write out and lse (merge mode: merge them into
     * the accumulator, attention_common.cuh). */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = l_r[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int row = wrow0 + mt * 16 + g + r * 8;
            const bool live = row < q_rows;
            /* l = 0: no visible key (out 0) or visible keys whose scores
             * are all -inf (out 0/0 = NaN); l NaN: a NaN score (NaN) */
            const bool sees = rel + mt * 16 + g + r * 8 >= 0;
            const float inv = l > 0.f ? 1.f / l : l == 0.f && !sees ? 0.f : __int_as_float(0x7fc00000);
            const float lse = l > 0.f    ? (m_r[mt][r] + log2f(l)) * 0.69314718055994531f
                              : l == 0.f ? -INFINITY
                                         : l; /* NaN */
            const long long li = ((long long)b * a.Sq + q0 + row) * a.Hq + h;
            /* merge mode: the accumulator's row plan (every lane) */
            const wf_merge::row_plan mp = epilogue_plan(a, live, li, lse);
            if (live) {
                const long long lo = out_row<D>(a, b, q0 + row, h);
#pragma unroll
                for (int n = 0; n < NT_O; n++)
                    epilogue_store2(a, mp, li * D + n * 8 + 2 * t, lo + n * 8 + 2 * t,
                                    o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
                if (t == 0)
                    epilogue_lse(a, mp, li, lse);
            }
        }
    }
}

template <typename T, int D>
wf_status_t launch(const attn_args &a, const wf_cuda_attn_geom_t *g, cudaStream_t stream)
{
    auto kern = flash_fwd_kernel<T, D>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->smem_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    dim3 grid(g->grid[0], g->grid[1], g->grid[2]), block(g->block[0], g->block[1], g->block[2]);
    kern<<<grid, block, g->smem_bytes, stream>>>(a, g->stages);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

} /* namespace */

wf_status_t wf_cuda_attention_launch(const wf_attn_params_t *p,
                                     const wf_cuda_attn_geom_t *g,
                                     cudaStream_t stream)
{
    if (!p || !g)
        return WF_E_BAD_ARGUMENT;
    if (g->kernel != WF_CUDA_KERNEL_MMA)
        return wf_cuda_attention_wgmma_launch(p, g, stream);
    if (g->grid[0] == 0 || g->grid[1] == 0 || g->grid[2] == 0)
        return WF_OK; /* empty head range */
    const attn_args a = make_args(p);
    if (g->compute_bf16)
        return g->d == 64 ? launch<__nv_bfloat16, 64>(a, g, stream)
                          : launch<__nv_bfloat16, 128>(a, g, stream);
    return g->d == 64 ? launch<__half, 64>(a, g, stream) : launch<__half, 128>(a, g, stream);
}
