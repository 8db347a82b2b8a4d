/* test_comm.c — unit test of comm.h on the host backend, with one real
 * thread per rank. Every op on group sizes 1, 2, 3, 4, 8 with uneven and
 * zero sizes, split sub-groups running concurrently, ring exchanges
 * (grouped and overlapped), a long random mix of ops, argument mismatch
 * verdicts, and abort while ranks are blocked. Every result is checked
 * byte for byte against what the rank must hold. WF_TEST_QUICK=1 shrinks
 * the loops (for valgrind). */
#include "comm.h"
#include "comm_host.h"
#include "mesh.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Count a failed expectation in the enclosing function's `fails`. */
#define EXPECT(cond)                                                         \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__,          \
                    __LINE__, #cond);                                        \
            fails++;                                                         \
        }                                                                    \
    } while (0)

#define EXPECT_OK(expr)                                                      \
    do {                                                                     \
        wf_status_t st_ = (expr);                                            \
        if (st_ != WF_OK) {                                                  \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__,   \
                    #expr, (int)st_);                                        \
            fails++;                                                         \
        }                                                                    \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Same value on every rank for the same arguments. */
static uint64_t rnd(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

/* Byte k of the message from src to dst in iteration it. */
static uint8_t pat(int src, int dst, int it, size_t k)
{
    return (uint8_t)(src * 131 + dst * 31 + it * 7 + (int)(k % 251) * 13 + 1);
}

/* Uneven per-pair byte count in [0, 40], zero about a quarter of the time. */
static size_t cnt(int it, int src, int dst, int salt)
{
    uint64_t r = rnd((uint64_t)it, (uint64_t)src, (uint64_t)dst,
                     (uint64_t)salt);
    return (r & 3) == 0 ? 0 : (size_t)((r >> 8) % 41);
}

#define GAP 3     /* bytes left between blocks to catch stray writes */
#define SENT 0xEE /* sentinel value of untouched bytes */

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

static void *rank_main(void *p)
{
    rank_thread_t *t = p;
    wf_comm_t *c = NULL;
    wf_status_t st = wf_comm_host_init(t->w, t->rank, &c);
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
/* one checked instance of each op; `it` varies sizes, roots and data      */

static int op_allgather(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t bytes = (size_t)((it * 5) % 17);
    uint8_t *send = malloc(bytes + 1), *recv = malloc((size_t)n * bytes + 1);
    for (size_t k = 0; k < bytes; k++)
        send[k] = pat(me, 0, it, k);
    int inplace = it % 2;
    if (inplace) /* sendbuf is my block of recvbuf */
        memcpy(recv + (size_t)me * bytes, send, bytes);
    EXPECT_OK(wf_comm_allgather(c, inplace ? recv + (size_t)me * bytes : send,
                                recv, bytes));
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            EXPECT(recv[(size_t)j * bytes + k] == pat(j, 0, it, k));
    free(send);
    free(recv);
    return fails;
}

static int op_allgatherv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t counts[64], displs[64], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = (it % 7 == 3) ? 0 : cnt(it, j, 0, 1); /* all-zero too */
        displs[j] = total;
        total += counts[j] + GAP;
    }
    uint8_t *send = malloc(counts[me] + 1), *recv = malloc(total + 1);
    for (size_t k = 0; k < counts[me]; k++)
        send[k] = pat(me, 0, it, k);
    memset(recv, SENT, total);
    EXPECT_OK(wf_comm_allgatherv(c, send, counts[me], recv, counts, displs));
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < counts[j]; k++)
            EXPECT(recv[displs[j] + k] == pat(j, 0, it, k));
        for (size_t k = 0; k < GAP; k++)
            EXPECT(recv[displs[j] + counts[j] + k] == SENT);
    }
    free(send);
    free(recv);
    return fails;
}

static int op_alltoall(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t bytes = (size_t)(it % 9);
    uint8_t *send = malloc((size_t)n * bytes + 1);
    uint8_t *recv = malloc((size_t)n * bytes + 1);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            send[(size_t)j * bytes + k] = pat(me, j, it, k);
    EXPECT_OK(wf_comm_alltoall(c, send, recv, bytes));
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            EXPECT(recv[(size_t)j * bytes + k] == pat(j, me, it, k));
    free(send);
    free(recv);
    return fails;
}

