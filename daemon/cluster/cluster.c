/* cluster.c — rendezvous, heartbeats, node loss and rejoin between weftd
 * daemons (see cluster.h). The protocol messages are documented in
 * proto/PROTOCOL.md section 11; they are written and read as the typed
 * structs of proto/cluster_msg.h (which alone spells their keys), and
 * every received one is validated there before it is used.
 */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>

#include "base/mesh.h"
#include "cluster_msg.h"
#include "proto.h"

/* The message bounds of proto/ are the daemon's own. */
_Static_assert(WF_CMSG_MAX_NODES == WF_SETTINGS_MAX_NODES, "nodes bound");
_Static_assert(WF_CMSG_NAME_MAX == WF_SETTINGS_NAME_MAX, "node name bound");
_Static_assert(WF_CMSG_MAX_DEVICES == WF_SETTINGS_MAX_DEVICES, "devices bound");
_Static_assert(WF_CMSG_MESH_MAX == WF_MESH_MAX_WORLD, "mesh degree bound");
_Static_assert(WF_SETTINGS_ENDPOINT_MAX == WF_CTL_STR_MAX, "endpoint bound");

#define NCCL_VERSION_NONE "none"   /* the CPU build has no NCCL */
#define IDENTITY_MAX 256

typedef enum node_state {
    NODE_SELF = 0,     /* the coordinator itself */
    NODE_JOINING,      /* hello accepted, not in a world yet */
    NODE_WORLD,        /* sent the current world, waiting for its ready */
    NODE_READY,        /* in the current world, ready */
    NODE_LOST,         /* silent for heartbeat_timeout_ms */
    NODE_REFUSED       /* its hello failed the checks */
} node_state_t;

static const char *node_state_name(node_state_t s)
{
    switch (s) {
    case NODE_SELF: return "self";
    case NODE_JOINING: return "joining";
    case NODE_WORLD: return "joining";
    case NODE_READY: return "ready";
    case NODE_LOST: return "lost";
    case NODE_REFUSED: return "refused";
    }
    return "?";
}

typedef struct node {
    char name[WF_SETTINGS_NAME_MAX];       /* from its hello */
    char data[WF_SETTINGS_ENDPOINT_MAX];   /* its data-plane endpoint */
    unsigned char id[IDENTITY_MAX];        /* ROUTER identity */
    size_t id_len;
    uint32_t devices;                      /* from its hello */
    node_state_t state;
    bool in_world;                         /* part of the current world */
    uint32_t first_rank;                   /* in the current world */
    uint64_t last_heard_us;                /* last message from it */
} node_t;

typedef enum cstate {
    CS_FORMING = 0,    /* gathering hellos / waiting for readies */
    CS_SERVING,        /* world of every expected node */
    CS_DEGRADED,       /* world without some nodes (lost) */
    CS_COORD_LOST      /* member: the coordinator is silent */
} cstate_t;

static const char *cstate_name(cstate_t s)
{
    switch (s) {
    case CS_FORMING: return "forming";
    case CS_SERVING: return "serving";
    case CS_DEGRADED: return "degraded";
    case CS_COORD_LOST: return "coordinator-lost";
    }
    return "?";
}

/* A member that has no world yet says hello every HELLO_RETRY_US (its
 * first hello is dropped while the connection is not up: ZMQ_IMMEDIATE),
 * instead of once per heartbeat. */
#define HELLO_RETRY_US 25000

struct wf_cluster {
    wf_cluster_role_t role;
    const wf_settings_t *settings;   /* borrowed (the server's copy) */
    wf_log_t *log;                   /* borrowed */
    wf_notify_t *notify;             /* borrowed */
    void *sock;                      /* ROUTER (coordinator) / DEALER (member) */
    uint32_t protocol;               /* advertised protocol version */
    char data[WF_SETTINGS_ENDPOINT_MAX]; /* our data-plane endpoint */
    char xfer[WF_SETTINGS_ENDPOINT_MAX]; /* the coordinator's tensor channel
                                        (coordinator: ours; member: of the
                                        world received; "": none) */
    char name[WF_SETTINGS_NAME_MAX]; /* node_name, else the hostname */
    cstate_t state;
    char fatal[WF_PROTO_ERROR_MAX];  /* non-empty: stop the daemon */
    uint64_t epoch;                  /* of the current (or forming) world */
    char world_id[WF_CMSG_WORLD_ID_MAX]; /* hex, fresh per epoch */
    bool had_world;                  /* a world was formed once */
    bool round_open;                 /* coordinator: world sent, readies pending */
    uint64_t step_deadline_us;       /* of the current rendezvous step */
    uint64_t next_ping_us;           /* next heartbeat send / check */
    uint64_t next_hello_us;          /* member joining: next quick hello */
    uint64_t coord_heard_us;         /* member: last message from the coordinator */
    /* the world, both roles: nodes[0..n_nodes) (coordinator: every node
     * ever seen, self first; member: the world as received) */
    node_t nodes[WF_SETTINGS_MAX_NODES];
    uint32_t n_nodes;
    bool mesh_pending;               /* member: a mesh change to apply */
    wf_mesh_degrees_t mesh_deg;      /* its degrees */
    uint64_t mesh_pending_epoch;     /* and its mesh epoch */
    wf_mesh_degrees_t mesh_req;      /* the world mesh asked for (coordinator's) */
    uint64_t mesh_epoch;             /* mesh epoch: + 1 per world and per mesh change */
    bool self_ready;                 /* this node's comm world of `epoch` is built */
    /* a world aborted by a failed job (not by losing a node) */
    uint64_t failed_epoch;           /* world epoch known to be aborted so (0: none) */
    bool abort_pending;              /* the server must abort its part of it */
    char abort_why[WF_PROTO_ERROR_MAX]; /* what failed, for the logs */
    unsigned rebuilds;               /* coordinator: rebuilds in a row, no job
                                        succeeded since the first */
    bool rebuild_round;              /* coordinator: the open round rebuilds an
                                        aborted world (jobs are admitted) */
    bool held;                       /* coordinator: too many rebuilds in a row:
                                        the next waits for step_deadline_us */
    wf_cluster_msg_fn on_msg;        /* job traffic handler (server) */
    void *on_msg_arg;
    wf_cmsg_t tx;                    /* message being sent (large: kept off the stack) */
    wf_cmsg_t rx;                    /* received message, typed */
    wf_ctl_msg_t msg;                /* tx as fields (large: kept off the stack) */
    wf_ctl_msg_t in;                 /* received message */
    wf_buf_t buf;                    /* encoding scratch */
};

