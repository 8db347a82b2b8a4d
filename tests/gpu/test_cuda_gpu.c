/* test_cuda_gpu.c — the CUDA backend against the CPU backend (every
 * dtype, causal / non-causal with global offsets, GQA and explicit head
 * mappings, uneven shapes, D 64 / 128), non-finite inputs (NaN / +inf in
 * q, NaN in k, NaN in v, -inf scores for half the keys; each dtype:
 * NaN where the CPU backend is NaN, the same inf, else within the
 * tolerance), fp8 attention against fp64 references on its quantized
 * inputs (below, "fp8 attention"; `--fp8` runs only those), the fused
 * LSE merge against the
 * host formula, the attention kernels' merge mode (two ring steps merged
 * in the epilogue against kernel + lse_merge + convert, every kernel
 * variant and the fp8 kernel), device conversions, the model ops against the CPU
 * backend's same ops (linear for every weight dtype, column blocks,
 * strided rows, fused bias / GELU epilogues and the kernel fallback;
 * bias_act, act, add, modln, gate_residual, head_norm_rope, layer_norm,
 * rms_norm, rope_table, timestep_proj, copy_rows; the activations they
 * write in bf16; parameter refusals), cuBLASLt's GELU form,
 * resident memory beside the job buffers, host registration, and the
 * NCCL comm backend with a world of 1 (and of N when N GPUs exist).
 * Exits 77 (skipped) where no GPU can be opened. Uses the ops table
 * only: no CUDA header here.
 *
 * Tolerances of the model ops (|gpu - cpu| <= atol + rtol |cpu|, atol =
 * rtol * max |cpu| of the case): linear with bf16 / f16 weights 1e-2 (x
 * rounded to the weight dtype on the GPU), f32 weights 1e-5 (fp32
 * products, other summation order; with GELU in cuBLASLt's epilogue plus
 * GELU_EPI_SLACK |x|, the epilogue's own error); elementwise ops 1e-5 (f32 against
 * the CPU's double statistics / libm); rope_table and timestep_proj
 * 2e-6 absolute (values in [-1, 1]); copy_rows exact. */
#include "backend.h"
#include "cuda_plan.h"
#include "fp8.h"
#include "tensor.h"
#include "support/check.h"
#if WEFT_TEST_NCCL
#include "comm/comm_nccl.h"
#include "cuda_plan.h"
#include <pthread.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const wf_backend_ops_t *G, *C;
static wf_backend_ctx_t *gctx, *cctx;
/* The attention kernel of this run's contexts: WEFT_CUDA_ATTENTION, the
 * variable weftd's cuda_attention setting reads (NULL: the default). */
static const char *run_kernel;

/* A context of GPU `index` with `arena` bytes, tuned as weftd tunes its
 * workers (ctx_tune): attention kernel `kern` (NULL: the default), GELU
 * as a kernel of its own when gelu_kernel. ctx_new's or ctx_tune's
 * status; *ret set only on WF_OK. */
static wf_status_t tuned_ctx(int index, uint64_t arena, const char *kern, bool gelu_kernel,
                             wf_backend_ctx_t **ret)
{
    wf_backend_ctx_t *c = NULL;
    wf_status_t st = G->ctx_new(index, arena, &c);
    if (st != WF_OK)
        return st;
    const wf_backend_tuning_t t = { kern, gelu_kernel, WF_GRAPHS_OFF, 0 };
    if ((st = G->ctx_tune(c, &t)) != WF_OK) {
        G->ctx_destroy(&c);
        return st;
    }
    *ret = c;
    return WF_OK;
}

static size_t dsz(wf_dtype_t d) { return d == WF_DTYPE_F32 ? 4 : 2; }

static unsigned rng = 1;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void *dev_copy(const void *h, size_t bytes);

/* The CPU backend's op, or a failure naming it (the CPU model ops come
 * from the ops-cpu branch; before that merge they are NULL here). */
#define NEED_CPU(op)                                                               \
    do {                                                                           \
        if (!C->op) {                                                              \
            fprintf(stderr, "  %s: FAIL: wf_backend_cpu()->" #op " is NULL (the CPU " \
                            "model ops are not in this build), nothing compared\n", \
                    __func__);                                                     \
            failed++;                                                            \
            return;                                                                \
        }                                                                          \
    } while (0)

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    if (G->dev_alloc(gctx, bytes ? bytes : 1, &d) != WF_OK)
        return NULL;
    if (bytes && G->copy_h2d(gctx, d, h, bytes) != WF_OK)
        return NULL;
    return d;
}

typedef struct acase {
    int64_t B, Sq, Skv, Hq, Hkv, D, hb, he;
    int causal;
    int64_t qo, ko;
    int64_t grp, qbase, kvbase;
} acase_t;

/* The params of case t, inputs dt and output odt; no buffers yet. */
static wf_attn_params_t params_of(const acase_t *t, wf_dtype_t dt, wf_dtype_t odt)
{
    wf_attn_params_t p = {0};
    p.B = t->B; p.Sq = t->Sq; p.Skv = t->Skv; p.Hq = t->Hq; p.Hkv = t->Hkv; p.D = t->D;
    p.h_begin = t->hb; p.h_end = t->he;
    p.scale = 1.0f / sqrtf((float)t->D);
    p.causal = t->causal; p.q_offset = t->qo; p.kv_offset = t->ko;
    p.gqa_group = t->grp; p.q_head_base = t->qbase; p.kv_head_base = t->kvbase;
    p.q_dtype = p.k_dtype = p.v_dtype = dt;
    p.out_dtype = odt;
    return p;
}

/* Sets non-finite inputs of a case (f32 q, k, v before the conversion). */
typedef void (*poke_fn)(const acase_t *t, float *q, float *k, float *v);

/* NaN outputs of the CPU backend seen by the last case (its reference,
 * which test_numerics checks against kernels/reference.h end to end). */
static size_t last_nan_ref;

/* Case t's inputs: nq + 2 nk random f32 values in f (q, then k, then v;
 * poked when poke is not NULL), converted to dt into q, k and v. */
static void fill_inputs(const acase_t *t, wf_dtype_t dt, poke_fn poke, float *f, void *q, void *k,
                        void *v)
{
    const size_t nq = (size_t)(t->B * t->Sq * t->Hq * t->D),
                 nk = (size_t)(t->B * t->Skv * t->Hkv * t->D);
    for (size_t i = 0; i < nq + 2 * nk; i++)
        f[i] = frand();
    if (poke)
        poke(t, f, f + nq, f + nq + nk);
    wf_convert_from_f32(q, dt, f, nq);
    wf_convert_from_f32(k, dt, f + nq, nk);
    wf_convert_from_f32(v, dt, f + nq + nk, nk);
}

static void run_case_poked(const acase_t *t, wf_dtype_t dt, wf_dtype_t odt, poke_fn poke)
{
    size_t nq = (size_t)(t->B * t->Sq * t->Hq * t->D), nk = (size_t)(t->B * t->Skv * t->Hkv * t->D);
    size_t nl = (size_t)(t->B * t->Sq * t->Hq);
    float *f = malloc((nq + 2 * nk) * sizeof *f);
    unsigned char *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
    unsigned char *o_c = calloc(nq, 4), *o_g = calloc(nq, 4);
    float *l_c = malloc(nl * 4), *l_g = malloc(nl * 4);
    fill_inputs(t, dt, poke, f, q, k, v);
    for (size_t i = 0; i < nl; i++)
        l_c[i] = l_g[i] = 12345.f;

    wf_attn_params_t p = params_of(t, dt, odt);
    /* CPU reference */
    p.q = q; p.k = k; p.v = v; p.out = o_c; p.lse = l_c;
    void *ws = aligned_alloc(64, (C->attention_workspace(&p) + 63) / 64 * 64 + 64);
    CHECK_TRUE(C->attention(cctx, &p, ws) == WF_OK);
    free(ws);
    /* GPU */
    size_t ob = nq * dsz(odt);
    p.q = dev_copy(q, nq * dsz(dt));
    p.k = dev_copy(k, nk * dsz(dt));
    p.v = dev_copy(v, nk * dsz(dt));
    p.out = dev_copy(o_g, ob);
    p.lse = dev_copy(l_g, nl * 4);
    CHECK_TRUE(p.q && p.k && p.v && p.out && p.lse);
    CHECK_TRUE(G->attention_workspace(&p) == 0);
    wf_status_t st = G->attention(gctx, &p, NULL);
    CHECK_TRUE(st == WF_OK);
    CHECK_TRUE(G->copy_d2h(gctx, o_g, p.out, ob) == WF_OK);
    CHECK_TRUE(G->copy_d2h(gctx, l_g, p.lse, nl * 4) == WF_OK);
    CHECK_TRUE(G->synchronize(gctx) == WF_OK);
    G->dev_reset(gctx);

    float *a = malloc(nq * 4), *b = malloc(nq * 4);
    wf_convert_to_f32(a, o_c, odt, nq);
    wf_convert_to_f32(b, o_g, odt, nq);
    /* bf16 inputs: P rounded to bf16 for the tensor cores (8 bits). */
    double tol = dt == WF_DTYPE_BF16 || odt == WF_DTYPE_BF16 ? 2.5e-2 : 4e-3;
    double maxe = 0, maxl = 0;
    size_t bad = 0;
    last_nan_ref = 0;
    for (size_t i = 0; i < nq; i++) {
        int64_t h = (int64_t)((i / (size_t)t->D) % (size_t)t->Hq);
        if (h < t->hb || h >= t->he) {
            if (b[i] != 0.f)
                bad++; /* outside the head range: untouched */
            continue;
        }
        /* non-finite: the same class (NaN for NaN, the same inf) */
        if (isnan(a[i]) || isnan(b[i]) || isinf(a[i]) || isinf(b[i])) {
            last_nan_ref += isnan(a[i]);
            if (!(isnan(a[i]) && isnan(b[i])) && a[i] != b[i])
                bad++;
            continue;
        }
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= tol))
            bad++;
        if (e > maxe || e != e)
            maxe = e;
    }
    for (size_t i = 0; i < nl; i++) {
        int64_t h = (int64_t)(i % (size_t)t->Hq);
        if (h < t->hb || h >= t->he) {
            if (l_g[i] != 12345.f)
                bad++;
            continue;
        }
        if (isinf(l_c[i]) || isinf(l_g[i]) || isnan(l_c[i]) || isnan(l_g[i])) {
            if (!(isnan(l_c[i]) && isnan(l_g[i])) && l_c[i] != l_g[i])
                bad++;
            continue;
        }
        double e = fabs((double)l_c[i] - (double)l_g[i]);
        if (!(e <= 1e-2))
            bad++;
        if (e > maxl || e != e)
            maxl = e;
    }
    printf("  attn%s B%lld Sq%lld Skv%lld H%lld/%lld D%lld heads[%lld,%lld) causal%d off%lld/%lld "
           "grp%lld dt%d out%d: max|out| err %.2e, max|lse| err %.2e%s\n",
           poke ? " (non-finite)" : "",
           (long long)t->B, (long long)t->Sq, (long long)t->Skv, (long long)t->Hq,
           (long long)t->Hkv, (long long)t->D, (long long)t->hb, (long long)t->he, t->causal,
           (long long)t->qo, (long long)t->ko, (long long)t->grp, dt, odt, maxe, maxl,
           bad ? "  FAIL" : "");
    CHECK_TRUE(bad == 0);
    free(a); free(b); free(f); free(q); free(k); free(v); free(o_c); free(o_g);
    free(l_c); free(l_g);
}

static void run_case(const acase_t *t, wf_dtype_t dt, wf_dtype_t odt)
{
    run_case_poked(t, dt, odt, NULL);
}

/* Non-finite inputs, each against the CPU backend:
 * where it is NaN the GPU must be NaN, where +-inf the same inf, else
 * within the case's tolerance. (B 1, H 2 / Hkv 1, D 64, Sq = Skv = 130:
 * three key tiles, the last partial.) */
static void poke_q_nan(const acase_t *t, float *q, float *k, float *v)
{
    (void)k; (void)v;
    q[(size_t)((5 * t->Hq + 1) * t->D + 3)] = NAN;       /* row 5, head 1 */
}
static void poke_q_inf(const acase_t *t, float *q, float *k, float *v)
{
    (void)k; (void)v;
    q[(size_t)((70 * t->Hq + 0) * t->D + 0)] = INFINITY; /* row 70, head 0 */
}
static void poke_k_nan(const acase_t *t, float *q, float *k, float *v)
{
    (void)q; (void)v;
    k[(size_t)((100 * t->Hkv) * t->D + 7)] = NAN;        /* key 100 */
}
static void poke_v_nan(const acase_t *t, float *q, float *k, float *v)
{
    (void)q; (void)k;
    v[(size_t)((3 * t->Hkv) * t->D + 9)] = NAN;          /* key 3, column 9 */
}
static void poke_k_neg_inf_half(const acase_t *t, float *q, float *k, float *v)
{
    (void)v;
    /* q >= 0 and k = -inf in column 0 for the first half of the keys:
     * their scores are -inf for every row (no NaN: q 0 x inf is avoided) */
    for (int64_t i = 0; i < t->Sq * t->Hq; i++)
        q[(size_t)(i * t->D)] = 1.f;
    for (int64_t j = 0; j < t->Skv / 2; j++)
        for (int64_t h = 0; h < t->Hkv; h++)
            k[(size_t)((j * t->Hkv + h) * t->D)] = -INFINITY;
}

static void test_nonfinite(void)
{
    static const struct {
        const char *name;
        poke_fn poke;
        int causal;
        int want_nan; /* the reference has NaN outputs */
    } cases[] = {
        { "NaN in q", poke_q_nan, 0, 1 },
        { "NaN in q, causal", poke_q_nan, 1, 1 },
        { "+inf in q", poke_q_inf, 0, 1 },
        { "NaN in k", poke_k_nan, 0, 1 },
        { "NaN in k, causal", poke_k_nan, 1, 1 },
        { "NaN in v", poke_v_nan, 0, 1 },
        { "-inf keys (first half)", poke_k_neg_inf_half, 0, 0 },
        { "-inf keys (first half), causal", poke_k_neg_inf_half, 1, 0 },
    };
    /* Not here: a NaN in v of a key the causal mask hides from some rows
     * of its key tile (the documented difference, kernels/cuda/
     * attention.cu). "NaN in v" is non-causal for that reason. */
    static const wf_dtype_t dts[] = { WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 3; d++) {
            acase_t t = { 1, 130, 130, 2, 1, 64, 0, 2, cases[c].causal, 0, 0, 0, 0, 0 };
            printf("  %s:\n", cases[c].name);
            run_case_poked(&t, dts[d], WF_DTYPE_F32, cases[c].poke);
            if (cases[c].want_nan)
                CHECK_TRUE(last_nan_ref > 0); /* the case means what it says */
        }
}

