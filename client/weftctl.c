/* weftctl.c — command line of weftd, written against libweft only.
 *
 *   weftctl [--endpoint E] [--timeout MS] hello
 *   weftctl [--endpoint E] [--timeout MS] status
 *   weftctl [--endpoint E] [--timeout MS] reconfigure [--dp D] [--ring R]
 *       [--ulysses U] [--tp T]
 *   weftctl [--endpoint E] [--timeout MS] attention-demo [--batch B]
 *       [--seq S] [--kv-seq SKV] [--heads H] [--kv-heads HKV] [--dim D]
 *       [--dtype f32|f16|bf16] [--causal] [--devices N] [--iters N]
 *       [--seed N] [--rotate allgather|alltoall] [--no-fp32-merge]
 *       [--ring-anything] [--ulysses-anything] [--no-load-balance]
 *
 * reconfigure changes the mesh of a running daemon (a degree left out is
 * 1; the product must be the daemon's device count) and prints the old
 * and new mesh and the new epoch. The daemon drains running jobs first,
 * so it can take as long as the longest of them: --timeout bounds it.
 *
 * attention-demo runs seeded random Q/K/V through the daemon and checks
 * the output (and LSE) against an fp64 reference computed here, from the
 * same rounded inputs; it exits 0 only when the error is within the
 * tolerance of the output dtype.
 *
 * Endpoint: --endpoint, else $WEFT_ENDPOINT, else WF_DEFAULT_ENDPOINT.
 * Exit codes: 0 success, 1 job / daemon error or a failed check, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weftctl [--endpoint E] [--timeout MS] COMMAND [options]\n"
        "commands:\n"
        "  hello            protocol handshake; prints what the daemon reports\n"
        "  status           mesh, epoch, devices (rank, coordinates), memory,\n"
        "                   queue, counters\n"
        "  reconfigure      change the mesh: --dp D --ring R --ulysses U --tp T\n"
        "                   (absent = 1; product = devices); waits for the\n"
        "                   running jobs to drain\n"
        "  attention-demo   run a random attention job and check it against\n"
        "                   an fp64 reference; options:\n"
        "      --batch B --seq S --kv-seq SKV --heads H --kv-heads HKV\n"
        "      --dim D --dtype f32|f16|bf16 --causal --devices N --iters N\n"
        "      --seed N --rotate allgather|alltoall --no-fp32-merge\n"
        "      --ring-anything --ulysses-anything --no-load-balance\n"
        "endpoint: --endpoint, else $WEFT_ENDPOINT, else %s\n"
        "exit: 0 ok, 1 job or daemon error / failed check, 2 usage\n",
        WF_DEFAULT_ENDPOINT);
}

/* Parse a positive integer option value; false on garbage. */
static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *ret)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

static int report_error(wf_client_t *c, wf_status_t st, const char *what)
{
    const char *msg = wf_client_last_error(c);
    fprintf(stderr, "weftctl: %s: %s: %s\n", what, wf_status_name(st),
            msg[0] ? msg : wf_status_str(st));
    return 1;
}

static void human_bytes(char *buf, size_t len, uint64_t b)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", b);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
}

/* ---- hello / status --------------------------------------------------- */

static int cmd_hello(wf_client_t *c)
{
    wf_hello_info_t h;
    wf_status_t st = wf_hello(c, &h);
    if (st != WF_OK)
        return report_error(c, st, "hello");
    char hb[32], tb[32];
    human_bytes(hb, sizeof hb, h.max_header_bytes);
    human_bytes(tb, sizeof tb, h.max_tensor_bytes);
    printf("weftd %s, protocol %u, backend %s, %u device%s\n",
           h.weft_version, h.protocol, h.backend, h.devices,
           h.devices == 1 ? "" : "s");
    printf("limits: header %s, tensor %s, %u tensors per request\n",
           hb, tb, h.max_tensors);
    return 0;
}

