/* test_nccl_stream.c — the NCCL comm backend itself (daemon/comm/
 * comm_nccl.c) without a GPU, on the stand-in CUDA runtime and NCCL of
 * tests/support/nccl_lib_standin.h, ranks in threads:
 *   - every op of commcheck (sizes, roots, in place, uneven, group calls,
 *     a ring of grouped send / recv, the mesh splits of a world of 8)
 *     gives the host backend's results with the collectives
 *     stream-ordered (each checker syncs before it reads);
 *   - a chain of N stream-ordered collectives makes no host wait: the
 *     rank's thread waits once, in wf_comm_sync, and each collective
 *     reads the previous one's output (stream order);
 *   - the abort watchdog: an asynchronous NCCL error, a wf_comm_abort
 *     from another thread (a job's cancel) and a lost node (the cluster's
 *     abort domain) each end a collective whose peer never comes, while
 *     its rank is blocked in a synchronize of the stream (the backend's
 *     synchronize at a job's end) or in wf_comm_sync; the operation
 *     timeout (op_timeout_ms) does the same, no earlier than configured;
 *     a world of the domain is revoked, not aborted (ncclCommRevoke when
 *     work is in flight, only marked when its stream is idle), and the
 *     survivor shrinks it;
 *   - the ranks of one communicator in one process share its world: a
 *     stop of one reaches the others' calls;
 *   - no NCCL call touches a communicator after its abort.
 * Waits are for events (the stand-in's "blocked" and "done" states),
 * never sleeps. */
#include "comm/comm_nccl.h"
#include "comm/comm_zmq.h"
#include "support/commcheck.h"
#include "support/nccl_lib_standin.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_fails;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            g_fails++;                                                       \
        }                                                                    \
    } while (0)

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- harness: one thread per rank ------------------------------------- */

typedef struct world_run world_run_t;
typedef int (*body_fn)(world_run_t *wr, int rank, wf_comm_t *c, void *stream);

struct world_run {
    int n;
    wf_nccl_id_t id;
    uint32_t op_timeout_ms;
    wf_comm_zmq_local_t *domain;  /* (optional) the cluster's abort domain */
    body_fn body;
    void *arg;
    wf_comm_t *comm[64];          /* published by each rank after init */
    void *stream[64];
    int fails[64];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;                    /* ranks past init */
    int done;                     /* bodies returned */
};

typedef struct {
    world_run_t *wr;
    int rank;
} rank_t;

static void *rank_main(void *arg)
{
    rank_t *r = arg;
    world_run_t *wr = r->wr;
    void *stream = wf_nclib_stream_new();
    wf_comm_nccl_opts_t o = {
        .device = r->rank,
        .stream = stream,
        .init_timeout_ms = 30000,
        .op_timeout_ms = wr->op_timeout_ms,
        .abort_domain = wr->domain,
    };
    wf_comm_t *c = NULL;
    wf_status_t st = wf_comm_nccl_init(&wr->id, wr->n, r->rank, &o, &c);
    int fails = st != WF_OK;
    if (st != WF_OK)
        fprintf(stderr, "rank %d: init: %s\n", r->rank, wf_status_str(st));
    pthread_mutex_lock(&wr->mu);
    wr->comm[r->rank] = c;
    wr->stream[r->rank] = stream;
    wr->ready++;
    pthread_cond_broadcast(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
    if (c) {
        fails += wr->body(wr, r->rank, c, stream);
        pthread_mutex_lock(&wr->mu);
        wr->done++;
        pthread_cond_broadcast(&wr->cv);
        /* every rank's handle stays alive until all bodies are done: a
         * body may abort or watch a peer's handle */
        while (wr->done < wr->n)
            pthread_cond_wait(&wr->cv, &wr->mu);
        pthread_mutex_unlock(&wr->mu);
        wf_comm_destroy(&c);
    } else {
        pthread_mutex_lock(&wr->mu);
        wr->done++;
        pthread_cond_broadcast(&wr->cv);
        pthread_mutex_unlock(&wr->mu);
    }
    wf_nclib_stream_destroy(stream);
    wr->fails[r->rank] = fails;
    return NULL;
}

static int run_world(int n, uint32_t op_timeout_ms, wf_comm_zmq_local_t *domain,
                     body_fn body, void *arg)
{
    world_run_t wr;
    memset(&wr, 0, sizeof wr);
    wr.n = n;
    wr.op_timeout_ms = op_timeout_ms;
    wr.domain = domain;
    wr.body = body;
    wr.arg = arg;
    pthread_mutex_init(&wr.mu, NULL);
    pthread_cond_init(&wr.cv, NULL);
    if (wf_comm_nccl_unique_id(&wr.id) != WF_OK)
        return 1;
    pthread_t t[64];
    rank_t r[64];
    for (int i = 0; i < n; i++) {
        r[i] = (rank_t){&wr, i};
        pthread_create(&t[i], NULL, rank_main, &r[i]);
    }
    int fails = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        fails += wr.fails[i];
    }
    pthread_cond_destroy(&wr.cv);
    pthread_mutex_destroy(&wr.mu);
    return fails;
}

