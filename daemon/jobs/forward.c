/* forward.c — forward jobs: plan and per-rank step (see forward.h). On a
 * backend with device memory the rank's workspace comes from the
 * context's arena (dev_alloc) and goes back after the run (dev_reset);
 * the shards are resident there already (models.h), the frames and the
 * output stay host memory. */
#include "forward.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "models/family_run.h"
#include "runtime/worker.h"

/* The agreed layer boundaries: step 0 is the start of the run
 * (wf_forward_step), layer i is i + 1. */
static wf_status_t layer_boundary(void *arg, int64_t step, bool ahead)
{
    return ahead ? wf_djob_boundary_ahead(arg, step + 1) : wf_djob_boundary(arg, step + 1);
}

/* The bound forward of a job, with the frames' pointers when `frames`
 * (the root's). */
static void io_of(const wf_djob_t *job, bool frames, wf_fwd_io_t *io)
{
    const wf_tensor_desc_t *t = job->req.tensors;
    zmq_msg_t *f = (zmq_msg_t *)job->frames;
    memset(io, 0, sizeof *io);
    io->bind = &job->bind;
    io->n_in = job->n_in;
    for (uint32_t k = 0; k < job->n_in; k++) {
        int i = job->bind.in[k];
        if (i < 0)
            continue;
        io->in[k] = &t[i];
        if (frames)
            io->in_data[k] = zmq_msg_data(&f[t[i].frame]);
    }
    io->n_out = job->n_outputs;
    for (uint32_t o = 0; o < job->n_outputs; o++) {
        io->out[o] = &job->out_desc[o];
        if (frames)
            io->out_data[o] = job->out[o];
    }
    io->fp8 = job->req.args.forward.fp8;
    io->alltoall = job->rotate_method == WF_ROTATE_ALLTOALL;
    io->boundary = layer_boundary;      /* every rank's */
    io->boundary_arg = (void *)job;
}

wf_status_t wf_forward_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                            const wf_mesh_t *mesh, const wf_model_t *m,
                            char *err, size_t err_len)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    job->kind = WF_DJOB_FORWARD;
    job->mesh = *mesh;
    job->plan_epoch = mesh->epoch;
    job->model_id = m->id;
    job->model_lid = m->lid;
    job->frun = m->run;
    job->mcfg = m->cfg;
    job->n_in = m->schema.n_inputs;
    const void *cfg = m->cfg.b;
    /* the tensors against the model's schema: names, dtypes, ranks, sizes */
    wf_status_t st = wf_schema_bind(&m->schema, m->name, job->req.tensors,
                                    job->req.n_tensors, &job->bind, err, err_len);
    if (st != WF_OK)
        return st;
    job->flops = m->cfg.fam->flops(cfg, m->params, &job->bind);
    /* the load refused such a model already: a guard */
    wf_status_t cs = m->run->backend_check(cfg, ops, err, err_len);
    if (cs != WF_OK)
        return cs;
    if (m->schema.n_outputs < 1 || m->schema.n_outputs > WF_DJOB_MAX_OUTPUTS) {
        snprintf(err, err_len, "model '%s' has %u outputs, at most %d", m->name,
                 m->schema.n_outputs, WF_DJOB_MAX_OUTPUTS);
        return WF_E_INTERNAL;
    }
    /* out_dtype: by default the dtype of the first input */
    const wf_tensor_desc_t *first = &job->req.tensors[job->bind.in[0] >= 0 ? job->bind.in[0] : 0];
    wf_dtype_t odt = a->has_out_dtype ? a->out_dtype : first->dtype;
    uint64_t out_bytes = 0;
    for (uint32_t o = 0; o < m->schema.n_outputs; o++) {
        st = wf_schema_output(&m->schema, o, &job->bind, odt, o, &job->out_desc[o], err,
                              err_len);
        if (st != WF_OK)
            return st == WF_E_BAD_SHAPE ? WF_E_BAD_ARGUMENT : st;
        out_bytes += job->out_desc[o].nbytes;
    }
    job->n_outputs = m->schema.n_outputs;
    int T = (int)mesh->deg.tp, R = (int)mesh->deg.ring, U = (int)mesh->deg.ulysses;
    wf_fwd_io_t io;
    io_of(job, false, &io);
    st = m->run->forward_check(cfg, &io, T, R, U, err, err_len);
    /* On the wire WF_E_BAD_SHAPE means a descriptor invalid on its own
     * (PROTOCOL.md section 6); inputs that do not fit the model or a
     * sequence the mesh cannot shard are WF_E_BAD_ARGUMENT (section 12.4),
     * with the family's message, as attention's plan does. */
    if (st == WF_E_BAD_SHAPE)
        st = WF_E_BAD_ARGUMENT;
    if (st != WF_OK)
        return st;
    size_t hws = 0;
    size_t ws = m->run->workspace(cfg, &io, T, R, U, ops, &hws);
    if (ws == SIZE_MAX || hws == SIZE_MAX) {
        snprintf(err, err_len, "forward workspace overflows");
        return WF_E_BAD_ARGUMENT;
    }
    job->cp = true;     /* every rank of the replica, rank = replica rank */
    job->group_size = R * U * T;
    memset(job->reserve, 0, sizeof job->reserve);
    /* What the device holds: on the CPU the workspace and, on the root,
     * the outputs (host memory both); on a device the workspace in the
     * arena (dev_alloc rounds to 256 bytes), the outputs and the small
     * host workspace being host memory (as attention jobs count them). */
    uint64_t own = ops->dev_alloc ? ((uint64_t)ws + 255) & ~(uint64_t)255 : ws;
    for (int r = 0; r < job->group_size; r++)
        job->reserve[r] = own + (r == 0 && !ops->dev_alloc ? out_bytes : 0);
    job->run = wf_forward_step;
    return WF_OK;
}

