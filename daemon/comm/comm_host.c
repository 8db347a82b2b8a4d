/* comm_host.c — host backend of comm.h for the worker threads of one
 * process (see comm_host.h). It does not cross processes (comm_zmq does)
 * and does not log. Its collectives copy straight between the ranks'
 * buffers, so it has no use for p2p_plan.h.
 *
 * Collectives. Each group has a generation-counted rendezvous (one mutex,
 * one condvar). A collective is: publish this rank's arguments in its
 * slot, sync (ENTER), check that every rank called the same operation with
 * matching sizes (every rank reads all slots, so all reach the same
 * verdict), copy straight from the peers' buffers into this rank's own
 * (one copy, no staging; gatherv pushes into the root's buffer instead),
 * sync (EXIT) so nobody takes its buffers or slot back while a peer still
 * reads them. allreduce adds a middle sync: reduce-scatter into each
 * rank's own chunk, sync, all-gather the chunks.
 *
 * Point-to-point. Each ordered pair (src, dst) has a FIFO mailbox of
 * posted sends and one of posted receives. Posting takes the head of the
 * opposite queue if there is one; the thread that finds the match copies
 * sender -> receiver outside the lock and completes both requests. So a
 * receiver that posted first may get its data copied by the sender's
 * thread, and vice versa; order per pair is the posting order.
 *
 * Abort. A world-wide atomic flag, then a broadcast on every group's
 * condvar. Every wait loop checks the flag under the group mutex, so no
 * wake-up is lost. Before an aborted call returns, it waits for peers that
 * are in the middle of copying from / into its buffers (bounded memcpy
 * work, never a wait on another rank), so the caller may free its buffers
 * as soon as the call returns.
 *
 * Waiting is on condvars only; nothing spins. Lock order: world mutex,
 * then a group mutex.
 */
#include "comm_host.h"
#include "comm_impl.h"
#include "request_pool.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* types                                                                   */

enum req_kind { REQ_SEND, REQ_RECV };

/* Life of a request: FREE (in the pool) -> POSTED (in a mailbox queue) ->
 * MATCHED (dequeued, a thread is copying) -> DONE (status final). */
enum req_state { REQ_FREE, REQ_POSTED, REQ_MATCHED, REQ_DONE };

struct wf_comm_req {
    struct wf_comm_req *next; /* mailbox queue link, or pool free list */
    int kind;                 /* REQ_SEND / REQ_RECV */
    int state;                /* enum req_state; group mutex once posted */
    const void *sbuf;         /* send: data to send */
    void *rbuf;               /* recv: destination */
    size_t bytes;             /* size posted by this side */
    int src, dst;             /* group ranks of sender and receiver */
    wf_status_t status;       /* final status once DONE */
};

/* FIFO queues of one ordered pair (src, dst). */
typedef struct mailbox {
    wf_comm_req_t *send_head, *send_tail; /* sends posted by src */
    wf_comm_req_t *recv_head, *recv_tail; /* receives posted by dst */
} mailbox_t;

/* Collective op codes published in slots, checked across ranks. */
enum coll_op {
    OP_BARRIER = 1,
    OP_ALLGATHER,
    OP_ALLGATHERV,
    OP_ALLTOALL,
    OP_ALLTOALLV,
    OP_ALLREDUCE,
    OP_BROADCAST,
    OP_SCATTERV,
    OP_GATHERV,
    OP_SPLIT
};

/* What one rank publishes for the collective it is in. Written by the
 * owner before the ENTER sync, read by every rank between ENTER and EXIT. */
typedef struct slot {
    int op;                   /* enum coll_op */
    int root;                 /* rooted ops; else 0 */
    size_t bytes;             /* bytes (even ops), send / recv bytes, count */
    int dtype, redop;         /* allreduce */
    const void *sendbuf;      /* this rank's input */
    void *recvbuf;            /* this rank's output */
    const size_t *sendcounts; /* per peer, op-dependent */
    const size_t *sdispls;    /* per peer, op-dependent */
    const size_t *recvcounts; /* per peer, op-dependent */
    const size_t *rdispls;    /* per peer, op-dependent */
    int color, key;           /* split */
    struct host_group *newgroup; /* split leader: the group it created */
} slot_t;