/* The attention cases: test_attention runs them all, test_fp8 the first
 * ATTN_FP8_CASES (the last two are +mc's key-tile edges). */
#define ATTN_FP8_CASES 12
static const acase_t attn_cases[] = {
    {1, 128, 128, 4, 4, 64, 0, 4, 0, 0, 0, 0, 0, 0},
    {1, 128, 128, 4, 4, 128, 0, 4, 1, 0, 0, 0, 0, 0},
    {2, 100, 77, 8, 2, 128, 0, 8, 0, 0, 0, 0, 0, 0},   /* uneven, GQA */
    {2, 100, 77, 8, 2, 64, 0, 8, 1, 0, 0, 0, 0, 0},
    {1, 333, 1000, 6, 3, 64, 1, 5, 1, 700, 0, 0, 0, 0}, /* slice, global offsets */
    {1, 200, 300, 4, 1, 128, 0, 4, 1, 0, 120, 0, 0, 0}, /* first rows see nothing */
    {1, 65, 129, 4, 1, 64, 0, 4, 0, 0, 0, 4, 8, 2},     /* explicit mapping */
    {3, 1, 1, 2, 2, 128, 0, 2, 1, 0, 0, 0, 0, 0},
    {1, 1024, 1024, 2, 2, 128, 0, 2, 1, 0, 0, 0, 0, 0},
    {1, 700, 1300, 4, 2, 128, 0, 4, 1, 600, 0, 0, 0, 0}, /* several key tiles, uneven */
    {2, 513, 513, 3, 1, 64, 0, 3, 0, 0, 0, 0, 0, 0},
    {1, 300, 2000, 2, 1, 128, 0, 2, 1, 100, 1700, 0, 0, 0}, /* rows before every key */
    /* +mc's last key tiles: exactly 64 rows (loaded whole by one CTA)
     * and 65 (the second half has one row), an odd query tile count */
    {1, 384, 192, 2, 2, 128, 0, 2, 1, 0, 0, 0, 0, 0},
    {2, 257, 193, 2, 1, 64, 0, 2, 0, 0, 0, 0, 0, 0},
};
_Static_assert(ATTN_FP8_CASES <= sizeof attn_cases / sizeof attn_cases[0], "ATTN_FP8_CASES");

/* out's rows ld_out apart (backend.h), the single block's attention
 * written into its concatenation: bf16 q / k / v and out, B 2, S 300,
 * 4 heads, D 64 and 128, ld_out = Hq D + 64. The strided result must
 * equal the same kernel's dense one bit for bit, and the 64 elements
 * between rows keep what they held. */
static void test_attention_ld_out(void)
{
    for (int64_t D = 64; D <= 128; D *= 2) {
        const acase_t t = {2, 300, 300, 4, 4, D, 0, 4, 0, 0, 0, 0, 0, 0};
        const int64_t W = t.Hq * D, LDO = W + 64, rows = t.B * t.Sq;
        const size_t nq = (size_t)(rows * W), no = (size_t)(rows * LDO);
        float *f = malloc(3 * nq * sizeof *f);
        uint16_t *q = malloc(nq * 2), *k = malloc(nq * 2), *v = malloc(nq * 2);
        uint16_t *dense = malloc(nq * 2), *held = malloc(no * 2), *got = malloc(no * 2);
        fill_inputs(&t, WF_DTYPE_BF16, NULL, f, q, k, v);
        for (size_t i = 0; i < no; i++)
            held[i] = (uint16_t)(0x3f00 + i % 97);
        wf_attn_params_t p = params_of(&t, WF_DTYPE_BF16, WF_DTYPE_BF16);
        p.q = dev_copy(q, nq * 2);
        p.k = dev_copy(k, nq * 2);
        p.v = dev_copy(v, nq * 2);
        p.out = dev_copy(held, nq * 2);
        void *so = dev_copy(held, no * 2);
        CHECK_TRUE(p.q && p.k && p.v && p.out && so);
        CHECK_TRUE(G->attention(gctx, &p, NULL) == WF_OK);
        wf_attn_params_t ps = p;
        ps.out = so;
        ps.ld_out = LDO;
        CHECK_TRUE(G->attention(gctx, &ps, NULL) == WF_OK);
        ps.ld_out = LDO + 4; /* not a multiple of 8 */
        CHECK_TRUE(G->attention(gctx, &ps, NULL) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(G->copy_d2h(gctx, dense, p.out, nq * 2) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, got, so, no * 2) == WF_OK);
        CHECK_TRUE(G->synchronize(gctx) == WF_OK);
        G->dev_reset(gctx);
        size_t diff = 0, clobbered = 0;
        for (int64_t r = 0; r < rows; r++) {
            diff += memcmp(got + r * LDO, dense + r * W, (size_t)W * 2) != 0;
            clobbered += memcmp(got + r * LDO + W, held + r * LDO + W, 64 * 2) != 0;
        }
        printf("  attn ld_out %lld (D %lld, bf16): %zu rows differ from the dense output, %zu "
               "gaps written%s\n", (long long)LDO, (long long)D, diff, clobbered,
               diff || clobbered ? "  FAIL" : "");
        CHECK_TRUE(diff == 0 && clobbered == 0);
        free(f); free(q); free(k); free(v); free(dense); free(held); free(got);
    }
}

static void test_attention(void)
{
    static const wf_dtype_t dts[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    for (size_t c = 0; c < sizeof attn_cases / sizeof attn_cases[0]; c++)
        for (int d = 0; d < 3; d++)
            run_case(&attn_cases[c], dts[d], dts[(d + c) % 3]);
    /* D 96 is refused. */
    wf_attn_params_t p = {0};
    void *x = NULL;
    CHECK_TRUE(G->dev_alloc(gctx, 4096, &x) == WF_OK);
    p.B = 1; p.Sq = p.Skv = 4; p.Hq = p.Hkv = 1; p.D = 96; p.h_end = 1; p.scale = 1;
    p.q = p.k = p.v = p.out = x;
    CHECK_TRUE(G->attention(gctx, &p, NULL) == WF_E_BAD_ARGUMENT);
    G->dev_reset(gctx);
    test_attention_ld_out();
}

/* ---- fp8 attention --------------------------------------------------------
 *
 * Each case of test_attention in q / k / v dtypes bf16, f16, f32 with
 * p->fp8, against two fp64 references of this file (they take the head
 * range, explicit GQA mapping and causal offsets; reference.h's takes
 * neither):
 *   ref8: attention on the QUANTIZED inputs (kernels/fp8.h per (batch,
 *         head): q8 * sq, k8 * sk, v8 * sv) with the fp8 kernel's rounding
 *         of P modelled: key j of key tile J (128 keys) weighs
 *         e4m3(256 * 2^(x_j - m_J)) / 256 * 2^(m_J - m) in the numerator,
 *         2^(x_j - m) in the sum (x in base 2, m_J the row's running max
 *         after tile J, m the final one; attention_fp8.cu). What stays
 *         between kernel and ref8 is f32 arithmetic (fp8 wgmma's
 *         accumulation, which keeps fewer bits than f32, exp2, the
 *         rescales), and with it the e4m3 rounding of a P that lies
 *         within 4e-3 (relative) of a rounding midpoint may go the other
 *         way: tolerance 4e-3 + the out dtype's rounding (2^-8 |ref| for
 *         bf16, 2^-11 for f16) + the slack of those P (one e4m3 step
 *         each, weighted as in the output: large only in rows that see
 *         few keys), lse 1e-2.
 *   ref:  attention on the unquantized inputs (the dtype's values): the
 *         fp8 path's error against it is printed beside the bf16 kernel's
 *         on the same case (quantization and P rounding cost), not
 *         checked: it is the number to report.
 * Devices without fp8 (attention_fp8_ok false): attention() refuses with
 * WF_E_UNSUPPORTED, nothing else runs. */

/* Local K/V head of local query head h (backend.h). */
static int64_t kv_of(const acase_t *t, int64_t h)
{
    if (t->grp == 0)
        return h / (t->Hq / t->Hkv);
    return (t->qbase + h) / t->grp - t->kvbase;
}

/* fp64 attention of case t for the heads [hb, he) on f32 q, k, v, each
 * (b, head) multiplied by mq / mk / mv[b * H + h] (the dequantizing
 * scales; NULL: 1); p8: the fp8 kernel's P rounding (above), and slack
 * (or NULL) gets per output element the change one e4m3 step of each P
 * near a rounding midpoint can make. out (B, Sq, Hq, D), lse (B, Sq, Hq)
 * and slack written for the range. */
static void ref_attn(const acase_t *t, double scale, const float *q, const float *k,
                     const float *v, const float *mq, const float *mk, const float *mv, int p8,
                     double *out, double *lse, double *slack)
{
    const int64_t D = t->D, BC8 = 128;
    double *x = malloc((size_t)t->Skv * sizeof *x), *mJ = malloc((size_t)t->Skv * sizeof *mJ);
    for (int64_t b = 0; b < t->B; b++)
        for (int64_t h = t->hb; h < t->he; h++) {
            const int64_t hk = kv_of(t, h);
            const double fq = mq ? mq[b * t->Hq + h] : 1.0, fk = mk ? mk[b * t->Hkv + hk] : 1.0,
                         fv = mv ? mv[b * t->Hkv + hk] : 1.0;
            const double al = scale * fq * fk / log(2.0); /* base 2 */
            for (int64_t i = 0; i < t->Sq; i++) {
                int64_t nvis = t->Skv;
                if (t->causal) {
                    const int64_t last = t->qo + i - t->ko + 1; /* keys < last */
                    nvis = last < 0 ? 0 : last < t->Skv ? last : t->Skv;
                }
                double *o = out + ((b * t->Sq + i) * t->Hq + h) * D;
                double *ls = lse + (b * t->Sq + i) * t->Hq + h;
                double *sl = slack ? slack + ((b * t->Sq + i) * t->Hq + h) * D : NULL;
                if (sl)
                    for (int64_t d = 0; d < D; d++)
                        sl[d] = 0;
                if (nvis == 0) {
                    for (int64_t d = 0; d < D; d++)
                        o[d] = 0;
                    *ls = -INFINITY;
                    continue;
                }
                const float *qr = q + ((b * t->Sq + i) * t->Hq + h) * D;
                double m = -INFINITY, run = -INFINITY;
                int nan = 0;
                for (int64_t j = 0; j < nvis; j++) {
                    const float *kr = k + ((b * t->Skv + j) * t->Hkv + hk) * D;
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)qr[d] * kr[d];
                    x[j] = s * al;
                    if (isnan(x[j]))
                        nan = 1;
                    else if (x[j] > m)
                        m = x[j];
                }
                /* running max per tile (p8) */
                for (int64_t j = 0; j < nvis; j++) {
                    if (j % BC8 == 0) {
                        for (int64_t jj = j; jj < nvis && jj < j + BC8; jj++)
                            if (x[jj] > run)
                                run = x[jj];
                    }
                    mJ[j] = run;
                }
                double l = 0;
                for (int64_t j = 0; j < nvis; j++)
                    l += exp2(x[j] - m);
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0, sa = 0;
                    for (int64_t j = 0; j < nvis; j++) {
                        double w;
                        const double vj = v[((b * t->Skv + j) * t->Hkv + hk) * D + d];
                        if (p8) {
                            const float pf = (float)exp2(x[j] - mJ[j]) * 256.0f;
                            const uint8_t c8 = wf_fp8_e4m3_from_f32(pf);
                            const double r = wf_fp8_e4m3_to_f32(c8);
                            w = r / 256.0 * exp2(mJ[j] - m);
                            /* the e4m3 neighbours of r: a P within 4e-3 of
                             * their midpoint may round to either */
                            const double up = wf_fp8_e4m3_to_f32((uint8_t)(c8 + 1)),
                                         dn = c8 ? wf_fp8_e4m3_to_f32((uint8_t)(c8 - 1)) : 0;
                            const double step = fmax(up - r, r - dn);
                            if (sl && (fabs(pf - (r + up) / 2) <= 4e-3 * pf ||
                                       fabs(pf - (r + dn) / 2) <= 4e-3 * pf))
                                sa += step / 256.0 * exp2(mJ[j] - m) * fabs(vj);
                        } else {
                            w = exp2(x[j] - m);
                        }
                        acc += w * vj;
                    }
                    o[d] = nan ? NAN : acc / l * fv;
                    if (sl)
                        sl[d] = sa / l * fv;
                }
                *ls = nan ? NAN : (m + log2(l)) * log(2.0);
            }
        }
    free(x);
    free(mJ);
}

/* fp8.h's quantization of n_heads heads of a (B, S, H, D) f32 tensor in
 * place (x <- e4m3(x * 448 / amax) as a float), scales (B, H) out; the
 * other heads untouched. */
static void quantize_heads(float *x, int64_t B, int64_t S, int64_t H, int64_t D, int64_t h0,
                           int64_t h1, float *scale)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = h0; h < h1; h++) {
            float am = 0.f;
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++) {
                    const float a = fabsf(x[((b * S + s) * H + h) * D + d]);
                    if (isfinite(a) && a > am)
                        am = a;
                }
            const float f = wf_fp8_quant_factor(am);
            scale[b * H + h] = wf_fp8_scale(am);
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++) {
                    float *e = &x[((b * S + s) * H + h) * D + d];
                    *e = wf_fp8_e4m3_to_f32(wf_fp8_e4m3_from_f32(*e * f));
                }
        }
}

/* Runs case t on the GPU (fp8 or not) from host inputs in dt; out as f32
 * (B, Sq, Hq, D) and lse. */
