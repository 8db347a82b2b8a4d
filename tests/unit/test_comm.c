/* test_comm.c — unit test of comm.h on the host backend, with one real
 * thread per rank. Every op on group sizes 1, 2, 3, 4, 8 with uneven and
 * zero sizes, split sub-groups running concurrently, ring exchanges
 * (grouped and overlapped), a long random mix of ops, argument mismatch
 * verdicts, and abort while ranks are blocked: the abort is issued only
 * once every rank that must block is asleep inside its call
 * (wf_comm_host_world_waiting), and since the host backend has no
 * timeout, WF_E_ABORTED can only come from the abort waking them. Every
 * result is checked byte for byte against what the rank must hold.
 * WF_TEST_QUICK=1 shrinks the loops (for valgrind). The op checkers and
 * the bodies built from them live in support/commcheck.c, shared with
 * test_comm_zmq.c; rank threads count their own failed expectations
 * (EXPECT) and main() CHECKs the sums. */
#include "comm/comm.h"
#include "comm/comm_host.h"
#include "support/check.h"
#include "support/commcheck.h"
#include "support/wait.h"

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

/* The world run_world is running (rank bodies of the abort cases read
 * its waiting count). */
static wf_comm_host_world_t *running_world;

static void *rank_main(void *p)
{
    rank_thread_t *t = p;
    wf_comm_t *c = NULL;
    wf_status_t st = wf_comm_host_init(t->w, t->rank, &c);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: init failed: %d\n", t->rank, (int)st);
        t->fails = 1;
        wf_comm_host_world_abort(t->w); /* nobody waits for me */
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
    running_world = w;
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
    running_world = NULL;
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
    int where;              /* enum abort_where */
    int by_rank;            /* 1: rank 0 aborts with wf_comm_abort; 0: owner */
    int n;                  /* ranks of the world */
    int expect;             /* ranks that must block: n, or n - 1 by a rank */
    atomic_int entered;     /* ranks about to make the call that blocks */
    atomic_int returned;    /* ranks whose call returned */
    int blocked;            /* 1: the aborter saw them all asleep in it */
    int seen_entered;       /* at the abort: entered */
    int seen_waiting;       /* and wf_comm_host_world_waiting */
    wf_status_t st[64];     /* what each rank's call returned */
} abort_case_t;

/* Every rank that must block has set its flag and is asleep inside its
 * call. A rank counts in `entered` only past everything before that call
 * (init, split), so `waiting` can then count nothing but the calls under
 * test (each blocked rank counts once). */
static bool all_blocked(void *p)
{
    abort_case_t *ac = p;
    return atomic_load(&ac->entered) == ac->expect &&
           wf_comm_host_world_waiting(running_world) == ac->expect;
}

/* Abort once every rank that must block is blocked (or the bound
 * passed: then abort anyway, so the ranks return, and fail). */
static void abort_when_blocked(abort_case_t *ac, wf_comm_t *c,
                               wf_comm_host_world_t *w)
{
    ac->blocked = wait_for(all_blocked, ac, WAIT_EVENT_MS);
    ac->seen_entered = atomic_load(&ac->entered);
    ac->seen_waiting = wf_comm_host_world_waiting(running_world);
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
        abort_when_blocked(ac, c, NULL);
        st = WF_E_ABORTED;
    } else if (missing) {
        /* a receive from myself that nobody sends: blocked until the
         * abort wakes it */
        atomic_fetch_add(&ac->entered, 1);
        st = wf_comm_recv(c, buf, 1, me);
    } else {
        atomic_fetch_add(&ac->entered, 1);
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
    ac->st[me] = st;
    atomic_fetch_add(&ac->returned, 1);
    fails += cc_aborted_refusals(c);
    wf_comm_destroy(&sub);
    free(big);
    return fails;
}

static bool all_returned(void *p)
{
    abort_case_t *ac = p;
    return atomic_load(&ac->returned) == ac->n;
}

/* The owner: abort (unless rank 0 does), then wait for every rank's call
 * to return; the join would hang on a rank the abort did not wake, so a
 * rank still blocked at the bound ends the test. The bound covers the
 * wait for the blocked state and the wake-up, each WAIT_EVENT_MS. */
static void owner_abort(wf_comm_host_world_t *w, void *arg)
{
    abort_case_t *ac = arg;
    if (!ac->by_rank)
        abort_when_blocked(ac, NULL, w);
    if (!wait_for(all_returned, ac, 2 * WAIT_EVENT_MS)) {
        fprintf(stderr, "FAIL abort: %d of %d ranks still blocked after the "
                "abort\n", ac->n - atomic_load(&ac->returned), ac->n);
        exit(1);
    }
}