typedef struct host_group {
    struct wf_comm_host_world *world; /* owning world */
    struct host_group *next;          /* world's list (world mutex) */
    int n;                            /* ranks in the group */
    int refs;                         /* live handles (world mutex) */
    int is_root;                      /* the world group: freed with world */
    pthread_mutex_t mu;               /* guards everything below */
    pthread_cond_t cv;                /* every wait of the group */
    int arrived;                      /* ranks in the current sync */
    uint64_t gen;                     /* syncs completed */
    int in_phase;                     /* ranks released, not yet at next sync */
    slot_t *slots;                    /* n, one per rank */
    mailbox_t *mail;                  /* n * n, index src * n + dst */
} host_group_t;

struct wf_comm_host_world {
    pthread_mutex_t mu;    /* guards refs, taken, groups */
    atomic_int aborted;    /* set once, never cleared */
    atomic_int waiting;    /* calls asleep on a group condvar for a peer
                            * (wf_comm_host_world_waiting) */
    int nranks;            /* ranks of the root group */
    int refs;              /* owner + live handles */
    unsigned char *taken;  /* nranks flags: root handle given out */
    host_group_t *groups;  /* every live group, root included */
    host_group_t *root;    /* the world group */
};

typedef struct host_comm {
    struct wf_comm base;        /* must be first */
    host_group_t *g;            /* the group this handle is a rank of */
    wf_comm_host_world_t *w;    /* its world */
    wf_req_pool_t reqs;         /* request pool */
    wf_req_list_t pending;      /* posted by send / recv in a group call */
} host_comm_t;

_Static_assert(offsetof(host_comm_t, base) == 0, "base must come first");

static const struct wf_comm_iface host_iface;

static host_comm_t *H(wf_comm_t *c) { return (host_comm_t *)c; }

static int is_aborted(const wf_comm_host_world_t *w)
{
    return atomic_load(&w->aborted);
}

/* ---------------------------------------------------------------------- */
/* groups and world                                                        */

static void group_free(host_group_t *g)
{
    if (!g)
        return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g->mail);
    free(g);
}

/* A new group of n ranks, not yet registered in the world. */
static host_group_t *group_new(wf_comm_host_world_t *w, int n)
{
    host_group_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->world = w;
    g->n = n;
    g->slots = calloc((size_t)n, sizeof *g->slots);
    g->mail = calloc((size_t)n * (size_t)n, sizeof *g->mail);
    if (!g->slots || !g->mail)
        goto fail;
    if (pthread_mutex_init(&g->mu, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&g->cv, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        goto fail;
    }
    return g;
fail:
    free(g->slots);
    free(g->mail);
    free(g);
    return NULL;
}

static void world_free(wf_comm_host_world_t *w)
{
    host_group_t *g = w->groups;
    while (g) {
        host_group_t *next = g->next;
        group_free(g);
        g = next;
    }
    pthread_mutex_destroy(&w->mu);
    free(w->taken);
    free(w);
}

wf_status_t wf_comm_host_world_new(int nranks,
                                   wf_comm_host_world_t **ret_world)
{
    assert(ret_world);
    if (nranks < 1 || nranks > WF_COMM_HOST_MAX_RANKS)
        return WF_E_BAD_ARGUMENT;
    wf_comm_host_world_t *w = calloc(1, sizeof *w);
    if (!w)
        return WF_E_NO_MEMORY;
    atomic_init(&w->aborted, 0);
    atomic_init(&w->waiting, 0);
    w->nranks = nranks;
    w->refs = 1;
    w->taken = calloc((size_t)nranks, 1);
    if (!w->taken)
        goto fail;
    w->root = group_new(w, nranks);
    if (!w->root)
        goto fail;
    w->root->is_root = 1;
    w->groups = w->root;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        group_free(w->root);
        goto fail;
    }
    *ret_world = w;
    return WF_OK;
fail:
    free(w->taken);
    free(w);
    return WF_E_NO_MEMORY;
}

