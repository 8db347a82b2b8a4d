/* attn_tile.c — the register-blocked tile path of the CPU attention
 * (attn_tile.h), AVX-512 intrinsics; a build for a target without
 * AVX-512F compiles the stubs at the end and cpu_backend.c keeps its
 * cblas path.
 *
 * For each key tile (WF_ATTN_FK keys) and each block of WF_ATTN_RB query
 * rows:
 *   S = alpha * Q_blk K_tile^T   (RB, tk)  12 rows x 32 keys per register
 *                                           block (24 accumulators), K
 *                                           read from panels packed once
 *                                           per head; the row max is taken
 *                                           on the accumulators before S
 *                                           is stored
 *   P = 2^(S - m_new), rowsum       one pass over the block (in L1)
 *   O_blk = O_blk * 2^(m_old - m_new) + P V_tile
 *                                 (RB, D)  6 rows x 64 columns per register
 *                                           block, the rescale folded into
 *                                           loading the accumulators
 * So S and P never leave L1, nothing is repacked per product (a BLAS call
 * packs both operands on every call), and the softmax is one pass instead
 * of a max pass and an exp pass.
 *
 * exp2 is softmax.c's method (round to nearest, degree-7 Taylor
 * polynomial of 2^f for f in [-0.5, 0.5], exactly 0 below -126, NaN stays
 * NaN) with the exponent applied by vscalefps.
 *
 * The causal mask: a query block skips the key tiles none of its rows
 * sees, runs the tiles all of its rows see in full, and on a tile that
 * crosses its diagonal computes the scores up to the last key any of its
 * rows sees and takes each row's max, exp2 and sum over its own keys only
 * (the rest of its P row 0).
 *
 * Not here: the safe mode for non-finite row maxima and extreme scales
 * and the diagonal tiles with a non-finite v (cpu_backend.c reruns such a
 * query tile on the cblas path), dtype conversion, the epilogue.
 */
#include "attn_tile.h"
#include "softmax.h"

#include <math.h>
#include <string.h>

void wf_cpu_attn_kpack(float *kp, const float *k, int64_t Skv, int64_t D)
{
    for (int64_t p0 = 0; p0 < Skv; p0 += WF_ATTN_KP) {
        float *panel = kp + p0 * D;
        int64_t n = Skv - p0 < WF_ATTN_KP ? Skv - p0 : WF_ATTN_KP;
        for (int64_t j = 0; j < n; j++) {
            const float *row = k + (p0 + j) * D;
            for (int64_t d = 0; d < D; d++)
                panel[d * WF_ATTN_KP + j] = row[d];
        }
        for (int64_t j = n; j < WF_ATTN_KP; j++)
            for (int64_t d = 0; d < D; d++)
                panel[d * WF_ATTN_KP + j] = 0.0f;
    }
}

#if defined(__AVX512F__)

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { RB = WF_ATTN_RB, FK = WF_ATTN_FK, KP = WF_ATTN_KP, PR = 6, PV = 4 };

bool wf_cpu_attn_tile_ok(int64_t D)
{
    return D >= 16 && D % 16 == 0;
}

/* Scores of the RB rows q (RB, D) against one panel (D, KP) of keys:
 * s[r * FK + c] = alpha * q_r . k_c for c < KP, and rmax[r] (16 lanes)
 * takes the max of the scores whose lane is set in valid (lo: keys 0-15,
 * hi: 16-31), a NaN score ignored. */
