/* commcheck.c — checked instances of every comm.h op and the bodies
 * built from them, shared by the comm backend tests (see commcheck.h).
 * Backend-neutral: only comm.h and mesh.h. */
#include "support/commcheck.h"

#include "base/mesh.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Same value on every rank for the same arguments. */
uint64_t cc_rnd(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

/* Byte k of the message from src to dst in iteration it. */
uint8_t cc_pat(int src, int dst, int it, size_t k)
{
    return (uint8_t)(src * 131 + dst * 31 + it * 7 + (int)(k % 251) * 13 + 1);
}

/* Uneven per-pair byte count in [0, 40], zero about a quarter of the time. */
size_t cc_cnt(int it, int src, int dst, int salt)
{
    uint64_t r = cc_rnd((uint64_t)it, (uint64_t)src, (uint64_t)dst,
                     (uint64_t)salt);
    return (r & 3) == 0 ? 0 : (size_t)((r >> 8) % 41);
}


/* ---------------------------------------------------------------------- */
/* one checked instance of each op; `it` varies sizes, roots and data      */

int cc_allgather(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t bytes = (size_t)((it * 5) % 17);
    uint8_t *send = malloc(bytes + 1), *recv = malloc((size_t)n * bytes + 1);
    for (size_t k = 0; k < bytes; k++)
        send[k] = cc_pat(me, 0, it, k);
    int inplace = it % 2;
    if (inplace) /* sendbuf is my block of recvbuf */
        memcpy(recv + (size_t)me * bytes, send, bytes);
    EXPECT_OK(wf_comm_allgather(c, inplace ? recv + (size_t)me * bytes : send,
                                recv, bytes));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            EXPECT(recv[(size_t)j * bytes + k] == cc_pat(j, 0, it, k));
    free(send);
    free(recv);
    return fails;
}

int cc_allgatherv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t counts[64], displs[64], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = (it % 7 == 3) ? 0 : cc_cnt(it, j, 0, 1); /* all-zero too */
        displs[j] = total;
        total += counts[j] + CC_GAP;
    }
    uint8_t *send = malloc(counts[me] + 1), *recv = malloc(total + 1);
    for (size_t k = 0; k < counts[me]; k++)
        send[k] = cc_pat(me, 0, it, k);
    memset(recv, CC_SENT, total);
    EXPECT_OK(wf_comm_allgatherv(c, send, counts[me], recv, counts, displs));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < counts[j]; k++)
            EXPECT(recv[displs[j] + k] == cc_pat(j, 0, it, k));
        for (size_t k = 0; k < CC_GAP; k++)
            EXPECT(recv[displs[j] + counts[j] + k] == CC_SENT);
    }
    free(send);
    free(recv);
    return fails;
}

int cc_alltoall(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t bytes = (size_t)(it % 9);
    uint8_t *send = malloc((size_t)n * bytes + 1);
    uint8_t *recv = malloc((size_t)n * bytes + 1);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            send[(size_t)j * bytes + k] = cc_pat(me, j, it, k);
    EXPECT_OK(wf_comm_alltoall(c, send, recv, bytes));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < bytes; k++)
            EXPECT(recv[(size_t)j * bytes + k] == cc_pat(j, me, it, k));
    free(send);
    free(recv);
    return fails;
}

int cc_alltoallv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t sc[64], sd[64], rc[64], rd[64], stot = 0, rtot = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = cc_cnt(it, me, j, 2);
        rc[j] = cc_cnt(it, j, me, 2);
    }
    /* send blocks in reverse peer order, to exercise displacements */
    for (int j = n - 1; j >= 0; j--) {
        sd[j] = stot;
        stot += sc[j] + CC_GAP;
    }
    for (int j = 0; j < n; j++) {
        rd[j] = rtot;
        rtot += rc[j] + CC_GAP;
    }
    uint8_t *send = malloc(stot + 1), *recv = malloc(rtot + 1);
    memset(send, CC_SENT, stot);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            send[sd[j] + k] = cc_pat(me, j, it, k);
    memset(recv, CC_SENT, rtot);
    EXPECT_OK(wf_comm_alltoallv(c, send, sc, sd, recv, rc, rd));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    for (int j = 0; j < n; j++) {
        for (size_t k = 0; k < rc[j]; k++)
            EXPECT(recv[rd[j] + k] == cc_pat(j, me, it, k));
        for (size_t k = 0; k < CC_GAP; k++)
            EXPECT(recv[rd[j] + rc[j] + k] == CC_SENT);
    }
    free(send);
    free(recv);
    return fails;
}

