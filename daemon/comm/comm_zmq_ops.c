/* comm_zmq_ops.c — the handles of the ZeroMQ comm backend (comm_zmq.h)
 * and what they do: point-to-point, the collectives (the gathers,
 * all-to-alls, scatterv and gatherv run the plans of p2p_plan.h; barrier,
 * allreduce and broadcast are their own patterns) and split, all made of
 * the posting primitives of comm_zmq_rank.c. It does not log.
 */
#include "comm_zmq_impl.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const struct wf_comm_iface zmq_iface;

static zcomm_t *Z(wf_comm_t *c) { return (zcomm_t *)c; }

/* ---------------------------------------------------------------------- */
/* point-to-point entries                                                  */

static wf_status_t p2p(zcomm_t *zc, int send, const void *sbuf, void *rbuf,
                       size_t bytes, int peer)
{
    if (zc->base.group_depth > 0 && wf_req_list_reserve(&zc->pending) != WF_OK)
        return WF_E_NO_MEMORY;
    int64_t dl = wf_zmq_op_deadline(zc->rs);
    wf_comm_req_t *r = NULL;
    wf_status_t st =
        send ? wf_zmq_post_send(zc, sbuf, bytes, peer, 0, 0, OPC_P2P, &r)
             : wf_zmq_post_recv(zc, rbuf, bytes, peer, 0, 0, OPC_P2P, &r);
    if (st != WF_OK)
        return st;
    if (zc->base.group_depth > 0) {
        wf_req_list_push(&zc->pending, r);
        return WF_OK;
    }
    return wf_zmq_wait_reqs(zc->rs, &r, 1, dl);
}

static wf_status_t z_send(wf_comm_t *c, const void *buf, size_t bytes,
                          int peer)
{
    return p2p(Z(c), 1, buf, NULL, bytes, peer);
}

static wf_status_t z_recv(wf_comm_t *c, void *buf, size_t bytes, int peer)
{
    return p2p(Z(c), 0, NULL, buf, bytes, peer);
}

static wf_status_t z_group_end(wf_comm_t *c)
{
    zcomm_t *zc = Z(c);
    int n = zc->pending.n;
    zc->pending.n = 0;
    return wf_zmq_wait_reqs(zc->rs, zc->pending.reqs, n,
                            wf_zmq_op_deadline(zc->rs));
}

static wf_status_t z_isend(wf_comm_t *c, const void *buf, size_t bytes,
                           int peer, wf_comm_req_t **ret_req)
{
    return wf_zmq_post_send(Z(c), buf, bytes, peer, 0, 0, OPC_P2P, ret_req);
}

static wf_status_t z_irecv(wf_comm_t *c, void *buf, size_t bytes, int peer,
                           wf_comm_req_t **ret_req)
{
    return wf_zmq_post_recv(Z(c), buf, bytes, peer, 0, 0, OPC_P2P, ret_req);
}

static wf_status_t z_wait(wf_comm_t *c, wf_comm_req_t *r)
{
    zrank_t *rs = Z(c)->rs;
    return wf_zmq_wait_reqs(rs, &r, 1, wf_zmq_op_deadline(rs));
}

static wf_status_t z_test(wf_comm_t *c, wf_comm_req_t *r, int *ret_done)
{
    zrank_t *rs = Z(c)->rs;
    if (!wf_zmq_req_done(r)) {
        if (wf_zmq_is_aborted(rs)) {
            wf_zmq_rank_shutdown(rs, 0);
        } else if (rs->sock) {
            wf_status_t st = wf_zmq_progress(rs, 0);
            if (st != WF_OK && st != WF_E_ABORTED) {
                wf_comm_zmq_local_abort(rs->local);
                wf_zmq_rank_shutdown(rs, 0);
            } else if (st == WF_E_ABORTED) {
                wf_zmq_rank_shutdown(rs, 0);
            }
        }
    }
    if (!wf_zmq_req_done(r)) {
        *ret_done = 0;
        return WF_OK;
    }
    *ret_done = 1;
    wf_status_t st = r->status;
    if (st == WF_OK && wf_zmq_is_aborted(rs))
        st = WF_E_ABORTED;
    wf_zmq_req_put(rs, r);
    return st;
}

/* ---------------------------------------------------------------------- */
/* collectives                                                             */

