/* comm_zmq_rank.c — one rank of the ZeroMQ comm backend (comm_zmq.h):
 * its socket, the wire header, requests, matching, progress and the
 * reaction to an abort; the posting primitives the operations of
 * comm_zmq_ops.c are made of; the abort domain its ranks share. Calls
 * no other file of the backend. It does not log.
 *
 * Wire. One ZeroMQ message per operation message, frames
 *   [routing id of the peer, header (HDR_LEN bytes), payload (DATA only)]
 * The routing id of rank r of world w is 'W', w (8 bytes LE), r (4 bytes
 * LE): a peer of an older world can never take a current rank's place.
 * Header, little-endian, no packed structs:
 *   0 u32 magic   4 u8 type   5 u8 op   6 u8 phase   7 u8 0
 *   8 u64 world id   16 u64 comm id   24 u32 src world rank
 *  28 u32 tag (p2p: 0; collective: its sequence number on the comm; hello
 *     and ack: the world size)   32 u64 payload bytes
 * A message is accepted only if the routing id ZeroMQ reports is the
 * sender's, the world id is ours and the sizes agree; else it is dropped
 * and counted.
 *
 * CURVE (cfg->curve). Rank i's socket is a CURVE server for the higher
 * ranks that connect to it, and a CURVE client pinned to rank j's node
 * key on its connection to each lower rank j. So a message naming rank
 * j > i must carry the User-Id ZAP gave the connection, equal to
 * rank_nodes[j]; one naming rank j < i must have come over the
 * connection rank i made to j's pinned key, which carries no User-Id (a
 * peer that connected to us and claims a lower rank's routing id has
 * one: ZAP gave it its node's name). Anything else is refused: dropped
 * and counted in `refused` (and `dropped`), before its header is
 * trusted. A stranger's key never gets past the handshake.
 *
 * Matching. Per source rank, a FIFO of posted receives and a FIFO of
 * unexpected messages (kept as the zmq_msg_t received, no copy); a
 * message matches the first receive with the same (comm id, tag, phase)
 * and vice versa. ZeroMQ keeps order per connection, so order per ordered
 * pair is posting order. Self-messages skip the socket.
 *
 * Bounds (README "Bounded cluster data plane"). A connection has at
 * most cfg->recv_messages whole messages waiting in ZeroMQ (ZMQ_RCVHWM;
 * TCP pushes back past it); a message that is not for this world is
 * closed as it is read; a source rank has at most cfg->unexpected_bytes
 * of payload unexpected: the message that would go over is dropped and
 * counted (`over`) and fails the call with WF_E_LIMIT, which aborts the
 * domain.
 *
 * Progress happens only inside calls, on the rank's thread: zmq_poll on
 * the socket, the domain's abort eventfd (written once, never read, so it
 * stays readable and wakes every poller of every rank at once) and the
 * rank's zero-copy eventfd (written by ZeroMQ's I/O thread when it
 * releases a user buffer). Transfers themselves run on ZeroMQ's I/O
 * threads, so isend / irecv overlap with compute.
 *
 * Abort, seen by a rank's thread: close its socket with linger 0 (ZeroMQ
 * then releases every zero-copy buffer it held), wait for those releases
 * (condvar, bounded), fail every posted receive. After that no other
 * thread touches the caller's buffers.
 */
#include "comm_zmq_impl.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* abort domain                                                            */

wf_status_t wf_comm_zmq_local_new(wf_comm_zmq_local_t **ret_local)
{
    assert(ret_local);
    wf_comm_zmq_local_t *l = calloc(1, sizeof *l);
    if (!l)
        return WF_E_NO_MEMORY;
    l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->efd < 0) {
        free(l);
        return WF_E_INTERNAL;
    }
    atomic_init(&l->refs, 1);
    atomic_init(&l->aborted, 0);
    atomic_init(&l->waiting, 0);
    *ret_local = l;
    return WF_OK;
}

void wf_comm_zmq_local_abort(wf_comm_zmq_local_t *l)
{
    if (!l)
        return;
    if (atomic_exchange(&l->aborted, 1))
        return;
    uint64_t one = 1;
    /* cannot fail short of a counter overflow; the flag is set anyway */
    ssize_t rc = write(l->efd, &one, sizeof one);
    (void)rc;
}

int wf_comm_zmq_local_aborted(const wf_comm_zmq_local_t *l)
{
    return l ? atomic_load(&l->aborted) : 0;
}

int wf_comm_zmq_local_waiting(const wf_comm_zmq_local_t *l)
{
    return l ? atomic_load(&l->waiting) : 0;
}

