/* test_reconfig_basic.c — end-to-end basics of the mesh and of hot
 * reconfiguration, on a real weftd driven over raw ZeroMQ with the real
 * codec (as test_daemon.c), watched through a real sd_notify socket.
 *
 * One daemon, --devices cpu:4, mesh from its config file (dp=4), every
 * job part held at its start until the test writes a byte for it
 * (WEFT_TEST_HOLD_JOBS), so that "running" and "draining" are states the
 * test makes and waits for, however fast the machine:
 *  - status: mesh, epoch 0, each device's rank and coordinates;
 *  - dp=4 replicas run two jobs at once: both held on two devices at the
 *    same time (status), each on its own device (per-device
 *    jobs_served);
 *  - reconfigure to ring=2,ulysses=2: epoch 1 in the reply and in status,
 *    the new coordinates, RELOADING=1 / READY=1, and a context-parallel
 *    job right against the fp64 reference under epoch 1;
 *  - invalid meshes (product 3; a zero degree) refused, nothing changed;
 *  - a second reconfiguration while one drains (a job held running on
 *    every device) gets WF_E_BUSY, status says reconfiguring with the
 *    job sent meanwhile queued; once let go, the held job keeps its
 *    epoch, the queued one runs under the new one;
 *  - SIGHUP after editing the file's mesh: RELOADING=1 then READY=1 and
 *    the new mesh (ring=2,tp=2) with its coordinates;
 *  - SIGTERM: exit 0.
 * Tolerances: out f32 1e-4 absolute (values in [-1, 1]), lse 1e-3.
 *
 * Usage: test_reconfig_basic PATH_TO_WEFTD. Every wait is an event wait
 * with a deadline.
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
#include "support/wait.h"


/* ------------------------------------------------------------------ */
/* scenario */

