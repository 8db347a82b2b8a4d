/* weftctl.c — command line of weftd. It talks to the daemon through
 * libweft only; the model commands also use daemon modules locally
 * (tp_plan.h to read --tp-plan, safetensors.h to read --inputs,
 * flux_host.h to write a sharded checkpoint), never to reach the daemon.
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
 *   weftctl [--endpoint E] [--timeout MS] load NAME PATH
 *       [--tp-plan FILE.json] [--sharded]
 *   weftctl [--endpoint E] [--timeout MS] unload NAME
 *   weftctl [--endpoint E] [--timeout MS] models
 *   weftctl [--endpoint E] [--timeout MS] forward --model NAME
 *       --inputs FILE.safetensors [--out-dtype f32|f16|bf16] [--iters N]
 *   weftctl shard --model-root ROOT --path P --tp T --out DIR
 *       [--tp-plan FILE.json]
 *
 * reconfigure changes the mesh of a running daemon (a degree left out is
 * 1; the product must be the daemon's device count) and prints the old
 * and new mesh and the new epoch. The daemon drains running jobs first,
 * so it can take as long as the longest of them: --timeout bounds it.
 *
 * attention-demo runs seeded random Q/K/V through the daemon and checks
 * the output (and LSE) against the fp64 reference of kernels/reference.h,
 * computed here from the same rounded inputs; it exits 0 only when the error is within the
 * tolerance of the output dtype.
 *
 * load sends load_model (PATH relative to the daemon's model root) on one
 * connection from a thread while the main thread asks list_models on a
 * second one every 200 ms and draws the progress on stderr (a bar redrawn
 * with '\r' on a terminal, else a line per 10 %); it prints the model at
 * the end. Without --timeout it waits up to an hour. --tp-plan reads a
 * plan in its JSON wire form ({"glob": "style" | {"style": s, "blocks":
 * [..]}}); --sharded loads per-rank files written by `shard`.
 *
 * forward reads the inputs from a safetensors file whose tensors carry
 * the input names (hidden_states, encoder_hidden_states,
 * pooled_projections, timestep, img_ids, txt_ids, guidance if the model
 * takes it), runs the forward and prints its time. When the file also
 * holds `output_f64` (preferred) or `output`, it is the reference: the
 * output shape is taken from it (else hidden_states' shape) and the max
 * abs error is checked against a tolerance of max|ref| times 1e-4 (f32),
 * 4e-3 (f16) or 3e-2 (bf16), the looser of the inputs' and the output's
 * dtype: PASS, or FAIL and exit 1.
 *
 * shard writes the per-rank layout of flux_host.h for T ranks locally,
 * without a daemon (ROOT is the model root, P the model directory under it).
 *
 * Endpoint: --endpoint, else $WEFT_ENDPOINT, else WF_DEFAULT_ENDPOINT.
 * Exit codes: 0 success, 1 job / daemon error, a failed check or a file
 * that cannot be read, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

/* daemon modules, used locally (see above) */
#include "flux_host.h"
#include "model_root.h"
#include "reference.h"
#include "safetensors.h"
#include "tensor.h"
#include "tp_plan.h"

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
        "  load NAME PATH [--tp-plan FILE.json] [--sharded]\n"
        "                   load a model (PATH under the daemon's model root);\n"
        "                   progress on stderr, the model on stdout; without\n"
        "                   --timeout waits up to an hour\n"
        "  unload NAME      unload a model\n"
        "  models           list the models (state, size, tp, progress)\n"
        "  forward --model NAME --inputs FILE.safetensors [--out-dtype D]\n"
        "          [--iters N]\n"
        "                   run a forward on the file's inputs; checks the\n"
        "                   output against the file's output_f64 / output\n"
        "  shard --model-root ROOT --path P --tp T --out DIR [--tp-plan FILE.json]\n"
        "                   write per-rank checkpoint files (no daemon needed)\n"
        "endpoint: --endpoint, else $WEFT_ENDPOINT, else %s\n"
        "exit: 0 ok, 1 job or daemon error / failed check / unreadable file,\n"
        "      2 usage\n",
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
} demo_t;

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

    const wf_ref_attn_t ra = { .B = p.B, .Sq = p.Sq, .Skv = p.Skv, .Hq = p.Hq,
                               .Hkv = p.Hkv, .D = p.D,
                               .scale = 1.0 / sqrt((double)p.D),
                               .causal = p.causal != 0 };
    wf_status_t st = wf_ref_attention(&ra, qf, kf, vf, ref, ref_lse);
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
    free(qf);
    free(kf);
    free(vf);
    free(ref);
    free(ref_lse);
    free(times);
    return rc;
}