/* ------------------------------------------------------------------ */

static bool joining(const wf_cluster_t *c)
{
    return c->role == WF_CLUSTER_MEMBER && c->n_nodes == 0 && !c->fatal[0] &&
           c->state != CS_COORD_LOST;
}

static void status_line(wf_cluster_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Log at notice and mirror the line as STATUS= (what tests watch). */
static void status_line(wf_cluster_t *c, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    wf_log(c->log, WF_LOG_NOTICE, "%s", line);
    wf_notify_status(c->notify, line);
}

static void new_world_id(char out[WF_CMSG_WORLD_ID_MAX])
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t t = wf_now_usec();
        memcpy(r, &t, 8);
        memcpy(r + 8, &t, 8);
    }
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* Send c->msg: to `to` (coordinator) or to the coordinator (member).
 * Never blocks: a peer that is gone loses the message. */
static void send_msg(wf_cluster_t *c, const node_t *to)
{
    wf_buf_reset(&c->buf);
    if (wf_ctl_encode(&c->msg, &c->buf) != WF_OK) {
        wf_log(c->log, WF_LOG_ERR, "cluster: out of memory encoding a message");
        return;
    }
    if (c->role == WF_CLUSTER_COORDINATOR) {
        if (zmq_send(c->sock, to->id, to->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
            return;   /* EHOSTUNREACH: gone; its silence reports it */
    }
    zmq_send(c->sock, c->buf.data, c->buf.len, ZMQ_DONTWAIT);
}

/* Start c->tx as an empty message of `type`. */
static wf_cmsg_t *tx_begin(wf_cluster_t *c, wf_cmsg_type_t type)
{
    memset(&c->tx, 0, sizeof c->tx);
    c->tx.type = type;
    return &c->tx;
}

/* c->tx into c->msg, ready for send_msg; false (logged) when it does not
 * fit a control message. */
static bool tx_put(wf_cluster_t *c)
{
    wf_status_t rc = wf_cmsg_put(&c->msg, &c->tx);
    if (rc != WF_OK)
        wf_log(c->log, WF_LOG_ERR, "cluster: %s message not sent: %s",
               wf_cmsg_type_name(c->tx.type), wf_status_str(rc));
    return rc == WF_OK;
}

/* Read c->in into c->rx; false (logged) when it is not valid. */
static bool rx_get(wf_cluster_t *c, const char *from)
{
    char err[WF_PROTO_ERROR_MAX];
    if (wf_cmsg_get(&c->in, &c->rx, err, sizeof err) == WF_OK)
        return true;
    wf_log(c->log, WF_LOG_WARNING, "cluster: bad control message from %s "
           "dropped: %s", from, err);
    return false;
}

/* ------------------------------------------------------------------ */
/* coordinator */

static uint32_t local_devices(const wf_cluster_t *c)
{
    return c->settings->device_count;
}

static bool alive(const node_t *n)
{
    return n->state == NODE_SELF || n->state == NODE_JOINING ||
           n->state == NODE_WORLD || n->state == NODE_READY;
}

static uint32_t count_alive(const wf_cluster_t *c)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        k += alive(&c->nodes[i]);
    return k;
}

/* Names of the nodes in `state` (or of the expected ones never seen). */
static void names_in(const wf_cluster_t *c, node_state_t st, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < c->n_nodes && o + 1 < len; i++)
        if (c->nodes[i].state == st)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "",
                                  c->nodes[i].name);
    if (o >= len)
        buf[len - 1] = '\0';
}

/* Put the alive nodes in world order (self first, then by name) and give
 * them ranks; start a round: world to every member, wait for readies. */
static void start_round(wf_cluster_t *c, uint64_t now)
{
    c->rebuild_round = false;     /* coord_world_failed sets it after */
    c->held = false;
    /* insertion sort of nodes[1..) by name; lost / refused go last */
    for (uint32_t i = 2; i < c->n_nodes; i++) {
        node_t tmp = c->nodes[i];
        uint32_t j = i;
        while (j > 1 && (alive(&tmp) > alive(&c->nodes[j - 1]) ||
                         (alive(&tmp) == alive(&c->nodes[j - 1]) &&
                          strcmp(tmp.name, c->nodes[j - 1].name) < 0))) {
            c->nodes[j] = c->nodes[j - 1];
            j--;
        }
        c->nodes[j] = tmp;
    }
    c->epoch++;
    c->mesh_epoch++;
    c->self_ready = false;
    new_world_id(c->world_id);
    uint32_t rank = 0, nn = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        node_t *n = &c->nodes[i];
        n->in_world = alive(n);
        if (!n->in_world)
            continue;
        n->first_rank = rank;
        rank += n->devices;
        nn++;
        if (n->state != NODE_SELF)
            n->state = NODE_WORLD;
    }
    c->round_open = true;
    c->state = CS_FORMING;
    c->step_deadline_us = now + (uint64_t)c->settings->cluster_timeout_ms * 1000;
    /* one message for all: the world, and each member finds itself by name */
    wf_cmsg_world_t *w = &tx_begin(c, WF_CMSG_WORLD)->u.world;
    w->epoch = c->epoch;
    snprintf(w->id, sizeof w->id, "%s", c->world_id);
    w->nn = nn;
    w->mesh = (wf_cmsg_mesh_t){ c->mesh_epoch, c->mesh_req.dp, c->mesh_req.ring,
                                c->mesh_req.ulysses, c->mesh_req.tp };
    snprintf(w->xfer, sizeof w->xfer, "%s", c->xfer);
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        const node_t *n = &c->nodes[i];
        if (!n->in_world)
            continue;
        wf_cmsg_node_t *o = &w->nodes[k++];
        snprintf(o->name, sizeof o->name, "%s", n->name);
        o->rank = n->first_rank;
        o->ranks = n->devices;
        snprintf(o->data, sizeof o->data, "%s", n->data);
    }
    wf_log(c->log, WF_LOG_INFO, "cluster: rendezvous round of epoch %" PRIu64
           ": world of %u node(s), %u rank(s), id %s", c->epoch, nn, rank,
           c->world_id);
    if (!tx_put(c))
        return;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].in_world && c->nodes[i].state == NODE_WORLD)
            send_msg(c, &c->nodes[i]);
}

