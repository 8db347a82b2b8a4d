/* attention_ws.cu — the warp-specialized Hopper attention forward
 * (sm_90a), the kernel, its launcher and a self-test of its
 * building blocks. Same contract as attention.cu / attention_wgmma.cu
 * (backend.h: shapes, masking, GQA, global offsets, head ranges, out in
 * any dtype + lse, the non-finite rules of attention.cu's header). Opt-in
 * only (cuda_attention = ws..., cuda_plan.h): never the default until a GPU
 * run shows it right and faster. Written without a GPU: compiled, not yet
 * run.
 *
 * One block: 384 threads, three warpgroups.
 *   warpgroup 0, the producer: setmaxnreg.dec to WF_CUDA_WS_REGS_PRODUCER;
 *     one thread issues every TMA load: Q of a tile (bar_qfull, freed by
 *     bar_qempty) and K, V of each key tile into a ring of `stages`
 *     (full mbarrier: the bytes landed; empty mbarrier: the 256 consumer
 *     threads are done reading). The other threads exit at once (+mc:
 *     they wait at the closing cluster barrier).
 *   warpgroups 1, 2, the consumers: setmaxnreg.inc to
 *     WF_CUDA_WS_REGS_CONSUMER; 64 query rows each, the products and the
 *     online softmax of attention_wgmma.cu (S = Q K^T wgmma m64n128k16 from
 *     shared memory, P V with P from registers), either one tile after the
 *     other or (WF_CUDA_WS_PIPE) S of tile j + 1 beside P V of tile j.
 * Features (WF_CUDA_WS_*, run-time flags but PIPE, a template parameter):
 *   PINGPONG: the consumers take turns issuing GEMMs through two named
 *     barriers (ids 1 and 2, 256 threads): consumer c waits on 1 + c
 *     before issuing, and arrives on the other's after, so one's softmax
 *     runs under the other's GEMMs. Both consumers pass the same number of
 *     turns per tile (one per key tile: a consumer with nothing to compute
 *     in a key tile still takes its turn), consumer 1 arrives once at the
 *     start and consumer 0 waits once at the end, so every barrier phase
 *     completes.
 *   TMA_STORE: a consumer writes its normalised 64 x D output rows (16-bit
 *     out dtypes) into its own rows of Q's tile (its S products are all
 *     done) in the 128-byte swizzle and one thread TMA-stores them (rows
 *     past Sq are clipped by the copy engine); f32 out: direct stores.
 *   PERSISTENT: sm_count blocks stride over the tiles (causal: the heavy
 *     tiles, late query rows, of every head and batch first); without it
 *     one block per tile in the same order.
 *   MULTICAST (+mc): clusters of 2 CTAs (cudaLaunchKernelEx, cluster dims
 *     (2, 1, 1)) take query tiles 2 i and 2 i + 1 of one (batch, head)
 *     (ws_tile's pair order; an odd tile count gives the second CTA of each
 *     head's last pair a tile without rows). Each CTA's producer loads half
 *     of every K and V tile (64 key rows; a last tile of at most 64 rows:
 *     CTA 0 loads it whole, so no box lies wholly past the tensor) with
 *     .multicast::cluster into both CTAs; each full barrier expects the
 *     whole tile. The empty barriers count warps: each consumer warp's
 *     lane 0 arrives on its own CTA's and (mapa, release.cluster) on the
 *     peer's, so a producer refills a stage only once both CTAs' eight
 *     consumer warps released it. The ring carries the union of the pair's
 *     key ranges (causal: the later tile's; ws_ring_tiles): a consumer
 *     computes its own key tiles and waits for / releases the rest, like
 *     the causal skip above, so both CTAs walk the ring in step (the same
 *     stage and parity for every key tile). A cluster barrier after the
 *     mbarrier inits (no multicast reaches a barrier before the peer has
 *     initialised it) and one before exit (no CTA exits while its peer can
 *     still arrive on its barriers; every multicast into a CTA has landed
 *     once its consumers waited for all its full barriers). With
 *     PERSISTENT, each cluster strides over the pairs.
 * A consumer computes only the key tiles some of its rows see (causal);
 * for the others it only waits for the loads and releases them (its
 * arrivals must count toward the right phase of the empty barriers), so
 * a NaN in v behind the causal mask reaches exactly the rows it reaches
 * in attention_wgmma.cu.
 *
 * The wgmma / mbarrier / TMA / softmax helpers repeat
 * attention_wgmma.cu's (that file stays as it is while this kernel is
 * measured; once a GPU run keeps a variant, both can share one header).
 *
 * Built only for sm_90a; other architectures get bodies that trap, and
 * the geometry never chooses this kernel there (wf_cuda_ws_built).
 */
#include "attention_common.cuh"

#include "tensor_map.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

using namespace wf_attn;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WF_WS_BODY 1
#endif

constexpr int BR = WF_CUDA_BR;    /* query rows per tile */
constexpr int BC = WF_CUDA_WG_BC; /* keys per K/V tile */
constexpr int NTHREADS = WF_CUDA_WS_THREADS;
constexpr int WG_ROWS = 64; /* query rows per consumer warpgroup */
constexpr int MAXST = WF_CUDA_WS_MAX_STAGES;
constexpr int REG_P = WF_CUDA_WS_REGS_PRODUCER, REG_C = WF_CUDA_WS_REGS_CONSUMER;
static_assert(NTHREADS == 3 * 128, "a producer and two consumer warpgroups");
static_assert(BR == 2 * WG_ROWS, "two consumers of 64 rows");
static_assert(BC == 128, "S is one m64n128 accumulator");
static_assert(WF_CUDA_WS_REGS_ENTRY * NTHREADS <= 65536 && WF_CUDA_WS_REGS_ENTRY % 8 == 0,
              "the register cap at entry");
static_assert(REG_P * 128 + 2 * REG_C * 128 <= 65536, "the registers after setmaxnreg");
static_assert((WF_CUDA_WS_REGS_ENTRY - REG_P) >= 2 * (REG_C - WF_CUDA_WS_REGS_ENTRY),
              "the producer frees what the consumers take");
