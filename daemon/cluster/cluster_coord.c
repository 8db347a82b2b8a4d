/* cluster_coord.c — the coordinator's side of the control plane: the
 * node table, hellos and their checks, world rounds (ranks, world ids,
 * readies), heartbeats and silence, node loss and rebuilds after a failed
 * job (see cluster_impl.h). Called by cluster.c; calls cluster_link.c.
 */
#include "cluster_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "base/mesh.h"
#include "errf.h"
#include "proto.h"

/* Put the alive nodes in world order (self first, then by name) and give
 * them ranks; start a round: world to every member, wait for readies. */
void cluster_start_round(wf_cluster_t *c, uint64_t now)
{
    /* epochs are the coordinator's own count, + 1 per round (never taken
     * from a peer); one that would wrap stops the rounds */
    if (c->epoch == UINT64_MAX || c->mesh_epoch == UINT64_MAX) {
        wf_log(c->log, WF_LOG_ERR, "cluster: the world epoch or the mesh epoch "
               "reached 2^64-1; no further round (restart the coordinator)");
        return;
    }
    c->rebuild_round = false;     /* coord_world_failed sets it after */
    c->held = false;
    /* insertion sort of nodes[1..) by name; lost / refused go last */
    for (uint32_t i = 2; i < c->n_nodes; i++) {
        node_t tmp = c->nodes[i];
        uint32_t j = i;
        while (j > 1 && (cluster_node_alive(&tmp) > cluster_node_alive(&c->nodes[j - 1]) ||
                         (cluster_node_alive(&tmp) == cluster_node_alive(&c->nodes[j - 1]) &&
                          strcmp(tmp.name, c->nodes[j - 1].name) < 0))) {
            c->nodes[j] = c->nodes[j - 1];
            j--;
        }
        c->nodes[j] = tmp;
    }
    c->epoch++;
    c->mesh_epoch++;
    c->self_ready = false;
    cluster_new_world_id(c->world_id);
    uint32_t rank = 0, nn = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        node_t *n = &c->nodes[i];
        n->in_world = cluster_node_alive(n);
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
    wf_cmsg_world_t *w = &cluster_tx_begin(c, WF_CMSG_WORLD)->u.world;
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
    cluster_coord_nccl(c, w);
    if (!cluster_tx_put(c))
        return;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].in_world && c->nodes[i].state == NODE_WORLD)
            cluster_send_msg(c, &c->nodes[i]);
}

/* The data plane of the round: NCCL when every node of the world said gpu
 * (comm_nccl_boot.h), with a fresh unique id for this epoch (an id makes
 * one communicator only); else comm_zmq. */
void cluster_coord_nccl(wf_cluster_t *c, wf_cmsg_world_t *w)
{
    bool gpu[WF_SETTINGS_MAX_NODES];
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].in_world)
            gpu[n++] = c->nodes[i].gpu;
    c->have_nccl = false;
    w->ncclid[0] = '\0';
    if (wf_nccl_plane(gpu, n) != WF_PLANE_NCCL) {
        wf_log(c->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 ": data "
               "plane zmq (not every node has a GPU of its own per rank with NCCL on)",
               c->epoch);
        return;
    }
    const wf_nccl_api_t *api = wf_nccl_api();
    wf_status_t st = api->unique_id(api->arg, &c->nccl_id);
    if (st != WF_OK) {
        wf_log(c->log, WF_LOG_WARNING, "cluster: world of epoch %" PRIu64 ": no "
               "NCCL unique id (%s); data plane zmq", c->epoch, wf_status_str(st));
        return;
    }
    _Static_assert(WF_NCCL_ID_BYTES == WF_CMSG_NCCL_ID_BYTES, "NCCL id size");
    wf_cmsg_nccl_id_encode(c->nccl_id.bytes, w->ncclid);
    c->have_nccl = true;
    wf_log(c->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 ": data plane "
           "nccl (%s %d.%d.%d, a fresh unique id in the world message)", c->epoch,
           api->name, api->version(api->arg) / 10000, api->version(api->arg) / 100 % 100,
           api->version(api->arg) % 100);
}