static wf_status_t gpu_attn(const acase_t *t, int fp8, wf_dtype_t dt, wf_dtype_t odt,
                            const void *q, const void *k, const void *v, float *out, float *lse)
{
    const size_t nq = (size_t)(t->B * t->Sq * t->Hq * t->D),
                 nk = (size_t)(t->B * t->Skv * t->Hkv * t->D), nl = (size_t)(t->B * t->Sq * t->Hq);
    wf_attn_params_t p = params_of(t, dt, odt);
    p.fp8 = fp8 != 0;
    unsigned char *o = calloc(nq, 4);
    for (size_t i = 0; i < nl; i++)
        lse[i] = 12345.f;
    p.q = dev_copy(q, nq * dsz(dt));
    p.k = dev_copy(k, nk * dsz(dt));
    p.v = dev_copy(v, nk * dsz(dt));
    p.out = dev_copy(o, nq * dsz(odt));
    p.lse = dev_copy(lse, nl * 4);
    const size_t wsb = G->attention_workspace(&p);
    void *ws = NULL;
    if (wsb)
        CHECK_TRUE(G->dev_alloc(gctx, wsb, &ws) == WF_OK);
    wf_status_t st = WF_E_NO_MEMORY;
    if (p.q && p.k && p.v && p.out && p.lse && (ws || !wsb)) {
        if (fp8) /* the copies live in the workspace: none is refused */
            CHECK_TRUE(wsb > 0 && G->attention(gctx, &p, NULL) == WF_E_BAD_ARGUMENT);
        st = G->attention(gctx, &p, ws);
        if (st == WF_OK) {
            CHECK_TRUE(G->copy_d2h(gctx, o, p.out, nq * dsz(odt)) == WF_OK);
            CHECK_TRUE(G->copy_d2h(gctx, lse, p.lse, nl * 4) == WF_OK);
            st = G->synchronize(gctx);
        }
    }
    G->dev_reset(gctx);
    wf_convert_to_f32(out, o, odt, nq);
    free(o);
    return st;
}

/* Max |got - ref| over the head range (NaN: the same class or counted
 * bad), with bad counting those past atol + rtol |ref| (+ slack[i] when
 * slack is not NULL). */
static double cmp_range(const acase_t *t, const float *got, const double *ref, size_t per_head,
                        double atol, double rtol, const double *slack, size_t *bad)
{
    const size_t n = (size_t)(t->B * t->Sq * t->Hq) * per_head;
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t h = (int64_t)((i / per_head) % (size_t)t->Hq);
        if (h < t->hb || h >= t->he)
            continue;
        if (isnan(ref[i]) || isnan(got[i]) || isinf(ref[i]) || isinf(got[i])) {
            if (!(isnan(ref[i]) && isnan(got[i])) && (double)got[i] != ref[i])
                (*bad)++;
            continue;
        }
        const double e = fabs((double)got[i] - ref[i]);
        if (!(e <= atol + rtol * fabs(ref[i]) + (slack ? slack[i] : 0)))
            (*bad)++;
        if (e > m)
            m = e;
    }
    return m;
}

static void run_fp8_case(const acase_t *t, wf_dtype_t dt, wf_dtype_t odt, poke_fn poke)
{
    const size_t nq = (size_t)(t->B * t->Sq * t->Hq * t->D),
                 nk = (size_t)(t->B * t->Skv * t->Hkv * t->D), nl = (size_t)(t->B * t->Sq * t->Hq);
    float *f = malloc((nq + 2 * nk) * sizeof *f), *x = malloc((nq + 2 * nk) * sizeof *x);
    unsigned char *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
    float *sq = calloc((size_t)(t->B * t->Hq), 4), *sk = calloc((size_t)(t->B * t->Hkv), 4),
          *sv = calloc((size_t)(t->B * t->Hkv), 4);
    double *r8 = malloc(nq * 8), *rf = malloc(nq * 8), *l8 = malloc(nl * 8), *lf = malloc(nl * 8),
           *slk = malloc(nq * 8);
    float *o8 = malloc(nq * 4), *ob = malloc(nq * 4), *g8 = malloc(nl * 4), *gb = malloc(nl * 4);
    fill_inputs(t, dt, poke, f, q, k, v);
    /* the dtype's values (what both paths read) */
    wf_convert_to_f32(x, q, dt, nq);
    wf_convert_to_f32(x + nq, k, dt, nk);
    wf_convert_to_f32(x + nq + nk, v, dt, nk);
    const float fscale = 1.0f / sqrtf((float)t->D);
    ref_attn(t, (double)fscale, x, x + nq, x + nq + nk, NULL, NULL, NULL, 0, rf, lf, NULL);
    /* quantized as the device does (the K/V heads the range reads) */
    const int64_t kb = t->he > t->hb ? kv_of(t, t->hb) : 0,
                  ke = t->he > t->hb ? kv_of(t, t->he - 1) + 1 : 0;
    quantize_heads(x, t->B, t->Sq, t->Hq, t->D, t->hb, t->he, sq);
    quantize_heads(x + nq, t->B, t->Skv, t->Hkv, t->D, kb, ke, sk);
    quantize_heads(x + nq + nk, t->B, t->Skv, t->Hkv, t->D, kb, ke, sv);
    ref_attn(t, (double)fscale, x, x + nq, x + nq + nk, sq, sk, sv, 1, r8, l8, slk);
    const wf_status_t s8 = gpu_attn(t, 1, dt, odt, q, k, v, o8, g8);
    const wf_status_t sb = gpu_attn(t, 0, dt, odt, q, k, v, ob, gb);
    CHECK_TRUE(s8 == WF_OK && sb == WF_OK);
    size_t bad = 0, ignore = 0;
    const double rtol = odt == WF_DTYPE_BF16 ? 1.0 / 256 : odt == WF_DTYPE_F16 ? 1.0 / 2048 : 0;
    const double e8 = cmp_range(t, o8, r8, (size_t)t->D, 4e-3, rtol, slk, &bad);
    const double el = cmp_range(t, g8, l8, 1, 1e-2, 0, NULL, &bad);
    const double e8f = cmp_range(t, o8, rf, (size_t)t->D, 1e9, 0, NULL, &ignore);
    const double ebf = cmp_range(t, ob, rf, (size_t)t->D, 1e9, 0, NULL, &ignore);
    printf("  fp8%s B%lld Sq%lld Skv%lld H%lld/%lld D%lld heads[%lld,%lld) causal%d "
           "off%lld/%lld grp%lld dt%d out%d: vs fp64 on quantized (P rounding modelled) "
           "%.2e, lse %.2e; vs fp64: fp8 %.2e, %s %.2e%s\n",
           poke ? " (non-finite)" : "", (long long)t->B, (long long)t->Sq, (long long)t->Skv,
           (long long)t->Hq, (long long)t->Hkv, (long long)t->D, (long long)t->hb,
           (long long)t->he, t->causal, (long long)t->qo, (long long)t->ko, (long long)t->grp,
           dt, odt, e8, el, e8f, dt == WF_DTYPE_BF16 ? "bf16" : dt == WF_DTYPE_F16 ? "f16" : "f32",
           ebf, bad ? "  FAIL" : "");
    CHECK_TRUE(bad == 0);
    free(f); free(x); free(q); free(k); free(v); free(sq); free(sk); free(sv);
    free(r8); free(rf); free(l8); free(lf); free(slk); free(o8); free(ob); free(g8); free(gb);
}

static void test_fp8(void)
{
    if (!G->attention_fp8_ok || !G->attention_fp8_ok(0)) {
        /* refused, before anything runs */
        wf_attn_params_t p = {0};
        void *x = NULL;
        CHECK_TRUE(G->dev_alloc(gctx, 1 << 20, &x) == WF_OK);
        p.B = 1; p.Sq = p.Skv = 4; p.Hq = p.Hkv = 1; p.D = 64; p.h_end = 1; p.scale = 1;
        p.q = p.k = p.v = p.out = x;
        p.fp8 = true;
        CHECK_TRUE(G->attention(gctx, &p, x) == WF_E_UNSUPPORTED);
        G->dev_reset(gctx);
        printf("  fp8: not on this device (attention_fp8_ok false): refused with "
               "WF_E_UNSUPPORTED\n");
        return;
    }
    static const wf_dtype_t dts[] = {WF_DTYPE_BF16, WF_DTYPE_F16, WF_DTYPE_F32};
    for (size_t c = 0; c < ATTN_FP8_CASES; c++)
        for (int d = 0; d < 3; d++)
            run_fp8_case(&attn_cases[c], dts[d], dts[(d + c) % 3], NULL);
    /* non-finite: a NaN in q poisons its row; +inf in q is NaN in e4m3
     * (fp8.h), so its row is NaN too; a NaN in k every row that sees it */
    const acase_t nf = {1, 130, 130, 2, 1, 64, 0, 2, 0, 0, 0, 0, 0, 0};
    run_fp8_case(&nf, WF_DTYPE_BF16, WF_DTYPE_F32, poke_q_nan);
    run_fp8_case(&nf, WF_DTYPE_F32, WF_DTYPE_F32, poke_q_inf);
    run_fp8_case(&nf, WF_DTYPE_F16, WF_DTYPE_F32, poke_k_nan);
}


static void test_merge(void)
{
    static const wf_dtype_t rd[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    const int64_t rows = 1000, D = 128;
    size_t n = (size_t)(rows * D);
    float *ao = malloc(n * 4), *po = malloc(n * 4), *al = malloc(rows * 4), *pl = malloc(rows * 4);
    float *go = malloc(n * 4), *gl = malloc(rows * 4);
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < n; i++) {
            ao[i] = frand();
            po[i] = frand();
        }
        /* infinities beside finite elements: merged, a finite and an
         * infinite element or two equal infinities give the infinity, +inf
         * with -inf NaN, as on the host */
        for (size_t i = 0; i < n; i += 37)
            ao[i] = INFINITY;
        for (size_t i = 0; i < n; i += 53)
            po[i] = i % 2 ? -INFINITY : INFINITY;
        for (int64_t i = 0; i < rows; i++) {
            al[i] = i % 7 == 0 ? -INFINITY : 3 * frand();
            pl[i] = i % 5 == 0 ? -INFINITY : 3 * frand();
        }
        float *dao = dev_copy(ao, n * 4), *dal = dev_copy(al, rows * 4);
        float *dpo = dev_copy(po, n * 4), *dpl = dev_copy(pl, rows * 4);
        CHECK_TRUE(G->lse_merge(gctx, dao, dal, dpo, dpl, rows, D, rd[r]) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, go, dao, n * 4) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, gl, dal, rows * 4) == WF_OK);
        CHECK_TRUE(G->synchronize(gctx) == WF_OK);
        G->dev_reset(gctx);
        wf_lse_merge_rows(ao, al, po, pl, rows, D, rd[r]);
        double me = 0, ml = 0;
        size_t bad = 0;
        double tol = rd[r] == WF_DTYPE_BF16 ? 8e-3 : rd[r] == WF_DTYPE_F16 ? 1e-3 : 1e-5;
        size_t infs = 0;
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(ao[i]) || !isfinite(go[i])) {
                infs += isinf(ao[i]) != 0;
                bad += isnan(ao[i]) ? !isnan(go[i]) : go[i] != ao[i];
                continue;
            }
            double e = fabs((double)go[i] - ao[i]);
            me = e > me ? e : me;
            bad += !(e <= tol);
        }
        for (int64_t i = 0; i < rows; i++) {
            if (isinf(al[i]) || isinf(gl[i])) {
                bad += al[i] != gl[i];
                continue;
            }
            double e = fabs((double)gl[i] - al[i]);
            ml = e > ml ? e : ml;
            bad += !(e <= 1e-5 + 1e-5 * fabs(al[i]));
        }
        printf("  lse_merge round %d: max|out| err %.2e, max|lse| err %.2e, %zu infinite "
               "elements%s\n", rd[r], me, ml, infs, bad ? "  FAIL" : "");
        CHECK_TRUE(bad == 0);
        CHECK_TRUE(infs > 0);
    }
    free(ao); free(po); free(al); free(pl); free(go); free(gl);
}

/* Merge mode (backend.h wf_attn_params_t.merge): two ring
 * steps of one query block merged in the kernel's epilogue (final_out on
 * the second) against the same kernel writing partial buffers, merged by
 * lse_merge and converted by convert. The kernels' own outputs are the
 * same in both (same kernel, same inputs); the merge is the same code
 * (merge_epilogue.cuh) compiled into two kernels, so the difference is at
 * most FMA contraction: tolerance 4 f32 ulps of the larger value (+1e-7
 * absolute) without rounding, one unit of the merge dtype (2^-8 bf16,
 * 2^-11 f16, relative, +1e-6) with it; final_out one unit of its dtype
 * beside convert's; lse 1e-6 (+1e-6 relative); -inf rows (step 2's
 * offsets hide every key from the first rows) and untouched heads
 * exactly. */
typedef struct mcase {
    int64_t B, Sq, Hq, Hkv, D, hb, he;
    int64_t skv[2], qo, ko[2];
    int causal;
} mcase_t;

static double unit_of(wf_dtype_t d)
{
    return d == WF_DTYPE_BF16 ? 0x1p-8 : d == WF_DTYPE_F16 ? 0x1p-11 : 4 * 0x1p-24;
}

