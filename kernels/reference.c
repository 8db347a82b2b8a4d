/* reference.c — fp64 reference attention (reference.h). */
#include "reference.h"

#include <math.h>
#include <stdlib.h>

wf_status_t wf_ref_attention(const wf_ref_attn_t *a, const float *q,
                             const float *k, const float *v, double *out,
                             double *lse)
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
                const float *qr = q + ((b * Sq + i) * Hq + h) * D;
                int64_t hk = h / group, n = Skv; /* keys 0..n-1 visible */
                if (a->causal) {
                    n = a->q_offset + i - a->kv_offset + 1;
                    n = n < 0 ? 0 : n > Skv ? Skv : n;
                }
                double m = -INFINITY;
                for (int64_t j = 0; j < n; j++) {
                    const float *kr = k + ((b * Skv + j) * Hkv + hk) * D;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)qr[d] * (double)kr[d];
                    s[j] = dot * a->scale;
                    m = s[j] > m ? s[j] : m;
                }
                double *o = out + ((b * Sq + i) * Hq + h) * D, l = 0;
                for (int64_t d = 0; d < D; d++)
                    o[d] = 0;
                /* m = -inf: every visible score is -inf or NaN; subtract 0
                 * so that -inf weighs 0 (l = 0: out 0/0 = NaN, lse log 0 =
                 * -inf) and NaN stays NaN (not -inf - -inf for all) */
                const double mm = m == -INFINITY ? 0.0 : m;
                for (int64_t j = 0; j < n; j++) {
                    double p = exp(s[j] - mm);
                    l += p;
                    const float *vr = v + ((b * Skv + j) * Hkv + hk) * D;
                    for (int64_t d = 0; d < D; d++)
                        o[d] += p * (double)vr[d];
                }
                for (int64_t d = 0; d < D && n > 0; d++)
                    o[d] /= l;
                if (lse)
                    lse[(b * Sq + i) * Hq + h] = n > 0 ? m + log(l) : -INFINITY;
            }
    free(s);
    return WF_OK;
}
