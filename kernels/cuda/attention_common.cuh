/* attention_common.cuh — what the two attention kernels share
 * (attention.cu: mma.sync, any GPU from sm_80; attention_wgmma.cu: wgmma,
 * sm_90a): the kernel's view of the parameters, element helpers and the
 * cp.async wrappers. Internal to kernels/cuda.
 */
#ifndef WF_ATTENTION_COMMON_CUH
#define WF_ATTENTION_COMMON_CUH

#include "cuda_launch.h"
#include "merge_epilogue.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

namespace wf_attn {

/* Parameters as the kernel sees them (by value). Element offsets are
 * int64: a (B, S, H, D) tensor may exceed 2^31 elements. */
struct attn_args {
    const char *q, *k, *v; /* device, 16-byte aligned */
    char *out;
    long long out_ld;      /* elements between out's query rows (backend.h ld_out) */
    float *lse;            /* or nullptr */
    int q_dt, k_dt, v_dt, out_dt;
    int Sq, Skv, Hq, Hkv;
    int h_begin;
    int gqa_group, q_head_base, kv_head_base; /* gqa_group 0: Hq / Hkv */
    int causal;
    long long q_offset, kv_offset;
    float alpha; /* scale * log2(e) */
    /* merge mode (backend.h): out is the f32 accumulator, lse its lse */
    int merge;       /* 1: merge into out / lse instead of writing them */
    int merge_round; /* wf_dtype_t of the merge's rounding (F32: none) */
    char *final_out; /* merge: the merged rows in final_dt too, or nullptr */
    int final_dt;
};

/* ---- element helpers -------------------------------------------------------- */

template <typename T> struct cvt;
template <> struct cvt<__nv_bfloat16> {
    static constexpr int dtype = WF_DTYPE_BF16;
    __device__ static uint32_t pack(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* .x = a: low half */
        return *reinterpret_cast<uint32_t *>(&h);
    }
};
template <> struct cvt<__half> {
    static constexpr int dtype = WF_DTYPE_F16;
    __device__ static uint32_t pack(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};

/* 8 consecutive elements of dtype dt at element index e, as floats. */
__device__ __forceinline__ void load8(const char *base, int dt, long long e, float f[8])
{
    if (dt == WF_DTYPE_F32) {
        const float4 *p = reinterpret_cast<const float4 *>(base + e * 4);
        float4 a = p[0], b = p[1];
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
        return;
    }
    uint4 u = *reinterpret_cast<const uint4 *>(base + e * 2);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; i++) {
        if (dt == WF_DTYPE_BF16) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        } else {
            __half2 h = *reinterpret_cast<__half2 *>(&w[i]);
            float2 x = __half22float2(h);
            f[2 * i] = x.x;
            f[2 * i + 1] = x.y;
        }
    }
}

/* Store two consecutive elements (a at e, b at e + 1) in dtype dt. */
__device__ __forceinline__ void store2(char *base, int dt, long long e, float a, float b)
{
    if (dt == WF_DTYPE_F32) {
        *reinterpret_cast<float2 *>(base + e * 4) = make_float2(a, b);
    } else if (dt == WF_DTYPE_BF16) {
        *reinterpret_cast<uint32_t *>(base + e * 2) = cvt<__nv_bfloat16>::pack(a, b);
    } else {
        *reinterpret_cast<uint32_t *>(base + e * 2) = cvt<__half>::pack(a, b);
    }
}

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)),
                 "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* cp.async of 16 bytes that reads `src_bytes` (16 or 0) and zero-fills
 * the rest: rows past the end of a tensor land as zeros. */
__device__ __forceinline__ void cp_async16_zfill(uint32_t smem, const void *gmem,
                                                 int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
                 "r"(src_bytes));
}

/* What one block of either kernel computes: query rows [q0, q0 + q_rows)
 * of batch b, query head h (K/V head hk, GQA), and the keys any of those
 * rows can see, [0, k_end). Non-causal: query tiles of one head side by
 * side (they share K / V in L2). Causal: the heavy tiles (late rows) of
 * every head first, the light ones fill the last wave: the (tile, head)
 * pair is remapped from the linear block index, heads fastest. */
struct block_plan {
    int q0, q_rows, b, h, hk, k_end;
};
/* The plan of query tile qt (br rows) of head h_begin + hl, batch b. */
__device__ __forceinline__ block_plan plan_tile(const attn_args &a, int br, int qt, int hl, int b)
{
    block_plan p;
    p.q0 = qt * br;
    p.h = a.h_begin + hl;
    p.b = b;
    p.hk = a.gqa_group == 0 ? p.h / (a.Hq / a.Hkv)
                            : (a.q_head_base + p.h) / a.gqa_group - a.kv_head_base;
    p.q_rows = min(br, a.Sq - p.q0);
    p.k_end = a.Skv;
    if (a.causal) {
        long long last = a.q_offset + p.q0 + p.q_rows - a.kv_offset; /* keys < last */
        p.k_end = (int)min((long long)a.Skv, max(0LL, last));
    }
    return p;
}
__device__ __forceinline__ block_plan plan_block(const attn_args &a, int br)
{
    int qt, hl;
    if (a.causal) {
        const int lin = blockIdx.y * gridDim.x + blockIdx.x;
        qt = gridDim.x - 1 - lin / gridDim.y;
        hl = lin % gridDim.y;
    } else {
        qt = blockIdx.x;
        hl = blockIdx.y;
    }
    return plan_tile(a, br, qt, hl, blockIdx.z);
}