static void merge_mode_case(const mcase_t *t, wf_dtype_t dt, wf_dtype_t rdt, wf_dtype_t fdt,
                            const char *variant, bool fp8)
{
    const size_t nq = (size_t)(t->B * t->Sq * t->Hq * t->D), nl = (size_t)(t->B * t->Sq * t->Hq);
    float *hacc = malloc(nq * 4), *hl = malloc(nl * 4), *hz = calloc(nq, 4), *hinf = malloc(nl * 4);
    for (size_t i = 0; i < nl; i++)
        hinf[i] = -INFINITY;
    float *dacc[2], *dl[2]; /* [0]: kernel + lse_merge, [1]: merge mode */
    for (int w = 0; w < 2; w++) {
        dacc[w] = dev_copy(hz, nq * 4);
        dl[w] = dev_copy(hinf, nl * 4);
    }
    float *dpart = dev_copy(hz, nq * 4), *dpl = dev_copy(hinf, nl * 4);
    void *dfin[2] = {dev_copy(hz, nq * dsz(fdt)), dev_copy(hz, nq * dsz(fdt))};
    void *dq = NULL, *dk[2] = {NULL, NULL}, *dv[2] = {NULL, NULL};
    {
        float *f = malloc(nq * 4);
        unsigned char *b = malloc(nq * 4);
        for (size_t i = 0; i < nq; i++)
            f[i] = frand();
        wf_convert_from_f32(b, dt, f, nq);
        dq = dev_copy(b, nq * dsz(dt));
        for (int s = 0; s < 2; s++) {
            size_t nk = (size_t)(t->B * t->skv[s] * t->Hkv * t->D);
            float *g = malloc(nk * 4);
            unsigned char *c = malloc(nk * 4);
            for (size_t i = 0; i < nk; i++)
                g[i] = frand();
            wf_convert_from_f32(c, dt, g, nk);
            dk[s] = dev_copy(c, nk * dsz(dt));
            for (size_t i = 0; i < nk; i++)
                g[i] = frand();
            wf_convert_from_f32(c, dt, g, nk);
            dv[s] = dev_copy(c, nk * dsz(dt));
            free(g);
            free(c);
        }
        free(f);
        free(b);
    }
    CHECK_TRUE(dacc[0] && dacc[1] && dl[0] && dl[1] && dpart && dpl && dfin[0] && dfin[1] && dq &&
               dk[0] && dk[1] && dv[0] && dv[1]);
    for (int s = 0; s < 2; s++) {
        wf_attn_params_t p = {0};
        p.B = t->B; p.Sq = t->Sq; p.Skv = t->skv[s]; p.Hq = t->Hq; p.Hkv = t->Hkv; p.D = t->D;
        p.h_begin = t->hb; p.h_end = t->he; p.scale = 1.0f / sqrtf((float)t->D);
        p.causal = t->causal; p.q_offset = t->qo; p.kv_offset = t->ko[s];
        p.q = dq; p.k = dk[s]; p.v = dv[s];
        p.q_dtype = p.k_dtype = p.v_dtype = dt;
        p.out = dpart; p.out_dtype = WF_DTYPE_F32; p.lse = dpl;
        /* fp8: the e4m3 copies live in the workspace (the same quantized
         * inputs for both calls, so the kernel's own rows are the same) */
        p.fp8 = fp8;
        void *ws = NULL;
        size_t wsb = G->attention_workspace(&p);
        CHECK_TRUE(!wsb || G->dev_alloc(gctx, wsb, &ws) == WF_OK);
        CHECK_TRUE(G->attention(gctx, &p, ws) == WF_OK);
        /* rows outside the head range: part 0 / -inf, the merge keeps them */
        CHECK_TRUE(G->lse_merge(gctx, dacc[0], dl[0], dpart, dpl, (int64_t)nl, t->D, rdt) == WF_OK);
        p.out = dacc[1]; p.lse = dl[1];
        p.merge = true; p.merge_round = rdt;
        p.final_out = s == 1 ? dfin[1] : NULL; p.final_dtype = fdt;
        CHECK_TRUE(G->attention_merge_ok && G->attention_merge_ok(&p));
        CHECK_TRUE(G->attention(gctx, &p, ws) == WF_OK);
    }
    CHECK_TRUE(G->convert(gctx, dfin[0], fdt, dacc[0], WF_DTYPE_F32, nq) == WF_OK);
    float *a[2], *l[2], *fo[2];
    unsigned char *fb = malloc(nq * 4);
    for (int w = 0; w < 2; w++) {
        a[w] = malloc(nq * 4);
        l[w] = malloc(nl * 4);
        fo[w] = malloc(nq * 4);
        CHECK_TRUE(G->copy_d2h(gctx, a[w], dacc[w], nq * 4) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, l[w], dl[w], nl * 4) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, fb, dfin[w], nq * dsz(fdt)) == WF_OK);
        CHECK_TRUE(G->synchronize(gctx) == WF_OK);
        wf_convert_to_f32(fo[w], fb, fdt, nq);
    }
    G->dev_reset(gctx);
    size_t bad = 0, exact = 0, empty = 0;
    double me = 0, ml = 0;
    const double u = unit_of(rdt), uf = unit_of(fdt);
    for (size_t i = 0; i < nq; i++) {
        const double x = a[0][i], y = a[1][i];
        if (x != x || y != y) {
            bad += !(x != x && y != y);
            continue;
        }
        const double e = fabs(x - y);
        exact += e == 0;
        me = e > me ? e : me;
        bad += !(e <= u * fmax(fabs(x), fabs(y)) + (rdt == WF_DTYPE_F32 ? 1e-7 : 1e-6));
        const double f = fabs((double)fo[0][i] - fo[1][i]);
        bad += !(f <= uf * fmax(fabs(fo[0][i]), fabs(fo[1][i])) + 1e-6 ||
                 (fo[0][i] != fo[0][i] && fo[1][i] != fo[1][i]));
    }
    for (size_t i = 0; i < nl; i++) {
        if (isinf(l[0][i]) || isinf(l[1][i]) || l[0][i] != l[0][i] || l[1][i] != l[1][i]) {
            bad += !(l[0][i] == l[1][i] || (l[0][i] != l[0][i] && l[1][i] != l[1][i]));
            empty += l[0][i] == -INFINITY;
            continue;
        }
        const double e = fabs((double)l[0][i] - l[1][i]);
        ml = e > ml ? e : ml;
        bad += !(e <= 1e-6 + 1e-6 * fabs(l[0][i]));
    }
    printf("  merge mode [%s%s] B%lld Sq%lld H%lld/%lld D%lld heads[%lld,%lld) dt%d round%d "
           "final%d: %zu/%zu exact, max|out| diff %.2e, max|lse| diff %.2e, %zu empty rows%s\n",
           variant, fp8 ? " fp8" : "", (long long)t->B, (long long)t->Sq, (long long)t->Hq, (long long)t->Hkv,
           (long long)t->D, (long long)t->hb, (long long)t->he, dt, rdt, fdt, exact, nq, me, ml,
           empty, bad ? "  FAIL" : "");
    CHECK_TRUE(bad == 0);
    CHECK_TRUE(empty > 0); /* the case has masked / untouched rows, as it says */
    for (int w = 0; w < 2; w++) {
        free(a[w]);
        free(l[w]);
        free(fo[w]);
    }
    free(fb);
    free(hacc);
    free(hl);
    free(hz);
    free(hinf);
}

static void test_attention_merge(const char *variant)
{
    static const mcase_t cases[] = {
        /* step 2's keys start at 150: rows before it see nothing there */
        {2, 200, 4, 2, 128, 1, 4, {130, 90}, 100, {0, 150}, 1},
        {1, 333, 6, 3, 64, 1, 6, {200, 257}, 0, {0, 200}, 1},
        /* non-causal, heads [2, 4) only: the others stay 0 / -inf */
        {2, 129, 4, 4, 64, 2, 4, {64, 77}, 0, {0, 0}, 0},
    };
    static const wf_dtype_t dts[] = {WF_DTYPE_BF16, WF_DTYPE_F16, WF_DTYPE_F32};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 3; d++)
            merge_mode_case(&cases[c], dts[d], dts[(d + c) % 3], dts[(d + 1) % 3], variant,
                            false);
    /* the fp8 kernel's merge epilogue (its choice does not depend on
     * the attention kernel: once, beside the default kernel) */
    if (strcmp(variant, "wgmma") == 0 && G->attention_fp8_ok && G->attention_fp8_ok(0))
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            merge_mode_case(&cases[c], dts[c % 2], dts[(c + 1) % 3], dts[c % 3], variant, true);
    /* refusals: merge into a 16-bit out, and without lse */
    wf_attn_params_t p = {0};
    void *x = NULL;
    CHECK_TRUE(G->dev_alloc(gctx, 1 << 16, &x) == WF_OK);
    p.B = 1; p.Sq = p.Skv = 4; p.Hq = p.Hkv = 1; p.D = 64; p.h_end = 1; p.scale = 1;
    p.q = p.k = p.v = p.out = x; p.q_dtype = p.k_dtype = p.v_dtype = WF_DTYPE_BF16;
    p.out_dtype = WF_DTYPE_BF16; p.lse = (float *)x; p.merge = true;
    CHECK_TRUE(!G->attention_merge_ok(&p));
    CHECK_TRUE(G->attention(gctx, &p, NULL) == WF_E_BAD_ARGUMENT);
    p.out_dtype = WF_DTYPE_F32; p.lse = NULL;
    CHECK_TRUE(G->attention(gctx, &p, NULL) == WF_E_BAD_ARGUMENT);
    p.fp8 = true; /* the fp8 kernel merges too */
    CHECK_TRUE(G->attention_merge_ok(&p));
    G->dev_reset(gctx);
}

/* Merge mode under every kernel (a context per cuda_attention value; f32
 * inputs take the mma.sync kernel under any); the run's context comes
 * back afterwards. */
static void test_attention_merge_variants(void)
{
    static const char *const vars[] = {"mma",         "wgmma",    "wgmma-pipe", "ws",
                                       "ws-pp-store", "ws-pp-mc", "ws-full",    "ws-full-mc"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        G->ctx_destroy(&gctx);
        if (tuned_ctx(0, (uint64_t)2 << 30, vars[i], false, &gctx) != WF_OK) {
            printf("  merge mode [%s]: ctx_new failed  FAIL\n", vars[i]);
            failed++;
            continue;
        }
        test_attention_merge(vars[i]);
    }
    G->ctx_destroy(&gctx);
    CHECK_TRUE(tuned_ctx(0, (uint64_t)2 << 30, run_kernel, false, &gctx) == WF_OK);
}

static void test_convert(void)
{
    const size_t n = 100003;
    float *f = malloc(n * 4), *back = malloc(n * 4);
    uint16_t *h = malloc(n * 2), *want = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        f[i] = frand() * 1000.f;
    static const wf_dtype_t d2[] = {WF_DTYPE_F16, WF_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        float *df = dev_copy(f, n * 4);
        void *dh = NULL, *db = NULL;
        CHECK_TRUE(G->dev_alloc(gctx, n * 2, &dh) == WF_OK &&
                   G->dev_alloc(gctx, n * 4, &db) == WF_OK);
        CHECK_TRUE(G->convert(gctx, dh, d2[k], df, WF_DTYPE_F32, n) == WF_OK);
        CHECK_TRUE(G->convert(gctx, db, WF_DTYPE_F32, dh, d2[k], n) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, h, dh, n * 2) == WF_OK);
        CHECK_TRUE(G->copy_d2h(gctx, back, db, n * 4) == WF_OK);
        CHECK_TRUE(G->synchronize(gctx) == WF_OK);
        G->dev_reset(gctx);
        wf_convert_from_f32(want, d2[k], f, n);
        CHECK_TRUE(memcmp(h, want, n * 2) == 0);
        float *wb = malloc(n * 4);
        wf_convert_to_f32(wb, want, d2[k], n);
        CHECK_TRUE(memcmp(back, wb, n * 4) == 0);
        free(wb);
    }
    printf("  convert: f32 <-> f16 / bf16 bit-exact against tensor.c\n");
    free(f); free(back); free(h); free(want);
}

/* ---- model ops ---------------------------------------------------------------- */

static float *hrand(size_t n, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

static float *hfill(size_t n, float value)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = value;
    return v;
}

/* Device buffer -> host, waiting for the stream. */
static void fetch(void *h, const void *d, size_t bytes)
{
    CHECK_TRUE(G->copy_d2h(gctx, h, d, bytes) == WF_OK);
    CHECK_TRUE(G->synchronize(gctx) == WF_OK);
}

/* got against ref over n floats (padding included: equal sentinels give
 * 0): |got - ref| <= atol + rtol |ref|, atol = rtol * max |ref| (or
 * atol_abs when >= 0). Prints one line; returns the failures. */
/* The fused GELU's own error, per unit of |x| (x the pre-activation).
 * NVIDIA documents neither the form nor the accuracy of
 * CUBLASLT_EPILOGUE_GELU: the cuBLAS documentation of cublasLtEpilogue_t
 * (and cublasLt.h) says only "apply GELU point-wise transform to the
 * results (x:=GELU(x))". So the bound is that of the least accurate tanh
 * an epilogue may use, the hardware's tanh.approx.f32, whose relative
 * error the PTX ISA bounds by about 2^-11 (its "tanh" entry). In
 * 0.5 x (1 + tanh u) a tanh off by e |tanh u| moves the result by at most
 * 0.5 |x| e; e is taken as 2^-10, twice the PTX bound, for the rounding
 * of u and of the products around it. On top of the f32 product's own
 * tolerance; it also admits the erf form (4.7e-4 from the tanh form at
 * most, near |x| = 2, within 0.5 * 2^-10 * |x| there), which the form
 * check reports by name. */
#define GELU_EPI_SLACK (0.5 * 0x1p-10)

/* |got - ref| <= atol + rtol |ref| (atol = atol_abs, or rtol * max |ref|
 * when atol_abs < 0) + slack[i] (per element, absolute; NULL: none). */
static size_t compare_slack(const char *what, const float *ref, const float *got, size_t n,
                            double rtol, double atol_abs, const double *slack)
{
    double mx = 0, me = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    double atol = atol_abs >= 0 ? atol_abs : rtol * mx;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (!(e <= atol + rtol * fabs(ref[i]) + (slack ? slack[i] : 0.0)))
            bad++;
        if (e > me || e != e)
            me = e;
    }
    printf("  %s: max err %.2e (max |ref| %.2e)%s\n", what, me, mx, bad ? "  FAIL" : "");
    CHECK_TRUE(bad == 0);
    return bad;
}

static size_t compare(const char *what, const float *ref, const float *got, size_t n,
                      double rtol, double atol_abs)
{
    return compare_slack(what, ref, got, n, rtol, atol_abs, NULL);
}

typedef struct lcase {
    int64_t rows, out, ldx_pad, ldy_pad;
    uint32_t nwb;
    int64_t wbw[4];
    int64_t gap;        /* columns between blocks in the full weight (misaligns) */
    int bias, bias_off; /* bias present; offset in floats (1: not 16-byte aligned) */
    wf_act_t act;
} lcase_t;

