/* test_reconfig_load.c — end to end: hot reconfiguration under load.
 *
 * usage: test_reconfig_load PATH_TO_WEFTD
 *
 * One weftd with 4 CPU devices. Four client threads, one connection each,
 * keep 4 attention jobs in flight each (asynchronous API) with varied
 * shapes and dtypes (divisible and uneven S with the anything flags, GQA,
 * cross-attention, causal, both rotate methods), each checked against an
 * fp64 reference, while the main thread runs reconfigurations through
 *   dp=4 -> ring=2,ulysses=2 -> ulysses=4 -> ring=4 -> dp=2,ring=2 ->
 *   tp=4 -> dp=2,ulysses=2 -> ring=2,tp=2 -> ulysses=2,tp=2 -> dp=4 ->
 *   ring=2,ulysses=2
 * twice over (about 23 successful reconfigurations), plus one invalid
 * mesh (ring=3: refused, nothing changes) and one concurrent pair from
 * two connections while a large job runs: never both at once (one gets
 * WF_E_BUSY, or they ran one after the other), and one WF_OK, one
 * WF_E_BUSY when the second was sent while the first was seen draining
 * the large job. Whether that overlap happens depends on the machine
 * under the load (the large job may end first): the strict case, with a
 * job held on purpose, is test_reconfig_basic's. Before each
 * reconfiguration the main thread waits (on a condition variable,
 * bounded) until every client thread has finished a few more jobs, so
 * that every mesh serves real load.
 *
 * Asserted: every submitted job completes with WF_OK and a correct result
 * (zero lost: each thread completes exactly what it submitted; zero
 * duplicated: the daemon's jobs_served equals the jobs submitted, and
 * jobs_failed is 0); each job's epoch lies between the epoch known when it
 * was submitted and an upper bound read after its reply, and is
 * non-decreasing per connection in submission order; the final status
 * epoch equals the number of successful reconfigurations (from 0).
 *
 * Epoch bounds: epoch_lo is published after wf_reconfigure returns, so the
 * daemon's epoch is never below it; epoch_hi is raised before a
 * reconfiguration is sent, so the daemon's epoch is never above it.
 *
 * Tolerances as in test_parity.c; since the mesh a job ran under is not
 * known in advance, jobs with convert_to_fp32 off and f16 / bf16 inputs
 * always get the looser tolerance of a merge in the input dtype.
 * No sleeps: every wait is on a reply, status or a condition variable,
 * bounded by WAIT_EVENT_MS (each one an event the daemon brings about).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"
#include "support/check.h"
#include "support/jobcheck.h"
#include "support/spawn.h"
#include "support/wait.h"

#define N_THREADS 4
#define IN_FLIGHT 4          /* jobs in flight per connection */
#define JOBS_PER_STEP 6      /* jobs each thread finishes between reconfigurations */
#define ROUNDS 2             /* times through the mesh sequence */

/* Test state shared by the threads: the epoch bounds (failures are
 * check.h's, which the threads count into too). */
typedef struct shared {
    const char *endpoint;
    atomic_bool stop;            /* client threads: finish and leave */
    atomic_uint_least64_t epoch_lo, epoch_hi;
    pthread_mutex_t mu;
    pthread_cond_t progress;     /* a job finished */
    uint64_t done[N_THREADS];    /* jobs finished per thread (under mu) */
} shared_t;

/* Tolerances of test_parity.c, with the low-precision merge assumed
 * whenever it may happen (see the file comment). */
static void load_tolerances(const jcase_t *c, double *ret_out, double *ret_lse)
{
    jcase_tolerances(c, true, ret_out, ret_lse);
    if (c->fp32 == WF_OPT_OFF && c->in != WF_DTYPE_F32)
        *ret_lse = c->in == WF_DTYPE_F16 ? 4e-3 : 2.5e-2;
}


#include "support/jcase_names.h"

/* Valid on every mesh of the sequence: H a multiple of 4 (tp = 4,
 * ulysses = 4), S a multiple of 8 or the anything flags on. */
