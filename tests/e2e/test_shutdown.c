/* test_shutdown.c — end to end: a daemon's SIGTERM while libweft clients
 * keep sending (PROTOCOL.md section 1, "Shutdown").
 *
 * usage: test_shutdown PATH_TO_WEFTD
 *
 * A real weftd (cpu:2) with the test hook WEFT_TEST_HOLD_JOBS, so that the
 * drain has a job to wait for until the test lets it run; once on an
 * ipc:// endpoint, once on loopback tcp:// (where a close with unread
 * input would reset the connection and drop replies in flight). Two sender
 * threads, each with its own connection, send without pause from before
 * the SIGTERM until after the daemon has gone: one hello / status after
 * the other; and asynchronous attention jobs (up to WINDOW in flight) with
 * a hello between two submissions. Each stops after AFTER_CLOSE requests
 * answered WF_E_CONN_CLOSED. The main thread, on a third connection:
 * a job held at its start (status shows it running), the SIGTERM, the
 * daemon's STOPPING=1, a job refused with WF_E_SHUTTING_DOWN and a hello
 * answered during the drain, then releases the held job, which completes,
 * and sends hellos until the connection closes.
 *
 * Checked: every request has exactly one outcome, a reply (WF_OK or
 * WF_E_SHUTTING_DOWN) or WF_E_CONN_CLOSED, and nothing else (no
 * WF_E_TIMEOUT: every request's timeout is REQUEST_TIMEOUT_MS, ten times
 * the bound the test waits for the senders to finish, so a request left
 * waiting for its timeout fails the test); every connection ends in
 * WF_E_CONN_CLOSED and stays so once the daemon has gone; the daemon
 * exits 0 and its log says how many requests it read, replies it wrote
 * and requests it left unanswered: read = written = the replies the
 * clients received, none unanswered (so no reply was lost on either
 * side of the close).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/check.h"
#include "support/ports.h"
#include "support/spawn.h"
#include "support/wait.h"
#include "weft.h"

/* Every request's timeout: far above the failure bound below, which it
 * would have to wait out first. */
#define REQUEST_TIMEOUT_MS (10 * (int)WAIT_EVENT_MS)
#define WINDOW 4          /* asynchronous jobs in flight per sender */
#define DEVICES 2         /* the daemon's cpu devices (workers) */
#define STR_(x) #x
#define STR(x) STR_(x)
#define AFTER_CLOSE 3     /* requests a sender makes after its first close */

/* Job shape: q, k, v, out (1, 16, 2, 16) f32. */
#define SEQ 16
#define HEADS 2
#define HDIM 16
#define NUMEL (SEQ * HEADS * HDIM)

/* Outcomes of one connection's requests. Written by its thread, read by
 * the main thread (atomics). */
typedef struct tally {
    atomic_uint replies;      /* WF_OK or WF_E_SHUTTING_DOWN from the daemon */
    atomic_uint refused;      /* of them, WF_E_SHUTTING_DOWN */
    atomic_uint closed;       /* WF_E_CONN_CLOSED */
    atomic_uint other;        /* anything else: a failure */
    atomic_int other_code;    /* the first of those */
    atomic_uint reply_after_close; /* a call answered after one that got
                                      WF_E_CONN_CLOSED (calls that wait) */
    atomic_bool done;         /* the sender stopped */
} tally_t;

static const char *endpoint;
static atomic_uint replies_all;   /* replies received, every connection */

/* One request's outcome. in_order: the outcome of a call that waited for
 * it (hello, status, a job waited for at once), so that the outcomes of
 * one connection come in the order of the events; a job polled later
 * (job_sender) may have been answered before an earlier close was read. */
static void tally_note(tally_t *t, wf_status_t st, const char *what,
                       const char *msg, bool in_order)
{
    switch (st) {
    case WF_E_SHUTTING_DOWN:
        atomic_fetch_add(&t->refused, 1);
        /* fall through */
    case WF_OK:
        atomic_fetch_add(&t->replies, 1);
        atomic_fetch_add(&replies_all, 1);
        if (in_order && atomic_load(&t->closed))
            atomic_fetch_add(&t->reply_after_close, 1);
        break;
    case WF_E_CONN_CLOSED:
        atomic_fetch_add(&t->closed, 1);
        break;
    default:
        if (atomic_fetch_add(&t->other, 1) == 0) {
            atomic_store(&t->other_code, (int)st);
            fprintf(stderr, "%s: %s: %s\n", what, wf_status_name(st), msg);
        }
        break;
    }
}

