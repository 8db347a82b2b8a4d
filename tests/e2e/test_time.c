/* test_time.c — end to end: time limits of jobs on a real weftd through
 * libweft, over CURVE so that roles are real.
 *
 * One daemon: --devices cpu:2, mesh ring=2 (every attention job and
 * every forward is context parallel: one part on each device,
 * collectives at every ring step), tcp on 127.0.0.1 with key_file and
 * client_keys (admin "ops", submit "alice" and "bob"),
 * reconfigure_timeout_ms 400, job_timeout_ms 0 in its config file until
 * (f). Every job part waits at its start for a byte from the test
 * (WEFT_TEST_HOLD_JOBS): the test writes one byte per part of each job it
 * lets run, and a "held" job (a small one no byte is written for) is
 * running, both devices busy in status, for as long as a case needs,
 * however fast the machine. A held job that is let go ends at the first
 * step boundary its ranks reach once its deadline passed or its cancel
 * came (the start, or a later boundary when the part let go first already
 * ran on to the first collective): the cases below let one part go before
 * that and the other after, and check the stop, not a time. A "small"
 * job is checked against the fp64 reference.
 *  (a) q/k/v (1, 2^24, 1, 1) f16 (~1.1e15 flops) is refused with
 *      WF_E_LIMIT naming max_job_flops; nothing was queued (admitted, it
 *      would have been held and the client's 60 s timeout would read
 *      WF_E_TIMEOUT);
 *  (b) a held job with deadline_ms 200, its second part let go once the
 *      deadline passed, ends WF_E_DEADLINE, not before the deadline, its
 *      message naming the deadline and its devices free; the next small
 *      job on the same daemon is right, and the daemon rebuilt nothing
 *      (epoch unchanged: no world was aborted);
 *  (c) a held job cancelled by its own client between its two parts'
 *      release: the cancel is OK, the job ends WF_E_CANCELLED, the next
 *      small job is right;
 *  (d) a job queued behind a held one, cancelled: WF_E_CANCELLED "while
 *      it was queued", the held one is not disturbed (cancelled after);
 *  (e) bob (submit), as a raw CURVE peer, sends cancel for every id 1..500
 *      (alice's held job has one of them): all WF_E_BAD_ARGUMENT and
 *      alice's job is still pending; libweft refuses another client's job
 *      handle; the admin's same scan cancels exactly one job, alice's,
 *      which ends WF_E_CANCELLED; a cancel of a finished job is
 *      WF_E_BAD_ARGUMENT;
 *  (f) job_timeout_ms 1500 written to the config file, SIGHUP: a held
 *      job without a deadline of its own, let go once 1500 ms passed,
 *      ends WF_E_DEADLINE from it (1500 ms in its message); job_timeout_ms
 *      0 again (SIGHUP), the next small job is right;
 *  (g) a reconfigure (to dp=2) blocked by a held job gives up with
 *      WF_E_BUSY naming reconfigure_timeout_ms, not before it (the job
 *      never drains: only the timeout ends the wait; without it the
 *      client's 60 s timeout would read WF_E_TIMEOUT); the old mesh
 *      (ring=2, same epoch) serves the next small job right;
 *  (h) a causal ring job whose holdings are cut into several query-row
 *      chunks (how ring steps run, for the stop checks) is right against
 *      the fp64 reference.
 *  (i) forward options and weftctl cancel: the admin loads flux-tiny (the
 *      diffusers fixture); behind alice's held job, bob's forward with
 *      wf_forward_opts_t deadline_ms 100 ends WF_E_DEADLINE while it was
 *      queued; the admin's `weftctl cancel ID` (alice's request id,
 *      wf_job_id) prints "cancelled ID" and exits 0, alice's job ends
 *      WF_E_CANCELLED; the same cancel again exits 1 (no such job); bob's
 *      forward without a deadline then matches diffusers' output (fluxio
 *      tolerance), and one through wf_forward_submit + wf_job_wait too.
 *  (j) a second daemon, mesh dp=4 (a small job runs on one device) and
 *      every job part held at its start (WEFT_TEST_HOLD_JOBS): ops
 *      (admin), alice and bob each have one job running under the same
 *      request id. Bob (submit) cancels his job twice, then the admin its
 *      own twice: each cancel is WF_OK (the second finds the job it
 *      already flagged), and alice's job, the one unflagged job left with
 *      that id, is untouched by the admin's second cancel; once released,
 *      ops's and bob's jobs end WF_E_CANCELLED and alice's is right
 *      against the fp64 reference.
 * Every wait is for an event (a reply, status, a notify line) bounded by
 * WAIT_EVENT_MS or the client's timeout; the only stretches of time are
 * the deadlines of (b) and (f), which the test lets pass on purpose.
 *
 * usage: test_time WEFTD FIXTURES WEFTCTL
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "keys.h"
#include "proto.h"
#include "support/clusterd.h"
#include "support/fluxio.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"


/* the clients' timeout: a reply that never comes reads WF_E_TIMEOUT */
#define TIMEOUT_MS ((int)WAIT_EVENT_MS)
#define JOB_TIMEOUT_MS 1500
#define RECONF_TIMEOUT_MS 400
/* job parts of one job on the main daemon (ring=2: one per device) */
#define PARTS 2u