static int op_alltoallv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t sc[64], sd[64], rc[64], rd[64], stot = 0, rtot = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = cnt(it, me, j, 2);
        rc[j] = cnt(it, j, me, 2);
    }
    /* send blocks in reverse peer order, to exercise displacements */
    for (int j = n - 1; j >= 0; j--) {
        sd[j] = stot;
        stot += sc[j] + GAP;
    }
    for (int j = 0; j < n; j++) {
        rd[j] = rtot;
        rtot += rc[j] + GAP;
    }
    uint8_t *send = malloc(stot + 1), *recv = malloc(rtot + 1);
    memset(send, SENT, stot);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            send[sd[j] + k] = pat(me, j, it, k);
    memset(recv, SENT, rtot);
    EXPECT_OK(wf_comm_alltoallv(c, send, sc, sd, recv, rc, rd));
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < rc[j]; k++)
            EXPECT(recv[rd[j] + k] == pat(j, me, it, k));
        for (size_t k = 0; k < GAP; k++)
            EXPECT(recv[rd[j] + rc[j] + k] == SENT);
    }
    free(send);
    free(recv);
    return fails;
}

static int op_allreduce(wf_comm_t *c, int it)
{
    static const size_t counts[] = {0, 1, 2, 7, 1001, 4099};
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t count = counts[it % 6];
    int inplace = (it / 6) % 2;
    /* integer values: every partial sum is exact in f32 and f64 */
    float *fs = malloc(count * sizeof *fs + 4), *fr = malloc(count * sizeof *fr + 4);
    double *ds = malloc(count * sizeof *ds + 8), *dr = malloc(count * sizeof *dr + 8);
    for (size_t k = 0; k < count; k++) {
        fs[k] = (float)(me * 1000 + (int)(k % 997) + it);
        ds[k] = (double)me * 1e9 + (double)k + it;
    }
    if (inplace) {
        memcpy(fr, fs, count * sizeof *fs);
        memcpy(dr, ds, count * sizeof *ds);
    }
    EXPECT_OK(wf_comm_allreduce(c, inplace ? fr : fs, fr, count, WF_COMM_F32,
                                WF_COMM_SUM));
    EXPECT_OK(wf_comm_allreduce(c, inplace ? dr : ds, dr, count, WF_COMM_F64,
                                WF_COMM_SUM));
    for (size_t k = 0; k < count; k++) {
        float fe = 0;
        double de = 0;
        for (int j = 0; j < n; j++) {
            fe += (float)(j * 1000 + (int)(k % 997) + it);
            de += (double)j * 1e9 + (double)k + it;
        }
        EXPECT(fr[k] == fe);
        EXPECT(dr[k] == de);
    }
    free(fs);
    free(fr);
    free(ds);
    free(dr);
    return fails;
}

static int op_broadcast(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    int root = it % n;
    size_t bytes = (size_t)((1 + it * 3) % 50);
    uint8_t *buf = malloc(bytes + 1);
    for (size_t k = 0; k < bytes; k++)
        buf[k] = me == root ? pat(root, 9, it, k) : SENT;
    EXPECT_OK(wf_comm_broadcast(c, buf, bytes, root));
    for (size_t k = 0; k < bytes; k++)
        EXPECT(buf[k] == pat(root, 9, it, k));
    free(buf);
    return fails;
}

static int op_scatterv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    int root = (it + 1) % n;
    size_t counts[64], displs[64], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = cnt(it, root, j, 3);
        displs[j] = total;
        total += counts[j] + GAP;
    }
    uint8_t *send = NULL;
    if (me == root) {
        send = malloc(total + 1);
        for (int j = 0; j < n; j++)
            for (size_t k = 0; k < counts[j]; k++)
                send[displs[j] + k] = pat(root, j, it, k);
    }
    uint8_t *recv = malloc(counts[me] + GAP);
    memset(recv, SENT, counts[me] + GAP);
    EXPECT_OK(wf_comm_scatterv(c, send, me == root ? counts : NULL,
                               me == root ? displs : NULL, recv, counts[me],
                               root));
    for (size_t k = 0; k < counts[me]; k++)
        EXPECT(recv[k] == pat(root, me, it, k));
    for (size_t k = 0; k < GAP; k++)
        EXPECT(recv[counts[me] + k] == SENT);
    free(send);
    free(recv);
    return fails;
}