static_assert(8 * (2 + 4 * MAXST) <= WF_CUDA_WS_BAR_BYTES, "the mbarriers fit their bytes");
/* What the ws kernel adds to attn_args (by value). */
struct ws_args {
    int nqt;       /* query tiles per head: ceil(Sq / BR) */
    int nh;        /* heads of the range */
    int total;     /* nqt * nh * B */
    int stages;    /* K / V ring depth, 2..MAXST */
    int pingpong;  /* WF_CUDA_WS_PINGPONG */
    int tma_store; /* WF_CUDA_WS_TMA_STORE and a 16-bit out dtype */
    int mc;        /* WF_CUDA_WS_MULTICAST: clusters of 2, total counts pairs * 2 */
    int heads_b;   /* nh * B */
};

#ifdef WF_WS_BODY /* device helpers: sm_90a only */
constexpr uint32_t V_LBO = BC * 128, V_SBO = 1024; /* V's operand strides */
#include "wgmma_ops.cuh" /* descriptors, wgmma, mbarriers, TMA, swizzle */

#include "wgmma_tile.cuh" /* operand descriptors, softmax step, O rescale, P packing */

/* ---- what warp specialization adds ------------------------------------------- */

/* setmaxnreg: the warpgroup's registers per thread from here on (the
 * kernel's cap at entry is WF_CUDA_WS_REGS_ENTRY, __launch_bounds__). */
template <int R> __device__ __forceinline__ void regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

/* gridDim.x, read from its special register each time (not kept live) */
__device__ __forceinline__ int nctaid_x()
{
    int n;
    asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(n));
    return n;
}

/* Named barriers (id >= 1; 0 is __syncthreads'), `on` uniform per warp:
 * predicated, so no branch sits between a wgmma and its wait. */