/* Every member of the round is ready: serve (the barrier). */
static void maybe_serve(wf_cluster_t *c)
{
    if (!c->round_open || !c->self_ready)
        return;
    uint32_t ranks = 0, nn = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        const node_t *n = &c->nodes[i];
        if (!n->in_world)
            continue;
        if (n->state == NODE_WORLD)
            return;
        ranks += n->devices;
        nn++;
    }
    c->round_open = false;
    c->rebuild_round = false;
    c->had_world = true;
    c->state = nn >= c->settings->nodes ? CS_SERVING : CS_DEGRADED;
    tx_begin(c, WF_CMSG_SERVE)->u.epoch = c->epoch;
    if (tx_put(c))
        for (uint32_t i = 0; i < c->n_nodes; i++)
            if (c->nodes[i].in_world && c->nodes[i].state == NODE_READY)
                send_msg(c, &c->nodes[i]);
    status_line(c, "cluster %s: epoch %" PRIu64 ", %u node(s), %u rank(s)",
                cstate_name(c->state), c->epoch, nn, ranks);
}

static node_t *find_by_id(wf_cluster_t *c, const void *id, size_t len)
{
    for (uint32_t i = 1; i < c->n_nodes; i++)
        if (c->nodes[i].id_len == len && memcmp(c->nodes[i].id, id, len) == 0)
            return &c->nodes[i];
    return NULL;
}

static node_t *find_by_name(wf_cluster_t *c, const char *name)
{
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return &c->nodes[i];
    return NULL;
}

static void refuse(wf_cluster_t *c, const void *id, size_t id_len, const char *err)
{
    node_t tmp;
    memset(&tmp, 0, sizeof tmp);
    memcpy(tmp.id, id, id_len);
    tmp.id_len = id_len;
    wf_cmsg_t *tx = tx_begin(c, WF_CMSG_REFUSE);
    snprintf(tx->u.text, sizeof tx->u.text, "%s", err);
    if (tx_put(c))
        send_msg(c, &tmp);
    wf_log(c->log, WF_LOG_ERR, "cluster: refused: %s", err);
}

/* A node is out: a new round without it once the world existed. */
static void lose_node(wf_cluster_t *c, node_t *n, const char *why, uint64_t now)
{
    if (!alive(n) || n->state == NODE_SELF)
        return;
    bool was_in_world = n->in_world;
    n->state = NODE_LOST;
    n->in_world = false;
    status_line(c, "cluster: node %s lost (%s) during %s, epoch %" PRIu64,
                n->name, why, c->round_open ? "the rendezvous step 'ready'"
                : c->had_world ? "service" : "the rendezvous step 'hello'",
                c->epoch);
    if (c->had_world && (was_in_world || c->round_open))
        start_round(c, now);
}

/* "job seq 12 failed on node b: internal error". */
static void describe_failure(char *buf, size_t len, const char *node, uint64_t seq,
                             wf_status_t st)
{
    if (st != WF_OK)
        snprintf(buf, len, "job seq %" PRIu64 " failed on node %s: %s", seq, node,
                 wf_status_str(st));
    else
        snprintf(buf, len, "a job failed on node %s", node);
}

/* Coordinator: the world of `epoch` was aborted on node `from` by a failed
 * job (its report "aborted", or this node's own). Every member aborts its
 * part ("abort"), and a round with the same nodes rebuilds the world,
 * unless WF_CLUSTER_MAX_REBUILDS rounds did so in a row without a job
 * succeeding: then the rebuild waits cluster_timeout_ms (degraded), so a
 * job that fails every time cannot keep the cluster rebuilding. */
static void coord_world_failed(wf_cluster_t *c, const node_t *from, uint64_t epoch,
                               uint64_t seq, wf_status_t st, uint64_t now)
{
    if (epoch != c->epoch || epoch == c->failed_epoch || !from->in_world ||
        !(c->had_world || c->round_open))
        return;     /* an older world's, or already handled */
    c->failed_epoch = epoch;
    c->abort_pending = true;
    describe_failure(c->abort_why, sizeof c->abort_why, from->name, seq, st);
    wf_cmsg_abort_t *ab = &tx_begin(c, WF_CMSG_ABORT)->u.abort;
    ab->epoch = epoch;
    snprintf(ab->why, sizeof ab->why, "%s", c->abort_why);
    bool put = tx_put(c);
    uint32_t nn = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        node_t *n = &c->nodes[i];
        if (!n->in_world)
            continue;
        nn++;
        if (put && n->state != NODE_SELF && alive(n))
            send_msg(c, n);
    }
    if (c->rebuilds < WF_CLUSTER_MAX_REBUILDS) {
        c->rebuilds++;
        status_line(c, "cluster: comm world of epoch %" PRIu64 " aborted (%s); "
                    "rebuilding it with the same %u node(s), rebuild %u of at "
                    "most %d in a row", epoch, c->abort_why, nn, c->rebuilds,
                    WF_CLUSTER_MAX_REBUILDS);
        start_round(c, now);
        c->rebuild_round = true;
        return;
    }
    c->held = true;
    c->round_open = false;
    c->state = CS_DEGRADED;
    c->step_deadline_us = now + (uint64_t)c->settings->cluster_timeout_ms * 1000;
    status_line(c, "cluster degraded: comm world of epoch %" PRIu64 " aborted "
                "(%s) after %u rebuilds in a row without a job succeeding; "
                "next rebuild in %u ms, jobs refused until then", epoch,
                c->abort_why, c->rebuilds, c->settings->cluster_timeout_ms);
}