static const jcase_t load_cases[] = {
    /* name                    B  Sq  Skv Hq Hkv D   in    out   causal lse  scale rotate fp32 ring uly lb */
    { "f32 32",                1, 32, 32, 8, 8, 16, F32,  F32,  0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "f16 48 causal lb",      1, 48, 48, 4, 4, 32, F16,  F16,  1, true,  0,    A2A, ON,  DEF, DEF, ON },
    { "bf16 24 GQA no-fp32",   2, 24, 24, 8, 2, 16, BF16, BF16, 0, true,  0,    AG,  OFF, DEF, DEF, DEF },
    { "f32 uneven 45 causal",  1, 45, 45, 8, 4, 16, F32,  F32,  1, true,  0,    A2A, ON,  ON,  ON,  ON },
    { "f16->f32 cross 40/24",  1, 40, 24, 4, 1, 16, F16,  F32,  0, false, 0.3f, AG,  DEF, DEF, DEF, DEF },
    { "bf16 uneven cross 21/37", 1, 21, 37, 8, 8, 16, BF16, BF16, 1, true, 0,   A2A, DEF, ON,  ON,  OFF },
};
#define N_LOAD_CASES (sizeof load_cases / sizeof load_cases[0])

/* ---- client threads ------------------------------------------------------ */

typedef struct slot {
    jbuf_t a;            /* the job's buffers (inputs borrowed until done) */
    wf_job_t *job;       /* in flight */
    uint64_t seq;        /* submission order on this connection */
    uint64_t lo;         /* epoch_lo when it was submitted */
} slot_t;

typedef struct worker {
    shared_t *sh;
    int index;
    pthread_t th;
    uint64_t submitted, completed;
    uint64_t epochs_seen;        /* distinct epochs this connection's jobs ran under */
    double worst_ratio;          /* max error / tolerance, out or lse */
    slot_t slots[IN_FLIGHT];
} worker_t;

/* Wait for the oldest job of the ring and check it. */
static void finish_oldest(worker_t *w, wf_client_t *c, slot_t *s, uint64_t *last_epoch)
{
    shared_t *sh = w->sh;
    const jcase_t *jc = &s->a.c;
    wf_status_t st = wf_job_wait(c, s->job, 60000);
    uint64_t hi = atomic_load(&sh->epoch_hi);
    CHECK(st == WF_OK, "thread %d job %" PRIu64 " (%s): %s %s", w->index, s->seq,
          jc->name, wf_status_name(st), wf_job_error(s->job));
    wf_job_result_t r;
    memset(&r, 0, sizeof r);
    if (st == WF_OK && wf_job_result(s->job, &r) == WF_OK) {
        double eo, el, to, tl;
        jbuf_errors(&s->a, &eo, &el);
        load_tolerances(jc, &to, &tl);
        CHECK(eo <= to && el <= tl, "thread %d job %" PRIu64 " (%s, epoch %" PRIu64
              "): out error %.3e (tol %.0e), lse error %.3e (tol %.0e)", w->index,
              s->seq, jc->name, r.epoch, eo, to, el, tl);
        CHECK(r.epoch >= s->lo && r.epoch <= hi, "thread %d job %" PRIu64
              ": epoch %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]", w->index,
              s->seq, r.epoch, s->lo, hi);
        CHECK(r.epoch >= *last_epoch, "thread %d job %" PRIu64 ": epoch %" PRIu64
              " after a job of epoch %" PRIu64, w->index, s->seq, r.epoch, *last_epoch);
        if (w->completed == 0 || r.epoch != *last_epoch)
            w->epochs_seen++;
        *last_epoch = r.epoch;
        w->worst_ratio = fmax(w->worst_ratio, fmax(eo / to, el / tl));
    }
    wf_job_destroy(c, &s->job);
    jbuf_free(&s->a);
    w->completed++;
    pthread_mutex_lock(&sh->mu);
    sh->done[w->index]++;
    pthread_cond_broadcast(&sh->progress);
    pthread_mutex_unlock(&sh->mu);
}