wf_comm_zmq_local_t *wf_comm_zmq_local_ref(wf_comm_zmq_local_t *l)
{
    atomic_fetch_add(&l->refs, 1);
    return l;
}

void wf_comm_zmq_local_unref(wf_comm_zmq_local_t **l)
{
    if (!l || !*l)
        return;
    wf_comm_zmq_local_t *x = *l;
    *l = NULL;
    if (atomic_fetch_sub(&x->refs, 1) == 1) {
        close(x->efd);
        free(x);
    }
}

#define MAGIC 0x315A4657u /* "WFZ1" little-endian */
#define HDR_LEN 40
/* How long an aborted or destroyed rank waits for ZeroMQ to release the
 * zero-copy buffers it still holds after the socket is closed. */
#define RELEASE_WAIT_MS 5000
/* Reconnect interval while a peer's endpoint is not up yet. */
#define RECONNECT_IVL_MS 20
#define RECONNECT_IVL_MAX_MS 500


/* A decoded header. */
typedef struct hdr {
    int type;          /* enum msg_type */
    int op;            /* enum op_code */
    int phase;         /* step inside a collective */
    uint64_t world_id; /* sender's world */
    uint64_t comm_id;  /* communicator */
    uint32_t src;      /* sender's world rank */
    uint32_t tag;      /* see the file comment */
    uint64_t bytes;    /* payload size */
} hdr_t;

static void hdr_encode(unsigned char *p, const hdr_t *h)
{
    put32(p, MAGIC);
    p[4] = (unsigned char)h->type;
    p[5] = (unsigned char)h->op;
    p[6] = (unsigned char)h->phase;
    p[7] = 0;
    put64(p + 8, h->world_id);
    put64(p + 16, h->comm_id);
    put32(p + 24, h->src);
    put32(p + 28, h->tag);
    put64(p + 32, h->bytes);
}

/* 0 when p (n bytes) is not a header. */
static int hdr_decode(const unsigned char *p, size_t n, hdr_t *h)
{
    if (n != HDR_LEN || get32(p) != MAGIC || p[7] != 0)
        return 0;
    h->type = p[4];
    h->op = p[5];
    h->phase = p[6];
    h->world_id = get64(p + 8);
    h->comm_id = get64(p + 16);
    h->src = get32(p + 24);
    h->tag = get32(p + 28);
    h->bytes = get64(p + 32);
    return 1;
}

/* ---------------------------------------------------------------------- */
/* sockets                                                                 */

static int set_int(void *s, int opt, int v)
{
    return zmq_setsockopt(s, opt, &v, sizeof v);
}

/* A ROUTER with the options every rank socket needs; set before any bind
 * or connect because ZeroMQ copies them into each new connection. */
static void *router_new(void *zctx, int64_t max_message_bytes, int recv_messages)
{
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    if (!s)
        return NULL;
    int64_t maxmsg = max_message_bytes > 0 ? max_message_bytes : -1;
    if (set_int(s, ZMQ_LINGER, 0) != 0 ||
        set_int(s, ZMQ_ROUTER_MANDATORY, 1) != 0 ||
        /* an unlimited send queue: a send never waits for the receiver
         * (this is what makes ring exchanges deadlock-free); memory is
         * bounded by the operations the caller has in flight. A bounded
         * receive queue per connection: past recv_messages whole
         * messages unread ZeroMQ stops reading that peer and TCP pushes
         * back; the sender's queue grows instead, its sends still do not
         * block. The rank reads only inside calls, so between jobs this
         * is what bounds a peer (README "Bounded cluster data
         * plane"). */
        set_int(s, ZMQ_SNDHWM, 0) != 0 ||
        set_int(s, ZMQ_RCVHWM, recv_messages > 0 ? recv_messages : 0) != 0 ||
        set_int(s, ZMQ_RECONNECT_IVL, RECONNECT_IVL_MS) != 0 ||
        set_int(s, ZMQ_RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS) != 0 ||
        /* (what a lower rank sends over our own connection to it) */
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
        int e = errno;
        zmq_close(s);
        errno = e;
        return NULL;
    }
    return s;
}

static const wf_gate_names_t gate_names = {
    .frame_bytes = "2 x max_tensor_bytes + 4 KiB",
    .max_frames = "a header and a payload",
    .message_bytes = "2 x max_tensor_bytes + 4 KiB and a header",
    .max_connections = "WF_COMM_ZMQ_MAX_RANKS",
    .max_handshakes = "WF_COMM_ZMQ_HANDSHAKES",
    .handshake_ms = "WF_COMM_ZMQ_HANDSHAKE_MS",
};