void wf_comm_host_world_abort(wf_comm_host_world_t *w)
{
    if (!w)
        return;
    atomic_store(&w->aborted, 1);
    pthread_mutex_lock(&w->mu);
    for (host_group_t *g = w->groups; g; g = g->next) {
        /* taking the group mutex orders the broadcast after any waiter's
         * check of the flag: no lost wake-up */
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

int wf_comm_host_world_aborted(const wf_comm_host_world_t *w)
{
    return w ? is_aborted(w) : 0;
}

int wf_comm_host_world_waiting(const wf_comm_host_world_t *w)
{
    return w ? atomic_load(&w->waiting) : 0;
}

/* pthread_cond_wait on g for a peer, counted in the world's `waiting`
 * while asleep. Under g->mu. */
static void wait_for_peer(host_group_t *g)
{
    atomic_fetch_add(&g->world->waiting, 1);
    pthread_cond_wait(&g->cv, &g->mu);
    atomic_fetch_sub(&g->world->waiting, 1);
}

/* Drop one world reference; the caller must not hold w->mu. */
static void world_unref(wf_comm_host_world_t *w)
{
    pthread_mutex_lock(&w->mu);
    int last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last)
        world_free(w);
}

void wf_comm_host_world_unref(wf_comm_host_world_t **w)
{
    if (!w || !*w)
        return;
    wf_comm_host_world_t *x = *w;
    *w = NULL;
    world_unref(x);
}

/* ---------------------------------------------------------------------- */
/* handles and their requests                                              */

static wf_comm_req_t *pool_get(host_comm_t *hc)
{
    wf_comm_req_t *r = wf_req_pool_get(&hc->reqs);
    if (r)
        r->next = NULL;
    return r;
}

static void pool_put(host_comm_t *hc, wf_comm_req_t *r)
{
    r->state = REQ_FREE;
    wf_req_pool_put(&hc->reqs, r);
}

static void handle_free(host_comm_t *hc)
{
    wf_req_pool_fini(&hc->reqs);
    wf_req_list_fini(&hc->pending);
    free(hc);
}

/* A handle for rank `rank` of g; takes no references (callers do). */
static host_comm_t *handle_new(wf_comm_host_world_t *w, host_group_t *g,
                               int rank)
{
    host_comm_t *hc = calloc(1, sizeof *hc);
    if (!hc)
        return NULL;
    hc->base.iface = &host_iface;
    hc->base.rank = rank;
    hc->base.size = g->n;
    hc->w = w;
    hc->g = g;
    if (wf_req_list_reserve(&hc->pending) != WF_OK ||
        wf_req_pool_init(&hc->reqs, sizeof(wf_comm_req_t), NULL,
                         NULL) != WF_OK) {
        handle_free(hc);
        return NULL;
    }
    return hc;
}

wf_status_t wf_comm_host_init(wf_comm_host_world_t *w, int rank,
                              wf_comm_t **ret_comm)
{
    assert(w && ret_comm);
    if (rank < 0 || rank >= w->nranks)
        return WF_E_BAD_ARGUMENT;
    host_comm_t *hc = handle_new(w, w->root, rank);
    if (!hc)
        return WF_E_NO_MEMORY;
    wf_status_t st = WF_OK;
    pthread_mutex_lock(&w->mu);
    if (is_aborted(w))
        st = WF_E_ABORTED;
    else if (w->taken[rank])
        st = WF_E_BAD_ARGUMENT;
    else {
        w->taken[rank] = 1;
        w->refs++;
        w->root->refs++;
    }
    pthread_mutex_unlock(&w->mu);
    if (st != WF_OK) {
        handle_free(hc);
        return st;
    }
    *ret_comm = &hc->base;
    return WF_OK;
}

/* Drop a group reference held by a handle, freeing a split group with its
 * last handle; then drop the handle's world reference. */
static void group_unref(wf_comm_host_world_t *w, host_group_t *g)
{
    host_group_t *dead = NULL;
    pthread_mutex_lock(&w->mu);
    if (--g->refs == 0 && !g->is_root) {
        for (host_group_t **pp = &w->groups; *pp; pp = &(*pp)->next) {
            if (*pp == g) {
                *pp = g->next;
                break;
            }
        }
        dead = g;
    }
    pthread_mutex_unlock(&w->mu);
    group_free(dead);
    world_unref(w);
}

static void host_destroy(wf_comm_t *c)
{
    host_comm_t *hc = H(c);
    wf_comm_host_world_t *w = hc->w;
    host_group_t *g = hc->g;
    handle_free(hc);
    group_unref(w, g);
}

static void host_abort(wf_comm_t *c)
{
    wf_comm_host_world_abort(H(c)->w);
}

/* ---------------------------------------------------------------------- */
/* rendezvous                                                              */

#define SYNC_ENTER 1 /* first sync of an op: ranks arrive from outside */
#define SYNC_EXIT 2  /* last sync of an op: nothing of it runs after */

/* Wait until every rank of g reaches this sync. Returns WF_E_ABORTED if
 * the world is aborted before this sync completes; in that case, unless
 * this is the op's first sync, it first waits until every peer released
 * by the previous sync has finished the phase (its copies touch this
 * rank's buffers). */
static wf_status_t sync_ranks(host_group_t *g, int flags)
{
    wf_comm_host_world_t *w = g->world;
    pthread_mutex_lock(&g->mu);
    if (!(flags & SYNC_ENTER)) {
        if (--g->in_phase == 0 && is_aborted(w))
            pthread_cond_broadcast(&g->cv);
    }
    if (is_aborted(w))
        goto aborted;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        g->gen++;
        g->in_phase = (flags & SYNC_EXIT) ? 0 : g->n;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return WF_OK;
    }
    uint64_t gen = g->gen;
    while (g->gen == gen) {
        if (is_aborted(w))
            goto aborted;
        wait_for_peer(g);
    }
    pthread_mutex_unlock(&g->mu);
    return WF_OK;
aborted:
    if (!(flags & SYNC_ENTER))
        while (g->in_phase > 0)
            pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return WF_E_ABORTED;
}

