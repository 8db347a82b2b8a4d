/* model_requests.c — resident models (models.h): load -> loader thread ->
 * install regroup -> ready; unload -> regroup without it; every regroup
 * re-cuts the shards for the mesh it installs (srv_models_after_regroup,
 * called through srv->hooks at the end of a regroup). Called by
 * requests.c and server.c; calls reconfigure.c and replies.c
 * (server_impl.h).
 */
#include "server_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Model m as list_models and load_model report it: the registry's
 * fields, and where its shards live on this daemon (the backend) and in
 * what dtype (the CPU computes in f32; a GPU holds the checkpoint's
 * dtype and accumulates in f32). */
static void srv_model_info(const wf_server_t *srv, const wf_model_t *m,
                           wf_model_info_t *ret)
{
    wf_model_info_fill(m, ret);
    snprintf(ret->device, sizeof ret->device, "%s", srv->ops->name);
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
                              uint64_t id)
{
    zmq_msg_t *idm = malloc(sizeof *idm);
    if (!idm)
        return false;
    zmq_msg_init(idm);
    zmq_msg_move(idm, identity);
    m->identity = idm;
    m->delim = delim;
    m->req_id = id;
    m->has_client = true;
    return true;
}

/* A regroup ended: installing models become ready (or fail), unloading
 * ones go; the shards now resident are what jobs cannot use. */
void srv_models_after_regroup(wf_server_t *srv, wf_status_t st)
{
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (!m)
            continue;
        if ((m->state == WF_MODEL_INSTALLING || m->state == WF_MODEL_READY) &&
            st == WF_OK) {
            /* its shards are cut for the mesh now in force */
            m->tp = srv->sched.mesh.deg.tp;
            m->rank_bytes = wf_model_rank_bytes(&srv->models, m, (int)m->tp);
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

/* Start the install regroup of the model the loader finished, unless a
 * reconfiguration runs (then its end calls this again). */
void srv_models_try_install(wf_server_t *srv)
{
    wf_model_t *m = srv->pending_install;
    if (!m || srv->reconf.active || srv->workers_stopped)
        return;
    srv->pending_install = NULL;
    char err[WF_PROTO_ERROR_MAX] = "";
    m->state = WF_MODEL_INSTALLING;
    const wf_reconf_req_t req = { .deg = srv->sched.mesh.deg, .why = "load model" };
    wf_status_t st = srv->stopping ? WF_E_SHUTTING_DOWN
                                   : srv_reconf_start(srv, &req, err, sizeof err);
    if (st == WF_OK)
        return;
    if (st == WF_E_SHUTTING_DOWN)
        snprintf(err, sizeof err, "daemon is shutting down; model not loaded");
    wf_log(srv->log, WF_LOG_INFO, "model '%s' not installed: %s", m->name, err);
    model_reply(srv, m, WF_OP_LOAD_MODEL, st, err);
    wf_registry_remove(&srv->models, m);
}

/* The loader thread finished. */
void srv_models_loaded(wf_server_t *srv)
{
    wf_model_t *m = wf_registry_take_loaded(&srv->models);
    if (!m)
        return;
    if (m->status != WF_OK) {
        wf_log(srv->log, WF_LOG_INFO, "load of model '%s' (%s) refused: %s: %s",
               m->name, m->path, wf_status_name(m->status), m->err);
        model_reply(srv, m, WF_OP_LOAD_MODEL, m->status, m->err);
        wf_registry_remove(&srv->models, m);
        return;
    }
    wf_log(srv->log, WF_LOG_INFO, "model '%s' read: %.1f MiB in %" PRIu64 " ms",
           m->name, (double)m->bytes_total / 1048576.0, m->load_ms);
    srv->pending_install = m;
    srv_models_try_install(srv);
}

/* Refusal common to the model ops: member nodes and clusters. */
static bool models_refused(wf_server_t *srv, char *err, size_t err_len,
                           wf_status_t *st)
{
    if (srv->stopping) {
        *st = WF_E_SHUTTING_DOWN;
        snprintf(err, err_len, "daemon is shutting down");
        return true;
    }
    if (srv->world) {
        *st = WF_E_UNAVAILABLE;
        snprintf(err, err_len, "resident models are served by single-node "
                 "daemons for now; this one is part of a cluster");
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
    uint64_t avail = srv_min_device_memory(srv);
    avail = avail > srv->sched.resident ? avail - srv->sched.resident : 0;
    st = wf_registry_start_load(&srv->models, &req->args.load_model,
                                (int)srv->sched.mesh.deg.tp, avail, &m, err,
                                sizeof err);
    if (st != WF_OK)
        goto reject;
    if (!model_take_client(m, identity, delim, req->id))
        wf_log(srv->log, WF_LOG_ERR, "load %" PRIu64 ": out of memory; the "
               "client gets no reply", req->id);
    wf_log(srv->log, WF_LOG_INFO, "loading model '%s' from %s (tp plan: %s)",
           m->name, m->path,
           req->args.load_model.weights_already_sharded ? "the files'"
           : req->args.load_model.n_plan == 0 ? "default" : "given");
    srv->t_extend_us = 0;
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
    if (m->state != WF_MODEL_READY) {
        st = WF_E_BUSY;
        snprintf(err, sizeof err, "model '%s' is %s; retry when it is ready",
                 name, m->state == WF_MODEL_UNLOADING ? "unloading" : "loading");
        goto reject;
    }
    m->state = WF_MODEL_UNLOADING;
    const wf_reconf_req_t rreq = { .deg = srv->sched.mesh.deg, .why = "unload model" };
    st = srv_reconf_start(srv, &rreq, err, sizeof err);
    if (st != WF_OK) {
        m->state = WF_MODEL_READY;
        goto reject;
    }
    if (!model_take_client(m, identity, delim, req->id))
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
 * timeouts stretch) and what it is doing. */
void srv_models_notify(wf_server_t *srv, uint64_t now)
{
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