wf_status_t wf_zmq_listen(void *zctx, const char *bind_addr,
                          int64_t max_message_bytes, int recv_messages,
                          const wf_keypair_t *curve, void **ret_sock,
                          wf_gate_t **ret_gate, char *addr, size_t addr_len)
{
    char why[160];
    void *s = router_new(zctx, max_message_bytes, recv_messages);
    if (!s)
        return WF_E_INTERNAL;
    uint64_t frame = max_message_bytes > 0 ? (uint64_t)max_message_bytes : UINT64_MAX / 2;
    wf_gate_cfg_t gc = {
        .zctx = zctx,
        .limits = {
            .frame_bytes = frame,
            .max_frames = 2,
            .message_bytes = frame + HDR_LEN,
            .max_connections = WF_COMM_ZMQ_MAX_RANKS,
            .max_handshakes = WF_COMM_ZMQ_HANDSHAKES,
            .handshake_ms = WF_COMM_ZMQ_HANDSHAKE_MS,
        },
        .plane = "comm data port",
        .names = &gate_names,
    };
    wf_gate_node_plane(&gc, curve);
    wf_status_t st = wf_gate_front(s, bind_addr, &gc, addr, addr_len, why, sizeof why,
                                   ret_gate);
    if (st != WF_OK) {
        zmq_close(s);
        return st == WF_E_BAD_ARGUMENT ? st : WF_E_CONNECT;
    }
    *ret_sock = s;
    return WF_OK;
}

/* ---------------------------------------------------------------------- */
/* requests                                                                */

/* A new request of the pool: it belongs to rs for good (the zero-copy
 * release finds the rank through it). */
static void req_init(wf_comm_req_t *r, void *rs)
{
    r->rs = rs;
    atomic_init(&r->zc_pending, 0);
}

static wf_comm_req_t *req_get(zrank_t *rs, int kind)
{
    wf_comm_req_t *r = wf_req_pool_get(&rs->reqs);
    if (!r)
        return NULL;
    r->next = NULL;
    r->kind = kind;
    r->state = REQ_POSTED;
    r->status = WF_OK;
    r->rbuf = NULL;
    r->bytes = 0;
    return r;
}

void wf_zmq_req_put(zrank_t *rs, wf_comm_req_t *r)
{
    r->state = REQ_FREE;
    wf_req_pool_put(&rs->reqs, r);
}

int wf_zmq_req_done(wf_comm_req_t *r)
{
    return r->state == REQ_DONE && !atomic_load(&r->zc_pending);
}

/* ZeroMQ's free function for a zero-copy payload; runs on an I/O thread
 * (or in zmq_msg_close when a send failed). The buffer is the caller's:
 * nothing is freed, the request is marked complete and the rank woken.
 * The last touch of the rank is under zc_mu, so the rank's teardown,
 * which waits for zc_outstanding == 0 under zc_mu, cannot overtake it. */
static void zc_release(void *data, void *hint)
{
    (void)data;
    wf_comm_req_t *r = hint;
    zrank_t *rs = r->rs;
    pthread_mutex_lock(&rs->zc_mu);
    atomic_store(&r->zc_pending, 0);
    rs->zc_outstanding--;
    uint64_t one = 1;
    ssize_t rc = write(rs->zc_efd, &one, sizeof one);
    (void)rc; /* only fails on counter overflow; the flag is what counts */
    if (rs->zc_outstanding == 0)
        pthread_cond_broadcast(&rs->zc_cv);
    pthread_mutex_unlock(&rs->zc_mu);
}

/* ---------------------------------------------------------------------- */
/* receiving and matching                                                  */

static void complete_recv(wf_comm_req_t *r, int op, const void *data,
                          size_t size)
{
    if (op != r->op || size != r->bytes) {
        r->status = WF_E_BAD_ARGUMENT;
    } else {
        if (size)
            memcpy(r->rbuf, data, size); /* frames are unaligned: copy */
        r->status = WF_OK;
    }
    r->state = REQ_DONE;
}

static int key_match(uint64_t comm_a, uint32_t tag_a, int phase_a,
                     uint64_t comm_b, uint32_t tag_b, int phase_b)
{
    return comm_a == comm_b && tag_a == tag_b && phase_a == phase_b;
}