/* hello, status, hello, ... until AFTER_CLOSE closes. */
static void *simple_sender(void *arg)
{
    tally_t *t = arg;
    wf_client_t *c = NULL;
    wf_status_info_t *info = malloc(sizeof *info);
    if (!info || wf_client_connect(endpoint, REQUEST_TIMEOUT_MS, &c) != WF_OK) {
        atomic_fetch_add(&t->other, 1);
        free(info);
        atomic_store(&t->done, true);
        return NULL;
    }
    for (uint64_t i = 0; atomic_load(&t->closed) < AFTER_CLOSE; i++) {
        wf_status_t st = i % 2 ? wf_status(c, info) : wf_hello(c, NULL);
        tally_note(t, st, i % 2 ? "status" : "hello", wf_client_last_error(c), true);
        if (st != WF_OK && st != WF_E_SHUTTING_DOWN && st != WF_E_CONN_CLOSED)
            break;
    }
    wf_client_destroy(&c);
    free(info);
    atomic_store(&t->done, true);
    return NULL;
}

typedef struct slot {
    float q[NUMEL], k[NUMEL], v[NUMEL], out[NUMEL];
    wf_job_t *job;            /* in flight; NULL: free */
} slot_t;

static wf_tensor_t tensor(float *data)
{
    wf_tensor_t t = { .data = data, .dtype = WF_DTYPE_F32, .rank = 4,
                      .shape = { 1, SEQ, HEADS, HDIM } };
    return t;
}

static void slot_fill(slot_t *s, unsigned seed)
{
    for (int i = 0; i < NUMEL; i++) {
        s->q[i] = (float)((i * 7 + seed) % 13) / 13.0f - 0.5f;
        s->k[i] = (float)((i * 5 + seed) % 11) / 11.0f - 0.5f;
        s->v[i] = (float)((i * 3 + seed) % 17) / 17.0f - 0.5f;
    }
}

static wf_status_t submit(wf_client_t *c, slot_t *s)
{
    wf_tensor_t q = tensor(s->q), k = tensor(s->k), v = tensor(s->v);
    wf_tensor_t out = tensor(s->out);
    return wf_attention_submit(c, &q, &k, &v, NULL, &out, NULL, &s->job);
}

/* The job's outcome, once it has one: noted, the job destroyed. */
static void retire(wf_client_t *c, tally_t *t, slot_t *s, bool wait)
{
    wf_status_t st = wait ? wf_job_wait(c, s->job, REQUEST_TIMEOUT_MS)
                          : wf_job_poll(c, s->job);
    if (st == WF_E_PENDING)
        return;
    tally_note(t, st, "attention", wf_job_error(s->job), false);
    wf_job_destroy(c, &s->job);
}

/* Asynchronous jobs, a hello between two submissions, until AFTER_CLOSE
 * closes; then every job still in flight is waited for. */
static void *job_sender(void *arg)
{
    tally_t *t = arg;
    wf_client_t *c = NULL;
    slot_t *slots = calloc(WINDOW, sizeof *slots);
    if (!slots || wf_client_connect(endpoint, REQUEST_TIMEOUT_MS, &c) != WF_OK) {
        atomic_fetch_add(&t->other, 1);
        free(slots);
        atomic_store(&t->done, true);
        return NULL;
    }
    unsigned seed = 0;
    while (atomic_load(&t->closed) < AFTER_CLOSE && !atomic_load(&t->other)) {
        for (int i = 0; i < WINDOW; i++) {
            if (slots[i].job)
                continue;
            slot_fill(&slots[i], seed++);
            wf_status_t st = submit(c, &slots[i]);
            if (st != WF_OK)    /* not sent: its outcome */
                tally_note(t, st, "attention submit", wf_client_last_error(c), true);
            break;
        }
        if (atomic_load(&t->closed) < AFTER_CLOSE) {
            wf_status_t st = wf_hello(c, NULL);
            tally_note(t, st, "hello", wf_client_last_error(c), true);
        }
        for (int i = 0; i < WINDOW; i++)
            if (slots[i].job)
                retire(c, t, &slots[i], false);
    }
    for (int i = 0; i < WINDOW; i++)
        if (slots[i].job)
            retire(c, t, &slots[i], true);
    for (int i = 0; i < WINDOW; i++)
        if (slots[i].job) {     /* still pending after its wait */
            atomic_fetch_add(&t->other, 1);
            wf_job_destroy(c, &slots[i].job);
        }
    wf_client_destroy(&c);
    free(slots);
    atomic_store(&t->done, true);
    return NULL;
}

