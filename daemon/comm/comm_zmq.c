/* comm_zmq.c — host backend of comm.h across processes over ZeroMQ
 * (see comm_zmq.h for the contract). It does not log.
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
 * Matching. Per source rank, a FIFO of posted receives and a FIFO of
 * unexpected messages (kept as the zmq_msg_t received, no copy); a
 * message matches the first receive with the same (comm id, tag, phase)
 * and vice versa. ZeroMQ keeps order per connection, so order per ordered
 * pair is posting order. Self-messages skip the socket.
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
#include "comm_zmq.h"
#include "errf.h"
#include "comm_impl.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* ---------------------------------------------------------------------- */
/* wire constants                                                          */

#define MAGIC 0x315A4657u /* "WFZ1" little-endian */
#define HDR_LEN 40
#define ID_LEN 13
#define WORLD_COMM_ID 1u
/* How long an aborted or destroyed rank waits for ZeroMQ to release the
 * zero-copy buffers it still holds after the socket is closed. */
#define RELEASE_WAIT_MS 5000
/* Reconnect interval while a peer's endpoint is not up yet. */
#define RECONNECT_IVL_MS 20
#define RECONNECT_IVL_MAX_MS 500

enum msg_type { MSG_HELLO = 1, MSG_ACK = 2, MSG_DATA = 3 };

/* Operation codes in headers: a receive of one op never accepts another
 * op's message (both sides of a mismatched call get WF_E_BAD_ARGUMENT on
 * the receiving rank instead of silently mixing). */
enum op_code {
    OPC_P2P = 0,
    OPC_BARRIER,
    OPC_ALLGATHER,
    OPC_ALLGATHERV,
    OPC_ALLTOALL,
    OPC_ALLTOALLV,
    OPC_ALLREDUCE,
    OPC_BROADCAST,
    OPC_SCATTERV,
    OPC_GATHERV,
    OPC_SPLIT
};

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

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

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------- */
/* types                                                                   */

struct wf_comm_zmq_local {
    atomic_int refs;    /* creator + handles */
    atomic_int aborted; /* set once, never cleared */
    int efd;            /* eventfd written at abort, never read */
};

struct wf_comm_zmq_endpoint {
    void *sock;                          /* bound ROUTER */
    char addr[WF_COMM_ZMQ_ENDPOINT_MAX]; /* ZMQ_LAST_ENDPOINT */
};

enum req_kind { REQ_SEND, REQ_RECV };
/* FREE (pool) -> POSTED (receive waiting for its message) -> DONE. A send
 * is DONE once queued; a zero-copy one is complete only when zc_pending
 * drops to 0 too. */
enum req_state { REQ_FREE, REQ_POSTED, REQ_DONE };

struct wf_comm_req {
    struct wf_comm_req *next; /* pool free list, or posted-receive FIFO */
    struct zrank *rs;         /* owning rank (for the zero-copy release) */
    int kind;                 /* enum req_kind */
    int state;                /* enum req_state */
    atomic_int zc_pending;    /* send: ZeroMQ still holds the user buffer */
    void *rbuf;               /* receive: destination */
    size_t bytes;             /* bytes posted */
    uint64_t comm_id;         /* receive: communicator to match */
    uint32_t tag;             /* receive: tag to match */
    int phase;                /* receive: phase to match */
    int op;                   /* receive: op expected */
    wf_status_t status;       /* final status once complete */
};

/* A message that arrived before its receive was posted. */
typedef struct umsg {
    struct umsg *next; /* FIFO link, or free list */
    uint64_t comm_id;  /* communicator */
    uint32_t tag;      /* tag */
    int phase;         /* phase */
    int op;            /* sender's op */
    zmq_msg_t msg;     /* payload as ZeroMQ delivered it (unaligned) */
} umsg_t;

typedef struct req_fifo {
    wf_comm_req_t *head, *tail; /* posted receives from one source */
} req_fifo_t;

typedef struct umsg_fifo {
    umsg_t *head, *tail; /* unexpected messages from one source */
} umsg_fifo_t;

