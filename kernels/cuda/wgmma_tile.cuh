/* wgmma_tile.cuh — the per-key-tile steps shared by the Hopper attention
 * kernels (attention_wgmma.cu, attention_ws.cu, attention_fp8.cu): the
 * K-major and V operand descriptors of a swizzled tile, the online-softmax
 * step of one key tile, O's rescale, P packed to the A fragments and the
 * register fence of those fragments, the zeroed accumulators, the waited
 * S and the fenced P V steps, and the two-row epilogue. Uses the
 * including file's BC (keys per tile) and wgmma_ops.cuh. sm_90a device code only: included inside
 * each kernel's anonymous namespace, under its own "sm_90a body" #ifdef.
 * A kernel calls a helper only where that compiles to the same SASS as
 * the steps written inline (compare cuobjdump -sass); where it would not,
 * the kernel keeps the steps inline, said at the helper. */
#ifndef WF_WGMMA_TILE_CUH
#define WF_WGMMA_TILE_CUH

/* Descriptor of k-step kk (16 elements of D) of the K-major operand made
 * of rows [row0, row0 + 64 or R) of a swizzled tile of R rows. */
template <int R>
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t tile, int row0, int kk)
{
    return make_desc(tile + (uint32_t)(kk >> 2) * (R * 128) + (uint32_t)row0 * 128u +
                         (uint32_t)(kk & 3) * 32u,
                     16, 1024);
}

/* Descriptor of k-step kk (16 keys) of V as the N-major B operand of P V:
 * keys along K (16 rows = 2048 bytes per k-step, 8-row groups SBO = 1024
 * bytes apart), its 64-column blocks along N LBO = BC * 128 bytes apart. */
__device__ __forceinline__ uint64_t desc_v(uint32_t tile, int kk, uint32_t lbo, uint32_t sbo)
{
    return make_desc(tile + (uint32_t)kk * 2048u, lbo, sbo);
}
/* Online-softmax step on this thread's part of S for the key tile at k0
 * (rows wl * 16 + g (+ 8), keys k0 + 8 i + 2 t (+ 1)): scale and mask,
 * new running maxima (base 2), corr = the factor O and l take, and the
 * un-normalised probabilities in place of the scores; l gets their sums. */
template <int NS>
__device__ __forceinline__ void softmax_tile(float *s, int k0, int Skv, int rel_row, int t,
                                             float alpha, float m_r[2], float l_r[2],
                                             float corr[2])
{
    /* rel_row: key kj is masked for the thread's first row when kj > rel_row
     * (second row: rel_row + 8); the tile needs no mask when every key is
     * below Skv and visible to both rows. */
    const bool need_mask = k0 + BC > Skv || k0 + BC - 1 > rel_row;
    float al = alpha;
    if (!(al > 0.f)) {
#pragma unroll
        for (int i = 0; i < NS; i++)
            s[i] *= al;
        al = 1.f;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < NS; i++) {
        float x = s[i];
        if (need_mask) {
            const int kj = k0 + (i >> 2) * 8 + 2 * t + (i & 1);
            if (kj >= Skv || kj > rel_row + ((i >> 1) & 1) * 8)
                x = -INFINITY;
        }
        s[i] = x;
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x);
    }
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float m_new = fmaxf(m_r[r], mx[r] * al);
        m_use[r] = m_new == -INFINITY ? 0.f : m_new; /* no NaN from -inf - -inf */
        corr[r] = exp2f(m_r[r] - m_use[r]);
        m_r[r] = m_new;
        l_r[r] *= corr[r];
    }
#pragma unroll
    for (int i = 0; i < NS; i++) {
        const int r = (i >> 1) & 1;
        s[i] = exp2f(fmaf(s[i], al, -m_use[r]));
        l_r[r] += s[i];
    }
}

/* O *= corr (per row), skipped when no row's max moved in the warp. */
template <int NO>
__device__ __forceinline__ void rescale_o(float *o, const float corr[2])
{
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < NO; i++)
            o[i] *= corr[(i >> 1) & 1];
    }
}

/* Probabilities (S's accumulator layout) packed to T as the A fragments
 * of P V's k-steps: k-step kk takes n8 chunks 2 kk (k 0-7) and 2 kk + 1
 * (k 8-15), rows g and g + 8 each. */
