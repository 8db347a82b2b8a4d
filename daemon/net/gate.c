/* gate.c — weftd's ZMTP 3.1 listener, the client plane's transport and
 * the cluster plane's (see gate.h for what it bounds and how). One thread: a poll over the listening socket, every
 * connection's socket and every connection's DEALER to the ROUTER.
 * Written from RFC 37 (ZMTP 3.1) and RFC 26 (CurveZMQ); what a libzmq
 * peer does where the RFCs leave room (ERROR with a 3-digit status that
 * libzmq reports as an authentication failure) is said where it matters.
 * It does not: speak ZMTP 1.0 / 2.0, SUBSCRIBE or PLAIN.
 */
#include "gate.h"
#include "gate_curve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stddef.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "base/zap.h"
#include "errf.h"

#define MAX_PARTS 64               /* >= the largest client_max_frames */
#define LOG_BURST 20               /* refusals logged per window */
#define LOG_WINDOW_S 60
#define PONGS_MAX 16               /* PONGs queued behind a reply */
#define OUT_KEEP (64u << 10)       /* an idle connection keeps this much of
                                      its output buffer */
#define CMD_MAX 1024               /* a command after the handshake (PING) */
#define BIG_MIN (64u << 10)        /* NULL frames written from their message */

/* ZMTP frame flags */
#define F_MORE 0x01
#define F_LONG 0x02
#define F_COMMAND 0x04

typedef enum cstate {
    C_GREETING,                  /* reading the peer's 64-byte greeting */
    C_NULL_READY,                /* NULL: waiting for READY */
    C_HELLO,                     /* CURVE: waiting for HELLO */
    C_INITIATE,                  /* CURVE: waiting for INITIATE */
    C_ACTIVE,                    /* messages */
    C_CLOSING                    /* writing an ERROR, then close */
} cstate_t;

typedef struct conn {
    int fd;
    cstate_t st;
    uint64_t deadline_us;        /* end of the handshake; 0 once active */
    char addr[WF_GATE_ADDR_MAX]; /* "HOST:PORT" or credentials, for log lines */
    char host[WF_GATE_ADDR_MAX]; /* the meta's: HOST alone (libzmq's
                                    Peer-Address), or as addr */
    bool has_creds;
    uint32_t uid, pid;
    uint8_t *rbuf;               /* WF_GATE_RBUF bytes */
    size_t rpos, rlen;           /* bytes waiting: rbuf[rpos..rlen) */
    /* the frame being read (C_ACTIVE, or a handshake command) */
    bool in_body;
    uint8_t fflags;
    uint64_t fsize, fgot;
    uint8_t *fbuf;               /* its body; NULL while dropping it */
    bool fdrop;                  /* drop its body (over a limit) */
    /* the message being assembled */
    zmq_msg_t parts[MAX_PARTS];
    uint32_t n_parts;            /* kept in parts[] */
    uint32_t frames;             /* frames of the message so far, dropped too */
    uint64_t bytes;              /* bytes kept */
    bool complete;               /* parts[] is a whole message for the DEALER */
    char limit[WF_GATE_LIMIT_MAX]; /* why it went over a limit; "" */
    uint64_t dropped, dropped_frames; /* of it, since then */
    void *dealer;                /* to the ROUTER; once active */
    uint8_t rid[5];
    uint8_t *out;                /* bytes to write */
    size_t out_len, out_off, out_cap;
    zmq_msg_t big;               /* a large NULL frame's body, written from
                                    the message itself after out (no copy) */
    size_t big_off, big_len;     /* written of it, and its size; 0: none */
    unsigned pongs;              /* PONGs in out while a reply is there */
    bool reply_out;              /* a whole reply is in out, not yet written */
    uint32_t unanswered;         /* messages forwarded whose reply is not taken */
    uint64_t requests;           /* messages forwarded */
    uint64_t replies_written;    /* replies written whole */
    bool lingering;              /* finishing: our side shut down, reading
                                    (and dropping) until the peer closes */
    bool handshaking;            /* counted in g->handshaking */
    wf_curve_conn_t *cv;         /* CURVE state */
    wf_role_t key_role;
    char key_name[WF_KEY_NAME_MAX];
    uint64_t heard_us;           /* last byte read (heartbeat) */
    uint64_t ping_us;            /* next PING due (heartbeat) */
    uint8_t ident[255];          /* the routing id the peer gave (Identity) */
    size_t ident_len;
} conn_t;

/* Bytes waiting in rbuf, and their start. */
static size_t rbuf_avail(const conn_t *c)
{
    return c->rlen - c->rpos;
}

static const uint8_t *rbuf_at(const conn_t *c)
{
    return c->rbuf + c->rpos;
}