static const char *weftd, *fixtures, *weftctl;
static char dir[] = "/tmp/weft-time-XXXXXX";
static char ep[64];

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* The main daemon's job hold (WEFT_TEST_HOLD_JOBS): a FIFO in dir, its
 * variable for the daemon's environment, and the test's end, opened for
 * reading and writing (the open waits for no reader, a write never fails
 * for want of one). */
static char hold_path[256], hold_env[320];
static int hold_fd = -1;

static bool hold_setup(void)
{
    path_of(hold_path, sizeof hold_path, "main-hold");
    if (mkfifo(hold_path, 0600) != 0) {
        perror(hold_path);
        return false;
    }
    hold_fd = open(hold_path, O_RDWR | O_CLOEXEC);
    if (hold_fd < 0) {
        perror(hold_path);
        return false;
    }
    snprintf(hold_env, sizeof hold_env, "WEFT_TEST_HOLD_JOBS=%s", hold_path);
    return true;
}

/* Let `parts` job parts on the main daemon run: one byte each, read by
 * the worker that holds (or next holds) a part. */
static void let_run(unsigned parts)
{
    for (unsigned i = 0; i < parts; i++) {
        ssize_t w;
        do
            w = write(hold_fd, "1", 1);
        while (w < 0 && errno == EINTR);
        CHECKM(w == 1, "let a job part run: %s", strerror(errno));
    }
}

/* Sleep until now_s() reads at least t: the daemon's deadlines are on the
 * same monotonic clock. */
static void sleep_until(double t)
{
    for (double left; (left = t - now_s()) > 0;) {
        long ns = (long)((left - (double)(time_t)left) * 1e9) + 1;
        struct timespec ts = { (time_t)left, ns < 1000000000L ? ns : 999999999L };
        nanosleep(&ts, NULL);
    }
}

static void make_keys(const char *name, wf_keypair_t *kp)
{
    char path[256], err[512];
    path_of(path, sizeof path, name);
    if (wf_keypair_generate(kp, err, sizeof err) != WF_OK ||
        wf_keypair_write(path, kp, err, sizeof err) != WF_OK) {
        fprintf(stderr, "keys %s: %s\n", name, err);
        exit(1);
    }
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* weftd with `extra` flags, stderr into dir/time.log, READY=1 awaited. */
static bool start(clusterd_node_t *n, char *log, size_t log_len,
                  const char *const *extra)
{
    memset(n, 0, sizeof *n);
    if (!clusterd_node_open(n, "time", "d"))
        return false;
    path_of(log, log_len, "time.log");
    const char *argv[40] = { weftd, "--devices", "cpu:2", "--cpu-memory", "512M",
                             "--log-level", "info" };
    size_t k = 7;
    for (size_t i = 0; extra[i] && k < 39; i++)
        argv[k++] = extra[i];
    argv[k] = NULL;
    const char *const env[] = { hold_env, NULL };
    spawn_opts_t o = { .env = env, .log_path = log };
    return clusterd_spawn(&n->p, argv, &o) &&
           clusterd_node_wait(n, "READY=1", TIMEOUT_MS, NULL, 0);
}

static wf_client_t *watcher;     /* polls status: keeps the others' ids small */

/* A CURVE client of the daemon at `endpoint` with the key pair `who`. */
static wf_client_t *connect_at(const char *endpoint, const char *who)
{
    char sp[256], cp[256];
    path_of(sp, sizeof sp, "daemon.pub");
    path_of(cp, sizeof cp, who);
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect_curve(endpoint, TIMEOUT_MS, sp, cp, &c);
    CHECKM(st == WF_OK, "connect %s: %s: %s", who, wf_status_name(st),
           wf_client_last_error(NULL));
    return c;
}

static wf_client_t *connect_as(const char *who)
{
    return connect_at(ep, who);
}

static const jcase_t small_case = {
    .name = "small", .B = 1, .Sq = 256, .Skv = 256, .Hq = 2, .Hkv = 1, .D = 32,
    .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .causal = 0, .want_lse = true,
};

/* A small job, let run on the main daemon, right against the fp64
 * reference. */
static void small_ok(wf_client_t *c, uint64_t seed, const char *what)
{
    jbuf_t b;
    if (!jbuf_init(&b, &small_case, seed)) {
        CHECKM(false, "%s: out of memory", what);
        return;
    }
    wf_attention_opts_t o = opts_of(&small_case);
    let_run(PARTS);
    double t0 = now_s();
    wf_job_result_t r;
    wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, &r);
    double ms = (now_s() - t0) * 1e3;
    CHECKM(st == WF_OK, "%s: %s: %s", what, wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        double eo, el, to, tl;
        jbuf_errors(&b, &eo, &el);
        jcase_tolerances(&small_case, false, &to, &tl);
        CHECKM(eo <= to && el <= tl, "%s: errors out %g lse %g", what, eo, el);
        printf("%s: OK in %.0f ms (epoch %" PRIu64 ", %u devices), out err %.2g\n",
               what, ms, r.epoch, r.devices, eo);
    }
    jbuf_free(&b);
}