/* Every member of the round is ready: serve (the barrier). */
void cluster_maybe_serve(wf_cluster_t *c)
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
    cluster_tx_begin(c, WF_CMSG_SERVE)->u.epoch = c->epoch;
    if (cluster_tx_put(c))
        for (uint32_t i = 0; i < c->n_nodes; i++)
            if (c->nodes[i].in_world && c->nodes[i].state == NODE_READY)
                cluster_send_msg(c, &c->nodes[i]);
    cluster_status_line(c, "cluster %s: epoch %" PRIu64 ", %u node(s), %u rank(s)",
                cluster_state_name(c->state), c->epoch, nn, ranks);
}

/* How long a lost node's entry is kept: 2 x cluster_timeout_ms after the
 * loss (a node lost during the rendezvous is still named in the step's
 * timeout lines; one that comes back within it reuses its entry). When
 * the table is full a new node takes the oldest lost entry at once. */
static uint64_t lost_expiry_us(const wf_cluster_t *c)
{
    return 2 * (uint64_t)c->settings->cluster_timeout_ms * 1000;
}

static void refuse(wf_cluster_t *c, const void *id, size_t id_len, const char *err)
{
    node_t tmp;
    memset(&tmp, 0, sizeof tmp);
    memcpy(tmp.id, id, id_len);
    tmp.id_len = id_len;
    wf_cmsg_t *tx = cluster_tx_begin(c, WF_CMSG_REFUSE);
    snprintf(tx->u.text, sizeof tx->u.text, "%s", err);
    if (cluster_tx_put(c))
        cluster_send_msg(c, &tmp);
    wf_log(c->log, WF_LOG_ERR, "cluster: refused: %s", err);
}

/* A node is out: a new round without it once the world existed. */
void cluster_lose_node(wf_cluster_t *c, node_t *n, const char *why, uint64_t now)
{
    if (!cluster_node_alive(n) || n->state == NODE_SELF)
        return;
    bool was_in_world = n->in_world;
    c->nodes_lost++;
    n->state = NODE_LOST;
    n->lost_us = now;
    n->in_world = false;
    cluster_status_line(c, "cluster: node %s lost (%s) during %s, epoch %" PRIu64,
                n->name, why, c->round_open ? "the rendezvous step 'ready'"
                : c->had_world ? "service" : "the rendezvous step 'hello'",
                c->epoch);
    if (c->had_world && (was_in_world || c->round_open))
        cluster_start_round(c, now);
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
void cluster_coord_world_failed(wf_cluster_t *c, const node_t *from, uint64_t epoch,
                               uint64_t seq, wf_status_t st, uint64_t now)
{
    if (epoch != c->epoch || epoch == c->failed_epoch || !from->in_world ||
        !(c->had_world || c->round_open))
        return;     /* an older world's, or already handled */
    c->failed_epoch = epoch;
    c->abort_pending = true;
    describe_failure(c->abort_why, sizeof c->abort_why, from->name, seq, st);
    wf_cmsg_abort_t *ab = &cluster_tx_begin(c, WF_CMSG_ABORT)->u.abort;
    ab->epoch = epoch;
    snprintf(ab->why, sizeof ab->why, "%s", c->abort_why);
    bool put = cluster_tx_put(c);
    uint32_t nn = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        node_t *n = &c->nodes[i];
        if (!n->in_world)
            continue;
        nn++;
        if (put && n->state != NODE_SELF && cluster_node_alive(n))
            cluster_send_msg(c, n);
    }
    if (c->rebuilds < WF_CLUSTER_MAX_REBUILDS) {
        c->rebuilds++;
        cluster_status_line(c, "cluster: comm world of epoch %" PRIu64 " aborted (%s); "
                    "rebuilding it with the same %u node(s), rebuild %u of at "
                    "most %d in a row", epoch, c->abort_why, nn, c->rebuilds,
                    WF_CLUSTER_MAX_REBUILDS);
        cluster_start_round(c, now);
        c->rebuild_round = true;
        return;
    }
    c->held = true;
    c->round_open = false;
    c->state = CS_DEGRADED;
    c->step_deadline_us = now + (uint64_t)c->settings->cluster_timeout_ms * 1000;
    cluster_status_line(c, "cluster degraded: comm world of epoch %" PRIu64 " aborted "
                "(%s) after %u rebuilds in a row without a job succeeding; "
                "next rebuild in %u ms, jobs refused until then", epoch,
                c->abort_why, c->rebuilds, c->settings->cluster_timeout_ms);
}