static int op_gatherv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    int root = (it + 2) % n;
    size_t counts[64], displs[64], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = cnt(it, j, root, 4);
        displs[j] = total;
        total += counts[j] + GAP;
    }
    uint8_t *send = malloc(counts[me] + 1);
    for (size_t k = 0; k < counts[me]; k++)
        send[k] = pat(me, root, it, k);
    uint8_t *recv = NULL;
    if (me == root) {
        recv = malloc(total + 1);
        memset(recv, SENT, total);
    }
    EXPECT_OK(wf_comm_gatherv(c, send, counts[me], recv,
                              me == root ? counts : NULL,
                              me == root ? displs : NULL, root));
    if (me == root) {
        for (int j = 0; j < n; j++) {
            for (size_t k = 0; k < counts[j]; k++)
                EXPECT(recv[displs[j] + k] == pat(j, root, it, k));
            for (size_t k = 0; k < GAP; k++)
                EXPECT(recv[displs[j] + counts[j] + k] == SENT);
        }
    }
    free(send);
    free(recv);
    return fails;
}

/* Shared by the ranks of one world: counts barrier arrivals. */
typedef struct shared {
    atomic_int arrivals; /* barrier test */
    int iters;           /* loop length of the body */
    double t_abort;      /* abort tests: when the abort was issued */
    double t_ret[64];    /* abort tests: when each rank's call returned */
    wf_status_t st[64];  /* abort tests: what it returned */
} shared_t;

static int op_barrier(wf_comm_t *c, shared_t *sh, int *round)
{
    int fails = 0, n = wf_comm_size(c);
    atomic_fetch_add(&sh->arrivals, 1);
    EXPECT_OK(wf_comm_barrier(c));
    /* nobody passes barrier r before all n made their r-th arrival, and
     * nobody makes an arrival r+2 before passing barrier r+1 */
    int a = atomic_load(&sh->arrivals);
    (*round)++;
    EXPECT(a >= n * *round && a <= n * (*round + 1));
    return fails;
}

/* Blocking send / recv between neighbours, and self send / recv. */
static int op_sendrecv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t bytes = (size_t)(it % 5) * 7;
    uint8_t out[64], in[64];
    for (size_t k = 0; k < bytes; k++)
        out[k] = pat(me, me ^ 1, it, k);
    /* pairs (0,1), (2,3), ...: even sends first, odd receives first */
    int peer = me ^ 1;
    if (peer < n) {
        if (me % 2 == 0) {
            EXPECT_OK(wf_comm_send(c, out, bytes, peer));
            EXPECT_OK(wf_comm_recv(c, in, bytes, peer));
        } else {
            EXPECT_OK(wf_comm_recv(c, in, bytes, peer));
            EXPECT_OK(wf_comm_send(c, out, bytes, peer));
        }
        for (size_t k = 0; k < bytes; k++)
            EXPECT(in[k] == pat(peer, me, it, k));
    }
    /* to myself inside a group call */
    memset(in, 0, sizeof in);
    EXPECT_OK(wf_comm_group_start(c));
    EXPECT_OK(wf_comm_recv(c, in, bytes, me));
    EXPECT_OK(wf_comm_send(c, out, bytes, me));
    EXPECT_OK(wf_comm_group_end(c));
    for (size_t k = 0; k < bytes; k++)
        EXPECT(in[k] == out[k]);
    return fails;
}

enum { OP_N = 10 };

static int run_op(wf_comm_t *c, shared_t *sh, int op, int it, int *round)
{
    switch (op) {
    case 0: return op_allgather(c, it);
    case 1: return op_allgatherv(c, it);
    case 2: return op_alltoall(c, it);
    case 3: return op_alltoallv(c, it);
    case 4: return op_allreduce(c, it);
    case 5: return op_broadcast(c, it);
    case 6: return op_scatterv(c, it);
    case 7: return op_gatherv(c, it);
    case 8: return op_barrier(c, sh, round);
    default: return op_sendrecv(c, it);
    }
}