/* A data message from world rank src: complete the first matching posted
 * receive, or keep it as unexpected. Takes the payload (closes or moves
 * it). WF_E_NO_MEMORY when it can be neither; WF_E_LIMIT (dropped and
 * counted) when keeping it would bring src's unexpected payload over
 * rs->unexp_max: src sent further ahead than any exchange of ours goes,
 * and the world ends rather than hold it or wait for ever on a receive
 * whose message was dropped. */
static wf_status_t deliver(zrank_t *rs, int src, uint64_t comm_id,
                           uint32_t tag, int phase, int op, zmq_msg_t *pay)
{
    req_fifo_t *q = &rs->posted[src];
    wf_comm_req_t *prev = NULL;
    for (wf_comm_req_t *r = q->head; r; prev = r, r = r->next) {
        if (!key_match(r->comm_id, r->tag, r->phase, comm_id, tag, phase))
            continue;
        if (prev)
            prev->next = r->next;
        else
            q->head = r->next;
        if (q->tail == r)
            q->tail = prev;
        r->next = NULL;
        complete_recv(r, op, zmq_msg_data(pay), zmq_msg_size(pay));
        zmq_msg_close(pay);
        return WF_OK;
    }
    size_t size = zmq_msg_size(pay);
    if (rs->unexp_max && size > rs->unexp_max - rs->unexp_bytes[src]) {
        zmq_msg_close(pay);
        atomic_fetch_add(&rs->dropped, 1);
        atomic_fetch_add(&rs->over, 1);
        return WF_E_LIMIT;
    }
    umsg_t *u = rs->free_umsg;
    if (u)
        rs->free_umsg = u->next;
    else if (!(u = malloc(sizeof *u))) {
        zmq_msg_close(pay);
        return WF_E_NO_MEMORY;
    }
    u->next = NULL;
    u->comm_id = comm_id;
    u->tag = tag;
    u->phase = phase;
    u->op = op;
    zmq_msg_init(&u->msg);
    zmq_msg_move(&u->msg, pay);
    zmq_msg_close(pay);
    rs->unexp_bytes[src] += size;
    umsg_fifo_t *uq = &rs->unexp[src];
    if (uq->tail)
        uq->tail->next = u;
    else
        uq->head = u;
    uq->tail = u;
    return WF_OK;
}

wf_status_t wf_zmq_send_hdr_only(zrank_t *rs, int dst, int type)
{
    unsigned char h[HDR_LEN];
    hdr_t hd = {.type = type, .world_id = rs->world_id,
                .src = (uint32_t)rs->rank, .tag = (uint32_t)rs->nranks};
    hdr_encode(h, &hd);
    if (zmq_send(rs->sock, rs->ids + (size_t)dst * ID_LEN, ID_LEN,
                 ZMQ_SNDMORE) < 0)
        return errno == EHOSTUNREACH ? WF_E_CONNECT : WF_E_INTERNAL;
    if (zmq_send(rs->sock, h, HDR_LEN, 0) < 0)
        return WF_E_INTERNAL;
    return WF_OK;
}

/* 1 when a message naming world rank src came the way src's messages
 * come (see the file comment): a higher rank's through the gate (meta,
 * the connection it made to us; CURVE: the node ZAP admitted holds src),
 * a lower rank's over the connection we made to it (no gate frame;
 * CURVE: pinned to its node's key). */
static int from_rank(const zrank_t *rs, int src, const wf_gate_meta_t *meta)
{
    if (src < rs->rank)
        return meta == NULL;
    if (!meta)
        return 0;
    return !rs->nodes || (meta->curve && strcmp(meta->key_name, rs->nodes[src]) == 0);
}

/* Handle one received message of nf frames (closes them): [routing id,
 * gate frame (from a higher rank), header, payload (DATA)]. */