static void test_abort(int where, int by_rank, int n)
{
    static const char *names[] = {"barrier", "recv", "all-to-all",
                                  "grouped ring", "sub-group barrier"};
    abort_case_t *ac = calloc(1, sizeof *ac);
    if (!ac) {
        CHECK(0, "out of memory");
        return;
    }
    ac->where = where;
    ac->by_rank = by_rank;
    ac->expect = by_rank ? n - 1 : n;
    atomic_init(&ac->entered, 0);
    atomic_init(&ac->returned, 0);
    ac->n = n;
    int fails = run_world(n, body_abort, ac, owner_abort);
    const char *who = by_rank ? "by a rank" : "by the owner";
    CHECK(fails == 0, "abort in %s (%s, %d ranks): %d failed expectations",
          names[where], who, n, fails);
    CHECK(ac->blocked, "abort in %s (%s, %d ranks): the ranks were not all asleep "
          "in their calls before the abort (%d of %d entered, %d waiting)",
          names[where], who, n, ac->seen_entered, ac->expect, ac->seen_waiting);
    int aborted = 0;
    for (int r = 0; r < n; r++) {
        CHECK(ac->st[r] == WF_E_ABORTED, "abort in %s (%s): rank %d returned %d",
              names[where], who, r, (int)ac->st[r]);
        aborted += ac->st[r] == WF_E_ABORTED;
    }
    printf("  abort in %-18s (%s, %d ranks): %d rank(s) asleep in the call, "
           "then %d of %d returned WF_E_ABORTED\n",
           names[where], who, n, ac->seen_waiting, aborted, n);
    free(ac);
}

/* ---------------------------------------------------------------------- */

int main(void)
{
    int quick = getenv("WF_TEST_QUICK") != NULL;
    static const int sizes[] = {1, 2, 3, 4, 8};
    double t0 = now_s();

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cc_shared_t sh;
        memset(&sh, 0, sizeof sh);
        sh.iters = quick ? 6 : 24;
        sh.allreduce_big = ALLREDUCE_BIG;
        int f = run_world(sizes[i], cc_body_every_op, &sh, NULL);
        CHECK(f == 0, "every op, %d ranks: %d failed expectations", sizes[i], f);
        printf("  every op x %d iterations, %d ranks: %s\n", sh.iters,
               sizes[i], f ? "FAIL" : "ok");
        int f2 = run_world(sizes[i], cc_body_ring_grouped, NULL, NULL);
        int f3 = run_world(sizes[i], cc_body_ring_overlap, NULL, NULL);
        CHECK(f2 == 0, "ring exchange grouped, %d ranks: %d failed expectations",
              sizes[i], f2);
        CHECK(f3 == 0, "ring exchange overlapped, %d ranks: %d failed expectations",
              sizes[i], f3);
        printf("  ring exchange, %d ranks: grouped %s, isend/irecv overlapped "
               "%s\n",
               sizes[i], f2 ? "FAIL" : "ok", f3 ? "FAIL" : "ok");
    }

    {
        cc_shared_t sh;
        memset(&sh, 0, sizeof sh);
        sh.iters = quick ? 20 : 200;
        sh.allreduce_big = ALLREDUCE_BIG;
        int f = run_world(8, cc_body_split_mesh, &sh, NULL);
        CHECK(f == 0, "split by mesh: %d failed expectations", f);
        printf("  split by mesh (dp=2,ring=2,ulysses=2), %d rounds in 3 "
               "sub-groups at once: %s\n",
               sh.iters, f ? "FAIL" : "ok");
    }

    for (int n = 2; n <= 4; n++) {
        int f = run_world(n, body_mismatch, NULL, NULL);
        CHECK(f == 0, "mismatched arguments, %d ranks: %d failed expectations", n, f);
        printf("  mismatched arguments, %d ranks: %s\n", n, f ? "FAIL" : "ok");
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
            CHECK(f == 0, "mixed ops, %d ranks: %d failed expectations", mixn[i], f);
            printf("  %d mixed ops back-to-back, %d ranks: %s (%.2f s)\n",
                   sh.iters, mixn[i], f ? "FAIL" : "ok", now_s() - ts);
        }
    }

    for (int where = AB_BARRIER; where <= AB_SUBGROUP; where++) {
        test_abort(where, 0, 4);
        test_abort(where, 1, 4);
    }
    test_abort(AB_ALLTOALL, 0, 8);

    printf("test_comm: %d passed, %d failed (%.2f s)\n", (int)passed, (int)failed,
           now_s() - t0);
    return failed ? 1 : 0;
}