static void rbuf_consume(conn_t *c, size_t n)
{
    c->rpos += n;
    if (c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
}

struct wf_gate {
    void *zctx;
    char plane[32];              /* "client plane", "tensor channel", ... */
    const char *who;             /* "client" or "peer", in log lines */
    wf_gate_names_t nm;          /* the settings behind the limits */
    char zap_domain[32];         /* "" or the ZAP domain CURVE keys go to */
    void *zap;                   /* DEALER to the ZAP handler; thread only */
    uint32_t zap_seq;            /* request ids */
    bool peer_rid;               /* cfg->peer_routing_id */
    bool close_over;             /* cfg->close_over */
    uint64_t hb_us, hb_timeout_us; /* heartbeat; 0: none */
    wf_log_t quiet;              /* the log when cfg->log is NULL: nothing */
    char handshake_taken[128];   /* why a handshake's slot went to a newer one */
    char handshake_late[96];     /* why a handshake that took too long closed */
    char hb_late[96];            /* why a silent connection closed */
    char router_ep[128];
    int lfd;
    char endpoint[WF_GATE_ADDR_MAX];
    bool unix_socket;
    wf_gate_mech_t mech;
    wf_curve_server_t server;    /* CURVE key pair (binary) */
    wf_log_t *log;
    int wake;                    /* eventfd: stop, finish */
    int done;                    /* eventfd: finishing, no connection left */
    atomic_bool stop;
    atomic_bool finish;          /* the end of a drain (wf_gate_finish) */
    atomic_bool flush;           /* wf_gate_stop_flush: write what the
                                    DEALERs hold, then end */
    _Atomic uint64_t flush_end_us; /* ... until then at most */
    bool finished;               /* thread only: done written */
    atomic_int tid;
    sem_t running;               /* posted once tid is set */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;          /* guards keys, n_keys, limits */
    wf_key_entry_t *keys;
    size_t n_keys;
    /* bumped by wf_gate_set_keys (under mu, with the keys); read by the
     * thread without mu on every wake */
    atomic_uint_least64_t keys_gen;
    uint64_t keys_seen;          /* thread only: the generation applied to
                                    the open connections */
    wf_gate_limits_t limits;
    conn_t **conns;              /* thread only: open connections */
    uint32_t n_conns, cap_conns;
    uint32_t handshaking;
    uint32_t next_rid;
    uint64_t accept_pause_us;    /* out of fds: accept again after this */
    atomic_uint_least64_t accepted, refused, over_limit, admitted;
    atomic_uint open;
    uint64_t requests;           /* thread only: of the connections closed, */
    uint64_t replies;            /*   messages forwarded, replies written and */
    uint64_t unanswered;         /*   messages whose reply was not taken */
    wf_log_limit_t noted;        /* refusals and closes logged */
};

static uint8_t seal[16];           /* the gate frames' seal, per process */
static pthread_once_t seal_once = PTHREAD_ONCE_INIT;

static void seal_init(void)
{
    if (sodium_init() >= 0)
        randombytes_buf(seal, sizeof seal);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* A refusal or a closed connection, rate-limited (LOG_BURST per
 * LOG_WINDOW_S; the rest counted and summed up in the next window). */
#define note(g, ...) wf_log_limited((g)->log, &(g)->noted, WF_LOG_WARNING, __VA_ARGS__)

static void limits_get(wf_gate_t *g, wf_gate_limits_t *l)
{
    pthread_mutex_lock(&g->mu);
    *l = g->limits;
    pthread_mutex_unlock(&g->mu);
}

/* ------------------------------------------------------------------ */
/* output */

/* Room for n more bytes in c->out; false when out of memory. */
static bool out_reserve(conn_t *c, size_t n)
{
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_cap - c->out_len >= n)
        return true;
    size_t want = c->out_len + n;
    if (want < 256)
        want = 256;
    uint8_t *p = realloc(c->out, want);
    if (!p)
        return false;
    c->out = p;
    c->out_cap = want;
    return true;
}

static size_t frame_head(uint8_t *p, uint8_t flags, uint64_t size)
{
    if (size > 255) {
        p[0] = flags | F_LONG;
        for (int i = 0; i < 8; i++)
            p[1 + i] = (uint8_t)(size >> (56 - 8 * i));
        return 9;
    }
    p[0] = flags;
    p[1] = (uint8_t)size;
    return 2;
}

/* A frame (data or command, not boxed) appended to out. */
static bool out_frame(conn_t *c, uint8_t flags, const void *data, size_t n)
{
    if (!out_reserve(c, 9 + n))
        return false;
    c->out_len += frame_head(c->out + c->out_len, flags, n);
    if (n)
        memcpy(c->out + c->out_len, data, n);
    c->out_len += n;
    return true;
}

/* A frame of the connection's mechanism: boxed as a MESSAGE (CURVE,
 * flags 1 more / 2 command inside the box) or plain (NULL). */
static bool out_message(conn_t *c, bool command, bool more, const void *data,
                        size_t n)
{
    if (!c->cv)
        return out_frame(c, (uint8_t)((command ? F_COMMAND : 0) | (more ? F_MORE : 0)),
                         data, n);
    size_t bn = WF_CURVE_MSG_OVERHEAD + n;
    if (!out_reserve(c, 9 + bn))
        return false;
    c->out_len += frame_head(c->out + c->out_len, 0, bn);
    wf_curve_box(c->cv, (uint8_t)((more ? 1 : 0) | (command ? 2 : 0)), data, n,
                 c->out + c->out_len);
    c->out_len += bn;
    return true;
}

/* Output waits to be written (out, or a large frame's body). */
static bool out_pending(const conn_t *c)
{
    return c->out_off < c->out_len || c->big_off < c->big_len;
}

/* Write what out holds, then the large frame's body. False: the
 * connection failed. */
static bool out_flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->out_off += (size_t)w;
    }
    c->out_off = c->out_len = 0;
    while (c->big_off < c->big_len) {
        ssize_t w = send(c->fd, (const uint8_t *)zmq_msg_data(&c->big) + c->big_off,
                         c->big_len - c->big_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->big_off += (size_t)w;
    }
    if (c->big_len) {
        zmq_msg_close(&c->big);     /* (a zero-copy sender's buffer: released) */
        c->big_off = c->big_len = 0;
    }
    c->pongs = 0;
    if (c->reply_out) {
        c->reply_out = false;
        c->replies_written++;
    }
    if (c->out_cap > OUT_KEEP) {
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* connections */

static void parts_clear(conn_t *c)
{
    for (uint32_t i = 0; i < c->n_parts; i++)
        zmq_msg_close(&c->parts[i]);
    c->n_parts = 0;
    c->frames = 0;
    c->bytes = 0;
    c->complete = false;
    c->limit[0] = '\0';
    c->dropped = c->dropped_frames = 0;
}

static void conn_free(wf_gate_t *g, conn_t *c)
{
    if (c->handshaking)
        g->handshaking--;
    g->requests += c->requests;
    g->replies += c->replies_written;
    g->unanswered += c->unanswered;
    if (c->fd >= 0)
        close(c->fd);
    if (c->dealer)
        zmq_close(c->dealer);
    parts_clear(c);
    free(c->fbuf);
    free(c->rbuf);
    free(c->out);
    if (c->cv) {
        sodium_memzero(c->cv, sizeof *c->cv);
        free(c->cv);
    }
    if (c->big_len)
        zmq_msg_close(&c->big);
    free(c);
    atomic_fetch_sub(&g->open, 1);
}

static void conn_close(wf_gate_t *g, uint32_t i)
{
    conn_free(g, g->conns[i]);
    g->conns[i] = g->conns[--g->n_conns];
}

/* The peer's address for log lines, which read "client ADDR on
 * ENDPOINT" or "from ADDR": "HOST:PORT", or a local peer's credentials
 * "uid U pid P" ("uid unknown" where the socket gives none). */
static void peer_address(wf_gate_t *g, conn_t *c)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    snprintf(c->addr, sizeof c->addr, "?");
    if (g->unix_socket) {
        struct ucred cr;
        socklen_t cl = sizeof cr;
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
            c->has_creds = true;
            c->uid = (uint32_t)cr.uid;
            c->pid = (uint32_t)cr.pid;
            snprintf(c->addr, sizeof c->addr, "uid %u pid %u", c->uid, c->pid);
        } else {
            snprintf(c->addr, sizeof c->addr, "uid unknown");
        }
        return;
    }
    if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    snprintf(c->host, sizeof c->host, "?");
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(c->addr, sizeof c->addr, "%s:%u", host, (unsigned)ntohs(in->sin_port));
        snprintf(c->host, sizeof c->host, "%s", host);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(c->addr, sizeof c->addr, "[%s]:%u", host,
                 (unsigned)ntohs(in6->sin6_port));
        snprintf(c->host, sizeof c->host, "%s", host);
    }
}

static void close_with(wf_gate_t *g, uint32_t i, const char *why);

static void accept_one(wf_gate_t *g)
{
    int fd = accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
            /* the connection stays in the backlog: do not spin on it */
            note(g, "%s: accept on %s: %s (%s above what the fd limit "
                 "allows?); accepting again in 100 ms", g->plane, g->endpoint,
                 strerror(errno), g->nm.max_connections);
            g->accept_pause_us = now_us() + 100000;
        }
        return;
    }
    atomic_fetch_add(&g->accepted, 1);
    wf_gate_limits_t l;
    limits_get(g, &l);
    conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    atomic_fetch_add(&g->open, 1);
    peer_address(g, c);
    /* Handshake slots full: the connection in its handshake longest goes
     * instead of the new one (a client's handshake takes milliseconds;
     * connections that never finish theirs cannot hold the slots and keep
     * new clients out). */
    if (g->n_conns < l.max_connections && g->handshaking >= l.max_handshakes) {
        uint32_t oldest = UINT32_MAX;
        for (uint32_t i = 0; i < g->n_conns; i++)
            if (g->conns[i]->handshaking && g->conns[i]->st != C_CLOSING &&
                (oldest == UINT32_MAX ||
                 g->conns[i]->deadline_us < g->conns[oldest]->deadline_us))
                oldest = i;
        if (oldest != UINT32_MAX)
            close_with(g, oldest, g->handshake_taken);
    }
    const char *full = g->n_conns >= l.max_connections ? g->nm.max_connections
                       : g->handshaking >= l.max_handshakes ? g->nm.max_handshakes
                                                            : NULL;
    if (full) {
        atomic_fetch_add(&g->refused, 1);
        note(g, "%s: %s %s on %s refused: %u connections open, "
             "%u in their handshake (%s)", g->plane, g->who, c->addr, g->endpoint, g->n_conns,
             g->handshaking, full);
        conn_free(g, c);
        return;
    }
    if (g->n_conns == g->cap_conns) {
        uint32_t cap = g->cap_conns ? 2 * g->cap_conns : 64;
        conn_t **p = realloc(g->conns, cap * sizeof *p);
        if (!p) {
            conn_free(g, c);
            return;
        }
        g->conns = p;
        g->cap_conns = cap;
    }
    c->rbuf = malloc(WF_GATE_RBUF);
    if (!c->rbuf) {
        conn_free(g, c);
        return;
    }
    c->handshaking = true;
    g->handshaking++;
    c->deadline_us = now_us() + (uint64_t)l.handshake_ms * 1000u;
    c->st = C_GREETING;
    /* our greeting: signature, version 3.1, mechanism, as-server */
    uint8_t gr[64] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1 };
    memcpy(gr + 12, g->mech == WF_GATE_CURVE ? "CURVE" : "NULL",
           g->mech == WF_GATE_CURVE ? 5 : 4);
    gr[32] = g->mech == WF_GATE_CURVE ? 1 : 0;
    if (!out_reserve(c, 64)) {
        conn_free(g, c);
        return;
    }
    memcpy(c->out, gr, 64);
    c->out_len = 64;
    g->conns[g->n_conns++] = c;
    out_flush(c);
}

/* ------------------------------------------------------------------ */
/* metadata (READY and INITIATE): name-len, name, value-len (4), value */

static size_t props_socket_type(uint8_t *p)
{
    static const char name[] = "Socket-Type", value[] = "ROUTER";
    size_t n = 0;
    p[n++] = (uint8_t)(sizeof name - 1);
    memcpy(p + n, name, sizeof name - 1);
    n += sizeof name - 1;
    put_be32(p + n, (uint32_t)(sizeof value - 1));
    n += 4;
    memcpy(p + n, value, sizeof value - 1);
    return n + sizeof value - 1;
}

/* The peer's Socket-Type is one a ROUTER talks to; its Identity (the
 * routing id it asks for, up to 255 bytes) goes to c. */