/* ---- conditions for wait_for ------------------------------------------ */

typedef struct running {
    wf_client_t *c;
    tally_t *t;
    wf_status_info_t *info;
} running_t;

/* A job runs (held at its start by the test hook). */
static bool job_running(void *arg)
{
    running_t *r = arg;
    wf_status_t st = wf_status(r->c, r->info);
    tally_note(r->t, st, "status", wf_client_last_error(r->c), true);
    return st == WF_OK && r->info->in_flight >= 1;
}

typedef struct at_least {
    atomic_uint *n;
    unsigned want;
} at_least_t;

static bool reached(void *arg)
{
    at_least_t *a = arg;
    return atomic_load(a->n) >= a->want;
}

static tally_t *senders_of_done[2];

static bool senders_done(void *arg)
{
    (void)arg;
    return atomic_load(&senders_of_done[0]->done) &&
           atomic_load(&senders_of_done[1]->done);
}

/* ---- the daemon's log ------------------------------------------------- */

typedef struct gate_counts {
    bool found;
    uint64_t read, written, unanswered;
} gate_counts_t;

/* The gate's line once every connection closed; its own lines and the
 * drain's are printed. */
static gate_counts_t read_log(const char *path, bool print_all)
{
    gate_counts_t g = { 0 };
    FILE *f = fopen(path, "r");
    if (!f)
        return g;
    char line[1200];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "every connection closed: ");
        if (p && sscanf(p, "every connection closed: %" SCNu64 " requests read "
                        "since the start, %" SCNu64 " replies written, %" SCNu64,
                        &g.read, &g.written, &g.unanswered) == 3)
            g.found = true;
        if (print_all || p || strstr(line, "drain") || strstr(line, "closing") ||
            strstr(line, "Terminated") || strstr(line, "stopped"))
            fprintf(stderr, "  weftd: %s", line);
    }
    fclose(f);
    return g;
}

static void print_tally(const char *who, tally_t *t)
{
    printf("  %-14s %u replies (%u WF_E_SHUTTING_DOWN), %u WF_E_CONN_CLOSED, "
           "%u other\n", who, atomic_load(&t->replies), atomic_load(&t->refused),
           atomic_load(&t->closed), atomic_load(&t->other));
}

static void tally_reset(tally_t *t)
{
    atomic_store(&t->replies, 0);
    atomic_store(&t->refused, 0);
    atomic_store(&t->closed, 0);
    atomic_store(&t->other, 0);
    atomic_store(&t->other_code, 0);
    atomic_store(&t->reply_after_close, 0);
    atomic_store(&t->done, false);
}

/* The whole scenario against one daemon listening on an ipc:// endpoint
 * or on loopback tcp:// (its end of the stream and its close differ). */
