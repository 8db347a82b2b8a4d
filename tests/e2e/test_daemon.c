/* test_daemon.c — end-to-end: real weftd processes driven over real
 * ZeroMQ sockets with the real codec (proto), watched through a real
 * sd_notify datagram socket and a pidfd.
 *
 * Checks: READY=1; hello and status; attention (f32, bf16, GQA, causal,
 * lse, custom scale, split over 1 and 2 devices, REQ-style delimiter)
 * against an fp64 reference; bad requests refused without harm; status
 * counters; WF_E_QUEUE_FULL with every admitted job still answered;
 * WF_E_NO_MEMORY under --cpu-memory; SIGHUP reload (applied, ignored when
 * not reloadable, nothing changed by an invalid file) with RELOADING=1 /
 * READY=1; WATCHDOG=1 pings when systemd asks for them; SIGTERM with
 * jobs in flight: every admitted job answered, STOPPING=1, exit 0, socket
 * file removed; start-up errors exit 2, --check-config exits 0.
 *
 * Usage: test_daemon PATH_TO_WEFTD. Every wait is an event wait with a
 * deadline (zmq_poll, poll on the notify socket and on a pidfd).
 */
#include <errno.h>
#include <math.h>
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
#include <zmq.h>

#include "proto.h"
#include "support/rawd.h"


/* ------------------------------------------------------------------ */
/* scenarios */

/* cpu:2 with a config file: hello, status, attention, bad requests,
 * reload, SIGTERM with jobs in flight. */
