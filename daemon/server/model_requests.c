/* model_requests.c — resident models (models.h): load -> loader thread ->
 * install regroup -> ready; unload -> regroup without it; every regroup
 * re-cuts the shards for the mesh it installs (models_after_regroup, the
 * completion srv_models_follow that every reconfiguration carries). Called by
 * requests.c and server.c; calls reconfigure.c and replies.c
 * (server_impl.h).
 *
 * In a cluster (PROTOCOL.md section 12.7) a load is the coordinator's: it
 * loads the model on every node of the world in three steps, each waiting
 * for every node: open (each node opens the same relative path under its
 * own model_root, checks it and answers the digests of what it found:
 * "mload" -> "mfound"; the coordinator compares them with its own and
 * refuses the load with WF_E_MISMATCH naming the first node that differs),
 * read ("mgo" -> "mread": the weights into each node's host copy), install
 * (the coordinator's regroup, which every member follows: each rank cuts
 * its shard for the world mesh; "mready"). A failure anywhere answers the
 * client once and tells every member to forget the model ("mdrop"); a
 * node that does not answer the open within cluster_timeout_ms, or a world
 * that changes meanwhile (a node lost or joined), fails the load. Members
 * start nothing themselves: their regroups are the coordinator's.
 */
#include "server_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_msg.h"
#include "errf.h"
#include "cluster/model_load.h"
#include "jobs/forward.h"

/* The owed bits are world node indices. */
_Static_assert(WF_MODEL_MAX_NODES == WF_SETTINGS_MAX_NODES, "model nodes bound");
_Static_assert(WF_MODEL_MAX_NODES <= 32, "owed bits");
_Static_assert(sizeof(wf_cmsg_digest_t) == sizeof(wf_model_digest_t), "digests");

static void cm_fail(wf_server_t *srv, wf_model_t *m, wf_status_t st, const char *msg);
static void cm_holders_text(const wf_server_t *srv, const wf_model_t *m, char *buf,
                            size_t len);
static void cm_advance(wf_server_t *srv, wf_model_t *m);
static void cm_flush(wf_server_t *srv);
static void models_try_install(wf_server_t *srv);

/* Model m as list_models and load_model report it: the registry's
 * fields, and where its shards live on this daemon (the backend) and in
 * what dtype (the CPU computes in f32; a GPU holds the checkpoint's
 * dtype and accumulates in f32). */
static void srv_model_info(const wf_server_t *srv, const wf_model_t *m,
                           wf_model_info_t *ret)
{
    wf_model_info_fill(m, ret);
    snprintf(ret->device, sizeof ret->device, "%s", srv->ops->name);
    if (srv->world && m->nodes[0])
        cm_holders_text(srv, m, ret->nodes, sizeof ret->nodes);
    if (m->state == WF_MODEL_LOADING)
        return;
    const char *dt = srv->ops->copy_h2d ? wf_dtype_name(m->dtype) : "f32";
    snprintf(ret->compute, sizeof ret->compute, "%s", dt ? dt : "");
    ret->host_pinned = m->pinned;
}

/* Reply to the client waiting on model m (load or unload), if any. */
static void model_reply(wf_server_t *srv, wf_model_t *m, uint32_t op,
                        wf_status_t st, const char *msg)
{
    if (!m->has_client)
        return;
    srv->reply_version = m->req_version;
    if (st != WF_OK) {
        srv_reply_fail(srv, m->identity, m->delim, m->req_id, op, st, msg);
    } else {
        wf_reply_t *rep = srv_reply_ok(srv, m->req_id, op);
        if (op == WF_OP_LOAD_MODEL) {
            rep->result.models.n = 1;
            srv_model_info(srv, m, &rep->result.models.models[0]);
        }
        srv_reply_send(srv, m->identity, m->delim, rep, NULL);
    }
    zmq_msg_close(m->identity);
    free(m->identity);
    m->identity = NULL;
    m->has_client = false;
}

/* Keep the client's identity in m for the reply at the end. */
static bool model_take_client(wf_model_t *m, zmq_msg_t *identity, bool delim,
                              const wf_request_t *req)
{
    zmq_msg_t *idm = malloc(sizeof *idm);
    if (!idm)
        return false;
    zmq_msg_init(idm);
    zmq_msg_move(idm, identity);
    m->identity = idm;
    m->delim = delim;
    m->req_id = req->id;
    m->req_version = req->version;
    m->has_client = true;
    return true;
}

/* A regroup ended: installing models become ready (or fail), unloading
 * ones go; the shards now resident are what jobs cannot use. */