/* The tag of a new collective on zc (never 0, the p2p tag). */
static uint32_t coll_tag(zcomm_t *zc)
{
    if (++zc->coll_seq == 0)
        zc->coll_seq = 1;
    return zc->coll_seq;
}

/* Posting into zc->batch; on a posting failure the already posted
 * requests are still waited for (so nothing refers to the caller's
 * buffers) and the failure is returned. */
typedef struct batch {
    zcomm_t *zc;      /* communicator */
    int k;            /* requests posted */
    wf_status_t st;   /* first posting failure */
    uint32_t tag;     /* collective's tag */
    int op;           /* collective's op code */
    int64_t deadline; /* of the whole call */
} batch_t;

static void b_recv(batch_t *b, void *buf, size_t bytes, int peer, int phase)
{
    if (b->st != WF_OK)
        return;
    wf_comm_req_t *r = NULL;
    b->st = wf_zmq_post_recv(b->zc, buf, bytes, peer, b->tag, phase, b->op, &r);
    if (b->st == WF_OK)
        b->zc->batch[b->k++] = r;
}

static void b_send(batch_t *b, const void *buf, size_t bytes, int peer,
                   int phase)
{
    if (b->st != WF_OK)
        return;
    wf_comm_req_t *r = NULL;
    b->st = wf_zmq_post_send(b->zc, buf, bytes, peer, b->tag, phase, b->op, &r);
    if (b->st == WF_OK)
        b->zc->batch[b->k++] = r;
}

static wf_status_t b_wait(batch_t *b)
{
    wf_status_t st =
        wf_zmq_wait_reqs(b->zc->rs, b->zc->batch, b->k, b->deadline);
    b->k = 0;
    if (b->st != WF_OK) {
        st = b->st;
        b->st = WF_OK;
    }
    return st;
}

static batch_t b_begin(zcomm_t *zc, int op)
{
    batch_t b = {.zc = zc, .k = 0, .st = WF_OK, .tag = coll_tag(zc),
                 .op = op, .deadline = wf_zmq_op_deadline(zc->rs)};
    return b;
}

static const void *at(const void *p, size_t off)
{
    return p ? (const char *)p + off : NULL;
}

static void *at_w(void *p, size_t off)
{
    return p ? (char *)p + off : NULL;
}

/* Keep a status: the first error wins, except that an abort or timeout
 * overrides an argument mismatch. */
static wf_status_t keep(wf_status_t first, wf_status_t st)
{
    if (st == WF_E_ABORTED || st == WF_E_TIMEOUT)
        return first == WF_E_ABORTED || first == WF_E_TIMEOUT ? first : st;
    return first != WF_OK ? first : st;
}

static wf_status_t z_barrier(wf_comm_t *c)
{
    zcomm_t *zc = Z(c);
    int n = c->size, me = c->rank;
    wf_status_t st = wf_zmq_check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, OPC_BARRIER);
    /* dissemination: in round k, signal me + 2^k, hear from me - 2^k */
    int phase = 0;
    for (int d = 1; d < n; d *= 2, phase++) {
        b_recv(&b, NULL, 0, (me - d + n) % n, phase);
        b_send(&b, NULL, 0, (me + d) % n, phase);
        st = keep(st, b_wait(&b));
        if (st == WF_E_ABORTED || st == WF_E_TIMEOUT)
            return st;
    }
    return st;
}

/* Run the nops operations of zc->plan as one collective: post every
 * receive, then every send (direct: n - 1 messages per rank, no step
 * chain), then the local copy, which self_ok says the two counts of this
 * rank allow (else WF_E_BAD_ARGUMENT), then wait for all. Zero-byte
 * operations are sent too: the receiver checks every size. */
static wf_status_t run_plan(zcomm_t *zc, int op, const void *sendbuf,
                            void *recvbuf, size_t nops,
                            const wf_p2p_copy_t *self, int self_ok)
{
    wf_status_t st = wf_zmq_check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, op);
    for (size_t i = 0; i < nops; i++) {
        const wf_p2p_op_t *o = &zc->plan[i];
        if (!o->is_send)
            b_recv(&b, at_w(recvbuf, o->offset), o->bytes, o->peer, 0);
    }
    for (size_t i = 0; i < nops; i++) {
        const wf_p2p_op_t *o = &zc->plan[i];
        if (o->is_send)
            b_send(&b, at(sendbuf, o->offset), o->bytes, o->peer, 0);
    }
    if (!self_ok)
        st = WF_E_BAD_ARGUMENT;
    else
        wf_comm_copy_at(recvbuf, self->dst, sendbuf, self->src, self->bytes);
    return keep(st, b_wait(&b));
}