static void coord_hello(wf_cluster_t *c, const void *id, size_t id_len, uint64_t now)
{
    char err[WF_PROTO_ERROR_MAX], bad[WF_PROTO_ERROR_MAX];
    /* Every field that is valid is read (the others are 0 / ""); the first
     * invalid one is named in bad. */
    wf_status_t valid = wf_cmsg_get(&c->in, &c->rx, bad, sizeof bad);
    const wf_cmsg_hello_t *h = &c->rx.u.hello;
    const char *name = h->name;
    const char *who = name[0] ? name : "(unnamed)";
    /* The version check comes first: nothing else is used before it (a
     * hello of another version may differ in any other field). */
    if (h->proto != c->protocol) {
        snprintf(err, sizeof err, "node %.63s: field 'protocol version': %" PRIu64
                 " differs from the coordinator's %u", who, h->proto, c->protocol);
        goto refused;
    }
    if (strcmp(h->weft, WEFT_VERSION) != 0) {
        snprintf(err, sizeof err, "node %.63s: field 'weft version': %.40s differs "
                 "from the coordinator's %s", who, h->weft[0] ? h->weft : "(missing)",
                 WEFT_VERSION);
        goto refused;
    }
    if (strcmp(h->nccl, NCCL_VERSION_NONE) != 0) {
        snprintf(err, sizeof err, "node %.63s: field 'NCCL version': %.40s differs "
                 "from the coordinator's %s", who, h->nccl[0] ? h->nccl : "(missing)",
                 NCCL_VERSION_NONE);
        goto refused;
    }
    if (!name[0]) {
        snprintf(err, sizeof err, "node %.63s: field 'node name': missing or too "
                 "long", who);
        goto refused;
    }
    if (valid != WF_OK) {
        /* devices out of range, data or epoch missing, ... */
        snprintf(err, sizeof err, "node %.63s: %.180s", name, bad);
        goto refused;
    }
    uint64_t devices = h->devices, epoch = h->epoch;
    const char *data = h->data;
    if (devices != local_devices(c)) {
        /* each node is whole replicas of the world mesh */
        snprintf(err, sizeof err, "node %.63s: field 'devices': %" PRIu64 " differs "
                 "from the coordinator's %u (every node brings the same devices)",
                 name, devices, local_devices(c));
        goto refused;
    }
    if (strcmp(name, c->nodes[0].name) == 0) {
        snprintf(err, sizeof err, "node %.63s: field 'node name': taken by the "
                 "coordinator", name);
        goto refused;
    }
    if (epoch > c->epoch)
        c->epoch = epoch;     /* a restarted coordinator continues the count */

    node_t *n = find_by_name(c, name);
    if (n && alive(n) && n->id_len == id_len && memcmp(n->id, id, id_len) == 0) {
        n->last_heard_us = now;
        if (n->in_world && (n->state == NODE_READY || n->state == NODE_WORLD) &&
            !c->round_open) {
            /* a repeated hello of a node already in the world: a new round
             * brings it back in step */
            start_round(c, now);
        }
        return;
    }
    if (!n) {
        if (c->n_nodes == WF_SETTINGS_MAX_NODES) {
            snprintf(err, sizeof err, "node %.63s: the cluster already has %d "
                     "nodes", name, WF_SETTINGS_MAX_NODES);
            goto refused;
        }
        n = &c->nodes[c->n_nodes++];
        memset(n, 0, sizeof *n);
        snprintf(n->name, sizeof n->name, "%s", name);
    } else if (alive(n)) {
        wf_log(c->log, WF_LOG_WARNING, "cluster: node %s said hello again from a "
               "new connection (restarted?)", name);
    }
    memcpy(n->id, id, id_len);
    n->id_len = id_len;
    n->devices = (uint32_t)devices;
    snprintf(n->data, sizeof n->data, "%s", data);
    n->state = NODE_JOINING;
    n->in_world = false;
    n->last_heard_us = now;
    uint32_t have = count_alive(c);
    wf_log(c->log, WF_LOG_INFO, "cluster: node %s joined (%" PRIu64 " devices); "
           "%u of %u node(s)", name, devices, have, c->settings->nodes);
    if (c->had_world || have >= c->settings->nodes)
        start_round(c, now);
    return;

refused:
    if (name[0]) {
        node_t *r = find_by_name(c, name);
        if (!r && c->n_nodes < WF_SETTINGS_MAX_NODES) {
            r = &c->nodes[c->n_nodes++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "%s", name);
            r->state = NODE_REFUSED;
        }
        /* a refused hello never touches a node of the world (it may come
         * from an impostor of its name) */
        if (r && !alive(r))
            r->state = NODE_REFUSED;
    }
    refuse(c, id, id_len, err);
}

static void coord_message(wf_cluster_t *c, const void *id, size_t id_len,
                          uint64_t now)
{
    wf_cmsg_type_t type = wf_cmsg_type(&c->in);
    if (type == WF_CMSG_HELLO) {
        coord_hello(c, id, id_len, now);
        return;
    }
    node_t *n = find_by_id(c, id, id_len);
    if (!n || !alive(n)) {
        /* not (or no longer) known here: e.g. this coordinator restarted */
        node_t tmp;
        memset(&tmp, 0, sizeof tmp);
        memcpy(tmp.id, id, id_len);
        tmp.id_len = id_len;
        tx_begin(c, WF_CMSG_REJOIN);
        if (tx_put(c))
            send_msg(c, &tmp);
        return;
    }
    n->last_heard_us = now;
    const wf_cmsg_t *rx = &c->rx;
    switch (type) {
    case WF_CMSG_PING:
        if (!rx_get(c, n->name))
            break;
        tx_begin(c, WF_CMSG_PONG)->u.epoch = c->epoch;
        if (tx_put(c))
            send_msg(c, n);
        break;
    case WF_CMSG_READY:
        if (rx_get(c, n->name) && rx->u.epoch == c->epoch && n->state == NODE_WORLD &&
            c->round_open) {
            n->state = NODE_READY;
            maybe_serve(c);
        }
        break;
    case WF_CMSG_DATA:
        if (rx_get(c, n->name))
            snprintf(n->data, sizeof n->data, "%s", rx->u.text);
        break;
    case WF_CMSG_ABORTED:
        if (rx_get(c, n->name))
            coord_world_failed(c, n, rx->u.result.epoch, rx->u.result.seq,
                               rx->u.result.st, now);
        break;
    default:
        /* job traffic ("done"), or a type this build does not know */
        if (c->on_msg)
            c->on_msg(c->on_msg_arg, n->name, &c->in);
        break;
    }
}

static void coord_timers(wf_cluster_t *c, uint64_t now)
{
    uint64_t limit = (uint64_t)c->settings->heartbeat_timeout_ms * 1000;
    for (uint32_t i = 1; i < c->n_nodes; i++) {
        node_t *n = &c->nodes[i];
        if (alive(n) && now - n->last_heard_us > limit) {
            char why[96];
            snprintf(why, sizeof why, "silent for %" PRIu64 " ms",
                     (now - n->last_heard_us) / 1000);
            lose_node(c, n, why, now);
        }
    }
    if (now < c->step_deadline_us)
        return;
    uint64_t tmo = (uint64_t)c->settings->cluster_timeout_ms;
    char names[512];
    if (c->held) {
        status_line(c, "cluster: rebuilding the comm world of epoch %" PRIu64
                    " after holding it back %" PRIu64 " ms", c->epoch, tmo);
        start_round(c, now);
        c->rebuild_round = true;
        return;
    }
    if (c->round_open) {
        names_in(c, NODE_WORLD, names, sizeof names);
        status_line(c, "cluster: rendezvous step 'ready' of epoch %" PRIu64
                    " timed out after %" PRIu64 " ms: no answer from node(s) %s",
                    c->epoch, tmo, names);
        for (uint32_t i = 1; i < c->n_nodes; i++)
            if (c->nodes[i].state == NODE_WORLD) {
                c->nodes[i].state = NODE_LOST;
                c->nodes[i].in_world = false;
            }
        start_round(c, now);
        return;
    }
    if (!c->had_world) {
        char lost[256];
        names_in(c, NODE_LOST, lost, sizeof lost);
        uint32_t have = count_alive(c);
        status_line(c, "cluster: rendezvous step 'hello' timed out after %" PRIu64
                    " ms: %u of %u node(s) missing%s%s; still waiting",
                    tmo, c->settings->nodes - have, c->settings->nodes,
                    lost[0] ? ", lost: " : "", lost);
    }
    c->step_deadline_us = now + tmo * 1000;
}