static bool props_ok(const uint8_t *p, size_t n, conn_t *c)
{
    bool typed = false;
    size_t i = 0;
    while (i < n) {
        size_t nl = p[i++];
        if (nl == 0 || n - i < nl + 4)
            return false;
        const uint8_t *name = p + i;
        i += nl;
        uint32_t vl = (uint32_t)p[i] << 24 | (uint32_t)p[i + 1] << 16 |
                      (uint32_t)p[i + 2] << 8 | p[i + 3];
        i += 4;
        if (vl > n - i)
            return false;
        if (nl == 11 && strncasecmp((const char *)name, "Socket-Type", 11) == 0) {
            const char *v = (const char *)p + i;
            typed = (vl == 6 && memcmp(v, "DEALER", 6) == 0) ||
                    (vl == 3 && memcmp(v, "REQ", 3) == 0) ||
                    (vl == 6 && memcmp(v, "ROUTER", 6) == 0);
        } else if (nl == 8 && strncasecmp((const char *)name, "Identity", 8) == 0) {
            if (vl > sizeof c->ident)
                return false;
            memcpy(c->ident, p + i, vl);
            c->ident_len = vl;
        }
        i += vl;
    }
    return typed;
}

/* ------------------------------------------------------------------ */
/* the handshake */

/* The connection becomes active: its DEALER to the ROUTER. */
static bool activate(wf_gate_t *g, conn_t *c)
{
    c->dealer = zmq_socket(g->zctx, ZMQ_DEALER);
    if (!c->dealer)
        return false;
    uint32_t id = ++g->next_rid;
    c->rid[0] = 0;
    memcpy(c->rid + 1, &id, 4);
    /* the peer's own routing id where it gave one (one starting with a
     * zero byte could meet the counter's: it gets the counter's) */
    const void *rid = c->rid;
    size_t rid_len = sizeof c->rid;
    if (g->peer_rid && c->ident_len > 0 && c->ident[0] != 0) {
        rid = c->ident;
        rid_len = c->ident_len;
    }
    /* one message each way waits in the pipe (the pipe's bound is the
     * sum of both sides' marks: two); linger 0: a closed connection's
     * messages go with it */
    int one = 1, zero = 0;
    if (zmq_setsockopt(c->dealer, ZMQ_ROUTING_ID, rid, rid_len) != 0 ||
        zmq_setsockopt(c->dealer, ZMQ_SNDHWM, &one, sizeof one) != 0 ||
        zmq_setsockopt(c->dealer, ZMQ_RCVHWM, &one, sizeof one) != 0 ||
        zmq_setsockopt(c->dealer, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(c->dealer, g->router_ep) != 0) {
        wf_log(g->log, WF_LOG_ERR, "%s: DEALER to %s: %s", g->plane, g->router_ep,
               zmq_strerror(zmq_errno()));
        return false;
    }
    c->st = C_ACTIVE;
    c->deadline_us = 0;
    c->heard_us = now_us();
    c->ping_us = c->heard_us + g->hb_us;
    c->handshaking = false;
    g->handshaking--;
    return true;
}

/* Refuse a CURVE client's key: ERROR "400" (libzmq reports a 3-digit
 * status as ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: libweft says WF_E_AUTH at
 * once), then close once it is written. */
static void refuse_key(wf_gate_t *g, conn_t *c, const char *z85)
{
    atomic_fetch_add(&g->refused, 1);
    if (!g->zap_domain[0])      /* (ZAP logs its own refusals) */
        note(g, "auth: refused %s from %s on " "weft-clients" ": key not in the "
             "allow-list", z85, c->addr);
    static const uint8_t err[] = { 5, 'E', 'R', 'R', 'O', 'R', 3, '4', '0', '0' };
    out_frame(c, F_COMMAND, err, sizeof err);
    c->st = C_CLOSING;
}

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 8

/* Ask the context's ZAP handler (RFC 27) whether c's CURVE key may
 * connect, as libzmq asks it for its own sockets: request [version, id,
 * domain, address, routing id, "CURVE", key], answer [version, id,
 * status, text, user id, metadata]. True with c->key_name set to the
 * user id on status 200. The thread waits for the answer (the handler is
 * a thread of this process) until the handshake's deadline: no answer by
 * then (no handler running) is a refusal. An answer to an earlier
 * request that timed out is skipped by its id. */
static bool zap_ask(wf_gate_t *g, conn_t *c)
{
    if (!g->zap) {
        int zero = 0;
        g->zap = zmq_socket(g->zctx, ZMQ_DEALER);
        if (!g->zap)
            return false;
        if (zmq_setsockopt(g->zap, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
            zmq_connect(g->zap, ZAP_ENDPOINT) != 0) {
            zmq_close(g->zap);
            g->zap = NULL;
            return false;
        }
    }
    char id[16];
    int idn = snprintf(id, sizeof id, "%u", ++g->zap_seq);
    const char *addr = c->host[0] ? c->host : c->addr;
    if (zmq_send(g->zap, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return false;
    /* after the first frame the rest of the message always goes */
    zmq_send(g->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(g->zap, id, (size_t)idn, ZMQ_SNDMORE);
    zmq_send(g->zap, g->zap_domain, strlen(g->zap_domain), ZMQ_SNDMORE);
    zmq_send(g->zap, addr, strlen(addr), ZMQ_SNDMORE);
    zmq_send(g->zap, c->ident, c->ident_len, ZMQ_SNDMORE);
    zmq_send(g->zap, "CURVE", 5, ZMQ_SNDMORE);
    zmq_send(g->zap, c->cv->client_key, 32, 0);
    for (;;) {
        uint64_t now = now_us();
        if (now >= c->deadline_us)
            return false;
        zmq_pollitem_t it = { g->zap, -1, ZMQ_POLLIN, 0 };
        int rc = zmq_poll(&it, 1, (long)((c->deadline_us - now + 999) / 1000));
        if (rc < 0 && zmq_errno() != EINTR)
            return false;
        if (rc <= 0)
            continue;
        zmq_msg_t f[ZAP_FRAMES];
        size_t n = 0;
        for (bool more = true; more;) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, g->zap, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < ZAP_FRAMES) {
                zmq_msg_init(&f[n]);
                zmq_msg_move(&f[n++], &m);
            }
            zmq_msg_close(&m);
        }
        bool mine = n >= 6 && zmq_msg_size(&f[2]) == (size_t)idn &&
                    memcmp(zmq_msg_data(&f[2]), id, (size_t)idn) == 0;
        bool ok = mine && zmq_msg_size(&f[3]) == 3 &&
                  memcmp(zmq_msg_data(&f[3]), "200", 3) == 0 &&
                  zmq_msg_size(&f[5]) > 0 && zmq_msg_size(&f[5]) < sizeof c->key_name;
        if (ok) {
            memcpy(c->key_name, zmq_msg_data(&f[5]), zmq_msg_size(&f[5]));
            c->key_name[zmq_msg_size(&f[5])] = '\0';
            c->key_role = WF_ROLE_NONE;
        }
        for (size_t i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
        if (mine)
            return ok;
    }
}

/* One handshake command (c->fbuf, c->fsize). False: close. */
static bool handshake_command(wf_gate_t *g, conn_t *c, const char **why)
{
    const uint8_t *b = c->fbuf;
    size_t n = (size_t)c->fsize;
    uint8_t props[64];
    size_t pn = props_socket_type(props);
    if (c->st == C_NULL_READY) {
        if (n < 6 || memcmp(b, "\x05READY", 6) != 0 || !props_ok(b + 6, n - 6, c)) {
            *why = "not a READY of a DEALER / REQ socket";
            return false;
        }
        uint8_t ready[6 + 64];
        memcpy(ready, "\x05READY", 6);
        memcpy(ready + 6, props, pn);
        if (!out_frame(c, F_COMMAND, ready, 6 + pn) || !activate(g, c)) {
            *why = "no DEALER for it (out of memory or fds)";
            return false;
        }
        return true;
    }
    if (c->st == C_HELLO) {
        uint8_t welcome[WF_CURVE_WELCOME_SIZE];
        if (!wf_curve_hello(c->cv, &g->server, b, n, welcome)) {
            *why = "CURVE cryptographic error (a client with the wrong server key?)";
            return false;
        }
        if (!out_frame(c, F_COMMAND, welcome, sizeof welcome)) {
            *why = "out of memory";
            return false;
        }
        c->st = C_INITIATE;
        return true;
    }
    /* C_INITIATE */
    uint8_t scratch[WF_GATE_HANDSHAKE_MAX];
    const uint8_t *meta = NULL;
    size_t meta_len = 0;
    if (n > sizeof scratch ||
        !wf_curve_initiate(c->cv, &g->server, b, n, scratch, &meta, &meta_len)) {
        *why = "CURVE cryptographic error in INITIATE";
        return false;
    }
    if (!props_ok(meta, meta_len, c)) {
        *why = "not a DEALER / REQ socket";
        return false;
    }
    char z85[WF_KEY_Z85_LEN + 1];
    zmq_z85_encode(z85, c->cv->client_key, 32);
    bool admit;
    if (g->zap_domain[0]) {
        admit = zap_ask(g, c);
    } else {
        pthread_mutex_lock(&g->mu);
        const wf_key_entry_t *e = wf_keylist_find_key(g->keys, g->n_keys, z85);
        if (e) {
            c->key_role = e->role;
            snprintf(c->key_name, sizeof c->key_name, "%s", e->name);
        }
        pthread_mutex_unlock(&g->mu);
        admit = e != NULL;
    }
    if (!admit) {
        refuse_key(g, c, z85);
        return true;
    }
    atomic_fetch_add(&g->admitted, 1);
    wf_log(g->log, WF_LOG_DEBUG, "auth: admitted %s:%s (%s) from %s",
           wf_role_name(c->key_role), c->key_name, z85, c->addr);
    uint8_t ready[14 + 16 + 64];
    size_t rn = wf_curve_ready(c->cv, props, pn, ready);
    if (!out_frame(c, F_COMMAND, ready, rn) || !activate(g, c)) {
        *why = "no DEALER for it (out of memory or fds)";
        return false;
    }
    return true;
}

/* The peer's greeting in rbuf[0..64). False: close (why set). */
static bool greeting(wf_gate_t *g, conn_t *c, const char **why)
{
    const uint8_t *p = rbuf_at(c);
    if (p[0] != 0xff || (p[9] & 1) != 1) {
        *why = "not ZMTP 3 (a greeting without the signature)";
        return false;
    }
    if (p[10] < 3) {
        *why = "ZMTP older than 3.0";
        return false;
    }
    const char *want = g->mech == WF_GATE_CURVE ? "CURVE" : "NULL";
    char mech[21];
    memcpy(mech, p + 12, 20);
    mech[20] = '\0';
    if (strcmp(mech, want) != 0) {
        *why = g->mech == WF_GATE_CURVE
                   ? "it does not speak CURVE (a client without keys; set "
                     "WEFT_SERVER_KEY and WEFT_CLIENT_KEY)"
                   : "it speaks CURVE where the daemon does not (a client with keys)";
        return false;
    }
    rbuf_consume(c, 64);
    if (g->mech == WF_GATE_CURVE) {
        c->cv = calloc(1, sizeof *c->cv);
        if (!c->cv) {
            *why = "out of memory";
            return false;
        }
        c->st = C_HELLO;
    } else {
        c->st = C_NULL_READY;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* messages */

/* Send the assembled message: the gate frame, then the peer's frames.
 * False while the DEALER is full (nothing sent). */
static bool forward(conn_t *c)
{
    wf_gate_meta_t m;
    memset(&m, 0, sizeof m);
    m.magic = WF_GATE_META_MAGIC;
    m.has_creds = c->has_creds;
    m.uid = c->uid;
    m.pid = c->pid;
    m.curve = c->cv != NULL;
    m.key_role = c->key_role;
    memcpy(m.key_name, c->key_name, sizeof m.key_name);
    memcpy(m.addr, c->host[0] ? c->host : c->addr, sizeof m.addr);
    memcpy(m.limit, c->limit, sizeof m.limit);
    memcpy(m.seal, seal, sizeof m.seal);
    if (zmq_send(c->dealer, &m, sizeof m,
                 ZMQ_DONTWAIT | (c->n_parts ? ZMQ_SNDMORE : 0)) < 0)
        return false;   /* EAGAIN: at the mark; anything else: it closes */
    /* the rest of a message always goes once its first frame went */
    for (uint32_t i = 0; i < c->n_parts; i++)
        if (zmq_msg_send(&c->parts[i], c->dealer, i + 1 < c->n_parts ? ZMQ_SNDMORE : 0) < 0)
            zmq_msg_close(&c->parts[i]);
    c->n_parts = 0;
    parts_clear(c);
    c->requests++;
    c->unanswered++;
    return true;
}

static void free_body(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Over a limit: keep the header (the first frame, or the second after
 * an empty delimiter) so that the daemon can answer with the request's
 * id; drop the rest as it comes. */
static void go_over(wf_gate_t *g, conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void go_over(wf_gate_t *g, conn_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->limit, sizeof c->limit, fmt, ap);
    va_end(ap);
    uint32_t keep = c->n_parts > 0 && zmq_msg_size(&c->parts[0]) == 0 ? 2 : 1;
    while (c->n_parts > keep)
        zmq_msg_close(&c->parts[--c->n_parts]);
    atomic_fetch_add(&g->over_limit, 1);
    if (g->close_over)
        return;         /* the caller closes the connection, naming it */
    note(g, "%s: a message from %s on %s over a limit: %s (dropped; "
         "refused with WF_E_LIMIT)", g->plane, c->addr, g->endpoint, c->limit);
}

/* A data frame of `size` bytes begins (NULL: its size field read; the
 * limits apply before any of it is read. CURVE: its box opened, a data
 * frame inside). Sets fdrop when it goes over one. */
static void frame_begin(wf_gate_t *g, conn_t *c, uint64_t size)
{
    wf_gate_limits_t l;
    limits_get(g, &l);
    c->frames++;
    if (!c->limit[0]) {
        if (size > l.frame_bytes)
            go_over(g, c, "a frame of %" PRIu64 " bytes; the largest is %" PRIu64
                    " (%s)", size, l.frame_bytes, g->nm.frame_bytes);
        else if (c->frames > l.max_frames || c->frames > MAX_PARTS)
            go_over(g, c, "more than %u frames in one message (%s)",
                    l.max_frames, g->nm.max_frames);
        else if (c->bytes > l.message_bytes || size > l.message_bytes - c->bytes)
            /* (the first test: a reload may lower the limit below what a
             * message in progress already holds) */
            go_over(g, c, "a message of more than %" PRIu64 " bytes "
                    "(%s)", l.message_bytes, g->nm.message_bytes);
    }
    c->in_body = true;
    c->fsize = size;
    c->fgot = 0;
    c->fdrop = c->limit[0] != '\0';
    if (!c->fdrop) {
        c->bytes += size;
    } else {
        c->dropped_frames++;
        c->dropped += size;
    }
}

/* A message over a limit is dropped as it comes (no memory held) and
 * answered when it ends; a peer that goes on past DROP_FRAMES frames, or
 * past DROP_FACTOR x message_bytes (at least DROP_BYTES_MIN) after the
 * limit, never ending its message, is closed. */
#define DROP_FRAMES 1024
#define DROP_FACTOR 8
#define DROP_BYTES_MIN (UINT64_C(1) << 30)
static bool dropped_too_much(const conn_t *c, const wf_gate_limits_t *l)
{
    return c->dropped_frames > DROP_FRAMES ||
           (c->dropped > DROP_BYTES_MIN && c->dropped / DROP_FACTOR > l->message_bytes);
}

/* The body of a data frame is in (or dropped). */
static void frame_end(conn_t *c, bool more)
{
    if (!c->fdrop) {
        zmq_msg_t *m = &c->parts[c->n_parts++];
        if (c->fsize)
            zmq_msg_init_data(m, c->fbuf, (size_t)c->fsize, free_body, NULL);
        else
            zmq_msg_init(m);
        c->fbuf = NULL;
    }
    c->in_body = false;
    if (!more)
        c->complete = true;
}

/* A command after the handshake (PING -> PONG; others ignored). */
static void active_command(conn_t *c, const uint8_t *b, size_t n)
{
    if (n >= 7 && memcmp(b, "\x04PING", 5) == 0) {
        /* (not while a large body waits behind out: it would overtake) */
        if (c->pongs >= PONGS_MAX || c->big_len)
            return;
        size_t ctx = n - 7 > 16 ? 16 : n - 7;
        uint8_t pong[5 + 16];
        memcpy(pong, "\x04PONG", 5);
        memcpy(pong + 5, b + 7, ctx);
        if (out_message(c, true, false, pong, 5 + ctx))
            c->pongs++;
    }
}

/* CURVE: a whole MESSAGE command (c->fbuf) read: open it; a data frame
 * goes into the message (and counts in its limits: a command inside a
 * box, a libzmq heartbeat's PING, does not). False: close. */
static bool curve_frame(wf_gate_t *g, conn_t *c, const char **why)
{
    uint8_t flags;
    size_t off, n;
    uint8_t *box = c->fbuf;
    size_t len = (size_t)c->fsize;
    c->fbuf = NULL;
    c->in_body = false;
    if (!wf_curve_unbox(c->cv, box, len, &flags, &off, &n)) {
        free(box);
        *why = "CURVE: a MESSAGE that does not open (forged or replayed)";
        return false;
    }
    if (flags & 2) {
        active_command(c, box + off, n);
        free(box);
        return true;
    }
    wf_gate_limits_t l;
    limits_get(g, &l);
    frame_begin(g, c, n);
    c->in_body = false;
    if (c->fdrop && (g->close_over || dropped_too_much(c, &l))) {
        free(box);
        *why = g->close_over ? c->limit : "it kept sending a message over the limit";
        return false;
    }
    if (!c->fdrop) {
        zmq_msg_t *m = &c->parts[c->n_parts++];
        if (n) {
            memmove(box, box + off, n);
            zmq_msg_init_data(m, box, n, free_body, NULL);
            box = NULL;
        } else {
            zmq_msg_init(m);
        }
    }
    free(box);
    if (!(flags & 1))
        c->complete = true;
    return true;
}

/* Parse what rbuf holds. False: close (why set). Stops at a complete
 * message that waits for the DEALER. */
static bool parse(wf_gate_t *g, conn_t *c, const char **why)
{
    wf_gate_limits_t l;
    limits_get(g, &l);
    while (!c->complete && c->st != C_CLOSING) {
        if (c->st == C_GREETING) {
            if (rbuf_avail(c) < 64)
                return true;
            if (!greeting(g, c, why))
                return false;
            continue;
        }
        if (c->in_body) {
            uint64_t left = c->fsize - c->fgot;
            size_t avail = rbuf_avail(c);
            size_t take = avail < left ? avail : (size_t)left;
            if (take == 0 && left > 0)
                return true;
            if (c->fbuf)
                memcpy(c->fbuf + c->fgot, rbuf_at(c), take);
            c->fgot += take;
            rbuf_consume(c, take);
            if (c->fgot < c->fsize)
                return true;
            if (c->st != C_ACTIVE) {
                c->in_body = false;
                bool ok = handshake_command(g, c, why);
                free(c->fbuf);
                c->fbuf = NULL;
                if (!ok)
                    return false;
            } else if (c->cv) {
                /* CURVE: every frame after the handshake is a MESSAGE
                 * box, the command flag or not (RFC 26; libzmq closes on
                 * anything else): an unboxed command is no one's */
                if (!curve_frame(g, c, why))
                    return false;
            } else if (c->fflags & F_COMMAND) {
                c->in_body = false;
                active_command(c, c->fbuf, (size_t)c->fsize);
                free(c->fbuf);
                c->fbuf = NULL;
            } else {
                frame_end(c, c->fflags & F_MORE);
            }
            continue;
        }
        /* a frame's flags and size */
        if (rbuf_avail(c) < 2)
            return true;
        const uint8_t *h = rbuf_at(c);
        uint8_t flags = h[0];
        size_t hl = flags & F_LONG ? 9 : 2;
        if (rbuf_avail(c) < hl)
            return true;
        uint64_t size = flags & F_LONG ? get_be64(h + 1) : h[1];
        rbuf_consume(c, hl);
        c->fflags = flags;
        if (flags & ~(F_MORE | F_LONG | F_COMMAND)) {
            *why = "a frame with reserved flags";
            return false;
        }
        if (c->st != C_ACTIVE || (flags & F_COMMAND && !c->cv)) {
            /* a command: small, read whole */
            if (!(flags & F_COMMAND)) {
                *why = "a message before the handshake ended";
                return false;
            }
            size_t cap = c->st == C_ACTIVE ? CMD_MAX : WF_GATE_HANDSHAKE_MAX;
            if (size > cap) {
                *why = "a command too large";
                return false;
            }
            c->in_body = true;
            c->fdrop = false;
            c->fsize = size;
            c->fgot = 0;
            c->fbuf = malloc(size ? (size_t)size : 1);
            if (!c->fbuf) {
                *why = "out of memory";
                return false;
            }
            continue;
        }
        if (c->cv) {
            /* a MESSAGE command around one frame: its frame's size is
             * known from the box's, so the limits apply before reading */
            if (size < WF_CURVE_MSG_OVERHEAD) {
                *why = "a CURVE MESSAGE too short";
                return false;
            }
            uint64_t inner = size - WF_CURVE_MSG_OVERHEAD;
            if (inner > l.frame_bytes) {
                /* its "more" flag is inside the box: the message's end
                 * cannot be found without reading it all */
                atomic_fetch_add(&g->over_limit, 1);
                snprintf(c->limit, sizeof c->limit, "a frame of %" PRIu64
                         " bytes; the largest is %" PRIu64, inner, l.frame_bytes);
                *why = c->limit;
                return false;
            }
            /* the whole box is read, even of a frame dropped for a
             * limit: its "more" flag is inside. Such a frame is held
             * (then freed) only up to message_bytes: beyond, close (a
             * frame that large goes over message_bytes in any case).
             * Whether it is a data frame of the message (frame_begin:
             * counted, limits) or a command is known once it is open
             * (curve_frame) */
            if (inner > l.message_bytes) {
                snprintf(c->limit, sizeof c->limit, "a CURVE frame of %" PRIu64
                         " bytes over the message limit %" PRIu64, inner,
                         l.message_bytes);
                *why = c->limit;
                return false;
            }
            c->in_body = true;
            c->fdrop = false;
            c->fsize = size;
            c->fgot = 0;
            c->fbuf = malloc((size_t)size);
            if (!c->fbuf) {
                *why = "out of memory";
                return false;
            }
            continue;
        }
        frame_begin(g, c, size);
        if (c->fdrop && (g->close_over || dropped_too_much(c, &l))) {
            *why = g->close_over ? c->limit : "it kept sending a message over the limit";
            return false;
        }
        if (!c->fdrop && size) {
            c->fbuf = malloc((size_t)size);
            if (!c->fbuf) {
                *why = "out of memory";
                return false;
            }
        }
        if (size == 0)
            frame_end(c, flags & F_MORE);
    }
    return true;
}

/* Read from the connection. False: close (why set). */
static bool conn_read(wf_gate_t *g, conn_t *c, const char **why)
{
    for (int rounds = 0; rounds < 64 && !c->complete && c->st != C_CLOSING; rounds++) {
        ssize_t r;
        uint64_t left = c->in_body ? c->fsize - c->fgot : 0;
        if (c->in_body && rbuf_avail(c) == 0 && left >= 4096) {
            /* a large body: straight into its buffer, or dropped */
            static _Thread_local uint8_t sink[64 << 10];
            size_t want = left > SIZE_MAX ? SIZE_MAX : (size_t)left;
            if (c->fbuf) {
                r = recv(c->fd, c->fbuf + c->fgot, want, 0);
            } else {
                r = recv(c->fd, sink, want < sizeof sink ? want : sizeof sink, 0);
            }
            if (r > 0) {
                if (g->hb_us)
                    c->heard_us = now_us();
                c->fgot += (uint64_t)r;
                if (c->fgot == c->fsize && !parse(g, c, why))
                    return false;
                continue;
            }
        } else {
            if (c->rpos > 0 && WF_GATE_RBUF - c->rlen < 512) {
                /* a partial frame head at the end: move it to the front */
                memmove(c->rbuf, rbuf_at(c), rbuf_avail(c));
                c->rlen -= c->rpos;
                c->rpos = 0;
            }
            size_t room = WF_GATE_RBUF - c->rlen;
            if (room == 0)
                return parse(g, c, why);
            r = recv(c->fd, c->rbuf + c->rlen, room, 0);
            if (r > 0) {
                if (g->hb_us)
                    c->heard_us = now_us();
                c->rlen += (size_t)r;
                if (!parse(g, c, why))
                    return false;
                continue;
            }
        }
        if (r == 0) {
            *why = NULL;        /* the peer closed */
            return false;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return true;
        *why = strerror(errno);
        return false;
    }
    return true;
}

/* Take one reply from the DEALER into out (the connection's output is
 * empty). The daemon sends one reply per message forwarded. A NULL
 * frame of BIG_MIN bytes or more is not copied: its head goes into out,
 * its body is written from the message (c->big), and the rest of the
 * message is taken once both are written. */
static bool take_reply(conn_t *c)
{
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->dealer, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return true;
        }
        bool more = zmq_msg_more(&m);
        size_t n = zmq_msg_size(&m);
        bool ok;
        if (!c->cv && n >= BIG_MIN) {
            /* its head now, its body from the message itself (out_flush);
             * the rest of the message once both are written */
            ok = out_reserve(c, 9);
            if (ok) {
                c->out_len += frame_head(c->out + c->out_len, more ? F_MORE : 0, n);
                zmq_msg_init(&c->big);
                zmq_msg_move(&c->big, &m);
                c->big_off = 0;
                c->big_len = n;
            }
        } else {
            ok = out_message(c, false, more, zmq_msg_data(&m), n);
        }
        zmq_msg_close(&m);
        if (!ok)
            return false;
        if (more && c->big_len)
            return true;
        if (!more) {
            if (c->unanswered)
                c->unanswered--;
            c->reply_out = true;
            return true;
        }
    }
}

/* The end of a drain, for one connection; false: close it now. One not
 * through its handshake has sent no message: closed. An active one
 * stays until every message read from it is forwarded and answered and
 * the replies are written; then it shuts down its sending side (the
 * peer reads the replies, then the end of the stream: no reset can
 * overtake them, as a close with unread input would send on TCP) and
 * lingers until the peer closes (linger_read). */
static bool conn_finish(conn_t *c)
{
    if (c->st != C_ACTIVE)
        return false;
    if (c->lingering || c->complete || c->unanswered || out_pending(c))
        return true;
    if (shutdown(c->fd, SHUT_WR) != 0)
        return false;
    c->lingering = true;
    return true;
}

/* A lingering connection: read and drop what the peer still sends (it
 * sent it after the last message read). False once the peer has closed,
 * or on an error. */
static bool linger_read(conn_t *c)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        ssize_t r = recv(c->fd, c->rbuf, WF_GATE_RBUF, 0);
        if (r > 0)
            continue;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* the thread */

static void close_with(wf_gate_t *g, uint32_t i, const char *why)
{
    conn_t *c = g->conns[i];
    /* A connection in its handshake is refused here, and counted. One in
     * C_CLOSING was refused and counted by refuse_key: whatever ends it
     * before its ERROR is written (a failed write, the handshake's time)
     * closes it without counting it a second time. */
    bool refusing = c->st != C_ACTIVE && c->st != C_CLOSING;
    if (why) {
        if (refusing)
            atomic_fetch_add(&g->refused, 1);
        if (refusing && g->mech == WF_GATE_CURVE)
            note(g, "auth: %s %s on %s refused: %s", g->who, c->addr, g->endpoint, why);
        else
            note(g, "%s: %s %s on %s %s: %s", g->plane, g->who, c->addr, g->endpoint,
                 refusing ? "refused" : "closed", why);
    } else if (refusing && g->mech == WF_GATE_CURVE) {
        atomic_fetch_add(&g->refused, 1);
        note(g, "auth: %s %s on %s refused: it left during the CURVE "
             "handshake (a %s without keys, or with the wrong server key?)",
             g->who, c->addr, g->endpoint, g->who);
    }
    conn_close(g, i);
}

/* Keys replaced (a reload): every admitted CURVE connection is looked up
 * again. One whose key is gone is closed (a revocation takes effect on
 * open connections too); one whose role or name changed carries the new
 * ones on its next message. */
static void keys_apply(wf_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t gen = atomic_load(&g->keys_gen);
    for (uint32_t i = g->n_conns; i-- > 0;) {
        conn_t *c = g->conns[i];
        if (!c->cv || c->st != C_ACTIVE || c->lingering || g->zap_domain[0])
            continue;
        char z85[WF_KEY_Z85_LEN + 1];
        zmq_z85_encode(z85, c->cv->client_key, 32);
        const wf_key_entry_t *e = wf_keylist_find_key(g->keys, g->n_keys, z85);
        if (e) {
            if (e->role != c->key_role || strcmp(e->name, c->key_name) != 0)
                wf_log(g->log, WF_LOG_NOTICE, "auth: client %s on %s (%s:%s) is now %s:%s",
                       c->addr, g->endpoint, wf_role_name(c->key_role), c->key_name,
                       wf_role_name(e->role), e->name);
            c->key_role = e->role;
            snprintf(c->key_name, sizeof c->key_name, "%s", e->name);
            continue;
        }
        wf_log(g->log, WF_LOG_NOTICE, "auth: client %s on %s (%s:%s) closed: its key was "
               "removed from client_keys", c->addr, g->endpoint, wf_role_name(c->key_role),
               c->key_name);
        conn_close(g, i);
    }
    pthread_mutex_unlock(&g->mu);
    g->keys_seen = gen;
}

/* The heartbeat of an active connection: a PING when one is due (not
 * while a large body waits to be written: it would overtake it), and
 * false (close) when nothing came from the peer for hb_timeout while
 * the gate was reading it (while a message waits for the DEALER the
 * gate does not read, and the peer is not blamed). */
static bool heartbeat(wf_gate_t *g, conn_t *c, uint64_t now, const char **why)
{
    if (c->complete)
        c->heard_us = now;
    if (c->heard_us + g->hb_timeout_us <= now) {   /* (heard_us may be after now) */
        *why = g->hb_late;
        return false;
    }
    if (now >= c->ping_us && !c->big_len) {
        uint64_t ds = g->hb_timeout_us / 100000u;   /* TTL, deciseconds */
        uint8_t ping[7] = { 4, 'P', 'I', 'N', 'G', (uint8_t)((ds > 0xffff ? 0xffff : ds) >> 8),
                            (uint8_t)(ds > 0xffff ? 0xffff : ds) };
        if (!out_message(c, true, false, ping, sizeof ping)) {
            *why = "out of memory";
            return false;
        }
        c->ping_us = now + g->hb_us;
    }
    return true;
}

static void *gate_thread(void *arg)
{
    wf_gate_t *g = arg;
    atomic_store(&g->tid, (int)gettid());
    sem_post(&g->running);
    /* one item per open fd at most: poll() refuses more than
     * RLIMIT_NOFILE items (and libzmq aborts on that) */
    zmq_pollitem_t *items = NULL;
    size_t *cix = NULL;          /* conns[i]'s item */
    size_t cap = 0;
    while (!atomic_load(&g->stop)) {
        bool flushing = atomic_load(&g->flush);
        size_t need = 2 + 2 * (size_t)g->n_conns;
        if (need > cap) {
            zmq_pollitem_t *p = realloc(items, need * sizeof *p);
            if (p)
                items = p;
            size_t *q = p ? realloc(cix, need * sizeof *q) : NULL;
            if (q)
                cix = q;
            if (!p || !q) {
                usleep(10000);      /* out of memory */
                continue;
            }
            cap = need;
        }
        uint64_t now = now_us();
        int timeout = -1;
        size_t k = 0;
        bool finishing = atomic_load(&g->finish);
        if (finishing && g->lfd >= 0) {
            close(g->lfd);      /* new connections are refused from now on */
            g->lfd = -1;
        }
        if (finishing && g->n_conns == 0 && !g->finished) {
            g->finished = true;
            wf_log(g->log, WF_LOG_INFO, "%s: every connection closed: "
                   "%" PRIu64 " requests read since the start, %" PRIu64 " replies "
                   "written, %" PRIu64 " requests unanswered when their peer left "
                   "first", g->plane, g->requests, g->replies, g->unanswered);
            uint64_t one = 1;
            ssize_t w = write(g->done, &one, sizeof one);
            (void)w;
        }
        items[k++] = (zmq_pollitem_t){ NULL, g->wake, ZMQ_POLLIN, 0 };
        bool paused = now < g->accept_pause_us;
        if (paused && !finishing) {
            int t = (int)((g->accept_pause_us - now + 999) / 1000);
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        /* (finishing: fd -1, which poll skips) */
        items[k++] = (zmq_pollitem_t){ NULL, g->lfd,
                                       finishing || paused || flushing ? 0 : ZMQ_POLLIN, 0 };
        if (flushing) {
            uint64_t end = atomic_load(&g->flush_end_us);
            int t = end <= now ? 0 : (int)((end - now + 999) / 1000);
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        for (uint32_t i = 0; i < g->n_conns; i++) {
            conn_t *c = g->conns[i];
            short ev = 0;
            /* backpressure: not while a message waits; finishing: only
             * a lingering connection's end */
            if (c->lingering ||
                (!c->complete && c->st != C_CLOSING && !finishing && !flushing))
                ev |= ZMQ_POLLIN;
            if (out_pending(c))
                ev |= ZMQ_POLLOUT;
            cix[i] = k;
            items[k++] = (zmq_pollitem_t){ NULL, c->fd, ev, 0 };
            short dev = 0;
            if (c->dealer) {
                if (c->complete)
                    dev |= ZMQ_POLLOUT;
                if (!out_pending(c))
                    dev |= ZMQ_POLLIN;
            }
            if (dev)    /* its own revents are not read: both are tried below */
                items[k++] = (zmq_pollitem_t){ c->dealer, -1, dev, 0 };
            if (c->deadline_us) {
                int t = c->deadline_us <= now ? 0
                        : (int)((c->deadline_us - now + 999) / 1000);
                if (timeout < 0 || t < timeout)
                    timeout = t;
            }
            if (g->hb_us && c->st == C_ACTIVE) {
                uint64_t due = c->ping_us < c->heard_us + g->hb_timeout_us
                                   ? c->ping_us : c->heard_us + g->hb_timeout_us;
                int t = due <= now ? 0 : (int)((due - now + 999) / 1000);
                if (timeout < 0 || t < timeout)
                    timeout = t;
            }
        }
        int rc = zmq_poll(items, (int)k, timeout);
        if (rc < 0 && zmq_errno() != EINTR) {
            wf_log(g->log, WF_LOG_ERR, "%s: zmq_poll: %s", g->plane,
                   zmq_strerror(zmq_errno()));
            usleep(10000);
            continue;
        }
        now = now_us();
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(g->wake, &v, sizeof v);
            (void)r;
        }
        if (atomic_load(&g->keys_gen) != g->keys_seen) {
            keys_apply(g);
            continue;   /* the poll items are stale: closes moved connections */
        }
        /* wf_gate_finish or _stop_flush may have woken this poll: every connection is
         * looked at below, before the next one blocks */
        finishing = atomic_load(&g->finish);
        flushing = atomic_load(&g->flush);
        /* connections, from the last (a close moves the last into i) */
        for (uint32_t i = g->n_conns; i-- > 0;) {
            conn_t *c = g->conns[i];
            zmq_pollitem_t *it = &items[cix[i]];
            const char *why = NULL;
            bool ok = true;
            if (c->lingering) {
                if ((it[0].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) && !linger_read(c))
                    conn_close(g, i);
                continue;
            }
            /* hung up or reset: what it sent before is still read and
             * forwarded (as libzmq would), then it is closed; finishing,
             * nothing more is read */
            bool err = it[0].revents & ZMQ_POLLERR;
            if (!err && (it[0].revents & ZMQ_POLLOUT) && !out_flush(c)) {
                ok = false;
                why = "write failed";
            }
            if (ok && (it[0].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) && !c->complete &&
                c->st != C_CLOSING && !finishing && !flushing)
                ok = conn_read(g, c, &why);
            if (ok && c->complete && c->dealer && forward(c)) {
                /* room again: what rbuf still holds is parsed */
                ok = parse(g, c, &why);
            }
            if (ok && c->dealer && !out_pending(c) && !take_reply(c)) {
                ok = false;
                why = "out of memory";
            }
            if (ok && out_pending(c) && !out_flush(c)) {
                ok = false;
                why = "write failed";
            }
            /* ERROR written (here, or at POLLOUT): closed now, not at the
             * handshake's deadline (nothing else is polled for it) */
            if (ok && c->st == C_CLOSING && !out_pending(c))
                ok = false;
            if (ok && err)
                ok = false;
            if (ok && g->hb_us && c->st == C_ACTIVE && !c->lingering)
                ok = heartbeat(g, c, now, &why);
            if (ok && c->deadline_us && now >= c->deadline_us && !finishing) {
                ok = false;
                why = g->handshake_late;
            }
            if (ok && finishing && !conn_finish(c)) {
                conn_close(g, i);
                continue;
            }
            if (!ok)
                close_with(g, i, why);
        }
        if (flushing) {
            /* done once no connection has output left, in its buffer or
             * its DEALER (the ROUTER is closed: nothing new comes) */
            bool idle = true;
            for (uint32_t i = 0; i < g->n_conns && idle; i++) {
                conn_t *c = g->conns[i];
                int zev = 0;
                size_t zl = sizeof zev;
                if (out_pending(c) ||
                    (c->dealer && zmq_getsockopt(c->dealer, ZMQ_EVENTS, &zev, &zl) == 0 &&
                     (zev & ZMQ_POLLIN)))
                    idle = false;
            }
            if (idle || now_us() >= atomic_load(&g->flush_end_us))
                break;
            continue;
        }
        if (finishing)
            continue;
        if (items[1].revents & ZMQ_POLLIN)
            for (int n = 0; n < 64 && now_us() >= g->accept_pause_us; n++) {
                uint64_t acc = atomic_load(&g->accepted);
                accept_one(g);
                if (atomic_load(&g->accepted) == acc)
                    break;      /* none waiting (or out of fds) */
            }
    }
    free(items);
    free(cix);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the API */

static wf_status_t listen_unix(const char *path, bool abstract, int *ret_fd,
                               char *why, size_t why_len)
{
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n + 1 + (abstract ? 1 : 0) > sizeof un.sun_path || n == 0) {
        snprintf(why, why_len, "socket path empty or longer than %zu bytes",
                 sizeof un.sun_path - 1);
        return WF_E_BAD_ARGUMENT;
    }
    memcpy(un.sun_path + (abstract ? 1 : 0), path, n);
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                               n + 1); /* abstract: the leading NUL; else the final one */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_len, "socket: %s", strerror(errno));
        return WF_E_INTERNAL;
    }
    /* a file left by an earlier run (libzmq removes it the same way) */
    if (!abstract)
        unlink(path);
    if (bind(fd, (struct sockaddr *)&un, sl) != 0 || listen(fd, 128) != 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        close(fd);
        return WF_E_INTERNAL;
    }
    *ret_fd = fd;
    return WF_OK;
}

wf_status_t wf_gate_listen(const char *endpoint, int *ret_fd, bool *ret_unix,
                           char *bound, size_t bound_len, char *why,
                           size_t why_len)
{
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        const char *p = endpoint + 6;
        bool abstract = p[0] == '@';
        wf_status_t st = listen_unix(abstract ? p + 1 : p, abstract, ret_fd, why,
                                     why_len);
        if (st == WF_OK) {
            *ret_unix = true;
            snprintf(bound, bound_len, "%s", endpoint);
        }
        return st;
    }
    if (strncmp(endpoint, "tcp://", 6) != 0) {
        snprintf(why, why_len, "not a tcp:// or ipc:// endpoint");
        return WF_E_BAD_ARGUMENT;
    }
    char host[256];
    const char *h = endpoint + 6;
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h || (size_t)(colon - h) >= sizeof host) {
        snprintf(why, why_len, "not tcp://HOST:PORT");
        return WF_E_BAD_ARGUMENT;
    }
    size_t hl = (size_t)(colon - h);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    const char *port = colon + 1;
    if (strcmp(port, "*") == 0)
        port = "0";
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    /* IPv4 unless the host is an IPv6 address (libzmq without ZMQ_IPV6
     * resolves names to IPv4 only: "localhost" is 127.0.0.1) */
    hints.ai_family = strchr(host, ':') ? AF_INET6 : AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* an interface name ("lo", "eth0") stands for its IPv4 address, as
     * in libzmq */
    struct ifaddrs *ifs = NULL;
    if (strcmp(host, "*") != 0 && getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *x = ifs; x; x = x->ifa_next)
            if (x->ifa_addr && x->ifa_addr->sa_family == AF_INET &&
                strcmp(x->ifa_name, host) == 0) {
                inet_ntop(AF_INET, &((const struct sockaddr_in *)x->ifa_addr)->sin_addr,
                          host, sizeof host);
                break;
            }
        freeifaddrs(ifs);
    }
    int rc = getaddrinfo(strcmp(host, "*") == 0 ? NULL : host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(why, why_len, "%s: %s", host, gai_strerror(rc));
        return WF_E_BAD_ARGUMENT;
    }
    struct addrinfo *a = ai;
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_len, "socket: %s", strerror(errno));
        freeaddrinfo(ai);
        return WF_E_INTERNAL;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        int e = errno;          /* kept for the caller (EADDRINUSE) */
        snprintf(why, why_len, "%s", strerror(e));
        close(fd);
        freeaddrinfo(ai);
        errno = e;
        return WF_E_INTERNAL;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned pnum = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
            pnum = ntohs(in->sin_port);
            snprintf(bound, bound_len, "tcp://%s:%u", ip, pnum);
        } else {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
            pnum = ntohs(in6->sin6_port);
            snprintf(bound, bound_len, "tcp://[%s]:%u", ip, pnum);
        }
    }
    *ret_fd = fd;
    *ret_unix = false;
    return WF_OK;
}