int cc_allreduce(wf_comm_t *c, int it, size_t big)
{
    const size_t counts[] = {0, 1, 2, 7, 1001, big};
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
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
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

int cc_broadcast(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    int root = it % n;
    size_t bytes = (size_t)((1 + it * 3) % 50);
    uint8_t *buf = malloc(bytes + 1);
    for (size_t k = 0; k < bytes; k++)
        buf[k] = me == root ? cc_pat(root, 9, it, k) : CC_SENT;
    EXPECT_OK(wf_comm_broadcast(c, buf, bytes, root));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    for (size_t k = 0; k < bytes; k++)
        EXPECT(buf[k] == cc_pat(root, 9, it, k));
    free(buf);
    return fails;
}

int cc_scatterv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    int root = (it + 1) % n;
    size_t counts[64], displs[64], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = cc_cnt(it, root, j, 3);
        displs[j] = total;
        total += counts[j] + CC_GAP;
    }
    uint8_t *send = NULL;
    if (me == root) {
        send = malloc(total + 1);
        for (int j = 0; j < n; j++)
            for (size_t k = 0; k < counts[j]; k++)
                send[displs[j] + k] = cc_pat(root, j, it, k);
    }
    uint8_t *recv = malloc(counts[me] + CC_GAP);
    memset(recv, CC_SENT, counts[me] + CC_GAP);
    EXPECT_OK(wf_comm_scatterv(c, send, me == root ? counts : NULL,
                               me == root ? displs : NULL, recv, counts[me],
                               root));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    for (size_t k = 0; k < counts[me]; k++)
        EXPECT(recv[k] == cc_pat(root, me, it, k));
    for (size_t k = 0; k < CC_GAP; k++)
        EXPECT(recv[counts[me] + k] == CC_SENT);
    free(send);
    free(recv);
    return fails;
}

int cc_gatherv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    int root = (it + 2) % n;
    size_t counts[64], displs[64], total = 0;
    for (int j = 0; j < n; j++) {
        counts[j] = cc_cnt(it, j, root, 4);
        displs[j] = total;
        total += counts[j] + CC_GAP;
    }
    uint8_t *send = malloc(counts[me] + 1);
    for (size_t k = 0; k < counts[me]; k++)
        send[k] = cc_pat(me, root, it, k);
    uint8_t *recv = NULL;
    if (me == root) {
        recv = malloc(total + 1);
        memset(recv, CC_SENT, total);
    }
    EXPECT_OK(wf_comm_gatherv(c, send, counts[me], recv,
                              me == root ? counts : NULL,
                              me == root ? displs : NULL, root));
    EXPECT_OK(wf_comm_sync(c)); /* before the host reads (comm.h "Device comms") */
    if (me == root) {
        for (int j = 0; j < n; j++) {
            for (size_t k = 0; k < counts[j]; k++)
                EXPECT(recv[displs[j] + k] == cc_pat(j, root, it, k));
            for (size_t k = 0; k < CC_GAP; k++)
                EXPECT(recv[displs[j] + counts[j] + k] == CC_SENT);
        }
    }
    free(send);
    free(recv);
    return fails;
}

int cc_barrier(wf_comm_t *c, cc_shared_t *sh, int *round)
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
int cc_sendrecv(wf_comm_t *c, int it)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    size_t bytes = (size_t)(it % 5) * 7;
    uint8_t out[64], in[64];
    for (size_t k = 0; k < bytes; k++)
        out[k] = cc_pat(me, me ^ 1, it, k);
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
        EXPECT_OK(wf_comm_sync(c));
        for (size_t k = 0; k < bytes; k++)
            EXPECT(in[k] == cc_pat(peer, me, it, k));
    }
    /* to myself inside a group call */
    memset(in, 0, sizeof in);
    EXPECT_OK(wf_comm_group_start(c));
    EXPECT_OK(wf_comm_recv(c, in, bytes, me));
    EXPECT_OK(wf_comm_send(c, out, bytes, me));
    EXPECT_OK(wf_comm_group_end(c));
    EXPECT_OK(wf_comm_sync(c));
    for (size_t k = 0; k < bytes; k++)
        EXPECT(in[k] == out[k]);
    return fails;
}

void cc_mismatched_counts(wf_comm_t *c, size_t sc[8], size_t sd[8],
                          size_t rc[8], size_t rd[8])
{
    int me = wf_comm_rank(c), n = wf_comm_size(c);
    for (int j = 0; j < n; j++) {
        sc[j] = rc[j] = 2;
        sd[j] = rd[j] = (size_t)j * 4;
    }
    if (me == 0)
        rc[n - 1] = 3; /* rank 0 expects 3 bytes from n-1, which sends 2 */
}

int cc_local_refusals(wf_comm_t *c)
{
    int fails = 0, n = wf_comm_size(c);
    uint8_t sbuf[1] = {0};
    /* collective inside a group call is refused locally */
    EXPECT_OK(wf_comm_group_start(c));
    EXPECT(wf_comm_barrier(c) == WF_E_BAD_ARGUMENT);
    EXPECT_OK(wf_comm_group_end(c));
    EXPECT(wf_comm_group_end(c) == WF_E_BAD_ARGUMENT);
    EXPECT(wf_comm_send(c, sbuf, 1, n) == WF_E_BAD_ARGUMENT);
    return fails;
}