static void models_after_regroup(wf_server_t *srv, wf_status_t st)
{
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (!m)
            continue;
        if ((m->state == WF_MODEL_INSTALLING || m->state == WF_MODEL_READY) &&
            st == WF_OK) {
            /* its shards are cut for the mesh now in force */
            m->unfit_epoch = 0;
            m->tp = srv->sched.mesh.deg.tp;
            m->rank_bytes = wf_model_rank_bytes(&srv->models, m, (int)m->tp);
        }
        if (m->doomed && (m->state == WF_MODEL_INSTALLING ||
                          m->state == WF_MODEL_READY)) {
            /* refused while this regroup cut it: the next one drops it */
            m->state = WF_MODEL_UNLOADING;
            m->doomed = false;
            continue;
        }
        if (m->lid && !wf_world_coordinator(srv->world) &&
            (m->state == WF_MODEL_INSTALLING ||
             (m->state == WF_MODEL_READY && m->cstep == 3))) {
            /* a member: the coordinator's install regroup */
            if (st == WF_OK && m->state == WF_MODEL_INSTALLING) {
                m->state = WF_MODEL_READY;
                m->load_ms = (wf_now_usec() - m->t_start_us) / 1000;
                wf_log(srv->log, WF_LOG_INFO, "model '%s' (%s) installed for "
                       "the coordinator: %.1f MiB per rank at tp=%u", m->name,
                       m->path, (double)m->rank_bytes / 1048576.0, m->tp);
            }
            if (m->cstep == 3) {
                wf_cmsg_t r = { .type = WF_CMSG_MREADY,
                                .u.mres = { .lid = m->lid, .st = st } };
                if (st != WF_OK)
                    snprintf(r.u.mres.err, sizeof r.u.mres.err, "cutting its "
                             "shards failed: %s", wf_status_str(st));
                m->cstep = 0;
                wf_ctl_msg_t *cm = malloc(sizeof *cm);
                if (cm && wf_cmsg_put(cm, &r) == WF_OK)
                    wf_cluster_send(wf_world_cluster(srv->world), NULL, cm);
                free(cm);
            }
            if (st != WF_OK)
                m->state = WF_MODEL_UNLOADING;  /* the coordinator drops it */
            continue;
        }
        if (m->state == WF_MODEL_INSTALLING && m->lid) {
            /* the coordinator: ready here; the client waits for every node */
            if (st == WF_OK) {
                m->state = WF_MODEL_READY;
                m->load_ms = (wf_now_usec() - m->t_start_us) / 1000;
                cm_advance(srv, m);
            } else {
                cm_fail(srv, m, st, "the model's shards could not be installed "
                        "on every device of the coordinator; nothing was loaded "
                        "(see the daemon's log)");
                if (m->doomed) {
                    /* this regroup is over: the next one (cm_flush) drops it */
                    m->doomed = false;
                    m->state = WF_MODEL_UNLOADING;
                }
            }
            continue;
        }
        if (m->state == WF_MODEL_INSTALLING) {
            if (st == WF_OK) {
                m->state = WF_MODEL_READY;
                m->load_ms = (wf_now_usec() - m->t_start_us) / 1000;
                wf_log(srv->log, WF_LOG_INFO, "model '%s' (%s) ready: %" PRIu64
                       " parameters, %.1f MiB per rank at tp=%u, loaded in %"
                       PRIu64 " ms", m->name, m->path, m->params,
                       (double)m->rank_bytes / 1048576.0, m->tp, m->load_ms);
                model_reply(srv, m, WF_OP_LOAD_MODEL, WF_OK, NULL);
            } else {
                wf_log(srv->log, WF_LOG_ERR, "model '%s': cutting its shards "
                       "failed: %s", m->name, wf_status_str(st));
                model_reply(srv, m, WF_OP_LOAD_MODEL, st, "the model's shards "
                            "could not be installed on every device; nothing "
                            "was loaded (see the daemon's log)");
                wf_registry_remove(&srv->models, m);
            }
        } else if (m->state == WF_MODEL_UNLOADING) {
            wf_log(srv->log, WF_LOG_INFO, "model '%s' unloaded", m->name);
            model_reply(srv, m, WF_OP_UNLOAD_MODEL, WF_OK, NULL);
            wf_registry_remove(&srv->models, m);
        }
    }
    uint64_t resident = 0;
    if (wf_registry_check_tp(&srv->models, (int)srv->sched.mesh.deg.tp,
                             UINT64_MAX, &resident, NULL, 0) == WF_OK)
        srv->sched.resident = resident;
}

static void follow_regrouped(wf_server_t *srv, wf_status_t st, void *arg)
{
    (void)arg;
    models_after_regroup(srv, st);
}

static void follow_finished(wf_server_t *srv, void *arg)
{
    (void)arg;
    models_try_install(srv);
}

const srv_reconf_done_t srv_models_follow = {
    .regrouped = follow_regrouped, .finished = follow_finished,
};

/* Start the install regroup of the model the loader finished, unless a
 * reconfiguration runs (then its end calls this again). Also, on a
 * coordinator or a single node, the regroup that drops models left
 * UNLOADING by a refused cluster load (cm_flush). */
static void models_try_install(wf_server_t *srv)
{
    wf_model_t *m = srv->pending_install;
    if (!m || srv->reconf.active || srv->workers_stopped) {
        cm_flush(srv);
        return;
    }
    srv->pending_install = NULL;
    char err[WF_PROTO_ERROR_MAX] = "";
    m->state = WF_MODEL_INSTALLING;
    const wf_reconf_req_t req = { .deg = srv->sched.mesh.deg, .why = "load model",
                                  .done = srv_models_follow };
    wf_status_t st = srv->stopping ? WF_E_SHUTTING_DOWN
                                   : srv_reconf_start(srv, &req, err, sizeof err);
    if (st == WF_OK)
        return;
    if (st == WF_E_SHUTTING_DOWN)
        snprintf(err, sizeof err, "daemon is shutting down; model not loaded");
    wf_log(srv->log, WF_LOG_INFO, "model '%s' not installed: %s", m->name, err);
    if (m->lid) {
        cm_fail(srv, m, st, err);
        return;
    }
    model_reply(srv, m, WF_OP_LOAD_MODEL, st, err);
    wf_registry_remove(&srv->models, m);
}

/* ---- clusters: the load on every node ------------------------------------ */

/* Send msg to member `node` (coordinator) or to the coordinator (NULL). */
static bool cm_send(wf_server_t *srv, const char *node, const wf_cmsg_t *msg)
{
    wf_ctl_msg_t *m = malloc(sizeof *m);
    bool ok = m && wf_cmsg_put(m, msg) == WF_OK &&
              wf_cluster_send(wf_world_cluster(srv->world), node, m);
    free(m);
    return ok;
}

/* The "mload" that asks a member to load m (name, path, lid, the tp of
 * the coordinator's mesh) into *msg. */
static void cm_mload_msg(const wf_server_t *srv, const wf_model_t *m, wf_cmsg_t *msg)
{
    *msg = (wf_cmsg_t){ .type = WF_CMSG_MLOAD };
    wf_cmsg_mload_t *l = &msg->u.mload;
    l->lid = m->lid;
    snprintf(l->name, sizeof l->name, "%s", m->name);
    snprintf(l->path, sizeof l->path, "%s", m->path);
    l->sharded = m->already_sharded;
    l->tp = srv->sched.mesh.deg.tp;
}

/* The first failure a node answered for m's cluster load (st, the node's
 * message err): kept in m->cst / m->cerr ("node NAME: ..."); a later one
 * is dropped. */
static void cm_note_failure(wf_model_t *m, const char *from, wf_status_t st,
                            const char *err)
{
    if (m->cst != WF_OK)
        return;
    char shown[WF_PROTO_ERROR_MAX];
    wf_escape(shown, sizeof shown, err, strlen(err), WF_ESC_ASCII);
    m->cst = st;
    wf_errf(m->cerr, sizeof m->cerr, "node %s: %s", from,
            shown[0] ? shown : wf_status_str(st));
}

/* The nodes of the world now, their count; *ret_epoch its epoch. */
static uint32_t cm_nodes(const wf_server_t *srv, wf_cluster_node_t *nodes,
                         uint64_t *ret_epoch)
{
    uint32_t n = 0;
    wf_cluster_world(wf_world_cluster(srv->world), nodes, WF_SETTINGS_MAX_NODES,
                     &n, ret_epoch);
    return n;
}

/* Coordinator: msg to every member of the world; bit i set for each node
 * it was queued to. */
static uint32_t cm_tell_members(wf_server_t *srv, const wf_cmsg_t *msg)
{
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch), bits = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!nodes[i].self && cm_send(srv, nodes[i].name, msg))
            bits |= 1u << i;
    return bits;
}

