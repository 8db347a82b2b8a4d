/* test_fair.c — per-client shares and the bound on unread replies, on a
 * real weftd (cpu:2, mesh tp = 2: every job runs as one part on each
 * device) over raw ZeroMQ with the real codec.
 *
 * Every state a case needs is made, then waited for as an event: where
 * jobs must stay queued the daemon runs with the job hold (the test hook
 * WEFT_TEST_HOLD_JOBS, rawd.h's hold_t: every job part waits at its start
 * for a byte from the test), and status, polled with wait.h's wait_for,
 * says when the queue, the jobs in flight and the busy devices are as
 * wanted. Nothing depends on how fast the jobs run.
 *
 * 1. Two clients competing: --queue-capacity 16 --client-queue-jobs 4.
 *    Client A's first job is held on the devices (status: 1 in flight,
 *    2 devices busy, queue 0); A then sends 39 more and a status: exactly
 *    4 are queued (its share), 35 get WF_E_QUEUE_FULL naming "this
 *    connection" and client_queue_jobs, and A's status, answered after
 *    the 39 were read, says queue 4. Client B then sends 4 jobs and a
 *    status: its status comes first (none of B's jobs was refused) and
 *    says queue 8, B's 4 beside A's 4. The hold opens: A's 5 jobs and
 *    B's 4 are answered OK and correct, every request exactly once.
 * 2. A client that does not read: --client-reply-bytes 8M, jobs with
 *    1 MiB outputs. A DEALER with RCVHWM 1 (its I/O thread stops taking
 *    from the socket) sends 96 jobs and reads nothing. Once the daemon
 *    has handled each of them (status: served + refused = 96, nothing
 *    queued or running), its peak RSS since just before they were sent
 *    (VmHWM, reset then) is within what PROTOCOL.md section 7.1 lets it
 *    hold for them (unread_bound) where an unbounded queue would hold
 *    96 MiB of outputs, and some were refused. A second client is served
 *    meanwhile. When the first reads at last it gets one reply per
 *    request: as many OK and WF_E_QUEUE_FULL ("read your replies") as
 *    status counted, the OK ones correct. A job whose outputs alone pass
 *    client_reply_bytes gets WF_E_LIMIT; the same client is then
 *    admitted again. At SIGTERM with replies waiting in the daemon (more
 *    admitted than ZeroMQ takes) it exits 0, no sooner than
 *    drain_timeout_ms.
 * 3. CURVE (tcp:// with client_keys, --client-queue-jobs 2): alice's
 *    first connection has a job held and 2 queued, her share (3 more
 *    refused; its status says queue 2); her second connection's 2 jobs
 *    get WF_E_QUEUE_FULL naming "key 'alice'" while the queue still
 *    holds those 2 (the status it sends after them says so); bob's 2, on
 *    a connection of his own, are queued (queue 4). The hold opens: every
 *    admitted job is answered OK.
 *
 * Usage: test_fair PATH_TO_WEFTD.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "keys.h"
#include "proto.h"
#include "support/check.h"
#include "support/ports.h"
#include "support/rawd.h"
#include "support/wait.h"

#define MIB (UINT64_C(1) << 20)
/* The daemon's devices (--devices cpu:2): job parts the hold keeps. */
#define DEVICES 2u

/* A second client on d's daemon: a copy of d with its own DEALER (only
 * ->sock is used by attn_send / recv_reply / send_simple). */
