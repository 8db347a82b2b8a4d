/* test_p2p_plan.c — the point-to-point plans of daemon/comm/p2p_plan.h,
 * which comm_nccl and comm_zmq run: uneven all-to-allv / all-gatherv /
 * scatterv / gatherv and the even all-to-all / all-gather, every root,
 * with zero counts, checked by simulating every rank's plan against the
 * others' on host buffers (each send matched with its peer's receive in
 * order, sizes equal, the bytes landing where comm.h says), and the
 * even-all-gather test. Pure functions: runs in every build. */
#include "comm/p2p_plan.h"
#include "support/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 5, CAP = 4096 };

typedef struct rankplan {
    wf_p2p_op_t ops[2 * N];
    size_t nops;
    wf_p2p_copy_t self;
} rankplan_t;

/* Check that rank r's plan is in ring order around `center` (r itself,
 * or the root of a rooted plan): the i-th send goes to center + i + 1,
 * the i-th receive comes from center - i - 1 (rooted: center + i + 1). */
static void check_order(int r, const rankplan_t *p, int center, int rooted)
{
    int ns = 0, nr = 0;
    for (size_t i = 0; i < p->nops; i++) {
        const wf_p2p_op_t *o = &p->ops[i];
        CHECK_TRUE(o->peer != r && o->peer >= 0 && o->peer < N);
        if (o->is_send) {
            CHECK_TRUE(o->peer == (center + ++ns) % N || (rooted && r != center));
        } else {
            int s = ++nr;
            CHECK_TRUE(o->peer == (rooted ? (center + s) % N : (center - s + N) % N) ||
                       (rooted && r != center));
        }
    }
}

/* Simulate the plans of n ranks: the local copy, then every send into the
 * matching receive (the k-th send r -> p is the k-th receive at p from
 * r); every receive must have its send. Zero-byte operations must match
 * like the others (comm_zmq sends them). */
static void execute(int n, rankplan_t *pl, unsigned char **send,
                    unsigned char **recv)
{
    for (int r = 0; r < n; r++) {
        if (pl[r].self.bytes)
            memmove(recv[r] + pl[r].self.dst, send[r] + pl[r].self.src,
                    pl[r].self.bytes);
        for (size_t i = 0; i < pl[r].nops; i++) {
            const wf_p2p_op_t *o = &pl[r].ops[i];
            CHECK_TRUE(o->peer != r && o->peer >= 0 && o->peer < n);
            int k = 0;
            for (size_t j = 0; j < i; j++)
                k += pl[r].ops[j].is_send == o->is_send &&
                     pl[r].ops[j].peer == o->peer;
            const wf_p2p_op_t *m = NULL;
            for (size_t j = 0; j < pl[o->peer].nops; j++) {
                const wf_p2p_op_t *q = &pl[o->peer].ops[j];
                if (q->is_send != o->is_send && q->peer == r && k-- == 0) {
                    m = q;
                    break;
                }
            }
            CHECK_TRUE(m != NULL);
            if (!m)
                continue;
            CHECK_TRUE(m->bytes == o->bytes);
            if (o->is_send && o->bytes)
                memcpy(recv[o->peer] + m->offset, send[r] + o->offset,
                       o->bytes);
        }
    }
}

static unsigned char sb[N][CAP], rb[N][CAP];
static unsigned char *sendp[N], *recvp[N];
static rankplan_t pl[N];

static void test_alltoallv(void)
{
    /* rank i sends (i + 2 j) % 4 * 13 bytes to j (some zero), with gaps */
    size_t sc[N][N], sd[N][N], rc[N][N], rd[N][N];
    for (int i = 0; i < N; i++) {
        size_t o = 0;
        for (int j = 0; j < N; j++) {
            sc[i][j] = (size_t)((i + 2 * j) % 4) * 13;
            sd[i][j] = o;
            o += sc[i][j] + 3;
        }
    }
    for (int j = 0; j < N; j++) {
        size_t o = 0;
        for (int i = 0; i < N; i++) {
            rc[j][i] = sc[i][j];
            rd[j][i] = o;
            o += rc[j][i];
        }
    }
    memset(rb, 0, sizeof rb);
    for (int r = 0; r < N; r++) {
        pl[r].nops = wf_p2p_plan_alltoallv(r, N, sc[r], sd[r], rc[r], rd[r],
                                           pl[r].ops, &pl[r].self);
        CHECK_TRUE(pl[r].nops == 2 * (N - 1)); /* zero counts included */
        check_order(r, &pl[r], r, 0);
    }
    execute(N, pl, sendp, recvp);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < N; i++)
            CHECK_TRUE(memcmp(rb[j] + rd[j][i], sb[i] + sd[i][j], rc[j][i]) == 0);
    /* the first operation is the send of step 1, to rank + 1 */
    CHECK_TRUE(pl[0].ops[0].is_send && pl[0].ops[0].peer == 1);
}

static void test_alltoall(void)
{
    const size_t B = 40;
    memset(rb, 0, sizeof rb);
    for (int r = 0; r < N; r++) {
        pl[r].nops = wf_p2p_plan_alltoall(r, N, B, pl[r].ops, &pl[r].self);
        CHECK_TRUE(pl[r].nops == 2 * (N - 1));
        check_order(r, &pl[r], r, 0);
    }
    execute(N, pl, sendp, recvp);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < N; i++)
            CHECK_TRUE(memcmp(rb[j] + (size_t)i * B, sb[i] + (size_t)j * B, B) == 0);
}