/* One linear on both backends; g = the GPU context to use. */
static void linear_case(wf_backend_ctx_t *g, const lcase_t *t, wf_dtype_t wdt, const char *tag)
{
    int64_t in = 0;
    for (uint32_t k = 0; k < t->nwb; k++)
        in += t->wbw[k];
    /* gap 0: weight rows and blocks 16-byte aligned where in allows;
     * gap > 0: odd starts and an odd ldw (cuBLASLt told the alignment). */
    const int64_t ldw = in + (int64_t)t->nwb * t->gap + (t->gap ? 3 : 8), ldx = in + t->ldx_pad,
                  ldy = t->out + t->ldy_pad;
    const size_t es = dsz(wdt), nx = (size_t)(t->rows * ldx), ny = (size_t)(t->rows * ldy);
    const size_t nw = (size_t)(t->out * ldw);
    float *x = hrand(nx, 1.0f), *wf = hrand(nw, 0.5f), *bias = hrand((size_t)t->out + 4, 1.0f);
    float *yc = hfill(ny, 777.f), *yg = hfill(ny, 777.f);
    unsigned char *w = malloc(nw * es);
    wf_convert_from_f32(w, wdt, wf, nw);
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = t->rows; p.in = in; p.out = t->out;
    p.ldx = ldx; p.ldy = ldy; p.ldw = ldw;
    p.w_dtype = wdt; p.nwb = t->nwb; p.act = t->act;
    int64_t starts[4], col = t->gap; /* block k at column starts[k] of the full weight */
    for (uint32_t k = 0; k < t->nwb; k++) {
        starts[k] = col;
        p.wbw[k] = t->wbw[k];
        col += t->wbw[k] + t->gap;
    }
    /* CPU */
    p.x = x; p.y = yc;
    p.bias = t->bias ? bias + t->bias_off : NULL;
    for (uint32_t k = 0; k < t->nwb; k++)
        p.wb[k] = w + (size_t)starts[k] * es;
    size_t cws = C->linear_workspace(&p);
    void *cw = cws ? aligned_alloc(64, (cws + 63) / 64 * 64) : NULL;
    CHECK_TRUE(C->linear(cctx, &p, cw) == WF_OK);
    /* f32 weights with GELU: the epilogue's own error on top of the f32
     * tolerance (GELU_EPI_SLACK |x|, x the CPU's pre-activation) */
    double *slack = NULL;
    if (wdt == WF_DTYPE_F32 && t->act == WF_ACT_GELU_TANH) {
        float *pre = hfill(ny, 0.f);
        slack = calloc(ny, sizeof *slack);
        p.y = pre;
        p.act = WF_ACT_NONE;
        CHECK_TRUE(C->linear(cctx, &p, cw) == WF_OK);
        for (size_t i = 0; i < ny; i++)
            slack[i] = GELU_EPI_SLACK * fabs((double)pre[i]);
        p.y = yc;
        p.act = t->act;
        free(pre);
    }
    free(cw);
    /* GPU */
    float *dx = dev_copy(x, nx * 4), *dy = dev_copy(yg, ny * 4);
    unsigned char *dw = dev_copy(w, nw * es);
    float *db = dev_copy(bias, ((size_t)t->out + 4) * 4);
    p.x = dx; p.y = dy;
    p.bias = t->bias ? db + t->bias_off : NULL;
    for (uint32_t k = 0; k < t->nwb; k++)
        p.wb[k] = dw + (size_t)starts[k] * es;
    CHECK_TRUE(G->synchronize(gctx) == WF_OK); /* the copies ran on gctx's stream; g may differ */
    size_t gws = G->linear_workspace(&p);
    CHECK_TRUE(gws == (wdt == WF_DTYPE_F32 ? 0 : ((size_t)(t->rows * in * 2) + 255) / 256 * 256));
    void *ws = NULL;
    if (gws)
        CHECK_TRUE(G->dev_alloc(g, gws, &ws) == WF_OK);
    CHECK_TRUE(G->linear(g, &p, ws) == WF_OK);
    CHECK_TRUE(G->copy_d2h(g, yg, dy, ny * 4) == WF_OK);
    CHECK_TRUE(G->synchronize(g) == WF_OK);
    char what[160];
    snprintf(what, sizeof what,
             "linear%s w%d rows %lld in %lld out %lld blocks %u gap %lld bias %d%s act %d", tag,
             wdt, (long long)t->rows, (long long)in, (long long)t->out, t->nwb,
             (long long)t->gap, t->bias, t->bias_off ? " (unaligned)" : "", t->act);
    compare_slack(what, yc, yg, ny, wdt == WF_DTYPE_F32 ? 1e-5 : 1e-2, -1, slack);
    free(slack);
    free(x); free(wf); free(bias); free(yc); free(yg); free(w);
}

static void test_linear(void)
{
    NEED_CPU(linear);
    static const lcase_t cases[] = {
        {64, 96, 0, 0, 1, {128}, 0, 1, 0, WF_ACT_NONE},
        {77, 50, 5, 3, 1, {72}, 0, 1, 0, WF_ACT_GELU_TANH},   /* strided, odd sizes */
        {33, 64, 0, 8, 2, {40, 24}, 5, 1, 0, WF_ACT_SILU},    /* blocks with gaps */
        {128, 256, 16, 0, 4, {64, 64, 32, 96}, 0, 1, 0, WF_ACT_GELU_TANH},
        {9, 31, 1, 1, 3, {17, 9, 6}, 1, 1, 1, WF_ACT_GELU_TANH}, /* misaligned everything */
        {1, 8, 0, 0, 1, {8}, 0, 0, 0, WF_ACT_GELU_TANH},      /* one row, no bias */
        {300, 3072, 0, 0, 1, {256}, 0, 1, 0, WF_ACT_NONE},    /* a FLUX-like shape */
    };
    static const wf_dtype_t dts[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 3; d++) {
            linear_case(gctx, &cases[c], dts[d], "");
            G->dev_reset(gctx);
        }
    /* The same with GELU kept out of the epilogue (a kernel applies it). */
    wf_backend_ctx_t *k = NULL;
    CHECK_TRUE(tuned_ctx(0, (uint64_t)256 << 20, run_kernel, true, &k) == WF_OK);
    if (k) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            if (cases[c].act == WF_ACT_GELU_TANH)
                for (int d = 0; d < 3; d++) {
                    /* linear_case allocates the inputs from gctx, the workspace from k */
                    linear_case(k, &cases[c], dts[d], " (GELU kernel)");
                    G->dev_reset(gctx);
                    G->dev_reset(k);
                }
        G->ctx_destroy(&k);
    }
    /* rows 0 is a no-op; bad params are refused. */
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.in = 8; p.out = 4; p.ldx = 8; p.ldy = 4; p.ldw = 8; p.nwb = 1; p.wbw[0] = 8;
    p.w_dtype = WF_DTYPE_BF16;
    CHECK_TRUE(G->linear(gctx, &p, NULL) == WF_OK);
    p.rows = 2;
    CHECK_TRUE(G->linear(gctx, &p, NULL) == WF_E_BAD_ARGUMENT); /* NULL pointers */
    CHECK_TRUE(G->linear(NULL, &p, NULL) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->linear(gctx, NULL, NULL) == WF_E_BAD_ARGUMENT);
}

/* cuBLASLt's fused GELU against the tanh form the CPU backend computes:
 * the pre-activations of an f32 linear (act NONE) through both forms on
 * the host, against the fused result; each element within 2e-5 (the f32
 * product) + GELU_EPI_SLACK |x| of the tanh form. Which form the epilogue
 * is nearer (root mean square) is printed by name: the two differ by up
 * to 4.7e-4 around |x| ~ 2. No CPU backend needed. */
static void test_gelu_form(void)
{
    const int64_t rows = 64, in = 32, out = 128;
    float *x = hrand((size_t)(rows * in), 1.0f), *w = hrand((size_t)(out * in), 0.4f);
    float *bias = hrand((size_t)out, 1.0f);
    float *pre = malloc((size_t)(rows * out) * 4), *got = malloc((size_t)(rows * out) * 4);
    float *dx = dev_copy(x, (size_t)(rows * in) * 4), *dw = dev_copy(w, (size_t)(out * in) * 4);
    float *db = dev_copy(bias, (size_t)out * 4), *dy = NULL;
    CHECK_TRUE(G->dev_alloc(gctx, (size_t)(rows * out) * 4, (void **)&dy) == WF_OK);
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = rows; p.in = in; p.out = out; p.x = dx; p.ldx = in;
    p.w_dtype = WF_DTYPE_F32; p.ldw = in; p.nwb = 1; p.wb[0] = dw; p.wbw[0] = in;
    p.bias = db; p.y = dy; p.ldy = out;
    CHECK_TRUE(G->linear(gctx, &p, NULL) == WF_OK);
    fetch(pre, dy, (size_t)(rows * out) * 4);
    p.act = WF_ACT_GELU_TANH;
    CHECK_TRUE(G->linear(gctx, &p, NULL) == WF_OK);
    fetch(got, dy, (size_t)(rows * out) * 4);
    double et = 0, ee = 0, st = 0, se = 0, span = 0;
    int64_t over = 0;
    for (int64_t i = 0; i < rows * out; i++) {
        double a = pre[i];
        double gt = 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
        double ge = 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
        double d1 = fabs(got[i] - gt), d2 = fabs(got[i] - ge);
        et = d1 > et ? d1 : et;
        ee = d2 > ee ? d2 : ee;
        st += d1 * d1;
        se += d2 * d2;
        over += !(d1 <= 2e-5 + GELU_EPI_SLACK * fabs(a));
        span = fabs(a) > span ? fabs(a) : span;
    }
    printf("  fused GELU: max |gpu - tanh form| %.2e, max |gpu - erf form| %.2e (|x| up to "
           "%.1f), nearer the %s form; %lld beyond 2e-5 + %.2e |x| of the tanh form%s\n",
           et, ee, span, st <= se ? "tanh" : "erf", (long long)over, GELU_EPI_SLACK,
           over ? "  FAIL (cuda_gelu_epilogue = false applies GELU in a kernel)" : "");
    CHECK_TRUE(over == 0);
    G->dev_reset(gctx);
    free(x); free(w); free(bias); free(pre); free(got);
}

static void test_elementwise_ops(void)
{
    NEED_CPU(bias_act);
    NEED_CPU(act);
    NEED_CPU(add);
    const int64_t rows = 37, n = 300, ldy = 311;
    const size_t ny = (size_t)(rows * ldy);
    static const wf_act_t acts[] = {WF_ACT_NONE, WF_ACT_GELU_TANH, WF_ACT_SILU};
    for (int a = 0; a < 3; a++)
        for (int wb = 0; wb < 2; wb++) {
            float *y = hrand(ny, 6.0f), *b = hrand((size_t)n, 1.0f), *yg = malloc(ny * 4);
            float *dy = dev_copy(y, ny * 4), *dbias = dev_copy(b, (size_t)n * 4);
            CHECK_TRUE(C->bias_act(cctx, y, WF_DTYPE_F32, rows, n, ldy, wb ? b : NULL, acts[a],
                                   NULL, 0, WF_DTYPE_F32) == WF_OK);
            CHECK_TRUE(G->bias_act(gctx, dy, WF_DTYPE_F32, rows, n, ldy, wb ? dbias : NULL,
                                   acts[a], NULL, 0, WF_DTYPE_F32) == WF_OK);
            fetch(yg, dy, ny * 4);
            char what[64];
            snprintf(what, sizeof what, "bias_act act %d bias %d", acts[a], wb);
            compare(what, y, yg, ny, 1e-5, -1);
            G->dev_reset(gctx);
            free(y); free(b); free(yg);
        }
    const int64_t N = 100003;
    for (int a = 1; a < 3; a++)
        for (int inplace = 0; inplace < 2; inplace++) {
            float *src = hrand((size_t)N, 8.0f), *dc = hfill((size_t)N, 5.f), *dg = malloc((size_t)N * 4);
            float *ds = dev_copy(src, (size_t)N * 4), *dd = dev_copy(dc, (size_t)N * 4);
            if (inplace) {
                CHECK_TRUE(C->act(cctx, src, src, N, acts[a]) == WF_OK);
                CHECK_TRUE(G->act(gctx, ds, ds, N, acts[a]) == WF_OK);
                fetch(dg, ds, (size_t)N * 4);
                compare(acts[a] == WF_ACT_SILU ? "act silu in place" : "act gelu in place", src,
                        dg, (size_t)N, 1e-5, -1);
            } else {
                CHECK_TRUE(C->act(cctx, dc, src, N, acts[a]) == WF_OK);
                CHECK_TRUE(G->act(gctx, dd, ds, N, acts[a]) == WF_OK);
                fetch(dg, dd, (size_t)N * 4);
                compare(acts[a] == WF_ACT_SILU ? "act silu" : "act gelu", dc, dg, (size_t)N, 1e-5,
                        -1);
            }
            G->dev_reset(gctx);
            free(src); free(dc); free(dg);
        }
    {
        float *a = hrand((size_t)N, 3.f), *b = hrand((size_t)N, 3.f), *g = malloc((size_t)N * 4);
        float *da = dev_copy(a, (size_t)N * 4), *dbb = dev_copy(b, (size_t)N * 4);
        CHECK_TRUE(C->add(cctx, a, b, N) == WF_OK);
        CHECK_TRUE(G->add(gctx, da, dbb, N) == WF_OK);
        fetch(g, da, (size_t)N * 4);
        compare("add", a, g, (size_t)N, 0, 0); /* one f32 addition: exact */
        G->dev_reset(gctx);
        free(a); free(b); free(g);
    }
    CHECK_TRUE(G->act(gctx, NULL, NULL, 4, WF_ACT_SILU) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->act(gctx, (float *)8, (float *)8, 4, WF_ACT_NONE) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->act(gctx, (float *)8, (float *)8, -1, WF_ACT_SILU) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->add(gctx, NULL, NULL, 0) == WF_OK);
    CHECK_TRUE(G->add(gctx, NULL, NULL, 1) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->bias_act(gctx, (float *)8, WF_DTYPE_F32, 2, 8, 7, NULL, WF_ACT_SILU, NULL, 0,
                           WF_DTYPE_F32) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->bias_act(gctx, (float *)8, WF_DTYPE_F32, 2, 8, 8, NULL, (wf_act_t)5, NULL, 0,
                           WF_DTYPE_F32) == WF_E_BAD_ARGUMENT);
}