__device__ __forceinline__ void nbar_sync_if(int on, int id, int n)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.sync %1, %2;\n}\n" ::"r"(on),
                 "r"(id), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void nbar_arrive_if(int on, int id, int n)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.arrive %1, %2;\n}\n" ::"r"(on),
                 "r"(id), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void nbar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* TMA store: the box at (c0..c3) of the 4-d tensor map from shared memory
 * at src (the map's swizzle); a bulk group of this thread. */
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, uint32_t src, int c0,
                                             int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* The shared memory of this thread's bulk stores has been read. */
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

/* Tile t of the linear order (plan_block's, for a linear index): causal,
 * the heavy query tiles (late rows) of every batch and head first;
 * otherwise query tiles fastest (neighbours share K / V in L2). */
__device__ __forceinline__ block_plan ws_tile(const attn_args &a, const ws_args &w, int t)
{
    int qt, hl, b;
    if (w.mc) {
        /* pairs of query tiles (2 qp, 2 qp + 1) of one head; t's low bit is
         * the CTA's rank in its cluster (gridDim.x is even); causal: the
         * heavy pairs first, else pairs fastest */
        const int npq = (w.nqt + 1) >> 1, pi = t >> 1;
        int qp;
        if (a.causal) {
            qp = npq - 1 - pi / w.heads_b;
            const int r = pi % w.heads_b;
            b = r / w.nh;
            hl = r % w.nh;
        } else {
            qp = pi % npq;
            const int r = pi / npq;
            hl = r % w.nh;
            b = r / w.nh;
        }
        qt = 2 * qp + (t & 1); /* qt == nqt: a tile without rows (q_rows <= 0) */
    } else if (a.causal) {
        const int per = w.total / w.nqt; /* heads * batches */
        qt = w.nqt - 1 - t / per;
        const int r = t % per;
        b = r / w.nh;
        hl = r % w.nh;
    } else {
        qt = t % w.nqt;
        const int r = t / w.nqt;
        hl = r % w.nh;
        b = r / w.nh;
    }
    return plan_tile(a, BR, qt, hl, b);
}

/* Key tiles the K / V ring carries for tile t (plan bp): its own, or with
 * +mc the union of its pair's (the larger range: causal, the later tile's;
 * a tile without rows takes its partner's). Both CTAs of a cluster get the
 * same count, so they walk the ring in step. */
__device__ __forceinline__ int ws_ring_tiles(const attn_args &a, const ws_args &w,
                                             const block_plan &bp)
{
    if (!w.mc)
        return (bp.k_end + BC - 1) / BC;
    int k_end = a.Skv;
    if (a.causal) {
        /* the pair's rows end with its later tile's, or with the earlier's
         * when the later has none (then the earlier ends at Sq) */
        const int q_end = min(a.Sq, ((bp.q0 / BR) | 1) * BR + BR);
        const long long last = a.q_offset + q_end - a.kv_offset; /* keys < last */
        k_end = (int)min((long long)a.Skv, max(0LL, last));
    }
    return (k_end + BC - 1) / BC;
}

#endif /* WF_WS_BODY */

template <typename T, int D, bool PIPE>
__global__ void __launch_bounds__(NTHREADS, 1)
flash_fwd_ws_kernel(attn_args a, ws_args w, const __grid_constant__ CUtensorMap tq,
                    const __grid_constant__ CUtensorMap tk,
                    const __grid_constant__ CUtensorMap tv,
                    const __grid_constant__ CUtensorMap to,
                    const __grid_constant__ CUtensorMap tkh,
                    const __grid_constant__ CUtensorMap tvh)
{
#ifdef WF_WS_BODY
    constexpr int KS_QK = D / 16;  /* k-steps of Q K^T */
    constexpr int KS_PV = BC / 16; /* k-steps of P V */
    constexpr int NS = BC / 2;     /* S accumulators per thread */
    constexpr int NO = D / 2;      /* O accumulators per thread */
    constexpr uint32_t Q_BYTES = BR * D * 2, KV_BYTES = BC * D * 2;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int nst = w.stages;
    const uint32_t sQ = sbase;
    auto sK = [&](int s) { return sbase + Q_BYTES + (uint32_t)s * KV_BYTES; };
    auto sV = [&](int s) { return sbase + Q_BYTES + (uint32_t)(nst + s) * KV_BYTES; };
    const uint32_t bars = sbase + Q_BYTES + 2u * (uint32_t)nst * KV_BYTES;
    const uint32_t bar_qfull = bars, bar_qempty = bars + 8u;
    auto full_k = [&](int s) { return bars + 8u * (2 + s); };
    auto full_v = [&](int s) { return bars + 8u * (2 + MAXST + s); };
    auto empty_k = [&](int s) { return bars + 8u * (2 + 2 * MAXST + s); };
    auto empty_v = [&](int s) { return bars + 8u * (2 + 3 * MAXST + s); };

    const int wg = threadIdx.x / 128;
    /* +mc: this CTA's rank in its cluster and the peer's */
    const uint32_t rank = w.mc ? cluster_ctarank() : 0u, peer = rank ^ 1u;
    if (threadIdx.x == 0) {
        mbar_init(bar_qfull, 1);
        mbar_init(bar_qempty, 2); /* one thread of each consumer */
        for (int s = 0; s < nst; s++) {
            mbar_init(full_k(s), 1);
            mbar_init(full_v(s), 1);
            /* every consumer thread; +mc: lane 0 of each consumer warp of
             * both CTAs (mbar_release) */
            mbar_init(empty_k(s), w.mc ? 16u : 256u);
            mbar_init(empty_v(s), w.mc ? 16u : 256u);
        }
        mbar_init_fence();
    }
    if (w.mc)
        cluster_sync_if(1); /* the peer's barriers exist before any multicast */
    else
        __syncthreads();

    if (wg == 0) {
        /* ---- the producer ---- */
        regs_dec<REG_P>();
        /* one thread loads; the other 127 have nothing to do and end (+mc:
         * they wait at the closing cluster barrier below) */
        if (threadIdx.x == 0) {
            int it = 0, qn = 0; /* key tiles and Q tiles loaded so far */
            /* +mc: this CTA's share of K / V tile j (both CTAs' full
             * barriers expect the whole tile): key rows [64 rank, 64 rank +
             * 64) of it, or the whole tile from CTA 0 when it has at most
             * 64 rows left (no box wholly past the tensor's end) */
            auto load_kv_mc = [&](uint32_t dst, const CUtensorMap *whole, const CUtensorMap *half,
                                  uint32_t bar, int hk, int j, int b) {
                const bool short_tile = a.Skv - j * BC <= BC / 2;
                if (short_tile && rank != 0)
                    return;
#pragma unroll
                for (int c = 0; c < D / 64; c++) {
                    const uint32_t col = dst + (uint32_t)c * (BC * 128);
                    if (short_tile)
                        tma_load_4d_mc(col, whole, bar, 3, c * 64, hk, j * BC, b);
                    else
                        tma_load_4d_mc(col + rank * (BC / 2 * 128), half, bar, 3, c * 64, hk,
                                       j * BC + (int)rank * (BC / 2), b);
                }
            };
            /* the stride read where it is used (nctaid_x): held across the
             * loop, it is the one value the producer's 24 registers spill */
            for (int tile = blockIdx.x; tile < w.total; tile += nctaid_x()) {
                const block_plan bp = ws_tile(a, w, tile);
                const int ntiles = ws_ring_tiles(a, w, bp);
                if (ntiles == 0)
                    continue; /* its rows see no key: the consumers write them alone */
                for (int j = 0; j < ntiles; j++, it++) {
                    const int s = it % nst;
                    const uint32_t ph = (uint32_t)(it / nst) & 1u;
                    /* a fresh barrier's "previous phase" (parity 1) counts as
                     * complete: the first pass over the ring does not wait */
                    mbar_wait(empty_k(s), ph ^ 1u);
                    mbar_expect_tx(full_k(s), KV_BYTES);
                    if (w.mc) {
                        load_kv_mc(sK(s), &tk, &tkh, full_k(s), bp.hk, j, bp.b);
                    } else {
#pragma unroll
                        for (int c = 0; c < D / 64; c++)
                            tma_load_4d(sK(s) + (uint32_t)c * (BC * 128), &tk, full_k(s), c * 64,
                                        bp.hk, j * BC, bp.b);
                    }
                    if (j == 0) {
                        /* Q after the tile's first K: that load needs only
                         * a free stage, so with a persistent grid it goes
                         * out while the consumers finish the previous tile,
                         * whose end (bar_qempty) Q waits for */
                        if (qn > 0)
                            mbar_wait(bar_qempty, (uint32_t)(qn - 1) & 1u);
                        if (bp.q_rows > 0) {
                            mbar_expect_tx(bar_qfull, Q_BYTES);
#pragma unroll
                            for (int c = 0; c < D / 64; c++)
                                tma_load_4d(sQ + (uint32_t)c * (BR * 128), &tq, bar_qfull, c * 64,
                                            bp.h, bp.q0, bp.b);
                        } else {
                            mbar_arrive(bar_qfull); /* +mc, a tile without rows: no Q */
                        }
                        qn++;
                    }
                    mbar_wait(empty_v(s), ph ^ 1u);
                    mbar_expect_tx(full_v(s), KV_BYTES);
                    if (w.mc) {
                        load_kv_mc(sV(s), &tv, &tvh, full_v(s), bp.hk, j, bp.b);
                    } else {
#pragma unroll
                        for (int c = 0; c < D / 64; c++)
                            tma_load_4d(sV(s) + (uint32_t)c * (BC * 128), &tv, full_v(s), c * 64,
                                        bp.hk, j * BC, bp.b);
                    }
                }
            }
        }
        /* +mc: stay until the peer is done with this CTA's barriers */
        cluster_sync_if(w.mc);
    } else {
        /* ---- the consumers ---- */
        regs_inc<REG_C>();
        const int cw = wg - 1;                   /* consumer 0 or 1 */
        const int wtid = threadIdx.x % 128;
        const int wl = wtid / 32;                /* warp in the warpgroup */
        const int lane = threadIdx.x % 32;
        const int g = lane / 4, t = lane % 4;
        const int wrow0 = cw * WG_ROWS;          /* tile-local first row */
        const int pp = w.pingpong;
        /* ping-pong turns: this consumer waits on my_turn, hands over on other */
        const int my_turn = 1 + cw, other_turn = 2 - cw;
        const int wg_bar = 3 + cw;               /* this warpgroup alone (128) */
        nbar_arrive_if(pp && cw == 1, 1, 256);   /* consumer 0 goes first */

        int it = 0, qn = 0;
        for (int tile = blockIdx.x; tile < w.total; tile += gridDim.x) {
            const block_plan bp = ws_tile(a, w, tile);
            const int q0 = bp.q0, q_rows = bp.q_rows, b = bp.b, h = bp.h;
            /* the ring's key tiles (+mc: the pair's union) and this tile's own */
            const int ntiles = ws_ring_tiles(a, w, bp);
            const int own_tiles = q_rows > 0 ? (bp.k_end + BC - 1) / BC : 0;
            const long long wq_first = a.q_offset + q0 + wrow0;
            const int rel = a.causal ? (int)max((long long)(-WG_ROWS - 1),
                                                min((long long)a.Skv, wq_first - a.kv_offset))
                                     : a.Skv;
            /* key tiles this warpgroup computes: [0, nt_wg); [nt_wg, ntiles)
             * it only releases (masked for all its rows, or it has no rows) */
            int nt_wg = rel + WG_ROWS - 1 < 0 ? 0 : min(own_tiles, (rel + WG_ROWS - 1) / BC + 1);
            if (wrow0 >= q_rows)
                nt_wg = 0;
            const int rel_row = rel + wl * 16 + g;
            const int it0 = it;
            it += ntiles;
            auto stg = [&](int j) { return (it0 + j) % nst; };
            auto par = [&](int j) { return (uint32_t)((it0 + j) / nst) & 1u; };
            auto wait_k = [&](int j) { mbar_wait(full_k(stg(j)), par(j)); };
            auto wait_v = [&](int j) { mbar_wait(full_v(stg(j)), par(j)); };
            auto issue_s = [&](float *s, int j) {
#pragma unroll
                for (int kk = 0; kk < KS_QK; kk++)
                    wgmma_ss<T, BC>(s, desc_kmajor<BR>(sQ, wrow0, kk),
                                    desc_kmajor<BC>(sK(stg(j)), 0, kk), kk > 0);
            };
            auto issue_pv = [&](float *o, uint32_t (*pa)[4], int j) {
#pragma unroll
                for (int kk = 0; kk < KS_PV; kk++)
                    wgmma_rs<T, D>(o, pa[kk], desc_v(sV(stg(j)), kk, V_LBO, V_SBO), 1);
            };
            /* a key tile this warpgroup does not compute: its turn, and its
             * release once the loads landed (so that the arrival counts toward
             * this use of the stage, not the previous one) */
            auto skip = [&](int j) {
                wait_k(j);
                nbar_sync_if(pp, my_turn, 256);
                nbar_arrive_if(pp, other_turn, 256);
                mbar_release(empty_k(stg(j)), w.mc, lane, peer);
                wait_v(j);
                mbar_release(empty_v(stg(j)), w.mc, lane, peer);
            };

            float o[NO], s[NS], corr[2];
            uint32_t pa[KS_PV][4];
#pragma unroll
            for (int i = 0; i < NO; i++)
                o[i] = 0.f;
#pragma unroll
            for (int i = 0; i < NS; i++)
                s[i] = 0.f;
            float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

            if (ntiles > 0)
                mbar_wait(bar_qfull, (uint32_t)qn & 1u);
            if (PIPE) {
                if (nt_wg > 0) {
                    wait_k(0);
                    nbar_sync_if(pp, my_turn, 256);
                    wgmma_fence();
                    issue_s(s, 0);
                    wgmma_commit();
                    nbar_arrive_if(pp, other_turn, 256);
                    wgmma_wait<0>();
                    reg_fence<NS>(s);
                    mbar_release(empty_k(stg(0)), w.mc, lane, peer);
                    softmax_tile<NS>(s, 0, a.Skv, rel_row, t, a.alpha, m_r, l_r, corr);
                    pack_p<T, KS_PV>(s, pa);
                }
                for (int j = 0; j < nt_wg; j++) {
                    if (j + 1 < nt_wg) {
                        wait_k(j + 1);
                        wait_v(j);
                        reg_fence<NO>(o);
                        reg_fence_u<KS_PV>(pa);
                        nbar_sync_if(pp, my_turn, 256);
                        wgmma_fence();
                        issue_s(s, j + 1);
                        wgmma_commit();
                        issue_pv(o, pa, j);
                        wgmma_commit();
                        nbar_arrive_if(pp, other_turn, 256);
                        wgmma_wait<1>();
                        reg_fence<NS>(s);
                        mbar_release(empty_k(stg(j + 1)), w.mc, lane, peer);
                        softmax_tile<NS>(s, (j + 1) * BC, a.Skv, rel_row, t, a.alpha, m_r, l_r,
                                         corr);
                        wgmma_wait<0>();
                        reg_fence<NO>(o);
                        reg_fence_u<KS_PV>(pa);
                        mbar_release(empty_v(stg(j)), w.mc, lane, peer);
                        rescale_o<NO>(o, corr);
                        pack_p<T, KS_PV>(s, pa);
                    } else {
                        wait_v(j);
                        reg_fence<NO>(o);
                        reg_fence_u<KS_PV>(pa);
                        wgmma_fence();
                        issue_pv(o, pa, j);
                        wgmma_commit();
                        wgmma_wait<0>();
                        reg_fence<NO>(o);
                        reg_fence_u<KS_PV>(pa);
                        mbar_release(empty_v(stg(j)), w.mc, lane, peer);
                    }
                }
            } else {
                for (int j = 0; j < nt_wg; j++) {
                    wait_k(j);
                    nbar_sync_if(pp, my_turn, 256);
                    wgmma_fence();
                    issue_s(s, j);
                    wgmma_commit();
                    nbar_arrive_if(pp, other_turn, 256);
                    wgmma_wait<0>();
                    reg_fence<NS>(s);
                    mbar_release(empty_k(stg(j)), w.mc, lane, peer);
                    softmax_tile<NS>(s, j * BC, a.Skv, rel_row, t, a.alpha, m_r, l_r, corr);
                    rescale_o<NO>(o, corr);
                    pack_p<T, KS_PV>(s, pa);
                    wait_v(j);
                    pv_tile<NO, KS_PV>(o, pa, [&] { issue_pv(o, pa, j); });
                    mbar_release(empty_v(stg(j)), w.mc, lane, peer);
                }
            }
            for (int j = nt_wg; j < ntiles; j++)
                skip(j);

            /* Epilogue: normalise; out through shared memory + TMA or direct. */
            const bool via_smem = w.tma_store && ntiles > 0;
            float inv_r[2];
            /* merge mode is never via_smem */
            epilogue_rows<D>(a, o, m_r, l_r, inv_r, wrow0, wl, g, rel_row, q_rows, b, q0, h,
                             t, [](float l) { return 1.f / l; }, !via_smem);
            if (via_smem) {
                /* this warpgroup's rows of Q's tile: every S product that read
                 * them has completed (waited) in all four of its warps */
                nbar_sync(wg_bar, 128);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = wrow0 + wl * 16 + g + r * 8;
#pragma unroll
                    for (int n = 0; n < D / 8; n++) {
                        const float x0 = o[n * 4 + 2 * r] * inv_r[r], x1 = o[n * 4 + 2 * r + 1] * inv_r[r];
                        st_shared_u32(sQ + sw_offset<BR>(row, n) + 4u * (uint32_t)t,
                                      a.out_dt == WF_DTYPE_BF16 ? cvt<__nv_bfloat16>::pack(x0, x1)
                                                                : cvt<__half>::pack(x0, x1));
                    }
                }
                fence_proxy_async(); /* the copy engine reads what st.shared wrote */
                nbar_sync(wg_bar, 128);
                if (wtid == 0 && wrow0 < q_rows) {
#pragma unroll
                    for (int c = 0; c < D / 64; c++)
                        tma_store_4d(&to, sQ + (uint32_t)c * (BR * 128) + (uint32_t)wrow0 * 128u,
                                     c * 64, h, q0 + wrow0, b);
                    bulk_commit();
                    bulk_wait_read();
                }
            }
            if (ntiles > 0) {
                /* Q's tile is free for the next one once both warpgroups are
                 * past their products and their store has read it */
                nbar_sync(wg_bar, 128);
                if (wtid == 0)
                    mbar_arrive(bar_qempty);
                qn++;
            }
            /* consumer 1's last hand-over, taken in the last tile (a
             * bar.sync after the tile loop made ptxas keep the consumers at
             * the entry's register count: spills) */
            nbar_sync_if(pp && cw == 0 && (long long)tile + gridDim.x >= w.total, 1, 256);
            /* +mc: this CTA's last remote arrivals are out; stay until the
             * peer's are (taken in the last tile, as the hand-over above) */
            cluster_sync_if(w.mc && (long long)tile + gridDim.x >= w.total);
        }
    }
#else
    (void)a, (void)w, (void)tq, (void)tk, (void)tv, (void)to, (void)tkh, (void)tvh;
#ifdef __CUDA_ARCH__
    __trap(); /* built without sm_90a: the geometry never launches this */
#endif
#endif
}