/* Fast refusal of a call on an aborted world (the syncs catch the rest). */
#define RETURN_IF_ABORTED(hc)                                                \
    do {                                                                     \
        if (is_aborted((hc)->w))                                             \
            return WF_E_ABORTED;                                             \
    } while (0)

/* Publish *s as this rank's slot and enter the collective; then check
 * that every rank is in the same op (and same root / dtype when given). */
static wf_status_t coll_enter(host_comm_t *hc, const slot_t *s)
{
    host_group_t *g = hc->g;
    g->slots[hc->base.rank] = *s;
    wf_status_t st = sync_ranks(g, SYNC_ENTER);
    if (st != WF_OK)
        return st;
    for (int j = 0; j < g->n; j++) {
        const slot_t *p = &g->slots[j];
        if (p->op != s->op || p->root != s->root)
            return WF_E_BAD_ARGUMENT;
    }
    return WF_OK;
}

/* Leave the collective: the EXIT sync, then `st` unless aborted. */
static wf_status_t coll_exit(host_comm_t *hc, wf_status_t st)
{
    wf_status_t st2 = sync_ranks(hc->g, SYNC_EXIT);
    return st2 != WF_OK ? st2 : st;
}

/* coll_enter's status when it is not an abort: mismatch verdicts still
 * need the EXIT sync, so every rank leaves together. */
#define ENTER_OR_RETURN(hc, s, stvar)                                        \
    do {                                                                     \
        stvar = coll_enter((hc), (s));                                       \
        if (stvar == WF_E_ABORTED)                                           \
            return stvar;                                                    \
        if (stvar != WF_OK)                                                  \
            return coll_exit((hc), stvar);                                   \
    } while (0)

/* ---------------------------------------------------------------------- */
/* collectives                                                             */

