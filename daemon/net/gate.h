/* gate.h — weftd's ZMTP listener: the client plane's transport (README
 * "Security", PROTOCOL.md section 1.1) and the cluster plane's in front of
 * the tensor channel and every comm_zmq data port (README "Bounded
 * cluster data plane"). One thread that owns a listening socket (tcp,
 * ipc, abstract ipc, or the one systemd passes), accepts, and speaks
 * ZMTP 3.1 itself (RFC 37; mechanisms NULL and CURVE, RFC 26), so that
 * what a peer can make weftd hold is bounded before it is buffered:
 *
 *   - a connection that has not finished its handshake holds at most
 *     WF_GATE_HANDSHAKE_MAX bytes and lives at most handshake_ms; at most
 *     max_handshakes of them at once; at most max_connections in all
 *     (more are closed at accept, logged);
 *   - an authenticated connection assembles one message at a time: a
 *     frame is refused from its size field, before any of it is read,
 *     when it is larger than frame_bytes, would be frame number
 *     max_frames + 1, or would bring the message over message_bytes; the
 *     rest of that message is read and dropped (NULL) and the frames
 *     kept so far (the header) reach the daemon marked over the limit, so
 *     that it answers WF_E_LIMIT (with close_over, the cluster plane's
 *     choice, the connection is closed instead: a node never goes over);
 *     a CURVE frame must be read whole for
 *     its "more" flag (inside the box): one over frame_bytes, or one to
 *     drop that is larger than message_bytes, closes the connection;
 *   - a complete message goes to the daemon's ROUTER (inproc) through one
 *     DEALER per connection with high-water marks of one message, so at
 *     most two complete messages wait there per connection; while they
 *     do, the gate does not read that connection (TCP backpressure);
 *   - one reply at a time is taken from the DEALER and written; the
 *     ROUTER's own SNDHWM bounds the replies waiting behind it.
 * So one connection holds at most 3 x message_bytes of requests, plus a
 * read buffer of WF_GATE_RBUF bytes and the reply being written (a
 * CURVE frame dropped for a limit is held while it is opened: at most
 * message_bytes, while the message being dropped keeps only its header).
 *
 * Each message reaches the ROUTER as [routing id, gate frame, the
 * peer's frames...]: the gate frame (wf_gate_meta_t) says who the peer
 * is (ipc credentials, CURVE key name and role, address) and whether the
 * message went over a limit; it carries a seal drawn once per process,
 * so that a frame a peer sends over a connection that is not a gate's
 * (a ROUTER's own outgoing one) never passes for one. The routing id is
 * 5 bytes, 0 and a counter, or (peer_routing_id) the routing id the
 * peer gives in its handshake (property Identity), as a libzmq ROUTER
 * would name it: then the ROUTER sends to a peer by the name it chose,
 * and a second connection under a name in use is ignored by the ROUTER
 * as libzmq ignores one (its messages wait, unread, until it closes).
 *
 * CURVE keys are admitted from the gate's own list (wf_gate_set_keys:
 * the client plane's client_keys) or, with zap_domain, by asking the
 * context's ZAP handler (base/zap.h: the node allow-list, whose user id
 * is the node's name), as libzmq would: ZAP logs and counts refusals.
 *
 * At the end of a drain (wf_gate_finish) it accepts and reads nothing
 * more, and closes each connection once every message read from it has
 * had its reply and the replies are written.
 *
 * The gate never calls into the rest of daemon/server/; the server reads
 * its counters and passes it settings and keys.
 */
#ifndef WF_GATE_H
#define WF_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "base/log.h"
#include "weft.h"

#define WF_GATE_RBUF (16u << 10)        /* read buffer of one connection */
#define WF_GATE_HANDSHAKE_MAX 4096      /* largest handshake command read */
#define WF_GATE_LIMIT_MAX 160           /* the limit text, with the NUL */
#define WF_GATE_ADDR_MAX 112            /* the peer address, with the NUL */

typedef struct wf_gate wf_gate_t;

/* How the gate admits connections. */
typedef enum wf_gate_mech {
    WF_GATE_NULL = 0,            /* ZMTP NULL (ipc, anonymous tcp) */
    WF_GATE_CURVE = 1            /* CurveZMQ with the server's key pair and
                                    the keys of wf_gate_set_keys */
} wf_gate_mech_t;

