/* jobcheck.c — shared by the end-to-end attention tests (test_client,
 * test_parity, test_reconfig_load, test_cluster_jobs): seeded inputs in
 * every dtype, the error measure against the fp64 reference
 * (kernels/reference.h), the per-job options, waiting for a daemon
 * (started and stopped through support/spawn.h).
 * The reference and the dtype conversions are kernels/'s, each checked on
 * its own by test_kernels; nothing here runs the daemon's attention
 * kernels. See jobcheck.h. */
#include "jobcheck.h"
#include "support/wait.h"
#include <unistd.h>

#include "reference.h"
#include "support/spawn.h"
#include "tensor.h"

#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- dtypes: kernels/tensor.h's conversions, which test_kernels checks
 * over every f16 / bf16 pattern against references of its own ---------- */

void store(void *buf, wf_dtype_t dt, size_t i, float x)
{
    wf_elem_store(buf, dt, i, x);
}

double load(const void *buf, wf_dtype_t dt, size_t i)
{
    return wf_elem_load(buf, dt, i);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float rng_uniform(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* ---- one job: buffers, reference, check ------------------------------- */

void jbuf_free(jbuf_t *a)
{
    wf_tensor_t *t[4] = { &a->q, &a->k, &a->v, &a->out };
    for (int i = 0; i < 4; i++)
        free(t[i]->data);
    free(a->lse);
    memset(a, 0, sizeof *a);
}

bool jbuf_init(jbuf_t *a, const jcase_t *c, uint64_t seed)
{
    memset(a, 0, sizeof *a);
    a->c = *c;
    int64_t qs[4] = { c->B, c->Sq, c->Hq, c->D };
    int64_t ks[4] = { c->B, c->Skv, c->Hkv, c->D };
    wf_tensor_t *t[4] = { &a->q, &a->k, &a->v, &a->out };
    uint64_t s = seed;
    for (int i = 0; i < 4; i++) {
        wf_dtype_t dt = i < 3 ? c->in : c->out;
        t[i]->dtype = dt;
        t[i]->rank = 4;
        memcpy(t[i]->shape, i == 1 || i == 2 ? ks : qs, sizeof qs);
        size_t n = (size_t)wf_tensor_numel(t[i]);
        t[i]->data = malloc(n * wf_dtype_size(dt));
        if (!t[i]->data)
            return false;
        if (i < 3)
            for (size_t j = 0; j < n; j++)
                store(t[i]->data, dt, j, rng_uniform(&s));
        else
            memset(t[i]->data, 0xff, n * wf_dtype_size(dt)); /* NaN */
    }
    if (c->want_lse) {
        size_t nl = (size_t)(c->B * c->Sq * c->Hq);
        if (!(a->lse = malloc(nl * sizeof *a->lse)))
            return false;
        for (size_t j = 0; j < nl; j++)
            a->lse[j] = NAN;
    }
    return true;
}

/* An f32 copy of t's stored values (exact: f16 and bf16 are subsets of
 * f32). Caller owns; NULL when out of memory. */
static float *f32_copy(const wf_tensor_t *t)
{
    size_t n = (size_t)wf_tensor_numel(t);
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (f)
        wf_convert_to_f32(f, t->data, t->dtype, n);
    return f;
}

/* q (B,Sq,Hq,D), k / v (B,Skv,Hkv,D); query head h reads kv head
 * h / (Hq / Hkv); causal: query i sees keys j <= i (top-left). */
void attention_errors(const wf_tensor_t *q, const wf_tensor_t *k,
                      const wf_tensor_t *v, const wf_tensor_t *out,
                      const float *lse, int causal, float scale_opt,
                      double *ret_out, double *ret_lse)
{
    const wf_ref_attn_t ra = {
        .B = q->shape[0], .Sq = q->shape[1], .Skv = k->shape[1],
        .Hq = q->shape[2], .Hkv = k->shape[2], .D = q->shape[3],
        .scale = scale_opt > 0 ? scale_opt : 1.0 / sqrt((double)q->shape[3]),
        .causal = causal != 0,
    };
    size_t nq = (size_t)wf_tensor_numel(q), nl = (size_t)(ra.B * ra.Sq * ra.Hq);
    float *qf = f32_copy(q), *kf = f32_copy(k), *vf = f32_copy(v);
    double *ro = malloc((nq ? nq : 1) * sizeof *ro), *rl = malloc((nl ? nl : 1) * sizeof *rl);
    *ret_out = *ret_lse = INFINITY; /* out of memory or a bad geometry: a failed check */
    if (qf && kf && vf && ro && rl &&
        wf_ref_attention(&ra, qf, kf, vf, ro, rl) == WF_OK) {
        double max_err = 0.0, max_lse = 0.0;
        for (size_t i = 0; i < nq; i++) {
            double e = fabs(load(out->data, out->dtype, i) - ro[i]);
            if (!(e <= max_err))
                max_err = e; /* a NaN sticks */
        }
        for (size_t i = 0; lse && i < nl; i++) {
            double e = fabs((double)lse[i] - rl[i]) / fmax(1.0, fabs(rl[i]));
            if (!(e <= max_lse))
                max_lse = e;
        }
        *ret_out = max_err;
        *ret_lse = max_lse;
    }
    free(qf);
    free(kf);
    free(vf);
    free(ro);
    free(rl);
}

void jbuf_errors(const jbuf_t *a, double *ret_out, double *ret_lse)
{
    attention_errors(&a->q, &a->k, &a->v, &a->out, a->lse, a->c.causal,
                     a->c.scale, ret_out, ret_lse);
}

wf_attention_opts_t opts_of(const jcase_t *c)
{
    return (wf_attention_opts_t){ .scale = c->scale, .causal = c->causal,
                                  .rotate_method = c->rotate,
                                  .convert_to_fp32 = c->fp32,
                                  .ring_anything = c->ring_any,
                                  .ulysses_anything = c->uly_any,
                                  .load_balance = c->lb };
}

bool jbuf_check(const jbuf_t *a, const wf_job_result_t *res, bool quiet)
{
    double eo, el, to, tl;
    jbuf_errors(a, &eo, &el);
    jcase_tolerances(&a->c, true, &to, &tl);
    bool ok = eo <= to && (!a->c.want_lse || el <= tl);
    if (!ok || !quiet)
        printf("  %-24s out err %.2e (tol %.0e)  lse err %.2e  epoch %llu  devices %u"
               "  %s\n", a->c.name, eo, to, el, (unsigned long long)res->epoch,
               res->devices, ok ? "ok" : "FAIL");
    return ok;
}

bool jcase_run(wf_client_t *cl, const jcase_t *c, uint64_t seed, bool quiet,
               wf_job_result_t *ret_res)
{
    jbuf_t a;
    if (!jbuf_init(&a, c, seed))
        return false;
    wf_attention_opts_t o = opts_of(c);
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    wf_status_t st = wf_attention(cl, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &res);
    bool ok = st == WF_OK;
    if (!ok)
        fprintf(stderr, "case %s: %s: %s\n", c->name, wf_status_name(st),
                wf_client_last_error(cl));
    else
        ok = jbuf_check(&a, &res, quiet);
    if (ret_res)
        *ret_res = res;
    jbuf_free(&a);
    return ok;
}

bool wait_ready(const char *endpoint)
{
    wf_client_t *c = NULL;
    if (wf_client_connect(endpoint, wait_bound_ms(WAIT_EVENT_MS), &c) != WF_OK)
        return false;
    wf_status_t st = wf_hello(c, NULL);
    if (st != WF_OK)
        fprintf(stderr, "daemon not ready: %s: %s\n", wf_status_name(st),
                wf_client_last_error(c));
    wf_client_destroy(&c);
    return st == WF_OK;
}

bool stop_daemon(pid_t pid, int timeout_ms, char *err, size_t errlen)
{
    int ws = 0;
    bool killed = false;
    if (!spawn_signal_reap(pid, -1, SIGTERM, timeout_ms, "weftd", &ws, &killed) || killed) {
        snprintf(err, errlen, "weftd did not exit within %d ms of SIGTERM", timeout_ms);
        return false;
    }
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
        return true;
    char how[64];
    snprintf(err, errlen, "weftd did not exit 0 on SIGTERM (%s)",
             spawn_status_str(ws, how, sizeof how));
    return false;
}

void jcase_tolerances(const jcase_t *c, bool ring_merge, double *ret_out,
                      double *ret_lse)
{
    double out = c->out == WF_DTYPE_F32 ? 1e-4 : c->out == WF_DTYPE_F16 ? 5e-4 : 4e-3;
    if (ring_merge && c->fp32 == WF_OPT_OFF && c->in != WF_DTYPE_F32)
        out = fmax(out, c->in == WF_DTYPE_F16 ? 4e-3 : 3e-2);
    *ret_out = out;
    *ret_lse = 1e-4;
}

void block_test_signals(void)
{
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
}

pid_t spawn_daemon(const char *const argv[], const char *notify_socket)
{
    spawn_opts_t o = { .notify_path = notify_socket };
    pid_t pid;
    return spawn_exec(argv, &o, &pid, NULL) ? pid : -1;
}

unsigned jcase_burst(const char *endpoint, const jcase_t *cases, size_t n_cases, int n,
                     uint64_t seed, int timeout_ms, uint32_t devices, const char *label)
{
    static jbuf_t buf[JCASE_BURST_MAX];
    wf_job_t *job[JCASE_BURST_MAX];
    wf_client_t *cl = NULL;
    if (n > JCASE_BURST_MAX || n_cases == 0 ||
        wf_client_connect(endpoint, timeout_ms, &cl) != WF_OK)
        return 0;
    unsigned ok = 0;
    for (int i = 0; i < n; i++) {
        const jcase_t *c = &cases[(size_t)i % n_cases];
        job[i] = NULL;
        if (!jbuf_init(&buf[i], c, seed + (uint64_t)i))
            continue;
        wf_attention_opts_t o = opts_of(c);
        if (wf_attention_submit(cl, &buf[i].q, &buf[i].k, &buf[i].v, &o, &buf[i].out,
                                buf[i].lse, &job[i]) != WF_OK)
            job[i] = NULL;
    }
    for (int i = 0; i < n; i++) {
        const jcase_t *c = &cases[(size_t)i % n_cases];
        if (!job[i]) {
            jbuf_free(&buf[i]);
            continue;
        }
        wf_status_t st = wf_job_wait(cl, job[i], timeout_ms);
        wf_job_result_t res;
        memset(&res, 0, sizeof res);
        wf_job_result(job[i], &res);
        bool good = st == WF_OK && res.status == WF_OK;
        if (good) {
            double eo, el, to, tl;
            jbuf_errors(&buf[i], &eo, &el);
            jcase_tolerances(c, true, &to, &tl);
            good = eo <= to && (!c->want_lse || el <= tl) &&
                   (devices == 0 || res.devices == devices);
        } else {
            fprintf(stderr, "%s: job %d: %s: %s\n", label, i,
                    wf_status_name(st != WF_OK ? st : res.status), wf_job_error(job[i]));
        }
        ok += good;
        wf_job_destroy(cl, &job[i]);
        jbuf_free(&buf[i]);
    }
    wf_client_destroy(&cl);
    printf("%s: %u/%d jobs correct\n", label, ok, n);
    return ok;
}
