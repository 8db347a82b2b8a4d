/* dispatch.c — planning jobs for a mesh, dispatching what fits, and
 * re-planning the queue after the mesh changed; jobs that fail to start
 * are answered here (replies.c). Called by requests.c, reconfigure.c and
 * server.c (server_impl.h).
 */
#include "server_impl.h"

#include <inttypes.h>
#include <stdio.h>

#include "errf.h"
#include "cluster/model_load.h"
#include "jobs/attention.h"
#include "jobs/forward.h"

static wf_status_t plan_forward(wf_server_t *srv, wf_djob_t *job, const wf_mesh_t *mesh,
                                char *err, size_t err_len);
static wf_status_t plan_attention(wf_server_t *srv, wf_djob_t *job,
                                  const wf_mesh_t *mesh, char *err, size_t err_len);

bool srv_devices_fp8(const wf_server_t *srv, const char **ret_name)
{
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        const wf_worker_t *w = &srv->workers[d];
        if (!srv->ops->attention_fp8_ok || !srv->ops->attention_fp8_ok(w->device)) {
            if (ret_name)
                *ret_name = w->name;
            return false;
        }
    }
    return true;
}

/* A planned job asking for precision fp8: this daemon's devices, and on a
 * coordinator every node of the world, must take it. The job may run on
 * any device (the replica is chosen at dispatch), so all are asked. */
static wf_status_t fp8_check(const wf_server_t *srv, const wf_djob_t *job, char *err,
                             size_t err_len)
{
    bool fp8 = job->req.op == WF_OP_FORWARD ? job->req.args.forward.fp8
                                            : job->req.args.attention.fp8;
    if (!fp8)
        return WF_OK;
    char q[WF_QUOTE_MAX];
    const char *dev = NULL;
    if (!srv_devices_fp8(srv, &dev)) {
        snprintf(err, err_len, "precision fp8: device %s has no fp8 tensor cores "
                 "(the %s backend; send precision \"default\")", wf_quote(q, dev),
                 srv->ops->name);
        return WF_E_UNSUPPORTED;
    }
    if (srv->world) {
        wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
        uint32_t n = 0;
        uint64_t epoch = 0, wid = 0, mepoch = 0;
        wf_mesh_degrees_t deg;
        /* the world the job would run in (also one being rebuilt) */
        wf_cluster_current(wf_world_cluster(srv->world), nodes, WF_SETTINGS_MAX_NODES,
                           &n, &epoch, &wid, &deg, &mepoch);
        for (uint32_t i = 0; i < n; i++)
            if (!nodes[i].fp8) {
                snprintf(err, err_len, "precision fp8: node %s of the cluster has a "
                         "device without fp8 tensor cores (its hello did not say "
                         "fp8); send precision \"default\"", wf_quote(q, nodes[i].name));
                return WF_E_UNSUPPORTED;
            }
    }
    return WF_OK;
}

/* The plan, then the fp8 check (PROTOCOL.md section 6, step 11: after
 * the job against the mesh, before any admission). */
wf_status_t srv_plan_job(wf_server_t *srv, wf_djob_t *job, const wf_mesh_t *mesh,
                         char *err, size_t err_len)
{
    wf_status_t st = job->req.op == WF_OP_FORWARD
                         ? plan_forward(srv, job, mesh, err, err_len)
                         : plan_attention(srv, job, mesh, err, err_len);
    return st == WF_OK ? fp8_check(srv, job, err, err_len) : st;
}

/* Plan a forward for `mesh` on its model, which must be ready (and, in a
 * cluster, held by the nodes its replica spans). */
static wf_status_t plan_forward(wf_server_t *srv, wf_djob_t *job, const wf_mesh_t *mesh,
                                char *err, size_t err_len)
{
    const char *name = job->req.args.forward.model;
    const wf_model_t *m = wf_registry_find(&srv->models, name);
    if (!m || m->state != WF_MODEL_READY) {
        snprintf(err, err_len, "model '%s' is not loaded%s", name,
                 m ? " yet (it is loading)" : "");
        return WF_E_BAD_ARGUMENT;
    }
    if (wf_mload_forward_refused(srv->world, &srv->sched, m, mesh, err, err_len))
        return WF_E_UNAVAILABLE;
    /* the ring's rotation: the daemon's rotate_method, as for attention
     * jobs that do not name one */
    job->rotate_method = srv->settings.rotate_method == WF_ROTATE_ALLTOALL
                             ? WF_ROTATE_ALLTOALL
                             : WF_ROTATE_ALLGATHER;
    /* a split job's replicas all run on this node's workers: in a cluster
     * the forward runs unsplit (the same output) */
    if (srv->sched.cluster)
        job->req.args.forward.split_batch = false;
    return wf_forward_plan(job, srv->ops, mesh, m, err, err_len);
}

