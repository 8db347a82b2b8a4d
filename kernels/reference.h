/* reference.h — the fp64 reference attention every check compares with:
 * tests/test_kernels.c (each backend's op), tests/test_cp_attention.c
 * (the context-parallel plans), tests/support/jobcheck.c (end-to-end jobs)
 * and weftctl's attention-demo.
 *
 * Written for clarity, not speed: one query row at a time, every sum in
 * double, no tiling and no online softmax, so it shares no numerics with
 * the kernels it checks (their inputs, the f32 copies of the stored
 * values, are the only thing in common). Not for the daemon's hot path.
 */
#ifndef WF_REFERENCE_H
#define WF_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "weft.h"

/* The geometry of one reference attention. */
typedef struct wf_ref_attn {
    int64_t B, Sq, Skv, Hq, Hkv, D; /* q (B,Sq,Hq,D), k / v (B,Skv,Hkv,D) */
    double scale;                   /* score = (q . k) * scale */
    bool causal;                    /* mask keys after the query (below) */
    int64_t q_offset, kv_offset;    /* causal: query i sees key j when
                                     * kv_offset + j <= q_offset + i;
                                     * 0, 0 is the top-left mask */
} wf_ref_attn_t;

/* out (B,Sq,Hq,D) and lse (B,Sq,Hq; may be NULL) in fp64 from f32 q, k,
 * v laid out as in wf_ref_attn_t; query head h reads kv head
 * h / (Hq / Hkv). A query row that sees no key gets out 0 and lse -inf.
 * Non-finite values by IEEE rules on m = the largest non-NaN score and the
 * weights exp(s - m): a NaN score makes its row NaN (out and lse); a +inf
 * score too (inf - inf); -inf scores weigh 0, and when every visible
 * score is -inf the row's sum of weights is 0: out = 0/0 = NaN, lse =
 * log 0 = -inf (what merging such a row with others by lse needs).
 * Returns WF_E_BAD_ARGUMENT for a geometry with a dimension < 1 or Hq not
 * a multiple of Hkv, WF_E_NO_MEMORY when the row of Skv scores cannot be
 * allocated; out and lse are written only on WF_OK. */
wf_status_t wf_ref_attention(const wf_ref_attn_t *a, const float *q,
                             const float *k, const float *v, double *out,
                             double *lse);

#endif /* WF_REFERENCE_H */