/* The building blocks alone, for wf_cuda_ws_selftest: the (1, S, 1, 128)
 * bf16 tensor behind `tin` (and `gin`, the same bytes) copied to `tout`
 * through them. The producer warpgroup (setmaxnreg.dec) loads key-tile
 * sized boxes of 128 rows into a ring of 2 stages (full / empty
 * mbarriers); each consumer warpgroup (setmaxnreg.inc) reads its 64 rows
 * chunk by chunk through sw_offset (counting in *bad every chunk that
 * differs from gin: the TMA's swizzle against the layout the wgmma
 * descriptors assume; rows past S must arrive as zeros), writes them
 * through sw_offset into a staging tile and TMA-stores its rows (rows past
 * S clipped: the host checks the guard after the tensor). Each tile
 * starts with a ping-pong turn (named barriers 1 and 2, as the attention
 * kernel's): order[2 j + c] gets consumer c's place in a shared counter,
 * which must alternate 0, 1, 2, ... */
__global__ void __launch_bounds__(NTHREADS, 1)
ws_probe_kernel(int S, const uint4 *gin, unsigned *bad, int *order,
                const __grid_constant__ CUtensorMap tin, const __grid_constant__ CUtensorMap tout)
{
#ifdef WF_WS_BODY
    constexpr int D = 128, NST = 2;
    constexpr uint32_t TILE = BC * D * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t staging = sbase + NST * TILE;
    const uint32_t bars = staging + BR * D * 2;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (NST + s); };
    int *turns = reinterpret_cast<int *>(smem_raw + (bars + 8u * 2 * NST - smem_u32(smem_raw)));
    const int ntiles = (S + BC - 1) / BC;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NST; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 256u);
        }
        mbar_init_fence();
        *turns = 0;
    }
    __syncthreads();
    if (wg == 0) {
        regs_dec<REG_P>();
        if (threadIdx.x != 0)
            return;
        for (int j = 0; j < ntiles; j++) {
            const int s = j % NST;
            const uint32_t ph = (uint32_t)(j / NST) & 1u;
            mbar_wait(empty(s), ph ^ 1u);
            mbar_expect_tx(full(s), TILE);
            for (int c = 0; c < D / 64; c++)
                tma_load_4d(sbase + (uint32_t)s * TILE + (uint32_t)c * (BC * 128), &tin, full(s),
                            c * 64, 0, j * BC, 0);
        }
        return;
    }
    regs_inc<REG_C>();
    const int cw = wg - 1, wtid = threadIdx.x % 128, wrow0 = cw * WG_ROWS;
    unsigned nbad = 0;
    nbar_arrive_if(cw == 1, 1, 256); /* consumer 0 goes first */
    for (int j = 0; j < ntiles; j++) {
        const int s = j % NST;
        nbar_sync(1 + cw, 256);
        if (wtid == 0)
            order[2 * j + cw] = atomicAdd(turns, 1);
        nbar_arrive_if(1, 2 - cw, 256);
        mbar_wait(full(s), (uint32_t)(j / NST) & 1u);
        /* 64 rows x 16 chunks of 16 bytes: 8 per thread */
        for (int i = 0; i < 8; i++) {
            const int c = wtid + i * 128, r = wrow0 + c / 16, k = c % 16;
            const uint4 v = ld_shared_v4(sbase + (uint32_t)s * TILE + sw_offset<BC>(r, k));
            const int grow = j * BC + r;
            const uint4 want = grow < S ? gin[(long long)grow * 16 + k] : make_uint4(0, 0, 0, 0);
            if (v.x != want.x || v.y != want.y || v.z != want.z || v.w != want.w)
                nbad++;
            st_shared_v4(staging + sw_offset<BR>(r, k), v);
        }
        mbar_arrive(empty(s));
        fence_proxy_async();
        nbar_sync(3 + cw, 128);
        if (wtid == 0 && j * BC + wrow0 < S) {
            for (int c = 0; c < D / 64; c++)
                tma_store_4d(&tout, staging + (uint32_t)c * (BR * 128) + (uint32_t)wrow0 * 128u,
                             c * 64, 0, j * BC + wrow0, 0);
            bulk_commit();
            bulk_wait_read();
        }
        nbar_sync(3 + cw, 128); /* the staging rows are free again */
    }
    nbar_sync_if(cw == 0, 1, 256); /* consumer 1's last hand-over */
    if (nbad)
        atomicAdd(bad, nbad);
