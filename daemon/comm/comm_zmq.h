/* comm_zmq.h — the ZeroMQ backend of comm.h: host buffers, ranks across
 * processes and nodes, over point-to-point ZeroMQ connections (tcp:// or
 * ipc://). Implemented by comm_zmq_world.c, comm_zmq_ops.c, comm_zmq_rank.c.
 *
 * Each rank owns one ROUTER socket bound to its endpoint; rank i connects
 * to every rank j < i (one connection per pair, used both ways). A world
 * is formed with a hello / ack exchange, so that when wf_comm_zmq_world_new
 * returns, every peer is connected and routable. Every message carries the
 * world id (the epoch token the cluster hands out): traffic from another
 * world, from an unknown sender, or malformed, is dropped and counted
 * (wf_comm_zmq_dropped), never trusted. With CURVE (config `curve`) the
 * connections are authenticated and encrypted, and a message counts as
 * rank j's only when it came from the node holding rank j (README
 * "Security (comm_zmq)"); without it, the data plane needs an isolated
 * network.
 *
 * Semantics are those of comm.h (NCCL's): per ordered pair, messages match
 * in posting order; group calls and isend / irecv never deadlock a ring
 * exchange (sends are queued by ZeroMQ and never wait for the receiver);
 * allreduce sums in rank order, so every rank gets the host backend's
 * bit-identical result. Differences from the in-process host backend:
 *   - a size or op mismatch is found by the RECEIVING rank only (it gets
 *     WF_E_BAD_ARGUMENT, its peers may get WF_OK): a uniform verdict would
 *     cost a round trip per operation. The communicator stays in step.
 *   - a blocking send returns once ZeroMQ owns the bytes (small messages:
 *     copied at once; messages >= WF_COMM_ZMQ_ZEROCOPY_MIN: sent zero-copy
 *     and complete when ZeroMQ has written them to the kernel), not when
 *     the receiver has them. A send to a peer whose connection is gone
 *     aborts this process's part of the world (WF_E_ABORTED).
 *   - abort is local to the process (as ncclCommAbort): it wakes every
 *     blocked call of every handle sharing the same wf_comm_zmq_local_t
 *     within milliseconds, and fails every later call with WF_E_ABORTED.
 *     Ranks in other processes learn of a failure from their own abort
 *     (the cluster's job) or their per-op timeout. A rank blocked on a
 *     receive from a dead peer stays blocked until one of those.
 *   - optional per-op timeout (config op_timeout_ms > 0): a blocking call
 *     that does not complete in time aborts the local world and returns
 *     WF_E_TIMEOUT (weft.h's code, reused with this meaning); later calls
 *     return WF_E_ABORTED.
 *
 * Threads. Every handle of one rank (its world handle and the handles split
 * from it) shares that rank's socket: they must be used by one thread at a
 * time (the device's worker thread). Several ranks may live in one process,
 * each in its own thread, sharing one ZeroMQ context. wf_comm_abort and
 * wf_comm_zmq_local_abort may be called from any thread.
 *
 * Algorithms (in bytes, point-to-point underneath): allgather(v), alltoall(v),
 * scatterv and gatherv run the plans of p2p_plan.h (NCCL's too), and they
 * and broadcast are direct (every rank posts its receives, then its
 * sends, then waits: n - 1 messages per rank, no step chain);
 * allreduce is reduce-scatter then allgather of chunks (each chunk summed in
 * rank order by its owner); barrier is a dissemination barrier (ceil(log2 n)
 * rounds); split allgathers (color, key) and gives each sub-group an id
 * derived from the parent's id, the split's sequence number and the color,
 * so sub-groups' messages never mix with the parent's or a sibling's.
 *
 * Memory: requests come from a per-rank pool (request_pool.h) that grows
 * by chunks and is reused; a message that arrives before its receive is
 * posted is kept as ZeroMQ received it (no copy) until the receive copies
 * it out (received frames are unaligned: always memcpy). allreduce keeps a per-rank scratch
 * buffer that grows to the largest chunk seen; a handle keeps room for
 * one collective's requests and plan. Collectives do not allocate
 * otherwise; split does.
 *
 * This module does not log; errors come back as status codes, and world
 * formation can fill a caller's message buffer.
 */
#ifndef WF_COMM_ZMQ_H
#define WF_COMM_ZMQ_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "keys.h"

/* Largest world accepted. */
#define WF_COMM_ZMQ_MAX_RANKS 4096
/* Payloads of at least this many bytes are sent zero-copy. */
#define WF_COMM_ZMQ_ZEROCOPY_MIN (64 * 1024)
/* How long a normally destroyed rank's socket may keep flushing queued
 * messages to its peers (ZMQ_LINGER); an aborted one drops them at once. */