static void coord_hello(wf_cluster_t *c, const void *id, size_t id_len, uint64_t now)
{
    char err[WF_PROTO_ERROR_MAX], bad[WF_PROTO_ERROR_MAX], q[48];
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
                 "from the coordinator's %s", who,
                 h->weft[0] ? wf_escape(q, sizeof q, h->weft, strlen(h->weft), WF_ESC_ASCII)
                            : "(missing)",
                 WEFT_VERSION);
        goto refused;
    }
    /* NCCL versions matter between nodes that may form an NCCL world
     * together (both "gpu"): a node without GPUs per rank, or a CPU build
     * ("none"), joins a mixed world on comm_zmq whatever its NCCL */
    if (h->gpu && c->self_gpu && strcmp(h->nccl, c->nccl_version) != 0) {
        snprintf(err, sizeof err, "node %.63s: field 'NCCL version': %.40s differs "
                 "from the coordinator's %s", who,
                 h->nccl[0] ? wf_escape(q, sizeof q, h->nccl, strlen(h->nccl), WF_ESC_ASCII)
                            : "(missing)",
                 c->nccl_version);
        goto refused;
    }
    if (!name[0]) {
        /* missing, too long, or not a name of [A-Za-z0-9._-] (the decoder
         * keeps no part of such a name: it would reach logs and STATUS=) */
        snprintf(err, sizeof err, "node %.63s: field 'node name': missing, too "
                 "long or not of [A-Za-z0-9._-]%s%.100s", who,
                 valid != WF_OK ? ": " : "", valid != WF_OK ? bad : "");
        goto refused;
    }
    if (valid != WF_OK) {
        /* devices out of range, data or epoch missing, ... */
        snprintf(err, sizeof err, "node %.63s: %.180s", name, bad);
        goto refused;
    }
    uint64_t devices = h->devices;
    const char *data = h->data;
    if (devices != cluster_local_devices(c)) {
        /* each node is whole replicas of the world mesh */
        snprintf(err, sizeof err, "node %.63s: field 'devices': %" PRIu64 " differs "
                 "from the coordinator's %u (every node brings the same devices)",
                 name, devices, cluster_local_devices(c));
        goto refused;
    }
    if (strcmp(name, c->nodes[0].name) == 0) {
        snprintf(err, sizeof err, "node %.63s: field 'node name': taken by the "
                 "coordinator", name);
        goto refused;
    }
    if (c->keys && strcmp(name, c->peer_user) != 0) {
        /* the name is bound to the key: ZAP admitted this connection as
         * node peer_user (its key's entry in node_keys) */
        snprintf(err, sizeof err, "node %.63s: field 'node name': the connection's "
                 "key is node %.63s's in node_keys", name,
                 c->peer_user[0] ? c->peer_user : "(none)");
        goto refused;
    }
    /* h->epoch (the last world epoch the member knew) is not used: epochs
     * are the coordinator's own */

    node_t *n = cluster_find_by_name(c, name);
    bool same_conn = n && n->id_len == id_len && memcmp(n->id, id, id_len) == 0;
    if (n && cluster_node_alive(n) && same_conn) {
        n->last_heard_us = now;
        if (n->in_world && (n->state == NODE_READY || n->state == NODE_WORLD) &&
            !c->round_open) {
            /* a repeated hello of a node already in the world: a new round
             * brings it back in step */
            cluster_start_round(c, now);
        }
        return;
    }
    if (n && cluster_node_alive(n) && !c->keys) {
        /* Another connection claims the name of a node that is alive:
         * without keys nothing says which one is the node, so the one in
         * the table keeps it until it is lost (silent for
         * heartbeat_timeout_ms; a restarted node then gets in with its
         * next hello, which it repeats). Logged once per timeout. */
        uint64_t tmo = (uint64_t)c->settings->heartbeat_timeout_ms * 1000;
        if (!n->contended_us || now - n->contended_us >= tmo) {
            n->contended_us = now;
            wf_log(c->log, WF_LOG_WARNING, "cluster: hello for node %s from "
                   "another connection ignored: that node is alive (heard %"
                   PRIu64 " ms ago); it is accepted once the node is lost",
                   name, (now - n->last_heard_us) / 1000);
        }
        return;
    }
    if (!n) {
        if (c->n_nodes == WF_SETTINGS_MAX_NODES) {
            /* the oldest entry of a node lost gives way */
            uint32_t old = 0;
            for (uint32_t i = 1; i < c->n_nodes; i++)
                if (!cluster_node_alive(&c->nodes[i]) && !c->nodes[i].in_world &&
                    (!old || c->nodes[i].lost_us < c->nodes[old].lost_us))
                    old = i;
            if (old)
                cluster_remove_node(c, old);
        }
        if (c->n_nodes == WF_SETTINGS_MAX_NODES) {
            snprintf(err, sizeof err, "node %.63s: the cluster already has %d "
                     "nodes", name, WF_SETTINGS_MAX_NODES);
            goto refused;
        }
        n = &c->nodes[c->n_nodes++];
        memset(n, 0, sizeof *n);
        snprintf(n->name, sizeof n->name, "%s", name);
    } else if (cluster_node_alive(n)) {
        /* keys: the same key from a new connection is the node itself */
        wf_log(c->log, WF_LOG_WARNING, "cluster: node %s said hello again from a "
               "new connection (restarted?)", name);
    }
    memcpy(n->id, id, id_len);
    n->id_len = id_len;
    n->devices = (uint32_t)devices;
    n->gpu = h->gpu;
    n->fp8 = h->fp8;
    snprintf(n->data, sizeof n->data, "%s", data);
    n->state = NODE_JOINING;
    n->in_world = false;
    n->last_heard_us = now;
    n->contended_us = 0;
    uint32_t have = cluster_count_alive(c);
    wf_log(c->log, WF_LOG_INFO, "cluster: node %s joined (%" PRIu64 " devices); "
           "%u of %u node(s)", name, devices, have, c->settings->nodes);
    if (c->had_world || have >= c->settings->nodes)
        cluster_start_round(c, now);
    return;