#else
    (void)S, (void)gin, (void)bad, (void)order, (void)tin, (void)tout;
#ifdef __CUDA_ARCH__
    __trap();
#endif
#endif
}

/* +mc's building block alone, for wf_cuda_ws_mc_selftest: a cluster of
 * two CTAs of 256 threads (a producer thread, a consumer warpgroup of
 * four warps) reading the (1, S, 1, 128) bf16 tensor behind `half`
 * (boxes of 64 rows), `whole` (boxes of 128) and gin (the same bytes) key
 * tile by key tile, as the attention kernel's producer and consumers do
 * with +mc: each producer multicasts its half of every tile into a ring of
 * 2 stages of both CTAs (a last tile of at most 64 rows: CTA 0 loads it
 * whole) after its own full barrier's expect of the whole tile; each
 * consumer warp checks its rows of every tile through sw_offset against
 * gin (rows past S must be zeros; differences counted in bad[rank]) and
 * releases the stage on both CTAs' empty barriers (mbar_release: a remote
 * arrive). Each producer then waits for the last phase of both its empty
 * barriers (the peer's arrivals included) and sets seen[rank]. */
__global__ void __launch_bounds__(256, 1)
ws_mc_probe_kernel(int S, const uint4 *gin, unsigned *bad, unsigned *seen,
                   const __grid_constant__ CUtensorMap half,
                   const __grid_constant__ CUtensorMap whole)
{
#ifdef WF_WS_BODY
    constexpr int D = 128, NST = 2;
    constexpr uint32_t TILE = BC * D * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t bars = sbase + NST * TILE;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (NST + s); };
    const int ntiles = (S + BC - 1) / BC;
    const uint32_t rank = cluster_ctarank(), peer = rank ^ 1u;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NST; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 8u); /* lane 0 of the 4 consumer warps of both CTAs */
        }
        mbar_init_fence();
    }
    cluster_sync_if(1);
    if (threadIdx.x < 128) {
        if (threadIdx.x == 0) {
            for (int j = 0; j < ntiles; j++) {
                const int s = j % NST;
                mbar_wait(empty(s), ((uint32_t)(j / NST) & 1u) ^ 1u);
                mbar_expect_tx(full(s), TILE);
                const bool short_tile = S - j * BC <= BC / 2;
                for (int c = 0; c < D / 64; c++) {
                    const uint32_t col = sbase + (uint32_t)s * TILE + (uint32_t)c * (BC * 128);
                    if (short_tile && rank == 0)
                        tma_load_4d_mc(col, &whole, full(s), 3, c * 64, 0, j * BC, 0);
                    else if (!short_tile)
                        tma_load_4d_mc(col + rank * (BC / 2 * 128), &half, full(s), 3, c * 64, 0,
                                       j * BC + (int)rank * (BC / 2), 0);
                }
            }
            /* every use of each stage released by both CTAs */
            for (int s = 0; s < NST && s < ntiles; s++) {
                const int uses = (ntiles - s + NST - 1) / NST;
                mbar_wait(empty(s), (uint32_t)(uses - 1) & 1u);
            }
            seen[rank] = 1u;
        }
    } else {
        const int wtid = threadIdx.x - 128, lane = threadIdx.x % 32;
        unsigned nbad = 0;
        for (int j = 0; j < ntiles; j++) {
            const int s = j % NST;
            mbar_wait(full(s), (uint32_t)(j / NST) & 1u);
            /* 128 rows x 16 chunks of 16 bytes: 16 per thread */
            for (int i = 0; i < 16; i++) {
                const int c = wtid + i * 128, r = c / 16, k = c % 16;
                const uint4 v = ld_shared_v4(sbase + (uint32_t)s * TILE + sw_offset<BC>(r, k));
                const int grow = j * BC + r;
                const uint4 want = grow < S ? gin[(long long)grow * 16 + k] : make_uint4(0, 0, 0, 0);
                if (v.x != want.x || v.y != want.y || v.z != want.z || v.w != want.w)
                    nbad++;
            }
            __syncwarp(); /* the warp's reads before its lane 0 releases */
            mbar_release(empty(s), 1, lane, peer);
        }
        if (nbad)
            atomicAdd(&bad[rank], nbad);
    }
    cluster_sync_if(1); /* no CTA exits while the peer can still arrive on its barriers */
