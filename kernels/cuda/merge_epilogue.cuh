/* merge_epilogue.cuh — the per-row and per-element math of the
 * log-sum-exp merge of ring steps (backend.h lse_merge, tensor.h's
 * wf_lse_merge_rows), in one place for the two kernels that merge:
 * merge.cu's lse_merge kernel (a separate pass over a partial result) and
 * the attention kernels' epilogue in merge mode (wf_attn_params_t.merge:
 * the kernel merges its own rows into the accumulator), so the two
 * cannot drift. Device code only; no memory access here.
 *
 * A row is planned once from the accumulator's lse la and the partial's
 * lse lp; each element then takes the accumulator's a and the partial's
 * p:
 *   lp = -inf, la = -inf: a NaN p is copied (the row stays empty, or
 *                         keeps a NaN until a finite partial comes)
 *   lp = -inf otherwise:  unchanged
 *   la = -inf:            a = round(p), lse = lp
 *   else:                 w = sigmoid(lp - la), a = round(a - w (a -
 *                         round(p))), lse = max + log1p(exp(-|la - lp|));
 *                         where a or round(p) is not finite, a =
 *                         round(sigmoid(la - lp) a + w round(p)) (an
 *                         infinity stays one, never inf - inf)
 * round: to merge_round's precision (F32: none), wf_cuda_round_to.
 */
#ifndef WF_CUDA_MERGE_EPILOGUE_CUH
#define WF_CUDA_MERGE_EPILOGUE_CUH

#include <math.h>

#include "round_dtype.cuh"

namespace wf_merge {

/* How a row merges (above). */
enum { KEEP = 0, KEEP_NAN = 1, TAKE = 2, BLEND = 3 };

struct row_plan {
    int how;   /* KEEP, KEEP_NAN, TAKE or BLEND */
    float w;   /* BLEND: the partial's weight sigmoid(lp - la) */
    float wa;  /* BLEND: the accumulator's weight sigmoid(la - lp) */
    float lse; /* the row's lse after the merge */
};

/* The plan of a row with accumulator lse la and partial lse lp. */
static __device__ __forceinline__ row_plan plan_row(float la, float lp)
{
    row_plan m;
    m.w = 0.f;
    m.wa = 1.f;
    m.lse = la;
    if (lp == -INFINITY) {
        m.how = la == -INFINITY ? KEEP_NAN : KEEP;
        return m;
    }
    if (la == -INFINITY) {
        m.how = TAKE;
        m.lse = lp;
        return m;
    }
    m.how = BLEND;
    const float diff = la - lp;
    m.w = 1.0f / (1.0f + expf(diff));   /* sigmoid(lp - la) */
    m.wa = 1.0f / (1.0f + expf(-diff)); /* sigmoid(la - lp) */
    m.lse = fmaxf(la, lp) + log1pf(expf(-fabsf(diff)));
    return m;
}

/* One element: the accumulator's a merged with the partial's p. */
static __device__ __forceinline__ float merge_elem(const row_plan &m, float a, float p, int rdt)
{
    switch (m.how) {
    case KEEP:
        return a;
    case KEEP_NAN:
        return p != p ? p : a;
    case TAKE:
        return wf_cuda_round_to(p, rdt);
    default: {
        const float pd = wf_cuda_round_to(p, rdt);
        const float x = isfinite(a) && isfinite(pd) ? a - m.w * (a - pd) : m.wa * a + m.w * pd;
        return wf_cuda_round_to(x, rdt);
    }
    }
}

} /* namespace wf_merge */

#endif /* WF_CUDA_MERGE_EPILOGUE_CUH */