/* wait_for's condition: at least `want` of the daemon's devices are busy
 * (running a job part, or held at its start), from status on c. */
typedef struct busy_wait {
    wf_client_t *c;
    uint32_t want;
    uint32_t got;
} busy_wait_t;

static bool devices_busy(void *arg)
{
    busy_wait_t *b = arg;
    wf_status_info_t *si = calloc(1, sizeof *si);
    b->got = 0;
    if (si && wf_status(b->c, si) == WF_OK)
        for (uint32_t d = 0; d < si->device_count; d++)
            b->got += si->devices[d].busy ? 1 : 0;
    free(si);
    return b->got >= b->want;
}

/* Submit a small job (deadline_ms as given) into *b / *job that no byte
 * is written for, and wait until both devices show it busy: it is
 * running, held at the start of both parts, until the case lets them go
 * (let_run). False (checked) when it was not submitted; *b is then free. */
static bool held_submit(wf_client_t *c, jbuf_t *b, uint32_t deadline_ms, uint64_t seed,
                        wf_job_t **job)
{
    if (!jbuf_init(b, &small_case, seed)) {
        CHECKM(false, "held job: out of memory");
        return false;
    }
    wf_attention_opts_t o = opts_of(&small_case);
    o.deadline_ms = deadline_ms;
    wf_status_t st = wf_attention_submit(c, &b->q, &b->k, &b->v, &o, &b->out, b->lse, job);
    CHECKM(st == WF_OK, "held submit: %s: %s", wf_status_name(st), wf_client_last_error(c));
    if (st != WF_OK) {
        jbuf_free(b);
        return false;
    }
    busy_wait_t bw = { watcher, PARTS, 0 };
    CHECKM(wait_for(devices_busy, &bw, WAIT_EVENT_MS), "the held job shows on %u of %u "
           "devices", bw.got, PARTS);
    return true;
}

static uint64_t epoch_of(wf_client_t *c, wf_mesh_degrees_t *mesh)
{
    wf_status_info_t *si = calloc(1, sizeof *si);
    uint64_t e = UINT64_MAX;
    if (si && wf_status(c, si) == WF_OK) {
        e = si->epoch;
        if (mesh)
            *mesh = si->mesh;
        CHECKM(si->in_flight == 0 && si->queue_depth == 0,
               "daemon not idle: %u running, %u queued", si->in_flight, si->queue_depth);
    }
    free(si);
    return e;
}

/* (a) */
static void test_flops(wf_client_t *c)
{
    const int64_t S = INT64_C(1) << 24;
    uint16_t *buf = calloc((size_t)S * 4, sizeof(uint16_t));
    if (!buf) {
        CHECKM(false, "(a) out of memory");
        return;
    }
    wf_tensor_t q = { .data = buf, .dtype = WF_DTYPE_F16, .rank = 4, .shape = { 1, S, 1, 1 } };
    wf_tensor_t k = q, v = q, out = q;
    k.data = buf + S;
    v.data = buf + 2 * S;
    out.data = buf + 3 * S;
    double t0 = now_s();
    wf_status_t st = wf_attention(c, &q, &k, &v, NULL, &out, NULL, NULL);
    double ms = (now_s() - t0) * 1e3;
    const char *msg = wf_client_last_error(c);
    CHECKM(st == WF_E_LIMIT && strstr(msg, "max_job_flops"), "(a) %s: %s",
           wf_status_name(st), msg);
    printf("(a) (1, 2^24, 1, 1) f16: %s in %.0f ms: %s\n", wf_status_name(st), ms, msg);
    free(buf);
}

/* After a held job was stopped: the next small job is right and the
 * world was not rebuilt (epoch e0: nothing was aborted). */
static void next_job_ok(wf_client_t *c, uint64_t e0, uint64_t seed, const char *tag)
{
    small_ok(c, seed, tag);
    CHECKM(epoch_of(c, NULL) == e0, "%s: the world was rebuilt (epoch moved)", tag);
}

/* (b) and (f): a held job stopped by its deadline: deadline_ms its own
 * (0: none, the daemon's job_timeout_ms applies), limit_ms the one in
 * force. One part is let go at once, the other once the deadline has
 * passed: the job cannot have finished before it, and ends at the next
 * step boundary. Returns the epoch before it (e0) for next_job_ok. */
static uint64_t test_deadline(wf_client_t *c, uint32_t deadline_ms, uint32_t limit_ms,
                              const char *tag, const char *want_ms)
{
    uint64_t e0 = epoch_of(c, NULL);
    jbuf_t b;
    wf_job_t *job = NULL;
    double t0 = now_s();
    if (!held_submit(c, &b, deadline_ms, 11, &job))
        return e0;
    /* received before it showed busy: its deadline is at most limit_ms
     * from now */
    double t_busy = now_s();
    let_run(1);
    sleep_until(t_busy + limit_ms / 1e3);
    let_run(1);
    wf_status_t st = wf_job_wait(c, job, TIMEOUT_MS);
    double ms = (now_s() - t0) * 1e3;
    const char *msg = wf_job_error(job);
    CHECKM(st == WF_E_DEADLINE && strstr(msg, want_ms) && strstr(msg, "deadline") &&
           strstr(msg, "its devices are free"), "%s: %s: %s", tag, wf_status_name(st), msg);
    /* t0 precedes the job's receipt, from which the deadline counts */
    CHECKM(ms >= limit_ms, "%s: ended %.0f ms after the submit, before its deadline", tag,
           ms);
    printf("%s: %s after %.0f ms: %s\n", tag, wf_status_name(st), ms, msg);
    wf_job_destroy(c, &job);
    jbuf_free(&b);
    return e0;
}

