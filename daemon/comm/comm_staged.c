/* comm_staged.c — device buffers over a host-memory comm (see
 * comm_staged.h): copy in (copy_d2h + synchronize), run the inner
 * operation on host mirrors, copy out (copy_h2d + synchronize).
 *
 * Every call goes to the inner handle through comm.h, so the inner comm
 * keeps its own argument checks and group-call bookkeeping. A wrapper
 * group call opens the inner group lazily (at the first send / recv /
 * isend / irecv posted in it) and closes it at the wrapper's outermost
 * group end, after which the received mirrors are copied out.
 *
 * Failures of the staging itself (a copy, a synchronize, a mirror that
 * cannot be allocated, an extent that overflows) abort the world before
 * the call returns: the peers may already wait in the matching operation
 * and would otherwise wait forever. Errors of the inner operation (a
 * mismatch verdict, an abort) are returned as they are; received data is
 * copied out only when the inner operation succeeded.
 *
 * Not here: overlap of copies with communication, pinned host memory,
 * device-side allocation. No logging.
 */
#include "comm_staged.h"
#include "comm_impl.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A send or receive posted inside a group call, completed at group end. */
typedef struct posted {
    unsigned char *mirror; /* host copy (send: already filled) */
    void *dev;             /* receive: device destination; send: NULL */
    size_t bytes;          /* size of the message */
} posted_t;

/* An isend / irecv in flight. */
struct wf_comm_req {
    struct wf_comm_req *prev, *next; /* the handle's list of live requests */
    wf_comm_req_t *inner;            /* the inner handle's request */
    unsigned char *mirror;           /* host copy, NULL when bytes == 0 */
    void *dev;                       /* irecv: device destination; isend: NULL */
    size_t bytes;                    /* size of the message */
};

typedef struct staged_comm {
    struct wf_comm base;           /* must be first (comm_impl.h) */
    struct wf_comm_iface iface;    /* staged_iface, with `name` below */
    char name[48];                 /* "staged(<inner>)" */
    wf_comm_t *inner;              /* host-memory comm, owned */
    const wf_backend_ops_t *ops;   /* device backend, borrowed */
    wf_backend_ctx_t *ctx;         /* its context, borrowed */
    unsigned char *mirror;         /* blocking operations' mirror */
    size_t mirror_cap;             /* its size in bytes */
    posted_t *posted;              /* send / recv of the open group call */
    int nposted, cap_posted;       /* used / room in posted */
    int inner_group;               /* inner group started in this call */
    wf_comm_req_t *reqs;           /* live requests (freed by destroy) */
} staged_comm_t;

_Static_assert(offsetof(staged_comm_t, base) == 0, "base must come first");

/* Offset of the receive half of the blocking mirror: keeps it aligned
 * for the f64 reduction (malloc's alignment and a multiple of 64). */
#define MIRROR_ALIGN 64

static const struct wf_comm_iface staged_iface;

static staged_comm_t *S(wf_comm_t *c) { return (staged_comm_t *)c; }

/* ---------------------------------------------------------------------- */
/* copies and mirrors                                                      */

/* A staging failure: abort the world so that no peer waits on this rank
 * forever, and return the failure. */
static wf_status_t fail(staged_comm_t *sc, wf_status_t st)
{
    wf_comm_abort(sc->inner);
    return st;
}

/* Device -> host, complete on return. */
static wf_status_t copy_in(staged_comm_t *sc, void *host, const void *dev,
                           size_t bytes)
{
    if (bytes == 0)
        return WF_OK;
    wf_status_t st = sc->ops->copy_d2h(sc->ctx, host, dev, bytes);
    if (st != WF_OK)
        return st;
    return sc->ops->synchronize(sc->ctx);
}

/* Host -> device, complete on return. */
static wf_status_t copy_out(staged_comm_t *sc, void *dev, const void *host,
                            size_t bytes)
{
    if (bytes == 0)
        return WF_OK;
    wf_status_t st = sc->ops->copy_h2d(sc->ctx, dev, host, bytes);
    if (st != WF_OK)
        return st;
    return sc->ops->synchronize(sc->ctx);
}