/* ------------------------------------------------------------------ */
/* member */

static void member_hello(wf_cluster_t *c)
{
    wf_cmsg_hello_t *h = &tx_begin(c, WF_CMSG_HELLO)->u.hello;
    h->proto = c->protocol;
    snprintf(h->weft, sizeof h->weft, "%s", WEFT_VERSION);
    snprintf(h->nccl, sizeof h->nccl, "%s", NCCL_VERSION_NONE);
    snprintf(h->name, sizeof h->name, "%s", c->name);
    h->devices = local_devices(c);
    snprintf(h->data, sizeof h->data, "%s", c->data);
    h->epoch = c->epoch;
    if (tx_put(c))
        send_msg(c, NULL);
}

static void member_world(wf_cluster_t *c)
{
    char err[WF_PROTO_ERROR_MAX];
    if (wf_cmsg_get(&c->in, &c->rx, err, sizeof err) != WF_OK) {
        wf_log(c->log, WF_LOG_WARNING, "cluster: malformed world message ignored: "
               "%s", err);
        return;
    }
    const wf_cmsg_world_t *w = &c->rx.u.world;
    node_t nodes[WF_SETTINGS_MAX_NODES];
    bool found = false;
    for (uint32_t k = 0; k < w->nn; k++) {
        const wf_cmsg_node_t *in = &w->nodes[k];
        memset(&nodes[k], 0, sizeof nodes[k]);
        snprintf(nodes[k].name, sizeof nodes[k].name, "%s", in->name);
        snprintf(nodes[k].data, sizeof nodes[k].data, "%s", in->data);
        nodes[k].first_rank = in->rank;
        nodes[k].devices = in->ranks;
        nodes[k].in_world = true;
        nodes[k].state = NODE_WORLD;
        if (strcmp(in->name, c->name) == 0)
            found = in->ranks == local_devices(c);
    }
    if (!found) {
        wf_log(c->log, WF_LOG_WARNING, "cluster: world of epoch %" PRIu64 " does "
               "not hold this node as it is; ignored", w->epoch);
        return;
    }
    c->mesh_req = (wf_mesh_degrees_t){ w->mesh.dp, w->mesh.ring, w->mesh.ulysses,
                                       w->mesh.tp };
    c->mesh_epoch = w->mesh.mepoch;
    c->self_ready = false;
    /* the tensor channel (absent: jobs keep their roots on the coordinator) */
    snprintf(c->xfer, sizeof c->xfer, "%s",
             strncmp(w->xfer, "tcp://", 6) == 0 ? w->xfer : "");
    memcpy(c->nodes, nodes, w->nn * sizeof nodes[0]);
    c->n_nodes = w->nn;
    c->epoch = w->epoch;
    snprintf(c->world_id, sizeof c->world_id, "%s", w->id);
    c->state = CS_FORMING;
    uint32_t ranks = w->nodes[w->nn - 1].rank + w->nodes[w->nn - 1].ranks;
    /* The server builds this node's part of the comm world now and says
     * ready through wf_cluster_world_ready. */
    wf_log(c->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 " (%u node(s), "
           "%u rank(s), id %s) received; building its communicators", w->epoch,
           w->nn, ranks, w->id);
}

static void member_message(wf_cluster_t *c, uint64_t now)
{
    wf_cmsg_type_t type = wf_cmsg_type(&c->in);
    bool was_lost = c->state == CS_COORD_LOST;
    c->coord_heard_us = now;
    const wf_cmsg_t *rx = &c->rx;
    const char *from = "the coordinator";
    switch (type) {
    case WF_CMSG_REFUSE:
        /* a refusal without a valid reason still refuses */
        wf_cmsg_get(&c->in, &c->rx, NULL, 0);
        snprintf(c->fatal, sizeof c->fatal, "refused by the coordinator %s: %.160s",
                 c->settings->coordinator,
                 rx->u.text[0] ? rx->u.text : "(no reason given)");
        wf_log(c->log, WF_LOG_ERR, "cluster: %s", c->fatal);
        return;
    case WF_CMSG_WORLD:
        member_world(c);
        return;
    case WF_CMSG_SERVE:
        if (rx_get(c, from) && rx->u.epoch == c->epoch && c->n_nodes > 0) {
            for (uint32_t i = 0; i < c->n_nodes; i++)
                c->nodes[i].state = NODE_READY;
            c->had_world = true;
            c->state = c->n_nodes >= c->settings->nodes ? CS_SERVING : CS_DEGRADED;
            uint32_t ranks = c->nodes[c->n_nodes - 1].first_rank +
                             c->nodes[c->n_nodes - 1].devices;
            status_line(c, "cluster %s: epoch %" PRIu64 ", %u node(s), %u rank(s)",
                        cstate_name(c->state), c->epoch, c->n_nodes, ranks);
        }
        break;
    case WF_CMSG_ABORT:
        if (rx_get(c, from) && rx->u.abort.epoch == c->epoch && c->n_nodes > 0) {
            c->failed_epoch = rx->u.abort.epoch;
            c->abort_pending = true;
            snprintf(c->abort_why, sizeof c->abort_why, "%s",
                     rx->u.abort.why[0] ? rx->u.abort.why
                                        : "a job failed on another node");
        }
        break;
    case WF_CMSG_REJOIN:
        c->state = CS_FORMING;
        c->n_nodes = 0;
        member_hello(c);
        break;
    case WF_CMSG_MESH:
        if (rx_get(c, from)) {
            const wf_cmsg_mesh_t *me = &rx->u.mesh;
            c->mesh_deg = (wf_mesh_degrees_t){ me->dp, me->ring, me->ulysses, me->tp };
            c->mesh_pending_epoch = me->mepoch;
            c->mesh_epoch = me->mepoch;
            c->mesh_pending = true;
        }
        break;
    case WF_CMSG_PONG:
        /* the coordinator answers but has no world with us: it restarted
         * and will send rejoin; meanwhile say hello */
        if (was_lost)
            member_hello(c);
        break;
    default:
        /* job traffic ("job"), or a type this build does not know */
        if (c->on_msg)
            c->on_msg(c->on_msg_arg, NULL, &c->in);
        break;
    }
    if (was_lost && c->state == CS_COORD_LOST) {
        c->state = CS_FORMING;
        status_line(c, "cluster: coordinator %s answers again; rejoining",
                    c->settings->coordinator);
    }
}