wf_status_t wf_forward_step(wf_djob_t *job, int rank, int group_size,
                            wf_worker_t *w)
{
    (void)group_size;
    wf_status_t st = WF_E_INTERNAL;
    const wf_rank_model_t *rm = wf_rank_models_find(&w->models, job->model_id);
    const void *shard = rm ? rm->shard : NULL;
    if (!w->world || !shard || w->mesh.epoch != job->epoch ||
        memcmp(&w->mesh.deg, &job->mesh.deg, sizeof w->mesh.deg) != 0) {
        /* the scheduler only dispatches between regroups, which install
         * the shards: a bug */
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 " finds no shard "
               "of model %" PRIu64 " for epoch %" PRIu64, w->name, job->seq,
               job->model_id, job->epoch);
        goto out;
    }
    if (rank == 0 && job->root_here && (!job->inputs_in || job->inputs_bad)) {
        /* a cluster member's root whose inputs did not come right
         * (cluster/world_jobs.c): fail, aborting the world */
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 ": its inputs from "
               "the coordinator are missing or do not match", w->name, job->seq);
        goto out;
    }
    st = wf_djob_boundary(job, 0);      /* the start: before any collective */
    if (st != WF_OK)
        return st;
    const wf_mesh_t *m = &job->mesh;
    wf_fwd_io_t io;
    io_of(job, rank == 0, &io);
    wf_fwd_group_t grp = {
        .tp = m->deg.tp > 1 ? w->group[WF_MESH_DIM_TP] : NULL,
        .seq = m->deg.ring * m->deg.ulysses > 1 ? w->group[WF_MESH_DIM_SEQ] : NULL,
        .ring = m->deg.ring > 1 ? w->group[WF_MESH_DIM_RING] : NULL,
        .ulysses = m->deg.ulysses > 1 ? w->group[WF_MESH_DIM_ULYSSES] : NULL,
        .tp_degree = (int)m->deg.tp,
        .ring_degree = (int)m->deg.ring,
        .ulysses_degree = (int)m->deg.ulysses,
    };
    const wf_backend_ops_t *o = w->ops;
    size_t hbytes = 0;
    const wf_family_run_t *fr = job->frun;
    size_t bytes = fr->workspace(job->mcfg.b, &io, grp.tp_degree, grp.ring_degree,
                                 grp.ulysses_degree, o, &hbytes);
    if (bytes == SIZE_MAX || hbytes == SIZE_MAX)
        goto out;
    if (!o->dev_alloc) {
        void *ws = wf_worker_workspace(w, bytes);
        if (!ws) {
            st = WF_E_NO_MEMORY;
            goto out;
        }
        st = fr->run(shard, &io, &grp, o, w->ctx, ws, bytes, NULL, 0);
        goto out;
    }
    /* device: the workspace from the arena, the host part from the
     * worker's host workspace; the run leaves nothing queued, but a
     * failure before it may have: synchronize before the arena goes */
    void *hws = wf_worker_workspace(w, hbytes);
    void *dws = NULL;
    st = hws ? o->dev_alloc(w->ctx, bytes ? bytes : 256, &dws) : WF_E_NO_MEMORY;
    if (st == WF_OK)
        st = fr->run(shard, &io, &grp, o, w->ctx, dws, bytes, hws, hbytes);
    else
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 ": %zu bytes of device "
               "workspace: %s", w->name, job->seq, bytes, wf_status_str(st));
    wf_status_t ss = o->synchronize(w->ctx);
    o->dev_reset(w->ctx);
    if (st == WF_OK)
        st = ss;
out:
    /* not after a layer boundary stopped every rank alike */
    if (st != WF_OK && st != WF_E_DEADLINE && st != WF_E_CANCELLED && w->world)
        wf_comm_abort(w->world);
    return st;
}
