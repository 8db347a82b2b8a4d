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
 * Then the data plane's CURVE cost (comm_zmq directly, no daemon): the
 * rank layout of the ring=6 row (3 processes of 2 rank threads, each
 * process one ZeroMQ context = one node with its own key pair and ZAP),
 * ring steps (every rank sends B bytes to the next rank and receives B
 * from the previous one, a grouped send / recv, as ring attention passes
 * K / V shards) for B = 64 KiB, the ring=6 row's K shard (1400 KiB), the
 * dp=3,ring=2 row's (2 MiB), 16 MiB and 64 MiB; a plain world and a CURVE
 * world alternately (which goes first alternates too), ROUNDS worlds of
 * each; time per step on rank 0 (mean over the steps of a world), median
 * and spread (min - max) over the worlds, and the ratio of the medians.
 *
 * Then the same CURVE cost through the daemons: the ring=6 job across 3
 * daemons with node_keys (CURVE on the rendezvous, the tensor channel and
 * the data plane) beside the same world without keys, worlds alternated.
 *
 * Usage: bench_cluster PATH_TO_WEFTD [ROUNDS] [JOBS]
 *        bench_cluster --data-plane [ROUNDS]   (the comm_zmq CURVE rows only)
 *        bench_cluster --curve PATH_TO_WEFTD [ROUNDS] [JOBS]  (the daemons' CURVE row)
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

#include "base/log.h"
#include "base/zap.h"
#include "comm/comm.h"
#include "comm/comm_zmq.h"
#include "keys.h"
#include "weft.h"

#include <pthread.h>
#include <zmq.h>

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
/* With node keys: the directory holding NAME.key for a, b, c and `nodes`
 * (keys_setup); start_with then gives each daemon its key_file, node_keys
 * and coordinator_node = a. "" = plain. */
static char keys_dir[64];
static bool keyed;

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
    char key_file[128], node_keys[128];
    snprintf(key_file, sizeof key_file, "%s/%s.key", keys_dir, name);
    snprintf(node_keys, sizeof node_keys, "%s/nodes", keys_dir);
    const char *argv[] = { weftd, "--listen", p->endpoint, "--devices", devices,
                           "--cpu-memory", "1G", "--log-level", "warning",
                           "--mesh", mesh, coord ? "--coordinator" : NULL, coord,
                           "--nodes", "3", "--node-name", name,
                           "--key-file", key_file, "--node-keys", node_keys,
                           "--coordinator-node", "a", NULL };
    if (!keyed) {      /* plain: no keys, every local process trusted */
        argv[17] = "--allow-anonymous";
        argv[18] = "true";
        argv[19] = NULL;
    }
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

/* ---------------------------------------------------------------------- */
/* the data plane: plain vs CURVE                                          */

enum { DP_PROCS = 3, DP_TPP = 2, DP_RANKS = DP_PROCS * DP_TPP, DP_SIZES = 5 };
static const size_t dp_bytes[DP_SIZES] = {64 << 10, 1400 << 10, 2 << 20,
                                          16 << 20, 64 << 20};
static const int dp_steps[DP_SIZES] = {60, 16, 12, 4, 2};
static const char *const dp_label[DP_SIZES] = {
    "64 KiB", "1400 KiB (ring=6 K shard)", "2 MiB (dp=3,ring=2 K shard)",
    "16 MiB", "64 MiB"};

typedef struct dp_rank {
    pthread_t tid;
    int rank, fd;                  /* fd: rank 0 writes its times there */
    const wf_comm_zmq_config_t *cfg;
    wf_comm_zmq_endpoint_t *ep;
    int ok;
} dp_rank_t;

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r <= 0)
            return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

