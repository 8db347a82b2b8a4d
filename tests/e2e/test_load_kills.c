/* test_load_kills.c — end to end: many clients, some killed mid-stream,
 * live reconfigurations, against one real weftd (cpu:2).
 *
 * usage: test_load_kills PATH_TO_WEFTD [CLIENTS [JOBS [KILLS [RECONFIGS]]]]
 *        (defaults 16 200 2 5: the CI run; bench/load_kills.sh runs longer)
 *
 * CLIENTS client processes (fork: a kill is a real process dying with its
 * connection), each with its own libweft connection, run JOBS attention
 * jobs (f32, B=1, S=64, H=4, D=32, causal on every other job) with up to
 * 4 in flight, each checked against the fp64 reference. Clients 0..KILLS-1
 * are SIGKILLed once they have finished a third of their jobs. The parent
 * runs RECONFIGS reconfigurations through tp=2 -> ring=2 -> ulysses=2 ->
 * dp=2 -> ... spread over the run (one each time the finished jobs pass
 * the next step of JOBS x CLIENTS / (RECONFIGS + 1)).
 *
 * Before the clients start (they wait for a byte from the parent), a
 * warm-up runs one job of each kind on each of those meshes, so that the
 * daemon's resident memory is sampled (status) once it has served every
 * kind of job the run will send.
 *
 * Asserted: every surviving client finishes exactly JOBS jobs, each once,
 * WF_OK and within tolerance (out 1e-4 absolute, lse 1e-4 relative); the
 * reconfigurations all succeed; the daemon serves a job afterwards and
 * exits 0 on SIGTERM; its resident memory once idle after the run is
 * within its memory after the warm-up + what the clients' jobs may make
 * it hold at once (rss_bound) + a stated margin: no growth with the jobs
 * or the dead clients. No wall-clock bound: a failure bound only, on a
 * stretch without progress (WAIT_EVENT_MS). Prints jobs, wall time, jobs
 * per second, the slowest job and the RSS figures.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/check.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"

#define MAX_CLIENTS 256
#define IN_FLIGHT 4


/* What a client reports at its end. */
typedef struct summary {
    uint32_t ok, wrong, failed, duplicated;
    double worst_ms;
    char first_error[160];
} summary_t;

static jcase_t job_case(int j)
{
    jcase_t c = { .name = "load", .B = 1, .Sq = 64, .Skv = 64, .Hq = 4,
                  .Hkv = 4, .D = 32, .in = WF_DTYPE_F32, .out = WF_DTYPE_F32,
                  .causal = j % 2, .want_lse = true };
    return c;
}

/* A client process: waits for a byte on `go`, then runs JOBS jobs,
 * IN_FLIGHT at a time; a byte to `fd` per finished job, then the
 * summary. */