/* Even all-gather under op code `op` (also split's exchange). */
static wf_status_t gather_even(zcomm_t *zc, int op, const void *sendbuf,
                               void *recvbuf, size_t bytes)
{
    wf_p2p_copy_t self;
    size_t k = wf_p2p_plan_allgather(zc->base.rank, zc->base.size, bytes,
                                     zc->plan, &self);
    return run_plan(zc, op, sendbuf, recvbuf, k, &self, 1);
}

static wf_status_t z_allgather(wf_comm_t *c, const void *sendbuf,
                               void *recvbuf, size_t bytes)
{
    return gather_even(Z(c), OPC_ALLGATHER, sendbuf, recvbuf, bytes);
}

static wf_status_t z_allgatherv(wf_comm_t *c, const void *sendbuf,
                                size_t sendbytes, void *recvbuf,
                                const size_t *recvcounts, const size_t *displs)
{
    zcomm_t *zc = Z(c);
    wf_p2p_copy_t self;
    size_t k = wf_p2p_plan_allgatherv(c->rank, c->size, sendbytes, recvcounts,
                                      displs, zc->plan, &self);
    return run_plan(zc, OPC_ALLGATHERV, sendbuf, recvbuf, k, &self,
                    recvcounts[c->rank] == sendbytes);
}

static wf_status_t z_alltoall(wf_comm_t *c, const void *sendbuf,
                              void *recvbuf, size_t bytes)
{
    zcomm_t *zc = Z(c);
    wf_p2p_copy_t self;
    size_t k = wf_p2p_plan_alltoall(c->rank, c->size, bytes, zc->plan, &self);
    return run_plan(zc, OPC_ALLTOALL, sendbuf, recvbuf, k, &self, 1);
}

static wf_status_t z_alltoallv(wf_comm_t *c, const void *sendbuf,
                               const size_t *sendcounts, const size_t *sdispls,
                               void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls)
{
    zcomm_t *zc = Z(c);
    wf_p2p_copy_t self;
    size_t k = wf_p2p_plan_alltoallv(c->rank, c->size, sendcounts, sdispls,
                                     recvcounts, rdispls, zc->plan, &self);
    return run_plan(zc, OPC_ALLTOALLV, sendbuf, recvbuf, k, &self,
                    sendcounts[c->rank] == recvcounts[c->rank]);
}

/* Input of rank j for the ordered sum: my own chunk from my send buffer,
 * the others' from the scratch blocks they sent (block j, m elements). */
typedef struct sum_arg {
    const char *mine;     /* my chunk */
    const char *others;   /* n blocks of m elements */
    size_t block_bytes;   /* m * element size */
    int me;               /* my rank */
} sum_arg_t;

static const void *chunk_input(const void *arg, int j)
{
    const sum_arg_t *a = arg;
    return j == a->me ? a->mine : a->others + (size_t)j * a->block_bytes;
}