#define WF_COMM_ZMQ_LINGER_MS 2000
/* A rank's listener (the gate, net/gate.h, in front of its ROUTER):
 * connections in their ZMTP / CURVE handshake at once (a new one takes
 * the slot of the one in its handshake longest) and the longest a
 * handshake may take. */
#define WF_COMM_ZMQ_HANDSHAKES 64
#define WF_COMM_ZMQ_HANDSHAKE_MS 10000
/* Longest endpoint string (address of a bound endpoint included). */
#define WF_COMM_ZMQ_ENDPOINT_MAX 256

/* The ranks of one world that live in this process: the abort domain.
 * Reference-counted; every handle created with it holds a reference. */
typedef struct wf_comm_zmq_local wf_comm_zmq_local_t;

/* A bound ROUTER socket waiting to become a rank's (two-phase formation:
 * bind "tcp://127.0.0.1:*", publish the bound address through the
 * cluster, then join the world with it). */
typedef struct wf_comm_zmq_endpoint wf_comm_zmq_endpoint_t;

/* Everything a rank needs to join a world. One config may be shared by
 * every rank thread of the process (it is only read). */
typedef struct wf_comm_zmq_config {
    void *zmq_ctx;                /* ZeroMQ context; borrowed, must outlive
                                   * every handle of the world */
    wf_comm_zmq_local_t *local;   /* abort domain shared by this process's
                                   * ranks; NULL: each rank gets its own */
    uint64_t world_id;            /* world / epoch token, same on every
                                   * rank, fresh per world */
    int nranks;                   /* world size, 1..WF_COMM_ZMQ_MAX_RANKS */
    const char *const *endpoints; /* nranks endpoints, by rank (the ones
                                   * peers connect to) */
    int connect_timeout_ms;       /* world formation; <= 0: until abort */
    int op_timeout_ms;            /* per blocking call; <= 0: none */
    int64_t max_message_bytes;    /* largest frame a peer may send (the
                                   * gate cuts the connection; on the
                                   * connections made to lower ranks,
                                   * ZMQ_MAXMSGSIZE); <= 0: no limit */
    /* Bounds on what one peer connection can make a rank hold (README
     * "Bounded cluster data plane"): the rank's listener (the gate,
     * net/gate.h) cuts a connection whose message goes over a header and
     * a payload of max_message_bytes, so a message that never ends is
     * cut; at most recv_messages whole messages of a connection wait
     * unread behind it (the ROUTER's RCVHWM; then the gate stops reading
     * it and TCP pushes back on the sender, whose sends still never
     * block); the
     * rank keeps at most unexpected_bytes of payload from one source
     * rank ahead of the receives posted for them; the message that would
     * go over is dropped, counted (wf_comm_zmq_dropped, _over) and fails
     * the call that was progressing with WF_E_LIMIT, aborting the domain
     * (a dropped message would leave its receive waiting for ever).
     * Messages that are not for this world (unknown routing id, another
     * world id, malformed, not come the way their rank's come) are
     * dropped as they are read, never kept. */
    int recv_messages;            /* ZMQ_RCVHWM per connection; <= 0: none */
    int64_t unexpected_bytes;     /* per source rank; <= 0: no limit */
    /* CURVE (README "Security"); curve NULL: plain tcp, the fields below
     * unused. With it, every rank's listener is a CURVE server admitting
     * the keys of the WF_ZAP_NODES domain (base/zap.h) for the peers that
     * connect to it, and its socket a CURVE client pinned to rank_keys[j]
     * when it connects to rank j; a message from a higher rank j is
     * accepted only with the node name rank_nodes[j] in the gate's frame
     * (the node ZAP admitted), one from a lower rank only over the pinned
     * connection: no other node, trusted or not, can speak for a rank. */
    const wf_keypair_t *curve;    /* this node's key pair; borrowed */
    const char *const *rank_keys; /* nranks Z85 public keys: the node
                                   * holding each rank */
    const char *const *rank_nodes; /* nranks node names, by rank */
} wf_comm_zmq_config_t;

/* --- abort domain ----------------------------------------------------- */

/* Create an abort domain. Caller owns one reference
 * (wf_comm_zmq_local_unref). Errors: WF_E_NO_MEMORY, WF_E_INTERNAL (no
 * eventfd). */
wf_status_t wf_comm_zmq_local_new(wf_comm_zmq_local_t **ret_local);

/* Abort every handle of the domain: blocked calls return WF_E_ABORTED
 * within milliseconds, later calls at once. Any thread, any number of
 * times. Also what wf_comm_abort does on a handle of the domain. */
void wf_comm_zmq_local_abort(wf_comm_zmq_local_t *l);

/* Take one more reference on the domain (for a second owner, such as a
 * daemon that aborts the world from its main thread while the regroup
 * that joins it holds the config's). Returns l. */
wf_comm_zmq_local_t *wf_comm_zmq_local_ref(wf_comm_zmq_local_t *l);