/* Wait until rank `rank` of wr has published its handle. */
static wf_comm_t *peer_comm(world_run_t *wr, int rank, void **ret_stream)
{
    pthread_mutex_lock(&wr->mu);
    while (wr->ready < wr->n)
        pthread_cond_wait(&wr->cv, &wr->mu);
    wf_comm_t *c = wr->comm[rank];
    if (ret_stream)
        *ret_stream = wr->stream[rank];
    pthread_mutex_unlock(&wr->mu);
    return c;
}

/* ---- the operations, stream-ordered -------------------------------------- */

static int body_every_op(world_run_t *wr, int rank, wf_comm_t *c, void *stream)
{
    (void)rank, (void)stream;
    cc_shared_t *sh = wr->arg;
    int fails = cc_body_every_op(c, sh);
    fails += cc_body_ring_grouped(c, NULL);
    return fails;
}

static int body_split_mesh(world_run_t *wr, int rank, wf_comm_t *c, void *stream)
{
    (void)rank, (void)stream;
    return cc_body_split_mesh(c, wr->arg);
}

static void test_every_op(void)
{
    cc_shared_t sh = {.iters = 6, .allreduce_big = 3000};
    atomic_init(&sh.arrivals, 0);
    int f = run_world(4, 0, NULL, body_every_op, &sh);
    cc_shared_t sh8 = {.iters = 4, .allreduce_big = 1000};
    atomic_init(&sh8.arrivals, 0);
    f += run_world(8, 0, NULL, body_split_mesh, &sh8);
    CHECK(f == 0);
    printf("every op of commcheck on 4 ranks, mesh splits on 8: %d failure(s)\n", f);
}

/* ---- no host wait per call ------------------------------------------------ */

enum { CHAIN = 32, VEC = 4096 };

static int body_chain(world_run_t *wr, int rank, wf_comm_t *c, void *stream)
{
    (void)stream;
    int fails = 0, n = wr->n;
    float *x = malloc(VEC * sizeof *x), *g = malloc((size_t)n * VEC * sizeof *g);
    for (int k = 0; k < VEC; k++)
        x[k] = (float)(rank + 1);
    uint64_t ops0 = wf_nclib_counters().nccl_ops;
    wf_nclib_thread_reset();
    /* each in-place allreduce reads the previous one's output: only the
     * stream's order makes the result right */
    for (int i = 0; i < CHAIN; i++)
        EXPECT_OK(wf_comm_allreduce(c, x, x, VEC, WF_COMM_F32, WF_COMM_SUM));
    EXPECT_OK(wf_comm_allgather(c, x, g, VEC * sizeof *x));
    EXPECT_OK(wf_comm_broadcast(c, g, sizeof *g, n - 1));
    uint64_t before_sync = wf_nclib_thread_host_waits();
    EXPECT_OK(wf_comm_sync(c));
    uint64_t waits = wf_nclib_thread_host_waits();
    EXPECT(before_sync == 0);
    EXPECT(waits <= 1);
    EXPECT(wf_nclib_counters().nccl_ops - ops0 >= CHAIN + 2);
    /* sum of 1..n, then doubled n-fold (n = 2: x3, then x2 per step) */
    float e = (float)(n * (n + 1) / 2);
    for (int i = 1; i < CHAIN; i++)
        e *= (float)n;
    for (int k = 0; k < VEC; k++)
        EXPECT(x[k] == e);
    for (int j = 0; j < n; j++)
        EXPECT(g[(size_t)j * VEC + 1] == e);
    if (rank == 0)
        printf("%d stream-ordered collectives + wf_comm_sync: %llu host wait(s) "
               "before the sync, %llu with it (one per collective before)\n",
               CHAIN + 2, (unsigned long long)before_sync, (unsigned long long)waits);
    free(x);
    free(g);
    return fails;
}