/* Limits; reloadable through wf_gate_set_limits. */
typedef struct wf_gate_limits {
    uint64_t frame_bytes;        /* largest frame of a message */
    uint32_t max_frames;         /* frames of one message */
    uint64_t message_bytes;      /* bytes of one message, all frames */
    uint32_t max_connections;    /* open connections, handshaking included */
    uint32_t max_handshakes;     /* connections not yet through the handshake */
    uint32_t handshake_ms;       /* longest handshake (greeting included) */
} wf_gate_limits_t;

/* The settings a peer is told about when it meets a limit. */
typedef struct wf_gate_names {
    const char *frame_bytes, *max_frames, *message_bytes;
    const char *max_connections, *max_handshakes, *handshake_ms;
} wf_gate_names_t;

typedef struct wf_gate_cfg {
    void *zctx;                  /* the ROUTER's context (inproc) */
    const char *router_endpoint; /* inproc:// address the ROUTER bound */
    int listen_fd;               /* listening stream socket; the gate owns it */
    const char *endpoint;        /* its name, for log lines */
    bool unix_socket;            /* AF_UNIX: peers' credentials by SO_PEERCRED */
    wf_gate_mech_t mech;
    const wf_keypair_t *keys;    /* CURVE: this daemon's pair (copied) */
    const wf_key_entry_t *client_keys; /* CURVE: the clients admitted (copied
                                    before the first connection is accepted;
                                    wf_gate_set_keys replaces them) */
    size_t n_client_keys;
    wf_gate_limits_t limits;
    wf_log_t *log;               /* borrowed; thread-safe; NULL: no log lines */
    /* The cluster plane's choices (zero: the client plane's) */
    const char *plane;           /* names the plane in log lines; NULL:
                                    "client plane" */
    const wf_gate_names_t *names; /* the settings behind the limits, named in
                                    log lines; NULL: the client plane's */
    const char *zap_domain;      /* CURVE: admit keys through ZAP in this
                                    domain (the key name is its user id);
                                    NULL: the keys of wf_gate_set_keys */
    bool peer_routing_id;        /* the DEALER takes the routing id the peer
                                    gives (see above) */
    bool close_over;             /* a message over a limit closes the
                                    connection; nothing of it is forwarded */
    uint32_t heartbeat_ms;       /* > 0: a PING to each connection this
                                    often (ZMTP 3.1, TTL heartbeat_timeout_ms),
                                    and a connection from which nothing came
                                    for heartbeat_timeout_ms while the gate
                                    read it is closed (libzmq's
                                    ZMQ_HEARTBEAT_IVL / _TIMEOUT) */
    uint32_t heartbeat_timeout_ms;
} wf_gate_cfg_t;

/* What the gate says about the peer of a message (the frame after the
 * routing id). Made and read in this process only. */
typedef struct wf_gate_meta {
    uint32_t magic;              /* WF_GATE_META_MAGIC */
    bool has_creds;              /* AF_UNIX peer: uid / pid valid */
    uint32_t uid, pid;
    bool curve;                  /* a CURVE connection: key_role, key_name */
    wf_role_t key_role;
    char key_name[WF_KEY_NAME_MAX];
    char addr[WF_GATE_ADDR_MAX]; /* "HOST:PORT", or the socket path; raw */
    char limit[WF_GATE_LIMIT_MAX]; /* "" or why the message went over a limit
                                      (the frames after the header dropped) */
    uint8_t seal[16];            /* this process's (see above) */
} wf_gate_meta_t;

#define WF_GATE_META_MAGIC 0x77676174u

/* Bind and listen on a ZeroMQ-style endpoint as libzmq would:
 * tcp://HOST:PORT (HOST an IPv4 / [IPv6] address, "*", an interface name
 * (its IPv4 address) or a host name (IPv4);
 * PORT a number, or "*" / 0 for any), ipc://PATH (an existing socket
 * file is replaced) or ipc://@NAME (abstract). *ret_fd: the listening
 * socket (close-on-exec); bound: the endpoint with the address and port
 * bound. On error the reason is in why (and, for a tcp bind or listen
 * that failed, in errno: EADDRINUSE). */
