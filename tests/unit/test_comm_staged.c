/* test_comm_staged.c — unit test of comm_staged.h: the host comm wrapped
 * for device buffers of the stand-in device backend (support/standin_dev.h,
 * whose "device" bytes are stored XOR 0xA5), one thread per rank on 2, 3
 * and 4 ranks. Every op runs on device buffers (filled with copy_h2d,
 * read back with copy_d2h) and is checked byte for byte against values
 * computed on the host: blocking ring, grouped exchange, isend / irecv
 * (wait and test), barrier, all v- and even collectives with uneven
 * counts, gaps and zero sizes, f32 / f64 all-reduce bit-identical to the
 * host backend's on host buffers, split with NOCOLOR, abort while a rank
 * is blocked, and a failing device copy aborting the peers. Negative
 * controls: device pointers handed to the raw host comm give wrong data.
 * The stand-in's own device ops (attention on a head range, lse_merge,
 * convert, fill_f32) are checked once against the CPU backend.
 * Overlap (the stand-in's transfer stream: a thread that copies after a
 * random delay and refuses kernels on a range still being copied): a
 * ring of alltoall steps with a kernel between post and wait, send order
 * with wf_comm_test polling, every op above in three modes (overlapped,
 * WF_COMM_STAGED_SYNC, a backend without xfer_*), abort while an isend is
 * deferred, a failing transfer and an isend of a host pointer aborting
 * the peers, and the stand-in's transfer checks themselves.
 * Rank threads count their own failures; main() CHECKs the sums. */
#include "comm/comm.h"
#include "comm/comm_host.h"
#include "comm/comm_staged.h"
#include "support/check.h"
#include "support/standin_dev.h"
#include "support/wait.h"
#include "tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARENA ((uint64_t)8 << 20) /* per rank; dev_reset after each op */
#define ITERS 8                   /* size / root variations per op */
#define SENT 0xEE                 /* bytes the op must leave alone */
#define GAP 3                     /* bytes between blocks */
#define MAXN 8

/* Count a failed expectation in the rank's `fails`. */
#define EXPECT(r, cond)                                                      \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: rank %d: EXPECT failed: %s\n", __FILE__, \
                    __LINE__, (r)->me, #cond);                               \
            (r)->fails++;                                                    \
        }                                                                    \
    } while (0)

#define EXPECT_ST(r, expr, want)                                             \
    do {                                                                     \
        wf_status_t st_ = (expr);                                            \
        if (st_ != (want)) {                                                 \
            fprintf(stderr, "%s:%d: rank %d: %s returned %d, want %d\n",     \
                    __FILE__, __LINE__, (r)->me, #expr, (int)st_,            \
                    (int)(want));                                            \
            (r)->fails++;                                                    \
        }                                                                    \
    } while (0)

#define EXPECT_OK(r, expr) EXPECT_ST(r, expr, WF_OK)

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

/* Byte k of the message from src to dst in iteration it. */
static uint8_t pat(int src, int dst, int it, size_t k)
{
    return (uint8_t)(src * 131 + dst * 31 + it * 7 + (int)(k % 251) * 13 + 1);
}

/* Uneven byte count in [0, 40], zero about a quarter of the time. */
static size_t cnt(int it, int a, int b, int salt)
{
    uint64_t r = mix(mix(mix((uint64_t)it) ^ (uint64_t)a) ^
                     ((uint64_t)b << 8 | (uint64_t)salt));
    return (r & 3) == 0 ? 0 : (size_t)((r >> 8) % 41);
}

/* ---------------------------------------------------------------------- */
/* a rank: its handles and its stand-in device                             */

typedef struct rk {
    wf_comm_t *c;                /* staged handle over world A */
    wf_comm_t *ref;              /* raw host handle of world B (reference) */
    const wf_backend_ops_t *ops; /* the stand-in backend */
    wf_backend_ctx_t *ctx;       /* this rank's context */
    int me, n;                   /* rank, world size */
    int fails;                   /* failed expectations */
    uint64_t overlaps;           /* the stand-in's xfer_overlaps at the end */
} rk_t;

/* A device buffer of `bytes` holding host's bytes (or SENT when host is
 * NULL). Freed by the dev_reset at the end of the op. */
static void *dput(rk_t *r, const void *host, size_t bytes)
{
    void *d = NULL;
    EXPECT_OK(r, r->ops->dev_alloc(r->ctx, bytes ? bytes : 1, &d));
    unsigned char *tmp = NULL;
    if (!host && bytes) {
        tmp = malloc(bytes);
        memset(tmp, SENT, bytes);
        host = tmp;
    }
    if (d && bytes)
        EXPECT_OK(r, r->ops->copy_h2d(r->ctx, d, host, bytes));
    EXPECT_OK(r, r->ops->synchronize(r->ctx));
    free(tmp);
    return d;
}

/* A malloc'd host copy of a device buffer. */
static uint8_t *dget(rk_t *r, const void *dev, size_t bytes)
{
    uint8_t *h = malloc(bytes ? bytes : 1);
    if (bytes)
        EXPECT_OK(r, r->ops->copy_d2h(r->ctx, h, dev, bytes));
    EXPECT_OK(r, r->ops->synchronize(r->ctx));
    return h;
}

static void op_done(rk_t *r) { r->ops->dev_reset(r->ctx); }

/* ---------------------------------------------------------------------- */
/* point-to-point                                                          */

/* Blocking ring: rank 0 sends first, the others receive first. */
static void t_ring(rk_t *r, int it)
{
    int me = r->me, n = r->n, next = (me + 1) % n, prev = (me - 1 + n) % n;
    size_t bytes = (size_t)(it % 4) * 333;
    uint8_t *src = malloc(bytes + 1);
    for (size_t k = 0; k < bytes; k++)
        src[k] = pat(me, next, it, k);
    void *ds = dput(r, src, bytes), *dr = dput(r, NULL, bytes);
    if (me == 0) {
        EXPECT_OK(r, wf_comm_send(r->c, ds, bytes, next));
        EXPECT_OK(r, wf_comm_recv(r->c, dr, bytes, prev));
    } else {
        EXPECT_OK(r, wf_comm_recv(r->c, dr, bytes, prev));
        EXPECT_OK(r, wf_comm_send(r->c, ds, bytes, next));
    }
    uint8_t *got = dget(r, dr, bytes);
    for (size_t k = 0; k < bytes; k++)
        EXPECT(r, got[k] == pat(prev, me, it, k));
    free(got);
    free(src);
    op_done(r);
}

/* Grouped exchange: every rank sends to every rank (itself too), uneven
 * sizes with zeros; receives posted first on odd ranks. */
static void t_group(rk_t *r, int it)
{
    int me = r->me, n = r->n;
    void *ds[MAXN], *dr[MAXN];
    for (int j = 0; j < n; j++) {
        size_t sb = cnt(it, me, j, 1);
        uint8_t src[64];
        for (size_t k = 0; k < sb; k++)
            src[k] = pat(me, j, it, k);
        ds[j] = dput(r, src, sb);
        dr[j] = dput(r, NULL, cnt(it, j, me, 1) + GAP);
    }
    EXPECT_OK(r, wf_comm_group_start(r->c));
    EXPECT_OK(r, wf_comm_group_start(r->c)); /* nested: still one group */
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n; j++) {
            if ((pass == 0) == (me % 2 == 0))
                EXPECT_OK(r, wf_comm_send(r->c, ds[j], cnt(it, me, j, 1), j));
            else
                EXPECT_OK(r, wf_comm_recv(r->c, dr[j], cnt(it, j, me, 1), j));
        }
    EXPECT_OK(r, wf_comm_group_end(r->c));
    EXPECT_OK(r, wf_comm_group_end(r->c));
    for (int j = 0; j < n; j++) {
        size_t rb = cnt(it, j, me, 1);
        uint8_t *got = dget(r, dr[j], rb + GAP);
        for (size_t k = 0; k < rb; k++)
            EXPECT(r, got[k] == pat(j, me, it, k));
        for (size_t k = 0; k < GAP; k++)
            EXPECT(r, got[rb + k] == SENT);
        free(got);
    }
    /* an empty group call */
    EXPECT_OK(r, wf_comm_group_start(r->c));
    EXPECT_OK(r, wf_comm_group_end(r->c));
    op_done(r);
}