static void test_no_host_wait(void)
{
    int f = run_world(2, 0, NULL, body_chain, NULL);
    CHECK(f == 0);
}

/* ---- the watchdog -------------------------------------------------------------- */

typedef enum {
    STOP_ASYNC_ERROR,  /* NCCL reports an asynchronous error */
    STOP_CANCEL,       /* another thread calls wf_comm_abort (a job's cancel) */
    STOP_NODE_LOSS,    /* the cluster's domain is aborted */
    STOP_TIMEOUT,      /* op_timeout_ms passes */
} stop_t;

typedef struct {
    stop_t how;
    int wait_in_comm;  /* rank 0 blocks in: 0 the stream's synchronize, 1 wf_comm_sync,
                        * 2 wf_comm_wait on an irecv (the side stream) */
    wf_comm_zmq_local_t *domain;
    uint64_t elapsed_ms;
    uint64_t wd_stops;  /* the watchdog's aborts / revokes during the run */
    int shrunk;         /* node loss: the survivor shrank the world after */
    atomic_int queued;  /* rank 0's call that queued the stuck work returned */
} stop_case_t;

/* Rank 0 queues an allreduce rank 1 never joins and blocks on it; rank 1
 * (another thread) stops it as `how` says once rank 0's stream is stuck. */
static int body_stop(world_run_t *wr, int rank, wf_comm_t *c, void *stream)
{
    stop_case_t *k = wr->arg;
    int fails = 0;
    if (rank == 0) {
        float v[4] = {1, 2, 3, 4};
        uint64_t a0 = wf_comm_nccl_watchdog_stops();
        uint64_t t0 = mono_ms();
        /* (the stop comes once the queuing call has returned: the block
         * is in the wait named, not in the call's own enqueue) */
        if (k->wait_in_comm == 2) {
            wf_comm_req_t *rq = NULL;
            EXPECT_OK(wf_comm_irecv(c, v, sizeof v, 1, &rq));
            atomic_store(&k->queued, 1);
            EXPECT(wf_comm_wait(c, &rq) == WF_E_ABORTED && rq == NULL);
        } else if (k->wait_in_comm) {
            EXPECT_OK(wf_comm_allreduce(c, v, v, 4, WF_COMM_F32, WF_COMM_SUM));
            atomic_store(&k->queued, 1);
            EXPECT(wf_comm_sync(c) == WF_E_ABORTED);
        } else {
            EXPECT_OK(wf_comm_allreduce(c, v, v, 4, WF_COMM_F32, WF_COMM_SUM));
            atomic_store(&k->queued, 1);
            wf_nclib_stream_sync(stream);   /* returns once NCCL is aborted */
            EXPECT(wf_comm_sync(c) == WF_E_ABORTED);
        }
        k->elapsed_ms = mono_ms() - t0;
        k->wd_stops = wf_comm_nccl_watchdog_stops() - a0;
        /* every later call refuses */
        EXPECT(wf_comm_allreduce(c, v, v, 4, WF_COMM_F32, WF_COMM_SUM) == WF_E_ABORTED);
        EXPECT(wf_comm_barrier(c) == WF_E_ABORTED);
        fails += cc_aborted_refusals(c);
        if (k->how == STOP_NODE_LOSS) {
            /* revoked, not aborted: the survivor shrinks it without the
             * lost rank, and the new world works */
            int lost[1] = {1};
            wf_comm_nccl_opts_t o = {.device = 0, .init_timeout_ms = 30000};
            wf_comm_t *nc = NULL;
            EXPECT_OK(wf_comm_nccl_shrink(c, lost, 1, &o, &nc));
            if (nc) {
                EXPECT(wf_comm_size(nc) == 1 && wf_comm_rank(nc) == 0);
                float w[4] = {1, 2, 3, 4};
                EXPECT_OK(wf_comm_allreduce(nc, w, w, 4, WF_COMM_F32, WF_COMM_SUM));
                EXPECT_OK(wf_comm_sync(nc));
                EXPECT(w[3] == 4.0f);
                k->shrunk = 1;
                wf_comm_destroy(&nc);
            }
        }
        return fails;
    }
    void *s0;
    wf_comm_t *c0 = peer_comm(wr, 0, &s0);
    if (k->wait_in_comm == 2)
        wf_nclib_wait_any_blocked();    /* rank 0's receive waits for us */
    else
        wf_nclib_wait_blocked(s0);      /* rank 0's collective waits for us */
    while (!atomic_load(&k->queued))    /* ... and its call returned */
        sched_yield();
    switch (k->how) {
    case STOP_ASYNC_ERROR:
        EXPECT(wf_nclib_set_async_error(0, 2 /* ncclSystemError */) >= 1);
        break;
    case STOP_CANCEL:
        wf_comm_abort(c0);
        break;
    case STOP_NODE_LOSS:
        wf_comm_zmq_local_abort(k->domain);
        break;
    case STOP_TIMEOUT:
        break;
    }
    /* the ranks of one communicator in one process share its world: once
     * rank 0's is stopped, this rank's calls refuse too (comm.h: an abort
     * reaches every handle of the world) */
    pthread_mutex_lock(&wr->mu);
    while (wr->done < 1)
        pthread_cond_wait(&wr->cv, &wr->mu);
    pthread_mutex_unlock(&wr->mu);
    float v = 0;
    EXPECT(wf_comm_allreduce(c, &v, &v, 1, WF_COMM_F32, WF_COMM_SUM) == WF_E_ABORTED);
    return fails;
}