static const wf_gate_names_t client_names = {
    .frame_bytes = "max_header_bytes, max_tensor_bytes",
    .max_frames = "client_max_frames",
    .message_bytes = "max_header_bytes + client_queue_bytes",
    .max_connections = "client_max_connections",
    .max_handshakes = "client_max_handshakes",
    .handshake_ms = "client_handshake_ms",
};

wf_status_t wf_gate_start(const wf_gate_cfg_t *cfg, wf_gate_t **ret)
{
    wf_gate_t *g = calloc(1, sizeof *g);
    if (!g) {
        close(cfg->listen_fd);
        return WF_E_INTERNAL;
    }
    /* no log: a logger that writes nothing (level below every line's) */
    wf_log_init(&g->quiet, -1, (wf_log_level_t)-1);
    g->log = cfg->log ? cfg->log : &g->quiet;
    snprintf(g->plane, sizeof g->plane, "%s", cfg->plane ? cfg->plane : "client plane");
    g->who = cfg->plane ? "peer" : "client";
    g->nm = cfg->names ? *cfg->names : client_names;
    snprintf(g->zap_domain, sizeof g->zap_domain, "%s",
             cfg->zap_domain ? cfg->zap_domain : "");
    g->peer_rid = cfg->peer_routing_id;
    g->close_over = cfg->close_over;
    if (cfg->heartbeat_ms && cfg->heartbeat_timeout_ms) {
        g->hb_us = (uint64_t)cfg->heartbeat_ms * 1000u;
        g->hb_timeout_us = (uint64_t)cfg->heartbeat_timeout_ms * 1000u;
    }
    snprintf(g->hb_late, sizeof g->hb_late, "nothing from it within %u ms "
             "(heartbeat)", cfg->heartbeat_timeout_ms);
    snprintf(g->handshake_taken, sizeof g->handshake_taken, "its handshake slot "
             "taken by a newer connection (%s in their handshake)",
             g->nm.max_handshakes);
    snprintf(g->handshake_late, sizeof g->handshake_late, "the handshake did not "
             "end within %s", g->nm.handshake_ms);
    char what[64];
    snprintf(what, sizeof what, "%s connections refused or closed", g->plane);
    wf_log_limit_init(&g->noted, what, LOG_BURST, LOG_WINDOW_S);
    pthread_once(&seal_once, seal_init);
    if (sodium_init() < 0) {
        wf_log(g->log, WF_LOG_ERR, "%s: libsodium does not start", g->plane);
        close(cfg->listen_fd);
        wf_log_limit_destroy(&g->noted);
        free(g);
        return WF_E_INTERNAL;
    }
    g->zctx = cfg->zctx;
    snprintf(g->router_ep, sizeof g->router_ep, "%s", cfg->router_endpoint);
    g->lfd = cfg->listen_fd;
    char q[WF_GATE_ADDR_MAX];
    wf_escape(q, sizeof q, cfg->endpoint, strlen(cfg->endpoint), WF_ESC_ASCII);
    snprintf(g->endpoint, sizeof g->endpoint, "%s", q);
    g->unix_socket = cfg->unix_socket;
    g->mech = cfg->mech;

    g->limits = cfg->limits;
    g->wake = -1;
    g->done = -1;
    pthread_mutex_init(&g->mu, NULL);
    sem_init(&g->running, 0, 0);
    atomic_init(&g->stop, false);
    atomic_init(&g->finish, false);
    atomic_init(&g->tid, 0);
    randombytes_buf(&g->next_rid, sizeof g->next_rid);
    if (g->mech == WF_GATE_CURVE &&
        (!cfg->keys || !wf_curve_server_init(&g->server, cfg->keys->public_key,
                                             cfg->keys->secret_key))) {
        wf_log(g->log, WF_LOG_ERR, "%s: CURVE needs this daemon's key pair", g->plane);
        goto fail;
    }
    /* the allow-list before the thread accepts a connection: a client
     * admitted later would be refused in between */
    if (g->mech == WF_GATE_CURVE &&
        wf_gate_set_keys(g, cfg->client_keys, cfg->n_client_keys) != WF_OK) {
        wf_log(g->log, WF_LOG_ERR, "%s: client_keys: out of memory", g->plane);
        goto fail;
    }
    int fl = fcntl(g->lfd, F_GETFL);
    if (fl < 0 || fcntl(g->lfd, F_SETFL, fl | O_NONBLOCK) != 0) {
        wf_log(g->log, WF_LOG_ERR, "%s: fcntl: %s", g->plane, strerror(errno));
        goto fail;
    }
    g->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    g->done = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g->wake < 0 || g->done < 0) {
        wf_log(g->log, WF_LOG_ERR, "%s: eventfd: %s", g->plane, strerror(errno));
        goto fail;
    }
    if (pthread_create(&g->thread, NULL, gate_thread, g) != 0) {
        wf_log(g->log, WF_LOG_ERR, "%s: cannot start its thread", g->plane);
        goto fail;
    }
    pthread_setname_np(g->thread, "weft-gate");
    g->started = true;
    while (sem_wait(&g->running) != 0 && errno == EINTR)
        ;
    *ret = g;
    return WF_OK;