/* isend / irecv around the ring (wait), then a receive from myself that
 * wf_comm_test sees pending until my isend, then done. */
static void t_async(rk_t *r, int it)
{
    int me = r->me, n = r->n, next = (me + 1) % n, prev = (me - 1 + n) % n;
    size_t bytes = 100 + (size_t)it * 17;
    uint8_t src[512];
    for (size_t k = 0; k < bytes; k++)
        src[k] = pat(me, next, it, k);
    void *ds = dput(r, src, bytes), *dr = dput(r, NULL, bytes);
    wf_comm_req_t *rr = NULL, *sr = NULL;
    EXPECT_OK(r, wf_comm_irecv(r->c, dr, bytes, prev, &rr));
    EXPECT_OK(r, wf_comm_isend(r->c, ds, bytes, next, &sr));
    EXPECT_OK(r, wf_comm_wait(r->c, &sr));
    EXPECT_OK(r, wf_comm_wait(r->c, &rr));
    EXPECT(r, rr == NULL && sr == NULL);
    uint8_t *got = dget(r, dr, bytes);
    for (size_t k = 0; k < bytes; k++)
        EXPECT(r, got[k] == pat(prev, me, it, k));
    free(got);

    void *self = dput(r, NULL, bytes);
    int done = -1;
    EXPECT_OK(r, wf_comm_irecv(r->c, self, bytes, me, &rr));
    EXPECT_OK(r, wf_comm_test(r->c, &rr, &done));
    EXPECT(r, done == 0 && rr != NULL);
    EXPECT_OK(r, wf_comm_isend(r->c, ds, bytes, me, &sr));
    EXPECT_OK(r, wf_comm_test(r->c, &rr, &done)); /* the isend copied it */
    EXPECT(r, done == 1 && rr == NULL);
    EXPECT_OK(r, wf_comm_wait(r->c, &sr));
    got = dget(r, self, bytes);
    EXPECT(r, memcmp(got, src, bytes) == 0);
    free(got);
    op_done(r);
}

/* cp_attention's ring with alltoall rotation, 3 rounds of n steps: post
 * the irecv of the next holding (from me + 1) and the isend of the
 * current one (to me - 1), run a kernel that reads the current holding
 * (the stand-in's add into an accumulator) between the posts and the
 * waits, wait both, swap. Holdings of uneven sizes (rank j: 256 + 61 j
 * floats of small integers, so the f32 sums are exact): acc[k] = 3 *
 * sum over j with k < n_j of v(j, k). On the overlapped path the stand-in
 * refuses the kernel if the copy into a holding is still pending. */
#define RING_ROUNDS 3
static size_t ring_n(int j) { return 256 + 61 * (size_t)j; }
static float ring_v(int j, size_t k) { return (float)(j * 1000 + (int)(k % 97)); }

static void t_ring_steps(rk_t *r)
{
    int me = r->me, n = r->n, next = (me + 1) % n, prev = (me - 1 + n) % n;
    size_t maxn = ring_n(n - 1);
    float *own = malloc(maxn * sizeof *own), *zero = calloc(maxn, sizeof *zero);
    for (size_t k = 0; k < ring_n(me); k++)
        own[k] = ring_v(me, k);
    float *cur = dput(r, own, maxn * sizeof *own);
    float *nxt = dput(r, NULL, maxn * sizeof *own);
    float *acc = dput(r, zero, maxn * sizeof *own);
    for (int i = 0; i < RING_ROUNDS * n; i++) {
        int src = (me + i) % n, nsrc = (src + 1) % n;
        wf_comm_req_t *rq = NULL, *sq = NULL;
        EXPECT_OK(r, wf_comm_irecv(r->c, nxt, ring_n(nsrc) * sizeof(float), next, &rq));
        EXPECT_OK(r, wf_comm_isend(r->c, cur, ring_n(src) * sizeof(float), prev, &sq));
        EXPECT_OK(r, r->ops->add(r->ctx, acc, cur, (int64_t)ring_n(src)));
        EXPECT_OK(r, wf_comm_wait(r->c, &rq));
        EXPECT_OK(r, wf_comm_wait(r->c, &sq));
        float *t = cur;
        cur = nxt;
        nxt = t;
    }
    float *got = (float *)(void *)dget(r, acc, maxn * sizeof *acc);
    int bad = 0;
    for (size_t k = 0; k < maxn; k++) {
        float e = 0;
        for (int j = 0; j < n; j++)
            if (k < ring_n(j))
                e += ring_v(j, k);
        bad += got[k] != RING_ROUNDS * e;
    }
    EXPECT(r, bad == 0);
    free(got);
    free(own);
    free(zero);
    op_done(r);
}

/* Order: K isends to the next rank back to back (deferred together on the
 * overlapped path), sizes with a zero; the previous rank's K irecvs
 * completed with wf_comm_test polling, in order; the sends waited for in
 * reverse. Message j must land in receive j. */
#define ORDER_K 5
static void t_order(rk_t *r, int it)
{
    int me = r->me, n = r->n, next = (me + 1) % n, prev = (me - 1 + n) % n;
    wf_comm_req_t *sq[ORDER_K], *rq[ORDER_K];
    void *ds[ORDER_K], *dr[ORDER_K];
    size_t sz[ORDER_K];
    for (int j = 0; j < ORDER_K; j++) {
        sz[j] = j == 2 ? 0 : 50 + (size_t)(j * 37 + it);
        uint8_t src[256];
        for (size_t k = 0; k < sz[j]; k++)
            src[k] = pat(me, j, it, k);
        ds[j] = dput(r, src, sz[j]);
        dr[j] = dput(r, NULL, sz[j]);
    }
    for (int j = 0; j < ORDER_K; j++)
        EXPECT_OK(r, wf_comm_irecv(r->c, dr[j], sz[j], prev, &rq[j]));
    for (int j = 0; j < ORDER_K; j++)
        EXPECT_OK(r, wf_comm_isend(r->c, ds[j], sz[j], next, &sq[j]));
    for (int j = 0; j < ORDER_K; j++) {
        int done = 0;
        /* polled without a pause: each test drives the staged comm's
         * progress; the bound is only a failure bound */
        uint64_t end = wait_now_ms() + wait_bound_ms(WAIT_EVENT_MS);
        while (!done && wait_now_ms() < end)
            EXPECT_OK(r, wf_comm_test(r->c, &rq[j], &done));
        EXPECT(r, done && rq[j] == NULL);
    }
    for (int j = ORDER_K - 1; j >= 0; j--)
        EXPECT_OK(r, wf_comm_wait(r->c, &sq[j]));
    for (int j = 0; j < ORDER_K; j++) {
        uint8_t *got = dget(r, dr[j], sz[j]);
        for (size_t k = 0; k < sz[j]; k++)
            EXPECT(r, got[k] == pat(prev, j, it, k));
        free(got);
    }
    op_done(r);
}

/* ---------------------------------------------------------------------- */
/* collectives                                                             */