static bool client_open(const daemon_t *d, daemon_t *c, int rcvhwm)
{
    *c = *d;
    c->sock = zmq_socket(d->zctx, ZMQ_DEALER);
    if (!c->sock)
        return false;
    int zero = 0;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (rcvhwm > 0) {
        zmq_setsockopt(c->sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
        int buf = 64 * 1024;
        zmq_setsockopt(c->sock, ZMQ_RCVBUF, &buf, sizeof buf);
    }
    return zmq_connect(c->sock, d->endpoint) == 0;
}

static void client_close(daemon_t *c)
{
    if (c->sock)
        zmq_close(c->sock);
    c->sock = NULL;
}

/* ------------------------------------------------------------------ */
/* status, polled */

/* The daemon's status, asked on w: a connection with no other request
 * outstanding, so that the next reply is this status. */
static bool status_of(daemon_t *w, wf_status_info_t *ret)
{
    static uint64_t next_id = 900000;
    reply_t *r = calloc(1, sizeof *r);
    bool ok = r && get_status(w, r, ++next_id);
    if (ok)
        *ret = r->rep.result.status;
    free(r);
    return ok;
}

static uint32_t busy_devices(const wf_status_info_t *si)
{
    uint32_t n = 0;
    for (uint32_t d = 0; d < si->device_count && d < WF_STATUS_MAX_DEVICES; d++)
        n += si->devices[d].busy;
    return n;
}

/* wait_for's condition: the queue holds `depth` jobs, `in_flight` run
 * and `busy` devices are busy. */
typedef struct queue_want {
    daemon_t *w;               /* asks (status_of) */
    uint32_t depth, in_flight, busy;
    wf_status_info_t last;     /* the last status seen */
} queue_want_t;

static bool queue_is(void *arg)
{
    queue_want_t *q = arg;
    return status_of(q->w, &q->last) && q->last.queue_depth == q->depth &&
           q->last.in_flight == q->in_flight && busy_devices(&q->last) == q->busy;
}

/* Wait until the queue holds depth jobs, in_flight run and busy devices
 * are busy; false (and a line saying what status showed last) if that
 * does not happen within WAIT_EVENT_MS. */
static bool wait_queue(daemon_t *w, uint32_t depth, uint32_t in_flight, uint32_t busy)
{
    queue_want_t *q = calloc(1, sizeof *q);
    if (!q)
        return false;
    q->w = w;
    q->depth = depth;
    q->in_flight = in_flight;
    q->busy = busy;
    bool ok = wait_for(queue_is, q, WAIT_EVENT_MS);
    if (!ok)
        fprintf(stderr, "status never showed queue %u, %u in flight, %u busy: "
                "last queue %u, %u in flight, %u busy\n", depth, in_flight, busy,
                q->last.queue_depth, q->last.in_flight, busy_devices(&q->last));
    free(q);
    return ok;
}

/* wait_for's condition: every one of n requests sent after the status
 * `before` was handled: served (computed) or refused, none failed,
 * nothing queued or running. */
typedef struct handled_want {
    daemon_t *w;               /* asks (status_of) */
    const wf_status_info_t *before;
    uint64_t n;
    wf_status_info_t last;
} handled_want_t;

static bool all_handled(void *arg)
{
    handled_want_t *h = arg;
    if (!status_of(h->w, &h->last))
        return false;
    uint64_t done = (h->last.jobs_served - h->before->jobs_served) +
                    (h->last.requests_rejected - h->before->requests_rejected) +
                    (h->last.jobs_failed - h->before->jobs_failed);
    return done == h->n && h->last.queue_depth == 0 && h->last.in_flight == 0;
}

/* Wait for all_handled; the last status goes to *ret_after. */
static bool wait_handled(daemon_t *w, const wf_status_info_t *before, uint64_t n,
                         wf_status_info_t *ret_after)
{
    handled_want_t *h = calloc(1, sizeof *h);
    if (!h)
        return false;
    h->w = w;
    h->before = before;
    h->n = n;
    bool ok = wait_for(all_handled, h, WAIT_EVENT_MS);
    if (!ok)
        fprintf(stderr, "the daemon never handled the %" PRIu64 " requests: "
                "%" PRIu64 " served, %" PRIu64 " refused, %" PRIu64 " failed "
                "since, queue %u, %u in flight\n", n,
                h->last.jobs_served - before->jobs_served,
                h->last.requests_rejected - before->requests_rejected,
                h->last.jobs_failed - before->jobs_failed, h->last.queue_depth,
                h->last.in_flight);
    *ret_after = h->last;
    free(h);
    return ok;
}

/* Send a status on c and check that it is the next reply there: every
 * reply of the requests before it came already, none twice, nothing
 * else is on its way (replies on a connection keep its requests'
 * order once the jobs are done). */
static bool nothing_more(daemon_t *c, uint64_t id)
{
    reply_t *r = calloc(1, sizeof *r);
    bool ok = r && send_simple(c, WF_OP_STATUS, id) &&
              recv_reply(c, (int)wait_bound_ms(WAIT_EVENT_MS), r);
    if (ok && (r->rep.op != WF_OP_STATUS || r->rep.id != id)) {
        fprintf(stderr, "a reply (id %" PRIu64 ", op %u) came before the status\n",
                r->rep.id, r->rep.op);
        ok = false;
    }
    if (r)
        reply_clear(r);
    free(r);
    return ok;
}

/* ------------------------------------------------------------------ */
/* replies, counted */

typedef struct tally {
    unsigned ok, full, other, dup, stray;
    unsigned got[128];
} tally_t;

/* Count reply r of a request with id in [base, base + n). */
static void take_reply(tally_t *t, const reply_t *r, uint64_t base, unsigned n)
{
    uint64_t id = r->rep.id;
    if (id < base || id >= base + n) {
        t->stray++;
        return;
    }
    if (t->got[id - base]++)
        t->dup++;
    if (r->rep.status == WF_OK)
        t->ok++;
    else if (r->rep.status == WF_E_QUEUE_FULL)
        t->full++;
    else
        t->other++;
}

static unsigned tally_total(const tally_t *t)
{
    return t->ok + t->full + t->other + t->dup + t->stray;
}

/* ------------------------------------------------------------------ */
/* 1. two clients competing for the queue */

static void competing(const char *weftd)
{
    enum { NA = 40, NB = 4, SHARE = 4 };
    hold_t hold;
    CHECK(hold_make(&hold), "hold FIFO");
    const char *args[] = { "--devices", "cpu:2", "--queue-capacity", "16",
                           "--client-queue-jobs", "4", "--log-level", "warning",
                           NULL };
    const char *env[] = { hold.env, NULL };
    daemon_t d;
    if (!daemon_start_env(&d, weftd, args, env)) {
        CHECK(0, "daemon start");
        daemon_close(&d);
        hold_remove(&hold);
        return;
    }
    CHECK(notify_wait(&d, "READY=1", (int)wait_bound_ms(WAIT_EVENT_MS)), "READY");
    daemon_t b, w;
    CHECK(client_open(&d, &b, 0), "client B");
    CHECK(client_open(&d, &w, 0), "status client");
    attn_case_t ca = { "f32 256 (client A)", WF_DTYPE_F32, 1, 256, 256, 2, 2, 32,
                       false, false, false, 0, 0, 0, 2, false };
    attn_case_t cb = { "f32 64 (client B)", WF_DTYPE_F32, 1, 64, 64, 2, 2, 16,
                       false, true, false, 0, 0, 0, 2, false };
    attn_job_t ja, jb;
    attn_job_make(&ca, &ja, 1);
    attn_job_make(&cb, &jb, 2);
    reply_t *r = calloc(1, sizeof *r);
    tally_t ta, tb;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);

    /* A's first job runs, held: the devices are taken */
    CHECK(attn_send(&d, &ca, &ja, 1000), "send");
    CHECK(wait_queue(&w, 0, 1, DEVICES), "A's first job held on the devices");
    /* the rest of A's jobs, then its status: read after them */
    for (unsigned i = 1; i < NA; i++)
        CHECK(attn_send(&d, &ca, &ja, 1000 + i), "send");
    CHECK(send_simple(&d, WF_OP_STATUS, 2000), "send status");
    char full_msg[WF_PROTO_ERROR_MAX] = "";
    bool status_seen = false;
    while (!status_seen && recv_reply(&d, (int)wait_bound_ms(WAIT_EVENT_MS), r)) {
        if (r->rep.op == WF_OP_STATUS && r->rep.id == 2000) {
            status_seen = true;
            const wf_status_info_t *si = &r->rep.result.status;
            printf("  A sent %d jobs, the first held on the devices: queue %u of "
                   "%u, %u in flight when its status was answered\n", NA,
                   si->queue_depth, si->queue_capacity, si->in_flight);
            CHECK(si->queue_depth == SHARE && si->in_flight == 1,
                  "A's status: queue %u (want its share, %d), %u in flight (want 1)",
                  si->queue_depth, SHARE, si->in_flight);
        } else {
            take_reply(&ta, r, 1000, NA);
            if (r->rep.status == WF_E_QUEUE_FULL && !full_msg[0])
                snprintf(full_msg, sizeof full_msg, "%s", r->rep.error);
        }
        reply_clear(r);
    }
    CHECK(status_seen, "A's status answered");
    /* before its status: the refusals alone, nothing has run */
    CHECK(ta.full == NA - 1 - SHARE && ta.ok == 0 && ta.other == 0,
          "A before its status: %u refused (want %d), %u OK, %u other", ta.full,
          NA - 1 - SHARE, ta.ok, ta.other);

    /* B, while A's share is full: queued, none refused */
    for (unsigned i = 0; i < NB; i++)
        CHECK(attn_send(&b, &cb, &jb, 3000 + i), "send");
    CHECK(send_simple(&b, WF_OP_STATUS, 3100), "send status");
    CHECK(recv_reply(&b, (int)wait_bound_ms(WAIT_EVENT_MS), r), "B's status");
    CHECK(r->rep.op == WF_OP_STATUS && r->rep.id == 3100 &&
          r->rep.result.status.queue_depth == SHARE + NB,
          "B's first reply: op %u id %" PRIu64 " (want its status) with queue %u "
          "(want %d: B's jobs beside A's share)", r->rep.op, r->rep.id,
          r->rep.result.status.queue_depth, SHARE + NB);
    reply_clear(r);

    /* let everything run */
    CHECK(hold_open_gate(&hold, DEVICES), "open the hold");
    for (unsigned n = 0; n < NB && recv_reply(&b, (int)wait_bound_ms(WAIT_EVENT_MS), r);
         n++) {
        take_reply(&tb, r, 3000, NB);
        if (r->rep.status == WF_OK)
            attn_check(&cb, &jb, r);
        else
            fprintf(stderr, "B's job %" PRIu64 ": %s: %s\n", r->rep.id,
                    wf_status_name(r->rep.status), r->rep.error);
        reply_clear(r);
    }
    while (tally_total(&ta) < NA && recv_reply(&d, (int)wait_bound_ms(WAIT_EVENT_MS), r)) {
        take_reply(&ta, r, 1000, NA);
        if (r->rep.status == WF_OK)
            attn_check(&ca, &ja, r);
        reply_clear(r);
    }
    printf("  client A: %u OK, %u WF_E_QUEUE_FULL (\"%s\"), %u other\n", ta.ok,
           ta.full, full_msg, ta.other);
    printf("  client B: %u of %d OK\n", tb.ok, NB);
    CHECK(ta.ok == 1 + SHARE && ta.full == NA - 1 - SHARE && ta.other == 0,
          "A: %u OK (want %d), %u refused (want %d), %u other", ta.ok, 1 + SHARE,
          ta.full, NA - 1 - SHARE, ta.other);
    CHECK(strstr(full_msg, "share of this connection is full") != NULL,
          "A's refusal names the connection: %s", full_msg);
    CHECK(strstr(full_msg, "client_queue_jobs 4") != NULL,
          "A's refusal names the setting: %s", full_msg);
    CHECK(tb.ok == NB, "B: %u of %d OK", tb.ok, NB);
    CHECK(ta.dup == 0 && ta.stray == 0 && tb.dup == 0 && tb.stray == 0,
          "duplicated or stray replies: A %u / %u, B %u / %u", ta.dup, ta.stray,
          tb.dup, tb.stray);
    for (unsigned i = 0; i < NA; i++)
        CHECK(ta.got[i] == 1, "A's job %u: %u replies", 1000 + i, ta.got[i]);
    for (unsigned i = 0; i < NB; i++)
        CHECK(tb.got[i] == 1, "B's job %u: %u replies", 3000 + i, tb.got[i]);
    CHECK(nothing_more(&d, 2001), "nothing more for A");
    CHECK(nothing_more(&b, 3101), "nothing more for B");
    free(r);
    attn_job_free(&ja);
    attn_job_free(&jb);
    client_close(&b);
    client_close(&w);
    client_close(&d);
    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, (int)wait_bound_ms(WAIT_EVENT_MS)), "exit");
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0,
          "exit status 0x%x", d.exit_status);
    daemon_close(&d);
    hold_remove(&hold);
}