fail:
    wf_gate_stop(&g);
    return WF_E_INTERNAL;
}

void wf_gate_node_plane(wf_gate_cfg_t *cfg, const wf_keypair_t *self)
{
    cfg->mech = self ? WF_GATE_CURVE : WF_GATE_NULL;
    cfg->keys = self;
    cfg->zap_domain = self ? WF_ZAP_NODES : NULL;
    cfg->peer_routing_id = true;
    cfg->close_over = true;
}

wf_status_t wf_gate_front(void *router, const char *endpoint, wf_gate_cfg_t *cfg,
                          char *bound, size_t bound_len, char *why,
                          size_t why_len, wf_gate_t **ret)
{
    static atomic_uint next;
    char inproc[64];
    snprintf(inproc, sizeof inproc, "inproc://weft-gate-%u-%u", (unsigned)getpid(),
             atomic_fetch_add(&next, 1));
    if (zmq_bind(router, inproc) != 0) {
        snprintf(why, why_len, "bind %s: %s", inproc, zmq_strerror(zmq_errno()));
        errno = EINVAL;
        return WF_E_INTERNAL;
    }
    int fd = -1;
    bool is_unix = false;
    wf_status_t st = wf_gate_listen(endpoint, &fd, &is_unix, bound, bound_len,
                                    why, why_len);
    if (st != WF_OK) {
        int e = errno;
        zmq_unbind(router, inproc);
        errno = e;
        return st;
    }
    cfg->router_endpoint = inproc;
    cfg->listen_fd = fd;
    cfg->endpoint = bound;
    cfg->unix_socket = is_unix;
    if (wf_gate_start(cfg, ret) != WF_OK) {     /* logged; fd closed */
        snprintf(why, why_len, "the listener did not start");
        zmq_unbind(router, inproc);
        errno = EINVAL;
        return WF_E_INTERNAL;
    }
    return WF_OK;
}