static void t_allgatherv(rk_t *r, int it)
{
    int me = r->me, n = r->n;
    size_t counts[MAXN], displs[MAXN], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = it == 3 ? 0 : cnt(it, j, 0, 2); /* all-zero once */
        displs[j] = total;
        total += counts[j] + GAP;
    }
    uint8_t src[64];
    for (size_t k = 0; k < counts[me]; k++)
        src[k] = pat(me, 0, it, k);
    void *ds = dput(r, src, counts[me]), *dr = dput(r, NULL, total);
    EXPECT_OK(r, wf_comm_allgatherv(r->c, ds, counts[me], dr, counts, displs));
    uint8_t *got = dget(r, dr, total);
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < counts[j]; k++)
            EXPECT(r, got[displs[j] + k] == pat(j, 0, it, k));
        for (size_t k = 0; k < GAP; k++) /* gaps: not the op's */
            EXPECT(r, got[displs[j] + counts[j] + k] == SENT);
    }
    free(got);
    op_done(r);
}

/* Even all-gather, in place on odd it; the copies are counted. */
static void t_allgather(rk_t *r, int it)
{
    int me = r->me, n = r->n;
    size_t bytes = (size_t)((it * 5) % 17), total = (size_t)n * bytes;
    uint8_t *src = malloc(total + 1);
    memset(src, SENT, total);
    for (size_t k = 0; k < bytes; k++)
        src[(size_t)me * bytes + k] = pat(me, 0, it, k);
    int inplace = it % 2;
    void *dr = dput(r, src, total);
    void *ds = inplace ? (char *)dr + (size_t)me * bytes
                       : dput(r, src + (size_t)me * bytes, bytes);
    wf_standin_counters_t before = wf_standin_counters(r->ctx);
    EXPECT_OK(r, wf_comm_allgather(r->c, ds, dr, bytes));
    wf_standin_counters_t after = wf_standin_counters(r->ctx);
    if (bytes > 0) { /* the wrapper copied in and out */
        EXPECT(r, after.d2h > before.d2h && after.h2d > before.h2d);
        EXPECT(r, after.d2h_bytes - before.d2h_bytes >= bytes);
        EXPECT(r, after.h2d_bytes - before.h2d_bytes >= total);
    }
    uint8_t *got = dget(r, dr, total);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            EXPECT(r, got[(size_t)j * bytes + k] == pat(j, 0, it, k));
    free(got);
    free(src);
    op_done(r);
}

static void t_alltoallv(rk_t *r, int it)
{
    int me = r->me, n = r->n;
    size_t sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN], stot = 0, rtot = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = cnt(it, me, j, 3);
        rc[j] = cnt(it, j, me, 3);
    }
    for (int j = n - 1; j >= 0; j--) { /* send blocks in reverse order */
        sd[j] = stot;
        stot += sc[j] + GAP;
    }
    for (int j = 0; j < n; j++) {
        rd[j] = rtot;
        rtot += rc[j] + GAP;
    }
    uint8_t *src = malloc(stot + 1);
    memset(src, SENT, stot);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            src[sd[j] + k] = pat(me, j, it, k);
    void *ds = dput(r, src, stot), *dr = dput(r, NULL, rtot);
    EXPECT_OK(r, wf_comm_alltoallv(r->c, ds, sc, sd, dr, rc, rd));
    uint8_t *got = dget(r, dr, rtot);
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < rc[j]; k++)
            EXPECT(r, got[rd[j] + k] == pat(j, me, it, k));
        for (size_t k = 0; k < GAP; k++)
            EXPECT(r, got[rd[j] + rc[j] + k] == SENT);
    }
    free(got);
    free(src);
    op_done(r);
}

static void t_alltoall(rk_t *r, int it)
{
    int me = r->me, n = r->n;
    size_t bytes = (size_t)(it % 9), total = (size_t)n * bytes;
    uint8_t *src = malloc(total + 1);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            src[(size_t)j * bytes + k] = pat(me, j, it, k);
    void *ds = dput(r, src, total), *dr = dput(r, NULL, total);
    EXPECT_OK(r, wf_comm_alltoall(r->c, ds, dr, bytes));
    uint8_t *got = dget(r, dr, total);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            EXPECT(r, got[(size_t)j * bytes + k] == pat(j, me, it, k));
    free(got);
    free(src);
    op_done(r);
}

/* Non-integer values, so that the order of the sum shows in the bits. */
static double val(int rank, int it, size_t k)
{
    uint64_t h = mix((uint64_t)rank * 1000003u + (uint64_t)it * 7919u + k);
    return ((double)(h % 2000001) - 1000000.0) / 7.0;
}

/* f32 and f64 sums, in place on odd it: bit-identical to the host
 * backend's all-reduce of the same values on host buffers. */
static void t_allreduce(rk_t *r, int it)
{
    static const size_t counts[] = {0, 1, 7, 1001, 4099};
    size_t count = counts[it % 5];
    int inplace = it % 2;
    float *f = malloc(count * sizeof *f + 4), *fr = malloc(count * sizeof *f + 4);
    double *d = malloc(count * sizeof *d + 8), *dr = malloc(count * sizeof *d + 8);
    for (size_t k = 0; k < count; k++) {
        f[k] = (float)val(r->me, it, k);
        d[k] = val(r->me, it, k);
    }
    /* reference: the host backend on host buffers */
    EXPECT_OK(r, wf_comm_allreduce(r->ref, f, fr, count, WF_COMM_F32, WF_COMM_SUM));
    EXPECT_OK(r, wf_comm_allreduce(r->ref, d, dr, count, WF_COMM_F64, WF_COMM_SUM));
    void *dfs = dput(r, f, count * sizeof *f);
    void *dfr = inplace ? dfs : dput(r, NULL, count * sizeof *f);
    void *dds = dput(r, d, count * sizeof *d);
    void *ddr = inplace ? dds : dput(r, NULL, count * sizeof *d);
    EXPECT_OK(r, wf_comm_allreduce(r->c, dfs, dfr, count, WF_COMM_F32, WF_COMM_SUM));
    EXPECT_OK(r, wf_comm_allreduce(r->c, dds, ddr, count, WF_COMM_F64, WF_COMM_SUM));
    uint8_t *gf = dget(r, dfr, count * sizeof *f);
    uint8_t *gd = dget(r, ddr, count * sizeof *d);
    EXPECT(r, memcmp(gf, fr, count * sizeof *f) == 0);
    EXPECT(r, memcmp(gd, dr, count * sizeof *d) == 0);
    /* and the sum is the one in rank order */
    for (size_t k = 0; k < count; k++) {
        float e = (float)val(0, it, k);
        for (int j = 1; j < r->n; j++)
            e += (float)val(j, it, k);
        EXPECT(r, memcmp(&e, fr + k, sizeof e) == 0);
    }
    free(gf);
    free(gd);
    free(f);
    free(fr);
    free(d);
    free(dr);
    op_done(r);
}

static void t_broadcast(rk_t *r, int it)
{
    int me = r->me, root = it % r->n;
    size_t bytes = (size_t)((1 + it * 37) % 300);
    uint8_t src[300];
    for (size_t k = 0; k < bytes; k++)
        src[k] = pat(root, 9, it, k);
    void *db = me == root ? dput(r, src, bytes) : dput(r, NULL, bytes);
    EXPECT_OK(r, wf_comm_broadcast(r->c, db, bytes, root));
    uint8_t *got = dget(r, db, bytes);
    EXPECT(r, memcmp(got, src, bytes) == 0);
    free(got);
    op_done(r);
}

static void t_scatterv(rk_t *r, int it)
{
    int me = r->me, n = r->n, root = (it + 1) % n;
    size_t counts[MAXN], displs[MAXN], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = cnt(it, root, j, 4);
        displs[j] = total;
        total += counts[j] + GAP;
    }
    void *ds = NULL;
    if (me == root) {
        uint8_t *src = malloc(total + 1);
        memset(src, SENT, total);
        for (int j = 0; j < n; j++)
            for (size_t k = 0; k < counts[j]; k++)
                src[displs[j] + k] = pat(root, j, it, k);
        ds = dput(r, src, total);
        free(src);
    }
    void *dr = dput(r, NULL, counts[me] + GAP);
    EXPECT_OK(r, wf_comm_scatterv(r->c, ds, me == root ? counts : NULL,
                                  me == root ? displs : NULL, dr, counts[me],
                                  root));
    uint8_t *got = dget(r, dr, counts[me] + GAP);
    for (size_t k = 0; k < counts[me]; k++)
        EXPECT(r, got[k] == pat(root, me, it, k));
    for (size_t k = 0; k < GAP; k++)
        EXPECT(r, got[counts[me] + k] == SENT);
    free(got);
    op_done(r);
}

