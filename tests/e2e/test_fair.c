/* test_fair.c — per-client shares and the bound on unread replies, on a
 * real weftd (cpu:2) over raw ZeroMQ with the real codec.
 *
 * 1. Two clients competing: --queue-capacity 16 --client-queue-jobs 4.
 *    Client A sends 40 slow jobs at once, then a status (answered after
 *    the 40 were read: same connection, in order); client B then sends 4
 *    jobs. A's jobs past its share get WF_E_QUEUE_FULL naming "this
 *    connection"; the queue never holds more than A's share of A's jobs
 *    (status), and every one of B's jobs is admitted and correct. Each
 *    request gets exactly one reply. (Before the shares A filled all 16
 *    slots and B was refused.)
 * 2. A client that does not read: --client-reply-bytes 8M, jobs with
 *    1 MiB outputs. A DEALER with RCVHWM 1 (its I/O thread stops taking
 *    from the socket) sends 96 jobs in 12 waves of 8 and reads nothing.
 *    The daemon's RSS (VmRSS) stays below its RSS before + 8 MiB
 *    (client_reply_bytes) + 5 MiB (SNDHWM 4 + the message its engine
 *    writes) + 8 MiB (one wave of inputs) + 16 MiB slack, where an
 *    unbounded queue would hold 96 MiB; later jobs are refused with
 *    WF_E_QUEUE_FULL ("read your replies"); a second client is served
 *    meanwhile; when the first client reads at last it gets one reply per
 *    request, the admitted ones correct against the fp64 reference; a
 *    job whose outputs alone pass client_reply_bytes gets WF_E_LIMIT; at
 *    SIGTERM with replies unread the daemon exits 0 after drain_timeout_ms.
 * 3. CURVE (tcp:// with client_keys, --client-queue-jobs 2): two
 *    connections with alice's key share one share: while the first has
 *    filled it, the second's jobs get WF_E_QUEUE_FULL naming "key
 *    'alice'"; bob's key, on a connection of its own, is admitted.
 *
 * Usage: test_fair PATH_TO_WEFTD. Every wait has a deadline.
 */
#include <errno.h>
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
#include "support/rawd.h"


#define MIB (UINT64_C(1) << 20)

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

/* Sleep ms, sampling the daemon's RSS every 20 ms into *max. */
static void watch_rss(pid_t pid, int ms, uint64_t *max)
{
    for (int t = 0; t < ms; t += 20) {
        uint64_t r = rss_of(pid);
        if (r > *max)
            *max = r;
        usleep(20 * 1000);
    }
}

/* Receive replies on c until `want` replies came (or a timeout); got[id -
 * base] counts each id; status replies are counted in *n_status. */
typedef struct tally {
    unsigned ok, full, other, dup, stray;
    unsigned got[128];
} tally_t;

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

/* ------------------------------------------------------------------ */
/* 1. two clients competing for the queue */