static void *worker_main(void *p)
{
    worker_t *w = p;
    shared_t *sh = w->sh;
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(sh->endpoint, 60000, &c);
    CHECK(st == WF_OK, "thread %d connect: %s", w->index, wf_status_name(st));
    if (!c)
        return NULL;
    unsigned head = 0, count = 0;
    uint64_t last_epoch = 0;
    for (;;) {
        bool stopping = atomic_load(&sh->stop);
        if (count == IN_FLIGHT || (stopping && count > 0)) {
            finish_oldest(w, c, &w->slots[head], &last_epoch);
            head = (head + 1) % IN_FLIGHT;
            count--;
            continue;
        }
        if (stopping)
            break;
        slot_t *s = &w->slots[(head + count) % IN_FLIGHT];
        uint64_t seq = w->submitted;
        const jcase_t *jc = &load_cases[(seq + (uint64_t)w->index) % N_LOAD_CASES];
        if (!jbuf_init(&s->a, jc, ((uint64_t)w->index << 32) | seq)) {
            CHECK(0, "out of memory");
            jbuf_free(&s->a);
            break;
        }
        wf_attention_opts_t o = opts_of(jc);
        s->seq = seq;
        s->lo = atomic_load(&sh->epoch_lo);
        s->job = NULL;
        st = wf_attention_submit(c, &s->a.q, &s->a.k, &s->a.v, &o, &s->a.out,
                                 s->a.lse, &s->job);
        CHECK(st == WF_OK, "thread %d submit %" PRIu64 ": %s %s", w->index, seq,
              wf_status_name(st), wf_client_last_error(c));
        if (st != WF_OK) {
            jbuf_free(&s->a);
            break;
        }
        w->submitted++;
        count++;
    }
    while (count > 0) { /* after a failure: still collect what is in flight */
        finish_oldest(w, c, &w->slots[head], &last_epoch);
        head = (head + 1) % IN_FLIGHT;
        count--;
    }
    wf_client_destroy(&c);
    return NULL;
}

/* Block until every thread has finished `need` more jobs than in
 * `since`, or wait_bound_ms(WAIT_EVENT_MS) passes (jobs end on their own:
 * a failure bound). Updates `since`. */
static bool wait_progress(shared_t *sh, uint64_t since[N_THREADS], uint64_t need)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)(wait_bound_ms(WAIT_EVENT_MS) / 1000);
    bool ok = true;
    pthread_mutex_lock(&sh->mu);
    for (;;) {
        bool all = true;
        for (int i = 0; i < N_THREADS; i++)
            if (sh->done[i] < since[i] + need)
                all = false;
        if (all)
            break;
        if (pthread_cond_timedwait(&sh->progress, &sh->mu, &dl) == ETIMEDOUT) {
            ok = false;
            break;
        }
    }
    for (int i = 0; i < N_THREADS; i++)
        since[i] = sh->done[i];
    pthread_mutex_unlock(&sh->mu);
    return ok;
}

/* ---- daemon ---------------------------------------------------------------- */

static pid_t start_daemon(const char *weftd, const char *endpoint)
{
    const char *argv[] = { weftd, "--devices", "cpu:4", "--listen", endpoint,
                           "--log-level", "warning", NULL };
    return spawn_daemon(argv, NULL);
}

/* ---- reconfigurations ------------------------------------------------------ */

typedef struct named_mesh {
    const char *name;
    wf_mesh_degrees_t m;
} named_mesh_t;

