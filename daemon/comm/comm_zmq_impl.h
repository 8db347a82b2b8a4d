/* comm_zmq_impl.h — what the files of the ZeroMQ comm backend share
 * (comm_zmq_world.c: endpoints, world formation; comm_zmq_ops.c: the
 * handles, point-to-point and collectives over the plans of p2p_plan.h;
 * comm_zmq_rank.c: one rank's socket, requests, matching and progress,
 * the abort domain; calls go in that order).
 * Private to those three files: users include comm_zmq.h.
 */
#ifndef WF_COMM_ZMQ_IMPL_H
#define WF_COMM_ZMQ_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <zmq.h>

#include "comm_impl.h"
#include "comm_zmq.h"
#include "net/gate.h"
#include "p2p_plan.h"
#include "request_pool.h"

/* ---------------------------------------------------------------------- */
/* wire constants (the layout is in comm_zmq_rank.c)                       */

/* Routing id of a rank: 'W', world id (8 bytes), rank (4 bytes). */
#define ID_LEN 13
/* Communicator id of a world handle (split ones derive theirs). */
#define WORLD_COMM_ID 1u

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

/* ---------------------------------------------------------------------- */
/* types                                                                   */

struct wf_comm_zmq_local {
    atomic_int refs;    /* creator + handles */
    atomic_int aborted; /* set once, never cleared */
    atomic_int waiting; /* calls blocked in wf_zmq_progress now */
    int efd;            /* eventfd written at abort, never read */
};

struct wf_comm_zmq_endpoint {
    void *sock;                          /* ROUTER, bound on inproc */
    wf_gate_t *gate;                     /* the listener in front of it */
    int curve;                           /* bound as a CURVE server */
    char addr[WF_COMM_ZMQ_ENDPOINT_MAX]; /* ZMQ_LAST_ENDPOINT */
};

enum req_kind { REQ_SEND, REQ_RECV };
/* FREE (pool) -> POSTED (receive waiting for its message) -> DONE. A send
 * is DONE once queued; a zero-copy one is complete only when zc_pending
 * drops to 0 too. */
enum req_state { REQ_FREE, REQ_POSTED, REQ_DONE };

struct wf_comm_req {
    struct wf_comm_req *next; /* posted-receive FIFO */
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
    wf_gate_t *gate;            /* the listener in front of it: peers of
                                 * higher ranks connect here */
    atomic_int refs;            /* handles of this rank */
    uint64_t world_id;          /* epoch token */
    int rank, nranks;           /* this rank, world size */
    int op_timeout_ms;          /* per blocking call; <= 0 none */
    unsigned char *ids;         /* nranks * ID_LEN routing ids */
    req_fifo_t *posted;         /* nranks: posted receives per source */
    umsg_fifo_t *unexp;         /* nranks: unexpected messages per source */
    uint64_t *unexp_bytes;      /* nranks: their payload bytes per source */
    uint64_t unexp_max;         /* bound on each; 0: none */
    umsg_t *free_umsg;          /* recycled unexpected-message nodes */
    wf_req_pool_t reqs;         /* request pool */
    unsigned char *joined;      /* nranks: hello (higher) / ack (lower) seen */
    int missing;                /* peers not yet joined */
    void *scratch;              /* allreduce: received chunks */
    size_t scratch_cap;         /* bytes in scratch */
    _Atomic uint64_t dropped;   /* rejected messages (refused too) */
    _Atomic uint64_t refused;   /* CURVE: from a node not holding the
                                 * rank its routing id names */
    _Atomic uint64_t over;      /* dropped past unexp_max (WF_E_LIMIT) */
    char **nodes;               /* CURVE: nranks node names (copies);
                                 * NULL on a plain world */
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
    wf_p2p_op_t *plan;         /* 2 * size: the plan of one collective */
    wf_req_list_t pending;     /* send / recv posted in a group call */
} zcomm_t;

_Static_assert(offsetof(zcomm_t, base) == 0, "base must come first");

/* ---------------------------------------------------------------------- */
/* little-endian fields and the clock                                      */

static inline void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}


static inline int64_t wf_zmq_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/* ---------------------------------------------------------------------- */
/* one rank (comm_zmq_rank.c)                                              */