/* ---- resident models: load / unload / models / forward / shard -------- */

/* Read a whole small file (a tp plan) into a NUL-terminated buffer;
 * caller frees. NULL with a message on stderr. */
static char *read_small_file(const char *path, size_t max, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "weftctl: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    bool err = ferror(f) != 0;
    fclose(f);
    if (!buf || err || n > max) {
        fprintf(stderr, "weftctl: %s: %s\n", path,
                !buf ? "out of memory" : err ? "read error" : "file too large");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *ret_len = n;
    return buf;
}

/* --tp-plan FILE.json: the wire form of a plan (tp_plan.h), checked. */
static int load_plan_file(const char *path, wf_tp_plan_t *plan)
{
    size_t len = 0;
    char *json = read_small_file(path, 1u << 20, &len);
    if (!json)
        return 1;
    char err[512];
    wf_status_t st = wf_tp_plan_from_json(json, len, path, plan, err, sizeof err);
    free(json);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: --tp-plan: %s: %s\n", wf_status_name(st), err);
        return 1;
    }
    return 0;
}

/* A parameter count: 145288, 12.5 M, 11.90 G. */
static void human_count(char *buf, size_t len, uint64_t n)
{
    if (n < 1000000)
        snprintf(buf, len, "%" PRIu64, n);
    else if (n < 1000000000)
        snprintf(buf, len, "%.1f M", (double)n * 1e-6);
    else
        snprintf(buf, len, "%.2f G", (double)n * 1e-9);
}

static void print_model(const wf_model_info_t *m)
{
    char total[32], host[32], rank[32], params[32];
    human_count(params, sizeof params, m->params);
    human_bytes(total, sizeof total, m->bytes_total);
    human_bytes(host, sizeof host, m->host_bytes);
    human_bytes(rank, sizeof rank, m->rank_bytes);
    printf("model %s  path %s  family %s  dtype %s  state %s\n", m->name, m->path,
           m->family, m->dtype, m->state);
    printf("params %s  checkpoint %s  host copy %s  per rank %s  tp %u%s\n",
           params, total, host, rank, m->tp,
           m->sharded_input ? "  (loaded from per-rank files)" : "");
    printf("loaded in %.3f s\n", (double)m->load_ms / 1000.0);
}

/* What `load` shares between its loading thread and the progress loop. */
typedef struct load_job {
    wf_client_t *client;        /* connection of the load (its thread only) */
    const char *name, *path;
    wf_load_opts_t opts;
    wf_model_info_t info;       /* filled on success */
    wf_status_t st;             /* the load's status */
    char err[512];              /* its message */
    pthread_mutex_t mu;         /* guards done */
    pthread_cond_t cv;          /* signalled when done */
    bool done;
} load_job_t;

