/* reconfigure.c — hot reconfiguration (DESIGN.md): validate, pause
 * dispatch, drain the running jobs, regroup every worker, epoch + 1,
 * resume. Also the recovery after an aborted world (same mesh, new world),
 * a model's install or unload (same mesh: the regroup re-cuts the shards)
 * and, on a member, the coordinator's mesh change. A reconfiguration is
 * asked for with one wf_reconf_req_t, which carries its completion
 * (srv_reconf_done_t: the models follow the new mesh): its end is told
 * there, never through a call into the files above. Called by
 * requests.c, model_requests.c and server.c; calls dispatch.c and
 * replies.c (server_impl.h).
 */
#include "server_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm_nccl.h"

/* A regroup job for every worker: split the world (a new one when
 * `world` is set: an NCCL world when srv->nccl) into the groups of
 * `mesh`. NULL when out of memory. */
wf_djob_t *srv_regroup_new(wf_server_t *srv, const wf_mesh_t *mesh,
                           wf_comm_host_world_t *world)
{
    wf_djob_t *job = wf_djob_new();
    if (!job)
        return NULL;
    job->kind = WF_DJOB_REGROUP;
    job->mesh = *mesh;
    job->plan_epoch = mesh->epoch;
    job->epoch = mesh->epoch;
    job->world = world;
    if (world && srv->nccl) {
        job->nccl = wf_comm_nccl_unique_id(&job->nccl_id) == WF_OK;
        if (!job->nccl)
            wf_log(srv->log, WF_LOG_WARNING, "ncclGetUniqueId failed: this world "
                   "uses the host comm");
    }
    job->run = wf_worker_regroup_run;
    job->group_size = (int)srv->n_workers;
    job->rank_base = srv->world ? (int)wf_world_first_rank(srv->world) : 0;
    wf_registry_target_set(&srv->models, &job->models);
    job->done = &srv->done;
    atomic_store(&job->remaining, job->group_size);
    for (int r = 0; r < job->group_size; r++) {
        job->device[r] = (uint32_t)r;       /* rank = device index */
        job->task[r].job = job;
        job->task[r].rank = r;
    }
    return job;
}

void srv_regroup_submit(wf_server_t *srv, wf_djob_t *job)
{
    job->t_dispatch_us = wf_now_usec();
    for (int r = 0; r < job->group_size; r++)
        wf_worker_submit(&srv->workers[r], &job->task[r]);
}

/* Bytes of the smallest device: what resident shards may take per rank. */
uint64_t srv_min_device_memory(const wf_server_t *srv)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t d = 0; d < srv->n_workers; d++)
        if (srv->workers[d].memory_total < m)
            m = srv->workers[d].memory_total;
    return m == UINT64_MAX ? 0 : m;
}

/* Drained? Then put the regroup job on every worker. */
void srv_reconf_advance(wf_server_t *srv)
{
    if (!srv->reconf.active || srv->reconf.regrouping || srv->sched.in_flight > 0 ||
        srv->workers_stopped)
        return;
    srv->reconf.t_drained_us = wf_now_usec();
    wf_comm_host_world_t *fresh = NULL;
    if (srv->reconf.new_world) {
        wf_status_t st = wf_comm_host_world_new((int)srv->n_workers, &fresh);
        if (st != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "comm world: %s", wf_status_str(st));
            srv_reconf_finish(srv, st);
            return;
        }
    }
    wf_djob_t *job = srv_regroup_new(srv, &srv->reconf.target, fresh);
    if (!job) {
        wf_comm_host_world_unref(&fresh);
        wf_log(srv->log, WF_LOG_ERR, "reconfiguration: out of memory");
        srv_reconf_finish(srv, WF_E_INTERNAL);
        return;
    }
    if (fresh) {
        /* The workers' handles keep the old world alive until they drop
         * them in the regroup. */
        wf_comm_host_world_unref(&srv->host_world);
        srv->host_world = fresh;
    }
    srv->reconf.regrouping = true;
    /* Cluster: every node's workers split the world the same way; the
     * members queue their regroup behind the job parts they hold. */
    if (srv->world && wf_world_coordinator(srv->world))
        wf_cluster_broadcast_mesh(wf_world_cluster(srv->world),
                                  &srv->reconf.target.deg, srv->reconf.target.epoch);
    srv_regroup_submit(srv, job);
}

/* Start a reconfiguration to req->deg (the same degrees too: a regroup):
 * see server_impl.h. A cluster world is rebuilt by the control plane,
 * never here: req->new_world counts on a single node only. */