static void test_modln_gate(void)
{
    NEED_CPU(modln);
    NEED_CPU(gate_residual);
    static const int64_t Cs[] = {3072, 100, 33};
    for (int ci = 0; ci < 3; ci++)
        for (int inplace = 0; inplace < 2; inplace++) {
            const int64_t nb = 2, per = 37, W = Cs[ci], lds = W + 5, ldd = inplace ? lds : W + 2,
                          ldm = 6 * W;
            const size_t ns = (size_t)(nb * per * lds), nd = (size_t)(nb * per * ldd),
                         nm = (size_t)(nb * ldm);
            float *src = hrand(ns, 3.0f), *mod = hrand(nm, 0.5f);
            for (size_t i = 0; i < ns; i++)
                src[i] += 10.0f; /* an offset mean: the two-pass variance matters */
            float *dc = inplace ? src : hfill(nd, 777.f), *dg = malloc(nd * 4);
            float *ds = dev_copy(src, ns * 4), *dm = dev_copy(mod, nm * 4);
            float *dd = inplace ? ds : dev_copy(dc, nd * 4);
            wf_modln_params_t p = {nb, per, W, src, lds, dc, ldd, mod + 0 * W, mod + 1 * W, ldm,
                                   1e-6f, WF_DTYPE_F32};
            CHECK_TRUE(C->modln(cctx, &p) == WF_OK);
            p.src = ds; p.dst = dd; p.shift = dm; p.scale = dm + W;
            CHECK_TRUE(G->modln(gctx, &p) == WF_OK);
            fetch(dg, dd, nd * 4);
            char what[64];
            snprintf(what, sizeof what, "modln C %lld%s", (long long)W, inplace ? " in place" : "");
            compare(what, dc, dg, nd, 1e-5, -1);
            if (!inplace)
                free(dc);
            G->dev_reset(gctx);
            free(src); free(mod); free(dg);
        }
    /* strides off the float4 grid (the scalar kernel), then on it (the
     * float4 kernel) */
    for (int vec = 0; vec < 2; vec++) {
        const int64_t nb = 2, per = 19, W = vec ? 768 : 700, lds = vec ? 784 : 720,
                      ldy = vec ? 1024 : 705, ldg = 6 * W;
        const size_t ns = (size_t)(nb * per * lds), ny = (size_t)(nb * per * ldy),
                     ng = (size_t)(nb * ldg);
        float *S = hrand(ns, 2.f), *y = hrand(ny, 2.f), *gt = hrand(ng, 1.f), *Sg = malloc(ns * 4);
        float *dS = dev_copy(S, ns * 4), *dy = dev_copy(y, ny * 4), *dg = dev_copy(gt, ng * 4);
        CHECK_TRUE(C->gate_residual(cctx, S, lds, y, ldy, gt + 2 * W, ldg, nb, per, W) == WF_OK);
        CHECK_TRUE(G->gate_residual(gctx, dS, lds, dy, ldy, dg + 2 * W, ldg, nb, per, W) == WF_OK);
        fetch(Sg, dS, ns * 4);
        compare(vec ? "gate_residual (float4)" : "gate_residual", S, Sg, ns, 1e-6, -1);
        G->dev_reset(gctx);
        free(S); free(y); free(gt); free(Sg);
    }
    wf_modln_params_t bad = {1, 1, 8, NULL, 8, NULL, 8, NULL, NULL, 8, 1e-6f, WF_DTYPE_F32};
    CHECK_TRUE(G->modln(gctx, &bad) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->modln(gctx, NULL) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->gate_residual(gctx, (float *)8, 7, (float *)8, 8, (float *)8, 8, 1, 1, 8) ==
               WF_E_BAD_ARGUMENT);
}

static void test_head_norm_rope(void)
{
    NEED_CPU(head_norm_rope);
    static const int64_t Ds[] = {128, 64};
    for (int di = 0; di < 2; di++)
        for (int mode = 0; mode < 4; mode++) { /* bit 0: norm, bit 1: rope */
            const int64_t nb = 2, per = 23, L = 40, row0 = 9, H = 3, D = Ds[di];
            const int64_t lds = H * D + 7;
            const size_t ns = (size_t)(nb * per * lds), nd = (size_t)(nb * L * H * D),
                         nt = (size_t)(L * D);
            float *src = hrand(ns, 4.f), *nw = hrand((size_t)D, 1.f), *cs = hrand(nt, 1.f),
                  *sn = hrand(nt, 1.f);
            float *dc = hfill(nd, 777.f), *dg = malloc(nd * 4);
            float *dsrc = dev_copy(src, ns * 4), *dnw = dev_copy(nw, (size_t)D * 4);
            float *dcs = dev_copy(cs, nt * 4), *dsn = dev_copy(sn, nt * 4), *dd = dev_copy(dc, nd * 4);
            wf_headrope_params_t p = {nb, per, L, row0, H, D, src, lds, dc,
                                      mode & 1 ? nw : NULL, mode & 2 ? cs : NULL,
                                      mode & 2 ? sn : NULL, 1e-6f, WF_DTYPE_F32, WF_DTYPE_F32};
            CHECK_TRUE(C->head_norm_rope(cctx, &p) == WF_OK);
            p.src = dsrc; p.dst = dd; p.norm = mode & 1 ? dnw : NULL;
            p.cos = mode & 2 ? dcs : NULL; p.sin = mode & 2 ? dsn : NULL;
            CHECK_TRUE(G->head_norm_rope(gctx, &p) == WF_OK);
            fetch(dg, dd, nd * 4);
            char what[64];
            snprintf(what, sizeof what, "head_norm_rope D %lld norm %d rope %d", (long long)D,
                     mode & 1, mode >> 1);
            compare(what, dc, dg, nd, 1e-5, -1);
            G->dev_reset(gctx);
            free(src); free(nw); free(cs); free(sn); free(dc); free(dg);
        }
    wf_headrope_params_t bad = {1, 4, 3, 0, 1, 8, (float *)8, 8, (float *)8, NULL, NULL, NULL,
                                1e-6f, WF_DTYPE_F32, WF_DTYPE_F32};
    CHECK_TRUE(G->head_norm_rope(gctx, &bad) == WF_E_BAD_ARGUMENT); /* per > L - row0 */
}

/* n bf16 values of a device buffer, widened to f32 into h. */
static void fetch_bf16(float *h, const void *d, size_t n)
{
    uint16_t *t = malloc(n * 2);
    fetch(t, d, n * 2);
    wf_convert_to_f32(h, t, WF_DTYPE_BF16, n);
    free(t);
}

/* The low-precision activations (backend.h): a linear reading a bf16 x
 * in place and writing a bf16 y, modln / bias_act / head_norm_rope
 * writing bf16, each against the CPU backend's same call (which computes
 * in f32 and rounds once). A device value may round to the bf16
 * neighbour of the CPU's when the f32 results straddle a rounding
 * boundary: one bf16 step, 2^-7 relative, on top of each op's f32
 * tolerance (the linear's bf16-product 1e-2 as in test_linear). */
static void test_lowp_activations(void)
{
    NEED_CPU(linear);
    NEED_CPU(modln);
    NEED_CPU(head_norm_rope);
    NEED_CPU(bias_act);
    const double step = 0x1p-7;
    /* linear: bf16 weights, x, y; FLUX-like width, odd rows, strided x / y */
    for (int fx = 0; fx < 2; fx++) { /* fx 1: an f32 x (the rounding pass), bf16 y */
        const int64_t R = 77, IN = 3072, OUT = 96, LDX = IN + 8, LDY = OUT + 4;
        const size_t nx = (size_t)(R * LDX), nw = (size_t)(OUT * IN), ny = (size_t)(R * LDY);
        float *x = hrand(nx, 1.0f), *wf = hrand(nw, 0.05f), *bias = hrand((size_t)OUT, 1.0f);
        uint16_t *xh = malloc(nx * 2), *wh = malloc(nw * 2), *yh = malloc(ny * 2);
        wf_convert_from_f32(xh, WF_DTYPE_BF16, x, nx);
        wf_convert_from_f32(wh, WF_DTYPE_BF16, wf, nw);
        for (size_t i = 0; i < ny; i++)
            yh[i] = 0x7FC0; /* NaN: an element not written fails */
        wf_linear_params_t p;
        memset(&p, 0, sizeof p);
        p.rows = R; p.in = IN; p.out = OUT; p.ldx = LDX; p.ldy = LDY; p.ldw = IN;
        p.w_dtype = WF_DTYPE_BF16; p.nwb = 1; p.wbw[0] = IN; p.act = WF_ACT_GELU_TANH;
        p.x_dtype = fx ? WF_DTYPE_F32 : WF_DTYPE_BF16;
        p.y_dtype = WF_DTYPE_BF16;
        p.x = fx ? (const void *)x : (const void *)xh;
        p.wb[0] = wh; p.bias = bias; p.y = yh;
        CHECK_TRUE(C->linear(cctx, &p, NULL) == WF_OK);
        float *yc = malloc(ny * 4), *yg = malloc(ny * 4);
        wf_convert_to_f32(yc, yh, WF_DTYPE_BF16, ny);
        void *dx = fx ? dev_copy(x, nx * 4) : dev_copy(xh, nx * 2);
        void *dw = dev_copy(wh, nw * 2), *dy = dev_copy(yh, ny * 2);
        float *db = dev_copy(bias, (size_t)OUT * 4);
        p.x = dx; p.wb[0] = dw; p.bias = db; p.y = dy;
        size_t gws = G->linear_workspace(&p);
        CHECK_TRUE(gws == (fx ? ((size_t)(R * IN * 2) + 255) / 256 * 256 : 0));
        void *ws = NULL;
        if (gws)
            CHECK_TRUE(G->dev_alloc(gctx, gws, &ws) == WF_OK);
        CHECK_TRUE(G->linear(gctx, &p, ws) == WF_OK);
        fetch_bf16(yg, dy, ny);
        compare_slack(fx ? "linear f32 x -> bf16 y (GELU, bias)"
                         : "linear bf16 x -> bf16 y (GELU, bias)",
                      yc, yg, ny, 1e-2 + step, -1, NULL);
        G->dev_reset(gctx);
        free(x); free(wf); free(bias); free(xh); free(wh); free(yh); free(yc); free(yg);
    }
    /* modln into bf16 rows (C 3072, odd row stride) */
    {
        const int64_t nb = 2, per = 37, W = 3072, lds = W + 5, ldd = W + 2, ldm = 6 * W;
        const size_t ns = (size_t)(nb * per * lds), nd = (size_t)(nb * per * ldd),
                     nm = (size_t)(nb * ldm);
        float *src = hrand(ns, 3.0f), *mod = hrand(nm, 0.5f), *dc = malloc(nd * 4),
              *dg = malloc(nd * 4);
        uint16_t *hc = malloc(nd * 2);
        for (size_t i = 0; i < nd; i++)
            hc[i] = 0x7FC0;
        void *dd = dev_copy(hc, nd * 2);
        float *ds = dev_copy(src, ns * 4), *dm = dev_copy(mod, nm * 4);
        wf_modln_params_t p = {nb, per, W, src, lds, hc, ldd, mod, mod + W, ldm, 1e-6f,
                               WF_DTYPE_BF16};
        CHECK_TRUE(C->modln(cctx, &p) == WF_OK);
        wf_convert_to_f32(dc, hc, WF_DTYPE_BF16, nd);
        p.src = ds; p.dst = dd; p.shift = dm; p.scale = dm + W;
        CHECK_TRUE(G->modln(gctx, &p) == WF_OK);
        fetch_bf16(dg, dd, nd);
        compare("modln -> bf16", dc, dg, nd, 1e-5 + step, -1);
        G->dev_reset(gctx);
        free(src); free(mod); free(dc); free(dg); free(hc);
    }
    /* bias_act (GELU) from f32 rows into bf16 rows */
    {
        const int64_t R = 41, N = 12288, LDY = N + 3, LDD = N + 1;
        const size_t ny = (size_t)(R * LDY), nd = (size_t)(R * LDD);
        float *y = hrand(ny, 3.0f), *bias = hrand((size_t)N, 1.0f), *dc = malloc(nd * 4),
              *dg = malloc(nd * 4);
        uint16_t *hc = malloc(nd * 2);
        for (size_t i = 0; i < nd; i++)
            hc[i] = 0x7FC0;
        float *dy = dev_copy(y, ny * 4), *db = dev_copy(bias, (size_t)N * 4);
        void *dd = dev_copy(hc, nd * 2);
        CHECK_TRUE(C->bias_act(cctx, y, WF_DTYPE_F32, R, N, LDY, bias, WF_ACT_GELU_TANH, hc, LDD,
                               WF_DTYPE_BF16) == WF_OK);
        wf_convert_to_f32(dc, hc, WF_DTYPE_BF16, nd);
        CHECK_TRUE(G->bias_act(gctx, dy, WF_DTYPE_F32, R, N, LDY, db, WF_ACT_GELU_TANH, dd, LDD,
                               WF_DTYPE_BF16) == WF_OK);
        fetch_bf16(dg, dd, nd);
        compare("bias_act GELU -> bf16", dc, dg, nd, 1e-5 + step, -1);
        /* a bf16 y (a GEMM's bf16 output) in place */
        uint16_t *yh = malloc(ny * 2);
        float *yc = malloc(ny * 4), *yg = malloc(ny * 4);
        wf_convert_from_f32(yh, WF_DTYPE_BF16, y, ny);
        void *dyh = dev_copy(yh, ny * 2);
        CHECK_TRUE(C->bias_act(cctx, yh, WF_DTYPE_BF16, R, N, LDY, bias, WF_ACT_GELU_TANH, NULL,
                               0, WF_DTYPE_BF16) == WF_OK);
        wf_convert_to_f32(yc, yh, WF_DTYPE_BF16, ny);
        CHECK_TRUE(G->bias_act(gctx, dyh, WF_DTYPE_BF16, R, N, LDY, db, WF_ACT_GELU_TANH, NULL,
                               0, WF_DTYPE_BF16) == WF_OK);
        fetch_bf16(yg, dyh, ny);
        compare("bias_act GELU bf16 in place", yc, yg, ny, 1e-5 + step, -1);
        G->dev_reset(gctx);
        free(y); free(bias); free(dc); free(dg); free(hc); free(yh); free(yc); free(yg);
    }
    /* head_norm_rope into bf16 joint q (D 128, norm and rope) */
    {
        const int64_t nb = 2, per = 23, L = 40, row0 = 9, H = 3, D = 128, lds = H * D + 7;
        const size_t ns = (size_t)(nb * per * lds), nd = (size_t)(nb * L * H * D),
                     nt = (size_t)(L * D);
        float *src = hrand(ns, 4.f), *nw = hrand((size_t)D, 1.f), *cs = hrand(nt, 1.f),
              *sn = hrand(nt, 1.f), *dc = malloc(nd * 4), *dg = malloc(nd * 4);
        uint16_t *hc = calloc(nd, 2); /* rows outside [row0, row0 + per) stay 0 on both */
        float *dsrc = dev_copy(src, ns * 4), *dnw = dev_copy(nw, (size_t)D * 4);
        float *dcs = dev_copy(cs, nt * 4), *dsn = dev_copy(sn, nt * 4);
        void *dd = dev_copy(hc, nd * 2);
        wf_headrope_params_t p = {nb, per, L, row0, H, D, src, lds, hc, nw, cs, sn, 1e-6f,
                                  WF_DTYPE_BF16, WF_DTYPE_F32};
        CHECK_TRUE(C->head_norm_rope(cctx, &p) == WF_OK);
        wf_convert_to_f32(dc, hc, WF_DTYPE_BF16, nd);
        p.src = dsrc; p.dst = dd; p.norm = dnw; p.cos = dcs; p.sin = dsn;
        CHECK_TRUE(G->head_norm_rope(gctx, &p) == WF_OK);
        fetch_bf16(dg, dd, nd);
        compare("head_norm_rope -> bf16", dc, dg, nd, 1e-5 + step, -1);
        /* a bf16 src (a projection's bf16 output) */
        uint16_t *sh = malloc(ns * 2);
        wf_convert_from_f32(sh, WF_DTYPE_BF16, src, ns);
        void *dsh = dev_copy(sh, ns * 2);
        memset(hc, 0, nd * 2);
        p.src = sh; p.dst = hc; p.norm = nw; p.cos = cs; p.sin = sn;
        p.src_dtype = WF_DTYPE_BF16;
        CHECK_TRUE(C->head_norm_rope(cctx, &p) == WF_OK);
        wf_convert_to_f32(dc, hc, WF_DTYPE_BF16, nd);
        p.src = dsh; p.dst = dd; p.norm = dnw; p.cos = dcs; p.sin = dsn;
        CHECK_TRUE(G->head_norm_rope(gctx, &p) == WF_OK);
        fetch_bf16(dg, dd, nd);
        compare("head_norm_rope bf16 -> bf16", dc, dg, nd, 1e-5 + step, -1);
        free(sh);
        G->dev_reset(gctx);
        free(src); free(nw); free(cs); free(sn); free(dc); free(dg); free(hc);
    }
}