/* 1 once the domain has been aborted, else 0. */
int wf_comm_zmq_local_aborted(const wf_comm_zmq_local_t *l);

/* How many calls on the domain's handles are blocked now waiting for a
 * message (a blocking op, a wait, a world's formation). A test waits for
 * it (with its own flag set just before each call) to know that its
 * ranks are blocked inside their calls before it aborts them or kills a
 * peer. Any thread; a snapshot. */
int wf_comm_zmq_local_waiting(const wf_comm_zmq_local_t *l);

/* Drop a reference and set *l to NULL. Accepts NULL and a pointer to
 * NULL. */
void wf_comm_zmq_local_unref(wf_comm_zmq_local_t **l);

/* --- endpoints -------------------------------------------------------- */

/* Create a ROUTER socket on zmq_ctx and its listener (the gate) on
 * bind_addr (a wildcard port such as "tcp://127.0.0.1:*" is allowed).
 * max_message_bytes and recv_messages as in the config (<= 0: no limit;
 * a bound endpoint takes connections before it joins a world, so they are
 * set here); curve as in the config (NULL: plain tcp; else CURVE with
 * the keys of WF_ZAP_NODES; the world it joins must then have curve set
 * too). Caller owns *ret_ep. Errors:
 * WF_E_BAD_ARGUMENT (address too long, malformed key pair), WF_E_CONNECT (bind failed),
 * WF_E_NO_MEMORY, WF_E_INTERNAL. */
wf_status_t wf_comm_zmq_endpoint_new(void *zmq_ctx, const char *bind_addr,
                                     int64_t max_message_bytes,
                                     int recv_messages,
                                     const wf_keypair_t *curve,
                                     wf_comm_zmq_endpoint_t **ret_ep);

/* The address peers connect to ("tcp://127.0.0.1:41234"). Borrowed until
 * the endpoint is destroyed or joins a world. */
const char *wf_comm_zmq_endpoint_address(const wf_comm_zmq_endpoint_t *ep);

/* Close an endpoint that joined no world; sets *ep to NULL. Accepts NULL
 * and a pointer to NULL. */
void wf_comm_zmq_endpoint_destroy(wf_comm_zmq_endpoint_t **ep);

/* --- worlds ----------------------------------------------------------- */

/* Join the world described by cfg as `rank`: bind cfg->endpoints[rank],
 * connect to the lower ranks, exchange hellos with every peer, and return
 * the world handle once every peer is connected. Collective over the
 * world (every rank calls it, in any order, in any process). Caller owns
 * *ret_comm (wf_comm_destroy). Same as wf_comm_zmq_world_join(cfg, rank,
 * NULL, NULL, 0, ret_comm). */
wf_status_t wf_comm_zmq_world_new(const wf_comm_zmq_config_t *cfg, int rank,
                                  wf_comm_t **ret_comm);

/* As wf_comm_zmq_world_new; when ep is not NULL and *ep is not NULL, the
 * rank uses that bound endpoint instead of binding cfg->endpoints[rank]
 * (which must then be the endpoint's address, as peers connect to it) and
 * takes ownership of it: *ep is set to NULL, on success and on failure.
 * On failure `err` (when not NULL, errlen bytes) holds a one-line message
 * naming the step and the ranks missing; on success err is set to "".
 * Errors: WF_E_BAD_ARGUMENT (config; an endpoint bound with CURVE and a
 * world without, or the other way round; CURVE: rank_keys[rank] not our
 * key), WF_E_CONNECT (bind / connect failed; a peer that connected to
 * this rank holds a lower rank's routing id), WF_E_TIMEOUT (a peer did not answer within
 * connect_timeout_ms), WF_E_ABORTED (the domain was aborted meanwhile),
 * WF_E_NO_MEMORY, WF_E_INTERNAL. */
wf_status_t wf_comm_zmq_world_join(const wf_comm_zmq_config_t *cfg, int rank,
                                   wf_comm_zmq_endpoint_t **ep, char *err,
                                   size_t errlen, wf_comm_t **ret_comm);

/* Messages this rank has dropped so far (another world id, an unknown
 * sender, malformed frames). c must be a handle of this backend. */
uint64_t wf_comm_zmq_dropped(const wf_comm_t *c);

/* Of those, the messages refused on a CURVE world because the node that
 * sent them does not hold the rank their routing id names (a trusted
 * node posing as another's rank); 0 on a plain world. This module does
 * not log: the caller may log a change of this count. */
uint64_t wf_comm_zmq_refused(const wf_comm_t *c);

/* Of those, the messages dropped because their source rank already had
 * unexpected_bytes (config) waiting; each also failed a call with
 * WF_E_LIMIT. */
uint64_t wf_comm_zmq_over(const wf_comm_t *c);

#endif /* WF_COMM_ZMQ_H */
