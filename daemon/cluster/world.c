/* world.c — this node's part of the cluster world (see world.h): start-up
 * and teardown, the spare comm endpoints, joining a world the control
 * plane formed (a regroup job on the cross-process comm world), installing
 * it into the scheduler once built, aborts and their reports. The jobs
 * that cross nodes live in world_jobs.c, which this file calls (never the
 * other way). Called by daemon/server/.
 */
#include "world_impl.h"

#include "comm/comm_nccl_boot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The world mesh for `world` ranks from the degrees asked for: dp fitted
 * when ring x ulysses x tp divides the world, else the sequence dims
 * shrink (ring first), else every rank its own replica. */
static wf_mesh_degrees_t fit_mesh(wf_mesh_degrees_t req, uint32_t world)
{
    uint32_t inner = req.ring * req.ulysses * req.tp;
    if (inner && world % inner == 0)
        return (wf_mesh_degrees_t){ world / inner, req.ring, req.ulysses, req.tp };
    inner = req.ulysses * req.tp;
    if (inner && world % inner == 0)
        return (wf_mesh_degrees_t){ 1, world / inner, req.ulysses, req.tp };
    if (req.tp && world % req.tp == 0)
        return (wf_mesh_degrees_t){ 1, world / req.tp, 1, req.tp };
    return (wf_mesh_degrees_t){ world, 1, 1, 1 };
}

/* Bind a fresh comm endpoint per local rank for the next world; data
 * gets their addresses, "tcp://ADDR:P0,P1,.." (ADDR: data_address). */