/* ------------------------------------------------------------------ */
/* 2. a client that does not read its replies */

/* Set pid's VmHWM to its present VmRSS (proc(5), clear_refs "5"). */
static bool hwm_reset(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        perror(path);
        return false;
    }
    bool ok = write(fd, "5", 1) == 1;
    if (!ok)
        perror(path);
    close(fd);
    return ok;
}

/* Replies to one connection that ZeroMQ and the gate hold once taken
 * from the daemon's own queue (server.c, REPLY_SNDHWM): 4 queued at the
 * ROUTER, one in the gate's DEALER, one being written. */
#define REPLIES_TAKEN 6u
/* Complete messages the gate holds per connection on their way in
 * (gate.h). */
#define GATE_MESSAGES 3u
/* What the allocator keeps resident of memory the daemon freed during
 * the run (inputs and outputs of finished jobs, in the arenas of the
 * gate, main and worker threads) and the workers' scratch for a job. */
#define ALLOCATOR_MARGIN (16 * MIB)

/* What PROTOCOL.md section 7.1 lets the daemon hold for a client that
 * never reads, beyond what it held before: its jobs' outputs until
 * ZeroMQ takes the reply (client_reply_bytes) and the replies ZeroMQ
 * took; the inputs of the jobs admitted and not yet done (their outputs
 * are among those counted: reply_bytes / out_bytes jobs) and of the
 * messages the gate holds; ALLOCATOR_MARGIN. The replies without
 * tensors (refusals, a few hundred bytes each) are within the margin. */
