/* weftctl_demo.c — `weftctl attention-demo`: seeded random Q / K / V
 * through the daemon, checked against the fp64 reference of
 * kernels/reference.h over the same rounded inputs, with timings (see
 * weftctl.c for the command line).
 */
#include "weftctl_cmds.h"
#include "weftctl_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "tensor.h"

/* splitmix64: seeded, reproducible inputs. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* n seeded uniform values in [-1, 1) stored into buf (dtype dt) and their
 * stored (rounded) values into f, as the reference reads them. */
static void seeded(void *buf, float *f, wf_dtype_t dt, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        f[i] = rng_uniform(s);
    wf_convert_from_f32(buf, dt, f, n);
    wf_convert_to_f32(f, buf, dt, n);
}

typedef struct demo {
    int64_t B, Sq, Skv, Hq, Hkv, D;
    wf_dtype_t dt;
    int causal;
    uint32_t devices;
    int64_t iters;
    uint64_t seed;
    wf_rotate_t rotate;    /* --rotate; DEFAULT: the daemon's setting */
    wf_opt_t fp32, ring_any, uly_any, lb; /* flags; DEFAULT unless given */
    bool fp8;              /* --fp8: precision fp8, checked against the fp8 reference */
} demo_t;

static int parse_demo(int argc, char **argv, demo_t *p)
{
    *p = (demo_t){ .B = 2, .Sq = 128, .Skv = 0, .Hq = 8, .Hkv = 0, .D = 64,
                   .dt = WF_DTYPE_F32, .iters = 1, .seed = 42 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int64_t *dst = NULL;
        int64_t lo = 1, hi = 1 << 20, val;
        if (strcmp(a, "--causal") == 0) {
            p->causal = 1;
            continue;
        }
        if (strcmp(a, "--no-fp32-merge") == 0) {
            p->fp32 = WF_OPT_OFF;
            continue;
        }
        if (strcmp(a, "--ring-anything") == 0) {
            p->ring_any = WF_OPT_ON;
            continue;
        }
        if (strcmp(a, "--ulysses-anything") == 0) {
            p->uly_any = WF_OPT_ON;
            continue;
        }
        if (strcmp(a, "--no-load-balance") == 0) {
            p->lb = WF_OPT_OFF;
            continue;
        }
        if (strcmp(a, "--fp8") == 0) {
            p->fp8 = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "weftctl: %s: unknown option or missing value\n", a);
            return EXIT_USAGE;
        }
        const char *arg = argv[++i];
        if (strcmp(a, "--dtype") == 0) {
            if (strcmp(arg, "f32") == 0)
                p->dt = WF_DTYPE_F32;
            else if (strcmp(arg, "f16") == 0)
                p->dt = WF_DTYPE_F16;
            else if (strcmp(arg, "bf16") == 0)
                p->dt = WF_DTYPE_BF16;
            else {
                fprintf(stderr, "weftctl: --dtype: f32, f16 or bf16\n");
                return EXIT_USAGE;
            }
            continue;
        }
        if (strcmp(a, "--rotate") == 0) {
            if (strcmp(arg, "allgather") == 0)
                p->rotate = WF_ROTATE_ALLGATHER;
            else if (strcmp(arg, "alltoall") == 0)
                p->rotate = WF_ROTATE_ALLTOALL;
            else {
                fprintf(stderr, "weftctl: --rotate: allgather or alltoall\n");
                return EXIT_USAGE;
            }
            continue;
        }
        if (strcmp(a, "--batch") == 0) dst = &p->B;
        else if (strcmp(a, "--seq") == 0) dst = &p->Sq;
        else if (strcmp(a, "--kv-seq") == 0) dst = &p->Skv;
        else if (strcmp(a, "--heads") == 0) dst = &p->Hq;
        else if (strcmp(a, "--kv-heads") == 0) dst = &p->Hkv;
        else if (strcmp(a, "--dim") == 0) dst = &p->D;
        else if (strcmp(a, "--iters") == 0) dst = &p->iters;
        else if (strcmp(a, "--devices") == 0) { dst = &val; lo = 0; hi = 4096; }
        else if (strcmp(a, "--seed") == 0) { dst = &val; lo = 0; hi = INT64_MAX; }
        else {
            fprintf(stderr, "weftctl: unknown option %s\n", a);
            return EXIT_USAGE;
        }
        if (!ctl_parse_i64(arg, lo, hi, dst)) {
            fprintf(stderr, "weftctl: %s: bad value '%s'\n", a, arg);
            return EXIT_USAGE;
        }
        if (strcmp(a, "--devices") == 0)
            p->devices = (uint32_t)val;
        else if (strcmp(a, "--seed") == 0)
            p->seed = (uint64_t)val;
    }
    if (p->Skv == 0)
        p->Skv = p->Sq;
    if (p->Hkv == 0)
        p->Hkv = p->Hq;
    if (p->Hq % p->Hkv != 0) {
        fprintf(stderr, "weftctl: --kv-heads must divide --heads\n");
        return EXIT_USAGE;
    }
    return 0;
}

