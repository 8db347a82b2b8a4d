/* test_comm.c — unit test of comm.h on the host backend, with one real
 * thread per rank. Every op on group sizes 1, 2, 3, 4, 8 with uneven and
 * zero sizes, split sub-groups running concurrently, ring exchanges
 * (grouped and overlapped), a long random mix of ops, argument mismatch
 * verdicts, and abort while ranks are blocked. Every result is checked
 * byte for byte against what the rank must hold. WF_TEST_QUICK=1 shrinks
 * the loops (for valgrind). The op checkers and the bodies built from
 * them live in support/commcheck.c, shared with test_comm_zmq.c. */
#include "comm/comm.h"
#include "comm/comm_host.h"
#include "support/commcheck.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* cc_allreduce's largest count (elements) in this test. */
#define ALLREDUCE_BIG 4099

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------- */
/* harness                                                                 */

typedef int (*rank_fn)(wf_comm_t *c, void *arg);

typedef struct rank_thread {
    pthread_t tid;             /* the thread */
    wf_comm_host_world_t *w;   /* world to take a handle from */
    int rank;                  /* its rank */
    rank_fn fn;                /* body */
    void *arg;                 /* body's argument */
    int fails;                 /* body's result */
} rank_thread_t;

/* Ranks of the running world past wf_comm_host_init (the owner of an
 * abort case waits for all of them: a rank thread scheduled late on a
 * loaded machine must not meet the abort in its init). */
static atomic_int ranks_inited;
static int world_ranks; /* ranks of the running world */

static void *rank_main(void *p)
{
    rank_thread_t *t = p;
    wf_comm_t *c = NULL;
    wf_status_t st = wf_comm_host_init(t->w, t->rank, &c);
    atomic_fetch_add(&ranks_inited, 1);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: init failed: %d\n", t->rank, (int)st);
        t->fails = 1;
        return NULL;
    }
    t->fails = t->fn(c, t->arg);
    wf_comm_destroy(&c);
    if (c)
        t->fails++;
    return NULL;
}

/* Run fn on n ranks (one thread each); `owner`, when not NULL, runs in
 * this thread meanwhile (it may abort the world). Returns the failures. */
static int run_world(int n, rank_fn fn, void *arg,
                     void (*owner)(wf_comm_host_world_t *w, void *arg))
{
    wf_comm_host_world_t *w = NULL;
    if (wf_comm_host_world_new(n, &w) != WF_OK)
        return 1;
    rank_thread_t *t = calloc((size_t)n, sizeof *t);
    atomic_store(&ranks_inited, 0);
    world_ranks = n;
    for (int i = 0; i < n; i++) {
        t[i] = (rank_thread_t){.w = w, .rank = i, .fn = fn, .arg = arg};
        if (pthread_create(&t[i].tid, NULL, rank_main, &t[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    if (owner)
        owner(w, arg);
    int fails = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i].tid, NULL);
        fails += t[i].fails;
    }
    free(t);
    wf_comm_host_world_unref(&w);
    return fails;
}

/* ---------------------------------------------------------------------- */
/* mismatched arguments: every rank gets the same verdict                  */

static int body_mismatch(wf_comm_t *c, void *arg)
{
    (void)arg;
    int fails = 0, me = wf_comm_rank(c);
    uint8_t sbuf[64] = {0}, rbuf[64];
    size_t sc[8], sd[8], rc[8], rd[8];
    cc_mismatched_counts(c, sc, sd, rc, rd);
    EXPECT(wf_comm_alltoallv(c, sbuf, sc, sd, rbuf, rc, rd) ==
           WF_E_BAD_ARGUMENT);
    float f[4] = {0};
    EXPECT(wf_comm_allreduce(c, f, f, me == 1 ? 3 : 4, WF_COMM_F32,
                             WF_COMM_SUM) == WF_E_BAD_ARGUMENT);
    EXPECT(wf_comm_broadcast(c, sbuf, 4, me == 0 ? 1 : 0) == WF_E_BAD_ARGUMENT);
    /* p2p size mismatch: both sides fail */
    if (me < 2) {
        EXPECT(me == 0 ? wf_comm_send(c, sbuf, 4, 1) == WF_E_BAD_ARGUMENT
                       : wf_comm_recv(c, rbuf, 5, 0) == WF_E_BAD_ARGUMENT);
    }
    fails += cc_local_refusals(c);
    /* and the communicator is still in step afterwards */
    fails += cc_alltoallv(c, 11);
    return fails;
}

/* ---------------------------------------------------------------------- */
/* abort                                                                   */

enum abort_where { AB_BARRIER, AB_RECV, AB_ALLTOALL, AB_GROUP_RING, AB_SUBGROUP };

typedef struct abort_case {
    double t_abort;     /* when the abort was issued */
    double t_ret[64];   /* when each rank's call returned */
    wf_status_t st[64]; /* what it returned */
    int where;          /* enum abort_where */
    int by_rank;        /* 1: rank 0 aborts with wf_comm_abort; 0: owner */
} abort_case_t;

/* Let the other ranks block before the abort. This is the one place a
 * sleep is used: there is no event that says "a peer is now blocked
 * inside the call" (and the test passes whether or not they already are:
 * a call made after the abort must fail promptly too). */
static void pause_then_abort(abort_case_t *ac, wf_comm_t *c,
                             wf_comm_host_world_t *w)
{
    /* every rank past its init first (bounded: 10 s) */
    struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 10000 && atomic_load(&ranks_inited) < world_ranks; i++)
        nanosleep(&ms, NULL);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ac->t_abort = now_s();
    if (c)
        wf_comm_abort(c);
    else
        wf_comm_host_world_abort(w);
}