static const named_mesh_t sequence[] = {
    { "dp=4", { 4, 1, 1, 1 } },
    { "ring=2,ulysses=2", { 1, 2, 2, 1 } },
    { "ulysses=4", { 1, 1, 4, 1 } },
    { "ring=4", { 1, 4, 1, 1 } },
    { "dp=2,ring=2", { 2, 2, 1, 1 } },
    { "tp=4", { 1, 1, 1, 4 } },
    { "dp=2,ulysses=2", { 2, 1, 2, 1 } },
    { "ring=2,tp=2", { 1, 2, 1, 2 } },
    { "ulysses=2,tp=2", { 1, 1, 2, 2 } },
    { "dp=4", { 4, 1, 1, 1 } },
    { "ring=2,ulysses=2", { 1, 2, 2, 1 } },
};
#define N_SEQUENCE (sizeof sequence / sizeof sequence[0])

static bool mesh_eq(const wf_mesh_degrees_t *a, const wf_mesh_degrees_t *b)
{
    return a->dp == b->dp && a->ring == b->ring && a->ulysses == b->ulysses &&
           a->tp == b->tp;
}

/* One reconfiguration from the main thread, with the epoch bounds kept. */
static bool reconfigure(shared_t *sh, wf_client_t *c, const named_mesh_t *nm,
                        double *ret_ms)
{
    uint64_t lo = atomic_load(&sh->epoch_lo), e = 0;
    atomic_store(&sh->epoch_hi, lo + 1);
    double t0 = now_s();
    wf_status_t st = wf_reconfigure(c, &nm->m, &e);
    *ret_ms = (now_s() - t0) * 1e3;
    CHECK(st == WF_OK, "reconfigure to %s: %s %s", nm->name, wf_status_name(st),
          wf_client_last_error(c));
    if (st != WF_OK) {
        atomic_store(&sh->epoch_hi, lo);
        return false;
    }
    CHECK(e == lo + 1, "reconfigure to %s: epoch %" PRIu64 " after %" PRIu64,
          nm->name, e, lo);
    atomic_store(&sh->epoch_lo, e);
    atomic_store(&sh->epoch_hi, e);
    return true;
}

typedef struct pair_arg {
    shared_t *sh;
    const named_mesh_t *nm;
    pthread_barrier_t *go;
    wf_status_t st;
    uint64_t epoch;
    uint64_t epoch_before;     /* epoch before the pair */
    bool overlapped;           /* the first was seen running */
    char error[256];
} pair_arg_t;

/* wait_for's condition: the pair's first reconfiguration is seen
 * draining (status reconfiguring: overlapped), or already done (the epoch
 * moved), or a status failed (st). */
typedef struct pair_wait {
    wf_client_t *c;
    uint64_t epoch_before;
    wf_status_t st;
    bool overlapped;
} pair_wait_t;

static bool pair_first_seen(void *arg)
{
    pair_wait_t *w = arg;
    wf_status_info_t si;
    w->st = wf_status(w->c, &si);
    if (w->st != WF_OK)
        return true;
    w->overlapped = si.reconfiguring != 0;
    return w->overlapped || si.epoch > w->epoch_before;
}

static void *pair_main(void *p)
{
    pair_arg_t *a = p;
    wf_client_t *c = NULL;
    a->st = wf_client_connect(a->sh->endpoint, (int)WAIT_EVENT_MS, &c);
    if (a->st == WF_OK)
        a->st = wf_hello(c, NULL); /* connected before the race starts */
    pthread_barrier_wait(a->go);
    /* Send the second reconfiguration once the first is seen running
     * (status reports reconfiguring while it drains the large job), or
     * seen done: the main thread sends it right after the barrier, so one
     * of the two comes about on its own. */
    a->overlapped = false;
    if (a->st == WF_OK) {
        pair_wait_t pw = { c, a->epoch_before, WF_OK, false };
        CHECK(wait_for(pair_first_seen, &pw, WAIT_EVENT_MS), "the pair's first "
              "reconfiguration was neither seen running nor done");
        a->st = pw.st;
        a->overlapped = pw.overlapped;
    }
    if (a->st == WF_OK)
        a->st = wf_reconfigure(c, &a->nm->m, &a->epoch);
    snprintf(a->error, sizeof a->error, "%s", c ? wf_client_last_error(c) : "");
    wf_client_destroy(&c);
    return NULL;
}