static void t_gatherv(rk_t *r, int it)
{
    int me = r->me, n = r->n, root = (it + 2) % n;
    size_t counts[MAXN], displs[MAXN], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = cnt(it, j, root, 5);
        displs[j] = total;
        total += counts[j] + GAP;
    }
    uint8_t src[64];
    for (size_t k = 0; k < counts[me]; k++)
        src[k] = pat(me, root, it, k);
    void *ds = dput(r, src, counts[me]);
    void *dr = me == root ? dput(r, NULL, total) : NULL;
    EXPECT_OK(r, wf_comm_gatherv(r->c, ds, counts[me], dr,
                                 me == root ? counts : NULL,
                                 me == root ? displs : NULL, root));
    if (me == root) {
        uint8_t *got = dget(r, dr, total);
        for (int j = 0; j < n; j++) {
            for (size_t k = 0; k < counts[j]; k++)
                EXPECT(r, got[displs[j] + k] == pat(j, root, it, k));
            for (size_t k = 0; k < GAP; k++)
                EXPECT(r, got[displs[j] + counts[j] + k] == SENT);
        }
        free(got);
    }
    op_done(r);
}

/* Colors me % 2, keys reversed; the last rank joins nothing (n >= 3).
 * On each sub-group: an all-gather of world ranks (membership and key
 * order) and an all-reduce. */
static void t_split(rk_t *r)
{
    int me = r->me, n = r->n;
    int nocolor = n >= 3 && me == n - 1;
    int color = nocolor ? WF_COMM_SPLIT_NOCOLOR : me % 2;
    wf_comm_t *sub = (wf_comm_t *)&sub; /* must be overwritten */
    EXPECT_OK(r, wf_comm_split(r->c, color, -me, &sub));
    if (nocolor) {
        EXPECT(r, sub == NULL);
        return;
    }
    if (!sub) {
        r->fails++;
        return;
    }
    int members[MAXN], m = 0;
    for (int j = n - 1; j >= 0; j--) /* key -j: descending world rank */
        if (!(n >= 3 && j == n - 1) && j % 2 == color)
            members[m++] = j;
    EXPECT(r, wf_comm_size(sub) == m);
    EXPECT(r, strcmp(wf_comm_backend(sub), "staged(host)") == 0);
    int32_t mine = me, got[MAXN] = {0};
    void *ds = dput(r, &mine, sizeof mine), *dr = dput(r, NULL, sizeof got);
    EXPECT_OK(r, wf_comm_allgather(sub, ds, dr, sizeof mine));
    uint8_t *h = dget(r, dr, (size_t)m * sizeof mine);
    memcpy(got, h, (size_t)m * sizeof mine);
    free(h);
    for (int j = 0; j < m; j++)
        EXPECT(r, got[j] == members[j]);
    EXPECT(r, members[wf_comm_rank(sub)] == me);
    float v = (float)(me + 1), e = 0;
    for (int j = 0; j < m; j++)
        e += (float)(members[j] + 1);
    void *dv = dput(r, &v, sizeof v);
    EXPECT_OK(r, wf_comm_allreduce(sub, dv, dv, 1, WF_COMM_F32, WF_COMM_SUM));
    uint8_t *s = dget(r, dv, sizeof v);
    EXPECT(r, memcmp(s, &e, sizeof e) == 0);
    free(s);
    wf_comm_destroy(&sub);
    op_done(r);
}

/* Negative controls: device pointers handed to the raw host comm (no
 * wrapper) give wrong data, so the checks above can fail. */
static void t_negative(rk_t *r)
{
    int me = r->me, n = r->n;
    /* all-gather from device buffers into a host buffer: scrambled */
    uint8_t src[32], *host = malloc((size_t)n * sizeof src);
    for (size_t k = 0; k < sizeof src; k++)
        src[k] = pat(me, 0, 99, k);
    void *ds = dput(r, src, sizeof src);
    EXPECT_OK(r, wf_comm_allgather(r->ref, ds, host, sizeof src));
    int same = 1;
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sizeof src; k++)
            same &= host[(size_t)j * sizeof src + k] == pat(j, 0, 99, k);
    EXPECT(r, !same);
    free(host);
    /* all-reduce on device buffers: sums of scrambled bits */
    float v[4] = {1.5f, -2.25f, 3.0f, 1e-3f}, e[4];
    for (int k = 0; k < 4; k++)
        e[k] = v[k] * (float)n;
    void *dv = dput(r, v, sizeof v), *de = dput(r, NULL, sizeof v);
    EXPECT_OK(r, wf_comm_allreduce(r->ref, dv, de, 4, WF_COMM_F32, WF_COMM_SUM));
    uint8_t *got = dget(r, de, sizeof v);
    EXPECT(r, memcmp(got, e, sizeof e) != 0);
    free(got);
    /* the same through the wrapper: right */
    EXPECT_OK(r, wf_comm_allreduce(r->c, dv, de, 4, WF_COMM_F32, WF_COMM_SUM));
    got = dget(r, de, sizeof v);
    EXPECT(r, memcmp(got, e, sizeof e) == 0);
    free(got);
    op_done(r);
}

/* How the rank threads wrap their world (main() runs each). */
typedef enum stage_mode {
    MODE_OVERLAP = 0, /* the stand-in with its transfer stream: overlapped */
    MODE_SYNC_FLAG,   /* the same, wrapped WF_COMM_STAGED_SYNC */
    MODE_NO_XFER      /* a backend without the xfer_* entries */
} stage_mode_t;
static stage_mode_t mode;
static wf_backend_ops_t noxfer_ops; /* the stand-in without xfer_* */
static wf_backend_ops_t pin_ops;    /* the stand-in with counting host_register */
static _Atomic long pins, unpins;   /* its calls (any rank thread) */

/* host_register / host_unregister that only count (the stand-in has
 * nothing to pin): the staged comm must pin each pooled mirror once, not
 * once per request, and unpin every one it pinned. */
static wf_status_t count_pin(void *ptr, size_t bytes)
{
    if (!ptr || bytes == 0)
        return WF_E_BAD_ARGUMENT;
    atomic_fetch_add(&pins, 1);
    return WF_OK;
}
static void count_unpin(void *ptr)
{
    if (ptr)
        atomic_fetch_add(&unpins, 1);
}

static void body_every_op(rk_t *r)
{
    EXPECT(r, strcmp(wf_comm_backend(r->c), "staged(host)") == 0);
    EXPECT(r, wf_comm_rank(r->c) == r->me && wf_comm_size(r->c) == r->n);
    EXPECT(r, wf_comm_staged_overlaps(r->c) == (mode == MODE_OVERLAP));
    EXPECT(r, !wf_comm_staged_overlaps(r->ref));
    t_ring_steps(r);
    for (int it = 0; it < ITERS; it++) {
        t_ring(r, it);
        t_group(r, it);
        t_async(r, it);
        t_order(r, it);
        EXPECT_OK(r, wf_comm_barrier(r->c));
        t_allgatherv(r, it);
        t_allgather(r, it);
        t_alltoallv(r, it);
        t_alltoall(r, it);
        t_allreduce(r, it);
        t_broadcast(r, it);
        t_scatterv(r, it);
        t_gatherv(r, it);
    }
    t_split(r);
    t_negative(r);
    wf_standin_counters_t k = wf_standin_counters(r->ctx);
    EXPECT(r, k.h2d > 0 && k.d2h > 0 && k.h2d_bytes > 0 && k.d2h_bytes > 0);
    /* overlapped: isend / irecv went through the transfer stream, kernels
     * ran while copies were pending, none touched a pending range */
    EXPECT(r, mode == MODE_OVERLAP ? k.xfer_d2h > 0 && k.xfer_h2d > 0 && k.xfer_overlaps > 0
                                   : k.xfer_d2h == 0 && k.xfer_h2d == 0);
    EXPECT(r, k.xfer_conflicts == 0);
    r->overlaps = k.xfer_overlaps;
    /* refused locally, as by every backend */
    EXPECT_OK(r, wf_comm_group_start(r->c));
    EXPECT_ST(r, wf_comm_barrier(r->c), WF_E_BAD_ARGUMENT);
    EXPECT_OK(r, wf_comm_group_end(r->c));
    EXPECT_ST(r, wf_comm_group_end(r->c), WF_E_BAD_ARGUMENT);
}