wf_status_t wf_gate_set_keys(wf_gate_t *g, const wf_key_entry_t *e, size_t n)
{
    wf_key_entry_t *copy = NULL;
    if (n) {
        copy = malloc(n * sizeof *copy);
        if (!copy)
            return WF_E_INTERNAL;
        memcpy(copy, e, n * sizeof *copy);
    }
    pthread_mutex_lock(&g->mu);
    wf_key_entry_t *old = g->keys;
    g->keys = copy;
    g->n_keys = n;
    atomic_fetch_add(&g->keys_gen, 1);
    pthread_mutex_unlock(&g->mu);
    free(old);
    /* the thread applies them to the open connections */
    if (g->wake >= 0) {
        uint64_t one = 1;
        ssize_t w = write(g->wake, &one, sizeof one);
        (void)w;
    }
    return WF_OK;
}

void wf_gate_set_limits(wf_gate_t *g, const wf_gate_limits_t *l)
{
    pthread_mutex_lock(&g->mu);
    g->limits = *l;
    pthread_mutex_unlock(&g->mu);
}

int wf_gate_tid(wf_gate_t *g)
{
    return g ? atomic_load(&g->tid) : 0;
}

void wf_gate_stats(wf_gate_t *g, wf_gate_stats_t *ret)
{
    memset(ret, 0, sizeof *ret);
    if (!g)
        return;
    ret->accepted = atomic_load(&g->accepted);
    ret->refused = atomic_load(&g->refused);
    ret->over_limit = atomic_load(&g->over_limit);
    ret->admitted = atomic_load(&g->admitted);
    ret->open = atomic_load(&g->open);
}

