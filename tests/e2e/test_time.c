/* test_time.c — end to end: time limits of jobs on a real weftd through
 * libweft, over CURVE so that roles are real.
 *
 * One daemon: --devices cpu:2, mesh ring=2 (every attention job is
 * context parallel: both ranks, collectives at every ring step), tcp on
 * 127.0.0.1 with key_file and client_keys (admin "ops", submit "alice"
 * and "bob"), reconfigure_timeout_ms 400, job_timeout_ms 0 in its config
 * file until (f). A "long" job is q = k = v (1, 65536, 1, 64) f32 (about
 * 1.1e12 flops: many seconds on two CPU ranks even on a fast idle
 * machine, longer than job_timeout_ms 1500; never run to its end here); a
 * "small" job is checked against the fp64 reference.
 *  (a) q/k/v (1, 2^24, 1, 1) f16 (~1.1e15 flops) is refused at once with
 *      WF_E_LIMIT naming max_job_flops; nothing was queued;
 *  (b) a long job with deadline_ms 200 fails with WF_E_DEADLINE well
 *      before it could have finished, its message naming the deadline;
 *      the next small job on the same daemon is right at once, and the
 *      daemon rebuilt nothing (epoch unchanged: no world was aborted);
 *  (c) a running long job cancelled by its own client: the cancel is OK,
 *      the job ends WF_E_CANCELLED, the next small job is right;
 *  (d) a queued job cancelled (behind a running long one): WF_E_CANCELLED
 *      at once, the running one is not disturbed (cancelled after);
 *  (e) bob (submit), as a raw CURVE peer, sends cancel for every id 1..500
 *      (alice's running job has one of them): all WF_E_BAD_ARGUMENT and
 *      alice's job runs on; libweft refuses another client's job handle;
 *      the admin's same scan cancels exactly one job, alice's, which ends
 *      WF_E_CANCELLED; a cancel of a finished job is WF_E_BAD_ARGUMENT;
 *  (f) job_timeout_ms 1500 written to the config file, SIGHUP: a long job
 *      without a deadline of its own ends WF_E_DEADLINE from it (1500 ms
 *      in its message);
 *  (g) a reconfigure (to dp=2) blocked by a long job gives up after
 *      reconfigure_timeout_ms with WF_E_BUSY; the old mesh (ring=2, same
 *      epoch) serves the next small job right;
 *  (h) a causal ring job whose holdings are cut into several query-row
 *      chunks (how ring steps run, for the stop checks) is right against
 *      the fp64 reference.
 *  (i) forward options and weftctl cancel: the admin loads flux-tiny (the
 *      diffusers fixture); behind alice's running long job, bob's forward
 *      with wf_forward_opts_t deadline_ms 100 ends WF_E_DEADLINE; the
 *      admin's `weftctl cancel ID` (alice's request id, wf_job_id) prints
 *      "cancelled ID" and exits 0, alice's job ends WF_E_CANCELLED; the
 *      same cancel again exits 1 (no such job); bob's forward without a
 *      deadline then matches diffusers' output (fluxio tolerance), and
 *      one through wf_forward_submit + wf_job_wait too.
 *  (j) a second daemon, mesh dp=4 (a small job runs on one device) and
 *      every job part held at its start (WEFT_TEST_HOLD_JOBS): ops
 *      (admin), alice and bob each have one job running under the same
 *      request id. Bob (submit) cancels his job twice, then the admin its
 *      own twice: each cancel is WF_OK (the second finds the job it
 *      already flagged), and alice's job, the one unflagged job left with
 *      that id, is untouched by the admin's second cancel; once released,
 *      ops's and bob's jobs end WF_E_CANCELLED and alice's is right
 *      against the fp64 reference.
 * Each section is bounded (the whole run ~6 s on 2 cores, ~15 s under
 * ASan + UBSan).
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

static int failures;

#define TIMEOUT_MS 60000
#define JOB_TIMEOUT_MS 1500
#define RECONF_TIMEOUT_MS 400
/* "at once" on a loaded 2-core machine under sanitizers: far below the
 * seconds a long job takes, far above a scheduling hiccup (the figures
 * printed are the measure; typical: tens of ms, a deadline + ~0.2 s) */
#define SLOW_MS 4000