static int cmd_status(wf_client_t *c)
{
    wf_status_info_t *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    wf_status_t st = wf_status(c, s);
    if (st != WF_OK) {
        free(s);
        return report_error(c, st, "status");
    }
    char rss[32];
    human_bytes(rss, sizeof rss, s->rss_bytes);
    printf("weftd %s (%s)  epoch %" PRIu64 "  uptime %.1f s  rss %s\n",
           s->weft_version, s->backend, s->epoch,
           (double)s->uptime_ms / 1000.0, rss);
    printf("mesh dp=%u ring=%u ulysses=%u tp=%u  epoch %" PRIu64 "%s\n",
           s->mesh.dp, s->mesh.ring, s->mesh.ulysses, s->mesh.tp, s->epoch,
           s->reconfiguring ? "  (reconfiguring)" : "");
    printf("queue %u/%u  in flight %u  served %" PRIu64 "  failed %" PRIu64
           "  rejected %" PRIu64 "\n\n",
           s->queue_depth, s->queue_capacity, s->in_flight, s->jobs_served,
           s->jobs_failed, s->requests_rejected);
    printf("%-6s %-10s %4s %-16s %12s %12s %6s %10s %s\n", "DEVICE", "NAME",
           "RANK", "[DP,RING,ULY,TP]", "MEM USED", "MEM TOTAL", "USED%", "JOBS",
           "BUSY");
    uint32_t n = s->device_count;
    if (n > WF_STATUS_MAX_DEVICES)
        n = WF_STATUS_MAX_DEVICES;
    for (uint32_t i = 0; i < n; i++) {
        const wf_device_info_t *d = &s->devices[i];
        char used[32], total[32];
        human_bytes(used, sizeof used, d->memory_used);
        human_bytes(total, sizeof total, d->memory_total);
        double pct = d->memory_total
            ? 100.0 * (double)d->memory_used / (double)d->memory_total : 0.0;
        char coords[48];
        snprintf(coords, sizeof coords, "[%u,%u,%u,%u]", d->coords[0],
                 d->coords[1], d->coords[2], d->coords[3]);
        printf("%-6u %-10s %4u %-16s %12s %12s %5.1f%% %10" PRIu64 " %s\n",
               d->index, d->name, d->rank, coords, used, total, pct,
               d->jobs_served, d->busy ? "yes" : "no");
    }
    if (s->role[0]) {
        printf("\ncluster: %s of %s  state %s  world epoch %" PRIu64 "  %u rank(s)"
               "  world id %s\n", s->role, s->coordinator, s->cluster_state,
               s->world_epoch, s->world_size, s->world_id[0] ? s->world_id : "-");
        printf("%-20s %-10s %10s %6s\n", "NODE", "STATE", "FIRST RANK", "RANKS");
        uint32_t nn = s->node_count < WF_STATUS_MAX_NODES ? s->node_count
                                                          : WF_STATUS_MAX_NODES;
        for (uint32_t i = 0; i < nn; i++)
            printf("%-20s %-10s %10u %6u\n", s->nodes[i].name, s->nodes[i].state,
                   s->nodes[i].first_rank, s->nodes[i].ranks);
    }
    free(s);
    return 0;
}

/* ---- reconfigure ------------------------------------------------------ */

static int cmd_reconfigure(wf_client_t *c, int argc, char **argv)
{
    wf_mesh_degrees_t m = { 1, 1, 1, 1 };
    for (int i = 0; i < argc; i++) {
        uint32_t *dst = NULL;
        if (strcmp(argv[i], "--dp") == 0) dst = &m.dp;
        else if (strcmp(argv[i], "--ring") == 0) dst = &m.ring;
        else if (strcmp(argv[i], "--ulysses") == 0) dst = &m.ulysses;
        else if (strcmp(argv[i], "--tp") == 0) dst = &m.tp;
        int64_t v;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "weftctl: reconfigure: %s: unknown option or missing "
                    "value\n", argv[i]);
            return EXIT_USAGE;
        }
        if (!parse_i64(argv[i + 1], 1, 4096, &v)) {
            fprintf(stderr, "weftctl: %s: a degree 1..4096, got '%s'\n", argv[i],
                    argv[i + 1]);
            return EXIT_USAGE;
        }
        *dst = (uint32_t)v;
        i++;
    }
    wf_status_info_t *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    wf_status_t st = wf_status(c, s);
    if (st != WF_OK) {
        free(s);
        return report_error(c, st, "status");
    }
    wf_mesh_degrees_t old = s->mesh;
    uint64_t old_epoch = s->epoch;
    free(s);
    uint64_t epoch = 0;
    st = wf_reconfigure(c, &m, &epoch);
    if (st != WF_OK)
        return report_error(c, st, "reconfigure");
    printf("mesh dp=%u ring=%u ulysses=%u tp=%u (epoch %" PRIu64 ") -> "
           "dp=%u ring=%u ulysses=%u tp=%u (epoch %" PRIu64 ")\n",
           old.dp, old.ring, old.ulysses, old.tp, old_epoch,
           m.dp, m.ring, m.ulysses, m.tp, epoch);
    return 0;
}

/* ---- attention-demo --------------------------------------------------- */

/* f16 <-> f32 and bf16 <-> f32 by hand, rounding to nearest even (f16
 * checked against GCC's _Float16 over all 2^32 floats; clang 14 has no
 * _Float16 on x86). Written here rather than borrowed from kernels/ so that the check
 * does not share code with what it checks. */