/* ---------------------------------------------------------------------- */
/* abort                                                                   */

typedef struct abort_case {
    int copy_fail;       /* 0: rank 0 aborts; 1: rank 0's copy fails; 2: rank 0
                          * aborts while its isend is deferred (its copy held
                          * pending); 3: the copy of rank 0's isend fails
                          * (xfer_wait); 4: rank 0's isend of a host pointer */
    int n;               /* ranks */
    wf_comm_host_world_t *w; /* the staged comms' inner world */
    atomic_int entered;  /* ranks 1.. about to make the call that blocks */
    atomic_int returned; /* ranks past that call (rank 0: past its abort) */
    int blocked;         /* 1: rank 0 saw ranks 1.. asleep in their calls */
    int seen_entered;    /* at rank 0's abort: entered */
    int seen_waiting;    /* and the inner world's waiting count */
    wf_status_t st[MAXN]; /* what each rank's call returned */
} abort_case_t;

/* Ranks 1.. have set their flag and are asleep in their calls (the
 * staged comm blocks in its inner host comm, whose waiting count then
 * holds those calls only: nothing else of theirs is left to wait on). */
static bool peers_blocked(void *p)
{
    abort_case_t *ac = p;
    return atomic_load(&ac->entered) == ac->n - 1 &&
           wf_comm_host_world_waiting(ac->w) == ac->n - 1;
}

/* Rank 0 aborts, or passes a host pointer as a device buffer to an
 * all-gather, whose failing copy must abort the world; it does so once
 * every other rank is blocked: rank 1 in a receive from rank 0 (abort) or
 * in the all-gather (copy failure), the others in a receive from
 * themselves. The host comm has no timeout, so only the abort can end
 * their calls. */
/* Rank 0's side of abort cases 2-4 (isend of d, 4096 bytes, to rank 1);
 * returns WF_E_ABORTED when it went as it must. */
static wf_status_t deferred_send_fails(rk_t *r, int kind, void *d)
{
    wf_comm_req_t *sq = NULL;
    if (kind == 2) {
        /* the copy held pending: the isend is deferred; abort, let the
         * copy run; with an even world the wait sees WF_E_ABORTED, with an
         * odd one the request is left to wf_comm_destroy (which must wait
         * for the copy before it frees the mirror: ASan) */
        wf_standin_xfer_hold(r->ctx, true);
        EXPECT_OK(r, wf_comm_isend(r->c, d, 4096, 1, &sq));
        wf_comm_abort(r->c);
        wf_standin_xfer_hold(r->ctx, false);
        wf_comm_req_t *late = NULL;
        EXPECT_ST(r, wf_comm_isend(r->c, d, 16, 1, &late), WF_E_ABORTED);
        EXPECT(r, late == NULL);
        if (r->n % 2 == 0) {
            EXPECT_ST(r, wf_comm_wait(r->c, &sq), WF_E_ABORTED);
            EXPECT(r, sq == NULL);
        }
    } else if (kind == 3) {
        /* the copy into the mirror fails: the wait says so and the world
         * is aborted for the peers */
        wf_standin_xfer_fail(r->ctx, 1);
        EXPECT_OK(r, wf_comm_isend(r->c, d, 4096, 1, &sq));
        EXPECT_ST(r, wf_comm_wait(r->c, &sq), WF_E_INTERNAL);
    } else {
        uint8_t host[64] = {0};
        EXPECT_ST(r, wf_comm_isend(r->c, host, sizeof host, 1, &sq), WF_E_BAD_ARGUMENT);
        EXPECT(r, sq == NULL);
    }
    return WF_E_ABORTED;
}

static void body_abort(rk_t *r, abort_case_t *ac)
{
    int me = r->me;
    void *d = dput(r, NULL, 4096);
    wf_status_t st;
    if (me == 0) {
        ac->blocked = wait_for(peers_blocked, ac, WAIT_EVENT_MS);
        ac->seen_entered = atomic_load(&ac->entered);
        ac->seen_waiting = wf_comm_host_world_waiting(ac->w);
        if (ac->copy_fail >= 2) {
            st = deferred_send_fails(r, ac->copy_fail, d);
        } else if (ac->copy_fail) {
            uint8_t host[64] = {0};
            st = wf_comm_allgather(r->c, host, d, sizeof host);
            EXPECT_ST(r, st, WF_E_BAD_ARGUMENT);
            st = WF_E_ABORTED;
        } else {
            wf_comm_abort(r->c);
            st = WF_E_ABORTED;
        }
    } else if (me == 1 && ac->copy_fail >= 2) {
        wf_comm_req_t *rq = NULL;
        st = wf_comm_irecv(r->c, d, 4096, 0, &rq);
        atomic_fetch_add(&ac->entered, 1);
        if (st == WF_OK)
            st = wf_comm_wait(r->c, &rq);
    } else if (me == 1) {
        atomic_fetch_add(&ac->entered, 1);
        st = ac->copy_fail ? wf_comm_allgather(r->c, d, (char *)d + 64, 64)
                           : wf_comm_recv(r->c, d, 4096, 0);
    } else {
        atomic_fetch_add(&ac->entered, 1);
        st = wf_comm_recv(r->c, d, 1, me);
    }
    ac->st[me] = st;
    atomic_fetch_add(&ac->returned, 1);
    /* every later call fails at once */
    EXPECT_ST(r, wf_comm_barrier(r->c), WF_E_ABORTED);
    EXPECT_ST(r, wf_comm_send(r->c, d, 1, (me + 1) % r->n), WF_E_ABORTED);
    wf_comm_req_t *req = NULL;
    EXPECT_ST(r, wf_comm_irecv(r->c, d, 1, (me + 1) % r->n, &req),
              WF_E_ABORTED);
    wf_comm_t *x = NULL;
    EXPECT_ST(r, wf_comm_split(r->c, 0, 0, &x), WF_E_ABORTED);
    EXPECT(r, x == NULL);
    op_done(r);
}

/* ---------------------------------------------------------------------- */
/* harness                                                                 */

typedef struct world_run {
    wf_comm_host_world_t *wa, *wb; /* staged world, reference world */
    abort_case_t *ac;              /* abort case, or NULL: every op */
} world_run_t;

typedef struct rank_thread {
    pthread_t tid;          /* the thread */
    const world_run_t *run; /* shared */
    rk_t r;                 /* the rank */
} rank_thread_t;

