/* cluster.c — rendezvous, heartbeats, node loss and rejoin between weftd
 * daemons (see cluster.h). The protocol messages are documented in
 * proto/PROTOCOL.md section 11; they are written and read as the typed
 * structs of proto/cluster_msg.h (which alone spells their keys), and
 * every received one is validated there before it is used.
 */
#include "cluster.h"
#include "cluster_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "base/mesh.h"
#include "cluster_msg.h"
#include "net/gate.h"
#include "proto.h"

/* The message bounds of proto/ are the daemon's own. */
_Static_assert(WF_CMSG_MAX_NODES == WF_SETTINGS_MAX_NODES, "nodes bound");
_Static_assert(WF_CMSG_NAME_MAX == WF_SETTINGS_NAME_MAX, "node name bound");
_Static_assert(WF_CMSG_MAX_DEVICES == WF_SETTINGS_MAX_DEVICES, "devices bound");
_Static_assert(WF_CMSG_MESH_MAX == WF_MESH_MAX_WORLD, "mesh degree bound");
_Static_assert(WF_SETTINGS_ENDPOINT_MAX == WF_CTL_STR_MAX, "endpoint bound");

/* ------------------------------------------------------------------ */
/* the NCCL data plane (comm_nccl_boot.h) */

/* Our NCCL version as hellos carry it ("none": not built; nodes must
 * agree) and whether this node may be in an NCCL world. */
static void cluster_nccl_self(wf_cluster_t *c)
{
    const wf_nccl_api_t *api = wf_nccl_api();
    int v = api->version(api->arg);
    if (v > 0)
        snprintf(c->nccl_version, sizeof c->nccl_version, "%d.%d.%d", v / 10000,
                 v / 100 % 100, v % 100);
    else
        snprintf(c->nccl_version, sizeof c->nccl_version, "%s", NCCL_VERSION_NONE);
    c->self_gpu = wf_nccl_api_node_gpu(api, c->settings);
}

/* Member: the data plane of the world just received (its "ncclid",
 * validated by wf_cmsg_get). */
static void member_world_nccl(wf_cluster_t *c, const wf_cmsg_world_t *w)
{
    c->have_nccl = w->ncclid[0] &&
                   wf_cmsg_nccl_id_decode(w->ncclid, c->nccl_id.bytes);
    if (c->have_nccl && !c->self_gpu)
        wf_log(c->log, WF_LOG_WARNING, "cluster: world of epoch %" PRIu64 " is "
               "NCCL's but this node has no GPU per rank with NCCL: its ranks "
               "cannot join", w->epoch);
}

bool wf_cluster_nccl_id(const wf_cluster_t *c, wf_nccl_id_t *ret_id)
{
    if (!c->have_nccl)
        return false;
    *ret_id = c->nccl_id;
    return true;
}

/* ------------------------------------------------------------------ */
/* member (the coordinator's side is cluster_coord.c) */

