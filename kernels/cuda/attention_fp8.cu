/* attention_fp8.cu — fp8 (e4m3) attention forward on Hopper (sm_90a), the
 * kernel, its launcher and the self-test of its building blocks.
 * Same contract as the other kernels (backend.h: shapes, masking, GQA,
 * head ranges, out dtypes, lse, the non-finite rules) on the e4m3 copies
 * fp8_quant.cu writes into the workspace (cuda_plan.h, "fp8 attention"):
 * q8 (B, Sq, Hq, D), k8 (B, Skv, Hkv, D), v8t (B, Hkv, D, skv_pad) and the
 * per-(batch, head) scales sq, sk, sv.
 *
 * The structure is attention_wgmma.cu's (not its pipelined form): one
 * block = BR = 128 query rows of one (b, query head h) in two warpgroups
 * of 64 rows; per key tile (BC = 128 keys):
 *   S (64, 128) = Q8 K8^T          wgmma m64n128k32 e4m3 x e4m3 -> f32, Q and
 *                                  K K-major from shared memory (D / 32 steps)
 *   online softmax in base 2 on S with alpha = scale * log2(e) * sq * sk
 *   P rounded to e4m3 (x 256, below), in registers as the A fragments
 *   O (64, D) += P8 V8            wgmma m64nDk32 (4 steps), B = v8t's tile
 *                                  (D rows of 128 keys: K-major, as 8-bit
 *                                  wgmma requires; V itself would be N-major)
 * and at the end O * sv / (256 l). Tiles by TMA (tensor maps of bytes,
 * tensor_map.cuh), zero past the tensor's end, in WF_CUDA_FP8_STAGES K and
 * V stages with full / empty mbarriers as attention_wgmma.cu. Swizzle: a
 * Q / K row of D = 128 bytes takes the 128-byte swizzle (descriptor mode
 * 1, 8-row groups 1024 bytes apart), D = 64 the 64-byte one (mode 2, 512
 * bytes); v8t's rows are 128 keys = 128 bytes for either D.
 *
 * P x 256: P = exp2(s - m) lies in [0, 1]; e4m3's subnormals end at 2^-9,
 * so P below 2^-10 would round to 0. Scaled by 256 (exact: a power of
 * two) P keeps 8 more binades; the sum l stays unscaled (f32, unrounded
 * P) and the 256 is divided out with sv at the end.
 *
 * THE P FRAGMENT (why v8t's keys are permuted). After S = Q K^T, thread
 * (warp w, lane = 4 g + t) of a warpgroup holds S's f32 accumulator
 * layout: for each n8 block c of the 128 keys, s[4c + 2r + e] = S(row 16 w
 * + g + 8 r, key 8 c + 2 t + e), r, e in {0, 1}. The A operand of a k32
 * e4m3 wgmma from registers (PTX ISA, "wgmma register fragments", the
 * .m64nNk32 A layout for 8-bit types, the same as mma.m16n8k32's) is four
 * .b32 registers per thread, four bytes each: register 2 h + r, byte j =
 * A(row 16 w + g + 8 r, column 16 h + 4 t + j), h, r in {0, 1}, j in
 * 0..3. So in the 32 keys of k-step kk the thread has, per row, keys
 * {2t, 2t+1, 8+2t, 9+2t} and {16+2t, ..., 25+2t} (S) where the MMA wants
 * columns {4t..4t+3} and {16+4t..19+4t} (A): the same count, other keys.
 * Rather than move bytes between threads, the sum over keys is reordered:
 * byte j of register 2 h + r takes the thread's own score of key
 *   key(h, t, j) = 16 h + 8 (j / 2) + 2 t + (j % 2)   (block c = 2 h + j / 2)
 * that is s[16 kk + 8 h + 4 (j / 2) + 2 r + (j % 2)] (pack_p8), and v8t
 * stores V's key 16 h + 8 a + 2 t + e at column (slot) 16 h + 4 t + 2 a +
 * e of its 32-key chunk (fp8_key_slot, applied by the quantizer), so that
 * column 16 h + 4 t + j of B holds key(h, t, j): A and B agree on every
 * column, and O = sum over slots = sum over keys. key() is a bijection of
 * 0..31 (t, a, e take every value once per h). The causal mask, Skv and
 * the offsets act on S with the true key indices (softmax_tile), before
 * any reordering. Checked by test_cuda_plan_fp8 (the slot formula against
 * this derivation) and on a GPU by wf_cuda_fp8_selftest (O = P V through
 * pack_p8 and a permuted V tile against the host).
 *
 * Built only for sm_90a; other architectures get a body that traps, and
 * the backend never launches it there (attention_fp8_ok is false).
 */