/* layer_norm (with affine) and rms_norm (whole rows, and split over two
 * "tp ranks" from the reduced sums) at Wan 14B's width, into f32 and into
 * bf16 rows (the cross-attention's nx, q and k), against the CPU's same
 * call: 1e-5 (f32 statistics against the CPU's double), bf16 one step
 * more (the f32 values may straddle a rounding boundary, as in
 * test_lowp_activations). */
static void test_row_norms(void)
{
    NEED_CPU(layer_norm);
    NEED_CPU(rms_norm);
    NEED_CPU(rms_sumsq);
    const double step = 0x1p-7;
    const int64_t R = 37, W = 5120, HALF = W / 2, lds = W + 5, ldd = W + 3;
    const size_t ns = (size_t)(R * lds), nd = (size_t)(R * ldd);
    float *src = hrand(ns, 3.0f), *w = hrand((size_t)W, 1.0f), *bi = hrand((size_t)W, 0.5f);
    for (size_t i = 0; i < ns; i++)
        src[i] += 10.0f; /* an offset mean: the two-pass variance matters */
    float *ds = dev_copy(src, ns * 4), *dw = dev_copy(w, (size_t)W * 4);
    float *dbi = dev_copy(bi, (size_t)W * 4), *dc = malloc(nd * 4), *dg = malloc(nd * 4);
    float *q0 = hfill((size_t)R, 0.f), *q1 = hfill((size_t)R, 0.f), *qs = hfill((size_t)R, 0.f);
    float *dq0 = dev_copy(q0, (size_t)R * 4), *dq1 = dev_copy(q1, (size_t)R * 4);
    /* the split's sums on each side: the CPU's double sums rounded, the
     * device's f32 ones, each all-reduced on the host */
    CHECK_TRUE(C->rms_sumsq(cctx, src, R, HALF, lds, q0) == WF_OK);
    CHECK_TRUE(C->rms_sumsq(cctx, src + HALF, R, HALF, lds, q1) == WF_OK);
    for (int64_t r = 0; r < R; r++)
        qs[r] = q0[r] + q1[r];
    CHECK_TRUE(G->rms_sumsq(gctx, ds, R, HALF, lds, dq0) == WF_OK);
    CHECK_TRUE(G->rms_sumsq(gctx, ds + HALF, R, HALF, lds, dq1) == WF_OK);
    fetch(q0, dq0, (size_t)R * 4);
    fetch(q1, dq1, (size_t)R * 4);
    for (int64_t r = 0; r < R; r++)
        q0[r] += q1[r];
    float *dqs = dev_copy(q0, (size_t)R * 4);
    for (int bf = 0; bf < 2; bf++) {
        const wf_dtype_t dt = bf ? WF_DTYPE_BF16 : WF_DTYPE_F32;
        const size_t eb = bf ? 2 : 4;
        void *hd = malloc(nd * eb);
        for (int op = 0; op < 3; op++) { /* layer_norm, rms_norm whole, rms_norm split */
            memset(hd, 0, nd * eb); /* columns past W stay 0 on both */
            void *dd = dev_copy(hd, nd * eb);
            if (op == 0) {
                wf_layernorm_params_t p = {R, W, src, lds, hd, ldd, w, bi, 1e-6f, dt};
                CHECK_TRUE(C->layer_norm(cctx, &p) == WF_OK);
                p.src = ds; p.dst = dd; p.weight = dw; p.bias = dbi;
                CHECK_TRUE(G->layer_norm(gctx, &p) == WF_OK);
            } else {
                for (int k = 0; k < (op == 1 ? 1 : 2); k++) {
                    const int64_t c0 = k * HALF, n = op == 1 ? W : HALF;
                    wf_rmsnorm_params_t p = {R, n, src + c0, lds, (char *)hd + c0 * eb, ldd,
                                             w + c0, 1e-6f, op == 1 ? NULL : qs,
                                             op == 1 ? 0 : W, dt};
                    CHECK_TRUE(C->rms_norm(cctx, &p) == WF_OK);
                    p.src = ds + c0; p.dst = (char *)dd + c0 * eb; p.weight = dw + c0;
                    p.sumsq = op == 1 ? NULL : dqs;
                    CHECK_TRUE(G->rms_norm(gctx, &p) == WF_OK);
                }
            }
            if (bf) {
                wf_convert_to_f32(dc, hd, WF_DTYPE_BF16, nd);
                fetch_bf16(dg, dd, nd);
            } else {
                memcpy(dc, hd, nd * 4);
                fetch(dg, dd, nd * 4);
            }
            static const char *const name[3] = {"layer_norm", "rms_norm", "rms_norm split"};
            char what[64];
            snprintf(what, sizeof what, "%s C %lld%s", name[op], (long long)W,
                     bf ? " -> bf16" : "");
            compare(what, dc, dg, nd, 1e-5 + (bf ? step : 0), -1);
        }
        free(hd);
    }
    G->dev_reset(gctx);
    free(src); free(w); free(bi); free(dc); free(dg); free(q0); free(q1); free(qs);
}

static void test_tables(void)
{
    NEED_CPU(rope_table);
    NEED_CPU(timestep_proj);
    const uint32_t axes[3] = {16, 56, 56};
    const int64_t L = 512, D = 128, na = 3;
    float *ids = malloc((size_t)(L * na) * 4);
    for (int64_t l = 0; l < L; l++) {
        ids[l * na + 0] = 0.f;
        ids[l * na + 1] = (float)(l / 32);
        ids[l * na + 2] = l % 3 == 0 ? (float)(l % 32) + 0.37f : (float)(l % 32) * 7.f;
    }
    const size_t nt = (size_t)(L * D);
    float *cc = malloc(nt * 4), *sc = malloc(nt * 4), *cg = malloc(nt * 4), *sg = malloc(nt * 4);
    float *dids = dev_copy(ids, (size_t)(L * na) * 4), *dcs = NULL, *dsn = NULL;
    CHECK_TRUE(G->dev_alloc(gctx, nt * 4, (void **)&dcs) == WF_OK &&
               G->dev_alloc(gctx, nt * 4, (void **)&dsn) == WF_OK);
    CHECK_TRUE(C->rope_table(cctx, ids, L, axes, 3, 10000.0, D, cc, sc) == WF_OK);
    CHECK_TRUE(G->rope_table(gctx, dids, L, axes, 3, 10000.0, D, dcs, dsn) == WF_OK);
    fetch(cg, dcs, nt * 4);
    fetch(sg, dsn, nt * 4);
    compare("rope_table cos", cc, cg, nt, 0, 2e-6);
    compare("rope_table sin", sc, sg, nt, 0, 2e-6);
    CHECK_TRUE(G->rope_table(gctx, dids, L, axes, 3, 10000.0, 126, dcs, dsn) == WF_E_BAD_ARGUMENT);
    G->dev_reset(gctx);
    free(ids); free(cc); free(sc); free(cg); free(sg);

    const float t[4] = {0.875f, 0.3f, 1.0f, 0.0123f};
    const int64_t B = 4, dim = 256;
    static const wf_dtype_t rd[] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    for (int r = 0; r < 3; r++) {
        float c[4 * 256], g[4 * 256], *dt = dev_copy(t, sizeof t), *dd = NULL;
        CHECK_TRUE(G->dev_alloc(gctx, sizeof g, (void **)&dd) == WF_OK);
        CHECK_TRUE(C->timestep_proj(cctx, t, B, dim, rd[r], c) == WF_OK);
        CHECK_TRUE(G->timestep_proj(gctx, dt, B, dim, rd[r], dd) == WF_OK);
        fetch(g, dd, sizeof g);
        char what[64];
        snprintf(what, sizeof what, "timestep_proj round %d", rd[r]);
        compare(what, c, g, (size_t)(B * dim), 0, 2e-6);
        G->dev_reset(gctx);
    }
    CHECK_TRUE(G->timestep_proj(gctx, t, B, 255, WF_DTYPE_F32, (float *)8) == WF_E_BAD_ARGUMENT);
}

static void test_copy_rows(void)
{
    NEED_CPU(copy_rows);
    const int64_t rows = 50;
    const size_t ls = 1000, ld = 777, rb = 500, n = (size_t)rows * ls;
    unsigned char *h = malloc(n), *want = calloc((size_t)rows * ld, 1), *got = malloc((size_t)rows * ld);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 31u + 7u);
    unsigned char *dsrc = dev_copy(h, n), *ddst = dev_copy(want, (size_t)rows * ld);
    CHECK_TRUE(C->copy_rows(cctx, want, ld, h, ls, rows, rb) == WF_OK);
    CHECK_TRUE(G->copy_rows(gctx, ddst, ld, dsrc, ls, rows, rb) == WF_OK);
    fetch(got, ddst, (size_t)rows * ld);
    int same = memcmp(got, want, (size_t)rows * ld) == 0;
    printf("  copy_rows: %s\n", same ? "bit-exact" : "FAIL");
    CHECK_TRUE(same);
    CHECK_TRUE(G->copy_rows(gctx, ddst, 400, dsrc, ls, rows, rb) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->copy_rows(gctx, dsrc + 10, ls, dsrc, ls, rows, rb) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(G->copy_rows(gctx, NULL, ld, NULL, ls, 0, rb) == WF_OK);
    G->dev_reset(gctx);
    free(h); free(want); free(got);
}

/* Resident blocks beside the job buffers: alignment, accounting, the
 * bump allocator stopping below them, contents kept over dev_reset. */
static void test_resident_memory(void)
{
    wf_backend_ctx_t *m = NULL;
    const uint64_t budget = (uint64_t)64 << 20;
    CHECK_TRUE(G->ctx_new(0, budget, &m) == WF_OK);
    if (!m)
        return;
    uint64_t tot = 0, fr = 0;
    G->memory_info(m, &tot, &fr);
    CHECK_TRUE(tot == budget && fr == budget);
    void *r1 = NULL, *r2 = NULL, *j = NULL;
    CHECK_TRUE(G->mem_alloc(m, (size_t)16 << 20, &r1) == WF_OK && ((uintptr_t)r1 & 255) == 0);
    CHECK_TRUE(G->mem_alloc(m, 1000, &r2) == WF_OK && ((uintptr_t)r2 & 255) == 0);
    G->memory_info(m, &tot, &fr);
    CHECK_TRUE(tot == budget && fr == budget - ((uint64_t)16 << 20) - 1024);
    float pat[256];
    for (int i = 0; i < 256; i++)
        pat[i] = (float)i * 0.5f;
    CHECK_TRUE(G->copy_h2d(m, r2, pat, sizeof pat) == WF_OK);
    CHECK_TRUE(G->dev_alloc(m, fr + 1, &j) == WF_E_NO_MEMORY);
    CHECK_TRUE(G->dev_alloc(m, fr, &j) == WF_OK);
    CHECK_TRUE((unsigned char *)j + fr <= (unsigned char *)r2); /* below every resident block */
    CHECK_TRUE(G->mem_alloc(m, 256, &j) == WF_E_NO_MEMORY);      /* no room above the job */
    CHECK_TRUE(G->synchronize(m) == WF_OK);
    G->dev_reset(m);
    float back[256];
    CHECK_TRUE(G->copy_d2h(m, back, r2, sizeof back) == WF_OK && G->synchronize(m) == WF_OK);
    CHECK_TRUE(memcmp(back, pat, sizeof pat) == 0);
    G->mem_free(m, r1);
    G->mem_free(m, r2);
    G->mem_free(m, NULL);
    G->memory_info(m, &tot, &fr);
    CHECK_TRUE(fr == budget);
    G->ctx_destroy(&m);
    printf("  resident memory: blocks from the top, job buffers below, freed back\n");

    /* host registration */
    size_t hb = (size_t)4 << 20;
    void *h = aligned_alloc(4096, hb);
    wf_status_t st = G->host_register(h, hb);
    CHECK_TRUE(st == WF_OK || st == WF_E_UNAVAILABLE);
    printf("  host_register: %s\n", st == WF_OK ? "pinned" : "unavailable (not an error)");
    if (st == WF_OK)
        G->host_unregister(h);
    free(h);
}