/* Member: msg to the coordinator: how step `t` of load `lid` went. */
static void cm_tell_coord(wf_server_t *srv, wf_cmsg_type_t t, uint64_t lid,
                          wf_status_t st, const char *err,
                          const wf_model_digest_t *d)
{
    wf_cmsg_t msg = { .type = t };
    if (t == WF_CMSG_MFOUND) {
        msg.u.mfound.lid = lid;
        msg.u.mfound.st = st;
        snprintf(msg.u.mfound.err, sizeof msg.u.mfound.err, "%s", err ? err : "");
        if (d && st == WF_OK)
            memcpy(&msg.u.mfound.d, d, sizeof *d);
    } else {
        msg.u.mres.lid = lid;
        msg.u.mres.st = st;
        snprintf(msg.u.mres.err, sizeof msg.u.mres.err, "%s", err ? err : "");
    }
    if (!cm_send(srv, NULL, &msg))
        wf_log(srv->log, WF_LOG_WARNING, "model load %" PRIu64 ": the answer "
               "(%s) could not be queued to the coordinator", lid,
               wf_cmsg_type_name(t));
}

/* Coordinator or single node: a regroup that drops the models left
 * UNLOADING without a client (a refused cluster load), when nothing else
 * runs. Members wait for the coordinator's. */
static void cm_flush(wf_server_t *srv)
{
    if (srv->reconf.active || srv->workers_stopped || srv->stopping ||
        (srv->world && !wf_world_coordinator(srv->world)))
        return;
    bool any = srv->models.flush_wanted;
    for (int i = 0; i < WF_MODELS_MAX && !any; i++)
        any = srv->models.m[i] && srv->models.m[i]->state == WF_MODEL_UNLOADING &&
              !srv->models.m[i]->has_client;
    if (!any)
        return;
    srv->models.flush_wanted = false;
    char err[WF_PROTO_ERROR_MAX];
    const wf_reconf_req_t req = { .deg = srv->sched.mesh.deg, .why = "drop model",
                                  .done = srv_models_follow };
    if (srv_reconf_start(srv, &req, err, sizeof err) != WF_OK)
        wf_log(srv->log, WF_LOG_INFO, "models refused on a node stay until the "
               "next regroup: %s", err);
}

/* The first steps of dropping a cluster load's entry m: a load that read
 * nothing stops at its gate (m is gone), one still reading is dropped
 * when it ends. False when m was past reading: the caller decides. */
static bool cm_stop_reading(wf_server_t *srv, wf_model_t *m)
{
    m->cstep = 0;
    if (wf_registry_stop_at_gate(&srv->models, m))
        return true;            /* it read nothing: gone */
    if (srv->models.loading != m)
        return false;
    wf_registry_gate(&srv->models, m, false);
    m->doomed = true;
    return true;
}

/* This node's entry of a load that failed or was dropped: a load still
 * reading stops at its gate or is dropped when it ends; a model some
 * regroup may have cut goes with the next regroup (UNLOADING). */
static void cm_drop_own(wf_server_t *srv, wf_model_t *m)
{
    if (cm_stop_reading(srv, m))
        return;
    if (srv->pending_install == m) {
        srv->pending_install = NULL;
        m->state = WF_MODEL_UNLOADING;
    } else if (m->state == WF_MODEL_INSTALLING && srv->reconf.active) {
        m->doomed = true;       /* models_after_regroup */
    } else {
        m->state = WF_MODEL_UNLOADING;
    }
}

/* Coordinator: the cluster load of m failed: answer the client, tell every
 * member to forget it, drop ours. */
static void cm_fail(wf_server_t *srv, wf_model_t *m, wf_status_t st, const char *msg)
{
    wf_log(srv->log, WF_LOG_WARNING, "model '%s' (%s) not loaded on the cluster: "
           "%s: %s", m->name, m->path, wf_status_name(st), msg);
    model_reply(srv, m, WF_OP_LOAD_MODEL, st, msg);
    wf_cmsg_t drop = { .type = WF_CMSG_MDROP, .u.mstep = { .lid = m->lid } };
    cm_tell_members(srv, &drop);
    cm_drop_own(srv, m);
    cm_flush(srv);
}

/* What differs between two digests, or NULL. */
static const char *cm_differs(const wf_model_digest_t *a, const wf_model_digest_t *b)
{
    if (a->cfg != b->cfg)
        return "config.json";
    if (a->n != b->n || a->tensors != b->tensors)
        return "the tensor list (names, dtypes or shapes)";
    if (a->sizes != b->sizes || a->bytes != b->bytes)
        return "the file sizes";
    if (a->headers != b->headers)
        return "the headers (offsets or metadata)";
    return NULL;
}

/* "a:0-1,b:2-3": the world's nodes and their ranks; only those m's
 * holders name when m is not NULL. */
static void cm_nodes_text(const wf_server_t *srv, const wf_model_t *m, char *buf,
                          size_t len)
{
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n && at < len; i++) {
        if (m && !wf_mload_holds(m->nodes, nodes[i].name))
            continue;
        int k = snprintf(buf + at, len - at, "%s%s:%u-%u", at ? "," : "",
                         nodes[i].name, nodes[i].first_rank,
                         nodes[i].first_rank + nodes[i].ranks - 1);
        if (k < 0 || (size_t)k >= len - at) {
            buf[at] = '\0';     /* whole entries only */
            break;
        }
        at += (size_t)k;
    }
}

/* list_models' nodes of m: its holders in the world now, with their ranks. */
static void cm_holders_text(const wf_server_t *srv, const wf_model_t *m, char *buf,
                            size_t len)
{
    cm_nodes_text(srv, m, buf, len);
}

/* Coordinator: the first node of m->cnodes whose digests differ from ours;
 * true and the message in msg when there is one. */
static bool cm_compare(const wf_server_t *srv, const wf_model_t *m, char *msg,
                       size_t len)
{
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    for (uint32_t i = 0; i < n; i++) {
        if (!(m->cnodes & (1u << i)))
            continue;
        const char *what = cm_differs(&m->found[i], &m->digest);
        if (what) {
            wf_errf(msg, len, "node %s: its copy of model path '%s' differs from "
                    "the coordinator's in %s", nodes[i].name, m->path, what);
            return true;
        }
    }
    return false;
}

/* Coordinator: the catch-up of m on the nodes of m->cnodes failed (or the
 * world changed): they forget it; forwards on m stay refused in this
 * world, with the reason (wf_mload_forward_refused). */