#include "attention_common.cuh"

#include "fp8.h"
#include "tensor_map.cuh"

#include <cuda_fp8.h> /* before fp8_ops.cuh, which is included in the namespace */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

using namespace wf_attn;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WF_FP8_BODY 1
#endif

constexpr int BR = WF_CUDA_BR;        /* query rows per block */
constexpr int BC = WF_CUDA_FP8_BC;    /* keys per tile */
constexpr int NTHREADS = WF_CUDA_FP8_THREADS;
constexpr int WG_ROWS = 64;           /* query rows per warpgroup */
static_assert(BR == WG_ROWS * NTHREADS / 128, "two warpgroups of 64 rows");
static_assert(BC == 128, "S is one m64n128 accumulator; v8t rows are 128 bytes");

#include "fp8_ops.cuh"

#ifdef WF_FP8_BODY /* device helpers: sm_90a only */
#include "wgmma_ops.cuh"  /* wgmma fence / commit / wait, mbarriers, TMA */
#include "wgmma_tile.cuh" /* softmax_tile, rescale_o, reg_fence_u */

constexpr int NST = WF_CUDA_FP8_STAGES; /* K and V stages each */
constexpr float P_SCALE = 256.f;        /* P x 256 before rounding (file comment) */

/* S (64 x 128, f32) (+)= A (64 x 32) B (128 x 32)^T, e4m3, both K-major in
 * shared memory (descriptors); scale_d 0 overwrites S. 8-bit wgmma has no
 * transpose: both operands are always K-major. */
__device__ __forceinline__ void wgmma_ss8_n128(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        WF_WGMMA_REGS64 ", %64, %65, p, 1, 1;\n}\n"
        : WF_WGMMA_ACC64(d)
        : "l"(da), "l"(db), "r"(scale_d));
}

/* O (64 x N, f32) (+)= P (64 x 32, e4m3 A fragments in registers) B (N x
 * 32, e4m3, K-major in shared memory): N = D. */
template <int N>
__device__ __forceinline__ void wgmma_rs8(float *d, const uint32_t *a, uint64_t db, int scale_d);

