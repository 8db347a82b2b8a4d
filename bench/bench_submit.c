/* bench_submit.c — bandwidth of 256 MiB attention jobs through weftd
 * beside memcpy of 256 MiB and beside raw ZeroMQ moving the same frames,
 * all measured in the same run.
 *
 * usage: bench_submit PATH_TO_WEFTD [REPS]
 *
 * Starts its own weftd (cpu:2) on an ipc endpoint and stops it with
 * SIGTERM. Two f32 jobs that move many bytes for little compute:
 *   decode-like:  q (8, 1, 8, 128), k, v (8, 4096, 8, 128) = 128 MiB each;
 *                 out is as small as q
 *   many short:   q (16384, 8, 4, 64) = 128 MiB, k, v (16384, 4, 4, 64)
 *                 = 64 MiB each; out 128 MiB back
 * Input bytes per second = input bytes / median round trip of
 * wf_attention (send without copy, queue, compute, reply, copy into out),
 * beside memcpy of 256 MiB between two touched buffers (target: >= 25%).
 * The raw ZeroMQ column sends the same frames DEALER -> ROUTER (a thread
 * with its own context) and gets a frame of the output's size back, copied
 * out the same way: the transport's own ceiling. Median of REPS (default
 * 5) after one warm-up; prints markdown rows.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "weft.h"

#define MIB (1024.0 * 1024.0)

typedef struct shape {
    const char *name;
    int64_t B, Sq, Skv, H, D;
} shape_t;

static const shape_t shapes[] = {
    { "decode-like", 8, 1, 4096, 8, 128 },
    { "many short", 16384, 8, 4, 4, 64 },
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

static pid_t start_daemon(const char *weftd, const char *endpoint)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = { (char *)weftd, "--devices", "cpu:2", "--listen",
                         (char *)endpoint, "--log-level", "warning", NULL };
        execv(weftd, argv);
        perror("execv weftd");
        _exit(127);
    }
    return pid;
}

static int stop_daemon(pid_t pid)
{
    int ws = 0;
    kill(pid, SIGTERM);
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* Deterministic, cheap fill in [-a/2, a/2). */
static void fill(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] = a * (float)((i * 2654435761u) % 1000u) * 1e-3f - 0.5f * a;
}

/* ---- raw ZeroMQ baseline -------------------------------------------------- */

typedef struct sink {
    void *ctx;         /* the server side's own context */
    void *router;      /* bound before the thread starts */
    size_t reply;      /* bytes of the reply frame */
} sink_t;

static void no_free(void *data, void *hint)
{
    (void)data;
    (void)hint;
}

/* Take a whole message, answer [identity, reply bytes]. */
static void *sink_main(void *p)
{
    sink_t *s = p;
    char *reply = malloc(s->reply);
    if (reply)
        memset(reply, 0, s->reply);
    for (;;) {
        zmq_msg_t id, m;
        zmq_msg_init(&id);
        if (!reply || zmq_msg_recv(&id, s->router, 0) < 0)
            break;
        int more = zmq_msg_more(&id);
        while (more) {
            zmq_msg_init(&m);
            zmq_msg_recv(&m, s->router, 0);
            more = zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        zmq_msg_send(&id, s->router, ZMQ_SNDMORE);
        zmq_msg_init_data(&m, reply, s->reply, no_free, NULL);
        zmq_msg_send(&m, s->router, 0);
    }
    zmq_close(s->router);
    free(reply);
    return NULL;
}

/* Median round trip of the three frames out and `out_bytes` back, copied
 * into out as libweft does. Negative on failure. */
static double raw_zmq(const char *endpoint, void *const *data,
                      const size_t *bytes, void *out, size_t out_bytes,
                      double *t, int reps)
{
    sink_t s = { zmq_ctx_new(), NULL, out_bytes };
    int zero = 0;
    s.router = zmq_socket(s.ctx, ZMQ_ROUTER);
    zmq_setsockopt(s.router, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(s.router, endpoint) != 0)
        return -1.0;
    pthread_t th;
    pthread_create(&th, NULL, sink_main, &s);
    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(d, endpoint);
    double res = 0.0;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        for (int f = 0; f < 3; f++) {
            zmq_msg_t m;
            zmq_msg_init_data(&m, data[f], bytes[f], no_free, NULL);
            zmq_msg_send(&m, d, f < 2 ? ZMQ_SNDMORE : 0);
        }
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, d, 0) < 0 || zmq_msg_size(&m) != out_bytes) {
            zmq_msg_close(&m);
            res = -1.0;
            break;
        }
        memcpy(out, zmq_msg_data(&m), out_bytes);
        zmq_msg_close(&m);
        if (r >= 0)
            t[r] = now_s() - t0;
    }
    zmq_close(d);
    zmq_ctx_term(ctx);
    zmq_ctx_term(s.ctx); /* ends the sink's recv with ETERM */
    pthread_join(th, NULL);
    return res < 0 ? res : median(t, reps);
}

/* ---- one shape ------------------------------------------------------------ */

typedef struct row {
    double in_bytes, out_bytes;  /* per round trip */
    double weftd_s, raw_s;       /* medians */
    double compute_s;            /* daemon's compute_us, mean */
} row_t;