/* Every op, sh->iters times, each with varying sizes. */
static int body_every_op(wf_comm_t *c, void *arg)
{
    shared_t *sh = arg;
    int fails = 0, round = 0;
    for (int it = 0; it < sh->iters; it++)
        for (int op = 0; op < OP_N; op++)
            fails += run_op(c, sh, op, it, &round);
    return fails;
}

/* A random sequence of ops, the same on every rank (shared seed). */
static int body_mixed(wf_comm_t *c, void *arg)
{
    shared_t *sh = arg;
    int fails = 0, round = 0;
    for (int i = 0; i < sh->iters; i++) {
        int op = (int)(rnd(77, (uint64_t)i, 0, 0) % OP_N);
        fails += run_op(c, sh, op, i, &round);
    }
    return fails;
}

/* ---------------------------------------------------------------------- */
/* ring exchange                                                           */

#define SHARD 1000

static int check_shard(const uint8_t *buf, int owner)
{
    int fails = 0;
    for (size_t k = 0; k < SHARD; k++)
        if (buf[k] != pat(owner, 0, 0, k)) {
            fails++;
            break;
        }
    return fails;
}

/* n steps of send-to-next / recv-from-prev in group calls: after step s
 * the buffer holds the shard of rank (me - s - 1) mod n. */
static int body_ring_grouped(wf_comm_t *c, void *arg)
{
    (void)arg;
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t *cur = malloc(SHARD), *nxt = malloc(SHARD);
    for (size_t k = 0; k < SHARD; k++)
        cur[k] = pat(me, 0, 0, k);
    for (int round = 0; round < 3; round++) {
        for (int s = 0; s < n; s++) {
            EXPECT_OK(wf_comm_group_start(c));
            EXPECT_OK(wf_comm_send(c, cur, SHARD, (me + 1) % n));
            EXPECT_OK(wf_comm_recv(c, nxt, SHARD, (me - 1 + n) % n));
            EXPECT_OK(wf_comm_group_end(c));
            uint8_t *t = cur;
            cur = nxt;
            nxt = t;
            int owner = ((me - s - 1) % n + n) % n;
            EXPECT(check_shard(cur, owner) == 0);
        }
        EXPECT(check_shard(cur, me) == 0);
    }
    free(cur);
    free(nxt);
    return fails;
}

/* Ring attention's "alltoall" rotation: the next shard's transfer is in
 * flight (isend / irecv) while this step "computes" on the current one. */
static int body_ring_overlap(wf_comm_t *c, void *arg)
{
    (void)arg;
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t *cur = malloc(SHARD), *nxt = malloc(SHARD);
    for (size_t k = 0; k < SHARD; k++)
        cur[k] = pat(me, 0, 0, k);
    for (int s = 0; s < n; s++) {
        wf_comm_req_t *rr = NULL, *sr = NULL;
        int last = s == n - 1;
        if (!last) {
            EXPECT_OK(wf_comm_irecv(c, nxt, SHARD, (me - 1 + n) % n, &rr));
            EXPECT_OK(wf_comm_isend(c, cur, SHARD, (me + 1) % n, &sr));
        }
        /* "compute" on cur while the transfer runs: step s uses the shard
         * of (me - s) mod n, as ring attention uses chunk (rank + i) */
        int owner = ((me - s) % n + n) % n;
        EXPECT(check_shard(cur, owner) == 0);
        EXPECT_OK(wf_comm_wait(c, &rr));
        EXPECT_OK(wf_comm_wait(c, &sr));
        EXPECT(rr == NULL && sr == NULL);
        uint8_t *t = cur;
        cur = nxt;
        nxt = t;
    }
    /* wf_comm_test: a receive from myself is pending until I send */
    uint8_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {0};
    wf_comm_req_t *rr = NULL, *sr = NULL;
    int done = -1;
    EXPECT_OK(wf_comm_irecv(c, b, sizeof b, me, &rr));
    EXPECT_OK(wf_comm_test(c, &rr, &done));
    EXPECT(done == 0 && rr != NULL);
    EXPECT_OK(wf_comm_isend(c, a, sizeof a, me, &sr));
    EXPECT_OK(wf_comm_test(c, &rr, &done)); /* the isend copied it */
    EXPECT(done == 1 && rr == NULL && memcmp(a, b, sizeof a) == 0);
    EXPECT_OK(wf_comm_wait(c, &sr));
    free(cur);
    free(nxt);
    return fails;
}

