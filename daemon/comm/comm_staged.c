/* comm_staged.c — device buffers over a host-memory comm (see
 * comm_staged.h): copy in (copy_d2h + synchronize), run the inner
 * operation on host mirrors, copy out (copy_h2d + synchronize); isend /
 * irecv on the backend's transfer stream when it has one (xfer_*), with
 * the inner isend deferred until its copy is done (progress(), called
 * first by every operation).
 *
 * Every call goes to the inner handle through comm.h, so the inner comm
 * keeps its own argument checks and group-call bookkeeping. A wrapper
 * group call opens the inner group lazily (at the first send / recv /
 * isend / irecv posted in it) and closes it at the wrapper's outermost
 * group end, after which the received mirrors are copied out.
 *
 * Failures of the staging itself (a copy, a synchronize, a transfer, a
 * mirror that cannot be allocated, an extent that overflows) abort the
 * world before the call returns: the peers may already wait in the
 * matching operation and would otherwise wait forever. Errors of the inner
 * operation (a mismatch verdict, an abort) are returned as they are;
 * received data is copied out only when the inner operation succeeded.
 *
 * Not here: overlap for blocking operations and group calls, device-side
 * allocation. No logging.
 */
#include "comm_staged.h"
#include "comm_impl.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A send or receive posted inside a group call, completed at group end. */
typedef struct posted {
    unsigned char *mirror; /* host copy (send: already filled) */
    void *dev;             /* receive: device destination; send: NULL */
    size_t bytes;          /* size of the message */
} posted_t;

/* A host mirror of isend / irecv, reused by later requests of the handle
 * (pinned with the backend's host_register when it has one). */
typedef struct mirror {
    unsigned char *p;              /* page-aligned host memory */
    size_t cap;                    /* its size */
    int pinned;                    /* host_register succeeded */
    int busy;                      /* held by a live request */
} mirror_t;

/* An isend / irecv in flight. */
struct wf_comm_req {
    struct wf_comm_req *prev, *next; /* the handle's list of live requests */
    struct wf_comm_req *pend;        /* the FIFO of deferred sends */
    wf_comm_req_t *inner;            /* the inner handle's request (NULL: not posted) */
    int mi;                          /* mirror index in the pool, -1: none */
    unsigned char *mirror;           /* host copy, NULL when bytes == 0 */
    void *dev;                       /* irecv: device destination; isend: NULL */
    size_t bytes;                    /* size of the message */
    int peer;                        /* isend: the destination (deferred post) */
    wf_xfer_t *x;                    /* isend: its d2h; irecv: the mark at post */
    wf_status_t st;                  /* a failure before the inner request existed */
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
    wf_comm_req_t *free_reqs;      /* released requests, reused */
    wf_comm_req_t *pend_head, *pend_tail; /* deferred sends, in post order */
    mirror_t *mir;                 /* the request mirrors, nmir of cap_mir */
    int nmir, cap_mir;
    unsigned flags;                /* WF_COMM_STAGED_* of the wrap */
    atomic_int aborted;            /* an abort was seen (wf_comm_abort here, from
                                    * any thread, or WF_E_ABORTED from the inner
                                    * handle) */
    int async;                     /* isend / irecv on the transfer stream */
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
    atomic_store(&sc->aborted, 1);
    wf_comm_abort(sc->inner);
    return st;
}

/* st of an inner call, remembering an abort (a deferred isend cannot ask
 * the inner handle, so it asks this). */