static wf_status_t bind_spares(wf_world_t *w)
{
    size_t o = 0;
    w->data[0] = '\0';
    int64_t max = (int64_t)wf_settings_data_msg_bytes(w->settings);
    int hwm = (int)w->settings->cluster_recv_messages;
    char host[WF_SETTINGS_NAME_MAX], bind[WF_SETTINGS_NAME_MAX + 16];
    snprintf(host, sizeof host, "%s", w->settings->data_address);
    if (host[0] == '\0' && gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    for (uint32_t d = 0; d < w->n_workers; d++) {
        wf_comm_zmq_endpoint_destroy(&w->spare[d]);
        wf_status_t st = wf_comm_zmq_endpoint_new(w->zctx, bind, max, hwm,
                                                  w->keys ? &w->keys->self : NULL,
                                                  &w->spare[d]);
        if (st != WF_OK) {
            wf_log(w->log, WF_LOG_ERR, "cluster: cannot bind a comm endpoint "
                   "on %s (data_address): %s", host, wf_status_str(st));
            return st;
        }
        const char *a = wf_comm_zmq_endpoint_address(w->spare[d]);
        const char *port = strrchr(a, ':');
        int n = d == 0 ? snprintf(w->data, sizeof w->data, "%s", a)
                       : snprintf(w->data + o, sizeof w->data - o, ",%s",
                                  port ? port + 1 : "");
        if (n < 0 || (size_t)n >= sizeof w->data - o) {
            wf_log(w->log, WF_LOG_ERR, "cluster: %u comm endpoints do not fit "
                   "the data field", w->n_workers);
            return WF_E_LIMIT;
        }
        o += (size_t)n;
    }
    return WF_OK;
}

/* The endpoints of `ranks` ranks from a node's data field. */
static bool parse_data(const char *data, uint32_t ranks,
                       char (*eps)[WF_COMM_ZMQ_ENDPOINT_MAX])
{
    const char *comma = strchr(data, ',');
    size_t first = comma ? (size_t)(comma - data) : strlen(data), plen = first;
    while (plen > 0 && data[plen - 1] != ':')
        plen--;
    if (plen == 0 || first >= WF_COMM_ZMQ_ENDPOINT_MAX || ranks == 0)
        return false;
    uint32_t k = 0;
    snprintf(eps[k++], WF_COMM_ZMQ_ENDPOINT_MAX, "%.*s", (int)first, data);
    for (const char *p = comma; p; ) {
        p++;
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (k == ranks || len == 0 || len > 5 || strspn(p, "0123456789") < len)
            return false;
        snprintf(eps[k++], WF_COMM_ZMQ_ENDPOINT_MAX, "%.*s%.*s", (int)plen, data,
                 (int)len, p);
        p = e;
    }
    return k == ranks;
}

/* A cross-process world with room for its CURVE fields: the key and the
 * node of every rank (comm_zmq's config points into them while the
 * regroup joins). zw is the first member, so the job frees the whole
 * with free(job->zworld). */
typedef struct zworld_sec {
    wf_zworld_t zw;
    wf_keypair_t self;                                  /* this node's pair */
    char keys[WF_DJOB_MAX_WORLD][WF_KEY_Z85_LEN + 1];   /* by world rank */
    char nodes[WF_DJOB_MAX_WORLD][WF_SETTINGS_NAME_MAX];
    const char *key_ptrs[WF_DJOB_MAX_WORLD];
    const char *node_ptrs[WF_DJOB_MAX_WORLD];
} zworld_sec_t;

/* With keys: every rank's node and that node's key (node_keys) into zs;
 * false (logged) when a node of the world is not listed. */
static bool fill_rank_keys(wf_world_t *w, zworld_sec_t *zs,
                           const wf_cluster_node_t *nw, uint32_t nn, uint64_t epoch)
{
    zs->self = w->keys->self;
    for (uint32_t k = 0; k < nn; k++) {
        const char *key = wf_cluster_key_of(w->keys, nw[k].name);
        if (!key) {
            wf_log(w->log, WF_LOG_ERR, "cluster: node %s of the world of epoch %"
                   PRIu64 " is not in node_keys; world not joined", nw[k].name,
                   epoch);
            return false;
        }
        for (uint32_t r = nw[k].first_rank; r < nw[k].first_rank + nw[k].ranks &&
                                            r < WF_DJOB_MAX_WORLD; r++) {
            snprintf(zs->keys[r], sizeof zs->keys[r], "%s", key);
            snprintf(zs->nodes[r], sizeof zs->nodes[r], "%.63s", nw[k].name);
            zs->key_ptrs[r] = zs->keys[r];
            zs->node_ptrs[r] = zs->nodes[r];
        }
    }
    zs->zw.cfg.curve = &zs->self;
    zs->zw.cfg.rank_keys = zs->key_ptrs;
    zs->zw.cfg.rank_nodes = zs->node_ptrs;
    return true;
}

/* The data plane of the world being joined: NCCL's when the world message
 * carried an id (every node said gpu; comm_nccl_boot.h), else comm_zmq.
 * Logged either way. */
static void world_plane(wf_world_t *w, wf_zworld_t *zw, uint64_t epoch)
{
    zw->nccl = wf_cluster_nccl_id(w->cluster, &zw->nccl_id);
    wf_log(w->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 ": data plane "
           "%s", epoch, zw->nccl ? "nccl (one communicator over the world, the "
           "mesh groups split from it)" : "zmq");
}

/* An NCCL world after an NCCL world that served here: may the survivors
 * shrink the communicator they hold (old: the nodes of that world)
 * instead of making a new one from the id? (comm_nccl_boot.h
 * wf_nccl_plan_loss; a rejoin or any other change is a new communicator.)
 * Every node computes it from the same two world messages. Logged. */
static void world_nccl_next(wf_world_t *w, wf_zworld_t *zw, const wf_cluster_node_t *old,
                            uint32_t n_old, bool prev_ok, const wf_cluster_node_t *nw,
                            uint32_t nn, uint64_t epoch)
{
    const wf_nccl_api_t *api = wf_nccl_api();
    bool can = prev_ok && api->shrink && api->version(api->arg) >= 22700;
    wf_nccl_span_t o[WF_SETTINGS_MAX_NODES], n[WF_SETTINGS_MAX_NODES];
    for (uint32_t i = 0; i < n_old; i++)
        o[i] = (wf_nccl_span_t){ old[i].name, old[i].first_rank, old[i].ranks };
    for (uint32_t i = 0; i < nn; i++)
        n[i] = (wf_nccl_span_t){ nw[i].name, nw[i].first_rank, nw[i].ranks };
    zw->nccl_shrink = wf_nccl_plan_loss(o, n_old, n, nn, can, zw->exclude,
                                        WF_DJOB_MAX_WORLD, &zw->n_exclude) ==
                      WF_NCCL_SHRINK;
    if (zw->nccl_shrink)
        wf_log(w->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 ": shrinking "
               "the NCCL communicator of epoch %" PRIu64 " without %d rank(s) from "
               "rank %d (%s; no new id)", epoch, w->nccl_epoch, zw->n_exclude,
               zw->exclude[0], api->name);
    else
        wf_log(w->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 ": a new NCCL "
               "communicator from the world message's id%s", epoch,
               prev_ok && !can ? " (no ncclCommShrink in this NCCL)" : "");
}

/* The control plane has a new world (forming): join it. */
static void cluster_new_world(wf_world_t *w, const wf_cluster_node_t *nw,
                              uint32_t nn, uint64_t epoch, uint64_t wid,
                              wf_mesh_degrees_t mdeg, uint64_t mepoch)
{
    /* the world this one follows, for an NCCL shrink */
    bool prev_ok = w->nccl_epoch != 0 && w->nccl_epoch == w->world_epoch && w->built &&
                   !w->install && !w->aborted;
    wf_cluster_node_t prev[WF_SETTINGS_MAX_NODES];
    uint32_t n_prev = w->n_nodes;
    memcpy(prev, w->nodes, n_prev * sizeof prev[0]);
    char lost[160] = "";
    size_t o = 0;
    for (uint32_t i = 0; i < w->n_nodes; i++)
        if (wf_world_node_index(nw, nn, w->nodes[i].name) < 0 && o + 1 < sizeof lost)
            o += (size_t)snprintf(lost + o, sizeof lost - o, "%s%s", o ? ", " : "",
                                  w->nodes[i].name);
    if (lost[0])
        wf_world_abort(w, lost, NULL);
    else if (!w->built || w->install)
        wf_world_abort(w, NULL, "the world re-formed before it served");
    if (wf_world_coordinator(w))
        wf_world_settle_remote(w, nw, nn, w->aborted, lost);
    w->xfer_ready = 0;     /* members say hi again on the new world */
    w->world_epoch = epoch;
    w->world_wid = wid;
    w->built = false;
    w->install = false;
    w->mesh_pending = false;   /* the world carries its mesh */
    w->sched->paused = true;

    uint32_t total = 0, first = 0;
    int self = -1;
    for (uint32_t k = 0; k < nn; k++) {
        total += nw[k].ranks;
        if (nw[k].self) {
            self = (int)k;
            first = nw[k].first_rank;
        }
    }
    if (self < 0 || total > WF_DJOB_MAX_WORLD || nw[self].ranks != w->n_workers) {
        wf_log(w->log, WF_LOG_ERR, "cluster: world of epoch %" PRIu64 " (%u "
               "ranks) cannot be served here (at most %d ranks)", epoch, total,
               WF_DJOB_MAX_WORLD);
        return;
    }
    zworld_sec_t *zs = calloc(1, sizeof *zs);
    wf_zworld_t *zw = zs ? &zs->zw : NULL;
    wf_comm_zmq_local_t *local = NULL;
    if (!zw || wf_comm_zmq_local_new(&local) != WF_OK) {
        free(zs);
        wf_log(w->log, WF_LOG_ERR, "cluster: out of memory");
        return;
    }
    if (w->keys && !fill_rank_keys(w, zs, nw, nn, epoch)) {
        free(zs);
        wf_comm_zmq_local_unref(&local);
        return;
    }
    for (uint32_t k = 0; k < nn; k++)
        if (!parse_data(nw[k].data, nw[k].ranks, &zw->eps[nw[k].first_rank])) {
            wf_log(w->log, WF_LOG_ERR, "cluster: node %s announced bad comm "
                   "endpoints '%s'; world of epoch %" PRIu64 " not joined",
                   nw[k].name, nw[k].data, epoch);
            free(zw);
            wf_comm_zmq_local_unref(&local);
            return;
        }
    for (uint32_t r = 0; r < total; r++)
        zw->ep_ptrs[r] = zw->eps[r];
    for (uint32_t d = 0; d < w->n_workers; d++) {
        if (w->spare[d] && strcmp(wf_comm_zmq_endpoint_address(w->spare[d]),
                                       zw->eps[first + d]) == 0) {
            zw->ep[d] = w->spare[d];
            w->spare[d] = NULL;
        } else {
            /* the world names an older endpoint of ours: the join binds it */
            wf_log(w->log, WF_LOG_WARNING, "cluster: world of epoch %" PRIu64
                   " names endpoint %s for rank %u; binding it", epoch,
                   zw->eps[first + d], first + d);
        }
    }
    wf_comm_zmq_local_unref(&w->local);
    w->local = local;
    w->aborted = false;
    zw->cfg.zmq_ctx = w->zctx;
    zw->cfg.local = wf_comm_zmq_local_ref(local);
    zw->cfg.world_id = wid;
    zw->cfg.nranks = (int)total;
    zw->cfg.endpoints = zw->ep_ptrs;
    zw->cfg.connect_timeout_ms = (int)w->settings->cluster_timeout_ms;
    zw->cfg.op_timeout_ms = 0;      /* node loss aborts blocked ranks */
    zw->cfg.max_message_bytes = (int64_t)wf_settings_data_msg_bytes(w->settings);
    zw->cfg.recv_messages = (int)w->settings->cluster_recv_messages;
    zw->cfg.unexpected_bytes = (int64_t)wf_settings_comm_unexpected(w->settings);
    world_plane(w, zw, epoch);
    if (zw->nccl)
        world_nccl_next(w, zw, prev, n_prev, prev_ok, nw, nn, epoch);
    if (bind_spares(w) == WF_OK)
        wf_cluster_set_data(w->cluster, w->data);

    wf_mesh_degrees_t deg = fit_mesh(mdeg, total);
    wf_mesh_t mesh;
    char err[256];
    if (wf_mesh_init(&mesh, &deg, (int)total, err, sizeof err) != WF_OK) {
        wf_log(w->log, WF_LOG_ERR, "cluster: mesh: %s", err);
        for (uint32_t d = 0; d < w->n_workers; d++)
            wf_comm_zmq_endpoint_destroy(&zw->ep[d]);
        wf_comm_zmq_local_unref(&zw->cfg.local);
        free(zw);
        return;
    }
    mesh.epoch = mepoch;
    memcpy(w->nodes, nw, nn * sizeof nw[0]);
    w->n_nodes = nn;
    w->first_rank = first;
    w->world_size = total;
    w->mesh = mesh;
    wf_djob_t *job = w->hooks.regroup_new(w->hooks.arg, &mesh);
    if (!job) {
        for (uint32_t d = 0; d < w->n_workers; d++)
            wf_comm_zmq_endpoint_destroy(&zw->ep[d]);
        wf_comm_zmq_local_unref(&zw->cfg.local);
        free(zw);
        wf_log(w->log, WF_LOG_ERR, "cluster: out of memory");
        return;
    }
    job->zworld = zw;
    job->seq = epoch;
    char m[96];
    wf_mesh_degrees_format(&deg, m, sizeof m);
    wf_log(w->log, WF_LOG_INFO, "cluster: joining the comm world of epoch %"
           PRIu64 ": ranks %u..%u of %u, mesh %s, mesh epoch %" PRIu64, epoch,
           first, first + w->n_workers - 1, total, m, mepoch);
    if (!wf_world_coordinator(w)) {
        wf_channel_connect(w->channel, wf_cluster_xfer(w->cluster), nw[self].name);
        wf_world_enqueue(w, job);   /* behind parts waiting for inputs */
    } else {
        wf_world_submit(w, job);
    }
}

/* The regroup of a cluster world ended. */
void wf_world_regroup_done(wf_world_t *w, const wf_djob_t *job, wf_status_t st)
{
    if (job->seq != w->world_epoch || job->zworld->cfg.world_id != w->world_wid)
        return;             /* an older world's */
    if (st != WF_OK) {
        wf_log(w->log, WF_LOG_WARNING, "cluster: communicators of epoch %"
               PRIu64 " not built: %s", job->seq, wf_status_str(st));
        return;
    }
    w->built = true;
    w->install = true;
    w->nccl_epoch = job->zworld->nccl ? job->seq : 0;
    wf_world_try_install(w);
}

/* May the coordinator dispatch? On a world that is built, installed, not
 * aborted, and serves: every member installed it too (a member refuses a
 * job's part before that, which would count as losing it). */
bool wf_world_ready(const wf_world_t *w)
{
    return w->built && !w->install && !w->aborted &&
           wf_cluster_serving(w->cluster);
}

/* Built, and the jobs of the old world are done: serve on the new one. */
void wf_world_try_install(wf_world_t *w)
{
    if (!w->install || w->sched->in_flight > 0)
        return;
    w->install = false;
    wf_sched_resize(w->sched, w->world_size, w->first_rank, &w->mesh);
    /* which node each rank is on, and which may take a job's roots: ours,
     * and members whose tensor channel said hi for this world */
    w->sched->remote_roots = wf_channel_socket(w->channel) != NULL &&
                             wf_world_coordinator(w);
    w->sched->roots_ok = w->xfer_ready;
    for (uint32_t i = 0; i < w->n_nodes; i++) {
        const wf_cluster_node_t *n = &w->nodes[i];
        for (uint32_t r = n->first_rank; r < n->first_rank + n->ranks &&
                                         r < WF_SETTINGS_MAX_DEVICES; r++)
            w->sched->node_of[r] = (uint8_t)i;
        if (n->self)
            w->sched->roots_ok |= 1u << i;
    }
    if (!wf_world_coordinator(w))
        wf_channel_send_hi(w->channel, w->world_epoch);
    char m[96];
    wf_mesh_degrees_format(&w->mesh.deg, m, sizeof m);
    wf_log(w->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 " built: "
           "ranks %u..%u of %u, mesh %s, mesh epoch %" PRIu64, w->world_epoch,
           w->first_rank, w->first_rank + w->n_workers - 1,
           w->world_size, m, w->mesh.epoch);
    wf_cluster_world_ready(w->cluster, w->world_epoch);
    /* members: once the coordinator's serve came (wf_world_sync) */
    w->hooks.installed(w->hooks.arg);
}

/* After the control plane ran: follow its world. */
void wf_world_sync(wf_world_t *w)
{
    wf_cluster_node_t nw[WF_SETTINGS_MAX_NODES];
    uint32_t nn = 0;
    uint64_t epoch = 0, wid = 0, mepoch = 0;
    wf_mesh_degrees_t mdeg;
    if (!wf_world_coordinator(w) &&
        wf_cluster_coordinator_lost(w->cluster) && w->local && !w->aborted) {
        wf_world_abort(w, "the coordinator", NULL);
        w->built = false;
    }
    uint64_t failed;
    char why[WF_PROTO_ERROR_MAX];
    if (wf_cluster_take_abort(w->cluster, &failed, why, sizeof why) &&
        failed == w->world_epoch) {
        w->failed_epoch = failed;
        wf_world_abort(w, NULL, why);
    }
    wf_cluster_current(w->cluster, nw, WF_SETTINGS_MAX_NODES, &nn, &epoch, &wid,
                       &mdeg, &mepoch);
    /* a new epoch, or the same epoch of a coordinator that restarted (its
     * count starts again; the world id is fresh per round) */
    if (nn > 0 && (epoch != w->world_epoch || wid != w->world_wid))
        cluster_new_world(w, nw, nn, epoch, wid, mdeg, mepoch);
}

/* Did a failure that started here abort this node's part of the world
 * of world_epoch (not the control plane: aborted is unset)? Then
 * report it, once, so that the coordinator rebuilds the world. A rank
 * that only saw the abort (WF_E_ABORTED: a peer failed, or died, which
 * the heartbeats find) reports nothing. A member reports with the failed
 * part's "done" (`part_st`, its own error, sent just before), so that the
 * coordinator has the job's own error first. The coordinator reports at
 * once, from its workers' counts of own failures: its job may still wait
 * for members' parts, which only the rebuild's "abort" releases (the
 * worker that failed woke us). */
bool wf_world_check_abort(wf_world_t *w, uint64_t part_seq, wf_status_t part_st)
{
    if (!w->local)
        return false;
    bool coord = wf_world_coordinator(w);
    uint64_t seq = part_seq;
    wf_status_t st = part_st;
    bool here = !coord && st != WF_OK && st != WF_E_ABORTED;
    if (coord) {
        /* counts before the abort flag: a step aborts, then is counted */
        for (uint32_t d = 0; d < w->n_workers; d++) {
            wf_worker_t *wk = &w->workers[d];
            uint64_t n = atomic_load(&wk->own_failures);
            if (n == w->own_failures[d])
                continue;
            w->own_failures[d] = n;
            if (!here) {
                here = true;
                seq = atomic_load(&wk->own_failed_seq);
                st = (wf_status_t)atomic_load(&wk->own_failed_status);
            }
        }
    }
    if (!here || !wf_comm_zmq_local_aborted(w->local) || w->aborted ||
        !w->built || w->install ||
        w->failed_epoch == w->world_epoch)
        return false;
    w->failed_epoch = w->world_epoch;
    wf_log(w->log, WF_LOG_WARNING, "cluster: job seq %" PRIu64 " failed here "
           "(%s) and aborted this node's part of the comm world of epoch %"
           PRIu64 "; %s", seq, wf_status_str(st), w->world_epoch,
           coord ? "rebuilding it" : "telling the coordinator");
    wf_cluster_world_failed(w->cluster, w->world_epoch, seq, st,
                            wf_now_usec());
    return coord;
}


wf_status_t wf_world_new(const wf_world_cfg_t *cfg, wf_world_t **ret)
{
    wf_world_t *w = calloc(1, sizeof *w);
    if (!w) {
        wf_log(cfg->log, WF_LOG_ERR, "cluster: out of memory");
        return WF_E_NO_MEMORY;
    }
    w->settings = cfg->settings;
    w->zctx = cfg->zctx;
    w->log = cfg->log;
    w->sched = cfg->sched;
    w->workers = cfg->workers;
    w->n_workers = cfg->n_workers;
    w->done = cfg->done;
    w->hooks = cfg->hooks;
    wf_zap_t *zap = cfg->zap;
    wf_status_t st = WF_OK;
    if (w->settings->node_keys[0] && !zap) {
        wf_log(w->log, WF_LOG_ERR, "cluster: node_keys without the ZAP handler");
        st = WF_E_INTERNAL;       /* the owner starts it before any bind */
    }
    if (st == WF_OK)
        st = wf_cluster_keys_load(w->settings, cfg->keys, zap, w->log, &w->keys);
    if (st == WF_OK)
        st = bind_spares(w);
    if (st == WF_OK)
        st = wf_cluster_new(w->settings, w->zctx, w->data, w->keys, cfg->fp8, w->log,
                            cfg->notify, &w->cluster);
    if (st != WF_OK)
        goto fail;
    wf_cluster_on_message(w->cluster, wf_world_on_message, w);
    st = wf_channel_new(w->zctx, wf_world_coordinator(w), w->settings, w->keys,
                        w->log, wf_world_on_channel, w, &w->channel);
    if (st != WF_OK)
        goto fail;
    if (wf_world_coordinator(w))
        wf_cluster_set_xfer(w->cluster, wf_channel_endpoint(w->channel));
    w->sched->remote = wf_world_remote;
    w->sched->remote_arg = w;
    *ret = w;
    return WF_OK;

fail:
    wf_world_destroy(&w);
    return st;
}

void wf_world_abort_local(wf_world_t *w)
{
    if (w && w->local)
        wf_comm_zmq_local_abort(w->local);
}

void wf_world_destroy(wf_world_t **pw)
{
    if (!pw || !*pw)
        return;
    wf_world_t *w = *pw;
    for (uint32_t d = 0; d < WF_SETTINGS_MAX_DEVICES; d++)
        wf_comm_zmq_endpoint_destroy(&w->spare[d]);
    wf_comm_zmq_local_unref(&w->local);
    wf_world_clear_queue(w);
    wf_channel_destroy(&w->channel);
    wf_cluster_destroy(&w->cluster);
    wf_cluster_keys_free(&w->keys);
    if (w->sched && w->sched->remote_arg == w) {
        w->sched->remote = NULL;
        w->sched->remote_arg = NULL;
    }
    free(w);
    *pw = NULL;
}

wf_cluster_t *wf_world_cluster(const wf_world_t *w)
{
    return w->cluster;
}

bool wf_world_coordinator(const wf_world_t *w)
{
    return wf_cluster_role(w->cluster) == WF_CLUSTER_COORDINATOR;
}

void *wf_world_channel_socket(const wf_world_t *w)
{
    return wf_channel_socket(w->channel);
}

void wf_world_recv(wf_world_t *w)
{
    wf_channel_recv(w->channel);
}

void wf_world_note_mesh(wf_world_t *w)
{
    if (wf_cluster_take_mesh(w->cluster, &w->mesh_deg, &w->mesh_epoch))
        w->mesh_pending = true;
}

bool wf_world_take_mesh(wf_world_t *w, wf_mesh_degrees_t *ret_deg,
                        uint64_t *ret_epoch)
{
    if (!w->mesh_pending)
        return false;
    w->mesh_pending = false;
    *ret_deg = w->mesh_deg;
    *ret_epoch = w->mesh_epoch;
    return true;
}

bool wf_world_forming(const wf_world_t *w)
{
    return !w->built || w->install || w->aborted;
}

uint64_t wf_world_epoch(const wf_world_t *w)
{
    return w->world_epoch;
}

uint32_t wf_world_first_rank(const wf_world_t *w)
{
    return w->first_rank;
}

wf_status_t wf_world_part_done(wf_world_t *w, wf_djob_t *job)
{
    wf_status_t st = (wf_status_t)atomic_load(&job->status);
    /* the roots' part answers with its outputs on the tensor channel; a
     * failure (or a channel that cannot take them) with "done" on the
     * control plane, ahead of any "aborted" */
    if (!job->root_here || st != WF_OK ||
        !wf_channel_send_outputs(w->channel, job)) {
        if (job->root_here && st == WF_OK)
            st = WF_E_INTERNAL;
        wf_world_member_done(w, job->seq, job->epoch, st);
    }
    return st;
}

void wf_world_job_done(wf_world_t *w, wf_djob_t *job)
{
    wf_world_unlink_remote(w, job);
    if (atomic_load(&job->status) == WF_OK)
        wf_cluster_job_ok(w->cluster);
}

void wf_world_explain(const wf_world_t *w, wf_djob_t *job, wf_status_t *st)
{
    if ((*st == WF_E_ABORTED || *st == WF_E_NODE_LOST) && w->lost[0] &&
        job->epoch == w->abort_mesh_epoch) {
        *st = WF_E_NODE_LOST;
        if (!job->err[0])
            snprintf(job->err, sizeof job->err, "node(s) %s lost during the "
                     "job (mesh epoch %" PRIu64 "); the world re-forms without "
                     "them", w->lost, job->epoch);
    } else if (*st == WF_E_ABORTED && !job->err[0] &&
               job->epoch == w->abort_mesh_epoch) {
        snprintf(job->err, sizeof job->err, "the cluster's comm world was "
                 "aborted by a failed job during this one (mesh epoch %"
                 PRIu64 "); it is rebuilt with the same nodes; retry", job->epoch);
    }
}