#if WEFT_TEST_NCCL
typedef struct nccl_arg {
    wf_nccl_id_t id;
    int n, rank;
    int ok;
} nccl_arg_t;

/* One rank of a world of n: every op with small device buffers. */
static void *nccl_rank(void *vp)
{
    nccl_arg_t *a = vp;
    wf_backend_ctx_t *ctx = NULL;
    a->ok = 0;
    if (G->ctx_new(a->rank, (uint64_t)64 << 20, &ctx) != WF_OK)
        return NULL;
    wf_comm_nccl_opts_t o = {a->rank, G->native_stream(ctx), 60000, 60000, NULL};
    wf_comm_t *c = NULL;
    int ok = wf_comm_nccl_init(&a->id, a->n, a->rank, &o, &c) == WF_OK;
    const int n = a->n, r = a->rank;
    float *buf = NULL, *out = NULL;
    ok = ok && G->dev_alloc(ctx, 1 << 20, (void **)&buf) == WF_OK &&
         G->dev_alloc(ctx, 1 << 20, (void **)&out) == WF_OK;
    float h[1024], g[1024];
    if (ok) {
        /* allreduce */
        for (int i = 0; i < 256; i++)
            h[i] = (float)(r + 1) * (float)i;
        ok &= G->copy_h2d(ctx, buf, h, 1024) == WF_OK;
        ok &= wf_comm_allreduce(c, buf, out, 256, WF_COMM_F32, WF_COMM_SUM) == WF_OK;
        ok &= G->copy_d2h(ctx, g, out, 1024) == WF_OK && G->synchronize(ctx) == WF_OK;
        for (int i = 0; i < 256; i++)
            ok &= g[i] == (float)(n * (n + 1) / 2) * (float)i;
        /* uneven allgatherv: rank j gives 4 (j + 1) bytes of value j */
        size_t cnt[16], dsp[16], tot = 0;
        for (int j = 0; j < n; j++) {
            cnt[j] = 4 * (size_t)(j + 1);
            dsp[j] = tot;
            tot += cnt[j];
        }
        for (int i = 0; i <= r; i++)
            h[i] = (float)r;
        ok &= G->copy_h2d(ctx, buf, h, cnt[r]) == WF_OK;
        ok &= wf_comm_allgatherv(c, buf, cnt[r], out, cnt, dsp) == WF_OK;
        ok &= G->copy_d2h(ctx, g, out, tot) == WF_OK && G->synchronize(ctx) == WF_OK;
        for (int j = 0, e = 0; j < n; j++)
            for (int i = 0; i <= j; i++)
                ok &= g[e++] == (float)j;
        /* alltoallv: rank i sends (j + 1) floats of value 100 i + j to j */
        size_t sc[16], sd[16], rc[16], rdp[16], so = 0, ro = 0;
        for (int j = 0; j < n; j++) {
            sc[j] = 4 * (size_t)(j + 1);
            sd[j] = so;
            for (int i = 0; i <= j; i++)
                h[so / 4 + (size_t)i] = (float)(100 * r + j);
            so += sc[j];
            rc[j] = 4 * (size_t)(r + 1);
            rdp[j] = ro;
            ro += rc[j];
        }
        ok &= G->copy_h2d(ctx, buf, h, so) == WF_OK;
        ok &= wf_comm_alltoallv(c, buf, sc, sd, out, rc, rdp) == WF_OK;
        ok &= G->copy_d2h(ctx, g, out, ro) == WF_OK && G->synchronize(ctx) == WF_OK;
        for (int j = 0; j < n; j++)
            for (int i = 0; i <= r; i++)
                ok &= g[rdp[j] / 4 + (size_t)i] == (float)(100 * j + r);
        /* broadcast from the last rank, barrier */
        h[0] = (float)r;
        ok &= G->copy_h2d(ctx, buf, h, 4) == WF_OK;
        ok &= wf_comm_broadcast(c, buf, 4, n - 1) == WF_OK;
        ok &= G->copy_d2h(ctx, g, buf, 4) == WF_OK && G->synchronize(ctx) == WF_OK;
        ok &= g[0] == (float)(n - 1);
        /* stream-ordered: a chain of in-place allreduces, each reading
         * the previous one's output, then one host wait (wf_comm_sync) */
        h[0] = 1.f;
        ok &= G->copy_h2d(ctx, buf, h, 4) == WF_OK;
        for (int i = 0; i < 8; i++)
            ok &= wf_comm_allreduce(c, buf, buf, 1, WF_COMM_F32, WF_COMM_SUM) == WF_OK;
        ok &= G->copy_d2h(ctx, g, buf, 4) == WF_OK && wf_comm_sync(c) == WF_OK;
        ok &= g[0] == powf((float)n, 8.f);
        ok &= wf_comm_barrier(c) == WF_OK;
        /* ring exchange with isend / irecv */
        h[0] = (float)r;
        ok &= G->copy_h2d(ctx, buf, h, 4) == WF_OK;
        wf_comm_req_t *rq = NULL, *sq = NULL;
        ok &= wf_comm_irecv(c, out, 4, (r + 1) % n, &rq) == WF_OK;
        ok &= wf_comm_isend(c, buf, 4, (r - 1 + n) % n, &sq) == WF_OK;
        ok &= wf_comm_wait(c, &rq) == WF_OK && wf_comm_wait(c, &sq) == WF_OK;
        ok &= G->copy_d2h(ctx, g, out, 4) == WF_OK && G->synchronize(ctx) == WF_OK;
        ok &= g[0] == (float)((r + 1) % n);
        /* split into odd / even ranks, allreduce inside */
        wf_comm_t *s = NULL;
        ok &= wf_comm_split(c, r % 2, r, &s) == WF_OK && s != NULL;
        if (s) {
            h[0] = 1.f;
            ok &= G->copy_h2d(ctx, buf, h, 4) == WF_OK;
            ok &= wf_comm_allreduce(s, buf, buf, 1, WF_COMM_F32, WF_COMM_SUM) == WF_OK;
            ok &= G->copy_d2h(ctx, g, buf, 4) == WF_OK && G->synchronize(ctx) == WF_OK;
            ok &= g[0] == (float)wf_comm_size(s);
            wf_comm_destroy(&s);
        }
    }
    wf_comm_destroy(&c);
    G->ctx_destroy(&ctx);
    a->ok = ok;
    return NULL;
}

static void test_nccl(int ngpu)
{
    printf("  nccl %d.%d.%d\n", wf_comm_nccl_version() / 10000,
           wf_comm_nccl_version() / 100 % 100, wf_comm_nccl_version() % 100);
    for (int n = 1; n <= ngpu && n <= 16; n = n == 1 && ngpu > 1 ? ngpu : n + ngpu) {
        nccl_arg_t a[16];
        pthread_t th[16];
        wf_nccl_id_t id;
        CHECK_TRUE(wf_comm_nccl_unique_id(&id) == WF_OK);
        for (int r = 0; r < n; r++) {
            a[r] = (nccl_arg_t){id, n, r, 0};
            pthread_create(&th[r], NULL, nccl_rank, &a[r]);
        }
        int all = 1;
        for (int r = 0; r < n; r++) {
            pthread_join(th[r], NULL);
            all &= a[r].ok;
        }
        printf("  nccl world of %d: %s\n", n, all ? "ok" : "FAIL");
        CHECK_TRUE(all);
    }
}
#endif

/* The attention cases (test_attention, test_nonfinite) under each kernel
 * named in vars (cuda_attention values, e.g. the ws variants), each in a
 * context tuned to it; one summary line per variant. */
static void test_attention_variants(int n, char **vars)
{
    static const char *const dflt[] = {"ws", "ws-pipe", "ws-pp", "ws-pp-store", "ws-full",
                                       "ws+store", "ws+persist", "ws+mc", "ws-pp-mc",
                                       "ws-pp-store-mc", "ws-full-mc"};
    const int nv = n > 0 ? n : (int)(sizeof dflt / sizeof dflt[0]);
    for (int i = 0; i < nv; i++) {
        const char *v = n > 0 ? vars[i] : dflt[i];
        int k;
        unsigned f;
        char name[64];
        if (wf_cuda_attn_kernel_parse(v, &k, &f) != WF_OK) {
            printf("variant %s: not a cuda_attention value  FAIL\n", v);
            failed++;
            continue;
        }
        wf_cuda_attn_kernel_name(k, f, name, sizeof name);
        G->ctx_destroy(&gctx);
        if (tuned_ctx(0, (uint64_t)2 << 30, v, false, &gctx) != WF_OK) {
            printf("variant %s: ctx_new failed  FAIL\n", v);
            failed++;
            continue;
        }
        const int before = failed;
        printf("variant %s (%s):\n", v, name);
        test_attention();
        test_nonfinite();
        test_attention_merge(v);
        printf("variant %s (%s): %d failing checks%s\n", v, name, failed - before,
               failed > before ? "  FAIL" : "");
    }
}

/* The end of main: both contexts destroyed (ctx_destroy nulls the
 * pointer and takes a null one), the verdict printed; the exit status. */
static int finish(void)
{
    G->ctx_destroy(&gctx);
    C->ctx_destroy(&cctx);
    if (failed) {
        fprintf(stderr, "test_cuda_gpu: %d failure(s)\n", failed);
        return 1;
    }
    printf("test_cuda_gpu: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    G = wf_backend_cuda();
    C = wf_backend_cpu();
    if (!G) {
        printf("test_cuda_gpu: built without CUDA, skipped\n");
        return 77;
    }
    run_kernel = getenv("WEFT_CUDA_ATTENTION");
    if (run_kernel && !wf_cuda_attention_kernel_ok(run_kernel)) {
        fprintf(stderr, "test_cuda_gpu: WEFT_CUDA_ATTENTION=%s is not a cuda_attention value\n",
                run_kernel);
        return 2;
    }
    if (tuned_ctx(0, (uint64_t)2 << 30, run_kernel, false, &gctx) != WF_OK) {
        printf("test_cuda_gpu: no usable GPU (cudaGetDeviceCount failed or device 0 "
               "unavailable), skipped\n");
        return 77;
    }
    CHECK_TRUE(C->ctx_new(0, 0, &cctx) == WF_OK);
    int ngpu = 1;
    for (;; ngpu++) {
        wf_backend_ctx_t *x = NULL;
        if (G->ctx_new(ngpu, (uint64_t)64 << 20, &x) != WF_OK)
            break;
        G->ctx_destroy(&x);
    }
    uint64_t tot = 0, fr = 0;
    G->memory_info(gctx, &tot, &fr);
    printf("test_cuda_gpu: %d GPU(s), arena %llu MiB\n", ngpu, (unsigned long long)(tot >> 20));
    {
        /* The wgmma building blocks first: a wrong layout shows here by
         * name before the attention cases fail. */
        char rep[512];
        wf_status_t st = wf_cuda_wgmma_selftest(0, rep, sizeof rep);
        printf("  %s\n", rep);
        CHECK_TRUE(st == WF_OK || st == WF_E_UNAVAILABLE);
        /* the warp-specialized kernel's blocks by name; a failure counts
         * only where the ws variants are tested (the kernel is opt-in:
         * the default run does not depend on it) */
        char wrep[512];
        wf_status_t wst = wf_cuda_ws_selftest(0, wrep, sizeof wrep);
        const int variants = argc > 1 && strcmp(argv[1], "--attention-variants") == 0;
        printf("  %s%s\n", wrep,
               wst == WF_OK || wst == WF_E_UNAVAILABLE || variants ? ""
                                                                  : " (not counted here)");
        if (variants)
            CHECK_TRUE(wst == WF_OK || wst == WF_E_UNAVAILABLE);
        /* +mc's building block (a 2-CTA cluster multicasting tiles, remote
         * arrivals on the empty barriers), counted as the ws line is */
        char mrep[512];
        wf_status_t mst = wf_cuda_ws_mc_selftest(0, mrep, sizeof mrep);
        printf("  %s%s\n", mrep,
               mst == WF_OK || mst == WF_E_UNAVAILABLE || variants ? "" : " (not counted here)");
        if (variants)
            CHECK_TRUE(mst == WF_OK || mst == WF_E_UNAVAILABLE);
        /* the fp8 kernel's blocks by name: the e4m3 wgmma, the
         * P fragment against v8t's key order, the quantizer */
        char frep[768];
        wf_status_t fst = wf_cuda_fp8_selftest(0, frep, sizeof frep);
        printf("  %s\n", frep);
        CHECK_TRUE(fst == WF_OK || fst == WF_E_UNAVAILABLE);
        const char *sel = run_kernel && strcmp(run_kernel, "auto") ? run_kernel : NULL;
        int kern = WF_CUDA_KERNEL_WGMMA;
        unsigned feat = 0;
        char kname[64];
        if (wf_cuda_attn_kernel_parse(sel, &kern, &feat) != WF_OK)
            kern = WF_CUDA_KERNEL_WGMMA, feat = 0; /* as ctx_new: the default */
        wf_cuda_attn_kernel_name(kern, feat, kname, sizeof kname);
        if (st == WF_OK && kern != WF_CUDA_KERNEL_MMA)
            printf("  attention kernel: %s%s for bf16 / f16 inputs, mma.sync for the rest\n",
                   kname, kern == WF_CUDA_KERNEL_WGMMA_PIPE ? " (pipelined)" : "");
        else
            printf("  attention kernel: mma.sync\n");
    }
    if (argc > 1 && strcmp(argv[1], "--fp8") == 0) {
        /* tests/gpu/attention_variants.sh: the fp8 cases only */
        test_fp8();
        return finish();
    }
    if (argc > 1 && strcmp(argv[1], "--attention-variants") == 0) {
        /* tests/gpu/attention_variants.sh: the attention cases only, under
         * each variant named after the flag (or the ws list) */
        test_attention_variants(argc - 2, argv + 2);
        return finish();
    }
    test_attention();
    test_nonfinite();
    test_fp8();
    test_merge();
    test_attention_merge_variants();
    test_convert();
    test_gelu_form();
    test_linear();
    test_elementwise_ops();
    test_modln_gate();
    test_head_norm_rope();
    test_lowp_activations();
    test_row_norms();
    test_tables();
    test_copy_rows();
    test_resident_memory();
#if WEFT_TEST_NCCL
    G->ctx_destroy(&gctx);
    test_nccl(ngpu);
#endif
    return finish();
}