static void member_timers(wf_cluster_t *c, uint64_t now)
{
    uint64_t limit = (uint64_t)c->settings->heartbeat_timeout_ms * 1000;
    if (c->state != CS_COORD_LOST && now - c->coord_heard_us > limit) {
        c->state = CS_COORD_LOST;
        c->n_nodes = 0;
        status_line(c, "cluster: coordinator %s lost (silent for %" PRIu64 " ms); "
                    "waiting for it", c->settings->coordinator,
                    (now - c->coord_heard_us) / 1000);
    }
    if (c->state == CS_COORD_LOST || (!c->had_world && c->n_nodes == 0))
        member_hello(c);   /* until a coordinator answers with a world */
    if (now >= c->step_deadline_us) {
        if (c->state == CS_FORMING)
            status_line(c, "cluster: rendezvous step 'world' timed out after %u ms: "
                        "no world from the coordinator %s yet; still waiting",
                        c->settings->cluster_timeout_ms, c->settings->coordinator);
        c->step_deadline_us = now + (uint64_t)c->settings->cluster_timeout_ms * 1000;
    }
}

/* ------------------------------------------------------------------ */

static void set_sock_opts(void *s, const wf_settings_t *st)
{
    int zero = 0, ivl = (int)st->heartbeat_ms, tmo = (int)st->heartbeat_timeout_ms;
    int64_t max = WF_CTL_MAX_BYTES + 1024;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof max);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_TTL, &tmo, sizeof tmo);
}

wf_status_t wf_cluster_new(const wf_settings_t *settings, void *zctx,
                           const char *data_endpoint,
                           wf_log_t *log, wf_notify_t *notify,
                           wf_cluster_t **ret)
{
    wf_cluster_t *c = calloc(1, sizeof *c);
    if (!c) {
        wf_log(log, WF_LOG_ERR, "cluster: out of memory");
        return WF_E_INTERNAL;
    }
    c->settings = settings;
    c->mesh_req = settings->mesh_deg;
    c->log = log;
    c->notify = notify;
    c->protocol = WF_PROTOCOL_VERSION;
    snprintf(c->name, sizeof c->name, "%s", settings->node_name);
    if (!c->name[0]) {
        /* the hostname, cut at the first character a name may not hold */
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0)
            host[0] = '\0';
        size_t n = 0;
        while (n + 1 < sizeof c->name && (isalnum((unsigned char)host[n]) ||
                                          host[n] == '.' || host[n] == '_' ||
                                          host[n] == '-'))
            n++;
        memcpy(c->name, host, n);
        c->name[n] = '\0';
        if (n == 0)
            snprintf(c->name, sizeof c->name, "node");
    }
    snprintf(c->data, sizeof c->data, "%s", data_endpoint ? data_endpoint : "");
    if (settings->test.protocol_version) {
        /* test hook: advertise another protocol version in the hello, to
         * test the coordinator's refusal (tests/test_cluster.c) */
        c->protocol = settings->test.protocol_version;
        wf_log(log, WF_LOG_WARNING, "cluster: advertising protocol version %u "
               "(WEFT_TEST_PROTOCOL_VERSION, test only)", c->protocol);
    }
    char ep[WF_SETTINGS_NAME_MAX + 8];
    snprintf(ep, sizeof ep, "tcp://%s", settings->coordinator);
    uint64_t now = wf_now_usec();

    c->sock = zmq_socket(zctx, ZMQ_ROUTER);
    if (!c->sock)
        goto zfail;
    int one = 1;
    zmq_setsockopt(c->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    set_sock_opts(c->sock, settings);
    if (zmq_bind(c->sock, ep) == 0) {
        c->role = WF_CLUSTER_COORDINATOR;
        node_t *self = &c->nodes[0];
        snprintf(self->name, sizeof self->name, "%s", c->name);
        self->devices = settings->device_count;
        self->state = NODE_SELF;
        snprintf(self->data, sizeof self->data, "%s", c->data);
        c->n_nodes = 1;
        c->step_deadline_us = now + (uint64_t)settings->cluster_timeout_ms * 1000;
        wf_log(log, WF_LOG_INFO, "cluster: coordinator on %s as node %s, waiting "
               "for %u node(s)", ep, self->name, settings->nodes);
        if (settings->nodes <= 1)
            start_round(c, now);
        maybe_serve(c);
    } else if (zmq_errno() == EADDRINUSE) {
        zmq_close(c->sock);
        c->sock = zmq_socket(zctx, ZMQ_DEALER);
        if (!c->sock)
            goto zfail;
        set_sock_opts(c->sock, settings);
        /* Do not queue hellos for a coordinator that is not there: they
         * are re-sent every heartbeat until one answers. */
        zmq_setsockopt(c->sock, ZMQ_IMMEDIATE, &one, sizeof one);
        if (zmq_connect(c->sock, ep) != 0)
            goto zfail;
        c->role = WF_CLUSTER_MEMBER;
        c->coord_heard_us = now;
        c->next_hello_us = now + HELLO_RETRY_US;
        c->step_deadline_us = now + (uint64_t)settings->cluster_timeout_ms * 1000;
        wf_log(log, WF_LOG_INFO, "cluster: member %s of the coordinator %s",
               settings->node_name, ep);
        member_hello(c);
    } else {
        goto zfail;
    }
    c->next_ping_us = now + (uint64_t)settings->heartbeat_ms * 1000;
    *ret = c;
    return WF_OK;

zfail:
    wf_log(log, WF_LOG_ERR, "cluster: %s: %s", ep, zmq_strerror(zmq_errno()));
    wf_cluster_destroy(&c);
    return WF_E_INTERNAL;
}

void wf_cluster_destroy(wf_cluster_t **pc)
{
    if (!pc || !*pc)
        return;
    wf_cluster_t *c = *pc;
    if (c->sock)
        zmq_close(c->sock);
    wf_buf_free(&c->buf);
    free(c);
    *pc = NULL;
}

wf_cluster_role_t wf_cluster_role(const wf_cluster_t *c)
{
    return c->role;
}