static void test_main_daemon(const char *weftd, reply_t *r)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "/tmp/weft-test-%d.conf", (int)getpid());
    write_file(cfg, "# test\nqueue_capacity = 4\nclient_queue_jobs = 4\n");
    const char *args[] = { "--devices", "cpu:2", "--config", cfg, NULL };
    daemon_t d;
    CHECK(daemon_start(&d, weftd, args));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));

    /* hello */
    CHECK(send_simple(&d, WF_OP_HELLO, 1) && recv_reply(&d, TIMEOUT_MS, r));
    wf_limits_t lim;
    wf_limits_default(&lim);
    CHECK(r->rep.status == WF_OK && r->rep.id == 1 && r->rep.op == WF_OP_HELLO);
    CHECK(r->rep.result.hello.protocol == WF_PROTOCOL_VERSION);
    CHECK(r->rep.result.hello.devices == 2);
    CHECK(strcmp(r->rep.result.hello.backend, "cpu") == 0);
    CHECK(r->rep.result.hello.max_tensor_bytes == lim.max_tensor_bytes);
    CHECK(r->rep.result.hello.max_header_bytes == lim.max_header_bytes);
    CHECK(r->n_frames == 0);
    reply_clear(r);

    /* status of a fresh daemon */
    CHECK(get_status(&d, r, 2));
    const wf_status_info_t *si = &r->rep.result.status;
    CHECK(si->device_count == 2);
    CHECK(strcmp(si->devices[0].name, "cpu:0") == 0);
    CHECK(strcmp(si->devices[1].name, "cpu:1") == 0);
    CHECK(si->devices[0].memory_total > 0 && si->devices[0].memory_used == 0);
    CHECK(si->queue_capacity == 4 && si->queue_depth == 0 && si->in_flight == 0);
    CHECK(si->jobs_served == 0 && si->requests_rejected == 0);
    CHECK(si->rss_bytes > 0);

    /* attention */
    static const attn_case_t cases[] = {
        { "f32 one device", WF_DTYPE_F32, 2, 33, 47, 4, 4, 32, false, false,
          false, 0, 0, 1, 1, false },
        { "f32 causal lse split 2, delimiter", WF_DTYPE_F32, 1, 40, 40, 4, 4, 64,
          true, true, false, 0, 0, 0, 2, true },
        { "bf16 GQA 6/2 -> f32 out, lse", WF_DTYPE_BF16, 2, 17, 29, 6, 2, 32,
          false, true, true, WF_DTYPE_F32, 0, 2, 2, false },
        { "bf16 GQA 3/1 causal, 2+1 heads", WF_DTYPE_BF16, 1, 50, 50, 3, 1, 16,
          true, false, false, 0, 0, 0, 2, false },
        { "f32 one head, scale 0.3", WF_DTYPE_F32, 1, 9, 70, 1, 1, 64, false,
          true, false, 0, 0.3f, 0, 1, false },
    };
    size_t n_cases = sizeof cases / sizeof cases[0];
    uint32_t ranks = 0;
    for (size_t i = 0; i < n_cases; i++) {
        attn_job_t j;
        attn_job_make(&cases[i], &j, 1000 + i);
        CHECK(attn_send(&d, &cases[i], &j, 100 + i));
        CHECK(recv_reply(&d, TIMEOUT_MS, r));
        CHECK(r->rep.id == 100 + i && r->rep.op == WF_OP_ATTENTION);
        CHECK(r->rep.epoch == 0);
        attn_check(&cases[i], &j, r);
        ranks += cases[i].want_devices;
        reply_clear(r);
        attn_job_free(&j);
    }

    /* bad requests: refused, answered, harmless */
    wf_buf_t junk = { 0 };
    junk.data = "\xc1\x01\x02";
    junk.len = 3;
    CHECK(send_frames(d.sock, false, &junk, 0, NULL, NULL));
    CHECK(recv_reply(&d, TIMEOUT_MS, r) && r->rep.status == WF_E_MALFORMED);
    reply_clear(r);
    {
        attn_case_t c = cases[0];
        attn_job_t j;
        attn_job_make(&c, &j, 7);
        j.v.nbytes -= 4;      /* the v frame is one element short */
        CHECK(attn_send(&d, &c, &j, 200));
        CHECK(recv_reply(&d, TIMEOUT_MS, r));
        CHECK(r->rep.status == WF_E_FRAME_MISMATCH && r->rep.id == 200);
        CHECK(r->rep.op == WF_OP_ATTENTION && r->n_frames == 0);
        reply_clear(r);
        attn_job_free(&j);
    }

    /* status counts them */
    CHECK(get_status(&d, r, 3));
    CHECK(si->jobs_served == n_cases && si->jobs_failed == 0);
    CHECK(si->requests_rejected == 2);
    CHECK(si->devices[0].jobs_served + si->devices[1].jobs_served == ranks);
    CHECK(si->devices[0].memory_used == 0 && si->devices[1].memory_used == 0);
    printf("  status: served %llu, rejected %llu, parts per device %llu + %llu, "
           "rss %llu KiB\n", (unsigned long long)si->jobs_served,
           (unsigned long long)si->requests_rejected,
           (unsigned long long)si->devices[0].jobs_served,
           (unsigned long long)si->devices[1].jobs_served,
           (unsigned long long)si->rss_bytes / 1024);

    /* SIGHUP: a reloadable change applies, a non-reloadable one is ignored */
    /* (devices = cpu:3 is overridden by the flag, cpu_memory needs a
     * restart: neither may change anything) */
    write_file(cfg, "queue_capacity = 7\nclient_queue_jobs = 7\ndevices = cpu:3\n"
                    "log_level = debug\ncpu_memory = 1G\n");
    uint64_t mem_before = si->devices[0].memory_total;
    kill(d.pid, SIGHUP);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 4));
    CHECK(si->queue_capacity == 7 && si->device_count == 2);
    CHECK(si->devices[0].memory_total == mem_before);

    /* SIGHUP with an invalid file changes nothing */
    write_file(cfg, "queue_capacity = 3\nqueue_capacity = 0\n");
    kill(d.pid, SIGHUP);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 5));
    CHECK(si->queue_capacity == 7);

    /* SIGTERM with jobs in flight: all admitted jobs are answered */
    enum { N_LATE = 6 };
    /* Long sequences, few bytes: compute (~1 GFLOP a job) outlasts sending. */
    attn_case_t big = { "f32 job in flight at SIGTERM", WF_DTYPE_F32, 1, 2048, 2048,
                        2, 2, 32, false, false, false, 0, 0, 1, 1, false };
    attn_job_t bj;
    attn_job_make(&big, &bj, 99);
    for (int i = 0; i < N_LATE; i++)
        CHECK(attn_send(&d, &big, &bj, 300 + (uint64_t)i));
    /* The status reply proves the daemon has read the jobs sent before it
     * (same connection, in order); job replies may come first. */
    CHECK(send_simple(&d, WF_OP_STATUS, 6));
    int n_ok = 0, n_queued = -1;
    for (int got = 0; got < N_LATE + 1;) {
        if (!recv_reply(&d, TIMEOUT_MS, r))
            break;
        got++;
        if (r->rep.op == WF_OP_STATUS) {
            n_queued = (int)(r->rep.result.status.queue_depth +
                             r->rep.result.status.in_flight);
            kill(d.pid, SIGTERM);
        } else {
            CHECK(r->rep.status == WF_OK);
            if (r->rep.status == WF_OK)
                n_ok++;
            if (n_ok == 1)
                attn_check(&big, &bj, r);
        }
        reply_clear(r);
    }
    printf("  SIGTERM with %d job(s) queued or running: %d/%d answered OK\n",
           n_queued, n_ok, N_LATE);
    CHECK(n_queued >= 1);
    CHECK(n_ok == N_LATE);
    CHECK(notify_wait(&d, "STOPPING=1", TIMEOUT_MS));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    CHECK(access(d.sock_path, F_OK) != 0 && errno == ENOENT);
    attn_job_free(&bj);
    daemon_close(&d);
    unlink(cfg);
}