static void *dp_rank_main(void *arg)
{
    dp_rank_t *r = arg;
    wf_comm_t *c = NULL;
    char err[256];
    if (wf_comm_zmq_world_join(r->cfg, r->rank, &r->ep, err, sizeof err, &c) !=
        WF_OK) {
        fprintf(stderr, "data plane: rank %d: %s\n", r->rank, err);
        return NULL;
    }
    size_t max = dp_bytes[DP_SIZES - 1];
    unsigned char *sb = malloc(max), *rb = malloc(max);
    double t[DP_SIZES];
    bool ok = sb && rb;
    if (ok) {
        memset(sb, r->rank + 1, max);
        memset(rb, 0, max);
    }
    int next = (r->rank + 1) % DP_RANKS, prev = (r->rank + DP_RANKS - 1) % DP_RANKS;
    for (int s = 0; ok && s < DP_SIZES; s++) {
        size_t b = dp_bytes[s];
        double t0 = 0;
        for (int k = -1; ok && k < dp_steps[s]; k++) { /* k = -1: warm-up */
            if (k <= 0)
                ok = wf_comm_barrier(c) == WF_OK;
            if (k == 0)
                t0 = now_ms();
            ok = ok && wf_comm_group_start(c) == WF_OK &&
                 wf_comm_send(c, sb, b, next) == WF_OK &&
                 wf_comm_recv(c, rb, b, prev) == WF_OK &&
                 wf_comm_group_end(c) == WF_OK;
        }
        ok = ok && wf_comm_barrier(c) == WF_OK;
        t[s] = (now_ms() - t0) / dp_steps[s];
        ok = ok && rb[0] == (unsigned char)(prev + 1) &&
             rb[b - 1] == (unsigned char)(prev + 1);
    }
    if (ok && wf_comm_zmq_refused(c) != 0)
        ok = false;
    if (ok && r->rank == 0)
        ok = write_all(r->fd, t, sizeof t);
    r->ok = ok;
    free(sb);
    free(rb);
    wf_comm_destroy(&c);
    return NULL;
}

/* One process (node) of a data-plane world; exits. */
static void dp_child(int proc, int up, int down, const wf_keypair_t *kp_all,
                     uint64_t wid)
{
    void *zctx = zmq_ctx_new();
    wf_log_t log;
    wf_log_init(&log, 2, WF_LOG_WARNING);
    wf_zap_t *zap = NULL;
    const wf_keypair_t *kp = kp_all ? &kp_all[proc] : NULL;
    wf_key_entry_t e[DP_PROCS];
    static char names[DP_PROCS][8];
    const char *keys[DP_RANKS], *nodes[DP_RANKS];
    memset(e, 0, sizeof e);
    for (int p = 0; p < DP_PROCS; p++) {
        snprintf(names[p], sizeof names[p], "n%d", p);
        snprintf(e[p].name, sizeof e[p].name, "n%d", p);
        _Static_assert(sizeof e[p].key == sizeof kp_all[p].public_key,
                       "key sizes");
        if (kp_all)
            memcpy(e[p].key, kp_all[p].public_key, sizeof e[p].key);
    }
    for (int r = 0; r < DP_RANKS; r++) {
        keys[r] = kp_all ? kp_all[r / DP_TPP].public_key : NULL;
        nodes[r] = names[r / DP_TPP];
    }
    if (!zctx || (kp && (wf_zap_start(zctx, &log, &zap) != WF_OK ||
                         wf_zap_set(zap, WF_ZAP_NODES, e, DP_PROCS) != WF_OK)))
        _exit(3);
    dp_rank_t rk[DP_TPP];
    for (int t = 0; t < DP_TPP; t++) {
        rk[t] = (dp_rank_t){.rank = proc * DP_TPP + t, .fd = up};
        char addr[WF_COMM_ZMQ_ENDPOINT_MAX] = {0};
        if (wf_comm_zmq_endpoint_new(zctx, "tcp://127.0.0.1:*", 0, 0, kp,
                                     &rk[t].ep) != WF_OK)
            _exit(4);
        snprintf(addr, sizeof addr, "%s", wf_comm_zmq_endpoint_address(rk[t].ep));
        if (!write_all(up, addr, sizeof addr))
            _exit(5);
    }
    static char table[DP_RANKS][WF_COMM_ZMQ_ENDPOINT_MAX];
    if (!read_all(down, table, sizeof table))
        _exit(6);
    const char *eps[DP_RANKS];
    for (int r = 0; r < DP_RANKS; r++)
        eps[r] = table[r];
    wf_comm_zmq_config_t cfg = {
        .zmq_ctx = zctx, .world_id = wid, .nranks = DP_RANKS, .endpoints = eps,
        .connect_timeout_ms = 20000, .op_timeout_ms = 60000, .curve = kp,
        .rank_keys = kp ? keys : NULL, .rank_nodes = kp ? nodes : NULL};
    for (int t = 0; t < DP_TPP; t++) {
        rk[t].cfg = &cfg;
        if (pthread_create(&rk[t].tid, NULL, dp_rank_main, &rk[t]) != 0)
            _exit(7);
    }
    int ok = 1;
    for (int t = 0; t < DP_TPP; t++) {
        pthread_join(rk[t].tid, NULL);
        ok &= rk[t].ok;
    }
    wf_zap_stop(zap);
    zmq_ctx_term(zctx);
    _exit(ok ? 0 : 8);
}