static wf_status_t handle_frames(zrank_t *rs, zmq_msg_t *f, int nf, int extra)
{
    wf_status_t st = WF_OK;
    hdr_t h;
    wf_gate_meta_t meta;
    int gated = nf >= 2 && wf_gate_meta_read(zmq_msg_data(&f[1]),
                                             zmq_msg_size(&f[1]), &meta);
    int b = gated ? 2 : 1;      /* the header's frame */
    int parts = nf - (b - 1);   /* the frames but the gate's */
    int ok = !extra && parts >= 2 &&
             hdr_decode(zmq_msg_data(&f[b]), zmq_msg_size(&f[b]), &h) &&
             h.world_id == rs->world_id && h.src < (uint32_t)rs->nranks &&
             (int)h.src != rs->rank && zmq_msg_size(&f[0]) == ID_LEN &&
             memcmp(zmq_msg_data(&f[0]), rs->ids + (size_t)h.src * ID_LEN,
                    ID_LEN) == 0;
    if (ok && !from_rank(rs, (int)h.src, gated ? &meta : NULL)) {
        ok = 0;
        if (rs->nodes)
            atomic_fetch_add(&rs->refused, 1);
    }
    int src = ok ? (int)h.src : -1;
    if (ok && h.type == MSG_HELLO && parts == 2 && src > rs->rank &&
        h.tag == (uint32_t)rs->nranks) {
        if (!rs->joined[src]) {
            rs->joined[src] = 1;
            rs->missing--;
        }
        /* answer every hello (a peer may have restarted its handshake) */
        st = wf_zmq_send_hdr_only(rs, src, MSG_ACK);
    } else if (ok && h.type == MSG_ACK && parts == 2 && src < rs->rank &&
               h.tag == (uint32_t)rs->nranks) {
        if (!rs->joined[src]) {
            rs->joined[src] = 1;
            rs->missing--;
        }
    } else if (ok && h.type == MSG_DATA && parts == 3 &&
               h.bytes == (uint64_t)zmq_msg_size(&f[b + 1])) {
        st = deliver(rs, src, h.comm_id, h.tag, h.phase, h.op, &f[b + 1]);
    } else {
        atomic_fetch_add(&rs->dropped, 1);
    }
    for (int i = 0; i < nf; i++)
        zmq_msg_close(&f[i]);
    return st;
}

/* Receive and handle every message already queued on the socket. */
static wf_status_t drain(zrank_t *rs)
{
    for (;;) {
        zmq_msg_t f[4], junk;
        zmq_msg_init(&f[0]);
        if (zmq_msg_recv(&f[0], rs->sock, ZMQ_DONTWAIT) < 0) {
            int e = errno;
            zmq_msg_close(&f[0]);
            if (e == EINTR)
                continue;
            return e == EAGAIN ? WF_OK : WF_E_INTERNAL;
        }
        int nf = 1, extra = 0, more = zmq_msg_more(&f[0]);
        while (more) {
            /* the rest of a multipart message is already here */
            zmq_msg_t *m = nf < 4 ? &f[nf] : &junk;
            zmq_msg_init(m);
            if (zmq_msg_recv(m, rs->sock, 0) < 0) {
                int e = errno;
                zmq_msg_close(m);
                if (e == EINTR)
                    continue;
                for (int i = 0; i < nf; i++)
                    zmq_msg_close(&f[i]);
                return WF_E_INTERNAL;
            }
            more = zmq_msg_more(m);
            if (m == &junk) {
                zmq_msg_close(m);
                extra = 1;
            } else {
                nf++;
            }
        }
        wf_status_t st = handle_frames(rs, f, nf, extra);
        if (st != WF_OK)
            return st;
    }
}

int wf_zmq_is_aborted(const zrank_t *rs)
{
    return atomic_load(&rs->local->aborted);
}

/* Wait up to timeout_ms (< 0: no limit) for a message, an abort or a
 * zero-copy release, then handle every queued message. */
wf_status_t wf_zmq_progress(zrank_t *rs, long timeout_ms)
{
    zmq_pollitem_t it[3] = {
        {rs->sock, 0, ZMQ_POLLIN, 0},
        {NULL, rs->local->efd, ZMQ_POLLIN, 0},
        {NULL, rs->zc_efd, ZMQ_POLLIN, 0},
    };
    /* a poll that may sleep counts as a blocked call of the domain */
    if (timeout_ms != 0)
        atomic_fetch_add(&rs->local->waiting, 1);
    int polled = zmq_poll(it, 3, timeout_ms);
    if (timeout_ms != 0)
        atomic_fetch_sub(&rs->local->waiting, 1);
    if (polled < 0)
        return errno == EINTR ? WF_OK : WF_E_INTERNAL;
    if (it[2].revents & ZMQ_POLLIN) {
        uint64_t v;
        ssize_t rc = read(rs->zc_efd, &v, sizeof v);
        (void)rc; /* EAGAIN: another wake-up already consumed it */
    }
    if (wf_zmq_is_aborted(rs))
        return WF_E_ABORTED;
    return drain(rs);
}

/* The rank's reaction to an abort, on its own thread: close the socket
 * (linger 0 drops what is queued and makes ZeroMQ release every zero-copy
 * buffer), wait for those releases, fail every posted receive. After it,
 * no other thread touches a caller's buffer. Idempotent. */