static wf_status_t host_barrier(wf_comm_t *c)
{
    host_comm_t *hc = H(c);
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_BARRIER};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_allgather(wf_comm_t *c, const void *sendbuf,
                                  void *recvbuf, size_t bytes)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_ALLGATHER, .bytes = bytes, .sendbuf = sendbuf};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    for (int j = 0; j < g->n; j++)
        if (g->slots[j].bytes != bytes)
            return coll_exit(hc, WF_E_BAD_ARGUMENT);
    for (int j = 0; j < g->n; j++)
        wf_comm_copy_at(recvbuf, (size_t)j * bytes, g->slots[j].sendbuf, 0,
                        bytes);
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_allgatherv(wf_comm_t *c, const void *sendbuf,
                                   size_t sendbytes, void *recvbuf,
                                   const size_t *recvcounts,
                                   const size_t *displs)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_ALLGATHERV, .bytes = sendbytes, .sendbuf = sendbuf,
                .recvcounts = recvcounts};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    /* every rank's recvcounts[j] must be rank j's sendbytes */
    for (int k = 0; k < g->n; k++)
        for (int j = 0; j < g->n; j++)
            if (g->slots[k].recvcounts[j] != g->slots[j].bytes)
                return coll_exit(hc, WF_E_BAD_ARGUMENT);
    for (int j = 0; j < g->n; j++)
        wf_comm_copy_at(recvbuf, displs[j], g->slots[j].sendbuf, 0,
                g->slots[j].bytes);
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_alltoall(wf_comm_t *c, const void *sendbuf,
                                 void *recvbuf, size_t bytes)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    int me = c->rank;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_ALLTOALL, .bytes = bytes, .sendbuf = sendbuf};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    for (int j = 0; j < g->n; j++)
        if (g->slots[j].bytes != bytes)
            return coll_exit(hc, WF_E_BAD_ARGUMENT);
    for (int j = 0; j < g->n; j++)
        wf_comm_copy_at(recvbuf, (size_t)j * bytes, g->slots[j].sendbuf,
                (size_t)me * bytes, bytes);
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_alltoallv(wf_comm_t *c, const void *sendbuf,
                                  const size_t *sendcounts,
                                  const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts,
                                  const size_t *rdispls)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    int me = c->rank;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_ALLTOALLV, .sendbuf = sendbuf,
                .sendcounts = sendcounts, .sdispls = sdispls,
                .recvcounts = recvcounts};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    for (int j = 0; j < g->n; j++)
        for (int k = 0; k < g->n; k++)
            if (g->slots[j].sendcounts[k] != g->slots[k].recvcounts[j])
                return coll_exit(hc, WF_E_BAD_ARGUMENT);
    for (int j = 0; j < g->n; j++) {
        const slot_t *p = &g->slots[j];
        wf_comm_copy_at(recvbuf, rdispls[j], p->sendbuf, p->sdispls[me],
                p->sendcounts[me]);
    }
    return coll_exit(hc, WF_OK);
}

/* Input of rank j for the ordered sum: its send buffer from element lo. */
typedef struct sum_arg {
    const slot_t *slots;  /* every rank's published arguments */
    size_t offset;        /* bytes to the first element reduced */
} sum_arg_t;

static const void *slot_input(const void *arg, int j)
{
    const sum_arg_t *a = arg;
    return (const char *)a->slots[j].sendbuf + a->offset;
}

static wf_status_t host_allreduce(wf_comm_t *c, const void *sendbuf,
                                  void *recvbuf, size_t count,
                                  wf_comm_dtype_t dtype, wf_comm_redop_t op)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    int me = c->rank, n = g->n;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_ALLREDUCE, .bytes = count, .dtype = (int)dtype,
                .redop = (int)op, .sendbuf = sendbuf, .recvbuf = recvbuf};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    for (int j = 0; j < n; j++) {
        const slot_t *p = &g->slots[j];
        if (p->bytes != count || p->dtype != (int)dtype || p->redop != (int)op)
            return coll_exit(hc, WF_E_BAD_ARGUMENT);
    }
    size_t esize = dtype == WF_COMM_F64 ? sizeof(double) : sizeof(float);
    /* phase 1: reduce my chunk from every rank's input into my output.
     * In place is safe: my chunk of my buffer is read by nobody else. */
    size_t lo, hi;
    wf_comm_chunk_range(count, n, me, &lo, &hi);
    sum_arg_t sa = { g->slots, lo * esize };
    wf_comm_sum_ordered(dtype, (char *)recvbuf + lo * esize, hi - lo, n,
                        slot_input, &sa);
    st = sync_ranks(g, 0);
    if (st != WF_OK)
        return st;
    /* phase 2: fetch every other chunk from its owner's output */
    for (int j = 0; j < n; j++) {
        if (j == me)
            continue;
        wf_comm_chunk_range(count, n, j, &lo, &hi);
        wf_comm_copy_at(recvbuf, lo * esize, g->slots[j].recvbuf, lo * esize,
                (hi - lo) * esize);
    }
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_broadcast(wf_comm_t *c, void *buf, size_t bytes,
                                  int root)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_BROADCAST, .root = root, .bytes = bytes,
                .sendbuf = buf};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    for (int j = 0; j < g->n; j++)
        if (g->slots[j].bytes != bytes)
            return coll_exit(hc, WF_E_BAD_ARGUMENT);
    if (c->rank != root)
        wf_comm_copy_at(buf, 0, g->slots[root].sendbuf, 0, bytes);
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_scatterv(wf_comm_t *c, const void *sendbuf,
                                 const size_t *sendcounts,
                                 const size_t *displs, void *recvbuf,
                                 size_t recvbytes, int root)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    int me = c->rank;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_SCATTERV, .root = root, .bytes = recvbytes,
                .sendbuf = sendbuf, .sendcounts = sendcounts,
                .sdispls = displs};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    const slot_t *r = &g->slots[root];
    for (int j = 0; j < g->n; j++)
        if (r->sendcounts[j] != g->slots[j].bytes)
            return coll_exit(hc, WF_E_BAD_ARGUMENT);
    wf_comm_copy_at(recvbuf, 0, r->sendbuf, r->sdispls[me], recvbytes);
    return coll_exit(hc, WF_OK);
}

