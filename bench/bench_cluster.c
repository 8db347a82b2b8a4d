/* bench_cluster.c — time to form a world of 3 weftd daemons (cpu:2 each)
 * on loopback: from starting the two members (the coordinator already
 * serving) to the coordinator's "cluster serving" notify line, i.e. hello,
 * version check, rank assignment, world broadcast, readies and serve.
 * Baseline in the same run: a single daemon's start to READY=1.
 *
 * Then ring attention across processes: the world of 3 daemons with mesh
 * ring=6 (every ring spans the 3 processes: K/V shards travel over the
 * ZeroMQ comm backend on loopback) beside one daemon cpu:6 with the same
 * mesh (the in-process host comm), the same job (f32, B=1, S=4200, H=8,
 * D=64, non-causal), client wall time per job, median of JOBS after one
 * warm-up job.
 *
 * Then throughput of dp replicas across daemons: N ring attention jobs
 * (f32, B=1, S=2048, H=8, D=64) in flight at once on the world of 3
 * daemons with mesh dp=3,ring=2 (replicas 1 and 2 rooted on the members:
 * inputs and outputs over the tensor channel) beside one daemon cpu:2
 * with ring=2 (dp=1, one replica); jobs per second, median of 3 bursts
 * after a warm-up one. Prints markdown rows.
 *
 * Usage: bench_cluster PATH_TO_WEFTD [ROUNDS] [JOBS]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

static int cmp(const void *a, const void *b);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct proc {
    pid_t pid;
    int pidfd, nfd;
    char notify[108], endpoint[108];
} proc_t;

static int seq;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        exit(1);
    close(fd);
    return ntohs(sa.sin_port);
}

static bool start_with(proc_t *p, const char *weftd, const char *name,
                       const char *coord, const char *devices, const char *mesh)
{
    memset(p, 0, sizeof *p);
    int n = seq++;
    snprintf(p->endpoint, sizeof p->endpoint, "ipc:///tmp/weft-bc-%d-%d.sock",
             (int)getpid(), n);
    snprintf(p->notify, sizeof p->notify, "/tmp/weft-bcn-%d-%d.sock", (int)getpid(), n);
    unlink(p->notify);
    p->nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", p->notify);
    if (p->nfd < 0 || bind(p->nfd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return false;
    const char *argv[] = { weftd, "--listen", p->endpoint, "--devices", devices,
                           "--cpu-memory", "1G", "--log-level", "warning",
                           "--mesh", mesh, coord ? "--coordinator" : NULL, coord,
                           "--nodes", "3", "--node-name", name, NULL };
    p->pid = fork();
    if (p->pid == 0) {
        setenv("NOTIFY_SOCKET", p->notify, 1);
        execv(weftd, (char *const *)argv);
        _exit(127);
    }
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    return p->pid > 0 && p->pidfd >= 0;
}

static bool start(proc_t *p, const char *weftd, const char *name, const char *coord)
{
    return start_with(p, weftd, name, coord, "cpu:2", coord ? "tp=2" : "tp=2");
}

/* Median client wall time (ms) of `jobs` ring attention jobs on the
 * daemon at endpoint, after one warm-up; < 0 on an error. */