/* One world of 3 processes; t: rank 0's ms per step, by size. */
static bool dp_world(const wf_keypair_t *kp, uint64_t wid, double t[DP_SIZES])
{
    int up[DP_PROCS][2], down[DP_PROCS][2];
    pid_t pid[DP_PROCS];
    fflush(stdout);
    fflush(stderr);
    for (int p = 0; p < DP_PROCS; p++) {
        if (pipe(up[p]) != 0 || pipe(down[p]) != 0)
            return false;
        pid[p] = fork();
        if (pid[p] < 0)
            return false;
        if (pid[p] == 0) {
            for (int q = 0; q <= p; q++) {
                close(up[q][0]);
                close(down[q][1]);
            }
            dp_child(p, up[p][1], down[p][0], kp, wid);
        }
        close(up[p][1]);
        close(down[p][0]);
    }
    static char table[DP_RANKS][WF_COMM_ZMQ_ENDPOINT_MAX];
    bool ok = true;
    for (int p = 0; p < DP_PROCS && ok; p++)
        ok = read_all(up[p][0], table[p * DP_TPP], sizeof table[0] * DP_TPP);
    for (int p = 0; p < DP_PROCS && ok; p++)
        ok = write_all(down[p][1], table, sizeof table);
    ok = ok && read_all(up[0][0], t, sizeof(double) * DP_SIZES);
    for (int p = 0; p < DP_PROCS; p++) {
        int ws = 0;
        close(down[p][1]);
        if (!ok)
            kill(pid[p], SIGKILL);
        waitpid(pid[p], &ws, 0);
        close(up[p][0]);
        ok = ok && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    }
    return ok;
}

/* Key pairs for nodes a, b, c and their `nodes` list in a fresh
 * directory (keys_dir). */
static bool keys_setup(void)
{
    snprintf(keys_dir, sizeof keys_dir, "/tmp/weft-bck-XXXXXX");
    if (!mkdtemp(keys_dir))
        return false;
    char path[128], err[256], list[512];
    size_t o = 0;
    for (const char *n = "abc"; *n; n++) {
        wf_keypair_t kp;
        snprintf(path, sizeof path, "%s/%c.key", keys_dir, *n);
        if (wf_keypair_generate(&kp, err, sizeof err) != WF_OK ||
            wf_keypair_write(path, &kp, err, sizeof err) != WF_OK) {
            fprintf(stderr, "keys: %s\n", err);
            return false;
        }
        o += (size_t)snprintf(list + o, sizeof list - o, "%c %s\n", *n, kp.public_key);
    }
    snprintf(path, sizeof path, "%s/nodes", keys_dir);
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(list, f) >= 0;
    return (f && fclose(f) == 0) && ok;
}

/* Median ring=6 job time (ms) on a fresh world of 3 daemons, keyed or
 * plain; < 0 on an error. */