static void cm_catchup_fail(wf_server_t *srv, wf_model_t *m, const char *msg)
{
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    wf_log(srv->log, WF_LOG_WARNING, "model '%s' not installed on the node(s) that "
           "joined: %s; forward jobs on it are refused until it is loaded again",
           m->name, msg);
    wf_cmsg_t drop = { .type = WF_CMSG_MDROP, .u.mstep = { .lid = m->lid } };
    for (uint32_t i = 0; i < n && epoch == m->world_epoch; i++)
        if (m->cnodes & (1u << i))
            cm_send(srv, nodes[i].name, &drop);
    snprintf(m->cerr, sizeof m->cerr, "%s", msg);
    m->catchup_epoch = epoch;
    m->catchup = false;
    m->cstep = 0;
    m->owed = 0;
    cm_flush(srv);
}

/* Coordinator: start the catch-up of a ready model on the nodes of the
 * world that do not hold it (one at a time, none while a load runs). */
static void cm_catchup_start(wf_server_t *srv)
{
    if (srv->reconf.active || !wf_world_ready(srv->world) || srv->stopping)
        return;
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        const wf_model_t *x = srv->models.m[i];
        if (x && (x->cstep || x->state == WF_MODEL_LOADING ||
                  x->state == WF_MODEL_INSTALLING))
            return;
    }
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (!m || !m->lid || m->state != WF_MODEL_READY || !m->nodes[0] ||
            m->catchup_epoch == epoch)
            continue;
        uint32_t bits = 0;
        for (uint32_t k = 0; k < n; k++)
            if (!nodes[k].self && !wf_mload_holds(m->nodes, nodes[k].name))
                bits |= 1u << k;
        if (!bits)
            continue;
        wf_cmsg_t msg;
        cm_mload_msg(srv, m, &msg);
        m->catchup = true;
        m->ready_early = 0;
        m->cstep = 1;
        m->cst = WF_OK;
        m->cnodes = bits;
        m->owed = 0;
        m->world_epoch = epoch;
        m->world_nodes = n;
        m->step_deadline_us = wf_now_usec() +
                              (uint64_t)srv->settings.cluster_timeout_ms * 1000;
        for (uint32_t k = 0; k < n; k++)
            if ((bits & (1u << k)) && cm_send(srv, nodes[k].name, &msg))
                m->owed |= 1u << k;
        wf_log(srv->log, WF_LOG_INFO, "model '%s': installing it on the node(s) "
               "that joined the world (epoch %" PRIu64 ")", m->name, epoch);
        if (m->owed != bits)
            cm_catchup_fail(srv, m, "a node that joined cannot be reached");
        return;
    }
}

/* ---- the coordinator's actions (cluster/model_load.h's table) ---------- */

/* Each returns false when it could not start (the state goes back). */
typedef bool (*cm_action_fn)(wf_server_t *srv, wf_model_t *m, wf_status_t st,
                             const char *msg);

/* OPEN -> READ: every node found the same files; all of them read. */
static bool act_go(wf_server_t *srv, wf_model_t *m, wf_status_t st, const char *msg)
{
    (void)st, (void)msg;
    wf_cmsg_t go = { .type = WF_CMSG_MGO, .u.mstep = { .lid = m->lid } };
    m->owed = cm_tell_members(srv, &go);
    wf_registry_gate(&srv->models, m, true);
    wf_log(srv->log, WF_LOG_INFO, "model '%s': every node of the world found "
           "the same files; reading its weights", m->name);
    return true;
}

/* READ -> INSTALL: every node read it: our install regroup, which the
 * members follow (the mesh broadcast of srv_reconf_advance); they answer
 * "mready" after it. */
static bool act_install(wf_server_t *srv, wf_model_t *m, wf_status_t st,
                        const char *msg)
{
    (void)st, (void)msg;
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    for (uint32_t i = 0; i < n; i++)
        if (!nodes[i].self)
            m->owed |= 1u << i;
    m->owed &= ~m->ready_early;
    srv->pending_install = m;
    models_try_install(srv);
    return true;
}

/* INSTALL -> IDLE: installed on every node. */
static bool act_done(wf_server_t *srv, wf_model_t *m, wf_status_t st, const char *msg)
{
    (void)st, (void)msg;
    cm_nodes_text(srv, NULL, m->nodes, sizeof m->nodes);
    wf_log(srv->log, WF_LOG_INFO, "model '%s' (%s) ready on the cluster (%s): %"
           PRIu64 " parameters, %.1f MiB per rank at tp=%u, loaded in %" PRIu64
           " ms", m->name, m->path, m->nodes, m->params,
           (double)m->rank_bytes / 1048576.0, m->tp, m->load_ms);
    model_reply(srv, m, WF_OP_LOAD_MODEL, WF_OK, NULL);
    return true;
}

static bool act_fail(wf_server_t *srv, wf_model_t *m, wf_status_t st, const char *msg)
{
    cm_fail(srv, m, st, msg);
    return true;
}

/* CATCHUP_OPEN -> CATCHUP_READ: the nodes that joined found the same
 * files; they read. */
static bool act_catchup_go(wf_server_t *srv, wf_model_t *m, wf_status_t st,
                           const char *msg)
{
    (void)st, (void)msg;
    wf_cmsg_t go = { .type = WF_CMSG_MGO, .u.mstep = { .lid = m->lid } };
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    for (uint32_t i = 0; i < n; i++)
        if ((m->cnodes & (1u << i)) && cm_send(srv, nodes[i].name, &go))
            m->owed |= 1u << i;
    return true;
}

/* CATCHUP_READ -> CATCHUP_INSTALL: read there: a regroup (same mesh)
 * cuts its shards; the nodes answer "mready" after it. Not started (a
 * reconfiguration runs): cm_tick comes back. */
static bool act_catchup_install(wf_server_t *srv, wf_model_t *m, wf_status_t st,
                                const char *msg)
{
    (void)st, (void)msg;
    char err[WF_PROTO_ERROR_MAX];
    const wf_reconf_req_t req = { .deg = srv->sched.mesh.deg,
                                  .why = "model on a node that joined",
                                  .done = srv_models_follow };
    if (srv_reconf_start(srv, &req, err, sizeof err) != WF_OK)
        return false;
    m->owed = m->cnodes & ~m->ready_early;
    return true;
}

/* CATCHUP_INSTALL -> IDLE: the nodes that joined hold it too. */
static bool act_catchup_done(wf_server_t *srv, wf_model_t *m, wf_status_t st,
                             const char *msg)
{
    (void)st, (void)msg;
    char now[WF_MODEL_NODES_MAX];
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    snprintf(now, sizeof now, "%s", m->nodes);
    for (uint32_t i = 0; i < n; i++) {
        size_t at = strlen(now);
        if ((m->cnodes & (1u << i)) && at + 1 < sizeof now)
            wf_errf(now + at, sizeof now - at, "%s%s:%u-%u", at ? "," : "",
                    nodes[i].name, nodes[i].first_rank,
                    nodes[i].first_rank + nodes[i].ranks - 1);
    }
    snprintf(m->nodes, sizeof m->nodes, "%s", now);
    m->cerr[0] = '\0';
    wf_log(srv->log, WF_LOG_INFO, "model '%s' installed on the node(s) that "
           "joined; held by %s", m->name, m->nodes);
    return true;
}