wf_status_t srv_reconf_start(wf_server_t *srv, const wf_reconf_req_t *req,
                             char *err, size_t err_len)
{
    if (srv->stopping && req->identity) {
        snprintf(err, err_len, "daemon is shutting down; no reconfiguration");
        return WF_E_SHUTTING_DOWN;
    }
    wf_mesh_t target = srv->sched.mesh;
    if (srv->world && wf_world_forming(srv->world)) {
        snprintf(err, err_len, "the cluster world is forming; retry when it serves");
        return WF_E_BUSY;
    }
    if (wf_mesh_reconfigure(&target, &req->deg, err, err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (srv->reconf.active) {
        char to[96];
        wf_mesh_degrees_format(&srv->reconf.target.deg, to, sizeof to);
        snprintf(err, err_len, "a reconfiguration is running (to %s, %s); "
                 "retry when it is done", to, srv->reconf.why);
        return WF_E_BUSY;
    }
    /* Resident models are re-cut for the new tp: they must divide and fit
     * before anything changes. */
    wf_status_t mst = wf_registry_check_tp(&srv->models, (int)target.deg.tp,
                                           srv_min_device_memory(srv), NULL, err,
                                           err_len);
    if (mst != WF_OK)
        return mst;
    if (req->epoch)
        target.epoch = req->epoch;
    srv->reconf.active = true;
    srv->reconf.world_epoch = srv->world ? wf_world_epoch(srv->world) : 0;
    srv->reconf.regrouping = false;
    srv->reconf.new_world = req->new_world && !srv->world;
    srv->reconf.target = target;
    srv->reconf.why = req->why;
    srv->reconf.notify = req->notify;
    srv->reconf.has_client = req->identity != NULL;
    if (req->identity)
        zmq_msg_move(&srv->reconf.identity, req->identity);
    srv->reconf.delim = req->delim;
    srv->reconf.id = req->id;
    srv->reconf.version = srv->reply_version;   /* the request being handled */
    srv->reconf.done = req->done;
    srv->reconf.t_start_us = wf_now_usec();
    srv->sched.paused = true;
    if (req->notify && !req->reloading_sent)
        wf_notify_reloading(&srv->notify);
    srv_reconf_advance(srv);
    return WF_OK;
}

/* The regroup ended with st (or could not start): install the mesh and
 * resume, answer the client; after a failed regroup rebuild the world on
 * the old mesh (the workers' groups are gone). */
void srv_reconf_finish(wf_server_t *srv, wf_status_t st)
{
    uint64_t now = wf_now_usec();
    /* every worker dropped its sessions' cache states at the regroup */
    wf_sessions_unplace_all(&srv->sched);
    char from[96], to[96];
    wf_mesh_degrees_format(&srv->sched.mesh.deg, from, sizeof from); /* before it changes */
    wf_mesh_degrees_format(&srv->reconf.target.deg, to, sizeof to);
    if (st == WF_OK && srv->world && srv->reconf.world_epoch != wf_world_epoch(srv->world))
        st = WF_E_ABORTED;    /* a new world superseded it (with its own mesh) */
    srv_metrics_reconfigured(srv, st == WF_OK, now - srv->reconf.t_start_us);
    if (st == WF_OK) {
        srv->sched.mesh = srv->reconf.target;
        srv->reconf.failures = 0;
        wf_log(srv->log, WF_LOG_INFO, "reconfigured (%s): %s -> %s, epoch %"
               PRIu64 ", drain %.1f ms, regroup %.1f ms", srv->reconf.why, from,
               to, srv->sched.mesh.epoch,
               (double)(srv->reconf.t_drained_us - srv->reconf.t_start_us) / 1e3,
               (double)(now - srv->reconf.t_drained_us) / 1e3);
    } else {
        srv->reconf.failures++;
        wf_log(srv->log, WF_LOG_ERR, "reconfiguration (%s) %s -> %s failed: %s",
               srv->reconf.why, from, to, wf_status_str(st));
    }
    const srv_reconf_done_t done = srv->reconf.done; /* a recovery keeps it; the
                                                        finished call may start
                                                        another */
    if (done.regrouped)
        done.regrouped(srv, st, done.arg); /* resident models follow the mesh */
    if (srv->reconf.has_client) {
        srv->reply_version = srv->reconf.version;
        if (st == WF_OK) {
            wf_reply_t *rep = srv_reply_ok(srv, srv->reconf.id, WF_OP_RECONFIGURE);
            rep->result.reconfigure.epoch = srv->sched.mesh.epoch;
            rep->result.reconfigure.mesh = srv->sched.mesh.deg;
            srv_reply_send(srv, &srv->reconf.identity, srv->reconf.delim, rep, NULL);
        } else {
            srv_reply_fail(srv, &srv->reconf.identity, srv->reconf.delim,
                           srv->reconf.id, WF_OP_RECONFIGURE, WF_E_INTERNAL,
                           "reconfiguration failed: the communicators could not be "
                           "rebuilt; the mesh is unchanged");
        }
        zmq_msg_close(&srv->reconf.identity);
        zmq_msg_init(&srv->reconf.identity);
        srv->reconf.has_client = false;
    }
    if (st != WF_OK && srv->reconf.failures < 3 && !srv->workers_stopped &&
        !srv->world) {
        /* Rebuild on the mesh in force, with a new world. */
        srv->reconf.regrouping = false;
        srv->reconf.new_world = true;
        srv->reconf.target = srv->sched.mesh;
        srv->reconf.target.epoch++;
        srv->reconf.why = "recovery";
        srv->reconf.t_start_us = now;
        srv_reconf_advance(srv);
        return;
    }
    if (st != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "communicators unavailable: "
               "context-parallel jobs will fail");
    srv->reconf.active = false;
    srv->reconf.regrouping = false;
    srv->sched.paused = srv->world && !wf_world_ready(srv->world);
    if (srv->reconf.notify) {
        char line[WF_SETTINGS_ENDPOINT_MAX + 256];
        srv_status_line(srv, line, sizeof line);
        wf_notify_ready(&srv->notify, line);
    }
    /* Jobs queued meanwhile were planned for the old mesh. */
    srv_replan(srv);
    if (done.finished)
        done.finished(srv, done.arg);  /* a model install may wait for this */
}

/* Member: the coordinator's mesh change, once the previous regroup's
 * completion was taken (both may arrive in one wake-up; the workers run
 * the regroups in order anyway). */
void srv_reconf_apply_pending(wf_server_t *srv, const srv_reconf_done_t *done)
{
    wf_mesh_degrees_t deg;
    uint64_t epoch;
    if (srv->reconf.active || !wf_world_take_mesh(srv->world, &deg, &epoch))
        return;
    char err[WF_PROTO_ERROR_MAX];
    const wf_reconf_req_t req = { .deg = deg, .epoch = epoch, .why = "coordinator",
                                  .done = *done };
    if (srv_reconf_start(srv, &req, err, sizeof err) != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "cluster: mesh from the coordinator not "
               "applied: %s", err);
}

/* Does the running reconfiguration give up after reconfigure_timeout_ms?
 * A client's reconfigure request that is still draining (a recovery on a
 * new world, a model's regroup, SIGHUP and the coordinator's mesh on a
 * member must happen, and wait). */
static bool reconf_may_give_up(const wf_server_t *srv)
{
    return srv->reconf.active && !srv->reconf.regrouping && srv->reconf.has_client &&
           !srv->reconf.new_world && srv->settings.reconfigure_timeout_ms > 0 &&
           !srv->workers_stopped;
}

int srv_reconf_timeout_ms(const wf_server_t *srv, uint64_t now_us)
{
    if (!reconf_may_give_up(srv))
        return -1;
    uint64_t end = srv->reconf.t_start_us +
                   (uint64_t)srv->settings.reconfigure_timeout_ms * 1000;
    return now_us >= end ? 0 : (int)((end - now_us + 999) / 1000);
}

void srv_reconf_tick(wf_server_t *srv, uint64_t now_us)
{
    if (srv_reconf_timeout_ms(srv, now_us) != 0)
        return;
    char from[64], to[64], msg[WF_PROTO_ERROR_MAX + 64];
    wf_mesh_degrees_format(&srv->sched.mesh.deg, from, sizeof from);
    wf_mesh_degrees_format(&srv->reconf.target.deg, to, sizeof to);
    snprintf(msg, sizeof msg, "reconfiguration to %s gave up after "
             "reconfigure_timeout_ms %u: %u job(s) still running; the mesh in "
             "force (%s, epoch %" PRIu64 ") keeps serving", to,
             srv->settings.reconfigure_timeout_ms, srv->sched.in_flight, from,
             srv->sched.mesh.epoch);
    wf_log(srv->log, WF_LOG_WARNING, "%s", msg);
    srv_reply_error(srv, &srv->reconf.identity, srv->reconf.delim, srv->reconf.id,
                    WF_OP_RECONFIGURE, WF_E_BUSY, msg);
    zmq_msg_close(&srv->reconf.identity);
    zmq_msg_init(&srv->reconf.identity);
    srv->reconf.has_client = false;
    srv->reconf.active = false;
    srv->sched.paused = srv->world && !wf_world_ready(srv->world);
    if (srv->reconf.notify) {
        char line[WF_SETTINGS_ENDPOINT_MAX + 256];
        srv_status_line(srv, line, sizeof line);
        wf_notify_ready(&srv->notify, line);
    }
    srv_dispatch(srv);                 /* queued jobs resume on the old mesh */
    const srv_reconf_done_t done = srv->reconf.done;
    if (done.finished)
        done.finished(srv, done.arg);  /* a model install may wait for this */
}