static void competing(const char *weftd)
{
    enum { NA = 40, NB = 4, SHARE = 4 };
    const char *args[] = { "--devices", "cpu:2", "--queue-capacity", "16",
                           "--client-queue-jobs", "4", "--log-level", "warning",
                           NULL };
    daemon_t d;
    if (!daemon_start(&d, weftd, args)) {
        CHECK(0);
        daemon_close(&d);
        return;
    }
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    daemon_t b;
    CHECK(client_open(&d, &b, 0));
    /* ~0.27 GFLOP a job: the queue stays full while the clients send */
    attn_case_t slow = { "f32 1024 (client A)", WF_DTYPE_F32, 1, 1024, 1024, 2, 2,
                         32, false, false, false, 0, 0, 0, 2, false };
    attn_case_t small = { "f32 64 (client B)", WF_DTYPE_F32, 1, 64, 64, 2, 2, 16,
                          false, true, false, 0, 0, 0, 2, false };
    attn_job_t ja, jb;
    attn_job_make(&slow, &ja, 1);
    attn_job_make(&small, &jb, 2);
    for (unsigned i = 0; i < NA; i++)
        CHECK(attn_send(&d, &slow, &ja, 1000 + i));
    CHECK(send_simple(&d, WF_OP_STATUS, 2000));
    /* A's replies up to its status: every job of A was read by then */
    tally_t ta, tb;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    reply_t *r = calloc(1, sizeof *r);
    bool status_seen = false;
    char full_msg[WF_PROTO_ERROR_MAX] = "";
    while (!status_seen && recv_reply(&d, TIMEOUT_MS, r)) {
        if (r->rep.op == WF_OP_STATUS) {
            status_seen = true;
            const wf_status_info_t *si = &r->rep.result.status;
            printf("  A sent %d jobs: queue %u of %u, %u in flight when its "
                   "status was answered\n", NA, si->queue_depth,
                   si->queue_capacity, si->in_flight);
            CHECK(si->queue_depth <= SHARE);
        } else {
            take_reply(&ta, r, 1000, NA);
            if (r->rep.status == WF_E_QUEUE_FULL && !full_msg[0])
                snprintf(full_msg, sizeof full_msg, "%s", r->rep.error);
            if (r->rep.status == WF_OK)
                attn_check(&slow, &ja, r);
        }
        reply_clear(r);
    }
    CHECK(status_seen);
    /* B, while A's share is full */
    for (unsigned i = 0; i < NB; i++)
        CHECK(attn_send(&b, &small, &jb, 3000 + i));
    for (unsigned n = 0; n < NB && recv_reply(&b, TIMEOUT_MS, r); n++) {
        take_reply(&tb, r, 3000, NB);
        if (r->rep.status == WF_OK)
            attn_check(&small, &jb, r);
        else
            fprintf(stderr, "B's job %" PRIu64 ": %s: %s\n", r->rep.id,
                    wf_status_name(r->rep.status), r->rep.error);
        reply_clear(r);
    }
    /* the rest of A's */
    while (ta.ok + ta.full + ta.other + ta.dup < NA && recv_reply(&d, TIMEOUT_MS, r)) {
        take_reply(&ta, r, 1000, NA);
        if (r->rep.status == WF_OK)
            attn_check(&slow, &ja, r);
        reply_clear(r);
    }
    printf("  client A: %u OK, %u WF_E_QUEUE_FULL (\"%s\"), %u other\n", ta.ok,
           ta.full, full_msg, ta.other);
    printf("  client B: %u of %d OK\n", tb.ok, NB);
    CHECK(ta.full >= 1 && ta.ok >= SHARE && ta.other == 0);
    CHECK(strstr(full_msg, "share of this connection is full") != NULL);
    CHECK(strstr(full_msg, "client_queue_jobs 4") != NULL);
    CHECK(tb.ok == NB);
    CHECK(ta.dup == 0 && ta.stray == 0 && tb.dup == 0 && tb.stray == 0);
    for (unsigned i = 0; i < NA; i++)
        CHECK(ta.got[i] == 1);
    for (unsigned i = 0; i < NB; i++)
        CHECK(tb.got[i] == 1);
    /* nothing more comes */
    zmq_pollitem_t it[2] = { { d.sock, 0, ZMQ_POLLIN, 0 }, { b.sock, 0, ZMQ_POLLIN, 0 } };
    CHECK(zmq_poll(it, 2, 200) == 0);
    free(r);
    attn_job_free(&ja);
    attn_job_free(&jb);
    client_close(&b);
    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
}

/* ------------------------------------------------------------------ */
/* 2. a client that does not read its replies */