static double ring_jobs(const char *endpoint, int jobs, uint32_t *ret_devices)
{
    enum { B = 1, S = 4200, H = 8, D = 64 };
    size_t n = (size_t)B * S * H * D;
    float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k),
          *v = malloc(n * sizeof *v), *o = malloc(n * sizeof *o);
    double t[100], med = -1;
    wf_client_t *c = NULL;
    if (!q || !k || !v || !o || wf_client_connect(endpoint, 30000, &c) != WF_OK)
        goto out;
    uint64_t x = 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        q[i] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
        k[i] = q[i] * 0.5f;
        v[i] = -q[i];
    }
    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t tk = { k, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t tv = { v, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t to = { o, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_attention_opts_t opts;
    memset(&opts, 0, sizeof opts);
    for (int j = -1; j < jobs; j++) {
        wf_job_result_t r;
        double t0 = now_ms();
        wf_status_t st = wf_attention(c, &tq, &tk, &tv, &opts, &to, NULL, &r);
        if (st != WF_OK) {
            fprintf(stderr, "%s: %s: %s\n", endpoint, wf_status_name(st),
                    wf_client_last_error(c));
            goto out;
        }
        if (j >= 0)
            t[j] = now_ms() - t0;
        *ret_devices = r.devices;
    }
    qsort(t, (size_t)jobs, sizeof t[0], cmp);
    med = t[jobs / 2];
out:
    wf_client_destroy(&c);
    free(q);
    free(k);
    free(v);
    free(o);
    return med;
}

/* Jobs per second of bursts of `n` jobs submitted at once (one client),
 * median of 3 after a warm-up burst; < 0 on an error. */
static double burst_rate(const char *endpoint, int n, uint32_t *ret_devices)
{
    enum { B = 1, S = 2048, H = 8, D = 64, MAXN = 64 };
    size_t e = (size_t)B * S * H * D;
    float *q = malloc(e * sizeof *q), *o = malloc((size_t)n * e * sizeof *o);
    wf_job_t *job[MAXN];
    double rate[3], med = -1;
    wf_client_t *c = NULL;
    if (n > MAXN || !q || !o || wf_client_connect(endpoint, 30000, &c) != WF_OK)
        goto out;
    uint64_t x = 7;
    for (size_t i = 0; i < e; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        q[i] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
    }
    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_attention_opts_t opts;
    memset(&opts, 0, sizeof opts);
    for (int r = -1; r < 3; r++) {
        double t0 = now_ms();
        for (int j = 0; j < n; j++) {
            wf_tensor_t to = { o + (size_t)j * e, WF_DTYPE_F32, 4, { B, S, H, D } };
            job[j] = NULL;
            if (wf_attention_submit(c, &tq, &tq, &tq, &opts, &to, NULL, &job[j]) != WF_OK)
                goto out;
        }
        bool ok = true;
        for (int j = 0; j < n; j++) {
            wf_job_result_t res;
            ok = ok && wf_job_wait(c, job[j], 60000) == WF_OK &&
                 wf_job_result(job[j], &res) == WF_OK && res.status == WF_OK;
            if (ok)
                *ret_devices = res.devices;
            wf_job_destroy(c, &job[j]);
        }
        if (!ok) {
            fprintf(stderr, "%s: a job of the burst failed\n", endpoint);
            goto out;
        }
        if (r >= 0)
            rate[r] = n / ((now_ms() - t0) / 1e3);
    }
    qsort(rate, 3, sizeof rate[0], cmp);
    med = rate[1];
out:
    wf_client_destroy(&c);
    free(q);
    free(o);
    return med;
}

static bool wait_line(proc_t *p, const char *prefix, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - now_ms());
        struct pollfd pf = { .fd = p->nfd, .events = POLLIN };
        if (left <= 0 || poll(&pf, 1, left) != 1)
            return false;
        char buf[4096];
        ssize_t n = recv(p->nfd, buf, sizeof buf - 1, 0);
        if (n < 0)
            return false;
        buf[n] = '\0';
        for (char *s = NULL, *l = strtok_r(buf, "\n", &s); l; l = strtok_r(NULL, "\n", &s))
            if (strncmp(l, prefix, strlen(prefix)) == 0)
                return true;
    }
}