wf_status_t wf_gate_listen(const char *endpoint, int *ret_fd, bool *ret_unix,
                           char *bound, size_t bound_len, char *why,
                           size_t why_len);

/* The choices every listener of the cluster plane makes: with `self`
 * (node_keys set) CURVE with this node's pair, node keys admitted through
 * ZAP (WF_ZAP_NODES), else NULL; the peer's routing id kept; a message
 * over a limit closes the connection. */
void wf_gate_node_plane(wf_gate_cfg_t *cfg, const wf_keypair_t *self);

/* A gate in front of `router` (a ROUTER of cfg->zctx with its options
 * set): the ROUTER bound on an inproc endpoint of its own, a listener on
 * `endpoint` (wf_gate_listen) and the gate started with the rest of cfg
 * (router_endpoint, listen_fd, endpoint and unix_socket are filled
 * here). bound: the endpoint bound, for peers. On error nothing is left
 * but the ROUTER, why says what failed, and errno is EADDRINUSE where
 * the address was taken. */
wf_status_t wf_gate_front(void *router, const char *endpoint, wf_gate_cfg_t *cfg,
                          char *bound, size_t bound_len, char *why,
                          size_t why_len, wf_gate_t **ret);

/* Start the thread. On error (logged) nothing is left and the listening
 * socket is closed. */
wf_status_t wf_gate_start(const wf_gate_cfg_t *cfg, wf_gate_t **ret);

/* Replace the CURVE keys admitted (copied; role and name per key).
 * New handshakes see them; connected clients keep theirs. Any thread. */
wf_status_t wf_gate_set_keys(wf_gate_t *g, const wf_key_entry_t *e, size_t n);

/* New limits for what is read from now on. Any thread. */
void wf_gate_set_limits(wf_gate_t *g, const wf_gate_limits_t *l);

/* The gate thread's id (for its scheduling priority); 0 until it runs. */
int wf_gate_tid(wf_gate_t *g);

/* Counters since start, counted by the gate's thread as it refuses and
 * admits (atomics): any thread may read them at any time. */
typedef struct wf_gate_stats {
    uint64_t accepted;           /* connections accepted */
    uint64_t refused;            /* handshakes refused (auth, protocol, limits),
                                    once per connection */
    uint64_t admitted;           /* CURVE handshakes admitted */
    uint64_t over_limit;         /* messages over a limit, connections closed for one */
    uint32_t open;               /* connections open now */
} wf_gate_stats_t;
void wf_gate_stats(wf_gate_t *g, wf_gate_stats_t *ret);

/* Parse the gate frame; false when it is not one (its size, magic or
 * seal is not a gate's of this process). */
bool wf_gate_meta_read(const void *data, size_t len, wf_gate_meta_t *ret);

/* The end of a drain (PROTOCOL.md section 1). The listening socket is
 * closed (new connections are refused) and nothing more is read from
 * any connection; the whole messages already read from one still go to
 * the ROUTER, one at a time as before. A connection is closed once the
 * daemon has replied to every message forwarded from it and the replies
 * are written: the gate shuts down its sending side, so that the peer
 * reads every reply and then the end of the stream, drops what the peer
 * still sends, and closes when the peer does. A connection still in its
 * handshake is closed at once (it sent no message). The daemon must go
 * on answering until wf_gate_done_fd is readable: no connection is left.
 * Any thread; returns at once. NULL is fine. */
void wf_gate_finish(wf_gate_t *g);

/* An eventfd that becomes readable (and stays so) once wf_gate_finish
 * has closed every connection; -1 for NULL. Owned by the gate, valid
 * until wf_gate_stop. */
int wf_gate_done_fd(const wf_gate_t *g);

/* Stop the thread, close every connection (after wf_gate_finish, those
 * whose peer has not read its replies) and the listening socket; NULL is
 * fine. Before the ROUTER and the context close. */
void wf_gate_stop(wf_gate_t **pg);

/* As wf_gate_stop, once the ROUTER has been closed with a linger: first,
 * for at most linger_ms, the messages the ROUTER queued to peers (waiting
 * in the connections' DEALERs) are written out; nothing more is accepted
 * or read meanwhile. linger_ms <= 0: wf_gate_stop. */
void wf_gate_stop_flush(wf_gate_t **pg, int linger_ms);

#endif /* WF_GATE_H */
