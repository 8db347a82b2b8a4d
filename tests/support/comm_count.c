/* comm_count.c — the counting wrapper of comm_count.h: a backend of
 * comm_impl.h whose every entry counts, then calls the wrapped handle
 * through comm.h. Group calls: the wrapped handle's group starts at the
 * first send / recv posted inside the wrapper's and ends with it. */
#include "support/comm_count.h"

#include "comm/comm_impl.h"

#include <stdlib.h>

typedef struct cnt_comm {
    struct wf_comm base;  /* first: comm_impl.h */
    wf_comm_t *inner;     /* owned */
    uint64_t *n;          /* borrowed counters */
    int in_group;         /* inner's group started */
} cnt_comm_t;

#define C(b) ((cnt_comm_t *)(b))

static const char *const names[WF_CNT_N] = {
    "send", "recv", "group_end", "isend", "irecv", "wait", "test", "barrier",
    "allgather", "allgatherv", "alltoall", "alltoallv", "allreduce", "broadcast",
    "scatterv", "gatherv", "sync", "split",
};

const char *wf_cnt_op_name(wf_cnt_op_t op)
{
    return op < WF_CNT_N ? names[op] : "?";
}

static const struct wf_comm_iface cnt_iface;

static void cn_destroy(wf_comm_t *b)
{
    wf_comm_destroy(&C(b)->inner);
    free(b);
}

static void cn_abort(wf_comm_t *b) { wf_comm_abort(C(b)->inner); }

static wf_status_t cn_sync(wf_comm_t *b)
{
    C(b)->n[WF_CNT_SYNC]++;
    return wf_comm_sync(C(b)->inner);
}

static wf_status_t cn_split(wf_comm_t *b, int color, int key, wf_comm_t **ret)
{
    C(b)->n[WF_CNT_SPLIT]++;
    wf_comm_t *in = NULL;
    wf_status_t st = wf_comm_split(C(b)->inner, color, key, &in);
    if (st != WF_OK || !in) {
        *ret = NULL;
        return st;
    }
    return wf_comm_count_wrap(in, C(b)->n, ret);
}

/* Inside the wrapper's group call: start the inner one once. */
static wf_status_t grouped(cnt_comm_t *c)
{
    if (c->base.group_depth == 0 || c->in_group)
        return WF_OK;
    c->in_group = 1;
    return wf_comm_group_start(c->inner);
}

static wf_status_t cn_send(wf_comm_t *b, const void *buf, size_t bytes, int peer)
{
    C(b)->n[WF_CNT_SEND]++;
    wf_status_t st = grouped(C(b));
    return st == WF_OK ? wf_comm_send(C(b)->inner, buf, bytes, peer) : st;
}

static wf_status_t cn_recv(wf_comm_t *b, void *buf, size_t bytes, int peer)
{
    C(b)->n[WF_CNT_RECV]++;
    wf_status_t st = grouped(C(b));
    return st == WF_OK ? wf_comm_recv(C(b)->inner, buf, bytes, peer) : st;
}

static wf_status_t cn_group_end(wf_comm_t *b)
{
    C(b)->n[WF_CNT_GROUP_END]++;
    if (!C(b)->in_group)
        return WF_OK;
    C(b)->in_group = 0;
    return wf_comm_group_end(C(b)->inner);
}

static wf_status_t cn_isend(wf_comm_t *b, const void *buf, size_t bytes, int peer,
                            wf_comm_req_t **ret)
{
    C(b)->n[WF_CNT_ISEND]++;
    wf_status_t st = grouped(C(b));
    return st == WF_OK ? wf_comm_isend(C(b)->inner, buf, bytes, peer, ret) : st;
}

static wf_status_t cn_irecv(wf_comm_t *b, void *buf, size_t bytes, int peer,
                            wf_comm_req_t **ret)
{
    C(b)->n[WF_CNT_IRECV]++;
    wf_status_t st = grouped(C(b));
    return st == WF_OK ? wf_comm_irecv(C(b)->inner, buf, bytes, peer, ret) : st;
}

static wf_status_t cn_wait(wf_comm_t *b, wf_comm_req_t *req)
{
    C(b)->n[WF_CNT_WAIT]++;
    return wf_comm_wait(C(b)->inner, &req);
}