static wf_status_t host_gatherv(wf_comm_t *c, const void *sendbuf,
                                size_t sendbytes, void *recvbuf,
                                const size_t *recvcounts,
                                const size_t *displs, int root)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    int me = c->rank;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_GATHERV, .root = root, .bytes = sendbytes,
                .sendbuf = sendbuf, .recvbuf = recvbuf,
                .recvcounts = recvcounts, .rdispls = displs};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);
    const slot_t *r = &g->slots[root];
    for (int j = 0; j < g->n; j++)
        if (r->recvcounts[j] != g->slots[j].bytes)
            return coll_exit(hc, WF_E_BAD_ARGUMENT);
    /* push: each rank writes its own block of the root's buffer, so the
     * copies run in parallel on every rank */
    wf_comm_copy_at(r->recvbuf, r->rdispls[me], sendbuf, 0, sendbytes);
    return coll_exit(hc, WF_OK);
}

/* Collective split. Every rank publishes (color, key); the first member
 * of each color in (key, rank) order creates the group and publishes it;
 * after a middle sync the members take handles on it. */
static wf_status_t host_split(wf_comm_t *c, int color, int key,
                              wf_comm_t **ret_comm)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    wf_comm_host_world_t *w = hc->w;
    int me = c->rank, n = g->n;
    RETURN_IF_ABORTED(hc);
    slot_t s = {.op = OP_SPLIT, .color = color, .key = key};
    wf_status_t st;
    ENTER_OR_RETURN(hc, &s, st);

    int size = 0, pos = 0, leader = -1;
    if (color >= 0) {
        for (int j = 0; j < n; j++) {
            const slot_t *p = &g->slots[j];
            if (p->color != color)
                continue;
            size++;
            int before = p->key < key || (p->key == key && j < me);
            pos += before;
            if (leader < 0 || p->key < g->slots[leader].key)
                leader = j; /* ties keep the lower rank: j ascends */
        }
    }
    if (color >= 0 && leader == me) {
        host_group_t *ng = group_new(w, size);
        if (ng) {
            ng->refs = size; /* one per member; a failing member drops its */
            pthread_mutex_lock(&w->mu);
            ng->next = w->groups;
            w->groups = ng;
            pthread_mutex_unlock(&w->mu);
        }
        g->slots[me].newgroup = ng; /* read by members after the sync */
    }
    st = sync_ranks(g, 0);
    if (st != WF_OK) {
        /* a group created for nobody: take it back (it has no waiters) */
        if (color >= 0 && leader == me && g->slots[me].newgroup) {
            host_group_t *ng = g->slots[me].newgroup;
            pthread_mutex_lock(&w->mu);
            for (host_group_t **pp = &w->groups; *pp; pp = &(*pp)->next)
                if (*pp == ng) {
                    *pp = ng->next;
                    break;
                }
            pthread_mutex_unlock(&w->mu);
            group_free(ng);
        }
        return st;
    }
    wf_comm_t *out = NULL;
    st = WF_OK;
    if (color >= 0) {
        host_group_t *ng = g->slots[leader].newgroup;
        host_comm_t *nh = ng ? handle_new(w, ng, pos) : NULL;
        if (!ng) {
            st = WF_E_NO_MEMORY;
        } else if (!nh) {
            st = WF_E_NO_MEMORY;
            pthread_mutex_lock(&w->mu);
            w->refs++; /* group_unref drops one world ref */
            pthread_mutex_unlock(&w->mu);
            group_unref(w, ng);
        } else {
            pthread_mutex_lock(&w->mu);
            w->refs++;
            pthread_mutex_unlock(&w->mu);
            out = &nh->base;
        }
    }
    st = coll_exit(hc, st);
    if (st != WF_OK) {
        if (out)
            host_destroy(out);
        return st;
    }
    *ret_comm = out;
    return WF_OK;
}