/* Drop the notify datagrams received so far. */
static void notify_drain(daemon_t *d)
{
    char buf[4096];
    while (recv(d->nfd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
}

static bool send_reconfigure(daemon_t *d, uint64_t id, uint32_t dp, uint32_t ring,
                             uint32_t ulysses, uint32_t tp)
{
    wf_request_t req;
    memset(&req, 0, sizeof req);
    req.version = WF_PROTOCOL_VERSION;
    req.op = WF_OP_RECONFIGURE;
    req.id = id;
    req.args.reconfigure.mesh = (wf_mesh_degrees_t){ dp, ring, ulysses, tp };
    wf_buf_t b = { 0 };
    bool ok = wf_request_encode(&req, &b) == WF_OK &&
              send_frames(d->sock, false, &b, 0, NULL, NULL);
    wf_buf_free(&b);
    return ok;
}

/* {"v":1,"id":id,"op":4,"args":{"ring":0}}: the encoder refuses a zero
 * degree, so the bytes are written by hand. */
static bool send_zero_degree(daemon_t *d, uint8_t id)
{
    const unsigned char hdr[] = {
        0x84, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', (unsigned char)(id & 0x7f),
        0xa2, 'o', 'p', 0x04, 0xa4, 'a', 'r', 'g', 's',
        0x81, 0xa4, 'r', 'i', 'n', 'g', 0x00 };
    return zmq_send(d->sock, hdr, sizeof hdr, 0) == (int)sizeof hdr;
}

/* Receive replies until the one with `id`; any other is a failure. */
static bool recv_id(daemon_t *d, uint64_t id, reply_t *r)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;
    for (;;) {
        if (!recv_reply(d, left_ms(deadline), r))
            return false;
        if (r->rep.id == id)
            return true;
        fprintf(stderr, "unexpected reply id %llu while waiting for %llu\n",
                (unsigned long long)r->rep.id, (unsigned long long)id);
        reply_clear(r);
        failed++;
    }
}

static void check_mesh(const wf_status_info_t *si, uint32_t dp, uint32_t ring,
                       uint32_t ul, uint32_t tp, uint64_t epoch)
{
    CHECK(si->mesh.dp == dp && si->mesh.ring == ring && si->mesh.ulysses == ul &&
          si->mesh.tp == tp);
    CHECK(si->epoch == epoch);
    CHECK(si->device_count == 4);
    for (uint32_t d = 0; d < si->device_count && d < 4; d++) {
        /* row-major (dp, ring, ulysses, tp), tp innermost */
        uint32_t c[4] = { d / (ring * ul * tp), d / (ul * tp) % ring, d / tp % ul,
                          d % tp };
        const wf_device_info_t *di = &si->devices[d];
        CHECK(di->rank == d);
        if (memcmp(di->coords, c, sizeof c) != 0) {
            fprintf(stderr, "device %u: coords %u,%u,%u,%u, want %u,%u,%u,%u\n", d,
                    di->coords[0], di->coords[1], di->coords[2], di->coords[3],
                    c[0], c[1], c[2], c[3]);
            failed++;
        }
    }
}

/* wait_for's condition: at least `want` devices busy (a job part running
 * or held at its start), from status requests with ids from `id` up (no
 * other reply is due while they run: every job is held). */
typedef struct busy_wait {
    daemon_t *d;
    reply_t *r;
    uint64_t id;
    uint32_t want, got;
} busy_wait_t;

static bool devices_busy(void *arg)
{
    busy_wait_t *b = arg;
    b->got = 0;
    if (get_status(b->d, b->r, b->id++)) {
        const wf_status_info_t *si = &b->r->rep.result.status;
        for (uint32_t i = 0; i < si->device_count; i++)
            b->got += si->devices[i].busy ? 1 : 0;
    }
    return b->got >= b->want;
}

static void test_reconfig(const char *weftd, reply_t *r)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "/tmp/weft-test-reconfig-%d.conf", (int)getpid());
    /* a reconfiguration waits for the held job for ever, not
     * reconfigure_timeout_ms */
    write_file(cfg, "devices = cpu:4\nmesh = dp=4\nreconfigure_timeout_ms = 0\n");
    const char *args[] = { "--config", cfg, NULL };
    hold_t h;
    CHECK(hold_make(&h));
    const char *env[] = { h.env, NULL };
    daemon_t d;
    CHECK(daemon_start_env(&d, weftd, args, env));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    busy_wait_t bw = { .d = &d, .r = r, .id = 1000 };

    /* the initial mesh */
    CHECK(get_status(&d, r, 1));
    check_mesh(&r->rep.result.status, 4, 1, 1, 1, 0);
    CHECK(r->rep.result.status.reconfiguring == 0);

    /* dp=4: two jobs at once, each on one device of its own replica */
    static const attn_case_t mid = { "f32 dp replica", WF_DTYPE_F32, 1, 1024, 1024,
                                     4, 4, 64, false, false, false, 0, 0, 0, 1,
                                     false };
    attn_job_t j1, j2;
    attn_job_make(&mid, &j1, 11);
    attn_job_make(&mid, &j2, 12);
    CHECK(attn_send(&d, &mid, &j1, 100) && attn_send(&d, &mid, &j2, 101));
    /* both held at once, on two devices; then let go */
    bw.want = 2;
    CHECK(wait_for(devices_busy, &bw, WAIT_EVENT_MS));
    if (bw.got != 2)
        fprintf(stderr, "dp=4: %u devices busy with the two jobs, want 2\n", bw.got);
    CHECK(hold_release(&h, 2));
    /* either reply may come first */
    uint64_t compute1 = 0, queue2 = 0;
    bool seen1 = false, seen2 = false;
    for (int k = 0; k < 2; k++) {
        CHECK(recv_reply(&d, TIMEOUT_MS, r));
        if (r->rep.id == 100 && !seen1) {
            seen1 = true;
            attn_check(&mid, &j1, r);
            compute1 = r->rep.result.attention.compute_us;
        } else if (r->rep.id == 101 && !seen2) {
            seen2 = true;
            attn_check(&mid, &j2, r);
            queue2 = r->rep.result.attention.queue_us;
        } else {
            fprintf(stderr, "unexpected reply id %llu\n", (unsigned long long)r->rep.id);
            failed++;
        }
        CHECK(r->rep.epoch == 0);
        reply_clear(r);
    }
    CHECK(seen1 && seen2);
    printf("  dp=4: job 1 computed %llu us; job 2 waited %llu us in the queue\n",
           (unsigned long long)compute1, (unsigned long long)queue2);
    /* that each ran on a replica of its own: the per-device counters */
    attn_job_free(&j1);
    attn_job_free(&j2);
    CHECK(get_status(&d, r, 2));
    {
        const wf_status_info_t *si = &r->rep.result.status;
        uint32_t used = 0, total = 0;
        for (uint32_t i = 0; i < si->device_count; i++) {
            used += si->devices[i].jobs_served > 0;
            total += (uint32_t)si->devices[i].jobs_served;
        }
        CHECK(used == 2 && total == 2);   /* two replicas, one job part each */
    }

    /* reconfigure to ring=2,ulysses=2: reply, status, notify */
    notify_drain(&d);
    CHECK(send_reconfigure(&d, 3, 1, 2, 2, 1) && recv_id(&d, 3, r));
    CHECK(r->rep.status == WF_OK && r->rep.op == WF_OP_RECONFIGURE);
    CHECK(r->rep.epoch == 1 && r->rep.result.reconfigure.epoch == 1);
    CHECK(r->rep.result.reconfigure.mesh.ring == 2 &&
          r->rep.result.reconfigure.mesh.ulysses == 2 &&
          r->rep.result.reconfigure.mesh.dp == 1 && r->rep.result.reconfigure.mesh.tp == 1);
    reply_clear(r);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 4));
    check_mesh(&r->rep.result.status, 1, 2, 2, 1, 1);
    CHECK(r->rep.result.status.reconfiguring == 0);

    /* a job under the new mesh: context parallel over the 4 devices */
    static const attn_case_t cp = { "f32 ring=2 x ulysses=2, lse", WF_DTYPE_F32, 2, 64,
                                    64, 4, 2, 32, true, true, false, 0, 0, 0, 4,
                                    false };
    attn_job_t j3;
    attn_job_make(&cp, &j3, 13);
    CHECK(hold_release(&h, 4));     /* one part on each device */
    CHECK(attn_send(&d, &cp, &j3, 102) && recv_id(&d, 102, r));
    attn_check(&cp, &j3, r);
    CHECK(r->rep.epoch == 1);
    reply_clear(r);
    attn_job_free(&j3);

    /* invalid meshes change nothing */
    CHECK(send_reconfigure(&d, 5, 1, 3, 1, 1) && recv_id(&d, 5, r));
    CHECK(r->rep.status == WF_E_BAD_ARGUMENT);
    CHECK(strstr(r->rep.error, "is 3") && strstr(r->rep.error, "(4)"));
    printf("  ring=3 refused: %s\n", r->rep.error);
    reply_clear(r);
    CHECK(send_zero_degree(&d, 6) && recv_id(&d, 6, r));
    /* the codec refuses a degree out of 1..max (WF_E_BAD_FIELD) before the
     * daemon's check (WF_E_BAD_ARGUMENT) would */
    CHECK(r->rep.status == WF_E_BAD_FIELD || r->rep.status == WF_E_BAD_ARGUMENT);
    CHECK(strstr(r->rep.error, "ring") != NULL);
    printf("  ring=0 refused: %s: %s\n", wf_status_name(r->rep.status), r->rep.error);
    reply_clear(r);
    CHECK(get_status(&d, r, 7));
    check_mesh(&r->rep.result.status, 1, 2, 2, 1, 1);

    /* busy: a job held on every device keeps reconfiguration 8 draining */
    static const attn_case_t big = { "f32 held job", WF_DTYPE_F32, 1, 256, 256, 4, 4,
                                     64, false, false, false, 0, 0, 0, 4, false };
    static const attn_case_t small = { "f32 queued during the drain", WF_DTYPE_F32, 1,
                                       32, 32, 4, 4, 16, false, true, false, 0, 0, 0,
                                       1, false };
    attn_job_t jb, js;
    attn_job_make(&big, &jb, 14);
    attn_job_make(&small, &js, 15);
    notify_drain(&d);
    CHECK(attn_send(&d, &big, &jb, 103));
    bw.want = 4;
    CHECK(wait_for(devices_busy, &bw, WAIT_EVENT_MS));
    CHECK(send_reconfigure(&d, 8, 4, 1, 1, 1));
    CHECK(send_reconfigure(&d, 9, 1, 4, 1, 1));
    CHECK(attn_send(&d, &small, &js, 104));
    CHECK(send_simple(&d, WF_OP_STATUS, 10));
    CHECK(recv_id(&d, 9, r));
    CHECK(r->rep.status == WF_E_BUSY);
    printf("  second reconfiguration: %s: %s\n", wf_status_name(r->rep.status),
           r->rep.error);
    reply_clear(r);
    CHECK(recv_id(&d, 10, r));
    CHECK(r->rep.status == WF_OK && r->rep.result.status.reconfiguring == 1);
    CHECK(r->rep.result.status.epoch == 1 && r->rep.result.status.queue_depth == 1);
    reply_clear(r);
    /* let every job part go from here on */
    CHECK(hold_open_gate(&h, 4));
    CHECK(recv_id(&d, 103, r));
    attn_check(&big, &jb, r);
    CHECK(r->rep.epoch == 1);        /* ran under the mesh it was dispatched on */
    reply_clear(r);
    CHECK(recv_id(&d, 8, r));
    CHECK(r->rep.status == WF_OK && r->rep.result.reconfigure.epoch == 2 &&
          r->rep.result.reconfigure.mesh.dp == 4);
    reply_clear(r);
    CHECK(recv_id(&d, 104, r));
    attn_check(&small, &js, r);
    CHECK(r->rep.epoch == 2);        /* waited in the queue, ran on the new mesh */
    reply_clear(r);
    attn_job_free(&jb);
    attn_job_free(&js);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));

    /* SIGHUP after editing the file's mesh */
    notify_drain(&d);
    write_file(cfg, "devices = cpu:4\nmesh = ring=2,tp=2\nreconfigure_timeout_ms = 0\n");
    CHECK(kill(d.pid, SIGHUP) == 0);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 11));
    check_mesh(&r->rep.result.status, 1, 2, 1, 2, 3);
    CHECK(r->rep.result.status.reconfiguring == 0);
    /* an invalid file changes nothing */
    notify_drain(&d);
    write_file(cfg, "devices = cpu:4\nmesh = ring=3\nreconfigure_timeout_ms = 0\n");
    CHECK(kill(d.pid, SIGHUP) == 0);
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 12));
    check_mesh(&r->rep.result.status, 1, 2, 1, 2, 3);

    /* a job on ring=2,tp=2: two context-parallel groups of two heads */
    static const attn_case_t rt = { "f32 ring=2 x tp=2, causal", WF_DTYPE_F32, 1, 48,
                                    48, 4, 4, 32, true, true, false, 0, 0, 0, 4,
                                    false };
    attn_job_t jr;
    attn_job_make(&rt, &jr, 16);
    CHECK(attn_send(&d, &rt, &jr, 105) && recv_id(&d, 105, r));
    attn_check(&rt, &jr, r);
    CHECK(r->rep.epoch == 3);
    reply_clear(r);
    attn_job_free(&jr);

    CHECK(kill(d.pid, SIGTERM) == 0);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
    hold_remove(&h);
    unlink(cfg);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    reply_t *r = calloc(1, sizeof *r);
    test_reconfig(argv[1], r);
    free(r);
    if (failed) {
        fprintf(stderr, "test_reconfig_basic: %d check(s) failed\n", failed);
        return 1;
    }
    printf("test_reconfig_basic: all checks passed\n");
    return 0;
}