static void *load_thread(void *arg)
{
    load_job_t *j = arg;
    wf_status_t st = wf_load_model(j->client, j->name, j->path, &j->opts, &j->info);
    snprintf(j->err, sizeof j->err, "%s", wf_client_last_error(j->client));
    pthread_mutex_lock(&j->mu);
    j->st = st;
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Progress of a load on stderr: a bar redrawn with '\r' on a terminal,
 * else one line per 10 %. */
typedef struct progress {
    bool tty;
    int decile;                 /* last tenth printed (lines) */
    bool drawn;                 /* a bar is on the line (tty) */
} progress_t;

static void progress_draw(progress_t *p, const char *name, uint64_t done, uint64_t total)
{
    double frac = total ? (double)done / (double)total : 0.0;
    if (frac > 1.0)
        frac = 1.0;
    char d[32], t[32];
    human_bytes(d, sizeof d, done);
    human_bytes(t, sizeof t, total);
    if (p->tty) {
        char bar[31];
        int fill = (int)(frac * 30.0);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\rloading %s [%s] %3d%%  %s / %s   ", name, bar,
                (int)(frac * 100.0), d, t);
        p->drawn = true;
    } else {
        /* each tenth crossed since the last poll gets its line, with its
         * own figure; the last one with the bytes read so far */
        int dec = (int)(frac * 10.0);
        for (int k = p->decile + 1; k <= dec; k++) {
            if (k < dec)
                human_bytes(d, sizeof d, total / 10 * (uint64_t)k);
            else
                human_bytes(d, sizeof d, done);
            fprintf(stderr, "loading %s: %3d%%  (%s of %s)\n", name, k * 10, d, t);
        }
        if (dec > p->decile)
            p->decile = dec;
    }
    fflush(stderr);
}

/* A load can take minutes: without --timeout, wait up to an hour. */
#define LOAD_DEFAULT_TIMEOUT_MS 3600000

static int cmd_load(const char *endpoint, int timeout_ms, int argc, char **argv)
{
    const char *pos[2] = { NULL, NULL };
    const char *plan_file = NULL;
    int npos = 0;
    bool sharded = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--sharded") == 0) {
            sharded = true;
        } else if (strcmp(argv[i], "--tp-plan") == 0 && i + 1 < argc) {
            plan_file = argv[++i];
        } else if (argv[i][0] == '-' || npos == 2) {
            fprintf(stderr, "weftctl: load: %s: unknown option, missing value or extra "
                    "argument\n", argv[i]);
            return EXIT_USAGE;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 2) {
        fprintf(stderr, "weftctl: load NAME PATH [--tp-plan FILE.json] [--sharded]\n");
        return EXIT_USAGE;
    }

    static wf_tp_plan_t plan; /* large: not on the stack */
    load_job_t j;
    memset(&j, 0, sizeof j);
    j.name = pos[0];
    j.path = pos[1];
    j.opts.weights_already_sharded = sharded;
    if (plan_file) {
        if (load_plan_file(plan_file, &plan) != 0)
            return 1;
        j.opts.plan = plan.rules;
        j.opts.n_plan = plan.n;
    }

    /* Two connections: the load blocks one until the model is resident;
     * the other asks list_models for the progress. */
    wf_client_t *poll = NULL;
    wf_status_t st = wf_client_connect(endpoint, timeout_ms, &j.client);
    if (st == WF_OK)
        st = wf_client_connect(endpoint, timeout_ms < 5000 ? timeout_ms : 5000, &poll);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: connect to %s: %s\n",
                endpoint ? endpoint : WF_DEFAULT_ENDPOINT, wf_status_name(st));
        wf_client_destroy(&j.client);
        return 1;
    }
    pthread_mutex_init(&j.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    if (pthread_create(&th, NULL, load_thread, &j) != 0) {
        fprintf(stderr, "weftctl: cannot start a thread\n");
        pthread_cond_destroy(&j.cv);
        pthread_mutex_destroy(&j.mu);
        wf_client_destroy(&poll);
        wf_client_destroy(&j.client);
        return 1;
    }

    progress_t pr = { .tty = isatty(STDERR_FILENO) == 1, .decile = 0 };
    wf_model_info_t *list = calloc(WF_MODELS_MAX, sizeof *list);
    struct timespec tick;
    pthread_mutex_lock(&j.mu);
    while (!j.done) {
        /* 200 ms after the last poll, or at once when the load returns */
        clock_gettime(CLOCK_MONOTONIC, &tick);
        tick.tv_nsec += 200 * 1000000L;
        if (tick.tv_nsec >= 1000000000L) {
            tick.tv_sec++;
            tick.tv_nsec -= 1000000000L;
        }
        while (!j.done && pthread_cond_timedwait(&j.cv, &j.mu, &tick) != ETIMEDOUT)
            ;
        if (j.done)
            break;
        pthread_mutex_unlock(&j.mu);
        size_t n = 0;
        if (list && wf_list_models(poll, list, WF_MODELS_MAX, &n) == WF_OK) {
            for (size_t i = 0; i < n && i < WF_MODELS_MAX; i++)
                if (strcmp(list[i].name, j.name) == 0 && list[i].bytes_total > 0)
                    progress_draw(&pr, j.name, list[i].bytes_loaded, list[i].bytes_total);
        }
        pthread_mutex_lock(&j.mu);
    }
    pthread_mutex_unlock(&j.mu);
    pthread_join(th, NULL);
    free(list);

    if (j.st == WF_OK)
        progress_draw(&pr, j.name, j.info.bytes_total, j.info.bytes_total);
    if (pr.tty && pr.drawn)
        fputc('\n', stderr);
    int rc = 0;
    if (j.st != WF_OK) {
        fprintf(stderr, "weftctl: load: %s: %s\n", wf_status_name(j.st),
                j.err[0] ? j.err : wf_status_str(j.st));
        rc = 1;
    } else {
        print_model(&j.info);
    }
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    wf_client_destroy(&poll);
    wf_client_destroy(&j.client);
    return rc;
}

