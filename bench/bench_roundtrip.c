/* bench_roundtrip.c — latency of a tiny attention job through weftd beside
 * a raw ZeroMQ round trip of the same message, measured in the same run.
 *
 * usage: bench_roundtrip PATH_TO_WEFTD [ITERATIONS]
 *
 * Starts its own weftd (cpu:1) on an ipc endpoint and stops it with
 * SIGTERM. The job is q = k = v (1, 1, 1, 8) f32 through wf_attention
 * (synchronous). The baseline is a DEALER -> ROUTER echo over ipc, served
 * by a thread of this process with its own ZeroMQ context, of a message
 * with the same frames: the request header libweft sends (encoded with the
 * same codec) and three 32-byte tensor frames. Median and p99 over
 * ITERATIONS (default 5000) after 500 of warm-up; prints markdown rows
 * (target: weftd median <= 2x the echo median).
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

#include "proto.h"
#include "weft.h"

#define WARMUP 500

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts t in place. */
static void stats(double *t, int n, double *med, double *p99)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *med = t[n / 2];
    int i = (int)ceil(0.99 * n) - 1;
    *p99 = t[i < 0 ? 0 : i];
}

static pid_t start_daemon(const char *weftd, const char *endpoint)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = { (char *)weftd, "--devices", "cpu:1", "--listen",
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

/* ---- raw ZeroMQ echo ----------------------------------------------------- */

typedef struct echo {
    void *ctx;           /* the echo side's own context */
    void *router;        /* bound before the thread starts */
} echo_t;

/* Send every message back to its sender, frame by frame, until the
 * context is terminated. */
static void *echo_main(void *p)
{
    echo_t *e = p;
    for (;;) {
        int more;
        do {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, e->router, 0) < 0) {
                zmq_msg_close(&m);
                zmq_close(e->router);
                return NULL; /* ETERM */
            }
            more = zmq_msg_more(&m);
            if (zmq_msg_send(&m, e->router, more ? ZMQ_SNDMORE : 0) < 0) {
                zmq_msg_close(&m);
                zmq_close(e->router);
                return NULL;
            }
        } while (more);
    }
}