static void unread(const char *weftd)
{
    enum { WAVES = 12, PER_WAVE = 8, N = WAVES * PER_WAVE };
    const uint64_t reply_bytes = 8 * MIB;
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
        CHECK(0);
        daemon_close(&d);
        return;
    }
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    /* q of 1 MiB (f32 1 x 4096 x 4 x 16) and so the output; short k / v */
    attn_case_t big = { "1 MiB output", WF_DTYPE_F32, 1, 4096, 64, 4, 4, 16,
                        false, false, false, 0, 0, 0, 2, false };
    attn_job_t j;
    attn_job_make(&big, &j, 3);
    reply_t *r = calloc(1, sizeof *r);
    /* warm-up on the well-behaved client (d.sock): allocator, workers */
    for (unsigned i = 0; i < 4; i++)
        CHECK(attn_send(&d, &big, &j, 10 + i));
    for (unsigned i = 0; i < 4 && recv_reply(&d, TIMEOUT_MS, r); i++) {
        attn_check(&big, &j, r);
        reply_clear(r);
    }
    usleep(200 * 1000);
    uint64_t base = rss_of(d.pid), peak = base;
    daemon_t slow;
    CHECK(client_open(&d, &slow, 1));
    for (unsigned w = 0; w < WAVES; w++) {
        for (unsigned i = 0; i < PER_WAVE; i++)
            CHECK(attn_send(&slow, &big, &j, 5000 + w * PER_WAVE + i));
        watch_rss(d.pid, 150, &peak);
    }
    /* the other client is served meanwhile */
    int64_t t0 = now_ms();
    CHECK(attn_send(&d, &big, &j, 20));
    CHECK(recv_reply(&d, TIMEOUT_MS, r));
    CHECK(r->rep.id == 20);
    attn_check(&big, &j, r);
    reply_clear(r);
    printf("  a second client's job answered in %lld ms while the first reads "
           "nothing\n", (long long)(now_ms() - t0));
    CHECK(get_status(&d, r, 21));
    printf("  status: queue %u, in flight %u\n", r->rep.result.status.queue_depth,
           r->rep.result.status.in_flight);
    reply_clear(r);
    watch_rss(d.pid, 300, &peak);
    /* bound: client_reply_bytes + (SNDHWM 4 + 1 being written) replies +
     * one wave of inputs + slack for the allocator and ZeroMQ's buffers */
    uint64_t bound = base + reply_bytes + 5 * MIB + PER_WAVE * MIB + 16 * MIB;
    printf("  %d jobs of 1 MiB output sent, none read: daemon RSS %.1f MiB "
           "before, peak %.1f MiB, bound %.1f MiB (unbounded: +%d MiB)\n", N,
           (double)base / MIB, (double)peak / MIB, (double)bound / MIB, N);
    CHECK(base > 0 && peak <= bound);
    /* now read everything */
    tally_t t;
    memset(&t, 0, sizeof t);
    char full_msg[WF_PROTO_ERROR_MAX] = "";
    unsigned checked = 0;
    while (t.ok + t.full + t.other + t.dup + t.stray < N &&
           recv_reply(&slow, TIMEOUT_MS, r)) {
        take_reply(&t, r, 5000, N);
        if (r->rep.status == WF_E_QUEUE_FULL && !full_msg[0])
            snprintf(full_msg, sizeof full_msg, "%s", r->rep.error);
        if (r->rep.status == WF_OK && checked++ < 8)
            attn_check(&big, &j, r);
        else if (r->rep.status == WF_OK)
            CHECK(r->n_frames == 1 && zmq_msg_size(&r->frames[0]) == MIB);
        reply_clear(r);
    }
    printf("  read at last: %u OK, %u WF_E_QUEUE_FULL (\"%s\"), %u other, %u "
           "duplicated\n", t.ok, t.full, full_msg, t.other, t.dup);
    CHECK(t.ok >= reply_bytes / MIB && t.full >= 1 && t.other == 0);
    CHECK(t.dup == 0 && t.stray == 0);
    for (unsigned i = 0; i < N; i++)
        CHECK(t.got[i] == 1);
    CHECK(strstr(full_msg, "read your replies") != NULL);
    CHECK(strstr(full_msg, "client_reply_bytes 8388608") != NULL);
    zmq_pollitem_t it = { slow.sock, 0, ZMQ_POLLIN, 0 };
    CHECK(zmq_poll(&it, 1, 200) == 0);
    /* a job whose outputs alone pass client_reply_bytes: never admitted */
    attn_case_t huge = { "10 MiB output", WF_DTYPE_F32, 1, 40000, 8, 4, 4, 16,
                         false, false, false, 0, 0, 0, 2, false };
    attn_job_t jh;
    attn_job_make(&huge, &jh, 6);
    CHECK(attn_send(&slow, &huge, &jh, 31));
    CHECK(recv_reply(&slow, TIMEOUT_MS, r) && r->rep.id == 31 &&
          r->rep.status == WF_E_LIMIT && strstr(r->rep.error, "client_reply_bytes"));
    printf("  a job with 10 MiB of outputs: %s (\"%s\")\n",
           wf_status_name(r->rep.status), r->rep.error);
    reply_clear(r);
    attn_job_free(&jh);
    /* the share is free again: the same client is admitted */
    CHECK(attn_send(&slow, &big, &j, 30));
    CHECK(recv_reply(&slow, TIMEOUT_MS, r) && r->rep.id == 30);
    attn_check(&big, &j, r);
    reply_clear(r);
    /* SIGTERM while replies wait for a client that does not read: the
     * daemon tries until drain_timeout_ms (1 s here), then drops them
     * and exits 0 (under the sanitizers: without a leak) */
    for (unsigned i = 0; i < PER_WAVE; i++)
        CHECK(attn_send(&slow, &big, &j, 40 + i));
    usleep(300 * 1000);
    int64_t t_term = now_ms();
    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    printf("  SIGTERM with unread replies: exit after %lld ms\n",
           (long long)(now_ms() - t_term));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    free(r);
    attn_job_free(&j);
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

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void per_key(const char *weftd)
{
    enum { N1 = 6, N2 = 2, NB = 2 };
    char dir[] = "/tmp/weft-fair-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
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
        fprintf(stderr, "keys: %s\n", err);
        CHECK(0);
        return;
    }
    snprintf(text, sizeof text, "submit %s alice\nsubmit %s bob\n",
             kalice.public_key, kbob.public_key);
    write_file(clients, text);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", free_port());
    const char *args[] = { "--devices", "cpu:2", "--queue-capacity", "16",
                           "--client-queue-jobs", "2", "--listen", ep,
                           "--key-file", keyfile, "--client-keys", clients,
                           "--log-level", "warning", NULL };
    daemon_t d;
    if (!daemon_start(&d, weftd, args)) {
        CHECK(0);
        daemon_close(&d);
        return;
    }
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    daemon_t a1, a2, b;
    CHECK(curve_client(&d, &a1, ep, &kd, &kalice));
    CHECK(curve_client(&d, &a2, ep, &kd, &kalice));
    CHECK(curve_client(&d, &b, ep, &kd, &kbob));
    /* ~4 GFLOP a job: alice's two queued jobs wait while the others send
     * (1 GFLOP left too short a window on a loaded machine: a queued job
     * of alice's was dispatched before her 2nd connection's arrived) */
    attn_case_t slow = { "f32 4096 (alice)", WF_DTYPE_F32, 1, 4096, 4096, 2, 2,
                         32, false, false, false, 0, 0, 0, 2, false };
    attn_case_t small = { "f32 64 (bob)", WF_DTYPE_F32, 1, 64, 64, 2, 2, 16,
                          false, false, false, 0, 0, 0, 2, false };
    attn_job_t js, jb;
    attn_job_make(&slow, &js, 4);
    attn_job_make(&small, &jb, 5);
    reply_t *r = calloc(1, sizeof *r);
    /* the second connection is up before the first floods */
    CHECK(send_simple(&a2, WF_OP_HELLO, 1) && recv_reply(&a2, TIMEOUT_MS, r));
    reply_clear(r);
    for (unsigned i = 0; i < N1; i++)
        CHECK(attn_send(&a1, &slow, &js, 100 + i));
    CHECK(send_simple(&a1, WF_OP_STATUS, 99));
    tally_t t1, t2, tb;
    memset(&t1, 0, sizeof t1);
    memset(&t2, 0, sizeof t2);
    memset(&tb, 0, sizeof tb);
    bool status_seen = false;
    while (!status_seen && recv_reply(&a1, TIMEOUT_MS, r)) {
        if (r->rep.op == WF_OP_STATUS)
            status_seen = true;
        else
            take_reply(&t1, r, 100, N1);
        reply_clear(r);
    }
    CHECK(status_seen);
    /* alice's other connection: her share is full */
    char full_msg[WF_PROTO_ERROR_MAX] = "";
    for (unsigned i = 0; i < N2; i++)
        CHECK(attn_send(&a2, &small, &jb, 200 + i));
    for (unsigned n = 0; n < N2 && recv_reply(&a2, TIMEOUT_MS, r); n++) {
        take_reply(&t2, r, 200, N2);
        if (r->rep.status == WF_E_QUEUE_FULL)
            snprintf(full_msg, sizeof full_msg, "%s", r->rep.error);
        reply_clear(r);
    }
    /* bob's is not */
    for (unsigned i = 0; i < NB; i++)
        CHECK(attn_send(&b, &small, &jb, 300 + i));
    for (unsigned n = 0; n < NB && recv_reply(&b, TIMEOUT_MS, r); n++) {
        take_reply(&tb, r, 300, NB);
        if (r->rep.status == WF_OK)
            attn_check(&small, &jb, r);
        reply_clear(r);
    }
    while (t1.ok + t1.full + t1.other < N1 && recv_reply(&a1, TIMEOUT_MS, r)) {
        take_reply(&t1, r, 100, N1);
        reply_clear(r);
    }
    printf("  alice (1st connection): %u OK, %u WF_E_QUEUE_FULL; alice (2nd "
           "connection): %u OK, %u WF_E_QUEUE_FULL (\"%s\"); bob: %u of %d OK\n",
           t1.ok, t1.full, t2.ok, t2.full, full_msg, tb.ok, NB);
    CHECK(t1.full >= 1 && t1.other == 0 && t1.dup == 0);
    CHECK(t2.full == N2 && t2.dup == 0);
    CHECK(strstr(full_msg, "share of key 'alice' is full") != NULL);
    CHECK(tb.ok == NB && tb.dup == 0);
    free(r);
    attn_job_free(&js);
    attn_job_free(&jb);
    client_close(&a1);
    client_close(&a2);
    client_close(&b);
    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
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
    if (failures) {
        fprintf(stderr, "test_fair: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_fair: OK\n");
    return 0;
}