/* Host -> device of the n blocks (counts[j] bytes at displs[j]) of a
 * received v-buffer, complete on return. Block by block: the gaps between
 * blocks of the device buffer are not the operation's and stay as they
 * were (the mirror holds garbage there). */
static wf_status_t copy_out_blocks(staged_comm_t *sc, void *dev,
                                   const unsigned char *host,
                                   const size_t *counts, const size_t *displs,
                                   int n)
{
    int any = 0;
    for (int j = 0; j < n; j++) {
        if (counts[j] == 0)
            continue;
        wf_status_t st = sc->ops->copy_h2d(sc->ctx, (char *)dev + displs[j],
                                           host + displs[j], counts[j]);
        if (st != WF_OK)
            return st;
        any = 1;
    }
    return any ? sc->ops->synchronize(sc->ctx) : WF_OK;
}

/* Extent of a v-buffer: max(displs[j] + counts[j]) over blocks that hold
 * bytes (a zero count's displacement is never applied). 0 on overflow is
 * told apart by *ret_ok. */
static size_t extent(const size_t *counts, const size_t *displs, int n,
                     int *ret_ok)
{
    size_t e = 0;
    *ret_ok = 1;
    for (int j = 0; j < n; j++) {
        if (counts[j] == 0)
            continue;
        if (displs[j] > SIZE_MAX - counts[j]) {
            *ret_ok = 0;
            return 0;
        }
        if (displs[j] + counts[j] > e)
            e = displs[j] + counts[j];
    }
    return e;
}

/* The blocking mirror cut in two: *ret_send (send_bytes) and *ret_recv
 * (recv_bytes); a part of 0 bytes is NULL. Grows the mirror (contents
 * are not kept). WF_E_NO_MEMORY, WF_E_BAD_ARGUMENT (sizes overflow). */
static wf_status_t mirrors(staged_comm_t *sc, size_t send_bytes,
                           size_t recv_bytes, unsigned char **ret_send,
                           unsigned char **ret_recv)
{
    size_t off = send_bytes;
    if (off > SIZE_MAX - MIRROR_ALIGN)
        return WF_E_BAD_ARGUMENT;
    off = (off + MIRROR_ALIGN - 1) / MIRROR_ALIGN * MIRROR_ALIGN;
    if (recv_bytes > SIZE_MAX - off)
        return WF_E_BAD_ARGUMENT;
    size_t need = off + recv_bytes;
    if (need > sc->mirror_cap) {
        free(sc->mirror);
        sc->mirror_cap = 0;
        sc->mirror = malloc(need);
        if (!sc->mirror)
            return WF_E_NO_MEMORY;
        sc->mirror_cap = need;
    }
    *ret_send = send_bytes ? sc->mirror : NULL;
    *ret_recv = recv_bytes ? sc->mirror + off : NULL;
    return WF_OK;
}

/* ---------------------------------------------------------------------- */
/* handle                                                                  */

/* Free the posted mirrors of a group call. */
static void posted_clear(staged_comm_t *sc)
{
    for (int i = 0; i < sc->nposted; i++)
        free(sc->posted[i].mirror);
    sc->nposted = 0;
}

static void req_free(staged_comm_t *sc, wf_comm_req_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        sc->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r->mirror);
    free(r);
}

static void staged_destroy(wf_comm_t *c)
{
    staged_comm_t *sc = S(c);
    /* requests left after an abort: the inner handle frees its own */
    while (sc->reqs)
        req_free(sc, sc->reqs);
    posted_clear(sc);
    free(sc->posted);
    free(sc->mirror);
    wf_comm_destroy(&sc->inner);
    free(sc);
}

static void staged_abort(wf_comm_t *c)
{
    wf_comm_abort(S(c)->inner);
}