refused:
    /* a refused hello never takes nor touches an entry of the node table
     * (it may come from an impostor of a name, and 16 of them would fill
     * the table) */
    refuse(c, id, id_len, err);
}

void cluster_coord_message(wf_cluster_t *c, const void *id, size_t id_len,
                          uint64_t now)
{
    wf_cmsg_type_t type = wf_cmsg_type(&c->in);
    if (type == WF_CMSG_HELLO) {
        coord_hello(c, id, id_len, now);
        return;
    }
    node_t *n = cluster_find_by_id(c, id, id_len);
    if (!n || !cluster_node_alive(n)) {
        /* not (or no longer) known here: e.g. this coordinator restarted */
        node_t tmp;
        memset(&tmp, 0, sizeof tmp);
        memcpy(tmp.id, id, id_len);
        tmp.id_len = id_len;
        cluster_tx_begin(c, WF_CMSG_REJOIN);
        if (cluster_tx_put(c))
            cluster_send_msg(c, &tmp);
        return;
    }
    if (c->keys && strcmp(n->name, c->peer_user) != 0) {
        /* a connection that took a node's routing id: not that node */
        wf_log(c->log, WF_LOG_WARNING, "cluster: %s message on node %s's "
               "connection from node %s's key dropped", wf_cmsg_type_name(type),
               n->name, c->peer_user[0] ? c->peer_user : "(none)");
        return;
    }
    n->last_heard_us = now;
    const wf_cmsg_t *rx = &c->rx;
    switch (type) {
    case WF_CMSG_PING:
        if (!cluster_rx_get(c, n->name))
            break;
        cluster_tx_begin(c, WF_CMSG_PONG)->u.epoch = c->epoch;
        if (cluster_tx_put(c))
            cluster_send_msg(c, n);
        break;
    case WF_CMSG_READY:
        if (cluster_rx_get(c, n->name) && rx->u.epoch == c->epoch && n->state == NODE_WORLD &&
            c->round_open) {
            n->state = NODE_READY;
            cluster_maybe_serve(c);
        }
        break;
    case WF_CMSG_DATA:
        if (cluster_rx_get(c, n->name))
            snprintf(n->data, sizeof n->data, "%s", rx->u.text);
        break;
    case WF_CMSG_ABORTED:
        if (cluster_rx_get(c, n->name))
            cluster_coord_world_failed(c, n, rx->u.result.epoch, rx->u.result.seq,
                               rx->u.result.st, now);
        break;
    default:
        /* job traffic ("done"), or a type this build does not know */
        if (c->on_msg)
            c->on_msg(c->on_msg_arg, n->name, &c->in);
        break;
    }
}