void wf_zmq_rank_shutdown(zrank_t *rs, int linger_ms)
{
    if (rs->sock) {
        set_int(rs->sock, ZMQ_LINGER, linger_ms);
        zmq_close(rs->sock);
        rs->sock = NULL;
        /* what the ROUTER queued for higher ranks waits in the gate's
         * DEALERs (linger > 0): the gate writes it out, within linger */
        wf_gate_stop_flush(&rs->gate, linger_ms);
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += RELEASE_WAIT_MS / 1000;
    pthread_mutex_lock(&rs->zc_mu);
    while (rs->zc_outstanding > 0) {
        if (pthread_cond_timedwait(&rs->zc_cv, &rs->zc_mu, &dl) == ETIMEDOUT)
            break;
    }
    if (rs->zc_outstanding > 0)
        rs->leaked = 1; /* ZeroMQ never released them: keep rs forever */
    pthread_mutex_unlock(&rs->zc_mu);
    for (int s = 0; s < rs->nranks; s++) {
        for (wf_comm_req_t *r = rs->posted[s].head; r;) {
            wf_comm_req_t *next = r->next;
            r->next = NULL;
            r->status = WF_E_ABORTED;
            r->state = REQ_DONE;
            r = next;
        }
        rs->posted[s].head = rs->posted[s].tail = NULL;
    }
}

/* Deadline of a blocking call starting now; -1 for none. */
int64_t wf_zmq_op_deadline(const zrank_t *rs)
{
    return rs->op_timeout_ms > 0 ? wf_zmq_now_ms() + rs->op_timeout_ms : -1;
}

/* Wait until every request of reqs (n, NULL entries skipped) completes,
 * release them all, and return the first error. An abort (seen here or
 * raised by a timeout or a socket failure) completes them all first. */
wf_status_t wf_zmq_wait_reqs(zrank_t *rs, wf_comm_req_t **reqs, int n,
                             int64_t deadline)
{
    wf_status_t fatal = WF_OK;
    for (;;) {
        int all = 1;
        for (int i = 0; i < n && all; i++)
            if (reqs[i] && !wf_zmq_req_done(reqs[i]))
                all = 0;
        if (all)
            break;
        if (wf_zmq_is_aborted(rs)) {
            fatal = WF_E_ABORTED;
            wf_zmq_rank_shutdown(rs, 0);
            break;
        }
        long t = -1;
        if (deadline >= 0) {
            int64_t left = deadline - wf_zmq_now_ms();
            if (left <= 0) {
                fatal = WF_E_TIMEOUT;
                wf_comm_zmq_local_abort(rs->local);
                wf_zmq_rank_shutdown(rs, 0);
                break;
            }
            t = (long)left;
        }
        wf_status_t st = wf_zmq_progress(rs, t);
        if (st != WF_OK && st != WF_E_ABORTED) {
            /* the socket failed or a message could not be kept: the
             * world cannot stay in step, so it ends here */
            fatal = st;
            wf_comm_zmq_local_abort(rs->local);
            wf_zmq_rank_shutdown(rs, 0);
            break;
        }
    }
    wf_status_t first = WF_OK;
    for (int i = 0; i < n; i++) {
        wf_comm_req_t *r = reqs[i];
        if (!r)
            continue;
        reqs[i] = NULL;
        if (first == WF_OK && r->state == REQ_DONE)
            first = r->status;
        if (wf_zmq_req_done(r))
            wf_zmq_req_put(rs, r);
        /* else: leaked with rs (ZeroMQ kept the buffer past the wait) */
    }
    return fatal != WF_OK ? fatal : first;
}

/* ---------------------------------------------------------------------- */
/* posting                                                                 */

/* Fail fast on an aborted domain (and shut this rank's socket once). */
wf_status_t wf_zmq_check_alive(zrank_t *rs)
{
    if (!wf_zmq_is_aborted(rs))
        return WF_OK;
    wf_zmq_rank_shutdown(rs, 0);
    return WF_E_ABORTED;
}

wf_status_t wf_zmq_post_recv(zcomm_t *zc, void *buf, size_t bytes, int peer,
                             uint32_t tag, int phase, int op,
                             wf_comm_req_t **ret_req)
{
    zrank_t *rs = zc->rs;
    wf_status_t st = wf_zmq_check_alive(rs);
    if (st != WF_OK)
        return st;
    wf_comm_req_t *r = req_get(rs, REQ_RECV);
    if (!r)
        return WF_E_NO_MEMORY;
    int src = zc->world_of[peer];
    r->rbuf = buf;
    r->bytes = bytes;
    r->comm_id = zc->id;
    r->tag = tag;
    r->phase = phase;
    r->op = op;
    umsg_fifo_t *uq = &rs->unexp[src];
    umsg_t *prev = NULL;
    for (umsg_t *u = uq->head; u; prev = u, u = u->next) {
        if (!key_match(u->comm_id, u->tag, u->phase, zc->id, tag, phase))
            continue;
        if (prev)
            prev->next = u->next;
        else
            uq->head = u->next;
        if (uq->tail == u)
            uq->tail = prev;
        rs->unexp_bytes[src] -= zmq_msg_size(&u->msg);
        complete_recv(r, u->op, zmq_msg_data(&u->msg), zmq_msg_size(&u->msg));
        zmq_msg_close(&u->msg);
        u->next = rs->free_umsg;
        rs->free_umsg = u;
        *ret_req = r;
        return WF_OK;
    }
    req_fifo_t *q = &rs->posted[src];
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    *ret_req = r;
    return WF_OK;
}

wf_status_t wf_zmq_post_send(zcomm_t *zc, const void *buf, size_t bytes,
                             int peer, uint32_t tag, int phase, int op,
                             wf_comm_req_t **ret_req)
{
    zrank_t *rs = zc->rs;
    wf_status_t st = wf_zmq_check_alive(rs);
    if (st != WF_OK)
        return st;
    int dst = zc->world_of[peer];
    wf_comm_req_t *r = req_get(rs, REQ_SEND);
    if (!r)
        return WF_E_NO_MEMORY;
    r->bytes = bytes;
    if (dst == rs->rank) {
        zmq_msg_t m;
        if (zmq_msg_init_size(&m, bytes) != 0) {
            wf_zmq_req_put(rs, r);
            return WF_E_NO_MEMORY;
        }
        if (bytes)
            memcpy(zmq_msg_data(&m), buf, bytes);
        st = deliver(rs, dst, zc->id, tag, phase, op, &m);
        if (st != WF_OK) {
            wf_zmq_req_put(rs, r);
            return st;
        }
        r->state = REQ_DONE;
        *ret_req = r;
        return WF_OK;
    }
    unsigned char h[HDR_LEN];
    hdr_t hd = {.type = MSG_DATA, .op = op, .phase = phase,
                .world_id = rs->world_id, .comm_id = zc->id,
                .src = (uint32_t)rs->rank, .tag = tag, .bytes = bytes};
    hdr_encode(h, &hd);
    int rc;
    do
        rc = zmq_send(rs->sock, rs->ids + (size_t)dst * ID_LEN, ID_LEN,
                      ZMQ_SNDMORE);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        wf_zmq_req_put(rs, r);
        if (errno == EHOSTUNREACH) {
            /* the peer's connection is gone: the world cannot go on */
            wf_comm_zmq_local_abort(rs->local);
            wf_zmq_rank_shutdown(rs, 0);
            return WF_E_ABORTED;
        }
        return WF_E_INTERNAL;
    }
    do
        rc = zmq_send(rs->sock, h, HDR_LEN, ZMQ_SNDMORE);
    while (rc < 0 && errno == EINTR);
    if (rc >= 0 && bytes >= WF_COMM_ZMQ_ZEROCOPY_MIN) {
        zmq_msg_t m;
        pthread_mutex_lock(&rs->zc_mu);
        rs->zc_outstanding++;
        pthread_mutex_unlock(&rs->zc_mu);
        atomic_store(&r->zc_pending, 1);
        /* ZeroMQ reads the caller's buffer until zc_release runs */
        if (zmq_msg_init_data(&m, (void *)buf, bytes, zc_release, r) != 0) {
            zc_release(NULL, r);
            rc = -1;
        } else {
            do
                rc = zmq_msg_send(&m, rs->sock, 0);
            while (rc < 0 && errno == EINTR);
            if (rc < 0)
                zmq_msg_close(&m); /* runs zc_release */
        }
    } else if (rc >= 0) {
        do
            rc = zmq_send(rs->sock, buf, bytes, 0);
        while (rc < 0 && errno == EINTR);
    }
    r->state = REQ_DONE;
    if (rc < 0) {
        /* a half-sent multipart message cannot be taken back */
        r->status = WF_E_INTERNAL;
        wf_comm_zmq_local_abort(rs->local);
    }
    *ret_req = r;
    return WF_OK;
}

