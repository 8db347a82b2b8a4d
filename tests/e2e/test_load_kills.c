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
 * Asserted: every surviving client finishes exactly JOBS jobs, each once,
 * WF_OK and within tolerance (out 1e-4 absolute, lse 1e-4 relative); the
 * reconfigurations all succeed; the daemon serves a job afterwards and
 * exits 0 on SIGTERM; its resident memory after the run is within
 * 2 x (after warm-up) + 64 MiB (no growth with the jobs or the dead
 * clients). Prints jobs, wall time, jobs per second, the slowest job and
 * the RSS figures.
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

#include "support/jobcheck.h"
#include "weft.h"
#include "support/check.h"

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

/* A client process: JOBS jobs, IN_FLIGHT at a time; a byte to `fd` per
 * finished job, then the summary. */
static int client_main(const char *endpoint, int id, int jobs, int fd)
{
    summary_t s = { 0 };
    wf_client_t *c = NULL;
    if (wf_client_connect(endpoint, 60000, &c) != WF_OK) {
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
        /* wait for any reply: the first pending job, briefly */
        for (int slot = 0; slot < IN_FLIGHT; slot++)
            if (job[slot]) {
                wf_job_wait(c, job[slot], 2);
                break;
            }
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

static uint64_t daemon_rss(wf_client_t *c)
{
    wf_status_info_t si;
    return wf_status(c, &si) == WF_OK ? si.rss_bytes : 0;
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

    /* clients first (fork before this process has libweft threads) */
    pid_t pid[MAX_CLIENTS];
    int fd[MAX_CLIENTS];
    for (int i = 0; i < clients; i++) {
        int p[2];
        if (pipe(p) != 0)
            return 1;
        pid[i] = fork();
        if (pid[i] == 0) {
            close(p[0]);
            sigprocmask(SIG_UNBLOCK, &chld, NULL);
            _exit(client_main(endpoint, i, jobs, p[1]));
        }
        close(p[1]);
        fd[i] = p[0];
    }
    wf_client_t *admin = NULL;
    if (wf_client_connect(endpoint, 60000, &admin) != WF_OK)
        return 1;
    uint64_t rss0 = daemon_rss(admin);
    double t_start = now_s();

    static const wf_mesh_degrees_t meshes[4] = {
        { .dp = 1, .ring = 2, .ulysses = 1, .tp = 1 },
        { .dp = 1, .ring = 1, .ulysses = 2, .tp = 1 },
        { .dp = 2, .ring = 1, .ulysses = 1, .tp = 1 },
        { .dp = 1, .ring = 1, .ulysses = 1, .tp = 2 },
    };
    int progress[MAX_CLIENTS] = { 0 };
    bool ended[MAX_CLIENTS] = { 0 }, killed[MAX_CLIENTS] = { 0 };
    summary_t sum[MAX_CLIENTS];
    memset(sum, 0, sizeof sum);
    long total = (long)clients * jobs, finished = 0;
    int reconf_done = 0, open_pipes = clients;
    double deadline = now_s() + 600;
    while (open_pipes > 0 && now_s() < deadline) {
        struct pollfd pf[MAX_CLIENTS];
        int map[MAX_CLIENTS], n = 0;
        for (int i = 0; i < clients; i++)
            if (fd[i] >= 0) {
                pf[n] = (struct pollfd){ .fd = fd[i], .events = POLLIN };
                map[n++] = i;
            }
        if (poll(pf, (nfds_t)n, 1000) < 0 && errno != EINTR)
            break;
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
    jcase_t jc = job_case(1);
    jbuf_t b;
    CHECK(jbuf_init(&b, &jc, 7), "buffers");
    wf_attention_opts_t o = opts_of(&jc);
    wf_status_t st = wf_attention(admin, &b.q, &b.k, &b.v, &o, &b.out, b.lse, NULL);
    double eo = 1, el = 1;
    if (st == WF_OK)
        jbuf_errors(&b, &eo, &el);
    CHECK(st == WF_OK && eo <= 1e-4 && el <= 1e-4, "job after the run: %s (%.3g, %.3g)",
          wf_status_name(st), eo, el);
    jbuf_free(&b);
    uint64_t rss1 = daemon_rss(admin);
    CHECK(rss0 > 0 && rss1 <= 2 * rss0 + (64u << 20),
          "daemon RSS grew: %.1f MiB after warm-up, %.1f MiB after the run",
          (double)rss0 / 1048576, (double)rss1 / 1048576);
    wf_client_destroy(&admin);
    char err[256];
    CHECK(stop_daemon(d, 30000, err, sizeof err), "stop: %s", err);
    unlink(endpoint + 6);
    printf("load with kills: %d clients x %d jobs (%d killed), %d reconfigurations: "
           "%" PRIu64 " jobs checked correct in %.2f s (%.0f jobs/s), slowest job "
           "%.1f ms; daemon RSS %.1f -> %.1f MiB\n", clients, jobs, kills, reconf_done,
           ok_jobs, wall, (double)ok_jobs / wall, worst, (double)rss0 / 1048576,
           (double)rss1 / 1048576);
    printf("test_load_kills: %s (%d failed)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
}