wf_status_t wf_comm_staged_wrap(wf_comm_t *inner, const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_comm_t **ret_comm)
{
    if (!inner || !ops || !ctx || !ret_comm || !ops->copy_h2d ||
        !ops->copy_d2h || !ops->synchronize) {
        wf_comm_destroy(&inner);
        return WF_E_BAD_ARGUMENT;
    }
    staged_comm_t *sc = calloc(1, sizeof *sc);
    if (!sc) {
        wf_comm_destroy(&inner);
        return WF_E_NO_MEMORY;
    }
    /* wf_comm_backend reads iface->name: a per-handle copy of the table
     * carries the per-handle name */
    sc->iface = staged_iface;
    snprintf(sc->name, sizeof sc->name, "staged(%s)", wf_comm_backend(inner));
    sc->iface.name = sc->name;
    sc->base.iface = &sc->iface;
    sc->base.rank = wf_comm_rank(inner);
    sc->base.size = wf_comm_size(inner);
    sc->inner = inner;
    sc->ops = ops;
    sc->ctx = ctx;
    *ret_comm = &sc->base;
    return WF_OK;
}

static wf_status_t staged_split(wf_comm_t *c, int color, int key,
                                wf_comm_t **ret_comm)
{
    staged_comm_t *sc = S(c);
    wf_comm_t *sub = NULL;
    wf_status_t st = wf_comm_split(sc->inner, color, key, &sub);
    if (st != WF_OK)
        return st;
    if (!sub) {
        *ret_comm = NULL;
        return WF_OK;
    }
    /* the peers hold their sub-group handles already: a rank without one
     * would leave them waiting in the sub-group's first operation */
    st = wf_comm_staged_wrap(sub, sc->ops, sc->ctx, ret_comm);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

/* First step of a blocking operation: the handle's mirrors for sbytes to
 * send and rbytes to receive, and dev_send (device) copied into the send
 * mirror (NULL: nothing to send from here, e.g. a non-root's scatterv). A
 * failure aborts the world (fail). */
static wf_status_t stage_in(staged_comm_t *sc, const void *dev_send, size_t sbytes,
                            size_t rbytes, unsigned char **ret_ms, unsigned char **ret_mr)
{
    wf_status_t st = mirrors(sc, sbytes, rbytes, ret_ms, ret_mr);
    if (st == WF_OK && dev_send)
        st = copy_in(sc, *ret_ms, dev_send, sbytes);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

/* ---------------------------------------------------------------------- */
/* point-to-point                                                          */

/* Inside a group call: open the inner group at the first posted op. */
static wf_status_t inner_group_open(staged_comm_t *sc)
{
    if (sc->inner_group)
        return WF_OK;
    wf_status_t st = wf_comm_group_start(sc->inner);
    if (st == WF_OK)
        sc->inner_group = 1;
    return st;
}

/* Post a send (dev_src) or a receive (dev_dst) inside a group call. */
static wf_status_t post_grouped(staged_comm_t *sc, const void *dev_src,
                                void *dev_dst, size_t bytes, int peer)
{
    if (sc->nposted == sc->cap_posted) {
        int cap = sc->cap_posted ? 2 * sc->cap_posted : 8;
        posted_t *p = realloc(sc->posted, (size_t)cap * sizeof *p);
        if (!p)
            return fail(sc, WF_E_NO_MEMORY);
        sc->posted = p;
        sc->cap_posted = cap;
    }
    unsigned char *m = NULL;
    if (bytes > 0 && !(m = malloc(bytes)))
        return fail(sc, WF_E_NO_MEMORY);
    wf_status_t st = WF_OK;
    if (dev_src && (st = copy_in(sc, m, dev_src, bytes)) != WF_OK) {
        free(m);
        return fail(sc, st);
    }
    st = inner_group_open(sc);
    if (st == WF_OK)
        st = dev_src ? wf_comm_send(sc->inner, m, bytes, peer)
                     : wf_comm_recv(sc->inner, m, bytes, peer);
    if (st != WF_OK) {
        free(m);
        return st;
    }
    sc->posted[sc->nposted++] = (posted_t){m, dev_dst, bytes};
    return WF_OK;
}

static wf_status_t staged_send(wf_comm_t *c, const void *buf, size_t bytes,
                               int peer)
{
    staged_comm_t *sc = S(c);
    if (c->group_depth > 0)
        return post_grouped(sc, buf, NULL, bytes, peer);
    unsigned char *m = NULL, *unused = NULL;
    wf_status_t st = stage_in(sc, buf, bytes, 0, &m, &unused);
    if (st != WF_OK)
        return st;
    return wf_comm_send(sc->inner, m, bytes, peer);
}

static wf_status_t staged_recv(wf_comm_t *c, void *buf, size_t bytes, int peer)
{
    staged_comm_t *sc = S(c);
    if (c->group_depth > 0)
        return post_grouped(sc, NULL, buf, bytes, peer);
    unsigned char *unused = NULL, *m = NULL;
    wf_status_t st = stage_in(sc, NULL, 0, bytes, &unused, &m);
    if (st != WF_OK)
        return st;
    st = wf_comm_recv(sc->inner, m, bytes, peer);
    if (st != WF_OK)
        return st;
    st = copy_out(sc, buf, m, bytes);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_group_end(wf_comm_t *c)
{
    staged_comm_t *sc = S(c);
    wf_status_t st = WF_OK;
    if (sc->inner_group) {
        sc->inner_group = 0;
        st = wf_comm_group_end(sc->inner);
    }
    if (st == WF_OK) {
        int any = 0;
        for (int i = 0; i < sc->nposted && st == WF_OK; i++) {
            const posted_t *p = &sc->posted[i];
            if (p->dev && p->bytes > 0) {
                st = sc->ops->copy_h2d(sc->ctx, p->dev, p->mirror, p->bytes);
                any = 1;
            }
        }
        if (st == WF_OK && any)
            st = sc->ops->synchronize(sc->ctx);
        if (st != WF_OK)
            st = fail(sc, st);
    }
    posted_clear(sc);
    return st;
}

/* isend (dev_src) or irecv (dev_dst): a request with its own mirror. */
static wf_status_t post_req(staged_comm_t *sc, const void *dev_src,
                            void *dev_dst, size_t bytes, int peer,
                            wf_comm_req_t **ret_req)
{
    wf_comm_req_t *r = calloc(1, sizeof *r);
    if (!r)
        return fail(sc, WF_E_NO_MEMORY);
    if (bytes > 0 && !(r->mirror = malloc(bytes))) {
        free(r);
        return fail(sc, WF_E_NO_MEMORY);
    }
    r->dev = dev_dst;
    r->bytes = bytes;
    wf_status_t st = WF_OK;
    if (dev_src && (st = copy_in(sc, r->mirror, dev_src, bytes)) != WF_OK)
        st = fail(sc, st);
    /* inside a group call the inner op belongs to the inner group too */
    if (st == WF_OK && sc->base.group_depth > 0)
        st = inner_group_open(sc);
    if (st == WF_OK)
        st = dev_src ? wf_comm_isend(sc->inner, r->mirror, bytes, peer,
                                     &r->inner)
                     : wf_comm_irecv(sc->inner, r->mirror, bytes, peer,
                                     &r->inner);
    if (st != WF_OK) {
        free(r->mirror);
        free(r);
        return st;
    }
    r->next = sc->reqs;
    if (sc->reqs)
        sc->reqs->prev = r;
    sc->reqs = r;
    *ret_req = r;
    return WF_OK;
}

static wf_status_t staged_isend(wf_comm_t *c, const void *buf, size_t bytes,
                                int peer, wf_comm_req_t **ret_req)
{
    return post_req(S(c), buf, NULL, bytes, peer, ret_req);
}

static wf_status_t staged_irecv(wf_comm_t *c, void *buf, size_t bytes,
                                int peer, wf_comm_req_t **ret_req)
{
    return post_req(S(c), NULL, buf, bytes, peer, ret_req);
}

/* The inner request completed with `st`: copy a received message out,
 * release the request. */
static wf_status_t req_finish(staged_comm_t *sc, wf_comm_req_t *r,
                              wf_status_t st)
{
    if (st == WF_OK && r->dev) {
        st = copy_out(sc, r->dev, r->mirror, r->bytes);
        if (st != WF_OK)
            st = fail(sc, st);
    }
    req_free(sc, r);
    return st;
}

static wf_status_t staged_wait(wf_comm_t *c, wf_comm_req_t *r)
{
    staged_comm_t *sc = S(c);
    wf_status_t st = wf_comm_wait(sc->inner, &r->inner);
    return req_finish(sc, r, st);
}

static wf_status_t staged_test(wf_comm_t *c, wf_comm_req_t *r, int *ret_done)
{
    staged_comm_t *sc = S(c);
    int done = 0;
    wf_status_t st = wf_comm_test(sc->inner, &r->inner, &done);
    *ret_done = done;
    if (!done)
        return st;
    return req_finish(sc, r, st);
}

/* ---------------------------------------------------------------------- */
/* collectives                                                             */

static wf_status_t staged_barrier(wf_comm_t *c)
{
    return wf_comm_barrier(S(c)->inner);
}

static wf_status_t staged_allgather(wf_comm_t *c, const void *sendbuf,
                                    void *recvbuf, size_t bytes)
{
    staged_comm_t *sc = S(c);
    size_t total = (size_t)c->size * bytes;
    if (bytes != 0 && total / bytes != (size_t)c->size)
        return fail(sc, WF_E_BAD_ARGUMENT);
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, sendbuf, bytes, total, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_allgather(sc->inner, ms, mr, bytes);
    if (st != WF_OK)
        return st;
    st = copy_out(sc, recvbuf, mr, total);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_allgatherv(wf_comm_t *c, const void *sendbuf,
                                     size_t sendbytes, void *recvbuf,
                                     const size_t *recvcounts,
                                     const size_t *displs)
{
    staged_comm_t *sc = S(c);
    int ok;
    size_t rext = extent(recvcounts, displs, c->size, &ok);
    if (!ok)
        return fail(sc, WF_E_BAD_ARGUMENT);
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, sendbuf, sendbytes, rext, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_allgatherv(sc->inner, ms, sendbytes, mr, recvcounts, displs);
    if (st != WF_OK)
        return st;
    st = copy_out_blocks(sc, recvbuf, mr, recvcounts, displs, c->size);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_alltoall(wf_comm_t *c, const void *sendbuf,
                                   void *recvbuf, size_t bytes)
{
    staged_comm_t *sc = S(c);
    size_t total = (size_t)c->size * bytes;
    if (bytes != 0 && total / bytes != (size_t)c->size)
        return fail(sc, WF_E_BAD_ARGUMENT);
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, sendbuf, total, total, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_alltoall(sc->inner, ms, mr, bytes);
    if (st != WF_OK)
        return st;
    st = copy_out(sc, recvbuf, mr, total);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_alltoallv(wf_comm_t *c, const void *sendbuf,
                                    const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf,
                                    const size_t *recvcounts,
                                    const size_t *rdispls)
{
    staged_comm_t *sc = S(c);
    int sok, rok;
    size_t sext = extent(sendcounts, sdispls, c->size, &sok);
    size_t rext = extent(recvcounts, rdispls, c->size, &rok);
    if (!sok || !rok)
        return fail(sc, WF_E_BAD_ARGUMENT);
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, sendbuf, sext, rext, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_alltoallv(sc->inner, ms, sendcounts, sdispls, mr, recvcounts,
                           rdispls);
    if (st != WF_OK)
        return st;
    st = copy_out_blocks(sc, recvbuf, mr, recvcounts, rdispls, c->size);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_allreduce(wf_comm_t *c, const void *sendbuf,
                                    void *recvbuf, size_t count,
                                    wf_comm_dtype_t dtype, wf_comm_redop_t op)
{
    staged_comm_t *sc = S(c);
    size_t esize = dtype == WF_COMM_F64 ? sizeof(double) : sizeof(float);
    if (count > SIZE_MAX / esize)
        return fail(sc, WF_E_BAD_ARGUMENT);
    size_t bytes = count * esize;
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, sendbuf, bytes, bytes, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_allreduce(sc->inner, ms, mr, count, dtype, op);
    if (st != WF_OK)
        return st;
    st = copy_out(sc, recvbuf, mr, bytes);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_broadcast(wf_comm_t *c, void *buf, size_t bytes,
                                    int root)
{
    staged_comm_t *sc = S(c);
    int is_root = c->rank == root;
    unsigned char *m = NULL, *unused = NULL;
    wf_status_t st = stage_in(sc, is_root ? buf : NULL, bytes, 0, &m, &unused);
    if (st != WF_OK)
        return st;
    st = wf_comm_broadcast(sc->inner, m, bytes, root);
    if (st != WF_OK || is_root) /* the root's buffer is unchanged */
        return st;
    st = copy_out(sc, buf, m, bytes);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_scatterv(wf_comm_t *c, const void *sendbuf,
                                   const size_t *sendcounts,
                                   const size_t *displs, void *recvbuf,
                                   size_t recvbytes, int root)
{
    staged_comm_t *sc = S(c);
    int is_root = c->rank == root, ok = 1;
    size_t sext = is_root ? extent(sendcounts, displs, c->size, &ok) : 0;
    if (!ok)
        return fail(sc, WF_E_BAD_ARGUMENT);
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, is_root ? sendbuf : NULL, sext, recvbytes, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_scatterv(sc->inner, ms, is_root ? sendcounts : NULL,
                          is_root ? displs : NULL, mr, recvbytes, root);
    if (st != WF_OK)
        return st;
    st = copy_out(sc, recvbuf, mr, recvbytes);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

static wf_status_t staged_gatherv(wf_comm_t *c, const void *sendbuf,
                                  size_t sendbytes, void *recvbuf,
                                  const size_t *recvcounts,
                                  const size_t *displs, int root)
{
    staged_comm_t *sc = S(c);
    int is_root = c->rank == root, ok = 1;
    size_t rext = is_root ? extent(recvcounts, displs, c->size, &ok) : 0;
    if (!ok)
        return fail(sc, WF_E_BAD_ARGUMENT);
    unsigned char *ms = NULL, *mr = NULL;
    wf_status_t st = stage_in(sc, sendbuf, sendbytes, rext, &ms, &mr);
    if (st != WF_OK)
        return st;
    st = wf_comm_gatherv(sc->inner, ms, sendbytes, mr,
                         is_root ? recvcounts : NULL, is_root ? displs : NULL,
                         root);
    if (st != WF_OK || !is_root)
        return st;
    st = copy_out_blocks(sc, recvbuf, mr, recvcounts, displs, c->size);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

/* The template of every handle's table (name: per handle, see wrap). */
static const struct wf_comm_iface staged_iface = {
    .name = "staged",
    .destroy = staged_destroy,
    .abort = staged_abort,
    .split = staged_split,
    .send = staged_send,
    .recv = staged_recv,
    .group_end = staged_group_end,
    .isend = staged_isend,
    .irecv = staged_irecv,
    .wait = staged_wait,
    .test = staged_test,
    .barrier = staged_barrier,
    .allgatherv = staged_allgatherv,
    .allgather = staged_allgather,
    .alltoallv = staged_alltoallv,
    .alltoall = staged_alltoall,
    .allreduce = staged_allreduce,
    .broadcast = staged_broadcast,
    .scatterv = staged_scatterv,
    .gatherv = staged_gatherv,
};