static int client_main(const char *endpoint, int id, int jobs, int go, int fd)
{
    summary_t s = { 0 };
    char g;
    ssize_t gr;
    do
        gr = read(go, &g, 1);
    while (gr < 0 && errno == EINTR);
    close(go);
    if (gr != 1)
        return 2;          /* the parent gave up before the start */
    wf_client_t *c = NULL;
    if (wf_client_connect(endpoint, (int)wait_bound_ms(WAIT_EVENT_MS), &c) != WF_OK) {
        snprintf(s.first_error, sizeof s.first_error, "connect: %s",
                 wf_client_last_error(NULL));
        s.failed = (uint32_t)jobs;
        return write(fd, &s, sizeof s) == (ssize_t)sizeof s ? 1 : 2;
    }
    jbuf_t buf[IN_FLIGHT];
    wf_job_t *job[IN_FLIGHT] = { 0 };
    int which[IN_FLIGHT];
    double t0[IN_FLIGHT];
    uint8_t *done = calloc((size_t)jobs, 1);
    memset(buf, 0, sizeof buf);
    int next = 0, finished = 0;
    while (finished < jobs) {
        for (int slot = 0; slot < IN_FLIGHT; slot++) {
            if (job[slot] || next == jobs)
                continue;
            jcase_t jc = job_case(next);
            jbuf_free(&buf[slot]);
            if (!jbuf_init(&buf[slot], &jc, (uint64_t)id * 100003u + (uint64_t)next)) {
                s.failed++;
                finished++;
                next++;
                continue;
            }
            wf_attention_opts_t o = opts_of(&jc);
            wf_status_t st = wf_attention_submit(c, &buf[slot].q, &buf[slot].k,
                                                 &buf[slot].v, &o, &buf[slot].out,
                                                 buf[slot].lse, &job[slot]);
            if (st != WF_OK) {
                if (!s.first_error[0])
                    snprintf(s.first_error, sizeof s.first_error, "submit %d: %s",
                             next, wf_status_name(st));
                s.failed++;
                finished++;
                next++;
                job[slot] = NULL;
                continue;
            }
            which[slot] = next++;
            t0[slot] = now_s();
        }
        for (int slot = 0; slot < IN_FLIGHT; slot++) {
            if (!job[slot])
                continue;
            wf_status_t st = wf_job_wait(c, job[slot], 0);
            if (st == WF_E_TIMEOUT || st == WF_E_PENDING)
                continue;
            double ms = (now_s() - t0[slot]) * 1e3;
            if (ms > s.worst_ms)
                s.worst_ms = ms;
            int j = which[slot];
            if (done[j]++)
                s.duplicated++;
            if (st != WF_OK) {
                if (!s.first_error[0])
                    snprintf(s.first_error, sizeof s.first_error, "job %d: %s: %s",
                             j, wf_status_name(st), wf_job_error(job[slot]));
                s.failed++;
            } else {
                double eo, el;
                jbuf_errors(&buf[slot], &eo, &el);
                if (!(eo <= 1e-4 && el <= 1e-4)) {
                    if (!s.first_error[0])
                        snprintf(s.first_error, sizeof s.first_error,
                                 "job %d: errors out %.3g lse %.3g", j, eo, el);
                    s.wrong++;
                } else {
                    s.ok++;
                }
            }
            wf_job_destroy(c, &job[slot]);
            finished++;
            char b = 1;
            if (write(fd, &b, 1) != 1)
                return 2;
        }
        /* wait for a reply: the oldest pending job's (the later ones
         * finished meanwhile are taken at the next turn) */
        int oldest = -1;
        for (int slot = 0; slot < IN_FLIGHT; slot++)
            if (job[slot] && (oldest < 0 || which[slot] < which[oldest]))
                oldest = slot;
        if (oldest >= 0)
            wf_job_wait(c, job[oldest], (int)wait_bound_ms(WAIT_EVENT_MS));
    }
    for (int slot = 0; slot < IN_FLIGHT; slot++)
        jbuf_free(&buf[slot]);
    free(done);
    wf_client_destroy(&c);
    char end = 0;
    if (write(fd, &end, 1) != 1 || write(fd, &s, sizeof s) != (ssize_t)sizeof s)
        return 2;
    return 0;
}

/* The meshes the run goes through, in order; the last is the start. */
static const wf_mesh_degrees_t meshes[4] = {
    { .dp = 1, .ring = 2, .ulysses = 1, .tp = 1 },
    { .dp = 1, .ring = 1, .ulysses = 2, .tp = 1 },
    { .dp = 2, .ring = 1, .ulysses = 1, .tp = 1 },
    { .dp = 1, .ring = 1, .ulysses = 1, .tp = 2 },
};

/* One job of case j on c, checked: true when it came back OK and within
 * tolerance. */
static bool one_job(wf_client_t *c, int j, uint64_t seed)
{
    jcase_t jc = job_case(j);
    jbuf_t b;
    memset(&b, 0, sizeof b);
    if (!jbuf_init(&b, &jc, seed))
        return false;
    wf_attention_opts_t o = opts_of(&jc);
    wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, NULL);
    double eo = 1, el = 1;
    if (st == WF_OK)
        jbuf_errors(&b, &eo, &el);
    jbuf_free(&b);
    CHECK(st == WF_OK && eo <= 1e-4 && el <= 1e-4, "admin's job (case %d): %s "
          "(errors %.3g, %.3g)", j, wf_status_name(st), eo, el);
    return st == WF_OK && eo <= 1e-4 && el <= 1e-4;
}