static wf_status_t z_allreduce(wf_comm_t *c, const void *sendbuf,
                               void *recvbuf, size_t count,
                               wf_comm_dtype_t dtype, wf_comm_redop_t op)
{
    (void)op; /* only SUM exists; comm.c checked it */
    zcomm_t *zc = Z(c);
    zrank_t *rs = zc->rs;
    int n = c->size, me = c->rank;
    wf_status_t st = wf_zmq_check_alive(rs);
    if (st != WF_OK)
        return st;
    size_t es = dtype == WF_COMM_F64 ? sizeof(double) : sizeof(float);
    size_t lo, hi;
    wf_comm_chunk_range(count, n, me, &lo, &hi);
    size_t m = hi - lo;
    /* scratch holds block j (m elements) received from rank j */
    size_t need = (size_t)n * m * es;
    if (need > rs->scratch_cap) {
        void *p = realloc(rs->scratch, need);
        if (!p)
            return WF_E_NO_MEMORY; /* NOTE: the peers then wait for an abort */
        rs->scratch = p;
        rs->scratch_cap = need;
    }
    batch_t b = b_begin(zc, OPC_ALLREDUCE);
    /* phase 0, reduce-scatter: chunk j of every input goes to rank j */
    for (int s = 1; s < n; s++) {
        int j = (me - s + n) % n;
        b_recv(&b, at_w(rs->scratch, (size_t)j * m * es), m * es, j, 0);
    }
    for (int s = 1; s < n; s++) {
        int j = (me + s) % n;
        size_t l, h;
        wf_comm_chunk_range(count, n, j, &l, &h);
        b_send(&b, at(sendbuf, l * es), (h - l) * es, j, 0);
    }
    st = b_wait(&b);
    if (st == WF_E_ABORTED || st == WF_E_TIMEOUT)
        return st;
    if (st == WF_OK && m > 0) {
        sum_arg_t sa = { (const char *)sendbuf + lo * es,
                         (const char *)rs->scratch, m * es, me };
        wf_comm_sum_ordered(dtype, (char *)recvbuf + lo * es, m, n,
                            chunk_input, &sa);
    }
    /* phase 1, all-gather of the reduced chunks (the phase-0 sends are
     * complete, so in place the chunks may now be overwritten) */
    for (int s = 1; s < n; s++) {
        int j = (me - s + n) % n;
        size_t l, h;
        wf_comm_chunk_range(count, n, j, &l, &h);
        b_recv(&b, at_w(recvbuf, l * es), (h - l) * es, j, 1);
    }
    for (int s = 1; s < n; s++)
        b_send(&b, at(recvbuf, lo * es), m * es, (me + s) % n, 1);
    return keep(st, b_wait(&b));
}

/* Linear broadcast: the root sends to every rank (n - 1 messages out of
 * the root; fine for the few nodes of a world). */
static wf_status_t z_broadcast(wf_comm_t *c, void *buf, size_t bytes,
                               int root)
{
    zcomm_t *zc = Z(c);
    int n = c->size, me = c->rank;
    wf_status_t st = wf_zmq_check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, OPC_BROADCAST);
    if (me == root) {
        for (int s = 1; s < n; s++)
            b_send(&b, buf, bytes, (root + s) % n, 0);
    } else {
        b_recv(&b, buf, bytes, root, 0);
    }
    return b_wait(&b);
}

static wf_status_t z_scatterv(wf_comm_t *c, const void *sendbuf,
                              const size_t *sendcounts, const size_t *displs,
                              void *recvbuf, size_t recvbytes, int root)
{
    zcomm_t *zc = Z(c);
    wf_p2p_copy_t self;
    size_t k = wf_p2p_plan_scatterv(c->rank, c->size, root, sendcounts, displs,
                                    recvbytes, zc->plan, &self);
    return run_plan(zc, OPC_SCATTERV, sendbuf, recvbuf, k, &self,
                    c->rank != root || sendcounts[root] == recvbytes);
}

static wf_status_t z_gatherv(wf_comm_t *c, const void *sendbuf,
                             size_t sendbytes, void *recvbuf,
                             const size_t *recvcounts, const size_t *displs,
                             int root)
{
    zcomm_t *zc = Z(c);
    wf_p2p_copy_t self;
    size_t k = wf_p2p_plan_gatherv(c->rank, c->size, root, sendbytes,
                                   recvcounts, displs, zc->plan, &self);
    return run_plan(zc, OPC_GATHERV, sendbuf, recvbuf, k, &self,
                    c->rank != root || recvcounts[root] == sendbytes);
}

/* ---------------------------------------------------------------------- */
/* handles                                                                 */

static void zcomm_free(zcomm_t *zc)
{
    if (!zc)
        return;
    free(zc->world_of);
    free(zc->batch);
    free(zc->plan);
    wf_req_list_fini(&zc->pending);
    free(zc);
}

/* A handle on rs for a group of n ranks; takes world_of (n entries). */
zcomm_t *wf_zmq_comm_new(zrank_t *rs, uint64_t id, int n, int rank,
                          int *world_of)
{
    zcomm_t *zc = calloc(1, sizeof *zc);
    if (!zc) {
        free(world_of);
        return NULL;
    }
    zc->base.iface = &zmq_iface;
    zc->base.rank = rank;
    zc->base.size = n;
    zc->rs = rs;
    zc->id = id;
    zc->world_of = world_of;
    zc->batch = calloc(2 * (size_t)n, sizeof *zc->batch);
    zc->plan = calloc(2 * (size_t)n, sizeof *zc->plan);
    if (!zc->batch || !zc->plan || wf_req_list_reserve(&zc->pending) != WF_OK) {
        zcomm_free(zc);
        return NULL;
    }
    return zc;
}