void cluster_coord_timers(wf_cluster_t *c, uint64_t now)
{
    uint64_t limit = (uint64_t)c->settings->heartbeat_timeout_ms * 1000;
    for (uint32_t i = 1; i < c->n_nodes; i++) {
        node_t *n = &c->nodes[i];
        if (cluster_node_alive(n) && now - n->last_heard_us > limit) {
            char why[96];
            snprintf(why, sizeof why, "silent for %" PRIu64 " ms",
                     (now - n->last_heard_us) / 1000);
            cluster_lose_node(c, n, why, now);
        }
    }
    /* A lost node's entry stays for lost_expiry_us (status shows it as
     * lost), then is forgotten: nodes that said hello and died, or never
     * completed the rendezvous, do not fill the table for good. */
    uint64_t keep = lost_expiry_us(c);
    for (uint32_t i = c->n_nodes; i-- > 1; ) {
        const node_t *n = &c->nodes[i];
        if (n->state == NODE_LOST && !n->in_world && now - n->lost_us > keep)
            cluster_remove_node(c, i);
    }
    if (now < c->step_deadline_us)
        return;
    uint64_t tmo = (uint64_t)c->settings->cluster_timeout_ms;
    char names[512];
    if (c->held) {
        cluster_status_line(c, "cluster: rebuilding the comm world of epoch %" PRIu64
                    " after holding it back %" PRIu64 " ms", c->epoch, tmo);
        cluster_start_round(c, now);
        c->rebuild_round = true;
        return;
    }
    if (c->round_open) {
        cluster_names_in(c, NODE_WORLD, names, sizeof names);
        cluster_status_line(c, "cluster: rendezvous step 'ready' of epoch %" PRIu64
                    " timed out after %" PRIu64 " ms: no answer from node(s) %s",
                    c->epoch, tmo, names);
        for (uint32_t i = 1; i < c->n_nodes; i++)
            if (c->nodes[i].state == NODE_WORLD) {
                c->nodes_lost++;
                c->nodes[i].state = NODE_LOST;
                c->nodes[i].lost_us = now;
                c->nodes[i].in_world = false;
            }
        cluster_start_round(c, now);
        return;
    }
    if (!c->had_world) {
        char lost[256];
        cluster_names_in(c, NODE_LOST, lost, sizeof lost);
        uint32_t have = cluster_count_alive(c);
        cluster_status_line(c, "cluster: rendezvous step 'hello' timed out after %" PRIu64
                    " ms: %u of %u node(s) missing%s%s; still waiting",
                    tmo, c->settings->nodes - have, c->settings->nodes,
                    lost[0] ? ", lost: " : "", lost);
    }
    c->step_deadline_us = now + tmo * 1000;
}