bool wf_gate_meta_read(const void *data, size_t len, wf_gate_meta_t *ret)
{
    if (len != sizeof *ret)
        return false;
    memcpy(ret, data, sizeof *ret);
    pthread_once(&seal_once, seal_init);
    if (ret->magic != WF_GATE_META_MAGIC ||
        sodium_memcmp(ret->seal, seal, sizeof seal) != 0)
        return false;
    ret->key_name[sizeof ret->key_name - 1] = '\0';
    ret->addr[sizeof ret->addr - 1] = '\0';
    ret->limit[sizeof ret->limit - 1] = '\0';
    return true;
}

void wf_gate_finish(wf_gate_t *g)
{
    if (!g || !g->started)
        return;
    atomic_store(&g->finish, true);
    uint64_t one = 1;
    ssize_t w = write(g->wake, &one, sizeof one);
    (void)w;
}

void wf_gate_stop_flush(wf_gate_t **pg, int linger_ms)
{
    if (!pg || !*pg)
        return;
    wf_gate_t *g = *pg;
    if (g->started && linger_ms > 0) {
        atomic_store(&g->flush_end_us, now_us() + (uint64_t)linger_ms * 1000u);
        atomic_store(&g->flush, true);
        uint64_t one = 1;
        ssize_t w = write(g->wake, &one, sizeof one);
        (void)w;
        pthread_join(g->thread, NULL);  /* it ends once flushed */
        g->started = false;
    }
    wf_gate_stop(pg);
}

int wf_gate_done_fd(const wf_gate_t *g)
{
    return g ? g->done : -1;
}

void wf_gate_stop(wf_gate_t **pg)
{
    if (!pg || !*pg)
        return;
    wf_gate_t *g = *pg;
    if (g->started) {
        atomic_store(&g->stop, true);
        uint64_t one = 1;
        ssize_t w = write(g->wake, &one, sizeof one);
        (void)w;
        pthread_join(g->thread, NULL);
    }
    for (uint32_t i = 0; i < g->n_conns; i++)
        conn_free(g, g->conns[i]);
    free(g->conns);
    if (g->lfd >= 0)
        close(g->lfd);
    if (g->wake >= 0)
        close(g->wake);
    if (g->done >= 0)
        close(g->done);
    if (g->zap)
        zmq_close(g->zap);
    free(g->keys);
    sodium_memzero(&g->server, sizeof g->server);
    pthread_mutex_destroy(&g->mu);
    wf_log_limit_destroy(&g->noted);
    sem_destroy(&g->running);
    free(g);
    *pg = NULL;
}