static int cmd_unload(wf_client_t *c, int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '-') {
        fprintf(stderr, "weftctl: unload NAME\n");
        return EXIT_USAGE;
    }
    wf_status_t st = wf_unload_model(c, argv[0]);
    if (st != WF_OK)
        return report_error(c, st, "unload");
    printf("unloaded %s\n", argv[0]);
    return 0;
}

static int cmd_models(wf_client_t *c)
{
    wf_model_info_t *m = calloc(WF_MODELS_MAX, sizeof *m);
    if (!m) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    size_t n = 0;
    wf_status_t st = wf_list_models(c, m, WF_MODELS_MAX, &n);
    if (st != WF_OK) {
        free(m);
        return report_error(c, st, "models");
    }
    printf("%-20s %-8s %-6s %-5s %10s %3s %11s %11s %6s %9s  %s\n", "NAME", "STATE",
           "FAMILY", "DTYPE", "PARAMS", "TP", "PER RANK", "HOST", "LOADED", "LOAD TIME",
           "PATH");
    for (size_t i = 0; i < n && i < WF_MODELS_MAX; i++) {
        const wf_model_info_t *x = &m[i];
        char rank[32], host[32], params[32], when[32];
        human_bytes(rank, sizeof rank, x->rank_bytes);
        human_bytes(host, sizeof host, x->host_bytes);
        human_count(params, sizeof params, x->params);
        double pct = x->bytes_total
            ? 100.0 * (double)x->bytes_loaded / (double)x->bytes_total : 0.0;
        snprintf(when, sizeof when, "%.1f s", (double)x->load_ms / 1000.0);
        printf("%-20s %-8s %-6s %-5s %10s %3u %11s %11s %5.1f%% %9s  %s%s\n", x->name,
               x->state, x->family, x->dtype, params, x->tp, rank, host, pct, when,
               x->path, x->sharded_input ? " (sharded)" : "");
    }
    if (n == 0)
        printf("(no models)\n");
    free(m);
    return 0;
}

/* The tensors of a forward's inputs file, opened by `forward --inputs`. */
typedef struct inputs_file {
    wf_safetensors_t *st;
    wf_tensor_t t[7];           /* wf_flux_inputs_t's order */
    bool have[7];
} inputs_file_t;

static const char *const input_names[7] = {
    "hidden_states", "encoder_hidden_states", "pooled_projections", "timestep",
    "img_ids", "txt_ids", "guidance"
};

/* A tensor of the file as a borrowed wf_tensor_t (the mapping's bytes:
 * libweft only reads inputs). False with a message for a scalar. */