template <>
__device__ __forceinline__ void wgmma_rs8<64>(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        WF_WGMMA_REGS32 ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : WF_WGMMA_ACC32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_rs8<128>(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        WF_WGMMA_REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : WF_WGMMA_ACC64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* Descriptor of a K-major e4m3 operand at shared address `start` whose
 * rows are ROW bytes (128: 128-byte swizzle, 8-row groups 1024 bytes
 * apart; 64: 64-byte swizzle, 512 bytes). A k-step (32 bytes of K) is the
 * start moved by 32 within the row, as for 16-bit K-major tiles. */
template <int ROW>
__device__ __forceinline__ uint64_t desc8(uint32_t start)
{
    static_assert(ROW == 64 || ROW == 128, "64- or 128-byte rows");
    return (uint64_t)((start & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)((8u * ROW) >> 4) << 32) | ((uint64_t)(ROW == 128 ? 1 : 2) << 62);
}

/* P (S's accumulator layout, values in [0, 1]) x mul rounded to e4m3 as
 * the A fragments of P V's four k32 steps, in the order the file comment
 * derives: register 2 h + r, byte j <- s[16 kk + 8 h + 4 (j / 2) + 2 r +
 * (j % 2)]. */
__device__ __forceinline__ void pack_p8(const float *s, uint32_t (*pa)[4], float mul)
{
#pragma unroll
    for (int kk = 0; kk < BC / 32; kk++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int i = 16 * kk + 8 * h + 2 * r;
                pa[kk][2 * h + r] = fp8_e4m3x2(s[i] * mul, s[i + 1] * mul) |
                                    (fp8_e4m3x2(s[i + 4] * mul, s[i + 5] * mul) << 16);
            }
}
#endif /* WF_FP8_BODY */

/* The kernel (file comment). Loads and their barriers as
 * attention_wgmma.cu: thread 0 issues every TMA load; K and V have NST
 * stages each with a full and an empty mbarrier; after warpgroup 0's step
 * j, K of tile j + NST goes into tile j's stage and V of j + NST - 1 into
 * tile j - 1's. */
template <int D>
__global__ void __launch_bounds__(NTHREADS, 1)
flash_fwd_fp8_kernel(attn_args a, const float *sq, const float *sk, const float *sv,
                     const __grid_constant__ CUtensorMap tq,
                     const __grid_constant__ CUtensorMap tk,
                     const __grid_constant__ CUtensorMap tv)
{
#ifdef WF_FP8_BODY
    constexpr int KS_QK = D / 32;  /* k-steps of Q K^T */
    constexpr int KS_PV = BC / 32; /* k-steps of P V */
    constexpr int NS = BC / 2;     /* S accumulators per thread */
    constexpr int NO = D / 2;      /* O accumulators per thread */
    constexpr uint32_t Q_BYTES = BR * D, KV_BYTES = BC * D;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = sbase;
    auto sK = [&](int j) { return sbase + Q_BYTES + (uint32_t)(j % NST) * KV_BYTES; };
    auto sV = [&](int j) { return sbase + Q_BYTES + (uint32_t)(NST + j % NST) * KV_BYTES; };
    const uint32_t bars = sbase + Q_BYTES + 2u * NST * KV_BYTES;
    const uint32_t bar_q = bars;
    auto full_k = [&](int j) { return bars + 8u * (1 + j % NST); };
    auto full_v = [&](int j) { return bars + 8u * (1 + NST + j % NST); };
    auto empty_k = [&](int j) { return bars + 8u * (1 + 2 * NST + j % NST); };
    auto empty_v = [&](int j) { return bars + 8u * (1 + 3 * NST + j % NST); };

    const int wg = threadIdx.x / 128;
    const int wl = (threadIdx.x % 128) / 32;
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const block_plan bp = plan_block(a, BR);
    const int q0 = bp.q0, q_rows = bp.q_rows, b = bp.b, h = bp.h, hk = bp.hk;
    const int ntiles = (bp.k_end + BC - 1) / BC;
    /* q k^T = sq sk (q8 k8^T): the scales fold into the softmax's alpha;
     * P v = sv (P v8) into the output's factor. */
    const float alpha = a.alpha * sq[(long long)b * a.Hq + h] * sk[(long long)b * a.Hkv + hk];
    const float out_mul = sv[(long long)b * a.Hkv + hk] * (1.f / P_SCALE);

    const int wrow0 = wg * WG_ROWS;
    const long long wq_first = a.q_offset + q0 + wrow0;
    const int rel = a.causal ? (int)max((long long)(-WG_ROWS - 1),
                                        min((long long)a.Skv, wq_first - a.kv_offset))
                             : a.Skv;
    int nt_wg = rel + WG_ROWS - 1 < 0 ? 0 : min(ntiles, (rel + WG_ROWS - 1) / BC + 1);
    if (wrow0 >= q_rows)
        nt_wg = 0;
    const int rel_row = rel + wl * 16 + g;

    const bool producer = threadIdx.x == 0;
    auto load_k = [&](int j) {
        mbar_expect_tx(full_k(j), KV_BYTES);
        tma_load_4d(sK(j), &tk, full_k(j), 0, hk, j * BC, b);
    };
    auto load_v = [&](int j) {
        mbar_expect_tx(full_v(j), KV_BYTES);
        tma_load_4d(sV(j), &tv, full_v(j), j * BC, 0, hk, b);
    };
    if (producer) {
        const uint32_t users = q_rows > WG_ROWS ? 256u : 128u;
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
        mbar_expect_tx(bar_q, Q_BYTES);
        tma_load_4d(sQ, &tq, bar_q, 0, h, q0, b);
        for (int j = 0; j < ntiles && j < NST; j++)
            load_k(j);
        for (int j = 0; j < ntiles && j < NST - 1; j++)
            load_v(j);
    }
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

    float o[NO], s[NS], corr[2];
    uint32_t pa[KS_PV][4];
    acc_zero<NO, NS>(o, s);
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

    if (nt_wg > 0)
        mbar_wait(bar_q, 0);
    for (int j = 0; j < nt_wg; j++) {
        wait_k(j);
        s_tile<NS>(s, [&] {
#pragma unroll
            for (int kk = 0; kk < KS_QK; kk++)
                wgmma_ss8_n128(s, desc8<D>(sQ + (uint32_t)(wrow0 * D + kk * 32)),
                               desc8<D>(sK(j) + (uint32_t)(kk * 32)), kk > 0);
        });
        mbar_arrive(empty_k(j));
        softmax_tile<NS>(s, j * BC, a.Skv, rel_row, t, alpha, m_r, l_r, corr);
        rescale_o<NO>(o, corr);
        pack_p8(s, pa, P_SCALE);
        wait_v(j);
        pv_tile<NO, KS_PV>(o, pa, [&] {
#pragma unroll
            for (int kk = 0; kk < KS_PV; kk++)
                wgmma_rs8<D>(o, pa[kk], desc8<128>(sV(j) + (uint32_t)(kk * 32)), 1);
        });
        mbar_arrive(empty_v(j));
        if (wg == 0)
            produce(j);
    }
    if (wg == 0)
        for (int j = nt_wg; j < ntiles; j++)
            produce(j);

    /* Epilogue as attention_wgmma.cu, with the output factor sv / 256
     * (merge mode too: attention_common.cuh's epilogue_plan / _store2 /
     * _lse merge into the f32 accumulator of a ring step). */
    float inv_r[2];
    epilogue_rows<D>(a, o, m_r, l_r, inv_r, wrow0, wl, g, rel_row, q_rows, b, q0, h, t,
                     [&](float l) { return out_mul / l; }, true);
#else
    (void)a, (void)sq, (void)sk, (void)sv, (void)tq, (void)tk, (void)tv;
#ifdef __CUDA_ARCH__
    __trap(); /* built without sm_90a: never launched (attention_fp8_ok) */
#endif
#endif
}

/* The building blocks alone, for wf_cuda_fp8_selftest (one warpgroup):
 * S = A Bk^T with A (64 x DK) and Bk (128 x DK) e4m3 row-major (K-major)
 * copied into tiles swizzled as TMA lays them (rows of DK bytes) and
 * multiplied by wgmma_ss8_n128 through desc8; with DK = 128 also O = P V:
 * P (64 x 128, f32 row-major) read in S's accumulator layout and packed by
 * pack_p8, V (128 keys x 128, e4m3 row-major) stored transposed with its
 * keys at fp8_key_slot (the quantizer's order) in a 128-byte-swizzled
 * tile, multiplied by wgmma_rs8<128>. S and O written from the
 * accumulator layout, row-major. */
template <int DK>
__global__ void __launch_bounds__(128, 1)
fp8_probe_kernel(const uint8_t *A, const uint8_t *Bk, const float *P, const uint8_t *V, float *S,
                 float *O)
{
#ifdef WF_FP8_BODY
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    unsigned char *gb = smem_raw + (base - raw);
    constexpr int CPR = DK / 16;                  /* 16-byte chunks per row */
    constexpr uint32_t OFF_B = 64 * DK, OFF_V = 192 * DK; /* multiples of 1024 */
    auto sw = [](int r, int j) { return DK == 128 ? (j ^ (r & 7)) : (j ^ ((r >> 1) & 3)); };
    for (int c = threadIdx.x; c < 64 * CPR; c += 128) {
        const int r = c / CPR, j = c % CPR;
        *reinterpret_cast<uint4 *>(gb + r * DK + sw(r, j) * 16) =
            *reinterpret_cast<const uint4 *>(A + r * DK + j * 16);
    }
    for (int c = threadIdx.x; c < 128 * CPR; c += 128) {
        const int r = c / CPR, j = c % CPR;
        *reinterpret_cast<uint4 *>(gb + OFF_B + r * DK + sw(r, j) * 16) =
            *reinterpret_cast<const uint4 *>(Bk + r * DK + j * 16);
    }
    if (DK == 128)
        for (int c = threadIdx.x; c < 128 * 128; c += 128) {
            const int key = c / 128, d = c % 128;
            const int slot = (key & ~31) | fp8_key_slot(key & 31);
            gb[OFF_V + d * 128 + (((slot >> 4) ^ (d & 7)) << 4) + (slot & 15)] = V[key * 128 + d];
        }
    fence_proxy_async();
    __syncthreads();
    const int wl = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float s[64], o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = s[i] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < DK / 32; kk++)
        wgmma_ss8_n128(s, desc8<DK>(base + (uint32_t)(kk * 32)),
                       desc8<DK>(base + OFF_B + (uint32_t)(kk * 32)), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence<64>(s);
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int row = wl * 16 + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
        S[row * 128 + col] = s[i];
    }
    if (DK == 128) {
        float p[64];
#pragma unroll
        for (int i = 0; i < 64; i++) {
            const int row = wl * 16 + g + 8 * ((i >> 1) & 1),
                      col = 8 * (i >> 2) + 2 * t + (i & 1);
            p[i] = P[row * 128 + col];
        }
        uint32_t pa[4][4];
        pack_p8(p, pa, 1.f);
        reg_fence_u<4>(pa);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_rs8<128>(o, pa[kk], desc8<128>(base + OFF_V + (uint32_t)(kk * 32)), 1);
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence<64>(o);
#pragma unroll
        for (int i = 0; i < 64; i++) {
            const int row = wl * 16 + g + 8 * ((i >> 1) & 1),
                      col = 8 * (i >> 2) + 2 * t + (i & 1);
            O[row * 128 + col] = o[i];
        }
    }
#else
    (void)A, (void)Bk, (void)P, (void)V, (void)S, (void)O;
#ifdef __CUDA_ARCH__
    __trap();
#endif
#endif
}

template <int D>
wf_status_t launch(const wf_attn_params_t *p, const wf_cuda_attn_geom_t *g,
                   const wf_cuda_fp8_ws_t *L, char *ws, cudaStream_t stream)
{
    CUtensorMap tq, tk, tv;
    const long long dq[4] = {D, p->Hq, p->Sq, p->B}, dk[4] = {D, p->Hkv, p->Skv, p->B},
                    dv[4] = {L->skv_pad, D, p->Hkv, p->B};
    const unsigned bq[4] = {D, 1, BR, 1}, bk[4] = {D, 1, BC, 1}, bv[4] = {BC, D, 1, 1};
    if (!wf_cuda_tensor_map_u8(&tq, ws + L->q8, dq, bq, D) ||
        !wf_cuda_tensor_map_u8(&tk, ws + L->k8, dk, bk, D) ||
        !wf_cuda_tensor_map_u8(&tv, ws + L->v8t, dv, bv, 128))
        return WF_E_INTERNAL;
    auto kern = flash_fwd_fp8_kernel<D>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->smem_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    const attn_args a = make_args(p);
    dim3 grid(g->grid[0], g->grid[1], g->grid[2]), block(g->block[0], g->block[1], g->block[2]);
    kern<<<grid, block, g->smem_bytes, stream>>>(
        a, reinterpret_cast<const float *>(ws + L->sq), reinterpret_cast<const float *>(ws + L->sk),
        reinterpret_cast<const float *>(ws + L->sv), tq, tk, tv);
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

/* printf into report[*len..n), *len advanced (truncation is harmless). */
__attribute__((format(printf, 4, 5))) void addf(char *report, size_t n, size_t *len,
                                                const char *fmt, ...)
{
    if (!report || *len >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(report + *len, n - *len, fmt, ap);
    va_end(ap);
    if (w > 0)
        *len += (size_t)w < n - *len ? (size_t)w : n - *len - 1;
}

/* e4m3 of k / 16 (exact for |k| <= 8). */
uint8_t small8(int k) { return wf_fp8_e4m3_from_f32((float)k / 16.0f); }

/* Both NaN, or the same byte. */
bool same8(uint8_t a, uint8_t b)
{
    return a == b || ((a & 0x7Fu) == WF_FP8_E4M3_NAN && (b & 0x7Fu) == WF_FP8_E4M3_NAN);
}

/* Runs one probe (synchronously); false when the launch or the run fails. */
template <int DK>
bool run_probe(const uint8_t *dA, const uint8_t *dB, const float *dP, const uint8_t *dV, float *dS,
               float *dO)
{
    const size_t smem = 1024 + 192 * DK + 128 * 128;
    if (cudaFuncSetAttribute(fp8_probe_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        return false;
    fp8_probe_kernel<DK><<<1, 128, smem>>>(dA, dB, dP, dV, dS, dO);
    return cudaDeviceSynchronize() == cudaSuccess;
}

} /* namespace */

wf_status_t wf_cuda_attention_fp8_launch(const wf_attn_params_t *p, const wf_cuda_attn_geom_t *g,
                                         const wf_cuda_fp8_ws_t *L, void *workspace,
                                         cudaStream_t stream)
{
    if (!p || !g || !L || !workspace || g->kernel != WF_CUDA_KERNEL_FP8 ||
        g->block[0] != NTHREADS)
        return WF_E_BAD_ARGUMENT;
    if (g->grid[0] == 0 || g->grid[1] == 0 || g->grid[2] == 0)
        return WF_OK;
    char *ws = static_cast<char *>(workspace);
    return g->d == 64 ? launch<64>(p, g, L, ws, stream) : launch<128>(p, g, L, ws, stream);
}

extern "C" wf_status_t wf_cuda_fp8_selftest(int device, char *report, size_t n)
{
    if (report && n)
        report[0] = 0;
    cudaDeviceProp prop;
    if (!wf_cuda_fp8_built() || cudaSetDevice(device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
        !wf_cuda_fp8_device_ok(prop.major, prop.minor, 1)) {
        (void)cudaGetLastError();
        if (report)
            snprintf(report, n, "fp8: not available (needs sm_90a built and a 9.0 device)");
        return WF_E_UNAVAILABLE;
    }
    /* Probe inputs: k / 16, |k| <= 8, exact in e4m3; every product and sum
     * exact in f32. A and Bk have rows of 128 (the DK = 64 probe reads rows
     * of 64 from the same bytes). */
    const int NA = 64 * 128, NB = 128 * 128;
    uint8_t *hA = (uint8_t *)malloc(NA), *hB = (uint8_t *)malloc(NB), *hV = (uint8_t *)malloc(NB);
    float *hP = (float *)malloc(NA * 4), *gS = (float *)malloc(NA * 4),
          *gO = (float *)malloc(NA * 4);
    /* quantizer case: B 2, Sq 70, Skv 150, Hq 4, Hkv 2, D 64, heads [1, 4) */
    wf_attn_params_t qp;
    memset(&qp, 0, sizeof qp);
    qp.B = 2, qp.Sq = 70, qp.Skv = 150, qp.Hq = 4, qp.Hkv = 2, qp.D = 64;
    qp.h_begin = 1, qp.h_end = 4, qp.scale = 0.125f;
    qp.q_dtype = qp.k_dtype = qp.v_dtype = qp.out_dtype = WF_DTYPE_F32;
    qp.fp8 = true;
    wf_cuda_fp8_ws_t L;
    const size_t nq = (size_t)(qp.B * qp.Sq * qp.Hq * qp.D), nk = (size_t)(qp.B * qp.Skv * qp.Hkv * qp.D);
    float *xq = (float *)malloc(nq * 4), *xk = (float *)malloc(nk * 4), *xv = (float *)malloc(nk * 4);
    uint8_t *gws = nullptr;
    wf_status_t st = WF_E_INTERNAL;
    size_t len = 0;
    void *dA = nullptr, *dB = nullptr, *dV = nullptr, *dP = nullptr, *dS = nullptr, *dO = nullptr,
         *dq = nullptr, *dk = nullptr, *dv = nullptr, *dws = nullptr;
    unsigned x = 2468;
    auto rnd = [&]() {
        x = x * 1103515245u + 12345u;
        return (int)((x >> 16) % 17) - 8;
    };
    if (!hA || !hB || !hV || !hP || !gS || !gO || !xq || !xk || !xv ||
        wf_cuda_attn_fp8_layout(&qp, &L) != WF_OK || !(gws = (uint8_t *)malloc(L.bytes))) {
        st = WF_E_NO_MEMORY;
        goto done;
    }
    for (int i = 0; i < NA; i++) {
        hA[i] = small8(rnd());
        hP[i] = (float)(rnd() + 8) / 16.0f; /* probabilities: 0..1 */
    }
    for (int i = 0; i < NB; i++) {
        hB[i] = small8(rnd());
        hV[i] = small8(rnd());
    }
    if (cudaMalloc(&dA, NA) || cudaMalloc(&dB, NB) || cudaMalloc(&dV, NB) ||
        cudaMalloc(&dP, NA * 4) || cudaMalloc(&dS, NA * 4) || cudaMalloc(&dO, NA * 4))
        goto done;
    cudaMemcpy(dA, hA, NA, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB, NB, cudaMemcpyHostToDevice);
    cudaMemcpy(dV, hV, NB, cudaMemcpyHostToDevice);
    cudaMemcpy(dP, hP, NA * 4, cudaMemcpyHostToDevice);
    st = WF_OK;
    for (int pass = 0; pass < 2; pass++) {
        const int DK = pass == 0 ? 128 : 64;
        cudaMemset(dS, 0xff, NA * 4);
        cudaMemset(dO, 0xff, NA * 4);
        const bool ran = DK == 128 ? run_probe<128>((const uint8_t *)dA, (const uint8_t *)dB,
                                                    (const float *)dP, (const uint8_t *)dV,
                                                    (float *)dS, (float *)dO)
                                   : run_probe<64>((const uint8_t *)dA, (const uint8_t *)dB,
                                                   (const float *)dP, (const uint8_t *)dV,
                                                   (float *)dS, (float *)dO);
        if (!ran || cudaMemcpy(gS, dS, NA * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(gO, dO, NA * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
            addf(report, n, &len, "fp8 probe failed: %s",
                 cudaGetErrorString(cudaGetLastError()));
            st = WF_E_INTERNAL;
            goto done;
        }
        double es = 0, eo = 0;
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 128; j++) {
                double sv = 0, ov = 0;
                for (int k = 0; k < DK; k++)
                    sv += (double)wf_fp8_e4m3_to_f32(hA[i * DK + k]) *
                          wf_fp8_e4m3_to_f32(hB[j * DK + k]);
                for (int k = 0; k < 128; k++)
                    ov += (double)hP[i * 128 + k] * wf_fp8_e4m3_to_f32(hV[k * 128 + j]);
                const double a = fabs(gS[i * 128 + j] - sv), o = fabs(gO[i * 128 + j] - ov);
                es = a > es || a != a ? a : es;
                eo = o > eo || o != o ? o : eo;
            }
        const bool s_ok = es <= 1e-6, o_ok = eo <= 1e-6;
        addf(report, n, &len, "%sS = A B^T (wgmma k32 e4m3, K-major, swizzle %d): %s (max err %.1e)",
             pass == 0 ? "fp8: " : "; ", DK, s_ok ? "ok" : "WRONG", es);
        if (DK == 128)
            addf(report, n, &len, "; O = P V (P fragment, v8t key order): %s (max err %.1e)",
                 o_ok ? "ok" : "WRONG", eo);
        if (!s_ok || (DK == 128 && !o_ok))
            st = WF_E_INTERNAL;
    }
    /* The quantizer against fp8.h on the host: specials in the inputs (inf,
     * NaN, a huge and a tiny value, an all-zero head of k). */
    for (size_t i = 0; i < nq; i++)
        xq[i] = (float)(rnd() * 37) / 16.0f + 0.01f * (float)rnd();
    for (size_t i = 0; i < nk; i++) {
        xk[i] = (float)rnd() * 0.3f + 0.001f * (float)rnd();
        xv[i] = (float)rnd() * 1e-3f + 1e-6f * (float)rnd();
    }
    xq[5 * 4 * 64 + 2 * 64 + 3] = INFINITY;
    xq[9 * 4 * 64 + 3 * 64 + 1] = NAN;
    xq[(70 + 3) * 4 * 64 + 1 * 64 + 8] = 3.0e6f;
    xk[(7 * 2 + 1) * 64 + 5] = -INFINITY;
    for (int b = 0; b < 2; b++)
        for (int s = 0; s < 150; s++)
            for (int d = 0; d < 64; d++)
                if (b == 1)
                    xk[((size_t)(b * 150 + s) * 2 + 0) * 64 + d] = 0.f; /* head 0 of batch 1 */
    xv[(100 * 2 + 1) * 64 + 63] = 1e-30f;
    if (cudaMalloc(&dq, nq * 4) || cudaMalloc(&dk, nk * 4) || cudaMalloc(&dv, nk * 4) ||
        cudaMalloc(&dws, L.bytes)) {
        st = WF_E_INTERNAL;
        goto done;
    }
    cudaMemcpy(dq, xq, nq * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, xk, nk * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, xv, nk * 4, cudaMemcpyHostToDevice);
    cudaMemset(dws, 0xA5, L.bytes);
    qp.q = dq, qp.k = dk, qp.v = dv;
    if (wf_cuda_fp8_quantize_launch(&qp, &L, dws, 0) != WF_OK || cudaDeviceSynchronize() ||
        cudaMemcpy(gws, dws, L.bytes, cudaMemcpyDeviceToHost)) {
        addf(report, n, &len, "; quantizer failed: %s",
             cudaGetErrorString(cudaGetLastError()));
        st = WF_E_INTERNAL;
        goto done;
    }
    {
        long bad = 0, checked = 0;
        /* amax, scale and bytes of one head of one tensor; v transposed */
        auto head = [&](const float *xs, int S, int H, int b, int h, uint64_t off8, uint64_t sc,
                        bool vt) {
            float am = 0.f;
            for (int s = 0; s < S; s++)
                for (int d = 0; d < 64; d++) {
                    const float a = fabsf(xs[((size_t)(b * S + s) * H + h) * 64 + d]);
                    if (a <= 3.402823466e38f && a > am)
                        am = a;
                }
            const float f = wf_fp8_quant_factor(am);
            float got_sc;
            memcpy(&got_sc, gws + sc + (size_t)(b * H + h) * 4, 4);
            checked++;
            if (got_sc != wf_fp8_scale(am))
                bad++;
            const int SP = vt ? (int)L.skv_pad : S;
            for (int s = 0; s < SP; s++)
                for (int d = 0; d < 64; d++) {
                    const uint8_t want =
                        s < S ? wf_fp8_e4m3_from_f32(xs[((size_t)(b * S + s) * H + h) * 64 + d] * f)
                              : 0;
                    const size_t at =
                        vt ? (((size_t)(b * H + h) * 64 + d) * (size_t)L.skv_pad +
                              (size_t)((s & ~31) | fp8_key_slot(s & 31)))
                           : ((size_t)(b * S + s) * H + h) * 64 + d;
                    checked++;
                    if (!same8(gws[off8 + at], want))
                        bad++;
                }
        };
        for (int b = 0; b < 2; b++) {
            for (int h = 1; h < 4; h++)
                head(xq, 70, 4, b, h, L.q8, L.sq, false);
            for (int h = (int)L.kv_begin; h < (int)L.kv_end; h++) {
                head(xk, 150, 2, b, h, L.k8, L.sk, false);
                head(xv, 150, 2, b, h, L.v8t, L.sv, true);
            }
        }
        addf(report, n, &len,
             "; quantizer (amax, scales, q8, k8, v8t vs fp8.h): %s (%ld values, %ld wrong)",
             bad ? "WRONG" : "ok", checked, bad);
        if (bad)
            st = WF_E_INTERNAL;
    }
done:
    (void)cudaGetLastError();
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dV);
    cudaFree(dP);
    cudaFree(dS);
    cudaFree(dO);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dws);
    free(hA); free(hB); free(hV); free(hP); free(gS); free(gO);
    free(xq); free(xk); free(xv); free(gws);
    return st;
}

int wf_cuda_fp8_built(void)
{
#ifdef WF_CUDA_SM90A
    return 1;
#else
    return 0;
#endif
}