static void test_allgather(void)
{
    /* uneven: rank j contributes 7 j bytes (rank 0 none) */
    size_t cnt[N], dsp[N], o = 0;
    for (int j = 0; j < N; j++) {
        cnt[j] = (size_t)(7 * j);
        dsp[j] = o;
        o += cnt[j];
    }
    memset(rb, 0, sizeof rb);
    for (int r = 0; r < N; r++) {
        pl[r].nops = wf_p2p_plan_allgatherv(r, N, cnt[r], cnt, dsp, pl[r].ops,
                                            &pl[r].self);
        check_order(r, &pl[r], r, 0);
    }
    execute(N, pl, sendp, recvp);
    for (int r = 0; r < N; r++)
        for (int j = 0; j < N; j++)
            CHECK_TRUE(memcmp(rb[r] + dsp[j], sb[j], cnt[j]) == 0);
    /* even */
    const size_t B = 24;
    memset(rb, 0, sizeof rb);
    for (int r = 0; r < N; r++)
        pl[r].nops = wf_p2p_plan_allgather(r, N, B, pl[r].ops, &pl[r].self);
    execute(N, pl, sendp, recvp);
    for (int r = 0; r < N; r++)
        for (int j = 0; j < N; j++)
            CHECK_TRUE(memcmp(rb[r] + (size_t)j * B, sb[j], B) == 0);
    /* which all-gathervs are even */
    size_t even = 0;
    CHECK_TRUE(!wf_p2p_allgather_even(N, cnt, dsp, &even));
    size_t ec[N], ed[N];
    for (int j = 0; j < N; j++) {
        ec[j] = 64;
        ed[j] = 64 * (size_t)j;
    }
    CHECK_TRUE(wf_p2p_allgather_even(N, ec, ed, &even) && even == 64);
    ed[2] += 1;
    CHECK_TRUE(!wf_p2p_allgather_even(N, ec, ed, &even));
    CHECK_TRUE(!wf_p2p_allgather_even(0, ec, ed, &even));
}

static void test_rooted(void)
{
    size_t cnt[N], dsp[N], o = 0;
    for (int j = 0; j < N; j++) {
        cnt[j] = (size_t)(5 * ((j + 1) % 3)); /* one zero every three */
        dsp[j] = o;
        o += cnt[j] + 2;
    }
    for (int root = 0; root < N; root++) {
        memset(rb, 0, sizeof rb);
        for (int r = 0; r < N; r++) {
            pl[r].nops = wf_p2p_plan_scatterv(r, N, root,
                                              r == root ? cnt : NULL,
                                              r == root ? dsp : NULL, cnt[r],
                                              pl[r].ops, &pl[r].self);
            CHECK_TRUE(pl[r].nops == (r == root ? (size_t)N - 1 : 1));
            check_order(r, &pl[r], root, 1);
        }
        execute(N, pl, sendp, recvp);
        for (int r = 0; r < N; r++)
            CHECK_TRUE(memcmp(rb[r], sb[root] + dsp[r], cnt[r]) == 0);
        memset(rb, 0, sizeof rb);
        for (int r = 0; r < N; r++) {
            pl[r].nops = wf_p2p_plan_gatherv(r, N, root, cnt[r],
                                             r == root ? cnt : NULL,
                                             r == root ? dsp : NULL,
                                             pl[r].ops, &pl[r].self);
            CHECK_TRUE(pl[r].nops == (r == root ? (size_t)N - 1 : 1));
            check_order(r, &pl[r], root, 1);
        }
        execute(N, pl, sendp, recvp);
        for (int j = 0; j < N; j++)
            CHECK_TRUE(memcmp(rb[root] + dsp[j], sb[j], cnt[j]) == 0);
    }
}

/* A group of one: no operations, only the local copy. */
static void test_single(void)
{
    wf_p2p_op_t ops[2];
    wf_p2p_copy_t self;
    size_t c = 9, d = 4;
    CHECK_TRUE(wf_p2p_plan_alltoallv(0, 1, &c, &d, &c, &d, ops, &self) == 0);
    CHECK_TRUE(self.src == 4 && self.dst == 4 && self.bytes == 9);
    CHECK_TRUE(wf_p2p_plan_allgatherv(0, 1, 9, &c, &d, ops, &self) == 0);
    CHECK_TRUE(self.src == 0 && self.dst == 4 && self.bytes == 9);
    CHECK_TRUE(wf_p2p_plan_scatterv(0, 1, 0, &c, &d, 9, ops, &self) == 0);
    CHECK_TRUE(self.src == 4 && self.dst == 0 && self.bytes == 9);
    CHECK_TRUE(wf_p2p_plan_gatherv(0, 1, 0, 9, &c, &d, ops, &self) == 0);
    CHECK_TRUE(self.src == 0 && self.dst == 4 && self.bytes == 9);
}

int main(void)
{
    for (int r = 0; r < N; r++) {
        sendp[r] = sb[r];
        recvp[r] = rb[r];
        for (int i = 0; i < CAP; i++)
            sb[r][i] = (unsigned char)(r * 37 + i * 11);
    }
    test_alltoallv();
    test_alltoall();
    test_allgather();
    test_rooted();
    test_single();
    if (failed) {
        fprintf(stderr, "test_p2p_plan: %d failure(s)\n", failed);
        return 1;
    }
    printf("test_p2p_plan: ok\n");
    return 0;
}
