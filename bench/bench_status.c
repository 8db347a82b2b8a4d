/* bench_status.c — how long `status` takes while the daemon is busy:
 * CLIENTS connections (default 64) each submit attention jobs back to
 * back (one in flight per connection, a new one as soon as the reply is
 * in) while one more connection asks for status every 20 ms; prints the
 * status latency p50 / p99 / max and the jobs per second, as a markdown
 * row. With --metrics it also gets http://127.0.0.1:PORT/metrics (the
 * metrics_listen endpoint, a plain HTTP/1.0 request over a socket) every
 * 20 ms from another thread and prints its latency the same way.
 *
 * usage: bench_status PATH_TO_WEFTD [--seconds N] [--clients N]
 *                     [--metrics] [--poll] [--devices cpu:N] [--seq S]
 *
 * Starts its own weftd (cpu:2 by default) on an ipc endpoint with
 * queue_capacity 1024 (every client keeps one job queued) and stops it
 * with SIGTERM (drain_timeout_ms 1000: what is still queued then is
 * refused, so the clients' last calls end at once). Jobs: q, k, v (1, S, 8, 64) f32, S = 512 by default
 * (about 0.27 GFLOP each: tens of ms on one core), so the workers are
 * busy the whole run. The status figures are wall-clock round trips of
 * wf_status on its own connection, after a 1 s warm-up.
 *
 * --poll makes the clients busy: each submits with wf_attention_submit
 * and spins on wf_job_poll until the reply is in, so 64 threads are
 * runnable all the time at weftd's own priority (the worst case for the
 * daemon's main thread and ZeroMQ's I/O thread, which must be scheduled
 * to answer). Without it the clients block in wf_job_wait.
 * The status client runs at the clients' priority: its own wait for a
 * core is in the figures, as it is for weftctl among busy clients.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

#define MAX_CLIENTS 256
#define MAX_SAMPLES 100000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct samples {
    double t[MAX_SAMPLES];
    int n;
    int errors;
} samples_t;

static double quantile(samples_t *s, double q)
{
    if (s->n == 0)
        return 0.0;
    qsort(s->t, (size_t)s->n, sizeof s->t[0], cmp_double);
    int i = (int)(q * (s->n - 1) + 0.5);
    return s->t[i];
}

typedef struct bench {
    const char *endpoint;
    int seq;
    bool poll;
    atomic_bool stop;
    atomic_bool measuring;
    atomic_ullong jobs_ok, jobs_err;
    int metrics_port;
    samples_t status;
    samples_t metrics;
} bench_t;

static void fill(float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] = a * (float)((i * 2654435761u) % 1000u) * 1e-3f - 0.5f * a;
}

static void *submitter(void *p)
{
    bench_t *b = p;
    size_t n = (size_t)b->seq * 8 * 64;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
    wf_client_t *c = NULL;
    if (!q || !k || !v || !o || wf_client_connect(b->endpoint, 120000, &c) != WF_OK) {
        fprintf(stderr, "bench_status: client: cannot start\n");
        goto done;
    }
    fill(q, n, 1.0f);
    fill(k, n, 0.7f);
    fill(v, n, 2.0f);
    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { 1, b->seq, 8, 64 } };
    wf_tensor_t tk = { k, WF_DTYPE_F32, 4, { 1, b->seq, 8, 64 } };
    wf_tensor_t tv = { v, WF_DTYPE_F32, 4, { 1, b->seq, 8, 64 } };
    wf_tensor_t to = { o, WF_DTYPE_F32, 4, { 1, b->seq, 8, 64 } };
    while (!atomic_load(&b->stop)) {
        /* submit, then wait: spinning on wf_job_poll (--poll: a busy
         * client, runnable all the time) or blocking in wf_job_wait; give
         * up 3 s after the end (the daemon is gone then) */
        wf_job_t *job = NULL;
        wf_status_t st = wf_attention_submit(c, &tq, &tk, &tv, NULL, &to, NULL, &job);
        double give_up = 0.0;
        while (st == WF_OK) {
            st = b->poll ? wf_job_poll(c, job) : wf_job_wait(c, job, 200);
            if (st != WF_E_PENDING && st != WF_E_TIMEOUT)
                break;
            st = WF_OK;
            if (atomic_load(&b->stop)) {
                if (give_up == 0.0)
                    give_up = now_s() + 3.0;
                else if (now_s() > give_up) {
                    st = WF_E_TIMEOUT;
                    break;
                }
            }
        }
        wf_job_destroy(c, &job);
        if (!atomic_load(&b->measuring))
            continue;
        if (st == WF_OK) {
            atomic_fetch_add(&b->jobs_ok, 1);
        } else if (atomic_fetch_add(&b->jobs_err, 1) == 0) {
            fprintf(stderr, "bench_status: first job error: %s: %s\n",
                    wf_status_name(st), wf_client_last_error(c));
        }
    }
done:
    wf_client_destroy(&c);
    free(q);
    free(k);
    free(v);
    free(o);
    return NULL;
}

/* GET /metrics over a plain socket (HTTP/1.0): true on a 200. */
static bool get_metrics(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
            char buf[65536];
            size_t got = 0;
            ssize_t r;
            while ((r = read(fd, buf + got, sizeof buf - 1 - got)) > 0) {
                got += (size_t)r;
                if (got == sizeof buf - 1)
                    got = 0;   /* only the status line matters */
            }
            buf[got] = '\0';
            ok = true;
        }
    }
    close(fd);
    return ok;
}