static bool file_tensor(const wf_safetensors_t *st, size_t i, wf_tensor_t *t)
{
    const wf_st_tensor_t *x = wf_safetensors_tensor(st, i);
    if (x->rank < 1 || x->numel == 0) {
        fprintf(stderr, "weftctl: tensor %s of %s is a scalar or empty\n", x->name,
                wf_safetensors_path(st));
        return false;
    }
    memset(t, 0, sizeof *t);
    t->data = (void *)wf_safetensors_data(st, i);
    t->dtype = x->dtype;
    t->rank = x->rank;
    memcpy(t->shape, x->shape, sizeof t->shape);
    return true;
}

/* Tolerance factor of a dtype, relative to max |reference|. */
static double dtype_tol(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 1e-4 : dt == WF_DTYPE_F16 ? 4e-3 : 3e-2;
}

static int cmd_forward(wf_client_t *c, int argc, char **argv)
{
    const char *model = NULL, *inputs = NULL;
    bool has_odt = false;
    wf_dtype_t odt = WF_DTYPE_F32;
    int64_t iters = 1;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "weftctl: forward: %s: unknown option or missing value\n",
                    argv[i]);
            return EXIT_USAGE;
        }
        const char *a = argv[i], *v = argv[++i];
        if (strcmp(a, "--model") == 0) {
            model = v;
        } else if (strcmp(a, "--inputs") == 0) {
            inputs = v;
        } else if (strcmp(a, "--out-dtype") == 0) {
            if (strcmp(v, "f32") == 0)
                odt = WF_DTYPE_F32;
            else if (strcmp(v, "f16") == 0)
                odt = WF_DTYPE_F16;
            else if (strcmp(v, "bf16") == 0)
                odt = WF_DTYPE_BF16;
            else {
                fprintf(stderr, "weftctl: --out-dtype: f32, f16 or bf16\n");
                return EXIT_USAGE;
            }
            has_odt = true;
        } else if (strcmp(a, "--iters") == 0) {
            if (!parse_i64(v, 1, 1 << 20, &iters)) {
                fprintf(stderr, "weftctl: --iters: bad value '%s'\n", v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "weftctl: forward: unknown option %s\n", a);
            return EXIT_USAGE;
        }
    }
    if (!model || !inputs) {
        fprintf(stderr, "weftctl: forward --model NAME --inputs FILE.safetensors "
                "[--out-dtype D] [--iters N]\n");
        return EXIT_USAGE;
    }

    /* The file's directory is the "root" its name is resolved under. */
    char dir[4096], err[512];
    const char *slash = strrchr(inputs, '/');
    const char *base = slash ? slash + 1 : inputs;
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == inputs)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - inputs), inputs);
    int fd = -1;
    inputs_file_t in;
    memset(&in, 0, sizeof in);
    wf_status_t st = wf_model_root_open(dir, &fd, err, sizeof err);
    if (st == WF_OK) {
        st = wf_safetensors_open(fd, base, NULL, &in.st, err, sizeof err);
        close(fd);
    }
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: --inputs %s: %s: %s\n", inputs, wf_status_name(st), err);
        return 1;
    }
    int rc = 1;
    void *out = NULL;
    float *got = NULL, *ref = NULL;
    double *times = NULL;
    for (int i = 0; i < 7; i++) {
        ptrdiff_t k = wf_safetensors_find(in.st, input_names[i]);
        if (k < 0) {
            if (i == 6)
                continue; /* guidance: only guidance_embeds models */
            fprintf(stderr, "weftctl: %s has no tensor %s\n", inputs, input_names[i]);
            goto done;
        }
        if (!file_tensor(in.st, (size_t)k, &in.t[i]))
            goto done;
        in.have[i] = true;
    }
    /* The reference output, when the file holds one: output_f64 (an fp64
     * reference, stored rounded to f32), else output. */
    ptrdiff_t ri = wf_safetensors_find(in.st, "output_f64");
    if (ri < 0)
        ri = wf_safetensors_find(in.st, "output");
    wf_tensor_t ref_t;
    memset(&ref_t, 0, sizeof ref_t);
    if (ri >= 0 && !file_tensor(in.st, (size_t)ri, &ref_t))
        goto done;
    const wf_tensor_t *hs = &in.t[0];
    /* Output shape: the reference's; without one, hidden_states' (FLUX's
     * out_channels defaults to in_channels, with patch 1). */
    wf_tensor_t to = *hs;
    if (ri >= 0) {
        memcpy(to.shape, ref_t.shape, sizeof to.shape);
        to.rank = ref_t.rank;
    }
    to.dtype = has_odt ? odt : hs->dtype;
    int64_t numel = wf_tensor_numel(&to);
    if (numel <= 0 || numel > ((int64_t)1 << 34)) {
        fprintf(stderr, "weftctl: output shape out of range\n");
        goto done;
    }
    out = calloc((size_t)numel, wf_dtype_size(to.dtype));
    times = malloc((size_t)iters * sizeof *times);
    if (!out || !times) {
        fprintf(stderr, "weftctl: out of memory\n");
        goto done;
    }
    to.data = out;
    wf_flux_inputs_t fi = {
        .hidden_states = &in.t[0], .encoder_hidden_states = &in.t[1],
        .pooled_projections = &in.t[2], .timestep = &in.t[3], .img_ids = &in.t[4],
        .txt_ids = &in.t[5], .guidance = in.have[6] ? &in.t[6] : NULL,
    };
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    for (int64_t it = 0; it < iters; it++) {
        double t0 = now_s();
        st = wf_forward(c, model, &fi, &to, &res);
        times[it] = now_s() - t0;
        if (st != WF_OK) {
            report_error(c, st, "forward");
            goto done;
        }
    }
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    printf("forward %s  B=%" PRId64 " S_img=%" PRId64 " S_txt=%" PRId64 "%s  %s -> %s"
           "  devices %u  epoch %" PRIu64 "\n", model, hs->shape[0], hs->shape[1],
           in.t[1].shape[1], in.have[6] ? " guidance" : "", wf_dtype_name(hs->dtype),
           wf_dtype_name(to.dtype), res.devices, res.epoch);
    printf("time %.3f ms median, %.3f ms best over %" PRId64 " iteration%s "
           "(daemon: queue %" PRIu64 " us, compute %" PRIu64 " us)\n",
           times[iters / 2] * 1e3, times[0] * 1e3, iters, iters == 1 ? "" : "s",
           res.queue_us, res.compute_us);
    if (ri < 0) {
        rc = 0;
        goto done;
    }
    got = malloc((size_t)numel * sizeof *got);
    ref = malloc((size_t)numel * sizeof *ref);
    if (!got || !ref) {
        fprintf(stderr, "weftctl: out of memory\n");
        goto done;
    }
    wf_convert_to_f32(got, out, to.dtype, (size_t)numel);
    wf_convert_to_f32(ref, ref_t.data, ref_t.dtype, (size_t)numel);
    double max_err = 0.0, max_ref = 0.0;
    for (int64_t i = 0; i < numel; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (!(e <= max_err))
            max_err = e; /* NaN sticks */
        if (fabs((double)ref[i]) > max_ref)
            max_ref = fabs((double)ref[i]);
    }
    /* the looser of the inputs' and the output's dtype */
    double f = fmax(dtype_tol(hs->dtype), dtype_tol(to.dtype));
    double tol = f * max_ref;
    bool pass = max_err <= tol;
    printf("max abs error %.3e (tolerance %.3e) %s\n", max_err, tol, pass ? "PASS" : "FAIL");
    rc = pass ? 0 : 1;

