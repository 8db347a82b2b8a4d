/* reference.h — the fp64 reference attention every check compares with:
 * tests/unit/test_kernels.c (each backend's op), tests/unit/test_cp_attention.c
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

/* ---- fp8 (e4m3) attention (backend.h wf_attn_params_t.fp8) -------------
 * What an fp8 kernel computes, up to one rounding it adds: q, k and v are
 * quantized per (batch, head) exactly as kernels/fp8.h says (amax over
 * the head's finite elements, x8 = e4m3(x * (448 / amax)) in f32, value
 * x8 * (amax / 448)), then the attention runs in fp64 on the dequantized
 * values. The kernels also round the softmax weights P to e4m3 before
 * the second product (P v8); this reference does not, so a check against
 * it needs a tolerance for that rounding (relative 2^-4 per weight, about
 * 2^-4 / sqrt(visible keys) of a row's spread in practice), not 0. */

/* Quantize-dequantize x, (B, S, H, D) of `dtype` (f32, f16 or bf16; its
 * f32 values are what is quantized), into out (same layout, fp64: every
 * value exact). An infinite or NaN element becomes NaN. ret_scale (may be
 * NULL) gets the (B, H) scales amax / 448 (1 for an all-zero head).
 * WF_E_BAD_ARGUMENT for a dim < 1 or another dtype. */
wf_status_t wf_ref_fp8_qdq(const void *x, wf_dtype_t dtype, int64_t B, int64_t S,
                           int64_t H, int64_t D, double *out, double *ret_scale);

/* The fp8 reference attention: q (B,Sq,Hq,D) of q_dtype, k and v
 * (B,Skv,Hkv,D) of their dtypes, quantized-dequantized by wf_ref_fp8_qdq,
 * then wf_ref_attention's rules in fp64 into out and lse (may be NULL).
 * Returns what those return (WF_E_NO_MEMORY: the fp64 copies). */
wf_status_t wf_ref_attention_fp8(const wf_ref_attn_t *a, const void *q, wf_dtype_t q_dtype,
                                 const void *k, wf_dtype_t k_dtype, const void *v,
                                 wf_dtype_t v_dtype, double *out, double *lse);

#endif /* WF_REFERENCE_H */