/* ---------------------------------------------------------------------- */
/* split                                                                   */

/* World 8 as dp=2, ring=2, ulysses=2: split along ulysses, ring and seq
 * with the mesh's colors; check each sub-group's members (by gathering
 * world ranks) and run interleaved collectives in all of them. */
static int body_split_mesh(wf_comm_t *c, void *arg)
{
    shared_t *sh = arg;
    int fails = 0, me = wf_comm_rank(c);
    wf_mesh_t m;
    wf_mesh_degrees_t d = {2, 2, 2, 1};
    if (wf_mesh_init(&m, &d, wf_comm_size(c), NULL, 0) != WF_OK)
        return 1;
    static const wf_mesh_dim_t dims[3] = {WF_MESH_DIM_ULYSSES,
                                          WF_MESH_DIM_RING, WF_MESH_DIM_SEQ};
    wf_comm_t *sub[3] = {NULL, NULL, NULL};
    int members[3][8], size[3], index[3];
    for (int i = 0; i < 3; i++) {
        int color, key;
        EXPECT_OK(wf_mesh_color(&m, dims[i], me, &color, &key));
        EXPECT_OK(wf_comm_split(c, color, key, &sub[i]));
        EXPECT_OK(wf_mesh_group(&m, dims[i], me, members[i], 8, &size[i],
                                &index[i]));
        if (!sub[i])
            return fails + 1;
        EXPECT(wf_comm_size(sub[i]) == size[i]);
        EXPECT(wf_comm_rank(sub[i]) == index[i]);
        int got[8];
        EXPECT_OK(wf_comm_allgather(sub[i], &me, got, sizeof me));
        for (int j = 0; j < size[i]; j++)
            EXPECT(got[j] == members[i][j]);
    }
    /* the groups run at once and independently. As with NCCL, ranks that
     * share groups must use them in the same order; the two dp replicas
     * share none, so they use them in different orders (a rendezvous
     * shared between groups would deadlock here). */
    for (int it = 0; it < sh->iters; it++) {
        for (int k = 0; k < 3; k++) {
            int i = (me / 4 == 0 ? k + it : 2 - k + it) % 3;
            int gfails = 0;
            switch ((it + i) % 4) {
            case 0: {
                float v = (float)(me + 1), s = 0, e = 0;
                EXPECT_OK(wf_comm_allreduce(sub[i], &v, &s, 1, WF_COMM_F32,
                                            WF_COMM_SUM));
                for (int j = 0; j < size[i]; j++)
                    e += (float)(members[i][j] + 1);
                EXPECT(s == e);
                break;
            }
            case 1: gfails = op_alltoallv(sub[i], it); break;
            case 2: gfails = op_allgatherv(sub[i], it); break;
            default: gfails = op_gatherv(sub[i], it); break;
            }
            fails += gfails;
        }
    }
    /* a split of a split, key-reversed: ranks come out in reverse */
    wf_comm_t *rev = NULL;
    EXPECT_OK(wf_comm_split(sub[2], 0, -wf_comm_rank(sub[2]), &rev));
    if (rev) {
        EXPECT(wf_comm_rank(rev) == size[2] - 1 - index[2]);
        fails += op_alltoallv(rev, 5);
        wf_comm_destroy(&rev);
    }
    /* NOCOLOR: odd ranks join nothing, even ranks form a group of 4 */
    wf_comm_t *even = NULL;
    EXPECT_OK(wf_comm_split(c, me % 2 ? WF_COMM_SPLIT_NOCOLOR : 7, me, &even));
    if (me % 2) {
        EXPECT(even == NULL);
    } else {
        EXPECT(even && wf_comm_size(even) == 4 && wf_comm_rank(even) == me / 2);
        if (even)
            fails += op_allreduce(even, 4);
        wf_comm_destroy(&even);
    }
    for (int i = 0; i < 3; i++)
        wf_comm_destroy(&sub[i]);
    /* the world handle still works after its sub-groups are gone */
    fails += op_alltoall(c, 3);
    return fails;
}