static double from_f16(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
             : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t to_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f))
        return sign | 0x7e00;
    if (a >= 65520.0)          /* halfway above the largest finite, 65504 */
        return sign | 0x7c00;
    if (a < 0x1p-14)           /* subnormal: units of 2^-24 */
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    int e;
    double m = nearbyint(frexp(a, &e) * 2048.0); /* 11 significant bits */
    if (m == 2048.0) {
        m = 1024.0;
        e++;
    }
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((int)m - 1024);
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void store(void *buf, wf_dtype_t dt, size_t i, float x)
{
    uint16_t h;
    switch (dt) {
    case WF_DTYPE_F32:
        memcpy((char *)buf + 4 * i, &x, 4);
        return;
    case WF_DTYPE_F16:
        h = to_f16(x);
        break;
    case WF_DTYPE_BF16:
        h = to_bf16(x);
        break;
    default:
        return;
    }
    memcpy((char *)buf + 2 * i, &h, 2);
}

static double load(const void *buf, wf_dtype_t dt, size_t i)
{
    float f;
    uint16_t h;
    switch (dt) {
    case WF_DTYPE_F32:
        memcpy(&f, (const char *)buf + 4 * i, 4);
        return f;
    case WF_DTYPE_F16:
        memcpy(&h, (const char *)buf + 2 * i, 2);
        return from_f16(h);
    case WF_DTYPE_BF16:
        memcpy(&h, (const char *)buf + 2 * i, 2);
        return from_bf16(h);
    }
    return NAN;
}

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

typedef struct demo {
    int64_t B, Sq, Skv, Hq, Hkv, D;
    wf_dtype_t dt;
    int causal;
    uint32_t devices;
    int64_t iters;
    uint64_t seed;
    wf_rotate_t rotate;    /* --rotate; DEFAULT: the daemon's setting */
    wf_opt_t fp32, ring_any, uly_any, lb; /* flags; DEFAULT unless given */
} demo_t;

/* fp64 reference of attention over the stored (rounded) inputs.
 *   q (B,Sq,Hq,D), k / v (B,Skv,Hkv,D) -> out (B,Sq,Hq,D), lse (B,Sq,Hq) */