static uint64_t unread_bound(uint64_t reply_bytes, uint64_t out_bytes, uint64_t in_bytes)
{
    return reply_bytes + REPLIES_TAKEN * out_bytes +
           (reply_bytes / out_bytes + GATE_MESSAGES) * in_bytes + ALLOCATOR_MARGIN;
}

static void unread(const char *weftd)
{
    enum { N = 96, N_TERM = 48 };
    const uint64_t reply_bytes = 8 * MIB;
    const uint32_t drain_ms = 1000;
    const char *args[] = { "--devices", "cpu:2", "--queue-capacity", "64",
                           "--client-queue-jobs", "64", "--client-reply-bytes", "8M",
                           "--drain-timeout-ms", "1000", "--log-level", "warning",
                           NULL };
    /* Under AddressSanitizer freed memory sits in its quarantine (256 MiB)
     * and stays resident: the daemon of this part runs without one, so
     * that its RSS follows what it holds (no effect in other builds). */
    static char asan[512];
    const char *was = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%squarantine_size_mb=0:"
             "thread_local_quarantine_size_kb=0", was ? was : "",
             was && *was ? ":" : "");
    const char *env[] = { asan, NULL };
    daemon_t d;
    if (!daemon_start_env(&d, weftd, args, env)) {
        CHECK(0, "daemon start");
        daemon_close(&d);
        return;
    }
    CHECK(notify_wait(&d, "READY=1", (int)wait_bound_ms(WAIT_EVENT_MS)), "READY");
    /* q of 1 MiB (f32 1 x 4096 x 4 x 16) and so the output; short k / v */
    attn_case_t big = { "1 MiB output", WF_DTYPE_F32, 1, 4096, 64, 4, 4, 16,
                        false, false, false, 0, 0, 0, 2, false };
    attn_job_t j;
    attn_job_make(&big, &j, 3);
    const uint64_t out_bytes = j.q.nbytes, in_bytes = j.q.nbytes + j.k.nbytes + j.v.nbytes;
    reply_t *r = calloc(1, sizeof *r);
    /* warm-up on the well-behaved client (d.sock): allocator, workers */
    for (unsigned i = 0; i < 4; i++)
        CHECK(attn_send(&d, &big, &j, 10 + i), "send");
    for (unsigned i = 0; i < 4 && recv_reply(&d, (int)wait_bound_ms(WAIT_EVENT_MS), r);
         i++) {
        attn_check(&big, &j, r);
        reply_clear(r);
    }
    /* d.sock has nothing outstanding from here on: it asks for status */
    wf_status_info_t before, after;
    CHECK(status_of(&d, &before), "status");
    CHECK(hwm_reset(d.pid), "reset the daemon's VmHWM");
    uint64_t base = hwm_of(d.pid);

    daemon_t slow;
    CHECK(client_open(&d, &slow, 1), "client that does not read");
    for (unsigned i = 0; i < N; i++)
        CHECK(attn_send(&slow, &big, &j, 5000 + i), "send");
    CHECK(wait_handled(&d, &before, N, &after), "the daemon handled the %d jobs", N);
    uint64_t peak = hwm_of(d.pid);
    uint64_t served = after.jobs_served - before.jobs_served;
    uint64_t refused = after.requests_rejected - before.requests_rejected;
    uint64_t bound = base + unread_bound(reply_bytes, out_bytes, in_bytes);
    printf("  %d jobs of 1 MiB output sent, none read: %" PRIu64 " computed, %" PRIu64
           " refused; daemon RSS %.1f MiB before, peak %.1f MiB, bound %.1f MiB "
           "(unbounded: +%d MiB)\n", N, served, refused, (double)base / MIB,
           (double)peak / MIB, (double)bound / MIB, N);
    CHECK(base > 0 && peak <= bound, "daemon peak RSS %.1f MiB over the bound %.1f MiB",
          (double)peak / MIB, (double)bound / MIB);
    CHECK(refused >= 1 && served >= reply_bytes / out_bytes && after.jobs_failed ==
          before.jobs_failed, "%" PRIu64 " computed (want >= %" PRIu64 "), %" PRIu64
          " refused (want >= 1), %" PRIu64 " failed", served, reply_bytes / out_bytes,
          refused, after.jobs_failed - before.jobs_failed);

    /* the other client is served meanwhile */
    CHECK(attn_send(&d, &big, &j, 20), "send");
    CHECK(recv_reply(&d, (int)wait_bound_ms(WAIT_EVENT_MS), r), "reply");
    CHECK(r->rep.id == 20, "reply to %" PRIu64 " (want 20)", r->rep.id);
    attn_check(&big, &j, r);
    reply_clear(r);
    printf("  a second client's job is answered while the first reads nothing\n");

    /* now read everything */
    tally_t t;
    memset(&t, 0, sizeof t);
    char full_msg[WF_PROTO_ERROR_MAX] = "";
    while (tally_total(&t) < N && recv_reply(&slow, (int)wait_bound_ms(WAIT_EVENT_MS), r)) {
        take_reply(&t, r, 5000, N);
        if (r->rep.status == WF_E_QUEUE_FULL && !full_msg[0])
            snprintf(full_msg, sizeof full_msg, "%s", r->rep.error);
        if (r->rep.status == WF_OK)
            attn_check(&big, &j, r);
        reply_clear(r);
    }
    printf("  read at last: %u OK, %u WF_E_QUEUE_FULL (\"%s\"), %u other, %u "
           "duplicated\n", t.ok, t.full, full_msg, t.other, t.dup);
    CHECK(t.ok == served && t.full == refused && t.other == 0,
          "%u OK (status: %" PRIu64 " computed), %u refused (status: %" PRIu64 "), "
          "%u other", t.ok, served, t.full, refused, t.other);
    CHECK(t.dup == 0 && t.stray == 0, "%u duplicated, %u stray", t.dup, t.stray);
    for (unsigned i = 0; i < N; i++)
        CHECK(t.got[i] == 1, "job %u: %u replies", 5000 + i, t.got[i]);
    CHECK(strstr(full_msg, "read your replies") != NULL, "refusal: %s", full_msg);
    CHECK(strstr(full_msg, "client_reply_bytes 8388608") != NULL, "refusal: %s", full_msg);
    CHECK(nothing_more(&slow, 32), "nothing more for the client that read at last");

    /* a job whose outputs alone pass client_reply_bytes: never admitted */
    attn_case_t huge = { "10 MiB output", WF_DTYPE_F32, 1, 40000, 8, 4, 4, 16,
                         false, false, false, 0, 0, 0, 2, false };
    attn_job_t jh;
    attn_job_make(&huge, &jh, 6);
    CHECK(attn_send(&slow, &huge, &jh, 31), "send");
    CHECK(recv_reply(&slow, (int)wait_bound_ms(WAIT_EVENT_MS), r) && r->rep.id == 31 &&
          r->rep.status == WF_E_LIMIT && strstr(r->rep.error, "client_reply_bytes"),
          "a job with 10 MiB of outputs: %s (%s)", wf_status_name(r->rep.status),
          r->rep.error);
    printf("  a job with 10 MiB of outputs: %s (\"%s\")\n",
           wf_status_name(r->rep.status), r->rep.error);
    reply_clear(r);
    attn_job_free(&jh);
    /* the share is free again: the same client is admitted */
    CHECK(attn_send(&slow, &big, &j, 30), "send");
    CHECK(recv_reply(&slow, (int)wait_bound_ms(WAIT_EVENT_MS), r) && r->rep.id == 30,
          "reply to %" PRIu64 " (want 30)", r->rep.id);
    attn_check(&big, &j, r);
    reply_clear(r);

    /* SIGTERM while replies wait in the daemon for a client that does not
     * read. 256 KiB outputs: client_reply_bytes admits 32 of them, far
     * more than ZeroMQ and the gate take (REPLIES_TAKEN, plus one or two
     * in the client's socket), so once every job is handled, replies wait
     * in the daemon whatever the order of reading and computing was. The
     * daemon tries to send them until drain_timeout_ms, then drops them
     * and exits 0 (under the sanitizers: without a leak). */
    attn_case_t quarter = { "256 KiB output", WF_DTYPE_F32, 1, 1024, 64, 4, 4, 16,
                            false, false, false, 0, 0, 0, 2, false };
    attn_job_t jq;
    attn_job_make(&quarter, &jq, 7);
    CHECK(status_of(&d, &before), "status");
    for (unsigned i = 0; i < N_TERM; i++)
        CHECK(attn_send(&slow, &quarter, &jq, 40 + i), "send");
    CHECK(wait_handled(&d, &before, N_TERM, &after), "the daemon handled the %d jobs",
          N_TERM);
    served = after.jobs_served - before.jobs_served;
    CHECK(served > REPLIES_TAKEN + 2, "%" PRIu64 " jobs computed: not more than "
          "ZeroMQ may take", served);
    client_close(&d);          /* the client that reads: nothing outstanding */
    int64_t t_term = now_ms();
    kill(d.pid, SIGTERM);
    /* bound: the drain (drain_timeout_ms), ZeroMQ's linger (the same) and
     * the exit, an event */
    CHECK(daemon_wait_exit(&d, (int)wait_bound_ms(2 * drain_ms + WAIT_EVENT_MS)),
          "exit after SIGTERM");
    int64_t took = now_ms() - t_term;
    printf("  SIGTERM with %" PRIu64 " replies unread: exit after %lld ms "
           "(drain_timeout_ms %u)\n", served, (long long)took, drain_ms);
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0,
          "exit status 0x%x", d.exit_status);
    CHECK(took >= (int64_t)drain_ms, "exit %lld ms after SIGTERM: the replies did not "
          "wait for drain_timeout_ms (%u)", (long long)took, drain_ms);
    free(r);
    attn_job_free(&j);
    attn_job_free(&jq);
    client_close(&slow);
    daemon_close(&d);
}