#else
    (void)S, (void)gin, (void)bad, (void)seen, (void)half, (void)whole;
#ifdef __CUDA_ARCH__
    __trap();
#endif
#endif
}

template <typename T, int D, bool PIPE>
wf_status_t launch(const wf_attn_params_t *p, const attn_args &a, const ws_args &w,
                   const wf_cuda_attn_geom_t *g, cudaStream_t stream)
{
    const bool bf16 = g->compute_bf16 != 0;
    CUtensorMap tq, tk, tv, to, tkh, tvh;
    if (!wf_cuda_tensor_map(&tq, p->q, bf16, p->B, p->Sq, p->Hq, D, BR) ||
        !wf_cuda_tensor_map(&tk, p->k, bf16, p->B, p->Skv, p->Hkv, D, BC) ||
        !wf_cuda_tensor_map(&tv, p->v, bf16, p->B, p->Skv, p->Hkv, D, BC))
        return WF_E_INTERNAL;
    if (w.mc) {
        /* +mc: each CTA of a cluster loads half of a K / V tile */
        if (!wf_cuda_tensor_map(&tkh, p->k, bf16, p->B, p->Skv, p->Hkv, D, BC / 2) ||
            !wf_cuda_tensor_map(&tvh, p->v, bf16, p->B, p->Skv, p->Hkv, D, BC / 2))
            return WF_E_INTERNAL;
    } else {
        tkh = tk, tvh = tv; /* never read */
    }
    if (w.tma_store) {
        /* out in its own dtype, boxes of one consumer's 64 rows */
        if (!wf_cuda_tensor_map(&to, p->out, p->out_dtype == WF_DTYPE_BF16, p->B, p->Sq, p->Hq, D,
                        WG_ROWS))
            return WF_E_INTERNAL;
    } else {
        to = tq; /* never read */
    }
    auto kern = flash_fwd_ws_kernel<T, D, PIPE>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->smem_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    if (!w.mc) {
        kern<<<dim3(g->grid[0]), dim3(NTHREADS), g->smem_bytes, stream>>>(a, w, tq, tk, tv, to,
                                                                          tkh, tvh);
        return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
    }
    /* +mc: clusters of (2, 1, 1) along the grid's pairs of tiles */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = WF_CUDA_WS_CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(g->grid[0]);
    cfg.blockDim = dim3(NTHREADS);
    cfg.dynamicSmemBytes = g->smem_bytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, kern, a, w, tq, tk, tv, to, tkh, tvh) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL;
}

} /* namespace */