void *wf_cluster_socket(const wf_cluster_t *c)
{
    return c->sock;
}

int wf_cluster_timeout_ms(const wf_cluster_t *c, uint64_t now)
{
    uint64_t next = c->next_ping_us < c->step_deadline_us ? c->next_ping_us
                                                          : c->step_deadline_us;
    if (joining(c) && c->next_hello_us < next)
        next = c->next_hello_us;
    return next <= now ? 0 : (int)((next - now + 999) / 1000);
}

bool wf_cluster_handle(wf_cluster_t *c, uint64_t now)
{
    uint64_t epoch_before = c->epoch;
    cstate_t state_before = c->state;
    uint32_t n_before = c->n_nodes;
    for (int budget = 0; budget < 256; budget++) {
        unsigned char id[IDENTITY_MAX];
        int id_len = 0;
        if (c->role == WF_CLUSTER_COORDINATOR) {
            id_len = zmq_recv(c->sock, id, sizeof id, ZMQ_DONTWAIT);
            if (id_len < 0)
                break;
            if ((size_t)id_len > sizeof id)
                id_len = -1;    /* truncated identity: drain, ignore */
        }
        zmq_msg_t m;
        zmq_msg_init(&m);
        int rc = zmq_msg_recv(&m, c->sock, c->role == WF_CLUSTER_COORDINATOR
                                               ? 0 : ZMQ_DONTWAIT);
        bool more = rc >= 0 && zmq_msg_more(&m);
        char err[160];
        bool ok = rc >= 0 && !more && id_len >= 0 &&
                  wf_ctl_decode(zmq_msg_data(&m), zmq_msg_size(&m), &c->in, err,
                                sizeof err) == WF_OK;
        zmq_msg_close(&m);
        while (more) {     /* a peer that sends extra frames: drop them */
            zmq_msg_t x;
            zmq_msg_init(&x);
            more = zmq_msg_recv(&x, c->sock, 0) >= 0 && zmq_msg_more(&x);
            zmq_msg_close(&x);
        }
        if (rc < 0)
            break;
        if (!ok) {
            wf_log(c->log, WF_LOG_WARNING, "cluster: bad control message dropped");
            continue;
        }
        if (c->role == WF_CLUSTER_COORDINATOR)
            coord_message(c, id, (size_t)id_len, now);
        else
            member_message(c, now);
    }
    if (joining(c) && now >= c->next_hello_us) {
        member_hello(c);
        c->next_hello_us = now + HELLO_RETRY_US;
    }
    if (now >= c->next_ping_us) {
        if (c->role == WF_CLUSTER_MEMBER && c->state != CS_COORD_LOST) {
            tx_begin(c, WF_CMSG_PING)->u.epoch = c->epoch;
            if (tx_put(c))
                send_msg(c, NULL);
        }
        c->next_ping_us = now + (uint64_t)c->settings->heartbeat_ms * 1000;
        if (c->role == WF_CLUSTER_COORDINATOR)
            coord_timers(c, now);
        else
            member_timers(c, now);
    } else if (now >= c->step_deadline_us) {
        if (c->role == WF_CLUSTER_COORDINATOR)
            coord_timers(c, now);
        else
            member_timers(c, now);
    }
    return c->epoch != epoch_before || c->state != state_before ||
           c->n_nodes != n_before;
}

const char *wf_cluster_fatal(const wf_cluster_t *c)
{
    return c->fatal[0] ? c->fatal : NULL;
}

bool wf_cluster_serving(const wf_cluster_t *c)
{
    return (c->state == CS_SERVING || c->state == CS_DEGRADED) && !c->held;
}

bool wf_cluster_accepts_jobs(const wf_cluster_t *c)
{
    return c->role == WF_CLUSTER_COORDINATOR &&
           (wf_cluster_serving(c) || (c->round_open && c->rebuild_round));
}

/* The nodes of the world into ret (room for max); how many. */
static uint32_t world_nodes(const wf_cluster_t *c, wf_cluster_node_t *ret, uint32_t max)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_nodes && k < max; i++) {
        const node_t *n = &c->nodes[i];
        if (!n->in_world)
            continue;
        wf_cluster_node_t *o = &ret[k++];
        snprintf(o->name, sizeof o->name, "%s", n->name);
        snprintf(o->data, sizeof o->data, "%s", n->data);
        o->first_rank = n->first_rank;
        o->ranks = n->devices;
        o->self = strcmp(n->name, c->name) == 0;
    }
    return k;
}

void wf_cluster_world(const wf_cluster_t *c, wf_cluster_node_t *ret, uint32_t max,
                      uint32_t *ret_n, uint64_t *ret_epoch)
{
    *ret_n = wf_cluster_serving(c) ? world_nodes(c, ret, max) : 0;
    *ret_epoch = c->epoch;
}

void wf_cluster_why_not(const wf_cluster_t *c, char *buf, size_t len)
{
    if (c->role == WF_CLUSTER_MEMBER) {
        snprintf(buf, len, "node %s is a member of the cluster coordinated by %s; "
                 "submit jobs to the coordinator's endpoint",
                 c->name, c->settings->coordinator);
        return;
    }
    if (c->held) {
        snprintf(buf, len, "the cluster is degraded: its comm world (epoch %"
                 PRIu64 ") was aborted by a failed job (%s) after %u rebuilds in "
                 "a row without a job succeeding; it is rebuilt within %u ms; "
                 "retry later", c->epoch, c->abort_why, c->rebuilds,
                 c->settings->cluster_timeout_ms);
        return;
    }
    uint32_t have = count_alive(c);
    snprintf(buf, len, "the cluster world is %s (epoch %" PRIu64 ", %u of %u "
             "node(s) present); retry later", cstate_name(c->state), c->epoch,
             have, c->settings->nodes);
}

void wf_cluster_node_lost(wf_cluster_t *c, const char *name, const char *why,
                          uint64_t now)
{
    if (c->role != WF_CLUSTER_COORDINATOR)
        return;
    node_t *n = find_by_name(c, name);
    if (n)
        lose_node(c, n, why, now);
}

void wf_cluster_broadcast_mesh(wf_cluster_t *c, const wf_mesh_degrees_t *deg,
                               uint64_t mesh_epoch)
{
    if (c->role != WF_CLUSTER_COORDINATOR)
        return;
    c->mesh_req = *deg;
    c->mesh_epoch = mesh_epoch;
    tx_begin(c, WF_CMSG_MESH)->u.mesh = (wf_cmsg_mesh_t){
        mesh_epoch, deg->dp, deg->ring, deg->ulysses, deg->tp };
    if (!tx_put(c))
        return;
    for (uint32_t i = 1; i < c->n_nodes; i++)
        if (c->nodes[i].in_world && alive(&c->nodes[i]))
            send_msg(c, &c->nodes[i]);
}