static void *rank_main(void *p)
{
    rank_thread_t *t = p;
    rk_t *r = &t->r;
    wf_comm_t *inner = NULL;
    r->ops = mode == MODE_NO_XFER ? &noxfer_ops
             : mode == MODE_OVERLAP ? &pin_ops : wf_standin_dev_backend();
    EXPECT_OK(r, r->ops->ctx_new(r->me, ARENA, &r->ctx));
    EXPECT_OK(r, wf_comm_host_init(t->run->wa, r->me, &inner));
    EXPECT_OK(r, wf_comm_host_init(t->run->wb, r->me, &r->ref));
    if (r->ctx && inner && r->ref) {
        EXPECT_OK(r, wf_comm_staged_wrap_ex(inner, r->ops, r->ctx,
                                            mode == MODE_SYNC_FLAG ? WF_COMM_STAGED_SYNC : 0,
                                            &r->c));
        if (r->c) {
            if (t->run->ac)
                body_abort(r, t->run->ac);
            else
                body_every_op(r);
        }
    } else {
        wf_comm_destroy(&inner);
        wf_comm_host_world_abort(t->run->wa); /* nobody waits for me */
        wf_comm_host_world_abort(t->run->wb);
    }
    wf_comm_destroy(&r->c);
    wf_comm_destroy(&r->ref);
    r->ops->ctx_destroy(&r->ctx);
    return NULL;
}

static uint64_t world_overlaps; /* the ranks' xfer_overlaps, summed by run_world */

/* Every rank of an abort case is past its call. */
static bool all_returned(void *p)
{
    abort_case_t *ac = p;
    return atomic_load(&ac->returned) == ac->n;
}

/* Run n ranks; returns their failed expectations. An abort case's ranks
 * must all return within the bound on rank 0's wait for the blocked
 * state plus the abort's wake-up (each WAIT_EVENT_MS). */
static int run_world(int n, abort_case_t *ac)
{
    world_run_t run = {NULL, NULL, ac};
    if (wf_comm_host_world_new(n, &run.wa) != WF_OK ||
        wf_comm_host_world_new(n, &run.wb) != WF_OK) {
        wf_comm_host_world_unref(&run.wa);
        return 1;
    }
    if (ac)
        ac->w = run.wa;
    rank_thread_t *t = calloc((size_t)n, sizeof *t);
    int fails = 0, started = 0;
    for (int i = 0; i < n; i++) {
        t[i].run = &run;
        t[i].r.me = i;
        t[i].r.n = n;
        if (pthread_create(&t[i].tid, NULL, rank_main, &t[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            wf_comm_host_world_abort(run.wa);
            wf_comm_host_world_abort(run.wb);
            fails++;
            break;
        }
        started++;
    }
    if (ac && started == n && !wait_for(all_returned, ac, 2 * WAIT_EVENT_MS)) {
        /* the join would hang on a rank the abort did not wake */
        fprintf(stderr, "FAIL abort: %d of %d ranks still blocked after the abort\n",
                n - atomic_load(&ac->returned), n);
        exit(1);
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i].tid, NULL);
        fails += t[i].r.fails;
        world_overlaps += t[i].r.overlaps;
    }
    free(t);
    wf_comm_host_world_unref(&run.wa);
    wf_comm_host_world_unref(&run.wb);
    return fails;
}

/* Abort cases: once the other ranks are asleep in their calls, rank 0's
 * abort (or failing copy) makes every rank return WF_E_ABORTED. */
static void check_abort(int n, int copy_fail)
{
    static const char *what[] = {
        "abort while a rank is blocked in recv", "failing device copy aborts the peers",
        "abort while an isend is deferred", "failing transfer of an isend aborts the peers",
        "isend of a host pointer aborts the peers"};
    abort_case_t ac;
    memset(&ac, 0, sizeof ac);
    ac.copy_fail = copy_fail;
    ac.n = n;
    atomic_init(&ac.entered, 0);
    atomic_init(&ac.returned, 0);
    int f = run_world(n, &ac);
    CHECK(f == 0, "abort (case %d), %d ranks: %d failed expectations", copy_fail, n, f);
    CHECK(ac.blocked, "%s, %d ranks: ranks 1..%d were not all asleep in their calls "
          "before rank 0 acted (%d entered, %d waiting)", what[copy_fail], n, n - 1,
          ac.seen_entered, ac.seen_waiting);
    for (int i = 0; i < n; i++)
        CHECK(ac.st[i] == WF_E_ABORTED, "abort: rank %d returned %d", i,
              (int)ac.st[i]);
    printf("  %s, %d ranks: %d rank(s) asleep in their calls, then every rank "
           "WF_E_ABORTED\n", what[copy_fail], n, ac.seen_waiting);
}

/* The stand-in's transfer stream itself: the ordering mistakes it must
 * catch (a kernel or copy on the range of a pending h2d, a host buffer of
 * a pending d2h read early, a dev_reset with a transfer pending), marks,
 * `after` released on a refusal, an injected failure. The queue is held
 * where a transfer must stay pending for sure. */
static void check_xfer_standin(void)
{
    const wf_backend_ops_t *ops = wf_standin_dev_backend();
    wf_backend_ctx_t *ctx = NULL;
    if (ops->ctx_new(0, 1 << 20, &ctx) != WF_OK) {
        CHECK(0, "ctx_new");
        return;
    }
    float a[64], b[64], h[64];
    for (int i = 0; i < 64; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * i);
    }
    void *da = NULL, *db = NULL;
    CHECK(ops->dev_alloc(ctx, sizeof a, &da) == WF_OK &&
              ops->dev_alloc(ctx, sizeof b, &db) == WF_OK,
          "dev_alloc");
    CHECK(ops->copy_h2d(ctx, db, b, sizeof b) == WF_OK, "copy_h2d");
    wf_xfer_t *t = NULL, *m = NULL;
    /* an h2d held pending: every main-stream access to its range refused */
    wf_standin_xfer_hold(ctx, true);
    CHECK(ops->xfer_h2d(ctx, da, a, sizeof a, NULL, &t) == WF_OK && t, "xfer_h2d");
    CHECK(ops->add(ctx, (float *)da, (const float *)db, 64) == WF_E_BAD_ARGUMENT,
          "a kernel writing a pending h2d's range is refused");
    CHECK(ops->add(ctx, (float *)db, (const float *)da + 8, 8) == WF_E_BAD_ARGUMENT,
          "a kernel reading a pending h2d's range is refused");
    CHECK(ops->copy_d2h(ctx, h, (char *)da + 4, 4) == WF_E_BAD_ARGUMENT,
          "a copy of a pending h2d's range is refused");
    wf_standin_counters_t c = wf_standin_counters(ctx);
    CHECK(c.xfer_conflicts == 3 && c.xfer_overlaps >= 3, "conflicts %llu overlaps %llu",
          (unsigned long long)c.xfer_conflicts, (unsigned long long)c.xfer_overlaps);
    CHECK(ops->add(ctx, (float *)db, (const float *)db, 64) == WF_OK,
          "a kernel elsewhere runs meanwhile");
    wf_standin_xfer_hold(ctx, false);
    CHECK(ops->xfer_wait(ctx, t) == WF_OK, "xfer_wait");
    CHECK(ops->copy_d2h(ctx, h, da, sizeof h) == WF_OK && memcmp(h, a, sizeof a) == 0,
          "h2d data");
    /* a d2h held pending: the host buffer is not written before the wait */
    memset(h, 0x77, sizeof h);
    wf_standin_xfer_hold(ctx, true);
    CHECK(ops->xfer_mark(ctx, &m) == WF_OK && m, "xfer_mark");
    CHECK(ops->xfer_d2h(ctx, h, da, sizeof h, m, &t) == WF_OK, "xfer_d2h after a mark");
    CHECK(((unsigned char *)h)[0] == 0x77, "d2h host buffer untouched while pending");
    CHECK(ops->add(ctx, (float *)db, (const float *)da, 64) == WF_OK,
          "a kernel reading a pending d2h's source runs");
    wf_standin_xfer_hold(ctx, false);
    CHECK(ops->xfer_wait(ctx, t) == WF_OK && memcmp(h, a, sizeof a) == 0, "d2h data");
    /* refusals release `after`; an injected failure; NULL */
    CHECK(ops->xfer_mark(ctx, &m) == WF_OK, "xfer_mark");
    CHECK(ops->xfer_d2h(ctx, h, h, sizeof h, m, &t) == WF_E_BAD_ARGUMENT,
          "xfer_d2h from host memory refused");
    CHECK(ops->xfer_h2d(ctx, (char *)db + 200, a, 64, NULL, &t) == WF_E_BAD_ARGUMENT,
          "xfer_h2d past the allocation refused");
    wf_standin_xfer_fail(ctx, 2);
    wf_xfer_t *t1 = NULL, *t2 = NULL;
    CHECK(ops->xfer_d2h(ctx, h, da, 16, NULL, &t1) == WF_OK &&
              ops->xfer_d2h(ctx, h + 8, da, 16, NULL, &t2) == WF_OK,
          "two transfers");
    CHECK(ops->xfer_wait(ctx, t1) == WF_OK, "the first is fine");
    CHECK(ops->xfer_wait(ctx, t2) == WF_E_INTERNAL, "the second fails at its wait");
    CHECK(ops->xfer_wait(ctx, NULL) == WF_OK, "xfer_wait(NULL)");
    /* dev_reset with a transfer pending: counted (and waited for) */
    wf_standin_counters_t c0 = wf_standin_counters(ctx);
    wf_standin_xfer_hold(ctx, true);
    CHECK(ops->xfer_h2d(ctx, da, a, sizeof a, NULL, &t) == WF_OK, "xfer_h2d");
    ops->dev_reset(ctx); /* releases the hold, waits */
    c = wf_standin_counters(ctx);
    CHECK(c.xfer_conflicts == c0.xfer_conflicts + 1, "dev_reset with a pending transfer counted");
    CHECK(ops->xfer_wait(ctx, t) == WF_OK, "xfer_wait after dev_reset");
    CHECK(c.xfer_d2h == 3 && c.xfer_h2d == 2, "transfers counted: %llu d2h %llu h2d",
          (unsigned long long)c.xfer_d2h, (unsigned long long)c.xfer_h2d);
    /* a pending transfer at ctx_destroy: waited for there */
    CHECK(ops->dev_alloc(ctx, sizeof a, &da) == WF_OK, "dev_alloc");
    wf_standin_xfer_hold(ctx, true);
    CHECK(ops->xfer_h2d(ctx, da, a, sizeof a, NULL, &t) == WF_OK, "xfer_h2d at the end");
    ops->ctx_destroy(&ctx);
    CHECK(ctx == NULL, "ctx_destroy");
    printf("  stand-in transfer stream: pending ranges refused, early reads stale, "
           "failures at the wait\n");
}