/* ---------------------------------------------------------------------- */
/* ranks                                                                   */

zrank_t *wf_zmq_rank_alloc(const wf_comm_zmq_config_t *cfg, int rank)
{
    zrank_t *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->zc_efd = -1;
    size_t n = (size_t)cfg->nranks;
    rs->world_id = cfg->world_id;
    rs->rank = rank;
    rs->nranks = cfg->nranks;
    rs->op_timeout_ms = cfg->op_timeout_ms;
    atomic_init(&rs->refs, 1);
    atomic_init(&rs->dropped, 0);
    atomic_init(&rs->refused, 0);
    atomic_init(&rs->over, 0);
    rs->unexp_max = cfg->unexpected_bytes > 0 ? (uint64_t)cfg->unexpected_bytes : 0;
    rs->ids = malloc(n * ID_LEN);
    rs->posted = calloc(n, sizeof *rs->posted);
    rs->unexp = calloc(n, sizeof *rs->unexp);
    rs->unexp_bytes = calloc(n, sizeof *rs->unexp_bytes);
    rs->joined = calloc(n, 1);
    int mu = pthread_mutex_init(&rs->zc_mu, NULL) == 0;
    int cv = mu && pthread_cond_init(&rs->zc_cv, NULL) == 0;
    rs->zc_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!rs->ids || !rs->posted || !rs->unexp || !rs->unexp_bytes ||
        !rs->joined || !mu || !cv ||
        rs->zc_efd < 0 ||
        wf_req_pool_init(&rs->reqs, sizeof(wf_comm_req_t), req_init,
                         rs) != WF_OK) {
        if (cv)
            pthread_cond_destroy(&rs->zc_cv);
        if (mu)
            pthread_mutex_destroy(&rs->zc_mu);
        if (rs->zc_efd >= 0)
            close(rs->zc_efd);
        wf_req_pool_fini(&rs->reqs);
        free(rs->ids);
        free(rs->posted);
        free(rs->unexp);
        free(rs->unexp_bytes);
        free(rs->joined);
        free(rs);
        return NULL;
    }
    if (cfg->curve) {
        rs->nodes = calloc(n, sizeof *rs->nodes);
        for (size_t j = 0; rs->nodes && j < n; j++) {
            if (!(rs->nodes[j] = strdup(cfg->rank_nodes[j]))) {
                wf_zmq_rank_free(rs, 0);
                return NULL;
            }
        }
        if (!rs->nodes) {
            wf_zmq_rank_free(rs, 0);
            return NULL;
        }
    }
    for (size_t j = 0; j < n; j++) {
        unsigned char *id = rs->ids + j * ID_LEN;
        id[0] = 'W';
        put64(id + 1, cfg->world_id);
        put32(id + 9, (uint32_t)j);
    }
    rs->missing = cfg->nranks - 1;
    return rs;
}