static bool act_catchup_fail(wf_server_t *srv, wf_model_t *m, wf_status_t st,
                             const char *msg)
{
    (void)st;
    cm_catchup_fail(srv, m, msg);
    return true;
}

/* Indexed by wf_mload_action_t. */
static const cm_action_fn cm_actions[WF_MLOAD_ACTIONS] = {
    [WF_MLOAD_ACT_GO] = act_go,
    [WF_MLOAD_ACT_INSTALL] = act_install,
    [WF_MLOAD_ACT_DONE] = act_done,
    [WF_MLOAD_ACT_FAIL] = act_fail,
    [WF_MLOAD_ACT_CATCHUP_GO] = act_catchup_go,
    [WF_MLOAD_ACT_CATCHUP_INSTALL] = act_catchup_install,
    [WF_MLOAD_ACT_CATCHUP_DONE] = act_catchup_done,
    [WF_MLOAD_ACT_CATCHUP_FAIL] = act_catchup_fail,
};

/* Coordinator: event `ev` on m's load: the table's rule, if any, sets the
 * next state and runs its action (st, msg: a failure's status and text).
 * m may be gone afterwards. */
static void cm_event(wf_server_t *srv, wf_model_t *m, wf_mload_event_t ev,
                     wf_status_t st, const char *msg)
{
    wf_mload_state_t prev = wf_mload_state(m);
    const wf_mload_rule_t *r = wf_mload_rule(prev, ev);
    if (!r)
        return;
    wf_mload_set_state(m, r->next);
    if (!cm_actions[r->action](srv, m, st, msg))
        wf_mload_set_state(m, prev);
}

/* Coordinator: once every node answered the step running on m (owed
 * empty) and this node's part of it is done, the event that ends the
 * step: a node's failure, digests that differ (open), or all answered. */
static void cm_advance(wf_server_t *srv, wf_model_t *m)
{
    if (!(m->has_client || m->catchup) || m->cstep == 0 || m->owed)
        return;
    char msg[WF_PROTO_ERROR_MAX];
    if (m->cst != WF_OK) {
        snprintf(msg, sizeof msg, "%s", m->cerr);
        cm_event(srv, m, WF_MLOAD_EV_FAILED, m->cst, msg);
        return;
    }
    switch (wf_mload_state(m)) {
    case WF_MLOAD_OPEN:
        if (!m->opened_seen)
            return;         /* ours is still opening */
        if (cm_compare(srv, m, msg, sizeof msg)) {
            wf_errf(msg + strlen(msg), sizeof msg - strlen(msg), "; nothing was "
                    "loaded on any node");
            cm_event(srv, m, WF_MLOAD_EV_DIFFERS, WF_E_MISMATCH, msg);
            return;
        }
        break;
    case WF_MLOAD_CATCHUP_OPEN:
        if (cm_compare(srv, m, msg, sizeof msg)) {
            cm_event(srv, m, WF_MLOAD_EV_DIFFERS, WF_E_MISMATCH, msg);
            return;
        }
        break;
    case WF_MLOAD_READ:
        if (srv->models.loading == m)
            return;         /* ours is still reading */
        break;
    case WF_MLOAD_CATCHUP_READ:
        if (srv->reconf.active || srv->workers_stopped)
            return;         /* cm_tick comes back */
        break;
    case WF_MLOAD_INSTALL:
        if (m->state != WF_MODEL_READY)
            return;         /* our install regroup runs */
        break;
    default:
        break;
    }
    cm_event(srv, m, WF_MLOAD_EV_ANSWERED, WF_OK, NULL);
}

/* Coordinator: start the cluster load of m (its loader is gated): "mload"
 * to every member (a failure is answered there). */
static void cm_start(wf_server_t *srv, wf_model_t *m)
{
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    m->lid = srv->models.lid_base | m->id;
    m->ready_early = 0;
    m->world_epoch = epoch;
    m->world_nodes = n;
    m->cstep = 1;
    m->owed = 0;
    m->cst = WF_OK;
    m->step_deadline_us = wf_now_usec() +
                          (uint64_t)srv->settings.cluster_timeout_ms * 1000;
    wf_cmsg_t msg;
    cm_mload_msg(srv, m, &msg);
    for (uint32_t i = 0; i < n; i++) {
        if (nodes[i].self)
            continue;
        if (!cm_send(srv, nodes[i].name, &msg)) {
            char why[WF_PROTO_ERROR_MAX];
            wf_errf(why, sizeof why, "node %s cannot be reached; nothing was "
                     "loaded", nodes[i].name);
            cm_fail(srv, m, WF_E_NODE_LOST, why);
            return;
        }
        m->owed |= 1u << i;
    }
    m->cnodes = m->owed;
}

/* Coordinator, on every wake-up: a load whose world changed, or whose
 * open a member did not answer within cluster_timeout_ms, fails. */
static void cm_tick(wf_server_t *srv, uint64_t now)
{
    if (!srv->world || !wf_world_coordinator(srv->world))
        return;
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (!m || !m->cstep || !(m->has_client || m->catchup))
            continue;
        wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
        uint64_t epoch;
        uint32_t n = cm_nodes(srv, nodes, &epoch);
        char msg[WF_PROTO_ERROR_MAX], who[160] = "";
        if (m->catchup && (epoch != m->world_epoch || n != m->world_nodes)) {
            cm_event(srv, m, WF_MLOAD_EV_WORLD, WF_E_UNAVAILABLE,
                     "the world changed during the install");
            m->catchup_epoch = 0;   /* the new world tries again */
            continue;
        }
        if (m->catchup && m->cstep == 2 && !m->owed) {
            cm_advance(srv, m);     /* waits for a reconfiguration to end */
            continue;
        }
        if (epoch != m->world_epoch || n != m->world_nodes) {
            snprintf(msg, sizeof msg, "the cluster's world changed during the "
                     "load (epoch %" PRIu64 " -> %" PRIu64 ": a node was lost or "
                     "joined); nothing was loaded; retry", m->world_epoch, epoch);
            cm_event(srv, m, WF_MLOAD_EV_WORLD, WF_E_UNAVAILABLE, msg);
            continue;
        }
        if (m->cstep != 1 || !m->owed || now < m->step_deadline_us)
            continue;
        for (uint32_t k = 0; k < n; k++)
            if (m->owed & (1u << k)) {
                size_t at = strlen(who);
                wf_errf(who + at, sizeof who - at, "%s%s", at ? ", " : "",
                         nodes[k].name);
            }
        snprintf(msg, sizeof msg, "node(s) %s did not answer the load within "
                 "cluster_timeout_ms (%u ms); nothing was loaded", who,
                 srv->settings.cluster_timeout_ms);
        cm_event(srv, m, WF_MLOAD_EV_TIMEOUT, WF_E_NODE_LOST, msg);
    }
    /* a node lost holds nothing for us any more: when it joins again the
     * catch-up installs the model there */
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (m && m->lid && m->state == WF_MODEL_READY && !m->cstep && m->nodes[0]) {
            char held[WF_MODEL_NODES_MAX];
            cm_nodes_text(srv, m, held, sizeof held);
            if (held[0] && strcmp(held, m->nodes) != 0) {
                wf_log(srv->log, WF_LOG_INFO, "model '%s': held by %s now (was %s)",
                       m->name, held, m->nodes);
                snprintf(m->nodes, sizeof m->nodes, "%s", held);
            }
        }
    }
    cm_catchup_start(srv);
}