/* ---------------------------------------------------------------------- */
/* mismatched arguments: every rank gets the same verdict                  */

static int body_mismatch(wf_comm_t *c, void *arg)
{
    (void)arg;
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t sbuf[64] = {0}, rbuf[64];
    size_t sc[8], sd[8], rc[8], rd[8];
    for (int j = 0; j < n; j++) {
        sc[j] = rc[j] = 2;
        sd[j] = rd[j] = (size_t)j * 4;
    }
    if (me == 0)
        rc[n - 1] = 3; /* rank 0 expects 3 bytes from n-1, which sends 2 */
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
    /* collective inside a group call is refused locally */
    EXPECT_OK(wf_comm_group_start(c));
    EXPECT(wf_comm_barrier(c) == WF_E_BAD_ARGUMENT);
    EXPECT_OK(wf_comm_group_end(c));
    EXPECT(wf_comm_group_end(c) == WF_E_BAD_ARGUMENT);
    EXPECT(wf_comm_send(c, sbuf, 1, n) == WF_E_BAD_ARGUMENT);
    /* and the communicator is still in step afterwards */
    fails += op_alltoallv(c, 11);
    return fails;
}

/* ---------------------------------------------------------------------- */
/* abort                                                                   */

enum abort_where { AB_BARRIER, AB_RECV, AB_ALLTOALL, AB_GROUP_RING, AB_SUBGROUP };

typedef struct abort_case {
    shared_t sh;        /* timings and statuses */
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
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ac->sh.t_abort = now_s();
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
    ac->sh.t_ret[me] = now_s();
    ac->sh.st[me] = st;
    /* every later call fails at once too */
    EXPECT(wf_comm_barrier(c) == WF_E_ABORTED);
    EXPECT(wf_comm_send(c, buf, 1, (me + 1) % n) == WF_E_ABORTED);
    wf_comm_req_t *r = NULL;
    EXPECT(wf_comm_irecv(c, buf, 1, (me + 1) % n, &r) == WF_E_ABORTED);
    wf_comm_t *x = NULL;
    EXPECT(wf_comm_split(c, 0, 0, &x) == WF_E_ABORTED && x == NULL);
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
        if (ac.sh.st[r] != WF_E_ABORTED) {
            fprintf(stderr, "abort %s: rank %d returned %d\n", names[where],
                    r, (int)ac.sh.st[r]);
            fails++;
        }
        double dt = ac.sh.t_ret[r] - ac.sh.t_abort;
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
        shared_t sh;
        memset(&sh, 0, sizeof sh);
        sh.iters = quick ? 6 : 24;
        int f = run_world(sizes[i], body_every_op, &sh, NULL);
        printf("  every op x %d iterations, %d ranks: %s\n", sh.iters,
               sizes[i], f ? "FAIL" : "ok");
        fails += f;
        int f2 = run_world(sizes[i], body_ring_grouped, NULL, NULL);
        int f3 = run_world(sizes[i], body_ring_overlap, NULL, NULL);
        printf("  ring exchange, %d ranks: grouped %s, isend/irecv overlapped "
               "%s\n",
               sizes[i], f2 ? "FAIL" : "ok", f3 ? "FAIL" : "ok");
        fails += f2 + f3;
    }

    {
        shared_t sh;
        memset(&sh, 0, sizeof sh);
        sh.iters = quick ? 20 : 200;
        int f = run_world(8, body_split_mesh, &sh, NULL);
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
            shared_t sh;
            memset(&sh, 0, sizeof sh);
            sh.iters = quick ? 150 : 2000;
            double ts = now_s();
            int f = run_world(mixn[i], body_mixed, &sh, NULL);
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