static wf_status_t cn_test(wf_comm_t *b, wf_comm_req_t *req, int *ret_done)
{
    C(b)->n[WF_CNT_TEST]++;
    return wf_comm_test(C(b)->inner, &req, ret_done);
}

static wf_status_t cn_barrier(wf_comm_t *b)
{
    C(b)->n[WF_CNT_BARRIER]++;
    return wf_comm_barrier(C(b)->inner);
}

static wf_status_t cn_allgatherv(wf_comm_t *b, const void *s, size_t sb, void *r,
                                 const size_t *rc, const size_t *d)
{
    C(b)->n[WF_CNT_ALLGATHERV]++;
    return wf_comm_allgatherv(C(b)->inner, s, sb, r, rc, d);
}

static wf_status_t cn_allgather(wf_comm_t *b, const void *s, void *r, size_t bytes)
{
    C(b)->n[WF_CNT_ALLGATHER]++;
    return wf_comm_allgather(C(b)->inner, s, r, bytes);
}

static wf_status_t cn_alltoallv(wf_comm_t *b, const void *s, const size_t *sc,
                                const size_t *sd, void *r, const size_t *rc, const size_t *rd)
{
    C(b)->n[WF_CNT_ALLTOALLV]++;
    return wf_comm_alltoallv(C(b)->inner, s, sc, sd, r, rc, rd);
}

static wf_status_t cn_alltoall(wf_comm_t *b, const void *s, void *r, size_t bytes)
{
    C(b)->n[WF_CNT_ALLTOALL]++;
    return wf_comm_alltoall(C(b)->inner, s, r, bytes);
}

static wf_status_t cn_allreduce(wf_comm_t *b, const void *s, void *r, size_t count,
                                wf_comm_dtype_t dt, wf_comm_redop_t op)
{
    C(b)->n[WF_CNT_ALLREDUCE]++;
    return wf_comm_allreduce(C(b)->inner, s, r, count, dt, op);
}

static wf_status_t cn_broadcast(wf_comm_t *b, void *buf, size_t bytes, int root)
{
    C(b)->n[WF_CNT_BROADCAST]++;
    return wf_comm_broadcast(C(b)->inner, buf, bytes, root);
}

static wf_status_t cn_scatterv(wf_comm_t *b, const void *s, const size_t *sc,
                               const size_t *d, void *r, size_t rb, int root)
{
    C(b)->n[WF_CNT_SCATTERV]++;
    return wf_comm_scatterv(C(b)->inner, s, sc, d, r, rb, root);
}

static wf_status_t cn_gatherv(wf_comm_t *b, const void *s, size_t sb, void *r,
                              const size_t *rc, const size_t *d, int root)
{
    C(b)->n[WF_CNT_GATHERV]++;
    return wf_comm_gatherv(C(b)->inner, s, sb, r, rc, d, root);
}

static const struct wf_comm_iface cnt_iface = {
    .name = "count",
    .destroy = cn_destroy,
    .abort = cn_abort,
    .sync = cn_sync,
    .split = cn_split,
    .send = cn_send,
    .recv = cn_recv,
    .group_end = cn_group_end,
    .isend = cn_isend,
    .irecv = cn_irecv,
    .wait = cn_wait,
    .test = cn_test,
    .barrier = cn_barrier,
    .allgatherv = cn_allgatherv,
    .allgather = cn_allgather,
    .alltoallv = cn_alltoallv,
    .alltoall = cn_alltoall,
    .allreduce = cn_allreduce,
    .broadcast = cn_broadcast,
    .scatterv = cn_scatterv,
    .gatherv = cn_gatherv,
};

wf_status_t wf_comm_count_wrap(wf_comm_t *inner, uint64_t *counts, wf_comm_t **ret)
{
    cnt_comm_t *c = calloc(1, sizeof *c);
    if (!c) {
        wf_comm_destroy(&inner);
        return WF_E_NO_MEMORY;
    }
    c->base.iface = &cnt_iface;
    c->base.rank = wf_comm_rank(inner);
    c->base.size = wf_comm_size(inner);
    c->inner = inner;
    c->n = counts;
    *ret = &c->base;
    return WF_OK;
}