/* The coordinator's entry of cluster load `lid` at step `step`. */
static wf_model_t *cm_find(wf_server_t *srv, uint64_t lid, int step)
{
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (m && m->lid == lid &&
            (step == 0 || (m->cstep == step && (m->has_client || m->catchup))))
            return m;
    }
    return NULL;
}

/* Coordinator: a member's answer to step `step` of load `lid`. */
static void cm_answer(wf_server_t *srv, const char *from, uint64_t lid, int step,
                      wf_status_t st, const char *err, const wf_cmsg_digest_t *d)
{
    wf_model_t *m = cm_find(srv, lid, step);
    wf_model_t *early = step == 3 && !m ? cm_find(srv, lid, 2) : NULL;
    if (!m && !early)
        return;     /* a load that failed already: late */
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = cm_nodes(srv, nodes, &epoch);
    int i = -1;
    for (uint32_t k = 0; k < n && i < 0; k++)
        if (strcmp(nodes[k].name, from) == 0)
            i = (int)k;
    if (early) {
        /* a regroup not ours (a client's reconfigure) cut the member's
         * shards before our install: its "mready" counts then */
        if (i >= 0 && epoch == early->world_epoch && n == early->world_nodes &&
            (early->cnodes & (1u << i))) {
            early->ready_early |= 1u << i;
            if (st != WF_OK)
                cm_note_failure(early, from, st, err);
        }
        return;
    }
    if (i < 0 || epoch != m->world_epoch || n != m->world_nodes ||
        !(m->owed & (1u << i)))
        return;
    m->owed &= ~(1u << i);
    if (st == WF_E_BUSY)
        srv->models.flush_wanted = true;    /* it drops models: a regroup */
    if (st != WF_OK) {
        cm_note_failure(m, from, st, err);
    } else if (d) {
        memcpy(&m->found[i], d, sizeof m->found[i]);
    }
    cm_advance(srv, m);
}

/* Member: "mload" from the coordinator. */
/* Member: models loaded by an earlier coordinator (another lid base: it
 * restarted) go with the next regroup; true when one is named `name`. */
static bool cm_member_drop_stale(wf_server_t *srv, uint64_t lid, const char *name)
{
    bool named = false;
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (!m || !m->lid || (m->lid >> 32) == (lid >> 32) ||
            srv->models.loading == m)
            continue;
        named = named || strcmp(m->name, name) == 0;
        if (m->state == WF_MODEL_UNLOADING || m->doomed)
            continue;
        wf_log(srv->log, WF_LOG_INFO, "model '%s' of an earlier coordinator "
               "dropped", m->name);
        if (srv->reconf.active)
            m->doomed = true;
        else
            m->state = WF_MODEL_UNLOADING;
    }
    return named;
}

static void cm_member_load(wf_server_t *srv, const wf_cmsg_mload_t *l)
{
    wf_load_model_args_t args;
    memset(&args, 0, sizeof args);
    snprintf(args.name, sizeof args.name, "%s", l->name);
    snprintf(args.path, sizeof args.path, "%s", l->path);
    args.weights_already_sharded = l->sharded;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_model_t *m = NULL;
    uint64_t avail = srv_min_device_memory(srv);
    avail = avail > srv->sched.resident ? avail - srv->sched.resident : 0;
    wf_model_t *old = wf_registry_find(&srv->models, l->name);
    if (old && old->lid == l->lid && old->state == WF_MODEL_READY && !old->doomed) {
        /* a catch-up after this node came back: it holds the model still */
        old->cstep = 1;
        cm_tell_coord(srv, WF_CMSG_MFOUND, l->lid, WF_OK, NULL, &old->digest);
        return;
    }
    wf_status_t st = WF_OK;
    bool stale = cm_member_drop_stale(srv, l->lid, l->name);
    if (srv->stopping) {
        st = WF_E_SHUTTING_DOWN;
        snprintf(err, sizeof err, "daemon is shutting down");
    } else if (stale) {
        st = WF_E_BUSY;
        snprintf(err, sizeof err, "model '%s' of an earlier coordinator is being "
                 "dropped on this node; retry", l->name);
    } else if (old && (old->doomed || old->state == WF_MODEL_UNLOADING)) {
        /* an earlier load of the name, refused, still going away */
        st = WF_E_BUSY;
        snprintf(err, sizeof err, "model '%s' of an earlier load is still being "
                 "dropped on this node; retry", l->name);
    } else {
        /* at the coordinator's tp: a reconfiguration it has answered may
         * not have reached this node yet */
        int tp = l->tp ? (int)l->tp : (int)srv->sched.mesh.deg.tp;
        st = wf_registry_start_load(&srv->models, &args, tp, avail, true, &m, err,
                                    sizeof err);
    }
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_INFO, "load of model '%s' for the coordinator "
               "refused: %s: %s", l->name, wf_status_name(st), err);
        cm_tell_coord(srv, WF_CMSG_MFOUND, l->lid, st, err, NULL);
        return;
    }
    m->lid = l->lid;
    m->cstep = 1;
    wf_log(srv->log, WF_LOG_INFO, "loading model '%s' from %s for the "
           "coordinator", m->name, m->path);
}

/* Member: "mdrop": forget load (or model) lid. */
static void cm_member_drop(wf_server_t *srv, uint64_t lid)
{
    wf_model_t *m = cm_find(srv, lid, 0);
    if (!m)
        return;
    wf_log(srv->log, WF_LOG_INFO, "model '%s': dropped by the coordinator",
           m->name);
    if (cm_stop_reading(srv, m))
        return;
    if (srv->reconf.active)
        m->doomed = true;       /* after the regroup running now */
    else
        m->state = WF_MODEL_UNLOADING;  /* the coordinator's next regroup */
}