/* (c) */
static void test_cancel_running(wf_client_t *c)
{
    uint64_t e0 = epoch_of(c, NULL);
    jbuf_t b;
    wf_job_t *job = NULL;
    if (!held_submit(c, &b, 0, 12, &job))
        return;
    let_run(1);
    double t0 = now_s();
    wf_status_t cs = wf_cancel(c, job);
    CHECKM(cs == WF_OK, "(c) cancel: %s: %s", wf_status_name(cs), wf_client_last_error(c));
    let_run(1);
    wf_status_t st = wf_job_wait(c, job, TIMEOUT_MS);
    double ms = (now_s() - t0) * 1e3;
    CHECKM(st == WF_E_CANCELLED && strstr(wf_job_error(job), "its devices are free"),
           "(c) job: %s: %s", wf_status_name(st), wf_job_error(job));
    printf("(c) running job cancelled: %s %.0f ms after the cancel: %s\n",
           wf_status_name(st), ms, wf_job_error(job));
    wf_job_destroy(c, &job);
    jbuf_free(&b);
    next_job_ok(c, e0, 22, "(c) next job");
}

/* (d) */
static void test_cancel_queued(wf_client_t *c)
{
    jbuf_t lb, qb;
    wf_job_t *run = NULL, *queued = NULL;
    if (!held_submit(c, &lb, 0, 13, &run))
        return;
    if (!jbuf_init(&qb, &small_case, 14)) {
        CHECKM(false, "(d) out of memory");
        jbuf_free(&lb);
        return;
    }
    /* both devices hold the first job: this one queues behind it (the
     * cancel goes out after it on the same connection) */
    wf_attention_opts_t o = opts_of(&small_case);
    CHECKM(wf_attention_submit(c, &qb.q, &qb.k, &qb.v, &o, &qb.out, qb.lse, &queued) == WF_OK,
           "(d) submit");
    double t0 = now_s();
    wf_status_t cs = queued ? wf_cancel(c, queued) : WF_E_INTERNAL;
    wf_status_t st = queued ? wf_job_wait(c, queued, TIMEOUT_MS) : WF_E_INTERNAL;
    double ms = (now_s() - t0) * 1e3;
    const char *msg = queued ? wf_job_error(queued) : "";
    CHECKM(cs == WF_OK && st == WF_E_CANCELLED && strstr(msg, "while it was queued"),
           "(d) cancel %s, job %s: %s", wf_status_name(cs), wf_status_name(st), msg);
    printf("(d) queued job cancelled in %.0f ms: %s\n", ms, msg);
    CHECKM(wf_job_poll(c, run) == WF_E_PENDING, "(d) the held job was disturbed");
    CHECKM(wf_cancel(c, run) == WF_OK, "(d) cancel the held one");
    let_run(PARTS);
    st = wf_job_wait(c, run, TIMEOUT_MS);
    CHECKM(st == WF_E_CANCELLED, "(d) held: %s", wf_status_name(st));
    wf_job_destroy(c, &queued);
    wf_job_destroy(c, &run);
    jbuf_free(&qb);
    jbuf_free(&lb);
    small_ok(c, 23, "(d) next job");
}

/* A raw CURVE peer (DEALER) with key pair kp: cancel every id in
 * [1, n] (pipelined), count the replies by status into ok / bad / other. */
static wf_keypair_t kd, ka, ks, kb;

static void raw_cancel_scan(const wf_keypair_t *kp, uint64_t n, int *ok, int *bad,
                            int *other)
{
    *ok = *bad = *other = 0;
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, to = (int)WAIT_EVENT_MS;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, kd.public_key, WF_KEY_Z85_LEN);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, kp->public_key, WF_KEY_Z85_LEN);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, kp->secret_key, WF_KEY_Z85_LEN);
    CHECKM(zmq_connect(s, ep) == 0, "raw connect");
    wf_request_t *req = calloc(1, sizeof *req);
    wf_reply_t *rep = calloc(1, sizeof *rep);
    wf_buf_t b = { 0 };
    for (uint64_t id = 1; req && id <= n; id++) {
        memset(req, 0, sizeof *req);
        req->version = WF_PROTOCOL_VERSION;
        req->op = WF_OP_CANCEL;
        req->id = 100000 + id;
        req->args.cancel.id = id;
        wf_buf_reset(&b);
        if (wf_request_encode(req, &b) != WF_OK ||
            zmq_send(s, b.data, b.len, 0) != (int)b.len) {
            CHECKM(false, "raw send");
            break;
        }
    }
    for (uint64_t i = 0; rep && i < n; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            CHECKM(false, "raw: %" PRIu64 " of %" PRIu64 " replies", i, n);
            break;
        }
        char err[256];
        if (wf_reply_decode(zmq_msg_data(&m), zmq_msg_size(&m), rep, err, sizeof err) !=
                WF_OK || rep->op != WF_OP_CANCEL)
            ++*other;
        else if (rep->status == WF_OK)
            ++*ok;
        else if (rep->status == WF_E_BAD_ARGUMENT)
            ++*bad;
        else
            ++*other;
        zmq_msg_close(&m);
    }
    wf_buf_free(&b);
    free(req);
    free(rep);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* (e) */