static wf_status_t seen(staged_comm_t *sc, wf_status_t st)
{
    if (st == WF_E_ABORTED)
        atomic_store(&sc->aborted, 1);
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

/* ---- request mirrors ---- */

#define MIRROR_PAGE 4096

/* A free mirror of at least `bytes` for a request: the smallest free one
 * that fits, else a free one grown, else a new one; pinned when the
 * backend can (a failed pin is not an error: the copies still work). */
static wf_status_t mirror_get(staged_comm_t *sc, size_t bytes, int *ret_mi)
{
    int best = -1, any = -1;
    for (int i = 0; i < sc->nmir; i++) {
        const mirror_t *m = &sc->mir[i];
        if (m->busy)
            continue;
        if (any < 0)
            any = i;
        if (m->cap >= bytes && (best < 0 || m->cap < sc->mir[best].cap))
            best = i;
    }
    if (best >= 0) {
        sc->mir[best].busy = 1;
        *ret_mi = best;
        return WF_OK;
    }
    if (any < 0) {
        if (sc->nmir == sc->cap_mir) {
            int cap = sc->cap_mir ? 2 * sc->cap_mir : 4;
            mirror_t *m = realloc(sc->mir, (size_t)cap * sizeof *m);
            if (!m)
                return WF_E_NO_MEMORY;
            sc->mir = m;
            sc->cap_mir = cap;
        }
        any = sc->nmir++;
        sc->mir[any] = (mirror_t){NULL, 0, 0, 0};
    }
    mirror_t *m = &sc->mir[any];
    if (m->pinned)
        sc->ops->host_unregister(m->p);
    free(m->p);
    *m = (mirror_t){NULL, 0, 0, 0};
    /* room for messages an eighth larger (uneven ring holdings), in pages */
    size_t want = bytes + bytes / 8;
    if (want < bytes || want > SIZE_MAX - MIRROR_PAGE)
        return WF_E_NO_MEMORY;
    want = (want + MIRROR_PAGE - 1) / MIRROR_PAGE * MIRROR_PAGE;
    if (!(m->p = aligned_alloc(MIRROR_PAGE, want)))
        return WF_E_NO_MEMORY;
    m->cap = want;
    m->pinned = sc->ops->host_register && sc->ops->host_unregister &&
                sc->ops->host_register(m->p, want) == WF_OK;
    m->busy = 1;
    *ret_mi = any;
    return WF_OK;
}

static void mirrors_free(staged_comm_t *sc)
{
    for (int i = 0; i < sc->nmir; i++) {
        if (sc->mir[i].pinned)
            sc->ops->host_unregister(sc->mir[i].p);
        free(sc->mir[i].p);
    }
    free(sc->mir);
    sc->mir = NULL;
    sc->nmir = sc->cap_mir = 0;
}

/* ---- requests ---- */

/* A request (reused or new), linked into the live list. */
static wf_comm_req_t *req_new(staged_comm_t *sc)
{
    wf_comm_req_t *r = sc->free_reqs;
    if (r)
        sc->free_reqs = r->next;
    else if (!(r = malloc(sizeof *r)))
        return NULL;
    *r = (wf_comm_req_t){.mi = -1, .st = WF_OK};
    r->next = sc->reqs;
    if (sc->reqs)
        sc->reqs->prev = r;
    sc->reqs = r;
    return r;
}

/* Unlink r, give its mirror back, keep it for reuse. Its ticket must be
 * released already. */
static void req_free(staged_comm_t *sc, wf_comm_req_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        sc->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    if (r->mi >= 0)
        sc->mir[r->mi].busy = 0;
    r->prev = NULL;
    r->next = sc->free_reqs;
    sc->free_reqs = r;
}

/* Post the deferred sends, oldest first: each once its copy into the
 * mirror is done (waited for here; the copy ran meanwhile). Every
 * operation on the handle calls this first, so sends reach the inner comm
 * in the order they were posted, before anything posted after them, and
 * no peer waits forever for a send this rank deferred while it waits
 * itself. A failed copy aborts the world (a staging failure); its request
 * keeps the error for its wait. */
static void progress(staged_comm_t *sc)
{
    while (sc->pend_head) {
        wf_comm_req_t *r = sc->pend_head;
        sc->pend_head = r->pend;
        if (!sc->pend_head)
            sc->pend_tail = NULL;
        r->pend = NULL;
        wf_status_t st = sc->ops->xfer_wait(sc->ctx, r->x);
        r->x = NULL;
        if (st != WF_OK)
            r->st = fail(sc, st);
        else
            r->st = seen(sc, wf_comm_isend(sc->inner, r->mirror, r->bytes, r->peer,
                                           &r->inner));
    }
}

static void staged_destroy(wf_comm_t *c)
{
    staged_comm_t *sc = S(c);
    /* requests left after an abort: their copies end before the mirrors
     * go (the inner handle frees its own requests) */
    sc->pend_head = sc->pend_tail = NULL;
    while (sc->reqs) {
        wf_comm_req_t *r = sc->reqs;
        if (r->x)
            (void)sc->ops->xfer_wait(sc->ctx, r->x);
        r->x = NULL;
        req_free(sc, r);
    }
    while (sc->free_reqs) {
        wf_comm_req_t *r = sc->free_reqs;
        sc->free_reqs = r->next;
        free(r);
    }
    mirrors_free(sc);
    posted_clear(sc);
    free(sc->posted);
    free(sc->mirror);
    wf_comm_destroy(&sc->inner);
    free(sc);
}

static void staged_abort(wf_comm_t *c)
{
    atomic_store(&S(c)->aborted, 1); /* any thread */
    wf_comm_abort(S(c)->inner);
}

wf_status_t wf_comm_staged_wrap_ex(wf_comm_t *inner, const wf_backend_ops_t *ops,
                                   wf_backend_ctx_t *ctx, unsigned flags,
                                   wf_comm_t **ret_comm)
{
    if (!inner || !ops || !ctx || !ret_comm || !ops->copy_h2d ||
        !ops->copy_d2h || !ops->synchronize || (flags & ~WF_COMM_STAGED_SYNC)) {
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
    sc->flags = flags;
    atomic_init(&sc->aborted, 0);
    sc->async = !(flags & WF_COMM_STAGED_SYNC) && ops->xfer_mark && ops->xfer_d2h &&
                ops->xfer_h2d && ops->xfer_wait;
    *ret_comm = &sc->base;
    return WF_OK;
}

wf_status_t wf_comm_staged_wrap(wf_comm_t *inner, const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_comm_t **ret_comm)
{
    return wf_comm_staged_wrap_ex(inner, ops, ctx, 0, ret_comm);
}

bool wf_comm_staged_overlaps(const wf_comm_t *c)
{
    return c && c->iface->destroy == staged_destroy &&
           ((const staged_comm_t *)(const void *)c)->async;
}

static wf_status_t staged_split(wf_comm_t *c, int color, int key,
                                wf_comm_t **ret_comm)
{
    staged_comm_t *sc = S(c);
    progress(sc);
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
    st = wf_comm_staged_wrap_ex(sub, sc->ops, sc->ctx, sc->flags, ret_comm);
    return st == WF_OK ? WF_OK : fail(sc, st);
}

/* First step of a blocking operation: the handle's mirrors for sbytes to
 * send and rbytes to receive, and dev_send (device) copied into the send
 * mirror (NULL: nothing to send from here, e.g. a non-root's scatterv). A
 * failure aborts the world (fail). */
static wf_status_t stage_in(staged_comm_t *sc, const void *dev_send, size_t sbytes,
                            size_t rbytes, unsigned char **ret_ms, unsigned char **ret_mr)
{
    progress(sc);
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
    progress(sc);
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
    progress(sc);
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
    progress(sc);
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

/* isend (dev_src) or irecv (dev_dst): a request with a mirror of the
 * handle's pool.
 * Synchronous staging (no transfer stream, WF_COMM_STAGED_SYNC, or inside
 * a group call, whose inner operations must be posted in the inner
 * group): an isend copies its buffer into the mirror (copy_d2h +
 * synchronize) and posts the inner isend at once.
 * Overlapped: an isend queues the copy into the mirror on the transfer
 * stream (after everything on the main stream at this call: a kernel may
 * have written the buffer) and defers the inner isend to progress(); an
 * irecv posts the inner irecv at once and marks the main stream, the
 * point after which the copy out may write the destination (a kernel
 * queued before may still read it). */
static wf_status_t post_req(staged_comm_t *sc, const void *dev_src,
                            void *dev_dst, size_t bytes, int peer,
                            wf_comm_req_t **ret_req)
{
    progress(sc);
    wf_comm_req_t *r = req_new(sc);
    if (!r)
        return fail(sc, WF_E_NO_MEMORY);
    wf_status_t st = bytes > 0 ? mirror_get(sc, bytes, &r->mi) : WF_OK;
    if (st != WF_OK) {
        req_free(sc, r);
        return fail(sc, st);
    }
    r->mirror = r->mi >= 0 ? sc->mir[r->mi].p : NULL;
    r->dev = dev_dst;
    r->bytes = bytes;
    r->peer = peer;
    int async = sc->async && sc->base.group_depth == 0;
    if (async && dev_src && atomic_load(&sc->aborted)) {
        /* the inner isend would say so at once; a deferred one only at
         * its wait (an abort by a peer is seen there) */
        req_free(sc, r);
        return WF_E_ABORTED;
    }
    if (async && dev_src) {
        st = sc->ops->xfer_d2h(sc->ctx, r->mirror, dev_src, bytes, NULL, &r->x);
        if (st != WF_OK) {
            r->x = NULL;
            req_free(sc, r);
            return fail(sc, st);
        }
        if (sc->pend_tail)
            sc->pend_tail->pend = r;
        else
            sc->pend_head = r;
        sc->pend_tail = r;
        *ret_req = r;
        return WF_OK;
    }
    if (async && (st = sc->ops->xfer_mark(sc->ctx, &r->x)) != WF_OK) {
        r->x = NULL;
        req_free(sc, r);
        return fail(sc, st);
    }
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
        if (r->x)
            (void)sc->ops->xfer_wait(sc->ctx, r->x);
        r->x = NULL;
        req_free(sc, r);
        return st;
    }
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

/* The inner request completed with `st`: copy a received message out
 * (overlapped: on the transfer stream after the mark of the irecv, and
 * wait for that copy only), release the request. */
static wf_status_t req_finish(staged_comm_t *sc, wf_comm_req_t *r,
                              wf_status_t st)
{
    if (r->x) { /* an irecv's mark */
        wf_xfer_t *t = NULL;
        if (st == WF_OK && r->dev && r->bytes > 0) {
            wf_status_t xs = sc->ops->xfer_h2d(sc->ctx, r->dev, r->mirror, r->bytes,
                                               r->x, &t);
            if (xs == WF_OK)
                xs = sc->ops->xfer_wait(sc->ctx, t);
            if (xs != WF_OK)
                st = fail(sc, xs);
        } else {
            (void)sc->ops->xfer_wait(sc->ctx, r->x);
        }
        r->x = NULL;
    } else if (st == WF_OK && r->dev) {
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
    progress(sc);
    wf_status_t st = r->inner ? seen(sc, wf_comm_wait(sc->inner, &r->inner)) : r->st;
    return req_finish(sc, r, st);
}

static wf_status_t staged_test(wf_comm_t *c, wf_comm_req_t *r, int *ret_done)
{
    staged_comm_t *sc = S(c);
    progress(sc);
    int done = 1;
    wf_status_t st = r->inner ? seen(sc, wf_comm_test(sc->inner, &r->inner, &done)) : r->st;
    *ret_done = done;
    if (!done)
        return st;
    return req_finish(sc, r, st);
}

/* ---------------------------------------------------------------------- */
/* collectives                                                             */

static wf_status_t staged_barrier(wf_comm_t *c)
{
    progress(S(c));
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