/* One rank of a world in this process; shared by its handles. */
typedef struct zrank {
    wf_comm_zmq_local_t *local; /* abort domain (a reference) */
    void *sock;                 /* ROUTER; NULL once closed after abort */
    atomic_int refs;            /* handles of this rank */
    uint64_t world_id;          /* epoch token */
    int rank, nranks;           /* this rank, world size */
    int op_timeout_ms;          /* per blocking call; <= 0 none */
    unsigned char *ids;         /* nranks * ID_LEN routing ids */
    req_fifo_t *posted;         /* nranks: posted receives per source */
    umsg_fifo_t *unexp;         /* nranks: unexpected messages per source */
    umsg_t *free_umsg;          /* recycled unexpected-message nodes */
    wf_comm_req_t *free_reqs;   /* request pool, free list */
    wf_comm_req_t **chunks;     /* allocated request chunks */
    int nchunks, cap_chunks;    /* used / room in chunks */
    unsigned char *joined;      /* nranks: hello (higher) / ack (lower) seen */
    int missing;                /* peers not yet joined */
    void *scratch;              /* allreduce: received chunks */
    size_t scratch_cap;         /* bytes in scratch */
    _Atomic uint64_t dropped;   /* rejected messages */
    int zc_efd;                 /* eventfd: a zero-copy buffer released */
    pthread_mutex_t zc_mu;      /* guards zc_outstanding, orders the
                                 * releaser's last touch before teardown */
    pthread_cond_t zc_cv;       /* zc_outstanding reached 0 */
    int zc_outstanding;         /* zero-copy buffers ZeroMQ still holds */
    int leaked;                 /* releases never came: never free */
} zrank_t;

/* One handle: a rank's view of one group. */
typedef struct zcomm {
    struct wf_comm base;       /* must be first */
    zrank_t *rs;               /* the rank it belongs to */
    uint64_t id;               /* communicator id (in every header) */
    int *world_of;             /* group rank -> world rank */
    uint32_t coll_seq;         /* collectives started (tags) */
    uint32_t split_seq;        /* splits started (sub-group ids) */
    wf_comm_req_t **batch;     /* 2 * size: requests of one collective */
    wf_comm_req_t **pending;   /* send / recv posted in a group call */
    int npending, cap_pending; /* used / room in pending */
} zcomm_t;

_Static_assert(offsetof(zcomm_t, base) == 0, "base must come first");

#define REQ_CHUNK 32

static const struct wf_comm_iface zmq_iface;

static zcomm_t *Z(wf_comm_t *c) { return (zcomm_t *)c; }

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

static void local_ref(wf_comm_zmq_local_t *l)
{
    atomic_fetch_add(&l->refs, 1);
}