static void *metrics_poller(void *p)
{
    bench_t *b = p;
    while (!atomic_load(&b->stop)) {
        double t0 = now_s();
        bool ok = get_metrics(b->metrics_port);
        double dt = now_s() - t0;
        if (atomic_load(&b->measuring)) {
            if (!ok)
                b->metrics.errors++;
            else if (b->metrics.n < MAX_SAMPLES)
                b->metrics.t[b->metrics.n++] = dt;
        }
        sleep_s(0.02);
    }
    return NULL;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD [--seconds N] [--clients N] "
                "[--metrics] [--poll] [--devices cpu:N] [--seq S]\n", argv[0]);
        return 2;
    }
    static bench_t b;
    double seconds = 10.0;
    int clients = 64;
    bool metrics = false;
    const char *devices = "cpu:2";
    b.seq = 512;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
            clients = atoi(argv[++i]);
        else if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc)
            devices = argv[++i];
        else if (strcmp(argv[i], "--seq") == 0 && i + 1 < argc)
            b.seq = atoi(argv[++i]);
        else if (strcmp(argv[i], "--metrics") == 0)
            metrics = true;
        else if (strcmp(argv[i], "--poll") == 0)
            b.poll = true;

        else {
            fprintf(stderr, "bench_status: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (clients < 1 || clients > MAX_CLIENTS || seconds <= 0 || b.seq < 1) {
        fprintf(stderr, "bench_status: bad arguments\n");
        return 2;
    }
    char endpoint[128], listen_arg[160];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/bench_status.%d.sock", (int)getpid());
    snprintf(listen_arg, sizeof listen_arg, "%s", endpoint);
    char mlisten[64] = "";
    if (metrics) {
        b.metrics_port = free_port();
        snprintf(mlisten, sizeof mlisten, "127.0.0.1:%d", b.metrics_port);
    }
    b.endpoint = endpoint;

    pid_t pid = fork();
    if (pid == 0) {
        const char *args[16] = { argv[1], "--devices", devices, "--listen", listen_arg,
                                 "--log-level", "error", "--queue-capacity", "1024",
                                 "--drain-timeout-ms", "1000" };
        int n = 11;
        if (metrics) {
            args[n++] = "--metrics-listen";
            args[n++] = mlisten;
        }
        args[n] = NULL;
        execv(argv[1], (char *const *)args);
        perror("execv weftd");
        _exit(127);
    }
    wf_client_t *sc = NULL;
    wf_hello_info_t hi;
    if (wf_client_connect(endpoint, 30000, &sc) != WF_OK || wf_hello(sc, &hi) != WF_OK) {
        fprintf(stderr, "bench_status: daemon did not answer hello\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    pthread_t th[MAX_CLIENTS], mth;
    for (int i = 0; i < clients; i++)
        pthread_create(&th[i], NULL, submitter, &b);
    if (metrics)
        pthread_create(&mth, NULL, metrics_poller, &b);
    sleep_s(1.0);                      /* warm-up: every client has a job in */
    atomic_store(&b.measuring, true);
    double t_end = now_s() + seconds, t_begin = now_s();
    wf_status_info_t *si = malloc(sizeof *si);
    uint32_t max_depth = 0;
    while (si && now_s() < t_end) {
        double t0 = now_s();
        wf_status_t st = wf_status(sc, si);
        double dt = now_s() - t0;
        if (st != WF_OK)
            b.status.errors++;
        else if (b.status.n < MAX_SAMPLES) {
            b.status.t[b.status.n++] = dt;
            if (si->queue_depth > max_depth)
                max_depth = si->queue_depth;
        }
        sleep_s(0.02);
    }
    double elapsed = now_s() - t_begin;
    atomic_store(&b.measuring, false);
    atomic_store(&b.stop, true);
    /* SIGTERM first: the drain (1 s) answers what is queued, so that the
     * clients' last calls end at once */
    kill(pid, SIGTERM);
    for (int i = 0; i < clients; i++)
        pthread_join(th[i], NULL);
    if (metrics)
        pthread_join(mth, NULL);
    wf_client_destroy(&sc);
    free(si);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;

    unsigned long long ok = atomic_load(&b.jobs_ok), err = atomic_load(&b.jobs_err);
    printf("| clients | mode | devices | job (1,S,8,64) f32 | status n | p50 ms | p99 ms | max ms "
           "| status errors | max queue depth | jobs/s | job errors |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int ns = b.status.n;
    double p50 = quantile(&b.status, 0.50), p99 = quantile(&b.status, 0.99);
    double mx = ns ? b.status.t[ns - 1] : 0.0;
    printf("| %d | %s | %s | S=%d | %d | %.1f | %.1f | %.1f | %d | %u | %.1f | %llu |\n",
           clients, b.poll ? "busy (poll)" : "blocking", devices, b.seq, ns, p50 * 1e3, p99 * 1e3, mx * 1e3, b.status.errors,
           max_depth, (double)ok / elapsed, err);
    if (metrics) {
        int nm = b.metrics.n;
        double m50 = quantile(&b.metrics, 0.50), m99 = quantile(&b.metrics, 0.99);
        printf("\nGET /metrics: n %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms, errors %d\n",
               nm, m50 * 1e3, m99 * 1e3, nm ? b.metrics.t[nm - 1] * 1e3 : 0.0,
               b.metrics.errors);
    }
    bool bad = ns == 0 || b.status.errors > 0 || ok == 0 ||
               (metrics && (b.metrics.n == 0 || b.metrics.errors > 0));
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "bench_status: weftd exited with status %d\n", ws);
        bad = true;
    }
    return bad ? 1 : 0;
}