wf_status_t wf_cuda_attention_ws_launch(const wf_attn_params_t *p, const wf_cuda_attn_geom_t *g,
                                        cudaStream_t stream)
{
    if (!p || !g || g->kernel != WF_CUDA_KERNEL_WS || g->block[0] != NTHREADS ||
        g->stages < WF_CUDA_WS_MIN_STAGES || g->stages > MAXST)
        return WF_E_BAD_ARGUMENT;
    if (g->grid[0] == 0 || g->grid[1] == 0 || g->grid[2] == 0)
        return WF_OK;
    ws_args w;
    w.nqt = (int)((p->Sq + BR - 1) / BR);
    w.nh = (int)(p->h_end - p->h_begin);
    w.mc = (g->ws_features & WF_CUDA_WS_MULTICAST) ? 1 : 0;
    w.heads_b = (int)(w.nh * p->B);
    /* +mc counts pairs of tiles (an odd count per head adds an empty one) */
    const long long want = w.mc ? 2LL * ((w.nqt + 1) / 2) * w.nh * p->B
                                : (long long)w.nqt * w.nh * p->B;
    if (want != g->tiles || g->tiles > INT32_MAX)
        return WF_E_BAD_ARGUMENT; /* a geometry of other params */
    if (w.mc && (g->cluster[0] != WF_CUDA_WS_CLUSTER || g->cluster[1] != 1 ||
                 g->cluster[2] != 1 || g->grid[0] % WF_CUDA_WS_CLUSTER != 0))
        return WF_E_BAD_ARGUMENT;
    w.total = (int)g->tiles;
    w.stages = g->stages;
    w.pingpong = (g->ws_features & WF_CUDA_WS_PINGPONG) ? 1 : 0;
    /* merge mode merges into an f32 accumulator, and the out map is of a
     * dense (B, Sq, Hq, D) tensor: direct stores for both */
    w.tma_store = (g->ws_features & WF_CUDA_WS_TMA_STORE) && p->out_dtype != WF_DTYPE_F32 &&
                  !p->merge && wf_attn_ld_out(p) == p->Hq * p->D;
    const attn_args a = make_args(p);
    const bool pipe = (g->ws_features & WF_CUDA_WS_PIPE) != 0;
    if (g->compute_bf16) {
        if (g->d == 64)
            return pipe ? launch<__nv_bfloat16, 64, true>(p, a, w, g, stream)
                        : launch<__nv_bfloat16, 64, false>(p, a, w, g, stream);
        return pipe ? launch<__nv_bfloat16, 128, true>(p, a, w, g, stream)
                    : launch<__nv_bfloat16, 128, false>(p, a, w, g, stream);
    }
    if (g->d == 64)
        return pipe ? launch<__half, 64, true>(p, a, w, g, stream)
                    : launch<__half, 64, false>(p, a, w, g, stream);
    return pipe ? launch<__half, 128, true>(p, a, w, g, stream)
                : launch<__half, 128, false>(p, a, w, g, stream);
}