/* Close the socket (letting it flush for linger_ms) and free the rank. */
void wf_zmq_rank_free(zrank_t *rs, int linger_ms)
{
    wf_zmq_rank_shutdown(rs, linger_ms);
    if (rs->leaked)
        return; /* ZeroMQ may still write into its requests: keep them */
    for (int s = 0; s < rs->nranks; s++) {
        for (umsg_t *u = rs->unexp[s].head; u;) {
            umsg_t *next = u->next;
            zmq_msg_close(&u->msg);
            free(u);
            u = next;
        }
    }
    for (umsg_t *u = rs->free_umsg; u;) {
        umsg_t *next = u->next;
        free(u);
        u = next;
    }
    wf_req_pool_fini(&rs->reqs);
    free(rs->posted);
    free(rs->unexp);
    free(rs->unexp_bytes);
    free(rs->ids);
    free(rs->joined);
    free(rs->scratch);
    if (rs->nodes) {
        for (int j = 0; j < rs->nranks; j++)
            free(rs->nodes[j]);
        free(rs->nodes);
    }
    if (rs->zc_efd >= 0)
        close(rs->zc_efd);
    pthread_cond_destroy(&rs->zc_cv);
    pthread_mutex_destroy(&rs->zc_mu);
    wf_comm_zmq_local_unref(&rs->local);
    free(rs);
}

void wf_zmq_rank_unref(zrank_t *rs)
{
    /* flush what is queued to live peers unless the world was aborted */
    if (atomic_fetch_sub(&rs->refs, 1) == 1)
        wf_zmq_rank_free(rs, wf_zmq_is_aborted(rs) ? 0
                                                   : WF_COMM_ZMQ_LINGER_MS);
}