/* Replies to one connection that ZeroMQ and the gate hold once taken
 * from the daemon's queue (daemon/server/server.c, REPLY_SNDHWM) and
 * complete messages the gate holds per connection on their way in
 * (daemon/net/gate.h). */
#define REPLIES_TAKEN 6u
#define GATE_MESSAGES 3u
/* What the allocator keeps resident, once the daemon is idle, of memory
 * it used during the run beyond the warm-up (the arenas of the gate,
 * main, ZeroMQ and worker threads; the connections' buffers). */
#define RSS_MARGIN (16u << 20)

/* What the run's clients may make the daemon hold at once beyond the
 * warm-up (PROTOCOL.md section 7.1): each client's IN_FLIGHT jobs with
 * their inputs and outputs, the requests the gate holds for it and the
 * replies ZeroMQ took for it; plus RSS_MARGIN. Every one of those is
 * released when the daemon is idle again: resident memory past this
 * bound grew with the jobs or the dead clients. */
static uint64_t rss_bound(int clients)
{
    jcase_t jc = job_case(0);
    uint64_t q = (uint64_t)(jc.B * jc.Sq * jc.Hq * jc.D) * 4u;
    uint64_t kv = (uint64_t)(jc.B * jc.Skv * jc.Hkv * jc.D) * 4u;
    uint64_t in = q + 2 * kv, out = q + (uint64_t)(jc.B * jc.Sq * jc.Hq) * 4u;
    uint64_t per_client = IN_FLIGHT * (in + out) + GATE_MESSAGES * in +
                          REPLIES_TAKEN * out;
    return (uint64_t)clients * per_client + RSS_MARGIN;
}

/* wait_for's condition: the daemon (asked on the connection arg) has
 * nothing queued or running. */
typedef struct idle_want {
    wf_client_t *c;
    wf_status_info_t last;
} idle_want_t;

static bool daemon_idle(void *arg)
{
    idle_want_t *w = arg;
    return wf_status(w->c, &w->last) == WF_OK && w->last.queue_depth == 0 &&
           w->last.in_flight == 0;
}

/* The daemon's RSS (its status) once it has nothing queued or running;
 * 0 when that does not happen within WAIT_EVENT_MS. */