/* ---- the epilogue's stores (plain or merge mode) ------------------------------
 *
 * Each kernel's epilogue has a row's D outputs spread over the 4 lanes of
 * a quad (pairs of consecutive columns) and writes the lse from lane 0.
 * In merge mode a row is planned from the accumulator's old lse, which
 * every lane of the quad reads before lane 0 overwrites it (the warp
 * syncs in between), then each lane merges and writes its own pairs: a
 * read of the accumulator and a write, no other thread touches them. */

/* The row's plan: merge mode reads the accumulator's lse at li (live
 * rows); lp is the kernel's own lse of the row. Called by every lane of
 * the warp (it syncs the warp in merge mode: a.merge is uniform). */
__device__ __forceinline__ wf_merge::row_plan epilogue_plan(const attn_args &a, bool live,
                                                            long long li, float lp)
{
    wf_merge::row_plan m;
    m.how = wf_merge::TAKE;
    m.w = 0.f;
    m.wa = 1.f;
    m.lse = lp;
    if (a.merge) {
        const float la = live ? a.lse[li] : -INFINITY;
        __syncwarp(); /* every lane has read before lane 0 writes (epilogue_lse) */
        m = wf_merge::plan_row(la, lp);
    }
    return m;
}

/* Element of out where query row (b, s) of head h starts: rows out_ld
 * apart (dense: out_ld = Hq D, the element li D of the row's lse index
 * li). */
template <int D>
__device__ __forceinline__ long long out_row(const attn_args &a, int b, int s, int h)
{
    return ((long long)b * a.Sq + s) * a.out_ld + (long long)h * D;
}

/* Two consecutive outputs (p0, p1) of a live row: stored in out_dt at
 * elements eo, eo + 1 of out (out_row), or in merge mode (out dense)
 * merged into the f32 accumulator at e, e + 1 (and the merged values
 * stored to final_out when it is set). */
__device__ __forceinline__ void epilogue_store2(const attn_args &a, const wf_merge::row_plan &m,
                                                long long e, long long eo, float p0, float p1)
{
    if (!a.merge) {
        store2(a.out, a.out_dt, eo, p0, p1);
        return;
    }
    float2 *acc = reinterpret_cast<float2 *>(a.out + e * 4);
    const float2 old = *acc;
    const float x0 = wf_merge::merge_elem(m, old.x, p0, a.merge_round);
    const float x1 = wf_merge::merge_elem(m, old.y, p1, a.merge_round);
    *acc = make_float2(x0, x1);
    if (a.final_out)
        store2(a.final_out, a.final_dt, e, x0, x1);
}

/* The lse of a live row (lane 0 of its quad): the kernel's own, or in
 * merge mode the merged one. */
__device__ __forceinline__ void epilogue_lse(const attn_args &a, const wf_merge::row_plan &m,
                                             long long li, float lp)
{
    if (a.lse)
        a.lse[li] = a.merge ? m.lse : lp;
}

/* The kernel's view of p (device pointers). */
inline attn_args make_args(const wf_attn_params_t *p)
{
    attn_args a;
    a.q = static_cast<const char *>(p->q);
    a.k = static_cast<const char *>(p->k);
    a.v = static_cast<const char *>(p->v);
    a.out = static_cast<char *>(p->out);
    a.out_ld = wf_attn_ld_out(p);
    a.lse = p->lse;
    a.q_dt = p->q_dtype;
    a.k_dt = p->k_dtype;
    a.v_dt = p->v_dtype;
    a.out_dt = p->out_dtype;
    a.Sq = (int)p->Sq;
    a.Skv = (int)p->Skv;
    a.Hq = (int)p->Hq;
    a.Hkv = (int)p->Hkv;
    a.h_begin = (int)p->h_begin;
    a.gqa_group = (int)p->gqa_group;
    a.q_head_base = (int)p->q_head_base;
    a.kv_head_base = (int)p->kv_head_base;
    a.causal = p->causal ? 1 : 0;
    a.q_offset = p->q_offset;
    a.kv_offset = p->kv_offset;
    a.alpha = p->scale * 1.4426950408889634f;
    a.merge = p->merge ? 1 : 0;
    a.merge_round = p->merge_round;
    a.final_out = p->merge ? static_cast<char *>(p->final_out) : nullptr;
    a.final_dt = p->final_dtype;
    return a;
}

} /* namespace wf_attn */

#endif /* WF_ATTENTION_COMMON_CUH */