static const char *weftd, *fixtures, *weftctl;
static char dir[] = "/tmp/weft-time-XXXXXX";
static char ep[64];

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
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
    spawn_opts_t o = { .log_path = log };
    return clusterd_spawn(&n->p, argv, &o) &&
           clusterd_node_wait(n, "READY=1", 60000, NULL, 0);
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
static const jcase_t long_case = {
    .name = "long", .B = 1, .Sq = 65536, .Skv = 65536, .Hq = 1, .Hkv = 1, .D = 64,
    .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .causal = 0, .want_lse = false,
};

/* A small job, at once, right against the fp64 reference. */
static void small_ok(wf_client_t *c, uint64_t seed, const char *what)
{
    jbuf_t b;
    if (!jbuf_init(&b, &small_case, seed)) {
        CHECKM(false, "%s: out of memory", what);
        return;
    }
    wf_attention_opts_t o = opts_of(&small_case);
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
    CHECKM(ms < SLOW_MS, "%s: took %.0f ms", what, ms);
    jbuf_free(&b);
}

/* Submit a long job (deadline_ms as given) into *b / *job. */
static bool long_submit(wf_client_t *c, jbuf_t *b, uint32_t deadline_ms, uint64_t seed,
                        wf_job_t **job)
{
    if (!jbuf_init(b, &long_case, seed))
        return false;
    wf_attention_opts_t o = opts_of(&long_case);
    o.deadline_ms = deadline_ms;
    wf_status_t st = wf_attention_submit(c, &b->q, &b->k, &b->v, &o, &b->out, NULL, job);
    CHECKM(st == WF_OK, "long submit: %s: %s", wf_status_name(st), wf_client_last_error(c));
    return st == WF_OK;
}

/* Wait until the daemon runs a job (in_flight 1), bounded. */
static bool wait_running(void)
{
    wf_client_t *c = watcher;
    wf_status_info_t *si = calloc(1, sizeof *si);
    bool ok = false;
    double end = now_s() + 10;
    while (si && now_s() < end) {
        if (wf_status(c, si) == WF_OK && si->in_flight >= 1) {
            ok = true;
            break;
        }
        usleep(5000);
    }
    free(si);
    CHECKM(ok, "the long job never ran");
    return ok;
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
    CHECKM(ms < SLOW_MS, "(a) refusal took %.0f ms", ms);
    printf("(a) (1, 2^24, 1, 1) f16: %s in %.0f ms: %s\n", wf_status_name(st), ms, msg);
    free(buf);
}

/* (b) and (f): a long job stopped by its deadline (own, or the daemon's) */
static void test_deadline(wf_client_t *c, uint32_t deadline_ms, const char *tag,
                          const char *want_ms)
{
    uint64_t e0 = epoch_of(c, NULL);
    jbuf_t b;
    wf_job_t *job = NULL;
    double t0 = now_s();
    if (!long_submit(c, &b, deadline_ms, 11, &job))
        return;
    wf_status_t st = wf_job_wait(c, job, TIMEOUT_MS);
    double ms = (now_s() - t0) * 1e3;
    const char *msg = wf_job_error(job);
    CHECKM(st == WF_E_DEADLINE && strstr(msg, want_ms) && strstr(msg, "deadline"),
           "%s: %s: %s", tag, wf_status_name(st), msg);
    /* the deadline, plus a chunk of a ring step (tens of ms; a sanitized
     * build is slower): far less than the job (seconds) */
    CHECKM(ms >= (deadline_ms ? deadline_ms : JOB_TIMEOUT_MS) &&
           ms < (deadline_ms ? deadline_ms : JOB_TIMEOUT_MS) + SLOW_MS,
           "%s: ended after %.0f ms", tag, ms);
    printf("%s: %s after %.0f ms: %s\n", tag, wf_status_name(st), ms, msg);
    wf_job_destroy(c, &job);
    jbuf_free(&b);
    small_ok(c, 21, tag);
    CHECKM(epoch_of(c, NULL) == e0, "%s: the world was rebuilt (epoch moved)", tag);
}