static int body_abort(wf_comm_t *c, void *arg)
{
    abort_case_t *ac = arg;
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t buf[4096];
    uint8_t *big = malloc((size_t)n * 4096);
    wf_status_t st = WF_OK;
    wf_comm_t *sub = NULL;
    if (ac->where == AB_SUBGROUP)
        EXPECT_OK(wf_comm_split(c, me % 2, me, &sub));
    /* ranks that take no part in the op, so that it blocks everywhere:
     * the aborting rank, the last rank when the owner aborts, and one
     * more for the sub-group case (both sub-groups must miss a rank) */
    int missing = ac->by_rank ? (me == 0 || (ac->where == AB_SUBGROUP &&
                                             me == n - 1))
                              : (ac->where != AB_RECV &&
                                 (me == n - 1 || (ac->where == AB_SUBGROUP &&
                                                  me == n - 2)));
    if (ac->by_rank && me == 0) {
        pause_then_abort(ac, c, NULL);
        st = WF_E_ABORTED;
    } else if (missing) {
        /* wait for the abort without sleeping: a receive from myself that
         * nobody sends blocks until the abort wakes it */
        st = wf_comm_recv(c, buf, 1, me);
    } else {
        switch (ac->where) {
        case AB_BARRIER: st = wf_comm_barrier(c); break;
        case AB_RECV: st = wf_comm_recv(c, buf, sizeof buf, (me + 1) % n); break;
        case AB_ALLTOALL:
            st = wf_comm_alltoall(c, big, big + (size_t)n * 2048, 2048);
            break;
        case AB_GROUP_RING:
            /* send next / recv prev match; recv from next never does */
            EXPECT_OK(wf_comm_group_start(c));
            EXPECT_OK(wf_comm_send(c, buf, 100, (me + 1) % n));
            EXPECT_OK(wf_comm_recv(c, big, 100, (me - 1 + n) % n));
            EXPECT_OK(wf_comm_recv(c, big + 100, 100, (me + 1) % n));
            st = wf_comm_group_end(c);
            break;
        case AB_SUBGROUP: st = wf_comm_barrier(sub); break;
        }
    }
    ac->t_ret[me] = now_s();
    ac->st[me] = st;
    fails += cc_aborted_refusals(c);
    wf_comm_destroy(&sub);
    free(big);
    return fails;
}

static void owner_abort(wf_comm_host_world_t *w, void *arg)
{
    abort_case_t *ac = arg;
    if (!ac->by_rank)
        pause_then_abort(ac, NULL, w);
}