done:
    free(out);
    free(got);
    free(ref);
    free(times);
    wf_safetensors_close(&in.st);
    return rc;
}

static int cmd_shard(int argc, char **argv)
{
    const char *root = NULL, *path = NULL, *out = NULL, *plan_file = NULL;
    int64_t tp = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "weftctl: shard: %s: unknown option or missing value\n",
                    argv[i]);
            return EXIT_USAGE;
        }
        const char *a = argv[i], *v = argv[++i];
        if (strcmp(a, "--model-root") == 0)
            root = v;
        else if (strcmp(a, "--path") == 0)
            path = v;
        else if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--tp-plan") == 0)
            plan_file = v;
        else if (strcmp(a, "--tp") == 0) {
            if (!parse_i64(v, 1, 4096, &tp)) {
                fprintf(stderr, "weftctl: --tp: a degree 1..4096, got '%s'\n", v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "weftctl: shard: unknown option %s\n", a);
            return EXIT_USAGE;
        }
    }
    if (!root || !path || !out || tp == 0) {
        fprintf(stderr, "weftctl: shard --model-root ROOT --path P --tp T --out DIR "
                "[--tp-plan FILE.json]\n");
        return EXIT_USAGE;
    }
    static wf_tp_plan_t plan; /* large: not on the stack */
    if (plan_file && load_plan_file(plan_file, &plan) != 0)
        return 1;
    char err[512];
    int fd = -1;
    wf_status_t st = wf_model_root_open(root, &fd, err, sizeof err);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: --model-root %s: %s: %s\n", root, wf_status_name(st), err);
        return 1;
    }
    double t0 = now_s();
    st = wf_flux_write_sharded(fd, path, plan_file ? &plan : NULL, (int)tp, out, err,
                               sizeof err);
    close(fd);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: shard: %s: %s\n", wf_status_name(st), err);
        return 1;
    }
    printf("wrote %s: config.json and %" PRId64 " rank file%s "
           "tp-rank-RRRRR-of-%05" PRId64 ".safetensors (plan: %s) in %.3f s\n",
           out, tp, tp == 1 ? "" : "s", tp, plan_file ? plan_file : "FLUX default",
           now_s() - t0);
    return 0;
}