void srv_models_on_message(void *arg, const char *from, const wf_ctl_msg_t *cm)
{
    wf_server_t *srv = arg;
    wf_cmsg_t *msg = malloc(sizeof *msg);
    char err[WF_PROTO_ERROR_MAX];
    if (!msg)
        return;
    wf_status_t st = wf_cmsg_get(cm, msg, err, sizeof err);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_WARNING, "cluster: bad %s from %s dropped: %s",
               wf_cmsg_type_name(msg->type), from ? from : "the coordinator", err);
        free(msg);
        return;
    }
    bool coord = wf_world_coordinator(srv->world);
    switch (msg->type) {
    case WF_CMSG_MLOAD:
        if (!from && !coord)
            cm_member_load(srv, &msg->u.mload);
        break;
    case WF_CMSG_MGO:
        if (!from && !coord) {
            wf_model_t *m = cm_find(srv, msg->u.mstep.lid, 0);
            if (m && srv->models.loading == m && m->cstep == 1) {
                m->cstep = 2;
                wf_registry_gate(&srv->models, m, true);
            } else if (m && m->state == WF_MODEL_READY && m->cstep == 1) {
                m->cstep = 3;       /* read already: the regroup re-cuts it */
                cm_tell_coord(srv, WF_CMSG_MREAD, m->lid, WF_OK, NULL, NULL);
            }
        }
        break;
    case WF_CMSG_MDROP:
        if (!from && !coord)
            cm_member_drop(srv, msg->u.mstep.lid);
        break;
    case WF_CMSG_MFOUND:
        if (from && coord)
            cm_answer(srv, from, msg->u.mfound.lid, 1, msg->u.mfound.st,
                      msg->u.mfound.err, &msg->u.mfound.d);
        break;
    case WF_CMSG_MREAD:
        if (from && coord)
            cm_answer(srv, from, msg->u.mres.lid, 2, msg->u.mres.st,
                      msg->u.mres.err, NULL);
        break;
    case WF_CMSG_MREADY:
        if (from && coord)
            cm_answer(srv, from, msg->u.mres.lid, 3, msg->u.mres.st,
                      msg->u.mres.err, NULL);
        break;
    default:
        break;
    }
    free(msg);
}

void srv_models_world_fit(wf_server_t *srv, const wf_mesh_t *mesh,
                          wf_model_set_t *set)
{
    const int tp = (int)mesh->deg.tp;
    uint64_t avail = srv_min_device_memory(srv), sum = 0;
    uint32_t k = 0;
    for (uint32_t j = 0; j < set->n; j++) {
        wf_model_t *m = NULL;
        for (int i = 0; i < WF_MODELS_MAX && !m; i++)
            if (srv->models.m[i] && srv->models.m[i]->id == set->m[j].id)
                m = srv->models.m[i];
        char why[WF_PROTO_ERROR_MAX] = "";
        bool fit = m && m->run && m->run->plan_check(m->cfg.b, &m->plan, tp,
                                                     m->default_plan, why,
                                                     sizeof why) == WF_OK;
        uint64_t b = fit ? wf_model_rank_bytes(&srv->models, m, tp) : 0;
        if (fit && (b > avail || sum > avail - b)) {
            fit = false;
            wf_errf(why, sizeof why, "its shards need %.1f MiB per device at tp=%d, "
                    "%.1f MiB free", (double)b / 1048576.0, tp,
                    (double)(avail - sum) / 1048576.0);
        }
        if (fit) {
            sum += b;
            m->unfit_epoch = 0;
            set->m[k++] = set->m[j];
        } else if (m) {
            char deg[96];
            wf_mesh_degrees_format(&mesh->deg, deg, sizeof deg);
            m->unfit_epoch = mesh->epoch;
            wf_errf(m->unfit, sizeof m->unfit, "model '%s' does not fit the "
                    "cluster world's mesh %s: %s", m->name, deg, why);
            wf_log(srv->log, WF_LOG_WARNING, "%s; it is not resident until a "
                   "mesh it fits", m->unfit);
        }
    }
    set->n = k;
}

wf_status_t srv_models_forward_plan(void *arg, wf_djob_t *job, uint64_t lid,
                                    const wf_mesh_t *mesh, char *err, size_t err_len)
{
    wf_server_t *srv = arg;
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        const wf_model_t *m = srv->models.m[i];
        if (!m || m->lid != lid || m->state != WF_MODEL_READY)
            continue;
        if (m->unfit_epoch && m->unfit_epoch == mesh->epoch) {
            snprintf(err, err_len, "%s", m->unfit);
            return WF_E_UNAVAILABLE;
        }
        snprintf(job->req.args.forward.model, sizeof job->req.args.forward.model,
                 "%s", m->name);
        return wf_forward_plan(job, srv->ops, mesh, m, err, err_len);
    }
    snprintf(err, err_len, "no model of the coordinator's id %" PRIu64 " is ready "
             "on this node", lid);
    return WF_E_UNAVAILABLE;
}

/* ---- the loader's end, the requests ------------------------------------- */

/* The loader thread finished, or a gated load opened its model. */
void srv_models_loaded(wf_server_t *srv)
{
    bool opened = false;
    wf_model_t *m = wf_registry_take_loaded(&srv->models, &opened);
    if (!m)
        return;
    bool member = m->lid && srv->world && !wf_world_coordinator(srv->world);
    if (opened) {
        if (member)
            cm_tell_coord(srv, WF_CMSG_MFOUND, m->lid, WF_OK, NULL, &m->digest);
        else if (m->doomed)
            wf_registry_gate(&srv->models, m, false);
        else
            cm_advance(srv, m);
        return;
    }
    if (m->doomed) {
        /* refused while it loaded: nobody waits for it */
        if (m->status == WF_OK) {
            m->doomed = false;
            m->state = WF_MODEL_UNLOADING;  /* read: a regroup may follow */
            cm_flush(srv);
        } else {
            wf_registry_remove(&srv->models, m);
        }
        return;
    }
    if (m->status != WF_OK) {
        wf_log(srv->log, WF_LOG_INFO, "load of model '%s' (%s) refused: %s: %s",
               m->name, m->path, wf_status_name(m->status), m->err);
        if (member) {
            cm_tell_coord(srv, m->opened_seen ? WF_CMSG_MREAD : WF_CMSG_MFOUND,
                          m->lid, m->status, m->err, NULL);
        } else if (m->lid) {
            /* ours failed: the members forget theirs; nothing was cut */
            wf_cmsg_t drop = { .type = WF_CMSG_MDROP, .u.mstep = { .lid = m->lid } };
            cm_tell_members(srv, &drop);
        }
        model_reply(srv, m, WF_OP_LOAD_MODEL, m->status, m->err);
        wf_registry_remove(&srv->models, m);
        return;
    }
    wf_log(srv->log, WF_LOG_INFO, "model '%s' read: %.1f MiB in %" PRIu64 " ms",
           m->name, (double)m->bytes_total / 1048576.0, m->load_ms);
    if (member) {
        /* cut by the coordinator's install regroup */
        m->state = WF_MODEL_INSTALLING;
        m->cstep = 3;
        cm_tell_coord(srv, WF_CMSG_MREAD, m->lid, WF_OK, NULL, NULL);
        return;
    }
    if (m->lid) {
        cm_advance(srv, m);
        return;
    }
    srv->pending_install = m;
    models_try_install(srv);
}