template <typename T, int KS>
__device__ __forceinline__ void pack_p(const float *s, uint32_t (*pa)[4])
{
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int i0 = (2 * kk + half) * 4;
            pa[kk][half * 2 + 0] = cvt<T>::pack(s[i0 + 0], s[i0 + 1]);
            pa[kk][half * 2 + 1] = cvt<T>::pack(s[i0 + 2], s[i0 + 3]);
        }
}

template <int N> __device__ __forceinline__ void reg_fence_u(uint32_t (*r)[4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+r"(r[i][e])::"memory");
}

/* A row block's accumulators zero: O, and S (overwritten by the first
 * product, scale-d 0, but never read undefined). attention_ws.cu keeps
 * its own loops: calling this there would change its SASS. */
template <int NO, int NS> __device__ __forceinline__ void acc_zero(float *o, float *s)
{
#pragma unroll
    for (int i = 0; i < NO; i++)
        o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < NS; i++)
        s[i] = 0.f;
}

/* S = Q K^T of one key tile, waited, S fenced after (softmax_tile reads
 * it). issue_s issues the k-steps of the product. attention_ws.cu keeps
 * its own: its ping-pong hands the turn over between commit and wait. */
template <int NS, class IssueS> __device__ __forceinline__ void s_tile(float *s, IssueS issue_s)
{
    wgmma_fence();
    issue_s();
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence<NS>(s);
}

/* O += P V of one key tile, waited: P (pa) and O are fenced before the
 * wgmma reads them and after it completes (a register the asynchronous
 * product still reads must not be moved across it). issue_pv issues the
 * k-steps of the product (the kernel's operand descriptors).
 * attention_ws.cu's pipelined last tile keeps its own: calling this
 * there would change its SASS. */
template <int NO, int KS_PV, class IssuePV>
__device__ __forceinline__ void pv_tile(float *o, uint32_t (*pa)[4], IssuePV issue_pv)
{
    reg_fence<NO>(o);
    reg_fence_u<KS_PV>(pa);
    wgmma_fence();
    issue_pv();
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence<NO>(o);
    reg_fence_u<KS_PV>(pa);
}

/* Epilogue of this thread's two rows, wrow0 + wl * 16 + g (+ 8), rel_row
 * as for softmax_tile: l summed over the quad, the output factor
 * inv_of(l) (written to inv_r too) and the lse. As attention.cu: l = 0
 * with visible keys (all scores -inf): out NaN, lse -inf; l NaN (a NaN or
 * +inf score): out, lse NaN. Live rows (below q_rows) get their lse and,
 * with store_o, their D outputs (merge mode: merged into the accumulator,
 * attention_common.cuh); without store_o the caller writes O * inv_r.
 * inv_of is a lambda rather than a factor: a literal 1.f / l compiles to
 * other code than x / l with x = 1 (different SASS). */
template <int D, class InvOf>
__device__ __forceinline__ void epilogue_rows(const attn_args &a, const float *o,
                                              const float m_r[2], const float l_r[2],
                                              float inv_r[2], int wrow0, int wl, int g,
                                              int rel_row, int q_rows, int b, int q0, int h,
                                              int t, InvOf inv_of, bool store_o)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = l_r[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = wrow0 + wl * 16 + g + r * 8;
        const bool sees = rel_row + r * 8 >= 0;
        const float inv = l > 0.f ? inv_of(l)
                                  : l == 0.f && !sees ? 0.f : __int_as_float(0x7fc00000);
        inv_r[r] = inv;
        const float lse = l > 0.f ? (m_r[r] + log2f(l)) * 0.69314718055994531f
                                  : l == 0.f ? -INFINITY : l;
        const long long li = ((long long)b * a.Sq + q0 + row) * a.Hq + h;
        /* merge mode: the accumulator's row plan (every lane) */
        const wf_merge::row_plan mp = epilogue_plan(a, row < q_rows, li, lse);
        if (row < q_rows) {
            if (store_o) {
                const long long lo = out_row<D>(a, b, q0 + row, h);
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    epilogue_store2(a, mp, li * D + n * 8 + 2 * t, lo + n * 8 + 2 * t,
                                    o[n * 4 + 2 * r] * inv, o[n * 4 + 2 * r + 1] * inv);
            }
            if (t == 0)
                epilogue_lse(a, mp, li, lse);
        }
    }
}

#endif /* WF_WGMMA_TILE_CUH */
