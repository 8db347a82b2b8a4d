/* reference.c — fp64 reference attention (reference.h), and the fp8
 * reference: quantize-dequantize (kernels/fp8.h), then the same. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>

#include "fp8.h"
#include "tensor.h"

/* Element i of q / k / v: f32 (wf_ref_attention) or fp64 (the fp8
 * reference's dequantized copies). */
static inline double elem(const void *p, bool dbl, int64_t i)
{
    return dbl ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static wf_status_t attend(const wf_ref_attn_t *a, const void *q, const void *k,
                          const void *v, bool dbl, double *out, double *lse)
{
    if (a->B < 1 || a->Sq < 1 || a->Skv < 1 || a->Hq < 1 || a->Hkv < 1 ||
        a->D < 1 || a->Hq % a->Hkv != 0)
        return WF_E_BAD_ARGUMENT;
    const int64_t B = a->B, Sq = a->Sq, Skv = a->Skv, Hq = a->Hq,
                  Hkv = a->Hkv, D = a->D, group = Hq / Hkv;
    double *s = malloc((size_t)Skv * sizeof *s); /* one row of scores */
    if (!s)
        return WF_E_NO_MEMORY;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t h = 0; h < Hq; h++) {
                const int64_t qr = ((b * Sq + i) * Hq + h) * D;
                int64_t hk = h / group, n = Skv; /* keys 0..n-1 visible */
                if (a->causal) {
                    n = a->q_offset + i - a->kv_offset + 1;
                    n = n < 0 ? 0 : n > Skv ? Skv : n;
                }
                double m = -INFINITY;
                for (int64_t j = 0; j < n; j++) {
                    const int64_t kr = ((b * Skv + j) * Hkv + hk) * D;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += elem(q, dbl, qr + d) * elem(k, dbl, kr + d);
                    s[j] = dot * a->scale;
                    m = s[j] > m ? s[j] : m;
                }
                double *o = out + qr, l = 0;
                for (int64_t d = 0; d < D; d++)
                    o[d] = 0;
                /* m = -inf: every visible score is -inf or NaN; subtract 0
                 * so that -inf weighs 0 (l = 0: out 0/0 = NaN, lse log 0 =
                 * -inf) and NaN stays NaN (not -inf - -inf for all) */
                const double mm = m == -INFINITY ? 0.0 : m;
                for (int64_t j = 0; j < n; j++) {
                    double p = exp(s[j] - mm);
                    l += p;
                    const int64_t vr = ((b * Skv + j) * Hkv + hk) * D;
                    for (int64_t d = 0; d < D; d++)
                        o[d] += p * elem(v, dbl, vr + d);
                }
                for (int64_t d = 0; d < D && n > 0; d++)
                    o[d] /= l;
                if (lse)
                    lse[(b * Sq + i) * Hq + h] = n > 0 ? m + log(l) : -INFINITY;
            }
    free(s);
    return WF_OK;
}

wf_status_t wf_ref_attention(const wf_ref_attn_t *a, const float *q,
                             const float *k, const float *v, double *out,
                             double *lse)
{
    return attend(a, q, k, v, false, out, lse);
}

wf_status_t wf_ref_fp8_qdq(const void *x, wf_dtype_t dtype, int64_t B, int64_t S,
                           int64_t H, int64_t D, double *out, double *ret_scale)
{
    if (B < 1 || S < 1 || H < 1 || D < 1 ||
        (dtype != WF_DTYPE_F32 && dtype != WF_DTYPE_F16 && dtype != WF_DTYPE_BF16))
        return WF_E_BAD_ARGUMENT;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            /* the head's elements: (b, s, h, d) for every s, d */
            float amax = 0.0f;
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++) {
                    float e = fabsf(wf_elem_load(x, dtype, (size_t)(((b * S + s) * H + h) * D + d)));
                    if (isfinite(e) && e > amax)
                        amax = e;
                }
            const float f = wf_fp8_quant_factor(amax), sc = wf_fp8_scale(amax);
            if (ret_scale)
                ret_scale[b * H + h] = (double)sc;
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++) {
                    size_t i = (size_t)(((b * S + s) * H + h) * D + d);
                    float e = wf_elem_load(x, dtype, i);
                    out[i] = (double)wf_fp8_e4m3_to_f32(wf_fp8_e4m3_from_f32(e * f)) *
                             (double)sc;
                }
        }
    return WF_OK;
}

wf_status_t wf_ref_attention_fp8(const wf_ref_attn_t *a, const void *q, wf_dtype_t q_dtype,
                                 const void *k, wf_dtype_t k_dtype, const void *v,
                                 wf_dtype_t v_dtype, double *out, double *lse)
{
    if (a->B < 1 || a->Sq < 1 || a->Skv < 1 || a->Hq < 1 || a->Hkv < 1 ||
        a->D < 1 || a->Hq % a->Hkv != 0)
        return WF_E_BAD_ARGUMENT;
    size_t nq = (size_t)(a->B * a->Sq * a->Hq * a->D);
    size_t nk = (size_t)(a->B * a->Skv * a->Hkv * a->D);
    double *dq = malloc(nq * sizeof *dq), *dk = malloc(nk * sizeof *dk),
           *dv = malloc(nk * sizeof *dv);
    wf_status_t st = dq && dk && dv ? WF_OK : WF_E_NO_MEMORY;
    if (st == WF_OK)
        st = wf_ref_fp8_qdq(q, q_dtype, a->B, a->Sq, a->Hq, a->D, dq, NULL);
    if (st == WF_OK)
        st = wf_ref_fp8_qdq(k, k_dtype, a->B, a->Skv, a->Hkv, a->D, dk, NULL);
    if (st == WF_OK)
        st = wf_ref_fp8_qdq(v, v_dtype, a->B, a->Skv, a->Hkv, a->D, dv, NULL);
    if (st == WF_OK)
        st = attend(a, dq, dk, dv, true, out, lse);
    free(dq);
    free(dk);
    free(dv);
    return st;
}