int cc_aborted_refusals(wf_comm_t *c)
{
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t buf[1] = {0};
    EXPECT(wf_comm_barrier(c) == WF_E_ABORTED);
    EXPECT(wf_comm_send(c, buf, 1, (me + 1) % n) == WF_E_ABORTED);
    wf_comm_req_t *r = NULL;
    EXPECT(wf_comm_irecv(c, buf, 1, (me + 1) % n, &r) == WF_E_ABORTED);
    wf_comm_t *x = NULL;
    EXPECT(wf_comm_split(c, 0, 0, &x) == WF_E_ABORTED && x == NULL);
    return fails;
}

/* Op number `op` of the CC_OP_N (then sh->extra, when set). */
static int run_op(wf_comm_t *c, cc_shared_t *sh, int op, int it, int *round)
{
    switch (op) {
    case 0: return cc_allgather(c, it);
    case 1: return cc_allgatherv(c, it);
    case 2: return cc_alltoall(c, it);
    case 3: return cc_alltoallv(c, it);
    case 4: return cc_allreduce(c, it, sh->allreduce_big);
    case 5: return cc_broadcast(c, it);
    case 6: return cc_scatterv(c, it);
    case 7: return cc_gatherv(c, it);
    case 8: return cc_barrier(c, sh, round);
    case 9: return cc_sendrecv(c, it);
    default: return sh->extra(c, it);
    }
}

static int n_ops(const cc_shared_t *sh)
{
    return CC_OP_N + (sh->extra != NULL);
}

/* Every op, sh->iters times, each with varying sizes. */
int cc_body_every_op(wf_comm_t *c, void *arg)
{
    cc_shared_t *sh = arg;
    int fails = 0, round = 0;
    for (int it = 0; it < sh->iters; it++)
        for (int op = 0; op < n_ops(sh); op++)
            fails += run_op(c, sh, op, it, &round);
    return fails;
}

/* A random sequence of ops, the same on every rank (shared seed). */
int cc_body_mixed(wf_comm_t *c, void *arg)
{
    cc_shared_t *sh = arg;
    int fails = 0, round = 0;
    for (int i = 0; i < sh->iters; i++) {
        int op = (int)(cc_rnd(77, (uint64_t)i, 0, 0) % n_ops(sh));
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
        if (buf[k] != cc_pat(owner, 0, 0, k)) {
            fails++;
            break;
        }
    return fails;
}

/* n steps of send-to-next / recv-from-prev in group calls: after step s
 * the buffer holds the shard of rank (me - s - 1) mod n. */
int cc_body_ring_grouped(wf_comm_t *c, void *arg)
{
    (void)arg;
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t *cur = malloc(SHARD), *nxt = malloc(SHARD);
    for (size_t k = 0; k < SHARD; k++)
        cur[k] = cc_pat(me, 0, 0, k);
    for (int round = 0; round < 3; round++) {
        for (int s = 0; s < n; s++) {
            EXPECT_OK(wf_comm_group_start(c));
            EXPECT_OK(wf_comm_send(c, cur, SHARD, (me + 1) % n));
            EXPECT_OK(wf_comm_recv(c, nxt, SHARD, (me - 1 + n) % n));
            EXPECT_OK(wf_comm_group_end(c));
            EXPECT_OK(wf_comm_sync(c));
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
int cc_body_ring_overlap(wf_comm_t *c, void *arg)
{
    (void)arg;
    int fails = 0, me = wf_comm_rank(c), n = wf_comm_size(c);
    uint8_t *cur = malloc(SHARD), *nxt = malloc(SHARD);
    for (size_t k = 0; k < SHARD; k++)
        cur[k] = cc_pat(me, 0, 0, k);
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
int cc_body_split_mesh(wf_comm_t *c, void *arg)
{
    cc_shared_t *sh = arg;
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
        EXPECT_OK(wf_comm_sync(sub[i]));
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
                EXPECT_OK(wf_comm_sync(sub[i]));
                for (int j = 0; j < size[i]; j++)
                    e += (float)(members[i][j] + 1);
                EXPECT(s == e);
                break;
            }
            case 1: gfails = cc_alltoallv(sub[i], it); break;
            case 2: gfails = cc_allgatherv(sub[i], it); break;
            default: gfails = cc_gatherv(sub[i], it); break;
            }
            fails += gfails;
        }
    }
    /* a split of a split, key-reversed: ranks come out in reverse */
    wf_comm_t *rev = NULL;
    EXPECT_OK(wf_comm_split(sub[2], 0, -wf_comm_rank(sub[2]), &rev));
    if (rev) {
        EXPECT(wf_comm_rank(rev) == size[2] - 1 - index[2]);
        fails += cc_alltoallv(rev, 5);
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
            fails += cc_allreduce(even, 4, sh->allreduce_big);
        wf_comm_destroy(&even);
    }
    for (int i = 0; i < 3; i++)
        wf_comm_destroy(&sub[i]);
    /* the world handle still works after its sub-groups are gone */
    fails += cc_alltoall(c, 3);
    return fails;
}