/* cpu:1, queue of 1, 4 MiB per device: queue full and no memory. */
static void test_limits_daemon(const char *weftd, reply_t *r)
{
    const char *args[] = { "--devices", "cpu:1", "--queue-capacity", "1",
                           "--cpu-memory", "4M", NULL };
    daemon_t d;
    CHECK(daemon_start(&d, weftd, args));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));

    /* 8 MiB of output on a 4 MiB device can never fit */
    attn_case_t huge = { "too big", WF_DTYPE_F32, 1, 2048, 64, 4, 4, 256, false,
                         false, false, 0, 0, 0, 1, false };
    attn_job_t hj;
    attn_job_make(&huge, &hj, 5);
    CHECK(attn_send(&d, &huge, &hj, 1));
    CHECK(recv_reply(&d, TIMEOUT_MS, r));
    CHECK(r->rep.status == WF_E_NO_MEMORY && r->rep.id == 1);
    printf("  no memory: %s: %s\n", wf_status_name(r->rep.status), r->rep.error);
    reply_clear(r);
    attn_job_free(&hj);

    /* many pipelined jobs on one device with room for one waiting */
    enum { N = 16 };
    attn_case_t c = { "f32 pipelined", WF_DTYPE_F32, 1, 1024, 1024, 2, 2, 64,
                      false, false, false, 0, 0, 0, 1, false };
    attn_job_t j;
    attn_job_make(&c, &j, 11);
    for (int i = 0; i < N; i++)
        CHECK(attn_send(&d, &c, &j, 10 + (uint64_t)i));
    int ok = 0, full = 0, other = 0;
    bool seen[N] = { false };
    for (int i = 0; i < N; i++) {
        if (!recv_reply(&d, TIMEOUT_MS, r))
            break;
        uint64_t id = r->rep.id;
        if (id >= 10 && id < 10 + N)
            seen[id - 10] = true;
        if (r->rep.status == WF_OK) {
            if (ok++ == 0)
                attn_check(&c, &j, r);
        } else if (r->rep.status == WF_E_QUEUE_FULL) {
            full++;
        } else {
            other++;
        }
        reply_clear(r);
    }
    int n_seen = 0;
    for (int i = 0; i < N; i++)
        n_seen += seen[i];
    printf("  queue full: %d OK, %d WF_E_QUEUE_FULL, %d other, %d/%d answered\n",
           ok, full, other, n_seen, N);
    CHECK(ok >= 1 && full >= 1 && other == 0 && n_seen == N);

    CHECK(get_status(&d, r, 99));
    const wf_status_info_t *si = &r->rep.result.status;
    CHECK(si->jobs_served == (uint64_t)ok);
    CHECK(si->requests_rejected == (uint64_t)full + 1);
    CHECK(si->queue_capacity == 1 && si->devices[0].memory_total == (4u << 20));
    attn_job_free(&j);

    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
}

/* systemd's watchdog at 100 ms: WATCHDOG=1 about every 50 ms. A daemon
 * of its own, stopped at once: sd_notify blocks once the datagram queue
 * of a NOTIFY_SOCKET nobody reads is full (systemd always reads it). */
static void test_watchdog(const char *weftd)
{
    const char *args[] = { "--devices", "cpu:1", NULL };
    const char *env[] = { "WATCHDOG_USEC=100000", NULL };
    daemon_t d;
    CHECK(daemon_start_env(&d, weftd, args, env));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    int64_t t0 = now_ms();
    CHECK(notify_wait(&d, "WATCHDOG=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "WATCHDOG=1", TIMEOUT_MS));
    printf("  two WATCHDOG=1 pings within %lld ms (interval 100 ms)\n",
           (long long)(now_ms() - t0));
    kill(d.pid, SIGTERM);
    CHECK(notify_wait(&d, "STOPPING=1", TIMEOUT_MS));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
}

/* Bad settings: exit 2 at start-up, before READY. */
static void test_bad_start(const char *weftd)
{
    const char *bad[][3] = {
        { "--queue-capacity", "0", NULL },
        { "--devices", "cuda:0", NULL },
        { "--no-such-flag", "1", NULL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        daemon_t d;
        CHECK(daemon_start(&d, weftd, bad[i]));
        CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
        CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 2);
        daemon_close(&d);
    }
    /* --check-config with valid settings: exit 0 without serving */
    const char *check[] = { "--check-config", "--devices", "cpu:3", NULL };
    daemon_t d;
    CHECK(daemon_start(&d, weftd, check));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    CHECK(access(d.sock_path, F_OK) != 0);
    daemon_close(&d);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    reply_t *r = calloc(1, sizeof *r);
    printf("main daemon (cpu:2):\n");
    test_main_daemon(argv[1], r);
    printf("limits daemon (cpu:1, queue 1, 4 MiB):\n");
    test_limits_daemon(argv[1], r);
    printf("watchdog:\n");
    test_watchdog(argv[1]);
    printf("bad start-up settings:\n");
    test_bad_start(argv[1]);
    free(r);
    if (failed) {
        fprintf(stderr, "test_daemon: %d check(s) failed\n", failed);
        return 1;
    }
    printf("test_daemon: all checks passed\n");
    return 0;
}