/* ------------------------------------------------------------------ */
/* 3. CURVE: the share is the key's, across its connections */

/* A DEALER on the daemon at ep, CURVE client of `server` with key pair kp. */
static bool curve_client(const daemon_t *d, daemon_t *c, const char *ep,
                         const wf_keypair_t *server, const wf_keypair_t *kp)
{
    *c = *d;
    c->sock = zmq_socket(d->zctx, ZMQ_DEALER);
    if (!c->sock)
        return false;
    int zero = 0;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
    return zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, server->public_key, 40) == 0 &&
           zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, kp->public_key, 40) == 0 &&
           zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, kp->secret_key, 40) == 0 &&
           zmq_connect(c->sock, ep) == 0;
}

/* The next reply on c is the status `id` with queue `depth`. */
static bool status_reply_is(daemon_t *c, uint64_t id, uint32_t depth, reply_t *r)
{
    bool ok = recv_reply(c, (int)wait_bound_ms(WAIT_EVENT_MS), r) &&
              r->rep.op == WF_OP_STATUS && r->rep.id == id &&
              r->rep.result.status.queue_depth == depth;
    if (!ok)
        fprintf(stderr, "want status %" PRIu64 " with queue %u: got op %u id %" PRIu64
                " %s, queue %u\n", id, depth, r->rep.op, r->rep.id,
                wf_status_name(r->rep.status), r->rep.result.status.queue_depth);
    reply_clear(r);
    return ok;
}