/* (c) */
static void test_cancel_running(wf_client_t *c)
{
    uint64_t e0 = epoch_of(c, NULL);
    jbuf_t b;
    wf_job_t *job = NULL;
    if (!long_submit(c, &b, 0, 12, &job))
        return;
    wait_running();
    double t0 = now_s();
    wf_status_t cs = wf_cancel(c, job);
    CHECKM(cs == WF_OK, "(c) cancel: %s: %s", wf_status_name(cs), wf_client_last_error(c));
    wf_status_t st = wf_job_wait(c, job, TIMEOUT_MS);
    double ms = (now_s() - t0) * 1e3;
    CHECKM(st == WF_E_CANCELLED, "(c) job: %s: %s", wf_status_name(st), wf_job_error(job));
    CHECKM(ms < SLOW_MS, "(c) the job ended %.0f ms after the cancel", ms);
    printf("(c) running job cancelled: %s %.0f ms after the cancel: %s\n",
           wf_status_name(st), ms, wf_job_error(job));
    wf_job_destroy(c, &job);
    jbuf_free(&b);
    small_ok(c, 22, "(c) next job");
    CHECKM(epoch_of(c, NULL) == e0, "(c) the world was rebuilt");
}

/* (d) */
static void test_cancel_queued(wf_client_t *c)
{
    jbuf_t lb, qb;
    wf_job_t *run = NULL, *queued = NULL;
    if (!long_submit(c, &lb, 0, 13, &run))
        return;
    wait_running();
    if (!jbuf_init(&qb, &small_case, 14)) {
        CHECKM(false, "(d) out of memory");
        return;
    }
    wf_attention_opts_t o = opts_of(&small_case);
    CHECKM(wf_attention_submit(c, &qb.q, &qb.k, &qb.v, &o, &qb.out, qb.lse, &queued) == WF_OK,
           "(d) submit");
    double t0 = now_s();
    wf_status_t cs = queued ? wf_cancel(c, queued) : WF_E_INTERNAL;
    wf_status_t st = queued ? wf_job_wait(c, queued, TIMEOUT_MS) : WF_E_INTERNAL;
    double ms = (now_s() - t0) * 1e3;
    CHECKM(cs == WF_OK && st == WF_E_CANCELLED, "(d) cancel %s, job %s: %s",
           wf_status_name(cs), wf_status_name(st), queued ? wf_job_error(queued) : "");
    CHECKM(ms < SLOW_MS, "(d) queued cancel took %.0f ms", ms);
    printf("(d) queued job cancelled in %.0f ms: %s\n", ms, queued ? wf_job_error(queued) : "");
    CHECKM(wf_job_poll(c, run) == WF_E_PENDING, "(d) the running job was disturbed");
    CHECKM(wf_cancel(c, run) == WF_OK, "(d) cancel the long one");
    st = wf_job_wait(c, run, TIMEOUT_MS);
    CHECKM(st == WF_E_CANCELLED, "(d) long: %s", wf_status_name(st));
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
    int linger = 0, to = 10000;
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
    if (!long_submit(alice, &b, 0, 15, &job))
        return;
    wait_running();
    /* bob (submit) asks to cancel every id alice may have used */
    int ok, bad, other;
    raw_cancel_scan(&kb, 500, &ok, &bad, &other);
    CHECKM(ok == 0 && bad == 500 && other == 0, "(e) bob: %d OK, %d refused, %d other",
           ok, bad, other);
    CHECKM(wf_job_poll(alice, job) == WF_E_PENDING, "(e) alice's job disturbed by bob");
    printf("(e) bob's 500 cancels of ids 1..500: %d refused (WF_E_BAD_ARGUMENT), "
           "alice's job still runs\n", bad);
    /* libweft refuses another client's job handle before sending */
    CHECKM(wf_cancel(ops, job) == WF_E_BAD_ARGUMENT, "(e) wf_cancel with a foreign job");
    /* the admin may cancel anyone's: exactly one of the ids is running */
    raw_cancel_scan(&ka, 500, &ok, &bad, &other);
    CHECKM(ok == 1 && bad == 499 && other == 0, "(e) admin: %d OK, %d refused, %d other",
           ok, bad, other);
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
    if (!long_submit(ops, &b, 0, 17, &job))
        return;
    wait_running();
    wf_mesh_degrees_t dp2 = { 2, 1, 1, 1 };
    double t0 = now_s();
    uint64_t e = 0;
    wf_status_t st = wf_reconfigure(ops, &dp2, &e);
    double ms = (now_s() - t0) * 1e3;
    const char *msg = wf_client_last_error(ops);
    CHECKM(st == WF_E_BUSY && strstr(msg, "reconfigure_timeout_ms"), "(g) %s: %s",
           wf_status_name(st), msg);
    CHECKM(ms >= RECONF_TIMEOUT_MS - 50 && ms < RECONF_TIMEOUT_MS + SLOW_MS,
           "(g) gave up after %.0f ms", ms);
    printf("(g) reconfigure blocked by a long job: %s after %.0f ms: %s\n",
           wf_status_name(st), ms, msg);
    CHECKM(wf_cancel(ops, job) == WF_OK, "(g) cancel the long job");
    wf_job_wait(ops, job, TIMEOUT_MS);
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
    const char *argv[16] = { weftctl, "--endpoint", ep, "--server-key", sp,
                             "--client-key", cp, "--timeout", "10000" };
    size_t k = 9;
    for (size_t i = 0; args[i] && k < 15; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    spawn_opts_t o = { .stdout_path = op };
    spawn_t p;
    if (!spawn_start(&p, argv, &o))
        return -1;
    bool done = spawn_wait(&p, 10000 + (int)WAIT_EVENT_MS);
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

/* A forward of flux-tiny on bob, checked against diffusers' output. */
static void forward_ok(wf_client_t *c, const fluxio_t *io, bool async, const char *what)
{
    wf_tensor_t out;
    if (!fluxio_output(io, WF_DTYPE_F32, &out)) {
        CHECKM(false, "%s: out of memory", what);
        return;
    }
    wf_status_t st;
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
    if (long_submit(alice, &b, 0, 31, &job) && wait_running()) {
        wf_tensor_t out;
        if (fluxio_output(&io, WF_DTYPE_F32, &out)) {
            wf_forward_opts_t fo = { .deadline_ms = 100 };
            double t0 = now_s();
            st = wf_forward_ex(bob, "tiny", &io.in, &out, &fo, NULL);
            double ms = (now_s() - t0) * 1e3;
            CHECKM(st == WF_E_DEADLINE, "(i) forward deadline_ms 100: %s: %s",
                   wf_status_name(st), wf_client_last_error(bob));
            printf("(i) queued forward, deadline_ms 100: %s after %.0f ms: %s\n",
                   wf_status_name(st), ms, wf_client_last_error(bob));
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

/* (j): wait_for's condition: at least `want` of the daemon's devices are
 * busy (running a job part, or held at its start), from status on c. */
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
    snprintf(hep, sizeof hep, "tcp://127.0.0.1:%d", clusterd_free_port());
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
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", clusterd_free_port());
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
        test_deadline(alice, 200, "(b) deadline_ms 200", "200 ms");
        test_cancel_running(alice);
        test_cancel_queued(alice);
        test_cancel_other(alice, ops);
        test_reconfigure_timeout(ops);
        test_forward_and_weftctl_cancel(alice, bob, ops);
        /* job_timeout_ms 0 until now (the config file); SIGHUP applies it */
        char line[64];
        snprintf(line, sizeof line, "job_timeout_ms = %d\n", JOB_TIMEOUT_MS);
        write_text(cfg, line);
        kill(n.p.pid, SIGHUP);
        CHECKM(clusterd_node_wait(&n, "READY=1", 30000, NULL, 0), "(f) reload");
        test_deadline(alice, 0, "(f) job_timeout_ms", "1500 ms");
        test_cancel_again(keyfile, clients);
    }
    wf_client_destroy(&bob);
    wf_client_destroy(&alice);
    wf_client_destroy(&ops);
    clusterd_kill(&n.p, SIGTERM);
    CHECKM(n.p.reaped && WIFEXITED(n.p.exit_status) && WEXITSTATUS(n.p.exit_status) == 0,
           "daemon did not exit 0 (log %s)", log);
    clusterd_node_close(&n);
    if (failures) {
        fprintf(stderr, "test_time: %d checks failed (log %s)\n", failures, log);
        return 1;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    printf("test_time: all checks passed\n");
    return 0;
}