int main(int argc, char **argv)
{
    const char *endpoint = getenv("WEFT_ENDPOINT");
    int64_t timeout = 30000;
    bool timeout_given = false;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--endpoint") == 0 && i + 1 < argc) {
            endpoint = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (!parse_i64(argv[++i], 1, INT32_MAX, &timeout)) {
                fprintf(stderr, "weftctl: --timeout: milliseconds > 0\n");
                return EXIT_USAGE;
            }
            timeout_given = true;
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
    static const char *const commands[] = { "hello", "status", "attention-demo",
                                            "reconfigure", "load", "unload", "models",
                                            "forward", "shard" };
    size_t k = 0;
    while (k < sizeof commands / sizeof commands[0] && strcmp(cmd, commands[k]) != 0)
        k++;
    if (k == sizeof commands / sizeof commands[0]) {
        fprintf(stderr, "weftctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((strcmp(cmd, "hello") == 0 || strcmp(cmd, "status") == 0 ||
         strcmp(cmd, "models") == 0) && i < argc) {
        fprintf(stderr, "weftctl: %s takes no arguments\n", cmd);
        return EXIT_USAGE;
    }
    if (endpoint && !*endpoint)
        endpoint = NULL;
    /* shard works on files only; load opens its own two connections */
    if (strcmp(cmd, "shard") == 0)
        return cmd_shard(argc - i, argv + i);
    if (strcmp(cmd, "load") == 0)
        return cmd_load(endpoint, timeout_given ? (int)timeout : LOAD_DEFAULT_TIMEOUT_MS,
                        argc - i, argv + i);

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
    else if (strcmp(cmd, "unload") == 0)
        rc = cmd_unload(c, argc - i, argv + i);
    else if (strcmp(cmd, "models") == 0)
        rc = cmd_models(c);
    else if (strcmp(cmd, "forward") == 0)
        rc = cmd_forward(c, argc - i, argv + i);
    else
        rc = cmd_demo(c, argc - i, argv + i);
    wf_client_destroy(&c);
    return rc;
}