/* A rank's socket and its listener: a ROUTER with the options every
 * rank socket needs (set before any bind or connect, as ZeroMQ copies
 * them into each new connection; recv_messages: ZMQ_RCVHWM, <= 0: none)
 * bound on inproc, and the gate (net/gate.h) listening on bind_addr in
 * front of it: frames over max_message_bytes (<= 0: no limit), messages
 * of more than a header and a payload, or more bytes than both, close
 * the connection before they are read; with curve, CURVE with the node
 * keys of the context's ZAP handler (WF_ZAP_NODES). *addr: the address
 * peers connect to. WF_E_CONNECT when bind_addr cannot be bound. */
wf_status_t wf_zmq_listen(void *zctx, const char *bind_addr,
                          int64_t max_message_bytes, int recv_messages,
                          const wf_keypair_t *curve, void **ret_sock,
                          wf_gate_t **ret_gate, char *addr, size_t addr_len);

/* The rank of world cfg->world_id at `rank`, without its socket: routing
 * ids, queues, the request pool, the zero-copy eventfd, with CURVE the
 * ranks' node names. NULL when out of memory (cfg is already checked). The caller sets rs->local and rs->sock. */
zrank_t *wf_zmq_rank_alloc(const wf_comm_zmq_config_t *cfg, int rank);

/* Close the socket (letting it flush for linger_ms) and free the rank,
 * unless ZeroMQ never released a zero-copy buffer (then it is kept). */
void wf_zmq_rank_free(zrank_t *rs, int linger_ms);

/* Drop a handle's reference on the rank; the last frees it. */
void wf_zmq_rank_unref(zrank_t *rs);

/* 1 once the rank's abort domain was aborted. */
int wf_zmq_is_aborted(const zrank_t *rs);

/* Send a header-only message (hello / ack) to world rank dst. */
wf_status_t wf_zmq_send_hdr_only(zrank_t *rs, int dst, int type);

/* Wait up to timeout_ms (< 0: no limit) for a message, an abort or a
 * zero-copy release, then handle every queued message. */
wf_status_t wf_zmq_progress(zrank_t *rs, long timeout_ms);

/* The rank's reaction to an abort, on its own thread: close the socket,
 * wait for ZeroMQ's zero-copy releases, fail every posted receive.
 * Idempotent. */
void wf_zmq_rank_shutdown(zrank_t *rs, int linger_ms);

/* Deadline of a blocking call starting now; -1 for none. */
int64_t wf_zmq_op_deadline(const zrank_t *rs);

/* Wait until every request of reqs (n, NULL entries skipped) completes,
 * release them all (setting the entries to NULL), return the first
 * error. An abort, a timeout or a socket failure completes them all. */
wf_status_t wf_zmq_wait_reqs(zrank_t *rs, wf_comm_req_t **reqs, int n,
                             int64_t deadline);

/* WF_OK, or WF_E_ABORTED (shutting the socket once) on an aborted
 * domain. */
wf_status_t wf_zmq_check_alive(zrank_t *rs);

/* Post a receive / send of `bytes` with group rank `peer` of zc, matched
 * by (zc's id, tag, phase) and checked against op. *ret_req is the
 * pool's until wf_zmq_wait_reqs or wf_zmq_req_put. */
wf_status_t wf_zmq_post_recv(zcomm_t *zc, void *buf, size_t bytes, int peer,
                             uint32_t tag, int phase, int op,
                             wf_comm_req_t **ret_req);
wf_status_t wf_zmq_post_send(zcomm_t *zc, const void *buf, size_t bytes,
                             int peer, uint32_t tag, int phase, int op,
                             wf_comm_req_t **ret_req);

/* 1 when r is complete (a zero-copy send: also released by ZeroMQ). */
int wf_zmq_req_done(wf_comm_req_t *r);

/* Hand a complete request back to the rank's pool. */
void wf_zmq_req_put(zrank_t *rs, wf_comm_req_t *r);

/* ---------------------------------------------------------------------- */
/* handles (comm_zmq_ops.c)                                                */

/* A handle on rs for a group of n ranks with communicator id `id`; takes
 * world_of (n entries: group rank -> world rank), also on failure. Does
 * not take a reference on rs (the caller does). NULL when out of
 * memory. */
zcomm_t *wf_zmq_comm_new(zrank_t *rs, uint64_t id, int n, int rank,
                         int *world_of);

#endif /* WF_COMM_ZMQ_IMPL_H */