static void reference(const demo_t *p, const void *q, const void *k,
                      const void *v, double scale, double *out, double *lse,
                      double *scores)
{
    int64_t group = p->Hq / p->Hkv;
    for (int64_t b = 0; b < p->B; b++)
    for (int64_t i = 0; i < p->Sq; i++)
    for (int64_t h = 0; h < p->Hq; h++) {
        int64_t hk = h / group;
        int64_t nkeys = p->causal ? (i + 1 < p->Skv ? i + 1 : p->Skv) : p->Skv;
        size_t qo = (size_t)(((b * p->Sq + i) * p->Hq + h) * p->D);
        double m = -INFINITY;
        for (int64_t j = 0; j < nkeys; j++) {
            size_t ko = (size_t)(((b * p->Skv + j) * p->Hkv + hk) * p->D);
            double s = 0.0;
            for (int64_t d = 0; d < p->D; d++)
                s += load(q, p->dt, qo + (size_t)d) * load(k, p->dt, ko + (size_t)d);
            scores[j] = s * scale;
            if (scores[j] > m)
                m = scores[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < nkeys; j++) {
            scores[j] = exp(scores[j] - m);
            sum += scores[j];
        }
        double *o = out + qo;
        for (int64_t d = 0; d < p->D; d++)
            o[d] = 0.0;
        for (int64_t j = 0; j < nkeys; j++) {
            size_t vo = (size_t)(((b * p->Skv + j) * p->Hkv + hk) * p->D);
            double w = scores[j] / sum;
            for (int64_t d = 0; d < p->D; d++)
                o[d] += w * load(v, p->dt, vo + (size_t)d);
        }
        lse[(b * p->Sq + i) * p->Hq + h] = m + log(sum);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
        if (!parse_i64(arg, lo, hi, dst)) {
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

static int cmd_demo(wf_client_t *c, int argc, char **argv)
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
    double *ref = malloc(nq * sizeof *ref), *ref_lse = malloc(nl * sizeof *ref_lse);
    double *scores = malloc((size_t)p.Skv * sizeof *scores);
    double *times = malloc((size_t)p.iters * sizeof *times);
    rc = 1;
    if (!q || !k || !v || !out || !lse || !ref || !ref_lse || !scores || !times) {
        fprintf(stderr, "weftctl: out of memory\n");
        goto done;
    }
    uint64_t s = p.seed;
    for (size_t i = 0; i < nq; i++)
        store(q, p.dt, i, rng_uniform(&s));
    for (size_t i = 0; i < nkv; i++)
        store(k, p.dt, i, rng_uniform(&s));
    for (size_t i = 0; i < nkv; i++)
        store(v, p.dt, i, rng_uniform(&s));

    wf_tensor_t tq = { q, p.dt, 4, { p.B, p.Sq, p.Hq, p.D } };
    wf_tensor_t tk = { k, p.dt, 4, { p.B, p.Skv, p.Hkv, p.D } };
    wf_tensor_t tv = { v, p.dt, 4, { p.B, p.Skv, p.Hkv, p.D } };
    wf_tensor_t to = { out, p.dt, 4, { p.B, p.Sq, p.Hq, p.D } };
    wf_attention_opts_t opts = { .scale = 0.0f, .causal = p.causal,
                                 .devices = p.devices, .rotate_method = p.rotate,
                                 .convert_to_fp32 = p.fp32,
                                 .ring_anything = p.ring_any,
                                 .ulysses_anything = p.uly_any,
                                 .load_balance = p.lb };
    wf_job_result_t res;
    for (int64_t it = 0; it < p.iters; it++) {
        double t0 = now_s();
        wf_status_t st = wf_attention(c, &tq, &tk, &tv, &opts, &to, lse, &res);
        times[it] = now_s() - t0;
        if (st != WF_OK) {
            report_error(c, st, "attention");
            goto done;
        }
    }

    double scale = 1.0 / sqrt((double)p.D);
    reference(&p, q, k, v, scale, ref, ref_lse, scores);
    double max_err = 0.0, max_ref = 0.0, max_lse_err = 0.0;
    for (size_t i = 0; i < nq; i++) {
        double e = fabs(load(out, p.dt, i) - ref[i]);
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

    /* FLOPs: QK^T and PV, 2 * D each per visible (query, key) pair. */
    double pairs = 0.0;
    for (int64_t i = 0; i < p.Sq; i++)
        pairs += (double)(p.causal ? (i + 1 < p.Skv ? i + 1 : p.Skv) : p.Skv);
    double flops = 4.0 * (double)p.B * (double)p.Hq * pairs * (double)p.D;
    qsort(times, (size_t)p.iters, sizeof *times, cmp_double);
    double med = times[p.iters / 2], best = times[0];
    bool pass = max_err <= tol && max_lse_err <= lse_tol;

    printf("attention  B=%" PRId64 " Sq=%" PRId64 " Skv=%" PRId64 " Hq=%" PRId64
           " Hkv=%" PRId64 " D=%" PRId64 " %s%s devices=%u (used %u) epoch %"
           PRIu64 "\n", p.B, p.Sq, p.Skv, p.Hq, p.Hkv, p.D, wf_dtype_name(p.dt),
           p.causal ? " causal" : "", p.devices, res.devices, res.epoch);
    printf("options    rotate %s, fp32 merge %s, ring_anything %s, "
           "ulysses_anything %s, load_balance %s\n",
           p.rotate == WF_ROTATE_ALLGATHER ? "allgather"
           : p.rotate == WF_ROTATE_ALLTOALL ? "alltoall" : "default",
           p.fp32 == WF_OPT_OFF ? "off" : "default",
           p.ring_any == WF_OPT_ON ? "on" : "default",
           p.uly_any == WF_OPT_ON ? "on" : "default",
           p.lb == WF_OPT_OFF ? "off" : "default");
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
    free(ref);
    free(ref_lse);
    free(scores);
    free(times);
    return rc;
}

int main(int argc, char **argv)
{
    const char *endpoint = getenv("WEFT_ENDPOINT");
    int64_t timeout = 30000;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--endpoint") == 0 && i + 1 < argc) {
            endpoint = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (!parse_i64(argv[++i], 1, INT32_MAX, &timeout)) {
                fprintf(stderr, "weftctl: --timeout: milliseconds > 0\n");
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            break;
        }
    }
    if (i >= argc || argv[i][0] == '-') {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[i++];
    if (strcmp(cmd, "hello") != 0 && strcmp(cmd, "status") != 0 &&
        strcmp(cmd, "attention-demo") != 0 && strcmp(cmd, "reconfigure") != 0) {
        fprintf(stderr, "weftctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((strcmp(cmd, "hello") == 0 || strcmp(cmd, "status") == 0) && i < argc) {
        fprintf(stderr, "weftctl: %s takes no arguments\n", cmd);
        return EXIT_USAGE;
    }
    if (endpoint && !*endpoint)
        endpoint = NULL;

    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(endpoint, (int)timeout, &c);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: connect to %s: %s\n",
                endpoint ? endpoint : WF_DEFAULT_ENDPOINT, wf_status_name(st));
        return 1;
    }
    int rc;
    if (strcmp(cmd, "hello") == 0)
        rc = cmd_hello(c);
    else if (strcmp(cmd, "status") == 0)
        rc = cmd_status(c);
    else if (strcmp(cmd, "reconfigure") == 0)
        rc = cmd_reconfigure(c, argc - i, argv + i);
    else
        rc = cmd_demo(c, argc - i, argv + i);
    wf_client_destroy(&c);
    return rc;
}