static void stop_case(stop_t how, int wait_in_comm, const char *what)
{
    stop_case_t k = {how, wait_in_comm, NULL, 0, 0, 0, 0};
    uint32_t op_timeout = how == STOP_TIMEOUT ? 200 : 0;
    if (how == STOP_NODE_LOSS)
        CHECK(wf_comm_zmq_local_new(&k.domain) == WF_OK);
    wf_nclib_counters_t c0 = wf_nclib_counters();
    int f = run_world(2, op_timeout, k.domain, body_stop, &k);
    wf_nclib_counters_t c1 = wf_nclib_counters();
    CHECK(f == 0);
    CHECK(c1.use_after_abort == c0.use_after_abort);
    CHECK(c1.live_comms == c0.live_comms);
    if (how == STOP_TIMEOUT)
        CHECK(k.elapsed_ms >= op_timeout);  /* never before the configured timeout */
    /* a wait in wf_comm_sync may see the abort and abort NCCL itself
     * before the watchdog does; a stream synchronize only the watchdog
     * can end */
    if (!wait_in_comm)
        CHECK(k.wd_stops >= 1);
    /* a lost node: the blocked rank's world revoked (NCCL 2.28), kept */
    if (how == STOP_NODE_LOSS)
        CHECK(c1.revokes > c0.revokes && k.shrunk);
    printf("%s, rank blocked in %s: returned WF_E_ABORTED after %llu ms "
           "(watchdog interval %d ms%s), watchdog stops %llu (NCCL aborts %llu, "
           "revokes %llu)%s\n",
           what, wait_in_comm == 2 ? "wf_comm_wait (irecv)"
                 : wait_in_comm ? "wf_comm_sync" : "the stream's synchronize",
           (unsigned long long)k.elapsed_ms, WF_NCCL_WATCHDOG_MS,
           how == STOP_TIMEOUT ? ", op_timeout 200 ms" : "",
           (unsigned long long)k.wd_stops,
           (unsigned long long)(c1.aborts - c0.aborts),
           (unsigned long long)(c1.revokes - c0.revokes),
           k.shrunk ? ", then shrunk to the survivor" : "");
    wf_comm_zmq_local_unref(&k.domain);
}