static void z_destroy(wf_comm_t *c)
{
    zcomm_t *zc = Z(c);
    zrank_t *rs = zc->rs;
    zcomm_free(zc);
    wf_zmq_rank_unref(rs);
}

static void z_abort(wf_comm_t *c)
{
    wf_comm_zmq_local_abort(Z(c)->rs->local);
}

/* A 64-bit mixer (splitmix64's finalizer): sub-group ids from the
 * parent's id, the split's sequence number and the color. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Collective split: allgather (color, key), then every member builds its
 * handle locally; the id is the same on every member and differs from
 * the parent's and from every sibling's. */
static wf_status_t z_split(wf_comm_t *c, int color, int key,
                           wf_comm_t **ret_comm)
{
    zcomm_t *zc = Z(c);
    int n = c->size, me = c->rank;
    uint32_t seq = ++zc->split_seq;
    unsigned char mine[8];
    put32(mine, (uint32_t)color);
    put32(mine + 4, (uint32_t)key);
    unsigned char *all = malloc(8 * (size_t)n);
    if (!all)
        return WF_E_NO_MEMORY;
    wf_status_t st = gather_even(zc, OPC_SPLIT, mine, all, 8);
    if (st != WF_OK || color < 0) {
        free(all);
        if (st == WF_OK)
            *ret_comm = NULL;
        return st;
    }
    int size = 0, pos = 0;
    for (int j = 0; j < n; j++) {
        int cj = (int)get32(all + 8 * j), kj = (int)get32(all + 8 * j + 4);
        if (cj != color)
            continue;
        size++;
        pos += kj < key || (kj == key && j < me);
    }
    int *world_of = malloc((size_t)size * sizeof *world_of);
    if (!world_of) {
        free(all);
        return WF_E_NO_MEMORY;
    }
    /* member j goes to the place its (key, rank) takes among the members */
    for (int j = 0; j < n; j++) {
        int cj = (int)get32(all + 8 * j), kj = (int)get32(all + 8 * j + 4);
        if (cj != color)
            continue;
        int p = 0;
        for (int i = 0; i < n; i++) {
            int ci = (int)get32(all + 8 * i), ki = (int)get32(all + 8 * i + 4);
            p += ci == color && (ki < kj || (ki == kj && i < j));
        }
        world_of[p] = zc->world_of[j];
    }
    free(all);
    uint64_t id = mix(zc->id ^ mix(((uint64_t)seq << 32) | (uint32_t)color));
    if (id == WORLD_COMM_ID)
        id++;
    zcomm_t *nz = wf_zmq_comm_new(zc->rs, id, size, pos, world_of);
    if (!nz)
        return WF_E_NO_MEMORY;
    atomic_fetch_add(&zc->rs->refs, 1);
    *ret_comm = &nz->base;
    return WF_OK;
}



uint64_t wf_comm_zmq_dropped(const wf_comm_t *c)
{
    assert(c && c->iface == &zmq_iface);
    return atomic_load(&((const zcomm_t *)c)->rs->dropped);
}

uint64_t wf_comm_zmq_refused(const wf_comm_t *c)
{
    assert(c && c->iface == &zmq_iface);
    return atomic_load(&((const zcomm_t *)c)->rs->refused);
}

uint64_t wf_comm_zmq_over(const wf_comm_t *c)
{
    assert(c && c->iface == &zmq_iface);
    return atomic_load(&((const zcomm_t *)c)->rs->over);
}

static const struct wf_comm_iface zmq_iface = {
    .name = "zmq",
    .destroy = z_destroy,
    .abort = z_abort,
    .split = z_split,
    .send = z_send,
    .recv = z_recv,
    .group_end = z_group_end,
    .isend = z_isend,
    .irecv = z_irecv,
    .wait = z_wait,
    .test = z_test,
    .barrier = z_barrier,
    .allgatherv = z_allgatherv,
    .allgather = z_allgather,
    .alltoallv = z_alltoallv,
    .alltoall = z_alltoall,
    .allreduce = z_allreduce,
    .broadcast = z_broadcast,
    .scatterv = z_scatterv,
    .gatherv = z_gatherv,
};