static void run_case(const char *weftd, bool tcp)
{
    char sock[108], notify[108], fifo[108], logp[108], ep[128], hold_env[160];
    int pid = (int)getpid();
    const char *kind = tcp ? "tcp" : "ipc";
    snprintf(sock, sizeof sock, "/tmp/weft-shutdown-%d.sock", pid);
    snprintf(notify, sizeof notify, "/tmp/weft-shutdown-%d.notify", pid);
    snprintf(fifo, sizeof fifo, "/tmp/weft-shutdown-%d.hold", pid);
    snprintf(logp, sizeof logp, "/tmp/weft-shutdown-%d-%s.log", pid, kind);
    if (tcp)
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", test_port());
    else
        snprintf(ep, sizeof ep, "ipc://%s", sock);
    snprintf(hold_env, sizeof hold_env, "WEFT_TEST_HOLD_JOBS=%s", fifo);
    printf("-- %s\n", ep);
    endpoint = ep;
    atomic_store(&replies_all, 0);
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) {
        CHECK(false, "mkfifo %s: %s", fifo, strerror(errno));
        return;
    }
    int nfd = spawn_notify_bind(notify, 0);
    CHECK(nfd >= 0, "notify socket %s", notify);
    if (nfd < 0)
        return;
    /* drain_timeout_ms far above every bound here: the drain ends when
     * the held job is released and done, never by the clock */
    const char *const args[] = { weftd, "--devices", "cpu:" STR(DEVICES), "--listen", ep,
                                 "--drain-timeout-ms", "3600000",
                                 "--log-level", "info", NULL };
    const char *const env[] = { hold_env, NULL };
    spawn_opts_t so = { .env = env, .notify_path = notify, .log_path = logp };
    spawn_t d;
    if (!spawn_start(&d, args, &so)) {
        CHECK(false, "cannot start %s", weftd);
        close(nfd);
        return;
    }
    CHECK(spawn_notify_wait(nfd, "READY=1", (int)WAIT_EVENT_MS), "weftd READY=1");

    /* 1. a job held at its start: the drain will wait for it */
    static tally_t main_t, simple_t, jobs_t;
    tally_reset(&main_t);
    tally_reset(&simple_t);
    tally_reset(&jobs_t);
    wf_client_t *c = NULL;
    slot_t *held = calloc(2, sizeof *held);
    wf_status_info_t *info = malloc(sizeof *info);
    CHECK(wf_client_connect(ep, REQUEST_TIMEOUT_MS, &c) == WF_OK, "connect: %s",
          wf_client_last_error(NULL));
    if (!c || !held || !info)
        goto out;
    slot_fill(&held[0], 1);
    CHECK(submit(c, &held[0]) == WF_OK, "submit the held job: %s",
          wf_client_last_error(c));
    running_t r = { c, &main_t, info };
    CHECK(wait_for(job_running, &r, WAIT_EVENT_MS), "the held job never ran");
    printf("a job is held at its start\n");

    /* 2. the senders, running before the SIGTERM */
    pthread_t th[2];
    senders_of_done[0] = &simple_t;
    senders_of_done[1] = &jobs_t;
    pthread_create(&th[0], NULL, simple_sender, &simple_t);
    pthread_create(&th[1], NULL, job_sender, &jobs_t);
    at_least_t s2 = { &simple_t.replies, 2 }, j2 = { &jobs_t.replies, 2 };
    CHECK(wait_for(reached, &s2, WAIT_EVENT_MS) && wait_for(reached, &j2, WAIT_EVENT_MS),
          "the senders got no replies");

    /* 3. SIGTERM: the drain waits for the held job */
    kill(d.pid, SIGTERM);
    CHECK(spawn_notify_wait(nfd, "STOPPING=1", (int)WAIT_EVENT_MS), "weftd STOPPING=1");
    printf("SIGTERM: draining\n");
    unsigned simple_at_term = atomic_load(&simple_t.replies);
    slot_fill(&held[1], 2);
    CHECK(submit(c, &held[1]) == WF_OK, "submit during the drain: %s",
          wf_client_last_error(c));
    if (held[1].job) {
        wf_status_t st = wf_job_wait(c, held[1].job, REQUEST_TIMEOUT_MS);
        CHECK(st == WF_E_SHUTTING_DOWN, "a job during the drain: %s: %s",
              wf_status_name(st), wf_job_error(held[1].job));
        tally_note(&main_t, st, "attention", wf_job_error(held[1].job), true);
        wf_job_destroy(c, &held[1].job);
    }
    wf_status_t hst = wf_hello(c, NULL);
    CHECK(hst == WF_OK, "hello during the drain: %s", wf_status_name(hst));
    tally_note(&main_t, hst, "hello", wf_client_last_error(c), true);
    at_least_t s_more = { &simple_t.replies, simple_at_term + 1 };
    CHECK(wait_for(reached, &s_more, WAIT_EVENT_MS),
          "the hello / status sender got no reply during the drain");

    /* 4. the held job runs; the drain ends; every connection closes */
    /* one 'a' per worker (each may be reading): the gate opens for good */
    int hfd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    CHECK(hfd >= 0 && write(hfd, "aa", DEVICES) == DEVICES, "release the held job: %s",
          strerror(errno));
    if (hfd >= 0)
        close(hfd);
    wf_status_t st = wf_job_wait(c, held[0].job, REQUEST_TIMEOUT_MS);
    CHECK(st == WF_OK, "the held job: %s: %s", wf_status_name(st),
          wf_job_error(held[0].job));
    tally_note(&main_t, st, "attention", wf_job_error(held[0].job), true);
    wf_job_destroy(c, &held[0].job);
    printf("the held job is done: the drain ends\n");
    /* hellos until the close, then AFTER_CLOSE more; the loop ends with
     * the close (an event), the bound only says it never came */
    uint64_t end = wait_now_ms() + wait_bound_ms(WAIT_EVENT_MS);
    while (atomic_load(&main_t.closed) < AFTER_CLOSE && !atomic_load(&main_t.other) &&
           wait_now_ms() < end) {
        st = wf_hello(c, NULL);
        tally_note(&main_t, st, "hello", wf_client_last_error(c), true);
    }
    CHECK(atomic_load(&main_t.closed) >= AFTER_CLOSE, "the main connection never "
          "closed: %u closes", atomic_load(&main_t.closed));

    /* 5. the senders end by themselves: every request had its outcome */
    bool done = wait_for(senders_done, NULL, WAIT_EVENT_MS);
    CHECK(done, "a sender still waits %u ms after the daemon's end (a request "
          "waiting for its timeout)", wait_bound_ms(WAIT_EVENT_MS));
    if (!done) {
        print_tally("hello/status", &simple_t);
        print_tally("jobs", &jobs_t);
        read_log(logp, true);
        fprintf(stderr, "%d check(s) failed\n", (int)failed);
        _exit(1);           /* the waiting threads cannot be joined */
    }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    CHECK(spawn_wait(&d, SPAWN_STOP_MS) && spawn_exited(&d, 0),
          "weftd did not exit 0 after the drain (status 0x%x)", d.status);

    printf("outcomes:\n");
    print_tally("hello/status", &simple_t);
    print_tally("jobs", &jobs_t);
    print_tally("main", &main_t);
    tally_t *all[3] = { &simple_t, &jobs_t, &main_t };
    const char *names[3] = { "hello/status", "jobs", "main" };
    for (int i = 0; i < 3; i++) {
        tally_t *t = all[i];
        CHECK(atomic_load(&t->other) == 0, "%s: an outcome other than a reply or "
              "WF_E_CONN_CLOSED: %s", names[i],
              wf_status_name((wf_status_t)atomic_load(&t->other_code)));
        CHECK(atomic_load(&t->closed) >= AFTER_CLOSE, "%s: %u WF_E_CONN_CLOSED",
              names[i], atomic_load(&t->closed));
        CHECK(atomic_load(&t->reply_after_close) == 0, "%s: %u replies after "
              "WF_E_CONN_CLOSED", names[i], atomic_load(&t->reply_after_close));
    }
    CHECK(atomic_load(&main_t.refused) == 1, "main: %u WF_E_SHUTTING_DOWN",
          atomic_load(&main_t.refused));

    gate_counts_t g = read_log(logp, failed > 0);
    CHECK(g.found, "weftd's log has no line for the end of its connections");
    printf("weftd: %" PRIu64 " requests read, %" PRIu64 " replies written, %" PRIu64
           " unanswered; the clients received %u replies\n", g.read, g.written,
           g.unanswered, atomic_load(&replies_all));
    CHECK(g.read == g.written && g.unanswered == 0,
          "weftd read %" PRIu64 " requests, wrote %" PRIu64 " replies, left %" PRIu64
          " unanswered", g.read, g.written, g.unanswered);
    CHECK(g.written == atomic_load(&replies_all), "weftd wrote %" PRIu64 " replies, "
          "the clients received %u", g.written, atomic_load(&replies_all));

out:
    if (c)
        wf_client_destroy(&c);
    free(held);
    free(info);
    spawn_close(&d);
    close(nfd);
    unlink(notify);
    unlink(fifo);
    unlink(sock);
    if (!failed)
        unlink(logp);
    else
        fprintf(stderr, "weftd's log: %s\n", logp);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    run_case(argv[1], false);
    run_case(argv[1], true);
    printf("%d checks passed, %d failed\n", (int)passed, (int)failed);
    return failed ? 1 : 0;
}