static int run_shape(const shape_t *sh, wf_client_t *c, const char *raw_ep,
                     double *t, int reps, row_t *row)
{
    size_t nq = (size_t)(sh->B * sh->Sq * sh->H * sh->D);
    size_t nkv = (size_t)(sh->B * sh->Skv * sh->H * sh->D);
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4);
    float *out = malloc(nq * 4);
    int rc = 1;
    if (!q || !k || !v || !out) {
        fprintf(stderr, "bench_submit: out of memory\n");
        goto done;
    }
    fill(q, nq, 1.0f);
    fill(k, nkv, 0.7f);
    fill(v, nkv, 2.0f);   /* |v| <= 1 */
    memset(out, 0, nq * 4);

    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { sh->B, sh->Sq, sh->H, sh->D } };
    wf_tensor_t tk = { k, WF_DTYPE_F32, 4, { sh->B, sh->Skv, sh->H, sh->D } };
    wf_tensor_t tv = { v, WF_DTYPE_F32, 4, { sh->B, sh->Skv, sh->H, sh->D } };
    wf_tensor_t to = { out, WF_DTYPE_F32, 4, { sh->B, sh->Sq, sh->H, sh->D } };
    wf_job_result_t res = { 0 };
    row->compute_s = 0.0;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        wf_status_t st = wf_attention(c, &tq, &tk, &tv, NULL, &to, NULL, &res);
        double dt = now_s() - t0;
        if (st != WF_OK) {
            fprintf(stderr, "bench_submit: %s: %s: %s\n", sh->name,
                    wf_status_name(st), wf_client_last_error(c));
            goto done;
        }
        if (r >= 0) {
            t[r] = dt;
            row->compute_s += (double)res.compute_us * 1e-6 / reps;
        }
    }
    /* Sanity: each output row mixes v rows with convex weights. */
    for (size_t i = 0; i < nq; i += 1031)
        if (!(fabsf(out[i]) <= 1.0f)) {
            fprintf(stderr, "bench_submit: %s: output %zu out of range: %g\n",
                    sh->name, i, (double)out[i]);
            goto done;
        }
    row->weftd_s = median(t, reps);
    row->in_bytes = (double)(nq + 2 * nkv) * 4;
    row->out_bytes = (double)nq * 4;

    void *const data[3] = { q, k, v };
    const size_t bytes[3] = { nq * 4, nkv * 4, nkv * 4 };
    row->raw_s = raw_zmq(raw_ep, data, bytes, out, nq * 4, t, reps);
    if (row->raw_s < 0) {
        fprintf(stderr, "bench_submit: raw ZeroMQ baseline failed\n");
        goto done;
    }
    rc = 0;
done:
    free(q);
    free(k);
    free(v);
    free(out);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD [REPS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1)
        reps = 1;
    double *t = malloc((size_t)(reps > 5 ? reps : 5) * sizeof *t);
    size_t mc_bytes = (size_t)256 << 20;
    char *src = malloc(mc_bytes), *dst = malloc(mc_bytes);
    if (!t || !src || !dst) {
        fprintf(stderr, "bench_submit: out of memory\n");
        return 1;
    }

    /* Baseline: memcpy of 256 MiB, pages touched first. */
    memset(src, 1, mc_bytes);
    memset(dst, 2, mc_bytes);
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        memcpy(dst, src, mc_bytes);
        t[r] = now_s() - t0;
        src[r] ^= dst[mc_bytes - 1 - (size_t)r]; /* keep the copies live */
    }
    double mc_rate = (double)mc_bytes / median(t, 5);
    free(src);
    free(dst);

    char ep[96], raw_ep[96];
    snprintf(ep, sizeof ep, "ipc:///tmp/weft-bench-%d-sub.sock", (int)getpid());
    snprintf(raw_ep, sizeof raw_ep, "ipc:///tmp/weft-bench-%d-raw.sock",
             (int)getpid());
    pid_t pid = start_daemon(argv[1], ep);
    wf_client_t *c = NULL;
    if (pid < 0 || wf_client_connect(ep, 120000, &c) != WF_OK ||
        wf_hello(c, NULL) != WF_OK) {
        fprintf(stderr, "bench_submit: weftd did not answer: %s\n",
                c ? wf_client_last_error(c) : "");
        if (pid > 0)
            stop_daemon(pid);
        return 1;
    }
    enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
    row_t rows[N_SHAPES];
    int rc = 0;
    for (int i = 0; i < N_SHAPES && rc == 0; i++)
        rc = run_shape(&shapes[i], c, raw_ep, t, reps, &rows[i]);
    wf_client_destroy(&c);
    int drc = stop_daemon(pid);
    if (drc != 0)
        fprintf(stderr, "bench_submit: weftd exited %d on SIGTERM\n", drc);
    if (rc)
        return rc;

    printf("| f32 job, cpu:2 (median of %d) | in MiB | out MiB | round trip ms "
           "(daemon compute) | input GB/s | output GB/s | input / memcpy "
           "(target ≥ 25%%) | raw ZeroMQ ms | weftd / raw ZeroMQ |\n", reps);
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < N_SHAPES; i++) {
        const shape_t *sh = &shapes[i];
        const row_t *r = &rows[i];
        double in_rate = r->in_bytes / r->weftd_s;
        printf("| %s: q (%lld,%lld,%lld,%lld), k/v Skv=%lld | %.1f | %.1f | "
               "%.1f (%.1f) | %.2f | %.2f | %.1f%% | %.1f | %.2f× |\n",
               sh->name, (long long)sh->B, (long long)sh->Sq, (long long)sh->H,
               (long long)sh->D, (long long)sh->Skv, r->in_bytes / MIB,
               r->out_bytes / MIB, r->weftd_s * 1e3, r->compute_s * 1e3,
               in_rate * 1e-9, r->out_bytes / r->weftd_s * 1e-9,
               100.0 * in_rate / mc_rate, r->raw_s * 1e3,
               r->weftd_s / r->raw_s);
    }
    printf("| memcpy of 256 MiB | 256.0 | | %.1f | %.2f | | 100%% | | |\n",
           (double)mc_bytes / mc_rate * 1e3, mc_rate * 1e-9);
    free(t);
    return drc != 0;
}