static double ring_world(const char *weftd, bool with_keys, int jobs)
{
    keyed = with_keys;
    char coord[64];
    snprintf(coord, sizeof coord, "127.0.0.1:%d", free_port());
    proc_t a, b, c;
    uint32_t dev = 0;
    double t = -1;
    if (!start_with(&a, weftd, "a", coord, "cpu:2", "ring=6") ||
        !wait_line(&a, "READY=1", 30000))
        return -1;
    if (start_with(&b, weftd, "b", coord, "cpu:2", "ring=6") &&
        start_with(&c, weftd, "c", coord, "cpu:2", "ring=6") &&
        wait_line(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)", 30000))
        t = ring_jobs(a.endpoint, jobs, &dev);
    stop(&a);
    stop(&b);
    stop(&c);
    keyed = false;
    return t;
}

/* The daemons' ring=6 job across 3 daemons with node_keys (CURVE on every
 * socket between them) beside the same without keys; worlds alternate
 * (which goes first alternates too), `rounds` of each. */
static int daemon_curve(const char *weftd, int rounds, int jobs)
{
    if (!keys_setup())
        return 1;
    double tp[100], tc[100];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 2; i++) {
            bool curve = (i == 0) == (r % 2 == 1);
            double t = ring_world(weftd, curve, jobs);
            if (t < 0) {
                fprintf(stderr, "a %s world failed\n", curve ? "keyed" : "plain");
                return 1;
            }
            (curve ? tc : tp)[r] = t;
        }
    }
    qsort(tp, (size_t)rounds, sizeof tp[0], cmp);
    qsort(tc, (size_t)rounds, sizeof tc[0], cmp);
    double mp = tp[rounds / 2], mc = tc[rounds / 2];
    printf("\n| ring attention ring=6 across 3 daemons (cpu:2 each; f32 B=1 S=4200 "
           "H=8 D=64), median job of %d per world | without node_keys: median "
           "(min - max) of %d worlds | with node_keys (CURVE) | CURVE / plain |\n"
           "|---|---|---|---|\n| client wall time per job | %.1f ms (%.1f - %.1f) "
           "| %.1f ms (%.1f - %.1f) | %.2fx |\n", jobs, rounds, mp, tp[0],
           tp[rounds - 1], mc, tc[0], tc[rounds - 1], mc / mp);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", keys_dir);
    return system(cmd) == 0 ? 0 : 1;
}

static int data_plane(int rounds)
{
    wf_keypair_t kp[DP_PROCS];
    char err[256];
    for (int p = 0; p < DP_PROCS; p++)
        if (wf_keypair_generate(&kp[p], err, sizeof err) != WF_OK)
            return 1;
    double tp[DP_SIZES][100], tc[DP_SIZES][100];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 2; i++) {
            bool curve = (i == 0) == (r % 2 == 1); /* alternate which first */
            double t[DP_SIZES];
            if (!dp_world(curve ? kp : NULL, 0xbe0000u + (uint64_t)(2 * r + i),
                          t)) {
                fprintf(stderr, "data plane: a %s world failed\n",
                        curve ? "CURVE" : "plain");
                return 1;
            }
            for (int s = 0; s < DP_SIZES; s++)
                (curve ? tc : tp)[s][r] = t[s];
        }
    }
    printf("\n| ring step, 6 ranks on 3 processes (comm_zmq, tcp loopback) "
           "| plain: median (min - max) of %d | CURVE: median (min - max) "
           "| CURVE / plain |\n|---|---|---|---|\n", rounds);
    for (int s = 0; s < DP_SIZES; s++) {
        qsort(tp[s], (size_t)rounds, sizeof(double), cmp);
        qsort(tc[s], (size_t)rounds, sizeof(double), cmp);
        double mp = tp[s][rounds / 2], mc = tc[s][rounds / 2];
        double gbp = (double)dp_bytes[s] / (mp / 1e3) / 1e9,
               gbc = (double)dp_bytes[s] / (mc / 1e3) / 1e9;
        printf("| %s per rank per step | %.3f ms (%.3f - %.3f), %.2f GB/s per "
               "rank | %.3f ms (%.3f - %.3f), %.2f GB/s per rank | %.2fx |\n",
               dp_label[s], mp, tp[s][0], tp[s][rounds - 1], gbp, mc, tc[s][0],
               tc[s][rounds - 1], gbc, mc / mp);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > 100)
        rounds = 5;
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(argv[1], "--data-plane") == 0)
        return data_plane(rounds);
    if (strcmp(argv[1], "--curve") == 0 && argc > 2) {
        /* bench_cluster --curve PATH_TO_WEFTD [ROUNDS] [JOBS] */
        int cr = argc > 3 ? atoi(argv[3]) : 5, cj = argc > 4 ? atoi(argv[4]) : 5;
        return daemon_curve(argv[2], cr < 1 || cr > 100 ? 5 : cr,
                            cj < 1 || cj > 100 ? 5 : cj);
    }
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
    if (daemon_curve(argv[1], rounds, jobs) != 0)
        return 1;
    return data_plane(rounds);
}