/* Plan an attention job for `mesh`. Cluster: a head-split job (no
 * communication, every rank reads the frames) runs on this node's
 * devices only, so its device count is capped at them. */
static wf_status_t plan_attention(wf_server_t *srv, wf_djob_t *job,
                                  const wf_mesh_t *mesh, char *err, size_t err_len)
{
    wf_status_t st = wf_attention_plan(job, srv->ops, mesh, &srv->settings, err,
                                       err_len);
    if (st == WF_OK && srv->world && !job->cp &&
        (uint32_t)job->group_size > srv->n_workers) {
        wf_attention_args_t *a = &job->req.args.attention;
        uint32_t asked = a->devices;
        a->devices = srv->n_workers;
        st = wf_attention_plan(job, srv->ops, mesh, &srv->settings, err, err_len);
        a->devices = asked;
    }
    return st;
}

static wf_status_t plan_for_mesh(wf_djob_t *job, const wf_mesh_t *mesh, void *arg)
{
    wf_server_t *srv = arg;
    job->err[0] = '\0';
    return srv_plan_job(srv, job, mesh, job->err, sizeof job->err);
}

/* Dispatch what fits and answer the jobs that failed to start. */
void srv_dispatch(wf_server_t *srv)
{
    if (srv->workers_stopped)
        return;
    wf_djob_t *failed = NULL;
    wf_sched_dispatch(&srv->sched, wf_now_usec(), &failed);
    while (failed) {
        wf_djob_t *next = failed->next;
        srv_reply_job(srv, failed);
        wf_djob_free(&failed);
        failed = next;
    }
}

void srv_replan(wf_server_t *srv)
{
    wf_djob_t *failed = NULL;
    wf_sched_replan(&srv->sched, plan_for_mesh, srv, &failed);
    while (failed) {
        wf_djob_t *next = failed->next;
        srv_reply_job(srv, failed);
        wf_djob_free(&failed);
        failed = next;
    }
    srv_dispatch(srv);
}

/* ---- time: compute-size admission, deadlines ---------------------------- */

wf_status_t srv_time_admit(wf_server_t *srv, wf_djob_t *job, char *err,
                           size_t err_len)
{
    const wf_settings_t *s = &srv->settings;
    if (s->max_job_flops && job->flops > s->max_job_flops) {
        snprintf(err, err_len, "estimated work %.3g flops exceeds max_job_flops "
                 "%.3g", (double)job->flops, (double)s->max_job_flops);
        return WF_E_LIMIT;
    }
    uint32_t own = job->req.op == WF_OP_FORWARD ? job->req.args.forward.deadline_ms
                                                : job->req.args.attention.deadline_ms;
    uint32_t ms = own;
    if (s->job_timeout_ms && (ms == 0 || s->job_timeout_ms < ms))
        ms = s->job_timeout_ms;
    job->deadline_us = ms ? job->t_recv_us + (uint64_t)ms * 1000 : 0;
    return WF_OK;
}

void srv_expire(wf_server_t *srv, uint64_t now_us)
{
    wf_djob_t *failed = NULL;
    wf_sched_expire(&srv->sched, now_us, &failed);
    while (failed) {
        wf_djob_t *next = failed->next;
        wf_log(srv->log, WF_LOG_INFO, "job %" PRIu64 ": %s", failed->req.id,
               failed->err);
        srv_reply_job(srv, failed);
        wf_djob_free(&failed);
        failed = next;
    }
}

int srv_expire_timeout_ms(const wf_server_t *srv, uint64_t now_us)
{
    uint64_t t = wf_sched_next_deadline(&srv->sched);
    if (t == 0)
        return -1;
    if (t <= now_us)
        return 0;
    uint64_t ms = (t - now_us + 999) / 1000;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}