/* wf_comm_staged_wrap's refusals (inner is destroyed each time). */
static void check_bad_arguments(void)
{
    const wf_backend_ops_t *ops = wf_standin_dev_backend();
    wf_backend_ctx_t *ctx = NULL;
    wf_comm_host_world_t *w = NULL;
    wf_comm_t *c = (wf_comm_t *)&c, *inner = NULL;
    CHECK(ops->ctx_new(0, 1 << 20, &ctx) == WF_OK, "stand-in ctx_new");
    CHECK(wf_comm_staged_wrap(NULL, ops, ctx, &c) == WF_E_BAD_ARGUMENT,
          "wrap(NULL inner)");
    CHECK(wf_comm_host_world_new(1, &w) == WF_OK, "world_new");
    /* a rank's handle is given out once and each refusal destroys it:
     * every case takes a fresh one-rank world */
    const wf_backend_ops_t *cpu = wf_backend_cpu(); /* no copies */
    CHECK(wf_comm_host_init(w, 0, &inner) == WF_OK, "host_init");
    CHECK(wf_comm_staged_wrap(inner, cpu, ctx, &c) == WF_E_BAD_ARGUMENT,
          "wrap(ops without copies)");
    wf_comm_host_world_unref(&w);
    CHECK(wf_comm_host_world_new(1, &w) == WF_OK, "world_new");
    CHECK(wf_comm_host_init(w, 0, &inner) == WF_OK, "host_init");
    CHECK(wf_comm_staged_wrap(inner, NULL, ctx, &c) == WF_E_BAD_ARGUMENT,
          "wrap(NULL ops)");
    wf_comm_host_world_unref(&w);
    CHECK(wf_comm_host_world_new(1, &w) == WF_OK, "world_new");
    CHECK(wf_comm_host_init(w, 0, &inner) == WF_OK, "host_init");
    CHECK(wf_comm_staged_wrap_ex(inner, ops, ctx, 2u, &c) == WF_E_BAD_ARGUMENT,
          "unknown flag");
    wf_comm_host_world_unref(&w);
    CHECK(wf_comm_host_world_new(1, &w) == WF_OK, "world_new");
    CHECK(wf_comm_host_init(w, 0, &inner) == WF_OK, "host_init");
    CHECK(wf_comm_staged_wrap(inner, ops, NULL, &c) == WF_E_BAD_ARGUMENT,
          "wrap(NULL ctx)");
    wf_comm_host_world_unref(&w);
    /* one rank: wrap works, a self exchange goes through the copies */
    CHECK(wf_comm_host_world_new(1, &w) == WF_OK, "world_new");
    CHECK(wf_comm_host_init(w, 0, &inner) == WF_OK, "host_init");
    c = NULL;
    CHECK(wf_comm_staged_wrap(inner, ops, ctx, &c) == WF_OK && c, "wrap");
    if (c) {
        CHECK(strcmp(wf_comm_backend(c), "staged(host)") == 0, "name %s",
              wf_comm_backend(c));
        uint8_t in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
        void *ds = NULL, *dr = NULL;
        CHECK(ops->dev_alloc(ctx, 5, &ds) == WF_OK &&
                  ops->dev_alloc(ctx, 5, &dr) == WF_OK,
              "dev_alloc");
        ops->copy_h2d(ctx, ds, in, 5);
        CHECK(wf_comm_allgather(c, ds, dr, 5) == WF_OK, "1-rank allgather");
        ops->copy_d2h(ctx, out, dr, 5);
        CHECK(memcmp(in, out, 5) == 0, "1-rank allgather data");
        wf_comm_destroy(&c);
        CHECK(c == NULL, "destroy nulls");
    }
    wf_comm_host_world_unref(&w);
    ops->ctx_destroy(&ctx);
    CHECK(ctx == NULL, "ctx_destroy nulls");
}

/* The stand-in's own ops, once: the device entries the wrapper does not
 * use (attention on a head range, lse_merge, convert, fill_f32) against
 * the CPU backend and tensor.h on host buffers, and a host pointer
 * refused as a device one. */