static void per_key(const char *weftd)
{
    enum { N1 = 6, N2 = 2, NB = 2, SHARE = 2 };
    char dir[] = "/tmp/weft-fair-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    char keyfile[64], clients[64], ep[64], err[256], text[512];
    snprintf(keyfile, sizeof keyfile, "%s/daemon", dir);
    snprintf(clients, sizeof clients, "%s/clients", dir);
    wf_keypair_t kd, kalice, kbob;
    if (wf_keypair_generate(&kd, err, sizeof err) != WF_OK ||
        wf_keypair_write(keyfile, &kd, err, sizeof err) != WF_OK ||
        wf_keypair_generate(&kalice, err, sizeof err) != WF_OK ||
        wf_keypair_generate(&kbob, err, sizeof err) != WF_OK) {
        CHECK(0, "keys: %s", err);
        return;
    }
    snprintf(text, sizeof text, "submit %s alice\nsubmit %s bob\n",
             kalice.public_key, kbob.public_key);
    write_file(clients, text);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", test_port());
    hold_t hold;
    CHECK(hold_make(&hold), "hold FIFO");
    const char *args[] = { "--devices", "cpu:2", "--queue-capacity", "16",
                           "--client-queue-jobs", "2", "--listen", ep,
                           "--key-file", keyfile, "--client-keys", clients,
                           "--log-level", "warning", NULL };
    const char *env[] = { hold.env, NULL };
    daemon_t d;
    if (!daemon_start_env(&d, weftd, args, env)) {
        CHECK(0, "daemon start");
        daemon_close(&d);
        hold_remove(&hold);
        return;
    }
    CHECK(notify_wait(&d, "READY=1", (int)wait_bound_ms(WAIT_EVENT_MS)), "READY");
    daemon_t a1, a2, b;
    CHECK(curve_client(&d, &a1, ep, &kd, &kalice), "alice 1");
    CHECK(curve_client(&d, &a2, ep, &kd, &kalice), "alice 2");
    CHECK(curve_client(&d, &b, ep, &kd, &kbob), "bob");
    attn_case_t small = { "f32 64", WF_DTYPE_F32, 1, 64, 64, 2, 2, 16,
                          false, false, false, 0, 0, 0, 2, false };
    attn_job_t js;
    attn_job_make(&small, &js, 4);
    reply_t *r = calloc(1, sizeof *r);
    tally_t t1, t2, tb;
    memset(&t1, 0, sizeof t1);
    memset(&t2, 0, sizeof t2);
    memset(&tb, 0, sizeof tb);

    /* alice's first job runs, held (bob's connection asks) */
    CHECK(attn_send(&a1, &small, &js, 100), "send");
    CHECK(wait_queue(&b, 0, 1, DEVICES), "alice's first job held on the devices");
    /* the rest of her first connection's: her share queued, the others
     * refused; its status after them says queue SHARE */
    for (unsigned i = 1; i < N1; i++)
        CHECK(attn_send(&a1, &small, &js, 100 + i), "send");
    CHECK(send_simple(&a1, WF_OP_STATUS, 99), "send status");
    for (unsigned i = 0; i < N1 - 1 - SHARE &&
                         recv_reply(&a1, (int)wait_bound_ms(WAIT_EVENT_MS), r); i++) {
        take_reply(&t1, r, 100, N1);
        reply_clear(r);
    }
    CHECK(t1.full == N1 - 1 - SHARE, "alice's 1st connection: %u refused (want %d)",
          t1.full, N1 - 1 - SHARE);
    CHECK(status_reply_is(&a1, 99, SHARE, r), "alice's share queued");
    /* her other connection, while her share is full: refused; its status
     * after them shows her jobs still queued */
    char full_msg[WF_PROTO_ERROR_MAX] = "";
    for (unsigned i = 0; i < N2; i++)
        CHECK(attn_send(&a2, &small, &js, 200 + i), "send");
    CHECK(send_simple(&a2, WF_OP_STATUS, 199), "send status");
    for (unsigned n = 0; n < N2 && recv_reply(&a2, (int)wait_bound_ms(WAIT_EVENT_MS), r);
         n++) {
        take_reply(&t2, r, 200, N2);
        if (r->rep.status == WF_E_QUEUE_FULL)
            snprintf(full_msg, sizeof full_msg, "%s", r->rep.error);
        reply_clear(r);
    }
    CHECK(status_reply_is(&a2, 199, SHARE, r), "alice's share still full");
    /* bob's share is his own: queued beside hers */
    for (unsigned i = 0; i < NB; i++)
        CHECK(attn_send(&b, &small, &js, 300 + i), "send");
    CHECK(send_simple(&b, WF_OP_STATUS, 299), "send status");
    CHECK(status_reply_is(&b, 299, SHARE + NB, r), "bob's jobs queued");

    /* let everything run */
    CHECK(hold_open_gate(&hold, DEVICES), "open the hold");
    for (unsigned n = 0; n < NB && recv_reply(&b, (int)wait_bound_ms(WAIT_EVENT_MS), r);
         n++) {
        take_reply(&tb, r, 300, NB);
        if (r->rep.status == WF_OK)
            attn_check(&small, &js, r);
        reply_clear(r);
    }
    while (tally_total(&t1) < N1 && recv_reply(&a1, (int)wait_bound_ms(WAIT_EVENT_MS), r)) {
        take_reply(&t1, r, 100, N1);
        if (r->rep.status == WF_OK)
            attn_check(&small, &js, r);
        reply_clear(r);
    }
    printf("  alice (1st connection): %u OK, %u WF_E_QUEUE_FULL; alice (2nd "
           "connection): %u OK, %u WF_E_QUEUE_FULL (\"%s\"); bob: %u of %d OK\n",
           t1.ok, t1.full, t2.ok, t2.full, full_msg, tb.ok, NB);
    CHECK(t1.ok == 1 + SHARE && t1.full == N1 - 1 - SHARE && t1.other == 0 &&
          t1.dup == 0 && t1.stray == 0, "alice's 1st connection: %u OK, %u refused, "
          "%u other, %u duplicated, %u stray", t1.ok, t1.full, t1.other, t1.dup,
          t1.stray);
    CHECK(t2.full == N2 && t2.ok == 0 && t2.dup == 0 && t2.stray == 0,
          "alice's 2nd connection: %u refused (want %d), %u OK", t2.full, N2, t2.ok);
    CHECK(strstr(full_msg, "share of key 'alice' is full") != NULL, "refusal: %s",
          full_msg);
    CHECK(tb.ok == NB && tb.dup == 0 && tb.stray == 0, "bob: %u of %d OK", tb.ok, NB);
    CHECK(nothing_more(&a1, 98), "nothing more for alice's 1st connection");
    CHECK(nothing_more(&a2, 198), "nothing more for alice's 2nd connection");
    CHECK(nothing_more(&b, 298), "nothing more for bob");
    free(r);
    attn_job_free(&js);
    client_close(&a1);
    client_close(&a2);
    client_close(&b);
    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, (int)wait_bound_ms(WAIT_EVENT_MS)), "exit");
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0,
          "exit status 0x%x", d.exit_status);
    daemon_close(&d);
    hold_remove(&hold);
    unlink(keyfile);
    snprintf(text, sizeof text, "%s.pub", keyfile);
    unlink(text);
    unlink(clients);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("two clients competing for the queue\n");
    competing(argv[1]);
    printf("a client that does not read its replies\n");
    unread(argv[1]);
    printf("CURVE: one share per key, across its connections\n");
    per_key(argv[1]);
    /* rawd's reference checks (attn_check) count in `failed` */
    int bad = failed;
    if (bad) {
        fprintf(stderr, "test_fair: %d check(s) failed\n", bad);
        return 1;
    }
    printf("test_fair: OK (%d checks)\n", passed);
    return 0;
}