static void test_cancel_other(wf_client_t *alice, wf_client_t *ops)
{
    jbuf_t b;
    wf_job_t *job = NULL;
    if (!held_submit(alice, &b, 0, 15, &job))
        return;
    /* bob (submit) asks to cancel every id alice may have used */
    int ok, bad, other;
    raw_cancel_scan(&kb, 500, &ok, &bad, &other);
    CHECKM(ok == 0 && bad == 500 && other == 0, "(e) bob: %d OK, %d refused, %d other",
           ok, bad, other);
    CHECKM(wf_job_poll(alice, job) == WF_E_PENDING, "(e) alice's job disturbed by bob");
    printf("(e) bob's 500 cancels of ids 1..500: %d refused (WF_E_BAD_ARGUMENT), "
           "alice's job still held\n", bad);
    /* libweft refuses another client's job handle before sending */
    CHECKM(wf_cancel(ops, job) == WF_E_BAD_ARGUMENT, "(e) wf_cancel with a foreign job");
    /* the admin may cancel anyone's: exactly one of the ids is running */
    raw_cancel_scan(&ka, 500, &ok, &bad, &other);
    CHECKM(ok == 1 && bad == 499 && other == 0, "(e) admin: %d OK, %d refused, %d other",
           ok, bad, other);
    let_run(PARTS);
    wf_status_t st = wf_job_wait(alice, job, TIMEOUT_MS);
    CHECKM(st == WF_E_CANCELLED, "(e) alice's job after the admin's cancel: %s",
           wf_status_name(st));
    printf("(e) the admin's scan cancelled alice's job: %s: %s\n", wf_status_name(st),
           wf_job_error(job));
    CHECKM(wf_cancel(alice, job) == WF_E_BAD_ARGUMENT, "(e) cancel of a finished job");
    wf_job_destroy(alice, &job);
    jbuf_free(&b);
}

/* (h): the ring steps of a daemon job run in chunks of query rows (for
 * the stop checks: max(512, 2^28 / (Skv_step * heads * D)) rows); a
 * causal job whose ring holdings (2048 rows, 2 heads, D 64: 1024-row
 * chunks) are cut into 2 chunks is still right against the fp64
 * reference, masks and skipped chunks included. */
static void test_chunks(wf_client_t *c)
{
    jcase_t k = { .name = "chunks", .B = 1, .Sq = 4096, .Skv = 4096, .Hq = 2, .Hkv = 1,
                  .D = 64, .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .causal = 1,
                  .want_lse = true, .lb = WF_OPT_OFF };
    jbuf_t b;
    if (!jbuf_init(&b, &k, 31)) {
        CHECKM(false, "(h) out of memory");
        return;
    }
    wf_attention_opts_t o = opts_of(&k);
    let_run(PARTS);
    wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, NULL);
    CHECKM(st == WF_OK, "(h) %s: %s", wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        double eo, el, to, tl;
        jbuf_errors(&b, &eo, &el);
        jcase_tolerances(&k, false, &to, &tl);
        CHECKM(eo <= to && el <= tl, "(h) errors out %g lse %g", eo, el);
        printf("(h) causal ring job in 2 chunks per step: out err %.2g, lse err %.2g\n", eo, el);
    }
    jbuf_free(&b);
}

/* (g) */
static void test_reconfigure_timeout(wf_client_t *ops)
{
    wf_mesh_degrees_t m0;
    uint64_t e0 = epoch_of(ops, &m0);
    jbuf_t b;
    wf_job_t *job = NULL;
    if (!held_submit(ops, &b, 0, 17, &job))
        return;
    wf_mesh_degrees_t dp2 = { 2, 1, 1, 1 };
    double t0 = now_s();
    uint64_t e = 0;
    wf_status_t st = wf_reconfigure(ops, &dp2, &e);
    double ms = (now_s() - t0) * 1e3;
    const char *msg = wf_client_last_error(ops);
    CHECKM(st == WF_E_BUSY && strstr(msg, "reconfigure_timeout_ms"), "(g) %s: %s",
           wf_status_name(st), msg);
    /* the daemon's clock starts at receipt, after t0 */
    CHECKM(ms >= RECONF_TIMEOUT_MS, "(g) gave up after %.0f ms, before "
           "reconfigure_timeout_ms", ms);
    printf("(g) reconfigure blocked by a held job: %s after %.0f ms: %s\n",
           wf_status_name(st), ms, msg);
    CHECKM(wf_cancel(ops, job) == WF_OK, "(g) cancel the held job");
    let_run(PARTS);
    st = wf_job_wait(ops, job, TIMEOUT_MS);
    CHECKM(st == WF_E_CANCELLED, "(g) held job: %s: %s", wf_status_name(st),
           wf_job_error(job));
    wf_job_destroy(ops, &job);
    jbuf_free(&b);
    small_ok(ops, 24, "(g) next job on the old mesh");
    wf_mesh_degrees_t m1;
    CHECKM(epoch_of(ops, &m1) == e0 && memcmp(&m0, &m1, sizeof m0) == 0,
           "(g) mesh or epoch changed");
}