int ctl_cmd_demo(wf_client_t *c, int argc, char **argv)
{
    demo_t p;
    int rc = parse_demo(argc, argv, &p);
    if (rc)
        return rc;

    size_t es = wf_dtype_size(p.dt);
    const wf_tensor_t shq = { NULL, p.dt, 4, { p.B, p.Sq, p.Hq, p.D } };
    const wf_tensor_t shkv = { NULL, p.dt, 4, { p.B, p.Skv, p.Hkv, p.D } };
    int64_t nmax = (int64_t)1 << 36; /* keeps every size below in range */
    if (wf_tensor_numel(&shq) < 0 || wf_tensor_numel(&shq) > nmax ||
        wf_tensor_numel(&shkv) < 0 || wf_tensor_numel(&shkv) > nmax) {
        fprintf(stderr, "weftctl: tensor shapes too large\n");
        return EXIT_USAGE;
    }
    size_t nq = (size_t)(p.B * p.Sq * p.Hq * p.D);
    size_t nkv = (size_t)(p.B * p.Skv * p.Hkv * p.D);
    size_t nl = (size_t)(p.B * p.Sq * p.Hq);
    void *q = malloc(nq * es), *k = malloc(nkv * es), *v = malloc(nkv * es);
    void *out = malloc(nq * es);
    float *lse = malloc(nl * sizeof *lse);
    /* f32 copies of the stored (rounded) inputs, for the reference */
    float *qf = malloc(nq * sizeof *qf), *kf = malloc(nkv * sizeof *kf);
    float *vf = malloc(nkv * sizeof *vf);
    double *ref = malloc(nq * sizeof *ref), *ref_lse = malloc(nl * sizeof *ref_lse);
    double *times = malloc((size_t)p.iters * sizeof *times);
    rc = 1;
    if (!q || !k || !v || !out || !lse || !qf || !kf || !vf || !ref || !ref_lse ||
        !times) {
        fprintf(stderr, "weftctl: out of memory\n");
        goto done;
    }
    uint64_t s = p.seed;
    seeded(q, qf, p.dt, nq, &s);
    seeded(k, kf, p.dt, nkv, &s);
    seeded(v, vf, p.dt, nkv, &s);

    wf_tensor_t tq = { q, p.dt, 4, { p.B, p.Sq, p.Hq, p.D } };
    wf_tensor_t tk = { k, p.dt, 4, { p.B, p.Skv, p.Hkv, p.D } };
    wf_tensor_t tv = { v, p.dt, 4, { p.B, p.Skv, p.Hkv, p.D } };
    wf_tensor_t to = { out, p.dt, 4, { p.B, p.Sq, p.Hq, p.D } };
    wf_attention_opts_t opts = { .scale = 0.0f, .causal = p.causal,
                                 .devices = p.devices, .rotate_method = p.rotate,
                                 .convert_to_fp32 = p.fp32,
                                 .ring_anything = p.ring_any,
                                 .ulysses_anything = p.uly_any,
                                 .load_balance = p.lb,
                                 .precision = p.fp8 ? WF_PRECISION_FP8
                                                    : WF_PRECISION_DEFAULT };
    wf_job_result_t res;
    for (int64_t it = 0; it < p.iters; it++) {
        double t0 = ctl_now_s();
        wf_status_t st = wf_attention(c, &tq, &tk, &tv, &opts, &to, lse, &res);
        times[it] = ctl_now_s() - t0;
        if (st != WF_OK) {
            ctl_report_error(c, st, "attention");
            goto done;
        }
    }

    const wf_ref_attn_t ra = { .B = p.B, .Sq = p.Sq, .Skv = p.Skv, .Hq = p.Hq,
                               .Hkv = p.Hkv, .D = p.D,
                               .scale = 1.0 / sqrt((double)p.D),
                               .causal = p.causal != 0 };
    /* fp8: the reference quantizes q / k / v as the kernels do (reference.h) */
    wf_status_t st = p.fp8 ? wf_ref_attention_fp8(&ra, q, p.dt, k, p.dt, v, p.dt, ref, ref_lse)
                           : wf_ref_attention(&ra, qf, kf, vf, ref, ref_lse);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: reference attention: %s\n", wf_status_str(st));
        goto done;
    }
    double max_err = 0.0, max_ref = 0.0, max_lse_err = 0.0;
    for (size_t i = 0; i < nq; i++) {
        double e = fabs((double)wf_elem_load(out, p.dt, i) - ref[i]);
        if (!(e <= max_err))
            max_err = e; /* NaN sticks */
        if (fabs(ref[i]) > max_ref)
            max_ref = fabs(ref[i]);
    }
    for (size_t i = 0; i < nl; i++) {
        double e = fabs((double)lse[i] - ref_lse[i]) / fmax(1.0, fabs(ref_lse[i]));
        if (!(e <= max_lse_err))
            max_lse_err = e;
    }
    /* |out| <= max|v| <= 1, so the tolerance is the output dtype's
     * rounding (half an ulp at 1: 2^-11 f16, 2^-8 bf16) with room for the
     * f32 accumulation, and for f32 the accumulation alone. Ring steps
     * merged in f16 / bf16 (--no-fp32-merge) round every step's out and
     * lse (~log S, ulp 2^-8 / 2^-5 near 4): looser bounds. */
    double tol = p.dt == WF_DTYPE_F32 ? 1e-4 : p.dt == WF_DTYPE_F16 ? 2e-3 : 1.6e-2;
    double lse_tol = 1e-4;
    if (p.fp32 == WF_OPT_OFF && p.dt != WF_DTYPE_F32) {
        tol = p.dt == WF_DTYPE_F16 ? 4e-3 : 3e-2;
        lse_tol = p.dt == WF_DTYPE_F16 ? 4e-3 : 2.5e-2;
    }
    /* fp8: the reference has the quantized q / k / v but not the kernels'
     * rounding of the softmax weights P to e4m3 (relative 2^-4 each):
     * 2^-5 of max|v| <= 1 on top bounds it for these random rows; the lse
     * comes from the f32 scores, unrounded. */
    if (p.fp8) {
        tol += 0x1p-5;
        lse_tol = fmax(lse_tol, 1e-3);
    }

    /* FLOPs: QK^T and PV, 2 * D each per visible (query, key) pair. */
    double pairs = 0.0;
    for (int64_t i = 0; i < p.Sq; i++)
        pairs += (double)(p.causal ? (i + 1 < p.Skv ? i + 1 : p.Skv) : p.Skv);
    double flops = 4.0 * (double)p.B * (double)p.Hq * pairs * (double)p.D;
    qsort(times, (size_t)p.iters, sizeof *times, ctl_cmp_double);
    double med = times[p.iters / 2], best = times[0];
    bool pass = max_err <= tol && max_lse_err <= lse_tol;

    printf("attention  B=%" PRId64 " Sq=%" PRId64 " Skv=%" PRId64 " Hq=%" PRId64
           " Hkv=%" PRId64 " D=%" PRId64 " %s%s devices=%u (used %u) epoch %"
           PRIu64 "\n", p.B, p.Sq, p.Skv, p.Hq, p.Hkv, p.D, wf_dtype_name(p.dt),
           p.causal ? " causal" : "", p.devices, res.devices, res.epoch);
    printf("options    rotate %s, fp32 merge %s, ring_anything %s, "
           "ulysses_anything %s, load_balance %s, precision %s\n",
           p.rotate == WF_ROTATE_ALLGATHER ? "allgather"
           : p.rotate == WF_ROTATE_ALLTOALL ? "alltoall" : "default",
           p.fp32 == WF_OPT_OFF ? "off" : "default",
           p.ring_any == WF_OPT_ON ? "on" : "default",
           p.uly_any == WF_OPT_ON ? "on" : "default",
           p.lb == WF_OPT_OFF ? "off" : "default", p.fp8 ? "fp8 (fp8 reference)" : "default");
    printf("max abs error   %.3e (relative %.3e), tolerance %.1e\n",
           max_err, max_ref > 0 ? max_err / max_ref : 0.0, tol);
    printf("max lse error   %.3e (relative), tolerance %.1e\n",
           max_lse_err, lse_tol);
    printf("round trip      %.3f ms median, %.3f ms best over %" PRId64
           " iteration%s (daemon: queue %" PRIu64 " us, compute %" PRIu64 " us)\n",
           med * 1e3, best * 1e3, p.iters, p.iters == 1 ? "" : "s",
           res.queue_us, res.compute_us);
    printf("throughput      %.2f GFLOP/s (round trip, median)\n",
           flops / med * 1e-9);
    printf("%s\n", pass ? "PASS" : "FAIL");
    rc = pass ? 0 : 1;

done:
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(qf);
    free(kf);
    free(vf);
    free(ref);
    free(ref_lse);
    free(times);
    return rc;
}