wf_comm_zmq_local_t *wf_comm_zmq_local_ref(wf_comm_zmq_local_t *l)
{
    local_ref(l);
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

/* ---------------------------------------------------------------------- */
/* sockets and endpoints                                                   */

static int set_int(void *s, int opt, int v)
{
    return zmq_setsockopt(s, opt, &v, sizeof v);
}

/* A ROUTER with the options every rank socket needs; set before any bind
 * or connect because ZeroMQ copies them into each new connection. */
static void *router_new(void *zctx, int64_t max_message_bytes)
{
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    if (!s)
        return NULL;
    int64_t maxmsg = max_message_bytes > 0 ? max_message_bytes : -1;
    if (set_int(s, ZMQ_LINGER, 0) != 0 ||
        set_int(s, ZMQ_ROUTER_MANDATORY, 1) != 0 ||
        /* unlimited queues: a send never waits for the receiver (this is
         * what makes ring exchanges deadlock-free); memory is bounded by
         * the operations the caller has in flight */
        set_int(s, ZMQ_SNDHWM, 0) != 0 || set_int(s, ZMQ_RCVHWM, 0) != 0 ||
        set_int(s, ZMQ_RECONNECT_IVL, RECONNECT_IVL_MS) != 0 ||
        set_int(s, ZMQ_RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS) != 0 ||
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

wf_status_t wf_comm_zmq_endpoint_new(void *zmq_ctx, const char *bind_addr,
                                     int64_t max_message_bytes,
                                     wf_comm_zmq_endpoint_t **ret_ep)
{
    assert(zmq_ctx && bind_addr && ret_ep);
    if (strlen(bind_addr) >= WF_COMM_ZMQ_ENDPOINT_MAX)
        return WF_E_BAD_ARGUMENT;
    wf_comm_zmq_endpoint_t *ep = calloc(1, sizeof *ep);
    if (!ep)
        return WF_E_NO_MEMORY;
    ep->sock = router_new(zmq_ctx, max_message_bytes);
    if (!ep->sock) {
        free(ep);
        return WF_E_INTERNAL;
    }
    if (zmq_bind(ep->sock, bind_addr) != 0) {
        zmq_close(ep->sock);
        free(ep);
        return WF_E_CONNECT;
    }
    size_t len = sizeof ep->addr;
    if (zmq_getsockopt(ep->sock, ZMQ_LAST_ENDPOINT, ep->addr, &len) != 0) {
        zmq_close(ep->sock);
        free(ep);
        return WF_E_INTERNAL;
    }
    ep->addr[sizeof ep->addr - 1] = '\0';
    *ret_ep = ep;
    return WF_OK;
}

const char *wf_comm_zmq_endpoint_address(const wf_comm_zmq_endpoint_t *ep)
{
    assert(ep);
    return ep->addr;
}

void wf_comm_zmq_endpoint_destroy(wf_comm_zmq_endpoint_t **ep)
{
    if (!ep || !*ep)
        return;
    zmq_close((*ep)->sock);
    free(*ep);
    *ep = NULL;
}

/* ---------------------------------------------------------------------- */
/* requests                                                                */

static wf_status_t pool_grow(zrank_t *rs)
{
    if (rs->nchunks == rs->cap_chunks) {
        int cap = rs->cap_chunks ? 2 * rs->cap_chunks : 4;
        wf_comm_req_t **p = realloc(rs->chunks, (size_t)cap * sizeof *p);
        if (!p)
            return WF_E_NO_MEMORY;
        rs->chunks = p;
        rs->cap_chunks = cap;
    }
    wf_comm_req_t *chunk = calloc(REQ_CHUNK, sizeof *chunk);
    if (!chunk)
        return WF_E_NO_MEMORY;
    rs->chunks[rs->nchunks++] = chunk;
    for (int i = 0; i < REQ_CHUNK; i++) {
        chunk[i].rs = rs;
        atomic_init(&chunk[i].zc_pending, 0);
        chunk[i].next = rs->free_reqs;
        rs->free_reqs = &chunk[i];
    }
    return WF_OK;
}

static wf_comm_req_t *req_get(zrank_t *rs, int kind)
{
    if (!rs->free_reqs && pool_grow(rs) != WF_OK)
        return NULL;
    wf_comm_req_t *r = rs->free_reqs;
    rs->free_reqs = r->next;
    r->next = NULL;
    r->kind = kind;
    r->state = REQ_POSTED;
    r->status = WF_OK;
    r->rbuf = NULL;
    r->bytes = 0;
    return r;
}

static void req_put(zrank_t *rs, wf_comm_req_t *r)
{
    r->state = REQ_FREE;
    r->next = rs->free_reqs;
    rs->free_reqs = r;
}

static int req_done(wf_comm_req_t *r)
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
 * it). WF_E_NO_MEMORY when it can be neither. */
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
    umsg_fifo_t *uq = &rs->unexp[src];
    if (uq->tail)
        uq->tail->next = u;
    else
        uq->head = u;
    uq->tail = u;
    return WF_OK;
}

static wf_status_t send_hdr_only(zrank_t *rs, int dst, int type)
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

/* Handle one received message of nf frames (closes them). */
static wf_status_t handle_frames(zrank_t *rs, zmq_msg_t *f, int nf, int extra)
{
    wf_status_t st = WF_OK;
    hdr_t h;
    int ok = !extra && nf >= 2 &&
             hdr_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &h) &&
             h.world_id == rs->world_id && h.src < (uint32_t)rs->nranks &&
             (int)h.src != rs->rank && zmq_msg_size(&f[0]) == ID_LEN &&
             memcmp(zmq_msg_data(&f[0]), rs->ids + (size_t)h.src * ID_LEN,
                    ID_LEN) == 0;
    int src = ok ? (int)h.src : -1;
    if (ok && h.type == MSG_HELLO && nf == 2 && src > rs->rank &&
        h.tag == (uint32_t)rs->nranks) {
        if (!rs->joined[src]) {
            rs->joined[src] = 1;
            rs->missing--;
        }
        /* answer every hello (a peer may have restarted its handshake) */
        st = send_hdr_only(rs, src, MSG_ACK);
    } else if (ok && h.type == MSG_ACK && nf == 2 && src < rs->rank &&
               h.tag == (uint32_t)rs->nranks) {
        if (!rs->joined[src]) {
            rs->joined[src] = 1;
            rs->missing--;
        }
    } else if (ok && h.type == MSG_DATA && nf == 3 &&
               h.bytes == (uint64_t)zmq_msg_size(&f[2])) {
        st = deliver(rs, src, h.comm_id, h.tag, h.phase, h.op, &f[2]);
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
        zmq_msg_t f[3], junk;
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
            zmq_msg_t *m = nf < 3 ? &f[nf] : &junk;
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

static int is_aborted(const zrank_t *rs)
{
    return atomic_load(&rs->local->aborted);
}

/* Wait up to timeout_ms (< 0: no limit) for a message, an abort or a
 * zero-copy release, then handle every queued message. */
static wf_status_t progress(zrank_t *rs, long timeout_ms)
{
    zmq_pollitem_t it[3] = {
        {rs->sock, 0, ZMQ_POLLIN, 0},
        {NULL, rs->local->efd, ZMQ_POLLIN, 0},
        {NULL, rs->zc_efd, ZMQ_POLLIN, 0},
    };
    if (zmq_poll(it, 3, timeout_ms) < 0)
        return errno == EINTR ? WF_OK : WF_E_INTERNAL;
    if (it[2].revents & ZMQ_POLLIN) {
        uint64_t v;
        ssize_t rc = read(rs->zc_efd, &v, sizeof v);
        (void)rc; /* EAGAIN: another wake-up already consumed it */
    }
    if (is_aborted(rs))
        return WF_E_ABORTED;
    return drain(rs);
}

/* The rank's reaction to an abort, on its own thread: close the socket
 * (linger 0 drops what is queued and makes ZeroMQ release every zero-copy
 * buffer), wait for those releases, fail every posted receive. After it,
 * no other thread touches a caller's buffer. Idempotent. */
static void rank_shutdown(zrank_t *rs, int linger_ms)
{
    if (rs->sock) {
        set_int(rs->sock, ZMQ_LINGER, linger_ms);
        zmq_close(rs->sock);
        rs->sock = NULL;
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
static int64_t op_deadline(const zrank_t *rs)
{
    return rs->op_timeout_ms > 0 ? now_ms() + rs->op_timeout_ms : -1;
}

/* Wait until every request of reqs (n, NULL entries skipped) completes,
 * release them all, and return the first error. An abort (seen here or
 * raised by a timeout or a socket failure) completes them all first. */
static wf_status_t wait_reqs(zrank_t *rs, wf_comm_req_t **reqs, int n,
                             int64_t deadline)
{
    wf_status_t fatal = WF_OK;
    for (;;) {
        int all = 1;
        for (int i = 0; i < n && all; i++)
            if (reqs[i] && !req_done(reqs[i]))
                all = 0;
        if (all)
            break;
        if (is_aborted(rs)) {
            fatal = WF_E_ABORTED;
            rank_shutdown(rs, 0);
            break;
        }
        long t = -1;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                fatal = WF_E_TIMEOUT;
                wf_comm_zmq_local_abort(rs->local);
                rank_shutdown(rs, 0);
                break;
            }
            t = (long)left;
        }
        wf_status_t st = progress(rs, t);
        if (st != WF_OK && st != WF_E_ABORTED) {
            /* the socket failed or a message could not be kept: the
             * world cannot stay in step, so it ends here */
            fatal = st;
            wf_comm_zmq_local_abort(rs->local);
            rank_shutdown(rs, 0);
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
        if (req_done(r))
            req_put(rs, r);
        /* else: leaked with rs (ZeroMQ kept the buffer past the wait) */
    }
    return fatal != WF_OK ? fatal : first;
}

/* ---------------------------------------------------------------------- */
/* posting                                                                 */

/* Fail fast on an aborted domain (and shut this rank's socket once). */
static wf_status_t check_alive(zrank_t *rs)
{
    if (!is_aborted(rs))
        return WF_OK;
    rank_shutdown(rs, 0);
    return WF_E_ABORTED;
}

static wf_status_t post_recv(zcomm_t *zc, void *buf, size_t bytes, int peer,
                             uint32_t tag, int phase, int op,
                             wf_comm_req_t **ret_req)
{
    zrank_t *rs = zc->rs;
    wf_status_t st = check_alive(rs);
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

static wf_status_t post_send(zcomm_t *zc, const void *buf, size_t bytes,
                             int peer, uint32_t tag, int phase, int op,
                             wf_comm_req_t **ret_req)
{
    zrank_t *rs = zc->rs;
    wf_status_t st = check_alive(rs);
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
            req_put(rs, r);
            return WF_E_NO_MEMORY;
        }
        if (bytes)
            memcpy(zmq_msg_data(&m), buf, bytes);
        st = deliver(rs, dst, zc->id, tag, phase, op, &m);
        if (st != WF_OK) {
            req_put(rs, r);
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
        req_put(rs, r);
        if (errno == EHOSTUNREACH) {
            /* the peer's connection is gone: the world cannot go on */
            wf_comm_zmq_local_abort(rs->local);
            rank_shutdown(rs, 0);
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
/* point-to-point entries                                                  */

static wf_status_t p2p(zcomm_t *zc, int send, const void *sbuf, void *rbuf,
                       size_t bytes, int peer)
{
    if (zc->base.group_depth > 0 && zc->npending == zc->cap_pending) {
        int cap = 2 * zc->cap_pending;
        wf_comm_req_t **p = realloc(zc->pending, (size_t)cap * sizeof *p);
        if (!p)
            return WF_E_NO_MEMORY;
        zc->pending = p;
        zc->cap_pending = cap;
    }
    int64_t dl = op_deadline(zc->rs);
    wf_comm_req_t *r = NULL;
    wf_status_t st = send ? post_send(zc, sbuf, bytes, peer, 0, 0, OPC_P2P, &r)
                          : post_recv(zc, rbuf, bytes, peer, 0, 0, OPC_P2P, &r);
    if (st != WF_OK)
        return st;
    if (zc->base.group_depth > 0) {
        zc->pending[zc->npending++] = r;
        return WF_OK;
    }
    return wait_reqs(zc->rs, &r, 1, dl);
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
    int n = zc->npending;
    zc->npending = 0;
    return wait_reqs(zc->rs, zc->pending, n, op_deadline(zc->rs));
}

static wf_status_t z_isend(wf_comm_t *c, const void *buf, size_t bytes,
                           int peer, wf_comm_req_t **ret_req)
{
    return post_send(Z(c), buf, bytes, peer, 0, 0, OPC_P2P, ret_req);
}

static wf_status_t z_irecv(wf_comm_t *c, void *buf, size_t bytes, int peer,
                           wf_comm_req_t **ret_req)
{
    return post_recv(Z(c), buf, bytes, peer, 0, 0, OPC_P2P, ret_req);
}

static wf_status_t z_wait(wf_comm_t *c, wf_comm_req_t *r)
{
    zrank_t *rs = Z(c)->rs;
    return wait_reqs(rs, &r, 1, op_deadline(rs));
}

static wf_status_t z_test(wf_comm_t *c, wf_comm_req_t *r, int *ret_done)
{
    zrank_t *rs = Z(c)->rs;
    if (!req_done(r)) {
        if (is_aborted(rs)) {
            rank_shutdown(rs, 0);
        } else if (rs->sock) {
            wf_status_t st = progress(rs, 0);
            if (st != WF_OK && st != WF_E_ABORTED) {
                wf_comm_zmq_local_abort(rs->local);
                rank_shutdown(rs, 0);
            } else if (st == WF_E_ABORTED) {
                rank_shutdown(rs, 0);
            }
        }
    }
    if (!req_done(r)) {
        *ret_done = 0;
        return WF_OK;
    }
    *ret_done = 1;
    wf_status_t st = r->status;
    if (st == WF_OK && is_aborted(rs))
        st = WF_E_ABORTED;
    req_put(rs, r);
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
    b->st = post_recv(b->zc, buf, bytes, peer, b->tag, phase, b->op, &r);
    if (b->st == WF_OK)
        b->zc->batch[b->k++] = r;
}

static void b_send(batch_t *b, const void *buf, size_t bytes, int peer,
                   int phase)
{
    if (b->st != WF_OK)
        return;
    wf_comm_req_t *r = NULL;
    b->st = post_send(b->zc, buf, bytes, peer, b->tag, phase, b->op, &r);
    if (b->st == WF_OK)
        b->zc->batch[b->k++] = r;
}

static wf_status_t b_wait(batch_t *b)
{
    wf_status_t st = wait_reqs(b->zc->rs, b->zc->batch, b->k, b->deadline);
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
                 .op = op, .deadline = op_deadline(zc->rs)};
    return b;
}

/* Copy n bytes from src + soff to dst + doff; nothing for n == 0 (a NULL
 * buffer is then allowed) or for the in-place case. */
static void copy_at(void *dst, size_t doff, const void *src, size_t soff,
                    size_t n)
{
    if (n == 0)
        return;
    char *d = (char *)dst + doff;
    const char *s = (const char *)src + soff;
    if (d != s)
        memcpy(d, s, n);
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
    wf_status_t st = check_alive(zc->rs);
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

/* Direct all-gather: my block to every peer, every peer's block from it.
 * counts == NULL: even blocks of `even` bytes at j * even. */
static wf_status_t gather_all(zcomm_t *zc, int op, const void *sendbuf,
                              size_t sendbytes, void *recvbuf,
                              const size_t *counts, const size_t *displs,
                              size_t even)
{
    int n = zc->base.size, me = zc->base.rank;
    wf_status_t st = check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, op);
    for (int s = 1; s < n; s++) {
        int j = (me + s) % n;
        size_t cj = counts ? counts[j] : even;
        size_t dj = counts ? displs[j] : (size_t)j * even;
        b_recv(&b, at_w(recvbuf, dj), cj, j, 0);
    }
    for (int s = 1; s < n; s++)
        b_send(&b, sendbuf, sendbytes, (me - s + n) % n, 0);
    size_t cme = counts ? counts[me] : even;
    size_t dme = counts ? displs[me] : (size_t)me * even;
    if (cme != sendbytes)
        st = WF_E_BAD_ARGUMENT;
    else
        copy_at(recvbuf, dme, sendbuf, 0, sendbytes);
    return keep(st, b_wait(&b));
}

static wf_status_t z_allgather(wf_comm_t *c, const void *sendbuf,
                               void *recvbuf, size_t bytes)
{
    return gather_all(Z(c), OPC_ALLGATHER, sendbuf, bytes, recvbuf, NULL,
                      NULL, bytes);
}

static wf_status_t z_allgatherv(wf_comm_t *c, const void *sendbuf,
                                size_t sendbytes, void *recvbuf,
                                const size_t *recvcounts, const size_t *displs)
{
    return gather_all(Z(c), OPC_ALLGATHERV, sendbuf, sendbytes, recvbuf,
                      recvcounts, displs, 0);
}

/* Direct all-to-all. sc == NULL: even blocks of `even` bytes. */
static wf_status_t exchange_all(zcomm_t *zc, int op, const void *sendbuf,
                                const size_t *sc, const size_t *sd,
                                void *recvbuf, const size_t *rc,
                                const size_t *rd, size_t even)
{
    int n = zc->base.size, me = zc->base.rank;
    wf_status_t st = check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, op);
    for (int s = 1; s < n; s++) {
        int j = (me - s + n) % n;
        b_recv(&b, at_w(recvbuf, rc ? rd[j] : (size_t)j * even),
               rc ? rc[j] : even, j, 0);
    }
    for (int s = 1; s < n; s++) {
        int j = (me + s) % n;
        b_send(&b, at(sendbuf, sc ? sd[j] : (size_t)j * even),
               sc ? sc[j] : even, j, 0);
    }
    size_t sme = sc ? sc[me] : even, rme = rc ? rc[me] : even;
    if (sme != rme)
        st = WF_E_BAD_ARGUMENT;
    else
        copy_at(recvbuf, rc ? rd[me] : (size_t)me * even, sendbuf,
                sc ? sd[me] : (size_t)me * even, sme);
    return keep(st, b_wait(&b));
}

static wf_status_t z_alltoall(wf_comm_t *c, const void *sendbuf,
                              void *recvbuf, size_t bytes)
{
    return exchange_all(Z(c), OPC_ALLTOALL, sendbuf, NULL, NULL, recvbuf,
                        NULL, NULL, bytes);
}

static wf_status_t z_alltoallv(wf_comm_t *c, const void *sendbuf,
                               const size_t *sendcounts, const size_t *sdispls,
                               void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls)
{
    return exchange_all(Z(c), OPC_ALLTOALLV, sendbuf, sendcounts, sdispls,
                        recvbuf, recvcounts, rdispls, 0);
}

/* Element range [lo, hi) of chunk i when count elements are cut in n
 * (the host backend's split, so both reduce the same elements together). */
static void chunk_range(size_t count, int n, int i, size_t *lo, size_t *hi)
{
    size_t q = count / (size_t)n, r = count % (size_t)n;
    size_t ui = (size_t)i;
    *lo = q * ui + (ui < r ? ui : r);
    *hi = *lo + q + (ui < r ? 1 : 0);
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
    wf_status_t st = check_alive(rs);
    if (st != WF_OK)
        return st;
    size_t es = dtype == WF_COMM_F64 ? sizeof(double) : sizeof(float);
    size_t lo, hi;
    chunk_range(count, n, me, &lo, &hi);
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
        chunk_range(count, n, j, &l, &h);
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
        chunk_range(count, n, j, &l, &h);
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
    wf_status_t st = check_alive(zc->rs);
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
    int n = c->size, me = c->rank;
    wf_status_t st = check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, OPC_SCATTERV);
    if (me == root) {
        for (int s = 1; s < n; s++) {
            int j = (root + s) % n;
            b_send(&b, at(sendbuf, displs[j]), sendcounts[j], j, 0);
        }
        if (sendcounts[me] != recvbytes)
            st = WF_E_BAD_ARGUMENT;
        else
            copy_at(recvbuf, 0, sendbuf, displs[me], recvbytes);
    } else {
        b_recv(&b, recvbuf, recvbytes, root, 0);
    }
    return keep(st, b_wait(&b));
}

static wf_status_t z_gatherv(wf_comm_t *c, const void *sendbuf,
                             size_t sendbytes, void *recvbuf,
                             const size_t *recvcounts, const size_t *displs,
                             int root)
{
    zcomm_t *zc = Z(c);
    int n = c->size, me = c->rank;
    wf_status_t st = check_alive(zc->rs);
    if (st != WF_OK)
        return st;
    batch_t b = b_begin(zc, OPC_GATHERV);
    if (me == root) {
        for (int s = 1; s < n; s++) {
            int j = (root + s) % n;
            b_recv(&b, at_w(recvbuf, displs[j]), recvcounts[j], j, 0);
        }
        if (recvcounts[me] != sendbytes)
            st = WF_E_BAD_ARGUMENT;
        else
            copy_at(recvbuf, displs[me], sendbuf, 0, sendbytes);
    } else {
        b_send(&b, sendbuf, sendbytes, root, 0);
    }
    return keep(st, b_wait(&b));
}

/* ---------------------------------------------------------------------- */
/* handles                                                                 */

static void zcomm_free(zcomm_t *zc)
{
    if (!zc)
        return;
    free(zc->world_of);
    free(zc->batch);
    free(zc->pending);
    free(zc);
}

/* A handle on rs for a group of n ranks; takes world_of (n entries). */
static zcomm_t *zcomm_new(zrank_t *rs, uint64_t id, int n, int rank,
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
    zc->cap_pending = 8;
    zc->pending = malloc((size_t)zc->cap_pending * sizeof *zc->pending);
    if (!zc->batch || !zc->pending) {
        zcomm_free(zc);
        return NULL;
    }
    return zc;
}

/* Close the socket (letting it flush for linger_ms) and free the rank. */
static void rank_free(zrank_t *rs, int linger_ms)
{
    rank_shutdown(rs, linger_ms);
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
    for (int i = 0; i < rs->nchunks; i++)
        free(rs->chunks[i]);
    free(rs->chunks);
    free(rs->posted);
    free(rs->unexp);
    free(rs->ids);
    free(rs->joined);
    free(rs->scratch);
    if (rs->zc_efd >= 0)
        close(rs->zc_efd);
    pthread_cond_destroy(&rs->zc_cv);
    pthread_mutex_destroy(&rs->zc_mu);
    wf_comm_zmq_local_unref(&rs->local);
    free(rs);
}

static void rank_unref(zrank_t *rs)
{
    /* flush what is queued to live peers unless the world was aborted */
    if (atomic_fetch_sub(&rs->refs, 1) == 1)
        rank_free(rs, is_aborted(rs) ? 0 : WF_COMM_ZMQ_LINGER_MS);
}

static void z_destroy(wf_comm_t *c)
{
    zcomm_t *zc = Z(c);
    zrank_t *rs = zc->rs;
    zcomm_free(zc);
    rank_unref(rs);
}

static void z_abort(wf_comm_t *c)
{
    wf_comm_zmq_local_abort(Z(c)->rs->local);
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
    wf_status_t st = gather_all(zc, OPC_SPLIT, mine, 8, all, NULL, NULL, 8);
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
    zcomm_t *nz = zcomm_new(zc->rs, id, size, pos, world_of);
    if (!nz)
        return WF_E_NO_MEMORY;
    atomic_fetch_add(&zc->rs->refs, 1);
    *ret_comm = &nz->base;
    return WF_OK;
}

/* ---------------------------------------------------------------------- */
/* world formation                                                         */

/* "3, 5, 7" (at most a few) into buf: the peers that did not join. */
static void missing_list(const zrank_t *rs, char *buf, size_t len)
{
    size_t off = 0;
    int shown = 0;
    buf[0] = '\0';
    for (int j = 0; j < rs->nranks && off < len; j++) {
        if (j == rs->rank || rs->joined[j])
            continue;
        if (shown == 8) {
            snprintf(buf + off, len - off, ", ...");
            return;
        }
        int w = snprintf(buf + off, len - off, "%s%d", shown ? ", " : "", j);
        if (w < 0)
            return;
        off += (size_t)w;
        shown++;
    }
}

static zrank_t *rank_alloc(const wf_comm_zmq_config_t *cfg, int rank)
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
    rs->ids = malloc(n * ID_LEN);
    rs->posted = calloc(n, sizeof *rs->posted);
    rs->unexp = calloc(n, sizeof *rs->unexp);
    rs->joined = calloc(n, 1);
    int mu = pthread_mutex_init(&rs->zc_mu, NULL) == 0;
    int cv = mu && pthread_cond_init(&rs->zc_cv, NULL) == 0;
    rs->zc_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!rs->ids || !rs->posted || !rs->unexp || !rs->joined || !mu || !cv ||
        rs->zc_efd < 0 || pool_grow(rs) != WF_OK) {
        if (cv)
            pthread_cond_destroy(&rs->zc_cv);
        if (mu)
            pthread_mutex_destroy(&rs->zc_mu);
        if (rs->zc_efd >= 0)
            close(rs->zc_efd);
        for (int i = 0; i < rs->nchunks; i++)
            free(rs->chunks[i]);
        free(rs->chunks);
        free(rs->ids);
        free(rs->posted);
        free(rs->unexp);
        free(rs->joined);
        free(rs);
        return NULL;
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

wf_status_t wf_comm_zmq_world_new(const wf_comm_zmq_config_t *cfg, int rank,
                                  wf_comm_t **ret_comm)
{
    return wf_comm_zmq_world_join(cfg, rank, NULL, NULL, 0, ret_comm);
}

wf_status_t wf_comm_zmq_world_join(const wf_comm_zmq_config_t *cfg, int rank,
                                   wf_comm_zmq_endpoint_t **epp, char *err,
                                   size_t errlen, wf_comm_t **ret_comm)
{
    assert(cfg && ret_comm);
    wf_comm_zmq_endpoint_t *ep = epp ? *epp : NULL;
    if (epp)
        *epp = NULL;
    wf_errf(err, errlen, "%s", "");
    wf_status_t st = WF_OK;
    zrank_t *rs = NULL;
    if (!cfg->zmq_ctx || cfg->nranks < 1 ||
        cfg->nranks > WF_COMM_ZMQ_MAX_RANKS || rank < 0 ||
        rank >= cfg->nranks || !cfg->endpoints) {
        wf_errf(err, errlen, "comm zmq: bad config (rank %d of %d)", rank,
                cfg->nranks);
        st = WF_E_BAD_ARGUMENT;
        goto fail;
    }
    for (int j = 0; j < cfg->nranks; j++) {
        if (!cfg->endpoints[j] ||
            strlen(cfg->endpoints[j]) >= WF_COMM_ZMQ_ENDPOINT_MAX) {
            wf_errf(err, errlen, "comm zmq: endpoint of rank %d missing or "
                    "too long", j);
            st = WF_E_BAD_ARGUMENT;
            goto fail;
        }
    }
    wf_comm_zmq_local_t *local = cfg->local;
    if (local)
        local_ref(local);
    else if ((st = wf_comm_zmq_local_new(&local)) != WF_OK)
        goto fail;
    rs = rank_alloc(cfg, rank);
    if (!rs) {
        wf_comm_zmq_local_unref(&local);
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    rs->local = local; /* rs owns the reference from here */
    if (ep) {
        rs->sock = ep->sock;
        free(ep);
        ep = NULL;
    } else {
        rs->sock = router_new(cfg->zmq_ctx, cfg->max_message_bytes);
        if (!rs->sock) {
            wf_errf(err, errlen, "comm zmq: socket: %s", zmq_strerror(errno));
            st = WF_E_INTERNAL;
            goto fail;
        }
        if (zmq_bind(rs->sock, cfg->endpoints[rank]) != 0) {
            wf_errf(err, errlen, "comm zmq: rank %d: bind %s: %s", rank,
                    cfg->endpoints[rank], zmq_strerror(errno));
            st = WF_E_CONNECT;
            goto fail;
        }
    }
    /* the identity peers see on this rank's outgoing connections */
    if (zmq_setsockopt(rs->sock, ZMQ_ROUTING_ID,
                       rs->ids + (size_t)rank * ID_LEN, ID_LEN) != 0) {
        st = WF_E_INTERNAL;
        goto fail;
    }
    /* connect down: one connection per pair, used both ways. With
     * CONNECT_ROUTING_ID the peer is routable at once (messages wait in
     * the pipe until the connection is up), so the hello goes now. */
    for (int j = 0; j < rank; j++) {
        if (zmq_setsockopt(rs->sock, ZMQ_CONNECT_ROUTING_ID,
                           rs->ids + (size_t)j * ID_LEN, ID_LEN) != 0 ||
            zmq_connect(rs->sock, cfg->endpoints[j]) != 0) {
            wf_errf(err, errlen, "comm zmq: rank %d: connect to rank %d at "
                    "%s: %s", rank, j, cfg->endpoints[j], zmq_strerror(errno));
            st = WF_E_CONNECT;
            goto fail;
        }
        if ((st = send_hdr_only(rs, j, MSG_HELLO)) != WF_OK) {
            wf_errf(err, errlen, "comm zmq: rank %d: hello to rank %d: %s",
                    rank, j, zmq_strerror(errno));
            goto fail;
        }
    }
    /* wait for a hello from every higher rank and an ack from every lower
     * one: then every peer is connected and routable both ways */
    int64_t deadline = cfg->connect_timeout_ms > 0
                           ? now_ms() + cfg->connect_timeout_ms : -1;
    while (rs->missing > 0) {
        long t = -1;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                char who[128];
                missing_list(rs, who, sizeof who);
                wf_errf(err, errlen, "comm zmq: world %#llx rank %d: hello: "
                        "no answer within %d ms from rank(s) %s",
                        (unsigned long long)rs->world_id, rank,
                        cfg->connect_timeout_ms, who);
                st = WF_E_TIMEOUT;
                goto fail;
            }
            t = (long)left;
        }
        st = progress(rs, t);
        if (st != WF_OK) {
            char who[128];
            missing_list(rs, who, sizeof who);
            wf_errf(err, errlen, "comm zmq: world %#llx rank %d: hello: %s "
                    "while waiting for rank(s) %s",
                    (unsigned long long)rs->world_id, rank,
                    st == WF_E_ABORTED ? "aborted" : "socket failed", who);
            goto fail;
        }
    }
    int *world_of = malloc((size_t)cfg->nranks * sizeof *world_of);
    if (!world_of) {
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    for (int j = 0; j < cfg->nranks; j++)
        world_of[j] = j;
    zcomm_t *zc = zcomm_new(rs, WORLD_COMM_ID, cfg->nranks, rank, world_of);
    if (!zc) {
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    *ret_comm = &zc->base;
    return WF_OK;
fail:
    wf_comm_zmq_endpoint_destroy(&ep);
    if (rs) {
        rank_free(rs, 0); /* nothing queued matters: drop it */
    }
    return st;
}

uint64_t wf_comm_zmq_dropped(const wf_comm_t *c)
{
    assert(c && c->iface == &zmq_iface);
    return atomic_load(&((const zcomm_t *)c)->rs->dropped);
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