bool wf_cluster_take_mesh(wf_cluster_t *c, wf_mesh_degrees_t *ret_deg,
                          uint64_t *ret_mesh_epoch)
{
    if (!c->mesh_pending)
        return false;
    c->mesh_pending = false;
    *ret_deg = c->mesh_deg;
    *ret_mesh_epoch = c->mesh_pending_epoch;
    return true;
}

void wf_cluster_current(const wf_cluster_t *c, wf_cluster_node_t *ret, uint32_t max,
                        uint32_t *ret_n, uint64_t *ret_epoch, uint64_t *ret_world_id,
                        wf_mesh_degrees_t *ret_mesh, uint64_t *ret_mesh_epoch)
{
    bool have = c->state != CS_COORD_LOST &&
                (c->role == WF_CLUSTER_COORDINATOR ? c->round_open || c->had_world
                                                   : c->n_nodes > 0);
    *ret_n = have ? world_nodes(c, ret, max) : 0;
    *ret_epoch = c->epoch;
    /* the world id as a number: its first 16 hex digits */
    uint64_t id = 0;
    for (int i = 0; i < 16 && c->world_id[i]; i++) {
        char h = c->world_id[i];
        id = id << 4 | (uint64_t)(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    *ret_world_id = id ? id : 1;
    *ret_mesh = c->mesh_req;
    *ret_mesh_epoch = c->mesh_epoch;
}

void wf_cluster_world_ready(wf_cluster_t *c, uint64_t epoch)
{
    if (epoch != c->epoch || c->self_ready)
        return;
    c->self_ready = true;
    if (c->role == WF_CLUSTER_COORDINATOR) {
        maybe_serve(c);
    } else {
        tx_begin(c, WF_CMSG_READY)->u.epoch = epoch;
        if (tx_put(c))
            send_msg(c, NULL);
        wf_log(c->log, WF_LOG_INFO, "cluster: communicators of epoch %" PRIu64
               " built; ready", epoch);
    }
}

void wf_cluster_world_failed(wf_cluster_t *c, uint64_t epoch, uint64_t seq,
                             wf_status_t st, uint64_t now)
{
    if (c->role == WF_CLUSTER_COORDINATOR) {
        coord_world_failed(c, &c->nodes[0], epoch, seq, st, now);
        return;
    }
    if (epoch != c->epoch || epoch == c->failed_epoch || c->n_nodes == 0 ||
        c->state == CS_COORD_LOST)
        return;
    c->failed_epoch = epoch;
    tx_begin(c, WF_CMSG_ABORTED)->u.result = (wf_cmsg_result_t){ seq, epoch, st };
    if (tx_put(c))
        send_msg(c, NULL);
}

bool wf_cluster_take_abort(wf_cluster_t *c, uint64_t *ret_epoch, char *why,
                           size_t why_len)
{
    if (!c->abort_pending)
        return false;
    c->abort_pending = false;
    *ret_epoch = c->failed_epoch;
    snprintf(why, why_len, "%s", c->abort_why);
    return true;
}

void wf_cluster_job_ok(wf_cluster_t *c)
{
    c->rebuilds = 0;
}

void wf_cluster_set_data(wf_cluster_t *c, const char *data)
{
    snprintf(c->data, sizeof c->data, "%s", data);
    if (c->role == WF_CLUSTER_COORDINATOR) {
        snprintf(c->nodes[0].data, sizeof c->nodes[0].data, "%s", data);
    } else if (c->state != CS_COORD_LOST) {
        wf_cmsg_t *tx = tx_begin(c, WF_CMSG_DATA);
        snprintf(tx->u.text, sizeof tx->u.text, "%s", data);
        if (tx_put(c))
            send_msg(c, NULL);
    }
}

void wf_cluster_set_xfer(wf_cluster_t *c, const char *endpoint)
{
    if (c->role == WF_CLUSTER_COORDINATOR)
        snprintf(c->xfer, sizeof c->xfer, "%s", endpoint ? endpoint : "");
}

const char *wf_cluster_xfer(const wf_cluster_t *c)
{
    return c->xfer;
}

void wf_cluster_on_message(wf_cluster_t *c, wf_cluster_msg_fn fn, void *arg)
{
    c->on_msg = fn;
    c->on_msg_arg = arg;
}

bool wf_cluster_send(wf_cluster_t *c, const char *node, const wf_ctl_msg_t *m)
{
    wf_buf_reset(&c->buf);
    if (wf_ctl_encode(m, &c->buf) != WF_OK)
        return false;
    if (c->role == WF_CLUSTER_COORDINATOR) {
        node_t *n = node ? find_by_name(c, node) : NULL;
        if (!n || !alive(n) || n->state == NODE_SELF)
            return false;
        if (zmq_send(c->sock, n->id, n->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
            return false;
    }
    return zmq_send(c->sock, c->buf.data, c->buf.len, ZMQ_DONTWAIT) >= 0;
}

bool wf_cluster_coordinator_lost(const wf_cluster_t *c)
{
    return c->state == CS_COORD_LOST;
}

void wf_cluster_fill_status(const wf_cluster_t *c, wf_status_info_t *si)
{
    snprintf(si->role, sizeof si->role, "%s",
             c->role == WF_CLUSTER_COORDINATOR ? "coordinator" : "member");
    snprintf(si->coordinator, sizeof si->coordinator, "%s", c->settings->coordinator);
    snprintf(si->cluster_state, sizeof si->cluster_state, "%.23s", cstate_name(c->state));
    si->world_epoch = c->epoch;
    snprintf(si->world_id, sizeof si->world_id, "%s", c->world_id);
    uint32_t k = 0, ranks = 0;
    for (uint32_t i = 0; i < c->n_nodes && k < WF_STATUS_MAX_NODES; i++) {
        const node_t *n = &c->nodes[i];
        wf_node_info_t *o = &si->nodes[k++];
        snprintf(o->name, sizeof o->name, "%s", n->name);
        snprintf(o->state, sizeof o->state, "%s", node_state_name(n->state));
        o->first_rank = n->in_world ? n->first_rank : 0;
        o->ranks = n->in_world ? n->devices : 0;
        if (n->in_world)
            ranks += n->devices;
    }
    si->node_count = k;
    si->world_size = ranks;
}