/* Runs weftctl as the admin "ops" with `args`; its exit code (-1: could
 * not run, or still running WAIT_EVENT_MS past its own --timeout), stdout
 * (through a file in dir) into out. */
static int weftctl_as_ops(const char *const *args, char *out, size_t out_len)
{
    char sp[256], cp[256], op[256];
    path_of(sp, sizeof sp, "daemon.pub");
    path_of(cp, sizeof cp, "ops");
    path_of(op, sizeof op, "weftctl.out");
    char to[16];
    snprintf(to, sizeof to, "%d", TIMEOUT_MS);
    const char *argv[16] = { weftctl, "--endpoint", ep, "--server-key", sp,
                             "--client-key", cp, "--timeout", to };
    size_t k = 9;
    for (size_t i = 0; args[i] && k < 15; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    spawn_opts_t o = { .stdout_path = op };
    spawn_t p;
    if (!spawn_start(&p, argv, &o))
        return -1;
    bool done = spawn_wait(&p, TIMEOUT_MS + (int)WAIT_EVENT_MS);
    int rc = done && WIFEXITED(p.status) ? WEXITSTATUS(p.status) : -1;
    if (!done)
        fprintf(stderr, "weftctl %s: still running, killed\n", args[0]);
    spawn_close(&p);
    out[0] = '\0';
    FILE *f = fopen(op, "r");
    if (f) {
        size_t n = fread(out, 1, out_len - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    return rc;
}

/* A forward of flux-tiny on bob, let run, checked against diffusers'
 * output. */
static void forward_ok(wf_client_t *c, const fluxio_t *io, bool async, const char *what)
{
    wf_tensor_t out;
    if (!fluxio_output(io, WF_DTYPE_F32, &out)) {
        CHECKM(false, "%s: out of memory", what);
        return;
    }
    wf_status_t st;
    let_run(PARTS);
    if (async) {
        wf_job_t *job = NULL;
        st = wf_forward_submit(c, "tiny", &io->in, &out, NULL, &job);
        if (st == WF_OK) {
            st = wf_job_wait(c, job, TIMEOUT_MS);
            wf_job_destroy(c, &job);
        }
    } else {
        st = wf_forward_ex(c, "tiny", &io->in, &out, NULL, NULL);
    }
    CHECKM(st == WF_OK, "%s: %s: %s", what, wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        double e = fluxio_error(io, &out);
        CHECKM(e <= fluxio_tolerance(io), "%s: error %g > %g", what, e,
               fluxio_tolerance(io));
        printf("%s: OK, error %.2g (tolerance %g)\n", what, e, fluxio_tolerance(io));
    }
    free(out.data);
}

/* (i) */
static void test_forward_and_weftctl_cancel(wf_client_t *alice, wf_client_t *bob,
                                            wf_client_t *ops)
{
    wf_status_t st = wf_load_model(ops, "tiny", "flux-tiny", NULL, NULL);
    CHECKM(st == WF_OK, "(i) load: %s: %s", wf_status_name(st), wf_client_last_error(ops));
    fluxio_t io;
    if (st != WF_OK || !fluxio_load(&io, fixtures, "io-flux-tiny-f32.safetensors"))
        return;
    jbuf_t b;
    wf_job_t *job = NULL;
    if (held_submit(alice, &b, 0, 31, &job)) {
        wf_tensor_t out;
        if (fluxio_output(&io, WF_DTYPE_F32, &out)) {
            /* both devices hold alice's job: the forward can only wait */
            wf_forward_opts_t fo = { .deadline_ms = 100 };
            double t0 = now_s();
            st = wf_forward_ex(bob, "tiny", &io.in, &out, &fo, NULL);
            double ms = (now_s() - t0) * 1e3;
            const char *msg = wf_client_last_error(bob);
            CHECKM(st == WF_E_DEADLINE && strstr(msg, "while it was queued"),
                   "(i) forward deadline_ms 100: %s: %s", wf_status_name(st), msg);
            CHECKM(ms >= 100, "(i) the forward ended %.0f ms after the request, before "
                   "its deadline", ms);
            printf("(i) queued forward, deadline_ms 100: %s after %.0f ms: %s\n",
                   wf_status_name(st), ms, msg);
            free(out.data);
        }
        char id[32], text[256];
        snprintf(id, sizeof id, "%" PRIu64, wf_job_id(job));
        const char *args[] = { "cancel", id, NULL };
        int rc = weftctl_as_ops(args, text, sizeof text);
        char want[64];
        snprintf(want, sizeof want, "cancelled %s", id);
        CHECKM(rc == 0 && strstr(text, want), "(i) weftctl cancel %s: exit %d, '%s'", id, rc,
               text);
        let_run(PARTS);
        st = wf_job_wait(alice, job, TIMEOUT_MS);
        CHECKM(st == WF_E_CANCELLED, "(i) alice's job: %s: %s", wf_status_name(st),
               wf_job_error(job));
        printf("(i) weftctl cancel %s: exit %d; alice's job %s\n", id, rc,
               wf_status_name(st));
        rc = weftctl_as_ops(args, text, sizeof text);
        CHECKM(rc == 1, "(i) weftctl cancel %s again: exit %d (want 1)", id, rc);
        wf_job_destroy(alice, &job);
        jbuf_free(&b);
    }
    forward_ok(bob, &io, false, "(i) forward, no deadline");
    forward_ok(bob, &io, true, "(i) forward, wf_forward_submit");
    fluxio_free(&io);
}

/* (j) */
static void test_cancel_again(const char *keyfile, const char *clients)
{
    char fifo[256], env[320], hep[64];
    path_of(fifo, sizeof fifo, "hold");
    if (mkfifo(fifo, 0600) != 0) {
        CHECKM(false, "(j) mkfifo %s: %s", fifo, strerror(errno));
        return;
    }
    snprintf(env, sizeof env, "WEFT_TEST_HOLD_JOBS=%s", fifo);
    snprintf(hep, sizeof hep, "tcp://127.0.0.1:%d", test_port());
    clusterd_node_t n;
    memset(&n, 0, sizeof n);
    if (!clusterd_node_open(&n, "time", "held")) {
        CHECKM(false, "(j) notify socket");
        return;
    }
    path_of(n.p.log_path, sizeof n.p.log_path, "held.log");
    const char *argv[] = { weftd, "--devices", "cpu:4", "--cpu-memory", "256M",
                           "--log-level", "info", "--listen", hep, "--key-file", keyfile,
                           "--client-keys", clients, "--mesh", "dp=4", NULL };
    if (!clusterd_exec(&n.p, argv, env) ||
        !clusterd_node_wait(&n, "READY=1", TIMEOUT_MS, NULL, 0)) {
        CHECKM(false, "(j) the held daemon did not start");
        clusterd_node_close(&n);
        return;
    }
    /* the same requests on each connection: the same request id for the job */
    static const char *const who[3] = { "ops", "alice", "bob" };
    wf_client_t *c[3] = { NULL, NULL, NULL };
    jbuf_t b[3];
    wf_job_t *job[3] = { NULL, NULL, NULL };
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        c[i] = connect_at(hep, who[i]);
        if (!c[i] || !jbuf_init(&b[i], &small_case, 41 + (uint64_t)i)) {
            ok = false;
            break;
        }
        wf_attention_opts_t o = opts_of(&small_case);
        wf_status_t st = wf_attention_submit(c[i], &b[i].q, &b[i].k, &b[i].v, &o,
                                             &b[i].out, b[i].lse, &job[i]);
        CHECKM(st == WF_OK, "(j) %s submit: %s", who[i], wf_status_name(st));
        ok = ok && st == WF_OK;
    }
    if (ok) {
        uint64_t id = wf_job_id(job[0]);
        CHECKM(wf_job_id(job[1]) == id && wf_job_id(job[2]) == id,
               "(j) request ids %" PRIu64 ", %" PRIu64 ", %" PRIu64 ": not one id", id,
               wf_job_id(job[1]), wf_job_id(job[2]));
        busy_wait_t bw = { c[0], 3, 0 };
        CHECKM(wait_for(devices_busy, &bw, WAIT_EVENT_MS), "(j) %u of 3 jobs running",
               bw.got);
        /* bob (submit) twice, then the admin twice, each its own job */
        wf_status_t st[4];
        st[0] = wf_cancel(c[2], job[2]);
        st[1] = wf_cancel(c[2], job[2]);
        CHECKM(st[0] == WF_OK && st[1] == WF_OK, "(j) bob's cancels of his own running "
               "job: %s, %s: %s", wf_status_name(st[0]), wf_status_name(st[1]),
               wf_client_last_error(c[2]));
        st[2] = wf_cancel(c[0], job[0]);
        st[3] = wf_cancel(c[0], job[0]);
        CHECKM(st[2] == WF_OK && st[3] == WF_OK, "(j) the admin's cancels of its own "
               "running job: %s, %s: %s", wf_status_name(st[2]), wf_status_name(st[3]),
               wf_client_last_error(c[0]));
        printf("(j) job %" PRIu64 " of ops, alice and bob held; cancels: bob %s, %s; "
               "ops %s, %s\n", id, wf_status_name(st[0]), wf_status_name(st[1]),
               wf_status_name(st[2]), wf_status_name(st[3]));
    }
    /* each held part reads a byte of its own: one 'a' per device ('a'
     * also keeps later parts from waiting) */
    int fd = open(fifo, O_WRONLY | O_CLOEXEC);
    CHECKM(fd >= 0 && write(fd, "aaaa", 4) == 4, "(j) release the held jobs");
    if (fd >= 0)
        close(fd);
    static const wf_status_t want[3] = { WF_E_CANCELLED, WF_OK, WF_E_CANCELLED };
    for (int i = 0; i < 3; i++) {
        if (!job[i])
            continue;
        wf_status_t st = wf_job_wait(c[i], job[i], TIMEOUT_MS);
        CHECKM(st == want[i], "(j) %s's job: %s, want %s: %s", who[i], wf_status_name(st),
               wf_status_name(want[i]), wf_job_error(job[i]));
        if (i == 1 && st == WF_OK) {
            double eo, el, to, tl;
            jbuf_errors(&b[i], &eo, &el);
            jcase_tolerances(&small_case, false, &to, &tl);
            CHECKM(eo <= to && el <= tl, "(j) alice: errors out %g lse %g", eo, el);
        }
        printf("(j) %s's job: %s\n", who[i], wf_status_name(st));
        wf_job_destroy(c[i], &job[i]);
        jbuf_free(&b[i]);
    }
    for (int i = 0; i < 3; i++)
        wf_client_destroy(&c[i]);
    clusterd_kill(&n.p, SIGTERM);
    CHECKM(n.p.reaped && WIFEXITED(n.p.exit_status) && WEXITSTATUS(n.p.exit_status) == 0,
           "(j) the held daemon did not exit 0");
    clusterd_node_close(&n);
    unlink(fifo);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_time WEFTD FIXTURES WEFTCTL\n");
        return 2;
    }
    weftd = argv[1];
    fixtures = argv[2];
    weftctl = argv[3];
    block_test_signals();
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    make_keys("daemon", &kd);
    make_keys("ops", &ka);
    make_keys("alice", &ks);
    make_keys("bob", &kb);
    char keyfile[256], clients[256], text[1024];
    path_of(keyfile, sizeof keyfile, "daemon");
    path_of(clients, sizeof clients, "clients");
    snprintf(text, sizeof text, "admin %s ops\nsubmit %s alice\nsubmit %s bob\n",
             ka.public_key, ks.public_key, kb.public_key);
    write_text(clients, text);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", test_port());
    if (!hold_setup())
        return 1;
    char rt[16], cfg[256];
    snprintf(rt, sizeof rt, "%d", RECONF_TIMEOUT_MS);
    path_of(cfg, sizeof cfg, "weftd.conf");
    write_text(cfg, "job_timeout_ms = 0\n");
    const char *extra[] = { "--config", cfg, "--listen", ep, "--key-file", keyfile,
                            "--client-keys", clients, "--mesh", "ring=2",
                            "--reconfigure-timeout-ms", rt, "--model-root", fixtures,
                            NULL };
    clusterd_node_t n;
    char log[256];
    if (!start(&n, log, sizeof log, extra)) {
        fprintf(stderr, "daemon did not start (log %s)\n", log);
        return 1;
    }
    wf_client_t *ops = connect_as("ops"), *alice = connect_as("alice"),
                *bob = connect_as("bob");
    watcher = ops;
    if (ops && alice && bob) {
        small_ok(ops, 1, "warm-up");
        test_flops(alice);
        test_chunks(ops);
        uint64_t e0 = test_deadline(alice, 200, 200, "(b) deadline_ms 200", "200 ms");
        next_job_ok(alice, e0, 21, "(b) next job");
        test_cancel_running(alice);
        test_cancel_queued(alice);
        test_cancel_other(alice, ops);
        test_reconfigure_timeout(ops);
        test_forward_and_weftctl_cancel(alice, bob, ops);
        /* job_timeout_ms 0 until now (the config file); SIGHUP applies it
         * (RELOADING=1, then READY=1 once the settings are in force) */
        char line[64];
        snprintf(line, sizeof line, "job_timeout_ms = %d\n", JOB_TIMEOUT_MS);
        write_text(cfg, line);
        kill(n.p.pid, SIGHUP);
        CHECKM(clusterd_node_wait(&n, "RELOADING=1", TIMEOUT_MS, NULL, 0) &&
               clusterd_node_wait(&n, "READY=1", TIMEOUT_MS, NULL, 0), "(f) reload");
        e0 = test_deadline(alice, 0, JOB_TIMEOUT_MS, "(f) job_timeout_ms", "1500 ms");
        /* no time limit again for the next job */
        write_text(cfg, "job_timeout_ms = 0\n");
        kill(n.p.pid, SIGHUP);
        CHECKM(clusterd_node_wait(&n, "RELOADING=1", TIMEOUT_MS, NULL, 0) &&
               clusterd_node_wait(&n, "READY=1", TIMEOUT_MS, NULL, 0), "(f) reload to 0");
        next_job_ok(alice, e0, 25, "(f) next job");
        test_cancel_again(keyfile, clients);
    }
    wf_client_destroy(&bob);
    wf_client_destroy(&alice);
    wf_client_destroy(&ops);
    clusterd_kill(&n.p, SIGTERM);
    CHECKM(n.p.reaped && WIFEXITED(n.p.exit_status) && WEXITSTATUS(n.p.exit_status) == 0,
           "daemon did not exit 0 (log %s)", log);
    clusterd_node_close(&n);
    close(hold_fd);
    if (failed) {
        fprintf(stderr, "test_time: %d checks failed (log %s)\n", failed, log);
        return 1;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    printf("test_time: all checks passed\n");
    return 0;
}