static uint64_t idle_rss(wf_client_t *c)
{
    idle_want_t *w = calloc(1, sizeof *w);
    if (!w)
        return 0;
    w->c = c;
    uint64_t rss = wait_for(daemon_idle, w, WAIT_EVENT_MS) ? w->last.rss_bytes : 0;
    free(w);
    return rss;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD [CLIENTS [JOBS [KILLS [RECONFIGS]]]]\n",
                argv[0]);
        return 2;
    }
    int clients = argc > 2 ? atoi(argv[2]) : 16;
    int jobs = argc > 3 ? atoi(argv[3]) : 200;
    int kills = argc > 4 ? atoi(argv[4]) : 2;
    int reconfigs = argc > 5 ? atoi(argv[5]) : 5;
    if (clients < 1 || clients > MAX_CLIENTS || jobs < 3 || kills < 0 ||
        kills >= clients || reconfigs < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);

    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-lk-%d.sock", (int)getpid());
    /* room for every client's IN_FLIGHT jobs, each client's share exactly
     * IN_FLIGHT: no job is refused for a full queue */
    char capacity[16], share[16];
    snprintf(capacity, sizeof capacity, "%d", clients * IN_FLIGHT < 64 ? 64
                                              : clients * IN_FLIGHT);
    snprintf(share, sizeof share, "%d", IN_FLIGHT);
    const char *dargv[] = { argv[1], "--devices", "cpu:2", "--listen", endpoint,
                            "--mesh", "tp=2", "--log-level", "warning",
                            "--queue-capacity", capacity, "--client-queue-jobs",
                            share, NULL };
    /* under AddressSanitizer freed memory sits in its quarantine (256
     * MiB) and counts as resident: without it RSS follows what the daemon
     * holds (no effect in other builds) */
    const char *was = getenv("ASAN_OPTIONS");
    char asan[512];
    snprintf(asan, sizeof asan, "%s%squarantine_size_mb=0:"
             "thread_local_quarantine_size_kb=0", was ? was : "",
             was && was[0] ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    pid_t d = spawn_daemon(dargv, NULL);
    if (d < 0 || !wait_ready(endpoint)) {
        fprintf(stderr, "daemon did not start\n");
        return 1;
    }

    /* clients first (fork before this process has libweft threads); each
     * waits for a byte on its go pipe, written after the warm-up */
    pid_t pid[MAX_CLIENTS];
    int fd[MAX_CLIENTS], go[MAX_CLIENTS];
    for (int i = 0; i < clients; i++) {
        int p[2], g[2];
        if (pipe(p) != 0 || pipe(g) != 0)
            return 1;
        pid[i] = fork();
        if (pid[i] == 0) {
            close(p[0]);
            close(g[1]);
            for (int k = 0; k < i; k++)
                close(go[k]);
            sigprocmask(SIG_UNBLOCK, &chld, NULL);
            _exit(client_main(endpoint, i, jobs, g[0], p[1]));
        }
        close(p[1]);
        close(g[0]);
        fd[i] = p[0];
        go[i] = g[1];
    }
    wf_client_t *admin = NULL;
    if (wf_client_connect(endpoint, (int)wait_bound_ms(WAIT_EVENT_MS), &admin) != WF_OK)
        return 1;
    /* warm-up: each kind of job (causal or not) on each mesh, back to
     * the first; then the RSS the run is measured against */
    for (int m = 0; m < 4; m++) {
        uint64_t ep = 0;
        wf_status_t st = wf_reconfigure(admin, &meshes[m], &ep);
        CHECK(st == WF_OK, "warm-up reconfiguration %d: %s: %s", m, wf_status_name(st),
              wf_client_last_error(admin));
        one_job(admin, 0, 11 + (uint64_t)m);
        one_job(admin, 1, 21 + (uint64_t)m);
    }
    uint64_t rss0 = idle_rss(admin);
    for (int i = 0; i < clients; i++) {
        char b = 1;
        CHECK(write(go[i], &b, 1) == 1, "start client %d", i);
        close(go[i]);
    }
    double t_start = now_s();

    int progress[MAX_CLIENTS] = { 0 };
    bool ended[MAX_CLIENTS] = { 0 }, killed[MAX_CLIENTS] = { 0 };
    summary_t sum[MAX_CLIENTS];
    memset(sum, 0, sizeof sum);
    long total = (long)clients * jobs, finished = 0;
    int reconf_done = 0, open_pipes = clients;
    /* the failure bound: a stretch of WAIT_EVENT_MS in which no client
     * finishes a job or ends */
    bool stalled = false;
    while (open_pipes > 0 && !stalled) {
        struct pollfd pf[MAX_CLIENTS];
        int map[MAX_CLIENTS], n = 0;
        for (int i = 0; i < clients; i++)
            if (fd[i] >= 0) {
                pf[n] = (struct pollfd){ .fd = fd[i], .events = POLLIN };
                map[n++] = i;
            }
        int ready = poll(pf, (nfds_t)n, (int)wait_bound_ms(WAIT_EVENT_MS));
        if (ready < 0 && errno != EINTR)
            break;
        if (ready == 0) {
            stalled = true;
            CHECK(0, "no client finished a job or ended for %u ms (%ld of %ld jobs "
                  "done)", wait_bound_ms(WAIT_EVENT_MS), finished, total);
        }
        for (int k = 0; k < n; k++) {
            int i = map[k];
            if (!(pf[k].revents & (POLLIN | POLLHUP)))
                continue;
            char b;
            ssize_t r = read(fd[i], &b, 1);
            if (r == 1 && b == 1) {
                progress[i]++;
                finished++;
                if (i < kills && !killed[i] && progress[i] >= jobs / 3) {
                    kill(pid[i], SIGKILL);
                    killed[i] = true;
                }
                continue;
            }
            if (r == 1 && b == 0 &&
                read(fd[i], &sum[i], sizeof sum[i]) == (ssize_t)sizeof sum[i])
                ended[i] = true;
            close(fd[i]);
            fd[i] = -1;
            open_pipes--;
        }
        /* the next reconfiguration, once enough jobs finished */
        if (reconf_done < reconfigs &&
            finished >= (total * (reconf_done + 1)) / (reconfigs + 1)) {
            uint64_t ep = 0;
            wf_status_t st = wf_reconfigure(admin, &meshes[reconf_done % 4], &ep);
            CHECK(st == WF_OK, "reconfiguration %d: %s: %s", reconf_done,
                  wf_status_name(st), wf_client_last_error(admin));
            reconf_done++;
        }
    }
    double wall = now_s() - t_start;
    for (int i = 0; i < clients && stalled; i++)
        if (fd[i] >= 0)
            kill(pid[i], SIGKILL);     /* stuck: end it, reap it below */
    while (reconf_done < reconfigs) {   /* a short run: the rest at the end */
        uint64_t ep = 0;
        CHECK(wf_reconfigure(admin, &meshes[reconf_done % 4], &ep) == WF_OK,
              "late reconfiguration %d", reconf_done);
        reconf_done++;
    }
    for (int i = 0; i < clients; i++) {
        int ws = 0;
        waitpid(pid[i], &ws, 0);
        if (killed[i]) {
            CHECK(WIFSIGNALED(ws) || ended[i], "client %d was killed but exited %d", i,
                  WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
            continue;
        }
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && ended[i],
              "client %d ended badly (status %d)", i, ws);
        CHECK(sum[i].ok == (uint32_t)jobs && sum[i].wrong == 0 && sum[i].failed == 0 &&
              sum[i].duplicated == 0, "client %d: %u ok, %u wrong, %u failed, %u "
              "duplicated of %d (%s)", i, sum[i].ok, sum[i].wrong, sum[i].failed,
              sum[i].duplicated, jobs, sum[i].first_error);
    }
    double worst = 0;
    uint64_t ok_jobs = 0;
    for (int i = 0; i < clients; i++) {
        if (sum[i].worst_ms > worst)
            worst = sum[i].worst_ms;
        ok_jobs += sum[i].ok;
    }
    /* still serving, memory did not grow with the run */
    one_job(admin, 1, 7);
    uint64_t rss1 = idle_rss(admin), bound = rss0 + rss_bound(clients);
    CHECK(rss0 > 0 && rss1 > 0 && rss1 <= bound,
          "daemon RSS grew: %.1f MiB after warm-up, %.1f MiB idle after the run, "
          "bound %.1f MiB", (double)rss0 / 1048576, (double)rss1 / 1048576,
          (double)bound / 1048576);
    wf_client_destroy(&admin);
    char err[256];
    CHECK(stop_daemon(d, (int)WAIT_EVENT_MS, err, sizeof err), "stop: %s", err);
    unlink(endpoint + 6);
    printf("load with kills: %d clients x %d jobs (%d killed), %d reconfigurations: "
           "%" PRIu64 " jobs checked correct in %.2f s (%.0f jobs/s), slowest job "
           "%.1f ms; daemon RSS %.1f -> %.1f MiB (bound %.1f)\n", clients, jobs, kills,
           reconf_done, ok_jobs, wall, (double)ok_jobs / wall, worst,
           (double)rss0 / 1048576, (double)rss1 / 1048576, (double)bound / 1048576);
    printf("test_load_kills: %s (%d failed)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
}