/* ---------------------------------------------------------------------- */
/* point-to-point                                                          */

/* Copy a matched pair (outside the lock) and complete both requests. */
static void transfer(host_group_t *g, wf_comm_req_t *snd, wf_comm_req_t *rcv)
{
    wf_status_t st = WF_OK;
    if (snd->bytes != rcv->bytes)
        st = WF_E_BAD_ARGUMENT;
    else
        wf_comm_copy_at(rcv->rbuf, 0, snd->sbuf, 0, snd->bytes);
    pthread_mutex_lock(&g->mu);
    snd->status = st;
    rcv->status = st;
    snd->state = REQ_DONE;
    rcv->state = REQ_DONE;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void q_push(wf_comm_req_t **head, wf_comm_req_t **tail,
                   wf_comm_req_t *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static wf_comm_req_t *q_pop(wf_comm_req_t **head, wf_comm_req_t **tail)
{
    wf_comm_req_t *r = *head;
    if (r) {
        *head = r->next;
        if (!*head)
            *tail = NULL;
        r->next = NULL;
    }
    return r;
}

/* Remove r from a queue (abort path only; queues are short). */
static void q_unlink(wf_comm_req_t **head, wf_comm_req_t **tail,
                     wf_comm_req_t *r)
{
    wf_comm_req_t *prev = NULL;
    for (wf_comm_req_t *x = *head; x; prev = x, x = x->next) {
        if (x != r)
            continue;
        if (prev)
            prev->next = x->next;
        else
            *head = x->next;
        if (*tail == x)
            *tail = prev;
        return;
    }
}

/* Post a send or receive; on success *ret_req is in flight. */
static wf_status_t post(host_comm_t *hc, int kind, const void *sbuf,
                        void *rbuf, size_t bytes, int peer,
                        wf_comm_req_t **ret_req)
{
    host_group_t *g = hc->g;
    RETURN_IF_ABORTED(hc);
    wf_comm_req_t *r = pool_get(hc);
    if (!r)
        return WF_E_NO_MEMORY;
    r->kind = kind;
    r->sbuf = sbuf;
    r->rbuf = rbuf;
    r->bytes = bytes;
    r->src = kind == REQ_SEND ? hc->base.rank : peer;
    r->dst = kind == REQ_SEND ? peer : hc->base.rank;
    r->status = WF_OK;
    mailbox_t *mb = &g->mail[(size_t)r->src * (size_t)g->n + (size_t)r->dst];

    pthread_mutex_lock(&g->mu);
    if (is_aborted(hc->w)) {
        pthread_mutex_unlock(&g->mu);
        pool_put(hc, r);
        return WF_E_ABORTED;
    }
    wf_comm_req_t *other;
    if (kind == REQ_SEND) {
        other = q_pop(&mb->recv_head, &mb->recv_tail);
        if (!other)
            q_push(&mb->send_head, &mb->send_tail, r);
    } else {
        other = q_pop(&mb->send_head, &mb->send_tail);
        if (!other)
            q_push(&mb->recv_head, &mb->recv_tail, r);
    }
    r->state = other ? REQ_MATCHED : REQ_POSTED;
    if (other)
        other->state = REQ_MATCHED;
    pthread_mutex_unlock(&g->mu);

    if (other) {
        if (kind == REQ_SEND)
            transfer(g, r, other);
        else
            transfer(g, other, r);
    }
    *ret_req = r;
    return WF_OK;
}

/* Under g->mu: give up a posted request after an abort. */
static void abandon(host_group_t *g, wf_comm_req_t *r)
{
    mailbox_t *mb = &g->mail[(size_t)r->src * (size_t)g->n + (size_t)r->dst];
    if (r->kind == REQ_SEND)
        q_unlink(&mb->send_head, &mb->send_tail, r);
    else
        q_unlink(&mb->recv_head, &mb->recv_tail, r);
    r->status = WF_E_ABORTED;
    r->state = REQ_DONE;
}

static wf_status_t host_wait(wf_comm_t *c, wf_comm_req_t *r)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    pthread_mutex_lock(&g->mu);
    while (r->state != REQ_DONE) {
        /* a MATCHED request is being copied: it completes without us */
        if (r->state == REQ_POSTED && is_aborted(hc->w)) {
            abandon(g, r);
            break;
        }
        wait_for_peer(g);
    }
    wf_status_t st = r->status;
    pthread_mutex_unlock(&g->mu);
    pool_put(hc, r);
    return st;
}

static wf_status_t host_test(wf_comm_t *c, wf_comm_req_t *r, int *ret_done)
{
    host_comm_t *hc = H(c);
    host_group_t *g = hc->g;
    pthread_mutex_lock(&g->mu);
    if (r->state == REQ_POSTED && is_aborted(hc->w))
        abandon(g, r);
    int done = r->state == REQ_DONE;
    wf_status_t st = r->status;
    pthread_mutex_unlock(&g->mu);
    *ret_done = done;
    if (!done)
        return WF_OK;
    pool_put(hc, r);
    return st;
}

static wf_status_t host_isend(wf_comm_t *c, const void *buf, size_t bytes,
                              int peer, wf_comm_req_t **ret_req)
{
    return post(H(c), REQ_SEND, buf, NULL, bytes, peer, ret_req);
}

static wf_status_t host_irecv(wf_comm_t *c, void *buf, size_t bytes, int peer,
                              wf_comm_req_t **ret_req)
{
    return post(H(c), REQ_RECV, NULL, buf, bytes, peer, ret_req);
}

/* send / recv: post, then wait now (plain) or at group_end (grouped). */
static wf_status_t p2p(host_comm_t *hc, int kind, const void *sbuf,
                       void *rbuf, size_t bytes, int peer)
{
    if (hc->base.group_depth > 0 && wf_req_list_reserve(&hc->pending) != WF_OK)
        return WF_E_NO_MEMORY;
    wf_comm_req_t *r = NULL;
    wf_status_t st = post(hc, kind, sbuf, rbuf, bytes, peer, &r);
    if (st != WF_OK)
        return st;
    if (hc->base.group_depth > 0) {
        wf_req_list_push(&hc->pending, r);
        return WF_OK;
    }
    return host_wait(&hc->base, r);
}

static wf_status_t host_send(wf_comm_t *c, const void *buf, size_t bytes,
                             int peer)
{
    return p2p(H(c), REQ_SEND, buf, NULL, bytes, peer);
}

static wf_status_t host_recv(wf_comm_t *c, void *buf, size_t bytes, int peer)
{
    return p2p(H(c), REQ_RECV, NULL, buf, bytes, peer);
}

static wf_status_t host_group_end(wf_comm_t *c)
{
    host_comm_t *hc = H(c);
    wf_status_t first = WF_OK;
    for (int i = 0; i < hc->pending.n; i++) {
        wf_status_t st = host_wait(c, hc->pending.reqs[i]);
        if (first == WF_OK)
            first = st;
    }
    hc->pending.n = 0;
    return first;
}

static const struct wf_comm_iface host_iface = {
    .name = "host",
    .destroy = host_destroy,
    .abort = host_abort,
    .split = host_split,
    .send = host_send,
    .recv = host_recv,
    .group_end = host_group_end,
    .isend = host_isend,
    .irecv = host_irecv,
    .wait = host_wait,
    .test = host_test,
    .barrier = host_barrier,
    .allgatherv = host_allgatherv,
    .allgather = host_allgather,
    .alltoallv = host_alltoallv,
    .alltoall = host_alltoall,
    .allreduce = host_allreduce,
    .broadcast = host_broadcast,
    .scatterv = host_scatterv,
    .gatherv = host_gatherv,
};