static void member_hello(wf_cluster_t *c)
{
    wf_cmsg_hello_t *h = &cluster_tx_begin(c, WF_CMSG_HELLO)->u.hello;
    h->proto = c->protocol;
    snprintf(h->weft, sizeof h->weft, "%s", WEFT_VERSION);
    snprintf(h->nccl, sizeof h->nccl, "%s", c->nccl_version);
    h->gpu = c->self_gpu;
    h->fp8 = c->self_fp8;
    snprintf(h->name, sizeof h->name, "%s", c->name);
    h->devices = cluster_local_devices(c);
    snprintf(h->data, sizeof h->data, "%s", c->data);
    h->epoch = c->epoch;
    if (cluster_tx_put(c))
        cluster_send_msg(c, NULL);
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
            found = in->ranks == cluster_local_devices(c);
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
    member_world_nccl(c, w);
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
        if (cluster_rx_get(c, from) && rx->u.epoch == c->epoch && c->n_nodes > 0) {
            for (uint32_t i = 0; i < c->n_nodes; i++)
                c->nodes[i].state = NODE_READY;
            c->had_world = true;
            c->state = c->n_nodes >= c->settings->nodes ? CS_SERVING : CS_DEGRADED;
            uint32_t ranks = c->nodes[c->n_nodes - 1].first_rank +
                             c->nodes[c->n_nodes - 1].devices;
            cluster_status_line(c, "cluster %s: epoch %" PRIu64 ", %u node(s), %u rank(s)",
                        cluster_state_name(c->state), c->epoch, c->n_nodes, ranks);
        }
        break;
    case WF_CMSG_ABORT:
        if (cluster_rx_get(c, from) && rx->u.abort.epoch == c->epoch && c->n_nodes > 0) {
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
        if (cluster_rx_get(c, from)) {
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
        cluster_status_line(c, "cluster: coordinator %s answers again; rejoining",
                    c->settings->coordinator);
    }
}

static void member_timers(wf_cluster_t *c, uint64_t now)
{
    uint64_t limit = (uint64_t)c->settings->heartbeat_timeout_ms * 1000;
    if (c->state != CS_COORD_LOST && now - c->coord_heard_us > limit) {
        c->state = CS_COORD_LOST;
        c->n_nodes = 0;
        cluster_status_line(c, "cluster: coordinator %s lost (silent for %" PRIu64 " ms); "
                    "waiting for it", c->settings->coordinator,
                    (now - c->coord_heard_us) / 1000);
    }
    if (c->state == CS_COORD_LOST || (!c->had_world && c->n_nodes == 0))
        member_hello(c);   /* until a coordinator answers with a world */
    if (now >= c->step_deadline_us) {
        if (c->state == CS_FORMING)
            cluster_status_line(c, "cluster: rendezvous step 'world' timed out after %u ms: "
                        "no world from the coordinator %s yet; still waiting",
                        c->settings->cluster_timeout_ms, c->settings->coordinator);
        c->step_deadline_us = now + (uint64_t)c->settings->cluster_timeout_ms * 1000;
    }
}

/* ------------------------------------------------------------------ */

/* The rendezvous' listener: frames and messages of one control message
 * (a member sends nothing else), ZMTP heartbeats as a member's own. */
static const wf_gate_names_t rendezvous_names = {
    .frame_bytes = "a control message (64 KiB + 1 KiB)",
    .max_frames = "one frame",
    .message_bytes = "a control message (64 KiB + 1 KiB)",
    .max_connections = "the rendezvous' 1024 connections",
    .max_handshakes = "client_max_handshakes",
    .handshake_ms = "client_handshake_ms",
};

/* Coordinator: the ROUTER on inproc and the gate listening on ep in front
 * of it. WF_E_CONNECT (errno EADDRINUSE) when ep is taken: another node
 * coordinates. */
static wf_status_t rendezvous_listen(wf_cluster_t *c, void *zctx, const char *ep)
{
    char bound[WF_SETTINGS_NAME_MAX + 16], why[160];
    uint64_t max = WF_CTL_MAX_BYTES + 1024;
    wf_gate_cfg_t gc = {
        .zctx = zctx,
        .limits = {
            .frame_bytes = max,
            .max_frames = 1,
            .message_bytes = max,
            .max_connections = 1024,
            .max_handshakes = c->settings->client_max_handshakes,
            .handshake_ms = c->settings->client_handshake_ms,
        },
        .log = c->log,
        .plane = "rendezvous",
        .names = &rendezvous_names,
        .heartbeat_ms = c->settings->heartbeat_ms,
        .heartbeat_timeout_ms = c->settings->heartbeat_timeout_ms,
    };
    wf_gate_node_plane(&gc, c->keys ? &c->keys->self : NULL);
    if (wf_gate_front(c->sock, ep, &gc, bound, sizeof bound, why, sizeof why,
                      &c->gate) == WF_OK)
        return WF_OK;
    return errno == EADDRINUSE ? WF_E_CONNECT : WF_E_INTERNAL;
}

/* A member's DEALER to the rendezvous: bounded frames from its
 * coordinator and libzmq's heartbeats (the coordinator's side is the
 * gate's). */
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

void wf_cluster_self_name(const wf_settings_t *settings,
                          char out[WF_SETTINGS_NAME_MAX])
{
    snprintf(out, WF_SETTINGS_NAME_MAX, "%s", settings->node_name);
    if (out[0])
        return;
    /* the hostname, cut at the first character a name may not hold */
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    size_t n = 0;
    while (n + 1 < WF_SETTINGS_NAME_MAX && (isalnum((unsigned char)host[n]) ||
                                            host[n] == '.' || host[n] == '_' ||
                                            host[n] == '-'))
        n++;
    memcpy(out, host, n);
    out[n] = '\0';
    if (n == 0)
        snprintf(out, WF_SETTINGS_NAME_MAX, "node");
}

/* Without node_keys a cluster has no way to tell its nodes from any other
 * process that reaches its sockets: on loopback that is every local user
 * (the rendezvous, the tensor channel and the comm_zmq ports are tcp://),
 * who would join the world, be given ranks and receive tenants' tensors.
 * So a cluster needs node_keys, on loopback too, unless allow_anonymous
 * says everyone who can reach those ports is trusted. */
static wf_status_t check_anonymous(const wf_settings_t *s, wf_log_t *log)
{
    if (s->allow_anonymous) {
        wf_log(log, WF_LOG_WARNING, "cluster: no node_keys and allow_anonymous "
               "set: any process that reaches the rendezvous, the tensor channel "
               "or the comm endpoints (on loopback: any local user) may join the "
               "world and read its tensors");
        return WF_OK;
    }
    wf_log(log, WF_LOG_ERR, "cluster: refusing to start without node_keys "
           "(coordinator %s): any process that reaches it, on loopback any local "
           "user, could join the world and read its tensors (set node_keys, "
           "key_file and coordinator_node, or allow_anonymous = true where every "
           "such process is trusted)", s->coordinator);
    return WF_E_BAD_ARGUMENT;
}

wf_status_t wf_cluster_keys_load(const wf_settings_t *s, const wf_keypair_t *self,
                                 wf_zap_t *zap, wf_log_t *log,
                                 wf_cluster_keys_t **ret)
{
    *ret = NULL;
    if (!s->node_keys[0])
        return check_anonymous(s, log);
    char name[WF_SETTINGS_NAME_MAX], err[512];
    wf_cluster_self_name(s, name);
    if (!self) {
        wf_log(log, WF_LOG_ERR, "cluster: node_keys is set but key_file is not: "
               "this node needs its own key pair (weftctl keygen)");
        return WF_E_BAD_ARGUMENT;
    }
    if (!s->coordinator_node[0]) {
        wf_log(log, WF_LOG_ERR, "cluster: node_keys is set but coordinator_node "
               "is not: name the node that coordinates");
        return WF_E_BAD_ARGUMENT;
    }
    wf_cluster_keys_t *k = calloc(1, sizeof *k);
    if (!k) {
        wf_log(log, WF_LOG_ERR, "cluster: out of memory");
        return WF_E_NO_MEMORY;
    }
    const char *pub;
    k->self = *self;            /* read once, by the server (key_file) */
    if (wf_keylist_read(s->node_keys, WF_KEYLIST_NODES, &k->nodes, &k->n, err,
                        sizeof err) != WF_OK) {
        wf_log(log, WF_LOG_ERR, "cluster: node_keys: %s", err);
        goto bad;
    }
    pub = wf_cluster_key_of(k, name);
    if (!pub) {
        wf_log(log, WF_LOG_ERR, "cluster: this node (%s) is not listed in "
               "node_keys %s", name, s->node_keys);
        goto bad;
    }
    if (strcmp(pub, k->self.public_key) != 0) {
        wf_log(log, WF_LOG_ERR, "cluster: node_keys %s lists another key for "
               "this node (%s) than key_file %s holds", s->node_keys, name,
               s->key_file);
        goto bad;
    }
    pub = wf_cluster_key_of(k, s->coordinator_node);
    if (!pub) {
        wf_log(log, WF_LOG_ERR, "cluster: coordinator_node %s is not listed in "
               "node_keys %s", s->coordinator_node, s->node_keys);
        goto bad;
    }
    snprintf(k->coord_key, sizeof k->coord_key, "%s", pub);
    if (!zap || wf_zap_set(zap, WF_ZAP_NODES, k->nodes, k->n) != WF_OK) {
        wf_log(log, WF_LOG_ERR, "cluster: cannot give node_keys to the ZAP handler");
        goto bad;
    }
    wf_log(log, WF_LOG_INFO, "cluster: CURVE on every daemon-to-daemon socket: "
           "%zu node key(s) from %s, coordinator %s", k->n, s->node_keys,
           s->coordinator_node);
    *ret = k;
    return WF_OK;
bad:
    wf_cluster_keys_free(&k);
    return WF_E_BAD_ARGUMENT;
}

void wf_cluster_keys_free(wf_cluster_keys_t **pk)
{
    if (!pk || !*pk)
        return;
    wf_cluster_keys_t *k = *pk;
    free(k->nodes);
    /* the secret does not stay in freed memory */
    volatile char *p = (volatile char *)k->self.secret_key;
    for (size_t i = 0; i < sizeof k->self.secret_key; i++)
        p[i] = 0;
    free(k);
    *pk = NULL;
}

const char *wf_cluster_key_of(const wf_cluster_keys_t *k, const char *name)
{
    const wf_key_entry_t *e = k ? wf_keylist_find_name(k->nodes, k->n, name) : NULL;
    return e ? e->key : NULL;
}

wf_status_t wf_cluster_new(const wf_settings_t *settings, void *zctx,
                           const char *data_endpoint,
                           const wf_cluster_keys_t *keys, bool fp8,
                           wf_log_t *log, wf_notify_t *notify,
                           wf_cluster_t **ret)
{
    wf_cluster_t *c = calloc(1, sizeof *c);
    if (!c) {
        wf_log(log, WF_LOG_ERR, "cluster: out of memory");
        return WF_E_INTERNAL;
    }
    c->settings = settings;
    c->keys = keys;
    c->mesh_req = settings->mesh_deg;
    c->log = log;
    c->notify = notify;
    c->protocol = WF_PROTOCOL_VERSION;
    wf_cluster_self_name(settings, c->name);
    snprintf(c->data, sizeof c->data, "%s", data_endpoint ? data_endpoint : "");
    cluster_nccl_self(c);
    c->self_fp8 = fp8;
    if (settings->test.protocol_version) {
        /* test hook: advertise another protocol version in the hello, to
         * test the coordinator's refusal (tests/cluster/test_cluster.c) */
        c->protocol = settings->test.protocol_version;
        wf_log(log, WF_LOG_WARNING, "cluster: advertising protocol version %u "
               "(WEFT_TEST_PROTOCOL_VERSION, test only)", c->protocol);
    }
    char ep[WF_SETTINGS_NAME_MAX + 8];
    snprintf(ep, sizeof ep, "tcp://%s", settings->coordinator);
    uint64_t now = wf_now_usec();
    /* with keys the coordinator is who the settings say, not who binds
     * first: a squatter on the port makes the coordinator fail to start,
     * and gets no handshake from the members (they pin the key) */
    bool coord = keys ? strcmp(c->name, settings->coordinator_node) == 0 : true;
    int one = 1;

    c->sock = NULL;
    if (coord) {
        c->sock = zmq_socket(zctx, ZMQ_ROUTER);
        if (!c->sock)
            goto zfail;
        /* inproc only: frame bounds and heartbeats are the gate's */
        int zero = 0;
        zmq_setsockopt(c->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
    }
    wf_status_t bound = coord ? rendezvous_listen(c, zctx, ep) : WF_E_CONNECT;
    int bind_errno = errno;
    if (coord && bound == WF_OK) {
        c->role = WF_CLUSTER_COORDINATOR;
        node_t *self = &c->nodes[0];
        snprintf(self->name, sizeof self->name, "%s", c->name);
        self->devices = settings->device_count;
        self->gpu = c->self_gpu;
        self->fp8 = c->self_fp8;
        self->state = NODE_SELF;
        snprintf(self->data, sizeof self->data, "%s", c->data);
        c->n_nodes = 1;
        c->step_deadline_us = now + (uint64_t)settings->cluster_timeout_ms * 1000;
        wf_log(log, WF_LOG_INFO, "cluster: coordinator on %s as node %s, waiting "
               "for %u node(s)%s", ep, self->name, settings->nodes,
               keys ? " (CURVE, node_keys)" : "");
        if (settings->nodes <= 1)
            cluster_start_round(c, now);
        cluster_maybe_serve(c);
    } else if (coord && keys) {
        wf_log(log, WF_LOG_ERR, "cluster: this node (%s) is coordinator_node but "
               "cannot bind the rendezvous port %s: %s%s", c->name, ep,
               strerror(bind_errno), bound == WF_E_CONNECT
               ? " (another process holds it: a stale weftd, or a squatter)" : "");
        wf_cluster_destroy(&c);
        return WF_E_INTERNAL;
    } else if (!coord || bound == WF_E_CONNECT) {
        if (c->sock)
            zmq_close(c->sock);
        c->sock = zmq_socket(zctx, ZMQ_DEALER);
        if (!c->sock)
            goto zfail;
        set_sock_opts(c->sock, settings);
        /* Do not queue hellos for a coordinator that is not there: they
         * are re-sent every heartbeat until one answers. */
        zmq_setsockopt(c->sock, ZMQ_IMMEDIATE, &one, sizeof one);
        if (keys && wf_curve_client(c->sock, &keys->self, keys->coord_key) != WF_OK)
            goto zfail;
        if (zmq_connect(c->sock, ep) != 0)
            goto zfail;
        c->role = WF_CLUSTER_MEMBER;
        c->coord_heard_us = now;
        c->next_hello_us = now + HELLO_RETRY_US;
        c->step_deadline_us = now + (uint64_t)settings->cluster_timeout_ms * 1000;
        wf_log(log, WF_LOG_INFO, "cluster: member %s of the coordinator %s%s",
               c->name, ep, keys ? " (CURVE, pinned to coordinator_node's key)" : "");
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
    wf_gate_stop(&c->gate);     /* before the ROUTER its DEALERs reach */
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
    if (cluster_joining(c) && c->next_hello_us < next)
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
        if (c->role == WF_CLUSTER_COORDINATOR) {
            /* the gate's frame: who sent it (the node ZAP admitted its key
             * as, with node_keys); then the peer's one frame */
            wf_gate_meta_t meta;
            bool gated = rc >= 0 && more &&
                         wf_gate_meta_read(zmq_msg_data(&m), zmq_msg_size(&m), &meta);
            snprintf(c->peer_user, sizeof c->peer_user, "%s",
                     gated && meta.curve ? meta.key_name : "");
            if (!gated)
                id_len = -1;    /* cannot happen: drain, ignore */
            if (rc >= 0 && more) {
                zmq_msg_close(&m);
                zmq_msg_init(&m);
                rc = zmq_msg_recv(&m, c->sock, 0);
                more = rc >= 0 && zmq_msg_more(&m);
            }
        }
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
            cluster_coord_message(c, id, (size_t)id_len, now);
        else
            member_message(c, now);
    }
    if (cluster_joining(c) && now >= c->next_hello_us) {
        member_hello(c);
        c->next_hello_us = now + HELLO_RETRY_US;
    }
    if (now >= c->next_ping_us) {
        if (c->role == WF_CLUSTER_MEMBER && c->state != CS_COORD_LOST) {
            cluster_tx_begin(c, WF_CMSG_PING)->u.epoch = c->epoch;
            if (cluster_tx_put(c))
                cluster_send_msg(c, NULL);
        }
        c->next_ping_us = now + (uint64_t)c->settings->heartbeat_ms * 1000;
        if (c->role == WF_CLUSTER_COORDINATOR)
            cluster_coord_timers(c, now);
        else
            member_timers(c, now);
    } else if (now >= c->step_deadline_us) {
        if (c->role == WF_CLUSTER_COORDINATOR)
            cluster_coord_timers(c, now);
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
        o->fp8 = n->fp8;
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
    uint32_t have = cluster_count_alive(c);
    snprintf(buf, len, "the cluster world is %s (epoch %" PRIu64 ", %u of %u "
             "node(s) present); retry later", cluster_state_name(c->state), c->epoch,
             have, c->settings->nodes);
}

void wf_cluster_node_lost(wf_cluster_t *c, const char *name, const char *why,
                          uint64_t now)
{
    if (c->role != WF_CLUSTER_COORDINATOR)
        return;
    node_t *n = cluster_find_by_name(c, name);
    if (n)
        cluster_lose_node(c, n, why, now);
}

void wf_cluster_broadcast_mesh(wf_cluster_t *c, const wf_mesh_degrees_t *deg,
                               uint64_t mesh_epoch)
{
    if (c->role != WF_CLUSTER_COORDINATOR)
        return;
    c->mesh_req = *deg;
    c->mesh_epoch = mesh_epoch;
    cluster_tx_begin(c, WF_CMSG_MESH)->u.mesh = (wf_cmsg_mesh_t){
        mesh_epoch, deg->dp, deg->ring, deg->ulysses, deg->tp };
    if (!cluster_tx_put(c))
        return;
    for (uint32_t i = 1; i < c->n_nodes; i++)
        if (c->nodes[i].in_world && cluster_node_alive(&c->nodes[i]))
            cluster_send_msg(c, &c->nodes[i]);
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
        cluster_maybe_serve(c);
    } else {
        cluster_tx_begin(c, WF_CMSG_READY)->u.epoch = epoch;
        if (cluster_tx_put(c))
            cluster_send_msg(c, NULL);
        wf_log(c->log, WF_LOG_INFO, "cluster: communicators of epoch %" PRIu64
               " built; ready", epoch);
    }
}

void wf_cluster_world_failed(wf_cluster_t *c, uint64_t epoch, uint64_t seq,
                             wf_status_t st, uint64_t now)
{
    if (c->role == WF_CLUSTER_COORDINATOR) {
        cluster_coord_world_failed(c, &c->nodes[0], epoch, seq, st, now);
        return;
    }
    if (epoch != c->epoch || epoch == c->failed_epoch || c->n_nodes == 0 ||
        c->state == CS_COORD_LOST)
        return;
    c->failed_epoch = epoch;
    cluster_tx_begin(c, WF_CMSG_ABORTED)->u.result = (wf_cmsg_result_t){ seq, epoch, st };
    if (cluster_tx_put(c))
        cluster_send_msg(c, NULL);
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
        wf_cmsg_t *tx = cluster_tx_begin(c, WF_CMSG_DATA);
        snprintf(tx->u.text, sizeof tx->u.text, "%s", data);
        if (cluster_tx_put(c))
            cluster_send_msg(c, NULL);
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
        node_t *n = node ? cluster_find_by_name(c, node) : NULL;
        if (!n || !cluster_node_alive(n) || n->state == NODE_SELF)
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

uint64_t wf_cluster_nodes_lost(const wf_cluster_t *c)
{
    return c->nodes_lost;
}

void wf_cluster_fill_status(const wf_cluster_t *c, wf_status_info_t *si)
{
    snprintf(si->role, sizeof si->role, "%s",
             c->role == WF_CLUSTER_COORDINATOR ? "coordinator" : "member");
    snprintf(si->coordinator, sizeof si->coordinator, "%s", c->settings->coordinator);
    snprintf(si->cluster_state, sizeof si->cluster_state, "%.23s", cluster_state_name(c->state));
    si->world_epoch = c->epoch;
    /* the world id is the data plane's routing token: not for clients
     * (si->world_id stays "") */
    uint32_t k = 0, ranks = 0;
    for (uint32_t i = 0; i < c->n_nodes && k < WF_STATUS_MAX_NODES; i++) {
        const node_t *n = &c->nodes[i];
        wf_node_info_t *o = &si->nodes[k++];
        snprintf(o->name, sizeof o->name, "%s", n->name);
        snprintf(o->state, sizeof o->state, "%s", cluster_node_state_name(n->state));
        o->first_rank = n->in_world ? n->first_rank : 0;
        o->ranks = n->in_world ? n->devices : 0;
        if (n->in_world)
            ranks += n->devices;
    }
    si->node_count = k;
    si->world_size = ranks;
}