ALWAYS_INLINE void qk_panel(const float *q, int64_t D, const float *panel, float alpha,
                            float *s, __m512 *rmax, __mmask16 lo, __mmask16 hi)
{
    __m512 acc[RB][2];
    for (int r = 0; r < RB; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        __m512 b0 = _mm512_load_ps(panel + d * KP);
        __m512 b1 = _mm512_load_ps(panel + d * KP + 16);
#pragma GCC unroll 12
        for (int r = 0; r < RB; r++) {
            __m512 a = _mm512_set1_ps(q[r * D + d]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
    for (int r = 0; r < RB; r++) {
        __m512 x0 = _mm512_mul_ps(acc[r][0], al), x1 = _mm512_mul_ps(acc[r][1], al);
        _mm512_store_ps(s + r * FK, x0);
        _mm512_store_ps(s + r * FK + 16, x1);
        /* vmaxps(x, m) is m where x is NaN */
        __m512 mr = _mm512_mask_max_ps(rmax[r], lo, x0, rmax[r]);
        rmax[r] = _mm512_mask_max_ps(mr, hi, x1, mr);
    }
}

/* 2^x for x <= 0 (softmax.c's exp2_poly, 16 lanes). */
ALWAYS_INLINE __m512 exp2_16(__m512 x)
{
    __m512 lim = _mm512_set1_ps(-126.0f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lim, _CMP_LT_OQ);
    __m512 xc = _mm512_max_ps(lim, x); /* NaN stays NaN */
    __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(xc, n);
    __m512 p = _mm512_set1_ps(1.5252734e-05f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530e-04f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512 r = _mm512_scalef_ps(p, n);
    return _mm512_mask_blend_ps(under, r, _mm512_setzero_ps());
}

/* row[j] = 2^(row[j] - m) for j < n, in place; returns their sum. */
static float exp2_row(float *row, int64_t n, float m)
{
    __m512 mv = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 e0 = exp2_16(_mm512_sub_ps(_mm512_load_ps(row + j), mv));
        __m512 e1 = exp2_16(_mm512_sub_ps(_mm512_load_ps(row + j + 16), mv));
        _mm512_store_ps(row + j, e0);
        _mm512_store_ps(row + j + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = exp2_16(_mm512_sub_ps(_mm512_maskz_load_ps(k, row + j), mv));
        _mm512_mask_store_ps(row + j, k, e);
        s0 = _mm512_mask_add_ps(s0, k, s0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* o (PR rows, D apart; columns c0 .. c0 + 16 nv) = o * corr + P V for the
 * PR rows of P at s (FK apart) over the tk keys of v (tk, D). */
ALWAYS_INLINE void pv_rows(const float *s, int64_t tk, const float *v, int64_t D,
                           float *o, const float *corr, int64_t c0, int nv)
{
    __m512 acc[PR][PV];
    for (int r = 0; r < PR; r++) {
        __m512 c = _mm512_set1_ps(corr[r]);
        for (int u = 0; u < nv; u++)
            acc[r][u] = _mm512_mul_ps(_mm512_load_ps(o + r * D + c0 + 16 * u), c);
    }
    for (int64_t j = 0; j < tk; j++) {
        __m512 b[PV];
        for (int u = 0; u < nv; u++)
            b[u] = _mm512_load_ps(v + j * D + c0 + 16 * u);
#pragma GCC unroll 6
        for (int r = 0; r < PR; r++) {
            __m512 a = _mm512_set1_ps(s[r * FK + j]);
            for (int u = 0; u < nv; u++)
                acc[r][u] = _mm512_fmadd_ps(a, b[u], acc[r][u]);
        }
    }
    for (int r = 0; r < PR; r++)
        for (int u = 0; u < nv; u++)
            _mm512_store_ps(o + r * D + c0 + 16 * u, acc[r][u]);
}

static void pv_block(const float *s, int64_t tk, const float *v, int64_t D, float *o,
                     const float *corr)
{
    for (int g = 0; g < RB; g += PR)
        for (int64_t c0 = 0; c0 < D; c0 += 16 * PV) {
            const float *sg = s + g * FK;
            float *og = o + g * D;
            switch ((D - c0) / 16 >= PV ? PV : (int)((D - c0) / 16)) {
            case 4: pv_rows(sg, tk, v, D, og, corr + g, c0, 4); break;
            case 3: pv_rows(sg, tk, v, D, og, corr + g, c0, 3); break;
            case 2: pv_rows(sg, tk, v, D, og, corr + g, c0, 2); break;
            default: pv_rows(sg, tk, v, D, og, corr + g, c0, 1); break;
            }
        }
}

/* Whether v[0..n) are all finite (x * 0 is NaN exactly for inf and NaN). */
static bool all_finite(const float *v, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(v + j), _mm512_setzero_ps()));
    float z = _mm512_reduce_add_ps(acc);
    for (; j < n; j++)
        z += v[j] * 0.0f;
    return z == 0.0f;
}

bool wf_cpu_attn_tile(int64_t tq, int64_t real, int64_t D, int64_t Skv, bool causal,
                      int64_t first, float alpha, const float *q, const float *kp,
                      const float *v, float *o, float *m, float *l, float *s)
{
    for (int64_t i = 0; i < tq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, (size_t)(tq * D) * sizeof(float));

    /* keys any real row sees: row i sees key j iff j <= first + i */
    int64_t k_end = Skv;
    if (causal)
        k_end = first + real < 0 ? 0 : first + real < Skv ? first + real : Skv;
    for (int64_t k0 = 0; k0 < k_end; k0 += FK) {
        int64_t tk = k_end - k0 < FK ? k_end - k0 : FK;
        int v_ok = -1; /* v rows of the tile all finite: unknown yet */
        for (int64_t r0 = 0; r0 < tq; r0 += RB) {
            /* keys of the tile each row sees, and the block's range */
            int64_t nvis[RB], lo_n = tk, hi_n = tk;
            for (int r = 0; r < RB; r++) {
                int64_t n = tk;
                if (causal) {
                    n = first + r0 + r + 1 - k0;
                    n = n < 0 ? 0 : n > tk ? tk : n;
                }
                nvis[r] = n;
                lo_n = r == 0 || n < lo_n ? n : lo_n;
                hi_n = r == 0 || n > hi_n ? n : hi_n;
            }
            if (hi_n == 0)
                continue; /* no row of the block sees the tile yet */
            bool diag = lo_n < hi_n;
            /* A masked key weighs 0, but 0 * NaN (or inf) in its v row
             * would still reach the rows that do not see it: such a tile
             * goes to the cblas path, which takes each row's keys alone. */
            if (diag && v_ok < 0)
                v_ok = all_finite(v + k0 * D, tk * D);
            if (diag && !v_ok)
                return false;

            __m512 rmax[RB];
            for (int r = 0; r < RB; r++)
                rmax[r] = _mm512_set1_ps(-INFINITY);
            for (int64_t c = 0; c < hi_n; c += KP) {
                /* keys past hi_n (zero padding of the last panel, or
                 * keys no row of the block sees) are stored but kept out
                 * of the max, the exp and P V */
                int64_t n = hi_n - c;
                __mmask16 lo = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
                __mmask16 hi = n >= 32   ? (__mmask16)0xffff
                               : n <= 16 ? (__mmask16)0
                                         : (__mmask16)((1u << (n - 16)) - 1u);
                qk_panel(q + r0 * D, D, kp + (k0 + c) * D, alpha, s + c, rmax, lo, hi);
            }
            float corr[RB];
            for (int r = 0; r < RB; r++) {
                int64_t i = r0 + r;
                float *row = s + r * FK;
                if (nvis[r] == 0) {
                    /* nothing visible yet: m, l, o unchanged */
                    memset(row, 0, (size_t)hi_n * sizeof(float));
                    corr[r] = 1.0f;
                    continue;
                }
                float mx = diag ? wf_cpu_row_max(row, nvis[r]) : _mm512_reduce_max_ps(rmax[r]);
                float m_new = fmaxf(m[i], mx);
                if (i < real && !isfinite(m_new))
                    return false;
                float sum = exp2_row(row, nvis[r], m_new);
                if (nvis[r] < hi_n)
                    memset(row + nvis[r], 0, (size_t)(hi_n - nvis[r]) * sizeof(float));
                corr[r] = exp2f(m[i] - m_new); /* 0 when m[i] was -inf */
                l[i] = l[i] * corr[r] + sum;
                m[i] = m_new;
            }
            pv_block(s, hi_n, v + k0 * D, D, o + r0 * D, corr);
        }
    }
    return true;
}

#else /* no AVX-512F: the cblas path runs every tile */

bool wf_cpu_attn_tile_ok(int64_t D)
{
    (void)D;
    return false;
}

bool wf_cpu_attn_tile(int64_t tq, int64_t real, int64_t D, int64_t Skv, bool causal,
                      int64_t first, float alpha, const float *q, const float *kp,
                      const float *v, float *o, float *m, float *l, float *s)
{
    (void)tq, (void)real, (void)D, (void)Skv, (void)causal, (void)first, (void)alpha;
    (void)q, (void)kp, (void)v;
    (void)o, (void)m, (void)l, (void)s;
    return false;
}

#endif