static void check_standin(void)
{
    const wf_backend_ops_t *ops = wf_standin_dev_backend(), *cpu = wf_backend_cpu();
    wf_backend_ctx_t *ctx = NULL, *cctx = NULL;
    if (ops->ctx_new(0, 1 << 20, &ctx) != WF_OK ||
        cpu->ctx_new(0, 0, &cctx) != WF_OK) {
        CHECK(0, "ctx_new");
        return;
    }
    /* q (1, 3, 2, 4), k / v (1, 5, 1, 4), all f32; heads [1, 2) */
    float q[24], k[20], v[20], out[24], lse[6], ref[24], rlse[6];
    for (int i = 0; i < 24; i++)
        q[i] = (float)val(1, 0, (size_t)i) * 1e-6f;
    for (int i = 0; i < 20; i++) {
        k[i] = (float)val(2, 0, (size_t)i) * 1e-6f;
        v[i] = (float)val(3, 0, (size_t)i) * 1e-6f;
    }
    for (int i = 0; i < 24; i++)
        out[i] = 7.0f;
    for (int i = 0; i < 6; i++)
        lse[i] = 7.0f;
    wf_attn_params_t p = {.B = 1, .Sq = 3, .Skv = 5, .Hq = 2, .Hkv = 1, .D = 4,
                          .h_begin = 0, .h_end = 2, .scale = 0.5f,
                          .q = q, .k = k, .v = v, .out = ref, .lse = rlse};
    void *ws = aligned_alloc(64, (cpu->attention_workspace(&p) + 63) / 64 * 64);
    CHECK(cpu->attention(cctx, &p, ws) == WF_OK, "cpu attention");
    free(ws);
    void *dq, *dk, *dv, *dout, *dlse;
    ops->dev_alloc(ctx, sizeof q, &dq);
    ops->dev_alloc(ctx, sizeof k, &dk);
    ops->dev_alloc(ctx, sizeof v, &dv);
    ops->dev_alloc(ctx, sizeof out, &dout);
    ops->dev_alloc(ctx, sizeof lse, &dlse);
    CHECK(((uintptr_t)dk & 255) == 0, "dev_alloc alignment");
    ops->copy_h2d(ctx, dq, q, sizeof q);
    ops->copy_h2d(ctx, dk, k, sizeof k);
    ops->copy_h2d(ctx, dv, v, sizeof v);
    ops->copy_h2d(ctx, dout, out, sizeof out);
    ops->copy_h2d(ctx, dlse, lse, sizeof lse);
    p.h_begin = 1;
    p.q = dq, p.k = dk, p.v = dv, p.out = dout, p.lse = dlse;
    CHECK(ops->attention_workspace(&p) == 0, "workspace 0");
    CHECK(ops->attention(ctx, &p, NULL) == WF_OK, "stand-in attention");
    ops->copy_d2h(ctx, out, dout, sizeof out);
    ops->copy_d2h(ctx, lse, dlse, sizeof lse);
    for (int s = 0; s < 3; s++) {
        CHECK(memcmp(out + s * 8 + 4, ref + s * 8 + 4, 16) == 0 &&
                  lse[s * 2 + 1] == rlse[s * 2 + 1],
              "attention head 1, row %d", s);
        CHECK(out[s * 8] == 7.0f && out[s * 8 + 3] == 7.0f &&
                  lse[s * 2] == 7.0f,
              "attention head 0 untouched, row %d", s);
    }
    /* lse_merge, F32 rounding: row 0 part empty, row 1 acc empty, row 2
     * both (one row of D = 4) */
    float ao[12], al[3] = {-INFINITY, -INFINITY, 0.25f}, po[12],
          pl[3] = {-INFINITY, 0.5f, 1.0f}, eo[12], el[3];
    for (int i = 0; i < 12; i++) {
        ao[i] = (float)i;
        po[i] = (float)(20 - i) * 0.5f;
    }
    memcpy(eo, ao, sizeof ao);
    memcpy(el, al, sizeof al);
    memcpy(eo + 4, po + 4, 16);
    el[1] = pl[1];
    float w = 1.0f / (1.0f + expf(al[2] - pl[2]));
    for (int d = 8; d < 12; d++)
        eo[d] = ao[d] - w * (ao[d] - po[d]);
    el[2] = fmaxf(al[2], pl[2]) + log1pf(expf(-fabsf(al[2] - pl[2])));
    void *dao, *dal, *dpo, *dpl;
    ops->dev_alloc(ctx, sizeof ao, &dao);
    ops->dev_alloc(ctx, sizeof al, &dal);
    ops->dev_alloc(ctx, sizeof po, &dpo);
    ops->dev_alloc(ctx, sizeof pl, &dpl);
    ops->copy_h2d(ctx, dao, ao, sizeof ao);
    ops->copy_h2d(ctx, dal, al, sizeof al);
    ops->copy_h2d(ctx, dpo, po, sizeof po);
    ops->copy_h2d(ctx, dpl, pl, sizeof pl);
    CHECK(ops->lse_merge(ctx, dao, dal, dpo, dpl, 3, 4, WF_DTYPE_F32) == WF_OK,
          "lse_merge");
    ops->copy_d2h(ctx, ao, dao, sizeof ao);
    ops->copy_d2h(ctx, al, dal, sizeof al);
    CHECK(memcmp(ao, eo, sizeof eo) == 0 && memcmp(al, el, sizeof el) == 0,
          "lse_merge values");
    /* convert f32 -> bf16, fill_f32 */
    float cv[3] = {1.0f / 3.0f, -2.5e7f, 1e-3f};
    uint16_t bf[3];
    void *dcv, *dbf;
    ops->dev_alloc(ctx, sizeof cv, &dcv);
    ops->dev_alloc(ctx, sizeof bf, &dbf);
    ops->copy_h2d(ctx, dcv, cv, sizeof cv);
    CHECK(ops->convert(ctx, dbf, WF_DTYPE_BF16, dcv, WF_DTYPE_F32, 3) == WF_OK,
          "convert");
    ops->copy_d2h(ctx, bf, dbf, sizeof bf);
    for (int i = 0; i < 3; i++)
        CHECK(bf[i] == wf_f32_to_bf16(cv[i]), "convert %d", i);
    CHECK(ops->fill_f32(ctx, dcv, -INFINITY, 3) == WF_OK, "fill_f32");
    ops->copy_d2h(ctx, cv, dcv, sizeof cv);
    CHECK(cv[0] == -INFINITY && cv[2] == -INFINITY, "fill_f32 values");
    CHECK(ops->copy_d2h(ctx, bf, cv, sizeof bf) == WF_E_BAD_ARGUMENT,
          "a host pointer is not a device one");
    wf_standin_counters_t c = wf_standin_counters(ctx);
    CHECK(c.kernels == 4, "kernels counted: %llu", (unsigned long long)c.kernels);
    ops->dev_reset(ctx);
    void *big = NULL;
    CHECK(ops->dev_alloc(ctx, (1 << 20) + 1, &big) == WF_E_NO_MEMORY && !big,
          "arena limit");
    ops->ctx_destroy(&ctx);
    cpu->ctx_destroy(&cctx);
}

int main(void)
{
    double t0 = now_s();
    check_standin();
    check_xfer_standin();
    check_bad_arguments();
    noxfer_ops = *wf_standin_dev_backend();
    noxfer_ops.xfer_mark = NULL;
    noxfer_ops.xfer_d2h = NULL;
    noxfer_ops.xfer_h2d = NULL;
    noxfer_ops.xfer_wait = NULL;
    pin_ops = *wf_standin_dev_backend();
    pin_ops.host_register = count_pin;
    pin_ops.host_unregister = count_unpin;
    static const char *mode_name[] = {"overlapped", "WF_COMM_STAGED_SYNC",
                                      "backend without xfer_*"};
    for (int m = MODE_OVERLAP; m <= MODE_NO_XFER; m++) {
        mode = (stage_mode_t)m;
        for (int n = 2; n <= 4; n++) {
            double ts = now_s();
            world_overlaps = 0;
            int f = run_world(n, NULL);
            CHECK(f == 0, "every op (%s), %d ranks: %d failed expectations", mode_name[m],
                  n, f);
            printf("  every op x %d iterations + ring of %d steps on device buffers, "
                   "%d ranks, %s: %s, %llu kernel accesses during transfers (%.2f s)\n",
                   ITERS, RING_ROUNDS * n, n, mode_name[m], f ? "FAIL" : "ok",
                   (unsigned long long)world_overlaps, now_s() - ts);
        }
    }
    /* the overlapped runs (9 ranks in all, each some 400 isend / irecv):
     * a handful of mirrors pinned per handle, every one unpinned */
    long np = atomic_load(&pins), nu = atomic_load(&unpins);
    CHECK(np > 0 && np == nu && np <= 9 * 24, "mirrors pinned %ld, unpinned %ld", np, nu);
    printf("  request mirrors pinned once each: %ld host_register calls for 9 ranks, "
           "%ld unregistered\n", np, nu);
    mode = MODE_OVERLAP;
    for (int n = 2; n <= 4; n++)
        for (int k = 0; k <= 4; k++)
            check_abort(n, k);
    printf("test_comm_staged: %d passed, %d failed (%.2f s)\n", passed, failed,
           now_s() - t0);
    return failed ? 1 : 0;
}