/* Two reconfigurations at once from two connections, while a large job
 * keeps the drain busy: exactly one succeeds, the other gets WF_E_BUSY.
 * Returns the mesh now in force (NULL if neither succeeded). */
static const named_mesh_t *concurrent_pair(shared_t *sh, wf_client_t *c,
                                           const named_mesh_t *x, const named_mesh_t *y,
                                           int *successes)
{
    /* the large job: ~4 GFLOP, so that the first reconfiguration's drain
     * usually lasts until the second arrives (checked strictly only when
     * it was seen so) */
    jcase_t big = { "big f32 8x512", 8, 512, 512, 8, 8, 64, F32, F32, 0, true, 0,
                    A2A, DEF, DEF, DEF, DEF };
    jbuf_t a;
    wf_job_t *job = NULL;
    uint64_t lo = atomic_load(&sh->epoch_lo);
    if (jbuf_init(&a, &big, 4242)) {
        wf_attention_opts_t o = opts_of(&big);
        wf_status_t st = wf_attention_submit(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &job);
        CHECK(st == WF_OK, "big job: %s", wf_status_name(st));
    }
    /* either may win, and if they did not overlap both would: the bound
     * covers two increments until the outcome is known */
    atomic_store(&sh->epoch_hi, lo + 2);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    pair_arg_t pa = { .sh = sh, .nm = y, .go = &go, .epoch_before = lo };
    pthread_t th;
    pthread_create(&th, NULL, pair_main, &pa);
    pthread_barrier_wait(&go);
    uint64_t ex = 0;
    wf_status_t sx = wf_reconfigure(c, &x->m, &ex);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&go);
    printf("  concurrent pair: %s -> %s (epoch %" PRIu64 "), %s -> %s (epoch %" PRIu64 ")%s%s\n",
           x->name, wf_status_name(sx), ex, y->name, wf_status_name(pa.st), pa.epoch,
           pa.st != WF_OK ? ": " : "", pa.st != WF_OK ? pa.error : "");
    /* Never both at once: either one is refused as busy, or they ran one
     * after the other (consecutive epochs). Which of the two the daemon
     * saw is decided below, once the large job says when it ran. */
    CHECK((sx == WF_OK && pa.st == WF_E_BUSY) || (sx == WF_E_BUSY && pa.st == WF_OK) ||
              (sx == WF_OK && pa.st == WF_OK && (pa.epoch == ex + 1 || ex == pa.epoch + 1)),
          "concurrent pair: %s (epoch %" PRIu64 ") and %s (epoch %" PRIu64 ")",
          wf_status_name(sx), ex, wf_status_name(pa.st), pa.epoch);
    const named_mesh_t *now = NULL;
    uint64_t e = lo;
    if (sx == WF_OK) {
        (*successes)++;
        now = x;
        e = ex > e ? ex : e;
    }
    if (pa.st == WF_OK) {
        (*successes)++;
        now = (now && ex > pa.epoch) ? x : y;
        e = pa.epoch > e ? pa.epoch : e;
    }
    atomic_store(&sh->epoch_lo, e);
    atomic_store(&sh->epoch_hi, e);
    if (job) {
        wf_status_t st = wf_job_wait(c, job, 60000);
        wf_job_result_t r;
        memset(&r, 0, sizeof r);
        wf_job_result(job, &r);
        CHECK(st == WF_OK, "big job: %s %s", wf_status_name(st), wf_job_error(job));
        CHECK(r.epoch >= lo && r.epoch <= e, "big job epoch %" PRIu64, r.epoch);
        /* The large job ran under the epoch before the pair: it was in
         * flight, so the first reconfiguration drained it for its whole
         * remaining time, and the second, sent once the first was seen
         * running, must have found it running. Queued behind the load
         * instead, it ran after, the drain was short and the two may
         * have run one after the other (the strict case is
         * test_reconfig_basic's, which holds a job on purpose). */
        if (st == WF_OK && r.epoch == lo && pa.overlapped)
            CHECK(sx == WF_OK && pa.st == WF_E_BUSY,
                  "concurrent pair during the large job's drain: %s and %s, want WF_OK "
                  "then WF_E_BUSY", wf_status_name(sx), wf_status_name(pa.st));
        else
            printf("  concurrent pair: the large job ran in epoch %" PRIu64 " (pair from %"
                   PRIu64 ")%s: not a strict overlap\n", r.epoch, lo,
                   pa.overlapped ? "" : ", the first never seen running");
        if (st == WF_OK) {
            double eo, el, to, tl;
            jbuf_errors(&a, &eo, &el);
            load_tolerances(&big, &to, &tl);
            CHECK(eo <= to && el <= tl, "big job: out error %.3e, lse error %.3e", eo, el);
        }
        wf_job_destroy(c, &job);
    }
    jbuf_free(&a);
    return now;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t0 = now_s();
    shared_t *sh = calloc(1, sizeof *sh);
    worker_t *workers = calloc(N_THREADS, sizeof *workers);
    if (!sh || !workers) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    char endpoint[96];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-test-%d-load.sock", (int)getpid());
    sh->endpoint = endpoint;
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->progress, NULL);

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    pid_t pid = start_daemon(argv[1], endpoint);
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (!wait_ready(endpoint)) {
        int ws;
        spawn_signal_reap(pid, -1, SIGKILL, SPAWN_STOP_MS, "weftd", &ws, NULL);
        fprintf(stderr, "FAIL: weftd did not answer hello\n");
        return 1;
    }

    wf_client_t *c = NULL;
    wf_status_info_t *s = calloc(1, sizeof *s);
    wf_status_t st = wf_client_connect(endpoint, 60000, &c);
    if (st != WF_OK || !s || (st = wf_status(c, s)) != WF_OK) {
        fprintf(stderr, "FAIL: status: %s\n", wf_status_name(st));
        int ws;
        spawn_signal_reap(pid, -1, SIGKILL, SPAWN_STOP_MS, "weftd", &ws, NULL);
        return 1;
    }
    uint64_t epoch0 = s->epoch;
    CHECK(epoch0 == 0, "a fresh daemon has epoch %" PRIu64, epoch0);
    wf_mesh_degrees_t start_mesh = s->mesh;
    printf("daemon starts with dp=%u ring=%u ulysses=%u tp=%u, epoch %" PRIu64 "\n",
           s->mesh.dp, s->mesh.ring, s->mesh.ulysses, s->mesh.tp, epoch0);
    atomic_store(&sh->epoch_lo, epoch0);
    atomic_store(&sh->epoch_hi, epoch0);

    for (int i = 0; i < N_THREADS; i++) {
        workers[i].sh = sh;
        workers[i].index = i;
        if (pthread_create(&workers[i].th, NULL, worker_main, &workers[i]) != 0) {
            CHECK(0, "pthread_create");
            workers[i].index = -1;
        }
    }

    uint64_t since[N_THREADS] = { 0 };
    int successes = 0;
    const named_mesh_t *current = NULL;
    double worst_ms = 0, total_ms = 0;
    for (size_t step = 0; step < ROUNDS * N_SEQUENCE; step++) {
        size_t i = step % N_SEQUENCE;
        if (step == 0 && mesh_eq(&start_mesh, &sequence[0].m))
            continue; /* every step must change the mesh */
        CHECK(wait_progress(sh, since, JOBS_PER_STEP),
              "client threads made no progress within %u ms before %s",
              wait_bound_ms(WAIT_EVENT_MS), sequence[i].name);
        double ms;
        if (reconfigure(sh, c, &sequence[i], &ms)) {
            successes++;
            current = &sequence[i];
            worst_ms = fmax(worst_ms, ms);
            total_ms += ms;
            printf("  -> %-18s epoch %" PRIu64 "  %.1f ms (under load, drain included)\n",
                   sequence[i].name, (uint64_t)atomic_load(&sh->epoch_lo), ms);
        }
        if (step == 3) {
            /* invalid: 3 does not divide 4 devices; nothing changes */
            wf_mesh_degrees_t bad = { 1, 3, 1, 1 };
            uint64_t e = 777;
            st = wf_reconfigure(c, &bad, &e);
            CHECK(st == WF_E_BAD_ARGUMENT && e == 777, "ring=3: %s", wf_status_name(st));
            printf("  ring=3 refused: %s: %s\n", wf_status_name(st), wf_client_last_error(c));
            memset(s, 0, sizeof *s);
            st = wf_status(c, s);
            CHECK(st == WF_OK && current && mesh_eq(&s->mesh, &current->m) &&
                  s->epoch == atomic_load(&sh->epoch_lo),
                  "after the refused mesh: %s, epoch %" PRIu64, wf_status_name(st), s->epoch);
        }
        if (step == 6) {
            CHECK(wait_progress(sh, since, JOBS_PER_STEP), "no progress before the pair");
            const named_mesh_t *now = concurrent_pair(sh, c, &sequence[2], &sequence[3],
                                                      &successes);
            if (now)
                current = now;
        }
    }
    CHECK(wait_progress(sh, since, JOBS_PER_STEP), "no progress after the last step");
    atomic_store(&sh->stop, true);
    uint64_t submitted = 0, completed = 0;
    for (int i = 0; i < N_THREADS; i++) {
        if (workers[i].index < 0)
            continue;
        pthread_join(workers[i].th, NULL);
        worker_t *w = &workers[i];
        CHECK(w->completed == w->submitted, "thread %d: %" PRIu64 " submitted, %"
              PRIu64 " completed", i, w->submitted, w->completed);
        printf("  thread %d: %" PRIu64 " jobs, %" PRIu64 " epochs seen, worst "
               "error/tolerance %.2f\n", i, w->completed, w->epochs_seen, w->worst_ratio);
        submitted += w->submitted;
        completed += w->completed;
    }

    memset(s, 0, sizeof *s);
    st = wf_status(c, s);
    CHECK(st == WF_OK, "final status: %s", wf_status_name(st));
    if (st == WF_OK) {
        CHECK(s->epoch == epoch0 + (uint64_t)successes, "final epoch %" PRIu64
              " after %d successful reconfigurations", s->epoch, successes);
        CHECK(current && mesh_eq(&s->mesh, &current->m), "final mesh dp=%u ring=%u "
              "ulysses=%u tp=%u", s->mesh.dp, s->mesh.ring, s->mesh.ulysses, s->mesh.tp);
        CHECK(s->reconfiguring == 0, "still reconfiguring");
        /* +1: the big job of the concurrent pair */
        CHECK(s->jobs_served == submitted + 1 && s->jobs_failed == 0,
              "daemon served %" PRIu64 " and failed %" PRIu64 " jobs, clients submitted %"
              PRIu64, s->jobs_served, s->jobs_failed, submitted + 1);
        printf("final: epoch %" PRIu64 " = %d successful reconfigurations; %" PRIu64
               " jobs submitted, %" PRIu64 " completed, daemon served %" PRIu64
               ", failed %" PRIu64 "\n", s->epoch, successes, submitted, completed,
               s->jobs_served, s->jobs_failed);
    }
    CHECK(successes >= 10 * ROUNDS, "only %d successful reconfigurations", successes);
    printf("reconfiguration under load: worst %.1f ms, mean %.1f ms\n", worst_ms,
           successes ? total_ms / successes : 0.0);
    free(s);
    wf_client_destroy(&c);
    char why[128];
    CHECK(stop_daemon(pid, SPAWN_STOP_MS, why, sizeof why), "%s", why);
    pthread_cond_destroy(&sh->progress);
    pthread_mutex_destroy(&sh->mu);
    printf("test_reconfig_load: %.1f s, %d checks, %d failure(s)\n", now_s() - t0,
           passed + failed, failed);
    free(workers);
    free(sh);
    return failed ? 1 : 0;
}