static int test_abort(int where, int by_rank, int n, double *ret_worst)
{
    static const char *names[] = {"barrier", "recv", "all-to-all",
                                  "grouped ring", "sub-group barrier"};
    abort_case_t ac;
    memset(&ac, 0, sizeof ac);
    ac.where = where;
    ac.by_rank = by_rank;
    int fails = run_world(n, body_abort, &ac, owner_abort);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        if (ac.st[r] != WF_E_ABORTED) {
            fprintf(stderr, "abort %s: rank %d returned %d\n", names[where],
                    r, (int)ac.st[r]);
            fails++;
        }
        double dt = ac.t_ret[r] - ac.t_abort;
        if (dt > worst)
            worst = dt;
    }
    if (worst >= 1.0) {
        fprintf(stderr, "abort %s: a rank took %.3f s to return\n",
                names[where], worst);
        fails++;
    }
    printf("  abort in %-18s (%s, %d ranks): all ranks returned "
           "WF_E_ABORTED, slowest %.2f ms after the abort\n",
           names[where], by_rank ? "by a rank" : "by the owner", n,
           worst * 1e3);
    *ret_worst = worst > *ret_worst ? worst : *ret_worst;
    return fails;
}

/* ---------------------------------------------------------------------- */

int main(void)
{
    int quick = getenv("WF_TEST_QUICK") != NULL;
    int fails = 0;
    static const int sizes[] = {1, 2, 3, 4, 8};
    double t0 = now_s();

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cc_shared_t sh;
        memset(&sh, 0, sizeof sh);
        sh.iters = quick ? 6 : 24;
        sh.allreduce_big = ALLREDUCE_BIG;
        int f = run_world(sizes[i], cc_body_every_op, &sh, NULL);
        printf("  every op x %d iterations, %d ranks: %s\n", sh.iters,
               sizes[i], f ? "FAIL" : "ok");
        fails += f;
        int f2 = run_world(sizes[i], cc_body_ring_grouped, NULL, NULL);
        int f3 = run_world(sizes[i], cc_body_ring_overlap, NULL, NULL);
        printf("  ring exchange, %d ranks: grouped %s, isend/irecv overlapped "
               "%s\n",
               sizes[i], f2 ? "FAIL" : "ok", f3 ? "FAIL" : "ok");
        fails += f2 + f3;
    }

    {
        cc_shared_t sh;
        memset(&sh, 0, sizeof sh);
        sh.iters = quick ? 20 : 200;
        sh.allreduce_big = ALLREDUCE_BIG;
        int f = run_world(8, cc_body_split_mesh, &sh, NULL);
        printf("  split by mesh (dp=2,ring=2,ulysses=2), %d rounds in 3 "
               "sub-groups at once: %s\n",
               sh.iters, f ? "FAIL" : "ok");
        fails += f;
    }

    for (int n = 2; n <= 4; n++) {
        int f = run_world(n, body_mismatch, NULL, NULL);
        printf("  mismatched arguments, %d ranks: %s\n", n, f ? "FAIL" : "ok");
        fails += f;
    }

    {
        static const int mixn[] = {3, 4, 8};
        for (size_t i = 0; i < 3; i++) {
            cc_shared_t sh;
            memset(&sh, 0, sizeof sh);
            sh.iters = quick ? 150 : 2000;
            sh.allreduce_big = ALLREDUCE_BIG;
            double ts = now_s();
            int f = run_world(mixn[i], cc_body_mixed, &sh, NULL);
            printf("  %d mixed ops back-to-back, %d ranks: %s (%.2f s)\n",
                   sh.iters, mixn[i], f ? "FAIL" : "ok", now_s() - ts);
            fails += f;
        }
    }

    double worst = 0;
    for (int where = AB_BARRIER; where <= AB_SUBGROUP; where++) {
        fails += test_abort(where, 0, 4, &worst);
        fails += test_abort(where, 1, 4, &worst);
    }
    fails += test_abort(AB_ALLTOALL, 0, 8, &worst);

    printf("test_comm: %s (%d failures, %.2f s)\n", fails ? "FAILED" : "all passed",
           fails, now_s() - t0);
    return fails ? 1 : 0;
}