/* A world of the cluster's domain whose streams are idle when the domain
 * is aborted is revoked, not ncclCommAbort-ed (kept for ncclCommShrink);
 * every call refuses. */
static int body_revoke(world_run_t *wr, int rank, wf_comm_t *c, void *stream)
{
    (void)stream;
    stop_case_t *k = wr->arg;
    int fails = 0;
    float v = 1;
    EXPECT_OK(wf_comm_allreduce(c, &v, &v, 1, WF_COMM_F32, WF_COMM_SUM));
    EXPECT_OK(wf_comm_sync(c));
    EXPECT(v == (float)wr->n);
    pthread_mutex_lock(&wr->mu);
    if (rank == 0) {
        /* both ranks are done with their collective: abort the domain */
        wr->ready++;
        while (wr->ready < 2 * wr->n)
            pthread_cond_wait(&wr->cv, &wr->mu);
        uint64_t a0 = wf_comm_nccl_watchdog_stops();
        uint64_t n0 = wf_nclib_counters().aborts;
        wf_comm_zmq_local_abort(k->domain);
        pthread_mutex_unlock(&wr->mu);
        EXPECT(wf_comm_sync(c) == WF_E_ABORTED);
        k->wd_stops = wf_comm_nccl_watchdog_stops() - a0;
        EXPECT(wf_nclib_counters().aborts == n0);   /* revoked, not aborted */
        pthread_mutex_lock(&wr->mu);
        wr->ready++;
        pthread_cond_broadcast(&wr->cv);
    } else {
        wr->ready++;
        pthread_cond_broadcast(&wr->cv);
        while (wr->ready < 2 * wr->n + 1)
            pthread_cond_wait(&wr->cv, &wr->mu);
    }
    pthread_mutex_unlock(&wr->mu);
    EXPECT(wf_comm_allreduce(c, &v, &v, 1, WF_COMM_F32, WF_COMM_SUM) == WF_E_ABORTED);
    return fails;
}

static void test_revoke(void)
{
    stop_case_t k = {STOP_NODE_LOSS, 0, NULL, 0, 0, 0, 0};
    CHECK(wf_comm_zmq_local_new(&k.domain) == WF_OK);
    wf_nclib_counters_t c0 = wf_nclib_counters();
    int f = run_world(2, 0, k.domain, body_revoke, &k);
    wf_nclib_counters_t c1 = wf_nclib_counters();
    CHECK(f == 0);
    CHECK(k.wd_stops == 0);
    CHECK(c1.use_after_abort == c0.use_after_abort);
    CHECK(c1.live_comms == c0.live_comms);   /* destroy aborts them */
    printf("a lost node with idle streams: world revoked (no ncclCommAbort "
           "until destroy), every call WF_E_ABORTED\n");
    wf_comm_zmq_local_unref(&k.domain);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_every_op();
    test_no_host_wait();
    stop_case(STOP_ASYNC_ERROR, 0, "asynchronous NCCL error");
    stop_case(STOP_CANCEL, 0, "wf_comm_abort from another thread (a job's cancel)");
    stop_case(STOP_CANCEL, 1, "wf_comm_abort from another thread (a job's cancel)");
    stop_case(STOP_CANCEL, 2, "wf_comm_abort from another thread (a job's cancel)");
    stop_case(STOP_NODE_LOSS, 0, "lost node (the cluster's abort domain)");
    stop_case(STOP_TIMEOUT, 0, "operation timeout");
    test_revoke();
    wf_nclib_counters_t c = wf_nclib_counters();
    CHECK(c.use_after_abort == 0);
    CHECK(c.live_comms == 0);
    printf("stand-in: %llu NCCL stream operations, %llu aborts, %llu uses after "
           "abort\n", (unsigned long long)c.nccl_ops, (unsigned long long)c.aborts,
           (unsigned long long)c.use_after_abort);
    if (g_fails) {
        fprintf(stderr, "test_nccl_stream: %d failure(s)\n", g_fails);
        return 1;
    }
    printf("test_nccl_stream: ok\n");
    return 0;
}