extern "C" wf_status_t wf_cuda_ws_selftest(int device, char *report, size_t n)
{
    if (report && n)
        report[0] = 0;
    cudaDeviceProp prop;
    if (!wf_cuda_ws_built() || cudaSetDevice(device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major != 9 ||
        prop.minor != 0) {
        (void)cudaGetLastError();
        if (report)
            snprintf(report, n, "ws: not available (needs sm_90a built and a 9.0 device)");
        return WF_E_UNAVAILABLE;
    }
    /* S rows of 128 bf16 (256 bytes); S not a multiple of the 128-row
     * boxes, so the last box is part zero-fill on the way in and clipped
     * on the way out; GUARD rows after it must stay as poisoned. */
    const int S = 1000, GUARD = 64, ROWB = 256;
    const size_t in_bytes = (size_t)S * ROWB, out_bytes = (size_t)(S + GUARD) * ROWB;
    unsigned char *hin = (unsigned char *)malloc(in_bytes), *hout = (unsigned char *)malloc(out_bytes);
    void *din = nullptr, *dout = nullptr, *dbad = nullptr, *dorder = nullptr;
    unsigned nbad = 0;
    const int NT = (S + BC - 1) / BC;
    int horder[2 * 16];
    int turns_bad = 0;
    wf_status_t st = WF_E_INTERNAL;
    CUtensorMap tin, tout;
    const size_t smem = 1024 + 2 * (size_t)BC * 128 * 2 + (size_t)BR * 128 * 2 + 64;
    size_t out_bad = 0, guard_bad = 0;
    if (!hin || !hout) {
        free(hin);
        free(hout);
        return WF_E_NO_MEMORY;
    }
    unsigned x = 2024;
    for (size_t i = 0; i < in_bytes; i++) {
        x = x * 1103515245u + 12345u;
        hin[i] = (unsigned char)(x >> 16);
    }
    if (cudaMalloc(&din, in_bytes) != cudaSuccess || cudaMalloc(&dout, out_bytes) != cudaSuccess ||
        cudaMalloc(&dbad, sizeof(unsigned)) != cudaSuccess ||
        cudaMalloc(&dorder, sizeof horder) != cudaSuccess) {
        if (report)
            snprintf(report, n, "ws: probe allocation failed");
        goto done;
    }
    if (cudaMemcpy(din, hin, in_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemset(dout, 0xAB, out_bytes) != cudaSuccess ||
        cudaMemset(dbad, 0, sizeof(unsigned)) != cudaSuccess ||
        cudaMemset(dorder, 0xff, sizeof horder) != cudaSuccess)
        goto done;
    if (!wf_cuda_tensor_map(&tin, din, true, 1, S, 1, 128, BC) ||
        !wf_cuda_tensor_map(&tout, dout, true, 1, S, 1, 128, WG_ROWS)) {
        if (report)
            snprintf(report, n, "ws: cuTensorMapEncodeTiled unavailable or refused");
        goto done;
    }
    if (cudaFuncSetAttribute(ws_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        goto done;
    ws_probe_kernel<<<1, NTHREADS, smem>>>(S, (const uint4 *)din, (unsigned *)dbad,
                                           (int *)dorder, tin, tout);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(horder, dorder, sizeof horder, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(hout, dout, out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(&nbad, dbad, sizeof nbad, cudaMemcpyDeviceToHost) != cudaSuccess) {
        if (report)
            snprintf(report, n, "ws: probe failed: %s", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    for (size_t i = 0; i < in_bytes; i++)
        out_bad += hout[i] != hin[i];
    for (size_t i = in_bytes; i < out_bytes; i++)
        guard_bad += hout[i] != 0xAB;
    for (int i = 0; i < 2 * NT; i++)
        turns_bad += horder[i] != i;
    st = nbad == 0 && out_bad == 0 && guard_bad == 0 && turns_bad == 0 ? WF_OK : WF_E_INTERNAL;
    if (report)
        snprintf(report, n,
                 "ws mbarrier ring (TMA loads, 2 stages x %d boxes, full / empty) + setmaxnreg "
                 "%d / %d: %s (%u of %d chunks differ from sw_offset's layout); TMA store "
                 "(swizzle 128, rows past %d clipped): %s (%zu bytes differ, %zu guard bytes "
                 "written); ping-pong (named barriers 1 / 2, %d turns): %s",
                 (S + BC - 1) / BC, REG_P, REG_C, nbad == 0 ? "ok" : "WRONG", nbad,
                 ((S + BC - 1) / BC) * BC * 16, S,
                 out_bad == 0 && guard_bad == 0 ? "ok" : "WRONG", out_bad, guard_bad, 2 * NT,
                 turns_bad == 0 ? "ok" : "WRONG (out of order)");
done:
    (void)cudaGetLastError();
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dbad);
    cudaFree(dorder);
    free(hin);
    free(hout);
    return st;
}

extern "C" wf_status_t wf_cuda_ws_mc_selftest(int device, char *report, size_t n)
{
    if (report && n)
        report[0] = 0;
    cudaDeviceProp prop;
    int cl = 0;
    if (!wf_cuda_ws_built() || cudaSetDevice(device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major != 9 ||
        prop.minor != 0 ||
        cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, device) != cudaSuccess || !cl) {
        (void)cudaGetLastError();
        if (report)
            snprintf(report, n, "ws mc: not available (needs sm_90a built, a 9.0 device, clusters)");
        return WF_E_UNAVAILABLE;
    }
    /* Two tensors' worth of rows: S 1000 (the last tile's second half
     * partly past the end: zero-filled) and S 940 (a last tile of 44 rows:
     * loaded whole by CTA 0). */
    static const int SS[2] = {1000, 940};
    const int SMAX = 1000, ROWB = 256;
    const size_t in_bytes = (size_t)SMAX * ROWB;
    const size_t smem = 1024 + 2 * (size_t)BC * 128 * 2 + 64;
    unsigned char *hin = (unsigned char *)malloc(in_bytes);
    void *din = nullptr, *dflags = nullptr;
    unsigned hbad[2][2] = {{0, 0}, {0, 0}}, hseen[2][2] = {{0, 0}, {0, 0}};
    wf_status_t st = WF_E_INTERNAL;
    int chunks = 0, ok_bytes = 1, ok_seen = 1;
    if (!hin)
        return WF_E_NO_MEMORY;
    unsigned x = 1717;
    for (size_t i = 0; i < in_bytes; i++) {
        x = x * 1103515245u + 12345u;
        hin[i] = (unsigned char)(x >> 16);
    }
    if (cudaMalloc(&din, in_bytes) != cudaSuccess ||
        cudaMalloc(&dflags, 4 * sizeof(unsigned)) != cudaSuccess) {
        if (report)
            snprintf(report, n, "ws mc: probe allocation failed");
        goto done;
    }
    if (cudaMemcpy(din, hin, in_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaFuncSetAttribute(ws_mc_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        goto done;
    for (int v = 0; v < 2; v++) {
        const int S = SS[v];
        CUtensorMap th, tw;
        if (!wf_cuda_tensor_map(&th, din, true, 1, S, 1, 128, BC / 2) ||
            !wf_cuda_tensor_map(&tw, din, true, 1, S, 1, 128, BC)) {
            if (report)
                snprintf(report, n, "ws mc: cuTensorMapEncodeTiled unavailable or refused");
            goto done;
        }
        if (cudaMemset(dflags, 0, 4 * sizeof(unsigned)) != cudaSuccess)
            goto done;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 2;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(2);
        cfg.blockDim = dim3(256);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        unsigned *flags = (unsigned *)dflags;
        if (cudaLaunchKernelEx(&cfg, ws_mc_probe_kernel, S, (const uint4 *)din, flags, flags + 2,
                               th, tw) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(hbad[v], flags, 2 * sizeof(unsigned), cudaMemcpyDeviceToHost) !=
                cudaSuccess ||
            cudaMemcpy(hseen[v], flags + 2, 2 * sizeof(unsigned), cudaMemcpyDeviceToHost) !=
                cudaSuccess) {
            if (report)
                snprintf(report, n, "ws mc: probe (S %d) failed: %s", S,
                         cudaGetErrorString(cudaGetLastError()));
            goto done;
        }
        chunks += (S + BC - 1) / BC * BC * 16;
        ok_bytes &= hbad[v][0] == 0 && hbad[v][1] == 0;
        ok_seen &= hseen[v][0] == 1 && hseen[v][1] == 1;
    }
    st = ok_bytes && ok_seen ? WF_OK : WF_E_INTERNAL;
    if (report)
        snprintf(report, n,
                 "ws mc cluster of 2 (TMA multicast of half tiles, a short last tile whole; S "
                 "1000 / 940, ring of 2): %s (CTA 0: %u, CTA 1: %u of %d chunks each differ); "
                 "remote arrive (empty barriers of 2 x 4 warps, last phases seen by both "
                 "producers): %s",
                 ok_bytes ? "ok" : "WRONG", hbad[0][0] + hbad[1][0], hbad[0][1] + hbad[1][1],
                 chunks, ok_seen ? "ok" : "WRONG");
done:
    (void)cudaGetLastError();
    cudaFree(din);
    cudaFree(dflags);
    free(hin);
    return st;
}

int wf_cuda_ws_built(void)
{
#ifdef WF_CUDA_SM90A
    return 1;
#else
    return 0;
#endif
}