/* Refusal common to the model ops: shutdown; a cluster's member. */
static bool models_refused(wf_server_t *srv, char *err, size_t err_len,
                           wf_status_t *st)
{
    if (srv->stopping) {
        *st = WF_E_SHUTTING_DOWN;
        snprintf(err, err_len, "daemon is shutting down");
        return true;
    }
    if (srv->world && !wf_world_coordinator(srv->world)) {
        *st = WF_E_NOT_COORDINATOR;
        wf_cluster_why_not(wf_world_cluster(srv->world), err, err_len);
        snprintf(err + strlen(err), err_len - strlen(err), "; models are loaded "
                 "and unloaded there, on every node at once");
        return true;
    }
    if (srv->world && (!wf_world_ready(srv->world) || srv->reconf.active)) {
        *st = WF_E_UNAVAILABLE;
        if (srv->reconf.active)
            snprintf(err, err_len, "a reconfiguration is running; retry when it "
                     "is done");
        else
            wf_cluster_why_not(wf_world_cluster(srv->world), err, err_len);
        return true;
    }
    return false;
}

void srv_models_load(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    wf_model_t *m = NULL;
    if (models_refused(srv, err, sizeof err, &st))
        goto reject;
    if (srv->world && req->args.load_model.n_plan > 0) {
        st = WF_E_UNAVAILABLE;
        snprintf(err, sizeof err, "a cluster loads models with their family's "
                 "default tp plan (or the plan of per-rank files) for now; omit "
                 "tp_plan");
        goto reject;
    }
    uint64_t avail = srv_min_device_memory(srv);
    avail = avail > srv->sched.resident ? avail - srv->sched.resident : 0;
    st = wf_registry_start_load(&srv->models, &req->args.load_model,
                                (int)srv->sched.mesh.deg.tp, avail,
                                srv->world != NULL, &m, err, sizeof err);
    if (st != WF_OK)
        goto reject;
    if (!model_take_client(m, identity, delim, req))
        wf_log(srv->log, WF_LOG_ERR, "load %" PRIu64 ": out of memory; the "
               "client gets no reply", req->id);
    wf_log(srv->log, WF_LOG_INFO, "loading model '%s' from %s (tp plan: %s)%s",
           m->name, m->path,
           req->args.load_model.weights_already_sharded ? "the files'"
           : req->args.load_model.n_plan == 0 ? "default" : "given",
           srv->world ? " on every node of the cluster" : "");
    srv->t_extend_us = 0;
    if (srv->world)
        cm_start(srv, m);
    return;
reject:
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "load_model request %" PRIu64 " refused: %s: %s",
           req->id, wf_status_name(st), err);
    srv_reply_error(srv, identity, delim, req->id, req->op, st, err);
}

void srv_models_unload(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    const char *name = req->args.unload_model.name;
    wf_model_t *m = wf_registry_find(&srv->models, name);
    if (models_refused(srv, err, sizeof err, &st))
        goto reject;
    if (!m) {
        st = WF_E_BAD_ARGUMENT;
        snprintf(err, sizeof err, "model '%s' is not loaded", name);
        goto reject;
    }
    if (m->state != WF_MODEL_READY || m->cstep) {
        st = WF_E_BUSY;
        snprintf(err, sizeof err, "model '%s' is %s; retry when it is ready",
                 name, m->state == WF_MODEL_UNLOADING ? "unloading" : "loading");
        goto reject;
    }
    m->state = WF_MODEL_UNLOADING;
    if (srv->world && m->lid) {
        /* before the regroup's mesh message: the members drop it with it */
        wf_cmsg_t drop = { .type = WF_CMSG_MDROP, .u.mstep = { .lid = m->lid } };
        cm_tell_members(srv, &drop);
    }
    const wf_reconf_req_t rreq = { .deg = srv->sched.mesh.deg, .why = "unload model",
                                  .done = srv_models_follow };
    st = srv_reconf_start(srv, &rreq, err, sizeof err);
    if (st != WF_OK) {
        /* members marked it unloading: their next regroup drops it; ours
         * is dropped too (cm_flush), so that the nodes agree */
        if (srv->world && m->lid) {
            wf_log(srv->log, WF_LOG_WARNING, "model '%s': unload regroup not "
                   "started (%s); it is dropped with the next one", name, err);
            st = WF_OK;
        } else {
            m->state = WF_MODEL_READY;
            goto reject;
        }
    }
    if (!model_take_client(m, identity, delim, req))
        wf_log(srv->log, WF_LOG_ERR, "unload %" PRIu64 ": out of memory; the "
               "client gets no reply", req->id);
    return;
reject:
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "unload_model request %" PRIu64 " refused: "
           "%s: %s", req->id, wf_status_name(st), err);
    srv_reply_error(srv, identity, delim, req->id, req->op, st, err);
}

void srv_models_list(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    wf_reply_t *rep = srv_reply_ok(srv, srv->req.id, WF_OP_LIST_MODELS);
    for (int i = 0; i < WF_MODELS_MAX; i++)
        if (srv->models.m[i])
            srv_model_info(srv, srv->models.m[i],
                               &rep->result.models.models[rep->result.models.n++]);
    srv_reply_send(srv, identity, delim, rep, NULL);
}

/* While a load runs: tell systemd it progresses (start-up / reload
 * timeouts stretch) and what it is doing. Cluster loads: their timers. */
void srv_models_notify(wf_server_t *srv, uint64_t now)
{
    cm_tick(srv, now);
    wf_model_t *m = srv->models.loading;
    if (!m || now - srv->t_extend_us < 1000000)
        return;
    srv->t_extend_us = now;
    uint64_t done = atomic_load(&m->bytes_loaded);
    uint64_t total = atomic_load(&m->bytes_to_load);
    char line[160];
    snprintf(line, sizeof line, "loading model %s: %.0f%%", m->name,
             total ? 100.0 * (double)done / (double)total : 0.0);
    wf_notify_extend(&srv->notify, 5000000, line);
}