static void stop(proc_t *p)
{
    kill(p->pid, SIGTERM);
    struct pollfd pf = { .fd = p->pidfd, .events = POLLIN };
    if (poll(&pf, 1, 10000) != 1)
        kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    close(p->pidfd);
    close(p->nfd);
    unlink(p->notify);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > 100)
        rounds = 5;
    double form[100], single[100];
    for (int r = 0; r < rounds; r++) {
        proc_t s;
        double t0 = now_ms();
        if (!start(&s, argv[1], "solo", NULL) || !wait_line(&s, "READY=1", 30000))
            return 1;
        single[r] = now_ms() - t0;
        stop(&s);

        char coord[64];
        snprintf(coord, sizeof coord, "127.0.0.1:%d", free_port());
        proc_t a, b, c;
        if (!start(&a, argv[1], "a", coord) || !wait_line(&a, "READY=1", 30000))
            return 1;
        t0 = now_ms();
        if (!start(&b, argv[1], "b", coord) || !start(&c, argv[1], "c", coord) ||
            !wait_line(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)", 30000))
            return 1;
        form[r] = now_ms() - t0;
        stop(&a);
        stop(&b);
        stop(&c);
    }
    qsort(form, (size_t)rounds, sizeof form[0], cmp);
    qsort(single, (size_t)rounds, sizeof single[0], cmp);
    double fm = form[rounds / 2], sm = single[rounds / 2];
    printf("| benchmark | median of %d | baseline | ratio |\n|---|---|---|---|\n", rounds);
    printf("| world of 3 daemons (cpu:2 each): members started -> coordinator serving | "
           "%.1f ms | one daemon start -> READY=1: %.1f ms | %.2fx |\n", fm, sm, fm / sm);

    /* ring attention: 3 processes beside 1 */
    int jobs = argc > 3 ? atoi(argv[3]) : 7;
    if (jobs < 1 || jobs > 100)
        jobs = 7;
    char coord[64];
    snprintf(coord, sizeof coord, "127.0.0.1:%d", free_port());
    proc_t a, b, c, one;
    uint32_t dev3 = 0, dev1 = 0;
    if (!start_with(&a, argv[1], "a", coord, "cpu:2", "ring=6") ||
        !wait_line(&a, "READY=1", 30000) ||
        !start_with(&b, argv[1], "b", coord, "cpu:2", "ring=6") ||
        !start_with(&c, argv[1], "c", coord, "cpu:2", "ring=6") ||
        !wait_line(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)", 30000))
        return 1;
    double across = ring_jobs(a.endpoint, jobs, &dev3);
    stop(&a);
    stop(&b);
    stop(&c);
    if (!start_with(&one, argv[1], "one", NULL, "cpu:6", "ring=6") ||
        !wait_line(&one, "READY=1", 30000))
        return 1;
    double inside = ring_jobs(one.endpoint, jobs, &dev1);
    stop(&one);
    if (across < 0 || inside < 0)
        return 1;
    printf("| ring attention, mesh ring=6 across 3 daemons (cpu:2 each; f32 B=1 "
           "S=4200 H=8 D=64; %u ranks) | %.1f ms | same mesh in one daemon cpu:6 "
           "(%u ranks): %.1f ms | %.2fx |\n", dev3, across, dev1, inside,
           across / inside);

    /* dp replicas across daemons: throughput of concurrent jobs */
    enum { N = 24 };
    snprintf(coord, sizeof coord, "127.0.0.1:%d", free_port());
    uint32_t dr3 = 0, dr1 = 0;
    if (!start_with(&a, argv[1], "a", coord, "cpu:2", "dp=3,ring=2") ||
        !wait_line(&a, "READY=1", 30000) ||
        !start_with(&b, argv[1], "b", coord, "cpu:2", "dp=3,ring=2") ||
        !start_with(&c, argv[1], "c", coord, "cpu:2", "dp=3,ring=2") ||
        !wait_line(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)", 30000))
        return 1;
    double r3 = burst_rate(a.endpoint, N, &dr3);
    stop(&a);
    stop(&b);
    stop(&c);
    if (!start_with(&one, argv[1], "one", NULL, "cpu:2", "ring=2") ||
        !wait_line(&one, "READY=1", 30000))
        return 1;
    double r1 = burst_rate(one.endpoint, N, &dr1);
    stop(&one);
    if (r3 < 0 || r1 < 0)
        return 1;
    printf("| %d concurrent ring=2 jobs, mesh dp=3,ring=2 across 3 daemons "
           "(cpu:2 each; f32 B=1 S=2048 H=8 D=64; %u ranks per job) | %.1f jobs/s "
           "| dp=1 (one replica, one daemon cpu:2, ring=2; %u ranks): %.1f jobs/s "
           "| %.2fx |\n", N, dr3, r3, dr1, r1, r3 / r1);
    return 0;
}