/* Round trips of [header, 3 x tensor] through the echo: times in t[]. */
static int echo_bench(const char *endpoint, const wf_buf_t *hdr, size_t tbytes,
                      double *t, int n)
{
    echo_t e = { zmq_ctx_new(), NULL };
    e.router = zmq_socket(e.ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(e.router, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(e.router, endpoint) != 0) {
        fprintf(stderr, "echo bind %s: %s\n", endpoint, zmq_strerror(errno));
        return -1;
    }
    pthread_t th;
    pthread_create(&th, NULL, echo_main, &e);

    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(d, endpoint);
    float tensor[8] = { 0 };
    int rc = 0;
    for (int i = -WARMUP; i < n && rc == 0; i++) {
        double t0 = now_us();
        zmq_send(d, hdr->data, hdr->len, ZMQ_SNDMORE);
        for (int f = 0; f < 3; f++)
            zmq_send(d, tensor, tbytes, f < 2 ? ZMQ_SNDMORE : 0);
        int parts = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, d, 0) < 0) {
                rc = -1;
                break;
            }
            more = zmq_msg_more(&m);
            zmq_msg_close(&m);
            parts++;
        }
        if (parts != 4)
            rc = -1;
        if (i >= 0)
            t[i] = now_us() - t0;
    }
    zmq_close(d);
    zmq_ctx_term(ctx);
    zmq_ctx_term(e.ctx); /* ends the echo thread's recv with ETERM */
    pthread_join(th, NULL);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD [ITERATIONS]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 5000;
    if (n < 100)
        n = 100;
    char ep[96], echo_ep[96];
    snprintf(ep, sizeof ep, "ipc:///tmp/weft-bench-%d-rt.sock", (int)getpid());
    snprintf(echo_ep, sizeof echo_ep, "ipc:///tmp/weft-bench-%d-echo.sock",
             (int)getpid());
    double *tw = malloc((size_t)n * sizeof *tw);
    double *te = malloc((size_t)n * sizeof *te);
    if (!tw || !te)
        return 1;

    pid_t pid = start_daemon(argv[1], ep);
    wf_client_t *c = NULL;
    if (pid < 0 || wf_client_connect(ep, 20000, &c) != WF_OK ||
        wf_hello(c, NULL) != WF_OK) {
        fprintf(stderr, "bench_roundtrip: weftd did not answer: %s\n",
                c ? wf_client_last_error(c) : "");
        if (pid > 0)
            stop_daemon(pid);
        return 1;
    }

    float q[8], k[8], v[8], out[8];
    for (int i = 0; i < 8; i++) {
        q[i] = 0.1f * (float)i;
        k[i] = 0.2f - 0.05f * (float)i;
        v[i] = (float)i;
    }
    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { 1, 1, 1, 8 } };
    wf_tensor_t tk = { k, WF_DTYPE_F32, 4, { 1, 1, 1, 8 } };
    wf_tensor_t tv = { v, WF_DTYPE_F32, 4, { 1, 1, 1, 8 } };
    wf_tensor_t to = { out, WF_DTYPE_F32, 4, { 1, 1, 1, 8 } };
    int rc = 0;
    for (int i = -WARMUP; i < n; i++) {
        double t0 = now_us();
        wf_status_t st = wf_attention(c, &tq, &tk, &tv, NULL, &to, NULL, NULL);
        double dt = now_us() - t0;
        if (st != WF_OK) {
            fprintf(stderr, "bench_roundtrip: %s: %s\n", wf_status_name(st),
                    wf_client_last_error(c));
            rc = 1;
            break;
        }
        if (i >= 0)
            tw[i] = dt;
    }
    /* One key: the output is v itself. */
    for (int i = 0; i < 8 && rc == 0; i++)
        if (fabsf(out[i] - v[i]) > 1e-6f) {
            fprintf(stderr, "bench_roundtrip: wrong output\n");
            rc = 1;
        }
    wf_client_destroy(&c);
    int drc = stop_daemon(pid);
    if (drc != 0)
        fprintf(stderr, "bench_roundtrip: weftd exited %d on SIGTERM\n", drc);
    if (rc)
        return rc;

    /* The same header libweft sent (id of the same width). */
    wf_request_t *req = calloc(1, sizeof *req);
    wf_buf_t hdr = { 0 };
    if (!req)
        return 1;
    req->version = WF_PROTOCOL_VERSION;
    req->id = (uint64_t)(n + WARMUP + 1);
    req->op = WF_OP_ATTENTION;
    req->n_tensors = 3;
    const char *names[3] = { "q", "k", "v" };
    for (int i = 0; i < 3; i++) {
        wf_tensor_desc_t *d = &req->tensors[i];
        snprintf(d->name, sizeof d->name, "%s", names[i]);
        d->dtype = WF_DTYPE_F32;
        d->rank = 4;
        d->shape[0] = d->shape[1] = d->shape[2] = 1;
        d->shape[3] = 8;
        d->frame = (uint32_t)i;
    }
    req->args.attention = (wf_attention_args_t){ .q = 0, .k = 1, .v = 2,
                                                 .has_out_dtype = true,
                                                 .out_dtype = WF_DTYPE_F32 };
    if (wf_request_encode(req, &hdr) != WF_OK ||
        echo_bench(echo_ep, &hdr, sizeof q, te, n) != 0) {
        fprintf(stderr, "bench_roundtrip: echo failed\n");
        return 1;
    }

    double wm, wp, em, ep99;
    stats(tw, n, &wm, &wp);
    stats(te, n, &em, &ep99);
    printf("| round trip (%d iterations, ipc) | median µs | p99 µs |\n", n);
    printf("|---|---|---|\n");
    printf("| weftd attention B=1 S=1 H=1 D=8 f32 (cpu:1) | %.1f | %.1f |\n", wm, wp);
    printf("| raw ZeroMQ DEALER→ROUTER echo, same frames (%zu + 3×%zu bytes) | %.1f | %.1f |\n",
           hdr.len, sizeof q, em, ep99);
    printf("| ratio weftd / echo (target ≤ 2×) | %.2f× | %.2f× |\n", wm / em,
           wp / ep99);
    wf_buf_free(&hdr);
    free(req);
    free(tw);
    free(te);
    return drc != 0;
}
